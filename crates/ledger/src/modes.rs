//! Pausing a DFSP: what a participant may do (its [`ParticipantMode`]), and
//! the one rule every new payment is checked against — a prepare here, and
//! the hub's lookups and quotes through [`payment_refusal`] and
//! [`accounts_refusal`], from the modes and disabled accounts of its
//! reference copy (kept from this ledger's committed records).
//!
//! Mojaloop has one flag, central-ledger's participant `isActive`; `false`
//! is [`ParticipantMode::Suspended`] here, and `true` [`ParticipantMode::Active`].
//! The two modes between are kasi's: `send-only` (may be payer, not
//! payee: a DFSP winding down, still paying out what it owes) and
//! `receive-only` (may be payee, not payer: a DFSP whose settlement is in
//! doubt, still able to receive).
//!
//! The rule applies to new payments only. A transfer already prepared
//! fulfils, aborts and expires as it would have, whatever the modes became
//! meanwhile: its payer's hold was taken, and its payee may already have
//! released the goods on the condition.

use crate::error::{ErrorCode, Rejection};
use crate::ids::{Currency, FspName};

/// What a participant may do in new payments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParticipantMode {
    /// Payer and payee (central-ledger's `isActive: true`).
    #[default]
    Active,
    /// Payer only.
    SendOnly,
    /// Payee only.
    ReceiveOnly,
    /// Neither (central-ledger's `isActive: false`).
    Suspended,
}

impl ParticipantMode {
    pub const ALL: [ParticipantMode; 4] = [
        ParticipantMode::Active,
        ParticipantMode::SendOnly,
        ParticipantMode::ReceiveOnly,
        ParticipantMode::Suspended,
    ];

    /// The admin API's and the store's word.
    pub fn as_str(self) -> &'static str {
        match self {
            ParticipantMode::Active => "active",
            ParticipantMode::SendOnly => "send-only",
            ParticipantMode::ReceiveOnly => "receive-only",
            ParticipantMode::Suspended => "suspended",
        }
    }

    pub fn parse(text: &str) -> Option<ParticipantMode> {
        ParticipantMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == text)
    }

    /// central-ledger's `isActive` for this mode: only a suspended
    /// participant is inactive.
    pub fn from_active(active: bool) -> ParticipantMode {
        match active {
            true => ParticipantMode::Active,
            false => ParticipantMode::Suspended,
        }
    }

    /// central-ledger's `isActive`: whether the participant may do
    /// anything at all.
    pub fn is_active(self) -> bool {
        self != ParticipantMode::Suspended
    }

    pub fn may_send(self) -> bool {
        matches!(self, ParticipantMode::Active | ParticipantMode::SendOnly)
    }

    pub fn may_receive(self) -> bool {
        matches!(self, ParticipantMode::Active | ParticipantMode::ReceiveOnly)
    }

    /// Whether this mode allows the `side` of a payment.
    pub fn allows(self, side: Side) -> bool {
        match side {
            Side::Payer => self.may_send(),
            Side::Payee => self.may_receive(),
        }
    }
}

/// Which side of a payment a participant takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Pays: the payer of a transfer, the requester of a quote or lookup,
    /// the FXP paying out a conversion's target currency.
    Payer,
    /// Is paid: the payee, the addressee of a quote, a party's holder, the
    /// FXP taking a conversion's source currency.
    Payee,
}

/// Why the pause rule refused a new payment: the `class` of the hub's
/// refusal counter, each said in its own words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PauseRefusal {
    /// The payer's mode forbids paying (receive-only or suspended).
    PayerMayNotSend,
    /// The payee's mode forbids being paid (send-only or suspended).
    PayeeMayNotReceive,
    /// A currency account the payment needs is disabled
    /// (`PUT /participants/{name}/accounts/{id}` `isActive: false`).
    AccountInactive,
}

impl PauseRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            PauseRefusal::PayerMayNotSend => "payer_may_not_send",
            PauseRefusal::PayeeMayNotReceive => "payee_may_not_receive",
            PauseRefusal::AccountInactive => "account_inactive",
        }
    }
}

