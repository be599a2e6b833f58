//! Finished transfers, held compactly until they leave memory.
//!
//! A transfer or conversion that finished is read again only to answer a
//! resent request (its request hashes), a `GET` (its view), the snapshot
//! (its rows, exactly) and eviction (its id, its finishing instant, a
//! conversion's determining id). A live [`Transfer`] spends 256 bytes on
//! that in a slot, plus 24 bytes per bucket of the id index and 40 of the
//! finishing-order queue: ~350 bytes a transfer held. Here each is one
//! record of ~130 bytes, byte-packed and appended in finishing order to
//! 64 KiB pages, so that the pages are the finishing-order queue too:
//! eviction takes records from the front, and a page goes once all of it
//! has left.
//!
//! A record is lossless: [`decode`] gives back the `Transfer` that was
//! encoded, field for field (the tests check it for every kind of
//! transfer), so every rule and the snapshot read a finished transfer as
//! before. What makes it small:
//!
//! - the id (16 bytes; its form in the flags), the prepare's request hash
//!   and the finishing request's (32 each; the latter left out when zero,
//!   as for an expiry) are kept whole: duplicate detection compares them.
//! - one 32-byte preimage for a fulfilled transfer, whose condition is its
//!   SHA-256 (computed again when the record is read); a transfer without
//!   a matching fulfilment keeps its condition instead;
//! - everything else as LEB128 varints: seq, finishing instant and
//!   settlement window as differences from the page's first record
//!   (a byte or two), the preparation and expiration instants as
//!   differences from the finish and the preparation, account ids, the
//!   amount in ten-thousandths, the reason code, and the states, kinds
//!   and presence bits in three bytes of flags;
//! - FX links only when present (a funds memo too, though funds movements,
//!   the only transfers with one, stay live: [`Finished::takes`]).
//!
//! Records start at even positions, so that the index (256 shards of
//! `u32`: a record's position / 2) addresses 8 GiB of records; the ledger
//! refuses new transfers before the records held could outgrow that
//! ([`Finished::has_room`]). A record never spans two pages, and page `n`
//! after the first starts `n` × 64 KiB after it, so finding a record's
//! page is a division: an index's rehash reads every id back from its
//! record, and does so at the cost of that read alone.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher, RandomState};

use hashbrown::HashTable;

use crate::amount::Amount;
use crate::crypto::{Condition, Fulfilment, RequestHash};
use crate::error::ErrorCode;
use crate::ids::{AccountId, Currency, ParticipantId, TransferId};
use crate::ledger::{Finish, FxSlot, Transfer};
use crate::model::*;

/// Bytes of one page of records.
const PAGE: usize = 64 * 1024;
/// Records start at multiples of this.
const ALIGN: u64 = 2;
/// What a `u32` of the index can address: 2^32 positions of `ALIGN` bytes.
const WINDOW: u64 = (1 << 32) * ALIGN;
/// A generous bound on a record without a funds memo (the largest, a
/// conversion the FXP accepted with every field at its widest, is ~350).
pub(crate) const RECORD_MAX: u64 = 512;
const SHARDS: usize = 256;

// Flags: three bytes after the id.
const TAG: u32 = 0b111; // the id's form
const STATE_SHIFT: u32 = 3; // 3 bits
const KIND_SHIFT: u32 = 6; // 2 bits
const FINISHED: u32 = 1 << 8;
const FINISH_KIND_SHIFT: u32 = 9; // 2 bits
const FINISH_HASH: u32 = 1 << 11;
const CAUSE_SHIFT: u32 = 12; // 2 bits
const REASON: u32 = 1 << 14;
const WINDOW_ID: u32 = 1 << 15;
const FULFILMENT: u32 = 1 << 16;
const CONDITION: u32 = 1 << 17;
const MEMO: u32 = 1 << 18;
const FX: u32 = 1 << 19;
const FX_DEPENDENT: u32 = 1 << 20;
const FXP_FULFIL: u32 = 1 << 21;

/// Where a record's varints are counted from: its page's first record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Base {
    seq: u64,
    at_ms: i64,
    window: u32,
}

/// When a finished transfer finished (one refused at its prepare finished
/// then): its place in the finishing order.
pub(crate) fn finished_at(transfer: &Transfer) -> i64 {
    transfer
        .finish
        .map_or(transfer.prepared_at_ms, |finish| finish.at_ms)
}

fn state_code(state: TransferState) -> u32 {
    match state {
        TransferState::Reserved => 0,
        TransferState::Committed => 1,
        TransferState::Aborted => 2,
        TransferState::Expired => 3,
        TransferState::Rejected => 4,
    }
}

fn state_of(code: u32) -> TransferState {
    match code {
        0 => TransferState::Reserved,
        1 => TransferState::Committed,
        2 => TransferState::Aborted,
        3 => TransferState::Expired,
        _ => TransferState::Rejected,
    }
}

fn kind_code(kind: TransferKind) -> u32 {
    match kind {
        TransferKind::Fspiop => 0,
        TransferKind::FundsIn => 1,
        TransferKind::FundsOut => 2,
        TransferKind::FxConversion => 3,
    }
}

