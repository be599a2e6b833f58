//! The PostgreSQL store: the same rows as the SQLite store, in a database
//! many kasi processes can reach (and PostgreSQL can replicate).
//!
//! One commit is one transaction: `BEGIN`, one multi-row statement per
//! table the batches touch (`INSERT ... SELECT FROM UNNEST($1::bigint[],
//! ...)`: one round trip per table, never one per row), `COMMIT` with
//! `synchronous_commit` at least `on`, so that a commit that returned is
//! flushed on the primary (and on a synchronous standby, where one is
//! configured). Rows that change within one commit (an account touched by
//! several batches) are written once, as they are at its end.
//!
//! The commits of the transfer path (batches of transfers, their finishes
//! and the accounts they move, and nothing else) take one round trip, not
//! six: one statement whose data-modifying CTEs bump the lease's commit
//! count under the fencing check and write the three tables from that
//! count's row (no row, a deposed writer: nothing written), run outside an
//! explicit transaction, so that the statement is its own transaction and
//! its COMMIT, with the flush (and the synchronous standby's), happens
//! before the answer. A connection lost meanwhile is resolved as for the
//! explicit transaction: the commit count it would make is known before it
//! is sent (this process is the only writer under its fencing number).
//!
//! Admin records (a participant, an endpoint, a settlement model, a
//! window, an audit event, ...) come one or a few per admin request; they
//! are written with one statement each.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::str::FromStr;
use std::time::Duration;

use ledger::{
    AccountId, AccountKind, AccountRow, EndpointRow, FspName, OracleRow, ParticipantId,
    ParticipantRow, PartyKey, PartyRow, ProxyMapRow, QuoteRow, Record, SettlementModelRow,
    Snapshot, TransferRow,
};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls, Statement, Transaction};

use crate::pg_rows::{
    self, col, conversion_fulfil_row, currency, finish_columns, finish_row, fulfil_columns,
    joined_columns, joined_from, narrow, parsed, parsed_opt, participant, quote_row, transfer_row,
    FINISH_AT, FULFIL_AT, QUOTE_COLUMNS,
};
use crate::pg_schema::{
    AUDIT_SOURCE_SINCE, FX_SINCE, MIGRATIONS, MIGRATION_LOCK, MODE_SINCE, PENDING_SINCE,
    PROXY_SINCE, SCHEMA_VERSION, STORE_KIND,
};
use crate::search::{AccountOwners, PassClock, SearchColumns};
use crate::{Store, StoreError};

/// The tables of a hub's state, in schema order (`kasi_meta` and the
/// lease are the store's own bookkeeping, not the hub's state).
pub const TABLES: &[&str] = &[
    "participants",
    "accounts",
    "transfers",
    "transfer_finishes",
    "endpoints",
    "settlement_models",
    "parties",
    "quotes",
    "oracles",
    "settlement_windows",
    "settlement_content",
    "settlement_content_accounts",
    "settlement_content_pairs",
    "settlements",
    "settlement_accounts",
    "settlement_entries",
    "audit_events",
    "callback_watermark",
    "dead_letters",
    "certificate_pins",
    "transfer_fx",
    "conversion_fulfils",
    "fxps",
    "pending_changes",
];

/// How long connecting may take before start-up fails with a clear error.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl From<postgres::Error> for StoreError {
    fn from(error: postgres::Error) -> StoreError {
        // Worth retrying: the transaction was rolled back and the cause
        // may pass (a serialization conflict, a deadlock, a full disk, too
        // many connections, a server starting up). A lost connection is
        // not: whether its last COMMIT happened is unknown, so the
        // pipeline stops and recovery reads what is durable.
        //
        // A lost connection is worth retrying for a read (and for a
        // commit, [`PgStore::write`] first finds out whether the COMMIT
        // in flight happened, through the lease's commit count; without
        // a fencing number it cannot, and that retry fails for good).
        let transient = error.is_closed()
            || error.code().is_some_and(|code| {
                matches!(
                    code.code(),
                    "40001"
                        | "40P01"
                        | "55P03"
                        | "53100"
                        | "53200"
                        | "53300"
                        | "57P01"
                        | "57P02"
                        | "57P03"
                )
            });
        StoreError {
            message: describe_error(&error),
            transient,
        }
    }
}

/// A PostgreSQL error with what the server said, or why the connection
/// failed (the client's own message leaves the cause out).
pub(crate) fn describe_error(error: &postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        let mut message = format!("postgres: {} ({})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            let _ = write!(message, ": {detail}");
        }
        return message;
    }
    match std::error::Error::source(error) {
        Some(source) => format!("postgres: {error}: {source}"),
        None => format!("postgres: {error}"),
    }
}

/// The store URL with any password replaced by `***`, for logs and errors.
pub fn redact_url(url: &str) -> String {
    // scheme://user:password@host/... ; key=value form: password=...
    if let Some(at) = url.find("://") {
        let (scheme, rest) = url.split_at(at + 3);
        let authority_end = rest.find('/').unwrap_or(rest.len());
        let mut redacted = url.to_string();
        if let Some(at) = rest[..authority_end].rfind('@') {
            let userinfo = &rest[..at];
            if let Some(colon) = userinfo.find(':') {
                redacted = format!("{scheme}{}:***{}", &userinfo[..colon], &rest[at..]);
            }
        }
        if let Some(query) = redacted.find('?') {
            let (head, tail) = redacted.split_at(query);
            let tail: Vec<String> = tail[1..]
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some(("password", _)) => "password=***".to_string(),
                    _ => pair.to_string(),
                })
                .collect();
            redacted = format!("{head}?{}", tail.join("&"));
        }
        return redacted;
    }
    url.split(' ')
        .map(|pair| match pair.split_once('=') {
            Some(("password", _)) => "password=***".to_string(),
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Connects to `url` (a `postgres://` URL or a key=value string; several
/// hosts and `target_session_attrs=read-write` follow a promoted primary)
/// and makes every commit of the session wait for its flush.
pub(crate) fn connect(url: &str) -> Result<Client, StoreError> {
    let redacted = redact_url(url);
    let mut config = postgres::Config::from_str(url)
        .map_err(|e| StoreError::fatal(format!("bad PostgreSQL URL {redacted}: {e}")))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("kasi");
    }
    // A peer that stops answering (a partition, a host gone) fails the
    // connection within seconds instead of the kernel's many minutes, so a
    // process cut off from its database finds out and lets go.
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(KEEPALIVE_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(KEEPALIVE_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(KEEPALIVE_RETRIES);
    }
    // Keepalive probes only an idle connection; data sent and never
    // acknowledged (a request into a partition) is bounded by this.
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    let mut client = config.connect(NoTls).map_err(|e| StoreError {
        message: format!("cannot connect to {redacted}: {}", describe_error(&e)),
        transient: connect_failure_may_pass(&e),
    })?;
    // A cluster (or role) default of `off`, `local` or `remote_write` must
    // not weaken what a commit means to kasi; `remote_apply` is stronger
    // and kept.
    let level = client
        .query_one("SHOW synchronous_commit", &[])?
        .get::<_, String>(0);
    if level != "on" && level != "remote_apply" {
        client.batch_execute("SET synchronous_commit = on")?;
    }
    // kasi's queries are short and walk indexes; a plan whose estimate
    // passes `jit_above_cost` (a search's key walk over ten million rows,
    // cut short by its LIMIT) spent ~25 ms compiling before it read a row
    // (BENCHMARKS.md, "The back office at 10 M transfers").
    client.batch_execute("SET jit = off")?;
    Ok(client)
}

/// Whether a failed connection attempt may succeed later without anyone
/// changing kasi's configuration: the server down, starting, restarting or
/// full, the network cut. A refused password, a missing database or role
/// will not pass by waiting (an operator must act), so they are fatal.
fn connect_failure_may_pass(error: &postgres::Error) -> bool {
    match error.code() {
        // 28xxx invalid authorization, 3D000 no such database, 42501
        // insufficient privilege.
        Some(code) => !(code.code().starts_with("28") || matches!(code.code(), "3D000" | "42501")),
        None => true,
    }
}

/// TCP keepalive on every connection (unless the URL sets its own): idle
/// this long, then probed every [`KEEPALIVE_INTERVAL`], given up after
/// [`KEEPALIVE_RETRIES`] unanswered probes (about 10 s in all).
const KEEPALIVE_IDLE: Duration = Duration::from_secs(4);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
const KEEPALIVE_RETRIES: u32 = 3;
/// How long data sent on a connection may go unacknowledged before the
/// connection fails (Linux `TCP_USER_TIMEOUT`).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);

/// What a database holds, as far as kasi is concerned.
enum Found {
    /// No tables at all: kasi may create its schema.
    Empty,
    /// A kasi store at this schema version.
    Kasi(i64),
}

/// Reads the store's kind and version; refuses anything that is neither
/// empty nor a kasi store this kasi can read.
fn inspect(transaction: &mut Transaction<'_>, redacted: &str) -> Result<Found, StoreError> {
    let has_meta: bool = transaction
        .query_one("SELECT to_regclass('kasi_meta') IS NOT NULL", &[])?
        .get(0);
    if !has_meta {
        let tables: i64 = transaction
            .query_one(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()",
                &[],
            )?
            .get(0);
        if tables > 0 {
            return Err(StoreError::fatal(format!(
                "{redacted} holds {tables} tables but no kasi_meta: it is not a kasi store \
                 (another application's database?); give kasi an empty database of its own"
            )));
        }
        return Ok(Found::Empty);
    }
    let meta: HashMap<String, String> = transaction
        .query("SELECT key, value FROM kasi_meta", &[])?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    if meta.get("kind").map(String::as_str) != Some(STORE_KIND) {
        return Err(StoreError::fatal(format!(
            "{redacted} has a kasi_meta table that kasi did not write (kind {:?}): refusing to use it",
            meta.get("kind")
        )));
    }
    let version = meta
        .get("schema_version")
        .and_then(|v| v.parse::<i64>().ok())
        .ok_or_else(|| {
            StoreError::fatal(format!(
                "{redacted}: kasi_meta has no readable schema_version"
            ))
        })?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::fatal(format!(
            "{redacted} has schema version {version}; this kasi reads versions 1 to {SCHEMA_VERSION} \
             (a newer kasi wrote it: run that one, or a newer build of this one)"
        )));
    }
    Ok(Found::Kasi(version))
}

/// Creates or migrates the schema, under a lock so that two hubs starting
/// at once on an empty database do not both try.
fn migrate(client: &mut Client, redacted: &str) -> Result<(), StoreError> {
    let mut transaction = client.transaction()?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    let from = match inspect(&mut transaction, redacted)? {
        Found::Empty => 0,
        Found::Kasi(version) => version,
    };
    if from == SCHEMA_VERSION {
        return Ok(());
    }
    for migration in &MIGRATIONS[from as usize..] {
        transaction.batch_execute(migration)?;
    }
    transaction.execute(
        "INSERT INTO kasi_meta (key, value) VALUES ('kind', $1), ('schema_version', $2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        &[&STORE_KIND, &SCHEMA_VERSION.to_string()],
    )?;
    transaction.commit()?;
    Ok(())
}

/// A commit of a deposed active: fatal, nothing of it was written.
fn deposed(mine: i64, now: i64) -> StoreError {
    StoreError::fatal(format!(
        "deposed: the lease's fencing number is {now}, this process holds {mine}; \
         another kasi took over and this one must not write again"
    ))
}

/// A table the transfer path writes, as `INSERT ... SELECT FROM UNNEST` of
/// one typed array per column: the same text for its own statement and
/// inside the one-statement commit.
struct UnnestTable {
    /// `INSERT INTO table (columns)`.
    insert: &'static str,
    /// The arrays' element types, in column order.
    types: &'static [&'static str],
    /// What follows the SELECT (an `ON CONFLICT` clause, or nothing).
    tail: &'static str,
}

