//! The hourly rollup (`store::rollup`) on both backends: a feed folded a
//! page at a time counts every transfer's finish exactly once (a page
//! folded again after a crash is refused, nothing written), hours are cut
//! at their bounds and a range is half open, a DFSP reads only the pairs
//! it is in, and a version 12 SQLite store gains the tables when served.

mod support;

use ledger::*;
use store::feed::{FeedLog, FeedRow, MAX_PAGE};
use store::pg::PgStore;
use store::pg_feed::PgFeed;
use store::rollup::{self, Fold, Rollup, HOUR_MS};
use store::sqlite::{SqliteOptions, SqliteStore};
use store::sqlite_feed::SqliteFeed;
use support::{some_transfers, Harness, Op};

/// Folds the whole feed after the rollup's cursor, `page` rows of the
/// kinds it counts at a time, as the hub's follower reads it.
fn fold_all(feed: &dyn FeedLog, page: usize) {
    loop {
        let cursor = feed
            .feed_cursor(rollup::CURSOR)
            .expect("cursor")
            .unwrap_or(0);
        let read = feed
            .read_feed_kinds(cursor, page, rollup::KINDS)
            .expect("read");
        if read.next_after == cursor {
            return;
        }
        let fold = Fold::of(&read.rows).expect("fold");
        feed.fold_rollup(cursor, read.next_after, &fold)
            .expect("fold_rollup");
    }
}

/// Every row of `kinds`, read `page` at a time, and where the reads ended.
fn kinds_read(
    feed: &dyn FeedLog,
    page: usize,
    kinds: &'static [&'static str],
) -> (Vec<FeedRow>, u64) {
    let (mut rows, mut after) = (Vec::new(), 0);
    loop {
        let read = feed.read_feed_kinds(after, page, kinds).expect("read");
        assert!(read.rows.len() <= page);
        assert!(read
            .rows
            .iter()
            .all(|row| row.feed_seq > after && row.feed_seq <= read.next_after));
        let done = read.next_after == after;
        after = read.next_after;
        rows.extend(read.rows);
        if done {
            return (rows, after);
        }
    }
}

fn whole_feed(feed: &dyn FeedLog) -> Vec<FeedRow> {
    let mut rows = Vec::new();
    let mut after = 0;
    loop {
        let page = feed.read_feed(after, MAX_PAGE, None).expect("read");
        let Some(last) = page.rows.last() else {
            return rows;
        };
        after = last.feed_seq;
        rows.extend(page.rows);
    }
}

fn everything(feed: &dyn FeedLog, participant: Option<&str>) -> Rollup {
    feed.read_rollup(i64::MIN, i64::MAX, participant)
        .expect("read_rollup")
}

