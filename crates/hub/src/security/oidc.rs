//! OpenID Connect: the scheme's identity provider vouches for the people
//! who use the admin API.
//!
//! An access token is a JWT the provider signed. kasi accepts it as an
//! admin bearer token when, and only when:
//! - its header names a key of the provider's JWKS (by `kid`) and an
//!   asymmetric algorithm the key is for (never `none`, never HMAC: an
//!   HMAC key would be the client secret, which is not the provider's
//!   signature);
//! - the signature verifies (`jsonwebtoken`, on aws-lc-rs);
//! - `iss` is the configured issuer, exactly, `aud` names the configured
//!   audience, `exp` has not passed and `nbf` has, each within the clock
//!   skew (`--oidc-clock-skew`);
//! - the roles claim (`--oidc-roles-claim`, a dotted path such as
//!   `realm_access.roles`) holds a role kasi knows, directly or through
//!   `--oidc-role-map`.
//!
//! The keys come from the provider's discovery document
//! (`{issuer}/.well-known/openid-configuration`, whose `issuer` must be
//! the configured one) and its `jwks_uri`. They are fetched at start,
//! again when they are older than [`KEYS_MAX_AGE`], and again when a token
//! names a key kasi does not hold (the provider rotated), at most once per
//! [`UNKNOWN_KEY_REFETCH`] so that made-up `kid`s cannot make kasi hammer
//! the provider. A fetch that fails keeps the keys held (a provider that is
//! down does not sign anyone out); with none held, tokens are refused as
//! `keys unavailable` and the static tokens (`--admin-tokens`) remain the
//! way in, which is what they are for.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

/// Keys older than this are fetched again before the next token is
/// checked against them.
pub const KEYS_MAX_AGE: Duration = Duration::from_secs(15 * 60);
/// A token naming a key kasi does not hold fetches the JWKS again at most
/// this often.
pub const UNKNOWN_KEY_REFETCH: Duration = Duration::from_secs(10);
/// A discovery document or JWKS larger than this is refused.
const MAX_DOCUMENT_BYTES: usize = 256 * 1024;
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The algorithms a provider's access token may be signed with.
const ASYMMETRIC: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// What the operator configured (`--oidc-*`), validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcSettings {
    /// The issuer, exactly as the provider's tokens and discovery document
    /// name it (`https://idp.example/realms/scheme`).
    pub issuer: String,
    /// What a token's `aud` must contain (`--oidc-audience`; by default the
    /// client id).
    pub audience: String,
    /// kasi's client at the provider (the audience by default).
    pub client_id: String,
    /// Its secret (`--oidc-client-secret-file`), sent with HTTP Basic to
    /// the token endpoint; without one kasi is a public client, and PKCE
    /// alone binds the code to the browser that asked for it.
    pub client_secret: Option<String>,
    /// Where the provider sends the browser back after sign-in: the
    /// console's `/console/oidc/callback` as the provider has it
    /// registered (`--oidc-redirect-url`); without it, the admin address
    /// as the browser named it (its `Host`), which the provider accepts
    /// only if registered.
    pub redirect_url: Option<String>,
    /// The path of the claim holding the person's roles, split at dots.
    pub roles_claim: Vec<String>,
    /// The claim naming the person in audit events (`preferred_username`;
    /// `sub` when the token has not that claim).
    pub name_claim: String,
    /// The provider's role names to kasi's (`--oidc-role-map
    /// hub-ops=operator`); a role named as kasi names it needs no entry.
    pub role_map: Vec<(String, String)>,
    /// How far the provider's clock and kasi's may disagree.
    pub clock_skew: Duration,
    /// The CA bundle (PEM) that the provider's certificate chains to, if
    /// not one the system trusts.
    pub ca: Option<PathBuf>,
}

