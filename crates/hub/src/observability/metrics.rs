//! Prometheus metrics, served as `GET /metrics` on the admin address
//! (OpenMetrics text exposition, which Prometheus scrapes natively).
//!
//! Three kinds of source:
//! - HTTP requests, recorded by the `guard` middleware as they finish: a
//!   counter and a latency histogram per API, route and status class;
//! - the ledger pipeline and the callback dispatcher, whose own counters are
//!   read at scrape time (nothing is added to their hot paths);
//! - the async runtime's scheduling delay, measured by a probe task that
//!   sleeps 100 ms at a time and records how late it woke.
//!
//! Names (counters get `_total` appended in the exposition):
//! `kasi_http_requests_total`, `kasi_http_request_duration_seconds`,
//! `kasi_ledger_batches_total`, `kasi_ledger_commands_total`,
//! `kasi_ledger_apply_seconds_total`, `kasi_ledger_apply_max_seconds`,
//! `kasi_store_commits_total`, `kasi_store_records_total`,
//! `kasi_store_errors_total`, `kasi_store_lookups_total`, `kasi_store_healthy`, `kasi_role_active`
//! (by `store`), `kasi_store_reachable`, `kasi_lease_fencing`,
//! `kasi_store_commit_seconds_total`, `kasi_store_commit_max_seconds`,
//! `kasi_callbacks_{sent_ok,http_error,failed,retried,dropped}_total`,
//! `kasi_callbacks_{in_flight,queued,dead_letters}`,
//! `kasi_callbacks_failing_since_seconds` (0 while the DFSP answers),
//! `kasi_callback_latency_seconds`
//! (`_sum`/`_count`), `kasi_callback_latency_max_seconds`,
//! `kasi_runtime_lag_seconds`, `kasi_runtime_lag_last_seconds`,
//! `kasi_runtime_lag_max_seconds`, `kasi_pending_answers` (and its
//! `_capacity`), `kasi_refusals_total` (by `class` and
//! `participant`, see [`crate::refused`]), `kasi_admin_forbidden_total` (by
//! `role` and `reason`, see [`crate::access`]), `kasi_admin_provider_refused_total` (by
//! `reason`), `kasi_approvals_total` (by `action` and `step`) and
//! `kasi_approvals_pending` (four-eyes), `kasi_stage_duration_seconds` (by `phase`
//! and `stage` of a transfer message, see [`crate::stages`]),
//! `kasi_dfsp_transfers_total` (by `payer` and `result`: prepared,
//! committed, rejected, aborted, expired), `kasi_dfsp_transfer_seconds` (by
//! `payer`: prepare→commit in the ledger), `kasi_transfer_errors_total` (by
//! `code`; these three from [`crate::transfer_stats`]),
//! `kasi_jws_operations_total` and `kasi_jws_busy_seconds_total` (by `kind`
//! and `alg`), `kasi_jws_queued`, `kasi_jws_queue_wait_seconds`,
//! `kasi_jws_threads`, `kasi_jws_queue_capacity` (the signing pool, see
//! [`crate::jws_pool`], present while the hub signs or verifies); and the
//! standard `process_resident_memory_bytes` (Linux only: read from
//! `/proc/self/statm` at scrape time, absent elsewhere).

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use engine::StatsSnapshot;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, LabelSetEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::notify::DestinationStats;
use crate::stages::{cell_index, cells, Phase, Stage};
use crate::Hub;

/// Latency buckets, 0.1 ms to 10 s (1-2.5-5 per decade).
pub(crate) const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// How often the runtime probe wakes.
pub const PROBE_PERIOD: Duration = Duration::from_millis(100);

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The route a request matched, kept without allocating: the method as a
/// static name and axum's `MatchedPath` (a shared string).
#[derive(Clone)]
pub(crate) struct Route {
    method: &'static str,
    path: Option<MatchedPath>,
}

impl Route {
    pub(crate) fn of(request: &axum::extract::Request) -> Route {
        let method = match *request.method() {
            Method::GET => "GET",
            Method::POST => "POST",
            Method::PUT => "PUT",
            Method::PATCH => "PATCH",
            Method::DELETE => "DELETE",
            Method::HEAD => "HEAD",
            Method::OPTIONS => "OPTIONS",
            _ => "OTHER",
        };
        Route {
            method,
            path: request.extensions().get::<MatchedPath>().cloned(),
        }
    }

    fn path(&self) -> Option<&str> {
        self.path.as_ref().map(MatchedPath::as_str)
    }
}

/// Labels of the HTTP metrics: `api`, `route` ("POST /transfers", or
/// "unmatched" when no route matched) and `status` ("2xx", ...).
#[derive(Clone)]
pub(crate) struct RequestLabels {
    api: &'static str,
    route: Route,
    status: &'static str,
}

impl PartialEq for RequestLabels {
    fn eq(&self, other: &Self) -> bool {
        self.api == other.api
            && self.status == other.status
            && self.route.method == other.route.method
            && self.route.path() == other.route.path()
    }
}

impl Eq for RequestLabels {}

impl Hash for RequestLabels {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.api.hash(state);
        self.status.hash(state);
        self.route.method.hash(state);
        self.route.path().hash(state);
    }
}

