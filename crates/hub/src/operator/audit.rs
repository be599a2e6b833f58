//! Audit events of admin changes: how handlers tag a change with who made
//! it, what the events show of the changed resource, and
//! `GET /audit-events`.
//!
//! A change goes to the ledger as [`Command::Audited`]: the caller (from
//! [`admin_auth`](crate::admin_auth)), the action and the target, and a read
//! of the target that the ledger applies just before and after the change;
//! the renderings here turn those reads into the event's `before` and
//! `after` JSON. The ledger records the event in the change's own batch,
//! so the store commits both in one transaction.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use ledger::{
    AuditEventRow, AuditQuery, AuditRender, AuditTag, Command, ErrorCode, FspName, Outcome, Request,
};
use serde_json::{json, Value};

use crate::admin_auth::current_caller;
use crate::{format_time, Hub, HubError};

/// Events `GET /audit-events` answers by default, and at most.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1_000;

/// What a change is, for its audit event.
pub struct Change {
    pub action: String,
    pub target: String,
    view: Option<Command>,
    render: fn(&str, &Outcome) -> String,
}

impl Change {
    /// A change of one participant (its accounts, limits, endpoints, funds,
    /// certificates): the event shows the participant before and after.
    pub fn participant(action: &str, name: FspName) -> Change {
        Change {
            action: action.to_string(),
            target: name.to_string(),
            view: Some(Command::ReadParticipants { name: Some(name) }),
            render: render_participant,
        }
    }

    /// A certificate pinned to or unpinned from a participant: the event
    /// shows the participant's pins before and after.
    pub fn certificates(action: &str, name: FspName) -> Change {
        Change {
            action: action.to_string(),
            target: name.to_string(),
            view: Some(Command::ReadCertificatePins),
            render: crate::pins::render_pins,
        }
    }

    /// An FXP's corridors declared: the event shows its corridors before
    /// and after.
    pub fn fxp(action: &str, name: FspName) -> Change {
        Change {
            action: action.to_string(),
            target: name.to_string(),
            view: Some(Command::ReadFxps),
            render: crate::fxps::render_fxp,
        }
    }

    /// An oracle change: the event shows the live oracles before and after.
    pub fn oracles(action: &str, target: String) -> Change {
        Change {
            action: action.to_string(),
            target,
            view: Some(Command::ReadOracles),
            render: render_oracles,
        }
    }

    /// A proxy map entry set or deleted: the event shows the DFSP's entry
    /// before and after.
    pub fn proxy_map(action: &str, dfsp: FspName) -> Change {
        Change {
            action: action.to_string(),
            target: format!("proxyMap/{dfsp}"),
            view: Some(Command::ReadProxyMap),
            render: crate::proxies::render_entry,
        }
    }

    /// A settlement model created: the event shows the model after.
    pub fn settlement_model(name: &str) -> Change {
        Change {
            action: "settlementModel.create".to_string(),
            target: format!("settlementModel/{name}"),
            view: Some(Command::ReadSettlementModels),
            render: render_model,
        }
    }

    /// A window closed: the window before and after.
    pub fn window_close(id: u32) -> Change {
        Change {
            action: "settlementWindow.close".to_string(),
            target: format!("settlementWindow/{id}"),
            view: Some(Command::ReadSettlementWindows),
            render: render_window,
        }
    }

    /// A settlement changed (`Some(id)`) or created (`None`: the event
    /// shows the new settlement as the change answered it).
    pub fn settlement(action: &str, id: Option<u32>) -> Change {
        Change {
            action: action.to_string(),
            target: id.map_or_else(|| "settlement".to_string(), |id| format!("settlement/{id}")),
            view: id.map(|_| Command::ReadSettlements),
            render: render_settlement,
        }
    }

    /// A four-eyes pending change's step (`requested`, `approved`, …):
    /// the event shows the pending change before and after.
    pub fn approval(step: &str, id: &str) -> Change {
        Change {
            action: format!("approval.{step}"),
            target: format!("approval/{id}"),
            view: Some(Command::ReadPendingChanges),
            render: crate::approvals::render_approval,
        }
    }

