//! The ledger pipeline: one or two threads between the API and the disk.
//!
//! ```text
//! submitters ──queue──► ledger thread ──records──► store thread ──► replies
//!                       (apply batch N+1)          (commit batch N, fsync)
//! ```
//!
//! The ledger thread never waits on a timer for work: it blocks on its
//! queue, takes everything waiting (up to a cap) as the next batch, applies
//! it, hands the records to the store thread and goes on. It wakes without a
//! message only at the next transfer's expiration instant. The store thread
//! commits whatever batches are waiting in one transaction (group commit: one
//! fsync however many batches) and only then releases their outcomes. A
//! batch's outcomes may depend on the batch before it, and batches commit in
//! order, so nothing is released that a crash could take back.
//!
//! On small machines one thread does both ([`PipelineThreads::One`]): it
//! applies a batch, commits it, and takes whatever queued during the commit
//! as the next batch. The rules above hold alike; only the overlap of apply
//! and commit is given up, for one hand-off fewer per batch.
//!
//! Before it applies a batch, the ledger thread reads from the store every
//! id the batch names that the ledger's memory does not hold (with a
//! retention horizon, finished transfers and quotes leave memory): one read
//! per batch, on the writer's connection in a one-thread pipeline (its
//! page cache is warm), on a connection of the ledger thread's own in a
//! two-thread one. The ledger then applies every rule to memory or to the
//! stored copy (the ledger's `prefetch.rs` says why an id that left memory
//! can never be taken as new). Nobody else reads the store to decide an
//! outcome.
//!
//! If a commit fails with a transient error (a full disk), nothing of it is
//! visible and memory is ahead of the disk by exactly the batches in hand:
//! whichever thread commits tries the same commit again, with backoff, until
//! it succeeds (or, once a shutdown is asked, for a last few seconds), and
//! meanwhile new submissions are refused with
//! [`EngineError::StoreUnavailable`] (the queue would only grow). Any other
//! commit failure is fatal: the pipeline stops taking work and answers every
//! pending and later submission with [`EngineError::StoreFailed`];
//! restarting recovers from the store. Either way nothing unacknowledged is
//! ever answered as done.
//!
//! While the store cannot commit, reads of reference data and balances
//! (every read but those of one transfer: [`from_memory`]) are answered
//! from memory by the ledger thread, at once — also in the middle of a
//! one-thread pipeline's retries — instead of being refused: see
//! ARCHITECTURE.md ("Durability") for what they show and why that is
//! acceptable. And a batch that records nothing (reads alone) needs no
//! commit: every batch before it is committed, so it is answered without
//! asking the store.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ledger::{
    Command, ErrorCode, Ledger, Limits, Outcome, PrefetchIds, Prefetched, Record, Rejection,
    TransferView,
};
use store::{Prefetch, Store, StoreError};

mod repeats;
pub use repeats::{Recovered, Repeats};

/// Called once with a submission's outcomes, after they are durable (or with
/// the reason they never will be). Runs on the thread that committed (the
/// store thread, or the ledger thread of a one-thread pipeline): keep it
/// short.
pub type Reply = Box<dyn FnOnce(Result<Vec<Outcome>, EngineError>) + Send>;

/// Like [`Reply`], but with the instants of the batch that decided the
/// outcomes (see [`EngineHandle::try_submit_timed`]).
pub type TimedReply = Box<dyn FnOnce(Result<(Vec<Outcome>, BatchTiming), EngineError>) + Send>;

/// When the batch holding a submission went through the pipeline: taken once
/// per batch and once per commit, never per command. The batch's prefetch
/// (its reads of the store) falls between `apply_started_at` and
/// `applied_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchTiming {
    /// The ledger thread began applying the batch (its queue wait ended).
    pub apply_started_at: Instant,
    /// The ledger thread finished applying it.
    pub applied_at: Instant,
    /// The commit holding it began (after the commit before, and with
    /// whatever other batches had queued meanwhile).
    pub commit_started_at: Instant,
    /// The store committed it (and the replies began to be called).
    pub durable_at: Instant,
}

/// Receives transfers that expired, after the expiry is durable.
pub type ExpiredSink = Box<dyn FnMut(Vec<TransferView>) + Send>;

/// Receives the records of every committed batch, in commit order, once
/// they are durable and before the batch's outcomes are released: whoever
/// keeps an in-memory copy of reference data (endpoints, parties, oracles,
/// pins) is current by the time a submitter hears back. Runs on the
/// committing thread: keep it short.
pub type CommittedSink = Box<dyn FnMut(&[Record]) + Send>;

/// Milliseconds since the Unix epoch.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    })
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineError {
    /// The pipeline is shutting down or has stopped.
    Stopped,
    /// The queue is full (only from [`EngineHandle::try_submit`]).
    Overloaded,
    /// A submission held more commands than one batch may.
    TooLarge { commands: usize, max: usize },
    /// A store commit failed; the pipeline has stopped.
    StoreFailed(String),
    /// The store cannot commit for now (a full disk); the pipeline keeps
    /// trying the batches in hand and takes new work once it can.
    StoreUnavailable(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Stopped => f.write_str("the ledger pipeline has stopped"),
            EngineError::Overloaded => f.write_str("the ledger queue is full"),
            EngineError::TooLarge { commands, max } => {
                write!(
                    f,
                    "a submission of {commands} commands exceeds the batch limit of {max}"
                )
            }
            EngineError::StoreFailed(why) => {
                write!(f, "the store failed, the pipeline has stopped: {why}")
            }
            EngineError::StoreUnavailable(why) => {
                write!(f, "the store cannot commit for now (retrying): {why}")
            }
        }
    }
}

impl std::error::Error for EngineError {}

/// How many threads carry the pipeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PipelineThreads {
    /// The ledger thread applies the next batch while the store thread
    /// commits the last (and whatever queued behind it): apply and commit
    /// overlap, at the price of a hand-off between the two threads for
    /// every batch. For machines with cores to spare.
    #[default]
    Two,
    /// One thread applies a batch and commits it; whatever arrives during
    /// the commit becomes the next batch. Apply is ~1 µs a command against
    /// a commit's fsync of ~1 ms, so the overlap buys little, while the
    /// hand-off (a wake and a context switch per batch on each side) costs
    /// CPU a small machine's HTTP workers need.
    One,
}

