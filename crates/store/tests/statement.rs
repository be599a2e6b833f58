//! A DFSP's statement (`GET /participants/{name}/statement`) against an
//! independent oracle, on both backends: for whatever the ledger did —
//! transfers, FX conversions, funds in and out, history snapshots, a
//! settlement with its resets and liquidity movements — each statement,
//! read page by page through its cursor (small pages, small rounds and a
//! small scan budget, so pages end early and go on; every other cursor's
//! balances dropped, so that they are read again), opens with the
//! balance the rows give at `from`, lists exactly the movements a filter
//! over the loaded rows finds, each with the running balance, and closes
//! with opening + movements; a statement to the end closes at the
//! accounts' values, which the audit (`kasi audit`'s arithmetic) finds
//! equal to what every transfer and entry sums to.

mod support;

use std::collections::BTreeMap;

use ledger::*;
use proptest::prelude::*;
use store::pg::PgStore;
use store::pg_reader::PgReader;
use store::statement::{Balances, Key, Method, Source, StatementQuery};
use store::{Store, StoreReader};
use support::{eur, fsp, fxp, op, usd, Harness, Op};

/// A movement as the oracle sees it: key, account, signed amount.
type Seen = (Key, AccountId, Amount);

/// Every committed movement of any account, in key order.
fn movements(snapshot: &Snapshot) -> Vec<Seen> {
    let finishes: BTreeMap<u64, &FinishRow> =
        snapshot.finishes.iter().map(|f| (f.seq, f)).collect();
    let mut all = Vec::new();
    let mut legs = |key: Key, debit: AccountId, credit: AccountId, amount: Amount| {
        all.push((key, debit, amount));
        all.push((key, credit, amount.checked_neg().unwrap()));
    };
    for t in &snapshot.transfers {
        let finish = finishes.get(&t.seq);
        let committed = finish.map_or(t.state, |f| f.state) == TransferState::Committed;
        if !committed {
            continue;
        }
        let (at_ms, source) = match (t.kind, finish) {
            (TransferKind::FundsIn, _) => (t.prepared_at_ms, Source::Funds),
            (TransferKind::FundsOut, Some(f)) => (f.finished_at_ms, Source::Funds),
            (_, Some(f)) => (f.finished_at_ms, Source::Commit),
            (_, None) => panic!("a committed transfer without its finish"),
        };
        let key = Key {
            at_ms,
            source,
            seq: t.seq,
        };
        legs(key, t.debit, t.credit, t.amount);
    }
    for e in &snapshot.entries {
        let key = Key {
            at_ms: e.at_ms,
            source: Source::Entry,
            seq: e.seq,
        };
        legs(key, e.debit, e.credit, e.amount);
    }
    all.sort_by_key(|(key, account, _)| (*key, *account));
    all
}

/// The DFSP's POSITION and SETTLEMENT accounts in `currency`.
fn accounts_of(
    snapshot: &Snapshot,
    name: FspName,
    currency: Currency,
) -> (Option<AccountId>, Option<AccountId>) {
    let participant = snapshot
        .participants
        .iter()
        .find(|p| p.name == name)
        .expect("the participant")
        .id;
    let find = |kind: AccountKind| {
        snapshot
            .accounts
            .iter()
            .find(|a| a.participant == participant && a.currency == currency && a.kind == kind)
            .map(|a| a.id)
    };
    (find(AccountKind::Position), find(AccountKind::Settlement))
}

fn balance_before(
    all: &[Seen],
    accounts: (Option<AccountId>, Option<AccountId>),
    key: Key,
) -> Balances {
    let mut balances = Balances::default();
    for (k, account, amount) in all.iter().filter(|(k, _, _)| *k < key) {
        let _ = k;
        if Some(*account) == accounts.0 {
            balances.position = balances.position.checked_add(*amount).unwrap();
        } else if Some(*account) == accounts.1 {
            balances.settlement = balances.settlement.checked_add(*amount).unwrap();
        }
    }
    balances
}

/// What reading a whole statement page by page found.
struct Read {
    opening: Balances,
    moved: Vec<Seen>,
    closing: Balances,
    methods: Vec<Method>,
    cut_short: u32,
    pages: u32,
}

