//! Who is told what after a transfer's outcome: one pure plan, used by the
//! transfer handlers, the ledger's expiry and the redelivery after a
//! restart alike, so that the three cannot drift apart.
//!
//! The plan says which party gets which kind of message, and in which
//! order (the payer first, the payee once the payer's first attempt has
//! ended, as ml-api-adapter does); `transfers.rs` builds the bytes (the
//! message passed on as it came, or the hub's own), and after a restart,
//! when the original bytes are gone, the hub's rebuilt copy.

use ledger::{AbortCause, TransferState, TransferView};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Party {
    Payer,
    Payee,
}

/// The kind of message a party gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// The DFSP's own message passed on (the prepare to the payee, the
    /// fulfil or the payee's error to the payer); after a restart the hub
    /// rebuilds it from what is stored.
    PassedOn,
    /// The hub's own copy of the DFSP's message: the payee's commit
    /// confirmed to it (SEND_TRANSFER_CONFIRMATION_TO_PAYEE). After a
    /// restart, the hub's state message.
    Copy,
    /// The hub's `PUT /transfers/{ID}` with the transfer's state.
    State,
    /// The hub's `PUT /transfers/{ID}/error` with the transfer's reason.
    Error,
    /// The hub's `PATCH /transfers/{ID}` with the final state, to a payee
    /// that sent RESERVED (v1.1) and so asked to be told.
    Patch,
}

/// One message to one party.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    pub to: Party,
    pub message: Message,
}

/// The callbacks of one outcome: `first`, then `then` once the first's
/// first attempt has ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub first: Planned,
    pub then: Option<Planned>,
}

/// What happened, as the plan needs to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A prepare was reserved.
    Reserved,
    /// A prepare was refused over a limit (REJECTED).
    Rejected,
    /// The payee's fulfil finished it: COMMITTED, or ABORTED by the hub
    /// (a wrong fulfilment, or addressed to another than the payer), or
    /// EXPIRED (too late).
    Fulfilled,
    /// The payee's `PUT /transfers/{ID}/error` aborted it.
    AbortedByPayee,
    /// The ledger expired it.
    Expired,
    /// The conversion it depended on ended first (the FXP's error, or its
    /// wrong fulfilment), and ended it ([`ledger::FinishKind::Linked`]).
    EndedWithConversion,
}

/// The hub's setting and what the request said beyond the outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// `--payee-commit-confirmation` (Mojaloop's
    /// SEND_TRANSFER_CONFIRMATION_TO_PAYEE).
    pub payee_commit_confirmation: bool,
    /// The payee's fulfil said RESERVED (v1.1): it is told the final state
    /// with a PATCH. Not stored, so `false` after a restart.
    pub reserve_only: bool,
}

use Message::*;
use Party::*;

fn to(to: Party, message: Message) -> Planned {
    Planned { to, message }
}

/// The callbacks after `event` left the transfer as `view` says.
pub fn callbacks_for(event: Event, view: &TransferView, facts: Facts) -> Plan {
    let then = |planned: Planned, when: bool| when.then_some(planned);
    match event {
        Event::Reserved => Plan {
            first: to(Payee, PassedOn),
            then: None,
        },
        Event::Rejected => Plan {
            first: to(Payer, Error),
            then: None,
        },
        // Addressed to another than the payer: the hub aborted it (3100)
        // and tells the payer alone, as central-ledger's switch does.
        Event::AbortedByPayee if view.cause == Some(AbortCause::DestinationNotPayer) => Plan {
            first: to(Payer, Error),
            then: None,
        },
        // The payee's error, passed on to the payer alone (central-ledger's
        // ABORT from the payee).
        Event::AbortedByPayee => Plan {
            first: to(Payer, PassedOn),
            then: None,
        },
        // Both parties: the payee may be holding funds for it.
        Event::Expired | Event::EndedWithConversion => Plan {
            first: to(Payer, Error),
            then: Some(to(Payee, Error)),
        },
        Event::Fulfilled if view.state == TransferState::Committed => match facts.reserve_only {
            // The payer gets the hub's PUT, the payee the PATCH it asked
            // for.
            true => Plan {
                first: to(Payer, State),
                then: Some(to(Payee, Patch)),
            },
            // The fulfil passed on to the payer; the payee's confirmation
            // is the hub's copy of it.
            false => Plan {
                first: to(Payer, PassedOn),
                then: then(to(Payee, Copy), facts.payee_commit_confirmation),
            },
        },
        // Aborted by the hub or too late: the payer is told the error.
        Event::Fulfilled => {
            let payee = match () {
                // A payee that sent RESERVED asked to be told, whatever
                // went wrong.
                _ if facts.reserve_only => Some(to(Payee, Patch)),
                // Central-ledger sends this one from the switch, to the
                // payer alone.
                _ if view.cause == Some(AbortCause::DestinationNotPayer) => None,
                // Too late: the payee may have committed on its side, and
                // only this tells it the transfer expired.
                _ if view.state == TransferState::Expired => Some(to(Payee, Error)),
                _ => then(to(Payee, Error), facts.payee_commit_confirmation),
            };
            Plan {
                first: to(Payer, Error),
                then: payee,
            }
        }
    }
}

