//! Pausing a DFSP: the pause rule (`modes.rs`) refuses exactly the new
//! payments a participant's mode forbids, changing nothing when it does,
//! from the next command on; transfers prepared before a pause fulfil,
//! abort and expire as they would have, every balance right and every
//! currency's accounts summing to zero. (The random sequences of
//! `properties.rs` also change modes between prepares and finishes.)

mod common;

use common::*;
use ledger::*;

/// A USD hub with a payer and a payee, each with 1000 deposited and a cap of 500.
fn two() -> (Hub, Dfsp, Dfsp) {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 500);
    let payee = hub.dfsp("payeefsp", 1000, 500);
    (hub, payer, payee)
}

fn set_mode(hub: &mut Hub, dfsp: Dfsp, mode: ParticipantMode) {
    let outcome = hub.one(Command::SetParticipantMode {
        name: dfsp.name,
        mode,
    });
    assert_eq!(outcome, Outcome::Done);
}

fn mode_of(hub: &Hub, dfsp: Dfsp) -> ParticipantMode {
    hub.ledger
        .snapshot()
        .participants
        .into_iter()
        .find(|row| row.name == dfsp.name)
        .expect("participant")
        .mode
}

/// The ledger's own check, and every currency's values summing to zero.
fn assert_sound(hub: &Hub) {
    let snapshot = hub.ledger.snapshot();
    assert!(snapshot.audit().is_empty(), "{:?}", snapshot.audit());
    let sum: i128 = snapshot.accounts.iter().map(|a| a.value.units()).sum();
    assert_eq!(sum, 0, "the accounts' values sum to zero");
}

#[test]
fn each_mode_refuses_exactly_the_side_it_forbids_and_changes_nothing() {
    use ParticipantMode::*;
    // (mode, may pay, may be paid)
    let table = [
        (Active, true, true),
        (SendOnly, true, false),
        (ReceiveOnly, false, true),
        (Suspended, false, false),
    ];
    let mut id = 0;
    for (mode, may_pay, may_be_paid) in table {
        let (mut hub, payer, payee) = two();
        set_mode(&mut hub, payer, mode);
        assert_eq!(mode_of(&hub, payer), mode);
        // `payer` paying.
        id += 1;
        let command = prepare(id, payer, payee, 10, hub.now + TTL);
        if may_pay {
            assert_eq!(view(&hub.one(command)).state, TransferState::Reserved);
        } else {
            let refusal = hub.assert_rejected(command, ErrorCode(3100));
            assert_eq!(refusal.paused, Some(PauseRefusal::PayerMayNotSend));
            let words = match mode {
                Suspended => "Participant payerfsp is inactive".to_string(),
                other => format!(
                    "Participant payerfsp is {}: it may not send",
                    other.as_str()
                ),
            };
            assert_eq!(refusal.description, words);
        }
        // `payer` being paid.
        id += 1;
        let command = prepare(id, payee, payer, 10, hub.now + TTL);
        if may_be_paid {
            assert_eq!(view(&hub.one(command)).state, TransferState::Reserved);
        } else {
            let refusal = hub.assert_rejected(command, ErrorCode(3100));
            assert_eq!(refusal.paused, Some(PauseRefusal::PayeeMayNotReceive));
        }
        assert_sound(&hub);
    }
}

#[test]
fn is_active_false_is_suspended_and_true_is_active() {
    let (mut hub, payer, _) = two();
    set_mode(&mut hub, payer, ParticipantMode::SendOnly);
    hub.one(Command::SetParticipantActive {
        name: payer.name,
        active: false,
    });
    assert_eq!(mode_of(&hub, payer), ParticipantMode::Suspended);
    hub.one(Command::SetParticipantActive {
        name: payer.name,
        active: true,
    });
    assert_eq!(mode_of(&hub, payer), ParticipantMode::Active);
}