/// The refusal of a participant whose mode forbids its side of a payment,
/// as a prepare's: 3100, central-ledger's code for an inactive participant
/// (`validator.js` `validateParticipantByName`), in its words for a
/// suspended one ("Participant payerfsp is inactive", which Mojaloop's
/// collections look for) and kasi's for the two modes Mojaloop lacks.
pub(crate) fn mode_refusal(name: FspName, mode: ParticipantMode, side: Side) -> Option<Rejection> {
    if mode.allows(side) {
        return None;
    }
    let (reason, may_not) = match side {
        Side::Payer => (PauseRefusal::PayerMayNotSend, "send"),
        Side::Payee => (PauseRefusal::PayeeMayNotReceive, "receive"),
    };
    let description = match mode {
        ParticipantMode::Suspended => format!("Participant {name} is inactive"),
        other => format!(
            "Participant {name} is {}: it may not {may_not}",
            other.as_str()
        ),
    };
    Some(Rejection::paused(
        ErrorCode::GENERIC_VALIDATION_ERROR,
        description,
        reason,
    ))
}

/// The refusal of a disabled currency account, as a prepare's: 3100 in
/// central-ledger's words (`validatePositionAccountByNameAndCurrency`).
pub(crate) fn account_refusal(name: FspName, currency: Currency) -> Rejection {
    Rejection::paused(
        ErrorCode::GENERIC_VALIDATION_ERROR,
        format!("Participant {name} {currency} account is inactive"),
        PauseRefusal::AccountInactive,
    )
}

/// The pause rule for a payment the hub routes without the ledger (a
/// lookup, a quote): the payer's mode, then the payee's, from the hub's
/// copy of the committed modes. Quoting-service's codes
/// (`database.js` `getParticipant`, which finds no active participant):
/// 3202 "Payer FSP ID not found" for the requester, 3201 "Destination FSP
/// Error" for the addressee, both "Unsupported participant" in its words,
/// with why.
pub fn payment_refusal(
    payer: (FspName, ParticipantMode),
    payee: (FspName, ParticipantMode),
) -> Option<Rejection> {
    side_refusal(payer, Side::Payer).or_else(|| side_refusal(payee, Side::Payee))
}

/// The pause rule for one participant's side of a payment the hub routes
/// without the ledger, in [`payment_refusal`]'s codes and words: 3202
/// for a payer, 3201 for a payee. A party's holder is the payee of any
/// payment found through it, so registering a party is refused with the
/// payee's 3201 when its holder may not receive.
pub fn side_refusal((name, mode): (FspName, ParticipantMode), side: Side) -> Option<Rejection> {
    if mode.allows(side) {
        return None;
    }
    let (code, reason, may_not) = match side {
        Side::Payer => (
            ErrorCode::PAYER_FSP_ID_NOT_FOUND,
            PauseRefusal::PayerMayNotSend,
            "send",
        ),
        Side::Payee => (
            ErrorCode::DESTINATION_FSP_ERROR,
            PauseRefusal::PayeeMayNotReceive,
            "receive",
        ),
    };
    Some(Rejection::paused(
        code,
        format!(
            "Unsupported participant '{name}': it is {} and may not {may_not}",
            mode.as_str()
        ),
        reason,
    ))
}

