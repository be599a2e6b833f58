//! Account lookup, as Mojaloop's account-lookup-service does it with the
//! built-in oracle: the participant registry (`/participants/{Type}/{ID}`)
//! and party lookup (`/parties/{Type}/{ID}`) routed to the FSP holding the
//! party. Lookups read an in-memory table; only registrations go through
//! the ledger (so they are durable before they are acknowledged). A party
//! the registry does not hold is looked up in the external oracle
//! configured for its type, if any (see [`crate::oracles`]). The pause
//! rule (`ledger::modes`) applies to both: a lookup's requester pays the
//! holder, and a DFSP that may not receive (send-only, suspended)
//! registers no party — 3201, as a lookup of its parties is answered.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use fspiop::Resource;
use ledger::request::{DeleteParty, RegisterParty};
use ledger::{Currency, ErrorCode, FspName, PartyKey, PartyView};

use crate::answers;
use crate::notify::Origin;
use crate::oracles::Resolution;
use crate::wire::{
    check_headers, forwarded_headers as forwarded, hub_headers, Caller, Reply, Shape,
};
use crate::{Hub, HubError};

/// Who holds which party: the read side of the built-in oracle. (Who is
/// waiting for which party's answer is in [`crate::answers`].)
#[derive(Default)]
pub struct Parties {
    by_key: RwLock<HashMap<PartyKey, (FspName, Option<Currency>)>>,
}

impl Parties {
    /// Adds every registered party as the ledger holds them.
    pub fn load(&self, views: Vec<PartyView>) {
        let mut map = self.by_key.write().unwrap_or_else(|e| e.into_inner());
        for view in views {
            map.insert(view.key, (view.fsp, view.currency));
        }
    }

    pub fn holder(&self, key: &PartyKey) -> Option<FspName> {
        self.by_key
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .map(|(fsp, _)| *fsp)
    }

    pub(crate) fn set(&self, key: PartyKey, fsp: FspName, currency: Option<Currency>) {
        self.by_key
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (fsp, currency));
    }

    pub(crate) fn remove(&self, key: &PartyKey) {
        self.by_key
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

pub fn routes() -> Router<Arc<Hub>> {
    let registry = || post(register_party).get(answer_lookup).delete(delete_party);
    Router::new()
        .route("/participants", post(register_batch))
        .route("/participants/:id_type/:id", registry())
        .route("/participants/:id_type/:id/:sub_id", registry())
        .route(
            "/participants/:id_type/:id/error",
            put(put_participant_error),
        )
        .route(
            "/participants/:id_type/:id/:sub_id/error",
            put(put_participant_error),
        )
        .route("/parties/:id_type/:id", get(route_get_party).put(put_party))
        .route("/parties/:id_type/:id/error", put(put_party_error))
        .route(
            "/parties/:id_type/:id/:sub_id",
            get(route_get_party).put(put_party),
        )
        .route("/parties/:id_type/:id/:sub_id/error", put(put_party_error))
}

/// The party a path names: `{Type}/{ID}` with an optional `/{SubId}`,
/// checked (3101 naming the parameter at fault). An id that would be URL
/// syntax in a callback (`..%2F`, `%3F`, `%0D%0A`, ...) is also counted as
/// a refusal: no DFSP has a reason to send one.
struct PartyPath(PartyKey);

#[axum::async_trait]
impl axum::extract::FromRequestParts<Arc<Hub>> for PartyPath {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        hub: &Arc<Hub>,
    ) -> Result<PartyPath, Response> {
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, hub)
            .await
            .map_err(IntoResponse::into_response)?;
        let param = |name: &str| params.get(name).map(String::as_str);
        let (id, sub_id) = (param("id").unwrap_or(""), param("sub_id"));
        party_key(param("id_type").unwrap_or(""), id, sub_id)
            .map(PartyPath)
            .map_err(|error| {
                if fspiop::is_url_syntax(id) || sub_id.is_some_and(fspiop::is_url_syntax) {
                    let claimed = parts
                        .headers
                        .get("fspiop-source")
                        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
                        .unwrap_or_default();
                    hub.refuse(
                        crate::refused::Class::PathSyntax,
                        &claimed,
                        &format!(
                            "{} {} (decoded ID {id:?}, SubId {sub_id:?}): {}",
                            parts.method,
                            parts.uri.path(),
                            error.description
                        ),
                    );
                }
                error.into_response()
            })
    }
}

