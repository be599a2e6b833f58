//! The simulated DFSPs' callback server: one axum router plays the payee
//! of every DFSP (answering forwarded prepares, lookups, quotes and
//! transaction requests), the FXPs of the `fx` flow (answering FX quotes
//! and conversions, receiving the hub's `PATCH`), and the payer's end of
//! every flow (completing the waiter of each callback it receives).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::routing::{get, post, put};
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::Full;
use serde::Deserialize;

use crate::dfsp::{
    describe_error_body, error_of, fspiop_request, fulfil_body, fx_quote_put_body,
    fx_transfer_accept_body, party_put_body, quote_put_body, Api, FxTerms, CONDITION,
};
use crate::flows::{FORWARD, FULFIL, FX_FORWARD, FX_FULFIL, FX_NOTIFY, FX_PATCH, NOTIFY};
use crate::ids::now_ms;
use crate::run::{converted, Shared, FX_RATE};
use crate::waiters::{Completion, Waiters};

pub(crate) fn callbacks(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/:dfsp/transfers", post(on_prepare))
        .route(
            "/:dfsp/transfers/:id",
            put(on_transfer_put).patch(|| async { StatusCode::OK }),
        )
        .route("/:dfsp/transfers/:id/error", put(on_error))
        .route(
            "/:dfsp/parties/:id_type/:id",
            get(on_party_get).put(on_party_put),
        )
        .route("/:dfsp/parties/:id_type/:id/error", put(on_party_error))
        .route("/:dfsp/quotes", post(on_quote_post))
        .route("/:dfsp/quotes/:id", put(on_quote_put))
        .route("/:dfsp/quotes/:id/error", put(on_quote_error))
        .route("/:dfsp/transactionRequests", post(on_transaction_request))
        .route(
            "/:dfsp/transactionRequests/:id",
            put(on_transaction_request_put),
        )
        .route(
            "/:dfsp/transactionRequests/:id/error",
            put(on_transaction_request_error),
        )
        .route("/:dfsp/fxQuotes", post(on_fx_quote_post))
        .route("/:dfsp/fxQuotes/:id", put(on_fx_quote_put))
        .route("/:dfsp/fxQuotes/:id/error", put(on_fx_quote_error))
        .route("/:dfsp/fxTransfers", post(on_conversion))
        .route(
            "/:dfsp/fxTransfers/:id",
            put(on_conversion_put).patch(on_conversion_patch),
        )
        .route("/:dfsp/fxTransfers/:id/error", put(on_conversion_error))
        .route("/:dfsp/participants/:id", put(on_registered))
        // `{requestId}/error`, or a single party's `{Type}/{ID}`.
        .route("/:dfsp/participants/:id/:more", put(on_participants_put))
        .route("/:dfsp/participants/:id/:more/error", put(on_unexpected))
        .fallback(on_unexpected)
        .with_state(shared)
}

/// Anything the bench never asks for (a single party registration's answer,
/// an unknown path): counted, and refused when it is not a known path.
pub(crate) async fn on_unexpected(State(shared): State<Arc<Shared>>, method: Method) -> StatusCode {
    shared.stats().unexpected += 1;
    if method == Method::PUT {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    }
}

/// Runs a payee's answer in the background, counted in
/// `answers_in_flight` until it is answered.
pub(crate) fn spawn_answer<F>(shared: &Arc<Shared>, answer: impl FnOnce(Arc<Shared>) -> F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    shared.answers_in_flight.fetch_add(1, Ordering::SeqCst);
    let future = answer(shared.clone());
    let shared = shared.clone();
    tokio::spawn(async move {
        future.await;
        shared.answers_in_flight.fetch_sub(1, Ordering::SeqCst);
    });
}

/// The FSPIOP-Source of a forwarded request, as one of our DFSPs.
pub(crate) fn source_dfsp(shared: &Shared, headers: &HeaderMap) -> Option<u32> {
    headers
        .get("fspiop-source")
        .and_then(|value| value.to_str().ok())
        .and_then(|name| shared.dfsp(name))
}

// ----- transfers

#[derive(Deserialize)]
pub(crate) struct ForwardedPrepare<'a> {
    #[serde(rename = "transferId")]
    pub(crate) transfer_id: &'a str,
}

/// The payee receives the forwarded prepare: answers at once, then fulfils.
pub(crate) async fn on_prepare(
    State(shared): State<Arc<Shared>>,
    Path(dfsp): Path<String>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let counter = serde_json::from_slice::<ForwardedPrepare<'_>>(&body)
        .ok()
        .and_then(|prepare| shared.ids.counter_of(prepare.transfer_id));
    let found = counter.and_then(|counter| {
        let pending = shared.pending();
        let transfer = pending.get(&counter)?;
        Some((
            counter,
            transfer.payer,
            transfer.payee,
            transfer.measured,
            received.duration_since(transfer.post_sent),
        ))
    });
    let Some((counter, payer, payee, measured, forward)) = found else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    if shared.names[payee as usize] != dfsp {
        shared.fail(
            counter,
            "misrouted".into(),
            format!(
                "the prepare for {} reached {dfsp}",
                shared.names[payee as usize]
            ),
        );
        return StatusCode::OK;
    }
    if measured {
        shared.stats().record(FORWARD, forward);
    }
    spawn_answer(&shared, |shared| async move {
        fulfil(&shared, counter, payer, payee, measured).await;
    });
    StatusCode::OK
}

