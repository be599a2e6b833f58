//! `kasi bench`: FSPIOP flows through a hub over HTTP.
//!
//! One process plays every DFSP at once, "two sides of the same coin"
//! (seed 002): each virtual user is a payer that runs its flow in a closed
//! loop, and one callback server is every payee, answering what the hub
//! forwards at once and then sending the payee's callback. Every leg is
//! timed on one clock, so there is no clock skew to correct for.
//!
//! The flow (`--flow`) is what one iteration of a virtual user does:
//!
//! - `transfer` (the default): `POST /transfers`; the payee fulfils; done
//!   when the payer receives the commit notification.
//! - `lookup`: `GET /parties/MSISDN/{ID}` (no FSPIOP-Destination: the hub
//!   finds the holder); the payee answers `PUT /parties/...`; done when the
//!   payer receives it.
//! - `quote`: `POST /quotes` to the payee; it answers `PUT /quotes/{ID}`;
//!   done when the payer receives it.
//! - `discovery+quote+transfer`: the three in turn, the end-to-end that
//!   Mojaloop's performance whitepaper measures; the transfer uses the
//!   quote's transaction id, amount and condition.
//! - `transaction-request`: request-to-pay, the payee DFSP's
//!   `POST /transactionRequests` to the payer DFSP; the payer answers
//!   `PUT /transactionRequests/{ID}` (`RECEIVED`); done when the payee
//!   receives it.
//!
//! For every flow but `transfer`, each DFSP also registers the discovery
//! endpoints and, with one batch `POST /participants`, `--parties` MSISDNs
//! of its own before the load starts.
//!
//! The hub is either started here (`--embedded`, the default: this
//! executable's `serve` on a temporary data directory, stopped at the end)
//! or one already running (`--api`/`--admin`); then only the Mojaloop admin
//! API and FSPIOP are assumed.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;
use std::io::BufRead as _;
use std::net::SocketAddr;
use std::process::{Child, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use axum::extract::{Path, State};
use axum::routing::{get, post, put};
use axum::Router;
use bytes::Bytes;
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::bench_load::{Breakpoint, Load, Plan, Profile, StepResult};
use crate::dfsp::{
    self, admin_call, admin_request, batch_answer_problem, describe_error_body, error_of,
    fspiop_request, fulfil_body, participants_batch_body, party_put_body, quote_post_body,
    quote_put_body, send, Api, HttpClient, CONDITION, ILP_PACKET,
};

#[derive(Args, Clone)]
pub struct BenchTransfersArgs {
    /// Start a hub (this executable's `serve`) on a temporary data directory
    /// and stop it at the end. The default when --api is not given.
    #[arg(long, conflicts_with_all = ["api", "admin"], hide_short_help = true)]
    embedded: bool,

    /// Instead of a hub, run the built-in null hub (`kasi null-hub`, a child
    /// process): it answers onboarding minimally and forwards every FSPIOP
    /// request to the DFSP it is for, with no validation, ledger or store.
    /// Measures the harness's own ceiling on this machine (positions: not
    /// applicable).
    #[arg(long, conflicts_with_all = ["api", "admin", "embedded"])]
    null_hub: bool,

    /// Run the null hub (of --null-hub and --null-hub-baseline) inside this
    /// process instead of as a process of its own: no process switches
    /// between the DFSPs and the hub, the harness's absolute ceiling rather
    /// than that of any hub in another process.
    #[arg(long, hide_short_help = true)]
    null_hub_in_process: bool,

    /// Base URL of a running hub's FSPIOP API (e.g. http://127.0.0.1:3000)
    /// instead of an embedded one; needs --admin.
    #[arg(long, value_name = "URL", requires = "admin")]
    api: Option<String>,

    /// Base URL of that hub's admin API (central-ledger's), e.g.
    /// http://127.0.0.1:3001.
    #[arg(long, value_name = "URL", requires = "api")]
    admin: Option<String>,

    /// The embedded hub traces one transfer in this many through its stages
    /// for the report's waterfalls (its `serve --trace-sample-every`).
    #[arg(long, value_name = "N", conflicts_with_all = ["api", "admin", "null_hub"], hide_short_help = true)]
    trace_sample_every: Option<u32>,

    /// Name of the hub participant, which holds the hub accounts.
    #[arg(long, default_value = "Hub", hide_short_help = true)]
    hub_name: String,

    /// Simulated DFSPs, onboarded through the admin API. Virtual user u pays
    /// from DFSP u mod N to the next one.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=10_000))]
    dfsps: u32,

    /// What each iteration of a virtual user does: `transfer` (POST
    /// /transfers until the payer's commit notification), `lookup` (GET
    /// /parties until the payer receives PUT /parties), `quote` (POST /quotes
    /// until the payer receives PUT /quotes), `quote+transfer`, or
    /// `discovery+quote+transfer` (the three in turn), or
    /// `transaction-request` (POST /transactionRequests from the payee until
    /// it receives the payer's PUT /transactionRequests).
    #[arg(long, value_enum, default_value_t = Flow::Transfer)]
    flow: Flow,

    /// MSISDNs each DFSP registers (one batch POST /participants) before the
    /// load, for every flow but `transfer`; lookups go round them.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=10_000), hide_short_help = true)]
    parties: u32,

    /// Virtual users, each with one flow in flight at a time (closed loop);
    /// with --profile, the level it shapes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    concurrency: u32,

    /// Seconds measured, after the warm-up (default 10); with --profile,
    /// the whole run (default 10 s for smoke, 60 s for the others, and for
    /// breakpoint each step: see --step-duration).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,

    /// Measure this many flows instead of a duration: the run ends once the
    /// last of them, started after the warm-up, has ended; throughput is
    /// counted over that time.
    #[arg(long, value_name = "FLOWS", conflicts_with_all = ["duration", "profile", "stages"],
          value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,

    /// Seconds of load before the measurement, excluded from the statistics
    /// (its failures still count for the exit status). Default 2, or 0 with
    /// --stages.
    #[arg(long, value_name = "SECONDS", conflicts_with = "profile")]
    warmup: Option<f64>,

    /// Address of the DFSPs' callback server; the hub must be able to reach it.
    #[arg(long, default_value = "127.0.0.1:0", hide_short_help = true)]
    callback_listen: SocketAddr,

    /// Open loop instead of the closed one: start this many flows per
    /// second on a fixed schedule, whether or not earlier ones have ended
    /// (at most 10,000 in flight: an arrival beyond that counts as an
    /// error). Each flow's end-to-end latency is measured from its
    /// scheduled start, so queueing shows as latency. --concurrency is
    /// then ignored; with --profile, the level it shapes.
    #[arg(long, value_name = "PER_SECOND")]
    rate: Option<f64>,

    /// A named test type (seed 001), shaped around --concurrency (closed
    /// loop) or --rate (open loop): smoke, average-load, stress, spike, or
    /// breakpoint (see the values' descriptions with --help).
    #[arg(long, value_enum, conflicts_with = "stages")]
    profile: Option<crate::bench_load::Profile>,

    /// k6-style stages instead of a constant level: `DURATION:TARGET,...`
    /// (e.g. `10s:64,30s:64,5s:0`); the level starts at 0 and moves
    /// linearly to each target. Targets are virtual users, or arrivals per
    /// second with `--load open`.
    #[arg(long, value_name = "STAGES")]
    stages: Option<String>,

    /// Whether --stages targets are virtual users (closed) or arrivals per
    /// second (open). Default: open when --rate is given, else closed.
    #[arg(long, value_enum, hide_short_help = true)]
    load: Option<LoadArg>,

    /// Breakpoint: seconds measured per step (after 1 s unmeasured).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 5.0,
        hide_short_help = true
    )]
    step_duration: f64,

    /// Breakpoint: a step whose end-to-end p99 exceeds this breaks.
    /// Default 50 ms, or 100 ms for flows of more than one stage.
    #[arg(long, value_name = "MS")]
    max_p99_ms: Option<f64>,

    /// Breakpoint: a step where more than this share of flows fails breaks.
    #[arg(
        long,
        value_name = "PERCENT",
        default_value_t = 1.0,
        hide_short_help = true
    )]
    max_error_pct: f64,

    /// Before measuring an embedded or external hub, measure the null hub
    /// (see --null-hub) this many seconds with the same flow, to state the
    /// hub's throughput as a share of the harness's own ceiling. 0: skip.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 5.0,
        hide_short_help = true
    )]
    null_hub_baseline: f64,

    /// Folder for the report (report.json, report.md, timeline.svg).
    /// Default: kasi-bench/<date>-<time>-<flow> under the current directory.
    #[arg(long, value_name = "DIR")]
    out: Option<std::path::PathBuf>,

    /// Write no report folder.
    #[arg(long, conflicts_with = "out")]
    no_report: bool,

    /// A short name for the run in its report and in `kasi bench compare`.
    #[arg(long, hide_short_help = true)]
    label: Option<String>,

    /// Print the summary as one JSON object on standard output.
    #[arg(long)]
    json: bool,

    /// No progress line (once a second, on stderr) and no other chatter.
    #[arg(long, hide_short_help = true)]
    quiet: bool,

    /// While measuring, close the hub's open settlement window every this
    /// many seconds (central-settlement's `POST /v2/settlementWindows/{id}`
    /// on the admin address), to show what a close does to the transfers
    /// flowing meanwhile; the closes and their latencies are reported.
    #[arg(long, value_name = "SECONDS", hide_short_help = true)]
    close_window_every: Option<f64>,
}

/// A `--count` run that has not started its flows after this long stops.
const COUNT_RUN_LIMIT_S: f64 = 3600.0;

/// A stage (lookup, quote, transfer) not ended this long after its request
/// counts as timed out.
const STAGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Open loop: flows in flight beyond this are not started (an error each).
const MAX_IN_FLIGHT: u64 = 10_000;
/// How long the run waits for the hub to settle positions that do not net
/// to zero yet (a transfer the driver gave up on may still be committing).
const POSITIONS_SETTLE: Duration = Duration::from_secs(2);
/// How long a DFSP waits for the answer to its batch party registration.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the embedded hub may take to say where it listens.
const HUB_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the embedded hub may take to stop after SIGTERM.
const HUB_STOP_TIMEOUT: Duration = Duration::from_secs(45);
const CURRENCY: &str = "USD";

/// The legs timed, in the order they happen.
const LEGS: [&str; 8] = [
    "lookup",
    "quote",
    "prepare",
    "forward",
    "fulfil",
    "notify",
    "transaction_request",
    "e2e",
];
/// `GET /parties/...` sent → the payer receives the payee's `PUT /parties/...`.
const LOOKUP: usize = 0;
/// `POST /quotes` sent → the payer receives the payee's `PUT /quotes/{ID}`.
const QUOTE: usize = 1;
/// `POST /transfers` sent → its 202 received.
const PREPARE: usize = 2;
/// `POST /transfers` sent → the payee receives the forwarded `POST`.
const FORWARD: usize = 3;
/// The payee's `PUT /transfers/{ID}` sent → its 200 received.
const FULFIL: usize = 4;
/// The payee's `PUT` sent → the payer receives the commit notification.
const NOTIFY: usize = 5;
/// The payee's `POST /transactionRequests` sent → the payee receives the
/// payer's `PUT /transactionRequests/{ID}`.
const TRANSACTION_REQUEST: usize = 6;
/// The flow's first request sent → the payer receives its last callback.
const E2E: usize = 7;

/// What one iteration of a virtual user does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Flow {
    /// `POST /transfers` → commit notification.
    Transfer,
    /// `GET /parties/MSISDN/{ID}` → `PUT /parties/MSISDN/{ID}`.
    Lookup,
    /// `POST /quotes` → `PUT /quotes/{ID}`.
    Quote,
    /// Quote, then transfer (the payer knows the payee's DFSP).
    #[value(name = "quote+transfer")]
    QuoteTransfer,
    /// Lookup, then quote, then transfer.
    #[value(name = "discovery+quote+transfer")]
    DiscoveryQuoteTransfer,
    /// `POST /transactionRequests` (payee → payer) → `PUT
    /// /transactionRequests/{ID}`.
    #[value(name = "transaction-request")]
    TransactionRequest,
}

impl Flow {
    fn name(self) -> &'static str {
        match self {
            Flow::Transfer => "transfer",
            Flow::Lookup => "lookup",
            Flow::Quote => "quote",
            Flow::QuoteTransfer => "quote+transfer",
            Flow::DiscoveryQuoteTransfer => "discovery+quote+transfer",
            Flow::TransactionRequest => "transaction-request",
        }
    }

    fn looks_up(self) -> bool {
        matches!(self, Flow::Lookup | Flow::DiscoveryQuoteTransfer)
    }

    fn quotes(self) -> bool {
        matches!(
            self,
            Flow::Quote | Flow::QuoteTransfer | Flow::DiscoveryQuoteTransfer
        )
    }

    fn transfers(self) -> bool {
        matches!(
            self,
            Flow::Transfer | Flow::QuoteTransfer | Flow::DiscoveryQuoteTransfer
        )
    }

    fn requests_to_pay(self) -> bool {
        self == Flow::TransactionRequest
    }

    /// Requests of different resources one flow makes in turn.
    fn stage_count(self) -> usize {
        usize::from(self.looks_up())
            + usize::from(self.quotes())
            + usize::from(self.transfers())
            + usize::from(self.requests_to_pay())
    }

    /// Needs the discovery endpoints and registered parties.
    fn discovers(self) -> bool {
        self != Flow::Transfer
    }

    /// The legs this flow times, in the order they happen.
    fn legs(self) -> Vec<usize> {
        let mut legs = Vec::new();
        if self.looks_up() {
            legs.push(LOOKUP);
        }
        if self.quotes() {
            legs.push(QUOTE);
        }
        if self.transfers() {
            legs.extend([PREPARE, FORWARD, FULFIL, NOTIFY]);
        }
        if self.requests_to_pay() {
            legs.push(TRANSACTION_REQUEST);
        }
        legs.push(E2E);
        legs
    }

    /// What the throughput counts.
    fn unit(self) -> &'static str {
        match self {
            Flow::Transfer => "transfers",
            Flow::Lookup => "lookups",
            Flow::Quote => "quotes",
            Flow::QuoteTransfer | Flow::DiscoveryQuoteTransfer => "flows",
            Flow::TransactionRequest => "transaction requests",
        }
    }
}

/// `--load`: what the levels of --stages count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LoadArg {
    /// Virtual users.
    Closed,
    /// Arrivals per second.
    Open,
}

