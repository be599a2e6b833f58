//! FSPIOP transfers: prepare, fulfil, abort, expiry, and reading them,
//! with the duplicate rules for requests that create or finish one.

use crate::amount::Amount;
use crate::crypto::{Fulfilment, RequestHash};
use crate::error::{ErrorCode, Rejection};
use crate::ids::{AccountId, Currency, FspName, TransferId};
use crate::ledger::{modified_prepare, overflow, validation, Finish, FxSlot, Ledger, Transfer};
use crate::model::*;
use crate::modes::{account_refusal, mode_refusal, Side};
use crate::prefetch::StoredTransfer;
use crate::request::Held;
use crate::transfer_map::TransferRef;

impl Ledger {
    pub(crate) fn view(&self, transfer_id: TransferId, transfer: &Transfer) -> TransferView {
        let debit = self.account(transfer.debit);
        let credit = self.account(transfer.credit);
        let debit_owner = self.participant(debit.participant).name;
        let (payer, fx) = match transfer.fx.as_deref() {
            None => (debit_owner, None),
            Some(slot) => self.fx_view(slot, debit_owner),
        };
        TransferView {
            transfer_id,
            kind: transfer.kind,
            payer,
            payee: self.participant(credit.participant).name,
            amount: transfer.amount,
            currency: debit.currency,
            state: transfer.state,
            reason: transfer.reason,
            cause: transfer.finish.and_then(|finish| finish.cause),
            expiration_ms: transfer.expiration_ms,
            prepared_at_ms: transfer.prepared_at_ms,
            completed_at_ms: match transfer.state {
                TransferState::Reserved => None,
                _ => Some(
                    transfer
                        .finish
                        .map_or(transfer.prepared_at_ms, |finish| finish.at_ms),
                ),
            },
            fulfilment: transfer.fulfilment,
            wire_version: transfer.wire_version,
            fx,
            settlement_window: transfer.finish.and_then(|finish| finish.settlement_window),
        }
    }

    /// The transfer's FSPIOP payer: its debit account's participant, or
    /// for the transfer a conversion depends on (paid from the FXP's
    /// position), the conversion's initiating DFSP.
    pub(crate) fn fspiop_payer(&self, transfer: &Transfer) -> FspName {
        match transfer.fx.as_deref().map(|slot| slot.link) {
            Some(FxLink::Dependent { payer, .. }) => self.participant(payer).name,
            _ => {
                self.participant(self.account(transfer.debit).participant)
                    .name
            }
        }
    }

    pub(crate) fn view_of(&self, transfer_id: TransferId) -> TransferView {
        self.view(transfer_id, &self.transfers.held(&transfer_id))
    }

    /// Whether a transfer with this id is in memory (one that left it is in
    /// the store only).
    pub fn holds_transfer(&self, transfer_id: TransferId) -> bool {
        self.transfers.contains(&transfer_id)
    }

    /// The batch a transfer finishing now finishes in, as the finished
    /// transfers keep it for eviction: 0 (durable as far as eviction
    /// cares) without a retention horizon, when nothing is evicted.
    fn finishing_batch(&self) -> u64 {
        match self.limits.transfer_retention_ms {
            Some(_) => self.retention.batches,
            None => 0,
        }
    }

    /// Duplicate rule for a request that creates a transfer (FSPIOP §3.2.5.1).
    pub(crate) fn check_new_transfer(
        &self,
        transfer_id: TransferId,
        request_hash: RequestHash,
    ) -> Result<Option<Outcome>, Rejection> {
        let Some(existing) = self.transfers.get(&transfer_id) else {
            // Past the retention horizon the id may be the store's only.
            if let Some(stored) = self.stored_transfer(transfer_id)?.copied() {
                return match stored.request_hash == request_hash {
                    true => Ok(Some(Outcome::Duplicate(stored.view))),
                    false => Err(modified_prepare(transfer_id)),
                };
            }
            if self.transfers.len() >= self.limits.max_transfers {
                return Err(Rejection::new(
                    ErrorCode::INTERNAL_SERVER_ERROR,
                    format!(
                        "the ledger holds its limit of {} transfers",
                        self.limits.max_transfers
                    ),
                ));
            }
            if !self.transfers.has_room() {
                return Err(Rejection::new(
                    ErrorCode::INTERNAL_SERVER_ERROR,
                    "the ledger's memory of finished transfers is full",
                ));
            }
            return Ok(None);
        };
        if existing.request_hash == request_hash {
            return Ok(Some(Outcome::Duplicate(self.view(transfer_id, &existing))));
        }
        Err(modified_prepare(transfer_id))
    }

