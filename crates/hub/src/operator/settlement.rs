//! Mojaloop's central-settlement API (v2), on the admin address under
//! `/v2`: settlement windows, settlements and their account transitions, in
//! central-settlement's paths, JSON keys, number formats and error strings
//! (see `shared/MOJALOOP-SETTLEMENT.md`), so that its operators' tools and
//! the Testing Toolkit's collections work unchanged. Plus kasi's own
//! `POST /v2/settlements/{id}/finalize` and `GET /v2/settlements/{id}/report`.
//!
//! Every change is one ledger command: a close is exact and instant, and a
//! settlement created right after it sees the window closed.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use ledger::request::{
    AbortSettlement, CloseSettlementWindow, CreateSettlement, FinalizeSettlement, ReadParticipants,
    ReadSettlementReport, ReadSettlementWindows, ReadSettlements, UpdateSettlement,
};
use ledger::{
    AccountChange, AccountChangeResult, Amount, ContentRow, Currency, ErrorCode, Rejection,
    Request, SettlementAccountRow, SettlementUpdate, SettlementView, WindowState, WindowView,
};
use serde_json::{json, Map, Value};

use crate::{format_time, Hub, HubError};

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/v2/health", get(crate::health))
        .route("/v2/settlementWindows", get(list_windows))
        .route(
            "/v2/settlementWindows/:id",
            get(get_window).post(close_window),
        )
        .route(
            "/v2/settlements",
            get(list_settlements).post(create_settlement),
        )
        .route(
            "/v2/settlements/:id",
            get(get_settlement).put(update_settlement),
        )
        .route("/v2/settlements/:id/finalize", post(finalize_settlement))
        .route("/v2/settlements/:id/report", get(report))
        .route(
            "/v2/settlements/:id/participants/:pid",
            get(get_participant).put(update_participant),
        )
        .route(
            "/v2/settlements/:id/participants/:pid/accounts/:aid",
            get(get_account).put(update_account),
        )
        .with_state(hub)
}

// ------------------------------------------------------------------ helpers

fn invalid(detail: impl std::fmt::Display) -> HubError {
    HubError::new(
        ErrorCode::GENERIC_VALIDATION_ERROR,
        format!("Generic validation error - {detail}"),
    )
}

fn missing(detail: impl std::fmt::Display) -> HubError {
    HubError::new(
        ErrorCode::MISSING_MANDATORY_ELEMENT,
        format!("Missing mandatory element - {detail}"),
    )
}

/// A JSON object body; anything else is 3101.
fn body_object(body: &Bytes) -> Result<Map<String, Value>, HubError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(HubError::new(
            ErrorCode::MALFORMED_SYNTAX,
            "Malformed syntax - the body must be a JSON object",
        )),
        Err(error) => Err(HubError::new(
            ErrorCode::MALFORMED_SYNTAX,
            format!("Malformed syntax - {error}"),
        )),
    }
}

/// A query value of the wrong type or outside its enumeration: 3101, as
/// central-settlement's schema validation answers it (Mojaloop's collection
/// "Check Settlements Error #956" asserts the code and these words).
fn malformed(detail: impl std::fmt::Display) -> HubError {
    HubError::new(
        ErrorCode::MALFORMED_SYNTAX,
        format!("Malformed syntax - {detail}"),
    )
}

/// An integer query value (central-settlement's schema takes any, 0 too:
/// it then finds nothing).
fn integer_query(text: &str, what: &str) -> Result<u32, HubError> {
    text.parse::<u32>()
        .map_err(|_| malformed(format!("{what} '{text}' is not an integer")))
}

fn id_param(text: &str, what: &str) -> Result<u32, HubError> {
    text.parse::<u32>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| invalid(format!("{what} '{text}' is not a positive integer")))
}

fn optional_text(map: &Map<String, Value>, key: &str) -> Result<Option<String>, HubError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(invalid(format!("{key} must be a string"))),
    }
}

/// An amount as a JSON number without trailing zeros, as central-settlement
/// answers (a JavaScript number there): exact for whole amounts up to 2^63
/// and for any amount of up to 15 significant digits.
fn number(amount: Amount) -> Value {
    let units = amount.units();
    if units % 10_000 == 0 {
        if let Ok(whole) = i64::try_from(units / 10_000) {
            return json!(whole);
        }
    }
    let text = amount.to_string();
    text.parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::String(text), Value::Number)
}

fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), decode(value))
        })
        .collect()
}

/// Percent-decoding of a query component (`+` is a space).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(text.get(i + 1..i + 3).unwrap_or(""), 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `{key:value,...}` as central-settlement prints its filters in errors.
fn filters_text(pairs: &[(String, String)]) -> String {
    let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("{{{}}}", inner.join(","))
}

async fn windows(hub: &Hub) -> Result<Vec<WindowView>, HubError> {
    Ok(hub.ask(ReadSettlementWindows {}).await??)
}

pub(crate) async fn settlements(hub: &Hub) -> Result<Vec<SettlementView>, HubError> {
    Ok(hub.ask(ReadSettlements {}).await??)
}

async fn settlement(hub: &Hub, id: u32) -> Result<SettlementView, HubError> {
    settlements(hub)
        .await?
        .into_iter()
        .find(|s| s.row.id == id)
        .ok_or_else(|| invalid(format!("Settlement with ID '{id}' not found")))
}

/// Runs a settlement change with its audit event; a refusal is the error.
async fn change<R, T>(hub: &Hub, change: crate::audit::Change, request: R) -> Result<T, HubError>
where
    R: Request<Reply = Result<T, Rejection>>,
{
    Ok(hub.ask_audited(change, request).await??)
}

fn json(value: Value) -> Response {
    axum::Json(value).into_response()
}

// ------------------------------------------------------------------- shapes

fn content_json(content: &ContentRow, with_settlement: bool) -> Value {
    let mut value = json!({
        "id": content.id,
        "state": content.state.as_str(),
        "ledgerAccountType": content.ledger_account_type.as_str(),
        "currencyId": content.currency.as_str(),
        "createdDate": format_time(content.created_at_ms),
        "changedDate": format_time(content.changed_at_ms),
    });
    if with_settlement {
        value["settlementId"] = json!(content.settlement);
    }
    value
}

/// A window as `GET /settlementWindows` shows it (key `settlementWindowId`).
fn window_json(window: &WindowView, with_content: bool) -> Value {
    let mut value = json!({
        "settlementWindowId": window.row.id,
        "state": window.row.state.as_str(),
        "reason": window.row.reason,
        "createdDate": format_time(window.row.created_at_ms),
        "changedDate": format_time(window.row.changed_at_ms),
    });
    if with_content {
        value["content"] = window
            .content
            .iter()
            .map(|c| content_json(c, true))
            .collect();
    }
    value
}

/// A window inside a settlement (key `id`; only the settlement's content).
fn settlement_window_json(window: &WindowView, settlement: u32) -> Value {
    json!({
        "id": window.row.id,
        "state": window.row.state.as_str(),
        "reason": window.row.reason,
        "createdDate": format_time(window.row.created_at_ms),
        "changedDate": format_time(window.row.changed_at_ms),
        "content": window
            .content
            .iter()
            .filter(|c| c.settlement == Some(settlement) || c.settlement.is_none())
            .map(|c| content_json(c, false))
            .collect::<Vec<_>>(),
    })
}

fn account_json(account: &SettlementAccountRow, detailed: bool) -> Value {
    let mut value = json!({
        "id": account.account.0,
        "state": account.state.as_str(),
        "reason": account.reason,
        "netSettlementAmount": {
            "amount": number(account.net),
            "currency": account.currency.as_str(),
        },
    });
    if detailed {
        value["externalReference"] = json!(account.external_reference);
        value["createdDate"] = json!(format_time(account.changed_at_ms));
    }
    value
}

/// Accounts grouped by participant, in participant then account order.
fn participants_json<'a>(
    accounts: impl Iterator<Item = &'a SettlementAccountRow>,
    detailed: bool,
) -> Vec<Value> {
    let mut by_participant: BTreeMap<u32, Vec<Value>> = BTreeMap::new();
    for account in accounts {
        by_participant
            .entry(account.participant.0)
            .or_default()
            .push(account_json(account, detailed));
    }
    by_participant
        .into_iter()
        .map(|(id, accounts)| json!({"id": id, "accounts": accounts}))
        .collect()
}

