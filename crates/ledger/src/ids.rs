//! Identifiers: transfer ids (UUIDs), FSP names, ISO 4217 currencies and the
//! ledger's own dense indexes. All are `Copy` and allocation-free so that a
//! command can be moved between threads without touching the heap.

use std::fmt;

/// How an id was written. FSPIOP v1.1's `CorrelationId` is a UUID, but
/// Mojaloop's hub also takes ULIDs (ml-api-adapter's CorrelationId pattern),
/// and its Testing Toolkit generates ULIDs by default; an id is echoed in the
/// form it came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IdForm {
    /// 36 characters, hyphenated hex, shown in lowercase.
    Uuid,
    /// 26 characters of Crockford base32, shown in uppercase.
    Ulid,
}

/// A transfer (or quote, or request) id: FSPIOP's `CorrelationId`, 128 bits
/// and the form they were written in. A UUID and a ULID with the same bits
/// are different ids. Held as bytes (17, alignment 1) so that the ledger's
/// maps stay dense.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TransferId {
    bytes: [u8; 16],
    /// 0 for a UUID; `1 + k` for a ULID whose first character carries `k`
    /// in its two high bits. A ULID's 26 characters hold 130 bits; the
    /// specification keeps the first character at most `7` (128 bits), but
    /// Mojaloop's pattern takes any Crockford character, so kasi keeps the
    /// two extra bits rather than refuse an id Mojaloop's hub accepts.
    tag: u8,
}

const UUID_TAG: u8 = 0;
const ULID_TAG: u8 = 1;

impl std::hash::Hash for TransferId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u128(self.bits());
        state.write_u8(self.tag);
    }
}

/// Crockford's base32 alphabet, as ULIDs use it.
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Characters of a ULID (26 × 5 bits).
pub const ULID_LEN: usize = 26;
/// Characters of a hyphenated UUID.
pub const UUID_LEN: usize = 36;

impl TransferId {
    /// A UUID-form id of these bits.
    pub const fn new(bits: u128) -> TransferId {
        TransferId {
            bytes: bits.to_be_bytes(),
            tag: UUID_TAG,
        }
    }

    /// A ULID-form id of these bits (a specification ULID: first character
    /// `0`-`7`).
    pub const fn ulid(bits: u128) -> TransferId {
        TransferId {
            bytes: bits.to_be_bytes(),
            tag: ULID_TAG,
        }
    }

    /// The form the id was written in (see the field).
    pub(crate) const fn form_tag(self) -> u8 {
        self.tag
    }

    /// The id of these bits and [`TransferId::form_tag`] (as the ledger's
    /// compact records keep it).
    pub(crate) const fn from_parts(bytes: [u8; 16], tag: u8) -> TransferId {
        TransferId { bytes, tag }
    }

    /// The low 128 bits (all of them, but for an out-of-range ULID's two
    /// extra ones).
    pub const fn bits(self) -> u128 {
        u128::from_be_bytes(self.bytes)
    }

    pub const fn form(self) -> IdForm {
        match self.tag {
            UUID_TAG => IdForm::Uuid,
            _ => IdForm::Ulid,
        }
    }

    /// Parses a hyphenated UUID (hex in either case) or a ULID (uppercase
    /// Crockford base32). Which patterns an API accepts is the wire
    /// format's business (`fspiop::is_correlation_id`); this reads the bits.
    pub fn parse(text: &str) -> Option<TransferId> {
        match text.len() {
            UUID_LEN => Self::parse_uuid(text.as_bytes()),
            ULID_LEN => Self::parse_ulid(text.as_bytes()),
            _ => None,
        }
    }

    fn parse_uuid(bytes: &[u8]) -> Option<TransferId> {
        let mut value: u128 = 0;
        for (index, &byte) in bytes.iter().enumerate() {
            if matches!(index, 8 | 13 | 18 | 23) {
                if byte != b'-' {
                    return None;
                }
                continue;
            }
            let nibble = (byte as char).to_digit(16)?;
            value = (value << 4) | u128::from(nibble);
        }
        Some(TransferId::new(value))
    }

    fn parse_ulid(bytes: &[u8]) -> Option<TransferId> {
        let digit = |byte: u8| CROCKFORD.iter().position(|&c| c == byte).map(|d| d as u8);
        let first = digit(*bytes.first()?)?;
        let mut value = u128::from(first & 0b111);
        for &byte in &bytes[1..] {
            value = (value << 5) | u128::from(digit(byte)?);
        }
        Some(TransferId {
            bytes: value.to_be_bytes(),
            tag: ULID_TAG + (first >> 3),
        })
    }

    /// The id as the store keeps it: the 16 bytes of a UUID (as kasi has
    /// always stored them), or those of a ULID followed by its tag.
    pub fn to_blob(self) -> IdBlob {
        let mut bytes = [0u8; 17];
        bytes[..16].copy_from_slice(&self.bytes);
        bytes[16] = self.tag;
        IdBlob {
            bytes,
            len: if self.tag == UUID_TAG { 16 } else { 17 },
        }
    }

