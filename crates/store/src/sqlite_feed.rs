//! The change feed on SQLite (`feed.rs`): its tables (schema version 12),
//! the writer's part of a commit, and [`SqliteFeed`], the hub's connection
//! for reading pages, retention and the publishers' cursors.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use ledger::{AccountId, Amount, Currency, ParticipantId, Record, TransferId, TransferKind};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Transaction};

use crate::feed::{FeedLog, FeedPage, FeedRow, FeedState, TransferSummary, FEED_COLUMNS};
use crate::StoreError;

/// The schema version that added the feed's tables.
pub(crate) const FEED_SINCE: i64 = 12;

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
            "SELECT transfer_id, kind, debit_account_id, credit_account_id, amount FROM transfers WHERE seq = ?1",
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
                    ))
                })
                .optional()?;
            if let Some((id, kind, debit, credit, amount)) = summary {
                feed.note_transfer(seq, summary_of(&id, &kind, debit, credit, &amount)?);
            }
        }
    }
    let rows = feed.rows(batches)?;
    let mut insert = transaction.prepare_cached(
        "INSERT INTO changes (feed_seq, at_ms, kind, participant, counterparty, key, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for row in &rows {
        insert.execute(params![
            row.feed_seq as i64,
            row.at_ms,
            row.kind,
            row.participant,
            row.counterparty,
            row.key,
            row.body
        ])?;
    }
    Ok(rows.last().map(|row| row.feed_seq))
}

pub(crate) fn summary_of(
    id: &[u8],
    kind: &str,
    debit: u32,
    credit: u32,
    amount: &str,
) -> Result<TransferSummary, StoreError> {
    Ok(TransferSummary {
        transfer_id: TransferId::from_blob(id)
            .ok_or_else(|| StoreError::fatal(format!("bad transfer id {id:?} in the store")))?,
        kind: TransferKind::parse(kind)
            .ok_or_else(|| StoreError::fatal(format!("bad transfer kind {kind:?} in the store")))?,
        debit: AccountId(debit),
        credit: AccountId(credit),
        amount: parse_amount(amount)?,
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
        let (oldest, newest): (Option<i64>, Option<i64>) = transaction.query_row(
            "SELECT MIN(feed_seq), MAX(feed_seq) FROM changes",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        let mut page = FeedPage {
            rows: Vec::new(),
            next_after: after,
            oldest: oldest.map(|seq| seq as u64),
            newest: newest.unwrap_or(0) as u64,
        };
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
                page.next_after = match page.rows.last() {
                    Some(last) if page.rows.len() == limit => last.feed_seq,
                    _ => through.min(page.newest).max(after),
                };
            }
        }
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
        connection.execute(
            "INSERT INTO feed_cursors (name, feed_seq) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET feed_seq = excluded.feed_seq",
            params![name, feed_seq as i64],
        )?;
        Ok(())
    }
}
