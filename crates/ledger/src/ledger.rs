//! The state machine: participants, accounts, limits and transfers in memory,
//! changed only by [`Ledger::apply_batch`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::amount::Amount;
use crate::crypto::{Condition, Fulfilment, RequestHash};
use crate::error::{ErrorCode, Rejection};
use crate::ids::{AccountId, Currency, FspName, ParticipantId, TransferId};
use crate::model::*;
use crate::settlement::SettlementBook;
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
    /// stays bounded whatever the rate (~140 bytes each, `compact.rs`).
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
    pub(crate) is_proxy: bool,
    pub(crate) mode: ParticipantMode,
    pub(crate) created_at_ms: i64,
    pub(crate) accounts: Vec<AccountId>,
    /// (type, value), at most one per type.
    pub(crate) endpoints: Vec<(String, String)>,
    pub(crate) dirty: bool,
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
    pub(crate) dirty: bool,
}

#[derive(Clone, Copy)]
#[cfg_attr(test, derive(Debug, PartialEq))]
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

#[derive(Clone)]
#[cfg_attr(test, derive(Debug, PartialEq))]
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
    /// FX transfers only (boxed: most transfers are not).
    pub(crate) fx: Option<Box<FxSlot>>,
}

/// What a conversion or a dependent transfer holds beyond a transfer.
#[derive(Clone)]
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(crate) struct FxSlot {
    pub(crate) link: FxLink,
    /// A conversion the FXP accepted: its fulfilment, request hash and
    /// when, kept after the conversion ends (the transfer's own fulfilment
    /// is cleared by an abort).
    pub(crate) fxp_fulfil: Option<ConversionFulfilRow>,
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
    pub(crate) limits: Limits,
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
    /// DFSPs of other schemes and the proxy each is reached through
    /// (`proxies.rs`), at most [`PROXY_MAP_MAX`].
    pub(crate) proxy_map: BTreeMap<FspName, ProxyMapRow>,
    pub(crate) quotes: HashMap<TransferId, QuoteRow>,
    /// The latest conversion in memory for each determining transfer id:
    /// how a `POST /transfers` finds the conversion it depends on.
    pub(crate) conversions_by_determining: HashMap<TransferId, TransferId>,
    /// Declared FXPs and the corridors each serves.
    pub(crate) fxps: BTreeMap<ParticipantId, Vec<Corridor>>,
    /// Four-eyes pending changes, every one kept (decided ones too: they
    /// are few, one per sensitive admin request), by id.
    pub(crate) pending_changes: BTreeMap<String, PendingChangeRow>,
    /// Settlement windows, their content and settlements.
    pub(crate) book: SettlementBook,
    /// The newest audit events, oldest first (at most
    /// [`AUDIT_EVENTS_IN_MEMORY`]), and the last id given.
    pub(crate) audit_events: VecDeque<AuditEventRow>,
    pub(crate) last_audit_id: u64,
    /// Pinned client certificates: fingerprint → (participant, when).
    pub(crate) pins: BTreeMap<[u8; 32], (ParticipantId, i64)>,
    /// Eviction's counts, and the ids that left memory (see
    /// `retention.rs`; the finished transfers held are in `transfers`, in
    /// finishing order).
    pub(crate) retention: crate::retention::Retention,
    /// The store's answers for the batch being applied (`prefetch.rs`).
    pub(crate) prefetched: crate::prefetch::Prefetched,
    pub(crate) records: Vec<Record>,
    dirty_participants: Vec<ParticipantId>,
    dirty_accounts: Vec<AccountId>,
}

pub(crate) fn overflow() -> Rejection {
    Rejection::new(
        ErrorCode::INTERNAL_SERVER_ERROR,
        "amount arithmetic would overflow",
    )
}

pub(crate) fn modified_prepare(transfer_id: TransferId) -> Rejection {
    Rejection::new(
        ErrorCode::MODIFIED_REQUEST,
        format!("transfer {transfer_id} was received before with a different body"),
    )
}

pub(crate) fn validation(description: impl Into<String>) -> Rejection {
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
            proxy_map: BTreeMap::new(),
            quotes: HashMap::new(),
            conversions_by_determining: HashMap::new(),
            fxps: BTreeMap::new(),
            pending_changes: BTreeMap::new(),
            book: SettlementBook::default(),
            audit_events: VecDeque::new(),
            last_audit_id: 0,
            pins: BTreeMap::new(),
            retention: Default::default(),
            prefetched: Default::default(),
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
                self.create_participant(*name, *currency, false)
            }
            Command::CreateProxy { name, currency } => {
                self.create_participant(*name, *currency, true)
            }
            Command::MapProxy {
                dfsp,
                proxy,
                by_operator,
            } => self.map_proxy(*dfsp, *proxy, *by_operator),
            Command::UnmapProxy { dfsp, learnt_via } => self.unmap_proxy(*dfsp, *learnt_via),
            Command::SetParticipantActive { name, active } => {
                self.set_participant_mode(*name, ParticipantMode::from_active(*active))
            }
            Command::SetParticipantMode { name, mode } => self.set_participant_mode(*name, *mode),
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
            Command::Prepare(prepare) => self.prepare(prepare),
            Command::PrepareConversion(prepare) => self.prepare_conversion(prepare),
            Command::FulfilConversion(fulfil) => self.fulfil_conversion(fulfil),
            Command::AbortConversion(abort) => self.abort_conversion(abort),
            Command::SetFxpCorridors { name, corridors } => {
                self.set_fxp_corridors(*name, corridors)
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
            Command::KeepPendingChange(row) => {
                self.pending_changes.insert(row.id.clone(), (**row).clone());
                self.push_record(Record::PendingChange((**row).clone()));
                Ok(Outcome::Done)
            }
            Command::GetTransfer { .. }
            | Command::GetConversion { .. }
            | Command::ReadFxps
            | Command::ReadTransfer { .. }
            | Command::ReadSettlementWindows
            | Command::ReadSettlements
            | Command::ReadSettlementReport { .. }
            | Command::ReadParticipants { .. }
            | Command::ReadSettlementModels
            | Command::ReadOracles
            | Command::ReadProxyMap
            | Command::ReadAuditEvents(_)
            | Command::ReadPendingChanges
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
            Command::ReadTransfer { transfer_id } => self.read_transfer(*transfer_id),
            Command::GetConversion {
                commit_request_id,
                caller,
            } => self.get_conversion(*commit_request_id, *caller),
            Command::ReadFxps => Ok(self.read_fxps()),
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
            Command::ReadProxyMap => Ok(self.read_proxy_map()),
            Command::ReadAuditEvents(query) => Ok(self.read_audit_events(query)),
            Command::ReadPendingChanges => Ok(Outcome::PendingChanges(
                self.pending_changes.values().cloned().collect(),
            )),
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

    pub(crate) fn participant_id(&self, name: FspName) -> Result<ParticipantId, Rejection> {
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

    pub(crate) fn participant_mut(&mut self, id: ParticipantId) -> &mut Participant {
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
}

/// Ids are 1-based (as Mojaloop's); the vectors are 0-based.
pub(crate) fn index(id: u32) -> usize {
    id as usize - 1
}

pub(crate) fn participant_row(id: ParticipantId, participant: &Participant) -> ParticipantRow {
    ParticipantRow {
        id,
        name: participant.name,
        is_hub: participant.is_hub,
        is_proxy: participant.is_proxy,
        mode: participant.mode,
        created_at_ms: participant.created_at_ms,
    }
}

pub(crate) fn account_row(id: AccountId, account: &Account) -> AccountRow {
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
