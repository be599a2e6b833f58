//! Settlement in the ledger: windows, deferred net settlement through every
//! stage (the reference's worked example), abort, finalize, gross, and the
//! rules' refusals. Every step keeps the books balanced (checked after each
//! batch in debug builds) and survives a restore from the stored rows.

mod common;

use common::*;
use ledger::*;

fn net_model(name: &str, currency: Option<Currency>) -> Command {
    model(
        name,
        currency,
        Granularity::Net,
        Delay::Deferred,
        Interchange::Multilateral,
    )
}

fn model(
    name: &str,
    currency: Option<Currency>,
    granularity: Granularity,
    delay: Delay,
    interchange: Interchange,
) -> Command {
    Command::CreateSettlementModel {
        name: name.into(),
        definition: "{}".into(),
        rules: Some(ModelRules {
            granularity,
            interchange,
            delay,
            currency,
            ledger_account_type: AccountKind::Position,
            settlement_account_type: AccountKind::Settlement,
            auto_position_reset: true,
            require_liquidity_check: false,
        }),
    }
}

/// The four DFSPs of the reference's worked example and its six transfers:
/// nets testfsp1 +80, testfsp2 −75, payerfsp −10, payeefsp +5.
struct Example {
    hub: Hub,
    sim1: Dfsp,
    sim2: Dfsp,
    payer: Dfsp,
    payee: Dfsp,
    hmlns: AccountId,
}

impl Example {
    fn new() -> Example {
        let mut hub = Hub::usd();
        assert_eq!(
            hub.one(net_model("DEFERREDNETUSD", Some(usd()))),
            Outcome::Done
        );
        let sim1 = hub.dfsp("testfsp1", 1_000, 1_000);
        let sim2 = hub.dfsp("testfsp2", 1_000, 1_000);
        let payer = hub.dfsp("payerfsp", 1_000, 1_000);
        let payee = hub.dfsp("payeefsp", 1_000, 1_000);
        let hmlns = hub
            .ledger
            .snapshot()
            .accounts
            .into_iter()
            .find(|a| a.kind == AccountKind::HubMultilateralSettlement)
            .unwrap()
            .id;
        Example {
            hub,
            sim1,
            sim2,
            payer,
            payee,
            hmlns,
        }
    }

    fn transfers(&mut self) {
        let (s1, s2, pr, pe) = (self.sim1, self.sim2, self.payer, self.payee);
        let expires = self.hub.now + TTL;
        for (id, from, to, amount) in [
            (1, s1, s2, 60),
            (2, s1, pe, 55),
            (3, pr, s1, 35),
            (4, s2, pr, 20),
            (5, pe, s2, 35),
            (6, pe, pr, 25),
        ] {
            let outcome = self.hub.one(prepare(id, from, to, amount, expires));
            assert!(matches!(outcome, Outcome::Transfer(_)), "{outcome:?}");
            let outcome = self.hub.one(fulfil(id, to.name));
            assert!(
                matches!(outcome, Outcome::Transfer(ref v) if v.state == TransferState::Committed),
                "{outcome:?}"
            );
        }
    }

    fn positions(&self) -> [i64; 4] {
        [self.sim1, self.sim2, self.payer, self.payee]
            .map(|d| self.hub.balance(d.position).0.units() as i64 / 10_000)
    }

    fn liquidity(&self) -> [i64; 4] {
        [self.sim1, self.sim2, self.payer, self.payee]
            .map(|d| self.hub.balance(d.settlement).0.units() as i64 / 10_000)
    }

    fn close(&mut self, id: u32) -> WindowView {
        match self.hub.one(Command::CloseSettlementWindow {
            id,
            reason: "end of day".into(),
        }) {
            Outcome::Window(view) => view,
            other => panic!("close {id}: {other:?}"),
        }
    }

    fn settle(&mut self, model: &str, windows: &[u32]) -> SettlementView {
        match self.hub.one(Command::CreateSettlement {
            model: model.into(),
            reason: "TESTING".into(),
            windows: windows.to_vec(),
        }) {
            Outcome::Settlement(view) => view,
            other => panic!("settle {windows:?}: {other:?}"),
        }
    }

