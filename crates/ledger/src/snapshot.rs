//! The ledger's state as rows, and the audit that recomputes every balance
//! from the recorded transfers and compares.

use std::collections::{HashMap, HashSet};

use crate::amount::Amount;
use crate::ids::{Currency, FspName, TransferId};
use crate::model::*;
use crate::registry::check_oracle_fields;

/// Every row the store holds: what recovery reads and `kasi audit` checks.
/// Each list is in id (or seq) order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub participants: Vec<ParticipantRow>,
    pub accounts: Vec<AccountRow>,
    pub transfers: Vec<TransferRow>,
    pub finishes: Vec<FinishRow>,
    /// In (participant, type) order.
    pub endpoints: Vec<EndpointRow>,
    /// In id order.
    pub settlement_models: Vec<SettlementModelRow>,
    /// The built-in oracle, in key order.
    pub parties: Vec<PartyRow>,
    /// External oracles, in id order, deleted ones included (inactive).
    pub oracles: Vec<OracleRow>,
    /// The proxy map, in DFSP name order.
    pub proxy_map: Vec<ProxyMapRow>,
    /// Quotes of the persistent mode, in id order.
    pub quotes: Vec<QuoteRow>,
    /// Settlement windows, in id order.
    pub windows: Vec<WindowRow>,
    /// Windows' content, in id order, with its frozen sums (in content,
    /// then account order) and bilateral pairs (content, payer, payee).
    pub content: Vec<ContentRow>,
    pub content_accounts: Vec<ContentAccountRow>,
    pub content_pairs: Vec<ContentPairRow>,
    /// Settlements, in id order, each with its accounts.
    pub settlements: Vec<SettlementRow>,
    /// Settlement's posted movements, in seq order.
    pub entries: Vec<EntryRow>,
    /// The newest audit events (at most [`AUDIT_EVENTS_IN_MEMORY`]), in id
    /// order.
    pub audit_events: Vec<AuditEventRow>,
    /// Pinned client certificates, in fingerprint order.
    pub certificate_pins: Vec<PinRow>,
    /// The FXPs' acceptances of the conversions loaded, in seq order.
    pub conversion_fulfils: Vec<ConversionFulfilRow>,
    /// Declared FXPs, in participant order.
    pub fxps: Vec<FxpRow>,
    /// Four-eyes pending changes (decided ones too), in id order.
    pub pending_changes: Vec<PendingChangeRow>,
    /// Transfers the store holds but did not load (finished before the
    /// retention horizon), summed; empty when everything was loaded.
    pub archived: Archived,
}

/// Transfers finished before the retention horizon, read by the store in
/// one streaming pass instead of loaded: what the audit and recovery need
/// of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Archived {
    /// How many.
    pub transfers: u64,
    /// What their commits moved, per account (an account's sum of debits
    /// minus credits), in account order.
    pub values: Vec<(crate::ids::AccountId, Amount)>,
    /// The highest seq among them, and their latest instant.
    pub last_seq: u64,
    pub last_at_ms: i64,
    /// Their commits in the open settlement window, summed per (payer's,
    /// payee's) position account, in that order: the window's running sums
    /// count them.
    pub open_window_pairs: Vec<WindowPairSum>,
}

/// Commits of one payer account to one payee account in a settlement window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowPairSum {
    pub debit: crate::ids::AccountId,
    pub credit: crate::ids::AccountId,
    pub amount: Amount,
    pub commits: u64,
}

#[derive(Clone, Copy, Default)]
struct Recomputed {
    value: Amount,
    reserved: Amount,
}

