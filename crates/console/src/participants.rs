//! Participants: the list, one DFSP's page (its position in each currency
//! it holds, and its FX corridors if it is a declared FXP), onboarding,
//! limits, activation and mode (pausing a DFSP), funds in and out (with a
//! confirmation of the effect on liquidity), endpoints.

use axum::extract::{Path, Query};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use ledger::Amount;
use maud::{html, Markup};
use serde_json::{json, Value};

use crate::api::ApiError;
use crate::page::{self, Fields, Flash, Section};
use crate::session::{Posted, Visitor};

fn participant_path(name: &str) -> String {
    format!("/participants/{}", page::encode(name))
}

fn console_path(name: &str) -> String {
    format!("/console/participants/{}", page::encode(name))
}

#[derive(serde::Deserialize)]
pub(crate) struct ListQuery {
    /// Part of a name (any case).
    q: Option<String>,
}

pub(crate) async fn list(visitor: Visitor, Query(query): Query<ListQuery>) -> Response {
    let (participants, limits, fxps) = tokio::join!(
        visitor.get("/participants"),
        visitor.get("/participants/limits"),
        visitor.get("/fxps"),
    );
    let (participants, limits, fxps) = match (participants, limits, fxps) {
        (Ok(p), Ok(l), Ok(f)) => (p, l, f),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            return page::api_failure(&visitor, Section::Participants, &e)
        }
    };
    let is_fxp = |name: &str| {
        fxps.as_array()
            .into_iter()
            .flatten()
            .any(|f| f["name"] == name)
    };
    let cap_of = |name: &str, currency: &str| {
        limits.as_array().into_iter().flatten().find_map(|l| {
            (l["name"] == name && l["currency"] == currency)
                .then(|| page::text(&l["limit"]["value"]))
        })
    };
    let wanted = query
        .q
        .as_deref()
        .map(str::trim)
        .unwrap_or("")
        .to_ascii_lowercase();
    let all = participants.as_array().map_or(0, Vec::len);
    let list: Vec<&Value> = participants
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            wanted.is_empty()
                || page::text(&p["name"])
                    .to_ascii_lowercase()
                    .contains(&wanted)
        })
        .collect();
    let content = html! {
        h1 { "Participants" }
        form.search method="get" action="/console/participants" role="search" {
            label for="participant-q" { "Name contains" }
            input #participant-q name="q" value=(wanted) autocomplete="off";
            button type="submit" { "Filter" }
            span.hint { (list.len()) " of " (all) }
        }
        div.table-wrap {
            table {
                thead { tr {
                    th scope="col" { "Name" }
                    th scope="col" { "Status" }
                    th scope="col" { "Currencies" }
                    th.num scope="col" { "Net debit cap" }
                    th scope="col" { "Created" }
                } }
                tbody {
                    @for p in &list {
                        @let name = page::text(&p["name"]);
                        @let currencies: Vec<String> = currencies(p);
                        tr {
                            th scope="row" {
                                a href=(console_path(&name)) { (name) }
                                @if is_fxp(&name) { " " a.badge.fxp href="/console/fx" title="a declared foreign-exchange provider" { "FXP" } }
                            }
                            td {
                                (active_badge(p["isActive"] == 1))
                                // Paused one way: the mode says which.
                                @if p["isActive"] == 1 && p["mode"] != "active" && !p["mode"].is_null() { " " (mode_badge(&page::text(&p["mode"]))) }
                            }
                            td { (currencies.join(", ")) }
                            td.num {
                                @for currency in &currencies {
                                    @if let Some(cap) = cap_of(&name, currency) {
                                        div { (page::money(&cap, currency)) }
                                    }
                                }
                            }
                            td { (page::time_cell(&p["created"])) }
                        }
                    }
                }
            }
        }
        @if visitor.may_post("/console/participants") {
            (onboard_form(&visitor))
        }
    };
    page::render(&visitor, Section::Participants, "Participants", content)
}

