//! The state machine: participants, accounts, limits and transfers in memory,
//! changed only by [`Ledger::apply_batch`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::amount::Amount;
use crate::crypto::{Condition, Fulfilment, RequestHash};
use crate::error::{ErrorCode, Rejection};
use crate::ids::{AccountId, Currency, FspName, ParticipantId, TransferId};
use crate::model::*;
use crate::settlement::SettlementBook;
use crate::snapshot::Snapshot;
use crate::transfer_map::TransferMap;

/// Bounds on what the ledger holds. Exceeding one rejects the command.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_participants: usize,
    pub max_currencies_per_participant: usize,
    /// Transfers in memory at once (reserved ones, finished ones within the
    /// retention horizon, and funds movements). Not a lifetime cap: with a
    /// retention horizon, finished FSPIOP transfers leave memory.
    pub max_transfers: usize,
    /// How long a finished FSPIOP transfer stays in memory (`None`: for
    /// ever). Older ones are answered from the store by the hub.
    pub transfer_retention_ms: Option<i64>,
    /// Finished FSPIOP transfers kept in memory (with a retention horizon):
    /// beyond this many the oldest leave before the horizon, so memory
    /// stays bounded whatever the rate (~650 bytes each).
    pub max_finished_in_memory: usize,
    /// Quotes kept in persistent mode (each with its answer, ~1-2 KB):
    /// with a retention horizon the oldest leave memory beyond it (and
    /// after the horizon); without one, more are refused.
    pub max_quotes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_participants: 10_000,
            max_currencies_per_participant: 16,
            max_transfers: 50_000_000,
            transfer_retention_ms: None,
            max_finished_in_memory: 2_000_000,
            max_quotes: 1_000_000,
        }
    }
}

pub(crate) struct Participant {
    pub(crate) name: FspName,
    pub(crate) is_hub: bool,
    pub(crate) active: bool,
    pub(crate) created_at_ms: i64,
    pub(crate) accounts: Vec<AccountId>,
    /// (type, value), at most one per type.
    pub(crate) endpoints: Vec<(String, String)>,
    dirty: bool,
}

pub(crate) struct Account {
    pub(crate) participant: ParticipantId,
    pub(crate) currency: Currency,
    pub(crate) kind: AccountKind,
    pub(crate) active: bool,
    pub(crate) value: Amount,
    pub(crate) reserved: Amount,
    pub(crate) net_debit_cap: Option<Amount>,
    pub(crate) created_at_ms: i64,
    /// When `value` or `reserved` last changed (central-ledger's position
    /// `changedDate`): set by [`Ledger::balance_mut`].
    pub(crate) changed_at_ms: i64,
    dirty: bool,
}

#[derive(Clone, Copy)]
pub(crate) struct Finish {
    pub(crate) kind: FinishKind,
    pub(crate) request_hash: RequestHash,
    pub(crate) at_ms: i64,
    pub(crate) settlement_window: Option<u32>,
    /// Why the hub aborted it on the payee's message, if it did.
    pub(crate) cause: Option<AbortCause>,
}

#[derive(Clone, Copy)]
pub(crate) struct PartyEntry {
    pub(crate) fsp: ParticipantId,
    pub(crate) currency: Option<Currency>,
    pub(crate) registered_at_ms: i64,
}

pub(crate) struct Transfer {
    pub(crate) seq: u64,
    pub(crate) kind: TransferKind,
    pub(crate) debit: AccountId,
    pub(crate) credit: AccountId,
    pub(crate) amount: Amount,
    pub(crate) condition: Condition,
    pub(crate) expiration_ms: i64,
    pub(crate) prepared_at_ms: i64,
    pub(crate) request_hash: RequestHash,
    pub(crate) state: TransferState,
    pub(crate) reason: Option<ErrorCode>,
    pub(crate) finish: Option<Finish>,
    pub(crate) fulfilment: Option<Fulfilment>,
    pub(crate) memo: Option<Box<FundsMemo>>,
    pub(crate) wire_version: u8,
}

/// What one batch produced: an outcome per command, in order, and the
/// records the store must make durable before any outcome is released.
#[derive(Debug)]
pub struct BatchResult {
    pub outcomes: Vec<Outcome>,
    pub records: Vec<Record>,
}

/// The ledger. Owned by one thread; no I/O, no clock, no randomness: the
/// same batches applied to the same state give the same state.
pub struct Ledger {
    limits: Limits,
    pub(crate) hub: Option<ParticipantId>,
    pub(crate) participants: Vec<Participant>,
    pub(crate) participant_by_name: HashMap<FspName, ParticipantId>,
    pub(crate) accounts: Vec<Account>,
    pub(crate) transfers: TransferMap,
    pub(crate) last_seq: u64,
    /// Reserved FSPIOP transfers by expiration instant: the next one to expire
    /// is the first entry, so expiry costs nothing until it is due.
    pub(crate) expiry: BTreeSet<(i64, TransferId)>,
    pub(crate) now_ms: i64,
    pub(crate) settlement_models: Vec<SettlementModelRow>,
    pub(crate) parties: HashMap<PartyKey, PartyEntry>,
    /// Every oracle ever created, by id (index + 1); deleted ones stay,
    /// inactive, so that ids are never reused.
    pub(crate) oracles: Vec<OracleRow>,
    pub(crate) quotes: HashMap<TransferId, QuoteRow>,
    /// Settlement windows, their content and settlements.
    pub(crate) book: SettlementBook,
    /// The newest audit events, oldest first (at most
    /// [`AUDIT_EVENTS_IN_MEMORY`]), and the last id given.
    pub(crate) audit_events: VecDeque<AuditEventRow>,
    pub(crate) last_audit_id: u64,
    /// Pinned client certificates: fingerprint → (participant, when).
    pub(crate) pins: BTreeMap<[u8; 32], (ParticipantId, i64)>,
    /// Finished FSPIOP transfers in finishing order, and recently evicted
    /// ids (see `retention.rs`).
    pub(crate) retention: crate::retention::Retention,
    records: Vec<Record>,
    dirty_participants: Vec<ParticipantId>,
    dirty_accounts: Vec<AccountId>,
}

fn overflow() -> Rejection {
    Rejection::new(
        ErrorCode::INTERNAL_SERVER_ERROR,
        "amount arithmetic would overflow",
    )
}

/// What a request that creates a transfer knows of its id beyond memory
/// (see `retention.rs`).
#[derive(Clone, Copy)]
enum NewId<'a> {
    /// Nothing: funds movements, and prepares with no retention horizon.
    Unchecked,
    /// The hub's store check, with the eviction count read before it.
    Checked(u64),
    /// The pipeline's store lookup.
    LookedUp(&'a StoreLookup),
}

impl Funds {
    fn new_id(&self) -> NewId<'static> {
        match self.evictions_seen {
            Some(evictions_seen) => NewId::Checked(evictions_seen),
            None => NewId::Unchecked,
        }
    }
}

fn modified_prepare(transfer_id: TransferId) -> Rejection {
    Rejection::new(
        ErrorCode::MODIFIED_REQUEST,
        format!("transfer {transfer_id} was received before with a different body"),
    )
}

fn validation(description: impl Into<String>) -> Rejection {
    Rejection::new(ErrorCode::GENERIC_VALIDATION_ERROR, description)
}

