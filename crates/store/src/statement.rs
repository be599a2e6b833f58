//! A DFSP's statement (`GET /participants/{name}/statement`,
//! `docs/design/back-office.md`): per currency, the opening balance of
//! its POSITION and SETTLEMENT accounts (central-ledger's ledger account
//! types of the same names) at `from`, every committed movement of either
//! in `[from, to)` with the account's running balance, and the closing
//! balance — read on the store's reader connections, a page at a time,
//! within a scan budget, in one read transaction per page.
//!
//! What moves those accounts, and where the store keeps it (the audit's
//! arithmetic, `ledger::Snapshot::audit`: a debit raises an account's
//! value, a credit lowers it):
//! - transfers and FX conversions, when they commit: their
//!   `transfer_finishes` row (COMMITTED, at `finished_at_ms`), found
//!   through the commit index ([`crate::commit_index`]: the account's
//!   commits by minute) where it is filed, and by time through
//!   `transfer_finishes_by_time` after — source [`Source::Commit`];
//! - funds in (committed at once, at `prepared_at_ms`) and funds out
//!   (at their COMMITTED finish), found through `transfers_funds` (funds
//!   movements are few: the ledger keeps every one in memory) —
//!   [`Source::Funds`];
//! - settlement's entries (position resets, finalize, gross settlement),
//!   `settlement_entries` by seq, whose `at_ms` follows seq (the ledger's
//!   clock never goes back) — [`Source::Entry`].
//!
//! A reservation (a prepare, a funds out waiting) moves no value, only the
//! account's reserved amount; the statement shows values, so it leaves
//! reservations out (a transfer prepared in the range and committed after
//! it is not a movement of the range; it is one of the next).
//!
//! Order: by commit instant, then source, then seq ([`Key`]): stable, and
//! the same on every page. Within one millisecond it is not necessarily
//! the order the ledger applied them (the store keeps no commit order
//! across tables for long: the change feed's expires), so a running
//! balance within a millisecond may pass through values the account never
//! held; the balance at every millisecond boundary and the closing one
//! are exact.
//!
//! Opening balance: the exact value before a key is the account's value
//! now minus every movement since ([`Method::Current`]), or the history
//! snapshot's sums (kept for recovery) plus what the snapshot does not
//! sum: commits since its cut, commits of transfers after its
//! `through_seq`, funds movements and settlement entries
//! ([`Method::Snapshot`]), or every movement before it
//! ([`Method::Start`], the same with an empty snapshot). All are read in
//! the same read transaction as the accounts, so all are exact; the one
//! that reads the fewest transfers is read. Each reads the accounts'
//! commits of its range through the commit index (and every DFSP's
//! where it is not filed, the database filtering them), so a key in the
//! middle of a long history costs up to half of the DFSP's (BENCHMARKS.md,
//! "DFSP statements").

use std::collections::HashMap;

use ledger::{AccountId, Amount, Currency, FspName, TransferId};

use crate::commit_index::{self, Filed};
use crate::search::{Dialect, Param};
use crate::StoreError;

/// Rows a page holds at most.
pub const MAX_PAGE: usize = 1_000;
/// Commits a page examines at most (every DFSP's: the walk is by time).
pub const SCAN_BUDGET: usize = 200_000;
/// Commits read per round.
pub const CHUNK: usize = 5_000;

/// Where a movement is recorded; part of its [`Key`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    Commit = 0,
    Funds = 1,
    Entry = 2,
}

impl Source {
    fn of(n: u8) -> Option<Source> {
        [Source::Commit, Source::Funds, Source::Entry]
            .into_iter()
            .find(|s| *s as u8 == n)
    }
}

/// A movement's place in a statement: commit instant, then transfers
/// (commits and funds movements, by their seq: at one instant, the order
/// they were recorded in) before settlement entries (by theirs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub at_ms: i64,
    pub source: Source,
    pub seq: u64,
}

impl Source {
    /// Transfers' seqs and entries' are two sequences: a key orders by
    /// sequence, then by seq within it.
    fn sequence(self) -> u8 {
        match self {
            Source::Commit | Source::Funds => 0,
            Source::Entry => 1,
        }
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        (self.at_ms, self.source.sequence(), self.seq, self.source).cmp(&(
            other.at_ms,
            other.source.sequence(),
            other.seq,
            other.source,
        ))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Key {
    /// The first key at `at_ms`.
    pub fn at(at_ms: i64) -> Key {
        Key {
            at_ms,
            source: Source::Commit,
            seq: 0,
        }
    }

    /// The key right after this one.
    fn next(self) -> Key {
        Key {
            seq: self.seq.saturating_add(1),
            ..self
        }
    }

    /// The `(at, seq)` of `source`'s rows strictly before this key:
    /// `(at, seq) < bound` (a transfer is a commit or a funds movement,
    /// never both, so their seqs never tie).
    fn bound_for(self, source: Source) -> (i64, i64) {
        let seq = match source.sequence().cmp(&self.source.sequence()) {
            std::cmp::Ordering::Less => i64::MAX,
            std::cmp::Ordering::Equal => self.seq.min(i64::MAX as u64) as i64,
            std::cmp::Ordering::Greater => 0,
        };
        (self.at_ms, seq)
    }

    /// `at.source.seq`, as a cursor spells it.
    pub fn text(self) -> String {
        format!("{}.{}.{}", self.at_ms, self.source as u8, self.seq)
    }

    pub fn parse(text: &str) -> Option<Key> {
        let mut parts = text.split('.');
        let at_ms = parts.next()?.parse().ok()?;
        let source = Source::of(parts.next()?.parse().ok()?)?;
        let seq = parts.next()?.parse().ok()?;
        parts.next().is_none().then_some(Key { at_ms, source, seq })
    }
}

/// The two accounts' values at one point of a statement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Balances {
    pub position: Amount,
    pub settlement: Amount,
}

/// Where the next page starts: after `key`, with the balances after it
/// (`None`: not known, e.g. a cursor the hub could not vouch for; the
/// store then reads them as it reads an opening balance).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub key: Key,
    pub balances: Option<Balances>,
}

