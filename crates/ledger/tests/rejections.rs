//! One test per refusal the ledger can give, each checking the FSPIOP error
//! code and that nothing changed that should not have; plus the happy paths
//! the refusals are measured against.

mod common;

use common::*;
use ledger::*;

const NONE: Amount = Amount::ZERO;

/// A USD hub with a payer and a payee, each with 1000 deposited and a cap of 500.
fn two() -> (Hub, Dfsp, Dfsp) {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 500);
    let payee = hub.dfsp("payeefsp", 1000, 500);
    (hub, payer, payee)
}

fn bal(value: i64, reserved: i64) -> (Amount, Amount) {
    (whole(value), whole(reserved))
}

fn assert_audited(hub: &Hub) {
    hub.ledger.check_balances().expect("balances");
    let problems = hub.ledger.snapshot().audit();
    assert!(problems.is_empty(), "audit: {problems:?}");
}

// ----- happy paths -----------------------------------------------------------

#[test]
fn prepare_reserves_and_fulfil_commits() {
    let (mut hub, payer, payee) = two();
    let expiration = hub.now + TTL;
    let reserved = view(&hub.one(prepare(1, payer, payee, 100, expiration)));
    assert_eq!(reserved.transfer_id, TransferId::new(1));
    assert_eq!(reserved.kind, TransferKind::Fspiop);
    assert_eq!(reserved.state, TransferState::Reserved);
    assert_eq!(reserved.state.fspiop(), "RESERVED");
    assert_eq!((reserved.payer, reserved.payee), (payer.name, payee.name));
    assert_eq!(reserved.amount, whole(100));
    assert_eq!(reserved.currency, usd());
    assert_eq!(reserved.reason, None);
    assert_eq!(reserved.expiration_ms, expiration);
    assert_eq!(reserved.prepared_at_ms, hub.now);
    assert_eq!(reserved.completed_at_ms, None);
    assert_eq!(hub.balance(payer.position), bal(0, 100));
    assert_eq!(hub.balance(payee.position), bal(0, 0));
    assert_eq!(hub.ledger.next_expiry_ms(), Some(expiration));

    hub.advance(1_000);
    let committed = view(&hub.one(fulfil(1, payee.name)));
    assert_eq!(committed.state, TransferState::Committed);
    assert_eq!(committed.reason, None);
    assert_eq!(committed.fulfilment, Some(secret(1)));
    assert_eq!(committed.completed_at_ms, Some(hub.now));
    assert_eq!(hub.balance(payer.position), bal(100, 0));
    assert_eq!(hub.balance(payee.position), bal(-100, 0));
    // Settlement accounts are untouched by transfers.
    assert_eq!(hub.balance(payer.settlement), bal(-1000, 0));
    assert_eq!(hub.balance(payee.settlement), bal(-1000, 0));
    assert_eq!(hub.ledger.next_expiry_ms(), None);
    assert_eq!(
        hub.state(TransferId::new(1), payer.name),
        TransferState::Committed
    );
    assert_eq!(
        hub.state(TransferId::new(1), payee.name),
        TransferState::Committed
    );
    assert_audited(&hub);
}

#[test]
fn abort_by_payee_aborts_with_the_payees_error_code() {
    let (mut hub, payer, payee) = two();
    hub.one(prepare(1, payer, payee, 100, hub.now + TTL));
    hub.advance(10);
    let aborted = view(&hub.one(abort(1, payee.name, 5104, hash(0xA1))));
    assert_eq!(aborted.state, TransferState::Aborted);
    assert_eq!(aborted.state.fspiop(), "ABORTED");
    assert_eq!(aborted.reason, Some(ErrorCode(5104)));
    assert_eq!(aborted.completed_at_ms, Some(hub.now));
    assert_eq!(hub.balance(payer.position), bal(0, 0));
    assert_eq!(hub.balance(payee.position), bal(0, 0));
    assert_eq!(hub.ledger.next_expiry_ms(), None);
    assert_audited(&hub);
}

// ----- position checks (4001, 4200) ------------------------------------------

#[test]
fn prepare_over_liquidity_cover_fails_with_4001() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 100, 1000);
    let payee = hub.dfsp("payeefsp", 0, 0);
    let exp = hub.now + TTL;
    view(&hub.one(prepare(1, payer, payee, 30, exp)));
    // available liquidity = -settlement - (position + reserved) = 100 - 30 = 70.
    let result = hub.batch(&[prepare(2, payer, payee, 71, exp)]);
    let (transfer, code) = failed(&result.outcomes[0]);
    assert_eq!(code, ErrorCode::PAYER_FSP_INSUFFICIENT_LIQUIDITY);
    assert_eq!(result.outcomes[0].error_code(), Some(ErrorCode(4001)));
    assert_eq!(transfer.state, TransferState::Rejected);
    assert_eq!(transfer.state.fspiop(), "ABORTED");
    assert_eq!(transfer.reason, Some(ErrorCode(4001)));
    assert_eq!(transfer.completed_at_ms, Some(hub.now));
    // The refusal is recorded, but no balance moved.
    assert!(result
        .records
        .iter()
        .all(|record| !matches!(record, Record::Account(_))));
    assert_eq!(hub.balance(payer.position), bal(0, 30));
    assert_eq!(hub.balance(payer.settlement), bal(-100, 0));
    assert_eq!(hub.balance(payee.position), bal(0, 0));
    assert_eq!(
        hub.state(TransferId::new(2), payer.name),
        TransferState::Rejected
    );
    assert_eq!(hub.ledger.next_expiry_ms(), Some(exp));

    // Exactly the available liquidity is accepted; then nothing more is.
    view(&hub.one(prepare(3, payer, payee, 70, exp)));
    assert_eq!(hub.balance(payer.position), bal(0, 100));
    let tiny = prepare_full(
        4,
        payer.name,
        payee.name,
        Amount::from_units(1),
        usd(),
        4,
        exp,
        hash(4),
    );
    let (_, code) = failed(&hub.one(tiny));
    assert_eq!(code, ErrorCode(4001));
    assert_eq!(hub.balance(payer.position), bal(0, 100));
    assert_audited(&hub);
}

#[test]
fn committed_position_counts_against_liquidity() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 100, 1000);
    let payee = hub.dfsp("payeefsp", 0, 0);
    let exp = hub.now + TTL;
    hub.one(prepare(1, payer, payee, 60, exp));
    view(&hub.one(fulfil(1, payee.name)));
    assert_eq!(hub.balance(payer.position), bal(60, 0));
    let (_, code) = failed(&hub.one(prepare(2, payer, payee, 41, exp)));
    assert_eq!(code, ErrorCode(4001));
    view(&hub.one(prepare(3, payer, payee, 40, exp)));
}

