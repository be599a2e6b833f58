//! History snapshots: what recovery needs of transfers that finished long
//! ago, summed ahead of time, so that a restart reads only the recent
//! transfers, however long the store's history.
//!
//! A snapshot, computed from some state of the store, says:
//! - every FSPIOP transfer with `seq <= through_seq` that finished before
//!   `cut_ms` (by its `transfer_finishes` row, or a REJECTED prepare by its
//!   own instant) is *folded*: counted, what its commit moved summed per
//!   account, and per (payer, payee) pair if it committed in `window`, the
//!   window open when the snapshot was computed;
//! - `kept` lists the other FSPIOP transfers with `seq <= through_seq`
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
//! written atomically with a batch, or not at all.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ledger::{
    AccountId, Amount, Archived, FinishRow, TransferKind, TransferRow, TransferState, WindowPairSum,
};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Row};

use crate::sqlite::{finish_row, joined_columns, parse, transfer_row};
use crate::StoreError;

pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS history_snapshot (
    id                INTEGER PRIMARY KEY CHECK (id = 1),
    through_seq       INTEGER NOT NULL,
    cut_ms            INTEGER NOT NULL,
    transfers         INTEGER NOT NULL,
    last_seq          INTEGER NOT NULL,
    last_at_ms        INTEGER NOT NULL,
    settlement_window INTEGER
) STRICT;
CREATE TABLE IF NOT EXISTS history_snapshot_values (
    account_id INTEGER PRIMARY KEY,
    value      TEXT    NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS history_snapshot_pairs (
    payer_id INTEGER NOT NULL,
    payee_id INTEGER NOT NULL,
    amount   TEXT    NOT NULL,
    commits  INTEGER NOT NULL,
    PRIMARY KEY (payer_id, payee_id)
) STRICT;
CREATE TABLE IF NOT EXISTS history_snapshot_kept (
    seq INTEGER PRIMARY KEY
) STRICT;
CREATE INDEX IF NOT EXISTS transfer_finishes_by_time ON transfer_finishes (finished_at_ms);
CREATE INDEX IF NOT EXISTS transfers_funds ON transfers (seq) WHERE kind <> 'TRANSFER';
CREATE INDEX IF NOT EXISTS quotes_by_time ON quotes (received_at_ms);
";

/// A transfer and its finish, in one query's columns (see
/// [`joined_columns`]), for the store `connection` reads: a store read as
/// it is (`kasi audit`) may be of an older version.
fn joined_select(connection: &Connection) -> Result<String, StoreError> {
    let version: i64 = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    Ok(joined_columns(version))
}

/// Most new transfers one step of the snapshotter reads in one read
/// transaction: the first snapshot of a long history is built in steps,
/// so that no read holds the write-ahead log back for long.
const STEP_TRANSFERS: u64 = 200_000;

pub(crate) type Joined = (TransferRow, Option<FinishRow>);

pub(crate) fn joined(row: &Row<'_>) -> Result<Joined, StoreError> {
    let transfer = transfer_row(row)?;
    let finish = match row.get_ref(15)? {
        ValueRef::Null => None,
        _ => Some(finish_row(row, 15)?),
    };
    Ok((transfer, finish))
}

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
    transfer.kind == TransferKind::Fspiop
        && finished_at_ms(transfer, finish).is_some_and(|at_ms| at_ms < horizon_ms)
}

/// What `SqliteStore::check_history_snapshot` found: the snapshot's seq,
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

    /// Adds a finished FSPIOP transfer.
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
    if transfer.kind != TransferKind::Fspiop {
        return Place::Elsewhere;
    }
    match finished_at_ms(transfer, finish) {
        None => Place::Keep,
        Some(at_ms) if at_ms < cut_ms => Place::Fold,
        Some(_) if finish.is_none() => Place::Keep,
        Some(_) => Place::Elsewhere,
    }
}

/// The settlement window open now, if any.
pub(crate) fn open_window(connection: &Connection) -> Result<Option<u32>, StoreError> {
    Ok(connection
        .query_row(
            "SELECT id, state FROM settlement_windows ORDER BY id DESC LIMIT 1",
            [],
            |row| Ok((row.get::<_, u32>(0)?, row.get::<_, String>(1)?)),
        )
        .optional()?
        .filter(|(_, state)| state == "OPEN")
        .map(|(id, _)| id))
}