impl Ledger {
    pub fn new(limits: Limits) -> Ledger {
        Ledger {
            limits,
            hub: None,
            participants: Vec::new(),
            participant_by_name: HashMap::new(),
            accounts: Vec::new(),
            transfers: TransferMap::new(),
            last_seq: 0,
            expiry: BTreeSet::new(),
            now_ms: i64::MIN,
            settlement_models: Vec::new(),
            parties: HashMap::new(),
            oracles: Vec::new(),
            quotes: HashMap::new(),
            book: SettlementBook::default(),
            audit_events: VecDeque::new(),
            last_audit_id: 0,
            pins: BTreeMap::new(),
            retention: Default::default(),
            records: Vec::new(),
            dirty_participants: Vec::new(),
            dirty_accounts: Vec::new(),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The hub participant's name, once created.
    pub fn hub_name(&self) -> Option<FspName> {
        self.hub.map(|id| self.participants[index(id.0)].name)
    }

    pub fn transfer_count(&self) -> usize {
        self.transfers.len()
    }

    /// The latest time the ledger has seen (the clock never goes back).
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// When the next reserved transfer expires, so that the pipeline can wake
    /// exactly then and apply [`Command::Expire`].
    pub fn next_expiry_ms(&self) -> Option<i64> {
        self.expiry.first().map(|&(at_ms, _)| at_ms)
    }

    /// Applies `commands` in order at time `now_ms` (clamped so that time
    /// never goes back). Each command is atomic.
    pub fn apply_batch(&mut self, now_ms: i64, commands: &[Command]) -> BatchResult {
        self.now_ms = self.now_ms.max(now_ms);
        self.retention.batches += 1;
        if std::mem::take(&mut self.book.window_unrecorded) {
            let first = self.book.windows[0].clone();
            self.records.push(Record::Window(first));
        }
        let outcomes = commands.iter().map(|command| self.apply(command)).collect();
        let mut records = std::mem::replace(&mut self.records, Vec::with_capacity(commands.len()));
        for id in self.dirty_participants.drain(..) {
            let participant = &mut self.participants[index(id.0)];
            participant.dirty = false;
            records.push(Record::Participant(participant_row(id, participant)));
        }
        for id in self.dirty_accounts.drain(..) {
            let account = &mut self.accounts[index(id.0)];
            account.dirty = false;
            records.push(Record::Account(account_row(id, account)));
        }
        // Growth work proportional to the batch, so no batch pays for all.
        self.transfers.grow_ahead(4 * commands.len() + 8192);
        #[cfg(debug_assertions)]
        if let Err(problem) = self.check_balances() {
            panic!("ledger invariant broken after a batch: {problem}");
        }
        BatchResult { outcomes, records }
    }

    pub(crate) fn apply(&mut self, command: &Command) -> Outcome {
        let result = match command {
            Command::CreateHub { name } => self.create_hub(*name),
            Command::CreateHubAccount { currency, kind } => {
                self.create_hub_account(*currency, *kind)
            }
            Command::CreateParticipant { name, currency } => {
                self.create_participant(*name, *currency)
            }
            Command::SetParticipantActive { name, active } => {
                self.set_participant_active(*name, *active)
            }
            Command::SetAccountActive {
                name,
                account,
                active,
            } => self.set_account_active(*name, *account, *active),
            Command::InitNetDebitCap {
                name,
                currency,
                net_debit_cap,
            } => self.set_net_debit_cap(*name, *currency, *net_debit_cap, true),
            Command::SetNetDebitCap {
                name,
                currency,
                net_debit_cap,
            } => self.set_net_debit_cap(*name, *currency, *net_debit_cap, false),
            Command::Prepare(prepare) => self.prepare(prepare, NewId::Unchecked),
            Command::PrepareChecked {
                prepare,
                evictions_seen,
            } => self.prepare(prepare, NewId::Checked(*evictions_seen)),
            Command::PrepareWithLookup { prepare, lookup } => {
                self.prepare(prepare, NewId::LookedUp(lookup))
            }
            Command::Fulfil(fulfil) => self.fulfil(fulfil),
            Command::Abort(abort) => self.abort(abort),
            Command::FundsIn(funds) => self.funds_in(funds),
            Command::FundsOutReserve(funds) => self.funds_out_reserve(funds),
            Command::FundsOutCommit(finish) => self.funds_out_finish(finish, FinishKind::Fulfil),
            Command::FundsOutAbort(finish) => self.funds_out_finish(finish, FinishKind::Abort),
            Command::Expire => Ok(self.expire()),
            Command::SetEndpoint {
                name,
                endpoint_type,
                value,
            } => self.set_endpoint(*name, endpoint_type, value),
            Command::CreateSettlementModel {
                name,
                definition,
                rules,
            } => self.create_settlement_model(name, definition, rules),
            Command::CloseSettlementWindow { id, reason } => self.close_window(*id, reason),
            Command::CreateSettlement {
                model,
                reason,
                windows,
            } => self.create_settlement(model, reason, windows),
            Command::UpdateSettlement {
                settlement,
                changes,
            } => self.update_settlement(*settlement, changes),
            Command::AbortSettlement {
                settlement,
                reason,
                external_reference,
            } => self.abort_settlement(*settlement, reason, external_reference.as_deref()),
            Command::FinalizeSettlement {
                settlement,
                reason,
                external_reference,
            } => self.finalize_settlement(*settlement, reason, external_reference.as_deref()),
            Command::RegisterParty { key, fsp, currency } => {
                self.register_party(key, *fsp, *currency)
            }
            Command::DeleteParty { key, caller } => self.delete_party(key, *caller),
            Command::CreateOracle {
                id_type,
                endpoint,
                currency,
                is_default,
            } => self.create_oracle(id_type, endpoint, *currency, *is_default),
            Command::UpdateOracle {
                id,
                id_type,
                endpoint,
                currency,
                is_default,
            } => self.update_oracle(*id, id_type, endpoint, *currency, *is_default),
            Command::DeleteOracle { id } => self.delete_oracle(*id),
            Command::RecordQuote {
                quote_id,
                payer,
                payee,
                request_hash,
            } => self.record_quote(*quote_id, *payer, *payee, *request_hash),
            Command::AnswerQuote {
                quote_id,
                caller,
                is_error,
                body,
                request_hash,
            } => self.answer_quote(*quote_id, *caller, *is_error, body, *request_hash),
            Command::Audited { command, tag } => return self.apply_audited(command, tag),
            Command::PinCertificate { name, fingerprint } => {
                self.pin_certificate(*name, *fingerprint)
            }
            Command::UnpinCertificate { name, fingerprint } => {
                self.unpin_certificate(*name, *fingerprint)
            }
            Command::NoteExternalChange { .. } | Command::NoteRefused { .. } => Ok(Outcome::Done),
            Command::GetTransfer { .. }
            | Command::ReadTransfer { .. }
            | Command::ReadSettlementWindows
            | Command::ReadSettlements
            | Command::ReadSettlementReport { .. }
            | Command::ReadParticipants { .. }
            | Command::ReadSettlementModels
            | Command::ReadOracles
            | Command::ReadAuditEvents(_)
            | Command::ReadCertificatePins
            | Command::ReadParties => match self.read(command) {
                Some(outcome) => return outcome,
                None => Err(Rejection::new(
                    ErrorCode::INTERNAL_SERVER_ERROR,
                    "a read the ledger cannot answer",
                )),
            },
        };
        result.unwrap_or_else(Outcome::Rejected)
    }

    /// The outcome of a command that only reads, against the ledger as it
    /// is now: no batch, so nothing is recorded and neither the clock nor
    /// the batch count moves. `None` for a command that may change
    /// something. (In a batch, [`apply_batch`](Self::apply_batch) answers a
    /// read the same way.)
    pub fn read(&self, command: &Command) -> Option<Outcome> {
        let result = match command {
            Command::GetTransfer {
                transfer_id,
                caller,
            } => self.get_transfer(*transfer_id, *caller),
            Command::ReadTransfer { transfer_id } => {
                self.read_transfer(*transfer_id).map(Outcome::Transfer)
            }
            Command::ReadSettlementWindows => Ok(self.read_windows()),
            Command::ReadSettlements => Ok(self.read_settlements()),
            Command::ReadSettlementReport { settlement } => self.settlement_report(*settlement),
            Command::ReadParticipants { name } => self.read_participants(*name),
            Command::ReadSettlementModels => {
                Ok(Outcome::SettlementModels(self.settlement_models.clone()))
            }
            Command::ReadOracles => Ok(Outcome::Oracles(
                self.oracles.iter().filter(|o| o.active).cloned().collect(),
            )),
            Command::ReadAuditEvents(query) => Ok(self.read_audit_events(query)),
            Command::ReadCertificatePins => Ok(self.read_pins()),
            Command::ReadParties => Ok(Outcome::Parties(
                self.parties
                    .iter()
                    .map(|(key, entry)| PartyView {
                        key: key.clone(),
                        fsp: self.participant(entry.fsp).name,
                        currency: entry.currency,
                    })
                    .collect(),
            )),
            _ => return None,
        };
        Some(result.unwrap_or_else(Outcome::Rejected))
    }

    // ----- reference data -------------------------------------------------

    pub(crate) fn participant_id_of(&self, name: FspName) -> Result<ParticipantId, Rejection> {
        self.participant_id(name)
    }

    fn participant_id(&self, name: FspName) -> Result<ParticipantId, Rejection> {
        self.participant_by_name.get(&name).copied().ok_or_else(|| {
            Rejection::new(
                ErrorCode::ID_NOT_FOUND,
                format!("participant '{name}' not found"),
            )
        })
    }

    pub(crate) fn participant(&self, id: ParticipantId) -> &Participant {
        &self.participants[index(id.0)]
    }

    pub(crate) fn account(&self, id: AccountId) -> &Account {
        &self.accounts[index(id.0)]
    }

    /// Queues a record for the store with this batch's.
    pub(crate) fn push_record(&mut self, record: Record) {
        self.records.push(record);
    }

    pub(crate) fn account_mut(&mut self, id: AccountId) -> &mut Account {
        let account = &mut self.accounts[index(id.0)];
        if !account.dirty {
            account.dirty = true;
            self.dirty_accounts.push(id);
        }
        account
    }

    /// The account, to change its balance (`value` or `reserved`): its last
    /// change is now. (Its flags and cap change through `account_mut`.)
    pub(crate) fn balance_mut(&mut self, id: AccountId) -> &mut Account {
        let now_ms = self.now_ms;
        let account = self.account_mut(id);
        account.changed_at_ms = now_ms;
        account
    }

    fn participant_mut(&mut self, id: ParticipantId) -> &mut Participant {
        let participant = &mut self.participants[index(id.0)];
        if !participant.dirty {
            participant.dirty = true;
            self.dirty_participants.push(id);
        }
        participant
    }

    pub(crate) fn find_account(
        &self,
        participant: ParticipantId,
        currency: Currency,
        kind: AccountKind,
    ) -> Option<AccountId> {
        self.participant(participant)
            .accounts
            .iter()
            .copied()
            .find(|&id| {
                let account = self.account(id);
                account.currency == currency && account.kind == kind
            })
    }

    fn add_participant(&mut self, name: FspName, is_hub: bool) -> Result<ParticipantId, Rejection> {
        if self.participants.len() >= self.limits.max_participants {
            return Err(Rejection::new(
                ErrorCode::INTERNAL_SERVER_ERROR,
                format!(
                    "the ledger holds its limit of {} participants",
                    self.limits.max_participants
                ),
            ));
        }
        let id = ParticipantId(self.participants.len() as u32 + 1);
        self.participants.push(Participant {
            name,
            is_hub,
            active: true,
            created_at_ms: self.now_ms,
            accounts: Vec::new(),
            endpoints: Vec::new(),
            dirty: false,
        });
        self.participant_mut(id);
        self.participant_by_name.insert(name, id);
        Ok(id)
    }

    fn add_account(
        &mut self,
        participant: ParticipantId,
        currency: Currency,
        kind: AccountKind,
    ) -> AccountId {
        let id = AccountId(self.accounts.len() as u32 + 1);
        self.accounts.push(Account {
            participant,
            currency,
            kind,
            active: true,
            value: Amount::ZERO,
            reserved: Amount::ZERO,
            net_debit_cap: None,
            created_at_ms: self.now_ms,
            changed_at_ms: self.now_ms,
            dirty: false,
        });
        self.account_mut(id);
        self.participant_mut(participant).accounts.push(id);
        id
    }

    fn create_hub(&mut self, name: FspName) -> Result<Outcome, Rejection> {
        if let Some(hub) = self.hub_name() {
            return Err(Rejection::new(
                ErrorCode::GENERIC_CLIENT_ERROR,
                format!("the hub exists already as '{hub}'"),
            ));
        }
        if self.participant_by_name.contains_key(&name) {
            return Err(Rejection::new(
                ErrorCode::GENERIC_CLIENT_ERROR,
                format!("'{name}' is a DFSP already"),
            ));
        }
        self.hub = Some(self.add_participant(name, true)?);
        self.ensure_window(true);
        Ok(Outcome::Done)
    }

    fn create_hub_account(
        &mut self,
        currency: Currency,
        kind: AccountKind,
    ) -> Result<Outcome, Rejection> {
        if !kind.is_hub() {
            return Err(validation(format!(
                "{} is not a hub account type",
                kind.as_str()
            )));
        }
        let hub = self.hub.ok_or_else(|| {
            Rejection::new(
                ErrorCode::GENERIC_CLIENT_ERROR,
                "the hub is not created yet",
            )
        })?;
        if self.find_account(hub, currency, kind).is_some() {
            return Err(Rejection::new(
                ErrorCode::ADD_PARTY_INFORMATION_ERROR,
                format!(
                    "hub account {} in {currency} has already been registered",
                    kind.as_str()
                ),
            ));
        }
        self.check_currency_limit(hub, currency)?;
        let id = self.add_account(hub, currency, kind);
        Ok(Outcome::AccountsCreated(vec![id]))
    }

    /// Refuses a new currency for a participant that holds the limit already.
    fn check_currency_limit(
        &self,
        participant: ParticipantId,
        currency: Currency,
    ) -> Result<(), Rejection> {
        let mut currencies: Vec<Currency> = self
            .participant(participant)
            .accounts
            .iter()
            .map(|&id| self.account(id).currency)
            .collect();
        currencies.sort_unstable();
        currencies.dedup();
        if currencies.contains(&currency)
            || currencies.len() < self.limits.max_currencies_per_participant
        {
            return Ok(());
        }
        Err(Rejection::new(
            ErrorCode::INTERNAL_SERVER_ERROR,
            format!(
                "'{}' holds its limit of {} currencies",
                self.participant(participant).name,
                currencies.len()
            ),
        ))
    }

    /// The hub's reconciliation account in `currency`, when both hub accounts exist.
    fn hub_accounts(&self, currency: Currency) -> Option<AccountId> {
        let hub = self.hub?;
        self.find_account(hub, currency, AccountKind::HubMultilateralSettlement)?;
        self.find_account(hub, currency, AccountKind::HubReconciliation)
    }

    fn create_participant(
        &mut self,
        name: FspName,
        currency: Currency,
    ) -> Result<Outcome, Rejection> {
        if self.hub_name() == Some(name) {
            return Err(validation(format!("'{name}' is the hub's name")));
        }
        if self.hub_accounts(currency).is_none() {
            return Err(Rejection::new(
                ErrorCode::ADD_PARTY_INFORMATION_ERROR,
                format!("the hub's HUB_MULTILATERAL_SETTLEMENT and HUB_RECONCILIATION accounts in {currency} must exist first"),
            ));
        }
        let existing = self.participant_by_name.get(&name).copied();
        if let Some(id) = existing {
            if self
                .find_account(id, currency, AccountKind::Position)
                .is_some()
            {
                // central-ledger's code and words (its collections look
                // for "already been registered").
                return Err(Rejection::new(
                    ErrorCode::GENERIC_CLIENT_ERROR,
                    format!(
                        "Participant currency has already been registered: '{name}' holds {currency}"
                    ),
                ));
            }
            self.check_currency_limit(id, currency)?;
        }
        let id = match existing {
            Some(id) => id,
            None => self.add_participant(name, false)?,
        };
        let position = self.add_account(id, currency, AccountKind::Position);
        let settlement = self.add_account(id, currency, AccountKind::Settlement);
        Ok(Outcome::AccountsCreated(vec![position, settlement]))
    }

    fn set_participant_active(
        &mut self,
        name: FspName,
        active: bool,
    ) -> Result<Outcome, Rejection> {
        let id = self.participant_id(name)?;
        if self.participant(id).active != active {
            self.participant_mut(id).active = active;
        }
        Ok(Outcome::Done)
    }

    fn owned_account(
        &self,
        name: FspName,
        account: AccountId,
    ) -> Result<(ParticipantId, AccountId), Rejection> {
        let participant = self.participant_id(name)?;
        let owned = self.participant(participant).accounts.contains(&account);
        if !owned {
            return Err(Rejection::new(
                ErrorCode::ID_NOT_FOUND,
                format!("participant '{name}' has no account {}", account.0),
            ));
        }
        Ok((participant, account))
    }

    fn set_account_active(
        &mut self,
        name: FspName,
        account: AccountId,
        active: bool,
    ) -> Result<Outcome, Rejection> {
        let (_, account) = self.owned_account(name, account)?;
        if self.account(account).active != active {
            self.account_mut(account).active = active;
        }
        Ok(Outcome::Done)
    }

    fn set_net_debit_cap(
        &mut self,
        name: FspName,
        currency: Currency,
        net_debit_cap: Amount,
        first: bool,
    ) -> Result<Outcome, Rejection> {
        let id = self.participant_id(name)?;
        let position = self
            .find_account(id, currency, AccountKind::Position)
            .ok_or_else(|| {
                validation(format!(
                    "participant '{name}' has no {currency} POSITION account"
                ))
            })?;
        if net_debit_cap.is_negative() || net_debit_cap > Amount::MAX_TRANSFER {
            return Err(validation(
                "NET_DEBIT_CAP must be between 0 and 18 integer digits",
            ));
        }
        if first && self.account(position).net_debit_cap.is_some() {
            return Err(Rejection::new(
                ErrorCode::GENERIC_CLIENT_ERROR,
                // central-ledger's words, which its collections look for
                // ("already set"); its code is 2001, but this is the
                // client's error.
                format!("Participant Limit or Initial Position already set: '{name}' has a {currency} NET_DEBIT_CAP; change it with PUT /participants/{name}/limits"),
            ));
        }
        self.account_mut(position).net_debit_cap = Some(net_debit_cap);
        Ok(Outcome::Done)
    }

    fn set_endpoint(
        &mut self,
        name: FspName,
        endpoint_type: &str,
        value: &str,
    ) -> Result<Outcome, Rejection> {
        let id = self.participant_id(name)?;
        let type_ok = !endpoint_type.is_empty()
            && endpoint_type.len() <= ENDPOINT_TYPE_MAX_LEN
            && endpoint_type
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !type_ok {
            return Err(validation(format!(
                "endpoint type must be 1-{ENDPOINT_TYPE_MAX_LEN} characters of A-Z, 0-9 and _"
            )));
        }
        if value.is_empty()
            || value.len() > ENDPOINT_VALUE_MAX_LEN
            || value.chars().any(char::is_control)
        {
            return Err(validation(format!(
                "endpoint value must be 1-{ENDPOINT_VALUE_MAX_LEN} printable characters"
            )));
        }
        // Endpoints have their own records; the participant row is unchanged.
        let participant = &mut self.participants[index(id.0)];
        match participant
            .endpoints
            .iter_mut()
            .find(|(kind, _)| kind == endpoint_type)
        {
            Some((_, existing)) => *existing = value.to_string(),
            None => participant
                .endpoints
                .push((endpoint_type.to_string(), value.to_string())),
        }
        self.records.push(Record::Endpoint(EndpointRow {
            participant: id,
            endpoint_type: endpoint_type.to_string(),
            value: value.to_string(),
        }));
        Ok(Outcome::Done)
    }

    fn create_settlement_model(
        &mut self,
        name: &str,
        definition: &str,
        rules: &Option<ModelRules>,
    ) -> Result<Outcome, Rejection> {
        if let Some(rules) = rules.as_ref().filter(|r| !r.is_valid_combination()) {
            return Err(Rejection::new(
                ErrorCode::GENERIC_CLIENT_ERROR,
                format!(
                    "Invalid settlement model definition: {}/{}/{} (delay/granularity/interchange) is not a model Mojaloop supports",
                    rules.delay.as_str(),
                    rules.granularity.as_str(),
                    rules.interchange.as_str()
                ),
            ));
        }
        if name.is_empty()
            || name.len() > SETTLEMENT_MODEL_NAME_MAX_LEN
            || name.chars().any(char::is_control)
        {
            return Err(validation(format!(
                "settlement model name must be 1-{SETTLEMENT_MODEL_NAME_MAX_LEN} characters"
            )));
        }
        if definition.len() > SETTLEMENT_MODEL_DEFINITION_MAX_LEN {
            return Err(validation("settlement model definition is too long"));
        }
        if self
            .settlement_models
            .iter()
            .any(|model| model.name == name)
        {
            return Err(Rejection::new(
                ErrorCode::GENERIC_CLIENT_ERROR,
                "Settlement Model already exists",
            ));
        }
        let row = SettlementModelRow {
            id: self.settlement_models.len() as u32 + 1,
            name: name.to_string(),
            definition: definition.to_string(),
            rules: rules.clone(),
        };
        self.settlement_models.push(row.clone());
        self.records.push(Record::SettlementModel(row));
        Ok(Outcome::Done)
    }

    fn read_participants(&self, name: Option<FspName>) -> Result<Outcome, Rejection> {
        let ids: Vec<ParticipantId> = match name {
            Some(name) => vec![self.participant_id(name)?],
            None => (1..=self.participants.len() as u32)
                .map(ParticipantId)
                .collect(),
        };
        let views = ids
            .into_iter()
            .map(|id| {
                let participant = self.participant(id);
                ParticipantView {
                    participant: participant_row(id, participant),
                    accounts: participant
                        .accounts
                        .iter()
                        .map(|&a| account_row(a, self.account(a)))
                        .collect(),
                    endpoints: participant
                        .endpoints
                        .iter()
                        .map(|(endpoint_type, value)| EndpointRow {
                            participant: id,
                            endpoint_type: endpoint_type.clone(),
                            value: value.clone(),
                        })
                        .collect(),
                }
            })
            .collect();
        Ok(Outcome::Participants(views))
    }

    fn register_party(
        &mut self,
        key: &PartyKey,
        fsp: FspName,
        currency: Option<Currency>,
    ) -> Result<Outcome, Rejection> {
        check_party_key(key)?;
        let id = self
            .participant_by_name
            .get(&fsp)
            .copied()
            .ok_or_else(|| validation(format!("FSP '{fsp}' is not a participant")))?;
        let participant = self.participant(id);
        if participant.is_hub || !participant.active {
            return Err(validation(format!(
                "FSP '{fsp}' cannot hold parties (it is the hub or inactive)"
            )));
        }
        if let Some(existing) = self.parties.get(key) {
            if existing.fsp != id {
                return Err(Rejection::new(
                    ErrorCode::ADD_PARTY_INFORMATION_ERROR,
                    format!("party {key} is registered to another FSP"),
                ));
            }
            if existing.currency == currency {
                return Ok(Outcome::Done);
            }
        }
        let entry = PartyEntry {
            fsp: id,
            currency,
            registered_at_ms: self.now_ms,
        };
        self.parties.insert(key.clone(), entry);
        self.records.push(Record::Party(PartyRow {
            key: key.clone(),
            fsp: id,
            currency,
            registered_at_ms: self.now_ms,
        }));
        Ok(Outcome::Done)
    }

    fn delete_party(&mut self, key: &PartyKey, caller: FspName) -> Result<Outcome, Rejection> {
        check_party_key(key)?;
        let entry = self.parties.get(key).ok_or_else(|| {
            Rejection::new(
                ErrorCode::ID_NOT_FOUND,
                format!("party {key} is not registered"),
            )
        })?;
        if self.participant(entry.fsp).name != caller {
            return Err(validation(format!(
                "party {key} is not registered to '{caller}'"
            )));
        }
        self.parties.remove(key);
        self.records.push(Record::PartyDeleted(key.clone()));
        Ok(Outcome::Done)
    }

    /// Checks an oracle's configuration against the live oracles other than
    /// `except`: one per (type, currency), one default per type.
    fn check_oracle(
        &self,
        except: Option<u32>,
        id_type: &str,
        endpoint: &str,
        currency: Option<Currency>,
        is_default: bool,
    ) -> Result<(), Rejection> {
        check_oracle_fields(id_type, endpoint)?;
        for other in self
            .oracles
            .iter()
            .filter(|o| o.active && Some(o.id) != except && o.id_type == id_type)
        {
            if other.currency == currency {
                let currency = currency.map_or("any currency".to_string(), |c| c.to_string());
                return Err(Rejection::new(
                    ErrorCode::ADD_PARTY_INFORMATION_ERROR,
                    format!(
                        "oracle {} serves {id_type} for {currency} already",
                        other.id
                    ),
                ));
            }
            if is_default && other.is_default {
                return Err(Rejection::new(
                    ErrorCode::ADD_PARTY_INFORMATION_ERROR,
                    format!("oracle {} is the default for {id_type} already", other.id),
                ));
            }
        }
        Ok(())
    }

    fn create_oracle(
        &mut self,
        id_type: &str,
        endpoint: &str,
        currency: Option<Currency>,
        is_default: bool,
    ) -> Result<Outcome, Rejection> {
        self.check_oracle(None, id_type, endpoint, currency, is_default)?;
        let live = self.oracles.iter().filter(|o| o.active).count();
        if live >= ORACLES_MAX || self.oracles.len() >= ORACLE_IDS_MAX {
            return Err(Rejection::new(
                ErrorCode::INTERNAL_SERVER_ERROR,
                format!(
                    "the ledger holds its limit of oracles ({ORACLES_MAX} live, {ORACLE_IDS_MAX} ids)"
                ),
            ));
        }
        let row = OracleRow {
            id: self.oracles.len() as u32 + 1,
            id_type: id_type.to_string(),
            endpoint: endpoint.to_string(),
            currency,
            is_default,
            active: true,
        };
        let id = row.id;
        self.oracles.push(row.clone());
        self.records.push(Record::Oracle(row));
        Ok(Outcome::OracleCreated(id))
    }

    fn live_oracle_index(&self, id: u32) -> Result<usize, Rejection> {
        (id as usize)
            .checked_sub(1)
            .filter(|&i| self.oracles.get(i).is_some_and(|o| o.active))
            .ok_or_else(|| {
                Rejection::new(ErrorCode::ID_NOT_FOUND, format!("oracle {id} not found"))
            })
    }

    fn update_oracle(
        &mut self,
        id: u32,
        id_type: &str,
        endpoint: &str,
        currency: Option<Currency>,
        is_default: bool,
    ) -> Result<Outcome, Rejection> {
        let i = self.live_oracle_index(id)?;
        self.check_oracle(Some(id), id_type, endpoint, currency, is_default)?;
        let row = OracleRow {
            id,
            id_type: id_type.to_string(),
            endpoint: endpoint.to_string(),
            currency,
            is_default,
            active: true,
        };
        if self.oracles[i] != row {
            self.oracles[i] = row.clone();
            self.records.push(Record::Oracle(row));
        }
        Ok(Outcome::Done)
    }

    fn delete_oracle(&mut self, id: u32) -> Result<Outcome, Rejection> {
        let i = self.live_oracle_index(id)?;
        self.oracles[i].active = false;
        self.records.push(Record::OracleDeleted(id));
        Ok(Outcome::Done)
    }

    fn quote_view(&self, row: &QuoteRow) -> QuoteView {
        QuoteView {
            quote_id: row.quote_id,
            payer: self.participant(row.payer).name,
            payee: self.participant(row.payee).name,
            answer: row.answer.clone(),
        }
    }

    fn record_quote(
        &mut self,
        quote_id: TransferId,
        payer: FspName,
        payee: FspName,
        request_hash: RequestHash,
    ) -> Result<Outcome, Rejection> {
        if let Some(existing) = self.quotes.get(&quote_id) {
            if existing.request_hash == request_hash {
                return Ok(Outcome::QuoteDuplicate(self.quote_view(existing)));
            }
            return Err(Rejection::new(
                ErrorCode::MODIFIED_REQUEST,
                format!("quote {quote_id} was received before with a different body"),
            ));
        }
        // With a retention horizon the oldest quotes leave memory instead
        // (the hub asks the store about ids the ledger does not hold).
        if self.limits.transfer_retention_ms.is_none()
            && self.quotes.len() >= self.limits.max_quotes
        {
            return Err(Rejection::new(
                ErrorCode::INTERNAL_SERVER_ERROR,
                format!(
                    "the ledger holds its limit of {} quotes",
                    self.limits.max_quotes
                ),
            ));
        }
        let known = |name: FspName| self.participant_by_name.get(&name).copied();
        let (Some(payer), Some(payee)) = (known(payer), known(payee)) else {
            return Err(Rejection::new(
                ErrorCode(3201),
                "Destination FSP Error - payer or payee is not a participant",
            ));
        };
        let row = QuoteRow {
            quote_id,
            payer,
            payee,
            request_hash,
            received_at_ms: self.now_ms,
            answer: None,
        };
        self.records.push(Record::Quote(row.clone()));
        self.quotes.insert(quote_id, row);
        if self.limits.transfer_retention_ms.is_some() {
            self.retention.quote_recorded(self.now_ms, quote_id);
        }
        Ok(Outcome::Done)
    }

    fn answer_quote(
        &mut self,
        quote_id: TransferId,
        caller: FspName,
        is_error: bool,
        body: &str,
        request_hash: RequestHash,
    ) -> Result<Outcome, Rejection> {
        let row = self.quotes.get(&quote_id).ok_or_else(|| {
            Rejection::new(
                ErrorCode(3205),
                format!("Quote ID not found - quote {quote_id}"),
            )
        })?;
        if self.participant(row.payee).name != caller {
            return Err(validation(format!(
                "'{caller}' is not the payee asked for quote {quote_id}"
            )));
        }
        if let Some(answer) = &row.answer {
            if answer.request_hash == request_hash && answer.is_error == is_error {
                return Ok(Outcome::QuoteDuplicate(self.quote_view(row)));
            }
            return Err(Rejection::new(
                ErrorCode::MODIFIED_REQUEST,
                format!("quote {quote_id} was answered before with a different body"),
            ));
        }
        if body.len() > QUOTE_ANSWER_MAX_BYTES {
            return Err(validation(format!(
                "a quote answer may hold at most {QUOTE_ANSWER_MAX_BYTES} bytes"
            )));
        }
        let answer = QuoteAnswer {
            request_hash,
            is_error,
            body: body.to_string(),
            answered_at_ms: self.now_ms,
        };
        let row = self.quotes.get_mut(&quote_id).expect("looked up above");
        row.answer = Some(answer);
        let row = row.clone();
        self.records.push(Record::Quote(row));
        Ok(Outcome::Done)
    }

    // ----- transfers --------------------------------------------------------

    pub(crate) fn view(&self, transfer_id: TransferId, transfer: &Transfer) -> TransferView {
        let debit = self.account(transfer.debit);
        let credit = self.account(transfer.credit);
        TransferView {
            transfer_id,
            kind: transfer.kind,
            payer: self.participant(debit.participant).name,
            payee: self.participant(credit.participant).name,
            amount: transfer.amount,
            currency: debit.currency,
            state: transfer.state,
            reason: transfer.reason,
            cause: transfer.finish.and_then(|finish| finish.cause),
            expiration_ms: transfer.expiration_ms,
            prepared_at_ms: transfer.prepared_at_ms,
            completed_at_ms: match transfer.state {
                TransferState::Reserved => None,
                _ => Some(
                    transfer
                        .finish
                        .map_or(transfer.prepared_at_ms, |finish| finish.at_ms),
                ),
            },
            fulfilment: transfer.fulfilment,
            wire_version: transfer.wire_version,
        }
    }

    fn view_of(&self, transfer_id: TransferId) -> TransferView {
        self.view(transfer_id, &self.transfers[&transfer_id])
    }

    /// Whether a transfer with this id is in memory (one that left it is in
    /// the store only).
    pub fn holds_transfer(&self, transfer_id: TransferId) -> bool {
        self.transfers.get(&transfer_id).is_some()
    }

    /// Duplicate rule for a request that creates a transfer (FSPIOP §3.2.5.1).
    fn check_new_transfer(
        &self,
        transfer_id: TransferId,
        request_hash: RequestHash,
        new_id: NewId,
    ) -> Result<Option<Outcome>, Rejection> {
        let Some(existing) = self.transfers.get(&transfer_id) else {
            let evictions_seen = match new_id {
                NewId::Unchecked => None,
                NewId::Checked(evictions_seen) => Some(evictions_seen),
                // Read on this thread after every eviction so far.
                NewId::LookedUp(StoreLookup::Absent) => Some(self.transfers_evicted()),
                NewId::LookedUp(StoreLookup::Found(stored)) => {
                    return match stored.request_hash == request_hash {
                        true => Ok(Some(Outcome::Duplicate(stored.view))),
                        false => Err(modified_prepare(transfer_id)),
                    };
                }
                // Nothing is known about the id, so nothing is decided: the
                // hub answers the prepare 503 with Retry-After.
                NewId::LookedUp(StoreLookup::Failed) => {
                    return Err(Rejection::new(
                        ErrorCode::SERVICE_UNAVAILABLE,
                        "the hub could not read its store; retry later",
                    ));
                }
                NewId::LookedUp(StoreLookup::Pending) => {
                    return Err(Rejection::new(
                        ErrorCode::INTERNAL_SERVER_ERROR,
                        format!("transfer {transfer_id} was not looked up in the store"),
                    ));
                }
            };
            self.check_not_evicted(transfer_id, evictions_seen)?;
            if self.transfers.len() >= self.limits.max_transfers {
                return Err(Rejection::new(
                    ErrorCode::INTERNAL_SERVER_ERROR,
                    format!(
                        "the ledger holds its limit of {} transfers",
                        self.limits.max_transfers
                    ),
                ));
            }
            return Ok(None);
        };
        if existing.request_hash == request_hash {
            return Ok(Some(Outcome::Duplicate(self.view(transfer_id, existing))));
        }
        Err(modified_prepare(transfer_id))
    }

    /// Duplicate rule for a request that finishes a transfer: a resend of the
    /// request that finished it is a duplicate; any other request of the same
    /// kind is a modified request.
    fn check_finish_duplicate(
        &self,
        transfer_id: TransferId,
        transfer: &Transfer,
        kind: FinishKind,
        request_hash: RequestHash,
    ) -> Result<Option<Outcome>, Rejection> {
        match transfer.finish {
            Some(finish) if finish.kind == kind && finish.request_hash == request_hash => {
                Ok(Some(Outcome::Duplicate(self.view(transfer_id, transfer))))
            }
            Some(finish) if finish.kind == kind => Err(Rejection::new(
                ErrorCode::MODIFIED_REQUEST,
                format!(
                    "transfer {transfer_id} was finished by a {} with a different body",
                    kind.as_str().to_lowercase()
                ),
            )),
            _ => Ok(None),
        }
    }

    fn not_reserved(transfer_id: TransferId, state: TransferState) -> Rejection {
        if state == TransferState::Expired {
            return Rejection::new(
                ErrorCode::TRANSFER_EXPIRED,
                format!("transfer {transfer_id} has expired"),
            );
        }
        validation(format!(
            "transfer {transfer_id} is {}, not RESERVED",
            state.as_str()
        ))
    }

    /// A DFSP's POSITION account in `currency`, required to be usable; the
    /// refusals in central-ledger's words (`Participant payerfsp is
    /// inactive`), which Mojaloop's collections look for.
    fn active_position(&self, name: FspName, currency: Currency) -> Result<AccountId, Rejection> {
        let id = self
            .participant_by_name
            .get(&name)
            .copied()
            .ok_or_else(|| validation(format!("Participant {name} not found")))?;
        let participant = self.participant(id);
        if !participant.active {
            return Err(validation(format!("Participant {name} is inactive")));
        }
        let account = self
            .find_account(id, currency, AccountKind::Position)
            .ok_or_else(|| {
                validation(format!("Participant {name} {currency} account not found"))
            })?;
        if !self.account(account).active {
            return Err(validation(format!(
                "Participant {name} {currency} account is inactive"
            )));
        }
        Ok(account)
    }

    fn prepare(&mut self, prepare: &Prepare, new_id: NewId) -> Result<Outcome, Rejection> {
        let transfer_id = prepare.transfer_id;
        if let Some(duplicate) =
            self.check_new_transfer(transfer_id, prepare.request_hash, new_id)?
        {
            return Ok(duplicate);
        }
        if !prepare.amount.is_valid_transfer_amount() {
            return Err(validation(
                "amount must be above 0, with at most 18 integer digits and 4 decimals",
            ));
        }
        if prepare.payer == prepare.payee {
            return Err(validation(format!(
                "payer and payee are both '{}'",
                prepare.payer
            )));
        }
        let payer_position = self.active_position(prepare.payer, prepare.currency)?;
        let payee_position = self.active_position(prepare.payee, prepare.currency)?;
        let payer = self.account(payer_position).participant;
        let settlement = self
            .find_account(payer, prepare.currency, AccountKind::Settlement)
            .ok_or_else(|| {
                validation(format!(
                    "payer FSP '{}' has no {} SETTLEMENT account",
                    prepare.payer, prepare.currency
                ))
            })?;
        if prepare.expiration_ms <= self.now_ms {
            return Err(Rejection::new(
                ErrorCode::TRANSFER_EXPIRED,
                format!("transfer {transfer_id} expired before it was prepared"),
            ));
        }

        // Mojaloop's position check (central-ledger position facade), with the
        // headroom of each reservation taken before the next command runs.
        let position = self.account(payer_position);
        let settlement = self.account(settlement);
        let effective = position
            .value
            .checked_add(position.reserved)
            .ok_or_else(overflow)?;
        let liquidity_cover = settlement
            .value
            .checked_add(settlement.reserved)
            .and_then(Amount::checked_neg)
            .ok_or_else(overflow)?;
        let available_liquidity = liquidity_cover
            .checked_sub(effective)
            .ok_or_else(overflow)?;
        let net_debit_cap = position.net_debit_cap.unwrap_or(Amount::ZERO);
        let available_limit = net_debit_cap.checked_sub(effective).ok_or_else(overflow)?;
        let new_reserved = position
            .reserved
            .checked_add(prepare.amount)
            .ok_or_else(overflow)?;

        let refusal = if prepare.amount > available_liquidity {
            Some(Rejection::new(
                ErrorCode::PAYER_FSP_INSUFFICIENT_LIQUIDITY,
                format!(
                    "amount {} exceeds the payer's available liquidity of {available_liquidity}",
                    prepare.amount
                ),
            ))
        } else if prepare.amount > available_limit {
            Some(Rejection::new(
                ErrorCode::PAYER_LIMIT_ERROR,
                format!(
                    "amount {} exceeds the payer's available net debit cap of {available_limit}",
                    prepare.amount
                ),
            ))
        } else {
            None
        };
        let state = if refusal.is_some() {
            TransferState::Rejected
        } else {
            TransferState::Reserved
        };
        if state == TransferState::Reserved {
            self.balance_mut(payer_position).reserved = new_reserved;
            self.expiry.insert((prepare.expiration_ms, transfer_id));
        }
        self.insert_transfer(
            transfer_id,
            Transfer {
                seq: 0,
                kind: TransferKind::Fspiop,
                debit: payer_position,
                credit: payee_position,
                amount: prepare.amount,
                condition: prepare.condition,
                expiration_ms: prepare.expiration_ms,
                prepared_at_ms: self.now_ms,
                request_hash: prepare.request_hash,
                state,
                reason: refusal.as_ref().map(|r| r.code),
                finish: None,
                fulfilment: None,
                memo: None,
                wire_version: prepare.wire_version,
            },
        );
        let transfer = self.view_of(transfer_id);
        Ok(match refusal {
            Some(error) => Outcome::Failed { transfer, error },
            None => Outcome::Transfer(transfer),
        })
    }

    fn insert_transfer(&mut self, transfer_id: TransferId, mut transfer: Transfer) {
        self.last_seq += 1;
        transfer.seq = self.last_seq;
        self.records.push(Record::Transfer(TransferRow {
            seq: transfer.seq,
            transfer_id,
            kind: transfer.kind,
            debit: transfer.debit,
            credit: transfer.credit,
            amount: transfer.amount,
            condition: transfer.condition,
            expiration_ms: transfer.expiration_ms,
            prepared_at_ms: transfer.prepared_at_ms,
            request_hash: transfer.request_hash,
            state: transfer.state,
            reason: transfer.reason,
            memo: transfer.memo.clone(),
            wire_version: transfer.wire_version,
        }));
        if transfer.kind == TransferKind::Fspiop && transfer.state.is_final() {
            self.retention.finished(self.now_ms, transfer_id);
        }
        let previous = self.transfers.insert(transfer_id, transfer);
        assert!(
            previous.is_none(),
            "transfer ids are checked for duplicates before insertion"
        );
    }

    /// Moves a reserved transfer to its final state: releases the hold on the
    /// debit account and, on commit, posts the amount from credit to debit.
    /// Checks every sum before changing anything.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &mut self,
        transfer_id: TransferId,
        kind: FinishKind,
        state: TransferState,
        reason: Option<ErrorCode>,
        cause: Option<AbortCause>,
        request_hash: RequestHash,
        fulfilment: Option<Fulfilment>,
    ) -> Result<TransferView, Rejection> {
        let transfer = &self.transfers[&transfer_id];
        assert_eq!(
            transfer.state,
            TransferState::Reserved,
            "only a reserved transfer can finish"
        );
        let (debit, credit, amount, expiration_ms) = (
            transfer.debit,
            transfer.credit,
            transfer.amount,
            transfer.expiration_ms,
        );
        let debit_account = self.account(debit);
        let released = debit_account
            .reserved
            .checked_sub(amount)
            .ok_or_else(overflow)?;
        assert!(
            !released.is_negative(),
            "a hold never exceeds what the account reserved"
        );
        let posted = if state == TransferState::Committed {
            let debit_value = debit_account
                .value
                .checked_add(amount)
                .ok_or_else(overflow)?;
            let credit_value = self
                .account(credit)
                .value
                .checked_sub(amount)
                .ok_or_else(overflow)?;
            Some((debit_value, credit_value))
        } else {
            None
        };
        // A committed FSPIOP transfer belongs to the window open now, in
        // this same step, so no close can race it; under a GROSS model it
        // also settles at once. Both are checked before anything changes.
        let settles = posted.is_some() && transfer.kind == TransferKind::Fspiop;
        let window_commit = match settles {
            true => Some(self.plan_window_commit(debit, credit, amount)?),
            false => None,
        };
        let gross = match settles {
            true => self.plan_gross(debit, credit, amount)?,
            false => None,
        };

        self.balance_mut(debit).reserved = released;
        if let Some((debit_value, credit_value)) = posted {
            assert_eq!(self.account(debit).currency, self.account(credit).currency);
            self.balance_mut(debit).value = debit_value;
            self.balance_mut(credit).value = credit_value;
        }
        let settlement_window = window_commit.and_then(|plan| self.apply_window_commit(plan, 1));
        if let Some(entries) = gross {
            self.post_entries(&entries, None, Some(transfer_id));
        }
        self.expiry.remove(&(expiration_ms, transfer_id));
        let now_ms = self.now_ms;
        let transfer = self
            .transfers
            .get_mut(&transfer_id)
            .expect("looked up above");
        transfer.state = state;
        transfer.reason = reason;
        transfer.fulfilment = fulfilment;
        transfer.finish = Some(Finish {
            kind,
            request_hash,
            at_ms: now_ms,
            settlement_window,
            cause,
        });
        let seq = transfer.seq;
        if transfer.kind == TransferKind::Fspiop {
            self.retention.finished(now_ms, transfer_id);
        }
        self.records.push(Record::Finish(FinishRow {
            seq,
            kind,
            state,
            reason,
            cause,
            finished_at_ms: now_ms,
            request_hash,
            fulfilment,
            settlement_window,
        }));
        Ok(self.view_of(transfer_id))
    }

    /// Finds a transfer that `caller` may finish as its payee.
    fn payee_transfer(
        &self,
        transfer_id: TransferId,
        caller: FspName,
    ) -> Result<&Transfer, Rejection> {
        let transfer = self.transfers.get(&transfer_id).ok_or_else(|| {
            Rejection::new(
                ErrorCode::TRANSFER_ID_NOT_FOUND,
                format!("transfer {transfer_id} not found"),
            )
        })?;
        if transfer.kind != TransferKind::Fspiop {
            return Err(validation(format!(
                "transfer {transfer_id} is a funds movement, not an FSPIOP transfer"
            )));
        }
        let payee = self
            .participant(self.account(transfer.credit).participant)
            .name;
        if payee != caller {
            return Err(Rejection::not_party(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                format!("'{caller}' is not the payee of transfer {transfer_id}"),
            ));
        }
        Ok(transfer)
    }

    fn fulfil(&mut self, fulfil: &Fulfil) -> Result<Outcome, Rejection> {
        let transfer_id = fulfil.transfer_id;
        let transfer = self.payee_transfer(transfer_id, fulfil.caller)?;
        if let Some(duplicate) = self.check_finish_duplicate(
            transfer_id,
            transfer,
            FinishKind::Fulfil,
            fulfil.request_hash,
        )? {
            return Ok(duplicate);
        }
        if transfer.state != TransferState::Reserved {
            return Err(Self::not_reserved(transfer_id, transfer.state));
        }
        let (hash, fulfilment) = (fulfil.request_hash, fulfil.fulfilment);
        let condition = transfer.condition;
        if self.now_ms >= transfer.expiration_ms {
            let code = ErrorCode::TRANSFER_EXPIRED;
            let view = self.finish(
                transfer_id,
                FinishKind::Fulfil,
                TransferState::Expired,
                Some(code),
                None,
                hash,
                None,
            )?;
            let error = Rejection::new(
                code,
                format!("transfer {transfer_id} was fulfilled at or after its expiration"),
            );
            return Ok(Outcome::Failed {
                transfer: view,
                error,
            });
        }
        if let Some(failed) =
            self.abort_unless_to_payer(transfer_id, FinishKind::Fulfil, fulfil.destination, hash)?
        {
            return Ok(failed);
        }
        let Some(fulfilment) = fulfilment.filter(|f| f.condition() == condition) else {
            return self.abort_by_hub(
                transfer_id,
                FinishKind::Fulfil,
                AbortCause::InvalidFulfilment,
                hash,
            );
        };
        let view = self.finish(
            transfer_id,
            FinishKind::Fulfil,
            TransferState::Committed,
            None,
            None,
            hash,
            Some(fulfilment),
        )?;
        Ok(Outcome::Transfer(view))
    }

    fn abort(&mut self, abort: &Abort) -> Result<Outcome, Rejection> {
        let transfer_id = abort.transfer_id;
        let transfer = self.payee_transfer(transfer_id, abort.caller)?;
        if let Some(duplicate) = self.check_finish_duplicate(
            transfer_id,
            transfer,
            FinishKind::Abort,
            abort.request_hash,
        )? {
            return Ok(duplicate);
        }
        if transfer.state != TransferState::Reserved {
            return Err(Self::not_reserved(transfer_id, transfer.state));
        }
        if let Some(failed) = self.abort_unless_to_payer(
            transfer_id,
            FinishKind::Abort,
            abort.destination,
            abort.request_hash,
        )? {
            return Ok(failed);
        }
        if !abort.error_code.is_valid() {
            return Err(validation(format!(
                "error code {} is not an FSPIOP error code",
                abort.error_code.0
            )));
        }
        let view = self.finish(
            transfer_id,
            FinishKind::Abort,
            TransferState::Aborted,
            Some(abort.error_code),
            None,
            abort.request_hash,
            None,
        )?;
        Ok(Outcome::Transfer(view))
    }

    /// The payee's message about a reserved transfer named another
    /// FSPIOP-Destination than the payer: central-ledger aborts the
    /// transfer (3100) rather than let the payer miss its outcome. `None`:
    /// addressed to the payer, or to nobody.
    fn abort_unless_to_payer(
        &mut self,
        transfer_id: TransferId,
        kind: FinishKind,
        destination: Option<FspName>,
        request_hash: RequestHash,
    ) -> Result<Option<Outcome>, Rejection> {
        let Some(destination) = destination else {
            return Ok(None);
        };
        let debit = self.transfers[&transfer_id].debit;
        let payer = self.participant(self.account(debit).participant).name;
        if payer == destination {
            return Ok(None);
        }
        let cause = AbortCause::DestinationNotPayer;
        self.abort_by_hub(transfer_id, kind, cause, request_hash)
            .map(Some)
    }

    /// Aborts a reserved transfer for the payee's faulty message (3100 with
    /// `cause`): its final state, told to the payer as the refusal.
    fn abort_by_hub(
        &mut self,
        transfer_id: TransferId,
        kind: FinishKind,
        cause: AbortCause,
        request_hash: RequestHash,
    ) -> Result<Outcome, Rejection> {
        let code = ErrorCode::GENERIC_VALIDATION_ERROR;
        let view = self.finish(
            transfer_id,
            kind,
            TransferState::Aborted,
            Some(code),
            Some(cause),
            request_hash,
            None,
        )?;
        Ok(Outcome::Failed {
            transfer: view,
            error: Rejection::new(code, cause.description()),
        })
    }

    fn get_transfer(&self, transfer_id: TransferId, caller: FspName) -> Result<Outcome, Rejection> {
        let view = self.read_transfer(transfer_id)?;
        if caller != view.payer && caller != view.payee {
            return Err(Rejection::not_party(
                ErrorCode::GENERIC_CLIENT_ERROR,
                format!("'{caller}' is neither the payer nor the payee of transfer {transfer_id}"),
            ));
        }
        Ok(Outcome::Transfer(view))
    }

    /// A transfer in memory, without the parties' check.
    fn read_transfer(&self, transfer_id: TransferId) -> Result<TransferView, Rejection> {
        let transfer = self.transfers.get(&transfer_id).ok_or_else(|| {
            Rejection::new(
                ErrorCode::TRANSFER_ID_NOT_FOUND,
                format!("transfer {transfer_id} not found"),
            )
        })?;
        Ok(self.view(transfer_id, transfer))
    }

    fn expire(&mut self) -> Outcome {
        let mut expired = Vec::new();
        while let Some(&(expiration_ms, transfer_id)) = self.expiry.first() {
            if expiration_ms > self.now_ms {
                break;
            }
            let code = Some(ErrorCode::TRANSFER_EXPIRED);
            match self.finish(
                transfer_id,
                FinishKind::Expiry,
                TransferState::Expired,
                code,
                None,
                RequestHash::default(),
                None,
            ) {
                Ok(view) => expired.push(view),
                // Releasing a hold cannot overflow; should it, keep the
                // transfer reserved rather than spin on it.
                Err(_) => {
                    self.expiry.remove(&(expiration_ms, transfer_id));
                }
            }
        }
        Outcome::Expired(expired)
    }

    // ----- funds in and out -----------------------------------------------

    /// The participant's SETTLEMENT account named in a funds command, with
    /// the hub's reconciliation account in the same currency.
    fn funds_accounts(&self, funds: &Funds) -> Result<(AccountId, AccountId), Rejection> {
        let (_, account) = self.owned_account(funds.participant, funds.account)?;
        let settlement = self.account(account);
        if settlement.kind != AccountKind::Settlement {
            return Err(validation(format!(
                "account {} is a {} account, not SETTLEMENT",
                account.0,
                settlement.kind.as_str()
            )));
        }
        if settlement.currency != funds.currency {
            return Err(validation(format!(
                "account {} holds {}, not {}",
                account.0, settlement.currency, funds.currency
            )));
        }
        if !settlement.active {
            return Err(validation(format!("account {} is inactive", account.0)));
        }
        if !funds.amount.is_valid_transfer_amount() {
            return Err(validation(
                "amount must be above 0, with at most 18 integer digits and 4 decimals",
            ));
        }
        let reconciliation = self.hub_accounts(funds.currency).ok_or_else(|| {
            Rejection::new(
                ErrorCode::ADD_PARTY_INFORMATION_ERROR,
                format!("the hub has no {} accounts", funds.currency),
            )
        })?;
        Ok((account, reconciliation))
    }

    fn funds_in(&mut self, funds: &Funds) -> Result<Outcome, Rejection> {
        if let Some(duplicate) =
            self.check_new_transfer(funds.transfer_id, funds.request_hash, funds.new_id())?
        {
            return Ok(duplicate);
        }
        let (settlement, reconciliation) = self.funds_accounts(funds)?;
        // Funds in: HUB_RECONCILIATION +X, the DFSP's SETTLEMENT −X.
        let debit_value = self
            .account(reconciliation)
            .value
            .checked_add(funds.amount)
            .ok_or_else(overflow)?;
        let credit_value = self
            .account(settlement)
            .value
            .checked_sub(funds.amount)
            .ok_or_else(overflow)?;
        self.balance_mut(reconciliation).value = debit_value;
        self.balance_mut(settlement).value = credit_value;
        self.insert_funds(
            funds,
            TransferKind::FundsIn,
            reconciliation,
            settlement,
            TransferState::Committed,
        );
        Ok(Outcome::Transfer(self.view_of(funds.transfer_id)))
    }

    fn funds_out_reserve(&mut self, funds: &Funds) -> Result<Outcome, Rejection> {
        if let Some(duplicate) =
            self.check_new_transfer(funds.transfer_id, funds.request_hash, funds.new_id())?
        {
            return Ok(duplicate);
        }
        let (settlement, reconciliation) = self.funds_accounts(funds)?;
        let account = self.account(settlement);
        let new_reserved = account
            .reserved
            .checked_add(funds.amount)
            .ok_or_else(overflow)?;
        let balance_after = account
            .value
            .checked_add(new_reserved)
            .ok_or_else(overflow)?;
        if balance_after.is_positive() {
            let available = account
                .value
                .checked_add(account.reserved)
                .and_then(Amount::checked_neg)
                .ok_or_else(overflow)?;
            return Err(Rejection::new(
                ErrorCode::PAYER_FSP_INSUFFICIENT_LIQUIDITY,
                format!(
                    "funds out of {} exceeds the {available} available in settlement account {}",
                    funds.amount, settlement.0
                ),
            ));
        }
        self.balance_mut(settlement).reserved = new_reserved;
        self.insert_funds(
            funds,
            TransferKind::FundsOut,
            settlement,
            reconciliation,
            TransferState::Reserved,
        );
        Ok(Outcome::Transfer(self.view_of(funds.transfer_id)))
    }

    fn insert_funds(
        &mut self,
        funds: &Funds,
        kind: TransferKind,
        debit: AccountId,
        credit: AccountId,
        state: TransferState,
    ) {
        self.insert_transfer(
            funds.transfer_id,
            Transfer {
                seq: 0,
                kind,
                debit,
                credit,
                amount: funds.amount,
                condition: Condition::default(),
                expiration_ms: i64::MAX,
                prepared_at_ms: self.now_ms,
                request_hash: funds.request_hash,
                state,
                reason: None,
                finish: None,
                fulfilment: None,
                memo: Some(Box::new(funds.memo.clone())),
                wire_version: 0,
            },
        );
    }

    fn funds_out_finish(
        &mut self,
        command: &FundsFinish,
        kind: FinishKind,
    ) -> Result<Outcome, Rejection> {
        let transfer_id = command.transfer_id;
        let (_, account) = self.owned_account(command.participant, command.account)?;
        let transfer = self.transfers.get(&transfer_id).ok_or_else(|| {
            Rejection::new(
                ErrorCode::TRANSFER_ID_NOT_FOUND,
                format!("transfer {transfer_id} not found"),
            )
        })?;
        if transfer.kind != TransferKind::FundsOut || transfer.debit != account {
            return Err(validation(format!(
                "transfer {transfer_id} is not a funds out of account {}",
                account.0
            )));
        }
        if let Some(duplicate) =
            self.check_finish_duplicate(transfer_id, transfer, kind, command.request_hash)?
        {
            return Ok(duplicate);
        }
        if transfer.state != TransferState::Reserved {
            return Err(Self::not_reserved(transfer_id, transfer.state));
        }
        let state = if kind == FinishKind::Fulfil {
            TransferState::Committed
        } else {
            TransferState::Aborted
        };
        let view = self.finish(
            transfer_id,
            kind,
            state,
            None,
            None,
            command.request_hash,
            None,
        )?;
        Ok(Outcome::Transfer(view))
    }

    // ----- invariants -------------------------------------------------------

    /// Double entry and holds: per currency the posted values sum to zero,
    /// and no account holds a negative reservation. O(accounts).
    pub fn check_balances(&self) -> Result<(), String> {
        let mut sums: HashMap<Currency, Amount> = HashMap::new();
        for (i, account) in self.accounts.iter().enumerate() {
            let sum = sums.entry(account.currency).or_default();
            *sum = sum
                .checked_add(account.value)
                .ok_or("balance sum overflows")?;
            if account.reserved.is_negative() {
                return Err(format!(
                    "account {} holds a negative reservation {}",
                    i + 1,
                    account.reserved
                ));
            }
        }
        match sums.into_iter().find(|(_, sum)| *sum != Amount::ZERO) {
            Some((currency, sum)) => Err(format!("{currency} accounts sum to {sum}, not 0")),
            None => Ok(()),
        }
    }

    /// The whole state as rows, in a canonical order: what the store holds
    /// after every batch so far has been committed.
    pub fn snapshot(&self) -> Snapshot {
        let participants = self
            .participants
            .iter()
            .enumerate()
            .map(|(i, p)| participant_row(ParticipantId(i as u32 + 1), p))
            .collect();
        let accounts = self
            .accounts
            .iter()
            .enumerate()
            .map(|(i, a)| account_row(AccountId(i as u32 + 1), a))
            .collect();
        let mut transfers = Vec::with_capacity(self.transfers.len());
        let mut finishes = Vec::new();
        for (&transfer_id, transfer) in self.transfers.iter() {
            let initial_state = if transfer.finish.is_some() {
                TransferState::Reserved
            } else {
                transfer.state
            };
            transfers.push(TransferRow {
                seq: transfer.seq,
                transfer_id,
                kind: transfer.kind,
                debit: transfer.debit,
                credit: transfer.credit,
                amount: transfer.amount,
                condition: transfer.condition,
                expiration_ms: transfer.expiration_ms,
                prepared_at_ms: transfer.prepared_at_ms,
                request_hash: transfer.request_hash,
                state: initial_state,
                reason: if transfer.finish.is_some() {
                    None
                } else {
                    transfer.reason
                },
                memo: transfer.memo.clone(),
                wire_version: transfer.wire_version,
            });
            if let Some(finish) = transfer.finish {
                finishes.push(FinishRow {
                    seq: transfer.seq,
                    kind: finish.kind,
                    state: transfer.state,
                    reason: transfer.reason,
                    cause: finish.cause,
                    finished_at_ms: finish.at_ms,
                    request_hash: finish.request_hash,
                    fulfilment: transfer.fulfilment,
                    settlement_window: finish.settlement_window,
                });
            }
        }
        transfers.sort_unstable_by_key(|row| row.seq);
        finishes.sort_unstable_by_key(|row| row.seq);
        let mut endpoints: Vec<EndpointRow> = self
            .participants
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                p.endpoints
                    .iter()
                    .map(move |(endpoint_type, value)| EndpointRow {
                        participant: ParticipantId(i as u32 + 1),
                        endpoint_type: endpoint_type.clone(),
                        value: value.clone(),
                    })
            })
            .collect();
        endpoints.sort();
        let mut parties: Vec<PartyRow> = self
            .parties
            .iter()
            .map(|(key, entry)| PartyRow {
                key: key.clone(),
                fsp: entry.fsp,
                currency: entry.currency,
                registered_at_ms: entry.registered_at_ms,
            })
            .collect();
        parties.sort_by(|a, b| a.key.cmp(&b.key));
        Snapshot {
            parties,
            oracles: self.oracles.clone(),
            quotes: {
                let mut quotes: Vec<QuoteRow> = self.quotes.values().cloned().collect();
                quotes.sort_by_key(|row| row.quote_id);
                quotes
            },
            endpoints,
            settlement_models: self.settlement_models.clone(),
            participants,
            accounts,
            transfers,
            finishes,
            windows: self.book.windows.clone(),
            content: self.book.content.clone(),
            content_accounts: self.book.content_accounts.concat(),
            content_pairs: self.book.content_pairs.concat(),
            settlements: self.book.settlements.clone(),
            entries: self.book.entries.clone(),
            audit_events: self.audit_events.iter().cloned().collect(),
            certificate_pins: self.pin_rows(),
            // Evicted transfers are the store's to give; a snapshot holds
            // what is in memory.
            archived: Default::default(),
        }
    }

    /// Rebuilds the ledger from stored rows. The rows are audited first; a
    /// store that does not add up is refused rather than served.
    pub fn restore(snapshot: Snapshot, limits: Limits) -> Result<Ledger, String> {
        let problems = snapshot.audit();
        if !problems.is_empty() {
            let shown: Vec<_> = problems.iter().take(10).map(String::as_str).collect();
            return Err(format!(
                "the store does not add up ({} problems; run `kasi audit`): {}",
                problems.len(),
                shown.join("; ")
            ));
        }
        let mut ledger = Ledger::new(limits);
        let mut now_ms = i64::MIN;
        for row in snapshot.participants {
            now_ms = now_ms.max(row.created_at_ms);
            if row.is_hub {
                ledger.hub = Some(row.id);
            }
            ledger.participant_by_name.insert(row.name, row.id);
            ledger.participants.push(Participant {
                name: row.name,
                is_hub: row.is_hub,
                active: row.active,
                created_at_ms: row.created_at_ms,
                accounts: Vec::new(),
                endpoints: Vec::new(),
                dirty: false,
            });
        }
        for row in snapshot.accounts {
            now_ms = now_ms.max(row.created_at_ms).max(row.changed_at_ms);
            ledger.participants[index(row.participant.0)]
                .accounts
                .push(row.id);
            ledger.accounts.push(Account {
                participant: row.participant,
                currency: row.currency,
                kind: row.kind,
                active: row.active,
                value: row.value,
                reserved: row.reserved,
                net_debit_cap: row.net_debit_cap,
                created_at_ms: row.created_at_ms,
                changed_at_ms: row.changed_at_ms,
                dirty: false,
            });
        }
        for endpoint in snapshot.endpoints {
            let participant = &mut ledger.participants[index(endpoint.participant.0)];
            participant
                .endpoints
                .push((endpoint.endpoint_type, endpoint.value));
        }
        ledger.settlement_models = snapshot.settlement_models;
        ledger.oracles = snapshot.oracles;
        if ledger.limits.transfer_retention_ms.is_some() {
            let quotes = snapshot.quotes.iter();
            ledger.retention.restored_quotes(
                quotes
                    .map(|row| (row.received_at_ms, row.quote_id))
                    .collect(),
            );
        }
        ledger.quotes = snapshot
            .quotes
            .into_iter()
            .map(|row| (row.quote_id, row))
            .collect();
        for row in snapshot.parties {
            let entry = PartyEntry {
                fsp: row.fsp,
                currency: row.currency,
                registered_at_ms: row.registered_at_ms,
            };
            ledger.parties.insert(row.key, entry);
        }
        // Settlement: windows and their frozen content as stored; the open
        // window's running sums from the commits recorded in it.
        let open_window = snapshot
            .windows
            .last()
            .filter(|w| w.state == WindowState::Open)
            .map(|w| w.id);
        // The open window's commits, summed per (payer, payee) pair in the
        // order the pairs first committed (a million pushes and as many
        // window updates were a sixth of a restart's rebuild).
        let mut open_commits = OpenCommits::default();
        ledger.book.windows = snapshot.windows;
        for row in &snapshot.content {
            let of = |content: u32| content == row.id;
            ledger.book.content_accounts.push(
                snapshot
                    .content_accounts
                    .iter()
                    .filter(|a| of(a.content))
                    .cloned()
                    .collect(),
            );
            ledger.book.content_pairs.push(
                snapshot
                    .content_pairs
                    .iter()
                    .filter(|p| of(p.content))
                    .cloned()
                    .collect(),
            );
        }
        ledger.book.content = snapshot.content;
        ledger.book.settlements = snapshot.settlements;
        ledger.book.entries = snapshot.entries;
        if let Some(event) = snapshot.audit_events.last() {
            now_ms = now_ms.max(event.at_ms);
        }
        ledger.restore_audit(snapshot.audit_events, snapshot.certificate_pins);
        let mut finishes = snapshot.finishes.into_iter().peekable();
        let mut restored_finished = Vec::with_capacity(snapshot.transfers.len());
        ledger.transfers.reserve(snapshot.transfers.len());
        for row in snapshot.transfers {
            now_ms = now_ms.max(row.prepared_at_ms);
            let mut transfer = Transfer {
                seq: row.seq,
                kind: row.kind,
                debit: row.debit,
                credit: row.credit,
                amount: row.amount,
                condition: row.condition,
                expiration_ms: row.expiration_ms,
                prepared_at_ms: row.prepared_at_ms,
                request_hash: row.request_hash,
                state: row.state,
                reason: row.reason,
                finish: None,
                fulfilment: None,
                memo: row.memo,
                wire_version: row.wire_version,
            };
            // Both lists are in seq order (the audit checked it).
            if let Some(finish) = finishes.next_if(|finish| finish.seq == row.seq) {
                now_ms = now_ms.max(finish.finished_at_ms);
                transfer.state = finish.state;
                transfer.reason = finish.reason;
                transfer.fulfilment = finish.fulfilment;
                transfer.finish = Some(Finish {
                    kind: finish.kind,
                    request_hash: finish.request_hash,
                    at_ms: finish.finished_at_ms,
                    settlement_window: finish.settlement_window,
                    cause: finish.cause,
                });
                if finish.settlement_window.is_some() && finish.settlement_window == open_window {
                    open_commits.add(row.debit, row.credit, row.amount);
                }
                if row.kind == TransferKind::Fspiop {
                    restored_finished.push((finish.finished_at_ms, row.transfer_id));
                }
            } else if row.kind == TransferKind::Fspiop && row.state.is_final() {
                restored_finished.push((row.prepared_at_ms, row.transfer_id));
            }
            if transfer.state == TransferState::Reserved && transfer.kind == TransferKind::Fspiop {
                ledger
                    .expiry
                    .insert((transfer.expiration_ms, row.transfer_id));
            }
            ledger.last_seq = row.seq;
            ledger.transfers.insert(row.transfer_id, transfer);
        }
        let archived = snapshot.archived;
        ledger.last_seq = ledger.last_seq.max(archived.last_seq);
        if archived.transfers > 0 {
            now_ms = now_ms.max(archived.last_at_ms);
        }
        ledger.retention.restored(restored_finished);
        for (debit, credit, amount, commits) in open_commits.pairs {
            ledger.restore_window_commits(debit, credit, amount, commits);
        }
        for pair in archived.open_window_pairs {
            ledger.restore_window_commits(pair.debit, pair.credit, pair.amount, pair.commits);
        }
        for entry in &ledger.book.entries {
            now_ms = now_ms.max(entry.at_ms);
        }
        ledger.now_ms = now_ms;
        if ledger.hub.is_some() {
            ledger.ensure_window(false);
        }
        Ok(ledger)
    }
}

