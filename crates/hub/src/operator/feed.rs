//! `GET /feed?after=&limit=&wait=` on the admin address: the change feed
//! (`store::feed`) as NDJSON, one change per line in commit order, for a
//! consumer that follows it and resumes after any crash from the last
//! `feedSeq` it kept.
//!
//! With `wait` the request long-polls: it is woken by the store's commit
//! of a change past `after` (the store tells [`FeedConfig::head`] the last
//! durable `feed_seq`; nothing polls on a timer), or answers what it has
//! (possibly nothing) when the wait ends. Reads run on the store's own
//! connection for the feed, on a blocking thread, never on the ledger
//! thread. A cursor older than retention is told so (410) with how to
//! resynchronise.
//!
//! A DFSP-scoped caller reads only its own DFSP's changes: the access
//! table says so (`access::Filter::Rows`), and the gate hands the handler
//! the DFSP ([`access::ScopedTo`]), which the store filters by.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use ledger::ErrorCode;
use serde_json::{Map, Value};
use store::feed::{FeedLog, FeedPage, FeedRow};
use tokio::sync::watch;

use crate::access::ScopedTo;
use crate::{format_time, Hub, HubError};

/// The longest `wait` a request may ask.
pub const MAX_WAIT: Duration = Duration::from_secs(60);
/// Changes a page holds when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 100;
/// How often retention runs at most rarely (each pass deletes in chunks
/// until nothing is older than the horizon); a quarter of a shorter
/// retention.
pub const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Between two chunks of a pass: the transfer path's commits go first.
const PRUNE_PAUSE: Duration = Duration::from_millis(50);

/// The feed as the hub reaches it.
#[derive(Clone, Debug)]
pub struct FeedConfig {
    /// The store's connection for the feed.
    pub log: Arc<dyn FeedLog>,
    /// The last durable `feed_seq`, told by the store after each commit.
    pub head: watch::Receiver<u64>,
    /// `--feed-retention`: older changes are deleted.
    pub retention: Duration,
}

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new().route("/feed", get(read_feed)).with_state(hub)
}

fn invalid(description: String) -> HubError {
    HubError::new(ErrorCode::GENERIC_VALIDATION_ERROR, description)
}

/// The query's `after`, `limit` and `wait`.
fn parameters(query: &HashMap<String, String>) -> Result<(u64, usize, Duration), HubError> {
    let number = |name: &str| -> Result<Option<u64>, HubError> {
        query
            .get(name)
            .map(|text| {
                text.parse::<u64>().map_err(|_| {
                    invalid(format!(
                        "Generic validation error - {name} must be a whole number, not {text:?}"
                    ))
                })
            })
            .transpose()
    };
    let after = number("after")?.unwrap_or(0);
    let limit = match number("limit")? {
        None => DEFAULT_LIMIT,
        Some(limit) if (1..=store::feed::MAX_PAGE as u64).contains(&limit) => limit as usize,
        Some(limit) => {
            return Err(invalid(format!(
                "Generic validation error - limit must be 1 to {}, not {limit}",
                store::feed::MAX_PAGE
            )))
        }
    };
    let wait = match number("wait")? {
        None => Duration::ZERO,
        Some(seconds) if seconds <= MAX_WAIT.as_secs() => Duration::from_secs(seconds),
        Some(seconds) => {
            return Err(invalid(format!(
                "Generic validation error - wait must be 0 to {} seconds, not {seconds}",
                MAX_WAIT.as_secs()
            )))
        }
    };
    Ok((after, limit, wait))
}

async fn read_page(
    log: &Arc<dyn FeedLog>,
    after: u64,
    limit: usize,
    scope: Option<&str>,
) -> Result<FeedPage, HubError> {
    let log = log.clone();
    let scope = scope.map(str::to_string);
    tokio::task::spawn_blocking(move || log.read_feed(after, limit, scope.as_deref()))
        .await
        .map_err(|error| HubError::new(ErrorCode::INTERNAL_SERVER_ERROR, error.to_string()))?
        .map_err(|error| {
            tracing::warn!(%error, "reading the change feed failed");
            HubError::new(
                ErrorCode::SERVICE_UNAVAILABLE,
                "Service currently unavailable - the change feed could not be read",
            )
        })
}

