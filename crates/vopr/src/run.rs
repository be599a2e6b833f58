//! The driver: one seeded run of the real [`Engine`] on a [`SimStore`].
//!
//! Each step advances the simulated clock, sends a few submissions back to
//! back (so that they batch and group-commit as the hub's do), with a
//! fault armed or not, waits for every reply, and checks:
//!
//! - every outcome equals what a ledger holding everything in memory (the
//!   *shadow*, no retention horizon, one command at a time) answers in the
//!   same order at the same instant: prefetched copies of ids that left
//!   memory decide exactly as memory would (the ledger's own property
//!   test checks the shadow's rules against an independent oracle);
//! - replies come in submission order, and nothing is acknowledged after
//!   a submission that failed;
//! - what the store holds is exactly what was acknowledged (after a crash
//!   or a fatal failure: what was acknowledged plus a prefix of what was
//!   in flight), no transfer id is recorded twice, no transfer finished
//!   twice; it audits clean, with and without a retention horizon;
//! - the ledger's own invariant holds (`check_balances`);
//! - after a restart, the recovered ledger holds what the shadow holds
//!   (with a horizon: all but what it may leave in the store), and after
//!   a clean stop so does the memory of the engine that ran.
//!
//! The workload and the fault plan are a function of the seed. The
//! engine's threads are real, so batch boundaries vary from run to run;
//! every check above holds whatever they are, and a failure names the
//! seed to run again.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use engine::{
    from_memory, recover_at, Engine, EngineConfig, EngineError, EngineHandle, PipelineThreads,
    StoreHealth,
};
use ledger::{Command, ErrorCode, Ledger, Limits, Outcome, TransferId, TransferView};

use crate::check::{as_whole, difference, ids_named, memory_difference, normalize, Partial};
use crate::disk::{CommitFault, Disk, DiskCounters, PrefetchFault, Rows, SimStore};
use crate::rng::Rng;
use crate::workload::Workload;

/// The simulated clock's start.
const T0: i64 = 1_700_000_000_000;
/// Longest a reply, a fault or a recovery may take before the run fails
/// (a debug build on a loaded machine is slow; a stuck pipeline is never
/// this slow to answer).
const DEADLINE: Duration = Duration::from_secs(60);

/// What one run simulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub threads: PipelineThreads,
    /// A retention horizon: finished transfers and quotes leave memory
    /// and are read back from the store (prefetch).
    pub retention: bool,
    pub steps: usize,
}

impl Config {
    /// The four shapes CI runs each seed in.
    pub fn all(steps: usize) -> [Config; 4] {
        [
            (PipelineThreads::One, false),
            (PipelineThreads::One, true),
            (PipelineThreads::Two, false),
            (PipelineThreads::Two, true),
        ]
        .map(|(threads, retention)| Config {
            threads,
            retention,
            steps,
        })
    }

    /// As `SIM_SHAPE` names it: `1`/`2` threads, `r` for retention.
    pub fn name(&self) -> String {
        format!(
            "{}{}",
            self.threads.count(),
            if self.retention { "r" } else { "" }
        )
    }

    pub fn parse(name: &str, steps: usize) -> Option<Config> {
        let (threads, retention) = match name {
            "1" => (PipelineThreads::One, false),
            "1r" => (PipelineThreads::One, true),
            "2" => (PipelineThreads::Two, false),
            "2r" => (PipelineThreads::Two, true),
            _ => return None,
        };
        Some(Config {
            threads,
            retention,
            steps,
        })
    }
}

/// What a run did, for coverage.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub steps: usize,
    pub submissions: u64,
    pub commands: u64,
    /// Submissions refused while the store could not commit.
    pub refused: u64,
    /// Faults that stopped a pipeline (fatal commits, crashes, kills).
    pub crashes: u64,
    pub restarts: u64,
    /// Transient commit faults the pipeline rode out.
    pub transient: u64,
    pub evicted: u64,
    /// Commands refused (2003) because a prefetch read was failed on purpose.
    pub unread_refused: u64,
    pub duplicates: u64,
    pub modified: u64,
    pub expired: u64,
    /// Submissions in flight at a crash that proved durable anyway.
    pub durable_unacknowledged: u64,
    pub disk: DiskCounters,
}

