//! The history snapshot on PostgreSQL (see [`crate::history`] for what it
//! is and how it advances; the tables are migration 5's): the rows the
//! algorithm reads, the snapshot's own reads and writes, the snapshotter's
//! connection, and what a [`PgStore`] keeps of it.
//!
//! Only the active hub writes the snapshot, inside its next commit (so
//! under its fencing number); its snapshotter thread starts with its first
//! commit, so a standby, which never commits, computes none. A standby's
//! cold read (and so its warm copy) starts from the stored snapshot like a
//! restart's.

use ledger::Snapshot;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;
use postgres::{Client, GenericClient, Transaction};

use crate::history::{
    self, missing_kept, Each, HistoryCheck, HistoryOptions, HistorySnapshot, HistorySource, Seqs,
    SnapshotReader, Snapshotter,
};
use crate::pg::PgStore;
use crate::pg_rows::{
    amount, col, conversion_fulfil_row, finish_row, fx_joins, joined_columns, joined_from, narrow,
    narrow_opt, transfer_row, FINISH_AT, FULFIL_AT,
};
use crate::pg_schema::{FX_SINCE, HISTORY_SNAPSHOT_SINCE};
use crate::{Store as _, StoreError};

/// The rows of a PostgreSQL store the algorithm reads, in one REPEATABLE
/// READ transaction (a [`Transaction`], or a [`Client`] inside one).
pub(crate) struct Source<'t, C: GenericClient> {
    transaction: &'t mut C,
    /// The store's schema version (one read as it is may be older).
    version: i64,
    /// The transfer, finish and FX columns for it ([`joined_columns`]).
    columns: String,
    /// [`joined_from`] for it.
    from: String,
    /// Where a second connection may read the same state from
    /// ([`HistorySource::fork`]).
    fork_url: Option<String>,
}

impl<'t, C: GenericClient> Source<'t, C> {
    pub(crate) fn new(transaction: &'t mut C, version: i64) -> Source<'t, C> {
        Source {
            transaction,
            version,
            columns: joined_columns(version),
            from: joined_from(version),
            fork_url: None,
        }
    }

    /// Lets [`HistorySource::fork`] connect to `url` for a second thread,
    /// on the transaction's exported snapshot.
    fn forking_to(mut self, url: Option<&str>) -> Self {
        self.fork_url = url.map(str::to_string);
        self
    }

    /// Streams the rows of `sql` (selecting [`Source::columns`]) to `each`;
    /// how many there were.
    fn each(
        &mut self,
        sql: &str,
        parameters: &[&(dyn ToSql + Sync)],
        each: Each<'_>,
    ) -> Result<usize, StoreError> {
        let mut rows = self
            .transaction
            .query_raw(sql, parameters.iter().copied())?;
        let mut count = 0;
        while let Some(row) = rows.next()? {
            each((
                transfer_row(&row)?,
                finish_row(&row, FINISH_AT)?,
                conversion_fulfil_row(&row, FULFIL_AT)?,
            ))?;
            count += 1;
        }
        Ok(count)
    }
}

impl<C: GenericClient> HistorySource for Source<'_, C> {
    fn stored(&mut self) -> Result<Option<HistorySnapshot>, StoreError> {
        match self.version >= HISTORY_SNAPSHOT_SINCE {
            true => read(self.transaction),
            false => Ok(None),
        }
    }

    fn last_seq(&mut self) -> Result<u64, StoreError> {
        let row = self
            .transaction
            .query_one("SELECT max(seq) FROM transfers", &[])?;
        Ok(col::<Option<i64>>(&row, 0)?.unwrap_or(0) as u64)
    }

    fn open_window(&mut self) -> Result<Option<u32>, StoreError> {
        open_window(self.transaction)
    }

    fn each_of(&mut self, seqs: &[u64], each: Each<'_>) -> Result<(), StoreError> {
        if seqs.is_empty() {
            return Ok(());
        }
        let wanted: Vec<i64> = seqs.iter().map(|&seq| seq as i64).collect();
        let mut found = Vec::with_capacity(seqs.len());
        let sql = format!(
            "SELECT {} FROM {} WHERE t.seq = ANY($1)",
            self.columns, self.from
        );
        self.each(&sql, &[&wanted], &mut |row| {
            found.push(row.0.seq);
            each(row)
        })?;
        if found.len() != seqs.len() {
            found.sort_unstable();
            let missing = seqs
                .iter()
                .find(|seq| found.binary_search(seq).is_err())
                .copied()
                .unwrap_or_default();
            return Err(missing_kept(missing));
        }
        Ok(())
    }

