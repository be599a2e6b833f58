//! The simulated store: [`SimStore`] keeps the rows of every committed
//! transaction in memory, as the real stores keep them in tables, and
//! fails, crashes or slows down where the simulation arms it to.
//!
//! The rows live in a [`Disk`] that outlives the processes using it: a
//! crash ends a *generation* (every handle of it fails from then on, as a
//! dead process's connections do), and recovery opens a new handle on
//! what is durable. Each table keeps the columns its SQL counterpart
//! keeps and changes on conflict only the columns the real upsert
//! changes, so that a record the ledger expects to change a column the
//! store does not shows up as recovery differing from memory. What no
//! real store would accept, or what breaks an invariant of the pipeline,
//! is kept as a violation for the simulation to report: a transfer id
//! recorded twice (an evicted id taken as new), a second finish of one
//! transfer, transfer seqs going back.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ledger::{
    AccountId, AccountRow, Amount, Archived, AuditEventRow, Condition, ContentAccountRow,
    ContentPairRow, ContentRow, ConversionFulfilRow, EndpointRow, EntryRow, FinishRow, FspName,
    FxLink, FxpRow, Lookup, OracleRow, ParticipantRow, PartyKey, PartyRow, PinRow, PrefetchIds,
    Prefetched, ProxyMapRow, QuoteRow, Record, SettlementAccountRow, SettlementModelRow,
    SettlementRow, Snapshot, StoredParties, StoredTransfer, TransferId, TransferKind, TransferRow,
    TransferState, WindowPairSum, WindowRow, WindowState, AUDIT_EVENTS_IN_MEMORY,
};
use store::{Prefetch, Store, StoreError};

/// How the next commit fails, once armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitFault {
    /// `attempts` tries fail transiently (a full disk: nothing written),
    /// then the commit goes through.
    Transient { attempts: u32 },
    /// Fails for good. `durable`: the transaction reached the disk before
    /// the failure was reported (a failed fsync whose pages were written
    /// anyway, a connection lost after COMMIT).
    Fatal { durable: bool },
    /// The process dies during the commit, which is durable or not; every
    /// later call of this generation fails.
    Crash { durable: bool },
}

/// How the next prefetch read fails, once armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefetchFault {
    /// The read as a whole.
    Whole,
    /// One row of it (the first id asked).
    OneRow,
}

/// What happened to the disk, for the run's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskCounters {
    pub commits: u64,
    pub transient_failures: u64,
    pub fatal_failures: u64,
    pub crashes: u64,
    pub prefetch_reads: u64,
    pub prefetched_ids: u64,
    /// Ids prefetched that the store had (a transfer or quote that left
    /// memory, read back).
    pub prefetch_found: u64,
    pub prefetch_failures: u64,
    pub slow_commits: u64,
    pub slow_reads: u64,
}

#[derive(Default)]
struct Armed {
    /// Commits that go through before `commit` hits, and the fault.
    commit: Option<(u32, CommitFault)>,
    /// Tries of the commit in hand still to fail transiently.
    transient_left: u32,
    /// Every try fails transiently until released.
    held: bool,
    slow_commits: u32,
    slow_reads: u32,
    slow: Duration,
    prefetch: Option<PrefetchFault>,
}

struct State {
    rows: Rows,
    generation: u64,
    /// The process of this generation crashed.
    dead: bool,
    armed: Armed,
    violations: Vec<String>,
    /// Ids whose prefetch read was failed on purpose (taken by the driver).
    unread: Vec<TransferId>,
    counters: DiskCounters,
}

/// Durable rows shared by every process generation of one simulated hub.
pub struct Disk {
    state: Mutex<State>,
}

