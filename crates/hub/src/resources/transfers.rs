//! FSPIOP v1.1 transfers: `POST /transfers`, `PUT /transfers/{ID}`,
//! `PUT /transfers/{ID}/error`, `GET /transfers/{ID}`, and the callbacks
//! Mojaloop's ml-api-adapter sends for each outcome.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use fspiop::{Resource, WireState};
use ledger::request::GetTransfer;
use ledger::{
    Abort, ErrorCode, FspName, Fulfil, Rejection, Request, TransferId, TransferReply,
    TransferState, TransferView,
};

use crate::callback_plan::{self, callbacks_for, Event, Facts, Message, Party, Plan, Planned};
use crate::notify::{Origin, Tracking};
use crate::stages::{CallbackProbe, Phase, PhaseMarks, Received};
use crate::transfer_stats::FailurePhase;
use crate::wire::{check_headers, forwarded_headers, Reply, Shape};
use crate::{refused, Hub, HubError};

const TRANSFER_POST: &str = "FSPIOP_CALLBACK_URL_TRANSFER_POST";
const TRANSFER_PUT: &str = "FSPIOP_CALLBACK_URL_TRANSFER_PUT";
const TRANSFER_ERROR: &str = "FSPIOP_CALLBACK_URL_TRANSFER_ERROR";

pub fn routes() -> Router<Arc<Hub>> {
    Router::new()
        .route("/transfers", post(prepare))
        .route("/transfers/:id", put(fulfil).get(get_transfer))
        .route("/transfers/:id/error", put(abort))
}

/// A callback of a transfer's final state (or rejection): retried for the
/// dispatcher's `final_retry_for`, holding the watermark back meanwhile.
fn final_state(view: &TransferView) -> Option<Tracking> {
    Some(Tracking {
        event_ms: Some(view.completed_at_ms.unwrap_or(view.prepared_at_ms)),
        retry_until_ms: None,
        transfer_id: Some(view.transfer_id.to_string()),
        dead_letter: None,
    })
}

/// The prepare forwarded to the payee: retried until the transfer expires.
fn prepared(view: &TransferView) -> Option<Tracking> {
    Some(Tracking {
        event_ms: Some(view.prepared_at_ms),
        retry_until_ms: Some(view.expiration_ms),
        transfer_id: Some(view.transfer_id.to_string()),
        dead_letter: None,
    })
}

/// What the messages of a plan are made of.
struct Sources {
    /// The DFSP's message as it came, to pass on; `None` after a restart
    /// (the hub rebuilds it).
    passed_on: Option<Outbound>,
    /// Its body, for the hub's copy (the payee's confirmation).
    copied: Option<Bytes>,
    /// The code and words of the hub's error messages (and of an ABORTED
    /// PATCH's cause); `None`: the transfer's stored reason.
    error: Option<(ErrorCode, String)>,
    reply: Reply,
    /// The prepare's condition, to rebuild the prepare after a restart.
    condition: Option<ledger::Condition>,
}

impl Sources {
    /// The DFSP's message to pass on (and its body, for the hub's copy).
    fn passing_on(passed_on: Outbound, copied: Option<Bytes>, reply: Reply) -> Sources {
        Sources {
            passed_on: Some(passed_on),
            copied,
            error: None,
            reply,
            condition: None,
        }
    }

    /// Only the hub's own messages.
    fn hubs(error: (ErrorCode, String), reply: Reply) -> Sources {
        Sources {
            passed_on: None,
            copied: None,
            error: Some(error),
            reply,
            condition: None,
        }
    }
}

/// A transfer callback to build: who wrote it, to whom, on which endpoint.
struct Outbound {
    origin: Origin,
    destination: FspName,
    endpoint_type: &'static str,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
}

/// Headers of a callback the hub itself originates about a transfer.
fn hub_headers(hub: &Hub, destination: FspName, reply: Reply) -> HeaderMap {
    crate::wire::hub_headers(hub, Resource::Transfers, destination, reply)
}