    fn each_between(&mut self, after: u64, through: u64, each: Each<'_>) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT {} FROM {} WHERE t.seq > $1 AND t.seq <= $2 ORDER BY t.seq",
            self.columns, self.from
        );
        self.each(&sql, &[&(after as i64), &(through as i64)], each)?;
        Ok(())
    }

    fn each_finished_between(
        &mut self,
        from_ms: i64,
        until_ms: i64,
        seqs: Seqs,
        each: Each<'_>,
    ) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT {} FROM transfer_finishes f JOIN transfers t ON t.seq = f.seq{}
             WHERE f.finished_at_ms >= $1 AND f.finished_at_ms < $2 AND f.seq > $3 AND f.seq <= $4",
            self.columns,
            fx_joins(self.version)
        );
        let (after, through) = (seqs.after as i64, seqs.through as i64);
        self.each(&sql, &[&from_ms, &until_ms, &after, &through], each)?;
        Ok(())
    }

    fn each_funds_movement(&mut self, seqs: Seqs, each: Each<'_>) -> Result<(), StoreError> {
        // As the predicate of the version's `transfers_funds` (before
        // migration 6 there were no conversions: the same rows).
        let funds_movements = match self.version >= FX_SINCE {
            true => "t.kind IN ('FUNDS_IN', 'FUNDS_OUT')",
            false => "t.kind <> 'TRANSFER'",
        };
        let sql = format!(
            "SELECT {} FROM {} WHERE {funds_movements} AND t.seq > $1 AND t.seq <= $2",
            self.columns, self.from
        );
        self.each(&sql, &[&(seqs.after as i64), &(seqs.through as i64)], each)?;
        Ok(())
    }

    fn fork(&mut self) -> Result<Option<Box<dyn HistorySource + Send>>, StoreError> {
        let Some(url) = &self.fork_url else {
            return Ok(None);
        };
        let exported: String = col(
            &self
                .transaction
                .query_one("SELECT pg_export_snapshot()", &[])?,
            0,
        )?;
        if !exported.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            return Err(StoreError::fatal(format!(
                "postgres: unexpected snapshot id {exported:?}"
            )));
        }
        let mut client = crate::pg::connect(url)?;
        client.batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '{exported}'"
        ))?;
        Ok(Some(Box::new(Forked {
            client,
            version: self.version,
        })))
    }
}

/// A second connection reading the same state as a [`Source`] (its
/// exported snapshot), for a thread of its own.
struct Forked {
    client: Client,
    version: i64,
}

impl Forked {
    fn source(&mut self) -> Source<'_, Client> {
        Source::new(&mut self.client, self.version)
    }
}

impl HistorySource for Forked {
    fn stored(&mut self) -> Result<Option<HistorySnapshot>, StoreError> {
        self.source().stored()
    }

    fn last_seq(&mut self) -> Result<u64, StoreError> {
        self.source().last_seq()
    }

    fn open_window(&mut self) -> Result<Option<u32>, StoreError> {
        self.source().open_window()
    }

    fn each_of(&mut self, seqs: &[u64], each: Each<'_>) -> Result<(), StoreError> {
        self.source().each_of(seqs, each)
    }

    fn each_between(&mut self, after: u64, through: u64, each: Each<'_>) -> Result<(), StoreError> {
        self.source().each_between(after, through, each)
    }

    fn each_finished_between(
        &mut self,
        from_ms: i64,
        until_ms: i64,
        seqs: Seqs,
        each: Each<'_>,
    ) -> Result<(), StoreError> {
        self.source()
            .each_finished_between(from_ms, until_ms, seqs, each)
    }

    fn each_funds_movement(&mut self, seqs: Seqs, each: Each<'_>) -> Result<(), StoreError> {
        self.source().each_funds_movement(seqs, each)
    }
}

