//! Building blocks shared by the body parsers of several resources: nested
//! field paths for error descriptions, `Money`, enumerations, and the small
//! FSPIOP string types (`GeoCode`, `Name`, `Date`, ...), all hand-written.

use crate::datetime::is_date;
use crate::json::{char_len_at_most, JsonObj, JsonStr};
use crate::transfers::{
    bounded_text, correlation_id, optional_obj, optional_str, required_obj, required_str, MoneyRaw,
    CORRELATION_ID_RULE,
};
use crate::FspiopError;
use ledger::{Amount, Currency, TransferId};
use serde::Deserialize;
use std::fmt;

// ------------------------------------------------------------- field paths

/// `{parent}.{leaf}`, e.g. `payee.partyIdInfo`.
#[derive(Clone, Copy)]
pub(crate) struct Child<P>(pub(crate) P, pub(crate) &'static str);

impl<P: fmt::Display> fmt::Display for Child<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// `{parent}[{index}]`, e.g. `partyList[3]`.
#[derive(Clone, Copy)]
pub(crate) struct Item<P>(pub(crate) P, pub(crate) usize);

impl<P: fmt::Display> fmt::Display for Item<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.0, self.1)
    }
}

// ------------------------------------------------------------------ Money

/// FSPIOP's `Money`: an amount in a currency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Money {
    pub amount: Amount,
    pub currency: Currency,
}

/// A `Currency` string: one of ISO 4217's codes in FSPIOP's list.
pub(crate) fn currency(text: &str, path: impl fmt::Display) -> Result<Currency, FspiopError> {
    Currency::parse(text)
        .ok_or_else(|| FspiopError::invalid(path, "not an ISO 4217 currency code in FSPIOP's list"))
}

/// An optional `Currency` property.
pub(crate) fn optional_currency(
    value: &JsonStr<'_>,
    path: impl fmt::Display + Copy,
) -> Result<Option<Currency>, FspiopError> {
    match optional_str(value, path)? {
        Some(text) => currency(text, path).map(Some),
        None => Ok(None),
    }
}

/// A required `Money` object: `{currency, amount}`, checked in that order.
pub(crate) fn money(
    value: &JsonObj<MoneyRaw<'_>>,
    path: impl fmt::Display + Copy,
) -> Result<Money, FspiopError> {
    let raw = required_obj(value, path)?;
    let currency_path = Child(path, "currency");
    let currency = currency(required_str(&raw.currency, currency_path)?, currency_path)?;
    let amount_path = Child(path, "amount");
    let amount = Amount::parse_fspiop(required_str(&raw.amount, amount_path)?)
        .map_err(|error| FspiopError::invalid(amount_path, error))?;
    Ok(Money { amount, currency })
}

/// An optional `Money` object.
pub(crate) fn optional_money(
    value: &JsonObj<MoneyRaw<'_>>,
    path: impl fmt::Display + Copy,
) -> Result<Option<Money>, FspiopError> {
    match value {
        JsonObj::Absent => Ok(None),
        other => money(other, path).map(Some),
    }
}

// ----------------------------------------------------------- simple types

/// A required `CorrelationId` property.
pub(crate) fn correlation_id_field(
    value: &JsonStr<'_>,
    path: impl fmt::Display + Copy,
) -> Result<TransferId, FspiopError> {
    correlation_id(required_str(value, path)?)
        .ok_or_else(|| FspiopError::invalid(path, CORRELATION_ID_RULE))
}

/// An optional `CorrelationId` property.
pub(crate) fn optional_correlation_id(
    value: &JsonStr<'_>,
    path: impl fmt::Display + Copy,
) -> Result<Option<TransferId>, FspiopError> {
    match value {
        JsonStr::Absent => Ok(None),
        other => correlation_id_field(other, path).map(Some),
    }
}

/// A required property whose value is one of `allowed` (case-sensitive);
/// returns the matching constant.
pub(crate) fn one_of(
    value: &JsonStr<'_>,
    path: impl fmt::Display + Copy,
    allowed: &'static [&'static str],
) -> Result<&'static str, FspiopError> {
    let text = required_str(value, path)?;
    allowed
        .iter()
        .copied()
        .find(|candidate| *candidate == text)
        .ok_or_else(|| {
            FspiopError::invalid(path, format_args!("must be one of {}", allowed.join(", ")))
        })
}

