//! Bounded memory: finished FSPIOP transfers leave memory once they are
//! older than the retention horizon ([`Limits::transfer_retention_ms`]), or
//! sooner, oldest first, while more than
//! [`Limits::max_finished_in_memory`] are held; the hub answers `GET`s and
//! duplicates of those no longer held from the store.
//!
//! Eviction writes no record: the store keeps every transfer, and recovery
//! loads only the unfinished ones and those finished within the horizon.
//!
//! An id that left memory is read back from the store before the batch
//! naming it is applied (`prefetch.rs`, which also says why an evicted id
//! can never be taken as new).
//!
//! Funds movements (admin) are few and never leave memory.
//!
//! The finished transfers held are in finishing order already (compactly,
//! `compact.rs`), so that order is the eviction queue: no list of its own.

use std::collections::{HashMap, VecDeque};

use crate::ids::TransferId;
use crate::ledger::Ledger;
use crate::model::FxLink;

#[derive(Default)]
pub(crate) struct Retention {
    /// Batches applied since this ledger was made (restored ones count 0).
    pub(crate) batches: u64,
    evicted_total: u64,
    /// The ids that left (see `prefetch.rs`).
    pub(crate) left: crate::prefetch::LeftMemory,
    /// Recorded quotes (persistent mode) in memory, in the order received:
    /// (received at, batch that recorded it, id).
    quotes: VecDeque<(i64, u64, TransferId)>,
    /// Quotes answered while in memory: the batch of the answer. A quote
    /// changes once after it is recorded, and the store's copy has the
    /// answer only once that batch is durable, so eviction waits for it
    /// too (the pipeline reads the store's copy of what left memory).
    quote_answers: HashMap<TransferId, u64>,
    quotes_evicted_total: u64,
}

impl Retention {
    pub(crate) fn quote_recorded(&mut self, at_ms: i64, quote_id: TransferId) {
        self.quotes.push_back((at_ms, self.batches, quote_id));
    }

    /// A quote memory holds was answered in the batch being applied.
    pub(crate) fn quote_answered(&mut self, quote_id: TransferId) {
        self.quote_answers.insert(quote_id, self.batches);
    }

    /// Restored quotes are durable: batch 0.
    pub(crate) fn restored_quotes(&mut self, mut quotes: Vec<(i64, TransferId)>) {
        quotes.sort_unstable();
        self.quotes
            .extend(quotes.into_iter().map(|(at_ms, id)| (at_ms, 0, id)));
    }
}

impl Ledger {
    /// Batches applied by this ledger so far; the pipeline tells
    /// [`Ledger::evict`] how many of them are durable.
    pub fn batches_applied(&self) -> u64 {
        self.retention.batches
    }

    /// Finished FSPIOP transfers evicted so far by this ledger.
    pub fn transfers_evicted(&self) -> u64 {
        self.retention.evicted_total
    }

    /// When [`Ledger::evict`] next has work, if ever (without a retention
    /// horizon, never).
    pub fn next_eviction_ms(&self) -> Option<i64> {
        let retention_ms = self.limits().transfer_retention_ms?;
        let held = self.transfers.finished();
        let crowded = held.len() > self.limits().max_finished_in_memory;
        let finished = held.oldest().map(|(at_ms, _)| match crowded {
            true => self.now_ms,
            false => at_ms.saturating_add(retention_ms),
        });
        let crowded_quotes = self.quotes.len() > self.limits().max_quotes;
        let quotes = self
            .retention
            .quotes
            .front()
            .map(|&(at_ms, _, _)| match crowded_quotes {
                true => self.now_ms,
                false => at_ms.saturating_add(retention_ms),
            });
        finished.into_iter().chain(quotes).min()
    }

    /// Removes from memory, at time `now_ms`, finished FSPIOP transfers
    /// older than the retention horizon whose finish was applied in one of
    /// the first `durable_batches` batches (so the store has it), and
    /// recorded quotes likewise; at most `budget` of them, so that no call
    /// stalls the ledger thread. `durable_batches` is the pipeline's count
    /// of committed batches, which only grows: for transfers, a smaller
    /// count than one told before is taken as that one (the finished ones
    /// keep no batch each, only where the durable ones end). Changes
    /// nothing durable and nothing a command observes except through the
    /// store. Returns how many transfers left.
    pub fn evict(&mut self, now_ms: i64, durable_batches: u64, budget: usize) -> usize {
        self.now_ms = self.now_ms.max(now_ms);
        let Some(retention_ms) = self.limits().transfer_retention_ms else {
            return 0;
        };
        let now_ms = self.now_ms;
        let most = self.limits().max_finished_in_memory;
        let mut spent = 0;
        let retention = &mut self.retention;
        let held = self.transfers.finished_mut();
        held.confirm(durable_batches);
        let mut evicted = 0;
        while spent < budget {
            // Past the horizon, or crowded: the oldest leave first either way.
            let crowded = held.len() > most;
            match held.oldest() {
                Some((at_ms, durable))
                    if (crowded || at_ms.saturating_add(retention_ms) <= now_ms) && durable =>
                {
                    let Some((id, link)) = held.pop_oldest() else {
                        break;
                    };
                    retention.evicted_total += 1;
                    retention.left.insert(id);
                    evicted += 1;
                    // A finished conversion leaves the index with it.
                    if let Some(FxLink::Conversion(terms)) = link {
                        let by_determining = &mut self.conversions_by_determining;
                        let determining = terms.determining_transfer_id;
                        if by_determining.get(&determining) == Some(&id) {
                            by_determining.remove(&determining);
                        }
                        // A prepare with this id must still find it
                        // (prefetch.rs reads it back).
                        retention.left.insert(determining);
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
            let retention = &mut self.retention;
            match retention.quotes.front() {
                Some(&(at_ms, batch, id))
                    if (crowded || at_ms.saturating_add(retention_ms) <= now_ms)
                        && batch <= durable_batches
                        && retention
                            .quote_answers
                            .get(&id)
                            .is_none_or(|&answered| answered <= durable_batches) =>
                {
                    retention.quotes.pop_front();
                    retention.quote_answers.remove(&id);
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
}