/// The settlement window open now, if any.
pub(crate) fn open_window(client: &mut impl GenericClient) -> Result<Option<u32>, StoreError> {
    Ok(client
        .query_opt(
            "SELECT id, state FROM settlement_windows ORDER BY id DESC LIMIT 1",
            &[],
        )?
        .map(|row| -> Result<_, StoreError> {
            Ok((narrow::<u32>(&row, 0)?, col::<String>(&row, 1)?))
        })
        .transpose()?
        .filter(|(_, state)| state == "OPEN")
        .map(|(id, _)| id))
}

/// The stored snapshot, if there is one (at a version that has the tables).
fn read(transaction: &mut impl GenericClient) -> Result<Option<HistorySnapshot>, StoreError> {
    let Some(row) = transaction.query_opt(
        "SELECT through_seq, cut_ms, transfers, last_seq, last_at_ms, settlement_window
         FROM history_snapshot WHERE id = 1",
        &[],
    )?
    else {
        return Ok(None);
    };
    let mut snapshot = HistorySnapshot {
        through_seq: col::<i64>(&row, 0)? as u64,
        cut_ms: col(&row, 1)?,
        transfers: col::<i64>(&row, 2)? as u64,
        last_seq: col::<i64>(&row, 3)? as u64,
        last_at_ms: col(&row, 4)?,
        window: narrow_opt(&row, 5)?,
        ..HistorySnapshot::empty()
    };
    for row in transaction.query("SELECT account_id, value FROM history_snapshot_values", &[])? {
        snapshot.values.insert(
            crate::pg_rows::account(&row, 0)?,
            amount(&row, 1, "summed value")?,
        );
    }
    for row in transaction.query(
        "SELECT payer_id, payee_id, amount, commits FROM history_snapshot_pairs",
        &[],
    )? {
        snapshot.pairs.insert(
            (
                crate::pg_rows::account(&row, 0)?,
                crate::pg_rows::account(&row, 1)?,
            ),
            (
                amount(&row, 2, "summed amount")?,
                col::<i64>(&row, 3)? as u64,
            ),
        );
    }
    for row in transaction.query("SELECT seq FROM history_snapshot_kept ORDER BY seq", &[])? {
        snapshot.kept.push(col::<i64>(&row, 0)? as u64);
    }
    Ok(Some(snapshot))
}

/// Replaces the stored snapshot, in the writer's transaction. `written`
/// is the kept list stored before, if known: only the difference is
/// written then.
fn write(
    transaction: &mut Transaction<'_>,
    snapshot: &HistorySnapshot,
    written: Option<&[u64]>,
) -> Result<(), StoreError> {
    transaction.execute(
        "INSERT INTO history_snapshot (id, through_seq, cut_ms, transfers, last_seq, last_at_ms, settlement_window)
         VALUES (1, $1, $2, $3, $4, $5, $6)
         ON CONFLICT (id) DO UPDATE SET through_seq = excluded.through_seq, cut_ms = excluded.cut_ms,
            transfers = excluded.transfers, last_seq = excluded.last_seq, last_at_ms = excluded.last_at_ms,
            settlement_window = excluded.settlement_window",
        &[
            &(snapshot.through_seq as i64),
            &snapshot.cut_ms,
            &(snapshot.transfers as i64),
            &(snapshot.last_seq as i64),
            &snapshot.last_at_ms,
            &snapshot.window.map(i64::from),
        ],
    )?;
    // Accounts and pairs are few (bounded by the participants), so they are
    // written whole.
    let (accounts, values): (Vec<i64>, Vec<String>) = snapshot
        .values
        .iter()
        .map(|(account, value)| (i64::from(account.0), value.to_string()))
        .unzip();
    transaction
        .batch_execute("DELETE FROM history_snapshot_values; DELETE FROM history_snapshot_pairs")?;
    transaction.execute(
        "INSERT INTO history_snapshot_values (account_id, value)
         SELECT * FROM UNNEST($1::bigint[], $2::text[])",
        &[&accounts, &values],
    )?;
    let mut pairs = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for ((payer, payee), (amount, commits)) in &snapshot.pairs {
        pairs.0.push(i64::from(payer.0));
        pairs.1.push(i64::from(payee.0));
        pairs.2.push(amount.to_string());
        pairs.3.push(*commits as i64);
    }
    transaction.execute(
        "INSERT INTO history_snapshot_pairs (payer_id, payee_id, amount, commits)
         SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::bigint[])",
        &[&pairs.0, &pairs.1, &pairs.2, &pairs.3],
    )?;
    let (removed, added) = match written {
        Some(written) => history::kept_changes(written, &snapshot.kept),
        None => {
            transaction.batch_execute("DELETE FROM history_snapshot_kept")?;
            (Vec::new(), snapshot.kept.clone())
        }
    };
    let seqs = |seqs: Vec<u64>| -> Vec<i64> { seqs.into_iter().map(|seq| seq as i64).collect() };
    if !removed.is_empty() {
        transaction.execute(
            "DELETE FROM history_snapshot_kept WHERE seq = ANY($1)",
            &[&seqs(removed)],
        )?;
    }
    if !added.is_empty() {
        transaction.execute(
            "INSERT INTO history_snapshot_kept (seq) SELECT * FROM UNNEST($1::bigint[])",
            &[&seqs(added)],
        )?;
    }
    Ok(())
}