#[test]
fn prepare_over_net_debit_cap_fails_with_4200() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 100);
    let payee = hub.dfsp("payeefsp", 1000, 0);
    let exp = hub.now + TTL;
    hub.one(prepare(1, payer, payee, 40, exp));
    view(&hub.one(fulfil(1, payee.name)));
    view(&hub.one(prepare(2, payer, payee, 20, exp)));
    // available limit = cap - (position + reserved) = 100 - (40 + 20) = 40.
    assert_eq!(hub.balance(payer.position), bal(40, 20));
    let before = hub.ledger.snapshot().accounts;
    let (transfer, code) = failed(&hub.one(prepare(3, payer, payee, 41, exp)));
    assert_eq!(code, ErrorCode::PAYER_LIMIT_ERROR);
    assert_eq!(transfer.state, TransferState::Rejected);
    assert_eq!(transfer.reason, Some(ErrorCode(4200)));
    assert_eq!(hub.ledger.snapshot().accounts, before);

    view(&hub.one(prepare(4, payer, payee, 40, exp)));
    assert_eq!(hub.balance(payer.position), bal(40, 60));
    let (_, code) = failed(&hub.one(prepare(5, payer, payee, 1, exp)));
    assert_eq!(code, ErrorCode(4200));

    // The payee received 40: its negative position is headroom under a cap of 0.
    assert_eq!(hub.balance(payee.position), bal(-40, 0));
    let (_, code) = failed(&hub.one(prepare(6, payee, payer, 41, exp)));
    assert_eq!(code, ErrorCode(4200));
    view(&hub.one(prepare(7, payee, payer, 40, exp)));
    assert_audited(&hub);
}

#[test]
fn raising_the_cap_makes_room_and_lowering_it_takes_it_away() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 100);
    let payee = hub.dfsp("payeefsp", 0, 0);
    let exp = hub.now + TTL;
    let (_, code) = failed(&hub.one(prepare(1, payer, payee, 150, exp)));
    assert_eq!(code, ErrorCode(4200));
    let set_cap = |cap| Command::SetNetDebitCap {
        name: payer.name,
        currency: usd(),
        net_debit_cap: whole(cap),
    };
    assert_eq!(hub.one(set_cap(200)), Outcome::Done);
    view(&hub.one(prepare(2, payer, payee, 150, exp)));
    assert_eq!(hub.one(set_cap(100)), Outcome::Done);
    let (_, code) = failed(&hub.one(prepare(3, payer, payee, 1, exp)));
    assert_eq!(code, ErrorCode(4200));
    // A second InitNetDebitCap is refused (3000) and changes nothing.
    hub.assert_rejected(
        Command::InitNetDebitCap {
            name: payer.name,
            currency: usd(),
            net_debit_cap: whole(5000),
        },
        ErrorCode::GENERIC_CLIENT_ERROR,
    );
}

#[test]
fn a_dfsp_without_a_cap_has_no_headroom() {
    let mut hub = Hub::usd();
    let payee = hub.dfsp("payeefsp", 0, 0);
    let name = fsp("nocapfsp");
    let Outcome::AccountsCreated(ids) = hub.one(Command::CreateParticipant {
        name,
        currency: usd(),
    }) else {
        panic!("not created");
    };
    let payer = Dfsp {
        name,
        currency: usd(),
        position: ids[0],
        settlement: ids[1],
    };
    let id = hub.fresh_id();
    view(&hub.one(funds_in(id, payer, whole(1000), hash(9))));
    let (_, code) = failed(&hub.one(prepare(1, payer, payee, 1, hub.now + TTL)));
    assert_eq!(code, ErrorCode(4200));
    assert_eq!(hub.balance(payer.position), bal(0, 0));
}

#[test]
fn liquidity_is_checked_before_the_cap() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 100, 50);
    let payee = hub.dfsp("payeefsp", 0, 0);
    let (_, code) = failed(&hub.one(prepare(1, payer, payee, 101, hub.now + TTL)));
    assert_eq!(code, ErrorCode(4001));
    let (_, code) = failed(&hub.one(prepare(2, payer, payee, 51, hub.now + TTL)));
    assert_eq!(code, ErrorCode(4200));
}

#[test]
fn the_largest_amount_is_valid_but_fails_the_position_check() {
    let (mut hub, payer, payee) = two();
    let command = prepare_full(
        1,
        payer.name,
        payee.name,
        Amount::MAX_TRANSFER,
        usd(),
        1,
        hub.now + TTL,
        hash(1),
    );
    let (_, code) = failed(&hub.one(command));
    assert_eq!(code, ErrorCode(4001));
    assert_audited(&hub);
}

#[test]
fn funds_out_holds_reduce_liquidity_cover() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 100, 1000);
    let payee = hub.dfsp("payeefsp", 0, 0);
    let id = hub.fresh_id();
    view(&hub.one(funds_out(id, payer, whole(60), hash(7))));
    let (_, code) = failed(&hub.one(prepare(1, payer, payee, 41, hub.now + TTL)));
    assert_eq!(code, ErrorCode(4001));
    view(&hub.one(prepare(2, payer, payee, 40, hub.now + TTL)));
}

// ----- the batch rule --------------------------------------------------------

#[test]
fn reservations_in_one_batch_shrink_the_cap_for_the_next() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 100);
    let payee = hub.dfsp("payeefsp", 0, 0);
    let exp = hub.now + TTL;
    let outcomes = hub.apply(&[
        prepare(1, payer, payee, 60, exp),
        prepare(2, payer, payee, 60, exp),
        prepare(3, payer, payee, 40, exp),
        prepare(4, payer, payee, 1, exp),
    ]);
    assert_eq!(view(&outcomes[0]).state, TransferState::Reserved);
    let (transfer, code) = failed(&outcomes[1]);
    assert_eq!(
        (transfer.state, code),
        (TransferState::Rejected, ErrorCode(4200))
    );
    assert_eq!(view(&outcomes[2]).state, TransferState::Reserved);
    assert_eq!(failed(&outcomes[3]).1, ErrorCode(4200));
    assert_eq!(hub.balance(payer.position), bal(0, 100));
    assert_audited(&hub);
}

#[test]
fn reservations_in_one_batch_shrink_the_liquidity_for_the_next() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 100, 1000);
    let payee = hub.dfsp("payeefsp", 0, 0);
    let exp = hub.now + TTL;
    let outcomes = hub.apply(&[
        prepare(1, payer, payee, 70, exp),
        prepare(2, payer, payee, 70, exp),
    ]);
    assert_eq!(view(&outcomes[0]).state, TransferState::Reserved);
    assert_eq!(failed(&outcomes[1]).1, ErrorCode(4001));
    assert_eq!(hub.balance(payer.position), bal(0, 70));
}

