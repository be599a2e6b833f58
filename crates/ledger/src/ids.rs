//! Identifiers: transfer ids (UUIDs), FSP names, ISO 4217 currencies and the
//! ledger's own dense indexes. All are `Copy` and allocation-free so that a
//! command can be moved between threads without touching the heap.

use std::fmt;

/// A transfer id: FSPIOP's `CorrelationId`, a UUID, held as 128 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TransferId(pub u128);

impl TransferId {
    /// Parses the 36-character hyphenated form, in either case.
    pub fn parse(text: &str) -> Option<TransferId> {
        let bytes = text.as_bytes();
        if bytes.len() != 36 {
            return None;
        }
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
        Some(TransferId(value))
    }

    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    pub fn from_bytes(bytes: [u8; 16]) -> TransferId {
        TransferId(u128::from_be_bytes(bytes))
    }
}

/// Lowercase hyphenated UUID, as FSPIOP's pattern requires.
impl fmt::Display for TransferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = format!("{:032x}", self.0);
        write!(
            f,
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )
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

/// FSPIOP v1.1's `Currency` enumeration (ISO 4217 alphabetic codes).
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
    "XOF", "XPF", "YER", "ZAR", "ZMW", "ZWD",
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
        assert_eq!(id.to_string(), text);
        assert_eq!(TransferId::parse(&text.to_uppercase()), Some(id));
        assert_eq!(TransferId::from_bytes(id.to_bytes()), id);
        assert_eq!(TransferId::parse("b51ec534ee484575b6a9ead2955b8069"), None);
        assert_eq!(
            TransferId::parse("g51ec534-ee48-4575-b6a9-ead2955b8069"),
            None
        );
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
    }
}
