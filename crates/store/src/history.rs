//! History snapshots: what recovery needs of transfers that finished long
//! ago, summed ahead of time, so that a restart reads only the recent
//! transfers, however long the store's history. The algorithm is the
//! same on both backends; each reads its rows through [`HistorySource`]
//! (SQLite: `sqlite_history.rs`, PostgreSQL: `pg_history.rs`) and stores
//! the snapshot in the same four tables.
//!
//! What it sums, keeps and loads are the movements between two DFSPs'
//! positions (`TransferKind::is_between_positions`): FSPIOP transfers and
//! conversions alike, each with its FX rows (`transfer_fx`, a conversion's
//! acceptance), read with it. A snapshot, computed from some state of the
//! store, says:
//! - every such transfer with `seq <= through_seq` that finished before
//!   `cut_ms` (by its `transfer_finishes` row, or a REJECTED prepare by its
//!   own instant) is *folded*: counted, what its commit moved summed per
//!   account, and per (payer, payee) pair if it committed in `window`, the
//!   window open when the snapshot was computed;
//! - `kept` lists the other such transfers with `seq <= through_seq`
//!   that have no finish row there: unfinished ones, and REJECTED prepares
//!   not yet folded;
//! - every other transfer with `seq <= through_seq` is a funds movement
//!   (found by the `transfers_funds` index) or has a finish row at or after
//!   `cut_ms` (found by the `transfer_finishes_by_time` index).
//!
//! Rows are never updated or deleted, new transfers get higher seqs, and a
//! finish is only ever added to a transfer that had none (a kept one, or
//! one after `through_seq`), so all three stay true as the store grows,
//! whichever kasi writes it. Recovery reads the snapshot, the kept
//! transfers, the funds movements, the transfers after `through_seq` and
//! the finishes since `cut_ms`, and nothing else; the audit then checks the
//! snapshot's sums against the accounts as it checks everything else.
//!
//! The snapshotter thread advances the snapshot from the one before it,
//! reading only what changed since (the kept transfers, the new ones, the
//! finishes between the two cuts), in read transactions of its own; the
//! store's writer stores the result in its next commit, so a snapshot is
//! written atomically with a batch, or not at all (and on PostgreSQL under
//! the writer's fencing number, like every commit).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ledger::{
    AccountId, Amount, Archived, ConversionFulfilRow, FinishRow, Snapshot, TransferRow,
    TransferState, WindowPairSum,
};

use crate::StoreError;

/// A transfer (with its FX link), its finish, if it has one, and a
/// conversion's acceptance by its FXP, if it has one.
pub(crate) type Joined = (TransferRow, Option<FinishRow>, Option<ConversionFulfilRow>);

/// What a [`HistorySource`] calls for each row it reads.
pub(crate) type Each<'a> = &'a mut dyn FnMut(Joined) -> Result<(), StoreError>;

/// What the algorithm reads of a store, every call within one read
/// transaction (one consistent state of the store).
pub(crate) trait HistorySource {
    /// The stored snapshot, if there is one (and the tables exist: a store
    /// read as it is by `kasi audit` may predate them).
    fn stored(&mut self) -> Result<Option<HistorySnapshot>, StoreError>;

    /// The highest transfer seq, 0 without transfers.
    fn last_seq(&mut self) -> Result<u64, StoreError>;

    /// The settlement window open now, if any.
    fn open_window(&mut self) -> Result<Option<u32>, StoreError>;

