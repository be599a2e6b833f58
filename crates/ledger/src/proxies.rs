//! The proxy map: which proxy participant reaches each DFSP of another
//! scheme (docs/design/interscheme.md, section 8, rule 2).
//!
//! An entry is set by the operator, or learnt from a proxy's answer to a
//! discovery this hub asked; an operator's entry is never replaced by a
//! learnt one, a learnt one only goes when a route through it fails (the
//! next discovery learns it again), and a participant's own name is never
//! mapped. Nothing here trusts a header: the hub asks for a learnt entry
//! only with the proxy its own request went to.

use crate::error::{ErrorCode, Rejection};
use crate::ids::{FspName, ParticipantId};
use crate::ledger::{validation, Ledger};
use crate::model::*;

impl Ledger {
    /// The proxy participant named `proxy`: it must be one created as a
    /// proxy.
    fn proxy_id(&self, proxy: FspName) -> Result<ParticipantId, Rejection> {
        let id = self
            .participant_by_name
            .get(&proxy)
            .copied()
            .ok_or_else(|| {
                Rejection::new(
                    ErrorCode::ID_NOT_FOUND,
                    format!("participant '{proxy}' not found"),
                )
            })?;
        if !self.participant(id).is_proxy {
            return Err(validation(format!(
                "'{proxy}' is not a proxy (a participant created with \"isProxy\": true)"
            )));
        }
        Ok(id)
    }

    pub(crate) fn map_proxy(
        &mut self,
        dfsp: FspName,
        proxy: FspName,
        by_operator: bool,
    ) -> Result<Outcome, Rejection> {
        if self.participant_by_name.contains_key(&dfsp) {
            return Err(validation(format!(
                "'{dfsp}' is a participant of this scheme; only another scheme's DFSPs are reached through a proxy"
            )));
        }
        let proxy = self.proxy_id(proxy)?;
        match self.proxy_map.get(&dfsp) {
            Some(entry) if entry.proxy == proxy && entry.by_operator == by_operator => {
                return Ok(Outcome::ProxyMapChanged(false));
            }
            // What was learnt first, or set by the operator, stays.
            Some(_) if !by_operator => return Ok(Outcome::ProxyMapChanged(false)),
            Some(_) => {}
            None if self.proxy_map.len() >= PROXY_MAP_MAX => {
                return Err(Rejection::new(
                    ErrorCode::INTERNAL_SERVER_ERROR,
                    format!("the proxy map holds its limit of {PROXY_MAP_MAX} DFSPs"),
                ));
            }
            None => {}
        }
        let row = ProxyMapRow {
            dfsp,
            proxy,
            by_operator,
            since_ms: self.now_ms,
        };
        self.proxy_map.insert(dfsp, row.clone());
        self.records.push(Record::ProxyMapping(row));
        Ok(Outcome::ProxyMapChanged(true))
    }

    pub(crate) fn unmap_proxy(
        &mut self,
        dfsp: FspName,
        learnt_via: Option<FspName>,
    ) -> Result<Outcome, Rejection> {
        let Some(entry) = self.proxy_map.get(&dfsp) else {
            return match learnt_via {
                Some(_) => Ok(Outcome::ProxyMapChanged(false)),
                None => Err(Rejection::new(
                    ErrorCode::ID_NOT_FOUND,
                    format!("'{dfsp}' is not in the proxy map"),
                )),
            };
        };
        if let Some(proxy) = learnt_via {
            let through = self.participant_by_name.get(&proxy).copied();
            if entry.by_operator || Some(entry.proxy) != through {
                return Ok(Outcome::ProxyMapChanged(false));
            }
        }
        self.forget_mapped(dfsp);
        Ok(Outcome::ProxyMapChanged(true))
    }

    /// Drops `dfsp`'s entry, if any, with its record.
    pub(crate) fn forget_mapped(&mut self, dfsp: FspName) {
        if self.proxy_map.remove(&dfsp).is_some() {
            self.records.push(Record::ProxyUnmapped(dfsp));
        }
    }

    pub(crate) fn read_proxy_map(&self) -> Outcome {
        Outcome::ProxyMap(
            self.proxy_map
                .values()
                .map(|row| ProxyMapView {
                    dfsp: row.dfsp,
                    proxy: self.participant(row.proxy).name,
                    by_operator: row.by_operator,
                    since_ms: row.since_ms,
                })
                .collect(),
        )
    }
}
