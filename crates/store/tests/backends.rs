//! The two backends are one store: whatever the ledger did, the SQLite
//! store and the PostgreSQL store give back the same rows, the same sums
//! with a horizon, the same point reads; and the PostgreSQL store refuses
//! databases it must not touch. Each test runs its own throw-away
//! PostgreSQL cluster (see the `testpg` crate).

mod support;

use ledger::*;
use proptest::prelude::*;
use store::pg::PgStore;
use store::pg_reader::PgReader;
use store::{Store, StoreReader};
use support::{fsp, op, usd, Harness, Op};

/// Everything a restart, an audit or the hub reads, compared between the
/// two stores.
fn assert_same(harness: &mut Harness, url: &str, horizon_ms: i64, since_ms: i64) {
    let pg = harness.pg.as_mut().expect("a PostgreSQL store");
    let whole = pg.load().expect("load from PostgreSQL");
    assert_eq!(whole, harness.store.load().expect("load from SQLite"));
    let recent = pg
        .load_recent(horizon_ms)
        .expect("load_recent from PostgreSQL");
    assert_eq!(
        recent,
        harness
            .store
            .load_recent(horizon_ms)
            .expect("load_recent from SQLite")
    );
    // Both started from the same history snapshot, which agrees with the
    // whole history on both.
    assert_eq!(
        pg.history_snapshot_through(),
        harness.store.history_snapshot_through()
    );
    let check = pg.check_history_snapshot().expect("check on PostgreSQL");
    assert!(matches!(check, None | Some((_, Ok(())))), "{check:?}");
    assert_eq!(
        check,
        harness
            .store
            .check_history_snapshot()
            .expect("check on SQLite")
    );
    // The audit before serving passes on what PostgreSQL gives back.
    let limits = Limits {
        transfer_retention_ms: Some(1_000),
        ..Limits::default()
    };
    Ledger::restore(recent, limits).expect("restore from PostgreSQL with a horizon");
    Ledger::restore(whole.clone(), Limits::default()).expect("restore from PostgreSQL");

    let reader = PgReader::open(url).expect("open a PostgreSQL reader");
    let lookup = harness.lookup();
    for transfer in &whole.transfers {
        assert_eq!(
            reader.find_transfer(transfer.transfer_id).expect("find"),
            lookup.find_transfer(transfer.transfer_id).expect("find"),
            "transfer {:?}",
            transfer.transfer_id
        );
    }
    let unknown = TransferId::new(u128::MAX - 7);
    assert_eq!(reader.find_transfer(unknown).expect("find"), None);
    // The pipeline's prefetch reads the same on both, on the writer and on
    // a reader of the ledger thread's own, unknown ids included.
    let mut ids = PrefetchIds {
        transfers: whole.transfers.iter().map(|t| t.transfer_id).collect(),
        quotes: whole.quotes.iter().map(|q| q.quote_id).collect(),
        conversions: vec![],
    };
    ids.transfers.push(unknown);
    ids.quotes.push(unknown);
    let from_sqlite = harness.store.prefetch(&ids).expect("prefetch on SQLite");
    let pg = harness.pg.as_mut().expect("a PostgreSQL store");
    for (which, prefetched) in [
        ("writer", pg.prefetch(&ids).expect("prefetch on PostgreSQL")),
        (
            "reader",
            pg.open_prefetcher()
                .expect("a PostgreSQL prefetcher")
                .prefetch(&ids)
                .expect("prefetch on a PostgreSQL reader"),
        ),
    ] {
        assert_eq!(prefetched.transfers, from_sqlite.transfers, "{which}");
        assert_eq!(prefetched.quotes, from_sqlite.quotes, "{which}");
        assert!(prefetched.unreadable.is_empty(), "{which}");
        assert_eq!(prefetched.transfers[&unknown], Lookup::Absent);
    }
    let sorted = |mut touched: Vec<store::Touched>| {
        touched.sort_by_key(|(view, _, _)| view.transfer_id);
        touched
    };
    assert_eq!(
        sorted(reader.transfers_touched_since(since_ms).expect("touched")),
        sorted(lookup.transfers_touched_since(since_ms).expect("touched"))
    );
}

