//! Statistics: latency histograms per leg, percentiles, error tallies,
//! the measured window, CPU accounting.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::flows::{E2E, LEGS};
use crate::waiters::Failure;

/// The measured window: after the warm-up, until the load stops.
#[derive(Clone, Copy)]
pub(crate) struct Window {
    pub(crate) from: Instant,
    pub(crate) until: Instant,
}

impl Window {
    pub(crate) fn contains(&self, at: Instant) -> bool {
        at >= self.from && at < self.until
    }
}

#[derive(Default)]
pub(crate) struct ErrorTally {
    pub(crate) count: u64,
    pub(crate) first: String,
}

pub(crate) struct Stats {
    pub(crate) legs: Vec<Histogram<u64>>,
    /// Flows that ended well inside the window (the throughput).
    pub(crate) completed_in_window: u64,
    /// Flows started inside the window that ended well.
    pub(crate) completed: u64,
    /// Flows started (window or not).
    pub(crate) started: u64,
    pub(crate) started_in_window: u64,
    /// Flows ended, however (for the progress line).
    pub(crate) ended: u64,
    /// Flows ended well, window or not (for the progress line).
    pub(crate) ended_ok: u64,
    /// End-to-end latencies (µs) of the flows ended well since the progress
    /// line last read them.
    pub(crate) recent_e2e: Histogram<u64>,
    /// Failed flows by `{stage} {error key}`.
    pub(crate) errors: BTreeMap<String, ErrorTally>,
    /// Timed-out flows by stage.
    pub(crate) timeouts: BTreeMap<&'static str, u64>,
    /// Transfer `PUT`s that completed nothing: the payee's confirmation copies.
    pub(crate) confirmations: u64,
    /// `PUT /parties` and `PUT /quotes` to a payer that completed nothing
    /// (its stage had already ended).
    pub(crate) late_answers: u64,
    /// Error callbacks for stages already ended (or not ours).
    pub(crate) late_errors: u64,
    /// Forwarded requests (prepares, lookups, quotes) for nothing pending.
    pub(crate) strays: u64,
    /// Requests to the callback server at paths no DFSP registered.
    pub(crate) unexpected: u64,
}

