//! History snapshots: recovery that starts from a snapshot and reads what
//! came after it gives exactly what recovery from the whole history gives.

use ledger::*;
use proptest::prelude::*;
use store::sqlite::{SqliteOptions, SqliteStore};
use store::Store;

const T0: i64 = 1_700_000_000_000;

fn fsp(name: &str) -> FspName {
    FspName::new(name).expect("valid FSP name")
}

fn usd() -> Currency {
    Currency::parse("USD").expect("currency")
}

/// What a test does to the hub, one batch each.
#[derive(Clone, Debug)]
enum Op {
    /// A prepare from DFSP `payer` to the next one; amounts above the
    /// liquidity are rejected at prepare (a REJECTED row, no finish).
    Prepare {
        payer: u8,
        amount: i64,
        ttl_ms: i64,
    },
    /// Fulfil, abort: the `n`-th reserved transfer (modulo).
    Fulfil(usize),
    Abort(usize),
    /// Moves the clock and expires what is due.
    Advance(i64),
    CloseWindow,
    FundsOut {
        dfsp: u8,
        commit: bool,
    },
    /// Advances the stored snapshot to `now - behind_ms`.
    Snapshot {
        behind_ms: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, prop_oneof![9 => 1i64..50, 1 => 5_000i64..6_000], prop_oneof![4 => 100i64..2_000, 1 => 50_000i64..100_000])
            .prop_map(|(payer, amount, ttl_ms)| Op::Prepare { payer, amount, ttl_ms }),
        4 => any::<usize>().prop_map(Op::Fulfil),
        1 => any::<usize>().prop_map(Op::Abort),
        3 => (1i64..3_000).prop_map(Op::Advance),
        1 => Just(Op::CloseWindow),
        1 => (0u8..3, any::<bool>()).prop_map(|(dfsp, commit)| Op::FundsOut { dfsp, commit }),
        2 => (0i64..5_000).prop_map(|behind_ms| Op::Snapshot { behind_ms }),
    ]
}

struct Harness {
    ledger: Ledger,
    store: SqliteStore,
    now: i64,
    dfsps: Vec<(FspName, AccountId)>,
    reserved: Vec<(TransferId, FspName)>,
    funds_out: Vec<(TransferId, usize)>,
    next_id: u128,
    last_cut: i64,
}

impl Harness {
    fn new(dir: &std::path::Path) -> Harness {
        let store = SqliteStore::open(
            dir,
            SqliteOptions {
                fsync: false,
                ..SqliteOptions::default()
            },
        )
        .expect("open");
        let mut harness = Harness {
            ledger: Ledger::new(Limits::default()),
            store,
            now: T0,
            dfsps: Vec::new(),
            reserved: Vec::new(),
            funds_out: Vec::new(),
            next_id: 1,
            last_cut: i64::MIN,
        };
        harness.apply(vec![Command::CreateHub { name: fsp("Hub") }]);
        for kind in [
            AccountKind::HubMultilateralSettlement,
            AccountKind::HubReconciliation,
        ] {
            harness.apply(vec![Command::CreateHubAccount {
                currency: usd(),
                kind,
            }]);
        }
        for name in ["dfspa", "dfspb", "dfspc"] {
            let name = fsp(name);
            let outcomes = harness.apply(vec![Command::CreateParticipant {
                name,
                currency: usd(),
            }]);
            let Outcome::AccountsCreated(ids) = &outcomes[0] else {
                panic!("{outcomes:?}");
            };
            let settlement = ids[1];
            harness.dfsps.push((name, settlement));
            let id = harness.id();
            harness.apply(vec![
                Command::FundsIn(harness.funds(id, harness.dfsps.len() - 1, 1_000)),
                Command::InitNetDebitCap {
                    name,
                    currency: usd(),
                    net_debit_cap: Amount::from_whole(1_000),
                },
            ]);
        }
        harness
    }

    fn id(&mut self) -> TransferId {
        self.next_id += 1;
        TransferId::new(self.next_id)
    }

    fn funds(&self, transfer_id: TransferId, dfsp: usize, amount: i64) -> Funds {
        Funds {
            transfer_id,
            participant: self.dfsps[dfsp].0,
            account: self.dfsps[dfsp].1,
            amount: Amount::from_whole(amount),
            currency: usd(),
            memo: FundsMemo {
                external_reference: "ref".into(),
                reason: "test".into(),
            },
            request_hash: RequestHash([7; 32]),
        }
    }

