//! Helpers of the body parsers' unit tests: JSON values edited by dotted
//! path (`payer.partyIdInfo.fspId`, `individualQuotes.0.amount`; a numeric
//! part indexes an array) and the check that an error names its field.

use crate::FspiopError;
use ledger::ErrorCode;
use serde_json::Value;

pub(crate) fn bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

/// `code`, HTTP 400, and a description naming `path`.
pub(crate) fn assert_error(error: &FspiopError, code: u16, path: &str) {
    assert_eq!(error.code, ErrorCode(code), "{}", error.description);
    assert_eq!(error.http_status, 400);
    assert!(
        error.description.contains(&format!(" - {path}")),
        "{} should name {path}",
        error.description
    );
}

/// The value holding the last part of `path`, and that part.
fn parent<'v, 'p>(value: &'v mut Value, path: &'p str) -> (&'v mut Value, &'p str) {
    let (init, last) = path.rsplit_once('.').unwrap_or(("", path));
    let mut at = value;
    for part in init.split('.').filter(|part| !part.is_empty()) {
        at = match part.parse::<usize>() {
            Ok(index) => &mut at[index],
            Err(_) => &mut at[part],
        };
    }
    (at, last)
}

/// Sets `value` at a dotted path.
pub(crate) fn set(value: &mut Value, path: &str, new: Value) {
    let (at, last) = parent(value, path);
    match last.parse::<usize>() {
        Ok(index) => at[index] = new,
        Err(_) => at[last] = new,
    }
}

/// Removes the property at a dotted path.
pub(crate) fn remove(value: &mut Value, path: &str) {
    let (at, last) = parent(value, path);
    at.as_object_mut().unwrap().remove(last);
}
