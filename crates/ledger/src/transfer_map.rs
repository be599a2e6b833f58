//! The transfer index, split into shards so that growing it never stalls the
//! ledger thread for long: a `HashMap` rehashes everything when it grows, and
//! at millions of transfers one rehash would take tens of milliseconds, all
//! of it added to the latency of every command in that batch. With 256 shards
//! each rehash touches 1/256 of the transfers, and
//! [`TransferMap::grow_ahead`] keeps the shards from all growing at once.
//!
//! The shards map an id to a slot; the transfers themselves (256 bytes
//! each) live in fixed-size chunks, never moved: a rehash moves 24-byte
//! entries, and the tables' spare capacity (a power of two of buckets,
//! half empty just after it doubles) costs 24 bytes a bucket rather than
//! 288. At a million transfers that is 310 MB instead of 600, which a
//! restart must also fault in (the kernel zeroes every fresh page). A
//! transfer that leaves frees its slot for the next one.

use std::collections::HashMap;
use std::ops::Index;

use crate::ids::TransferId;
use crate::ledger::Transfer;

const SHARDS: usize = 256;

/// Transfers per chunk of slots (1 MB).
const CHUNK: usize = 4096;

pub(crate) struct TransferMap {
    shards: Vec<HashMap<TransferId, u32>>,
    /// Every chunk but the last is full; `None` is a free slot.
    chunks: Vec<Vec<Option<Transfer>>>,
    /// Free slots (taken last first).
    free: Vec<u32>,
    len: usize,
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
            shards: (0..SHARDS).map(|_| HashMap::new()).collect(),
            chunks: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn slot(&self, slot: u32) -> &Option<Transfer> {
        let slot = slot as usize;
        &self.chunks[slot / CHUNK][slot % CHUNK]
    }

    fn slot_mut(&mut self, slot: u32) -> &mut Option<Transfer> {
        let slot = slot as usize;
        &mut self.chunks[slot / CHUNK][slot % CHUNK]
    }

    pub(crate) fn get(&self, id: &TransferId) -> Option<&Transfer> {
        let &slot = self.shards[shard(id)].get(id)?;
        self.slot(slot).as_ref()
    }

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

    pub(crate) fn remove(&mut self, id: &TransferId) -> Option<Transfer> {
        let slot = self.shards[shard(id)].remove(id)?;
        self.len -= 1;
        self.free.push(slot);
        self.slot_mut(slot).take()
    }

    pub(crate) fn reserve(&mut self, additional: usize) {
        for map in &mut self.shards {
            map.reserve(additional / SHARDS + 1);
        }
        self.chunks
            .reserve((additional.saturating_sub(self.free.len())).div_ceil(CHUNK));
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&TransferId, &Transfer)> {
        self.shards.iter().flat_map(|map| {
            map.iter().map(|(id, &slot)| {
                let transfer = self
                    .slot(slot)
                    .as_ref()
                    .expect("a mapped slot holds a transfer");
                (id, transfer)
            })
        })
    }
}

impl Index<&TransferId> for TransferMap {
    type Output = Transfer;

    fn index(&self, id: &TransferId) -> &Transfer {
        self.get(id).expect("the transfer exists")
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
    }
}
