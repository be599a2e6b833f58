//! Signing in to the console through the scheme's identity provider
//! (OpenID Connect, authorization code with PKCE; `hub::oidc` holds the
//! protocol and the token checks).
//!
//! `GET /console/oidc/start` seals a new sign-in (state, nonce, PKCE
//! verifier, the page to go on to, the time) into a short-lived cookie
//! under a key the console draws at start, and sends the browser to the
//! provider; `GET /console/oidc/callback` opens the cookie (a forged or
//! altered one fails its MAC), requires its state to be the one the
//! provider sent back (so that nobody can make a victim's browser finish
//! a sign-in the attacker began: login CSRF), uses each state once
//! (a code goes to the provider once: RFC 6749 4.1.2), trades the code
//! for tokens, checks the ID token's nonce and the access token as the
//! admin API does, and opens a console session whose credential is that
//! access token. The session then lasts no longer than the token: the
//! API refuses it once expired, and the console asks the person to sign
//! in again.
//!
//! The browser keeps the sign-in, not the hub: anyone may begin one, and
//! a hub that kept each would let a flood of beginnings push out the
//! sign-ins of real people. The hub keeps only the states of callbacks
//! already used, each until its sign-in would have expired anyway (at
//! most [`MAX_USED`]; past that the oldest is forgotten, which reopens
//! nothing: its code was spent at the provider).
//!
//! The callback answers with a page that moves on by itself rather than a
//! redirect: the session cookie is `SameSite=Strict`, and a browser does
//! not send it on a redirect chain that began at the provider's site.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hub::oidc::SignInStart;
use maud::html;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::page;
use crate::session::{self, Credential};
use crate::Console;

/// The cookie that carries a sign-in from its start to its callback.
const STATE_COOKIE: &str = "kasi_oidc_state";
/// How long a person has at the provider.
pub(crate) const PENDING_FOR: Duration = Duration::from_secs(10 * 60);
/// Used callbacks remembered at most (see the module's documentation).
pub(crate) const MAX_USED: usize = 4_096;
/// A sealed cookie longer than this is not one the console made.
const SEALED_MAX_BYTES: usize = 2_048;

/// A sign-in opened from its cookie.
struct Pending {
    start: SignInStart,
    next: String,
}

/// Why a callback's cookie does not open.
#[derive(Debug, PartialEq, Eq)]
enum Unsealed {
    /// No cookie, or not one the console sealed (altered, or from before
    /// the console's last start).
    Forged,
    /// Begun more than [`PENDING_FOR`] ago.
    Expired,
}

pub(crate) struct SignIns {
    /// HMAC-SHA256 key of the sealed cookies, drawn at start: a restart
    /// ends the sign-ins under way (each is minutes long).
    key: ring::hmac::Key,
    /// States of callbacks already used, with when their sign-in began.
    used: Mutex<HashMap<String, u64>>,
}

