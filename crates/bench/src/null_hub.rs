//! The null hub of `kasi bench --null-hub`: benchmarking the
//! benchmark (seed 002).
//!
//! An in-process stand-in for a hub that does no hub work: no validation,
//! no ledger, no store. Its admin API answers the driver's onboarding calls
//! minimally (in the shapes the driver reads back) and remembers each DFSP's
//! endpoints; its FSPIOP API answers every request at once (202 or 200) and
//! forwards it, fire and forget, to the DFSP it is for: a run against it
//! measures the ceiling of the harness itself on this machine.
//!
//! For FX it routes `/fxQuotes` and `/fxTransfers` by FSPIOP-Destination,
//! and remembers each conversion's FXP by its `determiningTransferId`, so
//! that the payee's fulfil of that transfer also sends the FXP the
//! `PATCH /fxTransfers/{ID}` (COMMITTED) a hub sends: the least an FX
//! payment needs, still no ledger.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde_json::{json, Value};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Where the null hub listens.
pub struct NullHub {
    pub api: SocketAddr,
    pub admin: SocketAddr,
}

struct Hub {
    client: HttpClient,
    /// DFSP → endpoint type → URL (template).
    endpoints: RwLock<HashMap<String, HashMap<String, String>>>,
    /// Party identifier → the DFSP that registered it.
    parties: RwLock<HashMap<String, String>>,
    /// DFSP → the currencies it was created in.
    currencies: RwLock<HashMap<String, Vec<String>>>,
    /// Determining transfer id → (commit request id, FXP) of a conversion.
    conversions: std::sync::Mutex<HashMap<String, (String, String)>>,
    next_account: AtomicU64,
}

impl Hub {
    fn endpoint(&self, fsp: &str, kind: &str) -> Option<String> {
        self.endpoints
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(fsp)?
            .get(kind)
            .cloned()
    }

    fn holder(&self, identifier: &str) -> Option<String> {
        self.parties
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(identifier)
            .cloned()
    }

    /// Sends `body` with `headers` (the FSPIOP ones, as received) to `url`
    /// in the background; the answer is read and dropped.
    fn forward(&self, method: Method, url: String, headers: &HeaderMap, body: Bytes) {
        let mut builder = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            if !matches!(
                name.as_str(),
                "host" | "content-length" | "connection" | "transfer-encoding" | "keep-alive"
            ) {
                builder = builder.header(name, value);
            }
        }
        let Ok(request) = builder.body(Full::new(body)) else {
            return;
        };
        let client = self.client.clone();
        tokio::spawn(async move {
            if let Ok(response) = client.request(request).await {
                let _ = response.into_body().collect().await;
            }
        });
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// `kasi null-hub`: the null hub as a process of its own, as a hub under
/// test is, so that its ceiling includes the process switches every real
/// hub pays; logs where it serves, then runs until SIGTERM or SIGINT.
pub fn run_process() -> anyhow::Result<std::process::ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kasi-null-hub")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        // Listening for SIGTERM before saying where it serves: a stop sent
        // right after the line is never the default (fatal) one.
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .context("cannot listen for SIGTERM")?;
        let hub = start().await?;
        // The target it had in the kasi binary: log filters and the line
        // the harness reads stay the same.
        tracing::info!(target: "kasi::null_hub", api = %hub.api, admin = %hub.admin, "serving");
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        anyhow::Ok(())
    })?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(std::process::ExitCode::SUCCESS)
}

/// Starts the null hub's admin and FSPIOP servers on ephemeral ports of
/// 127.0.0.1, in tasks of the current runtime.
pub async fn start() -> anyhow::Result<NullHub> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_timer(TokioTimer::new())
        .build(connector);
    let hub = Arc::new(Hub {
        client,
        endpoints: RwLock::new(HashMap::new()),
        parties: RwLock::new(HashMap::new()),
        currencies: RwLock::new(HashMap::new()),
        conversions: std::sync::Mutex::new(HashMap::new()),
        next_account: AtomicU64::new(1),
    });
    let api = serve(fspiop(hub.clone())).await?;
    let admin = serve(admin(hub)).await?;
    Ok(NullHub { api, admin })
}

async fn serve(app: Router) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("the null hub cannot listen on 127.0.0.1")?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).tcp_nodelay(true).await {
            eprintln!("kasi: the null hub stopped: {error}");
        }
    });
    Ok(addr)
}

// ---------------------------------------------------------------- admin API