impl UnnestTable {
    /// `UNNEST($first::type[], ...)`.
    fn unnest(&self, first: usize) -> String {
        let arrays: Vec<String> = self
            .types
            .iter()
            .enumerate()
            .map(|(i, ty)| format!("${}::{ty}[]", first + i))
            .collect();
        format!("UNNEST({})", arrays.join(", "))
    }

    /// Its own statement, the arrays as $1...
    fn statement(&self) -> String {
        format!(
            "{} SELECT * FROM {} {}",
            self.insert,
            self.unnest(1),
            self.tail
        )
    }

    /// A CTE of the one-statement commit: rows only if `lease` has one.
    fn in_commit(&self, name: &str, first: usize) -> String {
        format!(
            "{name} AS ({} SELECT u.* FROM {} AS u, lease {})",
            self.insert,
            self.unnest(first),
            self.tail
        )
    }
}

const TRANSFERS: UnnestTable = UnnestTable {
    insert: "INSERT INTO transfers (seq, transfer_id, kind, debit_account_id, credit_account_id, amount,
        condition, expiration_ms, prepared_at_ms, request_hash, state, reason, external_reference, memo,
        wire_version, payer_id, payee_id, currency, amount_units, payer_party, payee_party)",
    types: &[
        "bigint", "bytea", "text", "bigint", "bigint", "text", "bytea", "bigint", "bigint", "bytea",
        "text", "integer", "text", "text", "integer", "bigint", "bigint", "text", "bigint", "text",
        "text",
    ],
    tail: "",
};

const FINISHES: UnnestTable = UnnestTable {
    insert: "INSERT INTO transfer_finishes (seq, kind, state, reason, finished_at_ms, request_hash,
        fulfilment, settlement_window, cause)",
    types: &[
        "bigint", "text", "text", "integer", "bigint", "bytea", "bytea", "bigint", "text",
    ],
    tail: "",
};

const ACCOUNTS: UnnestTable = UnnestTable {
    insert: "INSERT INTO accounts (id, participant_id, currency, kind, is_active, value, reserved,
        net_debit_cap, created_at_ms, changed_at_ms)",
    types: &[
        "bigint", "bigint", "text", "text", "boolean", "text", "text", "text", "bigint", "bigint",
    ],
    tail: "ON CONFLICT (id) DO UPDATE SET is_active = excluded.is_active, value = excluded.value,
        reserved = excluded.reserved, net_debit_cap = excluded.net_debit_cap,
        changed_at_ms = excluded.changed_at_ms",
};

/// The transfer path's commit in one statement (see the module's doc):
/// $1 the fencing number (NULL: a store owned alone), then the arrays of
/// transfers, finishes and accounts, the search pass's range (after,
/// through), and the change feed's arrays. Returns the lease's commit count, or
/// no row (deposed: nothing written).
fn transfer_commit_statement() -> String {
    let finishes_at = 2 + TRANSFERS.types.len();
    let accounts_at = finishes_at + FINISHES.types.len();
    let pass_at = accounts_at + ACCOUNTS.types.len();
    // After the pass's two parameters (`after`, `through`).
    let changes_at = pass_at + 2;
    // The keys filed in the commit from the arrays already sent (seq,
    // state and reason of the transfers, then of the finishes with their
    // window); the pass's from the transfers committed before (this
    // statement cannot see its own).
    let commit_keys = commit_keys_select([
        2,
        2 + TRANSFER_STATE,
        2 + TRANSFER_REASON,
        finishes_at,
        finishes_at + FINISH_STATE,
        finishes_at + FINISH_REASON,
        finishes_at + FINISH_WINDOW,
    ]);
    format!(
        "WITH lease AS (UPDATE kasi_lease SET commits = commits + 1
             WHERE id = 1 AND ($1::bigint IS NULL OR fencing = $1) RETURNING commits),
         {}, {}, {},
         commit_keys AS (INSERT INTO transfer_keys (key, seq)
             SELECT k.key, k.seq FROM lease, ({commit_keys}) AS k ON CONFLICT DO NOTHING),
         passed AS (INSERT INTO transfer_keys (key, seq)
             SELECT k.key, k.seq FROM lease, ({}) AS k ON CONFLICT DO NOTHING),
         indexed AS ({}), {}
         SELECT commits FROM lease",
        TRANSFERS.in_commit("transfers_written", 2),
        FINISHES.in_commit("finishes_written", finishes_at),
        ACCOUNTS.in_commit("accounts_written", accounts_at),
        crate::search::pass_select(crate::search::Dialect::Postgres, pass_at, pass_at + 1),
        search_index_statement(pass_at, pass_at + 1, "FROM lease"),
        CHANGES.in_commit("changes_written", changes_at),
    )
}

/// Where [`TRANSFERS`]' state and reason are, and [`FINISHES`]' (and
/// their window).
const TRANSFER_STATE: usize = 10;
const TRANSFER_REASON: usize = 11;
const FINISH_STATE: usize = 2;
const FINISH_REASON: usize = 3;
const FINISH_WINDOW: usize = 7;

/// The search keys filed in a commit (`search::commit_keys`) of the rows
/// given as arrays: the parameters' numbers of the transfers' seqs,
/// states and reasons, then the finishes' and their windows.
fn commit_keys_select(
    [seq, state, reason, finish_seq, finish_state, finish_reason, finish_window]: [usize; 7],
) -> String {
    let failures = |seq: usize, state: usize, reason: usize| {
        format!(
            "SELECT 's:' || x.state AS key, x.seq FROM UNNEST(${seq}::bigint[], ${state}::text[]) AS x (seq, state)
                 WHERE x.state NOT IN ('COMMITTED', 'RESERVED')
             UNION SELECT 'e:' || x.reason, x.seq FROM UNNEST(${seq}::bigint[], ${reason}::integer[]) AS x (seq, reason)
                 WHERE x.reason IS NOT NULL"
        )
    };
    format!(
        "{} UNION {}
         UNION SELECT 'w:' || x.window_id, x.seq
             FROM UNNEST(${finish_seq}::bigint[], ${finish_window}::bigint[]) AS x (seq, window_id)
             WHERE x.window_id IS NOT NULL",
        failures(seq, state, reason),
        failures(finish_seq, finish_state, finish_reason)
    )
}

/// Moves `search_index` to the pass's end (parameter `through`) when a
/// pass ran (`through` above `after`), never back (a writer that took
/// over with an older idea of it files some keys again, harmlessly).
fn search_index_statement(after: usize, through: usize, from: &str) -> String {
    format!(
        "INSERT INTO search_index (id, through_seq) SELECT 1, ${through}::bigint {from}
             WHERE ${through}::bigint > ${after}::bigint
         ON CONFLICT (id) DO UPDATE SET through_seq = GREATEST(search_index.through_seq, excluded.through_seq)"
    )
}

/// The change feed's rows (`pg_feed.rs`).
const CHANGES: UnnestTable = UnnestTable {
    insert: crate::pg_feed::CHANGES_INSERT,
    types: crate::pg_feed::CHANGES_TYPES,
    tail: "",
};

/// The statements a commit writes with, prepared once per connection.
struct Statements {
    count_commit: Statement,
    transfer_commit: Statement,
    participant: Statement,
    accounts: Statement,
    transfers: Statement,
    finishes: Statement,
    endpoint: Statement,
    settlement_model: Statement,
    parties: Statement,
    parties_deleted: Statement,
    oracle: Statement,
    proxy_mapping: Statement,
    proxy_unmapped: Statement,
    oracle_deleted: Statement,
    quotes: Statement,
    window: Statement,
    content: Statement,
    content_accounts: Statement,
    content_pairs: Statement,
    settlement: Statement,
    settlement_accounts: Statement,
    entries: Statement,
    audit_event: Statement,
    pin: Statement,
    unpin: Statement,
    transfer_fx: Statement,
    conversion_fulfils: Statement,
    fxp: Statement,
    fxp_withdrawn: Statement,
    pending_change: Statement,
    commit_keys: Statement,
    pass: Statement,
    search_index: Statement,
    changes: Statement,
}