fn kind_of(code: u32) -> TransferKind {
    match code {
        0 => TransferKind::Fspiop,
        1 => TransferKind::FundsIn,
        2 => TransferKind::FundsOut,
        _ => TransferKind::FxConversion,
    }
}

fn finish_kind_code(kind: FinishKind) -> u32 {
    match kind {
        FinishKind::Fulfil => 0,
        FinishKind::Abort => 1,
        FinishKind::Expiry => 2,
        FinishKind::Linked => 3,
    }
}

fn finish_kind_of(code: u32) -> FinishKind {
    match code {
        0 => FinishKind::Fulfil,
        1 => FinishKind::Abort,
        2 => FinishKind::Expiry,
        _ => FinishKind::Linked,
    }
}

fn cause_code(cause: Option<AbortCause>) -> u32 {
    match cause {
        None => 0,
        Some(AbortCause::InvalidFulfilment) => 1,
        Some(AbortCause::DestinationNotPayer) => 2,
    }
}

fn cause_of(code: u32) -> Option<AbortCause> {
    match code {
        1 => Some(AbortCause::InvalidFulfilment),
        2 => Some(AbortCause::DestinationNotPayer),
        _ => None,
    }
}

fn zigzag(value: i128) -> u128 {
    ((value << 1) ^ (value >> 127)) as u128
}

fn unzigzag(value: u128) -> i128 {
    ((value >> 1) as i128) ^ -((value & 1) as i128)
}

fn put_varint(out: &mut Vec<u8>, mut value: u128) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A difference of two `i64`s, wrapping, as a varint: any pair fits.
fn put_delta(out: &mut Vec<u8>, value: i64, from: i64) {
    put_varint(out, zigzag(i128::from(value.wrapping_sub(from))));
}

/// A difference that is never negative in practice (a finish after its
/// prepare, an expiration after it, a finish after its page's first),
/// wrapping: a negative one takes ten bytes, and is as exact.
fn put_after(out: &mut Vec<u8>, value: i64, from: i64) {
    put_varint(out, u128::from(value.wrapping_sub(from) as u64));
}

fn put_id(out: &mut Vec<u8>, id: TransferId) {
    out.extend_from_slice(&id.bits().to_be_bytes());
    out.push(id.form_tag());
}

/// A record, read from its first byte.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.bytes[self.at..self.at + N]);
        self.at += N;
        out
    }

    fn byte(&mut self) -> u8 {
        self.at += 1;
        self.bytes[self.at - 1]
    }

    fn varint(&mut self) -> u128 {
        let mut value = 0u128;
        let mut shift = 0;
        loop {
            let byte = self.byte();
            value |= u128::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return value;
            }
            shift += 7;
        }
    }

    fn delta(&mut self, from: i64) -> i64 {
        from.wrapping_add(unzigzag(self.varint()) as i64)
    }

    fn after(&mut self, from: i64) -> i64 {
        from.wrapping_add(self.varint() as u64 as i64)
    }

    fn id(&mut self) -> TransferId {
        let bytes = self.take::<16>();
        TransferId::from_parts(bytes, self.byte())
    }

    fn text(&mut self) -> String {
        let len = self.varint() as usize;
        let text = String::from_utf8_lossy(&self.bytes[self.at..self.at + len]).into_owned();
        self.at += len;
        text
    }
}

