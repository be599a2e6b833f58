//! The admin API with an OpenID Connect identity provider, end to end:
//! the real binary fetches a provider's discovery document and JWKS over
//! HTTP, accepts the JWT access tokens that provider signs as bearer
//! tokens naming a person and their role, refuses expired, wrong-audience,
//! wrong-issuer, unsigned (`alg: none`), HMAC, role-less and foreign
//! tokens (each counted by reason), follows a key
//! rotation, and keeps the tokens file as the way in; on PostgreSQL a
//! person's change and its audit event outlive a restart, and over TLS
//! (the provider's HTTPS trusted with --oidc-ca) the same checks hold.
//!
//! The provider here is a small one served by the test (discovery and
//! JWKS, tokens it signs with keys the test makes), so that every claim
//! can be set; the token checks themselves are `hub::oidc`'s tests.

mod support;

use std::io::{Read, Write};
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

/// Who the provider signs in next at its authorization endpoint (it
/// asks nothing: the person is taken as authenticated).
#[derive(Clone)]
struct Person {
    user: String,
    roles: Vec<String>,
}

/// A code the provider handed out, with what its sign-in asked.
struct Issued {
    nonce: String,
    challenge: String,
    redirect_uri: String,
    person: Person,
}

#[derive(Clone)]
struct ProviderState {
    issuer: String,
    jwks: Arc<Mutex<Value>>,
    key: Arc<Key>,
    next_person: Arc<Mutex<Person>>,
    codes: Arc<Mutex<std::collections::HashMap<String, Issued>>>,
    /// Every token request's refusal, for the test to read.
    token_refusals: Arc<Mutex<Vec<String>>>,
}

/// Discovery, JWKS, an authorization endpoint that signs in
/// [`Provider::sign_in_as`] and a token endpoint that checks PKCE, on
/// loopback, on a runtime of its own.
struct Provider {
    issuer: String,
    state: ProviderState,
    _runtime: tokio::runtime::Runtime,
}

impl Provider {
    fn start(key: Key) -> Provider {
        Provider::start_with(key, None)
    }

    /// Served over HTTPS with `tls` (a certificate for 127.0.0.1), as a
    /// real provider is.
    fn start_tls(key: Key, tls: Arc<rustls::ServerConfig>) -> Provider {
        Provider::start_with(key, Some(tls))
    }

    fn start_with(key: Key, tls: Option<Arc<rustls::ServerConfig>>) -> Provider {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let issuer = format!(
            "{scheme}://{}/realms/scheme",
            listener.local_addr().unwrap()
        );
        let state = ProviderState {
            issuer: issuer.clone(),
            jwks: Arc::new(Mutex::new(json!({ "keys": [key.jwk.clone()] }))),
            key: Arc::new(key),
            next_person: Arc::new(Mutex::new(Person {
                user: "nobody".into(),
                roles: Vec::new(),
            })),
            codes: Arc::default(),
            token_refusals: Arc::default(),
        };
        let app = Router::new()
            .route(
                "/realms/scheme/.well-known/openid-configuration",
                get(|State(state): State<ProviderState>| async move {
                    let issuer = &state.issuer;
                    Json(json!({
                        "issuer": issuer,
                        "authorization_endpoint": format!("{issuer}/protocol/openid-connect/auth"),
                        "token_endpoint": format!("{issuer}/protocol/openid-connect/token"),
                        "jwks_uri": format!("{issuer}/protocol/openid-connect/certs"),
                    }))
                }),
            )
            .route(
                "/realms/scheme/protocol/openid-connect/certs",
                get(|State(state): State<ProviderState>| async move {
                    Json(state.jwks.lock().unwrap().clone())
                }),
            )
            .route(
                "/realms/scheme/protocol/openid-connect/auth",
                get(authorize),
            )
            .route(
                "/realms/scheme/protocol/openid-connect/token",
                axum::routing::post(token),
            )
            .with_state(state.clone());
        match tls {
            None => {
                runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
            }
            Some(tls) => {
                runtime.spawn(support::serve_tls(listener, app, tls));
            }
        }
        Provider {
            issuer,
            state,
            _runtime: runtime,
        }
    }

