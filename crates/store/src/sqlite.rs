//! The embedded store: one SQLite database in WAL mode in the data directory.

use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ledger::{
    AbortCause, AccountId, AccountKind, AccountRow, Amount, Condition, ConversionFulfilRow,
    Currency, EndpointRow, ErrorCode, FinishKind, FinishRow, FspName, Fulfilment, FundsMemo,
    Lookup, OracleRow, ParticipantId, ParticipantRow, PartyKey, PartyRow, PrefetchIds, Prefetched,
    ProxyMapRow, QuoteAnswer, QuoteRow, Record, RequestHash, SettlementModelRow, Snapshot,
    TransferId, TransferKind, TransferRow, TransferState,
};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Row};

use crate::history::{
    self, HistoryCheck, HistoryOptions, HistorySnapshot, HistorySource as _, Snapshotter,
};
use crate::search::{self, AccountOwners, PassClock, SearchColumns, SearchPage, TransferQuery};
use crate::sqlite_history;
use crate::sqlite_settlement::SettlementStatements;
use crate::Prefetch;
use crate::{Store, StoreError, StoreReader, StoredTransfer, Touched};

/// The database file inside the data directory.
pub const DATABASE_FILE: &str = "kasi.db";
/// Held (flock) by the one process that may write the data directory.
pub const LOCK_FILE: &str = "kasi.lock";
/// Version 2 added `transfers.wire_version`, the models' rules, the
/// finishes' settlement window, and settlement's tables; version 3 the
/// admin API's `audit_events` and `certificate_pins`; version 4
/// `accounts.changed_at_ms`; version 5 the finishes' `cause` (why the hub
/// aborted a transfer on the payee's message); version 6 FX (`transfer_fx`,
/// `conversion_fulfils`, `fxps`), and `transfers_funds` no longer counts
/// conversions as funds movements; version 7 the participants' `mode`
/// (pausing a DFSP: `ledger::ParticipantMode`); version 8 the four-eyes
/// `pending_changes`; version 9 `audit_events.source` (how the actor
/// signed in); version 10 the transfers' search columns (`payer_id`,
/// `payee_id`, `currency`, `amount_units`: `crate::search`) and their
/// indexes; version 11 the transfers' parties (`payer_party`,
/// `payee_party`) and the search keys (`transfer_keys`, `search_index`);
/// version 12 the change feed's `changes` and `feed_cursors`
/// (`sqlite_feed.rs`); version 13 the hourly rollup's `rollup_pairs`,
/// `rollup_errors`, `rollup_latency` (`crate::rollup`); version 14 the
/// party index's `party_blocks` and `party_index` (`crate::party_index`);
/// version 15 the commit index's `commit_spans` and `commit_index`
/// (`crate::commit_index`); version 16 the participants' `is_proxy` and
/// the `proxy_map` (inter-scheme: `ledger::ProxyMapRow`).
const SCHEMA_VERSION: i64 = PROXY_SINCE;
/// The version from which participants have `is_proxy` and the store
/// holds the proxy map.
const PROXY_SINCE: i64 = crate::sqlite_feed::ROLLUP_SINCE + 3;
/// The version from which audit events say how their actor signed in.
const AUDIT_SOURCE_SINCE: i64 = 9;
/// The version from which a store holds four-eyes pending changes.
const PENDING_SINCE: i64 = 8;
/// The version from which participants have a `mode` column.
const MODE_SINCE: i64 = 7;
/// The version from which a store holds FX rows (a store read as it is
/// by `kasi audit` may predate them: it has none).
const FX_SINCE: i64 = 6;
/// The oldest version this kasi migrates (on a writable open) or reads.
const OLDEST_SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS participants (
    id            INTEGER PRIMARY KEY,
    name          TEXT    NOT NULL UNIQUE,
    is_hub        INTEGER NOT NULL,
    is_active     INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    mode          TEXT,
    is_proxy      INTEGER NOT NULL DEFAULT 0
) STRICT;
-- The proxy map (ledger::ProxyMapRow): a DFSP of another scheme and the
-- proxy participant it is reached through.
CREATE TABLE IF NOT EXISTS proxy_map (
    dfsp        TEXT    PRIMARY KEY,
    proxy_id    INTEGER NOT NULL,
    by_operator INTEGER NOT NULL,
    since_ms    INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS accounts (
    id             INTEGER PRIMARY KEY,
    participant_id INTEGER NOT NULL,
    currency       TEXT    NOT NULL,
    kind           TEXT    NOT NULL,
    is_active      INTEGER NOT NULL,
    value          TEXT    NOT NULL,
    reserved       TEXT    NOT NULL,
    net_debit_cap  TEXT,
    created_at_ms  INTEGER NOT NULL,
    changed_at_ms  INTEGER
) STRICT;
CREATE TABLE IF NOT EXISTS transfers (
    seq                INTEGER PRIMARY KEY,
    transfer_id        BLOB    NOT NULL,
    kind               TEXT    NOT NULL,
    debit_account_id   INTEGER NOT NULL,
    credit_account_id  INTEGER NOT NULL,
    amount             TEXT    NOT NULL,
    condition          BLOB,
    expiration_ms      INTEGER,
    prepared_at_ms     INTEGER NOT NULL,
    request_hash       BLOB    NOT NULL,
    state              TEXT    NOT NULL,
    reason             INTEGER,
    external_reference TEXT,
    memo               TEXT,
    wire_version       INTEGER NOT NULL DEFAULT 0,
    payer_id           INTEGER,
    payee_id           INTEGER,
    currency           TEXT,
    amount_units       INTEGER,
    payer_party        TEXT,     -- as the prepare's ILP packet names them
    payee_party        TEXT
) STRICT;
CREATE TABLE IF NOT EXISTS endpoints (
    participant_id INTEGER NOT NULL,
    type           TEXT    NOT NULL,
    value          TEXT    NOT NULL,
    PRIMARY KEY (participant_id, type)
) STRICT;
CREATE TABLE IF NOT EXISTS settlement_models (
    id                      INTEGER PRIMARY KEY,
    name                    TEXT    NOT NULL UNIQUE,
    definition              TEXT    NOT NULL,
    -- The rules; NULL granularity: a definition kasi could not read.
    granularity             TEXT,
    interchange             TEXT,
    delay                   TEXT,
    currency                TEXT,
    ledger_account_type     TEXT,
    settlement_account_type TEXT,
    auto_position_reset     INTEGER,
    require_liquidity_check INTEGER
) STRICT;
CREATE TABLE IF NOT EXISTS parties (
    id_type          TEXT    NOT NULL,
    identifier       TEXT    NOT NULL,
    sub_id           TEXT    NOT NULL,  -- '' when the party has none
    participant_id   INTEGER NOT NULL,
    currency         TEXT,
    registered_at_ms INTEGER NOT NULL,
    PRIMARY KEY (id_type, identifier, sub_id)
) STRICT;
CREATE TABLE IF NOT EXISTS quotes (
    quote_id        BLOB    PRIMARY KEY,
    payer_id        INTEGER NOT NULL,
    payee_id        INTEGER NOT NULL,
    request_hash    BLOB    NOT NULL,
    received_at_ms  INTEGER NOT NULL,
    answer_hash     BLOB,
    answer_is_error INTEGER,
    answer_body     TEXT,
    answered_at_ms  INTEGER
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS oracles (
    id         INTEGER PRIMARY KEY,
    id_type    TEXT    NOT NULL,
    endpoint   TEXT    NOT NULL,
    currency   TEXT,
    is_default INTEGER NOT NULL,
    is_active  INTEGER NOT NULL   -- 0 once deleted; the id is never reused
) STRICT;
CREATE TABLE IF NOT EXISTS transfer_finishes (
    seq               INTEGER PRIMARY KEY,
    kind              TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    reason            INTEGER,
    finished_at_ms    INTEGER NOT NULL,
    request_hash      BLOB    NOT NULL,
    fulfilment        BLOB,
    settlement_window INTEGER,
    cause             TEXT
) STRICT;
CREATE TABLE IF NOT EXISTS settlement_windows (
    id            INTEGER PRIMARY KEY,
    state         TEXT    NOT NULL,
    reason        TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    changed_at_ms INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS settlement_content (
    id                  INTEGER PRIMARY KEY,
    window_id           INTEGER NOT NULL,
    ledger_account_type TEXT    NOT NULL,
    currency            TEXT    NOT NULL,
    model_id            INTEGER NOT NULL,
    state               TEXT    NOT NULL,
    settlement_id       INTEGER,
    created_at_ms       INTEGER NOT NULL,
    changed_at_ms       INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS settlement_content_accounts (
    content_id     INTEGER NOT NULL,
    account_id     INTEGER NOT NULL,
    sent           TEXT    NOT NULL,
    sent_count     INTEGER NOT NULL,
    received       TEXT    NOT NULL,
    received_count INTEGER NOT NULL,
    PRIMARY KEY (content_id, account_id)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS settlement_content_pairs (
    content_id INTEGER NOT NULL,
    payer_id   INTEGER NOT NULL,
    payee_id   INTEGER NOT NULL,
    amount     TEXT    NOT NULL,
    count      INTEGER NOT NULL,
    PRIMARY KEY (content_id, payer_id, payee_id)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS settlements (
    id                 INTEGER PRIMARY KEY,
    model_id           INTEGER NOT NULL,
    state              TEXT    NOT NULL,
    reason             TEXT    NOT NULL,
    external_reference TEXT,
    created_at_ms      INTEGER NOT NULL,
    changed_at_ms      INTEGER NOT NULL,
    windows            TEXT    NOT NULL   -- window ids, comma-separated, as asked
) STRICT;
CREATE TABLE IF NOT EXISTS settlement_accounts (
    settlement_id      INTEGER NOT NULL,
    account_id         INTEGER NOT NULL,
    participant_id     INTEGER NOT NULL,
    currency           TEXT    NOT NULL,
    net                TEXT    NOT NULL,
    state              TEXT    NOT NULL,
    reason             TEXT    NOT NULL,
    external_reference TEXT,
    changed_at_ms      INTEGER NOT NULL,
    PRIMARY KEY (settlement_id, account_id)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS settlement_entries (
    seq               INTEGER PRIMARY KEY,
    kind              TEXT    NOT NULL,
    debit_account_id  INTEGER NOT NULL,
    credit_account_id INTEGER NOT NULL,
    amount            TEXT    NOT NULL,
    at_ms             INTEGER NOT NULL,
    settlement_id     INTEGER,
    transfer_id       BLOB
) STRICT;
CREATE TABLE IF NOT EXISTS audit_events (
    id         INTEGER PRIMARY KEY,
    at_ms      INTEGER NOT NULL,
    actor      TEXT    NOT NULL,
    role       TEXT    NOT NULL,
    action     TEXT    NOT NULL,
    target     TEXT    NOT NULL,
    before     TEXT    NOT NULL,
    after      TEXT    NOT NULL,
    outcome    TEXT    NOT NULL,
    source     TEXT
) STRICT;
CREATE INDEX IF NOT EXISTS audit_events_by_target ON audit_events (target, id);
CREATE INDEX IF NOT EXISTS transfers_by_id ON transfers (transfer_id);
CREATE TABLE IF NOT EXISTS certificate_pins (
    fingerprint    BLOB    PRIMARY KEY,
    participant_id INTEGER NOT NULL,
    pinned_at_ms   INTEGER NOT NULL
) STRICT;
-- One row per FX transfer, written with its transfers row, never updated:
-- a conversion's terms, or the link of the transfer a conversion depends on.
CREATE TABLE IF NOT EXISTS transfer_fx (
    seq                     INTEGER PRIMARY KEY,
    determining_transfer_id BLOB,
    target_currency         TEXT,
    target_amount           TEXT,
    commit_request_id       BLOB,
    payer_id                INTEGER  -- the dependent transfer's FSPIOP payer
) STRICT;
-- The FXP's acceptance of a conversion (one insert; the conversion stays
-- RESERVED until it finishes with its dependent transfer).
CREATE TABLE IF NOT EXISTS conversion_fulfils (
    seq          INTEGER PRIMARY KEY,
    fulfilment   BLOB    NOT NULL,
    request_hash BLOB    NOT NULL,
    at_ms        INTEGER NOT NULL
) STRICT;
-- Declared FXPs; a withdrawn one (no corridors) has no row.
CREATE TABLE IF NOT EXISTS fxps (
    participant_id INTEGER PRIMARY KEY,
    corridors      TEXT    NOT NULL  -- SOURCE>TARGET pairs, comma-separated, sorted
) STRICT;
-- Four-eyes pending changes (ledger::PendingChangeRow), requested and
-- decided: an upsert of the whole row at each step.
CREATE TABLE IF NOT EXISTS pending_changes (
    id              TEXT    PRIMARY KEY,
    action          TEXT    NOT NULL,
    target          TEXT    NOT NULL,
    method          TEXT    NOT NULL,
    path            TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    maker           TEXT    NOT NULL,
    maker_role      TEXT    NOT NULL,
    maker_source    TEXT    NOT NULL,
    reason          TEXT    NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL,
    state           TEXT    NOT NULL,
    checker         TEXT    NOT NULL,
    checker_role    TEXT    NOT NULL,
    decision_reason TEXT    NOT NULL,
    decided_at_ms   INTEGER NOT NULL
) STRICT;
-- Search keys (store::search): each transfer's payer ('p:ID') and payee
-- ('q:ID'), filed by the writer's pass every 250 ms for the transfers
-- committed since (through search_index's seq);
-- a failure's error code ('e:CODE') and final state ('s:STATE'), and a
-- commit's settlement window ('w:ID'), in its own commit.
CREATE TABLE IF NOT EXISTS transfer_keys (
    key TEXT    NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (key, seq)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS search_index (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    through_seq INTEGER NOT NULL
) STRICT;
-- The latest conversion for a prepare's id (the prefetch's), once the
-- conversion left memory.
CREATE INDEX IF NOT EXISTS transfer_fx_by_determining ON transfer_fx (determining_transfer_id, seq)
    WHERE determining_transfer_id IS NOT NULL;
";

/// Version 3 → 4: when each account's balance last changed (the
/// position's `changedDate`); NULL in rows kept before, read as the
/// account's creation.
const MIGRATE_3_TO_4: &str = "ALTER TABLE accounts ADD COLUMN changed_at_ms INTEGER;";

/// Version 1 → 2: new columns (the new tables are created by [`SCHEMA`]);
/// models stored before kasi read them get their rules from their JSON.
const MIGRATE_1_TO_2: &str = "
ALTER TABLE transfers ADD COLUMN wire_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE transfer_finishes ADD COLUMN settlement_window INTEGER;
ALTER TABLE settlement_models ADD COLUMN granularity TEXT;
ALTER TABLE settlement_models ADD COLUMN interchange TEXT;
ALTER TABLE settlement_models ADD COLUMN delay TEXT;
ALTER TABLE settlement_models ADD COLUMN currency TEXT;
ALTER TABLE settlement_models ADD COLUMN ledger_account_type TEXT;
ALTER TABLE settlement_models ADD COLUMN settlement_account_type TEXT;
ALTER TABLE settlement_models ADD COLUMN auto_position_reset INTEGER;
ALTER TABLE settlement_models ADD COLUMN require_liquidity_check INTEGER;
UPDATE settlement_models SET
    granularity = json_extract(definition, '$.settlementGranularity'),
    interchange = json_extract(definition, '$.settlementInterchange'),
    delay = json_extract(definition, '$.settlementDelay'),
    currency = json_extract(definition, '$.currency'),
    ledger_account_type = json_extract(definition, '$.ledgerAccountType'),
    settlement_account_type = coalesce(json_extract(definition, '$.settlementAccountType'), 'SETTLEMENT'),
    auto_position_reset = coalesce(json_extract(definition, '$.autoPositionReset'), 0) != 0,
    require_liquidity_check = coalesce(json_extract(definition, '$.requireLiquidityCheck'), 0) != 0
 WHERE json_valid(definition);
";

/// Version 4 → 5: why the hub aborted a transfer (`ledger::AbortCause`);
/// before it, a fulfil's abort with 3100 could only be an invalid
/// fulfilment.
const MIGRATE_4_TO_5: &str = "
ALTER TABLE transfer_finishes ADD COLUMN cause TEXT;
UPDATE transfer_finishes SET cause = 'INVALID_FULFILMENT'
 WHERE kind = 'FULFIL' AND state = 'ABORTED' AND reason = 3100;
";

/// Version 6 → 7: a participant's mode (NULL in rows kept before, read
/// as their `is_active` says: `active` or `suspended`).
const MIGRATE_6_TO_7: &str = "ALTER TABLE participants ADD COLUMN mode TEXT;";

/// Version 8 → 9: audit events say how their actor signed in (NULL for
/// the events before).
const MIGRATE_8_TO_9: &str = "ALTER TABLE audit_events ADD COLUMN source TEXT;";

/// Version 9 → 10: the transfers' search columns, filled for the rows
/// kept before by [`fill_search_columns`] (one code path with the
/// writer's). No index on them: one per commit costs the transfer path
/// too much (`crate::search`).
const MIGRATE_9_TO_10: &str = "ALTER TABLE transfers ADD COLUMN payer_id INTEGER;
ALTER TABLE transfers ADD COLUMN payee_id INTEGER;
ALTER TABLE transfers ADD COLUMN currency TEXT;
ALTER TABLE transfers ADD COLUMN amount_units INTEGER;";

/// Version 10 → 11: the transfers' party columns (none for the rows kept
/// before: their ILP packets were not kept); `transfer_keys` is created
/// by [`SCHEMA`]; the keys
/// of the failures and commits kept before are filed here (a commit's
/// window; those of every transfer by the writer's passes,
/// [`search::SearchPass`]).
const MIGRATE_10_TO_11: &str = "INSERT OR IGNORE INTO transfer_keys (key, seq)
    SELECT 's:' || COALESCE(f.state, t.state), t.seq FROM transfers t
    LEFT JOIN transfer_finishes f ON f.seq = t.seq
    WHERE COALESCE(f.state, t.state) NOT IN ('COMMITTED', 'RESERVED');
INSERT OR IGNORE INTO transfer_keys (key, seq)
    SELECT 'e:' || COALESCE(f.reason, t.reason), t.seq FROM transfers t
    LEFT JOIN transfer_finishes f ON f.seq = t.seq
    WHERE COALESCE(f.reason, t.reason) IS NOT NULL;
INSERT OR IGNORE INTO transfer_keys (key, seq)
    SELECT 'w:' || settlement_window, seq FROM transfer_finishes WHERE settlement_window IS NOT NULL;";

/// Version 5 → 6: the FX tables are created by [`SCHEMA`]; the funds
/// movements' index is built again without conversions (its old predicate,
/// `kind <> 'TRANSFER'`, would count them as funds movements), by
/// `sqlite_history::SCHEMA` right after.
const MIGRATE_5_TO_6: &str = "DROP INDEX IF EXISTS transfers_funds;";

/// The `transfer_finishes` columns [`finish_row`] reads, each prefixed with
/// `prefix` (a table alias and its dot, or nothing), for a store of
/// `version`: a column it predates reads as NULL, except `cause`, which
/// reads as [`MIGRATE_4_TO_5`] fills it in, so that a store read as it is
/// (`kasi audit`, `kasi migrate-store`) says what it would once migrated.
pub(crate) fn finish_columns(version: i64, prefix: &str) -> String {
    let settlement_window = match version >= 2 {
        true => format!("{prefix}settlement_window"),
        false => "NULL".to_owned(),
    };
    let cause = match version >= 5 {
        true => format!("{prefix}cause"),
        false => format!(
            "CASE WHEN {prefix}kind = 'FULFIL' AND {prefix}state = 'ABORTED' AND {prefix}reason = 3100 \
             THEN 'INVALID_FULFILMENT' END"
        ),
    };
    format!(
        "{prefix}seq, {prefix}kind, {prefix}state, {prefix}reason, {prefix}finished_at_ms, \
         {prefix}request_hash, {prefix}fulfilment, {settlement_window}, {cause}"
    )
}

/// How the store makes commits durable.
#[derive(Clone, Copy, Debug)]
pub struct SqliteOptions {
    /// `true`: every commit is fsync'd before it returns (`synchronous=FULL`).
    /// `false` is for benchmarks only: a crash may lose acknowledged work.
    pub fsync: bool,
    /// Keep a history snapshot (see [`crate::sqlite_history`]) so that
    /// recovery with a retention horizon reads only recent transfers.
    pub history: Option<HistoryOptions>,
    /// How often the writer files transfers for search.
    pub search_pass: search::SearchPass,
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            fsync: true,
            history: None,
            search_pass: search::SearchPass::default(),
        }
    }
}

/// Records written between two background checkpoints.
const CHECKPOINT_EVERY_RECORDS: usize = 8_192;

/// Prepared statements the writer keeps. A commit prepares one statement
/// per kind of row it may write (twenty with settlement's, more with the
/// history snapshot's); rusqlite's default of 16 made every commit parse
/// and plan them all again (the LRU cache evicted each before its next
/// use: 2.7 % of the hub's CPU under transfer load).
const WRITER_STATEMENT_CACHE: usize = 128;

/// A statement of the writer's, taken from the cache on its first use in a
/// commit. Most commits hold a few kinds of records (a prepare, a finish,
/// accounts), and each statement taken from the cache costs whether used
/// or not (its key allocated, then a reset and its bindings cleared when
/// it goes back): ~13 per commit were, a twentieth of the instructions of
/// a transfer at light load (callgrind, BENCHMARKS.md).
struct Lazy<'t> {
    transaction: &'t rusqlite::Connection,
    sql: &'static str,
    statement: Option<rusqlite::CachedStatement<'t>>,
}

impl<'t> Lazy<'t> {
    fn new(transaction: &'t rusqlite::Connection, sql: &'static str) -> Lazy<'t> {
        Lazy {
            transaction,
            sql,
            statement: None,
        }
    }

    fn execute<P: rusqlite::Params>(&mut self, params: P) -> rusqlite::Result<usize> {
        let statement = match &mut self.statement {
            Some(statement) => statement,
            None => self
                .statement
                .insert(self.transaction.prepare_cached(self.sql)?),
        };
        statement.execute(params)
    }
}

/// How long the writer's own statements wait for a lock (SQLite's busy
/// handler); the WAL restart does not wait at all.
const WRITER_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the writer tries again for a lock another connection holds.
const WRITER_BUSY_RETRY: Duration = Duration::from_micros(100);

/// The writer's busy handler. The hub's followers (the rollup's fold, the
/// party index's filing, the feed's retention) each take SQLite's write
/// lock for a millisecond or two between the writer's commits. SQLite's
/// own handler (`busy_timeout`) sleeps 1, 2, 5, 10, 15 … ms between tries,
/// so the writer — and every transfer behind it — slept up to 15 ms for a
/// lock free after 2 (measured at 5,000 transfers/s: 15 such sleeps, 64 ms
/// in 8 s, and the closed loop's throughput down by a tenth). This one
/// tries every 100 µs, for as long as [`WRITER_BUSY_TIMEOUT`].
fn writer_busy(tries: i32) -> bool {
    let waited = WRITER_BUSY_RETRY.saturating_mul(u32::try_from(tries).unwrap_or(u32::MAX));
    if waited >= WRITER_BUSY_TIMEOUT {
        return false;
    }
    std::thread::sleep(WRITER_BUSY_RETRY);
    true
}

/// After a reset, a WAL longer than this is truncated to it: the disk space
/// a store keeps beside its database.
const WAL_SIZE_LIMIT_BYTES: i64 = 64 * 1024 * 1024;

pub struct SqliteStore {
    connection: Connection,
    path: PathBuf,
    checkpointer: Option<Checkpointer>,
    records_since_checkpoint: usize,
    wal_restarts: u64,
    restart_error_logged: bool,
    history: Option<Snapshotter>,
    /// The kept list of the history snapshot last written, if known.
    history_kept_written: Option<Vec<u64>>,
    /// Whether the last recovery read started from a history snapshot,
    /// and through which seq it summed.
    loaded_history_through: Option<u64>,
    /// Keeps the data directory's write lock for the store's lifetime.
    _lock: Option<File>,
    text: String,
    /// Whose each account is, for the transfers' search columns (empty
    /// when opened read-only).
    owners: AccountOwners,
    /// When the writer files the committed transfers' search keys next.
    pass: PassClock,
    /// The change feed's writer state (`feed.rs`): `None` until the first
    /// commit reads it, and again after a commit that failed.
    feed: Option<crate::feed::FeedState>,
    feed_listener: Option<crate::feed::FeedListener>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `data_dir` for writing. Only
    /// one process may do so at a time: a second one is refused.
    pub fn open(data_dir: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|e| {
            StoreError::fatal(format!(
                "cannot create data directory {}: {e}",
                data_dir.display()
            ))
        })?;
        let lock = lock_data_dir(data_dir).map_err(|(lock_path, error)| match error {
            None => StoreError::fatal(format!(
                "{} is in use by another kasi process (lock {})",
                data_dir.display(),
                lock_path.display()
            )),
            Some(error) => error,
        })?;
        let path = data_dir.join(DATABASE_FILE);
        let mut connection = Connection::open(&path)?;
        connection.busy_handler(Some(writer_busy))?;
        connection.set_prepared_statement_cache_capacity(WRITER_STATEMENT_CACHE);
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(
            None,
            "synchronous",
            if options.fsync { "FULL" } else { "OFF" },
        )?;
        connection.pragma_update(None, "cache_size", -65536)?;
        connection.pragma_update(None, "temp_store", "MEMORY")?;
        // Checkpoints (copying the WAL into the database, with an fsync) run
        // on their own thread and connection, never inside a commit: a commit
        // waits only for its own WAL append.
        connection.pragma_update(None, "wal_autocheckpoint", 0)?;
        connection.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT_BYTES)?;
        let version: i64 = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
        match version {
            0 => {
                connection.execute_batch(SCHEMA)?;
                connection.pragma_update(None, "user_version", SCHEMA_VERSION)?;
            }
            // Tables added within a version are created on open.
            SCHEMA_VERSION => connection.execute_batch(SCHEMA)?,
            // Version 11 → 12 only adds the change feed's tables, 12 → 13
            // the rollup's, 13 → 14 the party index's and 14 → 15 the
            // commit index's, which are created below; 15 → 16 a column
            // and the proxy map.
            11..=15 => {
                let migration = connection.transaction()?;
                add_proxy_column(&migration)?;
                migration.execute_batch(SCHEMA)?;
                migration.pragma_update(None, "user_version", SCHEMA_VERSION)?;
                migration.commit()?;
            }
            // Version 2 → 3 and 7 → 8 only add tables, which SCHEMA creates.
            1..=10 => {
                let migration = connection.transaction()?;
                if version == 1 {
                    migration.execute_batch(MIGRATE_1_TO_2)?;
                }
                // Before SCHEMA, whose participants table has the column.
                if !has_column(&migration, "participants", "mode")? {
                    migration.execute_batch(MIGRATE_6_TO_7)?;
                }
                if !has_column(&migration, "accounts", "changed_at_ms")? {
                    migration.execute_batch(MIGRATE_3_TO_4)?;
                }
                migration.execute_batch(SCHEMA)?;
                add_proxy_column(&migration)?;
                if !has_column(&migration, "transfer_finishes", "cause")? {
                    migration.execute_batch(MIGRATE_4_TO_5)?;
                }
                if version < 7 {
                    migration.execute_batch(MIGRATE_5_TO_6)?;
                }
                // After SCHEMA, which creates the table (with the column)
                // in a store older than version 3.
                if !has_column(&migration, "audit_events", "source")? {
                    migration.execute_batch(MIGRATE_8_TO_9)?;
                }
                if !has_column(&migration, "transfers", "payer_id")? {
                    migration.execute_batch(MIGRATE_9_TO_10)?;
                }
                if !has_column(&migration, "transfers", "payer_party")? {
                    migration.execute_batch(
                        "ALTER TABLE transfers ADD COLUMN payer_party TEXT;
                         ALTER TABLE transfers ADD COLUMN payee_party TEXT;",
                    )?;
                }
                // Also for a store made by SCHEMA above (older than version
                // 2 has no transfers to fill: nothing to do then).
                fill_search_columns(&migration)?;
                // The keys filed in the commit (failures, windows); the
                // others are filed by the writer's passes from seq 0 on.
                migration.execute_batch(MIGRATE_10_TO_11)?;
                migration.pragma_update(None, "user_version", SCHEMA_VERSION)?;
                migration.commit()?;
            }
            other => return Err(newer_schema(&path, other)),
        }
        // Within version 3: the history snapshot's tables and the indexes
        // recovery reads it with (built once on a store that predates them,
        // and `transfers_funds` again after the migration to version 6).
        connection.execute_batch(sqlite_history::SCHEMA)?;
        connection.execute_batch(crate::sqlite_feed::SCHEMA)?;
        connection.execute_batch(crate::party_index::SQLITE_SCHEMA)?;
        connection.execute_batch(crate::commit_index::SQLITE_SCHEMA)?;
        let owners = account_owners(&connection)?;
        let pass = PassClock::new(
            options.search_pass,
            connection.query_row(
                "SELECT COALESCE(MAX(through_seq), 0) FROM search_index",
                [],
                |row| row.get::<_, i64>(0),
            )? as u64,
            connection.query_row("SELECT COALESCE(MAX(seq), 0) FROM transfers", [], |row| {
                row.get::<_, i64>(0)
            })? as u64,
        );
        let checkpointer = Checkpointer::start(&path)?;
        let history = match options.history {
            Some(history) => Some(Snapshotter::start(
                sqlite_history::Reader::open(&path)?,
                history,
            )?),
            None => None,
        };
        Ok(SqliteStore {
            connection,
            path,
            checkpointer: Some(checkpointer),
            records_since_checkpoint: 0,
            wal_restarts: 0,
            restart_error_logged: false,
            history,
            history_kept_written: None,
            loaded_history_through: None,
            _lock: Some(lock),
            text: String::new(),
            owners,
            pass,
            feed: None,
            feed_listener: None,
        })
    }

    /// See [`StoreReader::transfers_touched_since`].
    pub fn transfers_touched_since(&self, since_ms: i64) -> Result<Vec<Touched>, StoreError> {
        touched_since(&self.connection, since_ms)
    }

    /// Opens an existing store read-only (for `kasi audit`), without taking
    /// the write lock: a running hub may keep writing meanwhile.
    pub fn open_read_only(data_dir: &Path) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_file_read_only(&data_dir.join(DATABASE_FILE))
    }

    /// Opens a store file read-only: a data directory's `kasi.db`, or a
    /// copy made by [`SqliteStore::backup`]. On read-only media (a mounted
    /// backup, a directory the auditor may not write) where SQLite cannot
    /// open its shared-memory file, the file is read as immutable, which is
    /// exact for a backup (one self-contained file) and for a stopped hub
    /// whose write-ahead log is empty.
    pub fn open_file_read_only(path: &Path) -> Result<SqliteStore, StoreError> {
        if !path.exists() {
            return Err(StoreError::fatal(format!(
                "no kasi store at {}",
                path.display()
            )));
        }
        let connection = match Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|connection| {
                // Opening is lazy: reading the schema version is what
                // touches the write-ahead log's shared memory.
                connection
                    .pragma_query_value(None, "user_version", |row| row.get::<_, i64>(0))
                    .map(|_| connection)
            }) {
            Ok(connection) => connection,
            Err(error) => {
                let wal = path.with_extension("db-wal");
                if std::fs::metadata(&wal).is_ok_and(|wal| wal.len() > 0) {
                    return Err(StoreError::fatal(format!(
                        "cannot read {} ({error}), and its write-ahead log is not empty: \
                         audit it where it can be opened for reading, or audit a backup (kasi backup)",
                        path.display()
                    )));
                }
                let uri = format!(
                    "file:{}?immutable=1",
                    path.display()
                        .to_string()
                        .replace('?', "%3f")
                        .replace('#', "%23")
                );
                Connection::open_with_flags(
                    uri,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
                )?
            }
        };
        let path = path.to_path_buf();
        let version: i64 = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
        if !(OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).contains(&version) {
            return Err(newer_schema(&path, version));
        }
        Ok(SqliteStore {
            connection,
            path,
            checkpointer: None,
            records_since_checkpoint: 0,
            wal_restarts: 0,
            restart_error_logged: false,
            history: None,
            history_kept_written: None,
            loaded_history_through: None,
            _lock: None,
            text: String::new(),
            owners: AccountOwners::default(),
            // Never writes.
            pass: PassClock::new(search::SearchPass::default(), 0, 0),
            feed: None,
            feed_listener: None,
        })
    }

    fn write(&mut self, batches: &[&[Record]]) -> Result<(), StoreError> {
        let transaction = self.connection.transaction()?;
        let mut last_seq = 0;
        {
            let mut participant = Lazy::new(
                &transaction,
                "INSERT INTO participants (id, name, is_hub, is_active, created_at_ms, mode, is_proxy)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (id) DO UPDATE SET is_active = excluded.is_active, mode = excluded.mode",
            );
            let mut proxy_mapping = Lazy::new(
                &transaction,
                "INSERT INTO proxy_map (dfsp, proxy_id, by_operator, since_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (dfsp) DO UPDATE SET proxy_id = excluded.proxy_id,
                    by_operator = excluded.by_operator, since_ms = excluded.since_ms",
            );
            let mut proxy_unmapped =
                Lazy::new(&transaction, "DELETE FROM proxy_map WHERE dfsp = ?1");
            let mut account = Lazy::new(
                &transaction,
                "INSERT INTO accounts (id, participant_id, currency, kind, is_active, value, reserved, net_debit_cap, created_at_ms,
                    changed_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                 ON CONFLICT (id) DO UPDATE SET is_active = excluded.is_active, value = excluded.value,
                    reserved = excluded.reserved, net_debit_cap = excluded.net_debit_cap,
                    changed_at_ms = excluded.changed_at_ms",
            );
            let mut transfer = Lazy::new(
                &transaction,
                "INSERT INTO transfers (seq, transfer_id, kind, debit_account_id, credit_account_id, amount, condition,
                    expiration_ms, prepared_at_ms, request_hash, state, reason, external_reference, memo, wire_version,
                    payer_id, payee_id, currency, amount_units, payer_party, payee_party)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
            );
            let mut transfer_fx = Lazy::new(
                &transaction,
                "INSERT INTO transfer_fx (seq, determining_transfer_id, target_currency, target_amount,
                    commit_request_id, payer_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            );
            let mut finish = Lazy::new(
                &transaction,
                "INSERT INTO transfer_finishes (seq, kind, state, reason, finished_at_ms, request_hash, fulfilment,
                    settlement_window, cause)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            );
            let mut endpoint = Lazy::new(
                &transaction,
                "INSERT INTO endpoints (participant_id, type, value) VALUES (?1, ?2, ?3)
                 ON CONFLICT (participant_id, type) DO UPDATE SET value = excluded.value",
            );
            let mut settlement_model = Lazy::new(
                &transaction,
                "INSERT INTO settlement_models (id, name, definition, granularity, interchange, delay, currency,
                    ledger_account_type, settlement_account_type, auto_position_reset, require_liquidity_check)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            );
            // Prepared with the batch's first settlement record: few have any.
            let mut settlement: Option<SettlementStatements> = None;
            let mut party = Lazy::new(
                &transaction,
                "INSERT INTO parties (id_type, identifier, sub_id, participant_id, currency, registered_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (id_type, identifier, sub_id) DO UPDATE SET participant_id = excluded.participant_id,
                    currency = excluded.currency, registered_at_ms = excluded.registered_at_ms",
            );
            let mut party_deleted = Lazy::new(
                &transaction,
                "DELETE FROM parties WHERE id_type = ?1 AND identifier = ?2 AND sub_id = ?3",
            );
            let mut oracle = Lazy::new(
                &transaction,
                "INSERT INTO oracles (id, id_type, endpoint, currency, is_default, is_active)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (id) DO UPDATE SET id_type = excluded.id_type, endpoint = excluded.endpoint,
                    currency = excluded.currency, is_default = excluded.is_default,
                    is_active = excluded.is_active",
            );
            let mut oracle_deleted = Lazy::new(
                &transaction,
                "UPDATE oracles SET is_active = 0 WHERE id = ?1",
            );
            let mut quote = Lazy::new(
                &transaction,
                "INSERT INTO quotes (quote_id, payer_id, payee_id, request_hash, received_at_ms, answer_hash,
                    answer_is_error, answer_body, answered_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (quote_id) DO UPDATE SET answer_hash = excluded.answer_hash,
                    answer_is_error = excluded.answer_is_error, answer_body = excluded.answer_body,
                    answered_at_ms = excluded.answered_at_ms",
            );
            let mut key = Lazy::new(
                &transaction,
                "INSERT OR IGNORE INTO transfer_keys (key, seq) VALUES (?1, ?2)",
            );
            let text = &mut self.text;
            let owners = &mut self.owners;
            let mut records = batches.iter().flat_map(|batch| batch.iter()).peekable();
            while let Some(record) = records.next() {
                match record {
                    Record::Participant(row) => {
                        participant.execute(params![
                            row.id.0,
                            row.name.as_str(),
                            row.is_hub,
                            row.mode.is_active(),
                            row.created_at_ms,
                            row.mode.as_str(),
                            row.is_proxy
                        ])?;
                    }
                    Record::ProxyMapping(row) => {
                        proxy_mapping.execute(params![
                            row.dfsp.as_str(),
                            row.proxy.0,
                            row.by_operator,
                            row.since_ms
                        ])?;
                    }
                    Record::ProxyUnmapped(dfsp) => {
                        proxy_unmapped.execute(params![dfsp.as_str()])?;
                    }
                    Record::Account(row) => {
                        owners.note(row.id, row.participant, row.currency);
                        text.clear();
                        write!(text, "{}|{}", row.value, row.reserved)
                            .expect("writing to a String");
                        let (value, reserved) = text.split_once('|').expect("written above");
                        account.execute(params![
                            row.id.0,
                            row.participant.0,
                            row.currency.as_str(),
                            row.kind.as_str(),
                            row.active,
                            value,
                            reserved,
                            row.net_debit_cap.map(|cap| cap.to_string()),
                            row.created_at_ms,
                            row.changed_at_ms,
                        ])?;
                    }
                    Record::Transfer(row) => {
                        text.clear();
                        write!(text, "{}", row.amount).expect("writing to a String");
                        // Funds movements have neither condition nor expiration.
                        let conditional = row.kind.is_between_positions();
                        let search = SearchColumns::of(owners, row.debit, row.credit, row.amount);
                        // Its parties follow it (`Record::TransferParties`):
                        // written with the row, not by an update of it.
                        let parties = match records.peek() {
                            Some(Record::TransferParties(seq, parties)) if *seq == row.seq => {
                                records.next();
                                Some(parties)
                            }
                            _ => None,
                        };
                        transfer.execute(params![
                            row.seq as i64,
                            row.transfer_id.to_blob().as_slice(),
                            row.kind.as_str(),
                            row.debit.0,
                            row.credit.0,
                            text.as_str(),
                            conditional.then_some(&row.condition.0[..]),
                            conditional.then_some(row.expiration_ms),
                            row.prepared_at_ms,
                            &row.request_hash.0[..],
                            row.state.as_str(),
                            row.reason.map(|code| code.0),
                            row.memo
                                .as_ref()
                                .map(|memo| memo.external_reference.as_str()),
                            row.memo.as_ref().map(|memo| memo.reason.as_str()),
                            row.wire_version,
                            search.payer,
                            search.payee,
                            search.currency.as_ref().map(Currency::as_str),
                            search.amount_units,
                            parties.map(|p| &*p.payer),
                            parties.map(|p| &*p.payee),
                        ])?;
                        last_seq = last_seq.max(row.seq);
                        for filed in search::commit_keys(row.state, row.reason.map(|c| c.0), None)
                            .iter()
                            .flatten()
                        {
                            key.execute(params![filed, row.seq as i64])?;
                        }
                        if let Some(link) = &row.fx {
                            let fx = crate::FxColumns::of(link);
                            transfer_fx.execute(params![
                                row.seq as i64,
                                fx.determining_transfer_id
                                    .map(|id| id.to_blob().as_slice().to_vec()),
                                fx.target_currency.map(|c| c.to_string()),
                                fx.target_amount.map(|a| a.to_string()),
                                fx.commit_request_id
                                    .map(|id| id.to_blob().as_slice().to_vec()),
                                fx.payer.map(|p| p.0),
                            ])?;
                        }
                    }
                    Record::Endpoint(row) => {
                        endpoint.execute(params![
                            row.participant.0,
                            row.endpoint_type,
                            row.value
                        ])?;
                    }
                    Record::SettlementModel(row) => {
                        let rules = row.rules.as_ref();
                        settlement_model.execute(params![
                            row.id,
                            row.name,
                            row.definition,
                            rules.map(|r| r.granularity.as_str()),
                            rules.map(|r| r.interchange.as_str()),
                            rules.map(|r| r.delay.as_str()),
                            rules.and_then(|r| r.currency).map(|c| c.to_string()),
                            rules.map(|r| r.ledger_account_type.as_str()),
                            rules.map(|r| r.settlement_account_type.as_str()),
                            rules.map(|r| r.auto_position_reset),
                            rules.map(|r| r.require_liquidity_check),
                        ])?;
                    }
                    Record::Window(_)
                    | Record::Content(_)
                    | Record::ContentAccounts(_)
                    | Record::ContentPairs(_)
                    | Record::Settlement(_)
                    | Record::Entry(_) => {
                        if settlement.is_none() {
                            settlement = Some(SettlementStatements::prepare(&transaction)?);
                        }
                        settlement.as_mut().expect("prepared above").write(record)?
                    }
                    Record::Party(row) => {
                        party.execute(params![
                            row.key.id_type,
                            row.key.identifier,
                            row.key.sub_id.as_deref().unwrap_or(""),
                            row.fsp.0,
                            row.currency.map(|c| c.to_string()),
                            row.registered_at_ms,
                        ])?;
                    }
                    Record::PartyDeleted(key) => {
                        party_deleted.execute(params![
                            key.id_type,
                            key.identifier,
                            key.sub_id.as_deref().unwrap_or("")
                        ])?;
                    }
                    Record::Oracle(row) => {
                        oracle.execute(params![
                            row.id,
                            row.id_type,
                            row.endpoint,
                            row.currency.map(|c| c.to_string()),
                            row.is_default,
                            row.active,
                        ])?;
                    }
                    Record::OracleDeleted(id) => {
                        oracle_deleted.execute(params![id])?;
                    }
                    Record::Quote(row) => {
                        let answer = row.answer.as_ref();
                        quote.execute(params![
                            row.quote_id.to_blob().as_slice(),
                            row.payer.0,
                            row.payee.0,
                            &row.request_hash.0[..],
                            row.received_at_ms,
                            answer.map(|a| a.request_hash.0.to_vec()),
                            answer.map(|a| a.is_error),
                            answer.map(|a| a.body.as_str()),
                            answer.map(|a| a.answered_at_ms),
                        ])?;
                    }
                    Record::AuditEvent(row) => {
                        transaction
                            .prepare_cached(
                                "INSERT INTO audit_events (id, at_ms, actor, role, action, target, before, after, outcome, source)
                                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                            )?
                            .execute(params![
                                row.id as i64,
                                row.at_ms,
                                row.actor,
                                row.role,
                                row.action,
                                row.target,
                                row.before,
                                row.after,
                                row.outcome,
                                row.source,
                            ])?;
                    }
                    Record::CertificatePin(row) => {
                        transaction
                            .prepare_cached(
                                "INSERT INTO certificate_pins (fingerprint, participant_id, pinned_at_ms) VALUES (?1, ?2, ?3)",
                            )?
                            .execute(params![&row.fingerprint[..], row.participant.0, row.pinned_at_ms])?;
                    }
                    Record::CertificateUnpinned(fingerprint) => {
                        transaction
                            .prepare_cached("DELETE FROM certificate_pins WHERE fingerprint = ?1")?
                            .execute(params![&fingerprint[..]])?;
                    }
                    Record::ConversionFulfilled(row) => {
                        transaction
                            .prepare_cached(
                                "INSERT INTO conversion_fulfils (seq, fulfilment, request_hash, at_ms)
                                 VALUES (?1, ?2, ?3, ?4)",
                            )?
                            .execute(params![
                                row.seq as i64,
                                &row.fulfilment.preimage()[..],
                                &row.request_hash.0[..],
                                row.at_ms,
                            ])?;
                    }
                    Record::Fxp(row) if row.corridors.is_empty() => {
                        transaction
                            .prepare_cached("DELETE FROM fxps WHERE participant_id = ?1")?
                            .execute(params![row.participant.0])?;
                    }
                    Record::PendingChange(row) => {
                        transaction
                            .prepare_cached(&format!(
                                "INSERT OR REPLACE INTO pending_changes ({}) VALUES \
                                 (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
                                crate::PENDING_CHANGE_COLUMNS
                            ))?
                            .execute(params![
                                row.id,
                                row.action,
                                row.target,
                                row.method,
                                row.path,
                                row.body,
                                row.maker,
                                row.maker_role,
                                row.maker_source,
                                row.reason,
                                row.created_at_ms,
                                row.expires_at_ms,
                                row.state,
                                row.checker,
                                row.checker_role,
                                row.decision_reason,
                                row.decided_at_ms,
                            ])?;
                    }
                    Record::Fxp(row) => {
                        transaction
                            .prepare_cached(
                                "INSERT INTO fxps (participant_id, corridors) VALUES (?1, ?2)
                                 ON CONFLICT (participant_id) DO UPDATE SET corridors = excluded.corridors",
                            )?
                            .execute(params![
                                row.participant.0,
                                crate::corridors_text(&row.corridors)
                            ])?;
                    }
                    // Not right after its transfer (the ledger puts it
                    // there): on the row already written.
                    Record::TransferParties(seq, parties) => {
                        transaction
                            .prepare_cached(
                                "UPDATE transfers SET payer_party = ?2, payee_party = ?3 WHERE seq = ?1",
                            )?
                            .execute(params![*seq as i64, &*parties.payer, &*parties.payee])?;
                    }
                    Record::Finish(row) => {
                        finish.execute(params![
                            row.seq as i64,
                            row.kind.as_str(),
                            row.state.as_str(),
                            row.reason.map(|code| code.0),
                            row.finished_at_ms,
                            &row.request_hash.0[..],
                            row.fulfilment.as_ref().map(|f| &f.preimage()[..]),
                            row.settlement_window,
                            row.cause.map(|cause| cause.as_str()),
                        ])?;
                        for filed in search::commit_keys(
                            row.state,
                            row.reason.map(|c| c.0),
                            row.settlement_window,
                        )
                        .iter()
                        .flatten()
                        {
                            key.execute(params![filed, row.seq as i64])?;
                        }
                    }
                }
            }
        }
        let pass = self.pass.due();
        if let Some((after, through)) = pass {
            transaction
                .prepare_cached(&format!(
                    "INSERT OR IGNORE INTO transfer_keys (key, seq) {}",
                    search::pass_select(search::Dialect::Sqlite, 1, 2)
                ))?
                .execute(params![after as i64, through as i64])?;
            transaction
                .prepare_cached(
                    "INSERT INTO search_index (id, through_seq) VALUES (1, ?1)
                     ON CONFLICT (id) DO UPDATE SET through_seq = excluded.through_seq",
                )?
                .execute(params![through as i64])?;
        }
        let history = self
            .history
            .as_ref()
            .and_then(|history| history.shared.take_pending());
        if let Some(history) = &history {
            sqlite_history::write(&transaction, history, self.history_kept_written.as_deref())?;
        }
        // The change feed, from the same records in the same transaction;
        // its state kept only once the commit succeeded.
        let mut feed = self.feed.take();
        let feed_through = crate::sqlite_feed::write(&transaction, &mut feed, batches)?;
        // Unknown until the commit succeeds.
        let kept_written = self.history_kept_written.take();
        transaction.commit()?;
        if let Some((_, through)) = pass {
            self.pass.passed(through);
        }
        self.pass.committed(last_seq);
        self.feed = feed;
        if let (Some(listener), Some(through)) = (&self.feed_listener, feed_through) {
            listener(through);
        }
        if let Some(snapshot) = history {
            self.history_kept_written = Some(snapshot.kept);
        } else {
            self.history_kept_written = kept_written;
        }
        self.records_since_checkpoint += batches.iter().map(|batch| batch.len()).sum::<usize>();
        if self.records_since_checkpoint >= CHECKPOINT_EVERY_RECORDS {
            if let Some(checkpointer) = &self.checkpointer {
                // A checkpoint already asked for and not yet begun covers this one.
                let _ = checkpointer.signal.try_send(());
            }
            self.records_since_checkpoint = 0;
        }
        self.restart_wal_after_checkpoint();
        Ok(())
    }

    /// SQLite starts a WAL over only when a write begins after a checkpoint
    /// that copied every frame; under steady load the background (PASSIVE)
    /// checkpoint never catches up with the writer, so without this the WAL
    /// grows without bound (hundreds of MB a minute at a few thousand
    /// transfers/s) and its fsyncs get slower as it grows. So once a
    /// background checkpoint has copied the bulk, the writer itself, between
    /// two commits, copies the few frames appended since and restarts the
    /// WAL from its beginning: a short pause of the store thread, not of a
    /// commit. It never waits: if a reader (`kasi audit`, a `sqlite3` shell)
    /// still uses the WAL, or a background checkpoint is running, it gives up
    /// at once and tries again after the next background checkpoint.
    fn restart_wal_after_checkpoint(&mut self) {
        let Some(checkpointer) = &self.checkpointer else {
            return;
        };
        if !checkpointer.copied.swap(false, Ordering::AcqRel) {
            return;
        }
        let restarted = self.connection.busy_timeout(Duration::ZERO).and_then(|()| {
            self.connection
                .query_row("PRAGMA wal_checkpoint(RESTART)", [], |row| {
                    row.get::<_, i64>(0)
                })
        });
        // Back to the connection's usual patience for its own statements.
        let _ = self.connection.busy_handler(Some(writer_busy));
        // The first column is 1 when the checkpoint was blocked.
        match restarted {
            Ok(0) => self.wal_restarts += 1,
            Ok(_) => {}
            Err(error) if !self.restart_error_logged => {
                self.restart_error_logged = true;
                eprintln!(
                    "kasi: cannot restart the WAL (will retry after later checkpoints): {error}"
                );
            }
            Err(_) => {}
        }
    }

    /// Advances the history snapshot to fold every transfer finished before
    /// `cut_ms` and stores it at once, on the writer's own connection (for
    /// tests, which pick their cuts, and tools). Returns the stored snapshot.
    pub fn advance_history_snapshot(&mut self, cut_ms: i64) -> Result<HistorySnapshot, StoreError> {
        if let Some(history) = &self.history {
            history.shared.take_pending();
        }
        let transaction = self.connection.transaction()?;
        let snapshot =
            history::advance_fully(&mut sqlite_history::Source::new(&transaction)?, cut_ms)?;
        sqlite_history::write(&transaction, &snapshot, None)?;
        transaction.commit()?;
        self.history_kept_written = Some(snapshot.kept.clone());
        Ok(snapshot)
    }

    /// Checks the stored history snapshot against the whole history, in
    /// one read transaction (a hub may be writing meanwhile): what recovery
    /// reads from the snapshot plus the rows after it must equal what it
    /// reads from every row, at the snapshot's own cut. `None` without a
    /// snapshot; else its seq and the first difference, if any.
    pub fn check_history_snapshot(&mut self) -> Result<Option<HistoryCheck>, StoreError> {
        let transaction = self.connection.transaction()?;
        history::check(&mut sqlite_history::Source::new(&transaction)?)
    }

    /// The stored history snapshot, if any.
    pub fn history_snapshot(&self) -> Result<Option<HistorySnapshot>, StoreError> {
        sqlite_history::read(&self.connection)
    }

    /// Times the WAL was started over (for tests and diagnostics).
    pub fn wal_restarts(&self) -> u64 {
        self.wal_restarts
    }

    fn read(&mut self, horizon_ms: Option<i64>) -> Result<Snapshot, StoreError> {
        // One read transaction, so that a hub writing meanwhile cannot show
        // us half of a batch.
        // Nobody else writes a store this process holds the lock of: a
        // second connection reads the same state, so recovery may read in
        // two parts at once.
        let fork_from = self._lock.as_ref().map(|_| self.path.clone());
        let transaction = self.connection.transaction()?;
        let (snapshot, history_through) =
            read_rows(&transaction, horizon_ms, true, fork_from.as_deref())?;
        if horizon_ms.is_some() {
            self.loaded_history_through = history_through;
        }
        transaction.commit()?;
        Ok(snapshot)
    }

    /// Opens the store in `data_dir` to read it, holding the data
    /// directory's lock so that no hub can write it meanwhile (for `kasi
    /// migrate-store`): refused while a hub serves from it, and when there
    /// is no store. Nothing is created or migrated.
    pub fn open_stopped(data_dir: &Path) -> Result<SqliteStore, StoreError> {
        let path = data_dir.join(DATABASE_FILE);
        if !path.is_file() {
            return Err(StoreError::fatal(format!(
                "no kasi store at sqlite:{} ({} does not exist)",
                data_dir.display(),
                path.display()
            )));
        }
        let lock = lock_data_dir(data_dir).map_err(|(lock_path, error)| match error {
            None => StoreError::fatal(format!(
                "sqlite:{} is in use by a running kasi (lock {}): stop the hub first",
                data_dir.display(),
                lock_path.display()
            )),
            Some(error) => error,
        })?;
        let mut store = SqliteStore::open_file_read_only(&path)?;
        store._lock = Some(lock);
        Ok(store)
    }

    /// Every row, as the records that write it, to `sink` in chunks of at
    /// most `chunk` rows, all read in one read transaction (one consistent
    /// snapshot of the store). Transfers with their finishes (in seq
    /// order), parties, quotes and audit events are streamed, never held
    /// whole; the other tables (which the ledger holds in memory anyway)
    /// are read whole first. The history snapshot's
    /// tables are SQLite's own and are not exported.
    pub fn export(
        &mut self,
        chunk: usize,
        sink: &mut dyn FnMut(Vec<Record>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let chunk = chunk.max(1);
        let transaction = self.connection.transaction()?;
        let version: i64 =
            transaction.pragma_query_value(None, "user_version", |row| row.get(0))?;
        let (small, _) = read_rows(&transaction, None, false, None)?;
        let Snapshot {
            participants,
            accounts,
            endpoints,
            settlement_models,
            oracles,
            proxy_map,
            windows,
            content,
            content_accounts,
            content_pairs,
            settlements,
            entries,
            certificate_pins,
            fxps,
            pending_changes,
            ..
        } = small;
        let mut records: Vec<Record> = Vec::new();
        records.extend(participants.into_iter().map(Record::Participant));
        records.extend(accounts.into_iter().map(Record::Account));
        records.extend(endpoints.into_iter().map(Record::Endpoint));
        records.extend(settlement_models.into_iter().map(Record::SettlementModel));
        records.extend(oracles.into_iter().map(Record::Oracle));
        records.extend(proxy_map.into_iter().map(Record::ProxyMapping));
        records.extend(certificate_pins.into_iter().map(Record::CertificatePin));
        records.extend(fxps.into_iter().map(Record::Fxp));
        records.extend(pending_changes.into_iter().map(Record::PendingChange));
        records.extend(windows.into_iter().map(Record::Window));
        records.extend(content.into_iter().map(Record::Content));
        records.extend(settlements.into_iter().map(Record::Settlement));
        for part in content_accounts.chunks(chunk) {
            records.push(Record::ContentAccounts(part.to_vec()));
        }
        for part in content_pairs.chunks(chunk) {
            records.push(Record::ContentPairs(part.to_vec()));
        }
        records.extend(entries.into_iter().map(Record::Entry));
        while !records.is_empty() {
            let rest = records.split_off(records.len().min(chunk));
            sink(std::mem::replace(&mut records, rest))?;
        }
        let mut statement = transaction.prepare(&whole_history_query(version))?;
        let mut rows = statement.query([])?;
        let (mut batch, mut transfers) = (Vec::with_capacity(2 * chunk), 0);
        while let Some(row) = rows.next()? {
            let (transfer, finish, accepted) = sqlite_history::joined(row)?;
            batch.push(Record::Transfer(transfer));
            batch.extend(accepted.map(Record::ConversionFulfilled));
            batch.extend(finish.map(Record::Finish));
            transfers += 1;
            if transfers == chunk {
                sink(std::mem::take(&mut batch))?;
                transfers = 0;
            }
        }
        if !batch.is_empty() {
            sink(batch)?;
        }
        drop(rows);
        drop(statement);
        let finish_columns = finish_columns(version, "");
        let mut stream = |sql: &str, to_record: &dyn Fn(&Row<'_>) -> Result<Record, StoreError>| {
            let mut statement = transaction.prepare(sql)?;
            let mut rows = statement.query([])?;
            let mut batch = Vec::with_capacity(chunk);
            while let Some(row) = rows.next()? {
                batch.push(to_record(row)?);
                if batch.len() == chunk {
                    sink(std::mem::take(&mut batch))?;
                }
            }
            if !batch.is_empty() {
                sink(batch)?;
            }
            Ok::<(), StoreError>(())
        };
        // Finishes of no transfer (there should be none; copied as they are).
        stream(
            &format!(
                "SELECT {finish_columns}
                 FROM transfer_finishes f WHERE NOT EXISTS (SELECT 1 FROM transfers t WHERE t.seq = f.seq)
                 ORDER BY seq"
            ),
            &|row| Ok(Record::Finish(finish_row(row, 0)?)),
        )?;
        if version >= FX_SINCE {
            // Acceptances of no transfer, likewise.
            stream(
                "SELECT seq, fulfilment, request_hash, at_ms
                 FROM conversion_fulfils c WHERE NOT EXISTS (SELECT 1 FROM transfers t WHERE t.seq = c.seq)
                 ORDER BY seq",
                &|row| {
                    let accepted = conversion_fulfil_row(row, 0)?.expect("seq is NOT NULL");
                    Ok(Record::ConversionFulfilled(accepted))
                },
            )?;
        }
        stream(
            "SELECT id_type, identifier, sub_id, participant_id, currency, registered_at_ms FROM parties",
            &|row| Ok(Record::Party(party_row(row)?)),
        )?;
        stream(
            "SELECT quote_id, payer_id, payee_id, request_hash, received_at_ms, answer_hash, answer_is_error,
                answer_body, answered_at_ms FROM quotes ORDER BY quote_id",
            &|row| Ok(Record::Quote(quote_row(row)?)),
        )?;
        if version >= 3 {
            stream(
                &format!(
                    "SELECT {} FROM audit_events ORDER BY id",
                    audit_event_columns(version)
                ),
                &|row| Ok(Record::AuditEvent(audit_event_row(row)?)),
            )?;
        }
        transaction.commit()?;
        Ok(())
    }

    /// Up to `limit` audit events with ids above `after_id`, in id order:
    /// every event, a page at a time (a load keeps only the newest).
    pub fn audit_events_after(
        &mut self,
        after_id: u64,
        limit: usize,
    ) -> Result<Vec<ledger::AuditEventRow>, StoreError> {
        let version: i64 = self
            .connection
            .pragma_query_value(None, "user_version", |row| row.get(0))?;
        if version < 3 {
            return Ok(Vec::new());
        }
        let mut statement = self.connection.prepare(&format!(
            "SELECT {} FROM audit_events WHERE id > ?1 ORDER BY id LIMIT ?2",
            audit_event_columns(version)
        ))?;
        let mut rows = statement.query(params![after_id as i64, limit as i64])?;
        let mut events = Vec::new();
        while let Some(row) = rows.next()? {
            events.push(audit_event_row(row)?);
        }
        Ok(events)
    }

    /// Rows written so far, by table (for logs and tests).
    pub fn row_counts(&self) -> Result<Vec<(&'static str, u64)>, StoreError> {
        let mut counts = Vec::new();
        for table in ["participants", "accounts", "transfers", "transfer_finishes"] {
            let count: Option<i64> = self
                .connection
                .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                    row.get(0)
                })
                .optional()?;
            counts.push((table, count.unwrap_or(0) as u64));
        }
        Ok(counts)
    }
}

