//! kasi's HTTP side: the DFSP-facing FSPIOP API, the operator's admin API,
//! and the callback dispatcher that answers DFSPs asynchronously.
//!
//! Requests are checked here, on every core, and turned into ledger
//! commands; the pipeline (`engine`) applies them and releases each outcome
//! once durable; the handler then answers and queues the callbacks.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use engine::{BatchTiming, EngineError, EngineHandle};
use ledger::{Command, ErrorCode, FspName, Outcome, Rejection, Request};

// The folders show the architecture: the FSPIOP resources a DFSP calls,
// the operator's admin API, who may do what, what the hub sends out, what
// it tells the operator about itself, and the HTTP server under them all.
// Each module is also re-exported at the crate root (`hub::transfers`,
// `hub::notify`, …), its one path.

/// The FSPIOP API a DFSP calls: transfers, quotes, account lookup, the
/// routed services, the answer rule, the headers.
pub mod resources {
    pub mod answers;
    pub mod fx_quotes;
    pub mod fx_transfers;
    pub mod parties;
    pub mod quotes;
    pub mod requests;
    pub mod routing;
    pub mod services;
    pub mod transfers;
    pub mod wire;
}

/// The operator's admin API (central-ledger's and central-settlement's
/// paths), its audit trail, and the scheduled operator work.
pub mod operator {
    pub mod admin;
    pub mod admin_refusals;
    pub mod admin_transfers;
    pub mod approvals;
    pub mod audit;
    pub mod feed;
    pub mod fxps;
    pub mod indexes;
    pub mod jws_keys;
    pub mod oracles;
    pub mod pins;
    pub mod proxies;
    pub mod rollup;
    pub mod settlement;
    pub mod statement;
    pub mod watch;
}

/// Who may do what: admin credentials and roles, TLS identities, JWS
/// signatures, and the refusals' counters.
pub mod security {
    pub mod access;
    pub mod admin_auth;
    /// FSPIOP-Signature: the wire format's, in `fspiop`.
    pub use fspiop::jws;
    pub mod jws_pool;
    pub mod oidc;
    pub mod refused;
    pub mod tls;
}

/// What the hub sends: who is told what (`callback_plan`), the dispatcher
/// (`notify`), the DFSPs' endpoints and the URLs they may name, and the
/// alerts mailed to the DFSPs' contacts (`alerts`, those about committed
/// changes from the change feed, `alerts_feed`).
pub mod outbound {
    pub mod alerts;
    pub mod alerts_feed;
    pub mod callback_plan;
    pub mod callback_url;
    pub mod callbacks;
    pub mod endpoints;
    pub mod feed_amqp;
    pub mod notify;
}

/// What the hub tells the operator about itself: metrics, stage timings,
/// traces, transfer statistics, its role.
pub mod observability {
    pub mod metrics;
    pub mod role;
    pub mod stages;
    pub mod trace;
    pub mod transfer_stats;
    pub mod wire_log;
}

/// The HTTP server under both APIs: connections and their caps, bodies,
/// the door before the handlers, framework refusals in FSPIOP's shape.
pub mod http {
    pub mod body;
    pub mod connections;
    pub mod door;
    pub mod refusals;
    pub mod server;
}

mod references;

pub use http::{body, connections, door, refusals, server};
pub use observability::{metrics, role, stages, trace, transfer_stats, wire_log};
pub use operator::{
    admin, admin_refusals, admin_transfers, approvals, audit, feed, fxps, indexes, jws_keys,
    oracles, pins, proxies, rollup, settlement, statement, watch,
};
pub use outbound::{
    alerts, alerts_feed, callback_plan, callback_url, callbacks, endpoints, feed_amqp, notify,
};
pub use resources::{
    answers, fx_quotes, fx_transfers, parties, quotes, requests, routing, services, transfers, wire,
};
pub use security::{access, admin_auth, jws, jws_pool, oidc, refused, tls};

use endpoints::Endpoints;
use notify::Dispatcher;
use oracles::Oracles;
use parties::Parties;

/// Settings of the HTTP side.
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// The hub participant's name: FSPIOP-Source of hub-originated callbacks.
    pub hub_name: FspName,
    /// Base URL the admin API puts in its `links` (central-ledger style).
    pub admin_base_url: String,
    /// Largest request body accepted (Mojaloop: 5 MB).
    pub max_body_bytes: usize,
    /// Longest a request may take, including waiting for durability.
    pub request_timeout: Duration,
    /// Longest a request body may pause between bytes; then 400 (3101).
    pub body_idle_timeout: Duration,
    /// How long an external oracle's answer (a holder, or none) is reused.
    pub oracle_cache_ttl: Duration,
    /// Oracle answers kept at most; the oldest is dropped first.
    pub oracle_cache_capacity: usize,
    /// TCP connect timeout of a request to an external oracle.
    pub oracle_connect_timeout: Duration,
    /// Whole request to an external oracle, answer read included.
    pub oracle_request_timeout: Duration,
    /// TLS of the hub's outbound `https://` requests to oracles (the
    /// dispatcher has its own copy for callbacks); `None`: system roots.
    pub callback_tls: Option<Arc<rustls::ClientConfig>>,
    /// Record quotes durably and apply the FSPIOP duplicate rules to them
    /// (the quoting service's persistent mode); otherwise only route them.
    pub quotes_persistent: bool,
    /// The payee of a committed transfer gets the hub's `PUT` confirmation
    /// after the payer's callback (and the hub's error when its fulfilment
    /// aborted the transfer), as Mojaloop's
    /// `SEND_TRANSFER_CONFIRMATION_TO_PAYEE` (on by default).
    pub payee_commit_confirmation: bool,
    /// Trace one transfer in this many, stage by stage (`GET /stats/traces`);
    /// 0 traces none. The per-stage aggregates are kept for every transfer.
    pub trace_sample_every: u64,
    /// How the FSPIOP address knows who calls (mutual TLS, a trusted
    /// gateway's header); when enforced, every request's FSPIOP-Source must
    /// be that identity.
    pub identity: tls::IdentityPolicy,
    /// Which inbound FSPIOP requests must carry a valid FSPIOP-Signature
    /// (none by default).
    pub jws_verify: jws_keys::VerifyPolicy,
    /// Directory of the DFSPs' JWS public keys (`<fspId>.pem`), also
    /// written by the admin API's `/participants/{name}/jwsKey`.
    pub jws_keys_dir: Option<std::path::PathBuf>,
    /// The threads that check inbound signatures (see [`jws_pool`]);
    /// `None`: the dispatcher's signing pool, or else, with `jws_verify`
    /// on, a pool of one thread per CPU made by [`Hub::new`].
    pub jws_pool: Option<Arc<jws_pool::JwsPool>>,
    /// The store's reads beside the pipeline, for the admin API's
    /// transfer search (`GET /transfers`); `None`: no search.
    pub store_reader: Option<Arc<dyn store::StoreReader>>,
    /// The change feed (`GET /feed`, the AMQP publisher); `None`: none.
    pub feed: Option<feed::FeedConfig>,
    /// Who may use the admin API (see [`admin_auth`]); open by default, as
    /// on a loopback address without a tokens file.
    pub admin_auth: Arc<admin_auth::AdminAuth>,
    /// Hosts that callback and oracle URLs may name (see [`callback_url`]);
    /// empty allows any.
    pub callback_allow: Vec<callback_url::Allowed>,
    /// Active or standby, and the store's kind and lease (see [`role`]).
    pub role: Arc<role::Role>,
    /// How long a routed request waits for its answer (see [`answers`]).
    pub answer_window: Duration,
    /// Routed requests awaiting an answer at most; beyond, new ones are
    /// refused (2003).
    pub pending_answers_max: usize,
    /// Refuse an FSPIOP request whose `Date` is further than this from the
    /// hub's clock, either way (see [`door`]); `None` (the default, as in
    /// Mojaloop): any well-formed Date.
    pub max_clock_skew: Option<Duration>,
    /// Which admin changes wait for a second person's approval, and how
    /// long (see [`approvals`]); none by default here, `kasi serve`'s
    /// `--four-eyes` holds the money-moving ones.
    pub four_eyes: approvals::FourEyes,
    /// Alerts to the DFSPs' contacts: mail (with `--smtp-url`) and
    /// webhooks.
    pub alerts: alerts::AlertsConfig,
    /// The wire log of transfers' and conversions' messages (see
    /// [`wire_log`]); `None`: nothing is recorded.
    pub wire_log: Option<wirelog::WireLog>,
}

