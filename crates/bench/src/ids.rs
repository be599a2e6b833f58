//! Transfer, quote and request ids (UUIDs and ULIDs from one counter) and
//! the run's party identifiers (MSISDNs).

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::run::millis_since_epoch;

/// FSPIOP `CorrelationId`s from a per-run random-ish prefix and a 62-bit
/// counter, so that ids never repeat within a run and are unlikely to meet
/// another run's on the same hub. Even counters are lowercase v4 UUIDs and
/// odd ones ULIDs, as Mojaloop's Testing Toolkit sends by default: a hub
/// must take both, and every run checks that it does.
pub(crate) struct IdGen {
    /// `xxxxxxxx-xxxx-4xxx-`.
    pub(crate) prefix: String,
    /// The first 13 of a ULID's 26 characters.
    pub(crate) ulid_prefix: String,
    pub(crate) next: AtomicU64,
}

/// Crockford's base32, as ULIDs use it.
pub(crate) const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
/// A ULID's characters after [`IdGen::ulid_prefix`]: 65 bits, room for
/// the counter.
pub(crate) const ULID_COUNTER_CHARS: usize = 13;

impl IdGen {
    pub(crate) fn new(seed: u64) -> IdGen {
        let bits = splitmix64(seed) & ((1 << 60) - 1);
        let ulid_bits = splitmix64(seed ^ 0x5EED);
        // The first character stays within 0-7, as the ULID specification
        // asks (the whole value fits 128 bits).
        let ulid_prefix = (0..ULID_COUNTER_CHARS)
            .map(|index| {
                let digit = (ulid_bits >> (5 * index)) & if index == 0 { 7 } else { 31 };
                char::from(CROCKFORD[digit as usize])
            })
            .collect();
        IdGen {
            prefix: format!(
                "{:08x}-{:04x}-4{:03x}-",
                bits >> 28,
                (bits >> 12) & 0xffff,
                bits & 0xfff
            ),
            ulid_prefix,
            next: AtomicU64::new(1),
        }
    }

    pub(crate) fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The id of counter value `n` (below 2^62): a UUID whose variant
    /// nibble and last two groups carry it when even, a ULID whose last 13
    /// characters do when odd.
    pub(crate) fn format(&self, n: u64) -> String {
        if n % 2 == 1 {
            let mut id = self.ulid_prefix.clone();
            id.extend(
                (0..ULID_COUNTER_CHARS)
                    .rev()
                    .map(|index| char::from(CROCKFORD[((n >> (5 * index)) & 31) as usize])),
            );
            return id;
        }
        let variant = 0x8000 | ((n >> 48) & 0x3fff);
        format!("{}{variant:04x}-{:012x}", self.prefix, n & 0xffff_ffff_ffff)
    }

    /// The counter value of one of this run's ids; `None` for any other text.
    pub(crate) fn counter_of(&self, id: &str) -> Option<u64> {
        if let Some(counter) = id.strip_prefix(self.ulid_prefix.as_str()) {
            if counter.len() != ULID_COUNTER_CHARS {
                return None;
            }
            let n = counter.bytes().try_fold(0u64, |n, byte| {
                let digit = CROCKFORD.iter().position(|&c| c == byte)?;
                n.checked_mul(32)?.checked_add(digit as u64)
            })?;
            return (n % 2 == 1).then_some(n);
        }
        let rest = id.strip_prefix(self.prefix.as_str())?;
        let (variant, node) = rest.split_once('-')?;
        let lower_hex = |s: &str| s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if variant.len() != 4 || node.len() != 12 || !lower_hex(variant) || !lower_hex(node) {
            return None;
        }
        let variant = u64::from_str_radix(variant, 16).ok()?;
        if variant & 0xc000 != 0x8000 {
            return None;
        }
        let n = ((variant & 0x3fff) << 48) | u64::from_str_radix(node, 16).ok()?;
        (n % 2 == 0).then_some(n)
    }
}

pub(crate) fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Mixes the pid, the time and a stack address (ASLR) into a seed.
pub(crate) fn run_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let local = 0u8;
    let address = &local as *const u8 as usize as u64;
    splitmix64(nanos ^ u64::from(std::process::id()).rotate_left(32) ^ address)
}

pub(crate) fn now_ms() -> i64 {
    millis_since_epoch(SystemTime::now())
}

