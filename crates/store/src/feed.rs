//! The change feed (`docs/design/back-office.md`, "Change feed"): one
//! `changes` row per committed change, numbered `feed_seq` from 1 without
//! gaps in commit order, written in the same transaction as the records it
//! is derived from.
//!
//! The rows are the store's, not the ledger's: derived at write time from
//! the batch's records (as the search columns are, `search.rs`), so the
//! ledger and recovery do not change. Each writer keeps a [`FeedState`]:
//! the next `feed_seq`, the participants' names, the accounts' owners and
//! limits (to tell a net debit cap change from a position move), and the
//! transfers still open (to describe a finish, whose record names only
//! the transfer's seq). The state is read from the tables when the writer
//! first commits and dropped whenever a commit fails, so a retried commit
//! numbers its rows from what is durable, never from what was lost.
//!
//! The vocabulary (`kind`), small on purpose:
//!
//! | kind | when | key |
//! |---|---|---|
//! | `transfer.prepared` / `.committed` / `.aborted` / `.expired` / `.rejected` | an FSPIOP transfer's prepare and finish | transfer id |
//! | `conversion.…` (same events), `conversion.fulfilled` | an FX conversion's, and the FXP's acceptance | commit request id |
//! | `funds.in.…`, `funds.out.…` (same events) | funds movements | transfer id |
//! | `account.changed` | an account opened, (de)activated, or its net debit cap set | account id |
//! | `participant.changed` | a participant created, or its mode changed | name |
//! | `settlement_window.changed` | a window opened, closed, settled… | window id |
//! | `settlement.changed` | a settlement created or moved a step | settlement id |
//! | `admin.change` | an admin change's audit event | audit event id |
//!
//! A finish's body also says when its transfer was prepared
//! (`preparedAtMs`, since schema 13): the hourly rollup's latency
//! (`rollup.rs`) is read from it.
//!
//! Position moves are not rows of their own (a transfer's rows imply
//! them; one per account per batch would triple the feed); quotes, parties,
//! endpoints, oracles and the like are seen through their admin change's
//! audit event.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use ledger::{
    AccountId, Amount, Currency, FinishKind, ParticipantId, Record, TransferId, TransferKind,
    TransferState,
};

use crate::StoreError;

/// The `participant` of a change that is about no DFSP in particular (a
/// settlement window, an admin change).
pub const HUB_PARTICIPANT: &str = "hub";

/// Rows a page of [`FeedLog::read_feed`] holds at most.
pub const MAX_PAGE: usize = 1_000;

/// Rows a DFSP-scoped read examines at most for one page: a DFSP with few
/// changes among many answers what it found, with where to go on.
pub const SCAN_BUDGET: usize = 50_000;

/// Open transfers a writer remembers for describing their finish; one it
/// forgot (the oldest go first) is read back from `transfers` by seq.
const OPEN_KEPT: usize = 200_000;

/// Rows a retention pass deletes per statement (a short write, so that it
/// never holds the transfer path's commits up for long).
pub const PRUNE_CHUNK: usize = 5_000;

/// One row of the feed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedRow {
    pub feed_seq: u64,
    /// Ledger time of the change, never less than the row before's.
    pub at_ms: i64,
    pub kind: String,
    /// The DFSP concerned (the payer of a transfer, the DFSP of a funds
    /// movement or an account), or [`HUB_PARTICIPANT`].
    pub participant: String,
    /// The other DFSP of a transfer (its payee), if any.
    pub counterparty: Option<String>,
    pub key: String,
    /// A short JSON object of the change.
    pub body: String,
}

/// A page of the feed.
#[derive(Debug, Default)]
pub struct FeedPage {
    pub rows: Vec<FeedRow>,
    /// Where the next read starts (`after`): the last row examined, which
    /// for a DFSP-scoped read may be past the last row answered.
    pub next_after: u64,
    /// The oldest row kept (none: nothing kept yet).
    pub oldest: Option<u64>,
    /// The newest row committed (0: none).
    pub newest: u64,
}

