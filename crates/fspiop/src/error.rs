//! Synchronous FSPIOP error answers and the `errorInformation` body.

use crate::json;
use ledger::{ErrorCode, Rejection};
use std::fmt;

/// FSPIOP's `ErrorDescription` maxLength (in characters).
pub const ERROR_DESCRIPTION_MAX_CHARS: usize = 128;

/// A synchronous error answer: the FSPIOP code, a description naming the
/// header or field at fault, and the HTTP status to send it with.
///
/// Descriptions start with the code's standard wording, then ` - ` and the
/// element at fault, e.g. `Missing mandatory element - FSPIOP-Source` or
/// `Generic validation error - amount.amount: ...`. The description may be
/// longer than FSPIOP's 128 characters; [`FspiopError::body`] truncates it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FspiopError {
    pub code: ErrorCode,
    pub description: String,
    pub http_status: u16,
}

impl FspiopError {
    /// An error with the HTTP status Mojaloop gives `code` ([`http_status_for`]).
    pub fn new(code: ErrorCode, description: impl Into<String>) -> FspiopError {
        FspiopError {
            code,
            description: description.into(),
            http_status: http_status_for(code),
        }
    }

    /// 3102 "Missing mandatory element - {element}".
    pub fn missing(element: impl fmt::Display) -> FspiopError {
        FspiopError::new(
            ErrorCode::MISSING_MANDATORY_ELEMENT,
            format!("Missing mandatory element - {element}"),
        )
    }

    /// 3101 "Malformed syntax - {element}: {detail}".
    pub fn malformed(element: impl fmt::Display, detail: impl fmt::Display) -> FspiopError {
        FspiopError::new(
            ErrorCode::MALFORMED_SYNTAX,
            format!("Malformed syntax - {element}: {detail}"),
        )
    }

    /// 3100 "Generic validation error - {element}: {detail}".
    pub fn invalid(element: impl fmt::Display, detail: impl fmt::Display) -> FspiopError {
        FspiopError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!("Generic validation error - {element}: {detail}"),
        )
    }

    /// The `errorInformation` body to send with [`FspiopError::http_status`].
    ///
    /// For 3001 it carries the extension list FSPIOP §3.3.4.3 asks for: one
    /// `{key: major, value: minor}` per supported version, as Mojaloop sends.
    pub fn body(&self) -> Vec<u8> {
        answer_body(self.code, &self.description)
    }
}

impl fmt::Display for FspiopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.code, self.http_status, self.description
        )
    }
}

impl std::error::Error for FspiopError {}

impl From<FspiopError> for Rejection {
    fn from(error: FspiopError) -> Rejection {
        Rejection::new(error.code, error.description)
    }
}

/// The `errorInformation` body of a synchronous error answer: for 3001,
/// with the extension list of supported versions FSPIOP §3.3.4.3 asks for
/// (one `{key: major, value: minor}` each, as Mojaloop sends).
pub fn answer_body(code: ErrorCode, description: &str) -> Vec<u8> {
    if code == ErrorCode::UNACCEPTABLE_VERSION {
        error_body_with_extensions(code, description, &crate::SUPPORTED_VERSION_EXTENSIONS)
    } else {
        error_body(code, description)
    }
}

/// The HTTP status Mojaloop (`central-services-error-handling`) answers a
/// code with: 1xxx → 503, 2002 → 501, other 2xxx → 500, 3001 → 406,
/// 3002 → 404, other 3xxx–5xxx → 400 — except 2003 (Service currently
/// unavailable), 503 here where Mojaloop says 500: nothing was done and the
/// request may be sent again, which is what 503 (with `Retry-After`) tells
/// clients, proxies and load balancers, and a 500 does not. Anything
/// outside 1000–5999 is not an FSPIOP code and gets 500.
pub fn http_status_for(code: ErrorCode) -> u16 {
    match code.0 {
        1000..=1999 => 503,
        2002 => 501,
        2003 => 503,
        2000..=2999 => 500,
        3001 => 406,
        3002 => 404,
        3000..=5999 => 400,
        _ => 500,
    }
}

/// `{"errorInformation":{"errorCode":"3100","errorDescription":"..."}}`.
///
/// The description is JSON-escaped and cut to 128 characters (on a character
/// boundary); an empty one is replaced by the code's standard wording, as
/// FSPIOP requires at least one character.
pub fn error_body(code: ErrorCode, description: &str) -> Vec<u8> {
    error_body_with_extensions(code, description, &[])
}

