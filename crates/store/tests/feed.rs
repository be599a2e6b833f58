//! The change feed on the embedded store (`store::feed`): gap-free across
//! a restart of the writer, a finish described from the stored transfer
//! when the writer no longer remembers it, and retention in chunks that
//! never takes the newest row. Both backends writing the same feed is
//! checked in `backends.rs`.

mod support;

use ledger::*;
use store::feed::{FeedLog, FeedRow, MAX_PAGE, PRUNE_CHUNK};
use store::sqlite::{SqliteOptions, SqliteStore};
use store::sqlite_feed::SqliteFeed;
use store::Store;
use support::{some_transfers, Harness, Op};

fn whole_feed(feed: &SqliteFeed, after: u64) -> Vec<FeedRow> {
    let mut rows = Vec::new();
    let mut after = after;
    loop {
        let page = feed.read_feed(after, MAX_PAGE, None).expect("read");
        let Some(last) = page.rows.last() else {
            return rows;
        };
        after = last.feed_seq;
        rows.extend(page.rows);
    }
}

#[test]
fn the_feed_is_gap_free_across_a_restart_and_pruned_in_chunks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = Harness::new(dir.path());
    some_transfers(&mut harness, 3 * PRUNE_CHUNK / 4);
    harness.run(Op::Advance(1_000));
    some_transfers(&mut harness, PRUNE_CHUNK);
    // One left reserved, to be finished after the restart.
    harness.run(Op::Prepare {
        payer: 0,
        amount: 3,
        ttl_ms: 3_600_000,
    });
    let open = harness.reserved.last().expect("a reserved transfer").0;
    let snapshot = harness.store.load().expect("load");
    let stored = snapshot
        .transfers
        .iter()
        .find(|t| t.transfer_id == open)
        .expect("stored");
    let (open_seq, open_amount) = (stored.seq, stored.amount.to_string());
    let now = harness.now;
    drop(harness);

    let feed = SqliteFeed::open(dir.path()).expect("open the feed");
    let before = whole_feed(&feed, 0);
    for (at, row) in before.iter().enumerate() {
        assert_eq!(row.feed_seq, at as u64 + 1);
    }
    let prepared = before
        .iter()
        .filter(|r| r.kind == "transfer.prepared" || r.kind == "transfer.rejected")
        .count();
    let committed = before
        .iter()
        .filter(|r| r.kind == "transfer.committed")
        .count();
    assert_eq!(
        prepared,
        3 * PRUNE_CHUNK / 4 + PRUNE_CHUNK + 1,
        "a row per prepare"
    );
    assert!(committed >= prepared / 3, "{committed} committed");

    // A new writer: it numbers on from the last row, and describes the
    // finish of a transfer prepared before it opened from the store.
    let mut store = SqliteStore::open(
        dir.path(),
        SqliteOptions {
            fsync: false,
            ..SqliteOptions::default()
        },
    )
    .expect("reopen");
    let finish = Record::Finish(FinishRow {
        seq: open_seq,
        kind: FinishKind::Abort,
        state: TransferState::Aborted,
        reason: Some(ErrorCode(5104)),
        cause: None,
        finished_at_ms: now + 10,
        request_hash: RequestHash([7; 32]),
        fulfilment: None,
        settlement_window: None,
    });
    let (told, listened) = std::sync::mpsc::channel();
    store.set_feed_listener(Box::new(move |seq| {
        let _ = told.send(seq);
    }));
    store.commit(&[&[finish]]).expect("commit the finish");
    let last = before.last().expect("rows").feed_seq;
    assert_eq!(listened.try_recv(), Ok(last + 1), "the listener is told");
    let after = whole_feed(&feed, last);
    assert_eq!(after.len(), 1);
    let aborted = &after[0];
    assert_eq!(aborted.feed_seq, last + 1);
    assert_eq!(aborted.kind, "transfer.aborted");
    assert_eq!(aborted.key, open.to_string());
    let body: serde_json::Value = serde_json::from_str(&aborted.body).expect("JSON");
    assert_eq!(body["errorCode"], "5104");
    assert_eq!(body["amount"], open_amount.as_str());
    assert_eq!(body["currency"], "USD");
    assert_eq!(body["payer"], aborted.participant.as_str());
    assert_eq!(body["payee"], aborted.counterparty.as_deref().unwrap());

    // A cap change says the cap before, read from the store by this new
    // writer (the alerts tell a change from the row alone).
    let mut position = snapshot
        .accounts
        .iter()
        .find(|a| a.kind == AccountKind::Position && a.net_debit_cap.is_some())
        .expect("a position account with a cap")
        .clone();
    let cap_before = position.net_debit_cap.expect("a cap").to_string();
    position.net_debit_cap = Some(Amount::from_whole(12_345));
    store
        .commit(&[&[Record::Account(position.clone())]])
        .expect("commit the cap");
    let changed = whole_feed(&feed, last + 1);
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].kind, "account.changed");
    let body: serde_json::Value = serde_json::from_str(&changed[0].body).expect("JSON");
    assert_eq!(body["netDebitCap"], "12345");
    assert_eq!(body["previousNetDebitCap"], cap_before.as_str());
    let last = last + 1;

    // Retention: the rows before a time go, a chunk at a time.
    let cut_ms = before
        .iter()
        .find(|r| r.at_ms > before[0].at_ms)
        .expect("time moved")
        .at_ms;
    let older = before.iter().filter(|r| r.at_ms < cut_ms).count();
    assert!(older > PRUNE_CHUNK / 2, "{older} rows before the cut");
    let mut chunks = Vec::new();
    loop {
        let deleted = feed.prune_feed(cut_ms).expect("prune");
        if deleted == 0 {
            break;
        }
        assert!(deleted <= PRUNE_CHUNK);
        chunks.push(deleted);
    }
    assert_eq!(chunks.iter().sum::<usize>(), older);
    let page = feed.read_feed(0, 10, None).expect("read");
    assert_eq!(page.oldest, Some(older as u64 + 1));
    assert_eq!(page.rows[0].feed_seq, older as u64 + 1);
    assert_eq!(page.newest, last + 1);
    // The newest row stays whatever its age, so numbering goes on.
    while feed.prune_feed(i64::MAX).expect("prune") > 0 {}
    let page = feed.read_feed(0, 10, None).expect("read");
    assert_eq!(page.oldest, Some(last + 1));
    assert_eq!(page.rows.len(), 1);
    drop(store);

    // Cursors: none until set, then kept.
    assert_eq!(feed.feed_cursor("amqp").expect("cursor"), None);
    feed.set_feed_cursor("amqp", 0).expect("set");
    assert_eq!(feed.feed_cursor("amqp").expect("cursor"), Some(0));
    feed.set_feed_cursor("amqp", 42).expect("set");
    feed.set_feed_cursor("amqp", 43).expect("set");
    assert_eq!(feed.feed_cursor("amqp").expect("cursor"), Some(43));
}

