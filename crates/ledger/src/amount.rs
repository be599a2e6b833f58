//! Exact fixed-point money.
//!
//! FSPIOP amounts have at most 18 integer digits and 4 decimals, so every
//! amount is held as a whole number of ten-thousandths in an `i128`. There is
//! no floating point anywhere in kasi's money path; every operation is
//! checked and returns `None` instead of overflowing.

use std::fmt;

/// Decimal places every amount is held at (FSPIOP's maximum scale).
pub const SCALE: u32 = 4;
/// Integer digits an FSPIOP amount may have (FSPIOP's maximum precision).
pub const MAX_INTEGER_DIGITS: u32 = 18;

const UNITS_PER_WHOLE: i128 = 10_000;

/// An amount of money in ten-thousandths of the currency's major unit.
/// Balances may be negative; a transfer amount is always positive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Amount(i128);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmountError {
    Empty,
    /// A character other than a digit or one decimal point.
    Syntax,
    /// More than 4 decimals, or (strict form) a trailing zero in the decimals.
    Scale,
    /// More than 18 integer digits, or (strict form) a leading zero.
    Precision,
}

impl fmt::Display for AmountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AmountError::Empty => "amount is empty",
            AmountError::Syntax => "amount must be digits with at most one decimal point",
            AmountError::Scale => {
                "amount has more than 4 decimals (or a trailing zero after the point)"
            }
            AmountError::Precision => "amount has more than 18 integer digits (or a leading zero)",
        })
    }
}

impl Amount {
    pub const ZERO: Amount = Amount(0);
    /// The largest amount one transfer may carry: 18 nines, point, 4 nines.
    pub const MAX_TRANSFER: Amount = Amount(10i128.pow(MAX_INTEGER_DIGITS + SCALE) - 1);

    pub const fn from_units(ten_thousandths: i128) -> Amount {
        Amount(ten_thousandths)
    }

    pub const fn from_whole(whole: i64) -> Amount {
        Amount(whole as i128 * UNITS_PER_WHOLE)
    }

    pub const fn units(self) -> i128 {
        self.0
    }

    pub fn checked_add(self, other: Amount) -> Option<Amount> {
        self.0.checked_add(other.0).map(Amount)
    }

    pub fn checked_sub(self, other: Amount) -> Option<Amount> {
        self.0.checked_sub(other.0).map(Amount)
    }

    pub fn checked_neg(self) -> Option<Amount> {
        self.0.checked_neg().map(Amount)
    }

    pub fn is_positive(self) -> bool {
        self.0 > 0
    }

    pub fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// True when this amount may be moved by one transfer: positive and
    /// within FSPIOP's 18 integer digits.
    pub fn is_valid_transfer_amount(self) -> bool {
        self.0 > 0 && self <= Amount::MAX_TRANSFER
    }

    /// Parses FSPIOP's `Amount` exactly as the v1.1 schema's pattern
    /// `^([0]|([1-9][0-9]{0,17}))([.][0-9]{0,3}[1-9])?$` does: no sign, no
    /// leading zeros, at most 4 decimals and no trailing zero after the point.
    pub fn parse_fspiop(text: &str) -> Result<Amount, AmountError> {
        parse(text, true)
    }

    /// Parses a non-negative decimal as the admin API sends it (`"1000"`,
    /// `"1000.50"`): leading and trailing zeros allowed, still at most 4
    /// decimals and 18 integer digits.
    pub fn parse_lenient(text: &str) -> Result<Amount, AmountError> {
        parse(text, false)
    }

    /// Parses a possibly negative balance as written by [`Amount`]'s `Display`.
    pub fn parse_signed(text: &str) -> Result<Amount, AmountError> {
        match text.strip_prefix('-') {
            Some(rest) => {
                let magnitude = parse_digits(rest, false, u32::MAX)?;
                Ok(Amount(-magnitude))
            }
            None => parse_digits(text, false, u32::MAX).map(Amount),
        }
    }
}

fn parse(text: &str, strict: bool) -> Result<Amount, AmountError> {
    parse_digits(text, strict, MAX_INTEGER_DIGITS).map(Amount)
}

