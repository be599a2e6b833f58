//! The history snapshot on SQLite (see [`crate::history`] for what it is
//! and how it advances): its tables and indexes, the rows the algorithm
//! reads, and the snapshot's own reads and writes.

use std::ops::Deref;
use std::path::{Path, PathBuf};

use ledger::{AccountId, Amount};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Row};

use crate::history::{
    kept_changes, missing_kept, Each, HistorySource, Joined, Seqs, SnapshotReader,
};
pub use crate::history::{HistoryCheck, HistoryOptions, HistorySnapshot};
use crate::sqlite::{
    conversion_fulfil_row, finish_row, fx_joins, joined_columns, joined_from, parse, transfer_row,
    FINISH_AT, FULFIL_AT,
};
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
CREATE INDEX IF NOT EXISTS transfers_funds ON transfers (seq) WHERE kind IN ('FUNDS_IN', 'FUNDS_OUT');
CREATE INDEX IF NOT EXISTS quotes_by_time ON quotes (received_at_ms);
";

/// The funds movements as `transfers_funds` holds them, for a store of
/// `version`: before version 6 its predicate is `kind <> 'TRANSFER'` (the
/// same rows then: there were no conversions), and a query must say the
/// index's own predicate for SQLite to use it.
fn funds_movements(version: i64) -> &'static str {
    match version >= 6 {
        true => "t.kind IN ('FUNDS_IN', 'FUNDS_OUT')",
        false => "t.kind <> 'TRANSFER'",
    }
}

pub(crate) fn joined(row: &Row<'_>) -> Result<Joined, StoreError> {
    let transfer = transfer_row(row)?;
    let finish = match row.get_ref(FINISH_AT)? {
        ValueRef::Null => None,
        _ => Some(finish_row(row, FINISH_AT)?),
    };
    Ok((transfer, finish, conversion_fulfil_row(row, FULFIL_AT)?))
}

/// The rows of a SQLite store the algorithm reads, on a connection inside
/// a read transaction (borrowed, or a second one of its own).
pub(crate) struct Source<C> {
    connection: C,
    /// The store's schema version: one read as it is (`kasi audit`) may be
    /// older.
    version: i64,
    /// [`joined_columns`] for it.
    columns: String,
    /// [`joined_from`] for it.
    from: String,
    /// The database, when nobody else can write it meanwhile (this process
    /// holds the data directory's lock and is not writing): a second
    /// connection then reads the same state.
    fork_from: Option<PathBuf>,
}

impl<'c> Source<&'c Connection> {
    pub(crate) fn new(connection: &'c Connection) -> Result<Source<&'c Connection>, StoreError> {
        let version: i64 = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
        Ok(Source {
            connection,
            version,
            columns: joined_columns(version),
            from: joined_from(version),
            fork_from: None,
        })
    }

    /// Lets [`HistorySource::fork`] open a second connection to `path`:
    /// only for a store no one else may write while this one reads.
    pub(crate) fn forking_from(mut self, path: Option<&Path>) -> Self {
        self.fork_from = path.map(Path::to_path_buf);
        self
    }
}

impl<C: Deref<Target = Connection>> Source<C> {
    fn each(
        &self,
        sql: &str,
        parameters: impl rusqlite::Params,
        each: Each<'_>,
    ) -> Result<(), StoreError> {
        let mut statement = self.connection.prepare_cached(sql)?;
        let mut rows = statement.query(parameters)?;
        while let Some(row) = rows.next()? {
            each(joined(row)?)?;
        }
        Ok(())
    }
}

impl<C: Deref<Target = Connection>> HistorySource for Source<C> {
    fn stored(&mut self) -> Result<Option<HistorySnapshot>, StoreError> {
        read(&self.connection)
    }

    fn last_seq(&mut self) -> Result<u64, StoreError> {
        let last: Option<i64> =
            self.connection
                .query_row("SELECT MAX(seq) FROM transfers", [], |row| row.get(0))?;
        Ok(last.unwrap_or(0) as u64)
    }

    fn open_window(&mut self) -> Result<Option<u32>, StoreError> {
        // A version 1 store has nothing of settlement.
        match self.version >= 2 {
            true => open_window(&self.connection),
            false => Ok(None),
        }
    }

    fn each_of(&mut self, seqs: &[u64], each: Each<'_>) -> Result<(), StoreError> {
        let mut statement = self.connection.prepare_cached(&format!(
            "SELECT {} FROM {} WHERE t.seq = ?1",
            self.columns, self.from
        ))?;
        for &seq in seqs {
            let mut rows = statement.query(params![seq as i64])?;
            match rows.next()? {
                Some(row) => each(joined(row)?)?,
                None => return Err(missing_kept(seq)),
            }
        }
        Ok(())
    }

    fn each_between(&mut self, after: u64, through: u64, each: Each<'_>) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT {} FROM {} WHERE t.seq > ?1 AND t.seq <= ?2 ORDER BY t.seq",
            self.columns, self.from
        );
        self.each(&sql, params![after as i64, through as i64], each)
    }

    fn each_finished_between(
        &mut self,
        from_ms: i64,
        until_ms: i64,
        seqs: Seqs,
        each: Each<'_>,
    ) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT {} FROM transfer_finishes f INDEXED BY transfer_finishes_by_time
                JOIN transfers t ON t.seq = f.seq{}
             WHERE f.finished_at_ms >= ?1 AND f.finished_at_ms < ?2 AND f.seq > ?3 AND f.seq <= ?4",
            self.columns,
            fx_joins(self.version)
        );
        let (after, through) = (seqs.after as i64, seqs.through as i64);
        self.each(&sql, params![from_ms, until_ms, after, through], each)
    }

    fn each_funds_movement(&mut self, seqs: Seqs, each: Each<'_>) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT {} FROM transfers t INDEXED BY transfers_funds
                LEFT JOIN transfer_finishes f ON f.seq = t.seq{}
             WHERE {} AND t.seq > ?1 AND t.seq <= ?2",
            self.columns,
            fx_joins(self.version),
            funds_movements(self.version)
        );
        self.each(&sql, params![seqs.after as i64, seqs.through as i64], each)
    }

    fn fork(&mut self) -> Result<Option<Box<dyn HistorySource + Send>>, StoreError> {
        let Some(path) = &self.fork_from else {
            return Ok(None);
        };
        let connection = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        connection.execute_batch("BEGIN")?;
        Ok(Some(Box::new(Source {
            connection: Box::new(connection),
            version: self.version,
            columns: self.columns.clone(),
            from: self.from.clone(),
            fork_from: None,
        })))
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
    let (removed, added) = kept_changes(written, &snapshot.kept);
    for seq in removed {
        delete.execute(params![seq as i64])?;
    }
    for seq in added {
        insert.execute(params![seq as i64])?;
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

/// The snapshotter's read-only connection.
pub(crate) struct Reader(Connection);

impl Reader {
    pub(crate) fn open(path: &Path) -> Result<Reader, StoreError> {
        Ok(Reader(Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY,
        )?))
    }
}

impl SnapshotReader for Reader {
    fn in_read(
        &mut self,
        read: &mut dyn FnMut(&mut dyn HistorySource) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let transaction = self.0.transaction()?;
        read(&mut Source::new(&transaction)?)
    }
}
