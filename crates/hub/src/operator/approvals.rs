//! Maker/checker (four-eyes): the admin changes `--four-eyes` names do
//! not apply when asked; each becomes a pending change that a different
//! person approves (then it applies) or rejects, before it expires.
//!
//! [`hold`] sits inside the admin API's authentication layer: it sees the
//! caller (who asked) and the route's matched pattern, recognises a held
//! action ([`classify`]), and keeps the request as it was asked — method,
//! path, the exact body — with who asked and why, through the ledger
//! (`Command::KeepPendingChange`, so the store keeps it durably with the
//! changes it governs), answering `202 Accepted` with the pending change.
//!
//! `POST /approvals/{id}` decides. Approving runs the kept request again,
//! in-process, through the same admin API with the approver's credential
//! and a marker ([`Approving`]) that only the hub can set (an extension,
//! never a header): the authentication layer checks the approver's role
//! against the access table for the original route, and the handler runs
//! the change against the ledger as it is then, so a funds-out approved
//! after the liquidity dropped is refused by the ledger then, and the
//! pending change is marked `failed` with that refusal. Decisions are one
//! at a time (a lock), so a change is never applied twice.
//!
//! Each step is an audit event (`approval.requested`, `.approved`,
//! `.rejected`, `.expired`, `.applied`, `.failed`; target `approval/{id}`,
//! before and after the pending change), beside the change's own event,
//! whose actor is the approver. An expired change is marked so, by the
//! hub, every second ([`Hub::start_four_eyes_expiry`]) and whenever the
//! approvals are read or decided, before it is shown.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use ledger::request::{KeepPendingChange, ReadPendingChanges};
use ledger::{Outcome, PendingChangeRow};
use serde_json::{json, Value};

use crate::admin_auth::{current_caller, refusal, Caller, Source, CALLER};
use crate::audit::Change;
use crate::{format_time, Hub, HubError};

/// A four-eyes action: what `--four-eyes` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    FundsOut,
    FundsIn,
    NetDebitCap,
    SettlementFinalize,
    ParticipantDeactivate,
    Endpoints,
}

impl Action {
    pub const ALL: [Action; 6] = [
        Action::FundsOut,
        Action::FundsIn,
        Action::NetDebitCap,
        Action::SettlementFinalize,
        Action::ParticipantDeactivate,
        Action::Endpoints,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::FundsOut => "funds-out",
            Action::FundsIn => "funds-in",
            Action::NetDebitCap => "net-debit-cap",
            Action::SettlementFinalize => "settlement-finalize",
            Action::ParticipantDeactivate => "participant-deactivate",
            Action::Endpoints => "endpoints",
        }
    }
}

/// `--four-eyes`'s default: the money moving out, the cap on a DFSP's
/// debt, and settling.
pub const DEFAULT_ACTIONS: &str = "funds-out,net-debit-cap,settlement-finalize";

/// `--four-eyes-expiry`'s default.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(24 * 3600);

/// Which actions need a second person, and how long a request waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FourEyes {
    actions: BTreeSet<Action>,
    pub expiry: Duration,
}

impl FourEyes {
    /// None held: every change applies when asked (the library's default;
    /// `kasi serve` holds [`DEFAULT_ACTIONS`]).
    pub fn off() -> FourEyes {
        FourEyes {
            actions: BTreeSet::new(),
            expiry: DEFAULT_EXPIRY,
        }
    }

    /// `funds-out,net-debit-cap`, or `none`; `Err` names what is allowed.
    pub fn parse(list: &str, expiry: Duration) -> Result<FourEyes, String> {
        let mut actions = BTreeSet::new();
        if list.trim() != "none" {
            for name in list.split(',').map(str::trim) {
                let action = Action::ALL
                    .into_iter()
                    .find(|action| action.as_str() == name)
                    .ok_or_else(|| {
                        let all: Vec<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
                        format!(
                            "'{name}' is not a four-eyes action: a comma list of {}, or none",
                            all.join(", ")
                        )
                    })?;
                actions.insert(action);
            }
        }
        Ok(FourEyes { actions, expiry })
    }

    pub fn holds(&self, action: Action) -> bool {
        self.actions.contains(&action)
    }
}

