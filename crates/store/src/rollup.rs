//! The hourly rollup of the change feed (`docs/design/back-office.md`,
//! "Console"): what the dashboard reads, so that a month's chart reads a
//! few hundred rows per series, never millions of transfers.
//!
//! It costs the transfer path nothing: no commit writes it. A follower in
//! the hub (`hub::rollup`) reads the feed after its own durable cursor
//! (`feed_cursors`, name [`CURSOR`]) and hands each page to
//! [`FeedLog::fold_rollup`](crate::feed::FeedLog::fold_rollup), which adds
//! the page's [`Fold`] to the tables and moves the cursor in ONE
//! transaction, refusing if the cursor is not where the follower read from:
//! every change is counted exactly once, across crashes and a second hub.
//!
//! Only FSPIOP transfers' finishes count (`transfer.committed`, and
//! `.aborted`, `.expired`, `.rejected` as failures), in the hour of the
//! finish (UTC), keyed by currency, payer and payee:
//!
//! - `rollup_pairs`: committed count, committed amount (the store's exact
//!   decimal TEXT, summed in Rust, never a float), failed count;
//! - `rollup_errors`: failures by error code;
//! - `rollup_latency`: prepare-to-finish time of committed, aborted and
//!   expired transfers (`preparedAtMs` of the finish's change) in fixed
//!   buckets ([`LATENCY_BOUNDS_MS`]), from which a percentile is read as
//!   the upper bound of its bucket.
//!
//! Every row names its payer and payee, so a DFSP's share is the rows it
//! is either of (the query filters them in the store).

use std::collections::BTreeMap;

use ledger::Amount;
use serde::Deserialize;
use std::borrow::Cow;

use crate::feed::FeedRow;
use crate::StoreError;

/// The rollup follower's cursor in `feed_cursors`.
pub const CURSOR: &str = "rollup";

/// The kinds of change the rollup folds (a transfer's finish), the first
/// committed; the follower reads only these (`FeedLog::read_feed_kinds`).
pub const KINDS: &[&str] = &[
    "transfer.committed",
    "transfer.aborted",
    "transfer.expired",
    "transfer.rejected",
];

/// An hour in milliseconds.
pub const HOUR_MS: i64 = 3_600_000;

/// The most hours one read spans (31 days).
pub const MAX_HOURS: i64 = 31 * 24;

/// The latency buckets' upper bounds (ms); a time above the last falls in
/// one more bucket, "over 60 s".
pub const LATENCY_BOUNDS_MS: [i64; 15] = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 60_000,
];

/// The buckets of a histogram ([`LATENCY_BOUNDS_MS`] and "over").
pub const BUCKETS: usize = LATENCY_BOUNDS_MS.len() + 1;

/// The start of the UTC hour of `at_ms`.
pub fn hour_of(at_ms: i64) -> i64 {
    at_ms.div_euclid(HOUR_MS) * HOUR_MS
}

/// The bucket of a prepare-to-finish time.
pub fn bucket_of(latency_ms: i64) -> usize {
    LATENCY_BOUNDS_MS
        .iter()
        .position(|&bound| latency_ms <= bound)
        .unwrap_or(LATENCY_BOUNDS_MS.len())
}

/// A percentile (`0 < p <= 100`) of a histogram, as its bucket's upper
/// bound in ms (`None`: empty, or above the last bound).
pub fn percentile_ms(buckets: &[u64; BUCKETS], p: u64) -> Option<i64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    // The smallest bucket holding the ceil(total * p / 100)-th time.
    let rank = (total * p).div_ceil(100).max(1);
    let mut seen = 0;
    for (bucket, count) in buckets.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return LATENCY_BOUNDS_MS.get(bucket).copied();
        }
    }
    None
}

/// A pair's hour.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PairKey {
    pub hour_ms: i64,
    pub currency: String,
    pub payer: String,
    pub payee: String,
}

/// What a pair did in an hour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairCounts {
    pub committed: u64,
    pub amount: Amount,
    pub failed: u64,
}

