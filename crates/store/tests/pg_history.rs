//! The history snapshot on PostgreSQL: kept by the active's snapshotter
//! thread and stored inside its commits, used by a restart and by a
//! standby's warm copy (snapshot plus tail), dropped when what it gives
//! does not add up; an older store without it is read as it is. (That
//! snapshot plus tail equals a cold load, whatever happened, is the
//! property test in `backends.rs`, which advances both stores alike.)

mod support;

use std::time::{Duration, Instant};

use ledger::*;
use store::history::HistoryOptions;
use store::pg::PgStore;
use store::Store;
use support::{Harness, Op};

/// The ledger's limits with a retention horizon.
fn retention() -> Limits {
    Limits {
        transfer_retention_ms: Some(1_000),
        ..Limits::default()
    }
}

/// Some history: transfers committed, aborted, expired, rejected and still
/// open, a funds out, a window closed, time passing.
fn some_history(harness: &mut Harness, rounds: u8) {
    history_with(harness, rounds, true);
}

/// [`some_history`], with conversions (and their dependent transfers:
/// fulfilled, aborted, expired with them) or without.
fn history_with(harness: &mut Harness, rounds: u8, conversions: bool) {
    for round in 0..rounds {
        if conversions {
            harness.run(Op::Convert {
                payer: round % 3,
                amount: 4,
                ttl_ms: if round % 4 == 2 { 1_000 } else { 60_000 },
            });
            harness.run(Op::FxpAnswer {
                n: 0,
                accept: round % 5 != 3,
            });
            if round % 3 != 1 {
                harness.run(Op::Dependent(0));
            }
        }
        harness.run(Op::Prepare {
            payer: round % 3,
            amount: 5,
            ttl_ms: 1_000,
        });
        harness.run(Op::Prepare {
            payer: (round + 1) % 3,
            amount: if round % 5 == 0 { 5_000 } else { 7 },
            ttl_ms: 60_000,
        });
        harness.run(match round % 4 {
            0 => Op::Abort(1),
            _ => Op::Fulfil(0),
        });
        if round % 7 == 3 {
            harness.run(Op::CloseWindow);
        }
        if round % 6 == 1 {
            harness.run(Op::FundsOut {
                dfsp: round % 3,
                commit: round % 12 == 1,
            });
        }
        harness.run(Op::Advance(400));
    }
}

/// Polls `done` until it holds, failing after `within`.
fn wait_until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A snapshot survives reopening and a restart starts from it; one that
/// does not add up is caught: `kasi audit`'s check says so, the audit
/// before serving refuses it, and recovery drops it and reads the whole
/// history, which adds up.
#[test]
fn a_snapshot_that_does_not_add_up_is_dropped_and_the_whole_history_read() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = Harness::with_pg(dir.path(), Some(PgStore::open(&url).expect("open")));
    some_history(&mut harness, 30);
    harness.run(Op::Snapshot { behind_ms: 2_000 });
    let horizon_ms = harness.now - 1_000;
    let stored = harness
        .store
        .history_snapshot()
        .expect("read")
        .expect("a snapshot");
    assert!(
        stored.transfers > 10 && !stored.kept.is_empty(),
        "{stored:?}"
    );
    drop(harness);

    let mut store = PgStore::open(&url).expect("reopen");
    assert_eq!(
        store.check_history_snapshot().expect("check"),
        Some((stored.through_seq, Ok(())))
    );
    let loaded = store.load_recent(horizon_ms).expect("load");
    assert_eq!(store.history_snapshot_through(), Some(stored.through_seq));
    assert!(loaded.archived.transfers >= stored.transfers);
    Ledger::restore(loaded, retention()).expect("restore from the snapshot");

    let mut raw = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    raw.batch_execute(
        "UPDATE history_snapshot_values SET value = '1'
         WHERE account_id = (SELECT min(account_id) FROM history_snapshot_values)",
    )
    .expect("tamper");
    let mut audit = PgStore::open_read_only(&url).expect("open read-only");
    let check = audit.check_history_snapshot().expect("check");
    // What engine::recover does.
    let loaded = store.load_recent(horizon_ms).expect("load");
    support::assert_tampered_snapshot_caught(check, stored.through_seq, loaded, retention());
    assert!(store.forget_history_snapshot().expect("forget"));
    assert_eq!(store.history_snapshot().expect("read"), None, "not dropped");
    let loaded = store
        .load_recent(horizon_ms)
        .expect("load the whole history");
    assert_eq!(store.history_snapshot_through(), None);
    Ledger::restore(loaded, retention()).expect("the whole history adds up");
    assert!(!store.forget_history_snapshot().expect("nothing to forget"));
}