#[test]
fn a_mode_takes_effect_from_the_next_command_of_the_same_batch() {
    let (mut hub, payer, payee) = two();
    let t = hub.now + TTL;
    let outcomes = hub.apply(&[
        prepare(1, payer, payee, 10, t),
        Command::SetParticipantMode {
            name: payee.name,
            mode: ParticipantMode::SendOnly,
        },
        prepare(2, payer, payee, 10, t),
        // A send-only payee may still pay.
        prepare(3, payee, payer, 10, t),
    ]);
    assert_eq!(view(&outcomes[0]).state, TransferState::Reserved);
    assert_eq!(outcomes[1], Outcome::Done);
    assert_eq!(outcomes[2].error_code(), Some(ErrorCode(3100)));
    assert_eq!(view(&outcomes[3]).state, TransferState::Reserved);
}

#[test]
fn a_disabled_currency_account_is_refused_as_a_pause() {
    let (mut hub, payer, payee) = two();
    hub.one(Command::SetAccountActive {
        name: payee.name,
        account: payee.position,
        active: false,
    });
    let refusal = hub.assert_rejected(prepare(1, payer, payee, 10, hub.now + TTL), ErrorCode(3100));
    assert_eq!(refusal.paused, Some(PauseRefusal::AccountInactive));
    assert_eq!(
        refusal.description,
        "Participant payeefsp USD account is inactive"
    );
}

#[test]
fn transfers_prepared_before_a_suspension_fulfil_abort_and_expire_with_every_position_right() {
    let (mut hub, payer, payee) = two();
    let t = hub.now;
    for id in 1..=3 {
        let expiration = if id == 3 { t + 10 } else { t + TTL };
        assert_eq!(
            view(&hub.one(prepare(id, payer, payee, 100, expiration))).state,
            TransferState::Reserved
        );
    }
    assert_eq!(hub.balance(payer.position), (whole(0), whole(300)));
    // Both suspended, and the payee's account disabled too: nothing of it
    // reaches the transfers already prepared.
    set_mode(&mut hub, payer, ParticipantMode::Suspended);
    set_mode(&mut hub, payee, ParticipantMode::Suspended);
    hub.one(Command::SetAccountActive {
        name: payee.name,
        account: payee.position,
        active: false,
    });
    hub.assert_rejected(prepare(4, payer, payee, 100, t + TTL), ErrorCode(3100));

    assert_eq!(
        view(&hub.one(fulfil(1, payee.name))).state,
        TransferState::Committed
    );
    let aborted = hub.one(abort(2, payee.name, 5100, hash(0x42)));
    assert_eq!(view(&aborted).state, TransferState::Aborted);
    hub.now = t + 10;
    let Outcome::Expired(expired) = hub.one(Command::Expire) else {
        panic!("expiry");
    };
    assert_eq!(expired.len(), 1);
    assert_eq!(
        hub.state(TransferId::new(3), payer.name),
        TransferState::Expired
    );

    // Only the committed 100 moved; nothing is held any more.
    assert_eq!(hub.balance(payer.position), (whole(100), whole(0)));
    assert_eq!(hub.balance(payee.position), (whole(-100), whole(0)));
    assert_sound(&hub);
}

#[test]
fn a_mode_survives_a_restore_from_the_snapshot() {
    let (mut hub, payer, payee) = two();
    set_mode(&mut hub, payer, ParticipantMode::ReceiveOnly);
    set_mode(&mut hub, payee, ParticipantMode::SendOnly);
    let restored = Ledger::restore(hub.ledger.snapshot(), Limits::default()).unwrap();
    assert_eq!(restored.snapshot(), hub.ledger.snapshot());
    hub.ledger = restored;
    assert_eq!(mode_of(&hub, payer), ParticipantMode::ReceiveOnly);
    // Each may still do its one side.
    let t = hub.now + TTL;
    assert_eq!(
        view(&hub.one(prepare(1, payee, payer, 10, t))).state,
        TransferState::Reserved
    );
    hub.assert_rejected(prepare(2, payer, payee, 10, t), ErrorCode(3100));
}