/// On a request the hub runs again at approval: lets it past [`hold`].
#[derive(Clone, Copy, Debug)]
struct Approving;

/// The routes a held action can come by: method and pattern.
const HELD_ROUTES: &[(&str, &str)] = &[
    ("POST", "/participants/:name/accounts/:id"),
    ("PUT", "/participants/:name/accounts/:id"),
    ("PUT", "/participants/:name/limits"),
    ("PUT", "/participants/:name"),
    ("POST", "/participants/:name/endpoints"),
    ("POST", "/v2/settlements/:id/finalize"),
    ("PUT", "/v2/settlements/:id"),
    ("PUT", "/v2/settlements/:id/participants/:pid"),
    ("PUT", "/v2/settlements/:id/participants/:pid/accounts/:aid"),
];

/// The four-eyes action a request is, and what it changes; `None` for
/// any other request. A funds-out is its reservation (the commit or abort
/// of a reserved one follows from it); a net debit cap its change (`PUT
/// …/limits`; the first one, at onboarding, is the onboarding's); a
/// settlement finalize is `…/finalize` or any settlement update that
/// settles (`state: SETTLED` anywhere in it); a deactivation is a
/// participant made inactive or paused, or an account disabled.
fn classify(
    method: &str,
    pattern: &str,
    params: &[(&str, &str)],
    body: &Value,
) -> Option<(Action, String)> {
    let param = |key: &str| {
        params
            .iter()
            .find(|(name, _)| *name == key)
            .map_or("", |(_, value)| *value)
    };
    let participant = || param("name").to_string();
    let settlement = || format!("settlement/{}", param("id"));
    let action = match (method, pattern) {
        ("POST", "/participants/:name/accounts/:id") => match body["action"].as_str() {
            Some("recordFundsOutPrepareReserve") => Action::FundsOut,
            Some("recordFundsIn") => Action::FundsIn,
            _ => return None,
        },
        ("PUT", "/participants/:name/limits") => Action::NetDebitCap,
        ("PUT", "/participants/:name") | ("PUT", "/participants/:name/accounts/:id") => {
            // Every spelling the handler reads as inactive
            // (`admin::active_flag`: false or 0), else `0` would pass.
            let inactive = body["isActive"] == json!(false) || body["isActive"] == json!(0);
            let paused = body["mode"].as_str().is_some_and(|mode| mode != "active");
            if !(inactive || paused) {
                return None;
            }
            Action::ParticipantDeactivate
        }
        ("POST", "/participants/:name/endpoints") => Action::Endpoints,
        ("POST", "/v2/settlements/:id/finalize") => {
            return Some((Action::SettlementFinalize, settlement()))
        }
        ("PUT", pattern) if pattern.starts_with("/v2/settlements/") => {
            if !settles(body) {
                return None;
            }
            return Some((Action::SettlementFinalize, settlement()));
        }
        _ => return None,
    };
    Some((action, participant()))
}

/// Whether a settlement update moves anything to `SETTLED`.
fn settles(body: &Value) -> bool {
    match body {
        Value::Object(fields) => fields
            .iter()
            .any(|(key, value)| (key == "state" && value == "SETTLED") || settles(value)),
        Value::Array(items) => items.iter().any(settles),
        _ => false,
    }
}

/// The held route a kept path came by, and its parameters.
fn route_of<'a>(
    method: &str,
    path: &'a str,
) -> Option<(&'static str, Vec<(&'static str, &'a str)>)> {
    let path = path.split('?').next().unwrap_or(path);
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    HELD_ROUTES.iter().find_map(|&(route_method, pattern)| {
        let parts: Vec<&str> = pattern.trim_start_matches('/').split('/').collect();
        if route_method != method || parts.len() != segments.len() {
            return None;
        }
        let mut params = Vec::new();
        for (part, segment) in parts.iter().zip(&segments) {
            match part.strip_prefix(':') {
                Some(name) => params.push((name, *segment)),
                None if part == segment => {}
                None => return None,
            }
        }
        Some((pattern, params))
    })
}

/// The header a maker may say why in (else the body's `reason`, if any).
pub const REASON_HEADER: &str = "kasi-reason";

