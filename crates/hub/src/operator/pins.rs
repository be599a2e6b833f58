//! Client certificates pinned to participants: with mutual TLS on the
//! FSPIOP address, a client whose certificate's SHA-256 the operator
//! pinned to a participant may act as that participant, whatever names the
//! certificate holds (in addition to its CN and DNS names).
//!
//! The pins are ledger state (durable, each change an audit event); the
//! hub keeps a copy in memory for the per-request check, reloaded after
//! each change.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::Router;
use ledger::request::{PinCertificate, ReadCertificatePins, UnpinCertificate};
use ledger::{ErrorCode, FspName, Outcome, PinView, Rejection, Request};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::admin_auth::{hex, parse_sha256_hex};
use crate::audit::Change;
use crate::{format_time, Hub, HubError};

/// Fingerprint (hex) → the participant it is pinned to.
#[derive(Default)]
pub struct Pins {
    by_fingerprint: RwLock<HashMap<String, String>>,
}

impl Pins {
    pub fn replace(&self, views: &[PinView]) {
        let map = views
            .iter()
            .map(|view| (hex(&view.fingerprint), view.fsp.to_string()))
            .collect();
        *self
            .by_fingerprint
            .write()
            .unwrap_or_else(|e| e.into_inner()) = map;
    }

    /// One certificate pinned (a committed record).
    pub(crate) fn pin(&self, fingerprint: &[u8; 32], participant: FspName) {
        self.by_fingerprint
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(hex(fingerprint), participant.to_string());
    }

    /// One pin removed (a committed record).
    pub(crate) fn unpin(&self, fingerprint: &[u8; 32]) {
        self.by_fingerprint
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&hex(fingerprint));
    }

    /// The participant a certificate (its SHA-256, hex) is pinned to.
    pub fn holder(&self, fingerprint: &str) -> Option<String> {
        self.by_fingerprint
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(fingerprint)
            .cloned()
    }
}

/// Whether a client may send as `source`: one of the names its identity
/// gave, or a certificate pinned to `source`. Never as the hub (`hub`: its
/// name), whatever the names or a pin say: a pin to the hub's name (one
/// kept from before such pins were refused) lends nobody the hub's voice.
pub fn may_act_as(
    names: &[String],
    certificate: Option<&crate::tls::ClientIdentity>,
    pins: &Pins,
    source: &str,
    hub: &str,
) -> bool {
    if source == hub {
        return false;
    }
    names.iter().any(|name| name == source)
        || certificate
            .and_then(|identity| pins.holder(&identity.fingerprint))
            .is_some_and(|holder| holder == source)
}

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/participants/:name/certificates", get(list_pins).post(pin))
        .route(
            "/participants/:name/certificates/:fingerprint",
            delete(unpin),
        )
        .with_state(hub)
}

fn invalid(description: impl std::fmt::Display) -> HubError {
    HubError::new(
        ErrorCode::GENERIC_VALIDATION_ERROR,
        format!("Generic validation error - {description}"),
    )
}

fn fsp_name(text: &str) -> Result<FspName, HubError> {
    FspName::new(text).ok_or_else(|| invalid(format!("'{text}' is not a participant name")))
}

/// `sha256:<hex>` or bare hex.
fn fingerprint(text: &str) -> Result<[u8; 32], HubError> {
    let hex_digits = text.strip_prefix("sha256:").unwrap_or(text);
    parse_sha256_hex(&hex_digits.to_ascii_lowercase())
        .ok_or_else(|| invalid("fingerprint must be sha256: and 64 hex digits"))
}

/// The SHA-256 of the one certificate of a PEM text.
fn pem_fingerprint(pem: &str) -> Result<[u8; 32], HubError> {
    let mut reader = std::io::BufReader::new(pem.as_bytes());
    let certificates = rustls_pemfile::certs(&mut reader)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| invalid("certificate is not PEM"))?;
    match certificates.as_slice() {
        [certificate] => Ok(Sha256::digest(certificate.as_ref()).into()),
        [] => Err(invalid("certificate holds no PEM certificate")),
        _ => Err(invalid("certificate must hold one certificate")),
    }
}

/// Runs one pin change with its audit event (the hub's copy follows from
/// the committed record: `references.rs`).
async fn change<R>(hub: &Hub, change: Change, request: R) -> Result<(), HubError>
where
    R: Request<Reply = Result<(), Rejection>>,
{
    hub.ask_audited(change, request).await??;
    Ok(())
}

fn pin_json(view: &PinView) -> Value {
    json!({
        "fingerprint": format!("sha256:{}", hex(&view.fingerprint)),
        "pinned": format_time(view.pinned_at_ms),
    })
}

/// The pins of one participant, for events and `GET`.
pub(crate) fn render_pins(target: &str, outcome: &Outcome) -> String {
    let Outcome::CertificatePins(views) = outcome else {
        return "null".to_string();
    };
    Value::Array(
        views
            .iter()
            .filter(|view| view.fsp.as_str() == target)
            .map(|view| json!(format!("sha256:{}", hex(&view.fingerprint))))
            .collect(),
    )
    .to_string()
}

