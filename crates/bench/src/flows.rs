//! What one iteration of each `--flow` does: the legs it times, the
//! requests a payer sends and the callbacks it waits for.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::ValueEnum;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use tokio::sync::oneshot;

use crate::dfsp::{
    describe_error_body, fspiop_request, fx_quote_post_body, fx_transfer_post_body,
    quote_post_body, Api, FxTerms, CONDITION, ILP_PACKET,
};
use crate::ids::{now_ms, PartyRef};
use crate::run::{converted, Shared, CURRENCY, TARGET_CURRENCY};
use crate::waiters::{Completion, Failure, Patch, Pending, Waiter, Waiters};

/// A stage (lookup, quote, transfer) not ended this long after its request
/// counts as timed out.
pub(crate) const STAGE_TIMEOUT: Duration = Duration::from_secs(30);
/// The legs timed, in the order they happen.
pub(crate) const LEGS: [&str; 14] = [
    "lookup",
    "fx_quote",
    "quote",
    "fx_prepare",
    "fx_forward",
    "fx_fulfil",
    "fx_notify",
    "prepare",
    "forward",
    "fulfil",
    "notify",
    "fx_patch",
    "transaction_request",
    "e2e",
];
/// `GET /parties/...` sent → the payer receives the payee's `PUT /parties/...`.
pub(crate) const LOOKUP: usize = 0;
/// `POST /fxQuotes` sent → the payer receives the FXP's `PUT /fxQuotes/{ID}`.
pub(crate) const FX_QUOTE: usize = 1;
/// `POST /quotes` sent → the payer receives the payee's `PUT /quotes/{ID}`.
pub(crate) const QUOTE: usize = 2;
/// `POST /fxTransfers` sent → its 202 received.
pub(crate) const FX_PREPARE: usize = 3;
/// `POST /fxTransfers` sent → the FXP receives the forwarded `POST`.
pub(crate) const FX_FORWARD: usize = 4;
/// The FXP's `PUT /fxTransfers/{ID}` (RESERVED, with the fulfilment) sent
/// → its 200 received.
pub(crate) const FX_FULFIL: usize = 5;
/// The FXP's `PUT /fxTransfers/{ID}` sent → the payer receives it.
pub(crate) const FX_NOTIFY: usize = 6;
/// `POST /transfers` sent → its 202 received.
pub(crate) const PREPARE: usize = 7;
/// `POST /transfers` sent → the payee receives the forwarded `POST`.
pub(crate) const FORWARD: usize = 8;
/// The payee's `PUT /transfers/{ID}` sent → its 200 received.
pub(crate) const FULFIL: usize = 9;
/// The payee's `PUT` sent → the payer receives the commit notification.
pub(crate) const NOTIFY: usize = 10;
/// The payee's `PUT /transfers/{ID}` sent → the FXP receives the hub's
/// `PATCH /fxTransfers/{ID}` (COMMITTED).
pub(crate) const FX_PATCH: usize = 11;
/// The payee's `POST /transactionRequests` sent → the payee receives the
/// payer's `PUT /transactionRequests/{ID}`.
pub(crate) const TRANSACTION_REQUEST: usize = 12;
/// The flow's first request sent → the payer receives its last callback
/// (for `fx`, the later of the payer's commit notification and the FXP's
/// `PATCH`).
pub(crate) const E2E: usize = 13;

/// What one iteration of a virtual user does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Flow {
    /// `POST /transfers` → commit notification.
    Transfer,
    /// `GET /parties/MSISDN/{ID}` → `PUT /parties/MSISDN/{ID}`.
    Lookup,
    /// `POST /quotes` → `PUT /quotes/{ID}`.
    Quote,
    /// Quote, then transfer (the payer knows the payee's DFSP).
    #[value(name = "quote+transfer")]
    QuoteTransfer,
    /// Lookup, then quote, then transfer.
    #[value(name = "discovery+quote+transfer")]
    DiscoveryQuoteTransfer,
    /// `POST /transactionRequests` (payee → payer) → `PUT
    /// /transactionRequests/{ID}`.
    #[value(name = "transaction-request")]
    TransactionRequest,
    /// A payment across currencies (FSPIOP v2.0 payer conversion): FX
    /// quote, quote in the target currency, conversion, then the transfer
    /// that depends on it.
    Fx,
}