impl PipelineThreads {
    /// From a thread count as operators give it (`--pipeline-threads 1|2`).
    pub fn from_count(threads: u8) -> Option<PipelineThreads> {
        match threads {
            1 => Some(PipelineThreads::One),
            2 => Some(PipelineThreads::Two),
            _ => None,
        }
    }

    /// How many threads: the inverse of [`from_count`](Self::from_count).
    pub fn count(self) -> u8 {
        match self {
            PipelineThreads::One => 1,
            PipelineThreads::Two => 2,
        }
    }

    /// One thread on machines of up to four cores, where a core spent
    /// waking the store thread is a core the HTTP workers lack.
    pub fn for_cores(cores: usize) -> PipelineThreads {
        match cores {
            0..=4 => PipelineThreads::One,
            _ => PipelineThreads::Two,
        }
    }
}

pub struct EngineConfig {
    /// Most commands the ledger applies as one batch.
    pub max_batch_commands: usize,
    /// Submissions that may wait for the ledger thread; `submit` blocks and
    /// `try_submit` refuses beyond this.
    pub queue_capacity: usize,
    /// Ledger batches waiting for the store that may share one commit.
    pub max_batches_per_commit: usize,
    pub clock: Clock,
    pub on_expired: Option<ExpiredSink>,
    pub threads: PipelineThreads,
    /// Called once, from the committing thread, when a commit fails for
    /// good and the pipeline stops (a process on a shared store then gives
    /// up serving: see `kasi::ha`).
    pub on_failed: Option<FailedSink>,
    /// The pause before the first retry of a transient store failure; it
    /// doubles up to 2 s. 50 ms by default; a simulation, whose faults
    /// last a few attempts, shortens it.
    pub retry_first: Duration,
}

/// Told why the pipeline stopped for good.
pub type FailedSink = Box<dyn Fn(&str) + Send + Sync>;

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            max_batch_commands: 8192,
            queue_capacity: 65_536,
            max_batches_per_commit: 64,
            clock: system_clock(),
            on_expired: None,
            threads: PipelineThreads::default(),
            on_failed: None,
            retry_first: RETRY_FIRST,
        }
    }
}

/// Counters for logs, metrics and benchmarks. Monotonic.
#[derive(Default)]
pub struct Stats {
    pub ledger_batches: AtomicU64,
    pub commands: AtomicU64,
    pub store_commits: AtomicU64,
    pub records: AtomicU64,
    pub commit_nanos: AtomicU64,
    pub apply_nanos: AtomicU64,
    pub max_commit_nanos: AtomicU64,
    pub max_apply_nanos: AtomicU64,
    /// Commit attempts that failed (each retry of a transient failure
    /// counts).
    pub store_errors: AtomicU64,
    /// Ids the pipeline read from the store before applying (prefetch).
    pub store_lookups: AtomicU64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub ledger_batches: u64,
    pub commands: u64,
    pub store_commits: u64,
    pub records: u64,
    pub commit_nanos: u64,
    pub apply_nanos: u64,
    /// Longest single commit / batch apply so far.
    pub max_commit_nanos: u64,
    pub max_apply_nanos: u64,
    pub store_errors: u64,
    pub store_lookups: u64,
    /// The store takes commits (see [`EngineHandle::store_health`]); only
    /// [`EngineHandle::stats`] knows, [`Stats::snapshot`] says `true`.
    pub store_healthy: bool,
    /// Transfers in the ledger's memory now (a gauge), and finished ones
    /// that left it past the retention horizon since start.
    pub transfers_in_memory: u64,
    pub transfers_evicted: u64,
    /// Recorded quotes (persistent mode) in the ledger's memory now.
    pub quotes_in_memory: u64,
}

impl Stats {
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            ledger_batches: self.ledger_batches.load(Ordering::Relaxed),
            commands: self.commands.load(Ordering::Relaxed),
            store_commits: self.store_commits.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            commit_nanos: self.commit_nanos.load(Ordering::Relaxed),
            apply_nanos: self.apply_nanos.load(Ordering::Relaxed),
            max_commit_nanos: self.max_commit_nanos.load(Ordering::Relaxed),
            max_apply_nanos: self.max_apply_nanos.load(Ordering::Relaxed),
            store_errors: self.store_errors.load(Ordering::Relaxed),
            store_lookups: self.store_lookups.load(Ordering::Relaxed),
            store_healthy: true,
            transfers_in_memory: 0,
            transfers_evicted: 0,
            quotes_in_memory: 0,
        }
    }
}

struct Shared {
    /// See [`EngineHandle::on_committed`].
    on_committed: Mutex<Option<CommittedSink>>,
    stopped: AtomicBool,
    /// Set by [`Engine::abandon`]: nothing more is committed, not even a
    /// retry of the commit in hand.
    abandoned: AtomicBool,
    on_failed: Option<FailedSink>,
    failure: Mutex<Option<String>>,
    /// Set while a transient store failure is being retried.
    fault: Mutex<Option<StoreFault>>,
    stats: Stats,
    /// Batches (counted as [`Ledger::batches_applied`]) whose records are
    /// committed: eviction waits for them.
    durable_batches: AtomicU64,
    transfers_in_memory: AtomicU64,
    transfers_evicted: AtomicU64,
    quotes_in_memory: AtomicU64,
}

/// A transient store failure being retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreFault {
    pub why: String,
    /// When the first failed attempt ended (ms since the Unix epoch).
    pub since_ms: i64,
}

/// Whether the store takes commits, for `/health` and the metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreHealth {
    Healthy,
    /// Commits fail for now and are being retried.
    Faulted(StoreFault),
    /// A commit failed for good; the pipeline has stopped.
    Failed(String),
}

impl Shared {
    fn failure(&self) -> Option<EngineError> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .map(EngineError::StoreFailed)
    }

    fn fault(&self) -> Option<StoreFault> {
        self.fault.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_fault(&self, fault: Option<StoreFault>) {
        *self.fault.lock().unwrap_or_else(|e| e.into_inner()) = fault;
    }
}

/// Whoever waits for a submission's outcomes.
enum Replier {
    Plain(Reply),
    Timed(TimedReply),
}