impl Disk {
    pub fn new() -> Arc<Disk> {
        Arc::new(Disk {
            state: Mutex::new(State {
                rows: Rows::default(),
                generation: 0,
                dead: false,
                armed: Armed::default(),
                violations: Vec::new(),
                unread: Vec::new(),
                counters: DiskCounters::default(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A store handle for a new process: handles of earlier generations
    /// fail from now on (a process that lost its lease, or died). Faults
    /// armed for the old process are disarmed.
    pub fn open(self: &Arc<Disk>) -> SimStore {
        let mut state = self.lock();
        state.generation += 1;
        state.dead = false;
        state.armed = Armed::default();
        SimStore {
            disk: self.clone(),
            generation: state.generation,
        }
    }

    pub fn arm_commit(&self, after: u32, fault: CommitFault) {
        self.lock().armed.commit = Some((after, fault));
    }

    /// Every try of a commit fails transiently until [`Disk::release`].
    pub fn hold(&self) {
        self.lock().armed.held = true;
    }

    /// Ends a [`Disk::hold`]: the next try succeeds, or `then` fails it.
    pub fn release(&self, then: Option<CommitFault>) {
        let mut state = self.lock();
        state.armed.held = false;
        state.armed.commit = then.map(|fault| (0, fault));
    }

    pub fn arm_slow(&self, commits: u32, reads: u32, each: Duration) {
        let mut state = self.lock();
        state.armed.slow_commits = commits;
        state.armed.slow_reads = reads;
        state.armed.slow = each;
    }

    pub fn arm_prefetch(&self, fault: PrefetchFault) {
        self.lock().armed.prefetch = Some(fault);
    }

    /// Disarms whatever did not hit.
    pub fn disarm(&self) {
        self.lock().armed = Armed::default();
    }

    /// Whether an armed commit fault is still waiting for its commit.
    pub fn commit_fault_pending(&self) -> bool {
        self.lock().armed.commit.is_some()
    }

    pub fn take_violations(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().violations)
    }

    pub fn take_unread(&self) -> Vec<TransferId> {
        std::mem::take(&mut self.lock().unread)
    }

    pub fn counters(&self) -> DiskCounters {
        self.lock().counters
    }

    /// What the store holds, as a load (`None`) or a load with a retention
    /// horizon gives it.
    pub fn snapshot(&self, horizon_ms: Option<i64>) -> Snapshot {
        self.lock().rows.snapshot(horizon_ms)
    }

    /// A copy of the rows, for a model that follows them from here on.
    pub fn rows(&self) -> Rows {
        self.lock().rows.clone()
    }

    /// How many transfer rows the store holds.
    pub fn transfer_count(&self) -> usize {
        self.lock().rows.transfers.len()
    }
}

/// One process's handle on the [`Disk`].
pub struct SimStore {
    disk: Arc<Disk>,
    generation: u64,
}

/// The ledger thread's own reader in a two-thread pipeline.
pub struct SimReader {
    disk: Arc<Disk>,
    generation: u64,
}

fn gone() -> StoreError {
    StoreError::fatal("sim: this process crashed or was replaced; its store handle is gone")
}

/// Sleeps outside the lock when a slow call is armed (readers and the
/// writer go on meanwhile, as in a real store).
fn slow(disk: &Disk, commit: bool) {
    let pause = {
        let mut state = disk.lock();
        let armed = &mut state.armed;
        let left = match commit {
            true => &mut armed.slow_commits,
            false => &mut armed.slow_reads,
        };
        match *left {
            0 => None,
            _ => {
                *left -= 1;
                let pause = armed.slow;
                match commit {
                    true => state.counters.slow_commits += 1,
                    false => state.counters.slow_reads += 1,
                }
                Some(pause)
            }
        }
    };
    if let Some(pause) = pause {
        std::thread::sleep(pause);
    }
}

fn prefetch(disk: &Disk, generation: u64, ids: &PrefetchIds) -> Result<Prefetched, StoreError> {
    slow(disk, false);
    let mut state = disk.lock();
    if state.dead || state.generation != generation {
        return Err(gone());
    }
    state.counters.prefetch_reads += 1;
    state.counters.prefetched_ids += ids.len() as u64;
    let mut failed_row = None;
    match state.armed.prefetch.take() {
        Some(PrefetchFault::Whole) => {
            state.counters.prefetch_failures += 1;
            let all = ids
                .transfers
                .iter()
                .chain(&ids.quotes)
                .chain(&ids.conversions)
                .copied();
            state.unread.extend(all);
            return Err(StoreError::transient("sim: the read failed"));
        }
        Some(PrefetchFault::OneRow) => {
            state.counters.prefetch_failures += 1;
            failed_row = ids.transfers.first().or(ids.quotes.first()).copied();
            state.unread.extend(failed_row);
        }
        None => {}
    }
    let mut prefetched = Prefetched::default();
    let mut found = 0;
    let mut reserved = Vec::new();
    for &id in &ids.transfers {
        let lookup = match (failed_row == Some(id), state.rows.find_transfer(id)) {
            (true, _) => {
                prefetched
                    .unreadable
                    .push(format!("{id}: sim: the row failed"));
                Lookup::Failed
            }
            (false, Some(stored)) => {
                found += 1;
                // Only finished transfers leave memory, and only once
                // their finish is durable: memory asking for a reserved
                // one lost it, or let it go too early.
                if stored.view.state == TransferState::Reserved {
                    reserved.push(id);
                }
                Lookup::Found(stored)
            }
            (false, None) => Lookup::Absent,
        };
        prefetched.transfers.insert(id, lookup);
    }
    for &id in &ids.conversions {
        let lookup = match state.rows.find_conversion_for(id) {
            Some(stored) => {
                found += 1;
                Lookup::Found(stored)
            }
            None => Lookup::Absent,
        };
        prefetched.conversions.insert(id, lookup);
    }
    for &id in &ids.quotes {
        let lookup = match (failed_row == Some(id), state.rows.quotes.get(&id)) {
            (true, _) => {
                prefetched
                    .unreadable
                    .push(format!("quote {id}: sim: the row failed"));
                Lookup::Failed
            }
            (false, Some(row)) => {
                found += 1;
                Lookup::Found(row.clone())
            }
            (false, None) => Lookup::Absent,
        };
        prefetched.quotes.insert(id, lookup);
    }
    state.counters.prefetch_found += found;
    for id in reserved {
        state.violations.push(format!(
            "the pipeline read transfer {id} from the store while it was RESERVED there"
        ));
    }
    Ok(prefetched)
}

impl Prefetch for SimReader {
    fn prefetch(&mut self, ids: &PrefetchIds) -> Result<Prefetched, StoreError> {
        prefetch(&self.disk, self.generation, ids)
    }
}

impl Store for SimStore {
    fn commit(&mut self, batches: &[&[Record]]) -> Result<(), StoreError> {
        slow(&self.disk, true);
        let mut state = self.disk.lock();
        if state.dead || state.generation != self.generation {
            return Err(gone());
        }
        if state.armed.held || state.armed.transient_left > 0 {
            state.armed.transient_left = state.armed.transient_left.saturating_sub(1);
            state.counters.transient_failures += 1;
            return Err(StoreError::transient("sim: the disk is full"));
        }
        let fault = match &mut state.armed.commit {
            Some((0, fault)) => {
                let fault = *fault;
                state.armed.commit = None;
                Some(fault)
            }
            Some((after, _)) => {
                *after -= 1;
                None
            }
            None => None,
        };
        let durable = match fault {
            None => true,
            Some(CommitFault::Transient { attempts }) => {
                state.armed.transient_left = attempts.saturating_sub(1);
                state.counters.transient_failures += 1;
                return Err(StoreError::transient("sim: the disk is full"));
            }
            Some(CommitFault::Fatal { durable } | CommitFault::Crash { durable }) => durable,
        };
        if durable {
            let State {
                rows, violations, ..
            } = &mut *state;
            rows.commit(batches, violations);
        }
        match fault {
            None => {
                state.counters.commits += 1;
                Ok(())
            }
            Some(CommitFault::Crash { .. }) => {
                state.dead = true;
                state.counters.crashes += 1;
                Err(StoreError::fatal(
                    "sim: the process crashed during the commit",
                ))
            }
            Some(_) => {
                state.counters.fatal_failures += 1;
                Err(StoreError::fatal("sim: fsync failed"))
            }
        }
    }

    fn load(&mut self) -> Result<Snapshot, StoreError> {
        self.load_at(None)
    }

    fn load_recent(&mut self, horizon_ms: i64) -> Result<Snapshot, StoreError> {
        self.load_at(Some(horizon_ms))
    }

    fn prefetch(&mut self, ids: &PrefetchIds) -> Result<Prefetched, StoreError> {
        prefetch(&self.disk, self.generation, ids)
    }

    fn open_prefetcher(&self) -> Result<Box<dyn Prefetch>, StoreError> {
        Ok(Box::new(SimReader {
            disk: self.disk.clone(),
            generation: self.generation,
        }))
    }

    fn describe(&self) -> String {
        format!("the simulated store (process {})", self.generation)
    }
}

impl SimStore {
    fn load_at(&mut self, horizon_ms: Option<i64>) -> Result<Snapshot, StoreError> {
        let state = self.disk.lock();
        if state.dead || state.generation != self.generation {
            return Err(gone());
        }
        Ok(state.rows.snapshot(horizon_ms))
    }
}

/// The tables, by primary key.
#[derive(Clone, Default)]
pub struct Rows {
    participants: BTreeMap<u32, ParticipantRow>,
    accounts: BTreeMap<u32, AccountRow>,
    transfers: BTreeMap<u64, TransferRow>,
    /// `transfers_by_id`.
    by_id: HashMap<TransferId, u64>,
    finishes: BTreeMap<u64, FinishRow>,
    endpoints: BTreeMap<(u32, String), String>,
    settlement_models: BTreeMap<u32, SettlementModelRow>,
    parties: BTreeMap<PartyKey, PartyRow>,
    oracles: BTreeMap<u32, OracleRow>,
    proxy_map: BTreeMap<FspName, ProxyMapRow>,
    quotes: BTreeMap<TransferId, QuoteRow>,
    windows: BTreeMap<u32, WindowRow>,
    content: BTreeMap<u32, ContentRow>,
    content_accounts: BTreeMap<(u32, u32), ContentAccountRow>,
    content_pairs: BTreeMap<(u32, u32, u32), ContentPairRow>,
    settlements: BTreeMap<u32, SettlementRow>,
    settlement_accounts: BTreeMap<(u32, u32), SettlementAccountRow>,
    entries: BTreeMap<u64, EntryRow>,
    audit_events: BTreeMap<u64, AuditEventRow>,
    pins: BTreeMap<[u8; 32], PinRow>,
    /// By the conversion's seq.
    conversion_fulfils: BTreeMap<u64, ConversionFulfilRow>,
    /// By participant id; only FXPs with corridors (a withdrawal deletes).
    fxps: BTreeMap<u32, FxpRow>,
    /// By id (an upsert of the whole row).
    pending_changes: BTreeMap<String, ledger::PendingChangeRow>,
    last_transfer_seq: u64,
}

/// Inserts a row whose key must be new (the table's primary key).
fn insert<K: Ord + std::fmt::Debug, V>(
    table: &mut BTreeMap<K, V>,
    key: K,
    row: V,
    what: &str,
    violations: &mut Vec<String>,
) {
    if table.contains_key(&key) {
        violations.push(format!("{what} {key:?} inserted twice"));
        return;
    }
    table.insert(key, row);
}

impl Rows {
    /// Applies one transaction's records, as the SQL statements of the
    /// real stores would.
    pub fn commit(&mut self, batches: &[&[Record]], violations: &mut Vec<String>) {
        for record in batches.iter().flat_map(|batch| batch.iter()) {
            self.apply(record, violations);
        }
    }

    fn apply(&mut self, record: &Record, violations: &mut Vec<String>) {
        match record {
            // ON CONFLICT (id) DO UPDATE SET is_active, mode
            Record::Participant(row) => match self.participants.get_mut(&row.id.0) {
                Some(stored) => stored.mode = row.mode,
                None => {
                    self.participants.insert(row.id.0, row.clone());
                }
            },
            // ON CONFLICT (id) DO UPDATE SET is_active, value, reserved,
            // net_debit_cap, changed_at_ms
            Record::Account(row) => match self.accounts.get_mut(&row.id.0) {
                Some(stored) => {
                    stored.active = row.active;
                    stored.value = row.value;
                    stored.reserved = row.reserved;
                    stored.net_debit_cap = row.net_debit_cap;
                    stored.changed_at_ms = row.changed_at_ms;
                }
                None => {
                    self.accounts.insert(row.id.0, row.clone());
                }
            },
            Record::Transfer(row) => {
                if row.seq <= self.last_transfer_seq {
                    violations.push(format!(
                        "transfer seq {} committed after seq {}",
                        row.seq, self.last_transfer_seq
                    ));
                }
                self.last_transfer_seq = self.last_transfer_seq.max(row.seq);
                if let Some(seq) = self.by_id.get(&row.transfer_id) {
                    // The index allows it; the ledger must never do it.
                    violations.push(format!(
                        "transfer id {} recorded twice (seq {seq}, then seq {}): an id taken as new",
                        row.transfer_id, row.seq
                    ));
                }
                let mut stored = row.clone();
                // What the tables keep of a funds movement: no condition,
                // no expiration (NULL columns, read back as these).
                if !row.kind.is_between_positions() {
                    stored.condition = Condition::default();
                    stored.expiration_ms = i64::MAX;
                }
                if !self.transfers.contains_key(&row.seq) {
                    self.by_id.insert(row.transfer_id, row.seq);
                }
                insert(
                    &mut self.transfers,
                    row.seq,
                    stored,
                    "transfer seq",
                    violations,
                );
            }
            Record::Finish(row) => {
                match self.transfers.get(&row.seq) {
                    None => violations.push(format!("finish of seq {} with no transfer", row.seq)),
                    Some(transfer) if transfer.state != TransferState::Reserved => {
                        violations.push(format!(
                            "finish of seq {} recorded {} at once",
                            row.seq,
                            transfer.state.as_str()
                        ))
                    }
                    Some(_) if !row.state.is_final() => {
                        violations.push(format!("finish of seq {} is not final", row.seq))
                    }
                    Some(_) => {}
                }
                insert(
                    &mut self.finishes,
                    row.seq,
                    row.clone(),
                    "finish of seq",
                    violations,
                );
            }
            // ON CONFLICT (participant_id, type) DO UPDATE SET value
            Record::Endpoint(row) => {
                self.endpoints.insert(
                    (row.participant.0, row.endpoint_type.clone()),
                    row.value.clone(),
                );
            }
            Record::SettlementModel(row) => insert(
                &mut self.settlement_models,
                row.id,
                row.clone(),
                "settlement model",
                violations,
            ),
            // ON CONFLICT (key) DO UPDATE SET participant_id, currency,
            // registered_at_ms: the whole row.
            Record::Party(row) => {
                self.parties.insert(row.key.clone(), row.clone());
            }
            Record::PartyDeleted(key) => {
                self.parties.remove(key);
            }
            Record::Oracle(row) => {
                self.oracles.insert(row.id, row.clone());
            }
            Record::OracleDeleted(id) => {
                if let Some(row) = self.oracles.get_mut(id) {
                    row.active = false;
                }
            }
            // ON CONFLICT (dfsp) DO UPDATE SET the whole row.
            Record::ProxyMapping(row) => {
                self.proxy_map.insert(row.dfsp, row.clone());
            }
            Record::ProxyUnmapped(dfsp) => {
                self.proxy_map.remove(dfsp);
            }
            // ON CONFLICT (quote_id) DO UPDATE SET the answer's columns
            Record::Quote(row) => match self.quotes.get_mut(&row.quote_id) {
                Some(stored) => stored.answer = row.answer.clone(),
                None => {
                    self.quotes.insert(row.quote_id, row.clone());
                }
            },
            // ON CONFLICT (id) DO UPDATE SET state, reason, changed_at_ms
            Record::Window(row) => match self.windows.get_mut(&row.id) {
                Some(stored) => {
                    stored.state = row.state;
                    stored.reason = row.reason.clone();
                    stored.changed_at_ms = row.changed_at_ms;
                }
                None => {
                    self.windows.insert(row.id, row.clone());
                }
            },
            // ON CONFLICT (id) DO UPDATE SET state, settlement_id,
            // changed_at_ms
            Record::Content(row) => match self.content.get_mut(&row.id) {
                Some(stored) => {
                    stored.state = row.state;
                    stored.settlement = row.settlement;
                    stored.changed_at_ms = row.changed_at_ms;
                }
                None => {
                    self.content.insert(row.id, row.clone());
                }
            },
            Record::ContentAccounts(rows) => {
                for row in rows {
                    let key = (row.content, row.account.0);
                    insert(
                        &mut self.content_accounts,
                        key,
                        row.clone(),
                        "content account",
                        violations,
                    );
                }
            }
            Record::ContentPairs(rows) => {
                for row in rows {
                    let key = (row.content, row.payer.0, row.payee.0);
                    insert(
                        &mut self.content_pairs,
                        key,
                        row.clone(),
                        "content pair",
                        violations,
                    );
                }
            }
            // ON CONFLICT (id) DO UPDATE SET state, reason,
            // external_reference, changed_at_ms; its accounts likewise.
            Record::Settlement(row) => {
                match self.settlements.get_mut(&row.id) {
                    Some(stored) => {
                        stored.state = row.state;
                        stored.reason = row.reason.clone();
                        stored.external_reference = row.external_reference.clone();
                        stored.changed_at_ms = row.changed_at_ms;
                    }
                    None => {
                        let mut stored = row.clone();
                        stored.accounts = Vec::new();
                        self.settlements.insert(row.id, stored);
                    }
                }
                for account in &row.accounts {
                    match self
                        .settlement_accounts
                        .get_mut(&(row.id, account.account.0))
                    {
                        Some(stored) => {
                            stored.state = account.state;
                            stored.reason = account.reason.clone();
                            stored.external_reference = account.external_reference.clone();
                            stored.changed_at_ms = account.changed_at_ms;
                        }
                        None => {
                            self.settlement_accounts
                                .insert((row.id, account.account.0), account.clone());
                        }
                    }
                }
            }
            Record::Entry(row) => insert(
                &mut self.entries,
                row.seq,
                row.clone(),
                "settlement entry",
                violations,
            ),
            Record::AuditEvent(row) => insert(
                &mut self.audit_events,
                row.id,
                row.clone(),
                "audit event",
                violations,
            ),
            Record::CertificatePin(row) => insert(
                &mut self.pins,
                row.fingerprint,
                row.clone(),
                "certificate pin",
                violations,
            ),
            Record::CertificateUnpinned(fingerprint) => {
                self.pins.remove(fingerprint);
            }
            // UPDATE transfers SET payer_party, payee_party WHERE seq: the
            // row must be there (its Transfer record came first); the
            // parties are for search and no snapshot holds them.
            Record::TransferParties(seq, _) => {
                if !self.transfers.contains_key(seq) {
                    violations.push(format!("parties of seq {seq}, which is no transfer"));
                }
            }
            Record::ConversionFulfilled(row) => {
                let conversion = self.transfers.get(&row.seq);
                if conversion.is_none_or(|t| t.kind != TransferKind::FxConversion) {
                    violations.push(format!(
                        "seq {} accepted by an FXP is no conversion",
                        row.seq
                    ));
                } else if self.finishes.contains_key(&row.seq) {
                    violations.push(format!("conversion seq {} accepted once finished", row.seq));
                }
                insert(
                    &mut self.conversion_fulfils,
                    row.seq,
                    row.clone(),
                    "conversion fulfil of seq",
                    violations,
                );
            }
            // ON CONFLICT (participant_id) DO UPDATE SET corridors; no
            // corridors: DELETE.
            Record::Fxp(row) => match row.corridors.is_empty() {
                true => {
                    self.fxps.remove(&row.participant.0);
                }
                false => {
                    self.fxps.insert(row.participant.0, row.clone());
                }
            },
            Record::PendingChange(row) => {
                self.pending_changes.insert(row.id.clone(), row.clone());
            }
        }
    }

    fn name_of_owner(&self, account: AccountId) -> Option<(FspName, ledger::Currency)> {
        let account = self.accounts.get(&account.0)?;
        let participant = self.participants.get(&account.participant.0)?;
        Some((participant.name, account.currency))
    }

    /// The transfer as the real stores' joined read gives it.
    /// The latest conversion whose determining transfer is `determining`
    /// (as the stores' `transfer_fx` index answers it).
    fn find_conversion_for(&self, determining: TransferId) -> Option<StoredTransfer> {
        let latest = self
            .transfers
            .values()
            .rev()
            .find(|row| {
                matches!(row.fx, Some(FxLink::Conversion(terms)) if terms.determining_transfer_id == determining)
            })?;
        self.find_transfer(latest.transfer_id)
    }

    fn find_transfer(&self, id: TransferId) -> Option<StoredTransfer> {
        let seq = self.by_id.get(&id)?;
        let transfer = &self.transfers[seq];
        let (debit_owner, currency) = self.name_of_owner(transfer.debit)?;
        let (credit_owner, _) = self.name_of_owner(transfer.credit)?;
        let fx_payer = match transfer.fx {
            Some(FxLink::Dependent { payer, .. }) => Some(self.participants.get(&payer.0)?.name),
            _ => None,
        };
        let parties = StoredParties {
            debit_owner,
            credit_owner,
            fx_payer,
        };
        Some(StoredTransfer::from_rows(
            transfer,
            self.finishes.get(seq),
            parties,
            currency,
            self.conversion_fulfils.get(seq),
        ))
    }

    /// Every row in the stores' load order; with a horizon, transfers and
    /// conversions finished before it summed into `archived` instead, the
    /// FX rows of those loaded loaded with them (as the stores' history
    /// read does without a history snapshot).
    pub fn snapshot(&self, horizon_ms: Option<i64>) -> Snapshot {
        let mut snapshot = Snapshot {
            participants: self.participants.values().cloned().collect(),
            accounts: self.accounts.values().cloned().collect(),
            endpoints: self
                .endpoints
                .iter()
                .map(|((participant, endpoint_type), value)| EndpointRow {
                    participant: ledger::ParticipantId(*participant),
                    endpoint_type: endpoint_type.clone(),
                    value: value.clone(),
                })
                .collect(),
            settlement_models: self.settlement_models.values().cloned().collect(),
            parties: self.parties.values().cloned().collect(),
            oracles: self.oracles.values().cloned().collect(),
            proxy_map: self.proxy_map.values().cloned().collect(),
            quotes: self
                .quotes
                .values()
                .filter(|row| horizon_ms.is_none_or(|at| row.received_at_ms >= at))
                .cloned()
                .collect(),
            windows: self.windows.values().cloned().collect(),
            content: self.content.values().cloned().collect(),
            content_accounts: self.content_accounts.values().cloned().collect(),
            content_pairs: self.content_pairs.values().cloned().collect(),
            settlements: self
                .settlements
                .values()
                .map(|row| {
                    let mut row = row.clone();
                    row.accounts = self
                        .settlement_accounts
                        .range((row.id, 0)..=(row.id, u32::MAX))
                        .map(|(_, account)| account.clone())
                        .collect();
                    row
                })
                .collect(),
            entries: self.entries.values().cloned().collect(),
            audit_events: self
                .audit_events
                .values()
                .rev()
                .take(AUDIT_EVENTS_IN_MEMORY)
                .rev()
                .cloned()
                .collect(),
            certificate_pins: self.pins.values().cloned().collect(),
            fxps: self.fxps.values().cloned().collect(),
            pending_changes: self.pending_changes.values().cloned().collect(),
            ..Snapshot::default()
        };
        let Some(horizon_ms) = horizon_ms else {
            snapshot.transfers = self.transfers.values().cloned().collect();
            snapshot.finishes = self.finishes.values().cloned().collect();
            snapshot.conversion_fulfils = self.conversion_fulfils.values().cloned().collect();
            return snapshot;
        };
        let open_window = self
            .windows
            .values()
            .next_back()
            .filter(|row| row.state == WindowState::Open)
            .map(|row| row.id);
        let mut archived = Archived::default();
        let mut values: BTreeMap<AccountId, Amount> = BTreeMap::new();
        let mut pairs: BTreeMap<(AccountId, AccountId), (Amount, u64)> = BTreeMap::new();
        for (seq, transfer) in &self.transfers {
            let finish = self.finishes.get(seq);
            let finished_at_ms = match finish {
                Some(finish) => Some(finish.finished_at_ms),
                None => transfer.state.is_final().then_some(transfer.prepared_at_ms),
            };
            let summed = transfer.kind.is_between_positions()
                && finished_at_ms.is_some_and(|at_ms| at_ms < horizon_ms);
            if !summed {
                snapshot.transfers.push(transfer.clone());
                snapshot.finishes.extend(finish.cloned());
                let accepted = self.conversion_fulfils.get(seq);
                snapshot.conversion_fulfils.extend(accepted.cloned());
                continue;
            }
            archived.transfers += 1;
            archived.last_seq = archived.last_seq.max(*seq);
            archived.last_at_ms = archived.last_at_ms.max(finished_at_ms.unwrap_or(0));
            let state = finish.map_or(transfer.state, |finish| finish.state);
            if state != TransferState::Committed {
                continue;
            }
            let debit = values.entry(transfer.debit).or_default();
            *debit = debit.checked_add(transfer.amount).expect("sums fit");
            let credit = values.entry(transfer.credit).or_default();
            *credit = credit.checked_sub(transfer.amount).expect("sums fit");
            let window = finish.and_then(|finish| finish.settlement_window);
            if window.is_some() && window == open_window {
                let (amount, commits) = pairs
                    .entry((transfer.debit, transfer.credit))
                    .or_insert((Amount::ZERO, 0));
                *amount = amount.checked_add(transfer.amount).expect("sums fit");
                *commits += 1;
            }
        }
        archived.values = values.into_iter().collect();
        archived.open_window_pairs = pairs
            .into_iter()
            .map(|((debit, credit), (amount, commits))| WindowPairSum {
                debit,
                credit,
                amount,
                commits,
            })
            .collect();
        snapshot.archived = archived;
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::{Command, Ledger, Limits, Outcome, Prepare, RequestHash};

    const T0: i64 = 1_700_000_000_000;

    fn name(text: &str) -> FspName {
        FspName::new(text).expect("a valid name")
    }

    /// A hub with two funded DFSPs and one committed transfer, and the
    /// records of each batch.
    fn history() -> (Ledger, Vec<Vec<Record>>) {
        let usd = ledger::Currency::parse("USD").expect("ISO 4217");
        let mut ledger = Ledger::new(Limits::default());
        let mut batches = Vec::new();
        let mut apply = |ledger: &mut Ledger, at: i64, commands: Vec<Command>| {
            let result = ledger.apply_batch(T0 + at, &commands);
            batches.push(result.records);
            result.outcomes
        };
        let mut onboarding = vec![Command::CreateHub { name: name("Hub") }];
        for kind in [
            ledger::AccountKind::HubMultilateralSettlement,
            ledger::AccountKind::HubReconciliation,
        ] {
            onboarding.push(Command::CreateHubAccount {
                currency: usd,
                kind,
            });
        }
        for dfsp in ["payer", "payee"] {
            onboarding.push(Command::CreateParticipant {
                name: name(dfsp),
                currency: usd,
            });
            onboarding.push(Command::InitNetDebitCap {
                name: name(dfsp),
                currency: usd,
                net_debit_cap: Amount::from_whole(1_000),
            });
        }
        apply(&mut ledger, 0, onboarding);
        let funds = Command::FundsIn(ledger::Funds {
            transfer_id: TransferId::new(100),
            participant: name("payer"),
            account: AccountId(4),
            amount: Amount::from_whole(500),
            currency: usd,
            memo: Default::default(),
            request_hash: RequestHash([1; 32]),
        });
        let fulfilment = ledger::Fulfilment::from_preimage([7; 32]);
        let prepare = Command::Prepare(Prepare {
            transfer_id: TransferId::new(1),
            payer: name("payer"),
            payee: name("payee"),
            amount: Amount::from_whole(10),
            currency: usd,
            condition: fulfilment.condition(),
            expiration_ms: T0 + 60_000,
            request_hash: RequestHash([2; 32]),
            wire_version: 1,
            parties: None,
        });
        let outcomes = apply(&mut ledger, 10, vec![funds, prepare]);
        assert!(matches!(outcomes[1], Outcome::Transfer(_)), "{outcomes:?}");
        let fulfil = Command::Fulfil(ledger::Fulfil {
            transfer_id: TransferId::new(1),
            caller: name("payee"),
            fulfilment: Some(fulfilment),
            destination: None,
            request_hash: RequestHash([3; 32]),
        });
        apply(&mut ledger, 20, vec![fulfil]);
        (ledger, batches)
    }

    fn commit_all(store: &mut SimStore, batches: &[Vec<Record>]) {
        for batch in batches {
            store.commit(&[batch]).expect("a commit");
        }
    }

    /// A hub where DFSP `payer` converts USD into EUR through `fxp` for a
    /// transfer to `payee`, committed together, and the records of each
    /// batch.
    fn fx_history() -> (Ledger, Vec<Vec<Record>>) {
        let (usd, eur) = (
            ledger::Currency::parse("USD").expect("ISO 4217"),
            ledger::Currency::parse("EUR").expect("ISO 4217"),
        );
        let mut ledger = Ledger::new(Limits::default());
        let mut batches = Vec::new();
        let mut apply = |ledger: &mut Ledger, at: i64, commands: Vec<Command>| {
            let result = ledger.apply_batch(T0 + at, &commands);
            batches.push(result.records);
            result.outcomes
        };
        let mut onboarding = vec![Command::CreateHub { name: name("Hub") }];
        for currency in [usd, eur] {
            for kind in [
                ledger::AccountKind::HubMultilateralSettlement,
                ledger::AccountKind::HubReconciliation,
            ] {
                onboarding.push(Command::CreateHubAccount { currency, kind });
            }
        }
        for (dfsp, currency) in [("payer", usd), ("payee", eur), ("fxp", usd), ("fxp", eur)] {
            onboarding.push(Command::CreateParticipant {
                name: name(dfsp),
                currency,
            });
            onboarding.push(Command::InitNetDebitCap {
                name: name(dfsp),
                currency,
                net_debit_cap: Amount::from_whole(1_000),
            });
        }
        onboarding.push(Command::SetFxpCorridors {
            name: name("fxp"),
            corridors: vec![ledger::Corridor {
                source: usd,
                target: eur,
            }],
        });
        let outcomes = apply(&mut ledger, 0, onboarding);
        assert!(
            outcomes.iter().all(|o| !matches!(o, Outcome::Rejected(_))),
            "{outcomes:?}"
        );
        let settlement = |ledger: &Ledger, dfsp: &str, currency| {
            let snapshot = ledger.snapshot();
            let owner = snapshot
                .participants
                .iter()
                .find(|p| p.name == name(dfsp))
                .expect("onboarded")
                .id;
            snapshot
                .accounts
                .iter()
                .find(|a| {
                    a.participant == owner
                        && a.currency == currency
                        && a.kind == ledger::AccountKind::Settlement
                })
                .expect("onboarded")
                .id
        };
        let funds = |transfer_id: u128, dfsp: &str, account, currency| {
            Command::FundsIn(ledger::Funds {
                transfer_id: TransferId::new(transfer_id),
                participant: name(dfsp),
                account,
                amount: Amount::from_whole(500),
                currency,
                memo: Default::default(),
                request_hash: RequestHash([1; 32]),
            })
        };
        let funding = vec![
            funds(100, "payer", settlement(&ledger, "payer", usd), usd),
            funds(101, "fxp", settlement(&ledger, "fxp", eur), eur),
        ];
        apply(&mut ledger, 5, funding);
        let fxp_fulfilment = ledger::Fulfilment::from_preimage([5; 32]);
        let conversion = Command::PrepareConversion(ledger::PrepareConversion {
            commit_request_id: TransferId::new(1),
            initiating: name("payer"),
            fxp: name("fxp"),
            source_amount: Amount::from_whole(20),
            source_currency: usd,
            terms: ledger::ConversionTerms {
                determining_transfer_id: TransferId::new(2),
                target_currency: eur,
                target_amount: Amount::from_whole(18),
            },
            condition: fxp_fulfilment.condition(),
            expiration_ms: T0 + 60_000,
            request_hash: RequestHash([2; 32]),
            wire_version: 0x20,
        });
        let accepted = Command::FulfilConversion(ledger::FulfilConversion {
            commit_request_id: TransferId::new(1),
            caller: name("fxp"),
            fulfilment: Some(fxp_fulfilment),
            destination: None,
            request_hash: RequestHash([3; 32]),
        });
        let fulfilment = ledger::Fulfilment::from_preimage([7; 32]);
        let dependent = Command::Prepare(Prepare {
            transfer_id: TransferId::new(2),
            payer: name("payer"),
            payee: name("payee"),
            amount: Amount::from_whole(18),
            currency: eur,
            condition: fulfilment.condition(),
            expiration_ms: T0 + 60_000,
            request_hash: RequestHash([4; 32]),
            wire_version: 0x20,
            parties: None,
        });
        let fulfil = Command::Fulfil(ledger::Fulfil {
            transfer_id: TransferId::new(2),
            caller: name("payee"),
            fulfilment: Some(fulfilment),
            destination: None,
            request_hash: RequestHash([6; 32]),
        });
        for (at, command) in [
            (10, conversion),
            (20, accepted),
            (30, dependent),
            (40, fulfil),
        ] {
            let outcomes = apply(&mut ledger, at, vec![command]);
            assert!(
                matches!(&outcomes[0], Outcome::Transfer(_)),
                "at {at}: {outcomes:?}"
            );
        }
        (ledger, batches)
    }

    #[test]
    fn conversions_load_back_as_the_ledger_holds_them() {
        let (ledger, batches) = fx_history();
        let disk = Disk::new();
        let mut store = disk.open();
        commit_all(&mut store, &batches);
        let loaded = store.load().expect("a load");
        assert_eq!(loaded, ledger.snapshot());
        assert_eq!(loaded.conversion_fulfils.len(), 1);
        assert_eq!(loaded.fxps.len(), 1);
        assert!(loaded.audit().is_empty(), "{:?}", loaded.audit());
        // Finished before the horizon: both summed, with the acceptance.
        let recent = store.load_recent(T0 + 1_000).expect("a load");
        assert_eq!(recent.archived.transfers, 2);
        assert!(recent.transfers.iter().all(|t| t.fx.is_none()));
        assert!(recent.conversion_fulfils.is_empty());
        assert!(recent.audit().is_empty(), "{:?}", recent.audit());
        // Read back, the dependent transfer is the payer's, not the FXP's.
        let ids = PrefetchIds {
            transfers: vec![TransferId::new(1), TransferId::new(2)],
            quotes: vec![],
            conversions: vec![TransferId::new(2), TransferId::new(1)],
        };
        let prefetched = store.prefetch(&ids).expect("a read");
        let Lookup::Found(latest) = &prefetched.conversions[&TransferId::new(2)] else {
            panic!("{prefetched:?}");
        };
        assert_eq!(latest.view.transfer_id, TransferId::new(1));
        assert_eq!(prefetched.conversions[&TransferId::new(1)], Lookup::Absent);
        let Lookup::Found(dependent) = &prefetched.transfers[&TransferId::new(2)] else {
            panic!("{prefetched:?}");
        };
        assert_eq!(dependent.view.payer, name("payer"));
        let Lookup::Found(conversion) = &prefetched.transfers[&TransferId::new(1)] else {
            panic!("{prefetched:?}");
        };
        assert_eq!(conversion.fxp_fulfil, Some((RequestHash([3; 32]), T0 + 20)));
        assert!(disk.take_violations().is_empty());
    }

    #[test]
    fn what_is_committed_loads_back_as_the_ledger_holds_it() {
        let (ledger, batches) = history();
        let disk = Disk::new();
        let mut store = disk.open();
        commit_all(&mut store, &batches);
        let loaded = store.load().expect("a load");
        assert_eq!(loaded, ledger.snapshot());
        assert!(loaded.audit().is_empty());
        // With a horizon after the commit, the committed transfer is summed.
        let recent = store.load_recent(T0 + 1_000).expect("a load");
        assert_eq!(recent.archived.transfers, 1);
        assert_eq!(recent.transfers.len(), 1, "the funds movement stays");
        assert!(recent.audit().is_empty(), "{:?}", recent.audit());
        let restored = Ledger::restore(recent, Limits::default()).expect("a restore");
        assert_eq!(restored.snapshot().accounts, ledger.snapshot().accounts);
        assert!(disk.take_violations().is_empty());
    }

    #[test]
    fn a_prefetch_reads_what_is_committed_and_fails_as_armed() {
        let (_, batches) = history();
        let disk = Disk::new();
        let mut store = disk.open();
        let ids = PrefetchIds {
            transfers: vec![TransferId::new(1), TransferId::new(2)],
            quotes: vec![TransferId::new(3)],
            conversions: vec![],
        };
        let mut reader = store.open_prefetcher().expect("a reader");
        let before = reader.prefetch(&ids).expect("a read");
        assert_eq!(before.transfers[&TransferId::new(1)], Lookup::Absent);
        commit_all(&mut store, &batches);
        let after = reader.prefetch(&ids).expect("a read");
        match &after.transfers[&TransferId::new(1)] {
            Lookup::Found(stored) => {
                assert_eq!(stored.view.state, TransferState::Committed);
                assert_eq!(stored.view.payer, name("payer"));
            }
            other => panic!("transfer 1 read as {other:?}"),
        }
        assert_eq!(after.transfers[&TransferId::new(2)], Lookup::Absent);
        assert_eq!(after.quotes[&TransferId::new(3)], Lookup::Absent);
        disk.arm_prefetch(PrefetchFault::OneRow);
        let one = store.prefetch(&ids).expect("a read");
        assert_eq!(one.transfers[&TransferId::new(1)], Lookup::Failed);
        assert_eq!(one.transfers[&TransferId::new(2)], Lookup::Absent);
        disk.arm_prefetch(PrefetchFault::Whole);
        assert!(reader.prefetch(&ids).is_err());
        assert_eq!(disk.take_unread().len(), 1 + 3);
    }

    #[test]
    fn a_crash_keeps_only_what_was_durable_and_ends_the_process() {
        let (_, batches) = history();
        for durable in [false, true] {
            let disk = Disk::new();
            let mut store = disk.open();
            commit_all(&mut store, &batches[..2]);
            disk.arm_commit(0, CommitFault::Crash { durable });
            assert!(!store.commit(&[&batches[2]]).expect_err("a crash").transient);
            assert!(store.load().is_err(), "a dead process reads nothing");
            assert!(store.commit(&[&batches[2]]).is_err());
            let loaded = disk.open().load().expect("a load after restart");
            assert_eq!(loaded.finishes.len(), usize::from(durable));
        }
    }

    #[test]
    fn a_held_commit_fails_transiently_until_released() {
        let (_, batches) = history();
        let disk = Disk::new();
        let mut store = disk.open();
        disk.hold();
        for _ in 0..3 {
            assert!(store.commit(&[&batches[0]]).expect_err("held").transient);
        }
        assert_eq!(disk.transfer_count(), 0);
        assert!(disk.snapshot(None).participants.is_empty());
        disk.release(None);
        store
            .commit(&[&batches[0]])
            .expect("a commit once released");
        assert_eq!(disk.counters().transient_failures, 3);
    }

    #[test]
    fn an_id_recorded_twice_or_a_second_finish_is_a_violation() {
        let (_, batches) = history();
        let disk = Disk::new();
        let mut store = disk.open();
        commit_all(&mut store, &batches);
        let mut again = batches[1].clone();
        for record in &mut again {
            if let Record::Transfer(row) = record {
                row.seq += 100;
            }
        }
        store.commit(&[&again, &batches[2]]).expect("a commit");
        let violations = disk.take_violations();
        assert!(
            violations.iter().any(|v| v.contains("recorded twice")),
            "{violations:?}"
        );
        assert!(
            violations.iter().any(|v| v.contains("inserted twice")),
            "{violations:?}"
        );
    }
}