fn currencies(participant: &Value) -> Vec<String> {
    let mut list: Vec<String> = participant["accounts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| page::text(&a["currency"]))
        .collect();
    list.sort();
    list.dedup();
    list
}

fn active_badge(active: bool) -> Markup {
    html! {
        @if active { span.badge.on { "active" } } @else { span.badge.off { "inactive" } }
    }
}

fn onboard_form(visitor: &Visitor) -> Markup {
    html! {
        section #onboard {
            h2 { "Onboard a DFSP" }
            p.hint { "Creates the participant and its accounts, sets its net debit cap, registers its callback endpoints under one base URL and, if given, records its first funds in: the same admin API calls a Mojaloop onboarding collection makes. "
                "A participant already onboarded gains the currency: an FXP holds a position in each currency it converts." }
            form.grid method="post" action="/console/participants" {
                (page::csrf(visitor))
                label for="onboard-name" { "Name" }
                input #onboard-name name="name" required maxlength="32" placeholder="e.g. payerfsp" autocomplete="off";
                label for="onboard-currency" { "Currency" }
                input #onboard-currency name="currency" required maxlength="3" placeholder="e.g. USD" autocomplete="off";
                label for="onboard-cap" { "Net debit cap" }
                input #onboard-cap name="netDebitCap" required inputmode="decimal" placeholder="e.g. 10000";
                label for="onboard-base" { "Callback base URL" }
                input #onboard-base name="callbackBase" type="url" placeholder="https://dfsp.example/fspiop (optional)";
                label for="onboard-funds" { "Initial funds in" }
                input #onboard-funds name="fundsIn" inputmode="decimal" placeholder="optional";
                button type="submit" { "Onboard" }
            }
        }
    }
}

/// Runs the onboarding steps in order; the first refusal stops it and is
/// shown with the step it happened at (the steps before it stay done, as
/// they would for a script).
pub(crate) async fn onboard(Posted { visitor, fields }: Posted) -> Response {
    let name = fields.text("name").to_string();
    let currency = fields.text("currency").to_ascii_uppercase();
    match onboarding(&visitor, &fields, &name, &currency).await {
        Ok(done) => {
            visitor.session.set_flash(Flash::ok(done));
            visitor.redirect(&console_path(&name))
        }
        Err((step, error)) => {
            if error.status == StatusCode::UNAUTHORIZED {
                return visitor.redirect("/console/sign-in");
            }
            visitor.session.set_flash(Flash::error(format!(
                "Onboarding {name}: {step} refused: {}",
                error.message()
            )));
            visitor.redirect("/console/participants#onboard")
        }
    }
}

async fn onboarding(
    visitor: &Visitor,
    fields: &Fields,
    name: &str,
    currency: &str,
) -> Result<String, (&'static str, ApiError)> {
    let path = participant_path(name);
    visitor
        .call(
            Method::POST,
            "/participants",
            Some(&json!({ "name": name, "currency": currency })),
        )
        .await
        .map_err(|e| ("creating the participant", e))?;
    visitor
        .call(
            Method::POST,
            &format!("{path}/initialPositionAndLimits"),
            Some(&json!({
                "currency": currency,
                "limit": { "type": "NET_DEBIT_CAP", "value": fields.text("netDebitCap") },
                "initialPosition": 0,
            })),
        )
        .await
        .map_err(|e| ("setting the net debit cap", e))?;
    let base = fields.text("callbackBase").trim_end_matches('/');
    let mut done = format!("{name} onboarded in {currency}");
    if !base.is_empty() {
        // The callbacks under one base URL, as Mojaloop's onboarding
        // collections register them.
        let standard = fspiop::TRANSFER_CALLBACKS
            .iter()
            .chain(fspiop::DISCOVERY_CALLBACKS)
            .chain(fspiop::FX_CALLBACKS);
        for (kind, suffix) in standard.clone() {
            visitor
                .call(
                    Method::POST,
                    &format!("{path}/endpoints"),
                    Some(&json!({ "type": kind, "value": format!("{base}{suffix}") })),
                )
                .await
                .map_err(|e| ("registering the endpoints", e))?;
        }
        done.push_str(&format!(", {} endpoints under {base}", standard.count()));
    }
    let funds = fields.text("fundsIn");
    if !funds.is_empty() {
        let account = settlement_account(visitor, name, currency)
            .await
            .map_err(|e| ("reading the accounts", e))?;
        visitor
            .call(
                Method::POST,
                &format!("{path}/accounts/{account}"),
                Some(&json!({
                    "transferId": new_uuid(),
                    "externalReference": "console onboarding",
                    "action": "recordFundsIn",
                    "reason": "initial liquidity",
                    "amount": { "amount": funds, "currency": currency },
                })),
            )
            .await
            .map_err(|e| ("recording the funds in", e))?;
        done.push_str(&format!(", {funds} {currency} funds in"));
    }
    Ok(done)
}