fn admin(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/participants", post(on_participant))
        .route("/settlementModels", post(|| async { StatusCode::CREATED }))
        .route(
            "/participants/:name/initialPositionAndLimits",
            post(|| async { StatusCode::CREATED }),
        )
        .route("/participants/:name/endpoints", post(on_endpoint))
        .route(
            "/participants/:name/accounts",
            get(on_accounts).post(|| async { StatusCode::CREATED }),
        )
        .route(
            "/participants/:name/accounts/:id",
            post(|| async { StatusCode::ACCEPTED }),
        )
        .route("/participants/:name/positions", get(on_positions))
        .with_state(hub)
}

async fn on_participant(State(hub): State<Arc<Hub>>, Json(body): Json<Value>) -> impl IntoResponse {
    if let (Some(name), Some(currency)) = (body["name"].as_str(), body["currency"].as_str()) {
        let mut currencies = hub.currencies.write().unwrap_or_else(|e| e.into_inner());
        let held = currencies.entry(name.to_string()).or_default();
        if !held.iter().any(|c| c == currency) {
            held.push(currency.to_string());
        }
    }
    (
        StatusCode::CREATED,
        Json(json!({
            "name": body["name"],
            "isActive": 1,
            "accounts": [],
        })),
    )
}

async fn on_endpoint(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
    Json(body): Json<Value>,
) -> StatusCode {
    let (Some(kind), Some(value)) = (body["type"].as_str(), body["value"].as_str()) else {
        return StatusCode::BAD_REQUEST;
    };
    hub.endpoints
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .entry(name)
        .or_default()
        .insert(kind.to_string(), value.to_string());
    StatusCode::CREATED
}

/// A POSITION and a SETTLEMENT account in each currency the DFSP was
/// created in (USD if none was said).
async fn on_accounts(State(hub): State<Arc<Hub>>, Path(name): Path<String>) -> Json<Value> {
    let currencies = hub
        .currencies
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&name)
        .cloned()
        .unwrap_or_else(|| vec!["USD".to_string()]);
    let mut accounts = Vec::new();
    for currency in currencies {
        let id = hub.next_account.fetch_add(2, Ordering::Relaxed);
        for (offset, kind) in [(0, "POSITION"), (1, "SETTLEMENT")] {
            accounts.push(json!({
                "id": id + offset, "ledgerAccountType": kind, "currency": currency,
                "isActive": 1, "value": 0, "reservedValue": 0,
            }));
        }
    }
    Json(Value::Array(accounts))
}

async fn on_positions() -> Json<Value> {
    Json(json!([{ "currency": "USD", "value": "0", "changedDate": null }]))
}

// ---------------------------------------------------------------- FSPIOP API

fn fspiop(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/transfers", post(on_transfer_post))
        .route("/transfers/:id", put(on_transfer_put))
        .route("/transfers/:id/error", put(on_transfer_error))
        .route("/parties/:id_type/:id", get(on_party_get).put(on_party_put))
        .route("/parties/:id_type/:id/error", put(on_party_error))
        .merge(routed_by_destination(
            "quotes",
            "FSPIOP_CALLBACK_URL_QUOTES",
        ))
        .merge(routed_by_destination(
            "transactionRequests",
            "FSPIOP_CALLBACK_URL_TRX_REQ_SERVICE",
        ))
        .merge(routed_by_destination(
            "fxQuotes",
            "FSPIOP_CALLBACK_URL_FX_QUOTES",
        ))
        .route("/fxTransfers", post(on_conversion_post))
        .route("/fxTransfers/:id", put(on_conversion_put))
        .route("/fxTransfers/:id/error", put(on_conversion_error))
        .route("/participants", post(on_batch_registration))
        .with_state(hub)
}

