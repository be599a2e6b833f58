//! The page frame, the console's assets and the ways numbers, amounts and
//! times are shown.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ledger::Amount;
use maud::{html, Markup, DOCTYPE};
use serde_json::Value;

use crate::api::ApiError;
use crate::session::{self, Visitor};

const STYLESHEET: &str = include_str!("../assets/console.css");
const SCRIPT: &str = include_str!("../assets/console.js");

/// Where a page belongs in the navigation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Overview,
    Participants,
    Fx,
    Transfers,
    Dashboard,
    Settlement,
    Audit,
    Approvals,
    Scheme,
}

const SECTIONS: [(Section, &str, &str); 9] = [
    (Section::Overview, "Overview", "/console/"),
    (
        Section::Participants,
        "Participants",
        "/console/participants",
    ),
    (Section::Fx, "FX", "/console/fx"),
    (Section::Transfers, "Transfers", "/console/transfers"),
    (Section::Dashboard, "Dashboard", "/console/dashboard"),
    (Section::Settlement, "Settlement", "/console/settlement"),
    (Section::Audit, "Audit", "/console/audit"),
    (Section::Approvals, "Approvals", "/console/approvals"),
    (Section::Scheme, "Scheme", "/console/scheme"),
];

/// A message shown once, on the page after a change.
#[derive(Clone, Debug)]
pub(crate) struct Flash {
    pub ok: bool,
    pub text: String,
}

impl Flash {
    pub fn ok(text: impl Into<String>) -> Flash {
        Flash {
            ok: true,
            text: text.into(),
        }
    }

    pub fn error(text: impl Into<String>) -> Flash {
        Flash {
            ok: false,
            text: text.into(),
        }
    }
}

/// A submitted form, in order (a field may repeat: checkboxes).
pub(crate) struct Fields(pub Vec<(String, String)>);

impl Fields {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// A field's value, trimmed; empty when absent.
    pub fn text(&self, name: &str) -> &str {
        self.get(name).unwrap_or("").trim()
    }

    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// Headers on every console answer: nothing from elsewhere runs in a
/// console page, it is never framed, nothing of it is cached, and its
/// addresses are not sent to other sites as a referrer (`same-origin`, not
/// `no-referrer`: with that, browsers send `Origin: null` on the console's
/// own forms, and the sign-in's origin check could not tell them apart).
pub(crate) fn harden(headers: &mut HeaderMap) {
    let set = |headers: &mut HeaderMap, name, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(
        headers,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(headers, header::REFERRER_POLICY, "same-origin");
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    set(headers, header::CACHE_CONTROL, "no-store");
}

/// The sections this visitor may open (a link it may not follow is not
/// shown); a DFSP-scoped person's first is its own DFSP's page, its portal.
fn sections(visitor: &Visitor) -> Vec<(Section, String, String)> {
    let own = visitor.session.caller.role.dfsp();
    SECTIONS
        .iter()
        .filter(|(_, _, href)| visitor.may_read(href))
        .map(|(s, label, href)| match (s, own) {
            (Section::Overview, Some(dfsp)) => (
                Section::Participants,
                dfsp.to_string(),
                format!("/console/participants/{}", encode(dfsp.as_str())),
            ),
            _ => (*s, label.to_string(), href.to_string()),
        })
        .collect()
}

/// A page of the console: header with navigation and the person, the
/// flash message if any, the content.
pub(crate) fn render(
    visitor: &Visitor,
    section: Section,
    title: &str,
    content: Markup,
) -> Response {
    render_with(visitor, section, title, content, StatusCode::OK)
}

pub(crate) fn render_with(
    visitor: &Visitor,
    section: Section,
    title: &str,
    content: Markup,
    status: StatusCode,
) -> Response {
    let flash = visitor.session.take_flash();
    let header = html! {
        header.top {
            a.brand href="/console/" { "kasi" }
            nav aria-label="Sections" {
                @for (s, label, href) in sections(visitor) {
                    @if s == section {
                        a href=(href) aria-current="page" { (label) }
                    } @else {
                        a href=(href) { (label) }
                    }
                }
            }
            div.person { (session::who(visitor)) }
        }
    };
    let main = html! {
        @if let Some(flash) = flash {
            @if flash.ok {
                p.flash.ok role="status" { (flash.text) }
            } @else {
                p.flash.error role="alert" { (flash.text) }
            }
        }
        (content)
    };
    visitor.finish((status, bare(title, header, Width::Full, main)).into_response())
}

/// How wide a page's main content runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    Full,
    /// A short form alone (sign-in, a refusal).
    Narrow,
}

/// The id of every page's `<main>`, which the skip link targets.
pub(crate) const MAIN_ID: &str = "main";

/// The HTML document: the skip link first (the first thing a keyboard
/// reaches, so a person need not tab through the navigation on every
/// page), then `before_main` (the header), then the main content.
pub(crate) fn bare(
    title: &str,
    before_main: Markup,
    width: Width,
    main: Markup,
) -> axum::response::Html<String> {
    let body = html! {
        a.skip-link href={ "#" (MAIN_ID) } { "Skip to main content" }
        (before_main)
        // Focusable by the skip link (tabindex -1: not in the tab order).
        main id=(MAIN_ID) tabindex="-1" class=[(width == Width::Narrow).then_some("narrow")] { (main) }
    };
    let document = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · kasi console" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body { (body) }
        }
    };
    axum::response::Html(document.into_string())
}