impl Report {
    pub fn add(&mut self, other: &Report) {
        self.steps += other.steps;
        self.submissions += other.submissions;
        self.commands += other.commands;
        self.refused += other.refused;
        self.crashes += other.crashes;
        self.restarts += other.restarts;
        self.transient += other.transient;
        self.evicted += other.evicted;
        self.unread_refused += other.unread_refused;
        self.duplicates += other.duplicates;
        self.modified += other.modified;
        self.expired += other.expired;
        self.durable_unacknowledged += other.durable_unacknowledged;
        let (d, o) = (&mut self.disk, &other.disk);
        d.commits += o.commits;
        d.transient_failures += o.transient_failures;
        d.fatal_failures += o.fatal_failures;
        d.crashes += o.crashes;
        d.prefetch_reads += o.prefetch_reads;
        d.prefetched_ids += o.prefetched_ids;
        d.prefetch_found += o.prefetch_found;
        d.prefetch_failures += o.prefetch_failures;
        d.slow_commits += o.slow_commits;
        d.slow_reads += o.slow_reads;
    }
}

/// A run that found something: everything needed to run it again.
#[derive(Debug)]
pub struct Failure {
    pub seed: u64,
    pub config: Config,
    pub step: usize,
    pub message: String,
    /// The last steps' plans, oldest first.
    pub trace: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulation seed {} ({} pipeline thread(s), retention {}) failed at step {}: {}",
            self.seed,
            self.config.threads.count(),
            if self.config.retention { "on" } else { "off" },
            self.step,
            self.message
        )?;
        writeln!(f, "last steps: {}", self.trace.join(" | "))?;
        write!(
            f,
            "run it again: SIM_SEED={} SIM_SHAPE={} cargo test -p vopr --test seeds \
             (or: cargo run --release -p vopr -- --seed {} --shape {} --steps {})",
            self.seed,
            self.config.name(),
            self.seed,
            self.config.name(),
            self.config.steps
        )
    }
}

/// What a step does to the store.
#[derive(Clone, Copy, Debug)]
enum Plan {
    Calm,
    /// The next prefetch read fails.
    Prefetch(PrefetchFault),
    /// The step's first commit fails transiently this many times.
    Transient(u32),
    /// A commit fails transiently until the driver has probed the pipeline
    /// meanwhile, then succeeds or fails for good.
    Held,
    /// A later commit of the step fails for good or crashes the process.
    Commit {
        after: u32,
        fault: CommitFault,
    },
    /// A clean stop and restart after the step.
    Restart,
    /// The process is killed after the step, idle.
    Kill,
}

#[derive(Default)]
struct ReplyLog {
    /// Submission indexes in the order their replies came.
    order: Vec<usize>,
    results: HashMap<usize, Result<Vec<Outcome>, EngineError>>,
}

#[derive(Default)]
struct Replies {
    log: Mutex<ReplyLog>,
    arrived: Condvar,
}

impl Replies {
    fn record(&self, index: usize, result: Result<Vec<Outcome>, EngineError>) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.order.push(index);
        let previous = log.results.insert(index, result);
        assert!(previous.is_none(), "submission {index} answered twice");
        self.arrived.notify_all();
    }

    fn result(&self, index: usize) -> Option<Result<Vec<Outcome>, EngineError>> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.results.get(&index).cloned()
    }

    /// Waits until every one of `indexes` is answered.
    fn wait(&self, indexes: &[usize]) -> Result<(), String> {
        let until = Instant::now() + DEADLINE;
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let missing: Vec<usize> = indexes
                .iter()
                .copied()
                .filter(|i| !log.results.contains_key(i))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "no reply within {DEADLINE:?} for submissions {missing:?}: the pipeline is stuck"
                ));
            }
            log = self
                .arrived
                .wait_timeout(log, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn order_of(&self, indexes: &HashSet<usize>) -> Vec<usize> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.order
            .iter()
            .copied()
            .filter(|i| indexes.contains(i))
            .collect()
    }
}

struct Sent {
    index: usize,
    commands: Vec<Command>,
    /// Every command is one a store fault answers from memory.
    read_only: bool,
}

/// How the engine that ran is stopped before recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Clean,
    Failed,
    Crashed,
}

