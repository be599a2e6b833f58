//! The operator's admin API, with Mojaloop central-ledger's paths and JSON
//! shapes, so that existing onboarding collections work unchanged.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use ledger::request::{
    CreateHubAccount, CreateParticipant, CreateProxy, CreateSettlementModel, FundsIn,
    FundsOutAbort, FundsOutCommit, FundsOutReserve, InitNetDebitCap, ReadParticipants,
    ReadSettlementModels, SetAccountActive, SetEndpoint, SetNetDebitCap, SetParticipantActive,
    SetParticipantMode,
};
use ledger::{
    AccountId, AccountKind, AccountRow, Amount, Currency, ErrorCode, FspName, Funds, FundsFinish,
    FundsMemo, ParticipantMode, ParticipantView, Rejection, Request, RequestHash, TransferId,
    TransferReply,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::audit::Change;
use crate::{format_time, Hub, HubError};

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route(
            "/participants",
            get(list_participants).post(create_participant),
        )
        .route("/participants/limits", get(all_limits))
        .route(
            "/participants/:name",
            get(get_participant).put(set_participant_state),
        )
        .route(
            "/participants/:name/accounts",
            get(list_accounts).post(create_hub_account),
        )
        .route(
            "/participants/:name/accounts/:id",
            put(set_account_active).post(record_funds),
        )
        .route(
            "/participants/:name/accounts/:id/transfers/:transfer_id",
            put(finish_funds_out),
        )
        .route(
            "/participants/:name/initialPositionAndLimits",
            post(initial_position_and_limits),
        )
        .route(
            "/participants/:name/limits",
            get(participant_limits).put(set_limits),
        )
        .route(
            "/participants/:name/endpoints",
            get(list_endpoints).post(set_endpoint),
        )
        .route("/participants/:name/positions", get(positions))
        .route(
            "/settlementModels",
            get(list_settlement_models).post(create_settlement_model),
        )
        .route("/health", get(crate::health))
        .route("/health/live", get(crate::health_live))
        .route("/health/ready", get(crate::health_ready))
        .with_state(hub)
}

/// Admin bodies are small; anything malformed is a 3101 naming what.
fn parse<T: for<'de> Deserialize<'de>>(body: &Bytes) -> Result<T, HubError> {
    serde_json::from_slice(body).map_err(|error| {
        HubError::new(
            ErrorCode::MALFORMED_SYNTAX,
            format!("Malformed syntax - {error}"),
        )
    })
}

pub(crate) fn participant_name(text: &str) -> Result<FspName, HubError> {
    FspName::new(text).ok_or_else(|| {
        HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!("'{text}' is not a participant name: 1-32 printable ASCII characters, no spaces or '/'"),
        )
    })
}

/// A currency code of the admin API: one of the list central-ledger
/// validates against, else 3101 in its words (its Joi `valid` check, which
/// the Testing Toolkit's golden path checks with `A#`).
fn currency(text: &str) -> Result<Currency, HubError> {
    Currency::parse(text).ok_or_else(|| {
        HubError::new(
            ErrorCode::MALFORMED_SYNTAX,
            format!("Malformed syntax - currency '{text}' is not an ISO 4217 currency"),
        )
    })
}

/// Reads an amount the way central-ledger accepts it: a JSON number or a
/// numeric string, exact (no floating point on the way).
fn amount(raw: &RawValue, field: &str) -> Result<Amount, HubError> {
    let text = raw.get().trim();
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    Amount::parse_lenient(text).map_err(|error| {
        HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!("{field}: '{text}' is not a valid amount: {error}"),
        )
    })
}

/// An exact decimal as a JSON number.
fn number(amount: Amount) -> Box<RawValue> {
    RawValue::from_string(amount.to_string()).expect("a decimal is a JSON number")
}

fn created(body: Value) -> Response {
    (StatusCode::CREATED, axum::Json(body)).into_response()
}

