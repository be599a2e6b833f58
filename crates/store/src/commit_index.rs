//! The commit index: which transfers and conversions committed on an
//! account, by span of time, filed off the commit
//! (`docs/design/back-office.md`, "A per-account index of commits").
//!
//! A statement lists an account's commits in the order of their instant
//! (`transfer_finishes.finished_at_ms`); the store finds commits by time
//! only for every account at once (`transfer_finishes_by_time`), so a
//! DFSP's page walked every DFSP's commits of its range and kept one in
//! fifty (BENCHMARKS.md, "The back office at 10 M transfers"). Here the
//! hub's follower files, per span of time wholly committed (a minute, by
//! default), one row per (account, span) holding an 8-byte entry per
//! commit that moved the account: the transfer's seq and the commit's
//! offset in the span. A row's key puts the account first and the span
//! after, so an account's rows are one range of the primary key in time
//! order, and a filing appends at the end of each account's range.
//!
//! A span is complete once a commit of a later span is durable: the
//! ledger's clock never goes back (restored from the store's newest time
//! after a restart or a takeover) and the writer commits in the ledger's
//! order, so no commit of an earlier span can come after it.
//!
//! Nothing in it is authoritative: the rows are derived from
//! `transfer_finishes` and `transfers`; a statement checks every row it
//! fetches through the index, and walks by time the spans not filed yet
//! (the newest, or all of them after an upgrade).

use ledger::AccountId;

use crate::StoreError;

/// Milliseconds per span, by default: recorded with the index when it
/// files its first span (`commit_index.span_ms`) and kept from then on,
/// so that a store's rows always mean one thing (tests file spans of a
/// few milliseconds).
pub const SPAN_MS: i64 = 60_000;
/// The longest span: an entry holds the offset in 16 bits.
pub const MOST_SPAN_MS: i64 = 1 << 16;
/// Commits a filing reads in one transaction at most, unless one span
/// holds more (then that span alone): a catch-up after an upgrade goes a
/// few hundred thousand commits at a time.
pub const MOST_COMMITS_PER_FILING: usize = 250_000;
/// Spans a filing writes in one transaction at most.
pub const MOST_SPANS_PER_FILING: u64 = 10_000;
/// Bytes per entry: `seq << 16 | offset_ms`, little-endian.
const ENTRY_BYTES: usize = 8;
/// Bits of a row key that hold the span (2^32 minutes: 8,000 years).
const SPAN_BITS: u32 = 32;
/// The highest seq an entry holds.
const MOST_SEQ: u64 = (1 << 48) - 1;

const _: () = assert!(SPAN_MS <= MOST_SPAN_MS);

/// Created on every writable open of a SQLite store (schema version 15;
/// `IF NOT EXISTS`, as the party index's). `commit_index`: spans start at
/// `origin_ms` (a multiple of `span_ms`, at or before the oldest finish
/// when the first span was filed) and those before `next_span` are filed.
pub(crate) const SQLITE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS commit_spans (
    key     INTEGER PRIMARY KEY,
    entries BLOB    NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS commit_index (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    origin_ms INTEGER NOT NULL,
    span_ms   INTEGER NOT NULL,
    next_span INTEGER NOT NULL
) STRICT;
";

/// How far the index is filed, as `commit_index` records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filed {
    pub origin_ms: i64,
    pub span_ms: i64,
    pub next_span: u64,
}

impl Filed {
    /// The index as a store's row gives it, or why it cannot be one.
    pub fn checked(origin_ms: i64, span_ms: i64, next_span: i64) -> Result<Filed, StoreError> {
        let fatal = |what: String| StoreError::fatal(format!("commit index: {what}"));
        if !(1..=MOST_SPAN_MS).contains(&span_ms) {
            return Err(fatal(format!(
                "spans of {span_ms} ms (1 to {MOST_SPAN_MS})"
            )));
        }
        if origin_ms.rem_euclid(span_ms) != 0 {
            return Err(fatal(format!(
                "origin {origin_ms} is not a multiple of {span_ms} ms"
            )));
        }
        let next_span = u64::try_from(next_span)
            .ok()
            .filter(|next| *next <= 1 << SPAN_BITS)
            .ok_or_else(|| fatal(format!("next span {next_span}")))?;
        Ok(Filed {
            origin_ms,
            span_ms,
            next_span,
        })
    }

