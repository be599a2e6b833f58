//! Where a transfer spends its time inside the hub, stage by stage, for the
//! benchmark harness and the operator.
//!
//! Each FSPIOP transfer message (`prepare` = `POST /transfers`, `fulfil` =
//! `PUT /transfers/{ID}`, `abort` = `PUT /transfers/{ID}/error`) that gets a
//! ledger outcome and is answered 202/200 is cut into contiguous stages:
//!
//! | stage           | from                                   | to                                   |
//! |-----------------|----------------------------------------|--------------------------------------|
//! | `http_receive`  | the handler starts (head parsed)       | the body is fully read               |
//! | `validation`    | body read                              | handed to the engine (headers, body) |
//! | `ledger_queue`  | handed to the engine                   | the ledger thread starts its batch   |
//! | `ledger_apply`  | batch apply starts                     | batch apply ends                     |
//! | `store_commit`  | batch apply ends                       | the batch is durable (reply called)  |
//! | `response`      | durable                                | the handler returns its 202/200      |
//! | `callback_send` | the forwarded callback is handed to the dispatcher | the DFSP's response head (2xx) |
//!
//! `callback_send` overlaps `response` (the callback is queued before the
//! answer) and covers the dispatcher's queueing; it is recorded for the
//! callback that carries the message on (the prepare to the payee, the
//! fulfil or abort to the payer), only when it is answered with a 2xx.
//!
//! [`StageStats`] aggregates every message per (phase, stage): one lock per
//! message, no allocation. One transfer in [`StageTimer::sample_every`]
//! (chosen by a hash of its id, so its prepare and its fulfil are both
//! chosen) also gets a trace, the instants of its stages, kept in a ring of
//! the last [`TRACE_RING_CAPACITY`]; only a sampled transfer allocates.
//! The admin API serves both (`GET`/`DELETE /stats/stages`,
//! `GET /stats/traces`); the durations also feed the Prometheus histogram
//! `kasi_stage_duration_seconds{phase,stage}`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use engine::BatchTiming;
use ledger::TransferId;
use serde_json::{json, Value};

use crate::metrics::Metrics;
use crate::notify::splitmix64;
use crate::Hub;

/// Traces kept: the most recent ones, complete or partial.
pub const TRACE_RING_CAPACITY: usize = 256;
/// One transfer in this many is traced unless configured otherwise.
pub const DEFAULT_TRACE_SAMPLE_EVERY: u64 = 1000;
/// Spans one trace holds at most (a DFSP resending the same transfer over and
/// over must not grow it without bound): three phases of seven stages, twice.
const MAX_SPANS_PER_TRACE: usize = 42;

/// A transfer message, as the stages are grouped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Prepare,
    Fulfil,
    Abort,
}

impl Phase {
    /// In pipeline order, as reported.
    pub const ALL: [Phase; 3] = [Phase::Prepare, Phase::Fulfil, Phase::Abort];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Prepare => "prepare",
            Phase::Fulfil => "fulfil",
            Phase::Abort => "abort",
        }
    }
}

/// A stage of a transfer message's way through the hub (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    HttpReceive,
    Validation,
    LedgerQueue,
    LedgerApply,
    StoreQueue,
    StoreCommit,
    Response,
    CallbackSend,
}

impl Stage {
    /// In pipeline order, as reported.
    pub const ALL: [Stage; 8] = [
        Stage::HttpReceive,
        Stage::Validation,
        Stage::LedgerQueue,
        Stage::LedgerApply,
        Stage::StoreQueue,
        Stage::StoreCommit,
        Stage::Response,
        Stage::CallbackSend,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::HttpReceive => "http_receive",
            Stage::Validation => "validation",
            Stage::LedgerQueue => "ledger_queue",
            Stage::LedgerApply => "ledger_apply",
            Stage::StoreQueue => "store_queue",
            Stage::StoreCommit => "store_commit",
            Stage::Response => "response",
            Stage::CallbackSend => "callback_send",
        }
    }
}

/// Number of (phase, stage) pairs.
pub(crate) const CELLS: usize = Phase::ALL.len() * Stage::ALL.len();

/// The index of (phase, stage) in pipeline order.
pub(crate) fn cell_index(phase: Phase, stage: Stage) -> usize {
    phase as usize * Stage::ALL.len() + stage as usize
}

