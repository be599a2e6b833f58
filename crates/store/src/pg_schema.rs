//! The PostgreSQL store's schema: numbered migrations, applied by kasi on
//! start under an advisory lock, recorded in `kasi_meta`.
//!
//! Same tables, columns and meaning as the SQLite store's (see
//! `sqlite.rs`): integers as BIGINT, blobs as BYTEA, amounts as the same
//! decimal TEXT (so audits compare the same way), flags as BOOLEAN.

/// The migrations, in order: the schema version after migration `n` is
/// `n + 1`. Never edit one that has shipped: add the next.
pub(crate) const MIGRATIONS: &[&str] = &[
    MIGRATION_1,
    MIGRATION_2,
    MIGRATION_3,
    MIGRATION_4,
    MIGRATION_5,
    MIGRATION_6,
    MIGRATION_7,
    MIGRATION_8,
    MIGRATION_9,
    MIGRATION_10,
    MIGRATION_11,
    MIGRATION_12,
    MIGRATION_13,
    MIGRATION_14,
    MIGRATION_15,
    MIGRATION_16,
];

/// The version this kasi writes: a database at a higher one is refused.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The version from which the history snapshot's tables exist (a store
/// read as it is by `kasi audit` may predate them).
pub(crate) const HISTORY_SNAPSHOT_SINCE: i64 = 5;

/// The version from which the FX tables exist (migration 6).
pub(crate) const FX_SINCE: i64 = 6;

/// The version from which participants have a `mode` column (migration 7).
pub(crate) const MODE_SINCE: i64 = 7;

/// The version from which participants have `is_proxy` and the store holds
/// the proxy map (migration 16).
pub(crate) const PROXY_SINCE: i64 = 16;

/// The version from which four-eyes pending changes are kept (migration 8).
pub(crate) const PENDING_SINCE: i64 = 8;

/// The version from which audit events say how their actor signed in
/// (migration 9).
pub(crate) const AUDIT_SOURCE_SINCE: i64 = 9;

/// Held (transaction-scoped) while a kasi creates or migrates the schema,
/// so that two hubs starting on one empty database do not both create it.
pub(crate) const MIGRATION_LOCK: i64 = 0x6b61_7369_0001;

/// What `kasi_meta.kind` says in a kasi store.
pub(crate) const STORE_KIND: &str = "kasi hub store";

/// Who wrote a dead letter's message ('hub', 'forwarded'), which decides
/// whether the hub signs it when re-sent; NULL in rows kept before (read as
/// forwarded: see `delivery::CallbackOrigin::parse`).
const MIGRATION_2: &str = "ALTER TABLE dead_letters ADD COLUMN origin TEXT;";

/// When an account's balance last changed (the position's `changedDate`);
/// NULL in rows kept before, read as the account's creation.
const MIGRATION_3: &str = "ALTER TABLE accounts ADD COLUMN changed_at_ms BIGINT;";

/// Why the hub aborted a transfer on the payee's message
/// (`ledger::AbortCause`: 'INVALID_FULFILMENT', 'DESTINATION_NOT_PAYER'),
/// which a later GET repeats; before it, a fulfil's abort with 3100 could
/// only be an invalid fulfilment.
const MIGRATION_4: &str = "
ALTER TABLE transfer_finishes ADD COLUMN cause TEXT;
UPDATE transfer_finishes SET cause = 'INVALID_FULFILMENT'
 WHERE kind = 'FULFIL' AND state = 'ABORTED' AND reason = 3100;
";

/// The history snapshot (`pg_history.rs`, the algorithm in `history.rs`):
/// the transfers that finished before a cut, summed, so that recovery with
/// a retention horizon reads only what it cannot sum. The same four tables
/// as SQLite's; `transfer_finishes_by_time` exists since migration 1, and
/// the funds movements get a partial index of their own (built once on a
/// store that predates it: a scan of `transfers`).
const MIGRATION_5: &str = "
CREATE TABLE history_snapshot (
    id                INTEGER PRIMARY KEY CHECK (id = 1),
    through_seq       BIGINT  NOT NULL,
    cut_ms            BIGINT  NOT NULL,
    transfers         BIGINT  NOT NULL,
    last_seq          BIGINT  NOT NULL,
    last_at_ms        BIGINT  NOT NULL,
    settlement_window BIGINT
);
CREATE TABLE history_snapshot_values (
    account_id BIGINT PRIMARY KEY,
    value      TEXT   NOT NULL
);
CREATE TABLE history_snapshot_pairs (
    payer_id BIGINT NOT NULL,
    payee_id BIGINT NOT NULL,
    amount   TEXT   NOT NULL,
    commits  BIGINT NOT NULL,
    PRIMARY KEY (payer_id, payee_id)
);
CREATE TABLE history_snapshot_kept (
    seq BIGINT PRIMARY KEY
);
CREATE INDEX transfers_funds ON transfers (seq) WHERE kind <> 'TRANSFER';
";