    /// Calls `each` for the transfers with these seqs (sorted), in any
    /// order; a seq the store does not hold is an error.
    fn each_of(&mut self, seqs: &[u64], each: Each<'_>) -> Result<(), StoreError>;

    /// Calls `each` for the transfers with `after < seq <= through`, in seq
    /// order.
    fn each_between(&mut self, after: u64, through: u64, each: Each<'_>) -> Result<(), StoreError>;

    /// Calls `each` for the transfers with seqs in `seqs` finished at or
    /// after `from_ms` and before `until_ms` (by their finish rows), in any
    /// order.
    fn each_finished_between(
        &mut self,
        from_ms: i64,
        until_ms: i64,
        seqs: Seqs,
        each: Each<'_>,
    ) -> Result<(), StoreError>;

    /// Calls `each` for the funds movements with seqs in `seqs`, in any
    /// order.
    fn each_funds_movement(&mut self, seqs: Seqs, each: Each<'_>) -> Result<(), StoreError>;

    /// Another source that reads the same state of the store on a
    /// connection of its own, for a second thread; `None` where the store
    /// cannot promise the same state (a SQLite store another process may
    /// be writing).
    fn fork(&mut self) -> Result<Option<Box<dyn HistorySource + Send>>, StoreError> {
        Ok(None)
    }
}

/// The seqs `after < seq <= through`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seqs {
    pub(crate) after: u64,
    pub(crate) through: u64,
}

/// A kept seq the store does not hold.
pub(crate) fn missing_kept(seq: u64) -> StoreError {
    StoreError::fatal(format!(
        "the history snapshot keeps seq {seq}, which the store does not hold"
    ))
}

/// Most new transfers one step of the snapshotter reads in one read
/// transaction: the first snapshot of a long history is built in steps,
/// so that no read holds the write-ahead log (or PostgreSQL's vacuum) back
/// for long.
const STEP_TRANSFERS: u64 = 200_000;

/// When a transfer finished, if it has.
pub(crate) fn finished_at_ms(transfer: &TransferRow, finish: Option<&FinishRow>) -> Option<i64> {
    match finish {
        Some(finish) => Some(finish.finished_at_ms),
        None if transfer.state.is_final() => Some(transfer.prepared_at_ms),
        None => None,
    }
}

/// Whether recovery with this horizon sums a transfer instead of loading it.
pub(crate) fn is_archived(
    transfer: &TransferRow,
    finish: Option<&FinishRow>,
    horizon_ms: i64,
) -> bool {
    transfer.kind.is_between_positions()
        && finished_at_ms(transfer, finish).is_some_and(|at_ms| at_ms < horizon_ms)
}

/// What a store's `check_history_snapshot` found: the snapshot's seq,
/// and how it differs from the whole history, if it does.
pub type HistoryCheck = (u64, Result<(), String>);

/// Transfers summed: the history snapshot's content, and what recovery
/// adds to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistorySnapshot {
    pub through_seq: u64,
    pub cut_ms: i64,
    pub transfers: u64,
    pub last_seq: u64,
    pub last_at_ms: i64,
    pub values: BTreeMap<AccountId, Amount>,
    pub window: Option<u32>,
    pub pairs: BTreeMap<(AccountId, AccountId), (Amount, u64)>,
    /// Sorted.
    pub kept: Vec<u64>,
}

impl HistorySnapshot {
    /// Nothing summed yet.
    pub fn empty() -> HistorySnapshot {
        HistorySnapshot {
            through_seq: 0,
            cut_ms: i64::MIN,
            transfers: 0,
            last_seq: 0,
            last_at_ms: 0,
            values: BTreeMap::new(),
            window: None,
            pairs: BTreeMap::new(),
            kept: Vec::new(),
        }
    }

    /// Pair sums count only for the window open now.
    pub(crate) fn in_window(&mut self, open_window: Option<u32>) {
        if self.window != open_window {
            self.pairs.clear();
            self.window = open_window;
        }
    }

    /// Adds a finished transfer or conversion.
    pub(crate) fn fold(
        &mut self,
        transfer: &TransferRow,
        finish: Option<&FinishRow>,
    ) -> Result<(), StoreError> {
        let at_ms = finished_at_ms(transfer, finish).ok_or_else(|| {
            StoreError::fatal(format!("seq {} summed before it finished", transfer.seq))
        })?;
        self.transfers += 1;
        self.last_seq = self.last_seq.max(transfer.seq);
        self.last_at_ms = self.last_at_ms.max(at_ms);
        let state = finish.map_or(transfer.state, |finish| finish.state);
        if state != TransferState::Committed {
            return Ok(());
        }
        let overflow =
            || StoreError::fatal(format!("summed values overflow at seq {}", transfer.seq));
        let debit = self.values.entry(transfer.debit).or_default();
        *debit = debit.checked_add(transfer.amount).ok_or_else(overflow)?;
        let credit = self.values.entry(transfer.credit).or_default();
        *credit = credit.checked_sub(transfer.amount).ok_or_else(overflow)?;
        let window = finish.and_then(|finish| finish.settlement_window);
        if window.is_some() && window == self.window {
            let (amount, commits) = self
                .pairs
                .entry((transfer.debit, transfer.credit))
                .or_insert((Amount::ZERO, 0));
            *amount = amount.checked_add(transfer.amount).ok_or_else(overflow)?;
            *commits += 1;
        }
        Ok(())
    }