/// A transfer whose participant row is gone is an error to the PostgreSQL
/// reader, as to SQLite's, never "not found": that answer would let its id
/// be used again.
#[test]
fn a_transfer_whose_participant_is_missing_is_an_error_to_the_reader() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("damaged");
    let dir = tempfile::tempdir().expect("tempdir");
    let pg = PgStore::open(&url).expect("open");
    let mut harness = Harness::with_pg(dir.path(), Some(pg));
    harness.run(Op::Prepare {
        payer: 0,
        amount: 5,
        ttl_ms: 60_000,
    });
    let (transfer_id, _) = harness.reserved[0];
    let reader = PgReader::open(&url).expect("open a PostgreSQL reader");
    assert!(reader.find_transfer(transfer_id).expect("find").is_some());
    let mut raw = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    let deleted = raw
        .execute("DELETE FROM participants WHERE name = 'dfspb'", &[])
        .expect("damage");
    assert_eq!(deleted, 1);
    let found = reader.find_transfer(transfer_id);
    assert!(found.is_err(), "{found:?}");
    // The prefetch refuses the damaged row alone: the id asked beside it
    // is still answered.
    let unknown = TransferId::new(u128::MAX);
    let prefetched = PgStore::open(&url)
        .expect("open")
        .prefetch(&PrefetchIds {
            transfers: vec![transfer_id, unknown],
            quotes: vec![],
            conversions: vec![],
        })
        .expect("the read as a whole");
    assert_eq!(prefetched.transfers[&transfer_id], Lookup::Failed);
    assert_eq!(prefetched.transfers[&unknown], Lookup::Absent);
    assert_eq!(prefetched.unreadable.len(), 1, "{prefetched:?}");
    let touched = reader.transfers_touched_since(0);
    assert!(
        touched.is_err(),
        "not left out of what a restart notifies again"
    );
    assert_eq!(
        reader
            .find_transfer(TransferId::new(u128::MAX))
            .expect("find"),
        None
    );
}

/// Whatever the ledger did, batch by batch, both stores give back the
/// same thing, and what PostgreSQL gives back passes the audit. One
/// cluster for all cases, a database for each.
#[test]
fn both_backends_give_back_the_same_history() {
    // Loads of more than a few rows read in two parts at once.
    store::history::read_in_two_parts_from(4);
    let cluster = testpg::Cluster::start();
    let case = std::cell::Cell::new(0u32);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 16,
        // A failing case is printed, shrunk; run outside proptest!, there
        // is no source file to persist it beside.
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let strategy = (
        prop::collection::vec(op(), 1..80),
        0i64..8_000,
        any::<prop::sample::Index>(),
        0i64..3_000,
    );
    let warm_used = std::cell::Cell::new(0u32);
    let snapshot_used = std::cell::Cell::new(0u32);
    runner
        .run(&strategy, |(ops, behind_ms, warm_at, warm_behind_ms)| {
            case.set(case.get() + 1);
            let url = cluster.create_database(&format!("case{}", case.get()));
            let dir = tempfile::tempdir().expect("tempdir");
            let pg = PgStore::open(&url).expect("open the PostgreSQL store");
            let mut harness = Harness::with_pg(dir.path(), Some(pg));
            // A standby's warm copy, made part way and refreshed at the
            // end, must give what a cold load gives.
            let warm_at = warm_at.index(ops.len());
            let mut warm_horizon_ms = None;
            for (at, op) in ops.into_iter().enumerate() {
                match op {
                    // The copy is compared with a cold load at the horizon
                    // it was made with, so once it exists snapshots cut no
                    // later (a standby's copy is used at a later horizon,
                    // where a snapshot cut since sums more: the audit, not
                    // equality, is what holds there).
                    Op::Snapshot { behind_ms } => {
                        let cut_ms = harness.now - behind_ms;
                        harness.snapshot(warm_horizon_ms.map_or(cut_ms, |h: i64| cut_ms.min(h)));
                    }
                    op => harness.run(op),
                }
                if at == warm_at || (warm_horizon_ms.is_some() && at % 7 == 0) {
                    let horizon_ms = *warm_horizon_ms.get_or_insert(harness.now - warm_behind_ms);
                    harness
                        .pg
                        .as_mut()
                        .unwrap()
                        .warm(Some(horizon_ms))
                        .expect("warm");
                }
            }
            let warm_horizon_ms = warm_horizon_ms.expect("warmed once");
            let pg = harness.pg.as_mut().unwrap();
            let warm = pg.load_recent(warm_horizon_ms).expect("load the warm copy");
            if pg.loaded_from_warm_copy() {
                warm_used.set(warm_used.get() + 1);
            }
            assert_eq!(
                warm,
                harness
                    .store
                    .load_recent(warm_horizon_ms)
                    .expect("cold load from SQLite"),
                "the warm copy differs from a cold load"
            );
            let horizon_ms = harness.now - behind_ms;
            assert_same(&mut harness, &url, horizon_ms, horizon_ms);
            // Recovery drops a snapshot it started from (it did not add
            // up): the next load reads the whole history, which at a
            // horizon at or after the cut gives the same.
            let pg = harness.pg.as_mut().unwrap();
            let used = pg.history_snapshot_through().is_some();
            if used {
                snapshot_used.set(snapshot_used.get() + 1);
            }
            assert_eq!(pg.forget_history_snapshot().expect("forget"), used);
            assert_eq!(pg.history_snapshot().expect("read"), None);
            let horizon_ms = horizon_ms.max(harness.last_cut);
            let pg = harness.pg.as_mut().unwrap();
            let whole = pg.load_recent(horizon_ms).expect("load the whole history");
            assert_eq!(pg.history_snapshot_through(), None);
            assert_eq!(
                whole,
                harness
                    .store
                    .load_recent(horizon_ms)
                    .expect("load from SQLite")
            );
            Ok(())
        })
        .unwrap();
    // Most cases close no window after warming: the copy was used.
    assert!(
        warm_used.get() >= 4,
        "the warm copy was used {} times",
        warm_used.get()
    );
    assert!(
        snapshot_used.get() >= 4,
        "a load started from a history snapshot {} times",
        snapshot_used.get()
    );
}