impl HubConfig {
    pub fn new(hub_name: FspName) -> HubConfig {
        HubConfig {
            quotes_persistent: false,
            payee_commit_confirmation: true,
            hub_name,
            admin_base_url: String::new(),
            max_body_bytes: 5 * 1024 * 1024,
            request_timeout: Duration::from_secs(30),
            body_idle_timeout: Duration::from_secs(5),
            oracle_cache_ttl: oracles::DEFAULT_CACHE_TTL,
            oracle_cache_capacity: oracles::DEFAULT_CACHE_CAPACITY,
            oracle_connect_timeout: Duration::from_secs(2),
            oracle_request_timeout: Duration::from_secs(5),
            callback_tls: None,
            trace_sample_every: stages::DEFAULT_TRACE_SAMPLE_EVERY,
            identity: tls::IdentityPolicy::default(),
            jws_verify: jws_keys::VerifyPolicy::default(),
            jws_keys_dir: None,
            jws_pool: None,
            store_reader: None,
            feed: None,
            admin_auth: Arc::new(admin_auth::AdminAuth::open("loopback")),
            callback_allow: Vec::new(),
            role: Arc::new(role::Role::embedded()),
            answer_window: answers::DEFAULT_ANSWER_WINDOW,
            pending_answers_max: answers::DEFAULT_CAPACITY,
            max_clock_skew: None,
            four_eyes: approvals::FourEyes::off(),
            alerts: alerts::AlertsConfig::default(),
            wire_log: None,
        }
    }
}

/// Shared state of both APIs.
pub struct Hub {
    pub config: HubConfig,
    pub engine: EngineHandle,
    pub endpoints: Arc<Endpoints>,
    pub parties: Arc<Parties>,
    /// Routed requests awaiting their answers: who asked whom about what.
    pub answers: Arc<answers::Answers>,
    /// External oracles, asked when the built-in registry has no holder.
    pub oracles: Arc<Oracles>,
    /// Client certificates pinned to participants (see [`pins`]).
    pub pins: Arc<pins::Pins>,
    /// The proxies and the proxy map, as committed (see [`proxies`]).
    pub proxies: Arc<proxies::ProxyRoutes>,
    pub dispatcher: Dispatcher,
    /// Prometheus metrics, served on the admin address.
    pub metrics: Arc<metrics::Metrics>,
    /// Where transfer messages spend their time (`/stats/stages`, `/stats/traces`).
    pub stages: Arc<stages::StageTimer>,
    /// The DFSPs' JWS public keys, when a keys directory is configured.
    pub jws_keys: Option<Arc<jws_keys::JwsKeys>>,
    /// Where inbound signatures are checked; `Some` whenever `jws_verify`
    /// is on (see [`HubConfig::jws_pool`]).
    pub jws_pool: Option<Arc<jws_pool::JwsPool>>,
    /// Refusals by class and participant: counters, the last hour, and
    /// the rate of their warnings (see [`refused`]).
    pub refusals: refused::Refusals,
    /// Audit events of refused admin attempts, coalesced (see
    /// [`admin_refusals`]).
    pub admin_refusal_events: admin_refusals::Coalescer,
    /// Alerts to the DFSPs' contacts.
    pub alerts: alerts::Alerts,
    started: Instant,
}

