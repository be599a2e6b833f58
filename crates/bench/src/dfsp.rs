//! What a simulated DFSP does on the wire, shared by `kasi bench` (many
//! DFSPs, for load) and `kasi sim` (a few, for people): onboarding through
//! the admin API, the FSPIOP request and callback bodies, the headers a
//! DFSP sends, the fixed ILP condition and its fulfilment, and reading
//! FSPIOP errors.

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use serde::Deserialize;
use serde_json::{json, Value};

/// Net debit cap and initial liquidity of every DFSP: nothing the run can
/// exhaust.
pub const LARGE_AMOUNT: &str = "1000000000000000";
/// A fixed ILP condition and the fulfilment that satisfies it
/// (SHA-256(fulfilment) = condition).
pub const CONDITION: &str = "GRzLaTP7DJ9t4P-a_BA0WA9wzzlsugf00-Tn6kESAfM";
pub const FULFILMENT: &str = "UNlJ98hZTY_dsw0cAqw4i_UN3v4utt7CZFB4yfLbVFA";
/// Any base64url string is a valid `ilpPacket`; this is the size of a real one.
pub const ILP_PACKET: &str = "AYIBgQAAAAAAAASwNGxldmVsb25lLmRmc3AxLm1lci45T2RTOF81MDdqUUZERmZlakgyOVc4bXFmNEpLMHlGTFGCAUBQU0svMS4wCk5vbmNlOiB1SXlweUYzY3pYSXBFdzVVc05TYWh3CkVuY3J5cHRpb246IG5vbmUKUGF5bWVudC1JZDogMTMyMzZhM2ItOGZhOC00MTYzLTg0NDctNGMzZWQzZGE5OGE3CgpDb250ZW50LUxlbmd0aDogMTM1CkNvbnRlbnQtVHlwZTogYXBwbGljYXRpb24vanNvbgpTZW5kZXItSWRlbnRpZmllcjogOTI4MDYzOTEKCiJ7XCJmZWVcIjowLFwidHJhbnNmZXJDb2RlXCI6XCJpbnZvaWNlXCIsXCJkZWJpdE5hbWVcIjpcImFsaWNlIGNvb3BlclwiLFwiY3JlZGl0TmFtZVwiOlwibWVyIGNoYW50XCIsXCJkZWJpdElkZW50aWZpZXJcIjpcIjkyODA2MzkxXCJ9IgA";

/// An `ilpPacket` as Mojaloop's SDK builds it when answering a quote
/// (`fspiop::ilp`'s documentation): an ILP v4 prepare (type 12) whose data
/// is base64url of the transaction, naming the payer's and payee's MSISDNs
/// at their DFSPs; the whole base64url. The hub reads the parties out of
/// it and files the transfer by them.
pub fn ilp_packet_naming(
    transaction_id: &str,
    (payer_fsp, payer_msisdn): (&str, &str),
    (payee_fsp, payee_msisdn): (&str, &str),
    (amount, currency): (&str, &str),
) -> String {
    use base64::Engine as _;
    let base64url = &base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let transaction = format!(
        concat!(
            r#"{{"amount":{{"amount":"{}","currency":"{}"}},"#,
            r#""payee":{{"partyIdInfo":{{"fspId":"{}","partyIdType":"MSISDN","partyIdentifier":"{}"}}}},"#,
            r#""payer":{{"partyIdInfo":{{"fspId":"{}","partyIdType":"MSISDN","partyIdentifier":"{}"}}}},"#,
            r#""quoteId":"{}","transactionId":"{}","#,
            r#""transactionType":{{"initiator":"PAYER","initiatorType":"CONSUMER","scenario":"TRANSFER"}}}}"#
        ),
        amount,
        currency,
        payee_fsp,
        payee_msisdn,
        payer_fsp,
        payer_msisdn,
        transaction_id,
        transaction_id
    );
    let data = base64url.encode(transaction);
    let destination = b"g.mojaloop";
    let condition = base64url.decode(CONDITION).expect("CONDITION is base64url");
    let mut fields = Vec::with_capacity(80 + data.len());
    fields.extend_from_slice(&0u64.to_be_bytes());
    fields.extend_from_slice(b"20261129120000000");
    fields.extend_from_slice(&condition);
    push_oer_octets(&mut fields, destination);
    push_oer_octets(&mut fields, data.as_bytes());
    let mut packet = Vec::with_capacity(fields.len() + 4);
    packet.push(12);
    push_oer_octets(&mut packet, &fields);
    base64url.encode(packet)
}