/// The active's snapshotter advances the stored snapshot while commits go
/// on (it starts with the first commit), reopens its connection when it
/// is cut, and a restart then reads only what the snapshot leaves.
#[test]
fn the_snapshotter_keeps_the_snapshot_current_and_survives_a_lost_connection() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut pg = PgStore::open(&url).expect("open");
    pg.keep_history_snapshot(Some(HistoryOptions {
        retention_ms: 1_000,
        interval: Duration::from_millis(20),
    }));
    let mut harness = Harness::with_pg(dir.path(), Some(pg));
    // The harness's clock starts in 2023: everything finished is summed.
    some_history(&mut harness, 20);
    let summed = |harness: &mut Harness| {
        harness
            .pg
            .as_mut()
            .unwrap()
            .history_snapshot()
            .expect("read")
            .map_or(0, |snapshot| snapshot.transfers)
    };
    // Stored in a commit: keep committing until it is.
    wait_until(Duration::from_secs(10), "a first snapshot", || {
        harness.run(Op::Advance(1));
        summed(&mut harness) > 0
    });
    let first = summed(&mut harness);

    let killed = cluster.query(
        "hub",
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE application_name = 'kasi history'",
    );
    assert_eq!(killed.trim(), "1", "the snapshotter's connection");
    some_history(&mut harness, 10);
    wait_until(
        Duration::from_secs(10),
        "the snapshot advances again",
        || {
            harness.run(Op::Advance(1));
            summed(&mut harness) > first
        },
    );

    let pg = harness.pg.as_mut().unwrap();
    pg.keep_history_snapshot(None);
    let check = pg.check_history_snapshot().expect("check");
    assert!(matches!(check, Some((_, Ok(())))), "{check:?}");
    // Its cut is by the wall clock, long after the harness's: at that
    // horizon the whole history gives the same.
    let horizon_ms = pg.history_snapshot().expect("read").expect("stored").cut_ms;
    let recent = pg.load_recent(horizon_ms).expect("load");
    assert!(pg.history_snapshot_through().is_some());
    assert_eq!(
        recent,
        harness.store.load_recent(horizon_ms).expect("SQLite")
    );
    Ledger::restore(recent, retention()).expect("restore");
}

