//! Funds in and out: movements between a participant's SETTLEMENT account
//! and the hub's reconciliation account.

use crate::amount::Amount;
use crate::crypto::Condition;
use crate::error::{ErrorCode, Rejection};
use crate::ids::AccountId;
use crate::ledger::{overflow, validation, Ledger, Transfer};
use crate::model::*;

impl Ledger {
    /// The participant's SETTLEMENT account named in a funds command, with
    /// the hub's reconciliation account in the same currency.
    fn funds_accounts(&self, funds: &Funds) -> Result<(AccountId, AccountId), Rejection> {
        let (_, account) = self.owned_account(funds.participant, funds.account)?;
        let settlement = self.account(account);
        if settlement.kind != AccountKind::Settlement {
            return Err(validation(format!(
                "account {} is a {} account, not SETTLEMENT",
                account.0,
                settlement.kind.as_str()
            )));
        }
        if settlement.currency != funds.currency {
            return Err(validation(format!(
                "account {} holds {}, not {}",
                account.0, settlement.currency, funds.currency
            )));
        }
        if !settlement.active {
            return Err(validation(format!("account {} is inactive", account.0)));
        }
        if !funds.amount.is_valid_transfer_amount() {
            return Err(validation(
                "amount must be above 0, with at most 18 integer digits and 4 decimals",
            ));
        }
        let reconciliation = self.hub_accounts(funds.currency).ok_or_else(|| {
            Rejection::new(
                ErrorCode::ADD_PARTY_INFORMATION_ERROR,
                format!("the hub has no {} accounts", funds.currency),
            )
        })?;
        Ok((account, reconciliation))
    }

    pub(crate) fn funds_in(&mut self, funds: &Funds) -> Result<Outcome, Rejection> {
        if let Some(duplicate) = self.check_new_transfer(funds.transfer_id, funds.request_hash)? {
            return Ok(duplicate);
        }
        let (settlement, reconciliation) = self.funds_accounts(funds)?;
        // Funds in: HUB_RECONCILIATION +X, the DFSP's SETTLEMENT −X.
        let debit_value = self
            .account(reconciliation)
            .value
            .checked_add(funds.amount)
            .ok_or_else(overflow)?;
        let credit_value = self
            .account(settlement)
            .value
            .checked_sub(funds.amount)
            .ok_or_else(overflow)?;
        self.balance_mut(reconciliation).value = debit_value;
        self.balance_mut(settlement).value = credit_value;
        self.insert_funds(
            funds,
            TransferKind::FundsIn,
            reconciliation,
            settlement,
            TransferState::Committed,
        );
        Ok(Outcome::Transfer(self.view_of(funds.transfer_id)))
    }

    pub(crate) fn funds_out_reserve(&mut self, funds: &Funds) -> Result<Outcome, Rejection> {
        if let Some(duplicate) = self.check_new_transfer(funds.transfer_id, funds.request_hash)? {
            return Ok(duplicate);
        }
        let (settlement, reconciliation) = self.funds_accounts(funds)?;
        let account = self.account(settlement);
        let new_reserved = account
            .reserved
            .checked_add(funds.amount)
            .ok_or_else(overflow)?;
        let balance_after = account
            .value
            .checked_add(new_reserved)
            .ok_or_else(overflow)?;
        if balance_after.is_positive() {
            let available = account
                .value
                .checked_add(account.reserved)
                .and_then(Amount::checked_neg)
                .ok_or_else(overflow)?;
            return Err(Rejection::new(
                ErrorCode::PAYER_FSP_INSUFFICIENT_LIQUIDITY,
                format!(
                    "funds out of {} exceeds the {available} available in settlement account {}",
                    funds.amount, settlement.0
                ),
            ));
        }
        self.balance_mut(settlement).reserved = new_reserved;
        self.insert_funds(
            funds,
            TransferKind::FundsOut,
            settlement,
            reconciliation,
            TransferState::Reserved,
        );
        Ok(Outcome::Transfer(self.view_of(funds.transfer_id)))
    }

    fn insert_funds(
        &mut self,
        funds: &Funds,
        kind: TransferKind,
        debit: AccountId,
        credit: AccountId,
        state: TransferState,
    ) {
        self.insert_transfer(
            funds.transfer_id,
            Transfer {
                seq: 0,
                kind,
                debit,
                credit,
                amount: funds.amount,
                condition: Condition::default(),
                expiration_ms: i64::MAX,
                prepared_at_ms: self.now_ms,
                request_hash: funds.request_hash,
                state,
                reason: None,
                finish: None,
                fulfilment: None,
                memo: Some(Box::new(funds.memo.clone())),
                wire_version: 0,
                fx: None,
            },
        );
    }

    pub(crate) fn funds_out_finish(
        &mut self,
        command: &FundsFinish,
        kind: FinishKind,
    ) -> Result<Outcome, Rejection> {
        let transfer_id = command.transfer_id;
        let (_, account) = self.owned_account(command.participant, command.account)?;
        // Funds movements never leave memory: a stored copy is an FSPIOP
        // transfer's.
        if let Some(stored) = self.beyond_memory(transfer_id)? {
            return Err(validation(format!(
                "transfer {} is not a funds out of account {}",
                stored.view.transfer_id, account.0
            )));
        }
        let transfer = self.transfers.get(&transfer_id).ok_or_else(|| {
            Rejection::new(
                ErrorCode::TRANSFER_ID_NOT_FOUND,
                format!("transfer {transfer_id} not found"),
            )
        })?;
        if transfer.kind != TransferKind::FundsOut || transfer.debit != account {
            return Err(validation(format!(
                "transfer {transfer_id} is not a funds out of account {}",
                account.0
            )));
        }
        if let Some(duplicate) =
            self.check_finish_duplicate(transfer_id, &transfer, kind, command.request_hash)?
        {
            return Ok(duplicate);
        }
        if transfer.state != TransferState::Reserved {
            return Err(Self::not_reserved(transfer_id, transfer.state));
        }
        let state = if kind == FinishKind::Fulfil {
            TransferState::Committed
        } else {
            TransferState::Aborted
        };
        let view = self.finish(
            transfer_id,
            kind,
            state,
            None,
            None,
            command.request_hash,
            None,
        )?;
        Ok(Outcome::Transfer(view))
    }
}