    /// A change kept outside the ledger (a DFSP's JWS public key file):
    /// the command is [`Command::NoteExternalChange`], which carries the
    /// event's before and after itself.
    pub fn external(action: &str, target: FspName) -> Change {
        Change {
            action: action.to_string(),
            target: target.to_string(),
            view: None,
            render: |_, _| "null".to_string(),
        }
    }
}

impl Hub {
    /// Runs an admin change tagged with its caller, and logs its event (or
    /// its refusal). The event itself is the ledger's, durable with the
    /// change; the log line names it and says what changed
    /// ([`change_summary`]).
    pub async fn ask_audited<R: Request>(
        &self,
        change: Change,
        request: R,
    ) -> Result<R::Reply, HubError> {
        let outcome = self.execute_audited(change, request.into_command()).await?;
        R::reply(outcome).map_err(HubError::unexpected)
    }

    async fn execute_audited(&self, change: Change, command: Command) -> Result<Outcome, HubError> {
        let caller = current_caller();
        let tag = AuditTag {
            actor: caller.name.clone(),
            role: caller.role.to_string(),
            source: caller.source.as_str().to_string(),
            action: change.action.clone(),
            target: change.target.clone(),
            view: change.view.map(Box::new),
            render: AuditRender(change.render),
        };
        let audited = Command::Audited {
            command: Box::new(command),
            tag: Box::new(tag),
        };
        // The read is applied right after the change (one submission's
        // commands are consecutive in a batch), so it finds this change's
        // event, if the change made one.
        let newest = Command::ReadAuditEvents(AuditQuery {
            limit: 1,
            ..AuditQuery::default()
        });
        let mut outcomes = self
            .execute(vec![audited, newest])
            .await
            .map_err(HubError::from)?
            .into_iter();
        let outcome = outcomes
            .next()
            .ok_or_else(|| HubError::new(ErrorCode::INTERNAL_SERVER_ERROR, "no outcome"))?;
        let refused = match &outcome {
            Outcome::SettlementUpdated { results, .. }
                if !results.is_empty() && results.iter().all(|r| r.error.is_some()) =>
            {
                Some("every account change refused".to_string())
            }
            other => other.error_code().map(|code| code.to_string()),
        };
        if let Some(code) = refused {
            tracing::info!(
                actor = %caller.name,
                role = %caller.role,
                source = caller.source.as_str(),
                action = %change.action,
                target = %change.target,
                code = %code,
                "admin change refused"
            );
            // The ledger recorded its event (outcome REFUSED); count it,
            // once: the admin gate leaves a noted refusal alone.
            self.refuse(
                crate::refused::Class::AdminInvalid,
                &change.target,
                &format!(
                    "{} of {} by '{}' refused: {code}",
                    change.action, change.target, caller.name
                ),
            );
            crate::admin_auth::note_refusal_recorded();
            return Ok(outcome);
        }
        if let Some(Outcome::AuditEvents(events)) = outcomes.next() {
            if let Some(event) = events
                .first()
                .filter(|e| e.action == change.action && e.target == change.target)
            {
                // The change in a few words, not the target's whole state
                // twice (a participant's is kilobytes): the event itself,
                // with its before and after, is in the store and
                // `GET /audit-events`.
                tracing::info!(
                    id = event.id,
                    time = %format_time(event.at_ms),
                    actor = %event.actor,
                    role = %event.role,
                    source = %event.source,
                    action = %event.action,
                    target = %event.target,
                    change = %change_summary(&event.before, &event.after),
                    outcome = %event.outcome,
                    "audit event"
                );
            }
        }
        Ok(outcome)
    }
}

/// Differences a log line lists before it counts the rest.
const CHANGES_LOGGED: usize = 8;
/// A value in a log line is cut after this many characters.
const VALUE_CHARS: usize = 80;

/// What an audit event changed, for its log line, bounded whatever the
/// target's size: the fields whose values differ between `before` and
/// `after` (`accounts[id=3].value: 0 -> -2000`,
/// `endpoints.FSPIOP_CALLBACK_URL_TRANSFER_POST: (none) -> "http://…"`), a
/// thing created or removed as its top-level fields (`created: name=…`),
/// at most [`CHANGES_LOGGED`], each value cut at [`VALUE_CHARS`].
pub fn change_summary(before: &str, after: &str) -> String {
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or_else(|_| json!(text));
    let mut changes = Vec::new();
    differences("", &parse(before), &parse(after), &mut changes);
    if changes.is_empty() {
        return "nothing".to_string();
    }
    let more = changes.len().saturating_sub(CHANGES_LOGGED);
    changes.truncate(CHANGES_LOGGED);
    let mut summary = changes.join("; ");
    if more > 0 {
        summary.push_str(&format!("; and {more} more"));
    }
    summary
}

