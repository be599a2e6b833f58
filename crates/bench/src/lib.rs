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
//! - `fx`: a payment across currencies (FSPIOP v2.0 payer conversion):
//!   `POST /fxQuotes` to an FXP (it answers `PUT /fxQuotes/{ID}` at a
//!   fixed rate), `POST /quotes` to the payee in the target currency,
//!   `POST /fxTransfers` (the FXP accepts with `PUT /fxTransfers/{ID}`,
//!   RESERVED with its fulfilment), `POST /transfers` in the target
//!   currency whose id is the conversion's `determiningTransferId`; done
//!   when the payer has its commit notification and the FXP the hub's
//!   `PATCH /fxTransfers/{ID}` (COMMITTED). Every DFSP pays in USD and is
//!   paid in TZS; `--fxps` FXPs hold both.
//!
//! For every flow but `transfer`, each DFSP also registers the discovery
//! endpoints and, with one batch `POST /participants`, `--parties` MSISDNs
//! of its own before the load starts.
//!
//! The hub is either started here (`--embedded`, the default: this
//! executable's `serve` on a temporary data directory, stopped at the end)
//! or one already running (`--api`/`--admin`); then only the Mojaloop admin
//! API and FSPIOP are assumed.
//!
//! Where things are: `run` is one run from start to end (the null-hub
//! baseline, the hub under test, the shared state, the report); `target`
//! the hub as a child process; `onboard` the DFSPs in the hub; `flows` what
//! one iteration of each flow does; `callbacks` the DFSPs' callback server;
//! `waiters` the payers waiting for callbacks; `ids` transfer ids and party
//! identifiers; `loops` the closed and open loops and the breakpoint
//! search; `load` the load models (pure functions of time); `monitor` the
//! timeline and what is read from the hub meanwhile; `stats` histograms,
//! percentiles and CPU accounting; `summary` what a run prints and its
//! report.json; `report` the renderers of saved reports; `null_hub` the
//! no-op reference hub; `ledger` `kasi bench ledger`; `dfsp` what a
//! simulated DFSP sends (shared with `kasi sim`).

// The bench report is one large `json!` literal.
#![recursion_limit = "256"]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};

use crate::flows::Flow;
use crate::load::{Breakpoint, Load, Plan, Profile};

mod callbacks;
pub mod dfsp;
mod flows;
mod ids;
mod ledger;
mod load;
mod loops;
mod monitor;
pub mod null_hub;
mod onboard;
mod report;
mod run;
mod security;
mod stats;
mod summary;
mod target;
mod waiters;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,

    #[command(flatten)]
    run: BenchTransfersArgs,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Drive the ledger and its store in-process with synthetic DFSPs.
    ///
    /// Three phases on a fresh temporary store: prepares only, fulfils of
    /// those, then whole two-phase transfers; each reports its rate and the
    /// submit-to-durable latency. Then the store is reopened and the time to
    /// recover it is measured. By default this runs once with fsync (the
    /// real guarantee) and once without, for reference.
    Ledger(ledger::BenchLedgerArgs),
    /// Lay saved reports side by side: per leg and end to end, mean, p99
    /// and max for each run with the delta and the ratio against the first;
    /// throughput likewise; the hub's stages if the reports have them.
    Compare(CompareArgs),
    /// The same as `kasi bench` without a subcommand (kept for scripts).
    #[command(hide = true)]
    Transfers(Box<BenchTransfersArgs>),
}

#[derive(Args)]
struct CompareArgs {
    /// Reports: report.json files or the folders holding them; the first
    /// is the baseline of the deltas and ratios.
    #[arg(required = true, num_args = 2.., value_name = "REPORT")]
    reports: Vec<PathBuf>,
}

/// `kasi bench` and its subcommands.
pub fn run(bench: BenchArgs) -> anyhow::Result<ExitCode> {
    match bench.command {
        None => run::run(bench.run),
        Some(command) => match command {
            BenchCommand::Ledger(args) => ledger::run(args),
            BenchCommand::Transfers(args) => run::run(*args),
            BenchCommand::Compare(args) => compare(&args.reports),
        },
    }
}

fn compare(paths: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut reports = Vec::with_capacity(paths.len());
    for path in paths {
        reports.push((path.display().to_string(), report::load_report(path)?));
    }
    print!("{}", report::compare(&reports));
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Clone)]
pub struct BenchTransfersArgs {
    /// Start a hub (this executable's `serve`) on a temporary data directory
    /// and stop it at the end. The default when --api is not given.
    #[arg(long, conflicts_with_all = ["api", "admin"], hide_short_help = true)]
    pub(crate) embedded: bool,