    fn apply(&mut self, commands: Vec<Command>) -> Vec<Outcome> {
        let result = self.ledger.apply_batch(self.now, &commands);
        self.store.commit(&[&result.records]).expect("commit");
        result.outcomes
    }

    fn run(&mut self, op: Op) {
        match op {
            Op::Prepare {
                payer,
                amount,
                ttl_ms,
            } => {
                let transfer_id = self.id();
                let payee = self.dfsps[(payer as usize + 1) % self.dfsps.len()].0;
                let payer = self.dfsps[payer as usize].0;
                let outcomes = self.apply(vec![Command::Prepare(Prepare {
                    transfer_id,
                    payer,
                    payee,
                    amount: Amount::from_whole(amount),
                    currency: usd(),
                    condition: Fulfilment::from_preimage([9; 32]).condition(),
                    expiration_ms: self.now + ttl_ms,
                    request_hash: RequestHash([1; 32]),
                    wire_version: 0x11,
                })]);
                if matches!(&outcomes[0], Outcome::Transfer(view) if view.state == TransferState::Reserved)
                {
                    self.reserved.push((transfer_id, payee));
                }
            }
            Op::Fulfil(n) | Op::Abort(n) if !self.reserved.is_empty() => {
                let (transfer_id, payee) = self.reserved.remove(n % self.reserved.len());
                let command = match op {
                    Op::Fulfil(_) => Command::Fulfil(Fulfil {
                        transfer_id,
                        caller: payee,
                        fulfilment: Some(Fulfilment::from_preimage([9; 32])),
                        request_hash: RequestHash([2; 32]),
                    }),
                    _ => Command::Abort(Abort {
                        transfer_id,
                        caller: payee,
                        error_code: ErrorCode(5101),
                        request_hash: RequestHash([3; 32]),
                    }),
                };
                self.apply(vec![command]);
            }
            Op::Fulfil(_) | Op::Abort(_) => {}
            Op::Advance(ms) => {
                self.now += ms;
                self.apply(vec![Command::Expire]);
            }
            Op::CloseWindow => {
                let outcomes = self.apply(vec![Command::ReadSettlementWindows]);
                let Outcome::SettlementWindows(windows) = &outcomes[0] else {
                    panic!("{outcomes:?}");
                };
                if let Some(open) = windows.iter().find(|w| w.row.state.as_str() == "OPEN") {
                    let id = open.row.id;
                    self.apply(vec![Command::CloseSettlementWindow {
                        id,
                        reason: "test".into(),
                    }]);
                }
            }
            Op::FundsOut { dfsp, commit } => match self.funds_out.pop() {
                Some((transfer_id, dfsp)) => {
                    let finish = FundsFinish {
                        transfer_id,
                        participant: self.dfsps[dfsp].0,
                        account: self.dfsps[dfsp].1,
                        request_hash: RequestHash([8; 32]),
                    };
                    self.apply(vec![match commit {
                        true => Command::FundsOutCommit(finish),
                        false => Command::FundsOutAbort(finish),
                    }]);
                }
                None => {
                    let transfer_id = self.id();
                    let funds = self.funds(transfer_id, dfsp as usize, 1);
                    self.apply(vec![Command::FundsOutReserve(funds)]);
                    self.funds_out.push((transfer_id, dfsp as usize));
                }
            },
            Op::Snapshot { behind_ms } => {
                let snapshot = self
                    .store
                    .advance_history_snapshot(self.now - behind_ms)
                    .expect("advance the snapshot");
                self.last_cut = snapshot.cut_ms;
            }
        }
    }
}

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
            .filter(|t| t.kind == TransferKind::Fspiop)
            .filter(|t| {
                t.prepared_at_ms >= since_ms
                    || all.finishes.iter().any(|f| f.seq == t.seq && f.finished_at_ms >= since_ms)
            })
            .map(|t| t.transfer_id)
            .collect();
        let mut touched: Vec<TransferId> = harness
            .store
            .transfers_touched_since(since_ms)
            .expect("touched")
            .into_iter()
            .map(|(view, _, _)| view.transfer_id)
            .collect();
        expected.sort();
        touched.sort();
        prop_assert_eq!(touched, expected);
    }
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
    let (through, verdict) = store
        .check_history_snapshot()
        .expect("check")
        .expect("a snapshot");
    assert_eq!(through, stored.through_seq);
    assert!(verdict.is_err(), "the tampered snapshot passed the check");
    let loaded = store.load_recent(horizon_ms).expect("load");
    let problem = Ledger::restore(loaded, limits).err().expect("refused");
    assert!(problem.contains("does not add up"), "{problem}");
}
