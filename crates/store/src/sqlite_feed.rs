//! The change feed on SQLite (`feed.rs`): its tables (schema version 12),
//! the writer's part of a commit, and [`SqliteFeed`], the hub's connection
//! for reading pages, retention and the publishers' cursors.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use ledger::{AccountId, Amount, Currency, ParticipantId, Record, TransferId, TransferKind};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Transaction};

use crate::commit_index::{self, Filed};
use crate::feed::{
    next_after, FeedLog, FeedPage, FeedRow, FeedState, TransferSummary, FEED_COLUMNS,
};
use crate::party_index;
use crate::rollup::{self, Fold, PairCounts, PairKey, Rollup};
use crate::StoreError;

/// Keeps a follower's cursor.
pub(crate) const SET_CURSOR: &str = "INSERT INTO feed_cursors (name, feed_seq) VALUES (?1, ?2)
     ON CONFLICT (name) DO UPDATE SET feed_seq = excluded.feed_seq";

/// The oldest and newest `feed_seq` kept. Two subqueries: SQLite reads
/// `MIN(x)` or `MAX(x)` of an indexed column from one end of the index
/// only when the query holds that one aggregate; `SELECT MIN(x), MAX(x)`
/// scans the table (it did: a quarter of the hub's CPU at 4,000
/// transfers/s, for the followers' reads, growing with the feed kept).
pub(crate) const FEED_BOUNDS: &str =
    "SELECT (SELECT MIN(feed_seq) FROM changes), (SELECT MAX(feed_seq) FROM changes)";

/// The schema version that added the feed's tables.
pub(crate) const FEED_SINCE: i64 = 12;
/// The schema version that added the hourly rollup's (`crate::rollup`).
pub(crate) const ROLLUP_SINCE: i64 = FEED_SINCE + 1;