/// [`error_body`] with an `extensionList` (omitted when `extensions` is
/// empty; see [`crate::push_extension_list`] for how entries are bounded).
pub fn error_body_with_extensions(
    code: ErrorCode,
    description: &str,
    extensions: &[(&str, &str)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + description.len().min(512));
    out.extend_from_slice(b"{\"errorInformation\":");
    push_error_information(&mut out, code, description, extensions);
    out.push(b'}');
    out
}

/// Appends an `ErrorInformation` object, `{"errorCode":"3100",
/// "errorDescription":"...","extensionList":..}`, bounded as
/// [`error_body`] describes.
pub(crate) fn push_error_information(
    out: &mut Vec<u8>,
    code: ErrorCode,
    description: &str,
    extensions: &[(&str, &str)],
) {
    let description = if description.is_empty() {
        code.description()
    } else {
        json::truncate_chars(description, ERROR_DESCRIPTION_MAX_CHARS)
    };
    out.extend_from_slice(b"{\"errorCode\":\"");
    // An ErrorCode outside 1000-9999 cannot be written as FSPIOP's four
    // digits; say "internal server error" rather than send invalid JSON.
    let digits = if (1000..=9999).contains(&code.0) {
        code.0
    } else {
        ErrorCode::INTERNAL_SERVER_ERROR.0
    };
    json::push_u64(out, u64::from(digits));
    out.extend_from_slice(b"\",\"errorDescription\":");
    json::push_str(out, description);
    if !extensions.is_empty() {
        out.push(b',');
        json::push_extension_list(out, extensions);
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_mojaloop() {
        for (code, status) in [
            (1000, 503),
            (1001, 503),
            (2001, 500),
            (2002, 501),
            (2003, 503),
            (2004, 500),
            (3000, 400),
            (3001, 406),
            (3002, 404),
            (3100, 400),
            (3101, 400),
            (3102, 400),
            (3106, 400),
            (3208, 400),
            (3303, 400),
            (4001, 400),
            (5100, 400),
            (999, 500),
            (6000, 500),
        ] {
            assert_eq!(http_status_for(ErrorCode(code)), status, "{code}");
        }
        assert_eq!(FspiopError::missing("Date").http_status, 400);
        assert_eq!(
            FspiopError::new(ErrorCode::UNACCEPTABLE_VERSION, "x").http_status,
            406
        );
    }

    #[test]
    fn error_body_is_exact() {
        assert_eq!(
            error_body(ErrorCode(3100), "Generic validation error - amount"),
            br#"{"errorInformation":{"errorCode":"3100","errorDescription":"Generic validation error - amount"}}"#
        );
    }

    #[test]
    fn error_body_escapes_and_parses() {
        let text = "quote \" backslash \\ newline \n tab \t bell \u{7} é ✓";
        let body = error_body(ErrorCode(3101), text);
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["errorInformation"]["errorCode"], "3101");
        assert_eq!(value["errorInformation"]["errorDescription"], text);
    }

    #[test]
    fn error_body_truncates_to_128_chars_on_a_char_boundary() {
        let long = "é".repeat(200);
        let body = error_body(ErrorCode(3100), &long);
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let description = value["errorInformation"]["errorDescription"]
            .as_str()
            .unwrap();
        assert_eq!(description.chars().count(), 128);
        assert!(description.chars().all(|c| c == 'é'));
        let exact = "x".repeat(128);
        let body = error_body(ErrorCode(3100), &exact);
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            value["errorInformation"]["errorDescription"],
            exact.as_str()
        );
    }

    #[test]
    fn empty_description_gets_the_standard_wording() {
        assert_eq!(
            error_body(ErrorCode(3106), ""),
            br#"{"errorInformation":{"errorCode":"3106","errorDescription":"Modified request"}}"#
        );
    }

    #[test]
    fn unacceptable_version_body_lists_supported_versions() {
        let error = FspiopError::new(ErrorCode::UNACCEPTABLE_VERSION, "x");
        let value: serde_json::Value = serde_json::from_slice(&error.body()).unwrap();
        assert_eq!(value["errorInformation"]["errorCode"], "3001");
        assert_eq!(
            value["errorInformation"]["extensionList"],
            serde_json::json!({"extension": [{"key": "1", "value": "0"}, {"key": "1", "value": "1"}, {"key": "2", "value": "0"}]})
        );
        let other = FspiopError::missing("Date");
        let value: serde_json::Value = serde_json::from_slice(&other.body()).unwrap();
        assert!(value["errorInformation"].get("extensionList").is_none());
    }

    #[test]
    fn converts_to_a_rejection() {
        let rejection: Rejection = FspiopError::missing("Date").into();
        assert_eq!(rejection.code, ErrorCode::MISSING_MANDATORY_ELEMENT);
        assert_eq!(rejection.description, "Missing mandatory element - Date");
    }
}