async fn settlement_account(
    visitor: &Visitor,
    name: &str,
    currency: &str,
) -> Result<u64, ApiError> {
    let accounts = visitor
        .get(&format!("{}/accounts", participant_path(name)))
        .await?;
    accounts
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["ledgerAccountType"] == "SETTLEMENT" && a["currency"] == currency)
        .and_then(|a| a["id"].as_u64())
        .ok_or_else(|| ApiError {
            status: StatusCode::NOT_FOUND,
            code: "3200".to_string(),
            description: format!("{name} has no {currency} settlement account"),
        })
}

/// A version 4 UUID from the OS's randomness: the id of a funds movement,
/// chosen when the form is shown, so that sending it twice is one movement.
pub(crate) fn new_uuid() -> String {
    use std::io::Read as _;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut b))
        .expect("the OS random source (/dev/urandom) is readable");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

pub(crate) async fn detail(visitor: Visitor, Path(name): Path<String>) -> Response {
    let path = participant_path(&name);
    let (participant, accounts, limits, endpoints, health, audit, corridors) = tokio::join!(
        visitor.get(&path),
        visitor.get(&format!("{path}/accounts")),
        visitor.get(&format!("{path}/limits")),
        visitor.get(&format!("{path}/endpoints")),
        visitor.get(&format!(
            "/callbacks/health?participant={}",
            page::encode(&name)
        )),
        async {
            visitor
                .get_if_may(
                    "/audit-events",
                    &format!("/audit-events?participant={}&limit=10", page::encode(&name)),
                )
                .await
                .transpose()
        },
        visitor.get(&format!("{path}/fxCorridors")),
    );
    let read = || {
        Ok::<_, ApiError>((
            participant?,
            accounts?,
            limits?,
            endpoints?,
            health?,
            audit?,
            corridors?,
        ))
    };
    let (participant, accounts_read, limits, endpoints, health, audit, corridors) = match read() {
        Ok(read) => read,
        Err(e) => return page::api_failure(&visitor, Section::Participants, &e),
    };
    let active = participant["isActive"] == 1;
    let mode = page::text(&participant["mode"]);
    let standings = standings(
        &accounts_read,
        &limits.as_array().into_iter().flatten().collect::<Vec<_>>(),
    );
    let corridors: Vec<(String, String)> = corridor_pairs(&corridors);
    let accounts: Vec<&Value> = accounts_read.as_array().into_iter().flatten().collect();
    let currencies: Vec<String> = {
        let mut c: Vec<String> = accounts
            .iter()
            .map(|a| page::text(&a["currency"]))
            .collect();
        c.sort();
        c.dedup();
        c
    };
    let may_activate = visitor.may_post("/console/participants/:name/active");
    let may_pause = visitor.may_post("/console/participants/:name/mode");
    let may_cap = visitor.may_post("/console/participants/:name/limits");
    let may_fund = visitor.may_post("/console/participants/:name/funds");
    let may_fx = visitor.may_post("/console/fx/corridors");
    let may_endpoint = visitor.may_post("/console/participants/:name/endpoints");
    let here = console_path(&name);
    let content = html! {
        h1 { (name) " " (active_badge(active)) " " (mode_badge(&mode)) }
        p.hint { "Created " (page::time_cell(&participant["created"])) }
        p #mode-hint .hint { (mode_words(&mode)) " Transfers already prepared complete whatever the mode." }
        @if may_activate {
            form.inline method="post" action={ (here) "/active" } {
                (page::csrf(&visitor))
                input type="hidden" name="active" value=(if active { "false" } else { "true" });
                button type="submit" class=(if active { "danger" } else { "" }) { (if active { "Deactivate" } else { "Activate" }) }
            }
        }
        @if may_pause {
            form.inline #mode-form method="post" action={ (here) "/mode" } {
                (page::csrf(&visitor))
                label for="mode" { "Mode" }
                select #mode name="mode" {
                    @for (value, words) in MODES {
                        option value=(value) selected[mode == *value] { (words) }
                    }
                }
                label for="mode-reason" { "Reason" }
                input #mode-reason name="reason";
                button type="submit" { "Set mode" }
            }
        }
        h2 { "Accounts" }
        @if visitor.may(&axum::http::Method::GET, "/console/participants/:name/statement", &[("name", name.as_str())]) {
            p {
                "Statement: "
                @for currency in &currencies {
                    a href={ (here) "/statement?currency=" (page::encode(currency)) } { (currency) }
                    " "
                }
            }
        }
        div.table-wrap {
            table {
                thead { tr {
                    th.num scope="col" { "Id" }
                    th scope="col" { "Type" }
                    th scope="col" { "Currency" }
                    th.num scope="col" { "Balance" }
                    th.num scope="col" { "Held" }
                    th scope="col" { "Status" }
                } }
                tbody {
                    @for a in &accounts {
                        @let currency = page::text(&a["currency"]);
                        tr {
                            td.num { (page::text(&a["id"])) }
                            td { (page::text(&a["ledgerAccountType"])) }
                            td { (currency) }
                            td.num { (page::money(&page::text(&a["value"]), &currency)) }
                            td.num { (page::money(&page::text(&a["heldValue"]), &currency)) }
                            td { (active_badge(a["isActive"] == 1)) }
                        }
                    }
                }
            }
        }
        p.hint { "A settlement account's balance is negative by the funds deposited (Mojaloop's sign): its liquidity cover is minus the balance." }
        h2 #positions { "Positions per currency" }
        div.table-wrap {
            table.positions {
                thead { tr { (standing_headers()) } }
                tbody {
                    @for standing in &standings {
                        tr data-currency=(standing.currency) { (standing_cells(standing)) }
                    }
                }
            }
        }
        @if may_cap {
            form.grid method="post" action={ (here) "/limits" } {
                (page::csrf(&visitor))
                label for="limit-currency" { "Currency" }
                (currency_select("limit-currency", &currencies))
                label for="limit-value" { "New net debit cap" }
                input #limit-value name="value" required inputmode="decimal";
                label for="limit-reason" { "Reason" }
                input #limit-reason name="reason";
                button type="submit" { "Set net debit cap" }
            }
        }
        @if may_fund {
            h2 { "Funds in and out" }
            form.grid method="post" action={ (here) "/funds" } {
                (page::csrf(&visitor))
                label for="funds-action" { "Movement" }
                select #funds-action name="action" {
                    option value="in" { "Funds in (deposit)" }
                    option value="out" { "Funds out (withdrawal)" }
                }
                label for="funds-currency" { "Currency" }
                (currency_select("funds-currency", &currencies))
                label for="funds-amount" { "Amount" }
                input #funds-amount name="amount" required inputmode="decimal";
                label for="funds-reason" { "Reason" }
                input #funds-reason name="reason" placeholder="e.g. deposit received 2026-11-23";
                button type="submit" { "Review…" }
            }
        }
        h2 #fx { "Foreign exchange" }
        @if corridors.is_empty() {
            p { (name) " is not a declared FXP: " code { "GET /services/FXP" } " does not name it." }
        } @else {
            p { (name) " is a declared FXP (foreign-exchange provider), for these corridors:" }
            (corridor_list(&corridors, &standings.iter().map(|s| s.currency.clone()).collect::<Vec<_>>()))
        }
        @if may_fx {
            p { a href={ "/console/fx?participant=" (page::encode(&name)) "#corridors" } { "Set up " (name) "'s corridors" } }
        }
        h2 { "Callback endpoints" }
        div.table-wrap {
            table {
                thead { tr { th scope="col" { "Type" } th scope="col" { "URL" } } }
                tbody {
                    @for e in endpoints.as_array().into_iter().flatten() {
                        tr { td { code { (page::text(&e["type"])) } } td { code.url { (page::text(&e["value"])) } } }
                    }
                }
            }
        }
        @for h in health.as_array().into_iter().flatten() {
            p {
                "Callbacks: "
                @if h["failingSince"].is_null() { span.status.ok { "answering" } }
                @else { span.status.alarm { "failing since " (page::time(&page::text(&h["failingSince"]))) } }
                " · " (page::text(&h["sentOk"])) " delivered, " (page::text(&h["queued"])) " queued, " (page::text(&h["deadLetters"])) " dead letters"
            }
        }
        @if may_endpoint {
            form.grid method="post" action={ (here) "/endpoints" } {
                (page::csrf(&visitor))
                label for="endpoint-type" { "Type" }
                select #endpoint-type name="type" {
                    @for kind in hub::endpoints::ENDPOINT_TYPES { option value=(kind) { (kind) } }
                }
                label for="endpoint-value" { "URL" }
                input #endpoint-value name="value" required;
                button type="submit" { "Set endpoint" }
            }
        }
        @if let Some(audit) = &audit {
            h2 { "Recent changes" }
            (crate::audit::table(audit))
            p { a href={ "/console/audit?participant=" (page::encode(&name)) } { "All changes to " (name) } }
        }
    };
    page::render(&visitor, Section::Participants, &name, content)
}

