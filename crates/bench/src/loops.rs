//! Running a plan: the closed and open loops, the breakpoint search, the
//! settlement window closes made while measuring.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use http::Method;
use serde_json::{json, Value};

use crate::dfsp::{admin_call, admin_request};
use crate::flows::{iteration, E2E};
use crate::ids::PartyRef;
use crate::load::{Breakpoint, Load, Plan, StepResult};
use crate::monitor::{
    monitor, read_hub_stages, read_waterfalls, reset_hub_stages, scrape_hub, TimelinePoint,
};
use crate::run::Shared;
use crate::stats::{own_cpu_seconds, process_cpu_seconds, CpuUse, LegSummary, Stats, Window};
use crate::BenchTransfersArgs;

/// Open loop: flows in flight beyond this are not started (an error each).
pub(crate) const MAX_IN_FLIGHT: u64 = 10_000;

/// The statistics of one plan's run.
pub(crate) struct RunResult {
    pub(crate) stats: Stats,
    /// The hub's stage table and sampled traces over the window, if it
    /// keeps them.
    pub(crate) hub_view: Option<(Option<Value>, Vec<Value>)>,
    /// A `--count` run: its throughput counts the flows it started.
    pub(crate) counted: bool,
    /// CPU time spent during the window.
    pub(crate) cpu: Option<CpuUse>,
    pub(crate) timeline: Vec<TimelinePoint>,
    /// From the end of the load until the last flow ended.
    pub(crate) drain: Duration,
    pub(crate) window_s: f64,
    pub(crate) plan: Plan,
    /// Latencies (ms, sorted) of the settlement window closes made while
    /// measuring (`--close-window-every`).
    pub(crate) window_closes: Vec<f64>,
}

impl RunResult {
    /// Flows completed per second of the window (for a `--count` run, the
    /// counted flows over the time they took: warm-up flows that ended in
    /// it are not theirs).
    pub(crate) fn throughput(&self) -> f64 {
        let completed = if self.counted {
            self.stats.completed
        } else {
            self.stats.completed_in_window
        };
        completed as f64 / self.window_s
    }

    pub(crate) fn failed(&self) -> u64 {
        self.stats
            .errors
            .values()
            .map(|tally| tally.count)
            .sum::<u64>()
            + self.stats.timeouts()
    }
}