    /// Instead of a hub, run the built-in null hub (`kasi null-hub`, a child
    /// process): it answers onboarding minimally and forwards every FSPIOP
    /// request to the DFSP it is for, with no validation, ledger or store.
    /// Measures the harness's own ceiling on this machine (positions: not
    /// applicable).
    #[arg(long, conflicts_with_all = ["api", "admin", "embedded"])]
    pub(crate) null_hub: bool,

    /// Run the null hub (of --null-hub and --null-hub-baseline) inside this
    /// process instead of as a process of its own: no process switches
    /// between the DFSPs and the hub, the harness's absolute ceiling rather
    /// than that of any hub in another process.
    #[arg(long, hide_short_help = true)]
    pub(crate) null_hub_in_process: bool,

    /// Base URL of a running hub's FSPIOP API (e.g. http://127.0.0.1:3000)
    /// instead of an embedded one; needs --admin.
    #[arg(long, value_name = "URL", requires = "admin")]
    pub(crate) api: Option<String>,

    /// Base URL of that hub's admin API (central-ledger's), e.g.
    /// http://127.0.0.1:3001.
    #[arg(long, value_name = "URL", requires = "api")]
    pub(crate) admin: Option<String>,

    /// A file holding the admin bearer token for --admin, when that hub
    /// requires one (`serve --admin-tokens`): the token alone, or what
    /// `kasi admin-token` prints. Sent as `Authorization: Bearer` with
    /// every admin request (an operator's: onboarding changes the hub).
    /// Not used without --admin (an embedded hub needs none).
    #[arg(long, env = "KASI_ADMIN_TOKEN_FILE", value_name = "PATH")]
    pub(crate) admin_token_file: Option<std::path::PathBuf>,

    /// The embedded hub traces one transfer in this many through its stages
    /// for the report's waterfalls (its `serve --trace-sample-every`).
    #[arg(long, value_name = "N", conflicts_with_all = ["api", "admin", "null_hub"], hide_short_help = true)]
    pub(crate) trace_sample_every: Option<u32>,

    /// Name of the hub participant, which holds the hub accounts.
    #[arg(long, default_value = "Hub", hide_short_help = true)]
    pub(crate) hub_name: String,

    /// Simulated DFSPs, onboarded through the admin API. Virtual user u pays
    /// from DFSP u mod N to the next one.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=10_000))]
    pub(crate) dfsps: u32,

    /// What each iteration of a virtual user does: `transfer` (POST
    /// /transfers until the payer's commit notification), `lookup` (GET
    /// /parties until the payer receives PUT /parties), `quote` (POST /quotes
    /// until the payer receives PUT /quotes), `quote+transfer`, or
    /// `discovery+quote+transfer` (the three in turn), or
    /// `transaction-request` (POST /transactionRequests from the payee until
    /// it receives the payer's PUT /transactionRequests), or `fx`: a payment
    /// across currencies (FSPIOP v2.0 payer conversion), USD from the payer
    /// to TZS for the payee through an FXP at 2500 TZS per USD: POST
    /// /fxQuotes to the FXP, POST /quotes to the payee in TZS, POST
    /// /fxTransfers (the FXP accepts with its fulfilment), POST /transfers
    /// in TZS (its id the conversion's determiningTransferId), until the
    /// payer's commit notification and the FXP's PATCH /fxTransfers
    /// (COMMITTED). Every DFSP is onboarded in USD and TZS; the FXPs (see
    /// --fxps) too. The report times each step (fx_quote, quote, fx_prepare
    /// .. fx_notify, prepare .. notify, fx_patch) and checks that each
    /// currency nets to zero and that the FXPs' positions are each other's
    /// at the rate.
    #[arg(long, value_enum, default_value_t = Flow::Transfer)]
    pub(crate) flow: Flow,

    /// With `--flow fx`: FXPs onboarded beside the DFSPs (in USD and TZS,
    /// with the FX endpoints); DFSP d converts through FXP d mod N.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100), hide_short_help = true)]
    pub(crate) fxps: u32,

    /// MSISDNs each DFSP registers (one batch POST /participants) before the
    /// load, for every flow but `transfer`; lookups go round them.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=10_000), hide_short_help = true)]
    pub(crate) parties: u32,

