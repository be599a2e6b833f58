//! Bounded memory: finished FSPIOP transfers leave memory once they are
//! older than the retention horizon ([`Limits::transfer_retention_ms`]), or
//! sooner, oldest first, while more than
//! [`Limits::max_finished_in_memory`] are held; the hub answers `GET`s and
//! duplicates of those no longer held from the store.
//!
//! Eviction writes no record: the store keeps every transfer, and recovery
//! loads only the unfinished ones and those finished within the horizon.
//!
//! Why a prepare can never reuse an evicted id (no double payment): the hub
//! reads the count `K` of transfers evicted so far, as the pipeline
//! published it after the ledger's last eviction, then looks the prepare's
//! id up in the store, and sends
//! [`Command::PrepareChecked`](crate::Command::PrepareChecked) with `K` only
//! if the store did not know the id. A transfer is evicted only once its
//! finish is durable (the pipeline says which batches are), and evicted ids
//! are remembered, in eviction order, for a grace period (an id and an
//! instant, ~50 bytes each). The `n`-th eviction with `n < K` happened before
//! `K` was published, hence before the store read began, so the read saw
//! that transfer. The ledger takes an unknown id as new only if every
//! eviction from the `K`-th on is still remembered (fewer than `K + 1` were
//! forgotten); if not, the check is too old to trust and the prepare is
//! refused with 2003 (resend), which needs it to wait for the whole grace
//! period between the hub's check and the ledger.
//!
//! A one-thread pipeline checks more cheaply:
//! [`Command::PrepareWithLookup`](crate::Command::PrepareWithLookup). The
//! ledger's own thread looks the id up in the store just before it applies
//! the batch, on the store's writer connection, for every id the ledger
//! does not hold. Every batch before is committed and every eviction so
//! far was of a durable transfer, so the store has whatever the ledger let
//! go, and the ledger holds whatever is newer: no eviction count is
//! needed, and the ledger refuses a prepare whose id was neither held nor
//! looked up.
//!
//! Funds movements (admin) are few and never leave memory.

use std::collections::{HashMap, VecDeque};

use crate::error::{ErrorCode, Rejection};
use crate::ids::TransferId;
use crate::ledger::Ledger;

/// How long evicted ids are remembered: far longer than any hub's store
/// check takes to reach the ledger, and short enough that remembering
/// costs little (~50 bytes per transfer of the last minute).
const GRACE_MS: i64 = 60_000;

#[derive(Default)]
pub(crate) struct Retention {
    /// Batches applied since this ledger was made (restored ones count 0).
    pub(crate) batches: u64,
    /// Finished FSPIOP transfers still in memory, in finishing order:
    /// (finished at, batch that finished it, id).
    finished: VecDeque<(i64, u64, TransferId)>,
    /// Ids evicted within the grace period, with when.
    evicted: HashMap<TransferId, i64>,
    evicted_order: VecDeque<(i64, TransferId)>,
    evicted_total: u64,
    /// Evicted ids forgotten (the first ones evicted, in order).
    forgotten_total: u64,
    /// Recorded quotes (persistent mode) in memory, in the order received:
    /// (received at, batch that recorded it, id).
    quotes: VecDeque<(i64, u64, TransferId)>,
    quotes_evicted_total: u64,
}

impl Retention {
    pub(crate) fn finished(&mut self, at_ms: i64, transfer_id: TransferId) {
        self.finished.push_back((at_ms, self.batches, transfer_id));
    }

    pub(crate) fn quote_recorded(&mut self, at_ms: i64, quote_id: TransferId) {
        self.quotes.push_back((at_ms, self.batches, quote_id));
    }

    /// Restored quotes are durable: batch 0.
    pub(crate) fn restored_quotes(&mut self, mut quotes: Vec<(i64, TransferId)>) {
        quotes.sort_unstable();
        self.quotes
            .extend(quotes.into_iter().map(|(at_ms, id)| (at_ms, 0, id)));
    }

    /// Restored transfers are durable: batch 0.
    pub(crate) fn restored(&mut self, mut finished: Vec<(i64, TransferId)>) {
        finished.sort_unstable();
        self.finished
            .extend(finished.into_iter().map(|(at_ms, id)| (at_ms, 0, id)));
    }
}

impl Ledger {
    /// Batches applied by this ledger so far; the pipeline tells
    /// [`Ledger::evict`] how many of them are durable.
    pub fn batches_applied(&self) -> u64 {
        self.retention.batches
    }

    /// Finished FSPIOP transfers evicted so far by this ledger: what the hub
    /// reads before its store check (see
    /// [`Command::PrepareChecked`](crate::Command::PrepareChecked)).
    pub fn transfers_evicted(&self) -> u64 {
        self.retention.evicted_total
    }

