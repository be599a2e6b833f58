//! Shared helpers for the ledger's integration tests: a hub with its
//! accounts, DFSPs with liquidity and caps, and command builders.

#![allow(dead_code)]

use ledger::*;

/// The time of the first batch in every test.
pub const T0: i64 = 1_700_000_000_000;
/// Default lifetime of a prepared transfer in the tests.
pub const TTL: i64 = 60_000;

pub fn fsp(name: &str) -> FspName {
    FspName::new(name).expect("valid FSP name")
}

pub fn cur(code: &str) -> Currency {
    Currency::parse(code).expect("ISO 4217 currency")
}

pub fn usd() -> Currency {
    cur("USD")
}

pub fn eur() -> Currency {
    cur("EUR")
}

pub fn whole(n: i64) -> Amount {
    Amount::from_whole(n)
}

pub fn hash(k: u8) -> RequestHash {
    RequestHash([k; 32])
}

pub fn secret(n: u8) -> Fulfilment {
    Fulfilment::from_preimage([n; 32])
}

/// A DFSP's two accounts in one currency.
#[derive(Clone, Copy, Debug)]
pub struct Dfsp {
    pub name: FspName,
    pub currency: Currency,
    pub position: AccountId,
    pub settlement: AccountId,
}

/// A ledger with a hub, driven at a test-controlled clock.
pub struct Hub {
    pub ledger: Ledger,
    pub now: i64,
    pub name: FspName,
    /// What a store would hold of every batch applied so far, read back
    /// before each batch as the pipeline's prefetch does.
    pub store: StoreCopy,
}

/// The rows a store keeps of transfers and quotes, from the records of
/// every batch (upserts as the stores do), and the prefetch's answers
/// from them: an independent model of what the pipeline reads.
#[derive(Default)]
pub struct StoreCopy {
    pub participants: std::collections::HashMap<ParticipantId, FspName>,
    pub accounts: std::collections::HashMap<AccountId, (ParticipantId, Currency)>,
    pub transfers: std::collections::HashMap<TransferId, TransferRow>,
    pub finishes: std::collections::HashMap<u64, FinishRow>,
    pub quotes: std::collections::HashMap<TransferId, QuoteRow>,
    pub conversion_fulfils: std::collections::HashMap<u64, ConversionFulfilRow>,
    /// Ids whose rows the test says cannot be read.
    pub unreadable: std::collections::HashSet<TransferId>,
    /// How many ids were read so far.
    pub reads: usize,
}

impl StoreCopy {
    pub fn keep(&mut self, records: &[Record]) {
        for record in records {
            match record {
                Record::Participant(row) => {
                    self.participants.insert(row.id, row.name);
                }
                Record::Account(row) => {
                    self.accounts
                        .insert(row.id, (row.participant, row.currency));
                }
                Record::Transfer(row) => {
                    self.transfers.insert(row.transfer_id, row.clone());
                }
                Record::Finish(row) => {
                    self.finishes.insert(row.seq, row.clone());
                }
                Record::Quote(row) => {
                    self.quotes.insert(row.quote_id, row.clone());
                }
                Record::ConversionFulfilled(row) => {
                    self.conversion_fulfils.insert(row.seq, row.clone());
                }
                _ => {}
            }
        }
    }

    pub fn stored(&self, transfer_id: TransferId) -> Option<StoredTransfer> {
        let row = self.transfers.get(&transfer_id)?;
        let (debit_owner, currency) = self.accounts[&row.debit];
        let (credit_owner, _) = self.accounts[&row.credit];
        let fx_payer = match row.fx {
            Some(FxLink::Dependent { payer, .. }) => Some(self.participants[&payer]),
            _ => None,
        };
        let parties = StoredParties {
            debit_owner: self.participants[&debit_owner],
            credit_owner: self.participants[&credit_owner],
            fx_payer,
        };
        Some(StoredTransfer::from_rows(
            row,
            self.finishes.get(&row.seq),
            parties,
            currency,
            self.conversion_fulfils.get(&row.seq),
        ))
    }

