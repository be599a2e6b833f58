//! FX payer conversion in the ledger: every position after each step in
//! both currencies, every way a conversion can end, the checks on the
//! dependent transfer, duplicates, and restore at every stage.

mod common;

use common::*;
use ledger::*;

fn tzs() -> Currency {
    cur("TZS")
}

const CONVERSION: u128 = 0xC0;
const DEPENDENT: u128 = 0xD0;
/// The conversion's condition is `secret(FXP_SECRET)`'s.
const FXP_SECRET: u8 = 0x5F;

/// A payer DFSP in USD, an FXP in USD and TZS, a payee in TZS.
struct Fx {
    hub: Hub,
    payer: Dfsp,
    fxp_usd: Dfsp,
    fxp_tzs: Dfsp,
    payee: Dfsp,
}

impl Fx {
    fn new() -> Fx {
        Fx::with_fxp_liquidity(1_000_000)
    }

    /// The FXP with `tzs` of TZS liquidity (and as much cap).
    fn with_fxp_liquidity(tzs_liquidity: i64) -> Fx {
        let mut hub = Hub::new(&[usd(), tzs()]);
        let payer = hub.dfsp_in("payerfsp", usd(), 1_000, 1_000);
        let fxp_usd = hub.dfsp_in("fxp", usd(), 0, 0);
        let fxp_tzs = hub.dfsp_in("fxp", tzs(), tzs_liquidity, tzs_liquidity);
        let payee = hub.dfsp_in("payeefsp", tzs(), 0, 0);
        Fx {
            hub,
            payer,
            fxp_usd,
            fxp_tzs,
            payee,
        }
    }

    /// USD 300 into TZS 750,000 for transfer `DEPENDENT`.
    fn conversion(&self, id: u128, determining: u128) -> PrepareConversion {
        PrepareConversion {
            commit_request_id: TransferId::new(id),
            initiating: self.payer.name,
            fxp: self.fxp_usd.name,
            source_amount: whole(300),
            source_currency: usd(),
            terms: ConversionTerms {
                determining_transfer_id: TransferId::new(determining),
                target_currency: tzs(),
                target_amount: whole(750_000),
            },
            condition: secret(FXP_SECRET).condition(),
            expiration_ms: self.hub.now + TTL,
            request_hash: hash(id as u8),
            wire_version: 0x20,
        }
    }

    fn prepare_conversion(&mut self) -> TransferView {
        let command = Command::PrepareConversion(self.conversion(CONVERSION, DEPENDENT));
        view(&self.hub.one(command))
    }

    fn accept(&self, caller: FspName, preimage: u8, k: u8) -> Command {
        Command::FulfilConversion(FulfilConversion {
            commit_request_id: TransferId::new(CONVERSION),
            caller,
            fulfilment: Some(secret(preimage)),
            destination: Some(self.payer.name),
            request_hash: hash(k),
        })
    }

    fn fxp_accepts(&mut self) -> TransferView {
        let command = self.accept(self.fxp_usd.name, FXP_SECRET, 0xA1);
        view(&self.hub.one(command))
    }

    /// The transfer the conversion depends on: payer to payee, TZS.
    fn dependent(&self, amount: i64) -> Command {
        prepare_full(
            DEPENDENT,
            self.payer.name,
            self.payee.name,
            whole(amount),
            tzs(),
            DEPENDENT as u8,
            self.hub.now + TTL,
            hash(DEPENDENT as u8),
        )
    }

    fn payee_fulfils(&mut self) -> Outcome {
        self.hub.one(Command::Fulfil(Fulfil {
            transfer_id: TransferId::new(DEPENDENT),
            caller: self.payee.name,
            fulfilment: Some(secret(DEPENDENT as u8)),
            destination: Some(self.payer.name),
            request_hash: hash(0xF0),
        }))
    }

    /// (value, reserved) in whole units of the four positions: payer USD,
    /// FXP USD, FXP TZS, payee TZS.
    fn positions(&self) -> [(i64, i64); 4] {
        [self.payer, self.fxp_usd, self.fxp_tzs, self.payee].map(|dfsp| {
            let (value, reserved) = self.hub.balance(dfsp.position);
            (units(value), units(reserved))
        })
    }

    fn conversion_state(&mut self) -> TransferState {
        let caller = self.payer.name;
        match self.hub.one(Command::GetConversion {
            commit_request_id: TransferId::new(CONVERSION),
            caller,
        }) {
            Outcome::Transfer(view) => view.state,
            other => panic!("GET conversion: {other:?}"),
        }
    }

    fn audit_is_clean(&self) {
        assert_eq!(self.hub.ledger.check_balances(), Ok(()));
        let problems = self.hub.ledger.snapshot().audit();
        assert!(problems.is_empty(), "{problems:?}");
    }
}

fn units(amount: Amount) -> i64 {
    let text = amount.to_string();
    text.parse()
        .unwrap_or_else(|_| panic!("{text} is not whole"))
}