impl Statements {
    fn prepare(client: &mut Client) -> Result<Statements, StoreError> {
        let mut prepare = |sql: &str| client.prepare(sql);
        Ok(Statements {
            count_commit: prepare(
                "UPDATE kasi_lease SET commits = commits + 1 WHERE id = 1 AND fencing = $1 RETURNING commits",
            )?,
            transfer_commit: prepare(&transfer_commit_statement())?,
            participant: prepare(
                "INSERT INTO participants (id, name, is_hub, is_active, created_at_ms, mode, is_proxy)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (id) DO UPDATE SET is_active = excluded.is_active, mode = excluded.mode",
            )?,
            proxy_mapping: prepare(
                "INSERT INTO proxy_map (dfsp, proxy_id, by_operator, since_ms) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (dfsp) DO UPDATE SET proxy_id = excluded.proxy_id,
                    by_operator = excluded.by_operator, since_ms = excluded.since_ms",
            )?,
            proxy_unmapped: prepare("DELETE FROM proxy_map WHERE dfsp = $1")?,
            accounts: prepare(&ACCOUNTS.statement())?,
            transfers: prepare(&TRANSFERS.statement())?,
            finishes: prepare(&FINISHES.statement())?,
            endpoint: prepare(
                "INSERT INTO endpoints (participant_id, type, value) VALUES ($1, $2, $3)
                 ON CONFLICT (participant_id, type) DO UPDATE SET value = excluded.value",
            )?,
            settlement_model: prepare(
                "INSERT INTO settlement_models (id, name, definition, granularity, interchange, delay, currency,
                    ledger_account_type, settlement_account_type, auto_position_reset, require_liquidity_check)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            )?,
            parties: prepare(
                "INSERT INTO parties (id_type, identifier, sub_id, participant_id, currency, registered_at_ms)
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bigint[])
                 ON CONFLICT (id_type, identifier, sub_id) DO UPDATE SET participant_id = excluded.participant_id,
                    currency = excluded.currency, registered_at_ms = excluded.registered_at_ms",
            )?,
            parties_deleted: prepare(
                "DELETE FROM parties p USING UNNEST($1::text[], $2::text[], $3::text[]) AS d (id_type, identifier, sub_id)
                 WHERE p.id_type = d.id_type AND p.identifier = d.identifier AND p.sub_id = d.sub_id",
            )?,
            oracle: prepare(
                "INSERT INTO oracles (id, id_type, endpoint, currency, is_default, is_active) VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (id) DO UPDATE SET id_type = excluded.id_type, endpoint = excluded.endpoint,
                    currency = excluded.currency, is_default = excluded.is_default, is_active = excluded.is_active",
            )?,
            oracle_deleted: prepare("UPDATE oracles SET is_active = false WHERE id = $1")?,
            quotes: prepare(
                "INSERT INTO quotes (quote_id, payer_id, payee_id, request_hash, received_at_ms, answer_hash,
                    answer_is_error, answer_body, answered_at_ms)
                 SELECT * FROM UNNEST($1::bytea[], $2::bigint[], $3::bigint[], $4::bytea[], $5::bigint[], $6::bytea[],
                    $7::boolean[], $8::text[], $9::bigint[])
                 ON CONFLICT (quote_id) DO UPDATE SET answer_hash = excluded.answer_hash,
                    answer_is_error = excluded.answer_is_error, answer_body = excluded.answer_body,
                    answered_at_ms = excluded.answered_at_ms",
            )?,
            window: prepare(
                "INSERT INTO settlement_windows (id, state, reason, created_at_ms, changed_at_ms) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (id) DO UPDATE SET state = excluded.state, reason = excluded.reason,
                    changed_at_ms = excluded.changed_at_ms",
            )?,
            content: prepare(
                "INSERT INTO settlement_content (id, window_id, ledger_account_type, currency, model_id, state,
                    settlement_id, created_at_ms, changed_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ON CONFLICT (id) DO UPDATE SET state = excluded.state, settlement_id = excluded.settlement_id,
                    changed_at_ms = excluded.changed_at_ms",
            )?,
            content_accounts: prepare(
                "INSERT INTO settlement_content_accounts (content_id, account_id, sent, sent_count, received,
                    received_count)
                 SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::bigint[])",
            )?,
            content_pairs: prepare(
                "INSERT INTO settlement_content_pairs (content_id, payer_id, payee_id, amount, count)
                 SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[])",
            )?,
            settlement: prepare(
                "INSERT INTO settlements (id, model_id, state, reason, external_reference, created_at_ms,
                    changed_at_ms, windows) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (id) DO UPDATE SET state = excluded.state, reason = excluded.reason,
                    external_reference = excluded.external_reference, changed_at_ms = excluded.changed_at_ms",
            )?,
            settlement_accounts: prepare(
                "INSERT INTO settlement_accounts (settlement_id, account_id, participant_id, currency, net, state,
                    reason, external_reference, changed_at_ms)
                 SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[],
                    $7::text[], $8::text[], $9::bigint[])
                 ON CONFLICT (settlement_id, account_id) DO UPDATE SET state = excluded.state,
                    reason = excluded.reason, external_reference = excluded.external_reference,
                    changed_at_ms = excluded.changed_at_ms",
            )?,
            entries: prepare(
                "INSERT INTO settlement_entries (seq, kind, debit_account_id, credit_account_id, amount, at_ms,
                    settlement_id, transfer_id)
                 SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bigint[],
                    $7::bigint[], $8::bytea[])",
            )?,
            audit_event: prepare(
                "INSERT INTO audit_events (id, at_ms, actor, role, action, target, before, after, outcome, source)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )?,
            pin: prepare(
                "INSERT INTO certificate_pins (fingerprint, participant_id, pinned_at_ms) VALUES ($1, $2, $3)",
            )?,
            unpin: prepare("DELETE FROM certificate_pins WHERE fingerprint = $1")?,
            transfer_fx: prepare(
                "INSERT INTO transfer_fx (seq, determining_transfer_id, target_currency, target_amount,
                    commit_request_id, payer_id)
                 SELECT * FROM UNNEST($1::bigint[], $2::bytea[], $3::text[], $4::text[], $5::bytea[],
                    $6::bigint[])",
            )?,
            conversion_fulfils: prepare(
                "INSERT INTO conversion_fulfils (seq, fulfilment, request_hash, at_ms)
                 SELECT * FROM UNNEST($1::bigint[], $2::bytea[], $3::bytea[], $4::bigint[])",
            )?,
            fxp: prepare(
                "INSERT INTO fxps (participant_id, corridors) VALUES ($1, $2)
                 ON CONFLICT (participant_id) DO UPDATE SET corridors = excluded.corridors",
            )?,
            fxp_withdrawn: prepare("DELETE FROM fxps WHERE participant_id = $1")?,
            changes: prepare(&CHANGES.statement())?,
            pending_change: prepare(&format!(
                "INSERT INTO pending_changes ({}) VALUES
                    ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
                 ON CONFLICT (id) DO UPDATE SET state = excluded.state, checker = excluded.checker,
                    checker_role = excluded.checker_role, decision_reason = excluded.decision_reason,
                    decided_at_ms = excluded.decided_at_ms",
                crate::PENDING_CHANGE_COLUMNS
            ))?,
            commit_keys: prepare(&format!(
                "INSERT INTO transfer_keys (key, seq) SELECT k.key, k.seq FROM ({}) AS k
                 ON CONFLICT DO NOTHING",
                commit_keys_select([1, 2, 3, 4, 5, 6, 7])
            ))?,
            pass: prepare(&format!(
                "INSERT INTO transfer_keys (key, seq) {} ON CONFLICT DO NOTHING",
                crate::search::pass_select(crate::search::Dialect::Postgres, 1, 2)
            ))?,
            search_index: prepare(&search_index_statement(1, 2, ""))?,
        })
    }
}

