//! kasi's durable store: it records what the ledger did, one transaction per
//! group of batches, and gives it back at start-up.
//!
//! The ledger pipeline sees only the [`Store`] trait: `commit` the records of
//! some batches durably, `load` every row. The embedded default is
//! [`sqlite::SqliteStore`] (WAL, `synchronous=FULL`); a PostgreSQL backend
//! will implement the same trait.
//!
//! What is written per transfer phase: one `transfers` row at prepare (or
//! funds in/out), one `transfer_finishes` row when it commits, aborts or
//! expires, and the touched `accounts` rows once per batch, however many
//! transfers touched them.

use std::fmt;

use ledger::{Record, Snapshot};

pub mod delivery;
pub mod sqlite;
mod sqlite_settlement;

/// A store failure. After a failed commit the ledger's memory is ahead of
/// the disk, so the pipeline stops; restarting recovers from what is durable.
#[derive(Debug)]
pub struct StoreError(pub String);

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> StoreError {
        StoreError(format!("sqlite: {error}"))
    }
}

/// Durable storage for the ledger's records.
pub trait Store: Send {
    /// Makes the records of `batches` durable, in order, as one transaction:
    /// when this returns `Ok`, all of them survive a crash; when it returns
    /// `Err`, none of them is visible.
    fn commit(&mut self, batches: &[&[Record]]) -> Result<(), StoreError>;

    /// Reads every row, for recovery and audit.
    fn load(&mut self) -> Result<Snapshot, StoreError>;

    /// Where the data lives, for logs.
    fn describe(&self) -> String;
}
