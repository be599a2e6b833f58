//! What a run measured: the summary printed at its end and report.json.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::flows::{E2E, LEGS};
use crate::load::{Load, Profile};
use crate::loops::RunResult;
use crate::onboard::PositionCheck;
use crate::run::{millis_since_epoch, Baseline, CURRENCY, FX_RATE, TARGET_CURRENCY};
use crate::stats::LegSummary;
use crate::BenchTransfersArgs;

pub(crate) struct Report {
    pub(crate) run: RunResult,
    /// Onboarding the DFSPs (and registering their parties) took this long.
    pub(crate) onboarding: Duration,
    pub(crate) positions: PositionCheck,
    pub(crate) target: &'static str,
    pub(crate) api: String,
    /// Warnings the embedded hub logged.
    pub(crate) hub_warnings: Option<u64>,
    /// The embedded hub did not stop cleanly.
    pub(crate) hub_problem: Option<String>,
    pub(crate) baseline: Option<Baseline>,
    pub(crate) started_at: SystemTime,
    /// The hub's own per-stage table, if it keeps one.
    pub(crate) hub_stages: Option<Value>,
    /// Sampled transfers' traces through the hub.
    pub(crate) waterfalls: Vec<Value>,
    pub(crate) breakpoint: Option<Value>,
    /// The configuration the hub ran in (TLS, signatures) and what the
    /// DFSPs' checks of the signatures found.
    pub(crate) security: crate::security::SecuritySummary,
    /// The hub's JWS pool over the load (warm-up included), when it has
    /// one: threads, operations, busy seconds, utilisation.
    pub(crate) jws_pool: Option<Value>,
}

impl Report {
    pub(crate) fn errors(&self) -> u64 {
        self.run
            .stats
            .errors
            .values()
            .map(|tally| tally.count)
            .sum()
    }

    pub(crate) fn failed(&self) -> u64 {
        self.run.failed()
    }

    pub(crate) fn throughput(&self) -> f64 {
        self.run.throughput()
    }

    /// The constant level of a run that has one.
    pub(crate) fn constant_level(&self) -> Option<f64> {
        let plan = &self.run.plan;
        (plan.stages.len() == 1 && plan.stages[0].target == plan.start_target)
            .then_some(plan.start_target)
    }

