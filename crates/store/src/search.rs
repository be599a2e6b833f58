//! The columns a transfer is searched by (`docs/design/back-office.md`):
//! who pays and who is paid (participants, not accounts: a DFSP has an
//! account per currency, and an index on accounts cannot list a DFSP's
//! transfers newest first), the currency, and the amount as an integer.
//!
//! They are the store's, not the ledger's: derived at write time from the
//! accounts the store already holds, so the ledger's records and the
//! recovery that reads them do not change. Each writer keeps the accounts'
//! owners and currencies in an [`AccountOwners`], read at open and kept
//! current from the batch's `Account` records (which precede any transfer
//! on them).

use ledger::{AccountId, Amount, Currency, FspName, ParticipantId, StoredTransfer, TransferState};

use crate::party_index;
use crate::StoreError;

/// Each account's participant and currency, by account id (dense from 1).
#[derive(Debug, Default)]
pub(crate) struct AccountOwners {
    by_id: Vec<Option<(ParticipantId, Currency)>>,
}

impl AccountOwners {
    pub(crate) fn note(
        &mut self,
        account: AccountId,
        participant: ParticipantId,
        currency: Currency,
    ) {
        let at = account.0 as usize;
        if self.by_id.len() <= at {
            self.by_id.resize(at + 1, None);
        }
        self.by_id[at] = Some((participant, currency));
    }

    /// The account's participant and currency; `None` for an account the
    /// store was never told of (its transfer is then found by neither).
    pub(crate) fn of(&self, account: AccountId) -> Option<(ParticipantId, Currency)> {
        self.by_id.get(account.0 as usize).copied().flatten()
    }
}

/// The search columns of one transfer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SearchColumns {
    pub payer: Option<u32>,
    pub payee: Option<u32>,
    pub currency: Option<Currency>,
    pub amount_units: i64,
}

impl SearchColumns {
    pub(crate) fn of(
        owners: &AccountOwners,
        debit: AccountId,
        credit: AccountId,
        amount: Amount,
    ) -> SearchColumns {
        let debit = owners.of(debit);
        let credit = owners.of(credit);
        SearchColumns {
            payer: debit.map(|(participant, _)| participant.0),
            payee: credit.map(|(participant, _)| participant.0),
            currency: debit.or(credit).map(|(_, currency)| currency),
            amount_units: amount_units(amount),
        }
    }
}

/// An amount in ten-thousandths as a 64-bit integer, for the amount
/// index: exact up to 922,337,203,685,477.5807, the largest beyond it
/// (a search re-checks the exact amount of every row it returns).
pub(crate) fn amount_units(amount: Amount) -> i64 {
    i64::try_from(amount.units()).unwrap_or(if amount.is_negative() {
        i64::MIN
    } else {
        i64::MAX
    })
}

/// How often the writer files the transfers committed since its last
/// pass in `transfer_keys` (their payer and payee), and how many
/// transfers one pass files at most (which bounds how long the commit
/// that carries it takes: ~15 µs a transfer).
///
/// Filing each transfer's keys in its own commit cost the transfer path
/// 8 % of its throughput: a DFSP's entries sit in the middle of each
/// index, so every commit dirtied (and wrote to the WAL) a page per DFSP
/// per index. A pass every 250 ms dirties each of those pages once for
/// hundreds of transfers; a search walks the keys up to the pass and the
/// few transfers after it directly (`search_index.through_seq`).
#[derive(Clone, Copy, Debug)]
pub struct SearchPass {
    pub every: std::time::Duration,
    pub most_transfers: u64,
}

impl Default for SearchPass {
    fn default() -> SearchPass {
        SearchPass {
            every: std::time::Duration::from_millis(250),
            most_transfers: 5_000,
        }
    }
}

/// The writer's side of [`SearchPass`]: through which seq the keys are
/// filed, and the last seq committed before the commit being written
/// (a pass files only committed transfers, so that PostgreSQL's one
/// statement, which cannot see its own inserts, files the same).
#[derive(Debug)]
pub(crate) struct PassClock {
    pub(crate) pass: SearchPass,
    pub(crate) through: u64,
    pub(crate) committed: u64,
    /// The last pass, or when the writer started.
    last: std::time::Instant,
}

impl PassClock {
    pub(crate) fn new(pass: SearchPass, through: u64, committed: u64) -> PassClock {
        PassClock {
            pass,
            through,
            committed,
            last: std::time::Instant::now(),
        }
    }

    /// The seqs this commit's pass files, `(after, through]`, if one is
    /// due: a second since the last, or [`SearchPass::most_transfers`]
    /// waiting.
    pub(crate) fn due(&mut self) -> Option<(u64, u64)> {
        let waiting = self.committed.saturating_sub(self.through);
        if waiting == 0 {
            return None;
        }
        let timely = self.last.elapsed() >= self.pass.every;
        if !timely && waiting < self.pass.most_transfers {
            return None;
        }
        let through = self.through + waiting.min(self.pass.most_transfers.max(1));
        Some((self.through, through))
    }

    /// After the commit that carried the pass `(_, through]`.
    pub(crate) fn passed(&mut self, through: u64) {
        self.through = through;
        self.last = std::time::Instant::now();
    }

    /// After any commit: its transfers may be filed from the next one.
    pub(crate) fn committed(&mut self, last_seq: u64) {
        self.committed = self.committed.max(last_seq);
    }
}