#[test]
fn a_payer_conversion_moves_four_positions_only_when_the_payee_commits() {
    let mut fx = Fx::new();
    assert_eq!(fx.positions(), [(0, 0); 4]);

    let conversion = fx.prepare_conversion();
    assert_eq!(conversion.kind, TransferKind::FxConversion);
    assert_eq!(conversion.state, TransferState::Reserved);
    assert_eq!(
        (conversion.payer, conversion.payee),
        (fx.payer.name, fx.fxp_usd.name)
    );
    assert_eq!(fx.positions(), [(0, 300), (0, 0), (0, 0), (0, 0)]);

    let accepted = fx.fxp_accepts();
    assert_eq!(accepted.state, TransferState::Reserved);
    assert!(matches!(
        accepted.fx,
        Some(FxView::Conversion {
            fxp_fulfilled_at_ms: Some(_),
            ..
        })
    ));
    assert_eq!(
        fx.positions(),
        [(0, 300), (0, 0), (0, 0), (0, 0)],
        "acceptance moves nothing"
    );

    let command = fx.dependent(750_000);
    let dependent = view(&fx.hub.one(command));
    assert_eq!(
        dependent.payer, fx.payer.name,
        "the FSPIOP payer is the initiating DFSP"
    );
    assert_eq!(dependent.payee, fx.payee.name);
    assert_eq!(
        dependent.fx,
        Some(FxView::Dependent {
            commit_request_id: TransferId::new(CONVERSION),
            fxp: fx.fxp_usd.name,
        })
    );
    assert_eq!(fx.conversion_state(), TransferState::Reserved);
    assert_eq!(fx.positions(), [(0, 300), (0, 0), (0, 750_000), (0, 0)]);
    fx.audit_is_clean();

    let committed = view(&fx.payee_fulfils());
    assert_eq!(committed.state, TransferState::Committed);
    assert!(matches!(committed.fx, Some(FxView::Dependent { .. })));
    assert_eq!(
        fx.positions(),
        [(300, 0), (-300, 0), (750_000, 0), (-750_000, 0)],
        "payer owes USD, the FXP is owed USD and owes TZS, the payee is owed TZS"
    );
    assert_eq!(fx.conversion_state(), TransferState::Committed);
    fx.audit_is_clean();
}

#[test]
fn the_commit_is_one_step_with_both_finishes_in_the_same_window() {
    let mut fx = Fx::new();
    fx.prepare_conversion();
    fx.fxp_accepts();
    let command = fx.dependent(750_000);
    fx.hub.one(command);
    let command = Command::Fulfil(Fulfil {
        transfer_id: TransferId::new(DEPENDENT),
        caller: fx.payee.name,
        fulfilment: Some(secret(DEPENDENT as u8)),
        destination: None,
        request_hash: hash(0xF0),
    });
    let result = fx.hub.batch(&[command]);
    let finishes: Vec<&FinishRow> = result
        .records
        .iter()
        .filter_map(|record| match record {
            Record::Finish(row) => Some(row),
            _ => None,
        })
        .collect();
    assert_eq!(finishes.len(), 2, "{:?}", result.records);
    assert!(finishes
        .iter()
        .all(|row| row.state == TransferState::Committed));
    assert_eq!(finishes[0].kind, FinishKind::Fulfil);
    assert_eq!(finishes[1].kind, FinishKind::Linked);
    assert_eq!(
        finishes[1].fulfilment,
        Some(secret(FXP_SECRET)),
        "the FXP's fulfilment"
    );
    assert!(finishes[0].settlement_window.is_some());
    assert_eq!(finishes[0].settlement_window, finishes[1].settlement_window);
}

#[test]
fn the_fxps_error_releases_the_payer_and_ends_the_reserved_dependent_transfer() {
    let mut fx = Fx::new();
    fx.prepare_conversion();
    fx.fxp_accepts();
    let command = fx.dependent(750_000);
    fx.hub.one(command);
    let outcome = fx.hub.one(Command::AbortConversion(Abort {
        transfer_id: TransferId::new(CONVERSION),
        caller: fx.fxp_usd.name,
        error_code: ErrorCode(5100),
        destination: Some(fx.payer.name),
        request_hash: hash(0xE1),
    }));
    let aborted = view(&outcome);
    assert_eq!(aborted.state, TransferState::Aborted);
    assert_eq!(aborted.reason, Some(ErrorCode(5100)));
    assert!(matches!(aborted.fx, Some(FxView::Conversion { .. })));
    assert_eq!(fx.positions(), [(0, 0); 4], "every hold released once");
    let payer = fx.payer.name;
    assert_eq!(
        fx.hub.state(TransferId::new(DEPENDENT), payer),
        TransferState::Aborted
    );
    // The payee's fulfil now comes too late, and moves nothing.
    let outcome = fx.payee_fulfils();
    assert_eq!(
        outcome.error_code(),
        Some(ErrorCode::GENERIC_VALIDATION_ERROR),
        "{outcome:?}"
    );
    assert_eq!(fx.positions(), [(0, 0); 4]);
    fx.audit_is_clean();
}

#[test]
fn the_payees_error_aborts_the_conversion_too() {
    let mut fx = Fx::new();
    fx.prepare_conversion();
    fx.fxp_accepts();
    let command = fx.dependent(750_000);
    fx.hub.one(command);
    let outcome = fx.hub.one(Command::Abort(Abort {
        transfer_id: TransferId::new(DEPENDENT),
        caller: fx.payee.name,
        error_code: ErrorCode(5104),
        destination: None,
        request_hash: hash(0xE2),
    }));
    let aborted = view(&outcome);
    assert!(matches!(aborted.fx, Some(FxView::Dependent { .. })));
    assert_eq!(fx.conversion_state(), TransferState::Aborted);
    assert_eq!(fx.positions(), [(0, 0); 4]);
    fx.audit_is_clean();
}

