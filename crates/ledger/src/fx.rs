//! Foreign exchange, FSPIOP v2.0 payer conversion: conversions
//! (fxTransfers), the transfer each depends on, and the FXPs' corridors.
//!
//! A conversion is a transfer of its own kind ([`TransferKind::FxConversion`])
//! from the initiating DFSP's source-currency position to the FXP's, by the
//! source amount; the transfer it depends on (the one whose `transferId` is
//! the conversion's `determiningTransferId`) is an ordinary transfer from the
//! FXP's target-currency position to the payee's. So the four movements of
//! Mojaloop's payer conversion (fx-research §6.3) are the two transfers'
//! postings, each currency sums to zero at every step, and the windows, the
//! retention horizon, recovery and the audit treat a conversion as a
//! transfer.
//!
//! | Step | Conversion (source currency) | Dependent transfer (target currency) |
//! |---|---|---|
//! | `POST /fxTransfers` | RESERVED: payer's position holds the source amount (4001/4200 checked) | |
//! | FXP `PUT /fxTransfers/{ID}` | still RESERVED, accepted: nothing moves | |
//! | `POST /transfers` | | RESERVED: the FXP's position holds the amount (its own 4001/4200) |
//! | payee `PUT /transfers/{ID}` | COMMITTED | COMMITTED — in one step ([`FinishKind::Linked`]) |
//!
//! Any end but a commit ends both in the same step, with every hold
//! released once: the FXP's error, a wrong fulfilment, the payee's error,
//! either's expiry, the FXP's refusal at the dependent prepare. Where
//! central-ledger leaves a conversion half done (fx-research §10), the
//! ledger does not: it checks the dependent transfer against the
//! conversion, commits both legs in one step, and never expires a
//! conversion whose transfer committed (both finish together).

use crate::crypto::RequestHash;
use crate::error::{ErrorCode, Rejection};
use crate::ids::{AccountId, FspName, TransferId};
use crate::ledger::{validation, FxSlot, Ledger, Transfer};
use crate::model::*;
use crate::modes::{mode_refusal, Side};
use crate::transfer_map::TransferRef;
use crate::transfers::Debtor;

impl Ledger {
    /// The FX side of a transfer's view, and its FSPIOP payer.
    pub(crate) fn fx_view(&self, slot: &FxSlot, debit_owner: FspName) -> (FspName, Option<FxView>) {
        match slot.link {
            FxLink::Conversion(terms) => {
                let view = FxView::Conversion {
                    terms,
                    fxp_fulfilled_at_ms: slot.fxp_fulfil.as_ref().map(|row| row.at_ms),
                };
                (debit_owner, Some(view))
            }
            FxLink::Dependent {
                commit_request_id,
                payer,
            } => {
                let view = FxView::Dependent {
                    commit_request_id,
                    fxp: debit_owner,
                };
                (self.participant(payer).name, Some(view))
            }
        }
    }