impl Flow {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Flow::Transfer => "transfer",
            Flow::Lookup => "lookup",
            Flow::Quote => "quote",
            Flow::QuoteTransfer => "quote+transfer",
            Flow::DiscoveryQuoteTransfer => "discovery+quote+transfer",
            Flow::TransactionRequest => "transaction-request",
            Flow::Fx => "fx",
        }
    }

    /// Pays across currencies through an FXP.
    pub(crate) fn converts(self) -> bool {
        self == Flow::Fx
    }

    pub(crate) fn looks_up(self) -> bool {
        matches!(self, Flow::Lookup | Flow::DiscoveryQuoteTransfer)
    }

    pub(crate) fn quotes(self) -> bool {
        matches!(
            self,
            Flow::Quote | Flow::QuoteTransfer | Flow::DiscoveryQuoteTransfer | Flow::Fx
        )
    }

    pub(crate) fn transfers(self) -> bool {
        matches!(
            self,
            Flow::Transfer | Flow::QuoteTransfer | Flow::DiscoveryQuoteTransfer | Flow::Fx
        )
    }

    pub(crate) fn requests_to_pay(self) -> bool {
        self == Flow::TransactionRequest
    }

    /// Requests of different resources one flow makes in turn.
    pub(crate) fn stage_count(self) -> usize {
        // An FX quote and a conversion.
        2 * usize::from(self.converts())
            + usize::from(self.looks_up())
            + usize::from(self.quotes())
            + usize::from(self.transfers())
            + usize::from(self.requests_to_pay())
    }

    /// Needs the discovery endpoints and registered parties.
    pub(crate) fn discovers(self) -> bool {
        self != Flow::Transfer
    }

    /// The legs this flow times, in the order they happen.
    pub(crate) fn legs(self) -> Vec<usize> {
        let mut legs = Vec::new();
        if self.looks_up() {
            legs.push(LOOKUP);
        }
        if self.converts() {
            legs.push(FX_QUOTE);
        }
        if self.quotes() {
            legs.push(QUOTE);
        }
        if self.converts() {
            legs.extend([FX_PREPARE, FX_FORWARD, FX_FULFIL, FX_NOTIFY]);
        }
        if self.transfers() {
            legs.extend([PREPARE, FORWARD, FULFIL, NOTIFY]);
        }
        if self.converts() {
            legs.push(FX_PATCH);
        }
        if self.requests_to_pay() {
            legs.push(TRANSACTION_REQUEST);
        }
        legs.push(E2E);
        legs
    }

    /// What the throughput counts.
    pub(crate) fn unit(self) -> &'static str {
        match self {
            Flow::Transfer => "transfers",
            Flow::Lookup => "lookups",
            Flow::Quote => "quotes",
            Flow::QuoteTransfer | Flow::DiscoveryQuoteTransfer => "flows",
            Flow::TransactionRequest => "transaction requests",
            Flow::Fx => "FX payments",
        }
    }
}

/// A `POST /transactionRequests` body: `payee_party` of `payee_fsp` asks
/// `payer_party` of `payer_fsp` to pay `amount`.
pub(crate) fn transaction_request_body(
    request_id: &str,
    (payee_fsp, payee_party): (&str, &str),
    (payer_fsp, payer_party): (&str, &str),
    amount: &str,
) -> String {
    format!(
        concat!(
            r#"{{"transactionRequestId":"{}","#,
            r#""payee":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"{}","fspId":"{}"}}}},"#,
            r#""payer":{{"partyIdType":"MSISDN","partyIdentifier":"{}","fspId":"{}"}},"#,
            r#""amount":{{"currency":"{}","amount":"{}"}},"#,
            r#""transactionType":{{"scenario":"PAYMENT","initiator":"PAYEE","initiatorType":"BUSINESS"}}}}"#
        ),
        request_id, payee_party, payee_fsp, payer_party, payer_fsp, CURRENCY, amount
    )
}