impl Snapshot {
    /// Recomputes every account's value and reservation from the transfers
    /// and their finishes, and checks the rows' own consistency. Returns one
    /// line per problem; empty means the store adds up.
    pub fn audit(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut problem = |text: String| {
            if problems.len() < 1000 {
                problems.push(text);
            }
        };

        let mut names: HashSet<FspName> = HashSet::new();
        let mut hubs = 0;
        for (i, row) in self.participants.iter().enumerate() {
            if row.id.0 as usize != i + 1 {
                problem(format!("participant row {} has id {}", i + 1, row.id.0));
            }
            if !names.insert(row.name) {
                problem(format!("participant name '{}' appears twice", row.name));
            }
            hubs += usize::from(row.is_hub);
            if row.is_hub && row.is_proxy {
                problem(format!("the hub '{}' is marked as a proxy", row.name));
            }
        }
        if hubs > 1 {
            problem(format!("{hubs} participants are marked as the hub"));
        }
        let mut previous: Option<FspName> = None;
        for entry in &self.proxy_map {
            if previous.is_some_and(|previous| previous >= entry.dfsp) {
                problem(format!(
                    "proxy map entry '{}' is out of order or duplicated",
                    entry.dfsp
                ));
            }
            previous = Some(entry.dfsp);
            if names.contains(&entry.dfsp) {
                problem(format!(
                    "participant '{}' is also in the proxy map",
                    entry.dfsp
                ));
            }
            match self
                .participants
                .get((entry.proxy.0 as usize).wrapping_sub(1))
            {
                Some(proxy) if proxy.is_proxy => {}
                _ => problem(format!(
                    "proxy map entry '{}' names participant {}, not a proxy",
                    entry.dfsp, entry.proxy.0
                )),
            }
        }
        if self.proxy_map.len() > PROXY_MAP_MAX {
            problem(format!(
                "the proxy map's {} entries exceed its limit",
                self.proxy_map.len()
            ));
        }
        for pin in &self.certificate_pins {
            if self
                .participants
                .get((pin.participant.0 as usize).wrapping_sub(1))
                .is_none()
            {
                problem(format!(
                    "a certificate is pinned to missing participant {}",
                    pin.participant.0
                ));
            }
        }
        for pair in self.audit_events.windows(2) {
            if pair[1].id <= pair[0].id {
                problem(format!(
                    "audit event {} follows audit event {}",
                    pair[1].id, pair[0].id
                ));
            }
        }

        let mut keys = HashSet::new();
        for (i, row) in self.accounts.iter().enumerate() {
            if row.id.0 as usize != i + 1 {
                problem(format!("account row {} has id {}", i + 1, row.id.0));
            }
            match self
                .participants
                .get((row.participant.0 as usize).wrapping_sub(1))
            {
                None => problem(format!(
                    "account {} belongs to missing participant {}",
                    row.id.0, row.participant.0
                )),
                Some(owner) if owner.is_hub != row.kind.is_hub() => problem(format!(
                    "account {} is {} but belongs to '{}'",
                    row.id.0,
                    row.kind.as_str(),
                    owner.name
                )),
                Some(_) => {}
            }
            if !keys.insert((row.participant, row.currency, row.kind)) {
                problem(format!(
                    "account {} duplicates another {} {} account",
                    row.id.0,
                    row.currency,
                    row.kind.as_str()
                ));
            }
            if row.reserved.is_negative() {
                problem(format!(
                    "account {} has a negative reservation {}",
                    row.id.0, row.reserved
                ));
            }
            if row.net_debit_cap.is_some() && row.kind != AccountKind::Position {
                problem(format!(
                    "account {} is {} but has a net debit cap",
                    row.id.0,
                    row.kind.as_str()
                ));
            }
        }

        for pair in self.endpoints.windows(2) {
            if (pair[0].participant, &pair[0].endpoint_type)
                >= (pair[1].participant, &pair[1].endpoint_type)
            {
                problem(format!(
                    "endpoints of participant {} are duplicated or out of order",
                    pair[1].participant.0
                ));
            }
        }
        for endpoint in &self.endpoints {
            if self
                .participants
                .get((endpoint.participant.0 as usize).wrapping_sub(1))
                .is_none()
            {
                problem(format!(
                    "endpoint {} belongs to missing participant {}",
                    endpoint.endpoint_type, endpoint.participant.0
                ));
            }
        }
        for pair in self.parties.windows(2) {
            if pair[0].key >= pair[1].key {
                problem(format!(
                    "party {} is duplicated or out of order",
                    pair[1].key
                ));
            }
        }
        for party in &self.parties {
            match self
                .participants
                .get((party.fsp.0 as usize).wrapping_sub(1))
            {
                Some(owner) if !owner.is_hub => {}
                _ => problem(format!(
                    "party {} is held by participant {}, which cannot hold parties",
                    party.key, party.fsp.0
                )),
            }
        }
        for pair in self.quotes.windows(2) {
            if pair[0].quote_id >= pair[1].quote_id {
                problem(format!(
                    "quote {} is duplicated or out of order",
                    pair[1].quote_id
                ));
            }
        }
        for quote in &self.quotes {
            let known = |id: crate::ids::ParticipantId| {
                self.participants
                    .get((id.0 as usize).wrapping_sub(1))
                    .is_some()
            };
            if !known(quote.payer) || !known(quote.payee) {
                problem(format!(
                    "quote {} names a missing participant",
                    quote.quote_id
                ));
            }
        }
        let mut model_names = HashSet::new();
        for (i, model) in self.settlement_models.iter().enumerate() {
            if model.id as usize != i + 1 || !model_names.insert(model.name.as_str()) {
                problem(format!(
                    "settlement model row {} ('{}') is out of order or duplicated",
                    i + 1,
                    model.name
                ));
            }
        }
        let mut live_oracles = HashMap::new();
        let mut default_oracles = HashMap::new();
        for (i, oracle) in self.oracles.iter().enumerate() {
            if oracle.id as usize != i + 1 {
                problem(format!("oracle row {} has id {}", i + 1, oracle.id));
            }
            if let Err(rejection) = check_oracle_fields(&oracle.id_type, &oracle.endpoint) {
                problem(format!("oracle {}: {}", oracle.id, rejection.description));
            }
            if !oracle.active {
                continue;
            }
            let key = (oracle.id_type.as_str(), oracle.currency);
            if let Some(other) = live_oracles.insert(key, oracle.id) {
                problem(format!(
                    "oracles {other} and {} serve the same id type and currency",
                    oracle.id
                ));
            }
            if oracle.is_default {
                if let Some(other) = default_oracles.insert(oracle.id_type.as_str(), oracle.id) {
                    problem(format!(
                        "oracles {other} and {} are both the default for {}",
                        oracle.id, oracle.id_type
                    ));
                }
            }
        }
        if live_oracles.len() > ORACLES_MAX || self.oracles.len() > ORACLE_IDS_MAX {
            problem(format!(
                "{} oracles ({} live) exceed the limits",
                self.oracles.len(),
                live_oracles.len()
            ));
        }

        let mut recomputed = vec![Recomputed::default(); self.accounts.len()];
        let mut ids: HashSet<TransferId> = HashSet::with_capacity(self.transfers.len());
        let mut previous_seq = 0;
        for row in &self.transfers {
            if row.seq <= previous_seq {
                problem(format!(
                    "transfer seq {} follows seq {previous_seq}",
                    row.seq
                ));
            }
            previous_seq = row.seq;
            if !ids.insert(row.transfer_id) {
                problem(format!("transfer {} appears twice", row.transfer_id));
            }
            if let Err(text) = self.check_transfer_accounts(row) {
                problem(format!("transfer {}: {text}", row.transfer_id));
                continue;
            }
            if !row.amount.is_valid_transfer_amount() {
                problem(format!(
                    "transfer {} has amount {}",
                    row.transfer_id, row.amount
                ));
            }
            let expected_first_state = match row.kind {
                TransferKind::Fspiop | TransferKind::FxConversion => {
                    matches!(row.state, TransferState::Reserved | TransferState::Rejected)
                }
                TransferKind::FundsIn => row.state == TransferState::Committed,
                TransferKind::FundsOut => row.state == TransferState::Reserved,
            };
            if !expected_first_state {
                problem(format!(
                    "transfer {} was recorded as {}",
                    row.transfer_id,
                    row.state.as_str()
                ));
            }
        }

        let mut finished = vec![None; self.transfers.len()];
        let mut previous_seq = 0;
        for finish in &self.finishes {
            if finish.seq <= previous_seq {
                problem(format!(
                    "finish for seq {} follows seq {previous_seq}",
                    finish.seq
                ));
            }
            previous_seq = finish.seq;
            match self
                .transfers
                .binary_search_by_key(&finish.seq, |row| row.seq)
            {
                Err(_) => problem(format!("finish for seq {} has no transfer", finish.seq)),
                Ok(i) if self.transfers[i].state != TransferState::Reserved => problem(format!(
                    "transfer {} finished although it was never reserved",
                    self.transfers[i].transfer_id
                )),
                Ok(_) if !finish.state.is_final() => problem(format!(
                    "finish for seq {} leaves the transfer RESERVED",
                    finish.seq
                )),
                Ok(i) => finished[i] = Some(finish.state),
            }
        }

        self.audit_fx(&finished, &mut problem);

        for (row, finish) in self.transfers.iter().zip(&finished) {
            if self.check_transfer_accounts(row).is_err() {
                continue;
            }
            let debit = row.debit.0 as usize - 1;
            let credit = row.credit.0 as usize - 1;
            let state = finish.unwrap_or(row.state);
            let ok = match state {
                TransferState::Committed => {
                    add(&mut recomputed[debit].value, row.amount)
                        && add(&mut recomputed[credit].value, negate(row.amount))
                }
                TransferState::Reserved => add(&mut recomputed[debit].reserved, row.amount),
                TransferState::Aborted | TransferState::Expired | TransferState::Rejected => true,
            };
            if !ok {
                problem(format!("balances overflow at transfer {}", row.transfer_id));
            }
        }

        // Archived transfers, summed by the store.
        for &(account, value) in &self.archived.values {
            match recomputed.get_mut((account.0 as usize).wrapping_sub(1)) {
                None => problem(format!(
                    "archived transfers move missing account {}",
                    account.0
                )),
                Some(computed) => {
                    if !add(&mut computed.value, value) {
                        problem(format!(
                            "balances overflow at archived account {}",
                            account.0
                        ));
                    }
                }
            }
        }
        // Settlement's entries post like committed transfers.
        for (i, entry) in self.entries.iter().enumerate() {
            if entry.seq != i as u64 + 1 {
                problem(format!("entry row {} has seq {}", i + 1, entry.seq));
            }
            let (Some(debit), Some(credit)) = (
                self.accounts.get((entry.debit.0 as usize).wrapping_sub(1)),
                self.accounts.get((entry.credit.0 as usize).wrapping_sub(1)),
            ) else {
                problem(format!("entry {} names a missing account", entry.seq));
                continue;
            };
            if debit.currency != credit.currency || !entry.amount.is_positive() {
                problem(format!(
                    "entry {} moves {} between {} and {} accounts",
                    entry.seq, entry.amount, debit.currency, credit.currency
                ));
                continue;
            }
            let (d, c) = (entry.debit.0 as usize - 1, entry.credit.0 as usize - 1);
            if !(add(&mut recomputed[d].value, entry.amount)
                && add(&mut recomputed[c].value, negate(entry.amount)))
            {
                problem(format!("balances overflow at entry {}", entry.seq));
            }
        }
        for (i, window) in self.windows.iter().enumerate() {
            if window.id as usize != i + 1 {
                problem(format!("window row {} has id {}", i + 1, window.id));
            }
        }
        for (i, settlement) in self.settlements.iter().enumerate() {
            if settlement.id as usize != i + 1 {
                problem(format!("settlement row {} has id {}", i + 1, settlement.id));
            }
            let mut nets: HashMap<Currency, Amount> = HashMap::new();
            for account in &settlement.accounts {
                if !add(nets.entry(account.currency).or_default(), account.net) {
                    problem(format!("settlement {} nets overflow", settlement.id));
                }
            }
            for (currency, net) in nets {
                if net != Amount::ZERO {
                    problem(format!(
                        "settlement {}: {currency} nets sum to {net}, not 0",
                        settlement.id
                    ));
                }
            }
        }

        let mut sums: HashMap<Currency, Amount> = HashMap::new();
        for (row, computed) in self.accounts.iter().zip(&recomputed) {
            if row.value != computed.value || row.reserved != computed.reserved {
                problem(format!(
                    "account {} ({} {} of participant {}) records value {} reserved {}, but its transfers give value {} reserved {}",
                    row.id.0,
                    row.currency,
                    row.kind.as_str(),
                    row.participant.0,
                    row.value,
                    row.reserved,
                    computed.value,
                    computed.reserved
                ));
            }
            if !add(sums.entry(row.currency).or_default(), row.value) {
                problem(format!("{} balances overflow", row.currency));
            }
        }
        let mut unbalanced: Vec<_> = sums
            .into_iter()
            .filter(|(_, sum)| *sum != Amount::ZERO)
            .collect();
        unbalanced.sort();
        for (currency, sum) in unbalanced {
            problem(format!("{currency} accounts sum to {sum}, not 0"));
        }
        problems
    }