#[test]
fn commands_in_a_batch_apply_in_order() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 100);
    let payee = hub.dfsp("payeefsp", 0, 0);
    let exp = hub.now + TTL;
    // An abort before a prepare frees headroom for it; one after does not.
    let outcomes = hub.apply(&[
        prepare(1, payer, payee, 60, exp),
        abort(1, payee.name, 5100, hash(0xA1)),
        prepare(2, payer, payee, 60, exp),
        prepare(3, payer, payee, 60, exp),
        abort(2, payee.name, 5100, hash(0xA2)),
    ]);
    assert_eq!(view(&outcomes[1]).state, TransferState::Aborted);
    assert_eq!(view(&outcomes[2]).state, TransferState::Reserved);
    assert_eq!(failed(&outcomes[3]).1, ErrorCode(4200));
    assert_eq!(view(&outcomes[4]).state, TransferState::Aborted);
    assert_eq!(hub.balance(payer.position), bal(0, 0));
}

// ----- fulfilment -----------------------------------------------------------

#[test]
fn wrong_fulfilment_aborts_with_3100() {
    let (mut hub, payer, payee) = two();
    hub.one(prepare(1, payer, payee, 100, hub.now + TTL));
    let wrong = fulfil_with(1, payee.name, secret(99), hash(0xB1));
    let (transfer, code) = failed(&hub.one(wrong.clone()));
    assert_eq!(code, ErrorCode::GENERIC_VALIDATION_ERROR);
    assert_eq!(transfer.state, TransferState::Aborted);
    assert_eq!(transfer.reason, Some(ErrorCode(3100)));
    assert_eq!(transfer.cause, Some(AbortCause::InvalidFulfilment));
    assert_eq!(transfer.fulfilment, None);
    assert_eq!(hub.balance(payer.position), bal(0, 0));
    assert_eq!(hub.balance(payee.position), bal(0, 0));
    assert_eq!(hub.ledger.next_expiry_ms(), None);
    // The same wrong fulfil again is a duplicate; the right one now is a
    // modified fulfil of a finished transfer.
    let again = hub.assert_duplicate(wrong);
    assert_eq!(again.state, TransferState::Aborted);
    hub.assert_rejected(fulfil(1, payee.name), ErrorCode::MODIFIED_REQUEST);
    assert_eq!(
        hub.state(TransferId::new(1), payer.name),
        TransferState::Aborted
    );
    assert_audited(&hub);
}

/// A fulfil or abort from the payee, addressed (`FSPIOP-Destination`) to
/// `destination`.
fn addressed(command: Command, destination: FspName) -> Command {
    match command {
        Command::Fulfil(fulfil) => Command::Fulfil(Fulfil {
            destination: Some(destination),
            ..fulfil
        }),
        Command::Abort(abort) => Command::Abort(Abort {
            destination: Some(destination),
            ..abort
        }),
        other => other,
    }
}

#[test]
fn fulfil_or_abort_addressed_to_another_than_the_payer_aborts_with_3100() {
    // central-ledger's ABORT_VALIDATION: the payee's message names another
    // destination than the payer, so the transfer ends rather than commit
    // with the payer never told.
    let (mut hub, payer, payee) = two();
    let other = hub.dfsp("otherfsp", 1000, 500);
    for (id, command) in [
        (1, fulfil(1, payee.name)),
        (2, abort(2, payee.name, 5100, hash(0xA2))),
    ] {
        hub.one(prepare(id, payer, payee, 100, hub.now + TTL));
        let misaddressed = addressed(command, other.name);
        let outcome = hub.one(misaddressed.clone());
        let Outcome::Failed { transfer, error } = &outcome else {
            panic!("transfer {id}: {outcome:?}");
        };
        assert_eq!(error.code, ErrorCode(3100));
        assert_eq!(
            error.description,
            "fspiop-destination does not match payer fsp on the Fulfil callback response"
        );
        assert_eq!(transfer.state, TransferState::Aborted);
        assert_eq!(
            transfer.reason,
            Some(ErrorCode(3100)),
            "not the payee's code"
        );
        assert_eq!(transfer.cause, Some(AbortCause::DestinationNotPayer));
        assert_eq!(transfer.fulfilment, None);
        // The payer's hold is released; nothing was posted.
        assert_eq!(hub.balance(payer.position), bal(0, 0));
        assert_eq!(hub.balance(payee.position), bal(0, 0));
        // A resend of the same message gets the state it left.
        let again = hub.assert_duplicate(misaddressed);
        assert_eq!(again.cause, Some(AbortCause::DestinationNotPayer));
    }
    // A fulfil addressed to the payer (or to nobody) still commits.
    hub.one(prepare(3, payer, payee, 100, hub.now + TTL));
    let committed = view(&hub.one(addressed(fulfil(3, payee.name), payer.name)));
    assert_eq!(committed.state, TransferState::Committed);
    assert_eq!(committed.cause, None);
    assert_eq!(hub.balance(payer.position), bal(100, 0));
    // The cause survives a restart from the store's rows.
    let restored = Ledger::restore(hub.ledger.snapshot(), hub.ledger.limits()).expect("restore");
    hub.ledger = restored;
    for (id, cause) in [
        (1, Some(AbortCause::DestinationNotPayer)),
        (2, Some(AbortCause::DestinationNotPayer)),
        (3, None),
    ] {
        let outcome = hub.one(Command::GetTransfer {
            transfer_id: TransferId::new(id),
            caller: payer.name,
        });
        assert_eq!(view(&outcome).cause, cause, "transfer {id}");
    }
    assert_audited(&hub);
}

#[test]
fn a_source_that_is_not_the_payee_is_refused_whatever_its_destination() {
    // kasi's stricter rule: a third DFSP cannot end anyone's transfer.
    let (mut hub, payer, payee) = two();
    let other = hub.dfsp("otherfsp", 1000, 500);
    hub.one(prepare(1, payer, payee, 100, hub.now + TTL));
    hub.assert_rejected(
        addressed(fulfil(1, other.name), other.name),
        ErrorCode(3100),
    );
    hub.assert_rejected(
        addressed(abort(1, other.name, 5100, hash(3)), payee.name),
        ErrorCode(3100),
    );
    assert_eq!(hub.balance(payer.position), bal(0, 100));
}