/// Every (phase, stage) in pipeline order.
pub(crate) fn cells() -> impl Iterator<Item = (Phase, Stage)> {
    Phase::ALL
        .into_iter()
        .flat_map(|phase| Stage::ALL.into_iter().map(move |stage| (phase, stage)))
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// Running figures of one (phase, stage), in µs.
#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    calls: u64,
    sum_us: f64,
    sum_sq_us2: f64,
    min_us: f64,
    max_us: f64,
}

impl Cell {
    fn add(&mut self, us: f64) {
        if self.calls == 0 {
            self.min_us = us;
            self.max_us = us;
        } else {
            self.min_us = self.min_us.min(us);
            self.max_us = self.max_us.max(us);
        }
        self.calls += 1;
        self.sum_us += us;
        self.sum_sq_us2 += us * us;
    }
}

/// What [`StageStats::summaries`] reports for one (phase, stage), in µs.
/// All zero when there were no calls.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StageSummary {
    pub phase: Phase,
    pub stage: Stage,
    pub calls: u64,
    pub min_us: f64,
    pub mean_us: f64,
    pub max_us: f64,
    /// Population standard deviation.
    pub std_us: f64,
    /// Sum of all durations.
    pub cum_us: f64,
}

struct StatsState {
    /// Unix ms of the start or of the last reset.
    since_ms: i64,
    cells: [Cell; CELLS],
}

/// Calls, sum, sum of squares, minimum and maximum per (phase, stage): a
/// small array behind one lock, taken once per message.
pub struct StageStats {
    state: Mutex<StatsState>,
}

impl Default for StageStats {
    fn default() -> Self {
        StageStats::new(crate::now_ms())
    }
}

impl StageStats {
    pub fn new(since_ms: i64) -> StageStats {
        StageStats {
            state: Mutex::new(StatsState {
                since_ms,
                cells: [Cell::default(); CELLS],
            }),
        }
    }

    /// A panic cannot leave the figures inconsistent in a way that matters,
    /// so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, StatsState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds one duration of `stage` in `phase`.
    pub fn record(&self, phase: Phase, stage: Stage, duration: Duration) {
        self.lock().cells[cell_index(phase, stage)].add(micros(duration));
    }

    /// Adds one duration for each of several stages of `phase`, under one lock.
    pub fn record_all(&self, phase: Phase, durations: &[(Stage, Duration)]) {
        let mut state = self.lock();
        for &(stage, duration) in durations {
            state.cells[cell_index(phase, stage)].add(micros(duration));
        }
    }

    /// Forgets every figure; `since_ms` becomes `now_ms`.
    pub fn reset(&self, now_ms: i64) {
        let mut state = self.lock();
        state.since_ms = now_ms;
        state.cells = [Cell::default(); CELLS];
    }

    /// `since_ms` and every (phase, stage) in pipeline order, zeros included.
    pub fn summaries(&self) -> (i64, Vec<StageSummary>) {
        let (since_ms, figures) = {
            let state = self.lock();
            (state.since_ms, state.cells)
        };
        let summaries = cells()
            .map(|(phase, stage)| {
                let cell = figures[cell_index(phase, stage)];
                let (mean_us, std_us) = match cell.calls {
                    0 => (0.0, 0.0),
                    calls => {
                        let n = calls as f64;
                        let mean = cell.sum_us / n;
                        // Rounding can take the difference a hair below zero.
                        let variance = (cell.sum_sq_us2 / n - mean * mean).max(0.0);
                        (mean, variance.sqrt())
                    }
                };
                StageSummary {
                    phase,
                    stage,
                    calls: cell.calls,
                    min_us: cell.min_us,
                    mean_us,
                    max_us: cell.max_us,
                    std_us,
                    cum_us: cell.sum_us,
                }
            })
            .collect();
        (since_ms, summaries)
    }
}

/// One stage of one message of a traced transfer.
#[derive(Clone, Copy, Debug)]
struct Span {
    phase: Phase,
    stage: Stage,
    start: Instant,
    end: Instant,
}

struct Trace {
    transfer_id: TransferId,
    spans: Vec<Span>,
}

/// A traced transfer's spans, as `GET /stats/traces` reports them.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceView {
    pub transfer_id: TransferId,
    /// Sorted by start (then end).
    pub spans: Vec<SpanView>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpanView {
    pub phase: Phase,
    pub stage: Stage,
    /// µs from the transfer's first instant: the start of its prepare's
    /// `http_receive` (or, without a prepare, its earliest span).
    pub start_us: f64,
    pub end_us: f64,
}

