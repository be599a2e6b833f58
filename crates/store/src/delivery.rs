//! The callback dispatcher's own durable state, in `callbacks.db` beside
//! the ledger's `kasi.db` (a separate file, so that its writes never share
//! a lock, a WAL or a transaction with the ledger's commits): the delivery
//! watermark and the dead letters.
//!
//! - The watermark is a ledger instant (ms) such that every callback derived
//!   from a transfer row recorded or finished before it has been answered or
//!   kept as a dead letter. At start-up, callbacks of transfers prepared or
//!   finished at or after it are derived again from `kasi.db`
//!   ([`StoreReader::transfers_touched_since`](crate::StoreReader::transfers_touched_since)).
//! - A dead letter is a callback that could not be delivered before its
//!   retry deadline: kept byte for byte until it is re-sent and answered.

use std::path::Path;

use rusqlite::{params, Connection};

use crate::StoreError;

/// The file inside the data directory.
pub const DELIVERY_FILE: &str = "callbacks.db";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS watermark (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    at_ms INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS dead_letters (
    id           INTEGER PRIMARY KEY,
    destination  TEXT    NOT NULL,
    transfer_id  TEXT,
    method       TEXT    NOT NULL,
    url          TEXT    NOT NULL,
    headers      TEXT    NOT NULL,  -- name: value lines
    body         BLOB    NOT NULL,
    failed_at_ms INTEGER NOT NULL,
    attempts     INTEGER NOT NULL,
    reason       TEXT    NOT NULL,
    origin       TEXT               -- 'hub', 'forwarded'; NULL: written before origins were kept
) STRICT;
";

/// Adds `origin` to a `dead_letters` created before it existed (its rows
/// keep NULL, read as [`CallbackOrigin::Forwarded`]).
const ADD_ORIGIN: &str = "ALTER TABLE dead_letters ADD COLUMN origin TEXT";

/// Who wrote a callback's message, which decides whether the hub signs it
/// (FSPIOP JWS): set by the code path that built the callback, never read
/// from its headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallbackOrigin {
    /// Built by the hub (a state, an error, a notification): its
    /// FSPIOP-Source is the hub, any inherited signature is dropped and the
    /// hub signs it.
    Hub,
    /// A DFSP's message passed on: its bytes and its own FSPIOP-Signature
    /// (or none) travel as they came; the hub never signs it.
    Forwarded,
}

impl CallbackOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            CallbackOrigin::Hub => "hub",
            CallbackOrigin::Forwarded => "forwarded",
        }
    }

    /// The stored value; a row without one (kept before origins were
    /// stored, its headers then saved without any signature) is taken as
    /// forwarded: the hub signs only what it knows it built, so an old
    /// dead letter is re-sent unsigned rather than under the hub's name.
    pub fn parse(stored: Option<&str>) -> CallbackOrigin {
        match stored {
            Some("hub") => CallbackOrigin::Hub,
            _ => CallbackOrigin::Forwarded,
        }
    }
}

/// One dead letter as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetterRow {
    pub id: u64,
    pub destination: String,
    pub transfer_id: Option<String>,
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub failed_at_ms: i64,
    pub attempts: u32,
    pub reason: String,
    /// Whether the hub signs it when re-sent; `headers` keep a forwarded
    /// message's own FSPIOP-Signature, never a hub one (re-signed).
    pub origin: CallbackOrigin,
}

/// Where the dispatcher keeps its state: `callbacks.db` beside a SQLite
/// store, tables of the PostgreSQL store ([`crate::pg_delivery`]).
pub trait Delivery: Send {
    /// The persisted watermark; `None` before the first one was saved.
    fn watermark(&mut self) -> Result<Option<i64>, StoreError>;

    fn dead_letters(&mut self) -> Result<Vec<DeadLetterRow>, StoreError>;

    /// Applies some changes in one transaction: the newest watermark, dead
    /// letters to keep (replacing a row of the same id), and ids to forget.
    fn apply(
        &mut self,
        watermark: Option<i64>,
        keep: &[DeadLetterRow],
        forget: &[u64],
    ) -> Result<(), StoreError>;
}

/// Headers as stored: `name: value` lines.
pub(crate) fn format_headers(headers: &[(String, String)]) -> String {
    headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\n"))
        .collect()
}

pub(crate) fn parse_headers(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// `callbacks.db`, opened for writing by the process that holds the data
/// directory's lock (the caller opens the ledger's store first).
pub struct DeliveryDb {
    connection: Connection,
}

impl DeliveryDb {
    pub fn open(data_dir: &Path) -> Result<DeliveryDb, StoreError> {
        let connection = Connection::open(data_dir.join(DELIVERY_FILE))?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "FULL")?;
        connection.execute_batch(SCHEMA)?;
        let has_origin = connection
            .prepare("SELECT 1 FROM pragma_table_info('dead_letters') WHERE name = 'origin'")?
            .exists([])?;
        if !has_origin {
            connection.execute_batch(ADD_ORIGIN)?;
        }
        Ok(DeliveryDb { connection })
    }
}

impl Delivery for DeliveryDb {
    fn watermark(&mut self) -> Result<Option<i64>, StoreError> {
        let mut statement = self
            .connection
            .prepare("SELECT at_ms FROM watermark WHERE id = 1")?;
        let mut rows = statement.query([])?;
        Ok(match rows.next()? {
            Some(row) => Some(row.get(0)?),
            None => None,
        })
    }

