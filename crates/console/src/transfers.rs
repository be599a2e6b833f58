//! Transfers: one found by id with the timeline of its phases, the recent
//! failures by error code, and the callbacks the hub could not deliver.

use axum::extract::Query;
use axum::http::Method;
use axum::response::Response;
use maud::{html, Markup};
use serde_json::Value;

use crate::page::{self, Section};
use crate::session::{Posted, Visitor};

#[derive(serde::Deserialize)]
pub(crate) struct Find {
    id: Option<String>,
}

pub(crate) async fn show(visitor: Visitor, Query(find): Query<Find>) -> Response {
    let id = find
        .id
        .as_deref()
        .map(str::trim)
        .filter(|id| !id.is_empty());
    let (found, errors, dead) = tokio::join!(
        async {
            match id {
                Some(id) => Some(
                    visitor
                        .get(&format!("/transfers/{}", page::encode(id)))
                        .await,
                ),
                None => None,
            }
        },
        visitor.get("/stats/transfer-errors?limit=50"),
        visitor.get("/callbacks/dead-letters"),
    );
    let (errors, dead) = match (errors, dead) {
        (Ok(e), Ok(d)) => (e, d),
        (Err(e), _) | (_, Err(e)) => return page::api_failure(&visitor, Section::Transfers, &e),
    };
    let content = html! {
        h1 { "Transfers" }
        form.search method="get" action="/console/transfers" role="search" {
            label for="transfer-id" { "Transfer id" }
            input #transfer-id name="id" value=(id.unwrap_or("")) placeholder="UUID or ULID" autocomplete="off" required;
            button type="submit" { "Find" }
        }
        @match found {
            None => {}
            Some(Ok(transfer)) => (transfer_detail(&transfer)),
            Some(Err(error)) => {
                @if error.not_found() {
                    p.flash.error role="alert" { "No transfer with id " code { (id.unwrap_or("")) } " is known to the hub." }
                } @else {
                    p.flash.error role="alert" { (error.message()) }
                }
            }
        }
        h2 { "Recent failures" }
        (failures(&errors))
        h2 #dead-letters { "Undelivered callbacks (dead letters)" }
        (dead_letters(&visitor, &dead))
    };
    page::render(&visitor, Section::Transfers, "Transfers", content)
}

fn transfer_detail(t: &Value) -> Markup {
    let currency = page::text(&t["amount"]["currency"]);
    let state = page::text(&t["transferState"]);
    let state_class = match state.as_str() {
        "COMMITTED" => "ok",
        "RESERVED" | "RECEIVED" => "warn",
        _ => "alarm",
    };
    html! {
        section.transfer aria-labelledby="transfer-title" {
            h2 #transfer-title { "Transfer " code { (page::text(&t["transferId"])) } }
            dl.effect {
                dt { "State" } dd { span class={ "status " (state_class) } { (state) }
                    @if let Some(internal) = t["internalState"].as_str() { @if internal != state { " (" (internal) ")" } } }
                dt { "Kind" } dd { (page::text(&t["kind"])) }
                dt { "Payer" } dd { a href={ "/console/participants/" (page::encode(&page::text(&t["payerFsp"]))) } { (page::text(&t["payerFsp"])) } }
                dt { "Payee" } dd { a href={ "/console/participants/" (page::encode(&page::text(&t["payeeFsp"]))) } { (page::text(&t["payeeFsp"])) } }
                dt { "Amount" } dd.num { (page::money(&page::text(&t["amount"]["amount"]), &currency)) }
                dt { "Expiration" } dd { (page::time_cell(&t["expiration"])) }
                @if t["errorCode"].is_string() {
                    dt { "Error" } dd { code { (page::text(&t["errorCode"])) } " " (page::text(&t["errorDescription"])) }
                }
                dt { "Read from" } dd { (if t["source"] == "store" { "the store (past the hub's memory horizon)" } else { "the ledger's memory" }) }
            }
            h3 { "Timeline" }
            ol.timeline {
                @for step in t["timeline"].as_array().into_iter().flatten() {
                    li { span.phase { (page::text(&step["phase"])) } " " (page::time_cell_ms(&step["at"])) }
                }
            }
        }
    }
}