    pub(crate) fn profile(&self, args: &BenchTransfersArgs) -> Option<&'static str> {
        args.profile.map(Profile::name)
    }

    pub(crate) fn load_description(&self, args: &BenchTransfersArgs) -> String {
        let plan = &self.run.plan;
        let unit = match plan.load {
            Load::Closed => "virtual users",
            Load::Open => "flows/s (open loop)",
        };
        let base = match self.constant_level() {
            Some(level) => format!("{level} {unit}"),
            None => {
                let stages: Vec<String> = plan.stages.iter().map(|s| s.to_string()).collect();
                format!(
                    "{unit} from {} through {}",
                    plan.start_target,
                    stages.join(",")
                )
            }
        };
        match self.profile(args) {
            Some("breakpoint") => {
                format!("breakpoint search (reported: its last step that held, {base})")
            }
            Some(profile) => format!("{profile} profile: {base}"),
            None => base,
        }
    }

    pub(crate) fn label(&self, args: &BenchTransfersArgs) -> String {
        args.label.clone().unwrap_or_else(|| {
            let load = match (
                self.profile(args),
                self.constant_level(),
                self.run.plan.load,
            ) {
                (Some(profile), _, _) => profile.to_string(),
                (None, Some(level), Load::Closed) => format!("c{level}"),
                (None, Some(level), Load::Open) => format!("r{level}"),
                (None, None, _) => "stages".to_string(),
            };
            format!("{} {} {load}", args.flow.name(), self.target)
        })
    }

    pub(crate) fn print(&self, args: &BenchTransfersArgs) {
        let stats = &self.run.stats;
        let flow = args.flow;
        let parties = if flow.discovers() {
            format!(" ({} parties each)", args.parties)
        } else {
            String::new()
        };
        println!(
            "kasi bench --flow {}: {} DFSPs{parties}, {}, window {:.1} s, hub {} ({}; {})",
            flow.name(),
            args.dfsps,
            self.load_description(args),
            self.run.window_s,
            self.api,
            self.target,
            self.security.description
        );
        if args.null_hub {
            println!(
                "NULL HUB: no hub work (no validation, ledger or store); this is the harness's own ceiling"
            );
        }
        println!();
        println!(
            "  {:<10} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "leg", "count", "min ms", "mean ms", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "max ms"
        );
        for leg_index in flow.legs() {
            let leg = LegSummary::of(&stats.legs[leg_index]);
            println!(
                "  {:<10} {:>9} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                LEGS[leg_index],
                leg.count,
                leg.min_ms,
                leg.mean_ms,
                leg.p50_ms,
                leg.p90_ms,
                leg.p95_ms,
                leg.p99_ms,
                leg.max_ms
            );
        }
        println!();
        println!(
            "  throughput: {:.0} {}/s ({} completed in the {:.1} s window)",
            self.throughput(),
            flow.unit(),
            stats.completed_in_window,
            self.run.window_s
        );
        match &self.baseline {
            Some(baseline) if baseline.throughput_per_s > 0.0 => println!(
                "  against the null hub: {:.2} × its {:.0}/s{} ({})",
                self.throughput() / baseline.throughput_per_s,
                baseline.throughput_per_s,
                baseline.us_per_flow.map_or(String::new(), |us| format!(
                    ", {us:.0} µs of its CPU per flow"
                )),
                baseline.note
            ),
            _ => {}
        }
        if let Some(cpu) = self.run.cpu {
            let per_flow = |seconds: f64| seconds * 1e6 / (stats.completed_in_window.max(1) as f64);
            let hub = cpu.hub_s.map_or_else(
                || "hub: not measured (not a child process)".to_string(),
                |hub_s| {
                    format!(
                        "hub {:.2} cores, {:.0} µs per flow",
                        hub_s / self.run.window_s,
                        per_flow(hub_s)
                    )
                },
            );
            println!(
                "  CPU in the window: {hub}; harness {:.2} cores, {:.0} µs per flow",
                cpu.harness_s / self.run.window_s,
                per_flow(cpu.harness_s)
            );
        }
        if self.run.plan.load == Load::Open {
            println!(
                "  offered: {:.0} flows/s started in the window; e2e counts from each flow's scheduled start",
                stats.started_in_window as f64 / self.run.window_s
            );
        }
        println!(
            "  flows: {} started ({} in the window, {} of them completed), {} failed, {} timed out; last ended {:.0} ms after the load",
            stats.started,
            stats.started_in_window,
            stats.completed,
            self.errors(),
            stats.timeouts(),
            self.run.drain.as_secs_f64() * 1000.0
        );
        for (stage, count) in &stats.timeouts {
            println!("  timed out in the {stage} stage: {count}");
        }
        for (key, tally) in &stats.errors {
            println!("  error {key}: {} (first: {})", tally.count, tally.first);
        }
        if stats.late_errors + stats.strays + stats.late_answers + stats.unexpected > 0 {
            println!(
                "  callbacks for ended or unknown stages: {} errors, {} answers, {} forwarded requests; {} unexpected requests",
                stats.late_errors, stats.late_answers, stats.strays, stats.unexpected
            );
        }
        let participants = if args.flow.converts() {
            format!("{} DFSPs' and FXPs'", args.dfsps)
        } else {
            format!("{} DFSPs'", args.dfsps)
        };
        match &self.positions.problem {
            _ if self.positions.not_applicable => {
                println!("  positions: not applicable (the null hub keeps no ledger)")
            }
            Some(problem) => println!("  positions: NOT CHECKED: {problem}"),
            None => {
                for currency in &self.positions.by_currency {
                    let verdict = if currency.sum == ledger::Amount::ZERO {
                        "net zero"
                    } else {
                        "NOT NET ZERO"
                    };
                    let fxps = if args.flow.converts() {
                        format!(" (the FXPs' {})", currency.fxps)
                    } else {
                        String::new()
                    };
                    println!(
                        "  positions: the {participants} {} positions sum to {}: {verdict}{fxps}",
                        currency.currency, currency.sum
                    );
                }
                match self.positions.fxps_at_rate {
                    Some(true) => println!(
                        "  conversions: the FXPs' {TARGET_CURRENCY} position is exactly {FX_RATE} × their {CURRENCY} one"
                    ),
                    Some(false) => println!(
                        "  conversions: the FXPs' {TARGET_CURRENCY} position is NOT {FX_RATE} × their {CURRENCY} one"
                    ),
                    None => {}
                }
            }
        }
        if let Some(breakpoint) = &self.breakpoint {
            println!(
                "  breakpoint: held at {} flows/s, broke at {} flows/s: {} (threshold: {})",
                breakpoint["last_good_rate_per_s"],
                breakpoint["broke_at_rate_per_s"],
                breakpoint["reason"].as_str().unwrap_or("?"),
                breakpoint["threshold"].as_str().unwrap_or("?"),
            );
        }
        if let Some(warnings) = self.hub_warnings {
            if warnings > 0 {
                println!("  the hub logged {warnings} warnings or errors (copied above to stderr)");
            }
        }
        if let Some(problem) = &self.hub_problem {
            println!("  HUB: {problem}");
        }
        let security = &self.security;
        if security.verified + security.failed() > 0 {
            println!(
                "  signatures: {} verified, {} invalid, {} missing (one in {} checked)",
                security.verified, security.invalid, security.missing, args.verify_every
            );
        }
        if let Some(problem) = &security.first_problem {
            println!("  SIGNATURE: {problem}");
        }
        if let Some(pool) = &self.jws_pool {
            if pool["operations"].as_f64().unwrap_or(0.0) > 0.0 {
                println!(
                    "  hub JWS pool: {} threads {:.0}% busy, {:.0} µs per signature or check ({} in {:.1} s, warm-up included)",
                    pool["threads"],
                    pool["utilisation"].as_f64().unwrap_or(0.0) * 100.0,
                    pool["us_per_operation"].as_f64().unwrap_or(0.0),
                    pool["operations"],
                    pool["over_s"].as_f64().unwrap_or(0.0),
                );
            }
        }
        if security.failed_handshakes > 0 {
            println!(
                "  the callback server failed {} TLS handshakes",
                security.failed_handshakes
            );
        }
    }

    pub(crate) fn to_json(&self, args: &BenchTransfersArgs) -> Value {
        let stats = &self.run.stats;
        let plan = &self.run.plan;
        let legs: serde_json::Map<String, Value> = args
            .flow
            .legs()
            .into_iter()
            .map(|leg| {
                (
                    LEGS[leg].to_string(),
                    LegSummary::of(&stats.legs[leg]).to_json(),
                )
            })
            .collect();
        let leg_order: Vec<&str> = args.flow.legs().into_iter().map(|leg| LEGS[leg]).collect();
        let errors_by_code: serde_json::Map<String, Value> = stats
            .errors
            .iter()
            .map(|(key, tally)| {
                (
                    key.clone(),
                    json!({ "count": tally.count, "first": tally.first }),
                )
            })
            .collect();
        let timeouts_by_stage: serde_json::Map<String, Value> = stats
            .timeouts
            .iter()
            .map(|(stage, count)| (stage.to_string(), json!(count)))
            .collect();
        let timeline: Vec<Value> = self
            .run
            .timeline
            .iter()
            .map(|point| {
                let mut sample = json!({
                    "t_s": point.t_s,
                    "phase": point.phase,
                    "target": point.target,
                    "started": point.started,
                    "completed": point.completed,
                    "errors": point.errors,
                    "p50_ms": point.p50_ms,
                    "p99_ms": point.p99_ms,
                    "in_flight": point.in_flight,
                });
                // Only what was measured: a missing scrape is a missing key.
                let hub = point.hub.unwrap_or_default();
                for (key, value) in [
                    ("hub_rss_bytes", hub.rss_bytes),
                    ("callback_backlog", hub.callback_backlog),
                    ("transfers_in_memory", hub.transfers_in_memory),
                    (
                        "harness_rss_bytes",
                        point.harness_rss_bytes.map(|b| b as f64),
                    ),
                ] {
                    if let Some(value) = value {
                        // Bytes and counts as integers (the exposition may
                        // write a gauge as 7.0).
                        sample[key] = if value.fract() == 0.0 && (0.0..9e15).contains(&value) {
                            json!(value as u64)
                        } else {
                            json!(value)
                        };
                    }
                }
                sample
            })
            .collect();
        let stages: Vec<Value> = plan
            .stages
            .iter()
            .map(|stage| {
                // A --count run lasted as long as its flows took, not its
                // nominal limit.
                let duration_s = match args.count {
                    Some(_) => plan.window_from_s + self.run.window_s,
                    None => stage.duration_s,
                };
                json!({ "duration_s": duration_s, "target": stage.target })
            })
            .collect();
        let constant = self.constant_level();
        let null_hub_ratio = self.baseline.as_ref().map(|baseline| {
            json!({
                "null_hub_throughput_per_s": baseline.throughput_per_s,
                "null_hub_us_per_flow": baseline.us_per_flow,
                "ratio": (baseline.throughput_per_s > 0.0)
                    .then(|| self.throughput() / baseline.throughput_per_s),
                "note": baseline.note,
            })
        });
        json!({
            "kasi_bench_report": 1,
            "label": self.label(args),
            "started_at": fspiop::format_date_time(millis_since_epoch(self.started_at)),
            "machine": machine(),
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "flow": args.flow.name(),
            "target": self.target,
            "configuration": self.security.description,
            "security": self.security.to_json(),
            "hub_jws_pool": self.jws_pool,
            "null_hub": args.null_hub,
            "api": self.api,
            "profile": self.profile(args),
            "dfsps": args.dfsps,
            "connections_per_dfsp": args.connections_per_dfsp,
            "parties_per_dfsp": args.flow.discovers().then_some(args.parties),
            "load": plan.load.name(),
            "start_target": plan.start_target,
            "stages": stages,
            "concurrency": (plan.load == Load::Closed).then_some(constant).flatten(),
            "offered_rate_per_s": (plan.load == Load::Open).then_some(constant).flatten(),
            "offered_in_window_per_s": (plan.load == Load::Open)
                .then(|| stats.started_in_window as f64 / self.run.window_s),
            "warmup_s": plan.window_from_s,
            "duration_s": self.run.window_s,
            "count": args.count,
            "onboarding_s": self.onboarding.as_secs_f64(),
            "throughput_per_s": self.throughput(),
            "e2e_p99_ms": LegSummary::of(&stats.legs[E2E]).p99_ms,
            "completed_in_window": stats.completed_in_window,
            "started": stats.started,
            "started_in_window": stats.started_in_window,
            "completed": stats.completed,
            "errors": self.errors(),
            "timeouts": stats.timeouts(),
            "errors_by_code": errors_by_code,
            "timeouts_by_stage": timeouts_by_stage,
            "payee_confirmations": stats.confirmations,
            "late_answers": stats.late_answers,
            "late_error_callbacks": stats.late_errors,
            "stray_requests": stats.strays,
            "unexpected_requests": stats.unexpected,
            "drain_ms": self.run.drain.as_secs_f64() * 1000.0,
            "settlement_window_closes": (!self.run.window_closes.is_empty()).then(|| {
                let closes = &self.run.window_closes;
                json!({
                    "count": closes.len(),
                    "p50_ms": closes[closes.len() / 2],
                    "max_ms": closes[closes.len() - 1],
                })
            }),
            "positions_net_zero": (!self.positions.not_applicable).then_some(self.positions.net_zero),
            "positions_applicable": !self.positions.not_applicable,
            "positions_sum": self.positions.sum.map(|sum| sum.to_string()),
            "positions_problem": self.positions.problem,
            "positions_by_currency": (!self.positions.by_currency.is_empty()).then(|| {
                self.positions
                    .by_currency
                    .iter()
                    .map(|currency| {
                        (
                            currency.currency.to_string(),
                            json!({
                                "sum": currency.sum.to_string(),
                                "fxps": currency.fxps.to_string(),
                            }),
                        )
                    })
                    .collect::<serde_json::Map<String, Value>>()
            }),
            "fxps_at_rate": self.positions.fxps_at_rate,
            "fxps": args.flow.converts().then_some(args.fxps),
            "fx_rate": args.flow.converts().then(|| {
                json!({
                    "source": CURRENCY,
                    "target": TARGET_CURRENCY,
                    "rate": FX_RATE.to_string(),
                })
            }),
            "hub_warnings": self.hub_warnings,
            "hub_problem": self.hub_problem,
            "legs": legs,
            "leg_order": leg_order,
            "null_hub_ratio": null_hub_ratio,
            "hub_stages": self.hub_stages,
            "waterfalls": self.waterfalls,
            "timeline": timeline,
            "breakpoint": self.breakpoint,
            "cpu": self.run.cpu.map(|cpu| {
                let window_s = self.run.window_s;
                let per_flow = |seconds: f64| {
                    (stats.completed_in_window > 0)
                        .then(|| seconds * 1e6 / stats.completed_in_window as f64)
                };
                json!({
                    "window_s": window_s,
                    "hub_cpu_s": cpu.hub_s,
                    "harness_cpu_s": cpu.harness_s,
                    "hub_cores": cpu.hub_s.map(|s| s / window_s),
                    "harness_cores": cpu.harness_s / window_s,
                    "hub_us_per_flow": cpu.hub_s.and_then(per_flow),
                    "harness_us_per_flow": per_flow(cpu.harness_s),
                })
            }),
        })
    }
}

/// The machine the run was on, for the report.
pub(crate) fn machine() -> Value {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        });
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string());
    json!({
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpu_model": cpu_model,
        "os": std::env::consts::OS,
        "hostname": hostname,
    })
}