impl Hub {
    /// Builds the hub on a running pipeline, loading every DFSP's endpoints,
    /// the party registry and the external oracles into memory.
    pub async fn new(
        config: HubConfig,
        engine: EngineHandle,
        dispatcher: Dispatcher,
    ) -> Result<Hub, HubError> {
        let oracles = Arc::new(Oracles::new(&config));
        let pending_answers = Arc::new(answers::Answers::new(
            config.answer_window,
            config.pending_answers_max,
        ));
        let jws_pool = config
            .jws_pool
            .clone()
            .or_else(|| dispatcher.jws_pool())
            .or_else(|| {
                config.jws_verify.is_on().then(|| {
                    jws_pool::JwsPool::new(
                        jws_pool::JwsPool::default_threads(),
                        jws_pool::QUEUE_CAPACITY,
                    )
                })
            });
        let endpoints: Arc<Endpoints> = Arc::default();
        let metrics = {
            let engine = engine.clone();
            let dispatcher = dispatcher.clone();
            let mut metrics = metrics::Metrics::new(
                move || engine.stats(),
                move || dispatcher.stats(),
                config.role.clone(),
            );
            metrics.register_pending_answers(pending_answers.clone());
            metrics.register_participant_modes(endpoints.clone(), config.hub_name);
            if let Some(pool) = &jws_pool {
                metrics.register_jws_pool(pool);
            }
            if let Some(log) = &config.wire_log {
                metrics.register_wire_log(log.clone());
            }
            Arc::new(metrics)
        };
        let stages = Arc::new(stages::StageTimer::new(
            config.trace_sample_every,
            Some(metrics.clone()),
        ));
        let jws_keys = match &config.jws_keys_dir {
            Some(dir) => Some(Arc::new(jws_keys::JwsKeys::open(dir).map_err(|error| {
                HubError::new(
                    ErrorCode::INTERNAL_SERVER_ERROR,
                    format!("JWS keys directory {}: {error}", dir.display()),
                )
            })?)),
            None => None,
        };
        let alerts = alerts::Alerts::start(
            config.alerts.clone(),
            config.hub_name,
            endpoints.clone(),
            metrics.clone(),
            config.callback_tls.clone(),
        )
        .map_err(|error| HubError::new(ErrorCode::INTERNAL_SERVER_ERROR, error))?;
        let hub = Hub {
            alerts,
            jws_keys,
            jws_pool,
            config,
            engine,
            endpoints,
            parties: Arc::default(),
            answers: pending_answers,
            oracles,
            pins: Arc::default(),
            proxies: Arc::default(),
            dispatcher,
            metrics,
            stages,
            refusals: refused::Refusals::default(),
            admin_refusal_events: admin_refusals::Coalescer::default(),
            started: Instant::now(),
        };
        use ledger::request::{
            ReadCertificatePins, ReadOracles, ReadParticipants, ReadParties, ReadProxyMap,
        };
        // Loaded before serving (nothing changes meanwhile), then kept
        // current from what the engine commits.
        let views = hub.ask(ReadParticipants { name: None }).await??;
        hub.endpoints.load(&views);
        hub.parties.load(hub.ask(ReadParties {}).await??);
        hub.oracles.replace(hub.ask(ReadOracles {}).await??);
        hub.pins.replace(&hub.ask(ReadCertificatePins {}).await??);
        hub.proxies.load(&views, &hub.ask(ReadProxyMap {}).await??);
        let mut copies = references::Copies::new(
            hub.endpoints.clone(),
            hub.parties.clone(),
            hub.oracles.clone(),
            hub.pins.clone(),
            hub.proxies.clone(),
            &views,
        );
        hub.engine
            .on_committed(Box::new(move |records| copies.apply(records)));
        Ok(hub)
    }