/// The most recent traces, oldest first.
#[derive(Default)]
struct TraceRing {
    traces: VecDeque<Trace>,
}

impl TraceRing {
    /// Adds spans to the transfer's trace, starting one (and dropping the
    /// oldest if the ring is full) if it has none.
    fn add(&mut self, transfer_id: TransferId, spans: impl ExactSizeIterator<Item = Span>) {
        let trace = match self
            .traces
            .iter()
            .rposition(|trace| trace.transfer_id == transfer_id)
        {
            Some(index) => &mut self.traces[index],
            None => {
                if self.traces.len() >= TRACE_RING_CAPACITY {
                    self.traces.pop_front();
                }
                self.traces.push_back(Trace {
                    transfer_id,
                    spans: Vec::with_capacity(2 * Stage::ALL.len()),
                });
                self.traces.back_mut().expect("just pushed")
            }
        };
        let room = MAX_SPANS_PER_TRACE.saturating_sub(trace.spans.len());
        trace.spans.extend(spans.take(room));
    }

    fn views(&self) -> Vec<TraceView> {
        self.traces.iter().map(Trace::view).collect()
    }
}

impl Trace {
    fn view(&self) -> TraceView {
        let mut spans = self.spans.clone();
        spans.sort_by_key(|span| (span.start, span.end));
        let origin = spans
            .iter()
            .find(|span| span.phase == Phase::Prepare && span.stage == Stage::HttpReceive)
            .or(spans.first())
            .map(|span| span.start);
        let offset =
            |at: Instant| origin.map_or(0.0, |origin| micros(at.saturating_duration_since(origin)));
        TraceView {
            transfer_id: self.transfer_id,
            spans: spans
                .iter()
                .map(|span| SpanView {
                    phase: span.phase,
                    stage: span.stage,
                    start_us: offset(span.start),
                    end_us: offset(span.end),
                })
                .collect(),
        }
    }
}

/// The instants of one transfer message's way through the hub, up to its
/// answer (everything but `callback_send`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PhaseMarks {
    /// The handler started: the request head was parsed.
    pub started: Instant,
    /// The body was read.
    pub received: Instant,
    /// The command was handed to the engine.
    pub submitted: Instant,
    pub batch: BatchTiming,
    /// The handler is about to return its answer.
    pub answered: Instant,
}

impl PhaseMarks {
    /// The contiguous stages from `http_receive` to `response`.
    fn spans(&self) -> [(Stage, Instant, Instant); 7] {
        let batch = &self.batch;
        [
            (Stage::HttpReceive, self.started, self.received),
            (Stage::Validation, self.received, self.submitted),
            (Stage::LedgerQueue, self.submitted, batch.apply_started_at),
            (Stage::LedgerApply, batch.apply_started_at, batch.applied_at),
            (Stage::StoreQueue, batch.applied_at, batch.commit_started_at),
            (
                Stage::StoreCommit,
                batch.commit_started_at,
                batch.durable_at,
            ),
            (Stage::Response, batch.durable_at, self.answered),
        ]
    }
}

/// The hub's stage timing: the aggregates, the trace ring and the Prometheus
/// histograms, fed by the transfer handlers and the callback dispatcher.
pub struct StageTimer {
    sample_every: u64,
    stats: StageStats,
    traces: Mutex<TraceRing>,
    metrics: Option<Arc<Metrics>>,
}

impl StageTimer {
    /// Traces one transfer in `sample_every` (0: none); also observes every
    /// duration in `metrics`' stage histogram when given.
    pub fn new(sample_every: u64, metrics: Option<Arc<Metrics>>) -> StageTimer {
        StageTimer {
            sample_every,
            stats: StageStats::default(),
            traces: Mutex::default(),
            metrics,
        }
    }

    pub fn sample_every(&self) -> u64 {
        self.sample_every
    }

    pub fn stats(&self) -> &StageStats {
        &self.stats
    }

    /// Whether `transfer_id` is traced: by a hash of the id, so that every
    /// message of a transfer gets the same answer whatever its ids look like.
    pub fn sampled(&self, transfer_id: TransferId) -> bool {
        match self.sample_every {
            0 => false,
            1 => true,
            every => {
                let id = transfer_id.bits();
                let hash = splitmix64(id as u64 ^ splitmix64((id >> 64) as u64));
                hash.checked_rem(every) == Some(0)
            }
        }
    }

