//! Prefetch: what the store holds for the ids a batch names that the
//! ledger's memory does not, read before the batch is applied — as
//! TigerBeetle's state machine prefetches, then commits.
//!
//! With a retention horizon ([`Limits::transfer_retention_ms`]) finished
//! FSPIOP transfers and recorded quotes leave memory (`retention.rs`), so
//! an id the ledger does not hold may be new or may be in the store only.
//! The pipeline asks [`Ledger::prefetch_ids`] which ids those are, reads
//! them from the store in one read, and hands the answers to
//! [`Ledger::apply_batch_prefetched`]. The ledger alone then applies every
//! rule — the duplicate rule (FSPIOP §3.2.5.1), 3106 for a modified
//! request, 3208 for an unknown transfer — to memory or to the stored
//! copy; nobody else decides an outcome from the store.
//!
//! Why an evicted id can never be taken as new (no double payment): the
//! pipeline reads on the ledger's own thread, after the last eviction and
//! just before applying; a transfer is evicted only once the batch that
//! finished it is committed, so the read — which begins after that commit
//! returned — sees it. What the store does not have was never seen, or
//! is in memory (an uncommitted batch's transfers are never evicted). An
//! id neither in memory nor answered is refused (2003, retry): the rule is
//! never guessed.
//!
//! Without a horizon memory holds everything and nothing is prefetched.
//!
//! Nearly every id a batch names that memory does not hold is new (a fresh
//! prepare). [`LeftMemory`] remembers, without false negatives, every id
//! that left memory, so that such an id is read only when the filter says
//! it may have left; a fresh one needs no read at all. That holds only
//! while the filter saw every departure: a ledger restored with transfers
//! it did not load (summed past the horizon) does not know their ids, and
//! reads every id memory does not hold, as before. Quotes are always read.

use std::collections::HashMap;

use crate::error::{ErrorCode, Rejection};
use crate::ids::{Currency, FspName, TransferId};
use crate::ledger::Ledger;
use crate::model::{
    Command, ConversionFulfilRow, FinishKind, FinishRow, FxLink, FxView, QuoteRow, TransferRow,
    TransferView,
};
use crate::{BatchResult, RequestHash};

/// A transfer as the store holds it, with what the duplicate rules need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredTransfer {
    pub view: TransferView,
    /// The prepare's request hash.
    pub request_hash: RequestHash,
    /// What finished it, with that request's hash.
    pub finish: Option<(FinishKind, RequestHash)>,
    /// A conversion the FXP accepted: that request's hash, and when.
    pub fxp_fulfil: Option<(RequestHash, i64)>,
}

/// Who a stored transfer's accounts belong to, as the store names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredParties {
    /// The debit account's participant (the payer, or for a transfer a
    /// conversion depends on, the FXP).
    pub debit_owner: FspName,
    pub credit_owner: FspName,
    /// The payer of a transfer a conversion depends on: the participant
    /// of its [`FxLink::Dependent`].
    pub fx_payer: Option<FspName>,
}

impl StoredTransfer {
    /// How a stored transfer looks, from its rows: its finish, if any,
    /// decides its state, reason, completion instant and fulfilment.
    pub fn from_rows(
        transfer: &TransferRow,
        finish: Option<&FinishRow>,
        parties: StoredParties,
        currency: Currency,
        conversion_fulfil: Option<&ConversionFulfilRow>,
    ) -> StoredTransfer {
        let fx = transfer.fx.map(|link| match link {
            FxLink::Conversion(terms) => FxView::Conversion {
                terms,
                fxp_fulfilled_at_ms: conversion_fulfil.map(|row| row.at_ms),
            },
            FxLink::Dependent {
                commit_request_id, ..
            } => FxView::Dependent {
                commit_request_id,
                fxp: parties.debit_owner,
            },
        });
        let fulfilment = |finish: &FinishRow| {
            finish
                .fulfilment
                .or_else(|| conversion_fulfil.map(|row| row.fulfilment))
                .filter(|_| finish.state == crate::model::TransferState::Committed)
        };
        let (state, reason, completed_at_ms, fulfilment) = match finish {
            Some(finish) => (
                finish.state,
                finish.reason,
                Some(finish.finished_at_ms),
                fulfilment(finish),
            ),
            None => (
                transfer.state,
                transfer.reason,
                transfer.state.is_final().then_some(transfer.prepared_at_ms),
                conversion_fulfil.map(|row| row.fulfilment),
            ),
        };
        StoredTransfer {
            view: TransferView {
                transfer_id: transfer.transfer_id,
                kind: transfer.kind,
                payer: parties.fx_payer.unwrap_or(parties.debit_owner),
                payee: parties.credit_owner,
                amount: transfer.amount,
                currency,
                state,
                reason,
                cause: finish.and_then(|finish| finish.cause),
                expiration_ms: transfer.expiration_ms,
                prepared_at_ms: transfer.prepared_at_ms,
                completed_at_ms,
                fulfilment,
                wire_version: transfer.wire_version,
                fx,
                settlement_window: finish.and_then(|finish| finish.settlement_window),
            },
            request_hash: transfer.request_hash,
            finish: finish.map(|finish| (finish.kind, finish.request_hash)),
            fxp_fulfil: conversion_fulfil.map(|row| (row.request_hash, row.at_ms)),
        }
    }
}