/// A page of the feed, added up by key: what
/// [`FeedLog::fold_rollup`](crate::feed::FeedLog::fold_rollup) adds to the
/// tables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fold {
    pub pairs: BTreeMap<PairKey, PairCounts>,
    /// (hour, payer, payee, error code) → failures.
    pub errors: BTreeMap<(i64, String, String, String), u64>,
    /// (hour, payer, payee, bucket) → transfers.
    pub latency: BTreeMap<(i64, String, String, usize), u64>,
}

impl Fold {
    /// The page's changes added up. A transfer's change the store wrote
    /// is read strictly: one it cannot read is an error, not a skip, so
    /// the follower stops (and says so) rather than count wrong.
    pub fn of(rows: &[FeedRow]) -> Result<Fold, StoreError> {
        let mut fold = Fold::default();
        for row in rows {
            fold.add(row)?;
        }
        Ok(fold)
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty() && self.errors.is_empty() && self.latency.is_empty()
    }

    fn add(&mut self, row: &FeedRow) -> Result<(), StoreError> {
        let failed = match KINDS.iter().position(|kind| *kind == row.kind) {
            Some(0) => false,
            Some(_) => true,
            None => return Ok(()),
        };
        let bad = |what: &str| {
            StoreError::fatal(format!(
                "the rollup: change {} ({}) {what}",
                row.feed_seq, row.kind
            ))
        };
        let body: Body<'_> = serde_json::from_str(&row.body).map_err(|_| bad("is not JSON"))?;
        let payer = row.participant.clone();
        let payee = row.counterparty.clone().unwrap_or_default();
        let currency = body.currency.map(Cow::into_owned).unwrap_or_default();
        let hour_ms = hour_of(row.at_ms);
        let counts = self
            .pairs
            .entry(PairKey {
                hour_ms,
                currency,
                payer: payer.clone(),
                payee: payee.clone(),
            })
            .or_default();
        if failed {
            counts.failed += 1;
            let code = body
                .error_code
                .map_or_else(|| "none".to_string(), Cow::into_owned);
            *self
                .errors
                .entry((hour_ms, payer.clone(), payee.clone(), code))
                .or_default() += 1;
        } else {
            let amount = body
                .amount
                .and_then(|amount| Amount::parse_signed(&amount).ok())
                .ok_or_else(|| bad("has no amount"))?;
            counts.committed += 1;
            counts.amount = counts
                .amount
                .checked_add(amount)
                .ok_or_else(|| bad("overflows the hour's amount"))?;
        }
        // A transfer rejected at its prepare was never open.
        if let Some(prepared_at_ms) = body.prepared_at_ms {
            let bucket = bucket_of(row.at_ms.saturating_sub(prepared_at_ms).max(0));
            *self
                .latency
                .entry((hour_ms, payer, payee, bucket))
                .or_default() += 1;
        }
        Ok(())
    }
}

/// What a transfer's change says that the rollup counts (the feed's body,
/// `FeedState::transfer_row`); its strings borrowed unless escaped, the
/// rest of the object skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    #[serde(default, borrow)]
    currency: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    error_code: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    amount: Option<Cow<'a, str>>,
    #[serde(default)]
    prepared_at_ms: Option<i64>,
}

/// What [`FeedLog::read_rollup`](crate::feed::FeedLog::read_rollup)
/// answers: the rows of `[from_hour, to_hour)`, those of one DFSP when
/// asked (it is the payer or the payee).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollup {
    /// By hour, currency, payer, payee.
    pub pairs: Vec<(PairKey, PairCounts)>,
    /// (hour, payer, payee, error code, failures), in that order.
    pub errors: Vec<(i64, String, String, String, u64)>,
    /// (payer, payee) → histogram over the whole range.
    pub latency: BTreeMap<(String, String), [u64; BUCKETS]>,
    /// The rollup's cursor: the changes through it are counted.
    pub through: u64,
}

/// Where a pair's totals read from a table and the page's are added: the
/// new row.
pub(crate) fn add_counts(
    stored: Option<(i64, String, i64)>,
    page: &PairCounts,
) -> Result<(i64, String, i64), StoreError> {
    let (committed, amount, failed) = stored.unwrap_or((0, "0".to_string(), 0));
    let amount = Amount::parse_signed(&amount)
        .map_err(|_| StoreError::fatal(format!("bad rollup amount {amount:?} in the store")))?
        .checked_add(page.amount)
        .ok_or_else(|| StoreError::fatal("the rollup: an hour's amount overflows".to_string()))?;
    Ok((
        committed + page.committed as i64,
        amount.to_string(),
        failed + page.failed as i64,
    ))
}