/// Which account of the DFSP a movement moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ledger {
    Position,
    Settlement,
}

impl Ledger {
    /// Central-ledger's ledger account type.
    pub fn as_str(self) -> &'static str {
        match self {
            Ledger::Position => "POSITION",
            Ledger::Settlement => "SETTLEMENT",
        }
    }
}

/// One movement of one of the DFSP's accounts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Movement {
    pub key: Key,
    /// `TRANSFER`, `FX_CONVERSION`, `FUNDS_IN`, `FUNDS_OUT`, or a
    /// settlement entry's kind (`SETTLEMENT_NET_SENDER`, …,
    /// `GROSS_SETTLEMENT`).
    pub kind: String,
    pub account: Ledger,
    pub account_id: AccountId,
    /// The transfer (a gross settlement entry's too), if any.
    pub transfer_id: Option<TransferId>,
    pub settlement_id: Option<u32>,
    /// The other account's owner (the hub's name for funds and net
    /// settlement; the DFSP itself when both accounts are its own).
    pub counterparty: String,
    /// The change of the account's value (a debit is positive).
    pub amount: Amount,
    /// The account's value after it.
    pub balance: Amount,
}

/// How an opening balance was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// The history snapshot's sums plus what it does not sum.
    Snapshot,
    /// Everything before, summed from the start (a key near the start).
    Start,
    /// The accounts' values now minus what moved since.
    Current,
    /// Carried in the cursor.
    Carried,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Snapshot => "snapshot",
            Method::Start => "start",
            Method::Current => "current",
            Method::Carried => "carried",
        }
    }
}

/// What a statement page asks.
#[derive(Clone, Debug)]
pub struct StatementQuery {
    pub participant: FspName,
    pub currency: Currency,
    /// `[from, to)`, ledger time in ms.
    pub from_ms: i64,
    pub to_ms: i64,
    pub after: Option<Cursor>,
    /// Movements a page holds at most (1 to [`MAX_PAGE`]).
    pub limit: usize,
    pub chunk: usize,
    pub scan_budget: usize,
}

/// One page of a statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatementPage {
    pub position_account: Option<AccountId>,
    pub settlement_account: Option<AccountId>,
    /// The balances the page starts from: at `from` on the first page,
    /// after the cursor's key on the others.
    pub opening: Balances,
    pub method: Method,
    pub movements: Vec<Movement>,
    /// Where the next page starts, if the statement goes on.
    pub next: Option<Cursor>,
    /// The balances at `to`, on the page that reaches it.
    pub closing: Option<Balances>,
    /// False when the scan budget ended the page before it filled.
    pub complete: bool,
    pub examined: usize,
}

/// A column of a row read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Cell {
    Null,
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

/// What a backend runs for [`statement`].
pub(crate) trait StatementSql {
    fn dialect(&self) -> Dialect;
    /// Starts / ends one read transaction (one state of the store).
    fn begin(&mut self) -> Result<(), StoreError>;
    fn end(&mut self) -> Result<(), StoreError>;
    fn rows(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Vec<Cell>>, StoreError>;
}

fn bad(what: &str) -> StoreError {
    StoreError::fatal(format!("statement: unexpected {what} in the store"))
}

fn int(cell: &Cell) -> Result<i64, StoreError> {
    match cell {
        Cell::Int(n) => Ok(*n),
        _ => Err(bad("non-integer")),
    }
}

fn opt_int(cell: &Cell) -> Result<Option<i64>, StoreError> {
    match cell {
        Cell::Null => Ok(None),
        other => int(other).map(Some),
    }
}

fn text(cell: &Cell) -> Result<&str, StoreError> {
    match cell {
        Cell::Text(t) => Ok(t),
        _ => Err(bad("non-text")),
    }
}

fn amount(cell: &Cell) -> Result<Amount, StoreError> {
    Amount::parse_signed(text(cell)?).map_err(|_| bad("amount"))
}

fn transfer_id(cell: &Cell) -> Result<Option<TransferId>, StoreError> {
    match cell {
        Cell::Null => Ok(None),
        Cell::Blob(bytes) => TransferId::from_blob(bytes)
            .map(Some)
            .ok_or_else(|| bad("transfer id")),
        _ => Err(bad("transfer id")),
    }
}

fn add(a: Amount, b: Amount) -> Result<Amount, StoreError> {
    a.checked_add(b)
        .ok_or_else(|| StoreError::fatal("statement balances overflow"))
}

/// The `n`th parameter (an integer), as the dialect writes it.
fn p(dialect: Dialect, n: usize) -> String {
    match dialect {
        Dialect::Sqlite => format!("?{n}"),
        Dialect::Postgres => format!("${n}::bigint"),
    }
}

/// A row that moved money: its key, what it is, the two accounts and the
/// amount.
#[derive(Clone, Debug)]
struct Row {
    key: Key,
    kind: String,
    debit: AccountId,
    credit: AccountId,
    amount: Amount,
    transfer_id: Option<TransferId>,
    settlement_id: Option<u32>,
}

/// The DFSP's accounts and everyone's owners.
struct Accounts {
    position: Option<AccountId>,
    settlement: Option<AccountId>,
    /// Account id → owner's name.
    owners: HashMap<u32, String>,
    /// The two accounts' values now.
    now: Balances,
}

impl Accounts {
    fn ledger_of(&self, account: AccountId) -> Option<Ledger> {
        if Some(account) == self.position {
            Some(Ledger::Position)
        } else if Some(account) == self.settlement {
            Some(Ledger::Settlement)
        } else {
            None
        }
    }