/// The payee's `PUT /transfers/{ID}` with the fulfilment.
pub(crate) async fn fulfil(shared: &Shared, counter: u64, payer: u32, payee: u32, measured: bool) {
    let id = shared.ids.format(counter);
    let body = fulfil_body(now_ms());
    let request = fspiop_request(
        Method::PUT,
        &format!("{}/transfers/{id}", shared.api),
        Api::Transfers,
        &shared.names[payee as usize],
        Some(&shared.names[payer as usize]),
        body,
    );
    let request = match request {
        Ok(request) => request,
        Err(error) => {
            shared.fail(counter, "request".into(), error);
            return;
        }
    };
    let sent = Instant::now();
    let conversion = match shared.pending().get_mut(&counter) {
        Some(transfer) => {
            transfer.fulfil_sent = Some(sent);
            transfer.conversion
        }
        None => return,
    };
    // The FXP's PATCH follows this fulfilment.
    if let Some(conversion) = conversion {
        if let Some(patch) = shared.patches().get_mut(&conversion) {
            patch.fulfil_sent = Some(sent);
        }
    }
    match shared.send(request).await {
        Ok((status, _)) if status == StatusCode::OK => {
            if measured {
                shared.stats().record(FULFIL, sent.elapsed());
            }
        }
        Ok((status, body)) => {
            shared.fail(
                counter,
                format!("HTTP {} (fulfil)", status.as_u16()),
                describe_error_body(&body),
            );
        }
        Err((key, description)) => {
            shared.fail(counter, format!("{key} (fulfil)"), description);
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct TransferPut<'a> {
    #[serde(rename = "transferState", default)]
    pub(crate) transfer_state: Option<&'a str>,
}

/// The payer's commit notification, or the payee's confirmation copy.
pub(crate) async fn on_transfer_put(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let Some(counter) = shared.ids.counter_of(&id) else {
        shared.stats().confirmations += 1;
        return StatusCode::OK;
    };
    let transfer = {
        let mut pending = shared.pending();
        match pending.get(&counter) {
            Some(transfer) if shared.names[transfer.payer as usize] == dfsp => {
                pending.remove(&counter)
            }
            _ => None,
        }
    };
    let Some(transfer) = transfer else {
        shared.stats().confirmations += 1;
        return StatusCode::OK;
    };
    let state = serde_json::from_slice::<TransferPut<'_>>(&body)
        .ok()
        .and_then(|put| put.transfer_state.map(str::to_string));
    if state.as_deref() != Some("COMMITTED") {
        let _ = transfer.done.send(Completion::Failed(
            format!("state {}", state.as_deref().unwrap_or("missing")),
            format!("the payer was told {:?}", String::from_utf8_lossy(&body)),
        ));
        return StatusCode::OK;
    }
    if transfer.measured {
        if let Some(fulfil_sent) = transfer.fulfil_sent {
            shared
                .stats()
                .record(NOTIFY, received.saturating_duration_since(fulfil_sent));
        }
    }
    let _ = transfer.done.send(Completion::Done(received));
    StatusCode::OK
}

/// An error callback, to the payer or the payee: the transfer failed.
pub(crate) async fn on_error(
    State(shared): State<Arc<Shared>>,
    Path((_dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let (key, description) = error_of(&body);
    let failed = shared
        .ids
        .counter_of(&id)
        .is_some_and(|counter| shared.fail(counter, key, description));
    if !failed {
        shared.stats().late_errors += 1;
    }
    StatusCode::OK
}

// ----- parties

/// The payee receives a forwarded `GET /parties/MSISDN/{ID}`: answers at
/// once, then sends `PUT /parties/MSISDN/{ID}` to the requester (the
/// forwarded FSPIOP-Source) through the hub.
pub(crate) async fn on_party_get(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id_type, id)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> StatusCode {
    let (Some(requester), Some(party), Some(holder)) = (
        source_dfsp(&shared, &headers),
        shared.party(&id),
        shared.dfsp(&dfsp),
    ) else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    if id_type != "MSISDN" || party.dfsp != holder {
        shared.lookups.fail(
            &(requester, party),
            "misrouted".into(),
            format!(
                "the lookup of {id_type}/{id}, held by {}, reached {dfsp}",
                shared.names[party.dfsp as usize]
            ),
        );
        return StatusCode::OK;
    }
    spawn_answer(&shared, |shared| async move {
        let request = fspiop_request(
            Method::PUT,
            &format!("{}/parties/MSISDN/{id}", shared.api),
            Api::Parties,
            &shared.names[holder as usize],
            Some(&shared.names[requester as usize]),
            party_put_body(&id, &shared.names[holder as usize]),
        );
        let failure = match request {
            Err(error) => Some(("request (party put)".to_string(), error)),
            Ok(request) => match shared.send(request).await {
                Ok((status, _)) if status == StatusCode::OK => None,
                Ok((status, body)) => Some((
                    format!("HTTP {} (party put)", status.as_u16()),
                    describe_error_body(&body),
                )),
                Err((key, description)) => Some((format!("{key} (party put)"), description)),
            },
        };
        if let Some((key, description)) = failure {
            shared.lookups.fail(&(requester, party), key, description);
        }
    });
    StatusCode::OK
}

/// The payer receives the holder's `PUT /parties/MSISDN/{ID}`: its lookup
/// is done (if the answer names the party and its holder).
pub(crate) async fn on_party_put(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, _id_type, id)): Path<(String, String, String)>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let waiter = shared
        .party(&id)
        .zip(shared.dfsp(&dfsp))
        .and_then(|(party, payer)| shared.lookups.take_oldest(&(payer, party), None));
    let Some(waiter) = waiter else {
        shared.stats().late_answers += 1;
        return StatusCode::OK;
    };
    let holder = &shared.names[waiter.payee as usize];
    let completion = match fspiop::check_party_put(&body) {
        Ok(info) if info.fsp.is_some_and(|fsp| fsp.as_str() == holder) => {
            Completion::Done(received)
        }
        Ok(info) => Completion::Failed(
            "wrong party".into(),
            format!(
                "the answer for {id} names {:?}, not {holder}",
                info.fsp.map(|fsp| fsp.to_string())
            ),
        ),
        Err(error) => Completion::Failed(
            "invalid party".into(),
            format!("{} {}", error.code.0, error.description),
        ),
    };
    let _ = waiter.done.send(completion);
    StatusCode::OK
}

/// `PUT /parties/MSISDN/{ID}/error` to the payer: its lookup failed.
pub(crate) async fn on_party_error(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, _id_type, id)): Path<(String, String, String)>,
    body: Bytes,
) -> StatusCode {
    let (key, description) = error_of(&body);
    let failed = shared
        .party(&id)
        .zip(shared.dfsp(&dfsp))
        .is_some_and(|(party, payer)| shared.lookups.fail(&(payer, party), key, description));
    if !failed {
        shared.stats().late_errors += 1;
    }
    StatusCode::OK
}