    /// Queues a callback to `destination`'s `endpoint_type` endpoint, with
    /// the URL template's `{{name}}`s filled from `variables`; `probe`, if
    /// any, times the delivery (see [`stages`]). `origin` says who wrote
    /// the message (the hub signs only its own). False (and nothing queued)
    /// when the DFSP registered no such endpoint.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_callback(
        &self,
        origin: notify::Origin,
        destination: FspName,
        endpoint_type: &str,
        variables: &[(&str, &str)],
        method: axum::http::Method,
        headers: axum::http::HeaderMap,
        body: axum::body::Bytes,
        probe: Option<stages::CallbackProbe>,
    ) -> bool {
        self.send_callback_tracked(
            origin,
            destination,
            endpoint_type,
            variables,
            method,
            headers,
            body,
            probe,
            None,
        )
    }

    /// [`send_callback`](Self::send_callback) with `tracking` (see
    /// [`notify::Tracking`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_callback_tracked(
        &self,
        origin: notify::Origin,
        destination: FspName,
        endpoint_type: &str,
        variables: &[(&str, &str)],
        method: axum::http::Method,
        headers: axum::http::HeaderMap,
        body: axum::body::Bytes,
        probe: Option<stages::CallbackProbe>,
        tracking: Option<notify::Tracking>,
    ) -> bool {
        let Some((carrier, url)) = self.carrier_url(destination, None, endpoint_type, variables)
        else {
            return false;
        };
        self.dispatcher.send_tracked(
            notify::Callback {
                destination: carrier.to_string(),
                origin,
                method,
                url,
                headers,
                body,
            },
            probe,
            tracking,
        );
        true
    }

    /// Where a message for `destination` goes: `via`'s `endpoint_type`
    /// endpoint when given (the proxy that carried the request it
    /// answers), else the destination's own, or, for another scheme's
    /// DFSP, its proxy's (the message unchanged: FSPIOP-Destination still
    /// names the DFSP). The carrier and the URL; `None` when it has none.
    fn carrier_url(
        &self,
        destination: FspName,
        via: Option<FspName>,
        endpoint_type: &str,
        variables: &[(&str, &str)],
    ) -> Option<(FspName, String)> {
        if let Some(via) = via {
            return Some((via, self.endpoints.url(via, endpoint_type, variables)?));
        }
        if let Some(url) = self.endpoints.url(destination, endpoint_type, variables) {
            return Some((destination, url));
        }
        // Never a participant's name: the ledger maps none.
        let proxy = self.proxies.proxy_of(destination)?;
        let url = self.endpoints.url(proxy, endpoint_type, variables)?;
        Some((proxy, url))
    }

    /// [`send_callback`](Self::send_callback) through `via`, the proxy
    /// that carried the request this answers from another scheme (its
    /// endpoint, the message unchanged), or as `send_callback` without.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_callback_via(
        &self,
        via: Option<FspName>,
        origin: notify::Origin,
        destination: FspName,
        endpoint_type: &str,
        variables: &[(&str, &str)],
        method: axum::http::Method,
        headers: axum::http::HeaderMap,
        body: axum::body::Bytes,
    ) -> bool {
        let Some((carrier, url)) = self.carrier_url(destination, via, endpoint_type, variables)
        else {
            return false;
        };
        self.dispatcher.send(notify::Callback {
            destination: carrier.to_string(),
            origin,
            method,
            url,
            headers,
            body,
        });
        true
    }

    /// A DFSP's request without a body (a `GET`) passed on to
    /// `destination`'s `endpoint_type` endpoint, `on_undelivered` told if
    /// it is not delivered. False (and nothing queued) when the DFSP
    /// registered no such endpoint.
    pub(crate) fn send_callback_asking(
        &self,
        destination: FspName,
        endpoint_type: &str,
        variables: &[(&str, &str)],
        method: axum::http::Method,
        headers: axum::http::HeaderMap,
        on_undelivered: notify::OnUndelivered,
    ) -> bool {
        let Some((carrier, url)) = self.carrier_url(destination, None, endpoint_type, variables)
        else {
            return false;
        };
        self.dispatcher.send_asking(
            notify::Callback {
                destination: carrier.to_string(),
                origin: notify::Origin::Forwarded,
                method,
                url,
                headers,
                body: axum::body::Bytes::new(),
            },
            on_undelivered,
        );
        true
    }

    /// Most commands one `execute` may carry.
    pub fn engine_batch_limit(&self) -> usize {
        self.engine.max_batch_commands()
    }

    /// Submits commands and waits for their durable outcomes, without
    /// blocking the async runtime: a full queue is refused, not waited on.
    pub async fn execute(&self, commands: Vec<Command>) -> Result<Vec<Outcome>, EngineError> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.engine.try_submit(
            commands,
            Box::new(move |result| {
                let _ = sender.send(result);
            }),
        );
        receiver.await.unwrap_or(Err(EngineError::Stopped))
    }

    /// Like [`execute_one`](Self::execute_one), with when the command was
    /// handed to the engine and the instants of the batch that decided it.
    pub(crate) async fn execute_one_timed(
        &self,
        command: Command,
    ) -> Result<(Outcome, Instant, BatchTiming), HubError> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let submitted = Instant::now();
        self.engine.try_submit_timed(
            vec![command],
            Box::new(move |result| {
                let _ = sender.send(result);
            }),
        );
        let (mut outcomes, batch) = receiver
            .await
            .unwrap_or(Err(EngineError::Stopped))
            .map_err(HubError::from)?;
        let outcome = outcomes
            .pop()
            .ok_or_else(|| HubError::new(ErrorCode::INTERNAL_SERVER_ERROR, "no outcome"))?;
        Ok((outcome, submitted, batch))
    }

    /// Submits one request and waits for its durable, typed reply.
    pub async fn ask<R: Request>(&self, request: R) -> Result<R::Reply, HubError> {
        let outcome = self.execute_one(request.into_command()).await?;
        R::reply(outcome).map_err(HubError::unexpected)
    }

    /// Submits many requests of one kind, as few batches as the engine's
    /// limit allows, and waits for their typed replies, in order.
    pub async fn ask_all<R: Request>(&self, requests: Vec<R>) -> Result<Vec<R::Reply>, HubError> {
        let max = self.engine_batch_limit().max(1);
        let mut replies = Vec::with_capacity(requests.len());
        let mut requests = requests.into_iter().peekable();
        while requests.peek().is_some() {
            let commands: Vec<Command> = requests.by_ref().take(max).map(R::into_command).collect();
            for outcome in self.execute(commands).await.map_err(HubError::from)? {
                replies.push(R::reply(outcome).map_err(HubError::unexpected)?);
            }
        }
        Ok(replies)
    }

    /// Like [`ask`](Self::ask), with when the request was handed to the
    /// engine and the instants of the batch that decided it.
    pub(crate) async fn ask_timed<R: Request>(
        &self,
        request: R,
    ) -> Result<(R::Reply, Instant, BatchTiming), HubError> {
        let (outcome, submitted, batch) = self.execute_one_timed(request.into_command()).await?;
        let reply = R::reply(outcome).map_err(HubError::unexpected)?;
        Ok((reply, submitted, batch))
    }

    pub async fn execute_one(&self, command: Command) -> Result<Outcome, HubError> {
        let mut outcomes = self.execute(vec![command]).await.map_err(HubError::from)?;
        outcomes
            .pop()
            .ok_or_else(|| HubError::new(ErrorCode::INTERNAL_SERVER_ERROR, "no outcome"))
    }

    pub fn now_ms(&self) -> i64 {
        now_ms()
    }
}

/// `text` as one log value: control characters (CR, LF, NUL, ESC, …) are
/// written as `\u{..}` escapes, so a value that came from a request can
/// never start a forged log line or drive a terminal.
pub fn log_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            escaped.extend(c.escape_unicode());
        } else {
            escaped.push(c);
        }
    }
    std::borrow::Cow::Owned(escaped)
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// FSPIOP `DateTime` of a millisecond timestamp.
pub fn format_time(ms: i64) -> String {
    fspiop::format_date_time(ms)
}

/// The `Retry-After` of a 2003 answer (the store cannot commit or be read,
/// the pipeline is stopping, a queue is full) that names no other.
pub const RETRY_AFTER_S: u32 = 1;

/// An error answered synchronously, in the FSPIOP error body shape
/// (central-ledger uses the same for the admin API).
#[derive(Debug)]
pub struct HubError {
    pub code: ErrorCode,
    pub description: String,
    /// Seconds after which a retry may succeed: the answer is then 503
    /// with `Retry-After` (a temporary refusal, not a fault).
    pub retry_after_s: Option<u32>,
}

impl HubError {
    pub fn new(code: ErrorCode, description: impl Into<String>) -> HubError {
        HubError {
            code,
            description: description.into(),
            retry_after_s: None,
        }
    }

    /// An outcome its request cannot come to (see `ledger::request`): a
    /// bug, answered 2001 and said in the log.
    pub fn unexpected(ledger::Unexpected(outcome): ledger::Unexpected) -> HubError {
        tracing::error!(
            ?outcome,
            "the ledger answered a request with an outcome of another kind"
        );
        HubError::new(
            ErrorCode::INTERNAL_SERVER_ERROR,
            format!("unexpected ledger outcome {outcome:?}"),
        )
    }

    /// Whether a refusal is the ledger's "the store could not be read"
    /// (an id that left memory): nothing was decided or recorded, so the
    /// sender is told at once to send it again — [`HubError::refused`]
    /// makes that 503 with `Retry-After` — never by a callback.
    pub(crate) fn is_retry_later(rejection: &Rejection) -> bool {
        rejection.code == ErrorCode::SERVICE_UNAVAILABLE
    }

    /// A refusal, in the FSPIOP error shape with its code.
    pub fn refused(rejection: Rejection) -> HubError {
        HubError::new(
            rejection.code,
            format!(
                "{} - {}",
                rejection.code.description(),
                rejection.description
            ),
        )
    }

    /// The same error, to be retried after `seconds` (503, `Retry-After`).
    pub fn retry_after(mut self, seconds: u32) -> HubError {
        self.retry_after_s = Some(seconds);
        self
    }

