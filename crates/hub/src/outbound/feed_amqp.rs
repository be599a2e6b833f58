//! The change feed's publisher (`--feed-amqp-url`): every change, in
//! order, to a durable topic exchange of an AMQP 0.9.1 broker (RabbitMQ),
//! routing key `<kind>.<participant>`, message id the `feedSeq`,
//! persistent, with publisher confirms.
//!
//! At least once: it reads the feed after its durable cursor (a row of its
//! own in the store, `store::feed::FeedLog::feed_cursor`), publishes a
//! page, waits for the broker's confirms, and only then moves the cursor.
//! After a crash of the hub or the broker it publishes again from the
//! cursor, so a consumer deduplicates by `feedSeq`.
//!
//! It never touches the transfer path: it reads the store on the feed's
//! own connection, and a broker that is down stops only the publisher —
//! it reconnects with backoff, the lag grows (`kasi_feed_lag`), and one
//! log line per outage (then one a minute while it lasts) says so. It is
//! woken by the store's commits (the feed's head), never by a timer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use store::feed::FeedPage;

use crate::feed::{blocking, change_json, Failures, FeedConfig, Say};
use crate::metrics::Metrics;

/// Where the publisher sends the feed.
#[derive(Clone)]
pub struct AmqpSettings {
    /// `amqp://USER:PASSWORD@HOST:PORT/VHOST`.
    pub url: String,
    pub exchange: String,
}

/// Changes published per round (their confirms awaited together).
const PAGE: usize = 500;

/// The cursor's name in the store: one per exchange, so that a second
/// exchange starts from the beginning.
pub fn cursor_name(exchange: &str) -> String {
    format!("amqp:{exchange}")
}

/// Runs the publisher for ever (a task of the serving runtime).
pub async fn publish(feed: FeedConfig, settings: AmqpSettings, metrics: Arc<Metrics>) {
    let cursor = Arc::new(AtomicU64::new(0));
    // The lag follows the commits even while the broker is down.
    crate::feed::track_lag(&feed, cursor.clone(), metrics.feed_lag.clone());
    let redacted = store::pg::redact_url(&settings.url);
    let mut failures = Failures::new();
    loop {
        let error = session(&feed, &settings, &metrics, &cursor, &mut failures).await;
        match failures.failed(Instant::now()) {
            Say::First => {
                tracing::warn!(broker = %redacted, %error, "change feed publisher: the broker cannot be reached; transfers go on, the feed's lag grows (kasi_feed_lag); reconnecting")
            }
            Say::Still { for_s, failures } => {
                tracing::warn!(broker = %redacted, %error, for_s, failures, "change feed publisher: the broker still cannot be reached")
            }
            Say::Nothing => {}
        }
        tokio::time::sleep(failures.next_wait()).await;
    }
}

/// One connection's life: returns why it ended.
async fn session(
    feed: &FeedConfig,
    settings: &AmqpSettings,
    metrics: &Metrics,
    published: &AtomicU64,
    failures: &mut Failures,
) -> String {
    let connection = match Connection::connect(&settings.url, ConnectionProperties::default()).await
    {
        Ok(connection) => connection,
        Err(error) => return format!("connect: {error}"),
    };
    let channel = match connection.create_channel().await {
        Ok(channel) => channel,
        Err(error) => return format!("channel: {error}"),
    };
    if let Err(error) = channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
    {
        return format!("confirm.select: {error}");
    }
    if let Err(error) = channel
        .exchange_declare(
            settings.exchange.as_str().into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
    {
        return format!("exchange.declare {}: {error}", settings.exchange);
    }
    let name = cursor_name(&settings.exchange);
    let mut cursor = match blocking(&feed.log, {
        let name = name.clone();
        move |log| log.feed_cursor(&name)
    })
    .await
    {
        Ok(cursor) => cursor.unwrap_or(0),
        Err(error) => return error,
    };
    published.store(cursor, Ordering::Relaxed);
    match failures.succeeded() {
        Some((after_s, failures)) => tracing::info!(
            exchange = %settings.exchange,
            after_s,
            failures,
            from_feed_seq = cursor + 1,
            "change feed publisher: the broker is reachable again; publishing from the cursor"
        ),
        None => tracing::info!(
            exchange = %settings.exchange,
            from_feed_seq = cursor + 1,
            "change feed publisher: publishing"
        ),
    }
    let mut head = feed.head.clone();
    loop {
        // Seen before the read: a commit after it wakes the wait below.
        head.borrow_and_update();
        let page: FeedPage =
            match blocking(&feed.log, move |log| log.read_feed(cursor, PAGE, None)).await {
                Ok(page) => page,
                Err(error) => return error,
            };
        metrics
            .feed_lag
            .set(page.newest.saturating_sub(cursor) as i64);
        let first = page.rows.first().map(|row| row.feed_seq);
        if let Some(oldest) = page.oldest.filter(|&oldest| cursor + 1 < oldest) {
            // Deleted by retention before the broker had them: said, and
            // passed over (consumers resynchronise from the search).
            if first.is_none_or(|first| first > cursor + 1) {
                tracing::warn!(
                    from = cursor + 1,
                    to = oldest - 1,
                    "change feed publisher: changes past --feed-retention were deleted before they were published"
                );
            }
        }
        if page.rows.is_empty() {
            if head.changed().await.is_err() {
                return "the hub is stopping".to_string();
            }
            continue;
        }
        let mut confirms = Vec::with_capacity(page.rows.len());
        for row in &page.rows {
            let body = serde_json::to_vec(&change_json(row)).expect("JSON to memory");
            let routing_key = format!("{}.{}", row.kind, row.participant);
            let properties = BasicProperties::default()
                .with_message_id(row.feed_seq.to_string().into())
                .with_content_type("application/json".into())
                .with_delivery_mode(2)
                .with_timestamp((row.at_ms / 1000).max(0) as u64);
            match channel
                .basic_publish(
                    settings.exchange.as_str().into(),
                    routing_key.into(),
                    BasicPublishOptions::default(),
                    &body,
                    properties,
                )
                .await
            {
                Ok(confirm) => confirms.push(confirm),
                Err(error) => return format!("publish: {error}"),
            }
        }
        for confirm in confirms {
            match confirm.await {
                Ok(confirmation) if confirmation.is_ack() => {}
                Ok(_) => return "the broker refused a change (nack)".to_string(),
                Err(error) => return format!("confirm: {error}"),
            }
        }
        let last = page.rows.last().map_or(cursor, |row| row.feed_seq);
        let count = page.rows.len() as u64;
        if let Err(error) = blocking(&feed.log, {
            let name = name.clone();
            move |log| log.set_feed_cursor(&name, last)
        })
        .await
        {
            return error;
        }
        cursor = last;
        published.store(cursor, Ordering::Relaxed);
        metrics.feed_published.inc_by(count);
        metrics
            .feed_lag
            .set((*head.borrow()).max(page.newest).saturating_sub(cursor) as i64);
    }
}