#[test]
fn fulfil_by_anyone_but_the_payee_is_refused_with_3100() {
    let (mut hub, payer, payee) = two();
    let other = hub.dfsp("otherfsp", 1000, 500);
    hub.one(prepare(1, payer, payee, 100, hub.now + TTL));
    hub.assert_rejected(fulfil(1, other.name), ErrorCode(3100));
    hub.assert_rejected(fulfil(1, payer.name), ErrorCode(3100));
    hub.assert_rejected(fulfil(1, fsp("nobody")), ErrorCode(3100));
    hub.assert_rejected(abort(1, other.name, 5100, hash(3)), ErrorCode(3100));
    hub.assert_rejected(abort(1, payer.name, 5100, hash(3)), ErrorCode(3100));
    assert_eq!(
        hub.state(TransferId::new(1), payer.name),
        TransferState::Reserved
    );
    assert_eq!(hub.balance(payer.position), bal(0, 100));
    // The real payee can still fulfil it.
    assert_eq!(
        view(&hub.one(fulfil(1, payee.name))).state,
        TransferState::Committed
    );
}

#[test]
fn fulfil_or_abort_of_an_unknown_transfer_is_3208() {
    let (mut hub, _, payee) = two();
    hub.assert_rejected(fulfil(42, payee.name), ErrorCode::TRANSFER_ID_NOT_FOUND);
    hub.assert_rejected(abort(42, payee.name, 5100, hash(1)), ErrorCode(3208));
}

#[test]
fn fulfil_of_a_funds_movement_is_3100() {
    let (mut hub, payer, _) = two();
    let id = hub.fresh_id();
    view(&hub.one(funds_out(id, payer, whole(10), hash(5))));
    hub.assert_rejected(
        fulfil_with(id.bits(), fsp("Hub"), secret(1), hash(6)),
        ErrorCode(3100),
    );
}

#[test]
fn finishing_a_finished_transfer_is_3100() {
    let (mut hub, payer, payee) = two();
    let exp = hub.now + TTL;
    hub.one(prepare(1, payer, payee, 10, exp));
    hub.one(fulfil(1, payee.name));
    hub.assert_rejected(abort(1, payee.name, 5100, hash(1)), ErrorCode(3100));

    hub.one(prepare(2, payer, payee, 10, exp));
    hub.one(abort(2, payee.name, 5100, hash(2)));
    hub.assert_rejected(fulfil(2, payee.name), ErrorCode(3100));

    // A prepare refused by the position check is final too.
    let (_, code) = failed(&hub.one(prepare(3, payer, payee, 5000, exp)));
    assert_eq!(code, ErrorCode(4001));
    hub.assert_rejected(fulfil(3, payee.name), ErrorCode(3100));
    hub.assert_rejected(abort(3, payee.name, 5100, hash(3)), ErrorCode(3100));
    assert_eq!(hub.balance(payer.position), bal(10, 0));
    assert_eq!(hub.balance(payee.position), bal(-10, 0));
}

#[test]
fn abort_with_an_invalid_error_code_is_3100() {
    let (mut hub, payer, payee) = two();
    hub.one(prepare(1, payer, payee, 10, hub.now + TTL));
    hub.assert_rejected(abort(1, payee.name, 999, hash(1)), ErrorCode(3100));
    hub.assert_rejected(abort(1, payee.name, 6000, hash(1)), ErrorCode(3100));
    assert_eq!(
        hub.state(TransferId::new(1), payer.name),
        TransferState::Reserved
    );
}

// ----- duplicates (3106) ------------------------------------------------------

#[test]
fn modified_duplicate_prepare_is_3106() {
    let (mut hub, payer, payee) = two();
    let exp = hub.now + TTL;
    hub.one(prepare(1, payer, payee, 100, exp));
    let modified = prepare_full(
        1,
        payer.name,
        payee.name,
        whole(101),
        usd(),
        1,
        exp,
        hash(0xEE),
    );
    hub.assert_rejected(modified.clone(), ErrorCode::MODIFIED_REQUEST);
    hub.one(fulfil(1, payee.name));
    hub.assert_rejected(modified, ErrorCode(3106));
    assert_eq!(hub.balance(payer.position), bal(100, 0));
}

#[test]
fn modified_duplicate_fulfil_is_3106() {
    let (mut hub, payer, payee) = two();
    hub.one(prepare(1, payer, payee, 100, hub.now + TTL));
    hub.one(fulfil(1, payee.name));
    let modified = fulfil_with(1, payee.name, secret(1), hash(0xEF));
    hub.assert_rejected(modified, ErrorCode::MODIFIED_REQUEST);
    let modified_wrong = fulfil_with(1, payee.name, secret(2), hash(0xF0));
    hub.assert_rejected(modified_wrong, ErrorCode(3106));
    assert_eq!(hub.balance(payer.position), bal(100, 0));
    assert_eq!(hub.balance(payee.position), bal(-100, 0));
}

#[test]
fn modified_duplicate_abort_is_3106() {
    let (mut hub, payer, payee) = two();
    hub.one(prepare(1, payer, payee, 100, hub.now + TTL));
    hub.one(abort(1, payee.name, 5100, hash(0xA1)));
    hub.assert_rejected(abort(1, payee.name, 5101, hash(0xA2)), ErrorCode(3106));
}

#[test]
fn same_hash_duplicate_prepare_changes_nothing() {
    let (mut hub, payer, payee) = two();
    let command = prepare(1, payer, payee, 100, hub.now + TTL);
    hub.one(command.clone());
    let duplicate = hub.assert_duplicate(command.clone());
    assert_eq!(duplicate.state, TransferState::Reserved);
    assert_eq!(duplicate.transfer_id, TransferId::new(1));
    assert_eq!(hub.balance(payer.position), bal(0, 100));
    // In the same batch as the original, too.
    let command2 = prepare(2, payer, payee, 50, hub.now + TTL);
    let outcomes = hub.apply(&[command2.clone(), command2.clone()]);
    assert_eq!(view(&outcomes[0]).state, TransferState::Reserved);
    assert!(
        matches!(outcomes[1], Outcome::Duplicate(_)),
        "{:?}",
        outcomes[1]
    );
    assert_eq!(hub.balance(payer.position), bal(0, 150));

    hub.one(fulfil(1, payee.name));
    assert_eq!(
        hub.assert_duplicate(command).state,
        TransferState::Committed
    );
    // A duplicate after expiry time is still a duplicate, not 3303.
    hub.advance(2 * TTL);
    assert_eq!(
        hub.assert_duplicate(command2).state,
        TransferState::Reserved
    );
}