/// One participant's standing in one currency it holds a position in.
pub(crate) struct Standing {
    pub currency: String,
    /// Reservations included, as Mojaloop shows a position.
    pub position: String,
    /// What reserved transfers hold of it.
    pub held: String,
    pub net_debit_cap: Option<String>,
    /// Funds deposited and not yet used: −(the settlement account's value).
    pub liquidity: Option<Amount>,
}

/// A participant's standing in each currency, from its accounts and its
/// net debit caps (`limits`: entries with `currency` and `limit.value`, as
/// `GET /participants/{name}/limits` and `GET /participants/limits` give
/// them). An FXP holds a position in each currency it converts.
pub(crate) fn standings(accounts: &Value, limits: &[&Value]) -> Vec<Standing> {
    let accounts: Vec<&Value> = accounts.as_array().into_iter().flatten().collect();
    let mut standings: Vec<Standing> = accounts
        .iter()
        .filter(|a| a["ledgerAccountType"] == "POSITION")
        .map(|position| {
            let currency = page::text(&position["currency"]);
            let liquidity = accounts
                .iter()
                .find(|a| {
                    a["ledgerAccountType"] == "SETTLEMENT" && a["currency"] == currency.as_str()
                })
                .and_then(|a| page::signed_amount(&a["value"]))
                .and_then(|value| value.checked_neg());
            let net_debit_cap = limits
                .iter()
                .find(|l| l["currency"] == currency.as_str())
                .map(|l| page::text(&l["limit"]["value"]));
            Standing {
                position: page::text(&position["value"]),
                held: page::text(&position["heldValue"]),
                net_debit_cap,
                liquidity,
                currency,
            }
        })
        .collect();
    standings.sort_by(|a, b| a.currency.cmp(&b.currency));
    standings
}