impl Hub {
    /// Queues a callback to `destination`'s endpoint of `endpoint_type`
    /// (with `probe`, timed as a `callback_send` stage); a DFSP without that
    /// endpoint cannot be called back, which is logged.
    #[allow(clippy::too_many_arguments)]
    fn call_back(
        &self,
        origin: Origin,
        destination: FspName,
        endpoint_type: &str,
        transfer_id: TransferId,
        method: Method,
        headers: HeaderMap,
        body: Bytes,
        probe: Option<CallbackProbe>,
        tracking: Option<Tracking>,
    ) {
        let id = transfer_id.to_string();
        if !self.send_callback_tracked(
            origin,
            destination,
            endpoint_type,
            &[("transferId", id.as_str())],
            method,
            headers,
            body,
            probe,
            tracking,
        ) {
            tracing::warn!(%destination, endpoint_type, transfer = %id, "no callback endpoint registered; callback dropped");
        }
    }

    /// The payer's callback and then, once its first attempt has ended,
    /// the payee's (`then`): ml-api-adapter awaits the payer's notification
    /// before it tells the payee (see [`crate::notify::FollowUp`] for where
    /// kasi differs). Both are tracked alike.
    fn call_back_in_order(
        &self,
        transfer_id: TransferId,
        first: Outbound,
        probe: Option<CallbackProbe>,
        then: Option<Outbound>,
        tracking: Option<Tracking>,
    ) {
        let id = transfer_id.to_string();
        let callback = |message: Outbound| {
            let url = self.endpoints.url(
                message.destination,
                message.endpoint_type,
                &[("transferId", id.as_str())],
            );
            if url.is_none() {
                tracing::warn!(destination = %message.destination, endpoint_type = message.endpoint_type, transfer = %id, "no callback endpoint registered; callback dropped");
            }
            url.map(|url| crate::notify::Callback {
                destination: message.destination.to_string(),
                origin: message.origin,
                method: message.method,
                url,
                headers: message.headers,
                body: message.body,
            })
        };
        let then = then.and_then(&callback);
        match (callback(first), then) {
            (Some(first), then) => self.dispatcher.send_then(
                first,
                probe,
                tracking.clone(),
                then.map(|callback| crate::notify::FollowUp { callback, tracking }),
            ),
            // A payer the hub cannot call: nothing to wait for.
            (None, Some(then)) => self.dispatcher.send_tracked(then, None, tracking),
            (None, None) => {}
        }
    }

    /// `PUT /transfers/{ID}/error` from the hub.
    fn send_error(
        &self,
        destination: FspName,
        transfer_id: TransferId,
        code: ErrorCode,
        description: &str,
        reply: Reply,
        tracking: Option<Tracking>,
    ) {
        let body = fspiop::error_body(code, description);
        let headers = hub_headers(self, destination, reply);
        self.call_back(
            Origin::Hub,
            destination,
            TRANSFER_ERROR,
            transfer_id,
            Method::PUT,
            headers,
            Bytes::from(body),
            None,
            tracking,
        );
    }

    /// A refused message, told to its sender; one from a DFSP that is not
    /// the party the message needs (a third DFSP reaching for another's
    /// transfer) is also counted as such.
    fn send_rejection(
        &self,
        caller: &crate::wire::Caller,
        transfer_id: TransferId,
        error: &Rejection,
    ) {
        let description = described(error);
        if error.not_party {
            self.refuse(
                refused::Class::NotParty,
                caller.source.as_str(),
                &description,
            );
        }
        self.note_paused(caller.source, error);
        self.send_error(
            caller.source,
            transfer_id,
            error.code,
            &mojaloop_words(error).unwrap_or(description),
            caller.reply(),
            None,
        );
    }

    /// A transfer whose refusal is its final state (a prepare over a limit,
    /// a wrong or late fulfil, an abort addressed to another than the
    /// payer): counted as a failure, and the parties told as the plan says.
    fn fail(
        &self,
        event: Event,
        transfer: &TransferView,
        error: &ledger::Rejection,
        phase: FailurePhase,
        reply: Reply,
        reserve_only: bool,
    ) {
        let description = described(error);
        self.metrics
            .transfers
            .record_failure(transfer, phase, error.code, &description);
        let plan = callbacks_for(event, transfer, self.facts(reserve_only));
        self.tell(
            plan,
            transfer,
            Sources::hubs((error.code, description), reply),
            None,
        );
    }