fn last_seq(connection: &Connection) -> Result<u64, StoreError> {
    let last: Option<i64> =
        connection.query_row("SELECT MAX(seq) FROM transfers", [], |row| row.get(0))?;
    Ok(last.unwrap_or(0) as u64)
}

fn lookup(connection: &Connection, columns: &str, seq: u64) -> Result<Joined, StoreError> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {columns} FROM transfers t LEFT JOIN transfer_finishes f ON f.seq = t.seq WHERE t.seq = ?1"
    ))?;
    let mut rows = statement.query(params![seq as i64])?;
    match rows.next()? {
        Some(row) => joined(row),
        None => Err(StoreError::fatal(format!(
            "the history snapshot keeps seq {seq}, which the store does not hold"
        ))),
    }
}

/// Calls `each` for the transfers with `after < seq <= through`, in seq order.
fn each_between(
    connection: &Connection,
    columns: &str,
    after: u64,
    through: u64,
    mut each: impl FnMut(Joined) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {columns} FROM transfers t LEFT JOIN transfer_finishes f ON f.seq = t.seq
         WHERE t.seq > ?1 AND t.seq <= ?2 ORDER BY t.seq"
    ))?;
    let mut rows = statement.query(params![after as i64, through as i64])?;
    while let Some(row) = rows.next()? {
        each(joined(row)?)?;
    }
    Ok(())
}

/// Calls `each` for the transfers with `seq <= through` finished at or
/// after `from_ms` and before `until_ms`.
fn each_finished_between(
    connection: &Connection,
    columns: &str,
    from_ms: i64,
    until_ms: i64,
    through: u64,
    mut each: impl FnMut(Joined) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {columns} FROM transfer_finishes f INDEXED BY transfer_finishes_by_time
            JOIN transfers t ON t.seq = f.seq
         WHERE f.finished_at_ms >= ?1 AND f.finished_at_ms < ?2 AND f.seq <= ?3"
    ))?;
    let mut rows = statement.query(params![from_ms, until_ms, through as i64])?;
    while let Some(row) = rows.next()? {
        each(joined(row)?)?;
    }
    Ok(())
}

/// Calls `each` for the funds movements with `seq <= through`.
fn each_funds_movement(
    connection: &Connection,
    columns: &str,
    through: u64,
    mut each: impl FnMut(Joined) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {columns} FROM transfers t INDEXED BY transfers_funds
            LEFT JOIN transfer_finishes f ON f.seq = t.seq
         WHERE t.kind <> 'TRANSFER' AND t.seq <= ?1"
    ))?;
    let mut rows = statement.query(params![through as i64])?;
    while let Some(row) = rows.next()? {
        each(joined(row)?)?;
    }
    Ok(())
}

/// One step of the snapshotter, in a read transaction on `connection`:
/// the snapshot after `base` that folds the transfers finished before
/// `cut_ms` (or `base`'s cut, if later) among the first `STEP_TRANSFERS`
/// new ones and all older ones.
pub(crate) fn advance(
    connection: &Connection,
    base: &HistorySnapshot,
    cut_ms: i64,
) -> Result<HistorySnapshot, StoreError> {
    let last = last_seq(connection)?;
    if last < base.through_seq {
        return Err(StoreError::fatal(format!(
            "the history snapshot sums through seq {}, but the store ends at seq {last}",
            base.through_seq
        )));
    }
    let columns = joined_select(connection)?;
    let cut_ms = cut_ms.max(base.cut_ms);
    let mut next = base.clone();
    next.in_window(open_window(connection)?);
    next.through_seq = last.min(base.through_seq.saturating_add(STEP_TRANSFERS));
    next.cut_ms = cut_ms;
    next.kept.clear();
    let sort = |(transfer, finish): Joined, next: &mut HistorySnapshot| match place(
        &transfer,
        finish.as_ref(),
        cut_ms,
    ) {
        Place::Fold => next.fold(&transfer, finish.as_ref()),
        Place::Keep => {
            next.kept.push(transfer.seq);
            Ok(())
        }
        Place::Elsewhere => Ok(()),
    };
    for &seq in &base.kept {
        sort(lookup(connection, &columns, seq)?, &mut next)?;
    }
    each_between(
        connection,
        &columns,
        base.through_seq,
        next.through_seq,
        |row| sort(row, &mut next),
    )?;
    // Older transfers that finished between the two cuts: at `base` they
    // had a finish at or after its cut (kept ones were sorted above).
    if base.through_seq > 0 && base.cut_ms < cut_ms {
        each_finished_between(
            connection,
            &columns,
            base.cut_ms,
            cut_ms,
            base.through_seq,
            |(transfer, finish)| {
                if base.kept.binary_search(&transfer.seq).is_ok() {
                    return Ok(());
                }
                match place(&transfer, finish.as_ref(), cut_ms) {
                    Place::Fold => next.fold(&transfer, finish.as_ref()),
                    // A funds out that finished: read with the funds movements.
                    Place::Elsewhere if transfer.kind != TransferKind::Fspiop => Ok(()),
                    _ => Err(StoreError::fatal(format!(
                        "seq {} finished before the cut but cannot be summed",
                        transfer.seq
                    ))),
                }
            },
        )?;
    }
    next.kept.sort_unstable();
    Ok(next)
}