impl fmt::Debug for RequestLabels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestLabels")
            .field("api", &self.api)
            .field("method", &self.route.method)
            .field("path", &self.route.path())
            .field("status", &self.status)
            .finish()
    }
}

impl EncodeLabelSet for RequestLabels {
    fn encode(&self, encoder: LabelSetEncoder) -> fmt::Result {
        // Scrape time only: allocating here is fine.
        let route = match self.route.path() {
            Some(path) => format!("{} {path}", self.route.method),
            None => "unmatched".to_string(),
        };
        let labels: [(&str, &str); 3] = [
            ("api", self.api),
            ("route", route.as_str()),
            ("status", self.status),
        ];
        EncodeLabelSet::encode(&labels, encoder)
    }
}

fn status_class(status: StatusCode) -> &'static str {
    match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// Labels of the stage histogram: `phase` and `stage`.
type StageLabels = [(&'static str, &'static str); 2];

/// Where the scrape-time figures come from (closures, so tests need no
/// running pipeline).
type EngineSource = Box<dyn Fn() -> StatsSnapshot + Send + Sync>;
type CallbackSource = Box<dyn Fn() -> Vec<DestinationStats> + Send + Sync>;
type DestinationField = fn(&DestinationStats) -> u64;

/// The registry and the metrics recorded as things happen.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Family<RequestLabels, Histogram, fn() -> Histogram>,
    lag: Histogram,
    lag_last: Gauge<f64, AtomicU64>,
    lag_max: Gauge<f64, AtomicU64>,
    /// Changes the feed's publisher has had confirmed by the broker.
    pub feed_published: Counter,
    /// The last committed feed_seq less the publisher's durable cursor.
    pub feed_lag: Gauge,
    /// The last committed feed_seq less the alerts' durable cursor.
    pub alerts_lag: Gauge,
    /// Changes the alerts passed over: deleted by retention before they
    /// were read.
    pub alerts_skipped: Counter,
    /// Answers to a discovery asked of every proxy that came after the
    /// first holder had won (200 to the proxy, passed on to nobody).
    pub discovery_answers_dropped: Counter,
    /// The last committed feed_seq less the hourly rollup's cursor.
    pub rollup_lag: Gauge,
    /// Transfers committed that the party index does not cover yet.
    pub party_index_unfiled: Gauge,
    /// Seconds of commits the commit index does not cover yet.
    pub commit_index_unfiled_seconds: Gauge,
    /// `kasi_stage_duration_seconds`, one per (phase, stage) in
    /// [`cell_index`] order, created up front so recording never hashes.
    stage_durations: Vec<Histogram>,
    windows_closed: Family<Vec<(String, String)>, Counter>,
    position_utilisation: Family<Vec<(String, String)>, Gauge<f64, AtomicU64>>,
    position_alarm: Family<Vec<(String, String)>, Gauge>,
    liquidity_share: Family<Vec<(String, String)>, Gauge<f64, AtomicU64>>,
    alerts: Family<Vec<(String, String)>, Counter>,
    sources_refused: Family<Vec<(String, String)>, Counter>,
    refusals: Family<Vec<(String, String)>, Counter>,
    admin_forbidden: Family<Vec<(String, String)>, Counter>,
    admin_provider_refused: Family<Vec<(String, String)>, Counter>,
    approvals: Family<Vec<(String, String)>, Counter>,
    approvals_pending: Gauge,
    /// Transfer outcomes by payer and failures by code (see
    /// [`crate::transfer_stats`]), also served as `/stats/dfsps` and
    /// `/stats/transfer-errors`.
    pub transfers: Arc<crate::transfer_stats::TransferStats>,
    /// The FSPIOP listener's connection counters (`server::serve` keeps them).
    pub api_connections: Arc<crate::server::ConnectionStats>,
    /// The admin listener's.
    pub admin_connections: Arc<crate::server::ConnectionStats>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics reading the pipeline's and the dispatcher's counters from
    /// `engine` and `callbacks` at each scrape.
    pub fn new(
        engine: impl Fn() -> StatsSnapshot + Send + Sync + 'static,
        callbacks: impl Fn() -> Vec<DestinationStats> + Send + Sync + 'static,
        role: Arc<crate::role::Role>,
    ) -> Metrics {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let durations = Family::<RequestLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        let lag = latency_histogram();
        let lag_last = Gauge::<f64, AtomicU64>::default();
        let lag_max = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "kasi_http_requests",
            "HTTP requests answered, by API, route and status class",
            requests.clone(),
        );
        registry.register(
            "kasi_http_request_duration_seconds",
            "Time from a request's arrival at the guard to its response head",
            durations.clone(),
        );
        registry.register(
            "kasi_runtime_lag_seconds",
            "How late the async runtime woke a 100 ms sleep (scheduling delay)",
            lag.clone(),
        );
        registry.register(
            "kasi_runtime_lag_last_seconds",
            "The runtime probe's latest scheduling delay",
            lag_last.clone(),
        );
        registry.register(
            "kasi_runtime_lag_max_seconds",
            "The runtime probe's largest scheduling delay so far",
            lag_max.clone(),
        );
        let feed_published = Counter::default();
        registry.register(
            "kasi_feed_published",
            "Change feed rows the AMQP publisher has had confirmed by the broker",
            feed_published.clone(),
        );
        let feed_lag = Gauge::default();
        registry.register(
            "kasi_feed_lag",
            "The last committed change feed_seq less the AMQP publisher's durable cursor",
            feed_lag.clone(),
        );
        let alerts_lag = Gauge::default();
        registry.register(
            "kasi_alerts_lag",
            "The last committed change feed_seq less the alerts' durable cursor (changes not yet turned into alerts and delivered)",
            alerts_lag.clone(),
        );
        let alerts_skipped = Counter::default();
        registry.register(
            "kasi_alerts_skipped",
            "Changes deleted by --feed-retention before the alerts read them (their alerts never sent)",
            alerts_skipped.clone(),
        );
        let discovery_answers_dropped = Counter::default();
        registry.register(
            "kasi_discovery_answers_dropped",
            "Answers to a discovery asked of every proxy that came after another proxy's scheme had named the holder (answered 200, passed on to nobody)",
            discovery_answers_dropped.clone(),
        );
        let rollup_lag = Gauge::default();
        registry.register(
            "kasi_rollup_lag",
            "The last committed change feed_seq less the hourly rollup's durable cursor (the dashboard's)",
            rollup_lag.clone(),
        );
        let party_index_unfiled = Gauge::default();
        registry.register(
            "kasi_party_index_unfiled",
            "Transfers committed that the party index does not cover yet (a search by party walks them one by one; about one block of 16,384 once caught up)",
            party_index_unfiled.clone(),
        );
        let commit_index_unfiled_seconds = Gauge::default();
        registry.register(
            "kasi_commit_index_unfiled_seconds",
            "Seconds of commits, up to the newest, that the commit index does not cover yet (a statement walks every DFSP's commits of them; a minute or two once caught up)",
            commit_index_unfiled_seconds.clone(),
        );
        let stages = Family::<StageLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        registry.register(
            "kasi_stage_duration_seconds",
            "Time a transfer message spent in each stage inside the hub, by phase and stage",
            stages.clone(),
        );
        // Histograms share their state with their clones.
        let stage_durations = cells()
            .map(|(phase, stage)| {
                stages
                    .get_or_create(&[("phase", phase.as_str()), ("stage", stage.as_str())])
                    .clone()
            })
            .collect();
        let windows_closed = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "kasi_settlement_windows_closed",
            "Settlement windows closed, by trigger (api or schedule)",
            windows_closed.clone(),
        );
        let position_utilisation =
            Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "kasi_position_net_debit_cap_ratio",
            "A DFSP's position (reservations included) as a share of its net debit cap",
            position_utilisation.clone(),
        );
        let position_alarm = Family::<Vec<(String, String)>, Gauge>::default();
        registry.register(
            "kasi_position_alarm",
            "1 while a DFSP's position is at or above the alarm share of its net debit cap",
            position_alarm.clone(),
        );
        let liquidity_share = Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "kasi_position_liquidity_ratio",
            "A DFSP's position (reservations included) as a share of its liquidity (its settlement account's funds)",
            liquidity_share.clone(),
        );
        let alerts = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "kasi_alerts",
            "Alerts to the DFSPs' contacts by kind and result: sent, retried (one per failed try), refused (by the SMTP server, given up), dropped (queue full), rate_limited, duplicate, no_recipient, bad_address",
            alerts.clone(),
        );
        let sources_refused = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "kasi_fspiop_source_refused",
            "FSPIOP requests refused because the caller is not the FSP its FSPIOP-Source names, by the FSP claimed",
            sources_refused.clone(),
        );
        let refusals = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "kasi_refusals",
            "Requests refused, by class (identity, hub_source, not_party, jws, unsolicited_answer, path_syntax, duplicate_header, stale_date, admin_*, and the pause rule's payer_may_not_send, payee_may_not_receive, account_inactive) and by the participant claimed (a known DFSP, or unknown)",
            refusals.clone(),
        );
        let admin_forbidden = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "kasi_admin_forbidden",
            "Admin requests refused by the access table, by role (operator, finance, viewer, auditor, dfsp) and reason (role, other_dfsp, unlisted_route)",
            admin_forbidden.clone(),
        );
        let admin_provider_refused = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "kasi_admin_provider_refused",
            "Admin requests whose identity provider access token was refused, by reason (expired, wrong audience, unknown key, no kasi role, ...)",
            admin_provider_refused.clone(),
        );
        let approvals = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "kasi_approvals",
            "Four-eyes steps, by action (funds-out, net-debit-cap, ...) and step (requested, approved, rejected, applied, failed, expired)",
            approvals.clone(),
        );
        let approvals_pending = Gauge::default();
        registry.register(
            "kasi_approvals_pending",
            "Four-eyes changes awaiting a second person (as of the hub's last look, at most a second old; 0 with four-eyes off)",
            approvals_pending.clone(),
        );
        registry.register_collector(Box::new(Pipeline {
            engine: Box::new(engine),
            callbacks: Box::new(callbacks),
        }));
        let transfers = Arc::new(crate::transfer_stats::TransferStats::new());
        registry.register_collector(Box::new(crate::transfer_stats::TransferStatsCollector(
            transfers.clone(),
        )));
        registry.register_collector(Box::new(Process));
        registry.register_collector(Box::new(RoleCollector(role)));
        let api_connections = Arc::<crate::server::ConnectionStats>::default();
        let admin_connections = Arc::<crate::server::ConnectionStats>::default();
        registry.register_collector(Box::new(Connections {
            listeners: vec![
                ("fspiop", api_connections.clone()),
                ("admin", admin_connections.clone()),
            ],
        }));
        Metrics {
            registry,
            requests,
            durations,
            lag,
            lag_last,
            lag_max,
            feed_published,
            feed_lag,
            alerts_lag,
            alerts_skipped,
            discovery_answers_dropped,
            rollup_lag,
            party_index_unfiled,
            commit_index_unfiled_seconds,
            stage_durations,
            windows_closed,
            position_utilisation,
            position_alarm,
            liquidity_share,
            alerts,
            sources_refused,
            refusals,
            admin_forbidden,
            admin_provider_refused,
            approvals,
            approvals_pending,
            transfers,
            api_connections,
            admin_connections,
        }
    }

    /// Counts a refused FSPIOP-Source under `participant` (a known DFSP,
    /// or "unknown"); the total for it.
    pub fn record_source_refused(&self, participant: &str) -> u64 {
        let label = participant;
        self.sources_refused
            .get_or_create(&vec![("participant".to_string(), label.to_string())])
            .inc()
            + 1
    }

    /// Exposes each DFSP's mode (pausing a DFSP); the hub itself, named
    /// `hub_name`, has none that matters.
    pub fn register_participant_modes(
        &mut self,
        endpoints: Arc<crate::endpoints::Endpoints>,
        hub_name: ledger::FspName,
    ) {
        self.registry.register_collector(Box::new(ParticipantModes {
            endpoints,
            hub_name,
        }));
    }

    /// Exposes how many routed requests await their answers.
    pub fn register_pending_answers(&mut self, answers: Arc<crate::answers::Answers>) {
        self.registry
            .register_collector(Box::new(PendingAnswers(answers)));
    }

    /// Exposes the wire log's counters (see [`crate::wire_log`]).
    pub fn register_wire_log(&mut self, log: wirelog::WireLog) {
        self.registry
            .register_collector(Box::new(WireLogCollector(log)));
    }

    /// Exposes the JWS pool's saturation (see [`crate::jws_pool`]).
    pub fn register_jws_pool(&mut self, pool: &crate::jws_pool::JwsPool) {
        pool.register(&mut self.registry);
    }

    /// Counts a refusal of `class` under `participant` (a bounded label);
    /// the total for the pair.
    pub fn record_refusal(&self, class: &str, participant: &str) -> u64 {
        self.refusals
            .get_or_create(&vec![
                ("class".to_string(), class.to_string()),
                ("participant".to_string(), participant.to_string()),
            ])
            .inc()
            + 1
    }

    /// Counts an admin request refused by the access table
    /// (`kasi_admin_forbidden_total`): `role` is the role's kind (a DFSP's
    /// name is not a label: `dfsp`), `reason` one of
    /// [`crate::access::Refusal`]'s.
    pub fn record_admin_provider_refused(&self, reason: &str) {
        self.admin_provider_refused
            .get_or_create(&vec![("reason".to_string(), reason.to_string())])
            .inc();
    }

    /// Counts a four-eyes step (`kasi_approvals_total`) of `action`.
    pub fn record_approval_step(&self, action: &str, step: &str) {
        self.approvals
            .get_or_create(&vec![
                ("action".to_string(), action.to_string()),
                ("step".to_string(), step.to_string()),
            ])
            .inc();
    }

    /// How many four-eyes changes await a decision.
    pub fn set_approvals_pending(&self, pending: usize) {
        self.approvals_pending.set(pending as i64);
    }

    pub fn record_admin_forbidden(&self, role: &str, reason: &str) {
        self.admin_forbidden
            .get_or_create(&vec![
                ("role".to_string(), role.to_string()),
                ("reason".to_string(), reason.to_string()),
            ])
            .inc();
    }

    /// Counts a closed settlement window (`trigger`: api or schedule).
    pub fn record_window_closed(&self, trigger: &str) {
        self.windows_closed
            .get_or_create(&vec![("trigger".to_string(), trigger.to_string())])
            .inc();
    }

    /// Sets a DFSP's position share of its net debit cap and its alarm.
    pub fn set_position(&self, participant: &str, currency: &str, ratio: f64, alarm: bool) {
        let labels = vec![
            ("participant".to_string(), participant.to_string()),
            ("currency".to_string(), currency.to_string()),
        ];
        self.position_utilisation.get_or_create(&labels).set(ratio);
        self.position_alarm
            .get_or_create(&labels)
            .set(i64::from(alarm));
    }

    /// Sets a DFSP's position share of its liquidity.
    pub fn set_liquidity_share(&self, participant: &str, currency: &str, ratio: f64) {
        self.liquidity_share
            .get_or_create(&vec![
                ("participant".to_string(), participant.to_string()),
                ("currency".to_string(), currency.to_string()),
            ])
            .set(ratio);
    }

    /// Counts one alert's `result` (see [`crate::alerts`]).
    pub fn record_alert(&self, kind: &str, result: &str) {
        self.alerts
            .get_or_create(&vec![
                ("kind".to_string(), kind.to_string()),
                ("result".to_string(), result.to_string()),
            ])
            .inc();
    }

    /// Observes one stage's duration (called by [`crate::stages::StageTimer`]).
    pub(crate) fn record_stage(&self, phase: Phase, stage: Stage, duration: Duration) {
        self.stage_durations[cell_index(phase, stage)].observe(duration.as_secs_f64());
    }

    /// Counts one answered request (called by the guard middleware).
    pub(crate) fn record_request(
        &self,
        api: &'static str,
        route: Route,
        status: StatusCode,
        elapsed: Duration,
    ) {
        let labels = RequestLabels {
            api,
            route,
            status: status_class(status),
        };
        self.requests.get_or_create(&labels).inc();
        self.durations
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    fn record_lag(&self, lag: Duration) {
        let seconds = lag.as_secs_f64();
        self.lag.observe(seconds);
        self.lag_last.set(seconds);
        // Only the probe writes these, so read-then-set is not racy.
        if seconds > self.lag_max.get() {
            self.lag_max.set(seconds);
        }
    }

    /// The exposition, in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail; the collectors do not fail either.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Starts the runtime probe on the current tokio runtime: every
    /// [`PROBE_PERIOD`] it sleeps and records how much later than asked it
    /// woke. It stops once the metrics are dropped.
    pub fn start_runtime_probe(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let metrics: Weak<Metrics> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let asleep = Instant::now();
                tokio::time::sleep(PROBE_PERIOD).await;
                let lag = asleep.elapsed().saturating_sub(PROBE_PERIOD);
                match metrics.upgrade() {
                    Some(metrics) => metrics.record_lag(lag),
                    None => return,
                }
            }
        })
    }
}