#[test]
fn same_hash_duplicate_of_a_refused_prepare_is_a_duplicate() {
    let (mut hub, payer, payee) = two();
    let command = prepare(1, payer, payee, 5000, hub.now + TTL);
    assert_eq!(failed(&hub.one(command.clone())).1, ErrorCode(4001));
    assert_eq!(hub.assert_duplicate(command).state, TransferState::Rejected);
}

#[test]
fn same_hash_duplicate_fulfil_and_abort_change_nothing() {
    let (mut hub, payer, payee) = two();
    let exp = hub.now + TTL;
    hub.one(prepare(1, payer, payee, 100, exp));
    hub.one(fulfil(1, payee.name));
    let duplicate = hub.assert_duplicate(fulfil(1, payee.name));
    assert_eq!(duplicate.state, TransferState::Committed);
    assert_eq!(duplicate.fulfilment, Some(secret(1)));

    hub.one(prepare(2, payer, payee, 100, exp));
    hub.one(abort(2, payee.name, 5100, hash(0xA2)));
    let duplicate = hub.assert_duplicate(abort(2, payee.name, 5100, hash(0xA2)));
    assert_eq!(duplicate.state, TransferState::Aborted);
    assert_eq!(duplicate.reason, Some(ErrorCode(5100)));
    assert_eq!(hub.balance(payer.position), bal(100, 0));
    assert_eq!(hub.balance(payee.position), bal(-100, 0));
}

#[test]
fn duplicates_are_detected_per_kind_of_finish() {
    // Mojaloop keeps separate fulfil and error duplicate checks: a fulfil
    // carrying the same hash as the abort that finished the transfer is not
    // a duplicate of it, but a fulfil of a transfer that is not RESERVED.
    let (mut hub, payer, payee) = two();
    hub.one(prepare(1, payer, payee, 100, hub.now + TTL));
    hub.one(abort(1, payee.name, 5100, hash(0xAB)));
    hub.assert_rejected(
        fulfil_with(1, payee.name, secret(1), hash(0xAB)),
        ErrorCode(3100),
    );
    hub.one(prepare(2, payer, payee, 100, hub.now + TTL));
    hub.one(fulfil_with(2, payee.name, secret(2), hash(0xCD)));
    hub.assert_rejected(abort(2, payee.name, 5100, hash(0xCD)), ErrorCode(3100));
    assert_eq!(hub.balance(payer.position), bal(100, 0));
}

// ----- expiry (3303) ---------------------------------------------------------

#[test]
fn fulfil_at_expiration_expires_with_3303() {
    let (mut hub, payer, payee) = two();
    let exp = hub.now + 1_000;
    hub.one(prepare(1, payer, payee, 100, exp));
    hub.one(prepare(2, payer, payee, 50, exp + 10));
    hub.now = exp; // exactly at the expiration instant
    let (transfer, code) = failed(&hub.one(fulfil(1, payee.name)));
    assert_eq!(code, ErrorCode::TRANSFER_EXPIRED);
    assert_eq!(transfer.state, TransferState::Expired);
    assert_eq!(transfer.reason, Some(ErrorCode(3303)));
    assert_eq!(transfer.fulfilment, None);
    assert_eq!(hub.balance(payer.position), bal(0, 50));
    assert_eq!(hub.balance(payee.position), bal(0, 0));
    assert_eq!(hub.ledger.next_expiry_ms(), Some(exp + 10));

    hub.now = exp + 11; // after it
    let (transfer, code) = failed(&hub.one(fulfil(2, payee.name)));
    assert_eq!(
        (transfer.state, code),
        (TransferState::Expired, ErrorCode(3303))
    );
    assert_eq!(hub.balance(payer.position), bal(0, 0));
    assert_eq!(hub.balance(payee.position), bal(0, 0));
    assert_eq!(hub.ledger.next_expiry_ms(), None);
    // Nothing left for the timeout to do, and later finishes are 3303.
    assert_eq!(hub.one(Command::Expire), Outcome::Expired(vec![]));
    hub.assert_rejected(abort(1, payee.name, 5100, hash(1)), ErrorCode(3303));
    assert_audited(&hub);
}

#[test]
fn fulfil_just_before_expiration_commits() {
    let (mut hub, payer, payee) = two();
    let exp = hub.now + 1_000;
    hub.one(prepare(1, payer, payee, 100, exp));
    hub.now = exp - 1;
    assert_eq!(
        view(&hub.one(fulfil(1, payee.name))).state,
        TransferState::Committed
    );
}

#[test]
fn prepare_already_expired_is_3303() {
    let (mut hub, payer, payee) = two();
    hub.assert_rejected(
        prepare(1, payer, payee, 10, hub.now),
        ErrorCode::TRANSFER_EXPIRED,
    );
    hub.assert_rejected(prepare(1, payer, payee, 10, hub.now - 1), ErrorCode(3303));
    hub.assert_rejected(prepare(1, payer, payee, 10, i64::MIN), ErrorCode(3303));
    // The refused prepare left no trace: the id is still free.
    assert_eq!(
        view(&hub.one(prepare(1, payer, payee, 10, hub.now + 1))).state,
        TransferState::Reserved
    );
}

#[test]
fn expire_expires_due_reserved_transfers_only() {
    let (mut hub, payer, payee) = two();
    let t = hub.now;
    let other = hub.dfsp("otherfsp", 1000, 500);
    hub.apply(&[
        prepare(1, payer, payee, 10, t + 10),
        prepare(2, payer, payee, 20, t + 20),
        prepare(3, payer, payee, 30, t + 30),
        prepare(4, other, payee, 40, t + 20),
        prepare(5, payer, payee, 50, t + 15),
    ]);
    hub.one(fulfil(5, payee.name)); // committed before it was due
    assert_eq!(hub.ledger.next_expiry_ms(), Some(t + 10));
    assert_eq!(hub.balance(payer.position), bal(50, 60));

    // Before anything is due, Expire does nothing.
    hub.now = t + 9;
    let result = hub.batch(&[Command::Expire]);
    assert_eq!(result.outcomes, vec![Outcome::Expired(vec![])]);
    assert!(result.records.is_empty());

    hub.now = t + 20; // inclusive: expiration <= batch time
    let Outcome::Expired(views) = hub.one(Command::Expire) else {
        panic!("Expire must answer Expired");
    };
    let ids: Vec<_> = views.iter().map(|v| v.transfer_id).collect();
    assert_eq!(
        ids,
        vec![TransferId::new(1), TransferId::new(2), TransferId::new(4)]
    );
    for v in &views {
        assert_eq!(v.state, TransferState::Expired);
        assert_eq!(v.reason, Some(ErrorCode(3303)));
        assert_eq!(v.completed_at_ms, Some(t + 20));
    }
    assert_eq!(hub.balance(payer.position), bal(50, 30));
    assert_eq!(hub.balance(other.position), bal(0, 0));
    assert_eq!(hub.balance(payee.position), bal(-50, 0));
    assert_eq!(
        hub.state(TransferId::new(3), payer.name),
        TransferState::Reserved
    );
    assert_eq!(
        hub.state(TransferId::new(5), payer.name),
        TransferState::Committed
    );
    assert_eq!(hub.ledger.next_expiry_ms(), Some(t + 30));

    // An expired transfer refuses its fulfil with 3303 and changes nothing.
    hub.assert_rejected(fulfil(1, payee.name), ErrorCode(3303));
    // The one still reserved can be fulfilled.
    assert_eq!(
        view(&hub.one(fulfil(3, payee.name))).state,
        TransferState::Committed
    );
    assert_eq!(hub.ledger.next_expiry_ms(), None);
    assert_eq!(hub.balance(payer.position), bal(80, 0));
    assert_audited(&hub);
}

