//! One `kasi bench` run: the null-hub baseline, the hub under test, the
//! run's shared state and its driver, and what it prints and saves.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use tokio::sync::oneshot;

use crate::callbacks::callbacks;
use crate::flows::Flow;
use crate::ids::{parse_party_identifier, party_identifier, run_seed, splitmix64, IdGen, PartyRef};
use crate::load::{Load, Plan};
use crate::loops::{run_plan, search_breakpoint};
use crate::monitor::{reset_hub_stages, HubGauges};
use crate::onboard::{check_positions, onboard, PositionCheck};
use crate::security::{Choice, Identities, Material};
use crate::stats::{Stats, Window};
use crate::summary::Report;
use crate::target::{start_null_hub, EmbeddedHub, HubProcess};
use crate::waiters::{Completion, Patch, Pending, Waiters};
use crate::{shape_of, BenchTransfersArgs, Shape};

pub(crate) const CURRENCY: &str = "USD";
/// The currency the `fx` flow's payees are paid in: every payment converts
/// [`CURRENCY`] into it through an FXP.
pub(crate) const TARGET_CURRENCY: &str = "TZS";
/// The `fx` flow's FXPs give this many [`TARGET_CURRENCY`] for one
/// [`CURRENCY`]: a whole number, so that every conversion is exact.
pub(crate) const FX_RATE: i128 = 2500;

/// What `source` (an FSPIOP amount in [`CURRENCY`]) converts to at
/// [`FX_RATE`], exactly; `None` if it is no amount or more than a transfer
/// carries.
pub(crate) fn converted(source: &str) -> Option<ledger::Amount> {
    let source = ledger::Amount::parse_fspiop(source).ok()?;
    let target = ledger::Amount::from_units(source.units().checked_mul(FX_RATE)?);
    target.is_valid_transfer_amount().then_some(target)
}

/// The null hub's throughput, measured in this run for the ratio.
pub(crate) struct Baseline {
    pub(crate) throughput_per_s: f64,
    /// The null hub's CPU per flow, when it ran as a child process.
    pub(crate) us_per_flow: Option<f64>,
    pub(crate) note: String,
}

