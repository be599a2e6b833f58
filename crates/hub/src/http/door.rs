//! Refusals at the door of the FSPIOP address, before any layer or route
//! reads a header: a header that decides who speaks or who is addressed,
//! sent more than once; and, when the scheme asks for it
//! (`--max-clock-skew-s`), a `Date` too far from the hub's clock.
//!
//! Every other layer reads the *first* value of a header. A gateway, a
//! DFSP's server or Node's HTTP stack in front of or behind the hub may
//! read the last, or join them (`payerfsp, mallory`): with two values, two
//! components can disagree about who sent a message or whom it is for.
//! RFC 9110 §5.3 allows repeating only list-valued fields, and FSPIOP's
//! `FSPIOP-Source`, `FSPIOP-Destination` and `FSPIOP-Proxy` hold one FSP
//! id, so a repeat is malformed syntax: 400 with 3101, as kasi answers for
//! any other malformed header (Mojaloop's header validation would see the
//! joined value, which is not an FSP id, and answer the same code).

use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use ledger::ErrorCode;

use crate::refused::Class;
use crate::{Hub, HubError};

/// Headers with one value only, by their FSPIOP spelling.
const SINGLE_VALUED: [&str; 3] = [
    fspiop::FSPIOP_SOURCE,
    fspiop::FSPIOP_DESTINATION,
    fspiop::FSPIOP_PROXY,
];

/// The check (see the module's documentation): the answer to a request
/// refused at the door, if it is.
pub(crate) fn refusal(hub: &Hub, headers: &HeaderMap, now: SystemTime) -> Option<Response> {
    let claimed = || {
        headers
            .get("fspiop-source")
            .map(|value| String::from_utf8_lossy(value.as_bytes()).trim().to_string())
            .unwrap_or_default()
    };
    let identity_header = hub
        .config
        .identity
        .proxy
        .as_ref()
        .map(|proxy| &proxy.header);
    let repeated = SINGLE_VALUED
        .into_iter()
        .chain(identity_header.map(|header| header.as_str()))
        .find(|name| repeats(headers, name));
    if let Some(name) = repeated {
        let count = headers.get_all(name).iter().count();
        hub.refuse(
            Class::DuplicateHeader,
            &claimed(),
            &format!("{name} sent {count} times"),
        );
        let description = format!("Malformed syntax - header {name} appears more than once");
        return Some(bad_request(ErrorCode::MALFORMED_SYNTAX, description));
    }
    let skew = hub.config.max_clock_skew?;
    // No Date, or one that is not an HTTP date, is the routes' to answer
    // (3102, 3101), as without the option.
    let date = headers
        .get("date")
        .and_then(|value| value.to_str().ok())
        .and_then(|text| httpdate::parse_http_date(text).ok())?;
    let (distance, direction) = match now.duration_since(date) {
        Ok(behind) => (behind, "behind"),
        Err(ahead) => (ahead.duration(), "ahead of"),
    };
    if distance <= skew {
        return None;
    }
    let seconds = distance.as_secs();
    hub.refuse(
        Class::StaleDate,
        &claimed(),
        &format!("Date is {seconds} s {direction} the hub's clock"),
    );
    Some(bad_request(
        ErrorCode::GENERIC_VALIDATION_ERROR,
        stale_description(seconds, direction, skew),
    ))
}

fn repeats(headers: &HeaderMap, name: &str) -> bool {
    headers.get_all(name).iter().nth(1).is_some()
}

/// 3100, not 3102 ("Missing mandatory element"): the Date is there and
/// well-formed, it fails a rule of the scheme, as a fulfil's
/// `completedTimestamp` too far from the hub's clock does (3100 in
/// Mojaloop's ml-api-adapter).
fn stale_description(seconds: u64, direction: &str, skew: Duration) -> String {
    format!(
        "Generic validation error - header Date is {seconds} s {direction} the hub's clock; the scheme allows at most {} s",
        skew.as_secs()
    )
}

fn bad_request(code: ErrorCode, description: String) -> Response {
    let mut response = HubError::new(code, description).into_response();
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_counts_values_not_names() {
        let mut headers = HeaderMap::new();
        headers.append("fspiop-source", "payerfsp".parse().unwrap());
        assert!(!repeats(&headers, "FSPIOP-Source"));
        headers.append("fspiop-source", "mallory".parse().unwrap());
        assert!(repeats(&headers, "fspiop-source"));
        assert!(!repeats(&headers, "fspiop-destination"));
    }

    #[test]
    fn a_stale_date_is_described_in_both_directions() {
        assert_eq!(
            stale_description(301, "behind", Duration::from_secs(300)),
            "Generic validation error - header Date is 301 s behind the hub's clock; the scheme allows at most 300 s"
        );
    }
}