    /// The inverse of [`TransferId::to_blob`]; `None` for any other blob.
    pub fn from_blob(blob: &[u8]) -> Option<TransferId> {
        let bytes: [u8; 16] = blob.get(..16)?.try_into().ok()?;
        let tag = match blob[16..] {
            [] => UUID_TAG,
            [tag @ ULID_TAG..=4] => tag,
            _ => return None,
        };
        Some(TransferId { bytes, tag })
    }
}

/// A [`TransferId`] as stored: 16 or 17 bytes.
#[derive(Clone, Copy)]
pub struct IdBlob {
    bytes: [u8; 17],
    len: usize,
}

impl IdBlob {
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// A UUID as lowercase hyphenated hex (FSPIOP's pattern), a ULID in
/// canonical uppercase Crockford base32.
impl fmt::Display for TransferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = self.bits();
        match self.form() {
            IdForm::Uuid => {
                // Written in place: ids are formatted for every message
                // the hub sends or records.
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut text = [b'-'; 36];
                let mut nibble = 0;
                for (at, slot) in text.iter_mut().enumerate() {
                    if matches!(at, 8 | 13 | 18 | 23) {
                        continue;
                    }
                    *slot = HEX[((bits >> (124 - 4 * nibble)) & 15) as usize];
                    nibble += 1;
                }
                f.write_str(std::str::from_utf8(&text).unwrap_or("?"))
            }
            IdForm::Ulid => {
                let mut text = [0u8; ULID_LEN];
                let high = (self.tag - ULID_TAG) << 3 | (bits >> 125) as u8;
                text[0] = CROCKFORD[usize::from(high)];
                for (index, slot) in text.iter_mut().enumerate().skip(1) {
                    let shift = 5 * (ULID_LEN - 1 - index);
                    *slot = CROCKFORD[((bits >> shift) & 31) as usize];
                }
                f.write_str(std::str::from_utf8(&text).unwrap_or("?"))
            }
        }
    }
}

impl fmt::Debug for TransferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TransferId({self})")
    }
}

/// Longest FSP name, as FSPIOP's `FspId` (maxLength 32).
pub const FSP_NAME_MAX_LEN: usize = 32;

/// The name of a participant (FSPIOP `FspId`), stored inline.
///
/// kasi accepts 1–32 printable ASCII characters other than space and `/`:
/// the name appears in URL paths (`/participants/{name}`) and HTTP headers
/// (`FSPIOP-Source`), where anything else would need escaping.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FspName {
    len: u8,
    bytes: [u8; FSP_NAME_MAX_LEN],
}

