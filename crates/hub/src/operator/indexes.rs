//! The followers that file the store's derived indexes, off the commit:
//! - the party index (`store::party_index`): which transfers name a party,
//!   by block of 16,384 seqs, so that `GET
//!   /transfers?partyIdType=&partyIdentifier=` reads a party's transfers
//!   instead of walking ten million;
//! - the commit index (`store::commit_index`): which commits moved an
//!   account, by minute, so that a DFSP's statement reads its own commits
//!   instead of every DFSP's.
//!
//! The transfer path pays nothing for them: no commit writes an index.
//! Woken by the store's commits (the feed's head), at most once a second
//! once caught up, each files what is wholly committed since the last
//! (a block, a minute), on the feed's connection, on a blocking thread, in
//! a transaction of its own that moves its fence (`party_index.next_block`,
//! `commit_index.next_span`); after an upgrade what was kept before is
//! filed a bounded amount per transaction. A read walks what is not filed
//! yet, so a follower lagging or failing makes searches and statements
//! slower, never wrong. A failure stops only that follower: one log line,
//! again once a minute while it lasts, a retry with backoff; its gauge
//! (`kasi_party_index_unfiled`, `kasi_commit_index_unfiled_seconds`)
//! grows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use store::feed::FeedLog;
use store::{commit_index, party_index};

use crate::feed::{Failures, FeedConfig, Say};
use crate::metrics::Metrics;

/// Once caught up, the least time between two filings: a filing is a
/// write transaction (SQLite's write lock and an fsync) beside the
/// writer's commits.
const FILE_EVERY: Duration = Duration::from_secs(1);

/// What one filing did, as a follower sees it.
struct Progress {
    filed: u64,
    /// How far behind: the gauge's value.
    unfiled: i64,
    caught_up: bool,
}

/// One index a follower files.
struct Index {
    /// As the log lines name it.
    name: &'static str,
    /// What a failure means, for the operator.
    meanwhile: &'static str,
    file: fn(&dyn FeedLog) -> Result<Progress, store::StoreError>,
    unfiled: Gauge,
}

fn file_party_index(log: &dyn FeedLog) -> Result<Progress, store::StoreError> {
    let filing =
        log.file_party_blocks(party_index::MOST_BLOCKS_PER_FILING, party_index::BLOCK_SEQS)?;
    Ok(Progress {
        filed: filing.filed,
        unfiled: i64::try_from(filing.unfiled()).unwrap_or(i64::MAX),
        caught_up: filing.caught_up(),
    })
}

fn file_commit_index(log: &dyn FeedLog) -> Result<Progress, store::StoreError> {
    let filing = log.file_commit_spans(
        commit_index::MOST_SPANS_PER_FILING,
        commit_index::MOST_COMMITS_PER_FILING,
        commit_index::SPAN_MS,
    )?;
    Ok(Progress {
        filed: filing.filed,
        unfiled: filing.unfiled_ms() / 1_000,
        caught_up: filing.caught_up(),
    })
}

/// Runs the followers for ever (tasks of the serving runtime).
pub async fn follow(feed: FeedConfig, metrics: Arc<Metrics>) {
    let party = Index {
        name: "party index",
        meanwhile: "searches by party walk the transfers not filed (kasi_party_index_unfiled)",
        file: file_party_index,
        unfiled: metrics.party_index_unfiled.clone(),
    };
    let commits = Index {
        name: "commit index",
        meanwhile:
            "statements walk every DFSP's commits not filed (kasi_commit_index_unfiled_seconds)",
        file: file_commit_index,
        unfiled: metrics.commit_index_unfiled_seconds.clone(),
    };
    tokio::join!(follow_one(&feed, party), follow_one(&feed, commits));
}

async fn follow_one(feed: &FeedConfig, index: Index) {
    let mut head = feed.head.clone();
    let mut failures = Failures::new();
    let name = index.name;
    loop {
        // Seen before the filing: a commit after it wakes the wait below.
        head.borrow_and_update();
        let log = feed.log.clone();
        let file = index.file;
        let filed = tokio::task::spawn_blocking(move || file(log.as_ref()))
            .await
            .map_err(|error| store::StoreError::transient(error.to_string()))
            .and_then(|filed| filed);
        match filed {
            Ok(progress) => {
                if let Some((after_s, failures)) = failures.succeeded() {
                    tracing::info!(after_s, failures, "{name}: filing again");
                }
                index.unfiled.set(progress.unfiled);
                if !progress.caught_up {
                    continue;
                }
                if progress.filed > 0 {
                    tracing::debug!("{name}: caught up");
                }
                tokio::time::sleep(FILE_EVERY).await;
                if head.changed().await.is_err() {
                    return;
                }
            }
            Err(error) => {
                match failures.failed(Instant::now()) {
                    Say::First => {
                        tracing::warn!(%error, "{name}: filing failed; transfers go on, {}; retrying", index.meanwhile)
                    }
                    Say::Still { for_s, failures } => {
                        tracing::warn!(%error, for_s, failures, "{name}: filing still fails")
                    }
                    Say::Nothing => {}
                }
                tokio::time::sleep(failures.next_wait()).await;
            }
        }
    }
}