/// Appends the record of a finished transfer, its varints counted from
/// `base`.
fn encode(id: TransferId, transfer: &Transfer, base: Base, out: &mut Vec<u8>) {
    let finish = transfer.finish;
    let fulfilment = transfer.fulfilment;
    let derived = fulfilment.is_some_and(|f| f.condition() == transfer.condition);
    let fx = transfer.fx.as_deref();
    let mut flags = u32::from(id.form_tag()) & TAG;
    flags |= state_code(transfer.state) << STATE_SHIFT;
    flags |= kind_code(transfer.kind) << KIND_SHIFT;
    if let Some(finish) = finish {
        flags |= FINISHED | finish_kind_code(finish.kind) << FINISH_KIND_SHIFT;
        flags |= cause_code(finish.cause) << CAUSE_SHIFT;
        if finish.request_hash != RequestHash::default() {
            flags |= FINISH_HASH;
        }
        if finish.settlement_window.is_some() {
            flags |= WINDOW_ID;
        }
    }
    if transfer.reason.is_some() {
        flags |= REASON;
    }
    if fulfilment.is_some() {
        flags |= FULFILMENT;
    }
    if !derived {
        flags |= CONDITION;
    }
    if transfer.memo.is_some() {
        flags |= MEMO;
    }
    if let Some(slot) = fx {
        flags |= FX;
        if matches!(slot.link, FxLink::Dependent { .. }) {
            flags |= FX_DEPENDENT;
        }
        if slot.fxp_fulfil.is_some() {
            flags |= FXP_FULFIL;
        }
    }
    out.extend_from_slice(&id.bits().to_be_bytes());
    out.extend_from_slice(&flags.to_le_bytes()[..3]);
    out.extend_from_slice(&transfer.request_hash.0);
    if let Some(finish) = finish.filter(|_| flags & FINISH_HASH != 0) {
        out.extend_from_slice(&finish.request_hash.0);
    }
    if let Some(fulfilment) = fulfilment {
        out.extend_from_slice(fulfilment.preimage());
    }
    if !derived {
        out.extend_from_slice(&transfer.condition.0);
    }
    let at_ms = finished_at(transfer);
    put_delta(out, transfer.seq as i64, base.seq as i64);
    put_after(out, at_ms, base.at_ms);
    put_after(out, at_ms, transfer.prepared_at_ms);
    put_after(out, transfer.expiration_ms, transfer.prepared_at_ms);
    put_varint(out, u128::from(transfer.debit.0));
    put_varint(out, u128::from(transfer.credit.0));
    // Positive, but for what a store may hold: a negative one is as exact.
    put_varint(out, transfer.amount.units() as u128);
    if let Some(reason) = transfer.reason {
        put_varint(out, u128::from(reason.0));
    }
    if let Some(window) = finish.and_then(|finish| finish.settlement_window) {
        put_delta(out, i64::from(window), i64::from(base.window));
    }
    out.push(transfer.wire_version);
    if let Some(memo) = transfer.memo.as_deref() {
        for text in [&memo.external_reference, &memo.reason] {
            put_varint(out, text.len() as u128);
            out.extend_from_slice(text.as_bytes());
        }
    }
    if let Some(slot) = fx {
        match slot.link {
            FxLink::Conversion(terms) => {
                put_id(out, terms.determining_transfer_id);
                out.extend_from_slice(&terms.target_currency.to_bytes());
                put_varint(out, zigzag(terms.target_amount.units()));
            }
            FxLink::Dependent {
                commit_request_id,
                payer,
            } => {
                put_id(out, commit_request_id);
                put_varint(out, u128::from(payer.0));
            }
        }
        if let Some(row) = &slot.fxp_fulfil {
            put_delta(out, row.seq as i64, transfer.seq as i64);
            out.extend_from_slice(row.fulfilment.preimage());
            out.extend_from_slice(&row.request_hash.0);
            put_delta(out, row.at_ms, at_ms);
        }
    }
    while !(out.len() as u64).is_multiple_of(ALIGN) {
        out.push(0);
    }
}

/// The id of the record at the start of `bytes`.
fn id_of(bytes: &[u8]) -> TransferId {
    let id: [u8; 16] = bytes[..16].try_into().expect("16 bytes");
    TransferId::from_parts(id, bytes[16] & TAG as u8)
}

/// Reads past the fixed part of a record: its flags, and a reader at its
/// varints.
fn fixed(bytes: &[u8]) -> (u32, Reader<'_>) {
    let flags = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], 0]);
    let mut skip = 16 + 3 + 32;
    for bit in [FINISH_HASH, FULFILMENT, CONDITION] {
        if flags & bit != 0 {
            skip += 32;
        }
    }
    (flags, Reader { bytes, at: skip })
}

/// When the record at the start of `bytes` finished.
fn at_ms_of(bytes: &[u8], base: Base) -> i64 {
    let (_, mut reader) = fixed(bytes);
    reader.varint();
    reader.after(base.at_ms)
}

/// The transfer a record holds, and the record's length.
fn decode(bytes: &[u8], base: Base) -> (TransferId, Transfer, usize) {
    let id = id_of(bytes);
    let flags = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], 0]);
    let mut reader = Reader { bytes, at: 19 };
    let request_hash = RequestHash(reader.take());
    let finish_hash = match flags & FINISH_HASH != 0 {
        true => RequestHash(reader.take()),
        false => RequestHash::default(),
    };
    let fulfilment = (flags & FULFILMENT != 0).then(|| Fulfilment::from_preimage(reader.take()));
    let condition = match flags & CONDITION != 0 {
        true => Condition(reader.take()),
        false => fulfilment.map(|f| f.condition()).unwrap_or_default(),
    };
    let seq = reader.delta(base.seq as i64) as u64;
    let at_ms = reader.after(base.at_ms);
    let prepared_at_ms = at_ms.wrapping_sub(reader.varint() as u64 as i64);
    let expiration_ms = reader.after(prepared_at_ms);
    let debit = AccountId(reader.varint() as u32);
    let credit = AccountId(reader.varint() as u32);
    let amount = Amount::from_units(reader.varint() as i128);
    let reason = (flags & REASON != 0).then(|| ErrorCode(reader.varint() as u16));
    let settlement_window =
        (flags & WINDOW_ID != 0).then(|| reader.delta(i64::from(base.window)) as u32);
    let wire_version = reader.byte();
    let memo = (flags & MEMO != 0).then(|| {
        let external_reference = reader.text();
        let reason = reader.text();
        Box::new(FundsMemo {
            external_reference,
            reason,
        })
    });
    let fx = (flags & FX != 0).then(|| {
        let link = match flags & FX_DEPENDENT != 0 {
            false => {
                let determining_transfer_id = reader.id();
                let target_currency = Currency::from_bytes(reader.take());
                let target_amount = Amount::from_units(unzigzag(reader.varint()));
                FxLink::Conversion(ConversionTerms {
                    determining_transfer_id,
                    target_currency,
                    target_amount,
                })
            }
            true => FxLink::Dependent {
                commit_request_id: reader.id(),
                payer: ParticipantId(reader.varint() as u32),
            },
        };
        let fxp_fulfil = (flags & FXP_FULFIL != 0).then(|| ConversionFulfilRow {
            seq: reader.delta(seq as i64) as u64,
            fulfilment: Fulfilment::from_preimage(reader.take()),
            request_hash: RequestHash(reader.take()),
            at_ms: reader.delta(at_ms),
        });
        Box::new(FxSlot { link, fxp_fulfil })
    });
    let finish = (flags & FINISHED != 0).then(|| Finish {
        kind: finish_kind_of(flags >> FINISH_KIND_SHIFT & 0b11),
        request_hash: finish_hash,
        at_ms,
        settlement_window,
        cause: cause_of(flags >> CAUSE_SHIFT & 0b11),
    });
    let transfer = Transfer {
        seq,
        kind: kind_of(flags >> KIND_SHIFT & 0b11),
        debit,
        credit,
        amount,
        condition,
        expiration_ms,
        prepared_at_ms,
        request_hash,
        state: state_of(flags >> STATE_SHIFT & 0b111),
        reason,
        finish,
        fulfilment,
        memo,
        wire_version,
        fx,
    };
    let len = reader.at.next_multiple_of(ALIGN as usize);
    (id, transfer, len)
}