/// How long a connection that answered a commit with an error has to
/// answer an empty query before it is taken as lost.
const CONNECTION_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The PostgreSQL store (see the module's documentation).
pub struct PgStore {
    client: Client,
    url: String,
    redacted_url: String,
    /// `None` when opened read-only (for `kasi audit`).
    statements: Option<Statements>,
    /// The lease's fencing number every commit checks (see
    /// [`crate::pg_lease`]); `None` for a process that owns the database
    /// alone (tests, `kasi migrate-store`, benchmarks).
    fencing: Option<i64>,
    /// The lease row's commit count the commit in flight makes, once its
    /// fencing check passed: if the connection is lost after that, the
    /// count read after reconnecting says whether the COMMIT happened.
    in_flight: Option<i64>,
    /// The server ended the connection (an administrator's
    /// `pg_terminate_backend`, a shutdown: SQLSTATE 57P01/57P02) though the
    /// client has not seen the socket close yet; see
    /// [`PgStore::lost_during`].
    ended_by_server: bool,
    /// The lease row's commit count after this process's last commit, when
    /// known: the one-statement commit's [`PgStore::in_flight`] is one
    /// more. `None` (after opening, or a commit that failed): the next
    /// commit is an explicit transaction, which learns it.
    commits: Option<i64>,
    /// Commits made in one statement (the transfer path), for tests.
    one_statement_commits: u64,
    /// A standby's copy of what recovery reads, kept current by
    /// [`PgStore::warm`], so that taking over reads only the tail.
    warm: Option<Warm>,
    /// Whether the last load came from the warm copy (so that recovery,
    /// if it does not add up, can ask for a cold load instead).
    loaded_warm: bool,
    /// The history snapshot (`pg_history.rs`).
    pub(crate) history: crate::pg_history::History,
    /// Prepared on the first prefetch, again after a reconnect.
    prefetch_statements: Option<crate::pg_reader::PrefetchStatements>,
    /// Whose each account is, for the transfers' search columns (empty
    /// when opened read-only); read again by each load (a standby opened
    /// the store long before it takes over).
    owners: AccountOwners,
    /// When the writer files the committed transfers' search keys next;
    /// read from the store before the first commit after a load.
    pass: Option<PassClock>,
    search_pass: crate::search::SearchPass,
    /// The change feed's writer state (`feed.rs`): `None` until the first
    /// commit reads it, and again after a commit that failed or a new
    /// fencing number (another process may have written meanwhile).
    feed: Option<crate::feed::FeedState>,
    feed_listener: Option<crate::feed::FeedListener>,
}

/// What a standby keeps loaded (see [`PgStore::warm`]).
struct Warm {
    snapshot: Snapshot,
    /// The horizon the transfers were read with; `None`: all loaded.
    horizon_ms: Option<i64>,
    /// The highest transfer seq read.
    last_seq: i64,
    /// Transfers read without a finish that may still get one.
    open_seqs: Vec<i64>,
    /// The settlement window open when it was read: the summed history's
    /// window sums belong to it, so a close means reading afresh.
    open_window: Option<u32>,
    /// The schema version it was read at.
    version: i64,
    /// The seq its history snapshot summed through, if it started from one.
    history_through: Option<u64>,
}

impl PgStore {
    /// Connects to the database at `url`, creating or migrating kasi's
    /// schema, for writing.
    pub fn open(url: &str) -> Result<PgStore, StoreError> {
        let redacted_url = redact_url(url);
        let mut client = connect(url)?;
        migrate(&mut client, &redacted_url)?;
        let statements = Statements::prepare(&mut client)?;
        let owners = account_owners(&mut client)?;
        Ok(PgStore {
            client,
            url: url.to_string(),
            redacted_url,
            statements: Some(statements),
            fencing: None,
            in_flight: None,
            ended_by_server: false,
            commits: None,
            one_statement_commits: 0,
            warm: None,
            loaded_warm: false,
            history: Default::default(),
            prefetch_statements: None,
            owners,
            pass: None,
            search_pass: Default::default(),
            feed: None,
            feed_listener: None,
        })
    }

    /// Benchmarks only: commits return before their WAL is flushed
    /// (`synchronous_commit = off`), the reference `--fsync off` measures
    /// against. A crash may lose acknowledged work.
    pub fn commit_without_waiting_for_flush(&mut self) -> Result<(), StoreError> {
        self.client.batch_execute("SET synchronous_commit = off")?;
        Ok(())
    }

    /// How often this writer files transfers for search (tests pick
    /// theirs; the default is [`crate::search::SearchPass::default`]).
    pub fn set_search_pass(&mut self, pass: crate::search::SearchPass) {
        self.search_pass = pass;
        self.pass = None;
    }

    /// From now on, every commit checks that the lease's fencing number is
    /// still `fencing` (in its own transaction) and fails if it is not.
    pub fn fence(&mut self, fencing: i64) {
        self.fencing = Some(fencing);
        self.feed = None;
    }

    /// Connects to an existing kasi store to read it (for `kasi audit`):
    /// nothing is created or migrated; a hub may keep writing meanwhile.
    pub fn open_read_only(url: &str) -> Result<PgStore, StoreError> {
        let redacted_url = redact_url(url);
        let mut client = connect(url)?;
        let mut transaction = client.transaction()?;
        if let Found::Empty = inspect(&mut transaction, &redacted_url)? {
            return Err(StoreError::fatal(format!(
                "no kasi store at {redacted_url} (the database is empty)"
            )));
        }
        transaction.commit()?;
        Ok(PgStore {
            client,
            url: url.to_string(),
            redacted_url,
            statements: None,
            fencing: None,
            in_flight: None,
            ended_by_server: false,
            commits: None,
            one_statement_commits: 0,
            warm: None,
            loaded_warm: false,
            history: Default::default(),
            prefetch_statements: None,
            owners: AccountOwners::default(),
            pass: None,
            search_pass: Default::default(),
            feed: None,
            feed_listener: None,
        })
    }

    /// How many commits took the one-statement path (the transfer path).
    pub fn one_statement_commits(&self) -> u64 {
        self.one_statement_commits
    }

    /// The URL, password redacted.
    pub fn redacted_url(&self) -> &str {
        &self.redacted_url
    }

    /// Rows written so far, by table (for logs and tests).
    pub fn row_counts(&mut self) -> Result<Vec<(&'static str, u64)>, StoreError> {
        let mut counts = Vec::new();
        for table in ["participants", "accounts", "transfers", "transfer_finishes"] {
            let count: i64 = self
                .client
                .query_one(&format!("SELECT count(*) FROM {table}"), &[])?
                .get(0);
            counts.push((table, count as u64));
        }
        Ok(counts)
    }

    /// Rows in every table of a hub's state (the ledger's, the audit
    /// events, the callback dispatcher's), in schema order: what `kasi
    /// migrate-store` checks is empty before it copies and prints after.
    pub fn all_row_counts(&mut self) -> Result<Vec<(&'static str, u64)>, StoreError> {
        let mut counts = Vec::with_capacity(TABLES.len());
        for &table in TABLES {
            let count: i64 = self
                .client
                .query_one(&format!("SELECT count(*) FROM {table}"), &[])?
                .get(0);
            counts.push((table, count as u64));
        }
        Ok(counts)
    }

    /// The database's size on disk (for benchmarks).
    pub fn database_bytes(&mut self) -> Result<u64, StoreError> {
        let bytes: i64 = self
            .client
            .query_one("SELECT pg_database_size(current_database())", &[])?
            .get(0);
        Ok(bytes as u64)
    }

    /// Up to `limit` audit events with ids above `after_id`, in id order:
    /// every event, a page at a time (a load keeps only the newest).
    pub fn audit_events_after(
        &mut self,
        after_id: u64,
        limit: usize,
    ) -> Result<Vec<ledger::AuditEventRow>, StoreError> {
        self.client
            .query(
                &format!(
                    "SELECT {} FROM audit_events WHERE id > $1 ORDER BY id LIMIT $2",
                    audit_event_columns(SCHEMA_VERSION)
                ),
                &[&(after_id as i64), &(limit as i64)],
            )?
            .iter()
            .map(audit_event_row)
            .collect()
    }

    fn write(&mut self, batches: &[&[Record]]) -> Result<(), StoreError> {
        if self.statements.is_none() {
            return Err(StoreError::fatal(format!(
                "{} was opened read-only",
                self.redacted_url
            )));
        }
        if self.connection_lost() && self.reconnected_after_commit()? {
            // The commit the engine tries again is the one that was lost
            // in flight, and it did happen.
            return Ok(());
        }
        match self.try_write(batches) {
            Ok(()) => Ok(()),
            Err(error) if self.fencing.is_some() && self.lost_during(&error) => {
                // Whether the COMMIT happened is unknown until we can ask:
                // the engine stops acknowledging and tries again, which
                // reconnects and finds out.
                Err(StoreError::transient(format!(
                    "lost the connection to {} ({error}); reconnecting",
                    self.redacted_url
                )))
            }
            Err(error) => Err(error),
        }
    }

    /// Whether the connection is gone: closed, or ended by the server.
    fn connection_lost(&self) -> bool {
        self.client.is_closed() || self.ended_by_server
    }

    /// Whether a failed commit lost its connection. A server that ends a
    /// connection sends an error (57P01) before it closes the socket, and
    /// the client may read that error before it sees the close: without
    /// the probe, the retry would be sent on the dead connection and fail
    /// again instead of reconnecting and finding out what happened. A
    /// probe that only times out also counts as lost: reconnecting is
    /// always safe under the lease, as the commit count says what
    /// happened.
    fn lost_during(&mut self, error: &StoreError) -> bool {
        if !self.client.is_closed() && error.transient {
            self.ended_by_server = self.client.is_valid(CONNECTION_PROBE_TIMEOUT).is_err();
        }
        self.connection_lost()
    }

    /// Connects again after a lost connection; `true` if the commit that
    /// was in flight when it was lost did commit.
    fn reconnected_after_commit(&mut self) -> Result<bool, StoreError> {
        let Some(fencing) = self.fencing else {
            return Err(StoreError::fatal(format!(
                "lost the connection to {}",
                self.redacted_url
            )));
        };
        let mut client = connect(&self.url).map_err(|e| StoreError::transient(e.message))?;
        let statements = Statements::prepare(&mut client).map_err(|e| StoreError {
            transient: true,
            ..e
        })?;
        let row = client
            .query_one("SELECT fencing, commits FROM kasi_lease WHERE id = 1", &[])
            .map_err(|e| StoreError::transient(describe_error(&e)))?;
        let (now_fencing, commits): (i64, i64) = (row.get(0), row.get(1));
        if now_fencing != fencing {
            return Err(deposed(fencing, now_fencing));
        }
        self.client = client;
        self.ended_by_server = false;
        self.prefetch_statements = None;
        self.statements = Some(statements);
        self.commits = Some(commits);
        Ok(match self.in_flight.take() {
            Some(expected) if commits == expected => true,
            Some(expected) if commits == expected - 1 => false,
            Some(expected) => {
                return Err(StoreError::fatal(format!(
                    "the lease's commit count is {commits}, expected {expected} or one less: \
                     another writer under the same fencing number?"
                )))
            }
            None => false,
        })
    }

    fn try_write(&mut self, batches: &[&[Record]]) -> Result<(), StoreError> {
        if self.pass.is_none() {
            let row = self.client.query_one(
                "SELECT (SELECT COALESCE(MAX(through_seq), 0) FROM search_index),
                        (SELECT COALESCE(MAX(seq), 0) FROM transfers)",
                &[],
            )?;
            let (through, last): (i64, i64) = (row.get(0), row.get(1));
            self.pass = Some(PassClock::new(
                self.search_pass,
                through as u64,
                last as u64,
            ));
        }
        let commits = self.commits.take();
        let history_to_write = self.history.take_what_to_write(&self.url)?;
        let transfer_path = batches.iter().flat_map(|batch| batch.iter()).all(|record| {
            matches!(
                record,
                Record::Transfer(TransferRow { fx: None, .. })
                    | Record::TransferParties(..)
                    | Record::Finish(_)
                    | Record::Account(_)
            )
        });
        match (self.fencing, commits) {
            (Some(_), Some(commits)) if transfer_path && !history_to_write => {
                self.write_in_one_statement(batches, Some(commits + 1))
            }
            (None, _) if transfer_path && !history_to_write => {
                self.write_in_one_statement(batches, None)
            }
            _ => self.write_in_transaction(batches),
        }
    }

    /// The transfer path's commit: one statement, one round trip (see the
    /// module's doc); `expected` the lease's commit count it makes, when
    /// fenced.
    fn write_in_one_statement(
        &mut self,
        batches: &[&[Record]],
        expected: Option<i64>,
    ) -> Result<(), StoreError> {
        let mut feed = self.feed.take();
        let changes = crate::pg_feed::rows(&mut self.client, &mut feed, batches)?;
        let changes = crate::pg_feed::ChangeArrays::of(&changes);
        let statements = self.statements.as_ref().expect("checked by write");
        let mut columns = Columns::default();
        for record in batches.iter().flat_map(|batch| batch.iter()) {
            if let Record::Account(row) = record {
                self.owners.note(row.id, row.participant, row.currency);
            }
            columns.add_transfer_path(record);
        }
        let Columns {
            transfers,
            parties_of,
            finishes,
            accounts,
            text,
            ..
        } = &mut columns;
        let transfers = TransferArrays::of(transfers, parties_of, text, &self.owners);
        let finishes = FinishArrays::of(finishes);
        let accounts = AccountArrays::of(accounts);
        let fencing = self.fencing;
        let mut params: Vec<Param<'_>> = Vec::with_capacity(
            1 + TRANSFERS.types.len()
                + FINISHES.types.len()
                + ACCOUNTS.types.len()
                + 2
                + CHANGES.types.len(),
        );
        params.push(&fencing);
        params.extend(transfers.params());
        params.extend(finishes.params());
        params.extend(accounts.params());
        let due = self.pass.as_mut().and_then(PassClock::due);
        // No pass: an empty range, which moves nothing.
        let (after, through) = due.map_or((0i64, 0i64), |(after, through)| {
            (after as i64, through as i64)
        });
        params.push(&after);
        params.push(&through);
        let last_seq = transfers.seq.iter().copied().max().unwrap_or(0) as u64;
        params.extend(changes.params());
        self.in_flight = expected;
        let row = self
            .client
            .query_opt(&statements.transfer_commit, &params)?;
        self.in_flight = None;
        match (row, self.fencing) {
            (Some(row), _) => {
                self.commits = Some(row.get(0));
                self.one_statement_commits += 1;
                self.history.committed();
                if let Some(pass) = self.pass.as_mut() {
                    if let Some((_, through)) = due {
                        pass.passed(through);
                    }
                    pass.committed(last_seq);
                }
                let through = changes.last_seq();
                self.feed_committed(feed, through);
                Ok(())
            }
            (None, Some(fencing)) => {
                let now: i64 = self
                    .client
                    .query_one("SELECT fencing FROM kasi_lease WHERE id = 1", &[])?
                    .get(0);
                Err(deposed(fencing, now))
            }
            (None, None) => Err(StoreError::fatal(
                "the store's lease row is missing (kasi_lease id 1)".to_string(),
            )),
        }
    }

    /// Any commit: an explicit transaction, a statement per table.
    fn write_in_transaction(&mut self, batches: &[&[Record]]) -> Result<(), StoreError> {
        let PgStore {
            client,
            statements,
            fencing,
            in_flight,
            commits,
            history,
            owners,
            pass,
            feed,
            ..
        } = self;
        let statements = statements.as_ref().expect("checked by write");
        *in_flight = None;
        let mut columns = Columns::default();
        let mut transaction = client.transaction()?;
        let mut feed = feed.take();
        if let Some(fencing) = *fencing {
            match transaction.query_opt(&statements.count_commit, &[&fencing])? {
                Some(row) => *in_flight = Some(row.get(0)),
                None => {
                    let now: i64 = transaction
                        .query_one("SELECT fencing FROM kasi_lease WHERE id = 1", &[])?
                        .get(0);
                    return Err(deposed(fencing, now));
                }
            }
        }
        for record in batches.iter().flat_map(|batch| batch.iter()) {
            if let Record::Account(row) = record {
                owners.note(row.id, row.participant, row.currency);
            }
            columns.add(&mut transaction, statements, record)?;
        }
        columns.flush(&mut transaction, statements, owners)?;
        columns.write_commit_keys(&mut transaction, statements)?;
        let due = pass.as_mut().and_then(PassClock::due);
        if let Some((after, through)) = due {
            let (after, through) = (after as i64, through as i64);
            transaction.execute(&statements.pass, &[&after, &through])?;
            transaction.execute(&statements.search_index, &[&after, &through])?;
        }
        let last_seq = columns.transfers.iter().map(|t| t.seq).max().unwrap_or(0);
        let changes = crate::pg_feed::rows(&mut transaction, &mut feed, batches)?;
        if !changes.is_empty() {
            let arrays = crate::pg_feed::ChangeArrays::of(&changes);
            transaction.execute(&statements.changes, &arrays.params())?;
        }
        history.write_taken(&mut transaction)?;
        transaction.commit()?;
        history.committed();
        if let Some(pass) = pass.as_mut() {
            if let Some((_, through)) = due {
                pass.passed(through);
            }
            pass.committed(last_seq);
        }
        *commits = in_flight.take();
        let through = changes.last().map(|row| row.feed_seq);
        self.feed_committed(feed, through);
        Ok(())
    }

    /// After a commit: the feed's state kept, and the listener told.
    fn feed_committed(&mut self, feed: Option<crate::feed::FeedState>, through: Option<u64>) {
        self.feed = feed;
        if let (Some(listener), Some(through)) = (&self.feed_listener, through) {
            listener(through);
        }
    }

    /// A standby's warm copy: the first call reads what recovery would
    /// (`horizon_ms` as [`Store::load_recent`], `None` as [`Store::load`]);
    /// later calls read only what was committed since (new transfers, the
    /// finishes of those that were open) and the small tables again. The
    /// next load with a horizon at or after this one's is then the copy
    /// brought up to date, and recovery audits it like any load (if it does
    /// not add up, [`Store::forget_history_snapshot`] asks for a cold one).
    /// A settlement window closed since the copy was made means a fresh
    /// read: the copy's summed history counts in the window it was made in.
    ///
    /// A refresh that fails (the database restarting, the connection lost)
    /// keeps the copy as it was, and the next call brings it up to date on
    /// a new connection: a standby that rode out an outage takes over as
    /// fast as one that did not.
    pub fn warm(&mut self, horizon_ms: Option<i64>) -> Result<(), StoreError> {
        let mut warm = self.warm.take();
        let refreshed = match warm.as_mut() {
            Some(copy) if copy.horizon_ms.is_some() == horizon_ms.is_some() => self.refresh(copy),
            _ => Ok(false),
        };
        match refreshed {
            Ok(true) => self.warm = warm,
            Ok(false) => {
                // Read afresh; until that succeeds the old copy (if it is
                // one) stays, to be replaced by the next successful read.
                self.warm = warm;
                let cold = self.read_cold(horizon_ms)?;
                self.warm = Some(cold);
            }
            Err(error) => {
                self.warm = warm;
                return Err(error);
            }
        }
        Ok(())
    }

    /// Whether the last load was the warm copy brought up to date.
    pub fn loaded_from_warm_copy(&self) -> bool {
        self.loaded_warm
    }

    /// How many transfers the warm copy holds, if there is one.
    pub fn warm_transfers(&self) -> Option<usize> {
        self.warm.as_ref().map(|warm| warm.snapshot.transfers.len())
    }

    /// A new connection if the last one was lost (a database restarted
    /// since), unless a commit was in flight on it: then only the next
    /// commit attempt may reconnect, as it must first ask whether that
    /// COMMIT happened.
    fn reconnect_if_lost(&mut self) -> Result<(), StoreError> {
        if !self.connection_lost() {
            return Ok(());
        }
        if self.in_flight.is_some() {
            return Err(StoreError::transient(format!(
                "lost the connection to {} with a commit in flight",
                self.redacted_url
            )));
        }
        let mut client = connect(&self.url)?;
        if self.statements.is_some() {
            self.statements = Some(Statements::prepare(&mut client)?);
        }
        self.client = client;
        self.ended_by_server = false;
        self.prefetch_statements = None;
        Ok(())
    }

    fn start_read(&mut self) -> Result<Transaction<'_>, StoreError> {
        self.reconnect_if_lost()?;
        start_read(&mut self.client)
    }

    pub(crate) fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    fn read(&mut self, horizon_ms: Option<i64>) -> Result<Snapshot, StoreError> {
        self.loaded_warm = false;
        let usable = |warm: &Warm| match (warm.horizon_ms, horizon_ms) {
            (None, None) => true,
            (Some(made), Some(wanted)) => made <= wanted,
            _ => false,
        };
        if let Some(mut warm) = self.warm.take().filter(usable) {
            match self.refresh(&mut warm) {
                Ok(true) => {
                    self.loaded_warm = true;
                    self.history.loaded_through = warm.history_through;
                    return Ok(warm.snapshot);
                }
                Ok(false) => {}
                // Kept for the next attempt (recovery is tried again).
                Err(error) => {
                    self.warm = Some(warm);
                    return Err(error);
                }
            }
        }
        let cold = self.read_cold(horizon_ms)?;
        self.history.loaded_through = cold.history_through;
        Ok(cold.snapshot)
    }

    /// After a load, before this process writes: the accounts' owners and
    /// the search pass as the store has them now (a standby opened the
    /// store long before it takes over).
    fn loaded(&mut self, snapshot: &Snapshot) {
        self.owners = AccountOwners::default();
        for account in &snapshot.accounts {
            self.owners
                .note(account.id, account.participant, account.currency);
        }
        self.pass = None;
    }

    fn read_cold(&mut self, horizon_ms: Option<i64>) -> Result<Warm, StoreError> {
        // After a load that did not add up, the whole history.
        let from_snapshot = !std::mem::take(&mut self.history.read_whole);
        let url = self.url.clone();
        let mut transaction = self.start_read()?;
        let mut snapshot = Snapshot::default();
        let version = schema_version(&mut transaction)?;
        let open_window = open_window(&mut transaction)?;
        let history_through = match horizon_ms {
            Some(horizon_ms) if from_snapshot => crate::pg_history::read_recent(
                &mut transaction,
                version,
                horizon_ms,
                &mut snapshot,
                &url,
            )?,
            _ => None,
        };
        if history_through.is_none() {
            crate::pg_history::read_whole(
                &mut transaction,
                version,
                horizon_ms,
                &mut snapshot,
                &url,
            )?;
        }
        read_state(&mut transaction, version, horizon_ms, &mut snapshot)?;
        transaction.commit()?;
        // The highest seq read, whether loaded or summed: the tail starts
        // after it.
        let loaded = snapshot.transfers.last().map_or(0, |t| t.seq);
        let last_seq = loaded.max(snapshot.archived.last_seq) as i64;
        let mut finished = snapshot.finishes.iter().map(|f| f.seq).peekable();
        let mut open_seqs = Vec::new();
        for transfer in &snapshot.transfers {
            while finished.next_if(|&seq| seq < transfer.seq).is_some() {}
            let has_finish = finished.next_if_eq(&transfer.seq).is_some();
            if !has_finish && !transfer.state.is_final() {
                open_seqs.push(transfer.seq as i64);
            }
        }
        Ok(Warm {
            snapshot,
            horizon_ms,
            last_seq,
            open_seqs,
            open_window,
            version,
            history_through,
        })
    }

    /// Brings the warm copy up to date: `false` if a window closed since
    /// (read afresh). Everything is read before the copy changes, so a
    /// failure leaves it as it was.
    fn refresh(&mut self, warm: &mut Warm) -> Result<bool, StoreError> {
        let Warm {
            horizon_ms,
            last_seq,
            ref open_seqs,
            open_window: made_in,
            version,
            ..
        } = *warm;
        let mut transaction = self.start_read()?;
        if open_window(&mut transaction)? != made_in {
            return Ok(false);
        }
        let mut snapshot = Snapshot::default();
        read_state(&mut transaction, version, horizon_ms, &mut snapshot)?;
        let finish_columns = finish_columns(version);
        // The finishes of transfers that were open.
        let mut still_open = Vec::with_capacity(open_seqs.len());
        let mut late = Vec::new();
        if !open_seqs.is_empty() {
            let rows = transaction.query(
                &format!("SELECT {finish_columns} FROM transfer_finishes f WHERE f.seq = ANY($1)"),
                &[&open_seqs],
            )?;
            for row in &rows {
                late.extend(finish_row(row, 0)?);
            }
            late.sort_by_key(|f| f.seq);
            still_open.extend(
                open_seqs
                    .iter()
                    .filter(|&&seq| late.binary_search_by_key(&(seq as u64), |f| f.seq).is_err()),
            );
        }
        // The FXP's acceptances of conversions that were open (those read
        // with their conversion included: dropped below).
        let mut late_accepted = Vec::new();
        if !open_seqs.is_empty() && version >= FX_SINCE {
            let rows = transaction.query(
                &format!(
                    "SELECT {} FROM conversion_fulfils c WHERE c.seq = ANY($1)",
                    fulfil_columns(version)
                ),
                &[&open_seqs],
            )?;
            for row in &rows {
                late_accepted.extend(conversion_fulfil_row(row, 0)?);
            }
        }
        // The transfers committed since.
        let query = format!(
            "SELECT {} FROM {} WHERE t.seq > $1 ORDER BY t.seq",
            joined_columns(version),
            joined_from(version)
        );
        let mut newest = last_seq;
        let mut rows = transaction.query_raw(query.as_str(), [&last_seq])?;
        let (mut new_transfers, mut new_finishes) = (Vec::new(), Vec::new());
        let mut new_accepted = Vec::new();
        while let Some(row) = rows.next()? {
            let transfer = transfer_row(&row)?;
            let finish = finish_row(&row, FINISH_AT)?;
            newest = transfer.seq as i64;
            if finish.is_none() && !transfer.state.is_final() {
                still_open.push(newest);
            }
            new_transfers.push(transfer);
            new_finishes.extend(finish);
            new_accepted.extend(conversion_fulfil_row(&row, FULFIL_AT)?);
        }
        drop(rows);
        transaction.commit()?;
        // All read: only now does the copy change.
        let old = std::mem::take(&mut warm.snapshot);
        let (mut transfers, mut finishes) = (old.transfers, old.finishes);
        transfers.append(&mut new_transfers);
        if !late.is_empty() {
            // In seq order, as a cold load gives them.
            finishes.extend(late);
            finishes.sort_by_key(|f| f.seq);
        }
        finishes.append(&mut new_finishes);
        let mut accepted = old.conversion_fulfils;
        late_accepted.retain(|row| {
            accepted
                .binary_search_by_key(&row.seq, |held| held.seq)
                .is_err()
        });
        if !late_accepted.is_empty() {
            accepted.extend(late_accepted);
            accepted.sort_by_key(|row| row.seq);
        }
        accepted.append(&mut new_accepted);
        snapshot.transfers = transfers;
        snapshot.finishes = finishes;
        snapshot.conversion_fulfils = accepted;
        snapshot.archived = old.archived;
        warm.snapshot = snapshot;
        warm.last_seq = newest;
        warm.open_seqs = still_open;
        Ok(true)
    }
}

