//! FSPIOP v2.0 conversions (payer conversion): `POST /fxTransfers`,
//! `PUT /fxTransfers/{ID}`, `PUT /fxTransfers/{ID}/error`,
//! `GET /fxTransfers/{ID}`, and the hub's own messages about them — the
//! `PATCH /fxTransfers/{ID}` that tells the FXP the final state.
//!
//! The ledger decides (`ledger/src/fx.rs`): a conversion reserves the
//! initiating DFSP's source position; the FXP's acceptance moves nothing;
//! the transfer it depends on (`POST /transfers` with the conversion's
//! `determiningTransferId`, handled in `transfers.rs`) is paid from the
//! FXP's target position; the payee's commit commits both in one step,
//! and any other end ends both. Who is told what:
//!
//! | Outcome | Initiating DFSP | FXP |
//! |---|---|---|
//! | conversion reserved | | the prepare, passed on |
//! | refused over the payer's limits | `PUT …/error` 4001/4200 | |
//! | FXP accepted | the FXP's `PUT`, passed on | |
//! | FXP's wrong fulfilment or destination (aborted, 3100) | `PUT …/error` | `PUT …/error` |
//! | FXP's error | the FXP's error, passed on (and the dependent transfer's error, with the payee's) | |
//! | dependent transfer committed | (the transfer's `PUT`) | `PATCH` COMMITTED |
//! | dependent transfer aborted, or refused on the FXP's limits | (the transfer's error) | `PATCH` ABORTED |
//! | expired (either) | `PUT …/error` 3303 | `PUT …/error` 3303 |
//!
//! as central-ledger and ml-api-adapter do (fx-research §6–§7), except
//! where they leave a party untold or a conversion half done (§10): the
//! FXP's `PUT` with `conversionState` ABORTED is refused, not dropped
//! (§10.2); a conversion is never taken as accepted without the FXP's
//! fulfilment (§10.3); the FXP's error with a dependent transfer reserved
//! also tells the payee.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use axum::Router;
use fspiop::{Resource, Version, WireState};
use ledger::request::{AbortConversion, GetConversion, ReadTransfer};
use ledger::{
    Abort, ErrorCode, FspName, FulfilConversion, FxView, PrepareConversion, TransferId,
    TransferReply, TransferState, TransferView,
};

use crate::notify::{Origin, Tracking};
use crate::stages::Received;
use crate::transfer_stats::FailurePhase;
use crate::transfers::{check_parties, retry_later};
use crate::wire::{check_headers, forwarded_headers, Caller, Reply, Shape};
use crate::{refused, Hub, HubError};

pub const FX_TRANSFER_POST: &str = "FSPIOP_CALLBACK_URL_FX_TRANSFER_POST";
/// Also the FXP's `PATCH` (Mojaloop has no endpoint type of its own for it).
pub const FX_TRANSFER_PUT: &str = "FSPIOP_CALLBACK_URL_FX_TRANSFER_PUT";
pub const FX_TRANSFER_ERROR: &str = "FSPIOP_CALLBACK_URL_FX_TRANSFER_ERROR";

/// FX resources exist at version 2 only: the hub's own FX messages are
/// 2.0 whatever version a DFSP's transfer message used.
const FX_VERSION: Version = Version::V2_0;

pub fn routes() -> Router<Arc<Hub>> {
    Router::new()
        .route("/fxTransfers", post(prepare))
        .route("/fxTransfers/:id", put(fulfil).get(get_conversion))
        .route("/fxTransfers/:id/error", put(abort))
}

/// A conversion's message to one party.
struct FxMessage {
    origin: Origin,
    destination: FspName,
    endpoint_type: &'static str,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
}

fn tracking(view: &TransferView) -> Option<Tracking> {
    Some(Tracking {
        event_ms: Some(view.completed_at_ms.unwrap_or(view.prepared_at_ms)),
        retry_until_ms: match view.state {
            TransferState::Reserved => Some(view.expiration_ms),
            _ => None,
        },
        transfer_id: Some(view.transfer_id.to_string()),
        dead_letter: None,
    })
}