/// A standby's warm copy starts from the stored snapshot (its cold read
/// loads only what the snapshot leaves), keeps current with the tail, and
/// a takeover's load from it adds up and equals a cold load; if it did
/// not add up, forgetting it drops the snapshot it started from too.
#[test]
fn a_standby_warms_from_the_snapshot_and_the_tail() {
    store::history::read_in_two_parts_from(4);
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = Harness::with_pg(dir.path(), Some(PgStore::open(&url).expect("open")));
    some_history(&mut harness, 40);
    harness.run(Op::Snapshot { behind_ms: 0 });
    let stored = harness
        .store
        .history_snapshot()
        .expect("read")
        .expect("a snapshot");

    let mut standby = PgStore::open(&url).expect("open the standby's store");
    let horizon_ms = harness.now;
    standby.warm(Some(horizon_ms)).expect("warm");
    let warm = standby.warm_transfers().expect("a warm copy");
    let all = harness.store.load().expect("load").transfers.len();
    let left = harness.store.load_recent(horizon_ms).expect("load");
    assert_eq!(
        harness.store.history_snapshot_through(),
        Some(stored.through_seq)
    );
    assert_eq!(warm, left.transfers.len(), "what the snapshot leaves");
    assert!(warm < all, "the cold read loaded all {all} transfers");
    some_history(&mut harness, 5);
    standby.warm(Some(horizon_ms)).expect("refresh");
    let taken = standby.load_recent(horizon_ms).expect("load");
    assert!(standby.loaded_from_warm_copy());
    assert_eq!(standby.history_snapshot_through(), Some(stored.through_seq));
    assert_eq!(
        taken,
        harness.store.load_recent(horizon_ms).expect("a cold load")
    );
    Ledger::restore(taken, retention()).expect("restore");
    assert!(standby.forget_history_snapshot().expect("forget"));
    assert_eq!(standby.history_snapshot().expect("read"), None);
    let whole = standby.load_recent(horizon_ms).expect("load");
    assert!(!standby.loaded_from_warm_copy());
    assert_eq!(standby.history_snapshot_through(), None);
    assert_eq!(
        whole,
        harness.store.load_recent(horizon_ms).expect("a cold load")
    );
}

/// A version 4 store (before the history snapshot and FX) is read as it is by
/// `kasi audit` (no snapshot to check, nothing created), and a hub
/// migrates it: the tables and the funds movements' index appear, and a
/// snapshot can be kept.
#[test]
fn a_version_4_store_is_read_as_it_is_and_gains_the_snapshot_when_served() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = Harness::with_pg(dir.path(), Some(PgStore::open(&url).expect("open")));
    // A version 4 store holds no conversions.
    history_with(&mut harness, 12, false);
    let horizon_ms = harness.now - 1_000;
    drop(harness.pg.take());
    let mut raw = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    raw.batch_execute(
        "DROP TABLE proxy_map; ALTER TABLE participants DROP COLUMN is_proxy;
         DROP TABLE commit_spans, commit_index;
         DROP TABLE party_blocks, party_index;
         DROP TABLE rollup_pairs, rollup_errors, rollup_latency;
         DROP TABLE changes, feed_cursors;
         DROP TABLE transfer_keys, search_index;
         ALTER TABLE transfers DROP COLUMN payer_party, DROP COLUMN payee_party;
         ALTER TABLE transfers DROP COLUMN payer_id, DROP COLUMN payee_id, DROP COLUMN currency,
            DROP COLUMN amount_units;
         ALTER TABLE audit_events DROP COLUMN source;
         DROP TABLE pending_changes;
         ALTER TABLE participants DROP COLUMN mode;
         DROP TABLE transfer_fx, conversion_fulfils, fxps;
         DROP TABLE history_snapshot, history_snapshot_values, history_snapshot_pairs,
            history_snapshot_kept;
         DROP INDEX transfers_funds;
         UPDATE kasi_meta SET value = '4' WHERE key = 'schema_version'",
    )
    .expect("downgrade");

    // The SQLite store's, but the FXP declared at the start: version 4
    // had no FXPs.
    let mut expected = || Snapshot {
        fxps: Vec::new(),
        ..harness.store.load_recent(horizon_ms).expect("SQLite")
    };
    let mut old = PgStore::open_read_only(&url).expect("open read-only");
    assert_eq!(old.check_history_snapshot().expect("check"), None);
    let recent = old.load_recent(horizon_ms).expect("load as it is");
    assert_eq!(old.history_snapshot_through(), None);
    assert_eq!(recent, expected());
    let tables: i64 = raw
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relname LIKE 'history_snapshot%'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "an audit creates nothing");

    let mut migrated = PgStore::open(&url).expect("migrate");
    let version: String = raw
        .query_one(
            "SELECT value FROM kasi_meta WHERE key = 'schema_version'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, "16");
    let funds_index: String = raw
        .query_one(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'transfers_funds'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        funds_index.contains("FUNDS_IN") && !funds_index.contains("<>"),
        "conversions are no funds movements: {funds_index}"
    );
    let snapshot = migrated
        .advance_history_snapshot(horizon_ms)
        .expect("a first snapshot");
    assert!(snapshot.transfers > 0, "{snapshot:?}");
    let recent = migrated.load_recent(horizon_ms).expect("load");
    assert_eq!(
        migrated.history_snapshot_through(),
        Some(snapshot.through_seq)
    );
    assert_eq!(recent, expected());
}