/// The event that left a stored transfer as it is, for the redelivery
/// after a restart; `None` for one with nothing to tell (a reservation
/// past its expiration, which the expiry tells).
pub fn stored_event(
    view: &TransferView,
    finish: Option<ledger::FinishKind>,
    now_ms: i64,
) -> Option<Event> {
    use ledger::FinishKind;
    Some(match (view.state, finish) {
        (TransferState::Reserved, None) if view.expiration_ms > now_ms => Event::Reserved,
        (TransferState::Reserved, _) => return None,
        (TransferState::Rejected, _) => Event::Rejected,
        (_, Some(FinishKind::Abort)) => Event::AbortedByPayee,
        (_, Some(FinishKind::Fulfil)) => Event::Fulfilled,
        // A transfer ended by its conversion (a conversion's own callbacks
        // are planned in `fx_transfers.rs`).
        (_, Some(FinishKind::Linked)) => Event::EndedWithConversion,
        // Finished by the ledger's expiry (its finish has no request).
        (_, Some(FinishKind::Expiry)) | (_, None) => Event::Expired,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::{Amount, Currency, ErrorCode, FspName, TransferId, TransferKind};

    fn view(state: TransferState, cause: Option<AbortCause>) -> TransferView {
        TransferView {
            transfer_id: TransferId::new(1),
            kind: TransferKind::Fspiop,
            payer: FspName::new("payer").unwrap(),
            payee: FspName::new("payee").unwrap(),
            amount: Amount::from_whole(1),
            currency: Currency::parse("USD").unwrap(),
            state,
            reason: (state != TransferState::Committed).then_some(ErrorCode(3100)),
            cause,
            expiration_ms: 10_000,
            prepared_at_ms: 1_000,
            completed_at_ms: Some(2_000),
            fulfilment: None,
            wire_version: 0,
            fx: None,
            settlement_window: None,
        }
    }

    /// A plan in a few words: `payer error; then payee patch`.
    fn render(plan: Plan) -> String {
        let one = |planned: Planned| {
            format!(
                "{} {}",
                format!("{:?}", planned.to).to_lowercase(),
                match planned.message {
                    PassedOn => "passed-on",
                    Copy => "copy",
                    State => "state",
                    Error => "error",
                    Patch => "patch",
                }
            )
        };
        match plan.then {
            Some(then) => format!("{}; then {}", one(plan.first), one(then)),
            None => one(plan.first),
        }
    }

    /// (event, state, cause, payee confirmation, reserve only, who is told
    /// what).
    type Case = (
        Event,
        TransferState,
        Option<AbortCause>,
        bool,
        bool,
        &'static str,
    );

    /// Every outcome × setting, as data → who is told what.
    #[test]
    fn every_outcome_tells_the_parties_it_must() {
        use AbortCause::{DestinationNotPayer, InvalidFulfilment};
        use Event::{AbortedByPayee, Fulfilled};
        use TransferState::{Aborted, Committed};
        #[rustfmt::skip]
        let cases: &[Case] = &[
            (Event::Reserved, TransferState::Reserved, None, true, false, "payee passed-on"),
            (Event::Rejected, TransferState::Rejected, None, true, false, "payer error"),
            (AbortedByPayee, Aborted, None, true, false, "payer passed-on"),
            (AbortedByPayee, Aborted, None, false, false, "payer passed-on"),
            (AbortedByPayee, Aborted, Some(DestinationNotPayer), true, false, "payer error"),
            (Event::Expired, TransferState::Expired, None, false, false, "payer error; then payee error"),
            (Fulfilled, Committed, None, true, false, "payer passed-on; then payee copy"),
            (Fulfilled, Committed, None, false, false, "payer passed-on"),
            (Fulfilled, Committed, None, false, true, "payer state; then payee patch"),
            (Fulfilled, Committed, None, true, true, "payer state; then payee patch"),
            (Fulfilled, Aborted, Some(InvalidFulfilment), true, false, "payer error; then payee error"),
            (Fulfilled, Aborted, Some(InvalidFulfilment), false, false, "payer error"),
            (Fulfilled, Aborted, Some(InvalidFulfilment), false, true, "payer error; then payee patch"),
            (Fulfilled, Aborted, Some(DestinationNotPayer), true, false, "payer error"),
            (Fulfilled, Aborted, Some(DestinationNotPayer), true, true, "payer error; then payee patch"),
            (Fulfilled, TransferState::Expired, None, false, false, "payer error; then payee error"),
            (Fulfilled, TransferState::Expired, None, true, true, "payer error; then payee patch"),
        ];
        for &(event, state, cause, payee_commit_confirmation, reserve_only, expected) in cases {
            let facts = Facts {
                payee_commit_confirmation,
                reserve_only,
            };
            let plan = callbacks_for(event, &view(state, cause), facts);
            assert_eq!(
                render(plan),
                expected,
                "{event:?} {state:?} {cause:?} confirmation={payee_commit_confirmation} reserve_only={reserve_only}"
            );
        }
    }

    /// After a restart the stored state and finish say which event it was.
    #[test]
    fn a_stored_transfer_names_its_event() {
        use ledger::FinishKind::*;
        use TransferState::*;
        #[rustfmt::skip]
        let cases: &[(TransferState, Option<ledger::FinishKind>, i64, Option<Event>)] = &[
            (Reserved, None, 5_000, Some(Event::Reserved)),
            (Reserved, None, 10_000, None),
            (Rejected, None, 5_000, Some(Event::Rejected)),
            (Aborted, Some(Abort), 5_000, Some(Event::AbortedByPayee)),
            (Committed, Some(Fulfil), 5_000, Some(Event::Fulfilled)),
            (Aborted, Some(Fulfil), 5_000, Some(Event::Fulfilled)),
            (Expired, Some(Fulfil), 20_000, Some(Event::Fulfilled)),
            (Expired, Some(Expiry), 20_000, Some(Event::Expired)),
        ];
        for &(state, finish, now_ms, expected) in cases {
            assert_eq!(
                stored_event(&view(state, None), finish, now_ms),
                expected,
                "{state:?} {finish:?} at {now_ms}"
            );
        }
    }
}