/// A `POST /transfers` body carrying `ilp_packet`.
pub(crate) fn prepare_body(
    transfer_id: &str,
    payer: &str,
    payee: &str,
    (amount, currency): (&str, &str),
    ilp_packet: &str,
) -> String {
    format!(
        concat!(
            r#"{{"transferId":"{}","payerFsp":"{}","payeeFsp":"{}","#,
            r#""amount":{{"amount":"{}","currency":"{}"}},"#,
            r#""ilpPacket":"{}","condition":"{}","expiration":"{}"}}"#
        ),
        transfer_id,
        payer,
        payee,
        amount,
        currency,
        ilp_packet,
        CONDITION,
        fspiop::format_date_time(now_ms() + 60_000),
    )
}

/// One iteration of a virtual user (or one arrival of the open loop): its
/// flow, from its first request to its last callback; records how it
/// ended. Its end-to-end latency counts from `started`: now for a virtual
/// user, the scheduled start for an arrival.
pub(crate) async fn iteration(
    shared: &Shared,
    started: Instant,
    payer_party: PartyRef,
    payee: u32,
) {
    let measured = shared.measured(started);
    {
        let mut stats = shared.stats();
        stats.started += 1;
        stats.started_in_window += u64::from(measured);
    }
    let outcome = run_flow(shared, payer_party, payee, measured).await;
    let window = shared.window();
    shared
        .stats()
        .flow_ended(started, measured, window, outcome);
}

/// The stages of the flow in turn; the instant the payer received the last
/// stage's callback, or the stage that failed and how.
pub(crate) async fn run_flow(
    shared: &Shared,
    payer_party: PartyRef,
    payee: u32,
    measured: bool,
) -> Result<Instant, (&'static str, Failure)> {
    let flow = shared.flow;
    let payer = payer_party.dfsp;
    let transaction = shared.ids.next();
    let amount = (1 + transaction % 100).to_string();
    let payee_party = flow.discovers().then(|| shared.next_party_of(payee));
    if let (true, Some(party)) = (flow.converts(), payee_party) {
        return fx_payment(shared, payer_party, party, transaction, &amount, measured).await;
    }
    let mut ended = None;
    if let (true, Some(party)) = (flow.looks_up(), payee_party) {
        ended = Some(
            lookup(shared, payer, party, measured)
                .await
                .map_err(|failure| ("lookup", failure))?,
        );
    }
    if let (true, Some(party)) = (flow.quotes(), payee_party) {
        ended = Some(
            quote(
                shared,
                payer_party,
                party,
                transaction,
                (&amount, CURRENCY),
                measured,
            )
            .await
            .map_err(|failure| ("quote", failure))?,
        );
    }
    if let (true, Some(party)) = (flow.requests_to_pay(), payee_party) {
        ended = Some(
            transaction_request(shared, party, payer_party, &amount, measured)
                .await
                .map_err(|failure| ("transaction request", failure))?,
        );
    }
    if flow.transfers() {
        ended = Some(
            transfer(
                shared,
                (payer, payee),
                transaction,
                (&amount, CURRENCY),
                None,
                measured,
            )
            .await
            .map_err(|failure| ("transfer", failure))?,
        );
    }
    Ok(ended.expect("every flow has a stage"))
}

