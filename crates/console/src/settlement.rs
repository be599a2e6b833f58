//! Settlement: windows and their content, closing a window, creating a
//! settlement, moving it through its stages or finalizing it in one
//! action, its report as CSV (central-settlement's v2 API under `/v2`).

use std::collections::HashMap;

use axum::extract::Path;
use axum::http::{header, Method};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use serde_json::{json, Value};

use crate::api::ApiError;
use crate::page::{self, Flash, Section};
use crate::session::{Posted, Visitor};

/// Every window or settlement since this instant (the API wants a filter).
const SINCE_EVER: &str = "fromDateTime=2000-01-01T00:00:00.000Z";
/// Windows and settlements listed, newest first.
const LISTED: usize = 30;

/// The stages a settlement's accounts go through, in order.
const STAGES: [&str; 5] = [
    "PENDING_SETTLEMENT",
    "PS_TRANSFERS_RECORDED",
    "PS_TRANSFERS_RESERVED",
    "PS_TRANSFERS_COMMITTED",
    "SETTLED",
];

fn next_stage(state: &str) -> Option<&'static str> {
    let at = STAGES.iter().position(|s| *s == state)?;
    STAGES.get(at + 1).copied()
}

/// A list that the API answers "not found" when empty.
fn list_or_empty(read: Result<Value, ApiError>) -> Result<Vec<Value>, ApiError> {
    match read {
        Ok(Value::Array(list)) => Ok(list),
        Ok(_) => Ok(Vec::new()),
        // "…not found" for windows, "No settlements found…" for settlements.
        Err(error) if error.code == "3100" && error.description.contains("found") => Ok(Vec::new()),
        Err(error) => Err(error),
    }
}

fn settlement_path(id: &str) -> String {
    format!("/console/settlement/settlements/{}", page::encode(id))
}