#[test]
fn either_expiry_ends_both_and_each_is_reported() {
    // The conversion expires first.
    let mut fx = Fx::new();
    fx.prepare_conversion();
    fx.fxp_accepts();
    fx.hub.advance(1_000);
    let command = fx.dependent(750_000);
    fx.hub.one(command);
    assert_eq!(fx.positions(), [(0, 300), (0, 0), (0, 750_000), (0, 0)]);
    fx.hub.advance(TTL - 1_000);
    let Outcome::Expired(views) = fx.hub.one(Command::Expire) else {
        panic!("expire")
    };
    let ids: Vec<TransferId> = views.iter().map(|v| v.transfer_id).collect();
    assert_eq!(
        ids,
        [TransferId::new(CONVERSION), TransferId::new(DEPENDENT)]
    );
    assert!(views.iter().all(|v| v.state == TransferState::Expired));
    assert_eq!(fx.positions(), [(0, 0); 4]);
    fx.audit_is_clean();
    assert_eq!(
        fx.hub.ledger.next_expiry_ms(),
        None,
        "nothing left to expire"
    );

    // The dependent transfer expires first.
    let mut fx = Fx::new();
    fx.prepare_conversion();
    fx.fxp_accepts();
    let mut command = fx.dependent(750_000);
    if let Command::Prepare(prepare) = &mut command {
        prepare.expiration_ms = fx.hub.now + 10_000;
    }
    fx.hub.one(command);
    fx.hub.advance(10_000);
    let Outcome::Expired(views) = fx.hub.one(Command::Expire) else {
        panic!("expire")
    };
    assert_eq!(views.len(), 2, "{views:?}");
    assert_eq!(fx.conversion_state(), TransferState::Expired);
    assert_eq!(fx.positions(), [(0, 0); 4]);
    fx.audit_is_clean();
}

#[test]
fn a_conversion_nobody_accepts_expires_alone() {
    let mut fx = Fx::new();
    fx.prepare_conversion();
    fx.hub.advance(TTL);
    let Outcome::Expired(views) = fx.hub.one(Command::Expire) else {
        panic!("expire")
    };
    assert_eq!(views.len(), 1);
    assert_eq!(views[0].reason, Some(ErrorCode::TRANSFER_EXPIRED));
    assert_eq!(fx.positions(), [(0, 0); 4]);
    // The FXP's acceptance after the expiry changes nothing.
    let command = fx.accept(fx.fxp_usd.name, FXP_SECRET, 0xA1);
    let outcome = fx.hub.one(command);
    assert_eq!(
        outcome.error_code(),
        Some(ErrorCode::TRANSFER_EXPIRED),
        "{outcome:?}"
    );
}

#[test]
fn the_dependent_transfer_must_match_its_conversion() {
    let mut fx = Fx::new();
    fx.prepare_conversion();

    // Before the FXP accepted: central-ledger's words.
    let command = fx.dependent(750_000);
    let refusal = fx
        .hub
        .assert_rejected(command, ErrorCode::GENERIC_VALIDATION_ERROR);
    assert!(refusal.description.contains("not fulfilled"), "{refusal:?}");
    fx.fxp_accepts();

    // Above the converted amount.
    let command = fx.dependent(750_001);
    fx.hub
        .assert_rejected(command, ErrorCode::GENERIC_VALIDATION_ERROR);
    // Another currency.
    let mut command = fx.dependent(100);
    if let Command::Prepare(prepare) = &mut command {
        prepare.currency = usd();
    }
    fx.hub
        .assert_rejected(command, ErrorCode::GENERIC_VALIDATION_ERROR);
    // Another payer: a DFSP cannot spend someone else's conversion.
    let intruder = fx.hub.dfsp_in("intruder", tzs(), 1_000_000, 1_000_000);
    let mut command = fx.dependent(750_000);
    if let Command::Prepare(prepare) = &mut command {
        prepare.payer = intruder.name;
    }
    let refusal = fx
        .hub
        .assert_rejected(command, ErrorCode::GENERIC_VALIDATION_ERROR);
    assert!(refusal.not_party, "{refusal:?}");
    // The FXP as payee.
    let mut command = fx.dependent(750_000);
    if let Command::Prepare(prepare) = &mut command {
        prepare.payee = fx.fxp_usd.name;
    }
    fx.hub
        .assert_rejected(command, ErrorCode::GENERIC_VALIDATION_ERROR);

    // Less than converted is allowed: that amount moves.
    let command = fx.dependent(500_000);
    assert_eq!(view(&fx.hub.one(command)).state, TransferState::Reserved);
    assert_eq!(fx.positions(), [(0, 300), (0, 0), (0, 500_000), (0, 0)]);
    view(&fx.payee_fulfils());
    assert_eq!(
        fx.positions(),
        [(300, 0), (-300, 0), (500_000, 0), (-500_000, 0)]
    );
    fx.audit_is_clean();
}

