//! External oracles, as Mojaloop's account-lookup-service uses them: an
//! operator registers, per party id type (and optionally currency), a
//! service that knows which FSP holds a party
//! (`GET {oracle}/participants/{Type}/{ID}` → `{"partyList":[{"fspId"}]}`).
//! The hub asks it only when the built-in registry has no holder, and keeps
//! each answer (a holder, or none) for a bounded time in a bounded cache.
//!
//! The configuration is durable in the ledger (`CreateOracle`, ...) and held
//! here in memory, refreshed after each change, with ALS's admin API:
//! `GET`/`POST /oracles`, `PUT`/`DELETE /oracles/{ID}`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::Router;
use http::header::{ACCEPT, CONTENT_TYPE, DATE};
use http::{HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use ledger::request::{CreateOracle, DeleteOracle, ReadOracles, UpdateOracle};
use ledger::{Currency, ErrorCode, FspName, OracleRow, PartyKey, Rejection};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::{Hub, HubConfig, HubError};

/// How long an oracle's answer is reused, by default.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(60);
/// Answers kept at most, by default; the oldest goes first when full.
pub const DEFAULT_CACHE_CAPACITY: usize = 100_000;
/// Largest oracle answer read; a longer one is a failed lookup.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// Idle keep-alive connections to oracles are closed after this long.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// At most one warning about failing oracles per this many ms.
const WARN_INTERVAL_MS: u64 = 1_000;

// ----- the answer cache ---------------------------------------------------

/// What a lookup asked: the party and the currency it named, if any.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LookupKey {
    pub id_type: String,
    pub identifier: String,
    pub sub_id: Option<String>,
    pub currency: Option<Currency>,
}

impl LookupKey {
    pub fn new(key: &PartyKey, currency: Option<Currency>) -> LookupKey {
        LookupKey {
            id_type: key.id_type.clone(),
            identifier: key.identifier.clone(),
            sub_id: key.sub_id.clone(),
            currency,
        }
    }
}

struct CacheEntry {
    /// `None`: the oracle knows no (known) holder; cached too.
    holder: Option<FspName>,
    expires: Instant,
    /// Matches the entry's place in `order`; older places are stale.
    seq: u64,
}

#[derive(Default)]
struct CacheState {
    map: HashMap<LookupKey, CacheEntry>,
    /// Keys in insertion order, oldest first, with the `seq` they were
    /// inserted with (a key inserted again leaves a stale place behind).
    order: VecDeque<(LookupKey, u64)>,
    next_seq: u64,
}

/// Oracle answers, positive and negative, each for at most `ttl`, at most
/// `capacity` of them (the oldest is evicted first). The lock is held only
/// for a map operation, never across an await.
pub struct LookupCache {
    ttl: Duration,
    capacity: usize,
    state: Mutex<CacheState>,
}