#[test]
fn expiry_frees_headroom_for_a_later_prepare_in_the_batch() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 100);
    let payee = hub.dfsp("payeefsp", 0, 0);
    let t = hub.now;
    hub.one(prepare(1, payer, payee, 100, t + 10));
    hub.now = t + 10;
    let outcomes = hub.apply(&[
        prepare(2, payer, payee, 100, t + TTL),
        Command::Expire,
        prepare(3, payer, payee, 100, t + TTL),
    ]);
    assert_eq!(failed(&outcomes[0]).1, ErrorCode(4200));
    assert!(matches!(&outcomes[1], Outcome::Expired(v) if v.len() == 1));
    assert_eq!(view(&outcomes[2]).state, TransferState::Reserved);
}

// ----- validation (3100) ------------------------------------------------------

#[test]
fn inactive_payer_is_3100() {
    let (mut hub, payer, payee) = two();
    let off = Command::SetParticipantActive {
        name: payer.name,
        active: false,
    };
    assert_eq!(hub.one(off), Outcome::Done);
    let refusal = hub.assert_rejected(prepare(1, payer, payee, 10, hub.now + TTL), ErrorCode(3100));
    assert_eq!(refusal.description, "Participant payerfsp is inactive");
    let on = Command::SetParticipantActive {
        name: payer.name,
        active: true,
    };
    assert_eq!(hub.one(on), Outcome::Done);
    view(&hub.one(prepare(1, payer, payee, 10, hub.now + TTL)));
}

#[test]
fn inactive_payee_is_3100() {
    let (mut hub, payer, payee) = two();
    hub.one(Command::SetParticipantActive {
        name: payee.name,
        active: false,
    });
    hub.assert_rejected(prepare(1, payer, payee, 10, hub.now + TTL), ErrorCode(3100));
}

#[test]
fn inactive_payer_position_account_is_3100() {
    let (mut hub, payer, payee) = two();
    let off = Command::SetAccountActive {
        name: payer.name,
        account: payer.position,
        active: false,
    };
    assert_eq!(hub.one(off), Outcome::Done);
    assert!(!hub.account(payer.position).active);
    hub.assert_rejected(prepare(1, payer, payee, 10, hub.now + TTL), ErrorCode(3100));
}

#[test]
fn inactive_payee_position_account_is_3100() {
    let (mut hub, payer, payee) = two();
    hub.one(Command::SetAccountActive {
        name: payee.name,
        account: payee.position,
        active: false,
    });
    hub.assert_rejected(prepare(1, payer, payee, 10, hub.now + TTL), ErrorCode(3100));
}

#[test]
fn unknown_payer_or_payee_is_3100() {
    let (mut hub, payer, payee) = two();
    let ghost = Dfsp {
        name: fsp("ghostfsp"),
        ..payee
    };
    hub.assert_rejected(prepare(1, payer, ghost, 10, hub.now + TTL), ErrorCode(3100));
    hub.assert_rejected(prepare(1, ghost, payee, 10, hub.now + TTL), ErrorCode(3100));
}

#[test]
fn a_currency_the_payee_does_not_hold_is_3100() {
    let mut hub = Hub::new(&[usd(), eur()]);
    let payer = hub.dfsp_in("payerfsp", usd(), 1000, 500);
    let payer_eur = hub.dfsp_in("payerfsp", eur(), 1000, 500);
    let payee = hub.dfsp_in("payeefsp", usd(), 1000, 500);
    let payee_in_eur = Dfsp {
        currency: eur(),
        ..payee
    };
    hub.assert_rejected(
        prepare(1, payer_eur, payee_in_eur, 10, hub.now + TTL),
        ErrorCode(3100),
    );
    // ... and the payer's side: the payee has EUR, the payer does not.
    let other = hub.dfsp_in("otherfsp", eur(), 1000, 500);
    let payee_as_payer = Dfsp {
        currency: eur(),
        ..payee
    };
    hub.assert_rejected(
        prepare(2, payee_as_payer, other, 10, hub.now + TTL),
        ErrorCode(3100),
    );
    // A currency nobody holds.
    let gbp_payer = Dfsp {
        currency: cur("GBP"),
        ..payer
    };
    let gbp_payee = Dfsp {
        currency: cur("GBP"),
        ..payee
    };
    hub.assert_rejected(
        prepare(3, gbp_payer, gbp_payee, 10, hub.now + TTL),
        ErrorCode(3100),
    );
    // The EUR pair that both hold works.
    view(&hub.one(prepare(4, payer_eur, other, 10, hub.now + TTL)));
    assert_eq!(hub.balance(payer_eur.position), bal(0, 10));
    assert_eq!(hub.balance(payer.position), bal(0, 0));
}

#[test]
fn payer_equal_to_payee_is_3100() {
    let (mut hub, payer, _) = two();
    hub.assert_rejected(prepare(1, payer, payer, 10, hub.now + TTL), ErrorCode(3100));
}

#[test]
fn zero_negative_and_oversized_amounts_are_3100() {
    let (mut hub, payer, payee) = two();
    let exp = hub.now + TTL;
    let with_amount =
        |amount: Amount| prepare_full(1, payer.name, payee.name, amount, usd(), 1, exp, hash(1));
    hub.assert_rejected(with_amount(Amount::ZERO), ErrorCode(3100));
    hub.assert_rejected(with_amount(Amount::from_units(-1)), ErrorCode(3100));
    hub.assert_rejected(
        with_amount(Amount::from_units(Amount::MAX_TRANSFER.units() + 1)),
        ErrorCode(3100),
    );
    view(&hub.one(with_amount(Amount::from_units(1))));
}