    /// Moves every account of `settlement` to `state` in one update.
    fn advance(&mut self, settlement: &SettlementView, state: SettlementState) -> SettlementView {
        advance(&mut self.hub, settlement, state)
    }

    /// Restores a ledger from the stored rows and checks it is the same.
    fn assert_restorable(&self) {
        assert_restorable(&self.hub);
    }
}

/// Moves every account of `settlement` to `state` in one update.
fn advance(hub: &mut Hub, settlement: &SettlementView, state: SettlementState) -> SettlementView {
    let changes = settlement
        .row
        .accounts
        .iter()
        .map(|a| AccountChange {
            participant: a.participant.0,
            account: a.account.0,
            state: state.as_str().into(),
            reason: format!("to {}", state.as_str()),
            external_reference: Some("ref".into()),
        })
        .collect();
    match hub.one(Command::UpdateSettlement {
        settlement: settlement.row.id,
        changes,
    }) {
        Outcome::SettlementUpdated {
            settlement,
            results,
            ..
        } => {
            assert!(results.iter().all(|r| r.error.is_none()), "{results:?}");
            settlement
        }
        other => panic!("advance to {state:?}: {other:?}"),
    }
}

/// The ledger adds up, and a restore of its snapshot is the same ledger.
fn assert_restorable(hub: &Hub) {
    let snapshot = hub.ledger.snapshot();
    assert_eq!(snapshot.audit(), Vec::<String>::new());
    let restored = Ledger::restore(snapshot.clone(), Limits::default()).unwrap();
    assert_eq!(restored.snapshot(), snapshot);
}

fn nets(view: &SettlementView) -> Vec<i64> {
    view.row
        .accounts
        .iter()
        .map(|a| a.net.units() as i64 / 10_000)
        .collect()
}

#[test]
fn the_worked_example_goes_through_every_stage_and_resets_positions() {
    let mut e = Example::new();
    assert_eq!(e.hub.ledger.open_window_id(), Some(1));
    let before = e.positions();
    let liquidity = e.liquidity();
    let hmlns_before = e.hub.balance(e.hmlns).0;
    e.transfers();
    let after = e.positions();
    assert_eq!(after, [80, -75, -10, 5]);
    e.assert_restorable();

    let next = e.close(1);
    assert_eq!((next.row.id, next.row.state), (2, WindowState::Open));
    assert_eq!(e.hub.ledger.open_window_id(), Some(2));
    e.assert_restorable();

    let settlement = e.settle("DEFERREDNETUSD", &[1]);
    assert_eq!(settlement.row.state, SettlementState::PendingSettlement);
    assert_eq!(nets(&settlement), [80, -75, -10, 5]);
    assert_eq!(
        settlement.windows[0].row.state,
        WindowState::PendingSettlement
    );

    let recorded = e.advance(&settlement, SettlementState::PsTransfersRecorded);
    assert_eq!(recorded.row.state, SettlementState::PsTransfersRecorded);
    assert_eq!(e.positions(), after);

    let reserved = e.advance(&recorded, SettlementState::PsTransfersReserved);
    assert_eq!(reserved.row.state, SettlementState::PsTransfersReserved);
    // Recipients (testfsp2, payerfsp) are back where they were.
    assert_eq!(e.positions(), [80, before[1], before[2], 5]);
    e.assert_restorable();

    let committed = e.advance(&reserved, SettlementState::PsTransfersCommitted);
    assert_eq!(committed.row.state, SettlementState::PsTransfersCommitted);
    assert_eq!(e.positions(), before);
    assert_eq!(e.hub.balance(e.hmlns).0, hmlns_before);
    assert_eq!(
        committed.windows[0].row.state,
        WindowState::PendingSettlement
    );

    let settled = e.advance(&committed, SettlementState::Settled);
    assert_eq!(settled.row.state, SettlementState::Settled);
    assert_eq!(settled.windows[0].row.state, WindowState::Settled);
    assert_eq!(settled.windows[0].content[0].state, WindowState::Settled);
    // Settlement never touches liquidity (that is finalize's).
    assert_eq!(e.liquidity(), liquidity);
    e.assert_restorable();
}

