//! `kasi bench ledger`: ledger + store throughput and submit-to-durable
//! latency, in-process, with synthetic DFSPs.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::{Args, ValueEnum};
use engine::{Engine, EngineConfig, EngineError, EngineHandle, PipelineThreads, StatsSnapshot};
use hdrhistogram::Histogram;
use ledger::{
    AccountId, AccountKind, Amount, Command, Currency, FspName, Fulfil, Fulfilment, Funds,
    FundsMemo, Ledger, Limits, Outcome, PartyIds, Prepare, RequestHash, TransferId, TransferState,
};
use serde_json::json;
use store::sqlite::{SqliteOptions, SqliteStore};

#[derive(Args)]
pub struct BenchLedgerArgs {
    /// Simulated DFSPs (8 to 1,000 are typical); each pays the others in turn.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=10_000))]
    dfsps: u32,

    /// Transfers per phase. The store holds twice this many at the end, which
    /// is what the recovery time is measured on.
    #[arg(long, default_value_t = 500_000)]
    transfers: u64,

    /// Submissions in flight at once, like that many concurrent API requests.
    #[arg(long, default_value_t = 1024)]
    window: usize,

    /// Commands per submission (1 = one API request per command).
    #[arg(long, default_value_t = 1)]
    submission_size: usize,

    /// Most commands per ledger batch.
    #[arg(long, default_value_t = 8192)]
    max_batch: usize,

    /// Durability of the runs: `on` (fsync every commit), `off` (reference
    /// only: a crash could lose acknowledged work), or `both`.
    #[arg(long, value_enum, default_value_t = FsyncMode::Both)]
    fsync: FsyncMode,

    /// Keep the store here instead of a temporary directory (must be new).
    #[arg(long)]
    data_dir: Option<PathBuf>,

    /// Run against this store instead: `sqlite:DIR` (like --data-dir) or a
    /// PostgreSQL URL naming an empty database (kasi creates its schema;
    /// `--fsync off` runs its commits with synchronous_commit off).
    #[arg(long, value_name = "STORE", conflicts_with = "data_dir")]
    store: Option<String>,

    /// Threads carrying the pipeline (as `kasi serve --pipeline-threads`):
    /// 2, the ledger thread applying while the store thread commits; 1,
    /// one thread doing both in turn.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    pipeline_threads: u8,

    /// Print the summary as one JSON object on standard output.
    #[arg(long)]
    json: bool,

    /// Instead of the three phases: build a history of this many transfers
    /// (each prepared and fulfilled, with a 1 s retention horizon so the
    /// ledger's memory stays flat; fsync off, since building it is not what
    /// is measured), then time recovery from the whole history, the history
    /// snapshot's first build, and recovery from the snapshot; up to
    /// 2,000,000 transfers, also recovery with all of them within a 24 h
    /// horizon, without and with a snapshot. Keep the store with
    /// --data-dir or --store to time `kasi serve` on it.
    #[arg(long, value_name = "TRANSFERS", conflicts_with_all = ["fsync", "print_durable"])]
    history: Option<u64>,