/// The FX link of the record at the start of `bytes`, and its length,
/// without decoding the rest (eviction's need).
fn link_of(bytes: &[u8], base: Base) -> (Option<FxLink>, usize) {
    let (flags, _) = fixed(bytes);
    if flags & (FX | MEMO) == 0 {
        // Only the varints' length is needed.
        let (_, mut reader) = fixed(bytes);
        for _ in 0..7 {
            reader.varint();
        }
        if flags & REASON != 0 {
            reader.varint();
        }
        if flags & WINDOW_ID != 0 {
            reader.varint();
        }
        reader.byte();
        return (None, reader.at.next_multiple_of(ALIGN as usize));
    }
    let (_, transfer, len) = decode(bytes, base);
    (transfer.fx.map(|slot| slot.link), len)
}

/// A page of records: `PAGE` positions from `start` (a multiple of
/// `PAGE`), of which the records fill the first `bytes.len()`; a record
/// that does not fit opens the next page.
struct Page {
    start: u64,
    bytes: Vec<u8>,
    base: Base,
}

/// The hash of a transfer id for the ledger's indexes (this one and the
/// live transfers'): a folded multiply under keys drawn at random per
/// ledger (as std's `RandomState` keys SipHash), so that ids a DFSP
/// chooses cannot be made to collide by design. SipHash cost a fifth of a
/// finish: a transfer's id is hashed some ten times on its way, and every
/// rehash of a growing shard here hashes each id again.
#[derive(Clone, Copy)]
pub(crate) struct IdHasher([u64; 3]);

fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

impl IdHasher {
    pub(crate) fn new() -> IdHasher {
        let random = RandomState::new();
        IdHasher([0u64, 1, 2].map(|n| random.hash_one(n)))
    }

    fn of(self, bits: u128, tag: u8) -> u64 {
        let [k0, k1, k2] = self.0;
        let mixed = fold(bits as u64 ^ k0, (bits >> 64) as u64 ^ k1);
        fold(mixed ^ u64::from(tag), k2 | 1)
    }

    pub(crate) fn hash(self, id: &TransferId) -> u64 {
        self.of(id.bits(), id.form_tag())
    }
}

impl BuildHasher for IdHasher {
    type Hasher = IdHashing;

    fn build_hasher(&self) -> IdHashing {
        IdHashing {
            keys: *self,
            bits: 0,
            tag: 0,
        }
    }
}

/// [`IdHasher`] as a `Hasher`: a [`TransferId`] writes its bits and its
/// form, which it hashes as [`IdHasher::hash`] does.
pub(crate) struct IdHashing {
    keys: IdHasher,
    bits: u128,
    tag: u8,
}

impl Hasher for IdHashing {
    fn write(&mut self, bytes: &[u8]) {
        // Not what an id writes; anything else still hashes whole.
        for &byte in bytes {
            self.bits = self.bits.rotate_left(8) ^ u128::from(byte);
            self.tag = self.tag.wrapping_add(1);
        }
    }

    fn write_u128(&mut self, bits: u128) {
        self.bits ^= bits;
    }

    fn write_u8(&mut self, tag: u8) {
        self.tag ^= tag;
    }

    fn finish(&self) -> u64 {
        self.keys.of(self.bits, self.tag)
    }
}

/// The finished transfers in memory, compact, in finishing order (see the
/// module's documentation).
pub(crate) struct Finished {
    /// Record positions / `ALIGN`, by id.
    shards: Vec<HashTable<u32>>,
    hasher: IdHasher,
    /// Consecutive: the first starts at `pages[0].start`, each next one
    /// `PAGE` after.
    pages: VecDeque<Page>,
    /// Where the oldest record held starts, and where the last one ends.
    front: u64,
    end: u64,
    len: usize,
    /// Batches whose records may not be durable yet: (batch, end of its
    /// records), oldest first; the records before `durable_end` are.
    unconfirmed: VecDeque<(u64, u64)>,
    durable_end: u64,
    scratch: Vec<u8>,
}