/// Every row (`bulk`), or every row but the transfers, their finishes,
/// the parties, quotes and audit events (which [`SqliteStore::export`]
/// streams instead), in `transaction`; with the seq a history snapshot
/// summed through, when a horizon made the read start from one.
fn read_rows(
    transaction: &rusqlite::Transaction<'_>,
    horizon_ms: Option<i64>,
    bulk: bool,
    fork_from: Option<&Path>,
) -> Result<(Snapshot, Option<u64>), StoreError> {
    let mut snapshot = Snapshot::default();
    let mut history_through = None;
    // A version 1 store (read by `kasi audit` before any newer kasi
    // served it) has no wire versions and nothing of settlement.
    let version: i64 = transaction.pragma_query_value(None, "user_version", |row| row.get(0))?;
    {
        let mode = match version >= MODE_SINCE {
            true => "mode",
            false => "NULL",
        };
        let is_proxy = match version >= PROXY_SINCE {
            true => "is_proxy",
            false => "0",
        };
        let mut statement = transaction.prepare(&format!(
            "SELECT id, name, is_hub, is_active, created_at_ms, {mode}, {is_proxy} FROM participants ORDER BY id",
        ))?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let mode: Option<String> = row.get(5)?;
            snapshot.participants.push(ParticipantRow {
                id: ParticipantId(row.get(0)?),
                name: parse(row, 1, "participant name", FspName::new)?,
                is_hub: row.get(2)?,
                is_proxy: row.get(6)?,
                mode: crate::participant_mode(row.get(3)?, mode.as_deref())?,
                created_at_ms: row.get(4)?,
            });
        }
        if version >= PROXY_SINCE {
            let mut statement = transaction
                .prepare("SELECT dfsp, proxy_id, by_operator, since_ms FROM proxy_map")?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                snapshot.proxy_map.push(ProxyMapRow {
                    dfsp: parse(row, 0, "proxy map DFSP", FspName::new)?,
                    proxy: ParticipantId(row.get(1)?),
                    by_operator: row.get(2)?,
                    since_ms: row.get(3)?,
                });
            }
            // In the ledger's name order (Rust's, not SQLite's collation).
            snapshot.proxy_map.sort_by_key(|row| row.dfsp);
        }
        // Before version 4 an account's last change is not known: its
        // creation stands in.
        let changed_at = if version >= 4 {
            "coalesce(changed_at_ms, created_at_ms)"
        } else {
            "created_at_ms"
        };
        let mut statement = transaction.prepare(&format!(
            "SELECT id, participant_id, currency, kind, is_active, value, reserved, net_debit_cap, created_at_ms,
                {changed_at}
             FROM accounts ORDER BY id"
        ))?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let net_debit_cap: Option<String> = row.get(7)?;
            snapshot.accounts.push(AccountRow {
                id: AccountId(row.get(0)?),
                participant: ParticipantId(row.get(1)?),
                currency: parse(row, 2, "currency", Currency::parse)?,
                kind: parse(row, 3, "account kind", AccountKind::parse)?,
                active: row.get(4)?,
                value: parse(row, 5, "value", |t| Amount::parse_signed(t).ok())?,
                reserved: parse(row, 6, "reserved", |t| Amount::parse_signed(t).ok())?,
                net_debit_cap: match net_debit_cap {
                    None => None,
                    Some(text) => {
                        Some(Amount::parse_signed(&text).map_err(|_| {
                            StoreError::fatal(format!("bad net_debit_cap {text:?}"))
                        })?)
                    }
                },
                created_at_ms: row.get(8)?,
                changed_at_ms: row.get(9)?,
            });
        }
        if bulk {
            let fx_join = match version >= FX_SINCE {
                true => "LEFT JOIN transfer_fx x ON x.seq = t.seq",
                false => "",
            };
            let mut statement = transaction.prepare(&format!(
                "SELECT {} FROM transfers t {fx_join} ORDER BY t.seq",
                transfer_columns(version)
            ))?;
            match horizon_ms {
                None => {
                    let mut rows = statement.query([])?;
                    while let Some(row) = rows.next()? {
                        snapshot.transfers.push(transfer_row(row)?);
                    }
                }
                Some(horizon_ms) => {
                    drop(statement);
                    let source =
                        &mut sqlite_history::Source::new(transaction)?.forking_from(fork_from);
                    let stored = match version >= 3 {
                        true => source.stored()?,
                        false => None,
                    };
                    history_through = stored.as_ref().map(|h| h.through_seq);
                    match stored {
                        Some(stored) => {
                            history::read_since(source, stored, horizon_ms, &mut snapshot)?
                        }
                        None => history::read_whole(source, Some(horizon_ms), &mut snapshot)?,
                    }
                }
            }
            let mut statement = transaction.prepare(&format!(
                "SELECT {} FROM transfer_finishes ORDER BY seq",
                finish_columns(version, "")
            ))?;
            if horizon_ms.is_none() {
                let mut rows = statement.query([])?;
                while let Some(row) = rows.next()? {
                    snapshot.finishes.push(finish_row(row, 0)?);
                }
                if version >= FX_SINCE {
                    let mut statement = transaction.prepare(
                        "SELECT seq, fulfilment, request_hash, at_ms FROM conversion_fulfils ORDER BY seq",
                    )?;
                    let mut rows = statement.query([])?;
                    while let Some(row) = rows.next()? {
                        snapshot
                            .conversion_fulfils
                            .extend(conversion_fulfil_row(row, 0)?);
                    }
                }
            }
        }
    }
    {
        let mut statement = transaction.prepare(
            "SELECT participant_id, type, value FROM endpoints ORDER BY participant_id, type",
        )?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            snapshot.endpoints.push(EndpointRow {
                participant: ParticipantId(row.get(0)?),
                endpoint_type: row.get(1)?,
                value: row.get(2)?,
            });
        }
        if bulk {
            let mut statement = transaction.prepare(
                "SELECT id_type, identifier, sub_id, participant_id, currency, registered_at_ms FROM parties",
            )?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                snapshot.parties.push(party_row(row)?);
            }
        }
        // In the ledger's key order (Rust's, not SQLite's collation).
        snapshot.parties.sort_by(|a, b| a.key.cmp(&b.key));
        let mut statement = transaction.prepare(
            "SELECT id, id_type, endpoint, currency, is_default, is_active FROM oracles ORDER BY id",
        )?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let currency: Option<String> = row.get(3)?;
            snapshot.oracles.push(OracleRow {
                id: row.get(0)?,
                id_type: row.get(1)?,
                endpoint: row.get(2)?,
                currency: match currency {
                    None => None,
                    Some(code) => Some(
                        Currency::parse(&code)
                            .ok_or_else(|| StoreError::fatal(format!("bad currency {code:?}")))?,
                    ),
                },
                is_default: row.get(4)?,
                active: row.get(5)?,
            });
        }
        // With a horizon, only the quotes received since (an index).
        let mut statement = transaction.prepare(
            "SELECT quote_id, payer_id, payee_id, request_hash, received_at_ms, answer_hash, answer_is_error,
                answer_body, answered_at_ms FROM quotes WHERE received_at_ms >= ?1 ORDER BY quote_id",
        )?;
        let mut rows = statement.query([horizon_ms.unwrap_or(i64::MIN)])?;
        while let Some(row) = rows.next()? {
            if !bulk {
                break;
            }
            snapshot.quotes.push(quote_row(row)?);
        }
        if version >= 3 {
            // The newest events only: older ones stay in the table.
            let mut statement = transaction.prepare(&format!(
                "SELECT {} FROM audit_events ORDER BY id DESC LIMIT ?1",
                audit_event_columns(version)
            ))?;
            let newest = if bulk {
                ledger::AUDIT_EVENTS_IN_MEMORY
            } else {
                0
            };
            let mut rows = statement.query([newest as i64])?;
            while let Some(row) = rows.next()? {
                snapshot.audit_events.push(audit_event_row(row)?);
            }
            snapshot.audit_events.reverse();
            let mut statement = transaction.prepare(
                "SELECT fingerprint, participant_id, pinned_at_ms FROM certificate_pins ORDER BY fingerprint",
            )?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                snapshot.certificate_pins.push(ledger::PinRow {
                    fingerprint: blob(row, 0)?,
                    participant: ParticipantId(row.get(1)?),
                    pinned_at_ms: row.get(2)?,
                });
            }
        }
        if version >= FX_SINCE {
            let mut statement = transaction
                .prepare("SELECT participant_id, corridors FROM fxps ORDER BY participant_id")?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let corridors: String = row.get(1)?;
                snapshot.fxps.push(ledger::FxpRow {
                    participant: ParticipantId(row.get(0)?),
                    corridors: crate::parse_corridors(&corridors)?,
                });
            }
        }
        if version >= PENDING_SINCE {
            let mut statement = transaction.prepare(&format!(
                "SELECT {} FROM pending_changes ORDER BY id",
                crate::PENDING_CHANGE_COLUMNS
            ))?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                snapshot.pending_changes.push(ledger::PendingChangeRow {
                    id: row.get(0)?,
                    action: row.get(1)?,
                    target: row.get(2)?,
                    method: row.get(3)?,
                    path: row.get(4)?,
                    body: row.get(5)?,
                    maker: row.get(6)?,
                    maker_role: row.get(7)?,
                    maker_source: row.get(8)?,
                    reason: row.get(9)?,
                    created_at_ms: row.get(10)?,
                    expires_at_ms: row.get(11)?,
                    state: row.get(12)?,
                    checker: row.get(13)?,
                    checker_role: row.get(14)?,
                    decision_reason: row.get(15)?,
                    decided_at_ms: row.get(16)?,
                });
            }
        }
        if version >= 2 {
            crate::sqlite_settlement::load(transaction, &mut snapshot)?;
        } else {
            let mut statement = transaction
                .prepare("SELECT id, name, definition FROM settlement_models ORDER BY id")?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                snapshot.settlement_models.push(SettlementModelRow {
                    id: row.get(0)?,
                    name: row.get(1)?,
                    definition: row.get(2)?,
                    rules: None,
                });
            }
        }
    }
    Ok((snapshot, history_through))
}