pub(crate) fn standing_headers() -> Markup {
    html! {
        th scope="col" { "Currency" }
        th.num scope="col" { "Position" }
        th.num scope="col" { "Held by reserved transfers" }
        th.num scope="col" { "Net debit cap" }
        th.num scope="col" { "Liquidity cover" }
    }
}

pub(crate) fn standing_cells(standing: &Standing) -> Markup {
    let currency = &standing.currency;
    html! {
        td { (currency) }
        td.num { (page::money(&standing.position, currency)) }
        td.num { (page::money(&standing.held, currency)) }
        td.num {
            @match &standing.net_debit_cap {
                Some(cap) => (page::money(cap, currency)),
                None => span.muted { "none set (0)" },
            }
        }
        td.num {
            @match &standing.liquidity {
                Some(liquidity) => (page::money(&liquidity.to_string(), currency)),
                None => span.muted { "no settlement account" },
            }
        }
    }
}

/// The corridors of a `{"corridors":[{"sourceCurrency","targetCurrency"}]}`
/// answer (or a `GET /fxps` entry), as (source, target).
pub(crate) fn corridor_pairs(answer: &Value) -> Vec<(String, String)> {
    answer["corridors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                page::text(&c["sourceCurrency"]),
                page::text(&c["targetCurrency"]),
            )
        })
        .collect()
}

/// An FXP's corridors, each marked when the FXP holds no position in one
/// of its currencies (the ledger then refuses its conversions there).
pub(crate) fn corridor_list(corridors: &[(String, String)], held: &[String]) -> Markup {
    html! {
        ul.corridors {
            @for (source, target) in corridors {
                li data-corridor={ (source) ":" (target) } {
                    (source) " → " (target)
                    @for missing in [source, target].into_iter().filter(|c| !held.contains(c)) {
                        " " span.status.warn { "no " (missing) " position" }
                    }
                }
            }
        }
    }
}

fn currency_select(id: &str, currencies: &[String]) -> Markup {
    html! {
        select id=(id) name="currency" {
            @for c in currencies { option value=(c) { (c) } }
        }
    }
}

/// Sends one change to the API and comes back to the participant's page
/// with what happened.
async fn change(
    visitor: &Visitor,
    name: &str,
    method: Method,
    path: &str,
    body: Value,
    done: String,
) -> Response {
    let result = visitor.call(method, path, Some(&body)).await;
    visitor.after_change(result, |_| done, &console_path(name))
}

/// `body` with the form's `reason`, when the person gave one: the "why"
/// a change held for a second person (`--four-eyes`) is kept with, and
/// shown to whoever approves it. Other changes ignore it.
fn with_reason(mut body: Value, fields: &crate::page::Fields) -> Value {
    let reason = fields.text("reason");
    if !reason.is_empty() {
        body["reason"] = Value::from(reason);
    }
    body
}

