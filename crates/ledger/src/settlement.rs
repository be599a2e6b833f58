//! Settlement inside the ledger: windows that collect committed transfers,
//! closed in one step (their running sums frozen into content, O(accounts));
//! settlements that net content and move through Mojaloop's stages in
//! lock-step, posting the position resets of `autoPositionReset`; abort;
//! kasi's one-step finalize; and continuous gross settlement at commit.
//!
//! Every movement is a posted entry (debit one account, credit another), so
//! the double-entry invariant holds at every stage and `kasi audit` checks
//! settlement like any transfer.

use std::collections::HashMap;

use crate::amount::Amount;
use crate::error::{ErrorCode, Rejection};
use crate::ids::{AccountId, Currency, ParticipantId, TransferId};
use crate::ledger::Ledger;
use crate::model::*;

/// One movement to post: why, debit, credit, how much.
pub(crate) type Posting = (EntryKind, AccountId, AccountId, Amount);

/// Running sums of one account in the open window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sums {
    sent: Amount,
    sent_count: u32,
    received: Amount,
    received_count: u32,
}

/// The open window's running sums: what closing it freezes.
#[derive(Default)]
pub(crate) struct OpenWindow {
    accounts: HashMap<AccountId, Sums>,
    pairs: HashMap<(AccountId, AccountId), (Amount, u32)>,
    commits: u64,
}

/// Windows, their content and settlements, as the ledger keeps them.
#[derive(Default)]
pub(crate) struct SettlementBook {
    /// Window `id` is at `id - 1`; the last one is open.
    pub(crate) windows: Vec<WindowRow>,
    pub(crate) open: OpenWindow,
    /// Content `id` is at `id - 1`.
    pub(crate) content: Vec<ContentRow>,
    pub(crate) content_accounts: Vec<Vec<ContentAccountRow>>,
    pub(crate) content_pairs: Vec<Vec<ContentPairRow>>,
    /// Settlement `id` is at `id - 1`.
    pub(crate) settlements: Vec<SettlementRow>,
    pub(crate) entries: Vec<EntryRow>,
    /// The first window of a store from before settlement: recorded with
    /// the next batch.
    pub(crate) window_unrecorded: bool,
}

/// A commit's effect on the open window, computed before anything changes.
pub(crate) struct WindowCommit {
    debit: (AccountId, Sums),
    credit: (AccountId, Sums),
    pair: ((AccountId, AccountId), (Amount, u32)),
}

/// Movements planned against the balances they will leave, so that a
/// command checks everything before it changes anything.
#[derive(Default)]
struct Postings {
    values: HashMap<AccountId, Amount>,
    entries: Vec<Posting>,
}

impl Postings {
    fn value(&self, ledger: &Ledger, account: AccountId) -> Amount {
        self.values
            .get(&account)
            .copied()
            .unwrap_or_else(|| ledger.account(account).value)
    }

    fn post(
        &mut self,
        ledger: &Ledger,
        kind: EntryKind,
        debit: AccountId,
        credit: AccountId,
        amount: Amount,
    ) -> Result<(), Rejection> {
        if amount == Amount::ZERO {
            return Ok(());
        }
        debug_assert!(amount.is_positive());
        let debit_value = self
            .value(ledger, debit)
            .checked_add(amount)
            .ok_or_else(overflow)?;
        let credit_value = self
            .value(ledger, credit)
            .checked_sub(amount)
            .ok_or_else(overflow)?;
        self.values.insert(debit, debit_value);
        self.values.insert(credit, credit_value);
        self.entries.push((kind, debit, credit, amount));
        Ok(())
    }
}

fn overflow() -> Rejection {
    Rejection::new(
        ErrorCode::INTERNAL_SERVER_ERROR,
        "amount arithmetic would overflow",
    )
}

fn invalid(description: impl Into<String>) -> Rejection {
    Rejection::new(ErrorCode::GENERIC_VALIDATION_ERROR, description)
}

fn settlement_not_found(id: u32) -> Rejection {
    invalid(format!("Settlement with ID '{id}' not found"))
}

/// Why a window listed in a new settlement has nothing that model may settle.
#[derive(PartialEq, Eq)]
enum Inapplicable {
    Missing,
    /// OPEN, or SETTLED.
    State(WindowState),
    /// Its content in the currency is held by a settlement, or settled.
    Taken(Currency, WindowState),
    /// Its content is of currencies other models settle (by name).
    OtherModels(Vec<(Currency, String)>),
    /// No content in the model's currency (or none at all).
    NoContent(Option<Currency>),
}

impl Inapplicable {
    /// What is wrong with one window (`plural`: with several).
    fn text(&self, plural: bool) -> String {
        let (is, its, has) = if plural {
            ("they are", "their", "they have")
        } else {
            ("it is", "its", "it has")
        };
        match self {
            Inapplicable::Missing if plural => "they do not exist".to_string(),
            Inapplicable::Missing => "it does not exist".to_string(),
            Inapplicable::State(state) => format!("{is} {}", state.as_str()),
            Inapplicable::Taken(currency, state) => {
                format!("{its} {currency} content is already {}", state.as_str())
            }
            Inapplicable::OtherModels(others) => others
                .iter()
                .map(|(currency, model)| {
                    format!("{its} {currency} content is settled by model {model}")
                })
                .collect::<Vec<_>>()
                .join(", "),
            Inapplicable::NoContent(Some(currency)) => format!("{has} no {currency} content"),
            Inapplicable::NoContent(None) => format!("{has} no content"),
        }
    }
}

