//! The hub's in-memory copies of reference data — the DFSPs' endpoints,
//! their modes and disabled currency accounts, the party registry, the external oracles, the
//! pinned certificates, the proxies and the proxy map — kept current in one place: from the records of
//! every committed batch (`EngineHandle::on_committed`), applied before
//! the batch's outcomes are released, so a handler that hears back sees
//! its own change and no handler refreshes a copy by hand.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ledger::{AccountId, AccountKind, FspName, ParticipantId, ParticipantView, Record};

use crate::endpoints::Endpoints;
use crate::oracles::Oracles;
use crate::parties::Parties;
use crate::pins::Pins;
use crate::proxies::ProxyRoutes;

/// The copies, and the participant names their records need (rows name
/// participants by id; names never change).
pub(crate) struct Copies {
    pub(crate) endpoints: Arc<Endpoints>,
    pub(crate) parties: Arc<Parties>,
    pub(crate) oracles: Arc<Oracles>,
    pub(crate) pins: Arc<Pins>,
    pub(crate) proxies: Arc<ProxyRoutes>,
    names: HashMap<ParticipantId, FspName>,
    /// The POSITION accounts disabled, as `endpoints` was last told: an
    /// account's record comes with every batch that moves its balance, so
    /// the shared copy is written only when its `active` changed.
    disabled: HashSet<AccountId>,
}

impl Copies {
    /// The copies as loaded, with the participants' names.
    pub(crate) fn new(
        endpoints: Arc<Endpoints>,
        parties: Arc<Parties>,
        oracles: Arc<Oracles>,
        pins: Arc<Pins>,
        proxies: Arc<ProxyRoutes>,
        participants: &[ParticipantView],
    ) -> Copies {
        let names = participants
            .iter()
            .map(|view| (view.participant.id, view.participant.name))
            .collect();
        let disabled = participants
            .iter()
            .flat_map(|view| &view.accounts)
            .filter(|account| account.kind == AccountKind::Position && !account.active)
            .map(|account| account.id)
            .collect();
        Copies {
            endpoints,
            parties,
            oracles,
            pins,
            proxies,
            names,
            disabled,
        }
    }

