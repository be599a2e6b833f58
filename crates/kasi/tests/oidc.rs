//! The admin API with an OpenID Connect identity provider, end to end:
//! the real binary fetches a provider's discovery document and JWKS over
//! HTTP, accepts the JWT access tokens that provider signs as bearer
//! tokens naming a person and their role, refuses expired, wrong-audience,
//! role-less and foreign tokens (each counted by reason), follows a key
//! rotation, and keeps the tokens file as the way in.
//!
//! The provider here is a small one served by the test (discovery and
//! JWKS, tokens it signs with keys the test makes), so that every claim
//! can be set; the token checks themselves are `hub::oidc`'s tests.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use support::{admin_token, Hub, Scenario};

struct Key {
    kid: String,
    encoding: EncodingKey,
    jwk: Value,
}

impl Key {
    fn new(kid: &str) -> Key {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let point = pair.public_key_raw();
        Key {
            kid: kid.to_string(),
            encoding: EncodingKey::from_ec_der(&pair.serialize_der()),
            jwk: json!({
                "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                "y": URL_SAFE_NO_PAD.encode(&point[33..]),
            }),
        }
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        encode(&header, claims, &self.encoding).unwrap()
    }
}

/// Discovery and JWKS on loopback, on a runtime of its own.
struct Provider {
    issuer: String,
    jwks: Arc<Mutex<Value>>,
    _runtime: tokio::runtime::Runtime,
}

impl Provider {
    fn start(key: &Key) -> Provider {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let issuer = format!("http://{}/realms/scheme", listener.local_addr().unwrap());
        let jwks = Arc::new(Mutex::new(json!({ "keys": [key.jwk.clone()] })));
        let discovery = json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/protocol/openid-connect/auth"),
            "token_endpoint": format!("{issuer}/protocol/openid-connect/token"),
            "jwks_uri": format!("{issuer}/protocol/openid-connect/certs"),
        });
        let app = Router::new()
            .route(
                "/realms/scheme/.well-known/openid-configuration",
                get(move || {
                    let discovery = discovery.clone();
                    async move { Json(discovery) }
                }),
            )
            .route(
                "/realms/scheme/protocol/openid-connect/certs",
                get(|State(jwks): State<Arc<Mutex<Value>>>| async move {
                    Json(jwks.lock().unwrap().clone())
                }),
            )
            .with_state(jwks.clone());
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        Provider {
            issuer,
            jwks,
            _runtime: runtime,
        }
    }

    fn rotate_to(&self, key: &Key) {
        *self.jwks.lock().unwrap() = json!({ "keys": [key.jwk.clone()] });
    }
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn claims(issuer: &str, user: &str, roles: &[&str]) -> Value {
    json!({
        "iss": issuer,
        "aud": "kasi-admin",
        "sub": format!("id-{user}"),
        "preferred_username": user,
        "exp": now_s() + 300,
        "iat": now_s(),
        "realm_access": { "roles": roles },
    })
}

fn provider_refusals(hub: &Hub, reason: &str) -> u64 {
    let line = format!("kasi_admin_provider_refused_total{{reason=\"{reason}\"}} ");
    hub.admin("GET", "/metrics", None)
        .text()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&line)
                .map(|v| v.trim().parse::<f64>().unwrap() as u64)
        })
        .unwrap_or(0)
}