// ----- quotes

#[derive(Deserialize)]
pub(crate) struct ForwardedQuote<'a> {
    #[serde(rename = "quoteId")]
    pub(crate) quote_id: &'a str,
    #[serde(borrow)]
    pub(crate) amount: QuoteAmount<'a>,
}

#[derive(Deserialize)]
pub(crate) struct QuoteAmount<'a> {
    pub(crate) amount: &'a str,
    pub(crate) currency: &'a str,
}

/// The payee receives a forwarded `POST /quotes`: answers at once, then
/// sends `PUT /quotes/{ID}` to the payer (the forwarded FSPIOP-Source)
/// through the hub.
pub(crate) async fn on_quote_post(
    State(shared): State<Arc<Shared>>,
    Path(dfsp): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let Ok(quote) = serde_json::from_slice::<ForwardedQuote<'_>>(&body) else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    let counter = shared.ids.counter_of(quote.quote_id);
    let (Some(counter), Some(requester)) = (counter, source_dfsp(&shared, &headers)) else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    let Some((_, payee)) = shared.quotes.peek(&counter) else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    if shared.names[payee as usize] != dfsp {
        shared.quotes.fail(
            &counter,
            "misrouted".into(),
            format!(
                "the quote for {} reached {dfsp}",
                shared.names[payee as usize]
            ),
        );
        return StatusCode::OK;
    }
    let answer = quote_put_body(
        quote.amount.amount,
        quote.amount.currency,
        now_ms() + 60_000,
    );
    let request = fspiop_request(
        Method::PUT,
        &format!("{}/quotes/{}", shared.api, shared.ids.format(counter)),
        Api::Quotes,
        &shared.names[payee as usize],
        Some(&shared.names[requester as usize]),
        answer,
    );
    send_answer(
        &shared,
        |shared| &shared.quotes,
        counter,
        "quote put",
        request,
    );
    StatusCode::OK
}

