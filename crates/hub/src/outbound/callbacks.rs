//! Callback delivery on the admin address: per-DFSP health and the dead
//! letters (callbacks about transfers that could not be delivered before
//! their deadline), listed and re-sent.
//!
//! - `GET /callbacks/health[?participant=]`: per DFSP, `failingSince` (the
//!   first failed attempt since it last answered, or null), `queued`,
//!   `inFlight`, `deadLetters` and the delivery counters.
//! - `GET /callbacks/dead-letters[?participant=]`: oldest first, without
//!   bodies.
//! - `POST /callbacks/dead-letters/resend[?participant=]` (operator): queues
//!   them again, each retried for `--callback-retry-for-s`; one answered is
//!   forgotten, one that fails again stays. Answers `{"resent": n}`; logged
//!   with the caller.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::{format_time, Hub};

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/callbacks/health", get(health))
        .route("/callbacks/dead-letters", get(dead_letters))
        .route("/callbacks/dead-letters/resend", post(resend))
        .with_state(hub)
}

fn participant(query: &HashMap<String, String>) -> Option<&str> {
    query.get("participant").map(String::as_str)
}

async fn health(
    State(hub): State<Arc<Hub>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let wanted = participant(&query);
    let list: Vec<Value> = hub
        .dispatcher
        .stats()
        .into_iter()
        .filter(|s| wanted.is_none_or(|w| s.destination == w))
        .map(|s| {
            json!({
                "participant": s.destination,
                "failingSince": (s.failing_since_ms > 0).then(|| format_time(s.failing_since_ms)),
                "queued": s.queued,
                "inFlight": s.in_flight,
                "deadLetters": s.dead_letters,
                "sentOk": s.sent_ok,
                "httpError": s.http_error,
                "failed": s.failed,
                "retried": s.retried,
                "dropped": s.dropped,
            })
        })
        .collect();
    Json(Value::Array(list)).into_response()
}

async fn dead_letters(
    State(hub): State<Arc<Hub>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let list: Vec<Value> = hub
        .dispatcher
        .dead_letters(participant(&query))
        .into_iter()
        .map(|letter| {
            json!({
                "id": letter.id,
                "participant": letter.destination,
                "transferId": letter.transfer_id,
                "method": letter.method,
                "url": letter.url,
                "failedAt": format_time(letter.failed_at_ms),
                "attempts": letter.attempts,
                "reason": letter.reason,
                "resending": letter.resending,
            })
        })
        .collect();
    Json(Value::Array(list)).into_response()
}

async fn resend(
    State(hub): State<Arc<Hub>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let wanted = participant(&query);
    let resent = hub.dispatcher.resend(wanted);
    let caller = crate::admin_auth::current_caller();
    tracing::info!(
        actor = %caller.name,
        participant = wanted.unwrap_or("*"),
        resent,
        "dead letters re-sent"
    );
    (StatusCode::ACCEPTED, Json(json!({ "resent": resent }))).into_response()
}
