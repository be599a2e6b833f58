//! Who may use the admin API, and as what.
//!
//! Roles (`operator`, `finance`, `viewer`, `auditor`, `dfsp:<name>`) and
//! the routes each may use are [`crate::access`]'s; this module says who
//! a caller is, and its gate applies that table. Credentials come from one
//! file (`--admin-tokens`), one line per credential, `#` starting a
//! comment:
//!
//! ```text
//! # name   role           credential
//! alice    operator       3f0a…(64 hex: sha256 of the bearer token)
//! grafana  viewer         9b1c…
//! carol    finance        77d2…
//! erin     auditor        01ab…
//! payer    dfsp:payerfsp  c3e4…
//! ops-ci   operator       cert:sha256:5e88…(64 hex: the client certificate's sha256)
//! ```
//!
//! A bearer token is checked by hashing it (SHA-256) and comparing the hash
//! with every line in constant time: the file holds hashes, never tokens,
//! which is safe because tokens are 256-bit random strings
//! (`kasi admin-token` makes them). A `cert:` line names a client
//! certificate, by fingerprint, presented on an admin address that asks
//! for one (`--admin-client-ca`).
//!
//! With no file, the admin API is open only on a loopback address (as
//! before authentication existed); elsewhere kasi refuses to start unless
//! told `--admin-insecure`. `/health` is always open.
//!
//! Open on loopback, the address is reachable by every web page the
//! operator's browser shows: a page can post a form to it (a "simple"
//! cross-site request needs no CORS permission), and a page whose DNS name
//! is re-pointed at 127.0.0.1 (DNS rebinding) can read and write it as its
//! own origin. [`cross_site`] refuses both: writes must be JSON (a type no
//! page can send cross-site without a preflight kasi never grants), an
//! `Origin` must be the admin address's own, and `Host` must name loopback.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use ledger::ErrorCode;
use sha2::{Digest, Sha256};

use crate::access::Decision;
use crate::HubError;

pub use crate::access::Role;

/// Where a caller's credential came from: audit events and logs say it, so
/// a break-glass token is told apart from a person's sign-in (and, later,
/// an identity provider's token from the tokens file's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A bearer token listed (by its hash) in `--admin-tokens`.
    TokensFile,
    /// A client certificate pinned by a `cert:` line of `--admin-tokens`.
    Certificate,
    /// No credential needed: the admin address is open (loopback without
    /// a tokens file, or `--admin-insecure`).
    Open,
    /// The hub itself (its own clockwork, e.g. a scheduled window close).
    Hub,
    /// An access token of the scheme's identity provider (OpenID Connect).
    Provider,
}

/// The role a person with these provider roles acts in (see
/// [`AdminAuth::identify_by_provider`]).
fn role_among(names: &[String]) -> Option<Role> {
    let roles: Vec<Role> = names
        .iter()
        .filter_map(|name| Role::parse(name).ok())
        .collect();
    for wanted in [Role::Operator, Role::Finance, Role::Viewer, Role::Auditor] {
        if roles.contains(&wanted) {
            return Some(wanted);
        }
    }
    match roles[..] {
        [Role::Dfsp(dfsp)] => Some(Role::Dfsp(dfsp)),
        // Two DFSPs' views at once: which one is not for kasi to guess.
        _ => None,
    }
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::TokensFile => "tokens-file",
            Source::Certificate => "certificate",
            Source::Open => "open",
            Source::Hub => "hub",
            Source::Provider => "identity-provider",
        }
    }
}

/// Who made an admin request: what audit events name as the actor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: Role,
    pub source: Source,
}

tokio::task_local! {
    /// The caller of the admin request this task serves, set by the
    /// authentication layer, so handlers tag their changes without taking
    /// it as an argument each.
    pub static CALLER: Caller;
}

/// The caller of the current admin request; outside one (the hub's own
/// clockwork, e.g. a scheduled window close), the hub itself.
pub fn current_caller() -> Caller {
    CALLER.try_with(Caller::clone).unwrap_or(Caller {
        name: "kasi".to_string(),
        role: Role::Operator,
        source: Source::Hub,
    })
}

#[derive(Clone, Debug)]
enum Credential {
    /// SHA-256 of a bearer token.
    TokenHash([u8; 32]),
    /// SHA-256 of a client certificate (DER).
    Certificate([u8; 32]),
}

#[derive(Clone, Debug)]
struct Entry {
    name: String,
    role: Role,
    credential: Credential,
}

/// Parses 64 hex digits.
pub fn parse_sha256_hex(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 {
        return None;
    }
    let mut bytes = [0u8; 32];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(bytes)
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a token, hex: what the tokens file holds.
pub fn token_hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Equal without a timing difference that depends on where they differ.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Read through a volatile-like barrier so the fold is not short-cut.
    std::hint::black_box(difference) == 0
}