fn settlement_json(view: &SettlementView, with_model: bool) -> Value {
    let mut value = json!({
        "id": view.row.id,
        "state": view.row.state.as_str(),
        "reason": view.row.reason,
        "createdDate": format_time(view.row.created_at_ms),
        "changedDate": format_time(view.row.changed_at_ms),
        "settlementWindows": view
            .windows
            .iter()
            .map(|w| settlement_window_json(w, view.row.id))
            .collect::<Vec<_>>(),
        "participants": participants_json(view.row.accounts.iter(), false),
    });
    if with_model {
        value["settlementModel"] = json!(view.model_name);
    }
    if let Some(reference) = &view.row.external_reference {
        value["externalReference"] = json!(reference);
    }
    value
}

// ------------------------------------------------------------------ windows

const WINDOW_FILTERS: &str = "participantId, state, fromDateTime, toDateTime, currency";

async fn list_windows(
    State(hub): State<Arc<Hub>>,
    RawQuery(query): RawQuery,
) -> Result<Response, HubError> {
    let pairs = query_pairs(query.as_deref());
    if pairs.is_empty() || pairs.len() >= 6 {
        return Err(invalid(format!(
            "Use at least one parameter: {WINDOW_FILTERS}"
        )));
    }
    let mut filter = WindowFilter::default();
    for (key, value) in &pairs {
        match key.as_str() {
            "participantId" => filter.participant = Some(integer_query(value, "participantId")?),
            "state" => {
                filter.state = Some(
                    WindowState::parse(value)
                        .ok_or_else(|| {
                            malformed(format!(
                                "state '{value}' is not one of OPEN, CLOSED, PENDING_SETTLEMENT, SETTLED, ABORTED"
                            ))
                        })?,
                )
            }
            "fromDateTime" => filter.from_ms = Some(date_time(value, "fromDateTime")?),
            "toDateTime" => filter.to_ms = Some(date_time(value, "toDateTime")?),
            "currency" => {
                filter.currency = Some(
                    Currency::parse(value)
                        .ok_or_else(|| invalid(format!("currency '{value}' is not ISO 4217")))?,
                )
            }
            other => {
                return Err(invalid(format!(
                    "unknown parameter '{other}'; use {WINDOW_FILTERS}"
                )))
            }
        }
    }
    let mut found: Vec<WindowView> = windows(&hub)
        .await?
        .into_iter()
        .filter(|w| filter.matches(w))
        .collect();
    if found.is_empty() {
        return Err(invalid(format!(
            "settlementWindow by filters: {} not found",
            filters_text(&pairs)
        )));
    }
    found.sort_by_key(|w| std::cmp::Reverse((w.row.changed_at_ms, w.row.id)));
    Ok(json(found.iter().map(|w| window_json(w, true)).collect()))
}

fn date_time(text: &str, what: &str) -> Result<i64, HubError> {
    fspiop::parse_date_time(text).ok_or_else(|| {
        malformed(format!(
            "{what} '{text}' is not a date-time such as 2026-01-01T00:00:00.000Z"
        ))
    })
}

#[derive(Default)]
struct WindowFilter {
    participant: Option<u32>,
    state: Option<WindowState>,
    from_ms: Option<i64>,
    to_ms: Option<i64>,
    currency: Option<Currency>,
}

impl WindowFilter {
    fn matches(&self, window: &WindowView) -> bool {
        self.participant
            .is_none_or(|p| window.participants.iter().any(|id| id.0 == p))
            && self.state.is_none_or(|s| window.row.state == s)
            && self
                .from_ms
                .is_none_or(|from| window.row.created_at_ms >= from)
            && self.to_ms.is_none_or(|to| window.row.created_at_ms <= to)
            && self.currency.is_none_or(|c| window.currencies.contains(&c))
    }
}

async fn get_window(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
) -> Result<Response, HubError> {
    let id = id_param(&id, "settlementWindowId")?;
    let window = windows(&hub)
        .await?
        .into_iter()
        .find(|w| w.row.id == id)
        .ok_or_else(|| {
            // central-settlement answers 500 here; a missing id is the
            // client's error, so 400 with its usual code.
            invalid(format!("No record for settlementWindowId: {id} found"))
        })?;
    Ok(json(window_json(&window, true)))
}