impl OidcSettings {
    /// Checks what flags gave; the error names the flag.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        issuer: &str,
        client_id: &str,
        audience: Option<&str>,
        client_secret: Option<String>,
        redirect_url: Option<&str>,
        roles_claim: &str,
        name_claim: &str,
        role_map: &[String],
        clock_skew: Duration,
        ca: Option<PathBuf>,
    ) -> Result<OidcSettings, String> {
        let parsed = http::Uri::try_from(issuer)
            .map_err(|error| format!("--oidc-issuer {issuer}: not a URL ({error})"))?;
        let loopback = matches!(parsed.host(), Some("127.0.0.1" | "localhost" | "[::1]"));
        match parsed.scheme_str() {
            Some("https") => {}
            Some("http") if loopback => {}
            _ => {
                return Err(format!(
                    "--oidc-issuer {issuer}: must be https:// (http:// only on loopback, for tests)"
                ))
            }
        }
        if let Some(redirect_url) =
            redirect_url.filter(|url| !url.starts_with("https://") && !url.starts_with("http://"))
        {
            return Err(format!(
                "--oidc-redirect-url {redirect_url}: must be the console's http(s):// URL ending in /console/oidc/callback"
            ));
        }
        if client_id.trim().is_empty() {
            return Err("--oidc-client-id: must not be empty".into());
        }
        if clock_skew > Duration::from_secs(300) {
            return Err(format!(
                "--oidc-clock-skew {}s: at most 300 s; a larger skew lets expired tokens in",
                clock_skew.as_secs()
            ));
        }
        let roles_claim: Vec<String> = roles_claim.split('.').map(str::to_string).collect();
        if roles_claim.iter().any(String::is_empty) {
            return Err(format!(
                "--oidc-roles-claim: '{}' has an empty part",
                roles_claim.join(".")
            ));
        }
        let mut map = Vec::new();
        for entry in role_map {
            let Some((theirs, ours)) = entry.split_once('=') else {
                return Err(format!(
                    "--oidc-role-map {entry}: expected PROVIDER_ROLE=KASI_ROLE"
                ));
            };
            map.push((theirs.trim().to_string(), ours.trim().to_string()));
        }
        Ok(OidcSettings {
            issuer: issuer.to_string(),
            audience: audience.unwrap_or(client_id).to_string(),
            client_id: client_id.to_string(),
            client_secret,
            redirect_url: redirect_url.map(str::to_string),
            roles_claim,
            name_claim: name_claim.to_string(),
            role_map: map,
            clock_skew,
            ca,
        })
    }

    /// The roles a claim value names, in kasi's words (unknown ones kept:
    /// the caller decides which it knows).
    fn map_role(&self, theirs: &str) -> String {
        self.role_map
            .iter()
            .find(|(provider, _)| provider == theirs)
            .map_or_else(|| theirs.to_string(), |(_, ours)| ours.clone())
    }
}

/// Why a token was not accepted: a counter's label and a log line's word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OidcRefusal {
    /// Not a JWT, or its header is not JSON.
    Malformed,
    /// `none`, HMAC, or an algorithm its key is not for.
    AlgorithmNotAllowed,
    /// No key of the provider's has that `kid`, even after fetching again.
    UnknownKey,
    /// kasi holds no keys: the provider could not be reached yet.
    KeysUnavailable,
    BadSignature,
    Expired,
    NotYetValid,
    WrongIssuer,
    WrongAudience,
    /// A required claim (`iss`, `aud`, `exp`) is missing.
    MissingClaim,
    /// The roles claim names no role kasi knows.
    NoRole,
    /// An ID token's `nonce` is not the one its sign-in sent.
    WrongNonce,
}