/// Adds a bucket's count, as read, to a pair's histogram.
pub(crate) fn add_bucket(
    latency: &mut BTreeMap<(String, String), [u64; BUCKETS]>,
    pair: (String, String),
    bucket: i64,
    transfers: i64,
) {
    let histogram = latency.entry(pair).or_insert([0; BUCKETS]);
    let bucket = (bucket.max(0) as usize).min(BUCKETS - 1);
    histogram[bucket] += transfers.max(0) as u64;
}

/// The cursor moved under the follower (another hub folded that page):
/// nothing was written.
pub(crate) fn moved(expected: u64, found: u64) -> StoreError {
    StoreError::transient(format!(
        "the rollup's cursor is at {found}, not {expected}: another hub folded these changes; nothing written"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: u64, at_ms: i64, kind: &str, body: &str) -> FeedRow {
        FeedRow {
            feed_seq: seq,
            at_ms,
            kind: kind.into(),
            participant: "payer".into(),
            counterparty: Some("payee".into()),
            key: format!("t{seq}"),
            body: body.into(),
        }
    }

    #[test]
    fn hours_and_buckets_are_cut_at_their_bounds() {
        assert_eq!(hour_of(HOUR_MS - 1), 0);
        assert_eq!(hour_of(HOUR_MS), HOUR_MS);
        assert_eq!(hour_of(-1), -HOUR_MS);
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(60_000), 14);
        assert_eq!(bucket_of(60_001), 15);
        let mut histogram = [0u64; BUCKETS];
        assert_eq!(percentile_ms(&histogram, 99), None);
        histogram[3] = 99;
        histogram[9] = 1;
        assert_eq!(percentile_ms(&histogram, 99), Some(10));
        histogram[9] = 2;
        assert_eq!(percentile_ms(&histogram, 99), Some(1_000));
    }

    #[test]
    fn a_page_is_added_up_by_key() {
        let rows = [
            row(
                1,
                10,
                "transfer.prepared",
                r#"{"amount":"1","currency":"USD"}"#,
            ),
            row(
                2,
                HOUR_MS - 1,
                "transfer.committed",
                r#"{"amount":"1.5","currency":"USD","preparedAtMs":0}"#,
            ),
            row(
                3,
                HOUR_MS,
                "transfer.committed",
                r#"{"amount":"2","currency":"USD","preparedAtMs":HOUR}"#
                    .replace("HOUR", &(HOUR_MS - 30).to_string())
                    .as_str(),
            ),
            row(
                4,
                HOUR_MS + 5,
                "transfer.aborted",
                r#"{"amount":"9","currency":"USD","errorCode":"5104","preparedAtMs":0}"#,
            ),
            row(
                5,
                HOUR_MS + 6,
                "transfer.rejected",
                r#"{"amount":"9","currency":"USD","errorCode":"4001"}"#,
            ),
            row(
                6,
                HOUR_MS + 7,
                "funds.in.committed",
                r#"{"amount":"9","currency":"USD"}"#,
            ),
        ];
        let fold = Fold::of(&rows).expect("fold");
        let key = |hour_ms| PairKey {
            hour_ms,
            currency: "USD".into(),
            payer: "payer".into(),
            payee: "payee".into(),
        };
        assert_eq!(
            fold.pairs[&key(0)],
            PairCounts {
                committed: 1,
                amount: Amount::from_units(15_000),
                failed: 0
            }
        );
        assert_eq!(
            fold.pairs[&key(HOUR_MS)],
            PairCounts {
                committed: 1,
                amount: Amount::from_whole(2),
                failed: 2
            }
        );
        assert_eq!(fold.errors.len(), 2);
        assert_eq!(fold.latency.values().sum::<u64>(), 3, "not the rejection");
        assert_eq!(
            fold.latency[&(HOUR_MS, "payer".into(), "payee".into(), bucket_of(30))],
            1
        );
        assert!(Fold::of(&[row(7, 0, "transfer.committed", "{")]).is_err());
    }
}