    /// The store's copy of a transfer memory does not hold (see
    /// `prefetch.rs`), `None` if there is none.
    pub(crate) fn beyond_memory(
        &self,
        transfer_id: TransferId,
    ) -> Result<Option<StoredTransfer>, Rejection> {
        match self.transfers.contains(&transfer_id) {
            true => Ok(None),
            false => self
                .stored_transfer(transfer_id)
                .map(|stored| stored.copied()),
        }
    }

    /// The rules for a fulfil or abort of a transfer that left memory: it
    /// is finished (only finished transfers leave), so the message is a
    /// resend (duplicate), a modified one (3106), or one too late.
    fn finish_stored(
        stored: &StoredTransfer,
        kind: FinishKind,
        request_hash: RequestHash,
        caller: FspName,
    ) -> Result<Outcome, Rejection> {
        let view = stored.view;
        let id = view.transfer_id;
        if view.kind != TransferKind::Fspiop {
            return Err(Self::not_a_transfer(id, view.kind));
        }
        if view.payee != caller {
            return Err(Rejection::not_party(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                format!("'{caller}' is not the payee of transfer {id}"),
            ));
        }
        match stored.finish {
            Some((finished_by, hash)) if finished_by == kind && hash == request_hash => {
                Ok(Outcome::Duplicate(view))
            }
            Some((finished_by, _)) if finished_by == kind => Err(Rejection::new(
                ErrorCode::MODIFIED_REQUEST,
                format!(
                    "transfer {id} was finished by a {} with a different body",
                    kind.as_str().to_lowercase()
                ),
            )),
            _ => Err(Self::not_reserved(id, view.state)),
        }
    }

    /// Duplicate rule for a request that finishes a transfer: a resend of the
    /// request that finished it is a duplicate; any other request of the same
    /// kind is a modified request.
    pub(crate) fn check_finish_duplicate(
        &self,
        transfer_id: TransferId,
        transfer: &Transfer,
        kind: FinishKind,
        request_hash: RequestHash,
    ) -> Result<Option<Outcome>, Rejection> {
        match transfer.finish {
            Some(finish) if finish.kind == kind && finish.request_hash == request_hash => {
                Ok(Some(Outcome::Duplicate(self.view(transfer_id, transfer))))
            }
            Some(finish) if finish.kind == kind => Err(Rejection::new(
                ErrorCode::MODIFIED_REQUEST,
                format!(
                    "transfer {transfer_id} was finished by a {} with a different body",
                    kind.as_str().to_lowercase()
                ),
            )),
            _ => Ok(None),
        }
    }

    /// A transfer message naming a funds movement or a conversion.
    pub(crate) fn not_a_transfer(transfer_id: TransferId, kind: TransferKind) -> Rejection {
        match kind {
            TransferKind::FxConversion => validation(format!(
                "{transfer_id} is a conversion (see /fxTransfers), not a transfer"
            )),
            _ => validation(format!(
                "transfer {transfer_id} is a funds movement, not an FSPIOP transfer"
            )),
        }
    }

    pub(crate) fn not_reserved(transfer_id: TransferId, state: TransferState) -> Rejection {
        if state == TransferState::Expired {
            return Rejection::new(
                ErrorCode::TRANSFER_EXPIRED,
                format!("transfer {transfer_id} has expired"),
            );
        }
        validation(format!(
            "transfer {transfer_id} is {}, not RESERVED",
            state.as_str()
        ))
    }