/// The admin API refused a read a page needs: say what it said. A session
/// whose credential no longer works (a token revoked) signs in again.
pub(crate) fn api_failure(visitor: &Visitor, section: Section, error: &ApiError) -> Response {
    if error.status == StatusCode::UNAUTHORIZED {
        return visitor.redirect("/console/sign-in");
    }
    let status = if error.status.is_client_error() {
        error.status
    } else {
        StatusCode::BAD_GATEWAY
    };
    render_with(
        visitor,
        section,
        "Error",
        html! {
            h1 { "The admin API refused" }
            p.flash.error role="alert" { (error.message()) }
        },
        status,
    )
}

/// A plain page for what happens before a session exists.
pub(crate) fn plain_error(status: StatusCode, text: &str) -> Response {
    let mut response = (
        status,
        bare(
            "Error",
            html! {},
            Width::Narrow,
            html! { h1 { "Refused" } p.flash.error role="alert" { (text) } p { a href="/console/" { "Back to the console" } } },
        ),
    )
        .into_response();
    harden(response.headers_mut());
    response
}

pub(crate) async fn to_overview() -> Response {
    session::see_other("/console/")
}

pub(crate) async fn stylesheet() -> Response {
    asset(STYLESHEET, "text/css; charset=utf-8")
}

pub(crate) async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

fn asset(text: &'static str, content_type: &'static str) -> Response {
    let mut response = ([(header::CONTENT_TYPE, content_type)], text).into_response();
    harden(response.headers_mut());
    // Small, and it changes with the binary only: a browser may keep it
    // for a few minutes.
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=300"),
    );
    response
}

/// Percent-encodes a path segment or query value.
/// The date presets of the pages that narrow by date: label, and how far
/// back from now (0: since midnight UTC).
pub(crate) const DATE_PRESETS: [(&str, i64); 4] = [
    ("Today", 0),
    ("48 hours", 48 * 3_600_000),
    ("Week", 7 * 86_400_000),
    ("Month", 30 * 86_400_000),
];

pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// A JSON value as text: a string as itself, a number as written.
pub(crate) fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// An API time (ISO 8601, UTC) as a person reads it, zone shown:
/// `2026-11-23 20:02:31 UTC`.
pub(crate) fn time(iso: &str) -> String {
    if iso.is_empty() {
        return String::new();
    }
    let trimmed = iso.trim_end_matches('Z');
    let trimmed = trimmed.split('.').next().unwrap_or(trimmed);
    format!("{} UTC", trimmed.replacen('T', " ", 1))
}

pub(crate) fn time_cell(value: &Value) -> Markup {
    let iso = text(value);
    html! { time datetime=(iso) { (time(&iso)) } }
}

/// To the millisecond, for the phases of one transfer.
pub(crate) fn time_cell_ms(value: &Value) -> Markup {
    let iso = text(value);
    let shown = format!("{} UTC", iso.trim_end_matches('Z').replacen('T', " ", 1));
    html! { time datetime=(iso) { (shown) } }
}

/// A decimal amount with thousands separators, exactly as given (no
/// floating point on the way): `-1234567.5` → `-1,234,567.5`.
pub(crate) fn grouped(amount: &str) -> String {
    let (sign, digits) = match amount.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", amount),
    };
    let (whole, fraction) = match digits.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (digits, None),
    };
    let mut out = String::from(sign);
    for (i, c) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(fraction) = fraction {
        out.push('.');
        out.push_str(fraction);
    }
    out
}

