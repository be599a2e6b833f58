//! The transfer index, split into shards so that growing it never stalls the
//! ledger thread for long: a `HashMap` rehashes everything when it grows, and
//! at millions of transfers one rehash would take tens of milliseconds, all
//! of it added to the latency of every command in that batch. With 256 shards
//! each rehash touches 1/256 of the transfers, and
//! [`TransferMap::grow_ahead`] keeps the shards from all growing at once.
//!
//! The shards map an id to a slot; the live transfers themselves (256
//! bytes each) live in fixed-size chunks, never moved: a rehash moves
//! 24-byte entries, and the tables' spare capacity (a power of two of
//! buckets, half empty just after it doubles) costs 24 bytes a bucket
//! rather than 288. A transfer that finishes frees its slot for the next
//! one.
//!
//! Finished transfers and conversions (those that settle and leave memory
//! past the retention horizon) are held apart, compactly, in finishing
//! order ([`Finished`], `compact.rs`); funds movements stay live. A read
//! of a finished one decodes its record, so [`TransferMap::get`] gives a
//! [`TransferRef`]: borrowed when live, decoded when finished.

use std::collections::HashMap;
use std::ops::Deref;

use crate::compact::{Finished, IdHasher};
use crate::ids::TransferId;
use crate::ledger::Transfer;

const SHARDS: usize = 256;

/// A transfer held: the live one, or one decoded from its compact record.
/// (Not a `Cow`: that is the size of a `Transfer`, copied at every
/// return, where this is two words.)
pub(crate) enum TransferRef<'a> {
    Live(&'a Transfer),
    Finished(Box<Transfer>),
}

impl Deref for TransferRef<'_> {
    type Target = Transfer;

    fn deref(&self) -> &Transfer {
        match self {
            TransferRef::Live(transfer) => transfer,
            TransferRef::Finished(transfer) => transfer,
        }
    }
}

/// Transfers per chunk of slots (1 MB).
const CHUNK: usize = 4096;

pub(crate) struct TransferMap {
    shards: Vec<HashMap<TransferId, u32, IdHasher>>,
    /// Every chunk but the last is full; `None` is a free slot.
    chunks: Vec<Vec<Option<Transfer>>>,
    /// Free slots (taken last first).
    free: Vec<u32>,
    len: usize,
    finished: Finished,
}