fn read_all(reader: &dyn StoreReader, query: &StatementQuery) -> Read {
    let mut query = query.clone();
    let mut read = Read {
        opening: Balances::default(),
        moved: Vec::new(),
        closing: Balances::default(),
        methods: Vec::new(),
        cut_short: 0,
        pages: 0,
    };
    let mut running: Option<Balances> = None;
    for n in 0..10_000 {
        let page = reader
            .statement(&query)
            .expect("a statement page")
            .expect("the participant");
        read.pages += 1;
        read.methods.push(page.method);
        assert!(page.movements.len() <= query.limit.max(2), "{query:?}");
        if !page.complete {
            read.cut_short += 1;
        }
        match running {
            None => read.opening = page.opening,
            // The page starts where the last one ended, whether the
            // cursor carried the balances or they were read again.
            Some(running) => assert_eq!(page.opening, running, "{query:?}"),
        }
        let mut balances = page.opening;
        for movement in &page.movements {
            let balance = match movement.account {
                store::statement::Ledger::Position => &mut balances.position,
                store::statement::Ledger::Settlement => &mut balances.settlement,
            };
            *balance = balance.checked_add(movement.amount).unwrap();
            assert_eq!(*balance, movement.balance, "running balance {movement:?}");
            read.moved
                .push((movement.key, movement.account_id, movement.amount));
        }
        running = Some(balances);
        if let Some(closing) = page.closing {
            assert_eq!(closing, balances, "closing = opening + movements");
            assert!(page.next.is_none());
            read.closing = closing;
            return read;
        }
        let mut next = page.next.expect("a page that does not close goes on");
        if n % 2 == 1 {
            // As a cursor the hub cannot vouch for: read again.
            next.balances = None;
        }
        query.after = Some(next);
    }
    panic!("the statement never ended: {query:?}");
}