/// The admin API's access rule, decided at start; the credentials are
/// re-read from their file on [`AdminAuth::reload`] (SIGHUP).
#[derive(Debug)]
pub struct AdminAuth {
    entries: std::sync::RwLock<Vec<Entry>>,
    /// No credentials needed: every request is this caller (an operator).
    open_as: Option<String>,
    /// The tokens file the credentials came from, if any.
    file: Option<std::path::PathBuf>,
    /// The scheme's identity provider, whose access tokens name people
    /// (`--oidc-issuer`; see [`crate::oidc`]).
    oidc: Option<Arc<crate::oidc::Oidc>>,
}

impl AdminAuth {
    /// Everyone is an operator named `actor` (a loopback address without a
    /// tokens file, or `--admin-insecure`).
    pub fn open(actor: &str) -> AdminAuth {
        AdminAuth {
            entries: std::sync::RwLock::new(Vec::new()),
            open_as: Some(actor.to_string()),
            file: None,
            oidc: None,
        }
    }

    /// Only the identity provider's tokens (no tokens file).
    pub fn provider_only(oidc: Arc<crate::oidc::Oidc>) -> AdminAuth {
        AdminAuth {
            entries: std::sync::RwLock::new(Vec::new()),
            open_as: None,
            file: None,
            oidc: Some(oidc),
        }
    }

    /// Also accept the identity provider's access tokens.
    pub fn with_oidc(mut self, oidc: Arc<crate::oidc::Oidc>) -> AdminAuth {
        self.oidc = Some(oidc);
        self
    }

    pub fn oidc(&self) -> Option<&Arc<crate::oidc::Oidc>> {
        self.oidc.as_ref()
    }

    /// Who an identity provider's access token names, as kasi's caller:
    /// the most privileged kasi role among the token's (operator, finance,
    /// viewer, auditor), a DFSP's own view only when it has none of those
    /// and exactly one DFSP. `None` when no provider is configured or the
    /// bearer is not a JWT (a tokens-file token is not: it has no dots).
    pub async fn identify_by_provider(
        &self,
        bearer: &str,
    ) -> Option<Result<Caller, crate::oidc::OidcRefusal>> {
        let oidc = self.oidc.as_ref()?;
        if bearer.split('.').count() != 3 {
            return None;
        }
        Some(oidc.verify(bearer).await.and_then(|identity| {
            self.caller_of_identity(identity)
                .ok_or(crate::oidc::OidcRefusal::NoRole)
        }))
    }

    /// The caller a verified provider identity is (see
    /// [`AdminAuth::identify_by_provider`]); `None` without a kasi role.
    pub fn caller_of_identity(&self, identity: crate::oidc::OidcIdentity) -> Option<Caller> {
        Some(Caller {
            role: role_among(&identity.roles)?,
            name: identity.name,
            source: Source::Provider,
        })
    }