/// Recovery with a history snapshot: the transfers it does not sum, those
/// finished before `horizon_ms` summed on top of it.
pub(crate) fn read_since(
    connection: &Connection,
    snapshot: HistorySnapshot,
    horizon_ms: i64,
) -> Result<(Vec<Joined>, Archived), StoreError> {
    let columns = joined_select(connection)?;
    let mut archived = snapshot.clone();
    archived.in_window(open_window(connection)?);
    let mut found: BTreeMap<u64, Joined> = BTreeMap::new();
    let mut add = |row: Joined| -> Result<(), StoreError> {
        found.insert(row.0.seq, row);
        Ok(())
    };
    for &seq in &snapshot.kept {
        add(lookup(connection, &columns, seq)?)?;
    }
    each_funds_movement(connection, &columns, snapshot.through_seq, &mut add)?;
    each_finished_between(
        connection,
        &columns,
        snapshot.cut_ms,
        i64::MAX,
        snapshot.through_seq,
        &mut add,
    )?;
    each_between(
        connection,
        &columns,
        snapshot.through_seq,
        u64::MAX >> 1,
        &mut add,
    )?;
    let mut loaded = Vec::with_capacity(found.len());
    for (transfer, finish) in found.into_values() {
        if is_archived(&transfer, finish.as_ref(), horizon_ms) {
            archived.fold(&transfer, finish.as_ref())?;
        } else {
            loaded.push((transfer, finish));
        }
    }
    Ok((loaded, archived.into_archived()))
}

/// The stored snapshot, if there is one (and the tables exist: a store
/// read as it is by `kasi audit` may predate them).
pub(crate) fn read(connection: &Connection) -> Result<Option<HistorySnapshot>, StoreError> {
    let tables: i64 = connection.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'history_snapshot'",
        [],
        |row| row.get(0),
    )?;
    if tables == 0 {
        return Ok(None);
    }
    let Some(mut snapshot) = connection
        .query_row(
            "SELECT through_seq, cut_ms, transfers, last_seq, last_at_ms, settlement_window
             FROM history_snapshot WHERE id = 1",
            [],
            |row| {
                Ok(HistorySnapshot {
                    through_seq: row.get::<_, i64>(0)? as u64,
                    cut_ms: row.get(1)?,
                    transfers: row.get::<_, i64>(2)? as u64,
                    last_seq: row.get::<_, i64>(3)? as u64,
                    last_at_ms: row.get(4)?,
                    window: row.get(5)?,
                    ..HistorySnapshot::empty()
                })
            },
        )
        .optional()?
    else {
        return Ok(None);
    };
    let mut statement =
        connection.prepare("SELECT account_id, value FROM history_snapshot_values")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let value = parse(row, 1, "summed value", |t| Amount::parse_signed(t).ok())?;
        snapshot.values.insert(AccountId(row.get(0)?), value);
    }
    let mut statement = connection
        .prepare("SELECT payer_id, payee_id, amount, commits FROM history_snapshot_pairs")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let amount = parse(row, 2, "summed amount", |t| Amount::parse_signed(t).ok())?;
        snapshot.pairs.insert(
            (AccountId(row.get(0)?), AccountId(row.get(1)?)),
            (amount, row.get::<_, i64>(3)? as u64),
        );
    }
    let mut statement = connection.prepare("SELECT seq FROM history_snapshot_kept ORDER BY seq")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        snapshot.kept.push(row.get::<_, i64>(0)? as u64);
    }
    Ok(Some(snapshot))
}