impl Hub {
    fn fx_reply(reply: Reply) -> Reply {
        Reply {
            version: FX_VERSION,
            trace: reply.trace,
        }
    }

    fn fx_headers(&self, destination: FspName, reply: Reply) -> HeaderMap {
        crate::wire::hub_headers(
            self,
            Resource::FxTransfers,
            destination,
            Self::fx_reply(reply),
        )
    }

    fn send_fx(
        &self,
        commit_request_id: TransferId,
        message: FxMessage,
        tracking: Option<Tracking>,
    ) {
        let id = commit_request_id.to_string();
        let sent = self.send_callback_tracked(
            message.origin,
            message.destination,
            message.endpoint_type,
            &[("commitRequestId", id.as_str()), ("ID", id.as_str())],
            message.method,
            message.headers,
            message.body,
            None,
            tracking,
        );
        if !sent {
            tracing::warn!(destination = %message.destination, endpoint_type = message.endpoint_type, conversion = %id, "no callback endpoint registered; callback dropped");
        }
    }

    /// The hub's `PUT /fxTransfers/{ID}/error`.
    fn fx_error(
        &self,
        destination: FspName,
        code: ErrorCode,
        description: &str,
        reply: Reply,
    ) -> FxMessage {
        FxMessage {
            origin: Origin::Hub,
            destination,
            endpoint_type: FX_TRANSFER_ERROR,
            method: Method::PUT,
            headers: self.fx_headers(destination, reply),
            body: Bytes::from(fspiop::error_body(code, description)),
        }
    }

    /// The hub's `PUT /fxTransfers/{ID}` with the conversion's state: its
    /// fulfilment once the FXP accepted (central-ledger's `toFulfil`).
    fn fx_state(&self, destination: FspName, view: &TransferView, reply: Reply) -> FxMessage {
        let body = fspiop::fx_transfer_put_body(
            wire_state(view.state),
            view.fulfilment.as_ref(),
            view.completed_at_ms,
        );
        FxMessage {
            origin: Origin::Hub,
            destination,
            endpoint_type: FX_TRANSFER_PUT,
            method: Method::PUT,
            headers: self.fx_headers(destination, reply),
            body: Bytes::from(body),
        }
    }

    /// The hub's `PATCH /fxTransfers/{ID}` to the FXP: the final state
    /// (the commit's time as `completedTimestamp`).
    fn fx_patch(
        &self,
        fxp: FspName,
        state: TransferState,
        completed_ms: Option<i64>,
        reply: Reply,
    ) -> FxMessage {
        let body = fspiop::fx_transfer_patch_body(wire_state(state), completed_ms);
        FxMessage {
            origin: Origin::Hub,
            destination: fxp,
            endpoint_type: FX_TRANSFER_PUT,
            method: Method::PATCH,
            headers: self.fx_headers(fxp, reply),
            body: Bytes::from(body),
        }
    }

    /// A refused conversion message, told to its sender (and counted when
    /// the sender is not the party it needs).
    fn refuse_fx(&self, caller: &Caller, commit_request_id: TransferId, error: &ledger::Rejection) {
        let description = format!("{} - {}", error.code.description(), error.description);
        if error.not_party {
            self.refuse(
                refused::Class::NotParty,
                caller.source.as_str(),
                &description,
            );
        }
        self.note_paused(caller.source, error);
        let message = self.fx_error(caller.source, error.code, &description, caller.reply());
        self.send_fx(commit_request_id, message, None);
    }