#[test]
fn an_fxp_without_target_liquidity_refuses_and_the_conversion_ends_at_once() {
    let mut fx = Fx::with_fxp_liquidity(100);
    fx.prepare_conversion();
    fx.fxp_accepts();
    let command = fx.dependent(750_000);
    let (transfer, code) = failed(&fx.hub.one(command));
    assert_eq!(code, ErrorCode::PAYER_FSP_INSUFFICIENT_LIQUIDITY);
    assert_eq!(transfer.state, TransferState::Rejected);
    assert!(matches!(transfer.fx, Some(FxView::Dependent { .. })));
    assert_eq!(fx.conversion_state(), TransferState::Aborted);
    let (_, payer_reserved) = fx.hub.balance(fx.payer.position);
    assert_eq!(
        payer_reserved,
        Amount::ZERO,
        "the payer is released at once"
    );
    fx.audit_is_clean();
}

#[test]
fn the_payers_caps_apply_to_the_conversion() {
    let mut fx = Fx::new();
    let mut big = fx.conversion(CONVERSION, DEPENDENT);
    big.source_amount = whole(1_001);
    let (conversion, code) = failed(&fx.hub.one(Command::PrepareConversion(big)));
    assert_eq!(code, ErrorCode::PAYER_FSP_INSUFFICIENT_LIQUIDITY);
    assert_eq!(conversion.state, TransferState::Rejected);
    assert_eq!(fx.positions(), [(0, 0); 4]);
}

#[test]
fn only_the_fxp_answers_and_only_the_parties_read() {
    let mut fx = Fx::new();
    fx.prepare_conversion();
    let command = fx.accept(fx.payee.name, FXP_SECRET, 0xA1);
    let refusal = fx
        .hub
        .assert_rejected(command, ErrorCode::GENERIC_VALIDATION_ERROR);
    assert!(refusal.not_party);
    let command = Command::AbortConversion(Abort {
        transfer_id: TransferId::new(CONVERSION),
        caller: fx.payer.name,
        error_code: ErrorCode(5100),
        destination: None,
        request_hash: hash(0xE1),
    });
    fx.hub
        .assert_rejected(command, ErrorCode::GENERIC_VALIDATION_ERROR);
    let command = Command::GetConversion {
        commit_request_id: TransferId::new(CONVERSION),
        caller: fx.payee.name,
    };
    fx.hub
        .assert_rejected(command, ErrorCode::GENERIC_CLIENT_ERROR);
    let fxp = fx.fxp_usd.name;
    let command = Command::GetConversion {
        commit_request_id: TransferId::new(CONVERSION),
        caller: fxp,
    };
    assert_eq!(view(&fx.hub.one(command)).state, TransferState::Reserved);
    // A conversion is not a transfer, and a transfer not a conversion.
    let payer = fx.payer.name;
    let command = Command::GetTransfer {
        transfer_id: TransferId::new(CONVERSION),
        caller: payer,
    };
    fx.hub
        .assert_rejected(command, ErrorCode::TRANSFER_ID_NOT_FOUND);
    let command = Command::GetConversion {
        commit_request_id: TransferId::new(0x1234),
        caller: payer,
    };
    fx.hub
        .assert_rejected(command, ErrorCode::TRANSFER_ID_NOT_FOUND);
}

#[test]
fn a_wrong_fulfilment_aborts_the_conversion() {
    let mut fx = Fx::new();
    fx.prepare_conversion();
    let command = fx.accept(fx.fxp_usd.name, 0x01, 0xA1);
    let (conversion, code) = failed(&fx.hub.one(command));
    assert_eq!(code, ErrorCode::GENERIC_VALIDATION_ERROR);
    assert_eq!(conversion.state, TransferState::Aborted);
    assert_eq!(conversion.cause, Some(AbortCause::InvalidFulfilment));
    assert_eq!(fx.positions(), [(0, 0); 4]);
}

#[test]
fn duplicates_and_modified_resends() {
    let mut fx = Fx::new();
    fx.prepare_conversion();
    let again = Command::PrepareConversion(fx.conversion(CONVERSION, DEPENDENT));
    fx.hub.assert_duplicate(again);
    let mut modified = fx.conversion(CONVERSION, DEPENDENT);
    modified.request_hash = hash(0x77);
    fx.hub.assert_rejected(
        Command::PrepareConversion(modified),
        ErrorCode::MODIFIED_REQUEST,
    );

    fx.fxp_accepts();
    let command = fx.accept(fx.fxp_usd.name, FXP_SECRET, 0xA1);
    fx.hub.assert_duplicate(command);
    let command = fx.accept(fx.fxp_usd.name, FXP_SECRET, 0xA2);
    fx.hub.assert_rejected(command, ErrorCode::MODIFIED_REQUEST);

    // A second conversion for the same transfer while one is live.
    let second = Command::PrepareConversion(fx.conversion(0xC1, DEPENDENT));
    fx.hub
        .assert_rejected(second, ErrorCode::GENERIC_VALIDATION_ERROR);
    // A conversion may not reuse a transfer's id, nor come after it.
    let command = fx.dependent(750_000);
    fx.hub.one(command);
    let late = Command::PrepareConversion(fx.conversion(0xC2, DEPENDENT));
    fx.hub
        .assert_rejected(late, ErrorCode::GENERIC_VALIDATION_ERROR);
    let mut reuse = fx.conversion(DEPENDENT, 0xD9);
    reuse.request_hash = hash(DEPENDENT as u8);
    fx.hub.assert_rejected(
        Command::PrepareConversion(reuse),
        ErrorCode::MODIFIED_REQUEST,
    );
}