impl OidcRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            OidcRefusal::Malformed => "malformed",
            OidcRefusal::AlgorithmNotAllowed => "algorithm not allowed",
            OidcRefusal::UnknownKey => "unknown key",
            OidcRefusal::KeysUnavailable => "keys unavailable",
            OidcRefusal::BadSignature => "bad signature",
            OidcRefusal::Expired => "expired",
            OidcRefusal::NotYetValid => "not yet valid",
            OidcRefusal::WrongIssuer => "wrong issuer",
            OidcRefusal::WrongAudience => "wrong audience",
            OidcRefusal::MissingClaim => "missing claim",
            OidcRefusal::NoRole => "no kasi role",
            OidcRefusal::WrongNonce => "wrong nonce",
        }
    }

    fn of(error: &jsonwebtoken::errors::Error) -> OidcRefusal {
        use jsonwebtoken::errors::ErrorKind;
        match error.kind() {
            ErrorKind::InvalidSignature => OidcRefusal::BadSignature,
            ErrorKind::ExpiredSignature => OidcRefusal::Expired,
            ErrorKind::ImmatureSignature => OidcRefusal::NotYetValid,
            ErrorKind::InvalidIssuer => OidcRefusal::WrongIssuer,
            ErrorKind::InvalidAudience => OidcRefusal::WrongAudience,
            ErrorKind::MissingRequiredClaim(_) => OidcRefusal::MissingClaim,
            ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
                OidcRefusal::AlgorithmNotAllowed
            }
            _ => OidcRefusal::Malformed,
        }
    }
}

/// Who a token says the caller is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcIdentity {
    /// The name claim's value (or `sub`).
    pub name: String,
    /// `sub`: the provider's stable id of the person.
    pub subject: String,
    /// The roles claim's values, mapped to kasi's names (unknown ones
    /// included; the caller picks those it knows).
    pub roles: Vec<String>,
}

/// Where the provider says things are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    pub authorization: String,
    pub token: String,
    pub jwks: String,
    pub end_session: Option<String>,
}

struct Key {
    decoding: DecodingKey,
    /// The JWK's `alg`, when it names one: a token must use exactly it.
    algorithm: Option<Algorithm>,
}

#[derive(Default)]
struct Keys {
    by_id: HashMap<String, Arc<Key>>,
    fetched_at: Option<Instant>,
    /// The last fetch begun, whether it worked or not.
    attempted_at: Option<Instant>,
    endpoints: Option<Endpoints>,
}

impl Keys {
    fn refusal_for_unknown(&self) -> OidcRefusal {
        if self.by_id.is_empty() {
            OidcRefusal::KeysUnavailable
        } else {
            OidcRefusal::UnknownKey
        }
    }
}

type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The provider's keys and the checks (see the module's documentation).
pub struct Oidc {
    settings: OidcSettings,
    client: HttpClient,
    keys: tokio::sync::RwLock<Keys>,
    /// One fetch at a time: a burst of tokens with a new `kid` fetches once.
    fetching: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.settings.issuer)
            .finish_non_exhaustive()
    }
}