/// What a run does: one plan of levels over time, or the breakpoint search.
#[derive(Clone, Debug, PartialEq)]
enum Shape {
    Plan(Plan),
    Breakpoint(Breakpoint),
}

/// The run the flags ask for.
fn shape_of(args: &BenchTransfersArgs) -> Result<Shape, String> {
    let positive = |value: f64, flag: &str| {
        if value.is_finite() && value > 0.0 {
            Ok(value)
        } else {
            Err(format!("{flag} must be a positive number"))
        }
    };
    if let Some(duration) = args.duration {
        positive(duration, "--duration")?;
    }
    if let Some(warmup) = args.warmup {
        if !(warmup.is_finite() && warmup >= 0.0) {
            return Err("--warmup must be zero or a positive number of seconds".into());
        }
    }
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0 && rate <= 1_000_000.0) {
            return Err(
                "--rate must be a positive number of flows per second, at most 1,000,000".into(),
            );
        }
    }
    if !(args.null_hub_baseline.is_finite() && args.null_hub_baseline >= 0.0) {
        return Err("--null-hub-baseline must be zero or a positive number of seconds".into());
    }
    let load = match (args.load, args.rate) {
        (Some(LoadArg::Open), _) | (None, Some(_)) => Load::Open,
        (Some(LoadArg::Closed), _) | (None, None) => Load::Closed,
    };
    let level = match load {
        Load::Open => args.rate.unwrap_or(1000.0),
        Load::Closed => f64::from(args.concurrency),
    };
    let shape = match (args.profile, &args.stages) {
        (Some(Profile::Breakpoint), _) => {
            let multi_stage = args.flow.stage_count() > 1;
            Shape::Breakpoint(Breakpoint {
                start_rate_per_s: args.rate.unwrap_or(500.0),
                growth: 1.25,
                step_warmup_s: 1.0,
                step_s: positive(
                    args.duration.unwrap_or(args.step_duration),
                    "--step-duration",
                )?,
                max_p99_ms: positive(
                    args.max_p99_ms
                        .unwrap_or(if multi_stage { 100.0 } else { 50.0 }),
                    "--max-p99-ms",
                )?,
                max_error_pct: args.max_error_pct.max(0.0),
                min_completed_share: 0.9,
                max_steps: 40,
            })
        }
        (Some(profile), _) => Shape::Plan(Plan::profile(
            profile,
            load,
            level,
            args.duration.unwrap_or(profile.default_duration_s()),
        )),
        (None, Some(stages)) => {
            let stages = crate::bench_load::parse_stages(stages)
                .map_err(|error| format!("--stages: {error}"))?;
            Shape::Plan(
                Plan::staged(load, stages, args.warmup.unwrap_or(0.0))
                    .map_err(|error| format!("--stages: {error}"))?,
            )
        }
        (None, None) => Shape::Plan(Plan::constant(
            load,
            level,
            args.warmup.unwrap_or(2.0),
            match args.count {
                // Ended by the count, not the clock.
                Some(_) => COUNT_RUN_LIMIT_S,
                None => args.duration.unwrap_or(10.0),
            },
        )),
    };
    if let Shape::Plan(plan) = &shape {
        if plan.load == Load::Closed && plan.max_target() > 100_000.0 {
            return Err("at most 100,000 virtual users".into());
        }
        if plan.max_target() <= 0.0 {
            return Err("the load never rises above zero".into());
        }
    }
    Ok(shape)
}

/// The null hub's throughput, measured in this run for the ratio.
struct Baseline {
    throughput_per_s: f64,
    /// The null hub's CPU per flow, when it ran as a child process.
    us_per_flow: Option<f64>,
    note: String,
}