    /// Customers each side of a transfer is drawn from: every prepare's
    /// `ilpPacket` is an ILP v4 prepare carrying the transaction (payer and
    /// payee MSISDNs among these), as Mojaloop's SDK builds it, so the hub
    /// keeps and files the parties as it would in a scheme. 0: one fixed
    /// packet that names no party (the benches before 2026-11-29).
    #[arg(
        long,
        env = "KASI_BENCH_ILP_CUSTOMERS",
        value_name = "N",
        default_value_t = 1_000_000,
        hide_short_help = true
    )]
    pub(crate) ilp_customers: u32,

    /// Virtual users, each with one flow in flight at a time (closed loop);
    /// with --profile, the level it shapes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) concurrency: u32,

    /// Each simulated DFSP's requests in flight at once, as its connection
    /// pool bounds them: one connection each. A flow that finds its DFSP's
    /// all busy waits for one (the wait is in its latency). Without a bound,
    /// an open loop that falls behind opens a connection per request it
    /// queues (with --tls, a full mutual-TLS handshake each).
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=100_000), hide_short_help = true)]
    pub(crate) connections_per_dfsp: u32,

    /// Seconds measured, after the warm-up (default 10); with --profile,
    /// the whole run (default 10 s for smoke, 60 s for the others, and for
    /// breakpoint each step: see --step-duration).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) duration: Option<f64>,

    /// Measure this many flows instead of a duration: the run ends once the
    /// last of them, started after the warm-up, has ended; throughput is
    /// counted over that time.
    #[arg(long, value_name = "FLOWS", conflicts_with_all = ["duration", "profile", "stages"],
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) count: Option<u64>,

    /// Seconds of load before the measurement, excluded from the statistics
    /// (its failures still count for the exit status). Default 2, or 0 with
    /// --stages.
    #[arg(long, value_name = "SECONDS", conflicts_with = "profile")]
    pub(crate) warmup: Option<f64>,

    /// Address of the DFSPs' callback server; the hub must be able to reach it.
    #[arg(long, default_value = "127.0.0.1:0", hide_short_help = true)]
    pub(crate) callback_listen: SocketAddr,

    /// Open loop instead of the closed one: start this many flows per
    /// second on a fixed schedule, whether or not earlier ones have ended
    /// (at most 10,000 in flight: an arrival beyond that counts as an
    /// error). Each flow's end-to-end latency is measured from its
    /// scheduled start, so queueing shows as latency. --concurrency is
    /// then ignored; with --profile, the level it shapes.
    #[arg(long, value_name = "PER_SECOND")]
    pub(crate) rate: Option<f64>,

    /// A named test type (seed 001), shaped around --concurrency (closed
    /// loop) or --rate (open loop): smoke, average-load, stress, spike, or
    /// breakpoint (see the values' descriptions with --help).
    #[arg(long, value_enum, conflicts_with = "stages")]
    pub(crate) profile: Option<crate::load::Profile>,

    /// k6-style stages instead of a constant level: `DURATION:TARGET,...`
    /// (e.g. `10s:64,30s:64,5s:0`); the level starts at 0 and moves
    /// linearly to each target. Targets are virtual users, or arrivals per
    /// second with `--load open`.
    #[arg(long, value_name = "STAGES")]
    pub(crate) stages: Option<String>,

    /// Whether --stages targets are virtual users (closed) or arrivals per
    /// second (open). Default: open when --rate is given, else closed.
    #[arg(long, value_enum, hide_short_help = true)]
    pub(crate) load: Option<LoadArg>,

    /// Breakpoint: seconds measured per step (after 1 s unmeasured).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 5.0,
        hide_short_help = true
    )]
    pub(crate) step_duration: f64,

    /// Breakpoint: a step whose end-to-end p99 exceeds this breaks.
    /// Default 50 ms, or 100 ms for flows of more than one stage.
    #[arg(long, value_name = "MS")]
    pub(crate) max_p99_ms: Option<f64>,

    /// Breakpoint: a step where more than this share of flows fails breaks.
    #[arg(
        long,
        value_name = "PERCENT",
        default_value_t = 1.0,
        hide_short_help = true
    )]
    pub(crate) max_error_pct: f64,

    /// Before measuring an embedded or external hub, measure the null hub
    /// (see --null-hub) this many seconds with the same flow, to state the
    /// hub's throughput as a share of the harness's own ceiling. 0: skip.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 5.0,
        hide_short_help = true
    )]
    pub(crate) null_hub_baseline: f64,

    /// Folder for the report (report.json, report.md, timeline.svg).
    /// Default: kasi-bench/<date>-<time>-<flow> under the current directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<std::path::PathBuf>,

    /// Write no report folder.
    #[arg(long, conflicts_with = "out")]
    pub(crate) no_report: bool,

    /// A short name for the run in its report and in `kasi bench compare`.
    #[arg(long, hide_short_help = true)]
    pub(crate) label: Option<String>,

    /// Print the summary as one JSON object on standard output.
    #[arg(long)]
    pub(crate) json: bool,

    /// No progress line (once a second, on stderr) and no other chatter.
    #[arg(long, hide_short_help = true)]
    pub(crate) quiet: bool,

    /// Mutual TLS on every connection, as a scheme runs it: a throw-away
    /// scheme CA made for the run; the embedded hub serves both addresses
    /// over TLS and requires a client certificate on its FSPIOP address;
    /// each DFSP connects with a certificate of its own (its name as
    /// subject CN and DNS name, which the hub binds FSPIOP-Source to), on
    /// connections of its own; the DFSPs' callback server is HTTPS and
    /// requires the hub's client certificate. The null-hub baseline stays
    /// plain HTTP.
    #[arg(long, conflicts_with_all = ["api", "admin", "null_hub"])]
    pub(crate) tls: bool,

    /// The embedded hub signs every callback it originates (its
    /// `--jws-signing-key`) with a key made for the run: es256 (P-256) or
    /// rs256 (RSA-2048, made with openssl). The DFSPs check a sample of
    /// the signatures (see --verify-every); a bad or missing one fails the
    /// run.
    #[arg(long, value_enum, value_name = "ALG", conflicts_with_all = ["api", "admin", "null_hub"])]
    pub(crate) hub_jws: Option<crate::security::JwsAlg>,

    /// Every DFSP signs every request and callback it sends (es256: a
    /// P-256 key each; rs256: one RSA-2048 key for all, made with openssl),
    /// its public key installed through the admin API (`PUT
    /// /participants/{name}/jwsKey`). The embedded hub checks every
    /// signature (`--jws-verify all`); a hub given with --api must have its
    /// own --jws-verify and --jws-keys-dir.
    #[arg(long, value_enum, value_name = "ALG", conflicts_with = "null_hub")]
    pub(crate) dfsp_jws: Option<crate::security::JwsAlg>,

    /// One in this many signed messages the DFSPs receive has its signature
    /// verified; every one is checked for having one where it is due.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..), hide_short_help = true)]
    pub(crate) verify_every: u32,

    /// The embedded hub's store (its `serve --store`): `sqlite:DIR` or a
    /// PostgreSQL URL. Default: SQLite in a temporary directory. The
    /// DFSPs of each run have names of their own, so runs can share a
    /// store.
    #[arg(long, value_name = "STORE", conflicts_with_all = ["api", "admin", "null_hub"])]
    pub(crate) store: Option<String>,

    /// While measuring, close the hub's open settlement window every this
    /// many seconds (central-settlement's `POST /v2/settlementWindows/{id}`
    /// on the admin address), to show what a close does to the transfers
    /// flowing meanwhile; the closes and their latencies are reported.
    #[arg(long, value_name = "SECONDS", hide_short_help = true)]
    pub(crate) close_window_every: Option<f64>,
}