    /// The index a first filing starts, at the oldest finish kept.
    pub fn starting_at(oldest_finish_ms: i64, span_ms: i64) -> Result<Filed, StoreError> {
        let origin = oldest_finish_ms - oldest_finish_ms.rem_euclid(span_ms.max(1));
        Filed::checked(origin, span_ms, 0)
    }

    /// The span `at_ms` falls in (0 before the origin: no commit is).
    pub fn span_of(&self, at_ms: i64) -> u64 {
        u64::try_from(at_ms.saturating_sub(self.origin_ms) / self.span_ms).unwrap_or(0)
    }

    /// When `span` starts.
    pub fn start_ms(&self, span: u64) -> i64 {
        self.origin_ms
            .saturating_add((span as i64).saturating_mul(self.span_ms))
    }

    /// Every commit before this instant is filed.
    pub fn filed_to_ms(&self) -> i64 {
        self.start_ms(self.next_span)
    }

    /// The spans wholly committed when the newest finish is at
    /// `newest_ms`: those before its span.
    pub fn spans_complete(&self, newest_ms: i64) -> u64 {
        self.span_of(newest_ms).min(1 << SPAN_BITS)
    }
}

/// What a filing did ([`crate::feed::FeedLog::file_commit_spans`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filing {
    /// Spans it filed.
    pub filed: u64,
    /// The index after it; `None` while the store holds no finish.
    pub index: Option<Filed>,
    /// The newest finish when it looked.
    pub newest_ms: Option<i64>,
}

impl Filing {
    /// Milliseconds of commits no filed span covers yet (a statement walks
    /// them by time): at most a span and a little once caught up.
    pub fn unfiled_ms(&self) -> i64 {
        match (self.index, self.newest_ms) {
            (Some(index), Some(newest)) => (newest - index.filed_to_ms()).max(0),
            _ => 0,
        }
    }

    /// Whether every complete span is filed.
    pub fn caught_up(&self) -> bool {
        match (self.index, self.newest_ms) {
            (Some(index), Some(newest)) => index.next_span >= index.spans_complete(newest),
            _ => true,
        }
    }
}

/// Rows of `commit_spans`: key and entries.
pub type SpanRows = Vec<(i64, Vec<u8>)>;

/// A commit as a filing reads it: the transfer's seq, the instant, the
/// two accounts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Commit {
    pub seq: u64,
    pub at_ms: i64,
    pub debit: u32,
    pub credit: u32,
}

/// The spans a filing files next: `[from, to)`, at most `most_spans`, or
/// `None` when no complete span waits.
pub fn next_spans(index: Filed, newest_ms: i64, most_spans: u64) -> Option<(u64, u64)> {
    let to = index
        .spans_complete(newest_ms)
        .min(index.next_span.saturating_add(most_spans.max(1)));
    (to > index.next_span).then_some((index.next_span, to))
}

/// What a filing does next, from what it found: the index recorded (if
/// any) and the oldest and newest finishes kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to write: this is what it did.
    Done(Filing),
    /// File spans `[from, to)` (none, the first time, to record the
    /// index's origin even before a span is complete).
    File {
        index: Filed,
        spans: (u64, u64),
        newest_ms: i64,
    },
}

impl Plan {
    pub fn of(
        found: Option<Filed>,
        (oldest_ms, newest_ms): (Option<i64>, Option<i64>),
        span_ms: i64,
        most_spans: u64,
    ) -> Result<Plan, StoreError> {
        let Some(newest_ms) = newest_ms else {
            return Ok(Plan::Done(Filing {
                filed: 0,
                index: found,
                newest_ms: None,
            }));
        };
        let index = match found {
            Some(index) => index,
            None => Filed::starting_at(oldest_ms.unwrap_or(newest_ms), span_ms)?,
        };
        Ok(match next_spans(index, newest_ms, most_spans) {
            Some(spans) => Plan::File {
                index,
                spans,
                newest_ms,
            },
            None if found.is_none() => Plan::File {
                index,
                spans: (0, 0),
                newest_ms,
            },
            None => Plan::Done(Filing {
                filed: 0,
                index: Some(index),
                newest_ms: Some(newest_ms),
            }),
        })
    }
}

impl Filing {
    /// A filing of spans `[from, to)` of `index`.
    pub fn of(index: Filed, from: u64, to: u64, newest_ms: i64) -> Filing {
        Filing {
            filed: to - from,
            index: Some(Filed {
                next_span: to,
                ..index
            }),
            newest_ms: Some(newest_ms),
        }
    }
}