    pub fn status(&self) -> StatusCode {
        if self.retry_after_s.is_some() {
            return StatusCode::SERVICE_UNAVAILABLE;
        }
        StatusCode::from_u16(fspiop::http_status_for(self.code))
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl std::fmt::Display for HubError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.description)
    }
}

impl std::error::Error for HubError {}

/// `?` on a typed reply's refusal.
impl From<Rejection> for HubError {
    fn from(rejection: Rejection) -> HubError {
        HubError::refused(rejection)
    }
}

impl From<EngineError> for HubError {
    fn from(error: EngineError) -> HubError {
        // 2003: Service currently unavailable (FSPIOP §7.6): 503 with
        // Retry-After, never a 500 — nothing was done. The store's
        // own words (paths, SQLite's text) are for the log and /health, not
        // for a DFSP; and a description is cut at 128 characters.
        let description = match &error {
            EngineError::StoreUnavailable(_) => {
                "Service currently unavailable - the hub cannot record changes for now; retry later"
                    .to_string()
            }
            EngineError::StoreFailed(_) => {
                "Service currently unavailable - the hub's store failed".to_string()
            }
            other => format!("Service currently unavailable - {other}"),
        };
        HubError::new(ErrorCode::SERVICE_UNAVAILABLE, description)
    }
}

impl From<fspiop::FspiopError> for HubError {
    fn from(error: fspiop::FspiopError) -> HubError {
        HubError {
            code: error.code,
            description: error.description,
            retry_after_s: None,
        }
    }
}

impl IntoResponse for HubError {
    fn into_response(self) -> Response {
        let body = fspiop::answer_body(self.code, &self.description);
        let mut response = (
            self.status(),
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        // 2003 means "nothing was done, come back later": always with when.
        let retry_after_s = self
            .retry_after_s
            .or((self.code == ErrorCode::SERVICE_UNAVAILABLE).then_some(RETRY_AFTER_S));
        if let Some(seconds) = retry_after_s {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        response
    }
}

/// The DFSP-facing application: FSPIOP routes behind the common guard.
pub fn api_app(hub: Arc<Hub>) -> Router {
    let fspiop = transfers::router(hub.clone())
        .merge(fx_transfers::routes().with_state(hub.clone()))
        .merge(services::routes().with_state(hub.clone()))
        .merge(quotes::routes().with_state(hub.clone()))
        .merge(fx_quotes::routes().with_state(hub.clone()))
        .merge(requests::routes().with_state(hub.clone()))
        .merge(parties::routes().with_state(hub.clone()));
    let gate = hub.clone();
    let fspiop = fspiop.layer(axum::middleware::from_fn(move |request, next| {
        fspiop_gate(gate.clone(), request, next)
    }));
    guarded(fspiop, &hub, "fspiop")
}

/// What every FSPIOP request passes before its route's handler, outside
/// in: repeated headers and stale dates (see [`door`]); FSPIOP-Source
/// naming the hub; the caller's identity (when enforced); its signature
/// (when verified); whether it is a participant at all; innermost, the
/// wire log of what the handler took. The first refusal answers.
///
/// One middleware, not six: each `from_fn` layer clones the services
/// below it and boxes a future of its own for every request (~40
/// allocations per transfer for six, counted with uprobes on the
/// allocator; see BENCHMARKS.md), and a router boxes every route again
/// for each layer added to it.
async fn fspiop_gate(
    hub: Arc<Hub>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // Every check below reads a header's first value, so one sent twice
    // is refused before any of them runs.
    if let Some(refused) = door::refusal(&hub, request.headers(), std::time::SystemTime::now()) {
        return refused;
    }
    // Whatever the identity policy: the hub is a participant, so without
    // this the participant check would let a DFSP speak as the hub.
    if let Some(refused) = hub_source_refusal(&hub, &request) {
        return refused;
    }
    // A message a proxy carries from another scheme is bound to the proxy
    // (its identity, and whom it may speak for) instead of FSPIOP-Source
    // to the caller: the source is not a participant here.
    let proxied = match proxy_binding(&hub, &request) {
        Ok(proxied) => proxied,
        Err(refused) => return *refused,
    };
    if proxied.is_none() && hub.config.identity.is_enforced() {
        if let Some(refused) = source_binding_refusal(&hub, &request) {
            return refused;
        }
    }
    let mut request = request;
    if let Some(proxied) = proxied {
        request.extensions_mut().insert(proxied);
    }
    let request = if hub.config.jws_verify.is_on() {
        match jws_keys::verified(&hub, request).await {
            Ok(request) => request,
            Err(refused) => return refused,
        }
    } else {
        request
    };
    if proxied.is_none() {
        if let Some(refused) = unknown_source_refusal(&hub, &request) {
            return refused;
        }
    }
    wire_log::record_requests(hub, request, next).await
}

/// A message a proxy carried across schemes, as the gate accepted it: the
/// proxy participant (FSPIOP-Proxy) and the other scheme's DFSP it spoke
/// for (FSPIOP-Source). In the request's extensions for the routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proxied {
    pub proxy: FspName,
    pub source: FspName,
}

/// Rule 6 of docs/design/interscheme.md: a message with FSPIOP-Proxy is
/// accepted only from the caller authenticated as that proxy (when client
/// identities are enforced), only through a participant created as a
/// proxy, and only for a source that is the proxy itself or a DFSP of
/// another scheme the map does not place behind another proxy. Anything
/// else is 400 (3100), counted `proxy_source` and logged — a message with
/// FSPIOP-Proxy and no usable FSPIOP-Source too: every request that
/// reaches a route with the header was bound here, so the routes may read
/// it (`wire::Caller::via`). `Ok(None)`: no FSPIOP-Proxy.
fn proxy_binding(
    hub: &Hub,
    request: &axum::extract::Request,
) -> Result<Option<Proxied>, Box<Response>> {
    let Some(value) = request.headers().get("fspiop-proxy") else {
        return Ok(None);
    };
    let claimed = request
        .headers()
        .get("fspiop-source")
        .map(|value| String::from_utf8_lossy(value.as_bytes()).trim().to_string())
        .unwrap_or_default();
    let refuse = |detail: String| -> Result<Option<Proxied>, Box<Response>> {
        hub.refuse(refused::Class::ProxySource, &claimed, &detail);
        let mut response = HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!("Generic validation error - Invalid fspiop-proxy header: {detail}"),
        )
        .into_response();
        *response.status_mut() = StatusCode::BAD_REQUEST;
        Err(Box::new(response))
    };
    let text = String::from_utf8_lossy(value.as_bytes()).trim().to_string();
    let Some(proxy) = FspName::new(&text) else {
        return refuse(format!("'{text}' is not a participant name"));
    };
    let Some(source) = FspName::new(&claimed) else {
        return refuse(format!(
            "FSPIOP-Source '{claimed}' names no DFSP it may carry"
        ));
    };
    if hub.config.identity.is_enforced() {
        let connection = request.extensions().get::<tls::Connection>();
        let certificate = connection.and_then(|c| c.certificate.as_deref());
        let hub_name = hub.config.hub_name.as_str();
        match tls::identities(
            &hub.config.identity,
            connection,
            request.headers(),
            hub_name,
        ) {
            Ok(names)
                if pins::may_act_as(&names, certificate, &hub.pins, proxy.as_str(), hub_name) => {}
            Ok(names) => {
                return refuse(format!(
                    "'{proxy}' is not the client's identity ('{}')",
                    names.join(",")
                ))
            }
            Err(refusal) => return refuse(refusal.reason.to_string()),
        }
    }
    match hub.proxies.may_act_for(proxy, source) {
        Ok(()) => Ok(Some(Proxied { proxy, source })),
        Err(why) => refuse(format!(
            "{} (FSPIOP-Proxy '{proxy}', FSPIOP-Source '{source}')",
            why.reason()
        )),
    }
}