/// An OER variable-length octet string: the length (one byte below 128,
/// else `0x80 | n` and `n` big-endian bytes, the shortest), the octets.
fn push_oer_octets(out: &mut Vec<u8>, octets: &[u8]) {
    let length = octets.len();
    if length < 128 {
        out.push(length as u8);
    } else {
        let bytes = length.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(octets);
}

/// The FSPIOP resources the driver speaks, with the versions a DFSP of
/// Mojaloop's SDK sends (MOJALOOP-REFERENCE.md §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Transfers,
    Quotes,
    Parties,
    Participants,
    TransactionRequests,
    /// FSPIOP v2.0 foreign exchange: these resources exist at 2.0 only.
    FxQuotes,
    FxTransfers,
    Services,
}

impl Api {
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Api::Transfers => "application/vnd.interoperability.transfers+json;version=1.1",
            Api::Quotes => "application/vnd.interoperability.quotes+json;version=1.1",
            Api::Parties => "application/vnd.interoperability.parties+json;version=1.0",
            Api::Participants => "application/vnd.interoperability.participants+json;version=1.0",
            Api::TransactionRequests => {
                "application/vnd.interoperability.transactionRequests+json;version=1.1"
            }
            Api::FxQuotes => "application/vnd.interoperability.fxQuotes+json;version=2.0",
            Api::FxTransfers => "application/vnd.interoperability.fxTransfers+json;version=2.0",
            Api::Services => "application/vnd.interoperability.services+json;version=2.0",
        }
    }

    pub(crate) fn accept(self) -> &'static str {
        match self {
            Api::Transfers => "application/vnd.interoperability.transfers+json;version=1",
            Api::Quotes => "application/vnd.interoperability.quotes+json;version=1",
            Api::Parties => "application/vnd.interoperability.parties+json;version=1",
            Api::Participants => "application/vnd.interoperability.participants+json;version=1",
            Api::TransactionRequests => {
                "application/vnd.interoperability.transactionRequests+json;version=1"
            }
            Api::FxQuotes => "application/vnd.interoperability.fxQuotes+json;version=2",
            Api::FxTransfers => "application/vnd.interoperability.fxTransfers+json;version=2",
            Api::Services => "application/vnd.interoperability.services+json;version=2",
        }
    }
}

/// Batch `POST /participants`: `identifiers` registered to `fsp`.
pub fn participants_batch_body(
    request_id: &str,
    fsp: &str,
    identifiers: &[String],
    currency: &str,
) -> String {
    let list: Vec<Value> = identifiers
        .iter()
        .map(|id| json!({ "partyIdType": "MSISDN", "partyIdentifier": id, "fspId": fsp }))
        .collect();
    json!({ "requestId": request_id, "partyList": list, "currency": currency }).to_string()
}

/// Why the answer to a batch registration (`PUT /participants/{requestId}`)
/// is not "all `expected` parties registered"; `None` when it is.
pub fn batch_answer_problem(body: &[u8], expected: usize) -> Option<String> {
    let answer: Value = match serde_json::from_slice(body) {
        Ok(answer) => answer,
        Err(error) => return Some(format!("not JSON: {error}")),
    };
    let Some(list) = answer["partyList"].as_array() else {
        return Some("no partyList".into());
    };
    let failed: Vec<&Value> = list
        .iter()
        .filter(|item| item.get("errorInformation").is_some())
        .collect();
    if let Some(first) = failed.first() {
        return Some(format!(
            "{} of {} parties refused, the first: {}",
            failed.len(),
            list.len(),
            first
        ));
    }
    (list.len() != expected)
        .then(|| format!("{} parties answered, {expected} registered", list.len()))
}

/// The payee's `PUT /parties/MSISDN/{ID}` body.
pub fn party_put_body(identifier: &str, fsp: &str) -> String {
    party_put_body_named(identifier, fsp, &format!("Bench party {identifier}"))
}

/// The payee's `PUT /parties/MSISDN/{ID}` body, the party called `name`.
pub fn party_put_body_named(identifier: &str, fsp: &str, name: &str) -> String {
    json!({
        "party": {
            "partyIdInfo": { "partyIdType": "MSISDN", "partyIdentifier": identifier, "fspId": fsp },
            "name": name,
        }
    })
    .to_string()
}

/// The payee's `PUT /transfers/{ID}`: committed with the fulfilment of
/// [`CONDITION`].
pub fn fulfil_body(completed_ms: i64) -> String {
    format!(
        r#"{{"fulfilment":"{FULFILMENT}","completedTimestamp":"{}","transferState":"COMMITTED"}}"#,
        fspiop::format_date_time(completed_ms)
    )
}

