//! The columns a transfer is searched by (`docs/design/back-office.md`):
//! who pays and who is paid (participants, not accounts: a DFSP has an
//! account per currency, and an index on accounts cannot list a DFSP's
//! transfers newest first), the currency, and the amount as an integer.
//!
//! They are the store's, not the ledger's: derived at write time from the
//! accounts the store already holds, so the ledger's records and the
//! recovery that reads them do not change. Each writer keeps the accounts'
//! owners and currencies in an [`AccountOwners`], read at open and kept
//! current from the batch's `Account` records (which precede any transfer
//! on them).

use ledger::{AccountId, Amount, Currency, ParticipantId};

/// Each account's participant and currency, by account id (dense from 1).
#[derive(Debug, Default)]
pub(crate) struct AccountOwners {
    by_id: Vec<Option<(ParticipantId, Currency)>>,
}

impl AccountOwners {
    pub(crate) fn note(
        &mut self,
        account: AccountId,
        participant: ParticipantId,
        currency: Currency,
    ) {
        let at = account.0 as usize;
        if self.by_id.len() <= at {
            self.by_id.resize(at + 1, None);
        }
        self.by_id[at] = Some((participant, currency));
    }

    /// The account's participant and currency; `None` for an account the
    /// store was never told of (its transfer is then found by neither).
    pub(crate) fn of(&self, account: AccountId) -> Option<(ParticipantId, Currency)> {
        self.by_id.get(account.0 as usize).copied().flatten()
    }
}

/// The search columns of one transfer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SearchColumns {
    pub payer: Option<u32>,
    pub payee: Option<u32>,
    pub currency: Option<Currency>,
    pub amount_units: i64,
}

impl SearchColumns {
    pub(crate) fn of(
        owners: &AccountOwners,
        debit: AccountId,
        credit: AccountId,
        amount: Amount,
    ) -> SearchColumns {
        let debit = owners.of(debit);
        let credit = owners.of(credit);
        SearchColumns {
            payer: debit.map(|(participant, _)| participant.0),
            payee: credit.map(|(participant, _)| participant.0),
            currency: debit.or(credit).map(|(_, currency)| currency),
            amount_units: amount_units(amount),
        }
    }
}

/// An amount in ten-thousandths as a 64-bit integer, for the amount
/// index: exact up to 922,337,203,685,477.5807, the largest beyond it
/// (a search re-checks the exact amount of every row it returns).
pub(crate) fn amount_units(amount: Amount) -> i64 {
    i64::try_from(amount.units()).unwrap_or(if amount.is_negative() {
        i64::MIN
    } else {
        i64::MAX
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_is_filed_under_its_accounts_owners_and_currency() {
        let usd = Currency::parse("USD").unwrap();
        let mut owners = AccountOwners::default();
        owners.note(AccountId(1), ParticipantId(7), usd);
        owners.note(AccountId(4), ParticipantId(9), usd);
        let columns = SearchColumns::of(
            &owners,
            AccountId(1),
            AccountId(4),
            Amount::from_units(12_345),
        );
        assert_eq!(
            columns,
            SearchColumns {
                payer: Some(7),
                payee: Some(9),
                currency: Some(usd),
                amount_units: 12_345
            }
        );
        let unknown =
            SearchColumns::of(&owners, AccountId(2), AccountId(40), Amount::from_whole(1));
        assert_eq!(
            (unknown.payer, unknown.payee, unknown.currency),
            (None, None, None)
        );
    }

    #[test]
    fn amounts_beyond_64_bits_are_filed_at_the_end() {
        assert_eq!(
            amount_units(Amount::from_units(i128::from(i64::MAX) + 1)),
            i64::MAX
        );
        assert_eq!(amount_units(Amount::from_units(-(1i128 << 70))), i64::MIN);
        assert_eq!(amount_units(Amount::from_whole(3)), 30_000);
    }
}