    fn ids(&self) -> (i64, i64) {
        (
            self.position.map_or(-1, |a| i64::from(a.0)),
            self.settlement.map_or(-1, |a| i64::from(a.0)),
        )
    }

    /// What `row` moves on each of the two accounts.
    fn deltas(&self, row: &Row) -> Result<Balances, StoreError> {
        let mut delta = Balances::default();
        for (account, amount) in [
            (row.debit, row.amount),
            (
                row.credit,
                row.amount.checked_neg().ok_or_else(|| bad("amount"))?,
            ),
        ] {
            match self.ledger_of(account) {
                Some(Ledger::Position) => delta.position = add(delta.position, amount)?,
                Some(Ledger::Settlement) => delta.settlement = add(delta.settlement, amount)?,
                None => {}
            }
        }
        Ok(delta)
    }
}

fn read_accounts(
    sql: &mut dyn StatementSql,
    participant: FspName,
    currency: Currency,
) -> Result<Option<Accounts>, StoreError> {
    let rows = sql.rows(
        "SELECT CAST(a.id AS BIGINT), p.name, a.kind, a.currency, a.value
         FROM accounts a JOIN participants p ON p.id = a.participant_id",
        &[],
    )?;
    let mut found = false;
    let mut accounts = Accounts {
        position: None,
        settlement: None,
        owners: HashMap::new(),
        now: Balances::default(),
    };
    for row in &rows {
        let id = int(&row[0])?;
        let id = u32::try_from(id).map_err(|_| bad("account id"))?;
        let name = text(&row[1])?;
        accounts.owners.insert(id, name.to_string());
        if name != participant.as_str() {
            continue;
        }
        found = true;
        if text(&row[3])? != currency.as_str() {
            continue;
        }
        match text(&row[2])? {
            "POSITION" => {
                accounts.position = Some(AccountId(id));
                accounts.now.position = amount(&row[4])?;
            }
            "SETTLEMENT" => {
                accounts.settlement = Some(AccountId(id));
                accounts.now.settlement = amount(&row[4])?;
            }
            _ => {}
        }
    }
    if !found {
        // A participant without accounts is still a participant.
        let named = sql
            .rows(
                &format!(
                    "SELECT CAST(COUNT(*) AS BIGINT) FROM participants WHERE name = {}",
                    match sql.dialect() {
                        Dialect::Sqlite => "?1",
                        Dialect::Postgres => "$1::text",
                    }
                ),
                &[Param::Text(participant.as_str().to_string())],
            )?
            .first()
            .map(|row| int(&row[0]))
            .transpose()?
            .unwrap_or(0);
        if named == 0 {
            return Ok(None);
        }
    }
    Ok(Some(accounts))
}

/// How far the commit index ([`crate::commit_index`]) is filed, as this
/// read transaction sees it.
fn commit_index(sql: &mut dyn StatementSql) -> Result<Option<Filed>, StoreError> {
    sql.rows(
        "SELECT CAST(origin_ms AS BIGINT), CAST(span_ms AS BIGINT), CAST(next_span AS BIGINT)
         FROM commit_index WHERE id = 1",
        &[],
    )?
    .first()
    .map(|row| Filed::checked(int(&row[0])?, int(&row[1])?, int(&row[2])?))
    .transpose()
}

/// The first `(at, seq)` the commit index does not cover.
fn filed_bound(index: Option<Filed>) -> (i64, i64) {
    (
        index.map_or(i64::MIN, |index| index.filed_to_ms()),
        i64::MIN,
    )
}

/// The transfers' and conversions' commits with `lo <= (at, seq) < hi`,
/// in key order, at most `limit`; with `only`, those touching the two
/// accounts: through the commit index where it is filed, by time (the
/// database filtering every DFSP's commits) after.
fn commits(
    sql: &mut dyn StatementSql,
    index: Option<Filed>,
    lo: (i64, i64),
    hi: (i64, i64),
    limit: Option<usize>,
    only: Option<(i64, i64)>,
) -> Result<Vec<Row>, StoreError> {
    let (Some(ids), Some(index)) = (only, index) else {
        return walk_commits(sql, lo, hi, limit, only);
    };
    let filed = filed_bound(Some(index));
    let mut rows = Vec::new();
    if lo < filed {
        rows = indexed_commits(sql, index, ids, lo, hi.min(filed), limit)?;
        if hi <= filed || limit.is_some_and(|limit| rows.len() >= limit) {
            return Ok(rows);
        }
    }
    let rest = limit.map(|limit| limit - rows.len());
    rows.extend(walk_commits(sql, lo.max(filed), hi, rest, only)?);
    Ok(rows)
}

/// Spans of the commit index a read asks for at first; it asks for more
/// each time (a quiet DFSP's month is a few thousand small rows, a busy
/// one's minute thousands of commits).
const FIRST_SPANS: u64 = 16;
const MOST_SPANS_PER_READ: u64 = 4_096;
/// Commits fetched by seq in one query.
const FETCH_SEQS: usize = 500;

/// [`commits`] of the two accounts in `[lo, hi)`, all within the filed
/// spans: their (instant, seq) from the index, then each commit fetched by
/// seq with every check (committed, a transfer or a conversion).
fn indexed_commits(
    sql: &mut dyn StatementSql,
    index: Filed,
    (a, b): (i64, i64),
    lo: (i64, i64),
    hi: (i64, i64),
    limit: Option<usize>,
) -> Result<Vec<Row>, StoreError> {
    if index.next_span == 0 || lo >= hi {
        return Ok(Vec::new());
    }
    let d = sql.dialect();
    let read = format!(
        "SELECT CAST(key AS BIGINT), entries FROM commit_spans WHERE key >= {} AND key < {} ORDER BY key",
        p(d, 1),
        p(d, 2)
    );
    let last_span = index.span_of(hi.0).min(index.next_span - 1);
    let mut span = index.span_of(lo.0);
    let mut spans = FIRST_SPANS;
    let mut found: Vec<(i64, u64)> = Vec::new();
    while span <= last_span {
        let upto = (span + spans).min(last_span + 1);
        for account in [a, b] {
            let Ok(account) = u32::try_from(account) else {
                continue;
            };
            let first = commit_index::row_key(AccountId(account), 0)?;
            let (low, high) = (first + span as i64, first + upto as i64);
            for row in sql.rows(&read, &[Param::Int(low), Param::Int(high)])? {
                let (key, entries) = match (&row[0], &row[1]) {
                    (Cell::Int(key), Cell::Blob(entries)) => (*key, entries),
                    _ => return Err(bad("commit index row")),
                };
                found.extend(
                    commit_index::entries_of(index, key, entries)?
                        .filter(|&(at, seq)| (at, seq as i64) >= lo && (at, seq as i64) < hi),
                );
            }
        }
        found.sort_unstable();
        found.dedup();
        if limit.is_some_and(|limit| found.len() >= limit) {
            break;
        }
        span = upto;
        spans = (spans * 4).min(MOST_SPANS_PER_READ);
    }
    found.truncate(limit.unwrap_or(usize::MAX));
    let query = commits_by_seq(d);
    let mut rows = Vec::with_capacity(found.len());
    for seqs in found.chunks(FETCH_SEQS) {
        let list = seqs
            .iter()
            .map(|(_, seq)| seq.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let list = match d {
            Dialect::Sqlite => format!("[{list}]"),
            Dialect::Postgres => format!("{{{list}}}"),
        };
        let fetched = sql.rows(&query, &[Param::Text(list)])?;
        if fetched.len() != seqs.len() {
            return Err(StoreError::fatal(format!(
                "commit index: {} of {} transfers filed as committed are not",
                seqs.len() - fetched.len(),
                seqs.len()
            )));
        }
        for row in &fetched {
            rows.push(commit_row(row, Source::Commit)?);
        }
    }
    rows.sort_by_key(|row| row.key);
    Ok(rows)
}

/// The committed transfers and conversions of a list of seqs (a JSON
/// array on SQLite, an array literal on PostgreSQL), each by its key.
fn commits_by_seq(d: Dialect) -> String {
    let listed = match d {
        Dialect::Sqlite => "f.seq IN (SELECT value FROM json_each(?1))",
        Dialect::Postgres => "f.seq = ANY(CAST($1::text AS bigint[]))",
    };
    format!(
        "SELECT CAST(f.finished_at_ms AS BIGINT), CAST(f.seq AS BIGINT), t.kind, t.transfer_id,
                CAST(t.debit_account_id AS BIGINT), CAST(t.credit_account_id AS BIGINT), t.amount
         FROM transfer_finishes f JOIN transfers t ON t.seq = f.seq
         WHERE {listed} AND f.state = 'COMMITTED' AND t.kind IN ('TRANSFER', 'FX_CONVERSION')"
    )
}

/// The transfers' and conversions' commits with `lo <= (at, seq) < hi`,
/// in key order, at most `limit` (`None`: all, and only those touching
/// `accounts`' two, filtered by the database), by time.
fn walk_commits(
    sql: &mut dyn StatementSql,
    lo: (i64, i64),
    hi: (i64, i64),
    limit: Option<usize>,
    only: Option<(i64, i64)>,
) -> Result<Vec<Row>, StoreError> {
    let d = sql.dialect();
    let indexed = match d {
        Dialect::Sqlite => " INDEXED BY transfer_finishes_by_time",
        Dialect::Postgres => "",
    };
    let mut params = vec![
        Param::Int(lo.0),
        Param::Int(lo.1),
        Param::Int(hi.0),
        Param::Int(hi.1),
    ];
    let mut filter = String::new();
    if let Some((a, b)) = only {
        params.extend([Param::Int(a), Param::Int(b)]);
        filter = format!(
            " AND (t.debit_account_id IN ({a}, {b}) OR t.credit_account_id IN ({a}, {b}))",
            a = p(d, 5),
            b = p(d, 6)
        );
    }
    let limit = limit.map_or(String::new(), |n| format!(" LIMIT {n}"));
    let query = format!(
        "SELECT CAST(f.finished_at_ms AS BIGINT), CAST(f.seq AS BIGINT), t.kind, t.transfer_id,
                CAST(t.debit_account_id AS BIGINT), CAST(t.credit_account_id AS BIGINT), t.amount
         FROM transfer_finishes f{indexed} JOIN transfers t ON t.seq = f.seq
         WHERE f.finished_at_ms >= {lo_at} AND f.finished_at_ms <= {hi_at}
           AND (f.finished_at_ms > {lo_at} OR f.seq >= {lo_seq})
           AND (f.finished_at_ms < {hi_at} OR f.seq < {hi_seq})
           AND f.state = 'COMMITTED' AND t.kind IN ('TRANSFER', 'FX_CONVERSION'){filter}
         ORDER BY f.finished_at_ms, f.seq{limit}",
        lo_at = p(d, 1),
        lo_seq = p(d, 2),
        hi_at = p(d, 3),
        hi_seq = p(d, 4),
    );
    sql.rows(&query, &params)?
        .iter()
        .map(|row| commit_row(row, Source::Commit))
        .collect()
}

/// A row of [`commits`] (or of funds): at, seq, kind, id, debit, credit,
/// amount.
fn commit_row(row: &[Cell], source: Source) -> Result<Row, StoreError> {
    let account = |cell: &Cell| -> Result<AccountId, StoreError> {
        u32::try_from(int(cell)?)
            .map(AccountId)
            .map_err(|_| bad("account id"))
    };
    Ok(Row {
        key: Key {
            at_ms: int(&row[0])?,
            source,
            seq: int(&row[1])? as u64,
        },
        kind: text(&row[2])?.to_string(),
        transfer_id: transfer_id(&row[3])?,
        debit: account(&row[4])?,
        credit: account(&row[5])?,
        amount: amount(&row[6])?,
        settlement_id: None,
    })
}

/// Commits of transfers after `through_seq` that finished before `cut_ms`
/// and touch the accounts: what a history snapshot stepping through a long
/// history has not summed yet.
fn commits_after_seq(
    sql: &mut dyn StatementSql,
    through_seq: i64,
    cut_ms: i64,
    (a, b): (i64, i64),
) -> Result<Vec<Row>, StoreError> {
    let d = sql.dialect();
    // By seq (few after the snapshot's), never by the time index (every
    // finish before the cut).
    let by_seq = match d {
        Dialect::Sqlite => " NOT INDEXED",
        Dialect::Postgres => "",
    };
    let query = format!(
        "SELECT CAST(f.finished_at_ms AS BIGINT), CAST(f.seq AS BIGINT), t.kind, t.transfer_id,
                CAST(t.debit_account_id AS BIGINT), CAST(t.credit_account_id AS BIGINT), t.amount
         FROM transfer_finishes f{by_seq} JOIN transfers t ON t.seq = f.seq
         WHERE f.seq > {} AND f.finished_at_ms < {} AND f.state = 'COMMITTED'
           AND t.kind IN ('TRANSFER', 'FX_CONVERSION')
           AND (t.debit_account_id IN ({a}, {b}) OR t.credit_account_id IN ({a}, {b}))",
        p(d, 1),
        p(d, 2),
        a = p(d, 3),
        b = p(d, 4),
    );
    sql.rows(
        &query,
        &[
            Param::Int(through_seq),
            Param::Int(cut_ms),
            Param::Int(a),
            Param::Int(b),
        ],
    )?
    .iter()
    .map(|row| commit_row(row, Source::Commit))
    .collect()
}

/// Every committed funds movement of the two accounts, in key order.
fn funds(sql: &mut dyn StatementSql, (a, b): (i64, i64)) -> Result<Vec<Row>, StoreError> {
    let d = sql.dialect();
    let query = format!(
        "SELECT CAST(CASE WHEN t.kind = 'FUNDS_IN' THEN t.prepared_at_ms ELSE f.finished_at_ms END AS BIGINT),
                CAST(t.seq AS BIGINT), t.kind, t.transfer_id,
                CAST(t.debit_account_id AS BIGINT), CAST(t.credit_account_id AS BIGINT), t.amount
         FROM transfers t LEFT JOIN transfer_finishes f ON f.seq = t.seq
         WHERE t.kind IN ('FUNDS_IN', 'FUNDS_OUT')
           AND (t.debit_account_id IN ({a}, {b}) OR t.credit_account_id IN ({a}, {b}))
           AND ((t.kind = 'FUNDS_IN' AND t.state = 'COMMITTED') OR f.state = 'COMMITTED')",
        a = p(d, 1),
        b = p(d, 2),
    );
    let mut rows: Vec<Row> = sql
        .rows(&query, &[Param::Int(a), Param::Int(b)])?
        .iter()
        .map(|row| commit_row(row, Source::Funds))
        .collect::<Result<_, _>>()?;
    rows.sort_by_key(|row| row.key);
    Ok(rows)
}

/// The first seq of `table` whose `at` column is at or after `at` (one
/// past the last if none), and the last seq: a bisection on the primary
/// key, as both tables are written in time order (the ledger's clock never
/// goes back): transfers by their prepare, settlement entries by their
/// posting.
fn first_seq_at(
    sql: &mut dyn StatementSql,
    table: &str,
    column: &str,
    at: i64,
) -> Result<(i64, i64), StoreError> {
    let d = sql.dialect();
    let last = sql
        .rows(
            &format!("SELECT CAST(COALESCE(MAX(seq), 0) AS BIGINT) FROM {table}"),
            &[],
        )?
        .first()
        .map(|row| int(&row[0]))
        .transpose()?
        .unwrap_or(0);
    let query = format!(
        "SELECT CAST({column} AS BIGINT) FROM {table} WHERE seq >= {} ORDER BY seq LIMIT 1",
        p(d, 1)
    );
    let (mut low, mut high) = (1i64, last + 1);
    while low < high {
        let middle = low + (high - low) / 2;
        let at_ms = sql
            .rows(&query, &[Param::Int(middle)])?
            .first()
            .map(|row| int(&row[0]))
            .transpose()?;
        match at_ms {
            Some(at_ms) if at_ms >= at => high = middle,
            Some(_) => low = middle + 1,
            None => high = middle,
        }
    }
    Ok((low, last))
}

/// The first settlement entry seq with `at_ms >= at`.
fn first_entry_at(sql: &mut dyn StatementSql, at: i64) -> Result<i64, StoreError> {
    Ok(first_seq_at(sql, "settlement_entries", "at_ms", at)?.0)
}

/// Settlement entries with `from_seq <= seq < to_seq`, in seq (= key)
/// order, at most `limit`; with `only`, those touching the two accounts.
fn entries(
    sql: &mut dyn StatementSql,
    from_seq: i64,
    to_seq: i64,
    limit: Option<usize>,
    only: Option<(i64, i64)>,
) -> Result<Vec<Row>, StoreError> {
    let d = sql.dialect();
    let mut params = vec![Param::Int(from_seq), Param::Int(to_seq)];
    let mut filter = String::new();
    if let Some((a, b)) = only {
        params.extend([Param::Int(a), Param::Int(b)]);
        filter = format!(
            " AND (debit_account_id IN ({a}, {b}) OR credit_account_id IN ({a}, {b}))",
            a = p(d, 3),
            b = p(d, 4)
        );
    }
    let limit = limit.map_or(String::new(), |n| format!(" LIMIT {n}"));
    let query = format!(
        "SELECT CAST(at_ms AS BIGINT), CAST(seq AS BIGINT), kind, transfer_id,
                CAST(debit_account_id AS BIGINT), CAST(credit_account_id AS BIGINT), amount,
                CAST(settlement_id AS BIGINT)
         FROM settlement_entries WHERE seq >= {} AND seq < {}{filter} ORDER BY seq{limit}",
        p(d, 1),
        p(d, 2),
    );
    sql.rows(&query, &params)?
        .iter()
        .map(|row| {
            let mut entry = commit_row(row, Source::Entry)?;
            entry.settlement_id = opt_int(&row[7])?.map(|id| id as u32);
            Ok(entry)
        })
        .collect()
}

/// The first entry seq whose key is at or after `key`.
fn first_entry_from(sql: &mut dyn StatementSql, key: Key) -> Result<i64, StoreError> {
    let (at, seq) = key.bound_for(Source::Entry);
    let first_at = first_entry_at(sql, at)?;
    if seq <= first_at {
        return Ok(first_at);
    }
    // Entries at `at` with seqs below `seq` come before the key.
    let after_at = first_entry_at(sql, at.saturating_add(1))?;
    Ok(seq.min(after_at))
}

fn sum(accounts: &Accounts, rows: &[Row]) -> Result<Balances, StoreError> {
    let mut total = Balances::default();
    for row in rows {
        let delta = accounts.deltas(row)?;
        total.position = add(total.position, delta.position)?;
        total.settlement = add(total.settlement, delta.settlement)?;
    }
    Ok(total)
}

fn minus(a: Balances, b: Balances) -> Result<Balances, StoreError> {
    let neg = |x: Amount| x.checked_neg().ok_or_else(|| bad("amount"));
    Ok(Balances {
        position: add(a.position, neg(b.position)?)?,
        settlement: add(a.settlement, neg(b.settlement)?)?,
    })
}

fn plus(a: Balances, b: Balances) -> Result<Balances, StoreError> {
    Ok(Balances {
        position: add(a.position, b.position)?,
        settlement: add(a.settlement, b.settlement)?,
    })
}

/// The history snapshot's cut, `through_seq` and the two accounts'
/// sums, if the store keeps one.
fn snapshot(
    sql: &mut dyn StatementSql,
    accounts: &Accounts,
) -> Result<Option<(i64, i64, Balances)>, StoreError> {
    let Some(row) = sql
        .rows(
            "SELECT CAST(cut_ms AS BIGINT), CAST(through_seq AS BIGINT) FROM history_snapshot WHERE id = 1",
            &[],
        )?
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let (cut, through) = (int(&row[0])?, int(&row[1])?);
    let d = sql.dialect();
    let (a, b) = accounts.ids();
    let mut sums = Balances::default();
    for row in sql.rows(
        &format!(
            "SELECT CAST(account_id AS BIGINT), value FROM history_snapshot_values WHERE account_id IN ({}, {})",
            p(d, 1),
            p(d, 2)
        ),
        &[Param::Int(a), Param::Int(b)],
    )? {
        let value = amount(&row[1])?;
        if int(&row[0])? == a {
            sums.position = value;
        } else {
            sums.settlement = value;
        }
    }
    Ok(Some((cut, through, sums)))
}

/// The two accounts' values before `key`, exactly, read the shorter way;
/// `funds` are the accounts' funds movements.
fn balances_before(
    sql: &mut dyn StatementSql,
    index: Option<Filed>,
    accounts: &Accounts,
    funds: &[Row],
    key: Key,
) -> Result<(Balances, Method), StoreError> {
    let ids = accounts.ids();
    let funds_before: Vec<Row> = funds.iter().filter(|r| r.key < key).cloned().collect();
    let funds_since: Vec<Row> = funds.iter().filter(|r| r.key >= key).cloned().collect();
    // What each way reads, in transfers (a commit follows its prepare
    // closely, and transfers are numbered in prepare order): forward from
    // the stored snapshot, if the key is past its cut (with the transfers
    // after its `through_seq`), or from the start (an empty snapshot:
    // through seq 0, no cut); else back from the accounts' values now.
    let (at_key, last) = first_seq_at(sql, "transfers", "prepared_at_ms", key.at_ms)?;
    let (cut, through, sums, forward, method) = match snapshot(sql, accounts)? {
        Some((cut, through, sums)) if key.at_ms >= cut => {
            let at_cut = first_seq_at(sql, "transfers", "prepared_at_ms", cut)?.0;
            let forward = (at_key - at_cut) + (last - through).max(0);
            match forward < at_key {
                true => (cut, through, sums, forward, Method::Snapshot),
                false => (i64::MIN, 0, Balances::default(), at_key, Method::Start),
            }
        }
        _ => (i64::MIN, 0, Balances::default(), at_key, Method::Start),
    };
    let backward = last - at_key;
    let entries_from = first_entry_from(sql, key)?;
    if forward <= backward {
        let (at, seq) = key.bound_for(Source::Commit);
        let mut rows = commits(sql, index, (cut, i64::MIN), (at, seq), None, Some(ids))?;
        // Summed from the start, nothing is left out; a snapshot leaves
        // out the transfers after its `through_seq` that finished before
        // its cut (found by seq: few, once it has caught up).
        if method == Method::Snapshot && through < last {
            rows.extend(commits_after_seq(sql, through, cut, ids)?);
        }
        rows.extend(funds_before);
        rows.extend(entries(sql, 1, entries_from, None, Some(ids))?);
        return Ok((plus(sums, sum(accounts, &rows)?)?, method));
    }
    let (at, seq) = key.bound_for(Source::Commit);
    let mut rows = commits(sql, index, (at, seq), (i64::MAX, i64::MAX), None, Some(ids))?;
    rows.extend(funds_since);
    rows.extend(entries(sql, entries_from, i64::MAX, None, Some(ids))?);
    Ok((minus(accounts.now, sum(accounts, &rows)?)?, Method::Current))
}

/// One page of `query`'s statement, in one read transaction; `None` when
/// no participant has that name.
pub(crate) fn statement(
    sql: &mut dyn StatementSql,
    query: &StatementQuery,
) -> Result<Option<StatementPage>, StoreError> {
    sql.begin()?;
    let page = read_page(sql, query);
    let ended = sql.end();
    let page = page?;
    ended?;
    Ok(page)
}

fn read_page(
    sql: &mut dyn StatementSql,
    query: &StatementQuery,
) -> Result<Option<StatementPage>, StoreError> {
    let Some(accounts) = read_accounts(sql, query.participant, query.currency)? else {
        return Ok(None);
    };
    let mut page = StatementPage {
        position_account: accounts.position,
        settlement_account: accounts.settlement,
        opening: Balances::default(),
        method: Method::Carried,
        movements: Vec::new(),
        next: None,
        closing: None,
        complete: true,
        examined: 0,
    };
    if accounts.position.is_none() && accounts.settlement.is_none() {
        page.closing = Some(Balances::default());
        return Ok(Some(page));
    }
    let ids = accounts.ids();
    let index = commit_index(sql)?;
    let funds_rows = funds(sql, ids)?;
    // The first key the page may show.
    let start = match query.after {
        Some(cursor) => cursor.key.next(),
        None => Key::at(query.from_ms),
    };
    let (opening, method) = match query.after.and_then(|cursor| cursor.balances) {
        Some(balances) => (balances, Method::Carried),
        None => balances_before(sql, index, &accounts, &funds_rows, start)?,
    };
    page.opening = opening;
    page.method = method;
    let end = Key::at(query.to_ms);
    if start >= end {
        page.closing = Some(opening);
        return Ok(Some(page));
    }
    let limit = query.limit.clamp(1, MAX_PAGE);
    let chunk = query.chunk.max(1);
    let mut walk = Walk {
        index,
        ids,
        commits: Default::default(),
        funds: funds_rows
            .into_iter()
            .filter(|r| r.key >= start && r.key < end)
            .collect(),
        entries: Default::default(),
        commits_read_to: Some(start),
        entries_read_to: Some(start),
        entry_next: first_entry_from(sql, start)?,
        entries_end: first_entry_from(sql, end)?,
    };
    let mut balances = opening;
    // The last key passed (shown or not the DFSP's).
    let mut last: Option<Key> = None;
    loop {
        page.examined += walk.refill(sql, end, chunk)?;
        // Every row before the frontier has been read: the buffered rows
        // before it are in order.
        let frontier = match (walk.commits_read_to, walk.entries_read_to) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut full = false;
        while let Some((which, key)) = walk.head() {
            if frontier.is_some_and(|frontier| key >= frontier) {
                break;
            }
            let row = walk.buffer(which).pop_front().expect("a head");
            let legs = legs(&accounts, &row);
            if legs > 0 && !page.movements.is_empty() && page.movements.len() + legs > limit {
                walk.buffer(which).push_front(row);
                full = true;
                break;
            }
            show(&accounts, &row, &mut balances, &mut page.movements)?;
            last = Some(key);
            if page.movements.len() >= limit {
                full = true;
                break;
            }
        }
        if !full && frontier.is_none() && walk.head().is_none() {
            page.closing = Some(balances);
            return Ok(Some(page));
        }
        if full || page.examined >= query.scan_budget {
            page.complete = full;
            let key = match (full, last, frontier) {
                // Every row before the frontier passed: the next page
                // starts at it.
                (false, _, Some(frontier)) => Key {
                    seq: frontier.seq.saturating_sub(1),
                    ..frontier
                },
                (_, Some(last), _) => last,
                (_, None, _) => Key {
                    seq: start.seq.saturating_sub(1),
                    ..start
                },
            };
            page.next = Some(Cursor {
                key,
                balances: Some(balances),
            });
            return Ok(Some(page));
        }
    }
}

/// Which buffer of a [`Walk`].
#[derive(Clone, Copy)]
enum Buffer {
    Commits,
    Funds,
    Entries,
}

/// A page's walk over the three sources: the rows read and not yet
/// passed, each in key order, and how far the two long ones were read
/// (`None`: to the end of the range).
struct Walk {
    index: Option<Filed>,
    /// The DFSP's two accounts.
    ids: (i64, i64),
    commits: std::collections::VecDeque<Row>,
    funds: std::collections::VecDeque<Row>,
    entries: std::collections::VecDeque<Row>,
    commits_read_to: Option<Key>,
    entries_read_to: Option<Key>,
    entry_next: i64,
    entries_end: i64,
}

impl Walk {
    /// Reads the next chunk of each long source whose rows were all
    /// passed; the rows read.
    fn refill(
        &mut self,
        sql: &mut dyn StatementSql,
        end: Key,
        chunk: usize,
    ) -> Result<usize, StoreError> {
        let mut read = 0;
        if let (true, Some(from)) = (self.commits.is_empty(), self.commits_read_to) {
            // Where the index is filed, the DFSP's commits only; after
            // it, every DFSP's, a chunk at a time (the scan budget bounds
            // what a page reads, wherever the DFSP's commits are).
            let filed = filed_bound(self.index);
            let from = from.bound_for(Source::Commit);
            let (to, only, filed_end) = match from < filed {
                true => {
                    let to = end.bound_for(Source::Commit).min(filed);
                    let more = (to == filed).then(|| Key::at(filed.0));
                    (to, Some(self.ids), more)
                }
                false => (end.bound_for(Source::Commit), None, None),
            };
            let rows = commits(sql, self.index, from, to, Some(chunk), only)?;
            read += rows.len();
            self.commits_read_to = match rows.len() < chunk {
                true => filed_end,
                false => rows.last().map(|r| r.key.next()),
            };
            self.commits.extend(rows);
        }
        if let (true, Some(_)) = (self.entries.is_empty(), self.entries_read_to) {
            let rows = entries(sql, self.entry_next, self.entries_end, Some(chunk), None)?;
            read += rows.len();
            self.entries_read_to = match rows.len() < chunk {
                true => None,
                false => rows.last().map(|r| r.key.next()),
            };
            if let Some(row) = rows.last() {
                self.entry_next = row.key.seq as i64 + 1;
            }
            self.entries.extend(rows);
        }
        Ok(read)
    }

    /// The buffer whose first row comes first, and that row's key.
    fn head(&self) -> Option<(Buffer, Key)> {
        [
            (Buffer::Commits, self.commits.front()),
            (Buffer::Funds, self.funds.front()),
            (Buffer::Entries, self.entries.front()),
        ]
        .into_iter()
        .filter_map(|(which, row)| row.map(|row| (which, row.key)))
        .min_by_key(|(_, key)| *key)
    }

    fn buffer(&mut self, which: Buffer) -> &mut std::collections::VecDeque<Row> {
        match which {
            Buffer::Commits => &mut self.commits,
            Buffer::Funds => &mut self.funds,
            Buffer::Entries => &mut self.entries,
        }
    }
}

/// How many of the DFSP's accounts `row` moves.
fn legs(accounts: &Accounts, row: &Row) -> usize {
    usize::from(accounts.ledger_of(row.debit).is_some())
        + usize::from(accounts.ledger_of(row.credit).is_some())
}

/// Adds `row`'s movements of the DFSP's accounts to the page.
fn show(
    accounts: &Accounts,
    row: &Row,
    balances: &mut Balances,
    movements: &mut Vec<Movement>,
) -> Result<(), StoreError> {
    let name = |account: AccountId| {
        accounts
            .owners
            .get(&account.0)
            .cloned()
            .unwrap_or_else(|| format!("account {}", account.0))
    };
    let credit = row.amount.checked_neg().ok_or_else(|| bad("amount"))?;
    for (account, other, amount) in [
        (row.debit, row.credit, row.amount),
        (row.credit, row.debit, credit),
    ] {
        let Some(ledger) = accounts.ledger_of(account) else {
            continue;
        };
        let balance = match ledger {
            Ledger::Position => &mut balances.position,
            Ledger::Settlement => &mut balances.settlement,
        };
        *balance = add(*balance, amount)?;
        movements.push(Movement {
            key: row.key,
            kind: row.kind.clone(),
            account: ledger,
            account_id: account,
            transfer_id: row.transfer_id,
            settlement_id: row.settlement_id,
            counterparty: name(other),
            amount,
            balance: *balance,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_by_time_then_source_then_seq_and_read_back() {
        let a = Key {
            at_ms: 5,
            source: Source::Entry,
            seq: 1,
        };
        let b = Key {
            at_ms: 6,
            source: Source::Commit,
            seq: 9,
        };
        assert!(a < b);
        // At one instant, transfers by seq whichever their source, then
        // entries.
        let funds = Key {
            at_ms: 6,
            source: Source::Funds,
            seq: 4,
        };
        assert!(funds < b);
        assert!(
            b < Key {
                at_ms: 6,
                source: Source::Entry,
                seq: 1
            }
        );
        assert!(Key::at(5) < a);
        assert_eq!(Key::parse(&a.text()), Some(a));
        assert_eq!(Key::parse("5.3.1"), None);
        assert_eq!(Key::parse("5.1"), None);
        assert_eq!(Key::parse("5.1.2.3"), None);
    }

    /// A statement's commits through the index are fetched by key, each
    /// transfer and its finish: never a scan of either table.
    #[test]
    fn commits_listed_by_seq_are_read_by_their_keys() {
        let dir = tempfile::tempdir().unwrap();
        drop(crate::sqlite::SqliteStore::open(dir.path(), Default::default()).unwrap());
        let connection =
            rusqlite::Connection::open(dir.path().join(crate::sqlite::DATABASE_FILE)).unwrap();
        let mut plan = connection
            .prepare(&format!(
                "EXPLAIN QUERY PLAN {}",
                commits_by_seq(Dialect::Sqlite)
            ))
            .unwrap();
        let details: Vec<String> = plan
            .query_map(["[1,2,3]"], |row| row.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for table in ["f", "t"] {
            assert!(
                details
                    .iter()
                    .any(|d| d == &format!("SEARCH {table} USING INTEGER PRIMARY KEY (rowid=?)")),
                "{details:?}"
            );
        }
        assert!(
            !details
                .iter()
                .any(|d| d.starts_with("SCAN f") || d.starts_with("SCAN t")),
            "{details:?}"
        );
    }

    #[test]
    fn a_key_bounds_each_source() {
        let key = Key {
            at_ms: 10,
            source: Source::Funds,
            seq: 7,
        };
        assert_eq!(key.bound_for(Source::Commit), (10, 7));
        assert_eq!(key.bound_for(Source::Funds), (10, 7));
        assert_eq!(key.bound_for(Source::Entry), (10, 0));
    }
}