// ----- funds in and out --------------------------------------------------------

#[test]
fn funds_in_credits_settlement_and_debits_reconciliation() {
    let mut hub = Hub::usd();
    let dfsp = hub.dfsp("dfsp", 0, 0);
    let recon = hub.reconciliation(usd());
    let command = funds_in(TransferId::new(9), dfsp, whole(250), hash(9));
    let v = view(&hub.one(command.clone()));
    assert_eq!(
        (v.kind, v.state),
        (TransferKind::FundsIn, TransferState::Committed)
    );
    assert_eq!(hub.balance(dfsp.settlement), bal(-250, 0));
    assert_eq!(hub.balance(recon), bal(250, 0));
    assert_eq!(
        hub.assert_duplicate(command).state,
        TransferState::Committed
    );
    hub.assert_rejected(
        funds_in(TransferId::new(9), dfsp, whole(251), hash(10)),
        ErrorCode(3106),
    );
    hub.assert_rejected(
        funds_in(TransferId::new(10), dfsp, Amount::ZERO, hash(11)),
        ErrorCode(3100),
    );
    // Funds go to a SETTLEMENT account only.
    let to_position = Dfsp {
        settlement: dfsp.position,
        ..dfsp
    };
    hub.assert_rejected(
        funds_in(TransferId::new(10), to_position, whole(1), hash(12)),
        ErrorCode(3100),
    );
}

#[test]
fn funds_out_beyond_the_settlement_balance_is_4001() {
    let mut hub = Hub::usd();
    let dfsp = hub.dfsp("dfsp", 100, 0);
    hub.assert_rejected(
        funds_out(TransferId::new(1), dfsp, whole(101), hash(1)),
        ErrorCode::PAYER_FSP_INSUFFICIENT_LIQUIDITY,
    );
    view(&hub.one(funds_out(TransferId::new(2), dfsp, whole(60), hash(2))));
    // Holds count: only 40 is left.
    hub.assert_rejected(
        funds_out(TransferId::new(3), dfsp, whole(41), hash(3)),
        ErrorCode(4001),
    );
    view(&hub.one(funds_out(TransferId::new(4), dfsp, whole(40), hash(4))));
    assert_eq!(hub.balance(dfsp.settlement), bal(-100, 100));
    hub.assert_rejected(
        funds_out(TransferId::new(5), dfsp, Amount::from_units(1), hash(5)),
        ErrorCode(4001),
    );
}

#[test]
fn funds_out_reserve_then_commit_moves_settlement_and_reconciliation() {
    let mut hub = Hub::usd();
    let dfsp = hub.dfsp("dfsp", 100, 0);
    let recon = hub.reconciliation(usd());
    let id = TransferId::new(7);
    let v = view(&hub.one(funds_out(id, dfsp, whole(40), hash(7))));
    assert_eq!(
        (v.kind, v.state),
        (TransferKind::FundsOut, TransferState::Reserved)
    );
    assert_eq!(hub.balance(dfsp.settlement), bal(-100, 40));
    assert_eq!(hub.balance(recon), bal(100, 0));

    let commit = Command::FundsOutCommit(funds_finish(id, dfsp, hash(8)));
    let v = view(&hub.one(commit.clone()));
    assert_eq!(v.state, TransferState::Committed);
    assert_eq!(hub.balance(dfsp.settlement), bal(-60, 0));
    assert_eq!(hub.balance(recon), bal(60, 0));
    assert_eq!(hub.assert_duplicate(commit).state, TransferState::Committed);
    hub.assert_rejected(
        Command::FundsOutCommit(funds_finish(id, dfsp, hash(9))),
        ErrorCode(3106),
    );
    hub.assert_rejected(
        Command::FundsOutAbort(funds_finish(id, dfsp, hash(10))),
        ErrorCode(3100),
    );
    assert_audited(&hub);
}

#[test]
fn funds_out_reserve_then_abort_releases_the_hold() {
    let mut hub = Hub::usd();
    let dfsp = hub.dfsp("dfsp", 100, 0);
    let recon = hub.reconciliation(usd());
    let id = TransferId::new(7);
    view(&hub.one(funds_out(id, dfsp, whole(40), hash(7))));
    let abort = Command::FundsOutAbort(funds_finish(id, dfsp, hash(8)));
    let v = view(&hub.one(abort.clone()));
    assert_eq!(v.state, TransferState::Aborted);
    assert_eq!(hub.balance(dfsp.settlement), bal(-100, 0));
    assert_eq!(hub.balance(recon), bal(100, 0));
    assert_eq!(hub.assert_duplicate(abort).state, TransferState::Aborted);
    hub.assert_rejected(
        Command::FundsOutCommit(funds_finish(id, dfsp, hash(9))),
        ErrorCode(3100),
    );
    // The whole balance can go out again.
    view(&hub.one(funds_out(TransferId::new(8), dfsp, whole(100), hash(11))));
    assert_audited(&hub);
}

#[test]
fn funds_out_finish_of_a_wrong_transfer_is_refused() {
    let mut hub = Hub::usd();
    let dfsp = hub.dfsp("dfsp", 100, 100);
    let other = hub.dfsp("other", 100, 100);
    hub.assert_rejected(
        Command::FundsOutCommit(funds_finish(TransferId::new(99), dfsp, hash(1))),
        ErrorCode(3208),
    );
    view(&hub.one(funds_out(TransferId::new(1), dfsp, whole(10), hash(1))));
    // Another participant's account, named as its own: 3100.
    hub.assert_rejected(
        Command::FundsOutCommit(funds_finish(TransferId::new(1), other, hash(2))),
        ErrorCode(3100),
    );
    // An account the participant does not own: 3200.
    let stolen = Dfsp {
        settlement: other.settlement,
        ..dfsp
    };
    hub.assert_rejected(
        Command::FundsOutCommit(funds_finish(TransferId::new(1), stolen, hash(2))),
        ErrorCode::ID_NOT_FOUND,
    );
    // An FSPIOP transfer is not a funds out.
    hub.one(prepare(2, dfsp, other, 10, hub.now + TTL));
    hub.assert_rejected(
        Command::FundsOutCommit(funds_finish(TransferId::new(2), dfsp, hash(3))),
        ErrorCode(3100),
    );
    assert_eq!(hub.balance(dfsp.settlement), bal(-100, 10));
}

// ----- GET -------------------------------------------------------------------