/// Sends an answering DFSP's `PUT` in the background; if it is refused,
/// the asker's waiter of `counter` fails.
pub(crate) fn send_answer(
    shared: &Arc<Shared>,
    waiters: fn(&Shared) -> &Waiters<u64>,
    counter: u64,
    what: &'static str,
    request: Result<Request<Full<Bytes>>, String>,
) {
    spawn_answer(shared, |shared| async move {
        let failure = match request {
            Err(error) => Some((format!("request ({what})"), error)),
            Ok(request) => match shared.send(request).await {
                Ok((status, _)) if status == StatusCode::OK => None,
                Ok((status, body)) => Some((
                    format!("HTTP {} ({what})", status.as_u16()),
                    describe_error_body(&body),
                )),
                Err((key, description)) => Some((format!("{key} ({what})"), description)),
            },
        };
        if let Some((key, description)) = failure {
            waiters(&shared).fail(&counter, key, description);
        }
    });
}

/// The payer receives the payee's `PUT /quotes/{ID}`: its quote is done (if
/// the answer is a valid quote with the condition the transfer will use).
pub(crate) async fn on_quote_put(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let waiter = shared
        .ids
        .counter_of(&id)
        .zip(shared.dfsp(&dfsp))
        .and_then(|(counter, payer)| shared.quotes.take_oldest(&counter, Some(payer)));
    let Some(waiter) = waiter else {
        shared.stats().late_answers += 1;
        return StatusCode::OK;
    };
    let completion = match fspiop::parse_quote_put(&body) {
        Ok(quote) if ledger::Condition::from_base64url(CONDITION) == Some(quote.condition) => {
            Completion::Done(received)
        }
        Ok(_) => Completion::Failed(
            "wrong condition".into(),
            format!("the quote {id} does not carry the payee's condition"),
        ),
        Err(error) => Completion::Failed(
            "invalid quote".into(),
            format!("{} {}", error.code.0, error.description),
        ),
    };
    let _ = waiter.done.send(completion);
    StatusCode::OK
}

/// `PUT /quotes/{ID}/error`, to the payer: its quote failed.
pub(crate) async fn on_quote_error(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    answered_with_error(&shared, &shared.quotes, &dfsp, &id, &body)
}

/// An error callback to `dfsp` about its request `id`: the asker's stage
/// failed.
pub(crate) fn answered_with_error(
    shared: &Shared,
    waiters: &Waiters<u64>,
    dfsp: &str,
    id: &str,
    body: &[u8],
) -> StatusCode {
    let (key, description) = error_of(body);
    let waiter = shared
        .ids
        .counter_of(id)
        .zip(shared.dfsp(dfsp))
        .and_then(|(counter, asker)| waiters.take_oldest(&counter, Some(asker)));
    match waiter {
        Some(waiter) => {
            let _ = waiter.done.send(Completion::Failed(key, description));
        }
        None => shared.stats().late_errors += 1,
    }
    StatusCode::OK
}

// ----- transaction requests

#[derive(Deserialize)]
pub(crate) struct ForwardedTransactionRequest<'a> {
    #[serde(rename = "transactionRequestId")]
    pub(crate) transaction_request_id: &'a str,
}

/// The payer receives a forwarded `POST /transactionRequests`: answers at
/// once, then tells the payee (the forwarded FSPIOP-Source) through the hub
/// that it received it, `PUT /transactionRequests/{ID}`.
pub(crate) async fn on_transaction_request(
    State(shared): State<Arc<Shared>>,
    Path(dfsp): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let forwarded = serde_json::from_slice::<ForwardedTransactionRequest<'_>>(&body);
    let counter = forwarded
        .ok()
        .and_then(|request| shared.ids.counter_of(request.transaction_request_id));
    let known = counter.and_then(|counter| {
        let (_, payer) = shared.transaction_requests.peek(&counter)?;
        Some((counter, payer, source_dfsp(&shared, &headers)?))
    });
    let Some((counter, payer, requester)) = known else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    if shared.names[payer as usize] != dfsp {
        let description = format!(
            "the transaction request for {} reached {dfsp}",
            shared.names[payer as usize]
        );
        shared
            .transaction_requests
            .fail(&counter, "misrouted".into(), description);
        return StatusCode::OK;
    }
    let request = fspiop_request(
        Method::PUT,
        &format!(
            "{}/transactionRequests/{}",
            shared.api,
            shared.ids.format(counter)
        ),
        Api::TransactionRequests,
        &dfsp,
        Some(&shared.names[requester as usize]),
        r#"{"transactionRequestState":"RECEIVED"}"#.to_string(),
    );
    send_answer(
        &shared,
        |shared| &shared.transaction_requests,
        counter,
        "transaction request put",
        request,
    );
    StatusCode::OK
}

/// The payee receives the payer's `PUT /transactionRequests/{ID}`: its
/// request is done if the payer says it received it.
pub(crate) async fn on_transaction_request_put(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let waiter = shared
        .ids
        .counter_of(&id)
        .zip(shared.dfsp(&dfsp))
        .and_then(|(counter, payee)| {
            shared
                .transaction_requests
                .take_oldest(&counter, Some(payee))
        });
    let Some(waiter) = waiter else {
        shared.stats().late_answers += 1;
        return StatusCode::OK;
    };
    let completion = match fspiop::parse_transaction_request_put(&body) {
        Ok(answer) if answer.state == "RECEIVED" => Completion::Done(received),
        Ok(answer) => Completion::Failed(
            "unexpected state".into(),
            format!("the transaction request {id} is {}", answer.state),
        ),
        Err(error) => Completion::Failed(
            "invalid answer".into(),
            format!("{} {}", error.code.0, error.description),
        ),
    };
    let _ = waiter.done.send(completion);
    StatusCode::OK
}

