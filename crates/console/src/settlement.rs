//! Settlement: windows and their content, closing a window, creating a
//! settlement, moving it through its stages or finalizing it in one
//! action, its report as CSV (central-settlement's v2 API under `/v2`).

use std::collections::HashMap;

use axum::extract::{Path, Query};
use axum::http::Method;
use axum::response::Response;
use maud::{html, Markup};
use serde_json::{json, Value};

use crate::api::ApiError;
use crate::page::{self, Flash, Section};
use crate::session::{Posted, Visitor};

/// Every window or settlement since this instant (the API wants a filter).
const SINCE_EVER: &str = "fromDateTime=2000-01-01T00:00:00.000Z";
/// Windows and settlements listed, newest first.
const LISTED: usize = 30;

/// The window states the API filters on (`state`); settlements go
/// through the same names.
const WINDOW_STATES: [&str; 5] = ["OPEN", "CLOSED", "PENDING_SETTLEMENT", "SETTLED", "ABORTED"];
const SETTLEMENT_STATES: [&str; 7] = [
    "PENDING_SETTLEMENT",
    "PS_TRANSFERS_RECORDED",
    "PS_TRANSFERS_RESERVED",
    "PS_TRANSFERS_COMMITTED",
    "SETTLING",
    "SETTLED",
    "ABORTED",
];

/// What the overview is narrowed to: creation dates (`YYYY-MM-DD`, UTC,
/// both days included) and a state for each list.
#[derive(Default, serde::Deserialize)]
pub(crate) struct Narrowed {
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
    #[serde(default, rename = "windowState")]
    window_state: String,
    #[serde(default, rename = "settlementState")]
    settlement_state: String,
    /// One window, by its id (a transfer's page links to the window its
    /// commit fell in): the windows listed are that one alone.
    #[serde(default)]
    window: String,
}

/// A `YYYY-MM-DD` day as the API's DateTime at its start (or its last
/// millisecond, `end`); `None` if it is not such a day.
fn day_bound(day: &str, end: bool) -> Option<String> {
    let ms = fspiop::parse_date_time(&format!("{day}T00:00:00.000Z"))?;
    let ms = if end { ms + 86_400_000 - 1 } else { ms };
    Some(hub::format_time(ms))
}

impl Narrowed {
    fn is_empty(&self) -> bool {
        self.from.is_empty()
            && self.to.is_empty()
            && self.window_state.is_empty()
            && self.settlement_state.is_empty()
            && self.window.is_empty()
    }

    /// The API query for windows (`states`: the window states) or
    /// settlements, or why the form is wrong.
    fn query(&self, state: &str, states: &[&str]) -> Result<String, String> {
        let mut query = Vec::new();
        let from = self.from.trim();
        match from {
            "" => query.push(SINCE_EVER.to_string()),
            day => {
                let at = day_bound(day, false)
                    .ok_or_else(|| format!("From '{day}' is not a date (YYYY-MM-DD)"))?;
                query.push(format!("fromDateTime={}", page::encode(&at)));
            }
        }
        match self.to.trim() {
            "" => {}
            day => {
                let at = day_bound(day, true)
                    .ok_or_else(|| format!("To '{day}' is not a date (YYYY-MM-DD)"))?;
                query.push(format!("toDateTime={}", page::encode(&at)));
            }
        }
        match state.trim() {
            "" => {}
            state if states.contains(&state) => query.push(format!("state={state}")),
            other => return Err(format!("'{other}' is not one of {}", states.join(", "))),
        }
        Ok(query.join("&"))
    }
}