#[test]
fn get_transfer_by_a_third_party_is_3000_and_unknown_is_3208() {
    let (mut hub, payer, payee) = two();
    let other = hub.dfsp("otherfsp", 0, 0);
    hub.one(prepare(1, payer, payee, 10, hub.now + TTL));
    hub.assert_rejected(
        Command::GetTransfer {
            transfer_id: TransferId::new(1),
            caller: other.name,
        },
        ErrorCode::GENERIC_CLIENT_ERROR,
    );
    hub.assert_rejected(
        Command::GetTransfer {
            transfer_id: TransferId::new(2),
            caller: payer.name,
        },
        ErrorCode::TRANSFER_ID_NOT_FOUND,
    );
    // The parties get the transfer, and asking changes nothing.
    let before = hub.ledger.snapshot();
    for caller in [payer.name, payee.name] {
        let result = hub.batch(&[Command::GetTransfer {
            transfer_id: TransferId::new(1),
            caller,
        }]);
        assert_eq!(view(&result.outcomes[0]).state, TransferState::Reserved);
        assert!(result.records.is_empty());
    }
    // The operator's read needs no party, changes nothing, and an unknown
    // id is 3208 as for the parties.
    let result = hub.batch(&[Command::ReadTransfer {
        transfer_id: TransferId::new(1),
    }]);
    assert_eq!(view(&result.outcomes[0]).payer, payer.name);
    assert!(result.records.is_empty());
    hub.assert_rejected(
        Command::ReadTransfer {
            transfer_id: TransferId::new(2),
        },
        ErrorCode::TRANSFER_ID_NOT_FOUND,
    );
    assert_eq!(hub.ledger.snapshot(), before);
}

// ----- reference data ----------------------------------------------------------

#[test]
fn creating_a_dfsp_before_both_hub_accounts_exist_is_3003_and_twice_3000() {
    // No hub at all.
    let mut hub = Hub {
        ledger: Ledger::new(Limits::default()),
        now: T0,
        name: fsp("Hub"),
        store: StoreCopy::default(),
    };
    let create = Command::CreateParticipant {
        name: fsp("dfsp"),
        currency: usd(),
    };
    hub.assert_rejected(create.clone(), ErrorCode::ADD_PARTY_INFORMATION_ERROR);

    let mut hub = Hub::bare();
    hub.assert_rejected(create.clone(), ErrorCode(3003));
    hub.one(Command::CreateHubAccount {
        currency: usd(),
        kind: AccountKind::HubMultilateralSettlement,
    });
    hub.assert_rejected(create.clone(), ErrorCode(3003));
    hub.one(Command::CreateHubAccount {
        currency: usd(),
        kind: AccountKind::HubReconciliation,
    });
    assert!(matches!(
        hub.one(create.clone()),
        Outcome::AccountsCreated(_)
    ));
    // Registering the same currency twice is 3000 in central-ledger's words.
    let twice = hub.assert_rejected(create, ErrorCode::GENERIC_CLIENT_ERROR);
    assert!(
        twice
            .description
            .starts_with("Participant currency has already been registered"),
        "{twice:?}"
    );
    // A currency without hub accounts.
    hub.assert_rejected(
        Command::CreateParticipant {
            name: fsp("dfsp"),
            currency: eur(),
        },
        ErrorCode(3003),
    );
}

#[test]
fn hub_accounts_are_created_once() {
    let mut hub = Hub::usd();
    hub.assert_rejected(
        Command::CreateHubAccount {
            currency: usd(),
            kind: AccountKind::HubReconciliation,
        },
        ErrorCode(3003),
    );
    hub.assert_rejected(
        Command::CreateHubAccount {
            currency: usd(),
            kind: AccountKind::Position,
        },
        ErrorCode(3100),
    );
    hub.assert_rejected(Command::CreateHub { name: fsp("Hub2") }, ErrorCode(3000));
}

#[test]
fn no_balance_moves_on_refusals() {
    // A sanity sweep: after a mix of refusals, every account is where the
    // successful commands alone put it.
    let (mut hub, payer, payee) = two();
    let exp = hub.now + TTL;
    hub.one(prepare(1, payer, payee, 100, exp));
    hub.apply(&[
        prepare(1, payer, payee, 100, exp),
        prepare(2, payer, payer, 100, exp),
        prepare(3, payer, payee, 100_000, exp),
        fulfil_with(1, fsp("nobody"), secret(1), hash(1)),
        fulfil(9, payee.name),
    ]);
    assert_eq!(hub.balance(payer.position), bal(0, 100));
    assert_eq!(hub.balance(payee.position), (NONE, NONE));
    assert_audited(&hub);
}

/// An account's `changed_at_ms` is when its balance (value or what is
/// held) last changed, as central-ledger's position `changedDate`: not
/// moved by a new net debit cap, and kept through a restore.
#[test]
fn an_accounts_last_change_follows_its_balance() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payer", 1_000, 1_000);
    let payee = hub.dfsp("payee", 1_000, 1_000);
    let created = hub.account(payer.position).created_at_ms;
    assert_eq!(hub.account(payer.position).changed_at_ms, created);

    hub.advance(1_000);
    let reserved_at = hub.now;
    hub.one(prepare(1, payer, payee, 10, hub.now + TTL));
    assert_eq!(hub.account(payer.position).changed_at_ms, reserved_at);
    assert_eq!(hub.account(payee.position).changed_at_ms, created);

    hub.advance(1_000);
    hub.one(Command::SetNetDebitCap {
        name: payer.name,
        currency: usd(),
        net_debit_cap: whole(2_000),
    });
    assert_eq!(
        hub.account(payer.position).changed_at_ms,
        reserved_at,
        "a new cap is not a position change"
    );

    hub.advance(1_000);
    let committed_at = hub.now;
    hub.one(fulfil(1, payee.name));
    assert_eq!(hub.account(payer.position).changed_at_ms, committed_at);
    assert_eq!(hub.account(payee.position).changed_at_ms, committed_at);

    // A reservation and its release are changes, even in one batch (as
    // central-ledger writes a position change for each).
    hub.advance(1_000);
    let released_at = hub.now;
    hub.apply(&[
        prepare(2, payer, payee, 5, hub.now + TTL),
        abort(2, payee.name, 5104, hash(0x42)),
    ]);
    let snapshot = hub.ledger.snapshot();
    let restored = Ledger::restore(snapshot.clone(), Limits::default()).unwrap();
    assert_eq!(restored.snapshot(), snapshot);
    let row = snapshot
        .accounts
        .iter()
        .find(|a| a.id == payer.position)
        .unwrap();
    assert_eq!(row.changed_at_ms, released_at);
    assert_eq!(row.value, whole(10));
}
