//! The transfer index, split into shards so that growing it never stalls the
//! ledger thread for long: a `HashMap` rehashes everything when it grows, and
//! at millions of transfers one rehash would take tens of milliseconds, all
//! of it added to the latency of every command in that batch. With 256 shards
//! each rehash touches 1/256 of the transfers, and
//! [`TransferMap::grow_ahead`] keeps the shards from all growing at once.

use std::collections::HashMap;
use std::ops::Index;

use crate::ids::TransferId;
use crate::ledger::Transfer;

const SHARDS: usize = 256;

pub(crate) struct TransferMap {
    shards: Vec<HashMap<TransferId, Transfer>>,
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
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn get(&self, id: &TransferId) -> Option<&Transfer> {
        self.shards[shard(id)].get(id)
    }

    pub(crate) fn get_mut(&mut self, id: &TransferId) -> Option<&mut Transfer> {
        self.shards[shard(id)].get_mut(id)
    }

    pub(crate) fn insert(&mut self, id: TransferId, transfer: Transfer) -> Option<Transfer> {
        let previous = self.shards[shard(&id)].insert(id, transfer);
        if previous.is_none() {
            self.len += 1;
        }
        previous
    }

    pub(crate) fn remove(&mut self, id: &TransferId) -> Option<Transfer> {
        let removed = self.shards[shard(id)].remove(id);
        if removed.is_some() {
            self.len -= 1;
        }
        removed
    }

    pub(crate) fn reserve(&mut self, additional: usize) {
        for map in &mut self.shards {
            map.reserve(additional / SHARDS + 1);
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&TransferId, &Transfer)> {
        self.shards.iter().flat_map(|map| map.iter())
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