/// Runs one plan on fresh statistics. `offset_s` places its timeline in a
/// longer run (the breakpoint search's). With `hub_admin`, the hub's stage
/// statistics are cleared as the window opens and read as it closes.
pub(crate) async fn run_plan(
    shared: &Arc<Shared>,
    args: &BenchTransfersArgs,
    plan: &Plan,
    offset_s: f64,
    hub_admin: Option<&str>,
) -> anyhow::Result<RunResult> {
    *shared.stats() = Stats::new();
    let started = Instant::now();
    let at = |seconds: f64| started + Duration::from_secs_f64(seconds);
    let window = Window {
        from: at(plan.window_from_s),
        until: at(plan.window_until_s),
    };
    *shared.window.lock().unwrap_or_else(|e| e.into_inner()) = Some(window);
    let end = at(plan.total_s());
    // The load ended (a --count run ends before its window's nominal end).
    let (load_ended, load_ended_wait) = tokio::sync::watch::channel(false);
    let hub_view = hub_admin.map(|admin| {
        let (shared, admin) = (shared.clone(), admin.to_string());
        let mut load_ended = load_ended_wait.clone();
        tokio::spawn(async move {
            let sleep =
                |until: Instant| tokio::time::sleep_until(tokio::time::Instant::from_std(until));
            sleep(window.from).await;
            if !reset_hub_stages(&shared, &admin).await {
                // Not cleared: its table would mix in the warm-up.
                return None;
            }
            tokio::select! {
                _ = sleep(window.until) => {}
                _ = load_ended.wait_for(|ended| *ended) => {}
            }
            Some((
                read_hub_stages(&shared, &admin).await,
                read_waterfalls(&shared, &admin).await,
            ))
        })
    });
    if !args.quiet {
        let level = |target: f64| match plan.load {
            Load::Closed => format!("{target:.0} users"),
            Load::Open => format!("{target:.0} flows/s"),
        };
        let shape = if plan.stages.len() == 1 && plan.start_target == plan.stages[0].target {
            format!(
                "a {} loop of {}",
                plan.load.name(),
                level(plan.start_target)
            )
        } else {
            let stages: Vec<String> = plan.stages.iter().map(|s| s.to_string()).collect();
            format!(
                "a {} loop from {} through stages {}",
                plan.load.name(),
                level(plan.start_target),
                stages.join(",")
            )
        };
        eprintln!(
            "running {shape} ({} flow): measuring from {:.1} s to {:.1} s of {:.1} s",
            args.flow.name(),
            plan.window_from_s,
            plan.window_until_s,
            plan.total_s()
        );
    }
    let closer = match (args.close_window_every, hub_admin) {
        (Some(every), Some(admin)) if every > 0.0 => Some(tokio::spawn(close_windows(
            shared.clone(),
            admin.to_string(),
            window,
            Duration::from_secs_f64(every),
            load_ended_wait.clone(),
        ))),
        _ => None,
    };
    let plan = Arc::new(plan.clone());
    let timeline = Arc::new(Mutex::new(Vec::new()));
    *shared.hub_gauges.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let scraper = tokio::spawn(scrape_hub(shared.clone(), started));
    let monitor = tokio::spawn(monitor(
        shared.clone(),
        started,
        window,
        plan.clone(),
        offset_s,
        args.quiet,
        timeline.clone(),
    ));
    let hub_pid = shared.hub_pid;
    let mut loaded_wait = load_ended_wait;
    let cpu = tokio::spawn(async move {
        let sleep =
            |until: Instant| tokio::time::sleep_until(tokio::time::Instant::from_std(until));
        sleep(window.from).await;
        let hub = || hub_pid.and_then(process_cpu_seconds);
        let from = (hub(), own_cpu_seconds());
        tokio::select! {
            _ = sleep(window.until) => {}
            _ = loaded_wait.wait_for(|ended| *ended) => {}
        }
        let until = (hub(), own_cpu_seconds());
        Some(CpuUse {
            hub_s: until.0.zip(from.0).map(|(until, from)| until - from),
            harness_s: until.1? - from.1?,
        })
    });
    let loaded = match plan.load {
        Load::Closed => closed_loop(shared, args, &plan, started, end).await,
        Load::Open => open_loop(shared, args, &plan, started, end).await,
    };
    // A plan lasts its whole duration even when its level falls to zero
    // before the end (the timeline covers it); a --count run ends with its
    // flows.
    if loaded.is_ok() && shared.budget.is_none() && Instant::now() < end {
        tokio::time::sleep_until(tokio::time::Instant::from_std(end)).await;
    }
    let _ = load_ended.send(true);
    monitor.abort();
    scraper.abort();
    loaded?;
    let ended = Instant::now();
    // A payee's answer can be answered after the payer's callback: let the
    // last ones be timed too (in this run's statistics); and no transfer may
    // still be waited for before the positions are read.
    let deadline = ended + Duration::from_secs(5);
    while (shared.answers_in_flight.load(Ordering::SeqCst) > 0
        || !shared.pending().is_empty()
        || !shared.conversions().is_empty()
        || !shared.patches().is_empty())
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let hub_view = match hub_view {
        Some(task) => task.await.ok().flatten(),
        None => None,
    };
    let drain = ended.saturating_duration_since(end);
    // A --count run's window closes when its last flow ended.
    let window_s = match shared.budget {
        Some(_) => ended.saturating_duration_since(window.from).as_secs_f64(),
        None => plan.window_s(),
    };
    let cpu = cpu.await.ok().flatten();
    let mut closes = Vec::new();
    if let Some(closer) = closer {
        closes = closer.await.unwrap_or_default();
        closes.sort_by(f64::total_cmp);
        if !args.quiet {
            match (closes.first(), closes.last()) {
                (Some(_), Some(max)) => eprintln!(
                    "settlement windows closed while measuring: {}; close latency p50 {:.2} ms, max {:.2} ms",
                    closes.len(),
                    closes[closes.len() / 2],
                    max
                ),
                _ => eprintln!("settlement windows closed while measuring: none"),
            }
        }
    }
    let stats = std::mem::replace(&mut *shared.stats(), Stats::new());
    let timeline = std::mem::take(&mut *timeline.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(RunResult {
        stats,
        hub_view,
        counted: shared.budget.is_some(),
        cpu,
        timeline,
        drain,
        window_s,
        plan: (*plan).clone(),
        window_closes: closes,
    })
}

/// Closes the hub's open settlement window every `every` within the
/// measuring window; the latency of each close that took place, in ms.
pub(crate) async fn close_windows(
    shared: Arc<Shared>,
    admin: String,
    window: Window,
    every: Duration,
    mut load_ended: tokio::sync::watch::Receiver<bool>,
) -> Vec<f64> {
    let sleep = |until: Instant| tokio::time::sleep_until(tokio::time::Instant::from_std(until));
    let mut latencies = Vec::new();
    let mut next = window.from + every;
    while next < window.until {
        tokio::select! {
            _ = sleep(next) => {}
            _ = load_ended.wait_for(|ended| *ended) => break,
        }
        next += every;
        let url = format!("{admin}/v2/settlementWindows?state=OPEN");
        let Ok(body) = admin_call(&shared.identities.admin, Method::GET, &url, None, false).await
        else {
            continue;
        };
        let Some(id) = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v[0]["settlementWindowId"].as_u64())
        else {
            continue;
        };
        let started = Instant::now();
        let closed = admin_request(
            &shared.identities.admin,
            Method::POST,
            &format!("{admin}/v2/settlementWindows/{id}"),
            Some(json!({"state": "CLOSED", "reason": "kasi bench"})),
        )
        .await;
        if matches!(closed, Ok((status, _)) if status.is_success()) {
            latencies.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    latencies
}

/// The breakpoint search: open-loop steps at rising rates until one breaks
/// the thresholds. The run reported is the last step that held (or the
/// first, if none did); every step is in the breakpoint section.
pub(crate) async fn search_breakpoint(
    shared: &Arc<Shared>,
    args: &BenchTransfersArgs,
    search: &Breakpoint,
    hub_admin: Option<&str>,
) -> anyhow::Result<(RunResult, Value)> {
    let searching = Instant::now();
    let mut steps = Vec::new();
    let mut timeline = Vec::new();
    let mut held: Option<RunResult> = None;
    let mut first: Option<RunResult> = None;
    let mut broke = None;
    for step in 0..search.max_steps {
        let rate = search.rate_of_step(step);
        let plan = Plan::constant(Load::Open, rate, search.step_warmup_s, search.step_s);
        if !args.quiet {
            eprintln!("breakpoint step {}: {rate:.0} flows/s", step + 1);
        }
        let offset_s = searching.elapsed().as_secs_f64();
        let run = run_plan(shared, args, &plan, offset_s, hub_admin).await?;
        timeline.extend(run.timeline.iter().cloned());
        let result = StepResult {
            rate_per_s: rate,
            throughput_per_s: run.throughput(),
            p99_ms: LegSummary::of(&run.stats.legs[E2E]).p99_ms,
            started: run.stats.started,
            failed: run.failed(),
        };
        let verdict = search.broken(&result);
        steps.push(json!({
            "rate_per_s": result.rate_per_s,
            "throughput_per_s": result.throughput_per_s,
            "p99_ms": result.p99_ms,
            "errors": result.failed,
            "ok": verdict.is_none(),
        }));
        if let Some(reason) = verdict {
            broke = Some((rate, reason));
            first.get_or_insert(run);
            break;
        }
        if first.is_none() {
            first = Some(run);
        } else {
            held = Some(run);
        }
    }
    let last_good = steps
        .iter()
        .rev()
        .find(|step| step["ok"] == true)
        .map(|step| step["rate_per_s"].clone());
    let result = json!({
        "threshold": search.threshold(),
        "last_good_rate_per_s": last_good,
        "broke_at_rate_per_s": broke.as_ref().map(|(rate, _)| *rate),
        "reason": broke.as_ref().map_or_else(
            || format!("held up to step {}", search.max_steps),
            |(_, reason)| reason.clone(),
        ),
        "steps": steps,
    });
    let mut run = held
        .or(first)
        .context("the breakpoint search ran no step")?;
    run.timeline = timeline;
    Ok((run, result))
}

/// The closed loop: virtual user `u` is active while the plan's level is
/// above `u`, starting its next flow when the last one ended, until the
/// load ends.
pub(crate) async fn closed_loop(
    shared: &Arc<Shared>,
    args: &BenchTransfersArgs,
    plan: &Arc<Plan>,
    started: Instant,
    end: Instant,
) -> anyhow::Result<()> {
    let mut users = tokio::task::JoinSet::new();
    let count = plan.max_target().ceil() as u32;
    for user in 0..count {
        let payer = user % args.dfsps;
        let payee = (payer + 1) % args.dfsps;
        let payer_party = PartyRef {
            dfsp: payer,
            index: (user / args.dfsps) % args.parties,
        };
        let (shared, plan) = (shared.clone(), plan.clone());
        users.spawn(async move {
            loop {
                let now_s = started.elapsed().as_secs_f64();
                match plan.next_active_s(user, now_s) {
                    None => break,
                    Some(at_s) if at_s > now_s => {
                        let at = started + Duration::from_secs_f64(at_s);
                        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
                        continue;
                    }
                    Some(_) => {}
                }
                let now = Instant::now();
                if now >= end || !shared.admit(now) {
                    break;
                }
                iteration(&shared, now, payer_party, payee).await;
            }
        });
    }
    while let Some(joined) = users.join_next().await {
        joined.context("a virtual user panicked")?;
    }
    Ok(())
}

/// The open loop: each arrival is started when the plan's schedule says
/// (or at once, if the scheduler is late), whatever is still in flight,
/// until the load ends; then waits for every flow to end. Arrival `n` pays
/// from DFSP `n mod N` to the next one.
pub(crate) async fn open_loop(
    shared: &Arc<Shared>,
    args: &BenchTransfersArgs,
    plan: &Plan,
    started: Instant,
    end: Instant,
) -> anyhow::Result<()> {
    let in_flight = Arc::new(AtomicU64::new(0));
    let mut flows = tokio::task::JoinSet::new();
    let mut arrivals = plan.arrivals();
    for n in 0u64.. {
        let Some(due_s) = arrivals.due_s(n) else {
            break;
        };
        let scheduled = started + Duration::from_secs_f64(due_s);
        if scheduled >= end {
            break;
        }
        if scheduled > Instant::now() {
            tokio::time::sleep_until(tokio::time::Instant::from_std(scheduled)).await;
        }
        while let Some(joined) = flows.try_join_next() {
            joined.context("a flow panicked")?;
        }
        if !shared.admit(scheduled) {
            break;
        }
        if in_flight.load(Ordering::SeqCst) >= MAX_IN_FLIGHT {
            shared.stats().error(
                "start overflow".into(),
                format!("{MAX_IN_FLIGHT} flows already in flight when one was due"),
            );
            continue;
        }
        let dfsps = u64::from(args.dfsps);
        let payer = (n % dfsps) as u32;
        let payee = (payer + 1) % args.dfsps;
        let payer_party = PartyRef {
            dfsp: payer,
            index: ((n / dfsps) % u64::from(args.parties)) as u32,
        };
        in_flight.fetch_add(1, Ordering::SeqCst);
        let (shared, in_flight) = (shared.clone(), in_flight.clone());
        flows.spawn(async move {
            iteration(&shared, scheduled, payer_party, payee).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
        });
    }
    while let Some(joined) = flows.join_next().await {
        joined.context("a flow panicked")?;
    }
    Ok(())
}
