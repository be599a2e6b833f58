//! What the harness watches while it runs: the once-a-second timeline,
//! the hub's `/metrics` gauges, its `/stats/stages` and sampled traces.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Method;
use serde_json::{json, Value};

use crate::dfsp::admin_request;
use crate::load::Plan;
use crate::run::Shared;
use crate::stats::{LegSummary, Window};

/// One second of a run.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TimelinePoint {
    /// Seconds since the load started (of the whole search, for breakpoint).
    pub(crate) t_s: f64,
    pub(crate) phase: &'static str,
    /// The planned level then: virtual users or arrivals per second.
    pub(crate) target: f64,
    /// Flows started, completed and failed in this second.
    pub(crate) started: u64,
    pub(crate) completed: u64,
    pub(crate) errors: u64,
    /// End-to-end latency of the flows completed in this second.
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) in_flight: u64,
    /// The hub's gauges from its `/metrics`, scraped in this second (None
    /// when the scrape failed or was late).
    pub(crate) hub: Option<HubGauges>,
    /// This process's resident memory (Linux).
    pub(crate) harness_rss_bytes: Option<u64>,
}

/// What a scrape of the hub's `GET /metrics` says about its memory and its
/// callbacks; each figure absent when the hub does not expose it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct HubGauges {
    /// `process_resident_memory_bytes`.
    pub(crate) rss_bytes: Option<f64>,
    /// Callbacks queued or being sent, over every destination
    /// (`kasi_callbacks_queued` + `kasi_callbacks_in_flight`).
    pub(crate) callback_backlog: Option<f64>,
    /// `kasi_ledger_transfers_in_memory`.
    pub(crate) transfers_in_memory: Option<f64>,
}

impl HubGauges {
    pub(crate) fn parse(exposition: &str) -> HubGauges {
        let queued = metric_sum(exposition, "kasi_callbacks_queued");
        let in_flight = metric_sum(exposition, "kasi_callbacks_in_flight");
        HubGauges {
            rss_bytes: metric_sum(exposition, "process_resident_memory_bytes"),
            callback_backlog: match (queued, in_flight) {
                (None, None) => None,
                (queued, in_flight) => Some(queued.unwrap_or(0.0) + in_flight.unwrap_or(0.0)),
            },
            transfers_in_memory: metric_sum(exposition, "kasi_ledger_transfers_in_memory"),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        *self == HubGauges::default()
    }
}

/// The sum of metric `name`'s samples over all their labels, in a
/// Prometheus or OpenMetrics text exposition: None when the exposition
/// has no such metric; 0 when it declares it (`# TYPE`) with no samples
/// (a gauge by destination before any destination).
pub(crate) fn metric_sum(exposition: &str, name: &str) -> Option<f64> {
    let mut sum = None;
    for line in exposition.lines() {
        let line = line.trim_start();
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            if declared.split_whitespace().next() == Some(name) {
                sum = Some(sum.unwrap_or(0.0));
            }
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // The name must end here: `kasi_callbacks_queued_total` is not
        // `kasi_callbacks_queued`.
        let rest = if let Some(labelled) = rest.strip_prefix('{') {
            // A label value may hold '}'; the value and timestamp after
            // the label set hold none, so the last one ends it.
            match labelled.rfind('}') {
                Some(end) => &labelled[end + 1..],
                None => continue,
            }
        } else if rest.starts_with([' ', '\t']) {
            rest
        } else {
            continue;
        };
        // The value, then perhaps a timestamp.
        let Some(value) = rest.split_whitespace().next() else {
            continue;
        };
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            value => match value.parse::<f64>() {
                Ok(value) => value,
                Err(_) => continue,
            },
        };
        sum = Some(sum.unwrap_or(0.0) + value);
    }
    sum
}

/// This process's resident memory, from `/proc/self/statm` (Linux).
pub(crate) fn own_rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok().filter(|page| *page > 0)?)
}

/// How long a scrape of the hub's `/metrics` may take before its second's
/// sample is given up (it is then missing, not late).
pub(crate) const SCRAPE_TIMEOUT: Duration = Duration::from_millis(900);

/// Once a second, half a second before each of the monitor's ticks: the
/// hub's gauges from its admin `/metrics`, left in `shared.hub_gauges` for
/// the monitor's next point. On its own task, off the flows' path; a failed
/// or empty scrape leaves nothing (that second has no sample).
pub(crate) async fn scrape_hub(shared: Arc<Shared>, started: Instant) {
    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::from_std(started + Duration::from_millis(500)),
        Duration::from_secs(1),
    );
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let url = format!("{}/metrics", shared.admin);
    loop {
        ticks.tick().await;
        let scraped = tokio::time::timeout(
            SCRAPE_TIMEOUT,
            admin_request(&shared.identities.admin, Method::GET, &url, None),
        )
        .await;
        let gauges = match scraped {
            Ok(Ok((status, body))) if status.is_success() => {
                HubGauges::parse(&String::from_utf8_lossy(&body))
            }
            _ => continue,
        };
        if !gauges.is_empty() {
            *shared.hub_gauges.lock().unwrap_or_else(|e| e.into_inner()) = Some(gauges);
        }
    }
}