impl Finished {
    pub(crate) fn new() -> Finished {
        Finished {
            shards: (0..SHARDS).map(|_| HashTable::new()).collect(),
            hasher: IdHasher::new(),
            pages: VecDeque::new(),
            front: 0,
            end: 0,
            len: 0,
            unconfirmed: VecDeque::new(),
            durable_end: 0,
            scratch: Vec::with_capacity(RECORD_MAX as usize),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether `live` more transfers can still finish here, each record
    /// within [`RECORD_MAX`], with every record addressable by the index.
    pub(crate) fn has_room(&self, live: usize) -> bool {
        let held = self.end - self.front;
        let more = (live as u64 + 2).saturating_mul(RECORD_MAX);
        // Each page may leave up to a record unused at its end.
        held.saturating_add(more.saturating_mul(2)) < WINDOW - PAGE as u64
    }

    /// Whether a finished transfer can be held here: its record fits a
    /// page (any but one with a funds memo: funds movements, which stay
    /// live) and the index can still address it. Otherwise it stays live,
    /// never evicted: so a restore of more than [`Finished::has_room`]
    /// allows is served all the same, never by a wrapped position.
    pub(crate) fn takes(&self, transfer: &Transfer) -> bool {
        let held = self.end - self.front;
        transfer.memo.is_none() && held + 2 * (RECORD_MAX + PAGE as u64) < WINDOW
    }

    fn shard(hash: u64) -> usize {
        (hash >> 32) as usize % SHARDS
    }

    /// The page holding position `at`, and the offset there.
    fn locate(pages: &VecDeque<Page>, at: u64) -> (&Page, usize) {
        let first = pages.front().map_or(0, |page| page.start);
        let page = &pages[((at - first) / PAGE as u64) as usize];
        (page, (at - page.start) as usize)
    }

    /// The position an index entry names: the one that `u32` wraps to
    /// within the records held.
    fn position(front: u64, entry: u32) -> u64 {
        let at = u64::from(entry) * ALIGN;
        front + (at.wrapping_sub(front) % WINDOW)
    }

    fn record_id(pages: &VecDeque<Page>, front: u64, entry: u32) -> TransferId {
        let (page, offset) = Self::locate(pages, Self::position(front, entry));
        id_of(&page.bytes[offset..])
    }

    fn find(&self, id: &TransferId) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let hash = self.hasher.hash(id);
        let (pages, front) = (&self.pages, self.front);
        self.shards[Self::shard(hash)]
            .find(hash, |&entry| Self::record_id(pages, front, entry) == *id)
            .map(|&entry| Self::position(front, entry))
    }

    pub(crate) fn contains(&self, id: &TransferId) -> bool {
        self.find(id).is_some()
    }

    pub(crate) fn get(&self, id: &TransferId) -> Option<Transfer> {
        let at = self.find(id)?;
        let (page, offset) = Self::locate(&self.pages, at);
        Some(decode(&page.bytes[offset..], page.base).1)
    }

    /// Appends a finished transfer (one it [`Finished::takes`]), finished in
    /// `batch` (0: durable already).
    pub(crate) fn push(&mut self, id: TransferId, transfer: &Transfer, batch: u64) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let last = self.pages.back().map(|page| page.base);
        if let Some(base) = last {
            encode(id, transfer, base, &mut scratch);
        }
        let fits = |page: &Page| page.bytes.len() + scratch.len() <= PAGE;
        if !self.pages.back().is_some_and(fits) {
            let base = Base {
                seq: transfer.seq,
                at_ms: finished_at(transfer),
                window: transfer
                    .finish
                    .and_then(|finish| finish.settlement_window)
                    .or(last.map(|base| base.window))
                    .unwrap_or(0),
            };
            scratch.clear();
            encode(id, transfer, base, &mut scratch);
            let start = match self.pages.back() {
                // Every record left: start afresh.
                Some(_) if self.len == 0 => {
                    self.pages.clear();
                    self.end.next_multiple_of(PAGE as u64)
                }
                Some(page) => page.start + PAGE as u64,
                None => self.end.next_multiple_of(PAGE as u64),
            };
            self.pages.push_back(Page {
                start,
                bytes: Vec::with_capacity(PAGE),
                base,
            });
            self.end = start;
            if self.len == 0 {
                self.front = start;
            }
        }
        let page = self.pages.back_mut().expect("a page to append to");
        let at = page.start + page.bytes.len() as u64;
        page.bytes.extend_from_slice(&scratch);
        self.end = at + scratch.len() as u64;
        self.scratch = scratch;
        let hash = self.hasher.hash(&id);
        let (pages, front, hasher) = (&self.pages, self.front, self.hasher);
        self.shards[Self::shard(hash)].insert_unique(hash, (at / ALIGN) as u32, |&entry| {
            hasher.hash(&Self::record_id(pages, front, entry))
        });
        self.len += 1;
        match self.unconfirmed.back_mut() {
            _ if batch == 0 => self.durable_end = self.end,
            Some((last, end)) if *last == batch => *end = self.end,
            _ => self.unconfirmed.push_back((batch, self.end)),
        }
    }