/// The filter form above the lists.
fn narrow_form(narrowed: &Narrowed) -> Markup {
    let today_ms = hub::now_ms() / 86_400_000 * 86_400_000;
    let day = |ms: i64| hub::format_time(ms)[..10].to_string();
    html! {
        form.filters method="get" action="/console/settlement" aria-label="Narrow the windows and settlements" {
            label for="narrow-from" { "Created from" }
            input #narrow-from type="date" name="from" value=(narrowed.from);
            label for="narrow-to" { "to" }
            input #narrow-to type="date" name="to" value=(narrowed.to);
            label for="narrow-window-state" { "Window state" }
            select #narrow-window-state name="windowState" {
                option value="" { "any" }
                @for state in WINDOW_STATES {
                    option value=(state) selected[narrowed.window_state == state] { (state) }
                }
            }
            label for="narrow-settlement-state" { "Settlement state" }
            select #narrow-settlement-state name="settlementState" {
                option value="" { "any" }
                @for state in SETTLEMENT_STATES {
                    option value=(state) selected[narrowed.settlement_state == state] { (state) }
                }
            }
            button type="submit" { "Show" }
            " "
            @for (label, back_ms) in page::DATE_PRESETS {
                a.preset href={ "/console/settlement?from=" (day(today_ms - back_ms)) } { (label) }
                " "
            }
            @if !narrowed.is_empty() { a href="/console/settlement" { "All" } }
        }
    }
}

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
        // "settlementWindow by filters: {…} not found" for windows (its
        // end cut off when the filters are long: FSPIOP descriptions are
        // short), "No settlements found…" for settlements.
        Err(error)
            if error.code == "3100"
                && (error.description.contains("found")
                    || error.description.contains("settlementWindow by filters")) =>
        {
            Ok(Vec::new())
        }
        Err(error) => Err(error),
    }
}

/// A settlement window's page: the overview narrowed to that window.
pub(crate) fn window_path(id: &str) -> String {
    let id = page::encode(id);
    format!("/console/settlement?window={id}#window-{id}")
}

fn settlement_path(id: &str) -> String {
    format!("/console/settlement/settlements/{}", page::encode(id))
}