fn party_key(id_type: &str, identifier: &str, sub_id: Option<&str>) -> Result<PartyKey, HubError> {
    let id_type = fspiop::parse_party_id_type(id_type)?;
    fspiop::check_party_identifier(identifier)?;
    if let Some(sub_id) = sub_id {
        fspiop::check_party_sub_id(sub_id)?;
    }
    Ok(PartyKey {
        id_type: id_type.as_str().to_string(),
        identifier: identifier.to_string(),
        sub_id: sub_id.map(str::to_string),
    })
}

fn variables(key: &PartyKey) -> [(&'static str, &str); 3] {
    [
        ("partyIdType", key.id_type.as_str()),
        ("partyIdentifier", key.identifier.as_str()),
        ("partySubIdOrType", key.sub_id.as_deref().unwrap_or("")),
    ]
}

/// The endpoint type for `base`, or its `_SUB_ID_` variant when the party
/// has a sub-id (`FSPIOP_CALLBACK_URL_PARTIES_GET` →
/// `FSPIOP_CALLBACK_URL_PARTIES_SUB_ID_GET`).
fn endpoint_type(base: &str, operation: &str, key: &PartyKey) -> String {
    match key.sub_id {
        Some(_) => format!("FSPIOP_CALLBACK_URL_{base}_SUB_ID_{operation}"),
        None => format!("FSPIOP_CALLBACK_URL_{base}_{operation}"),
    }
}

/// FSPIOP 3201 Destination FSP Error.
const DESTINATION_FSP_ERROR: ErrorCode = ErrorCode(3201);

/// FSPIOP 2006, which ALS raises when an oracle cannot be asked.
const PARTY_RESOLUTION_FAILED: ErrorCode = ErrorCode(2006);

/// The `currency` a lookup's query string names, if any: it selects the
/// oracle and is passed on to it.
fn query_currency(query: Option<&str>) -> Result<Option<Currency>, HubError> {
    let Some(query) = query else {
        return Ok(None);
    };
    let Some(value) = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find_map(|(name, value)| (name == "currency").then_some(value))
    else {
        return Ok(None);
    };
    Currency::parse(value).map(Some).ok_or_else(|| {
        HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!(
                "Generic validation error - query parameter currency: '{value}' is not an ISO 4217 currency"
            ),
        )
    })
}

/// Who holds a party, as far as the hub can tell.
enum Holder {
    Found(FspName),
    /// Neither the registry nor the party type's oracle (if any) knows one.
    Unknown {
        oracle: Option<u32>,
    },
    /// The oracle could not be asked (the reason is logged by the oracles).
    Unresolved {
        oracle: u32,
    },
}

impl Hub {
    /// The FSP holding `key`: from the built-in registry (memory only, no
    /// await), else from the external oracle for its type, whose answers
    /// are cached. Only FSPs with endpoints here count as holders.
    async fn find_holder(
        &self,
        key: &PartyKey,
        currency: Option<Currency>,
        source: FspName,
    ) -> Holder {
        // A type an external oracle serves is the oracle's alone: an entry
        // of the built-in registry (made before the oracle was configured)
        // must not override it.
        if self.oracles.pick(&key.id_type, currency).is_none() {
            if let Some(fsp) = self.parties.holder(key) {
                return Holder::Found(fsp);
            }
        }
        let hub_name = self.config.hub_name;
        let known = |fsp: FspName| fsp != hub_name && self.endpoints.contains(fsp);
        match self.oracles.resolve(key, currency, source, known).await {
            Resolution::Holder(fsp) => Holder::Found(fsp),
            Resolution::NoOracle => Holder::Unknown { oracle: None },
            Resolution::NotFound { oracle } => Holder::Unknown {
                oracle: Some(oracle),
            },
            Resolution::Failed { oracle, .. } => Holder::Unresolved { oracle },
        }
    }