/// What the hub reads and writes beside the pipeline: the feed's pages,
/// its retention, and the publishers' durable cursors. Each backend
/// implements it on a connection of its own.
/// Where a filtered read that examined `(after, through]` of a feed whose
/// newest row is `newest` stops: at its last row when the page is full
/// (rows after it are unread), else at the end of what it examined.
pub(crate) fn next_after(
    rows: &[FeedRow],
    limit: usize,
    after: u64,
    through: u64,
    newest: u64,
) -> u64 {
    match rows.last() {
        Some(last) if rows.len() == limit => last.feed_seq,
        _ => through.min(newest).max(after),
    }
}

pub trait FeedLog: Send + Sync + std::fmt::Debug {
    /// Rows after `after`, at most `limit` (≤ [`MAX_PAGE`]); with
    /// `participant`, only those it is the participant or counterparty of
    /// (examining at most [`SCAN_BUDGET`] rows).
    fn read_feed(
        &self,
        after: u64,
        limit: usize,
        participant: Option<&str>,
    ) -> Result<FeedPage, StoreError>;

    /// Rows after `after` of the `kinds` given, at most `limit` (≤
    /// [`MAX_PAGE`]), examining at most [`SCAN_BUDGET`] rows: a follower
    /// that folds a few kinds (the rollup: transfers' finishes, about
    /// half the feed) passes over the rest in the database, never turning
    /// them into rows. `next_after` is the last row examined.
    fn read_feed_kinds(
        &self,
        after: u64,
        limit: usize,
        kinds: &'static [&'static str],
    ) -> Result<FeedPage, StoreError>;

    /// Deletes at most [`PRUNE_CHUNK`] rows older than `before_ms`, never
    /// the newest (which numbers the next); how many went.
    fn prune_feed(&self, before_ms: i64) -> Result<usize, StoreError>;

    /// The durable cursor of the follower `name` (`None`: never set, so
    /// that a follower can tell its first start from a cursor at 0).
    fn feed_cursor(&self, name: &str) -> Result<Option<u64>, StoreError>;

    /// Keeps the publisher's cursor (after the broker confirmed).
    fn set_feed_cursor(&self, name: &str, feed_seq: u64) -> Result<(), StoreError>;

    /// Adds `fold` (the changes `(after, through]`) to the hourly rollup
    /// and moves its cursor ([`crate::rollup::CURSOR`]) from `after` to
    /// `through`, in one transaction; writes nothing (a transient error)
    /// if the cursor is not at `after`.
    fn fold_rollup(
        &self,
        after: u64,
        through: u64,
        fold: &crate::rollup::Fold,
    ) -> Result<(), StoreError>;

    /// The rollup of the hours in `[from_ms, to_ms)`; with `participant`,
    /// only the rows it is the payer or payee of.
    fn read_rollup(
        &self,
        from_ms: i64,
        to_ms: i64,
        participant: Option<&str>,
    ) -> Result<crate::rollup::Rollup, StoreError>;

    /// Files the party index's next blocks ([`crate::party_index`]): each
    /// block wholly committed and not filed yet, at most `most_blocks`, in
    /// one transaction that moves `party_index.next_block` (fenced: a
    /// second hub filing the same blocks finds it moved and writes
    /// nothing). Blocks of `block_seqs` seqs, unless the index already
    /// records its own size. Never on the writer's connection: the
    /// transfer path pays nothing for it.
    fn file_party_blocks(
        &self,
        most_blocks: u64,
        block_seqs: u64,
    ) -> Result<crate::party_index::Filing, StoreError>;

    /// Files the commit index's next spans ([`crate::commit_index`]): each
    /// span wholly committed and not filed yet, at most `most_spans` and
    /// about `most_commits` commits (one span at least), in one
    /// transaction that moves `commit_index.next_span` (fenced as
    /// [`FeedLog::file_party_blocks`]). Spans of `span_ms`, unless the
    /// index already records its own. Never on the writer's connection.
    fn file_commit_spans(
        &self,
        most_spans: u64,
        most_commits: usize,
        span_ms: i64,
    ) -> Result<crate::commit_index::Filing, StoreError>;

    /// Whether a read waits on the network (see `StoreReader::is_remote`).
    fn is_remote(&self) -> bool {
        false
    }
}