impl LookupCache {
    pub fn new(ttl: Duration, capacity: usize) -> LookupCache {
        LookupCache {
            ttl,
            capacity,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, CacheState> {
        // No operation leaves the state half-changed if it panics.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached answer for `key` at `now`: `Some(Some(fsp))`, `Some(None)`
    /// (cached "no holder"), or `None` when not cached or expired.
    pub fn get(&self, key: &LookupKey, now: Instant) -> Option<Option<FspName>> {
        let mut state = self.lock();
        match state.map.get(key) {
            Some(entry) if entry.expires > now => Some(entry.holder),
            Some(_) => {
                state.map.remove(key);
                None
            }
            None => None,
        }
    }

    pub fn insert(&self, key: LookupKey, holder: Option<FspName>, now: Instant) {
        if self.capacity == 0 || self.ttl.is_zero() {
            return;
        }
        let mut guard = self.lock();
        let CacheState {
            map,
            order,
            next_seq,
        } = &mut *guard;
        // Expired and stale places at the front go first: entries expire
        // in insertion order, as the TTL is the same for all.
        while let Some((front, seq)) = order.front() {
            match map.get(front) {
                Some(entry) if entry.seq == *seq => {
                    if entry.expires > now {
                        break;
                    }
                    map.remove(front);
                }
                _ => {}
            }
            order.pop_front();
        }
        let seq = *next_seq;
        *next_seq += 1;
        let entry = CacheEntry {
            holder,
            expires: now + self.ttl,
            seq,
        };
        if map.insert(key.clone(), entry).is_none() {
            while map.len() > self.capacity {
                let Some((oldest, seq)) = order.pop_front() else {
                    break;
                };
                if map.get(&oldest).is_some_and(|entry| entry.seq == seq) {
                    map.remove(&oldest);
                }
            }
        }
        order.push_back((key, seq));
        if order.len() > 2 * self.capacity.max(16) {
            order.retain(|(key, seq)| map.get(key).is_some_and(|entry| entry.seq == *seq));
        }
    }

    pub fn clear(&self) {
        let mut state = self.lock();
        state.map.clear();
        state.order.clear();
    }

    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// ----- the oracles --------------------------------------------------------

/// What asking the oracles gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolution {
    /// An oracle named this (known) FSP as the holder.
    Holder(FspName),
    /// No oracle serves the party's type.
    NoOracle,
    /// The oracle knows no holder, or none that is a participant here.
    NotFound { oracle: u32 },
    /// The oracle could not be asked or gave an unusable answer.
    Failed { oracle: u32, reason: String },
}

/// The configured oracles (live ones, in id order), the answer cache, and
/// the pooled HTTP client that asks them.
pub struct Oracles {
    directory: RwLock<Vec<OracleRow>>,
    /// Bumped by every [`Oracles::replace`], so that an answer from before
    /// a configuration change is not cached after it.
    generation: AtomicU64,
    cache: LookupCache,
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    request_timeout: Duration,
    next_warning_ms: AtomicU64,
    failures: AtomicU64,
    epoch: Instant,
}

impl Oracles {
    pub fn new(config: &HubConfig) -> Oracles {
        let tls = match &config.callback_tls {
            Some(tls) => tls.clone(),
            None => crate::tls::client_config(None, None)
                .expect("a TLS client configuration without files cannot fail"),
        };
        let connector = crate::tls::https_connector(tls, config.oracle_connect_timeout);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(TokioTimer::new())
            .build(connector);
        Oracles {
            directory: RwLock::default(),
            generation: AtomicU64::new(0),
            cache: LookupCache::new(config.oracle_cache_ttl, config.oracle_cache_capacity),
            client,
            request_timeout: config.oracle_request_timeout,
            next_warning_ms: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Replaces the configuration (live rows) and forgets cached answers,
    /// which may have come from an oracle that changed.
    pub fn replace(&self, rows: Vec<OracleRow>) {
        let live = rows.into_iter().filter(|row| row.active).collect();
        *self.directory.write().unwrap_or_else(|e| e.into_inner()) = live;
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.cache.clear();
    }

    /// One oracle created or changed (a committed record): its row
    /// replaces the old, cached answers are forgotten.
    pub(crate) fn upsert(&self, row: OracleRow) {
        {
            let mut directory = self.directory.write().unwrap_or_else(|e| e.into_inner());
            directory.retain(|live| live.id != row.id);
            if row.active {
                let at = directory.partition_point(|live| live.id < row.id);
                directory.insert(at, row);
            }
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.cache.clear();
    }

    /// One oracle deleted (a committed record).
    pub(crate) fn delete(&self, id: u32) {
        self.directory
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|live| live.id != id);
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.cache.clear();
    }

    /// The live oracles, in id order.
    pub fn list(&self) -> Vec<OracleRow> {
        self.directory
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn cache(&self) -> &LookupCache {
        &self.cache
    }

    /// The oracle for a lookup of `id_type`: the one for `currency` if the
    /// request named one, else the type's default, else the one for any
    /// currency, else the type's first.
    pub fn pick(&self, id_type: &str, currency: Option<Currency>) -> Option<OracleRow> {
        let directory = self.directory.read().unwrap_or_else(|e| e.into_inner());
        let of_type = || directory.iter().filter(|row| row.id_type == id_type);
        currency
            .and_then(|currency| of_type().find(|row| row.currency == Some(currency)))
            .or_else(|| of_type().find(|row| row.is_default))
            .or_else(|| of_type().find(|row| row.currency.is_none()))
            .or_else(|| of_type().next())
            .cloned()
    }

    /// Who holds `key`, from the cache or by asking the oracle for its type.
    /// `known` says whether an FSP the oracle names may be routed to; the
    /// first such one is the holder. Nothing is locked across the request.
    pub async fn resolve(
        &self,
        key: &PartyKey,
        currency: Option<Currency>,
        source: FspName,
        known: impl Fn(FspName) -> bool,
    ) -> Resolution {
        let generation = self.generation.load(Ordering::SeqCst);
        let Some(oracle) = self.pick(&key.id_type, currency) else {
            return Resolution::NoOracle;
        };
        let lookup = LookupKey::new(key, currency);
        if let Some(cached) = self.cache.get(&lookup, Instant::now()) {
            return match cached {
                Some(fsp) => Resolution::Holder(fsp),
                None => Resolution::NotFound { oracle: oracle.id },
            };
        }
        match self.ask(&oracle, key, currency, source).await {
            Ok(fsp_ids) => {
                let holder = fsp_ids
                    .iter()
                    .filter_map(|id| FspName::new(id))
                    .find(|&fsp| known(fsp));
                if self.generation.load(Ordering::SeqCst) == generation {
                    self.cache.insert(lookup, holder, Instant::now());
                }
                match holder {
                    Some(fsp) => Resolution::Holder(fsp),
                    None => Resolution::NotFound { oracle: oracle.id },
                }
            }
            Err(reason) => {
                self.warn_failure(&oracle, &reason);
                Resolution::Failed {
                    oracle: oracle.id,
                    reason,
                }
            }
        }
    }

    fn warn_failure(&self, oracle: &OracleRow, reason: &str) {
        let total = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(oracle = oracle.id, reason, "oracle lookup failed");
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let next = self.next_warning_ms.load(Ordering::Relaxed);
        if now_ms >= next
            && self
                .next_warning_ms
                .compare_exchange(
                    next,
                    now_ms + WARN_INTERVAL_MS,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            tracing::warn!(
                oracle = oracle.id,
                endpoint = %oracle.endpoint,
                reason,
                failures_total = total,
                "oracle lookup failed"
            );
        }
    }

    /// `GET {endpoint}/participants/{Type}/{ID}[?partySubIdOrType=..][&currency=..]`:
    /// the `fspId`s of the answer's `partyList`, in order. An HTTP 404 is an
    /// empty list (ALS oracles answer an unknown party so).
    async fn ask(
        &self,
        oracle: &OracleRow,
        key: &PartyKey,
        currency: Option<Currency>,
        source: FspName,
    ) -> Result<Vec<String>, String> {
        let uri = lookup_uri(&oracle.endpoint, key, currency)?;
        let mut request = Request::get(uri)
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("cannot build the request: {e}"))?;
        let headers = request.headers_mut();
        for (name, value) in [
            (
                ACCEPT,
                "application/vnd.interoperability.participants+json;version=1".to_string(),
            ),
            (
                CONTENT_TYPE,
                "application/vnd.interoperability.participants+json;version=1.1".to_string(),
            ),
            (DATE, httpdate::fmt_http_date(std::time::SystemTime::now())),
        ] {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        }
        if let Ok(value) = HeaderValue::from_str(source.as_str()) {
            headers.insert("fspiop-source", value);
        }
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| error_chain(&e))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| format!("reading the answer: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.request_timeout, exchange)
            .await
            .map_err(|_| format!("no answer within {:?}", self.request_timeout))??;
        if status == StatusCode::NOT_FOUND {
            return Ok(Vec::new());
        }
        if !status.is_success() {
            return Err(format!("answered HTTP {}", status.as_u16()));
        }
        parse_party_list(&body)
    }
}

#[derive(Deserialize)]
struct OracleAnswer {
    #[serde(default, rename = "partyList")]
    party_list: Option<Vec<OracleParty>>,
}

#[derive(Deserialize)]
struct OracleParty {
    #[serde(default, rename = "fspId")]
    fsp_id: Option<String>,
}

/// The `fspId`s of a `{"partyList":[{"fspId":..},..]}` answer; entries
/// without one are skipped, a missing or null list is empty.
pub fn parse_party_list(body: &[u8]) -> Result<Vec<String>, String> {
    let answer: OracleAnswer = serde_json::from_slice(body)
        .map_err(|e| format!("answered a body that is not a partyList: {e}"))?;
    Ok(answer
        .party_list
        .unwrap_or_default()
        .into_iter()
        .filter_map(|party| party.fsp_id)
        .collect())
}

/// `{endpoint}/participants/{Type}/{ID}` with the query the lookup needs,
/// each part percent-encoded.
pub fn lookup_uri(
    endpoint: &str,
    key: &PartyKey,
    currency: Option<Currency>,
) -> Result<Uri, String> {
    let mut text = endpoint.trim_end_matches('/').to_string();
    text.push_str("/participants/");
    push_encoded(&mut text, &key.id_type);
    text.push('/');
    push_encoded(&mut text, &key.identifier);
    let mut separator = '?';
    if let Some(sub_id) = &key.sub_id {
        text.push(separator);
        text.push_str("partySubIdOrType=");
        push_encoded(&mut text, sub_id);
        separator = '&';
    }
    if let Some(currency) = currency {
        text.push(separator);
        text.push_str("currency=");
        text.push_str(currency.as_str());
    }
    text.parse::<Uri>()
        .map_err(|e| format!("endpoint {endpoint:?} does not make a URL: {e}"))
}

/// Appends `text` with every byte outside RFC 3986's unreserved set
/// percent-encoded.
fn push_encoded(out: &mut String, text: &str) {
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

/// An error with its sources, e.g. `client error (Connect): tcp connect
/// error: Connection refused`.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

// ----- admin API ------------------------------------------------------------

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/oracles", get(list_oracles).post(create_oracle))
        .route("/oracles/:id", put(update_oracle).delete(delete_oracle))
        .with_state(hub)
}

/// ALS's `OracleInfo` shape, with the id and `isActive`.
fn oracle_json(row: &OracleRow) -> Value {
    json!({
        "oracleId": row.id,
        "oracleIdType": row.id_type,
        "endpoint": { "value": row.endpoint, "endpointType": "URL" },
        "currency": row.currency.map(|c| c.as_str().to_string()),
        "isDefault": row.is_default,
        "isActive": u8::from(row.active),
    })
}

/// `GET /oracles[?type=..][&currency=..]`: live oracles, in id order.
async fn list_oracles(
    State(hub): State<Arc<Hub>>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, HubError> {
    let rows = read_oracles(&hub).await?;
    let body: Vec<Value> = rows
        .iter()
        .filter(|row| query.get("type").is_none_or(|t| *t == row.id_type))
        .filter(|row| {
            query
                .get("currency")
                .is_none_or(|c| row.currency.is_some_and(|own| own.as_str() == c))
        })
        .map(oracle_json)
        .collect();
    Ok(axum::Json(body).into_response())
}

async fn read_oracles(hub: &Hub) -> Result<Vec<OracleRow>, HubError> {
    Ok(hub.ask(ReadOracles {}).await??)
}

/// An oracle's configuration as a request gives it.
struct OracleFields {
    id_type: String,
    endpoint: String,
    currency: Option<Currency>,
    is_default: bool,
}

fn invalid(description: impl Into<String>) -> HubError {
    HubError::new(ErrorCode::GENERIC_VALIDATION_ERROR, description)
}

fn missing(element: &str) -> HubError {
    HubError::new(
        ErrorCode::MISSING_MANDATORY_ELEMENT,
        format!("Missing mandatory element - {element}"),
    )
}

fn parse_object(body: &Bytes) -> Result<Map<String, Value>, HubError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(HubError::new(
            ErrorCode::MALFORMED_SYNTAX,
            "Malformed syntax - the body must be a JSON object",
        )),
        Err(error) => Err(HubError::new(
            ErrorCode::MALFORMED_SYNTAX,
            format!("Malformed syntax - {error}"),
        )),
    }
}

/// Reads the fields of a `POST` (`current` is `None`: `oracleIdType` and
/// `endpoint.value` are required) or a `PUT` (absent fields keep their
/// `current` value; `"currency": null` clears the currency).
fn oracle_fields(
    body: &Map<String, Value>,
    current: Option<&OracleRow>,
) -> Result<OracleFields, HubError> {
    let id_type = match body.get("oracleIdType") {
        Some(Value::String(text)) => fspiop::PartyIdType::parse(text)
            .map(|t| t.as_str().to_string())
            .ok_or_else(|| {
                invalid(format!(
                    "oracleIdType '{text}' is not an FSPIOP PartyIdType (MSISDN, EMAIL, PERSONAL_ID, BUSINESS, DEVICE, ACCOUNT_ID, IBAN, ALIAS)"
                ))
            })?,
        None | Some(Value::Null) => match current {
            Some(row) => row.id_type.clone(),
            None => return Err(missing("oracleIdType")),
        },
        Some(_) => return Err(invalid("oracleIdType must be a string")),
    };
    let endpoint = match body.get("endpoint") {
        Some(Value::Object(endpoint)) => {
            match endpoint.get("endpointType") {
                None | Some(Value::Null) => {}
                Some(Value::String(kind)) if kind == "URL" => {}
                Some(_) => return Err(invalid("endpoint.endpointType must be URL")),
            }
            match endpoint.get("value") {
                Some(Value::String(value)) => Some(value.clone()),
                None | Some(Value::Null) => None,
                Some(_) => return Err(invalid("endpoint.value must be a string")),
            }
        }
        None | Some(Value::Null) => None,
        Some(_) => return Err(invalid("endpoint must be an object {value, endpointType}")),
    };
    let endpoint = match (endpoint, current) {
        (Some(value), _) => value,
        (None, Some(row)) => row.endpoint.clone(),
        (None, None) => return Err(missing("endpoint.value")),
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(invalid(format!(
            "endpoint.value '{endpoint}' must be an http:// or https:// URL (as callback URLs)"
        )));
    }
    let currency = match body.get("currency") {
        Some(Value::String(code)) => Some(
            Currency::parse(code)
                .ok_or_else(|| invalid(format!("currency '{code}' is not an ISO 4217 currency")))?,
        ),
        Some(Value::Null) => None,
        None => current.and_then(|row| row.currency),
        Some(_) => return Err(invalid("currency must be a string or null")),
    };
    let is_default = match body.get("isDefault") {
        Some(Value::Bool(flag)) => *flag,
        Some(Value::Number(n)) if n.as_u64() == Some(1) => true,
        Some(Value::Number(n)) if n.as_u64() == Some(0) => false,
        None | Some(Value::Null) => current.is_some_and(|row| row.is_default),
        Some(_) => return Err(invalid("isDefault must be true, false, 1 or 0")),
    };
    Ok(OracleFields {
        id_type,
        endpoint,
        currency,
        is_default,
    })
}

fn oracle_id(text: &str) -> Result<u32, HubError> {
    text.parse::<u32>()
        .ok()
        .filter(|&id| id > 0)
        .ok_or_else(|| {
            HubError::new(
                ErrorCode::MALFORMED_SYNTAX,
                format!("Malformed syntax - '{text}' is not an oracle id"),
            )
        })
}

/// Runs one oracle change with its audit event (the hub's copy of the
/// configuration follows from the committed record: `references.rs`).
async fn change<R, T>(hub: &Hub, change: crate::audit::Change, request: R) -> Result<T, HubError>
where
    R: ledger::Request<Reply = Result<T, Rejection>>,
{
    Ok(hub.ask_audited(change, request).await??)
}

/// `POST /oracles` → 201 `{"oracleId": id}`.
async fn create_oracle(State(hub): State<Arc<Hub>>, body: Bytes) -> Result<Response, HubError> {
    let fields = oracle_fields(&parse_object(&body)?, None)?;
    crate::callback_url::check(
        "endpoint.value",
        &fields.endpoint,
        &hub.config.callback_allow,
    )?;
    let command = CreateOracle {
        id_type: fields.id_type,
        endpoint: fields.endpoint,
        currency: fields.currency,
        is_default: fields.is_default,
    };
    let audit = crate::audit::Change::oracles("oracle.create", "oracle".to_string());
    let id = change(&hub, audit, command).await?;
    Ok((StatusCode::CREATED, axum::Json(json!({ "oracleId": id }))).into_response())
}

fn not_found(id: u32) -> HubError {
    HubError::new(
        ErrorCode::ID_NOT_FOUND,
        format!("Generic ID not found - oracle {id} not found"),
    )
}

/// `PUT /oracles/{ID}` → 204; fields left out keep their value.
async fn update_oracle(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let id = oracle_id(&id)?;
    let body = parse_object(&body)?;
    let current = hub
        .oracles
        .list()
        .into_iter()
        .find(|row| row.id == id)
        .ok_or_else(|| not_found(id))?;
    let fields = oracle_fields(&body, Some(&current))?;
    crate::callback_url::check(
        "endpoint.value",
        &fields.endpoint,
        &hub.config.callback_allow,
    )?;
    let command = UpdateOracle {
        id,
        id_type: fields.id_type,
        endpoint: fields.endpoint,
        currency: fields.currency,
        is_default: fields.is_default,
    };
    let audit = crate::audit::Change::oracles("oracle.update", format!("oracle/{id}"));
    change(&hub, audit, command).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE /oracles/{ID}` → 204.
async fn delete_oracle(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
) -> Result<Response, HubError> {
    let id = oracle_id(&id)?;
    let audit = crate::audit::Change::oracles("oracle.delete", format!("oracle/{id}"));
    change(&hub, audit, DeleteOracle { id }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(identifier: &str) -> LookupKey {
        LookupKey {
            id_type: "MSISDN".into(),
            identifier: identifier.into(),
            sub_id: None,
            currency: None,
        }
    }

    fn fsp(name: &str) -> FspName {
        FspName::new(name).unwrap()
    }

    #[test]
    fn answers_expire_after_the_ttl() {
        let cache = LookupCache::new(Duration::from_secs(60), 10);
        let t0 = Instant::now();
        cache.insert(key("1"), Some(fsp("payeefsp")), t0);
        cache.insert(key("2"), None, t0);
        assert_eq!(cache.get(&key("1"), t0), Some(Some(fsp("payeefsp"))));
        assert_eq!(cache.get(&key("2"), t0), Some(None), "negative answers too");
        assert_eq!(cache.get(&key("3"), t0), None);
        let later = t0 + Duration::from_secs(59);
        assert_eq!(cache.get(&key("1"), later), Some(Some(fsp("payeefsp"))));
        let expired = t0 + Duration::from_secs(60);
        assert_eq!(cache.get(&key("1"), expired), None);
        assert_eq!(cache.get(&key("2"), expired), None);
        assert!(cache.is_empty(), "expired entries are dropped when seen");
        // A new answer replaces an expired one.
        cache.insert(key("1"), Some(fsp("other")), expired);
        assert_eq!(cache.get(&key("1"), expired), Some(Some(fsp("other"))));
    }

    #[test]
    fn the_cache_is_bounded_and_evicts_the_oldest() {
        let cache = LookupCache::new(Duration::from_secs(60), 3);
        let t0 = Instant::now();
        for (i, id) in ["1", "2", "3", "4"].into_iter().enumerate() {
            cache.insert(key(id), None, t0 + Duration::from_millis(i as u64));
        }
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&key("1"), t0), None, "the oldest went first");
        for id in ["2", "3", "4"] {
            assert_eq!(cache.get(&key(id), t0), Some(None), "{id}");
        }
        // Replacing a key neither grows the cache nor evicts another.
        cache.insert(key("3"), Some(fsp("x")), t0);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&key("2"), t0), Some(None));
        // Many re-inserts keep the insertion queue bounded too.
        for _ in 0..1000 {
            cache.insert(key("4"), None, t0);
        }
        assert_eq!(cache.len(), 3);
        assert!(cache.lock().order.len() <= 2 * 16 + 1);
        // The next new key evicts the oldest live entry (2), not 3 or 4.
        cache.insert(key("5"), None, t0);
        assert_eq!(cache.get(&key("2"), t0), None);
        assert_eq!(cache.get(&key("3"), t0), Some(Some(fsp("x"))));
        assert_eq!(cache.get(&key("5"), t0), Some(None));
    }

    #[test]
    fn expired_entries_make_room_before_live_ones_are_evicted() {
        let cache = LookupCache::new(Duration::from_secs(10), 2);
        let t0 = Instant::now();
        cache.insert(key("old"), None, t0);
        cache.insert(key("live"), None, t0 + Duration::from_secs(5));
        let t1 = t0 + Duration::from_secs(11);
        cache.insert(key("new"), None, t1);
        assert_eq!(cache.get(&key("live"), t1), Some(None));
        assert_eq!(cache.get(&key("new"), t1), Some(None));
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_zero_capacity_or_ttl_caches_nothing() {
        let t0 = Instant::now();
        for cache in [
            LookupCache::new(Duration::ZERO, 10),
            LookupCache::new(Duration::from_secs(1), 0),
        ] {
            cache.insert(key("1"), None, t0);
            assert_eq!(cache.get(&key("1"), t0), None);
        }
    }

    #[test]
    fn lookup_urls_are_encoded() {
        let party = PartyKey {
            id_type: "EMAIL".into(),
            identifier: "a b@x.org".into(),
            sub_id: Some("home/1".into()),
        };
        let uri = lookup_uri("http://oracle:8080/api/", &party, Currency::parse("USD")).unwrap();
        assert_eq!(
            uri.to_string(),
            "http://oracle:8080/api/participants/EMAIL/a%20b%40x.org?partySubIdOrType=home%2F1&currency=USD"
        );
        let party = PartyKey {
            id_type: "MSISDN".into(),
            identifier: "123".into(),
            sub_id: None,
        };
        assert_eq!(
            lookup_uri("http://oracle", &party, None)
                .unwrap()
                .to_string(),
            "http://oracle/participants/MSISDN/123"
        );
    }

    #[test]
    fn party_lists_are_read_leniently() {
        assert_eq!(
            parse_party_list(br#"{"partyList":[{"fspId":"a","currency":"USD"},{},{"fspId":"b"}]}"#),
            Ok(vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(parse_party_list(br#"{"partyList":[]}"#), Ok(vec![]));
        assert_eq!(parse_party_list(br#"{"partyList":null}"#), Ok(vec![]));
        assert_eq!(parse_party_list(br#"{}"#), Ok(vec![]));
        assert!(parse_party_list(b"not json").is_err());
        assert!(parse_party_list(br#"{"partyList":"x"}"#).is_err());
    }

    fn row(id: u32, id_type: &str, currency: Option<&str>, is_default: bool) -> OracleRow {
        OracleRow {
            id,
            id_type: id_type.into(),
            endpoint: format!("http://oracle/{id}"),
            currency: currency.and_then(Currency::parse),
            is_default,
            active: true,
        }
    }

    #[tokio::test]
    async fn the_oracle_is_picked_by_currency_then_default_then_any() {
        let oracles = Oracles::new(&HubConfig::new(fsp("Hub")));
        oracles.replace(vec![
            row(1, "MSISDN", Some("EUR"), false),
            row(2, "MSISDN", Some("USD"), false),
            row(3, "MSISDN", None, true),
            row(4, "EMAIL", Some("USD"), false),
            OracleRow {
                active: false,
                ..row(5, "ALIAS", None, true)
            },
        ]);
        let pick = |id_type: &str, currency: Option<&str>| {
            oracles
                .pick(id_type, currency.and_then(Currency::parse))
                .map(|row| row.id)
        };
        assert_eq!(pick("MSISDN", Some("USD")), Some(2));
        assert_eq!(pick("MSISDN", Some("EUR")), Some(1));
        assert_eq!(pick("MSISDN", Some("KES")), Some(3), "the default");
        assert_eq!(pick("MSISDN", None), Some(3));
        assert_eq!(pick("EMAIL", None), Some(4), "the only one of its type");
        assert_eq!(pick("ALIAS", None), None, "deleted");
        assert_eq!(pick("IBAN", None), None);
    }
}