/// The pause rule for the currency accounts a payment the hub routes
/// without the ledger needs (a lookup naming a currency, a quote, a
/// request to pay): `payer`'s POSITION account in each of its currencies,
/// then `payee`'s in each of its own (an FXP's: the source currency it
/// takes and the target it pays), none of them `disabled`
/// (`PUT /participants/{name}/accounts/{id}` `isActive: false`), from the
/// hub's copy of the committed accounts. In [`payment_refusal`]'s codes —
/// 3202 for the payer, 3201 for the payee — naming the currency, for the
/// reason a prepare needing the account gives ([`account_refusal`]).
pub fn accounts_refusal(
    (payer, payer_currencies): (FspName, &[Currency]),
    (payee, payee_currencies): (FspName, &[Currency]),
    disabled: impl Fn(FspName, Currency) -> bool,
) -> Option<Rejection> {
    let sides = [
        (payer, payer_currencies, ErrorCode::PAYER_FSP_ID_NOT_FOUND),
        (payee, payee_currencies, ErrorCode::DESTINATION_FSP_ERROR),
    ];
    sides.into_iter().find_map(|(name, currencies, code)| {
        let currency = currencies
            .iter()
            .copied()
            .find(|&currency| disabled(name, currency))?;
        Some(Rejection::paused(
            code,
            format!("Unsupported participant '{name}': its {currency} account is inactive"),
            PauseRefusal::AccountInactive,
        ))
    })
}

/// Whether an FXP in `mode` could complete a conversion now: it is the
/// payee of the conversion (takes the source currency) and the payer of
/// the dependent transfer (pays the target), so it must be
/// [`ParticipantMode::Active`] — `prepare_conversion` checks both sides.
pub fn may_convert(mode: ParticipantMode) -> bool {
    mode.may_receive() && mode.may_send()
}