    /// Reads a tokens file (see the module's documentation).
    pub fn parse(text: &str) -> Result<AdminAuth, String> {
        let mut entries = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, role, credential] = fields[..] else {
                return Err(format!(
                    "line {}: expected `name role sha256-hex` or `name role cert:sha256:hex`, \
                     the role one of {}",
                    number + 1,
                    crate::access::ROLES_ALLOWED
                ));
            };
            let role = Role::parse(role).map_err(|why| format!("line {}: {why}", number + 1))?;
            let credential = match credential.strip_prefix("cert:") {
                Some(fingerprint) => Credential::Certificate(
                    fingerprint
                        .strip_prefix("sha256:")
                        .and_then(parse_sha256_hex)
                        .ok_or_else(|| {
                            format!(
                                "line {}: a certificate is `cert:sha256:` and 64 hex digits",
                                number + 1
                            )
                        })?,
                ),
                None => Credential::TokenHash(parse_sha256_hex(credential).ok_or_else(|| {
                    format!(
                        "line {}: a token is given by its sha256, 64 hex digits (not the token itself)",
                        number + 1
                    )
                })?),
            };
            entries.push(Entry {
                name: name.to_string(),
                role,
                credential,
            });
        }
        if entries.is_empty() {
            return Err("no credentials in the file".to_string());
        }
        Ok(AdminAuth {
            entries: std::sync::RwLock::new(entries),
            open_as: None,
            file: None,
            oidc: None,
        })
    }

    pub fn load(path: &Path) -> Result<AdminAuth, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        let mut auth =
            AdminAuth::parse(&text).map_err(|error| format!("{}: {error}", path.display()))?;
        auth.file = Some(path.to_path_buf());
        Ok(auth)
    }

    /// The tokens file, if the credentials came from one.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Re-reads the tokens file (to add or revoke a credential without a
    /// restart); on any error the credentials in force stay. How many
    /// credentials are in force after it.
    pub fn reload(&self) -> Result<usize, String> {
        let Some(path) = &self.file else {
            return Ok(0);
        };
        let fresh = AdminAuth::load(path)?;
        let entries = fresh
            .entries
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        let count = entries.len();
        *self.entries.write().unwrap_or_else(|e| e.into_inner()) = entries;
        Ok(count)
    }

    fn entries(&self) -> std::sync::RwLockReadGuard<'_, Vec<Entry>> {
        self.entries.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_open(&self) -> bool {
        self.open_as.is_some()
    }

    /// Open because the address is loopback (no `--admin-tokens`): the
    /// only case where a browser on the operator's machine is the
    /// credential, so where [`cross_site`] applies.
    pub fn is_open_on_loopback(&self) -> bool {
        self.open_as.as_deref() == Some("loopback")
    }

    pub fn has_certificates(&self) -> bool {
        self.entries()
            .iter()
            .any(|e| matches!(e.credential, Credential::Certificate(_)))
    }

    /// Who presents this bearer token or certificate fingerprint (hex), if
    /// anyone. Every line is compared, so the time taken does not say
    /// which line (or how much of a hash) matched.
    pub fn identify(&self, bearer: Option<&str>, certificate: Option<&str>) -> Option<Caller> {
        if let Some(actor) = &self.open_as {
            return Some(Caller {
                name: actor.clone(),
                role: Role::Operator,
                source: Source::Open,
            });
        }
        let token: Option<[u8; 32]> = bearer.map(|t| Sha256::digest(t.as_bytes()).into());
        let certificate = certificate.and_then(parse_sha256_hex);
        let mut found = None;
        for entry in self.entries().iter() {
            let matched = match (&entry.credential, &token, &certificate) {
                (Credential::TokenHash(hash), Some(token), _) => same(hash, token),
                (Credential::Certificate(hash), _, Some(cert)) => same(hash, cert),
                _ => false,
            };
            if matched && found.is_none() {
                found = Some(Caller {
                    name: entry.name.clone(),
                    role: entry.role,
                    source: match entry.credential {
                        Credential::TokenHash(_) => Source::TokensFile,
                        Credential::Certificate(_) => Source::Certificate,
                    },
                });
            }
        }
        found
    }
}

/// How the admin address is protected, decided from where it listens and
/// what was configured: credentials always win; without any, only a
/// loopback address is served open, unless the operator insists.
pub fn decide(
    listen: SocketAddr,
    credentials: Option<AdminAuth>,
    insecure: bool,
) -> Result<AdminAuth, String> {
    match credentials {
        Some(auth) => Ok(auth),
        None if listen.ip().is_loopback() => Ok(AdminAuth::open("loopback")),
        None if insecure => Ok(AdminAuth::open("anonymous")),
        None => Err(format!(
            "the admin address {listen} is not loopback and no admin credentials are configured: \
             give --admin-tokens FILE (see `kasi admin-token`), or --admin-insecure to serve it \
             without authentication"
        )),
    }
}

/// A `Host` or `Origin` authority: its host (lowercase, IPv6 without
/// brackets) and its port, if given.
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        Some(port) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            Some(port.parse().ok()?)
        }
        Some(_) => return None,
        None => None,
    };
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

/// `localhost` or a loopback literal (127.0.0.0/8, ::1, and 127.x as an
/// IPv4-mapped IPv6 address): names no other site can be reached by.
fn is_loopback_host(host: &str) -> bool {
    if host == "localhost" {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|ip| ip.is_loopback())
        }
        Err(_) => false,
    }
}

fn header_text(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers
        .get(name)
        .map(|value| value.to_str().unwrap_or("\u{fffd}").trim())
}