/// `GET /metrics` (admin address).
pub async fn scrape(State(hub): State<Arc<Hub>>) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], hub.metrics.render()).into_response()
}

/// The process's own figures, under the names every Prometheus client
/// library uses (`process_resident_memory_bytes`), read at scrape time.
#[derive(Debug)]
struct Process;

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        // Absent where /proc cannot say (not Linux): no series rather than 0.
        let Some(bytes) = resident_memory_bytes() else {
            return Ok(());
        };
        let metric = encoder.encode_descriptor(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(bytes as i64).encode(metric)
    }
}

/// This process's resident set: `/proc/self/statm`'s second field (pages)
/// times the page size.
fn resident_memory_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    Some(parse_statm_resident(&statm)? * page_size())
}

/// The resident pages in a `/proc/<pid>/statm` line (size resident shared ...).
fn parse_statm_resident(statm: &str) -> Option<u64> {
    statm.split_whitespace().nth(1)?.parse().ok()
}

/// The page size, from the kernel's auxiliary vector (`AT_PAGESZ`), so no
/// libc call is needed; 4 KiB when it cannot be read.
fn page_size() -> u64 {
    const AT_PAGESZ: u64 = 6;
    const WORD: usize = std::mem::size_of::<usize>();
    let auxv = std::fs::read("/proc/self/auxv").unwrap_or_default();
    let word = |chunk: &[u8]| -> u64 {
        let mut bytes = [0u8; WORD];
        bytes.copy_from_slice(chunk);
        usize::from_ne_bytes(bytes) as u64
    };
    auxv.chunks_exact(2 * WORD)
        .map(|pair| (word(&pair[..WORD]), word(&pair[WORD..])))
        .find(|(key, _)| *key == AT_PAGESZ)
        .map(|(_, size)| size)
        .filter(|size| *size > 0)
        .unwrap_or(4096)
}

