//! Where each DFSP wants its callbacks: central-ledger's endpoint types, held
//! in memory so that routing a callback never costs a request or a query.
//! The ledger keeps them durable; this is the read side, refreshed after
//! each durable change.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

use ledger::{AccountKind, Currency, ErrorCode, FspName, ParticipantMode, ParticipantView};

use crate::HubError;

/// kasi's endpoint type for a DFSP's account at the settlement bank (an
/// IBAN, or the bank's own account number), which the settlement report
/// names beside each net so that the settlement bank can act on it. Set
/// and audited like any endpoint; not a URL.
pub const SETTLEMENT_BANK_ACCOUNT: &str = "SETTLEMENT_BANK_ACCOUNT";
/// Longest settlement bank account kept.
const BANK_ACCOUNT_MAX_LEN: usize = 128;

/// Endpoint types central-ledger knows (`seeds/endpointType.js` and later
/// additions), and kasi's [`SETTLEMENT_BANK_ACCOUNT`] and alerts webhook
/// ([`crate::alerts::WEBHOOK_TYPE`]). Those ending in `_EMAIL` or `_TOPIC`,
/// and the bank account, hold no URL.
pub const ENDPOINT_TYPES: &[&str] = &[
    "ALARM_NOTIFICATION_URL",
    "ALARM_NOTIFICATION_TOPIC",
    "FSPIOP_CALLBACK_URL_TRANSFER_POST",
    "FSPIOP_CALLBACK_URL_TRANSFER_PUT",
    "FSPIOP_CALLBACK_URL_TRANSFER_ERROR",
    "NET_DEBIT_CAP_THRESHOLD_BREACH_EMAIL",
    "NET_DEBIT_CAP_ADJUSTMENT_EMAIL",
    "SETTLEMENT_TRANSFER_POSITION_CHANGE_EMAIL",
    "FSPIOP_CALLBACK_URL_PARTICIPANT_PUT",
    "FSPIOP_CALLBACK_URL_PARTICIPANT_SUB_ID_PUT",
    "FSPIOP_CALLBACK_URL_PARTICIPANT_PUT_ERROR",
    "FSPIOP_CALLBACK_URL_PARTICIPANT_SUB_ID_PUT_ERROR",
    "FSPIOP_CALLBACK_URL_PARTICIPANT_DELETE",
    "FSPIOP_CALLBACK_URL_PARTICIPANT_SUB_ID_DELETE",
    "FSPIOP_CALLBACK_URL_PARTICIPANT_BATCH_PUT",
    "FSPIOP_CALLBACK_URL_PARTICIPANT_BATCH_PUT_ERROR",
    "FSPIOP_CALLBACK_URL_PARTIES_GET",
    "FSPIOP_CALLBACK_URL_PARTIES_SUB_ID_GET",
    "FSPIOP_CALLBACK_URL_PARTIES_PUT",
    "FSPIOP_CALLBACK_URL_PARTIES_SUB_ID_PUT",
    "FSPIOP_CALLBACK_URL_PARTIES_PUT_ERROR",
    "FSPIOP_CALLBACK_URL_PARTIES_SUB_ID_PUT_ERROR",
    "FSPIOP_CALLBACK_URL_QUOTES",
    "FSPIOP_CALLBACK_URL_BULK_QUOTES",
    "FSPIOP_CALLBACK_URL_BULK_TRANSFER_POST",
    "FSPIOP_CALLBACK_URL_BULK_TRANSFER_PUT",
    "FSPIOP_CALLBACK_URL_BULK_TRANSFER_ERROR",
    "FSPIOP_CALLBACK_URL_AUTHORIZATIONS",
    "FSPIOP_CALLBACK_URL_TRANSACTION",
    "FSPIOP_CALLBACK_URL_TRX_REQ_SERVICE",
    "FSPIOP_CALLBACK_URL_FX_QUOTES",
    "FSPIOP_CALLBACK_URL_FX_TRANSFER_POST",
    "FSPIOP_CALLBACK_URL_FX_TRANSFER_PUT",
    "FSPIOP_CALLBACK_URL_FX_TRANSFER_ERROR",
    SETTLEMENT_BANK_ACCOUNT,
    // kasi's: where the DFSP's alerts are POSTed as JSON (`alerts`).
    crate::alerts::WEBHOOK_TYPE,
];