    /// The conversion ended with the transfer that depends on it (`view`,
    /// that transfer's): the FXP hears the conversion's final state — a
    /// `PATCH` COMMITTED or ABORTED, or for an expiry the hub's 3303 to
    /// both parties, as a conversion's own expiry.
    pub(crate) fn tell_fxp(&self, view: &TransferView) {
        let Some(FxView::Dependent {
            commit_request_id,
            fxp,
        }) = view.fx
        else {
            return;
        };
        // The pair ends together: the transfer's state is its conversion's.
        let state = FxView::conversion_state(view.state);
        let reply = Reply::unprompted(FX_VERSION);
        let tracking = Some(Tracking {
            event_ms: Some(view.completed_at_ms.unwrap_or(view.prepared_at_ms)),
            retry_until_ms: None,
            transfer_id: Some(commit_request_id.to_string()),
            dead_letter: None,
        });
        match state {
            TransferState::Reserved => {}
            TransferState::Expired => {
                let (code, description) = expired();
                for party in [view.payer, fxp] {
                    let message = self.fx_error(party, code, description, reply);
                    self.send_fx(commit_request_id, message, tracking.clone());
                }
            }
            TransferState::Committed | TransferState::Aborted | TransferState::Rejected => {
                let message = self.fx_patch(fxp, state, view.completed_at_ms, reply);
                self.send_fx(commit_request_id, message, tracking);
            }
        }
    }

    /// Conversions the ledger expired: 3303 to the initiating DFSP and the
    /// FXP (central-ledger's FX_TIMEOUT_RESERVED; no PATCH).
    pub(crate) fn notify_expired_conversion(&self, view: &TransferView) {
        let (code, description) = expired();
        self.metrics
            .transfers
            .record_failure(view, FailurePhase::Expire, code, description);
        let reply = Reply::unprompted(FX_VERSION);
        for party in [view.payer, view.payee] {
            let message = self.fx_error(party, code, description, reply);
            self.send_fx(view.transfer_id, message, tracking(view));
        }
    }

    /// After a restart: a conversion's callbacks as the hub would send them
    /// now, from the stored fields (the DFSPs' bytes are not kept).
    /// Returns how many were queued.
    pub(crate) fn redeliver_conversion(
        &self,
        view: &TransferView,
        condition: &ledger::Condition,
        finish: Option<ledger::FinishKind>,
        now_ms: i64,
    ) -> usize {
        use ledger::FinishKind;
        let reply = Reply::unprompted(FX_VERSION);
        let fxp = view.payee;
        let accepted = matches!(
            view.fx,
            Some(FxView::Conversion {
                fxp_fulfilled_at_ms: Some(_),
                ..
            })
        );
        let (code, description) = reason_of(view);
        let messages: Vec<FxMessage> = match (view.state, finish) {
            (TransferState::Reserved, _) if view.expiration_ms <= now_ms => vec![],
            (TransferState::Reserved, _) if accepted => {
                vec![self.fx_state(view.payer, view, reply)]
            }
            (TransferState::Reserved, _) => vec![self.rebuilt_fx_prepare(view, condition, reply)],
            (TransferState::Rejected, _) => {
                vec![self.fx_error(view.payer, code, &description, reply)]
            }
            (TransferState::Expired, _) => vec![
                self.fx_error(view.payer, code, &description, reply),
                self.fx_error(fxp, code, &description, reply),
            ],
            (state, Some(FinishKind::Linked)) => {
                vec![self.fx_patch(fxp, state, view.completed_at_ms, reply)]
            }
            (TransferState::Aborted, Some(FinishKind::Fulfil)) => vec![
                self.fx_error(view.payer, code, &description, reply),
                self.fx_error(fxp, code, &description, reply),
            ],
            _ => vec![self.fx_error(view.payer, code, &description, reply)],
        };
        let queued = messages.len();
        for message in messages {
            self.send_fx(view.transfer_id, message, tracking(view));
        }
        queued
    }