async fn close_window(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let id = id_param(&id, "settlementWindowId")?;
    let map = body_object(&body)?;
    let state = optional_text(&map, "state")?.ok_or_else(|| missing("state"))?;
    let reason = optional_text(&map, "reason")?.ok_or_else(|| missing("reason"))?;
    if state != "CLOSED" {
        return Err(invalid("state must be CLOSED"));
    }
    let next = change(
        &hub,
        crate::audit::Change::window_close(id),
        CloseSettlementWindow { id, reason },
    )
    .await?;
    hub.metrics.record_window_closed("api");
    tracing::info!(
        closed = id,
        opened = next.row.id,
        "settlement window closed"
    );
    Ok(json(window_json(&next, false)))
}

// -------------------------------------------------------------- settlements

/// One query parameter of `GET /v2/settlements`, as a test.
type SettlementFilter = Box<dyn Fn(&SettlementView) -> bool + Send>;

const SETTLEMENT_FILTERS: &str = "currency, participantId, settlementWindowId, accountId, state, fromDateTime, toDateTime, fromSettlementWindowDateTime, toSettlementWindowDateTime";

async fn list_settlements(
    State(hub): State<Arc<Hub>>,
    RawQuery(query): RawQuery,
) -> Result<Response, HubError> {
    let pairs = query_pairs(query.as_deref());
    if pairs.is_empty() || pairs.len() >= 10 {
        return Err(invalid(format!(
            "Use at least one parameter: {SETTLEMENT_FILTERS}"
        )));
    }
    let mut checks: Vec<SettlementFilter> = Vec::new();
    for (key, value) in &pairs {
        let check: SettlementFilter = match key.as_str() {
            "currency" => {
                let currency = Currency::parse(value)
                    .ok_or_else(|| invalid(format!("currency '{value}' is not ISO 4217")))?;
                Box::new(move |s| s.row.accounts.iter().any(|a| a.currency == currency))
            }
            "participantId" => {
                let id = integer_query(value, "participantId")?;
                Box::new(move |s| s.row.accounts.iter().any(|a| a.participant.0 == id))
            }
            "accountId" => {
                let id = integer_query(value, "accountId")?;
                Box::new(move |s| s.row.accounts.iter().any(|a| a.account.0 == id))
            }
            "settlementWindowId" => {
                let id = integer_query(value, "settlementWindowId")?;
                Box::new(move |s| s.row.windows.contains(&id))
            }
            "state" => {
                let state = ledger::SettlementState::parse(value).ok_or_else(|| {
                    malformed(format!("state '{value}' is not a settlement state"))
                })?;
                Box::new(move |s| s.row.state == state)
            }
            "fromDateTime" => {
                let from = date_time(value, key)?;
                Box::new(move |s| s.row.created_at_ms >= from)
            }
            "toDateTime" => {
                let to = date_time(value, key)?;
                Box::new(move |s| s.row.created_at_ms <= to)
            }
            "fromSettlementWindowDateTime" => {
                let from = date_time(value, key)?;
                Box::new(move |s| s.windows.iter().any(|w| w.row.created_at_ms >= from))
            }
            "toSettlementWindowDateTime" => {
                let to = date_time(value, key)?;
                Box::new(move |s| s.windows.iter().any(|w| w.row.created_at_ms <= to))
            }
            other => {
                return Err(invalid(format!(
                    "unknown parameter '{other}'; use {SETTLEMENT_FILTERS}"
                )))
            }
        };
        checks.push(check);
    }
    let found: Vec<Value> = settlements(&hub)
        .await?
        .iter()
        .filter(|s| checks.iter().all(|check| check(s)))
        .map(|s| settlement_json(s, false))
        .collect();
    if found.is_empty() {
        return Err(invalid(format!(
            "No settlements found matching the provided parameters: {}",
            filters_text(&pairs)
        )));
    }
    Ok(json(Value::Array(found)))
}