impl Replier {
    fn ok(self, outcomes: Vec<Outcome>, timing: BatchTiming) {
        match self {
            Replier::Plain(reply) => reply(Ok(outcomes)),
            Replier::Timed(reply) => reply(Ok((outcomes, timing))),
        }
    }

    fn err(self, error: EngineError) {
        match self {
            Replier::Plain(reply) => reply(Err(error)),
            Replier::Timed(reply) => reply(Err(error)),
        }
    }
}

enum Message {
    Submit {
        commands: Vec<Command>,
        reply: Replier,
    },
    /// Reads sent while the store cannot commit: answered from memory at
    /// once (see [`from_memory`]).
    Read {
        commands: Vec<Command>,
        reply: Replier,
    },
    Stop,
}

/// Answers a message the queue did not take: full, or the pipeline gone.
fn refuse_unsent(unsent: TrySendError<Message>) {
    let (message, error) = match unsent {
        TrySendError::Full(message) => (message, EngineError::Overloaded),
        TrySendError::Disconnected(message) => (message, EngineError::Stopped),
    };
    if let Message::Submit { reply, .. } | Message::Read { reply, .. } = message {
        reply.err(error);
    }
}

/// Whether `command` is answered from memory while the store cannot
/// commit: every read but those of one transfer. A read of one transfer
/// says whether a request took effect (a DFSP's `GET /transfers/{ID}` is
/// answered by a callback it acts on), so it waits for the store like any
/// answer; balances, limits and reference data are what an operator needs
/// during an outage.
pub fn from_memory(command: &Command) -> bool {
    matches!(
        command,
        Command::ReadParticipants { .. }
            | Command::ReadSettlementModels
            | Command::ReadParties
            | Command::ReadOracles
            | Command::ReadSettlementWindows
            | Command::ReadSettlements
            | Command::ReadSettlementReport { .. }
            | Command::ReadAuditEvents(_)
            | Command::ReadCertificatePins
    )
}

/// Answers reads from `ledger` as it is now (see [`from_memory`]).
fn answer_from_memory(ledger: &Ledger, commands: &[Command], reply: Replier) {
    let outcomes = commands
        .iter()
        .map(|command| {
            ledger.read(command).unwrap_or_else(|| {
                Outcome::Rejected(Rejection::new(
                    ErrorCode::SERVICE_UNAVAILABLE,
                    "only reads are answered while the store cannot commit",
                ))
            })
        })
        .collect();
    let now = Instant::now();
    let timing = BatchTiming {
        apply_started_at: now,
        applied_at: now,
        commit_started_at: now,
        durable_at: now,
    };
    reply.ok(outcomes, timing);
}

/// A cheap, cloneable way to submit commands.
#[derive(Clone)]
pub struct EngineHandle {
    sender: SyncSender<Message>,
    shared: Arc<Shared>,
    max_batch_commands: usize,
}

impl EngineHandle {
    fn check(&self, commands: &[Command]) -> Result<(), EngineError> {
        if let Some(failure) = self.shared.failure() {
            return Err(failure);
        }
        if let Some(fault) = self.shared.fault() {
            return Err(EngineError::StoreUnavailable(fault.why));
        }
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(EngineError::Stopped);
        }
        if commands.len() > self.max_batch_commands {
            return Err(EngineError::TooLarge {
                commands: commands.len(),
                max: self.max_batch_commands,
            });
        }
        Ok(())
    }

    /// Queues `commands` (applied in order, within one batch); `reply` gets
    /// their outcomes once durable. Blocks while the queue is full.
    pub fn submit(&self, commands: Vec<Command>, reply: Reply) {
        self.send(commands, Replier::Plain(reply));
    }

    fn send(&self, commands: Vec<Command>, reply: Replier) {
        if let Err(error) = self.check(&commands) {
            return self.refuse(commands, reply, error);
        }
        if let Err(mpsc::SendError(Message::Submit { reply, .. })) =
            self.sender.send(Message::Submit { commands, reply })
        {
            reply.err(EngineError::Stopped);
        }
    }

    /// Like [`submit`](Self::submit), but refuses with
    /// [`EngineError::Overloaded`] instead of waiting for queue space.
    pub fn try_submit(&self, commands: Vec<Command>, reply: Reply) {
        self.try_send(commands, Replier::Plain(reply));
    }

    /// Like [`try_submit`](Self::try_submit), and the reply also gets the
    /// [`BatchTiming`] of the batch that decided the outcomes.
    pub fn try_submit_timed(&self, commands: Vec<Command>, reply: TimedReply) {
        self.try_send(commands, Replier::Timed(reply));
    }

    fn try_send(&self, commands: Vec<Command>, reply: Replier) {
        if let Err(error) = self.check(&commands) {
            return self.refuse(commands, reply, error);
        }
        if let Err(unsent) = self.sender.try_send(Message::Submit { commands, reply }) {
            refuse_unsent(unsent);
        }
    }

    /// A submission [`check`](Self::check) refused: reads answered from
    /// memory while the store cannot commit go to the ledger thread as
    /// such (never waiting for queue space); anything else gets `error`.
    fn refuse(&self, commands: Vec<Command>, reply: Replier, error: EngineError) {
        if !matches!(error, EngineError::StoreUnavailable(_)) || !commands.iter().all(from_memory) {
            return reply.err(error);
        }
        if let Err(unsent) = self.sender.try_send(Message::Read { commands, reply }) {
            refuse_unsent(unsent);
        }
    }

    /// Submits and waits for the durable outcomes.
    pub fn execute(&self, commands: Vec<Command>) -> Result<Vec<Outcome>, EngineError> {
        let (sender, receiver) = mpsc::sync_channel(1);
        self.submit(
            commands,
            Box::new(move |result| {
                let _ = sender.send(result);
            }),
        );
        receiver.recv().unwrap_or(Err(EngineError::Stopped))
    }

    /// Why the pipeline stopped taking commands, if it has (a failed
    /// commit, or shutdown); `None` while it serves.
    pub fn unavailable(&self) -> Option<EngineError> {
        if let Some(failure) = self.shared.failure() {
            return Some(failure);
        }
        if let Some(fault) = self.shared.fault() {
            return Some(EngineError::StoreUnavailable(fault.why));
        }
        self.shared
            .stopped
            .load(Ordering::Acquire)
            .then_some(EngineError::Stopped)
    }

    pub fn stats(&self) -> StatsSnapshot {
        let (transfers_in_memory, transfers_evicted) = self.transfer_memory();
        StatsSnapshot {
            store_healthy: self.store_health() == StoreHealth::Healthy,
            transfers_in_memory,
            transfers_evicted,
            quotes_in_memory: self.shared.quotes_in_memory.load(Ordering::Relaxed),
            ..self.shared.stats.snapshot()
        }
    }

    /// Whether the store takes commits now.
    pub fn store_health(&self) -> StoreHealth {
        let failure = self
            .shared
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match (failure, self.shared.fault()) {
            (Some(why), _) => StoreHealth::Failed(why),
            (None, Some(fault)) => StoreHealth::Faulted(fault),
            (None, None) => StoreHealth::Healthy,
        }
    }

    /// Transfers in the ledger's memory, and finished ones that left it
    /// since start.
    pub fn transfer_memory(&self) -> (u64, u64) {
        (
            self.shared.transfers_in_memory.load(Ordering::Relaxed),
            self.shared.transfers_evicted.load(Ordering::Relaxed),
        )
    }

    /// From now on, `sink` gets the records of every committed batch (see
    /// [`CommittedSink`]); it replaces an earlier one.
    pub fn on_committed(&self, sink: CommittedSink) {
        *self
            .shared
            .on_committed
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(sink);
    }

    /// Most commands one submission may hold.
    pub fn max_batch_commands(&self) -> usize {
        self.max_batch_commands
    }
}