    /// Conversions and their dependent transfers: the links are well
    /// formed, and a linked pair both loaded never ends apart (committed
    /// together, or neither). `finished[i]` is the final state of
    /// `self.transfers[i]`, if it finished.
    fn audit_fx(&self, finished: &[Option<TransferState>], problem: &mut impl FnMut(String)) {
        let by_id: HashMap<TransferId, usize> = self
            .transfers
            .iter()
            .enumerate()
            .filter(|(_, row)| row.fx.is_some())
            .map(|(i, row)| (row.transfer_id, i))
            .collect();
        let state_of = |i: usize| finished[i].unwrap_or(self.transfers[i].state);
        for (&id, &i) in &by_id {
            let row = &self.transfers[i];
            match (row.kind, row.fx) {
                (TransferKind::FxConversion, Some(FxLink::Conversion(terms))) => {
                    if !terms.target_amount.is_valid_transfer_amount() {
                        problem(format!(
                            "conversion {id} converts into {}",
                            terms.target_amount
                        ));
                    }
                    let source = self
                        .accounts
                        .get((row.debit.0 as usize).wrapping_sub(1))
                        .map(|a| a.currency);
                    if source == Some(terms.target_currency) {
                        problem(format!("conversion {id} converts a currency into itself"));
                    }
                }
                (
                    TransferKind::Fspiop,
                    Some(FxLink::Dependent {
                        commit_request_id,
                        payer,
                    }),
                ) => {
                    if self
                        .participants
                        .get((payer.0 as usize).wrapping_sub(1))
                        .is_none()
                    {
                        problem(format!(
                            "transfer {id} is paid by missing participant {}",
                            payer.0
                        ));
                    }
                    let Some(&conversion) = by_id.get(&commit_request_id) else {
                        continue; // archived, or not loaded
                    };
                    let linked = matches!(
                        self.transfers[conversion].fx,
                        Some(FxLink::Conversion(terms)) if terms.determining_transfer_id == id
                    );
                    if !linked {
                        problem(format!(
                            "transfer {id} depends on {commit_request_id}, not its conversion"
                        ));
                        continue;
                    }
                    let (mine, theirs) = (state_of(i), state_of(conversion));
                    let committed = TransferState::Committed;
                    let reserved = TransferState::Reserved;
                    let apart = (mine == committed) != (theirs == committed)
                        || (mine == reserved) != (theirs == reserved);
                    if apart {
                        problem(format!(
                            "transfer {id} is {} but its conversion {commit_request_id} is {}",
                            mine.as_str(),
                            theirs.as_str()
                        ));
                    }
                }
                _ => problem(format!(
                    "{} {id} carries the wrong FX link",
                    row.kind.as_str()
                )),
            }
        }
        for fulfil in &self.conversion_fulfils {
            let conversion = self
                .transfers
                .binary_search_by_key(&fulfil.seq, |row| row.seq)
                .ok()
                .map(|i| &self.transfers[i]);
            if conversion.is_some_and(|row| row.kind != TransferKind::FxConversion) {
                problem(format!(
                    "seq {} is accepted by an FXP but is no conversion",
                    fulfil.seq
                ));
            }
        }
    }