    /// A DFSP's POSITION account in `currency`, required to be usable by
    /// a new payment on its `side`: the pause rule (`modes.rs`), applied at
    /// every prepare and nowhere else, so that a mode or an account's
    /// `isActive` takes effect from the next command on while transfers
    /// already prepared finish as they would have. The refusals are 3100
    /// in central-ledger's words (`Participant payerfsp is inactive`),
    /// which Mojaloop's collections look for.
    pub(crate) fn active_position(
        &self,
        name: FspName,
        currency: Currency,
        side: Side,
    ) -> Result<AccountId, Rejection> {
        let id = self
            .participant_by_name
            .get(&name)
            .copied()
            .ok_or_else(|| validation(format!("Participant {name} not found")))?;
        if let Some(refusal) = mode_refusal(name, self.participant(id).mode, side) {
            return Err(refusal);
        }
        let account = self
            .find_account(id, currency, AccountKind::Position)
            .ok_or_else(|| {
                validation(format!("Participant {name} {currency} account not found"))
            })?;
        if !self.account(account).active {
            return Err(account_refusal(name, currency));
        }
        Ok(account)
    }

    pub(crate) fn prepare(&mut self, prepare: &Prepare) -> Result<Outcome, Rejection> {
        let transfer_id = prepare.transfer_id;
        if let Some(duplicate) = self.check_new_transfer(transfer_id, prepare.request_hash)? {
            return Ok(duplicate);
        }
        if !prepare.amount.is_valid_transfer_amount() {
            return Err(validation(
                "amount must be above 0, with at most 18 integer digits and 4 decimals",
            ));
        }
        if prepare.payer == prepare.payee {
            return Err(validation(format!(
                "payer and payee are both '{}'",
                prepare.payer
            )));
        }
        // The transfer a conversion depends on is paid from the FXP's
        // position in the target currency, not the payer's (fx.rs).
        let (debit_position, fx, debtor) = match self.conversion_for(transfer_id) {
            Some(conversion) => {
                let (fxp_position, link) = self.dependent_debit(prepare, conversion)?;
                (fxp_position, Some(link), Debtor::Fxp)
            }
            None => {
                // One that left memory is finished, so this is refused as
                // it would have been while memory held it.
                if let Some(ended) = self.stored_conversion_for(transfer_id)? {
                    let conversion = ended.view.transfer_id;
                    return Err(Self::conversion_ended(
                        transfer_id,
                        conversion,
                        ended.view.state,
                    ));
                }
                (
                    self.active_position(prepare.payer, prepare.currency, Side::Payer)?,
                    None,
                    Debtor::Payer,
                )
            }
        };
        let payee_position = self.active_position(prepare.payee, prepare.currency, Side::Payee)?;
        if prepare.expiration_ms <= self.now_ms {
            return Err(Rejection::new(
                ErrorCode::TRANSFER_EXPIRED,
                format!("transfer {transfer_id} expired before it was prepared"),
            ));
        }
        let refusal = self.position_refusal(debit_position, prepare.amount, debtor)?;
        let state = match refusal {
            Some(_) => TransferState::Rejected,
            None => TransferState::Reserved,
        };
        if state == TransferState::Reserved {
            self.reserve(debit_position, prepare.amount)?;
            self.expiry.insert((prepare.expiration_ms, transfer_id));
        }
        let transfer = self.insert_transfer(
            transfer_id,
            Transfer {
                seq: 0,
                kind: TransferKind::Fspiop,
                debit: debit_position,
                credit: payee_position,
                amount: prepare.amount,
                condition: prepare.condition,
                expiration_ms: prepare.expiration_ms,
                prepared_at_ms: self.now_ms,
                request_hash: prepare.request_hash,
                state,
                reason: refusal.as_ref().map(|r| r.code),
                finish: None,
                fulfilment: None,
                memo: None,
                wire_version: prepare.wire_version,
                fx: fx.map(|link| {
                    Box::new(FxSlot {
                        link,
                        fxp_fulfil: None,
                    })
                }),
            },
        );
        if let Some(parties) = &prepare.parties {
            self.records
                .push(Record::TransferParties(self.last_seq, parties.clone()));
        }
        if let (
            Some(error),
            Some(FxLink::Dependent {
                commit_request_id, ..
            }),
        ) = (&refusal, fx)
        {
            // The FXP cannot pay it: the conversion cannot complete, so it
            // ends now rather than hold the payer's funds until it
            // expires (central-ledger keeps it, fx-research §10.7).
            self.finish_linked_now(commit_request_id, TransferState::Aborted, error.code)?;
        }
        Ok(match refusal {
            Some(error) => Outcome::Failed { transfer, error },
            None => Outcome::Transfer(transfer),
        })
    }