    /// The hub's `PUT /transfers/{ID}/error` to `destination`.
    fn error_message(
        &self,
        destination: FspName,
        code: ErrorCode,
        description: &str,
        reply: Reply,
    ) -> Outbound {
        Outbound {
            origin: Origin::Hub,
            destination,
            endpoint_type: TRANSFER_ERROR,
            method: Method::PUT,
            headers: hub_headers(self, destination, reply),
            body: Bytes::from(fspiop::error_body(code, description)),
        }
    }

    /// Tells `destination` the transfer's current state with a `PUT`, as
    /// central-ledger answers a `GET` or a resend: RESERVED or COMMITTED as
    /// they are, and a transfer that did not commit as ABORTED with the
    /// reason in an extension `cause` (`"3303: Transfer expired"`). With
    /// `probe`, the callback is timed.
    fn send_state(
        &self,
        destination: FspName,
        view: &TransferView,
        reply: Reply,
        probe: Option<CallbackProbe>,
        tracking: Option<Tracking>,
    ) {
        let message = self.state_message(destination, view, reply);
        self.call_back(
            message.origin,
            destination,
            message.endpoint_type,
            view.transfer_id,
            message.method,
            message.headers,
            message.body,
            probe,
            tracking,
        );
    }

    /// The hub's `PUT /transfers/{ID}` with the transfer's state (see
    /// [`send_state`](Self::send_state)).
    fn state_message(&self, destination: FspName, view: &TransferView, reply: Reply) -> Outbound {
        let cause = match view.state {
            TransferState::Reserved | TransferState::Committed => None,
            TransferState::Aborted | TransferState::Expired | TransferState::Rejected => {
                let (code, description) = reason_of(view);
                Some(format!("{code}: {description}"))
            }
        };
        let extensions: Vec<(&str, &str)> = cause
            .iter()
            .map(|cause| ("cause", cause.as_str()))
            .collect();
        let body = fspiop::transfer_put_body_with_extensions(
            view.state.fspiop(),
            view.fulfilment.as_ref(),
            view.completed_at_ms,
            &extensions,
        );
        Outbound {
            origin: Origin::Hub,
            destination,
            endpoint_type: TRANSFER_PUT,
            method: Method::PUT,
            headers: hub_headers(self, destination, reply),
            body: Bytes::from(body),
        }
    }

    /// Sends the callbacks `plan` says after an outcome that left the
    /// transfer as `view`, built from `sources`: the first, then the
    /// second once the first's first attempt has ended.
    fn tell(
        &self,
        plan: Plan,
        view: &TransferView,
        mut sources: Sources,
        probe: Option<CallbackProbe>,
    ) {
        let first = self.planned_message(plan.first, view, &mut sources);
        let then = plan
            .then
            .map(|planned| self.planned_message(planned, view, &mut sources));
        let tracking = match view.state {
            TransferState::Reserved => prepared(view),
            _ => final_state(view),
        };
        self.call_back_in_order(view.transfer_id, first, probe, then, tracking);
    }

    /// One planned message's bytes.
    fn planned_message(
        &self,
        planned: Planned,
        view: &TransferView,
        sources: &mut Sources,
    ) -> Outbound {
        let destination = match planned.to {
            Party::Payer => view.payer,
            Party::Payee => view.payee,
        };
        let reply = sources.reply;
        let (code, description) = sources.error.clone().unwrap_or_else(|| reason_of(view));
        let description = description.as_str();
        match planned.message {
            Message::PassedOn => match sources.passed_on.take() {
                Some(message) => message,
                None => self.rebuilt(view, destination, sources),
            },
            Message::Copy => match &sources.copied {
                Some(body) => Outbound {
                    origin: Origin::Hub,
                    destination,
                    endpoint_type: TRANSFER_PUT,
                    method: Method::PUT,
                    headers: hub_headers(self, destination, reply),
                    body: body.clone(),
                },
                None => self.state_message(destination, view, reply),
            },
            Message::State => self.state_message(destination, view, reply),
            Message::Error => self.error_message(destination, code, description, reply),
            Message::Patch => {
                let completed_ms = view.completed_at_ms.unwrap_or_else(crate::now_ms);
                let body = match view.state {
                    TransferState::Committed => {
                        fspiop::transfer_patch_body("COMMITTED", completed_ms)
                    }
                    _ => {
                        let cause = format!("{code}: {description}");
                        fspiop::transfer_patch_body_with_extensions(
                            "ABORTED",
                            completed_ms,
                            &[("cause", &cause)],
                        )
                    }
                };
                Outbound {
                    origin: Origin::Hub,
                    destination,
                    endpoint_type: TRANSFER_PUT,
                    method: Method::PATCH,
                    headers: hub_headers(self, destination, reply),
                    body: Bytes::from(body),
                }
            }
        }
    }