    fn traces(&self) -> MutexGuard<'_, TraceRing> {
        self.traces.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the stages of a message answered 202/200.
    pub(crate) fn record_phase(&self, phase: Phase, transfer_id: TransferId, marks: &PhaseMarks) {
        let spans = marks.spans();
        let durations =
            spans.map(|(stage, start, end)| (stage, end.saturating_duration_since(start)));
        self.stats.record_all(phase, &durations);
        if let Some(metrics) = &self.metrics {
            for (stage, duration) in durations {
                metrics.record_stage(phase, stage, duration);
            }
        }
        if self.sampled(transfer_id) {
            self.traces().add(
                transfer_id,
                spans.into_iter().map(|(stage, start, end)| Span {
                    phase,
                    stage,
                    start,
                    end,
                }),
            );
        }
    }

    /// Records a forwarded callback's `callback_send`.
    pub(crate) fn record_callback(
        &self,
        phase: Phase,
        transfer_id: TransferId,
        sent_at: Instant,
        answered_at: Instant,
    ) {
        let duration = answered_at.saturating_duration_since(sent_at);
        self.stats.record(phase, Stage::CallbackSend, duration);
        if let Some(metrics) = &self.metrics {
            metrics.record_stage(phase, Stage::CallbackSend, duration);
        }
        if self.sampled(transfer_id) {
            let span = Span {
                phase,
                stage: Stage::CallbackSend,
                start: sent_at,
                end: answered_at,
            };
            self.traces().add(transfer_id, std::iter::once(span));
        }
    }

    /// Forgets the aggregates and the traces (not the Prometheus histograms,
    /// which only ever grow).
    pub fn reset(&self) {
        self.stats.reset(crate::now_ms());
        self.traces().traces.clear();
    }

    /// The traces in the ring, oldest first.
    pub fn traces_view(&self) -> Vec<TraceView> {
        self.traces().views()
    }

    /// A probe the dispatcher calls when the callback is answered.
    pub(crate) fn callback_probe(
        self: &Arc<Self>,
        phase: Phase,
        transfer_id: TransferId,
    ) -> CallbackProbe {
        CallbackProbe {
            timer: Arc::clone(self),
            phase,
            transfer_id,
            sent_at: Instant::now(),
        }
    }
}

/// Times one forwarded callback, from its hand-over to the dispatcher to its
/// response head.
#[derive(Clone)]
pub(crate) struct CallbackProbe {
    timer: Arc<StageTimer>,
    phase: Phase,
    transfer_id: TransferId,
    sent_at: Instant,
}

impl CallbackProbe {
    pub(crate) fn answered(&self, answered_at: Instant) {
        self.timer
            .record_callback(self.phase, self.transfer_id, self.sent_at, answered_at);
    }
}

/// A request's headers and body, with when the handler started and when the
/// body was read: what `http_receive` measures. The body is read by axum's
/// own `Bytes` extractor, so its size limit and refusals are unchanged.
pub(crate) struct Received {
    pub started: Instant,
    pub received: Instant,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Where the wire log takes the body and a `POST`'s id, when it records.
    pub capture: Option<Arc<crate::wire_log::Capture>>,
}

impl Received {
    /// The id the wire log files this request under (a `POST`'s, which its
    /// path does not name).
    pub fn names(&self, id: impl std::fmt::Display) {
        if let Some(capture) = &self.capture {
            capture.names(id);
        }
    }
}

#[axum::async_trait]
impl<S: Send + Sync> FromRequest<S> for Received {
    type Rejection = <Bytes as FromRequest<S>>::Rejection;

    async fn from_request(request: Request, state: &S) -> Result<Received, Self::Rejection> {
        let started = Instant::now();
        let (parts, body) = request.into_parts();
        let capture = parts
            .extensions
            .get::<Arc<crate::wire_log::Capture>>()
            .cloned();
        // The body limit travels in the extensions; the headers stay here.
        let mut body_request = Request::new(body);
        *body_request.extensions_mut() = parts.extensions;
        let body = Bytes::from_request(body_request, state).await?;
        if let Some(capture) = &capture {
            capture.read(&body);
        }
        Ok(Received {
            started,
            received: Instant::now(),
            headers: parts.headers,
            body,
            capture,
        })
    }
}

