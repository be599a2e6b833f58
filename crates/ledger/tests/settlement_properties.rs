//! Property tests of settlement: random transfers, closes, settlements,
//! account transitions, aborts and finalizes. Whatever the sequence:
//! every currency's accounts sum to zero after each batch (checked inside
//! the ledger in debug builds), refusals change nothing, SETTLEMENT
//! (liquidity) accounts move only in a finalize, the stored rows audit
//! clean and restore to the same ledger, and once every window is settled
//! every position and the hub's multilateral account are back at zero.

mod common;

use common::*;
use ledger::*;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Transfer {
        payer: usize,
        payee: usize,
        amount: i64,
    },
    Close,
    Settle {
        window: u32,
    },
    Advance {
        settlement: u32,
        stage: u8,
        all: bool,
    },
    Abort {
        settlement: u32,
    },
    Finalize {
        settlement: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..4usize, 0..4usize, 1..200i64)
            .prop_map(|(payer, payee, amount)| Op::Transfer { payer, payee, amount }),
        2 => Just(Op::Close),
        2 => (1..6u32).prop_map(|window| Op::Settle { window }),
        3 => (1..4u32, 0..5u8, any::<bool>())
            .prop_map(|(settlement, stage, all)| Op::Advance { settlement, stage, all }),
        1 => (1..4u32).prop_map(|settlement| Op::Abort { settlement }),
        1 => (1..4u32).prop_map(|settlement| Op::Finalize { settlement }),
    ]
}

const STAGES: [SettlementState; 5] = [
    SettlementState::PendingSettlement,
    SettlementState::PsTransfersRecorded,
    SettlementState::PsTransfersReserved,
    SettlementState::PsTransfersCommitted,
    SettlementState::Settled,
];

fn rules() -> ModelRules {
    ModelRules {
        granularity: Granularity::Net,
        interchange: Interchange::Multilateral,
        delay: Delay::Deferred,
        currency: None,
        ledger_account_type: AccountKind::Position,
        settlement_account_type: AccountKind::Settlement,
        auto_position_reset: true,
        require_liquidity_check: false,
    }
}

fn settlement_view(hub: &mut Hub, id: u32) -> Option<SettlementView> {
    match hub.one(Command::ReadSettlements) {
        Outcome::Settlements(list) => list.into_iter().find(|s| s.row.id == id),
        other => panic!("{other:?}"),
    }
}