fn shard(id: &TransferId) -> usize {
    // Both random (v4) and sequential ids spread evenly.
    let bits = id.bits();
    let folded = (bits as u64) ^ ((bits >> 64) as u64);
    (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize
}

impl TransferMap {
    pub(crate) fn new() -> TransferMap {
        TransferMap {
            shards: {
                let hasher = IdHasher::new();
                (0..SHARDS).map(|_| HashMap::with_hasher(hasher)).collect()
            },
            chunks: Vec::new(),
            free: Vec::new(),
            len: 0,
            finished: Finished::new(),
        }
    }

    /// Transfers held, live and finished.
    pub(crate) fn len(&self) -> usize {
        self.len + self.finished.len()
    }

    /// The finished transfers, in finishing order (retention takes the
    /// oldest from it).
    pub(crate) fn finished(&self) -> &Finished {
        &self.finished
    }

    pub(crate) fn finished_mut(&mut self) -> &mut Finished {
        &mut self.finished
    }

    /// Whether every transfer live now can still finish compactly, and one
    /// more prepare with it (see [`Finished::has_room`]).
    pub(crate) fn has_room(&self) -> bool {
        self.finished.has_room(self.len)
    }

    fn slot(&self, slot: u32) -> &Option<Transfer> {
        let slot = slot as usize;
        &self.chunks[slot / CHUNK][slot % CHUNK]
    }

    fn slot_mut(&mut self, slot: u32) -> &mut Option<Transfer> {
        let slot = slot as usize;
        &mut self.chunks[slot / CHUNK][slot % CHUNK]
    }

    /// A transfer held: borrowed if live, decoded if finished.
    pub(crate) fn get(&self, id: &TransferId) -> Option<TransferRef<'_>> {
        match self.shards[shard(id)].get(id) {
            Some(&slot) => self.slot(slot).as_ref().map(TransferRef::Live),
            None => self
                .finished
                .get(id)
                .map(|transfer| TransferRef::Finished(Box::new(transfer))),
        }
    }

    /// The transfer, which must be held (the caller looked it up).
    pub(crate) fn held(&self, id: &TransferId) -> TransferRef<'_> {
        self.get(id).expect("the transfer is held")
    }

    pub(crate) fn contains(&self, id: &TransferId) -> bool {
        self.shards[shard(id)].contains_key(id) || self.finished.contains(id)
    }

    /// A live transfer, to change (a finished one never changes).
    pub(crate) fn get_mut(&mut self, id: &TransferId) -> Option<&mut Transfer> {
        let &slot = self.shards[shard(id)].get(id)?;
        self.slot_mut(slot).as_mut()
    }

    pub(crate) fn insert(&mut self, id: TransferId, transfer: Transfer) -> Option<Transfer> {
        if let Some(&slot) = self.shards[shard(&id)].get(&id) {
            return self.slot_mut(slot).replace(transfer);
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                *self.slot_mut(slot) = Some(transfer);
                slot
            }
            None => {
                if self.chunks.last().is_none_or(|chunk| chunk.len() == CHUNK) {
                    self.chunks.push(Vec::with_capacity(CHUNK));
                }
                let last = self.chunks.len() - 1;
                let chunk = &mut self.chunks[last];
                chunk.push(Some(transfer));
                (last * CHUNK + chunk.len() - 1) as u32
            }
        };
        self.shards[shard(&id)].insert(id, slot);
        self.len += 1;
        None
    }

    /// Holds a transfer that is finished already (refused at its prepare,
    /// or restored), as finished in `batch`.
    pub(crate) fn insert_finished(&mut self, id: TransferId, transfer: Transfer, batch: u64) {
        match self.finished.takes(&transfer) {
            true => self.finished.push(id, &transfer, batch),
            // In practice never (see `Finished::takes`): it stays live.
            false => {
                self.insert(id, transfer);
            }
        }
    }

    /// Moves a live transfer that just finished to the finished ones, as
    /// finished in `batch` (0: durable already).
    pub(crate) fn finish(&mut self, id: TransferId, batch: u64) {
        let Some(slot) = self.shards[shard(&id)].remove(&id) else {
            return;
        };
        let finished = &self.finished;
        if !self.slot(slot).as_ref().is_some_and(|t| finished.takes(t)) {
            // In practice never (see `Finished::takes`): it stays live.
            self.shards[shard(&id)].insert(id, slot);
            return;
        }
        self.len -= 1;
        self.free.push(slot);
        if let Some(transfer) = self.slot_mut(slot).take() {
            self.finished.push(id, &transfer, batch);
        }
    }

    /// Room for `live` more live transfers and `finished` more finished
    /// ones.
    pub(crate) fn reserve(&mut self, live: usize, finished: usize) {
        for map in &mut self.shards {
            map.reserve(live / SHARDS + 1);
        }
        self.chunks
            .reserve((live.saturating_sub(self.free.len())).div_ceil(CHUNK));
        self.finished.reserve(finished);
    }

    /// Every transfer held: the live ones, then the finished ones in
    /// finishing order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (TransferId, TransferRef<'_>)> {
        let live = self.shards.iter().flat_map(|map| {
            map.iter().map(|(&id, &slot)| {
                let transfer = self
                    .slot(slot)
                    .as_ref()
                    .expect("a mapped slot holds a transfer");
                (id, TransferRef::Live(transfer))
            })
        });
        let finished = self
            .finished
            .iter()
            .map(|(id, transfer)| (id, TransferRef::Finished(Box::new(transfer))));
        live.chain(finished)
    }
}

impl TransferMap {
    /// Grows shards ahead of need, within a budget of entries moved, so that
    /// growth is spread over batches instead of every shard rehashing in the
    /// same batch (they fill at the same rate, so they would). Called once per
    /// batch; a shard is grown once it is three quarters full (earlier, and the
    /// sparser tables cost more in cache misses than the growth saved).
    pub(crate) fn grow_ahead(&mut self, budget_entries: usize) {
        let mut spent = 0;
        while let Some(fullest) = self
            .shards
            .iter_mut()
            .filter(|map| map.len() * 4 > map.capacity() * 3)
            .max_by_key(|map| map.len() * 1024 / map.capacity().max(1))
        {
            if spent > 0 && spent + fullest.len() > budget_entries {
                break;
            }
            spent += fullest.len();
            let capacity = fullest.capacity();
            fullest.reserve(capacity);
        }
        self.finished.grow_ahead(budget_entries);
    }
}