/// One change as a line of the answer (and an AMQP message's body).
pub fn change_json(row: &FeedRow) -> Value {
    let mut object = Map::new();
    object.insert("feedSeq".into(), Value::from(row.feed_seq));
    object.insert("at".into(), Value::from(format_time(row.at_ms)));
    object.insert("kind".into(), Value::from(row.kind.as_str()));
    object.insert("participant".into(), Value::from(row.participant.as_str()));
    if let Some(counterparty) = &row.counterparty {
        object.insert("counterparty".into(), Value::from(counterparty.as_str()));
    }
    object.insert("key".into(), Value::from(row.key.as_str()));
    for (name, value) in store::feed::transfer_fields(&row.kind, &row.key)
        .into_iter()
        .flatten()
    {
        object.insert(name.into(), Value::from(value));
    }
    if let Ok(Value::Object(body)) = serde_json::from_str::<Value>(&row.body) {
        for (name, value) in body {
            object.entry(name).or_insert(value);
        }
    }
    Value::Object(object)
}

async fn read_feed(
    State(hub): State<Arc<Hub>>,
    Query(query): Query<HashMap<String, String>>,
    scope: Option<Extension<ScopedTo>>,
) -> Result<Response, HubError> {
    let (after, limit, wait) = parameters(&query)?;
    let Some(feed) = hub.config.feed.clone() else {
        return Err(HubError::new(
            ErrorCode::SERVICE_UNAVAILABLE,
            "Service currently unavailable - this hub keeps no change feed",
        ));
    };
    let scope = scope.map(|Extension(ScopedTo(dfsp))| dfsp.as_str().to_string());
    let mut head = feed.head.clone();
    // Seen before the read: a commit after it wakes the wait below.
    head.borrow_and_update();
    let mut page = read_page(&feed.log, after, limit, scope.as_deref()).await?;
    // `after=0` (or none) is a new consumer: it starts at the oldest kept.
    // A cursor past which changes were deleted would miss them: refused.
    if let Some(oldest) = page
        .oldest
        .filter(|&oldest| after > 0 && after.saturating_add(1) < oldest)
    {
        return Ok(gone(after, oldest, feed.retention));
    }
    if page.rows.is_empty() && !wait.is_zero() {
        let deadline = tokio::time::Instant::now() + wait;
        while let Ok(Ok(())) = tokio::time::timeout_at(deadline, head.changed()).await {
            let through = *head.borrow_and_update();
            if through <= page.next_after {
                continue;
            }
            page = read_page(&feed.log, page.next_after, limit, scope.as_deref()).await?;
            if !page.rows.is_empty() {
                break;
            }
        }
    }
    let mut body = Vec::with_capacity(page.rows.len() * 300);
    for row in &page.rows {
        serde_json::to_writer(&mut body, &change_json(row)).expect("JSON to memory");
        body.push(b'\n');
    }
    let mut response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        body,
    )
        .into_response();
    // Where to go on: for a DFSP-scoped reader the rows examined may reach
    // past the last of its own.
    let headers = response.headers_mut();
    headers.insert("kasi-feed-next", HeaderValue::from(page.next_after));
    headers.insert("kasi-feed-newest", HeaderValue::from(page.newest));
    Ok(response)
}

/// 410 in the admin API's error format: the changes after `after` were
/// deleted by retention.
fn gone(after: u64, oldest: u64, retention: Duration) -> Response {
    // FSPIOP descriptions are cut at 128 characters: the essentials
    // first; the retention rides in a header.
    let description = format!(
        "Generic client error - changes after {after} are deleted: resync via GET /transfers, \
         then read from after={}",
        oldest - 1
    );
    let mut response = (
        StatusCode::GONE,
        [(header::CONTENT_TYPE, "application/json")],
        fspiop::answer_body(ErrorCode::GENERIC_CLIENT_ERROR, &description),
    )
        .into_response();
    response.headers_mut().insert(
        "kasi-feed-retention-seconds",
        HeaderValue::from(retention.as_secs()),
    );
    response
}