fn differences(path: &str, before: &Value, after: &Value, out: &mut Vec<String>) {
    let at = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    let named = |what: &str| {
        if path.is_empty() {
            what.to_string()
        } else {
            format!("{path} {what}")
        }
    };
    match (before, after) {
        _ if before == after => {}
        (Value::Object(old), Value::Object(new)) => {
            let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
            for key in keys {
                let none = Value::Null;
                let (b, a) = (old.get(key).unwrap_or(&none), new.get(key).unwrap_or(&none));
                differences(&at(key), b, a, out);
            }
        }
        (Value::Array(old), Value::Array(new)) => {
            // Elements with an id are matched by it (an account, an
            // oracle), others by position.
            let key = |i: usize, v: &Value| match &v["id"] {
                Value::Null => format!("{path}[{i}]"),
                id => format!("{path}[id={}]", short(id)),
            };
            let old_keyed: Vec<(String, &Value)> = old
                .iter()
                .enumerate()
                .map(|(i, v)| (key(i, v), v))
                .collect();
            let new_keyed: Vec<(String, &Value)> = new
                .iter()
                .enumerate()
                .map(|(i, v)| (key(i, v), v))
                .collect();
            let none = Value::Null;
            for (k, b) in &old_keyed {
                let a = new_keyed
                    .iter()
                    .find(|(n, _)| n == k)
                    .map_or(&none, |(_, v)| *v);
                differences(k, b, a, out);
            }
            for (k, a) in new_keyed
                .iter()
                .filter(|(n, _)| !old_keyed.iter().any(|(o, _)| o == n))
            {
                differences(k, &none, a, out);
            }
        }
        (Value::Null, Value::Object(new)) => {
            out.push(format!("{}: {}", named("created"), fields(new)))
        }
        (Value::Object(old), Value::Null) => {
            out.push(format!("{}: {}", named("removed"), fields(old)))
        }
        _ => out.push(format!(
            "{}: {} -> {}",
            if path.is_empty() { "value" } else { path },
            shown(before),
            shown(after)
        )),
    }
}