/// The keys a transfer or finish is filed under in its own commit, as
/// the search filters by them: a failure's error code (`e:`) and final
/// state other than COMMITTED (`s:`), a commit's settlement window (`w:`).
/// Failures are few, and a window's entries all go at the end of its
/// range (one page a commit, whatever the DFSPs): they cost little where
/// they are written, and a search by them needs no pass.
pub(crate) fn commit_keys(
    state: TransferState,
    reason: Option<u16>,
    window: Option<u32>,
) -> [Option<String>; 3] {
    let state = match state {
        TransferState::Committed | TransferState::Reserved => None,
        failed => Some(format!("s:{}", failed.as_str())),
    };
    [
        state,
        reason.map(|code| format!("e:{code}")),
        window.map(|window| format!("w:{window}")),
    ]
}

/// The keys a pass files for the transfers in `(after, through]` (two
/// parameters' numbers): each one's payer and payee, in key order (each
/// index page dirtied once).
pub(crate) fn pass_select(dialect: Dialect, after: usize, through: usize) -> String {
    let cast = match dialect {
        Dialect::Sqlite => "",
        Dialect::Postgres => "::bigint",
    };
    let range = format!(
        "seq > {}{cast} AND seq <= {}{cast}",
        dialect.placeholder(after),
        dialect.placeholder(through)
    );
    format!(
        "SELECT key, seq FROM (
             SELECT 'p:' || payer_id AS key, seq FROM transfers WHERE {range} AND payer_id IS NOT NULL
             UNION ALL SELECT 'q:' || payee_id, seq FROM transfers WHERE {range} AND payee_id IS NOT NULL
         ) keys ORDER BY key, seq"
    )
}

/// A search of the stored transfers (`GET /transfers`): every filter
/// given must hold; newest first.
#[derive(Clone, Debug)]
pub struct TransferQuery {
    pub payer: Option<FspName>,
    pub payee: Option<FspName>,
    /// A party the prepare's ILP packet names (`TYPE/identifier` or
    /// `TYPE/identifier/subId`), as payer or payee, or only as
    /// [`TransferQuery::party_role`].
    pub party: Option<String>,
    pub party_role: Option<PartyRole>,
    pub currency: Option<Currency>,
    /// The transfer's state now (its finish's, else its own).
    pub state: Option<TransferState>,
    /// The error it failed with.
    pub error_code: Option<u16>,
    pub min_amount: Option<Amount>,
    pub max_amount: Option<Amount>,
    /// The settlement window its commit fell in.
    pub settlement_window: Option<u32>,
    /// Prepared at or after / at or before (ledger time, ms).
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
    /// Only transfers recorded before this seq (the previous page's
    /// `next`).
    pub before_seq: Option<u64>,
    /// At most this many transfers (1 to [`MAX_PAGE`]).
    pub limit: usize,
    /// Transfers examined per round, and at most per page
    /// ([`CHUNK`], [`SCAN_BUDGET`]; smaller in tests).
    pub chunk: usize,
    pub scan_budget: usize,
}

/// Which side of a transfer a searched party is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartyRole {
    Payer,
    Payee,
}

impl Default for TransferQuery {
    fn default() -> TransferQuery {
        TransferQuery {
            payer: None,
            payee: None,
            party: None,
            party_role: None,
            currency: None,
            state: None,
            error_code: None,
            min_amount: None,
            max_amount: None,
            settlement_window: None,
            from_ms: None,
            to_ms: None,
            before_seq: None,
            limit: 100,
            chunk: CHUNK,
            scan_budget: SCAN_BUDGET,
        }
    }
}

/// Transfers a page holds at most.
pub const MAX_PAGE: usize = 1_000;
/// Transfers a search examines at most for one page (the index it walks
/// yields them; the other filters are checked on each): a filter whose
/// matches are rare among them answers what it found, with a cursor to go
/// on, rather than walk ten million rows.
pub const SCAN_BUDGET: usize = 200_000;
/// Transfers examined per round (two queries).
pub const CHUNK: usize = 20_000;

/// One page of a search.
#[derive(Debug)]
pub struct SearchPage {
    /// Newest first, with their seqs.
    pub transfers: Vec<(u64, StoredTransfer)>,
    /// Where the next page starts (`before_seq`), if there may be more.
    pub next: Option<u64>,
    /// False when the scan budget ended the page before it filled: older
    /// matches may follow `next`.
    pub complete: bool,
    /// Transfers the walk yielded (at most [`SCAN_BUDGET`] and a round).
    pub examined: usize,
}

/// A value bound to a query.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Param {
    Int(i64),
    Text(String),
}

/// How a backend writes a query's `n`th parameter (from 1).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    fn placeholder(self, n: usize) -> String {
        match self {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}"),
        }
    }
}

/// What a backend runs for [`search`].
pub(crate) trait SearchSql {
    fn dialect(&self) -> Dialect;
    /// The first column of each row, as integers.
    fn integers(&mut self, sql: &str, params: &[Param]) -> Result<Vec<i64>, StoreError>;
    /// The same, for a statement whose text is unique to this call (the
    /// party walk's literal list of candidates): kept out of a
    /// connection's statement cache, where it would push out the
    /// statements that are used again.
    fn integers_once(&mut self, sql: &str, params: &[Param]) -> Result<Vec<i64>, StoreError> {
        self.integers(sql, params)
    }
    /// Rows of an integer and a blob (the party index's bucket rows).
    fn keyed_blobs(
        &mut self,
        sql: &str,
        params: &[Param],
    ) -> Result<Vec<(i64, Vec<u8>)>, StoreError>;
    /// The transfers with these seqs, in any order.
    fn views(&mut self, seqs: &[u64]) -> Result<Vec<(u64, StoredTransfer)>, StoreError>;
}