/// An FSPIOP error body.
pub fn error_body(code: &str, description: &str) -> String {
    json!({ "errorInformation": { "errorCode": code, "errorDescription": description } })
        .to_string()
}

/// A `POST /quotes` body: `payer_party` of `payer_fsp` sends `amount` to
/// `payee_party` of `payee_fsp`.
pub fn quote_post_body(
    quote_id: &str,
    transaction_id: &str,
    (payer_fsp, payer_party): (&str, &str),
    (payee_fsp, payee_party): (&str, &str),
    (amount, currency): (&str, &str),
) -> String {
    format!(
        concat!(
            r#"{{"quoteId":"{}","transactionId":"{}","#,
            r#""payee":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"{}","fspId":"{}"}}}},"#,
            r#""payer":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"{}","fspId":"{}"}}}},"#,
            r#""amountType":"SEND","amount":{{"currency":"{}","amount":"{}"}},"#,
            r#""transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}"#
        ),
        quote_id, transaction_id, payee_party, payee_fsp, payer_party, payer_fsp, currency, amount
    )
}

/// The payee's `PUT /quotes/{ID}` body: no fees, so the transfer amount is
/// the amount asked; the condition is the one every transfer uses.
pub fn quote_put_body(amount: &str, currency: &str, expiration_ms: i64) -> String {
    format!(
        r#"{{"transferAmount":{{"currency":"{currency}","amount":"{amount}"}},"expiration":"{}","ilpPacket":"{ILP_PACKET}","condition":"{CONDITION}"}}"#,
        fspiop::format_date_time(expiration_ms)
    )
}

/// The terms of a payer conversion, as `POST /fxQuotes` asks for them and
/// the FXP's `PUT /fxQuotes/{ID}` offers them.
pub struct FxTerms<'a> {
    /// Also the `commitRequestId` of the conversion made under it.
    pub conversion_id: &'a str,
    /// The transfer the conversion is for.
    pub determining_transfer_id: &'a str,
    /// The payer's DFSP.
    pub initiating_fsp: &'a str,
    /// The FXP.
    pub counter_party_fsp: &'a str,
    /// (amount, currency) the payer sends.
    pub source: (&'a str, &'a str),
    /// (amount, currency) the payee's DFSP is paid, the amount left out
    /// for the FXP to fill in.
    pub target: (Option<&'a str>, &'a str),
    pub expiration_ms: i64,
}

impl FxTerms<'_> {
    fn to_json(&self) -> String {
        let target = match self.target {
            (Some(amount), currency) => {
                format!(r#"{{"currency":"{currency}","amount":"{amount}"}}"#)
            }
            (None, currency) => format!(r#"{{"currency":"{currency}"}}"#),
        };
        format!(
            concat!(
                r#"{{"conversionId":"{}","determiningTransferId":"{}","#,
                r#""initiatingFsp":"{}","counterPartyFsp":"{}","amountType":"SEND","#,
                r#""sourceAmount":{{"currency":"{}","amount":"{}"}},"targetAmount":{},"#,
                r#""expiration":"{}"}}"#
            ),
            self.conversion_id,
            self.determining_transfer_id,
            self.initiating_fsp,
            self.counter_party_fsp,
            self.source.1,
            self.source.0,
            target,
            fspiop::format_date_time(self.expiration_ms),
        )
    }
}

/// A `POST /fxQuotes` body: the payer asks the FXP for `terms`.
pub fn fx_quote_post_body(request_id: &str, terms: &FxTerms<'_>) -> String {
    format!(
        r#"{{"conversionRequestId":"{request_id}","conversionTerms":{}}}"#,
        terms.to_json()
    )
}

/// The FXP's `PUT /fxQuotes/{ID}` body: the terms with both amounts, no
/// charges, and the condition every conversion uses.
pub fn fx_quote_put_body(terms: &FxTerms<'_>) -> String {
    format!(
        r#"{{"condition":"{CONDITION}","conversionTerms":{}}}"#,
        terms.to_json()
    )
}

/// A `POST /fxTransfers` body: the payer's conversion of `source` into
/// `target` (both (amount, currency)) through `fxp`, for transfer
/// `determining_transfer_id`, under the condition every conversion uses.
pub fn fx_transfer_post_body(
    commit_request_id: &str,
    determining_transfer_id: &str,
    (payer, fxp): (&str, &str),
    source: (&str, &str),
    target: (&str, &str),
    expiration_ms: i64,
) -> String {
    format!(
        concat!(
            r#"{{"commitRequestId":"{}","determiningTransferId":"{}","#,
            r#""initiatingFsp":"{}","counterPartyFsp":"{}","amountType":"SEND","#,
            r#""sourceAmount":{{"currency":"{}","amount":"{}"}},"#,
            r#""targetAmount":{{"currency":"{}","amount":"{}"}},"#,
            r#""condition":"{}","expiration":"{}"}}"#
        ),
        commit_request_id,
        determining_transfer_id,
        payer,
        fxp,
        source.1,
        source.0,
        target.1,
        target.0,
        CONDITION,
        fspiop::format_date_time(expiration_ms),
    )
}

/// The FXP's `PUT /fxTransfers/{ID}`: RESERVED with the fulfilment of
/// [`CONDITION`].
pub fn fx_transfer_accept_body(completed_ms: i64) -> String {
    format!(
        r#"{{"fulfilment":"{FULFILMENT}","completedTimestamp":"{}","conversionState":"RESERVED"}}"#,
        fspiop::format_date_time(completed_ms)
    )
}

/// A pooled client of `http://` and (with the trust anchors and the
/// certificate it was made with) `https://` URLs.
pub type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

pub use crate::security::plain_client;

/// Sends a request and reads the whole answer; a transport failure is
/// `(key, description)`.
pub async fn send(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), (String, String)> {
    let response = client
        .request(request)
        .await
        .map_err(|error| ("transport".to_string(), error_chain(&error)))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|error| ("transport".to_string(), error_chain(&error)))?
        .to_bytes();
    Ok((status, body))
}

pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// An FSPIOP request with the headers a DFSP sends: Accept on requests
/// (`GET`, `POST`), not on callbacks (`PUT`); FSPIOP-Destination when given.
pub fn fspiop_request(
    method: Method,
    url: &str,
    api: Api,
    source: &str,
    destination: Option<&str>,
    body: String,
) -> Result<Request<Full<Bytes>>, String> {
    let accept = method != Method::PUT;
    let mut builder = Request::builder()
        .method(method)
        .uri(url)
        .header(http::header::CONTENT_TYPE, api.content_type())
        .header(
            http::header::DATE,
            httpdate::fmt_http_date(SystemTime::now()),
        )
        .header("fspiop-source", source);
    if let Some(destination) = destination {
        builder = builder.header("fspiop-destination", destination);
    }
    if accept {
        builder = builder.header(http::header::ACCEPT, api.accept());
    }
    builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|error| error.to_string())
}

#[derive(Deserialize)]
pub struct ErrorBody {
    #[serde(rename = "errorInformation")]
    error_information: ErrorInformation,
}

#[derive(Deserialize)]
pub struct ErrorInformation {
    #[serde(rename = "errorCode")]
    error_code: String,
    #[serde(rename = "errorDescription", default)]
    error_description: String,
}

pub fn describe_error_body(body: &[u8]) -> String {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(error) => format!(
            "{} {}",
            error.error_information.error_code, error.error_information.error_description
        ),
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
    }
}

/// An error callback's (code, description), as a stage's failure.
pub fn error_of(body: &[u8]) -> (String, String) {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(error) => (
            error.error_information.error_code,
            error.error_information.error_description,
        ),
        Err(_) => ("unreadable error".into(), describe_error_body(body)),
    }
}

/// The admin bearer token of `--admin-token-file`, and the admin API it
/// is for: a process talks to one hub's admin API, and the token goes
/// there only (never to a null hub measured beside it).
static ADMIN_TOKEN: OnceLock<(String, String)> = OnceLock::new();

/// Reads `--admin-token-file`: the token alone, or what `kasi admin-token`
/// prints (its `token: …` line is taken, the tokens-file line ignored).
pub fn read_admin_token_file(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--admin-token-file {}: cannot read it", path.display()))?;
    let lines = || {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
    };
    let token = lines()
        .find_map(|line| line.strip_prefix("token:"))
        .or_else(|| lines().next())
        .map(str::trim)
        .unwrap_or_default();
    if token.is_empty() || token.contains(char::is_whitespace) {
        bail!(
            "--admin-token-file {}: expected one admin bearer token (as `kasi admin-token` prints it)",
            path.display()
        );
    }
    Ok(token.to_string())
}

/// Sends `token` as `Authorization: Bearer` with every admin request to
/// `admin` (a base URL) from now on; once per process.
pub fn present_admin_token(admin: &str, token: String) {
    let _ = ADMIN_TOKEN.set((admin.trim_end_matches('/').to_string(), token));
}