#[test]
fn closing_is_refused_when_empty_closed_or_unknown_and_changes_nothing() {
    let mut e = Example::new();
    let empty = e.hub.assert_rejected(
        Command::CloseSettlementWindow {
            id: 1,
            reason: "x".into(),
        },
        ErrorCode::GENERIC_VALIDATION_ERROR,
    );
    assert_eq!(empty.description, "Window 1 is empty");
    e.transfers();
    e.close(1);
    for (id, expected) in [(1, "Window 1 is not open"), (9, "Window 9 does not exist")] {
        let refused = e.hub.assert_rejected(
            Command::CloseSettlementWindow {
                id,
                reason: "x".into(),
            },
            ErrorCode::GENERIC_VALIDATION_ERROR,
        );
        assert_eq!(refused.description, expected);
    }
    // A transfer committed now belongs to window 2.
    let (s1, s2) = (e.sim1, e.sim2);
    let expires = e.hub.now + TTL;
    e.hub.one(prepare(20, s1, s2, 1, expires));
    e.hub.one(fulfil(20, s2.name));
    let window = match e.hub.one(Command::ReadSettlementWindows) {
        Outcome::SettlementWindows(windows) => windows,
        other => panic!("{other:?}"),
    };
    assert_eq!(window.len(), 2);
    assert_eq!(
        window[1].participants,
        [s1.position, s2.position].map(|a| e.hub.account(a).participant)
    );
}

#[test]
fn settlement_creation_refusals() {
    let mut e = Example::new();
    assert_eq!(
        e.hub.one(model(
            "CGS",
            Some(cur("EUR")),
            Granularity::Gross,
            Delay::Immediate,
            Interchange::Bilateral
        )),
        Outcome::Done
    );
    e.transfers();
    let refuse = |e: &mut Example, model: &str, windows: &[u32], expected: &str| {
        let rejection = e.hub.assert_rejected(
            Command::CreateSettlement {
                model: model.into(),
                reason: "r".into(),
                windows: windows.to_vec(),
            },
            ErrorCode::GENERIC_VALIDATION_ERROR,
        );
        assert_eq!(rejection.description, expected);
    };
    refuse(&mut e, "NOPE", &[1], "Settlement model not found: NOPE");
    refuse(
        &mut e,
        "CGS",
        &[1],
        "Settlement can not be created for GROSS or IMMEDIATE models",
    );
    // Window 1 is still open.
    refuse(
        &mut e,
        "DEFERREDNETUSD",
        &[1, 7],
        "Inapplicable windows 1, 7: window 1: it is OPEN; window 7: it does not exist",
    );
    e.close(1);
    e.settle("DEFERREDNETUSD", &[1]);
    // Its content is taken.
    refuse(
        &mut e,
        "DEFERREDNETUSD",
        &[1],
        "Inapplicable windows 1: its USD content is already PENDING_SETTLEMENT",
    );
    // Invalid model combinations are refused as Mojaloop does.
    e.hub.assert_rejected(
        model(
            "BAD",
            None,
            Granularity::Net,
            Delay::Immediate,
            Interchange::Multilateral,
        ),
        ErrorCode::GENERIC_CLIENT_ERROR,
    );
}