/// An optional string checked by `is_valid`; 3100 with `rule` otherwise.
pub(crate) fn optional_pattern<'b>(
    value: &'b JsonStr<'_>,
    path: impl fmt::Display + Copy,
    is_valid: fn(&str) -> bool,
    rule: &'static str,
) -> Result<Option<&'b str>, FspiopError> {
    match optional_str(value, path)? {
        Some(text) if !is_valid(text) => Err(FspiopError::invalid(path, rule)),
        other => Ok(other),
    }
}

/// An optional string of 1..=max characters.
pub(crate) fn optional_text<'b>(
    value: &'b JsonStr<'_>,
    path: impl fmt::Display + Copy,
    max: usize,
) -> Result<Option<&'b str>, FspiopError> {
    match value {
        JsonStr::Absent => Ok(None),
        other => bounded_text(other, path, max).map(Some),
    }
}

/// `count_min..=count_max` ASCII digits, the first not `0` when
/// `no_leading_zero`.
fn is_digits(text: &str, count_min: usize, count_max: usize, no_leading_zero: bool) -> bool {
    let bytes = text.as_bytes();
    (count_min..=count_max).contains(&bytes.len())
        && bytes.iter().all(u8::is_ascii_digit)
        && !(no_leading_zero && bytes.first() == Some(&b'0'))
}

/// `MerchantClassificationCode`: `^[\d]{1,4}$`.
pub(crate) fn is_merchant_classification_code(text: &str) -> bool {
    is_digits(text, 1, 4, false)
}

/// `BalanceOfPayments`: `^[1-9]\d{2}$`.
pub(crate) fn is_balance_of_payments(text: &str) -> bool {
    is_digits(text, 3, 3, true)
}

/// `UndefinedEnum` / `TransactionSubScenario`: `^[A-Z_]{1,32}$`.
pub(crate) fn is_undefined_enum(text: &str) -> bool {
    (1..=32).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
}

/// `Date`: `YYYY-MM-DD`, a real calendar date in years 1000-9999.
pub(crate) fn is_fspiop_date(text: &str) -> bool {
    is_date(text)
}

/// FSPIOP's `Name` (`FirstName`, `MiddleName`, `LastName`): 1-128
/// characters, not only spaces, ASCII characters limited to letters,
/// digits, `_`, space, `.`, `,`, `'` and `-`.
///
/// The schema's `\w` is meant to cover every Unicode letter (its own note
/// says so, and later Mojaloop versions spell it out with `\p{L}` and
/// marks); without Unicode tables, any non-ASCII character other than
/// whitespace or a control is accepted, so that no real name is refused.
pub(crate) fn is_name(text: &str) -> bool {
    !text.is_empty()
        && char_len_at_most(text, 128)
        && text.chars().any(|c| c != ' ')
        && text.chars().all(|c| {
            if c.is_ascii() {
                c.is_ascii_alphanumeric() || matches!(c, '_' | ' ' | '.' | ',' | '\'' | '-')
            } else {
                !c.is_whitespace() && !c.is_control()
            }
        })
}

/// `Latitude` (`max` 90) or `Longitude` (`max` 180): an optional sign, an
/// integer 0..max without leading zeros, and up to six decimals; exactly
/// `max` only with zero decimals.
fn is_coordinate(text: &str, max: u32) -> bool {
    let unsigned = text
        .strip_prefix('+')
        .or_else(|| text.strip_prefix('-'))
        .unwrap_or(text);
    let (integer, fraction) = match unsigned.split_once('.') {
        Some((integer, fraction)) => (integer, Some(fraction)),
        None => (unsigned, None),
    };
    if !is_digits(integer, 1, 3, integer.len() > 1) {
        return false;
    }
    let whole = integer
        .bytes()
        .fold(0u32, |n, b| n * 10 + u32::from(b - b'0'));
    let fraction_ok = match fraction {
        None => true,
        Some(digits) => is_digits(digits, 1, 6, false),
    };
    fraction_ok
        && (whole < max || whole == max && fraction.is_none_or(|d| d.bytes().all(|b| b == b'0')))
}