/// One of the parties the simulated DFSPs register: the `index`-th MSISDN
/// of DFSP `dfsp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PartyRef {
    pub(crate) dfsp: u32,
    pub(crate) index: u32,
}

/// The MSISDN of `party` in the run tagged `tag` (below 10^6): `2`, the tag,
/// then the DFSP and party indexes in four digits each (both below 10,000):
/// 15 digits, an E.164 number, and no other run's (likely).
pub(crate) fn party_identifier(tag: u32, party: PartyRef) -> String {
    debug_assert!(tag < 1_000_000 && party.dfsp < 10_000 && party.index < 10_000);
    format!("2{tag:06}{:04}{:04}", party.dfsp, party.index)
}

/// The party [`party_identifier`] made `text` from, if it did for `tag`.
pub(crate) fn parse_party_identifier(tag: u32, text: &str) -> Option<PartyRef> {
    let rest = text.strip_prefix(&format!("2{tag:06}"))?;
    if rest.len() != 8 || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(PartyRef {
        dfsp: rest[..4].parse().ok()?,
        index: rest[4..].parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_correlation_ids_and_round_trip() {
        for seed in [0, 1, 42, u64::MAX, run_seed()] {
            let ids = IdGen::new(seed);
            for n in [
                0,
                1,
                255,
                256,
                0xffff_ffff_ffff,
                1 << 48,
                (1 << 62) - 1,
                (1 << 62) - 2,
                123_456_789,
            ] {
                let id = ids.format(n);
                assert!(fspiop::is_correlation_id(&id), "{id}");
                let parsed = ledger::TransferId::parse(&id).expect("parses");
                assert_eq!(parsed.to_string(), id, "echoed as given");
                if n % 2 == 0 {
                    assert_eq!(&id[14..15], "4", "{id}");
                    assert_eq!(parsed.form(), ledger::IdForm::Uuid);
                } else {
                    assert_eq!(id.len(), 26, "{id}");
                    assert_eq!(parsed.form(), ledger::IdForm::Ulid);
                }
                assert_eq!(ids.counter_of(&id), Some(n), "{id}");
            }
        }
        let ids = IdGen::new(7);
        let ulid = ids.format(ids.next());
        let uuid = ids.format(ids.next());
        let next_ulid = ids.format(ids.next());
        assert_eq!((ulid.len(), uuid.len()), (26, 36));
        assert_ne!(ulid, next_ulid);
        assert_eq!(ulid[..13], next_ulid[..13]);
        // Other runs' ids and other text are not ours.
        let other = IdGen::new(8);
        assert_eq!(ids.counter_of(&other.format(1)), None);
        assert_eq!(ids.counter_of(&other.format(2)), None);
        assert_eq!(ids.counter_of(&uuid.to_uppercase()), None);
        assert_eq!(ids.counter_of(&ulid.to_lowercase()), None);
        assert_eq!(ids.counter_of(&uuid[..35]), None);
        assert_eq!(ids.counter_of(&ulid[..25]), None);
        assert_eq!(ids.counter_of(""), None);
        let mut wrong_variant = uuid.clone();
        wrong_variant.replace_range(19..20, "c");
        assert_eq!(ids.counter_of(&wrong_variant), None);
    }

    #[test]
    fn party_identifiers_are_msisdns_and_round_trip() {
        for tag in [0, 1, 424_242, 999_999] {
            for (dfsp, index) in [(0, 0), (1, 999), (9_999, 9_999), (7, 1)] {
                let party = PartyRef { dfsp, index };
                let id = party_identifier(tag, party);
                // E.164: at most 15 digits, no leading zero.
                assert_eq!(id.len(), 15, "{id}");
                assert!(id.bytes().all(|b| b.is_ascii_digit()), "{id}");
                assert!(!id.starts_with('0'), "{id}");
                fspiop::check_party_identifier(&id).expect("a valid path {ID}");
                assert_eq!(parse_party_identifier(tag, &id), Some(party), "{id}");
                if tag != 0 {
                    assert_eq!(parse_party_identifier(tag - 1, &id), None, "{id}");
                }
            }
        }
        let id = party_identifier(5, PartyRef { dfsp: 3, index: 4 });
        assert_eq!(parse_party_identifier(5, &id[..14]), None);
        assert_eq!(parse_party_identifier(5, &format!("{id}0")), None);
        assert_eq!(parse_party_identifier(5, &id.replace("0003", "00x3")), None);
        assert_eq!(parse_party_identifier(5, ""), None);
    }
}