/// A read transaction at REPEATABLE READ: every table as of one instant,
/// so a hub writing meanwhile cannot show us half a commit.
pub(crate) fn start_read(client: &mut Client) -> Result<Transaction<'_>, StoreError> {
    Ok(client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()?)
}

/// The settlement window open now, if any.
fn open_window(transaction: &mut Transaction<'_>) -> Result<Option<u32>, StoreError> {
    crate::pg_history::open_window(transaction)
}

/// The schema version `kasi_meta` records, read in `transaction`: a
/// database opened read-only (`kasi audit`) is read as it is, unmigrated.
pub(crate) fn schema_version(transaction: &mut Transaction<'_>) -> Result<i64, StoreError> {
    let row = transaction.query_one(
        "SELECT value FROM kasi_meta WHERE key = 'schema_version'",
        &[],
    )?;
    let value: String = col(&row, 0)?;
    value
        .parse()
        .map_err(|_| StoreError::fatal(format!("bad schema_version {value:?} in kasi_meta")))
}

/// Every table recovery reads except the transfers and their finishes, of
/// a database at schema `version` (before migration 3 an account's last
/// change is not known: its creation stands in).
fn read_state(
    transaction: &mut Transaction<'_>,
    version: i64,
    horizon_ms: Option<i64>,
    snapshot: &mut Snapshot,
) -> Result<(), StoreError> {
    {
        let mode = match version >= MODE_SINCE {
            true => "mode",
            false => "NULL::TEXT",
        };
        let is_proxy = match version >= PROXY_SINCE {
            true => "is_proxy",
            false => "false",
        };
        for row in transaction.query(
            &format!(
                "SELECT id, name, is_hub, is_active, created_at_ms, {mode}, {is_proxy} FROM participants ORDER BY id"
            ),
            &[],
        )? {
            snapshot.participants.push(ParticipantRow {
                id: participant(&row, 0)?,
                name: parsed(&row, 1, "participant name", FspName::new)?,
                is_hub: col(&row, 2)?,
                is_proxy: col(&row, 6)?,
                mode: crate::participant_mode(col(&row, 3)?, col(&row, 5)?)?,
                created_at_ms: col(&row, 4)?,
            });
        }
        if version >= PROXY_SINCE {
            for row in transaction.query(
                "SELECT dfsp, proxy_id, by_operator, since_ms FROM proxy_map",
                &[],
            )? {
                snapshot.proxy_map.push(ProxyMapRow {
                    dfsp: parsed(&row, 0, "proxy map DFSP", FspName::new)?,
                    proxy: participant(&row, 1)?,
                    by_operator: col(&row, 2)?,
                    since_ms: col(&row, 3)?,
                });
            }
            // In the ledger's name order (Rust's, not the database's collation).
            snapshot.proxy_map.sort_by_key(|row| row.dfsp);
        }
        let changed_at = match version >= 3 {
            true => "COALESCE(changed_at_ms, created_at_ms)",
            false => "created_at_ms",
        };
        for row in transaction.query(
            &format!(
                "SELECT id, participant_id, currency, kind, is_active, value, reserved, net_debit_cap,
                    created_at_ms, {changed_at}
                 FROM accounts ORDER BY id"
            ),
            &[],
        )? {
            snapshot.accounts.push(AccountRow {
                id: pg_rows::account(&row, 0)?,
                participant: participant(&row, 1)?,
                currency: currency(&row, 2)?,
                kind: parsed(&row, 3, "account kind", AccountKind::parse)?,
                active: col(&row, 4)?,
                value: pg_rows::amount(&row, 5, "value")?,
                reserved: pg_rows::amount(&row, 6, "reserved")?,
                net_debit_cap: parsed_opt(&row, 7, "net debit cap", |t| {
                    ledger::Amount::parse_signed(t).ok()
                })?,
                created_at_ms: col(&row, 8)?,
                changed_at_ms: col(&row, 9)?,
            });
        }
        for row in transaction.query(
            "SELECT participant_id, type, value FROM endpoints ORDER BY participant_id, type COLLATE \"C\"",
            &[],
        )? {
            snapshot.endpoints.push(EndpointRow {
                participant: participant(&row, 0)?,
                endpoint_type: col(&row, 1)?,
                value: col(&row, 2)?,
            });
        }
        for row in transaction.query(
            "SELECT id_type, identifier, sub_id, participant_id, currency, registered_at_ms FROM parties",
            &[],
        )? {
            let sub_id: String = col(&row, 2)?;
            snapshot.parties.push(PartyRow {
                key: PartyKey {
                    id_type: col(&row, 0)?,
                    identifier: col(&row, 1)?,
                    sub_id: (!sub_id.is_empty()).then_some(sub_id),
                },
                fsp: participant(&row, 3)?,
                currency: parsed_opt(&row, 4, "currency", ledger::Currency::parse)?,
                registered_at_ms: col(&row, 5)?,
            });
        }
        // In the ledger's key order (Rust's, not the database's collation).
        snapshot.parties.sort_by(|a, b| a.key.cmp(&b.key));
        for row in transaction.query(
            "SELECT id, id_type, endpoint, currency, is_default, is_active FROM oracles ORDER BY id",
            &[],
        )? {
            snapshot.oracles.push(OracleRow {
                id: narrow(&row, 0)?,
                id_type: col(&row, 1)?,
                endpoint: col(&row, 2)?,
                currency: parsed_opt(&row, 3, "currency", ledger::Currency::parse)?,
                is_default: col(&row, 4)?,
                active: col(&row, 5)?,
            });
        }
        // With a horizon, only the quotes received since (an index).
        for row in transaction.query(
            &format!(
                "SELECT {QUOTE_COLUMNS} FROM quotes WHERE received_at_ms >= $1 ORDER BY quote_id"
            ),
            &[&horizon_ms.unwrap_or(i64::MIN)],
        )? {
            snapshot.quotes.push(quote_row(&row)?);
        }
        // The newest events only: older ones stay in the table.
        for row in transaction.query(
            &format!(
                "SELECT {} FROM audit_events ORDER BY id DESC LIMIT $1",
                audit_event_columns(version)
            ),
            &[&(ledger::AUDIT_EVENTS_IN_MEMORY as i64)],
        )? {
            snapshot.audit_events.push(audit_event_row(&row)?);
        }
        snapshot.audit_events.reverse();
        for row in transaction.query(
            "SELECT fingerprint, participant_id, pinned_at_ms FROM certificate_pins ORDER BY fingerprint",
            &[],
        )? {
            snapshot.certificate_pins.push(ledger::PinRow {
                fingerprint: pg_rows::fixed(&row, 0)?,
                participant: participant(&row, 1)?,
                pinned_at_ms: col(&row, 2)?,
            });
        }
        if version >= FX_SINCE {
            for row in transaction.query(
                "SELECT participant_id, corridors FROM fxps ORDER BY participant_id",
                &[],
            )? {
                snapshot.fxps.push(ledger::FxpRow {
                    participant: participant(&row, 0)?,
                    corridors: crate::parse_corridors(col(&row, 1)?)?,
                });
            }
        }
        if version >= PENDING_SINCE {
            let query = format!(
                "SELECT {} FROM pending_changes ORDER BY id",
                crate::PENDING_CHANGE_COLUMNS
            );
            for row in transaction.query(query.as_str(), &[])? {
                snapshot.pending_changes.push(ledger::PendingChangeRow {
                    id: col(&row, 0)?,
                    action: col(&row, 1)?,
                    target: col(&row, 2)?,
                    method: col(&row, 3)?,
                    path: col(&row, 4)?,
                    body: col(&row, 5)?,
                    maker: col(&row, 6)?,
                    maker_role: col(&row, 7)?,
                    maker_source: col(&row, 8)?,
                    reason: col(&row, 9)?,
                    created_at_ms: col(&row, 10)?,
                    expires_at_ms: col(&row, 11)?,
                    state: col(&row, 12)?,
                    checker: col(&row, 13)?,
                    checker_role: col(&row, 14)?,
                    decision_reason: col(&row, 15)?,
                    decided_at_ms: col(&row, 16)?,
                });
            }
        }
        crate::pg_settlement::load(transaction, snapshot)?;
        Ok(())
    }
}