/// Refuses a request whose FSPIOP-Source (any of them) is the hub's own
/// name: only the hub originates messages as the hub, and a DFSP that
/// could send as the hub could make its messages look like the scheme's
/// (a forged 'from the hub' error or state callback, a lookup answered as
/// the hub). 400 with 3100, before anything is read or changed.
fn hub_source_refusal(hub: &Hub, request: &axum::extract::Request) -> Option<Response> {
    let hub_name = hub.config.hub_name.as_str().as_bytes();
    let claims_hub = request
        .headers()
        .get_all("fspiop-source")
        .iter()
        .any(|value| value.as_bytes().trim_ascii() == hub_name);
    if !claims_hub {
        return None;
    }
    let route = format!("{} {}", request.method(), request.uri().path());
    // The older, narrower counter of refused sources, for its dashboards.
    hub.metrics
        .record_source_refused(&hub.participant_label(hub.config.hub_name.as_str()));
    hub.refuse(
        refused::Class::HubSource,
        hub.config.hub_name.as_str(),
        &format!("FSPIOP-Source is the hub's name on {route}"),
    );
    Some(hub_name_reserved(hub).into_response())
}

/// 400 (3100): FSPIOP-Source, or the client's identity, is the hub's name.
fn hub_name_reserved(hub: &Hub) -> Response {
    let mut response = HubError::new(
        ErrorCode::GENERIC_VALIDATION_ERROR,
        format!(
            "Generic validation error - Invalid fspiop-source header: '{}' is the hub's own name, reserved for messages the hub originates",
            hub.config.hub_name
        ),
    )
    .into_response();
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response
}

/// Refuses, at once, a request from an FSPIOP-Source that is not a
/// participant of this hub: it could never be answered (the hub has no
/// endpoint for it), so a 202 would be followed by silence. A request
/// without a usable FSPIOP-Source is left to the route's own header checks.
fn unknown_source_refusal(hub: &Hub, request: &axum::extract::Request) -> Option<Response> {
    let source = request
        .headers()
        .get("fspiop-source")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| FspName::new(value.trim()))?;
    match hub.endpoints.participant_mode(source) {
        // An inactive participant still has its endpoints: it is told by
        // callback, as Mojaloop tells it (3100 for a prepare), which its
        // conformance tests expect.
        Some(_) => None,
        None => Some(
            HubError::new(
                ErrorCode::ID_NOT_FOUND,
                format!(
                "Generic ID not found - FSPIOP-Source '{source}' is not a participant of this hub"
            ),
            )
            .into_response(),
        ),
    }
}

/// Refuses a request whose FSPIOP-Source is not who the connection proved
/// to be (its client certificate, or a trusted gateway's word): a DFSP acts
/// only as itself, on every route, before anything is looked at or changed.
/// A request without FSPIOP-Source is left to the route's own checks (3102).
fn source_binding_refusal(hub: &Hub, request: &axum::extract::Request) -> Option<Response> {
    let source = request
        .headers()
        .get("fspiop-source")
        .map(|value| String::from_utf8_lossy(value.as_bytes()).trim().to_string())
        .filter(|source| !source.is_empty())?;
    let connection = request.extensions().get::<tls::Connection>();
    let certificate = connection.and_then(|c| c.certificate.as_deref());
    let hub_name = hub.config.hub_name.as_str();
    let refusal = match tls::identities(
        &hub.config.identity,
        connection,
        request.headers(),
        hub_name,
    ) {
        Ok(names) if pins::may_act_as(&names, certificate, &hub.pins, &source, hub_name) => {
            return None
        }
        Err(refusal) if refusal.names_hub => {
            // A DFSP holding a certificate (or a gateway vouching for a
            // name) that is the hub's: refused whatever it claims.
            hub.metrics
                .record_source_refused(&hub.participant_label(&source));
            hub.refuse(
                refused::Class::HubSource,
                &source,
                &format!("the client's identity names the hub ({})", refusal.reason),
            );
            return Some(hub_name_reserved(hub));
        }
        Ok(names) => {
            hub.note_refused_source(
                &source,
                &names.join(","),
                "FSPIOP-Source is not the client's identity",
            );
            tls::Refusal::new("FSPIOP-Source is not the client's identity")
        }
        Err(refusal) => {
            hub.note_refused_source(&source, "", refusal.reason);
            refusal
        }
    };
    Some(refusal.into_response())
}

impl Hub {
    /// Follows the JWS keys directory (if any) for changes, on a task.
    pub fn start_jws_key_watch(&self) {
        if let Some(keys) = &self.jws_keys {
            tokio::spawn(keys.clone().watch(jws_keys::KEY_POLL_INTERVAL));
        }
    }

    /// Counts and (rate-limited) logs a refused FSPIOP-Source.
    fn note_refused_source(&self, claimed: &str, identity: &str, reason: &str) {
        // The older, narrower counter stays for existing dashboards.
        self.metrics
            .record_source_refused(&self.participant_label(claimed));
        let detail = format!("{reason} (client identity: '{identity}')");
        self.refuse(refused::Class::Identity, claimed, &detail);
    }
}