    /// Mojaloop's position check (central-ledger position facade) of
    /// reserving `amount` on `position`, with the headroom of each
    /// reservation taken before the next command runs: the refusal (4001
    /// over the liquidity cover, 4200 over the net debit cap), or `None`
    /// when it fits. Changes nothing.
    pub(crate) fn position_refusal(
        &self,
        position_id: AccountId,
        amount: Amount,
        debtor: Debtor,
    ) -> Result<Option<Rejection>, Rejection> {
        let position = self.account(position_id);
        let owner = self.participant(position.participant).name;
        let settlement = self
            .find_account(
                position.participant,
                position.currency,
                AccountKind::Settlement,
            )
            .ok_or_else(|| {
                validation(format!(
                    "{} '{owner}' has no {} SETTLEMENT account",
                    debtor.word(),
                    position.currency
                ))
            })?;
        let settlement = self.account(settlement);
        let effective = position
            .value
            .checked_add(position.reserved)
            .ok_or_else(overflow)?;
        let liquidity_cover = settlement
            .value
            .checked_add(settlement.reserved)
            .and_then(Amount::checked_neg)
            .ok_or_else(overflow)?;
        let available_liquidity = liquidity_cover
            .checked_sub(effective)
            .ok_or_else(overflow)?;
        let net_debit_cap = position.net_debit_cap.unwrap_or(Amount::ZERO);
        let available_limit = net_debit_cap.checked_sub(effective).ok_or_else(overflow)?;
        position.reserved.checked_add(amount).ok_or_else(overflow)?;
        // Words for a refusal only: a prepare that passes allocates nothing.
        let debtor = || match debtor {
            Debtor::Payer => "the payer's".to_string(),
            Debtor::Fxp => format!("the FXP {owner}'s {}", position.currency),
        };
        Ok(if amount > available_liquidity {
            Some(Rejection::new(
                ErrorCode::PAYER_FSP_INSUFFICIENT_LIQUIDITY,
                format!(
                    "amount {amount} exceeds {} available liquidity of {available_liquidity}",
                    debtor()
                ),
            ))
        } else if amount > available_limit {
            Some(Rejection::new(
                ErrorCode::PAYER_LIMIT_ERROR,
                format!(
                    "amount {amount} exceeds {} available net debit cap of {available_limit}",
                    debtor()
                ),
            ))
        } else {
            None
        })
    }

    /// Holds `amount` on `position` (after [`Self::position_refusal`]).
    pub(crate) fn reserve(&mut self, position: AccountId, amount: Amount) -> Result<(), Rejection> {
        let reserved = self
            .account(position)
            .reserved
            .checked_add(amount)
            .ok_or_else(overflow)?;
        self.balance_mut(position).reserved = reserved;
        Ok(())
    }

    /// Records a new transfer and holds it: live, or finished already (a
    /// prepare refused by the position check). Its view.
    pub(crate) fn insert_transfer(
        &mut self,
        transfer_id: TransferId,
        mut transfer: Transfer,
    ) -> TransferView {
        self.last_seq += 1;
        transfer.seq = self.last_seq;
        self.records.push(Record::Transfer(TransferRow {
            seq: transfer.seq,
            transfer_id,
            kind: transfer.kind,
            debit: transfer.debit,
            credit: transfer.credit,
            amount: transfer.amount,
            condition: transfer.condition,
            expiration_ms: transfer.expiration_ms,
            prepared_at_ms: transfer.prepared_at_ms,
            request_hash: transfer.request_hash,
            state: transfer.state,
            reason: transfer.reason,
            memo: transfer.memo.clone(),
            wire_version: transfer.wire_version,
            fx: transfer.fx.as_ref().map(|slot| slot.link),
        }));
        let view = self.view(transfer_id, &transfer);
        if transfer.kind.is_between_positions() && transfer.state.is_final() {
            let batch = self.finishing_batch();
            self.transfers.insert_finished(transfer_id, transfer, batch);
        } else {
            let previous = self.transfers.insert(transfer_id, transfer);
            assert!(
                previous.is_none(),
                "transfer ids are checked for duplicates before insertion"
            );
        }
        view
    }