/// The columns [`audit_event_row`] reads, in a store of `version` (one
/// before migration 9 has no `source`: read as empty).
fn audit_event_columns(version: i64) -> &'static str {
    match version >= AUDIT_SOURCE_SINCE {
        true => "id, at_ms, actor, role, action, target, before, after, outcome, source",
        false => "id, at_ms, actor, role, action, target, before, after, outcome, NULL::text",
    }
}

/// Every account's participant and currency.
fn account_owners(client: &mut Client) -> Result<AccountOwners, StoreError> {
    let mut owners = AccountOwners::default();
    for row in client.query("SELECT id, participant_id, currency FROM accounts", &[])? {
        let currency: String = col(&row, 2)?;
        let currency = ledger::Currency::parse(&currency).ok_or_else(|| {
            StoreError::fatal(format!("account currency {currency:?} is not ISO 4217"))
        })?;
        owners.note(
            AccountId(narrow(&row, 0)?),
            ParticipantId(narrow(&row, 1)?),
            currency,
        );
    }
    Ok(owners)
}

/// An `audit_events` row, from [`audit_event_columns`].
fn audit_event_row(row: &postgres::Row) -> Result<ledger::AuditEventRow, StoreError> {
    Ok(ledger::AuditEventRow {
        id: narrow(row, 0)?,
        at_ms: col(row, 1)?,
        actor: col(row, 2)?,
        role: col(row, 3)?,
        action: col(row, 4)?,
        target: col(row, 5)?,
        before: col(row, 6)?,
        after: col(row, 7)?,
        outcome: col(row, 8)?,
        source: col::<Option<String>>(row, 9)?.unwrap_or_default(),
    })
}

/// One commit's rows, gathered by table so that each table is written by
/// one statement; rows upserted twice keep their last state.
#[derive(Default)]
struct Columns<'r> {
    transfers: Vec<&'r TransferRow>,
    /// The transfers' parties (`Record::TransferParties`), by seq.
    parties_of: HashMap<u64, &'r ledger::PartyIds>,
    finishes: Vec<&'r ledger::FinishRow>,
    conversion_fulfils: Vec<&'r ledger::ConversionFulfilRow>,
    accounts: Vec<&'r AccountRow>,
    account_at: HashMap<u32, usize>,
    quotes: Vec<&'r QuoteRow>,
    quote_at: HashMap<ledger::TransferId, usize>,
    /// `None`: deleted.
    parties: Vec<(&'r PartyKey, Option<&'r PartyRow>)>,
    party_at: HashMap<&'r PartyKey, usize>,
    entries: Vec<&'r ledger::EntryRow>,
    text: String,
}

impl<'r> Columns<'r> {
    /// A record of the transfer path (see `PgStore::try_write`).
    fn add_transfer_path(&mut self, record: &'r Record) {
        match record {
            Record::Transfer(row) => self.transfers.push(row),
            Record::TransferParties(seq, parties) => {
                self.parties_of.insert(*seq, parties);
            }
            Record::Finish(row) => self.finishes.push(row),
            Record::Account(row) => self.account(row),
            _ => unreachable!("only the transfer path's records are written in one statement"),
        }
    }

    /// The account as it is at the end of the commit.
    fn account(&mut self, row: &'r AccountRow) {
        match self.account_at.get(&row.id.0) {
            Some(&at) => self.accounts[at] = row,
            None => {
                self.account_at.insert(row.id.0, self.accounts.len());
                self.accounts.push(row);
            }
        }
    }

    fn add(
        &mut self,
        transaction: &mut Transaction<'_>,
        statements: &Statements,
        record: &'r Record,
    ) -> Result<(), StoreError> {
        match record {
            Record::Transfer(row) => self.transfers.push(row),
            Record::TransferParties(seq, parties) => {
                self.parties_of.insert(*seq, parties);
            }
            Record::ConversionFulfilled(row) => self.conversion_fulfils.push(row),
            Record::Finish(row) => self.finishes.push(row),
            Record::Account(row) => self.account(row),
            Record::Quote(row) => match self.quote_at.get(&row.quote_id) {
                Some(&at) => self.quotes[at] = row,
                None => {
                    self.quote_at.insert(row.quote_id, self.quotes.len());
                    self.quotes.push(row);
                }
            },
            Record::Party(row) => self.party(&row.key, Some(row)),
            Record::PartyDeleted(key) => self.party(key, None),
            Record::Entry(row) => self.entries.push(row),
            Record::Participant(row) => {
                transaction.execute(
                    &statements.participant,
                    &[
                        &i64::from(row.id.0),
                        &row.name.as_str(),
                        &row.is_hub,
                        &row.mode.is_active(),
                        &row.created_at_ms,
                        &row.mode.as_str(),
                        &row.is_proxy,
                    ],
                )?;
            }
            Record::ProxyMapping(row) => {
                transaction.execute(
                    &statements.proxy_mapping,
                    &[
                        &row.dfsp.as_str(),
                        &i64::from(row.proxy.0),
                        &row.by_operator,
                        &row.since_ms,
                    ],
                )?;
            }
            Record::ProxyUnmapped(dfsp) => {
                transaction.execute(&statements.proxy_unmapped, &[&dfsp.as_str()])?;
            }
            Record::Endpoint(row) => {
                transaction.execute(
                    &statements.endpoint,
                    &[
                        &i64::from(row.participant.0),
                        &row.endpoint_type,
                        &row.value,
                    ],
                )?;
            }
            Record::SettlementModel(row) => write_model(transaction, statements, row)?,
            Record::Oracle(row) => {
                transaction.execute(
                    &statements.oracle,
                    &[
                        &i64::from(row.id),
                        &row.id_type,
                        &row.endpoint,
                        &row.currency.map(|c| c.to_string()),
                        &row.is_default,
                        &row.active,
                    ],
                )?;
            }
            Record::OracleDeleted(id) => {
                transaction.execute(&statements.oracle_deleted, &[&i64::from(*id)])?;
            }
            Record::AuditEvent(row) => {
                transaction.execute(
                    &statements.audit_event,
                    &[
                        &(row.id as i64),
                        &row.at_ms,
                        &row.actor,
                        &row.role,
                        &row.action,
                        &row.target,
                        &row.before,
                        &row.after,
                        &row.outcome,
                        &row.source,
                    ],
                )?;
            }
            Record::CertificatePin(row) => {
                transaction.execute(
                    &statements.pin,
                    &[
                        &&row.fingerprint[..],
                        &i64::from(row.participant.0),
                        &row.pinned_at_ms,
                    ],
                )?;
            }
            Record::CertificateUnpinned(fingerprint) => {
                transaction.execute(&statements.unpin, &[&&fingerprint[..]])?;
            }
            Record::Fxp(row) if row.corridors.is_empty() => {
                transaction.execute(&statements.fxp_withdrawn, &[&i64::from(row.participant.0)])?;
            }
            Record::PendingChange(row) => {
                transaction.execute(
                    &statements.pending_change,
                    &[
                        &row.id,
                        &row.action,
                        &row.target,
                        &row.method,
                        &row.path,
                        &row.body,
                        &row.maker,
                        &row.maker_role,
                        &row.maker_source,
                        &row.reason,
                        &row.created_at_ms,
                        &row.expires_at_ms,
                        &row.state,
                        &row.checker,
                        &row.checker_role,
                        &row.decision_reason,
                        &row.decided_at_ms,
                    ],
                )?;
            }
            Record::Fxp(row) => {
                transaction.execute(
                    &statements.fxp,
                    &[
                        &i64::from(row.participant.0),
                        &crate::corridors_text(&row.corridors),
                    ],
                )?;
            }
            Record::Window(_)
            | Record::Content(_)
            | Record::ContentAccounts(_)
            | Record::ContentPairs(_)
            | Record::Settlement(_) => {
                crate::pg_settlement::write(transaction, statements_settlement(statements), record)?
            }
        }
        Ok(())
    }