impl Oidc {
    /// Ready to check tokens; the keys are fetched by [`Oidc::refresh`]
    /// (at start) or by the first token.
    pub fn new(settings: OidcSettings) -> Result<Oidc, String> {
        let tls = crate::tls::client_config(settings.ca.as_deref(), None)?;
        let connector = crate::tls::https_connector(tls, FETCH_TIMEOUT);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .build(connector);
        Ok(Oidc {
            settings,
            client,
            keys: tokio::sync::RwLock::new(Keys::default()),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    pub fn settings(&self) -> &OidcSettings {
        &self.settings
    }

    /// The provider's endpoints, once discovery has answered.
    /// A provider that has not answered is asked again at most once per
    /// [`UNKNOWN_KEY_REFETCH`]: sign-ins begun by anyone must not make kasi
    /// hammer it.
    pub async fn endpoints(&self) -> Option<Endpoints> {
        let attempted = {
            let keys = self.keys.read().await;
            if keys.endpoints.is_some() {
                return keys.endpoints.clone();
            }
            if keys
                .attempted_at
                .is_some_and(|at| at.elapsed() < UNKNOWN_KEY_REFETCH)
            {
                return None;
            }
            keys.attempted_at
        };
        let _one = self.fetching.lock().await;
        if self.keys.read().await.attempted_at == attempted {
            let _ = self.refresh_while_fetching().await;
        }
        self.keys.read().await.endpoints.clone()
    }

    /// Fetches the discovery document and the JWKS; on failure the keys
    /// held stay. Returns how many keys are now held.
    pub async fn refresh(&self) -> Result<usize, String> {
        let _one = self.fetching.lock().await;
        self.refresh_while_fetching().await
    }

    async fn refresh_while_fetching(&self) -> Result<usize, String> {
        self.keys.write().await.attempted_at = Some(Instant::now());
        let fetched = self.fetch().await;
        let mut keys = self.keys.write().await;
        match fetched {
            Ok((endpoints, by_id)) => {
                keys.by_id = by_id;
                keys.endpoints = Some(endpoints);
                keys.fetched_at = Some(Instant::now());
                Ok(keys.by_id.len())
            }
            Err(error) => {
                tracing::warn!(
                    issuer = %self.settings.issuer,
                    %error,
                    keys_held = keys.by_id.len(),
                    "could not fetch the identity provider's keys; keeping those held"
                );
                Err(error)
            }
        }
    }

    async fn fetch(&self) -> Result<(Endpoints, HashMap<String, Arc<Key>>), String> {
        let issuer = &self.settings.issuer;
        let discovery_url = format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        );
        let discovery = self.get_json(&discovery_url).await?;
        let text = |field: &str| -> Result<String, String> {
            discovery
                .get(field)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("{discovery_url}: no '{field}'"))
        };
        let said = text("issuer")?;
        if &said != issuer {
            return Err(format!(
                "{discovery_url}: names the issuer '{said}', not '{issuer}' (--oidc-issuer must be exactly the provider's)"
            ));
        }
        let endpoints = Endpoints {
            authorization: text("authorization_endpoint")?,
            token: text("token_endpoint")?,
            jwks: text("jwks_uri")?,
            end_session: text("end_session_endpoint").ok(),
        };
        let set: JwkSet = serde_json::from_value(self.get_json(&endpoints.jwks).await?)
            .map_err(|error| format!("{}: not a JWKS ({error})", endpoints.jwks))?;
        let by_id = keys_of(&set);
        if by_id.is_empty() {
            return Err(format!("{}: no signing key kasi can use", endpoints.jwks));
        }
        Ok((endpoints, by_id))
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let request = http::Request::get(url)
            .header(http::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::new()))
            .map_err(|error| format!("{url}: {error}"))?;
        self.send_for_json(url, request).await
    }