fn failures(errors: &Value) -> Markup {
    let by_code: Vec<&Value> = errors["byCode"].as_array().into_iter().flatten().collect();
    let recent: Vec<&Value> = errors["recent"].as_array().into_iter().flatten().collect();
    html! {
        @if by_code.is_empty() {
            p { "No transfer has failed since the hub started." }
        } @else {
            div.table-wrap {
                table.codes {
                    caption { "Failures by error code, since the hub started" }
                    thead { tr { th scope="col" { "Code" } th.num scope="col" { "Transfers" } } }
                    tbody {
                        @for c in &by_code {
                            tr { td { code { (page::text(&c["code"])) } } td.num { (page::count(c["count"].as_u64().unwrap_or(0))) } }
                        }
                    }
                }
            }
            div.table-wrap {
                table {
                    caption { "The latest failures, newest first" }
                    thead { tr {
                        th scope="col" { "When" }
                        th scope="col" { "Transfer" }
                        th scope="col" { "Payer → payee" }
                        th scope="col" { "Phase" }
                        th scope="col" { "Error" }
                    } }
                    tbody {
                        @for f in &recent {
                            @let id = page::text(&f["transferId"]);
                            tr {
                                td { (page::time_cell(&f["at"])) }
                                td { a href={ "/console/transfers?id=" (page::encode(&id)) } { code { (id) } } }
                                td { (page::text(&f["payerFsp"])) " → " (page::text(&f["payeeFsp"])) }
                                td { (page::text(&f["phase"])) }
                                td { code { (page::text(&f["errorCode"])) } " " (page::text(&f["errorDescription"])) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn dead_letters(visitor: &Visitor, dead: &Value) -> Markup {
    let letters: Vec<&Value> = dead.as_array().into_iter().flatten().collect();
    let mut dfsps: Vec<String> = letters
        .iter()
        .map(|l| page::text(&l["participant"]))
        .collect();
    dfsps.sort();
    dfsps.dedup();
    html! {
        @if letters.is_empty() {
            p { "None: every callback was delivered or is still being tried." }
        } @else {
            p.hint { (letters.len()) " callbacks were given up after their retries; a DFSP can still GET the transfer. Resend a DFSP's once it answers again ("
                code { "POST /callbacks/dead-letters/resend" } ")." }
            @if visitor.may_change() {
                div.actions {
                    @for dfsp in &dfsps {
                        (page::button_form(visitor, &format!("/console/transfers/dead-letters/resend?participant={}", page::encode(dfsp)), &format!("Resend {dfsp}'s"), ""))
                    }
                }
            }
            div.table-wrap {
                table {
                    thead { tr {
                        th scope="col" { "Failed" }
                        th scope="col" { "DFSP" }
                        th scope="col" { "Transfer" }
                        th scope="col" { "Call" }
                        th scope="col" { "Why" }
                    } }
                    tbody {
                        @for l in letters.iter().take(100) {
                            tr {
                                td { (page::time_cell(&l["failedAt"])) }
                                td { (page::text(&l["participant"])) }
                                td { code { (page::text(&l["transferId"])) } }
                                td { code.url { (page::text(&l["method"])) " " (page::text(&l["url"])) } }
                                td { (page::text(&l["reason"])) }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[derive(serde::Deserialize)]
pub(crate) struct Participant {
    participant: String,
}

/// Sends a DFSP's dead letters again (they are kept again if they fail).
pub(crate) async fn resend(
    Query(query): Query<Participant>,
    Posted { visitor, .. }: Posted,
) -> Response {
    let path = format!(
        "/callbacks/dead-letters/resend?participant={}",
        page::encode(&query.participant)
    );
    let result = visitor.call(Method::POST, &path, None).await;
    let done = |answer: &Value| {
        format!(
            "{} dead letters of {} sent again",
            page::text(&answer["resent"]),
            query.participant
        )
    };
    visitor.after_change(result, done, "/console/transfers#dead-letters")
}
