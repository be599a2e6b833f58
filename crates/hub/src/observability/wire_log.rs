//! What the hub hands the wire log ([`wirelog`]): every FSPIOP request of a
//! transfer or a conversion that reached its handler, with the status the
//! hub answered, and every attempt to deliver one of their callbacks; and
//! the admin API's `GET /transfers/{id}/messages`, which reads them back.
//!
//! A request's body is the one its handler read (the [`Capture`] a
//! [`crate::stages::Received`] fills), so nothing is read twice and the
//! body limits are the handler's; the id of a `POST` is the one its handler
//! parsed (set with [`Capture::names`]). Nothing here waits on the log.

use std::sync::{Arc, OnceLock};

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine as _;
use ledger::{ErrorCode, TransferKind};
use serde_json::{json, Value};
use wirelog::{Direction, Message, Recorded, Resource};

use crate::{format_time, Hub, HubError};

/// What a handler leaves for the wire log: the body it read, and the id
/// of a `POST` (whose path names none).
#[derive(Default)]
pub struct Capture {
    id: OnceLock<Box<str>>,
    body: OnceLock<Bytes>,
}

impl Capture {
    /// The resource's id, as the hub spells it (canonical).
    pub fn names(&self, id: impl std::fmt::Display) {
        let _ = self.id.set(id.to_string().into());
    }
    pub(crate) fn read(&self, body: &Bytes) {
        let _ = self.body.set(body.clone());
    }
}

/// The FSPIOP router's layer: records each transfer or conversion request
/// its handler took, after the handler answered. The headers are encoded
/// before the handler takes the request, so nothing of the request is
/// kept or shared beyond this function.
pub async fn record_requests(hub: Arc<Hub>, mut request: Request, next: Next) -> Response {
    let Some(log) = hub.config.wire_log.clone() else {
        return next.run(request).await;
    };
    if Resource::of_path(request.uri().path()).is_none() {
        return next.run(request).await;
    }
    let at_ms = crate::now_ms();
    let capture = Arc::new(Capture::default());
    request.extensions_mut().insert(capture.clone());
    let method = request.method().clone();
    let uri = request.uri().clone();
    let peer = request.headers().get("fspiop-source").cloned();
    let headers = wirelog::EncodedHeaders::of(request.headers());
    let response = next.run(request).await;
    let Some((resource, path_id)) = Resource::of_path(uri.path()) else {
        return response;
    };
    // A path's id is filed as written: the hub takes correlation ids only
    // in their canonical forms (`fspiop::is_correlation_id`).
    let id = match path_id {
        Some(id) => id,
        // A POST refused before its id was read: nothing to file it under.
        None => match capture.id.get() {
            Some(id) => &**id,
            None => return response,
        },
    };
    let body = capture.body.get();
    log.record(Message {
        at_ms,
        direction: Direction::In,
        resource,
        id,
        peer: peer
            .as_ref()
            .and_then(|value| value.to_str().ok())
            .unwrap_or(""),
        method: method.as_str(),
        target: uri.path(),
        status: Some(response.status().as_u16()),
        note: "",
        attempt: 0,
        headers: wirelog::Headers::Encoded(&headers),
        body: body.map_or(&[][..], |body| &body[..]),
    });
    response
}

/// The resource and id a callback is about: its URL's, or for a `POST` (a
/// prepare passed on) the id its tracking names.
pub(crate) fn callback_key(
    url_path: &str,
    tracked_id: Option<&str>,
) -> Option<(Resource, Box<str>)> {
    let (resource, id) = Resource::of_path(url_path)?;
    let id = match id {
        Some(id) => id.into(),
        None => tracked_id?.into(),
    };
    Some((resource, id))
}

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/transfers/:id/messages", get(messages))
        .with_state(hub)
}

/// Before a prepare's ledger instant, a request may have waited this long
/// to be applied.
const BEFORE_PREPARE_MS: i64 = 60_000;
/// Callbacks of a finished transfer may be retried this long after it.
const AFTER_FINISH_MS: i64 = 3_600_000;
/// Segments read at most for one transfer.
const MAX_SEGMENTS: usize = 64;
const MAX_MESSAGES: usize = 1_000;