/// `POST /{resource}`, `PUT /{resource}/{ID}[/error]`, forwarded to the
/// FSPIOP-Destination's `endpoint_type`, a bare base URL, with the path
/// appended (as the real hub routes quotes and transaction requests).
fn routed_by_destination(resource: &'static str, endpoint_type: &'static str) -> Router<Arc<Hub>> {
    let forward = move |hub: &Hub, path: String, method: Method, headers: &HeaderMap, body| {
        forward_to(
            hub,
            header(headers, "fspiop-destination"),
            endpoint_type,
            |url| format!("{url}{path}"),
            method,
            headers,
            body,
        );
    };
    Router::new()
        .route(
            &format!("/{resource}"),
            post(
                move |State(hub): State<Arc<Hub>>, headers: HeaderMap, body: Bytes| async move {
                    forward(&hub, format!("/{resource}"), Method::POST, &headers, body);
                    StatusCode::ACCEPTED
                },
            ),
        )
        .route(
            &format!("/{resource}/:id"),
            put(
                move |State(hub): State<Arc<Hub>>,
                      Path(id): Path<String>,
                      headers: HeaderMap,
                      body: Bytes| async move {
                    forward(
                        &hub,
                        format!("/{resource}/{id}"),
                        Method::PUT,
                        &headers,
                        body,
                    );
                    StatusCode::OK
                },
            ),
        )
        .route(
            &format!("/{resource}/:id/error"),
            put(
                move |State(hub): State<Arc<Hub>>,
                      Path(id): Path<String>,
                      headers: HeaderMap,
                      body: Bytes| async move {
                    let path = format!("/{resource}/{id}/error");
                    forward(&hub, path, Method::PUT, &headers, body);
                    StatusCode::OK
                },
            ),
        )
}

/// Forwards to `fsp`'s endpoint `kind`, its template filled by `fill`.
fn forward_to(
    hub: &Hub,
    fsp: Option<&str>,
    kind: &str,
    fill: impl FnOnce(String) -> String,
    method: Method,
    headers: &HeaderMap,
    body: Bytes,
) {
    if let Some(url) = fsp.and_then(|fsp| hub.endpoint(fsp, kind)) {
        hub.forward(method, fill(url), headers, body);
    }
}

async fn on_transfer_post(
    State(hub): State<Arc<Hub>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let payee = header(&headers, "fspiop-destination");
    forward_to(
        &hub,
        payee,
        "FSPIOP_CALLBACK_URL_TRANSFER_POST",
        |url| url,
        Method::POST,
        &headers,
        body,
    );
    StatusCode::ACCEPTED
}

/// The payee's fulfil: the commit notification to the payer, and the
/// confirmation copy to the payee, as the real hub sends them; and for a
/// transfer a conversion depends on, the FXP's `PATCH`.
async fn on_transfer_put(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let conversion = hub
        .conversions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&id);
    if let Some((commit_request_id, fxp)) = conversion {
        let mut patch_headers = HeaderMap::new();
        patch_headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(
                "application/vnd.interoperability.fxTransfers+json;version=2.0",
            ),
        );
        if let Some(date) = headers.get("date") {
            patch_headers.insert("date", date.clone());
        }
        patch_headers.insert("fspiop-source", http::HeaderValue::from_static("Hub"));
        if let Ok(destination) = http::HeaderValue::from_str(&fxp) {
            patch_headers.insert("fspiop-destination", destination);
        }
        forward_to(
            &hub,
            Some(&fxp),
            "FSPIOP_CALLBACK_URL_FX_TRANSFER_PUT",
            |url| url.replace("{{commitRequestId}}", &commit_request_id),
            Method::PATCH,
            &patch_headers,
            Bytes::from_static(br#"{"conversionState":"COMMITTED"}"#),
        );
    }
    let fill = |url: String| url.replace("{{transferId}}", &id);
    for fsp in [
        header(&headers, "fspiop-destination"),
        header(&headers, "fspiop-source"),
    ] {
        forward_to(
            &hub,
            fsp,
            "FSPIOP_CALLBACK_URL_TRANSFER_PUT",
            fill,
            Method::PUT,
            &headers,
            body.clone(),
        );
    }
    StatusCode::OK
}

async fn on_transfer_error(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    forward_to(
        &hub,
        header(&headers, "fspiop-destination"),
        "FSPIOP_CALLBACK_URL_TRANSFER_ERROR",
        |url| url.replace("{{transferId}}", &id),
        Method::PUT,
        &headers,
        body,
    );
    StatusCode::OK
}

/// A conversion: forwarded to the FXP, its FXP remembered by the transfer
/// it depends on.
async fn on_conversion_post(
    State(hub): State<Arc<Hub>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    #[derive(serde::Deserialize)]
    struct Conversion<'a> {
        #[serde(rename = "commitRequestId")]
        commit_request_id: &'a str,
        #[serde(rename = "determiningTransferId")]
        determining_transfer_id: &'a str,
        #[serde(rename = "counterPartyFsp")]
        counter_party_fsp: &'a str,
    }
    if let Ok(conversion) = serde_json::from_slice::<Conversion<'_>>(&body) {
        hub.conversions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                conversion.determining_transfer_id.to_string(),
                (
                    conversion.commit_request_id.to_string(),
                    conversion.counter_party_fsp.to_string(),
                ),
            );
    }
    forward_to(
        &hub,
        header(&headers, "fspiop-destination"),
        "FSPIOP_CALLBACK_URL_FX_TRANSFER_POST",
        |url| url,
        Method::POST,
        &headers,
        body,
    );
    StatusCode::ACCEPTED
}

