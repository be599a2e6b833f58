//! Who is using the console: sessions, sign-in and sign-out, CSRF.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Form;
use hub::access::{self, Decision};
use hub::admin_auth::{Caller, GateRefusal};
use maud::html;

use crate::page::{self, Fields, Flash};
use crate::Console;

/// The cookie that carries the session id (and nothing else).
pub const SESSION_COOKIE: &str = "kasi_console";
/// A session unused this long is forgotten: sign in again.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// However busy, a session lasts no longer than this.
const MAX_AGE: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at most; the least recently used one goes first.
const MAX_SESSIONS: usize = 1_024;

/// How the console proves to the admin API who a person is.
#[derive(Clone)]
pub(crate) enum Credential {
    /// Their bearer token, sent as `Authorization: Bearer` on each call.
    Bearer(String),
    /// Nothing to send: the API is open (loopback without credentials), or
    /// the person's client certificate, on their own connection, says it.
    Ambient,
}

pub(crate) struct Session {
    pub caller: Caller,
    pub credential: Credential,
    /// Every form carries it back; a POST without it changes nothing.
    pub csrf: String,
    created: Instant,
    last_seen: Mutex<Instant>,
    flash: Mutex<Option<Flash>>,
}

impl Session {
    pub fn set_flash(&self, flash: Flash) {
        *self.flash.lock().unwrap_or_else(|e| e.into_inner()) = Some(flash);
    }

    pub fn take_flash(&self) -> Option<Flash> {
        self.flash.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn expired(&self, now: Instant) -> bool {
        let last = *self.last_seen.lock().unwrap_or_else(|e| e.into_inner());
        now.duration_since(last) > IDLE_TIMEOUT || now.duration_since(self.created) > MAX_AGE
    }
}

#[derive(Default)]
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    /// The session, if it is still valid; `touch` counts this request as
    /// the person's activity (a page's own refresh does not).
    fn find(&self, id: &str, touch: bool) -> Option<Arc<Session>> {
        let now = Instant::now();
        let mut sessions = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        let session = sessions.get(id)?.clone();
        if session.expired(now) {
            sessions.remove(id);
            return None;
        }
        if touch {
            *session.last_seen.lock().unwrap_or_else(|e| e.into_inner()) = now;
        }
        Some(session)
    }

    pub(crate) fn open(&self, caller: Caller, credential: Credential) -> (String, Arc<Session>) {
        let id = random_token();
        let now = Instant::now();
        let session = Arc::new(Session {
            caller,
            credential,
            csrf: random_token(),
            created: now,
            last_seen: Mutex::new(now),
            flash: Mutex::new(None),
        });
        let mut sessions = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, s| !s.expired(now));
        if sessions.len() >= MAX_SESSIONS {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, s)| *s.last_seen.lock().unwrap_or_else(|e| e.into_inner()))
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(id.clone(), session.clone());
        (id, session)
    }

    pub fn close(&self, id: &str) {
        self.by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }
}

/// 32 random bytes from the OS, URL-safe: a session id or a CSRF token.
pub(crate) fn random_token() -> String {
    // The admin token generator reads /dev/urandom; a machine without it
    // cannot run the hub's TLS either.
    hub::admin_auth::new_token().expect("the OS random source (/dev/urandom) is readable")
}

/// The person behind a console request, with what is needed to call the
/// admin API on their behalf.
#[derive(Clone)]
pub(crate) struct Visitor {
    pub console: Arc<Console>,
    pub session: Arc<Session>,
    /// A session made for this request (open API, client certificate): its
    /// cookie goes out with the answer.
    pub new_cookie: Option<String>,
    /// The request's connection (peer, client certificate), handed on to
    /// the API so that a certificate signs the call in as it did the page.
    pub connection: Option<hub::tls::Connection>,
    /// Whether the request came over TLS: the cookie is then `Secure`.
    pub secure: bool,
}

impl Visitor {
    /// Whether this person may use a route (its pattern as the access
    /// table names it; `params` its path parameters): what pages show of
    /// links, forms and sections. The gate refuses the rest anyway.
    pub fn may(&self, method: &Method, pattern: &str, params: &[(&str, &str)]) -> bool {
        access::may(self.session.caller.role, method, pattern, params)
    }

    /// Whether this person may post this console form (no DFSP-scoped
    /// role posts any, so the path's parameters do not matter).
    pub fn may_post(&self, pattern: &str) -> bool {
        self.may(&Method::POST, pattern, &[])
    }

    /// Whether this person may read this API route.
    pub fn may_read(&self, pattern: &str) -> bool {
        self.may(&Method::GET, pattern, &[])
    }

