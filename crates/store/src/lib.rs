//! kasi's durable store: it records what the ledger did, one transaction per
//! group of batches, and gives it back at start-up.
//!
//! The ledger pipeline sees only the [`Store`] trait: `commit` the records of
//! some batches durably, `load` every row. The embedded default is
//! [`sqlite::SqliteStore`] (WAL, `synchronous=FULL`); [`pg::PgStore`]
//! keeps the same rows in PostgreSQL, where several kasi processes can
//! reach them.
//!
//! What is written per transfer phase: one `transfers` row at prepare (or
//! funds in/out), one `transfer_finishes` row when it commits, aborts or
//! expires, and the touched `accounts` rows once per batch, however many
//! transfers touched them. A conversion is a transfer of its own kind,
//! written the same way; it and the transfer depending on it each have a
//! `transfer_fx` row besides (ordinary transfers none), and a conversion
//! the FXP accepted a `conversion_fulfils` row.

use std::fmt;

use ledger::{Record, Snapshot};

pub mod commit_index;
pub mod delivery;
pub mod feed;
pub mod history;
pub mod party_index;
pub mod pg;
pub mod pg_delivery;
pub mod pg_feed;
mod pg_history;
pub mod pg_lease;
pub mod pg_reader;
mod pg_rows;
mod pg_schema;
mod pg_settlement;
mod pg_worker;
pub mod rollup;
pub mod search;
pub mod sqlite;
pub mod sqlite_feed;
pub mod sqlite_history;
mod sqlite_settlement;
pub mod statement;

/// A store failure. A commit that fails leaves nothing of its batches
/// visible; whether the pipeline may try the same commit again depends on
/// [`StoreError::transient`].
#[derive(Debug)]
pub struct StoreError {
    pub message: String,
    /// The failure left the store as it was and may pass (a full disk, a
    /// busy database): the same commit can be tried again. Anything else
    /// (an fsync that failed, corruption) is fatal: the pipeline stops, and
    /// a restart recovers from what is durable.
    pub transient: bool,
}

impl StoreError {
    pub fn fatal(message: impl Into<String>) -> StoreError {
        StoreError {
            message: message.into(),
            transient: false,
        }
    }

    pub fn transient(message: impl Into<String>) -> StoreError {
        StoreError {
            message: message.into(),
            transient: true,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> StoreError {
        use rusqlite::ffi::ErrorCode;
        let message = format!("sqlite: {error}");
        // Only failures SQLite reports before anything reached the disk are
        // worth retrying: a full disk (ENOSPC), a file-size limit (EFBIG,
        // reported as a failed write), a lock. A failed fsync is not: the
        // kernel may have dropped the pages it could not write, and a
        // retried fsync would report success for data that is gone.
        let transient = match &error {
            rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
                ErrorCode::DiskFull | ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => true,
                ErrorCode::SystemIoFailure => {
                    failure.extended_code == rusqlite::ffi::SQLITE_IOERR_WRITE
                }
                _ => false,
            },
            _ => false,
        };
        StoreError { message, transient }
    }
}

/// A stored transfer as the ledger's duplicate rules need it (the ledger
/// owns the type: its `prefetch.rs` applies the rules to it).
pub use ledger::StoredTransfer;

/// What the pipeline reads before it applies a batch (see the ledger's
/// `prefetch.rs`): the rows of every id the batch names that the ledger's
/// memory does not hold, in one read (one round trip on PostgreSQL).
pub trait Prefetch: Send {
    /// The store's answers for `ids`, each read in what is committed now:
    /// one per id asked (an id whose row cannot be read is
    /// [`ledger::Lookup::Failed`], the others still answered); the error
    /// is the read as a whole failing.
    fn prefetch(&mut self, ids: &ledger::PrefetchIds) -> Result<ledger::Prefetched, StoreError>;
}

/// What the hub reads from the store beside the pipeline, for transfers
/// and quotes that left the ledger's memory: blocking point reads on a
/// connection of the reader's own, called from the request's task. Each
/// backend implements it, so the hub never names one.
pub trait StoreReader: Send + Sync + fmt::Debug {
    /// The transfer with this id, if the store has it.
    fn find_transfer(
        &self,
        transfer_id: ledger::TransferId,
    ) -> Result<Option<StoredTransfer>, StoreError>;