    /// Moves a reserved transfer to its final state: releases the hold on the
    /// debit account and, on commit, posts the amount from credit to debit.
    /// A conversion and its dependent transfer finish together, in this one
    /// step (the partner in the same state, [`FinishKind::Linked`]). Checks
    /// every sum of both before changing anything.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finish(
        &mut self,
        transfer_id: TransferId,
        kind: FinishKind,
        state: TransferState,
        reason: Option<ErrorCode>,
        cause: Option<AbortCause>,
        request_hash: RequestHash,
        fulfilment: Option<Fulfilment>,
    ) -> Result<TransferView, Rejection> {
        let partner = self.reserved_partner(transfer_id);
        let plan = self.plan_finish(transfer_id, state)?;
        let partner_plan = match partner {
            Some(partner) => Some((partner, self.plan_finish(partner, state)?)),
            None => None,
        };
        let view = self.apply_finish(plan, kind, reason, cause, request_hash, fulfilment);
        if let Some((partner, plan)) = partner_plan {
            // A committed conversion keeps the FXP's fulfilment; an ended
            // one has none, as an aborted transfer.
            let fulfilment = match state {
                TransferState::Committed => self.transfers.held(&partner).fulfilment,
                _ => None,
            };
            let hash = RequestHash::default();
            self.apply_finish(plan, FinishKind::Linked, reason, None, hash, fulfilment);
        }
        // The partner's end changes nothing in this view.
        Ok(view)
    }

    /// Finishes a reserved conversion or dependent transfer whose partner
    /// just ended without it being reserved (a rejected dependent
    /// transfer): alone, [`FinishKind::Linked`].
    pub(crate) fn finish_linked_now(
        &mut self,
        transfer_id: TransferId,
        state: TransferState,
        reason: ErrorCode,
    ) -> Result<(), Rejection> {
        let plan = self.plan_finish(transfer_id, state)?;
        let hash = RequestHash::default();
        self.apply_finish(plan, FinishKind::Linked, Some(reason), None, hash, None);
        Ok(())
    }

    /// What finishing a reserved transfer in `state` changes, every sum
    /// checked; nothing changed yet.
    fn plan_finish(
        &self,
        transfer_id: TransferId,
        state: TransferState,
    ) -> Result<FinishPlan, Rejection> {
        let transfer = self.transfers.held(&transfer_id);
        assert_eq!(
            transfer.state,
            TransferState::Reserved,
            "only a reserved transfer can finish"
        );
        let (debit, credit, amount) = (transfer.debit, transfer.credit, transfer.amount);
        let debit_account = self.account(debit);
        let released = debit_account
            .reserved
            .checked_sub(amount)
            .ok_or_else(overflow)?;
        assert!(
            !released.is_negative(),
            "a hold never exceeds what the account reserved"
        );
        let posted = if state == TransferState::Committed {
            let debit_value = debit_account
                .value
                .checked_add(amount)
                .ok_or_else(overflow)?;
            let credit_value = self
                .account(credit)
                .value
                .checked_sub(amount)
                .ok_or_else(overflow)?;
            Some((debit_value, credit_value))
        } else {
            None
        };
        // A committed transfer or conversion belongs to the window open
        // now, in this same step, so no close can race it; under a GROSS
        // model it also settles at once. Both are checked before anything
        // changes.
        let settles = posted.is_some() && transfer.kind.is_between_positions();
        let window_commit = match settles {
            true => Some(self.plan_window_commit(debit, credit, amount)?),
            false => None,
        };
        let gross = match settles {
            true => self.plan_gross(debit, credit, amount)?,
            false => None,
        };
        Ok(FinishPlan {
            transfer_id,
            state,
            released,
            posted,
            window_commit,
            gross,
        })
    }

    /// Applies a planned finish; the transfer's view after it.
    fn apply_finish(
        &mut self,
        plan: FinishPlan,
        kind: FinishKind,
        reason: Option<ErrorCode>,
        cause: Option<AbortCause>,
        request_hash: RequestHash,
        fulfilment: Option<Fulfilment>,
    ) -> TransferView {
        let transfer_id = plan.transfer_id;
        let transfer = self.transfers.held(&transfer_id);
        let (debit, credit, expiration_ms) =
            (transfer.debit, transfer.credit, transfer.expiration_ms);
        self.balance_mut(debit).reserved = plan.released;
        if let Some((debit_value, credit_value)) = plan.posted {
            assert_eq!(self.account(debit).currency, self.account(credit).currency);
            self.balance_mut(debit).value = debit_value;
            self.balance_mut(credit).value = credit_value;
        }
        let settlement_window = plan
            .window_commit
            .and_then(|commit| self.apply_window_commit(commit, 1));
        if let Some(entries) = plan.gross {
            self.post_entries(&entries, None, Some(transfer_id));
        }
        self.expiry.remove(&(expiration_ms, transfer_id));
        let now_ms = self.now_ms;
        let state = plan.state;
        let transfer = self
            .transfers
            .get_mut(&transfer_id)
            .expect("looked up above");
        transfer.state = state;
        transfer.reason = reason;
        transfer.fulfilment = fulfilment;
        transfer.finish = Some(Finish {
            kind,
            request_hash,
            at_ms: now_ms,
            settlement_window,
            cause,
        });
        let seq = transfer.seq;
        let between_positions = transfer.kind.is_between_positions();
        let view = self.view_of(transfer_id);
        if between_positions {
            // Read from now on only as a finished transfer: held compactly.
            let batch = self.finishing_batch();
            self.transfers.finish(transfer_id, batch);
        }
        self.records.push(Record::Finish(FinishRow {
            seq,
            kind,
            state,
            reason,
            cause,
            finished_at_ms: now_ms,
            request_hash,
            fulfilment,
            settlement_window,
        }));
        view
    }

    /// Finds a transfer that `caller` may finish as its payee.
    fn payee_transfer(
        &self,
        transfer_id: TransferId,
        caller: FspName,
    ) -> Result<TransferRef<'_>, Rejection> {
        let transfer = self.transfers.get(&transfer_id).ok_or_else(|| {
            Rejection::new(
                ErrorCode::TRANSFER_ID_NOT_FOUND,
                format!("transfer {transfer_id} not found"),
            )
        })?;
        if transfer.kind != TransferKind::Fspiop {
            return Err(Self::not_a_transfer(transfer_id, transfer.kind));
        }
        let payee = self
            .participant(self.account(transfer.credit).participant)
            .name;
        if payee != caller {
            return Err(Rejection::not_party(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                format!("'{caller}' is not the payee of transfer {transfer_id}"),
            ));
        }
        Ok(transfer)
    }

    pub(crate) fn fulfil(&mut self, fulfil: &Fulfil) -> Result<Outcome, Rejection> {
        let transfer_id = fulfil.transfer_id;
        if let Some(stored) = self.beyond_memory(transfer_id)? {
            let kind = FinishKind::Fulfil;
            return Self::finish_stored(&stored, kind, fulfil.request_hash, fulfil.caller);
        }
        let transfer = self.payee_transfer(transfer_id, fulfil.caller)?;
        if let Some(duplicate) = self.check_finish_duplicate(
            transfer_id,
            &transfer,
            FinishKind::Fulfil,
            fulfil.request_hash,
        )? {
            return Ok(duplicate);
        }
        if transfer.state != TransferState::Reserved {
            return Err(Self::not_reserved(transfer_id, transfer.state));
        }
        let (hash, fulfilment) = (fulfil.request_hash, fulfil.fulfilment);
        let condition = transfer.condition;
        if self.now_ms >= transfer.expiration_ms {
            return self.fulfilled_too_late(transfer_id, hash, "transfer");
        }
        if let Some(failed) =
            self.abort_unless_to_payer(transfer_id, FinishKind::Fulfil, fulfil.destination, hash)?
        {
            return Ok(failed);
        }
        let Some(fulfilment) = fulfilment.filter(|f| f.condition() == condition) else {
            return self.abort_by_hub(
                transfer_id,
                FinishKind::Fulfil,
                AbortCause::InvalidFulfilment,
                hash,
            );
        };
        let view = self.finish(
            transfer_id,
            FinishKind::Fulfil,
            TransferState::Committed,
            None,
            None,
            hash,
            Some(fulfilment),
        )?;
        Ok(Outcome::Transfer(view))
    }

    pub(crate) fn abort(&mut self, abort: &Abort) -> Result<Outcome, Rejection> {
        let transfer_id = abort.transfer_id;
        if let Some(stored) = self.beyond_memory(transfer_id)? {
            let kind = FinishKind::Abort;
            return Self::finish_stored(&stored, kind, abort.request_hash, abort.caller);
        }
        let transfer = self.payee_transfer(transfer_id, abort.caller)?;
        if let Some(duplicate) = self.check_finish_duplicate(
            transfer_id,
            &transfer,
            FinishKind::Abort,
            abort.request_hash,
        )? {
            return Ok(duplicate);
        }
        if transfer.state != TransferState::Reserved {
            return Err(Self::not_reserved(transfer_id, transfer.state));
        }
        if let Some(failed) = self.abort_unless_to_payer(
            transfer_id,
            FinishKind::Abort,
            abort.destination,
            abort.request_hash,
        )? {
            return Ok(failed);
        }
        if !abort.error_code.is_valid() {
            return Err(validation(format!(
                "error code {} is not an FSPIOP error code",
                abort.error_code.0
            )));
        }
        let view = self.finish(
            transfer_id,
            FinishKind::Abort,
            TransferState::Aborted,
            Some(abort.error_code),
            None,
            abort.request_hash,
            None,
        )?;
        Ok(Outcome::Transfer(view))
    }

    /// A fulfil (or an FXP's acceptance) at or after the expiration: the
    /// transfer (`what`) expires now, with its partner, and the sender is
    /// told 3303.
    pub(crate) fn fulfilled_too_late(
        &mut self,
        transfer_id: TransferId,
        request_hash: RequestHash,
        what: &str,
    ) -> Result<Outcome, Rejection> {
        let code = ErrorCode::TRANSFER_EXPIRED;
        let view = self.finish(
            transfer_id,
            FinishKind::Fulfil,
            TransferState::Expired,
            Some(code),
            None,
            request_hash,
            None,
        )?;
        let error = Rejection::new(
            code,
            format!("{what} {transfer_id} was fulfilled at or after its expiration"),
        );
        Ok(Outcome::Failed {
            transfer: view,
            error,
        })
    }

    /// The payee's message about a reserved transfer named another
    /// FSPIOP-Destination than the payer: central-ledger aborts the
    /// transfer (3100) rather than let the payer miss its outcome. `None`:
    /// addressed to the payer, or to nobody.
    fn abort_unless_to_payer(
        &mut self,
        transfer_id: TransferId,
        kind: FinishKind,
        destination: Option<FspName>,
        request_hash: RequestHash,
    ) -> Result<Option<Outcome>, Rejection> {
        let Some(destination) = destination else {
            return Ok(None);
        };
        let payer = self.fspiop_payer(&self.transfers.held(&transfer_id));
        if payer == destination {
            return Ok(None);
        }
        let cause = AbortCause::DestinationNotPayer;
        self.abort_by_hub(transfer_id, kind, cause, request_hash)
            .map(Some)
    }

    /// Aborts a reserved transfer for the payee's faulty message (3100 with
    /// `cause`): its final state, told to the payer as the refusal.
    fn abort_by_hub(
        &mut self,
        transfer_id: TransferId,
        kind: FinishKind,
        cause: AbortCause,
        request_hash: RequestHash,
    ) -> Result<Outcome, Rejection> {
        let code = ErrorCode::GENERIC_VALIDATION_ERROR;
        let view = self.finish(
            transfer_id,
            kind,
            TransferState::Aborted,
            Some(code),
            Some(cause),
            request_hash,
            None,
        )?;
        Ok(Outcome::Failed {
            transfer: view,
            error: Rejection::new(code, cause.description()),
        })
    }

    pub(crate) fn get_transfer(
        &self,
        transfer_id: TransferId,
        caller: FspName,
    ) -> Result<Outcome, Rejection> {
        let (view, _) = self.transfer_view(transfer_id)?;
        if view.kind == TransferKind::FxConversion {
            return Err(Self::transfer_not_found(transfer_id));
        }
        if caller != view.payer && caller != view.payee {
            return Err(Rejection::not_party(
                ErrorCode::GENERIC_CLIENT_ERROR,
                format!("'{caller}' is neither the payer nor the payee of transfer {transfer_id}"),
            ));
        }
        Ok(Outcome::Transfer(view))
    }

    /// A transfer, without the parties' check: from memory, or the store's
    /// copy of one that left it ([`Outcome::StoredTransfer`]).
    pub(crate) fn read_transfer(&self, transfer_id: TransferId) -> Result<Outcome, Rejection> {
        Ok(match self.transfer_view(transfer_id)? {
            (view, Held::InMemory) => Outcome::Transfer(view),
            (view, Held::InStore) => Outcome::StoredTransfer(view),
        })
    }

    pub(crate) fn transfer_not_found(transfer_id: TransferId) -> Rejection {
        Rejection::new(
            ErrorCode::TRANSFER_ID_NOT_FOUND,
            format!("transfer {transfer_id} not found"),
        )
    }

    pub(crate) fn transfer_view(
        &self,
        transfer_id: TransferId,
    ) -> Result<(TransferView, Held), Rejection> {
        if let Some(transfer) = self.transfers.get(&transfer_id) {
            return Ok((self.view(transfer_id, &transfer), Held::InMemory));
        }
        match self.beyond_memory(transfer_id)? {
            Some(stored) => Ok((stored.view, Held::InStore)),
            None => Err(Self::transfer_not_found(transfer_id)),
        }
    }

    pub(crate) fn expire(&mut self) -> Outcome {
        let mut expired = Vec::new();
        while let Some(&(expiration_ms, transfer_id)) = self.expiry.first() {
            if expiration_ms > self.now_ms {
                break;
            }
            let code = Some(ErrorCode::TRANSFER_EXPIRED);
            let partner = self.reserved_partner(transfer_id);
            match self.finish(
                transfer_id,
                FinishKind::Expiry,
                TransferState::Expired,
                code,
                None,
                RequestHash::default(),
                None,
            ) {
                Ok(view) => {
                    expired.push(view);
                    expired.extend(partner.map(|partner| self.view_of(partner)));
                }
                // Releasing a hold cannot overflow; should it, keep the
                // transfer reserved rather than spin on it.
                Err(_) => {
                    self.expiry.remove(&(expiration_ms, transfer_id));
                }
            }
        }
        Outcome::Expired(expired)
    }
}

/// Whose position a prepare reserves: the payer's, or (for the transfer a
/// conversion depends on) the FXP's in the target currency. Names the
/// debtor in a refusal's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Debtor {
    Payer,
    Fxp,
}

impl Debtor {
    fn word(self) -> &'static str {
        match self {
            Debtor::Payer => "payer FSP",
            Debtor::Fxp => "FXP",
        }
    }
}

/// A finish checked by [`Ledger::plan_finish`], to apply.
pub(crate) struct FinishPlan {
    transfer_id: TransferId,
    state: TransferState,
    released: Amount,
    posted: Option<(Amount, Amount)>,
    window_commit: Option<crate::settlement::WindowCommit>,
    gross: Option<[crate::settlement::Posting; 2]>,
}