/// Whether an open loopback admin address must refuse this request as
/// cross-site or rebound; `Err` says why, in words for the answer.
///
/// - `Host`, when present (a request made in-process, by the console, has
///   none), must be `localhost` or a loopback literal, with any port (a
///   tunnel or port mapping may front the address): a rebound DNS name is
///   refused, on reads too, since rebinding lets a page read the answer.
/// - `Origin`, when present, must be `http(s)://` a loopback host with the
///   port the request was sent to (`Host`'s): the admin address's own
///   origin. `null` and every other site are refused.
/// - On the API (`api_route`: not the console, whose forms post
///   form-encoded to its own routes and carry a CSRF token), a write
///   (POST, PUT, PATCH, DELETE) with a body or a `Content-Type` must be
///   `application/json`: the form encodings and `text/plain` are what a
///   page of another site can send without asking.
pub fn cross_site(method: &Method, headers: &HeaderMap, api_route: bool) -> Result<(), String> {
    let host = match header_text(headers, header::HOST) {
        None => None,
        Some(text) => match authority(text) {
            Some((name, port)) if is_loopback_host(&name) => Some((name, port)),
            _ => {
                return Err(format!(
                    "Host '{text}' is not this admin address, localhost or a loopback address \
                     (a DNS name re-pointed at the hub is refused)"
                ))
            }
        },
    };
    if let Some(origin) = header_text(headers, header::ORIGIN) {
        let own = origin
            .split_once("://")
            .and_then(|(scheme, rest)| {
                let default = match scheme.to_ascii_lowercase().as_str() {
                    "http" => 80,
                    "https" => 443,
                    _ => return None,
                };
                let (name, port) = authority(rest)?;
                Some((name, port.unwrap_or(default), default))
            })
            .zip(host.as_ref())
            .is_some_and(|((name, port, default), (_, host_port))| {
                is_loopback_host(&name) && port == host_port.unwrap_or(default)
            });
        if !own {
            return Err(format!(
                "Origin '{origin}' is not this admin address's own: a page of another site may not \
                 use the admin API"
            ));
        }
    }
    let write = matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    if api_route && write {
        let has_body = headers.contains_key(header::TRANSFER_ENCODING)
            || header_text(headers, header::CONTENT_LENGTH).is_some_and(|length| length != "0");
        let content_type = header_text(headers, header::CONTENT_TYPE);
        let json = content_type.is_some_and(|value| {
            value
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        });
        if (has_body || content_type.is_some()) && !json {
            return Err(format!(
                "a write to the admin API must be application/json, not '{}'",
                content_type.unwrap_or("no Content-Type")
            ));
        }
    }
    Ok(())
}

/// The admin API's refusal: `status` with central-ledger's error body.
pub fn refusal(status: StatusCode, description: &str) -> Response {
    let mut response = HubError::new(
        ErrorCode::GENERIC_CLIENT_ERROR,
        format!("Generic client error - {description}"),
    )
    .into_response();
    *response.status_mut() = status;
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"kasi-admin\""),
        );
    }
    response
}

/// What the gate refused, for the hub to count and audit (see
/// [`authenticate`]'s `on_refusal`).
#[derive(Debug)]
pub struct GateRefusal<'a> {
    /// 401 (no valid credential) or 403 (the role may not).
    pub status: StatusCode,
    /// Who was refused, for a 403.
    pub caller: Option<&'a Caller>,
    pub method: &'a Method,
    pub path: &'a str,
    /// The peer's address; `None` in-process (the console).
    pub remote: Option<IpAddr>,
    /// A bearer token or client certificate was presented (and did not
    /// match, for a 401).
    pub with_credential: bool,
    /// Why a 403: what [`crate::access::decide`] said.
    pub reason: Option<crate::access::Refusal>,
    /// Why the identity provider's token was not accepted, for a 401.
    pub provider_refusal: Option<crate::oidc::OidcRefusal>,
}

/// Told of every refusal of the gate; it must not block (the hub counts,
/// and hands audit events to a task).
pub type OnRefusal = Arc<dyn Fn(&GateRefusal<'_>) + Send + Sync>;

tokio::task_local! {
    /// Set by whoever already counted and audited the refusal of the admin
    /// request this task serves (the hub's audited changes), so that the
    /// gate does not count it a second time as an invalid request.
    pub static REFUSAL_NOTED: std::cell::Cell<bool>;
}

/// Says that the current admin request's refusal has been counted and
/// audited.
pub fn note_refusal_recorded() {
    let _ = REFUSAL_NOTED.try_with(|noted| noted.set(true));
}

/// What the gate saw of a write the API refused, after it ran (a body it
/// could not read, an unknown participant): for the hub to count and audit
/// unless the handler did.
#[derive(Debug)]
pub struct RefusedWrite<'a> {
    pub caller: &'a Caller,
    pub method: &'a Method,
    pub path: &'a str,
    pub status: StatusCode,
    /// The answer's body (central-ledger's error shape).
    pub body: &'a [u8],
}