impl Default for SignIns {
    fn default() -> SignIns {
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .expect("the OS random source is readable");
        SignIns {
            key,
            used: Mutex::new(HashMap::new()),
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

impl SignIns {
    /// The cookie value that carries `start` and `next`, begun at `at_ms`.
    fn seal(&self, start: &SignInStart, next: &str, at_ms: u64) -> String {
        let payload = json!({
            "state": start.state,
            "nonce": start.nonce,
            "verifier": start.verifier,
            "redirectUri": start.redirect_uri,
            "next": next,
            "at": at_ms,
        })
        .to_string();
        let payload = URL_SAFE_NO_PAD.encode(payload);
        let tag = ring::hmac::sign(&self.key, payload.as_bytes());
        format!("{payload}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// The sign-in a cookie carries, if the console sealed it less than
    /// [`PENDING_FOR`] before `now_ms`.
    fn open(&self, sealed: &str, now_ms: u64) -> Result<(Pending, u64), Unsealed> {
        if sealed.len() > SEALED_MAX_BYTES {
            return Err(Unsealed::Forged);
        }
        let (payload, tag) = sealed.split_once('.').ok_or(Unsealed::Forged)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| Unsealed::Forged)?;
        ring::hmac::verify(&self.key, payload.as_bytes(), &tag).map_err(|_| Unsealed::Forged)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| Unsealed::Forged)?;
        let fields: Value = serde_json::from_slice(&payload).map_err(|_| Unsealed::Forged)?;
        let text = |name: &str| fields[name].as_str().map(str::to_string);
        let (Some(state), Some(nonce), Some(verifier), Some(redirect_uri), Some(next), Some(at)) = (
            text("state"),
            text("nonce"),
            text("verifier"),
            text("redirectUri"),
            text("next"),
            fields["at"].as_u64(),
        ) else {
            return Err(Unsealed::Forged);
        };
        if now_ms.saturating_sub(at) >= PENDING_FOR.as_millis() as u64 || at > now_ms + 60_000 {
            return Err(Unsealed::Expired);
        }
        let start = SignInStart {
            state,
            nonce,
            verifier,
            redirect_uri,
        };
        Ok((Pending { start, next }, at))
    }

    /// Marks the sign-in `state` (begun at `at_ms`) used; false if it was.
    fn use_once(&self, state: &str, at_ms: u64, now_ms: u64) -> bool {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let horizon = PENDING_FOR.as_millis() as u64;
        used.retain(|_, begun| now_ms.saturating_sub(*begun) < horizon);
        if used.contains_key(state) {
            return false;
        }
        if used.len() >= MAX_USED {
            let oldest = used
                .iter()
                .min_by_key(|(_, begun)| **begun)
                .map(|(state, _)| state.clone());
            if let Some(oldest) = oldest {
                used.remove(&oldest);
            }
        }
        used.insert(state.to_string(), at_ms);
        true
    }
}

#[derive(Deserialize)]
pub(crate) struct StartQuery {
    next: Option<String>,
}

pub(crate) async fn start(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(query): Query<StartQuery>,
) -> Response {
    let Some(oidc) = console.auth.oidc() else {
        return failed(
            StatusCode::NOT_FOUND,
            "No identity provider is configured for this hub.",
        );
    };
    let Some(endpoints) = oidc.endpoints().await else {
        return failed(
            StatusCode::SERVICE_UNAVAILABLE,
            "The identity provider does not answer; try again, or sign in with a token.",
        );
    };
    let redirect_uri = match &oidc.settings().redirect_url {
        Some(url) => url.clone(),
        None => {
            let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
                return failed(StatusCode::BAD_REQUEST, "The request names no Host.");
            };
            let scheme = if console.secure_cookies {
                "https"
            } else {
                "http"
            };
            format!("{scheme}://{host}/console/oidc/callback")
        }
    };
    let start = SignInStart {
        state: session::random_token(),
        nonce: session::random_token(),
        verifier: session::random_token(),
        redirect_uri,
    };
    let location = oidc.authorization_url(&endpoints, &start);
    let next = session::next_page(query.next.as_deref());
    let sealed = console.sign_ins.seal(&start, next, now_ms());
    let state_cookie = format!(
        "{STATE_COOKIE}={sealed}; Path=/console/oidc; HttpOnly; SameSite=Lax; Max-Age={}{}",
        PENDING_FOR.as_secs(),
        if console.secure_cookies {
            "; Secure"
        } else {
            ""
        }
    );
    let mut response = session::see_other(&location);
    if let Ok(value) = state_cookie.parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    page::harden(response.headers_mut());
    response
}

#[derive(Deserialize)]
pub(crate) struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// Tells the hub of a refused sign-in (counted, logged at a bounded
/// rate, audited as a refused credential), then shows why.
fn refused(
    console: &Console,
    connection: Option<&hub::tls::Connection>,
    status: StatusCode,
    provider_refusal: Option<hub::oidc::OidcRefusal>,
    why: &str,
) -> Response {
    tracing::debug!(why, "console sign-in through the identity provider refused");
    if let Some(on_refusal) = &console.on_refusal {
        on_refusal(&hub::admin_auth::GateRefusal {
            status: StatusCode::UNAUTHORIZED,
            caller: None,
            method: &axum::http::Method::GET,
            path: "/console/oidc/callback",
            remote: connection.map(|c| c.peer.ip()),
            with_credential: true,
            reason: None,
            provider_refusal,
        });
    }
    failed(status, why)
}

pub(crate) async fn callback(
    State(console): State<Arc<Console>>,
    connection: Option<axum::Extension<hub::tls::Connection>>,
    headers: HeaderMap,
    Query(query): Query<CallbackQuery>,
) -> Response {
    let connection = connection.as_ref().map(|c| &c.0);
    let Some(oidc) = console.auth.oidc() else {
        return failed(
            StatusCode::NOT_FOUND,
            "No identity provider is configured for this hub.",
        );
    };
    if let Some(error) = &query.error {
        return refused(
            &console,
            connection,
            StatusCode::UNAUTHORIZED,
            None,
            &format!(
                "The identity provider did not sign you in ({error}{}).",
                query
                    .error_description
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ),
        );
    }
    let (Some(code), Some(state)) = (&query.code, &query.state) else {
        return failed(
            StatusCode::BAD_REQUEST,
            "The sign-in callback lacks its code or state.",
        );
    };
    // The browser's own cookie first: a callback forged for someone
    // else's browser must not even use up the sign-in it names.
    let opened = match session::cookie_value(&headers, STATE_COOKIE) {
        Some(sealed) => console.sign_ins.open(sealed, now_ms()),
        None => Err(Unsealed::Forged),
    };
    let (pending, began_at_ms) = match opened {
        Ok(opened) if opened.0.start.state == *state => opened,
        Ok(_) | Err(Unsealed::Forged) => {
            return refused(
                &console,
                connection,
                StatusCode::BAD_REQUEST,
                None,
                "This sign-in was not begun in this browser: sign in again.",
            )
        }
        Err(Unsealed::Expired) => {
            return refused(
                &console,
                connection,
                StatusCode::BAD_REQUEST,
                None,
                "This sign-in took too long: sign in again.",
            )
        }
    };
    if !console.sign_ins.use_once(state, began_at_ms, now_ms()) {
        return refused(
            &console,
            connection,
            StatusCode::BAD_REQUEST,
            None,
            "This sign-in was already used: sign in again.",
        );
    }
    match oidc.exchange_code(code, &pending.start).await {
        Ok((identity, access_token)) => {
            let Some(caller) = console.auth.caller_of_identity(identity) else {
                return refused(
                    &console,
                    connection,
                    StatusCode::FORBIDDEN,
                    Some(hub::oidc::OidcRefusal::NoRole),
                    "Your identity provider account has no kasi role (operator, finance, viewer, auditor or dfsp:<name>).",
                );
            };
            let mut response = moving_on(&pending.next);
            if let Ok(value) =
                format!("{STATE_COOKIE}=; Path=/console/oidc; HttpOnly; SameSite=Lax; Max-Age=0")
                    .parse()
            {
                response.headers_mut().append(header::SET_COOKIE, value);
            }
            session::signed_in(&console, caller, Credential::Bearer(access_token), response)
        }
        Err(error) => refused(
            &console,
            connection,
            StatusCode::UNAUTHORIZED,
            None,
            &format!("The sign-in could not be completed: {error}"),
        ),
    }
}

/// A page that goes on to `next` by itself (see the module's
/// documentation for why not a redirect).
fn moving_on(next: &str) -> Response {
    let main = html! {
        meta http-equiv="refresh" content=(format!("0;url={next}"));
        h1 { "Signed in" }
        p { a href=(next) { "Continue to the console" } }
    };
    page::bare("Signed in", html! {}, page::Width::Narrow, main).into_response()
}

fn failed(status: StatusCode, why: &str) -> Response {
    let main = html! {
        h1 { "Sign-in failed" }
        p.flash.error role="alert" { (why) }
        p { a href="/console/sign-in" { "Back to sign-in" } }
    };
    let mut response = (
        status,
        page::bare("Sign-in failed", html! {}, page::Width::Narrow, main),
    )
        .into_response();
    page::harden(response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(state: &str) -> SignInStart {
        SignInStart {
            state: state.to_string(),
            nonce: "n-1".to_string(),
            verifier: "v-1".to_string(),
            redirect_uri: "https://hub.example/console/oidc/callback".to_string(),
        }
    }

    #[test]
    fn a_sealed_sign_in_opens_whole_only_where_and_while_it_was_sealed() {
        let sign_ins = SignIns::default();
        let sealed = sign_ins.seal(&start("s-1"), "/console/participants", 1_000);
        let (pending, at) = sign_ins.open(&sealed, 2_000).expect("opens");
        assert_eq!(at, 1_000);
        assert_eq!(pending.start.state, "s-1");
        assert_eq!(pending.start.nonce, "n-1");
        assert_eq!(pending.start.verifier, "v-1");
        assert_eq!(
            pending.start.redirect_uri,
            "https://hub.example/console/oidc/callback"
        );
        assert_eq!(pending.next, "/console/participants");

        let late = 1_000 + PENDING_FOR.as_millis() as u64;
        assert_eq!(sign_ins.open(&sealed, late).err(), Some(Unsealed::Expired));
        // Another console's key (or this one's before a restart).
        let other = SignIns::default();
        assert_eq!(other.open(&sealed, 2_000).err(), Some(Unsealed::Forged));
        // Any byte changed, in the payload or the tag.
        let (payload, tag) = sealed.split_once('.').unwrap();
        let forged_payload = {
            let mut fields: Value =
                serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
            fields["next"] = json!("https://attacker.example/");
            URL_SAFE_NO_PAD.encode(fields.to_string())
        };
        for forged in [
            format!("{forged_payload}.{tag}"),
            format!("{payload}.{}", &tag[1..]),
            payload.to_string(),
            String::new(),
            "x".repeat(SEALED_MAX_BYTES + 1),
        ] {
            assert_eq!(
                sign_ins.open(&forged, 2_000).err(),
                Some(Unsealed::Forged),
                "{forged}"
            );
        }
    }

    #[test]
    fn a_callback_is_used_once_and_the_memory_of_used_ones_is_bounded() {
        let sign_ins = SignIns::default();
        assert!(sign_ins.use_once("s-1", 1_000, 2_000));
        assert!(!sign_ins.use_once("s-1", 1_000, 3_000), "replayed");
        // Forgotten once its sign-in could no longer open anyway.
        let late = 1_000 + PENDING_FOR.as_millis() as u64;
        assert!(sign_ins.use_once("s-1", 1_000, late));
        for n in 0..MAX_USED + 10 {
            sign_ins.use_once(&format!("flood-{n}"), late + n as u64, late + n as u64);
        }
        let used = sign_ins.used.lock().unwrap();
        assert_eq!(used.len(), MAX_USED);
        assert!(
            used.contains_key(&format!("flood-{}", MAX_USED + 9)),
            "the newest kept"
        );
        assert!(!used.contains_key("flood-0"), "the oldest forgotten");
    }
}