#[test]
fn each_finish_is_counted_once_on_both_backends() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("rollup");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = Harness::with_pg(dir.path(), Some(PgStore::open(&url).expect("open")));
    some_transfers(&mut harness, 120);
    // Some aborted, some expired, over more than one hour.
    for n in 0..5 {
        harness.run(Op::Abort(n));
    }
    harness.run(Op::Advance(2 * HOUR_MS));
    some_transfers(&mut harness, 40);
    // Rejected at prepare: above the liquidity.
    harness.run(Op::Prepare {
        payer: 1,
        amount: 1_000_000_000,
        ttl_ms: 60_000,
    });

    let sqlite = SqliteFeed::open(dir.path()).expect("open the SQLite feed");
    let pg = PgFeed::open(&url).expect("open the PostgreSQL feed");
    let rows = whole_feed(&sqlite);
    let of = |kind: &str| rows.iter().filter(|r| r.kind == kind).count() as u64;
    let committed = of("transfer.committed");
    let failed = of("transfer.aborted") + of("transfer.expired") + of("transfer.rejected");
    assert!(committed > 0 && of("transfer.aborted") > 0 && of("transfer.expired") > 0);
    assert!(of("transfer.rejected") > 0, "a rejection");
    let amount = rows
        .iter()
        .filter(|r| r.kind == "transfer.committed")
        .map(|r| {
            let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            Amount::parse_signed(body["amount"].as_str().unwrap()).unwrap()
        })
        .fold(Amount::ZERO, |sum, a| sum.checked_add(a).unwrap());

    for (name, feed) in [("SQLite", &sqlite as &dyn FeedLog), ("PostgreSQL", &pg)] {
        // Reading by kind gives exactly the rows of those kinds, in order,
        // and passes over the rest to the feed's end.
        for (kinds, page) in [(rollup::KINDS, 3), (&["transfer.expired"][..], 2)] {
            let (read, end) = kinds_read(feed, page, kinds);
            let expected: Vec<&FeedRow> = rows
                .iter()
                .filter(|row| kinds.contains(&row.kind.as_str()))
                .collect();
            assert_eq!(
                read.iter().collect::<Vec<_>>(),
                expected,
                "{name}: {kinds:?}"
            );
            assert_eq!(end, rows.last().unwrap().feed_seq, "{name}: {kinds:?}");
        }
        assert_eq!(everything(feed, None), Rollup::default(), "{name}: empty");
        fold_all(feed, 37);
        let folded = everything(feed, None);
        assert_eq!(folded.through, rows.last().unwrap().feed_seq, "{name}");
        let sum = |f: fn(&rollup::PairCounts) -> u64| -> u64 {
            folded.pairs.iter().map(|(_, c)| f(c)).sum()
        };
        assert_eq!(sum(|c| c.committed), committed, "{name}");
        assert_eq!(sum(|c| c.failed), failed, "{name}");
        let total = folded
            .pairs
            .iter()
            .fold(Amount::ZERO, |s, (_, c)| s.checked_add(c.amount).unwrap());
        assert_eq!(total, amount, "{name}: exact amounts");
        let errors: u64 = folded.errors.iter().map(|e| e.4).sum();
        assert_eq!(errors, failed, "{name}: each failure has its code");
        let timed: u64 = folded.latency.values().flat_map(|h| h.iter()).sum();
        assert_eq!(
            timed,
            committed + failed - of("transfer.rejected"),
            "{name}: every finish of an open transfer is timed"
        );
        assert!(folded.pairs.iter().any(|(k, _)| k.hour_ms > 0));

        // A crash after the commit of a fold but before the follower knew:
        // it reads the cursor again. A page folded from a stale cursor is
        // refused, and nothing of it is written.
        let page = feed.read_feed(0, 50, None).expect("read");
        let stale = Fold::of(&page.rows).expect("fold");
        assert!(!stale.is_empty());
        let error = feed
            .fold_rollup(0, page.next_after, &stale)
            .expect_err("a stale fold is refused");
        assert!(error.transient, "{error}");
        assert_eq!(everything(feed, None), folded, "{name}: nothing doubled");
        fold_all(feed, 37);
        assert_eq!(everything(feed, None), folded, "{name}: nothing new");

        // A DFSP reads only the pairs it is in, and all of them.
        let dfsp = folded.pairs[0].0.payee.clone();
        let own = everything(feed, Some(&dfsp));
        let mine = |payer: &str, payee: &str| payer == dfsp || payee == dfsp;
        assert!(!own.pairs.is_empty());
        assert!(own.pairs.len() < folded.pairs.len(), "{name}: not all");
        let expected: Vec<_> = folded
            .pairs
            .iter()
            .filter(|(k, _)| mine(&k.payer, &k.payee))
            .cloned()
            .collect();
        assert_eq!(own.pairs, expected, "{name}");
        assert!(own.errors.iter().all(|e| mine(&e.1, &e.2)), "{name}");
        assert!(own.latency.keys().all(|(a, b)| mine(a, b)), "{name}");
        assert!(own.latency.len() < folded.latency.len(), "{name}");
    }
    assert_eq!(everything(&sqlite, None), everything(&pg, None), "alike");
}

fn change(seq: u64, at_ms: i64, kind: &str, payer: &str, payee: &str, body: &str) -> FeedRow {
    FeedRow {
        feed_seq: seq,
        at_ms,
        kind: kind.into(),
        participant: payer.into(),
        counterparty: Some(payee.into()),
        key: format!("t{seq}"),
        body: body.into(),
    }
}