/// Commits in the open window, summed per (payer, payee) pair for
/// [`Ledger::restore`].
#[derive(Default)]
struct OpenCommits {
    pairs: Vec<(AccountId, AccountId, Amount, u64)>,
    at: HashMap<(AccountId, AccountId), usize>,
}

impl OpenCommits {
    fn add(&mut self, debit: AccountId, credit: AccountId, amount: Amount) {
        let next = self.pairs.len();
        let at = *self.at.entry((debit, credit)).or_insert(next);
        if at == next {
            self.pairs.push((debit, credit, Amount::ZERO, 0));
        }
        let pair = &mut self.pairs[at];
        match pair.2.checked_add(amount) {
            Some(sum) => {
                pair.2 = sum;
                pair.3 += 1;
            }
            // A sum the audit let through but that does not fit: counted
            // on its own (as before the sums).
            None => {
                self.at.insert((debit, credit), self.pairs.len());
                self.pairs.push((debit, credit, amount, 1));
            }
        }
    }
}

fn check_party_key(key: &PartyKey) -> Result<(), Rejection> {
    let part_ok = |text: &str| {
        !text.is_empty() && text.len() <= PARTY_ID_MAX_LEN && !text.chars().any(char::is_control)
    };
    if part_ok(&key.id_type)
        && part_ok(&key.identifier)
        && key.sub_id.as_deref().is_none_or(part_ok)
    {
        return Ok(());
    }
    Err(validation(format!(
        "party type, identifier and sub-id must be 1-{PARTY_ID_MAX_LEN} printable characters"
    )))
}

