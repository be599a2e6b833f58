//! Per-DFSP transfer outcomes, for the operator's console and Prometheus.
//!
//! Counted in `transfers.rs` where the hub sees a durable outcome: a
//! prepare the ledger reserved (`prepared`), a commit (`committed`, with
//! its prepare→commit time from the ledger's own instants), and the
//! failures that are a transfer's final state — refused at prepare
//! (`rejected`: 4001, 4200, ...), aborted by the payee or by a wrong
//! fulfilment (`aborted`), expired (`expired`, by the hub's clock or a
//! fulfil too late). A request refused before anything was recorded
//! (malformed, unknown, already expired, modified resend) and a resend of a known transfer
//! are not counted: they are not outcomes of a transfer.
//!
//! Everything is keyed by the payer, counted since the hub started. The
//! hot path takes a read lock and adds to atomics; the only write lock is a
//! payer's first transfer, and only failures touch the ring of the last
//! [`FAILURE_RING_CAPACITY`] (which allocates their description).
//!
//! Served as `GET /stats/dfsps` and `GET /stats/transfer-errors` on the
//! admin address, and on `/metrics` as `kasi_dfsp_transfers_total{payer,
//! result}`, `kasi_dfsp_transfer_seconds{payer}` and
//! `kasi_transfer_errors_total{code}`.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ledger::{ErrorCode, FspName, TransferId, TransferState, TransferView};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;
use serde_json::{json, Value};

use crate::metrics::LATENCY_BUCKETS;
use crate::{format_time, Hub, HubError};

/// Failures kept for `GET /stats/transfer-errors`: the most recent ones.
pub const FAILURE_RING_CAPACITY: usize = 256;
/// Failures `GET /stats/transfer-errors` lists unless `limit` says otherwise.
pub const DEFAULT_FAILURE_LIMIT: usize = 50;
/// Buckets of the latency histogram: [`LATENCY_BUCKETS`] and `+Inf`.
const BUCKETS: usize = LATENCY_BUCKETS.len() + 1;
/// Error codes are four digits: one counter each, indexed by the code, so
/// counting a failure never locks or hashes.
const CODES: usize = 10_000;

/// How a transfer ended, as `kasi_dfsp_transfers_total`'s `result` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferResult {
    Prepared,
    Committed,
    Rejected,
    Aborted,
    Expired,
}

impl TransferResult {
    pub const ALL: [TransferResult; 5] = [
        TransferResult::Prepared,
        TransferResult::Committed,
        TransferResult::Rejected,
        TransferResult::Aborted,
        TransferResult::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TransferResult::Prepared => "prepared",
            TransferResult::Committed => "committed",
            TransferResult::Rejected => "rejected",
            TransferResult::Aborted => "aborted",
            TransferResult::Expired => "expired",
        }
    }

    /// The failure a final state stands for; `None` for RESERVED and
    /// COMMITTED.
    fn of_failure(state: TransferState) -> Option<TransferResult> {
        match state {
            TransferState::Rejected => Some(TransferResult::Rejected),
            TransferState::Aborted => Some(TransferResult::Aborted),
            TransferState::Expired => Some(TransferResult::Expired),
            TransferState::Reserved | TransferState::Committed => None,
        }
    }
}

/// The message that ended a transfer in failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePhase {
    /// `POST /transfers` (liquidity, net debit cap).
    Prepare,
    /// `PUT /transfers/{ID}` (wrong fulfilment, too late).
    Fulfil,
    /// `PUT /transfers/{ID}/error` from the payee.
    Abort,
    /// The hub's expiry.
    Expire,
}

impl FailurePhase {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePhase::Prepare => "prepare",
            FailurePhase::Fulfil => "fulfil",
            FailurePhase::Abort => "abort",
            FailurePhase::Expire => "expire",
        }
    }
}

/// One failed transfer, as kept in the ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub transfer_id: TransferId,
    /// When it failed (ledger time, ms since the epoch).
    pub at_ms: i64,
    pub code: ErrorCode,
    pub description: String,
    pub payer: FspName,
    pub payee: FspName,
    pub phase: FailurePhase,
}