fn liquidity(hub: &Hub, dfsps: &[Dfsp]) -> Vec<Amount> {
    dfsps.iter().map(|d| hub.balance(d.settlement).0).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn settlement_keeps_the_books(ops in proptest::collection::vec(op(), 1..50)) {
        let mut hub = Hub::usd();
        prop_assert_eq!(
            hub.one(Command::CreateSettlementModel {
                name: "DEFERREDNET".into(),
                definition: "{}".into(),
                rules: Some(rules()),
            }),
            Outcome::Done
        );
        let dfsps: Vec<Dfsp> = ["a", "b", "c", "d"]
            .iter()
            .map(|name| hub.dfsp(name, 100_000, 100_000))
            .collect();
        let mut next_id = 1u128;
        for op in &ops {
            let before = hub.ledger.snapshot();
            let liquidity_before = liquidity(&hub, &dfsps);
            let command = match op {
                Op::Transfer { payer, payee, amount } => {
                    if payer == payee {
                        continue;
                    }
                    let id = next_id;
                    next_id += 1;
                    let expires = hub.now + TTL;
                    let prepared = hub.one(prepare(id, dfsps[*payer], dfsps[*payee], *amount, expires));
                    prop_assert!(matches!(prepared, Outcome::Transfer(_)), "{:?}", prepared);
                    fulfil(id, dfsps[*payee].name)
                }
                Op::Close => {
                    let open = hub.ledger.open_window_id().expect("always an open window");
                    Command::CloseSettlementWindow { id: open, reason: "r".into() }
                }
                Op::Settle { window } => Command::CreateSettlement {
                    model: "DEFERREDNET".into(),
                    reason: "r".into(),
                    windows: vec![*window],
                },
                Op::Advance { settlement, stage, all } => {
                    let Some(view) = settlement_view(&mut hub, *settlement) else {
                        continue;
                    };
                    let accounts = view.row.accounts.iter().take(if *all { usize::MAX } else { 1 });
                    Command::UpdateSettlement {
                        settlement: *settlement,
                        changes: accounts
                            .map(|a| AccountChange {
                                participant: a.participant.0,
                                account: a.account.0,
                                state: STAGES[usize::from(*stage)].as_str().into(),
                                reason: "r".into(),
                                external_reference: None,
                            })
                            .collect(),
                    }
                }
                Op::Abort { settlement } => Command::AbortSettlement {
                    settlement: *settlement,
                    reason: "r".into(),
                    external_reference: None,
                },
                Op::Finalize { settlement } => Command::FinalizeSettlement {
                    settlement: *settlement,
                    reason: "r".into(),
                    external_reference: None,
                },
            };
            let result = hub.batch(std::slice::from_ref(&command));
            if let Outcome::Rejected(_) = result.outcomes[0] {
                prop_assert!(result.records.is_empty(), "a refusal recorded {:?}", result.records);
                prop_assert_eq!(&hub.ledger.snapshot(), &before, "a refusal changed something");
            }
            if !matches!(op, Op::Finalize { .. }) {
                prop_assert_eq!(liquidity(&hub, &dfsps), liquidity_before, "{:?} moved liquidity", op);
            }
        }
        let snapshot = hub.ledger.snapshot();
        prop_assert_eq!(snapshot.audit(), Vec::<String>::new());
        let restored = Ledger::restore(snapshot.clone(), Limits::default()).unwrap();
        prop_assert_eq!(restored.snapshot(), snapshot);

        // Settle everything still unsettled: positions and HMLNS go to zero.
        let open = hub.ledger.open_window_id().unwrap();
        hub.one(Command::CloseSettlementWindow { id: open, reason: "end".into() });
        let settlements = match hub.one(Command::ReadSettlements) {
            Outcome::Settlements(list) => list,
            other => panic!("{other:?}"),
        };
        for view in &settlements {
            if view.row.state != SettlementState::Settled && view.row.state != SettlementState::Aborted {
                // Stuck mid-way at COMMITTED or later: walk it to SETTLED.
                for stage in &STAGES[1..] {
                    if let Some(current) = settlement_view(&mut hub, view.row.id) {
                        if current.row.state == SettlementState::Settled {
                            break;
                        }
                        hub.one(Command::FinalizeSettlement {
                            settlement: view.row.id,
                            reason: "end".into(),
                            external_reference: None,
                        });
                        let changes = current.row.accounts.iter().map(|a| AccountChange {
                            participant: a.participant.0,
                            account: a.account.0,
                            state: stage.as_str().into(),
                            reason: "end".into(),
                            external_reference: None,
                        }).collect();
                        hub.one(Command::UpdateSettlement { settlement: view.row.id, changes });
                    }
                }
            }
        }
        let windows = match hub.one(Command::ReadSettlementWindows) {
            Outcome::SettlementWindows(list) => list,
            other => panic!("{other:?}"),
        };
        for window in windows.iter().filter(|w| {
            w.content.iter().any(|c| matches!(c.state, WindowState::Closed | WindowState::Aborted))
        }) {
            let outcome = hub.one(Command::CreateSettlement {
                model: "DEFERREDNET".into(),
                reason: "end".into(),
                windows: vec![window.row.id],
            });
            let Outcome::Settlement(view) = outcome else {
                return Err(TestCaseError::fail(format!("settling window {}: {outcome:?}", window.row.id)));
            };
            let outcome = hub.one(Command::FinalizeSettlement {
                settlement: view.row.id,
                reason: "end".into(),
                external_reference: None,
            });
            prop_assert!(matches!(outcome, Outcome::Settlement(ref v) if v.row.state == SettlementState::Settled), "{:?}", outcome);
        }
        for dfsp in &dfsps {
            prop_assert_eq!(hub.balance(dfsp.position).0, Amount::ZERO, "position of {}", dfsp.name);
        }
        let hmlns = hub.ledger.snapshot().accounts.into_iter()
            .find(|a| a.kind == AccountKind::HubMultilateralSettlement).unwrap();
        prop_assert_eq!(hmlns.value, Amount::ZERO);
        prop_assert_eq!(hub.ledger.snapshot().audit(), Vec::<String>::new());
    }
}