/// The operator-facing application: central-ledger's admin routes.
pub fn admin_app(hub: Arc<Hub>) -> Router {
    admin_app_with(hub.clone(), admin_api(hub), Router::new())
}

/// The admin API's routes behind its authentication layer, without the
/// guard: what the console calls in-process, on behalf of the person
/// signed in, so that the same rules and audit apply to both.
pub fn admin_api(hub: Arc<Hub>) -> Router {
    let scrape = Router::new()
        .route("/metrics", axum::routing::get(metrics::scrape))
        .with_state(hub.clone());
    let auth = hub.config.admin_auth.clone();
    let gate = hub.clone();
    let on_refusal: admin_auth::OnRefusal =
        Arc::new(move |refusal: &admin_auth::GateRefusal<'_>| gate.admin_gate_refused(refusal));
    let invalid = hub.clone();
    let on_refused_write: admin_auth::OnRefusedWrite =
        Arc::new(move |refused: &admin_auth::RefusedWrite<'_>| {
            invalid.admin_write_refused(refused)
        });
    let reader = hub.clone();
    let own_of: admin_auth::OwnOf = Arc::new(move |dfsp| {
        let hub = reader.clone();
        Box::pin(async move { admin::own_of(&hub, dfsp).await })
    });
    let hooks = admin_auth::GateHooks {
        on_refusal: Some(on_refusal),
        on_refused_write: Some(on_refused_write),
        own_of: Some(own_of),
    };
    // Approving runs a kept change through this same API (and so its
    // authentication and access table), which exists only once built.
    let built = Arc::new(std::sync::OnceLock::new());
    let holder = hub.clone();
    let api = admin::router(hub.clone())
        .merge(approvals::router(hub.clone(), built.clone()))
        .merge(oracles::router(hub.clone()))
        .merge(proxies::router(hub.clone()))
        .merge(fxps::router(hub.clone()))
        .merge(settlement::router(hub.clone()))
        .merge(stages::router(hub.clone()))
        .merge(jws_keys::router(hub.clone()))
        .merge(audit::router(hub.clone()))
        .merge(pins::router(hub.clone()))
        .merge(callbacks::router(hub.clone()))
        .merge(transfer_stats::router(hub.clone()))
        .merge(refused::router(hub.clone()))
        .merge(admin_transfers::router(hub.clone()))
        .merge(wire_log::router(hub.clone()))
        .merge(feed::router(hub.clone()))
        .merge(rollup::router(hub.clone()))
        .merge(statement::router(hub.clone()))
        .merge(scrape)
        // Inside the authentication: it sees who asks.
        .layer(axum::middleware::from_fn(move |request, next| {
            approvals::hold(holder.clone(), request, next)
        }))
        .layer(axum::middleware::from_fn(move |request, next| {
            admin_auth::authenticate_reporting(auth.clone(), hooks.clone(), request, next)
        }));
    // The API holds itself (a cycle, never freed): it is built once per
    // hub and lives as long as the process.
    let _ = built.set(api.clone());
    api
}

/// The admin address's application: the admin API (from [`admin_api`])
/// and `beside` it routes that authenticate for themselves (the console),
/// all under the guard (time limits, FSPIOP-shaped refusals, metrics).
pub fn admin_app_with(hub: Arc<Hub>, api: Router, beside: Router) -> Router {
    let app = api.merge(beside);
    // Open on loopback, the operator's browser is the credential: refuse
    // what other sites' pages can make it send (see
    // `admin_auth::cross_site`). In-process calls (the console's) do not
    // pass here.
    let app = if hub.config.admin_auth.is_open_on_loopback() {
        let same_site = hub.clone();
        app.layer(axum::middleware::from_fn(move |request, next| {
            admin_refusals::same_site(same_site.clone(), request, next)
        }))
    } else {
        app
    };
    guarded(app, &hub, "admin")
}

fn guarded(router: Router, hub: &Hub, api: &'static str) -> Router {
    let limits = Limits {
        request: hub.config.request_timeout,
        body_idle: hub.config.body_idle_timeout,
        body: hub.config.max_body_bytes,
    };
    let metrics = hub.metrics.clone();
    // One layer, not two (see `api_app`): the body limit outside the guard.
    router.layer(
        tower::ServiceBuilder::new()
            .layer(axum::extract::DefaultBodyLimit::max(
                hub.config.max_body_bytes,
            ))
            .layer(axum::middleware::from_fn(move |request, next| {
                guard(limits, metrics.clone(), api, request, next)
            }))
            .into_inner(),
    )
}

/// Bounds each request's time, answers the framework's own refusals
/// (unknown path, wrong method, oversized body, ...) in the FSPIOP error
/// format instead of plain text, and counts the request in the metrics.
/// The time limits the guard applies to each request.
#[derive(Clone, Copy, Debug)]
struct Limits {
    request: Duration,
    body_idle: Duration,
    /// Largest body, in bytes.
    body: usize,
}