/// The running pipeline. Dropping it stops it as [`Engine::shutdown`] does.
pub struct Engine {
    handle: EngineHandle,
    ledger_thread: Option<JoinHandle<Ledger>>,
    store_thread: Option<JoinHandle<()>>,
}

/// What recovery found, for the start-up log and BENCHMARKS.md.
#[derive(Clone, Debug)]
pub struct Recovery {
    pub participants: usize,
    pub accounts: usize,
    pub transfers: usize,
    /// Finished transfers older than the retention horizon, left in the
    /// store (summed, audited, not loaded).
    pub archived: u64,
    /// The history snapshot recovery started from: the seq through which it
    /// had summed the transfers (the rest was read row by row).
    pub history_snapshot_through: Option<u64>,
    /// Why a history snapshot was dropped and the whole history read
    /// instead (it did not add up), if it was.
    pub history_snapshot_dropped: Option<String>,
    pub load_time: Duration,
    pub rebuild_time: Duration,
}

/// Reads the store and rebuilds the ledger from it (after auditing it).
///
/// With a retention horizon the store may start from its history
/// snapshot; if what it then gives does not add up, the snapshot is
/// dropped and the whole history read again, so a bad snapshot costs a
/// slow start, never a refused one. If the whole history does not add up
/// either, recovery fails as it always has.
pub fn recover(store: &mut dyn Store, limits: Limits) -> Result<(Ledger, Recovery), StoreError> {
    recover_at(store, limits, (system_clock())())
}

/// [`recover`] at `now_ms` on the pipeline's clock (a simulation's), which
/// places the retention horizon.
pub fn recover_at(
    store: &mut dyn Store,
    limits: Limits,
    now_ms: i64,
) -> Result<(Ledger, Recovery), StoreError> {
    let started = Instant::now();
    let load = |store: &mut dyn Store| match limits.transfer_retention_ms {
        None => store.load(),
        Some(retention_ms) => store.load_recent(now_ms - retention_ms),
    };
    let mut snapshot = load(store)?;
    let mut history_snapshot_through = store.history_snapshot_through();
    let mut history_snapshot_dropped = None;
    let mut loaded = Instant::now();
    let mut shape = snapshot_shape(&snapshot);
    let ledger = match Ledger::restore(snapshot, limits) {
        Ok(ledger) => ledger,
        Err(problem) if store.forget_history_snapshot()? => {
            history_snapshot_dropped = Some(problem);
            snapshot = load(store)?;
            history_snapshot_through = None;
            loaded = Instant::now();
            shape = snapshot_shape(&snapshot);
            Ledger::restore(snapshot, limits).map_err(StoreError::fatal)?
        }
        Err(problem) => return Err(StoreError::fatal(problem)),
    };
    let (participants, accounts, transfers, archived) = shape;
    let recovery = Recovery {
        participants,
        accounts,
        transfers,
        archived,
        history_snapshot_through,
        history_snapshot_dropped,
        load_time: loaded - started,
        rebuild_time: loaded.elapsed(),
    };
    Ok((ledger, recovery))
}

fn snapshot_shape(snapshot: &ledger::Snapshot) -> (usize, usize, usize, u64) {
    (
        snapshot.participants.len(),
        snapshot.accounts.len(),
        snapshot.transfers.len(),
        snapshot.archived.transfers,
    )
}

struct StoreJob {
    /// The ledger's batch count once this batch was applied.
    batch: u64,
    records: Vec<Record>,
    replies: Vec<(Replier, Vec<Outcome>)>,
    expired: Vec<TransferView>,
    /// When the ledger thread began and finished applying the batch.
    apply_started_at: Instant,
    applied_at: Instant,
}

