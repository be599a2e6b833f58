//! The two backends are one store: whatever the ledger did, the SQLite
//! store and the PostgreSQL store give back the same rows, the same sums
//! with a horizon, the same point reads; and the PostgreSQL store refuses
//! databases it must not touch. Each test runs its own throw-away
//! PostgreSQL cluster (see the `testpg` crate).

mod support;

use ledger::*;
use proptest::prelude::*;
use store::feed::{FeedLog, FeedRow};
use store::pg::PgStore;
use store::pg_feed::PgFeed;
use store::pg_reader::PgReader;
use store::sqlite_feed::SqliteFeed;
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
    // The transfers are filed for search alike (participants, currency,
    // amount derived by each store from the accounts it holds).
    let from_sqlite = support::sqlite_search_columns(harness.dir());
    let from_pg: Vec<support::Filed> = postgres::Client::connect(url, postgres::NoTls)
        .expect("connect")
        .query(support::SEARCH_COLUMNS, &[])
        .expect("query")
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4)))
        .collect();
    assert!(
        from_sqlite
            .iter()
            .all(|(_, payer, payee, currency, units)| {
                payer.is_some()
                    && payee.is_some()
                    && currency.is_some()
                    && units.is_some_and(|u| u > 0)
            }),
        "every transfer filed: {from_sqlite:?}"
    );
    assert_eq!(from_pg, from_sqlite, "filed alike");
    // The parties the prepares named, and the search keys, alike too.
    let parties = "SELECT seq, payer_party, payee_party FROM transfers ORDER BY seq";
    let keys = "SELECT key, seq FROM transfer_keys ORDER BY key, seq";
    let sqlite_db = rusqlite::Connection::open(harness.dir().join("kasi.db")).expect("open");
    let mut pg_db = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    let sqlite_parties: Vec<(i64, Option<String>, Option<String>)> = sqlite_db
        .prepare(parties)
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let pg_parties: Vec<(i64, Option<String>, Option<String>)> = pg_db
        .query(parties, &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    assert_eq!(pg_parties, sqlite_parties, "parties kept alike");
    let sqlite_keys: Vec<(String, i64)> = sqlite_db
        .prepare(keys)
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let pg_keys: Vec<(String, i64)> = pg_db
        .query(keys, &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(pg_keys, sqlite_keys, "the same search keys");
    assert_same_feed(harness.dir(), url, &whole);
    let sorted = |mut touched: Vec<store::Touched>| {
        touched.sort_by_key(|(view, _, _)| view.transfer_id);
        touched
    };
    assert_eq!(
        sorted(reader.transfers_touched_since(since_ms).expect("touched")),
        sorted(lookup.transfers_touched_since(since_ms).expect("touched"))
    );
}

/// Every row of a feed, a page at a time.
fn whole_feed(feed: &dyn FeedLog, participant: Option<&str>) -> Vec<FeedRow> {
    let mut rows = Vec::new();
    let mut after = 0;
    loop {
        let page = feed
            .read_feed(after, store::feed::MAX_PAGE, participant)
            .expect("read the feed");
        if page.next_after == after {
            return rows;
        }
        after = page.next_after;
        rows.extend(page.rows);
    }
}

/// Both stores wrote the same change feed for the same records: numbered
/// from 1 without a gap, in time order, a row for every transfer's
/// prepare and finish; a DFSP's share alike too.
fn assert_same_feed(dir: &std::path::Path, url: &str, whole: &Snapshot) {
    let from_sqlite = whole_feed(&SqliteFeed::open(dir).expect("open the SQLite feed"), None);
    let pg_feed = PgFeed::open(url).expect("open the PostgreSQL feed");
    let from_pg = whole_feed(&pg_feed, None);
    assert_eq!(from_pg, from_sqlite, "the feeds differ");
    for (at, row) in from_sqlite.iter().enumerate() {
        assert_eq!(row.feed_seq, at as u64 + 1, "gap-free from 1");
        assert!(
            serde_json::from_str::<serde_json::Value>(&row.body).is_ok_and(|b| b.is_object()),
            "{row:?}"
        );
    }
    assert!(from_sqlite.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    let transfer_rows = |key: &str| {
        from_sqlite
            .iter()
            .filter(|row| row.key == key && !row.kind.starts_with("account"))
            .count()
    };
    for transfer in &whole.transfers {
        let finished = whole.finishes.iter().any(|f| f.seq == transfer.seq);
        let fulfilled = whole
            .conversion_fulfils
            .iter()
            .any(|f| f.seq == transfer.seq);
        assert_eq!(
            transfer_rows(&transfer.transfer_id.to_string()),
            1 + usize::from(finished) + usize::from(fulfilled),
            "the changes of {:?}",
            transfer.transfer_id
        );
    }
    if let Some(dfsp) = from_sqlite.iter().find_map(|row| row.counterparty.clone()) {
        let own = whole_feed(&pg_feed, Some(&dfsp));
        assert!(!own.is_empty());
        assert!(own
            .iter()
            .all(|row| row.participant == dfsp || row.counterparty.as_deref() == Some(&dfsp)));
        let expected: Vec<FeedRow> = from_sqlite
            .iter()
            .filter(|row| row.participant == dfsp || row.counterparty.as_deref() == Some(&dfsp))
            .cloned()
            .collect();
        assert_eq!(own, expected);
    }
}

/// A harness writing to SQLite and to a new database `name` of
/// `cluster`: the database's URL, the SQLite store's directory (kept while
/// it is held), the harness.
fn harness_on_pg(cluster: &testpg::Cluster, name: &str) -> (String, tempfile::TempDir, Harness) {
    let url = cluster.create_database(name);
    let dir = tempfile::tempdir().expect("tempdir");
    let pg = PgStore::open(&url).expect("open");
    let harness = Harness::with_pg(dir.path(), Some(pg));
    (url, dir, harness)
}

/// A committed transfer is read back from either store with the
/// settlement window its commit fell in, as memory shows it; an aborted
/// or a reserved one with none.
#[test]
fn both_stores_read_a_committed_transfer_with_its_settlement_window() {
    let cluster = testpg::Cluster::start();
    let (url, _dir, mut harness) = harness_on_pg(&cluster, "windows");
    for _ in 0..4 {
        harness.run(Op::Prepare {
            payer: 0,
            amount: 5,
            ttl_ms: 60_000,
        });
    }
    let ids: Vec<TransferId> = harness.reserved.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), 4);
    // The first commits in the open window, the second is aborted, the
    // third commits in the next window, the fourth stays reserved.
    let first = harness.open_window().expect("an open window");
    harness.run(Op::Fulfil(0));
    harness.run(Op::Abort(0));
    harness.run(Op::CloseWindow);
    let next = harness.open_window().expect("an open window");
    assert_ne!(first, next);
    harness.run(Op::Fulfil(0));
    let reader = PgReader::open(&url).expect("a PostgreSQL reader");
    let lookup = harness.lookup();
    for (id, window) in [
        (ids[0], Some(first)),
        (ids[1], None),
        (ids[2], Some(next)),
        (ids[3], None),
    ] {
        let outcomes = harness.apply(vec![Command::ReadTransfer { transfer_id: id }]);
        let Outcome::Transfer(in_memory) = &outcomes[0] else {
            panic!("{outcomes:?}");
        };
        assert_eq!(in_memory.settlement_window, window, "{id} in memory");
        for (backend, found) in [
            ("SQLite", lookup.find_transfer(id)),
            ("PostgreSQL", reader.find_transfer(id)),
        ] {
            let stored = found.expect("find").expect("stored");
            assert_eq!(stored.view.settlement_window, window, "{id} on {backend}");
            assert_eq!(stored.view, *in_memory, "{id} on {backend}");
        }
    }
}

