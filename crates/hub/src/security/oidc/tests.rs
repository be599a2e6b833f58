//! The token checks against a provider served in-process (discovery and
//! JWKS over real HTTP on loopback), with tokens signed by keys the test
//! makes. End to end against a real OpenID provider: crates/kasi/tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{encode, EncodingKey, Header};
use serde_json::{json, Value};

use super::*;

struct SigningKey {
    kid: String,
    encoding: EncodingKey,
    jwk: Value,
}

impl SigningKey {
    fn new(kid: &str) -> SigningKey {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let point = pair.public_key_raw();
        assert_eq!(point.len(), 65, "an uncompressed P-256 point");
        SigningKey {
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

struct Provider {
    issuer: String,
    jwks: Arc<Mutex<Value>>,
    jwks_fetches: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

#[derive(Clone)]
struct Served {
    issuer: Arc<Mutex<String>>,
    jwks: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
}

impl Provider {
    /// A provider on loopback whose discovery names `issuer_path` under
    /// its own address, serving `keys`.
    async fn start(keys: &[&SigningKey]) -> Provider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}/realms/scheme", listener.local_addr().unwrap());
        let served = Served {
            issuer: Arc::new(Mutex::new(issuer.clone())),
            jwks: Arc::new(Mutex::new(
                json!({ "keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>() }),
            )),
            fetches: Arc::new(AtomicUsize::new(0)),
        };
        let app = Router::new()
            .route(
                "/realms/scheme/.well-known/openid-configuration",
                get(|State(served): State<Served>| async move {
                    let issuer = served.issuer.lock().unwrap().clone();
                    let base = issuer.clone();
                    Json(json!({
                        "issuer": issuer,
                        "authorization_endpoint": format!("{base}/auth"),
                        "token_endpoint": format!("{base}/token"),
                        "jwks_uri": format!("{base}/jwks"),
                    }))
                }),
            )
            .route(
                "/realms/scheme/jwks",
                get(|State(served): State<Served>| async move {
                    served.fetches.fetch_add(1, Ordering::SeqCst);
                    Json(served.jwks.lock().unwrap().clone())
                }),
            )
            .with_state(served.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Provider {
            issuer,
            jwks: served.jwks,
            jwks_fetches: served.fetches,
            stop: Some(stop),
        }
    }

    fn serve_keys(&self, keys: &[&SigningKey]) {
        *self.jwks.lock().unwrap() =
            json!({ "keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>() });
    }

    fn fetches(&self) -> usize {
        self.jwks_fetches.load(Ordering::SeqCst)
    }

    fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn settings(issuer: &str) -> OidcSettings {
    OidcSettings::new(
        issuer,
        "kasi-console",
        Some("kasi-admin"),
        None,
        None,
        "realm_access.roles",
        "preferred_username",
        &["hub-ops=operator".to_string()],
        Duration::from_secs(30),
        None,
    )
    .unwrap()
}

fn claims(issuer: &str) -> Value {
    json!({
        "iss": issuer,
        "aud": ["kasi-admin", "account"],
        "sub": "3f1c-alice",
        "preferred_username": "alice",
        "exp": now_s() + 300,
        "iat": now_s(),
        "realm_access": { "roles": ["offline_access", "hub-ops"] },
    })
}

fn with(mut claims: Value, field: &str, value: Value) -> Value {
    claims[field] = value;
    claims
}

#[tokio::test]
async fn a_token_the_provider_signed_names_the_person_and_their_roles() {
    let key = SigningKey::new("k1");
    let provider = Provider::start(&[&key]).await;
    let oidc = Oidc::new(settings(&provider.issuer)).unwrap();
    assert_eq!(oidc.refresh().await.unwrap(), 1);
    let identity = oidc
        .verify(&key.sign(&claims(&provider.issuer)))
        .await
        .unwrap();
    assert_eq!(identity.name, "alice");
    assert_eq!(identity.subject, "3f1c-alice");
    assert_eq!(identity.roles, ["offline_access", "operator"]);
    // Without the name claim, the subject names the person; roles as one
    // space-separated string are read too.
    let mut settings = settings(&provider.issuer);
    settings.roles_claim = vec!["scope".into()];
    let oidc = Oidc::new(settings).unwrap();
    let mut claims = claims(&provider.issuer);
    claims.as_object_mut().unwrap().remove("preferred_username");
    claims["scope"] = json!("viewer openid");
    let identity = oidc.verify(&key.sign(&claims)).await.unwrap();
    assert_eq!(identity.name, "3f1c-alice");
    assert_eq!(identity.roles, ["viewer", "openid"]);
}

#[tokio::test]
async fn every_check_refuses_what_it_should() {
    let key = SigningKey::new("k1");
    let provider = Provider::start(&[&key]).await;
    let issuer = provider.issuer.clone();
    let oidc = Oidc::new(settings(&issuer)).unwrap();
    let good = claims(&issuer);
    let refused = |claims: Value| {
        let token = key.sign(&claims);
        let oidc = &oidc;
        async move { oidc.verify(&token).await.unwrap_err() }
    };
    assert_eq!(
        refused(with(good.clone(), "exp", json!(now_s() - 120))).await,
        OidcRefusal::Expired
    );
    assert_eq!(
        refused(with(good.clone(), "nbf", json!(now_s() + 120))).await,
        OidcRefusal::NotYetValid
    );
    assert_eq!(
        refused(with(good.clone(), "aud", json!("another-api"))).await,
        OidcRefusal::WrongAudience
    );
    assert_eq!(
        refused(with(
            good.clone(),
            "iss",
            json!("https://idp.example/other")
        ))
        .await,
        OidcRefusal::WrongIssuer
    );
    let mut no_audience = good.clone();
    no_audience.as_object_mut().unwrap().remove("aud");
    assert_eq!(refused(no_audience).await, OidcRefusal::MissingClaim);
    assert_eq!(
        refused(with(good.clone(), "realm_access", json!({ "roles": [] }))).await,
        OidcRefusal::NoRole
    );
    assert_eq!(
        refused(with(good.clone(), "realm_access", json!({}))).await,
        OidcRefusal::NoRole
    );
    // Within the clock skew (30 s) an expired token still passes.
    assert!(oidc
        .verify(&key.sign(&with(good.clone(), "exp", json!(now_s() - 10))))
        .await
        .is_ok());

    // Another key under the same kid: the signature does not verify.
    let impostor = SigningKey::new("k1");
    assert_eq!(
        oidc.verify(&impostor.sign(&good)).await.unwrap_err(),
        OidcRefusal::BadSignature
    );
    // Unsigned, and signed with a shared secret (the HMAC confusion).
    let encode_part = |value: &Value| URL_SAFE_NO_PAD.encode(value.to_string());
    let unsigned = format!(
        "{}.{}.",
        encode_part(&json!({ "alg": "none", "kid": "k1" })),
        encode_part(&good)
    );
    assert_eq!(
        oidc.verify(&unsigned).await.unwrap_err(),
        OidcRefusal::Malformed,
        "`none` is not even an algorithm jsonwebtoken parses"
    );
    let mut hmac = Header::new(Algorithm::HS256);
    hmac.kid = Some("k1".into());
    let hmac = encode(&hmac, &good, &EncodingKey::from_secret(b"client-secret")).unwrap();
    assert_eq!(
        oidc.verify(&hmac).await.unwrap_err(),
        OidcRefusal::AlgorithmNotAllowed
    );
    // A key whose JWK says ES256 does not verify an RS256 header.
    let mut other_alg = Header::new(Algorithm::RS256);
    other_alg.kid = Some("k1".into());
    let forged = format!(
        "{}.{}.{}",
        encode_part(&serde_json::to_value(&other_alg).unwrap()),
        encode_part(&good),
        "AAAA"
    );
    assert_eq!(
        oidc.verify(&forged).await.unwrap_err(),
        OidcRefusal::AlgorithmNotAllowed
    );
    assert_eq!(
        oidc.verify("not.a-jwt").await.unwrap_err(),
        OidcRefusal::Malformed
    );
}

#[tokio::test]
async fn a_rotated_key_is_fetched_once_and_made_up_kids_do_not_hammer_the_provider() {
    let old = SigningKey::new("2026-old");
    let mut provider = Provider::start(&[&old]).await;
    let issuer = provider.issuer.clone();
    let oidc = Oidc::new(settings(&issuer)).unwrap();
    oidc.verify(&old.sign(&claims(&issuer))).await.unwrap();
    assert_eq!(provider.fetches(), 1, "the first token fetched the keys");

    // The provider rotates: the new key signs, the old one is gone.
    let new = SigningKey::new("2026-new");
    provider.serve_keys(&[&new]);
    // Within UNKNOWN_KEY_REFETCH of the last fetch the new kid is not yet
    // known: kasi does not refetch for every unknown kid.
    let first = oidc.verify(&new.sign(&claims(&issuer))).await;
    assert_eq!(first.unwrap_err(), OidcRefusal::UnknownKey);
    assert_eq!(provider.fetches(), 1);
    // Once that interval has passed, the unknown kid fetches again, once.
    oidc.keys.write().await.attempted_at =
        Some(Instant::now() - UNKNOWN_KEY_REFETCH - Duration::from_millis(1));
    let identity = oidc.verify(&new.sign(&claims(&issuer))).await.unwrap();
    assert_eq!(identity.name, "alice");
    assert_eq!(provider.fetches(), 2);
    assert_eq!(
        oidc.verify(&old.sign(&claims(&issuer))).await.unwrap_err(),
        OidcRefusal::UnknownKey,
        "the retired key no longer verifies"
    );
    for n in 0..50 {
        let made_up = SigningKey::new(&format!("made-up-{n}"));
        assert_eq!(
            oidc.verify(&made_up.sign(&claims(&issuer)))
                .await
                .unwrap_err(),
            OidcRefusal::UnknownKey
        );
    }
    assert_eq!(provider.fetches(), 2, "made-up kids fetched nothing");

    // The provider goes down, and the keys grow stale: the keys held
    // still serve, and the failed fetch is not tried for every request.
    provider.stop();
    oidc.keys.write().await.fetched_at = Some(Instant::now() - KEYS_MAX_AGE);
    oidc.keys.write().await.attempted_at = None;
    for _ in 0..3 {
        oidc.verify(&new.sign(&claims(&issuer))).await.unwrap();
    }
}

#[tokio::test]
async fn a_provider_that_names_another_issuer_or_cannot_be_reached_gives_no_keys() {
    let key = SigningKey::new("k1");
    let provider = Provider::start(&[&key]).await;
    // Configured with a trailing slash the provider does not use.
    let oidc = Oidc::new(settings(&format!("{}/", provider.issuer))).unwrap();
    let error = oidc.refresh().await.unwrap_err();
    assert!(error.contains("names the issuer"), "{error}");
    assert_eq!(
        oidc.verify(&key.sign(&claims(&format!("{}/", provider.issuer))))
            .await
            .unwrap_err(),
        OidcRefusal::KeysUnavailable
    );
    let nobody = Oidc::new(settings("http://127.0.0.1:9/realms/none")).unwrap();
    assert!(nobody.refresh().await.is_err());
    assert!(nobody.endpoints().await.is_none());
}

#[test]
fn settings_teach_what_is_wrong() {
    let new = |issuer: &str, claim: &str, map: &[&str], skew: u64| {
        OidcSettings::new(
            issuer,
            "console",
            None,
            None,
            None,
            claim,
            "preferred_username",
            &map.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
            Duration::from_secs(skew),
            None,
        )
    };
    let error = new("http://idp.example/realms/x", "roles", &[], 30).unwrap_err();
    assert!(error.contains("https://"), "{error}");
    assert!(new("http://127.0.0.1:8080/realms/x", "roles", &[], 30).is_ok());
    assert!(new("https://idp.example", "a..b", &[], 30)
        .unwrap_err()
        .contains("empty part"));
    assert!(new("https://idp.example", "roles", &["ops"], 30)
        .unwrap_err()
        .contains("PROVIDER_ROLE=KASI_ROLE"));
    assert!(new("https://idp.example", "roles", &[], 3600)
        .unwrap_err()
        .contains("at most 300"));
    let settings = new("https://idp.example", "roles", &[], 30).unwrap();
    assert_eq!(
        settings.audience, "console",
        "the audience defaults to the client id"
    );
}