/// A version 5 store (before FX) is read as it is by `kasi audit` (its
/// history snapshot through the funds movements' index with the old
/// predicate; no FXPs), and a hub migrates it: the FX tables appear, the
/// index is built again without conversions, and conversions written
/// then are summed, kept and loaded as on SQLite.
#[test]
fn a_version_5_store_is_read_as_it_is_and_gains_fx_when_served() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = Harness::with_pg(dir.path(), Some(PgStore::open(&url).expect("open")));
    // A version 5 store holds no conversions.
    history_with(&mut harness, 12, false);
    let cut_ms = harness.now - 1_000;
    harness.snapshot(cut_ms);
    drop(harness.pg.take());
    let mut raw = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    raw.batch_execute(
        "DROP TABLE proxy_map; ALTER TABLE participants DROP COLUMN is_proxy;
         DROP TABLE commit_spans, commit_index;
         DROP TABLE party_blocks, party_index;
         DROP TABLE rollup_pairs, rollup_errors, rollup_latency;
         DROP TABLE changes, feed_cursors;
         DROP TABLE transfer_keys, search_index;
         ALTER TABLE transfers DROP COLUMN payer_party, DROP COLUMN payee_party;
         ALTER TABLE transfers DROP COLUMN payer_id, DROP COLUMN payee_id, DROP COLUMN currency,
            DROP COLUMN amount_units;
         ALTER TABLE audit_events DROP COLUMN source;
         DROP TABLE pending_changes;
         ALTER TABLE participants DROP COLUMN mode;
         DROP TABLE transfer_fx, conversion_fulfils, fxps;
         DROP INDEX transfers_funds;
         CREATE INDEX transfers_funds ON transfers (seq) WHERE kind <> 'TRANSFER';
         UPDATE kasi_meta SET value = '5' WHERE key = 'schema_version'",
    )
    .expect("downgrade");

    let mut old = PgStore::open_read_only(&url).expect("open read-only");
    let check = old.check_history_snapshot().expect("check");
    assert!(matches!(check, Some((_, Ok(())))), "{check:?}");
    let recent = old.load_recent(cut_ms).expect("load as it is");
    assert!(old.history_snapshot_through().is_some());
    let sqlite = harness.store.load_recent(cut_ms).expect("SQLite");
    assert_eq!(
        recent,
        Snapshot {
            fxps: Vec::new(),
            ..sqlite
        },
        "the FXP declared at the start: version 5 had none"
    );
    drop(old);

    harness.pg = Some(PgStore::open(&url).expect("migrate"));
    let version: String = raw
        .query_one(
            "SELECT value FROM kasi_meta WHERE key = 'schema_version'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, "16");
    // Declared again, on both.
    harness.run(Op::Corridors(false));
    harness.run(Op::Corridors(true));
    some_history(&mut harness, 12);
    harness.snapshot(harness.now - 1_000);
    let horizon_ms = harness.now - 500;
    let pg = harness.pg.as_mut().expect("PostgreSQL");
    let recent = pg.load_recent(horizon_ms).expect("load");
    assert!(pg.history_snapshot_through().is_some());
    assert!(
        recent.transfers.iter().any(|t| t.fx.is_some()),
        "{recent:?}"
    );
    assert_eq!(
        recent,
        harness.store.load_recent(horizon_ms).expect("SQLite")
    );
    let check = pg.check_history_snapshot().expect("check");
    assert!(matches!(check, Some((_, Ok(())))), "{check:?}");
    Ledger::restore(recent, retention()).expect("restore");
}