/// Sends a stage's request and waits for its end: the payer's callback
/// (`outcome`), an error, or the deadline. `forget` removes the stage's
/// waiter and says whether it was still there (if not, a handler took it
/// and sent the outcome); `on_accepted` runs when the request is accepted
/// (202).
pub(crate) async fn await_stage(
    shared: &Shared,
    request: Result<Request<Full<Bytes>>, String>,
    deadline: tokio::time::Instant,
    mut outcome: oneshot::Receiver<Completion>,
    forget: impl Fn() -> bool,
    on_accepted: impl FnOnce(),
) -> Result<Instant, Failure> {
    let answered = match request {
        Ok(request) => tokio::time::timeout_at(deadline, shared.send(request)).await,
        Err(error) => Ok(Err(("request".into(), error))),
    };
    let result = match answered {
        Err(_) => None,
        Ok(Err((key, description))) => Some(Completion::Failed(key, description)),
        Ok(Ok((status, _))) if status == StatusCode::ACCEPTED => {
            on_accepted();
            match tokio::time::timeout_at(deadline, &mut outcome).await {
                Ok(Ok(completion)) => return completion.into_result(),
                Ok(Err(_)) => Some(Completion::Failed(
                    "lost".into(),
                    "the stage was dropped without an outcome".into(),
                )),
                Err(_) => None,
            }
        }
        Ok(Ok((status, body))) => Some(Completion::Failed(
            format!("HTTP {}", status.as_u16()),
            describe_error_body(&body),
        )),
    };
    // Whoever removes the waiter decides the outcome: a handler that got
    // there first has sent it.
    match result {
        Some(completion) => {
            forget();
            completion.into_result()
        }
        None if forget() => Err(Failure::Timeout),
        None => match outcome.try_recv() {
            Ok(completion) => completion.into_result(),
            Err(_) => Err(Failure::Timeout),
        },
    }
}

/// `GET /parties/MSISDN/{ID}` from `payer`, until the payer receives the
/// holder's `PUT /parties/MSISDN/{ID}`.
pub(crate) async fn lookup(
    shared: &Shared,
    payer: u32,
    party: PartyRef,
    measured: bool,
) -> Result<Instant, Failure> {
    let request = fspiop_request(
        Method::GET,
        &format!("{}/parties/MSISDN/{}", shared.api, shared.party_id(party)),
        Api::Parties,
        &shared.names[payer as usize],
        None,
        String::new(),
    );
    let (done, outcome) = oneshot::channel();
    let ticket = shared.tickets.fetch_add(1, Ordering::Relaxed);
    let key = (payer, party);
    let sent = Instant::now();
    shared.lookups.insert(
        key,
        Waiter {
            ticket,
            payer,
            payee: party.dfsp,
            done,
        },
    );
    let deadline = tokio::time::Instant::from_std(sent + STAGE_TIMEOUT);
    let ended = await_stage(
        shared,
        request,
        deadline,
        outcome,
        || shared.lookups.take(&key, ticket).is_some(),
        || {},
    )
    .await?;
    if measured {
        shared
            .stats()
            .record(LOOKUP, ended.saturating_duration_since(sent));
    }
    Ok(ended)
}

/// `POST /quotes` from `payer_party`'s DFSP to `payee_party`'s, until the
/// payer receives the payee's `PUT /quotes/{ID}`. The transaction id is
/// `transaction`'s, as the transfer's will be.
pub(crate) async fn quote(
    shared: &Shared,
    payer_party: PartyRef,
    payee_party: PartyRef,
    transaction: u64,
    amount: (&str, &str),
    measured: bool,
) -> Result<Instant, Failure> {
    let (payer, payee) = (payer_party.dfsp, payee_party.dfsp);
    let counter = shared.ids.next();
    let payer_name = &shared.names[payer as usize];
    let payee_name = &shared.names[payee as usize];
    let body = quote_post_body(
        &shared.ids.format(counter),
        &shared.ids.format(transaction),
        (payer_name, &shared.party_id(payer_party)),
        (payee_name, &shared.party_id(payee_party)),
        amount,
    );
    let request = fspiop_request(
        Method::POST,
        &format!("{}/quotes", shared.api),
        Api::Quotes,
        payer_name,
        Some(payee_name),
        body,
    );
    let asked = Asked {
        waiters: &shared.quotes,
        counter,
        asker: payer,
        answerer: payee,
        leg: QUOTE,
    };
    ask(shared, request, asked, measured).await
}