    /// The initiating DFSP's `POST /fxTransfers`, rebuilt for the FXP from
    /// the stored fields after a restart (FSPIOP-Source the initiating
    /// DFSP; its signature is lost with its bytes).
    fn rebuilt_fx_prepare(
        &self,
        view: &TransferView,
        condition: &ledger::Condition,
        reply: Reply,
    ) -> FxMessage {
        let mut headers = self.fx_headers(view.payee, reply);
        if let Ok(source) = axum::http::HeaderValue::from_str(view.payer.as_str()) {
            headers.insert("fspiop-source", source);
        }
        if let Ok(accept) = axum::http::HeaderValue::from_str(&fspiop::content_type_for(
            Resource::FxTransfers,
            FX_VERSION,
        )) {
            headers.insert("accept", accept);
        }
        let mut body = serde_json::json!({
            "commitRequestId": view.transfer_id.to_string(),
            "initiatingFsp": view.payer.as_str(),
            "counterPartyFsp": view.payee.as_str(),
            "sourceAmount": {"amount": view.amount.to_string(), "currency": view.currency.to_string()},
            "condition": condition.to_base64url(),
            "expiration": fspiop::format_date_time(view.expiration_ms),
        });
        if let Some(FxView::Conversion { terms, .. }) = view.fx {
            body["determiningTransferId"] = terms.determining_transfer_id.to_string().into();
            body["targetAmount"] = serde_json::json!({
                "amount": terms.target_amount.to_string(),
                "currency": terms.target_currency.to_string(),
            });
        }
        FxMessage {
            origin: Origin::Forwarded,
            destination: view.payee,
            endpoint_type: FX_TRANSFER_POST,
            method: Method::POST,
            headers,
            body: Bytes::from(body.to_string()),
        }
    }

    /// The FXP ended a conversion whose dependent transfer was reserved:
    /// that transfer ended with it, and its payer and payee are told with
    /// the hub's `PUT /transfers/{ID}/error` (central-ledger tells the
    /// payer only; the payee held a reservation too).
    async fn tell_dependent_ended(
        &self,
        conversion: &TransferView,
        code: ErrorCode,
        description: &str,
    ) {
        let Some(FxView::Conversion { terms, .. }) = conversion.fx else {
            return;
        };
        let transfer_id = terms.determining_transfer_id;
        let depends = |view: &TransferView| {
            matches!(view.fx, Some(FxView::Dependent { commit_request_id, .. })
                if commit_request_id == conversion.transfer_id)
        };
        match self.ask(ReadTransfer { transfer_id }).await {
            // Prepared for this conversion, and (the pair ends together)
            // ended with it now.
            Ok(Ok((view, _))) if depends(&view) => {
                self.tell_transfer_ended_by_conversion(&view, code, description)
            }
            // No transfer depends on it: nobody else to tell.
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(transfer = %transfer_id, %error, "the dependent transfer could not be read; its parties were not told")
            }
        }
    }
}

/// A conversion's state as `conversionState` says it.
fn wire_state(state: TransferState) -> WireState {
    match state {
        TransferState::Reserved => WireState::Reserved,
        TransferState::Committed => WireState::Committed,
        TransferState::Aborted | TransferState::Expired | TransferState::Rejected => {
            WireState::Aborted
        }
    }
}

fn expired() -> (ErrorCode, &'static str) {
    (
        ErrorCode::TRANSFER_EXPIRED,
        "Transfer expired - the conversion reached its expiration before it completed",
    )
}

/// Why a conversion did not complete, in words.
fn reason_of(view: &TransferView) -> (ErrorCode, String) {
    let code = view.reason.unwrap_or(ErrorCode::GENERIC_VALIDATION_ERROR);
    let description = match view.cause {
        Some(cause) => format!("{} - {}", code.description(), cause.description()),
        None => code.description().to_string(),
    };
    (code, description)
}