/// A `parties` row, from its six columns in table order.
fn party_row(row: &Row<'_>) -> Result<PartyRow, StoreError> {
    let sub_id: String = row.get(2)?;
    let currency: Option<String> = row.get(4)?;
    Ok(PartyRow {
        key: PartyKey {
            id_type: row.get(0)?,
            identifier: row.get(1)?,
            sub_id: (!sub_id.is_empty()).then_some(sub_id),
        },
        fsp: ParticipantId(row.get(3)?),
        currency: match currency {
            None => None,
            Some(code) => Some(
                Currency::parse(&code)
                    .ok_or_else(|| StoreError::fatal(format!("bad currency {code:?}")))?,
            ),
        },
        registered_at_ms: row.get(5)?,
    })
}

/// The columns [`audit_event_row`] reads, in a store of `version` (one
/// before version 9 has no `source`: read as empty).
fn audit_event_columns(version: i64) -> &'static str {
    match version >= AUDIT_SOURCE_SINCE {
        true => "id, at_ms, actor, role, action, target, before, after, outcome, source",
        false => "id, at_ms, actor, role, action, target, before, after, outcome, NULL",
    }
}

/// An `audit_events` row, from [`audit_event_columns`].
fn audit_event_row(row: &Row<'_>) -> Result<ledger::AuditEventRow, StoreError> {
    Ok(ledger::AuditEventRow {
        id: row.get::<_, i64>(0)? as u64,
        at_ms: row.get(1)?,
        actor: row.get(2)?,
        role: row.get(3)?,
        action: row.get(4)?,
        target: row.get(5)?,
        before: row.get(6)?,
        after: row.get(7)?,
        outcome: row.get(8)?,
        source: row.get::<_, Option<String>>(9)?.unwrap_or_default(),
    })
}