/// The store's answer for one id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup<T> {
    /// The store has nothing with this id.
    Absent,
    Found(T),
    /// Its row could not be read (the pipeline logs why; a DFSP is told
    /// only to retry).
    Failed,
}

/// The ids a batch needs read from the store, each once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefetchIds {
    pub transfers: Vec<TransferId>,
    pub quotes: Vec<TransferId>,
    /// Prepares' ids that may be the `determiningTransferId` of a
    /// conversion that left memory: the store's latest conversion naming
    /// each (fx.rs: a transfer whose conversion ended is refused, not
    /// taken as an ordinary one).
    pub conversions: Vec<TransferId>,
}

impl PrefetchIds {
    pub fn is_empty(&self) -> bool {
        self.transfers.is_empty() && self.quotes.is_empty() && self.conversions.is_empty()
    }

    /// Ids read: a prepare's id asked both as a transfer and as a
    /// conversion's determining transfer counts once.
    pub fn len(&self) -> usize {
        let apart = self
            .conversions
            .iter()
            .filter(|id| self.transfers.binary_search(id).is_err())
            .count();
        self.transfers.len() + self.quotes.len() + apart
    }
}

/// The store's answers for a batch's [`PrefetchIds`].
#[derive(Clone, Debug, Default)]
pub struct Prefetched {
    pub transfers: HashMap<TransferId, Lookup<StoredTransfer>>,
    pub quotes: HashMap<TransferId, Lookup<QuoteRow>>,
    /// By determining transfer id: the latest conversion naming it.
    pub conversions: HashMap<TransferId, Lookup<StoredTransfer>>,
    /// Why each [`Lookup::Failed`] row could not be read, for the log.
    pub unreadable: Vec<String>,
}

impl Prefetched {
    /// Every id asked, unread: the read as a whole failed.
    pub fn failed(ids: &PrefetchIds) -> Prefetched {
        Prefetched {
            transfers: ids
                .transfers
                .iter()
                .map(|&id| (id, Lookup::Failed))
                .collect(),
            quotes: ids.quotes.iter().map(|&id| (id, Lookup::Failed)).collect(),
            conversions: ids
                .conversions
                .iter()
                .map(|&id| (id, Lookup::Failed))
                .collect(),
            unreadable: Vec::new(),
        }
    }
}

/// The ids of the transfers that left memory: a Bloom filter (no false
/// negatives; a false positive costs one read), of a fixed size however
/// many leave, so that as it fills it only reads more. Allocated at the
/// first departure.
#[derive(Clone, Debug)]
pub(crate) struct LeftMemory {
    words: Vec<u64>,
    /// Whether every id that ever left memory is in the filter.
    complete: bool,
}

/// 2^27 bits (16 MiB): 4 % false positives at 20 M departures, 36 % at 50 M
/// (then most fresh ids are read again, as without the filter).
const LEFT_MEMORY_BITS: u64 = 1 << 27;
const LEFT_MEMORY_HASHES: u64 = 4;

impl Default for LeftMemory {
    fn default() -> LeftMemory {
        LeftMemory {
            words: Vec::new(),
            complete: true,
        }
    }
}

impl LeftMemory {
    /// From now on the filter does not know every id that left memory.
    pub(crate) fn incomplete(&mut self) {
        self.complete = false;
    }