/// Told the last committed `feed_seq` after each durable commit that wrote
/// rows (the hub wakes its long polls and its publisher with it).
pub type FeedListener = Box<dyn Fn(u64) + Send>;

/// What a finish needs of its transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TransferSummary {
    pub transfer_id: TransferId,
    pub kind: TransferKind,
    pub debit: AccountId,
    pub credit: AccountId,
    pub amount: Amount,
    /// Told in its finish's change (`preparedAtMs`: the rollup's latency).
    pub prepared_at_ms: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AccountSeen {
    participant: ParticipantId,
    currency: Currency,
    active: bool,
    net_debit_cap: Option<Amount>,
}

/// A writer's memory for deriving rows (see the module's doc).
#[derive(Debug, Default)]
pub(crate) struct FeedState {
    next_seq: u64,
    last_at_ms: i64,
    names: HashMap<u32, String>,
    hub: Option<u32>,
    accounts: HashMap<u32, AccountSeen>,
    open: BTreeMap<u64, TransferSummary>,
}

impl FeedState {
    /// After the newest stored row (`None`: none).
    pub(crate) fn after(newest: Option<(u64, i64)>) -> FeedState {
        let (seq, at_ms) = newest.unwrap_or((0, i64::MIN));
        FeedState {
            next_seq: seq + 1,
            last_at_ms: at_ms,
            ..FeedState::default()
        }
    }

    pub(crate) fn note_participant(&mut self, id: ParticipantId, name: &str, is_hub: bool) {
        self.names.insert(id.0, name.to_string());
        if is_hub {
            self.hub = Some(id.0);
        }
    }

    pub(crate) fn note_account(
        &mut self,
        id: AccountId,
        participant: ParticipantId,
        currency: Currency,
        active: bool,
        net_debit_cap: Option<Amount>,
    ) {
        self.accounts.insert(
            id.0,
            AccountSeen {
                participant,
                currency,
                active,
                net_debit_cap,
            },
        );
    }

    /// The seqs of the transfers `batches` finish that it does not
    /// remember: the writer reads them ([`TransferSummary`]) before
    /// [`FeedState::rows`].
    pub(crate) fn unknown_transfers(&self, batches: &[&[Record]]) -> Vec<u64> {
        let mut prepared_here = Vec::new();
        let mut unknown = Vec::new();
        for record in batches.iter().flat_map(|batch| batch.iter()) {
            let seq = match record {
                Record::Transfer(row) => {
                    prepared_here.push(row.seq);
                    continue;
                }
                Record::Finish(row) => row.seq,
                Record::ConversionFulfilled(row) => row.seq,
                _ => continue,
            };
            if !self.open.contains_key(&seq) && !prepared_here.contains(&seq) {
                unknown.push(seq);
            }
        }
        unknown
    }

    /// Remembers a transfer read back for [`FeedState::unknown_transfers`].
    pub(crate) fn note_transfer(&mut self, seq: u64, summary: TransferSummary) {
        self.open.insert(seq, summary);
    }

    /// The rows of `batches`, numbered on from the last; the state moves
    /// on with them (a failed commit drops it: see the module's doc).
    pub(crate) fn rows(&mut self, batches: &[&[Record]]) -> Result<Vec<FeedRow>, StoreError> {
        let mut rows = Vec::new();
        for record in batches.iter().flat_map(|batch| batch.iter()) {
            self.derive(record, &mut rows)?;
        }
        while self.open.len() > OPEN_KEPT {
            self.open.pop_first();
        }
        Ok(rows)
    }

    fn push(
        &mut self,
        rows: &mut Vec<FeedRow>,
        at_ms: i64,
        kind: String,
        (participant, counterparty): (String, Option<String>),
        key: String,
        body: String,
    ) {
        self.last_at_ms = self.last_at_ms.max(at_ms);
        rows.push(FeedRow {
            feed_seq: self.next_seq,
            at_ms: self.last_at_ms,
            kind,
            participant,
            counterparty,
            key,
            body,
        });
        self.next_seq += 1;
    }

    fn name(&self, participant: ParticipantId) -> String {
        self.name_ref(participant).into_owned()
    }