/// An object's top-level fields, nested ones counted: `name=payerfsp
/// isActive=true accounts=2`.
fn fields(object: &serde_json::Map<String, Value>) -> String {
    object
        .iter()
        .map(|(key, value)| match value {
            Value::Array(items) => format!("{key}={}", items.len()),
            Value::Object(map) => format!("{key}={{{} fields}}", map.len()),
            other => format!("{key}={}", short(other)),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn shown(value: &Value) -> String {
    match value {
        Value::Null => "(none)".to_string(),
        other => short(other),
    }
}

/// A value as JSON, cut at [`VALUE_CHARS`] characters; a string bare when
/// it is one plain word (an amount, a name, a URL), else quoted, so that an
/// operator-given reason or name such as `x outcome=OK` cannot read as
/// another field of the log line.
fn short(value: &Value) -> String {
    let text = match value {
        Value::String(s)
            if !s.is_empty()
                && !s.chars().any(|c| {
                    c.is_whitespace() || c.is_control() || matches!(c, '"' | '=' | ';')
                }) =>
        {
            s.clone()
        }
        other => other.to_string(),
    };
    if text.chars().count() <= VALUE_CHARS {
        text
    } else {
        let cut: String = text.chars().take(VALUE_CHARS).collect();
        format!("{cut}…")
    }
}

fn amount_json(amount: ledger::Amount) -> Value {
    serde_json::from_str(&amount.to_string()).unwrap_or_else(|_| json!(amount.to_string()))
}

fn render_participant(_target: &str, outcome: &Outcome) -> String {
    let Outcome::Participants(views) = outcome else {
        return "null".to_string();
    };
    let Some(view) = views.first() else {
        return "null".to_string();
    };
    let endpoints: serde_json::Map<String, Value> = view
        .endpoints
        .iter()
        .map(|e| (e.endpoint_type.clone(), json!(e.value)))
        .collect();
    json!({
        "name": view.participant.name.as_str(),
        "isActive": view.participant.mode.is_active(),
        "mode": view.participant.mode.as_str(),
        "accounts": view.accounts.iter().map(|a| json!({
            "id": a.id.0,
            "type": a.kind.as_str(),
            "currency": a.currency.as_str(),
            "isActive": a.active,
            "value": amount_json(a.value),
            "reserved": amount_json(a.reserved),
            "netDebitCap": a.net_debit_cap.map(amount_json),
        })).collect::<Vec<_>>(),
        "endpoints": endpoints,
    })
    .to_string()
}

fn render_oracles(_target: &str, outcome: &Outcome) -> String {
    let Outcome::Oracles(rows) = outcome else {
        return "null".to_string();
    };
    Value::Array(
        rows.iter()
            .map(|o| {
                json!({
                    "id": o.id,
                    "type": o.id_type,
                    "endpoint": o.endpoint,
                    "currency": o.currency.map(|c| c.as_str().to_string()),
                    "isDefault": o.is_default,
                })
            })
            .collect(),
    )
    .to_string()
}

fn id_of(target: &str) -> Option<u32> {
    target.rsplit('/').next()?.parse().ok()
}

fn render_model(target: &str, outcome: &Outcome) -> String {
    let name = target.strip_prefix("settlementModel/").unwrap_or(target);
    match outcome {
        Outcome::SettlementModels(models) => {
            models
                .iter()
                .find(|m| m.name == name)
                .map_or("null".to_string(), |m| {
                    let definition: Value =
                        serde_json::from_str(&m.definition).unwrap_or(Value::Null);
                    json!({"id": m.id, "name": m.name, "definition": definition}).to_string()
                })
        }
        _ => "null".to_string(),
    }
}

fn render_window(target: &str, outcome: &Outcome) -> String {
    let Outcome::SettlementWindows(windows) = outcome else {
        return "null".to_string();
    };
    windows
        .iter()
        .find(|w| Some(w.row.id) == id_of(target))
        .map_or("null".to_string(), |w| {
            json!({"id": w.row.id, "state": w.row.state.as_str(), "reason": w.row.reason})
                .to_string()
        })
}

fn settlement_value(view: &ledger::SettlementView) -> Value {
    json!({
        "id": view.row.id,
        "model": view.model_name,
        "state": view.row.state.as_str(),
        "reason": view.row.reason,
        "externalReference": view.row.external_reference,
        "windows": view.row.windows,
        "accounts": view.row.accounts.iter().map(|a| json!({
            "id": a.account.0,
            "participantId": a.participant.0,
            "currency": a.currency.as_str(),
            "net": amount_json(a.net),
            "state": a.state.as_str(),
        })).collect::<Vec<_>>(),
    })
}

fn render_settlement(target: &str, outcome: &Outcome) -> String {
    match outcome {
        Outcome::Settlements(views) => views
            .iter()
            .find(|s| Some(s.row.id) == id_of(target))
            .map_or("null".to_string(), |s| settlement_value(s).to_string()),
        Outcome::Settlement(view) => settlement_value(view).to_string(),
        _ => "null".to_string(),
    }
}

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/audit-events", get(list_events))
        .with_state(hub)
}

fn bad(description: String) -> HubError {
    HubError::new(
        ErrorCode::GENERIC_VALIDATION_ERROR,
        format!("Generic validation error - {description}"),
    )
}

/// An instant as FSPIOP `DateTime` or milliseconds since the epoch.
fn instant(name: &str, text: &str) -> Result<i64, HubError> {
    text.parse::<i64>()
        .ok()
        .or_else(|| fspiop::parse_date_time(text))
        .ok_or_else(|| {
            bad(format!(
                "{name} must be a date-time (2026-01-31T12:00:00.000Z) or milliseconds"
            ))
        })
}

fn event_json(event: &AuditEventRow) -> Value {
    let parsed = |text: &str| serde_json::from_str(text).unwrap_or_else(|_| json!(text));
    json!({
        "id": event.id,
        "time": format_time(event.at_ms),
        "actor": event.actor,
        "role": event.role,
        // Empty for events recorded before kasi kept it.
        "source": (!event.source.is_empty()).then_some(&event.source),
        "action": event.action,
        "target": event.target,
        "before": parsed(&event.before),
        "after": parsed(&event.after),
        "outcome": event.outcome,
    })
}

/// `GET /audit-events?participant=&action=&actor=&source=&from=&to=&limit=`: the
/// newest matching events first, among the newest
/// [`ledger::AUDIT_EVENTS_IN_MEMORY`] (older ones are in the store's
/// `audit_events` table).
async fn list_events(
    State(hub): State<Arc<Hub>>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, HubError> {
    const KNOWN: [&str; 7] = [
        "participant",
        "action",
        "actor",
        "source",
        "from",
        "to",
        "limit",
    ];
    if let Some(unknown) = query.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(bad(format!(
            "unknown parameter '{unknown}'; known: {}",
            KNOWN.join(", ")
        )));
    }
    let limit = match query.get("limit") {
        None => DEFAULT_LIMIT,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| bad(format!("limit must be 1 to {MAX_LIMIT}")))?
            .min(MAX_LIMIT),
    };
    let filter = AuditQuery {
        participant: query.get("participant").cloned(),
        action: query.get("action").cloned(),
        actor: query.get("actor").cloned(),
        source: query.get("source").cloned(),
        from_ms: query.get("from").map(|t| instant("from", t)).transpose()?,
        to_ms: query.get("to").map(|t| instant("to", t)).transpose()?,
        limit,
    };
    let events = hub.ask(ledger::request::ReadAuditEvents(filter)).await??;
    Ok(axum::Json(events.iter().map(event_json).collect::<Vec<_>>()).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn participant(value: &str, endpoints: Value) -> String {
        json!({
            "name": "payerfsp",
            "isActive": true,
            "accounts": [
                {"id": 1, "type": "POSITION", "currency": "USD", "value": 0, "netDebitCap": 1000},
                {"id": 2, "type": "SETTLEMENT", "currency": "USD", "value": value, "netDebitCap": null},
            ],
            "endpoints": endpoints,
        })
        .to_string()
    }

    #[test]
    fn a_change_is_named_by_what_differs() {
        let before = participant("0", json!({}));
        let after = participant("-2000", json!({}));
        assert_eq!(
            change_summary(&before, &after),
            "accounts[id=2].value: 0 -> -2000"
        );
        let url = "http://127.0.0.1:4000/payerfsp/transfers";
        let after_endpoint = participant("0", json!({ "FSPIOP_CALLBACK_URL_TRANSFER_POST": url }));
        assert_eq!(
            change_summary(&before, &after_endpoint),
            format!("endpoints.FSPIOP_CALLBACK_URL_TRANSFER_POST: (none) -> {url}")
        );
        assert_eq!(change_summary(&before, &before), "nothing");
        // A value with spaces or `=` is quoted: it cannot pose as a field.
        assert_eq!(short(&json!("x outcome=OK")), "\"x outcome=OK\"");
        assert_eq!(short(&json!("")), "\"\"");
    }

    #[test]
    fn a_creation_is_its_top_level_fields() {
        let created = change_summary("null", &participant("0", json!({})));
        assert_eq!(
            created,
            "created: accounts=2 endpoints={0 fields} isActive=true name=payerfsp"
        );
        let oracle = json!([{"id": 3, "type": "EMAIL", "endpoint": "http://oracle"}]).to_string();
        assert_eq!(
            change_summary("[]", &oracle),
            "[id=3] created: endpoint=http://oracle id=3 type=EMAIL"
        );
    }

    #[test]
    fn a_summary_is_bounded_whatever_the_target() {
        let many = |value: &str| {
            let accounts: Vec<Value> = (0..1000)
                .map(|id| json!({"id": id, "state": value, "note": "x".repeat(500)}))
                .collect();
            json!({ "accounts": accounts }).to_string()
        };
        let summary = change_summary(&many("PENDING"), &many(&"S".repeat(500)));
        assert!(summary.ends_with("; and 992 more"), "{summary}");
        assert!(summary.len() < 2_000, "{} bytes", summary.len());
    }
}