async fn create_settlement(State(hub): State<Arc<Hub>>, body: Bytes) -> Result<Response, HubError> {
    let map = body_object(&body)?;
    let model =
        optional_text(&map, "settlementModel")?.ok_or_else(|| missing("settlementModel"))?;
    let reason = optional_text(&map, "reason")?.ok_or_else(|| missing("reason"))?;
    let listed = match map.get("settlementWindows") {
        None | Some(Value::Null) => return Err(missing("settlementWindows")),
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(_) => {
            return Err(invalid(
                "settlementWindows must be a list of at least one {\"id\": window}",
            ))
        }
    };
    let mut windows = Vec::with_capacity(listed.len());
    for item in listed {
        let id = item
            .get("id")
            .and_then(|id| match id {
                Value::Number(n) => n.as_u64(),
                Value::String(s) => s.parse().ok(),
                _ => None,
            })
            .and_then(|id| u32::try_from(id).ok())
            .filter(|id| *id > 0)
            .ok_or_else(|| invalid("settlementWindows items must be {\"id\": window id}"))?;
        windows.push(id);
    }
    let view = change(
        &hub,
        crate::audit::Change::settlement("settlement.create", None),
        CreateSettlement {
            model,
            reason,
            windows,
        },
    )
    .await?;
    tracing::info!(settlement = view.row.id, model = %view.model_name, windows = ?view.row.windows, "settlement created");
    Ok(json(settlement_json(&view, true)))
}

async fn get_settlement(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
) -> Result<Response, HubError> {
    let id = id_param(&id, "settlement id")?;
    let view = settlement(&hub, id).await?;
    Ok(json(settlement_json(&view, false)))
}

/// One account transition of a request, as sent.
fn account_change(participant: u32, item: &Value) -> Result<AccountChange, HubError> {
    let map = item
        .as_object()
        .ok_or_else(|| invalid("each account must be an object"))?;
    let account = map
        .get("id")
        .and_then(Value::as_u64)
        .and_then(|id| u32::try_from(id).ok())
        .ok_or_else(|| missing("accounts[].id"))?;
    let state = optional_text(map, "state")?.ok_or_else(|| missing("accounts[].state"))?;
    let reason = optional_text(map, "reason")?.ok_or_else(|| missing("accounts[].reason"))?;
    Ok(AccountChange {
        participant,
        account,
        state,
        reason,
        external_reference: optional_text(map, "externalReference")?,
    })
}

async fn update_settlement(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let id = id_param(&id, "settlement id")?;
    let map = body_object(&body)?;
    if let Some(participants) = map.get("participants") {
        if ["state", "reason", "externalReference"]
            .iter()
            .any(|key| map.contains_key(*key))
        {
            return Err(invalid(
                "No other properties are allowed when participants is provided",
            ));
        }
        let participants = participants
            .as_array()
            .ok_or_else(|| invalid("participants must be a list"))?;
        let mut changes = Vec::new();
        for participant in participants {
            let pid = participant
                .get("id")
                .and_then(Value::as_u64)
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| missing("participants[].id"))?;
            let accounts = participant
                .get("accounts")
                .and_then(Value::as_array)
                .ok_or_else(|| missing("participants[].accounts"))?;
            for account in accounts {
                changes.push(account_change(pid, account)?);
            }
        }
        return transitions(&hub, id, changes).await;
    }
    let state = optional_text(&map, "state")?;
    let reason = optional_text(&map, "reason")?;
    let (Some(state), Some(reason)) = (state, reason) else {
        return Err(missing("State and reason are mandatory"));
    };
    if state != "ABORTED" {
        return Err(invalid("Invalid request payload input"));
    }
    let external_reference = optional_text(&map, "externalReference")?;
    let view = change(
        &hub,
        crate::audit::Change::settlement("settlement.abort", Some(id)),
        AbortSettlement {
            settlement: id,
            reason,
            external_reference,
        },
    )
    .await?;
    tracing::info!(settlement = id, "settlement aborted");
    Ok(json(json!({
        "id": view.row.id,
        "state": view.row.state.as_str(),
        "reason": view.row.reason,
    })))
}

/// Applies account transitions and answers as central-settlement does:
/// the accounts asked about (each with its new state or its error), and the
/// windows of the settlement.
async fn transitions(
    hub: &Hub,
    id: u32,
    changes: Vec<AccountChange>,
) -> Result<Response, HubError> {
    let asked = changes.clone();
    let SettlementUpdate {
        settlement,
        results,
        changed_windows,
    } = change(
        hub,
        crate::audit::Change::settlement("settlement.update", Some(id)),
        UpdateSettlement {
            settlement: id,
            changes,
        },
    )
    .await?;
    let mut by_participant: BTreeMap<u32, Vec<Value>> = BTreeMap::new();
    for (change, result) in asked.iter().zip(&results) {
        by_participant
            .entry(change.participant)
            .or_default()
            .push(result_json(&settlement, result));
    }
    let participants: Vec<Value> = by_participant
        .into_iter()
        .map(|(id, accounts)| json!({"id": id, "accounts": accounts}))
        .collect();
    let windows: Vec<Value> = settlement
        .windows
        .iter()
        .filter(|w| changed_windows.contains(&w.row.id))
        .map(|w| settlement_window_json(w, settlement.row.id))
        .collect();
    Ok(json(json!({
        "id": settlement.row.id,
        "state": settlement.row.state.as_str(),
        "createdDate": format_time(settlement.row.created_at_ms),
        "settlementWindows": windows,
        "participants": participants,
    })))
}