fn participant_json(hub: &Hub, view: &ParticipantView) -> Value {
    let name = view.participant.name.as_str();
    let link = format!("{}/participants/{name}", hub.config.admin_base_url);
    json!({
        "name": name,
        "id": link,
        "created": format_time(view.participant.created_at_ms),
        "isActive": u8::from(view.participant.mode.is_active()),
        // kasi's extension: what it may do in new payments (`isActive` is
        // 0 only when suspended).
        "mode": view.participant.mode.as_str(),
        "links": { "self": link },
        "accounts": view.accounts.iter().map(|account| json!({
            "id": account.id.0,
            "ledgerAccountType": account.kind.as_str(),
            "currency": account.currency.as_str(),
            "isActive": u8::from(account.active),
            "createdDate": format_time(account.created_at_ms),
            "createdBy": "unknown",
        })).collect::<Vec<_>>(),
        // central-ledger's flag, 0 or 1 as its table holds it.
        "isProxy": u8::from(view.participant.is_proxy),
    })
}

/// Mojaloop's position value includes what reserved transfers hold; kasi
/// keeps the hold apart (`heldValue`) and reports the sum as `value`.
fn position_value(account: &AccountRow) -> Amount {
    account
        .value
        .checked_add(account.reserved)
        .unwrap_or(account.value)
}

async fn read_participants(
    hub: &Hub,
    name: Option<FspName>,
) -> Result<Vec<ParticipantView>, HubError> {
    Ok(hub.ask(ReadParticipants { name }).await??)
}

pub(crate) async fn read_participant(hub: &Hub, name: &str) -> Result<ParticipantView, HubError> {
    let name = participant_name(name)?;
    let mut views = read_participants(hub, Some(name)).await?;
    views.pop().ok_or_else(|| {
        HubError::new(
            ErrorCode::ID_NOT_FOUND,
            format!("participant '{name}' not found"),
        )
    })
}

/// A DFSP's own, for cutting settlement answers to its share (see
/// [`crate::access::own_only`]): its accounts' ids; none when it cannot be
/// read (an unknown DFSP owns nothing).
pub(crate) async fn own_of(hub: &Hub, dfsp: FspName) -> crate::access::Own {
    let accounts = read_participants(hub, Some(dfsp))
        .await
        .map(|views| {
            views
                .iter()
                .flat_map(|view| view.accounts.iter().map(|account| u64::from(account.id.0)))
                .collect()
        })
        .unwrap_or_default();
    crate::access::Own {
        name: dfsp.to_string(),
        accounts,
    }
}

/// Runs an admin change with its audit event; a refusal is the error.
async fn apply<R, T>(hub: &Hub, change: Change, request: R) -> Result<T, HubError>
where
    R: Request<Reply = Result<T, Rejection>>,
{
    Ok(hub.ask_audited(change, request).await??)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    is_proxy: Option<String>,
}

/// `?isProxy=true` (or `1`): the proxies only (central-ledger's filter,
/// which Mojaloop's services read the proxy list with); `false` (or `0`):
/// the others.
fn proxy_filter(text: Option<&str>) -> Result<Option<bool>, HubError> {
    match text {
        None => Ok(None),
        Some("true" | "1") => Ok(Some(true)),
        Some("false" | "0") => Ok(Some(false)),
        Some(other) => Err(HubError::new(
            ErrorCode::MALFORMED_SYNTAX,
            format!("Malformed syntax - isProxy '{other}' is not true, false, 1 or 0"),
        )),
    }
}

async fn list_participants(
    State(hub): State<Arc<Hub>>,
    Query(query): Query<ListQuery>,
) -> Result<Response, HubError> {
    let only = proxy_filter(query.is_proxy.as_deref())?;
    let views = read_participants(&hub, None).await?;
    let body: Vec<Value> = views
        .iter()
        .filter(|view| only.is_none_or(|proxy| view.participant.is_proxy == proxy))
        .map(|view| participant_json(&hub, view))
        .collect();
    Ok(axum::Json(body).into_response())
}

async fn get_participant(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
) -> Result<Response, HubError> {
    let view = read_participant(&hub, &name).await?;
    Ok(axum::Json(participant_json(&hub, &view)).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewParticipant {
    name: String,
    currency: String,
    #[serde(default)]
    is_proxy: Option<Value>,
}

/// `isProxy` as central-ledger's Joi boolean takes it: `true`/`false`, or
/// the strings `"true"`/`"false"`; absent is `false`.
fn is_proxy_flag(value: Option<&Value>) -> Result<bool, HubError> {
    match value {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(flag)) => Ok(*flag),
        Some(Value::String(text)) if text == "true" => Ok(true),
        Some(Value::String(text)) if text == "false" => Ok(false),
        Some(other) => Err(HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!("isProxy: {other} is not a boolean"),
        )),
    }
}