    /// Adds what `other` summed (of other transfers, in the same window).
    fn merge(&mut self, other: HistorySnapshot) -> Result<(), StoreError> {
        let overflow = || StoreError::fatal("summed values overflow");
        self.transfers += other.transfers;
        self.last_seq = self.last_seq.max(other.last_seq);
        self.last_at_ms = self.last_at_ms.max(other.last_at_ms);
        for (account, value) in other.values {
            let sum = self.values.entry(account).or_default();
            *sum = sum.checked_add(value).ok_or_else(overflow)?;
        }
        for (pair, (amount, commits)) in other.pairs {
            let (sum, count) = self.pairs.entry(pair).or_insert((Amount::ZERO, 0));
            *sum = sum.checked_add(amount).ok_or_else(overflow)?;
            *count += commits;
        }
        Ok(())
    }

    pub(crate) fn into_archived(self) -> Archived {
        Archived {
            transfers: self.transfers,
            values: self.values.into_iter().collect(),
            last_seq: self.last_seq,
            last_at_ms: self.last_at_ms,
            open_window_pairs: self
                .pairs
                .into_iter()
                .map(|((debit, credit), (amount, commits))| WindowPairSum {
                    debit,
                    credit,
                    amount,
                    commits,
                })
                .collect(),
        }
    }
}

/// Where a step of the snapshotter puts a transfer.
enum Place {
    Fold,
    Keep,
    /// Found through its finish (at or after the cut) or as a funds
    /// movement.
    Elsewhere,
}

fn place(transfer: &TransferRow, finish: Option<&FinishRow>, cut_ms: i64) -> Place {
    if !transfer.kind.is_between_positions() {
        return Place::Elsewhere;
    }
    match finished_at_ms(transfer, finish) {
        None => Place::Keep,
        Some(at_ms) if at_ms < cut_ms => Place::Fold,
        Some(_) if finish.is_none() => Place::Keep,
        Some(_) => Place::Elsewhere,
    }
}

/// One step of the snapshotter, in one read transaction of `source`: the
/// snapshot after `base` that folds the transfers finished before `cut_ms`
/// (or `base`'s cut, if later) among the first `STEP_TRANSFERS` new ones
/// and all older ones.
pub(crate) fn advance(
    source: &mut dyn HistorySource,
    base: &HistorySnapshot,
    cut_ms: i64,
) -> Result<HistorySnapshot, StoreError> {
    let last = source.last_seq()?;
    if last < base.through_seq {
        return Err(StoreError::fatal(format!(
            "the history snapshot sums through seq {}, but the store ends at seq {last}",
            base.through_seq
        )));
    }
    let cut_ms = cut_ms.max(base.cut_ms);
    let mut next = base.clone();
    next.in_window(source.open_window()?);
    next.through_seq = last.min(base.through_seq.saturating_add(STEP_TRANSFERS));
    next.cut_ms = cut_ms;
    next.kept.clear();
    let through_seq = next.through_seq;
    let mut sort = |(transfer, finish, _): Joined| match place(&transfer, finish.as_ref(), cut_ms) {
        Place::Fold => next.fold(&transfer, finish.as_ref()),
        Place::Keep => {
            next.kept.push(transfer.seq);
            Ok(())
        }
        Place::Elsewhere => Ok(()),
    };
    source.each_of(&base.kept, &mut sort)?;
    source.each_between(base.through_seq, through_seq, &mut sort)?;
    // Older transfers that finished between the two cuts: at `base` they
    // had a finish at or after its cut (kept ones were sorted above).
    if base.through_seq > 0 && base.cut_ms < cut_ms {
        let older = Seqs {
            after: 0,
            through: base.through_seq,
        };
        let mut older_finished = |(transfer, finish, _): Joined| {
            if base.kept.binary_search(&transfer.seq).is_ok() {
                return Ok(());
            }
            match place(&transfer, finish.as_ref(), cut_ms) {
                Place::Fold => next.fold(&transfer, finish.as_ref()),
                // A funds out that finished: read with the funds movements.
                Place::Elsewhere if !transfer.kind.is_between_positions() => Ok(()),
                _ => Err(StoreError::fatal(format!(
                    "seq {} finished before the cut but cannot be summed",
                    transfer.seq
                ))),
            }
        };
        source.each_finished_between(base.cut_ms, cut_ms, older, &mut older_finished)?;
    }
    next.kept.sort_unstable();
    Ok(next)
}

/// Where recovery's rows go: loaded into the snapshot recovery gives the
/// ledger, or summed when they finished before the horizon.
struct Loader<'s> {
    into: &'s mut Snapshot,
    archived: HistorySnapshot,
    horizon_ms: i64,
}