    /// A DFSP's message the hub no longer has (after a restart), rebuilt
    /// from the stored fields: a prepare still RESERVED for the payee
    /// (FSPIOP-Source the payer; no `ilpPacket`, which is not stored, and
    /// no payer signature), a commit as the hub's state, an abort as the
    /// hub's error with the stored reason.
    fn rebuilt(&self, view: &TransferView, destination: FspName, sources: &Sources) -> Outbound {
        let reply = sources.reply;
        match (view.state, &sources.condition) {
            (TransferState::Reserved, Some(condition)) => {
                // The payer's message, rebuilt: it stays the payer's
                // (FSPIOP-Source the payer), so the hub does not sign it,
                // and its own signature is lost with its bytes.
                let mut headers = hub_headers(self, destination, reply);
                if let Ok(payer) = axum::http::HeaderValue::from_str(view.payer.as_str()) {
                    headers.insert("fspiop-source", payer);
                }
                if let Ok(accept) = axum::http::HeaderValue::from_str(&fspiop::content_type_for(
                    Resource::Transfers,
                    reply.version,
                )) {
                    headers.insert("accept", accept);
                }
                Outbound {
                    origin: Origin::Forwarded,
                    destination,
                    endpoint_type: TRANSFER_POST,
                    method: Method::POST,
                    headers,
                    body: Bytes::from(rebuilt_prepare(view, condition)),
                }
            }
            (TransferState::Committed, _) => self.state_message(destination, view, reply),
            _ => {
                let (code, description) = sources.error.clone().unwrap_or_else(|| reason_of(view));
                self.error_message(destination, code, &description, reply)
            }
        }
    }

    /// The plan's facts beyond the outcome: the hub's setting, and whether
    /// the payee asked for a PATCH.
    fn facts(&self, reserve_only: bool) -> Facts {
        Facts {
            payee_commit_confirmation: self.config.payee_commit_confirmation,
            reserve_only,
        }
    }

    /// The 3303 callbacks of transfers the ledger expired, in the version
    /// each prepare came in.
    pub fn notify_expired(&self, expired: &[TransferView]) {
        for view in expired {
            if view.kind == ledger::TransferKind::FxConversion {
                self.notify_expired_conversion(view);
                continue;
            }
            let version =
                fspiop::Version::unpacked(view.wire_version).unwrap_or(fspiop::Version::V1_1);
            let reply = Reply::unprompted(version);
            let description =
                "Transfer expired - the transfer reached its expiration before it was fulfilled";
            self.metrics.transfers.record_failure(
                view,
                FailurePhase::Expire,
                ErrorCode::TRANSFER_EXPIRED,
                description,
            );
            let plan = callbacks_for(Event::Expired, view, self.facts(false));
            let error = (ErrorCode::TRANSFER_EXPIRED, description.to_string());
            self.tell(plan, view, Sources::hubs(error, reply), None);
        }
    }
}

impl Hub {
    /// A transfer ended because the conversion it depended on ended first:
    /// its payer and payee hear the hub's error (`code`, `description`).
    pub(crate) fn tell_transfer_ended_by_conversion(
        &self,
        view: &TransferView,
        code: ErrorCode,
        description: &str,
    ) {
        let version = fspiop::Version::unpacked(view.wire_version).unwrap_or(fspiop::Version::V1_1);
        let plan = callbacks_for(Event::EndedWithConversion, view, self.facts(false));
        let error = (code, description.to_string());
        self.tell(
            plan,
            view,
            Sources::hubs(error, Reply::unprompted(version)),
            None,
        );
    }