/// The listeners' connection counters, by API.
struct Connections {
    listeners: Vec<(&'static str, Arc<crate::server::ConnectionStats>)>,
}

impl fmt::Debug for Connections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connections").finish_non_exhaustive()
    }
}

impl Collector for Connections {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        use std::sync::atomic::Ordering::Relaxed;
        type Field = fn(&crate::server::ConnectionStats) -> u64;
        let series: [(&str, &str, MetricType, Field); 5] = [
            (
                "kasi_connections_open",
                "Connections open now, by API",
                MetricType::Gauge,
                |s| s.open.load(Relaxed) as u64,
            ),
            (
                "kasi_connections_accepted",
                "Connections accepted, by API (refusals included)",
                MetricType::Counter,
                |s| s.accepted.load(Relaxed),
            ),
            (
                "kasi_connections_refused",
                "Connections refused because --max-connections were open, by API",
                MetricType::Counter,
                |s| s.refused.load(Relaxed),
            ),
            (
                "kasi_connections_refused_per_client",
                "Connections refused because their client held --max-connections-per-client, by API",
                MetricType::Counter,
                |s| s.refused_per_client.load(Relaxed),
            ),
            (
                "kasi_accept_errors",
                "Failed accepts (out of file descriptors and the like), by API",
                MetricType::Counter,
                |s| s.accept_errors.load(Relaxed),
            ),
        ];
        for (name, help, metric_type, value) in series {
            let mut metric = encoder.encode_descriptor(name, help, None, metric_type)?;
            for (api, stats) in &self.listeners {
                let labels = [("api", *api)];
                let sample = metric.encode_family(&labels)?;
                match metric_type {
                    MetricType::Counter => ConstCounter::new(value(stats)).encode(sample)?,
                    _ => ConstGauge::new(value(stats) as i64).encode(sample)?,
                }
            }
        }
        Ok(())
    }
}