    /// A read of a section a page shows only to whom may read it: `None`
    /// for the others (the section is left out, not refused).
    pub async fn get_if_may(
        &self,
        pattern: &str,
        path_and_query: &str,
    ) -> Option<Result<serde_json::Value, crate::api::ApiError>> {
        match self.may_read(pattern) {
            true => Some(self.get(path_and_query).await),
            false => None,
        }
    }

    /// The answer, with the session's cookie when it is new, and the
    /// headers every console answer carries.
    pub fn finish(&self, mut response: Response) -> Response {
        if let Some(id) = &self.new_cookie {
            if let Ok(value) = cookie(id, self.secure).parse() {
                response.headers_mut().append(header::SET_COOKIE, value);
            }
        }
        page::harden(response.headers_mut());
        response
    }

    /// After a change made through the API: `done` (of its answer) or the
    /// API's refusal as the next page's message, on the page `to`; a
    /// credential that stopped working signs in again.
    pub fn after_change(
        &self,
        result: Result<serde_json::Value, crate::api::ApiError>,
        done: impl FnOnce(&serde_json::Value) -> String,
        to: &str,
    ) -> Response {
        match result {
            // Held by four-eyes (`202` with a pending change): nothing
            // changed yet, whatever the form's own words would say.
            Ok(answer) if answer["state"] == "pending" && answer["requestedBy"].is_object() => {
                self.session.set_flash(page::Flash::ok(format!(
                    "Waiting for a second person: {} of {} is on the Approvals page until someone \
                     else approves it",
                    answer["action"].as_str().unwrap_or("the change"),
                    answer["target"].as_str().unwrap_or_default()
                )))
            }
            Ok(answer) => self.session.set_flash(page::Flash::ok(done(&answer))),
            Err(error) if error.status == StatusCode::UNAUTHORIZED => {
                return self.redirect("/console/sign-in")
            }
            Err(error) => self.session.set_flash(page::Flash::error(error.message())),
        }
        self.redirect(to)
    }

    /// After a change: see the result on a page of its own (a reload does
    /// not repeat the change).
    pub fn redirect(&self, to: &str) -> Response {
        self.finish(see_other(to))
    }
}

/// A console form POST: the visitor, and the form's fields once its CSRF
/// token is the session's (a form without it changes nothing: 403).
pub(crate) struct Posted {
    pub visitor: Visitor,
    pub fields: Fields,
}

#[axum::async_trait]
impl FromRequest<Arc<Console>> for Posted {
    type Rejection = Response;

    async fn from_request(request: Request, console: &Arc<Console>) -> Result<Posted, Response> {
        let (mut parts, body) = request.into_parts();
        let visitor = Visitor::from_request_parts(&mut parts, console).await?;
        let Form(form) =
            Form::<Vec<(String, String)>>::from_request(Request::from_parts(parts, body), console)
                .await
                .map_err(IntoResponse::into_response)?;
        let fields = Fields(form);
        match fields.get("csrf") {
            Some(token) if same(token.as_bytes(), visitor.session.csrf.as_bytes()) => {
                Ok(Posted { visitor, fields })
            }
            _ => Err(visitor.finish(page::plain_error(
                StatusCode::FORBIDDEN,
                "This form is stale or did not come from the console (no valid CSRF token): reload the page and try again.",
            ))),
        }
    }
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn cookie(id: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{SESSION_COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict{secure}")
}

pub(crate) fn see_other(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_string())]).into_response()
}

fn session_id(headers: &HeaderMap) -> Option<&str> {
    cookie_value(headers, SESSION_COOKIE)
}

/// The value of the cookie `name` among those the request carries.
pub(crate) fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(found, _)| *found == name)
        .map(|(_, value)| value)
}

/// Every console route but the open ones (sign-in, assets): the person
/// is found (or sent to sign in) and the access table asked, before any of
/// the handler's extractors runs (a form or query it cannot read must not
/// answer before a refusal does); the handler's [`Visitor`] is the one
/// found here.
pub(crate) async fn checked(
    State(console): State<Arc<Console>>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    let open = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .and_then(|matched| access::rule_for(request.method(), matched.as_str()))
        .is_some_and(|rule| rule.who == access::Who::Open);
    if open {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let visitor = match Visitor::identify(&mut parts, &console).await {
        Ok(visitor) => visitor,
        Err(response) => return response,
    };
    if let Err(refused) = allowed(&visitor, &mut parts).await {
        return refused;
    }
    parts.extensions.insert(visitor);
    next.run(Request::from_parts(parts, body)).await
}

#[axum::async_trait]
impl FromRequestParts<Arc<Console>> for Visitor {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &Arc<Console>,
    ) -> Result<Visitor, Response> {
        if let Some(visitor) = parts.extensions.get::<Visitor>() {
            return Ok(visitor.clone());
        }
        // Not through [`checked`]: check here, never skip it.
        let visitor = Visitor::identify(parts, console).await?;
        allowed(&visitor, parts).await?;
        Ok(visitor)
    }
}