/// An amount with its currency, for a right-aligned cell.
pub(crate) fn money(amount: &str, currency: &str) -> Markup {
    html! { span.money { (grouped(amount)) " " abbr.currency { (currency) } } }
}

/// An account value from the API, exactly: the admin API writes balances
/// with a sign (a settlement account holding deposits is negative), which
/// the ledger's lenient parser (for amounts sent in) does not take.
pub(crate) fn signed_amount(value: &Value) -> Option<Amount> {
    Amount::parse_signed(&text(value)).ok()
}

/// A JSON number that [`crate::api::exact_numbers`] may have turned into a
/// string, as a float (for rates and durations, never amounts).
pub(crate) fn float(value: &Value) -> Option<f64> {
    value
        .as_f64()
        .or_else(|| value.as_str().and_then(|text| text.parse().ok()))
}

/// A transfer's or conversion's state (the FSPIOP or the store's name),
/// coloured by what it means: committed, still open, or ended without
/// moving funds.
pub(crate) fn state_badge(state: &str) -> Markup {
    let class = match state {
        "COMMITTED" => "ok",
        "RESERVED" | "RECEIVED" => "warn",
        _ => "alarm",
    };
    html! { span class={ "status " (class) } { (state) } }
}

/// A count as a person reads it.
pub(crate) fn count(n: u64) -> String {
    grouped(&n.to_string())
}

/// A small inline script-free form with one button (and the CSRF token).
pub(crate) fn button_form(visitor: &Visitor, action: &str, label: &str, class: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            input type="hidden" name="csrf" value=(visitor.session.csrf);
            button type="submit" class=(class) { (label) }
        }
    }
}

pub(crate) fn csrf(visitor: &Visitor) -> Markup {
    html! { input type="hidden" name="csrf" value=(visitor.session.csrf); }
}

/// An API route's CSV (asked with `Accept: text/csv`) as a download named
/// `file`; an error page of `section` when the API refuses.
pub(crate) async fn csv_download(
    visitor: &crate::session::Visitor,
    api_path: &str,
    file: &str,
    section: Section,
) -> axum::response::Response {
    use axum::http::header;
    use axum::response::IntoResponse;
    let raw = visitor
        .call_raw(axum::http::Method::GET, api_path, None, "text/csv")
        .await;
    match raw {
        Ok(raw) if raw.status.is_success() => visitor.finish(
            (
                [
                    (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
                    (
                        header::CONTENT_DISPOSITION,
                        format!("attachment; filename=\"{file}\""),
                    ),
                ],
                raw.body,
            )
                .into_response(),
        ),
        Ok(raw) => {
            let error = crate::api::ApiError {
                status: raw.status,
                code: String::new(),
                description: String::from_utf8_lossy(&raw.body).into_owned(),
            };
            api_failure(visitor, section, &error)
        }
        Err(error) => api_failure(visitor, section, &error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_grouped_exactly() {
        assert_eq!(grouped("0"), "0");
        assert_eq!(grouped("999"), "999");
        assert_eq!(grouped("1000"), "1,000");
        assert_eq!(grouped("-1234567.5"), "-1,234,567.5");
        assert_eq!(
            grouped("123456789012345678.0001"),
            "123,456,789,012,345,678.0001"
        );
    }

    #[test]
    fn balances_keep_their_sign() {
        let parse = |v: Value| signed_amount(&v).map(|a| a.to_string());
        assert_eq!(parse(serde_json::json!(-2000)), Some("-2000".to_string()));
        assert_eq!(parse(serde_json::json!("-0.5")), Some("-0.5".to_string()));
        assert_eq!(parse(serde_json::json!(12.25)), Some("12.25".to_string()));
        assert_eq!(parse(serde_json::json!("x")), None);
    }

    #[test]
    fn times_show_their_zone() {
        assert_eq!(time("2026-11-23T20:02:31.123Z"), "2026-11-23 20:02:31 UTC");
        assert_eq!(time(""), "");
    }

    #[test]
    fn encoding_keeps_only_unreserved_characters() {
        assert_eq!(encode("/console/x?a=b c"), "%2Fconsole%2Fx%3Fa%3Db%20c");
    }
}
