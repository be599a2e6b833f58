//! The hourly rollup (`store::rollup`) as the hub keeps and answers it:
//! the follower that folds the change feed into it, and `GET
//! /stats/hourly`, what the console's dashboard draws.
//!
//! The follower costs the transfer path nothing: no commit writes the
//! rollup. Woken by the store's commits (the feed's head, as the AMQP
//! publisher is), at most once a second once it has caught up (a fold is
//! a write transaction beside the writer's commits), it reads the feed after its durable
//! cursor (`feed_cursors`, name `rollup`) on the feed's own connection, on
//! a blocking thread, and folds each page into the rollup's tables in the
//! same store transaction that moves the cursor — so a crash never loses
//! or double counts a change. A failure (the store unreachable, a change
//! it cannot read) stops only the follower: one log line, again once a
//! minute while it lasts, a retry with backoff, and the lag grows
//! (`kasi_rollup_lag`).
//!
//! `GET /stats/hourly?range=24h|48h|7d|31d` (or `from`, `to`: ISO times or
//! milliseconds, cut to whole hours) answers at most [`MAX_HOURS`] hours.
//! A DFSP-scoped caller reads only the rows whose payer or payee it is:
//! the access table says so (`access::Filter::Rows`), and the store
//! filters by the DFSP the gate hands the handler ([`ScopedTo`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use ledger::ErrorCode;
use serde_json::{json, Value};
use store::feed::FeedLog;
use store::rollup::{self, Fold, Rollup, HOUR_MS, LATENCY_BOUNDS_MS, MAX_HOURS};

use crate::access::ScopedTo;
use crate::feed::{Failures, FeedConfig, Say};
use crate::metrics::Metrics;
use crate::{format_time, Hub, HubError};

/// Changes read per page (the most `read_feed` answers).
const PAGE: usize = store::feed::MAX_PAGE;
/// Pages folded per store transaction at most.
const PAGES_PER_FOLD: usize = 10;
/// Once caught up, the least time between two folds. A fold is a write
/// transaction (SQLite's write lock and an fsync) beside the writer's
/// commits: woken by every commit, the follower would add one to each.
/// Hourly figures a second late cost nobody anything.
const FOLD_EVERY: Duration = Duration::from_secs(1);

/// The presets of `range` (and the console's), in hours.
pub const PRESETS: [(&str, i64); 4] = [("24h", 24), ("48h", 48), ("7d", 7 * 24), ("31d", 31 * 24)];

/// The parameters `GET /stats/hourly` takes.
const PARAMETERS: [&str; 3] = ["range", "from", "to"];

async fn blocking<T: Send + 'static>(
    log: &Arc<dyn FeedLog>,
    work: impl FnOnce(&dyn FeedLog) -> Result<T, store::StoreError> + Send + 'static,
) -> Result<T, store::StoreError> {
    let log = log.clone();
    tokio::task::spawn_blocking(move || work(log.as_ref()))
        .await
        .map_err(|error| store::StoreError::transient(error.to_string()))?
}

/// One fold: up to [`PAGES_PER_FOLD`] pages of the changes it counts
/// (`rollup::KINDS`) read after the cursor, folded in one store
/// transaction that moves the cursor past every change examined. Whether
/// the cursor moved, where it is after, and whether it caught up with the
/// feed.
async fn fold_pages(feed: &FeedConfig) -> Result<(bool, u64, bool), store::StoreError> {
    blocking(&feed.log, |log| {
        // Never set: from the oldest change the feed still keeps.
        let cursor = log.feed_cursor(rollup::CURSOR)?.unwrap_or(0);
        let mut rows = Vec::new();
        let mut after = cursor;
        let mut caught_up = false;
        for round in 0..PAGES_PER_FOLD {
            let mut page = log.read_feed_kinds(after, PAGE, rollup::KINDS)?;
            if round == 0 {
                if let Some(oldest) = page.oldest.filter(|&oldest| oldest > cursor + 1) {
                    tracing::warn!(
                        from = cursor + 1,
                        to = oldest - 1,
                        "hourly rollup: changes past --feed-retention were deleted before they were counted; the dashboard misses them"
                    );
                    // Said once: read on from the oldest change kept.
                    after = oldest - 1;
                    page = log.read_feed_kinds(after, PAGE, rollup::KINDS)?;
                }
            }
            after = page.next_after;
            rows.extend(page.rows);
            if after >= page.newest {
                caught_up = true;
                break;
            }
        }
        if after == cursor {
            return Ok((false, cursor, true));
        }
        log.fold_rollup(cursor, after, &Fold::of(&rows)?)?;
        Ok((true, after, caught_up))
    })
    .await
}