impl Stats {
    pub(crate) fn new() -> Stats {
        Stats {
            legs: LEGS
                .iter()
                .map(|_| Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid bounds"))
                .collect(),
            completed_in_window: 0,
            completed: 0,
            started: 0,
            started_in_window: 0,
            ended: 0,
            ended_ok: 0,
            recent_e2e: Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid bounds"),
            errors: BTreeMap::new(),
            timeouts: BTreeMap::new(),
            confirmations: 0,
            late_answers: 0,
            late_errors: 0,
            strays: 0,
            unexpected: 0,
        }
    }

    pub(crate) fn record(&mut self, leg: usize, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.legs[leg].saturating_record(us.max(1));
    }

    pub(crate) fn error(&mut self, key: String, description: String) {
        let tally = self.errors.entry(key).or_default();
        tally.count += 1;
        if tally.first.is_empty() {
            tally.first = description;
        }
    }

    /// How one iteration of a virtual user, started at `started`, ended.
    pub(crate) fn flow_ended(
        &mut self,
        started: Instant,
        measured: bool,
        window: Option<Window>,
        outcome: Result<Instant, (&'static str, Failure)>,
    ) {
        self.ended += 1;
        match outcome {
            Ok(ended) => {
                self.ended_ok += 1;
                let e2e = ended.saturating_duration_since(started).as_micros();
                self.recent_e2e
                    .saturating_record(u64::try_from(e2e).unwrap_or(u64::MAX).max(1));
                if measured {
                    self.completed += 1;
                    self.record(E2E, ended.saturating_duration_since(started));
                }
                if window.is_some_and(|w| w.contains(ended)) {
                    self.completed_in_window += 1;
                }
            }
            Err((stage, Failure::Error(key, description))) => {
                self.error(format!("{stage} {key}"), description)
            }
            Err((stage, Failure::Timeout)) => *self.timeouts.entry(stage).or_default() += 1,
        }
    }

    pub(crate) fn timeouts(&self) -> u64 {
        self.timeouts.values().sum()
    }
}

/// CPU seconds (user and system) of the hub's process and of this one over
/// a window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CpuUse {
    pub(crate) hub_s: Option<f64>,
    pub(crate) harness_s: f64,
}

/// `/proc`'s unit of CPU time (USER_HZ, 100 on every Linux build we run).
pub(crate) const CLOCK_TICKS_PER_S: f64 = 100.0;

/// CPU time (user and system, in s) of process `pid`; `None` where `/proc`
/// cannot say (not Linux, or the process is gone).
pub(crate) fn process_cpu_seconds(pid: u32) -> Option<f64> {
    parse_cpu_seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// CPU time (user and system, in s) of this process, all threads.
pub(crate) fn own_cpu_seconds() -> Option<f64> {
    parse_cpu_seconds(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// utime + stime from a `/proc/<pid>/stat` line: fields 14 and 15, counted
/// after the command name, which is in parentheses and may hold anything.
pub(crate) fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ticks = |index: usize| fields.get(index)?.parse::<u64>().ok();
    Some((ticks(11)? + ticks(12)?) as f64 / CLOCK_TICKS_PER_S)
}

/// Percentiles of one leg, in ms.
#[derive(Debug, PartialEq)]
pub(crate) struct LegSummary {
    pub(crate) count: u64,
    pub(crate) min_ms: f64,
    pub(crate) mean_ms: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p90_ms: f64,
    pub(crate) p95_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
}

impl LegSummary {
    /// From a histogram of µs; all zero when empty.
    pub(crate) fn of(histogram: &Histogram<u64>) -> LegSummary {
        let count = histogram.len();
        let ms = |us: u64| if count == 0 { 0.0 } else { us as f64 / 1000.0 };
        LegSummary {
            count,
            min_ms: ms(histogram.min()),
            mean_ms: if count == 0 {
                0.0
            } else {
                histogram.mean() / 1000.0
            },
            p50_ms: ms(histogram.value_at_quantile(0.5)),
            p90_ms: ms(histogram.value_at_quantile(0.9)),
            p95_ms: ms(histogram.value_at_quantile(0.95)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            max_ms: ms(histogram.max()),
        }
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "count": self.count,
            "min_ms": self.min_ms,
            "mean_ms": self.mean_ms,
            "p50_ms": self.p50_ms,
            "p90_ms": self.p90_ms,
            "p95_ms": self.p95_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_ends_counted_by_its_outcome() {
        let start = Instant::now();
        let window = Window {
            from: start + Duration::from_millis(10),
            until: start + Duration::from_millis(20),
        };
        let mut stats = Stats::new();
        // Started in the window, ended after it: completed, not throughput.
        let started = start + Duration::from_millis(15);
        stats.flow_ended(
            started,
            true,
            Some(window),
            Ok(started + Duration::from_millis(7)),
        );
        // Started in the warm-up, ended in the window: throughput only.
        stats.flow_ended(
            start,
            false,
            Some(window),
            Ok(start + Duration::from_millis(12)),
        );
        stats.flow_ended(
            start,
            true,
            Some(window),
            Err((
                "lookup",
                Failure::Error("3204".into(), "Party not found".into()),
            )),
        );
        stats.flow_ended(start, true, Some(window), Err(("quote", Failure::Timeout)));
        stats.flow_ended(start, true, Some(window), Err(("quote", Failure::Timeout)));
        assert_eq!(stats.completed, 1);
        assert_eq!(stats.completed_in_window, 1);
        let e2e = LegSummary::of(&stats.legs[E2E]);
        assert_eq!(e2e.count, 1);
        assert!((e2e.max_ms - 7.0).abs() < 0.01, "{e2e:?}");
        assert_eq!(stats.errors["lookup 3204"].count, 1);
        assert_eq!(stats.errors["lookup 3204"].first, "Party not found");
        assert_eq!(stats.timeouts["quote"], 2);
        assert_eq!(stats.timeouts(), 2);
    }

    #[test]
    fn percentiles_of_a_known_histogram() {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap();
        // 1 ms, 2 ms, ... 1000 ms, once each.
        for ms in 1..=1000u64 {
            histogram.record(ms * 1000).unwrap();
        }
        let leg = LegSummary::of(&histogram);
        assert_eq!(leg.count, 1000);
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.001 + 1e-9;
        assert!(close(leg.p50_ms, 500.0), "{leg:?}");
        assert!(close(leg.p90_ms, 900.0), "{leg:?}");
        assert!(close(leg.p95_ms, 950.0), "{leg:?}");
        assert!(close(leg.min_ms, 1.0), "{leg:?}");
        assert!(close(leg.mean_ms, 500.5), "{leg:?}");
        assert!(close(leg.p99_ms, 990.0), "{leg:?}");
        assert!(close(leg.max_ms, 1000.0), "{leg:?}");

        let empty = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap();
        assert_eq!(
            LegSummary::of(&empty),
            LegSummary {
                count: 0,
                min_ms: 0.0,
                mean_ms: 0.0,
                p50_ms: 0.0,
                p90_ms: 0.0,
                p95_ms: 0.0,
                p99_ms: 0.0,
                max_ms: 0.0
            }
        );
    }

    #[test]
    fn stats_record_in_microseconds() {
        let mut stats = Stats::new();
        stats.record(E2E, Duration::from_micros(2_500));
        stats.record(E2E, Duration::ZERO);
        let leg = LegSummary::of(&stats.legs[E2E]);
        assert_eq!(leg.count, 2);
        assert!((leg.max_ms - 2.5).abs() < 0.01, "{leg:?}");
        stats.error("3100".into(), "first".into());
        stats.error("3100".into(), "second".into());
        assert_eq!(stats.errors["3100"].count, 2);
        assert_eq!(stats.errors["3100"].first, "first");
    }

    #[test]
    fn cpu_time_is_read_past_the_command_name() {
        // The command name may hold spaces and parentheses.
        let stat = "4242 (kasi (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 6 0";
        assert_eq!(parse_cpu_seconds(stat), Some(3.25));
        assert_eq!(parse_cpu_seconds("4242 (kasi) S 1"), None);
        assert_eq!(parse_cpu_seconds("garbage"), None);
        let own = own_cpu_seconds().expect("this test runs on Linux");
        assert!(own >= 0.0);
    }
}
