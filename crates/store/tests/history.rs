//! History snapshots: recovery that starts from a snapshot and reads what
//! came after it gives exactly what recovery from the whole history gives.

mod support;

use ledger::*;
use proptest::prelude::*;
use store::sqlite::{SqliteOptions, SqliteStore};
use store::{Store, StoreReader as _};
use support::{op, Harness, Op};

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever happened and wherever the snapshots were taken, recovery
    /// from the snapshot plus what came after equals recovery from the
    /// whole history, and the ledger it gives passes the audit.
    #[test]
    fn recovery_from_a_snapshot_equals_recovery_from_the_whole_history(
        ops in prop::collection::vec(op(), 1..120),
        horizon_behind_ms in 0i64..8_000,
    ) {
        // Loads of more than a few rows read in two parts at once.
        store::history::read_in_two_parts_from(4);
        let dir = tempfile::tempdir().expect("tempdir");
        let mut harness = Harness::new(dir.path());
        for op in ops {
            harness.run(op);
        }
        if harness.last_cut != i64::MIN {
            let checked = harness.store.check_history_snapshot().expect("check");
            prop_assert!(matches!(checked, Some((_, Ok(())))), "{:?}", checked);
        }
        let horizon_ms = (harness.now - horizon_behind_ms).max(harness.last_cut);
        let from_snapshot = harness.store.load_recent(horizon_ms).expect("load from the snapshot");
        let used = harness.store.history_snapshot_through();
        prop_assert_eq!(used.is_some(), harness.last_cut != i64::MIN);
        prop_assert!(harness.store.forget_history_snapshot().expect("forget") == used.is_some());
        let whole = harness.store.load_recent(horizon_ms).expect("load the whole history");
        prop_assert!(harness.store.history_snapshot_through().is_none());
        prop_assert_eq!(&from_snapshot, &whole);
        let limits = Limits { transfer_retention_ms: Some(1_000), ..Limits::default() };
        Ledger::restore(from_snapshot, limits).map_err(TestCaseError::fail)?;

        // What a restart notifies again: read by index, the same as a scan.
        let since_ms = harness.now - horizon_behind_ms;
        let all = harness.store.load().expect("load");
        let mut expected: Vec<TransferId> = all
            .transfers
            .iter()
            .filter(|t| t.kind.is_between_positions())
            .filter(|t| {
                t.prepared_at_ms >= since_ms
                    || all.finishes.iter().any(|f| f.seq == t.seq && f.finished_at_ms >= since_ms)
                    || all
                        .conversion_fulfils
                        .iter()
                        .any(|c| c.seq == t.seq && c.at_ms >= since_ms)
            })
            .map(|t| t.transfer_id)
            .collect();
        let mut touched: Vec<TransferId> = harness
            .lookup()
            .transfers_touched_since(since_ms)
            .expect("touched")
            .into_iter()
            .map(|(view, _, _)| view.transfer_id)
            .collect();
        expected.sort();
        touched.sort();
        prop_assert_eq!(touched, expected);

        // The pipeline's prefetch on the writer's connection reads what
        // its reader of its own reads, and what a point read reads,
        // unknown ids included.
        let mut ids: Vec<TransferId> = all.transfers.iter().map(|t| t.transfer_id).collect();
        ids.insert(ids.len() / 2, TransferId::new(u128::MAX - 1));
        let ids = PrefetchIds {
            transfers: ids,
            quotes: vec![],
            conversions: vec![],
        };
        let reader = harness.lookup();
        let expected: std::collections::HashMap<_, _> = ids
            .transfers
            .iter()
            .map(|&id| match reader.find(id).expect("find") {
                Some(stored) => (id, Lookup::Found(stored)),
                None => (id, Lookup::Absent),
            })
            .collect();
        let from_writer = harness.store.prefetch(&ids).expect("a read on the writer");
        prop_assert!(from_writer.unreadable.is_empty());
        prop_assert_eq!(&from_writer.transfers, &expected);
        let from_reader = harness
            .store
            .open_prefetcher()
            .expect("a reader")
            .prefetch(&ids)
            .expect("a read on the reader");
        prop_assert_eq!(&from_reader.transfers, &expected);
    }
}