/// A batch of many changes is written in chunks of one statement each
/// and a rest row by row: every row is there, in order, with its own
/// values (not a neighbour's).
#[test]
fn a_batch_of_many_changes_is_written_row_for_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = Harness::new(dir.path());
    // 16 × 2 + 5: two whole chunks and a rest, in one expiry batch.
    const OPEN: usize = 37;
    for payer in 0..OPEN {
        harness.run(Op::Prepare {
            payer: (payer % 2) as u8,
            amount: 1 + payer as i64,
            ttl_ms: 50,
        });
    }
    let prepared: Vec<TransferId> = harness.reserved.iter().map(|(id, _)| *id).collect();
    assert_eq!(prepared.len(), OPEN, "every prepare reserved");
    let feed = SqliteFeed::open(dir.path()).expect("open the feed");
    let before = whole_feed(&feed, 0).len() as u64;
    harness.run(Op::Advance(1_000));
    let expired = whole_feed(&feed, before);
    assert_eq!(expired.len(), OPEN, "a row per expired transfer");
    let mut keys = Vec::new();
    for (at, row) in expired.iter().enumerate() {
        assert_eq!(row.feed_seq, before + 1 + at as u64, "gap-free");
        assert_eq!(row.kind, "transfer.expired");
        let body: serde_json::Value = serde_json::from_str(&row.body).expect("JSON");
        let at_prepare = prepared
            .iter()
            .position(|p| p.to_string() == row.key)
            .expect("a prepared id");
        let id = prepared[at_prepare];
        // The row's amount is its own transfer's, whichever chunk it is in.
        assert_eq!(body["amount"], format!("{}", 1 + at_prepare), "{}", row.key);
        let payer = harness.dfsps[at_prepare % 2].0;
        let payee = harness.reserved[at_prepare].1;
        assert_eq!(row.participant, payer.as_str(), "{}", row.key);
        assert_eq!(
            row.counterparty.as_deref(),
            Some(payee.as_str()),
            "{}",
            row.key
        );
        keys.push(id);
    }
    keys.sort();
    let mut want = prepared.clone();
    want.sort();
    assert_eq!(keys, want, "each expired transfer once");
}