    /// An error from the hub to `destination` about `key`, at its
    /// `{base}_PUT_ERROR` endpoint (or the sub-id one).
    /// `via`: the proxy that carried the request this is about, if one
    /// did (the error goes back through it).
    #[allow(clippy::too_many_arguments)]
    fn send_party_error(
        &self,
        api: LookupApi,
        (destination, via): (FspName, Option<FspName>),
        key: &PartyKey,
        code: ErrorCode,
        description: &str,
        reply: Reply,
    ) {
        let body = Bytes::from(fspiop::error_body(code, description));
        let headers = hub_headers(self, api.resource(), destination, reply);
        let endpoint = endpoint_type(api.endpoint_base(), "PUT_ERROR", key);
        if !self.send_callback_via(
            via,
            Origin::Hub,
            destination,
            &endpoint,
            &variables(key),
            Method::PUT,
            headers,
            body,
        ) {
            tracing::warn!(%destination, endpoint, party = %key, "no error endpoint registered; callback dropped");
        }
    }
}

/// The two lookup resources, with what their error callbacks need.
#[derive(Clone, Copy)]
enum LookupApi {
    Participants,
    Parties,
}

impl LookupApi {
    fn resource(self) -> Resource {
        match self {
            LookupApi::Participants => Resource::Participants,
            LookupApi::Parties => Resource::Parties,
        }
    }

    /// The endpoint type's stem: `FSPIOP_CALLBACK_URL_{stem}_PUT_ERROR`.
    fn endpoint_base(self) -> &'static str {
        match self {
            LookupApi::Participants => "PARTICIPANT",
            LookupApi::Parties => "PARTIES",
        }
    }
}

// ----- participant registry -----------------------------------------------

/// `PUT /participants/{Type}/{ID}` from the hub to the caller.
fn send_participant_put(hub: &Hub, caller: &Caller, key: &PartyKey, body: Bytes) {
    let headers = hub_headers(hub, Resource::Participants, caller.source, caller.reply());
    let endpoint = endpoint_type("PARTICIPANT", "PUT", key);
    if !hub.send_callback(
        Origin::Hub,
        caller.source,
        &endpoint,
        &variables(key),
        Method::PUT,
        headers,
        body,
        None,
    ) {
        tracing::warn!(destination = %caller.source, endpoint, "no callback endpoint registered; callback dropped");
    }
}