#[test]
fn account_transitions_move_in_lock_step_and_report_per_account_errors() {
    let mut e = Example::new();
    e.transfers();
    e.close(1);
    let settlement = e.settle("DEFERREDNETUSD", &[1]);
    let first = &settlement.row.accounts[0];
    let change = |participant: u32, account: u32, state: &str| AccountChange {
        participant,
        account,
        state: state.into(),
        reason: "r".into(),
        external_reference: None,
    };
    let outcome = e.hub.one(Command::UpdateSettlement {
        settlement: settlement.row.id,
        changes: vec![
            change(
                first.participant.0,
                first.account.0,
                "PS_TRANSFERS_RESERVED",
            ),
            change(first.participant.0, 999, "PS_TRANSFERS_RECORDED"),
            change(
                first.participant.0 + 1,
                first.account.0,
                "PS_TRANSFERS_RECORDED",
            ),
            change(
                first.participant.0,
                first.account.0,
                "PS_TRANSFERS_RECORDED",
            ),
            change(
                first.participant.0,
                first.account.0,
                "PS_TRANSFERS_RECORDED",
            ),
            change(first.participant.0, first.account.0, "NONSENSE"),
        ],
    });
    let Outcome::SettlementUpdated {
        settlement: after,
        results,
        ..
    } = outcome
    else {
        panic!("{outcome:?}");
    };
    let errors: Vec<Option<&str>> = results.iter().map(|r| r.error.as_deref()).collect();
    assert_eq!(
        errors,
        [
            Some("State change not allowed"),
            Some("Account not found"),
            Some("Participant and account mismatch"),
            None,
            Some("Account already processed once"),
            Some("Account already processed once"),
        ]
    );
    // One account moved; the settlement waits for the others.
    assert_eq!(after.row.state, SettlementState::PendingSettlement);
    assert_eq!(
        after.row.accounts[0].state,
        SettlementState::PsTransfersRecorded
    );
    e.assert_restorable();
}

#[test]
fn abort_gives_resets_back_and_frees_the_windows_until_a_commit() {
    let mut e = Example::new();
    let before = e.positions();
    e.transfers();
    let after = e.positions();
    e.close(1);
    let settlement = e.settle("DEFERREDNETUSD", &[1]);
    let recorded = e.advance(&settlement, SettlementState::PsTransfersRecorded);
    let reserved = e.advance(&recorded, SettlementState::PsTransfersReserved);
    assert_ne!(e.positions(), after);
    let outcome = e.hub.one(Command::AbortSettlement {
        settlement: reserved.row.id,
        reason: "wrong day".into(),
        external_reference: None,
    });
    let Outcome::Settlement(aborted) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(aborted.row.state, SettlementState::Aborted);
    assert_eq!(aborted.windows[0].row.state, WindowState::Aborted);
    assert_eq!(
        e.positions(),
        after,
        "the recipients' resets are given back"
    );
    e.assert_restorable();

    // The window can be settled again, and this time to the end.
    let again = e.settle("DEFERREDNETUSD", &[1]);
    assert_eq!(nets(&again), [80, -75, -10, 5]);
    let mut view = again;
    for state in [
        SettlementState::PsTransfersRecorded,
        SettlementState::PsTransfersReserved,
        SettlementState::PsTransfersCommitted,
    ] {
        view = e.advance(&view, state);
    }
    assert_eq!(e.positions(), before);
    let refused = e.hub.assert_rejected(
        Command::AbortSettlement {
            settlement: view.row.id,
            reason: "too late".into(),
            external_reference: None,
        },
        ErrorCode::GENERIC_VALIDATION_ERROR,
    );
    assert!(refused.description.contains("not allowed"), "{refused:?}");
}

#[test]
fn finalize_does_every_stage_and_moves_liquidity_in_one_step() {
    let mut e = Example::new();
    let before = e.positions();
    let liquidity = e.liquidity();
    e.transfers();
    e.close(1);
    let settlement = e.settle("DEFERREDNETUSD", &[1]);
    let outcome = e.hub.one(Command::FinalizeSettlement {
        settlement: settlement.row.id,
        reason: "finalized".into(),
        external_reference: Some("bank-123".into()),
    });
    let Outcome::Settlement(done) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(done.row.state, SettlementState::Settled);
    assert!(done
        .row
        .accounts
        .iter()
        .all(|a| a.state == SettlementState::Settled));
    assert_eq!(done.windows[0].row.state, WindowState::Settled);
    assert_eq!(e.positions(), before);
    // Senders paid their net out of their liquidity, recipients got theirs
    // (liquidity is the negative of the SETTLEMENT balance).
    let expected = [80, -75, -10, 5];
    let moved: Vec<i64> = e
        .liquidity()
        .iter()
        .zip(liquidity)
        .map(|(now, was)| now - was)
        .collect();
    assert_eq!(moved, expected);
    e.assert_restorable();
}