#[test]
fn after_an_aborted_conversion_the_payer_may_convert_again_for_the_same_transfer() {
    let mut fx = Fx::new();
    fx.prepare_conversion();
    fx.hub.one(Command::AbortConversion(Abort {
        transfer_id: TransferId::new(CONVERSION),
        caller: fx.fxp_usd.name,
        error_code: ErrorCode(5100),
        destination: None,
        request_hash: hash(0xE1),
    }));
    let mut second = fx.conversion(0xC1, DEPENDENT);
    second.request_hash = hash(0xC1);
    assert_eq!(
        view(&fx.hub.one(Command::PrepareConversion(second))).state,
        TransferState::Reserved
    );
    fx.hub.one(Command::FulfilConversion(FulfilConversion {
        commit_request_id: TransferId::new(0xC1),
        caller: fx.fxp_usd.name,
        fulfilment: Some(secret(FXP_SECRET)),
        destination: None,
        request_hash: hash(0xA3),
    }));
    let command = fx.dependent(750_000);
    let dependent = view(&fx.hub.one(command));
    assert!(matches!(
        dependent.fx,
        Some(FxView::Dependent { commit_request_id, .. }) if commit_request_id == TransferId::new(0xC1)
    ));
    view(&fx.payee_fulfils());
    assert_eq!(
        fx.positions(),
        [(300, 0), (-300, 0), (750_000, 0), (-750_000, 0)]
    );
    fx.audit_is_clean();
}

/// A restart at each stage: the restored ledger equals the running one,
/// and finishes the payment the same way.
#[test]
fn restore_at_every_stage_loses_nothing() {
    let mut fx = Fx::new();
    let check = |fx: &Fx| {
        let snapshot = fx.hub.ledger.snapshot();
        let restored = Ledger::restore(snapshot.clone(), Limits::default()).expect("restores");
        assert_eq!(restored.snapshot(), snapshot);
        restored
    };
    check(&fx);
    fx.prepare_conversion();
    check(&fx);
    fx.fxp_accepts();
    let restored = check(&fx);
    fx.hub.ledger = restored;
    // The FXP's resend after the restart is still a duplicate.
    let command = fx.accept(fx.fxp_usd.name, FXP_SECRET, 0xA1);
    fx.hub.assert_duplicate(command);
    let command = fx.dependent(750_000);
    fx.hub.one(command);
    fx.hub.ledger = check(&fx);
    view(&fx.payee_fulfils());
    fx.hub.ledger = check(&fx);
    assert_eq!(
        fx.positions(),
        [(300, 0), (-300, 0), (750_000, 0), (-750_000, 0)]
    );
    assert_eq!(fx.conversion_state(), TransferState::Committed);
}

#[test]
fn fxp_corridors_are_declared_replaced_and_withdrawn() {
    let mut fx = Fx::new();
    let corridors = vec![
        Corridor {
            source: usd(),
            target: tzs(),
        },
        Corridor {
            source: tzs(),
            target: usd(),
        },
        Corridor {
            source: usd(),
            target: tzs(),
        },
    ];
    let name = fx.fxp_usd.name;
    assert_eq!(
        fx.hub.one(Command::SetFxpCorridors { name, corridors }),
        Outcome::Done
    );
    let Outcome::Fxps(fxps) = fx.hub.one(Command::ReadFxps) else {
        panic!()
    };
    assert_eq!(fxps.len(), 1);
    assert_eq!(fxps[0].corridors.len(), 2, "sorted, without repeats");
    let restored = Ledger::restore(fx.hub.ledger.snapshot(), Limits::default()).unwrap();
    assert_eq!(restored.snapshot().fxps, fx.hub.ledger.snapshot().fxps);
    let same = vec![Corridor {
        source: usd(),
        target: usd(),
    }];
    fx.hub.assert_rejected(
        Command::SetFxpCorridors {
            name,
            corridors: same,
        },
        ErrorCode::GENERIC_VALIDATION_ERROR,
    );
    let corridors = vec![];
    fx.hub.one(Command::SetFxpCorridors { name, corridors });
    let Outcome::Fxps(fxps) = fx.hub.one(Command::ReadFxps) else {
        panic!()
    };
    assert!(fxps.is_empty());
}

// ----- random interleavings ---------------------------------------------------

mod interleavings {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::Config;

    /// Payments in flight at once.
    const PAYMENTS: u8 = 6;

    #[derive(Clone, Debug)]
    enum Step {
        Convert(u8),
        Accept { payment: u8, right: bool },
        FxpError(u8),
        Dependent { payment: u8, amount: i64 },
        PayeeFulfil { payment: u8, right: bool },
        PayeeError(u8),
        Advance(i64),
        Restart,
    }

    fn step() -> impl Strategy<Value = Step> {
        let payment = 0..PAYMENTS;
        prop_oneof![
            3 => payment.clone().prop_map(Step::Convert),
            3 => (payment.clone(), prop::bool::weighted(0.9))
                .prop_map(|(payment, right)| Step::Accept { payment, right }),
            1 => payment.clone().prop_map(Step::FxpError),
            3 => (payment.clone(), prop_oneof![Just(100_000), Just(200_000), Just(200_001)])
                .prop_map(|(payment, amount)| Step::Dependent { payment, amount }),
            3 => (payment.clone(), prop::bool::weighted(0.9))
                .prop_map(|(payment, right)| Step::PayeeFulfil { payment, right }),
            1 => payment.prop_map(Step::PayeeError),
            2 => (1_000i64..40_000).prop_map(Step::Advance),
            1 => Just(Step::Restart),
        ]
    }