    fn dead_letters(&mut self) -> Result<Vec<DeadLetterRow>, StoreError> {
        let mut statement = self.connection.prepare(
            "SELECT id, destination, transfer_id, method, url, headers, body, failed_at_ms, attempts, reason, origin
             FROM dead_letters ORDER BY id",
        )?;
        let mut rows = statement.query([])?;
        let mut letters = Vec::new();
        while let Some(row) = rows.next()? {
            let headers: String = row.get(5)?;
            letters.push(DeadLetterRow {
                id: row.get::<_, i64>(0)? as u64,
                destination: row.get(1)?,
                transfer_id: row.get(2)?,
                method: row.get(3)?,
                url: row.get(4)?,
                headers: parse_headers(&headers),
                body: row.get(6)?,
                failed_at_ms: row.get(7)?,
                attempts: row.get(8)?,
                reason: row.get(9)?,
                origin: CallbackOrigin::parse(row.get::<_, Option<String>>(10)?.as_deref()),
            });
        }
        Ok(letters)
    }

    fn apply(
        &mut self,
        watermark: Option<i64>,
        keep: &[DeadLetterRow],
        forget: &[u64],
    ) -> Result<(), StoreError> {
        let transaction = self.connection.transaction()?;
        if let Some(at_ms) = watermark {
            transaction.execute(
                "INSERT INTO watermark (id, at_ms) VALUES (1, ?1)
                 ON CONFLICT (id) DO UPDATE SET at_ms = excluded.at_ms",
                params![at_ms],
            )?;
        }
        for letter in keep {
            let headers = format_headers(&letter.headers);
            transaction.execute(
                "INSERT OR REPLACE INTO dead_letters
                    (id, destination, transfer_id, method, url, headers, body, failed_at_ms, attempts, reason, origin)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    letter.id as i64,
                    letter.destination,
                    letter.transfer_id,
                    letter.method,
                    letter.url,
                    headers,
                    letter.body,
                    letter.failed_at_ms,
                    letter.attempts,
                    letter.reason,
                    letter.origin.as_str(),
                ],
            )?;
        }
        for id in forget {
            transaction.execute(
                "DELETE FROM dead_letters WHERE id = ?1",
                params![*id as i64],
            )?;
        }
        transaction.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(id: u64) -> DeadLetterRow {
        DeadLetterRow {
            id,
            destination: "payeefsp".into(),
            transfer_id: Some("abc".into()),
            method: "PUT".into(),
            url: "http://x/transfers/abc".into(),
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("fspiop-source".into(), "Hub".into()),
            ],
            body: b"{\"a\":1}".to_vec(),
            failed_at_ms: 5,
            attempts: 3,
            reason: "503".into(),
            origin: if id.is_multiple_of(2) {
                CallbackOrigin::Hub
            } else {
                CallbackOrigin::Forwarded
            },
        }
    }

    #[test]
    fn dead_letters_kept_before_origins_were_stored_are_read_as_forwarded() {
        let dir = tempfile::tempdir().unwrap();
        {
            // callbacks.db as an earlier kasi created it: no origin column.
            let connection = Connection::open(dir.path().join(DELIVERY_FILE)).unwrap();
            connection
                .execute_batch(
                    "CREATE TABLE dead_letters (
                        id INTEGER PRIMARY KEY, destination TEXT NOT NULL, transfer_id TEXT,
                        method TEXT NOT NULL, url TEXT NOT NULL, headers TEXT NOT NULL,
                        body BLOB NOT NULL, failed_at_ms INTEGER NOT NULL,
                        attempts INTEGER NOT NULL, reason TEXT NOT NULL
                    ) STRICT;
                    INSERT INTO dead_letters VALUES
                        (4, 'payeefsp', 'abc', 'PUT', 'http://x/transfers/abc',
                         'fspiop-source: Hub
', X'7B7D', 5, 3, '503');",
                )
                .unwrap();
        }
        let mut db = DeliveryDb::open(dir.path()).unwrap();
        let old = db.dead_letters().unwrap();
        assert_eq!(old.len(), 1);
        // Its FSPIOP-Source says the hub; the origin is not read from it.
        assert_eq!(old[0].origin, CallbackOrigin::Forwarded);
        // New rows keep theirs, beside the old one.
        db.apply(None, &[letter(2)], &[]).unwrap();
        drop(db);
        let mut db = DeliveryDb::open(dir.path()).unwrap();
        let letters = db.dead_letters().unwrap();
        // Ordered by id: the new row (2) before the old one (4).
        assert_eq!(letters[0], letter(2));
        assert_eq!(letters[0].origin, CallbackOrigin::Hub);
        assert_eq!(letters[1].origin, CallbackOrigin::Forwarded);
    }

    #[test]
    fn watermark_and_dead_letters_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut db = DeliveryDb::open(dir.path()).unwrap();
        assert_eq!(db.watermark().unwrap(), None);
        db.apply(Some(10), &[letter(1), letter(2)], &[]).unwrap();
        db.apply(Some(20), &[], &[1]).unwrap();
        drop(db);
        let mut db = DeliveryDb::open(dir.path()).unwrap();
        assert_eq!(db.watermark().unwrap(), Some(20));
        assert_eq!(db.dead_letters().unwrap(), vec![letter(2)]);
    }
}