/// `GET /stats/stages`, `DELETE /stats/stages` and `GET /stats/traces` (admin).
pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/stats/stages", get(get_stages).delete(reset_stages))
        .route("/stats/traces", get(get_traces))
        .with_state(hub)
}

pub fn stages_json(timer: &StageTimer) -> Value {
    let (since_ms, summaries) = timer.stats.summaries();
    let stages: Vec<Value> = summaries
        .iter()
        .map(|s| {
            json!({
                "phase": s.phase.as_str(),
                "stage": s.stage.as_str(),
                "calls": s.calls,
                "min_us": s.min_us,
                "mean_us": s.mean_us,
                "max_us": s.max_us,
                "std_us": s.std_us,
                "cum_us": s.cum_us,
            })
        })
        .collect();
    json!({ "since_ms": since_ms, "stages": stages })
}

pub fn traces_json(timer: &StageTimer) -> Value {
    let traces: Vec<Value> = timer
        .traces_view()
        .iter()
        .map(|trace| {
            let spans: Vec<Value> = trace
                .spans
                .iter()
                .map(|span| {
                    json!({
                        "phase": span.phase.as_str(),
                        "stage": span.stage.as_str(),
                        "start_us": span.start_us,
                        "end_us": span.end_us,
                    })
                })
                .collect();
            // FSPIOP ids are lowercase UUIDs, so this is the id as received.
            json!({ "transfer_id": trace.transfer_id.to_string(), "spans": spans })
        })
        .collect();
    json!({ "sample_every": timer.sample_every, "traces": traces })
}

async fn get_stages(State(hub): State<Arc<Hub>>) -> Response {
    axum::Json(stages_json(&hub.stages)).into_response()
}

async fn reset_stages(State(hub): State<Arc<Hub>>) -> Response {
    hub.stages.reset();
    StatusCode::NO_CONTENT.into_response()
}