    fn party(&mut self, key: &'r PartyKey, row: Option<&'r PartyRow>) {
        match self.party_at.get(key) {
            Some(&at) => self.parties[at] = (key, row),
            None => {
                self.party_at.insert(key, self.parties.len());
                self.parties.push((key, row));
            }
        }
    }

    /// Writes what was gathered, one statement per table.
    /// The search keys filed in the commit (`search::commit_keys`) of the
    /// transfers and finishes written.
    fn write_commit_keys(
        &self,
        transaction: &mut Transaction<'_>,
        statements: &Statements,
    ) -> Result<(), StoreError> {
        let failed = |state: ledger::TransferState, reason: Option<ledger::ErrorCode>| {
            reason.is_some()
                || !matches!(
                    state,
                    ledger::TransferState::Committed | ledger::TransferState::Reserved
                )
        };
        if !self.transfers.iter().any(|t| failed(t.state, t.reason))
            && !self
                .finishes
                .iter()
                .any(|f| failed(f.state, f.reason) || f.settlement_window.is_some())
        {
            return Ok(());
        }
        let seq: Vec<i64> = self.transfers.iter().map(|t| t.seq as i64).collect();
        let state: Vec<&str> = self.transfers.iter().map(|t| t.state.as_str()).collect();
        let reason: Vec<Option<i32>> = self
            .transfers
            .iter()
            .map(|t| t.reason.map(|c| i32::from(c.0)))
            .collect();
        let finish_seq: Vec<i64> = self.finishes.iter().map(|f| f.seq as i64).collect();
        let finish_state: Vec<&str> = self.finishes.iter().map(|f| f.state.as_str()).collect();
        let finish_reason: Vec<Option<i32>> = self
            .finishes
            .iter()
            .map(|f| f.reason.map(|c| i32::from(c.0)))
            .collect();
        let finish_window: Vec<Option<i64>> = self
            .finishes
            .iter()
            .map(|f| f.settlement_window.map(i64::from))
            .collect();
        transaction.execute(
            &statements.commit_keys,
            &[
                &seq,
                &state,
                &reason,
                &finish_seq,
                &finish_state,
                &finish_reason,
                &finish_window,
            ],
        )?;
        Ok(())
    }

    fn flush(
        &mut self,
        transaction: &mut Transaction<'_>,
        statements: &Statements,
        owners: &AccountOwners,
    ) -> Result<(), StoreError> {
        if !self.transfers.is_empty() {
            self.write_transfers(transaction, statements, owners)?;
        }
        if !self.finishes.is_empty() {
            let arrays = FinishArrays::of(&self.finishes);
            transaction.execute(&statements.finishes, &arrays.params())?;
        }
        if !self.conversion_fulfils.is_empty() {
            let rows = &self.conversion_fulfils;
            let seq: Vec<i64> = rows.iter().map(|r| r.seq as i64).collect();
            let fulfilment: Vec<&[u8]> =
                rows.iter().map(|r| &r.fulfilment.preimage()[..]).collect();
            let hash: Vec<&[u8]> = rows.iter().map(|r| &r.request_hash.0[..]).collect();
            let at: Vec<i64> = rows.iter().map(|r| r.at_ms).collect();
            transaction.execute(
                &statements.conversion_fulfils,
                &[&seq, &fulfilment, &hash, &at],
            )?;
        }
        if !self.accounts.is_empty() {
            let arrays = AccountArrays::of(&self.accounts);
            transaction.execute(&statements.accounts, &arrays.params())?;
        }
        if !self.quotes.is_empty() {
            let rows = &self.quotes;
            let id: Vec<Vec<u8>> = rows
                .iter()
                .map(|r| r.quote_id.to_blob().as_slice().to_vec())
                .collect();
            let payer: Vec<i64> = rows.iter().map(|r| i64::from(r.payer.0)).collect();
            let payee: Vec<i64> = rows.iter().map(|r| i64::from(r.payee.0)).collect();
            let hash: Vec<&[u8]> = rows.iter().map(|r| &r.request_hash.0[..]).collect();
            let received: Vec<i64> = rows.iter().map(|r| r.received_at_ms).collect();
            let answer_hash: Vec<Option<&[u8]>> = rows
                .iter()
                .map(|r| r.answer.as_ref().map(|a| &a.request_hash.0[..]))
                .collect();
            let is_error: Vec<Option<bool>> = rows
                .iter()
                .map(|r| r.answer.as_ref().map(|a| a.is_error))
                .collect();
            let body: Vec<Option<&str>> = rows
                .iter()
                .map(|r| r.answer.as_ref().map(|a| a.body.as_str()))
                .collect();
            let answered: Vec<Option<i64>> = rows
                .iter()
                .map(|r| r.answer.as_ref().map(|a| a.answered_at_ms))
                .collect();
            transaction.execute(
                &statements.quotes,
                &[
                    &id,
                    &payer,
                    &payee,
                    &hash,
                    &received,
                    &answer_hash,
                    &is_error,
                    &body,
                    &answered,
                ],
            )?;
        }
        if !self.parties.is_empty() {
            let (deleted, kept): (Vec<_>, Vec<_>) =
                self.parties.iter().partition(|(_, row)| row.is_none());
            if !deleted.is_empty() {
                let id_type: Vec<&str> = deleted.iter().map(|(k, _)| k.id_type.as_str()).collect();
                let identifier: Vec<&str> =
                    deleted.iter().map(|(k, _)| k.identifier.as_str()).collect();
                let sub_id: Vec<&str> = deleted
                    .iter()
                    .map(|(k, _)| k.sub_id.as_deref().unwrap_or(""))
                    .collect();
                transaction.execute(
                    &statements.parties_deleted,
                    &[&id_type, &identifier, &sub_id],
                )?;
            }
            let rows: Vec<&PartyRow> = kept.iter().filter_map(|(_, row)| *row).collect();
            if !rows.is_empty() {
                let id_type: Vec<&str> = rows.iter().map(|r| r.key.id_type.as_str()).collect();
                let identifier: Vec<&str> =
                    rows.iter().map(|r| r.key.identifier.as_str()).collect();
                let sub_id: Vec<&str> = rows
                    .iter()
                    .map(|r| r.key.sub_id.as_deref().unwrap_or(""))
                    .collect();
                let fsp: Vec<i64> = rows.iter().map(|r| i64::from(r.fsp.0)).collect();
                let currency: Vec<Option<String>> = rows
                    .iter()
                    .map(|r| r.currency.map(|c| c.to_string()))
                    .collect();
                let at: Vec<i64> = rows.iter().map(|r| r.registered_at_ms).collect();
                transaction.execute(
                    &statements.parties,
                    &[&id_type, &identifier, &sub_id, &fsp, &currency, &at],
                )?;
            }
        }
        if !self.entries.is_empty() {
            crate::pg_settlement::write_entries(transaction, &statements.entries, &self.entries)?;
        }
        Ok(())
    }

    fn write_transfers(
        &mut self,
        transaction: &mut Transaction<'_>,
        statements: &Statements,
        owners: &AccountOwners,
    ) -> Result<(), StoreError> {
        let arrays = TransferArrays::of(&self.transfers, &self.parties_of, &mut self.text, owners);
        transaction.execute(&statements.transfers, &arrays.params())?;
        let rows = &self.transfers;
        // One row per FX transfer, in the same statement's transaction.
        let fx: Vec<(i64, crate::FxColumns)> = rows
            .iter()
            .filter_map(|r| Some((r.seq as i64, crate::FxColumns::of(r.fx.as_ref()?))))
            .collect();
        if !fx.is_empty() {
            let blob =
                |id: Option<ledger::TransferId>| id.map(|id| id.to_blob().as_slice().to_vec());
            let seq: Vec<i64> = fx.iter().map(|(seq, _)| *seq).collect();
            let determining: Vec<Option<Vec<u8>>> = fx
                .iter()
                .map(|(_, x)| blob(x.determining_transfer_id))
                .collect();
            let currency: Vec<Option<String>> = fx
                .iter()
                .map(|(_, x)| x.target_currency.map(|c| c.to_string()))
                .collect();
            let amount: Vec<Option<String>> = fx
                .iter()
                .map(|(_, x)| x.target_amount.map(|a| a.to_string()))
                .collect();
            let commit_request: Vec<Option<Vec<u8>>> =
                fx.iter().map(|(_, x)| blob(x.commit_request_id)).collect();
            let payer: Vec<Option<i64>> = fx
                .iter()
                .map(|(_, x)| x.payer.map(|p| i64::from(p.0)))
                .collect();
            transaction.execute(
                &statements.transfer_fx,
                &[
                    &seq,
                    &determining,
                    &currency,
                    &amount,
                    &commit_request,
                    &payer,
                ],
            )?;
        }
        Ok(())
    }
}

type Param<'a> = &'a (dyn postgres::types::ToSql + Sync);

/// The arrays of [`TRANSFERS`], one element per row.
struct TransferArrays<'a> {
    seq: Vec<i64>,
    id: Vec<Vec<u8>>,
    kind: Vec<&'a str>,
    debit: Vec<i64>,
    credit: Vec<i64>,
    amount: Vec<&'a str>,
    condition: Vec<Option<&'a [u8]>>,
    expiration: Vec<Option<i64>>,
    prepared: Vec<i64>,
    hash: Vec<&'a [u8]>,
    state: Vec<&'a str>,
    reason: Vec<Option<i32>>,
    external: Vec<Option<&'a str>>,
    memo: Vec<Option<&'a str>>,
    wire: Vec<i32>,
    payer: Vec<Option<i64>>,
    payee: Vec<Option<i64>>,
    currency: Vec<Option<&'a str>>,
    amount_units: Vec<i64>,
    payer_party: Vec<Option<&'a str>>,
    payee_party: Vec<Option<&'a str>>,
}