impl FspName {
    pub fn new(text: &str) -> Option<FspName> {
        let raw = text.as_bytes();
        if raw.is_empty() || raw.len() > FSP_NAME_MAX_LEN {
            return None;
        }
        if !raw.iter().all(|&b| b.is_ascii_graphic() && b != b'/') {
            return None;
        }
        let mut bytes = [0u8; FSP_NAME_MAX_LEN];
        bytes[..raw.len()].copy_from_slice(raw);
        Some(FspName {
            len: raw.len() as u8,
            bytes,
        })
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored (checked in `new`).
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl fmt::Display for FspName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for FspName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// An ISO 4217 alphabetic currency code from FSPIOP v1.1's `Currency` enum.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Currency([u8; 3]);

/// FSPIOP v1.1's `Currency` enumeration (ISO 4217 alphabetic codes), as
/// the implementation edition of the v1.1 definition lists it: with `XTS`
/// (reserved for testing) and `XXX` (no currency), which central-ledger
/// seeds too. Every currency has kasi's one scale, 4 decimals
/// ([`crate::SCALE`]): central-ledger seeds both with scale 4, and ISO
/// gives them no minor unit.
const ISO_4217: &[&str] = &[
    "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT",
    "BGN", "BHD", "BIF", "BMD", "BND", "BOB", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD",
    "CDF", "CHF", "CLP", "CNY", "COP", "CRC", "CUC", "CUP", "CVE", "CZK", "DJF", "DKK", "DOP",
    "DZD", "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GGP", "GHS", "GIP", "GMD",
    "GNF", "GTQ", "GYD", "HKD", "HNL", "HRK", "HTG", "HUF", "IDR", "ILS", "IMP", "INR", "IQD",
    "IRR", "ISK", "JEP", "JMD", "JOD", "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW", "KWD",
    "KYD", "KZT", "LAK", "LBP", "LKR", "LRD", "LSL", "LYD", "MAD", "MDL", "MGA", "MKD", "MMK",
    "MNT", "MOP", "MRO", "MUR", "MVR", "MWK", "MXN", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK",
    "NPR", "NZD", "OMR", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD",
    "RUB", "RWF", "SAR", "SBD", "SCR", "SDG", "SEK", "SGD", "SHP", "SLL", "SOS", "SPL", "SRD",
    "STD", "SVC", "SYP", "SZL", "THB", "TJS", "TMT", "TND", "TOP", "TRY", "TTD", "TVD", "TWD",
    "TZS", "UAH", "UGX", "USD", "UYU", "UZS", "VEF", "VND", "VUV", "WST", "XAF", "XCD", "XDR",
    "XOF", "XPF", "XTS", "XXX", "YER", "ZAR", "ZMW", "ZWD",
];

impl Currency {
    /// Accepts only codes in FSPIOP's ISO 4217 list.
    pub fn parse(text: &str) -> Option<Currency> {
        let code = ISO_4217.binary_search(&text).ok().map(|i| ISO_4217[i])?;
        let bytes = code.as_bytes();
        Some(Currency([bytes[0], bytes[1], bytes[2]]))
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("???")
    }

    /// The three letters, as the ledger's compact records keep them.
    pub(crate) const fn to_bytes(self) -> [u8; 3] {
        self.0
    }

    /// The inverse of [`Currency::to_bytes`].
    pub(crate) const fn from_bytes(bytes: [u8; 3]) -> Currency {
        Currency(bytes)
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Dense index of a participant inside the ledger (and its store row id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParticipantId(pub u32);

/// Dense index of an account inside the ledger (and its store row id, which
/// the admin API shows as the account `id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AccountId(pub u32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_id_round_trips() {
        let text = "b51ec534-ee48-4575-b6a9-ead2955b8069";
        let id = TransferId::parse(text).unwrap();
        assert_eq!(id.form(), IdForm::Uuid);
        assert_eq!(id.to_string(), text);
        assert_eq!(TransferId::parse(&text.to_uppercase()), Some(id));
        assert_eq!(TransferId::from_blob(id.to_blob().as_slice()), Some(id));
        assert_eq!(id.to_blob().as_slice().len(), 16);
        assert_eq!(TransferId::parse("b51ec534ee484575b6a9ead2955b8069"), None);
        assert_eq!(
            TransferId::parse("g51ec534-ee48-4575-b6a9-ead2955b8069"),
            None
        );
    }

    #[test]
    fn ulids_round_trip_and_stay_distinct_from_uuids() {
        let text = "01K1WV2595Z7XST8FW5K4XRDZB";
        let id = TransferId::parse(text).unwrap();
        assert_eq!(id.form(), IdForm::Ulid);
        assert_eq!(id.to_string(), text);
        assert_eq!(TransferId::from_blob(id.to_blob().as_slice()), Some(id));
        assert_ne!(TransferId::new(id.bits()), id);
        // The largest specification ULID is 7ZZ…Z; Mojaloop's pattern also
        // takes 8-Z first, whose extra bits are kept.
        let largest = TransferId::parse("7ZZZZZZZZZZZZZZZZZZZZZZZZZ").unwrap();
        assert_eq!(largest, TransferId::ulid(u128::MAX));
        for text in [
            "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
            "ZZZZZZZZZZZZZZZZZZZZZZZZZZ",
            "80000000000000000000000000",
        ] {
            let id = TransferId::parse(text).unwrap();
            assert_eq!(id.to_string(), text);
            assert_eq!(TransferId::from_blob(id.to_blob().as_slice()), Some(id));
            assert_ne!(id, largest);
        }
        assert_eq!(TransferId::ulid(0).to_string(), "0".repeat(26));
        for bad in [
            "01K1WV2595Z7XST8FW5K4XRDZ",   // 25
            "01K1WV2595Z7XST8FW5K4XRDZBB", // 27
            "01K1WV2595Z7XST8FW5K4XRDZI",  // I is not Crockford
            "01K1WV2595Z7XST8FW5K4XRDZU",  // nor U
        ] {
            assert_eq!(TransferId::parse(bad), None, "{bad}");
        }
        assert_eq!(TransferId::from_blob(&[0; 15]), None);
        assert_eq!(TransferId::from_blob(&[0; 18]), None);
        let mut wrong_tag = [0u8; 17];
        wrong_tag[16] = 5;
        assert_eq!(TransferId::from_blob(&wrong_tag), None);
    }

    #[test]
    fn fsp_names_are_bounded_and_url_safe() {
        assert_eq!(FspName::new("payerfsp").unwrap().as_str(), "payerfsp");
        assert!(FspName::new("").is_none());
        assert!(FspName::new(&"x".repeat(33)).is_none());
        assert!(FspName::new(&"x".repeat(32)).is_some());
        assert!(FspName::new("a b").is_none());
        assert!(FspName::new("a/b").is_none());
        assert!(FspName::new("é").is_none());
    }

    #[test]
    fn currencies_are_iso_4217() {
        assert!(
            ISO_4217.windows(2).all(|w| w[0] < w[1]),
            "list must stay sorted for binary search"
        );
        assert_eq!(Currency::parse("USD").unwrap().as_str(), "USD");
        assert!(Currency::parse("usd").is_none());
        assert!(Currency::parse("XYZ").is_none());
        // The testing and no-currency codes of the implementation edition.
        assert_eq!(Currency::parse("XTS").unwrap().as_str(), "XTS");
        assert_eq!(Currency::parse("XXX").unwrap().as_str(), "XXX");
    }
}