    fn rotate_to(&self, key: &Key) {
        *self.state.jwks.lock().unwrap() = json!({ "keys": [key.jwk.clone()] });
    }

    fn sign_in_as(&self, user: &str, roles: &[&str]) {
        *self.state.next_person.lock().unwrap() = Person {
            user: user.to_string(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
        };
    }
}

async fn authorize(
    State(state): State<ProviderState>,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let field = |name: &str| query.get(name).cloned().unwrap_or_default();
    assert_eq!(field("response_type"), "code");
    assert_eq!(field("client_id"), "kasi-console");
    assert_eq!(field("code_challenge_method"), "S256", "PKCE with S256");
    assert!(field("scope").split(' ').any(|s| s == "openid"));
    let code = format!("code-{}", state.codes.lock().unwrap().len());
    state.codes.lock().unwrap().insert(
        code.clone(),
        Issued {
            nonce: field("nonce"),
            challenge: field("code_challenge"),
            redirect_uri: field("redirect_uri"),
            person: state.next_person.lock().unwrap().clone(),
        },
    );
    let back = format!(
        "{}?{}",
        field("redirect_uri"),
        serde_urlencoded::to_string([("code", code.as_str()), ("state", &field("state"))]).unwrap()
    );
    (
        axum::http::StatusCode::FOUND,
        [(axum::http::header::LOCATION, back)],
    )
        .into_response()
}

async fn token(
    State(state): State<ProviderState>,
    axum::Form(form): axum::Form<std::collections::HashMap<String, String>>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let refuse = |why: String| {
        state.token_refusals.lock().unwrap().push(why.clone());
        (
            axum::http::StatusCode::BAD_REQUEST,
            Json(json!({ "error": "invalid_grant", "error_description": why })),
        )
            .into_response()
    };
    let field = |name: &str| form.get(name).cloned().unwrap_or_default();
    let Some(issued) = state.codes.lock().unwrap().remove(&field("code")) else {
        return refuse("unknown or used code".into());
    };
    let challenge = URL_SAFE_NO_PAD.encode(<sha2::Sha256 as sha2::Digest>::digest(
        field("code_verifier").as_bytes(),
    ));
    if challenge != issued.challenge {
        return refuse("PKCE verifier does not match".into());
    }
    if field("redirect_uri") != issued.redirect_uri {
        return refuse("redirect_uri differs".into());
    }
    let now = now_s();
    let user = &issued.person.user;
    let access = state.key.sign(&json!({
        "iss": state.issuer, "aud": "kasi-admin", "sub": format!("id-{user}"),
        "preferred_username": user, "exp": now + 300, "iat": now,
        "realm_access": { "roles": issued.person.roles },
    }));
    let id_token = state.key.sign(&json!({
        "iss": state.issuer, "aud": "kasi-console", "sub": format!("id-{user}"),
        "exp": now + 300, "iat": now, "nonce": issued.nonce,
    }));
    Json(json!({
        "access_token": access, "id_token": id_token,
        "token_type": "Bearer", "expires_in": 300,
    }))
    .into_response()
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

/// `token` is refused (401) and counted under `reason`.
fn assert_refused(hub: &Hub, token: &str, reason: &str) {
    let before = provider_refusals(hub, reason);
    let response = hub.admin_as(Some(token), "GET", "/participants", None);
    assert_eq!(response.status, 401, "{reason}: {response:?}");
    hub.await_metrics(reason, |_| {
        (provider_refusals(hub, reason) > before).then_some(())
    });
}

/// `token`'s holder onboards `newfsp`.
fn onboard_newfsp(hub: &Hub, token: &str) -> support::Response {
    hub.admin_as(
        Some(token),
        "POST",
        "/participants",
        Some(&json!({ "name": "newfsp", "currency": "USD" })),
    )
}

/// A hub whose tokens file holds one operator (`break-glass`, whose token
/// it returns and sends on its own admin calls) and which trusts the
/// provider at `issuer`: audience `kasi-admin`, roles in
/// `realm_access.roles`, `hub-treasury` meaning finance and `hub-ops`
/// operator; its keys fetched.
fn hub_trusting(issuer: &str, dir: &std::path::Path) -> (Hub, String) {
    let (flags, operator) = trusting(issuer, dir);
    let data = dir.join("data");
    let hub = started(Hub::serve_command(&data, &strs(&flags)), &data, &operator);
    (hub, operator)
}

/// The flags of [`hub_trusting`]'s hub (its tokens file written in
/// `dir`), and the break-glass operator's token.
fn trusting(issuer: &str, dir: &std::path::Path) -> (Vec<String>, String) {
    let (operator, operator_line) = admin_token("break-glass", "operator");
    let tokens = dir.join("admin-tokens");
    std::fs::write(&tokens, format!("{operator_line}\n")).unwrap();
    let flags = [
        "--admin-tokens",
        tokens.to_str().unwrap(),
        "--oidc-issuer",
        issuer,
        "--oidc-client-id",
        "kasi-console",
        "--oidc-audience",
        "kasi-admin",
        "--oidc-roles-claim",
        "realm_access.roles",
        "--oidc-role-map",
        "hub-treasury=finance,hub-ops=operator",
    ];
    (flags.map(str::to_string).to_vec(), operator)
}

fn strs(flags: &[String]) -> Vec<&str> {
    flags.iter().map(String::as_str).collect()
}

/// `command` (a hub trusting the provider) running, the provider's keys
/// fetched, `operator`'s token on its own admin calls.
fn started(command: std::process::Command, data: &std::path::Path, operator: &str) -> Hub {
    let mut hub = Hub::spawn(command, data);
    hub.await_log("identity provider's keys fetched");
    hub.admin_bearer = Some(operator.to_string());
    hub
}

#[test]
fn the_providers_tokens_name_people_and_roles_and_the_tokens_file_stays() {
    let provider = Provider::start(Key::new("2026-11"));
    let key = provider.state.key.clone();
    let issuer = provider.issuer.clone();
    let dir = tempfile::tempdir().unwrap();
    let (hub, operator) = hub_trusting(&issuer, dir.path());
    let scenario = Scenario::on(hub, dir, 10_000, 5_000);
    let hub = &scenario.hub;

    // A finance person: reads, funds, but does not onboard; the audit
    // trail names her and her role.
    let dora = key.sign(&claims(
        &issuer,
        "dora",
        &["offline_access", "hub-treasury"],
    ));
    let participants = hub.admin_as(Some(&dora), "GET", "/participants", None);
    assert_eq!(participants.status, 200, "{participants:?}");
    let onboard = onboard_newfsp(hub, &dora);
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
    // Each event says how its actor signed in: dora through the provider,
    // the scenario's set-up with the break-glass token of the tokens file.
    let by_provider = hub
        .admin_as(
            Some(&operator),
            "GET",
            "/audit-events?actor=dora&source=identity-provider",
            None,
        )
        .json();
    assert!(
        by_provider
            .as_array()
            .is_some_and(|events| !events.is_empty()),
        "dora's refusal is filed under the identity provider: {by_provider:#}"
    );
    let by_token = hub
        .admin_as(
            Some(&operator),
            "GET",
            "/audit-events?source=tokens-file",
            None,
        )
        .json();
    let by_token = by_token.as_array().unwrap();
    assert!(
        by_token
            .iter()
            .any(|e| e["actor"] == "break-glass" && e["action"] == "participant.create"),
        "the set-up is filed under the tokens file: {by_token:#?}"
    );
    assert!(
        by_token
            .iter()
            .all(|e| e["source"] == "tokens-file" && e["actor"] != "dora"),
        "the filter keeps only the tokens file's events: {by_token:#?}"
    );

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
    let refused = |token: &str, reason: &str| assert_refused(hub, token, reason);
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
    // The provider's own key, but another issuer's token.
    refused(
        &key.sign(&claims(
            "https://elsewhere.example/realms/scheme",
            "mallory",
            &["hub-ops"],
        )),
        "wrong issuer",
    );
    // Unsigned (`alg: none`), and signed with a shared secret under the
    // provider's kid (the HMAC confusion): refused before any key is used.
    let part = |value: &Value| URL_SAFE_NO_PAD.encode(value.to_string());
    let operator_claims = claims(&issuer, "mallory", &["hub-ops"]);
    let unsigned = format!(
        "{}.{}.",
        part(&json!({"alg": "none", "typ": "JWT", "kid": key.kid})),
        part(&operator_claims)
    );
    refused(&unsigned, "malformed");
    let mut hmac = Header::new(Algorithm::HS256);
    hmac.kid = Some(key.kid.clone());
    let hmac = encode(
        &hmac,
        &operator_claims,
        &EncodingKey::from_secret(b"kasi-console-secret"),
    )
    .unwrap();
    refused(&hmac, "algorithm not allowed");

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

/// `host:port` and the path of an absolute `http://` URL.
fn split_url(url: &str) -> (std::net::SocketAddr, String) {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    (authority.parse().unwrap(), path.to_string())
}

/// `name=value` of the Set-Cookie named `name`.
fn set_cookie(response: &support::Response, name: &str) -> String {
    response
        .headers
        .iter()
        .filter(|(key, _)| key.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, value)| value.split(';').next().unwrap().trim().to_string())
        .find(|pair| pair.starts_with(&format!("{name}=")) && pair.len() > name.len() + 1)
        .unwrap_or_else(|| panic!("no {name} cookie: {response:?}"))
}

fn browse(address: std::net::SocketAddr, path: &str, cookies: &[&str]) -> support::Response {
    let headers: Vec<(String, String)> = if cookies.is_empty() {
        Vec::new()
    } else {
        vec![("Cookie".to_string(), cookies.join("; "))]
    };
    support::http(address, "GET", path, &headers, b"")
}

/// A console sign-in begun in a browser (the start), taken through the
/// provider: the callback path and the browser's state cookie.
fn begin_sign_in(hub: &Hub, next: &str) -> (String, String) {
    let start = browse(hub.admin, &format!("/console/oidc/start?next={next}"), &[]);
    assert_eq!(start.status, 303, "{start:?}");
    let state_cookie = set_cookie(&start, "kasi_oidc_state");
    let (provider, path) = split_url(start.header("location").unwrap());
    assert!(path.contains("code_challenge="), "{path}");
    assert!(
        !path.contains("code_verifier"),
        "the verifier stays with kasi: {path}"
    );
    let at_provider = browse(provider, &path, &[]);
    assert_eq!(at_provider.status, 302, "{at_provider:?}");
    let (back_to, callback) = split_url(at_provider.header("location").unwrap());
    assert_eq!(
        back_to, hub.admin,
        "the provider sends the browser back to the console"
    );
    (callback, state_cookie)
}

#[test]
fn people_sign_in_to_the_console_through_the_provider_with_pkce() {
    let provider = Provider::start(Key::new("2026-11"));
    let dir = tempfile::tempdir().unwrap();
    let (hub, _) = hub_trusting(&provider.issuer, dir.path());

    let sign_in = browse(hub.admin, "/console/sign-in", &[]);
    assert!(
        sign_in.text().contains("/console/oidc/start"),
        "the sign-in page offers the provider: {}",
        sign_in.text()
    );

    // dora signs in as finance and lands on the page she asked for.
    provider.sign_in_as("dora", &["hub-treasury"]);
    let (callback, state_cookie) = begin_sign_in(&hub, "/console/participants");
    // Anyone may begin sign-ins; a flood of them while dora is at the
    // provider costs the hub nothing kept and does not push hers out.
    for _ in 0..1_500 {
        let begun = browse(hub.admin, "/console/oidc/start", &[]);
        assert_eq!(begun.status, 303, "{begun:?}");
    }
    let forged = browse(hub.admin, &callback, &[]);
    assert_eq!(
        forged.status, 400,
        "no state cookie, no sign-in: {forged:?}"
    );
    let signed_in = browse(hub.admin, &callback, &[&state_cookie]);
    assert_eq!(signed_in.status, 200, "{}", signed_in.text());
    assert!(
        signed_in.text().contains("url=/console/participants"),
        "{}",
        signed_in.text()
    );
    let session = set_cookie(&signed_in, "kasi_console");
    let page = browse(hub.admin, "/console/participants", &[&session]);
    assert_eq!(page.status, 200, "{page:?}");
    assert!(
        page.text().contains("dora"),
        "the page names her: {}",
        page.text()
    );
    hub.await_log("console sign-in");
    // Her role holds in the console as in the API: finance reads the
    // scheme's configuration but does not change it.
    let scheme = browse(hub.admin, "/console/scheme", &[&session]);
    assert_eq!(scheme.status, 200, "{scheme:?}");
    let text = scheme.text();
    let csrf = text
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a form's CSRF token");
    let oracle = support::http(
        hub.admin,
        "POST",
        "/console/scheme/oracles",
        &[
            ("Cookie".to_string(), session.clone()),
            (
                "Content-Type".to_string(),
                "application/x-www-form-urlencoded".to_string(),
            ),
        ],
        format!("csrf={csrf}&type=MSISDN&endpoint=http%3A%2F%2F127.0.0.1%3A9%2F").as_bytes(),
    );
    assert_eq!(oracle.status, 403, "{oracle:?}");
    // The callback cannot be used twice.
    let replayed = browse(hub.admin, &callback, &[&state_cookie]);
    assert_eq!(replayed.status, 400, "{replayed:?}");

    // A code the provider never gave (or gave to another sign-in) is
    // refused by the provider's token endpoint: no session.
    let (callback, state_cookie) = begin_sign_in(&hub, "/console/");
    let wrong_code = callback.replacen("code=code-", "code=code-9", 1);
    let refused = browse(hub.admin, &wrong_code, &[&state_cookie]);
    assert_eq!(refused.status, 401, "{refused:?}");
    assert!(
        refused.text().contains("could not be completed"),
        "{}",
        refused.text()
    );
    assert!(!refused
        .headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("set-cookie") && v.starts_with("kasi_console=")));
    assert!(provider
        .state
        .token_refusals
        .lock()
        .unwrap()
        .iter()
        .any(|why| why.contains("unknown or used code")));

    // Someone the provider knows but kasi gives no role: no session.
    provider.sign_in_as("mallory", &["offline_access"]);
    let (callback, state_cookie) = begin_sign_in(&hub, "/console/");
    let before = provider_refusals(&hub, "no kasi role");
    let no_role = browse(hub.admin, &callback, &[&state_cookie]);
    assert_eq!(no_role.status, 403, "{no_role:?}");
    // Counted like the API's refused tokens.
    hub.await_metrics("the console's refused sign-in", |_| {
        (provider_refusals(&hub, "no kasi role") > before).then_some(())
    });
    assert!(
        no_role.text().contains("no kasi role"),
        "{}",
        no_role.text()
    );
}

/// The audit events of `actor` (newest first), as the operator reads them.
fn audit_events_of(hub: &Hub, actor: &str) -> Vec<Value> {
    let events = hub.admin_expect("GET", &format!("/audit-events?actor={actor}"), None, 200);
    events.json().as_array().unwrap().clone()
}

#[test]
fn on_postgresql_a_providers_persons_change_and_its_audit_event_survive_a_restart() {
    let provider = Provider::start(Key::new("2026-11"));
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().unwrap();
    let (flags, operator) = trusting(&provider.issuer, dir.path());
    let data = dir.path().join("data");
    let start = || {
        let command = Hub::postgres_command(&data, &url, "solo", 120_000, &strs(&flags));
        started(command, &data, &operator)
    };
    let mut scenario = Scenario::on(start(), dir, 10_000, 5_000);
    let hub = &scenario.hub;
    let dora = provider
        .state
        .key
        .sign(&claims(&provider.issuer, "dora", &["hub-treasury"]));
    let account = format!(
        "/participants/{}/accounts/{}",
        support::PAYER,
        hub.account_id(support::PAYER, "SETTLEMENT")
    );
    let before = hub.account_value(support::PAYER, "SETTLEMENT");
    let funds_in = json!({
        "transferId": support::new_id(), "externalReference": "treasury-7",
        "action": "recordFundsIn", "reason": "top up",
        "amount": {"amount": "250", "currency": "USD"}
    });
    let response = hub.admin_as(Some(&dora), "POST", &account, Some(&funds_in));
    assert_eq!(response.status, 202, "{response:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let event = loop {
        let funded = audit_events_of(hub, "dora")
            .into_iter()
            .find(|event| event["action"] == "funds.in" && event["outcome"] == "COMMITTED");
        if let Some(event) = funded {
            break event;
        }
        assert!(Instant::now() < deadline, "dora's funds in never audited");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(event["role"], "finance", "{event:#}");
    assert_eq!(event["source"], "identity-provider", "{event:#}");
    assert_eq!(event["target"], support::PAYER, "{event:#}");
    let funded = |hub: &Hub| (hub.account_value(support::PAYER, "SETTLEMENT") - before).abs();
    let deadline = Instant::now() + Duration::from_secs(20);
    while funded(hub) != 250.0 {
        assert!(Instant::now() < deadline, "the funds in never applied");
        std::thread::sleep(Duration::from_millis(50));
    }

    scenario.hub.terminate();
    scenario.hub = start();
    let hub = &scenario.hub;
    assert_eq!(
        funded(hub),
        250.0,
        "the funds in, read back from PostgreSQL"
    );
    let kept = audit_events_of(hub, "dora");
    assert!(kept.contains(&event), "{event:#} not in {kept:#?}");
    let by_provider = hub
        .admin_expect("GET", "/audit-events?source=identity-provider", None, 200)
        .json();
    assert!(
        by_provider.as_array().unwrap().contains(&event),
        "filed under the identity provider after the restart: {by_provider:#}"
    );
    // Her token still passes: the restarted hub fetched the keys again.
    let again = hub.admin_as(Some(&dora), "GET", "/participants", None);
    assert_eq!(again.status, 200, "{again:?}");
}

#[test]
fn over_tls_the_providers_tokens_pass_and_refused_ones_are_401_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let pki = support::Pki::new("kasi test scheme CA");
    // The provider served over HTTPS too, its CA given with --oidc-ca.
    let provider_tls =
        support::Pki::server_config(&pki.issue("identity provider", &["127.0.0.1"], true), None);
    let provider = Provider::start_tls(Key::new("2026-11"), provider_tls);
    assert!(
        provider.issuer.starts_with("https://"),
        "{}",
        provider.issuer
    );
    let ca = dir.path().join("scheme-ca.pem");
    pki.write_ca(&ca);
    let (cert, key) = pki
        .issue("kasi hub", &["localhost"], true)
        .write(dir.path(), "hub");
    let (mut flags, operator) = trusting(&provider.issuer, dir.path());
    for (flag, file) in [
        ("--tls-cert", &cert),
        ("--tls-key", &key),
        ("--oidc-ca", &ca),
    ] {
        flags.extend([flag.to_string(), file.display().to_string()]);
    }
    let data = dir.path().join("data");
    let mut hub = started(Hub::serve_command(&data, &strs(&flags)), &data, &operator);
    hub.tls = Some(pki.client(None));
    // Plain HTTP does not reach the admin API (a TLS alert, no HTTP).
    let mut plain = std::net::TcpStream::connect(hub.admin).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    plain
        .write_all(b"GET /participants HTTP/1.1\r\nHost: kasi\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !answer.starts_with(b"HTTP/"),
        "the admin API answered plain HTTP: {}",
        String::from_utf8_lossy(&answer)
    );
    hub.setup();

    let issuer = &provider.issuer;
    let signer = &provider.state.key;
    let ops = signer.sign(&claims(issuer, "omar", &["hub-ops"]));
    let created = onboard_newfsp(&hub, &ops);
    assert_eq!(created.status, 201, "over HTTPS: {created:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !audit_events_of(&hub, "omar").iter().any(|event| {
        event["action"] == "participant.create"
            && event["role"] == "operator"
            && event["source"] == "identity-provider"
    }) {
        assert!(Instant::now() < deadline, "omar's onboarding never audited");
        std::thread::sleep(Duration::from_millis(50));
    }

    let refused = |token: &str, reason: &str| assert_refused(&hub, token, reason);
    let mut expired = claims(issuer, "omar", &["hub-ops"]);
    expired["exp"] = json!(now_s() - 600);
    refused(&signer.sign(&expired), "expired");
    let mut elsewhere = claims(issuer, "omar", &["hub-ops"]);
    elsewhere["aud"] = json!("another-api");
    refused(&signer.sign(&elsewhere), "wrong audience");
}