/// The token for a request to `url`, if one was given for its admin API.
fn admin_token_for(url: &str) -> Option<&'static str> {
    let (admin, token) = ADMIN_TOKEN.get()?;
    let rest = url.strip_prefix(admin.as_str())?;
    (rest.is_empty() || rest.starts_with('/')).then_some(token.as_str())
}

/// What a 401 or 403 of the admin API means for the person running this.
fn admin_refusal(status: StatusCode, url: &str) -> Option<&'static str> {
    match status {
        StatusCode::UNAUTHORIZED if admin_token_for(url).is_none() => {
            Some("unauthorized: the hub needs an admin token (--admin-token-file)")
        }
        StatusCode::UNAUTHORIZED => {
            Some("unauthorized: the hub does not accept the token of --admin-token-file")
        }
        StatusCode::FORBIDDEN => {
            Some("forbidden: the token of --admin-token-file is a viewer's; onboarding needs an operator's")
        }
        _ => None,
    }
}

/// Admin API requests as a Mojaloop golden-path collection makes them,
/// with the bearer token of [`present_admin_token`].
pub async fn admin_request(
    client: &HttpClient,
    method: Method,
    url: &str,
    body: Option<Value>,
) -> anyhow::Result<(StatusCode, Bytes)> {
    let request = || {
        let mut builder = Request::builder()
            .method(method.clone())
            .uri(url)
            .header(http::header::ACCEPT, "application/json");
        if let Some(token) = admin_token_for(url) {
            builder = builder.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        match &body {
            Some(body) => builder
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(body.to_string()))),
            None => builder.body(Full::new(Bytes::new())),
        }
        .with_context(|| format!("bad URL {url}"))
    };
    // An admin connection idle through a long run may be closed by the hub
    // just as it is reused; a GET or DELETE is safe to send again.
    let attempts = if method == Method::GET || method == Method::DELETE {
        2
    } else {
        1
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let answer = tokio::time::timeout(Duration::from_secs(30), send(client, request()?))
            .await
            .with_context(|| format!("{method} {url}: no answer within 30 s"))?;
        match answer {
            Err((key, _)) if key == "transport" && attempt < attempts => continue,
            answer => {
                return answer.map_err(|(key, description)| {
                    let hint = if key == "transport" {
                        " (is the hub running there?)"
                    } else {
                        ""
                    };
                    anyhow::anyhow!("{method} {url}: {description}{hint}")
                })
            }
        }
    }
}

/// Expects a 2xx answer; with `tolerate_existing`, also an error saying the
/// thing exists already (a second run against the same hub).
pub async fn admin_call(
    client: &HttpClient,
    method: Method,
    url: &str,
    body: Option<Value>,
    tolerate_existing: bool,
) -> anyhow::Result<Bytes> {
    let (status, answer) = admin_request(client, method.clone(), url, body).await?;
    let exists = || {
        String::from_utf8_lossy(&answer)
            .to_ascii_lowercase()
            .contains("already")
    };
    if status.is_success() || (tolerate_existing && status.is_client_error() && exists()) {
        Ok(answer)
    } else if let Some(refusal) = admin_refusal(status, url) {
        bail!("{method} {url}: {} {refusal}", status.as_u16())
    } else {
        bail!(
            "{method} {url}: {} {}",
            status.as_u16(),
            String::from_utf8_lossy(&answer)
        )
    }
}

/// The hub's accounts and, unless a model already settles `currency`, a
/// deferred net settlement model for it (an existing one is fine: a second
/// run against the same hub). A model already in place is kept and used:
/// one for the currency, or one without a currency (the default, such as the
/// tutorial's `DEFERREDNET`). Adding `DEFERREDNET{currency}` beside the
/// default would take the currency from it (a currency's own model comes
/// first), and settling with the default would then be refused.
pub async fn onboard_hub(
    client: &HttpClient,
    admin: &str,
    hub_name: &str,
    currency: &str,
) -> anyhow::Result<()> {
    for kind in ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"] {
        admin_call(
            client,
            Method::POST,
            &format!("{admin}/participants/{hub_name}/accounts"),
            Some(json!({ "type": kind, "currency": currency })),
            true,
        )
        .await?;
    }
    // A hub that does not list its models (the bench's null hub) gets one.
    let (status, models) = admin_request(
        client,
        Method::GET,
        &format!("{admin}/settlementModels"),
        None,
    )
    .await?;
    if status.is_success() && applicable_model(&models, currency).is_some() {
        return Ok(());
    }
    admin_call(
        client,
        Method::POST,
        &format!("{admin}/settlementModels"),
        Some(json!({
            "name": format!("DEFERREDNET{currency}"),
            "settlementGranularity": "NET",
            "settlementInterchange": "MULTILATERAL",
            "settlementDelay": "DEFERRED",
            "requireLiquidityCheck": true,
            "ledgerAccountType": "POSITION",
            "autoPositionReset": true,
            "currency": currency,
            "settlementAccountType": "SETTLEMENT",
        })),
        true,
    )
    .await?;
    Ok(())
}