    async fn send_for_json(
        &self,
        url: &str,
        request: http::Request<Full<Bytes>>,
    ) -> Result<Value, String> {
        let response = tokio::time::timeout(FETCH_TIMEOUT, self.client.request(request))
            .await
            .map_err(|_| format!("{url}: no answer in {FETCH_TIMEOUT:?}"))?
            .map_err(|error| format!("{url}: {error}"))?;
        let status = response.status();
        let body = tokio::time::timeout(
            FETCH_TIMEOUT,
            Limited::new(response.into_body(), MAX_DOCUMENT_BYTES).collect(),
        )
        .await
        .map_err(|_| format!("{url}: body not read in {FETCH_TIMEOUT:?}"))?
        .map_err(|error| format!("{url}: {error}"))?
        .to_bytes();
        if !status.is_success() {
            return Err(format!(
                "{url}: HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ));
        }
        serde_json::from_slice(&body).map_err(|error| format!("{url}: not JSON ({error})"))
    }

    /// Where to send a browser to sign in (authorization code flow with
    /// PKCE, S256): `state` comes back with the code, `nonce` in the ID
    /// token, `verifier` stays with kasi until [`Oidc::exchange_code`].
    pub fn authorization_url(&self, endpoints: &Endpoints, sign_in: &SignInStart) -> String {
        let challenge = pkce_challenge(&sign_in.verifier);
        let query = serde_urlencoded::to_string([
            ("response_type", "code"),
            ("client_id", self.settings.client_id.as_str()),
            ("redirect_uri", sign_in.redirect_uri.as_str()),
            ("scope", "openid profile"),
            ("state", sign_in.state.as_str()),
            ("nonce", sign_in.nonce.as_str()),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ])
        .expect("strings encode");
        let separator = if endpoints.authorization.contains('?') {
            '&'
        } else {
            '?'
        };
        format!("{}{separator}{query}", endpoints.authorization)
    }

    /// Trades the code the browser brought back for the person's tokens,
    /// checks the ID token (signature, issuer, audience: the client id,
    /// the sign-in's nonce) and the access token (as the admin API would),
    /// and returns who the access token names, with the token itself,
    /// which the console then sends on the person's behalf.
    pub async fn exchange_code(
        &self,
        code: &str,
        sign_in: &SignInStart,
    ) -> Result<(OidcIdentity, String), String> {
        let endpoints = self
            .endpoints()
            .await
            .ok_or("the identity provider has not answered discovery")?;
        let form = serde_urlencoded::to_string([
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", sign_in.redirect_uri.as_str()),
            ("client_id", self.settings.client_id.as_str()),
            ("code_verifier", sign_in.verifier.as_str()),
        ])
        .expect("strings encode");
        let mut request = http::Request::post(&endpoints.token)
            .header(http::header::ACCEPT, "application/json")
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            );
        if let Some(secret) = &self.settings.client_secret {
            use base64::Engine as _;
            // RFC 6749 2.3.1: each part form-encoded, then Basic.
            let user = serde_urlencoded::to_string([("", self.settings.client_id.as_str())])
                .expect("strings encode");
            let password =
                serde_urlencoded::to_string([("", secret.as_str())]).expect("strings encode");
            let basic = base64::engine::general_purpose::STANDARD.encode(format!(
                "{}:{}",
                &user[1..],
                &password[1..]
            ));
            request = request.header(http::header::AUTHORIZATION, format!("Basic {basic}"));
        }
        let request = request
            .body(Full::new(Bytes::from(form)))
            .map_err(|error| error.to_string())?;
        let tokens = self.send_for_json(&endpoints.token, request).await?;
        let text = |field: &str| {
            tokens
                .get(field)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("the token endpoint's answer has no {field}"))
        };
        let (id_token, access_token) = (text("id_token")?, text("access_token")?);
        self.verify_id_token(&id_token, &sign_in.nonce)
            .await
            .map_err(|refused| format!("the ID token was refused: {}", refused.as_str()))?;
        let identity = self
            .verify(&access_token)
            .await
            .map_err(|refused| format!("the access token was refused: {}", refused.as_str()))?;
        Ok((identity, access_token))
    }

    async fn verify_id_token(&self, token: &str, nonce: &str) -> Result<(), OidcRefusal> {
        let claims = self.checked_claims(token, &self.settings.client_id).await?;
        match claims.get("nonce").and_then(Value::as_str) {
            Some(said) if said == nonce => Ok(()),
            _ => Err(OidcRefusal::WrongNonce),
        }
    }

    /// The key a token names. The JWKS is fetched again when the keys
    /// held are older than [`KEYS_MAX_AGE`] or do not include `kid`, but
    /// never sooner than [`UNKNOWN_KEY_REFETCH`] after the last attempt,
    /// so that neither made-up `kid`s nor a provider that is down costs
    /// each request a fetch; stale keys serve while a fetch fails.
    async fn key(&self, kid: &str) -> Result<Arc<Key>, OidcRefusal> {
        let attempted = {
            let keys = self.keys.read().await;
            let now = Instant::now();
            let fresh = keys
                .fetched_at
                .is_some_and(|at| now.duration_since(at) < KEYS_MAX_AGE);
            let recently_attempted = keys
                .attempted_at
                .is_some_and(|at| now.duration_since(at) < UNKNOWN_KEY_REFETCH);
            match keys.by_id.get(kid) {
                Some(key) if fresh || recently_attempted => return Ok(key.clone()),
                None if recently_attempted => return Err(keys.refusal_for_unknown()),
                _ => keys.attempted_at,
            }
        };
        let _one = self.fetching.lock().await;
        // A fetch that finished while this task waited answers it too.
        if self.keys.read().await.attempted_at == attempted {
            let _ = self.refresh_while_fetching().await;
        }
        let keys = self.keys.read().await;
        keys.by_id
            .get(kid)
            .cloned()
            .ok_or_else(|| keys.refusal_for_unknown())
    }