/// A query's conditions and their parameters, numbered as they are added.
struct Conditions {
    dialect: Dialect,
    sql: Vec<String>,
    params: Vec<Param>,
}

impl Conditions {
    fn new(dialect: Dialect) -> Conditions {
        Conditions {
            dialect,
            sql: Vec::new(),
            params: Vec::new(),
        }
    }

    /// `template` with each `{}` replaced by the next parameter.
    fn add(&mut self, template: &str, values: Vec<Param>) {
        let mut out = String::new();
        let mut parts = template.split("{}");
        out.push_str(parts.next().unwrap_or_default());
        for (part, value) in parts.zip(values) {
            // PostgreSQL infers a parameter's type from its column (an
            // INTEGER reason would want an int4): each is cast to what is
            // bound, and compares across integer widths.
            let cast = match (self.dialect, &value) {
                (Dialect::Sqlite, _) => "",
                (Dialect::Postgres, Param::Int(_)) => "::bigint",
                (Dialect::Postgres, Param::Text(_)) => "::text",
            };
            self.params.push(value);
            out.push_str(&self.dialect.placeholder(self.params.len()));
            out.push_str(cast);
            out.push_str(part);
        }
        self.sql.push(out);
    }

    fn joined(&self) -> String {
        match self.sql.is_empty() {
            true => "TRUE".to_string(),
            false => self.sql.join(" AND "),
        }
    }
}

const PARTICIPANT_ID: &str = "(SELECT id FROM participants WHERE name = {})";

/// What a round walks: the transfers by seq (their primary key), or one
/// key's entries in `transfer_keys` (its primary key, `(key, seq)`).
#[derive(Clone, Debug, PartialEq)]
enum Walk {
    Seq,
    Key(String),
    /// The party index's entries for a party (its hash), on one side or
    /// either (`crate::party_index`), in its blocks of `block_seqs`: the
    /// filed blocks only.
    Party {
        hash: u64,
        role: Option<PartyRole>,
        block_seqs: u64,
    },
}

impl Walk {
    /// The table a round's boundary is read from, and its seq column.
    fn boundary_from(&self) -> (&'static str, &'static str) {
        match self {
            Walk::Seq | Walk::Party { .. } => ("transfers t", "t.seq"),
            Walk::Key(_) => ("transfer_keys k", "k.seq"),
        }
    }

    /// The rows a round's page joins, and the seq column it orders by.
    fn page_from(&self) -> (&'static str, &'static str) {
        match self {
            Walk::Seq | Walk::Party { .. } => ("transfers t", "t.seq"),
            Walk::Key(_) => ("transfer_keys k JOIN transfers t ON t.seq = k.seq", "k.seq"),
        }
    }

    fn conditions(&self, dialect: Dialect) -> Conditions {
        let mut walk = Conditions::new(dialect);
        if let Walk::Key(key) = self {
            walk.add("k.key = {}", vec![Param::Text(key.clone())]);
        }
        walk
    }
}

/// Which key serves `query`, if one does, and whether its entries are
/// complete (failures are filed in their own commit) or filed by the pass
/// (`transfer_keys` up to `search_index.through_seq`; the transfers after
/// it are walked by seq). The rarest first: an error code, a failed
/// state, a settlement window, then a payer, a payee; `ids` are the payer's and
/// payee's participant ids (`None`: no such participant).
fn key_of(query: &TransferQuery, ids: (Option<i64>, Option<i64>)) -> Option<(String, bool)> {
    // A party is served by the party index ([`segments`]), not a key: a
    // party's keys would be spread over the whole index, each dirtying a
    // page of its own (three quarters of the store's throughput,
    // BENCHMARKS.md, "Transfer search").
    if let Some(code) = query.error_code {
        return Some((format!("e:{code}"), true));
    }
    if let Some(state) = query.state {
        if let [Some(key), _, _] = commit_keys(state, None, None) {
            return Some((key, true));
        }
    }
    if let Some(window) = query.settlement_window {
        return Some((format!("w:{window}"), true));
    }
    // No key for a currency: a scheme has few, each common (a walk by
    // seq finds its transfers at once), and a key a transfer costs the
    // writer ~3 µs.
    match ids {
        (Some(payer), _) => Some((format!("p:{payer}"), false)),
        (None, Some(payee)) => Some((format!("q:{payee}"), false)),
        _ => None,
    }
}