pub fn run(args: BenchTransfersArgs) -> anyhow::Result<ExitCode> {
    let shape = shape_of(&args).map_err(anyhow::Error::msg)?;
    let started_at = SystemTime::now();
    let chatty = !args.json && !args.quiet;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kasi-bench")
        .build()
        .context("cannot start the async runtime")?;

    let baseline = if args.null_hub || args.null_hub_baseline == 0.0 {
        None
    } else {
        let users = match &shape {
            Shape::Plan(plan) if plan.load == Load::Closed => plan.max_target().ceil(),
            _ => 64.0,
        };
        let plan = Plan::constant(Load::Closed, users, 1.0, args.null_hub_baseline);
        if chatty {
            eprintln!(
                "measuring the null hub first ({} s, {users} users): the harness's own ceiling...",
                args.null_hub_baseline
            );
        }
        let (api, admin, mut process) = start_null_hub(&runtime, args.null_hub_in_process)?;
        let baseline_args = BenchTransfersArgs {
            null_hub: true,
            quiet: true,
            json: true,
            callback_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            // The baseline runs for its own duration.
            count: None,
            ..args.clone()
        };
        let pid = process.as_ref().map(|process| process.child.id());
        let report = runtime.block_on(drive(&baseline_args, &Shape::Plan(plan), &api, &admin, pid));
        if let Some(process) = process.as_mut() {
            process.stop()?;
        }
        let report = report?;
        if report.failed() > 0 {
            bail!(
                "the null-hub baseline failed {} flows: the harness cannot run here",
                report.failed()
            );
        }
        let throughput_per_s = report.throughput();
        let null_hub_us_per_flow = report
            .run
            .cpu
            .and_then(|cpu| cpu.hub_s)
            .map(|hub_s| hub_s * 1e6 / (report.run.stats.completed_in_window.max(1) as f64));
        if chatty {
            eprintln!("null hub: {throughput_per_s:.0} {}/s", args.flow.unit());
        }
        Some(Baseline {
            throughput_per_s,
            us_per_flow: null_hub_us_per_flow,
            note: format!(
                "closed loop, same flow, {users} users, {} s, measured just before, null hub {}",
                args.null_hub_baseline,
                if args.null_hub_in_process {
                    "in this process"
                } else {
                    "in its own process"
                }
            ),
        })
    };

    let mut embedded = None;
    let (api, admin, target) = match (&args.api, &args.admin) {
        _ if args.null_hub => {
            if chatty {
                eprintln!("starting the null hub (no hub work: the harness's own ceiling)...");
            }
            let (api, admin, process) = start_null_hub(&runtime, args.null_hub_in_process)?;
            embedded = process;
            (api, admin, "null-hub")
        }
        (Some(api), Some(admin)) => (
            api.trim_end_matches('/').to_string(),
            admin.trim_end_matches('/').to_string(),
            "external",
        ),
        _ => {
            if chatty {
                eprintln!("starting an embedded hub...");
            }
            let hub = EmbeddedHub::start(HubProcess::Kasi {
                hub_name: &args.hub_name,
                trace_sample_every: args.trace_sample_every,
            })?;
            let urls = (
                format!("http://{}", hub.api),
                format!("http://{}", hub.admin),
            );
            embedded = Some(hub);
            (urls.0, urls.1, "embedded")
        }
    };

    let hub_pid = embedded.as_ref().map(|hub| hub.child.id());
    let outcome = runtime.block_on(drive(&args, &shape, &api, &admin, hub_pid));
    // The callback server keeps answering (on the runtime's threads) while
    // the hub delivers what it still has queued and stops.
    let mut hub_problem = None;
    let mut hub_warnings = 0;
    if let Some(mut hub) = embedded.take() {
        match hub.stop() {
            Ok(status) if status.success() => {}
            Ok(status) => hub_problem = Some(format!("the embedded hub exited with {status}")),
            Err(error) => hub_problem = Some(format!("{error:#}")),
        }
        hub_warnings = hub.warnings.load(Ordering::Relaxed);
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    let mut report = outcome?;
    report.target = target;
    report.api = api;
    report.hub_warnings = (target == "embedded").then_some(hub_warnings);
    report.hub_problem = hub_problem;
    report.baseline = baseline;
    report.started_at = started_at;

    let json = report.to_json(&args);
    if args.json {
        println!("{json}");
    } else {
        report.print(&args);
        // The hub's stage table and waterfalls are long: they go into the
        // report folder's report.md, and to the terminal only when there is
        // no folder to read them in.
        let sections = crate::bench_report::hub_sections(&json);
        if args.no_report && !sections.trim().is_empty() {
            println!("\n{}", sections.trim_end());
        }
    }
    if !args.no_report {
        let dir = match &args.out {
            Some(dir) => dir.clone(),
            None => std::path::PathBuf::from("kasi-bench").join(format!(
                "{}-{}",
                fspiop::format_date_time(millis_since_epoch(started_at))
                    .replace([':', '.'], "")
                    .trim_end_matches('Z'),
                args.flow.name().replace('+', "-")
            )),
        };
        crate::bench_report::write_folder(&dir, &json)?;
        if !args.json {
            println!(
                "  report: {} (report.md: the hub's stage table and sampled waterfalls)",
                dir.display()
            );
        }
    }
    Ok(
        if report.failed() == 0
            && report.hub_problem.is_none()
            && (report.positions.net_zero || report.positions.not_applicable)
        {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

/// The null hub, as a child process or in this one: its API and admin
/// URLs, and the process to stop.
fn start_null_hub(
    runtime: &tokio::runtime::Runtime,
    in_process: bool,
) -> anyhow::Result<(String, String, Option<EmbeddedHub>)> {
    if in_process {
        let hub = runtime.block_on(crate::null_hub::start())?;
        Ok((
            format!("http://{}", hub.api),
            format!("http://{}", hub.admin),
            None,
        ))
    } else {
        let hub = EmbeddedHub::start(HubProcess::Null)?;
        Ok((
            format!("http://{}", hub.api),
            format!("http://{}", hub.admin),
            Some(hub),
        ))
    }
}

fn millis_since_epoch(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

// ------------------------------------------------------------ the embedded hub

/// Which hub a child process runs.
enum HubProcess<'a> {
    /// `kasi serve` on a temporary data directory.
    Kasi {
        hub_name: &'a str,
        trace_sample_every: Option<u32>,
    },
    /// `kasi null-hub`.
    Null,
}

/// A hub as a child process: `kasi serve` on a temporary data directory,
/// or the null hub.
struct EmbeddedHub {
    child: Child,
    api: SocketAddr,
    admin: SocketAddr,
    /// WARN and ERROR lines the hub logged (they are also copied to stderr).
    warnings: Arc<AtomicU64>,
    drain: Option<std::thread::JoinHandle<()>>,
    stopped: bool,
    /// `kasi serve`'s store, removed with the hub.
    _data_dir: Option<tempfile::TempDir>,
}

impl EmbeddedHub {
    fn start(process: HubProcess) -> anyhow::Result<EmbeddedHub> {
        let exe = std::env::current_exe().context("cannot find this executable")?;
        let mut command = std::process::Command::new(exe);
        let mut store = None;
        match process {
            HubProcess::Kasi {
                hub_name,
                trace_sample_every,
            } => {
                let data_dir = tempfile::Builder::new()
                    .prefix("kasi-bench-hub-")
                    .tempdir()
                    .context("cannot make a temp dir")?;
                command
                    .arg("serve")
                    .arg("--data-dir")
                    .arg(data_dir.path())
                    .args(["--api-listen", "127.0.0.1:0"])
                    .args(["--admin-listen", "127.0.0.1:0"])
                    .args(["--hub-name", hub_name]);
                if let Some(every) = trace_sample_every {
                    command.args(["--trace-sample-every", &every.to_string()]);
                }
                store = Some(data_dir);
            }
            HubProcess::Null => {
                command.arg("null-hub");
            }
        }
        let mut child = command
            .args(["--log-level", "warn,kasi::serve=info,kasi::null_hub=info"])
            // Flags give every setting that matters; a config file of the
            // caller's must not change the hub under test.
            .env_remove("KASI_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start the embedded hub")?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let warnings = Arc::new(AtomicU64::new(0));
        let (announce, announced) = mpsc::channel();
        let counter = warnings.clone();
        let drain = std::thread::Builder::new()
            .name("kasi-hub-log".into())
            .spawn(move || drain_hub_log(stderr, announce, &counter))
            .context("cannot start a thread")?;
        let mut hub = EmbeddedHub {
            child,
            api: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin: SocketAddr::from(([127, 0, 0, 1], 0)),
            warnings,
            drain: Some(drain),
            stopped: false,
            _data_dir: store,
        };
        match announced.recv_timeout(HUB_START_TIMEOUT) {
            Ok(Ok((api, admin))) => {
                hub.api = api;
                hub.admin = admin;
                Ok(hub)
            }
            Ok(Err(log)) => {
                let status = hub.child.wait().ok();
                hub.stopped = true;
                bail!(
                    "the embedded hub exited ({}) before serving; its last log lines:\n{log}",
                    status.map_or("unknown status".to_string(), |s| s.to_string())
                )
            }
            Err(_) => bail!(
                "the embedded hub did not say where it serves within {} s",
                HUB_START_TIMEOUT.as_secs()
            ),
        }
    }

    /// SIGTERM, then waits for the exit (SIGKILL if it takes too long).
    fn stop(&mut self) -> anyhow::Result<ExitStatus> {
        self.stopped = true;
        let pid = self.child.id().to_string();
        let signalled = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .context("cannot run kill")?;
        if !signalled.success() {
            let _ = self.child.kill();
        }
        let deadline = Instant::now() + HUB_STOP_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!(
                    "the embedded hub did not stop within {} s of SIGTERM; killed it",
                    HUB_STOP_TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(drain) = self.drain.take() {
            let _ = drain.join();
        }
        Ok(status)
    }
}

impl Drop for EmbeddedHub {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads the hub's log until it closes: announces the `serving` line's
/// addresses (or, if the hub ends first, its last lines), and copies every
/// warning and error to our stderr.
fn drain_hub_log(
    stderr: std::process::ChildStderr,
    announce: mpsc::Sender<Result<(SocketAddr, SocketAddr), String>>,
    warnings: &AtomicU64,
) {
    let mut recent: Vec<String> = Vec::new();
    let mut serving = false;
    for line in std::io::BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        let line = strip_ansi(&line);
        if !serving {
            if let Some(addresses) = parse_serving_line(&line) {
                serving = true;
                let _ = announce.send(Ok(addresses));
                continue;
            }
            if recent.len() == 20 {
                recent.remove(0);
            }
            recent.push(line.clone());
        }
        if line.contains(" WARN ") || line.contains(" ERROR ") {
            warnings.fetch_add(1, Ordering::Relaxed);
            eprintln!("hub: {line}");
        }
    }
    if !serving {
        let _ = announce.send(Err(recent.join("\n")));
    }
}

/// The API and admin addresses of `kasi serve`'s `serving api=… admin=…` line.
fn parse_serving_line(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let rest = &line[line.find("serving ")? + "serving ".len()..];
    let (mut api, mut admin) = (None, None);
    for token in rest.split_whitespace() {
        if let Some(value) = token.strip_prefix("api=") {
            api = value.parse().ok();
        } else if let Some(value) = token.strip_prefix("admin=") {
            admin = value.parse().ok();
        }
    }
    Some((api?, admin?))
}

/// Removes terminal colour sequences (`ESC [ … letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

// -------------------------------------------------------------- transfer ids

/// FSPIOP `CorrelationId`s from a per-run random-ish prefix and a 62-bit
/// counter, so that ids never repeat within a run and are unlikely to meet
/// another run's on the same hub. Even counters are lowercase v4 UUIDs and
/// odd ones ULIDs, as Mojaloop's Testing Toolkit sends by default: a hub
/// must take both, and every run checks that it does.
struct IdGen {
    /// `xxxxxxxx-xxxx-4xxx-`.
    prefix: String,
    /// The first 13 of a ULID's 26 characters.
    ulid_prefix: String,
    next: AtomicU64,
}

/// Crockford's base32, as ULIDs use it.
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
/// A ULID's characters after [`IdGen::ulid_prefix`]: 65 bits, room for
/// the counter.
const ULID_COUNTER_CHARS: usize = 13;

impl IdGen {
    fn new(seed: u64) -> IdGen {
        let bits = splitmix64(seed) & ((1 << 60) - 1);
        let ulid_bits = splitmix64(seed ^ 0x5EED);
        // The first character stays within 0-7, as the ULID specification
        // asks (the whole value fits 128 bits).
        let ulid_prefix = (0..ULID_COUNTER_CHARS)
            .map(|index| {
                let digit = (ulid_bits >> (5 * index)) & if index == 0 { 7 } else { 31 };
                char::from(CROCKFORD[digit as usize])
            })
            .collect();
        IdGen {
            prefix: format!(
                "{:08x}-{:04x}-4{:03x}-",
                bits >> 28,
                (bits >> 12) & 0xffff,
                bits & 0xfff
            ),
            ulid_prefix,
            next: AtomicU64::new(1),
        }
    }

    fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The id of counter value `n` (below 2^62): a UUID whose variant
    /// nibble and last two groups carry it when even, a ULID whose last 13
    /// characters do when odd.
    fn format(&self, n: u64) -> String {
        if n % 2 == 1 {
            let mut id = self.ulid_prefix.clone();
            id.extend(
                (0..ULID_COUNTER_CHARS)
                    .rev()
                    .map(|index| char::from(CROCKFORD[((n >> (5 * index)) & 31) as usize])),
            );
            return id;
        }
        let variant = 0x8000 | ((n >> 48) & 0x3fff);
        format!("{}{variant:04x}-{:012x}", self.prefix, n & 0xffff_ffff_ffff)
    }

    /// The counter value of one of this run's ids; `None` for any other text.
    fn counter_of(&self, id: &str) -> Option<u64> {
        if let Some(counter) = id.strip_prefix(self.ulid_prefix.as_str()) {
            if counter.len() != ULID_COUNTER_CHARS {
                return None;
            }
            let n = counter.bytes().try_fold(0u64, |n, byte| {
                let digit = CROCKFORD.iter().position(|&c| c == byte)?;
                n.checked_mul(32)?.checked_add(digit as u64)
            })?;
            return (n % 2 == 1).then_some(n);
        }
        let rest = id.strip_prefix(self.prefix.as_str())?;
        let (variant, node) = rest.split_once('-')?;
        let lower_hex = |s: &str| s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if variant.len() != 4 || node.len() != 12 || !lower_hex(variant) || !lower_hex(node) {
            return None;
        }
        let variant = u64::from_str_radix(variant, 16).ok()?;
        if variant & 0xc000 != 0x8000 {
            return None;
        }
        let n = ((variant & 0x3fff) << 48) | u64::from_str_radix(node, 16).ok()?;
        (n % 2 == 0).then_some(n)
    }
}

fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Mixes the pid, the time and a stack address (ASLR) into a seed.
fn run_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let local = 0u8;
    let address = &local as *const u8 as usize as u64;
    splitmix64(nanos ^ u64::from(std::process::id()).rotate_left(32) ^ address)
}

fn now_ms() -> i64 {
    millis_since_epoch(SystemTime::now())
}

// ------------------------------------------------------------------ parties

/// One of the parties the simulated DFSPs register: the `index`-th MSISDN
/// of DFSP `dfsp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PartyRef {
    dfsp: u32,
    index: u32,
}

/// The MSISDN of `party` in the run tagged `tag` (below 10^6): `2`, the tag,
/// then the DFSP and party indexes in four digits each (both below 10,000):
/// 15 digits, an E.164 number, and no other run's (likely).
fn party_identifier(tag: u32, party: PartyRef) -> String {
    debug_assert!(tag < 1_000_000 && party.dfsp < 10_000 && party.index < 10_000);
    format!("2{tag:06}{:04}{:04}", party.dfsp, party.index)
}

/// The party [`party_identifier`] made `text` from, if it did for `tag`.
fn parse_party_identifier(tag: u32, text: &str) -> Option<PartyRef> {
    let rest = text.strip_prefix(&format!("2{tag:06}"))?;
    if rest.len() != 8 || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(PartyRef {
        dfsp: rest[..4].parse().ok()?,
        index: rest[4..].parse().ok()?,
    })
}

/// A `POST /transactionRequests` body: `payee_party` of `payee_fsp` asks
/// `payer_party` of `payer_fsp` to pay `amount`.
fn transaction_request_body(
    request_id: &str,
    (payee_fsp, payee_party): (&str, &str),
    (payer_fsp, payer_party): (&str, &str),
    amount: &str,
) -> String {
    format!(
        concat!(
            r#"{{"transactionRequestId":"{}","#,
            r#""payee":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"{}","fspId":"{}"}}}},"#,
            r#""payer":{{"partyIdType":"MSISDN","partyIdentifier":"{}","fspId":"{}"}},"#,
            r#""amount":{{"currency":"{}","amount":"{}"}},"#,
            r#""transactionType":{{"scenario":"PAYMENT","initiator":"PAYEE","initiatorType":"BUSINESS"}}}}"#
        ),
        request_id, payee_party, payee_fsp, payer_party, payer_fsp, CURRENCY, amount
    )
}

/// A `POST /transfers` body.
fn prepare_body(transfer_id: &str, payer: &str, payee: &str, amount: &str) -> String {
    format!(
        concat!(
            r#"{{"transferId":"{}","payerFsp":"{}","payeeFsp":"{}","#,
            r#""amount":{{"amount":"{}","currency":"{}"}},"#,
            r#""ilpPacket":"{}","condition":"{}","expiration":"{}"}}"#
        ),
        transfer_id,
        payer,
        payee,
        amount,
        CURRENCY,
        ILP_PACKET,
        CONDITION,
        fspiop::format_date_time(now_ms() + 60_000),
    )
}

// ------------------------------------------------------------------ the run

/// How a stage ended, as its payer's callback handler saw it.
enum Completion {
    /// The payer received the stage's last callback at this instant.
    Done(Instant),
    /// The error's key (`HTTP 400`, `3303`, …) and a description.
    Failed(String, String),
}

/// Why a stage did not end well.
#[derive(Debug, PartialEq)]
enum Failure {
    /// The error's key and a description.
    Error(String, String),
    Timeout,
}

impl Completion {
    fn into_result(self) -> Result<Instant, Failure> {
        match self {
            Completion::Done(at) => Ok(at),
            Completion::Failed(key, description) => Err(Failure::Error(key, description)),
        }
    }
}

/// A transfer between its `POST` and its end.
struct Pending {
    payer: u32,
    payee: u32,
    post_sent: Instant,
    fulfil_sent: Option<Instant>,
    /// Its flow started inside the measured window.
    measured: bool,
    done: oneshot::Sender<Completion>,
}

/// A payer waiting for a lookup's or a quote's answer.
struct Waiter {
    /// Tells the waiters of one key apart.
    ticket: u64,
    payer: u32,
    payee: u32,
    done: oneshot::Sender<Completion>,
}

/// Payers waiting for callbacks, by key, oldest first: lookups by (payer,
/// party), since `PUT /parties/{Type}/{ID}` carries nothing else that says
/// which lookup it answers, and quotes by quote id. An answer completes the
/// oldest waiter of its key (two users looking up one party at once from
/// one DFSP cannot be told apart; the round robin over the parties makes
/// it rare).
struct Waiters<K> {
    map: Mutex<HashMap<K, VecDeque<Waiter>>>,
}

impl<K: Eq + Hash> Waiters<K> {
    fn new() -> Waiters<K> {
        Waiters {
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, VecDeque<Waiter>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, key: K, waiter: Waiter) {
        self.lock().entry(key).or_default().push_back(waiter);
    }

    /// (payer, payee) of the oldest waiter of `key`.
    fn peek(&self, key: &K) -> Option<(u32, u32)> {
        let map = self.lock();
        let waiter = map.get(key)?.front()?;
        Some((waiter.payer, waiter.payee))
    }

    /// Removes the oldest waiter of `key`, if `payer` is its payer.
    fn take_oldest(&self, key: &K, payer: Option<u32>) -> Option<Waiter> {
        let mut map = self.lock();
        let queue = map.get_mut(key)?;
        if payer.is_some_and(|payer| queue.front().is_some_and(|w| w.payer != payer)) {
            return None;
        }
        let waiter = queue.pop_front();
        if queue.is_empty() {
            map.remove(key);
        }
        waiter
    }

    /// Removes the waiter holding `ticket`.
    fn take(&self, key: &K, ticket: u64) -> Option<Waiter> {
        let mut map = self.lock();
        let queue = map.get_mut(key)?;
        let position = queue.iter().position(|waiter| waiter.ticket == ticket)?;
        let waiter = queue.remove(position);
        if queue.is_empty() {
            map.remove(key);
        }
        waiter
    }

    /// Ends the oldest waiter of `key` as failed; false if there is none.
    fn fail(&self, key: &K, error_key: String, description: String) -> bool {
        match self.take_oldest(key, None) {
            Some(waiter) => {
                let _ = waiter.done.send(Completion::Failed(error_key, description));
                true
            }
            None => false,
        }
    }
}

/// The measured window: after the warm-up, until the load stops.
#[derive(Clone, Copy)]
struct Window {
    from: Instant,
    until: Instant,
}

impl Window {
    fn contains(&self, at: Instant) -> bool {
        at >= self.from && at < self.until
    }
}

#[derive(Default)]
struct ErrorTally {
    count: u64,
    first: String,
}

struct Stats {
    legs: Vec<Histogram<u64>>,
    /// Flows that ended well inside the window (the throughput).
    completed_in_window: u64,
    /// Flows started inside the window that ended well.
    completed: u64,
    /// Flows started (window or not).
    started: u64,
    started_in_window: u64,
    /// Flows ended, however (for the progress line).
    ended: u64,
    /// Flows ended well, window or not (for the progress line).
    ended_ok: u64,
    /// End-to-end latencies (µs) of the flows ended well since the progress
    /// line last read them.
    recent_e2e: Histogram<u64>,
    /// Failed flows by `{stage} {error key}`.
    errors: BTreeMap<String, ErrorTally>,
    /// Timed-out flows by stage.
    timeouts: BTreeMap<&'static str, u64>,
    /// Transfer `PUT`s that completed nothing: the payee's confirmation copies.
    confirmations: u64,
    /// `PUT /parties` and `PUT /quotes` to a payer that completed nothing
    /// (its stage had already ended).
    late_answers: u64,
    /// Error callbacks for stages already ended (or not ours).
    late_errors: u64,
    /// Forwarded requests (prepares, lookups, quotes) for nothing pending.
    strays: u64,
    /// Requests to the callback server at paths no DFSP registered.
    unexpected: u64,
}

impl Stats {
    fn new() -> Stats {
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

    fn record(&mut self, leg: usize, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.legs[leg].saturating_record(us.max(1));
    }

    fn error(&mut self, key: String, description: String) {
        let tally = self.errors.entry(key).or_default();
        tally.count += 1;
        if tally.first.is_empty() {
            tally.first = description;
        }
    }

    /// How one iteration of a virtual user, started at `started`, ended.
    fn flow_ended(
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

    fn timeouts(&self) -> u64 {
        self.timeouts.values().sum()
    }
}

struct Shared {
    client: HttpClient,
    api: String,
    /// The hub's admin address (its `/metrics`, when it has one).
    admin: String,
    /// The latest scrape of the hub's gauges, for the monitor's next point.
    hub_gauges: Mutex<Option<HubGauges>>,
    flow: Flow,
    ids: IdGen,
    names: Vec<String>,
    /// DFSP name → index into `names`.
    index_of: HashMap<String, u32>,
    /// Parties per DFSP.
    parties: u32,
    /// This run's tag in the party identifiers.
    party_tag: u32,
    /// Per payee DFSP: the lookups' round robin over its parties.
    next_party: Vec<AtomicU64>,
    pending: Mutex<HashMap<u64, Pending>>,
    /// Lookups by (payer, party looked up).
    lookups: Waiters<(u32, PartyRef)>,
    /// Quotes by the quote id's counter.
    quotes: Waiters<u64>,
    /// Transaction requests by the request id's counter; the waiter's
    /// `payer` is the DFSP that asked (the payee) and waits for the answer.
    transaction_requests: Waiters<u64>,
    /// Batch registrations waiting for `PUT /participants/{requestId}`, by
    /// the request id's counter: the answer's body, or the error.
    registrations: Mutex<HashMap<u64, oneshot::Sender<Result<Bytes, String>>>>,
    tickets: AtomicU64,
    stats: Mutex<Stats>,
    window: Mutex<Option<Window>>,
    /// The hub's process, when it is a child of this one (its CPU time is
    /// then measured over the window).
    hub_pid: Option<u32>,
    /// `--count`: flows still to start in the window.
    budget: Option<AtomicU64>,
    /// No more flows start (the count is reached).
    stop: std::sync::atomic::AtomicBool,
    /// Payees' answers (fulfils, `PUT /parties`, `PUT /quotes`) sent and not
    /// yet answered.
    answers_in_flight: AtomicU64,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stats(&self) -> MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn registrations(
        &self,
    ) -> MutexGuard<'_, HashMap<u64, oneshot::Sender<Result<Bytes, String>>>> {
        self.registrations.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn window(&self) -> Option<Window> {
        *self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a flow due at `at` may start: always in the warm-up; in the
    /// window, while `--count` allows.
    fn admit(&self, at: Instant) -> bool {
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        let Some(budget) = &self.budget else {
            return true;
        };
        if !self.measured(at) {
            return true;
        }
        let taken = budget.fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
            left.checked_sub(1)
        });
        match taken {
            Ok(1) => {
                self.stop.store(true, Ordering::Release);
                true
            }
            Ok(_) => true,
            Err(_) => {
                self.stop.store(true, Ordering::Release);
                false
            }
        }
    }

    fn measured(&self, at: Instant) -> bool {
        self.window().is_some_and(|w| w.contains(at))
    }

    fn dfsp(&self, name: &str) -> Option<u32> {
        self.index_of.get(name).copied()
    }

    fn party_id(&self, party: PartyRef) -> String {
        party_identifier(self.party_tag, party)
    }

    /// A party identifier of this run, of one of its DFSPs (registered or
    /// not: the hub's 3204 for a party nobody holds must still reach the
    /// lookup that asked).
    fn party(&self, identifier: &str) -> Option<PartyRef> {
        parse_party_identifier(self.party_tag, identifier)
            .filter(|party| party.dfsp < self.names.len() as u32)
    }

    /// The next party of `payee` to look up.
    fn next_party_of(&self, payee: u32) -> PartyRef {
        let n = self.next_party[payee as usize].fetch_add(1, Ordering::Relaxed);
        PartyRef {
            dfsp: payee,
            index: (n % u64::from(self.parties)) as u32,
        }
    }

    /// Ends a pending transfer as failed; its payer records the error.
    fn fail(&self, counter: u64, key: String, description: String) -> bool {
        let removed = self.pending().remove(&counter);
        match removed {
            Some(pending) => {
                let _ = pending.done.send(Completion::Failed(key, description));
                true
            }
            None => false,
        }
    }
}

async fn drive(
    args: &BenchTransfersArgs,
    shape: &Shape,
    api: &str,
    admin: &str,
    hub_pid: Option<u32>,
) -> anyhow::Result<Report> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    let client: HttpClient = Client::builder(TokioExecutor::new())
        // Below the time a hub keeps an idle keep-alive connection open
        // (kasi's --header-timeout-ms, 10 s; Node's keepAliveTimeout, 5 s,
        // for Mojaloop's services), so the pool never reuses a connection
        // the hub is closing (with 20 s, the likely cause of POSTs reset now
        // and then: "transport" errors, 2 in 720,000 transfers at 2,000/s).
        .pool_idle_timeout(Duration::from_secs(4))
        .pool_timer(TokioTimer::new())
        .build(connector);
    let seed = run_seed();
    // Short, and different for each run against one hub.
    let prefix = format!("b{}{:03x}d", std::process::id(), (seed >> 40) & 0xfff);
    let names: Vec<String> = (0..args.dfsps).map(|i| format!("{prefix}{i}")).collect();
    let index_of = names
        .iter()
        .enumerate()
        .map(|(i, name)| (name.clone(), i as u32))
        .collect();
    let shared = Arc::new(Shared {
        client,
        api: api.to_string(),
        admin: admin.to_string(),
        hub_gauges: Mutex::new(None),
        flow: args.flow,
        ids: IdGen::new(seed),
        index_of,
        parties: args.parties,
        party_tag: (splitmix64(seed ^ 0x5eed) % 1_000_000) as u32,
        next_party: (0..args.dfsps).map(|_| AtomicU64::new(0)).collect(),
        names,
        pending: Mutex::new(HashMap::new()),
        lookups: Waiters::new(),
        quotes: Waiters::new(),
        transaction_requests: Waiters::new(),
        registrations: Mutex::new(HashMap::new()),
        tickets: AtomicU64::new(0),
        stats: Mutex::new(Stats::new()),
        window: Mutex::new(None),
        hub_pid,
        budget: args.count.map(AtomicU64::new),
        stop: std::sync::atomic::AtomicBool::new(false),
        answers_in_flight: AtomicU64::new(0),
    });

    let listener = tokio::net::TcpListener::bind(args.callback_listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (--callback-listen)",
                args.callback_listen
            )
        })?;
    let mut callback_addr = listener.local_addr()?;
    if callback_addr.ip().is_unspecified() {
        callback_addr.set_ip([127, 0, 0, 1].into());
    }
    let app = callbacks(shared.clone());
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).tcp_nodelay(true).await {
            eprintln!("kasi: the callback server stopped: {error}");
        }
    });

    if !args.json && !args.quiet {
        let parties = if args.flow.discovers() {
            format!(", {} parties each", args.parties)
        } else {
            String::new()
        };
        eprintln!(
            "onboarding {} DFSPs ({}0..{parties}) through {admin}, callbacks at http://{callback_addr}",
            args.dfsps, prefix
        );
    }
    let onboarding = Instant::now();
    onboard(&shared, admin, &args.hub_name, callback_addr).await?;
    let onboarding = onboarding.elapsed();

    // Whether the hub keeps per-stage statistics (kasi's; other hubs answer
    // 404); each run clears and reads them over its own window.
    let hub_admin = reset_hub_stages(&shared, admin).await.then_some(admin);
    let (run, breakpoint) = match shape {
        Shape::Plan(plan) => (run_plan(&shared, args, plan, 0.0, hub_admin).await?, None),
        Shape::Breakpoint(search) => {
            let (run, result) = search_breakpoint(&shared, args, search, hub_admin).await?;
            (run, Some(result))
        }
    };
    let positions = if args.null_hub {
        PositionCheck {
            not_applicable: true,
            ..PositionCheck::default()
        }
    } else {
        check_positions(&shared, admin).await
    };
    let (hub_stages, waterfalls) = run.hub_view.clone().unwrap_or_default();

    Ok(Report {
        run,
        onboarding,
        positions,
        target: "",
        api: String::new(),
        hub_warnings: None,
        hub_problem: None,
        baseline: None,
        started_at: SystemTime::now(),
        hub_stages,
        waterfalls,
        breakpoint,
    })
}