/// `PUT /transactionRequests/{ID}/error`, to the payee: its request failed.
pub(crate) async fn on_transaction_request_error(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    answered_with_error(&shared, &shared.transaction_requests, &dfsp, &id, &body)
}

// ----- foreign exchange

#[derive(Deserialize)]
pub(crate) struct ForwardedFxQuote<'a> {
    #[serde(rename = "conversionRequestId")]
    pub(crate) conversion_request_id: &'a str,
    #[serde(rename = "conversionTerms", borrow)]
    pub(crate) terms: ForwardedTerms<'a>,
}

#[derive(Deserialize)]
pub(crate) struct ForwardedTerms<'a> {
    #[serde(rename = "conversionId")]
    pub(crate) conversion_id: &'a str,
    #[serde(rename = "determiningTransferId")]
    pub(crate) determining_transfer_id: &'a str,
    #[serde(rename = "initiatingFsp")]
    pub(crate) initiating_fsp: &'a str,
    #[serde(rename = "counterPartyFsp")]
    pub(crate) counter_party_fsp: &'a str,
    #[serde(rename = "sourceAmount", borrow)]
    pub(crate) source: QuoteAmount<'a>,
    #[serde(rename = "targetAmount", borrow)]
    pub(crate) target: FxCurrency<'a>,
    pub(crate) expiration: &'a str,
}

#[derive(Deserialize)]
pub(crate) struct FxCurrency<'a> {
    pub(crate) currency: &'a str,
}

/// The FXP receives a forwarded `POST /fxQuotes`: answers at once, then
/// sends `PUT /fxQuotes/{ID}` to the payer (the forwarded FSPIOP-Source)
/// through the hub: the terms with the target amount at [`FX_RATE`], the
/// condition every conversion uses.
pub(crate) async fn on_fx_quote_post(
    State(shared): State<Arc<Shared>>,
    Path(dfsp): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let Ok(asked) = serde_json::from_slice::<ForwardedFxQuote<'_>>(&body) else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    let counter = shared.ids.counter_of(asked.conversion_request_id);
    let (Some(counter), Some(requester)) = (counter, source_dfsp(&shared, &headers)) else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    let Some((_, fxp)) = shared.fx_quotes.peek(&counter) else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    if shared.names[fxp as usize] != dfsp {
        shared.fx_quotes.fail(
            &counter,
            "misrouted".into(),
            format!(
                "the FX quote for {} reached {dfsp}",
                shared.names[fxp as usize]
            ),
        );
        return StatusCode::OK;
    }
    let terms = &asked.terms;
    let Some(target) = converted(terms.source.amount) else {
        shared.fx_quotes.fail(
            &counter,
            "amount".into(),
            format!(
                "{} {} converts to no amount",
                terms.source.amount, terms.source.currency
            ),
        );
        return StatusCode::OK;
    };
    let target = target.to_string();
    let offered = FxTerms {
        conversion_id: terms.conversion_id,
        determining_transfer_id: terms.determining_transfer_id,
        initiating_fsp: terms.initiating_fsp,
        counter_party_fsp: terms.counter_party_fsp,
        source: (terms.source.amount, terms.source.currency),
        target: (Some(&target), terms.target.currency),
        expiration_ms: fspiop::parse_date_time(terms.expiration)
            .unwrap_or_else(|| now_ms() + 60_000),
    };
    let request = fspiop_request(
        Method::PUT,
        &format!("{}/fxQuotes/{}", shared.api, asked.conversion_request_id),
        Api::FxQuotes,
        &dfsp,
        Some(&shared.names[requester as usize]),
        fx_quote_put_body(&offered),
    );
    send_answer(
        &shared,
        |shared| &shared.fx_quotes,
        counter,
        "fx quote put",
        request,
    );
    StatusCode::OK
}