/// Copies committed WAL frames into the database file in the background.
struct Checkpointer {
    signal: SyncSender<()>,
    /// A background checkpoint has run since the writer last restarted the
    /// WAL.
    copied: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    fn start(path: &Path) -> Result<Checkpointer, StoreError> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(Duration::from_secs(5))?;
        let (signal, requests) = mpsc::sync_channel::<()>(1);
        let copied = Arc::new(AtomicBool::new(false));
        let done = copied.clone();
        let thread = std::thread::Builder::new()
            .name("kasi-checkpoint".into())
            .spawn(move || {
                while requests.recv().is_ok() {
                    // PASSIVE: copies what it can without blocking the writer.
                    let result =
                        connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                    match result {
                        Ok(()) => done.store(true, Ordering::Release),
                        Err(error) => {
                            eprintln!("kasi: background checkpoint failed (will retry): {error}")
                        }
                    }
                }
            })
            .map_err(|e| StoreError::fatal(format!("cannot start the checkpoint thread: {e}")))?;
        Ok(Checkpointer {
            signal,
            copied,
            thread: Some(thread),
        })
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        if let Some(mut checkpointer) = self.checkpointer.take() {
            drop(checkpointer.signal);
            if let Some(thread) = checkpointer.thread.take() {
                let _ = thread.join();
            }
            // A clean close leaves an empty WAL: the next start reads one file.
            let _ = self
                .connection
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
    }
}

