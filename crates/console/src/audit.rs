//! The admin audit events (`GET /audit-events`), filterable.

use axum::extract::Query;
use axum::response::Response;
use maud::{html, Markup};
use serde_json::Value;

use crate::page::{self, Section};
use crate::session::Visitor;

/// The filters `GET /audit-events` takes, passed on as given.
const FILTERS: [(&str, &str, &str); 6] = [
    ("participant", "Participant", "e.g. payerfsp"),
    ("action", "Action", "e.g. funds.in"),
    ("actor", "Actor", "who made the change"),
    (
        "source",
        "Signed in by",
        "tokens-file, identity-provider, certificate",
    ),
    ("from", "From", "2026-11-23T00:00:00.000Z"),
    ("to", "To", "2026-11-24T00:00:00.000Z"),
];

pub(crate) async fn show(visitor: Visitor, Query(query): Query<Vec<(String, String)>>) -> Response {
    let given = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    };
    let mut path = String::from("/audit-events?limit=");
    path.push_str(&page::encode(given("limit").unwrap_or("200")));
    for (name, _, _) in FILTERS {
        if let Some(value) = given(name) {
            path.push_str(&format!("&{name}={}", page::encode(value)));
        }
    }
    let events = visitor.get(&path).await;
    let content = html! {
        h1 { "Audit" }
        p.hint {
            "Every change made through the admin API, by whom, with the target before and after, and every refused attempt: "
            "a change the hub refused (" code { "REFUSED" } " and its error code, the target unchanged), a request without a valid credential ("
            code { "UNAUTHENTICATED" } ") or beyond its role (" code { "FORBIDDEN" } "), a browser's cross-site request. "
            "Refused credentials are coalesced: one event a minute per address or credential, with the count of attempts. "
            "Each event says how its actor signed in: through the identity provider, with a client certificate, or with a token of the tokens file "
            "(automation and break-glass: filter on " code { "tokens-file" } " to review them). "
            "The newest 10,000 are searchable here; older ones stay in the store."
        }
        form.filters method="get" action="/console/audit" {
            @for (name, label, hint) in FILTERS {
                label for={ "audit-" (name) } { (label) }
                input id={ "audit-" (name) } name=(name) value=(given(name).unwrap_or("")) placeholder=(hint);
            }
            label for="audit-limit" { "At most" }
            input #audit-limit name="limit" inputmode="numeric" value=(given("limit").unwrap_or("200"));
            button type="submit" { "Filter" }
        }
        @match &events {
            Ok(events) => (table(events)),
            Err(error) => p.flash.error role="alert" { (error.message()) },
        }
    };
    if let Err(error) = &events {
        if error.status == axum::http::StatusCode::UNAUTHORIZED {
            return visitor.redirect("/console/sign-in");
        }
    }
    page::render(&visitor, Section::Audit, "Audit", content)
}

/// Audit events as a table, newest first (as the API lists them).
pub(crate) fn table(events: &Value) -> Markup {
    let events: Vec<&Value> = events.as_array().into_iter().flatten().collect();
    html! {
        @if events.is_empty() {
            p { "No audit events match." }
        } @else {
            div.table-wrap {
                table.audit {
                    thead { tr {
                        th scope="col" { "When" }
                        th scope="col" { "Actor" }
                        th scope="col" { "Action" }
                        th scope="col" { "Target" }
                        th scope="col" { "Outcome" }
                        th scope="col" { "Change" }
                    } }
                    tbody {
                        @for e in &events {
                            @let outcome = page::text(&e["outcome"]);
                            @let refused = outcome.starts_with("REFUSED") || outcome == "UNAUTHENTICATED" || outcome == "FORBIDDEN";
                            tr.refused[refused] {
                                td { (page::time_cell(&e["time"])) }
                                td {
                                    (page::text(&e["actor"])) " "
                                    span.muted {
                                        "(" (page::text(&e["role"]))
                                        @if let Some(source) = e["source"].as_str() { ", " (source) }
                                        ")"
                                    }
                                }
                                td { code { (page::text(&e["action"])) } }
                                td { (page::text(&e["target"])) }
                                td { @if refused { span.status.alarm { (outcome) } } @else { (outcome) } }
                                td {
                                    details {
                                        summary { "before / after" }
                                        div.diff {
                                            pre { (pretty(&e["before"])) }
                                            pre { (pretty(&e["after"])) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}
