//! The account lookup registry: parties and their FSPs, and the oracles
//! that answer for a party id type.

use crate::error::{ErrorCode, Rejection};
use crate::ids::{Currency, FspName};
use crate::ledger::{validation, Ledger, PartyEntry};
use crate::model::*;

impl Ledger {
    pub(crate) fn register_party(
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
        if participant.is_hub || !participant.mode.is_active() {
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

    pub(crate) fn delete_party(
        &mut self,
        key: &PartyKey,
        caller: FspName,
    ) -> Result<Outcome, Rejection> {
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

    pub(crate) fn create_oracle(
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

    pub(crate) fn update_oracle(
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

    pub(crate) fn delete_oracle(&mut self, id: u32) -> Result<Outcome, Rejection> {
        let i = self.live_oracle_index(id)?;
        self.oracles[i].active = false;
        self.records.push(Record::OracleDeleted(id));
        Ok(Outcome::Done)
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
