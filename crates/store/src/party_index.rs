//! The party index: which transfers name a party (`TYPE/identifier[/subId]`,
//! as the prepare's ILP packet gives it) — and, under [`amount_key`], which
//! move one exact amount — filed by block of seqs, off the commit
//! (`docs/design/back-office.md`, "Party keys by block").
//!
//! A key per party and transfer in one B-tree costs the writer a page per
//! key (a party's entries sit anywhere in the tree: BENCHMARKS.md measured
//! three quarters of the store's throughput). Here the keys of a block of
//! [`BLOCK_SEQS`] seqs are filed at once, after the block is committed, by
//! the hub's follower in a transaction of its own: one row per
//! (bucket, block) — [`BUCKETS`] buckets by the party's hash — holding
//! each entry as a 32-bit tag of the hash and the transfer's offset in
//! the block and side. Filing a block appends one row at the end of each
//! bucket's range (256 pages, whatever the block holds); a search by a
//! party reads its bucket's rows over the seq range it asks (one range of
//! the primary key: ~770 bytes a block, ~0.5 MB over 10 M transfers) and
//! fetches the matching transfers by seq. A tag can collide (about one
//! block in 30 million holds another party with the same tag): every
//! transfer found is checked against the party's text.
//!
//! Nothing in it is authoritative: the rows are derived from `transfers`,
//! and a block not filed yet (the newest, or all of them after an
//! upgrade) is searched by walking its transfers.

use crate::search::PartyRole;
use crate::StoreError;

/// Seqs per block, by default: recorded with the index when it files its
/// first block (`party_index.block_seqs`) and kept from then on, so that a
/// store's rows always mean one thing (tests file blocks of a few seqs).
pub const BLOCK_SEQS: u64 = 1 << 14;
/// The most seqs a block may hold: an entry holds the offset in 15 bits.
pub const MOST_BLOCK_SEQS: u64 = 1 << 15;
/// Buckets a block's entries are spread over by their party's hash.
pub const BUCKETS: u64 = 256;
/// Bytes per entry: the tag (4, little-endian) and the offset with the
/// side in its top bit (2).
const ENTRY_BYTES: usize = 6;
const PAYEE_BIT: u16 = 1 << 15;
const OFFSET_MASK: u16 = PAYEE_BIT - 1;
/// Blocks a filing writes in one transaction at most (catching up after
/// an upgrade; once caught up a block completes every few seconds at
/// thousands of transfers a second).
pub const MOST_BLOCKS_PER_FILING: u64 = 4;

const _: () = assert!(BLOCK_SEQS <= MOST_BLOCK_SEQS);
const _: () = assert!(BUCKETS.is_power_of_two() && BUCKETS <= 1 << 16);