    pub(crate) fn insert(&mut self, transfer_id: TransferId) {
        if self.words.is_empty() {
            self.words = vec![0; (LEFT_MEMORY_BITS / 64) as usize];
        }
        for bit in bits_of(transfer_id) {
            self.words[(bit / 64) as usize] |= 1 << (bit % 64);
        }
    }

    /// Whether `transfer_id` may have left memory (and so must be read).
    pub(crate) fn may_hold(&self, transfer_id: TransferId) -> bool {
        if !self.complete {
            return true;
        }
        !self.words.is_empty()
            && bits_of(transfer_id)
                .all(|bit| self.words[(bit / 64) as usize] & (1 << (bit % 64)) != 0)
    }
}

/// The filter's bits of an id: double hashing of its 128 bits (and form).
fn bits_of(transfer_id: TransferId) -> impl Iterator<Item = u64> {
    let bits = transfer_id.bits();
    let tag = u64::from(transfer_id.form_tag());
    let h1 = mix((bits as u64) ^ mix((bits >> 64) as u64 ^ tag));
    let h2 = mix(h1 ^ 0x9e37_79b9_7f4a_7c15) | 1;
    (0..LEFT_MEMORY_HASHES).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % LEFT_MEMORY_BITS)
}

/// SplitMix64's finaliser.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Where the ids of one command are.
fn ids_of(command: &Command, transfers: &mut Vec<TransferId>, quotes: &mut Vec<TransferId>) {
    match command {
        Command::Prepare(prepare) => transfers.push(prepare.transfer_id),
        Command::Fulfil(fulfil) => transfers.push(fulfil.transfer_id),
        Command::Abort(abort) => transfers.push(abort.transfer_id),
        Command::FundsIn(funds) | Command::FundsOutReserve(funds) => {
            transfers.push(funds.transfer_id)
        }
        Command::FundsOutCommit(finish) | Command::FundsOutAbort(finish) => {
            transfers.push(finish.transfer_id)
        }
        Command::GetTransfer { transfer_id, .. } | Command::ReadTransfer { transfer_id } => {
            transfers.push(*transfer_id)
        }
        Command::PrepareConversion(prepare) => {
            transfers.push(prepare.commit_request_id);
            transfers.push(prepare.terms.determining_transfer_id);
        }
        Command::FulfilConversion(fulfil) => transfers.push(fulfil.commit_request_id),
        Command::AbortConversion(abort) => transfers.push(abort.transfer_id),
        Command::GetConversion {
            commit_request_id, ..
        } => transfers.push(*commit_request_id),
        Command::RecordQuote { quote_id, .. } | Command::AnswerQuote { quote_id, .. } => {
            quotes.push(*quote_id)
        }
        Command::Audited { command, tag } => {
            ids_of(command, transfers, quotes);
            if let Some(view) = tag.view.as_deref() {
                ids_of(view, transfers, quotes);
            }
        }
        _ => {}
    }
}

impl Ledger {
    /// Whether memory may lack a transfer or quote the store has (a
    /// retention horizon lets finished ones go).
    pub fn memory_is_partial(&self) -> bool {
        self.limits().transfer_retention_ms.is_some()
    }

    /// The ids `commands` name that memory does not hold and the store may:
    /// what the pipeline reads before [`Ledger::apply_batch_prefetched`].
    /// Empty without a retention horizon.
    pub fn prefetch_ids(&self, commands: &[Command]) -> PrefetchIds {
        if !self.memory_is_partial() {
            return PrefetchIds::default();
        }
        let mut transfers = Vec::new();
        let mut quotes = Vec::new();
        for command in commands {
            ids_of(command, &mut transfers, &mut quotes);
        }
        let left = &self.retention.left;
        // A prepare's id without a conversion in memory may name one that
        // left: retention puts the determining ids of the conversions it
        // evicts into the same filter.
        let mut conversions: Vec<TransferId> = commands
            .iter()
            .filter_map(|command| match command {
                Command::Prepare(prepare) => Some(prepare.transfer_id),
                _ => None,
            })
            .filter(|id| self.conversion_for(*id).is_none() && left.may_hold(*id))
            .collect();
        conversions.sort_unstable();
        conversions.dedup();
        transfers.retain(|id| !self.holds_transfer(*id) && left.may_hold(*id));
        quotes.retain(|id| !self.quotes.contains_key(id));
        transfers.sort_unstable();
        transfers.dedup();
        quotes.sort_unstable();
        quotes.dedup();
        PrefetchIds {
            transfers,
            quotes,
            conversions,
        }
    }