/// A payer's counters.
#[derive(Default)]
struct DfspCounters {
    /// By [`TransferResult`], in [`TransferResult::ALL`] order.
    results: [AtomicU64; 5],
    latency_count: AtomicU64,
    /// In whole milliseconds, the ledger's resolution: exact, no float.
    latency_sum_ms: AtomicU64,
    /// Per bucket, not cumulative (the exposition accumulates); the last
    /// is `+Inf`.
    latency_buckets: [AtomicU64; BUCKETS],
}

/// A payer's counters at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct DfspStats {
    pub name: FspName,
    pub prepared: u64,
    pub committed: u64,
    pub rejected: u64,
    pub aborted: u64,
    pub expired: u64,
    /// Commits timed (prepare→commit).
    pub latency_count: u64,
    pub latency_sum_seconds: f64,
    /// `(upper bound in seconds, cumulative count)`, the last `+Inf`
    /// (`f64::INFINITY`).
    pub latency_buckets: Vec<(f64, u64)>,
}

/// The counters and the failure ring (see the module docs).
pub struct TransferStats {
    dfsps: RwLock<HashMap<FspName, DfspCounters>>,
    codes: Box<[AtomicU64]>,
    failures: Mutex<VecDeque<Failure>>,
}

impl fmt::Debug for TransferStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransferStats").finish_non_exhaustive()
    }
}

impl Default for TransferStats {
    fn default() -> TransferStats {
        TransferStats::new()
    }
}

impl TransferStats {
    pub fn new() -> TransferStats {
        TransferStats {
            dfsps: RwLock::new(HashMap::new()),
            codes: (0..CODES).map(|_| AtomicU64::new(0)).collect(),
            failures: Mutex::new(VecDeque::with_capacity(FAILURE_RING_CAPACITY)),
        }
    }

    /// Runs `add` on `payer`'s counters, creating them on its first
    /// transfer. A poisoned lock only means another thread panicked while
    /// counting: the counters are atomics, still whole.
    fn with_payer(&self, payer: FspName, add: impl Fn(&DfspCounters)) {
        {
            let dfsps = self.dfsps.read().unwrap_or_else(|e| e.into_inner());
            if let Some(counters) = dfsps.get(&payer) {
                add(counters);
                return;
            }
        }
        let mut dfsps = self.dfsps.write().unwrap_or_else(|e| e.into_inner());
        add(dfsps.entry(payer).or_default());
    }

    fn count(&self, payer: FspName, result: TransferResult) {
        let index = result as usize;
        self.with_payer(payer, |c| {
            c.results[index].fetch_add(1, Relaxed);
        });
    }

    /// A prepare the ledger reserved.
    pub fn record_prepared(&self, payer: FspName) {
        self.count(payer, TransferResult::Prepared);
    }

    /// A commit, timed from the ledger's prepare and completion instants.
    pub fn record_committed(&self, view: &TransferView) {
        let elapsed_ms = view
            .completed_at_ms
            .map(|completed| completed.saturating_sub(view.prepared_at_ms).max(0) as u64);
        let committed = TransferResult::Committed as usize;
        self.with_payer(view.payer, |c| {
            c.results[committed].fetch_add(1, Relaxed);
            if let Some(ms) = elapsed_ms {
                let seconds = ms as f64 / 1000.0;
                let bucket = LATENCY_BUCKETS
                    .iter()
                    .position(|&le| seconds <= le)
                    .unwrap_or(BUCKETS - 1);
                c.latency_buckets[bucket].fetch_add(1, Relaxed);
                c.latency_sum_ms.fetch_add(ms, Relaxed);
                c.latency_count.fetch_add(1, Relaxed);
            }
        });
    }