/// Replaces the stored snapshot, in the caller's transaction. `written`
/// is the kept list stored before, if known: only the difference is
/// written then.
pub(crate) fn write(
    connection: &Connection,
    snapshot: &HistorySnapshot,
    written: Option<&[u64]>,
) -> Result<(), StoreError> {
    connection.execute(
        "INSERT INTO history_snapshot (id, through_seq, cut_ms, transfers, last_seq, last_at_ms, settlement_window)
         VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (id) DO UPDATE SET through_seq = excluded.through_seq, cut_ms = excluded.cut_ms,
            transfers = excluded.transfers, last_seq = excluded.last_seq, last_at_ms = excluded.last_at_ms,
            settlement_window = excluded.settlement_window",
        params![
            snapshot.through_seq as i64,
            snapshot.cut_ms,
            snapshot.transfers as i64,
            snapshot.last_seq as i64,
            snapshot.last_at_ms,
            snapshot.window,
        ],
    )?;
    // Accounts and pairs are few (bounded by the participants), so they are
    // written whole.
    connection.execute("DELETE FROM history_snapshot_values", [])?;
    let mut value = connection.prepare_cached(
        "INSERT INTO history_snapshot_values (account_id, value) VALUES (?1, ?2)",
    )?;
    for (account, amount) in &snapshot.values {
        value.execute(params![account.0, amount.to_string()])?;
    }
    connection.execute("DELETE FROM history_snapshot_pairs", [])?;
    let mut pair = connection.prepare_cached(
        "INSERT INTO history_snapshot_pairs (payer_id, payee_id, amount, commits) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for ((payer, payee), (amount, commits)) in &snapshot.pairs {
        pair.execute(params![
            payer.0,
            payee.0,
            amount.to_string(),
            *commits as i64
        ])?;
    }
    let mut insert =
        connection.prepare_cached("INSERT INTO history_snapshot_kept (seq) VALUES (?1)")?;
    let Some(written) = written else {
        connection.execute("DELETE FROM history_snapshot_kept", [])?;
        for &seq in &snapshot.kept {
            insert.execute(params![seq as i64])?;
        }
        return Ok(());
    };
    let mut delete =
        connection.prepare_cached("DELETE FROM history_snapshot_kept WHERE seq = ?1")?;
    let (mut old, mut new) = (written.iter().peekable(), snapshot.kept.iter().peekable());
    loop {
        match (old.peek(), new.peek()) {
            (None, None) => break,
            (Some(&&a), Some(&&b)) if a == b => {
                old.next();
                new.next();
            }
            (Some(&&a), Some(&&b)) if a < b => {
                delete.execute(params![a as i64])?;
                old.next();
            }
            (Some(&&a), None) => {
                delete.execute(params![a as i64])?;
                old.next();
            }
            (_, Some(&&b)) => {
                insert.execute(params![b as i64])?;
                new.next();
            }
        }
    }
    Ok(())
}

/// Removes the stored snapshot, in the caller's transaction.
pub(crate) fn forget(connection: &Connection) -> Result<(), StoreError> {
    connection.execute_batch(
        "DELETE FROM history_snapshot; DELETE FROM history_snapshot_values;
         DELETE FROM history_snapshot_pairs; DELETE FROM history_snapshot_kept;",
    )?;
    Ok(())
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
    pub(crate) pending: Mutex<Option<(u64, HistorySnapshot)>>,
    /// Advanced when the stored snapshot is forgotten: what was computed
    /// from it must not be written.
    pub(crate) generation: AtomicU64,
}

impl Shared {
    pub(crate) fn take_pending(&self) -> Option<(u64, HistorySnapshot)> {
        self.pending.lock().expect("history pending lock").take()
    }
}

/// The snapshotter's thread.
pub(crate) struct Snapshotter {
    stop: Option<SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
    pub(crate) shared: Arc<Shared>,
}

impl Snapshotter {
    pub(crate) fn start(path: &Path, options: HistoryOptions) -> Result<Snapshotter, StoreError> {
        let connection = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let shared = Arc::new(Shared::default());
        let (stop, stopped) = mpsc::sync_channel::<()>(1);
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("kasi-history".into())
            .spawn(move || run(connection, options, &thread_shared, &stopped))
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
    mut connection: Connection,
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
            let current = match base.take() {
                Some((at, snapshot)) if at == generation => snapshot,
                _ => read(&connection)?.unwrap_or_else(HistorySnapshot::empty),
            };
            let cut_ms = wall_clock_ms().saturating_sub(options.retention_ms);
            let mut current = current;
            loop {
                let transaction = connection.transaction()?;
                let next = advance(&transaction, &current, cut_ms)?;
                let caught_up = next.through_seq == last_seq(&transaction)?;
                drop(transaction);
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