async fn list_pins(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
) -> Result<Response, HubError> {
    let name = fsp_name(&name)?;
    let views = hub.ask(ReadCertificatePins {}).await??;
    Ok(axum::Json(
        views
            .iter()
            .filter(|view| view.fsp == name)
            .map(pin_json)
            .collect::<Vec<_>>(),
    )
    .into_response())
}

/// `POST /participants/{name}/certificates` with `{"fingerprint":
/// "sha256:<hex>"}` or `{"certificate": "<PEM>"}` → 201.
async fn pin(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let name = fsp_name(&name)?;
    if name == hub.config.hub_name {
        return Err(invalid(format!(
            "'{name}' is the hub: no client certificate may act as the hub"
        )));
    }
    let body: Value = serde_json::from_slice(&body).map_err(|error| {
        HubError::new(
            ErrorCode::MALFORMED_SYNTAX,
            format!("Malformed syntax - {error}"),
        )
    })?;
    let fingerprint = match (
        body.get("fingerprint").and_then(Value::as_str),
        body.get("certificate").and_then(Value::as_str),
    ) {
        (Some(text), None) => fingerprint(text)?,
        (None, Some(pem)) => pem_fingerprint(pem)?,
        _ => {
            return Err(invalid(
                "give one of fingerprint (sha256:<hex>) or certificate (PEM)",
            ))
        }
    };
    change(
        &hub,
        Change::certificates("certificate.pin", name),
        PinCertificate { name, fingerprint },
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({"fingerprint": format!("sha256:{}", hex(&fingerprint))})),
    )
        .into_response())
}

async fn unpin(
    State(hub): State<Arc<Hub>>,
    Path((name, text)): Path<(String, String)>,
) -> Result<Response, HubError> {
    let name = fsp_name(&name)?;
    let fingerprint = fingerprint(&text)?;
    change(
        &hub,
        Change::certificates("certificate.unpin", name),
        UnpinCertificate { name, fingerprint },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::ClientIdentity;

    fn certificate(cn: &str) -> (ClientIdentity, String) {
        let mut params = rcgen::CertificateParams::new(vec![cn.to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (ClientIdentity::of(cert.der()), cert.pem())
    }

    #[test]
    fn a_pinned_certificate_may_act_as_its_participant_only() {
        let (gateway, pem) = certificate("shared-gateway");
        let (other, _) = certificate("someone");
        let pins = Pins::default();
        let view = PinView {
            fingerprint: pem_fingerprint(&pem).unwrap(),
            fsp: FspName::new("payerfsp").unwrap(),
            pinned_at_ms: 1,
        };
        // The fingerprint of the PEM is the one TLS reports.
        assert_eq!(hex(&view.fingerprint), gateway.fingerprint);
        // Before the pin: only the certificate's own names.
        assert!(!may_act_as(
            &gateway.names,
            Some(&gateway),
            &pins,
            "payerfsp",
            "Hub"
        ));
        assert!(may_act_as(
            &gateway.names,
            Some(&gateway),
            &pins,
            "shared-gateway",
            "Hub"
        ));
        pins.replace(&[view]);
        assert!(may_act_as(
            &gateway.names,
            Some(&gateway),
            &pins,
            "payerfsp",
            "Hub"
        ));
        assert!(may_act_as(
            &gateway.names,
            Some(&gateway),
            &pins,
            "shared-gateway",
            "Hub"
        ));
        assert!(!may_act_as(
            &gateway.names,
            Some(&gateway),
            &pins,
            "payeefsp",
            "Hub"
        ));
        assert!(!may_act_as(
            &other.names,
            Some(&other),
            &pins,
            "payerfsp",
            "Hub"
        ));
        // A gateway's header identity (no certificate) is not helped by pins.
        assert!(!may_act_as(
            &["x".to_string()],
            None,
            &pins,
            "payerfsp",
            "Hub"
        ));
        pins.replace(&[]);
        assert!(!may_act_as(
            &gateway.names,
            Some(&gateway),
            &pins,
            "payerfsp",
            "Hub"
        ));
        // A pin to the hub's name (or a certificate named after it) never
        // lends the hub's voice.
        let (named_hub, _) = certificate("Hub");
        pins.replace(&[PinView {
            fingerprint: pem_fingerprint(&pem).unwrap(),
            fsp: FspName::new("Hub").unwrap(),
            pinned_at_ms: 1,
        }]);
        assert!(!may_act_as(
            &gateway.names,
            Some(&gateway),
            &pins,
            "Hub",
            "Hub"
        ));
        assert!(!may_act_as(
            &named_hub.names,
            Some(&named_hub),
            &pins,
            "Hub",
            "Hub"
        ));
    }

    #[test]
    fn fingerprints_are_read_in_either_form() {
        let hex_digits = "AB".repeat(32);
        assert_eq!(
            fingerprint(&format!("sha256:{hex_digits}")).unwrap(),
            [0xab; 32]
        );
        assert_eq!(fingerprint(&hex_digits).unwrap(), [0xab; 32]);
        assert!(fingerprint("sha1:abcd").is_err());
        assert!(fingerprint(&"ab".repeat(31)).is_err());
        assert!(pem_fingerprint("not pem").is_err());
    }
}