    fn check_transfer_accounts(&self, row: &TransferRow) -> Result<(), String> {
        let account = |id: crate::ids::AccountId| {
            self.accounts
                .get((id.0 as usize).wrapping_sub(1))
                .ok_or_else(|| format!("account {} does not exist", id.0))
        };
        let (debit, credit) = (account(row.debit)?, account(row.credit)?);
        if row.debit == row.credit || debit.currency != credit.currency {
            return Err(format!(
                "moves between accounts {} and {}",
                row.debit.0, row.credit.0
            ));
        }
        let expected = match row.kind {
            TransferKind::Fspiop | TransferKind::FxConversion => {
                (AccountKind::Position, AccountKind::Position)
            }
            TransferKind::FundsIn => (AccountKind::HubReconciliation, AccountKind::Settlement),
            TransferKind::FundsOut => (AccountKind::Settlement, AccountKind::HubReconciliation),
        };
        if (debit.kind, credit.kind) != expected {
            return Err(format!(
                "a {} debits {} and credits {}",
                row.kind.as_str(),
                debit.kind.as_str(),
                credit.kind.as_str()
            ));
        }
        Ok(())
    }
}

fn add(total: &mut Amount, amount: Amount) -> bool {
    match total.checked_add(amount) {
        Some(sum) => {
            *total = sum;
            true
        }
        None => false,
    }
}

fn negate(amount: Amount) -> Amount {
    // Transfer amounts are at most 10^22, far from i128's edge.
    amount.checked_neg().unwrap_or(Amount::ZERO)
}
