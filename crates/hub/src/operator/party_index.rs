//! The follower that files the party index (`store::party_index`): which
//! transfers name a party, by block of 16,384 seqs, so that `GET
//! /transfers?partyIdType=&partyIdentifier=` reads a party's transfers
//! instead of walking ten million.
//!
//! The transfer path pays nothing for it: no commit writes the index.
//! Woken by the store's commits (the feed's head), at most once a second
//! once caught up, it files each block wholly committed since the last, on
//! the feed's connection, on a blocking thread, in a transaction of its
//! own that moves `party_index.next_block` (a block completes every few
//! seconds at thousands of transfers a second; after an upgrade the
//! blocks kept before are filed a few per transaction). A search walks
//! the transfers no filed block covers yet one by one, so the follower
//! lagging or failing makes searches by party slower, never wrong. A
//! failure stops only the follower: one log line, again once a minute
//! while it lasts, a retry with backoff; `kasi_party_index_unfiled` grows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use store::feed::FeedLog;
use store::party_index::{Filing, BLOCK_SEQS, MOST_BLOCKS_PER_FILING};

use crate::feed::{Failures, FeedConfig, Say};
use crate::metrics::Metrics;

/// Once caught up, the least time between two filings: a filing is a
/// write transaction (SQLite's write lock and an fsync) beside the
/// writer's commits.
const FILE_EVERY: Duration = Duration::from_secs(1);

async fn file(log: &Arc<dyn FeedLog>) -> Result<Filing, store::StoreError> {
    let log = log.clone();
    tokio::task::spawn_blocking(move || log.file_party_blocks(MOST_BLOCKS_PER_FILING, BLOCK_SEQS))
        .await
        .map_err(|error| store::StoreError::transient(error.to_string()))?
}

/// Runs the follower for ever (a task of the serving runtime).
pub async fn follow(feed: FeedConfig, metrics: Arc<Metrics>) {
    let mut head = feed.head.clone();
    let mut failures = Failures::new();
    loop {
        // Seen before the filing: a commit after it wakes the wait below.
        head.borrow_and_update();
        match file(&feed.log).await {
            Ok(filing) => {
                if let Some((after_s, failures)) = failures.succeeded() {
                    tracing::info!(after_s, failures, "party index: filing again");
                }
                metrics
                    .party_index_unfiled
                    .set(i64::try_from(filing.unfiled()).unwrap_or(i64::MAX));
                if !filing.caught_up() {
                    continue;
                }
                if filing.filed > 0 {
                    tracing::debug!(next_block = filing.next_block, "party index: caught up");
                }
                tokio::time::sleep(FILE_EVERY).await;
                if head.changed().await.is_err() {
                    return;
                }
            }
            Err(error) => {
                match failures.failed(Instant::now()) {
                    Say::First => {
                        tracing::warn!(%error, "party index: filing failed; transfers go on, searches by party walk the transfers not filed (kasi_party_index_unfiled); retrying")
                    }
                    Say::Still { for_s, failures } => {
                        tracing::warn!(%error, for_s, failures, "party index: filing still fails")
                    }
                    Say::Nothing => {}
                }
                tokio::time::sleep(failures.next_wait()).await;
            }
        }
    }
}
