//! Where each DFSP wants its callbacks: central-ledger's endpoint types, held
//! in memory so that routing a callback never costs a request or a query.
//! The ledger keeps them durable; this is the read side, refreshed after
//! each durable change.

use std::collections::HashMap;
use std::sync::RwLock;

use ledger::{ErrorCode, FspName, ParticipantView};

use crate::HubError;

/// Endpoint types central-ledger knows (`seeds/endpointType.js` and later
/// additions). Those ending in `_EMAIL` or `_TOPIC` hold no URL.
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
    let is_url_type = endpoint_type.contains("_URL");
    if is_url_type && !(value.starts_with("http://") || value.starts_with("https://")) {
        return Err(HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!("{endpoint_type} must be an http:// or https:// URL"),
        ));
    }
    Ok(())
}

/// Every DFSP's endpoints by type.
#[derive(Default)]
pub struct Endpoints {
    by_participant: RwLock<HashMap<FspName, HashMap<String, String>>>,
    /// Every participant the hub knows, and whether it is active.
    participants: RwLock<HashMap<FspName, bool>>,
}

impl Endpoints {
    pub fn load(views: &[ParticipantView]) -> Endpoints {
        let endpoints = Endpoints::default();
        for view in views {
            endpoints.note_participant(view.participant.name, view.participant.active);
            for endpoint in &view.endpoints {
                endpoints.set(
                    view.participant.name,
                    &endpoint.endpoint_type,
                    &endpoint.value,
                );
            }
        }
        endpoints
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

    /// Records that `participant` exists, active or not (after onboarding
    /// and after each activation change).
    pub fn note_participant(&self, participant: FspName, active: bool) {
        self.participants
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(participant, active);
    }

    /// `Some(active)` for a participant the hub knows, `None` otherwise.
    pub fn participant_active(&self, participant: FspName) -> Option<bool> {
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

/// Replaces `{{transferId}}`-style placeholders; unknown ones stay as they are.
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
                    Some((_, value)) => out.push_str(value),
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
    fn endpoint_checks() {
        assert!(
            check_endpoint("FSPIOP_CALLBACK_URL_TRANSFER_POST", "http://dfsp/transfers").is_ok()
        );
        assert!(check_endpoint("FSPIOP_CALLBACK_URL_TRANSFER_POST", "dfsp/transfers").is_err());
        assert!(check_endpoint("NET_DEBIT_CAP_ADJUSTMENT_EMAIL", "ops@example.com").is_ok());
        assert!(check_endpoint("NOT_A_TYPE", "http://x").is_err());
    }
}