    pub fn prefetch(&mut self, ids: &PrefetchIds) -> Prefetched {
        // Ids read: a prepare's id is looked up as a transfer and as a
        // conversion's determining transfer in the same read.
        let transfer_ids: std::collections::HashSet<_> =
            ids.transfers.iter().chain(&ids.conversions).collect();
        self.reads += transfer_ids.len() + ids.quotes.len();
        let mut prefetched = Prefetched::default();
        for &id in &ids.transfers {
            let lookup = match (self.unreadable.contains(&id), self.stored(id)) {
                (true, _) => Lookup::Failed,
                (false, Some(stored)) => Lookup::Found(stored),
                (false, None) => Lookup::Absent,
            };
            prefetched.transfers.insert(id, lookup);
        }
        for &determining in &ids.conversions {
            let latest = self
                .transfers
                .values()
                .filter(|row| {
                    matches!(row.fx, Some(FxLink::Conversion(terms)) if terms.determining_transfer_id == determining)
                })
                .max_by_key(|row| row.seq);
            let lookup = match latest.and_then(|row| self.stored(row.transfer_id)) {
                Some(stored) => Lookup::Found(stored),
                None => Lookup::Absent,
            };
            prefetched.conversions.insert(determining, lookup);
        }
        for &id in &ids.quotes {
            let lookup = match self.quotes.get(&id) {
                Some(row) => Lookup::Found(row.clone()),
                None => Lookup::Absent,
            };
            prefetched.quotes.insert(id, lookup);
        }
        prefetched
    }
}

impl Hub {
    /// A ledger with only the hub participant, no accounts.
    pub fn bare() -> Hub {
        let mut hub = Hub {
            ledger: Ledger::new(Limits::default()),
            now: T0,
            name: fsp("Hub"),
            store: StoreCopy::default(),
        };
        let name = hub.name;
        assert_eq!(hub.one(Command::CreateHub { name }), Outcome::Done);
        hub
    }

    /// A hub with both hub accounts in each currency.
    pub fn new(currencies: &[Currency]) -> Hub {
        let mut hub = Hub::bare();
        for &currency in currencies {
            for kind in [
                AccountKind::HubMultilateralSettlement,
                AccountKind::HubReconciliation,
            ] {
                let outcome = hub.one(Command::CreateHubAccount { currency, kind });
                assert!(
                    matches!(outcome, Outcome::AccountsCreated(ref ids) if ids.len() == 1),
                    "{outcome:?}"
                );
            }
        }
        hub
    }

    pub fn usd() -> Hub {
        Hub::new(&[usd()])
    }

    /// Applies a batch at the current time, after reading from the store
    /// copy what memory does not hold (as the pipeline does), and keeps
    /// its records.
    pub fn batch(&mut self, commands: &[Command]) -> BatchResult {
        let ids = self.ledger.prefetch_ids(commands);
        let prefetched = self.store.prefetch(&ids);
        let result = self
            .ledger
            .apply_batch_prefetched(self.now, commands, prefetched);
        self.store.keep(&result.records);
        result
    }

    /// Applies a batch at the current time and returns its outcomes.
    pub fn apply(&mut self, commands: &[Command]) -> Vec<Outcome> {
        self.batch(commands).outcomes
    }

    /// Applies one command as its own batch.
    pub fn one(&mut self, command: Command) -> Outcome {
        let mut outcomes = self.apply(std::slice::from_ref(&command));
        assert_eq!(outcomes.len(), 1);
        outcomes.pop().unwrap()
    }

    pub fn advance(&mut self, ms: i64) {
        self.now += ms;
    }