impl Loader<'_> {
    fn add(&mut self, (transfer, finish, accepted): Joined) -> Result<(), StoreError> {
        if is_archived(&transfer, finish.as_ref(), self.horizon_ms) {
            return self.archived.fold(&transfer, finish.as_ref());
        }
        self.into.transfers.push(transfer);
        self.into.finishes.extend(finish);
        self.into.conversion_fulfils.extend(accepted);
        Ok(())
    }

    /// Rows are read straight into the snapshot's own vectors, sized from
    /// the start: at a million transfers, growing them (and copying from a
    /// list of rows) touched about a gigabyte of fresh memory more, which
    /// the kernel zeroes at ~1.3 GB/s on the machine of BENCHMARKS.md.
    fn reserve(&mut self, rows: u64) {
        let rows = rows.min(RESERVE_AT_MOST) as usize;
        self.into.transfers.reserve(rows);
        self.into.finishes.reserve(rows);
    }

    /// The rows with `after < seq <= through` of what recovery reads
    /// (`from` a snapshot, or the whole history), in seq order after those
    /// already loaded.
    fn read(
        &mut self,
        source: &mut dyn HistorySource,
        from: Option<&HistorySnapshot>,
        after: u64,
        through: u64,
    ) -> Result<(), StoreError> {
        let Some(snapshot) = from else {
            return source.each_between(after, through, &mut |row| self.add(row));
        };
        let seqs = Seqs {
            after,
            through: through.min(snapshot.through_seq),
        };
        if seqs.after < seqs.through {
            let (transfers, finishes) = (self.into.transfers.len(), self.into.finishes.len());
            let accepted = self.into.conversion_fulfils.len();
            let kept = &snapshot.kept;
            let kept = &kept[kept.partition_point(|&seq| seq <= seqs.after)
                ..kept.partition_point(|&seq| seq <= seqs.through)];
            source.each_of(kept, &mut |row| self.add(row))?;
            source.each_funds_movement(seqs, &mut |row| self.add(row))?;
            source.each_finished_between(snapshot.cut_ms, i64::MAX, seqs, &mut |row| {
                // Read above already: kept ones that finished since, funds
                // movements.
                if !row.0.kind.is_between_positions() || kept.binary_search(&row.0.seq).is_ok() {
                    return Ok(());
                }
                self.add(row)
            })?;
            // These came in no particular order (the finishes in the order
            // they happened: nearly by seq); those after the snapshot's seq
            // come in order.
            let transfers = &mut self.into.transfers[transfers..];
            if !transfers.is_sorted_by_key(|t| t.seq) {
                transfers.sort_unstable_by_key(|t| t.seq);
            }
            let finishes = &mut self.into.finishes[finishes..];
            if !finishes.is_sorted_by_key(|f| f.seq) {
                finishes.sort_unstable_by_key(|f| f.seq);
            }
            let accepted = &mut self.into.conversion_fulfils[accepted..];
            if !accepted.is_sorted_by_key(|c| c.seq) {
                accepted.sort_unstable_by_key(|c| c.seq);
            }
        }
        let after = after.max(snapshot.through_seq);
        if after < through {
            source.each_between(after, through, &mut |row| self.add(row))?;
        }
        Ok(())
    }
}