    fn conversion_id(payment: u8) -> TransferId {
        TransferId::new(0xC000 + u128::from(payment))
    }

    fn dependent_id(payment: u8) -> TransferId {
        TransferId::new(0xD000 + u128::from(payment))
    }

    fn command(fx: &Fx, step: &Step) -> Option<Command> {
        Some(match *step {
            Step::Convert(p) => {
                let mut conversion = fx.conversion(0xC000 + u128::from(p), 0xD000 + u128::from(p));
                conversion.source_amount = whole(80);
                conversion.terms.target_amount = whole(200_000);
                conversion.expiration_ms = fx.hub.now + 50_000;
                Command::PrepareConversion(conversion)
            }
            Step::Accept { payment, right } => Command::FulfilConversion(FulfilConversion {
                commit_request_id: conversion_id(payment),
                caller: fx.fxp_usd.name,
                fulfilment: Some(secret(if right { FXP_SECRET } else { 1 })),
                destination: None,
                request_hash: hash(0xA0 + payment),
            }),
            Step::FxpError(p) => Command::AbortConversion(Abort {
                transfer_id: conversion_id(p),
                caller: fx.fxp_usd.name,
                error_code: ErrorCode(5100),
                destination: None,
                request_hash: hash(0xE0 + p),
            }),
            Step::Dependent { payment, amount } => prepare_full(
                dependent_id(payment).bits(),
                fx.payer.name,
                fx.payee.name,
                whole(amount),
                tzs(),
                0xD0 + payment,
                fx.hub.now + 30_000,
                hash(0xD0 + payment),
            ),
            Step::PayeeFulfil { payment, right } => Command::Fulfil(Fulfil {
                transfer_id: dependent_id(payment),
                caller: fx.payee.name,
                fulfilment: Some(secret(if right { 0xD0 + payment } else { 2 })),
                destination: None,
                request_hash: hash(0xF0 + payment),
            }),
            Step::PayeeError(p) => Command::Abort(Abort {
                transfer_id: dependent_id(p),
                caller: fx.payee.name,
                error_code: ErrorCode(5104),
                destination: None,
                request_hash: hash(0xB0 + p),
            }),
            Step::Advance(_) | Step::Restart => return None,
        })
    }

    /// The state of a transfer or conversion, from the ledger's snapshot
    /// rows (not its views).
    fn states(
        snapshot: &Snapshot,
    ) -> std::collections::HashMap<TransferId, (TransferRow, TransferState)> {
        snapshot
            .transfers
            .iter()
            .map(|row| {
                let state = snapshot
                    .finishes
                    .iter()
                    .find(|finish| finish.seq == row.seq)
                    .map_or(row.state, |finish| finish.state);
                (row.transfer_id, (row.clone(), state))
            })
            .collect()
    }

    /// Positions recomputed from the rows alone: committed pairs move, the
    /// reserved hold, and nothing else.
    fn check(fx: &Fx) {
        assert_eq!(fx.hub.ledger.check_balances(), Ok(()));
        let snapshot = fx.hub.ledger.snapshot();
        assert!(snapshot.audit().is_empty(), "{:?}", snapshot.audit());
        let states = states(&snapshot);
        let mut expected = [(0i64, 0i64); 4];
        for payment in 0..PAYMENTS {
            let conversion = states.get(&conversion_id(payment));
            let dependent = states.get(&dependent_id(payment));
            if let Some((row, _)) = dependent {
                assert!(matches!(row.fx, Some(FxLink::Dependent { .. })), "{row:?}");
            }
            let units = |row: &TransferRow| super::units(row.amount);
            match (conversion, dependent) {
                (Some((c, TransferState::Committed)), Some((d, TransferState::Committed))) => {
                    expected[0].0 += units(c);
                    expected[1].0 -= units(c);
                    expected[2].0 += units(d);
                    expected[3].0 -= units(d);
                }
                (Some((_, TransferState::Committed)), other)
                | (other, Some((_, TransferState::Committed))) => {
                    panic!("payment {payment} committed on one side only: {other:?}")
                }
                (conversion, dependent) => {
                    if let Some((c, TransferState::Reserved)) = conversion {
                        expected[0].1 += units(c);
                    }
                    if let Some((d, TransferState::Reserved)) = dependent {
                        expected[2].1 += units(d);
                        let conversion_state = conversion.map(|(_, state)| *state);
                        assert_eq!(
                            conversion_state,
                            Some(TransferState::Reserved),
                            "a reserved dependent transfer's conversion is reserved"
                        );
                    }
                }
            }
        }
        assert_eq!(fx.positions(), expected);
    }