/// A participant's mode (pausing a DFSP: `ledger::ParticipantMode`); NULL
/// in rows kept before, read as their `is_active` says.
const MIGRATION_7: &str = "ALTER TABLE participants ADD COLUMN mode TEXT;";

/// Four-eyes pending changes (`ledger::PendingChangeRow`), requested and
/// decided: an upsert of the whole row at each step.
const MIGRATION_8: &str = "
CREATE TABLE pending_changes (
    id              TEXT   PRIMARY KEY,
    action          TEXT   NOT NULL,
    target          TEXT   NOT NULL,
    method          TEXT   NOT NULL,
    path            TEXT   NOT NULL,
    body            TEXT   NOT NULL,
    maker           TEXT   NOT NULL,
    maker_role      TEXT   NOT NULL,
    maker_source    TEXT   NOT NULL,
    reason          TEXT   NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    expires_at_ms   BIGINT NOT NULL,
    state           TEXT   NOT NULL,
    checker         TEXT   NOT NULL,
    checker_role    TEXT   NOT NULL,
    decision_reason TEXT   NOT NULL,
    decided_at_ms   BIGINT NOT NULL
);
";

/// The transfers' search columns (`crate::search`), filled for the rows
/// kept before from their accounts (the amount exactly, in numeric, then
/// clamped to 64 bits as the writer does), as SQLite's version 10; no
/// index on them (see `crate::search`).
/// The transfers' parties as the prepare's ILP packet names them (none
/// for the rows kept before). Search keys (`store::search`): each
/// transfer's payer, payee, currency and parties filed by the writer's
/// passes (through `search_index`'s seq),
/// a failure's error code and final state and a commit's settlement
/// window in its own commit; those of the rows kept before are filed
/// here.
const MIGRATION_11: &str = "
ALTER TABLE transfers ADD COLUMN payer_party TEXT, ADD COLUMN payee_party TEXT;
CREATE TABLE transfer_keys (
    key TEXT   NOT NULL,
    seq BIGINT NOT NULL,
    PRIMARY KEY (key, seq)
);
CREATE TABLE search_index (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    through_seq BIGINT  NOT NULL
);
INSERT INTO transfer_keys (key, seq)
    SELECT 's:' || COALESCE(f.state, t.state), t.seq FROM transfers t
    LEFT JOIN transfer_finishes f ON f.seq = t.seq
    WHERE COALESCE(f.state, t.state) NOT IN ('COMMITTED', 'RESERVED')
UNION
    SELECT 'e:' || COALESCE(f.reason, t.reason), t.seq FROM transfers t
    LEFT JOIN transfer_finishes f ON f.seq = t.seq
    WHERE COALESCE(f.reason, t.reason) IS NOT NULL
UNION
    SELECT 'w:' || settlement_window, seq FROM transfer_finishes WHERE settlement_window IS NOT NULL;
";

const MIGRATION_10: &str = "
ALTER TABLE transfers ADD COLUMN payer_id BIGINT, ADD COLUMN payee_id BIGINT,
    ADD COLUMN currency TEXT, ADD COLUMN amount_units BIGINT;
UPDATE transfers t SET payer_id = d.participant_id, payee_id = c.participant_id,
    currency = d.currency,
    amount_units = LEAST(GREATEST(t.amount::numeric * 10000, -9223372036854775808),
        9223372036854775807)::bigint
    FROM accounts d, accounts c
    WHERE d.id = t.debit_account_id AND c.id = t.credit_account_id;
";

/// The change feed (`crate::feed`): one row per committed change, from
/// 1 in commit order, and the publishers' durable cursors; as SQLite's
/// version 12. Empty in a store migrated to it: the feed starts there.
const MIGRATION_12: &str = "
CREATE TABLE changes (
    feed_seq     BIGINT PRIMARY KEY,
    at_ms        BIGINT NOT NULL,
    kind         TEXT   NOT NULL,
    participant  TEXT   NOT NULL,
    counterparty TEXT,
    key          TEXT   NOT NULL,
    body         TEXT   NOT NULL
);
CREATE TABLE feed_cursors (
    name     TEXT   PRIMARY KEY,
    feed_seq BIGINT NOT NULL
);
";