/// Runs the follower for ever (a task of the serving runtime).
pub async fn follow(feed: FeedConfig, metrics: Arc<Metrics>) {
    let mut head = feed.head.clone();
    let mut failures = Failures::new();
    let mut cursor = 0u64;
    loop {
        // Seen before the read: a commit after it wakes the wait below.
        let through = *head.borrow_and_update();
        match fold_pages(&feed).await {
            Ok((moved, at, caught_up)) => {
                cursor = at;
                if let Some((after_s, failures)) = failures.succeeded() {
                    tracing::info!(after_s, failures, "hourly rollup: folding again");
                }
                metrics
                    .rollup_lag
                    .set(through.max(*head.borrow()).saturating_sub(cursor) as i64);
                if caught_up {
                    if moved {
                        tokio::time::sleep(FOLD_EVERY).await;
                    } else if head.changed().await.is_err() {
                        return;
                    }
                }
            }
            Err(error) => {
                metrics
                    .rollup_lag
                    .set(through.saturating_sub(cursor) as i64);
                match failures.failed(Instant::now()) {
                    Say::First => {
                        tracing::warn!(%error, "hourly rollup: folding the change feed failed; transfers go on, the dashboard lags (kasi_rollup_lag); retrying")
                    }
                    Say::Still { for_s, failures } => {
                        tracing::warn!(%error, for_s, failures, "hourly rollup: folding still fails")
                    }
                    Say::Nothing => {}
                }
                tokio::time::sleep(failures.next_wait()).await;
            }
        }
    }
}

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/stats/hourly", get(hourly))
        .with_state(hub)
}

fn invalid(description: String) -> HubError {
    HubError::new(
        ErrorCode::GENERIC_VALIDATION_ERROR,
        format!("Generic validation error - {description}"),
    )
}

/// The hours `[from, to)` the query asks for, whole hours, or why not.
pub fn hours_asked(query: &HashMap<String, String>, now_ms: i64) -> Result<(i64, i64), HubError> {
    if let Some(unknown) = query.keys().find(|k| !PARAMETERS.contains(&k.as_str())) {
        return Err(invalid(format!(
            "unknown parameter '{unknown}'; known: {}",
            PARAMETERS.join(", ")
        )));
    }
    let instant = |name: &str| crate::admin_transfers::instant(query, name);
    let (from, to) = (instant("from")?, instant("to")?);
    let range = query
        .get("range")
        .map(|r| r.trim())
        .filter(|r| !r.is_empty());
    // The hour now is counted as far as it went.
    let next_hour = rollup::hour_of(now_ms) + HOUR_MS;
    let up = |ms: i64| rollup::hour_of(ms.saturating_add(HOUR_MS - 1));
    let (from_ms, to_ms) = match (range, from, to) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(invalid("range, or from and to, not both".into()))
        }
        (Some(range), None, None) => {
            let hours = PRESETS
                .iter()
                .find(|(name, _)| *name == range)
                .map(|(_, hours)| *hours)
                .ok_or_else(|| {
                    let names: Vec<&str> = PRESETS.iter().map(|(name, _)| *name).collect();
                    invalid(format!(
                        "range '{range}' is not one of {}",
                        names.join(", ")
                    ))
                })?;
            (next_hour - hours * HOUR_MS, next_hour)
        }
        (None, from, to) => {
            let to_ms = to.map_or(next_hour, up);
            let from_ms = rollup::hour_of(from.unwrap_or(to_ms - 24 * HOUR_MS));
            (from_ms, to_ms)
        }
    };
    if from_ms >= to_ms {
        return Err(invalid("from must be before to".into()));
    }
    if to_ms.saturating_sub(from_ms) > MAX_HOURS * HOUR_MS {
        return Err(invalid(format!(
            "at most {MAX_HOURS} hours (31 days) at once, not {}",
            to_ms.saturating_sub(from_ms) / HOUR_MS
        )));
    }
    Ok((from_ms, to_ms))
}

