//! Reference data: the hub and its accounts, participants, their accounts,
//! net debit caps and endpoints, settlement models, and reading them back.

use crate::amount::Amount;
use crate::error::{ErrorCode, Rejection};
use crate::ids::{AccountId, Currency, FspName, ParticipantId};
use crate::ledger::{
    account_row, index, participant_row, validation, Account, Ledger, Participant,
};
use crate::model::*;

impl Ledger {
    fn add_participant(
        &mut self,
        name: FspName,
        is_hub: bool,
        is_proxy: bool,
    ) -> Result<ParticipantId, Rejection> {
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
            is_proxy,
            mode: ParticipantMode::Active,
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

    pub(crate) fn create_hub(&mut self, name: FspName) -> Result<Outcome, Rejection> {
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
        self.hub = Some(self.add_participant(name, true, false)?);
        self.ensure_window(true);
        Ok(Outcome::Done)
    }

    pub(crate) fn create_hub_account(
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
    pub(crate) fn hub_accounts(&self, currency: Currency) -> Option<AccountId> {
        let hub = self.hub?;
        self.find_account(hub, currency, AccountKind::HubMultilateralSettlement)?;
        self.find_account(hub, currency, AccountKind::HubReconciliation)
    }

    /// `is_proxy` makes a new participant a proxy; a currency added to an
    /// existing participant leaves it what it is (central-ledger reads
    /// `isProxy` only when it creates the participant).
    pub(crate) fn create_participant(
        &mut self,
        name: FspName,
        currency: Currency,
        is_proxy: bool,
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
            None => {
                let id = self.add_participant(name, false, is_proxy)?;
                // A participant's name wins over a DFSP of another scheme
                // of the same name: the map no longer routes it away.
                self.forget_mapped(name);
                id
            }
        };
        let position = self.add_account(id, currency, AccountKind::Position);
        let settlement = self.add_account(id, currency, AccountKind::Settlement);
        Ok(Outcome::AccountsCreated(vec![position, settlement]))
    }

    /// Effective from the next command on: the pause rule reads the mode
    /// at each prepare (`active_position`), and nothing else — a transfer
    /// already prepared finishes whatever the mode became.
    pub(crate) fn set_participant_mode(
        &mut self,
        name: FspName,
        mode: ParticipantMode,
    ) -> Result<Outcome, Rejection> {
        let id = self.participant_id(name)?;
        if self.participant(id).mode != mode {
            self.participant_mut(id).mode = mode;
        }
        Ok(Outcome::Done)
    }

    pub(crate) fn owned_account(
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

    pub(crate) fn set_account_active(
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

    pub(crate) fn set_net_debit_cap(
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

    pub(crate) fn set_endpoint(
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

    pub(crate) fn create_settlement_model(
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

    pub(crate) fn read_participants(&self, name: Option<FspName>) -> Result<Outcome, Rejection> {
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
}