    /// Checks an access token (see the module's documentation).
    pub async fn verify(&self, token: &str) -> Result<OidcIdentity, OidcRefusal> {
        let claims = self.checked_claims(token, &self.settings.audience).await?;
        identity_of(&self.settings, &claims)
    }

    /// A token's claims once its signature, issuer, audience, expiry and
    /// not-before have passed.
    async fn checked_claims(&self, token: &str, audience: &str) -> Result<Value, OidcRefusal> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| OidcRefusal::Malformed)?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(OidcRefusal::AlgorithmNotAllowed);
        }
        let key = self.key(header.kid.as_deref().unwrap_or("")).await?;
        if key
            .algorithm
            .is_some_and(|algorithm| algorithm != header.alg)
        {
            return Err(OidcRefusal::AlgorithmNotAllowed);
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = self.settings.clock_skew.as_secs();
        Ok(
            jsonwebtoken::decode::<Value>(token, &key.decoding, &validation)
                .map_err(|error| OidcRefusal::of(&error))?
                .claims,
        )
    }
}

/// What one browser's sign-in keeps until the provider sends it back.
#[derive(Clone, Debug)]
pub struct SignInStart {
    /// Comes back with the code: which sign-in this is (and, kept in a
    /// cookie too, that the same browser began it).
    pub state: String,
    /// Must come back inside the ID token.
    pub nonce: String,
    /// PKCE: only its SHA-256 goes to the provider; the code is worth
    /// nothing without it.
    pub verifier: String,
    /// The callback URL the provider was given (the token request must
    /// name the same).
    pub redirect_uri: String,
}

/// PKCE's S256 challenge of a verifier (RFC 7636 4.2).
pub fn pkce_challenge(verifier: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()))
}

/// The keys of a JWKS kasi can verify with, by `kid` (a key without one
/// under "", usable only by tokens without one).
fn keys_of(set: &JwkSet) -> HashMap<String, Arc<Key>> {
    let mut by_id = HashMap::new();
    for jwk in &set.keys {
        if matches!(
            jwk.common.public_key_use,
            Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
        ) {
            continue;
        }
        let Some(key) = key_of(jwk) else { continue };
        by_id.insert(jwk.common.key_id.clone().unwrap_or_default(), Arc::new(key));
    }
    by_id
}

fn key_of(jwk: &Jwk) -> Option<Key> {
    let algorithm = match jwk.common.key_algorithm {
        None => None,
        Some(named) => {
            let algorithm: Algorithm = format!("{named:?}").parse().ok()?;
            if !ASYMMETRIC.contains(&algorithm) {
                return None;
            }
            Some(algorithm)
        }
    };
    if matches!(
        jwk.algorithm,
        jsonwebtoken::jwk::AlgorithmParameters::OctetKey(_)
    ) {
        return None;
    }
    let decoding = DecodingKey::from_jwk(jwk).ok()?;
    Some(Key {
        decoding,
        algorithm,
    })
}

/// The identity in verified claims.
fn identity_of(settings: &OidcSettings, claims: &Value) -> Result<OidcIdentity, OidcRefusal> {
    let subject = claims
        .get("sub")
        .and_then(Value::as_str)
        .ok_or(OidcRefusal::MissingClaim)?
        .to_string();
    let name = claims
        .get(&settings.name_claim)
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .map_or_else(|| subject.clone(), str::to_string);
    let mut at = claims;
    for part in &settings.roles_claim {
        at = at.get(part).ok_or(OidcRefusal::NoRole)?;
    }
    let roles: Vec<String> = match at {
        Value::Array(values) => values
            .iter()
            .filter_map(Value::as_str)
            .map(|role| settings.map_role(role))
            .collect(),
        // OAuth's `scope` style: one string, space-separated.
        Value::String(text) => text
            .split_whitespace()
            .map(|role| settings.map_role(role))
            .collect(),
        _ => Vec::new(),
    };
    if roles.is_empty() {
        return Err(OidcRefusal::NoRole);
    }
    Ok(OidcIdentity {
        name,
        subject,
        roles,
    })
}

#[cfg(test)]
mod tests;