impl Engine {
    /// Starts the pipeline's threads on a recovered ledger.
    pub fn start(ledger: Ledger, store: Box<dyn Store>, config: EngineConfig) -> Engine {
        let max_batch_commands = config.max_batch_commands.max(1);
        let (sender, receiver) = mpsc::sync_channel(config.queue_capacity.max(1));
        let shared = Arc::new(Shared {
            on_committed: Mutex::new(None),
            stopped: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            on_failed: config.on_failed,
            failure: Mutex::new(None),
            fault: Mutex::new(None),
            stats: Stats::default(),
            durable_batches: AtomicU64::new(ledger.batches_applied()),
            transfers_in_memory: AtomicU64::new(ledger.transfer_count() as u64),
            transfers_evicted: AtomicU64::new(0),
            quotes_in_memory: AtomicU64::new(ledger.quote_count() as u64),
        });
        // The ledger thread's own reader, when the store thread holds the
        // writer. A store that cannot read back (a test's) refuses only
        // what would need it: ids that left memory.
        let prefetcher = match config.threads {
            PipelineThreads::One => None,
            PipelineThreads::Two => Some(store.open_prefetcher().map_err(|e| e.to_string())),
        };
        let committer = Committer {
            store,
            shared: shared.clone(),
            on_expired: config.on_expired,
            retry_first: config.retry_first,
            last_transfer_seq: 0,
        };
        let (to_store, store_thread) = match config.threads {
            PipelineThreads::One => (ToStore::Inline(committer), None),
            PipelineThreads::Two => {
                // A few batches may wait for the store while it commits;
                // more than that and the ledger thread waits too, so the
                // queue pushes back.
                let max_batches_per_commit = config.max_batches_per_commit.max(1);
                let (store_sender, store_receiver) = mpsc::sync_channel(max_batches_per_commit * 2);
                let store_thread = std::thread::Builder::new()
                    .name("kasi-store".into())
                    .spawn(move || store_loop(committer, store_receiver, max_batches_per_commit))
                    .expect("spawning the store thread");
                (ToStore::Thread(store_sender), Some(store_thread))
            }
        };
        let ledger_loop = LedgerLoop {
            ledger,
            receiver,
            to_store,
            shared: shared.clone(),
            clock: config.clock,
            max_batch_commands,
            prefetcher,
            prefetch_failures: Repeats::new(STILL_FAILING_LOG_EVERY),
            deferred: VecDeque::new(),
        };
        let ledger_thread = std::thread::Builder::new()
            .name("kasi-ledger".into())
            .spawn(move || ledger_loop.run())
            .expect("spawning the ledger thread");
        Engine {
            handle: EngineHandle {
                sender,
                shared,
                max_batch_commands,
            },
            ledger_thread: Some(ledger_thread),
            store_thread,
        }
    }

    pub fn handle(&self) -> EngineHandle {
        self.handle.clone()
    }

    /// Stops taking work, applies and commits everything already queued,
    /// releases its outcomes and closes the store. Returns the ledger as it
    /// was after the last batch, or the store failure if there was one.
    pub fn shutdown(mut self) -> Result<Ledger, EngineError> {
        let ledger = self.stop();
        if let Some(failure) = self.handle.shared.failure() {
            return Err(failure);
        }
        ledger.ok_or(EngineError::Stopped)
    }

    /// Stops at once without committing anything more (a process that lost
    /// its lease: another may be writing the store by now, and its own
    /// commits would fail the fencing check anyway). Whatever is queued or
    /// in hand is answered with [`EngineError::StoreFailed`]; none of it
    /// was acknowledged. Waits up to `wait` for the threads to end (a
    /// commit blocked on a dead connection ends when the connection
    /// fails); `false` if they had not, and then they are left to end by
    /// themselves.
    pub fn abandon(mut self, wait: Duration) -> bool {
        let shared = &self.handle.shared;
        shared.abandoned.store(true, Ordering::Release);
        shared.stopped.store(true, Ordering::Release);
        let threads = (self.ledger_thread.take(), self.store_thread.take());
        let sender = self.handle.sender.clone();
        let (ended, ending) = mpsc::channel();
        let joiner = std::thread::Builder::new()
            .name("kasi-abandon".into())
            .spawn(move || {
                // May wait for the ledger thread to drain a full queue,
                // which it does quickly: nothing is committed any more.
                let _ = sender.send(Message::Stop);
                if let Some(thread) = threads.0 {
                    let _ = thread.join();
                }
                if let Some(thread) = threads.1 {
                    let _ = thread.join();
                }
                let _ = ended.send(());
            });
        joiner.is_ok() && ending.recv_timeout(wait).is_ok()
    }