impl Visitor {
    /// The person behind a request: a session's, or one made for a request
    /// that says who it is; else a redirect to sign in.
    async fn identify(parts: &mut Parts, console: &Arc<Console>) -> Result<Visitor, Response> {
        let connection = parts.extensions.get::<hub::tls::Connection>().cloned();
        let secure = console.secure_cookies;
        let visitor = |session, new_cookie| Visitor {
            console: console.clone(),
            session,
            new_cookie,
            connection: connection.clone(),
            secure,
        };
        let activity = !parts.headers.contains_key("x-console-refresh");
        if let Some(session) =
            session_id(&parts.headers).and_then(|id| console.sessions.find(id, activity))
        {
            return Ok(visitor(session, None));
        }
        // No session: one is made without a sign-in when the request itself
        // says who it is (an open admin API, a client certificate).
        let certificate = connection
            .as_ref()
            .and_then(|c| c.certificate.as_ref())
            .map(|identity| identity.fingerprint.clone());
        let ambient = console.auth.is_open() || certificate.is_some();
        if ambient {
            if let Some(caller) = console.auth.identify(None, certificate.as_deref()) {
                let (id, session) = console.sessions.open(caller, Credential::Ambient);
                return Ok(visitor(session, Some(id)));
            }
        }
        let next = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/console/".to_string());
        let mut response = see_other(&format!("/console/sign-in?next={}", page::encode(&next)));
        page::harden(response.headers_mut());
        Err(response)
    }
}

/// The console's one check of the access table ([`hub::access`]), by the
/// route's pattern, made by [`checked`] before any handler runs. A refusal is told to the
/// hub (counted, logged at a bounded rate, audited) as the API's are.
async fn allowed(visitor: &Visitor, parts: &mut Parts) -> Result<(), Response> {
    let caller = &visitor.session.caller;
    let reason = match access::decide_for_parts(caller.role, parts).await {
        Decision::Allow | Decision::Filter(..) => return Ok(()),
        Decision::Refuse(reason) => reason,
    };
    if let Some(on_refusal) = &visitor.console.on_refusal {
        on_refusal(&GateRefusal {
            status: StatusCode::FORBIDDEN,
            caller: Some(caller),
            method: &parts.method,
            path: parts.uri.path(),
            remote: visitor.connection.as_ref().map(|c| c.peer.ip()),
            with_credential: true,
            reason: Some(reason),
            provider_refusal: None,
        });
    }
    Err(visitor.finish(page::plain_error(
        StatusCode::FORBIDDEN,
        &reason.describe(caller.role, &parts.method, parts.uri.path()),
    )))
}

#[derive(serde::Deserialize)]
pub(crate) struct NextQuery {
    next: Option<String>,
}

/// Only a console page is a place to go after signing in.
pub(crate) fn next_page(next: Option<&str>) -> &str {
    next.filter(|n| n.starts_with("/console/") && !n.starts_with("//") && !n.contains('\\'))
        .unwrap_or("/console/")
}

pub(crate) async fn sign_in_page(
    State(console): State<Arc<Console>>,
    axum::extract::Query(query): axum::extract::Query<NextQuery>,
) -> Response {
    sign_in_form(&console, next_page(query.next.as_deref()), None)
}

fn sign_in_form(console: &Console, next: &str, error: Option<&str>) -> Response {
    let open = console.auth.is_open();
    let status = if error.is_some() {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::OK
    };
    let main = html! {
            h1 { "Sign in to the kasi console" }
            @if let Some(error) = error {
                p.flash.error role="alert" { (error) }
            }
            @if open {
                p { "This admin address is open (loopback, no credentials configured): "
                    a href=(next) { "go to the console" } "." }
            } @else {
                @if let Some(oidc) = console.auth.oidc() {
                    p {
                        a.button #provider-sign-in href=(format!("/console/oidc/start?next={}", page::encode(next))) {
                            "Sign in with your identity provider"
                        }
                    }
                    p.hint { "Through " code { (oidc.settings().issuer) } ". Or, for automation and break-glass, with a token:" }
                }
                form method="post" action="/console/sign-in" {
                    input type="hidden" name="next" value=(next);
                    label for="token" { "Admin bearer token" }
                    input #token type="password" name="token" autocomplete="current-password" required autofocus;
                    p.hint { "A token made by " code { "kasi admin-token" } ", listed in the hub's "
                        code { "--admin-tokens" } " file. What you may see and change follows its role (operator, finance, viewer, auditor, or a DFSP's own view)." }
                    button type="submit" { "Sign in" }
                }
            }
    };
    let mut response = (
        status,
        page::bare("Sign in", html! {}, page::Width::Narrow, main),
    )
        .into_response();
    page::harden(response.headers_mut());
    response
}