    /// The first `durable_batches` batches are durable.
    pub(crate) fn confirm(&mut self, durable_batches: u64) {
        while let Some(&(batch, end)) = self.unconfirmed.front() {
            if batch > durable_batches {
                break;
            }
            self.durable_end = self.durable_end.max(end);
            self.unconfirmed.pop_front();
        }
    }

    /// When the oldest record finished, and whether its batch is known
    /// durable (see [`Finished::confirm`]).
    pub(crate) fn oldest(&self) -> Option<(i64, bool)> {
        if self.len == 0 {
            return None;
        }
        let (page, offset) = Self::locate(&self.pages, self.front);
        let at_ms = at_ms_of(&page.bytes[offset..], page.base);
        Some((at_ms, self.front < self.durable_end))
    }

    /// Removes the oldest record: its id and FX link.
    pub(crate) fn pop_oldest(&mut self) -> Option<(TransferId, Option<FxLink>)> {
        if self.len == 0 {
            return None;
        }
        let at = self.front;
        let (page, offset) = Self::locate(&self.pages, at);
        let bytes = &page.bytes[offset..];
        let id = id_of(bytes);
        let (link, len) = link_of(bytes, page.base);
        let page_end = page.start + page.bytes.len() as u64;
        let hash = self.hasher.hash(&id);
        let entry = (at / ALIGN) as u32;
        if let Ok(found) = self.shards[Self::shard(hash)].find_entry(hash, |&e| e == entry) {
            found.remove();
        }
        self.len -= 1;
        self.front = at + len as u64;
        if self.front == page_end && self.pages.len() > 1 {
            // The next record opens the next page.
            self.pages.pop_front();
            self.front = self.pages[0].start;
        }
        Some((id, link))
    }