/// A transfer whose participant row is gone is an error to the PostgreSQL
/// reader, as to SQLite's, never "not found": that answer would let its id
/// be used again.
#[test]
fn a_transfer_whose_participant_is_missing_is_an_error_to_the_reader() {
    let cluster = testpg::Cluster::start();
    let (url, _dir, mut harness) = harness_on_pg(&cluster, "damaged");
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
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(
        ProptestConfig {
            cases: 16,
            // A failing case is printed, shrunk; run outside proptest!, there
            // is no source file to persist it beside.
            failure_persistence: None,
            ..ProptestConfig::default()
        },
        // A fixed seed: what the cases cover is asserted below (warm starts,
        // snapshots, linked finishes), so it is the same on every run.
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    let strategy = (
        prop::collection::vec(op(), 1..80),
        0i64..8_000,
        any::<prop::sample::Index>(),
        0i64..3_000,
    );
    let warm_used = std::cell::Cell::new(0u32);
    let snapshot_used = std::cell::Cell::new(0u32);
    let linked_finishes = std::cell::Cell::new(0u32);
    runner
        .run(&strategy, |(ops, behind_ms, warm_at, warm_behind_ms)| {
            case.set(case.get() + 1);
            let url = cluster.create_database(&format!("case{}", case.get()));
            let dir = tempfile::tempdir().expect("tempdir");
            let pg = PgStore::open(&url).expect("open the PostgreSQL store");
            // A pass at every commit: the search keys compared below are
            // then the same on both whatever the commits took (a timed
            // pass falls due at a different commit on each).
            let pass = store::search::SearchPass {
                every: std::time::Duration::ZERO,
                most_transfers: 5_000,
            };
            let mut harness = Harness::with_search_pass(dir.path(), Some(pg), pass);
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
            let whole = harness.store.load().expect("load");
            let linked = whole
                .finishes
                .iter()
                .filter(|finish| finish.kind == FinishKind::Linked);
            linked_finishes.set(linked_finishes.get() + linked.count() as u32);
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
    // Conversions and their transfers finished together (committed,
    // aborted, expired): the FX rows went through every read above.
    assert!(
        linked_finishes.get() >= 2,
        "{} conversions finished with their transfers",
        linked_finishes.get()
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
            is_proxy: false,
            mode: ledger::ParticipantMode::SendOnly,
            created_at_ms: 1,
        }),
        Record::Account(account(1, 10)),
        Record::Account(account(2, 20)),
        Record::Participant(ParticipantRow {
            id: ParticipantId(2),
            name: fsp("pxAB"),
            is_hub: false,
            is_proxy: true,
            mode: ledger::ParticipantMode::Active,
            created_at_ms: 2,
        }),
        Record::ProxyMapping(ProxyMapRow {
            dfsp: fsp("dfspB"),
            proxy: ParticipantId(2),
            by_operator: false,
            since_ms: 3,
        }),
        Record::ProxyMapping(ProxyMapRow {
            dfsp: fsp("Zdfsp"),
            proxy: ParticipantId(2),
            by_operator: true,
            since_ms: 3,
        }),
        Record::ProxyMapping(ProxyMapRow {
            dfsp: fsp("dfspC"),
            proxy: ParticipantId(2),
            by_operator: false,
            since_ms: 3,
        }),
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
            rules: Some(support::deferred_net_usd(true)),
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
            source: "tokens-file".into(),
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
        Record::PendingChange(pending_change("a", "pending", 0)),
        Record::PendingChange(pending_change("b", "pending", 0)),
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
        Record::ProxyUnmapped(fsp("dfspC")),
        Record::ProxyMapping(ProxyMapRow {
            dfsp: fsp("dfspB"),
            proxy: ParticipantId(2),
            by_operator: true,
            since_ms: 4,
        }),
        Record::CertificateUnpinned([7; 32]),
        Record::PendingChange(pending_change("a", "applied", 5)),
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
    assert!(from_pg.participants[1].is_proxy && !from_pg.participants[0].is_proxy);
    // In the ledger's name order (upper case first), the last state of
    // each, the one dropped gone.
    assert_eq!(
        from_pg.proxy_map,
        [
            ProxyMapRow {
                dfsp: fsp("Zdfsp"),
                proxy: ParticipantId(2),
                by_operator: true,
                since_ms: 3,
            },
            ProxyMapRow {
                dfsp: fsp("dfspB"),
                proxy: ParticipantId(2),
                by_operator: true,
                since_ms: 4,
            },
        ]
    );
    assert_eq!(from_pg.certificate_pins.len(), 1);
    assert_eq!(from_pg.windows[0].state, WindowState::Closed);
    assert_eq!(from_pg.settlements[0].accounts.len(), 1);
    assert_eq!(from_pg.entries[0].transfer, Some(id(99)));
    assert_eq!(from_pg.settlement_models[1].rules, None);
    assert!(from_pg.settlement_models[0].rules.is_some());
    assert_eq!(
        from_pg.pending_changes,
        [
            pending_change("a", "applied", 5),
            pending_change("b", "pending", 0)
        ],
        "each row replaced whole by its last step"
    );
    let reader = PgReader::open(&url).expect("reader");
    assert_eq!(reader.find_quote(id(77)).expect("find"), Some(quote(true)));
    assert_eq!(reader.find_quote(id(78)).expect("find"), None);
}

/// A four-eyes pending change, decided at `decided_at_ms` (0: not yet).
fn pending_change(id: &str, state: &str, decided_at_ms: i64) -> ledger::PendingChangeRow {
    ledger::PendingChangeRow {
        id: id.into(),
        action: "funds-out".into(),
        target: "payerfsp".into(),
        method: "POST".into(),
        path: "/participants/payerfsp/accounts/3".into(),
        body: r#"{"action":"recordFundsOutPrepareReserve"}"#.into(),
        maker: "alice".into(),
        maker_role: "operator".into(),
        maker_source: "token".into(),
        reason: String::new(),
        created_at_ms: 1,
        expires_at_ms: 100,
        state: state.into(),
        checker: if decided_at_ms == 0 { "" } else { "bob" }.into(),
        checker_role: if decided_at_ms == 0 { "" } else { "finance" }.into(),
        decision_reason: String::new(),
        decided_at_ms,
    }
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
        is_proxy: false,
        mode: ledger::ParticipantMode::Active,
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

/// What migration 16 (proxies) added.
const UNDO_MIGRATION_16: &str =
    "DROP TABLE proxy_map; ALTER TABLE participants DROP COLUMN is_proxy";
/// What migration 15 (the commit index) added.
const UNDO_MIGRATION_15: &str = "DROP TABLE commit_spans, commit_index";
/// What migration 14 (the party index) added.
const UNDO_MIGRATION_14: &str = "DROP TABLE party_blocks, party_index";
/// What migration 13 (the hourly rollup) added.
const UNDO_MIGRATION_13: &str = "DROP TABLE rollup_pairs, rollup_errors, rollup_latency";
/// What migration 12 (the change feed) added.
const UNDO_MIGRATION_12: &str = "DROP TABLE changes, feed_cursors";

/// What migration 11 (the search keys) added.
const UNDO_MIGRATION_11: &str = "DROP TABLE transfer_keys, search_index;
    ALTER TABLE transfers DROP COLUMN payer_party, DROP COLUMN payee_party";

/// What migration 10 (the transfers' search columns) added; their
/// indexes go with the columns.
const UNDO_MIGRATION_10: &str =
    "ALTER TABLE transfers DROP COLUMN payer_id, DROP COLUMN payee_id, DROP COLUMN currency,
    DROP COLUMN amount_units";

/// What migration 9 (the audit events' source) added.
const UNDO_MIGRATION_9: &str = "ALTER TABLE audit_events DROP COLUMN source";

/// What migration 8 (four-eyes pending changes) added.
const UNDO_MIGRATION_8: &str = "DROP TABLE pending_changes";

/// What migration 7 (participants' modes) added.
const UNDO_MIGRATION_7: &str = "ALTER TABLE participants DROP COLUMN mode";

/// What migration 6 (FX) added; its new `transfers_funds` goes with
/// migration 5's.
const UNDO_MIGRATION_6: &str = "DROP TABLE transfer_fx, conversion_fulfils, fxps";

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
            is_proxy: false,
            mode: ledger::ParticipantMode::Active,
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
        let downgrade = format!("{UNDO_MIGRATION_16}; {UNDO_MIGRATION_15}; {UNDO_MIGRATION_14}; {UNDO_MIGRATION_13}; {UNDO_MIGRATION_12}; {UNDO_MIGRATION_11}; {UNDO_MIGRATION_10}; {UNDO_MIGRATION_9}; {UNDO_MIGRATION_8}; {UNDO_MIGRATION_7}; {UNDO_MIGRATION_6}; {UNDO_MIGRATION_5}; {downgrade}");
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
        // Migration 10 filed the transfers kept before for search.
        let filed: Vec<(i64, i64, String, i64)> = client
            .query(
                "SELECT payer_id, payee_id, currency, amount_units FROM transfers ORDER BY seq",
                &[],
            )
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
            .collect();
        assert_eq!(filed, vec![(1, 1, "USD".to_string(), 30_000); 3], "version {version}");
    }
}

/// The finish row of `transfer_id` in `snapshot`, as (kind, state).
fn finish_of(snapshot: &Snapshot, transfer_id: TransferId) -> Option<(FinishKind, TransferState)> {
    let seq = snapshot
        .transfers
        .iter()
        .find(|row| row.transfer_id == transfer_id)?
        .seq;
    let finish = snapshot.finishes.iter().find(|row| row.seq == seq)?;
    Some((finish.kind, finish.state))
}

/// Conversions round-trip through both stores alike: one committed with
/// its dependent transfer (the payee's FULFIL, the conversion's LINKED
/// finish), a pair aborted by the payee, a pair expired together, one the
/// FXP refused, one accepted and awaiting its transfer, one awaiting the
/// FXP; the FXP's corridors, withdrawn and declared again. A load gives
/// back exactly what the ledger holds; every point read, prefetch and
/// restart's redelivery read shows a stored dependent transfer with the
/// initiating DFSP as its payer and a conversion with its FXP's
/// acceptance; with a horizon and a history snapshot, the finished ones
/// are summed and the reserved ones kept, with their FX rows; a standby's
/// warm copy picks up an acceptance that came after it was made.
#[test]
fn conversions_round_trip_alike() {
    let cluster = testpg::Cluster::start();
    let (url, _dir, mut harness) = harness_on_pg(&cluster, "fx");
    let convert = |harness: &mut Harness, payer: u8, ttl_ms: i64| {
        harness.run(Op::Convert {
            payer,
            amount: 20,
            ttl_ms,
        });
        *harness.conversions.last().expect("reserved")
    };
    let accept = |harness: &mut Harness| harness.run(Op::FxpAnswer { n: 0, accept: true });

    // Committed together: the payee's fulfil of the dependent transfer.
    let committed = convert(&mut harness, 0, 60_000);
    accept(&mut harness);
    harness.run(Op::Dependent(0));
    harness.run(Op::Fulfil(0));
    // Aborted together by the payee.
    let aborted = convert(&mut harness, 1, 60_000);
    accept(&mut harness);
    harness.run(Op::Dependent(0));
    harness.run(Op::Abort(0));
    // Refused by the FXP.
    let refused = convert(&mut harness, 2, 60_000);
    harness.run(Op::FxpAnswer {
        n: 0,
        accept: false,
    });
    // Expired together.
    let expired = convert(&mut harness, 0, 1_000);
    accept(&mut harness);
    harness.run(Op::Dependent(0));
    harness.run(Op::Advance(2_000));
    assert!(harness.conversions.is_empty() && harness.accepted.is_empty());
    // The harness does not follow expiries: the expired transfer is still
    // in its list.
    assert_eq!(harness.reserved.len(), 1);
    harness.reserved.clear();
    // Still reserved: one awaiting the FXP (a standby's copy is made now),
    // one the FXP accepted after that.
    let waiting = convert(&mut harness, 1, 60_000);
    let warm_horizon_ms = harness.now - 100;
    let pg = harness.pg.as_mut().expect("PostgreSQL");
    pg.warm(Some(warm_horizon_ms)).expect("warm");
    let accepted = convert(&mut harness, 2, 60_000);
    harness.run(Op::FxpAnswer { n: 1, accept: true });
    assert_eq!(harness.conversions.len(), 1);
    assert_eq!(harness.accepted.len(), 1);
    let pg = harness.pg.as_mut().expect("PostgreSQL");
    let warm = pg.load_recent(warm_horizon_ms).expect("the warm copy");
    assert!(pg.loaded_from_warm_copy());
    let cold = harness
        .store
        .load_recent(warm_horizon_ms)
        .expect("a cold load");
    assert_eq!(warm, cold, "the warm copy differs from a cold load");
    // The acceptances of the expired conversion and of the one awaiting
    // its transfer; the others finished before the horizon, summed.
    assert_eq!(cold.conversion_fulfils.len(), 2, "{cold:?}");

    // A load is exactly what the ledger holds, on both.
    let memory = harness.ledger.snapshot();
    let whole = harness.store.load().expect("load from SQLite");
    assert_eq!(whole, memory);
    let pg = harness.pg.as_mut().expect("PostgreSQL");
    assert_eq!(pg.load().expect("load from PostgreSQL"), memory);
    assert!(whole.audit().is_empty(), "{:?}", whole.audit());
    let linked = |state| Some((FinishKind::Linked, state));
    let conversion_end = [
        (committed, linked(TransferState::Committed)),
        (aborted, linked(TransferState::Aborted)),
        (expired, Some((FinishKind::Expiry, TransferState::Expired))),
    ];
    for (conversion, finish) in conversion_end {
        assert_eq!(finish_of(&whole, conversion.commit_request_id), finish);
    }
    let dependent_end = [
        (
            committed,
            Some((FinishKind::Fulfil, TransferState::Committed)),
        ),
        (aborted, Some((FinishKind::Abort, TransferState::Aborted))),
        (expired, linked(TransferState::Expired)),
    ];
    for (conversion, finish) in dependent_end {
        assert_eq!(
            finish_of(&whole, conversion.determining_transfer_id),
            finish
        );
    }
    assert_eq!(
        finish_of(&whole, refused.commit_request_id),
        Some((FinishKind::Abort, TransferState::Aborted))
    );
    assert_eq!(whole.fxps.len(), 1);

    // Every read of the stores shows what memory shows: a dependent
    // transfer paid by the initiating DFSP, a conversion with the FXP's
    // acceptance; and for a prepare's id, the latest conversion naming it.
    let fx_ids: Vec<TransferId> = whole
        .transfers
        .iter()
        .filter(|row| row.fx.is_some())
        .map(|row| row.transfer_id)
        .collect();
    assert_eq!(fx_ids.len(), 6 + 3, "six conversions, three dependents");
    let reader = PgReader::open(&url).expect("a PostgreSQL reader");
    let lookup = harness.lookup();
    let all_converted = [committed, aborted, refused, expired, waiting, accepted];
    let unknown = TransferId::new(u128::MAX - 3);
    let mut ids = PrefetchIds {
        transfers: fx_ids.clone(),
        quotes: vec![],
        conversions: all_converted
            .iter()
            .map(|c| c.determining_transfer_id)
            .collect(),
    };
    ids.transfers.push(unknown);
    ids.conversions.push(unknown);
    // A conversion's own id names none.
    ids.conversions.push(committed.commit_request_id);
    let from_sqlite = harness.store.prefetch(&ids).expect("prefetch on SQLite");
    let pg = harness.pg.as_mut().expect("PostgreSQL");
    let prefetches = [
        from_sqlite.clone(),
        harness
            .store
            .open_prefetcher()
            .expect("a SQLite prefetcher")
            .prefetch(&ids)
            .expect("prefetch on a SQLite reader"),
        pg.prefetch(&ids).expect("prefetch on PostgreSQL"),
        pg.open_prefetcher()
            .expect("a PostgreSQL prefetcher")
            .prefetch(&ids)
            .expect("prefetch on a PostgreSQL reader"),
    ];
    for &id in &fx_ids {
        let outcomes = harness.apply(vec![Command::ReadTransfer { transfer_id: id }]);
        let Outcome::Transfer(in_memory) = &outcomes[0] else {
            panic!("{outcomes:?}");
        };
        let expected = *in_memory;
        for found in [
            lookup.find_transfer(id).expect("find on SQLite"),
            reader.find_transfer(id).expect("find on PostgreSQL"),
        ] {
            assert_eq!(found.map(|stored| stored.view), Some(expected), "{id}");
        }
        for prefetched in &prefetches {
            let Lookup::Found(stored) = &prefetched.transfers[&id] else {
                panic!("{id}: {:?}", prefetched.transfers[&id]);
            };
            assert_eq!(stored.view, expected, "{id}");
            assert_eq!(Some(stored), lookup.find_transfer(id).unwrap().as_ref());
        }
    }
    for prefetched in &prefetches {
        assert_eq!(prefetched.transfers, from_sqlite.transfers);
        assert_eq!(prefetched.conversions, from_sqlite.conversions);
        assert!(prefetched.unreadable.is_empty());
        for conversion in all_converted {
            let Lookup::Found(latest) =
                &prefetched.conversions[&conversion.determining_transfer_id]
            else {
                panic!("{conversion:?}: {:?}", prefetched.conversions);
            };
            assert_eq!(latest.view.transfer_id, conversion.commit_request_id);
            let stored = lookup.find_transfer(conversion.commit_request_id).unwrap();
            assert_eq!(Some(latest), stored.as_ref());
        }
        assert_eq!(prefetched.conversions[&unknown], Lookup::Absent);
        assert_eq!(
            prefetched.conversions[&committed.commit_request_id],
            Lookup::Absent
        );
    }
    let dependent = lookup
        .find_transfer(committed.determining_transfer_id)
        .expect("find")
        .expect("stored");
    assert_eq!(dependent.view.payer, committed.initiating, "not the FXP");
    assert_eq!(dependent.view.payee, committed.payee);
    assert_eq!(dependent.view.currency, support::eur());
    assert_eq!(
        dependent.view.fx,
        Some(FxView::Dependent {
            commit_request_id: committed.commit_request_id,
            fxp: support::fxp(),
        })
    );
    let fxp_fulfilment = Fulfilment::from_preimage(support::CONVERSION_PREIMAGE);
    for conversion in [committed, accepted] {
        let stored = reader
            .find_transfer(conversion.commit_request_id)
            .expect("find")
            .expect("stored");
        assert_eq!(stored.view.kind, TransferKind::FxConversion);
        assert_eq!(stored.view.payer, conversion.initiating);
        assert_eq!(stored.view.payee, support::fxp());
        assert_eq!(stored.view.fulfilment, Some(fxp_fulfilment));
        let (hash, at_ms) = stored.fxp_fulfil.expect("accepted by the FXP");
        assert_eq!(hash, RequestHash([0xC2; 32]));
        assert!(matches!(
            stored.view.fx,
            Some(FxView::Conversion { terms, fxp_fulfilled_at_ms: Some(at) })
                if at == at_ms && terms.determining_transfer_id == conversion.determining_transfer_id
        ));
    }
    let waiting_stored = reader
        .find_transfer(waiting.commit_request_id)
        .expect("find")
        .expect("stored");
    assert_eq!(waiting_stored.fxp_fulfil, None);
    assert_eq!(waiting_stored.view.fulfilment, None);
    // A restart's redelivery: the dependent transfers (not conversions),
    // each with its FSPIOP payer.
    let sorted = |mut touched: Vec<store::Touched>| {
        touched.sort_by_key(|(view, _, _)| view.transfer_id);
        touched
    };
    let touched = sorted(lookup.transfers_touched_since(0).expect("touched"));
    assert_eq!(
        touched,
        sorted(reader.transfers_touched_since(0).expect("touched"))
    );
    for conversion in [committed, aborted, expired] {
        let (view, _, _) = touched
            .iter()
            .find(|(view, _, _)| view.transfer_id == conversion.determining_transfer_id)
            .expect("a dependent transfer is notified again");
        assert_eq!(view.payer, conversion.initiating);
    }
    // Conversions too, their callbacks derived again as theirs.
    assert!(touched
        .iter()
        .all(|(view, _, _)| view.kind.is_between_positions()));
    for conversion in [committed, aborted, expired] {
        assert!(
            touched.iter().any(
                |(view, _, _)| view.transfer_id == conversion.commit_request_id
                    && view.kind == TransferKind::FxConversion
            ),
            "conversion {} is notified again",
            conversion.commit_request_id
        );
    }

    // With a horizon after all this and a history snapshot: the finished
    // pairs summed, the reserved conversions kept with their FX rows.
    let cut_ms = harness.now + 1;
    harness.snapshot(cut_ms);
    let stored = harness
        .store
        .history_snapshot()
        .expect("read")
        .expect("a snapshot");
    let seq_of = |id: TransferId| {
        whole
            .transfers
            .iter()
            .find(|row| row.transfer_id == id)
            .expect("stored")
            .seq
    };
    for conversion in [waiting, accepted] {
        assert!(
            stored.kept.contains(&seq_of(conversion.commit_request_id)),
            "{stored:?}"
        );
    }
    let recent = harness.store.load_recent(cut_ms).expect("load_recent");
    assert_eq!(
        harness.store.history_snapshot_through(),
        Some(stored.through_seq)
    );
    let pg = harness.pg.as_mut().expect("PostgreSQL");
    assert_eq!(pg.load_recent(cut_ms).expect("load_recent"), recent);
    let loaded_fx: Vec<TransferId> = recent
        .transfers
        .iter()
        .filter(|row| row.fx.is_some())
        .map(|row| row.transfer_id)
        .collect();
    assert_eq!(
        loaded_fx,
        [waiting.commit_request_id, accepted.commit_request_id]
    );
    let accepted_seq = seq_of(accepted.commit_request_id);
    assert_eq!(
        recent
            .conversion_fulfils
            .iter()
            .map(|row| row.seq)
            .collect::<Vec<_>>(),
        [accepted_seq]
    );
    // Every finished transfer and conversion summed, each once.
    let between_positions = whole
        .transfers
        .iter()
        .filter(|row| row.kind.is_between_positions())
        .count();
    assert_eq!(recent.archived.transfers, between_positions as u64 - 2);
    for store in [
        &mut harness.store as &mut dyn Store,
        harness.pg.as_mut().unwrap(),
    ] {
        assert_eq!(
            store.load_recent(cut_ms).expect("load_recent").archived,
            recent.archived
        );
    }
    let limits = Limits {
        transfer_retention_ms: Some(1_000),
        ..Limits::default()
    };
    let restored = Ledger::restore(recent, limits).expect("restore with a horizon");
    assert_eq!(restored.snapshot().accounts, memory.accounts);
    assert_eq!(
        harness.store.check_history_snapshot().expect("check"),
        Some((stored.through_seq, Ok(())))
    );

    // The FXP withdrawn: no row; declared again: the row back.
    for offered in [false, true] {
        harness.run(Op::Corridors(offered));
        let memory = harness.ledger.snapshot();
        assert_eq!(memory.fxps.len(), usize::from(offered));
        assert_eq!(harness.store.load().expect("load").fxps, memory.fxps);
        let pg = harness.pg.as_mut().expect("PostgreSQL");
        assert_eq!(pg.load().expect("load").fxps, memory.fxps);
    }
}
