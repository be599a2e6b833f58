//! `kasi bench transfers`: whole FSPIOP transfers through a hub over HTTP.
//!
//! One process plays every DFSP at once, "two sides of the same coin"
//! (seed 002): each virtual user is a payer that sends `POST /transfers`
//! and waits for the hub's commit notification; one callback server is
//! every payee, answering the forwarded `POST` at once and then sending the
//! fulfil. Every leg is timed on one clock, so there is no clock skew to
//! correct for.
//!
//! The hub is either started here (`--embedded`, the default: this
//! executable's `serve` on a temporary data directory, stopped at the end)
//! or one already running (`--api`/`--admin`); then only the Mojaloop admin
//! API and FSPIOP are assumed.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead as _;
use std::net::SocketAddr;
use std::process::{Child, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use axum::extract::{Path, State};
use axum::routing::{post, put};
use axum::Router;
use bytes::Bytes;
use clap::Args;
use hdrhistogram::Histogram;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Args)]
pub struct BenchTransfersArgs {
    /// Start a hub (this executable's `serve`) on a temporary data directory
    /// and stop it at the end. The default when --api is not given.
    #[arg(long, conflicts_with_all = ["api", "admin"])]
    embedded: bool,

    /// Base URL of a running hub's FSPIOP API (e.g. http://127.0.0.1:3000)
    /// instead of an embedded one; needs --admin.
    #[arg(long, value_name = "URL", requires = "admin")]
    api: Option<String>,

    /// Base URL of that hub's admin API (central-ledger's), e.g.
    /// http://127.0.0.1:3001.
    #[arg(long, value_name = "URL", requires = "api")]
    admin: Option<String>,

    /// Name of the hub participant, which holds the hub accounts.
    #[arg(long, default_value = "Hub")]
    hub_name: String,

    /// Simulated DFSPs, onboarded through the admin API. Virtual user u pays
    /// from DFSP u mod N to the next one.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=10_000))]
    dfsps: u32,

    /// Virtual users, each with one transfer in flight at a time (closed loop).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    concurrency: u32,

    /// Seconds measured, after the warm-up.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,

    /// Seconds of load before the measurement, excluded from the statistics
    /// (its failures still count for the exit status).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,

    /// Address of the DFSPs' callback server; the hub must be able to reach it.
    #[arg(long, default_value = "127.0.0.1:0")]
    callback_listen: SocketAddr,

    /// Print the summary as one JSON object on standard output.
    #[arg(long)]
    json: bool,
}

/// A transfer not committed this long after its `POST` counts as timed out.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the embedded hub may take to say where it listens.
const HUB_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the embedded hub may take to stop after SIGTERM.
const HUB_STOP_TIMEOUT: Duration = Duration::from_secs(45);
const CURRENCY: &str = "USD";
/// Net debit cap and initial liquidity of every DFSP: nothing the run can
/// exhaust.
const LARGE_AMOUNT: &str = "1000000000000000";
/// A fixed ILP condition and the fulfilment that satisfies it
/// (SHA-256(fulfilment) = condition).
const CONDITION: &str = "GRzLaTP7DJ9t4P-a_BA0WA9wzzlsugf00-Tn6kESAfM";
const FULFILMENT: &str = "UNlJ98hZTY_dsw0cAqw4i_UN3v4utt7CZFB4yfLbVFA";
/// Any base64url string is a valid `ilpPacket`; this is the size of a real one.
const ILP_PACKET: &str = "AYIBgQAAAAAAAASwNGxldmVsb25lLmRmc3AxLm1lci45T2RTOF81MDdqUUZERmZlakgyOVc4bXFmNEpLMHlGTFGCAUBQU0svMS4wCk5vbmNlOiB1SXlweUYzY3pYSXBFdzVVc05TYWh3CkVuY3J5cHRpb246IG5vbmUKUGF5bWVudC1JZDogMTMyMzZhM2ItOGZhOC00MTYzLTg0NDctNGMzZWQzZGE5OGE3CgpDb250ZW50LUxlbmd0aDogMTM1CkNvbnRlbnQtVHlwZTogYXBwbGljYXRpb24vanNvbgpTZW5kZXItSWRlbnRpZmllcjogOTI4MDYzOTEKCiJ7XCJmZWVcIjowLFwidHJhbnNmZXJDb2RlXCI6XCJpbnZvaWNlXCIsXCJkZWJpdE5hbWVcIjpcImFsaWNlIGNvb3BlclwiLFwiY3JlZGl0TmFtZVwiOlwibWVyIGNoYW50XCIsXCJkZWJpdElkZW50aWZpZXJcIjpcIjkyODA2MzkxXCJ9IgA";
const CONTENT_TYPE: &str = "application/vnd.interoperability.transfers+json;version=1.1";
const ACCEPT: &str = "application/vnd.interoperability.transfers+json;version=1";