pub(crate) async fn sign_in(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    let fields = Fields(form);
    let next = next_page(fields.get("next")).to_string();
    if !same_origin(&headers) {
        return sign_in_form(
            &console,
            &next,
            Some("Sign-in refused: the form was posted from another site."),
        );
    }
    let token = fields.get("token").unwrap_or("").trim();
    if console.auth.is_open() {
        return see_other(&next);
    }
    match (!token.is_empty())
        .then(|| console.auth.identify(Some(token), None))
        .flatten()
    {
        Some(caller) => signed_in(
            &console,
            caller,
            Credential::Bearer(token.to_string()),
            see_other(&next),
        ),
        None => {
            tracing::info!("console sign-in refused: the token is not in the admin tokens file");
            sign_in_form(
                &console,
                &next,
                Some("That token is not valid for this hub's admin API."),
            )
        }
    }
}

/// Opens a session for a person who just signed in (by token or through
/// the identity provider), logs it with where the credential came from,
/// and sets the session's cookie on `response`.
pub(crate) fn signed_in(
    console: &Console,
    caller: Caller,
    credential: Credential,
    mut response: Response,
) -> Response {
    tracing::info!(
        actor = %caller.name,
        role = %caller.role,
        source = caller.source.as_str(),
        "console sign-in"
    );
    let (id, _) = console.sessions.open(caller, credential);
    if let Ok(value) = cookie(&id, console.secure_cookies).parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    page::harden(response.headers_mut());
    response
}

/// A browser says where a form came from; one from another site is not a
/// person signing in here. (No `Origin` at all: not a browser's cross-site
/// post, allowed.)
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    origin
        .split_once("://")
        .is_some_and(|(_, authority)| authority == host)
}

pub(crate) async fn sign_out(headers: HeaderMap, Posted { visitor, .. }: Posted) -> Response {
    if let Some(id) = session_id(&headers) {
        visitor.console.sessions.close(id);
    }
    let mut response = see_other("/console/sign-in");
    if let Ok(value) =
        format!("{SESSION_COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0").parse()
    {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    page::harden(response.headers_mut());
    response
}

/// What the page header shows about the person.
pub(crate) fn who(visitor: &Visitor) -> maud::Markup {
    html! {
        span.who { (visitor.session.caller.name) " · " (visitor.session.caller.role.to_string()) }
        @if !visitor.console.auth.is_open() {
            form.inline method="post" action="/console/sign-out" {
                input type="hidden" name="csrf" value=(visitor.session.csrf);
                button.link type="submit" { "Sign out" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_console_pages_are_places_to_go_after_signing_in() {
        assert_eq!(
            next_page(Some("/console/participants?x=1")),
            "/console/participants?x=1"
        );
        for elsewhere in [
            "https://evil.example/",
            "//evil.example/console/",
            "/metrics",
            "/console/\\evil",
        ] {
            assert_eq!(next_page(Some(elsewhere)), "/console/", "{elsewhere}");
        }
        assert_eq!(next_page(None), "/console/");
    }

    #[test]
    fn sessions_end_when_idle_and_a_refresh_is_not_activity() {
        let sessions = Sessions::default();
        let caller = Caller {
            name: "alice".to_string(),
            role: hub::admin_auth::Role::Viewer,
            source: hub::admin_auth::Source::TokensFile,
        };
        let (id, session) = sessions.open(caller, Credential::Ambient);
        let seen = *session.last_seen.lock().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(sessions.find(&id, false).is_some());
        assert_eq!(*session.last_seen.lock().unwrap(), seen, "a refresh");
        assert!(sessions.find(&id, true).is_some());
        assert!(
            *session.last_seen.lock().unwrap() > seen,
            "a person's request"
        );
        let later = Instant::now() + IDLE_TIMEOUT + Duration::from_secs(1);
        assert!(session.expired(later));
        sessions.close(&id);
        assert!(sessions.find(&id, true).is_none());
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "a=1; kasi_console=abc; b=2".parse().unwrap(),
        );
        assert_eq!(session_id(&headers), Some("abc"));
        assert!(cookie("abc", true).ends_with("SameSite=Strict; Secure"));
        assert!(cookie("abc", false).contains("HttpOnly"));
    }

    #[test]
    fn a_form_posted_from_another_site_is_not_a_sign_in() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "127.0.0.1:3001".parse().unwrap());
        assert!(
            same_origin(&headers),
            "no Origin: not a cross-site browser post"
        );
        headers.insert(header::ORIGIN, "http://127.0.0.1:3001".parse().unwrap());
        assert!(same_origin(&headers));
        headers.insert(header::ORIGIN, "https://evil.example".parse().unwrap());
        assert!(!same_origin(&headers));
    }
}