pub(crate) fn parse<T>(
    row: &Row<'_>,
    column: usize,
    what: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, StoreError> {
    let text = match row.get_ref(column)? {
        ValueRef::Text(bytes) => std::str::from_utf8(bytes)
            .map_err(|_| StoreError::fatal(format!("{what} is not UTF-8")))?,
        other => {
            return Err(StoreError::fatal(format!(
                "{what} is stored as {:?}, not text",
                other.data_type()
            )))
        }
    };
    parse(text).ok_or_else(|| StoreError::fatal(format!("bad {what} {text:?} in the store")))
}

fn blob<const N: usize>(row: &Row<'_>, column: usize) -> Result<[u8; N], StoreError> {
    match row.get_ref(column)? {
        ValueRef::Blob(bytes) => bytes.try_into().map_err(|_| {
            StoreError::fatal(format!(
                "column {column} holds {} bytes, not {N}",
                bytes.len()
            ))
        }),
        other => Err(StoreError::fatal(format!(
            "column {column} is stored as {:?}, not a blob",
            other.data_type()
        ))),
    }
}

/// Whether `table` has `column` (a migration adds it once).
/// Every account's participant and currency.
fn account_owners(connection: &Connection) -> Result<AccountOwners, StoreError> {
    let mut owners = AccountOwners::default();
    let mut statement = connection.prepare("SELECT id, participant_id, currency FROM accounts")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let currency: String = row.get(2)?;
        let currency = Currency::parse(&currency).ok_or_else(|| {
            StoreError::fatal(format!("account currency {currency:?} is not ISO 4217"))
        })?;
        owners.note(AccountId(row.get(0)?), ParticipantId(row.get(1)?), currency);
    }
    Ok(owners)
}