/// The hourly rollup of the change feed (`crate::rollup`), written by the
/// hub's follower, never by a commit; as SQLite's version 13. Empty in a
/// store migrated to it: the follower folds the feed kept from its start.
const MIGRATION_13: &str = "
CREATE TABLE rollup_pairs (
    hour_ms   BIGINT NOT NULL,
    currency  TEXT   NOT NULL,
    payer     TEXT   NOT NULL,
    payee     TEXT   NOT NULL,
    committed BIGINT NOT NULL,
    amount    TEXT   NOT NULL,
    failed    BIGINT NOT NULL,
    PRIMARY KEY (hour_ms, currency, payer, payee)
);
CREATE TABLE rollup_errors (
    hour_ms    BIGINT NOT NULL,
    payer      TEXT   NOT NULL,
    payee      TEXT   NOT NULL,
    error_code TEXT   NOT NULL,
    failures   BIGINT NOT NULL,
    PRIMARY KEY (hour_ms, payer, payee, error_code)
);
CREATE TABLE rollup_latency (
    hour_ms   BIGINT NOT NULL,
    payer     TEXT   NOT NULL,
    payee     TEXT   NOT NULL,
    bucket    BIGINT NOT NULL,
    transfers BIGINT NOT NULL,
    PRIMARY KEY (hour_ms, payer, payee, bucket)
);
";

/// The party index (`crate::party_index`), filed by the hub's follower
/// by block of seqs, never by a commit; as SQLite's version 14. Empty in
/// a store migrated to it: the follower files the blocks kept before.
const MIGRATION_14: &str = "
CREATE TABLE party_blocks (
    key     BIGINT PRIMARY KEY,
    entries BYTEA  NOT NULL
);
CREATE TABLE party_index (
    id         INT    PRIMARY KEY CHECK (id = 1),
    next_block BIGINT NOT NULL,
    block_seqs BIGINT NOT NULL
);
";

/// The commit index (`crate::commit_index`), filed by the hub's follower
/// by span of time, never by a commit; as SQLite's version 15. Empty in a
/// store migrated to it: the follower files the finishes kept before.
const MIGRATION_15: &str = "
CREATE TABLE commit_spans (
    key     BIGINT PRIMARY KEY,
    entries BYTEA  NOT NULL
);
CREATE TABLE commit_index (
    id        INT    PRIMARY KEY CHECK (id = 1),
    origin_ms BIGINT NOT NULL,
    span_ms   BIGINT NOT NULL,
    next_span BIGINT NOT NULL
);
";

/// Inter-scheme (`ledger::ProxyMapRow`): proxy participants and the map of
/// other schemes' DFSPs to the proxy each is reached through; as SQLite's
/// version 16.
const MIGRATION_16: &str = "
ALTER TABLE participants ADD COLUMN is_proxy BOOLEAN NOT NULL DEFAULT false;
CREATE TABLE proxy_map (
    dfsp        TEXT    PRIMARY KEY,
    proxy_id    BIGINT  NOT NULL,
    by_operator BOOLEAN NOT NULL,
    since_ms    BIGINT  NOT NULL
);
";

/// How an audit event's actor signed in (`ledger::AuditEventRow::source`);
/// NULL in events kept before, read as empty.
const MIGRATION_9: &str = "ALTER TABLE audit_events ADD COLUMN source TEXT;";

/// FX (FSPIOP v2.0 payer conversion): a conversion's terms or a dependent
/// transfer's link, one row per FX transfer written with its `transfers`
/// row, indexed by the determining transfer (the prefetch reads the latest
/// conversion for a prepare's id); the FXP's acceptance of a conversion
/// (one insert); the declared FXPs (an upsert of the whole row, a
/// withdrawn one deleted). The funds movements' index is built again
/// without conversions, which its old predicate (`kind <> 'TRANSFER'`)
/// would count as funds movements.
const MIGRATION_6: &str = "
CREATE TABLE transfer_fx (
    seq                     BIGINT PRIMARY KEY,
    determining_transfer_id BYTEA,
    target_currency         TEXT,
    target_amount           TEXT,
    commit_request_id       BYTEA,
    payer_id                BIGINT
);
CREATE TABLE conversion_fulfils (
    seq          BIGINT PRIMARY KEY,
    fulfilment   BYTEA  NOT NULL,
    request_hash BYTEA  NOT NULL,
    at_ms        BIGINT NOT NULL
);
CREATE INDEX transfer_fx_by_determining ON transfer_fx (determining_transfer_id, seq)
    WHERE determining_transfer_id IS NOT NULL;