#[test]
fn finalize_is_all_or_nothing_when_a_sender_lacks_liquidity() {
    let mut hub = Hub::usd();
    hub.one(net_model("DEFERREDNET", None));
    let rich = hub.dfsp("rich", 1_000, 1_000);
    // Enough cover to send, then the funds are taken out again.
    let poor = hub.dfsp("poor", 100, 1_000);
    let expires = hub.now + TTL;
    hub.one(prepare(1, poor, rich, 90, expires));
    hub.one(fulfil(1, rich.name));
    let out = hub.fresh_id();
    hub.one(funds_out(out, poor, whole(50), hash(0xAA)));
    hub.one(Command::FundsOutCommit(funds_finish(out, poor, hash(0xAB))));
    hub.one(Command::CloseSettlementWindow {
        id: 1,
        reason: "r".into(),
    });
    let Outcome::Settlement(view) = hub.one(Command::CreateSettlement {
        model: "DEFERREDNET".into(),
        reason: "r".into(),
        windows: vec![1],
    }) else {
        panic!()
    };
    let refusal = hub.assert_rejected(
        Command::FinalizeSettlement {
            settlement: view.row.id,
            reason: "r".into(),
            external_reference: None,
        },
        ErrorCode::PAYER_FSP_INSUFFICIENT_LIQUIDITY,
    );
    assert!(refusal.description.contains("poor"), "{refusal:?}");
}

#[test]
fn gross_settlement_moves_liquidity_at_each_commit() {
    let mut hub = Hub::usd();
    hub.one(model(
        "CGS",
        None,
        Granularity::Gross,
        Delay::Immediate,
        Interchange::Bilateral,
    ));
    let payer = hub.dfsp("payer", 1_000, 1_000);
    let payee = hub.dfsp("payee", 1_000, 1_000);
    let expires = hub.now + TTL;
    hub.one(prepare(1, payer, payee, 100, expires));
    hub.one(fulfil(1, payee.name));
    // Positions are back at zero, liquidity moved from payer to payee.
    assert_eq!(hub.balance(payer.position).0, Amount::ZERO);
    assert_eq!(hub.balance(payee.position).0, Amount::ZERO);
    assert_eq!(hub.balance(payer.settlement).0, whole(-900));
    assert_eq!(hub.balance(payee.settlement).0, whole(-1_100));
    // The window holds the transfer, but a gross model gives it no content.
    let Outcome::Window(next) = hub.one(Command::CloseSettlementWindow {
        id: 1,
        reason: "r".into(),
    }) else {
        panic!()
    };
    assert_eq!(next.row.id, 2);
    let Outcome::SettlementWindows(windows) = hub.one(Command::ReadSettlementWindows) else {
        panic!()
    };
    assert!(windows[0].content.is_empty());
    let snapshot = hub.ledger.snapshot();
    assert_eq!(snapshot.audit(), Vec::<String>::new());
    assert_eq!(snapshot.entries.len(), 2);
    let restored = Ledger::restore(snapshot.clone(), Limits::default()).unwrap();
    assert_eq!(restored.snapshot(), snapshot);
}

/// A hub with a USD model and a default one, and window 1 closed holding
/// a USD and an EUR transfer between DFSPs a and b.
fn closed_window_of_usd_and_eur() -> Hub {
    let mut hub = Hub::new(&[usd(), eur()]);
    hub.one(net_model("DEFERREDNETUSD", Some(usd())));
    hub.one(net_model("DEFAULTDEFERREDNET", None));
    let a_usd = hub.dfsp_in("a", usd(), 1_000, 1_000);
    let b_usd = hub.dfsp_in("b", usd(), 1_000, 1_000);
    let a_eur = hub.dfsp_in("a", eur(), 1_000, 1_000);
    let b_eur = hub.dfsp_in("b", eur(), 1_000, 1_000);
    let expires = hub.now + TTL;
    hub.one(prepare(1, a_usd, b_usd, 10, expires));
    hub.one(fulfil(1, b_usd.name));
    hub.one(prepare(2, b_eur, a_eur, 7, expires));
    hub.one(fulfil(2, a_eur.name));
    hub.one(Command::CloseSettlementWindow {
        id: 1,
        reason: "r".into(),
    });
    hub
}