/// `GET /transfers/{id}/messages`: the transfer's (or conversion's)
/// messages as they crossed the hub.
async fn messages(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
) -> Result<Response, HubError> {
    let view = match crate::admin_transfers::read_transfer(&hub, &id).await? {
        Ok((view, _)) => view,
        Err(not_found) => return Ok(not_found),
    };
    let resource = match view.kind {
        TransferKind::FxConversion => Resource::FxTransfer,
        _ => Resource::Transfer,
    };
    let mut body = json!({
        "transferId": view.transfer_id.to_string(),
        "payerFsp": view.payer.as_str(),
        "payeeFsp": view.payee.as_str(),
        "resource": resource.as_str(),
    });
    let Some(log) = hub.config.wire_log.clone() else {
        body["enabled"] = json!(false);
        body["messages"] = json!([]);
        return Ok(Json(body).into_response());
    };
    let from_ms = view.prepared_at_ms - BEFORE_PREPARE_MS;
    let ended_ms = view
        .completed_at_ms
        .filter(|_| view.state.is_final())
        .unwrap_or(view.expiration_ms)
        .max(view.prepared_at_ms);
    let to_ms = (ended_ms + AFTER_FINISH_MS).min(crate::now_ms() + 1_000);
    let id = view.transfer_id.to_string();
    let dir = log.dir().to_path_buf();
    let found = tokio::task::spawn_blocking(move || {
        wirelog::find(
            &dir,
            resource,
            &id,
            from_ms,
            to_ms,
            MAX_SEGMENTS,
            MAX_MESSAGES,
        )
    })
    .await
    .map_err(|_| {
        HubError::new(
            ErrorCode::INTERNAL_SERVER_ERROR,
            "the wire log's reader failed",
        )
    })?
    .map_err(|error| {
        tracing::warn!(%error, "cannot read the wire log");
        HubError::new(
            ErrorCode::INTERNAL_SERVER_ERROR,
            format!("Internal server error - cannot read the wire log: {error}"),
        )
    })?;
    body["enabled"] = json!(true);
    body["complete"] = json!(found.complete);
    if let Some(through) = found.searched_through_ms.filter(|_| !found.complete) {
        body["searchedThrough"] = json!(format_time(through));
    }
    // The transaction the prepare's ILP packet carries (parties, quote id)
    // and, when the hub kept it, the quote it was agreed in.
    let transaction = found
        .messages
        .iter()
        .filter(|m| m.direction == Direction::In && m.method == "POST")
        .find_map(|m| prepare_transaction(&m.body));
    if let Some(transaction) = transaction {
        if let Some(quote) = quote_of(&hub, &transaction).await {
            body["quote"] = quote;
        }
        body["transaction"] = transaction;
    }
    body["messages"] = found.messages.iter().map(message_json).collect();
    Ok(Json(body).into_response())
}

/// The transaction object in a prepare body's `ilpPacket`, if it has one
/// built as Mojaloop builds it.
fn prepare_transaction(body: &[u8]) -> Option<Value> {
    let prepare: Value = serde_json::from_slice(body).ok()?;
    fspiop::ilp::transaction_json(prepare["ilpPacket"].as_str()?)
}

/// The recorded quote (`--quotes-persistent`) the transaction names.
async fn quote_of(hub: &Hub, transaction: &Value) -> Option<Value> {
    let quote_id = fspiop::parse_correlation_id(transaction["quoteId"].as_str()?).ok()?;
    let reader = hub.config.store_reader.clone()?;
    let row = tokio::task::spawn_blocking(move || reader.find_quote(quote_id))
        .await
        .ok()?
        .map_err(|error| tracing::warn!(%error, "cannot read a quote for the transfer page"))
        .ok()??;
    let mut quote = json!({
        "quoteId": row.quote_id.to_string(),
        "receivedAt": format_time(row.received_at_ms),
    });
    if let Some(answer) = row.answer {
        quote["answeredAt"] = json!(format_time(answer.answered_at_ms));
        quote["answerIsError"] = json!(answer.is_error);
        quote["answer"] = serde_json::from_str(&answer.body).unwrap_or(json!(answer.body));
    }
    Some(quote)
}

fn message_json(recorded: &Recorded) -> Value {
    let headers: Vec<Value> = recorded
        .headers
        .iter()
        .map(|(name, value)| json!([name, value]))
        .collect();
    let mut message = json!({
        "at": format_time(recorded.at_ms),
        "direction": recorded.direction.as_str(),
        "peer": recorded.peer,
        "method": recorded.method,
        "target": recorded.target,
        "headers": headers,
    });
    if let Some(status) = recorded.status {
        message["status"] = json!(status);
    }
    if recorded.direction == Direction::Out {
        message["attempt"] = json!(recorded.attempt);
    }
    if !recorded.note.is_empty() {
        message["note"] = json!(recorded.note);
    }
    match std::str::from_utf8(&recorded.body) {
        Ok(text) => message["body"] = json!(text),
        Err(_) => {
            message["bodyBase64"] =
                json!(base64::engine::general_purpose::STANDARD.encode(&recorded.body))
        }
    }
    message
}