pub fn run(args: BenchTransfersArgs) -> anyhow::Result<ExitCode> {
    let shape = shape_of(&args).map_err(anyhow::Error::msg)?;
    if let (Some(path), Some(admin)) = (&args.admin_token_file, &args.admin) {
        crate::dfsp::present_admin_token(admin, crate::dfsp::read_admin_token_file(path)?);
    }
    let started_at = SystemTime::now();
    let chatty = !args.json && !args.quiet;
    let choice = Choice {
        tls: args.tls,
        hub_jws: args.hub_jws,
        dfsp_jws: args.dfsp_jws,
        verify_every: args.verify_every,
    };
    // Made before the hub starts (it reads the files) and removed after it
    // stops.
    let material = Material::new(choice)?;
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
        let plain = Material::new(Choice::default())?;
        let report = runtime.block_on(drive(
            &baseline_args,
            &Shape::Plan(plan),
            &api,
            &admin,
            pid,
            &plain,
        ));
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
                store: args.store.as_deref(),
                extra: material.serve_args(&args.hub_name)?,
            })?;
            let scheme = material.scheme();
            let urls = (
                format!("{scheme}://{}", hub.api),
                format!("{scheme}://{}", hub.admin),
            );
            embedded = Some(hub);
            (urls.0, urls.1, "embedded")
        }
    };

    let hub_pid = embedded.as_ref().map(|hub| hub.child.id());
    let outcome = runtime.block_on(drive(&args, &shape, &api, &admin, hub_pid, &material));
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
        let sections = crate::report::hub_sections(&json);
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
        crate::report::write_folder(&dir, &json)?;
        if !args.json {
            println!(
                "  report: {} (report.md: the hub's stage table and sampled waterfalls)",
                dir.display()
            );
        }
    }
    Ok(
        if report.failed() == 0
            && report.security.failed() == 0
            && report.hub_problem.is_none()
            && (report.positions.net_zero || report.positions.not_applicable)
        {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

pub(crate) fn millis_since_epoch(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

pub(crate) struct Shared {
    /// Who the DFSPs are on the wire: their clients (certificates) and
    /// keys; the admin API's client.
    pub(crate) identities: Arc<Identities>,
    pub(crate) api: String,
    /// The hub's admin address (its `/metrics`, when it has one).
    pub(crate) admin: String,
    /// The latest scrape of the hub's gauges, for the monitor's next point.
    pub(crate) hub_gauges: Mutex<Option<HubGauges>>,
    pub(crate) flow: Flow,
    pub(crate) ids: IdGen,
    /// The DFSPs' names, then (for `fx`) the FXPs'.
    pub(crate) names: Vec<String>,
    /// How many of `names` are DFSPs that pay and are paid.
    pub(crate) dfsps: u32,
    /// How many FXPs follow them in `names`.
    pub(crate) fxps: u32,
    /// DFSP name → index into `names`.
    pub(crate) index_of: HashMap<String, u32>,
    /// Parties per DFSP.
    pub(crate) parties: u32,
    /// This run's tag in the party identifiers.
    pub(crate) party_tag: u32,
    /// `--ilp-customers`: the prepares' packets name two of these (0: none).
    pub(crate) ilp_customers: u32,
    /// Per payee DFSP: the lookups' round robin over its parties.
    pub(crate) next_party: Vec<AtomicU64>,
    pub(crate) pending: Mutex<HashMap<u64, Pending>>,
    /// Conversions (`POST /fxTransfers`) until the FXP's acceptance reaches
    /// the payer, by the conversion id's counter.
    pub(crate) conversions: Mutex<HashMap<u64, Pending>>,
    /// FXPs waiting for the hub's `PATCH /fxTransfers/{ID}`, by the
    /// conversion id's counter.
    pub(crate) patches: Mutex<HashMap<u64, Patch>>,
    /// Lookups by (payer, party looked up).
    pub(crate) lookups: Waiters<(u32, PartyRef)>,
    /// Quotes by the quote id's counter.
    pub(crate) quotes: Waiters<u64>,
    /// FX quotes by the conversion request id's counter; the waiter's
    /// `payee` is the FXP.
    pub(crate) fx_quotes: Waiters<u64>,
    /// Transaction requests by the request id's counter; the waiter's
    /// `payer` is the DFSP that asked (the payee) and waits for the answer.
    pub(crate) transaction_requests: Waiters<u64>,
    /// Batch registrations waiting for `PUT /participants/{requestId}`, by
    /// the request id's counter: the answer's body, or the error.
    pub(crate) registrations: Mutex<HashMap<u64, oneshot::Sender<Result<Bytes, String>>>>,
    pub(crate) tickets: AtomicU64,
    pub(crate) stats: Mutex<Stats>,
    pub(crate) window: Mutex<Option<Window>>,
    /// The hub's process, when it is a child of this one (its CPU time is
    /// then measured over the window).
    pub(crate) hub_pid: Option<u32>,
    /// `--count`: flows still to start in the window.
    pub(crate) budget: Option<AtomicU64>,
    /// No more flows start (the count is reached).
    pub(crate) stop: std::sync::atomic::AtomicBool,
    /// Payees' answers (fulfils, `PUT /parties`, `PUT /quotes`) sent and not
    /// yet answered.
    pub(crate) answers_in_flight: AtomicU64,
}

impl Shared {
    pub(crate) fn pending(&self) -> MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn conversions(&self) -> MutexGuard<'_, HashMap<u64, Pending>> {
        self.conversions.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn patches(&self) -> MutexGuard<'_, HashMap<u64, Patch>> {
        self.patches.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The FXP that converts `payer`'s payments.
    pub(crate) fn fxp_for(&self, payer: u32) -> u32 {
        self.dfsps + payer % self.fxps.max(1)
    }

    pub(crate) fn stats(&self) -> MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn registrations(
        &self,
    ) -> MutexGuard<'_, HashMap<u64, oneshot::Sender<Result<Bytes, String>>>> {
        self.registrations.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn window(&self) -> Option<Window> {
        *self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a flow due at `at` may start: always in the warm-up; in the
    /// window, while `--count` allows.
    pub(crate) fn admit(&self, at: Instant) -> bool {
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

    pub(crate) fn measured(&self, at: Instant) -> bool {
        self.window().is_some_and(|w| w.contains(at))
    }

    pub(crate) fn dfsp(&self, name: &str) -> Option<u32> {
        self.index_of.get(name).copied()
    }

    /// Sends an FSPIOP request as the DFSP its FSPIOP-Source names: on its
    /// connections, with its signature when DFSPs sign.
    pub(crate) async fn send(
        &self,
        request: http::Request<http_body_util::Full<Bytes>>,
    ) -> Result<(http::StatusCode, Bytes), (String, String)> {
        let source = request
            .headers()
            .get("fspiop-source")
            .and_then(|value| value.to_str().ok())
            .and_then(|name| self.dfsp(name));
        self.identities.send_as(source, request).await
    }

    pub(crate) fn party_id(&self, party: PartyRef) -> String {
        party_identifier(self.party_tag, party)
    }

    /// A party identifier of this run, of one of its DFSPs (registered or
    /// not: the hub's 3204 for a party nobody holds must still reach the
    /// lookup that asked).
    pub(crate) fn party(&self, identifier: &str) -> Option<PartyRef> {
        parse_party_identifier(self.party_tag, identifier)
            .filter(|party| party.dfsp < self.names.len() as u32)
    }

    /// The next party of `payee` to look up.
    pub(crate) fn next_party_of(&self, payee: u32) -> PartyRef {
        let n = self.next_party[payee as usize].fetch_add(1, Ordering::Relaxed);
        PartyRef {
            dfsp: payee,
            index: (n % u64::from(self.parties)) as u32,
        }
    }

    /// Ends a pending transfer as failed; its payer records the error.
    pub(crate) fn fail(&self, counter: u64, key: String, description: String) -> bool {
        let removed = self.pending().remove(&counter);
        match removed {
            Some(pending) => {
                let _ = pending.done.send(Completion::Failed(key, description));
                true
            }
            None => false,
        }
    }

    /// Ends a pending conversion, or the FXP's wait for its `PATCH`, as
    /// failed; the payer records the error.
    pub(crate) fn fail_conversion(&self, counter: u64, key: String, description: String) -> bool {
        let removed = self.conversions().remove(&counter);
        if let Some(conversion) = removed {
            let _ = conversion.done.send(Completion::Failed(key, description));
            return true;
        }
        let removed = self.patches().remove(&counter);
        match removed {
            Some(patch) => {
                let _ = patch.done.send(Completion::Failed(key, description));
                true
            }
            None => false,
        }
    }
}

pub(crate) async fn drive(
    args: &BenchTransfersArgs,
    shape: &Shape,
    api: &str,
    admin: &str,
    hub_pid: Option<u32>,
    material: &Material,
) -> anyhow::Result<Report> {
    let seed = run_seed();
    // Short, and different for each run against one hub.
    let prefix = format!("b{}{:03x}d", std::process::id(), (seed >> 40) & 0xfff);
    let fxps = if args.flow.converts() { args.fxps } else { 0 };
    let names: Vec<String> = (0..args.dfsps)
        .map(|i| format!("{prefix}{i}"))
        .chain((0..fxps).map(|i| format!("{prefix}fxp{i}")))
        .collect();
    let index_of = names
        .iter()
        .enumerate()
        .map(|(i, name)| (name.clone(), i as u32))
        .collect();
    let api_base_path = api
        .parse::<http::Uri>()
        .map(|uri| uri.path().to_string())
        .unwrap_or_default();
    let identities = Arc::new(material.identities(
        &names,
        &args.hub_name,
        material.admin_client(),
        &api_base_path,
        args.connections_per_dfsp as usize,
    )?);
    let shared = Arc::new(Shared {
        identities: identities.clone(),
        api: api.to_string(),
        admin: admin.to_string(),
        hub_gauges: Mutex::new(None),
        flow: args.flow,
        ids: IdGen::new(seed),
        index_of,
        parties: args.parties,
        party_tag: (splitmix64(seed ^ 0x5eed) % 1_000_000) as u32,
        ilp_customers: args.ilp_customers,
        next_party: (0..args.dfsps).map(|_| AtomicU64::new(0)).collect(),
        names,
        dfsps: args.dfsps,
        fxps,
        pending: Mutex::new(HashMap::new()),
        conversions: Mutex::new(HashMap::new()),
        patches: Mutex::new(HashMap::new()),
        lookups: Waiters::new(),
        quotes: Waiters::new(),
        fx_quotes: Waiters::new(),
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
    let mut app = callbacks(shared.clone());
    if material.choice.hub_jws.is_some() || material.choice.dfsp_jws.is_some() {
        app = app.layer(axum::middleware::from_fn_with_state(
            identities.clone(),
            crate::security::check_signature,
        ));
    }
    let failed_handshakes = Arc::new(AtomicU64::new(0));
    let callback_root = match material.callback_server()? {
        None => {
            tokio::spawn(async move {
                if let Err(error) = axum::serve(listener, app).tcp_nodelay(true).await {
                    eprintln!("kasi: the callback server stopped: {error}");
                }
            });
            format!("http://{callback_addr}")
        }
        Some(tls) => {
            tokio::spawn(crate::security::serve_tls(
                listener,
                tls,
                app,
                failed_handshakes.clone(),
            ));
            format!("https://{callback_addr}")
        }
    };

    if !args.json && !args.quiet {
        let parties = if args.flow.discovers() {
            format!(", {} parties each", args.parties)
        } else {
            String::new()
        };
        let fx = if fxps > 0 {
            format!(
                ", each in {CURRENCY} and {TARGET_CURRENCY}, and {fxps} FXP(s) ({prefix}fxp0..) converting {CURRENCY} to {TARGET_CURRENCY} at {FX_RATE}"
            )
        } else {
            String::new()
        };
        eprintln!(
            "onboarding {} DFSPs ({}0..{parties}{fx}) through {admin}, callbacks at {callback_root} ({})",
            args.dfsps,
            prefix,
            material.choice.describe()
        );
    }
    let onboarding = Instant::now();
    onboard(&shared, admin, &args.hub_name, &callback_root).await?;
    let onboarding = onboarding.elapsed();

    // Whether the hub keeps per-stage statistics (kasi's; other hubs answer
    // 404); each run clears and reads them over its own window.
    let hub_admin = reset_hub_stages(&shared, admin).await.then_some(admin);
    let jws_before = crate::monitor::JwsPool::read(&shared, admin).await;
    let (run, breakpoint) = match shape {
        Shape::Plan(plan) => (run_plan(&shared, args, plan, 0.0, hub_admin).await?, None),
        Shape::Breakpoint(search) => {
            let (run, result) = search_breakpoint(&shared, args, search, hub_admin).await?;
            (run, Some(result))
        }
    };
    // The whole load, warm-up included (the counters have no window).
    let jws_pool = match (
        jws_before,
        crate::monitor::JwsPool::read(&shared, admin).await,
    ) {
        (Some(before), Some(after)) => Some(before.since(&after)),
        _ => None,
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
        jws_pool,
        security: crate::security::SecuritySummary::of(
            &identities,
            failed_handshakes.load(Ordering::Relaxed),
        ),
    })
}