/// Retention: every [`PRUNE_EVERY`] (or a quarter of a shorter retention),
/// the changes older than the horizon are deleted a chunk at a time
/// (`store::feed::PRUNE_CHUNK`), with a pause between chunks, off the
/// transfer path.
/// Keeps `gauge` at the feed's head less `cursor` as commits come, so
/// that a follower held up (a broker, an SMTP server down) shows its lag
/// growing; the follower sets `cursor` as it moves.
pub fn track_lag(
    feed: &FeedConfig,
    cursor: Arc<std::sync::atomic::AtomicU64>,
    gauge: prometheus_client::metrics::gauge::Gauge,
) {
    let mut head = feed.head.clone();
    tokio::spawn(async move {
        while head.changed().await.is_ok() {
            let through = *head.borrow_and_update();
            let done = cursor.load(std::sync::atomic::Ordering::Relaxed);
            gauge.set(through.saturating_sub(done) as i64);
        }
    });
}

/// A follower's first wait after a failure; each failure in a row doubles
/// it, up to [`RETRY_MOST`].
pub(crate) const RETRY_FIRST: Duration = Duration::from_millis(200);
pub(crate) const RETRY_MOST: Duration = Duration::from_secs(10);
/// While a follower's failures last, how often they are said again.
pub(crate) const FAILURES_SAID_EVERY: Duration = Duration::from_secs(60);

/// What a follower of the feed says about a failure (its own words: each
/// follower names what lags).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Say {
    /// The first of a run: say what fails and what it means.
    First,
    /// Still failing, a minute (or more) after it was last said.
    Still { for_s: u64, failures: u64 },
    /// Said recently: nothing.
    Nothing,
}

/// A follower's run of failures and its backoff: the first failure said
/// at once, again once a minute while they last, their end once, and
/// between attempts a wait from [`RETRY_FIRST`] doubling to
/// [`RETRY_MOST`] — so a store or broker down for an hour costs a few
/// log lines, and a follower retries quickly after a blip.
pub(crate) struct Failures {
    backoff: Duration,
    /// Since when, when last said, how many.
    run: Option<(Instant, Instant, u64)>,
}

impl Failures {
    pub(crate) fn new() -> Failures {
        Failures {
            backoff: RETRY_FIRST,
            run: None,
        }
    }

    /// The work succeeded: the backoff starts over. When it ends a run of
    /// failures, how long it lasted (s) and how many, to say once.
    pub(crate) fn succeeded(&mut self) -> Option<(u64, u64)> {
        self.backoff = RETRY_FIRST;
        self.run
            .take()
            .map(|(since, _, failures)| (since.elapsed().as_secs(), failures))
    }

    /// The work failed at `now`: what to say about it.
    pub(crate) fn failed(&mut self, now: Instant) -> Say {
        match &mut self.run {
            None => {
                self.run = Some((now, now, 1));
                Say::First
            }
            Some((since, said, failures)) => {
                *failures += 1;
                if now.duration_since(*said) >= FAILURES_SAID_EVERY {
                    *said = now;
                    Say::Still {
                        for_s: now.duration_since(*since).as_secs(),
                        failures: *failures,
                    }
                } else {
                    Say::Nothing
                }
            }
        }
    }

    /// The wait before the next attempt; the one after will be twice it.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(RETRY_MOST);
        wait
    }
}

/// Runs `work` on the feed's connection off the runtime's threads.
pub(crate) async fn blocking<T: Send + 'static>(
    log: &Arc<dyn FeedLog>,
    work: impl FnOnce(&dyn FeedLog) -> Result<T, store::StoreError> + Send + 'static,
) -> Result<T, String> {
    let log = log.clone();
    tokio::task::spawn_blocking(move || work(log.as_ref()))
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| format!("the store: {error}"))
}