    fn run(steps: Vec<Step>) {
        let mut fx = Fx::new();
        for step in &steps {
            match step {
                Step::Advance(ms) => {
                    fx.hub.advance(*ms);
                    fx.hub.one(Command::Expire);
                }
                Step::Restart => {
                    let snapshot = fx.hub.ledger.snapshot();
                    fx.hub.ledger =
                        Ledger::restore(snapshot.clone(), Limits::default()).expect("restores");
                    assert_eq!(fx.hub.ledger.snapshot(), snapshot);
                }
                step => {
                    let command = command(&fx, step).expect("a command");
                    fx.hub.one(command);
                }
            }
            check(&fx);
        }
        // Every conversion and transfer ends; no hold is left behind.
        fx.hub.advance(120_000);
        fx.hub.one(Command::Expire);
        check(&fx);
        for dfsp in [fx.payer, fx.fxp_usd, fx.fxp_tzs, fx.payee] {
            assert_eq!(fx.hub.balance(dfsp.position).1, Amount::ZERO);
        }
        assert_eq!(fx.hub.ledger.next_expiry_ms(), None);
    }

    proptest! {
        #![proptest_config(Config {
            cases: std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|cases| cases.parse().ok())
                .unwrap_or(128),
            failure_persistence: None,
            ..Config::default()
        })]

        #[test]
        fn conversions_and_their_transfers_never_end_apart(
            steps in prop::collection::vec(step(), 1..60)
        ) {
            run(steps);
        }
    }
}

// ----- settlement -------------------------------------------------------------

mod settlement {
    use super::*;

    fn model(name: &str, granularity: Granularity, delay: Delay) -> Command {
        Command::CreateSettlementModel {
            name: name.into(),
            definition: "{}".into(),
            rules: Some(ModelRules {
                granularity,
                interchange: match granularity {
                    Granularity::Net => Interchange::Multilateral,
                    _ => Interchange::Bilateral,
                },
                delay,
                currency: None,
                ledger_account_type: AccountKind::Position,
                settlement_account_type: AccountKind::Settlement,
                auto_position_reset: true,
                require_liquidity_check: false,
            }),
        }
    }

    fn pay(fx: &mut Fx) {
        fx.prepare_conversion();
        fx.fxp_accepts();
        let command = fx.dependent(750_000);
        fx.hub.one(command);
        view(&fx.payee_fulfils());
    }

    /// The FXP's nets appear per currency: owed USD, owing TZS; no
    /// cross-currency netting.
    #[test]
    fn a_window_with_a_conversion_settles_the_fxp_in_both_currencies() {
        let mut fx = Fx::new();
        assert_eq!(
            fx.hub.one(model(
                "DEFAULTDEFERREDNET",
                Granularity::Net,
                Delay::Deferred
            )),
            Outcome::Done
        );
        pay(&mut fx);
        let Outcome::Window(_) = fx.hub.one(Command::CloseSettlementWindow {
            id: 1,
            reason: "end of day".into(),
        }) else {
            panic!("close")
        };
        let Outcome::Settlement(settlement) = fx.hub.one(Command::CreateSettlement {
            model: "DEFAULTDEFERREDNET".into(),
            reason: "r".into(),
            windows: vec![1],
        }) else {
            panic!("settle")
        };
        let net_of = |account: AccountId| {
            settlement
                .row
                .accounts
                .iter()
                .find(|a| a.account == account)
                .map(|a| units(a.net))
        };
        assert_eq!(net_of(fx.payer.position), Some(300));
        assert_eq!(net_of(fx.fxp_usd.position), Some(-300));
        assert_eq!(net_of(fx.fxp_tzs.position), Some(750_000));
        assert_eq!(net_of(fx.payee.position), Some(-750_000));
        let Outcome::SettlementReport(report) = fx.hub.one(Command::ReadSettlementReport {
            settlement: settlement.row.id,
        }) else {
            panic!("report")
        };
        let text = format!("{report:?}");
        assert!(text.contains("TZS") && text.contains("USD"), "{text}");
        fx.audit_is_clean();
    }

    /// Gross settlement: each commit of the pair moves liquidity at once,
    /// in each currency.
    #[test]
    fn gross_settlement_settles_both_legs_at_the_commit() {
        let mut fx = Fx::new();
        fx.hub
            .one(model("CGS", Granularity::Gross, Delay::Immediate));
        pay(&mut fx);
        assert_eq!(fx.positions(), [(0, 0); 4], "positions settled at once");
        let liquidity = |dfsp: Dfsp| units(fx.hub.balance(dfsp.settlement).0);
        assert_eq!(liquidity(fx.payer), -1_000 + 300);
        assert_eq!(liquidity(fx.fxp_usd), -300);
        assert_eq!(liquidity(fx.fxp_tzs), -1_000_000 + 750_000);
        assert_eq!(liquidity(fx.payee), -750_000);
        fx.audit_is_clean();
    }
}

// ----- past the retention horizon ------------------------------------------