pub(crate) async fn set_limit(
    Path(name): Path<String>,
    Posted { visitor, fields }: Posted,
) -> Response {
    let currency = fields.text("currency");
    let value = fields.text("value");
    change(
        &visitor,
        &name,
        Method::PUT,
        &format!("{}/limits", participant_path(&name)),
        with_reason(
            json!({ "currency": currency, "limit": { "type": "NET_DEBIT_CAP", "value": value } }),
            &fields,
        ),
        format!("Net debit cap of {name} in {currency} set to {value}"),
    )
    .await
}

pub(crate) async fn set_active(
    Path(name): Path<String>,
    Posted { visitor, fields }: Posted,
) -> Response {
    // The state the person asked for, not a flip of whatever it is now: a
    // form sent twice, or by two people, must not undo itself.
    let to = match fields.text("active") {
        "true" => true,
        "false" => false,
        other => return form_error(&visitor, &name, format!("'{other}' is not true or false")),
    };
    change(
        &visitor,
        &name,
        Method::PUT,
        &participant_path(&name),
        json!({ "isActive": to }),
        format!("{name} {}", if to { "activated" } else { "deactivated" }),
    )
    .await
}

/// Back to the participant's page with `message`, nothing asked of the
/// API: a form value no control of the page can send.
fn form_error(visitor: &Visitor, name: &str, message: String) -> Response {
    visitor.session.set_flash(Flash::error(message));
    visitor.redirect(&console_path(name))
}

/// The modes a participant may be in (pausing a DFSP), as the admin API
/// names them, with the console's words.
const MODES: &[(&str, &str)] = &[
    ("active", "Active: sends and receives"),
    ("send-only", "Send-only: may pay, may not be paid"),
    ("receive-only", "Receive-only: may be paid, may not pay"),
    ("suspended", "Suspended: neither"),
];

fn mode_badge(mode: &str) -> Markup {
    html! {
        @if mode == "active" { span.badge.on data-mode=(mode) { (mode) } }
        @else { span.badge.off data-mode=(mode) { (mode) } }
    }
}

fn mode_words(mode: &str) -> &'static str {
    match mode {
        "active" => "May pay and be paid.",
        "send-only" => "May pay; new payments to it are refused.",
        "receive-only" => "May be paid; new payments from it are refused.",
        "suspended" => "New payments from and to it are refused.",
        _ => "",
    }
}

pub(crate) async fn set_mode(
    Path(name): Path<String>,
    Posted { visitor, fields }: Posted,
) -> Response {
    let mode = fields.text("mode");
    if !MODES.iter().any(|(value, _)| *value == mode) {
        return form_error(&visitor, &name, format!("'{mode}' is not a mode"));
    }
    change(
        &visitor,
        &name,
        Method::PUT,
        &participant_path(&name),
        with_reason(json!({ "mode": mode }), &fields),
        format!("{name} is now {mode}"),
    )
    .await
}

pub(crate) async fn set_endpoint(
    Path(name): Path<String>,
    Posted { visitor, fields }: Posted,
) -> Response {
    let kind = fields.text("type");
    change(
        &visitor,
        &name,
        Method::POST,
        &format!("{}/endpoints", participant_path(&name)),
        json!({ "type": kind, "value": fields.text("value") }),
        format!("{kind} of {name} set"),
    )
    .await
}

/// What a funds movement would do, read from the accounts now.
struct FundsEffect {
    account: u64,
    liquidity_before: Amount,
    liquidity_after: Amount,
    position: Amount,
    net_debit_cap: Option<Amount>,
}

async fn funds_effect(
    visitor: &Visitor,
    name: &str,
    currency: &str,
    incoming: bool,
    amount: Amount,
) -> Result<FundsEffect, ApiError> {
    let path = participant_path(name);
    let (accounts, limits) = tokio::join!(
        visitor.get(&format!("{path}/accounts")),
        visitor.get(&format!("{path}/limits"))
    );
    let (accounts, limits) = (accounts?, limits?);
    let find = |kind: &str| {
        accounts
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["ledgerAccountType"] == kind && a["currency"] == currency)
    };
    let parse = |v: &Value| page::signed_amount(v).unwrap_or(Amount::ZERO);
    let settlement = find("SETTLEMENT").ok_or_else(|| ApiError {
        status: StatusCode::NOT_FOUND,
        code: "3200".to_string(),
        description: format!("{name} has no {currency} settlement account"),
    })?;
    let liquidity_before = parse(&settlement["value"])
        .checked_neg()
        .unwrap_or(Amount::ZERO);
    let liquidity_after = if incoming {
        liquidity_before.checked_add(amount)
    } else {
        liquidity_before.checked_sub(amount)
    }
    .unwrap_or(liquidity_before);
    Ok(FundsEffect {
        account: settlement["id"].as_u64().unwrap_or(0),
        liquidity_before,
        liquidity_after,
        position: find("POSITION").map_or(Amount::ZERO, |p| parse(&p["value"])),
        net_debit_cap: limits
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["currency"] == currency)
            .map(|l| parse(&l["limit"]["value"])),
    })
}