async fn prepare(State(hub): State<Arc<Hub>>, mut request: Received) -> Result<Response, HubError> {
    let body = std::mem::take(&mut request.body);
    let headers = &request.headers;
    let caller = check_headers(headers, Resource::FxTransfers, Shape::Post)?;
    let parsed = fspiop::parse_fx_transfer_prepare(&body)?;
    request.names(parsed.commit_request_id);
    check_parties(
        &hub,
        &caller,
        ("initiatingFsp", parsed.initiating_fsp),
        ("counterPartyFsp", parsed.counter_party_fsp),
    )?;
    let (determining_transfer_id, expiration_ms) = parsed.check_payer_conversion()?;
    let commit_request_id = parsed.commit_request_id;
    let fxp = parsed.counter_party_fsp;
    // An FXP the hub knows but cannot reach would hold the payer's funds
    // until expiry with nobody told.
    if hub.endpoints.participant_mode(fxp).is_some()
        && hub.endpoints.url(fxp, FX_TRANSFER_POST, &[]).is_none()
    {
        let description =
            format!("Destination FSP Error - {fxp} has no {FX_TRANSFER_POST} endpoint");
        let message = hub.fx_error(caller.source, ErrorCode(3201), &description, caller.reply());
        hub.send_fx(commit_request_id, message, None);
        return Ok(StatusCode::ACCEPTED.into_response());
    }
    let command = PrepareConversion {
        commit_request_id,
        initiating: parsed.initiating_fsp,
        fxp,
        source_amount: parsed.source.amount,
        source_currency: parsed.source.currency,
        terms: ledger::ConversionTerms {
            determining_transfer_id,
            target_currency: parsed.target.currency,
            target_amount: parsed.target.amount,
        },
        condition: parsed.condition,
        expiration_ms,
        request_hash: parsed.request_hash,
        wire_version: caller.content_version.packed(),
    };
    match retry_later(hub.ask(command).await?)? {
        TransferReply::Done(view) => {
            hub.metrics.transfers.record_prepared(view.payer);
            let message = FxMessage {
                origin: Origin::Forwarded,
                destination: fxp,
                endpoint_type: FX_TRANSFER_POST,
                method: Method::POST,
                headers: forwarded_headers(headers, true),
                body,
            };
            hub.send_fx(commit_request_id, message, tracking(&view));
        }
        TransferReply::Failed { transfer, error } => {
            let description = format!("{} - {}", error.code.description(), error.description);
            hub.metrics.transfers.record_failure(
                &transfer,
                FailurePhase::Prepare,
                error.code,
                &description,
            );
            let message = hub.fx_error(transfer.payer, error.code, &description, caller.reply());
            hub.send_fx(commit_request_id, message, tracking(&transfer));
        }
        TransferReply::Refused(error) => hub.refuse_fx(&caller, commit_request_id, &error),
        // A resend gets the conversion's state, as central-ledger's
        // FX_PREPARE_DUPLICATE (RESERVED included).
        TransferReply::Duplicate(view) => {
            let message = hub.fx_state(caller.source, &view, caller.reply());
            hub.send_fx(commit_request_id, message, None);
        }
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
    let caller = check_headers(headers, Resource::FxTransfers, Shape::Put)?;
    let commit_request_id = fspiop::parse_correlation_id(&id)?;
    let parsed = fspiop::parse_fx_transfer_fulfil(&body)?;
    if let Some(completed_ms) = parsed.completed_ms {
        fspiop::check_completed_timestamp(completed_ms, crate::now_ms())?;
    }
    if parsed.conversion_state == WireState::Aborted {
        // Central-ledger drops it silently (fx-research §10.2), leaving
        // the payer's funds held until expiry: refused, so the FXP knows.
        return Err(HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            "Generic validation error - an FXP declines a conversion with PUT /fxTransfers/{ID}/error, not conversionState ABORTED",
        ));
    }
    let command = FulfilConversion {
        commit_request_id,
        caller: caller.source,
        fulfilment: parsed.fulfilment,
        destination: caller.destination,
        request_hash: parsed.request_hash,
    };
    match retry_later(hub.ask(command).await?)? {
        TransferReply::Done(view) => {
            let message = FxMessage {
                origin: Origin::Forwarded,
                destination: view.payer,
                endpoint_type: FX_TRANSFER_PUT,
                method: Method::PUT,
                headers: forwarded_headers(headers, false),
                body,
            };
            hub.send_fx(commit_request_id, message, tracking(&view));
        }
        // Aborted by the hub (a wrong fulfilment or destination) or too
        // late: both parties hear it (central-ledger's FX_ABORT_VALIDATION).
        TransferReply::Failed { transfer, error } => {
            let description = format!("{} - {}", error.code.description(), error.description);
            hub.metrics.transfers.record_failure(
                &transfer,
                FailurePhase::Fulfil,
                error.code,
                &description,
            );
            for party in [transfer.payer, transfer.payee] {
                let message = hub.fx_error(party, error.code, &description, caller.reply());
                hub.send_fx(commit_request_id, message, tracking(&transfer));
            }
            hub.tell_dependent_ended(&transfer, error.code, &description)
                .await;
        }
        TransferReply::Refused(error) => hub.refuse_fx(&caller, commit_request_id, &error),
        TransferReply::Duplicate(view) => {
            let message = hub.fx_state(caller.source, &view, caller.reply());
            hub.send_fx(commit_request_id, message, None);
        }
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
    let caller = check_headers(headers, Resource::FxTransfers, Shape::Put)?;
    let commit_request_id = fspiop::parse_correlation_id(&id)?;
    let parsed = fspiop::parse_error_information(&body)?;
    let command = AbortConversion(Abort {
        transfer_id: commit_request_id,
        caller: caller.source,
        error_code: parsed.code,
        destination: caller.destination,
        request_hash: parsed.request_hash,
    });
    match retry_later(hub.ask(command).await?)? {
        TransferReply::Done(view) => {
            hub.metrics.transfers.record_failure(
                &view,
                FailurePhase::Abort,
                view.reason.unwrap_or(parsed.code),
                &parsed.description,
            );
            // The FXP's own code and words (central-ledger rewrites them,
            // project#4317).
            let message = FxMessage {
                origin: Origin::Forwarded,
                destination: view.payer,
                endpoint_type: FX_TRANSFER_ERROR,
                method: Method::PUT,
                headers: forwarded_headers(headers, false),
                body,
            };
            hub.send_fx(commit_request_id, message, tracking(&view));
            hub.tell_dependent_ended(&view, parsed.code, &parsed.description)
                .await;
        }
        TransferReply::Failed { transfer, error } => {
            let description = format!("{} - {}", error.code.description(), error.description);
            let message = hub.fx_error(transfer.payer, error.code, &description, caller.reply());
            hub.send_fx(commit_request_id, message, tracking(&transfer));
            hub.tell_dependent_ended(&transfer, error.code, &description)
                .await;
        }
        TransferReply::Refused(error) => hub.refuse_fx(&caller, commit_request_id, &error),
        TransferReply::Duplicate(view) => {
            let message = hub.fx_state(caller.source, &view, caller.reply());
            hub.send_fx(commit_request_id, message, None);
        }
    }
    Ok(StatusCode::OK.into_response())
}

async fn get_conversion(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, HubError> {
    let caller = check_headers(&headers, Resource::FxTransfers, Shape::Get)?;
    let commit_request_id = fspiop::parse_correlation_id(&id)?;
    let reply = hub
        .ask(GetConversion {
            commit_request_id,
            caller: caller.source,
        })
        .await?;
    match reply {
        Ok(view) => {
            let message = hub.fx_state(caller.source, &view, caller.reply());
            hub.send_fx(commit_request_id, message, None);
        }
        Err(error) if HubError::is_retry_later(&error) => return Err(HubError::refused(error)),
        Err(error) => hub.refuse_fx(&caller, commit_request_id, &error),
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversion_reads_as_fspiops_four_states() {
        assert_eq!(wire_state(TransferState::Reserved), WireState::Reserved);
        assert_eq!(wire_state(TransferState::Committed), WireState::Committed);
        for ended in [
            TransferState::Aborted,
            TransferState::Expired,
            TransferState::Rejected,
        ] {
            assert_eq!(wire_state(ended), WireState::Aborted);
        }
    }
}