struct Pipeline {
    engine: EngineSource,
    callbacks: CallbackSource,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline").finish_non_exhaustive()
    }
}

fn seconds(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(value).encode(metric)
}

fn counter_f64(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(value).encode(metric)
}

/// `kasi_wire_log_*`, read at scrape time.
#[derive(Debug)]
struct WireLogCollector(wirelog::WireLog);

impl Collector for WireLogCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let stats = self.0.stats();
        counter(
            &mut encoder,
            "kasi_wire_log_written",
            "Messages of transfers and conversions written to the wire log",
            stats.written,
        )?;
        counter(
            &mut encoder,
            "kasi_wire_log_dropped",
            "Messages the wire log dropped: its writer was behind, or could not write (transfers are not affected)",
            stats.dropped,
        )?;
        counter(
            &mut encoder,
            "kasi_wire_log_write_errors",
            "Writes to the wire log's files that failed (a full disk, ...)",
            stats.write_errors,
        )?;
        let metric = encoder.encode_descriptor(
            "kasi_wire_log_bytes",
            "The wire log's files on disk, in bytes (bounded by --wire-log-max-bytes)",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(stats.bytes_on_disk as i64).encode(metric)
    }
}

/// `kasi_pending_answers` and `kasi_pending_answers_capacity`.
#[derive(Debug)]
struct PendingAnswers(Arc<crate::answers::Answers>);