CREATE TABLE fxps (
    participant_id BIGINT PRIMARY KEY,
    corridors      TEXT   NOT NULL
);
DROP INDEX transfers_funds;
CREATE INDEX transfers_funds ON transfers (seq) WHERE kind IN ('FUNDS_IN', 'FUNDS_OUT');
";

const MIGRATION_1: &str = "
CREATE TABLE kasi_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE participants (
    id            BIGINT  PRIMARY KEY,
    name          TEXT    NOT NULL UNIQUE,
    is_hub        BOOLEAN NOT NULL,
    is_active     BOOLEAN NOT NULL,
    created_at_ms BIGINT  NOT NULL
);
CREATE TABLE accounts (
    id             BIGINT  PRIMARY KEY,
    participant_id BIGINT  NOT NULL,
    currency       TEXT    NOT NULL,
    kind           TEXT    NOT NULL,
    is_active      BOOLEAN NOT NULL,
    value          TEXT    NOT NULL,
    reserved       TEXT    NOT NULL,
    net_debit_cap  TEXT,
    created_at_ms  BIGINT  NOT NULL
);
CREATE TABLE transfers (
    seq                BIGINT  PRIMARY KEY,
    transfer_id        BYTEA   NOT NULL,
    kind               TEXT    NOT NULL,
    debit_account_id   BIGINT  NOT NULL,
    credit_account_id  BIGINT  NOT NULL,
    amount             TEXT    NOT NULL,
    condition          BYTEA,
    expiration_ms      BIGINT,
    prepared_at_ms     BIGINT  NOT NULL,
    request_hash       BYTEA   NOT NULL,
    state              TEXT    NOT NULL,
    reason             INTEGER,
    external_reference TEXT,
    memo               TEXT,
    wire_version       INTEGER NOT NULL
);
CREATE INDEX transfers_by_id ON transfers (transfer_id);
CREATE TABLE transfer_finishes (
    seq               BIGINT  PRIMARY KEY,
    kind              TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    reason            INTEGER,
    finished_at_ms    BIGINT  NOT NULL,
    request_hash      BYTEA   NOT NULL,
    fulfilment        BYTEA,
    settlement_window BIGINT
);
CREATE INDEX transfer_finishes_by_time ON transfer_finishes (finished_at_ms);
CREATE TABLE endpoints (
    participant_id BIGINT NOT NULL,
    type           TEXT   NOT NULL,
    value          TEXT   NOT NULL,
    PRIMARY KEY (participant_id, type)
);
CREATE TABLE settlement_models (
    id                      BIGINT  PRIMARY KEY,
    name                    TEXT    NOT NULL UNIQUE,
    definition              TEXT    NOT NULL,
    granularity             TEXT,
    interchange             TEXT,
    delay                   TEXT,
    currency                TEXT,
    ledger_account_type     TEXT,
    settlement_account_type TEXT,
    auto_position_reset     BOOLEAN,
    require_liquidity_check BOOLEAN
);
CREATE TABLE parties (
    id_type          TEXT   NOT NULL,
    identifier       TEXT   NOT NULL,
    sub_id           TEXT   NOT NULL,
    participant_id   BIGINT NOT NULL,
    currency         TEXT,
    registered_at_ms BIGINT NOT NULL,
    PRIMARY KEY (id_type, identifier, sub_id)
);
CREATE TABLE quotes (
    quote_id        BYTEA   PRIMARY KEY,
    payer_id        BIGINT  NOT NULL,
    payee_id        BIGINT  NOT NULL,
    request_hash    BYTEA   NOT NULL,
    received_at_ms  BIGINT  NOT NULL,
    answer_hash     BYTEA,
    answer_is_error BOOLEAN,
    answer_body     TEXT,
    answered_at_ms  BIGINT
);
CREATE INDEX quotes_by_time ON quotes (received_at_ms);
CREATE TABLE oracles (
    id         BIGINT  PRIMARY KEY,
    id_type    TEXT    NOT NULL,
    endpoint   TEXT    NOT NULL,
    currency   TEXT,
    is_default BOOLEAN NOT NULL,
    is_active  BOOLEAN NOT NULL
);
CREATE TABLE settlement_windows (
    id            BIGINT PRIMARY KEY,
    state         TEXT   NOT NULL,
    reason        TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL,
    changed_at_ms BIGINT NOT NULL
);
CREATE TABLE settlement_content (
    id                  BIGINT PRIMARY KEY,
    window_id           BIGINT NOT NULL,
    ledger_account_type TEXT   NOT NULL,
    currency            TEXT   NOT NULL,
    model_id            BIGINT NOT NULL,
    state               TEXT   NOT NULL,
    settlement_id       BIGINT,
    created_at_ms       BIGINT NOT NULL,
    changed_at_ms       BIGINT NOT NULL
);
CREATE TABLE settlement_content_accounts (
    content_id     BIGINT NOT NULL,
    account_id     BIGINT NOT NULL,
    sent           TEXT   NOT NULL,
    sent_count     BIGINT NOT NULL,
    received       TEXT   NOT NULL,
    received_count BIGINT NOT NULL,
    PRIMARY KEY (content_id, account_id)
);
CREATE TABLE settlement_content_pairs (
    content_id BIGINT NOT NULL,
    payer_id   BIGINT NOT NULL,
    payee_id   BIGINT NOT NULL,
    amount     TEXT   NOT NULL,
    count      BIGINT NOT NULL,
    PRIMARY KEY (content_id, payer_id, payee_id)
);
CREATE TABLE settlements (
    id                 BIGINT PRIMARY KEY,
    model_id           BIGINT NOT NULL,
    state              TEXT   NOT NULL,
    reason             TEXT   NOT NULL,
    external_reference TEXT,
    created_at_ms      BIGINT NOT NULL,
    changed_at_ms      BIGINT NOT NULL,
    windows            TEXT   NOT NULL
);
CREATE TABLE settlement_accounts (
    settlement_id      BIGINT NOT NULL,
    account_id         BIGINT NOT NULL,
    participant_id     BIGINT NOT NULL,
    currency           TEXT   NOT NULL,
    net                TEXT   NOT NULL,
    state              TEXT   NOT NULL,
    reason             TEXT   NOT NULL,
    external_reference TEXT,
    changed_at_ms      BIGINT NOT NULL,
    PRIMARY KEY (settlement_id, account_id)
);
CREATE TABLE settlement_entries (
    seq               BIGINT PRIMARY KEY,
    kind              TEXT   NOT NULL,
    debit_account_id  BIGINT NOT NULL,
    credit_account_id BIGINT NOT NULL,
    amount            TEXT   NOT NULL,
    at_ms             BIGINT NOT NULL,
    settlement_id     BIGINT,
    transfer_id       BYTEA
);
CREATE TABLE audit_events (
    id      BIGINT PRIMARY KEY,
    at_ms   BIGINT NOT NULL,
    actor   TEXT   NOT NULL,
    role    TEXT   NOT NULL,
    action  TEXT   NOT NULL,
    target  TEXT   NOT NULL,
    before  TEXT   NOT NULL,
    after   TEXT   NOT NULL,
    outcome TEXT   NOT NULL
);
CREATE INDEX audit_events_by_target ON audit_events (target, id);
-- The active hub's lease (see pg_lease.rs): one row, taken by a standby
-- once expired; every commit of the active checks its fencing number and
-- counts itself here, in its own transaction.
CREATE TABLE kasi_lease (
    id         INTEGER     PRIMARY KEY CHECK (id = 1),
    holder     TEXT        NOT NULL,
    fencing    BIGINT      NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    commits    BIGINT      NOT NULL
);
INSERT INTO kasi_lease (id, holder, fencing, expires_at, commits) VALUES (1, '', 0, '-infinity', 0);
-- The callback dispatcher's state (delivery.rs): the watermark and the
-- dead letters, beside the ledger's rows so that a standby taking over
-- knows what it owes.
CREATE TABLE callback_watermark (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    at_ms BIGINT  NOT NULL
);
CREATE TABLE dead_letters (
    id           BIGINT PRIMARY KEY,
    destination  TEXT   NOT NULL,
    transfer_id  TEXT,
    method       TEXT   NOT NULL,
    url          TEXT   NOT NULL,
    headers      TEXT   NOT NULL,
    body         BYTEA  NOT NULL,
    failed_at_ms BIGINT NOT NULL,
    attempts     BIGINT NOT NULL,
    reason       TEXT   NOT NULL
);
CREATE TABLE certificate_pins (
    fingerprint    BYTEA  PRIMARY KEY,
    participant_id BIGINT NOT NULL,
    pinned_at_ms   BIGINT NOT NULL
);
";