    /// After a restart: queues again the callbacks of transfers prepared or
    /// finished since the saved delivery watermark (from the store's
    /// `transfers_touched_since`), each as the hub would send it now. The
    /// original bytes are not kept, so every one is built by the hub from
    /// the stored fields: a final state is the hub's `PUT /transfers/{ID}`
    /// (commit) or `PUT /transfers/{ID}/error` (abort, rejection, expiry)
    /// with the stored reason; a prepare still RESERVED and not expired is
    /// rebuilt for the payee (FSPIOP-Source the payer; no `ilpPacket`, which
    /// is not stored, and no payer signature). Receivers treat a repeat
    /// idempotently. Returns how many callbacks were queued.
    pub fn redeliver(
        &self,
        transfers: &[(TransferView, ledger::Condition, Option<ledger::FinishKind>)],
        now_ms: i64,
    ) -> usize {
        let mut queued = 0;
        for (view, condition, finish) in transfers {
            if view.kind == ledger::TransferKind::FxConversion {
                queued += self.redeliver_conversion(view, condition, *finish, now_ms);
                continue;
            }
            let Some(event) = callback_plan::stored_event(view, *finish, now_ms) else {
                continue;
            };
            let version =
                fspiop::Version::unpacked(view.wire_version).unwrap_or(fspiop::Version::V1_1);
            let sources = Sources {
                condition: Some(*condition),
                ..Sources::hubs(reason_of(view), Reply::unprompted(version))
            };
            // Whether the payee sent RESERVED is not stored: after a
            // restart it is told as one that did not.
            let plan = callbacks_for(event, view, self.facts(false));
            queued += 1 + usize::from(plan.then.is_some());
            self.tell(plan, view, sources, None);
        }
        queued
    }
}

/// Why a transfer did not commit, as its error callbacks and a `GET`'s
/// `cause` word it: the code and its standard wording, and what the hub
/// found wrong when it aborted the transfer itself (central-ledger's
/// `Generic validation error - invalid fulfilment`).
fn reason_of(view: &TransferView) -> (ErrorCode, String) {
    let code = view.reason.unwrap_or(ErrorCode::GENERIC_VALIDATION_ERROR);
    let description = match view.cause {
        Some(cause) => format!("{} - {}", code.description(), cause.description()),
        None => code.description().to_string(),
    };
    (code, description)
}

/// A prepare's headers and body name the same parties: FSPIOP-Source is
/// the body's payer (`payerFsp`, a conversion's `initiatingFsp`) and
/// FSPIOP-Destination, when sent, its payee (`payeeFsp`, a conversion's
/// `counterPartyFsp`). The header routes, the body commits: were they to
/// disagree, the payer's signed body would name one payee while the
/// message went to another. Refused before anything is reserved. (A
/// prepare without FSPIOP-Destination is routed by its body, as Mojaloop
/// allows.)
pub(crate) fn check_parties(
    hub: &Hub,
    caller: &crate::wire::Caller,
    (payer_field, payer): (&str, FspName),
    (payee_field, payee): (&str, FspName),
) -> Result<(), HubError> {
    if payer != caller.source {
        return Err(not_the_party(
            hub,
            caller,
            format!(
                "Generic validation error - FSPIOP-Source '{}' does not match {payer_field} '{payer}'",
                caller.source
            ),
        ));
    }
    match caller.destination {
        Some(destination) if destination != payee => Err(not_the_party(
            hub,
            caller,
            format!(
                "Generic validation error - FSPIOP-Destination '{destination}' does not match {payee_field} '{payee}'"
            ),
        )),
        _ => Ok(()),
    }
}

/// A prepare refused because its headers and body name different parties
/// (400, 3100), counted and logged as `not_party`.
fn not_the_party(hub: &Hub, caller: &crate::wire::Caller, description: String) -> HubError {
    hub.refuse(
        refused::Class::NotParty,
        caller.source.as_str(),
        &description,
    );
    HubError::new(ErrorCode::GENERIC_VALIDATION_ERROR, description)
}

/// A `POST /transfers` body from the stored fields (no `ilpPacket`: it is
/// not stored).
fn rebuilt_prepare(view: &TransferView, condition: &ledger::Condition) -> Vec<u8> {
    serde_json::json!({
        "transferId": view.transfer_id.to_string(),
        "payerFsp": view.payer.as_str(),
        "payeeFsp": view.payee.as_str(),
        "amount": {"amount": view.amount.to_string(), "currency": view.currency.to_string()},
        "condition": condition.to_base64url(),
        "expiration": fspiop::format_date_time(view.expiration_ms),
    })
    .to_string()
    .into_bytes()
}