/// Holds a request for a held action as a pending change (see the
/// module's documentation); passes every other.
pub async fn hold(hub: Arc<Hub>, request: Request, next: Next) -> Response {
    let four_eyes = &hub.config.four_eyes;
    let method = request.method().as_str().to_string();
    let pattern = request
        .extensions()
        .get::<MatchedPath>()
        .map(|matched| matched.as_str().to_string());
    let held_route = pattern
        .as_deref()
        .is_some_and(|pattern| HELD_ROUTES.contains(&(method.as_str(), pattern)));
    if four_eyes.actions.is_empty()
        || !held_route
        || request.extensions().get::<Approving>().is_some()
    {
        return next.run(request).await;
    }
    let pattern = pattern.unwrap_or_default();
    let (mut parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, hub.config.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            )
        }
    };
    let params = path_params(&mut parts).await;
    let params: Vec<(&str, &str)> = params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let held =
        classify(&method, &pattern, &params, &json).filter(|(action, _)| four_eyes.holds(*action));
    let Some((action, target)) = held else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    let Ok(body) = String::from_utf8(bytes.to_vec()) else {
        return refusal(StatusCode::BAD_REQUEST, "the request body is not UTF-8");
    };
    let reason = parts
        .headers
        .get(REASON_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string)
        .or_else(|| json["reason"].as_str().map(str::to_string))
        .unwrap_or_default();
    let maker = current_caller();
    let now = hub.now_ms();
    let row = PendingChangeRow {
        id: new_id(),
        action: action.as_str().to_string(),
        target,
        method,
        path: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), |p| p.as_str().to_string()),
        body,
        maker: maker.name.clone(),
        maker_role: maker.role.to_string(),
        maker_source: maker.source.as_str().to_string(),
        reason,
        created_at_ms: now,
        expires_at_ms: now.saturating_add(four_eyes.expiry.as_millis() as i64),
        state: "pending".to_string(),
        checker: String::new(),
        checker_role: String::new(),
        decision_reason: String::new(),
        decided_at_ms: 0,
    };
    if let Err(error) = keep(&hub, "requested", row.clone()).await {
        return error.into_response();
    }
    tracing::info!(
        id = %row.id,
        action = %row.action,
        target = %row.target,
        maker = %row.maker,
        "four-eyes: change held for a second person's approval"
    );
    let mut response = (StatusCode::ACCEPTED, axum::Json(pending_json(&row))).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/approvals/{}", row.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