/// Every filter of `query`, checked on each transfer a walk yields (a
/// key's walk yields only transfers with that key; checking it again
/// costs nothing and keeps one text for both).
fn filters(query: &TransferQuery, dialect: Dialect) -> Conditions {
    let mut others = Conditions::new(dialect);
    let name = |name: &FspName| vec![Param::Text(name.as_str().to_string())];
    if let Some(payer) = &query.payer {
        others.add(&format!("t.payer_id = {PARTICIPANT_ID}"), name(payer));
    }
    if let Some(payee) = &query.payee {
        others.add(&format!("t.payee_id = {PARTICIPANT_ID}"), name(payee));
    }
    if let Some(party) = &query.party {
        let party = || Param::Text(party.clone());
        match query.party_role {
            None => others.add(
                "(t.payer_party = {} OR t.payee_party = {})",
                vec![party(), party()],
            ),
            Some(PartyRole::Payer) => others.add("t.payer_party = {}", vec![party()]),
            Some(PartyRole::Payee) => others.add("t.payee_party = {}", vec![party()]),
        }
    }
    if let Some(currency) = &query.currency {
        others.add(
            "t.currency = {}",
            vec![Param::Text(currency.as_str().to_string())],
        );
    }
    if let Some(state) = query.state {
        others.add(
            "COALESCE(f.state, t.state) = {}",
            vec![Param::Text(state.as_str().to_string())],
        );
    }
    if let Some(code) = query.error_code {
        others.add(
            "COALESCE(f.reason, t.reason) = {}",
            vec![Param::Int(i64::from(code))],
        );
    }
    if let Some(window) = query.settlement_window {
        others.add(
            "f.settlement_window = {}",
            vec![Param::Int(i64::from(window))],
        );
    }
    if let Some(min) = query.min_amount {
        others.add("t.amount_units >= {}", vec![Param::Int(amount_units(min))]);
    }
    if let Some(max) = query.max_amount {
        others.add("t.amount_units <= {}", vec![Param::Int(amount_units(max))]);
    }
    if let Some(from) = query.from_ms {
        others.add("t.prepared_at_ms >= {}", vec![Param::Int(from)]);
    }
    if let Some(to) = query.to_ms {
        others.add("t.prepared_at_ms <= {}", vec![Param::Int(to)]);
    }
    others
}

/// The seq of the first transfer prepared at or after `at_ms` (`None`:
/// none is), by bisection over seqs: the ledger's clock does not go back,
/// so prepare times rise with seqs (were a clock ever set back, the time
/// filter, checked on every row, still holds; only transfers at the edge
/// of the range could be missed).
fn first_prepared_at_or_after(
    sql: &mut impl SearchSql,
    at_ms: i64,
    last: u64,
) -> Result<Option<u64>, StoreError> {
    let probe = format!(
        "SELECT prepared_at_ms FROM transfers WHERE seq >= {} ORDER BY seq LIMIT 1",
        sql.dialect().placeholder(1)
    );
    let (mut low, mut high) = (1u64, last + 1);
    while low < high {
        let middle = low + (high - low) / 2;
        let at = sql.integers(&probe, &[Param::Int(middle as i64)])?;
        match at.first() {
            Some(&prepared) if prepared >= at_ms => high = middle,
            Some(_) => low = middle + 1,
            None => high = middle,
        }
    }
    Ok((low <= last).then_some(low))
}

/// The participant id of `name`, if there is one.
fn participant_id(sql: &mut impl SearchSql, name: &FspName) -> Result<Option<i64>, StoreError> {
    let statement = format!(
        "SELECT id FROM participants WHERE name = {}",
        sql.dialect().placeholder(1)
    );
    Ok(sql
        .integers(&statement, &[Param::Text(name.as_str().to_string())])?
        .first()
        .copied())
}

/// Runs `query`: the seq range its time bounds and cursor allow, cut into
/// the segments [`key_of`] says (the transfers after the last pass by
/// seq, the rest by the key; or all by one), each walked newest first a
/// round of [`CHUNK`] entries at a time with every filter checked on each
/// round's transfers, until the page fills, the range ends or
/// [`SCAN_BUDGET`] is spent.
pub(crate) fn search(
    sql: &mut impl SearchSql,
    query: &TransferQuery,
) -> Result<SearchPage, StoreError> {
    let limit = query.limit.clamp(1, MAX_PAGE);
    let chunk = query.chunk.max(1);
    let dialect = sql.dialect();
    let mut page = SearchPage {
        transfers: Vec::new(),
        next: None,
        complete: true,
        examined: 0,
    };
    let last = sql
        .integers("SELECT COALESCE(MAX(seq), 0) FROM transfers", &[])?
        .first()
        .copied()
        .unwrap_or(0) as u64;
    let mut high = match query.before_seq {
        Some(before) => last.min(before.saturating_sub(1)),
        None => last,
    };
    let mut low = 1;
    if let Some(from) = query.from_ms {
        match first_prepared_at_or_after(sql, from, last)? {
            Some(first) => low = first,
            None => high = 0,
        }
    }
    if let Some(to) = query.to_ms {
        // None prepared after `to`: the range ends with the last.
        if let Some(after) = first_prepared_at_or_after(sql, to.saturating_add(1), last)? {
            high = high.min(after.saturating_sub(1));
        }
    }
    let mut ids = (None, None);
    for (name, id) in [(&query.payer, &mut ids.0), (&query.payee, &mut ids.1)] {
        if let Some(name) = name {
            *id = participant_id(sql, name)?;
            if id.is_none() {
                // Nobody of that name: nothing to find.
                return Ok(page);
            }
        }
    }
    let segments = segments(sql, query, ids, low)?;
    let others = filters(query, dialect);
    let floor = low;
    let mut found: Vec<u64> = Vec::new();
    'segments: for (walk, low) in segments {
        if let Walk::Party {
            hash,
            role,
            block_seqs,
        } = walk
        {
            let (to_high, ended) = walk_party(
                sql,
                (hash, role, block_seqs),
                (low, high),
                &others,
                limit,
                &mut found,
                &mut page,
                query.scan_budget,
            )?;
            match ended {
                true => break 'segments,
                false => {
                    high = to_high;
                    continue;
                }
            }
        }
        let conditions = walk.conditions(dialect);
        while high >= low && high > 0 {
            // The seq of the round's last (oldest) entry of the walk.
            let boundary_sql = boundary_statement(&walk, &conditions, chunk);
            let mut params = conditions.params.clone();
            params.extend([Param::Int(low as i64), Param::Int(high as i64)]);
            let boundary = sql
                .integers(&boundary_sql, &params)?
                .first()
                .map(|&seq| seq as u64);
            let round_low = boundary.unwrap_or(low);
            // The round's matches, newest first.
            let (page_sql, mut params) =
                page_statement(&walk, &conditions, &others, limit - found.len());
            params.extend([Param::Int(round_low as i64), Param::Int(high as i64)]);
            found.extend(
                sql.integers(&page_sql, &params)?
                    .into_iter()
                    .map(|seq| seq as u64),
            );
            page.examined += chunk;
            if found.len() == limit {
                page.next = found.last().copied();
                break 'segments;
            }
            if boundary.is_none() {
                // The walk has no entry below the round: on to the next
                // segment, below this one's range.
                high = low.saturating_sub(1);
                break;
            }
            high = round_low - 1;
            if page.examined >= query.scan_budget && high >= floor && high > 0 {
                page.complete = false;
                page.next = Some(round_low);
                break 'segments;
            }
        }
    }
    let mut transfers = sql.views(&found)?;
    transfers.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
    page.transfers = transfers;
    Ok(page)
}