/// Creates a DFSP, or a proxy with `"isProxy": true` (a participant that
/// stands for another scheme's DFSPs); for an existing participant, adds
/// the currency and leaves it what it is.
async fn create_participant(
    State(hub): State<Arc<Hub>>,
    body: Bytes,
) -> Result<Response, HubError> {
    let request: NewParticipant = parse(&body)?;
    let name = participant_name(&request.name)?;
    let currency = currency(&request.currency)?;
    let change = Change::participant("participant.create", name);
    if is_proxy_flag(request.is_proxy.as_ref())? {
        apply(&hub, change, CreateProxy { name, currency }).await?;
    } else {
        apply(&hub, change, CreateParticipant { name, currency }).await?;
    }
    let view = read_participant(&hub, name.as_str()).await?;
    Ok(created(participant_json(&hub, &view)))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActiveFlag {
    is_active: Value,
}

fn active_flag(flag: &Value) -> Result<bool, HubError> {
    match flag {
        Value::Bool(active) => Ok(*active),
        Value::Number(n) if n.as_u64() == Some(1) => Ok(true),
        Value::Number(n) if n.as_u64() == Some(0) => Ok(false),
        _ => Err(HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            "isActive must be true, false, 1 or 0",
        )),
    }
}

/// `PUT /participants/{name}`: central-ledger's `{"isActive": …}`, or
/// kasi's `{"mode": "active" | "send-only" | "receive-only" |
/// "suspended"}` (pausing a DFSP; exactly one of the two).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ParticipantState {
    is_active: Option<Value>,
    mode: Option<String>,
}

async fn set_participant_state(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let request: ParticipantState = parse(&body)?;
    let name = participant_name(&name)?;
    match (request.is_active, request.mode) {
        (Some(flag), None) => {
            let active = active_flag(&flag)?;
            let action = if active {
                "participant.activate"
            } else {
                "participant.deactivate"
            };
            let command = SetParticipantActive { name, active };
            apply(&hub, Change::participant(action, name), command).await?;
        }
        (None, Some(mode)) => {
            let mode = ParticipantMode::parse(&mode).ok_or_else(|| {
                HubError::new(
                    ErrorCode::GENERIC_VALIDATION_ERROR,
                    format!("mode '{mode}' is not active, send-only, receive-only or suspended"),
                )
            })?;
            let command = SetParticipantMode { name, mode };
            apply(&hub, Change::participant("participant.mode", name), command).await?;
        }
        _ => {
            return Err(HubError::new(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                "give isActive (true, false, 1 or 0) or mode (active, send-only, receive-only or suspended), not both",
            ))
        }
    }
    let view = read_participant(&hub, name.as_str()).await?;
    Ok(axum::Json(participant_json(&hub, &view)).into_response())
}

#[derive(Deserialize)]
struct NewHubAccount {
    #[serde(rename = "type")]
    kind: String,
    currency: String,
}

async fn create_hub_account(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let request: NewHubAccount = parse(&body)?;
    if name != hub.config.hub_name.as_str() {
        return Err(HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!(
                "accounts are created this way only for the hub ('{}')",
                hub.config.hub_name
            ),
        ));
    }
    let kind = AccountKind::parse(&request.kind)
        .filter(|kind| kind.is_hub())
        .ok_or_else(|| {
            HubError::new(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                "type must be HUB_MULTILATERAL_SETTLEMENT or HUB_RECONCILIATION",
            )
        })?;
    apply(
        &hub,
        Change::participant("account.create", hub.config.hub_name),
        CreateHubAccount {
            currency: currency(&request.currency)?,
            kind,
        },
    )
    .await?;
    let view = read_participant(&hub, &name).await?;
    Ok(created(participant_json(&hub, &view)))
}