/// Rows of every kind the ledger records, including the ones random
/// transfers never make (settlements, quotes, oracles, audit events,
/// certificate pins), round-trip through both stores alike, and several
/// batches in one commit keep only the last state of a row.
#[test]
fn every_kind_of_record_round_trips_alike() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("kinds");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sqlite = store::sqlite::SqliteStore::open(dir.path(), Default::default()).unwrap();
    let mut pg = PgStore::open(&url).expect("open");
    let id = |n: u128| TransferId::new(n);
    let key = PartyKey {
        id_type: "MSISDN".into(),
        identifier: "2557000".into(),
        sub_id: None,
    };
    let other_key = PartyKey {
        sub_id: Some("sub".into()),
        ..key.clone()
    };
    let account = |n: u32, value: i64| AccountRow {
        id: AccountId(n),
        participant: ParticipantId(1),
        currency: usd(),
        kind: AccountKind::Position,
        active: true,
        value: Amount::from_whole(value),
        reserved: Amount::from_whole(1),
        net_debit_cap: (n == 1).then(|| Amount::from_whole(500)),
        created_at_ms: 5,
        changed_at_ms: 5 + i64::from(n),
    };
    let quote = |answered: bool| QuoteRow {
        quote_id: id(77),
        payer: ParticipantId(1),
        payee: ParticipantId(2),
        request_hash: RequestHash([4; 32]),
        received_at_ms: 10,
        answer: answered.then(|| QuoteAnswer {
            request_hash: RequestHash([5; 32]),
            is_error: false,
            body: "{\"transferAmount\":{}}".into(),
            answered_at_ms: 11,
        }),
    };
    let first: Vec<Record> = vec![
        Record::Participant(ParticipantRow {
            id: ParticipantId(1),
            name: fsp("payerfsp"),
            is_hub: false,
            active: true,
            created_at_ms: 1,
        }),
        Record::Account(account(1, 10)),
        Record::Account(account(2, 20)),
        Record::Endpoint(EndpointRow {
            participant: ParticipantId(1),
            endpoint_type: "FSPIOP_CALLBACK_URL_TRANSFER_POST".into(),
            value: "http://payer/transfers".into(),
        }),
        Record::Endpoint(EndpointRow {
            participant: ParticipantId(1),
            endpoint_type: "FSPIOP_CALLBACK_URL_QUOTES".into(),
            value: "http://payer".into(),
        }),
        Record::SettlementModel(SettlementModelRow {
            id: 1,
            name: "DEFERREDNET".into(),
            definition: "{}".into(),
            rules: Some(ModelRules {
                granularity: Granularity::Net,
                interchange: Interchange::Multilateral,
                delay: Delay::Deferred,
                currency: Some(usd()),
                ledger_account_type: AccountKind::Position,
                settlement_account_type: AccountKind::Settlement,
                auto_position_reset: true,
                require_liquidity_check: true,
            }),
        }),
        Record::SettlementModel(SettlementModelRow {
            id: 2,
            name: "UNREADABLE".into(),
            definition: "not json".into(),
            rules: None,
        }),
        Record::Party(PartyRow {
            key: key.clone(),
            fsp: ParticipantId(1),
            currency: Some(usd()),
            registered_at_ms: 3,
        }),
        Record::Party(PartyRow {
            key: other_key.clone(),
            fsp: ParticipantId(1),
            currency: None,
            registered_at_ms: 3,
        }),
        Record::Oracle(OracleRow {
            id: 1,
            id_type: "MSISDN".into(),
            endpoint: "http://oracle".into(),
            currency: None,
            is_default: true,
            active: true,
        }),
        Record::Quote(quote(false)),
        Record::AuditEvent(AuditEventRow {
            id: 1,
            at_ms: 9,
            actor: "ops".into(),
            role: "admin".into(),
            action: "participant.create".into(),
            target: "payerfsp".into(),
            before: "{}".into(),
            after: "{\"isActive\":1}".into(),
            outcome: "ok".into(),
        }),
        Record::CertificatePin(PinRow {
            fingerprint: [6; 32],
            participant: ParticipantId(1),
            pinned_at_ms: 9,
        }),
        Record::CertificatePin(PinRow {
            fingerprint: [7; 32],
            participant: ParticipantId(1),
            pinned_at_ms: 9,
        }),
        Record::Window(WindowRow {
            id: 1,
            state: WindowState::Open,
            reason: "first".into(),
            created_at_ms: 1,
            changed_at_ms: 1,
        }),
    ];
    // The second batch changes rows the first made, in the same commit.
    let second: Vec<Record> = vec![
        Record::Account(account(1, 15)),
        Record::Quote(quote(true)),
        Record::PartyDeleted(other_key.clone()),
        Record::OracleDeleted(1),
        Record::CertificateUnpinned([7; 32]),
        Record::Window(WindowRow {
            id: 1,
            state: WindowState::Closed,
            reason: "closed".into(),
            created_at_ms: 1,
            changed_at_ms: 2,
        }),
        Record::Content(ContentRow {
            id: 1,
            window: 1,
            ledger_account_type: AccountKind::Position,
            currency: usd(),
            model: 1,
            state: WindowState::Closed,
            settlement: Some(1),
            created_at_ms: 2,
            changed_at_ms: 2,
        }),
        Record::ContentAccounts(vec![ContentAccountRow {
            content: 1,
            account: AccountId(1),
            sent: Amount::from_whole(5),
            sent_count: 2,
            received: Amount::from_whole(0),
            received_count: 0,
        }]),
        Record::ContentPairs(vec![ContentPairRow {
            content: 1,
            payer: AccountId(1),
            payee: AccountId(2),
            amount: Amount::from_whole(5),
            count: 2,
        }]),
        Record::Settlement(SettlementRow {
            id: 1,
            model: 1,
            state: SettlementState::PendingSettlement,
            reason: "settle".into(),
            external_reference: Some("ext".into()),
            created_at_ms: 3,
            changed_at_ms: 3,
            windows: vec![1],
            accounts: vec![SettlementAccountRow {
                account: AccountId(1),
                participant: ParticipantId(1),
                currency: usd(),
                net: Amount::from_whole(-5),
                state: SettlementState::PendingSettlement,
                reason: "settle".into(),
                external_reference: None,
                changed_at_ms: 3,
            }],
        }),
        Record::Entry(EntryRow {
            seq: 1,
            kind: EntryKind::SenderReset,
            debit: AccountId(1),
            credit: AccountId(2),
            amount: Amount::from_whole(5),
            at_ms: 4,
            settlement: Some(1),
            transfer: Some(id(99)),
        }),
    ];
    for store in [&mut sqlite as &mut dyn Store, &mut pg] {
        store.commit(&[&first, &second]).expect("commit");
    }
    let from_pg = pg.load().expect("load");
    assert_eq!(from_pg, sqlite.load().expect("load"));
    // And it is what was written, not merely the same on both sides.
    assert_eq!(from_pg.accounts[0].value, Amount::from_whole(15));
    assert!(from_pg.quotes[0].answer.is_some());
    assert_eq!(from_pg.parties.len(), 1);
    assert!(!from_pg.oracles[0].active);
    assert_eq!(from_pg.certificate_pins.len(), 1);
    assert_eq!(from_pg.windows[0].state, WindowState::Closed);
    assert_eq!(from_pg.settlements[0].accounts.len(), 1);
    assert_eq!(from_pg.entries[0].transfer, Some(id(99)));
    assert_eq!(from_pg.settlement_models[1].rules, None);
    assert!(from_pg.settlement_models[0].rules.is_some());
    let reader = PgReader::open(&url).expect("reader");
    assert_eq!(reader.find_quote(id(77)).expect("find"), Some(quote(true)));
    assert_eq!(reader.find_quote(id(78)).expect("find"), None);
}