/// `GET /stats/hourly`.
async fn hourly(
    State(hub): State<Arc<Hub>>,
    Query(query): Query<HashMap<String, String>>,
    scope: Option<Extension<ScopedTo>>,
) -> Result<Response, HubError> {
    let (from_ms, to_ms) = hours_asked(&query, crate::now_ms())?;
    let Some(feed) = hub.config.feed.clone() else {
        return Err(HubError::new(
            ErrorCode::SERVICE_UNAVAILABLE,
            "Service currently unavailable - this hub keeps no change feed, so no hourly rollup",
        ));
    };
    let scope = scope.map(|Extension(ScopedTo(dfsp))| dfsp.as_str().to_string());
    let newest = *feed.head.borrow();
    let rollup = blocking(&feed.log, move |log| {
        log.read_rollup(from_ms, to_ms, scope.as_deref())
    })
    .await
    .map_err(|error| {
        tracing::warn!(%error, "reading the hourly rollup failed");
        HubError::new(
            ErrorCode::SERVICE_UNAVAILABLE,
            "Service currently unavailable - the hourly rollup could not be read",
        )
    })?;
    Ok(Json(hourly_json(&rollup, from_ms, to_ms, newest)).into_response())
}

/// The answer: the range, how far the rollup counted, and its rows.
pub fn hourly_json(rollup: &Rollup, from_ms: i64, to_ms: i64, newest: u64) -> Value {
    let pairs: Vec<Value> = rollup
        .pairs
        .iter()
        .map(|(key, counts)| {
            json!({
                "hour": format_time(key.hour_ms),
                "currency": key.currency,
                "payer": key.payer,
                "payee": key.payee,
                "committed": counts.committed,
                "amount": counts.amount.to_string(),
                "failed": counts.failed,
            })
        })
        .collect();
    let errors: Vec<Value> = rollup
        .errors
        .iter()
        .map(|(hour_ms, payer, payee, code, failures)| {
            json!({
                "hour": format_time(*hour_ms),
                "payer": payer,
                "payee": payee,
                "errorCode": code,
                "failures": failures,
            })
        })
        .collect();
    let latency: Vec<Value> = rollup
        .latency
        .iter()
        .map(|((payer, payee), buckets)| {
            json!({
                "payer": payer,
                "payee": payee,
                "transfers": buckets.iter().sum::<u64>(),
                "p99Ms": rollup::percentile_ms(buckets, 99),
                "buckets": buckets.to_vec(),
            })
        })
        .collect();
    json!({
        "from": format_time(from_ms),
        "to": format_time(to_ms),
        "hours": (to_ms - from_ms) / HOUR_MS,
        "countedThroughFeedSeq": rollup.through,
        "feedNewest": newest.max(rollup.through),
        "latencyBucketsMs": LATENCY_BOUNDS_MS.to_vec(),
        "pairs": pairs,
        "errors": errors,
        "latency": latency,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(pairs: &[(&str, &str)]) -> Result<(i64, i64), String> {
        let query = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        hours_asked(&query, 10 * HOUR_MS + 5).map_err(|e| e.to_string())
    }

    #[test]
    fn ranges_are_whole_hours_and_bounded() {
        assert_eq!(asked(&[]), Ok((-13 * HOUR_MS, 11 * HOUR_MS)));
        assert_eq!(
            asked(&[("range", "48h")]),
            Ok((-37 * HOUR_MS, 11 * HOUR_MS))
        );
        assert_eq!(
            asked(&[("from", "1"), ("to", &(2 * HOUR_MS).to_string())]),
            Ok((0, 2 * HOUR_MS))
        );
        assert_eq!(
            asked(&[
                ("from", "1970-01-01T00:30:00.000Z"),
                ("to", "1970-01-01T01:00:00.001Z")
            ]),
            Ok((0, 2 * HOUR_MS))
        );
        let too_long = (32 * 24 * HOUR_MS).to_string();
        for (bad, says) in [
            (vec![("range", "1y")], "is not one of 24h, 48h, 7d, 31d"),
            (
                vec![("from", "0"), ("to", too_long.as_str())],
                "at most 744 hours",
            ),
            (vec![("range", "24h"), ("from", "0")], "not both"),
            (vec![("from", "7200000"), ("to", "3600000")], "before"),
            (vec![("from", "yesterday")], "date-time"),
            (vec![("currency", "USD")], "unknown parameter 'currency'"),
        ] {
            let error = asked(&bad).expect_err(says);
            assert!(error.contains(says), "{error}");
        }
    }
}