/// `POST /transactionRequests` from `payee_party`'s DFSP to
/// `payer_party`'s, until the payee receives the payer's
/// `PUT /transactionRequests/{ID}`.
pub(crate) async fn transaction_request(
    shared: &Shared,
    payee_party: PartyRef,
    payer_party: PartyRef,
    amount: &str,
    measured: bool,
) -> Result<Instant, Failure> {
    let (payee, payer) = (payee_party.dfsp, payer_party.dfsp);
    let counter = shared.ids.next();
    let payee_name = &shared.names[payee as usize];
    let payer_name = &shared.names[payer as usize];
    let body = transaction_request_body(
        &shared.ids.format(counter),
        (payee_name, &shared.party_id(payee_party)),
        (payer_name, &shared.party_id(payer_party)),
        amount,
    );
    let request = fspiop_request(
        Method::POST,
        &format!("{}/transactionRequests", shared.api),
        Api::TransactionRequests,
        payee_name,
        Some(payer_name),
        body,
    );
    let asked = Asked {
        waiters: &shared.transaction_requests,
        counter,
        asker: payee,
        answerer: payer,
        leg: TRANSACTION_REQUEST,
    };
    ask(shared, request, asked, measured).await
}

/// A request one DFSP makes of another, answered by a `PUT` to the asker.
pub(crate) struct Asked<'s> {
    /// Where the answer's handler finds the asker, by `counter` (the
    /// request id's).
    pub(crate) waiters: &'s Waiters<u64>,
    pub(crate) counter: u64,
    pub(crate) asker: u32,
    pub(crate) answerer: u32,
    /// The leg that times it.
    pub(crate) leg: usize,
}

/// Sends `request` and waits for its answer; records the leg if measured.
pub(crate) async fn ask(
    shared: &Shared,
    request: Result<Request<Full<Bytes>>, String>,
    asked: Asked<'_>,
    measured: bool,
) -> Result<Instant, Failure> {
    let Asked {
        waiters,
        counter,
        asker,
        answerer,
        leg,
    } = asked;
    let (done, outcome) = oneshot::channel();
    let ticket = shared.tickets.fetch_add(1, Ordering::Relaxed);
    let sent = Instant::now();
    waiters.insert(
        counter,
        Waiter {
            ticket,
            payer: asker,
            payee: answerer,
            done,
        },
    );
    let deadline = tokio::time::Instant::from_std(sent + STAGE_TIMEOUT);
    let ended = await_stage(
        shared,
        request,
        deadline,
        outcome,
        || waiters.take(&counter, ticket).is_some(),
        || {},
    )
    .await?;
    if measured {
        shared
            .stats()
            .record(leg, ended.saturating_duration_since(sent));
    }
    Ok(ended)
}

/// `POST /transfers` (id: `counter`'s) of `amount` from `payer` to
/// `payee` until the payer's commit notification; with `conversion`, the
/// transfer that conversion depends on.
pub(crate) async fn transfer(
    shared: &Shared,
    (payer, payee): (u32, u32),
    counter: u64,
    amount: (&str, &str),
    conversion: Option<u64>,
    measured: bool,
) -> Result<Instant, Failure> {
    let payer_name = &shared.names[payer as usize];
    let payee_name = &shared.names[payee as usize];
    let transfer_id = shared.ids.format(counter);
    let packet = match shared.ilp_customers {
        0 => std::borrow::Cow::Borrowed(ILP_PACKET),
        customers => {
            // Two customers drawn from the counter, spread over the range.
            let customer = |salt: u64| {
                let drawn = crate::ids::splitmix64(counter ^ salt) % u64::from(customers);
                format!("2557{drawn:08}")
            };
            std::borrow::Cow::Owned(crate::dfsp::ilp_packet_naming(
                &transfer_id,
                (payer_name, &customer(0x70a7)),
                (payee_name, &customer(0x70a8)),
                amount,
            ))
        }
    };
    let body = prepare_body(&transfer_id, payer_name, payee_name, amount, &packet);
    let request = fspiop_request(
        Method::POST,
        &format!("{}/transfers", shared.api),
        Api::Transfers,
        payer_name,
        Some(payee_name),
        body,
    );
    let (done, outcome) = oneshot::channel();
    let sent = Instant::now();
    shared.pending().insert(
        counter,
        Pending {
            payer,
            payee,
            post_sent: sent,
            fulfil_sent: None,
            measured,
            conversion,
            done,
        },
    );
    let deadline = tokio::time::Instant::from_std(sent + STAGE_TIMEOUT);
    await_stage(
        shared,
        request,
        deadline,
        outcome,
        || shared.pending().remove(&counter).is_some(),
        || {
            if measured {
                shared.stats().record(PREPARE, sent.elapsed());
            }
        },
    )
    .await
}