/// One second of a run.
#[derive(Clone, Debug, PartialEq)]
struct TimelinePoint {
    /// Seconds since the load started (of the whole search, for breakpoint).
    t_s: f64,
    phase: &'static str,
    /// The planned level then: virtual users or arrivals per second.
    target: f64,
    /// Flows started, completed and failed in this second.
    started: u64,
    completed: u64,
    errors: u64,
    /// End-to-end latency of the flows completed in this second.
    p50_ms: f64,
    p99_ms: f64,
    in_flight: u64,
    /// The hub's gauges from its `/metrics`, scraped in this second (None
    /// when the scrape failed or was late).
    hub: Option<HubGauges>,
    /// This process's resident memory (Linux).
    harness_rss_bytes: Option<u64>,
}

/// What a scrape of the hub's `GET /metrics` says about its memory and its
/// callbacks; each figure absent when the hub does not expose it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct HubGauges {
    /// `process_resident_memory_bytes`.
    rss_bytes: Option<f64>,
    /// Callbacks queued or being sent, over every destination
    /// (`kasi_callbacks_queued` + `kasi_callbacks_in_flight`).
    callback_backlog: Option<f64>,
    /// `kasi_ledger_transfers_in_memory`.
    transfers_in_memory: Option<f64>,
}

impl HubGauges {
    fn parse(exposition: &str) -> HubGauges {
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

    fn is_empty(&self) -> bool {
        *self == HubGauges::default()
    }
}

/// The sum of metric `name`'s samples over all their labels, in a
/// Prometheus or OpenMetrics text exposition: None when the exposition
/// has no such metric; 0 when it declares it (`# TYPE`) with no samples
/// (a gauge by destination before any destination).
fn metric_sum(exposition: &str, name: &str) -> Option<f64> {
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
fn own_rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok().filter(|page| *page > 0)?)
}

/// How long a scrape of the hub's `/metrics` may take before its second's
/// sample is given up (it is then missing, not late).
const SCRAPE_TIMEOUT: Duration = Duration::from_millis(900);