/// Removes the stored snapshot, in the writer's transaction.
fn forget(transaction: &mut Transaction<'_>) -> Result<(), StoreError> {
    transaction.batch_execute(
        "DELETE FROM history_snapshot; DELETE FROM history_snapshot_values;
         DELETE FROM history_snapshot_pairs; DELETE FROM history_snapshot_kept;",
    )?;
    Ok(())
}

/// Recovery with a horizon from the stored snapshot, if there is one:
/// the transfers it does not sum into `snapshot`, with the seq it summed
/// through; `None` (and nothing read) without one.
pub(crate) fn read_recent(
    transaction: &mut Transaction<'_>,
    version: i64,
    horizon_ms: i64,
    snapshot: &mut Snapshot,
    url: &str,
) -> Result<Option<u64>, StoreError> {
    let source = &mut Source::new(transaction, version).forking_to(Some(url));
    let Some(stored) = source.stored()? else {
        return Ok(None);
    };
    let through = stored.through_seq;
    history::read_since(source, stored, horizon_ms, snapshot)?;
    Ok(Some(through))
}

/// Recovery without a history snapshot: every transfer, or with a horizon
/// those finished before it summed (see [`history::read_whole`]).
pub(crate) fn read_whole(
    transaction: &mut Transaction<'_>,
    version: i64,
    horizon_ms: Option<i64>,
    snapshot: &mut Snapshot,
    url: &str,
) -> Result<(), StoreError> {
    let source = &mut Source::new(transaction, version).forking_to(Some(url));
    history::read_whole(source, horizon_ms, snapshot)
}

/// The snapshotter's connection, opened again when it was lost.
struct Reader {
    url: String,
    client: Option<Client>,
}

impl SnapshotReader for Reader {
    fn in_read(
        &mut self,
        read: &mut dyn FnMut(&mut dyn HistorySource) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let client = match &mut self.client {
            Some(client) if !client.is_closed() => client,
            _ => {
                let mut client = crate::pg::connect(&self.url)?;
                // Told apart from the hub's other connections in
                // pg_stat_activity.
                client.batch_execute("SET application_name = 'kasi history'")?;
                self.client.insert(client)
            }
        };
        let mut transaction = crate::pg::start_read(client)?;
        let version = crate::pg::schema_version(&mut transaction)?;
        read(&mut Source::new(&mut transaction, version))?;
        transaction.commit()?;
        Ok(())
    }
}

/// What a [`PgStore`] keeps of the history snapshot.
#[derive(Default)]
pub(crate) struct History {
    /// Set by [`PgStore::keep_history_snapshot`].
    options: Option<HistoryOptions>,
    /// Started with the first commit.
    snapshotter: Option<Snapshotter>,
    /// The kept list of the snapshot last written, if known.
    kept_written: Option<Vec<u64>>,
    /// What the commit in flight writes: a snapshot, or the stored one's
    /// removal (`forget`). Left here by a commit that failed.
    in_flight: Option<HistorySnapshot>,
    forgetting: bool,
    /// The seq the last load's snapshot summed through, if it started
    /// from one (directly or through a standby's warm copy).
    pub(crate) loaded_through: Option<u64>,
    /// The last load did not add up: the next one reads the whole history.
    pub(crate) read_whole: bool,
}