/// The name of an active model of `GET /settlementModels` (central-ledger's
/// shape) that settles `currency`'s positions: the currency's own, else one
/// without a currency.
pub fn applicable_model(models: &[u8], currency: &str) -> Option<String> {
    let models: Vec<Value> = serde_json::from_slice(models).ok()?;
    let positions = |model: &&Value| {
        let inactive = model
            .get("isActive")
            .is_some_and(|flag| *flag == json!(0) || *flag == json!(false));
        let ledger_type = model
            .get("ledgerAccountTypeId")
            .or_else(|| model.get("ledgerAccountType"))
            .and_then(Value::as_str);
        !inactive && ledger_type.is_none_or(|t| t == "POSITION")
    };
    let named = |wanted: Option<&str>| {
        models
            .iter()
            .filter(positions)
            .find(|model| model.get("currency").and_then(Value::as_str) == wanted)
            .and_then(|model| model["name"].as_str().map(str::to_string))
    };
    named(Some(currency)).or_else(|| named(None))
}

/// How [`onboard_dfsp`] onboards one DFSP.
pub struct Onboarding<'a> {
    pub admin: &'a str,
    pub name: &'a str,
    pub currency: &'a str,
    /// Its callbacks go to `{callback_root}/{name}/...` (e.g.
    /// `http://127.0.0.1:4000`).
    pub callback_root: &'a str,
    /// Also the discovery endpoints (parties, participants, quotes, ...).
    pub discovers: bool,
    /// The id of the funds-in transfer (a UUID or ULID).
    pub funds_id: &'a str,
    /// A DFSP that exists already is no error: its limit is left as it is
    /// and its endpoints are pointed at `callback_root`.
    pub existing_ok: bool,
}