/// A transfer whose participant row is gone is an error to whoever looks
/// it up, never "not found": that answer would let its id be used again.
#[test]
fn a_transfer_whose_participant_is_missing_is_an_error_not_unknown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = Harness::new(dir.path());
    harness.run(Op::Prepare {
        payer: 0,
        amount: 5,
        ttl_ms: 60_000,
    });
    let (transfer_id, _) = harness.reserved[0];
    let asked = |ids: Vec<TransferId>| PrefetchIds {
        transfers: ids,
        quotes: vec![],
        conversions: vec![],
    };
    let found = harness
        .store
        .prefetch(&asked(vec![transfer_id]))
        .expect("read");
    assert!(
        matches!(found.transfers[&transfer_id], Lookup::Found(_)),
        "{found:?}"
    );
    let raw = rusqlite::Connection::open(dir.path().join("kasi.db")).expect("raw");
    let deleted = raw
        .execute("DELETE FROM participants WHERE name = 'dfspb'", [])
        .expect("damage");
    assert_eq!(deleted, 1);
    drop(raw);
    // The damaged row is an error of its own: the id asked beside it is
    // still answered.
    let unknown = TransferId::new(u128::MAX);
    let from_writer = harness
        .store
        .prefetch(&asked(vec![transfer_id, unknown]))
        .expect("the read as a whole");
    assert_eq!(from_writer.transfers[&transfer_id], Lookup::Failed);
    assert_eq!(from_writer.transfers[&unknown], Lookup::Absent);
    assert_eq!(from_writer.unreadable.len(), 1, "{from_writer:?}");
    let from_reader = harness.lookup().find(transfer_id);
    assert!(from_reader.is_err(), "{from_reader:?}");
    let touched = harness.lookup().transfers_touched_since(0);
    assert!(
        touched.is_err(),
        "not left out of what a restart notifies again"
    );
}

/// A snapshot survives reopening, and one that does not add up is caught by
/// the audit instead of being trusted.
#[test]
fn a_snapshot_that_does_not_add_up_is_refused_by_the_audit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = Harness::new(dir.path());
    for round in 0..20 {
        harness.run(Op::Prepare {
            payer: round % 3,
            amount: 5,
            ttl_ms: 1_000,
        });
        harness.run(Op::Fulfil(0));
        harness.run(Op::Advance(500));
    }
    harness.run(Op::Snapshot { behind_ms: 2_000 });
    let horizon_ms = harness.now - 1_000;
    let stored = harness
        .store
        .history_snapshot()
        .expect("read")
        .expect("a snapshot");
    assert!(stored.transfers > 0 && stored.through_seq > 0, "{stored:?}");
    let limits = Limits {
        transfer_retention_ms: Some(1_000),
        ..Limits::default()
    };
    drop(harness);

    let mut store = SqliteStore::open(dir.path(), SqliteOptions::default()).expect("reopen");
    assert_eq!(
        store.check_history_snapshot().expect("check"),
        Some((stored.through_seq, Ok(())))
    );
    let loaded = store.load_recent(horizon_ms).expect("load");
    assert_eq!(store.history_snapshot_through(), Some(stored.through_seq));
    assert!(loaded.archived.transfers >= stored.transfers);
    Ledger::restore(loaded, limits).expect("restore");
    drop(store);

    let raw = rusqlite::Connection::open(dir.path().join("kasi.db")).expect("raw");
    raw.execute("UPDATE history_snapshot_values SET value = '1' WHERE rowid IN (SELECT MIN(rowid) FROM history_snapshot_values)", [])
        .expect("tamper");
    drop(raw);
    let mut store = SqliteStore::open(dir.path(), SqliteOptions::default()).expect("reopen");
    let check = store.check_history_snapshot().expect("check");
    let loaded = store.load_recent(horizon_ms).expect("load");
    support::assert_tampered_snapshot_caught(check, stored.through_seq, loaded, limits);
}

/// A transfer a conversion depends on names its FSPIOP payer in its FX
/// row: with that participant's row gone, or the FX row damaged, reading
/// it is an error, never the FXP shown as its payer nor "not found".
#[test]
fn a_dependent_transfer_whose_payer_is_missing_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = Harness::new(dir.path());
    harness.run(Op::Convert {
        payer: 0,
        amount: 10,
        ttl_ms: 60_000,
    });
    harness.run(Op::FxpAnswer { n: 0, accept: true });
    harness.run(Op::Dependent(0));
    let (transfer_id, _) = harness.reserved[0];
    let found = harness.lookup().find(transfer_id).expect("find");
    assert_eq!(found.expect("stored").view.payer, support::fsp("dfspa"));
    for damage in [
        "UPDATE transfer_fx SET payer_id = NULL WHERE payer_id IS NOT NULL",
        "DELETE FROM participants WHERE name = 'dfspa'",
    ] {
        let raw = rusqlite::Connection::open(dir.path().join("kasi.db")).expect("raw");
        assert_eq!(raw.execute(damage, []).expect("damage"), 1, "{damage}");
        drop(raw);
        let found = harness.lookup().find(transfer_id);
        assert!(found.is_err(), "{damage}: {found:?}");
        let asked = PrefetchIds {
            transfers: vec![transfer_id],
            quotes: vec![],
            conversions: vec![],
        };
        let prefetched = harness.store.prefetch(&asked).expect("the read as a whole");
        assert_eq!(
            prefetched.transfers[&transfer_id],
            Lookup::Failed,
            "{damage}"
        );
        let raw = rusqlite::Connection::open(dir.path().join("kasi.db")).expect("raw");
        raw.execute(
            "UPDATE transfer_fx SET payer_id = 2 WHERE commit_request_id IS NOT NULL",
            [],
        )
        .expect("mend");
    }
}