impl Collector for PendingAnswers {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        gauge_f64(
            &mut encoder,
            "kasi_pending_answers",
            "Routed requests (lookups, quotes, transaction requests, authorizations, bulk quotes) awaiting their answer",
            self.0.len() as f64,
        )?;
        gauge_f64(
            &mut encoder,
            "kasi_pending_answers_capacity",
            "Routed requests that may await answers at once; beyond, new ones are refused (2003)",
            self.0.capacity() as f64,
        )
    }
}

/// `kasi_participant_mode{participant, mode}`: 1 for each participant's
/// mode, 0 for the other three (so that a change shows as one series
/// going to 0 and another to 1), from the hub's copy of the committed
/// modes. The pause rule's refusals are `kasi_refusals_total` of classes
/// `payer_may_not_send`, `payee_may_not_receive`, `account_inactive`.
struct ParticipantModes {
    endpoints: Arc<crate::endpoints::Endpoints>,
    hub_name: ledger::FspName,
}

impl fmt::Debug for ParticipantModes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ParticipantModes")
    }
}

impl Collector for ParticipantModes {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let mut metric = encoder.encode_descriptor(
            "kasi_participant_mode",
            "1 for the mode each participant is in (active, send-only, receive-only, suspended), 0 for the others",
            None,
            MetricType::Gauge,
        )?;
        let modes = self.endpoints.participant_modes();
        for (participant, mode) in modes.into_iter().filter(|(p, _)| *p != self.hub_name) {
            for candidate in ledger::ParticipantMode::ALL {
                let labels = [
                    ("participant", participant.as_str()),
                    ("mode", candidate.as_str()),
                ];
                ConstGauge::new(i64::from(candidate == mode))
                    .encode(metric.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// `kasi_role_active`, `kasi_store_reachable`, `kasi_lease_fencing`.
#[derive(Debug)]
pub struct RoleCollector(pub Arc<crate::role::Role>);

impl Collector for RoleCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let role = &self.0;
        let mut metric = encoder.encode_descriptor(
            "kasi_role_active",
            "1 on the active hub (it serves and writes), 0 on a standby; labelled by store kind",
            None,
            MetricType::Gauge,
        )?;
        let labels = [("store", role.store_kind)];
        ConstGauge::new(i64::from(role.is_active())).encode(metric.encode_family(&labels)?)?;
        gauge_f64(
            &mut encoder,
            "kasi_store_reachable",
            "1 while the store answered the last time this process asked",
            if role.store_reachable() { 1.0 } else { 0.0 },
        )?;
        if let Some((_, fencing)) = role.lease() {
            gauge_f64(
                &mut encoder,
                "kasi_lease_fencing",
                "The lease's fencing number as last seen (it goes up by one at every takeover)",
                fencing as f64,
            )?;
        }
        Ok(())
    }
}

fn gauge_f64(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

/// One sample per destination.
fn per_destination(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric_type: MetricType,
    stats: &[DestinationStats],
    value: impl Fn(&DestinationStats) -> u64,
) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, metric_type)?;
    for destination in stats {
        let labels = [("destination", destination.destination.as_str())];
        let sample = metric.encode_family(&labels)?;
        match metric_type {
            MetricType::Counter => ConstCounter::new(value(destination)).encode(sample)?,
            _ => ConstGauge::new(value(destination) as i64).encode(sample)?,
        }
    }
    Ok(())
}

impl Collector for Pipeline {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let e = (self.engine)();
        let enc = &mut encoder;
        counter(
            enc,
            "kasi_ledger_batches",
            "Batches the ledger thread applied",
            e.ledger_batches,
        )?;
        counter(
            enc,
            "kasi_ledger_commands",
            "Commands the ledger thread applied",
            e.commands,
        )?;
        counter_f64(
            enc,
            "kasi_ledger_apply_seconds",
            "Time the ledger thread spent applying batches",
            seconds(e.apply_nanos),
        )?;
        gauge_f64(
            enc,
            "kasi_ledger_apply_max_seconds",
            "Longest single batch apply so far",
            seconds(e.max_apply_nanos),
        )?;
        gauge_f64(
            enc,
            "kasi_ledger_transfers_in_memory",
            "Transfers in the ledger's memory: reserved ones, finished ones within the retention horizon, funds movements",
            e.transfers_in_memory as f64,
        )?;
        gauge_f64(
            enc,
            "kasi_ledger_quotes_in_memory",
            "Recorded quotes (--quotes-persistent) in the ledger's memory; older ones are answered from the store",
            e.quotes_in_memory as f64,
        )?;
        counter(
            enc,
            "kasi_ledger_transfers_evicted",
            "Finished transfers that left memory past the retention horizon (answered from the store)",
            e.transfers_evicted,
        )?;
        counter(
            enc,
            "kasi_store_lookups",
            "Ids the ledger thread read from the store before applying their batch (ids not in memory, with a retention horizon)",
            e.store_lookups,
        )?;
        counter(
            enc,
            "kasi_store_commits",
            "Store transactions committed",
            e.store_commits,
        )?;
        counter(
            enc,
            "kasi_store_records",
            "Records the store committed",
            e.records,
        )?;
        counter_f64(
            enc,
            "kasi_store_commit_seconds",
            "Time the store thread spent committing (fsync included)",
            seconds(e.commit_nanos),
        )?;
        gauge_f64(
            enc,
            "kasi_store_commit_max_seconds",
            "Longest single store commit so far",
            seconds(e.max_commit_nanos),
        )?;
        counter(
            enc,
            "kasi_store_errors",
            "Store commit attempts that failed (each retry of a full disk counts)",
            e.store_errors,
        )?;
        gauge_f64(
            enc,
            "kasi_store_healthy",
            "1 while the store takes commits; 0 while a failure is retried or after the pipeline stopped",
            if e.store_healthy { 1.0 } else { 0.0 },
        )?;