    /// A transfer that ended in `view.state` (REJECTED, ABORTED or
    /// EXPIRED; anything else is not a failure and is ignored) with `code`.
    pub fn record_failure(
        &self,
        view: &TransferView,
        phase: FailurePhase,
        code: ErrorCode,
        description: &str,
    ) {
        let Some(result) = TransferResult::of_failure(view.state) else {
            return;
        };
        self.count(view.payer, result);
        if let Some(counter) = self.codes.get(usize::from(code.0)) {
            counter.fetch_add(1, Relaxed);
        }
        let failure = Failure {
            transfer_id: view.transfer_id,
            at_ms: view.completed_at_ms.unwrap_or(view.prepared_at_ms),
            code,
            description: description.to_string(),
            payer: view.payer,
            payee: view.payee,
            phase,
        };
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() == FAILURE_RING_CAPACITY {
            failures.pop_front();
        }
        failures.push_back(failure);
    }

    /// Every payer's counters, by name.
    pub fn dfsps(&self) -> Vec<DfspStats> {
        let dfsps = self.dfsps.read().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<DfspStats> = dfsps
            .iter()
            .map(|(&name, c)| {
                let result = |r: TransferResult| c.results[r as usize].load(Relaxed);
                let mut cumulative = 0;
                let latency_buckets = c
                    .latency_buckets
                    .iter()
                    .enumerate()
                    .map(|(i, count)| {
                        cumulative += count.load(Relaxed);
                        let le = LATENCY_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY);
                        (le, cumulative)
                    })
                    .collect();
                DfspStats {
                    name,
                    prepared: result(TransferResult::Prepared),
                    committed: result(TransferResult::Committed),
                    rejected: result(TransferResult::Rejected),
                    aborted: result(TransferResult::Aborted),
                    expired: result(TransferResult::Expired),
                    latency_count: c.latency_count.load(Relaxed),
                    latency_sum_seconds: c.latency_sum_ms.load(Relaxed) as f64 / 1000.0,
                    latency_buckets,
                }
            })
            .collect();
        drop(dfsps);
        all.sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
        all
    }

    /// Failures counted per error code, by code; codes never seen are left
    /// out.
    pub fn errors_by_code(&self) -> Vec<(ErrorCode, u64)> {
        self.codes
            .iter()
            .enumerate()
            .filter_map(|(code, count)| match count.load(Relaxed) {
                0 => None,
                n => Some((ErrorCode(code as u16), n)),
            })
            .collect()
    }

    /// The last `limit` failures (at most [`FAILURE_RING_CAPACITY`]),
    /// newest first.
    pub fn recent_failures(&self, limit: usize) -> Vec<Failure> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.iter().rev().take(limit).cloned().collect()
    }
}

/// `kasi_dfsp_transfers_total`, `kasi_dfsp_transfer_seconds` and
/// `kasi_transfer_errors_total`, read from the counters at scrape time.
#[derive(Debug)]
pub(crate) struct TransferStatsCollector(pub Arc<TransferStats>);

impl Collector for TransferStatsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let dfsps = self.0.dfsps();
        let mut metric = encoder.encode_descriptor(
            "kasi_dfsp_transfers",
            "Transfers by payer DFSP and result: prepared (reserved), committed, rejected at prepare, aborted (by the payee or a wrong fulfilment), expired",
            None,
            MetricType::Counter,
        )?;
        for dfsp in &dfsps {
            let values = [
                dfsp.prepared,
                dfsp.committed,
                dfsp.rejected,
                dfsp.aborted,
                dfsp.expired,
            ];
            for (result, value) in TransferResult::ALL.iter().zip(values) {
                let labels = [("payer", dfsp.name.as_str()), ("result", result.as_str())];
                ConstCounter::new(value).encode(metric.encode_family(&labels)?)?;
            }
        }
        let mut metric = encoder.encode_descriptor(
            "kasi_dfsp_transfer_seconds",
            "Time from a transfer's prepare to its commit in the ledger, by payer DFSP",
            None,
            MetricType::Histogram,
        )?;
        for dfsp in &dfsps {
            // The encoder takes per-bucket counts and `f64::MAX` for +Inf.
            let mut previous = 0;
            let buckets: Vec<(f64, u64)> = dfsp
                .latency_buckets
                .iter()
                .map(|&(le, cumulative)| {
                    let count = cumulative - previous;
                    previous = cumulative;
                    (if le.is_finite() { le } else { f64::MAX }, count)
                })
                .collect();
            let labels = [("payer", dfsp.name.as_str())];
            metric
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(
                    dfsp.latency_sum_seconds,
                    dfsp.latency_count,
                    &buckets,
                    None,
                )?;
        }
        let mut metric = encoder.encode_descriptor(
            "kasi_transfer_errors",
            "Failed transfers by error code (all DFSPs)",
            None,
            MetricType::Counter,
        )?;
        for (code, count) in self.0.errors_by_code() {
            let code = code.to_string();
            let labels = [("code", code.as_str())];
            ConstCounter::new(count).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// `GET /stats/dfsps` and `GET /stats/transfer-errors` (admin address).
pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/stats/dfsps", get(get_dfsps))
        .route("/stats/transfer-errors", get(get_transfer_errors))
        .with_state(hub)
}