    /// The recorded quote (persistent mode) with this id, if any.
    fn find_quote(
        &self,
        quote_id: ledger::TransferId,
    ) -> Result<Option<ledger::QuoteRow>, StoreError>;

    /// Every FSPIOP transfer prepared or finished at or after `since_ms`
    /// (ledger time), with its condition and how it finished: what the
    /// callback dispatcher derives its callbacks from again after a
    /// restart. Conversions too (an FXP's acceptance since then counts as
    /// a touch), and a transfer a conversion depends on with its FSPIOP
    /// payer (the initiating DFSP) and its link. In no particular order.
    /// Read by index, not by a scan of the whole history.
    fn transfers_touched_since(&self, since_ms: i64) -> Result<Vec<Touched>, StoreError>;

    /// A page of the transfers `query` finds, newest first (`GET
    /// /transfers`): walked by an index, within [`search::SCAN_BUDGET`].
    fn search_transfers(
        &self,
        query: &search::TransferQuery,
    ) -> Result<search::SearchPage, StoreError>;

    /// A page of a DFSP's statement (`GET /participants/{name}/statement`,
    /// [`statement`]); `None` when no participant has that name.
    fn statement(
        &self,
        query: &statement::StatementQuery,
    ) -> Result<Option<statement::StatementPage>, StoreError>;

    /// Whether a read waits on the network (a database server) rather than
    /// a local file: the hub then tells its runtime before blocking, so
    /// that other requests go on meanwhile.
    fn is_remote(&self) -> bool {
        false
    }
}

/// A transfer as [`StoreReader::transfers_touched_since`] gives it.
pub type Touched = (
    ledger::TransferView,
    ledger::Condition,
    Option<ledger::FinishKind>,
);

/// Durable storage for the ledger's records.
pub trait Store: Send {
    /// Makes the records of `batches` durable, in order, as one transaction:
    /// when this returns `Ok`, all of them survive a crash; when it returns
    /// `Err`, none of them is visible.
    fn commit(&mut self, batches: &[&[Record]]) -> Result<(), StoreError>;

    /// Tells `listener` the last `feed_seq` of each commit that appended
    /// change feed rows, once it is durable (`feed.rs`). A store without
    /// a feed never calls it.
    fn set_feed_listener(&mut self, listener: feed::FeedListener) {
        let _ = listener;
    }

    /// Reads every row, for recovery and audit.
    fn load(&mut self) -> Result<Snapshot, StoreError>;

    /// [`Prefetch::prefetch`] on the writer's own connection, between two
    /// commits: for a pipeline that applies and commits on one thread
    /// (its page cache stays valid, nobody else writes).
    fn prefetch(&mut self, ids: &ledger::PrefetchIds) -> Result<ledger::Prefetched, StoreError> {
        let _ = ids;
        Err(StoreError::fatal(format!(
            "{} does not read transfers back",
            self.describe()
        )))
    }

    /// A connection of its own for [`Prefetch`], for the ledger thread of
    /// a pipeline whose store thread holds the writer.
    fn open_prefetcher(&self) -> Result<Box<dyn Prefetch>, StoreError> {
        Err(StoreError::fatal(format!(
            "{} does not read transfers back",
            self.describe()
        )))
    }

    /// Reads what recovery needs with a retention horizon: every row, but
    /// transfers and conversions (with their FX rows) finished before
    /// `horizon_ms` only as the sums in
    /// [`Snapshot::archived`]. A backend may load everything instead.
    fn load_recent(&mut self, horizon_ms: i64) -> Result<Snapshot, StoreError> {
        let _ = horizon_ms;
        self.load()
    }

    /// Whether the last [`Store::load_recent`] started from a history
    /// snapshot, and through which seq that summed the transfers.
    fn history_snapshot_through(&self) -> Option<u64> {
        None
    }