/// kasi creates its schema once, reopens it as it is, and refuses what
/// it must not touch: another application's tables, a newer kasi's
/// schema, a kasi_meta it did not write; an empty database is no store to
/// audit; an unreachable server is named without its password.
#[test]
fn the_schema_is_kasis_own_and_versioned() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let mut store = PgStore::open(&url).expect("create");
    let rows = vec![Record::Participant(ParticipantRow {
        id: ParticipantId(1),
        name: fsp("Hub"),
        is_hub: true,
        active: true,
        created_at_ms: 1,
    })];
    store.commit(&[&rows]).expect("commit");
    drop(store);
    let mut again = PgStore::open(&url).expect("reopen");
    assert_eq!(again.load().expect("load").participants.len(), 1);
    drop(again);

    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    client
        .batch_execute("UPDATE kasi_meta SET value = '99' WHERE key = 'schema_version'")
        .unwrap();
    let error = PgStore::open(&url)
        .err()
        .expect("a newer schema is refused");
    assert!(
        error.message.contains("schema version 99") && error.message.contains("newer kasi"),
        "{error}"
    );
    let error = PgStore::open_read_only(&url)
        .err()
        .expect("refused to audit too");
    assert!(error.message.contains("schema version 99"), "{error}");
    client
        .batch_execute("UPDATE kasi_meta SET value = 'something else' WHERE key = 'kind'")
        .unwrap();
    let error = PgStore::open(&url)
        .err()
        .expect("a foreign kasi_meta is refused");
    assert!(error.message.contains("did not write"), "{error}");

    let other = cluster.create_database("central_ledger");
    let mut client = postgres::Client::connect(&other, postgres::NoTls).expect("connect");
    client
        .batch_execute("CREATE TABLE participant (participantId INT PRIMARY KEY)")
        .unwrap();
    let error = PgStore::open(&other)
        .err()
        .expect("another application's tables");
    assert!(error.message.contains("not a kasi store"), "{error}");
    let count: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(count, 1, "kasi created tables beside another application's");

    let empty = cluster.create_database("empty");
    let error = PgStore::open_read_only(&empty)
        .err()
        .expect("nothing to audit");
    assert!(error.message.contains("no kasi store"), "{error}");

    let port = cluster.port();
    drop(cluster);
    let unreachable = format!("postgres://kasi:s3cret@127.0.0.1:{port}/hub?connect_timeout=2");
    let error = PgStore::open(&unreachable).err().expect("no server");
    assert!(error.message.contains("cannot connect"), "{error}");
    assert!(error.message.contains("kasi:***@127.0.0.1"), "{error}");
    assert!(!error.message.contains("s3cret"), "{error}");
}