// ----- foreign exchange

/// One payment across currencies (FSPIOP v2.0 payer conversion): the
/// payer asks its FXP to convert `source_amount` of [`CURRENCY`] (`POST
/// /fxQuotes`), quotes the payee for what that buys in
/// [`TARGET_CURRENCY`] (`POST /quotes`), has the FXP convert (`POST
/// /fxTransfers`, its `determiningTransferId` the transfer's id), then
/// sends the transfer that depends on it (`POST /transfers` in the target
/// currency, paid from the FXP's position). Done when the payer has its
/// commit notification and the FXP the hub's `PATCH` COMMITTED: the later
/// of the two.
pub(crate) async fn fx_payment(
    shared: &Shared,
    payer_party: PartyRef,
    payee_party: PartyRef,
    transaction: u64,
    source_amount: &str,
    measured: bool,
) -> Result<Instant, (&'static str, Failure)> {
    let (payer, payee) = (payer_party.dfsp, payee_party.dfsp);
    let fxp = shared.fxp_for(payer);
    let conversion = shared.ids.next();
    let target_amount = converted(source_amount)
        .ok_or_else(|| {
            let description = format!("{source_amount} {CURRENCY} converts to no amount");
            ("fx quote", Failure::Error("amount".into(), description))
        })?
        .to_string();
    fx_quote(
        shared,
        (payer, fxp),
        conversion,
        transaction,
        source_amount,
        measured,
    )
    .await
    .map_err(|failure| ("fx quote", failure))?;
    quote(
        shared,
        payer_party,
        payee_party,
        transaction,
        (&target_amount, TARGET_CURRENCY),
        measured,
    )
    .await
    .map_err(|failure| ("quote", failure))?;
    convert(
        shared,
        (payer, fxp),
        conversion,
        transaction,
        (source_amount, &target_amount),
        measured,
    )
    .await
    .map_err(|failure| ("conversion", failure))?;
    // The FXP may hear of the commit before the payer does: it waits from
    // before the transfer is sent.
    let (done, mut patched) = oneshot::channel();
    shared.patches().insert(
        conversion,
        Patch {
            fxp,
            fulfil_sent: None,
            measured,
            done,
        },
    );
    let notified = transfer(
        shared,
        (payer, payee),
        transaction,
        (&target_amount, TARGET_CURRENCY),
        Some(conversion),
        measured,
    )
    .await;
    let notified = match notified {
        Ok(at) => at,
        Err(failure) => {
            shared.patches().remove(&conversion);
            return Err(("transfer", failure));
        }
    };
    let deadline = tokio::time::Instant::now() + STAGE_TIMEOUT;
    let patched = match tokio::time::timeout_at(deadline, &mut patched).await {
        Ok(Ok(completion)) => completion.into_result(),
        Ok(Err(_)) => Err(Failure::Error(
            "lost".into(),
            "the FXP's wait for the PATCH was dropped without an outcome".into(),
        )),
        // Whoever removes the wait decides: a handler that got there
        // first has sent the outcome.
        Err(_) if shared.patches().remove(&conversion).is_some() => Err(Failure::Timeout),
        Err(_) => match patched.try_recv() {
            Ok(completion) => completion.into_result(),
            Err(_) => Err(Failure::Timeout),
        },
    }
    .map_err(|failure| ("fx patch", failure))?;
    Ok(notified.max(patched))
}