    /// Creates a DFSP (or adds a currency to it), deposits `liquidity` and
    /// sets its first net debit cap.
    pub fn dfsp_in(&mut self, name: &str, currency: Currency, liquidity: i64, cap: i64) -> Dfsp {
        let name = fsp(name);
        let outcome = self.one(Command::CreateParticipant { name, currency });
        let Outcome::AccountsCreated(ids) = outcome else {
            panic!("creating {name}: {outcome:?}");
        };
        assert_eq!(ids.len(), 2);
        let dfsp = Dfsp {
            name,
            currency,
            position: ids[0],
            settlement: ids[1],
        };
        assert_eq!(self.account(dfsp.position).kind, AccountKind::Position);
        assert_eq!(self.account(dfsp.settlement).kind, AccountKind::Settlement);
        if liquidity > 0 {
            let id = self.fresh_id();
            let outcome = self.one(funds_in(id, dfsp, whole(liquidity), hash(0xF1)));
            assert!(
                matches!(outcome, Outcome::Transfer(ref v) if v.state == TransferState::Committed),
                "{outcome:?}"
            );
        }
        let outcome = self.one(Command::InitNetDebitCap {
            name,
            currency,
            net_debit_cap: whole(cap),
        });
        assert_eq!(outcome, Outcome::Done);
        dfsp
    }

    /// A USD DFSP.
    pub fn dfsp(&mut self, name: &str, liquidity: i64, cap: i64) -> Dfsp {
        self.dfsp_in(name, usd(), liquidity, cap)
    }

    /// A transfer id not used by any test-built command (high range).
    pub fn fresh_id(&mut self) -> TransferId {
        TransferId::new(u128::MAX - self.ledger.transfer_count() as u128)
    }

    pub fn account(&self, id: AccountId) -> AccountRow {
        self.ledger
            .snapshot()
            .accounts
            .into_iter()
            .find(|row| row.id == id)
            .unwrap_or_else(|| panic!("no account {}", id.0))
    }

    /// (value, reserved) of an account.
    pub fn balance(&self, id: AccountId) -> (Amount, Amount) {
        let row = self.account(id);
        (row.value, row.reserved)
    }

    /// The hub's reconciliation account in `currency`.
    pub fn reconciliation(&self, currency: Currency) -> AccountId {
        self.ledger
            .snapshot()
            .accounts
            .into_iter()
            .find(|row| row.currency == currency && row.kind == AccountKind::HubReconciliation)
            .expect("hub reconciliation account")
            .id
    }

    /// The transfer's current state, as its payer sees it.
    pub fn state(&mut self, id: TransferId, caller: FspName) -> TransferState {
        match self.one(Command::GetTransfer {
            transfer_id: id,
            caller,
        }) {
            Outcome::Transfer(view) => view.state,
            other => panic!("GET {id}: {other:?}"),
        }
    }

    /// Applies `command` alone, asserts that it is refused with `code` and
    /// that nothing at all changed (no records, identical snapshot).
    pub fn assert_rejected(&mut self, command: Command, code: ErrorCode) -> Rejection {
        let before = self.ledger.snapshot();
        let result = self.batch(std::slice::from_ref(&command));
        let outcome = &result.outcomes[0];
        assert_eq!(
            outcome.error_code(),
            Some(code),
            "{command:?} gave {outcome:?}"
        );
        let Outcome::Rejected(rejection) = outcome else {
            panic!("{command:?} should be Rejected, got {outcome:?}");
        };
        assert!(
            result.records.is_empty(),
            "a rejected command wrote {:?}",
            result.records
        );
        assert_eq!(
            self.ledger.snapshot(),
            before,
            "a rejected command changed the ledger"
        );
        rejection.clone()
    }

    /// Applies `command` alone, asserts it is a duplicate and changed nothing.
    pub fn assert_duplicate(&mut self, command: Command) -> TransferView {
        let before = self.ledger.snapshot();
        let result = self.batch(std::slice::from_ref(&command));
        let Outcome::Duplicate(view) = &result.outcomes[0] else {
            panic!(
                "{command:?} should be a Duplicate, got {:?}",
                result.outcomes[0]
            );
        };
        assert!(
            result.records.is_empty(),
            "a duplicate wrote {:?}",
            result.records
        );
        assert_eq!(
            self.ledger.snapshot(),
            before,
            "a duplicate changed the ledger"
        );
        *view
    }
}