fn dfsp_json(dfsp: &DfspStats) -> Value {
    let buckets: Vec<Value> = dfsp
        .latency_buckets
        .iter()
        .map(|&(le, count)| {
            // JSON has no infinity: the last bucket's bound is "+Inf", as
            // Prometheus writes it.
            let le = match le.is_finite() {
                true => json!(le),
                false => json!("+Inf"),
            };
            json!({"le": le, "count": count})
        })
        .collect();
    json!({
        "name": dfsp.name.as_str(),
        "prepared": dfsp.prepared,
        "committed": dfsp.committed,
        "rejected": dfsp.rejected,
        "aborted": dfsp.aborted,
        "expired": dfsp.expired,
        "latency": {
            "count": dfsp.latency_count,
            "sumSeconds": dfsp.latency_sum_seconds,
            "buckets": buckets,
        },
    })
}

async fn get_dfsps(State(hub): State<Arc<Hub>>) -> Response {
    let dfsps: Vec<Value> = hub
        .metrics
        .transfers
        .dfsps()
        .iter()
        .map(dfsp_json)
        .collect();
    Json(json!({"at": format_time(crate::now_ms()), "dfsps": dfsps})).into_response()
}

async fn get_transfer_errors(
    State(hub): State<Arc<Hub>>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, HubError> {
    let limit = match query.get("limit") {
        None => DEFAULT_FAILURE_LIMIT,
        Some(text) => match text.parse::<usize>() {
            Ok(limit) if limit <= FAILURE_RING_CAPACITY => limit,
            _ => {
                return Err(HubError::new(
                    ErrorCode::MALFORMED_SYNTAX,
                    format!(
                        "Malformed syntax - limit must be a whole number from 0 to {FAILURE_RING_CAPACITY}"
                    ),
                ))
            }
        },
    };
    let stats = &hub.metrics.transfers;
    let by_code: Vec<Value> = stats
        .errors_by_code()
        .into_iter()
        .map(|(code, count)| json!({"code": code.to_string(), "count": count}))
        .collect();
    let recent: Vec<Value> = stats
        .recent_failures(limit)
        .iter()
        .map(|failure| {
            json!({
                "transferId": failure.transfer_id.to_string(),
                "at": format_time(failure.at_ms),
                "errorCode": failure.code.to_string(),
                "errorDescription": failure.description,
                "payerFsp": failure.payer.as_str(),
                "payeeFsp": failure.payee.as_str(),
                "phase": failure.phase.as_str(),
            })
        })
        .collect();
    Ok(Json(json!({"byCode": by_code, "recent": recent})).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::{Amount, Currency, TransferKind};

    fn view(id: u64, payer: &str, state: TransferState, completed_ms: Option<i64>) -> TransferView {
        TransferView {
            transfer_id: TransferId::new(id.into()),
            kind: TransferKind::Fspiop,
            payer: FspName::new(payer).unwrap(),
            payee: FspName::new("payeefsp").unwrap(),
            amount: Amount::parse_fspiop("10").unwrap(),
            currency: Currency::parse("USD").unwrap(),
            state,
            reason: None,
            cause: None,
            expiration_ms: 10_000,
            prepared_at_ms: 1_000,
            completed_at_ms: completed_ms,
            fulfilment: None,
            wire_version: 0,
            fx: None,
            settlement_window: None,
        }
    }

    #[test]
    fn counts_by_payer_and_result_with_a_latency_histogram() {
        let stats = TransferStats::new();
        let b = FspName::new("bfsp").unwrap();
        stats.record_prepared(b);
        stats.record_prepared(b);
        stats.record_committed(&view(1, "bfsp", TransferState::Committed, Some(1_003)));
        stats.record_prepared(FspName::new("afsp").unwrap());
        stats.record_failure(
            &view(2, "bfsp", TransferState::Rejected, Some(1_000)),
            FailurePhase::Prepare,
            ErrorCode(4001),
            "Payer FSP insufficient liquidity",
        );
        // Not a failure: ignored.
        stats.record_failure(
            &view(3, "bfsp", TransferState::Committed, Some(1_000)),
            FailurePhase::Fulfil,
            ErrorCode(3100),
            "",
        );
        let dfsps = stats.dfsps();
        assert_eq!(dfsps.len(), 2);
        assert_eq!(dfsps[0].name.as_str(), "afsp", "sorted by name");
        let b = &dfsps[1];
        assert_eq!((b.prepared, b.committed, b.rejected), (2, 1, 1));
        assert_eq!((b.aborted, b.expired), (0, 0));
        assert_eq!(b.latency_count, 1);
        assert!((b.latency_sum_seconds - 0.003).abs() < 1e-9);
        // 3 ms: first in the 0.005 s bucket, cumulative from there on.
        let at = |le: f64| b.latency_buckets.iter().find(|(l, _)| *l == le).unwrap().1;
        assert_eq!((at(0.0025), at(0.005), at(10.0)), (0, 1, 1));
        assert_eq!(b.latency_buckets.last().unwrap(), &(f64::INFINITY, 1));
        assert_eq!(stats.errors_by_code(), vec![(ErrorCode(4001), 1)]);
    }

    #[test]
    fn the_failure_ring_keeps_the_newest_256_newest_first() {
        let stats = TransferStats::new();
        for id in 1..=300u64 {
            stats.record_failure(
                &view(id, "payerfsp", TransferState::Expired, Some(id as i64)),
                FailurePhase::Expire,
                ErrorCode(3303),
                "Transfer expired",
            );
        }
        let recent = stats.recent_failures(1_000);
        assert_eq!(recent.len(), FAILURE_RING_CAPACITY);
        assert_eq!(recent[0].transfer_id, TransferId::new(300u64.into()));
        assert_eq!(
            recent.last().unwrap().transfer_id,
            TransferId::new(45u64.into())
        );
        assert_eq!(stats.recent_failures(2).len(), 2);
        assert_eq!(stats.errors_by_code(), vec![(ErrorCode(3303), 300)]);
        assert_eq!(stats.dfsps()[0].expired, 300);
    }

    #[test]
    fn the_exposition_has_the_three_families() {
        let stats = Arc::new(TransferStats::new());
        stats.record_prepared(FspName::new("payerfsp").unwrap());
        stats.record_committed(&view(1, "payerfsp", TransferState::Committed, Some(1_020)));
        stats.record_failure(
            &view(2, "payerfsp", TransferState::Aborted, Some(1_000)),
            FailurePhase::Abort,
            ErrorCode(5101),
            "Payee transaction limit reached",
        );
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(TransferStatsCollector(stats)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "kasi_dfsp_transfers_total{payer=\"payerfsp\",result=\"prepared\"} 1",
            "kasi_dfsp_transfers_total{payer=\"payerfsp\",result=\"committed\"} 1",
            "kasi_dfsp_transfers_total{payer=\"payerfsp\",result=\"aborted\"} 1",
            "kasi_dfsp_transfers_total{payer=\"payerfsp\",result=\"expired\"} 0",
            "kasi_dfsp_transfer_seconds_count{payer=\"payerfsp\"} 1",
            "kasi_dfsp_transfer_seconds_bucket{le=\"0.025\",payer=\"payerfsp\"} 1",
            "kasi_dfsp_transfer_seconds_bucket{le=\"0.01\",payer=\"payerfsp\"} 0",
            "kasi_dfsp_transfer_seconds_bucket{le=\"+Inf\",payer=\"payerfsp\"} 1",
            "kasi_transfer_errors_total{code=\"5101\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
        }
    }
}