/// A `--count` run that has not started its flows after this long stops.
pub(crate) const COUNT_RUN_LIMIT_S: f64 = 3600.0;

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
pub(crate) enum Shape {
    Plan(Plan),
    Breakpoint(Breakpoint),
}

/// The run the flags ask for.
pub(crate) fn shape_of(args: &BenchTransfersArgs) -> Result<Shape, String> {
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
            let stages =
                crate::load::parse_stages(stages).map_err(|error| format!("--stages: {error}"))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::{E2E, LEGS};

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
            Flow::Fx,
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
                .filter(|leg| **leg != "transaction_request" && !leg.starts_with("fx_"))
                .copied()
                .collect::<Vec<_>>()
        );
        // FX: every leg in the order they happen, without the lookup.
        assert_eq!(
            names(Flow::Fx),
            LEGS.iter()
                .filter(|leg| !matches!(**leg, "lookup" | "transaction_request"))
                .copied()
                .collect::<Vec<_>>()
        );
        assert_eq!(Flow::Fx.stage_count(), 4);
        assert!(Flow::Fx.converts() && Flow::Fx.quotes() && Flow::Fx.transfers());
        assert!(Flow::Fx.discovers() && !Flow::Fx.looks_up());
        assert_eq!(default.fxps, 1);
        assert_eq!(parse(&["--flow", "fx", "--fxps", "3"]).unwrap().fxps, 3);
        assert!(parse(&["--fxps", "0"]).is_err());
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
}