/// Creates a settlement of window 1 with `model`.
fn settle_window_1(hub: &mut Hub, model: &str) -> SettlementView {
    match hub.one(Command::CreateSettlement {
        model: model.into(),
        reason: "r".into(),
        windows: vec![1],
    }) {
        Outcome::Settlement(view) => view,
        other => panic!("{other:?}"),
    }
}

#[test]
fn two_models_on_one_window_settle_separately() {
    let mut hub = closed_window_of_usd_and_eur();
    let finalize = |hub: &mut Hub, id: u32| match hub.one(Command::FinalizeSettlement {
        settlement: id,
        reason: "r".into(),
        external_reference: None,
    }) {
        Outcome::Settlement(view) => view,
        other => panic!("{other:?}"),
    };
    let usd_settlement = settle_window_1(&mut hub, "DEFERREDNETUSD");
    assert_eq!(usd_settlement.row.accounts.len(), 2);
    assert!(usd_settlement
        .row
        .accounts
        .iter()
        .all(|a| a.currency == usd()));
    let eur_settlement = settle_window_1(&mut hub, "DEFAULTDEFERREDNET");
    assert!(eur_settlement
        .row
        .accounts
        .iter()
        .all(|a| a.currency == eur()));
    let done = finalize(&mut hub, usd_settlement.row.id);
    assert_eq!(done.windows[0].row.state, WindowState::PendingSettlement);
    let done = finalize(&mut hub, eur_settlement.row.id);
    assert_eq!(done.windows[0].row.state, WindowState::Settled);
    assert_restorable(&hub);
}

#[test]
fn abort_is_allowed_at_each_stage_before_a_commit_and_refused_after() {
    for stages in 0..=3 {
        let mut e = Example::new();
        e.transfers();
        let after = e.positions();
        e.close(1);
        let mut view = e.settle("DEFERREDNETUSD", &[1]);
        for state in [
            SettlementState::PsTransfersRecorded,
            SettlementState::PsTransfersReserved,
            SettlementState::PsTransfersCommitted,
        ]
        .into_iter()
        .take(stages)
        {
            view = e.advance(&view, state);
        }
        let abort = Command::AbortSettlement {
            settlement: view.row.id,
            reason: "abort".into(),
            external_reference: Some("x".into()),
        };
        if stages == 3 {
            let refused = e
                .hub
                .assert_rejected(abort, ErrorCode::GENERIC_VALIDATION_ERROR);
            assert!(refused.description.contains("not allowed"), "{refused:?}");
            continue;
        }
        let Outcome::Settlement(aborted) = e.hub.one(abort) else {
            panic!("abort after {stages} stages")
        };
        assert_eq!(aborted.row.state, SettlementState::Aborted);
        assert!(aborted
            .row
            .accounts
            .iter()
            .all(|a| a.state == SettlementState::Aborted));
        assert_eq!(e.positions(), after, "after {stages} stages");
        assert_eq!(aborted.windows[0].row.state, WindowState::Aborted);
        // Aborting again only records the new reason.
        let Outcome::Settlement(again) = e.hub.one(Command::AbortSettlement {
            settlement: view.row.id,
            reason: "again".into(),
            external_reference: None,
        }) else {
            panic!()
        };
        assert_eq!(again.row.reason, "again");
        assert_eq!(e.positions(), after);
        e.assert_restorable();
    }
}