async fn path_params(parts: &mut axum::http::request::Parts) -> Vec<(String, String)> {
    use axum::extract::FromRequestParts as _;
    axum::extract::RawPathParams::from_request_parts(parts, &())
        .await
        .map(|params| {
            params
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// A pending change's id: 16 random bytes, hex.
fn new_id() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(&mut bytes))
        .is_err()
    {
        // No OS randomness: unique within this process is enough for an
        // id that is only looked up, never guessed at for access.
        bytes[..8].copy_from_slice(&crate::now_ms().to_be_bytes());
    }
    crate::admin_auth::hex(&bytes)
}

/// Keeps `row` through the ledger, as an audit event `approval.{step}`.
async fn keep(hub: &Hub, step: &str, row: PendingChangeRow) -> Result<(), HubError> {
    let change = Change::approval(step, &row.id);
    let action = row.action.clone();
    hub.ask_audited(change, KeepPendingChange(Box::new(row)))
        .await??;
    hub.metrics.record_approval_step(&action, step);
    Ok(())
}

/// The audit event's rendering of the pending change `approval/{id}`
/// names, from `ReadPendingChanges`' outcome.
pub fn render_approval(target: &str, outcome: &Outcome) -> String {
    let id = target.strip_prefix("approval/").unwrap_or(target);
    match outcome {
        Outcome::PendingChanges(rows) => rows
            .iter()
            .find(|row| row.id == id)
            .map_or_else(|| "null".to_string(), |row| pending_json(row).to_string()),
        _ => "null".to_string(),
    }
}

/// A pending change as the API shows it.
pub fn pending_json(row: &PendingChangeRow) -> Value {
    let decided = row.decided_at_ms != 0;
    json!({
        "id": row.id,
        "action": row.action,
        "target": row.target,
        "request": {"method": row.method, "path": row.path, "body": row.body},
        "requestedBy": {"name": row.maker, "role": row.maker_role, "source": row.maker_source},
        "reason": row.reason,
        "createdDate": format_time(row.created_at_ms),
        "expiresDate": format_time(row.expires_at_ms),
        "state": row.state,
        "decidedBy": (!row.checker.is_empty())
            .then(|| json!({"name": row.checker, "role": row.checker_role})),
        "decisionReason": row.decision_reason,
        "decidedDate": decided.then(|| format_time(row.decided_at_ms)),
    })
}

/// The hub itself, as the actor of an expiry.
fn the_hub() -> Caller {
    Caller {
        name: "kasi".to_string(),
        role: crate::access::Role::Operator,
        source: Source::Hub,
    }
}

/// Decisions one at a time: a change is applied once.
static DECIDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Every pending change, the expired ones marked so first.
async fn current(hub: &Hub) -> Result<Vec<PendingChangeRow>, HubError> {
    let mut rows = hub.ask(ReadPendingChanges {}).await??;
    let now = hub.now_ms();
    for row in rows.iter_mut() {
        if row.state == "pending" && now >= row.expires_at_ms {
            row.state = "expired".to_string();
            row.decided_at_ms = now;
            CALLER
                .scope(the_hub(), keep(hub, "expired", row.clone()))
                .await?;
            tracing::info!(id = %row.id, action = %row.action, target = %row.target,
                "four-eyes: change expired unapproved");
        }
    }
    let pending = rows.iter().filter(|row| row.state == "pending").count();
    hub.metrics.set_approvals_pending(pending);
    Ok(rows)
}

/// How often the hub looks for pending changes past their expiry.
const EXPIRY_CHECK: Duration = Duration::from_secs(1);

impl Hub {
    /// Marks pending changes expired once their time passes (as reading
    /// them does), so the audit trail says so even when nobody looks; on
    /// a task, when four-eyes is on.
    pub fn start_four_eyes_expiry(self: &Arc<Self>) {
        if self.config.four_eyes.actions.is_empty() {
            return;
        }
        let hub = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(EXPIRY_CHECK).await;
                let _deciding = DECIDING.lock().await;
                if let Err(error) = current(&hub).await {
                    // The ledger refused or is stopping: the next look, or
                    // the next read of the approvals, marks them.
                    tracing::debug!(%error, "four-eyes: expiry check failed");
                }
            }
        });
    }
}

/// The admin API's `/approvals` routes; `api` is filled with the admin
/// API itself once built, which approving runs the kept request through.
pub fn router(hub: Arc<Hub>, api: Arc<OnceLock<Router>>) -> Router {
    Router::new()
        .route("/approvals", get(list))
        .route("/approvals/:id", get(one).post(decide))
        .with_state((hub, api))
}

type Shared = (Arc<Hub>, Arc<OnceLock<Router>>);

async fn list(State((hub, _)): State<Shared>) -> Result<Response, HubError> {
    let _deciding = DECIDING.lock().await;
    let mut rows = current(&hub).await?;
    // Pending first, then the newest.
    rows.sort_by_key(|row| (row.state != "pending", std::cmp::Reverse(row.created_at_ms)));
    let rows: Vec<Value> = rows.iter().map(pending_json).collect();
    Ok(axum::Json(rows).into_response())
}

async fn one(State((hub, _)): State<Shared>, Path(id): Path<String>) -> Result<Response, HubError> {
    let _deciding = DECIDING.lock().await;
    let rows = current(&hub).await?;
    match rows.iter().find(|row| row.id == id) {
        Some(row) => Ok(axum::Json(pending_json(row)).into_response()),
        None => Ok(not_found(&id)),
    }
}

fn not_found(id: &str) -> Response {
    refusal(StatusCode::NOT_FOUND, &format!("no pending change '{id}'"))
}

/// Refuses a decision, counted and logged (rate-limited) as every refusal.
fn refuse_decision(hub: &Hub, id: &str, status: StatusCode, why: String) -> Response {
    hub.refuse(crate::refused::Class::AdminInvalid, id, &why);
    refusal(status, &why)
}