fn result_json(settlement: &SettlementView, result: &AccountChangeResult) -> Value {
    match &result.error {
        Some(error) => json!({
            "id": result.account,
            "errorInformation": {
                "errorCode": ErrorCode::GENERIC_CLIENT_ERROR.to_string(),
                "errorDescription": format!("Generic client error - {error}"),
            },
        }),
        None => settlement
            .row
            .accounts
            .iter()
            .find(|a| a.account.0 == result.account)
            .map_or(Value::Null, |a| account_json(a, true)),
    }
}

async fn finalize_settlement(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let id = id_param(&id, "settlement id")?;
    let map = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        body_object(&body)?
    };
    let reason = optional_text(&map, "reason")?.unwrap_or_else(|| "finalized".to_string());
    let external_reference = optional_text(&map, "externalReference")?;
    let view = change(
        &hub,
        crate::audit::Change::settlement("settlement.finalize", Some(id)),
        FinalizeSettlement {
            settlement: id,
            reason,
            external_reference,
        },
    )
    .await?;
    tracing::info!(settlement = id, "settlement finalized");
    Ok(json(settlement_json(&view, true)))
}

// ------------------------------------------------- participant and account

/// The settlement filtered to one participant (and one account of it).
async fn filtered(
    hub: &Hub,
    id: &str,
    pid: &str,
    aid: Option<&str>,
) -> Result<(SettlementView, u32, Option<u32>), HubError> {
    let id = id_param(id, "settlement id")?;
    let pid = id_param(pid, "participant id")?;
    let aid = aid.map(|aid| id_param(aid, "account id")).transpose()?;
    let view = settlement(hub, id).await?;
    if !view.row.accounts.iter().any(|a| a.participant.0 == pid) {
        return Err(invalid(format!(
            "Participant with ID '{pid}' is not part of settlement '{id}'"
        )));
    }
    if let Some(aid) = aid {
        match view.row.accounts.iter().find(|a| a.account.0 == aid) {
            None => {
                return Err(invalid(format!(
                    "Account ID '{aid}' is not part of settlement '{id}'"
                )))
            }
            Some(account) if account.participant.0 != pid => {
                return Err(invalid(format!(
                    "Provided account ID '{aid}' does not match any position account for participant '{pid}' in settlement '{id}'"
                )))
            }
            Some(_) => {}
        }
    }
    Ok((view, pid, aid))
}

fn filtered_json(view: &SettlementView, pid: u32, aid: Option<u32>) -> Value {
    let accounts = view
        .row
        .accounts
        .iter()
        .filter(|a| a.participant.0 == pid && aid.is_none_or(|aid| a.account.0 == aid));
    json!({
        "id": view.row.id,
        "state": view.row.state.as_str(),
        "settlementWindows": view
            .windows
            .iter()
            .map(|w| settlement_window_json(w, view.row.id))
            .collect::<Vec<_>>(),
        "participants": participants_json(accounts, false),
    })
}

async fn get_participant(
    State(hub): State<Arc<Hub>>,
    Path((id, pid)): Path<(String, String)>,
) -> Result<Response, HubError> {
    let (view, pid, _) = filtered(&hub, &id, &pid, None).await?;
    Ok(json(filtered_json(&view, pid, None)))
}

async fn get_account(
    State(hub): State<Arc<Hub>>,
    Path((id, pid, aid)): Path<(String, String, String)>,
) -> Result<Response, HubError> {
    let (view, pid, aid) = filtered(&hub, &id, &pid, Some(&aid)).await?;
    Ok(json(filtered_json(&view, pid, aid)))
}