    /// [`Ledger::apply_batch`] with the store's answers for the batch's
    /// [`Ledger::prefetch_ids`], read after the last eviction.
    pub fn apply_batch_prefetched(
        &mut self,
        now_ms: i64,
        commands: &[Command],
        prefetched: Prefetched,
    ) -> BatchResult {
        self.prefetched = prefetched;
        let result = self.apply_batch(now_ms, commands);
        self.prefetched = Prefetched::default();
        result
    }

    /// The store's copy of a transfer memory does not hold: `None` when
    /// there is none (the id was never seen). Refused when the store was
    /// not read for it, or could not be.
    pub(crate) fn stored_transfer(
        &self,
        transfer_id: TransferId,
    ) -> Result<Option<&StoredTransfer>, Rejection> {
        if !self.memory_is_partial() || !self.retention.left.may_hold(transfer_id) {
            return Ok(None);
        }
        match self.prefetched.transfers.get(&transfer_id) {
            Some(Lookup::Absent) => Ok(None),
            Some(Lookup::Found(stored)) => Ok(Some(stored)),
            Some(Lookup::Failed) => Err(store_unread()),
            None => Err(not_prefetched("transfer", transfer_id)),
        }
    }

    /// The store's latest conversion whose determining transfer is
    /// `transfer_id`, when memory holds none (one that left memory is
    /// finished): `None` when there is none.
    pub(crate) fn stored_conversion_for(
        &self,
        transfer_id: TransferId,
    ) -> Result<Option<&StoredTransfer>, Rejection> {
        if !self.memory_is_partial() || !self.retention.left.may_hold(transfer_id) {
            return Ok(None);
        }
        match self.prefetched.conversions.get(&transfer_id) {
            Some(Lookup::Absent) => Ok(None),
            Some(Lookup::Found(stored)) => Ok(Some(stored)),
            Some(Lookup::Failed) => Err(store_unread()),
            None => Err(not_prefetched("conversion for transfer", transfer_id)),
        }
    }

    /// The store's copy of a recorded quote memory does not hold, as
    /// [`Ledger::stored_transfer`].
    pub(crate) fn stored_quote(
        &self,
        quote_id: TransferId,
    ) -> Result<Option<&QuoteRow>, Rejection> {
        if !self.memory_is_partial() {
            return Ok(None);
        }
        match self.prefetched.quotes.get(&quote_id) {
            Some(Lookup::Absent) => Ok(None),
            Some(Lookup::Found(row)) => Ok(Some(row)),
            Some(Lookup::Failed) => Err(store_unread()),
            None => Err(not_prefetched("quote", quote_id)),
        }
    }
}

/// Nothing is known about the id, so nothing is decided: the hub answers
/// 503 with Retry-After.
fn store_unread() -> Rejection {
    Rejection::new(
        ErrorCode::SERVICE_UNAVAILABLE,
        "the hub could not read its store; retry later",
    )
}

/// A pipeline that did not prefetch what the ledger asked: a bug, never a
/// guess (an unread id taken as new could pay twice).
fn not_prefetched(what: &str, id: TransferId) -> Rejection {
    Rejection::new(
        ErrorCode::SERVICE_UNAVAILABLE,
        format!("{what} {id} was not read from the store; retry later"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No false negatives, few false positives, and nothing known before
    /// anything left.
    #[test]
    fn the_filter_of_ids_that_left_holds_every_one_of_them() {
        let mut left = LeftMemory::default();
        let id =
            |n: u128| TransferId::new(n.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834));
        assert!(!left.may_hold(id(1)), "nothing left yet");
        for n in 0..100_000 {
            left.insert(id(n));
        }
        assert!((0..100_000).all(|n| left.may_hold(id(n))));
        let false_positives = (100_000..200_000).filter(|&n| left.may_hold(id(n))).count();
        assert!(false_positives < 10, "{false_positives} in 100,000");
        left.incomplete();
        assert!(
            left.may_hold(id(1_000_000)),
            "incomplete: everything may have left"
        );
    }
}
