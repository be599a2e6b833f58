//! Signing in to the console through the scheme's identity provider
//! (OpenID Connect, authorization code with PKCE; `hub::oidc` holds the
//! protocol and the token checks).
//!
//! `GET /console/oidc/start` keeps a pending sign-in (state, nonce, PKCE
//! verifier; at most [`MAX_PENDING`], each for [`PENDING_FOR`]) and sends
//! the browser to the provider, with the state also in a short-lived
//! cookie; `GET /console/oidc/callback` takes the pending sign-in once
//! (a replayed callback finds nothing), requires the cookie to match the
//! state (so that nobody can make a victim's browser finish a sign-in
//! the attacker began: login CSRF), trades the code for tokens, checks
//! the ID token's nonce and the access token as the admin API does, and
//! opens a console session whose credential is that access token. The
//! session then lasts no longer than the token: the API refuses it once
//! expired, and the console asks the person to sign in again.
//!
//! The callback answers with a page that moves on by itself rather than a
//! redirect: the session cookie is `SameSite=Strict`, and a browser does
//! not send it on a redirect chain that began at the provider's site.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hub::oidc::SignInStart;
use maud::html;
use serde::Deserialize;

use crate::page;
use crate::session::{self, Credential};
use crate::Console;

/// The cookie that ties a callback to the browser that began the sign-in.
const STATE_COOKIE: &str = "kasi_oidc_state";
/// How long a person has at the provider.
pub(crate) const PENDING_FOR: Duration = Duration::from_secs(10 * 60);
/// Sign-ins begun and not finished, kept at most (the oldest goes first):
/// anyone may begin one, so they must not grow without bound.
pub(crate) const MAX_PENDING: usize = 1_024;

struct Pending {
    start: SignInStart,
    next: String,
    at: Instant,
}

#[derive(Default)]
pub(crate) struct PendingSignIns {
    by_state: Mutex<HashMap<String, Pending>>,
}

impl PendingSignIns {
    fn keep(&self, start: SignInStart, next: String) {
        let now = Instant::now();
        let mut pending = self.by_state.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|_, p| now.duration_since(p.at) < PENDING_FOR);
        if pending.len() >= MAX_PENDING {
            let oldest = pending
                .iter()
                .min_by_key(|(_, p)| p.at)
                .map(|(state, _)| state.clone());
            if let Some(oldest) = oldest {
                pending.remove(&oldest);
            }
        }
        pending.insert(
            start.state.clone(),
            Pending {
                start,
                next,
                at: now,
            },
        );
    }

    /// The sign-in `state` names, once.
    fn take(&self, state: &str) -> Option<Pending> {
        let pending = self
            .by_state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(state)?;
        (pending.at.elapsed() < PENDING_FOR).then_some(pending)
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
    let state_cookie = format!(
        "{STATE_COOKIE}={}; Path=/console/oidc; HttpOnly; SameSite=Lax; Max-Age={}{}",
        start.state,
        PENDING_FOR.as_secs(),
        if console.secure_cookies {
            "; Secure"
        } else {
            ""
        }
    );
    console
        .pending_sign_ins
        .keep(start, session::next_page(query.next.as_deref()).to_string());
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
    if session::cookie_value(&headers, STATE_COOKIE) != Some(state.as_str()) {
        return refused(
            &console,
            connection,
            StatusCode::BAD_REQUEST,
            None,
            "This sign-in was not begun in this browser: sign in again.",
        );
    }
    let Some(pending) = console.pending_sign_ins.take(state) else {
        return refused(
            &console,
            connection,
            StatusCode::BAD_REQUEST,
            None,
            "This sign-in is unknown, already used or expired: sign in again.",
        );
    };
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