#[test]
fn hours_are_cut_at_their_bounds_and_a_range_is_half_open() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hours");
    let dir = tempfile::tempdir().expect("tempdir");
    drop(SqliteStore::open(dir.path(), SqliteOptions::default()).expect("create"));
    drop(PgStore::open(&url).expect("create"));
    let hour = 1_790_000_000_000 / HOUR_MS * HOUR_MS;
    let committed = |seq, at_ms, amount: &str| {
        change(
            seq,
            at_ms,
            "transfer.committed",
            "a",
            "b",
            &format!(
                r#"{{"amount":"{amount}","currency":"USD","preparedAtMs":{}}}"#,
                at_ms - 40
            ),
        )
    };
    let rows = [
        committed(1, hour - 1, "1.0001"),
        committed(2, hour, "2"),
        committed(3, hour + HOUR_MS - 1, "3.5"),
        change(
            4,
            hour + HOUR_MS,
            "transfer.expired",
            "b",
            "a",
            r#"{"amount":"4","currency":"USD","errorCode":"3303","preparedAtMs":0}"#,
        ),
    ];
    let sqlite = SqliteFeed::open(dir.path()).expect("open the SQLite feed");
    let pg = PgFeed::open(&url).expect("open the PostgreSQL feed");
    for (name, feed) in [("SQLite", &sqlite as &dyn FeedLog), ("PostgreSQL", &pg)] {
        // Two pages, the second adding to an hour of the first.
        feed.fold_rollup(0, 2, &Fold::of(&rows[..2]).unwrap())
            .expect("fold");
        feed.fold_rollup(2, 4, &Fold::of(&rows[2..]).unwrap())
            .expect("fold");
        let middle = feed.read_rollup(hour, hour + HOUR_MS, None).expect("read");
        assert_eq!(middle.pairs.len(), 1, "{name}");
        let (key, counts) = &middle.pairs[0];
        assert_eq!(key.hour_ms, hour, "{name}");
        assert_eq!(counts.committed, 2, "{name}");
        assert_eq!(
            counts.amount,
            Amount::parse_signed("5.5").unwrap(),
            "{name}"
        );
        assert!(middle.errors.is_empty(), "{name}");
        let histogram = middle.latency[&("a".to_string(), "b".to_string())];
        assert_eq!(histogram[rollup::bucket_of(40)], 2, "{name}");
        assert_eq!(rollup::percentile_ms(&histogram, 99), Some(50), "{name}");
        let all = feed
            .read_rollup(hour - HOUR_MS, hour + 2 * HOUR_MS, None)
            .unwrap();
        let hours: Vec<i64> = all.pairs.iter().map(|(k, _)| k.hour_ms).collect();
        assert_eq!(hours, [hour - HOUR_MS, hour, hour + HOUR_MS], "{name}");
        assert_eq!(all.pairs[0].1.amount, Amount::from_units(10_001), "{name}");
        assert_eq!(
            all.errors,
            [(hour + HOUR_MS, "b".into(), "a".into(), "3303".into(), 1)],
            "{name}"
        );
        // Over 60 s: the last bucket, with no bound.
        let late = all.latency[&("b".to_string(), "a".to_string())];
        assert_eq!(late[rollup::BUCKETS - 1], 1, "{name}");
        assert_eq!(all.through, 4, "{name}");
        // A DFSP that is in none of them reads nothing.
        let other = feed.read_rollup(i64::MIN, i64::MAX, Some("c")).unwrap();
        assert!(other.pairs.is_empty() && other.errors.is_empty() && other.latency.is_empty());
    }
}

/// Migration 13 on SQLite: a store of version 12 gains the rollup's
/// tables when a hub opens it (its undo: dropping them).
#[test]
fn a_version_12_sqlite_store_gains_the_rollup_when_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = Harness::new(dir.path());
    some_transfers(&mut harness, 6);
    drop(harness);
    let path = dir.path().join(store::sqlite::DATABASE_FILE);
    let raw = rusqlite::Connection::open(&path).expect("open");
    raw.execute_batch(
        "DROP TABLE rollup_pairs; DROP TABLE rollup_errors; DROP TABLE rollup_latency;
         DROP TABLE party_blocks; DROP TABLE party_index;
         DROP TABLE commit_spans; DROP TABLE commit_index;
         DROP TABLE proxy_map; ALTER TABLE participants DROP COLUMN is_proxy;
         PRAGMA user_version = 12;",
    )
    .expect("downgrade");
    // The rollup's (13), the party index's (14) and the commit index's (15).
    let tables = |raw: &rusqlite::Connection| -> i64 {
        raw.query_row(
            "SELECT count(*) FROM sqlite_master
             WHERE name LIKE 'rollup_%' OR name LIKE 'party_%' OR name LIKE 'commit_%'",
            [],
            |row| row.get(0),
        )
        .unwrap()
    };
    assert_eq!(tables(&raw), 0);
    let store = SqliteStore::open(dir.path(), SqliteOptions::default()).expect("migrate");
    assert_eq!(tables(&raw), 7);
    let version: i64 = raw
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, 16);
    // And version 16's column and proxy map (empty: no proxy here).
    let (proxies, mapped): (i64, i64) = raw
        .query_row(
            "SELECT (SELECT count(*) FROM participants WHERE is_proxy),
                    (SELECT count(*) FROM proxy_map)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("version 16's column and table");
    assert_eq!((proxies, mapped), (0, 0));
    drop(store);
    let feed = SqliteFeed::open(dir.path()).expect("open the feed");
    fold_all(&feed, MAX_PAGE);
    let folded = everything(&feed, None);
    let committed: u64 = folded.pairs.iter().map(|(_, c)| c.committed).sum();
    assert_eq!(committed, 3, "every other of 6 fulfilled");
}