struct Sim {
    config: Config,
    work: Workload,
    /// The fault plan, the engine's limits and batch sizes, pacing.
    faults: Rng,
    /// The clock's steps and each step's number of submissions: apart
    /// from the workload's own stream, so that one does not shift the
    /// other.
    time: Rng,
    now: i64,
    clock: Arc<AtomicI64>,
    disk: Arc<Disk>,
    limits: Limits,
    engine_config: (usize, usize),
    /// How often each [`Plan`] comes up in this run.
    mix: [u64; 7],
    engine: Option<Engine>,
    handle: Option<EngineHandle>,
    replies: Arc<Replies>,
    expired: Arc<Mutex<Vec<TransferView>>>,
    /// The rows as the pipeline's committed records tell them
    /// (`EngineHandle::on_committed`: what keeps the hub's reference
    /// copies current), from the store's rows at the engine's start.
    told: Arc<Mutex<Rows>>,
    /// What was acknowledged, in memory whole (no retention horizon).
    shadow: Ledger,
    /// What the shadow expired since the pipeline last told its expiries.
    expected_expired: Vec<TransferView>,
    next_index: usize,
    report: Report,
    trace: Vec<String>,
}

/// Runs `seed` in `config`.
pub fn run(seed: u64, config: Config) -> Result<Report, Failure> {
    let mut root = Rng::new(seed);
    let work = Workload::new(root.fork());
    let mut faults = root.fork();
    let time = root.fork();
    let limits = match config.retention {
        false => Limits::default(),
        true => Limits {
            transfer_retention_ms: Some(faults.range(200, 4_000)),
            max_finished_in_memory: faults.range(0, 12) as usize,
            max_quotes: faults.range(0, 8) as usize,
            ..Limits::default()
        },
    };
    let engine_config = (faults.range(8, 64) as usize, faults.range(1, 8) as usize);
    // Swarm testing: each seed its own mix of faults, some of them left
    // out, so that runs differ in kind and not only in detail (a run full
    // of crashes rarely lets retention get far, a calm one does).
    let mut mix = [60, 8, 5, 4, 7, 6, 4];
    for weight in &mut mix[1..] {
        *weight = match faults.below(4) {
            0 => 0,
            1 => *weight / 2,
            2 => *weight,
            _ => *weight * 3,
        };
    }
    let mut sim = Sim {
        config,
        work,
        faults,
        time,
        now: T0,
        clock: Arc::new(AtomicI64::new(T0)),
        disk: Disk::new(),
        limits,
        engine_config,
        mix,
        engine: None,
        handle: None,
        replies: Arc::default(),
        expired: Arc::default(),
        told: Arc::default(),
        shadow: Ledger::new(Limits::default()),
        expected_expired: Vec::new(),
        next_index: 0,
        report: Report::default(),
        trace: Vec::new(),
    };
    // A panic (the driver's, or a ledger's on the driver's thread) is a
    // failure like any other: reported with its seed.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run()))
        .unwrap_or_else(|panic| {
            let text = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            Err(format!("panicked: {text}"))
        });
    let report = sim.report.clone();
    let step = sim.report.steps;
    // A run that failed may leave a stuck pipeline: abandoned, not joined.
    if let Some(engine) = sim.engine.take() {
        if result.is_err() {
            engine.abandon(Duration::from_secs(1));
        }
    }
    result.map(|()| report).map_err(|message| Failure {
        seed,
        config,
        step,
        message,
        trace: sim.trace,
    })
}

impl Sim {
    fn run(&mut self) -> Result<(), String> {
        let store = self.disk.open();
        self.start(Ledger::new(self.limits), store);
        self.onboard()?;
        for step in 1..=self.config.steps {
            self.report.steps = step;
            self.step(step as u64)?;
        }
        self.restart(Stop::Clean)?;
        let engine = self.engine.take().expect("running");
        self.handle = None;
        let memory = engine
            .shutdown()
            .map_err(|e| format!("the last shutdown failed: {e}"))?;
        self.compare_memory("the memory of the last engine", &memory, false)?;
        self.report.disk = self.disk.counters();
        Ok(())
    }

    fn start(&mut self, ledger: Ledger, store: SimStore) {
        let clock = self.clock.clone();
        let expired = self.expired.clone();
        let config = EngineConfig {
            max_batch_commands: self.engine_config.0,
            queue_capacity: 4096,
            max_batches_per_commit: self.engine_config.1,
            clock: Arc::new(move || clock.load(Ordering::SeqCst)),
            on_expired: Some(Box::new(move |views| {
                expired
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(views)
            })),
            threads: self.config.threads,
            on_failed: None,
            retry_first: Duration::from_millis(1),
        };
        let engine = Engine::start(ledger, Box::new(store), config);
        let handle = engine.handle();
        let told = self.told.clone();
        handle.on_committed(Box::new(move |records| {
            told.lock()
                .unwrap_or_else(|e| e.into_inner())
                .commit(&[records], &mut Vec::new())
        }));
        // After the sink, and the rows read under the copy's lock (not
        // `*lock = rows()`, which reads first), so that no commit falls
        // between the two: one before is in the rows, one after is told
        // (both, harmlessly: upserts again, inserts already there).
        let mut told = self.told.lock().unwrap_or_else(|e| e.into_inner());
        *told = self.disk.rows();
        drop(told);
        self.handle = Some(handle);
        self.engine = Some(engine);
    }