/// Most rows recovery reserves room for ahead (~260 bytes each, touched
/// only as rows arrive) when it cannot tell how many it will load.
const RESERVE_AT_MOST: u64 = 4_000_000;

/// From how many rows recovery reads in two parts at once, when the
/// store offers a second connection on the same state
/// ([`HistorySource::fork`]): decoding a row (~1 µs) is most of a read.
static TWO_PARTS_FROM: AtomicU64 = AtomicU64::new(50_000);

/// Tests: read in two parts from this many rows (0: always), so that
/// small stores take the path big ones do.
#[doc(hidden)]
pub fn read_in_two_parts_from(rows: u64) {
    TWO_PARTS_FROM.store(rows, Ordering::Relaxed);
}

/// The last seq there is.
const END: u64 = u64::MAX >> 1;

/// Recovery's read, from a history snapshot or of the whole history: the
/// rows into `into` (in seq order), those finished before `horizon_ms`
/// summed on top of `archived`. With many rows and a second connection,
/// the upper half of the seqs is read on a thread of its own meanwhile.
fn read(
    source: &mut dyn HistorySource,
    from: Option<&HistorySnapshot>,
    archived: HistorySnapshot,
    horizon_ms: i64,
    into: &mut Snapshot,
) -> Result<HistorySnapshot, StoreError> {
    let last = source.last_seq()?;
    // Seqs are dense: every seq through the snapshot's is summed, kept, a
    // funds movement or finished since its cut, so this many rows are
    // read, most of them the highest seqs.
    let rows = last.saturating_sub(from.map_or(0, |snapshot| snapshot.transfers));
    let window = archived.window;
    let mut loader = Loader {
        into,
        archived,
        horizon_ms,
    };
    let forked = match rows >= TWO_PARTS_FROM.load(Ordering::Relaxed) {
        true => source.fork()?,
        false => None,
    };
    let Some(mut other) = forked else {
        loader.reserve(rows);
        loader.read(source, from, 0, END)?;
        return Ok(loader.archived);
    };
    let middle = last - rows / 2;
    loader.reserve(rows);
    let upper = std::thread::scope(|scope| {
        let upper = std::thread::Builder::new()
            .name("kasi-recovery".into())
            .spawn_scoped(scope, move || {
                let mut part = Snapshot::default();
                let mut archived = HistorySnapshot::empty();
                archived.in_window(window);
                let mut upper = Loader {
                    into: &mut part,
                    archived,
                    horizon_ms,
                };
                upper.reserve(rows - rows / 2);
                upper.read(other.as_mut(), from, middle, END)?;
                let archived = upper.archived;
                Ok::<_, StoreError>((part, archived))
            })
            .map_err(|e| StoreError::fatal(format!("cannot start a recovery thread: {e}")))?;
        loader.read(source, from, 0, middle)?;
        upper
            .join()
            .map_err(|_| StoreError::fatal("a recovery thread panicked"))?
    })?;
    let (mut part, archived) = upper;
    loader.into.transfers.append(&mut part.transfers);
    loader.into.finishes.append(&mut part.finishes);
    loader
        .into
        .conversion_fulfils
        .append(&mut part.conversion_fulfils);
    loader.archived.merge(archived)?;
    Ok(loader.archived)
}

/// Recovery with a history snapshot: the transfers it does not sum, into
/// `into` (in seq order), those finished before `horizon_ms` summed on top
/// of it into `into.archived`.
pub(crate) fn read_since(
    source: &mut dyn HistorySource,
    snapshot: HistorySnapshot,
    horizon_ms: i64,
    into: &mut Snapshot,
) -> Result<(), StoreError> {
    let mut archived = snapshot.clone();
    archived.kept = Vec::new();
    archived.in_window(source.open_window()?);
    let archived = read(source, Some(&snapshot), archived, horizon_ms, into)?;
    into.archived = archived.into_archived();
    Ok(())
}