/// Once a second: a point of the timeline, and (unless --quiet) a progress
/// line on stderr: elapsed time, flows completed (and their rate over the
/// last second), the p99 end-to-end latency of the flows that ended in the
/// last second, flows in flight, and failures.
pub(crate) async fn monitor(
    shared: Arc<Shared>,
    started: Instant,
    window: Window,
    plan: Arc<Plan>,
    offset_s: f64,
    quiet: bool,
    timeline: Arc<Mutex<Vec<TimelinePoint>>>,
) {
    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::from_std(started + Duration::from_secs(1)),
        Duration::from_secs(1),
    );
    // (instant, completed, started, failed) at the last tick.
    let mut last = (started, 0u64, 0u64, 0u64);
    loop {
        let now = ticks.tick().await.into_std();
        let (ok, starts, failed, in_flight, p50_ms, p99_ms) = {
            let mut stats = shared.stats();
            let recent = LegSummary::of(&stats.recent_e2e);
            stats.recent_e2e.reset();
            let failed = stats.errors.values().map(|t| t.count).sum::<u64>() + stats.timeouts();
            let in_flight = stats.started.saturating_sub(stats.ended);
            (
                stats.ended_ok,
                stats.started,
                failed,
                in_flight,
                recent.p50_ms,
                recent.p99_ms,
            )
        };
        let elapsed_s = now.saturating_duration_since(started).as_secs_f64();
        let seconds = now
            .saturating_duration_since(last.0)
            .as_secs_f64()
            .max(1e-3);
        let completed = ok.saturating_sub(last.1);
        let rate = completed as f64 / seconds;
        // The second is classed by its middle: a tick a little late does not
        // move it.
        let middle = now - Duration::from_millis(500);
        let phase = if middle < window.from {
            "warm-up"
        } else if middle < window.until {
            "measuring"
        } else {
            "draining"
        };
        let point = TimelinePoint {
            t_s: offset_s + elapsed_s,
            phase,
            target: plan.target_at(elapsed_s - 0.5),
            started: starts.saturating_sub(last.2),
            completed,
            errors: failed.saturating_sub(last.3),
            p50_ms,
            p99_ms,
            in_flight,
            hub: shared
                .hub_gauges
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
            harness_rss_bytes: own_rss_bytes(),
        };
        last = (now, ok, starts, failed);
        timeline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(point);
        if !quiet {
            eprintln!(
                "[{:>6.1} s {phase}] completed {ok} ({rate:.0}/s), p99 e2e {p99_ms:.1} ms (last 1 s), in flight {in_flight}, errors {failed}",
                offset_s + elapsed_s
            );
        }
    }
}

/// The hub's JWS pool counters (`kasi_jws_*` on `/metrics`), read before
/// and after the load: how busy the pool was, its saturation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct JwsPool {
    pub(crate) threads: f64,
    pub(crate) operations: f64,
    pub(crate) busy_s: f64,
    pub(crate) at: Instant,
}

impl JwsPool {
    pub(crate) async fn read(shared: &Shared, admin: &str) -> Option<JwsPool> {
        let url = format!("{admin}/metrics");
        let (status, body) = admin_request(&shared.identities.admin, Method::GET, &url, None)
            .await
            .ok()?;
        if !status.is_success() {
            return None;
        }
        let exposition = String::from_utf8_lossy(&body);
        Some(JwsPool {
            threads: metric_sum(&exposition, "kasi_jws_threads")?,
            operations: metric_sum(&exposition, "kasi_jws_operations_total").unwrap_or(0.0),
            busy_s: metric_sum(&exposition, "kasi_jws_busy_seconds_total").unwrap_or(0.0),
            at: Instant::now(),
        })
    }

    /// What the pool did between `self` and `later`.
    pub(crate) fn since(&self, later: &JwsPool) -> Value {
        let elapsed_s = later.at.duration_since(self.at).as_secs_f64().max(1e-9);
        let operations = later.operations - self.operations;
        let busy_s = later.busy_s - self.busy_s;
        json!({
            "threads": later.threads,
            "operations": operations,
            "busy_s": busy_s,
            "utilisation": busy_s / (later.threads.max(1.0) * elapsed_s),
            "us_per_operation": (operations > 0.0).then(|| busy_s * 1e6 / operations),
            "over_s": elapsed_s,
        })
    }
}

/// Clears the hub's per-stage statistics so they cover this run only;
/// whether the hub keeps any (kasi's `/stats/stages`; other hubs answer 404).
pub(crate) async fn reset_hub_stages(shared: &Shared, admin: &str) -> bool {
    let url = format!("{admin}/stats/stages");
    matches!(
        admin_request(&shared.identities.admin, Method::DELETE, &url, None).await,
        Ok((status, _)) if status.is_success()
    )
}