async fn decide(
    State((hub, api)): State<Shared>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, HubError> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map_err(|_| HubError::new(ledger::ErrorCode::MALFORMED_SYNTAX, "unreadable body"))?;
    let decision: Value = serde_json::from_slice(&bytes).map_err(|error| {
        HubError::new(
            ledger::ErrorCode::MALFORMED_SYNTAX,
            format!("the decision is not JSON: {error}"),
        )
    })?;
    let approve = match decision["decision"].as_str() {
        Some("approve") => true,
        Some("reject") => false,
        _ => {
            return Err(HubError::new(
                ledger::ErrorCode::GENERIC_VALIDATION_ERROR,
                "decision must be \"approve\" or \"reject\"",
            ))
        }
    };
    let reason = decision["reason"].as_str().unwrap_or_default().to_string();
    let _deciding = DECIDING.lock().await;
    let rows = current(&hub).await?;
    let Some(row) = rows.into_iter().find(|row| row.id == id) else {
        return Ok(not_found(&id));
    };
    if row.state != "pending" {
        let why = format!(
            "pending change {id} is {} already: nothing to decide",
            row.state
        );
        return Ok(refuse_decision(&hub, &id, StatusCode::CONFLICT, why));
    }
    let checker = current_caller();
    if checker.name == row.maker {
        let why = format!(
            "'{}' asked for change {id}: a different person must approve or reject it",
            checker.name
        );
        return Ok(refuse_decision(&hub, &id, StatusCode::FORBIDDEN, why));
    }
    let may = route_of(&row.method, &row.path).is_some_and(|(pattern, params)| {
        let method = Method::from_bytes(row.method.as_bytes()).unwrap_or(Method::POST);
        crate::access::may(checker.role, &method, pattern, &params)
    });
    if !may {
        let why = format!(
            "role {} may not make a {} change, so may not decide on one",
            checker.role, row.action
        );
        return Ok(refuse_decision(&hub, &id, StatusCode::FORBIDDEN, why));
    }
    let mut decided = PendingChangeRow {
        checker: checker.name.clone(),
        checker_role: checker.role.to_string(),
        decision_reason: reason,
        decided_at_ms: hub.now_ms(),
        state: if approve { "approved" } else { "rejected" }.to_string(),
        ..row
    };
    keep(&hub, &decided.state.clone(), decided.clone()).await?;
    if !approve {
        tracing::info!(id = %decided.id, checker = %decided.checker, "four-eyes: change rejected");
        return Ok(axum::Json(pending_json(&decided)).into_response());
    }
    let Some(api) = api.get() else {
        return Err(HubError::new(
            ledger::ErrorCode::INTERNAL_SERVER_ERROR,
            "the admin API is not built yet",
        ));
    };
    let (status, answer) = apply(api.clone(), &decided, &parts).await;
    if status.is_success() {
        decided.state = "applied".to_string();
        keep(&hub, "applied", decided.clone()).await?;
        tracing::info!(id = %decided.id, action = %decided.action, target = %decided.target,
            maker = %decided.maker, checker = %decided.checker, "four-eyes: change applied");
        let mut shown = pending_json(&decided);
        shown["result"] = serde_json::from_slice(&answer).unwrap_or(Value::Null);
        return Ok(axum::Json(shown).into_response());
    }
    let refused = serde_json::from_slice::<Value>(&answer)
        .ok()
        .and_then(|error| {
            let info = &error["errorInformation"];
            Some(format!(
                "{} {}",
                info["errorCode"].as_str()?,
                info["errorDescription"].as_str().unwrap_or_default()
            ))
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&answer).into_owned());
    let refused = format!("refused when applied ({status}): {refused}");
    decided.state = "failed".to_string();
    decided.decision_reason = match decided.decision_reason.is_empty() {
        true => refused.clone(),
        false => format!("{}; {refused}", decided.decision_reason),
    };
    keep(&hub, "failed", decided.clone()).await?;
    let why = format!("change {} approved but {refused}", decided.id);
    hub.refuse(crate::refused::Class::AdminInvalid, &decided.target, &why);
    let mut shown = pending_json(&decided);
    shown["errorInformation"] = json!({"errorCode": "3100", "errorDescription": why});
    Ok((StatusCode::CONFLICT, axum::Json(shown)).into_response())
}