    fn handle(&self) -> &EngineHandle {
        self.handle.as_ref().expect("an engine runs")
    }

    fn submit(&mut self, commands: Vec<Command>) -> Sent {
        let index = self.next_index;
        self.next_index += 1;
        let read_only = commands.iter().all(from_memory);
        let replies = self.replies.clone();
        self.report.submissions += 1;
        self.report.commands += commands.len() as u64;
        self.handle().try_submit(
            commands.clone(),
            Box::new(move |result| replies.record(index, result)),
        );
        Sent {
            index,
            commands,
            read_only,
        }
    }

    fn wait_until(&self, what: &str, done: impl Fn(&Sim) -> bool) -> Result<(), String> {
        let until = Instant::now() + DEADLINE;
        while !done(self) {
            if Instant::now() >= until {
                return Err(format!("{what}: not within {DEADLINE:?}"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    fn onboard(&mut self) -> Result<(), String> {
        let onboarding = self.work.onboarding();
        let sent: Vec<Sent> = onboarding.into_iter().map(|c| self.submit(c)).collect();
        self.settle(&sent, false)?;
        for sub in &sent {
            if let Some(Ok(outcomes)) = self.replies.result(sub.index) {
                self.work.onboarded(&sub.commands, &outcomes[0]);
            }
        }
        let funding = self.work.funding();
        let sent: Vec<Sent> = funding.into_iter().map(|c| self.submit(c)).collect();
        self.settle(&sent, false)?;
        self.check_durable()
    }

    fn plan(&mut self) -> Plan {
        let rng = &mut self.faults;
        match rng.weighted(&self.mix) {
            0 => Plan::Calm,
            1 => Plan::Prefetch(match rng.percent(50) {
                true => PrefetchFault::Whole,
                false => PrefetchFault::OneRow,
            }),
            2 => Plan::Transient(1 + rng.below(3) as u32),
            3 => Plan::Held,
            4 => Plan::Commit {
                after: rng.below(3) as u32,
                fault: match rng.percent(50) {
                    true => CommitFault::Fatal {
                        durable: rng.percent(50),
                    },
                    false => CommitFault::Crash {
                        durable: rng.percent(50),
                    },
                },
            },
            5 => Plan::Restart,
            _ => Plan::Kill,
        }
    }

    fn step(&mut self, step: u64) -> Result<(), String> {
        let advance = match self.time.percent(10) {
            true => self.time.range(1_000, 6_000),
            false => self.time.range(0, 300),
        };
        self.now += advance;
        self.clock.store(self.now, Ordering::SeqCst);
        let plan = self.plan();
        // Commits as slow as a real fsync, now and then, so that batches
        // queue behind them (group commit) and reads race with them.
        if self.faults.percent(40) {
            let pause = Duration::from_micros(self.faults.range(300, 3_000) as u64);
            let (commits, reads) = (1 + self.faults.below(8) as u32, self.faults.below(3) as u32);
            self.disk.arm_slow(commits, reads, pause);
        }
        self.trace.push(format!("{step}: +{advance}ms {plan:?}"));
        if self.trace.len() > 12 {
            self.trace.remove(0);
        }
        match plan {
            Plan::Held => self.held_step(step)?,
            _ => self.burst_step(plan)?,
        }
        let violations = self.disk.take_violations();
        if !violations.is_empty() {
            return Err(format!("the store saw: {}", violations.join("; ")));
        }
        match plan {
            Plan::Restart => self.restart(Stop::Clean),
            Plan::Kill => {
                self.report.crashes += 1;
                self.restart(Stop::Crashed)
            }
            _ => Ok(()),
        }
    }

    /// Submissions back to back, a fault armed or not, then every reply.
    fn burst_step(&mut self, plan: Plan) -> Result<(), String> {
        match plan {
            Plan::Prefetch(fault) => self.disk.arm_prefetch(fault),
            Plan::Transient(attempts) => {
                self.disk.arm_commit(0, CommitFault::Transient { attempts })
            }
            Plan::Commit { after, fault } => self.disk.arm_commit(after, fault),
            _ => {}
        }
        let count = 1 + self.work_count();
        let mut submissions = Vec::with_capacity(count);
        for i in 0..count {
            submissions.push(match i > 0 && self.work_read_only() {
                true => self.work.read_only(),
                false => self.work.submission(self.now, &self.shadow),
            });
        }
        if matches!(plan, Plan::Prefetch(_)) {
            // An audited change refused for an unread id records its
            // refusal as an audit event, which a ledger holding
            // everything (never refusing) cannot show: none here.
            for commands in &mut submissions {
                for command in commands.iter_mut() {
                    if let Command::Audited { command: inner, .. } = command {
                        *command = std::mem::replace(&mut **inner, Command::Expire);
                    }
                }
            }
        }
        // Back to back (one batch, or a few behind a commit), or spaced
        // out so that batches form while others commit.
        let gap = match self.faults.percent(40) {
            true => Some(Duration::from_micros(self.faults.range(50, 1_500) as u64)),
            false => None,
        };
        let mut sent = Vec::with_capacity(submissions.len());
        for commands in submissions {
            sent.push(self.submit(commands));
            if let Some(gap) = gap {
                std::thread::sleep(gap);
            }
        }
        let indexes: Vec<usize> = sent.iter().map(|s| s.index).collect();
        self.replies.wait(&indexes)?;
        let hit = matches!(plan, Plan::Commit { .. }) && !self.disk.commit_fault_pending();
        self.disk.disarm();
        if matches!(plan, Plan::Transient(_)) {
            self.report.transient += 1;
        }
        let lenient = matches!(plan, Plan::Transient(_));
        let unknown = self.settle(&sent, lenient)?;
        if !hit {
            if !unknown.is_empty() {
                return Err(format!(
                    "submissions {unknown:?} failed with no fault that could explain it"
                ));
            }
            self.barrier()?;
            self.check_expired()?;
            return self.check_durable();
        }
        self.report.crashes += 1;
        let stop = match plan {
            Plan::Commit {
                fault: CommitFault::Crash { .. },
                ..
            } => Stop::Crashed,
            _ => Stop::Failed,
        };
        let unknown: Vec<&Sent> = unknown.iter().map(|&pos| &sent[pos]).collect();
        self.resolve_unknown(&unknown)?;
        self.restart(stop)
    }

    fn work_count(&mut self) -> usize {
        self.time.index(8)
    }

    fn work_read_only(&mut self) -> bool {
        self.time.percent(20)
    }

    /// A commit that keeps failing transiently while the driver checks
    /// what the pipeline does meanwhile: new writes refused at once,
    /// reads answered from memory (showing the batch in hand). Then the
    /// fault passes, or turns fatal.
    fn held_step(&mut self, step: u64) -> Result<(), String> {
        self.report.transient += 1;
        // The batch in hand must be the first submission's, not an expiry
        // the pipeline would apply on its own.
        self.barrier()?;
        self.disk.hold();
        let mut commands = vec![self.work.recorded_change(step)];
        commands.extend(self.work.submission(self.now, &self.shadow));
        let first = self.submit(commands);
        self.wait_until(
            "a commit failing transiently reported as a store fault",
            |sim| matches!(sim.handle().store_health(), StoreHealth::Faulted(_)),
        )?;
        let write = self.work.needs_store(self.now, &self.shadow);
        let write = self.submit(write);
        match self.replies.result(write.index) {
            Some(Err(EngineError::StoreUnavailable(_))) => self.report.refused += 1,
            other => {
                return Err(format!(
                    "while the store could not commit, {:?} was answered {other:?}, not refused at once",
                    write.commands
                ))
            }
        }
        let read = self.work.read_only();
        let read = self.submit(read);
        self.replies.wait(&[read.index])?;
        // The memory the read shows: the batch in hand applied.
        let mut copy = self.copy_of_shadow()?;
        expire_if_due(&mut copy, self.now, &mut Vec::new());
        for command in &first.commands {
            copy.apply_batch(self.now, std::slice::from_ref(command));
        }
        let expected: Vec<Outcome> = read_answers(&copy, &read.commands);
        match self.replies.result(read.index) {
            Some(Ok(outcomes)) if outcomes.iter().map(as_whole).eq(expected.iter().cloned()) => {}
            other => {
                return Err(format!(
                    "a read from memory during a store fault answered {other:?}; the memory holds {expected:?}"
                ))
            }
        }
        let then = match self.faults.weighted(&[8, 1, 1]) {
            0 => None,
            1 => Some(CommitFault::Fatal {
                durable: self.faults.percent(50),
            }),
            _ => Some(CommitFault::Crash {
                durable: self.faults.percent(50),
            }),
        };
        self.trace.push(format!("  then {then:?}"));
        self.disk.release(then);
        self.replies.wait(&[first.index])?;
        let unknown = self.settle(std::slice::from_ref(&first), false)?;
        let Some(fault) = then else {
            if !unknown.is_empty() {
                return Err("the commit failed after the fault passed".into());
            }
            self.wait_until("the store reported healthy again", |sim| {
                sim.handle().store_health() == StoreHealth::Healthy
            })?;
            self.check_expired()?;
            return self.check_durable();
        };
        if unknown.is_empty() {
            return Err(format!(
                "the commit was acknowledged though it failed ({fault:?})"
            ));
        }
        self.report.crashes += 1;
        self.resolve_unknown(&[&first])?;
        match fault {
            CommitFault::Crash { .. } => self.restart(Stop::Crashed),
            _ => self.restart(Stop::Failed),
        }
    }

    fn copy_of_shadow(&self) -> Result<Ledger, String> {
        Ledger::restore(self.shadow.snapshot(), Limits::default())
            .map_err(|e| format!("the acknowledged state does not restore: {e}"))
    }

    /// Checks the replies of `sent` (once all answered) against the shadow,
    /// applying to it what was acknowledged, in order. Returns the
    /// positions of submissions that failed in flight (a fatal fault: they
    /// may or may not be durable).
    fn settle(&mut self, sent: &[Sent], lenient: bool) -> Result<Vec<usize>, String> {
        let indexes: Vec<usize> = sent.iter().map(|s| s.index).collect();
        self.replies.wait(&indexes)?;
        let unread: HashSet<TransferId> = self.disk.take_unread().into_iter().collect();
        let results: Vec<Result<Vec<Outcome>, EngineError>> = sent
            .iter()
            .map(|s| self.replies.result(s.index).expect("answered"))
            .collect();
        // Replies in submission order (reads answered from memory during a
        // fault aside: they are answered at once).
        let checked: HashSet<usize> = sent
            .iter()
            .zip(&results)
            .filter(|(s, r)| r.is_ok() && !(lenient && s.read_only))
            .map(|(s, _)| s.index)
            .collect();
        let order = self.replies.order_of(&checked);
        if !order.is_sorted() {
            return Err(format!("replies came in the order {order:?}"));
        }
        let mut unknown = Vec::new();
        // Reads from memory may show any state from the step's start to
        // their own place.
        let mut candidates: HashMap<usize, Vec<Vec<Outcome>>> = HashMap::new();
        let note = |shadow: &Ledger, from: usize, candidates: &mut HashMap<_, _>| {
            if !lenient {
                return;
            }
            for (pos, sub) in sent.iter().enumerate().skip(from) {
                if sub.read_only {
                    let list: &mut Vec<Vec<Outcome>> = candidates.entry(pos).or_default();
                    list.push(read_answers(shadow, &sub.commands));
                }
            }
        };
        for (pos, (sub, result)) in sent.iter().zip(&results).enumerate() {
            note(&self.shadow, pos, &mut candidates);
            let outcomes = match result {
                Err(EngineError::StoreUnavailable(_)) if lenient => {
                    self.report.refused += 1;
                    continue;
                }
                Err(EngineError::StoreFailed(_) | EngineError::Stopped) => {
                    unknown.push(pos);
                    continue;
                }
                Err(error) => {
                    return Err(format!(
                        "{:?} was refused: {error} (no fault explains it)",
                        sub.commands
                    ))
                }
                Ok(outcomes) => outcomes,
            };
            if outcomes.len() != sub.commands.len() {
                return Err(format!(
                    "{} outcomes for {} commands",
                    outcomes.len(),
                    sub.commands.len()
                ));
            }
            if !unknown.is_empty() && !sub.read_only {
                return Err(format!(
                    "{:?} was acknowledged after an earlier submission failed",
                    sub.commands
                ));
            }
            if expire_if_due(&mut self.shadow, self.now, &mut self.expected_expired) {
                note(&self.shadow, pos, &mut candidates);
            }
            if sub.read_only {
                let got: Vec<Outcome> = outcomes.iter().map(as_whole).collect();
                let exact = read_answers(&self.shadow, &sub.commands);
                let fits =
                    got == exact || candidates.get(&pos).is_some_and(|list| list.contains(&got));
                if !fits {
                    return Err(format!(
                        "{:?} answered {got:?}; the acknowledged state answers {exact:?}",
                        sub.commands
                    ));
                }
                continue;
            }
            for (command, outcome) in sub.commands.iter().zip(outcomes) {
                if outcome.error_code() == Some(ErrorCode::SERVICE_UNAVAILABLE) {
                    let mut ids = Vec::new();
                    ids_named(command, &mut ids);
                    if ids.iter().any(|id| unread.contains(id)) {
                        self.report.unread_refused += 1;
                        continue;
                    }
                }
                let expected = self
                    .shadow
                    .apply_batch(self.now, std::slice::from_ref(command))
                    .outcomes
                    .remove(0);
                let got = as_whole(outcome);
                if got != expected {
                    return Err(format!(
                        "{command:?}\n  answered {got:?}\n  a ledger holding everything answers {expected:?}"
                    ));
                }
                match &got {
                    Outcome::Duplicate(_) | Outcome::QuoteDuplicate(_) => {
                        self.report.duplicates += 1
                    }
                    _ if got.error_code() == Some(ErrorCode::MODIFIED_REQUEST) => {
                        self.report.modified += 1
                    }
                    _ => {}
                }
            }
        }
        Ok(unknown)
    }

    /// After a fatal fault: the store holds what was acknowledged plus a
    /// prefix of `unknown` (in flight when it struck), never anything else.
    fn resolve_unknown(&mut self, unknown: &[&Sent]) -> Result<(), String> {
        let mut durable = self.disk.snapshot(None);
        normalize(&mut durable);
        let mut copy = self.copy_of_shadow()?;
        let mut tried = Vec::new();
        let matches = |copy: &Ledger, tried: &mut Vec<String>| {
            let mut state = copy.snapshot();
            normalize(&mut state);
            match difference(&durable, &state) {
                None => true,
                Some(problem) => {
                    tried.push(problem);
                    false
                }
            }
        };
        let mut found = matches(&copy, &mut tried);
        if !found && expire_if_due(&mut copy, self.now, &mut Vec::new()) {
            found = matches(&copy, &mut tried);
        }
        for sub in unknown {
            if found {
                break;
            }
            expire_if_due(&mut copy, self.now, &mut Vec::new());
            for command in &sub.commands {
                copy.apply_batch(self.now, std::slice::from_ref(command));
            }
            self.report.durable_unacknowledged += 1;
            found = matches(&copy, &mut tried);
        }
        if !found {
            return Err(format!(
                "after the fault the store holds neither what was acknowledged nor that plus a prefix of what was in flight: {}",
                tried.join("\n or ")
            ));
        }
        self.shadow = copy;
        Ok(())
    }

    /// Makes the pipeline apply an expiry that is due, if one is: the
    /// shadow expires in its place in the order of submissions, while the
    /// pipeline may do it in a batch of its own, before them, or (when
    /// every submission of a step was refused) not yet. A read goes into a
    /// batch after it either way.
    fn barrier(&mut self) -> Result<(), String> {
        if self
            .shadow
            .next_expiry_ms()
            .is_none_or(|at_ms| at_ms > self.now)
        {
            return Ok(());
        }
        let read = self.submit(vec![Command::ReadSettlementWindows]);
        let unknown = self.settle(&[read], false)?;
        match unknown.is_empty() {
            true => Ok(()),
            false => Err("a read after the step failed".into()),
        }
    }

    /// The pipeline told, once durable, exactly the expiries the shadow
    /// applied since the last check.
    fn check_expired(&mut self) -> Result<(), String> {
        let expected = std::mem::take(&mut self.expected_expired);
        self.report.expired += expected.len() as u64;
        let want = expected.len();
        self.wait_until("expired transfers told once durable", |sim| {
            sim.expired.lock().unwrap_or_else(|e| e.into_inner()).len() >= want
        })?;
        let told = std::mem::take(&mut *self.expired.lock().unwrap_or_else(|e| e.into_inner()));
        if told != expected {
            return Err(format!(
                "the pipeline told these transfers expired: {:?}; a ledger holding everything expired {:?}",
                told.iter().map(|v| v.transfer_id).collect::<Vec<_>>(),
                expected.iter().map(|v| v.transfer_id).collect::<Vec<_>>()
            ));
        }
        Ok(())
    }

    /// The store holds exactly what was acknowledged, audits clean, and the
    /// books balance; while the engine that wrote it runs, its committed
    /// records told the same rows.
    fn check_durable(&mut self) -> Result<(), String> {
        let mut durable = self.disk.snapshot(None);
        normalize(&mut durable);
        if self.engine.is_some() {
            let mut told = self
                .told
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .snapshot(None);
            normalize(&mut told);
            if let Some(problem) = difference(&told, &durable) {
                return Err(format!(
                    "the records told as committed are not what the store holds: {problem}"
                ));
            }
        }
        let mut expected = self.shadow.snapshot();
        normalize(&mut expected);
        if let Some(problem) = difference(&durable, &expected) {
            return Err(format!(
                "the store does not hold what was acknowledged: {problem}"
            ));
        }
        let problems = durable.audit();
        if !problems.is_empty() {
            return Err(format!("the store does not audit: {problems:?}"));
        }
        if let Some(retention_ms) = self.limits.transfer_retention_ms {
            let recent = self.disk.snapshot(Some(self.now - retention_ms));
            let problems = recent.audit();
            if !problems.is_empty() {
                return Err(format!(
                    "the store's load with a retention horizon does not audit: {problems:?}"
                ));
            }
        }
        self.shadow.check_balances()
    }

    /// `memory` holds what the shadow holds (with a horizon, all but what
    /// it may leave to the store; just recovered, all it must load).
    fn compare_memory(&self, what: &str, memory: &Ledger, recovered: bool) -> Result<(), String> {
        memory
            .check_balances()
            .map_err(|e| format!("{what} does not balance: {e}"))?;
        let mut mine = memory.snapshot();
        normalize(&mut mine);
        let mut whole = self.shadow.snapshot();
        normalize(&mut whole);
        let how = Partial {
            partial: self.config.retention,
            loaded_from_ms: match recovered {
                true => self.limits.transfer_retention_ms.map(|r| self.now - r),
                false => None,
            },
        };
        if let Some(problem) = memory_difference(&mine, &whole, how) {
            return Err(format!(
                "{what} differs from what was acknowledged: {problem}"
            ));
        }
        if memory.next_expiry_ms() != self.shadow.next_expiry_ms() {
            return Err(format!(
                "{what} expires next at {:?}, the acknowledged state at {:?}",
                memory.next_expiry_ms(),
                self.shadow.next_expiry_ms()
            ));
        }
        Ok(())
    }

    /// Stops the engine as `stop` says, recovers from what is durable,
    /// compares and starts again.
    fn restart(&mut self, stop: Stop) -> Result<(), String> {
        let engine = self.engine.take().expect("an engine runs");
        self.report.evicted += self.handle().stats().transfers_evicted;
        self.handle = None;
        match stop {
            Stop::Clean => {
                self.report.restarts += 1;
                let memory = engine
                    .shutdown()
                    .map_err(|e| format!("a clean shutdown failed: {e}"))?;
                self.compare_memory("the memory of the engine that ran", &memory, false)?;
            }
            Stop::Failed => match engine.shutdown() {
                Err(EngineError::StoreFailed(_)) => {}
                other => {
                    return Err(format!(
                        "a pipeline whose commit failed for good shut down with {:?}",
                        other.map(|_| "its ledger")
                    ))
                }
            },
            Stop::Crashed => {
                if !engine.abandon(DEADLINE) {
                    return Err("an abandoned pipeline's threads did not end".into());
                }
            }
        }
        // What the stopped process told or left untold belongs to no one.
        self.expired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.expected_expired.clear();
        self.check_durable()?;
        let mut store = self.disk.open();
        let (ledger, _) = recover_at(&mut store, self.limits, self.now)
            .map_err(|e| format!("recovery failed: {e}"))?;
        self.compare_memory("the recovered ledger", &ledger, true)?;
        self.start(ledger, store);
        // What expired while the process was down expires at once, now.
        if expire_if_due(&mut self.shadow, self.now, &mut self.expected_expired) {
            self.check_expired()?;
            self.check_durable()?;
        }
        Ok(())
    }
}

/// Applies [`Command::Expire`] if a reservation is due at `now_ms`, as the
/// pipeline does before a batch; whether it did.
fn expire_if_due(ledger: &mut Ledger, now_ms: i64, expired: &mut Vec<TransferView>) -> bool {
    if ledger.next_expiry_ms().is_none_or(|at_ms| at_ms > now_ms) {
        return false;
    }
    let result = ledger.apply_batch(now_ms, &[Command::Expire]);
    if let Some(Outcome::Expired(views)) = result.outcomes.into_iter().next() {
        expired.extend(views);
    }
    true
}

fn read_answers(ledger: &Ledger, commands: &[Command]) -> Vec<Outcome> {
    commands
        .iter()
        .map(|command| ledger.read(command).expect("a read"))
        .collect()
}