/// What `query` walks, newest first, each from a low seq up to where the
/// one before began: the transfers after the last filed by seq, then the
/// filed ones by a key or the party index; or all by one.
fn segments(
    sql: &mut impl SearchSql,
    query: &TransferQuery,
    ids: (Option<i64>, Option<i64>),
    low: u64,
) -> Result<Vec<(Walk, u64)>, StoreError> {
    let mut through = |statement: &str| -> Result<u64, StoreError> {
        Ok(sql.integers(statement, &[])?.first().copied().unwrap_or(0) as u64)
    };
    // One exact amount ("the transfer for 250") is filed in the party
    // index too, under its own key.
    let amount = match (query.min_amount, query.max_amount) {
        (Some(min), Some(max)) if min == max => Some(party_index::amount_key(amount_units(min))),
        _ => None,
    };
    let indexed = query
        .party
        .as_ref()
        .map(|party| (party.as_str(), query.party_role))
        .or(amount.as_deref().map(|amount| (amount, None)));
    Ok(match (key_of(query, ids), indexed) {
        (Some((key, true)), _) => vec![(Walk::Key(key), low)],
        (_, Some((text, role))) => {
            // Seqs below it are filed.
            let filed_end =
                through("SELECT COALESCE(MAX(next_block * block_seqs), 0) FROM party_index")?;
            let block_seqs = match through("SELECT COALESCE(MAX(block_seqs), 0) FROM party_index")?
            {
                0 => party_index::BLOCK_SEQS,
                seqs => party_index::checked_block_seqs(seqs as i64)?,
            };
            vec![
                (Walk::Seq, low.max(filed_end)),
                (
                    Walk::Party {
                        hash: party_index::party_hash(text),
                        role,
                        block_seqs,
                    },
                    low,
                ),
            ]
        }
        (None, None) => vec![(Walk::Seq, low)],
        (Some((key, false)), None) => {
            let through = through("SELECT COALESCE(MAX(through_seq), 0) FROM search_index")?;
            vec![(Walk::Seq, low.max(through + 1)), (Walk::Key(key), low)]
        }
    })
}

/// Bucket rows a party walk reads at once (~770 bytes each; 1,024 cover
/// ~16.7 M transfers).
const PARTY_ROWS_PER_READ: usize = 1_024;
/// Candidate transfers fetched and checked per round of a party walk.
const PARTY_CANDIDATES_PER_ROUND: usize = 1_000;

/// The party index's bucket rows of one bucket over a block range (two
/// parameters, keys), newest first (a third: how many at most).
fn party_rows_statement(dialect: Dialect) -> String {
    format!(
        "SELECT key, entries FROM party_blocks WHERE key BETWEEN {} AND {}
         ORDER BY key DESC LIMIT {}",
        dialect.placeholder(1),
        dialect.placeholder(2),
        dialect.placeholder(3)
    )
}

/// The query for the matches among `candidates` (seqs), newest first:
/// every filter of the search checked on each (the party's text among
/// them: a tag may collide).
fn candidates_statement(others: &Conditions, candidates: &[u64], limit: usize) -> String {
    let list = candidates
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "SELECT t.seq FROM transfers t LEFT JOIN transfer_finishes f ON f.seq = t.seq
         WHERE t.seq IN ({list}) AND {} ORDER BY t.seq DESC LIMIT {limit}",
        others.joined()
    )
}