/// Fills the search columns of the transfers kept before version 10, a
/// chunk at a time, as the writer fills them ([`SearchColumns::of`]).
fn fill_search_columns(connection: &Connection) -> Result<(), StoreError> {
    const CHUNK: i64 = 10_000;
    let owners = account_owners(connection)?;
    let mut select = connection.prepare(
        "SELECT seq, debit_account_id, credit_account_id, amount FROM transfers
         WHERE seq > ?1 AND payer_id IS NULL ORDER BY seq LIMIT ?2",
    )?;
    let mut update = connection.prepare(
        "UPDATE transfers SET payer_id = ?2, payee_id = ?3, currency = ?4, amount_units = ?5 WHERE seq = ?1",
    )?;
    let mut after = 0i64;
    loop {
        let mut chunk = Vec::new();
        let mut rows = select.query(params![after, CHUNK])?;
        while let Some(row) = rows.next()? {
            let seq: i64 = row.get(0)?;
            let amount = parse(row, 3, "amount", |t| Amount::parse_signed(t).ok())?;
            let columns = SearchColumns::of(
                &owners,
                AccountId(row.get(1)?),
                AccountId(row.get(2)?),
                amount,
            );
            chunk.push((seq, columns));
        }
        let Some(&(last, _)) = chunk.last() else {
            return Ok(());
        };
        for (seq, columns) in &chunk {
            update.execute(params![
                seq,
                columns.payer,
                columns.payee,
                columns.currency.as_ref().map(Currency::as_str),
                columns.amount_units,
            ])?;
        }
        after = last;
    }
}

/// Version 16's column, on a store whose participants table predates it.
fn add_proxy_column(connection: &Connection) -> Result<(), StoreError> {
    if !has_column(connection, "participants", "is_proxy")? {
        connection.execute_batch(
            "ALTER TABLE participants ADD COLUMN is_proxy INTEGER NOT NULL DEFAULT 0",
        )?;
    }
    Ok(())
}

fn has_column(connection: &Connection, table: &str, column: &str) -> Result<bool, StoreError> {
    let mut statement = connection.prepare(&format!("PRAGMA table_info({table})"))?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        if row.get::<_, String>(1)? == column {
            return Ok(true);
        }
    }
    Ok(false)
}

fn newer_schema(path: &Path, version: i64) -> StoreError {
    StoreError::fatal(format!(
        "{} has schema version {version}; this kasi reads versions {OLDEST_SCHEMA_VERSION} to {SCHEMA_VERSION} (a newer kasi wrote it?)",
        path.display()
    ))
}

/// [`StoreReader::transfers_touched_since`] on one connection. Its
/// columns (and [`find_transfer`]'s) are the current version's: both read
/// only a store a hub opened for writing, which migrated it.
fn touched_since(connection: &Connection, since_ms: i64) -> Result<Vec<Touched>, StoreError> {
    // Two index reads, not a scan of the whole history: transfers are
    // prepared in seq order at the ledger's clock, which never goes
    // back (not across restarts either: recovery resumes it from the
    // newest stored instant), so those prepared since are the seqs
    // from the first one; finishes are read by their time.
    // (Collected first, then read one by one: a single query joining
    // the two lets SQLite's planner pick a scan of the whole table.)
    // Outer joins, as in `find_transfer`: a damaged row is an error, not
    // left out of what a restart notifies again.
    let first_seq = first_rowid_since(connection, "transfers", "prepared_at_ms", since_ms)?;
    let mut seqs = std::collections::BTreeSet::new();
    let mut statement = connection.prepare_cached("SELECT seq FROM transfers WHERE seq >= ?1")?;
    let mut rows = statement.query(params![first_seq])?;
    while let Some(row) = rows.next()? {
        seqs.insert(row.get::<_, i64>(0)?);
    }
    let mut statement = connection.prepare_cached(
        "SELECT seq FROM transfer_finishes INDEXED BY transfer_finishes_by_time
         WHERE finished_at_ms >= ?1",
    )?;
    let mut rows = statement.query(params![since_ms])?;
    while let Some(row) = rows.next()? {
        seqs.insert(row.get::<_, i64>(0)?);
    }
    // An FXP's acceptance is a conversion's step too (its callback to the
    // payer); few rows, one per conversion.
    let mut statement =
        connection.prepare_cached("SELECT seq FROM conversion_fulfils WHERE at_ms >= ?1")?;
    let mut rows = statement.query(params![since_ms])?;
    while let Some(row) = rows.next()? {
        seqs.insert(row.get::<_, i64>(0)?);
    }
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "SELECT {} WHERE t.seq = ?2 AND t.kind IN ('TRANSFER', 'FX_CONVERSION')
                AND (t.prepared_at_ms >= ?1 OR f.finished_at_ms >= ?1 OR c.at_ms >= ?1)",
            view_select()
        )
    });
    let mut statement = connection.prepare_cached(&SQL)?;
    let mut found = Vec::new();
    for seq in seqs {
        let mut rows = statement.query(params![since_ms, seq])?;
        let Some(row) = rows.next()? else {
            continue;
        };
        let stored = stored_transfer(row)?;
        let condition = Condition(blob(row, 6)?);
        found.push((stored.view, condition, stored.finish.map(|(kind, _)| kind)));
    }
    Ok(found)
}