/// What migration 5 (the history snapshot) added.
const UNDO_MIGRATION_5: &str = "DROP TABLE history_snapshot, history_snapshot_values,
    history_snapshot_pairs, history_snapshot_kept; DROP INDEX transfers_funds";

/// A database of an older schema version is read as it is by `kasi
/// audit` (read-only, not migrated): a column it predates reads as the
/// migration that added it would fill it in — an account's last change
/// as its creation, a fulfil's abort with 3100 as an invalid fulfilment —
/// and once a hub migrates it, it reads the same.
#[test]
fn an_older_schema_is_read_as_it_is_and_as_migrated() {
    let cluster = testpg::Cluster::start();
    let transfer = |seq: u64| TransferRow {
        seq,
        transfer_id: TransferId::new(u128::from(seq) + 1000),
        kind: TransferKind::Fspiop,
        debit: AccountId(1),
        credit: AccountId(1),
        amount: Amount::from_whole(3),
        condition: Condition([7; 32]),
        expiration_ms: 1_000,
        prepared_at_ms: 500,
        request_hash: RequestHash([seq as u8; 32]),
        state: TransferState::Reserved,
        reason: None,
        memo: None,
        wire_version: 0x11,
        fx: None,
    };
    let finish = |seq: u64, kind: FinishKind, state: TransferState, reason: u16| FinishRow {
        seq,
        kind,
        state,
        reason: Some(ErrorCode(reason)),
        cause: None,
        finished_at_ms: 600,
        request_hash: RequestHash([0xF0 | seq as u8; 32]),
        fulfilment: None,
        settlement_window: None,
    };
    let records = vec![
        Record::Participant(ParticipantRow {
            id: ParticipantId(1),
            name: fsp("payerfsp"),
            is_hub: false,
            active: true,
            created_at_ms: 1,
        }),
        Record::Account(AccountRow {
            id: AccountId(1),
            participant: ParticipantId(1),
            currency: usd(),
            kind: AccountKind::Position,
            active: true,
            value: Amount::ZERO,
            reserved: Amount::ZERO,
            net_debit_cap: None,
            created_at_ms: 10,
            changed_at_ms: 70,
        }),
        Record::Transfer(transfer(1)),
        Record::Transfer(transfer(2)),
        Record::Transfer(transfer(3)),
        Record::Finish(finish(1, FinishKind::Fulfil, TransferState::Aborted, 3100)),
        Record::Finish(finish(2, FinishKind::Abort, TransferState::Aborted, 3100)),
        Record::Finish(finish(3, FinishKind::Expiry, TransferState::Expired, 3303)),
    ];
    let causes = |snapshot: &Snapshot| -> Vec<Option<AbortCause>> {
        snapshot.finishes.iter().map(|f| f.cause).collect()
    };
    let back_filled = [Some(AbortCause::InvalidFulfilment), None, None];
    for (version, downgrade, changed_at_ms) in [
        (
            3,
            "ALTER TABLE transfer_finishes DROP COLUMN cause".to_string(),
            70,
        ),
        (
            2,
            "ALTER TABLE transfer_finishes DROP COLUMN cause; ALTER TABLE accounts DROP COLUMN changed_at_ms".to_string(),
            10,
        ),
    ] {
        let downgrade = format!("{UNDO_MIGRATION_5}; {downgrade}");
        let url = cluster.create_database(&format!("version{version}"));
        let mut store = PgStore::open(&url).expect("create");
        store.commit(&[&records]).expect("commit");
        drop(store);
        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        client
            .batch_execute(&format!(
                "{downgrade}; UPDATE kasi_meta SET value = '{version}' WHERE key = 'schema_version'"
            ))
            .unwrap();

        let mut old = PgStore::open_read_only(&url).expect("open read-only");
        let whole = old.load().expect("load as it is");
        assert_eq!(causes(&whole), back_filled, "version {version}");
        assert_eq!(whole.accounts[0].changed_at_ms, changed_at_ms);
        let recent = old.load_recent(0).expect("load_recent as it is");
        assert_eq!(causes(&recent), back_filled, "version {version}");
        drop(old);
        let stored: String = client
            .query_one("SELECT value FROM kasi_meta WHERE key = 'schema_version'", &[])
            .unwrap()
            .get(0);
        assert_eq!(stored, version.to_string(), "an audit changes nothing");

        let mut migrated = PgStore::open(&url).expect("migrate");
        let now = migrated.load().expect("load migrated");
        assert_eq!(causes(&now), back_filled, "version {version}, migrated");
        assert_eq!(now.accounts[0].changed_at_ms, changed_at_ms);
    }
}