/// An oracle's party id type (A-Z, 0-9, `_`) and its endpoint: an
/// `http://` or `https://` URL of printable characters without spaces.
pub(crate) fn check_oracle_fields(id_type: &str, endpoint: &str) -> Result<(), Rejection> {
    let type_ok = !id_type.is_empty()
        && id_type.len() <= ORACLE_ID_TYPE_MAX_LEN
        && id_type
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if !type_ok {
        return Err(validation(format!(
            "oracle id type must be 1-{ORACLE_ID_TYPE_MAX_LEN} characters of A-Z, 0-9 and _"
        )));
    }
    let host = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or("");
    let endpoint_ok = endpoint.len() <= ORACLE_ENDPOINT_MAX_LEN
        && !host.is_empty()
        && !host.starts_with('/')
        && endpoint.bytes().all(|b| b.is_ascii_graphic());
    if !endpoint_ok {
        return Err(validation(format!(
            "oracle endpoint must be an http:// or https:// URL of at most {ORACLE_ENDPOINT_MAX_LEN} printable characters without spaces"
        )));
    }
    Ok(())
}

/// Ids are 1-based (as Mojaloop's); the vectors are 0-based.
fn index(id: u32) -> usize {
    id as usize - 1
}

fn participant_row(id: ParticipantId, participant: &Participant) -> ParticipantRow {
    ParticipantRow {
        id,
        name: participant.name,
        is_hub: participant.is_hub,
        active: participant.active,
        created_at_ms: participant.created_at_ms,
    }
}

fn account_row(id: AccountId, account: &Account) -> AccountRow {
    AccountRow {
        id,
        participant: account.participant,
        currency: account.currency,
        kind: account.kind,
        active: account.active,
        value: account.value,
        reserved: account.reserved,
        net_debit_cap: account.net_debit_cap,
        created_at_ms: account.created_at_ms,
        changed_at_ms: account.changed_at_ms,
    }
}