    /// Every record, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (TransferId, Transfer)> + '_ {
        let mut at = self.front;
        std::iter::from_fn(move || {
            if self.len == 0 || at >= self.end {
                return None;
            }
            let (mut page, mut offset) = Self::locate(&self.pages, at);
            if offset == page.bytes.len() {
                // The next record opens the next page.
                at = page.start + PAGE as u64;
                (page, offset) = Self::locate(&self.pages, at);
            }
            let (id, transfer, len) = decode(&page.bytes[offset..], page.base);
            at += len as u64;
            Some((id, transfer))
        })
    }

    /// Room in the index for `additional` more.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let (pages, front, hasher) = (&self.pages, self.front, self.hasher);
        for shard in &mut self.shards {
            shard.reserve(additional / SHARDS + 1, |&entry| {
                hasher.hash(&Self::record_id(pages, front, entry))
            });
        }
    }

    /// As [`crate::transfer_map::TransferMap::grow_ahead`]: grows the
    /// fullest shards of the index ahead of need, within a budget of
    /// entries moved.
    pub(crate) fn grow_ahead(&mut self, budget_entries: usize) {
        let (pages, front, hasher) = (&self.pages, self.front, self.hasher);
        let mut spent = 0;
        while let Some(fullest) = self
            .shards
            .iter_mut()
            .filter(|shard| shard.len() * 4 > shard.capacity() * 3)
            .max_by_key(|shard| shard.len() * 1024 / shard.capacity().max(1))
        {
            if spent > 0 && spent + fullest.len() > budget_entries {
                break;
            }
            spent += fullest.len();
            let capacity = fullest.capacity();
            fullest.reserve(capacity, |&entry| {
                hasher.hash(&Self::record_id(pages, front, entry))
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hash32() -> impl Strategy<Value = [u8; 32]> {
        prop_oneof![
            1 => Just([0u8; 32]),
            4 => any::<[u8; 32]>(),
        ]
    }

    fn id() -> impl Strategy<Value = TransferId> {
        (any::<[u8; 16]>(), 0u8..=4).prop_map(|(bytes, tag)| TransferId::from_parts(bytes, tag))
    }

    /// Instants near now, or anywhere.
    fn instant() -> impl Strategy<Value = i64> {
        prop_oneof![
            4 => 1_700_000_000_000i64..1_700_000_100_000,
            1 => any::<i64>(),
        ]
    }

    fn state() -> impl Strategy<Value = TransferState> {
        (0u32..5).prop_map(state_of)
    }

    fn finish() -> impl Strategy<Value = Option<Finish>> {
        prop::option::of(
            (
                0u32..4,
                hash32(),
                instant(),
                prop::option::of(any::<u32>()),
                0u32..3,
            )
                .prop_map(|(kind, hash, at_ms, window, cause)| Finish {
                    kind: finish_kind_of(kind),
                    request_hash: RequestHash(hash),
                    at_ms,
                    settlement_window: window,
                    cause: cause_of(cause),
                }),
        )
    }

    fn fx() -> impl Strategy<Value = Option<Box<FxSlot>>> {
        let link = prop_oneof![
            (id(), any::<[u8; 3]>(), any::<i128>()).prop_map(|(id, currency, amount)| {
                FxLink::Conversion(ConversionTerms {
                    determining_transfer_id: id,
                    target_currency: Currency::from_bytes(currency),
                    target_amount: Amount::from_units(amount),
                })
            }),
            (id(), any::<u32>()).prop_map(|(id, payer)| FxLink::Dependent {
                commit_request_id: id,
                payer: ParticipantId(payer),
            }),
        ];
        let fulfil = prop::option::of(
            (any::<u64>(), any::<[u8; 32]>(), hash32(), instant()).prop_map(
                |(seq, preimage, hash, at_ms)| ConversionFulfilRow {
                    seq,
                    fulfilment: Fulfilment::from_preimage(preimage),
                    request_hash: RequestHash(hash),
                    at_ms,
                },
            ),
        );
        prop::option::of(
            (link, fulfil).prop_map(|(link, fxp_fulfil)| Box::new(FxSlot { link, fxp_fulfil })),
        )
    }

    prop_compose! {
        fn transfer()(
            seq in prop_oneof![4 => 1u64..10_000_000, 1 => any::<u64>()],
            kind in (0u32..4).prop_map(kind_of),
            debit in any::<u32>(),
            credit in any::<u32>(),
            amount in prop_oneof![4 => 1i128..10_000_000_000, 1 => any::<i128>()],
            condition in hash32(),
            expiration_ms in instant(),
            prepared_at_ms in instant(),
            request_hash in hash32(),
            state in state(),
            reason in prop::option::of(any::<u16>()),
            finish in finish(),
            // The fulfilment of the condition, another one, or none.
            fulfilment in prop::option::of((any::<bool>(), any::<[u8; 32]>())),
            memo in prop::option::of((".{0,40}", ".{0,40}")),
            wire_version in any::<u8>(),
            fx in fx(),
        ) -> Transfer {
            let fulfilment = fulfilment.map(|(matching, preimage)| {
                let preimage = if matching { condition } else { preimage };
                Fulfilment::from_preimage(preimage)
            });
            // A matching fulfilment's condition is its SHA-256.
            let condition = match fulfilment {
                Some(f) if fulfilment.is_some() && f.preimage() == &condition => f.condition(),
                _ => Condition(condition),
            };
            Transfer {
                seq,
                kind,
                debit: AccountId(debit),
                credit: AccountId(credit),
                amount: Amount::from_units(amount),
                condition,
                expiration_ms,
                prepared_at_ms,
                request_hash: RequestHash(request_hash),
                state,
                reason: reason.map(ErrorCode),
                finish,
                fulfilment,
                memo: memo.map(|(external_reference, reason)| Box::new(FundsMemo {
                    external_reference,
                    reason,
                })),
                wire_version,
                fx,
            }
        }
    }

    fn base() -> impl Strategy<Value = Base> {
        (any::<u64>(), instant(), any::<u32>()).prop_map(|(seq, at_ms, window)| Base {
            seq,
            at_ms,
            window,
        })
    }

    proptest! {
        /// A record gives back every field of the transfer it was made of,
        /// whatever the values and whatever its page's base.
        #[test]
        fn a_record_gives_back_the_transfer_it_holds(
            id in id(),
            transfer in transfer(),
            base in base(),
        ) {
            let mut bytes = Vec::new();
            encode(id, &transfer, base, &mut bytes);
            prop_assert!((bytes.len() as u64).is_multiple_of(ALIGN));
            // Another record after it: the length is the record's own.
            bytes.extend_from_slice(&[0xff; 8]);
            let (decoded_id, decoded, len) = decode(&bytes, base);
            prop_assert_eq!(decoded_id, id);
            prop_assert_eq!(&decoded, &transfer);
            prop_assert_eq!(len, bytes.len() - 8);
            prop_assert_eq!(id_of(&bytes), id);
            prop_assert_eq!(at_ms_of(&bytes, base), finished_at(&transfer));
            let (link, len_again) = link_of(&bytes, base);
            prop_assert_eq!(link, transfer.fx.as_ref().map(|slot| slot.link));
            prop_assert_eq!(len_again, len);
        }

        /// Records pushed, read, iterated and taken oldest first, across
        /// pages, give back what was pushed; the index finds each while it
        /// is held, and none after.
        #[test]
        fn finished_transfers_are_found_while_held_and_leave_oldest_first(
            transfers in prop::collection::vec((id(), transfer()), 1..16),
            pops in prop::collection::vec(0usize..4, 1..16),
        ) {
            let mut finished = Finished::new();
            let mut held: VecDeque<(TransferId, Transfer)> = VecDeque::new();
            let mut seen = std::collections::HashSet::new();
            let mut pops = pops.into_iter().cycle();
            for (id, transfer) in transfers {
                if !seen.insert(id) {
                    continue;
                }
                // Big records, to cross pages within a few.
                for n in 0..150u64 {
                    let mut bytes = id.bits().to_be_bytes();
                    bytes[..8].copy_from_slice(&n.to_be_bytes());
                    let id = TransferId::from_parts(bytes, id.form_tag());
                    if n > 0 && !seen.insert(id) {
                        continue;
                    }
                    finished.push(id, &transfer, 0);
                    held.push_back((id, transfer.clone()));
                }
                for _ in 0..pops.next().unwrap_or(0) * 75 {
                    let Some((id, transfer)) = held.pop_front() else { break };
                    let (at_ms, durable) = finished.oldest().expect("held");
                    prop_assert_eq!(at_ms, finished_at(&transfer));
                    prop_assert!(durable);
                    let (left, link) = finished.pop_oldest().expect("held");
                    prop_assert_eq!(left, id);
                    prop_assert_eq!(link, transfer.fx.as_ref().map(|slot| slot.link));
                    prop_assert!(!finished.contains(&id));
                }
                prop_assert_eq!(finished.len(), held.len());
            }
            for (id, transfer) in &held {
                prop_assert_eq!(finished.get(id), Some(transfer.clone()));
            }
            let all: Vec<_> = finished.iter().collect();
            prop_assert_eq!(all.len(), held.len());
            for ((id, transfer), (held_id, held_transfer)) in all.iter().zip(&held) {
                prop_assert_eq!(id, held_id);
                prop_assert_eq!(transfer, held_transfer);
            }
            prop_assert!(finished.pages.len() <= 2 + (finished.end - finished.front) as usize / PAGE);
        }
    }

    fn committed(seq: u64, at_ms: i64) -> Transfer {
        let fulfilment = Fulfilment::from_preimage([seq as u8; 32]);
        Transfer {
            seq,
            kind: TransferKind::Fspiop,
            debit: AccountId(3),
            credit: AccountId(5),
            amount: Amount::from_whole(12),
            condition: fulfilment.condition(),
            expiration_ms: at_ms + 30_000,
            prepared_at_ms: at_ms - 40,
            request_hash: RequestHash([1; 32]),
            state: TransferState::Committed,
            reason: None,
            finish: Some(Finish {
                kind: FinishKind::Fulfil,
                request_hash: RequestHash([2; 32]),
                at_ms,
                settlement_window: Some(1),
                cause: None,
            }),
            fulfilment: Some(fulfilment),
            memo: None,
            wire_version: 1,
            fx: None,
        }
    }

    /// A record is counted durable once the batch that finished it is, and
    /// the count only grows.
    #[test]
    fn the_oldest_is_durable_once_its_batch_is() {
        let mut finished = Finished::new();
        finished.push(TransferId::new(1), &committed(1, 100), 3);
        finished.push(TransferId::new(2), &committed(2, 110), 3);
        finished.push(TransferId::new(3), &committed(3, 120), 5);
        assert_eq!(finished.oldest(), Some((100, false)));
        finished.confirm(2);
        assert_eq!(finished.oldest(), Some((100, false)));
        finished.confirm(4);
        assert_eq!(finished.oldest(), Some((100, true)));
        finished.pop_oldest();
        finished.confirm(1);
        assert_eq!(finished.oldest(), Some((110, true)));
        finished.pop_oldest();
        assert_eq!(finished.oldest(), Some((120, false)));
        finished.confirm(5);
        assert_eq!(finished.oldest(), Some((120, true)));
        assert_eq!(
            finished.pop_oldest().map(|(id, _)| id),
            Some(TransferId::new(3))
        );
        assert_eq!(finished.oldest(), None);
        assert_eq!(finished.pop_oldest(), None);
    }

    /// An index entry names the one position it can among those held,
    /// however far the positions have come (they wrap past 2^32 entries).
    #[test]
    fn index_entries_name_positions_past_the_wrap() {
        for front in [0, 10, WINDOW - 6, WINDOW, 3 * WINDOW + 2, u64::MAX / 2 - 1] {
            for offset in [0, 2, 1_000, WINDOW - 2] {
                let at = front + offset;
                let entry = (at / ALIGN) as u32;
                assert_eq!(Finished::position(front, entry), at, "{front} + {offset}");
            }
        }
    }

    /// A committed FSPIOP transfer: about 130 bytes.
    #[test]
    fn a_committed_transfer_takes_about_130_bytes() {
        let mut bytes = Vec::new();
        let transfer = committed(1_000, 1_700_000_000_000);
        let base = Base {
            seq: 900,
            at_ms: 1_700_000_000_000 - 50,
            window: 1,
        };
        encode(TransferId::new(7), &transfer, base, &mut bytes);
        // id 16, flags 3, three hashes 96, then seq 2, finish 1, prepared
        // 1, expiration 3, accounts 2, amount 3, window 1, version 1.
        assert_eq!(bytes.len(), 130);
    }

    /// New transfers are refused before the records could outgrow what
    /// the index addresses.
    #[test]
    fn room_runs_out_before_the_index_could_wrap() {
        let mut finished = Finished::new();
        assert!(finished.has_room(1_000_000));
        assert!(!finished.has_room((WINDOW / RECORD_MAX) as usize));
        let transfer = committed(1, 100);
        assert!(finished.takes(&transfer));
        let memo = Transfer {
            memo: Some(Box::default()),
            ..transfer.clone()
        };
        assert!(!finished.takes(&memo), "funds movements stay live");
        finished.front = 10;
        finished.end = WINDOW - PAGE as u64;
        assert!(!finished.has_room(0));
        // A restore past that is held live rather than at a wrapped position.
        assert!(!finished.takes(&transfer));
    }
}