/// Once a second, half a second before each of the monitor's ticks: the
/// hub's gauges from its admin `/metrics`, left in `shared.hub_gauges` for
/// the monitor's next point. On its own task, off the flows' path; a failed
/// or empty scrape leaves nothing (that second has no sample).
async fn scrape_hub(shared: Arc<Shared>, started: Instant) {
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
            admin_request(&shared.client, Method::GET, &url, None),
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

/// The statistics of one plan's run.
struct RunResult {
    stats: Stats,
    /// The hub's stage table and sampled traces over the window, if it
    /// keeps them.
    hub_view: Option<(Option<Value>, Vec<Value>)>,
    /// A `--count` run: its throughput counts the flows it started.
    counted: bool,
    /// CPU time spent during the window.
    cpu: Option<CpuUse>,
    timeline: Vec<TimelinePoint>,
    /// From the end of the load until the last flow ended.
    drain: Duration,
    window_s: f64,
    plan: Plan,
    /// Latencies (ms, sorted) of the settlement window closes made while
    /// measuring (`--close-window-every`).
    window_closes: Vec<f64>,
}

impl RunResult {
    /// Flows completed per second of the window (for a `--count` run, the
    /// counted flows over the time they took: warm-up flows that ended in
    /// it are not theirs).
    fn throughput(&self) -> f64 {
        let completed = if self.counted {
            self.stats.completed
        } else {
            self.stats.completed_in_window
        };
        completed as f64 / self.window_s
    }

    fn failed(&self) -> u64 {
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
async fn run_plan(
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
    while (shared.answers_in_flight.load(Ordering::SeqCst) > 0 || !shared.pending().is_empty())
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
async fn close_windows(
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
        let Ok(body) = admin_call(&shared.client, Method::GET, &url, None, false).await else {
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
            &shared.client,
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

/// CPU seconds (user and system) of the hub's process and of this one over
/// a window.
#[derive(Clone, Copy, Debug, PartialEq)]
struct CpuUse {
    hub_s: Option<f64>,
    harness_s: f64,
}

/// `/proc`'s unit of CPU time (USER_HZ, 100 on every Linux build we run).
const CLOCK_TICKS_PER_S: f64 = 100.0;

/// CPU time (user and system, in s) of process `pid`; `None` where `/proc`
/// cannot say (not Linux, or the process is gone).
fn process_cpu_seconds(pid: u32) -> Option<f64> {
    parse_cpu_seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// CPU time (user and system, in s) of this process, all threads.
fn own_cpu_seconds() -> Option<f64> {
    parse_cpu_seconds(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// utime + stime from a `/proc/<pid>/stat` line: fields 14 and 15, counted
/// after the command name, which is in parentheses and may hold anything.
fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ticks = |index: usize| fields.get(index)?.parse::<u64>().ok();
    Some((ticks(11)? + ticks(12)?) as f64 / CLOCK_TICKS_PER_S)
}

/// The breakpoint search: open-loop steps at rising rates until one breaks
/// the thresholds. The run reported is the last step that held (or the
/// first, if none did); every step is in the breakpoint section.
async fn search_breakpoint(
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
async fn closed_loop(
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
async fn open_loop(
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

/// Once a second: a point of the timeline, and (unless --quiet) a progress
/// line on stderr: elapsed time, flows completed (and their rate over the
/// last second), the p99 end-to-end latency of the flows that ended in the
/// last second, flows in flight, and failures.
async fn monitor(
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

/// Clears the hub's per-stage statistics so they cover this run only;
/// whether the hub keeps any (kasi's `/stats/stages`; other hubs answer 404).
async fn reset_hub_stages(shared: &Shared, admin: &str) -> bool {
    let url = format!("{admin}/stats/stages");
    matches!(
        admin_request(&shared.client, Method::DELETE, &url, None).await,
        Ok((status, _)) if status.is_success()
    )
}

/// The hub's per-stage table since the reset (`GET /stats/stages`).
async fn read_hub_stages(shared: &Shared, admin: &str) -> Option<Value> {
    let url = format!("{admin}/stats/stages");
    let (status, body) = admin_request(&shared.client, Method::GET, &url, None)
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
const WATERFALLS: usize = 5;

/// A few of the hub's sampled transfer traces (`GET /stats/traces`): the
/// fastest, the median, the p90, the p99 and the slowest of those whose
/// every phase finished.
async fn read_waterfalls(shared: &Shared, admin: &str) -> Vec<Value> {
    let url = format!("{admin}/stats/traces");
    let Ok((status, body)) = admin_request(&shared.client, Method::GET, &url, None).await else {
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
fn trace_total_us(trace: &Value) -> f64 {
    trace["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|span| span["end_us"].as_f64())
        .fold(0.0, f64::max)
}

fn pick_waterfalls(traces: Vec<Value>) -> Vec<Value> {
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

/// One iteration of a virtual user (or one arrival of the open loop): its
/// flow, from its first request to its last callback; records how it
/// ended. Its end-to-end latency counts from `started`: now for a virtual
/// user, the scheduled start for an arrival.
async fn iteration(shared: &Shared, started: Instant, payer_party: PartyRef, payee: u32) {
    let measured = shared.measured(started);
    {
        let mut stats = shared.stats();
        stats.started += 1;
        stats.started_in_window += u64::from(measured);
    }
    let outcome = run_flow(shared, payer_party, payee, measured).await;
    let window = shared.window();
    shared
        .stats()
        .flow_ended(started, measured, window, outcome);
}

/// The stages of the flow in turn; the instant the payer received the last
/// stage's callback, or the stage that failed and how.
async fn run_flow(
    shared: &Shared,
    payer_party: PartyRef,
    payee: u32,
    measured: bool,
) -> Result<Instant, (&'static str, Failure)> {
    let flow = shared.flow;
    let payer = payer_party.dfsp;
    let transaction = shared.ids.next();
    let amount = (1 + transaction % 100).to_string();
    let payee_party = flow.discovers().then(|| shared.next_party_of(payee));
    let mut ended = None;
    if let (true, Some(party)) = (flow.looks_up(), payee_party) {
        ended = Some(
            lookup(shared, payer, party, measured)
                .await
                .map_err(|failure| ("lookup", failure))?,
        );
    }
    if let (true, Some(party)) = (flow.quotes(), payee_party) {
        ended = Some(
            quote(shared, payer_party, party, transaction, &amount, measured)
                .await
                .map_err(|failure| ("quote", failure))?,
        );
    }
    if let (true, Some(party)) = (flow.requests_to_pay(), payee_party) {
        ended = Some(
            transaction_request(shared, party, payer_party, &amount, measured)
                .await
                .map_err(|failure| ("transaction request", failure))?,
        );
    }
    if flow.transfers() {
        ended = Some(
            transfer(shared, payer, payee, transaction, &amount, measured)
                .await
                .map_err(|failure| ("transfer", failure))?,
        );
    }
    Ok(ended.expect("every flow has a stage"))
}

/// Sends a stage's request and waits for its end: the payer's callback
/// (`outcome`), an error, or the deadline. `forget` removes the stage's
/// waiter and says whether it was still there (if not, a handler took it
/// and sent the outcome); `on_accepted` runs when the request is accepted
/// (202).
async fn await_stage(
    shared: &Shared,
    request: Result<Request<Full<Bytes>>, String>,
    deadline: tokio::time::Instant,
    mut outcome: oneshot::Receiver<Completion>,
    forget: impl Fn() -> bool,
    on_accepted: impl FnOnce(),
) -> Result<Instant, Failure> {
    let answered = match request {
        Ok(request) => tokio::time::timeout_at(deadline, send(&shared.client, request)).await,
        Err(error) => Ok(Err(("request".into(), error))),
    };
    let result = match answered {
        Err(_) => None,
        Ok(Err((key, description))) => Some(Completion::Failed(key, description)),
        Ok(Ok((status, _))) if status == StatusCode::ACCEPTED => {
            on_accepted();
            match tokio::time::timeout_at(deadline, &mut outcome).await {
                Ok(Ok(completion)) => return completion.into_result(),
                Ok(Err(_)) => Some(Completion::Failed(
                    "lost".into(),
                    "the stage was dropped without an outcome".into(),
                )),
                Err(_) => None,
            }
        }
        Ok(Ok((status, body))) => Some(Completion::Failed(
            format!("HTTP {}", status.as_u16()),
            describe_error_body(&body),
        )),
    };
    // Whoever removes the waiter decides the outcome: a handler that got
    // there first has sent it.
    match result {
        Some(completion) => {
            forget();
            completion.into_result()
        }
        None if forget() => Err(Failure::Timeout),
        None => match outcome.try_recv() {
            Ok(completion) => completion.into_result(),
            Err(_) => Err(Failure::Timeout),
        },
    }
}

/// `GET /parties/MSISDN/{ID}` from `payer`, until the payer receives the
/// holder's `PUT /parties/MSISDN/{ID}`.
async fn lookup(
    shared: &Shared,
    payer: u32,
    party: PartyRef,
    measured: bool,
) -> Result<Instant, Failure> {
    let request = fspiop_request(
        Method::GET,
        &format!("{}/parties/MSISDN/{}", shared.api, shared.party_id(party)),
        Api::Parties,
        &shared.names[payer as usize],
        None,
        String::new(),
    );
    let (done, outcome) = oneshot::channel();
    let ticket = shared.tickets.fetch_add(1, Ordering::Relaxed);
    let key = (payer, party);
    let sent = Instant::now();
    shared.lookups.insert(
        key,
        Waiter {
            ticket,
            payer,
            payee: party.dfsp,
            done,
        },
    );
    let deadline = tokio::time::Instant::from_std(sent + STAGE_TIMEOUT);
    let ended = await_stage(
        shared,
        request,
        deadline,
        outcome,
        || shared.lookups.take(&key, ticket).is_some(),
        || {},
    )
    .await?;
    if measured {
        shared
            .stats()
            .record(LOOKUP, ended.saturating_duration_since(sent));
    }
    Ok(ended)
}

/// `POST /quotes` from `payer_party`'s DFSP to `payee_party`'s, until the
/// payer receives the payee's `PUT /quotes/{ID}`. The transaction id is
/// `transaction`'s, as the transfer's will be.
async fn quote(
    shared: &Shared,
    payer_party: PartyRef,
    payee_party: PartyRef,
    transaction: u64,
    amount: &str,
    measured: bool,
) -> Result<Instant, Failure> {
    let (payer, payee) = (payer_party.dfsp, payee_party.dfsp);
    let counter = shared.ids.next();
    let payer_name = &shared.names[payer as usize];
    let payee_name = &shared.names[payee as usize];
    let body = quote_post_body(
        &shared.ids.format(counter),
        &shared.ids.format(transaction),
        (payer_name, &shared.party_id(payer_party)),
        (payee_name, &shared.party_id(payee_party)),
        (amount, CURRENCY),
    );
    let request = fspiop_request(
        Method::POST,
        &format!("{}/quotes", shared.api),
        Api::Quotes,
        payer_name,
        Some(payee_name),
        body,
    );
    let asked = Asked {
        waiters: &shared.quotes,
        counter,
        asker: payer,
        answerer: payee,
        leg: QUOTE,
    };
    ask(shared, request, asked, measured).await
}

/// `POST /transactionRequests` from `payee_party`'s DFSP to
/// `payer_party`'s, until the payee receives the payer's
/// `PUT /transactionRequests/{ID}`.
async fn transaction_request(
    shared: &Shared,
    payee_party: PartyRef,
    payer_party: PartyRef,
    amount: &str,
    measured: bool,
) -> Result<Instant, Failure> {
    let (payee, payer) = (payee_party.dfsp, payer_party.dfsp);
    let counter = shared.ids.next();
    let payee_name = &shared.names[payee as usize];
    let payer_name = &shared.names[payer as usize];
    let body = transaction_request_body(
        &shared.ids.format(counter),
        (payee_name, &shared.party_id(payee_party)),
        (payer_name, &shared.party_id(payer_party)),
        amount,
    );
    let request = fspiop_request(
        Method::POST,
        &format!("{}/transactionRequests", shared.api),
        Api::TransactionRequests,
        payee_name,
        Some(payer_name),
        body,
    );
    let asked = Asked {
        waiters: &shared.transaction_requests,
        counter,
        asker: payee,
        answerer: payer,
        leg: TRANSACTION_REQUEST,
    };
    ask(shared, request, asked, measured).await
}

/// A request one DFSP makes of another, answered by a `PUT` to the asker.
struct Asked<'s> {
    /// Where the answer's handler finds the asker, by `counter` (the
    /// request id's).
    waiters: &'s Waiters<u64>,
    counter: u64,
    asker: u32,
    answerer: u32,
    /// The leg that times it.
    leg: usize,
}

/// Sends `request` and waits for its answer; records the leg if measured.
async fn ask(
    shared: &Shared,
    request: Result<Request<Full<Bytes>>, String>,
    asked: Asked<'_>,
    measured: bool,
) -> Result<Instant, Failure> {
    let Asked {
        waiters,
        counter,
        asker,
        answerer,
        leg,
    } = asked;
    let (done, outcome) = oneshot::channel();
    let ticket = shared.tickets.fetch_add(1, Ordering::Relaxed);
    let sent = Instant::now();
    waiters.insert(
        counter,
        Waiter {
            ticket,
            payer: asker,
            payee: answerer,
            done,
        },
    );
    let deadline = tokio::time::Instant::from_std(sent + STAGE_TIMEOUT);
    let ended = await_stage(
        shared,
        request,
        deadline,
        outcome,
        || waiters.take(&counter, ticket).is_some(),
        || {},
    )
    .await?;
    if measured {
        shared
            .stats()
            .record(leg, ended.saturating_duration_since(sent));
    }
    Ok(ended)
}

/// `POST /transfers` (id: `counter`'s) until the payer's commit notification.
async fn transfer(
    shared: &Shared,
    payer: u32,
    payee: u32,
    counter: u64,
    amount: &str,
    measured: bool,
) -> Result<Instant, Failure> {
    let payer_name = &shared.names[payer as usize];
    let payee_name = &shared.names[payee as usize];
    let body = prepare_body(&shared.ids.format(counter), payer_name, payee_name, amount);
    let request = fspiop_request(
        Method::POST,
        &format!("{}/transfers", shared.api),
        Api::Transfers,
        payer_name,
        Some(payee_name),
        body,
    );
    let (done, outcome) = oneshot::channel();
    let sent = Instant::now();
    shared.pending().insert(
        counter,
        Pending {
            payer,
            payee,
            post_sent: sent,
            fulfil_sent: None,
            measured,
            done,
        },
    );
    let deadline = tokio::time::Instant::from_std(sent + STAGE_TIMEOUT);
    await_stage(
        shared,
        request,
        deadline,
        outcome,
        || shared.pending().remove(&counter).is_some(),
        || {
            if measured {
                shared.stats().record(PREPARE, sent.elapsed());
            }
        },
    )
    .await
}

// --------------------------------------------------------- the DFSP callbacks

fn callbacks(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/:dfsp/transfers", post(on_prepare))
        .route(
            "/:dfsp/transfers/:id",
            put(on_transfer_put).patch(|| async { StatusCode::OK }),
        )
        .route("/:dfsp/transfers/:id/error", put(on_error))
        .route(
            "/:dfsp/parties/:id_type/:id",
            get(on_party_get).put(on_party_put),
        )
        .route("/:dfsp/parties/:id_type/:id/error", put(on_party_error))
        .route("/:dfsp/quotes", post(on_quote_post))
        .route("/:dfsp/quotes/:id", put(on_quote_put))
        .route("/:dfsp/quotes/:id/error", put(on_quote_error))
        .route("/:dfsp/transactionRequests", post(on_transaction_request))
        .route(
            "/:dfsp/transactionRequests/:id",
            put(on_transaction_request_put),
        )
        .route(
            "/:dfsp/transactionRequests/:id/error",
            put(on_transaction_request_error),
        )
        .route("/:dfsp/participants/:id", put(on_registered))
        // `{requestId}/error`, or a single party's `{Type}/{ID}`.
        .route("/:dfsp/participants/:id/:more", put(on_participants_put))
        .route("/:dfsp/participants/:id/:more/error", put(on_unexpected))
        .fallback(on_unexpected)
        .with_state(shared)
}

/// Anything the bench never asks for (a single party registration's answer,
/// an unknown path): counted, and refused when it is not a known path.
async fn on_unexpected(State(shared): State<Arc<Shared>>, method: Method) -> StatusCode {
    shared.stats().unexpected += 1;
    if method == Method::PUT {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    }
}

/// Runs a payee's answer in the background, counted in
/// `answers_in_flight` until it is answered.
fn spawn_answer<F>(shared: &Arc<Shared>, answer: impl FnOnce(Arc<Shared>) -> F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    shared.answers_in_flight.fetch_add(1, Ordering::SeqCst);
    let future = answer(shared.clone());
    let shared = shared.clone();
    tokio::spawn(async move {
        future.await;
        shared.answers_in_flight.fetch_sub(1, Ordering::SeqCst);
    });
}

/// The FSPIOP-Source of a forwarded request, as one of our DFSPs.
fn source_dfsp(shared: &Shared, headers: &HeaderMap) -> Option<u32> {
    headers
        .get("fspiop-source")
        .and_then(|value| value.to_str().ok())
        .and_then(|name| shared.dfsp(name))
}

// ----- transfers

#[derive(Deserialize)]
struct ForwardedPrepare<'a> {
    #[serde(rename = "transferId")]
    transfer_id: &'a str,
}

/// The payee receives the forwarded prepare: answers at once, then fulfils.
async fn on_prepare(
    State(shared): State<Arc<Shared>>,
    Path(dfsp): Path<String>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let counter = serde_json::from_slice::<ForwardedPrepare<'_>>(&body)
        .ok()
        .and_then(|prepare| shared.ids.counter_of(prepare.transfer_id));
    let found = counter.and_then(|counter| {
        let pending = shared.pending();
        let transfer = pending.get(&counter)?;
        Some((
            counter,
            transfer.payer,
            transfer.payee,
            transfer.measured,
            received.duration_since(transfer.post_sent),
        ))
    });
    let Some((counter, payer, payee, measured, forward)) = found else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    if shared.names[payee as usize] != dfsp {
        shared.fail(
            counter,
            "misrouted".into(),
            format!(
                "the prepare for {} reached {dfsp}",
                shared.names[payee as usize]
            ),
        );
        return StatusCode::OK;
    }
    if measured {
        shared.stats().record(FORWARD, forward);
    }
    spawn_answer(&shared, |shared| async move {
        fulfil(&shared, counter, payer, payee, measured).await;
    });
    StatusCode::OK
}

/// The payee's `PUT /transfers/{ID}` with the fulfilment.
async fn fulfil(shared: &Shared, counter: u64, payer: u32, payee: u32, measured: bool) {
    let id = shared.ids.format(counter);
    let body = fulfil_body(now_ms());
    let request = fspiop_request(
        Method::PUT,
        &format!("{}/transfers/{id}", shared.api),
        Api::Transfers,
        &shared.names[payee as usize],
        Some(&shared.names[payer as usize]),
        body,
    );
    let request = match request {
        Ok(request) => request,
        Err(error) => {
            shared.fail(counter, "request".into(), error);
            return;
        }
    };
    let sent = Instant::now();
    match shared.pending().get_mut(&counter) {
        Some(transfer) => transfer.fulfil_sent = Some(sent),
        None => return,
    }
    match send(&shared.client, request).await {
        Ok((status, _)) if status == StatusCode::OK => {
            if measured {
                shared.stats().record(FULFIL, sent.elapsed());
            }
        }
        Ok((status, body)) => {
            shared.fail(
                counter,
                format!("HTTP {} (fulfil)", status.as_u16()),
                describe_error_body(&body),
            );
        }
        Err((key, description)) => {
            shared.fail(counter, format!("{key} (fulfil)"), description);
        }
    }
}

#[derive(Deserialize)]
struct TransferPut<'a> {
    #[serde(rename = "transferState", default)]
    transfer_state: Option<&'a str>,
}

/// The payer's commit notification, or the payee's confirmation copy.
async fn on_transfer_put(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let Some(counter) = shared.ids.counter_of(&id) else {
        shared.stats().confirmations += 1;
        return StatusCode::OK;
    };
    let transfer = {
        let mut pending = shared.pending();
        match pending.get(&counter) {
            Some(transfer) if shared.names[transfer.payer as usize] == dfsp => {
                pending.remove(&counter)
            }
            _ => None,
        }
    };
    let Some(transfer) = transfer else {
        shared.stats().confirmations += 1;
        return StatusCode::OK;
    };
    let state = serde_json::from_slice::<TransferPut<'_>>(&body)
        .ok()
        .and_then(|put| put.transfer_state.map(str::to_string));
    if state.as_deref() != Some("COMMITTED") {
        let _ = transfer.done.send(Completion::Failed(
            format!("state {}", state.as_deref().unwrap_or("missing")),
            format!("the payer was told {:?}", String::from_utf8_lossy(&body)),
        ));
        return StatusCode::OK;
    }
    if transfer.measured {
        if let Some(fulfil_sent) = transfer.fulfil_sent {
            shared
                .stats()
                .record(NOTIFY, received.saturating_duration_since(fulfil_sent));
        }
    }
    let _ = transfer.done.send(Completion::Done(received));
    StatusCode::OK
}

/// An error callback, to the payer or the payee: the transfer failed.
async fn on_error(
    State(shared): State<Arc<Shared>>,
    Path((_dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let (key, description) = error_of(&body);
    let failed = shared
        .ids
        .counter_of(&id)
        .is_some_and(|counter| shared.fail(counter, key, description));
    if !failed {
        shared.stats().late_errors += 1;
    }
    StatusCode::OK
}

// ----- parties

/// The payee receives a forwarded `GET /parties/MSISDN/{ID}`: answers at
/// once, then sends `PUT /parties/MSISDN/{ID}` to the requester (the
/// forwarded FSPIOP-Source) through the hub.
async fn on_party_get(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id_type, id)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> StatusCode {
    let (Some(requester), Some(party), Some(holder)) = (
        source_dfsp(&shared, &headers),
        shared.party(&id),
        shared.dfsp(&dfsp),
    ) else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    if id_type != "MSISDN" || party.dfsp != holder {
        shared.lookups.fail(
            &(requester, party),
            "misrouted".into(),
            format!(
                "the lookup of {id_type}/{id}, held by {}, reached {dfsp}",
                shared.names[party.dfsp as usize]
            ),
        );
        return StatusCode::OK;
    }
    spawn_answer(&shared, |shared| async move {
        let request = fspiop_request(
            Method::PUT,
            &format!("{}/parties/MSISDN/{id}", shared.api),
            Api::Parties,
            &shared.names[holder as usize],
            Some(&shared.names[requester as usize]),
            party_put_body(&id, &shared.names[holder as usize]),
        );
        let failure = match request {
            Err(error) => Some(("request (party put)".to_string(), error)),
            Ok(request) => match send(&shared.client, request).await {
                Ok((status, _)) if status == StatusCode::OK => None,
                Ok((status, body)) => Some((
                    format!("HTTP {} (party put)", status.as_u16()),
                    describe_error_body(&body),
                )),
                Err((key, description)) => Some((format!("{key} (party put)"), description)),
            },
        };
        if let Some((key, description)) = failure {
            shared.lookups.fail(&(requester, party), key, description);
        }
    });
    StatusCode::OK
}

/// The payer receives the holder's `PUT /parties/MSISDN/{ID}`: its lookup
/// is done (if the answer names the party and its holder).
async fn on_party_put(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, _id_type, id)): Path<(String, String, String)>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let waiter = shared
        .party(&id)
        .zip(shared.dfsp(&dfsp))
        .and_then(|(party, payer)| shared.lookups.take_oldest(&(payer, party), None));
    let Some(waiter) = waiter else {
        shared.stats().late_answers += 1;
        return StatusCode::OK;
    };
    let holder = &shared.names[waiter.payee as usize];
    let completion = match fspiop::check_party_put(&body) {
        Ok(info) if info.fsp.is_some_and(|fsp| fsp.as_str() == holder) => {
            Completion::Done(received)
        }
        Ok(info) => Completion::Failed(
            "wrong party".into(),
            format!(
                "the answer for {id} names {:?}, not {holder}",
                info.fsp.map(|fsp| fsp.to_string())
            ),
        ),
        Err(error) => Completion::Failed(
            "invalid party".into(),
            format!("{} {}", error.code.0, error.description),
        ),
    };
    let _ = waiter.done.send(completion);
    StatusCode::OK
}

/// `PUT /parties/MSISDN/{ID}/error` to the payer: its lookup failed.
async fn on_party_error(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, _id_type, id)): Path<(String, String, String)>,
    body: Bytes,
) -> StatusCode {
    let (key, description) = error_of(&body);
    let failed = shared
        .party(&id)
        .zip(shared.dfsp(&dfsp))
        .is_some_and(|(party, payer)| shared.lookups.fail(&(payer, party), key, description));
    if !failed {
        shared.stats().late_errors += 1;
    }
    StatusCode::OK
}

// ----- quotes

#[derive(Deserialize)]
struct ForwardedQuote<'a> {
    #[serde(rename = "quoteId")]
    quote_id: &'a str,
    #[serde(borrow)]
    amount: QuoteAmount<'a>,
}

#[derive(Deserialize)]
struct QuoteAmount<'a> {
    amount: &'a str,
    currency: &'a str,
}

/// The payee receives a forwarded `POST /quotes`: answers at once, then
/// sends `PUT /quotes/{ID}` to the payer (the forwarded FSPIOP-Source)
/// through the hub.
async fn on_quote_post(
    State(shared): State<Arc<Shared>>,
    Path(dfsp): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let Ok(quote) = serde_json::from_slice::<ForwardedQuote<'_>>(&body) else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    let counter = shared.ids.counter_of(quote.quote_id);
    let (Some(counter), Some(requester)) = (counter, source_dfsp(&shared, &headers)) else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    let Some((_, payee)) = shared.quotes.peek(&counter) else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    if shared.names[payee as usize] != dfsp {
        shared.quotes.fail(
            &counter,
            "misrouted".into(),
            format!(
                "the quote for {} reached {dfsp}",
                shared.names[payee as usize]
            ),
        );
        return StatusCode::OK;
    }
    let answer = quote_put_body(
        quote.amount.amount,
        quote.amount.currency,
        now_ms() + 60_000,
    );
    let request = fspiop_request(
        Method::PUT,
        &format!("{}/quotes/{}", shared.api, shared.ids.format(counter)),
        Api::Quotes,
        &shared.names[payee as usize],
        Some(&shared.names[requester as usize]),
        answer,
    );
    send_answer(
        &shared,
        |shared| &shared.quotes,
        counter,
        "quote put",
        request,
    );
    StatusCode::OK
}

/// Sends an answering DFSP's `PUT` in the background; if it is refused,
/// the asker's waiter of `counter` fails.
fn send_answer(
    shared: &Arc<Shared>,
    waiters: fn(&Shared) -> &Waiters<u64>,
    counter: u64,
    what: &'static str,
    request: Result<Request<Full<Bytes>>, String>,
) {
    spawn_answer(shared, |shared| async move {
        let failure = match request {
            Err(error) => Some((format!("request ({what})"), error)),
            Ok(request) => match send(&shared.client, request).await {
                Ok((status, _)) if status == StatusCode::OK => None,
                Ok((status, body)) => Some((
                    format!("HTTP {} ({what})", status.as_u16()),
                    describe_error_body(&body),
                )),
                Err((key, description)) => Some((format!("{key} ({what})"), description)),
            },
        };
        if let Some((key, description)) = failure {
            waiters(&shared).fail(&counter, key, description);
        }
    });
}

/// The payer receives the payee's `PUT /quotes/{ID}`: its quote is done (if
/// the answer is a valid quote with the condition the transfer will use).
async fn on_quote_put(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let waiter = shared
        .ids
        .counter_of(&id)
        .zip(shared.dfsp(&dfsp))
        .and_then(|(counter, payer)| shared.quotes.take_oldest(&counter, Some(payer)));
    let Some(waiter) = waiter else {
        shared.stats().late_answers += 1;
        return StatusCode::OK;
    };
    let completion = match fspiop::parse_quote_put(&body) {
        Ok(quote) if ledger::Condition::from_base64url(CONDITION) == Some(quote.condition) => {
            Completion::Done(received)
        }
        Ok(_) => Completion::Failed(
            "wrong condition".into(),
            format!("the quote {id} does not carry the payee's condition"),
        ),
        Err(error) => Completion::Failed(
            "invalid quote".into(),
            format!("{} {}", error.code.0, error.description),
        ),
    };
    let _ = waiter.done.send(completion);
    StatusCode::OK
}

/// `PUT /quotes/{ID}/error`, to the payer: its quote failed.
async fn on_quote_error(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    answered_with_error(&shared, &shared.quotes, &dfsp, &id, &body)
}

/// An error callback to `dfsp` about its request `id`: the asker's stage
/// failed.
fn answered_with_error(
    shared: &Shared,
    waiters: &Waiters<u64>,
    dfsp: &str,
    id: &str,
    body: &[u8],
) -> StatusCode {
    let (key, description) = error_of(body);
    let waiter = shared
        .ids
        .counter_of(id)
        .zip(shared.dfsp(dfsp))
        .and_then(|(counter, asker)| waiters.take_oldest(&counter, Some(asker)));
    match waiter {
        Some(waiter) => {
            let _ = waiter.done.send(Completion::Failed(key, description));
        }
        None => shared.stats().late_errors += 1,
    }
    StatusCode::OK
}

// ----- transaction requests

#[derive(Deserialize)]
struct ForwardedTransactionRequest<'a> {
    #[serde(rename = "transactionRequestId")]
    transaction_request_id: &'a str,
}

/// The payer receives a forwarded `POST /transactionRequests`: answers at
/// once, then tells the payee (the forwarded FSPIOP-Source) through the hub
/// that it received it, `PUT /transactionRequests/{ID}`.
async fn on_transaction_request(
    State(shared): State<Arc<Shared>>,
    Path(dfsp): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let forwarded = serde_json::from_slice::<ForwardedTransactionRequest<'_>>(&body);
    let counter = forwarded
        .ok()
        .and_then(|request| shared.ids.counter_of(request.transaction_request_id));
    let known = counter.and_then(|counter| {
        let (_, payer) = shared.transaction_requests.peek(&counter)?;
        Some((counter, payer, source_dfsp(&shared, &headers)?))
    });
    let Some((counter, payer, requester)) = known else {
        shared.stats().strays += 1;
        return StatusCode::OK;
    };
    if shared.names[payer as usize] != dfsp {
        let description = format!(
            "the transaction request for {} reached {dfsp}",
            shared.names[payer as usize]
        );
        shared
            .transaction_requests
            .fail(&counter, "misrouted".into(), description);
        return StatusCode::OK;
    }
    let request = fspiop_request(
        Method::PUT,
        &format!(
            "{}/transactionRequests/{}",
            shared.api,
            shared.ids.format(counter)
        ),
        Api::TransactionRequests,
        &dfsp,
        Some(&shared.names[requester as usize]),
        r#"{"transactionRequestState":"RECEIVED"}"#.to_string(),
    );
    send_answer(
        &shared,
        |shared| &shared.transaction_requests,
        counter,
        "transaction request put",
        request,
    );
    StatusCode::OK
}

/// The payee receives the payer's `PUT /transactionRequests/{ID}`: its
/// request is done if the payer says it received it.
async fn on_transaction_request_put(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let received = Instant::now();
    let waiter = shared
        .ids
        .counter_of(&id)
        .zip(shared.dfsp(&dfsp))
        .and_then(|(counter, payee)| {
            shared
                .transaction_requests
                .take_oldest(&counter, Some(payee))
        });
    let Some(waiter) = waiter else {
        shared.stats().late_answers += 1;
        return StatusCode::OK;
    };
    let completion = match fspiop::parse_transaction_request_put(&body) {
        Ok(answer) if answer.state == "RECEIVED" => Completion::Done(received),
        Ok(answer) => Completion::Failed(
            "unexpected state".into(),
            format!("the transaction request {id} is {}", answer.state),
        ),
        Err(error) => Completion::Failed(
            "invalid answer".into(),
            format!("{} {}", error.code.0, error.description),
        ),
    };
    let _ = waiter.done.send(completion);
    StatusCode::OK
}

/// `PUT /transactionRequests/{ID}/error`, to the payee: its request failed.
async fn on_transaction_request_error(
    State(shared): State<Arc<Shared>>,
    Path((dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    answered_with_error(&shared, &shared.transaction_requests, &dfsp, &id, &body)
}

// ----- the participant registry

/// `PUT /participants/{requestId}`: a batch registration's answer.
async fn on_registered(
    State(shared): State<Arc<Shared>>,
    Path((_dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let waiting = shared
        .ids
        .counter_of(&id)
        .and_then(|counter| shared.registrations().remove(&counter));
    match waiting {
        Some(done) => {
            let _ = done.send(Ok(body));
        }
        None => shared.stats().unexpected += 1,
    }
    StatusCode::OK
}

/// `PUT /participants/{requestId}/error` (a batch registration failed), or
/// `PUT /participants/{Type}/{ID}` (a single registration, never asked).
async fn on_participants_put(
    State(shared): State<Arc<Shared>>,
    Path((_dfsp, id, more)): Path<(String, String, String)>,
    body: Bytes,
) -> StatusCode {
    let waiting = (more == "error")
        .then(|| shared.ids.counter_of(&id))
        .flatten()
        .and_then(|counter| shared.registrations().remove(&counter));
    match waiting {
        Some(done) => {
            let _ = done.send(Err(describe_error_body(&body)));
        }
        None => shared.stats().unexpected += 1,
    }
    StatusCode::OK
}

// ---------------------------------------------------------------- onboarding

async fn onboard(
    shared: &Arc<Shared>,
    admin: &str,
    hub_name: &str,
    callback_addr: SocketAddr,
) -> anyhow::Result<()> {
    dfsp::onboard_hub(&shared.client, admin, hub_name, CURRENCY).await?;

    // A few DFSPs at a time: each step waits for the hub's durable commit.
    let permits = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = tokio::task::JoinSet::new();
    for name in shared.names.clone() {
        let shared = shared.clone();
        let admin = admin.to_string();
        let permits = permits.clone();
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            onboard_dfsp(&shared, &admin, &name, callback_addr).await
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.context("onboarding panicked")??;
    }
    Ok(())
}

async fn onboard_dfsp(
    shared: &Shared,
    admin: &str,
    name: &str,
    callback_addr: SocketAddr,
) -> anyhow::Result<()> {
    let funds_id = shared.ids.format(shared.ids.next());
    dfsp::onboard_dfsp(
        &shared.client,
        &dfsp::Onboarding {
            admin,
            name,
            currency: CURRENCY,
            callback_addr,
            discovers: shared.flow.discovers(),
            funds_id: &funds_id,
            existing_ok: false,
        },
    )
    .await?;
    if shared.flow.discovers() {
        register_parties(shared, name).await?;
    }
    Ok(())
}

/// `name` registers its `--parties` MSISDNs with one batch
/// `POST /participants` and waits for `PUT /participants/{requestId}`,
/// which must register every one.
async fn register_parties(shared: &Shared, name: &str) -> anyhow::Result<()> {
    let dfsp = shared.dfsp(name).context("not one of our DFSPs")?;
    let identifiers: Vec<String> = (0..shared.parties)
        .map(|index| shared.party_id(PartyRef { dfsp, index }))
        .collect();
    let counter = shared.ids.next();
    let request_id = shared.ids.format(counter);
    let url = format!("{}/participants", shared.api);
    let request = fspiop_request(
        Method::POST,
        &url,
        Api::Participants,
        name,
        None,
        participants_batch_body(&request_id, name, &identifiers, CURRENCY),
    )
    .map_err(|error| anyhow::anyhow!("POST {url}: {error}"))?;
    let (done, answer) = oneshot::channel();
    shared.registrations().insert(counter, done);
    let sent = tokio::time::timeout(REGISTRATION_TIMEOUT, send(&shared.client, request))
        .await
        .with_context(|| {
            format!(
                "POST {url} ({name}): no answer within {} s",
                REGISTRATION_TIMEOUT.as_secs()
            )
        })
        .and_then(|sent| {
            sent.map_err(|(_, description)| anyhow::anyhow!("POST {url} ({name}): {description}"))
        });
    let (status, body) = match sent {
        Ok(answer) => answer,
        Err(error) => {
            shared.registrations().remove(&counter);
            return Err(error);
        }
    };
    if status != StatusCode::ACCEPTED {
        shared.registrations().remove(&counter);
        bail!(
            "POST {url} ({name}): {} {}",
            status.as_u16(),
            describe_error_body(&body)
        );
    }
    let answer = match tokio::time::timeout(REGISTRATION_TIMEOUT, answer).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => bail!("the registration of {name}'s parties was dropped"),
        Err(_) => {
            shared.registrations().remove(&counter);
            bail!(
                "{name} got no PUT /participants/{request_id} within {} s of registering its parties",
                REGISTRATION_TIMEOUT.as_secs()
            )
        }
    };
    match answer {
        Ok(body) => match batch_answer_problem(&body, identifiers.len()) {
            None => Ok(()),
            Some(problem) => bail!("registering {name}'s parties: {problem}"),
        },
        Err(error) => {
            bail!("registering {name}'s parties: PUT /participants/{request_id}/error: {error}")
        }
    }
}

// ---------------------------------------------------------------- positions

/// Whether the run's DFSPs' positions net to zero once every transfer has
/// ended: every transfer moves its amount from the payer's position to the
/// payee's, so anything else is money created, lost, or still reserved.
#[derive(Debug, Default)]
struct PositionCheck {
    /// The sum of the DFSPs' `CURRENCY` positions, exact.
    sum: Option<ledger::Amount>,
    net_zero: bool,
    /// Why the positions could not be read.
    problem: Option<String>,
    /// No ledger to check (the null hub): neither net zero nor not.
    not_applicable: bool,
}

#[derive(Deserialize)]
struct PositionRow {
    #[serde(default)]
    currency: Option<String>,
    /// Exact: a JSON number (or string) as the hub wrote it.
    value: Box<serde_json::value::RawValue>,
}

/// A position's `value` as an exact decimal: a JSON number or string,
/// possibly negative; no floats.
fn parse_position_value(raw: &str) -> Result<ledger::Amount, String> {
    let text = raw.trim();
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    ledger::Amount::parse_signed(text).map_err(|error| format!("position {raw:?}: {error}"))
}

/// The exact sum of `values` (JSON position values).
fn sum_positions<'a>(values: impl IntoIterator<Item = &'a str>) -> Result<ledger::Amount, String> {
    values
        .into_iter()
        .try_fold(ledger::Amount::ZERO, |sum, raw| {
            sum.checked_add(parse_position_value(raw)?)
                .ok_or_else(|| "the positions' sum overflows".to_string())
        })
}

/// Reads `GET /participants/{name}/positions` of every DFSP of the run.
async fn read_positions(shared: &Arc<Shared>, admin: &str) -> Result<ledger::Amount, String> {
    let permits = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = tokio::task::JoinSet::new();
    for name in shared.names.clone() {
        let (shared, permits) = (shared.clone(), permits.clone());
        let url = format!("{admin}/participants/{name}/positions");
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let body = admin_call(&shared.client, Method::GET, &url, None, false)
                .await
                .map_err(|error| format!("{error:#}"))?;
            let rows: Vec<PositionRow> =
                serde_json::from_slice(&body).map_err(|error| format!("GET {url}: {error}"))?;
            let values: Vec<String> = rows
                .iter()
                .filter(|row| row.currency.as_deref().is_none_or(|c| c == CURRENCY))
                .map(|row| row.value.get().to_string())
                .collect();
            if values.is_empty() {
                return Err(format!("GET {url}: no {CURRENCY} position"));
            }
            sum_positions(values.iter().map(String::as_str))
        });
    }
    let mut sum = ledger::Amount::ZERO;
    while let Some(joined) = tasks.join_next().await {
        let position = joined.map_err(|error| error.to_string())??;
        sum = sum
            .checked_add(position)
            .ok_or_else(|| "the positions' sum overflows".to_string())?;
    }
    Ok(sum)
}

/// Reads the positions, again for up to [`POSITIONS_SETTLE`] while they do
/// not net to zero (a transfer the driver timed out may still be settling
/// in the hub).
async fn check_positions(shared: &Arc<Shared>, admin: &str) -> PositionCheck {
    let deadline = Instant::now() + POSITIONS_SETTLE;
    loop {
        let check = match read_positions(shared, admin).await {
            Ok(sum) => PositionCheck {
                sum: Some(sum),
                net_zero: sum == ledger::Amount::ZERO,
                problem: None,
                not_applicable: false,
            },
            Err(problem) => PositionCheck {
                sum: None,
                net_zero: false,
                problem: Some(problem),
                not_applicable: false,
            },
        };
        if check.net_zero || check.problem.is_some() || Instant::now() >= deadline {
            return check;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ------------------------------------------------------------------- report

/// Percentiles of one leg, in ms.
#[derive(Debug, PartialEq)]
struct LegSummary {
    count: u64,
    min_ms: f64,
    mean_ms: f64,
    p50_ms: f64,
    p90_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

impl LegSummary {
    /// From a histogram of µs; all zero when empty.
    fn of(histogram: &Histogram<u64>) -> LegSummary {
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

    fn to_json(&self) -> Value {
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

struct Report {
    run: RunResult,
    /// Onboarding the DFSPs (and registering their parties) took this long.
    onboarding: Duration,
    positions: PositionCheck,
    target: &'static str,
    api: String,
    /// Warnings the embedded hub logged.
    hub_warnings: Option<u64>,
    /// The embedded hub did not stop cleanly.
    hub_problem: Option<String>,
    baseline: Option<Baseline>,
    started_at: SystemTime,
    /// The hub's own per-stage table, if it keeps one.
    hub_stages: Option<Value>,
    /// Sampled transfers' traces through the hub.
    waterfalls: Vec<Value>,
    breakpoint: Option<Value>,
}

impl Report {
    fn errors(&self) -> u64 {
        self.run
            .stats
            .errors
            .values()
            .map(|tally| tally.count)
            .sum()
    }

    fn failed(&self) -> u64 {
        self.run.failed()
    }

    fn throughput(&self) -> f64 {
        self.run.throughput()
    }

    /// The constant level of a run that has one.
    fn constant_level(&self) -> Option<f64> {
        let plan = &self.run.plan;
        (plan.stages.len() == 1 && plan.stages[0].target == plan.start_target)
            .then_some(plan.start_target)
    }

    fn profile(&self, args: &BenchTransfersArgs) -> Option<&'static str> {
        args.profile.map(Profile::name)
    }

    fn load_description(&self, args: &BenchTransfersArgs) -> String {
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

    fn label(&self, args: &BenchTransfersArgs) -> String {
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

    fn print(&self, args: &BenchTransfersArgs) {
        let stats = &self.run.stats;
        let flow = args.flow;
        let parties = if flow.discovers() {
            format!(" ({} parties each)", args.parties)
        } else {
            String::new()
        };
        println!(
            "kasi bench --flow {}: {} DFSPs{parties}, {}, window {:.1} s, hub {} ({})",
            flow.name(),
            args.dfsps,
            self.load_description(args),
            self.run.window_s,
            self.api,
            self.target
        );
        if args.null_hub {
            println!(
                "NULL HUB: no hub work (no validation, ledger or store); this is the harness's own ceiling"
            );
        }
        println!();
        println!(
            "  {:<8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "leg", "count", "min ms", "mean ms", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "max ms"
        );
        for leg_index in flow.legs() {
            let leg = LegSummary::of(&stats.legs[leg_index]);
            println!(
                "  {:<8} {:>9} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
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
        match (&self.positions.problem, self.positions.sum) {
            _ if self.positions.not_applicable => {
                println!("  positions: not applicable (the null hub keeps no ledger)")
            }
            (Some(problem), _) => println!("  positions: NOT CHECKED: {problem}"),
            (None, Some(sum)) if self.positions.net_zero => println!(
                "  positions: the {} DFSPs' {CURRENCY} positions sum to {sum}: net zero",
                args.dfsps
            ),
            (None, sum) => println!(
                "  positions: the {} DFSPs' {CURRENCY} positions sum to {}: NOT NET ZERO",
                args.dfsps,
                sum.map_or("?".to_string(), |sum| sum.to_string())
            ),
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
    }

    fn to_json(&self, args: &BenchTransfersArgs) -> Value {
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
            "null_hub": args.null_hub,
            "api": self.api,
            "profile": self.profile(args),
            "dfsps": args.dfsps,
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
fn machine() -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dfsp::FULFILMENT;

    #[test]
    fn ids_are_correlation_ids_and_round_trip() {
        for seed in [0, 1, 42, u64::MAX, run_seed()] {
            let ids = IdGen::new(seed);
            for n in [
                0,
                1,
                255,
                256,
                0xffff_ffff_ffff,
                1 << 48,
                (1 << 62) - 1,
                (1 << 62) - 2,
                123_456_789,
            ] {
                let id = ids.format(n);
                assert!(fspiop::is_correlation_id(&id), "{id}");
                let parsed = ledger::TransferId::parse(&id).expect("parses");
                assert_eq!(parsed.to_string(), id, "echoed as given");
                if n % 2 == 0 {
                    assert_eq!(&id[14..15], "4", "{id}");
                    assert_eq!(parsed.form(), ledger::IdForm::Uuid);
                } else {
                    assert_eq!(id.len(), 26, "{id}");
                    assert_eq!(parsed.form(), ledger::IdForm::Ulid);
                }
                assert_eq!(ids.counter_of(&id), Some(n), "{id}");
            }
        }
        let ids = IdGen::new(7);
        let ulid = ids.format(ids.next());
        let uuid = ids.format(ids.next());
        let next_ulid = ids.format(ids.next());
        assert_eq!((ulid.len(), uuid.len()), (26, 36));
        assert_ne!(ulid, next_ulid);
        assert_eq!(ulid[..13], next_ulid[..13]);
        // Other runs' ids and other text are not ours.
        let other = IdGen::new(8);
        assert_eq!(ids.counter_of(&other.format(1)), None);
        assert_eq!(ids.counter_of(&other.format(2)), None);
        assert_eq!(ids.counter_of(&uuid.to_uppercase()), None);
        assert_eq!(ids.counter_of(&ulid.to_lowercase()), None);
        assert_eq!(ids.counter_of(&uuid[..35]), None);
        assert_eq!(ids.counter_of(&ulid[..25]), None);
        assert_eq!(ids.counter_of(""), None);
        let mut wrong_variant = uuid.clone();
        wrong_variant.replace_range(19..20, "c");
        assert_eq!(ids.counter_of(&wrong_variant), None);
    }

    #[test]
    fn the_condition_matches_the_fulfilment() {
        let fulfilment = ledger::Fulfilment::from_base64url(FULFILMENT).expect("32 bytes");
        let condition = ledger::Condition::from_base64url(CONDITION).expect("32 bytes");
        assert!(fulfilment.condition() == condition);
        assert!(ILP_PACKET
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    }

    #[test]
    fn a_prepare_body_is_valid_fspiop() {
        let ids = IdGen::new(3);
        let id = ids.format(9);
        let body = prepare_body(&id, "b1d0", "b1d1", "10");
        let parsed = fspiop::parse_transfer_prepare(body.as_bytes()).expect("valid");
        assert_eq!(parsed.transfer_id.to_string(), id);
        let fulfil = format!(
            r#"{{"fulfilment":"{FULFILMENT}","completedTimestamp":"{}","transferState":"COMMITTED"}}"#,
            fspiop::format_date_time(now_ms())
        );
        fspiop::parse_transfer_fulfil(fulfil.as_bytes()).expect("valid");
    }

    #[test]
    fn party_identifiers_are_msisdns_and_round_trip() {
        for tag in [0, 1, 424_242, 999_999] {
            for (dfsp, index) in [(0, 0), (1, 999), (9_999, 9_999), (7, 1)] {
                let party = PartyRef { dfsp, index };
                let id = party_identifier(tag, party);
                // E.164: at most 15 digits, no leading zero.
                assert_eq!(id.len(), 15, "{id}");
                assert!(id.bytes().all(|b| b.is_ascii_digit()), "{id}");
                assert!(!id.starts_with('0'), "{id}");
                fspiop::check_party_identifier(&id).expect("a valid path {ID}");
                assert_eq!(parse_party_identifier(tag, &id), Some(party), "{id}");
                if tag != 0 {
                    assert_eq!(parse_party_identifier(tag - 1, &id), None, "{id}");
                }
            }
        }
        let id = party_identifier(5, PartyRef { dfsp: 3, index: 4 });
        assert_eq!(parse_party_identifier(5, &id[..14]), None);
        assert_eq!(parse_party_identifier(5, &format!("{id}0")), None);
        assert_eq!(parse_party_identifier(5, &id.replace("0003", "00x3")), None);
        assert_eq!(parse_party_identifier(5, ""), None);
    }

    #[test]
    fn the_batch_registration_is_valid_fspiop_and_its_answer_is_checked() {
        let ids = IdGen::new(11);
        let request_id = ids.format(1);
        let identifiers: Vec<String> = (0..3)
            .map(|index| party_identifier(77, PartyRef { dfsp: 2, index }))
            .collect();
        let body = participants_batch_body(&request_id, "b1d2", &identifiers, CURRENCY);
        let parsed = fspiop::parse_participants_batch(body.as_bytes()).expect("valid");
        assert_eq!(parsed.request_id.to_string(), request_id);
        assert_eq!(parsed.parties.len(), 3);
        for (party, id) in parsed.parties.iter().zip(&identifiers) {
            assert_eq!(party.key.id_type, "MSISDN");
            assert_eq!(&party.key.identifier, id);
            assert_eq!(
                party.fsp.map(|fsp| fsp.to_string()).as_deref(),
                Some("b1d2")
            );
        }
        assert_eq!(
            parsed.currency.map(|c| c.to_string()).as_deref(),
            Some(CURRENCY)
        );

        // The answers the hub writes (fspiop's own body builder).
        let key = |id: &String| fspiop::PartyKey {
            id_type: "MSISDN".into(),
            identifier: id.clone(),
            sub_id: None,
        };
        let all_ok: Vec<_> = identifiers.iter().map(|id| (key(id), None)).collect();
        let answer = fspiop::participants_batch_put_body(&all_ok, parsed.currency);
        assert_eq!(batch_answer_problem(&answer, 3), None);
        let problem = batch_answer_problem(&answer, 4).expect("one missing");
        assert!(problem.contains("3 parties answered"), "{problem}");
        let mut one_refused = all_ok.clone();
        one_refused[1].1 = Some((
            ledger::ErrorCode(3003),
            "Add Party information error".to_string(),
        ));
        let answer = fspiop::participants_batch_put_body(&one_refused, parsed.currency);
        let problem = batch_answer_problem(&answer, 3).expect("one refused");
        assert!(problem.starts_with("1 of 3 parties refused"), "{problem}");
        assert!(problem.contains("3003"), "{problem}");
        assert!(batch_answer_problem(b"nope", 1).is_some());
        assert!(batch_answer_problem(b"{}", 1).is_some());
    }

    #[test]
    fn the_payees_party_answer_is_valid_fspiop() {
        let id = party_identifier(12, PartyRef { dfsp: 1, index: 5 });
        let body = party_put_body(&id, "b1d1");
        let info = fspiop::check_party_put(body.as_bytes()).expect("valid");
        assert_eq!(info.key.id_type, "MSISDN");
        assert_eq!(info.key.identifier, id);
        assert_eq!(info.fsp.map(|fsp| fsp.to_string()).as_deref(), Some("b1d1"));
    }

    #[test]
    fn quote_bodies_are_valid_fspiop() {
        let ids = IdGen::new(5);
        let (quote_id, transaction_id) = (ids.format(1), ids.format(2));
        let payer_party = party_identifier(1, PartyRef { dfsp: 0, index: 3 });
        let payee_party = party_identifier(1, PartyRef { dfsp: 1, index: 4 });
        let body = quote_post_body(
            &quote_id,
            &transaction_id,
            ("b1d0", &payer_party),
            ("b1d1", &payee_party),
            ("42", CURRENCY),
        );
        let post = fspiop::parse_quote_post(body.as_bytes()).expect("valid");
        assert_eq!(post.quote_id.to_string(), quote_id);
        assert_eq!(post.transaction_id.to_string(), transaction_id);
        assert_eq!(
            post.payer_fsp().map(|f| f.to_string()).as_deref(),
            Some("b1d0")
        );
        assert_eq!(
            post.payee_fsp().map(|f| f.to_string()).as_deref(),
            Some("b1d1")
        );
        assert_eq!(post.payer.key.identifier, payer_party);
        assert_eq!(post.payee.key.identifier, payee_party);
        assert_eq!(post.amount_type, fspiop::AmountType::Send);

        // The payee answers from the forwarded bytes, as on_quote_post does.
        let forwarded: ForwardedQuote<'_> = serde_json::from_str(&body).expect("readable");
        assert_eq!(forwarded.quote_id, quote_id);
        let expiration = now_ms() + 60_000;
        let answer = quote_put_body(
            forwarded.amount.amount,
            forwarded.amount.currency,
            expiration,
        );
        let put = fspiop::parse_quote_put(answer.as_bytes()).expect("valid");
        assert_eq!(put.transfer_amount, post.amount);
        assert!(ledger::Condition::from_base64url(CONDITION) == Some(put.condition));
        assert!((put.expiration_ms - expiration).abs() < 1_000, "{answer}");
    }

    #[test]
    fn requests_carry_the_headers_of_their_resource() {
        let header = |request: &Request<Full<Bytes>>, name: &str| {
            request
                .headers()
                .get(name)
                .map(|value| value.to_str().unwrap().to_string())
        };
        let cases = [
            (
                Api::Parties,
                Method::GET,
                None,
                fspiop::Resource::Parties,
                "1.0",
            ),
            (
                Api::Parties,
                Method::PUT,
                Some("b1d0"),
                fspiop::Resource::Parties,
                "1.0",
            ),
            (
                Api::Quotes,
                Method::POST,
                Some("b1d1"),
                fspiop::Resource::Quotes,
                "1.1",
            ),
            (
                Api::Quotes,
                Method::PUT,
                Some("b1d0"),
                fspiop::Resource::Quotes,
                "1.1",
            ),
            (
                Api::Participants,
                Method::POST,
                None,
                fspiop::Resource::Participants,
                "1.0",
            ),
            (
                Api::Transfers,
                Method::POST,
                Some("b1d1"),
                fspiop::Resource::Transfers,
                "1.1",
            ),
            (
                Api::Transfers,
                Method::PUT,
                Some("b1d0"),
                fspiop::Resource::Transfers,
                "1.1",
            ),
        ];
        for (api, method, destination, resource, version) in cases {
            let request = fspiop_request(
                method.clone(),
                "http://hub/x",
                api,
                "b1d9",
                destination,
                String::new(),
            )
            .expect("a request");
            let content_type = header(&request, "content-type").expect("Content-Type");
            assert!(
                content_type.ends_with(&format!("version={version}")),
                "{content_type}"
            );
            let checked = fspiop::check_content_type(resource, Some(&content_type))
                .unwrap_or_else(|e| panic!("{api:?} {method}: {}", e.description));
            assert_eq!(checked.to_string(), version);
            match header(&request, "accept") {
                Some(accept) => {
                    assert_ne!(method, Method::PUT, "{api:?}: a callback has no Accept");
                    fspiop::negotiate_accept(resource, Some(&accept))
                        .unwrap_or_else(|e| panic!("{api:?} {method}: {}", e.description));
                }
                None => assert_eq!(method, Method::PUT, "{api:?} {method} needs Accept"),
            }
            fspiop::check_date(header(&request, "date").as_deref()).expect("a valid Date");
            assert_eq!(header(&request, "fspiop-source").as_deref(), Some("b1d9"));
            assert_eq!(
                header(&request, "fspiop-destination").as_deref(),
                destination
            );
        }
    }

    fn waiter(ticket: u64, payer: u32, payee: u32) -> (Waiter, oneshot::Receiver<Completion>) {
        let (done, outcome) = oneshot::channel();
        (
            Waiter {
                ticket,
                payer,
                payee,
                done,
            },
            outcome,
        )
    }

    #[test]
    fn waiters_of_one_key_are_answered_oldest_first() {
        let waiters: Waiters<u64> = Waiters::new();
        let (first, mut first_outcome) = waiter(1, 0, 1);
        let (second, mut second_outcome) = waiter(2, 0, 1);
        let (other, _other_outcome) = waiter(3, 2, 3);
        waiters.insert(7, first);
        waiters.insert(7, second);
        waiters.insert(8, other);
        assert_eq!(waiters.peek(&7), Some((0, 1)));
        assert_eq!(waiters.peek(&8), Some((2, 3)));
        assert_eq!(waiters.peek(&9), None);

        // Not its payer: nothing taken.
        assert!(waiters.take_oldest(&7, Some(5)).is_none());
        let taken = waiters.take_oldest(&7, Some(0)).expect("the oldest");
        assert_eq!(taken.ticket, 1);
        let now = Instant::now();
        let _ = taken.done.send(Completion::Done(now));
        assert!(matches!(first_outcome.try_recv(), Ok(Completion::Done(at)) if at == now));

        assert!(waiters.fail(&7, "3204".into(), "not found".into()));
        assert!(matches!(
            second_outcome.try_recv(),
            Ok(Completion::Failed(key, _)) if key == "3204"
        ));
        assert!(!waiters.fail(&7, "3204".into(), "again".into()));
        assert!(waiters.lock().get(&7).is_none(), "an empty key is dropped");

        // A timed-out waiter removes itself by ticket, not somebody else.
        let (a, _a) = waiter(10, 0, 1);
        let (b, _b) = waiter(11, 0, 1);
        waiters.insert(7, a);
        waiters.insert(7, b);
        assert!(waiters.take(&7, 12).is_none());
        assert_eq!(waiters.take(&7, 11).map(|w| w.ticket), Some(11));
        assert_eq!(waiters.take(&7, 11).map(|w| w.ticket), None);
        assert_eq!(waiters.take_oldest(&7, None).map(|w| w.ticket), Some(10));
        assert!(waiters.lock().get(&7).is_none());
    }

    #[test]
    fn flows_parse_and_time_their_legs() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: BenchTransfersArgs,
        }
        let parse = |extra: &[&str]| {
            let argv = std::iter::once("bench").chain(extra.iter().copied());
            <Cli as clap::Parser>::try_parse_from(argv).map(|cli| cli.args)
        };
        let default = parse(&[]).expect("defaults");
        assert_eq!(default.flow, Flow::Transfer);
        assert_eq!(default.parties, 1000);
        for flow in [
            Flow::Transfer,
            Flow::Lookup,
            Flow::Quote,
            Flow::DiscoveryQuoteTransfer,
            Flow::TransactionRequest,
        ] {
            let args = parse(&["--flow", flow.name()]).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(args.flow, flow);
            assert_eq!(*flow.legs().last().unwrap(), E2E);
        }
        assert!(parse(&["--flow", "everything"]).is_err());
        assert!(parse(&["--parties", "0"]).is_err());
        assert!(parse(&["--parties", "10001"]).is_err());

        let names = |flow: Flow| {
            flow.legs()
                .into_iter()
                .map(|leg| LEGS[leg])
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(Flow::Transfer),
            ["prepare", "forward", "fulfil", "notify", "e2e"]
        );
        assert_eq!(names(Flow::Lookup), ["lookup", "e2e"]);
        assert_eq!(names(Flow::Quote), ["quote", "e2e"]);
        assert_eq!(
            names(Flow::DiscoveryQuoteTransfer),
            LEGS.iter()
                .filter(|leg| **leg != "transaction_request")
                .copied()
                .collect::<Vec<_>>()
        );
        assert_eq!(
            names(Flow::TransactionRequest),
            ["transaction_request", "e2e"]
        );
        assert!(Flow::TransactionRequest.discovers());
        assert!(!Flow::Transfer.discovers());
        assert!(Flow::Lookup.discovers() && Flow::Quote.discovers());
        assert!(Flow::DiscoveryQuoteTransfer.looks_up());
        assert!(Flow::DiscoveryQuoteTransfer.quotes());
        assert!(Flow::DiscoveryQuoteTransfer.transfers());
        assert!(!Flow::Quote.looks_up() && !Flow::Lookup.transfers());
    }

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
    fn positions_sum_exactly() {
        assert_eq!(
            sum_positions(["1922", "-565", "-1357"]),
            Ok(ledger::Amount::ZERO)
        );
        // 0.1 + 0.2 - 0.3 is not zero in floating point; it is here.
        assert_eq!(
            sum_positions(["0.1", "0.2", "-0.3", "\"0\""]),
            Ok(ledger::Amount::ZERO)
        );
        assert_eq!(
            sum_positions(["10.5", "-3.25"]).map(|sum| sum.to_string()),
            Ok("7.25".to_string())
        );
        assert_eq!(
            sum_positions(["999999999999999999.9999", "-999999999999999999.9998"])
                .map(|sum| sum.to_string()),
            Ok("0.0001".to_string())
        );
        assert!(sum_positions(["1e3"]).is_err());
        assert!(sum_positions(["null"]).is_err());
        assert_eq!(sum_positions([]), Ok(ledger::Amount::ZERO));
    }

    #[test]
    fn the_open_loop_and_quiet_flags_parse() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: BenchTransfersArgs,
        }
        let parse = |extra: &[&str]| {
            let argv = std::iter::once("bench").chain(extra.iter().copied());
            <Cli as clap::Parser>::try_parse_from(argv).map(|cli| cli.args)
        };
        let default = parse(&[]).expect("defaults");
        assert_eq!(default.rate, None);
        assert!(!default.quiet);
        let args = parse(&["--rate", "2500.5", "--quiet"]).expect("valid");
        assert_eq!(args.rate, Some(2500.5));
        assert!(args.quiet);
        assert!(parse(&["--rate", "fast"]).is_err());
    }

    #[test]
    fn parses_the_serving_line() {
        let api: SocketAddr = "127.0.0.1:41234".parse().unwrap();
        let admin: SocketAddr = "127.0.0.1:41235".parse().unwrap();
        let line = "2026-11-22T10:00:00.123456Z  INFO kasi::serve: serving api=127.0.0.1:41234 admin=127.0.0.1:41235";
        assert_eq!(parse_serving_line(line), Some((api, admin)));
        // Field order and IPv6 do not matter.
        let line = "INFO kasi::serve: serving admin=[::1]:9 api=127.0.0.1:41234";
        assert_eq!(
            parse_serving_line(line),
            Some((api, "[::1]:9".parse().unwrap()))
        );
        // With colours, as when stderr is a terminal.
        let coloured = "\u{1b}[2m2026-11-22T10:00:00Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mkasi::serve\u{1b}[0m\u{1b}[2m:\u{1b}[0m serving \u{1b}[3mapi\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:41234 \u{1b}[3madmin\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:41235";
        assert_eq!(
            parse_serving_line(&strip_ansi(coloured)),
            Some((api, admin))
        );
        for other in [
            "INFO kasi::serve: recovered the ledger participants=0",
            "INFO kasi::serve: serving api=127.0.0.1:1",
            "INFO kasi::serve: serving api=nowhere admin=127.0.0.1:2",
            "INFO kasi::serve: stopped accepting requests",
            "",
        ] {
            assert_eq!(parse_serving_line(other), None, "{other}");
        }
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

    #[test]
    fn error_bodies_are_described() {
        let body = br#"{"errorInformation":{"errorCode":"3100","errorDescription":"Generic validation error - x"}}"#;
        assert_eq!(
            describe_error_body(body),
            "3100 Generic validation error - x"
        );
        assert_eq!(describe_error_body(b"oops"), "oops");
    }
}