/// Runs a fulfil or abort. A transfer the ledger no longer holds is
/// answered by the ledger from the store's copy (prefetched); the store
/// not read is 503/2003, retry later, nothing decided.
async fn execute_finish(
    hub: &Hub,
    request: impl Request<Reply = TransferReply>,
) -> Result<(TransferReply, Option<(Instant, engine::BatchTiming)>), HubError> {
    let (reply, submitted, batch) = hub.ask_timed(request).await?;
    let reply = retry_later(reply)?;
    Ok((reply, Some((submitted, batch))))
}

/// A refusal because the store could not be read is answered at once
/// (see [`HubError::is_retry_later`]).
pub(crate) fn retry_later(reply: TransferReply) -> Result<TransferReply, HubError> {
    match reply {
        TransferReply::Refused(error) if HubError::is_retry_later(&error) => {
            Err(HubError::refused(error))
        }
        reply => Ok(reply),
    }
}

/// central-ledger's exact words for the refusals of a transfer message
/// that Mojaloop's conformance collections compare whole (the details kasi
/// knows go to its log): a changed resend (`Modified request`), an unknown
/// transfer, a GET by neither party. `None`: kasi's own description.
fn mojaloop_words(error: &ledger::Rejection) -> Option<String> {
    let words = match error.code {
        ErrorCode::MODIFIED_REQUEST => error.code.description(),
        ErrorCode::TRANSFER_ID_NOT_FOUND => {
            "Transfer ID not found - Provided Transfer ID was not found on the server."
        }
        ErrorCode::GENERIC_CLIENT_ERROR if error.not_party => error.code.description(),
        _ => return None,
    };
    Some(words.to_string())
}

fn described(error: &ledger::Rejection) -> String {
    format!("{} - {}", error.code.description(), error.description)
}

/// Records the stages of a message about to be answered.
fn record_stages(
    hub: &Hub,
    phase: Phase,
    transfer_id: TransferId,
    received: &Received,
    submitted: Instant,
    batch: engine::BatchTiming,
) {
    let marks = PhaseMarks {
        started: received.started,
        received: received.received,
        submitted,
        batch,
        answered: Instant::now(),
    };
    hub.stages.record_phase(phase, transfer_id, &marks);
}