/// Refuses an unknown endpoint type, or a callback type whose value is not
/// an http(s) URL.
pub fn check_endpoint(endpoint_type: &str, value: &str) -> Result<(), HubError> {
    if !ENDPOINT_TYPES.contains(&endpoint_type) {
        return Err(HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!("unknown endpoint type '{endpoint_type}'"),
        ));
    }
    if endpoint_type == SETTLEMENT_BANK_ACCOUNT
        && (value.is_empty()
            || value.len() > BANK_ACCOUNT_MAX_LEN
            || value.chars().any(|c| c.is_control()))
    {
        // It goes into the settlement bank's CSV as it is.
        return Err(HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!(
                "{SETTLEMENT_BANK_ACCOUNT} must be 1 to {BANK_ACCOUNT_MAX_LEN} printable characters"
            ),
        ));
    }
    let is_url_type = endpoint_type.contains("_URL");
    if is_url_type && !(value.starts_with("http://") || value.starts_with("https://")) {
        return Err(HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!("{endpoint_type} must be an http:// or https:// URL"),
        ));
    }
    if endpoint_type.ends_with("_EMAIL") {
        // Checked when registered, so that the alert it is for is not the
        // first to find it unusable.
        let addresses: Vec<&str> = value.split(',').map(str::trim).collect();
        if addresses
            .iter()
            .any(|a| crate::alerts::check_address(a).is_err())
        {
            return Err(HubError::new(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                format!("{endpoint_type} must be email addresses, separated by commas"),
            ));
        }
    }
    Ok(())
}

/// Every DFSP's endpoints by type.
#[derive(Default)]
pub struct Endpoints {
    by_participant: RwLock<HashMap<FspName, HashMap<String, String>>>,
    /// Every participant the hub knows, and its mode: the hub's copy of
    /// the ledger's, current as of the last committed batch, which the
    /// lookups and quotes apply the pause rule to.
    participants: RwLock<HashMap<FspName, ParticipantMode>>,
    /// The participants' disabled POSITION accounts (`PUT
    /// /participants/{name}/accounts/{id}` `isActive: false`), by
    /// currency: the hub's copy of the ledger's, current as of the last
    /// committed batch, which lookups and quotes apply the pause rule to
    /// as a prepare does.
    disabled_accounts: RwLock<HashSet<(FspName, Currency)>>,
}

impl Endpoints {
    /// Adds every participant's endpoints as the ledger holds them.
    pub fn load(&self, views: &[ParticipantView]) {
        for view in views {
            self.note_participant(view.participant.name, view.participant.mode);
            for account in &view.accounts {
                if account.kind == AccountKind::Position && !account.active {
                    self.note_account(view.participant.name, account.currency, false);
                }
            }
            for endpoint in &view.endpoints {
                self.set(
                    view.participant.name,
                    &endpoint.endpoint_type,
                    &endpoint.value,
                );
            }
        }
    }

    pub fn set(&self, participant: FspName, endpoint_type: &str, value: &str) {
        let mut map = self
            .by_participant
            .write()
            .unwrap_or_else(|e| e.into_inner());
        map.entry(participant)
            .or_default()
            .insert(endpoint_type.to_string(), value.to_string());
    }

    /// Records that `participant` exists, and its mode (after onboarding
    /// and after each change of mode).
    pub fn note_participant(&self, participant: FspName, mode: ParticipantMode) {
        self.participants
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(participant, mode);
    }

    /// Records whether `participant`'s POSITION account in `currency` is
    /// active (after each change of its `isActive`).
    pub fn note_account(&self, participant: FspName, currency: Currency, active: bool) {
        let mut disabled = self
            .disabled_accounts
            .write()
            .unwrap_or_else(|e| e.into_inner());
        match active {
            true => disabled.remove(&(participant, currency)),
            false => disabled.insert((participant, currency)),
        };
    }