/// A window is SETTLED only once every content row of it is (central-
/// settlement's roll-up): settling its USD content alone leaves it
/// PENDING_SETTLEMENT, its USD content SETTLED and its EUR content CLOSED,
/// still settleable by the other model.
#[test]
fn a_window_with_content_left_to_settle_stays_pending_settlement() {
    let mut hub = closed_window_of_usd_and_eur();
    let window = |hub: &mut Hub| match hub.one(Command::ReadSettlementWindows) {
        Outcome::SettlementWindows(windows) => windows[0].clone(),
        other => panic!("{other:?}"),
    };
    let content_states = |view: &WindowView| {
        view.content
            .iter()
            .map(|c| (c.currency, c.state))
            .collect::<Vec<_>>()
    };

    // Through the stages one by one: the last (SETTLED) rolls up.
    let usd_settlement = settle_window_1(&mut hub, "DEFERREDNETUSD");
    let mut view = usd_settlement;
    for state in [
        SettlementState::PsTransfersRecorded,
        SettlementState::PsTransfersReserved,
        SettlementState::PsTransfersCommitted,
        SettlementState::Settled,
    ] {
        view = advance(&mut hub, &view, state);
    }
    assert_eq!(view.row.state, SettlementState::Settled);
    let after_usd = window(&mut hub);
    assert_eq!(after_usd.row.state, WindowState::PendingSettlement);
    assert_eq!(
        content_states(&after_usd),
        [(eur(), WindowState::Closed), (usd(), WindowState::Settled)]
    );

    // The EUR content is still the default model's to settle; then the
    // window is SETTLED.
    let eur_settlement = settle_window_1(&mut hub, "DEFAULTDEFERREDNET");
    assert!(eur_settlement
        .row
        .accounts
        .iter()
        .all(|a| a.currency == eur()));
    let Outcome::Settlement(done) = hub.one(Command::FinalizeSettlement {
        settlement: eur_settlement.row.id,
        reason: "r".into(),
        external_reference: None,
    }) else {
        panic!()
    };
    assert_eq!(done.windows[0].row.state, WindowState::Settled);
    let settled = window(&mut hub);
    assert_eq!(settled.row.state, WindowState::Settled);
    assert_eq!(
        content_states(&settled),
        [(eur(), WindowState::Settled), (usd(), WindowState::Settled)]
    );
    assert_restorable(&hub);
}

/// The tutorial's trap: a default model (`DEFERREDNET`) and a USD model
/// (`DEFERREDNETUSD`) both exist, so USD content is the USD model's; asking
/// the default model to settle it is refused with the model that applies.
#[test]
fn an_inapplicable_window_is_refused_with_the_model_that_settles_it() {
    let mut hub = Hub::new(&[usd(), eur()]);
    hub.one(net_model("DEFERREDNET", None));
    hub.one(net_model("DEFERREDNETUSD", Some(usd())));
    let a = hub.dfsp_in("a", usd(), 1_000, 1_000);
    let b = hub.dfsp_in("b", usd(), 1_000, 1_000);
    let expires = hub.now + TTL;
    for (id, window) in [(1, 1), (2, 2)] {
        hub.one(prepare(id, a, b, 10, expires));
        hub.one(fulfil(id, b.name));
        let outcome = hub.one(Command::CloseSettlementWindow {
            id: window,
            reason: "r".into(),
        });
        assert!(matches!(outcome, Outcome::Window(_)), "{outcome:?}");
    }
    let refuse = |hub: &mut Hub, model: &str, windows: &[u32]| {
        hub.assert_rejected(
            Command::CreateSettlement {
                model: model.into(),
                reason: "r".into(),
                windows: windows.to_vec(),
            },
            ErrorCode::GENERIC_VALIDATION_ERROR,
        )
        .description
    };
    assert_eq!(
        refuse(&mut hub, "DEFERREDNET", &[2, 1]),
        "Inapplicable windows 2, 1: their USD content is settled by model DEFERREDNETUSD"
    );
    hub.one(net_model("DEFERREDNETEUR", Some(eur())));
    assert_eq!(
        refuse(&mut hub, "DEFERREDNETEUR", &[1, 3, 9]),
        "Inapplicable windows 1, 3, 9: window 1: it has no EUR content; \
         window 3: it is OPEN; window 9: it does not exist"
    );
    // The model named settles both.
    let Outcome::Settlement(view) = hub.one(Command::CreateSettlement {
        model: "DEFERREDNETUSD".into(),
        reason: "r".into(),
        windows: vec![2, 1],
    }) else {
        panic!()
    };
    assert_eq!(view.row.windows, [2, 1]);
}