/// The payer receives the FXP's `PUT /fxQuotes/{ID}`: its FX quote is done
/// if the offer carries the conversion's condition and converts at exactly
/// [`FX_RATE`].
pub(crate) async fn on_fx_quote_put(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let waiter = shared
        .ids
        .counter_of(&id)
        .zip(shared.dfsp(&dfsp))
        .and_then(|(counter, payer)| shared.fx_quotes.take_oldest(&counter, Some(payer)));
    let Some(waiter) = waiter else {
        shared.stats().late_answers += 1;
        return StatusCode::OK;
    };
    let completion = match fspiop::parse_fx_quote_put(&body) {
        Ok(offer) => {
            let terms = &offer.conversion_terms;
            let at_rate = terms
                .source
                .amount
                .and_then(|source| converted(&source.to_string()));
            if ledger::Condition::from_base64url(CONDITION) != offer.condition {
                Completion::Failed(
                    "wrong condition".into(),
                    format!("the FX quote {id} does not carry the FXP's condition"),
                )
            } else if terms.target.amount.is_none() || terms.target.amount != at_rate {
                Completion::Failed(
                    "wrong rate".into(),
                    format!(
                        "the FX quote {id} offers {:?} {} for {:?} {}, not the rate {FX_RATE}",
                        terms.target.amount.map(|a| a.to_string()),
                        terms.target.currency,
                        terms.source.amount.map(|a| a.to_string()),
                        terms.source.currency
                    ),
                )
            } else {
                Completion::Done(received)
            }
        }
        Err(error) => Completion::Failed(
            "invalid FX quote".into(),
            format!("{} {}", error.code.0, error.description),
        ),
    };
    let _ = waiter.done.send(completion);
    StatusCode::OK
}

/// `PUT /fxQuotes/{ID}/error`, to the payer: its FX quote failed.
pub(crate) async fn on_fx_quote_error(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    answered_with_error(&shared, &shared.fx_quotes, &dfsp, &id, &body)
}

#[derive(Deserialize)]
pub(crate) struct ForwardedConversion<'a> {
    #[serde(rename = "commitRequestId")]
    pub(crate) commit_request_id: &'a str,
}

/// The FXP receives a forwarded `POST /fxTransfers`: answers at once, then
/// accepts (`PUT /fxTransfers/{ID}`, RESERVED with the fulfilment).
pub(crate) async fn on_conversion(
    State(shared): State<Arc<Shared>>,
    Path(dfsp): Path<String>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let counter = serde_json::from_slice::<ForwardedConversion<'_>>(&body)
        .ok()
        .and_then(|conversion| shared.ids.counter_of(conversion.commit_request_id));
    let found = counter.and_then(|counter| {
        let conversions = shared.conversions();
        let conversion = conversions.get(&counter)?;
        Some((
            counter,
            conversion.payer,
            conversion.payee,
            conversion.measured,
            received.duration_since(conversion.post_sent),
        ))
    });
    let Some((counter, payer, fxp, measured, forward)) = found else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    if shared.names[fxp as usize] != dfsp {
        shared.fail_conversion(
            counter,
            "misrouted".into(),
            format!(
                "the conversion for {} reached {dfsp}",
                shared.names[fxp as usize]
            ),
        );
        return StatusCode::OK;
    }
    if measured {
        shared.stats().record(FX_FORWARD, forward);
    }
    spawn_answer(&shared, |shared| async move {
        accept_conversion(&shared, counter, payer, fxp, measured).await;
    });
    StatusCode::OK
}