pub(crate) async fn overview(visitor: Visitor, Query(narrowed): Query<Narrowed>) -> Response {
    let queries = narrowed
        .query(&narrowed.window_state, &WINDOW_STATES)
        .and_then(|windows| {
            Ok((
                windows,
                narrowed.query(&narrowed.settlement_state, &SETTLEMENT_STATES)?,
            ))
        });
    let window = narrowed.window.trim();
    let queries = queries.and_then(|queries| match window.parse::<u32>() {
        Err(_) if !window.is_empty() => Err(format!("'{window}' is not a window id")),
        _ => Ok(queries),
    });
    let (window_query, settlement_query) = match queries {
        Ok(queries) => queries,
        Err(why) => {
            let content = html! {
                h1 { "Settlement" }
                (narrow_form(&narrowed))
                p.flash.error role="alert" { (why) }
            };
            let mut response = page::render(&visitor, Section::Settlement, "Settlement", content);
            *response.status_mut() = axum::http::StatusCode::BAD_REQUEST;
            return response;
        }
    };
    // The settlements one may create are offered from every window,
    // whatever the lists are narrowed to.
    let (windows, shown_windows, settlements, models) = tokio::join!(
        visitor.get(&format!("/v2/settlementWindows?{SINCE_EVER}")),
        async {
            match (narrowed.is_empty(), window) {
                (true, _) => None,
                (false, "") => Some(
                    visitor
                        .get(&format!("/v2/settlementWindows?{window_query}"))
                        .await,
                ),
                // One window: the API answers it alone, as a list of one.
                (false, id) => Some(
                    visitor
                        .get(&format!("/v2/settlementWindows/{id}"))
                        .await
                        .map(|one| match one {
                            Value::Object(_) => Value::Array(vec![one]),
                            other => other,
                        }),
                ),
            }
        },
        visitor.get(&format!("/v2/settlements?{settlement_query}")),
        // Read only by whom may create a settlement (a DFSP may not).
        async {
            visitor
                .get_if_may("/settlementModels", "/settlementModels")
                .await
                .unwrap_or(Ok(Value::Array(Vec::new())))
        },
    );
    let shown_windows = shown_windows.map(list_or_empty).transpose();
    let (windows, shown_windows, mut settlements, models) = match (
        list_or_empty(windows),
        shown_windows,
        list_or_empty(settlements),
        models,
    ) {
        (Ok(w), Ok(shown), Ok(s), Ok(m)) => (w, shown, s, m),
        (Err(e), _, _, _) | (_, Err(e), _, _) | (_, _, Err(e), _) | (_, _, _, Err(e)) => {
            return page::api_failure(&visitor, Section::Settlement, &e)
        }
    };
    settlements.sort_by_key(|s| std::cmp::Reverse(s["id"].as_u64().unwrap_or(0)));
    // The API lists the most recently changed window first, so a window
    // just settled would push the open one down: the open one stays on top.
    let mut listed = shown_windows.unwrap_or_else(|| windows.clone());
    listed.sort_by_key(|w| w["state"] != "OPEN");
    let may_change = visitor.may_post("/console/settlement/windows/:id/close");
    let models: Vec<&Value> = models.as_array().into_iter().flatten().collect();
    let offers = settlement_offers(&models, &windows);
    let content = html! {
        h1 { "Settlement" }
        (narrow_form(&narrowed))
        h2 { "Settlement windows" }
        @if !window.is_empty() {
            p.hint { "Window " (window) " only. " a href="/console/settlement" { "Every window" } }
        }
        @if listed.is_empty() { p { "No window matches." } }
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
                    @for w in listed.iter().take(LISTED) {
                        @let id = page::text(&w["settlementWindowId"]);
                        tr id={ "window-" (id) } data-window=(id) {
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
            (create_settlement_forms(&visitor, &offers))
        }
        h2 { "Settlements" }
        @if settlements.is_empty() {
            p { @if narrowed.is_empty() { "None yet." } @else { "No settlement matches." } }
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

/// A settlement model and the windows it can settle now.
struct Offer<'a> {
    model: &'a Value,
    windows: Vec<&'a Value>,
}

/// What the create-settlement section offers: each deferred net model with
/// the windows it applies to (none: not offered, and said why).
struct Offers<'a> {
    offered: Vec<Offer<'a>>,
    /// Models not offered, each with the reason.
    not_offered: Vec<(String, &'static str)>,
}

fn same(value: &Value, text: &str) -> bool {
    value.as_str().is_some_and(|v| v.eq_ignore_ascii_case(text))
}

/// Which models apply to which windows, by the ledger's own rule for a
/// settlement's windows (`create_settlement` in crates/ledger/src/
/// settlement.rs, which refuses any other with "Inapplicable windows"): a
/// deferred net model applies to a closed (or aborted, or partly settled)
/// window holding content not yet settled of the model's ledger account
/// type and currency — a model without a currency takes the currencies no
/// other model names. Computed from the API's answers only, so the form
/// never offers what the API would refuse.
fn settlement_offers<'a>(models: &[&'a Value], windows: &'a [Value]) -> Offers<'a> {
    let named: Vec<String> = models
        .iter()
        .filter_map(|m| m["currency"].as_str())
        .map(str::to_ascii_uppercase)
        .collect();
    let settleable: Vec<&Value> = windows
        .iter()
        .filter(|w| {
            ["CLOSED", "ABORTED", "PENDING_SETTLEMENT"]
                .iter()
                .any(|state| same(&w["state"], state))
        })
        .collect();
    let mut offers = Offers {
        offered: Vec::new(),
        not_offered: Vec::new(),
    };
    for model in models.iter().copied() {
        let name = page::text(&model["name"]);
        let deferred_net = same(&model["settlementGranularity"], "NET")
            && same(&model["settlementDelay"], "DEFERRED");
        if !deferred_net {
            offers.not_offered.push((
                name,
                "gross or immediate: it settles each transfer as it commits",
            ));
            continue;
        }
        let settles = |content: &Value| {
            let currency = page::text(&content["currencyId"]).to_ascii_uppercase();
            let currency_matches = match model["currency"].as_str() {
                Some(own) => own.eq_ignore_ascii_case(&currency),
                None => !named.contains(&currency),
            };
            currency_matches
                && same(
                    &content["ledgerAccountType"],
                    &page::text(&model["ledgerAccountType"]),
                )
                && (same(&content["state"], "CLOSED") || same(&content["state"], "ABORTED"))
        };
        let applicable: Vec<&Value> = settleable
            .iter()
            .copied()
            .filter(|w| w["content"].as_array().into_iter().flatten().any(settles))
            .collect();
        if applicable.is_empty() {
            offers.not_offered.push((
                name,
                "no closed window holds content of its currency waiting for a settlement",
            ));
        } else {
            offers.offered.push(Offer {
                model,
                windows: applicable,
            });
        }
    }
    offers
}

/// One form per model that applies, its windows ticked: a person cannot
/// pick a model for windows it does not settle.
fn create_settlement_forms(visitor: &Visitor, offers: &Offers) -> Markup {
    html! {
        section #create-settlement {
            h2 { "Create a settlement" }
            @if offers.offered.is_empty() {
                p { "No closed window waits for a settlement: close the open window first." }
            }
            @for (n, offer) in offers.offered.iter().enumerate() {
                @let name = page::text(&offer.model["name"]);
                form.grid method="post" action="/console/settlement/settlements" data-model=(name) {
                    (page::csrf(visitor))
                    input type="hidden" name="model" value=(name);
                    fieldset {
                        legend {
                            "With " strong { (name) } " ("
                            (page::text(&offer.model["settlementGranularity"])) " "
                            (page::text(&offer.model["settlementInterchange"])) ", "
                            @match offer.model["currency"].as_str() {
                                Some(currency) => { (currency) }
                                None => { "every currency no other model names" }
                            }
                            "): the windows it settles"
                        }
                        @for w in &offer.windows {
                            @let id = page::text(&w["settlementWindowId"]);
                            label.check {
                                input type="checkbox" name="window" value=(id) checked;
                                " Window " (id) " (" (page::text(&w["state"])) " " (page::time(&page::text(&w["changedDate"]))) ")"
                            }
                        }
                    }
                    label for={ "settlement-reason-" (n) } { "Reason" }
                    input id={ "settlement-reason-" (n) } name="reason" value="settlement from the console" required;
                    button type="submit" { "Create a settlement with " (name) }
                }
            }
            @if !offers.not_offered.is_empty() {
                p.hint {
                    "Not offered: "
                    @for (i, (name, why)) in offers.not_offered.iter().enumerate() {
                        @if i > 0 { "; " }
                        (name) " (" (why) ")"
                    }
                    "."
                }
            }
        }
    }
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

/// The settlement as it was created: its creation's audit event's
/// `after` (the model and the reason). The API's `reason` is the last
/// change's (a finalize or an abort overwrites it, as in
/// central-settlement), and its single read does not name the model; the
/// event was written in the same batch as the settlement, so at its
/// `createdDate` to the millisecond. `None` when that event is no longer
/// among those the hub keeps in memory.
async fn as_created(visitor: &Visitor, settlement: &Value) -> Option<Value> {
    let created = page::encode(settlement["createdDate"].as_str()?);
    let events = visitor
        .get(&format!(
            "/audit-events?action=settlement.create&from={created}&to={created}&limit=1000"
        ))
        .await
        .ok()?;
    events
        .as_array()?
        .iter()
        .map(|e| &e["after"])
        .find(|after| after["id"] == settlement["id"])
        .cloned()
}

/// The settlement's net amounts, one row per account, named by owner.
pub(crate) fn net_amounts(settlement: &Value, owners: &HashMap<u64, String>) -> Markup {
    html! {
        div.table-wrap {
            table.settlement {
                thead { tr {
                    th scope="col" { "Participant" }
                    th.num scope="col" { "Account" }
                    th.num scope="col" { "Net amount" }
                    th scope="col" { "Meaning" }
                    th scope="col" { "State" }
                } }
                tbody {
                    @for p in settlement["participants"].as_array().into_iter().flatten() {
                        @for a in p["accounts"].as_array().into_iter().flatten() {
                            @let account = a["id"].as_u64().unwrap_or(0);
                            @let amount = page::text(&a["netSettlementAmount"]["amount"]);
                            @let owner = owners.get(&account).cloned().unwrap_or_else(|| format!("participant {}", page::text(&p["id"])));
                            tr data-participant=(owner) {
                                td { (owner) }
                                td.num { (account) }
                                td.num { (page::money(&amount, &page::text(&a["netSettlementAmount"]["currency"]))) }
                                td { (net_meaning(&amount)) }
                                td { (page::text(&a["state"])) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What a net amount means for its participant: positive, it sent more
/// than it received and pays; negative, it is paid.
fn net_meaning(amount: &str) -> &'static str {
    let zero = amount
        .trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.');
    if zero {
        "nothing to settle"
    } else if amount.starts_with('-') {
        "is paid"
    } else {
        "pays"
    }
}

pub(crate) async fn settlement_and_owners(
    visitor: &Visitor,
    id: &str,
) -> Result<(Value, HashMap<u64, String>), ApiError> {
    let (settlement, owners) = tokio::join!(
        visitor.get(&format!("/v2/settlements/{}", page::encode(id))),
        account_owners(visitor)
    );
    Ok((settlement?, owners?))
}

pub(crate) async fn detail(visitor: Visitor, Path(id): Path<String>) -> Response {
    let (settlement, owners) = match settlement_and_owners(&visitor, &id).await {
        Ok(read) => read,
        Err(e) => return page::api_failure(&visitor, Section::Settlement, &e),
    };
    let as_created = as_created(&visitor, &settlement).await;
    let created_with = as_created
        .as_ref()
        .and_then(|c| c["reason"].as_str())
        .map(str::to_string);
    let model = as_created.as_ref().and_then(|c| c["model"].as_str());
    let last_reason = page::text(&settlement["reason"]);
    let state = page::text(&settlement["state"]);
    let finished = matches!(state.as_str(), "SETTLED" | "ABORTED");
    let here = settlement_path(&id);
    let may_change = visitor.may_post("/console/settlement/settlements/:id/advance");
    let content = html! {
        h1 { "Settlement " (id) " " span class={ "status " (state_class(&state)) } { (state) } }
        dl.facts {
            dt { "Created" } dd { (page::time_cell(&settlement["createdDate"])) }
            @if let Some(model) = model {
                dt { "Model" } dd { (model) }
            }
            @match &created_with {
                Some(reason) => {
                    dt { "Reason (at creation)" } dd.creation-reason { (reason) }
                    @if *reason != last_reason {
                        dt { "Reason of the last change" } dd { (last_reason) " (" (page::time_cell(&settlement["changedDate"])) ")" }
                    }
                }
                None => {
                    dt { "Reason of the last change" } dd { (last_reason) }
                }
            }
        }
        @if visitor.may_read("/console/settlement/settlements/:id/report.csv") {
            p { a.button href={ (here) "/report.csv" } download={ "settlement-" (id) ".csv" } { "Download the report (CSV)" } }
        }
        h2 { "Net settlement amounts" }
        (net_amounts(&settlement, &owners))
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
                    @let confirm = if FINAL_STAGES.contains(&next) { "…" } else { "" };
                    (page::button_form(&visitor, &format!("{here}/advance"), &format!("Advance every account to {next}{confirm}"), ""))
                }
                (page::button_form(&visitor, &format!("{here}/finalize"), "Finalize (every stage, at once)…", "primary"))
                (page::button_form(&visitor, &format!("{here}/abort"), "Abort", "danger"))
            }
            p.hint { "Finalize records, reserves and commits the settlement transfers and marks the accounts SETTLED in one action; with the model's automatic position reset, positions go back by the net amounts. It asks for confirmation first." }
        }
    };
    page::render(
        &visitor,
        Section::Settlement,
        &format!("Settlement {id}"),
        content,
    )
}

/// The stages an advance cannot be taken back from: the settlement
/// transfers committed (positions and settlement accounts move), then
/// SETTLED. Advancing into one asks for confirmation, with the amounts.
const FINAL_STAGES: [&str; 2] = ["PS_TRANSFERS_COMMITTED", "SETTLED"];

pub(crate) async fn advance(
    Path(id): Path<String>,
    Posted { visitor, fields }: Posted,
) -> Response {
    let here = settlement_path(&id);
    let api_path = format!("/v2/settlements/{}", page::encode(&id));
    let (settlement, owners) = match settlement_and_owners(&visitor, &id).await {
        Ok(read) => read,
        Err(e) => return page::api_failure(&visitor, Section::Settlement, &e),
    };
    let last_step = settlement["participants"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["accounts"].as_array().into_iter().flatten())
        .filter_map(|a| next_stage(a["state"].as_str()?))
        .find(|next| FINAL_STAGES.contains(next));
    if let (Some(next), false) = (last_step, fields.text("confirmed") == "yes") {
        let content = html! {
            h1 #confirm-title { "Confirm: advance settlement " (id) " to " (next) }
            p {
                "This cannot be undone: from " (next) " on the settlement can no longer be aborted. "
                "The net amounts it settles:"
            }
            (net_amounts(&settlement, &owners))
            form method="post" action={ (here) "/advance" } aria-labelledby="confirm-title" {
                (page::csrf(&visitor))
                input type="hidden" name="confirmed" value="yes";
                button.primary type="submit" { "Advance settlement " (id) " to " (next) }
                " "
                a href=(here) { "Cancel" }
            }
        };
        return page::render(
            &visitor,
            Section::Settlement,
            &format!("Advance settlement {id}"),
            content,
        );
    }
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

/// Step one of Finalize: what it will do, the net amounts each participant
/// pays or is paid, and the button that does it. Nothing changes yet.
pub(crate) async fn finalize_review(
    Path(id): Path<String>,
    Posted { visitor, .. }: Posted,
) -> Response {
    let (settlement, owners) = match settlement_and_owners(&visitor, &id).await {
        Ok(read) => read,
        Err(e) => return page::api_failure(&visitor, Section::Settlement, &e),
    };
    let here = settlement_path(&id);
    let content = html! {
        h1 #confirm-title { "Confirm: finalize settlement " (id) }
        p {
            "Finalizing records, reserves and commits the settlement transfers of every account below and marks them SETTLED, "
            "in one action that cannot be undone. Each participant's settlement account moves by its net amount; "
            "with the model's automatic position reset, its position goes back by the same amount."
        }
        (net_amounts(&settlement, &owners))
        form method="post" action={ (here) "/finalize/confirm" } aria-labelledby="confirm-title" {
            (page::csrf(&visitor))
            button.primary type="submit" { "Finalize settlement " (id) }
            " "
            a href=(here) { "Cancel" }
        }
    };
    page::render(
        &visitor,
        Section::Settlement,
        &format!("Finalize settlement {id}"),
        content,
    )
}

/// Step two: the finalize, through the API.
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
    let file = format!(
        "settlement-{}.csv",
        id.chars().filter(char::is_ascii_digit).collect::<String>()
    );
    page::csv_download(
        &visitor,
        &format!("/v2/settlements/{}/report", page::encode(&id)),
        &file,
        Section::Settlement,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str, granularity: &str, currency: Option<&str>) -> Value {
        json!({
            "name": name,
            "settlementGranularity": granularity,
            "settlementInterchange": "MULTILATERAL",
            "settlementDelay": if granularity == "NET" { "DEFERRED" } else { "IMMEDIATE" },
            "ledgerAccountType": "POSITION",
            "currency": currency,
        })
    }

    fn window(id: u32, state: &str, content: &[(&str, &str)]) -> Value {
        let content: Vec<Value> = content
            .iter()
            .map(|(currency, state)| {
                json!({"ledgerAccountType": "POSITION", "currencyId": currency, "state": state})
            })
            .collect();
        json!({"settlementWindowId": id, "state": state, "content": content})
    }

    fn offered(models: &[Value], windows: &[Value]) -> Vec<(String, Vec<u64>)> {
        let models: Vec<&Value> = models.iter().collect();
        settlement_offers(&models, windows)
            .offered
            .iter()
            .map(|offer| {
                let ids = offer
                    .windows
                    .iter()
                    .map(|w| w["settlementWindowId"].as_u64().unwrap());
                (page::text(&offer.model["name"]), ids.collect())
            })
            .collect()
    }

    #[test]
    fn a_model_is_offered_with_the_windows_holding_its_currency_unsettled() {
        let models = [
            model("DEFAULT", "NET", None),
            model("EURONLY", "NET", Some("EUR")),
            model("KESONLY", "NET", Some("KES")),
            model("GROSS", "GROSS", None),
        ];
        let windows = [
            window(4, "OPEN", &[]),
            window(3, "CLOSED", &[("USD", "CLOSED"), ("EUR", "CLOSED")]),
            // Its USD is settled already; its EUR waits.
            window(
                2,
                "PENDING_SETTLEMENT",
                &[("USD", "PENDING_SETTLEMENT"), ("EUR", "CLOSED")],
            ),
            window(1, "SETTLED", &[("USD", "SETTLED")]),
        ];
        assert_eq!(
            offered(&models, &windows),
            [
                ("DEFAULT".to_string(), vec![3]),
                ("EURONLY".to_string(), vec![3, 2])
            ]
        );
        let models: Vec<&Value> = models.iter().collect();
        let not_offered: Vec<String> = settlement_offers(&models, &windows)
            .not_offered
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(not_offered, ["KESONLY", "GROSS"]);
    }

    #[test]
    fn a_default_model_does_not_take_a_currency_another_model_names() {
        let models = [
            model("DEFAULT", "NET", None),
            model("USDONLY", "NET", Some("usd")),
        ];
        let windows = [window(1, "CLOSED", &[("USD", "CLOSED")])];
        assert_eq!(
            offered(&models, &windows),
            [("USDONLY".to_string(), vec![1])]
        );
    }

    #[test]
    fn a_net_amount_says_who_pays() {
        assert_eq!(net_meaning("950"), "pays");
        assert_eq!(net_meaning("-950.5"), "is paid");
        assert_eq!(net_meaning("0"), "nothing to settle");
        assert_eq!(net_meaning("-0.00"), "nothing to settle");
    }
}