    /// The transfer that depends on conversion `commit_request_id`, once
    /// prepared.
    fn dependent_of(
        &self,
        commit_request_id: TransferId,
        terms: &ConversionTerms,
    ) -> Option<TransferRef<'_>> {
        let dependent = self.transfers.get(&terms.determining_transfer_id)?;
        match dependent.fx.as_deref()?.link {
            FxLink::Dependent {
                commit_request_id: of,
                ..
            } if of == commit_request_id => Some(dependent),
            _ => None,
        }
    }

    /// The reserved partner of a reserved conversion or dependent
    /// transfer, which must finish with it.
    pub(crate) fn reserved_partner(&self, transfer_id: TransferId) -> Option<TransferId> {
        let transfer = self.transfers.get(&transfer_id)?;
        let partner = match transfer.fx.as_deref()?.link {
            FxLink::Conversion(terms) => {
                self.dependent_of(transfer_id, &terms)?;
                terms.determining_transfer_id
            }
            FxLink::Dependent {
                commit_request_id, ..
            } => commit_request_id,
        };
        let reserved = self.transfers.get(&partner)?.state == TransferState::Reserved;
        reserved.then_some(partner)
    }

    /// The conversion a `POST /transfers` with this id depends on: the
    /// latest one in memory whose `determiningTransferId` it is.
    pub(crate) fn conversion_for(&self, transfer_id: TransferId) -> Option<TransferId> {
        // Every prepare asks; a hub without conversions pays no hashing.
        if self.conversions_by_determining.is_empty() {
            return None;
        }
        let conversion = *self.conversions_by_determining.get(&transfer_id)?;
        self.holds_transfer(conversion).then_some(conversion)
    }

    /// Checks a transfer against the conversion it depends on (central-
    /// ledger checks none of it, fx-research §10.4) and returns the account
    /// it is paid from, the FXP's target-currency position, and its link.
    pub(crate) fn dependent_debit(
        &self,
        prepare: &Prepare,
        commit_request_id: TransferId,
    ) -> Result<(AccountId, FxLink), Rejection> {
        let conversion = self.transfers.held(&commit_request_id);
        let Some(FxLink::Conversion(terms)) = conversion.fx.as_deref().map(|slot| slot.link) else {
            unreachable!("the index holds conversions only");
        };
        let id = prepare.transfer_id;
        if conversion.state != TransferState::Reserved {
            return Err(Self::conversion_ended(
                id,
                commit_request_id,
                conversion.state,
            ));
        }
        if conversion
            .fx
            .as_deref()
            .is_some_and(|slot| slot.fxp_fulfil.is_none())
        {
            // Central-ledger's words.
            return Err(validation(format!(
                "Related FX Transfer is not fulfilled: conversion {commit_request_id} awaits the FXP"
            )));
        }
        if conversion.expiration_ms <= self.now_ms {
            return Err(Rejection::new(
                ErrorCode::TRANSFER_EXPIRED,
                format!(
                    "conversion {commit_request_id}, which transfer {id} depends on, has expired"
                ),
            ));
        }
        let initiating = self.account(conversion.debit).participant;
        let initiating_name = self.participant(initiating).name;
        if prepare.payer != initiating_name {
            return Err(Rejection::not_party(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                format!(
                    "payer '{}' is not the initiating DFSP of conversion {commit_request_id}",
                    prepare.payer
                ),
            ));
        }
        let payer = self.participant(initiating);
        if let Some(refusal) = mode_refusal(payer.name, payer.mode, Side::Payer) {
            return Err(refusal);
        }
        if prepare.currency != terms.target_currency {
            return Err(validation(format!(
                "transfer {id} is in {}, conversion {commit_request_id} converts into {}",
                prepare.currency, terms.target_currency
            )));
        }
        if prepare.amount > terms.target_amount {
            return Err(validation(format!(
                "transfer {id} of {} is above the {} {} conversion {commit_request_id} converts into",
                prepare.amount, terms.target_amount, terms.target_currency
            )));
        }
        let fxp = self.account(conversion.credit).participant;
        let fxp_name = self.participant(fxp).name;
        if prepare.payee == fxp_name {
            return Err(validation(format!(
                "the payee of transfer {id} is the FXP of conversion {commit_request_id}"
            )));
        }
        let fxp_position = self.active_position(fxp_name, terms.target_currency, Side::Payer)?;
        Ok((
            fxp_position,
            FxLink::Dependent {
                commit_request_id,
                payer: initiating,
            },
        ))
    }

    /// The refusal of a transfer whose conversion ended before it came.
    pub(crate) fn conversion_ended(
        transfer_id: TransferId,
        commit_request_id: TransferId,
        state: TransferState,
    ) -> Rejection {
        validation(format!(
            "transfer {transfer_id} depends on conversion {commit_request_id}, which is {}",
            state.as_str()
        ))
    }

    pub(crate) fn prepare_conversion(
        &mut self,
        prepare: &PrepareConversion,
    ) -> Result<Outcome, Rejection> {
        let id = prepare.commit_request_id;
        if let Some(duplicate) = self.check_new_transfer(id, prepare.request_hash)? {
            if let Outcome::Duplicate(view) = &duplicate {
                if view.kind != TransferKind::FxConversion {
                    return Err(crate::ledger::modified_prepare(id));
                }
            }
            return Ok(duplicate);
        }
        let terms = prepare.terms;
        let source_ok = prepare.source_amount.is_valid_transfer_amount();
        if !source_ok || !terms.target_amount.is_valid_transfer_amount() {
            return Err(validation(
                "amounts must be above 0, with at most 18 integer digits and 4 decimals",
            ));
        }
        if prepare.source_currency == terms.target_currency {
            return Err(validation(format!(
                "conversion {id} converts {} into {}: the currencies must differ",
                prepare.source_currency, terms.target_currency
            )));
        }
        if prepare.initiating == prepare.fxp {
            return Err(validation(format!(
                "initiating DFSP and FXP are both '{}'",
                prepare.initiating
            )));
        }
        let determining = terms.determining_transfer_id;
        if determining == id {
            return Err(validation(format!(
                "conversion {id} names itself as its determining transfer"
            )));
        }
        if let Some(existing) = self.conversion_for(determining) {
            if self.transfers.held(&existing).state == TransferState::Reserved {
                return Err(validation(format!(
                    "transfer {determining} already has conversion {existing}, RESERVED"
                )));
            }
        }
        if self.holds_transfer(determining) || self.stored_transfer(determining)?.is_some() {
            return Err(validation(format!(
                "transfer {determining} exists already: a conversion must come before the transfer it determines"
            )));
        }
        let payer_position =
            self.active_position(prepare.initiating, prepare.source_currency, Side::Payer)?;
        let fxp_source = self.active_position(prepare.fxp, prepare.source_currency, Side::Payee)?;
        // The FXP pays the dependent transfer from its target position:
        // without one (or while it may not pay) the conversion could never
        // complete.
        self.active_position(prepare.fxp, terms.target_currency, Side::Payer)?;
        if prepare.expiration_ms <= self.now_ms {
            return Err(Rejection::new(
                ErrorCode::TRANSFER_EXPIRED,
                format!("conversion {id} expired before it was prepared"),
            ));
        }
        let amount = prepare.source_amount;
        let refusal = self.position_refusal(payer_position, amount, Debtor::Payer)?;
        let state = match refusal {
            Some(_) => TransferState::Rejected,
            None => TransferState::Reserved,
        };
        if state == TransferState::Reserved {
            self.reserve(payer_position, amount)?;
            self.expiry.insert((prepare.expiration_ms, id));
        }
        let conversion = self.insert_transfer(
            id,
            Transfer {
                seq: 0,
                kind: TransferKind::FxConversion,
                debit: payer_position,
                credit: fxp_source,
                amount,
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
                fx: Some(Box::new(FxSlot {
                    link: FxLink::Conversion(terms),
                    fxp_fulfil: None,
                })),
            },
        );
        self.conversions_by_determining.insert(determining, id);
        Ok(match refusal {
            Some(error) => Outcome::Failed {
                transfer: conversion,
                error,
            },
            None => Outcome::Transfer(conversion),
        })
    }

    /// A conversion `caller` may answer as its FXP.
    fn fxp_conversion(
        &self,
        commit_request_id: TransferId,
        caller: FspName,
    ) -> Result<TransferRef<'_>, Rejection> {
        let conversion = self
            .transfers
            .get(&commit_request_id)
            .filter(|transfer| transfer.kind == TransferKind::FxConversion)
            .ok_or_else(|| conversion_not_found(commit_request_id))?;
        let fxp = self.participant(self.account(conversion.credit).participant);
        if fxp.name != caller {
            return Err(Rejection::not_party(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                format!("'{caller}' is not the FXP of conversion {commit_request_id}"),
            ));
        }
        Ok(conversion)
    }

    /// The FXP's message about a conversion that left memory: finished, so
    /// a resend (duplicate), a modified one (3106), or one too late.
    fn answer_stored_conversion(
        stored: &crate::prefetch::StoredTransfer,
        caller: FspName,
        kind: FinishKind,
        request_hash: RequestHash,
    ) -> Result<Outcome, Rejection> {
        let view = stored.view;
        let id = view.transfer_id;
        if view.kind != TransferKind::FxConversion {
            return Err(conversion_not_found(id));
        }
        if view.payee != caller {
            return Err(Rejection::not_party(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                format!("'{caller}' is not the FXP of conversion {id}"),
            ));
        }
        let seen = match kind {
            FinishKind::Fulfil => stored.fxp_fulfil.map(|(hash, _)| hash),
            _ => stored
                .finish
                .filter(|&(finished_by, _)| finished_by == kind)
                .map(|(_, hash)| hash),
        };
        match seen {
            Some(hash) if hash == request_hash => Ok(Outcome::Duplicate(view)),
            Some(_) => Err(modified_answer(id, kind)),
            None => Err(Ledger::not_reserved(id, view.state)),
        }
    }

    pub(crate) fn fulfil_conversion(
        &mut self,
        fulfil: &FulfilConversion,
    ) -> Result<Outcome, Rejection> {
        let id = fulfil.commit_request_id;
        let hash = fulfil.request_hash;
        if let Some(stored) = self.beyond_memory(id)? {
            return Self::answer_stored_conversion(
                &stored,
                fulfil.caller,
                FinishKind::Fulfil,
                hash,
            );
        }
        let conversion = self.fxp_conversion(id, fulfil.caller)?;
        let accepted = conversion
            .fx
            .as_deref()
            .and_then(|slot| slot.fxp_fulfil.as_ref());
        match accepted.map(|row| row.request_hash) {
            Some(seen) if seen == hash => {
                return Ok(Outcome::Duplicate(self.view(id, &conversion)));
            }
            Some(_) => return Err(modified_answer(id, FinishKind::Fulfil)),
            None => {}
        }
        if conversion.state != TransferState::Reserved {
            return Err(Self::not_reserved(id, conversion.state));
        }
        if self.now_ms >= conversion.expiration_ms {
            return self.fulfilled_too_late(id, hash, "conversion");
        }
        let initiating = self.account(conversion.debit).participant;
        let initiating = self.participant(initiating).name;
        let condition = conversion.condition;
        if fulfil.destination.is_some_and(|to| to != initiating) {
            return self.abort_conversion_by_hub(id, AbortCause::DestinationNotPayer, hash);
        }
        let Some(fulfilment) = fulfil.fulfilment.filter(|f| f.condition() == condition) else {
            return self.abort_conversion_by_hub(id, AbortCause::InvalidFulfilment, hash);
        };
        let now_ms = self.now_ms;
        let conversion = self.transfers.get_mut(&id).expect("looked up above");
        conversion.fulfilment = Some(fulfilment);
        let row = ConversionFulfilRow {
            seq: conversion.seq,
            fulfilment,
            request_hash: hash,
            at_ms: now_ms,
        };
        let slot = conversion
            .fx
            .as_deref_mut()
            .expect("a conversion has terms");
        slot.fxp_fulfil = Some(row.clone());
        self.push_record(Record::ConversionFulfilled(row));
        Ok(Outcome::Transfer(self.view_of(id)))
    }

    /// Aborts a conversion for the FXP's faulty message (3100 with
    /// `cause`), with its dependent transfer if one is reserved.
    fn abort_conversion_by_hub(
        &mut self,
        commit_request_id: TransferId,
        cause: AbortCause,
        request_hash: RequestHash,
    ) -> Result<Outcome, Rejection> {
        let code = ErrorCode::GENERIC_VALIDATION_ERROR;
        let view = self.finish(
            commit_request_id,
            FinishKind::Fulfil,
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

    pub(crate) fn abort_conversion(&mut self, abort: &Abort) -> Result<Outcome, Rejection> {
        let id = abort.transfer_id;
        let hash = abort.request_hash;
        if let Some(stored) = self.beyond_memory(id)? {
            return Self::answer_stored_conversion(&stored, abort.caller, FinishKind::Abort, hash);
        }
        let conversion = self.fxp_conversion(id, abort.caller)?;
        // The same rule and words as for a conversion read back from the
        // store (`answer_stored_conversion`).
        match conversion.finish {
            Some(finish) if finish.kind == FinishKind::Abort && finish.request_hash == hash => {
                return Ok(Outcome::Duplicate(self.view(id, &conversion)));
            }
            Some(finish) if finish.kind == FinishKind::Abort => {
                return Err(modified_answer(id, FinishKind::Abort));
            }
            _ => {}
        }
        if conversion.state != TransferState::Reserved {
            return Err(Self::not_reserved(id, conversion.state));
        }
        let initiating = self.account(conversion.debit).participant;
        let initiating = self.participant(initiating).name;
        if abort.destination.is_some_and(|to| to != initiating) {
            let cause = AbortCause::DestinationNotPayer;
            let code = ErrorCode::GENERIC_VALIDATION_ERROR;
            let kind = FinishKind::Abort;
            let aborted = TransferState::Aborted;
            let view = self.finish(id, kind, aborted, Some(code), Some(cause), hash, None)?;
            return Ok(Outcome::Failed {
                transfer: view,
                error: Rejection::new(code, cause.description()),
            });
        }
        if !abort.error_code.is_valid() {
            return Err(validation(format!(
                "error code {} is not an FSPIOP error code",
                abort.error_code.0
            )));
        }
        let view = self.finish(
            id,
            FinishKind::Abort,
            TransferState::Aborted,
            Some(abort.error_code),
            None,
            hash,
            None,
        )?;
        Ok(Outcome::Transfer(view))
    }

    pub(crate) fn get_conversion(
        &self,
        commit_request_id: TransferId,
        caller: FspName,
    ) -> Result<Outcome, Rejection> {
        let view = match self.transfer_view(commit_request_id) {
            Ok((view, _)) if view.kind == TransferKind::FxConversion => view,
            Ok(_) => return Err(conversion_not_found(commit_request_id)),
            Err(error) if error.code == ErrorCode::TRANSFER_ID_NOT_FOUND => {
                return Err(conversion_not_found(commit_request_id))
            }
            Err(error) => return Err(error),
        };
        if caller != view.payer && caller != view.payee {
            return Err(Rejection::not_party(
                ErrorCode::GENERIC_CLIENT_ERROR,
                format!(
                    "'{caller}' is neither the initiating DFSP nor the FXP of conversion {commit_request_id}"
                ),
            ));
        }
        Ok(Outcome::Transfer(view))
    }

    pub(crate) fn set_fxp_corridors(
        &mut self,
        name: FspName,
        corridors: &[Corridor],
    ) -> Result<Outcome, Rejection> {
        let participant = self.participant_id(name)?;
        if self.participant(participant).is_hub {
            return Err(validation("the hub cannot be an FXP"));
        }
        if corridors.len() > CORRIDORS_PER_FXP_MAX {
            return Err(validation(format!(
                "at most {CORRIDORS_PER_FXP_MAX} corridors per FXP"
            )));
        }
        if let Some(same) = corridors.iter().find(|c| c.source == c.target) {
            return Err(validation(format!(
                "a corridor converts between two currencies, not {} into itself",
                same.source
            )));
        }
        let mut corridors = corridors.to_vec();
        corridors.sort_unstable();
        corridors.dedup();
        let before = self.fxps.get(&participant);
        if before.map_or(corridors.is_empty(), |before| *before == corridors) {
            return Ok(Outcome::Done);
        }
        match corridors.is_empty() {
            true => self.fxps.remove(&participant),
            false => self.fxps.insert(participant, corridors.clone()),
        };
        self.push_record(Record::Fxp(FxpRow {
            participant,
            corridors,
        }));
        Ok(Outcome::Done)
    }

    pub(crate) fn read_fxps(&self) -> Outcome {
        let mut fxps: Vec<FxpView> = self
            .fxps
            .iter()
            .map(|(&id, corridors)| {
                let participant = self.participant(id);
                // The corridors whose two position accounts (taking the
                // source, paying the target) exist and are enabled, as
                // `prepare_conversion` needs them.
                let enabled = |currency| {
                    self.find_account(id, currency, AccountKind::Position)
                        .is_some_and(|account| self.account(account).active)
                };
                FxpView {
                    fsp: participant.name,
                    // An FXP takes the source currency and pays the
                    // target: it is offered only while it may do both.
                    active: crate::modes::may_convert(participant.mode),
                    corridors: corridors.clone(),
                    convertible: corridors
                        .iter()
                        .copied()
                        .filter(|corridor| enabled(corridor.source) && enabled(corridor.target))
                        .collect(),
                }
            })
            .collect();
        fxps.sort_by(|a, b| a.fsp.as_str().cmp(b.fsp.as_str()));
        Outcome::Fxps(fxps)
    }
}

fn conversion_not_found(commit_request_id: TransferId) -> Rejection {
    // Central-ledger's words.
    Rejection::new(
        ErrorCode::TRANSFER_ID_NOT_FOUND,
        format!("Provided commitRequest ID {commit_request_id} was not found on the server."),
    )
}

fn modified_answer(commit_request_id: TransferId, kind: FinishKind) -> Rejection {
    Rejection::new(
        ErrorCode::MODIFIED_REQUEST,
        format!(
            "conversion {commit_request_id} was answered before with a different body ({})",
            kind.as_str().to_lowercase()
        ),
    )
}