/// `POST /fxQuotes` from `payer` to `fxp`: the terms of converting
/// `source_amount` for transfer `transaction`, under conversion id
/// `conversion`; until the payer receives the FXP's `PUT /fxQuotes/{ID}`
/// (checked there: it must give exactly [`FX_RATE`]).
pub(crate) async fn fx_quote(
    shared: &Shared,
    (payer, fxp): (u32, u32),
    conversion: u64,
    transaction: u64,
    source_amount: &str,
    measured: bool,
) -> Result<Instant, Failure> {
    let counter = shared.ids.next();
    let payer_name = &shared.names[payer as usize];
    let fxp_name = &shared.names[fxp as usize];
    let terms = FxTerms {
        conversion_id: &shared.ids.format(conversion),
        determining_transfer_id: &shared.ids.format(transaction),
        initiating_fsp: payer_name,
        counter_party_fsp: fxp_name,
        source: (source_amount, CURRENCY),
        target: (None, TARGET_CURRENCY),
        expiration_ms: now_ms() + 60_000,
    };
    let body = fx_quote_post_body(&shared.ids.format(counter), &terms);
    let request = fspiop_request(
        Method::POST,
        &format!("{}/fxQuotes", shared.api),
        Api::FxQuotes,
        payer_name,
        Some(fxp_name),
        body,
    );
    let asked = Asked {
        waiters: &shared.fx_quotes,
        counter,
        asker: payer,
        answerer: fxp,
        leg: FX_QUOTE,
    };
    ask(shared, request, asked, measured).await
}

/// `POST /fxTransfers` (id: `conversion`'s) from `payer` to `fxp`,
/// converting `amounts` (source, target) for transfer `transaction`;
/// until the payer receives the FXP's acceptance (`PUT /fxTransfers/{ID}`,
/// RESERVED with its fulfilment).
pub(crate) async fn convert(
    shared: &Shared,
    (payer, fxp): (u32, u32),
    conversion: u64,
    transaction: u64,
    (source_amount, target_amount): (&str, &str),
    measured: bool,
) -> Result<Instant, Failure> {
    let payer_name = &shared.names[payer as usize];
    let fxp_name = &shared.names[fxp as usize];
    let body = fx_transfer_post_body(
        &shared.ids.format(conversion),
        &shared.ids.format(transaction),
        (payer_name, fxp_name),
        (source_amount, CURRENCY),
        (target_amount, TARGET_CURRENCY),
        now_ms() + 60_000,
    );
    let request = fspiop_request(
        Method::POST,
        &format!("{}/fxTransfers", shared.api),
        Api::FxTransfers,
        payer_name,
        Some(fxp_name),
        body,
    );
    let (done, outcome) = oneshot::channel();
    let sent = Instant::now();
    shared.conversions().insert(
        conversion,
        Pending {
            payer,
            payee: fxp,
            post_sent: sent,
            fulfil_sent: None,
            measured,
            conversion: None,
            done,
        },
    );
    let deadline = tokio::time::Instant::from_std(sent + STAGE_TIMEOUT);
    await_stage(
        shared,
        request,
        deadline,
        outcome,
        || shared.conversions().remove(&conversion).is_some(),
        || {
            if measured {
                shared.stats().record(FX_PREPARE, sent.elapsed());
            }
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dfsp::FULFILMENT;
    use crate::ids::IdGen;

    #[test]
    fn a_prepare_body_is_valid_fspiop() {
        let ids = IdGen::new(3);
        let id = ids.format(9);
        let body = prepare_body(&id, "b1d0", "b1d1", ("10", CURRENCY), ILP_PACKET);
        let parsed = fspiop::parse_transfer_prepare(body.as_bytes()).expect("valid");
        assert_eq!(parsed.transfer_id.to_string(), id);
        let fulfil = format!(
            r#"{{"fulfilment":"{FULFILMENT}","completedTimestamp":"{}","transferState":"COMMITTED"}}"#,
            fspiop::format_date_time(now_ms())
        );
        fspiop::parse_transfer_fulfil(fulfil.as_bytes()).expect("valid");
    }
}