    /// Whether `participant`'s POSITION account in `currency` is disabled
    /// (false for one the hub does not know: the ledger refuses a
    /// payment it lacks).
    pub fn account_disabled(&self, participant: FspName, currency: Currency) -> bool {
        self.disabled_accounts
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(participant, currency))
    }

    /// Every participant the hub knows, and its mode, by name.
    pub fn participant_modes(&self) -> Vec<(FspName, ParticipantMode)> {
        let mut modes: Vec<_> = self
            .participants
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(&name, &mode)| (name, mode))
            .collect();
        modes.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        modes
    }

    /// `Some(mode)` for a participant the hub knows, `None` otherwise.
    pub fn participant_mode(&self, participant: FspName) -> Option<ParticipantMode> {
        self.participants
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&participant)
            .copied()
    }

    /// Whether `participant` registered any endpoint: a DFSP the hub can
    /// route to.
    pub fn contains(&self, participant: FspName) -> bool {
        self.by_participant
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&participant)
            .is_some_and(|types| !types.is_empty())
    }

    /// `participant`'s `endpoint_type` as registered (an email endpoint's
    /// addresses); `None` when the DFSP registered none.
    pub fn value(&self, participant: FspName, endpoint_type: &str) -> Option<String> {
        self.by_participant
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&participant)?
            .get(endpoint_type)
            .cloned()
    }

    /// The URL of `participant`'s `endpoint_type`, with `{{name}}` templates
    /// replaced from `variables`; `None` when the DFSP registered none.
    pub fn url(
        &self,
        participant: FspName,
        endpoint_type: &str,
        variables: &[(&str, &str)],
    ) -> Option<String> {
        let map = self
            .by_participant
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let template = map.get(&participant)?.get(endpoint_type)?;
        Some(expand(template, variables))
    }
}

/// Whether `byte` may stand as itself in a path segment: RFC 3986's
/// unreserved characters and the sub-delimiters and `:`/`@` a segment
/// allows (`+` and `@` are common in party ids), except `;`, which some
/// servers cut a segment at (path parameters).
fn is_segment_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric()
        || matches!(
            byte,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b'='
                | b':'
                | b'@'
        )
}

/// Appends `value` as exactly one path segment: every other byte (`/`,
/// `?`, `#`, `%`, space, controls, non-ASCII) percent-encoded, so a value
/// that came from a request is data in the URL, never its syntax. (Dot
/// segments cannot be made safe this way, as URL parsers also resolve
/// `%2E%2E`: the values that reach here were refused at the door if they
/// were `.` or `..`.)
pub fn push_path_segment(out: &mut String, value: &str) {
    if value.bytes().all(is_segment_byte) {
        out.push_str(value);
        return;
    }
    for byte in value.bytes() {
        if is_segment_byte(byte) {
            out.push(byte as char);
        } else {
            push_percent(out, byte);
        }
    }
}

/// Appends a query string as the sender wrote it, except that a byte a
/// query may not hold raw (controls, space, `#`, non-ASCII, ...) is
/// percent-encoded: the router only ever passes on a query hyper accepted,
/// and this keeps it so whatever reached it.
pub fn push_query(out: &mut String, query: &str) {
    let is_query_byte =
        |byte: u8| is_segment_byte(byte) || matches!(byte, b'/' | b'?' | b'%' | b';');
    for byte in query.bytes() {
        if is_query_byte(byte) {
            out.push(byte as char);
        } else {
            push_percent(out, byte);
        }
    }
}

fn push_percent(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(HEX[usize::from(byte >> 4)] as char);
    out.push(HEX[usize::from(byte & 15)] as char);
}