    /// Applies one committed batch's records.
    pub(crate) fn apply(&mut self, records: &[Record]) {
        for record in records {
            match record {
                Record::Participant(row) => {
                    self.names.insert(row.id, row.name);
                    self.endpoints.note_participant(row.name, row.mode);
                    self.proxies.note_participant(row.name, row.is_proxy);
                }
                Record::ProxyMapping(row) => {
                    if let Some(&proxy) = self.names.get(&row.proxy) {
                        self.proxies.note_mapping(row.dfsp, Some(proxy));
                    }
                }
                Record::ProxyUnmapped(dfsp) => self.proxies.note_mapping(*dfsp, None),
                Record::Account(row) if row.kind == AccountKind::Position => {
                    let changed = match row.active {
                        true => self.disabled.remove(&row.id),
                        false => self.disabled.insert(row.id),
                    };
                    if let (true, Some(&name)) = (changed, self.names.get(&row.participant)) {
                        self.endpoints.note_account(name, row.currency, row.active);
                    }
                }
                Record::Endpoint(row) => {
                    if let Some(&name) = self.names.get(&row.participant) {
                        self.endpoints.set(name, &row.endpoint_type, &row.value);
                    }
                }
                Record::Party(row) => {
                    if let Some(&name) = self.names.get(&row.fsp) {
                        self.parties.set(row.key.clone(), name, row.currency);
                    }
                }
                Record::PartyDeleted(key) => self.parties.remove(key),
                Record::Oracle(row) => self.oracles.upsert(row.clone()),
                Record::OracleDeleted(id) => self.oracles.delete(*id),
                Record::CertificatePin(row) => {
                    if let Some(&name) = self.names.get(&row.participant) {
                        self.pins.pin(&row.fingerprint, name);
                    }
                }
                Record::CertificateUnpinned(fingerprint) => self.pins.unpin(fingerprint),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::{
        EndpointRow, OracleRow, ParticipantMode, ParticipantRow, PartyKey, PartyRow, PinRow,
    };

    fn fsp(name: &str) -> FspName {
        FspName::new(name).unwrap()
    }

    /// A disabled POSITION account is known from the start, and each
    /// committed change of an account's `isActive` reaches the copy;
    /// a SETTLEMENT account's, or a balance's move, changes nothing.
    #[test]
    fn disabled_position_accounts_are_copied_from_the_start_and_each_commit() {
        use ledger::{AccountKind, AccountRow, Amount, Currency};
        let payer = ParticipantId(2);
        let (usd, eur) = (
            Currency::parse("USD").unwrap(),
            Currency::parse("EUR").unwrap(),
        );
        let account = |id: u32, currency: Currency, kind: AccountKind, active: bool| AccountRow {
            id: AccountId(id),
            participant: payer,
            currency,
            kind,
            active,
            value: Amount::ZERO,
            reserved: Amount::ZERO,
            net_debit_cap: None,
            created_at_ms: 0,
            changed_at_ms: 0,
        };
        let view = ParticipantView {
            participant: ParticipantRow {
                id: payer,
                name: fsp("payerfsp"),
                is_hub: false,
                is_proxy: false,
                mode: ParticipantMode::Active,
                created_at_ms: 0,
            },
            accounts: vec![
                account(1, usd, AccountKind::Position, false),
                account(2, usd, AccountKind::Settlement, true),
                account(3, eur, AccountKind::Position, true),
            ],
            endpoints: vec![],
        };
        let endpoints = Arc::new(Endpoints::default());
        // Loaded at start as the hub loads them.
        endpoints.load(std::slice::from_ref(&view));
        let mut copies = Copies::new(
            endpoints.clone(),
            Arc::default(),
            Arc::new(Oracles::new(&crate::HubConfig::new(fsp("Hub")))),
            Arc::default(),
            Arc::default(),
            std::slice::from_ref(&view),
        );
        let payerfsp = fsp("payerfsp");
        let disabled = || {
            (
                endpoints.account_disabled(payerfsp, usd),
                endpoints.account_disabled(payerfsp, eur),
            )
        };
        assert_eq!(disabled(), (true, false));
        // Enabled USD; disabled EUR; a disabled SETTLEMENT account is not
        // a position's.
        copies.apply(&[
            Record::Account(account(1, usd, AccountKind::Position, true)),
            Record::Account(account(3, eur, AccountKind::Position, false)),
            Record::Account(account(2, usd, AccountKind::Settlement, false)),
        ]);
        assert_eq!(disabled(), (false, true));
        // A later balance move of the still-disabled EUR account keeps it
        // disabled; one of USD keeps it enabled.
        let mut moved = account(3, eur, AccountKind::Position, false);
        moved.changed_at_ms = 5;
        copies.apply(&[
            Record::Account(moved),
            Record::Account(account(1, usd, AccountKind::Position, true)),
        ]);
        assert_eq!(disabled(), (false, true));
        copies.apply(&[Record::Account(account(
            3,
            eur,
            AccountKind::Position,
            true,
        ))]);
        assert_eq!(disabled(), (false, false));
        // A participant the hub does not know has no disabled account.
        assert!(!endpoints.account_disabled(fsp("other"), usd));
    }

    /// Each kind of committed record reaches its copy; a record about a
    /// participant the copies have not heard of yet is applied once its
    /// participant row came first (in the same batch, as the ledger
    /// writes it).
    #[test]
    fn committed_records_keep_every_copy_current() {
        let mut copies = Copies::new(
            Arc::default(),
            Arc::default(),
            Arc::new(Oracles::new(&crate::HubConfig::new(fsp("Hub")))),
            Arc::default(),
            Arc::default(),
            &[],
        );
        let payer = ParticipantId(2);
        let key = PartyKey {
            id_type: "MSISDN".into(),
            identifier: "123".into(),
            sub_id: None,
        };
        let oracle = |id: u32, active: bool| OracleRow {
            id,
            id_type: "IBAN".into(),
            endpoint: format!("http://127.0.0.1:{id}"),
            currency: None,
            is_default: true,
            active,
        };
        copies.apply(&[
            Record::Participant(ParticipantRow {
                id: payer,
                name: fsp("payerfsp"),
                is_hub: false,
                is_proxy: false,
                mode: ParticipantMode::Active,
                created_at_ms: 0,
            }),
            Record::Endpoint(EndpointRow {
                participant: payer,
                endpoint_type: "FSPIOP_CALLBACK_URL_TRANSFER_POST".into(),
                value: "http://127.0.0.1:9/transfers".into(),
            }),
            Record::Party(PartyRow {
                key: key.clone(),
                fsp: payer,
                currency: None,
                registered_at_ms: 0,
            }),
            Record::Oracle(oracle(1, true)),
            Record::Oracle(oracle(2, true)),
            Record::CertificatePin(PinRow {
                fingerprint: [7; 32],
                participant: payer,
                pinned_at_ms: 0,
            }),
        ]);
        assert_eq!(
            copies.endpoints.participant_mode(fsp("payerfsp")),
            Some(ParticipantMode::Active)
        );
        assert_eq!(
            copies
                .endpoints
                .url(fsp("payerfsp"), "FSPIOP_CALLBACK_URL_TRANSFER_POST", &[])
                .as_deref(),
            Some("http://127.0.0.1:9/transfers")
        );
        assert_eq!(copies.parties.holder(&key), Some(fsp("payerfsp")));
        assert_eq!(copies.oracles.list().len(), 2);
        let fingerprint = crate::admin_auth::hex(&[7; 32]);
        assert_eq!(
            copies.pins.holder(&fingerprint).as_deref(),
            Some("payerfsp")
        );

        copies.apply(&[
            Record::Participant(ParticipantRow {
                id: payer,
                name: fsp("payerfsp"),
                is_hub: false,
                is_proxy: false,
                mode: ParticipantMode::ReceiveOnly,
                created_at_ms: 0,
            }),
            Record::PartyDeleted(key.clone()),
            Record::Oracle(oracle(1, false)),
            Record::OracleDeleted(2),
            Record::CertificateUnpinned([7; 32]),
        ]);
        assert_eq!(
            copies.endpoints.participant_mode(fsp("payerfsp")),
            Some(ParticipantMode::ReceiveOnly)
        );
        assert_eq!(copies.parties.holder(&key), None);
        assert!(
            copies.oracles.list().is_empty(),
            "{:?}",
            copies.oracles.list()
        );
        assert_eq!(copies.pins.holder(&fingerprint), None);
    }
}