async fn list_accounts(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
) -> Result<Response, HubError> {
    let view = read_participant(&hub, &name).await?;
    let accounts: Vec<Value> = view
        .accounts
        .iter()
        .map(|account| {
            json!({
                "id": account.id.0,
                "ledgerAccountType": account.kind.as_str(),
                "currency": account.currency.as_str(),
                "isActive": u8::from(account.active),
                "value": number(position_value(account)),
                "reservedValue": 0,
                "heldValue": number(account.reserved),
                // The balance's last change, as central-ledger's position row.
                "changedDate": format_time(account.changed_at_ms),
            })
        })
        .collect();
    Ok(axum::Json(accounts).into_response())
}

fn account_id(text: &str) -> Result<AccountId, HubError> {
    text.parse::<u32>()
        .ok()
        .filter(|&id| id > 0)
        .map(AccountId)
        .ok_or_else(|| {
            HubError::new(
                ErrorCode::MALFORMED_SYNTAX,
                format!("'{text}' is not an account id"),
            )
        })
}

async fn set_account_active(
    State(hub): State<Arc<Hub>>,
    Path((name, id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, HubError> {
    let request: ActiveFlag = parse(&body)?;
    let name = participant_name(&name)?;
    let active = active_flag(&request.is_active)?;
    let command = SetAccountActive {
        name,
        account: account_id(&id)?,
        active,
    };
    let action = if active {
        "account.activate"
    } else {
        "account.deactivate"
    };
    apply(&hub, Change::participant(action, name), command).await?;
    Ok(StatusCode::OK.into_response())
}

#[derive(Deserialize)]
struct MoneyJson {
    amount: Box<RawValue>,
    currency: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FundsRequest {
    transfer_id: String,
    #[serde(default)]
    external_reference: String,
    action: String,
    #[serde(default)]
    reason: String,
    amount: MoneyJson,
}

fn transfer_id(text: &str) -> Result<TransferId, HubError> {
    TransferId::parse(text).ok_or_else(|| {
        HubError::new(
            ErrorCode::MALFORMED_SYNTAX,
            format!("transferId '{text}' is not a UUID"),
        )
    })
}

/// Funds in/out are answered 202 as in central-ledger, but only once durable;
/// a refusal is answered with its error at once rather than dropped.
async fn record_funds(
    State(hub): State<Arc<Hub>>,
    Path((name, id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, HubError> {
    let request: FundsRequest = parse(&body)?;
    if !matches!(
        request.action.as_str(),
        "recordFundsIn" | "recordFundsOutPrepareReserve"
    ) {
        return Err(HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!(
                "action '{}' is not recordFundsIn or recordFundsOutPrepareReserve",
                request.action
            ),
        ));
    }
    let funds = Funds {
        transfer_id: transfer_id(&request.transfer_id)?,
        participant: participant_name(&name)?,
        account: account_id(&id)?,
        amount: amount(&request.amount.amount, "amount.amount")?,
        currency: currency(&request.amount.currency)?,
        memo: FundsMemo {
            external_reference: request.external_reference,
            reason: request.reason,
        },
        request_hash: RequestHash::of(&body),
    };
    // An FSPIOP transfer that left memory is in the store only: the
    // pipeline reads it before the ledger applies this, and its id stays
    // taken, as in central-ledger's one transfer table.
    let change = Change::participant(
        match request.action.as_str() {
            "recordFundsIn" => "funds.in",
            _ => "funds.out.reserve",
        },
        funds.participant,
    );
    let reply = match request.action.as_str() {
        "recordFundsIn" => hub.ask_audited(change, FundsIn(funds)).await?,
        _ => hub.ask_audited(change, FundsOutReserve(funds)).await?,
    };
    funds_outcome(reply)
}

fn funds_outcome(reply: TransferReply) -> Result<Response, HubError> {
    match reply {
        TransferReply::Done(_) | TransferReply::Duplicate(_) => {
            Ok(StatusCode::ACCEPTED.into_response())
        }
        TransferReply::Failed { error, .. } | TransferReply::Refused(error) => {
            Err(HubError::refused(error))
        }
    }
}

#[derive(Deserialize)]
struct FundsFinishRequest {
    action: String,
}

async fn finish_funds_out(
    State(hub): State<Arc<Hub>>,
    Path((name, id, transfer)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<Response, HubError> {
    let request: FundsFinishRequest = parse(&body)?;
    let finish = FundsFinish {
        transfer_id: transfer_id(&transfer)?,
        participant: participant_name(&name)?,
        account: account_id(&id)?,
        request_hash: RequestHash::of(&body),
    };
    let change = Change::participant(
        match request.action.as_str() {
            "recordFundsOutCommit" => "funds.out.commit",
            _ => "funds.out.abort",
        },
        finish.participant,
    );
    let reply = match request.action.as_str() {
        "recordFundsOutCommit" => hub.ask_audited(change, FundsOutCommit(finish)).await?,
        "recordFundsOutAbort" => hub.ask_audited(change, FundsOutAbort(finish)).await?,
        other => {
            return Err(HubError::new(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                format!("action '{other}' is not recordFundsOutCommit or recordFundsOutAbort"),
            ))
        }
    };
    funds_outcome(reply)
}

#[derive(Deserialize)]
struct LimitJson {
    #[serde(rename = "type")]
    kind: String,
    value: Box<RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitialPositionAndLimits {
    currency: String,
    limit: LimitJson,
    #[serde(default)]
    initial_position: Option<Box<RawValue>>,
}

fn net_debit_cap(limit: &LimitJson) -> Result<Amount, HubError> {
    if limit.kind != "NET_DEBIT_CAP" {
        return Err(HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            "limit.type must be NET_DEBIT_CAP",
        ));
    }
    amount(&limit.value, "limit.value")
}

async fn initial_position_and_limits(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let request: InitialPositionAndLimits = parse(&body)?;
    if let Some(initial) = &request.initial_position {
        if amount(initial, "initialPosition")? != Amount::ZERO {
            return Err(HubError::new(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                "initialPosition must be 0: positions move only by transfers and settlement",
            ));
        }
    }
    let name = participant_name(&name)?;
    let command = InitNetDebitCap {
        name,
        currency: currency(&request.currency)?,
        net_debit_cap: net_debit_cap(&request.limit)?,
    };
    apply(&hub, Change::participant("limits.init", name), command).await?;
    Ok(StatusCode::CREATED.into_response())
}

#[derive(Deserialize)]
struct SetLimits {
    currency: String,
    limit: LimitJson,
}

async fn set_limits(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let request: SetLimits = parse(&body)?;
    let cap = net_debit_cap(&request.limit)?;
    let name = participant_name(&name)?;
    let command = SetNetDebitCap {
        name,
        currency: currency(&request.currency)?,
        net_debit_cap: cap,
    };
    // The DFSP is told by the alerts' change feed follower
    // (`alerts_feed`), from the committed change.
    apply(&hub, Change::participant("limits.set", name), command).await?;
    Ok(axum::Json(json!({
        "currency": request.currency,
        "limit": { "type": "NET_DEBIT_CAP", "value": number(cap), "alarmPercentage": 10 },
    }))
    .into_response())
}

fn limits_of(view: &ParticipantView, currency: Option<&str>, with_name: bool) -> Vec<Value> {
    view.accounts
        .iter()
        .filter(|account| account.kind == AccountKind::Position)
        .filter(|account| currency.is_none_or(|c| c == account.currency.as_str()))
        .filter_map(|account| {
            let cap = account.net_debit_cap?;
            let mut limit = json!({
                "currency": account.currency.as_str(),
                "limit": { "type": "NET_DEBIT_CAP", "value": number(cap), "alarmPercentage": 10 },
            });
            if with_name {
                limit["name"] = json!(view.participant.name.as_str());
            }
            Some(limit)
        })
        .collect()
}

async fn participant_limits(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, HubError> {
    let view = read_participant(&hub, &name).await?;
    Ok(axum::Json(limits_of(
        &view,
        query.get("currency").map(String::as_str),
        false,
    ))
    .into_response())
}

async fn all_limits(
    State(hub): State<Arc<Hub>>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, HubError> {
    let views = read_participants(&hub, None).await?;
    let currency = query.get("currency").map(String::as_str);
    let limits: Vec<Value> = views
        .iter()
        .flat_map(|view| limits_of(view, currency, true))
        .collect();
    Ok(axum::Json(limits).into_response())
}

#[derive(Deserialize)]
struct NewEndpoint {
    #[serde(rename = "type")]
    kind: String,
    value: String,
}

async fn set_endpoint(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let request: NewEndpoint = parse(&body)?;
    crate::endpoints::check_endpoint(&request.kind, &request.value)?;
    // E-mail endpoint types (Mojaloop's notifications) are not URLs.
    if request.kind.contains("_URL") {
        crate::callback_url::check("value", &request.value, &hub.config.callback_allow)?;
    }
    let name = participant_name(&name)?;
    apply(
        &hub,
        Change::participant("endpoint.set", name),
        SetEndpoint {
            name,
            endpoint_type: request.kind.clone(),
            value: request.value.clone(),
        },
    )
    .await?;
    Ok(StatusCode::CREATED.into_response())
}

async fn list_endpoints(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
) -> Result<Response, HubError> {
    let view = read_participant(&hub, &name).await?;
    let endpoints: Vec<Value> = view
        .endpoints
        .iter()
        .map(|e| json!({ "type": e.endpoint_type, "value": e.value }))
        .collect();
    Ok(axum::Json(endpoints).into_response())
}

async fn positions(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, HubError> {
    let view = read_participant(&hub, &name).await?;
    let position = |account: &AccountRow| {
        json!({
            "currency": account.currency.as_str(),
            "value": number(position_value(account)),
            "changedDate": format_time(account.changed_at_ms),
        })
    };
    let accounts = view
        .accounts
        .iter()
        .filter(|account| account.kind == AccountKind::Position);
    match query.get("currency") {
        Some(wanted) => {
            let account = accounts
                .into_iter()
                .find(|account| account.currency.as_str() == wanted)
                .ok_or_else(|| {
                    HubError::new(
                        ErrorCode::ID_NOT_FOUND,
                        format!("participant '{name}' has no {wanted} position"),
                    )
                })?;
            Ok(axum::Json(position(account)).into_response())
        }
        None => Ok(axum::Json(accounts.map(position).collect::<Vec<_>>()).into_response()),
    }
}

/// `POST /settlementModels` as central-ledger validates it: every field
/// required but `currency`; the enumerations checked; account types that
/// Mojaloop knows but kasi's transfers never move (INTERCHANGE_FEE) make a
/// model that is kept and shown but settles nothing.
fn settlement_model_rules(body: &Value) -> Result<Option<ledger::ModelRules>, HubError> {
    let field = |name: &str| -> Result<&Value, HubError> {
        body.get(name).filter(|v| !v.is_null()).ok_or_else(|| {
            HubError::new(
                ErrorCode::MISSING_MANDATORY_ELEMENT,
                format!("Missing mandatory element - {name}"),
            )
        })
    };
    let invalid = |name: &str, allowed: &str| {
        HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!("Generic validation error - {name} must be one of {allowed}"),
        )
    };
    let text = |name: &str, allowed: &str| -> Result<&str, HubError> {
        field(name)?.as_str().ok_or_else(|| invalid(name, allowed))
    };
    let flag = |name: &str| -> Result<bool, HubError> {
        match field(name)? {
            Value::Bool(b) => Ok(*b),
            // Mojaloop's Joi takes "true"/"false" and 1/0 for booleans too.
            Value::String(s) if s == "true" || s == "false" => Ok(s == "true"),
            Value::Number(n) if n.as_u64() == Some(0) || n.as_u64() == Some(1) => {
                Ok(n.as_u64() == Some(1))
            }
            _ => Err(invalid(name, "true, false")),
        }
    };
    let name = text("name", "a string")?;
    if name.len() < 2 || name.len() > 30 || !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            "Generic validation error - name must be 2 to 30 letters and digits",
        ));
    }
    let granularity = ledger::Granularity::parse(text("settlementGranularity", "GROSS, NET")?)
        .ok_or_else(|| invalid("settlementGranularity", "GROSS, NET"))?;
    let interchange =
        ledger::Interchange::parse(text("settlementInterchange", "BILATERAL, MULTILATERAL")?)
            .ok_or_else(|| invalid("settlementInterchange", "BILATERAL, MULTILATERAL"))?;
    let delay = ledger::Delay::parse(text("settlementDelay", "IMMEDIATE, DEFERRED")?)
        .ok_or_else(|| invalid("settlementDelay", "IMMEDIATE, DEFERRED"))?;
    let currency = match body.get("currency").filter(|v| !v.is_null()) {
        None => None,
        Some(value) => Some(
            value
                .as_str()
                .and_then(Currency::parse)
                .ok_or_else(|| invalid("currency", "the ISO 4217 codes"))?,
        ),
    };
    let require_liquidity_check = flag("requireLiquidityCheck")?;
    let auto_position_reset = flag("autoPositionReset")?;
    let ledger_type = text("ledgerAccountType", "a ledger account type")?;
    // Older onboarding scripts (central-ledger before the field existed)
    // leave it out; it meant SETTLEMENT then.
    let settlement_type = match body.get("settlementAccountType") {
        None | Some(Value::Null) => "SETTLEMENT",
        Some(_) => text(
            "settlementAccountType",
            "SETTLEMENT, INTERCHANGE_FEE_SETTLEMENT",
        )?,
    };
    if !matches!(settlement_type, "SETTLEMENT" | "INTERCHANGE_FEE_SETTLEMENT") {
        return Err(invalid(
            "settlementAccountType",
            "SETTLEMENT, INTERCHANGE_FEE_SETTLEMENT",
        ));
    }
    const KNOWN_TYPES: &[&str] = &[
        "POSITION",
        "SETTLEMENT",
        "HUB_RECONCILIATION",
        "HUB_MULTILATERAL_SETTLEMENT",
        "INTERCHANGE_FEE",
        "INTERCHANGE_FEE_SETTLEMENT",
    ];
    if !KNOWN_TYPES.contains(&ledger_type) {
        return Err(HubError::new(
            ErrorCode::ADD_PARTY_INFORMATION_ERROR,
            "Add Party information error - Ledger account type was not found",
        ));
    }
    let rules = ledger::ModelRules {
        granularity,
        interchange,
        delay,
        currency,
        ledger_account_type: AccountKind::Position,
        settlement_account_type: AccountKind::Settlement,
        auto_position_reset,
        require_liquidity_check,
    };
    if !rules.is_valid_combination() {
        return Err(HubError::new(
            ErrorCode::GENERIC_CLIENT_ERROR,
            format!(
                "Generic client error - Invalid settlement model definition: {}/{}/{} (delay/granularity/interchange) is not a model Mojaloop supports",
                delay.as_str(),
                granularity.as_str(),
                interchange.as_str()
            ),
        ));
    }
    let moves_kasi_accounts = ledger_type == "POSITION" && settlement_type == "SETTLEMENT";
    Ok(moves_kasi_accounts.then_some(rules))
}

async fn create_settlement_model(
    State(hub): State<Arc<Hub>>,
    body: Bytes,
) -> Result<Response, HubError> {
    let definition: Value = parse(&body)?;
    let rules = settlement_model_rules(&definition)?;
    let name = definition["name"].as_str().unwrap_or_default().to_string();
    let change = Change::settlement_model(&name);
    let command = CreateSettlementModel {
        name,
        definition: definition.to_string(),
        rules,
    };
    apply(&hub, change, command).await?;
    Ok(StatusCode::CREATED.into_response())
}

async fn list_settlement_models(State(hub): State<Arc<Hub>>) -> Result<Response, HubError> {
    let models = hub.ask(ReadSettlementModels {}).await??;
    let body: Vec<Value> = models
        .iter()
        .map(|model| {
            let mut value: Value =
                serde_json::from_str(&model.definition).unwrap_or_else(|_| json!({}));
            if let Value::Object(map) = &mut value {
                map.insert("settlementModelId".into(), json!(model.id));
                map.insert("name".into(), json!(model.name));
                map.entry("isActive").or_insert(json!(1));
                // central-ledger answers null for a model without one, and
                // Mojaloop's collections test `=== null`.
                map.entry("currency").or_insert(Value::Null);
                // central-ledger names the ledger account type under this
                // key in its answers (the request's key is
                // `ledgerAccountType`).
                let ledger_type = map.get("ledgerAccountType").cloned().unwrap_or(Value::Null);
                map.entry("ledgerAccountTypeId").or_insert(ledger_type);
            }
            value
        })
        .collect();
    Ok(axum::Json(body).into_response())
}