/// Told of every write refused by a handler that did not note it itself.
pub type OnRefusedWrite = Arc<dyn Fn(&RefusedWrite<'_>) + Send + Sync>;

/// A DFSP's own (its accounts' ids), for cutting settlement answers to its
/// share; the hub reads it from the ledger.
pub type OwnOf = Arc<
    dyn Fn(
            ledger::FspName,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = crate::access::Own> + Send>>
        + Send
        + Sync,
>;

/// Who the gate tells, and what it asks, besides the credentials.
#[derive(Clone, Default)]
pub struct GateHooks {
    pub on_refusal: Option<OnRefusal>,
    pub on_refused_write: Option<OnRefusedWrite>,
    /// Without it, a DFSP's own accounts are unknown: settlement answers
    /// cut to its share are empty.
    pub own_of: Option<OwnOf>,
}

/// Largest refusal body read back for its code.
const REFUSAL_BODY_MAX: usize = 64 * 1024;

/// The admin API's gate with no one to tell of refusals (tests).
pub async fn authenticate(
    auth: Arc<AdminAuth>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    authenticate_reporting(auth, GateHooks::default(), request, next).await
}

/// The admin API's gate: 401 without valid credentials, 403 for a route
/// the caller's role may not use ([`crate::access`]'s table), each told
/// to `on_refusal`; otherwise the request runs with its [`Caller`] set, a
/// DFSP-scoped caller's answer is cut to its own DFSP's share
/// ([`crate::access::own_only`]), and a write it refuses (4xx) that no
/// handler noted ([`note_refusal_recorded`]) is told to
/// `on_refused_write`.
///
/// It must be a layer of the routes it guards (`Router::layer`), so that
/// routing has run and the matched path pattern is known.
pub async fn authenticate_reporting(
    auth: Arc<AdminAuth>,
    hooks: GateHooks,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let GateHooks {
        on_refusal,
        on_refused_write,
        own_of,
    } = hooks;
    if matches!(
        request.uri().path(),
        "/health" | "/health/live" | "/health/ready"
    ) {
        return next.run(request).await;
    }
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, token) = value.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_string())
        });
    let certificate = request
        .extensions()
        .get::<crate::tls::Connection>()
        .and_then(|connection| connection.certificate.as_ref())
        .map(|identity| identity.fingerprint.clone());
    let remote = request
        .extensions()
        .get::<crate::tls::Connection>()
        .map(|connection| connection.peer.ip());
    // Each refusal is told to the hub, which counts it and writes a
    // rate-limited warning and a coalesced audit event: a line per attempt
    // here would let anyone flood the log.
    let mut provider_refusal = None;
    let mut caller = auth.identify(bearer.as_deref(), certificate.as_deref());
    if let (None, Some(bearer)) = (&caller, &bearer) {
        match auth.identify_by_provider(bearer).await {
            Some(Ok(by_provider)) => caller = Some(by_provider),
            Some(Err(refusal)) => provider_refusal = Some(refusal),
            None => {}
        }
    }
    let (decision, request) = match &caller {
        Some(caller) => {
            let (decision, request) = decide_for(caller, request).await;
            (Some(decision), request)
        }
        None => (None, request),
    };
    let tell = |status: StatusCode, caller: Option<&Caller>, reason| {
        if let Some(on_refusal) = &on_refusal {
            on_refusal(&GateRefusal {
                status,
                caller,
                method: request.method(),
                path: request.uri().path(),
                remote,
                with_credential: bearer.is_some() || certificate.is_some(),
                reason,
                provider_refusal,
            });
        }
    };
    let (Some(caller), Some(decision)) = (caller, decision) else {
        tell(StatusCode::UNAUTHORIZED, None, None);
        return refusal(
            StatusCode::UNAUTHORIZED,
            "Unauthorized: a valid admin bearer token or client certificate is required",
        );
    };
    let filter = match decision {
        Decision::Allow => None,
        Decision::Filter(filter, dfsp) => Some((filter, dfsp)),
        Decision::Refuse(reason) => {
            tell(StatusCode::FORBIDDEN, Some(&caller), Some(reason));
            return refusal(
                StatusCode::FORBIDDEN,
                &reason.describe(caller.role, request.method(), request.uri().path()),
            );
        }
    };
    if let Some((crate::access::Filter::Rows, dfsp)) = filter {
        let mut request = request;
        request
            .extensions_mut()
            .insert(crate::access::ScopedTo(dfsp));
        return CALLER.scope(caller, next.run(request)).await;
    }
    if let Some((filter, dfsp)) = filter {
        let response = CALLER.scope(caller, next.run(request)).await;
        return own_share(filter, dfsp, own_of.as_ref(), response).await;
    }
    let write = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let Some(on_refused_write) = on_refused_write.filter(|_| write) else {
        return CALLER.scope(caller, next.run(request)).await;
    };
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let who = caller.clone();
    let response = REFUSAL_NOTED
        .scope(
            std::cell::Cell::new(false),
            CALLER.scope(caller, async move {
                let response = next.run(request).await;
                (response, REFUSAL_NOTED.with(std::cell::Cell::get))
            }),
        )
        .await;
    let (response, noted) = response;
    let status = response.status();
    if noted || !status.is_client_error() {
        return response;
    }
    // Read the refusal back for its code (a few hundred bytes of JSON),
    // and answer it as it was.
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, REFUSAL_BODY_MAX)
        .await
        .unwrap_or_default();
    on_refused_write(&RefusedWrite {
        caller: &who,
        method: &method,
        path: &path,
        status,
        body: &bytes,
    });
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// What the access table says of this caller's request: found by the
/// route's matched path pattern and its path parameters.
pub async fn decide_for(
    caller: &Caller,
    request: axum::extract::Request,
) -> (Decision, axum::extract::Request) {
    let (mut parts, body) = request.into_parts();
    let decision = crate::access::decide_for_parts(caller.role, &mut parts).await;
    (decision, axum::extract::Request::from_parts(parts, body))
}