/// The rows of spans `[from, to)` — or of fewer, when they hold more than
/// `most_commits`: then the whole spans those commits reach, at least one
/// — and the span after the last filed. `read(from_ms, to_ms, limit)`
/// gives the committed transfers' and conversions' finishes in the range
/// by time, at most `limit`.
pub fn rows_of_spans(
    index: Filed,
    (from, to): (u64, u64),
    most_commits: usize,
    mut read: impl FnMut(i64, i64, Option<usize>) -> Result<Vec<Commit>, StoreError>,
) -> Result<(u64, SpanRows), StoreError> {
    if to <= from {
        return Ok((from, Vec::new()));
    }
    let mut commits = read(
        index.start_ms(from),
        index.start_ms(to),
        Some(most_commits + 1),
    )?;
    let mut to = to;
    if commits.len() > most_commits {
        // The last span read may be partial: file the spans before it,
        // or read the first one whole.
        let last = index.span_of(commits.last().map_or(index.start_ms(from), |c| c.at_ms));
        if last > from {
            to = last;
            commits.retain(|commit| index.span_of(commit.at_ms) < to);
        } else {
            to = from + 1;
            commits = read(index.start_ms(from), index.start_ms(to), None)?;
        }
    }
    Ok((to, span_rows(index, (from, to), &commits)?))
}

/// A row's key: the account in the high bits, the span in the low
/// [`SPAN_BITS`], so that an account's rows are one range of the primary
/// key in time order.
pub fn row_key(account: AccountId, span: u64) -> Result<i64, StoreError> {
    if account.0 >= 1 << 31 || span >= 1 << SPAN_BITS {
        return Err(StoreError::fatal(format!(
            "commit index: account {} or span {span} out of the key's range",
            account.0
        )));
    }
    Ok(((u64::from(account.0) << SPAN_BITS) | span) as i64)
}

/// The rows filing `commits` (all within spans `[from, to)`) makes: one
/// per account and span moved, each commit under both its accounts.
pub fn span_rows(
    index: Filed,
    (from, to): (u64, u64),
    commits: &[Commit],
) -> Result<SpanRows, StoreError> {
    let mut rows: std::collections::BTreeMap<i64, Vec<u8>> = Default::default();
    for commit in commits {
        let span = index.span_of(commit.at_ms);
        if commit.at_ms < index.origin_ms || span < from || span >= to {
            return Err(StoreError::fatal(format!(
                "commit index: transfer {} committed at {} is not in spans {from} to {to}",
                commit.seq, commit.at_ms
            )));
        }
        if commit.seq > MOST_SEQ {
            return Err(StoreError::fatal(format!(
                "commit index: seq {} past {MOST_SEQ}",
                commit.seq
            )));
        }
        let offset = (commit.at_ms - index.start_ms(span)) as u64;
        let word = (commit.seq << 16) | offset;
        let accounts = [commit.debit, commit.credit];
        let accounts = match accounts[0] == accounts[1] {
            true => &accounts[..1],
            false => &accounts[..],
        };
        for &account in accounts {
            rows.entry(row_key(AccountId(account), span)?)
                .or_default()
                .extend_from_slice(&word.to_le_bytes());
        }
    }
    Ok(rows.into_iter().collect())
}

/// The key range `[low, high)` of `account`'s rows for spans that may hold
/// commits at instants in `[from_ms, to_ms)`.
pub fn key_range(
    index: Filed,
    account: AccountId,
    from_ms: i64,
    to_ms: i64,
) -> Result<(i64, i64), StoreError> {
    let base = row_key(account, 0)?;
    let low = index.span_of(from_ms).min(1 << SPAN_BITS);
    let high = (index.span_of(to_ms.saturating_sub(1)) + 1).clamp(low, 1 << SPAN_BITS);
    // The bound past the last span is the next account's first key.
    Ok((base + low as i64, base + high as i64))
}

/// The (instant, seq) of a row's entries.
pub fn entries_of(
    index: Filed,
    key: i64,
    entries: &[u8],
) -> Result<impl Iterator<Item = (i64, u64)> + '_, StoreError> {
    if !entries.len().is_multiple_of(ENTRY_BYTES) {
        return Err(StoreError::fatal(format!(
            "commit index: row {key} holds {} bytes, not whole entries",
            entries.len()
        )));
    }
    let start = index.start_ms((key as u64) & ((1 << SPAN_BITS) - 1));
    Ok(entries.chunks_exact(ENTRY_BYTES).map(move |entry| {
        let word = u64::from_le_bytes(entry.try_into().expect("8 bytes"));
        (start + (word & 0xffff) as i64, word >> 16)
    }))
}