/// Where a row of [`joined_columns`] has the finish's columns (after the
/// transfer's 15 and its FX row's 6), and the conversion's acceptance
/// (after the finish's 9).
pub(crate) const FINISH_AT: usize = 21;
pub(crate) const FULFIL_AT: usize = 30;

/// A transfer (`t`) and its FX row (`x`, see [`fx_joins`]), in the
/// columns [`transfer_row`] reads, for a store of `version`: a column it
/// predates reads as its migration fills it in (no FX before version 6).
pub(crate) fn transfer_columns(version: i64) -> String {
    let wire_version = match version >= 2 {
        true => "t.wire_version",
        false => "0",
    };
    let fx = match version >= FX_SINCE {
        true => "x.seq, x.determining_transfer_id, x.target_currency, x.target_amount, x.commit_request_id,
            x.payer_id",
        false => "NULL, NULL, NULL, NULL, NULL, NULL",
    };
    format!(
        "t.seq, t.transfer_id, t.kind, t.debit_account_id, t.credit_account_id, t.amount, t.condition,
            t.expiration_ms, t.prepared_at_ms, t.request_hash, t.state, t.reason, t.external_reference, t.memo,
            {wire_version}, {fx}"
    )
}

/// The joins that give a transfer `t` its FX row `x` and, for a
/// conversion, the FXP's acceptance `c`: none before version 6, whose
/// stores have neither table.
pub(crate) fn fx_joins(version: i64) -> &'static str {
    match version >= FX_SINCE {
        true => " LEFT JOIN transfer_fx x ON x.seq = t.seq LEFT JOIN conversion_fulfils c ON c.seq = t.seq",
        false => "",
    }
}

/// A transfer (`t`, with its FX row `x`), its finish (`f`) and its
/// acceptance by an FXP (`c`), in the columns `sqlite_history::joined`
/// reads, for a store of `version`.
pub(crate) fn joined_columns(version: i64) -> String {
    let fulfil = match version >= FX_SINCE {
        true => "c.seq, c.fulfilment, c.request_hash, c.at_ms",
        false => "NULL, NULL, NULL, NULL",
    };
    format!(
        "{}, {}, {fulfil}",
        transfer_columns(version),
        finish_columns(version, "f.")
    )
}

/// A transfer with its finish and FX rows (`t`, `f`, `x`, `c`), for a
/// store of `version`.
pub(crate) fn joined_from(version: i64) -> String {
    format!(
        "transfers t LEFT JOIN transfer_finishes f ON f.seq = t.seq{}",
        fx_joins(version)
    )
}

/// Every transfer with its finish and FX rows, in seq order (columns as
/// `sqlite_history::joined` reads them), for a store of `version`.
fn whole_history_query(version: i64) -> String {
    format!(
        "SELECT {} FROM {} ORDER BY t.seq",
        joined_columns(version),
        joined_from(version)
    )
}

/// Takes the data directory's write lock (`kasi.lock`). On failure, the
/// lock file's path and the error: `None` when another process holds it.
fn lock_data_dir(data_dir: &Path) -> Result<File, (PathBuf, Option<StoreError>)> {
    let lock_path = data_dir.join(LOCK_FILE);
    let lock = match File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
    {
        Ok(lock) => lock,
        Err(e) => {
            let error = StoreError::fatal(format!("cannot open {}: {e}", lock_path.display()));
            return Err((lock_path, Some(error)));
        }
    };
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(_) => Err((lock_path, None)),
    }
}

/// The first rowid of `table` whose `column` (an instant that grows with
/// the rowid: rows appended as time goes) is at or after `since_ms`, one
/// past the last if none: by bisection, ~30 index reads however long the
/// table.
fn first_rowid_since(
    connection: &Connection,
    table: &str,
    column: &str,
    since_ms: i64,
) -> Result<i64, StoreError> {
    let last: Option<i64> =
        connection.query_row(&format!("SELECT MAX(rowid) FROM {table}"), [], |row| {
            row.get(0)
        })?;
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {column} FROM {table} WHERE rowid >= ?1 ORDER BY rowid LIMIT 1"
    ))?;
    let (mut low, mut high) = (0, last.unwrap_or(0) + 1);
    while low < high {
        let middle = low + (high - low) / 2;
        let at_ms: Option<i64> = statement
            .query_row(params![middle], |row| row.get(0))
            .optional()?;
        match at_ms {
            Some(at_ms) if at_ms >= since_ms => high = middle,
            _ => low = middle + 1,
        }
    }
    Ok(low)
}

/// A `quotes` row, from its nine columns in table order.
fn quote_row(row: &Row<'_>) -> Result<QuoteRow, StoreError> {
    let answer = match row.get_ref(5)? {
        ValueRef::Null => None,
        _ => Some(QuoteAnswer {
            request_hash: RequestHash(blob(row, 5)?),
            is_error: row.get(6)?,
            body: row.get(7)?,
            answered_at_ms: row.get(8)?,
        }),
    };
    Ok(QuoteRow {
        quote_id: id_blob(row, 0)?,
        payer: ParticipantId(row.get(1)?),
        payee: ParticipantId(row.get(2)?),
        request_hash: RequestHash(blob(row, 3)?),
        received_at_ms: row.get(4)?,
        answer,
    })
}

/// A [`TransferId`] column: 16 bytes for a UUID, 17 for a ULID.
pub(crate) fn id_blob(row: &Row<'_>, column: usize) -> Result<TransferId, StoreError> {
    match row.get_ref(column)? {
        ValueRef::Blob(bytes) => TransferId::from_blob(bytes).ok_or_else(|| {
            StoreError::fatal(format!(
                "column {column} holds {} bytes, not an id",
                bytes.len()
            ))
        }),
        other => Err(StoreError::fatal(format!(
            "column {column} is stored as {:?}, not a blob",
            other.data_type()
        ))),
    }
}

/// A `transfers` row, from a query of its columns in table order (the
/// external reference and memo at 12 and 13, the wire version at 14) and
/// its `transfer_fx` row's (from 15, as [`transfer_columns`] selects them).
pub(crate) fn transfer_row(row: &Row<'_>) -> Result<TransferRow, StoreError> {
    let kind = parse(row, 2, "transfer kind", TransferKind::parse)?;
    let external_reference: Option<String> = row.get(12)?;
    let reason: Option<String> = row.get(13)?;
    let memo = match (external_reference, reason) {
        (None, None) => None,
        (external_reference, reason) => Some(Box::new(FundsMemo {
            external_reference: external_reference.unwrap_or_default(),
            reason: reason.unwrap_or_default(),
        })),
    };
    let seq = row.get::<_, i64>(0)? as u64;
    Ok(TransferRow {
        seq,
        transfer_id: id_blob(row, 1)?,
        kind,
        debit: AccountId(row.get(3)?),
        credit: AccountId(row.get(4)?),
        amount: parse(row, 5, "amount", |t| Amount::parse_signed(t).ok())?,
        condition: match row.get_ref(6)? {
            ValueRef::Null => Condition::default(),
            _ => Condition(blob(row, 6)?),
        },
        expiration_ms: row.get::<_, Option<i64>>(7)?.unwrap_or(i64::MAX),
        prepared_at_ms: row.get(8)?,
        request_hash: RequestHash(blob(row, 9)?),
        state: parse(row, 10, "transfer state", TransferState::parse)?,
        reason: row.get::<_, Option<u16>>(11)?.map(ErrorCode),
        memo,
        wire_version: row.get(14)?,
        fx: fx_link(row, seq, 15)?,
    })
}

/// A transfer's FX link from its `transfer_fx` columns (the row's seq
/// first) at `at`; `None` without a row.
fn fx_link(row: &Row<'_>, seq: u64, at: usize) -> Result<Option<ledger::FxLink>, StoreError> {
    if let ValueRef::Null = row.get_ref(at)? {
        return Ok(None);
    }
    let id = |column: usize| match row.get_ref(column)? {
        ValueRef::Null => Ok(None),
        _ => id_blob(row, column).map(Some),
    };
    let text = |column: usize| row.get::<_, Option<String>>(column);
    let columns = crate::FxColumns {
        determining_transfer_id: id(at + 1)?,
        target_currency: match text(at + 2)? {
            None => None,
            Some(code) => Some(Currency::parse(&code).ok_or_else(|| {
                StoreError::fatal(format!("bad target currency {code:?} in the store"))
            })?),
        },
        target_amount: match text(at + 3)? {
            None => None,
            Some(amount) => Some(Amount::parse_signed(&amount).map_err(|_| {
                StoreError::fatal(format!("bad target amount {amount:?} in the store"))
            })?),
        },
        commit_request_id: id(at + 4)?,
        payer: row.get::<_, Option<u32>>(at + 5)?.map(ParticipantId),
    };
    columns.link(seq).map(Some)
}

/// A `conversion_fulfils` row from its four columns at `at` (as
/// [`joined_columns`] selects them); `None` when they are NULL.
pub(crate) fn conversion_fulfil_row(
    row: &Row<'_>,
    at: usize,
) -> Result<Option<ConversionFulfilRow>, StoreError> {
    if let ValueRef::Null = row.get_ref(at)? {
        return Ok(None);
    }
    Ok(Some(ConversionFulfilRow {
        seq: row.get::<_, i64>(at)? as u64,
        fulfilment: Fulfilment::from_preimage(blob(row, at + 1)?),
        request_hash: RequestHash(blob(row, at + 2)?),
        at_ms: row.get(at + 3)?,
    }))
}

/// A `transfer_finishes` row, from its nine columns starting at `at` (as
/// [`finish_columns`] selects them).
pub(crate) fn finish_row(row: &Row<'_>, at: usize) -> Result<FinishRow, StoreError> {
    Ok(FinishRow {
        seq: row.get::<_, i64>(at)? as u64,
        kind: parse(row, at + 1, "finish kind", FinishKind::parse)?,
        state: parse(row, at + 2, "transfer state", TransferState::parse)?,
        reason: row.get::<_, Option<u16>>(at + 3)?.map(ErrorCode),
        finished_at_ms: row.get(at + 4)?,
        request_hash: RequestHash(blob(row, at + 5)?),
        fulfilment: match row.get_ref(at + 6)? {
            ValueRef::Null => None,
            _ => Some(Fulfilment::from_preimage(blob(row, at + 6)?)),
        },
        settlement_window: row.get(at + 7)?,
        cause: abort_cause(row, at + 8)?,
    })
}

/// A finish's nullable `cause` column.
fn abort_cause(row: &Row<'_>, at: usize) -> Result<Option<AbortCause>, StoreError> {
    match row.get_ref(at)? {
        ValueRef::Null => Ok(None),
        _ => parse(row, at, "abort cause", AbortCause::parse).map(Some),
    }
}

/// Answers for transfers that left the ledger's memory: a read-only
/// connection of its own (WAL lets it read while the store thread writes),
/// used by the hub off the ledger thread.
pub struct TransferLookup {
    connection: std::sync::Mutex<Connection>,
    /// Searches' own: a long one does not hold up point reads.
    search_connection: std::sync::Mutex<Connection>,
}

impl std::fmt::Debug for TransferLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TransferLookup")
    }
}

impl StoreReader for TransferLookup {
    fn find_transfer(&self, transfer_id: TransferId) -> Result<Option<StoredTransfer>, StoreError> {
        self.find(transfer_id)
    }

    fn find_quote(&self, quote_id: TransferId) -> Result<Option<QuoteRow>, StoreError> {
        TransferLookup::find_quote(self, quote_id)
    }

    fn transfers_touched_since(&self, since_ms: i64) -> Result<Vec<Touched>, StoreError> {
        let connection = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        touched_since(&connection, since_ms)
    }

    fn search_transfers(&self, query: &TransferQuery) -> Result<SearchPage, StoreError> {
        let connection = self
            .search_connection
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        search::search(&mut SqliteSearch(&connection), query)
    }

    fn statement(
        &self,
        query: &crate::statement::StatementQuery,
    ) -> Result<Option<crate::statement::StatementPage>, StoreError> {
        let connection = self
            .search_connection
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        crate::statement::statement(&mut SqliteStatement(&connection), query)
    }
}

/// [`crate::statement::statement`] on a SQLite connection.
pub(crate) struct SqliteStatement<'c>(pub(crate) &'c Connection);

impl crate::statement::StatementSql for SqliteStatement<'_> {
    fn dialect(&self) -> search::Dialect {
        search::Dialect::Sqlite
    }

    fn begin(&mut self) -> Result<(), StoreError> {
        Ok(self.0.execute_batch("BEGIN")?)
    }

    fn end(&mut self) -> Result<(), StoreError> {
        Ok(self.0.execute_batch("COMMIT")?)
    }

    fn rows(
        &mut self,
        sql: &str,
        params: &[search::Param],
    ) -> Result<Vec<Vec<crate::statement::Cell>>, StoreError> {
        use crate::statement::Cell;
        let values = sqlite_values(params);
        let mut statement = self.0.prepare_cached(sql)?;
        let columns = statement.column_count();
        let mut rows = statement.query(rusqlite::params_from_iter(values))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let mut cells = Vec::with_capacity(columns);
            for at in 0..columns {
                cells.push(match row.get_ref(at)? {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(n) => Cell::Int(n),
                    ValueRef::Real(x) => Cell::Text(x.to_string()),
                    ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
                });
            }
            out.push(cells);
        }
        Ok(out)
    }
}

/// A query's parameters as SQLite binds them.
fn sqlite_values(params: &[search::Param]) -> Vec<rusqlite::types::Value> {
    params
        .iter()
        .map(|param| match param {
            search::Param::Int(n) => rusqlite::types::Value::Integer(*n),
            search::Param::Text(text) => rusqlite::types::Value::Text(text.clone()),
        })
        .collect()
}