    /// The name, borrowed when known (a row's body copies it anyway).
    fn name_ref(&self, participant: ParticipantId) -> std::borrow::Cow<'_, str> {
        match self.names.get(&participant.0) {
            Some(name) => std::borrow::Cow::Borrowed(name.as_str()),
            None => std::borrow::Cow::Owned(format!("#{}", participant.0)),
        }
    }

    fn owner(&self, account: AccountId) -> Option<(ParticipantId, Currency)> {
        self.accounts
            .get(&account.0)
            .map(|seen| (seen.participant, seen.currency))
    }

    /// The DFSP concerned and the other: the payer first, unless the payer
    /// is the hub (a funds in).
    fn parties(&self, summary: &TransferSummary) -> (String, Option<String>) {
        let debit = self.owner(summary.debit).map(|(p, _)| p);
        let credit = self.owner(summary.credit).map(|(p, _)| p);
        let is_hub = |p: Option<ParticipantId>| p.is_some_and(|p| Some(p.0) == self.hub);
        let (first, second) = if is_hub(debit) && !is_hub(credit) {
            (credit, debit)
        } else {
            (debit, credit)
        };
        (
            first.map_or_else(|| HUB_PARTICIPANT.to_string(), |p| self.name(p)),
            second.map(|p| self.name(p)),
        )
    }

    fn transfer_row(
        &mut self,
        rows: &mut Vec<FeedRow>,
        summary: &TransferSummary,
        event: &str,
        reason: Option<u16>,
        at_ms: i64,
        finished: bool,
    ) {
        let family = match summary.kind {
            TransferKind::Fspiop => "transfer",
            TransferKind::FxConversion => "conversion",
            TransferKind::FundsIn => "funds.in",
            TransferKind::FundsOut => "funds.out",
        };
        let payer = self.owner(summary.debit);
        let payee = self.owner(summary.credit);
        let currency = payer.or(payee).map(|(_, currency)| currency);
        let key = summary.transfer_id.to_string();
        // Only what neither the columns nor the kind say: the transfer's
        // id, kind and state are rebuilt when read ([`transfer_fields`]),
        // so that the row costs a commit as few bytes as it can.
        let mut body = String::with_capacity(128);
        body.push_str("{\"payer\":");
        push_json_or_null(&mut body, payer.map(|(p, _)| self.name_ref(p)).as_deref());
        body.push_str(",\"payee\":");
        push_json_or_null(&mut body, payee.map(|(p, _)| self.name_ref(p)).as_deref());
        let _ = write!(body, ",\"amount\":\"{}\",\"currency\":", summary.amount);
        push_json_or_null(&mut body, currency.as_ref().map(Currency::as_str));
        if let Some(code) = reason {
            let _ = write!(body, ",\"errorCode\":\"{code}\"");
        }
        if finished {
            let _ = write!(body, ",\"preparedAtMs\":{}", summary.prepared_at_ms);
        }
        body.push('}');
        let parties = self.parties(summary);
        self.push(rows, at_ms, format!("{family}.{event}"), parties, key, body);
    }

    fn derive(&mut self, record: &Record, rows: &mut Vec<FeedRow>) -> Result<(), StoreError> {
        match record {
            Record::Participant(row) => {
                self.note_participant(row.id, row.name.as_str(), row.is_hub);
                let mut body = String::from("{\"name\":");
                push_json(&mut body, row.name.as_str());
                let _ = write!(
                    body,
                    ",\"isHub\":{},\"mode\":\"{}\"",
                    row.is_hub,
                    row.mode.as_str()
                );
                // Only on a proxy: the rows of the others stay as they were.
                if row.is_proxy {
                    body.push_str(",\"isProxy\":true");
                }
                body.push('}');
                let name = row.name.as_str().to_string();
                self.push(
                    rows,
                    row.created_at_ms,
                    "participant.changed".into(),
                    (name.clone(), None),
                    name,
                    body,
                );
            }
            Record::Account(row) => {
                let seen = AccountSeen {
                    participant: row.participant,
                    currency: row.currency,
                    active: row.active,
                    net_debit_cap: row.net_debit_cap,
                };
                let before = self.accounts.insert(row.id.0, seen);
                let changed = before.is_none_or(|before| {
                    before.active != seen.active || before.net_debit_cap != seen.net_debit_cap
                });
                if changed {
                    let name = self.name(row.participant);
                    let mut body = format!("{{\"accountId\":{},\"participant\":", row.id.0);
                    push_json(&mut body, &name);
                    let _ = write!(
                        body,
                        ",\"currency\":\"{}\",\"ledgerAccountType\":\"{}\",\"isActive\":{},\"netDebitCap\":",
                        row.currency.as_str(),
                        row.kind.as_str(),
                        row.active
                    );
                    push_cap(&mut body, row.net_debit_cap);
                    // The cap before, for an account that was open: a
                    // follower tells a cap change from the row alone.
                    if let Some(before) = before {
                        body.push_str(",\"previousNetDebitCap\":");
                        push_cap(&mut body, before.net_debit_cap);
                    }
                    body.push('}');
                    self.push(
                        rows,
                        row.changed_at_ms,
                        "account.changed".into(),
                        (name, None),
                        row.id.0.to_string(),
                        body,
                    );
                }
            }
            Record::Transfer(row) => {
                let summary = TransferSummary {
                    transfer_id: row.transfer_id,
                    kind: row.kind,
                    debit: row.debit,
                    credit: row.credit,
                    amount: row.amount,
                    prepared_at_ms: row.prepared_at_ms,
                };
                if row.state == TransferState::Reserved {
                    self.open.insert(row.seq, summary);
                }
                let event = event_of(row.state, None);
                self.transfer_row(
                    rows,
                    &summary,
                    event,
                    row.reason.map(|code| code.0),
                    row.prepared_at_ms,
                    false,
                );
            }
            Record::Finish(row) => {
                let summary = self.open.remove(&row.seq).ok_or_else(|| {
                    StoreError::fatal(format!(
                        "the change feed: a finish of transfer seq {} that the store does not hold",
                        row.seq
                    ))
                })?;
                let event = event_of(row.state, Some(row.kind));
                self.transfer_row(
                    rows,
                    &summary,
                    event,
                    row.reason.map(|code| code.0),
                    row.finished_at_ms,
                    true,
                );
            }
            Record::ConversionFulfilled(row) => {
                let summary = *self.open.get(&row.seq).ok_or_else(|| {
                    StoreError::fatal(format!(
                        "the change feed: the acceptance of conversion seq {} that the store does not hold",
                        row.seq
                    ))
                })?;
                self.transfer_row(rows, &summary, "fulfilled", None, row.at_ms, false);
            }
            Record::Window(row) => {
                let mut body = format!(
                    "{{\"settlementWindowId\":{},\"state\":\"{}\",\"reason\":",
                    row.id,
                    row.state.as_str()
                );
                push_json(&mut body, &row.reason);
                body.push('}');
                self.push(
                    rows,
                    row.changed_at_ms,
                    "settlement_window.changed".into(),
                    (HUB_PARTICIPANT.into(), None),
                    row.id.to_string(),
                    body,
                );
            }
            Record::Settlement(row) => {
                let windows: Vec<String> = row.windows.iter().map(u32::to_string).collect();
                let mut body = format!(
                    "{{\"settlementId\":{},\"state\":\"{}\",\"settlementModelId\":{},\"settlementWindowIds\":[{}],\"reason\":",
                    row.id,
                    row.state.as_str(),
                    row.model,
                    windows.join(",")
                );
                push_json(&mut body, &row.reason);
                body.push('}');
                self.push(
                    rows,
                    row.changed_at_ms,
                    "settlement.changed".into(),
                    (HUB_PARTICIPANT.into(), None),
                    row.id.to_string(),
                    body,
                );
            }
            Record::AuditEvent(row) => {
                let mut body = format!("{{\"auditEventId\":{},\"action\":", row.id);
                push_json(&mut body, &row.action);
                body.push_str(",\"target\":");
                push_json(&mut body, &row.target);
                body.push_str(",\"actor\":");
                push_json(&mut body, &row.actor);
                body.push_str(",\"role\":");
                push_json(&mut body, &row.role);
                body.push_str(",\"outcome\":");
                push_json(&mut body, &row.outcome);
                body.push('}');
                self.push(
                    rows,
                    row.at_ms,
                    "admin.change".into(),
                    (HUB_PARTICIPANT.into(), None),
                    row.id.to_string(),
                    body,
                );
            }
            Record::ProxyMapping(row) => {
                let mut body = String::from("{\"dfsp\":");
                push_json(&mut body, row.dfsp.as_str());
                body.push_str(",\"proxy\":");
                push_json(&mut body, &self.name_ref(row.proxy));
                let _ = write!(body, ",\"byOperator\":{}}}", row.by_operator);
                let proxy = self.name(row.proxy);
                self.push(
                    rows,
                    row.since_ms,
                    "proxy.mapped".into(),
                    (proxy, None),
                    row.dfsp.as_str().to_string(),
                    body,
                );
            }
            Record::ProxyUnmapped(dfsp) => {
                let mut body = String::from("{\"dfsp\":");
                push_json(&mut body, dfsp.as_str());
                body.push('}');
                self.push(
                    rows,
                    self.last_at_ms,
                    "proxy.unmapped".into(),
                    (HUB_PARTICIPANT.into(), None),
                    dfsp.as_str().to_string(),
                    body,
                );
            }
            Record::Endpoint(_)
            | Record::SettlementModel(_)
            | Record::Party(_)
            | Record::PartyDeleted(_)
            | Record::Oracle(_)
            | Record::OracleDeleted(_)
            | Record::Quote(_)
            | Record::Content(_)
            | Record::ContentAccounts(_)
            | Record::ContentPairs(_)
            | Record::Entry(_)
            | Record::CertificatePin(_)
            | Record::CertificateUnpinned(_)
            | Record::Fxp(_)
            | Record::PendingChange(_) => {}
            // A search column of its transfer's row, not a change of its
            // own.
            Record::TransferParties(..) => {}
        }
        Ok(())
    }
}