impl History {
    /// Before a commit: what it must write of the history snapshot (the
    /// stored one's removal, or the newest computed), kept until
    /// [`History::committed`]; whether there is anything. The snapshotter
    /// starts with the first commit.
    pub(crate) fn take_what_to_write(&mut self, url: &str) -> Result<bool, StoreError> {
        if self.forgetting {
            return Ok(true);
        }
        if let (Some(options), None) = (self.options, &self.snapshotter) {
            let reader = Reader {
                url: url.to_string(),
                client: None,
            };
            self.snapshotter = Some(Snapshotter::start(reader, options)?);
        }
        let pending = self
            .snapshotter
            .as_ref()
            .and_then(|snapshotter| snapshotter.shared.take_pending());
        let failed = self.in_flight.take();
        if failed.is_some() {
            // A commit that failed, or one of a tool's: what is stored is
            // not known, so the kept list is written whole.
            self.kept_written = None;
        }
        self.in_flight = pending.or(failed);
        Ok(self.in_flight.is_some())
    }

    /// Inside the writer's transaction: what [`History::take_what_to_write`]
    /// took.
    pub(crate) fn write_taken(
        &mut self,
        transaction: &mut Transaction<'_>,
    ) -> Result<(), StoreError> {
        if self.forgetting {
            self.kept_written = None;
            return forget(transaction);
        }
        match &self.in_flight {
            Some(snapshot) => write(transaction, snapshot, self.kept_written.as_deref()),
            None => Ok(()),
        }
    }

    /// After the writer's COMMIT.
    pub(crate) fn committed(&mut self) {
        self.forgetting = false;
        if let Some(snapshot) = self.in_flight.take() {
            self.kept_written = Some(snapshot.kept);
        }
    }
}

impl PgStore {
    /// Keeps a history snapshot (see [`crate::history`]) once this store
    /// commits (an active hub), so that recovery with a retention horizon
    /// reads only recent transfers. `None` stops it.
    pub fn keep_history_snapshot(&mut self, options: Option<HistoryOptions>) {
        self.history.options = options;
        self.history.snapshotter = None;
        self.history.in_flight = None;
    }

    /// Advances the history snapshot to fold every transfer finished before
    /// `cut_ms` and stores it at once, in a commit of its own (for tests,
    /// which pick their cuts, and tools). Returns the stored snapshot.
    pub fn advance_history_snapshot(&mut self, cut_ms: i64) -> Result<HistorySnapshot, StoreError> {
        let snapshot = self.in_read(|source| history::advance_fully(source, cut_ms))?;
        if let Some(snapshotter) = &self.history.snapshotter {
            snapshotter.shared.take_pending();
        }
        self.history.in_flight = Some(snapshot.clone());
        self.commit(&[])?;
        Ok(snapshot)
    }

    /// Checks the stored history snapshot against the whole history, in
    /// one REPEATABLE READ transaction (a hub may be writing meanwhile):
    /// `None` without a snapshot; else its seq and the first difference.
    pub fn check_history_snapshot(&mut self) -> Result<Option<HistoryCheck>, StoreError> {
        self.in_read(history::check)
    }

    /// The stored history snapshot, if any.
    pub fn history_snapshot(&mut self) -> Result<Option<HistorySnapshot>, StoreError> {
        self.in_read(|source| source.stored())
    }

    /// Drops the stored snapshot (recovery found that what it loaded does
    /// not add up), in a commit of its own under the fencing number.
    pub(crate) fn forget_stored_history(&mut self) -> Result<(), StoreError> {
        if let Some(snapshotter) = &self.history.snapshotter {
            snapshotter.shared.forget();
        }
        self.history.in_flight = None;
        self.history.forgetting = true;
        self.commit(&[])
    }

    fn in_read<T>(
        &mut self,
        read: impl FnOnce(&mut dyn HistorySource) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut transaction = crate::pg::start_read(self.client())?;
        let version = crate::pg::schema_version(&mut transaction)?;
        let result = read(&mut Source::new(&mut transaction, version))?;
        transaction.commit()?;
        Ok(result)
    }
}