pub(crate) async fn overview(visitor: Visitor) -> Response {
    let (windows, settlements, models) = tokio::join!(
        visitor.get(&format!("/v2/settlementWindows?{SINCE_EVER}")),
        visitor.get(&format!("/v2/settlements?{SINCE_EVER}")),
        visitor.get("/settlementModels"),
    );
    let (windows, mut settlements, models) =
        match (list_or_empty(windows), list_or_empty(settlements), models) {
            (Ok(w), Ok(s), Ok(m)) => (w, s, m),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                return page::api_failure(&visitor, Section::Settlement, &e)
            }
        };
    settlements.sort_by_key(|s| std::cmp::Reverse(s["id"].as_u64().unwrap_or(0)));
    let may_change = visitor.may_change();
    let closed: Vec<&Value> = windows.iter().filter(|w| w["state"] == "CLOSED").collect();
    let content = html! {
        h1 { "Settlement" }
        h2 { "Settlement windows" }
        div.table-wrap {
            table.windows {
                thead { tr {
                    th.num scope="col" { "Window" }
                    th scope="col" { "State" }
                    th scope="col" { "Opened" }
                    th scope="col" { "Changed" }
                    th scope="col" { "Content" }
                    @if may_change { th scope="col" { "Action" } }
                } }
                tbody {
                    @for w in windows.iter().take(LISTED) {
                        @let id = page::text(&w["settlementWindowId"]);
                        tr data-window=(id) {
                            td.num { (id) }
                            td { span class={ "status " (state_class(&page::text(&w["state"]))) } { (page::text(&w["state"])) } }
                            td { (page::time_cell(&w["createdDate"])) }
                            td { (page::time_cell(&w["changedDate"])) }
                            td { (window_content(w)) }
                            @if may_change {
                                td {
                                    @if w["state"] == "OPEN" {
                                        form.inline method="post" action={ "/console/settlement/windows/" (id) "/close" } {
                                            (page::csrf(&visitor))
                                            label.sr-only for={ "close-reason-" (id) } { "Reason" }
                                            input id={ "close-reason-" (id) } name="reason" value="closed from the console" required;
                                            " "
                                            button type="submit" { "Close window " (id) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if may_change {
            section #create-settlement {
                h2 { "Create a settlement" }
                @if closed.is_empty() {
                    p { "No closed window waits for a settlement: close the open window first." }
                } @else {
                    form.grid method="post" action="/console/settlement/settlements" {
                        (page::csrf(&visitor))
                        fieldset {
                            legend { "Windows" }
                            @for w in &closed {
                                @let id = page::text(&w["settlementWindowId"]);
                                label.check {
                                    input type="checkbox" name="window" value=(id) checked;
                                    " Window " (id) " (closed " (page::time(&page::text(&w["changedDate"]))) ")"
                                }
                            }
                        }
                        label for="settlement-model" { "Settlement model" }
                        select #settlement-model name="model" {
                            @for m in models.as_array().into_iter().flatten() {
                                option value=(page::text(&m["name"])) { (page::text(&m["name"])) " (" (page::text(&m["settlementGranularity"])) " " (page::text(&m["settlementInterchange"])) ")" }
                            }
                        }
                        label for="settlement-reason" { "Reason" }
                        input #settlement-reason name="reason" value="settlement from the console" required;
                        button type="submit" { "Create settlement" }
                    }
                }
            }
        }
        h2 { "Settlements" }
        @if settlements.is_empty() {
            p { "None yet." }
        } @else {
            div.table-wrap {
                table {
                    thead { tr {
                        th.num scope="col" { "Settlement" }
                        th scope="col" { "State" }
                        th scope="col" { "Windows" }
                        th scope="col" { "Created" }
                        th scope="col" { "Changed" }
                    } }
                    tbody {
                        @for s in settlements.iter().take(LISTED) {
                            @let id = page::text(&s["id"]);
                            tr {
                                td.num { a href=(settlement_path(&id)) { (id) } }
                                td { span class={ "status " (state_class(&page::text(&s["state"]))) } { (page::text(&s["state"])) } }
                                td { (s["settlementWindows"].as_array().into_iter().flatten().map(|w| page::text(&w["id"])).collect::<Vec<_>>().join(", ")) }
                                td { (page::time_cell(&s["createdDate"])) }
                                td { (page::time_cell(&s["changedDate"])) }
                            }
                        }
                    }
                }
            }
        }
    };
    page::render(&visitor, Section::Settlement, "Settlement", content)
}

fn state_class(state: &str) -> &'static str {
    match state {
        "OPEN" | "SETTLED" => "ok",
        "ABORTED" => "alarm",
        _ => "warn",
    }
}

fn window_content(window: &Value) -> Markup {
    let content: Vec<&Value> = window["content"].as_array().into_iter().flatten().collect();
    html! {
        @if content.is_empty() {
            span.muted { "—" }
        } @else {
            @for c in content {
                div { (page::text(&c["ledgerAccountType"])) " " (page::text(&c["currencyId"])) ": " (page::text(&c["state"]))
                    @if let Some(s) = c["settlementId"].as_u64() { " (settlement " a href=(settlement_path(&s.to_string())) { (s) } ")" } }
            }
        }
    }
}

pub(crate) async fn close_window(
    Path(id): Path<String>,
    Posted { visitor, fields }: Posted,
) -> Response {
    let result = visitor
        .call(
            Method::POST,
            &format!("/v2/settlementWindows/{}", page::encode(&id)),
            Some(&json!({ "state": "CLOSED", "reason": fields.text("reason") })),
        )
        .await;
    visitor.after_change(
        result,
        |_| format!("Window {id} closed; a new window is open"),
        "/console/settlement",
    )
}

pub(crate) async fn create_settlement(Posted { visitor, fields }: Posted) -> Response {
    let windows: Vec<Value> = fields
        .all("window")
        .filter_map(|id| id.trim().parse::<u64>().ok())
        .map(|id| json!({ "id": id }))
        .collect();
    let result = visitor
        .call(
            Method::POST,
            "/v2/settlements",
            Some(&json!({
                "settlementModel": fields.text("model"),
                "reason": fields.text("reason"),
                "settlementWindows": windows,
            })),
        )
        .await;
    match result {
        Ok(created) => {
            let id = page::text(&created["id"]);
            visitor
                .session
                .set_flash(Flash::ok(format!("Settlement {id} created")));
            visitor.redirect(&settlement_path(&id))
        }
        Err(error) => visitor.after_change(Err(error), |_| String::new(), "/console/settlement"),
    }
}

/// Account id → participant name, from the participants' accounts.
async fn account_owners(visitor: &Visitor) -> Result<HashMap<u64, String>, ApiError> {
    let participants = visitor.get("/participants").await?;
    let mut owners = HashMap::new();
    for p in participants.as_array().into_iter().flatten() {
        for a in p["accounts"].as_array().into_iter().flatten() {
            if let Some(id) = a["id"].as_u64() {
                owners.insert(id, page::text(&p["name"]));
            }
        }
    }
    Ok(owners)
}

pub(crate) async fn detail(visitor: Visitor, Path(id): Path<String>) -> Response {
    let (settlement, owners) = tokio::join!(
        visitor.get(&format!("/v2/settlements/{}", page::encode(&id))),
        account_owners(&visitor)
    );
    let (settlement, owners) = match (settlement, owners) {
        (Ok(s), Ok(o)) => (s, o),
        (Err(e), _) | (_, Err(e)) => return page::api_failure(&visitor, Section::Settlement, &e),
    };
    let state = page::text(&settlement["state"]);
    let finished = matches!(state.as_str(), "SETTLED" | "ABORTED");
    let here = settlement_path(&id);
    let may_change = visitor.may_change();
    let content = html! {
        h1 { "Settlement " (id) " " span class={ "status " (state_class(&state)) } { (state) } }
        p.hint { "Created " (page::time_cell(&settlement["createdDate"])) "; reason: " (page::text(&settlement["reason"])) }
        p { a.button href={ (here) "/report.csv" } download={ "settlement-" (id) ".csv" } { "Download the report (CSV)" } }
        h2 { "Net settlement amounts" }
        div.table-wrap {
            table.settlement {
                thead { tr {
                    th scope="col" { "Participant" }
                    th.num scope="col" { "Account" }
                    th.num scope="col" { "Net amount" }
                    th scope="col" { "State" }
                } }
                tbody {
                    @for p in settlement["participants"].as_array().into_iter().flatten() {
                        @for a in p["accounts"].as_array().into_iter().flatten() {
                            @let account = a["id"].as_u64().unwrap_or(0);
                            tr {
                                td { (owners.get(&account).cloned().unwrap_or_else(|| format!("participant {}", page::text(&p["id"])))) }
                                td.num { (account) }
                                td.num { (page::money(&page::text(&a["netSettlementAmount"]["amount"]), &page::text(&a["netSettlementAmount"]["currency"]))) }
                                td { (page::text(&a["state"])) }
                            }
                        }
                    }
                }
            }
        }
        p.hint { "A positive net amount is owed by the participant (it sent more than it received); a negative one is owed to it." }
        h2 { "Windows" }
        ul {
            @for w in settlement["settlementWindows"].as_array().into_iter().flatten() {
                li { "Window " (page::text(&w["id"])) ": " (page::text(&w["state"])) }
            }
        }
        @if may_change && !finished {
            h2 { "Move it on" }
            div.actions {
                @if let Some(next) = next_stage(&state) {
                    (page::button_form(&visitor, &format!("{here}/advance"), &format!("Advance every account to {next}"), ""))
                }
                (page::button_form(&visitor, &format!("{here}/finalize"), "Finalize (every stage, at once)", "primary"))
                (page::button_form(&visitor, &format!("{here}/abort"), "Abort", "danger"))
            }
            p.hint { "Finalize records, reserves and commits the settlement transfers and marks the accounts SETTLED in one action; with the model's automatic position reset, positions go back by the net amounts." }
        }
    };
    page::render(
        &visitor,
        Section::Settlement,
        &format!("Settlement {id}"),
        content,
    )
}

pub(crate) async fn advance(Path(id): Path<String>, Posted { visitor, .. }: Posted) -> Response {
    let here = settlement_path(&id);
    let api_path = format!("/v2/settlements/{}", page::encode(&id));
    let settlement = match visitor.get(&api_path).await {
        Ok(s) => s,
        Err(e) => return page::api_failure(&visitor, Section::Settlement, &e),
    };
    let mut next_states = Vec::new();
    let participants: Vec<Value> = settlement["participants"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let accounts: Vec<Value> = p["accounts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| {
                    let next = next_stage(a["state"].as_str()?)?;
                    next_states.push(next);
                    Some(json!({ "id": a["id"], "state": next, "reason": "advanced from the console" }))
                })
                .collect();
            (!accounts.is_empty()).then(|| json!({ "id": p["id"], "accounts": accounts }))
        })
        .collect();
    if participants.is_empty() {
        visitor
            .session
            .set_flash(Flash::error("No account has a next stage"));
        return visitor.redirect(&here);
    }
    next_states.dedup();
    let result = visitor
        .call(
            Method::PUT,
            &api_path,
            Some(&json!({ "participants": participants })),
        )
        .await;
    // central-settlement answers 200 with per-account errors inside.
    let refused: Vec<String> = result
        .as_ref()
        .ok()
        .map(|answer| {
            answer["participants"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|p| p["accounts"].as_array().into_iter().flatten())
                .filter_map(|a| a["errorInformation"]["errorDescription"].as_str())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if !refused.is_empty() {
        visitor.session.set_flash(Flash::error(refused.join("; ")));
        return visitor.redirect(&here);
    }
    visitor.after_change(
        result,
        |_| {
            format!(
                "Settlement {id}: accounts advanced to {}",
                next_states.join(", ")
            )
        },
        &here,
    )
}

pub(crate) async fn finalize(Path(id): Path<String>, Posted { visitor, .. }: Posted) -> Response {
    let result = visitor
        .call(
            Method::POST,
            &format!("/v2/settlements/{}/finalize", page::encode(&id)),
            Some(&json!({ "reason": "finalized from the console" })),
        )
        .await;
    visitor.after_change(
        result,
        |_| format!("Settlement {id} finalized"),
        &settlement_path(&id),
    )
}

pub(crate) async fn abort(Path(id): Path<String>, Posted { visitor, .. }: Posted) -> Response {
    let result = visitor
        .call(
            Method::PUT,
            &format!("/v2/settlements/{}", page::encode(&id)),
            Some(&json!({ "state": "ABORTED", "reason": "aborted from the console" })),
        )
        .await;
    visitor.after_change(
        result,
        |_| format!("Settlement {id} aborted"),
        &settlement_path(&id),
    )
}

/// The API's CSV report, as a download.
pub(crate) async fn report(visitor: Visitor, Path(id): Path<String>) -> Response {
    let raw = visitor
        .call_raw(
            Method::GET,
            &format!("/v2/settlements/{}/report", page::encode(&id)),
            None,
            "text/csv",
        )
        .await;
    match raw {
        Ok(raw) if raw.status.is_success() => {
            let disposition = format!(
                "attachment; filename=\"settlement-{}.csv\"",
                id.chars().filter(char::is_ascii_digit).collect::<String>()
            );
            visitor.finish(
                (
                    [
                        (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
                        (header::CONTENT_DISPOSITION, disposition),
                    ],
                    raw.body,
                )
                    .into_response(),
            )
        }
        Ok(raw) => {
            let error = ApiError {
                status: raw.status,
                code: String::new(),
                description: String::from_utf8_lossy(&raw.body).into_owned(),
            };
            page::api_failure(&visitor, Section::Settlement, &error)
        }
        Err(error) => page::api_failure(&visitor, Section::Settlement, &error),
    }
}