    /// Drops the history snapshot the last load started from (recovery
    /// found that it does not add up), so that the next load reads the
    /// whole history and the snapshot is built again. Whether there was one.
    fn forget_history_snapshot(&mut self) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// Where the data lives, for logs.
    fn describe(&self) -> String;
}

/// A settlement model's rules from its stored columns (granularity,
/// interchange, delay, currency, ledger account type, settlement account
/// type; then the two flags): `None` when any is missing or unknown (a
/// definition kasi could not read), as both backends store it.
pub(crate) fn model_rules(
    texts: [Option<String>; 6],
    auto_position_reset: Option<bool>,
    require_liquidity_check: Option<bool>,
) -> Option<ledger::ModelRules> {
    use ledger::{AccountKind, Currency, Delay, Granularity, Interchange};
    let [Some(granularity), Some(interchange), Some(delay), currency, Some(ledger), Some(settlement)] =
        texts
    else {
        return None;
    };
    let currency = match currency {
        None => None,
        Some(code) => Some(Currency::parse(&code)?),
    };
    Some(ledger::ModelRules {
        granularity: Granularity::parse(&granularity)?,
        interchange: Interchange::parse(&interchange)?,
        delay: Delay::parse(&delay)?,
        currency,
        ledger_account_type: AccountKind::parse(&ledger)?,
        settlement_account_type: AccountKind::parse(&settlement)?,
        auto_position_reset: auto_position_reset.unwrap_or(false),
        require_liquidity_check: require_liquidity_check.unwrap_or(false),
    })
}

/// A `transfer_fx` row as both backends read and write it: a conversion's
/// terms (the first three), or a dependent transfer's link (the last two).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FxColumns {
    pub(crate) determining_transfer_id: Option<ledger::TransferId>,
    pub(crate) target_currency: Option<ledger::Currency>,
    pub(crate) target_amount: Option<ledger::Amount>,
    pub(crate) commit_request_id: Option<ledger::TransferId>,
    pub(crate) payer: Option<ledger::ParticipantId>,
}

impl FxColumns {
    pub(crate) fn of(link: &ledger::FxLink) -> FxColumns {
        match *link {
            ledger::FxLink::Conversion(terms) => FxColumns {
                determining_transfer_id: Some(terms.determining_transfer_id),
                target_currency: Some(terms.target_currency),
                target_amount: Some(terms.target_amount),
                ..FxColumns::default()
            },
            ledger::FxLink::Dependent {
                commit_request_id,
                payer,
            } => FxColumns {
                commit_request_id: Some(commit_request_id),
                payer: Some(payer),
                ..FxColumns::default()
            },
        }
    }

    /// The link the row of transfer `seq` holds: one or the other, whole.
    pub(crate) fn link(self, seq: u64) -> Result<ledger::FxLink, StoreError> {
        match self {
            FxColumns {
                determining_transfer_id: Some(determining_transfer_id),
                target_currency: Some(target_currency),
                target_amount: Some(target_amount),
                commit_request_id: None,
                payer: None,
            } => Ok(ledger::FxLink::Conversion(ledger::ConversionTerms {
                determining_transfer_id,
                target_currency,
                target_amount,
            })),
            FxColumns {
                determining_transfer_id: None,
                target_currency: None,
                target_amount: None,
                commit_request_id: Some(commit_request_id),
                payer: Some(payer),
            } => Ok(ledger::FxLink::Dependent {
                commit_request_id,
                payer,
            }),
            other => Err(StoreError::fatal(format!(
                "the FX row of seq {seq} is neither a conversion's terms nor a dependent \
                 transfer's link: {other:?}"
            ))),
        }
    }
}

/// A participant's mode as both backends store it: `is_active` keeps
/// central-ledger's meaning (false only when suspended), and `mode` says
/// which of the active modes (`active`, `send-only`, `receive-only`), or
/// `suspended`. A row written before the column (NULL, or a store read
/// as it is below the version that added it) is what its `is_active` says.
/// The columns of a `pending_changes` row, in table order (both backends).
pub(crate) const PENDING_CHANGE_COLUMNS: &str = "id, action, target, method, path, body, maker, \
     maker_role, maker_source, reason, created_at_ms, expires_at_ms, state, checker, checker_role, \
     decision_reason, decided_at_ms";