        let c = (self.callbacks)();
        let counters: [(&str, &str, DestinationField); 5] = [
            (
                "kasi_callbacks_sent_ok",
                "Callbacks answered with a 2xx status",
                |d| d.sent_ok,
            ),
            (
                "kasi_callbacks_http_error",
                "Callbacks answered with a non-2xx status (not retried)",
                |d| d.http_error,
            ),
            (
                "kasi_callbacks_failed",
                "Callbacks given up (attempts exhausted, unusable URL, shutdown)",
                |d| d.failed,
            ),
            ("kasi_callbacks_retried", "Callback retries made", |d| {
                d.retried
            }),
            (
                "kasi_callbacks_dropped",
                "Callbacks refused (queue full or shutting down)",
                |d| d.dropped,
            ),
        ];
        for (name, help, value) in counters {
            per_destination(enc, name, help, MetricType::Counter, &c, value)?;
        }
        per_destination(
            enc,
            "kasi_callbacks_in_flight",
            "Callbacks taken by a worker and not finished",
            MetricType::Gauge,
            &c,
            |d| d.in_flight as u64,
        )?;
        per_destination(
            enc,
            "kasi_callbacks_queued",
            "Callbacks waiting in the queue",
            MetricType::Gauge,
            &c,
            |d| d.queued as u64,
        )?;
        per_destination(
            enc,
            "kasi_callbacks_dead_letters",
            "Callbacks kept as dead letters (undelivered by their deadline)",
            MetricType::Gauge,
            &c,
            |d| d.dead_letters,
        )?;
        per_destination(
            enc,
            "kasi_callbacks_failing_since_seconds",
            "Unix time of the first failed attempt since the DFSP last answered; 0 while it answers",
            MetricType::Gauge,
            &c,
            |d| u64::try_from(d.failing_since_ms / 1000).unwrap_or(0),
        )?;
        {
            // Sum and count only (one +Inf bucket): rate(sum)/rate(count)
            // is the mean time to a callback's response head.
            let mut metric = enc.encode_descriptor(
                "kasi_callback_latency_seconds",
                "Time from the start of a callback's answered attempt to the response head",
                None,
                MetricType::Histogram,
            )?;
            for d in &c {
                let labels = [("destination", d.destination.as_str())];
                let mut sample = metric.encode_family(&labels)?;
                sample.encode_histogram::<NoLabelSet>(
                    d.latency_sum_us as f64 / 1e6,
                    d.latency_count,
                    &[(f64::MAX, d.latency_count)], // f64::MAX is "+Inf" to the encoder,
                    None::<&HashMap<usize, Exemplar<NoLabelSet, f64>>>,
                )?;
            }
        }
        let mut metric = enc.encode_descriptor(
            "kasi_callback_latency_max_seconds",
            "Longest time to a callback's response head so far",
            None,
            MetricType::Gauge,
        )?;
        for d in &c {
            let labels = [("destination", d.destination.as_str())];
            ConstGauge::new(d.latency_max_us as f64 / 1e6)
                .encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn destination(name: &str) -> DestinationStats {
        DestinationStats {
            destination: name.to_string(),
            sent_ok: 7,
            failed: 1,
            retried: 2,
            dropped: 0,
            http_error: 3,
            in_flight: 4,
            queued: 5,
            latency_sum_us: 1_500_000,
            latency_count: 10,
            latency_max_us: 250_000,
            failing_since_ms: 1_700_000_000_000,
            dead_letters: 2,
        }
    }

    fn metrics() -> Metrics {
        Metrics::new(
            || StatsSnapshot {
                ledger_batches: 3,
                commands: 12,
                store_commits: 2,
                records: 40,
                commit_nanos: 2_000_000_000,
                apply_nanos: 500_000_000,
                max_commit_nanos: 1_500_000_000,
                max_apply_nanos: 250_000_000,
                store_errors: 4,
                store_lookups: 9,
                store_healthy: false,
                transfers_in_memory: 7,
                transfers_evicted: 5,
                quotes_in_memory: 2,
            },
            || vec![destination("payeefsp"), destination("payerfsp")],
            Arc::new(crate::role::Role::embedded()),
        )
    }

    fn request(method: Method, path: &str) -> axum::extract::Request {
        axum::extract::Request::builder()
            .method(method)
            .uri(path)
            .body(axum::body::Body::empty())
            .unwrap()
    }

    #[test]
    fn the_exposition_holds_every_metric() {
        let metrics = metrics();
        let route = Route::of(&request(Method::GET, "/nowhere"));
        metrics.record_request(
            "admin",
            route,
            StatusCode::NOT_FOUND,
            Duration::from_micros(300),
        );
        metrics.record_lag(Duration::from_millis(3));
        metrics.record_stage(
            Phase::Fulfil,
            Stage::LedgerQueue,
            Duration::from_micros(200),
        );
        metrics.record_lag(Duration::from_millis(1));
        let text = metrics.render();
        for expected in [
            "kasi_http_requests_total{api=\"admin\",route=\"unmatched\",status=\"4xx\"} 1",
            "kasi_http_request_duration_seconds_bucket{le=\"0.0005\",api=\"admin\",route=\"unmatched\",status=\"4xx\"} 1",
            "kasi_http_request_duration_seconds_count{api=\"admin\",route=\"unmatched\",status=\"4xx\"} 1",
            "kasi_ledger_batches_total 3",
            "kasi_ledger_commands_total 12",
            "kasi_ledger_apply_seconds_total 0.5",
            "kasi_ledger_apply_max_seconds 0.25",
            "kasi_ledger_quotes_in_memory 2.0",
            "kasi_store_commits_total 2",
            "kasi_store_records_total 40",
            "kasi_store_commit_seconds_total 2.0",
            "kasi_store_commit_max_seconds 1.5",
            "kasi_store_errors_total 4",
            "kasi_store_lookups_total 9",
            "kasi_store_healthy 0.0",
            "kasi_callbacks_sent_ok_total{destination=\"payeefsp\"} 7",
            "kasi_callbacks_http_error_total{destination=\"payerfsp\"} 3",
            "kasi_callbacks_failed_total{destination=\"payeefsp\"} 1",
            "kasi_callbacks_retried_total{destination=\"payeefsp\"} 2",
            "kasi_callbacks_dropped_total{destination=\"payeefsp\"} 0",
            "kasi_callbacks_in_flight{destination=\"payeefsp\"} 4",
            "kasi_callbacks_queued{destination=\"payeefsp\"} 5",
            "kasi_callbacks_dead_letters{destination=\"payeefsp\"} 2",
            "kasi_callbacks_failing_since_seconds{destination=\"payerfsp\"} 1700000000",
            "kasi_callback_latency_seconds_sum{destination=\"payeefsp\"} 1.5",
            "kasi_callback_latency_seconds_count{destination=\"payeefsp\"} 10",
            "kasi_callback_latency_max_seconds{destination=\"payeefsp\"} 0.25",
            "kasi_runtime_lag_seconds_count 2",
            "kasi_runtime_lag_last_seconds 0.001",
            "kasi_runtime_lag_max_seconds 0.003",
            "kasi_callback_latency_seconds_bucket{le=\"+Inf\",destination=\"payerfsp\"} 10",
            "kasi_stage_duration_seconds_bucket{le=\"0.00025\",phase=\"fulfil\",stage=\"ledger_queue\"} 1",
            "kasi_stage_duration_seconds_count{phase=\"fulfil\",stage=\"ledger_queue\"} 1",
            "kasi_stage_duration_seconds_count{phase=\"prepare\",stage=\"http_receive\"} 0",
            "# EOF",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        // This process's resident memory, where /proc says (Linux).
        if cfg!(target_os = "linux") {
            let rss = text
                .lines()
                .find_map(|line| line.strip_prefix("process_resident_memory_bytes "))
                .unwrap_or_else(|| panic!("no process_resident_memory_bytes in:\n{text}"));
            let rss: u64 = rss.parse().expect("an integer");
            // More than a megabyte, less than a terabyte: a real RSS.
            assert!((1 << 20..1 << 40).contains(&rss), "{rss}");
            assert!(text.contains("# TYPE process_resident_memory_bytes gauge"));
        }
    }

    #[test]
    fn statm_gives_the_resident_pages() {
        assert_eq!(
            parse_statm_resident("2566 1234 567 1 0 300 0\n"),
            Some(1234)
        );
        assert_eq!(parse_statm_resident("2566"), None);
        assert_eq!(parse_statm_resident(""), None);
        let page = page_size();
        assert!(page.is_power_of_two() && page >= 4096, "{page}");
    }
}