/// Unwraps a successful transfer outcome.
pub fn view(outcome: &Outcome) -> TransferView {
    match outcome {
        Outcome::Transfer(view) => *view,
        other => panic!("expected a transfer, got {other:?}"),
    }
}

/// Unwraps a `Failed` outcome: the transfer and its error code.
pub fn failed(outcome: &Outcome) -> (TransferView, ErrorCode) {
    match outcome {
        Outcome::Failed { transfer, error } => (*transfer, error.code),
        other => panic!("expected a failed transfer, got {other:?}"),
    }
}

/// A prepare locked with `secret(preimage)`'s condition.
#[allow(clippy::too_many_arguments)]
pub fn prepare_full(
    id: u128,
    payer: FspName,
    payee: FspName,
    amount: Amount,
    currency: Currency,
    preimage: u8,
    expiration_ms: i64,
    request_hash: RequestHash,
) -> Command {
    Command::Prepare(Prepare {
        transfer_id: TransferId::new(id),
        payer,
        payee,
        amount,
        currency,
        condition: secret(preimage).condition(),
        expiration_ms,
        request_hash,
        wire_version: 0x11,
        parties: None,
    })
}

/// A USD prepare of `amount` whole units, locked with `secret(id as u8)`,
/// expiring at `expiration_ms`, hashed as `hash(id as u8)`.
pub fn prepare(id: u128, payer: Dfsp, payee: Dfsp, amount: i64, expiration_ms: i64) -> Command {
    prepare_full(
        id,
        payer.name,
        payee.name,
        whole(amount),
        payer.currency,
        id as u8,
        expiration_ms,
        hash(id as u8),
    )
}

/// The payee's fulfil with the right fulfilment for [`prepare`]'s transfer.
pub fn fulfil(id: u128, caller: FspName) -> Command {
    fulfil_with(id, caller, secret(id as u8), hash(0x80 | id as u8))
}

pub fn fulfil_with(
    id: u128,
    caller: FspName,
    fulfilment: Fulfilment,
    request_hash: RequestHash,
) -> Command {
    Command::Fulfil(Fulfil {
        transfer_id: TransferId::new(id),
        caller,
        fulfilment: Some(fulfilment),
        destination: None,
        request_hash,
    })
}

pub fn abort(id: u128, caller: FspName, code: u16, request_hash: RequestHash) -> Command {
    Command::Abort(Abort {
        transfer_id: TransferId::new(id),
        caller,
        error_code: ErrorCode(code),
        destination: None,
        request_hash,
    })
}

pub fn funds(id: TransferId, dfsp: Dfsp, amount: Amount, request_hash: RequestHash) -> Funds {
    Funds {
        transfer_id: id,
        participant: dfsp.name,
        account: dfsp.settlement,
        amount,
        currency: dfsp.currency,
        memo: FundsMemo {
            external_reference: "test".into(),
            reason: "test".into(),
        },
        request_hash,
    }
}

pub fn funds_in(id: TransferId, dfsp: Dfsp, amount: Amount, request_hash: RequestHash) -> Command {
    Command::FundsIn(funds(id, dfsp, amount, request_hash))
}

pub fn funds_out(id: TransferId, dfsp: Dfsp, amount: Amount, request_hash: RequestHash) -> Command {
    Command::FundsOutReserve(funds(id, dfsp, amount, request_hash))
}

pub fn funds_finish(id: TransferId, dfsp: Dfsp, request_hash: RequestHash) -> FundsFinish {
    FundsFinish {
        transfer_id: id,
        participant: dfsp.name,
        account: dfsp.settlement,
        request_hash,
    }
}