/// The FXP's acceptance, to the payer.
async fn on_conversion_put(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    forward_to(
        &hub,
        header(&headers, "fspiop-destination"),
        "FSPIOP_CALLBACK_URL_FX_TRANSFER_PUT",
        |url| url.replace("{{commitRequestId}}", &id),
        Method::PUT,
        &headers,
        body,
    );
    StatusCode::OK
}

async fn on_conversion_error(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    forward_to(
        &hub,
        header(&headers, "fspiop-destination"),
        "FSPIOP_CALLBACK_URL_FX_TRANSFER_ERROR",
        |url| url.replace("{{commitRequestId}}", &id),
        Method::PUT,
        &headers,
        body,
    );
    StatusCode::OK
}

fn fill_party(url: String, id_type: &str, id: &str) -> String {
    url.replace("{{partyIdType}}", id_type)
        .replace("{{partyIdentifier}}", id)
}

/// A lookup goes to the DFSP that registered the party.
async fn on_party_get(
    State(hub): State<Arc<Hub>>,
    Path((id_type, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let holder = hub.holder(&id);
    forward_to(
        &hub,
        holder.as_deref(),
        "FSPIOP_CALLBACK_URL_PARTIES_GET",
        |url| fill_party(url, &id_type, &id),
        Method::GET,
        &headers,
        body,
    );
    StatusCode::ACCEPTED
}

async fn on_party_put(
    State(hub): State<Arc<Hub>>,
    Path((id_type, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    forward_to(
        &hub,
        header(&headers, "fspiop-destination"),
        "FSPIOP_CALLBACK_URL_PARTIES_PUT",
        |url| fill_party(url, &id_type, &id),
        Method::PUT,
        &headers,
        body,
    );
    StatusCode::OK
}

async fn on_party_error(
    State(hub): State<Arc<Hub>>,
    Path((id_type, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    forward_to(
        &hub,
        header(&headers, "fspiop-destination"),
        "FSPIOP_CALLBACK_URL_PARTIES_PUT_ERROR",
        |url| fill_party(url, &id_type, &id),
        Method::PUT,
        &headers,
        body,
    );
    StatusCode::OK
}

/// Batch `POST /participants`: records every party's holder, then answers
/// the registering DFSP with `PUT /participants/{requestId}` listing them.
async fn on_batch_registration(
    State(hub): State<Arc<Hub>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let Some(source) = header(&headers, "fspiop-source") else {
        return StatusCode::BAD_REQUEST;
    };
    let request_id = body["requestId"].as_str().unwrap_or_default().to_string();
    let list = body["partyList"].as_array().cloned().unwrap_or_default();
    {
        let mut parties = hub.parties.write().unwrap_or_else(|e| e.into_inner());
        for party in &list {
            if let Some(id) = party["partyIdentifier"].as_str() {
                let fsp = party["fspId"].as_str().unwrap_or(source);
                parties.insert(id.to_string(), fsp.to_string());
            }
        }
    }
    let answer = json!({
        "partyList": list.iter().map(|party| json!({ "partyId": party })).collect::<Vec<_>>(),
        "currency": body["currency"],
    });
    let mut answer_headers = HeaderMap::new();
    for name in ["content-type", "date"] {
        if let Some(value) = headers.get(name) {
            answer_headers.insert(name, value.clone());
        }
    }
    answer_headers.insert("fspiop-source", http::HeaderValue::from_static("Hub"));
    if let Ok(destination) = http::HeaderValue::from_str(source) {
        answer_headers.insert("fspiop-destination", destination);
    }
    forward_to(
        &hub,
        Some(source),
        "FSPIOP_CALLBACK_URL_PARTICIPANT_BATCH_PUT",
        |url| url.replace("{{requestId}}", &request_id),
        Method::PUT,
        &answer_headers,
        Bytes::from(answer.to_string()),
    );
    StatusCode::ACCEPTED
}