/// Created on every writable open (`IF NOT EXISTS`), so that a store
/// migrated to version 12 and one created at it hold the same.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS changes (
    feed_seq     INTEGER PRIMARY KEY,
    at_ms        INTEGER NOT NULL,
    kind         TEXT    NOT NULL,
    participant  TEXT    NOT NULL,
    counterparty TEXT,
    key          TEXT    NOT NULL,
    body         TEXT    NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS feed_cursors (
    name     TEXT    PRIMARY KEY,
    feed_seq INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS rollup_pairs (
    hour_ms   INTEGER NOT NULL,
    currency  TEXT    NOT NULL,
    payer     TEXT    NOT NULL,
    payee     TEXT    NOT NULL,
    committed INTEGER NOT NULL,
    amount    TEXT    NOT NULL,
    failed    INTEGER NOT NULL,
    PRIMARY KEY (hour_ms, currency, payer, payee)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_errors (
    hour_ms    INTEGER NOT NULL,
    payer      TEXT    NOT NULL,
    payee      TEXT    NOT NULL,
    error_code TEXT    NOT NULL,
    failures   INTEGER NOT NULL,
    PRIMARY KEY (hour_ms, payer, payee, error_code)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rollup_latency (
    hour_ms   INTEGER NOT NULL,
    payer     TEXT    NOT NULL,
    payee     TEXT    NOT NULL,
    bucket    INTEGER NOT NULL,
    transfers INTEGER NOT NULL,
    PRIMARY KEY (hour_ms, payer, payee, bucket)
) STRICT, WITHOUT ROWID;
";

/// The writer's state, read from the tables (see `feed.rs`).
pub(crate) fn load_state(connection: &Connection) -> Result<FeedState, StoreError> {
    let newest = connection
        .query_row(
            "SELECT feed_seq, at_ms FROM changes ORDER BY feed_seq DESC LIMIT 1",
            [],
            |row| Ok((row.get::<_, i64>(0)? as u64, row.get::<_, i64>(1)?)),
        )
        .optional()?;
    let mut state = FeedState::after(newest);
    let mut participants = connection.prepare("SELECT id, name, is_hub FROM participants")?;
    let mut rows = participants.query([])?;
    while let Some(row) = rows.next()? {
        let name: String = row.get(1)?;
        state.note_participant(ParticipantId(row.get(0)?), &name, row.get(2)?);
    }
    let mut accounts = connection
        .prepare("SELECT id, participant_id, currency, is_active, net_debit_cap FROM accounts")?;
    let mut rows = accounts.query([])?;
    while let Some(row) = rows.next()? {
        let currency: String = row.get(2)?;
        let cap: Option<String> = row.get(4)?;
        state.note_account(
            AccountId(row.get(0)?),
            ParticipantId(row.get(1)?),
            parse_currency(&currency)?,
            row.get(3)?,
            cap.map(|cap| parse_amount(&cap)).transpose()?,
        );
    }
    Ok(state)
}

/// Appends the rows of `batches` in the commit's transaction; the state is
/// read first if the writer has none (its first commit, or after one
/// failed). The caller keeps the state only once the commit succeeded.
pub(crate) fn write(
    transaction: &Transaction<'_>,
    state: &mut Option<FeedState>,
    batches: &[&[Record]],
) -> Result<Option<u64>, StoreError> {
    let feed = match state {
        Some(feed) => feed,
        None => state.insert(load_state(transaction)?),
    };
    let unknown = feed.unknown_transfers(batches);
    if !unknown.is_empty() {
        let mut select = transaction.prepare_cached(
            "SELECT transfer_id, kind, debit_account_id, credit_account_id, amount, prepared_at_ms
             FROM transfers WHERE seq = ?1",
        )?;
        for seq in unknown {
            let summary = select
                .query_row(params![seq as i64], |row| {
                    Ok((
                        row.get::<_, Vec<u8>>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, u32>(2)?,
                        row.get::<_, u32>(3)?,
                        row.get::<_, String>(4)?,
                        row.get::<_, i64>(5)?,
                    ))
                })
                .optional()?;
            if let Some((id, kind, debit, credit, amount, prepared_at_ms)) = summary {
                feed.note_transfer(
                    seq,
                    summary_of(&id, &kind, (debit, credit), &amount, prepared_at_ms)?,
                );
            }
        }
    }
    let rows = feed.rows(batches)?;
    // Whole chunks in one statement each (a statement's run costs more
    // than a row's insert), the rest one by one.
    let mut chunks = rows.chunks_exact(ROWS_PER_INSERT);
    if chunks.len() > 0 {
        let mut insert = transaction.prepare_cached(&insert_rows(ROWS_PER_INSERT))?;
        for chunk in &mut chunks {
            for (index, row) in chunk.iter().enumerate() {
                bind_row(&mut insert, index * FEED_ROW_PARAMS, row)?;
            }
            insert.raw_execute()?;
        }
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut insert = transaction.prepare_cached(&insert_rows(1))?;
        for row in rest {
            bind_row(&mut insert, 0, row)?;
            insert.raw_execute()?;
        }
    }
    Ok(rows.last().map(|row| row.feed_seq))
}

/// The rows one statement inserts (SQLite's limit on a statement's
/// parameters, 32,766 since 3.32, is far above 7 times this).
const ROWS_PER_INSERT: usize = 16;
const FEED_ROW_PARAMS: usize = 7;

/// `INSERT INTO changes` of `rows` rows, parameters numbered in order.
fn insert_rows(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO changes (feed_seq, at_ms, kind, participant, counterparty, key, body) VALUES ",
    );
    for row in 0..rows {
        if row > 0 {
            sql.push(',');
        }
        sql.push('(');
        for param in 0..FEED_ROW_PARAMS {
            if param > 0 {
                sql.push(',');
            }
            let _ = write!(sql, "?{}", row * FEED_ROW_PARAMS + param + 1);
        }
        sql.push(')');
    }
    sql
}

/// Binds `row` to the parameters after `first` (0-based).
fn bind_row(
    insert: &mut rusqlite::CachedStatement<'_>,
    first: usize,
    row: &FeedRow,
) -> rusqlite::Result<()> {
    insert.raw_bind_parameter(first + 1, row.feed_seq as i64)?;
    insert.raw_bind_parameter(first + 2, row.at_ms)?;
    insert.raw_bind_parameter(first + 3, &row.kind)?;
    insert.raw_bind_parameter(first + 4, &row.participant)?;
    insert.raw_bind_parameter(first + 5, &row.counterparty)?;
    insert.raw_bind_parameter(first + 6, &row.key)?;
    insert.raw_bind_parameter(first + 7, &row.body)
}

pub(crate) fn summary_of(
    id: &[u8],
    kind: &str,
    (debit, credit): (u32, u32),
    amount: &str,
    prepared_at_ms: i64,
) -> Result<TransferSummary, StoreError> {
    Ok(TransferSummary {
        transfer_id: TransferId::from_blob(id)
            .ok_or_else(|| StoreError::fatal(format!("bad transfer id {id:?} in the store")))?,
        kind: TransferKind::parse(kind)
            .ok_or_else(|| StoreError::fatal(format!("bad transfer kind {kind:?} in the store")))?,
        debit: AccountId(debit),
        credit: AccountId(credit),
        amount: parse_amount(amount)?,
        prepared_at_ms,
    })
}

fn parse_currency(text: &str) -> Result<Currency, StoreError> {
    Currency::parse(text)
        .ok_or_else(|| StoreError::fatal(format!("account currency {text:?} is not ISO 4217")))
}

fn parse_amount(text: &str) -> Result<Amount, StoreError> {
    Amount::parse_signed(text)
        .map_err(|_| StoreError::fatal(format!("bad amount {text:?} in the store")))
}

/// The hub's connection to the feed (see [`FeedLog`]): its own, beside the
/// writer's, so that reads never wait for the ledger thread; its few writes
/// (a chunk of retention, a cursor) take SQLite's write lock briefly,
/// between two of the writer's commits.
#[derive(Debug)]
pub struct SqliteFeed {
    connection: Mutex<Connection>,
}

impl SqliteFeed {
    /// The feed of the store in `data_dir` (which a writer has opened, so
    /// its tables exist).
    pub fn open(data_dir: &Path) -> Result<SqliteFeed, StoreError> {
        let path = data_dir.join(crate::sqlite::DATABASE_FILE);
        let connection = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        connection.busy_timeout(Duration::from_secs(5))?;
        Ok(SqliteFeed {
            connection: Mutex::new(connection),
        })
    }

    fn connection(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A page of nothing yet after `after`, with the feed's bounds as
/// `transaction` sees them (the rows are read in the same snapshot).
fn bounds(transaction: &Transaction<'_>, after: u64) -> rusqlite::Result<FeedPage> {
    let (oldest, newest): (Option<i64>, Option<i64>) =
        transaction.query_row(FEED_BOUNDS, [], |row| Ok((row.get(0)?, row.get(1)?)))?;
    Ok(FeedPage {
        rows: Vec::new(),
        next_after: after,
        oldest: oldest.map(|seq| seq as u64),
        newest: newest.unwrap_or(0) as u64,
    })
}

/// The rows of some kinds over a range of the key (`read_feed_kinds`):
/// after ?1, through ?2, of the kinds in the JSON array ?3, at most ?4.
fn kinds_select() -> String {
    format!(
        "SELECT {FEED_COLUMNS} FROM changes WHERE feed_seq > ?1 AND feed_seq <= ?2
           AND kind IN (SELECT value FROM json_each(?3)) ORDER BY feed_seq LIMIT ?4"
    )
}

pub(crate) fn feed_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<FeedRow> {
    Ok(FeedRow {
        feed_seq: row.get::<_, i64>(0)? as u64,
        at_ms: row.get(1)?,
        kind: row.get(2)?,
        participant: row.get(3)?,
        counterparty: row.get(4)?,
        key: row.get(5)?,
        body: row.get(6)?,
    })
}

impl FeedLog for SqliteFeed {
    fn read_feed(
        &self,
        after: u64,
        limit: usize,
        participant: Option<&str>,
    ) -> Result<FeedPage, StoreError> {
        let limit = limit.clamp(1, crate::feed::MAX_PAGE);
        let mut connection = self.connection();
        // One snapshot for the bounds and the rows.
        let transaction = connection.transaction()?;
        let mut page = bounds(&transaction, after)?;
        match participant {
            None => {
                let mut select = transaction.prepare_cached(&format!(
                    "SELECT {FEED_COLUMNS} FROM changes WHERE feed_seq > ?1 ORDER BY feed_seq LIMIT ?2"
                ))?;
                page.rows = select
                    .query_map(params![after as i64, limit as i64], feed_row)?
                    .collect::<Result<_, _>>()?;
                if let Some(last) = page.rows.last() {
                    page.next_after = last.feed_seq;
                }
            }
            Some(participant) => {
                // Walked by the primary key within the budget: the rows it
                // examined are passed over whether or not they matched.
                let through = after.saturating_add(crate::feed::SCAN_BUDGET as u64);
                let mut select = transaction.prepare_cached(&format!(
                    "SELECT {FEED_COLUMNS} FROM changes WHERE feed_seq > ?1 AND feed_seq <= ?2
                       AND (participant = ?3 OR counterparty = ?3) ORDER BY feed_seq LIMIT ?4"
                ))?;
                page.rows = select
                    .query_map(
                        params![after as i64, through as i64, participant, limit as i64],
                        feed_row,
                    )?
                    .collect::<Result<_, _>>()?;
                page.next_after = next_after(&page.rows, limit, after, through, page.newest);
            }
        }
        transaction.commit()?;
        Ok(page)
    }

    fn read_feed_kinds(
        &self,
        after: u64,
        limit: usize,
        kinds: &'static [&'static str],
    ) -> Result<FeedPage, StoreError> {
        let limit = limit.clamp(1, crate::feed::MAX_PAGE);
        let mut connection = self.connection();
        let transaction = connection.transaction()?;
        let mut page = bounds(&transaction, after)?;
        let through = after.saturating_add(crate::feed::SCAN_BUDGET as u64);
        // The kinds as one JSON array parameter: one statement text
        // whatever their number.
        let kinds_json = serde_json::to_string(kinds).expect("strings serialise");
        let mut select = transaction.prepare_cached(&kinds_select())?;
        page.rows = select
            .query_map(
                params![after as i64, through as i64, kinds_json, limit as i64],
                feed_row,
            )?
            .collect::<Result<_, _>>()?;
        page.next_after = next_after(&page.rows, limit, after, through, page.newest);
        drop(select);
        transaction.commit()?;
        Ok(page)
    }

    fn prune_feed(&self, before_ms: i64) -> Result<usize, StoreError> {
        let connection = self.connection();
        let deleted = connection.execute(
            "DELETE FROM changes WHERE feed_seq IN (
                SELECT feed_seq FROM changes WHERE at_ms < ?1
                  AND feed_seq < (SELECT MAX(feed_seq) FROM changes)
                ORDER BY feed_seq LIMIT ?2)",
            params![before_ms, crate::feed::PRUNE_CHUNK as i64],
        )?;
        Ok(deleted)
    }

    fn feed_cursor(&self, name: &str) -> Result<Option<u64>, StoreError> {
        let connection = self.connection();
        let seq: Option<i64> = connection
            .query_row(
                "SELECT feed_seq FROM feed_cursors WHERE name = ?1",
                params![name],
                |row| row.get(0),
            )
            .optional()?;
        Ok(seq.map(|seq| seq as u64))
    }

    fn set_feed_cursor(&self, name: &str, feed_seq: u64) -> Result<(), StoreError> {
        let connection = self.connection();
        connection.execute(SET_CURSOR, params![name, feed_seq as i64])?;
        Ok(())
    }

    fn file_commit_spans(
        &self,
        most_spans: u64,
        most_commits: usize,
        span_ms: i64,
    ) -> Result<commit_index::Filing, StoreError> {
        let mut connection = self.connection();
        let filed = |connection: &Connection| -> Result<Option<Filed>, StoreError> {
            connection
                .query_row(
                    "SELECT origin_ms, span_ms, next_span FROM commit_index WHERE id = 1",
                    [],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .optional()?
                .map(|(origin, span, next)| Filed::checked(origin, span, next))
                .transpose()
        };
        let time = |connection: &Connection, sql: &str| -> Result<Option<i64>, StoreError> {
            Ok(connection.query_row(sql, [], |row| row.get(0))?)
        };
        // Read without the write lock, as the party index's filing.
        let reading = connection.transaction()?;
        let found = filed(&reading)?;
        // Each alone: SQLite serves a lone MIN or MAX from the index's end.
        let times = (
            time(
                &reading,
                "SELECT MIN(finished_at_ms) FROM transfer_finishes",
            )?,
            time(
                &reading,
                "SELECT MAX(finished_at_ms) FROM transfer_finishes",
            )?,
        );
        let (index, spans, newest) =
            match commit_index::Plan::of(found, times, span_ms, most_spans)? {
                commit_index::Plan::Done(filing) => return Ok(filing),
                commit_index::Plan::File {
                    index,
                    spans,
                    newest_ms,
                } => (index, spans, newest_ms),
            };
        let (to, rows) =
            commit_index::rows_of_spans(index, spans, most_commits, |from_ms, to_ms, limit| {
                let mut select = reading.prepare_cached(
                    "SELECT f.seq, f.finished_at_ms, t.debit_account_id, t.credit_account_id
                     FROM transfer_finishes f INDEXED BY transfer_finishes_by_time
                     JOIN transfers t ON t.seq = f.seq
                     WHERE f.finished_at_ms >= ?1 AND f.finished_at_ms < ?2
                       AND f.state = 'COMMITTED' AND t.kind IN ('TRANSFER', 'FX_CONVERSION')
                     ORDER BY f.finished_at_ms, f.seq LIMIT ?3",
                )?;
                let limit = limit.map_or(-1, |limit| limit as i64);
                let commits = select
                    .query_map(params![from_ms, to_ms, limit], |row| {
                        Ok(commit_index::Commit {
                            seq: row.get::<_, i64>(0)? as u64,
                            at_ms: row.get(1)?,
                            debit: row.get(2)?,
                            credit: row.get(3)?,
                        })
                    })?
                    .collect::<Result<_, _>>()?;
                Ok(commits)
            })?;
        drop(reading);
        let transaction =
            connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let now = filed(&transaction)?;
        if now != found {
            return Err(commit_index::moved(index, now));
        }
        {
            let mut insert = transaction
                .prepare_cached("INSERT INTO commit_spans (key, entries) VALUES (?1, ?2)")?;
            for (key, entries) in &rows {
                insert.execute(params![key, entries])?;
            }
        }
        transaction.execute(
            "INSERT INTO commit_index (id, origin_ms, span_ms, next_span) VALUES (1, ?1, ?2, ?3)
             ON CONFLICT (id) DO UPDATE SET next_span = excluded.next_span",
            params![index.origin_ms, index.span_ms, to as i64],
        )?;
        transaction.commit()?;
        Ok(commit_index::Filing::of(index, spans.0, to, newest))
    }

    fn file_party_blocks(
        &self,
        most_blocks: u64,
        block_seqs: u64,
    ) -> Result<party_index::Filing, StoreError> {
        let mut connection = self.connection();
        // The blocks filed and their size, or none yet at `block_seqs`.
        let filed = |connection: &Connection| -> Result<(u64, u64), StoreError> {
            let row: Option<(i64, i64)> = connection
                .query_row(
                    "SELECT next_block, block_seqs FROM party_index WHERE id = 1",
                    [],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            let (next, seqs) = row.unwrap_or((0, block_seqs as i64));
            Ok((next as u64, party_index::checked_block_seqs(seqs)?))
        };
        // Read without the write lock: a committed block's rows no longer
        // change, so only the fence below needs it.
        let reading = connection.transaction()?;
        let (next, block_seqs) = filed(&reading)?;
        let last_seq =
            reading.query_row("SELECT COALESCE(MAX(seq), 0) FROM transfers", [], |row| {
                row.get::<_, i64>(0)
            })? as u64;
        let to = party_index::blocks_complete(last_seq, block_seqs).min(next + most_blocks);
        let mut filing = party_index::Filing {
            filed: 0,
            next_block: next,
            block_seqs,
            last_seq,
        };
        if to <= next {
            return Ok(filing);
        }
        let rows = party_index::rows_of_blocks(next, to, block_seqs, |from, to| {
            let mut select = reading.prepare_cached(
                "SELECT seq, payer_party, payee_party, amount_units FROM transfers
                 WHERE seq >= ?1 AND seq < ?2",
            )?;
            let parties = select
                .query_map(params![from as i64, to as i64], |row| {
                    Ok((
                        row.get::<_, i64>(0)? as u64,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                    ))
                })?
                .collect::<Result<_, _>>()?;
            Ok(parties)
        })?;
        drop(reading);
        let transaction =
            connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let found = filed(&transaction)?;
        if found != (next, block_seqs) {
            return Err(party_index::moved(next, found.0));
        }
        {
            let mut insert = transaction
                .prepare_cached("INSERT INTO party_blocks (key, entries) VALUES (?1, ?2)")?;
            for (key, entries) in &rows {
                insert.execute(params![key, entries])?;
            }
        }
        transaction.execute(
            "INSERT INTO party_index (id, next_block, block_seqs) VALUES (1, ?1, ?2)
             ON CONFLICT (id) DO UPDATE SET next_block = excluded.next_block",
            params![to as i64, block_seqs as i64],
        )?;
        transaction.commit()?;
        filing.filed = to - next;
        filing.next_block = to;
        Ok(filing)
    }

    fn fold_rollup(&self, after: u64, through: u64, fold: &Fold) -> Result<(), StoreError> {
        let mut connection = self.connection();
        // IMMEDIATE: the write lock first, so that the cursor read is the
        // one the commit moves.
        let transaction =
            connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let found: Option<i64> = transaction
            .query_row(
                "SELECT feed_seq FROM feed_cursors WHERE name = ?1",
                params![rollup::CURSOR],
                |row| row.get(0),
            )
            .optional()?;
        let found = found.unwrap_or(0) as u64;
        if found != after {
            return Err(rollup::moved(after, found));
        }
        {
            let mut select = transaction.prepare_cached(
                "SELECT committed, amount, failed FROM rollup_pairs
                 WHERE hour_ms = ?1 AND currency = ?2 AND payer = ?3 AND payee = ?4",
            )?;
            let mut upsert = transaction.prepare_cached(
                "INSERT INTO rollup_pairs (hour_ms, currency, payer, payee, committed, amount, failed)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (hour_ms, currency, payer, payee) DO UPDATE SET
                   committed = excluded.committed, amount = excluded.amount, failed = excluded.failed",
            )?;
            for (key, counts) in &fold.pairs {
                let key_params = params![key.hour_ms, key.currency, key.payer, key.payee];
                let stored = select
                    .query_row(key_params, |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                    })
                    .optional()?;
                let (committed, amount, failed) = rollup::add_counts(stored, counts)?;
                upsert.execute(params![
                    key.hour_ms,
                    key.currency,
                    key.payer,
                    key.payee,
                    committed,
                    amount,
                    failed
                ])?;
            }
            let mut errors = transaction.prepare_cached(
                "INSERT INTO rollup_errors (hour_ms, payer, payee, error_code, failures)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (hour_ms, payer, payee, error_code) DO UPDATE SET
                   failures = failures + excluded.failures",
            )?;
            for ((hour_ms, payer, payee, code), failures) in &fold.errors {
                errors.execute(params![hour_ms, payer, payee, code, *failures as i64])?;
            }
            let mut latency = transaction.prepare_cached(
                "INSERT INTO rollup_latency (hour_ms, payer, payee, bucket, transfers)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (hour_ms, payer, payee, bucket) DO UPDATE SET
                   transfers = transfers + excluded.transfers",
            )?;
            for ((hour_ms, payer, payee, bucket), transfers) in &fold.latency {
                latency.execute(params![
                    hour_ms,
                    payer,
                    payee,
                    *bucket as i64,
                    *transfers as i64
                ])?;
            }
        }
        transaction.execute(SET_CURSOR, params![rollup::CURSOR, through as i64])?;
        transaction.commit()?;
        Ok(())
    }

    fn read_rollup(
        &self,
        from_ms: i64,
        to_ms: i64,
        participant: Option<&str>,
    ) -> Result<Rollup, StoreError> {
        let mut connection = self.connection();
        let transaction = connection.transaction()?;
        let mut rollup = Rollup::default();
        // `?3 IS NULL`: the whole scheme's; else the DFSP's own pairs.
        let own = "(?3 IS NULL OR payer = ?3 OR payee = ?3)";
        {
            let mut pairs = transaction.prepare_cached(&format!(
                "SELECT hour_ms, currency, payer, payee, committed, amount, failed FROM rollup_pairs
                 WHERE hour_ms >= ?1 AND hour_ms < ?2 AND {own}
                 ORDER BY hour_ms, currency, payer, payee"
            ))?;
            let mut rows = pairs.query(params![from_ms, to_ms, participant])?;
            while let Some(row) = rows.next()? {
                let amount: String = row.get(5)?;
                rollup.pairs.push((
                    PairKey {
                        hour_ms: row.get(0)?,
                        currency: row.get(1)?,
                        payer: row.get(2)?,
                        payee: row.get(3)?,
                    },
                    PairCounts {
                        committed: row.get::<_, i64>(4)? as u64,
                        amount: parse_amount(&amount)?,
                        failed: row.get::<_, i64>(6)? as u64,
                    },
                ));
            }
            let mut errors = transaction.prepare_cached(&format!(
                "SELECT hour_ms, payer, payee, error_code, failures FROM rollup_errors
                 WHERE hour_ms >= ?1 AND hour_ms < ?2 AND {own}
                 ORDER BY hour_ms, payer, payee, error_code"
            ))?;
            rollup.errors = errors
                .query_map(params![from_ms, to_ms, participant], |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get::<_, i64>(4)? as u64,
                    ))
                })?
                .collect::<Result<_, _>>()?;
            let mut latency = transaction.prepare_cached(&format!(
                "SELECT payer, payee, bucket, SUM(transfers) FROM rollup_latency
                 WHERE hour_ms >= ?1 AND hour_ms < ?2 AND {own}
                 GROUP BY payer, payee, bucket"
            ))?;
            let mut rows = latency.query(params![from_ms, to_ms, participant])?;
            while let Some(row) = rows.next()? {
                rollup::add_bucket(
                    &mut rollup.latency,
                    (row.get(0)?, row.get(1)?),
                    row.get(2)?,
                    row.get(3)?,
                );
            }
            let through: Option<i64> = transaction
                .query_row(
                    "SELECT feed_seq FROM feed_cursors WHERE name = ?1",
                    params![rollup::CURSOR],
                    |row| row.get(0),
                )
                .optional()?;
            rollup.through = through.unwrap_or(0) as u64;
        }
        transaction.commit()?;
        Ok(rollup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bounds read each end of the primary key, never the table: the
    /// followers read them at every page.
    #[test]
    fn the_feeds_bounds_are_read_from_the_ends_of_its_key() {
        let dir = tempfile::tempdir().unwrap();
        drop(crate::sqlite::SqliteStore::open(dir.path(), Default::default()).unwrap());
        let connection = Connection::open(dir.path().join(crate::sqlite::DATABASE_FILE)).unwrap();
        let details = plan_of(&connection, FEED_BOUNDS, &[]);
        assert_eq!(
            details.iter().filter(|d| *d == "SEARCH changes").count(),
            2,
            "{details:?}"
        );
        assert!(
            !details.iter().any(|d| d.starts_with("SCAN changes")),
            "{details:?}"
        );
    }

    fn plan_of(connection: &Connection, sql: &str, values: &[&dyn rusqlite::ToSql]) -> Vec<String> {
        let mut plan = connection
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap();
        plan.query_map(values, |row| row.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// A read by kind walks a range of the key and checks each row's kind
    /// against the list: the changes table has no other way in.
    #[test]
    fn a_read_by_kind_walks_a_range_of_the_key() {
        let dir = tempfile::tempdir().unwrap();
        drop(crate::sqlite::SqliteStore::open(dir.path(), Default::default()).unwrap());
        let connection = Connection::open(dir.path().join(crate::sqlite::DATABASE_FILE)).unwrap();
        let details = plan_of(
            &connection,
            &kinds_select(),
            &[&0i64, &10i64, &r#"["transfer.committed"]"#, &5i64],
        );
        assert!(
            details
                .iter()
                .any(|d| d == "SEARCH changes USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"),
            "{details:?}"
        );
        assert!(
            !details.iter().any(|d| d.starts_with("SCAN changes")),
            "{details:?}"
        );
    }
}
