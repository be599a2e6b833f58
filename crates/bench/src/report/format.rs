//! Shared helpers of the report renderers: optional reads of the report's
//! JSON fields and the formatting of numbers and Markdown table cells.

use serde_json::Value;

pub(super) const DASH: &str = "—";
/// Used to order legs that a report's `leg_order` does not mention, so the
/// output follows the life of a payment instead of the alphabet.
const CANONICAL_LEG_ORDER: [&str; 14] = [
    "lookup",
    "transaction_request",
    "fx_quote",
    "quote",
    "fx_prepare",
    "fx_forward",
    "fx_fulfil",
    "fx_notify",
    "prepare",
    "forward",
    "fulfil",
    "notify",
    "fx_patch",
    "e2e",
];
pub(super) const STRING_WRITE: &str = "writing to a String cannot fail";

pub(super) const BYTES_PER_MB: f64 = 1_000_000.0;

// ---------------------------------------------------------------------------
// Reading optional fields
// ---------------------------------------------------------------------------

pub(super) fn num(value: &Value, key: &str) -> Option<f64> {
    value
        .get(key)
        .and_then(Value::as_f64)
        .filter(|x| x.is_finite())
}

pub(super) fn text(value: &Value, key: &str) -> Option<String> {
    match value.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

pub(super) fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// `value` unless it is absent or null, so "present" checks treat both alike.
pub(super) fn present<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    value.get(key).filter(|v| !v.is_null())
}

pub(super) fn leg<'a>(report: &'a Value, name: &str) -> Option<&'a Value> {
    present(report, "legs").and_then(|legs| present(legs, name))
}

/// The report's legs in display order: its `leg_order` first (even entries
/// without data, so a reader sees a leg that was expected but not measured),
/// then any other measured leg in payment order.
pub(super) fn ordered_legs(report: &Value) -> Vec<String> {
    let mut names: Vec<String> = array(report, "leg_order")
        .iter()
        .filter_map(|name| name.as_str().map(str::to_owned))
        .collect();
    let mut unlisted: Vec<String> = present(report, "legs")
        .and_then(Value::as_object)
        .map(|legs| {
            legs.keys()
                .filter(|name| !names.contains(*name))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    unlisted.sort_by_key(|name| {
        let rank = CANONICAL_LEG_ORDER
            .iter()
            .position(|known| known == name)
            .unwrap_or(CANONICAL_LEG_ORDER.len() - 1);
        (rank, name.clone())
    });
    names.extend(unlisted);
    names
}

// ---------------------------------------------------------------------------
// Number formatting
// ---------------------------------------------------------------------------

/// `x` with `decimals` decimals and thousands separators: 54002 → "54,002".
pub(super) fn fmt_num(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return DASH.to_owned();
    }
    let digits = format!("{:.*}", decimals, x.abs());
    let (int_part, frac_part) = match digits.split_once('.') {
        Some((int_part, frac_part)) => (int_part, Some(frac_part)),
        None => (digits.as_str(), None),
    };
    let mut out = String::new();
    // Rounding can turn a tiny negative into zero; "-0.00" would look like a
    // real negative value.
    if x < 0.0 && digits.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        out.push('-');
    }
    for (i, ch) in int_part.chars().enumerate() {
        if i > 0 && (int_part.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if let Some(frac_part) = frac_part {
        out.push('.');
        out.push_str(frac_part);
    }
    out
}

pub(super) fn fmt_opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| DASH.to_owned(), |x| fmt_num(x, decimals))
}

pub(super) fn fmt_count(x: Option<f64>) -> String {
    fmt_opt(x, 0)
}

/// A difference with an explicit sign, so a regression is visible at a glance.
pub(super) fn fmt_signed(x: f64, decimals: usize) -> String {
    let body = fmt_num(x, decimals);
    if body.starts_with('-') || body.bytes().all(|b| !b.is_ascii_digit() || b == b'0') {
        body
    } else {
        format!("+{body}")
    }
}

pub(super) fn fmt_ratio(x: f64) -> String {
    format!("{x:.2}×")
}

/// Rates span 1/s to 100,000/s; decimals only where they carry information.
pub(super) fn fmt_rate(x: f64) -> String {
    let decimals = match x.abs() {
        r if r >= 1000.0 => 0,
        r if r >= 10.0 => 1,
        _ => 2,
    };
    fmt_num(x, decimals)
}

/// Short form for durations and stage targets: 5.0 → "5", 2.5 → "2.5".
pub(super) fn fmt_trim(x: f64) -> String {
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

pub(super) fn max_value(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.reduce(f64::max)
}

// ---------------------------------------------------------------------------
// Markdown table cells
// ---------------------------------------------------------------------------

/// Text safe inside a Markdown table cell: a `|` would end the cell and a
/// newline the row.
pub(super) fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

pub(super) fn text_cell(report: &Value, key: &str) -> String {
    text(report, key).map_or_else(|| DASH.to_owned(), |s| cell(&s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formatting_groups_thousands_and_signs_deltas() {
        assert_eq!(fmt_num(54002.0, 0), "54,002");
        assert_eq!(fmt_num(-1234567.891, 2), "-1,234,567.89");
        assert_eq!(fmt_num(-0.001, 2), "0.00");
        assert_eq!(fmt_num(999.0, 0), "999");
        assert_eq!(fmt_signed(5.0, 2), "+5.00");
        assert_eq!(fmt_signed(-2.5, 2), "-2.50");
        assert_eq!(fmt_signed(0.0, 2), "0.00");
        assert_eq!(fmt_rate(9000.0), "9,000");
        assert_eq!(fmt_trim(5.0), "5");
        assert_eq!(fmt_trim(2.5), "2.5");
    }
}