#[test]
fn a_finished_payment_leaves_memory_and_the_store_answers_for_both_legs() {
    let mut fx = Fx::new();
    let limits = Limits {
        transfer_retention_ms: Some(10_000),
        ..Limits::default()
    };
    fx.hub.ledger = Ledger::restore(fx.hub.ledger.snapshot(), limits).expect("restore");
    fx.prepare_conversion();
    fx.fxp_accepts();
    let command = fx.dependent(750_000);
    fx.hub.one(command);
    view(&fx.payee_fulfils());
    fx.hub.advance(10_000);
    let durable = fx.hub.ledger.batches_applied();
    assert_eq!(fx.hub.ledger.evict(fx.hub.now, durable, usize::MAX), 2);
    assert!(!fx.hub.ledger.holds_transfer(TransferId::new(CONVERSION)));

    // The FXP's resend of its acceptance, and the payer's of its
    // conversion: duplicates, answered from the store's copies.
    let command = fx.accept(fx.fxp_usd.name, FXP_SECRET, 0xA1);
    let resent = fx.hub.assert_duplicate(command);
    assert_eq!(resent.state, TransferState::Committed);
    assert_eq!(resent.fulfilment, Some(secret(FXP_SECRET)));
    let again = Command::PrepareConversion(fx.conversion(CONVERSION, DEPENDENT));
    fx.hub.assert_duplicate(again);
    // The dependent transfer's resend too; its payer is the initiating
    // DFSP, not the FXP that paid it.
    let command = fx.dependent(750_000);
    let transfer = fx.hub.assert_duplicate(command);
    assert_eq!(transfer.payer, fx.payer.name);
    // A modified acceptance is 3106; a GET by the payee is refused.
    let command = fx.accept(fx.fxp_usd.name, FXP_SECRET, 0xA9);
    fx.hub.assert_rejected(command, ErrorCode::MODIFIED_REQUEST);
    assert_eq!(fx.conversion_state(), TransferState::Committed);
    let command = Command::GetConversion {
        commit_request_id: TransferId::new(CONVERSION),
        caller: fx.payee.name,
    };
    fx.hub
        .assert_rejected(command, ErrorCode::GENERIC_CLIENT_ERROR);
    // A new conversion for the same (finished) transfer is refused.
    let mut late = fx.conversion(0xC9, DEPENDENT);
    late.request_hash = hash(0xC9);
    fx.hub.assert_rejected(
        Command::PrepareConversion(late),
        ErrorCode::GENERIC_VALIDATION_ERROR,
    );
    // (Memory's snapshot lacks what left; the store's audit sums it.)
    assert_eq!(fx.hub.ledger.check_balances(), Ok(()));
}

/// Pausing a DFSP (`modes.rs`) applies to every new leg: the initiator
/// pays the FXP in the source currency, the FXP pays the payee in the
/// target currency. Legs prepared before a pause complete.
#[test]
fn a_pause_refuses_new_conversions_and_their_transfers_but_not_those_in_flight() {
    let set = |fx: &mut Fx, dfsp: Dfsp, mode: ParticipantMode| {
        let command = Command::SetParticipantMode {
            name: dfsp.name,
            mode,
        };
        assert_eq!(fx.hub.one(command), Outcome::Done);
    };
    // (who, mode, why a new conversion is refused)
    let pauses = |fx: &Fx| {
        [
            (
                fx.payer,
                ParticipantMode::ReceiveOnly,
                PauseRefusal::PayerMayNotSend,
            ),
            (
                fx.fxp_usd,
                ParticipantMode::SendOnly,
                PauseRefusal::PayeeMayNotReceive,
            ),
            // It could never pay the payee in the target currency.
            (
                fx.fxp_usd,
                ParticipantMode::ReceiveOnly,
                PauseRefusal::PayerMayNotSend,
            ),
        ]
    };
    for index in 0..3 {
        let mut fx = Fx::new();
        let (who, mode, reason) = pauses(&fx)[index];
        set(&mut fx, who, mode);
        let command = Command::PrepareConversion(fx.conversion(CONVERSION, DEPENDENT));
        let refusal = fx.hub.assert_rejected(command, ErrorCode(3100));
        assert_eq!(refusal.paused, Some(reason), "{who:?} {mode:?}");
        assert_eq!(fx.positions(), [(0, 0); 4]);
    }

    // Accepted before the payee was suspended: the transfer it determines
    // is a new prepare, refused; the conversion waits for its expiry.
    let mut fx = Fx::new();
    fx.prepare_conversion();
    fx.fxp_accepts();
    let payee = fx.payee;
    set(&mut fx, payee, ParticipantMode::Suspended);
    let refusal = fx
        .hub
        .assert_rejected(fx.dependent(750_000), ErrorCode(3100));
    assert_eq!(refusal.paused, Some(PauseRefusal::PayeeMayNotReceive));
    assert_eq!(fx.conversion_state(), TransferState::Reserved);
    fx.hub.advance(TTL);
    fx.hub.one(Command::Expire);
    assert_eq!(fx.conversion_state(), TransferState::Expired);
    assert_eq!(fx.positions(), [(0, 0); 4]);
    fx.audit_is_clean();

    // Both legs prepared, then all three suspended: the payee's fulfil
    // still commits both, every position as without the pause.
    let mut fx = Fx::new();
    fx.prepare_conversion();
    fx.fxp_accepts();
    let command = fx.dependent(750_000);
    fx.hub.one(command);
    for dfsp in [fx.payer, fx.fxp_usd, fx.payee] {
        set(&mut fx, dfsp, ParticipantMode::Suspended);
    }
    assert_eq!(view(&fx.payee_fulfils()).state, TransferState::Committed);
    assert_eq!(
        fx.positions(),
        [(300, 0), (-300, 0), (750_000, 0), (-750_000, 0)]
    );
    assert_eq!(fx.conversion_state(), TransferState::Committed);
    fx.audit_is_clean();
}