/// Why a filing wrote nothing: another filed the spans first.
pub(crate) fn moved(expected: Filed, found: Option<Filed>) -> StoreError {
    StoreError::transient(format!(
        "commit index: filed through span {} expected, {:?} found (another hub filed them)",
        expected.next_span,
        found.map(|found| found.next_span)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(origin_ms: i64, span_ms: i64) -> Filed {
        Filed::checked(origin_ms, span_ms, 0).unwrap()
    }

    #[test]
    fn spans_start_at_the_origin_and_complete_when_a_later_one_begins() {
        let index = Filed::starting_at(1_700_000_012_345, SPAN_MS).unwrap();
        assert_eq!(index.origin_ms % SPAN_MS, 0);
        assert!((0..SPAN_MS).contains(&(1_700_000_012_345 - index.origin_ms)));
        assert_eq!(index.span_of(index.origin_ms), 0);
        assert_eq!(index.span_of(index.origin_ms + SPAN_MS - 1), 0);
        assert_eq!(index.span_of(index.origin_ms + SPAN_MS), 1);
        assert_eq!(index.span_of(index.origin_ms - 5), 0);
        assert_eq!(index.spans_complete(index.origin_ms + SPAN_MS - 1), 0);
        assert_eq!(index.spans_complete(index.origin_ms + 2 * SPAN_MS), 2);
        assert_eq!(next_spans(index, index.origin_ms + 10, 5), None);
        assert_eq!(
            next_spans(index, index.origin_ms + 9 * SPAN_MS, 5),
            Some((0, 5))
        );
        assert!(Filed::checked(0, 0, 0).is_err());
        assert!(Filed::checked(0, MOST_SPAN_MS + 1, 0).is_err());
        assert!(Filed::checked(7, 5, 0).is_err());
        assert!(Filed::checked(10, 5, -1).is_err());
    }

    #[test]
    fn a_commit_is_filed_under_both_accounts_and_read_back() {
        let index = index(1_000, 100);
        let commits = [
            Commit {
                seq: 7,
                at_ms: 1_005,
                debit: 3,
                credit: 4,
            },
            Commit {
                seq: 9,
                at_ms: 1_099,
                debit: 4,
                credit: 5,
            },
            Commit {
                seq: 8,
                at_ms: 1_100,
                debit: 3,
                credit: 5,
            },
            Commit {
                seq: (1 << 48) - 1,
                at_ms: 1_150,
                debit: 6,
                credit: 6,
            },
        ];
        let rows = span_rows(index, (0, 2), &commits).unwrap();
        let read = |account: u32| -> Vec<(i64, u64)> {
            let (low, high) = key_range(index, AccountId(account), 0, 10_000).unwrap();
            rows.iter()
                .filter(|(key, _)| (low..high).contains(key))
                .flat_map(|(key, entries)| {
                    entries_of(index, *key, entries)
                        .unwrap()
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        assert_eq!(read(3), vec![(1_005, 7), (1_100, 8)]);
        assert_eq!(read(4), vec![(1_005, 7), (1_099, 9)]);
        assert_eq!(read(5), vec![(1_099, 9), (1_100, 8)]);
        // A commit between one account's two sides is filed once.
        assert_eq!(read(6), vec![(1_150, (1 << 48) - 1)]);
        assert_eq!(read(1), vec![]);
        // Rows by key: account first, span after.
        let keys: Vec<i64> = rows.iter().map(|(key, _)| *key).collect();
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]));
        // A key range covers exactly the spans of its instants.
        let (low, high) = key_range(index, AccountId(3), 1_100, 1_101).unwrap();
        assert_eq!(
            (low, high),
            (
                row_key(AccountId(3), 1).unwrap(),
                row_key(AccountId(3), 2).unwrap()
            )
        );
        let (low, high) = key_range(index, AccountId(3), 1_100, 1_100).unwrap();
        assert!(high >= low);
    }

    #[test]
    fn a_commit_outside_its_spans_or_a_torn_row_is_refused() {
        let index = index(1_000, 100);
        let commit = |at_ms| Commit {
            seq: 1,
            at_ms,
            debit: 1,
            credit: 2,
        };
        assert!(span_rows(index, (1, 2), &[commit(1_050)]).is_err());
        assert!(span_rows(index, (0, 1), &[commit(1_100)]).is_err());
        assert!(span_rows(index, (0, 1), &[commit(999)]).is_err());
        assert!(span_rows(
            index,
            (0, 1),
            &[Commit {
                seq: 1 << 48,
                ..commit(1_001)
            }]
        )
        .is_err());
        assert!(entries_of(index, 0, &[0; 9]).is_err());
        assert!(row_key(AccountId(1 << 31), 0).is_err());
    }

    #[test]
    fn a_filing_over_its_budget_files_whole_spans_and_one_at_least() {
        let index = index(0, 10);
        // Spans 0..4 hold 3 commits each.
        let all: Vec<Commit> = (0..12)
            .map(|n| Commit {
                seq: n,
                at_ms: (n as i64 / 3) * 10 + n as i64 % 3,
                debit: 1,
                credit: 2,
            })
            .collect();
        let read = |from: i64, to: i64, limit: Option<usize>| -> Result<Vec<Commit>, StoreError> {
            let found = all
                .iter()
                .copied()
                .filter(|c| c.at_ms >= from && c.at_ms < to);
            Ok(match limit {
                Some(limit) => found.take(limit).collect(),
                None => found.collect(),
            })
        };
        let count = |rows: &[(i64, Vec<u8>)]| -> usize {
            rows.iter()
                .map(|(_, entries)| entries.len() / ENTRY_BYTES)
                .sum::<usize>()
                / 2
        };
        // Enough budget: every span asked.
        let (to, rows) = rows_of_spans(index, (0, 4), 100, read).unwrap();
        assert_eq!((to, count(&rows)), (4, 12));
        // 7 commits: spans 0 and 1 whole (the third is cut).
        let (to, rows) = rows_of_spans(index, (0, 4), 7, read).unwrap();
        assert_eq!((to, count(&rows)), (2, 6));
        // 3 exactly: span 0 whole.
        let (to, rows) = rows_of_spans(index, (0, 4), 3, read).unwrap();
        assert_eq!((to, count(&rows)), (1, 3));
        // Fewer than one span holds: that span whole all the same.
        let (to, rows) = rows_of_spans(index, (1, 4), 2, read).unwrap();
        assert_eq!((to, count(&rows)), (2, 3));
    }

    #[test]
    fn a_first_filing_records_the_origin_and_later_ones_wait_for_a_whole_span() {
        assert_eq!(
            Plan::of(None, (None, None), 10, 5).unwrap(),
            Plan::Done(Filing {
                filed: 0,
                index: None,
                newest_ms: None
            })
        );
        let first = Plan::of(None, (Some(23), Some(27)), 10, 5).unwrap();
        let index = Filed::checked(20, 10, 0).unwrap();
        assert_eq!(
            first,
            Plan::File {
                index,
                spans: (0, 0),
                newest_ms: 27
            }
        );
        assert_eq!(
            Plan::of(Some(index), (Some(23), Some(29)), 10, 5).unwrap(),
            Plan::Done(Filing {
                filed: 0,
                index: Some(index),
                newest_ms: Some(29)
            })
        );
        assert_eq!(
            Plan::of(Some(index), (Some(23), Some(95)), 10, 5).unwrap(),
            Plan::File {
                index,
                spans: (0, 5),
                newest_ms: 95
            }
        );
        // The recorded span wins over the one asked.
        assert_eq!(
            Plan::of(Some(index), (Some(23), Some(31)), 60_000, 5).unwrap(),
            Plan::File {
                index,
                spans: (0, 1),
                newest_ms: 31
            }
        );
        let filing = Filing::of(index, 0, 5, 95);
        assert_eq!(filing.filed, 5);
        assert_eq!(filing.index.unwrap().filed_to_ms(), 70);
    }

    #[test]
    fn filing_says_how_far_behind_it_is() {
        let index = Filed::checked(0, 10, 3).unwrap();
        let filing = Filing {
            filed: 1,
            index: Some(index),
            newest_ms: Some(45),
        };
        assert_eq!(filing.unfiled_ms(), 15);
        assert!(!filing.caught_up());
        let filing = Filing {
            newest_ms: Some(39),
            ..filing
        };
        assert!(filing.caught_up());
        let none = Filing {
            filed: 0,
            index: None,
            newest_ms: None,
        };
        assert!(none.caught_up());
        assert_eq!(none.unfiled_ms(), 0);
    }
}