/// Step one of a funds movement: what it will do, and a button to do it.
pub(crate) async fn funds_preview(
    Path(name): Path<String>,
    Posted { visitor, fields }: Posted,
) -> Response {
    let incoming = fields.text("action") != "out";
    let currency = fields.text("currency").to_string();
    let amount_text = fields.text("amount").to_string();
    let amount = match Amount::parse_lenient(&amount_text) {
        Ok(a) if a > Amount::ZERO => a,
        _ => {
            visitor.session.set_flash(Flash::error(format!(
                "'{amount_text}' is not a positive amount"
            )));
            return visitor.redirect(&console_path(&name));
        }
    };
    let effect = match funds_effect(&visitor, &name, &currency, incoming, amount).await {
        Ok(e) => e,
        Err(e) => return page::api_failure(&visitor, Section::Participants, &e),
    };
    // The ledger refuses a withdrawal that would leave the cover below zero;
    // one that leaves it below the position is taken, but then every
    // prepare of this DFSP is refused (4001) until funds come in.
    let refused = !incoming && effect.liquidity_after.is_negative();
    let below_position = !refused && effect.liquidity_after < effect.position;
    let movement = if incoming { "Funds in" } else { "Funds out" };
    let here = console_path(&name);
    let content = html! {
        h1 { "Confirm: " (movement) " for " (name) }
        dl.effect {
            dt { "Movement" } dd { (movement) " of " (page::money(&amount.to_string(), &currency)) }
            dt { "Liquidity cover now" } dd.num { (page::money(&effect.liquidity_before.to_string(), &currency)) }
            dt { "Liquidity cover after" } dd.num { strong { (page::money(&effect.liquidity_after.to_string(), &currency)) } }
            dt { "Position (reserved included)" } dd.num { (page::money(&effect.position.to_string(), &currency)) }
            @if let Some(cap) = effect.net_debit_cap {
                dt { "Net debit cap" } dd.num { (page::money(&cap.to_string(), &currency)) }
            }
        }
        @if refused {
            p.flash.error role="alert" { "This is more than the liquidity cover: the hub will refuse it." }
        }
        @if below_position {
            p.flash.warn role="alert" { "After this the liquidity cover is below the position: the hub takes it, but refuses every prepare of " (name) " (4001) until its cover exceeds its position again." }
        }
        form method="post" action={ (here) "/funds/confirm" } {
            (page::csrf(&visitor))
            input type="hidden" name="action" value=(if incoming { "in" } else { "out" });
            input type="hidden" name="currency" value=(currency);
            input type="hidden" name="amount" value=(amount.to_string());
            input type="hidden" name="reason" value=(fields.text("reason"));
            input type="hidden" name="account" value=(effect.account);
            input type="hidden" name="transferId" value=(new_uuid());
            button type="submit" { "Confirm " (movement) }
            " "
            a href=(here) { "Cancel" }
        }
    };
    page::render(&visitor, Section::Participants, "Confirm funds", content)
}