/// A DFSP-scoped caller's answer, cut to its share; an answer with nothing
/// of its own is not found. Refusals (non-2xx) pass as they are.
async fn own_share(
    filter: crate::access::Filter,
    dfsp: ledger::FspName,
    own_of: Option<&OwnOf>,
    response: Response,
) -> Response {
    if !response.status().is_success() {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, ANSWER_MAX).await else {
        return refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the answer could not be read",
        );
    };
    let Ok(answer) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        // Not JSON: nothing the filter can tell is this DFSP's.
        return refusal(StatusCode::FORBIDDEN, "Forbidden: not a DFSP's own data");
    };
    let own = match (filter, own_of) {
        (crate::access::Filter::Settlements, Some(own_of)) => own_of(dfsp).await,
        _ => crate::access::Own {
            name: dfsp.to_string(),
            accounts: Vec::new(),
        },
    };
    match crate::access::own_only(filter, &own, answer) {
        Some(answer) => {
            let mut parts = parts;
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, axum::body::Body::from(answer.to_string()))
        }
        None => refusal(
            StatusCode::NOT_FOUND,
            &format!("Not found: nothing here is DFSP {dfsp}'s"),
        ),
    }
}

/// Largest answer cut to a DFSP's share (the participants of a big scheme,
/// a few MB).
const ANSWER_MAX: usize = 64 << 20;