/// The FXP's `PUT /fxTransfers/{ID}`: RESERVED with the fulfilment.
pub(crate) async fn accept_conversion(
    shared: &Shared,
    counter: u64,
    payer: u32,
    fxp: u32,
    measured: bool,
) {
    let request = fspiop_request(
        Method::PUT,
        &format!("{}/fxTransfers/{}", shared.api, shared.ids.format(counter)),
        Api::FxTransfers,
        &shared.names[fxp as usize],
        Some(&shared.names[payer as usize]),
        fx_transfer_accept_body(now_ms()),
    );
    let request = match request {
        Ok(request) => request,
        Err(error) => {
            shared.fail_conversion(counter, "request".into(), error);
            return;
        }
    };
    let sent = Instant::now();
    match shared.conversions().get_mut(&counter) {
        Some(conversion) => conversion.fulfil_sent = Some(sent),
        None => return,
    }
    match shared.send(request).await {
        Ok((status, _)) if status == StatusCode::OK => {
            if measured {
                shared.stats().record(FX_FULFIL, sent.elapsed());
            }
        }
        Ok((status, body)) => {
            shared.fail_conversion(
                counter,
                format!("HTTP {} (FXP's acceptance)", status.as_u16()),
                describe_error_body(&body),
            );
        }
        Err((key, description)) => {
            shared.fail_conversion(counter, format!("{key} (FXP's acceptance)"), description);
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct ConversionState<'a> {
    #[serde(rename = "conversionState", default)]
    pub(crate) conversion_state: Option<&'a str>,
}

fn conversion_state(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<ConversionState<'_>>(body)
        .ok()
        .and_then(|put| put.conversion_state.map(str::to_string))
}

/// The payer receives the FXP's acceptance, passed on by the hub: its
/// conversion is RESERVED and the transfer may follow.
pub(crate) async fn on_conversion_put(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let conversion = shared.ids.counter_of(&id).and_then(|counter| {
        let mut conversions = shared.conversions();
        match conversions.get(&counter) {
            Some(conversion) if shared.names[conversion.payer as usize] == dfsp => {
                conversions.remove(&counter)
            }
            _ => None,
        }
    });
    let Some(conversion) = conversion else {
        shared.stats().late_answers += 1;
        return StatusCode::OK;
    };
    let state = conversion_state(&body);
    if state.as_deref() != Some("RESERVED") {
        let _ = conversion.done.send(Completion::Failed(
            format!("state {}", state.as_deref().unwrap_or("missing")),
            format!("the payer was told {:?}", String::from_utf8_lossy(&body)),
        ));
        return StatusCode::OK;
    }
    if conversion.measured {
        if let Some(fulfil_sent) = conversion.fulfil_sent {
            shared
                .stats()
                .record(FX_NOTIFY, received.saturating_duration_since(fulfil_sent));
        }
    }
    let _ = conversion.done.send(Completion::Done(received));
    StatusCode::OK
}

/// The FXP receives the hub's `PATCH /fxTransfers/{ID}`: the conversion's
/// final state, COMMITTED with its transfer.
pub(crate) async fn on_conversion_patch(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let patch = shared.ids.counter_of(&id).and_then(|counter| {
        let mut patches = shared.patches();
        match patches.get(&counter) {
            Some(patch) if shared.names[patch.fxp as usize] == dfsp => patches.remove(&counter),
            _ => None,
        }
    });
    let Some(patch) = patch else {
        shared.stats().late_answers += 1;
        return StatusCode::OK;
    };
    let state = conversion_state(&body);
    if state.as_deref() != Some("COMMITTED") {
        let _ = patch.done.send(Completion::Failed(
            format!("state {}", state.as_deref().unwrap_or("missing")),
            format!("the FXP was told {:?}", String::from_utf8_lossy(&body)),
        ));
        return StatusCode::OK;
    }
    if patch.measured {
        if let Some(fulfil_sent) = patch.fulfil_sent {
            shared
                .stats()
                .record(FX_PATCH, received.saturating_duration_since(fulfil_sent));
        }
    }
    let _ = patch.done.send(Completion::Done(received));
    StatusCode::OK
}

/// `PUT /fxTransfers/{ID}/error`, to the payer or the FXP: the conversion
/// failed (refused, or expired).
pub(crate) async fn on_conversion_error(
    State(shared): State<Arc<Shared>>,
    Path((_dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let (key, description) = error_of(&body);
    let failed = shared
        .ids
        .counter_of(&id)
        .is_some_and(|counter| shared.fail_conversion(counter, key, description));
    if !failed {
        shared.stats().late_errors += 1;
    }
    StatusCode::OK
}

// ----- the participant registry

/// `PUT /participants/{requestId}`: a batch registration's answer.
pub(crate) async fn on_registered(
    State(shared): State<Arc<Shared>>,
    Path((_dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let waiting = shared
        .ids
        .counter_of(&id)
        .and_then(|counter| shared.registrations().remove(&counter));
    match waiting {
        Some(done) => {
            let _ = done.send(Ok(body));
        }
        None => shared.stats().unexpected += 1,
    }
    StatusCode::OK
}

/// `PUT /participants/{requestId}/error` (a batch registration failed), or
/// `PUT /participants/{Type}/{ID}` (a single registration, never asked).
pub(crate) async fn on_participants_put(
    State(shared): State<Arc<Shared>>,
    Path((_dfsp, id, more)): Path<(String, String, String)>,
    body: Bytes,
) -> StatusCode {
    let waiting = (more == "error")
        .then(|| shared.ids.counter_of(&id))
        .flatten()
        .and_then(|counter| shared.registrations().remove(&counter));
    match waiting {
        Some(done) => {
            let _ = done.send(Err(describe_error_body(&body)));
        }
        None => shared.stats().unexpected += 1,
    }
    StatusCode::OK
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dfsp::quote_post_body;
    use crate::ids::{party_identifier, IdGen, PartyRef};
    use crate::run::CURRENCY;

    #[test]
    fn fx_bodies_are_valid_fspiop_and_convert_exactly() {
        use crate::dfsp::{fx_quote_post_body, fx_transfer_accept_body, fx_transfer_post_body};
        use crate::run::TARGET_CURRENCY;
        let ids = IdGen::new(7);
        let (request_id, conversion_id, transfer_id) =
            (ids.format(1), ids.format(2), ids.format(3));
        let expiration = now_ms() + 60_000;
        let asked = FxTerms {
            conversion_id: &conversion_id,
            determining_transfer_id: &transfer_id,
            initiating_fsp: "b1d0",
            counter_party_fsp: "b1fxp0",
            source: ("42.5", CURRENCY),
            target: (None, TARGET_CURRENCY),
            expiration_ms: expiration,
        };
        let body = fx_quote_post_body(&request_id, &asked);
        let post = fspiop::parse_fx_quote_post(body.as_bytes()).expect("valid");
        assert_eq!(post.conversion_request_id.to_string(), request_id);
        let terms = &post.conversion_terms;
        assert_eq!(terms.conversion_id.to_string(), conversion_id);
        assert_eq!(
            terms.determining_transfer_id.map(|id| id.to_string()),
            Some(transfer_id.clone())
        );
        assert_eq!(terms.target.amount, None, "left for the FXP");

        // The FXP answers from the forwarded bytes, as on_fx_quote_post does.
        let forwarded: ForwardedFxQuote<'_> = serde_json::from_str(&body).expect("readable");
        let target = converted(forwarded.terms.source.amount).expect("an amount");
        assert_eq!(target.to_string(), "106250", "42.5 × 2500, exactly");
        let target = target.to_string();
        let offered = FxTerms {
            target: (Some(&target), forwarded.terms.target.currency),
            expiration_ms: fspiop::parse_date_time(forwarded.terms.expiration).unwrap(),
            ..asked
        };
        let answer = fx_quote_put_body(&offered);
        let put = fspiop::parse_fx_quote_put(answer.as_bytes()).expect("valid");
        assert!(ledger::Condition::from_base64url(CONDITION) == put.condition);
        assert_eq!(
            put.conversion_terms.target.amount.map(|a| a.to_string()),
            Some(target.clone())
        );
        assert!((put.conversion_terms.expiration_ms - expiration).abs() < 1_000);

        let body = fx_transfer_post_body(
            &conversion_id,
            &transfer_id,
            ("b1d0", "b1fxp0"),
            ("42.5", CURRENCY),
            (&target, TARGET_CURRENCY),
            expiration,
        );
        let prepare = fspiop::parse_fx_transfer_prepare(body.as_bytes()).expect("valid");
        prepare
            .check_payer_conversion()
            .expect("a payer conversion kasi takes");
        assert_eq!(prepare.target.amount.to_string(), target);
        let forwarded: ForwardedConversion<'_> = serde_json::from_str(&body).expect("readable");
        assert_eq!(forwarded.commit_request_id, conversion_id);

        let accepted = fx_transfer_accept_body(now_ms());
        let fulfil = fspiop::parse_fx_transfer_fulfil(accepted.as_bytes()).expect("valid");
        assert_eq!(fulfil.conversion_state, fspiop::WireState::Reserved);
        assert!(fulfil.fulfilment.expect("a fulfilment").condition() == prepare.condition);
        assert_eq!(
            conversion_state(accepted.as_bytes()).as_deref(),
            Some("RESERVED")
        );
        let patch = fspiop::fx_transfer_patch_body(fspiop::WireState::Committed, Some(now_ms()));
        assert_eq!(conversion_state(&patch).as_deref(), Some("COMMITTED"));

        assert_eq!(
            converted("0.0001").map(|a| a.to_string()).as_deref(),
            Some("0.25")
        );
        assert_eq!(converted("0"), None);
        assert_eq!(converted("ten"), None);
    }

    #[test]
    fn quote_bodies_are_valid_fspiop() {
        let ids = IdGen::new(5);
        let (quote_id, transaction_id) = (ids.format(1), ids.format(2));
        let payer_party = party_identifier(1, PartyRef { dfsp: 0, index: 3 });
        let payee_party = party_identifier(1, PartyRef { dfsp: 1, index: 4 });
        let body = quote_post_body(
            &quote_id,
            &transaction_id,
            ("b1d0", &payer_party),
            ("b1d1", &payee_party),
            ("42", CURRENCY),
        );
        let post = fspiop::parse_quote_post(body.as_bytes()).expect("valid");
        assert_eq!(post.quote_id.to_string(), quote_id);
        assert_eq!(post.transaction_id.to_string(), transaction_id);
        assert_eq!(
            post.payer_fsp().map(|f| f.to_string()).as_deref(),
            Some("b1d0")
        );
        assert_eq!(
            post.payee_fsp().map(|f| f.to_string()).as_deref(),
            Some("b1d1")
        );
        assert_eq!(post.payer.key.identifier, payer_party);
        assert_eq!(post.payee.key.identifier, payee_party);
        assert_eq!(post.amount_type, fspiop::AmountType::Send);

        // The payee answers from the forwarded bytes, as on_quote_post does.
        let forwarded: ForwardedQuote<'_> = serde_json::from_str(&body).expect("readable");
        assert_eq!(forwarded.quote_id, quote_id);
        let expiration = now_ms() + 60_000;
        let answer = quote_put_body(
            forwarded.amount.amount,
            forwarded.amount.currency,
            expiration,
        );
        let put = fspiop::parse_quote_put(answer.as_bytes()).expect("valid");
        assert_eq!(put.transfer_amount, post.amount);
        assert!(ledger::Condition::from_base64url(CONDITION) == Some(put.condition));
        assert!((put.expiration_ms - expiration).abs() < 1_000, "{answer}");
    }
}