/// Walks a party's entries in the filed blocks of `[low, high]`, newest
/// first, fetching the candidates a round at a time with every filter
/// checked, into `found` until the page fills or the budget is spent.
/// Where the walk left `high`, and whether the page ended (full, or cut
/// by the budget with `next` set).
#[allow(clippy::too_many_arguments)]
fn walk_party(
    sql: &mut impl SearchSql,
    (hash, role, block_seqs): (u64, Option<PartyRole>, u64),
    (low, mut high): (u64, u64),
    others: &Conditions,
    limit: usize,
    found: &mut Vec<u64>,
    page: &mut SearchPage,
    scan_budget: usize,
) -> Result<(u64, bool), StoreError> {
    let bucket = party_index::bucket_of(hash);
    let statement = party_rows_statement(sql.dialect());
    while high >= low && high > 0 {
        let rows = sql.keyed_blobs(
            &statement,
            &[
                Param::Int(party_index::row_key(
                    bucket,
                    party_index::block_of(low, block_seqs),
                )),
                Param::Int(party_index::row_key(
                    bucket,
                    party_index::block_of(high, block_seqs),
                )),
                Param::Int(PARTY_ROWS_PER_READ as i64),
            ],
        )?;
        // The blocks read reach down to the last row's (all of them when
        // fewer rows than asked came back).
        let read_low = match rows.len() < PARTY_ROWS_PER_READ {
            true => low,
            false => rows
                .last()
                .map(|(key, _)| party_index::first_seq(party_index::block_of_key(*key), block_seqs))
                .unwrap_or(low)
                .max(low),
        };
        let mut candidates = Vec::new();
        for (key, entries) in &rows {
            let block = party_index::block_of_key(*key);
            candidates.extend(
                party_index::seqs_in(block, block_seqs, entries, hash, role)?
                    .into_iter()
                    .filter(|seq| (read_low..=high).contains(seq)),
            );
        }
        let rounds = candidates.len().div_ceil(PARTY_CANDIDATES_PER_ROUND);
        for (at, round) in candidates.chunks(PARTY_CANDIDATES_PER_ROUND).enumerate() {
            let matches = sql.integers_once(
                &candidates_statement(others, round, limit - found.len()),
                &others.params,
            )?;
            found.extend(matches.into_iter().map(|seq| seq as u64));
            page.examined += round.len();
            if found.len() == limit {
                page.next = found.last().copied();
                return Ok((high, true));
            }
            let oldest = *round.last().expect("chunks are not empty");
            let more = at + 1 < rounds || read_low > low;
            if page.examined >= scan_budget && more {
                page.complete = false;
                page.next = Some(oldest);
                return Ok((high, true));
            }
        }
        high = read_low.saturating_sub(1);
    }
    Ok((high, false))
}

/// The query for the seq of a round's oldest entry of the walk: its
/// conditions, then the seq range (two parameters).
fn boundary_statement(walk: &Walk, conditions: &Conditions, chunk: usize) -> String {
    let n = conditions.params.len();
    let (from, seq) = walk.boundary_from();
    format!(
        "SELECT {seq} FROM {from} WHERE {} AND {seq} BETWEEN {} AND {}
         ORDER BY {seq} DESC LIMIT 1 OFFSET {}",
        conditions.joined(),
        conditions.dialect.placeholder(n + 1),
        conditions.dialect.placeholder(n + 2),
        chunk - 1
    )
}

/// The query for a round's matches, newest first, and its parameters but
/// the seq range (two more, last).
fn page_statement(
    walk: &Walk,
    conditions: &Conditions,
    others: &Conditions,
    limit: usize,
) -> (String, Vec<Param>) {
    let dialect = conditions.dialect;
    let mut matching = Conditions::new(dialect);
    matching.sql = conditions.sql.clone();
    matching.params = conditions.params.clone();
    let n = conditions.params.len();
    matching
        .sql
        .extend(others.sql.iter().map(|part| renumber(part, n, dialect)));
    matching.params.extend(others.params.iter().cloned());
    let m = matching.params.len();
    let (from, seq) = walk.page_from();
    let sql = format!(
        "SELECT t.seq FROM {from} LEFT JOIN transfer_finishes f ON f.seq = t.seq
         WHERE {} AND {seq} BETWEEN {} AND {} ORDER BY {seq} DESC LIMIT {}",
        matching.joined(),
        dialect.placeholder(m + 1),
        dialect.placeholder(m + 2),
        limit
    );
    (sql, matching.params)
}