/// Onboards a DFSP as a Mojaloop golden-path collection does: participant,
/// net debit cap, callback endpoints, funds in (a net debit cap and
/// liquidity the run cannot exhaust). Returns whether it was new.
pub async fn onboard_dfsp(client: &HttpClient, how: &Onboarding<'_>) -> anyhow::Result<bool> {
    let Onboarding {
        admin,
        name,
        currency,
        callback_root,
        discovers,
        funds_id,
        existing_ok,
    } = *how;
    let participant = format!("{admin}/participants/{name}");
    let created = admin_call(
        client,
        Method::POST,
        &format!("{admin}/participants"),
        Some(json!({ "name": name, "currency": currency })),
        existing_ok,
    )
    .await?;
    let new = !String::from_utf8_lossy(&created)
        .to_ascii_lowercase()
        .contains("already");
    admin_call(
        client,
        Method::POST,
        &format!("{participant}/initialPositionAndLimits"),
        Some(json!({
            "currency": currency,
            "limit": { "type": "NET_DEBIT_CAP", "value": LARGE_AMOUNT.parse::<u64>().expect("a number") },
            "initialPosition": 0,
        })),
        existing_ok,
    )
    .await?;
    // Under `{callback server}/{DFSP}`: the transfer callbacks, and for
    // every flow but `transfer` the discovery ones.
    let root = format!("{callback_root}/{name}");
    let discovery: &[(&str, &str)] = if discovers {
        fspiop::DISCOVERY_CALLBACKS
    } else {
        &[]
    };
    for (kind, path) in fspiop::TRANSFER_CALLBACKS.iter().chain(discovery) {
        admin_call(
            client,
            Method::POST,
            &format!("{participant}/endpoints"),
            Some(json!({ "type": kind, "value": format!("{root}{path}") })),
            false,
        )
        .await?;
    }
    if !new {
        return Ok(false);
    }
    let accounts = admin_call(
        client,
        Method::GET,
        &format!("{participant}/accounts"),
        None,
        false,
    )
    .await?;
    let accounts: Vec<Value> = serde_json::from_slice(&accounts)
        .with_context(|| format!("GET {participant}/accounts: not a JSON array"))?;
    let settlement = accounts
        .iter()
        .find(|account| {
            account["ledgerAccountType"] == "SETTLEMENT" && account["currency"] == currency
        })
        .and_then(|account| account["id"].as_u64())
        .with_context(|| format!("{name} has no {currency} SETTLEMENT account"))?;
    admin_call(
        client,
        Method::POST,
        &format!("{participant}/accounts/{settlement}"),
        Some(json!({
            "transferId": funds_id,
            "externalReference": "kasi bench transfers",
            "action": "recordFundsIn",
            "reason": "initial liquidity",
            "amount": { "amount": LARGE_AMOUNT, "currency": currency },
        })),
        false,
    )
    .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{party_identifier, IdGen, PartyRef};
    use crate::run::CURRENCY;

    #[test]
    fn an_existing_model_for_the_currency_or_the_default_is_used() {
        let models = |list: Value| list.to_string().into_bytes();
        // The tutorial's default model settles USD: nothing to add.
        let tutorial = models(json!([{
            "settlementModelId": 1, "name": "DEFERREDNET", "isActive": 1,
            "settlementDelay": "DEFERRED", "currency": null,
            "ledgerAccountType": "POSITION", "ledgerAccountTypeId": "POSITION",
        }]));
        assert_eq!(
            applicable_model(&tutorial, "USD").as_deref(),
            Some("DEFERREDNET")
        );
        // The currency's own model comes first.
        let both = models(json!([
            {"name": "DEFERREDNET", "currency": null, "ledgerAccountTypeId": "POSITION"},
            {"name": "DEFERREDNETUSD", "currency": "USD", "ledgerAccountTypeId": "POSITION"},
        ]));
        assert_eq!(
            applicable_model(&both, "USD").as_deref(),
            Some("DEFERREDNETUSD")
        );
        // Another currency's, an inactive one or one of other accounts do
        // not settle USD positions.
        let none = models(json!([
            {"name": "DEFERREDNETXOF", "currency": "XOF", "ledgerAccountTypeId": "POSITION"},
            {"name": "OFF", "currency": null, "isActive": false},
            {"name": "FEES", "currency": null, "ledgerAccountTypeId": "INTERCHANGE_FEE"},
        ]));
        assert_eq!(applicable_model(&none, "USD"), None);
        assert_eq!(applicable_model(&models(json!([])), "USD"), None);
    }

    /// The packets the prepares carry name their parties as the hub reads
    /// them (the reader is checked against Mojaloop's own vectors).
    #[test]
    fn a_packet_names_the_payer_and_the_payee() {
        let packet = ilp_packet_naming(
            "01K1WV2595Z7XST8FW5K4XRDZB",
            ("b1d0", "255700000017"),
            ("b1d1", "255700000042"),
            ("10", "USD"),
        );
        let parties = fspiop::ilp::transaction_parties(&packet).expect("the hub reads it");
        assert_eq!(parties.payer.key(), "MSISDN/255700000017");
        assert_eq!(parties.payee.key(), "MSISDN/255700000042");
        assert!(packet.len() < 1_000, "{}", packet.len());
    }

    #[test]
    fn the_condition_matches_the_fulfilment() {
        let fulfilment = ledger::Fulfilment::from_base64url(FULFILMENT).expect("32 bytes");
        let condition = ledger::Condition::from_base64url(CONDITION).expect("32 bytes");
        assert!(fulfilment.condition() == condition);
        assert!(ILP_PACKET
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    }

    #[test]
    fn the_batch_registration_is_valid_fspiop_and_its_answer_is_checked() {
        let ids = IdGen::new(11);
        let request_id = ids.format(1);
        let identifiers: Vec<String> = (0..3)
            .map(|index| party_identifier(77, PartyRef { dfsp: 2, index }))
            .collect();
        let body = participants_batch_body(&request_id, "b1d2", &identifiers, CURRENCY);
        let parsed = fspiop::parse_participants_batch(body.as_bytes()).expect("valid");
        assert_eq!(parsed.request_id.to_string(), request_id);
        assert_eq!(parsed.parties.len(), 3);
        for (party, id) in parsed.parties.iter().zip(&identifiers) {
            assert_eq!(party.key.id_type, "MSISDN");
            assert_eq!(&party.key.identifier, id);
            assert_eq!(
                party.fsp.map(|fsp| fsp.to_string()).as_deref(),
                Some("b1d2")
            );
        }
        assert_eq!(
            parsed.currency.map(|c| c.to_string()).as_deref(),
            Some(CURRENCY)
        );

        // The answers the hub writes (fspiop's own body builder).
        let key = |id: &String| fspiop::PartyKey {
            id_type: "MSISDN".into(),
            identifier: id.clone(),
            sub_id: None,
        };
        let all_ok: Vec<_> = identifiers.iter().map(|id| (key(id), None)).collect();
        let answer = fspiop::participants_batch_put_body(&all_ok, parsed.currency);
        assert_eq!(batch_answer_problem(&answer, 3), None);
        let problem = batch_answer_problem(&answer, 4).expect("one missing");
        assert!(problem.contains("3 parties answered"), "{problem}");
        let mut one_refused = all_ok.clone();
        one_refused[1].1 = Some((
            ledger::ErrorCode(3003),
            "Add Party information error".to_string(),
        ));
        let answer = fspiop::participants_batch_put_body(&one_refused, parsed.currency);
        let problem = batch_answer_problem(&answer, 3).expect("one refused");
        assert!(problem.starts_with("1 of 3 parties refused"), "{problem}");
        assert!(problem.contains("3003"), "{problem}");
        assert!(batch_answer_problem(b"nope", 1).is_some());
        assert!(batch_answer_problem(b"{}", 1).is_some());
    }

    #[test]
    fn the_payees_party_answer_is_valid_fspiop() {
        let id = party_identifier(12, PartyRef { dfsp: 1, index: 5 });
        let body = party_put_body(&id, "b1d1");
        let info = fspiop::check_party_put(body.as_bytes()).expect("valid");
        assert_eq!(info.key.id_type, "MSISDN");
        assert_eq!(info.key.identifier, id);
        assert_eq!(info.fsp.map(|fsp| fsp.to_string()).as_deref(), Some("b1d1"));
    }

    #[test]
    fn requests_carry_the_headers_of_their_resource() {
        let header = |request: &Request<Full<Bytes>>, name: &str| {
            request
                .headers()
                .get(name)
                .map(|value| value.to_str().unwrap().to_string())
        };
        let cases = [
            (
                Api::Parties,
                Method::GET,
                None,
                fspiop::Resource::Parties,
                "1.0",
            ),
            (
                Api::Parties,
                Method::PUT,
                Some("b1d0"),
                fspiop::Resource::Parties,
                "1.0",
            ),
            (
                Api::Quotes,
                Method::POST,
                Some("b1d1"),
                fspiop::Resource::Quotes,
                "1.1",
            ),
            (
                Api::Quotes,
                Method::PUT,
                Some("b1d0"),
                fspiop::Resource::Quotes,
                "1.1",
            ),
            (
                Api::Participants,
                Method::POST,
                None,
                fspiop::Resource::Participants,
                "1.0",
            ),
            (
                Api::Transfers,
                Method::POST,
                Some("b1d1"),
                fspiop::Resource::Transfers,
                "1.1",
            ),
            (
                Api::Transfers,
                Method::PUT,
                Some("b1d0"),
                fspiop::Resource::Transfers,
                "1.1",
            ),
            (
                Api::FxQuotes,
                Method::POST,
                Some("b1fxp0"),
                fspiop::Resource::FxQuotes,
                "2.0",
            ),
            (
                Api::FxTransfers,
                Method::PUT,
                Some("b1d0"),
                fspiop::Resource::FxTransfers,
                "2.0",
            ),
        ];
        for (api, method, destination, resource, version) in cases {
            let request = fspiop_request(
                method.clone(),
                "http://hub/x",
                api,
                "b1d9",
                destination,
                String::new(),
            )
            .expect("a request");
            let content_type = header(&request, "content-type").expect("Content-Type");
            assert!(
                content_type.ends_with(&format!("version={version}")),
                "{content_type}"
            );
            let checked = fspiop::check_content_type(resource, Some(&content_type))
                .unwrap_or_else(|e| panic!("{api:?} {method}: {}", e.description));
            assert_eq!(checked.to_string(), version);
            match header(&request, "accept") {
                Some(accept) => {
                    assert_ne!(method, Method::PUT, "{api:?}: a callback has no Accept");
                    fspiop::negotiate_accept(resource, Some(&accept))
                        .unwrap_or_else(|e| panic!("{api:?} {method}: {}", e.description));
                }
                None => assert_eq!(method, Method::PUT, "{api:?} {method} needs Accept"),
            }
            fspiop::check_date(header(&request, "date").as_deref()).expect("a valid Date");
            assert_eq!(header(&request, "fspiop-source").as_deref(), Some("b1d9"));
            assert_eq!(
                header(&request, "fspiop-destination").as_deref(),
                destination
            );
        }
    }

    #[test]
    fn error_bodies_are_described() {
        let body = br#"{"errorInformation":{"errorCode":"3100","errorDescription":"Generic validation error - x"}}"#;
        assert_eq!(
            describe_error_body(body),
            "3100 Generic validation error - x"
        );
        assert_eq!(describe_error_body(b"oops"), "oops");
    }
}