/// Replaces `{{transferId}}`-style placeholders, each value percent-encoded
/// as one path segment (templates are only allowed in the path, see
/// [`crate::callback_url`]); unknown ones stay as they are.
pub fn expand(template: &str, variables: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 40);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let name = &after[..end];
                match variables.iter().find(|(key, _)| *key == name) {
                    Some((_, value)) => push_path_segment(&mut out, value),
                    None => {
                        out.push_str("{{");
                        out.push_str(name);
                        out.push_str("}}");
                    }
                }
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_expand() {
        let url = expand(
            "http://dfsp/transfers/{{transferId}}/error",
            &[("transferId", "abc")],
        );
        assert_eq!(url, "http://dfsp/transfers/abc/error");
        let url = expand(
            "http://dfsp/parties/{{partyIdType}}/{{partyIdentifier}}/{{partySubIdOrType}}",
            &[
                ("partyIdType", "MSISDN"),
                ("partyIdentifier", "123"),
                ("partySubIdOrType", "x"),
            ],
        );
        assert_eq!(url, "http://dfsp/parties/MSISDN/123/x");
        assert_eq!(
            expand("http://dfsp/{{unknown}}/a{{", &[]),
            "http://dfsp/{{unknown}}/a{{"
        );
    }

    #[test]
    fn values_are_one_path_segment_each() {
        let parties = "http://dfsp/parties/{{partyIdType}}/{{partyIdentifier}}";
        let url = |id: &str| {
            expand(
                parties,
                &[("partyIdType", "MSISDN"), ("partyIdentifier", id)],
            )
        };
        assert_eq!(url("123"), "http://dfsp/parties/MSISDN/123");
        assert_eq!(
            url("../../admin"),
            "http://dfsp/parties/MSISDN/..%2F..%2Fadmin"
        );
        assert_eq!(url("a?b=1#c"), "http://dfsp/parties/MSISDN/a%3Fb=1%23c");
        assert_eq!(
            url("a\r\nHost: x\0"),
            "http://dfsp/parties/MSISDN/a%0D%0AHost:%20x%00"
        );
        assert_eq!(url("50%"), "http://dfsp/parties/MSISDN/50%25");
        assert_eq!(
            url("a;jsessionid=1"),
            "http://dfsp/parties/MSISDN/a%3Bjsessionid=1"
        );
        assert_eq!(url("é\u{7f}"), "http://dfsp/parties/MSISDN/%C3%A9%7F");
        // What party ids are made of stays readable.
        assert_eq!(url("+1613@x.org"), "http://dfsp/parties/MSISDN/+1613@x.org");
        // Whatever the value, the URL parses with the path the template
        // meant: two segments after /parties, no query, no fragment.
        for id in ["../x", "a/b", "?x", "#x", "\r\n", "%2F", " ", "\u{1b}"] {
            let parsed: axum::http::Uri = url(id).parse().unwrap();
            let segments: Vec<_> = parsed.path().split('/').collect();
            assert_eq!(segments.len(), 4, "{id:?}: {parsed}");
            assert_eq!(segments[..3], ["", "parties", "MSISDN"], "{id:?}");
            assert!(parsed.query().is_none(), "{id:?}");
        }
    }

    #[test]
    fn queries_keep_their_syntax_and_lose_what_is_not_query() {
        let query = |text: &str| {
            let mut out = String::new();
            push_query(&mut out, text);
            out
        };
        let sent = "authenticationType=OTP&retriesLeft=1&amount=10.5&currency=USD&x=%20a/b?c";
        assert_eq!(query(sent), sent);
        assert_eq!(query("a=1\r\nb#c d"), "a=1%0D%0Ab%23c%20d");
    }

    #[test]
    fn endpoint_checks() {
        assert!(
            check_endpoint("FSPIOP_CALLBACK_URL_TRANSFER_POST", "http://dfsp/transfers").is_ok()
        );
        assert!(check_endpoint("FSPIOP_CALLBACK_URL_TRANSFER_POST", "dfsp/transfers").is_err());
        assert!(check_endpoint("NET_DEBIT_CAP_ADJUSTMENT_EMAIL", "ops@example.com").is_ok());
        assert!(check_endpoint(
            "NET_DEBIT_CAP_THRESHOLD_BREACH_EMAIL",
            "ops@example.com, Treasury <t@example.com>"
        )
        .is_ok());
        for bad in [
            "",
            "ops",
            "ops@example.com,",
            "a@b.example\r\nBcc: x@y.example",
        ] {
            assert!(
                check_endpoint("SETTLEMENT_TRANSFER_POSITION_CHANGE_EMAIL", bad).is_err(),
                "{bad:?}"
            );
        }
        assert!(check_endpoint("NOT_A_TYPE", "http://x").is_err());
    }
}