pub(crate) fn is_latitude(text: &str) -> bool {
    is_coordinate(text, 90)
}

pub(crate) fn is_longitude(text: &str) -> bool {
    is_coordinate(text, 180)
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct GeoCodeRaw<'a> {
    #[serde(borrow)]
    latitude: JsonStr<'a>,
    #[serde(borrow)]
    longitude: JsonStr<'a>,
}

/// An optional `GeoCode`: `{latitude, longitude}`, both required.
pub(crate) fn check_geo_code(
    value: &JsonObj<GeoCodeRaw<'_>>,
    path: impl fmt::Display + Copy,
) -> Result<(), FspiopError> {
    let Some(geo) = optional_obj(value, path)? else {
        return Ok(());
    };
    let latitude = Child(path, "latitude");
    if !is_latitude(required_str(&geo.latitude, latitude)?) {
        return Err(FspiopError::invalid(
            latitude,
            "not a Latitude (-90 to +90, up to 6 decimals)",
        ));
    }
    let longitude = Child(path, "longitude");
    if !is_longitude(required_str(&geo.longitude, longitude)?) {
        return Err(FspiopError::invalid(
            longitude,
            "not a Longitude (-180 to +180, up to 6 decimals)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_nest() {
        let path = Child(Item(Child("payee", "list"), 3), "key");
        assert_eq!(path.to_string(), "payee.list[3].key");
    }

    #[test]
    fn coordinates() {
        for ok in [
            "0",
            "+45.4215",
            "-75.6972",
            "90",
            "90.0",
            "-90.000000",
            "89.999999",
            "9.1",
        ] {
            assert!(is_latitude(ok), "{ok}");
        }
        for bad in [
            "",
            "+",
            "90.1",
            "91",
            "090",
            "00",
            "1.",
            ".5",
            "1.1234567",
            "45,1",
            "++1",
            "1e2",
        ] {
            assert!(!is_latitude(bad), "{bad}");
        }
        for ok in [
            "180",
            "-180.0",
            "179.999999",
            "+75.6972",
            "0.5",
            "99",
            "100",
        ] {
            assert!(is_longitude(ok), "{ok}");
        }
        for bad in ["180.000001", "181", "200", "0180", "1000"] {
            assert!(!is_longitude(bad), "{bad}");
        }
    }

    #[test]
    fn names() {
        for ok in [
            "Henrik",
            "O'Brien-Smith",
            "J. R.",
            "José",
            "Ólafur",
            "李",
            "a_b, c",
        ] {
            assert!(is_name(ok), "{ok}");
        }
        for bad in [
            "",
            "   ",
            "a@b",
            "tab\there",
            "x\u{2003}y",
            &"x".repeat(129),
        ] {
            assert!(!is_name(bad), "{bad:?}");
        }
        assert!(is_name(&"é".repeat(128)));
    }

    #[test]
    fn digit_patterns() {
        assert!(is_merchant_classification_code("0"));
        assert!(is_merchant_classification_code("4321"));
        assert!(!is_merchant_classification_code("12345"));
        assert!(!is_merchant_classification_code(""));
        assert!(!is_merchant_classification_code("12a"));
        assert!(is_balance_of_payments("123"));
        assert!(!is_balance_of_payments("023"));
        assert!(!is_balance_of_payments("12"));
        assert!(is_undefined_enum("LOCALLY_DEFINED"));
        assert!(!is_undefined_enum("Locally"));
        assert!(!is_undefined_enum(""));
        assert!(!is_undefined_enum(&"A".repeat(33)));
    }

    #[test]
    fn dates() {
        for ok in ["1966-06-16", "2000-02-29", "9999-12-31", "1000-01-01"] {
            assert!(is_fspiop_date(ok), "{ok}");
        }
        for bad in [
            "1900-02-29",
            "0999-01-01",
            "1966-13-01",
            "1966-00-10",
            "1966-04-31",
            "1966-6-16",
            "1966/06/16",
            "1966-06-16T00:00:00.000Z",
        ] {
            assert!(!is_fspiop_date(bad), "{bad}");
        }
    }
}