impl<'a> TransferArrays<'a> {
    /// `text` holds the amounts, written into one buffer and sliced.
    fn of(
        rows: &[&'a TransferRow],
        parties_of: &HashMap<u64, &'a ledger::PartyIds>,
        text: &'a mut String,
        owners: &AccountOwners,
    ) -> TransferArrays<'a> {
        let parties: Vec<Option<&'a ledger::PartyIds>> = rows
            .iter()
            .map(|r| parties_of.get(&r.seq).copied())
            .collect();
        text.clear();
        let search: Vec<SearchColumns> = rows
            .iter()
            .map(|r| SearchColumns::of(owners, r.debit, r.credit, r.amount))
            .collect();
        // The amounts, then the currencies (three letters, or none).
        let mut ends = Vec::with_capacity(rows.len() * 2);
        for row in rows {
            write!(text, "{}", row.amount).expect("writing to a String");
            ends.push(text.len());
        }
        for columns in &search {
            if let Some(currency) = &columns.currency {
                text.push_str(currency.as_str());
            }
            ends.push(text.len());
        }
        let text: &'a str = text;
        let mut start = 0;
        let mut slices = ends.iter().map(|&end| {
            let slice = &text[start..end];
            start = end;
            slice
        });
        let amount = slices.by_ref().take(rows.len()).collect();
        let currency = slices
            .zip(&search)
            .map(|(slice, columns)| columns.currency.map(|_| slice))
            .collect();
        // Funds movements have neither condition nor expiration.
        let conditional = |r: &TransferRow| r.kind.is_between_positions();
        TransferArrays {
            seq: rows.iter().map(|r| r.seq as i64).collect(),
            id: rows
                .iter()
                .map(|r| r.transfer_id.to_blob().as_slice().to_vec())
                .collect(),
            kind: rows.iter().map(|r| r.kind.as_str()).collect(),
            debit: rows.iter().map(|r| i64::from(r.debit.0)).collect(),
            credit: rows.iter().map(|r| i64::from(r.credit.0)).collect(),
            amount,
            condition: rows
                .iter()
                .map(|r| conditional(r).then_some(&r.condition.0[..]))
                .collect(),
            expiration: rows
                .iter()
                .map(|r| conditional(r).then_some(r.expiration_ms))
                .collect(),
            prepared: rows.iter().map(|r| r.prepared_at_ms).collect(),
            hash: rows.iter().map(|r| &r.request_hash.0[..]).collect(),
            state: rows.iter().map(|r| r.state.as_str()).collect(),
            reason: rows
                .iter()
                .map(|r| r.reason.map(|c| i32::from(c.0)))
                .collect(),
            external: rows
                .iter()
                .map(|r| r.memo.as_ref().map(|m| m.external_reference.as_str()))
                .collect(),
            memo: rows
                .iter()
                .map(|r| r.memo.as_ref().map(|m| m.reason.as_str()))
                .collect(),
            wire: rows.iter().map(|r| i32::from(r.wire_version)).collect(),
            payer: search.iter().map(|c| c.payer.map(i64::from)).collect(),
            payee: search.iter().map(|c| c.payee.map(i64::from)).collect(),
            currency,
            amount_units: search.iter().map(|c| c.amount_units).collect(),
            payer_party: parties.iter().map(|p| p.map(|p| &*p.payer)).collect(),
            payee_party: parties.iter().map(|p| p.map(|p| &*p.payee)).collect(),
        }
    }

    fn params(&self) -> [Param<'_>; 21] {
        [
            &self.seq,
            &self.id,
            &self.kind,
            &self.debit,
            &self.credit,
            &self.amount,
            &self.condition,
            &self.expiration,
            &self.prepared,
            &self.hash,
            &self.state,
            &self.reason,
            &self.external,
            &self.memo,
            &self.wire,
            &self.payer,
            &self.payee,
            &self.currency,
            &self.amount_units,
            &self.payer_party,
            &self.payee_party,
        ]
    }
}

/// The arrays of [`FINISHES`].
struct FinishArrays<'a> {
    seq: Vec<i64>,
    kind: Vec<&'a str>,
    state: Vec<&'a str>,
    reason: Vec<Option<i32>>,
    at: Vec<i64>,
    hash: Vec<&'a [u8]>,
    fulfilment: Vec<Option<&'a [u8]>>,
    window: Vec<Option<i64>>,
    cause: Vec<Option<&'a str>>,
}

impl<'a> FinishArrays<'a> {
    fn of(rows: &[&'a ledger::FinishRow]) -> FinishArrays<'a> {
        FinishArrays {
            seq: rows.iter().map(|r| r.seq as i64).collect(),
            kind: rows.iter().map(|r| r.kind.as_str()).collect(),
            state: rows.iter().map(|r| r.state.as_str()).collect(),
            reason: rows
                .iter()
                .map(|r| r.reason.map(|c| i32::from(c.0)))
                .collect(),
            at: rows.iter().map(|r| r.finished_at_ms).collect(),
            hash: rows.iter().map(|r| &r.request_hash.0[..]).collect(),
            fulfilment: rows
                .iter()
                .map(|r| r.fulfilment.as_ref().map(|f| &f.preimage()[..]))
                .collect(),
            window: rows
                .iter()
                .map(|r| r.settlement_window.map(i64::from))
                .collect(),
            cause: rows
                .iter()
                .map(|r| r.cause.map(|cause| cause.as_str()))
                .collect(),
        }
    }

    fn params(&self) -> [Param<'_>; 9] {
        [
            &self.seq,
            &self.kind,
            &self.state,
            &self.reason,
            &self.at,
            &self.hash,
            &self.fulfilment,
            &self.window,
            &self.cause,
        ]
    }
}

/// The arrays of [`ACCOUNTS`].
struct AccountArrays<'a> {
    id: Vec<i64>,
    participant: Vec<i64>,
    currency: Vec<&'a str>,
    kind: Vec<&'a str>,
    active: Vec<bool>,
    value: Vec<String>,
    reserved: Vec<String>,
    cap: Vec<Option<String>>,
    created: Vec<i64>,
    changed: Vec<i64>,
}

impl<'a> AccountArrays<'a> {
    fn of(rows: &[&'a AccountRow]) -> AccountArrays<'a> {
        AccountArrays {
            id: rows.iter().map(|r| i64::from(r.id.0)).collect(),
            participant: rows.iter().map(|r| i64::from(r.participant.0)).collect(),
            currency: rows.iter().map(|r| r.currency.as_str()).collect(),
            kind: rows.iter().map(|r| r.kind.as_str()).collect(),
            active: rows.iter().map(|r| r.active).collect(),
            value: rows.iter().map(|r| r.value.to_string()).collect(),
            reserved: rows.iter().map(|r| r.reserved.to_string()).collect(),
            cap: rows
                .iter()
                .map(|r| r.net_debit_cap.map(|c| c.to_string()))
                .collect(),
            created: rows.iter().map(|r| r.created_at_ms).collect(),
            changed: rows.iter().map(|r| r.changed_at_ms).collect(),
        }
    }

    fn params(&self) -> [Param<'_>; 10] {
        [
            &self.id,
            &self.participant,
            &self.currency,
            &self.kind,
            &self.active,
            &self.value,
            &self.reserved,
            &self.cap,
            &self.created,
            &self.changed,
        ]
    }
}

fn write_model(
    transaction: &mut Transaction<'_>,
    statements: &Statements,
    row: &SettlementModelRow,
) -> Result<(), StoreError> {
    let rules = row.rules.as_ref();
    transaction.execute(
        &statements.settlement_model,
        &[
            &i64::from(row.id),
            &row.name,
            &row.definition,
            &rules.map(|r| r.granularity.as_str()),
            &rules.map(|r| r.interchange.as_str()),
            &rules.map(|r| r.delay.as_str()),
            &rules.and_then(|r| r.currency).map(|c| c.to_string()),
            &rules.map(|r| r.ledger_account_type.as_str()),
            &rules.map(|r| r.settlement_account_type.as_str()),
            &rules.map(|r| r.auto_position_reset),
            &rules.map(|r| r.require_liquidity_check),
        ],
    )?;
    Ok(())
}

fn statements_settlement(statements: &Statements) -> crate::pg_settlement::Statements<'_> {
    crate::pg_settlement::Statements {
        window: &statements.window,
        content: &statements.content,
        content_accounts: &statements.content_accounts,
        content_pairs: &statements.content_pairs,
        settlement: &statements.settlement,
        settlement_accounts: &statements.settlement_accounts,
    }
}

impl Store for PgStore {
    fn commit(&mut self, batches: &[&[Record]]) -> Result<(), StoreError> {
        self.write(batches)
    }

    fn set_feed_listener(&mut self, listener: crate::feed::FeedListener) {
        self.feed_listener = Some(listener);
    }

    fn prefetch(&mut self, ids: &ledger::PrefetchIds) -> Result<ledger::Prefetched, StoreError> {
        // Read-committed statements outside a transaction: each sees every
        // commit that returned before it began.
        self.reconnect_if_lost()?;
        crate::pg_reader::prefetch(&mut self.client, &mut self.prefetch_statements, ids)
    }

    fn open_prefetcher(&self) -> Result<Box<dyn crate::Prefetch>, StoreError> {
        Ok(Box::new(crate::pg_reader::PgPrefetcher::open(&self.url)))
    }

    fn load(&mut self) -> Result<Snapshot, StoreError> {
        let snapshot = self.read(None)?;
        self.loaded(&snapshot);
        Ok(snapshot)
    }

    fn load_recent(&mut self, horizon_ms: i64) -> Result<Snapshot, StoreError> {
        let snapshot = self.read(Some(horizon_ms))?;
        self.loaded(&snapshot);
        Ok(snapshot)
    }

    fn history_snapshot_through(&self) -> Option<u64> {
        self.history.loaded_through
    }

    fn forget_history_snapshot(&mut self) -> Result<bool, StoreError> {
        // The shortcuts a load may have taken: the warm copy, the history
        // snapshot (which the warm copy may have started from).
        let warm = std::mem::take(&mut self.loaded_warm);
        let snapshot = self.history.loaded_through.take().is_some();
        if snapshot {
            self.forget_stored_history()?;
        }
        self.history.read_whole = warm || snapshot;
        Ok(warm || snapshot)
    }

    fn describe(&self) -> String {
        format!("postgres {}", self.redacted_url)
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    /// Every connection kasi opens commits durably and compiles nothing.
    #[test]
    fn a_connection_waits_for_its_flush_and_never_compiles_a_plan() {
        let cluster = testpg::Cluster::start();
        let url = cluster.create_database("settings");
        let mut client = super::connect(&url).unwrap();
        let show = |client: &mut postgres::Client, name: &str| -> String {
            client
                .query_one(&format!("SHOW {name}"), &[])
                .unwrap()
                .get(0)
        };
        assert_eq!(show(&mut client, "jit"), "off");
        assert_eq!(show(&mut client, "synchronous_commit"), "on");
    }

    #[test]
    fn passwords_never_reach_a_log() {
        assert_eq!(
            redact_url("postgres://kasi:s3cret@db1,db2:5433/hub?target_session_attrs=read-write"),
            "postgres://kasi:***@db1,db2:5433/hub?target_session_attrs=read-write"
        );
        assert_eq!(
            redact_url("postgresql://kasi@db/hub?password=s3cret&sslmode=disable"),
            "postgresql://kasi@db/hub?password=***&sslmode=disable"
        );
        assert_eq!(
            redact_url("host=db user=kasi password=s3cret dbname=hub"),
            "host=db user=kasi password=*** dbname=hub"
        );
        assert_eq!(
            redact_url("postgres://kasi@127.0.0.1/hub"),
            "postgres://kasi@127.0.0.1/hub"
        );
        assert_eq!(
            redact_url("mysql://kasi:s3cret@db/hub"),
            "mysql://kasi:***@db/hub"
        );
    }
}