/// Recovery without a history snapshot, in one streaming pass over the
/// transfers and their finishes, into `into` (in seq order): with a
/// horizon, a transfer or conversion that finished before it is not
/// loaded but summed into `into.archived` (what its commit moved, and
/// whether it counts in the open window); every other transfer is loaded.
pub(crate) fn read_whole(
    source: &mut dyn HistorySource,
    horizon_ms: Option<i64>,
    into: &mut Snapshot,
) -> Result<(), StoreError> {
    let mut archived = HistorySnapshot::empty();
    if horizon_ms.is_some() {
        archived.in_window(source.open_window()?);
    }
    let archived = read(source, None, archived, horizon_ms.unwrap_or(i64::MIN), into)?;
    if horizon_ms.is_some() {
        into.archived = archived.into_archived();
    }
    Ok(())
}

/// Checks the stored snapshot against the whole history, in one read
/// transaction: what recovery reads from the snapshot plus the rows after
/// it must equal what it reads from every row, at the snapshot's own cut.
/// `None` without a snapshot; else its seq and the first difference, if any.
pub(crate) fn check(source: &mut dyn HistorySource) -> Result<Option<HistoryCheck>, StoreError> {
    let Some(history) = source.stored()? else {
        return Ok(None);
    };
    let (through, cut_ms) = (history.through_seq, history.cut_ms);
    let mut from_snapshot = Snapshot::default();
    read_since(source, history, cut_ms, &mut from_snapshot)?;
    let mut whole = Snapshot::default();
    read_whole(source, Some(cut_ms), &mut whole)?;
    let verdict = if from_snapshot.archived != whole.archived {
        Err(format!(
            "its sums differ from the history's: {:?} against {:?}",
            from_snapshot.archived, whole.archived
        ))
    } else if from_snapshot.transfers != whole.transfers
        || from_snapshot.finishes != whole.finishes
        || from_snapshot.conversion_fulfils != whole.conversion_fulfils
    {
        Err(format!(
            "it leaves {} transfers to read, the history {}",
            from_snapshot.transfers.len(),
            whole.transfers.len()
        ))
    } else {
        Ok(())
    };
    Ok(Some((through, verdict)))
}

/// Advances the stored snapshot until it folds every transfer finished
/// before `cut_ms` (for tests and tools, which pick their cuts), in one
/// read transaction.
pub(crate) fn advance_fully(
    source: &mut dyn HistorySource,
    cut_ms: i64,
) -> Result<HistorySnapshot, StoreError> {
    let mut snapshot = source.stored()?.unwrap_or_else(HistorySnapshot::empty);
    loop {
        let next = advance(source, &snapshot, cut_ms)?;
        let done = next.through_seq == snapshot.through_seq && next.cut_ms == snapshot.cut_ms;
        snapshot = next;
        if done {
            return Ok(snapshot);
        }
    }
}

/// What changes from one sorted kept list to the next: the seqs no longer
/// kept and the seqs newly kept, each sorted (a snapshot's writer stores
/// only the difference).
pub(crate) fn kept_changes(old: &[u64], new: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let (mut removed, mut added) = (Vec::new(), Vec::new());
    let (mut old, mut new) = (old.iter().peekable(), new.iter().peekable());
    loop {
        match (old.peek(), new.peek()) {
            (None, None) => break,
            (Some(&&a), Some(&&b)) if a == b => {
                old.next();
                new.next();
            }
            (Some(&&a), Some(&&b)) if a < b => {
                removed.push(a);
                old.next();
            }
            (Some(&&a), None) => {
                removed.push(a);
                old.next();
            }
            (_, Some(&&b)) => {
                added.push(b);
                new.next();
            }
        }
    }
    (removed, added)
}

/// How the snapshotter runs.
#[derive(Clone, Copy, Debug)]
pub struct HistoryOptions {
    /// Transfers finished this long ago are summed (the ledger's retention
    /// horizon: what recovery would sum anyway).
    pub retention_ms: i64,
    /// How often the snapshot is advanced.
    pub interval: Duration,
}