/// Runs the kept request through the admin API with the approver's
/// credential (from their decision's request) and the [`Approving`]
/// marker: its status and body.
async fn apply(
    api: Router,
    row: &PendingChangeRow,
    decision: &axum::http::request::Parts,
) -> (StatusCode, axum::body::Bytes) {
    use tower::ServiceExt as _;
    let mut request = Request::new(Body::from(row.body.clone()));
    *request.method_mut() = Method::from_bytes(row.method.as_bytes()).unwrap_or(Method::POST);
    *request.uri_mut() = row.path.parse().unwrap_or_default();
    let headers = request.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(credential) = decision.headers.get(header::AUTHORIZATION) {
        headers.insert(header::AUTHORIZATION, credential.clone());
    }
    if let Some(connection) = decision.extensions.get::<crate::tls::Connection>() {
        request.extensions_mut().insert(connection.clone());
    }
    request.extensions_mut().insert(Approving);
    let response = match api.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    (status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_actions_read_as_the_flag_names_them() {
        let default = FourEyes::parse(DEFAULT_ACTIONS, DEFAULT_EXPIRY).unwrap();
        assert!(default.holds(Action::FundsOut));
        assert!(default.holds(Action::NetDebitCap));
        assert!(default.holds(Action::SettlementFinalize));
        assert!(!default.holds(Action::FundsIn));
        assert_eq!(
            FourEyes::parse("none", DEFAULT_EXPIRY).unwrap(),
            FourEyes::off()
        );
        let error = FourEyes::parse("funds-out,payouts", DEFAULT_EXPIRY).unwrap_err();
        assert!(
            error.contains("'payouts'") && error.contains("endpoints"),
            "{error}"
        );
    }

    #[test]
    fn a_request_is_held_by_what_it_does() {
        let name = [("name", "payerfsp"), ("id", "3")];
        let funds =
            |action: &str| json!({"action": action, "amount": {"amount": "5", "currency": "USD"}});
        let post = "/participants/:name/accounts/:id";
        assert_eq!(
            classify("POST", post, &name, &funds("recordFundsOutPrepareReserve")),
            Some((Action::FundsOut, "payerfsp".to_string()))
        );
        assert_eq!(
            classify("POST", post, &name, &funds("recordFundsIn")).map(|held| held.0),
            Some(Action::FundsIn)
        );
        let pause = json!({"mode": "send-only"});
        let put = "/participants/:name";
        assert_eq!(
            classify("PUT", put, &name, &pause).map(|held| held.0),
            Some(Action::ParticipantDeactivate)
        );
        assert_eq!(
            classify("PUT", put, &name, &json!({"isActive": true})),
            None
        );
        assert_eq!(classify("PUT", put, &name, &json!({"isActive": 1})), None);
        let account = "/participants/:name/accounts/:id";
        for off in [json!({"isActive": false}), json!({"isActive": 0})] {
            for pattern in [put, account] {
                assert_eq!(
                    classify("PUT", pattern, &name, &off).map(|held| held.0),
                    Some(Action::ParticipantDeactivate),
                    "{pattern} {off}"
                );
            }
        }
        let settle = json!({"participants": [{"accounts": [{"state": "SETTLED"}]}]});
        let settlement = [("id", "4")];
        assert_eq!(
            classify("PUT", "/v2/settlements/:id", &settlement, &settle),
            Some((Action::SettlementFinalize, "settlement/4".to_string()))
        );
        let recorded = json!({"state": "PS_TRANSFERS_RECORDED"});
        assert_eq!(
            classify("PUT", "/v2/settlements/:id", &settlement, &recorded),
            None
        );
    }

    #[test]
    fn a_kept_path_finds_its_route_again() {
        let (pattern, params) = route_of("PUT", "/participants/payerfsp/limits").unwrap();
        assert_eq!(pattern, "/participants/:name/limits");
        assert_eq!(params, [("name", "payerfsp")]);
        let (pattern, _) = route_of("POST", "/v2/settlements/7/finalize?x=1").unwrap();
        assert_eq!(pattern, "/v2/settlements/:id/finalize");
        assert!(route_of("GET", "/participants/payerfsp/limits").is_none());
    }
}