async fn guard(
    limits: Limits,
    metrics: Arc<metrics::Metrics>,
    api: &'static str,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let arrived = Instant::now();
    let route = metrics::Route::of(&request);
    if let Some(response) = body::declared_too_large(request.headers(), limits.body) {
        metrics.record_request(api, route, response.status(), arrived.elapsed());
        return response;
    }
    let fault = body::FaultSlot::default();
    // A request that announced no body (a GET, Content-Length: 0) has none
    // to stall on: no timer for it.
    use axum::body::HttpBody as _;
    let request = if request.body().size_hint().exact() == Some(0) {
        request
    } else {
        request.map(|inner| body::with_idle_timeout(inner, limits.body_idle, fault.clone()))
    };
    let mut response = checked(limits.request, request, next).await;
    let fault = *fault.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(fault) = fault {
        // Whatever the handler made of the unreadable body, say what it was.
        let description = match fault {
            body::BodyFault::Stalled => format!(
                "Malformed syntax - no body bytes for {} ms: the body is shorter than its Content-Length",
                limits.body_idle.as_millis()
            ),
            body::BodyFault::Ended => {
                "Malformed syntax - the connection ended before the body was complete".to_string()
            }
        };
        response = HubError::new(ErrorCode::MALFORMED_SYNTAX, description).into_response();
        *response.status_mut() = StatusCode::BAD_REQUEST;
        // The rest of the body is unknown: this connection cannot carry
        // another request.
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    // As Mojaloop's services (hapi) answer: no answer of a switch is to be
    // reused by a cache between a DFSP and the hub.
    // (The console's pages say `no-store` themselves.)
    response
        .headers_mut()
        .entry(axum::http::header::CACHE_CONTROL)
        .or_insert(axum::http::HeaderValue::from_static("no-cache"));
    metrics.record_request(api, route, response.status(), arrived.elapsed());
    response
}

async fn checked(
    timeout: Duration,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // hyper bounds the head only roughly (by its read buffer); this is exact.
    let header_bytes: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    let header_count = request.headers().len();
    let too_large = if header_bytes > server::MAX_HEADER_BYTES {
        Some(format!(
            "Malformed syntax - headers of {header_bytes} bytes exceed {} bytes",
            server::MAX_HEADER_BYTES
        ))
    } else if header_count > server::MAX_HEADER_COUNT {
        Some(format!(
            "Malformed syntax - {header_count} header fields exceed {}",
            server::MAX_HEADER_COUNT
        ))
    } else {
        None
    };
    if let Some(description) = too_large {
        let mut response = HubError::new(ErrorCode::MALFORMED_SYNTAX, description).into_response();
        *response.status_mut() = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
        return response;
    }
    let response = match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        // 2004: Server timed out (FSPIOP §7.6).
        Err(_) => {
            return HubError::new(
                ErrorCode(2004),
                "Server timed out - the request took too long",
            )
            .into_response()
        }
    };
    // The framework's own refusals are plain text or empty; what a handler
    // answered in JSON (the APIs) or HTML (the console), and the console's
    // redirects, are meant as they are.
    let meant = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|value| {
            value.as_bytes().starts_with(b"application/json")
                || value.as_bytes().starts_with(b"text/html")
        });
    if meant || response.status().is_success() || response.status().is_redirection() {
        return response;
    }
    let (code, description) = match response.status() {
        StatusCode::NOT_FOUND => (
            ErrorCode(3002),
            "Unknown URI - no such resource".to_string(),
        ),
        StatusCode::METHOD_NOT_ALLOWED => (
            ErrorCode::GENERIC_CLIENT_ERROR,
            "Generic client error - method not allowed on this resource".to_string(),
        ),
        StatusCode::PAYLOAD_TOO_LARGE => (
            ErrorCode::MALFORMED_SYNTAX,
            "Malformed syntax - the body is larger than allowed".to_string(),
        ),
        status => (
            ErrorCode::GENERIC_CLIENT_ERROR,
            format!("Generic client error - {status}"),
        ),
    };
    let status = response.status();
    let mut replaced = HubError::new(code, description).into_response();
    *replaced.status_mut() = status;
    replaced
}

/// `GET /health/live`: the process serves HTTP (a liveness probe restarts
/// the hub when this stops answering). Always 200 while it answers.
pub async fn health_live() -> Response {
    (
        StatusCode::OK,
        axum::Json(serde_json::json!({"status": "OK"})),
    )
        .into_response()
}

/// `GET /health/ready`: the hub should be sent traffic — recovered (it
/// serves only after recovery), its store takes commits, and it is not
/// stopping. 503 with the reason otherwise, so a load balancer or
/// Kubernetes takes it out of rotation while a full disk is retried.
pub async fn health_ready(axum::extract::State(hub): axum::extract::State<Arc<Hub>>) -> Response {
    let unreachable = (!hub.config.role.store_reachable())
        .then(|| "the store cannot be reached (retrying)".to_string());
    match hub
        .engine
        .unavailable()
        .map(|why| why.to_string())
        .or(unreachable)
    {
        None => (
            StatusCode::OK,
            axum::Json(serde_json::json!({"status": "OK"})),
        )
            .into_response(),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({"status": "DOWN", "reason": why})),
        )
            .into_response(),
    }
}

/// `GET /health`, in the shape Mojaloop's services answer
/// (central-services-shared's health check): 200 with status OK while the
/// ledger pipeline and its store take commands, 503 with DOWN and the
/// reason while they do not (a full disk being retried, a failed commit
/// that stopped the pipeline, shutdown), with one entry per service.
pub async fn health(axum::extract::State(hub): axum::extract::State<Arc<Hub>>) -> Response {
    let (datastore, reason) = match hub.engine.store_health() {
        engine::StoreHealth::Healthy if !hub.config.role.store_reachable() => (
            "DOWN",
            Some("the store cannot be reached (retrying)".to_string()),
        ),
        engine::StoreHealth::Healthy => match hub.engine.unavailable() {
            None => ("OK", None),
            Some(why) => ("DOWN", Some(why.to_string())),
        },
        engine::StoreHealth::Faulted(fault) => (
            "DOWN",
            Some(format!(
                "the store cannot commit since {}: {} (retrying)",
                format_time(fault.since_ms),
                fault.why
            )),
        ),
        engine::StoreHealth::Failed(why) => (
            "DOWN",
            Some(format!(
                "the store failed, the hub must be restarted: {why}"
            )),
        ),
    };
    let uptime = hub.started.elapsed();
    let started_ms = now_ms() - i64::try_from(uptime.as_millis()).unwrap_or(0);
    let mut datastore_entry = serde_json::json!({"name": "datastore", "status": datastore});
    if let Some(reason) = &reason {
        datastore_entry["reason"] = serde_json::Value::String(reason.clone());
    }
    let mut body = serde_json::json!({
        "status": datastore,
        "uptime": uptime.as_secs_f64(),
        "startTime": format_time(started_ms),
        "versionNumber": env!("CARGO_PKG_VERSION"),
        "services": [datastore_entry],
    });
    hub.config.role.health_fields(&mut body);
    let status = if reason.is_none() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_for_now_is_503_with_retry_after_and_2003_never_500() {
        for error in [
            EngineError::StoreUnavailable("disk full".into()),
            EngineError::StoreFailed("fsync".into()),
            EngineError::Stopped,
            EngineError::Overloaded,
        ] {
            let response = HubError::from(error).into_response();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(response.headers()["retry-after"], "1");
        }
        let response = HubError::new(ErrorCode::SERVICE_UNAVAILABLE, "busy")
            .retry_after(5)
            .into_response();
        assert_eq!(response.headers()["retry-after"], "5");
        let response = HubError::new(ErrorCode::INTERNAL_SERVER_ERROR, "bug").into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(response.headers().get("retry-after").is_none());
    }
}