/// The legs timed, in the order they happen.
const LEGS: [&str; 5] = ["prepare", "forward", "fulfil", "notify", "e2e"];
/// `POST /transfers` sent → its 202 received.
const PREPARE: usize = 0;
/// `POST /transfers` sent → the payee receives the forwarded `POST`.
const FORWARD: usize = 1;
/// The payee's `PUT /transfers/{ID}` sent → its 200 received.
const FULFIL: usize = 2;
/// The payee's `PUT` sent → the payer receives the commit notification.
const NOTIFY: usize = 3;
/// `POST /transfers` sent → the payer receives the commit notification.
const E2E: usize = 4;

pub fn run(args: BenchTransfersArgs) -> anyhow::Result<ExitCode> {
    if !(args.duration.is_finite() && args.duration > 0.0) {
        bail!("--duration must be a positive number of seconds");
    }
    if !(args.warmup.is_finite() && args.warmup >= 0.0) {
        bail!("--warmup must be zero or a positive number of seconds");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kasi-bench")
        .build()
        .context("cannot start the async runtime")?;

    let mut embedded = None;
    let (api, admin, target) = match (&args.api, &args.admin) {
        (Some(api), Some(admin)) => (
            api.trim_end_matches('/').to_string(),
            admin.trim_end_matches('/').to_string(),
            "external",
        ),
        _ => {
            if !args.json {
                eprintln!("starting an embedded hub...");
            }
            let hub = EmbeddedHub::start(&args.hub_name)?;
            let urls = (
                format!("http://{}", hub.api),
                format!("http://{}", hub.admin),
            );
            embedded = Some(hub);
            (urls.0, urls.1, "embedded")
        }
    };

    let outcome = runtime.block_on(drive(&args, &api, &admin));
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

    if args.json {
        println!("{}", report.to_json(&args));
    } else {
        report.print(&args);
    }
    Ok(if report.failed() == 0 && report.hub_problem.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

// ------------------------------------------------------------ the embedded hub

/// `kasi serve` as a child process on a temporary data directory.
struct EmbeddedHub {
    child: Child,
    api: SocketAddr,
    admin: SocketAddr,
    /// WARN and ERROR lines the hub logged (they are also copied to stderr).
    warnings: Arc<AtomicU64>,
    drain: Option<std::thread::JoinHandle<()>>,
    stopped: bool,
    _data_dir: tempfile::TempDir,
}

impl EmbeddedHub {
    fn start(hub_name: &str) -> anyhow::Result<EmbeddedHub> {
        let data_dir = tempfile::Builder::new()
            .prefix("kasi-bench-transfers-")
            .tempdir()
            .context("cannot make a temp dir")?;
        let exe = std::env::current_exe().context("cannot find this executable")?;
        let mut child = std::process::Command::new(exe)
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir.path())
            .args(["--api-listen", "127.0.0.1:0"])
            .args(["--admin-listen", "127.0.0.1:0"])
            .args(["--hub-name", hub_name])
            .args(["--log-level", "warn,kasi::serve=info"])
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
            _data_dir: data_dir,
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

/// FSPIOP `CorrelationId`s (lowercase v4 UUIDs) from a per-run random-ish
/// 60-bit prefix and a 62-bit counter, so that ids never repeat within a
/// run and are unlikely to meet another run's on the same hub.
struct IdGen {
    /// `xxxxxxxx-xxxx-4xxx-`.
    prefix: String,
    next: AtomicU64,
}

impl IdGen {
    fn new(seed: u64) -> IdGen {
        let bits = splitmix64(seed) & ((1 << 60) - 1);
        IdGen {
            prefix: format!(
                "{:08x}-{:04x}-4{:03x}-",
                bits >> 28,
                (bits >> 12) & 0xffff,
                bits & 0xfff
            ),
            next: AtomicU64::new(1),
        }
    }

    fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The id of counter value `n` (below 2^62): the variant nibble and the
    /// last two groups carry it.
    fn format(&self, n: u64) -> String {
        let variant = 0x8000 | ((n >> 48) & 0x3fff);
        format!("{}{variant:04x}-{:012x}", self.prefix, n & 0xffff_ffff_ffff)
    }

    /// The counter value of one of this run's ids; `None` for any other text.
    fn counter_of(&self, id: &str) -> Option<u64> {
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
        Some(((variant & 0x3fff) << 48) | u64::from_str_radix(node, 16).ok()?)
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
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

// ------------------------------------------------------------------ the run

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// How a transfer ended, as seen by its payer.
enum Completion {
    Committed,
    /// The error's key (`HTTP 400`, `3303`, …) and a description.
    Failed(String, String),
}

/// A transfer between its `POST` and its end.
struct Pending {
    payer: u32,
    payee: u32,
    post_sent: Instant,
    fulfil_sent: Option<Instant>,
    /// Started inside the measured window.
    measured: bool,
    done: tokio::sync::oneshot::Sender<Completion>,
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
    /// Commit notifications received inside the window (the throughput).
    committed_in_window: u64,
    /// Transfers started inside the window and committed.
    completed: u64,
    /// Transfers started (window or not).
    started: u64,
    started_in_window: u64,
    /// Failed transfers by error key.
    errors: BTreeMap<String, ErrorTally>,
    timeouts: u64,
    /// `PUT`s that completed nothing: the payee's confirmation copies.
    confirmations: u64,
    /// Error callbacks for transfers already finished (or not ours).
    late_errors: u64,
    /// Forwarded `POST`s for transfers not pending (or not ours).
    stray_posts: u64,
}

impl Stats {
    fn new() -> Stats {
        Stats {
            legs: LEGS
                .iter()
                .map(|_| Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid bounds"))
                .collect(),
            committed_in_window: 0,
            completed: 0,
            started: 0,
            started_in_window: 0,
            errors: BTreeMap::new(),
            timeouts: 0,
            confirmations: 0,
            late_errors: 0,
            stray_posts: 0,
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
}

struct Shared {
    client: HttpClient,
    api: String,
    ids: IdGen,
    names: Vec<String>,
    pending: Mutex<HashMap<u64, Pending>>,
    stats: Mutex<Stats>,
    window: OnceLock<Window>,
    /// Payees' fulfils sent and not yet answered.
    fulfils_in_flight: AtomicU64,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stats(&self) -> MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn measured(&self, at: Instant) -> bool {
        self.window.get().is_some_and(|w| w.contains(at))
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

async fn drive(args: &BenchTransfersArgs, api: &str, admin: &str) -> anyhow::Result<Report> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_timer(TokioTimer::new())
        .build(connector);
    let seed = run_seed();
    // Short, and different for each run against one hub.
    let prefix = format!("b{}{:03x}d", std::process::id(), (seed >> 40) & 0xfff);
    let names: Vec<String> = (0..args.dfsps).map(|i| format!("{prefix}{i}")).collect();
    let shared = Arc::new(Shared {
        client,
        api: api.to_string(),
        ids: IdGen::new(seed),
        names,
        pending: Mutex::new(HashMap::new()),
        stats: Mutex::new(Stats::new()),
        window: OnceLock::new(),
        fulfils_in_flight: AtomicU64::new(0),
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

    if !args.json {
        eprintln!(
            "onboarding {} DFSPs ({}0..) through {admin}, callbacks at http://{callback_addr}",
            args.dfsps, prefix
        );
    }
    onboard(&shared, admin, &args.hub_name, callback_addr).await?;

    let started = Instant::now();
    let window = Window {
        from: started + Duration::from_secs_f64(args.warmup),
        until: started + Duration::from_secs_f64(args.warmup + args.duration),
    };
    let _ = shared.window.set(window);
    if !args.json {
        eprintln!(
            "running {} virtual users: {} s warm-up, {} s measured",
            args.concurrency, args.warmup, args.duration
        );
    }
    let mut users = tokio::task::JoinSet::new();
    for user in 0..args.concurrency {
        let payer = user % args.dfsps;
        let payee = (payer + 1) % args.dfsps;
        let shared = shared.clone();
        users.spawn(async move {
            while Instant::now() < window.until {
                transfer(&shared, payer, payee).await;
            }
        });
    }
    while let Some(joined) = users.join_next().await {
        joined.context("a virtual user panicked")?;
    }
    let drained = window.until.elapsed();
    // A fulfil's answer can come after its commit notification: let the
    // last ones be timed too.
    let deadline = Instant::now() + Duration::from_secs(5);
    while shared.fulfils_in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let stats = std::mem::replace(&mut *shared.stats(), Stats::new());
    Ok(Report {
        stats,
        drain: drained,
        target: "",
        api: String::new(),
        hub_warnings: None,
        hub_problem: None,
    })
}

/// One whole transfer as its payer sees it; records how it ended.
async fn transfer(shared: &Shared, payer: u32, payee: u32) {
    let counter = shared.ids.next();
    let id = shared.ids.format(counter);
    let payer_name = &shared.names[payer as usize];
    let payee_name = &shared.names[payee as usize];
    let now = now_ms();
    let body = format!(
        concat!(
            r#"{{"transferId":"{}","payerFsp":"{}","payeeFsp":"{}","#,
            r#""amount":{{"amount":"{}","currency":"{}"}},"#,
            r#""ilpPacket":"{}","condition":"{}","expiration":"{}"}}"#
        ),
        id,
        payer_name,
        payee_name,
        1 + counter % 100,
        CURRENCY,
        ILP_PACKET,
        CONDITION,
        fspiop::format_date_time(now + 60_000),
    );
    let request = fspiop_request(
        Method::POST,
        &format!("{}/transfers", shared.api),
        payer_name,
        payee_name,
        true,
        body,
    );
    let (done, mut outcome) = tokio::sync::oneshot::channel();
    let sent = Instant::now();
    let measured = shared.measured(sent);
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
    {
        let mut stats = shared.stats();
        stats.started += 1;
        stats.started_in_window += u64::from(measured);
    }
    let deadline = tokio::time::Instant::from_std(sent + TRANSFER_TIMEOUT);
    let answered = match request {
        Ok(request) => tokio::time::timeout_at(deadline, send(&shared.client, request)).await,
        Err(error) => Ok(Err(("request".into(), error))),
    };
    let result = match answered {
        Err(_) => None,
        Ok(Err((key, description))) => Some(Completion::Failed(key, description)),
        Ok(Ok((status, _))) if status == StatusCode::ACCEPTED => {
            if measured {
                shared.stats().record(PREPARE, sent.elapsed());
            }
            match tokio::time::timeout_at(deadline, &mut outcome).await {
                Ok(Ok(completion)) => Some(completion),
                Ok(Err(_)) => Some(Completion::Failed(
                    "lost".into(),
                    "the transfer was dropped without an outcome".into(),
                )),
                Err(_) => None,
            }
        }
        Ok(Ok((status, body))) => Some(Completion::Failed(
            format!("HTTP {}", status.as_u16()),
            describe_error_body(&body),
        )),
    };
    // Whoever removes the pending entry decides the outcome: a handler that
    // got there first has sent it.
    let result = match result {
        Some(completion) => {
            shared.pending().remove(&counter);
            completion
        }
        None => match shared.pending().remove(&counter) {
            Some(_) => {
                shared.stats().timeouts += 1;
                return;
            }
            None => match outcome.try_recv() {
                Ok(completion) => completion,
                Err(_) => {
                    shared.stats().timeouts += 1;
                    return;
                }
            },
        },
    };
    if let Completion::Failed(key, description) = result {
        shared.stats().error(key, description);
    }
}

/// Sends a request and reads the whole answer; a transport failure is
/// `(key, description)`.
async fn send(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), (String, String)> {
    let response = client
        .request(request)
        .await
        .map_err(|error| ("transport".to_string(), error_chain(&error)))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|error| ("transport".to_string(), error_chain(&error)))?
        .to_bytes();
    Ok((status, body))
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// An FSPIOP transfers request with the headers a DFSP sends.
fn fspiop_request(
    method: Method,
    url: &str,
    source: &str,
    destination: &str,
    accept: bool,
    body: String,
) -> Result<Request<Full<Bytes>>, String> {
    let mut builder = Request::builder()
        .method(method)
        .uri(url)
        .header(http::header::CONTENT_TYPE, CONTENT_TYPE)
        .header(
            http::header::DATE,
            httpdate::fmt_http_date(SystemTime::now()),
        )
        .header("fspiop-source", source)
        .header("fspiop-destination", destination);
    if accept {
        builder = builder.header(http::header::ACCEPT, ACCEPT);
    }
    builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|error| error.to_string())
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(rename = "errorInformation")]
    error_information: ErrorInformation,
}

#[derive(Deserialize)]
struct ErrorInformation {
    #[serde(rename = "errorCode")]
    error_code: String,
    #[serde(rename = "errorDescription", default)]
    error_description: String,
}

fn describe_error_body(body: &[u8]) -> String {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(error) => format!(
            "{} {}",
            error.error_information.error_code, error.error_information.error_description
        ),
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
    }
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
        .with_state(shared)
}

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
        shared.stats().stray_posts += 1;
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
    shared.fulfils_in_flight.fetch_add(1, Ordering::SeqCst);
    tokio::spawn(async move {
        fulfil(&shared, counter, payer, payee, measured).await;
        shared.fulfils_in_flight.fetch_sub(1, Ordering::SeqCst);
    });
    StatusCode::OK
}

/// The payee's `PUT /transfers/{ID}` with the fulfilment.
async fn fulfil(shared: &Shared, counter: u64, payer: u32, payee: u32, measured: bool) {
    let id = shared.ids.format(counter);
    let body = format!(
        r#"{{"fulfilment":"{FULFILMENT}","completedTimestamp":"{}","transferState":"COMMITTED"}}"#,
        fspiop::format_date_time(now_ms())
    );
    let request = fspiop_request(
        Method::PUT,
        &format!("{}/transfers/{id}", shared.api),
        &shared.names[payee as usize],
        &shared.names[payer as usize],
        false,
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
    {
        let mut stats = shared.stats();
        if transfer.measured {
            stats.completed += 1;
            stats.record(E2E, received.duration_since(transfer.post_sent));
            if let Some(fulfil_sent) = transfer.fulfil_sent {
                stats.record(NOTIFY, received.saturating_duration_since(fulfil_sent));
            }
        }
        if shared.measured(received) {
            stats.committed_in_window += 1;
        }
    }
    let _ = transfer.done.send(Completion::Committed);
    StatusCode::OK
}

/// An error callback, to the payer or the payee: the transfer failed.
async fn on_error(
    State(shared): State<Arc<Shared>>,
    Path((_dfsp, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    let (key, description) = match serde_json::from_slice::<ErrorBody>(&body) {
        Ok(error) => (
            error.error_information.error_code,
            error.error_information.error_description,
        ),
        Err(_) => ("unreadable error".into(), describe_error_body(&body)),
    };
    let failed = shared
        .ids
        .counter_of(&id)
        .is_some_and(|counter| shared.fail(counter, key, description));
    if !failed {
        shared.stats().late_errors += 1;
    }
    StatusCode::OK
}

// ---------------------------------------------------------------- onboarding

/// Admin API requests as a Mojaloop golden-path collection makes them.
async fn admin_request(
    client: &HttpClient,
    method: Method,
    url: &str,
    body: Option<Value>,
) -> anyhow::Result<(StatusCode, Bytes)> {
    let builder = Request::builder()
        .method(method.clone())
        .uri(url)
        .header(http::header::ACCEPT, "application/json");
    let request = match body {
        Some(body) => builder
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string()))),
        None => builder.body(Full::new(Bytes::new())),
    }
    .with_context(|| format!("bad URL {url}"))?;
    let answer = tokio::time::timeout(Duration::from_secs(30), send(client, request))
        .await
        .with_context(|| format!("{method} {url}: no answer within 30 s"))?;
    answer.map_err(|(_, description)| anyhow::anyhow!("{method} {url}: {description}"))
}

/// Expects a 2xx answer; with `tolerate_existing`, also an error saying the
/// thing exists already (a second run against the same hub).
async fn admin_call(
    client: &HttpClient,
    method: Method,
    url: &str,
    body: Option<Value>,
    tolerate_existing: bool,
) -> anyhow::Result<Bytes> {
    let (status, answer) = admin_request(client, method.clone(), url, body).await?;
    let exists = || {
        String::from_utf8_lossy(&answer)
            .to_ascii_lowercase()
            .contains("already")
    };
    if status.is_success() || (tolerate_existing && status.is_client_error() && exists()) {
        Ok(answer)
    } else {
        bail!(
            "{method} {url}: {} {}",
            status.as_u16(),
            String::from_utf8_lossy(&answer)
        )
    }
}

async fn onboard(
    shared: &Arc<Shared>,
    admin: &str,
    hub_name: &str,
    callback_addr: SocketAddr,
) -> anyhow::Result<()> {
    let client = &shared.client;
    for kind in ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"] {
        admin_call(
            client,
            Method::POST,
            &format!("{admin}/participants/{hub_name}/accounts"),
            Some(json!({ "type": kind, "currency": CURRENCY })),
            true,
        )
        .await?;
    }
    admin_call(
        client,
        Method::POST,
        &format!("{admin}/settlementModels"),
        Some(json!({
            "name": format!("DEFERREDNET{CURRENCY}"),
            "settlementGranularity": "NET",
            "settlementInterchange": "MULTILATERAL",
            "settlementDelay": "DEFERRED",
            "requireLiquidityCheck": true,
            "ledgerAccountType": "POSITION",
            "autoPositionReset": true,
            "currency": CURRENCY,
            "settlementAccountType": "SETTLEMENT",
        })),
        true,
    )
    .await?;

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
    let client = &shared.client;
    let participant = format!("{admin}/participants/{name}");
    admin_call(
        client,
        Method::POST,
        &format!("{admin}/participants"),
        Some(json!({ "name": name, "currency": CURRENCY })),
        false,
    )
    .await?;
    admin_call(
        client,
        Method::POST,
        &format!("{participant}/initialPositionAndLimits"),
        Some(json!({
            "currency": CURRENCY,
            "limit": { "type": "NET_DEBIT_CAP", "value": LARGE_AMOUNT.parse::<u64>().expect("a number") },
            "initialPosition": 0,
        })),
        false,
    )
    .await?;
    let base = format!("http://{callback_addr}/{name}/transfers");
    for (kind, value) in [
        ("FSPIOP_CALLBACK_URL_TRANSFER_POST", base.clone()),
        (
            "FSPIOP_CALLBACK_URL_TRANSFER_PUT",
            format!("{base}/{{{{transferId}}}}"),
        ),
        (
            "FSPIOP_CALLBACK_URL_TRANSFER_ERROR",
            format!("{base}/{{{{transferId}}}}/error"),
        ),
    ] {
        admin_call(
            client,
            Method::POST,
            &format!("{participant}/endpoints"),
            Some(json!({ "type": kind, "value": value })),
            false,
        )
        .await?;
    }
    let accounts = admin_call(
        client,
        Method::GET,
        &format!("{participant}/accounts"),
        None,
        false,
    )
    .await?;
    let accounts: Vec<Value> = serde_json::from_slice(&accounts)
        .with_context(|| format!("GET {participant}/accounts: not a JSON array"))?;
    let settlement = accounts
        .iter()
        .find(|account| {
            account["ledgerAccountType"] == "SETTLEMENT" && account["currency"] == CURRENCY
        })
        .and_then(|account| account["id"].as_u64())
        .with_context(|| format!("{name} has no {CURRENCY} SETTLEMENT account"))?;
    let funds_id = shared.ids.format(shared.ids.next());
    admin_call(
        client,
        Method::POST,
        &format!("{participant}/accounts/{settlement}"),
        Some(json!({
            "transferId": funds_id,
            "externalReference": "kasi bench transfers",
            "action": "recordFundsIn",
            "reason": "initial liquidity",
            "amount": { "amount": LARGE_AMOUNT, "currency": CURRENCY },
        })),
        false,
    )
    .await?;
    Ok(())
}

// ------------------------------------------------------------------- report

/// Percentiles of one leg, in ms.
#[derive(Debug, PartialEq)]
struct LegSummary {
    count: u64,
    p50_ms: f64,
    p90_ms: f64,
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
            p50_ms: ms(histogram.value_at_quantile(0.5)),
            p90_ms: ms(histogram.value_at_quantile(0.9)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            max_ms: ms(histogram.max()),
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "count": self.count,
            "p50_ms": self.p50_ms,
            "p90_ms": self.p90_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
        })
    }
}

struct Report {
    stats: Stats,
    /// From the end of the window until the last transfer ended.
    drain: Duration,
    target: &'static str,
    api: String,
    /// Warnings the embedded hub logged.
    hub_warnings: Option<u64>,
    /// The embedded hub did not stop cleanly.
    hub_problem: Option<String>,
}

impl Report {
    fn errors(&self) -> u64 {
        self.stats.errors.values().map(|tally| tally.count).sum()
    }

    fn failed(&self) -> u64 {
        self.errors() + self.stats.timeouts
    }

    fn throughput(&self, args: &BenchTransfersArgs) -> f64 {
        self.stats.committed_in_window as f64 / args.duration
    }

    fn print(&self, args: &BenchTransfersArgs) {
        let stats = &self.stats;
        println!(
            "kasi bench transfers: {} DFSPs, {} virtual users, {} s warm-up + {} s measured, hub {} ({})",
            args.dfsps, args.concurrency, args.warmup, args.duration, self.api, self.target
        );
        println!();
        println!(
            "  {:<8} {:>9} {:>8} {:>8} {:>8} {:>8}",
            "leg", "count", "p50 ms", "p90 ms", "p99 ms", "max ms"
        );
        for (name, histogram) in LEGS.iter().zip(&stats.legs) {
            let leg = LegSummary::of(histogram);
            println!(
                "  {:<8} {:>9} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                name, leg.count, leg.p50_ms, leg.p90_ms, leg.p99_ms, leg.max_ms
            );
        }
        println!();
        println!(
            "  throughput: {:.0} transfers/s ({} commits in the {} s window)",
            self.throughput(args),
            stats.committed_in_window,
            args.duration
        );
        println!(
            "  transfers: {} started ({} in the window, {} of them committed), {} failed, {} timed out; last ended {:.0} ms after the window",
            stats.started,
            stats.started_in_window,
            stats.completed,
            self.errors(),
            stats.timeouts,
            self.drain.as_secs_f64() * 1000.0
        );
        for (key, tally) in &stats.errors {
            println!("  error {key}: {} (first: {})", tally.count, tally.first);
        }
        if stats.late_errors + stats.stray_posts > 0 {
            println!(
                "  callbacks for finished or unknown transfers: {} errors, {} prepares",
                stats.late_errors, stats.stray_posts
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
        let stats = &self.stats;
        let legs: serde_json::Map<String, Value> = LEGS
            .iter()
            .zip(&stats.legs)
            .map(|(name, histogram)| (name.to_string(), LegSummary::of(histogram).to_json()))
            .collect();
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
        json!({
            "target": self.target,
            "api": self.api,
            "dfsps": args.dfsps,
            "concurrency": args.concurrency,
            "warmup_s": args.warmup,
            "duration_s": args.duration,
            "throughput_per_s": self.throughput(args),
            "e2e_p99_ms": LegSummary::of(&stats.legs[E2E]).p99_ms,
            "committed_in_window": stats.committed_in_window,
            "started": stats.started,
            "started_in_window": stats.started_in_window,
            "completed": stats.completed,
            "errors": self.errors(),
            "timeouts": stats.timeouts,
            "errors_by_code": errors_by_code,
            "payee_confirmations": stats.confirmations,
            "late_error_callbacks": stats.late_errors,
            "stray_prepares": stats.stray_posts,
            "drain_ms": self.drain.as_secs_f64() * 1000.0,
            "hub_warnings": self.hub_warnings,
            "hub_problem": self.hub_problem,
            "legs": legs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_correlation_ids_and_round_trip() {
        for seed in [0, 1, 42, u64::MAX, run_seed()] {
            let ids = IdGen::new(seed);
            for n in [
                0,
                1,
                255,
                0xffff_ffff_ffff,
                1 << 48,
                (1 << 62) - 1,
                123_456_789,
            ] {
                let id = ids.format(n);
                assert!(fspiop::is_correlation_id(&id), "{id}");
                assert_eq!(&id[14..15], "4", "{id}");
                assert_eq!(ids.counter_of(&id), Some(n), "{id}");
                assert!(ledger::TransferId::parse(&id).is_some(), "{id}");
            }
        }
        let ids = IdGen::new(7);
        let first = ids.format(ids.next());
        let second = ids.format(ids.next());
        assert_ne!(first, second);
        assert_eq!(first[..19], second[..19]);
        // Other runs' ids and other text are not ours.
        let other = IdGen::new(8);
        assert_eq!(ids.counter_of(&other.format(1)), None);
        assert_eq!(ids.counter_of(&first.to_uppercase()), None);
        assert_eq!(ids.counter_of(&first[..35]), None);
        assert_eq!(ids.counter_of(""), None);
        let mut wrong_variant = first.clone();
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
        let body = format!(
            r#"{{"transferId":"{id}","payerFsp":"b1d0","payeeFsp":"b1d1","amount":{{"amount":"10","currency":"USD"}},"ilpPacket":"{ILP_PACKET}","condition":"{CONDITION}","expiration":"{}"}}"#,
            fspiop::format_date_time(now_ms() + 60_000)
        );
        let parsed = fspiop::parse_transfer_prepare(body.as_bytes()).expect("valid");
        assert_eq!(parsed.transfer_id.to_string(), id);
        let fulfil = format!(
            r#"{{"fulfilment":"{FULFILMENT}","completedTimestamp":"{}","transferState":"COMMITTED"}}"#,
            fspiop::format_date_time(now_ms())
        );
        fspiop::parse_transfer_fulfil(fulfil.as_bytes()).expect("valid");
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
        assert!(close(leg.p99_ms, 990.0), "{leg:?}");
        assert!(close(leg.max_ms, 1000.0), "{leg:?}");

        let empty = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap();
        assert_eq!(
            LegSummary::of(&empty),
            LegSummary {
                count: 0,
                p50_ms: 0.0,
                p90_ms: 0.0,
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
    fn error_bodies_are_described() {
        let body = br#"{"errorInformation":{"errorCode":"3100","errorDescription":"Generic validation error - x"}}"#;
        assert_eq!(
            describe_error_body(body),
            "3100 Generic validation error - x"
        );
        assert_eq!(describe_error_body(b"oops"), "oops");
    }
}