/// The hub's per-stage table since the reset (`GET /stats/stages`).
pub(crate) async fn read_hub_stages(shared: &Shared, admin: &str) -> Option<Value> {
    let url = format!("{admin}/stats/stages");
    let (status, body) = admin_request(&shared.identities.admin, Method::GET, &url, None)
        .await
        .ok()?;
    let answer: Value = serde_json::from_slice(&body).ok()?;
    // Stages nothing went through (aborts, in a run without any) are noise.
    let stages: Vec<&Value> = answer["stages"]
        .as_array()?
        .iter()
        .filter(|stage| stage["calls"].as_u64().unwrap_or(0) > 0)
        .collect();
    status.is_success().then(|| {
        json!({
            "source": "GET /stats/stages",
            "since_ms": answer["since_ms"],
            "stages": stages,
        })
    })
}

/// Most waterfalls a report shows.
pub(crate) const WATERFALLS: usize = 5;

/// A few of the hub's sampled transfer traces (`GET /stats/traces`): the
/// fastest, the median, the p90, the p99 and the slowest of those whose
/// every phase finished.
pub(crate) async fn read_waterfalls(shared: &Shared, admin: &str) -> Vec<Value> {
    let url = format!("{admin}/stats/traces");
    let Ok((status, body)) = admin_request(&shared.identities.admin, Method::GET, &url, None).await
    else {
        return Vec::new();
    };
    let Ok(answer) = serde_json::from_slice::<Value>(&body) else {
        return Vec::new();
    };
    if !status.is_success() {
        return Vec::new();
    }
    let traces = answer["traces"].as_array().cloned().unwrap_or_default();
    pick_waterfalls(traces)
}

/// The end of a trace's last span, in µs.
pub(crate) fn trace_total_us(trace: &Value) -> f64 {
    trace["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|span| span["end_us"].as_f64())
        .fold(0.0, f64::max)
}

pub(crate) fn pick_waterfalls(traces: Vec<Value>) -> Vec<Value> {
    // Whole transfers only: both phases there, and their callbacks sent.
    let mut whole: Vec<Value> = traces
        .into_iter()
        .filter(|trace| {
            let spans = trace["spans"].as_array();
            let sent = |phase: &str| {
                spans
                    .into_iter()
                    .flatten()
                    .any(|span| span["phase"] == phase && span["stage"] == "callback_send")
            };
            sent("prepare") && sent("fulfil")
        })
        .collect();
    whole.sort_by(|a, b| trace_total_us(a).total_cmp(&trace_total_us(b)));
    if whole.len() <= WATERFALLS {
        return whole;
    }
    let last = whole.len() - 1;
    let mut picked: Vec<usize> = [0.0, 0.5, 0.9, 0.99, 1.0]
        .iter()
        .map(|q: &f64| (q * last as f64).round() as usize)
        .collect();
    picked.dedup();
    picked.into_iter().map(|i| whole[i].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gauge_is_summed_over_its_labels() {
        let exposition = "\
# HELP kasi_callbacks_queued Callbacks waiting in the queue.
# TYPE kasi_callbacks_queued gauge
kasi_callbacks_queued{destination=\"payeefsp\"} 5
kasi_callbacks_queued{destination=\"odd}name\"} 2
kasi_callbacks_queued_total{destination=\"payeefsp\"} 1000
# TYPE kasi_callbacks_in_flight gauge
kasi_callbacks_in_flight{destination=\"payeefsp\"} 4
kasi_callbacks_in_flight{destination=\"payerfsp\"} 1 1700000000
# TYPE kasi_ledger_transfers_in_memory gauge
kasi_ledger_transfers_in_memory 7.0
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.2e8
# TYPE kasi_callbacks_dead_letters gauge
# EOF
";
        assert_eq!(metric_sum(exposition, "kasi_callbacks_queued"), Some(7.0));
        assert_eq!(
            metric_sum(exposition, "kasi_callbacks_in_flight"),
            Some(5.0)
        );
        // Declared with no samples (no destination yet): zero, not absent.
        assert_eq!(
            metric_sum(exposition, "kasi_callbacks_dead_letters"),
            Some(0.0)
        );
        assert_eq!(metric_sum(exposition, "kasi_callbacks"), None);
        assert_eq!(metric_sum(exposition, "nowhere"), None);
        assert_eq!(metric_sum("", "kasi_callbacks_queued"), None);
        assert_eq!(
            HubGauges::parse(exposition),
            HubGauges {
                rss_bytes: Some(1.2e8),
                callback_backlog: Some(12.0),
                transfers_in_memory: Some(7.0),
            }
        );
        // Another hub's /metrics (or a 404 page): nothing, not zeros.
        assert!(HubGauges::parse("<html>not found</html>").is_empty());
        assert!(HubGauges::parse("other_metric 3\n").is_empty());
        // Only one of the two backlog gauges: the backlog is that one.
        let queued_only = "kasi_callbacks_queued{destination=\"a\"} 3\n";
        assert_eq!(HubGauges::parse(queued_only).callback_backlog, Some(3.0));
    }

    #[test]
    fn the_harness_reads_its_own_rss() {
        if cfg!(target_os = "linux") {
            let rss = own_rss_bytes().expect("/proc/self/statm");
            assert!((1 << 20..1 << 40).contains(&rss), "{rss}");
        }
    }
}