async fn register_party(
    State(hub): State<Arc<Hub>>,
    PartyPath(key): PartyPath,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HubError> {
    let hub = hub.as_ref();
    let caller = check_headers(&headers, Resource::Participants, Shape::Post)?;
    let request = fspiop::parse_participant_post(&body)?;
    let reply = if let Some(oracle) = hub.oracles.pick(&key.id_type, None) {
        hub.refuse(
            crate::refused::Class::OracleServed,
            caller.source.as_str(),
            &format!("party {key} registered in the built-in registry"),
        );
        Err(ledger::Rejection::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!(
                "party type {} is served by external oracle {}: register the party there",
                key.id_type, oracle.id
            ),
        ))
    } else if request.fsp != caller.source {
        Err(ledger::Rejection::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!(
                "fspId '{}' is not the FSPIOP-Source '{}': an FSP registers only its own parties",
                request.fsp, caller.source
            ),
        ))
    } else if let Some(refusal) = hub.holder_refusal(caller.source, request.currency) {
        // A party is found to be paid: a holder that may not receive
        // would only be found to be refused (3201, as lookups say).
        Err(refusal)
    } else {
        let register = RegisterParty {
            key: key.clone(),
            fsp: request.fsp,
            currency: request.currency,
        };
        hub.ask(register).await?
    };
    match reply {
        Ok(()) => {
            let body = Bytes::from(fspiop::participant_put_body(&request.fsp));
            send_participant_put(hub, &caller, &key, body);
        }
        Err(error) => hub.send_party_error(
            LookupApi::Participants,
            (caller.source, caller.via),
            &key,
            error.code,
            &format!("{} - {}", error.code.description(), error.description),
            caller.reply(),
        ),
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

/// `GET /participants/{Type}/{ID}`: who holds the party, answered from
/// memory, or from the party type's external oracle.
async fn answer_lookup(
    State(hub): State<Arc<Hub>>,
    PartyPath(key): PartyPath,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, HubError> {
    let hub = hub.as_ref();
    let caller = check_headers(&headers, Resource::Participants, Shape::Get)?;
    let currency = query_currency(query.as_deref())?;
    let (code, description) = match hub.find_holder(&key, currency, caller.source).await {
        Holder::Found(fsp) => match hub.pause_refusal(caller.source, caller.source, fsp, currency) {
            // The requester would pay the holder (in the query's currency,
            // if any): the pause rule says whether it may (3202 or 3201,
            // as quoting-service words it).
            Some(refusal) => (refusal.code, described(&refusal)),
            None => {
                let body = Bytes::from(fspiop::participant_put_body(&fsp));
                send_participant_put(hub, &caller, &key, body);
                return Ok(StatusCode::ACCEPTED.into_response());
            }
        },
        Holder::Unknown { oracle: None } => (
            ErrorCode::ID_NOT_FOUND,
            format!("Generic ID not found - party {key} is not registered"),
        ),
        Holder::Unknown {
            oracle: Some(oracle),
        } => (
            ErrorCode::ID_NOT_FOUND,
            format!("Generic ID not found - oracle {oracle} knows no FSP holding party {key}"),
        ),
        // The reason is logged, not told to the DFSP.
        Holder::Unresolved { oracle } => (
            PARTY_RESOLUTION_FAILED,
            format!("Temporary party resolution failed - oracle {oracle} could not be asked about party {key}"),
        ),
    };
    hub.send_party_error(
        LookupApi::Participants,
        (caller.source, caller.via),
        &key,
        code,
        &description,
        caller.reply(),
    );
    Ok(StatusCode::ACCEPTED.into_response())
}

async fn delete_party(
    State(hub): State<Arc<Hub>>,
    PartyPath(key): PartyPath,
    headers: HeaderMap,
) -> Result<Response, HubError> {
    let hub = hub.as_ref();
    let caller = check_headers(&headers, Resource::Participants, Shape::Get)?;
    match hub
        .ask(DeleteParty {
            key: key.clone(),
            caller: caller.source,
        })
        .await?
    {
        Ok(()) => {
            let body = Bytes::from(fspiop::participant_put_body(&caller.source));
            send_participant_put(hub, &caller, &key, body);
        }
        Err(error) => hub.send_party_error(
            LookupApi::Participants,
            (caller.source, caller.via),
            &key,
            error.code,
            &format!("{} - {}", error.code.description(), error.description),
            caller.reply(),
        ),
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

/// Batch `POST /participants`: every party registered to the caller in one
/// batch of ledger commands; one `PUT /participants/{requestId}` answers all.
async fn register_batch(
    State(hub): State<Arc<Hub>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HubError> {
    let caller = check_headers(&headers, Resource::Participants, Shape::Post)?;
    let request = fspiop::parse_participants_batch(&body)?;
    let mut results: Vec<(PartyKey, Option<(ErrorCode, String)>)> =
        Vec::with_capacity(request.parties.len());
    let mut commands = Vec::new();
    let mut pending = Vec::new();
    // Each party is found to pay its holder: one that may not receive
    // registers none (3201, as lookups say), nor in a currency whose
    // account it has disabled; counted once per request.
    let paused = hub.holder_refusal(caller.source, request.currency);
    for item in &request.parties {
        let key = item.key.clone();
        if let Some(refusal) = &paused {
            results.push((key, Some((refusal.code, refusal.description.clone()))));
            continue;
        }
        if let Some(oracle) = hub.oracles.pick(&key.id_type, None) {
            hub.refuse(
                crate::refused::Class::OracleServed,
                caller.source.as_str(),
                &format!("party {key} registered in the built-in registry"),
            );
            let reason = format!(
                "party type {} is served by external oracle {}: register the party there",
                key.id_type, oracle.id
            );
            results.push((key, Some((ErrorCode::GENERIC_VALIDATION_ERROR, reason))));
            continue;
        }
        let fsp = item.fsp.unwrap_or(caller.source);
        if fsp != caller.source {
            let reason = format!("fspId '{fsp}' is not the FSPIOP-Source '{}'", caller.source);
            results.push((key, Some((ErrorCode::GENERIC_VALIDATION_ERROR, reason))));
            continue;
        }
        pending.push(results.len());
        results.push((key.clone(), None));
        commands.push(RegisterParty {
            key,
            fsp,
            currency: request.currency,
        });
    }
    let replies = hub.ask_all(commands).await?;
    for (index, reply) in pending.into_iter().zip(replies) {
        if let Err(error) = reply {
            results[index].1 = Some((error.code, error.description));
        }
    }
    let body = Bytes::from(fspiop::participants_batch_put_body(
        &results,
        request.currency,
    ));
    let headers = hub_headers(&hub, Resource::Participants, caller.source, caller.reply());
    let request_id = request.request_id.to_string();
    let vars = [("requestId", request_id.as_str())];
    if !hub.send_callback(
        Origin::Hub,
        caller.source,
        "FSPIOP_CALLBACK_URL_PARTICIPANT_BATCH_PUT",
        &vars,
        Method::PUT,
        headers,
        body,
        None,
    ) {
        tracing::warn!(destination = %caller.source, "no FSPIOP_CALLBACK_URL_PARTICIPANT_BATCH_PUT endpoint; callback dropped");
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

// ----- parties ------------------------------------------------------------

/// `GET /parties/{Type}/{ID}`: find the FSP holding the party (registry,
/// else the type's oracle, selected by the query's `currency` if any) and
/// forward the request to it; tell the requester if there is none (3204),
/// the oracle cannot be asked (2006), the holder has no endpoint for it
/// (3201) or the request cannot be delivered to the holder (1001).
async fn route_get_party(
    State(hub): State<Arc<Hub>>,
    PartyPath(key): PartyPath,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, HubError> {
    let caller = check_headers(&headers, Resource::Parties, Shape::Get)?;
    let currency = query_currency(query.as_deref())?;
    let (code, description) = match hub.find_holder(&key, currency, caller.source).await {
        Holder::Found(holder) => match hub.pause_refusal(caller.source, caller.source, holder, currency) {
            // Not asked at all: the requester would pay the holder (in the
            // query's currency, if any), and the pause rule says it may
            // not (3202 or 3201).
            Some(refusal) => (refusal.code, described(&refusal)),
            None => {
                forward_get_party(&hub, &key, &headers, &caller, holder)?;
                return Ok(StatusCode::ACCEPTED.into_response());
            }
        },
        Holder::Unknown { .. } if ask_every_proxy(&hub, &key, &headers, &caller, currency)? => {
            return Ok(StatusCode::ACCEPTED.into_response());
        }
        Holder::Unknown { oracle: None } => (
            ErrorCode(3204),
            format!("Party not found - no FSP holds party {key}"),
        ),
        Holder::Unknown {
            oracle: Some(oracle),
        } => (
            ErrorCode(3204),
            format!("Party not found - oracle {oracle} knows no FSP holding party {key}"),
        ),
        // The reason is logged, not told to the DFSP.
        Holder::Unresolved { oracle } => (
            PARTY_RESOLUTION_FAILED,
            format!("Temporary party resolution failed - oracle {oracle} could not be asked about party {key}"),
        ),
    };
    hub.send_party_error(
        LookupApi::Parties,
        (caller.source, caller.via),
        &key,
        code,
        &description,
        caller.reply(),
    );
    Ok(StatusCode::ACCEPTED.into_response())
}

/// Rule 3's on-demand discovery: a party no FSP of this scheme holds is
/// asked of every proxy that may be paid (its scheme may hold it), unless
/// the lookup itself came through a proxy (never sent round again: the
/// loop guard). Each proxy is a question of its own; the first answer
/// that names a holder wins (see `route_party_answer`). False when there
/// is no proxy to ask (the requester is told 3204 as before).
fn ask_every_proxy(
    hub: &Arc<Hub>,
    key: &PartyKey,
    headers: &HeaderMap,
    caller: &Caller,
    currency: Option<Currency>,
) -> Result<bool, HubError> {
    if caller.via.is_some() {
        return Ok(false);
    }
    let proxies: Vec<FspName> = hub
        .proxies
        .proxies()
        .into_iter()
        // A proxy that may not be paid (paused) or whose account in the
        // lookup's currency is disabled is not asked.
        .filter(|&proxy| {
            hub.endpoints
                .participant_mode(proxy)
                .is_some_and(|mode| mode.may_receive())
                && currency.is_none_or(|currency| !hub.endpoints.account_disabled(proxy, currency))
        })
        .collect();
    if proxies.is_empty() {
        return Ok(false);
    }
    let endpoint = endpoint_type("PARTIES", "GET", key);
    let question = answer_key(key);
    let mut asked = 0;
    for proxy in proxies {
        let asked_at = hub.await_answer(&question, caller.source, proxy)?;
        let (requester, reply, party, each) =
            (caller.source, caller.reply(), key.clone(), question.clone());
        let on_undelivered = hub.on_undelivered(
            question.clone(),
            requester,
            proxy,
            asked_at,
            move |hub, _code, _description| {
                // Told only once no proxy is left to answer.
                if hub
                    .answers
                    .awaiting(&each, requester, std::time::Instant::now())
                    == 0
                {
                    hub.send_party_error(
                        LookupApi::Parties,
                        (requester, None),
                        &party,
                        ErrorCode(3204),
                        &format!("Party not found - no scheme reached holds party {party}"),
                        reply,
                    );
                }
            },
        );
        if hub.send_callback_asking(
            proxy,
            &endpoint,
            &variables(key),
            Method::GET,
            forwarded(headers, true),
            on_undelivered,
        ) {
            asked += 1;
        } else {
            hub.answers.withdraw(&question, caller.source, proxy);
        }
    }
    Ok(asked > 0)
}

/// A refusal in an error callback's words: the code's, then why.
fn described(refusal: &ledger::Rejection) -> String {
    format!("{} - {}", refusal.code.description(), refusal.description)
}

/// The key under which a lookup of `key` awaits its answer.
fn answer_key(key: &PartyKey) -> answers::Key {
    answers::Key::new(Resource::Parties, key.to_string())
}

/// Forwards the requester's `GET /parties/...` to `holder`, which alone
/// may answer it (see [`crate::answers`]), or tells the requester (3201)
/// that `holder` has no endpoint for it, or (1001) that the request could
/// not be delivered to it, as ALS does.
fn forward_get_party(
    hub: &Arc<Hub>,
    key: &PartyKey,
    headers: &HeaderMap,
    caller: &crate::wire::Caller,
    holder: FspName,
) -> Result<(), HubError> {
    let mut forward = forwarded(headers, true);
    if let Ok(value) = HeaderValue::from_str(holder.as_str()) {
        forward.insert(HeaderName::from_static("fspiop-destination"), value);
    }
    let endpoint = endpoint_type("PARTIES", "GET", key);
    let question = answer_key(key);
    let asked_at = hub.await_answer_via(&question, caller.source, holder, caller.via)?;
    let (requester, reply, party) = (caller.source, caller.reply(), key.clone());
    let via = caller.via;
    let on_undelivered = hub.on_undelivered(
        question.clone(),
        requester,
        holder,
        asked_at,
        move |hub, code, description| {
            hub.send_party_error(
                LookupApi::Parties,
                (requester, via),
                &party,
                code,
                description,
                reply,
            );
        },
    );
    if !hub.send_callback_asking(
        holder,
        &endpoint,
        &variables(key),
        Method::GET,
        forward,
        on_undelivered,
    ) {
        hub.answers.withdraw(&question, caller.source, holder);
        hub.send_party_error(
            LookupApi::Parties,
            (caller.source, caller.via),
            key,
            DESTINATION_FSP_ERROR,
            &format!("Destination FSP Error - '{holder}' has no {endpoint} endpoint"),
            caller.reply(),
        );
    }
    Ok(())
}

/// The payee FSP's `PUT /parties/...` (or `.../error`), forwarded as its
/// original bytes to the requester named in FSPIOP-Destination.
async fn put_party(
    State(hub): State<Arc<Hub>>,
    PartyPath(key): PartyPath,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HubError> {
    route_party_answer(&hub, key, headers, body, false).await
}

async fn put_party_error(
    State(hub): State<Arc<Hub>>,
    PartyPath(key): PartyPath,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HubError> {
    route_party_answer(&hub, key, headers, body, true).await
}

/// Forwards an answer about a party only from the FSP the lookup went to,
/// only to an FSP that asked it (the named FSPIOP-Destination, or without
/// one the latest requester, as ALS routes it), only while the lookup is
/// pending; a `PUT` must name its sender as the party's `fspId`. Anything
/// else is refused (400, 3100) and nothing is forwarded.
async fn route_party_answer(
    hub: &Hub,
    key: PartyKey,
    headers: HeaderMap,
    body: Bytes,
    error: bool,
) -> Result<Response, HubError> {
    let caller = check_headers(&headers, Resource::Parties, Shape::Put)?;
    if error {
        fspiop::parse_error_information(&body)?;
    } else {
        let answer = fspiop::check_party_put(&body)?;
        // The payer pays whoever the answer names: only the holder itself.
        if let Some(fsp) = answer.fsp.filter(|fsp| *fsp != caller.source) {
            hub.refuse(
                crate::refused::Class::UnsolicitedAnswer,
                caller.source.as_str(),
                &format!("party {key} answered with fspId '{fsp}'"),
            );
            return Err(HubError::new(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                format!(
                    "Generic validation error - party.partyIdInfo.fspId '{fsp}' is not the FSPIOP-Source '{}': an FSP answers only for parties it holds",
                    caller.source
                ),
            ));
        }
    }
    // FSPIOP-Destination is optional here (ALS's schema): without it the
    // answer goes to whoever asked about the party.
    let named = named_destination(&headers)?;
    let question = answer_key(&key);
    // A late answer to a discovery another proxy's scheme answered first:
    // taken (the proxy did nothing wrong) and passed on to nobody.
    if let Some(carrier) = caller.via {
        if hub
            .answers
            .superseded(&question, carrier, named, std::time::Instant::now())
        {
            hub.metrics.discovery_answers_dropped.inc();
            tracing::debug!(party = %key, proxy = %carrier, source = %caller.source, "a discovery answer after the first holder's; dropped");
            return Ok(StatusCode::OK.into_response());
        }
    }
    let answered = hub.answer_route(&question, caller.source, caller.via, named)?;
    let (destination, via) = (answered.requester, answered.via);
    // An answer to a discovery asked of every proxy (rule 3): the first
    // that names a holder wins and teaches the map where the holder is;
    // an error is passed on only once every proxy asked has answered.
    if caller.via == Some(answered.addressee) && caller.source != answered.addressee {
        let proxy = answered.addressee;
        if error {
            if hub
                .answers
                .awaiting(&question, destination, std::time::Instant::now())
                > 0
            {
                tracing::debug!(party = %key, %proxy, requester = %destination, "a proxy's scheme does not hold the party; others are still asked");
                return Ok(StatusCode::OK.into_response());
            }
        } else {
            hub.answers.close_others(&question, destination, proxy);
            hub.learn_proxy(caller.source, proxy).await;
        }
    }
    let operation = if error { "PUT_ERROR" } else { "PUT" };
    forward_answer(
        hub,
        LookupApi::Parties,
        &caller,
        (destination, via),
        &key,
        operation,
        &headers,
        body,
    );
    Ok(StatusCode::OK.into_response())
}

/// FSPIOP-Destination where ALS's schema makes it optional: `None` when
/// absent, 3101 when not an FSP id.
fn named_destination(headers: &HeaderMap) -> Result<Option<FspName>, HubError> {
    let value = fspiop::header_str(
        fspiop::FSPIOP_DESTINATION,
        headers.get("fspiop-destination").map(|v| v.as_bytes()),
    )?;
    Ok(fspiop::check_fsp_header(
        fspiop::FSPIOP_DESTINATION,
        value,
        false,
    )?)
}

/// `PUT /participants/{Type}/{ID}[/{SubId}]/error`: an error about a
/// party's registration or lookup. ALS forwards it to the
/// FSPIOP-Destination's `FSPIOP_CALLBACK_URL_PARTICIPANT[_SUB_ID]_PUT_ERROR`
/// endpoint, and tells the sender 3201 when it names none it knows. Here
/// the answer rule applies ([`crate::answers`]): such an error is
/// forwarded only as an answer to a question the hub put to its sender,
/// and the hub puts none about the registry (it answers registrations and
/// lookups itself, asking only oracles), so one naming a destination is
/// refused (400/3100, counted as an unsolicited answer) — forwarding it
/// would let any DFSP tell another that its registration or lookup
/// failed. One naming no destination is answered as ALS answers it: 200,
/// then 3201 from the hub to the sender.
async fn put_participant_error(
    State(hub): State<Arc<Hub>>,
    PartyPath(key): PartyPath,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HubError> {
    let caller = check_headers(&headers, Resource::Participants, Shape::Put)?;
    fspiop::parse_error_information(&body)?;
    let Some(named) = named_destination(&headers)? else {
        hub.send_party_error(
            LookupApi::Participants,
            (caller.source, caller.via),
            &key,
            DESTINATION_FSP_ERROR,
            "Destination FSP Error - the error names no FSPIOP-Destination to forward it to",
            caller.reply(),
        );
        return Ok(StatusCode::OK.into_response());
    };
    let question = answers::Key::new(Resource::Participants, key.to_string());
    let answered = hub.answer_route(&question, caller.source, caller.via, Some(named))?;
    let (destination, via) = (answered.requester, answered.via);
    forward_answer(
        &hub,
        LookupApi::Participants,
        &caller,
        (destination, via),
        &key,
        "PUT_ERROR",
        &headers,
        body,
    );
    Ok(StatusCode::OK.into_response())
}

/// Forwards a DFSP's answer about `key` (`PUT`, as its bytes and FSPIOP
/// headers) to `destination`'s `{api}[_SUB_ID]_{operation}` endpoint, or
/// tells the sender (3201) that there is none.
#[allow(clippy::too_many_arguments)]
fn forward_answer(
    hub: &Hub,
    api: LookupApi,
    caller: &Caller,
    (destination, via): (FspName, Option<FspName>),
    key: &PartyKey,
    operation: &str,
    headers: &HeaderMap,
    body: Bytes,
) {
    let endpoint = endpoint_type(api.endpoint_base(), operation, key);
    // Back through the proxy that carried the question, if one did.
    if !hub.send_callback_via(
        via,
        Origin::Forwarded,
        destination,
        &endpoint,
        &variables(key),
        Method::PUT,
        forwarded(headers, false),
        body,
    ) {
        hub.send_party_error(
            api,
            (caller.source, caller.via),
            key,
            DESTINATION_FSP_ERROR,
            &format!("Destination FSP Error - '{destination}' has no {endpoint} endpoint"),
            caller.reply(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_id_endpoints_use_the_sub_id_variant() {
        let key = |sub_id: Option<&str>| PartyKey {
            id_type: "MSISDN".into(),
            identifier: "1".into(),
            sub_id: sub_id.map(Into::into),
        };
        assert_eq!(
            endpoint_type("PARTIES", "GET", &key(None)),
            "FSPIOP_CALLBACK_URL_PARTIES_GET"
        );
        assert_eq!(
            endpoint_type("PARTIES", "GET", &key(Some("x"))),
            "FSPIOP_CALLBACK_URL_PARTIES_SUB_ID_GET"
        );
        assert_eq!(
            endpoint_type("PARTICIPANT", "PUT_ERROR", &key(Some("x"))),
            "FSPIOP_CALLBACK_URL_PARTICIPANT_SUB_ID_PUT_ERROR"
        );
    }
}