/// `Inapplicable windows 2, 1` as central-settlement says it, then why, per
/// window (windows alike grouped): e.g. `…: their USD content is settled by
/// model DEFERREDNETUSD`, so an operator who picked the wrong model sees
/// which one applies.
fn inapplicable_text(windows: &[(u32, Inapplicable)]) -> String {
    let list = |ids: &[u32]| {
        ids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let all: Vec<u32> = windows.iter().map(|(id, _)| *id).collect();
    let mut groups: Vec<(&Inapplicable, Vec<u32>)> = Vec::new();
    for (id, why) in windows {
        match groups.iter_mut().find(|(other, _)| *other == why) {
            Some((_, ids)) => ids.push(*id),
            None => groups.push((why, vec![*id])),
        }
    }
    let reasons = match groups.as_slice() {
        [(why, ids)] => why.text(ids.len() > 1),
        _ => groups
            .iter()
            .map(|(why, ids)| {
                let noun = if ids.len() > 1 { "windows" } else { "window" };
                format!("{noun} {}: {}", list(ids), why.text(ids.len() > 1))
            })
            .collect::<Vec<_>>()
            .join("; "),
    };
    format!("Inapplicable windows {}: {reasons}", list(&all))
}

fn magnitude(amount: Amount) -> Amount {
    amount
        .checked_neg()
        .filter(|_| amount.is_negative())
        .unwrap_or(amount)
}

/// A window's state from its content's after a settlement's event (its
/// content SETTLED, or ABORTED and released): SETTLED only once every
/// content row is settled (central-settlement's roll-up), so a window whose
/// other currencies or models still wait stays PENDING_SETTLEMENT;
/// PENDING_SETTLEMENT while any is held by a settlement; else what the
/// event made it.
fn derived_window_state(content: &[&ContentRow], event: WindowState) -> WindowState {
    if !content.is_empty() && content.iter().all(|c| c.state == WindowState::Settled) {
        WindowState::Settled
    } else if event == WindowState::Settled
        || content
            .iter()
            .any(|c| c.state == WindowState::PendingSettlement)
    {
        WindowState::PendingSettlement
    } else {
        event
    }
}

/// A settlement's state from its accounts' (they advance in lock-step).
fn derived_settlement_state(accounts: &[SettlementAccountRow]) -> SettlementState {
    if accounts.is_empty() {
        return SettlementState::Settled;
    }
    let lowest = accounts
        .iter()
        .filter_map(|a| a.state.stage())
        .min()
        .unwrap_or(4);
    match lowest {
        0 => SettlementState::PendingSettlement,
        1 => SettlementState::PsTransfersRecorded,
        2 => SettlementState::PsTransfersReserved,
        3 if accounts.iter().any(|a| a.state == SettlementState::Settled) => {
            SettlementState::Settling
        }
        3 => SettlementState::PsTransfersCommitted,
        _ => SettlementState::Settled,
    }
}

/// The account state a request may set, given the settlement's state.
fn next_stage(settlement: SettlementState) -> Option<SettlementState> {
    match settlement {
        SettlementState::PendingSettlement => Some(SettlementState::PsTransfersRecorded),
        SettlementState::PsTransfersRecorded => Some(SettlementState::PsTransfersReserved),
        SettlementState::PsTransfersReserved => Some(SettlementState::PsTransfersCommitted),
        SettlementState::PsTransfersCommitted | SettlementState::Settling => {
            Some(SettlementState::Settled)
        }
        SettlementState::Settled | SettlementState::Aborted => None,
    }
}

impl Ledger {
    // ----- models -----------------------------------------------------------

    /// The model that settles `currency`'s POSITION movements: the one that
    /// names the currency, else the default (a deferred NET default first).
    pub(crate) fn model_for(&self, currency: Currency) -> Option<(u32, &ModelRules)> {
        fn usable(model: &SettlementModelRow) -> Option<(u32, &ModelRules)> {
            model
                .rules
                .as_ref()
                .filter(|rules| rules.ledger_account_type == AccountKind::Position)
                .map(|rules| (model.id, rules))
        }
        let models = || self.settlement_models.iter().filter_map(usable);
        models()
            .find(|(_, rules)| rules.currency == Some(currency))
            .or_else(|| {
                models().find(|(_, rules)| rules.currency.is_none() && rules.is_deferred_net())
            })
            .or_else(|| models().find(|(_, rules)| rules.currency.is_none()))
    }

    fn model_by_name(&self, name: &str) -> Option<&SettlementModelRow> {
        self.settlement_models.iter().find(|m| m.name == name)
    }

    // ----- windows ----------------------------------------------------------

    /// Opens window 1 if there is none (a new hub, or a store from before
    /// settlement).
    pub(crate) fn ensure_window(&mut self, record: bool) {
        if !self.book.windows.is_empty() {
            return;
        }
        let row = WindowRow {
            id: 1,
            state: WindowState::Open,
            reason: "initial window".to_string(),
            created_at_ms: self.now_ms,
            changed_at_ms: self.now_ms,
        };
        self.book.windows.push(row.clone());
        if record {
            self.push_record(Record::Window(row));
        } else {
            self.book.window_unrecorded = true;
        }
    }

    /// The window new commits go to.
    pub fn open_window_id(&self) -> Option<u32> {
        self.book
            .windows
            .last()
            .filter(|w| w.state == WindowState::Open)
            .map(|w| w.id)
    }

    /// What committing `amount` from `debit` to `credit` does to the open
    /// window, checked, changing nothing yet.
    pub(crate) fn plan_window_commit(
        &self,
        debit: AccountId,
        credit: AccountId,
        amount: Amount,
    ) -> Result<WindowCommit, Rejection> {
        self.plan_window_commits(debit, credit, amount, 1)
    }

    /// [`Self::plan_window_commit`] for `commits` commits moving `amount` in
    /// all.
    fn plan_window_commits(
        &self,
        debit: AccountId,
        credit: AccountId,
        amount: Amount,
        commits: u64,
    ) -> Result<WindowCommit, Rejection> {
        let open = &self.book.open;
        // Window counts are u32, as central-settlement's; they saturate.
        let count = u32::try_from(commits).unwrap_or(u32::MAX);
        let mut payer = open.accounts.get(&debit).copied().unwrap_or_default();
        payer.sent = payer.sent.checked_add(amount).ok_or_else(overflow)?;
        payer.sent_count = payer.sent_count.saturating_add(count);
        let mut payee = open.accounts.get(&credit).copied().unwrap_or_default();
        payee.received = payee.received.checked_add(amount).ok_or_else(overflow)?;
        payee.received_count = payee.received_count.saturating_add(count);
        let (pair_sum, pair_count) = open
            .pairs
            .get(&(debit, credit))
            .copied()
            .unwrap_or_default();
        Ok(WindowCommit {
            debit: (debit, payer),
            credit: (credit, payee),
            pair: (
                (debit, credit),
                (
                    pair_sum.checked_add(amount).ok_or_else(overflow)?,
                    pair_count.saturating_add(count),
                ),
            ),
        })
    }

    /// Applies a planned commit to the open window; its id.
    pub(crate) fn apply_window_commit(&mut self, plan: WindowCommit, commits: u64) -> Option<u32> {
        let open = &mut self.book.open;
        open.accounts.insert(plan.debit.0, plan.debit.1);
        open.accounts.insert(plan.credit.0, plan.credit.1);
        open.pairs.insert(plan.pair.0, plan.pair.1);
        open.commits += commits;
        self.open_window_id()
    }

    /// Recovery: recorded commits of the open window.
    pub(crate) fn restore_window_commits(
        &mut self,
        debit: AccountId,
        credit: AccountId,
        amount: Amount,
        commits: u64,
    ) {
        if let Ok(plan) = self.plan_window_commits(debit, credit, amount, commits) {
            self.apply_window_commit(plan, commits);
        }
    }

    /// Continuous gross settlement of a commit, if its currency's model is
    /// GROSS: the payer's and the payee's SETTLEMENT accounts move by the
    /// amount, their positions back. Planned (checked) before the commit
    /// changes anything.
    pub(crate) fn plan_gross(
        &self,
        payer_position: AccountId,
        payee_position: AccountId,
        amount: Amount,
    ) -> Result<Option<[Posting; 2]>, Rejection> {
        let currency = self.account(payer_position).currency;
        let Some((_, rules)) = self.model_for(currency) else {
            return Ok(None);
        };
        if rules.granularity != Granularity::Gross || rules.delay != Delay::Immediate {
            return Ok(None);
        }
        let settlement_of = |position: AccountId| {
            let participant = self.account(position).participant;
            self.find_account(participant, currency, rules.settlement_account_type)
        };
        let (Some(payer_settlement), Some(payee_settlement)) =
            (settlement_of(payer_position), settlement_of(payee_position))
        else {
            return Ok(None);
        };
        self.account(payer_settlement)
            .value
            .checked_add(amount)
            .ok_or_else(overflow)?;
        self.account(payee_settlement)
            .value
            .checked_sub(amount)
            .ok_or_else(overflow)?;
        Ok(Some([
            (
                EntryKind::GrossSettlement,
                payer_settlement,
                payer_position,
                amount,
            ),
            (
                EntryKind::GrossSettlement,
                payee_position,
                payee_settlement,
                amount,
            ),
        ]))
    }

    /// Posts entries whose arithmetic was checked.
    pub(crate) fn post_entries(
        &mut self,
        entries: &[Posting],
        settlement: Option<u32>,
        transfer: Option<TransferId>,
    ) {
        for &(kind, debit, credit, amount) in entries {
            let debit_value = self.account(debit).value.checked_add(amount);
            let credit_value = self.account(credit).value.checked_sub(amount);
            let (Some(debit_value), Some(credit_value)) = (debit_value, credit_value) else {
                unreachable!("entries are posted only after their arithmetic was checked");
            };
            self.balance_mut(debit).value = debit_value;
            self.balance_mut(credit).value = credit_value;
            let row = EntryRow {
                seq: self.book.entries.len() as u64 + 1,
                kind,
                debit,
                credit,
                amount,
                at_ms: self.now_ms,
                settlement,
                transfer,
            };
            self.book.entries.push(row.clone());
            self.push_record(Record::Entry(row));
        }
    }

    fn apply_postings(&mut self, postings: Postings, settlement: u32) {
        self.post_entries(&postings.entries, Some(settlement), None);
    }

    pub(crate) fn close_window(&mut self, id: u32, reason: &str) -> Result<Outcome, Rejection> {
        check_reason(reason)?;
        let Some(window) = self.book.windows.get(index(id)) else {
            return Err(invalid(format!("Window {id} does not exist")));
        };
        if window.state != WindowState::Open {
            return Err(invalid(format!("Window {id} is not open")));
        }
        if self.book.open.commits == 0 {
            return Err(invalid(format!("Window {id} is empty")));
        }
        let now = self.now_ms;
        let open = std::mem::take(&mut self.book.open);
        // Deterministic order whatever the maps' iteration order.
        let mut accounts: Vec<(AccountId, Sums)> = open.accounts.into_iter().collect();
        accounts.sort_unstable_by_key(|(account, _)| *account);
        let mut pairs: Vec<((AccountId, AccountId), (Amount, u32))> =
            open.pairs.into_iter().collect();
        pairs.sort_unstable_by_key(|(key, _)| *key);
        let mut currencies: Vec<Currency> = accounts
            .iter()
            .map(|(account, _)| self.account(*account).currency)
            .collect();
        currencies.sort_unstable();
        currencies.dedup();
        for currency in currencies {
            let Some((model, rules)) = self.model_for(currency) else {
                continue;
            };
            if !rules.is_deferred_net() {
                continue;
            }
            let content_id = self.book.content.len() as u32 + 1;
            let row = ContentRow {
                id: content_id,
                window: id,
                ledger_account_type: AccountKind::Position,
                currency,
                model,
                state: WindowState::Closed,
                settlement: None,
                created_at_ms: now,
                changed_at_ms: now,
            };
            let content_accounts: Vec<ContentAccountRow> = accounts
                .iter()
                .filter(|(account, _)| self.account(*account).currency == currency)
                .map(|(account, sums)| ContentAccountRow {
                    content: content_id,
                    account: *account,
                    sent: sums.sent,
                    sent_count: sums.sent_count,
                    received: sums.received,
                    received_count: sums.received_count,
                })
                .collect();
            let content_pairs: Vec<ContentPairRow> = pairs
                .iter()
                .filter(|((payer, _), _)| self.account(*payer).currency == currency)
                .map(|((payer, payee), (amount, count))| ContentPairRow {
                    content: content_id,
                    payer: *payer,
                    payee: *payee,
                    amount: *amount,
                    count: *count,
                })
                .collect();
            self.book.content.push(row.clone());
            self.push_record(Record::Content(row));
            self.push_record(Record::ContentAccounts(content_accounts.clone()));
            self.push_record(Record::ContentPairs(content_pairs.clone()));
            self.book.content_accounts.push(content_accounts);
            self.book.content_pairs.push(content_pairs);
        }
        let window = &mut self.book.windows[index(id)];
        window.state = WindowState::Closed;
        window.reason = reason.to_string();
        window.changed_at_ms = now;
        let closed = window.clone();
        self.push_record(Record::Window(closed));
        let next = WindowRow {
            id: id + 1,
            state: WindowState::Open,
            reason: reason.to_string(),
            created_at_ms: now,
            changed_at_ms: now,
        };
        self.book.windows.push(next.clone());
        self.push_record(Record::Window(next));
        Ok(Outcome::Window(self.window_view(id + 1)))
    }

    // ----- settlements ------------------------------------------------------

    pub(crate) fn create_settlement(
        &mut self,
        model_name: &str,
        reason: &str,
        windows: &[u32],
    ) -> Result<Outcome, Rejection> {
        check_reason(reason)?;
        let model = self
            .model_by_name(model_name)
            .ok_or_else(|| invalid(format!("Settlement model not found: {model_name}")))?;
        let model_id = model.id;
        let Some(rules) = model.rules.clone() else {
            return Err(invalid(format!(
                "Settlement model {model_name} has no usable definition"
            )));
        };
        if !rules.is_deferred_net() {
            return Err(invalid(
                "Settlement can not be created for GROSS or IMMEDIATE models",
            ));
        }
        if windows.is_empty() {
            return Err(invalid("settlementWindows must list at least one window"));
        }
        let mut seen = windows.to_vec();
        seen.sort_unstable();
        if seen.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(invalid("settlementWindows must not repeat a window"));
        }
        // Currencies another model names are not the default model's.
        let named: Vec<Currency> = self
            .settlement_models
            .iter()
            .filter_map(|m| m.rules.as_ref().and_then(|r| r.currency))
            .collect();
        let applies = |content: &ContentRow| {
            content.ledger_account_type == rules.ledger_account_type
                && match rules.currency {
                    Some(currency) => content.currency == currency,
                    None => !named.contains(&content.currency),
                }
                && matches!(content.state, WindowState::Closed | WindowState::Aborted)
        };
        let mut taken: Vec<u32> = Vec::new();
        let mut inapplicable: Vec<(u32, Inapplicable)> = Vec::new();
        for &window_id in windows {
            let window = self.book.windows.get(index(window_id));
            let settleable = window.is_some_and(|w| {
                matches!(
                    w.state,
                    WindowState::Closed | WindowState::Aborted | WindowState::PendingSettlement
                )
            });
            let content: Vec<u32> = self
                .book
                .content
                .iter()
                .filter(|c| c.window == window_id && applies(c))
                .map(|c| c.id)
                .collect();
            if !settleable || content.is_empty() {
                let why = match window {
                    None => Inapplicable::Missing,
                    Some(w) if !settleable => Inapplicable::State(w.state),
                    Some(_) => self.why_no_content(window_id, &rules),
                };
                inapplicable.push((window_id, why));
            }
            taken.extend(content);
        }
        if !inapplicable.is_empty() {
            return Err(invalid(inapplicable_text(&inapplicable)));
        }
        // Net per account over the content taken: sent minus received.
        let mut nets: HashMap<AccountId, Amount> = HashMap::new();
        for &content_id in &taken {
            for row in &self.book.content_accounts[index(content_id)] {
                let net = nets.entry(row.account).or_default();
                *net = net
                    .checked_add(row.sent)
                    .and_then(|n| n.checked_sub(row.received))
                    .ok_or_else(overflow)?;
            }
        }
        let mut accounts: Vec<(AccountId, Amount)> = nets.into_iter().collect();
        accounts.sort_unstable_by_key(|(account, _)| *account);
        let mut totals: HashMap<Currency, Amount> = HashMap::new();
        for (account, net) in &accounts {
            let total = totals.entry(self.account(*account).currency).or_default();
            *total = total.checked_add(*net).ok_or_else(overflow)?;
        }
        if let Some((currency, total)) = totals.iter().find(|(_, total)| **total != Amount::ZERO) {
            return Err(Rejection::new(
                ErrorCode::INTERNAL_SERVER_ERROR,
                format!("the windows' {currency} nets sum to {total}, not 0"),
            ));
        }
        if rules.auto_position_reset {
            for currency in totals.keys() {
                self.hub_account(*currency, AccountKind::HubMultilateralSettlement)?;
            }
        }

        let id = self.book.settlements.len() as u32 + 1;
        let now = self.now_ms;
        let row = SettlementRow {
            id,
            model: model_id,
            state: SettlementState::PendingSettlement,
            reason: reason.to_string(),
            external_reference: None,
            created_at_ms: now,
            changed_at_ms: now,
            windows: windows.to_vec(),
            accounts: accounts
                .iter()
                .map(|(account, net)| {
                    let position = self.account(*account);
                    SettlementAccountRow {
                        account: *account,
                        participant: position.participant,
                        currency: position.currency,
                        net: *net,
                        state: SettlementState::PendingSettlement,
                        reason: reason.to_string(),
                        external_reference: None,
                        changed_at_ms: now,
                    }
                })
                .collect(),
        };
        for content_id in taken {
            let content = &mut self.book.content[index(content_id)];
            content.state = WindowState::PendingSettlement;
            content.settlement = Some(id);
            content.changed_at_ms = now;
            let record = Record::Content(content.clone());
            self.push_record(record);
        }
        for &window_id in windows {
            let window = &mut self.book.windows[index(window_id)];
            if window.state != WindowState::PendingSettlement {
                window.state = WindowState::PendingSettlement;
                window.reason = reason.to_string();
                window.changed_at_ms = now;
                let record = Record::Window(window.clone());
                self.push_record(record);
            }
        }
        self.book.settlements.push(row.clone());
        self.push_record(Record::Settlement(row));
        Ok(Outcome::Settlement(self.settlement_view(id)))
    }

    /// Why a closed window has no content a model may settle: its content
    /// is another settlement's (or settled), or of currencies other models
    /// settle, or there is none.
    fn why_no_content(&self, window: u32, rules: &ModelRules) -> Inapplicable {
        let content: Vec<&ContentRow> = self
            .book
            .content
            .iter()
            .filter(|c| c.window == window && c.ledger_account_type == rules.ledger_account_type)
            .collect();
        match rules.currency {
            Some(currency) => match content.iter().find(|c| c.currency == currency) {
                Some(held) => Inapplicable::Taken(held.currency, held.state),
                None => Inapplicable::NoContent(Some(currency)),
            },
            None => {
                if let Some(held) = content
                    .iter()
                    .find(|c| self.model_naming(c.currency).is_none())
                {
                    return Inapplicable::Taken(held.currency, held.state);
                }
                let others: Vec<(Currency, String)> = content
                    .iter()
                    .filter_map(|c| Some((c.currency, self.model_naming(c.currency)?.to_string())))
                    .collect();
                if others.is_empty() {
                    Inapplicable::NoContent(None)
                } else {
                    Inapplicable::OtherModels(others)
                }
            }
        }
    }

    /// The model that names `currency`, which the default model leaves it to.
    fn model_naming(&self, currency: Currency) -> Option<&str> {
        self.settlement_models
            .iter()
            .find(|m| {
                m.rules
                    .as_ref()
                    .is_some_and(|r| r.currency == Some(currency))
            })
            .map(|m| m.name.as_str())
    }

    fn hub_account(&self, currency: Currency, kind: AccountKind) -> Result<AccountId, Rejection> {
        self.hub
            .and_then(|hub| self.find_account(hub, currency, kind))
            .ok_or_else(|| {
                invalid(format!(
                    "the hub has no {} account in {currency}",
                    kind.as_str()
                ))
            })
    }

    fn settlement_rules(&self, settlement: &SettlementRow) -> ModelRules {
        self.settlement_models[index(settlement.model)]
            .rules
            .clone()
            .expect("a settlement's model had rules when it was created")
    }

    /// Plans the position reset an account's move to `target` makes.
    fn plan_reset(
        &self,
        postings: &mut Postings,
        rules: &ModelRules,
        account: &SettlementAccountRow,
        target: SettlementState,
    ) -> Result<(), Rejection> {
        if !rules.auto_position_reset {
            return Ok(());
        }
        let hmlns = || self.hub_account(account.currency, AccountKind::HubMultilateralSettlement);
        match target {
            // Recipients (owed, net < 0) are reset when reserved.
            SettlementState::PsTransfersReserved if account.net.is_negative() => postings.post(
                self,
                EntryKind::RecipientReset,
                account.account,
                hmlns()?,
                magnitude(account.net),
            ),
            // Senders (owing, net > 0) when committed.
            SettlementState::PsTransfersCommitted if account.net.is_positive() => postings.post(
                self,
                EntryKind::SenderReset,
                hmlns()?,
                account.account,
                account.net,
            ),
            _ => Ok(()),
        }
    }

    pub(crate) fn update_settlement(
        &mut self,
        id: u32,
        changes: &[AccountChange],
    ) -> Result<Outcome, Rejection> {
        let settlement = self
            .book
            .settlements
            .get(index(id))
            .ok_or_else(|| settlement_not_found(id))?;
        let rules = self.settlement_rules(settlement);
        let allowed = next_stage(settlement.state);
        let mut accounts = settlement.accounts.clone();
        let mut results = Vec::with_capacity(changes.len());
        let mut postings = Postings::default();
        let mut touched: Vec<u32> = Vec::new();
        let now = self.now_ms;
        for change in changes {
            let error = (|| {
                if let Err(rejection) = check_reason(&change.reason) {
                    return Some(rejection.description);
                }
                let Some(position) = accounts.iter().position(|a| a.account.0 == change.account)
                else {
                    return Some("Account not found".to_string());
                };
                if accounts[position].participant.0 != change.participant {
                    return Some("Participant and account mismatch".to_string());
                }
                if touched.contains(&change.account) {
                    return Some("Account already processed once".to_string());
                }
                let current = accounts[position].state;
                let target = SettlementState::parse(&change.state);
                let permitted = target.is_some_and(|target| {
                    target == current && target.stage().is_some() || Some(target) == allowed
                });
                if !permitted {
                    return Some("State change not allowed".to_string());
                }
                let target = target.expect("permitted only when parsed");
                if target != current {
                    let before = postings.entries.len();
                    if let Err(rejection) =
                        self.plan_reset(&mut postings, &rules, &accounts[position], target)
                    {
                        postings.entries.truncate(before);
                        return Some(rejection.description);
                    }
                }
                touched.push(change.account);
                let account = &mut accounts[position];
                account.state = target;
                account.reason = change.reason.clone();
                if change.external_reference.is_some() {
                    account.external_reference = change.external_reference.clone();
                }
                account.changed_at_ms = now;
                None
            })();
            results.push(AccountChangeResult {
                participant: change.participant,
                account: change.account,
                error,
            });
        }
        let changed_windows = if touched.is_empty() {
            Vec::new()
        } else {
            self.apply_postings(postings, id);
            let state = derived_settlement_state(&accounts);
            let settlement = &mut self.book.settlements[index(id)];
            settlement.accounts = accounts;
            settlement.changed_at_ms = now;
            settlement.state = state;
            let windows = settlement.windows.clone();
            let record = Record::Settlement(settlement.clone());
            self.push_record(record);
            if state == SettlementState::Settled {
                self.roll_up(id, WindowState::Settled)
            } else {
                windows
            }
        };
        Ok(Outcome::SettlementUpdated {
            settlement: self.settlement_view(id),
            results,
            changed_windows,
        })
    }

    /// Moves a settlement's content to `state` (SETTLED, or ABORTED and
    /// released) and its windows to what their content makes them.
    fn roll_up(&mut self, id: u32, state: WindowState) -> Vec<u32> {
        let now = self.now_ms;
        let mut records = Vec::new();
        for content in &mut self.book.content {
            if content.settlement == Some(id) && content.state == WindowState::PendingSettlement {
                content.state = state;
                if state == WindowState::Aborted {
                    content.settlement = None;
                }
                content.changed_at_ms = now;
                records.push(Record::Content(content.clone()));
            }
        }
        let windows = self.book.settlements[index(id)].windows.clone();
        for &window_id in &windows {
            let content: Vec<&ContentRow> = self
                .book
                .content
                .iter()
                .filter(|c| c.window == window_id)
                .collect();
            let new_state = derived_window_state(&content, state);
            let window = &mut self.book.windows[index(window_id)];
            if window.state != new_state {
                window.state = new_state;
                window.changed_at_ms = now;
                records.push(Record::Window(window.clone()));
            }
        }
        for record in records {
            self.push_record(record);
        }
        windows
    }

    pub(crate) fn abort_settlement(
        &mut self,
        id: u32,
        reason: &str,
        external_reference: Option<&str>,
    ) -> Result<Outcome, Rejection> {
        check_reason(reason)?;
        let settlement = self
            .book
            .settlements
            .get(index(id))
            .ok_or_else(|| settlement_not_found(id))?;
        match settlement.state {
            SettlementState::PsTransfersCommitted
            | SettlementState::Settling
            | SettlementState::Settled => {
                return Err(invalid(format!(
                    "State change is not allowed: settlement {id} is {}",
                    settlement.state.as_str()
                )))
            }
            _ if settlement
                .accounts
                .iter()
                .any(|a| a.state == SettlementState::PsTransfersCommitted) =>
            {
                return Err(invalid(format!(
                    "At least one settlement transfer is committed in settlement {id}"
                )))
            }
            _ => {}
        }
        let rules = self.settlement_rules(settlement);
        let already_aborted = settlement.state == SettlementState::Aborted;
        let mut postings = Postings::default();
        if rules.auto_position_reset && !already_aborted {
            for account in &settlement.accounts {
                if account.state == SettlementState::PsTransfersReserved
                    && account.net.is_negative()
                {
                    let hmlns =
                        self.hub_account(account.currency, AccountKind::HubMultilateralSettlement)?;
                    postings.post(
                        self,
                        EntryKind::ResetReversal,
                        hmlns,
                        account.account,
                        magnitude(account.net),
                    )?;
                }
            }
        }
        let now = self.now_ms;
        self.apply_postings(postings, id);
        let settlement = &mut self.book.settlements[index(id)];
        settlement.state = SettlementState::Aborted;
        settlement.reason = reason.to_string();
        if let Some(reference) = external_reference {
            settlement.external_reference = Some(reference.to_string());
        }
        settlement.changed_at_ms = now;
        for account in &mut settlement.accounts {
            account.state = SettlementState::Aborted;
            account.reason = reason.to_string();
            account.changed_at_ms = now;
        }
        let record = Record::Settlement(settlement.clone());
        self.push_record(record);
        if !already_aborted {
            self.roll_up(id, WindowState::Aborted);
        }
        Ok(Outcome::Settlement(self.settlement_view(id)))
    }

    pub(crate) fn finalize_settlement(
        &mut self,
        id: u32,
        reason: &str,
        external_reference: Option<&str>,
    ) -> Result<Outcome, Rejection> {
        check_reason(reason)?;
        let settlement = self
            .book
            .settlements
            .get(index(id))
            .ok_or_else(|| settlement_not_found(id))?;
        if settlement
            .accounts
            .iter()
            .any(|a| a.state.stage().is_none_or(|stage| stage >= 3))
            || settlement.state == SettlementState::Aborted
        {
            return Err(invalid(format!(
                "Settlement {id} is {}: only a settlement none of whose accounts is committed can be finalized",
                settlement.state.as_str()
            )));
        }
        let rules = self.settlement_rules(settlement);
        let mut postings = Postings::default();
        for account in &settlement.accounts {
            let stage = account.state.stage().unwrap_or(0);
            if stage < 2 {
                self.plan_reset(
                    &mut postings,
                    &rules,
                    account,
                    SettlementState::PsTransfersReserved,
                )?;
            }
            let participant = account.participant;
            let liquidity = self
                .find_account(participant, account.currency, rules.settlement_account_type)
                .ok_or_else(|| {
                    invalid(format!(
                        "participant {} has no {} account in {}",
                        self.participant(participant).name,
                        rules.settlement_account_type.as_str(),
                        account.currency
                    ))
                })?;
            if account.net != Amount::ZERO {
                let reconciliation =
                    self.hub_account(account.currency, AccountKind::HubReconciliation)?;
                if account.net.is_positive() {
                    // A net sender pays: its liquidity must cover the net.
                    let held = self.account(liquidity).reserved;
                    let after = postings
                        .value(self, liquidity)
                        .checked_add(held)
                        .and_then(|v| v.checked_add(account.net))
                        .ok_or_else(overflow)?;
                    if after.is_positive() {
                        return Err(Rejection::new(
                            ErrorCode::PAYER_FSP_INSUFFICIENT_LIQUIDITY,
                            format!(
                                "participant {} cannot pay its net {} {}: its liquidity is short by {after}",
                                self.participant(participant).name,
                                account.net,
                                account.currency
                            ),
                        ));
                    }
                    postings.post(
                        self,
                        EntryKind::FinalizeFundsOut,
                        liquidity,
                        reconciliation,
                        account.net,
                    )?;
                } else {
                    postings.post(
                        self,
                        EntryKind::FinalizeFundsIn,
                        reconciliation,
                        liquidity,
                        magnitude(account.net),
                    )?;
                }
            }
            self.plan_reset(
                &mut postings,
                &rules,
                account,
                SettlementState::PsTransfersCommitted,
            )?;
        }
        let now = self.now_ms;
        self.apply_postings(postings, id);
        let settlement = &mut self.book.settlements[index(id)];
        settlement.state = SettlementState::Settled;
        settlement.reason = reason.to_string();
        if let Some(reference) = external_reference {
            settlement.external_reference = Some(reference.to_string());
        }
        settlement.changed_at_ms = now;
        for account in &mut settlement.accounts {
            account.state = SettlementState::Settled;
            account.reason = reason.to_string();
            if let Some(reference) = external_reference {
                account.external_reference = Some(reference.to_string());
            }
            account.changed_at_ms = now;
        }
        let record = Record::Settlement(settlement.clone());
        self.push_record(record);
        self.roll_up(id, WindowState::Settled);
        Ok(Outcome::Settlement(self.settlement_view(id)))
    }

    // ----- views ------------------------------------------------------------

    pub(crate) fn window_view(&self, id: u32) -> WindowView {
        let row = self.book.windows[index(id)].clone();
        let content: Vec<ContentRow> = self
            .book
            .content
            .iter()
            .filter(|c| c.window == id)
            .cloned()
            .collect();
        let accounts: Vec<AccountId> = if row.state == WindowState::Open {
            self.book.open.accounts.keys().copied().collect()
        } else {
            content
                .iter()
                .flat_map(|c| self.book.content_accounts[index(c.id)].iter())
                .map(|a| a.account)
                .collect()
        };
        let mut participants: Vec<ParticipantId> = accounts
            .iter()
            .map(|a| self.account(*a).participant)
            .collect();
        participants.sort_unstable();
        participants.dedup();
        let mut currencies: Vec<Currency> =
            accounts.iter().map(|a| self.account(*a).currency).collect();
        currencies.sort_unstable();
        currencies.dedup();
        WindowView {
            row,
            content,
            participants,
            currencies,
        }
    }

    pub(crate) fn settlement_view(&self, id: u32) -> SettlementView {
        let row = self.book.settlements[index(id)].clone();
        let model_name = self.settlement_models[index(row.model)].name.clone();
        let windows = row.windows.iter().map(|&w| self.window_view(w)).collect();
        SettlementView {
            row,
            model_name,
            windows,
        }
    }

    pub(crate) fn read_windows(&self) -> Outcome {
        Outcome::SettlementWindows(
            (1..=self.book.windows.len() as u32)
                .map(|id| self.window_view(id))
                .collect(),
        )
    }

    pub(crate) fn read_settlements(&self) -> Outcome {
        Outcome::Settlements(
            (1..=self.book.settlements.len() as u32)
                .map(|id| self.settlement_view(id))
                .collect(),
        )
    }

    pub(crate) fn settlement_report(&self, id: u32) -> Result<Outcome, Rejection> {
        let settlement = self
            .book
            .settlements
            .get(index(id))
            .ok_or_else(|| settlement_not_found(id))?;
        let content: Vec<u32> = self
            .book
            .content
            .iter()
            .filter(|c| c.settlement == Some(id))
            .map(|c| c.id)
            .collect();
        let mut sums: HashMap<AccountId, Sums> = HashMap::new();
        let mut pairs: HashMap<(Currency, ParticipantId, ParticipantId), (Amount, u32)> =
            HashMap::new();
        for &content_id in &content {
            for row in &self.book.content_accounts[index(content_id)] {
                let sum = sums.entry(row.account).or_default();
                sum.sent = sum.sent.checked_add(row.sent).ok_or_else(overflow)?;
                sum.sent_count = sum.sent_count.saturating_add(row.sent_count);
                sum.received = sum
                    .received
                    .checked_add(row.received)
                    .ok_or_else(overflow)?;
                sum.received_count = sum.received_count.saturating_add(row.received_count);
            }
            for row in &self.book.content_pairs[index(content_id)] {
                let payer = self.account(row.payer);
                let payee = self.account(row.payee);
                let pair = pairs
                    .entry((payer.currency, payer.participant, payee.participant))
                    .or_default();
                pair.0 = pair.0.checked_add(row.amount).ok_or_else(overflow)?;
                pair.1 = pair.1.saturating_add(row.count);
            }
        }
        let accounts = settlement
            .accounts
            .iter()
            .map(|account| {
                let sum = sums.get(&account.account).copied().unwrap_or_default();
                ReportLine {
                    participant: account.participant,
                    account: account.account,
                    currency: account.currency,
                    net: account.net,
                    sent: sum.sent,
                    sent_count: sum.sent_count,
                    received: sum.received,
                    received_count: sum.received_count,
                    state: account.state,
                }
            })
            .collect();
        let mut bilateral: Vec<BilateralLine> = pairs
            .into_iter()
            .map(
                |((currency, payer, payee), (amount, count))| BilateralLine {
                    currency,
                    payer,
                    payee,
                    amount,
                    count,
                },
            )
            .collect();
        bilateral.sort_unstable_by_key(|line| (line.currency, line.payer, line.payee));
        Ok(Outcome::SettlementReport(SettlementReport {
            accounts,
            bilateral,
        }))
    }

    /// The frozen sums of content `id` (for reports).
    pub fn content_accounts(&self, id: u32) -> &[ContentAccountRow] {
        self.book
            .content_accounts
            .get(index(id))
            .map_or(&[], Vec::as_slice)
    }

    /// The bilateral sums of content `id` (for reports).
    pub fn content_pairs(&self, id: u32) -> &[ContentPairRow] {
        self.book
            .content_pairs
            .get(index(id))
            .map_or(&[], Vec::as_slice)
    }
}

/// Longest reason or external reference kept (Mojaloop's columns: 512).
pub const SETTLEMENT_TEXT_MAX_LEN: usize = 512;

fn check_reason(reason: &str) -> Result<(), Rejection> {
    if reason.len() > SETTLEMENT_TEXT_MAX_LEN {
        return Err(invalid(format!(
            "reason is longer than {SETTLEMENT_TEXT_MAX_LEN} bytes"
        )));
    }
    Ok(())
}

fn index(id: u32) -> usize {
    (id as usize).wrapping_sub(1)
}