fn parse_digits(text: &str, strict: bool, max_integer_digits: u32) -> Result<i128, AmountError> {
    if text.is_empty() {
        return Err(AmountError::Empty);
    }
    let (integer, fraction) = match text.split_once('.') {
        Some((integer, fraction)) => (integer, Some(fraction)),
        None => (text, None),
    };
    if integer.is_empty() || !integer.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AmountError::Syntax);
    }
    if strict && integer.len() > 1 && integer.starts_with('0') {
        return Err(AmountError::Precision);
    }
    let significant = integer.trim_start_matches('0');
    // i128 holds 38 digits; a balance never needs more than 34 integer digits.
    if significant.len() as u32 > max_integer_digits.min(34) {
        return Err(AmountError::Precision);
    }
    let mut units: i128 = 0;
    for digit in significant.bytes() {
        units = units * 10 + i128::from(digit - b'0');
    }
    units *= UNITS_PER_WHOLE;
    if let Some(fraction) = fraction {
        if !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AmountError::Syntax);
        }
        if strict && (fraction.is_empty() || fraction.ends_with('0')) {
            return Err(AmountError::Scale);
        }
        let fraction = if strict {
            fraction
        } else {
            fraction.trim_end_matches('0')
        };
        if fraction.len() as u32 > SCALE {
            return Err(AmountError::Scale);
        }
        let mut scale = UNITS_PER_WHOLE / 10;
        for digit in fraction.bytes() {
            units += i128::from(digit - b'0') * scale;
            scale /= 10;
        }
    }
    Ok(units)
}

/// Writes the canonical FSPIOP form: no trailing zeros, no point for a whole
/// amount, a leading `-` for a negative balance.
impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let magnitude = self.0.unsigned_abs();
        let whole = magnitude / UNITS_PER_WHOLE as u128;
        let mut fraction = (magnitude % UNITS_PER_WHOLE as u128) as u32;
        if self.0 < 0 {
            f.write_str("-")?;
        }
        // u64 formatting is much cheaper than u128's; balances almost always fit.
        match u64::try_from(whole) {
            Ok(whole) => write!(f, "{whole}")?,
            Err(_) => write!(f, "{whole}")?,
        }
        if fraction != 0 {
            let mut digits = SCALE as usize;
            while fraction.is_multiple_of(10) {
                fraction /= 10;
                digits -= 1;
            }
            write!(f, ".{fraction:0digits$}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_parse_follows_the_fspiop_pattern() {
        for (text, units) in [
            ("0", 0),
            ("1", 10_000),
            ("100.5", 1_005_000),
            ("0.0001", 1),
            ("12.3456", 123_456),
        ] {
            assert_eq!(Amount::parse_fspiop(text), Ok(Amount(units)), "{text}");
        }
        for text in [
            "",
            "01",
            "1.",
            "1.50",
            "1.00001",
            "-1",
            "1e5",
            " 1",
            "1.2.3",
            "1234567890123456789",
        ] {
            assert!(
                Amount::parse_fspiop(text).is_err(),
                "{text} should be rejected"
            );
        }
        assert_eq!(
            Amount::parse_fspiop("999999999999999999.9999"),
            Ok(Amount::MAX_TRANSFER)
        );
    }

    #[test]
    fn lenient_parse_accepts_admin_forms() {
        assert_eq!(
            Amount::parse_lenient("1000.00"),
            Ok(Amount::from_whole(1000))
        );
        assert_eq!(Amount::parse_lenient("007"), Ok(Amount::from_whole(7)));
        assert_eq!(Amount::parse_lenient("1.23456"), Err(AmountError::Scale));
    }

    #[test]
    fn display_round_trips_signed_balances() {
        for units in [
            0i128,
            1,
            -1,
            10_000,
            -123_456,
            1_005_000,
            i128::MAX / 2,
            -(i128::MAX / 2),
        ] {
            let text = Amount(units).to_string();
            assert_eq!(Amount::parse_signed(&text), Ok(Amount(units)), "{text}");
        }
        assert_eq!(Amount(1_005_000).to_string(), "100.5");
        assert_eq!(Amount(-1).to_string(), "-0.0001");
    }

    #[test]
    fn arithmetic_is_checked() {
        assert_eq!(Amount(i128::MAX).checked_add(Amount(1)), None);
        assert_eq!(Amount(i128::MIN).checked_neg(), None);
        assert!(!Amount::ZERO.is_valid_transfer_amount());
        assert!(!Amount(Amount::MAX_TRANSFER.units() + 1).is_valid_transfer_amount());
    }
}