async fn prepare(State(hub): State<Arc<Hub>>, mut request: Received) -> Result<Response, HubError> {
    let body = std::mem::take(&mut request.body);
    let headers = &request.headers;
    let caller = check_headers(headers, Resource::Transfers, Shape::Post)?;
    let parsed = fspiop::parse_transfer_prepare(&body)?;
    request.names(parsed.transfer_id);
    let mut prepare = parsed.to_prepare();
    prepare.wire_version = caller.version.packed();
    check_parties(
        &hub,
        &caller,
        ("payerFsp", prepare.payer),
        ("payeeFsp", prepare.payee),
    )?;
    let transfer_id = prepare.transfer_id;
    // A payee the hub knows but cannot reach would hold the payer's funds
    // until expiry with nobody told: the payer hears at once instead (as
    // Mojaloop answers a payee without an endpoint), and nothing is
    // reserved. An unknown payee is the ledger's to refuse.
    if hub.endpoints.participant_mode(prepare.payee).is_some()
        && hub
            .endpoints
            .url(prepare.payee, TRANSFER_POST, &[])
            .is_none()
    {
        hub.send_error(
            caller.source,
            transfer_id,
            ErrorCode(3201),
            &format!(
                "Destination FSP Error - {} has no {TRANSFER_POST} endpoint",
                prepare.payee
            ),
            caller.reply(),
            // Nothing was recorded, so nothing to re-derive after a crash.
            None,
        );
        return Ok(StatusCode::ACCEPTED.into_response());
    }
    // An id that left memory (past the retention horizon) is read from the
    // store by the pipeline before the ledger applies the prepare: the
    // ledger alone says new, duplicate or modified.
    let (reply, submitted, batch) = hub.ask_timed(prepare).await?;
    let timing = Some((submitted, batch));
    match retry_later(reply)? {
        TransferReply::Done(view) => {
            hub.metrics.transfers.record_prepared(view.payer);
            let passed_on = Outbound {
                origin: Origin::Forwarded,
                destination: view.payee,
                endpoint_type: TRANSFER_POST,
                method: Method::POST,
                headers: forwarded_headers(headers, true),
                body,
            };
            let plan = callbacks_for(Event::Reserved, &view, hub.facts(false));
            let sources = Sources::passing_on(passed_on, None, caller.reply());
            let probe = Some(hub.stages.callback_probe(Phase::Prepare, transfer_id));
            hub.tell(plan, &view, sources, probe);
        }
        TransferReply::Failed { transfer, error } => {
            hub.fail(
                Event::Rejected,
                &transfer,
                &error,
                FailurePhase::Prepare,
                caller.reply(),
                false,
            );
            // Refused on the FXP's limits: its conversion ended too.
            hub.tell_fxp(&transfer);
        }
        TransferReply::Refused(error) => hub.send_rejection(&caller, transfer_id, &error),
        // A resend of a finished transfer gets its state again; one still in
        // flight is ignored, as central-ledger does (its answer is coming).
        TransferReply::Duplicate(view) if view.state.is_final() => {
            hub.send_state(caller.source, &view, caller.reply(), None, None)
        }
        TransferReply::Duplicate(_) => {}
    }
    if let Some((submitted, batch)) = timing {
        record_stages(
            &hub,
            Phase::Prepare,
            transfer_id,
            &request,
            submitted,
            batch,
        );
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

async fn fulfil(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    mut request: Received,
) -> Result<Response, HubError> {
    let body = std::mem::take(&mut request.body);
    let headers = &request.headers;
    let caller = check_headers(headers, Resource::Transfers, Shape::Put)?;
    let transfer_id = fspiop::parse_correlation_id(&id)?;
    let parsed = fspiop::parse_transfer_fulfil(&body)?;
    if let Some(completed_ms) = parsed.completed_ms {
        // ml-api-adapter's check: at most 200 ms ahead of the hub's clock
        // and 300 s behind it.
        fspiop::check_completed_timestamp(completed_ms, crate::now_ms())?;
    }
    match parsed.transfer_state {
        // v1.1 allows no ABORTED in a PUT (a payee that rejects sends
        // `…/error`); central-ledger drops it, and so does kasi: answered,
        // nothing changed, nobody told.
        WireState::Aborted => {
            tracing::debug!(transfer = %transfer_id, source = %caller.source, "fulfil with transferState ABORTED ignored");
            return Ok(StatusCode::OK.into_response());
        }
        // RESERVED (commit, then tell me with a PATCH) is v1.1's; a 1.0
        // client's is dropped as central-ledger drops it: the transfer
        // stays RESERVED until it expires.
        WireState::Reserved if caller.content_version == fspiop::Version::V1_0 => {
            tracing::debug!(transfer = %transfer_id, source = %caller.source, "fulfil with transferState RESERVED in version 1.0 ignored");
            return Ok(StatusCode::OK.into_response());
        }
        WireState::Received | WireState::Reserved | WireState::Committed => {}
    }
    let reserve_only = parsed.transfer_state == WireState::Reserved;
    let command = Fulfil {
        transfer_id,
        caller: caller.source,
        fulfilment: parsed.fulfilment,
        destination: caller.destination,
        request_hash: parsed.request_hash,
    };
    let (reply, timing) = execute_finish(&hub, command).await?;
    match reply {
        TransferReply::Done(view) => {
            if view.state == TransferState::Committed {
                hub.metrics.transfers.record_committed(&view);
            }
            // The payer is told first, the payee after (ml-api-adapter's
            // order): the payee's fulfil passed on to the payer, and the
            // hub's copy to the payee (or the hub's state and a PATCH, to a
            // payee that sent RESERVED).
            let probe = Some(hub.stages.callback_probe(Phase::Fulfil, transfer_id));
            let passed_on = Outbound {
                origin: Origin::Forwarded,
                destination: view.payer,
                endpoint_type: TRANSFER_PUT,
                method: Method::PUT,
                headers: forwarded_headers(headers, false),
                body: body.clone(),
            };
            let plan = callbacks_for(Event::Fulfilled, &view, hub.facts(reserve_only));
            let sources = Sources::passing_on(passed_on, Some(body), caller.reply());
            hub.tell(plan, &view, sources, probe);
            hub.tell_fxp(&view);
        }
        TransferReply::Failed { transfer, error } => {
            hub.fail(
                Event::Fulfilled,
                &transfer,
                &error,
                FailurePhase::Fulfil,
                caller.reply(),
                reserve_only,
            );
            hub.tell_fxp(&transfer);
        }
        TransferReply::Refused(error) => hub.send_rejection(&caller, transfer_id, &error),
        TransferReply::Duplicate(view) => {
            hub.send_state(caller.source, &view, caller.reply(), None, None)
        }
    }
    if let Some((submitted, batch)) = timing {
        record_stages(&hub, Phase::Fulfil, transfer_id, &request, submitted, batch);
    }
    Ok(StatusCode::OK.into_response())
}

async fn abort(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    mut request: Received,
) -> Result<Response, HubError> {
    let body = std::mem::take(&mut request.body);
    let headers = &request.headers;
    let caller = check_headers(headers, Resource::Transfers, Shape::Put)?;
    let transfer_id = fspiop::parse_correlation_id(&id)?;
    let parsed = fspiop::parse_error_information(&body)?;
    let command = Abort {
        transfer_id,
        caller: caller.source,
        error_code: parsed.code,
        destination: caller.destination,
        request_hash: parsed.request_hash,
    };
    let (reply, timing) = execute_finish(&hub, command).await?;
    match reply {
        TransferReply::Done(view) => {
            // The payee's own code and words.
            hub.metrics.transfers.record_failure(
                &view,
                FailurePhase::Abort,
                view.reason.unwrap_or(parsed.code),
                &parsed.description,
            );
            let passed_on = Outbound {
                origin: Origin::Forwarded,
                destination: view.payer,
                endpoint_type: TRANSFER_ERROR,
                method: Method::PUT,
                headers: forwarded_headers(headers, false),
                body,
            };
            let plan = callbacks_for(Event::AbortedByPayee, &view, hub.facts(false));
            let sources = Sources::passing_on(passed_on, None, caller.reply());
            let probe = Some(hub.stages.callback_probe(Phase::Abort, transfer_id));
            hub.tell(plan, &view, sources, probe);
            hub.tell_fxp(&view);
        }
        // Addressed to another than the payer: aborted with 3100, which the
        // payer is told instead of the payee's error (and the payee is not,
        // as central-ledger's ABORT_VALIDATION from the switch).
        TransferReply::Failed { transfer, error } => {
            hub.fail(
                Event::AbortedByPayee,
                &transfer,
                &error,
                FailurePhase::Abort,
                caller.reply(),
                false,
            );
            hub.tell_fxp(&transfer);
        }
        TransferReply::Refused(error) => hub.send_rejection(&caller, transfer_id, &error),
        TransferReply::Duplicate(view) => {
            hub.send_state(caller.source, &view, caller.reply(), None, None)
        }
    }
    if let Some((submitted, batch)) = timing {
        record_stages(&hub, Phase::Abort, transfer_id, &request, submitted, batch);
    }
    Ok(StatusCode::OK.into_response())
}

async fn get_transfer(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, HubError> {
    let caller = check_headers(&headers, Resource::Transfers, Shape::Get)?;
    let transfer_id = fspiop::parse_correlation_id(&id)?;
    // One that left memory is answered from the store's copy.
    let reply = hub
        .ask(GetTransfer {
            transfer_id,
            caller: caller.source,
        })
        .await?;
    match reply {
        Ok(view) => hub.send_state(caller.source, &view, caller.reply(), None, None),
        Err(error) if HubError::is_retry_later(&error) => return Err(HubError::refused(error)),
        Err(error) => hub.send_rejection(&caller, transfer_id, &error),
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

/// The FSPIOP router with its own `GET /health`.
pub fn router(hub: Arc<Hub>) -> Router {
    routes()
        .route("/health", get(crate::health))
        .route("/health/live", get(crate::health_live))
        .route("/health/ready", get(crate::health_ready))
        .with_state(hub)
}