/// `part` (numbered from 1 by its own [`Conditions`]) renumbered to follow
/// `before` parameters.
fn renumber(part: &str, before: usize, dialect: Dialect) -> String {
    let sigil = match dialect {
        Dialect::Sqlite => '?',
        Dialect::Postgres => '$',
    };
    let mut out = String::with_capacity(part.len());
    let mut chars = part.chars().peekable();
    while let Some(c) = chars.next() {
        if c != sigil {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        match digits.parse::<usize>() {
            Ok(n) => out.push_str(&dialect.placeholder(n + before)),
            Err(_) => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fsp(name: &str) -> FspName {
        FspName::new(name).unwrap()
    }

    /// Searches with each kind of filter.
    fn searches() -> Vec<TransferQuery> {
        vec![
            TransferQuery::default(),
            TransferQuery {
                payer: Some(fsp("payerfsp")),
                state: Some(TransferState::Committed),
                ..TransferQuery::default()
            },
            TransferQuery {
                payee: Some(fsp("payeefsp")),
                min_amount: Some(Amount::from_whole(5)),
                settlement_window: Some(3),
                ..TransferQuery::default()
            },
            TransferQuery {
                currency: Currency::parse("USD"),
                error_code: Some(4001),
                from_ms: Some(1),
                to_ms: Some(2),
                ..TransferQuery::default()
            },
            TransferQuery {
                currency: Currency::parse("USD"),
                ..TransferQuery::default()
            },
            TransferQuery {
                state: Some(TransferState::Expired),
                max_amount: Some(Amount::from_whole(5)),
                ..TransferQuery::default()
            },
            TransferQuery {
                party: Some("MSISDN/27713803912".into()),
                payer: Some(fsp("payerfsp")),
                error_code: Some(4001),
                ..TransferQuery::default()
            },
        ]
    }

    /// The walks a search's segments take, with participants 1 and 2.
    fn walks(query: &TransferQuery) -> Vec<Walk> {
        let ids = (query.payer.map(|_| 1), query.payee.map(|_| 2));
        match key_of(query, ids) {
            None => vec![Walk::Seq],
            Some((key, true)) => vec![Walk::Key(key)],
            Some((key, false)) => vec![Walk::Seq, Walk::Key(key)],
        }
    }

    #[test]
    fn the_rarest_filter_picks_the_key() {
        let keys: Vec<Vec<Walk>> = searches().iter().map(walks).collect();
        assert_eq!(
            keys,
            vec![
                vec![Walk::Seq],
                vec![Walk::Seq, Walk::Key("p:1".into())],
                vec![Walk::Key("w:3".into())],
                vec![Walk::Key("e:4001".into())],
                vec![Walk::Seq],
                vec![Walk::Key("s:EXPIRED_RESERVED".into())],
                vec![Walk::Key("e:4001".into())],
            ]
        );
    }

    fn sqlite_plan(connection: &rusqlite::Connection, sql: &str) -> String {
        let mut statement = connection
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap();
        // The plan does not depend on the values: NULLs will do.
        let nulls = vec![rusqlite::types::Null; statement.parameter_count()];
        let details: Vec<String> = statement
            .query_map(rusqlite::params_from_iter(nulls), |row| {
                row.get::<_, String>(3)
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        details.join("\n")
    }

    /// Every round walks a primary key on SQLite — the transfers' seq, or
    /// `transfer_keys`' (key, seq) joined to the transfers by seq — the
    /// round's boundary and its page alike, newest first without a sort:
    /// a round costs its rows, whatever the filters.
    #[test]
    fn each_search_walks_a_primary_key_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        drop(crate::sqlite::SqliteStore::open(dir.path(), Default::default()).unwrap());
        let connection = rusqlite::Connection::open(dir.path().join("kasi.db")).unwrap();
        for query in searches() {
            let others = filters(&query, Dialect::Sqlite);
            for walk in walks(&query) {
                let conditions = walk.conditions(Dialect::Sqlite);
                let boundary =
                    sqlite_plan(&connection, &boundary_statement(&walk, &conditions, CHUNK));
                let (page, _) = page_statement(&walk, &conditions, &others, 50);
                let page = sqlite_plan(&connection, &page);
                let (walked, joined) = match walk {
                    Walk::Seq => (
                        "SEARCH t USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)",
                        None,
                    ),
                    Walk::Key(_) => (
                        "SEARCH k USING PRIMARY KEY (key=? AND seq>? AND seq<?)",
                        Some("SEARCH t USING INTEGER PRIMARY KEY (rowid=?)"),
                    ),
                    Walk::Party { .. } => unreachable!("walks() yields no party walk"),
                };
                assert!(boundary.contains(walked), "{query:?}: {boundary}");
                assert!(page.contains(walked), "{query:?}: {page}");
                if let Some(joined) = joined {
                    assert!(page.contains(joined), "{query:?}: {page}");
                }
                for plan in [&boundary, &page] {
                    assert!(!plan.contains("TEMP B-TREE"), "no sort: {plan}");
                }
            }
        }
    }

    /// A search by party reads its bucket's rows by one range of the
    /// party index's primary key, newest first, and fetches the candidates
    /// by the transfers' (SQLite).
    #[test]
    fn a_party_search_reads_primary_keys_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        drop(crate::sqlite::SqliteStore::open(dir.path(), Default::default()).unwrap());
        let connection = rusqlite::Connection::open(dir.path().join("kasi.db")).unwrap();
        let rows = sqlite_plan(&connection, &party_rows_statement(Dialect::Sqlite));
        assert!(
            rows.contains("SEARCH party_blocks USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"),
            "{rows}"
        );
        assert!(!rows.contains("TEMP B-TREE"), "no sort: {rows}");
        for query in party_searches() {
            let others = filters(&query, Dialect::Sqlite);
            let page = sqlite_plan(&connection, &candidates_statement(&others, &[9, 5, 2], 50));
            assert!(
                page.contains("SEARCH t USING INTEGER PRIMARY KEY (rowid=?)"),
                "{query:?}: {page}"
            );
            assert!(!page.contains("SCAN t"), "{query:?}: {page}");
        }
    }

    /// Searches by party, with and without other filters.
    fn party_searches() -> Vec<TransferQuery> {
        let party = || Some("MSISDN/27713803912".to_string());
        vec![
            TransferQuery {
                party: party(),
                ..TransferQuery::default()
            },
            TransferQuery {
                party: party(),
                party_role: Some(PartyRole::Payee),
                payer: Some(fsp("payerfsp")),
                currency: Currency::parse("USD"),
                min_amount: Some(Amount::from_whole(5)),
                ..TransferQuery::default()
            },
        ]
    }

    #[test]
    fn a_party_is_searched_by_the_party_index_after_the_unfiled_transfers() {
        for query in party_searches() {
            let hash = party_index::party_hash("MSISDN/27713803912");
            let mut sql = Fixed { next_block: 3 };
            let segments = segments(&mut sql, &query, (Some(1), None), 10).unwrap();
            assert_eq!(
                segments,
                vec![
                    (Walk::Seq, 3 * 64),
                    (
                        Walk::Party {
                            hash,
                            role: query.party_role,
                            block_seqs: 64,
                        },
                        10
                    )
                ]
            );
        }
        // A failure's key is rarer still.
        let query = TransferQuery {
            error_code: Some(4001),
            ..party_searches().remove(0)
        };
        let segments = segments(&mut Fixed { next_block: 3 }, &query, (None, None), 1).unwrap();
        assert_eq!(segments, vec![(Walk::Key("e:4001".into()), 1)]);
    }

    /// A store whose party index is filed up to `next_block`.
    struct Fixed {
        next_block: i64,
    }

    impl SearchSql for Fixed {
        fn dialect(&self) -> Dialect {
            Dialect::Sqlite
        }
        /// Blocks of 64 seqs.
        fn integers(&mut self, sql: &str, _: &[Param]) -> Result<Vec<i64>, StoreError> {
            assert!(sql.contains("party_index"), "{sql}");
            match sql.contains("next_block * block_seqs") {
                true => Ok(vec![self.next_block * 64]),
                false => Ok(vec![64]),
            }
        }
        fn keyed_blobs(&mut self, _: &str, _: &[Param]) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
            unreachable!()
        }
        fn views(&mut self, _: &[u64]) -> Result<Vec<(u64, StoredTransfer)>, StoreError> {
            unreachable!()
        }
    }

    /// PostgreSQL's plan of `sql` with `params` bound, as text.
    fn pg_explain(client: &mut postgres::Client, sql: &str, params: &[Param]) -> String {
        let values: Vec<Box<dyn postgres::types::ToSql + Sync>> = params
            .iter()
            .map(|param| -> Box<dyn postgres::types::ToSql + Sync> {
                match param {
                    Param::Int(n) => Box::new(*n),
                    Param::Text(text) => Box::new(text.clone()),
                }
            })
            .collect();
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
            values.iter().map(|value| value.as_ref()).collect();
        client
            .query(&format!("EXPLAIN {sql}"), &refs)
            .unwrap()
            .iter()
            .map(|row| row.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The same on PostgreSQL: an index scan of a primary key in seq
    /// order (the planner is told sequential scans and sorts cost more,
    /// as they would over millions of transfers; on an empty table it
    /// would rightly scan).
    #[test]
    fn each_search_walks_a_primary_key_on_postgresql() {
        let cluster = testpg::Cluster::start();
        let url = cluster.create_database("explain");
        drop(crate::pg::PgStore::open(&url).unwrap());
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        client
            .batch_execute("SET enable_seqscan = off; SET enable_sort = off")
            .unwrap();
        let mut plan = |sql: &str, params: &[Param]| -> String {
            let mut params: Vec<Param> = params.to_vec();
            params.extend([Param::Int(1), Param::Int(1_000_000)]);
            pg_explain(&mut client, sql, &params)
        };
        for query in searches() {
            let others = filters(&query, Dialect::Postgres);
            for walk in walks(&query) {
                let conditions = walk.conditions(Dialect::Postgres);
                let boundary = plan(
                    &boundary_statement(&walk, &conditions, CHUNK),
                    &conditions.params,
                );
                let (page, params) = page_statement(&walk, &conditions, &others, 50);
                let page = plan(&page, &params);
                let index = match walk {
                    Walk::Seq => "transfers_pkey",
                    Walk::Key(_) => "transfer_keys_pkey",
                    Walk::Party { .. } => unreachable!("walks() yields no party walk"),
                };
                for plan in [&boundary, &page] {
                    assert!(
                        plan.contains(&format!("Index Scan Backward using {index}"))
                            || plan.contains(&format!("Index Only Scan Backward using {index}")),
                        "{query:?}: {plan}"
                    );
                    assert!(!plan.contains("Sort"), "no sort: {plan}");
                }
            }
        }
    }

    /// The same for a party on PostgreSQL: the bucket's rows by the party
    /// index's primary key, the candidates by the transfers'.
    #[test]
    fn a_party_search_reads_primary_keys_on_postgresql() {
        let cluster = testpg::Cluster::start();
        let url = cluster.create_database("explain_party");
        drop(crate::pg::PgStore::open(&url).unwrap());
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        client
            .batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
            .unwrap();
        let rows = pg_explain(
            &mut client,
            &party_rows_statement(Dialect::Postgres),
            &[Param::Int(1), Param::Int(100), Param::Int(1024)],
        );
        assert!(
            rows.contains("Index Scan Backward using party_blocks_pkey"),
            "{rows}"
        );
        assert!(!rows.contains("Sort"), "no sort: {rows}");
        for query in party_searches() {
            let others = filters(&query, Dialect::Postgres);
            let page = pg_explain(
                &mut client,
                &candidates_statement(&others, &[9, 5, 2], 50),
                &others.params,
            );
            assert!(page.contains("using transfers_pkey"), "{query:?}: {page}");
        }
    }

    #[test]
    fn a_transfer_is_filed_under_its_accounts_owners_and_currency() {
        let usd = Currency::parse("USD").unwrap();
        let mut owners = AccountOwners::default();
        owners.note(AccountId(1), ParticipantId(7), usd);
        owners.note(AccountId(4), ParticipantId(9), usd);
        let columns = SearchColumns::of(
            &owners,
            AccountId(1),
            AccountId(4),
            Amount::from_units(12_345),
        );
        assert_eq!(
            columns,
            SearchColumns {
                payer: Some(7),
                payee: Some(9),
                currency: Some(usd),
                amount_units: 12_345
            }
        );
        let unknown =
            SearchColumns::of(&owners, AccountId(2), AccountId(40), Amount::from_whole(1));
        assert_eq!(
            (unknown.payer, unknown.payee, unknown.currency),
            (None, None, None)
        );
    }

    #[test]
    fn amounts_beyond_64_bits_are_filed_at_the_end() {
        assert_eq!(
            amount_units(Amount::from_units(i128::from(i64::MAX) + 1)),
            i64::MAX
        );
        assert_eq!(amount_units(Amount::from_units(-(1i128 << 70))), i64::MIN);
        assert_eq!(amount_units(Amount::from_whole(3)), 30_000);
    }
}