/// 64-bit FNV-1a of the party's text: stable across builds and machines
/// (the rows outlive the binary), and cheap. Not keyed: a DFSP that names
/// parties to collide with another's only slows that party's search (each
/// transfer found is checked against the text).
pub fn party_hash(party: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in party.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The bucket a party's entries are filed in.
pub fn bucket_of(hash: u64) -> u64 {
    hash & (BUCKETS - 1)
}

fn tag_of(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// The block a seq falls in.
pub fn block_of(seq: u64, block_seqs: u64) -> u64 {
    seq / block_seqs
}

/// The blocks wholly committed when `last_seq` is: those before this one.
pub fn blocks_complete(last_seq: u64, block_seqs: u64) -> u64 {
    (last_seq + 1) / block_seqs
}

/// A block size read from a store, or why it cannot be one.
pub fn checked_block_seqs(block_seqs: i64) -> Result<u64, StoreError> {
    u64::try_from(block_seqs)
        .ok()
        .filter(|seqs| (1..=MOST_BLOCK_SEQS).contains(seqs))
        .ok_or_else(|| {
            StoreError::fatal(format!(
                "party index: blocks of {block_seqs} seqs (1 to {MOST_BLOCK_SEQS})"
            ))
        })
}

/// A bucket row's key: the bucket in the high bits, the block in the low
/// [`BLOCK_BITS`], so that a bucket's rows are one range of the primary
/// key, in block order (and a block's filing appends to each range).
pub fn row_key(bucket: u64, block: u64) -> i64 {
    debug_assert!(bucket < BUCKETS && block < 1 << BLOCK_BITS);
    ((bucket << BLOCK_BITS) | block) as i64
}

/// The block of a bucket row's key.
pub fn block_of_key(key: i64) -> u64 {
    (key as u64) & ((1 << BLOCK_BITS) - 1)
}

/// Bits of a row key that hold the block (2^40 blocks of 16,384 seqs).
pub const BLOCK_BITS: u32 = 40;

/// Created on every writable open of a SQLite store (schema version 14;
/// `IF NOT EXISTS`, as the feed's). `party_index.next_block`: the blocks
/// before it are filed; `block_seqs`: their size.
pub(crate) const SQLITE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS party_blocks (
    key     INTEGER PRIMARY KEY,
    entries BLOB    NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS party_index (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    next_block INTEGER NOT NULL,
    block_seqs INTEGER NOT NULL
) STRICT;
";

/// What a filing did ([`crate::feed::FeedLog::file_party_blocks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filing {
    /// Blocks it filed.
    pub filed: u64,
    /// The blocks before it are filed.
    pub next_block: u64,
    /// Seqs per block.
    pub block_seqs: u64,
    /// The last transfer committed when it looked.
    pub last_seq: u64,
}

impl Filing {
    /// Transfers committed that no filed block covers yet (a search walks
    /// them one by one): at most a block and a little once caught up.
    pub fn unfiled(&self) -> u64 {
        (self.last_seq + 1).saturating_sub(first_seq(self.next_block, self.block_seqs))
    }

    /// Whether every wholly committed block is filed.
    pub fn caught_up(&self) -> bool {
        self.next_block >= blocks_complete(self.last_seq, self.block_seqs)
    }
}

/// A block's transfers as the store gives them: seq, payer's and payee's
/// parties, amount in units (`transfers.amount_units`).
pub type BlockParties = Vec<(u64, Option<String>, Option<String>, Option<i64>)>;

/// The key an amount is filed under beside the parties (a party's text is
/// `TYPE/identifier`, never this): support's "the transfer for 250" is a
/// search for one exact amount, which the index then serves like a party.
pub fn amount_key(units: i64) -> String {
    format!("#{units}")
}

/// The rows of blocks `[from, to)` from their transfers' parties
/// (`read` gives one block's), keyed for `party_blocks`.
pub fn rows_of_blocks(
    from: u64,
    to: u64,
    block_seqs: u64,
    mut read: impl FnMut(u64, u64) -> Result<BlockParties, StoreError>,
) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
    let mut rows = Vec::new();
    for block in from..to {
        let parties = read(
            first_seq(block, block_seqs),
            first_seq(block + 1, block_seqs),
        )?;
        let filed = block_rows(
            block,
            block_seqs,
            parties.iter().map(|(seq, payer, payee, amount)| {
                (*seq, payer.as_deref(), payee.as_deref(), *amount)
            }),
        )?;
        rows.extend(
            filed
                .into_iter()
                .map(|(bucket, entries)| (row_key(bucket, block), entries)),
        );
    }
    Ok(rows)
}

/// Why a filing wrote nothing: another filed the blocks first.
pub(crate) fn moved(expected: u64, found: u64) -> StoreError {
    StoreError::transient(format!(
        "party index: next block moved from {expected} to {found} (another hub filed them)"
    ))
}

/// The first seq of `block`.
pub fn first_seq(block: u64, block_seqs: u64) -> u64 {
    block * block_seqs
}

/// The rows to file for `block` from its transfers' parties and amounts
/// (`seq`, payer, payee, amount in units; seqs within the block): each
/// non-empty bucket's entries, by bucket. An amount is filed under
/// [`amount_key`] on the payer's side.
pub fn block_rows<'a>(
    block: u64,
    block_seqs: u64,
    transfers: impl IntoIterator<Item = (u64, Option<&'a str>, Option<&'a str>, Option<i64>)>,
) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
    let mut buckets: Vec<Vec<u8>> = vec![Vec::new(); BUCKETS as usize];
    let mut amount = String::new();
    for (seq, payer, payee, units) in transfers {
        if block_of(seq, block_seqs) != block {
            return Err(StoreError::fatal(format!(
                "party index: transfer {seq} is not in block {block}"
            )));
        }
        let offset = (seq % block_seqs) as u16;
        amount.clear();
        if let Some(units) = units {
            use std::fmt::Write as _;
            write!(amount, "#{units}").expect("writing to a String");
        }
        let amount = (!amount.is_empty()).then_some(amount.as_str());
        for (party, side) in [(payer, 0), (payee, PAYEE_BIT), (amount, 0)] {
            let Some(party) = party.filter(|party| !party.is_empty()) else {
                continue;
            };
            let hash = party_hash(party);
            let entries = &mut buckets[bucket_of(hash) as usize];
            entries.extend_from_slice(&tag_of(hash).to_le_bytes());
            entries.extend_from_slice(&(offset | side).to_le_bytes());
        }
    }
    Ok(buckets
        .into_iter()
        .enumerate()
        .filter(|(_, entries)| !entries.is_empty())
        .map(|(bucket, entries)| (bucket as u64, entries))
        .collect())
}