/// The admin address's TLS when operators may present client
/// certificates: one the CA signed is asked for but not required (bearer
/// tokens still work); the `cert:` lines of the tokens file say who it is.
pub fn server_config_with_client_ca(
    cert: Arc<crate::tls::ReloadingCert>,
    client_ca: &Path,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(crate::tls::root_store(client_ca)?),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .map_err(|error| format!("{}: {error}", client_ca.display()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| error.to_string())?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A fresh bearer token: 32 random bytes (from the OS), URL-safe base64,
/// with a prefix that makes it recognizable in a secret scanner.
pub fn new_token() -> std::io::Result<String> {
    use base64::Engine as _;
    use std::io::Read as _;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(format!(
        "kasi_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_reload_adds_and_revokes_credentials_and_a_bad_file_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin-tokens");
        std::fs::write(&path, format!("alice operator {}\n", token_hash("a"))).unwrap();
        let auth = AdminAuth::load(&path).unwrap();
        assert!(auth.identify(Some("a"), None).is_some());
        assert!(auth.identify(Some("b"), None).is_none());
        std::fs::write(&path, format!("bob viewer {}\n", token_hash("b"))).unwrap();
        assert_eq!(auth.reload(), Ok(1));
        assert!(auth.identify(Some("a"), None).is_none(), "alice revoked");
        assert_eq!(auth.identify(Some("b"), None).unwrap().role, Role::Viewer);
        std::fs::write(&path, "# nobody\n").unwrap();
        assert!(auth.reload().is_err());
        assert!(
            auth.identify(Some("b"), None).is_some(),
            "the old set stays"
        );
    }

    #[test]
    fn only_loopback_is_open_without_credentials() {
        assert!(decide(addr("127.0.0.1:3001"), None, false)
            .unwrap()
            .is_open());
        assert!(decide(addr("[::1]:3001"), None, false).unwrap().is_open());
        let refused = decide(addr("0.0.0.0:3001"), None, false).unwrap_err();
        assert!(refused.contains("--admin-tokens"), "{refused}");
        assert!(decide(addr("10.1.2.3:3001"), None, false).is_err());
        assert!(decide(addr("0.0.0.0:3001"), None, true).unwrap().is_open());
        let file = format!("alice operator {}\n", token_hash("secret"));
        let auth = || AdminAuth::parse(&file).unwrap();
        assert!(!decide(addr("0.0.0.0:3001"), Some(auth()), false)
            .unwrap()
            .is_open());
        // A tokens file is enforced on loopback too.
        assert!(!decide(addr("127.0.0.1:3001"), Some(auth()), false)
            .unwrap()
            .is_open());
    }

    #[test]
    fn tokens_and_certificates_identify_their_line() {
        let cert = "ab".repeat(32);
        let file = format!(
            "# operators\nalice operator {}\n\ngrafana viewer {}  # read only\nci operator cert:sha256:{cert}\n",
            token_hash("kasi_alice"),
            token_hash("kasi_grafana")
        );
        let auth = AdminAuth::parse(&file).unwrap();
        assert!(auth.has_certificates());
        let alice = auth.identify(Some("kasi_alice"), None).unwrap();
        assert_eq!((alice.name.as_str(), alice.role), ("alice", Role::Operator));
        let grafana = auth.identify(Some("kasi_grafana"), None).unwrap();
        assert_eq!(grafana.role, Role::Viewer);
        assert_eq!(auth.identify(Some("kasi_other"), None), None);
        assert_eq!(auth.identify(None, None), None);
        // The hash itself is not a token.
        assert_eq!(auth.identify(Some(&token_hash("kasi_alice")), None), None);
        assert_eq!(auth.identify(None, Some(&cert)).unwrap().name, "ci");
        assert_eq!(auth.identify(None, Some(&"cd".repeat(32))), None);
    }

    #[test]
    fn a_bad_line_is_named() {
        for (file, wanted) in [
            ("alice operator\n", "line 1"),
            ("alice root 00\n", "role 'root'"),
            ("alice root 00\n", "dfsp:<name>"),
            (
                "\n\nbob dfsp: 00\n",
                "line 3: role 'dfsp:' does not name a DFSP",
            ),
            ("bob viewer\n", "operator, finance, viewer, auditor"),
            ("\nalice operator kasi_plaintext\n", "line 2"),
            ("bob viewer cert:md5:00\n", "cert:sha256:"),
            ("# nothing\n", "no credentials"),
        ] {
            let error = AdminAuth::parse(file).unwrap_err();
            assert!(error.contains(wanted), "{file:?}: {error}");
        }
    }

    #[test]
    fn every_role_is_accepted_and_its_source_named() {
        let file = format!(
            "alice finance {}\nerin auditor {}\nbob dfsp:payerfsp {}\n",
            token_hash("a"),
            token_hash("e"),
            token_hash("b")
        );
        let auth = AdminAuth::parse(&file).unwrap();
        let bob = auth.identify(Some("b"), None).unwrap();
        assert_eq!(bob.role.to_string(), "dfsp:payerfsp");
        assert_eq!(bob.source, Source::TokensFile);
        assert_eq!(auth.identify(Some("a"), None).unwrap().role, Role::Finance);
        assert_eq!(auth.identify(Some("e"), None).unwrap().role, Role::Auditor);
        assert_eq!(
            AdminAuth::open("loopback")
                .identify(None, None)
                .unwrap()
                .source,
            Source::Open
        );
    }

    /// The gate as a router sees it: a certificate on the connection or a
    /// bearer token names the caller that handlers read.
    #[tokio::test]
    async fn the_gate_names_the_caller_to_handlers() {
        use tower::ServiceExt as _;
        let certificate = crate::tls::ClientIdentity {
            names: vec!["ops-ci".into()],
            fingerprint: "cd".repeat(32),
        };
        let file = format!(
            "ci operator cert:sha256:{}\ngrafana viewer {}\n",
            certificate.fingerprint,
            token_hash("kasi_view")
        );
        let auth = Arc::new(AdminAuth::parse(&file).unwrap());
        let app = axum::Router::new()
            // Readers may GET it; a POST there is unlisted: operators only.
            .route(
                "/audit-events",
                axum::routing::get(|| async { current_caller().name })
                    .post(|| async { current_caller().name }),
            )
            .layer(axum::middleware::from_fn(move |request, next| {
                authenticate(auth.clone(), request, next)
            }));
        let send =
            |method: &str, token: Option<&str>, cert: Option<&crate::tls::ClientIdentity>| {
                let mut request = axum::http::Request::builder()
                    .method(method)
                    .uri("/audit-events");
                if let Some(token) = token {
                    request = request.header("authorization", format!("Bearer {token}"));
                }
                let mut request = request.body(axum::body::Body::empty()).unwrap();
                request.extensions_mut().insert(crate::tls::Connection {
                    peer: "127.0.0.1:1".parse().unwrap(),
                    certificate: cert.map(|c| Arc::new(c.clone())),
                });
                app.clone().oneshot(request)
            };
        let body = |response: Response| async move {
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .unwrap();
            String::from_utf8(bytes.to_vec()).unwrap()
        };
        let response = send("POST", None, Some(&certificate)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(body(response).await, "ci");
        let response = send("GET", Some("kasi_view"), None).await.unwrap();
        assert_eq!(body(response).await, "grafana");
        let response = send("POST", Some("kasi_view"), None).await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let stranger = crate::tls::ClientIdentity {
            names: vec!["ci".into()],
            fingerprint: "ef".repeat(32),
        };
        let response = send("GET", None, Some(&stranger)).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "a name is not a pin"
        );
        assert!(response.headers().contains_key(header::WWW_AUTHENTICATE));
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn a_rebound_host_is_refused_on_every_method_and_loopback_names_pass() {
        for host in [
            "127.0.0.1:3001",
            "127.0.0.1",
            "127.8.9.10:3001",
            "localhost:3001",
            "LocalHost",
            "[::1]:3001",
            "[::1]",
            "[::ffff:127.0.0.1]:3001",
        ] {
            assert_eq!(
                cross_site(&Method::GET, &headers(&[("host", host)]), true),
                Ok(()),
                "{host}"
            );
        }
        for host in [
            "evil.example:3001",
            "evil.example",
            "localhost.evil.example:3001",
            "10.0.0.1:3001",
            "0.0.0.0:3001",
            "[::2]:3001",
            "localhost:x",
            "",
        ] {
            for method in [Method::GET, Method::POST] {
                let refused = cross_site(&method, &headers(&[("host", host)]), false).unwrap_err();
                assert!(refused.contains("Host"), "{host}: {refused}");
            }
        }
        // In-process (the console's own calls): no Host at all.
        assert_eq!(cross_site(&Method::GET, &HeaderMap::new(), true), Ok(()));
    }

    #[test]
    fn only_the_admin_address_own_origin_passes() {
        let with = |host: &str, origin: &str| {
            cross_site(
                &Method::POST,
                &headers(&[
                    ("host", host),
                    ("origin", origin),
                    ("content-type", "application/json"),
                ]),
                true,
            )
        };
        for (host, origin) in [
            ("127.0.0.1:3001", "http://127.0.0.1:3001"),
            ("127.0.0.1:3001", "https://127.0.0.1:3001"),
            ("127.0.0.1:3001", "http://localhost:3001"),
            ("localhost:3001", "http://[::1]:3001"),
            ("localhost", "http://localhost"),
            ("localhost:443", "https://localhost"),
            // A tunnel's port, as the browser sees it.
            ("localhost:8001", "http://localhost:8001"),
        ] {
            assert_eq!(with(host, origin), Ok(()), "{host} {origin}");
        }
        for (host, origin) in [
            ("127.0.0.1:3001", "https://evil.example"),
            ("127.0.0.1:3001", "http://evil.example:3001"),
            ("127.0.0.1:3001", "http://localhost:8080"),
            ("127.0.0.1:3001", "http://127.0.0.1"),
            ("127.0.0.1:3001", "null"),
            ("127.0.0.1:3001", "file://"),
            ("127.0.0.1:3001", "ftp://127.0.0.1:3001"),
            ("localhost", "https://localhost:3001"),
        ] {
            let refused = with(host, origin).unwrap_err();
            assert!(refused.contains("Origin"), "{host} {origin}: {refused}");
        }
        // An Origin without a Host cannot be checked against it.
        let lone = headers(&[("origin", "http://127.0.0.1:3001")]);
        assert!(cross_site(&Method::GET, &lone, true).is_err());
    }

    #[test]
    fn api_writes_with_a_body_must_be_json() {
        let host = ("host", "127.0.0.1:3001");
        let write = |method: Method, pairs: &[(&str, &str)], api: bool| {
            let mut all = vec![host];
            all.extend_from_slice(pairs);
            cross_site(&method, &headers(&all), api)
        };
        for content_type in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON;charset=UTF-8",
        ] {
            let pairs = [("content-type", content_type), ("content-length", "2")];
            for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
                assert_eq!(write(method, &pairs, true), Ok(()), "{content_type}");
            }
        }
        for pairs in [
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("content-length", "9"),
            ][..],
            &[
                ("content-type", "multipart/form-data; boundary=x"),
                ("content-length", "9"),
            ],
            &[
                ("content-type", "text/plain;charset=UTF-8"),
                ("content-length", "9"),
            ],
            &[
                ("content-type", "application/json-seq"),
                ("content-length", "9"),
            ],
            &[("content-length", "9")],
            &[("transfer-encoding", "chunked")],
            // An empty form is still a form.
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("content-length", "0"),
            ],
        ] {
            let refused = write(Method::POST, pairs, true).unwrap_err();
            assert!(refused.contains("application/json"), "{pairs:?}: {refused}");
        }
        // A bodyless write (curl -X DELETE), reads, and the console's own
        // form posts (its routes check their CSRF token) pass.
        assert_eq!(write(Method::DELETE, &[], true), Ok(()));
        assert_eq!(
            write(Method::POST, &[("content-length", "0")], true),
            Ok(())
        );
        assert_eq!(
            write(Method::GET, &[("content-type", "text/plain")], true),
            Ok(())
        );
        assert_eq!(
            write(
                Method::POST,
                &[
                    ("content-type", "application/x-www-form-urlencoded"),
                    ("content-length", "9")
                ],
                false
            ),
            Ok(())
        );
    }

    #[test]
    fn only_an_open_loopback_address_guards_against_browsers() {
        assert!(decide(addr("127.0.0.1:3001"), None, false)
            .unwrap()
            .is_open_on_loopback());
        assert!(!decide(addr("0.0.0.0:3001"), None, true)
            .unwrap()
            .is_open_on_loopback());
        let file = format!("alice operator {}\n", token_hash("secret"));
        assert!(!AdminAuth::parse(&file).unwrap().is_open_on_loopback());
    }

    #[test]
    fn tokens_are_fresh_and_long() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with("kasi_") && a.len() == 5 + 43, "{a}");
        assert_eq!(token_hash(&a).len(), 64);
    }
}