    /// Evicted ids still remembered (the grace period).
    pub fn evicted_ids_remembered(&self) -> usize {
        self.retention.evicted.len()
    }

    /// When [`Ledger::evict`] next has work, if ever (without a retention
    /// horizon, never).
    pub fn next_eviction_ms(&self) -> Option<i64> {
        let retention_ms = self.limits().transfer_retention_ms?;
        let crowded = self.retention.finished.len() > self.limits().max_finished_in_memory;
        let finished = self
            .retention
            .finished
            .front()
            .map(|&(at_ms, _, _)| match crowded {
                true => self.now_ms,
                false => at_ms.saturating_add(retention_ms),
            });
        let forgotten = self
            .retention
            .evicted_order
            .front()
            .map(|&(at_ms, _)| at_ms.saturating_add(GRACE_MS));
        let crowded_quotes = self.quotes.len() > self.limits().max_quotes;
        let quotes = self
            .retention
            .quotes
            .front()
            .map(|&(at_ms, _, _)| match crowded_quotes {
                true => self.now_ms,
                false => at_ms.saturating_add(retention_ms),
            });
        finished.into_iter().chain(forgotten).chain(quotes).min()
    }

    /// Removes from memory, at time `now_ms`, finished FSPIOP transfers
    /// older than the retention horizon whose finish was applied in one of
    /// the first `durable_batches` batches (so the store has it), and
    /// forgets evicted ids past their grace period; at most `budget` of
    /// both, so that no call stalls the ledger thread. Changes nothing
    /// durable and nothing a command observes except through the store.
    /// Returns how many transfers left.
    pub fn evict(&mut self, now_ms: i64, durable_batches: u64, budget: usize) -> usize {
        self.now_ms = self.now_ms.max(now_ms);
        let Some(retention_ms) = self.limits().transfer_retention_ms else {
            return 0;
        };
        let now_ms = self.now_ms;
        let grace = GRACE_MS;
        let most = self.limits().max_finished_in_memory;
        let mut spent = 0;
        let retention = &mut self.retention;
        while spent < budget {
            match retention.evicted_order.front() {
                Some(&(at_ms, id)) if at_ms.saturating_add(grace) <= now_ms => {
                    retention.evicted_order.pop_front();
                    retention.evicted.remove(&id);
                    retention.forgotten_total += 1;
                    spent += 1;
                }
                _ => break,
            }
        }
        let mut evicted = 0;
        while spent < budget {
            // Past the horizon, or crowded: the oldest leave first either way.
            let crowded = retention.finished.len() > most;
            match retention.finished.front() {
                Some(&(at_ms, batch, id))
                    if (crowded || at_ms.saturating_add(retention_ms) <= now_ms)
                        && batch <= durable_batches =>
                {
                    retention.finished.pop_front();
                    if self.transfers.remove(&id).is_some() {
                        retention.evicted.insert(id, now_ms);
                        retention.evicted_order.push_back((now_ms, id));
                        retention.evicted_total += 1;
                        evicted += 1;
                    }
                    spent += 1;
                }
                _ => break,
            }
        }
        // Quotes: the hub asks the store about ids it does not hold.
        let most_quotes = self.limits().max_quotes;
        while spent < budget {
            let crowded = self.quotes.len() > most_quotes;
            match self.retention.quotes.front() {
                Some(&(at_ms, batch, id))
                    if (crowded || at_ms.saturating_add(retention_ms) <= now_ms)
                        && batch <= durable_batches =>
                {
                    self.retention.quotes.pop_front();
                    if self.quotes.remove(&id).is_some() {
                        self.retention.quotes_evicted_total += 1;
                    }
                    spent += 1;
                }
                _ => break,
            }
        }
        evicted
    }

    /// Recorded quotes (persistent mode) in memory.
    pub fn quote_count(&self) -> usize {
        self.quotes.len()
    }

    /// Recorded quotes evicted so far.
    pub fn quotes_evicted(&self) -> u64 {
        self.retention.quotes_evicted_total
    }

    /// The part of the duplicate rule for an id not in memory.
    pub(crate) fn check_not_evicted(
        &self,
        transfer_id: TransferId,
        evictions_seen: Option<u64>,
    ) -> Result<(), Rejection> {
        if self.limits().transfer_retention_ms.is_none() {
            return Ok(());
        }
        if self.retention.evicted.contains_key(&transfer_id) {
            return Err(Rejection::new(
                ErrorCode::MODIFIED_REQUEST,
                format!("transfer {transfer_id} was received before (it has finished)"),
            ));
        }
        match evictions_seen {
            Some(seen) if self.retention.forgotten_total > seen => Err(Rejection::new(
                ErrorCode::SERVICE_UNAVAILABLE,
                format!("transfer {transfer_id} waited too long to be applied; resend it"),
            )),
            _ => Ok(()),
        }
    }
}