pub(crate) fn participant_mode(
    is_active: bool,
    mode: Option<&str>,
) -> Result<ledger::ParticipantMode, StoreError> {
    match mode {
        None => Ok(ledger::ParticipantMode::from_active(is_active)),
        Some(text) => ledger::ParticipantMode::parse(text).ok_or_else(|| {
            StoreError::fatal(format!("bad participant mode {text:?} in the store"))
        }),
    }
}

/// An FXP's corridors as both backends store them: `SOURCE>TARGET`
/// pairs, comma-separated, in the ledger's order (sorted, no repeats).
pub(crate) fn corridors_text(corridors: &[ledger::Corridor]) -> String {
    let pairs: Vec<String> = corridors
        .iter()
        .map(|corridor| format!("{}>{}", corridor.source, corridor.target))
        .collect();
    pairs.join(",")
}

/// [`corridors_text`] read back.
pub(crate) fn parse_corridors(text: &str) -> Result<Vec<ledger::Corridor>, StoreError> {
    let bad = || StoreError::fatal(format!("bad FXP corridors {text:?} in the store"));
    text.split(',')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (source, target) = pair.split_once('>').ok_or_else(bad)?;
            Ok(ledger::Corridor {
                source: ledger::Currency::parse(source).ok_or_else(bad)?,
                target: ledger::Currency::parse(target).ok_or_else(bad)?,
            })
        })
        .collect()
}

/// A settlement's window ids as stored: comma-separated, as asked.
pub(crate) fn window_list(windows: &str) -> Result<Vec<u32>, StoreError> {
    windows
        .split(',')
        .filter(|w| !w.is_empty())
        .map(|w| {
            w.parse()
                .map_err(|_| StoreError::fatal(format!("bad settlement window list {windows:?}")))
        })
        .collect()
}

/// The loaded settlement with this id (settlements load in id order, ids
/// from 1), for its accounts to join.
pub(crate) fn settlement_of(
    snapshot: &mut ledger::Snapshot,
    settlement: u32,
) -> Result<&mut ledger::SettlementRow, StoreError> {
    snapshot
        .settlements
        .get_mut((settlement as usize).wrapping_sub(1))
        .filter(|s| s.id == settlement)
        .ok_or_else(|| {
            StoreError::fatal(format!(
                "settlement account of missing settlement {settlement}"
            ))
        })
}

/// Where a hub's store is, as `--store` names it: `sqlite:DIR` (a data
/// directory) or a PostgreSQL URL (`postgres://USER@HOST[,HOST2]/DB`, any
/// of libpq's URL parameters).
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl StoreLocation {
    /// `--store`'s value, if given, parsed by the commands rather than by
    /// clap, whose refusal would print the value as given: a password in it
    /// included. The error names the flag (`--store: …`).
    pub fn from_flag(text: Option<&str>) -> Result<Option<StoreLocation>, String> {
        text.map(|text| {
            text.parse::<StoreLocation>()
                .map_err(|error| format!("--store: {error}"))
        })
        .transpose()
    }
}

impl std::str::FromStr for StoreLocation {
    type Err = String;

    fn from_str(text: &str) -> Result<StoreLocation, String> {
        if let Some(dir) = text.strip_prefix("sqlite:") {
            if dir.is_empty() {
                return Err("sqlite: needs a directory (sqlite:/var/lib/kasi)".into());
            }
            return Ok(StoreLocation::Sqlite(dir.into()));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(StoreLocation::Postgres(text.to_string()));
        }
        Err(format!(
            "{:?} is not a store: use sqlite:DIR or postgres://USER@HOST/DATABASE",
            pg::redact_url(text)
        ))
    }
}

/// Passwords redacted.
impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sqlite(dir) => write!(f, "sqlite:{}", dir.display()),
            StoreLocation::Postgres(url) => f.write_str(&pg::redact_url(url)),
        }
    }
}

impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