#[test]
fn statements_reconcile_with_the_rows_the_ledger_and_the_audit() {
    let cluster = testpg::Cluster::start();
    let case = std::cell::Cell::new(0u32);
    let methods = std::cell::RefCell::new(std::collections::HashSet::new());
    let cut_short = std::cell::Cell::new(0u32);
    let multi_page = std::cell::Cell::new(0u32);
    let index_part = std::cell::Cell::new(0u32);
    let index_whole = std::cell::Cell::new(0u32);
    let kinds = std::cell::RefCell::new(std::collections::BTreeSet::new());
    // A fixed seed: what the cases cover (every method, cut-short and
    // multi-page reads, every kind of movement) is asserted below, so it
    // must be the same on every run (with a seed of the moment, a run
    // failed now and then on coverage, not on a statement).
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(
        ProptestConfig {
            cases: 8,
            failure_persistence: None,
            ..ProptestConfig::default()
        },
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    let strategy = (
        prop::collection::vec(op(), 20..70),
        prop::collection::vec(op(), 0..30),
        prop::collection::vec(
            (0usize..100, 0usize..100, 1usize..5, 1usize..6, 1usize..30),
            6,
        ),
        // The commit index: spans of a few ms to a few s, filed a few at
        // a time (or all), in a few filings, each of a budget of commits.
        (
            prop_oneof![5i64..60, 60i64..3_000],
            prop_oneof![1u64..6, Just(1_000_000u64)],
            0usize..4,
            prop_oneof![1usize..8, Just(1_000_000usize)],
        ),
    );
    runner
        .run(
            &strategy,
            |(before, after, ranges, (span_ms, most_spans, filings, most_commits))| {
                case.set(case.get() + 1);
                let url = cluster.create_database(&format!("statement{}", case.get()));
                let dir = tempfile::tempdir().expect("tempdir");
                let pg = PgStore::open(&url).expect("open the PostgreSQL store");
                let mut harness = Harness::with_pg(dir.path(), Some(pg));
                harness.apply(vec![Command::CreateSettlementModel {
                    name: "DEFERREDNET".into(),
                    definition: r#"{"settlementGranularity":"NET"}"#.into(),
                    rules: Some(support::deferred_net_usd(false)),
                }]);
                // Something settles: a committed transfer in the first window.
                harness.run(Op::Prepare {
                    payer: 0,
                    amount: 7,
                    ttl_ms: 60_000,
                });
                harness.run(Op::Fulfil(usize::MAX));
                for op in before {
                    harness.run(op);
                }
                harness.run(Op::Advance(5));
                harness.run(Op::CloseWindow);
                let outcomes = harness.apply(vec![Command::CreateSettlement {
                    model: "DEFERREDNET".into(),
                    reason: "test".into(),
                    windows: vec![1],
                }]);
                if let Outcome::Settlement(view) = &outcomes[0] {
                    let settlement = view.row.id;
                    harness.run(Op::Advance(3));
                    let outcomes = harness.apply(vec![Command::FinalizeSettlement {
                        settlement,
                        reason: "test".into(),
                        external_reference: None,
                    }]);
                    prop_assert!(
                        matches!(outcomes[0], Outcome::Settlement(_)),
                        "{:?}",
                        outcomes
                    );
                } else {
                    panic!("no settlement: {outcomes:?}");
                }
                for op in after {
                    harness.run(op);
                }
                harness.run(Op::Snapshot { behind_ms: 2_000 });
                let snapshot = harness.store.load().expect("load");
                // The audit's arithmetic: every account's value is what its
                // transfers and entries sum to.
                prop_assert_eq!(snapshot.audit(), Vec::<String>::new());
                prop_assert!(
                    !snapshot.entries.is_empty(),
                    "the settlement posted entries"
                );
                // The commit index, filed as the hub's follower files it (on
                // the feed's connection), on both backends alike; often only
                // some of the spans.
                let mut filed_to = [i64::MIN; 2];
                for (at, feed) in support::feeds(dir.path(), &url).iter().enumerate() {
                    for _ in 0..filings {
                        let filing = feed
                            .file_commit_spans(most_spans, most_commits, span_ms)
                            .expect("file");
                        prop_assert_eq!(filing.index.map(|index| index.span_ms), Some(span_ms));
                        filed_to[at] = filing.index.map_or(i64::MIN, |index| index.filed_to_ms());
                    }
                }
                prop_assert_eq!(filed_to[0], filed_to[1], "both backends filed the same");
                let all = movements(&snapshot);
                let commits_at: Vec<i64> = all
                    .iter()
                    .filter(|(key, _, _)| key.source == Source::Commit)
                    .map(|(key, _, _)| key.at_ms)
                    .collect();
                match commits_at.iter().filter(|at| **at < filed_to[0]).count() {
                    0 => {}
                    n if n < commits_at.len() => index_part.set(index_part.get() + 1),
                    _ => index_whole.set(index_whole.get() + 1),
                }
                let times: Vec<i64> = all.iter().map(|(key, _, _)| key.at_ms).collect();
                let at = |n: usize| times[n * times.len() / 100];
                let end = harness.now + 1;
                let sqlite = harness.lookup();
                let pg = PgReader::open(&url).expect("a PostgreSQL reader");
                let mut statements = Vec::new();
                for name in [fsp("dfspa"), fsp("dfspb"), fsp("dfspc"), fxp()] {
                    for currency in [usd(), eur()] {
                        // The whole history, a page of one or two.
                        statements.push((name, currency, i64::MIN / 2, end, 1, 3, 7));
                    }
                }
                for (i, (a, b, limit, chunk, budget)) in ranges.into_iter().enumerate() {
                    let name = [fsp("dfspa"), fsp("dfspb"), fsp("dfspc"), fxp()][i % 4];
                    let currency = [usd(), eur()][i % 2];
                    let (from, to) = (at(a.min(b)), if a == b { end } else { at(a.max(b)) });
                    statements.push((name, currency, from, to, limit, chunk, budget));
                }
                for (name, currency, from_ms, to_ms, limit, chunk, scan_budget) in statements {
                    let accounts = accounts_of(&snapshot, name, currency);
                    let query = StatementQuery {
                        participant: name,
                        currency,
                        from_ms,
                        to_ms,
                        after: None,
                        limit,
                        chunk,
                        scan_budget,
                    };
                    let want: Vec<Seen> = all
                        .iter()
                        .filter(|(key, account, _)| {
                            *key >= Key::at(from_ms)
                                && *key < Key::at(to_ms)
                                && (Some(*account) == accounts.0 || Some(*account) == accounts.1)
                        })
                        .copied()
                        .collect();
                    let opening = balance_before(&all, accounts, Key::at(from_ms));
                    let closing = balance_before(&all, accounts, Key::at(to_ms));
                    for (backend, reader) in
                        [("SQLite", &sqlite as &dyn StoreReader), ("PostgreSQL", &pg)]
                    {
                        let read = read_all(reader, &query);
                        prop_assert_eq!(read.opening, opening, "{} opening {:?}", backend, query);
                        let mut moved = read.moved.clone();
                        moved.sort_by_key(|(key, account, _)| (*key, *account));
                        prop_assert_eq!(&moved, &want, "{} movements {:?}", backend, query);
                        prop_assert_eq!(read.closing, closing, "{} closing {:?}", backend, query);
                        if to_ms == end {
                            // To the end: the accounts' values, which the
                            // audit found equal to their sums.
                            let value = |id: Option<AccountId>| {
                                id.map_or(Amount::ZERO, |id| {
                                    snapshot.accounts[id.0 as usize - 1].value
                                })
                            };
                            prop_assert_eq!(read.closing.position, value(accounts.0));
                            prop_assert_eq!(read.closing.settlement, value(accounts.1));
                            // And the ledger's own, in memory.
                            let ledger_now = harness.ledger.snapshot();
                            for id in [accounts.0, accounts.1].into_iter().flatten() {
                                prop_assert_eq!(
                                    ledger_now.accounts[id.0 as usize - 1].value,
                                    snapshot.accounts[id.0 as usize - 1].value
                                );
                            }
                        }
                        methods.borrow_mut().extend(read.methods.iter().copied());
                        cut_short.set(cut_short.get() + read.cut_short);
                        if read.pages > 2 && !want.is_empty() {
                            multi_page.set(multi_page.get() + 1);
                        }
                    }
                }
                // What the statements showed: every kind of movement.
                for name in [fsp("dfspa"), fsp("dfspb"), fsp("dfspc"), fxp()] {
                    let page = sqlite
                        .statement(&StatementQuery {
                            participant: name,
                            currency: usd(),
                            from_ms: i64::MIN / 2,
                            to_ms: end,
                            after: None,
                            limit: 1_000,
                            chunk: 1_000,
                            scan_budget: 1_000_000,
                        })
                        .unwrap()
                        .unwrap();
                    kinds
                        .borrow_mut()
                        .extend(page.movements.iter().map(|m| m.kind.clone()));
                }
                Ok(())
            },
        )
        .unwrap();
    let methods = methods.into_inner();
    for method in [
        Method::Snapshot,
        Method::Start,
        Method::Current,
        Method::Carried,
    ] {
        assert!(
            methods.contains(&method),
            "{method:?} never used: {methods:?}"
        );
    }
    assert!(cut_short.get() >= 3, "{}", cut_short.get());
    // The commit index covered some of the commits in some cases and all
    // of them in others.
    assert!(index_part.get() >= 1, "{}", index_part.get());
    assert!(index_whole.get() >= 1, "{}", index_whole.get());
    assert!(multi_page.get() >= 8, "{}", multi_page.get());
    let kinds = kinds.into_inner();
    for kind in [
        "TRANSFER",
        "FX_CONVERSION",
        "FUNDS_IN",
        "FUNDS_OUT",
        "SETTLEMENT_NET_SENDER",
        "SETTLEMENT_NET_RECIPIENT",
        "SETTLEMENT_FUNDS_OUT",
        "SETTLEMENT_FUNDS_IN",
    ] {
        assert!(kinds.contains(kind), "{kind} never shown: {kinds:?}");
    }
    eprintln!(
        "kinds {kinds:?} cut short {} multi-page {} commit index part {} whole {}",
        cut_short.get(),
        multi_page.get(),
        index_part.get(),
        index_whole.get()
    );
}

/// An FX conversion moves the initiating DFSP's and the FXP's positions,
/// and a funds out its settlement account: both appear on the statements
/// with the counterparty, and an unknown DFSP has none.
#[test]
fn conversions_and_funds_out_are_movements_and_unknown_names_are_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = Harness::new(dir.path());
    let conversion = support::Conversion {
        commit_request_id: TransferId::new(900),
        determining_transfer_id: TransferId::new(901),
        initiating: fsp("dfspa"),
        payee: fsp("dfspb"),
        target_amount: Amount::from_whole(9),
    };
    harness.apply(vec![harness.prepare_conversion(conversion, 10, 60_000)]);
    harness.apply(vec![harness.fxp_answer(conversion, true)]);
    harness.apply(vec![harness.dependent(conversion)]);
    harness.apply(vec![Command::Fulfil(Fulfil {
        transfer_id: conversion.determining_transfer_id,
        caller: fsp("dfspb"),
        fulfilment: Some(Fulfilment::from_preimage(support::TRANSFER_PREIMAGE)),
        destination: None,
        request_hash: RequestHash([2; 32]),
    })]);
    harness.run(Op::FundsOut {
        dfsp: 0,
        commit: true,
    });
    harness.run(Op::Advance(10));
    harness.run(Op::FundsOut {
        dfsp: 0,
        commit: true,
    });
    let reader = harness.lookup();
    let query = |name: &str, currency: Currency| StatementQuery {
        participant: fsp(name),
        currency,
        from_ms: 0,
        to_ms: harness.now + 1,
        after: None,
        limit: 100,
        chunk: 100,
        scan_budget: 10_000,
    };
    let page = reader.statement(&query("dfspa", usd())).unwrap().unwrap();
    let shown: Vec<(&str, &str, &str, String)> = page
        .movements
        .iter()
        .map(|m| {
            (
                m.kind.as_str(),
                m.account.as_str(),
                m.counterparty.as_str(),
                m.amount.to_string(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![
            ("FUNDS_IN", "SETTLEMENT", "Hub", "-1000".to_string()),
            ("FX_CONVERSION", "POSITION", "fxp", "10".to_string()),
            ("FUNDS_OUT", "SETTLEMENT", "Hub", "1".to_string()),
        ]
    );
    assert_eq!(page.closing.unwrap().position, Amount::from_whole(10));
    assert_eq!(page.closing.unwrap().settlement, Amount::from_whole(-999));
    let fxp_page = reader.statement(&query("fxp", usd())).unwrap().unwrap();
    assert_eq!(fxp_page.movements.len(), 1);
    assert_eq!(fxp_page.movements[0].amount, Amount::from_whole(-10));
    assert_eq!(fxp_page.movements[0].counterparty, "dfspa");
    assert!(reader.statement(&query("nobody", usd())).unwrap().is_none());
}