pub async fn keep_retention(feed: FeedConfig) {
    let retention_ms = i64::try_from(feed.retention.as_millis()).unwrap_or(i64::MAX);
    let every = (feed.retention / 4).clamp(Duration::from_secs(1), PRUNE_EVERY);
    let mut failing = false;
    loop {
        let before_ms = crate::now_ms().saturating_sub(retention_ms);
        let mut deleted = 0usize;
        loop {
            let log = feed.log.clone();
            match tokio::task::spawn_blocking(move || log.prune_feed(before_ms)).await {
                Ok(Ok(0)) => break,
                Ok(Ok(chunk)) => {
                    deleted += chunk;
                    failing = false;
                    tokio::time::sleep(PRUNE_PAUSE).await;
                }
                Ok(Err(error)) => {
                    if !failing {
                        tracing::warn!(%error, "change feed retention failed; tried again later");
                    }
                    failing = true;
                    break;
                }
                Err(_) => break,
            }
        }
        if deleted > 0 {
            tracing::info!(deleted, "change feed: changes past retention deleted");
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_bounded() {
        let query = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let (after, limit, wait) = parameters(&query(&[])).unwrap();
        assert_eq!((after, limit, wait), (0, DEFAULT_LIMIT, Duration::ZERO));
        let (after, limit, wait) =
            parameters(&query(&[("after", "7"), ("limit", "1000"), ("wait", "60")])).unwrap();
        assert_eq!((after, limit, wait), (7, 1000, MAX_WAIT));
        for bad in [
            ("limit", "0"),
            ("limit", "1001"),
            ("wait", "61"),
            ("after", "-1"),
        ] {
            let error = parameters(&query(&[bad])).unwrap_err();
            assert_eq!(error.code, ErrorCode::GENERIC_VALIDATION_ERROR, "{bad:?}");
        }
    }

    #[test]
    fn a_change_line_carries_the_body_fields() {
        let row = FeedRow {
            feed_seq: 9,
            at_ms: 0,
            kind: "transfer.committed".into(),
            participant: "payerfsp".into(),
            counterparty: Some("payeefsp".into()),
            key: "t1".into(),
            body: r#"{"transferId":"t1","amount":"5","kind":"not this one"}"#.into(),
        };
        let line = change_json(&row);
        assert_eq!(line["feedSeq"], 9);
        assert_eq!(line["kind"], "transfer.committed");
        assert_eq!(line["amount"], "5");
        assert_eq!(line["at"], "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn a_followers_failures_are_said_once_then_once_a_minute_and_waits_double_to_the_most() {
        let mut failures = Failures::new();
        assert_eq!(failures.succeeded(), None, "nothing failed yet");
        let start = Instant::now();
        assert_eq!(failures.failed(start), Say::First);
        assert_eq!(failures.next_wait(), RETRY_FIRST);
        assert_eq!(
            failures.failed(start + Duration::from_secs(1)),
            Say::Nothing
        );
        assert_eq!(failures.next_wait(), RETRY_FIRST * 2);
        assert_eq!(
            failures.failed(start + FAILURES_SAID_EVERY),
            Say::Still {
                for_s: FAILURES_SAID_EVERY.as_secs(),
                failures: 3
            }
        );
        // Said again a minute after it was last said, not after the first.
        assert_eq!(
            failures.failed(start + FAILURES_SAID_EVERY + Duration::from_secs(30)),
            Say::Nothing
        );
        let waits: Vec<Duration> = (0..10).map(|_| failures.next_wait()).collect();
        assert_eq!(waits[0], RETRY_FIRST * 4);
        assert!(waits.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*waits.last().unwrap(), RETRY_MOST);
        // The run ends once, with its count; the backoff starts over.
        assert_eq!(failures.succeeded().map(|(_, n)| n), Some(4));
        assert_eq!(failures.succeeded(), None);
        assert_eq!(failures.next_wait(), RETRY_FIRST);
        assert_eq!(failures.failed(start + 2 * FAILURES_SAID_EVERY), Say::First);
    }
}
