//! The hub's in-memory copies of reference data — the DFSPs' endpoints and
//! whether they are active, the party registry, the external oracles, the
//! pinned certificates — kept current in one place: from the records of
//! every committed batch (`EngineHandle::on_committed`), applied before
//! the batch's outcomes are released, so a handler that hears back sees
//! its own change and no handler refreshes a copy by hand.

use std::collections::HashMap;
use std::sync::Arc;

use ledger::{FspName, ParticipantId, ParticipantView, Record};

use crate::endpoints::Endpoints;
use crate::oracles::Oracles;
use crate::parties::Parties;
use crate::pins::Pins;

/// The copies, and the participant names their records need (rows name
/// participants by id; names never change).
pub(crate) struct Copies {
    pub(crate) endpoints: Arc<Endpoints>,
    pub(crate) parties: Arc<Parties>,
    pub(crate) oracles: Arc<Oracles>,
    pub(crate) pins: Arc<Pins>,
    names: HashMap<ParticipantId, FspName>,
}

impl Copies {
    /// The copies as loaded, with the participants' names.
    pub(crate) fn new(
        endpoints: Arc<Endpoints>,
        parties: Arc<Parties>,
        oracles: Arc<Oracles>,
        pins: Arc<Pins>,
        participants: &[ParticipantView],
    ) -> Copies {
        let names = participants
            .iter()
            .map(|view| (view.participant.id, view.participant.name))
            .collect();
        Copies {
            endpoints,
            parties,
            oracles,
            pins,
            names,
        }
    }

    /// Applies one committed batch's records.
    pub(crate) fn apply(&mut self, records: &[Record]) {
        for record in records {
            match record {
                Record::Participant(row) => {
                    self.names.insert(row.id, row.name);
                    self.endpoints.note_participant(row.name, row.mode);
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