/// The first column of each row of `statement`, as integers.
fn first_integers(
    statement: &mut rusqlite::Statement<'_>,
    params: &[search::Param],
) -> Result<Vec<i64>, StoreError> {
    let rows = statement.query_map(rusqlite::params_from_iter(sqlite_values(params)), |row| {
        row.get(0)
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// [`search::search`] on a SQLite connection.
struct SqliteSearch<'c>(&'c Connection);

impl search::SearchSql for SqliteSearch<'_> {
    fn dialect(&self) -> search::Dialect {
        search::Dialect::Sqlite
    }

    fn integers(&mut self, sql: &str, params: &[search::Param]) -> Result<Vec<i64>, StoreError> {
        first_integers(&mut *self.0.prepare_cached(sql)?, params)
    }

    fn integers_once(
        &mut self,
        sql: &str,
        params: &[search::Param],
    ) -> Result<Vec<i64>, StoreError> {
        first_integers(&mut self.0.prepare(sql)?, params)
    }

    fn keyed_blobs(
        &mut self,
        sql: &str,
        params: &[search::Param],
    ) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
        let values = sqlite_values(params);
        let mut statement = self.0.prepare_cached(sql)?;
        let rows = statement.query_map(rusqlite::params_from_iter(values), |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn views(&mut self, seqs: &[u64]) -> Result<Vec<(u64, StoredTransfer)>, StoreError> {
        static SQL: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| format!("SELECT {} WHERE t.seq = ?1", view_select()));
        let mut statement = self.0.prepare_cached(&SQL)?;
        let mut views = Vec::with_capacity(seqs.len());
        for &seq in seqs {
            let mut rows = statement.query(params![seq as i64])?;
            if let Some(row) = rows.next()? {
                views.push((seq, stored_transfer(row)?));
            }
        }
        Ok(views)
    }
}

impl TransferLookup {
    /// Opens the store in `data_dir` read-only (it must exist: open the
    /// writable store first).
    pub fn open(data_dir: &Path) -> Result<TransferLookup, StoreError> {
        TransferLookup::open_file(&data_dir.join(DATABASE_FILE))
    }

    fn open_file(path: &Path) -> Result<TransferLookup, StoreError> {
        let open = || -> Result<Connection, StoreError> {
            let connection = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            connection.busy_timeout(WRITER_BUSY_TIMEOUT)?;
            Ok(connection)
        };
        let connection = open()?;
        Ok(TransferLookup {
            search_connection: std::sync::Mutex::new(open()?),
            connection: std::sync::Mutex::new(connection),
        })
    }

    /// The recorded quote (persistent mode) with this id, if the store has
    /// it. Blocking, like [`TransferLookup::find`].
    pub fn find_quote(&self, quote_id: TransferId) -> Result<Option<QuoteRow>, StoreError> {
        let connection = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        find_quote(&connection, quote_id)
    }

    /// The transfer with this id, if the store has it. Blocking: call it
    /// where blocking is allowed.
    pub fn find(&self, transfer_id: TransferId) -> Result<Option<StoredTransfer>, StoreError> {
        let connection = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        find_transfer(&connection, transfer_id)
    }
}

impl Prefetch for TransferLookup {
    fn prefetch(&mut self, ids: &PrefetchIds) -> Result<Prefetched, StoreError> {
        let connection = self.connection.get_mut().unwrap_or_else(|e| e.into_inner());
        // One read transaction: every answer from the same commit.
        let transaction = connection.transaction()?;
        let prefetched = prefetch(&transaction, ids);
        transaction.commit()?;
        Ok(prefetched)
    }
}

/// The store's answers for `ids` (see [`Prefetch::prefetch`]): indexed
/// point reads, each id on its own so that an unreadable row refuses only
/// the command naming it.
fn prefetch(connection: &Connection, ids: &PrefetchIds) -> Prefetched {
    let mut unreadable = Vec::new();
    let transfers = ids
        .transfers
        .iter()
        .map(|&id| {
            let found = find_transfer(connection, id);
            (id, lookup(found, || id.to_string(), &mut unreadable))
        })
        .collect();
    let quotes = ids
        .quotes
        .iter()
        .map(|&id| {
            let found = find_quote(connection, id);
            (id, lookup(found, || format!("quote {id}"), &mut unreadable))
        })
        .collect();
    let conversions = ids
        .conversions
        .iter()
        .map(|&id| {
            let found = find_conversion_for(connection, id);
            let what = || format!("the conversion for transfer {id}");
            (id, lookup(found, what, &mut unreadable))
        })
        .collect();
    Prefetched {
        transfers,
        quotes,
        conversions,
        unreadable,
    }
}

/// One id's answer; a row that cannot be read is said in `unreadable`
/// (named by `what`) and answered `Failed`.
fn lookup<T>(
    found: Result<Option<T>, StoreError>,
    what: impl FnOnce() -> String,
    unreadable: &mut Vec<String>,
) -> Lookup<T> {
    match found {
        Ok(Some(row)) => Lookup::Found(row),
        Ok(None) => Lookup::Absent,
        Err(error) => {
            unreadable.push(format!("{}: {error}", what()));
            Lookup::Failed
        }
    }
}

/// The recorded quote (persistent mode) with this id, if `connection`
/// sees it.
fn find_quote(
    connection: &Connection,
    quote_id: TransferId,
) -> Result<Option<QuoteRow>, StoreError> {
    let mut statement = connection.prepare_cached(
        "SELECT quote_id, payer_id, payee_id, request_hash, received_at_ms, answer_hash, answer_is_error,
            answer_body, answered_at_ms FROM quotes WHERE quote_id = ?1",
    )?;
    let mut rows = statement.query(params![quote_id.to_blob().as_slice()])?;
    match rows.next()? {
        Some(row) => Ok(Some(quote_row(row)?)),
        None => Ok(None),
    }
}

/// The transfer with this id, if `connection` sees it. Outer joins: a
/// transfer whose account or participant row is missing is an error, never
/// "not found" (which would let its id be used again).
fn find_transfer(
    connection: &Connection,
    transfer_id: TransferId,
) -> Result<Option<StoredTransfer>, StoreError> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "SELECT {VIEW_SELECT} WHERE t.transfer_id = ?1",
            VIEW_SELECT = view_select()
        )
    });
    let mut statement = connection.prepare_cached(&SQL)?;
    let mut rows = statement.query(params![transfer_id.to_blob().as_slice()])?;
    match rows.next()? {
        Some(row) => stored_transfer(row).map(Some),
        None => Ok(None),
    }
}

/// The latest conversion (the highest seq) whose determining transfer is
/// `determining`, if `connection` sees one: by `transfer_fx`'s index.
fn find_conversion_for(
    connection: &Connection,
    determining: TransferId,
) -> Result<Option<StoredTransfer>, StoreError> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "SELECT {} WHERE t.seq = (SELECT max(seq) FROM transfer_fx WHERE determining_transfer_id = ?1)",
            view_select()
        )
    });
    let mut statement = connection.prepare_cached(&SQL)?;
    let mut rows = statement.query(params![determining.to_blob().as_slice()])?;
    match rows.next()? {
        Some(row) => stored_transfer(row).map(Some),
        None => Ok(None),
    }
}

/// What [`stored_transfer`] reads: a transfer with its finish and FX
/// rows, the names of its accounts' participants, its currency and a
/// dependent transfer's FSPIOP payer (of a store at the current version:
/// the hub's reads are of a store a hub opened, which migrated it); a
/// `WHERE` to follow.
fn view_select() -> String {
    format!(
        "{}, pd.name, pc.name, ad.currency, pp.name
         FROM {}
         LEFT JOIN accounts ad ON ad.id = t.debit_account_id
         LEFT JOIN participants pd ON pd.id = ad.participant_id
         LEFT JOIN accounts ac ON ac.id = t.credit_account_id
         LEFT JOIN participants pc ON pc.id = ac.participant_id
         LEFT JOIN participants pp ON pp.id = x.payer_id",
        joined_columns(SCHEMA_VERSION),
        joined_from(SCHEMA_VERSION)
    )
}

/// Where a row of [`view_select`] has the names and currency: after
/// [`joined_columns`]' last, the acceptance's four.
const NAMES_AT: usize = FULFIL_AT + 4;

/// A transfer as the hub's reads give it, from a row of [`view_select`].
fn stored_transfer(row: &Row<'_>) -> Result<StoredTransfer, StoreError> {
    let transfer = transfer_row(row)?;
    let finish = match row.get_ref(FINISH_AT)? {
        ValueRef::Null => None,
        _ => Some(finish_row(row, FINISH_AT)?),
    };
    let accepted = conversion_fulfil_row(row, FULFIL_AT)?;
    let name = |at: usize| parse(row, at, "participant name", FspName::new);
    let fx_payer = match transfer.fx {
        Some(ledger::FxLink::Dependent { .. }) => Some(name(NAMES_AT + 3)?),
        _ => None,
    };
    let parties = ledger::StoredParties {
        debit_owner: name(NAMES_AT)?,
        credit_owner: name(NAMES_AT + 1)?,
        fx_payer,
    };
    Ok(StoredTransfer::from_rows(
        &transfer,
        finish.as_ref(),
        parties,
        parse(row, NAMES_AT + 2, "currency", Currency::parse)?,
        accepted.as_ref(),
    ))
}

impl Store for SqliteStore {
    fn commit(&mut self, batches: &[&[Record]]) -> Result<(), StoreError> {
        self.write(batches)
    }

    fn set_feed_listener(&mut self, listener: crate::feed::FeedListener) {
        self.feed_listener = Some(listener);
    }

    fn prefetch(&mut self, ids: &PrefetchIds) -> Result<Prefetched, StoreError> {
        // One read transaction for them all, on the writer's connection:
        // nobody else writes, so its page cache is still valid after its
        // own commits, and a fresh id's index probe reads no page from disk.
        let transaction = self.connection.transaction()?;
        let prefetched = prefetch(&transaction, ids);
        transaction.commit()?;
        Ok(prefetched)
    }

    fn open_prefetcher(&self) -> Result<Box<dyn Prefetch>, StoreError> {
        Ok(Box::new(TransferLookup::open_file(&self.path)?))
    }

    fn load(&mut self) -> Result<Snapshot, StoreError> {
        self.read(None)
    }

    fn load_recent(&mut self, horizon_ms: i64) -> Result<Snapshot, StoreError> {
        self.read(Some(horizon_ms))
    }

    fn history_snapshot_through(&self) -> Option<u64> {
        self.loaded_history_through
    }

    fn forget_history_snapshot(&mut self) -> Result<bool, StoreError> {
        if self.loaded_history_through.take().is_none() {
            return Ok(false);
        }
        if let Some(history) = &self.history {
            history.shared.forget();
        }
        let transaction = self.connection.transaction()?;
        sqlite_history::forget(&transaction)?;
        transaction.commit()?;
        self.history_kept_written = None;
        Ok(true)
    }

    fn describe(&self) -> String {
        format!("sqlite {}", self.path.display())
    }
}

/// What [`SqliteStore::backup`] copied.
#[derive(Debug)]
pub struct BackupSummary {
    pub pages: i32,
    pub bytes: u64,
    pub schema_version: i64,
}

impl SqliteStore {
    /// Copies the store in `data_dir` to the new file `to`, consistent as of
    /// one instant, while a hub may keep writing: SQLite's online backup
    /// API copies every page in one step under one read transaction (the
    /// write-ahead log lets the writer go on). The copy is written beside
    /// `to` and renamed into place once complete and synced, as one file
    /// with a rollback journal (no write-ahead log to carry along).
    pub fn backup(data_dir: &Path, to: &Path) -> Result<BackupSummary, StoreError> {
        if to.exists() {
            return Err(StoreError::fatal(format!(
                "{} exists: a backup never overwrites a file",
                to.display()
            )));
        }
        let source = SqliteStore::open_read_only(data_dir)?;
        let partial = to.with_extension("partial");
        let _ = std::fs::remove_file(&partial);
        let mut copy = Connection::open(&partial)?;
        let pages = {
            let backup = rusqlite::backup::Backup::new(&source.connection, &mut copy)?;
            backup.step(-1)?;
            backup.progress().pagecount
        };
        copy.pragma_update(None, "journal_mode", "DELETE")?;
        let schema_version: i64 =
            copy.pragma_query_value(None, "user_version", |row| row.get(0))?;
        drop(copy);
        let file = std::fs::File::open(&partial)
            .map_err(|e| StoreError::fatal(format!("cannot reopen {}: {e}", partial.display())))?;
        file.sync_all()
            .map_err(|e| StoreError::fatal(format!("cannot sync {}: {e}", partial.display())))?;
        let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
        std::fs::rename(&partial, to).map_err(|e| {
            StoreError::fatal(format!(
                "cannot rename {} to {}: {e}",
                partial.display(),
                to.display()
            ))
        })?;
        if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
            if let Ok(dir) = std::fs::File::open(parent) {
                let _ = dir.sync_all();
            }
        }
        Ok(BackupSummary {
            pages,
            bytes,
            schema_version,
        })
    }
}

#[cfg(test)]
mod busy_tests {
    use super::*;

    #[test]
    fn the_writer_tries_again_every_100_us_for_five_seconds() {
        assert!(writer_busy(0));
        assert!(writer_busy(49_999));
        assert!(!writer_busy(50_000));
        assert!(!writer_busy(i32::MAX));
    }
}