    fn stop(&mut self) -> Option<Ledger> {
        let ledger_thread = self.ledger_thread.take()?;
        // Said before the Stop is queued: with the queue full and a commit
        // retrying a transient failure, the send waits until the retrying
        // gives up, which it does only once it sees this.
        self.handle.shared.stopped.store(true, Ordering::Release);
        let _ = self.handle.sender.send(Message::Stop);
        let ledger = ledger_thread.join().ok();
        if let Some(store_thread) = self.store_thread.take() {
            let _ = store_thread.join();
        }
        ledger
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where the ledger thread hands an applied batch.
enum ToStore {
    /// To the store thread, which commits it with whatever else waits.
    Thread(SyncSender<StoreJob>),
    /// Committed by the ledger thread itself before its next batch.
    Inline(Committer),
}

struct LedgerLoop {
    ledger: Ledger,
    receiver: Receiver<Message>,
    to_store: ToStore,
    shared: Arc<Shared>,
    clock: Clock,
    max_batch_commands: usize,
    /// The ledger thread's reader of a two-thread pipeline (or why it could
    /// not be opened); a one-thread pipeline reads on the writer.
    prefetcher: Option<Result<Box<dyn Prefetch>, String>>,
    /// A store that cannot be read fails every batch's prefetch: said once,
    /// then at most every [`STILL_FAILING_LOG_EVERY`].
    prefetch_failures: Repeats,
    /// Submissions (and a stop) taken off the queue while a one-thread
    /// pipeline retried a commit and answered reads: the next batch's
    /// first, in order.
    deferred: VecDeque<Message>,
}

/// Waits `pause` (a one-thread pipeline's backoff between two tries of a
/// commit) answering reads from memory meanwhile; whatever else arrives is
/// kept, in order, in `deferred` for after the commit.
fn serve_reads_for(
    ledger: &Ledger,
    receiver: &Receiver<Message>,
    deferred: &mut VecDeque<Message>,
    pause: Duration,
) {
    let until = Instant::now() + pause;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        match receiver.recv_timeout(left) {
            Ok(Message::Read { commands, reply }) => answer_from_memory(ledger, &commands, reply),
            // Reads queued just before the fault was known: answered like
            // those sent after, not held for the whole outage.
            Ok(Message::Submit { commands, reply })
                if !commands.is_empty() && commands.iter().all(from_memory) =>
            {
                answer_from_memory(ledger, &commands, reply)
            }
            Ok(message) => deferred.push_back(message),
            Err(RecvTimeoutError::Timeout) => return,
            Err(RecvTimeoutError::Disconnected) => return std::thread::sleep(left),
        }
    }
}

impl LedgerLoop {
    fn run(mut self) -> Ledger {
        let mut commands: Vec<Command> = Vec::with_capacity(self.max_batch_commands);
        let mut replies: Vec<(Replier, usize)> = Vec::new();
        let mut stopping = false;
        while !stopping {
            self.evict(0);
            // Wait for the first submission, or until the next expiry (or
            // eviction) is due.
            let now_ms = (self.clock)();
            // After a fatal store failure no batch is applied any more (see
            // `apply`): an expiry that is due would stay due, and waking
            // for it would spin this thread until the restart; and nothing
            // becomes durable again for an eviction to wait for. So only
            // a message wakes it then.
            let failed = self.shared.failure().is_some();
            let next_expiry_ms = self.ledger.next_expiry_ms().filter(|_| !failed);
            let expiry_due = next_expiry_ms.is_some_and(|at_ms| at_ms <= now_ms);
            // An eviction that is due waits for the store (a few ms).
            let next_eviction_ms = match failed {
                true => None,
                false => self
                    .ledger
                    .next_eviction_ms()
                    .map(|at_ms| at_ms.max(now_ms + 10)),
            };
            let next_expiry_ms = next_expiry_ms.into_iter().chain(next_eviction_ms).min();
            if !expiry_due {
                let message = match (self.deferred.pop_front(), next_expiry_ms) {
                    (Some(message), _) => Ok(message),
                    (None, None) => self
                        .receiver
                        .recv()
                        .map_err(|_| RecvTimeoutError::Disconnected),
                    (None, Some(at_ms)) => self
                        .receiver
                        .recv_timeout(Duration::from_millis((at_ms - now_ms) as u64)),
                };
                match message {
                    Ok(message) => stopping |= self.take(message, &mut commands, &mut replies),
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => stopping = true,
                }
            }
            // Everything else already waiting joins the batch, up to the cap.
            while !stopping && commands.len() < self.max_batch_commands {
                let next = match self.deferred.pop_front() {
                    Some(message) => Ok(message),
                    None => self.receiver.try_recv(),
                };
                match next {
                    Ok(message) => stopping |= self.take(message, &mut commands, &mut replies),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => stopping = true,
                }
            }
            self.apply(&mut commands, &mut replies);
        }
        // Whatever raced with the stop is answered, not dropped.
        self.shared.stopped.store(true, Ordering::Release);
        let left = std::mem::take(&mut self.deferred);
        for message in left.into_iter().chain(self.receiver.try_iter()) {
            if let Message::Submit { reply, .. } | Message::Read { reply, .. } = message {
                reply.err(EngineError::Stopped);
            }
        }
        self.ledger
    }

    /// Lets finished transfers past the retention horizon leave memory, at
    /// most 4,096 (+ `extra`) per call so that no batch waits long for it,
    /// then publishes the ledger's size and eviction count. The durable watermark is
    /// read before the clock, so whatever is evicted was committed before.
    fn evict(&mut self, extra: usize) {
        let durable = self.shared.durable_batches.load(Ordering::Acquire);
        debug_assert!(
            durable <= self.ledger.batches_applied(),
            "{durable} batches durable of {} applied",
            self.ledger.batches_applied()
        );
        let now_ms = (self.clock)();
        if self
            .ledger
            .next_eviction_ms()
            .is_some_and(|at_ms| at_ms <= now_ms)
        {
            self.ledger.evict(now_ms, durable, 4096 + extra);
        }
        self.shared
            .transfers_in_memory
            .store(self.ledger.transfer_count() as u64, Ordering::Relaxed);
        self.shared
            .transfers_evicted
            .store(self.ledger.transfers_evicted(), Ordering::Release);
        self.shared
            .quotes_in_memory
            .store(self.ledger.quote_count() as u64, Ordering::Relaxed);
    }

    /// Adds a message to the batch being built; returns true on `Stop`.
    fn take(
        &self,
        message: Message,
        commands: &mut Vec<Command>,
        replies: &mut Vec<(Replier, usize)>,
    ) -> bool {
        match message {
            Message::Submit {
                commands: mut submitted,
                reply,
            } => {
                replies.push((reply, submitted.len()));
                commands.append(&mut submitted);
                false
            }
            // Sent while the store could not commit: answered now, from
            // what the batches applied so far made of the ledger.
            Message::Read {
                commands: reads,
                reply,
            } => {
                answer_from_memory(&self.ledger, &reads, reply);
                false
            }
            Message::Stop => true,
        }
    }

    /// Reads from the store what `commands` name that the ledger's memory
    /// does not hold, in one read: on this thread, after the last eviction
    /// (see the ledger's `prefetch.rs`). A read that fails leaves those ids
    /// unanswered, and the ledger refuses the commands naming them (2003).
    fn prefetch(&mut self, commands: &[Command]) -> Prefetched {
        let ids = self.ledger.prefetch_ids(commands);
        if ids.is_empty() {
            return Prefetched::default();
        }
        let read = match (&mut self.to_store, &mut self.prefetcher) {
            (ToStore::Inline(committer), _) => committer.store.prefetch(&ids),
            (ToStore::Thread(_), Some(Ok(prefetcher))) => prefetcher.prefetch(&ids),
            (ToStore::Thread(_), Some(Err(why))) => Err(StoreError::fatal(why.clone())),
            (ToStore::Thread(_), None) => Err(StoreError::fatal("no reader was opened")),
        };
        self.shared
            .stats
            .store_lookups
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        let (prefetched, failed) = match read {
            Ok(prefetched) => {
                // A store that leaves an id unanswered gets its commands
                // refused (`prefetch.rs`); in a debug build it is a bug.
                debug_assert!(
                    ids.transfers
                        .iter()
                        .all(|id| prefetched.transfers.contains_key(id))
                        && ids
                            .quotes
                            .iter()
                            .all(|id| prefetched.quotes.contains_key(id))
                        && ids
                            .conversions
                            .iter()
                            .all(|id| prefetched.conversions.contains_key(id)),
                    "the store answered every id asked: {ids:?}"
                );
                let failed = match prefetched.unreadable.is_empty() {
                    true => None,
                    false => Some((
                        prefetched.unreadable.join("; "),
                        prefetched.unreadable.len(),
                    )),
                };
                (prefetched, failed)
            }
            Err(error) => (
                Prefetched::failed(&ids),
                Some((error.to_string(), ids.len())),
            ),
        };
        self.log_prefetch(&ids, failed);
        prefetched
    }