async fn get_traces(State(hub): State<Arc<Hub>>) -> Response {
    axum::Json(traces_json(&hub.stages)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(stats: &StageStats, phase: Phase, stage: Stage) -> StageSummary {
        stats
            .summaries()
            .1
            .into_iter()
            .find(|s| s.phase == phase && s.stage == stage)
            .unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn the_aggregates_are_right_for_known_values_and_reset_zeroes_them() {
        let stats = StageStats::new(1_000);
        for us in [2, 4, 4, 4, 5, 5, 7, 9] {
            stats.record(Phase::Fulfil, Stage::LedgerApply, Duration::from_micros(us));
        }
        stats.record_all(
            Phase::Prepare,
            &[
                (Stage::HttpReceive, Duration::from_nanos(1_500)),
                (Stage::Validation, Duration::from_micros(10)),
            ],
        );
        stats.record(
            Phase::Prepare,
            Stage::HttpReceive,
            Duration::from_nanos(2_500),
        );

        let apply = summary(&stats, Phase::Fulfil, Stage::LedgerApply);
        assert_eq!(apply.calls, 8);
        assert!(close(apply.min_us, 2.0), "{apply:?}");
        assert!(close(apply.max_us, 9.0), "{apply:?}");
        assert!(close(apply.mean_us, 5.0), "{apply:?}");
        // The classic example: population standard deviation 2.
        assert!(close(apply.std_us, 2.0), "{apply:?}");
        assert!(close(apply.cum_us, 40.0), "{apply:?}");

        let receive = summary(&stats, Phase::Prepare, Stage::HttpReceive);
        assert_eq!(receive.calls, 2);
        assert!(close(receive.mean_us, 2.0), "{receive:?}");
        assert!(close(receive.std_us, 0.5), "{receive:?}");
        assert!(
            close(receive.min_us, 1.5) && close(receive.max_us, 2.5),
            "{receive:?}"
        );

        let single = summary(&stats, Phase::Prepare, Stage::Validation);
        assert_eq!(single.calls, 1);
        assert!(
            close(single.std_us, 0.0) && close(single.min_us, 10.0),
            "{single:?}"
        );

        let (since_ms, all) = stats.summaries();
        assert_eq!(since_ms, 1_000);
        assert_eq!(all.len(), 24);
        let order: Vec<(Phase, Stage)> = all.iter().map(|s| (s.phase, s.stage)).collect();
        assert_eq!(order, cells().collect::<Vec<_>>());
        assert_eq!(order[0], (Phase::Prepare, Stage::HttpReceive));
        assert_eq!(order[8], (Phase::Fulfil, Stage::HttpReceive));
        assert_eq!(order[23], (Phase::Abort, Stage::CallbackSend));
        let untouched = summary(&stats, Phase::Abort, Stage::Response);
        assert_eq!(
            (untouched.calls, untouched.mean_us, untouched.max_us),
            (0, 0.0, 0.0)
        );

        stats.reset(2_000);
        let (since_ms, all) = stats.summaries();
        assert_eq!(since_ms, 2_000);
        assert!(
            all.iter()
                .all(|s| s.calls == 0 && s.cum_us == 0.0 && s.max_us == 0.0),
            "{all:?}"
        );
        // Minimum starts afresh after a reset.
        stats.record(Phase::Fulfil, Stage::LedgerApply, Duration::from_micros(30));
        let apply = summary(&stats, Phase::Fulfil, Stage::LedgerApply);
        assert!(close(apply.min_us, 30.0) && apply.calls == 1, "{apply:?}");
    }

    #[test]
    fn sampling_is_by_transfer_id_and_about_one_in_n() {
        let off = StageTimer::new(0, None);
        let all = StageTimer::new(1, None);
        let some = StageTimer::new(10, None);
        let ids: Vec<TransferId> = (0..10_000u128)
            .map(|i| TransferId::new(i << 64 | i))
            .collect();
        assert!(ids.iter().all(|&id| !off.sampled(id)));
        assert!(ids.iter().all(|&id| all.sampled(id)));
        let chosen = ids.iter().filter(|&&id| some.sampled(id)).count();
        assert!((800..1_200).contains(&chosen), "{chosen}");
        // Sequential ids too.
        let chosen = (0..10_000u128)
            .filter(|&i| some.sampled(TransferId::new(i)))
            .count();
        assert!((800..1_200).contains(&chosen), "{chosen}");
        // The same id always gets the same answer.
        assert!(ids.iter().all(|&id| some.sampled(id) == some.sampled(id)));
    }

    #[test]
    fn the_ring_keeps_the_latest_traces_and_orders_spans_from_the_prepare() {
        let timer = StageTimer::new(1, None);
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        let marks = |base: u64| PhaseMarks {
            started: at(base),
            received: at(base + 1),
            submitted: at(base + 3),
            batch: BatchTiming {
                apply_started_at: at(base + 10),
                applied_at: at(base + 12),
                commit_started_at: at(base + 20),
                durable_at: at(base + 40),
            },
            answered: at(base + 45),
        };
        let id = TransferId::new(7);
        // The callback is answered after the fulfil began, and is recorded
        // before the fulfil: spans still come out in time order.
        timer.record_phase(Phase::Prepare, id, &marks(0));
        timer.record_callback(Phase::Prepare, id, at(44), at(120));
        timer.record_phase(Phase::Fulfil, id, &marks(100));
        let traces = timer.traces_view();
        assert_eq!(traces.len(), 1);
        let spans = &traces[0].spans;
        assert_eq!(spans.len(), 15);
        assert_eq!(
            (spans[0].phase, spans[0].stage, spans[0].start_us),
            (Phase::Prepare, Stage::HttpReceive, 0.0)
        );
        assert!(
            spans.windows(2).all(|w| w[0].start_us <= w[1].start_us),
            "{spans:?}"
        );
        assert!(spans.iter().all(|s| s.start_us <= s.end_us), "{spans:?}");
        let callback = spans
            .iter()
            .find(|s| s.stage == Stage::CallbackSend)
            .unwrap();
        assert!(close(callback.start_us, 44.0) && close(callback.end_us, 120.0));
        let last = spans.last().unwrap();
        assert_eq!((last.phase, last.stage), (Phase::Fulfil, Stage::Response));
        assert!(close(last.end_us, 145.0), "{last:?}");

        for i in 0..TRACE_RING_CAPACITY as u128 + 10 {
            timer.record_phase(Phase::Prepare, TransferId::new(1_000 + i), &marks(0));
        }
        let traces = timer.traces_view();
        assert_eq!(traces.len(), TRACE_RING_CAPACITY);
        assert_eq!(traces[0].transfer_id, TransferId::new(1_010));
        assert!(traces.iter().all(|t| t.transfer_id != id));

        timer.reset();
        assert!(timer.traces_view().is_empty());
        assert!(timer.stats().summaries().1.iter().all(|s| s.calls == 0));
    }
}