    /// Print `<transfer-id> <STATE>` on standard output as each outcome
    /// becomes durable (used by the crash test).
    #[arg(long, hide = true)]
    print_durable: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FsyncMode {
    On,
    Off,
    Both,
}

pub fn run(args: BenchLedgerArgs) -> anyhow::Result<ExitCode> {
    if args.window == 0 || args.submission_size == 0 || args.submission_size > args.max_batch {
        bail!("--window and --submission-size must be at least 1, and --submission-size at most --max-batch");
    }
    if let Some(history) = args.history {
        return run_history(&args, history);
    }
    let modes: &[bool] = match args.fsync {
        FsyncMode::On => &[true],
        FsyncMode::Off => &[false],
        FsyncMode::Both => &[true, false],
    };
    if (args.data_dir.is_some() || args.store.is_some()) && modes.len() > 1 {
        bail!(
            "--data-dir and --store keep one run's store: pass --fsync on or --fsync off with it"
        );
    }
    if !args.json && !args.print_durable {
        println!(
            "kasi bench ledger: {} DFSPs, {} transfers per phase, {} submissions in flight x {} command(s), batches up to {}",
            args.dfsps, args.transfers, args.window, args.submission_size, args.max_batch
        );
    }
    let mut runs = Vec::new();
    for &fsync in modes {
        let report = run_once(&args, fsync)?;
        if !args.json && !args.print_durable {
            report.print();
        }
        runs.push(report);
    }
    if args.json {
        let durable = runs.iter().find(|run| run.fsync).unwrap_or(&runs[0]);
        let summary = json!({
            "dfsps": args.dfsps,
            "transfers_per_phase": args.transfers,
            "window": args.window,
            "submission_size": args.submission_size,
            "transfers_per_s": durable.phases[2].rate_per_s,
            "p99_ms": durable.phases[2].quantile_ms(0.99),
            "fsync": durable.fsync,
            "runs": runs.iter().map(Report::to_json).collect::<Vec<_>>(),
        });
        println!("{summary}");
    }
    let errors: u64 = runs
        .iter()
        .flat_map(|run| &run.phases)
        .map(|phase| phase.errors)
        .sum();
    Ok(if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Where a run keeps its store: `--data-dir` (which must hold none yet) or
/// a temporary directory, removed when the returned guard drops.
fn new_data_dir(
    data_dir: Option<&std::path::Path>,
) -> anyhow::Result<(std::path::PathBuf, Option<tempfile::TempDir>)> {
    match data_dir {
        Some(dir) if dir.join(store::sqlite::DATABASE_FILE).exists() => bail!(
            "{} holds a store already; the benchmark needs a new directory",
            dir.display()
        ),
        Some(dir) => Ok((dir.to_path_buf(), None)),
        None => {
            let temporary = tempfile::Builder::new()
                .prefix("kasi-bench-")
                .tempdir()
                .context("cannot make a temp dir")?;
            Ok((temporary.path().to_path_buf(), Some(temporary)))
        }
    }
}

/// The horizon of `--history`'s runs and recoveries.
const HISTORY_RETENTION_MS: i64 = 1_000;

/// The horizon of `--history`'s recoveries with every transfer within it
/// (the default `--transfer-retention`).
const IN_HORIZON_RETENTION_MS: i64 = 24 * 3_600_000;

/// Most transfers `--history` also recovers with all of them within the
/// horizon (the default `--finished-transfers-in-memory`).
const IN_HORIZON_MAX: u64 = 2_000_000;

/// `--history`'s store: SQLite (`--data-dir` or a temporary directory) or
/// PostgreSQL (`--store`, an empty database).
struct HistoryStore {
    bench: BenchStore,
}

impl HistoryStore {
    fn open(&self) -> anyhow::Result<Box<dyn store::Store>> {
        self.bench.open()
    }

    fn advance_history_snapshot(
        &self,
        cut_ms: i64,
    ) -> anyhow::Result<store::history::HistorySnapshot> {
        Ok(match &self.bench.location {
            store::StoreLocation::Sqlite(dir) => SqliteStore::open(
                dir,
                SqliteOptions {
                    fsync: false,
                    ..Default::default()
                },
            )?
            .advance_history_snapshot(cut_ms)?,
            store::StoreLocation::Postgres(_) => self
                .bench
                .open_postgres()?
                .advance_history_snapshot(cut_ms)?,
        })
    }

    /// Bytes on disk (SQLite's file, PostgreSQL's database).
    fn bytes(&self) -> anyhow::Result<u64> {
        Ok(match &self.bench.location {
            store::StoreLocation::Sqlite(dir) => {
                std::fs::metadata(dir.join(store::sqlite::DATABASE_FILE))
                    .map(|m| m.len())
                    .unwrap_or(0)
            }
            store::StoreLocation::Postgres(_) => self.bench.open_postgres()?.database_bytes()?,
        })
    }
}

fn now_ms() -> anyhow::Result<i64> {
    Ok(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64)
}

/// Recovery as a restart does it (`engine::recover`: read, audit,
/// rebuild) on a store opened afresh, timed.
fn timed_recovery(
    store: &HistoryStore,
    limits: Limits,
) -> anyhow::Result<(Duration, engine::Recovery)> {
    let started = Instant::now();
    let mut opened = store.open()?;
    let (_, recovery) = engine::recover(opened.as_mut(), limits)?;
    Ok((started.elapsed(), recovery))
}

/// What `--history` found: printed as it goes, or one JSON object at the
/// end.
struct Said {
    json: bool,
    report: serde_json::Map<String, serde_json::Value>,
}

impl Said {
    fn say(&mut self, key: &str, value: serde_json::Value, text: String) {
        if !self.json {
            println!("  {text}");
        }
        self.put(key, value);
    }

    fn put(&mut self, key: &str, value: serde_json::Value) {
        self.report.insert(key.into(), value);
    }
}

/// `--history`: restart time against the length of the history, and with
/// every transfer within the horizon.
fn run_history(args: &BenchLedgerArgs, history: u64) -> anyhow::Result<ExitCode> {
    let store = HistoryStore {
        bench: BenchStore::new(args, false)?,
    };
    let limits = Limits {
        transfer_retention_ms: Some(HISTORY_RETENTION_MS),
        ..Limits::default()
    };
    let engine = Engine::start(
        Ledger::new(limits),
        store.open()?,
        EngineConfig {
            max_batch_commands: args.max_batch,
            ..EngineConfig::default()
        },
    );
    let handle = engine.handle();
    let dfsps = onboard(&handle, args.dfsps)?;
    let mut driver = Driver {
        handle: &handle,
        args,
        dfsps: &dfsps,
        fulfilment: Fulfilment::from_preimage([7; 32]),
        next_id: 1,
        transfers: history,
    };
    if !args.json {
        println!(
            "kasi bench ledger --history: building {history} transfers in {} ...",
            store.bench.location
        );
    }
    let built = driver.run_phase(2, Phase::TwoPhase)?;
    engine.shutdown().map_err(|e| anyhow::anyhow!("{e}"))?;
    // Past the horizon of the last transfer.
    std::thread::sleep(Duration::from_millis(HISTORY_RETENTION_MS as u64 + 100));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut out = Said {
        json: args.json,
        report: serde_json::Map::new(),
    };
    out.say(
        "history_transfers",
        json!(history),
        format!("built {history} transfers at {:.0}/s", built.rate_per_s),
    );
    out.put("build_per_s", json!(built.rate_per_s));

    // Every transfer within a 24 h horizon: loaded, not summed.
    let in_horizon = Limits {
        transfer_retention_ms: Some(IN_HORIZON_RETENTION_MS),
        ..Limits::default()
    };
    if history <= IN_HORIZON_MAX {
        let (took, recovery) = timed_recovery(&store, in_horizon)?;
        out.say(
            "recovery_in_horizon_ms",
            json!(ms(took)),
            format!(
                "recovery with every transfer within the horizon, no snapshot: {:.0} ms ({} loaded: {:.0} ms reading, {:.0} ms audit and rebuild)",
                ms(took),
                recovery.transfers,
                ms(recovery.load_time),
                ms(recovery.rebuild_time)
            ),
        );
        out.put("loaded_in_horizon", json!(recovery.transfers));
    }
    let (whole, whole_recovery) = timed_recovery(&store, limits)?;
    out.say(
        "recovery_whole_history_ms",
        json!(ms(whole)),
        format!(
            "recovery from the whole history: {:.0} ms ({} loaded, {} summed)",
            ms(whole),
            whole_recovery.transfers,
            whole_recovery.archived
        ),
    );
    if history <= IN_HORIZON_MAX {
        // The snapshotter's first snapshot with the 24 h horizon sums
        // nothing; recovery then finds every transfer by its finish.
        let started = Instant::now();
        store.advance_history_snapshot(now_ms()? - IN_HORIZON_RETENTION_MS)?;
        let first = started.elapsed();
        let (took, recovery) = timed_recovery(&store, in_horizon)?;
        anyhow::ensure!(
            recovery.history_snapshot_through.is_some(),
            "recovery did not start from the snapshot"
        );
        out.say(
            "recovery_in_horizon_from_snapshot_ms",
            json!(ms(took)),
            format!(
                "recovery with every transfer within the horizon, from a snapshot ({:.0} ms to make): {:.0} ms ({} loaded: {:.0} ms reading, {:.0} ms audit and rebuild)",
                ms(first),
                ms(took),
                recovery.transfers,
                ms(recovery.load_time),
                ms(recovery.rebuild_time)
            ),
        );
    }
    let started = Instant::now();
    let snapshot = store.advance_history_snapshot(now_ms()? - HISTORY_RETENTION_MS)?;
    let first_snapshot = started.elapsed();
    out.say(
        "first_snapshot_ms",
        json!(ms(first_snapshot)),
        format!(
            "history snapshot summing the history: {:.0} ms ({} summed, {} kept)",
            ms(first_snapshot),
            snapshot.transfers,
            snapshot.kept.len()
        ),
    );
    out.put("snapshot_summed", json!(snapshot.transfers));
    out.put("snapshot_kept", json!(snapshot.kept.len()));
    let (from_snapshot, snapshot_recovery) = timed_recovery(&store, limits)?;
    anyhow::ensure!(
        snapshot_recovery.history_snapshot_through.is_some()
            && snapshot_recovery.history_snapshot_dropped.is_none(),
        "recovery did not start from the snapshot"
    );
    out.say(
        "recovery_from_snapshot_ms",
        json!(ms(from_snapshot)),
        format!(
            "recovery from the snapshot: {:.0} ms ({} loaded, {} summed)",
            ms(from_snapshot),
            snapshot_recovery.transfers,
            snapshot_recovery.archived
        ),
    );
    out.put("loaded_from_snapshot", json!(snapshot_recovery.transfers));
    out.put("archived_from_snapshot", json!(snapshot_recovery.archived));
    let bytes = store.bytes()?;
    out.say(
        "store_bytes",
        json!(bytes),
        format!("store {:.2} GB", bytes as f64 / 1e9),
    );
    if args.json {
        println!("{}", serde_json::Value::Object(out.report));
    }
    Ok(ExitCode::SUCCESS)
}

const PHASES: [&str; 3] = ["prepare", "fulfil", "transfer"];

struct PhaseReport {
    name: &'static str,
    operations: u64,
    errors: u64,
    elapsed: Duration,
    rate_per_s: f64,
    latency_us: Histogram<u64>,
    stats: StatsSnapshot,
}

impl PhaseReport {
    fn quantile_ms(&self, quantile: f64) -> f64 {
        self.latency_us.value_at_quantile(quantile) as f64 / 1000.0
    }

    fn to_json(&self) -> serde_json::Value {
        let stats = &self.stats;
        json!({
            "phase": self.name,
            "operations": self.operations,
            "errors": self.errors,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "per_s": self.rate_per_s,
            "p50_ms": self.quantile_ms(0.5),
            "p90_ms": self.quantile_ms(0.9),
            "p99_ms": self.quantile_ms(0.99),
            "p999_ms": self.quantile_ms(0.999),
            "max_ms": self.latency_us.max() as f64 / 1000.0,
            "ledger_batches": stats.ledger_batches,
            "commands_per_batch": ratio(stats.commands, stats.ledger_batches),
            "store_commits": stats.store_commits,
            "commit_ms_mean": ratio(stats.commit_nanos, stats.store_commits) / 1e6,
            "apply_us_per_command": ratio(stats.apply_nanos, stats.commands) / 1e3,
            "max_commit_ms": stats.max_commit_nanos as f64 / 1e6,
            "max_apply_ms": stats.max_apply_nanos as f64 / 1e6,
        })
    }
}

fn ratio(numerator: u64, denominator: u64) -> f64 {
    if denominator == 0 {
        0.0
    } else {
        numerator as f64 / denominator as f64
    }
}

struct Report {
    fsync: bool,
    phases: Vec<PhaseReport>,
    settlement: SettlementTiming,
    recovered_transfers: usize,
    recovery: Duration,
}

/// Settlement of everything the phases committed: the close of a window
/// holding all of it, a settlement of that window, and its finalize; each
/// the ledger time of its own batch and the time to durable.
struct SettlementTiming {
    window_transfers: u64,
    close: (Duration, Duration),
    create: (Duration, Duration),
    finalize: (Duration, Duration),
}

impl SettlementTiming {
    fn to_json(&self) -> serde_json::Value {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        json!({
            "window_transfers": self.window_transfers,
            "close_apply_ms": ms(self.close.0),
            "close_durable_ms": ms(self.close.1),
            "create_apply_ms": ms(self.create.0),
            "create_durable_ms": ms(self.create.1),
            "finalize_apply_ms": ms(self.finalize.0),
            "finalize_durable_ms": ms(self.finalize.1),
        })
    }
}

/// Runs one command alone; (ledger apply time, submit to durable).
fn timed(handle: &EngineHandle, command: Command) -> anyhow::Result<(Outcome, Duration, Duration)> {
    let (sender, receiver) = mpsc::channel();
    let submitted = Instant::now();
    handle.try_submit_timed(
        vec![command],
        Box::new(move |result| {
            let _ = sender.send(result);
        }),
    );
    let (mut outcomes, timing) = receiver
        .recv()
        .context("the pipeline stopped")?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let outcome = outcomes.pop().context("no outcome")?;
    Ok((
        outcome,
        timing.applied_at.duration_since(timing.apply_started_at),
        timing.durable_at.duration_since(submitted),
    ))
}

fn settle_everything(
    handle: &EngineHandle,
    window_transfers: u64,
) -> anyhow::Result<SettlementTiming> {
    let (outcome, close_apply, close_durable) = timed(
        handle,
        Command::CloseSettlementWindow {
            id: 1,
            reason: "bench".into(),
        },
    )?;
    if !matches!(outcome, Outcome::Window(_)) {
        bail!("closing the window: {outcome:?}");
    }
    let (outcome, create_apply, create_durable) = timed(
        handle,
        Command::CreateSettlement {
            model: SETTLEMENT_MODEL.into(),
            reason: "bench".into(),
            windows: vec![1],
        },
    )?;
    let Outcome::Settlement(settlement) = outcome else {
        bail!("creating the settlement: {outcome:?}");
    };
    let (outcome, finalize_apply, finalize_durable) = timed(
        handle,
        Command::FinalizeSettlement {
            settlement: settlement.row.id,
            reason: "bench".into(),
            external_reference: None,
        },
    )?;
    if !matches!(outcome, Outcome::Settlement(_)) {
        bail!("finalizing the settlement: {outcome:?}");
    }
    Ok(SettlementTiming {
        window_transfers,
        close: (close_apply, close_durable),
        create: (create_apply, create_durable),
        finalize: (finalize_apply, finalize_durable),
    })
}

/// The deferred net model every bench DFSP settles under.
const SETTLEMENT_MODEL: &str = "DEFERREDNET";

impl Report {
    fn print(&self) {
        println!();
        println!(
            "fsync {}:",
            if self.fsync {
                "on (durable)"
            } else {
                "off (reference only)"
            }
        );
        println!(
            "  {:<9} {:>11} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>10} {:>10}",
            "phase",
            "per s",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "p99.9",
            "max ms",
            "cmd/batch",
            "commit ms",
            "apply us"
        );
        for phase in &self.phases {
            let stats = &phase.stats;
            println!(
                "  {:<9} {:>11.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.0} {:>10.2} {:>10.2}{}",
                phase.name,
                phase.rate_per_s,
                phase.quantile_ms(0.5),
                phase.quantile_ms(0.9),
                phase.quantile_ms(0.99),
                phase.quantile_ms(0.999),
                phase.latency_us.max() as f64 / 1000.0,
                ratio(stats.commands, stats.ledger_batches),
                ratio(stats.commit_nanos, stats.store_commits) / 1e6,
                ratio(stats.apply_nanos, stats.commands) / 1e3,
                if phase.errors > 0 { format!("  ERRORS: {}", phase.errors) } else { String::new() }
            );
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let t = &self.settlement;
        println!(
            "  settlement of a window of {} transfers: close {:.3} ms in the ledger ({:.1} ms to durable), create {:.3} ms ({:.1}), finalize {:.3} ms ({:.1})",
            t.window_transfers,
            ms(t.close.0),
            ms(t.close.1),
            ms(t.create.0),
            ms(t.create.1),
            ms(t.finalize.0),
            ms(t.finalize.1)
        );
        println!(
            "  recovery of {} transfers: {:.0} ms",
            self.recovered_transfers,
            self.recovery.as_secs_f64() * 1000.0
        );
    }

    fn to_json(&self) -> serde_json::Value {
        json!({
            "fsync": self.fsync,
            "prepares_per_s": self.phases[0].rate_per_s,
            "commits_per_s": self.phases[1].rate_per_s,
            "transfers_per_s": self.phases[2].rate_per_s,
            "p99_ms": self.phases[2].quantile_ms(0.99),
            "settlement": self.settlement.to_json(),
            "recovered_transfers": self.recovered_transfers,
            "recovery_ms": self.recovery.as_secs_f64() * 1000.0,
            "phases": self.phases.iter().map(PhaseReport::to_json).collect::<Vec<_>>(),
        })
    }
}

/// The run's store, and how to open it again for the timed recovery.
struct BenchStore {
    location: store::StoreLocation,
    fsync: bool,
    _temporary: Option<tempfile::TempDir>,
}

impl BenchStore {
    fn new(args: &BenchLedgerArgs, fsync: bool) -> anyhow::Result<BenchStore> {
        let (location, temporary) = match store::StoreLocation::from_flag(args.store.as_deref())
            .map_err(anyhow::Error::msg)?
        {
            Some(store::StoreLocation::Sqlite(dir)) => {
                let (dir, temporary) = new_data_dir(Some(&dir))?;
                (store::StoreLocation::Sqlite(dir), temporary)
            }
            Some(postgres) => (postgres, None),
            None => {
                let (dir, temporary) = new_data_dir(args.data_dir.as_deref())?;
                (store::StoreLocation::Sqlite(dir), temporary)
            }
        };
        let bench = BenchStore {
            location,
            fsync,
            _temporary: temporary,
        };
        if let store::StoreLocation::Postgres(_) = &bench.location {
            let mut store = bench.open_postgres()?;
            let rows = store.row_counts()?;
            if rows.iter().any(|(_, count)| *count > 0) {
                bail!(
                    "{} holds a hub's rows already ({rows:?}); the benchmark needs an empty database",
                    bench.location
                );
            }
        }
        Ok(bench)
    }

    fn open_postgres(&self) -> anyhow::Result<store::pg::PgStore> {
        let store::StoreLocation::Postgres(url) = &self.location else {
            unreachable!("called for PostgreSQL only")
        };
        let mut store = store::pg::PgStore::open(url)?;
        if !self.fsync {
            store.commit_without_waiting_for_flush()?;
        }
        Ok(store)
    }

    fn open(&self) -> anyhow::Result<Box<dyn store::Store>> {
        Ok(match &self.location {
            store::StoreLocation::Sqlite(dir) => Box::new(SqliteStore::open(
                dir,
                SqliteOptions {
                    fsync: self.fsync,
                    ..Default::default()
                },
            )?),
            store::StoreLocation::Postgres(_) => Box::new(self.open_postgres()?),
        })
    }
}

fn run_once(args: &BenchLedgerArgs, fsync: bool) -> anyhow::Result<Report> {
    let bench_store = BenchStore::new(args, fsync)?;
    let store = bench_store.open()?;
    let config = EngineConfig {
        max_batch_commands: args.max_batch,
        threads: PipelineThreads::from_count(args.pipeline_threads).unwrap_or_default(),
        ..EngineConfig::default()
    };
    let engine = Engine::start(Ledger::new(Limits::default()), store, config);
    let handle = engine.handle();
    let dfsps = onboard(&handle, args.dfsps)?;

    let fulfilment = Fulfilment::from_preimage([7; 32]);
    let mut driver = Driver {
        handle: &handle,
        args,
        dfsps: &dfsps,
        fulfilment,
        next_id: 1,
        transfers: args.transfers,
    };
    let first = driver.next_id;
    let prepare = driver.run_phase(0, Phase::Prepare { first })?;
    let fulfil = driver.run_phase(1, Phase::Fulfil { first })?;
    let transfer = driver.run_phase(2, Phase::TwoPhase)?;
    let committed = fulfil.operations - fulfil.errors + transfer.operations - transfer.errors;
    let settlement = settle_everything(&handle, committed)?;
    engine.shutdown().map_err(|e| anyhow::anyhow!("{e}"))?;

    // Recovery: reopen the store and rebuild the ledger, timed.
    let started = Instant::now();
    let mut store = bench_store.open()?;
    let (ledger, _) = engine::recover(store.as_mut(), Limits::default())?;
    let recovery = started.elapsed();
    Ok(Report {
        fsync,
        phases: vec![prepare, fulfil, transfer],
        settlement,
        recovered_transfers: ledger.transfer_count(),
        recovery,
    })
}

const CURRENCY: &str = "USD";

/// Creates the hub, its accounts and `count` funded DFSPs with high caps.
fn onboard(handle: &EngineHandle, count: u32) -> anyhow::Result<Vec<FspName>> {
    let currency = Currency::parse(CURRENCY).expect("USD is ISO 4217");
    let hub = FspName::new("Hub").expect("valid name");
    let mut setup = vec![
        Command::CreateHub { name: hub },
        Command::CreateHubAccount {
            currency,
            kind: AccountKind::HubMultilateralSettlement,
        },
        Command::CreateHubAccount {
            currency,
            kind: AccountKind::HubReconciliation,
        },
        Command::CreateSettlementModel {
            name: SETTLEMENT_MODEL.into(),
            definition: "{}".into(),
            rules: Some(ledger::ModelRules {
                granularity: ledger::Granularity::Net,
                interchange: ledger::Interchange::Multilateral,
                delay: ledger::Delay::Deferred,
                currency: None,
                ledger_account_type: AccountKind::Position,
                settlement_account_type: AccountKind::Settlement,
                auto_position_reset: true,
                require_liquidity_check: false,
            }),
        },
    ];
    let names: Vec<FspName> = (0..count)
        .map(|i| FspName::new(&format!("dfsp{i:04}")).expect("valid name"))
        .collect();
    for &name in &names {
        setup.push(Command::CreateParticipant { name, currency });
        setup.push(Command::InitNetDebitCap {
            name,
            currency,
            net_debit_cap: Amount::from_whole(1_000_000_000_000),
        });
    }
    let mut outcomes = Vec::new();
    for chunk in setup.chunks(1000) {
        outcomes.extend(handle.execute(chunk.to_vec())?);
    }
    // Each DFSP's SETTLEMENT account id was returned by its creation.
    let mut funding = Vec::new();
    let mut created = outcomes.iter().filter_map(|outcome| match outcome {
        Outcome::AccountsCreated(ids) if ids.len() == 2 => Some(ids[1]),
        _ => None,
    });
    for (i, &name) in names.iter().enumerate() {
        let settlement: AccountId = created.next().context("DFSP creation failed")?;
        funding.push(Command::FundsIn(Funds {
            transfer_id: TransferId::new(u128::MAX - i as u128),
            participant: name,
            account: settlement,
            amount: Amount::from_whole(1_000_000_000_000),
            currency,
            memo: FundsMemo {
                external_reference: "bench".into(),
                reason: "initial liquidity".into(),
            },
            request_hash: RequestHash::default(),
        }));
    }
    for chunk in funding.chunks(1000) {
        outcomes.extend(handle.execute(chunk.to_vec())?);
    }
    if let Some(failure) = outcomes.iter().find_map(|outcome| match outcome {
        Outcome::Rejected(rejection) => Some(rejection.clone()),
        _ => None,
    }) {
        bail!("onboarding failed: {failure}");
    }
    Ok(names)
}

#[derive(Clone, Copy)]
#[allow(clippy::enum_variant_names)] // "two-phase" is the flow's name
enum Phase {
    /// Prepare transfers `first..first + n`.
    Prepare { first: u128 },
    /// Fulfil the transfers the prepare phase reserved.
    Fulfil { first: u128 },
    /// Prepare new transfers and fulfil each once its prepare is durable.
    TwoPhase,
}

struct Completion {
    submitted: Instant,
    fulfil_next: bool,
    result: Result<Vec<Outcome>, EngineError>,
}

struct Driver<'a> {
    handle: &'a EngineHandle,
    args: &'a BenchLedgerArgs,
    dfsps: &'a [FspName],
    fulfilment: Fulfilment,
    next_id: u128,
    /// Transfers per phase.
    transfers: u64,
}

impl Driver<'_> {
    fn prepare(&self, id: u128) -> Command {
        let n = self.dfsps.len() as u128;
        let payer = (id % n) as usize;
        // Each DFSP pays every other in turn, so positions stay near zero.
        let payee = ((id % n + 1 + (id / n) % (n - 1)) % n) as usize;
        Command::Prepare(Prepare {
            transfer_id: TransferId::new(id),
            payer: self.dfsps[payer],
            payee: self.dfsps[payee],
            amount: Amount::from_units(1 + (id % 1_000_000) as i128),
            currency: Currency::parse(CURRENCY).expect("ISO 4217"),
            condition: self.fulfilment.condition(),
            // Far enough that nothing expires during the run.
            expiration_ms: i64::MAX / 2,
            request_hash: RequestHash([(id % 251) as u8; 32]),
            wire_version: 0x11,
            // As the hub reads them from the ILP packet: a million
            // customers, each transfer between two of them.
            parties: Some(std::sync::Arc::new(PartyIds {
                payer: format!("MSISDN/2557{:08}", id % 1_000_003).into(),
                payee: format!("MSISDN/2557{:08}", id.wrapping_mul(7_919) % 1_000_003).into(),
            })),
        })
    }

    fn fulfil(&self, id: u128) -> Command {
        let n = self.dfsps.len() as u128;
        let payee = ((id % n + 1 + (id / n) % (n - 1)) % n) as usize;
        Command::Fulfil(Fulfil {
            transfer_id: TransferId::new(id),
            caller: self.dfsps[payee],
            fulfilment: Some(self.fulfilment),
            destination: None,
            request_hash: RequestHash([(id % 241) as u8; 32]),
        })
    }

    fn run_phase(&mut self, index: usize, phase: Phase) -> anyhow::Result<PhaseReport> {
        let total = self.transfers;
        let size = self.args.submission_size as u64;
        let (sender, receiver) = mpsc::channel::<Completion>();
        let mut latency_us =
            Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
        let stats_before = self.handle.stats();
        let start_id = match phase {
            Phase::Prepare { first } | Phase::Fulfil { first } => first,
            Phase::TwoPhase => self.next_id,
        };
        let started = Instant::now();
        let (mut submitted, mut completed, mut in_flight, mut errors) = (0u64, 0u64, 0usize, 0u64);
        let mut stdout = std::io::stdout().lock();
        while completed < total {
            while in_flight < self.args.window && submitted < total {
                let count = size.min(total - submitted);
                let ids = (start_id + submitted as u128)..(start_id + (submitted + count) as u128);
                let (commands, fulfil_next) = match phase {
                    Phase::Fulfil { .. } => (ids.map(|id| self.fulfil(id)).collect(), false),
                    Phase::Prepare { .. } => (ids.map(|id| self.prepare(id)).collect(), false),
                    Phase::TwoPhase => (ids.map(|id| self.prepare(id)).collect(), true),
                };
                self.submit(commands, fulfil_next, Instant::now(), &sender);
                submitted += count;
                in_flight += 1;
            }
            let first = receiver.recv().context("the pipeline stopped answering")?;
            let mut next = Some(first);
            while let Some(completion) = next.take() {
                in_flight -= 1;
                let elapsed_us = completion.submitted.elapsed().as_micros() as u64;
                let outcomes = completion.result.map_err(|e| anyhow::anyhow!("{e}"))?;
                let mut fulfils = Vec::new();
                for outcome in &outcomes {
                    let expected =
                        if completion.fulfil_next || matches!(phase, Phase::Prepare { .. }) {
                            TransferState::Reserved
                        } else {
                            TransferState::Committed
                        };
                    match outcome {
                        Outcome::Transfer(view) if view.state == expected => {
                            if self.args.print_durable {
                                let _ = writeln!(
                                    stdout,
                                    "{} {}",
                                    view.transfer_id,
                                    view.state.as_str()
                                );
                            }
                            if completion.fulfil_next {
                                fulfils.push(self.fulfil(view.transfer_id.bits()));
                            } else {
                                completed += 1;
                            }
                        }
                        _ => {
                            errors += 1;
                            completed += 1;
                        }
                    }
                }
                // Only the phase's final operation counts in its latency.
                if !completion.fulfil_next {
                    latency_us.saturating_record_n(elapsed_us.max(1), outcomes.len() as u64);
                }
                if !fulfils.is_empty() {
                    // A two-phase transfer is timed from its prepare's submission.
                    self.submit(fulfils, false, completion.submitted, &sender);
                    in_flight += 1;
                }
                next = receiver.try_recv().ok();
            }
            if self.args.print_durable {
                let _ = stdout.flush();
            }
        }
        let elapsed = started.elapsed();
        if let Phase::TwoPhase | Phase::Prepare { .. } = phase {
            self.next_id = start_id + total as u128;
        }
        let after = self.handle.stats();
        let stats = StatsSnapshot {
            ledger_batches: after.ledger_batches - stats_before.ledger_batches,
            commands: after.commands - stats_before.commands,
            store_commits: after.store_commits - stats_before.store_commits,
            records: after.records - stats_before.records,
            commit_nanos: after.commit_nanos - stats_before.commit_nanos,
            apply_nanos: after.apply_nanos - stats_before.apply_nanos,
            // Maxima are since start; good enough to tell where a stall was.
            max_commit_nanos: after.max_commit_nanos,
            max_apply_nanos: after.max_apply_nanos,
            store_errors: after.store_errors - stats_before.store_errors,
            store_lookups: after.store_lookups - stats_before.store_lookups,
            store_healthy: after.store_healthy,
            transfers_in_memory: after.transfers_in_memory,
            transfers_evicted: after.transfers_evicted - stats_before.transfers_evicted,
            quotes_in_memory: after.quotes_in_memory,
        };
        Ok(PhaseReport {
            name: PHASES[index],
            operations: total,
            errors,
            elapsed,
            rate_per_s: total as f64 / elapsed.as_secs_f64(),
            latency_us,
            stats,
        })
    }

    fn submit(
        &self,
        commands: Vec<Command>,
        fulfil_next: bool,
        submitted: Instant,
        sender: &mpsc::Sender<Completion>,
    ) {
        let sender = sender.clone();
        self.handle.submit(
            commands,
            Box::new(move |result| {
                let _ = sender.send(Completion {
                    submitted,
                    fulfil_next,
                    result,
                });
            }),
        );
    }
}