async fn update_participant(
    State(hub): State<Arc<Hub>>,
    Path((id, pid)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, HubError> {
    let settlement = id_param(&id, "settlement id")?;
    let pid = id_param(&pid, "participant id")?;
    let map = body_object(&body)?;
    let accounts = map
        .get("accounts")
        .and_then(Value::as_array)
        .ok_or_else(|| missing("accounts"))?;
    let changes = accounts
        .iter()
        .map(|account| account_change(pid, account))
        .collect::<Result<Vec<_>, _>>()?;
    transitions(&hub, settlement, changes).await
}

async fn update_account(
    State(hub): State<Arc<Hub>>,
    Path((id, pid, aid)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<Response, HubError> {
    let settlement = id_param(&id, "settlement id")?;
    let pid = id_param(&pid, "participant id")?;
    let aid = id_param(&aid, "account id")?;
    let mut map = body_object(&body)?;
    map.insert("id".into(), json!(aid));
    let change = account_change(pid, &Value::Object(map))?;
    transitions(&hub, settlement, vec![change]).await
}

// ------------------------------------------------------------------- report

/// `GET /v2/settlements/{id}/report` (kasi's): per DFSP and currency the
/// multilateral net, what it sent and received and in how many transfers,
/// who owes whom within the settlement (bilateral), and the windows it
/// settles with when each opened and closed; JSON, or CSV for the
/// settlement bank with `Accept: text/csv` (three tables, each with its
/// header, a blank line between: accounts, bilateral, windows).
async fn report(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, HubError> {
    let id = id_param(&id, "settlement id")?;
    let view = settlement(&hub, id).await?;
    let participants = hub.ask(ReadParticipants { name: None }).await??;
    let names: BTreeMap<u32, String> = participants
        .iter()
        .map(|v| (v.participant.id.0, v.participant.name.to_string()))
        .collect();
    // Each DFSP's account at the settlement bank, where the operator set one.
    let bank_accounts: BTreeMap<u32, String> = participants
        .iter()
        .filter_map(|v| {
            let account = v
                .endpoints
                .iter()
                .find(|e| e.endpoint_type == crate::endpoints::SETTLEMENT_BANK_ACCOUNT)?;
            Some((v.participant.id.0, account.value.clone()))
        })
        .collect();
    let bank_account = |participant: u32| bank_accounts.get(&participant).cloned();
    let report = hub.ask(ReadSettlementReport { settlement: id }).await??;
    let name = |participant: u32| {
        names
            .get(&participant)
            .cloned()
            .unwrap_or_else(|| participant.to_string())
    };
    let wants_csv = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/csv"));
    // A window closes when the next one opens (one ledger step); its
    // content is made at that instant too.
    let closed_at = |window: &WindowView| {
        window
            .content
            .iter()
            .map(|c| c.created_at_ms)
            .min()
            .map(format_time)
    };
    if wants_csv {
        let mut csv = String::from(
            "settlementId,participantId,participant,currency,accountId,netSettlementAmount,sent,sentCount,received,receivedCount,state,settlementBankAccount\n",
        );
        for line in &report.accounts {
            csv_row(
                &mut csv,
                &[
                    &id,
                    &line.participant.0,
                    &csv_field(&name(line.participant.0)),
                    &line.currency,
                    &line.account.0,
                    &line.net,
                    &line.sent,
                    &line.sent_count,
                    &line.received,
                    &line.received_count,
                    &line.state.as_str(),
                    &csv_field(&bank_account(line.participant.0).unwrap_or_default()),
                ],
            );
        }
        csv.push_str("\nsettlementId,currency,payerId,payer,payeeId,payee,amount,count\n");
        for pair in &report.bilateral {
            csv_row(
                &mut csv,
                &[
                    &id,
                    &pair.currency,
                    &pair.payer.0,
                    &csv_field(&name(pair.payer.0)),
                    &pair.payee.0,
                    &csv_field(&name(pair.payee.0)),
                    &pair.amount,
                    &pair.count,
                ],
            );
        }
        csv.push_str("\nsettlementId,settlementWindowId,state,openedDate,closedDate\n");
        for window in &view.windows {
            csv_row(
                &mut csv,
                &[
                    &id,
                    &window.row.id,
                    &window.row.state.as_str(),
                    &format_time(window.row.created_at_ms),
                    &closed_at(window).unwrap_or_default(),
                ],
            );
        }
        return Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/csv; charset=utf-8")],
            csv,
        )
            .into_response());
    }
    let accounts: Vec<Value> = report
        .accounts
        .iter()
        .map(|line| {
            json!({
                "participantId": line.participant.0,
                "participant": name(line.participant.0),
                "currency": line.currency.as_str(),
                "accountId": line.account.0,
                "netSettlementAmount": number(line.net),
                "sent": {"amount": number(line.sent), "count": line.sent_count},
                "received": {"amount": number(line.received), "count": line.received_count},
                "state": line.state.as_str(),
                "settlementBankAccount": bank_account(line.participant.0),
            })
        })
        .collect();
    let bilateral: Vec<Value> = report
        .bilateral
        .iter()
        .map(|pair| {
            json!({
                "currency": pair.currency.as_str(),
                "payer": name(pair.payer.0),
                "payerId": pair.payer.0,
                "payee": name(pair.payee.0),
                "payeeId": pair.payee.0,
                "amount": number(pair.amount),
                "count": pair.count,
            })
        })
        .collect();
    let windows: Vec<Value> = view
        .windows
        .iter()
        .map(|window| {
            json!({
                "id": window.row.id,
                "state": window.row.state.as_str(),
                "openedDate": format_time(window.row.created_at_ms),
                "closedDate": closed_at(window),
            })
        })
        .collect();
    Ok(json(json!({
        "settlementId": id,
        "settlementModel": view.model_name,
        "state": view.row.state.as_str(),
        "createdDate": format_time(view.row.created_at_ms),
        "changedDate": format_time(view.row.changed_at_ms),
        "settlementWindows": view.row.windows,
        "windows": windows,
        "accounts": accounts,
        "bilateral": bilateral,
    })))
}

/// One CSV line of fields already safe to write.
pub(crate) fn csv_row(csv: &mut String, fields: &[&dyn std::fmt::Display]) {
    for (at, field) in fields.iter().enumerate() {
        if at > 0 {
            csv.push(',');
        }
        csv.push_str(&field.to_string());
    }
    csv.push('\n');
}

/// A text field of a CSV line: quoted when it holds a comma, a quote or a
/// line break (a participant's name may hold a comma).
/// A text field (a participant's name) of the CSV report: quoted when it
/// holds a separator or quote, and a leading `=`, `+`, `-`, `@`, tab or CR
/// neutralized with a `'` — a spreadsheet opening the report would
/// otherwise run a name such as `=HYPERLINK(…)` as a formula.
pub(crate) fn csv_field(text: &str) -> String {
    let text = if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        std::borrow::Cow::Owned(format!("'{text}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_components_are_decoded() {
        assert_eq!(
            query_pairs(Some("state=OPEN&fromDateTime=2026-01-01T00%3A00%3A00.000Z")),
            [
                ("state".to_string(), "OPEN".to_string()),
                (
                    "fromDateTime".to_string(),
                    "2026-01-01T00:00:00.000Z".to_string()
                )
            ]
        );
        assert_eq!(decode("a+b%2"), "a b%2");
        assert_eq!(decode("%zz"), "%zz");
        assert_eq!(
            filters_text(&query_pairs(Some("state=OPEN"))),
            "{state:OPEN}"
        );
    }

    #[test]
    fn csv_fields_with_commas_or_quotes_are_quoted() {
        assert_eq!(csv_field("payerfsp"), "payerfsp");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        // A name a spreadsheet would run as a formula is kept as text.
        assert_eq!(csv_field("=HYPERLINK(x)"), "'=HYPERLINK(x)");
        assert_eq!(csv_field("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(csv_field("-2+3,x"), "\"'-2+3,x\"");
        let mut line = String::new();
        csv_row(&mut line, &[&1, &csv_field("a,b"), &"USD"]);
        assert_eq!(line, "1,\"a,b\",USD\n");
    }

    #[test]
    fn amounts_are_json_numbers_without_trailing_zeros() {
        for (amount, text) in [
            ("60", "60"),
            ("-75", "-75"),
            ("0", "0"),
            ("12.5", "12.5"),
            ("-0.0001", "-0.0001"),
            ("123456789012345678", "123456789012345678"),
        ] {
            let value = number(Amount::parse_signed(amount).unwrap());
            assert_eq!(value.to_string(), text, "{amount}");
        }
    }
}