/// The pause rule for an FX quote from `initiating` to `fxp`, as
/// [`payment_refusal`] words it: the requester pays (3202), and the FXP
/// must both take the source currency and pay the target (3201 for
/// either), as the conversion it quotes for would need.
pub fn conversion_refusal(
    initiating: (FspName, ParticipantMode),
    fxp: (FspName, ParticipantMode),
) -> Option<Rejection> {
    side_refusal(initiating, Side::Payer)
        .or_else(|| side_refusal(fxp, Side::Payee))
        .or_else(|| {
            let mut refusal = side_refusal(fxp, Side::Payer)?;
            // The FXP is the addressee: 3201, as for a payee.
            refusal.code = ErrorCode::DESTINATION_FSP_ERROR;
            Some(refusal)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fsp(name: &str) -> FspName {
        FspName::new(name).unwrap()
    }

    #[test]
    fn each_mode_allows_exactly_its_sides() {
        use ParticipantMode::*;
        let table = [
            (Active, true, true),
            (SendOnly, true, false),
            (ReceiveOnly, false, true),
            (Suspended, false, false),
        ];
        for (mode, send, receive) in table {
            assert_eq!(mode.allows(Side::Payer), send, "{mode:?}");
            assert_eq!(mode.allows(Side::Payee), receive, "{mode:?}");
            assert_eq!(ParticipantMode::parse(mode.as_str()), Some(mode));
            assert_eq!(mode.is_active(), mode != Suspended);
        }
        assert_eq!(ParticipantMode::parse("paused"), None);
        assert_eq!(ParticipantMode::from_active(false), Suspended);
        assert_eq!(ParticipantMode::from_active(true), Active);
    }

    #[test]
    fn a_suspended_participant_is_refused_in_central_ledgers_words() {
        let refusal =
            mode_refusal(fsp("payerfsp"), ParticipantMode::Suspended, Side::Payer).unwrap();
        assert_eq!(refusal.code, ErrorCode::GENERIC_VALIDATION_ERROR);
        assert_eq!(refusal.description, "Participant payerfsp is inactive");
        assert_eq!(refusal.paused, Some(PauseRefusal::PayerMayNotSend));
        let refusal =
            mode_refusal(fsp("payeefsp"), ParticipantMode::SendOnly, Side::Payee).unwrap();
        assert_eq!(
            refusal.description,
            "Participant payeefsp is send-only: it may not receive"
        );
        assert_eq!(refusal.paused, Some(PauseRefusal::PayeeMayNotReceive));
        assert!(mode_refusal(fsp("a"), ParticipantMode::SendOnly, Side::Payer).is_none());
    }

    #[test]
    fn lookups_and_quotes_get_quoting_services_codes_payer_first() {
        use ParticipantMode::*;
        let (payer, payee) = (fsp("payerfsp"), fsp("payeefsp"));
        assert!(payment_refusal((payer, SendOnly), (payee, ReceiveOnly)).is_none());
        let both = payment_refusal((payer, Suspended), (payee, Suspended)).unwrap();
        assert_eq!(both.code, ErrorCode::PAYER_FSP_ID_NOT_FOUND);
        assert_eq!(both.paused, Some(PauseRefusal::PayerMayNotSend));
        let payee_only = payment_refusal((payer, Active), (payee, SendOnly)).unwrap();
        assert_eq!(payee_only.code, ErrorCode::DESTINATION_FSP_ERROR);
        assert_eq!(
            payee_only.description,
            "Unsupported participant 'payeefsp': it is send-only and may not receive"
        );
    }

    #[test]
    fn a_disabled_account_refuses_its_side_in_quoting_services_codes_naming_the_currency() {
        let (payer, fxp) = (fsp("payerfsp"), fsp("fxp"));
        let usd = Currency::parse("USD").unwrap();
        let eur = Currency::parse("EUR").unwrap();
        let disabled = |off: &'static [(&'static str, &'static str)]| {
            move |name: FspName, currency: Currency| {
                off.iter()
                    .any(|(n, c)| *n == name.as_str() && *c == currency.as_str())
            }
        };
        // Nothing disabled, or only a currency the payment does not need.
        assert!(accounts_refusal((payer, &[usd]), (fxp, &[usd, eur]), disabled(&[])).is_none());
        assert!(accounts_refusal(
            (payer, &[usd]),
            (fxp, &[usd]),
            disabled(&[("payerfsp", "EUR"), ("fxp", "EUR")])
        )
        .is_none());
        // The payer's account first: 3202.
        let both = accounts_refusal(
            (payer, &[usd]),
            (fxp, &[usd]),
            disabled(&[("payerfsp", "USD"), ("fxp", "USD")]),
        )
        .unwrap();
        assert_eq!(both.code, ErrorCode::PAYER_FSP_ID_NOT_FOUND);
        assert_eq!(both.paused, Some(PauseRefusal::AccountInactive));
        assert_eq!(
            both.description,
            "Unsupported participant 'payerfsp': its USD account is inactive"
        );
        // An FXP needs both currencies: its target account alone refuses, 3201.
        let target = accounts_refusal(
            (payer, &[usd]),
            (fxp, &[usd, eur]),
            disabled(&[("fxp", "EUR")]),
        )
        .unwrap();
        assert_eq!(target.code, ErrorCode::DESTINATION_FSP_ERROR);
        assert_eq!(
            target.description,
            "Unsupported participant 'fxp': its EUR account is inactive"
        );
        // A lookup naming no currency needs no account.
        assert!(accounts_refusal((payer, &[]), (fxp, &[]), |_, _| true).is_none());
    }

    #[test]
    fn an_fxp_converts_only_while_it_may_both_take_and_pay() {
        use ParticipantMode::*;
        let (payer, fxp) = (fsp("payerfsp"), fsp("fxp"));
        assert!(conversion_refusal((payer, SendOnly), (fxp, Active)).is_none());
        for mode in ParticipantMode::ALL {
            assert_eq!(may_convert(mode), mode == Active, "{mode:?}");
            let refused = conversion_refusal((payer, Active), (fxp, mode));
            assert_eq!(refused.is_none(), mode == Active, "{mode:?}");
            if let Some(refused) = refused {
                assert_eq!(refused.code, ErrorCode::DESTINATION_FSP_ERROR, "{mode:?}");
            }
        }
        let paying = conversion_refusal((payer, Active), (fxp, ReceiveOnly)).unwrap();
        assert_eq!(paying.paused, Some(PauseRefusal::PayerMayNotSend));
        assert_eq!(
            paying.description,
            "Unsupported participant 'fxp': it is receive-only and may not send"
        );
        let asking = conversion_refusal((payer, ReceiveOnly), (fxp, SendOnly)).unwrap();
        assert_eq!(asking.code, ErrorCode::PAYER_FSP_ID_NOT_FOUND);
    }
}