/// The seqs of `block`'s entries (one bucket row) whose party hashes to
/// `hash`, on `role`'s side (either without), newest first, each once.
pub fn seqs_in(
    block: u64,
    block_seqs: u64,
    entries: &[u8],
    hash: u64,
    role: Option<PartyRole>,
) -> Result<Vec<u64>, StoreError> {
    if !entries.len().is_multiple_of(ENTRY_BYTES) {
        return Err(StoreError::fatal(format!(
            "party index: block {block}'s row holds {} bytes, not whole entries",
            entries.len()
        )));
    }
    let tag = tag_of(hash);
    let mut seqs: Vec<u64> = entries
        .chunks_exact(ENTRY_BYTES)
        .filter(|entry| u32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]) == tag)
        .filter_map(|entry| {
            let word = u16::from_le_bytes([entry[4], entry[5]]);
            let side = match word & PAYEE_BIT {
                0 => PartyRole::Payer,
                _ => PartyRole::Payee,
            };
            role.is_none_or(|role| role == side)
                .then(|| first_seq(block, block_seqs) + u64::from(word & OFFSET_MASK))
        })
        .collect();
    seqs.sort_unstable_by(|a, b| b.cmp(a));
    seqs.dedup();
    Ok(seqs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fnv_1a() {
        // The published FNV-1a 64 test vectors: the rows outlive the build.
        assert_eq!(party_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(party_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(party_hash("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn a_block_files_each_side_and_finds_it_again() {
        let block = 3;
        let base = first_seq(block, BLOCK_SEQS);
        let transfers = [
            (base, Some("MSISDN/1"), Some("MSISDN/2"), Some(250_0000)),
            (base + 7, Some("MSISDN/2"), None, None),
            (
                base + BLOCK_SEQS - 1,
                None,
                Some("MSISDN/1"),
                Some(250_0000),
            ),
            (base + 9, Some(""), Some("MSISDN/1"), Some(1)),
        ];
        let rows = block_rows(block, BLOCK_SEQS, transfers).unwrap();
        let find = |party: &str, role| -> Vec<u64> {
            let hash = party_hash(party);
            rows.iter()
                .filter(|(bucket, _)| *bucket == bucket_of(hash))
                .flat_map(|(_, entries)| seqs_in(block, BLOCK_SEQS, entries, hash, role).unwrap())
                .collect()
        };
        assert_eq!(
            find("MSISDN/1", None),
            vec![base + BLOCK_SEQS - 1, base + 9, base]
        );
        assert_eq!(find("MSISDN/1", Some(PartyRole::Payer)), vec![base]);
        assert_eq!(
            find("MSISDN/1", Some(PartyRole::Payee)),
            vec![base + BLOCK_SEQS - 1, base + 9]
        );
        assert_eq!(find("MSISDN/2", None), vec![base + 7, base]);
        assert_eq!(find("MSISDN/3", None), Vec::<u64>::new());
        assert_eq!(
            find(&amount_key(250_0000), None),
            vec![base + BLOCK_SEQS - 1, base]
        );
        assert_eq!(find(&amount_key(1), None), vec![base + 9]);
        // Five party entries (none for the empty party), three amounts.
        let entries: usize = rows.iter().map(|(_, e)| e.len()).sum();
        assert_eq!(entries, 8 * ENTRY_BYTES);
    }

    #[test]
    fn a_party_on_both_sides_of_one_transfer_is_found_once() {
        let rows = block_rows(0, BLOCK_SEQS, [(5, Some("IBAN/X"), Some("IBAN/X"), None)]).unwrap();
        let hash = party_hash("IBAN/X");
        let (_, entries) = rows.iter().find(|(b, _)| *b == bucket_of(hash)).unwrap();
        assert_eq!(
            seqs_in(0, BLOCK_SEQS, entries, hash, None).unwrap(),
            vec![5]
        );
    }

    #[test]
    fn a_transfer_outside_the_block_or_a_torn_row_is_refused() {
        assert!(block_rows(1, BLOCK_SEQS, [(3, Some("A/1"), None, None)]).is_err());
        assert!(seqs_in(0, BLOCK_SEQS, &[0; 7], 1, None).is_err());
    }

    #[test]
    fn a_buckets_rows_are_one_key_range_in_block_order() {
        let keys: Vec<i64> = [(0, 0), (0, 5), (1, 0), (255, (1 << BLOCK_BITS) - 1)]
            .iter()
            .map(|&(bucket, block)| row_key(bucket, block))
            .collect();
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]), "{keys:?}");
        assert_eq!(block_of_key(row_key(7, 12_345)), 12_345);
        assert!(row_key(BUCKETS - 1, (1 << BLOCK_BITS) - 1) > 0);
    }

    #[test]
    fn blocks_complete_when_their_last_seq_is_committed() {
        let seqs = BLOCK_SEQS;
        assert_eq!(blocks_complete(0, seqs), 0);
        assert_eq!(blocks_complete(seqs - 2, seqs), 0);
        assert_eq!(blocks_complete(seqs - 1, seqs), 1);
        assert_eq!(blocks_complete(2 * seqs, seqs), 2);
        assert_eq!(block_of(seqs, seqs), 1);
        // Blocks of 3: seqs 0-2, 3-5, ...
        assert_eq!(blocks_complete(5, 3), 2);
        assert_eq!(blocks_complete(4, 3), 1);
        assert!(checked_block_seqs(0).is_err());
        assert!(checked_block_seqs(MOST_BLOCK_SEQS as i64 + 1).is_err());
        assert_eq!(checked_block_seqs(3).unwrap(), 3);
    }
}