#[test]
fn the_providers_tokens_name_people_and_roles_and_the_tokens_file_stays() {
    let key = Key::new("2026-11");
    let provider = Provider::start(&key);
    let issuer = provider.issuer.clone();
    let dir = tempfile::tempdir().unwrap();
    let (operator, operator_line) = admin_token("break-glass", "operator");
    let tokens = dir.path().join("admin-tokens");
    std::fs::write(&tokens, format!("{operator_line}\n")).unwrap();
    let mut hub = Hub::start_with(
        &dir.path().join("data"),
        &[
            "--admin-tokens",
            tokens.to_str().unwrap(),
            "--oidc-issuer",
            &issuer,
            "--oidc-client-id",
            "kasi-console",
            "--oidc-audience",
            "kasi-admin",
            "--oidc-roles-claim",
            "realm_access.roles",
            "--oidc-role-map",
            "hub-treasury=finance,hub-ops=operator",
        ],
    );
    hub.await_log("identity provider's keys fetched");
    hub.admin_bearer = Some(operator.clone());
    let scenario = Scenario::on(hub, dir, 10_000, 5_000);
    let hub = &scenario.hub;

    // A finance person: reads, funds, but does not onboard; the audit
    // trail names her and where her credential came from.
    let dora = key.sign(&claims(
        &issuer,
        "dora",
        &["offline_access", "hub-treasury"],
    ));
    let participants = hub.admin_as(Some(&dora), "GET", "/participants", None);
    assert_eq!(participants.status, 200, "{participants:?}");
    let onboard = hub.admin_as(
        Some(&dora),
        "POST",
        "/participants",
        Some(&json!({ "name": "newfsp", "currency": "USD" })),
    );
    assert_eq!(onboard.status, 403, "finance does not onboard: {onboard:?}");
    // Refusals reach the audit trail through a task: wait for it.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let events = hub
            .admin_as(Some(&operator), "GET", "/audit-events?actor=dora", None)
            .json();
        if events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["role"] == "finance")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the refusal was never audited under dora's name and role: {events:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A DFSP's own person sees its own DFSP and not the other's.
    let payer_ops = key.sign(&claims(&issuer, "pat", &["dfsp:payerfsp"]));
    let own = hub.admin_as(
        Some(&payer_ops),
        "GET",
        "/participants/payerfsp/positions",
        None,
    );
    assert_eq!(own.status, 200, "{own:?}");
    let other = hub.admin_as(
        Some(&payer_ops),
        "GET",
        "/participants/payeefsp/positions",
        None,
    );
    assert_eq!(other.status, 403, "{other:?}");

    // Refused tokens: 401, counted by reason.
    let refused = |token: &str, reason: &str| {
        let before = provider_refusals(hub, reason);
        let response = hub.admin_as(Some(token), "GET", "/participants", None);
        assert_eq!(response.status, 401, "{reason}: {response:?}");
        hub.await_metrics(reason, |_| {
            (provider_refusals(hub, reason) > before).then_some(())
        });
    };
    let mut expired = claims(&issuer, "dora", &["hub-treasury"]);
    expired["exp"] = json!(now_s() - 600);
    refused(&key.sign(&expired), "expired");
    let mut elsewhere = claims(&issuer, "dora", &["hub-treasury"]);
    elsewhere["aud"] = json!("another-api");
    refused(&key.sign(&elsewhere), "wrong audience");
    refused(
        &key.sign(&claims(&issuer, "mallory", &["offline_access"])),
        "no kasi role",
    );
    // Signed by a key that is not the provider's, under a kid it never had.
    let foreign = Key::new("not-the-providers");
    refused(
        &foreign.sign(&claims(&issuer, "mallory", &["hub-ops"])),
        "unknown key",
    );

    // The provider rotates its key: once kasi may fetch again (at most
    // every 10 s for an unknown kid), the new key's tokens pass and the
    // old key's do not.
    let next = Key::new("2026-12");
    provider.rotate_to(&next);
    let rotated = next.sign(&claims(&issuer, "dora", &["hub-treasury"]));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = hub.admin_as(Some(&rotated), "GET", "/participants", None);
        if response.status == 200 {
            break;
        }
        assert_eq!(response.status, 401, "{response:?}");
        assert!(Instant::now() < deadline, "the rotated key never passed");
        std::thread::sleep(Duration::from_millis(500));
    }
    let retired = hub.admin_as(Some(&dora), "GET", "/participants", None);
    assert_eq!(retired.status, 401, "the retired key's token: {retired:?}");

    // The tokens file is still the way in.
    let glass = hub.admin_as(Some(&operator), "GET", "/participants", None);
    assert_eq!(glass.status, 200, "{glass:?}");
}

#[test]
fn a_provider_that_is_down_at_start_stops_nothing_but_its_own_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let (operator, operator_line) = admin_token("break-glass", "operator");
    let tokens = dir.path().join("admin-tokens");
    std::fs::write(&tokens, format!("{operator_line}\n")).unwrap();
    // Nothing listens on port 9 of loopback.
    let issuer = "http://127.0.0.1:9/realms/scheme";
    let mut hub = Hub::start_with(
        &dir.path().join("data"),
        &[
            "--admin-tokens",
            tokens.to_str().unwrap(),
            "--oidc-issuer",
            issuer,
            "--oidc-client-id",
            "kasi-console",
        ],
    );
    hub.await_log("could not fetch the identity provider's keys");
    hub.admin_bearer = Some(operator.clone());
    let key = Key::new("k");
    let mut token_claims = claims(issuer, "dora", &["operator"]);
    token_claims["aud"] = json!("kasi-console");
    let response = hub.admin_as(Some(&key.sign(&token_claims)), "GET", "/participants", None);
    assert_eq!(response.status, 401, "{response:?}");
    hub.await_metrics("keys unavailable", |_| {
        (provider_refusals(&hub, "keys unavailable") > 0).then_some(())
    });
    let glass = hub.admin_as(Some(&operator), "GET", "/participants", None);
    assert_eq!(glass.status, 200, "{glass:?}");
}

#[test]
fn an_issuer_that_is_not_https_off_loopback_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = support::kasi()
        .args([
            "serve",
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
            "--oidc-issuer",
            "http://idp.example/realms/scheme",
            "--oidc-client-id",
            "kasi-console",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--oidc-issuer"), "{stderr}");
    assert!(stderr.contains("https://"), "{stderr}");
}