/// The fields of a transfer's change that its row leaves out (see
/// `transfer_row`): its id (the key), its kind and its state, from the
/// change's kind; `None` for a change that is not a transfer's.
pub fn transfer_fields(kind: &str, key: &str) -> Option<[(&'static str, String); 3]> {
    let (family, event) = kind.rsplit_once('.')?;
    let transfer_kind = match family {
        "transfer" => TransferKind::Fspiop,
        "conversion" => TransferKind::FxConversion,
        "funds.in" => TransferKind::FundsIn,
        "funds.out" => TransferKind::FundsOut,
        _ => return None,
    };
    let state = match event {
        "prepared" | "fulfilled" => TransferState::Reserved,
        "committed" => TransferState::Committed,
        "aborted" => TransferState::Aborted,
        "expired" => TransferState::Expired,
        "rejected" => TransferState::Rejected,
        _ => return None,
    };
    Some([
        ("transferId", key.to_string()),
        ("transferKind", transfer_kind.as_str().to_string()),
        ("state", state.as_str().to_string()),
    ])
}

/// The event of a transfer's state (an expiry says so whatever the state
/// it left).
fn event_of(state: TransferState, finish: Option<FinishKind>) -> &'static str {
    if finish == Some(FinishKind::Expiry) {
        return "expired";
    }
    match state {
        TransferState::Reserved => "prepared",
        TransferState::Committed => "committed",
        TransferState::Aborted => "aborted",
        TransferState::Expired => "expired",
        TransferState::Rejected => "rejected",
    }
}

/// `text` as a JSON string.
fn push_json(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A net debit cap as a JSON string, or `null` if none is set.
fn push_cap(out: &mut String, cap: Option<Amount>) {
    match cap {
        Some(cap) => {
            let _ = write!(out, "\"{cap}\"");
        }
        None => out.push_str("null"),
    }
}

fn push_json_or_null(out: &mut String, text: Option<&str>) {
    match text {
        Some(text) => push_json(out, text),
        None => out.push_str("null"),
    }
}

/// A page's rows as both backends select them.
pub(crate) const FEED_COLUMNS: &str = "feed_seq, at_ms, kind, participant, counterparty, key, body";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_json() {
        let mut out = String::new();
        push_json(&mut out, "a\"b\\c\nd");
        assert_eq!(out, r#""a\"b\\c\u000ad""#);
    }
}