    fn log_prefetch(&mut self, ids: &PrefetchIds, failed: Option<(String, usize)>) {
        // Named only when a line is written: a read that works, every
        // batch's, allocates nothing for the log.
        let store = || match &self.to_store {
            ToStore::Inline(committer) => committer.store.describe(),
            ToStore::Thread(_) => "the store".to_string(),
        };
        match failed {
            Some((error, unread)) => {
                if let Some(repeated) = self.prefetch_failures.failed() {
                    tracing::error!(
                        store = %store(),
                        %error,
                        unread,
                        asked = ids.len(),
                        repeated,
                        "reading the store failed: ids that left memory could not be read, the commands naming them are refused (2003, retry later)"
                    );
                }
            }
            None => {
                if let Some(recovered) = self.prefetch_failures.recovered() {
                    tracing::warn!(
                        store = %store(),
                        failures = recovered.failures,
                        failing_ms = recovered.failing_for.as_millis() as u64,
                        "reading the store works again"
                    );
                }
            }
        }
    }

    fn apply(&mut self, commands: &mut Vec<Command>, replies: &mut Vec<(Replier, usize)>) {
        if let Some(failure) = self.shared.failure() {
            commands.clear();
            for (reply, _) in replies.drain(..) {
                reply.err(failure.clone());
            }
            return;
        }
        let now_ms = (self.clock)();
        let expire = self
            .ledger
            .next_expiry_ms()
            .is_some_and(|at_ms| at_ms <= now_ms);
        if commands.is_empty() && !expire {
            return;
        }
        if expire {
            commands.insert(0, Command::Expire);
        }
        let apply_started_at = Instant::now();
        let prefetched = self.prefetch(commands);
        let result = self
            .ledger
            .apply_batch_prefetched(now_ms, commands, prefetched);
        let applied_at = Instant::now();
        let stats = &self.shared.stats;
        let apply_nanos = (applied_at - apply_started_at).as_nanos() as u64;
        stats.apply_nanos.fetch_add(apply_nanos, Ordering::Relaxed);
        stats
            .max_apply_nanos
            .fetch_max(apply_nanos, Ordering::Relaxed);
        stats.ledger_batches.fetch_add(1, Ordering::Relaxed);
        stats
            .commands
            .fetch_add(commands.len() as u64, Ordering::Relaxed);
        let count = commands.len();
        commands.clear();
        debug_assert_eq!(result.outcomes.len(), count, "one outcome per command");
        debug_assert_eq!(
            replies.iter().map(|(_, n)| n).sum::<usize>() + usize::from(expire),
            count,
            "the submissions hold the batch's commands"
        );

        let mut outcomes = result.outcomes.into_iter();
        let expired = match expire {
            true => match outcomes.next() {
                Some(Outcome::Expired(views)) => views,
                _ => unreachable!("Expire was the batch's first command"),
            },
            false => Vec::new(),
        };
        let replies = replies
            .drain(..)
            .map(|(reply, count)| (reply, outcomes.by_ref().take(count).collect()))
            .collect();
        debug_assert!(outcomes.next().is_none(), "every outcome went to a reply");
        self.evict(self.max_batch_commands.min(4 * count));
        let job = StoreJob {
            batch: self.ledger.batches_applied(),
            records: result.records,
            replies,
            expired,
            apply_started_at,
            applied_at,
        };
        match &mut self.to_store {
            ToStore::Inline(committer) => committer.commit(vec![job], &mut |pause| {
                serve_reads_for(&self.ledger, &self.receiver, &mut self.deferred, pause)
            }),
            ToStore::Thread(sender) => {
                if let Err(mpsc::SendError(job)) = sender.send(job) {
                    // The store thread is gone: it failed and said why.
                    let failure = self.shared.failure().unwrap_or(EngineError::Stopped);
                    for (reply, _) in job.replies {
                        reply.err(failure.clone());
                    }
                }
            }
        }
    }
}

/// Pause before the first retry of a transient store failure; it doubles
/// up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// How often a store that keeps failing is logged again.
const STILL_FAILING_LOG_EVERY: Duration = Duration::from_secs(30);
/// Once shutdown has begun, how long a transient failure is still retried
/// before the batches in hand are given up (they were never acknowledged).
const RETRY_AFTER_STOP: Duration = Duration::from_secs(10);

/// Commits `batches`, trying again after transient failures until the
/// store takes them (`idle` waits out each backoff); the commit's start and
/// durable instants, or why it never will.
fn commit_until_done(
    store: &mut dyn Store,
    batches: &[&[Record]],
    shared: &Shared,
    retry_first: Duration,
    idle: &mut dyn FnMut(Duration),
) -> Result<(Instant, Instant), EngineError> {
    let stats = &shared.stats;
    let mut pause = retry_first;
    let mut first_failed_at: Option<Instant> = None;
    let mut logged_at = Instant::now();
    let mut stop_seen_at: Option<Instant> = None;
    let mut attempts: u64 = 0;
    loop {
        if shared.abandoned.load(Ordering::Acquire) {
            let why = format!(
                "{}: not committed, the pipeline was abandoned (this process gave up serving)",
                store.describe()
            );
            shared.set_fault(None);
            *shared.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
            return Err(EngineError::StoreFailed(why));
        }
        attempts += 1;
        let started = Instant::now();
        let committed = store.commit(batches);
        let durable_at = Instant::now();
        match committed {
            Ok(()) => {
                let commit_nanos = (durable_at - started).as_nanos() as u64;
                stats
                    .commit_nanos
                    .fetch_add(commit_nanos, Ordering::Relaxed);
                stats
                    .max_commit_nanos
                    .fetch_max(commit_nanos, Ordering::Relaxed);
                stats.store_commits.fetch_add(1, Ordering::Relaxed);
                stats.records.fetch_add(
                    batches.iter().map(|b| b.len() as u64).sum(),
                    Ordering::Relaxed,
                );
                if let Some(failed_at) = first_failed_at {
                    shared.set_fault(None);
                    tracing::warn!(
                        store = %store.describe(),
                        failing_ms = failed_at.elapsed().as_millis() as u64,
                        attempts,
                        "store commits again; the hub takes new work"
                    );
                }
                return Ok((started, durable_at));
            }
            Err(error) => {
                stats.store_errors.fetch_add(1, Ordering::Relaxed);
                let why = format!("{} commit failed: {error}", store.describe());
                let stopping = shared.stopped.load(Ordering::Acquire);
                if stopping && stop_seen_at.is_none() {
                    stop_seen_at = Some(Instant::now());
                }
                let given_up = stop_seen_at.is_some_and(|at| at.elapsed() >= RETRY_AFTER_STOP);
                if !error.transient || given_up {
                    shared.set_fault(None);
                    *shared.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
                    tracing::error!(
                        error = %why,
                        transient = error.transient,
                        "store commit failed for good: the pipeline stops; what is durable is recovered at the next start (on PostgreSQL: by whichever process takes the lease next, this one included)"
                    );
                    if let Some(on_failed) = &shared.on_failed {
                        on_failed(&why);
                    }
                    return Err(EngineError::StoreFailed(why));
                }
                match first_failed_at {
                    None => {
                        first_failed_at = Some(Instant::now());
                        logged_at = Instant::now();
                        shared.set_fault(Some(StoreFault {
                            why: why.clone(),
                            since_ms: SystemTime::now()
                                .duration_since(UNIX_EPOCH)
                                .map_or(0, |d| d.as_millis() as i64),
                        }));
                        tracing::error!(
                            error = %why,
                            "store commit failed; retrying the same commit until it succeeds, refusing new work meanwhile (a full disk, a lost database connection: see the error)"
                        );
                    }
                    Some(failed_at) if logged_at.elapsed() >= STILL_FAILING_LOG_EVERY => {
                        logged_at = Instant::now();
                        tracing::error!(
                            error = %why,
                            failing_s = failed_at.elapsed().as_secs(),
                            attempts,
                            "store still cannot commit"
                        );
                    }
                    Some(_) => {}
                }
                idle(pause);
                pause = (pause * 2).min(RETRY_MAX);
            }
        }
    }
}

/// Commits applied batches and releases their outcomes: on the store
/// thread, or inline on the ledger thread.
struct Committer {
    store: Box<dyn Store>,
    shared: Arc<Shared>,
    on_expired: Option<ExpiredSink>,
    retry_first: Duration,
    /// The highest transfer seq handed to the store (checked in debug
    /// builds only: seqs reach the store in increasing order).
    last_transfer_seq: u64,
}

impl Committer {
    /// Commits `jobs` in one transaction, then answers each of their
    /// submissions, in order (or tells them why never); `idle` waits out
    /// the backoff between two tries.
    fn commit(&mut self, jobs: Vec<StoreJob>, idle: &mut dyn FnMut(Duration)) {
        let shared = &*self.shared;
        let result = match shared.failure() {
            Some(failure) => Err(failure),
            // Nothing to make durable (reads alone), and every batch before
            // these is committed (in order): answered without asking the
            // store, which may be down. Not once stopping: then every
            // answer waits for the store as before.
            None if !shared.stopped.load(Ordering::Acquire)
                && jobs.iter().all(|job| job.records.is_empty()) =>
            {
                let now = Instant::now();
                Ok((now, now))
            }
            None => {
                let batches: Vec<&[Record]> =
                    jobs.iter().map(|job| job.records.as_slice()).collect();
                debug_assert!(
                    jobs.windows(2).all(|pair| pair[0].batch < pair[1].batch),
                    "batches reach the store in the order they were applied"
                );
                if cfg!(debug_assertions) {
                    self.last_transfer_seq = check_transfer_seqs(self.last_transfer_seq, &batches);
                }
                commit_until_done(&mut *self.store, &batches, shared, self.retry_first, idle)
            }
        };
        // One lock per commit, not per batch.
        let mut on_committed = match &result {
            Ok(_) => Some(
                shared
                    .on_committed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
            ),
            Err(_) => None,
        };
        for job in jobs {
            match &result {
                Ok((commit_started_at, durable_at)) => {
                    if let Some(sink) = on_committed.as_mut().and_then(|sink| sink.as_mut()) {
                        if !job.records.is_empty() {
                            sink(&job.records);
                        }
                    }
                    let timing = BatchTiming {
                        apply_started_at: job.apply_started_at,
                        applied_at: job.applied_at,
                        commit_started_at: *commit_started_at,
                        durable_at: *durable_at,
                    };
                    let durable_before = shared
                        .durable_batches
                        .fetch_max(job.batch, Ordering::Release);
                    // Eviction trusts this watermark: it only ever grows.
                    debug_assert!(
                        durable_before < job.batch,
                        "batch {} made durable after batch {durable_before}",
                        job.batch
                    );
                    for (reply, outcomes) in job.replies {
                        reply.ok(outcomes, timing);
                    }
                    if let (Some(sink), false) = (self.on_expired.as_mut(), job.expired.is_empty())
                    {
                        sink(job.expired);
                    }
                }
                Err(error) => {
                    for (reply, _) in job.replies {
                        reply.err(error.clone());
                    }
                }
            }
        }
    }
}

/// Debug builds: every transfer row reaches the store with a seq above
/// those committed before it (the ledger numbers them in order, and
/// batches commit in order); returns the highest.
fn check_transfer_seqs(mut last: u64, batches: &[&[Record]]) -> u64 {
    for record in batches.iter().flat_map(|batch| batch.iter()) {
        if let Record::Transfer(row) = record {
            assert!(
                row.seq > last,
                "transfer seq {} committed after seq {last}",
                row.seq
            );
            last = row.seq;
        }
    }
    last
}

fn store_loop(
    mut committer: Committer,
    receiver: Receiver<StoreJob>,
    max_batches_per_commit: usize,
) {
    while let Ok(first) = receiver.recv() {
        let mut jobs = vec![first];
        while jobs.len() < max_batches_per_commit {
            match receiver.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        committer.commit(jobs, &mut std::thread::sleep);
    }
}