/// What the snapshotter and the writer share.
#[derive(Default)]
pub(crate) struct Shared {
    /// The newest snapshot not yet written, with the generation it was
    /// computed in.
    pending: Mutex<Option<(u64, HistorySnapshot)>>,
    /// Advanced when the stored snapshot is forgotten: what was computed
    /// from it must not be written.
    generation: AtomicU64,
}

impl Shared {
    /// The newest snapshot to write, if one was computed since the last
    /// call and not from a snapshot forgotten since.
    pub(crate) fn take_pending(&self) -> Option<HistorySnapshot> {
        let (at, snapshot) = self.pending.lock().expect("history pending lock").take()?;
        (at == self.generation.load(Ordering::Acquire)).then_some(snapshot)
    }

    /// The stored snapshot is being dropped: nothing computed from it may
    /// be written, and the snapshotter starts again from what is stored.
    pub(crate) fn forget(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.pending.lock().expect("history pending lock").take();
    }
}

/// The snapshotter's way to the store: read transactions of its own.
pub(crate) trait SnapshotReader: Send + 'static {
    /// Runs `read` in one read transaction (on a connection that is
    /// reopened if it was lost).
    fn in_read(
        &mut self,
        read: &mut dyn FnMut(&mut dyn HistorySource) -> Result<(), StoreError>,
    ) -> Result<(), StoreError>;
}

/// The snapshotter's thread.
pub(crate) struct Snapshotter {
    stop: Option<SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
    pub(crate) shared: Arc<Shared>,
}

impl Snapshotter {
    pub(crate) fn start(
        reader: impl SnapshotReader,
        options: HistoryOptions,
    ) -> Result<Snapshotter, StoreError> {
        let shared = Arc::new(Shared::default());
        let (stop, stopped) = mpsc::sync_channel::<()>(1);
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("kasi-history".into())
            .spawn(move || run(reader, options, &thread_shared, &stopped))
            .map_err(|e| StoreError::fatal(format!("cannot start the history snapshotter: {e}")))?;
        Ok(Snapshotter {
            stop: Some(stop),
            thread: Some(thread),
            shared,
        })
    }
}

impl Drop for Snapshotter {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

fn run(
    mut reader: impl SnapshotReader,
    options: HistoryOptions,
    shared: &Shared,
    stopped: &mpsc::Receiver<()>,
) {
    let mut base: Option<(u64, HistorySnapshot)> = None;
    let mut failing = false;
    loop {
        match stopped.recv_timeout(options.interval) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let result = (|| -> Result<(), StoreError> {
            let generation = shared.generation.load(Ordering::Acquire);
            let mut current = match base.take() {
                Some((at, snapshot)) if at == generation => snapshot,
                _ => {
                    let mut stored = None;
                    reader.in_read(&mut |source| {
                        stored = source.stored()?;
                        Ok(())
                    })?;
                    stored.unwrap_or_else(HistorySnapshot::empty)
                }
            };
            let cut_ms = wall_clock_ms().saturating_sub(options.retention_ms);
            loop {
                let mut step = None;
                reader.in_read(&mut |source| {
                    let next = advance(source, &current, cut_ms)?;
                    let caught_up = next.through_seq == source.last_seq()?;
                    step = Some((next, caught_up));
                    Ok(())
                })?;
                let (next, caught_up) = step.expect("set by a read that succeeded");
                if shared.generation.load(Ordering::Acquire) != generation {
                    return Ok(());
                }
                let changed = next != current;
                current = next;
                if changed {
                    *shared.pending.lock().expect("history pending lock") =
                        Some((generation, current.clone()));
                }
                let stopping = !matches!(stopped.try_recv(), Err(mpsc::TryRecvError::Empty));
                if caught_up || stopping {
                    break;
                }
            }
            base = Some((generation, current));
            Ok(())
        })();
        match result {
            Ok(()) if failing => {
                failing = false;
                eprintln!("kasi: the history snapshot advances again");
            }
            Ok(()) => {}
            Err(error) => {
                base = None;
                if !failing {
                    failing = true;
                    eprintln!(
                        "kasi: cannot advance the history snapshot (restarts read more until it can): {error}"
                    );
                }
            }
        }
    }
}