/// Step two: the movement, through the API (funds out is reserved, then
/// committed, as central-ledger's two calls).
pub(crate) async fn funds_confirm(
    Path(name): Path<String>,
    Posted { visitor, fields }: Posted,
) -> Response {
    let incoming = fields.text("action") != "out";
    let currency = fields.text("currency");
    let amount = fields.text("amount");
    let transfer_id = fields.text("transferId");
    let account_path = format!(
        "{}/accounts/{}",
        participant_path(&name),
        page::encode(fields.text("account"))
    );
    let body = json!({
        "transferId": transfer_id,
        "externalReference": "kasi console",
        "action": if incoming { "recordFundsIn" } else { "recordFundsOutPrepareReserve" },
        "reason": fields.text("reason"),
        "amount": { "amount": amount, "currency": currency },
    });
    let reserved = visitor.call(Method::POST, &account_path, Some(&body)).await;
    let result = match reserved {
        Ok(_) if !incoming => {
            let committed = visitor
                .call(
                    Method::PUT,
                    &format!("{account_path}/transfers/{}", page::encode(transfer_id)),
                    Some(&json!({ "action": "recordFundsOutCommit", "reason": fields.text("reason") })),
                )
                .await;
            if let Err(error) = &committed {
                if error.status != StatusCode::UNAUTHORIZED {
                    return pending_withdrawal(&visitor, &name, &fields, error);
                }
            }
            committed
        }
        other => other,
    };
    let done = |_: &Value| {
        format!(
            "{} of {amount} {currency} recorded for {name} (transfer {transfer_id})",
            if incoming { "Funds in" } else { "Funds out" }
        )
    };
    visitor.after_change(result, done, &console_path(&name))
}

/// A withdrawal reserved whose commit was refused (or not answered): the
/// amount stays held until it is committed or aborted, so say so and offer
/// both (the same transfer id: a repeated reserve is a duplicate).
fn pending_withdrawal(
    visitor: &Visitor,
    name: &str,
    fields: &Fields,
    error: &ApiError,
) -> Response {
    let here = console_path(name);
    let transfer_id = fields.text("transferId");
    let content = html! {
        h1 { "Funds out for " (name) ": reserved, not committed" }
        p.flash.error role="alert" {
            "The withdrawal " code { (transfer_id) } " of " (page::money(fields.text("amount"), fields.text("currency")))
            " is reserved, but committing it was refused: " (error.message())
            ". The amount stays held (out of " (name) "'s liquidity cover) until it is committed or aborted."
        }
        div.actions {
            form.inline method="post" action={ (here) "/funds/confirm" } {
                (page::csrf(visitor))
                @for key in ["action", "currency", "amount", "reason", "account", "transferId"] {
                    input type="hidden" name=(key) value=(fields.text(key));
                }
                button type="submit" { "Commit it again" }
            }
            form.inline method="post" action={ (here) "/funds/abort" } {
                (page::csrf(visitor))
                input type="hidden" name="account" value=(fields.text("account"));
                input type="hidden" name="transferId" value=(transfer_id);
                button.danger type="submit" { "Abort it (release the funds)" }
            }
        }
    };
    page::render_with(
        visitor,
        Section::Participants,
        "Funds out pending",
        content,
        StatusCode::CONFLICT,
    )
}

/// Releases a withdrawal reserved and not committed (central-ledger's
/// `recordFundsOutAbort`).
pub(crate) async fn funds_abort(
    Path(name): Path<String>,
    Posted { visitor, fields }: Posted,
) -> Response {
    let transfer_id = fields.text("transferId");
    let path = format!(
        "{}/accounts/{}/transfers/{}",
        participant_path(&name),
        page::encode(fields.text("account")),
        page::encode(transfer_id)
    );
    change(
        &visitor,
        &name,
        Method::PUT,
        &path,
        json!({ "action": "recordFundsOutAbort", "reason": "aborted from the console" }),
        format!("Funds out {transfer_id} aborted: the funds are released"),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_fxp_stands_in_each_currency_it_holds() {
        let accounts = json!([
            {"ledgerAccountType": "POSITION", "currency": "USD", "value": "-300", "heldValue": 0},
            {"ledgerAccountType": "SETTLEMENT", "currency": "USD", "value": 0},
            {"ledgerAccountType": "POSITION", "currency": "TZS", "value": "750000", "heldValue": "750000"},
            {"ledgerAccountType": "SETTLEMENT", "currency": "TZS", "value": "-1000000"},
        ]);
        let limits =
            [json!({"currency": "TZS", "limit": {"type": "NET_DEBIT_CAP", "value": 1000000}})];
        let limits: Vec<&Value> = limits.iter().collect();
        let standings = standings(&accounts, &limits);
        let shown: Vec<String> = standings
            .iter()
            .map(|s| {
                format!(
                    "{} {} held {} cap {:?} cover {:?}",
                    s.currency,
                    s.position,
                    s.held,
                    s.net_debit_cap,
                    s.liquidity.map(|l| l.to_string())
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                r#"TZS 750000 held 750000 cap Some("1000000") cover Some("1000000")"#,
                r#"USD -300 held 0 cap None cover Some("0")"#,
            ]
        );
    }

    #[test]
    fn funds_ids_are_version_4_uuids() {
        let a = new_uuid();
        let b = new_uuid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
    }
}
