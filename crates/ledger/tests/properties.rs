//! Property tests: random command sequences against a few DFSPs in one or
//! two currencies, applied in random batches at non-decreasing times.
//!
//! Every command is also applied alone to a second ("shadow") ledger and
//! checked against an independent oracle that reads only the records the
//! ledger emitted (what the store would hold): the predicted outcome, the
//! exact balance movements, the position limits after each reservation, and
//! that refusals and duplicates change nothing. After every batch the main
//! ledger is checked as a whole: balances, audit, limits, final states,
//! records vs snapshot, restore; at the end the batches are replayed on a
//! fresh ledger for determinism. A third ledger has a short retention
//! horizon (finished transfers held compactly, then evicted, then read
//! back from a copy of what the store holds, and once restored midway):
//! it must answer every batch exactly as the one that holds everything.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};

use common::*;
use ledger::*;
use proptest::prelude::*;
use proptest::test_runner::Config;

/// FSPIOP transfer and funds ids share this small space, so that ids are
/// reused (duplicates, modified requests, cross-kind collisions).
const IDS: u8 = 48;
const MAX_DFSPS: usize = 4;

// ----- the generated scenario -------------------------------------------------

#[derive(Clone, Debug)]
struct DfspSpec {
    /// Holds the second currency too (when there is one).
    second: bool,
    funds: [i64; 2],
    caps: [Option<i64>; 2],
}

#[derive(Clone, Debug)]
enum Op {
    Prepare {
        /// Use a never-used id rather than `id`'s.
        fresh: bool,
        id: u8,
        payer: u8,
        payee: u8,
        cur: u8,
        amount: i128,
        /// Instead of `amount`: the payer's headroom at the batch's start
        /// plus this many units, to hit the limits exactly.
        exact: Option<i8>,
        secret: u8,
        expires_in: i64,
    },
    Fulfil {
        id: u8,
        /// Aim at a recently prepared transfer rather than at `id`.
        recent: bool,
        by_payee: bool,
        other: u8,
        right: bool,
        salt: u8,
    },
    Abort {
        id: u8,
        recent: bool,
        by_payee: bool,
        other: u8,
        code: u16,
        salt: u8,
    },
    Get {
        id: u8,
        who: u8,
    },
    Expire,
    /// Resends an earlier transfer command exactly.
    Resend(usize),
    /// Resends an earlier transfer command with a changed body (and hash).
    Modify(usize),
    FundsIn {
        id: u8,
        dfsp: u8,
        cur: u8,
        amount: i128,
    },
    FundsOut {
        id: u8,
        dfsp: u8,
        cur: u8,
        amount: i128,
    },
    FundsOutFinish {
        id: u8,
        recent: bool,
        commit: bool,
        salt: u8,
    },
    SetCap {
        dfsp: u8,
        cur: u8,
        cap: i64,
    },
    SetActive {
        dfsp: u8,
        active: bool,
    },
    /// Pausing a DFSP one way or both (`ParticipantMode`).
    SetMode {
        dfsp: u8,
        mode: u8,
    },
    SetAccountActive {
        dfsp: u8,
        cur: u8,
        settlement: bool,
        active: bool,
    },
}

#[derive(Clone, Debug)]
struct Scenario {
    two_currencies: bool,
    dfsps: Vec<DfspSpec>,
    /// (time step before the batch in ms, the batch's ops)
    batches: Vec<(i64, Vec<Op>)>,
    restore_at: usize,
}

fn amount_units() -> impl Strategy<Value = i128> {
    prop_oneof![
        40 => (1i64..=300).prop_map(|n| whole(n).units()),
        8 => 1i128..=3_000_000,
        1 => Just(0i128),
        1 => Just(Amount::MAX_TRANSFER.units() + 1),
    ]
}

/// Mostly multiples of 100 ms, as the time steps are, so that expirations
/// often fall exactly on a batch's time.
fn expires_in() -> impl Strategy<Value = i64> {
    prop_oneof![
        3 => (-1i64..20).prop_map(|k| k * 100),
        1 => -100i64..3_000,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0..IDS;
    prop_oneof![
        30 => (prop::bool::weighted(0.8), id.clone(), any::<u8>(), any::<u8>(), any::<u8>(), amount_units(),
               prop_oneof![6 => Just(None), 1 => (-1i8..=1).prop_map(Some)], 0u8..4, expires_in())
            .prop_map(|(fresh, id, payer, payee, cur, amount, exact, secret, expires_in)| Op::Prepare {
                fresh, id, payer, payee, cur, amount, exact, secret, expires_in,
            }),
        20 => (id.clone(), prop::bool::weighted(0.9), prop::bool::weighted(0.9), any::<u8>(), prop::bool::weighted(0.8), 0u8..3)
            .prop_map(|(id, recent, by_payee, other, right, salt)| Op::Fulfil { id, recent, by_payee, other, right, salt }),
        7 => (id.clone(), prop::bool::weighted(0.9), prop::bool::weighted(0.9), any::<u8>(),
              prop_oneof![Just(5100u16), Just(5104), Just(3303), Just(999)], 0u8..2)
            .prop_map(|(id, recent, by_payee, other, code, salt)| Op::Abort { id, recent, by_payee, other, code, salt }),
        4 => (id.clone(), any::<u8>()).prop_map(|(id, who)| Op::Get { id, who }),
        5 => Just(Op::Expire),
        8 => any::<usize>().prop_map(Op::Resend),
        4 => any::<usize>().prop_map(Op::Modify),
        4 => (id.clone(), any::<u8>(), any::<u8>(), amount_units())
            .prop_map(|(id, dfsp, cur, amount)| Op::FundsIn { id, dfsp, cur, amount }),
        3 => (id.clone(), any::<u8>(), any::<u8>(), amount_units())
            .prop_map(|(id, dfsp, cur, amount)| Op::FundsOut { id, dfsp, cur, amount }),
        3 => (id, prop::bool::weighted(0.9), any::<bool>(), 0u8..2)
            .prop_map(|(id, recent, commit, salt)| Op::FundsOutFinish { id, recent, commit, salt }),
        3 => (any::<u8>(), any::<u8>(), 0i64..=1_500)
            .prop_map(|(dfsp, cur, cap)| Op::SetCap { dfsp, cur, cap }),
        1 => (any::<u8>(), prop::bool::weighted(0.8))
            .prop_map(|(dfsp, active)| Op::SetActive { dfsp, active }),
        2 => (any::<u8>(), 0u8..4).prop_map(|(dfsp, mode)| Op::SetMode { dfsp, mode }),
        1 => (any::<u8>(), any::<u8>(), any::<bool>(), prop::bool::weighted(0.8))
            .prop_map(|(dfsp, cur, settlement, active)| Op::SetAccountActive { dfsp, cur, settlement, active }),
    ]
}

fn dfsp_spec() -> impl Strategy<Value = DfspSpec> {
    let funds = prop_oneof![1 => Just(0i64), 5 => 1i64..=2_000];
    let cap = prop_oneof![1 => Just(None), 6 => (0i64..=2_000).prop_map(Some)];
    (
        prop::bool::weighted(0.7),
        [funds.clone(), funds],
        [cap.clone(), cap],
    )
        .prop_map(|(second, funds, caps)| DfspSpec {
            second,
            funds,
            caps,
        })
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let step = prop_oneof![
        8 => (0i64..4).prop_map(|k| k * 100),
        2 => 0i64..300,
        1 => 1_000i64..5_000,
    ];
    (
        any::<bool>(),
        prop::collection::vec(dfsp_spec(), 2..=MAX_DFSPS),
        prop::collection::vec((step, prop::collection::vec(op(), 1..=16)), 1..=24),
        any::<usize>(),
    )
        .prop_map(|(two_currencies, dfsps, batches, restore_at)| Scenario {
            two_currencies,
            dfsps,
            batches,
            restore_at,
        })
}

// ----- turning ops into commands ------------------------------------------------

fn body_hash(body: impl std::fmt::Debug) -> RequestHash {
    RequestHash::of(format!("{body:?}").as_bytes())
}

fn modified_hash(hash: RequestHash) -> RequestHash {
    let mut bytes = hash.0.to_vec();
    bytes.extend_from_slice(b"modified");
    RequestHash::of(&bytes)
}

fn transfer_id(id: u8) -> TransferId {
    TransferId::new(1 + u128::from(id))
}

struct GenDfsp {
    name: FspName,
    /// (position, settlement) per currency index, when held.
    accounts: Vec<Option<(AccountId, AccountId)>>,
}

/// Builds commands from ops. Remembers only what it generated itself (never
/// what the ledger answered), so that a replay sees the same commands.
struct Gen {
    currencies: Vec<Currency>,
    dfsps: Vec<GenDfsp>,
    /// The last prepare generated per id: (payee, preimage byte).
    prepared: HashMap<TransferId, (FspName, u8)>,
    /// The last funds out generated per id: (dfsp index, currency index).
    funds_out: HashMap<TransferId, (usize, usize)>,
    /// Ids in the order they were prepared / reserved for funds out.
    prepared_order: Vec<TransferId>,
    funds_out_order: Vec<TransferId>,
    /// The last fresh id handed out.
    last_fresh: u128,
    /// Transfer commands generated so far, for resends.
    history: Vec<Command>,
}

impl Gen {
    fn dfsp(&self, index: u8) -> &GenDfsp {
        &self.dfsps[usize::from(index) % self.dfsps.len()]
    }

    /// Mostly the first currency.
    fn cur(&self, index: u8) -> usize {
        usize::from(index % 4 == 3 && self.currencies.len() > 1)
    }

    /// A DFSP's SETTLEMENT account for a currency; its first currency's when
    /// it does not hold that one (the ledger must then refuse the mismatch).
    fn settlement(&self, dfsp: &GenDfsp, cur: usize) -> AccountId {
        dfsp.accounts[cur]
            .or(dfsp.accounts[0])
            .expect("every DFSP holds the first currency")
            .1
    }

    fn funds(&self, id: u8, dfsp: u8, cur: u8, amount: i128, out: bool) -> Funds {
        let (dfsp, cur) = (self.dfsp(dfsp), self.cur(cur));
        let account = self.settlement(dfsp, cur);
        let currency = self.currencies[cur];
        let transfer_id = transfer_id(id);
        Funds {
            transfer_id,
            participant: dfsp.name,
            account,
            amount: Amount::from_units(amount),
            currency,
            memo: FundsMemo {
                external_reference: format!("ref-{id}"),
                reason: "property".into(),
            },
            request_hash: body_hash((
                "funds",
                out,
                transfer_id,
                dfsp.name,
                account,
                amount,
                currency,
            )),
        }
    }

    /// `rows` is the store's view at the start of the batch.
    fn command(&mut self, op: &Op, now: i64, rows: &Mirror) -> Command {
        let command = match *op {
            Op::Prepare {
                fresh,
                id,
                payer,
                payee,
                cur,
                amount,
                exact,
                secret: preimage,
                expires_in,
            } => {
                // Mostly two different DFSPs; sometimes the same one (3100).
                let n = self.dfsps.len() as u8;
                let payee = if payee % 16 == 0 {
                    payer
                } else {
                    payer % n + 1 + payee % (n - 1)
                };
                let (payer, payee) = (self.dfsp(payer).name, self.dfsp(payee).name);
                let currency = self.currencies[self.cur(cur)];
                let amount = match (exact, rows.position_of(payer, currency)) {
                    (Some(delta), Some(position)) => {
                        let (effective, cover, cap) = rows.headroom(position);
                        (cover.min(cap) - effective + i128::from(delta)).max(1)
                    }
                    _ => amount,
                };
                let transfer_id = if fresh {
                    self.last_fresh += 1;
                    TransferId::new(self.last_fresh)
                } else {
                    transfer_id(id)
                };
                let expiration_ms = now + expires_in;
                self.prepared.insert(transfer_id, (payee, preimage));
                self.prepared_order.push(transfer_id);
                Command::Prepare(Prepare {
                    transfer_id,
                    payer,
                    payee,
                    amount: Amount::from_units(amount),
                    currency,
                    condition: secret(preimage).condition(),
                    expiration_ms,
                    request_hash: body_hash((
                        "prepare",
                        transfer_id,
                        payer,
                        payee,
                        amount,
                        currency,
                        preimage,
                        expiration_ms,
                    )),
                    // Kept verbatim, so replay must give it back.
                    wire_version: 0x10 | (transfer_id.bits() % 2) as u8,
                    parties: None,
                })
            }
            Op::Fulfil {
                id,
                recent,
                by_payee,
                other,
                right,
                salt,
            } => {
                let transfer_id = pick(&self.prepared_order, recent, id);
                let (payee, preimage) = self
                    .prepared
                    .get(&transfer_id)
                    .copied()
                    .unwrap_or((self.dfsp(other).name, id % 4));
                let caller = if by_payee {
                    payee
                } else {
                    self.dfsp(other).name
                };
                let preimage = if right { preimage } else { preimage ^ 0x40 };
                Command::Fulfil(Fulfil {
                    transfer_id,
                    caller,
                    fulfilment: Some(secret(preimage)),
                    destination: None,
                    request_hash: body_hash(("fulfil", transfer_id, preimage, salt)),
                })
            }
            Op::Abort {
                id,
                recent,
                by_payee,
                other,
                code,
                salt,
            } => {
                let transfer_id = pick(&self.prepared_order, recent, id);
                let payee = self
                    .prepared
                    .get(&transfer_id)
                    .map_or(self.dfsp(other).name, |&(payee, _)| payee);
                let caller = if by_payee {
                    payee
                } else {
                    self.dfsp(other).name
                };
                Command::Abort(Abort {
                    transfer_id,
                    caller,
                    error_code: ErrorCode(code),
                    destination: None,
                    request_hash: body_hash(("abort", transfer_id, code, salt)),
                })
            }
            Op::Get { id, who } => Command::GetTransfer {
                transfer_id: transfer_id(id),
                caller: self.dfsp(who).name,
            },
            Op::Expire => Command::Expire,
            Op::Resend(pick) => match self.history.len() {
                0 => Command::Expire,
                n => self.history[pick % n].clone(),
            },
            Op::Modify(pick) => match self.history.len() {
                0 => Command::Expire,
                n => modify(self.history[pick % n].clone()),
            },
            Op::FundsIn {
                id,
                dfsp,
                cur,
                amount,
            } => Command::FundsIn(self.funds(id, dfsp, cur, amount, false)),
            Op::FundsOut {
                id,
                dfsp,
                cur,
                amount,
            } => {
                let funds = self.funds(id, dfsp, cur, amount, true);
                let index = usize::from(dfsp) % self.dfsps.len();
                self.funds_out
                    .insert(funds.transfer_id, (index, self.cur(cur)));
                self.funds_out_order.push(funds.transfer_id);
                Command::FundsOutReserve(funds)
            }
            Op::FundsOutFinish {
                id,
                recent,
                commit,
                salt,
            } => {
                let transfer_id = pick(&self.funds_out_order, recent, id);
                let (dfsp, cur) = self.funds_out.get(&transfer_id).copied().unwrap_or((0, 0));
                let dfsp = &self.dfsps[dfsp];
                let finish = FundsFinish {
                    transfer_id,
                    participant: dfsp.name,
                    account: self.settlement(dfsp, cur),
                    request_hash: body_hash(("funds-finish", transfer_id, commit, salt)),
                };
                if commit {
                    Command::FundsOutCommit(finish)
                } else {
                    Command::FundsOutAbort(finish)
                }
            }
            Op::SetCap { dfsp, cur, cap } => Command::SetNetDebitCap {
                name: self.dfsp(dfsp).name,
                currency: self.currencies[self.cur(cur)],
                net_debit_cap: whole(cap),
            },
            Op::SetActive { dfsp, active } => Command::SetParticipantActive {
                name: self.dfsp(dfsp).name,
                active,
            },
            Op::SetMode { dfsp, mode } => Command::SetParticipantMode {
                name: self.dfsp(dfsp).name,
                mode: ParticipantMode::ALL[usize::from(mode) % ParticipantMode::ALL.len()],
            },
            Op::SetAccountActive {
                dfsp,
                cur,
                settlement,
                active,
            } => {
                let dfsp = self.dfsp(dfsp);
                let cur = self.cur(cur);
                let (position, settlement_account) =
                    dfsp.accounts[cur].or(dfsp.accounts[0]).unwrap();
                Command::SetAccountActive {
                    name: dfsp.name,
                    account: if settlement {
                        settlement_account
                    } else {
                        position
                    },
                    active,
                }
            }
        };
        if matches!(
            command,
            Command::Prepare(_)
                | Command::Fulfil(_)
                | Command::Abort(_)
                | Command::FundsIn(_)
                | Command::FundsOutReserve(_)
                | Command::FundsOutCommit(_)
                | Command::FundsOutAbort(_)
        ) {
            self.history.push(command.clone());
        }
        command
    }
}

/// One of the last few ids in `order` when `recent`, else `id`'s.
fn pick(order: &[TransferId], recent: bool, id: u8) -> TransferId {
    let recent_ids = &order[order.len().saturating_sub(6)..];
    if recent && !recent_ids.is_empty() {
        recent_ids[usize::from(id) % recent_ids.len()]
    } else {
        transfer_id(id)
    }
}

/// The same request with a changed body, hence a different hash.
fn modify(command: Command) -> Command {
    let one = Amount::from_units(1);
    match command {
        Command::Prepare(mut p) => {
            p.amount = p.amount.checked_add(one).unwrap();
            p.request_hash = modified_hash(p.request_hash);
            Command::Prepare(p)
        }
        Command::Fulfil(mut f) => {
            f.request_hash = modified_hash(f.request_hash);
            Command::Fulfil(f)
        }
        Command::Abort(mut a) => {
            a.error_code = ErrorCode(a.error_code.0 + 1);
            a.request_hash = modified_hash(a.request_hash);
            Command::Abort(a)
        }
        Command::FundsIn(mut f) => {
            f.amount = f.amount.checked_add(one).unwrap();
            f.request_hash = modified_hash(f.request_hash);
            Command::FundsIn(f)
        }
        Command::FundsOutReserve(mut f) => {
            f.amount = f.amount.checked_add(one).unwrap();
            f.request_hash = modified_hash(f.request_hash);
            Command::FundsOutReserve(f)
        }
        Command::FundsOutCommit(mut f) => {
            f.request_hash = modified_hash(f.request_hash);
            Command::FundsOutCommit(f)
        }
        Command::FundsOutAbort(mut f) => {
            f.request_hash = modified_hash(f.request_hash);
            Command::FundsOutAbort(f)
        }
        other => other,
    }
}

// ----- the store's view: rows rebuilt from records ---------------------------------

/// The rows a store holds after absorbing every batch's records.
#[derive(Default)]
struct Mirror {
    participants: BTreeMap<ParticipantId, ParticipantRow>,
    accounts: BTreeMap<AccountId, AccountRow>,
    transfers: HashMap<TransferId, TransferRow>,
    finishes: HashMap<TransferId, FinishRow>,
    by_seq: HashMap<u64, TransferId>,
    endpoints: BTreeMap<(ParticipantId, String), EndpointRow>,
    settlement_models: Vec<SettlementModelRow>,
    windows: BTreeMap<u32, WindowRow>,
}

impl Mirror {
    fn absorb(&mut self, records: &[Record]) {
        for record in records {
            match record {
                Record::Participant(row) => {
                    self.participants.insert(row.id, row.clone());
                }
                Record::Account(row) => {
                    self.accounts.insert(row.id, row.clone());
                }
                Record::Transfer(row) => {
                    assert!(
                        !self.transfers.contains_key(&row.transfer_id),
                        "transfer {} recorded twice",
                        row.transfer_id
                    );
                    assert!(
                        self.by_seq.insert(row.seq, row.transfer_id).is_none(),
                        "seq {} reused",
                        row.seq
                    );
                    self.transfers.insert(row.transfer_id, row.clone());
                }
                Record::Endpoint(row) => {
                    self.endpoints
                        .insert((row.participant, row.endpoint_type.clone()), row.clone());
                }
                Record::SettlementModel(row) => self.settlement_models.push(row.clone()),
                Record::AuditEvent(_)
                | Record::CertificatePin(_)
                | Record::CertificateUnpinned(_) => {
                    unreachable!("audited commands and pins are not generated here")
                }
                Record::Party(_) | Record::PartyDeleted(_) => {
                    unreachable!("parties are not generated here")
                }
                Record::Oracle(_) | Record::OracleDeleted(_) | Record::Quote(_) => {
                    unreachable!("oracles are not generated here")
                }
                Record::ProxyMapping(_) | Record::ProxyUnmapped(_) => {
                    unreachable!("the proxy map is checked by tests/proxies.rs")
                }
                Record::ConversionFulfilled(_) | Record::Fxp(_) => {
                    unreachable!("FX is checked by tests/fx.rs")
                }
                Record::PendingChange(_) => {
                    unreachable!("pending changes are checked by tests/audit.rs")
                }
                Record::TransferParties(..) => {
                    unreachable!("the prepares here name no parties")
                }
                Record::Window(row) => {
                    self.windows.insert(row.id, row.clone());
                }
                Record::Content(_)
                | Record::ContentAccounts(_)
                | Record::ContentPairs(_)
                | Record::Settlement(_)
                | Record::Entry(_) => unreachable!("settlements are not generated here"),
                Record::Finish(row) => {
                    let id = *self.by_seq.get(&row.seq).expect("finish of a recorded seq");
                    assert_eq!(
                        self.transfers[&id].state,
                        TransferState::Reserved,
                        "transfer {id} finished although it was recorded final"
                    );
                    assert!(row.state.is_final(), "finish leaves {id} RESERVED");
                    let previous = self.finishes.insert(id, row.clone());
                    assert!(
                        previous.is_none(),
                        "transfer {id} finished twice: {previous:?} then {row:?}"
                    );
                }
            }
        }
    }

    fn state(&self, id: TransferId) -> Option<TransferState> {
        let row = self.transfers.get(&id)?;
        Some(
            self.finishes
                .get(&id)
                .map_or(row.state, |finish| finish.state),
        )
    }

    fn participant_named(&self, name: FspName) -> Option<&ParticipantRow> {
        self.participants.values().find(|row| row.name == name)
    }

    fn owner_name(&self, account: AccountId) -> FspName {
        self.participants[&self.accounts[&account].participant].name
    }

    fn find_account(
        &self,
        participant: ParticipantId,
        currency: Currency,
        kind: AccountKind,
    ) -> Option<&AccountRow> {
        self.accounts.values().find(|row| {
            row.participant == participant && row.currency == currency && row.kind == kind
        })
    }

    fn position_of(&self, name: FspName, currency: Currency) -> Option<&AccountRow> {
        let participant = self.participant_named(name)?;
        self.find_account(participant.id, currency, AccountKind::Position)
    }

    /// A position usable by a new transfer on `side`: the participant's
    /// mode allows that side, and the account is active.
    fn usable_position(
        &self,
        name: FspName,
        currency: Currency,
        side: Side,
    ) -> Option<&AccountRow> {
        let participant = self.participant_named(name)?;
        let allowed = match side {
            Side::Payer => matches!(
                participant.mode,
                ParticipantMode::Active | ParticipantMode::SendOnly
            ),
            Side::Payee => matches!(
                participant.mode,
                ParticipantMode::Active | ParticipantMode::ReceiveOnly
            ),
        };
        if !allowed {
            return None;
        }
        self.find_account(participant.id, currency, AccountKind::Position)
            .filter(|row| row.active)
    }

    fn reconciliation(&self, currency: Currency) -> &AccountRow {
        self.accounts
            .values()
            .find(|row| row.currency == currency && row.kind == AccountKind::HubReconciliation)
            .expect("hub reconciliation account")
    }

    fn next_expiry(&self) -> Option<i64> {
        self.transfers
            .iter()
            .filter(|(id, row)| {
                row.kind == TransferKind::Fspiop
                    && self.state(**id) == Some(TransferState::Reserved)
            })
            .map(|(_, row)| row.expiration_ms)
            .min()
    }

    /// The rows in the snapshot's canonical order.
    fn snapshot(&self) -> Snapshot {
        let mut transfers: Vec<_> = self.transfers.values().cloned().collect();
        transfers.sort_by_key(|row| row.seq);
        let mut finishes: Vec<_> = self.finishes.values().cloned().collect();
        finishes.sort_by_key(|row| row.seq);
        Snapshot {
            participants: self.participants.values().cloned().collect(),
            accounts: self.accounts.values().cloned().collect(),
            transfers,
            finishes,
            endpoints: self.endpoints.values().cloned().collect(),
            settlement_models: self.settlement_models.clone(),
            parties: Vec::new(),
            oracles: Vec::new(),
            quotes: Vec::new(),
            windows: self.windows.values().cloned().collect(),
            ..Snapshot::default()
        }
    }

    /// Effective position and the two limits of a DFSP position account.
    fn headroom(&self, position: &AccountRow) -> (i128, i128, i128) {
        let settlement = self
            .find_account(
                position.participant,
                position.currency,
                AccountKind::Settlement,
            )
            .expect("a position has its settlement account");
        let effective = position.value.units() + position.reserved.units();
        let cover = -(settlement.value.units() + settlement.reserved.units());
        let cap = position.net_debit_cap.unwrap_or(Amount::ZERO).units();
        (effective, cover, cap)
    }

    fn within_limits(&self, position: &AccountRow) -> bool {
        let (effective, cover, cap) = self.headroom(position);
        effective <= cap && effective <= cover
    }
}

// ----- the oracle ---------------------------------------------------------------

#[derive(Debug)]
enum Expect {
    Done,
    Created(usize),
    Rejected(u16),
    Duplicate(TransferId),
    Transfer {
        id: TransferId,
        state: TransferState,
        reason: Option<ErrorCode>,
    },
    Failed {
        id: TransferId,
        state: TransferState,
        code: u16,
    },
    Get(TransferId),
    Expired(Vec<TransferId>),
}

impl Expect {
    /// True when the command must leave the ledger exactly as it was.
    fn changes_nothing(&self) -> bool {
        matches!(
            self,
            Expect::Rejected(_) | Expect::Duplicate(_) | Expect::Get(_)
        ) || matches!(self, Expect::Expired(ids) if ids.is_empty())
    }
}

/// (account, value delta, reserved delta) in units.
type Delta = (AccountId, i128, i128);

fn rejected(code: u16) -> (Expect, Vec<Delta>) {
    (Expect::Rejected(code), vec![])
}

/// Predicts a command's outcome and balance movements from the store's rows.
fn predict(m: &Mirror, command: &Command, now: i64) -> (Expect, Vec<Delta>) {
    match command {
        Command::SetEndpoint { .. }
        | Command::CreateSettlementModel { .. }
        | Command::ReadParticipants { .. }
        | Command::ReadSettlementModels
        | Command::RegisterParty { .. }
        | Command::DeleteParty { .. }
        | Command::ReadParties
        | Command::CreateOracle { .. }
        | Command::UpdateOracle { .. }
        | Command::DeleteOracle { .. }
        | Command::ReadOracles
        | Command::CreateProxy { .. }
        | Command::MapProxy { .. }
        | Command::UnmapProxy { .. }
        | Command::ReadProxyMap
        | Command::ReadTransfer { .. }
        | Command::RecordQuote { .. }
        | Command::AnswerQuote { .. }
        | Command::CloseSettlementWindow { .. }
        | Command::CreateSettlement { .. }
        | Command::UpdateSettlement { .. }
        | Command::AbortSettlement { .. }
        | Command::FinalizeSettlement { .. }
        | Command::ReadSettlementWindows
        | Command::ReadSettlements
        | Command::ReadSettlementReport { .. }
        | Command::Audited { .. }
        | Command::ReadAuditEvents(_)
        | Command::PinCertificate { .. }
        | Command::UnpinCertificate { .. }
        | Command::ReadCertificatePins
        | Command::NoteExternalChange { .. }
        | Command::NoteRefused { .. }
        | Command::PrepareConversion(_)
        | Command::FulfilConversion(_)
        | Command::AbortConversion(_)
        | Command::GetConversion { .. }
        | Command::SetFxpCorridors { .. }
        | Command::ReadFxps
        | Command::KeepPendingChange(_)
        | Command::ReadPendingChanges => {
            unreachable!("reference-data, settlement and FX commands are not generated here")
        }
        Command::CreateHub { .. } | Command::InitNetDebitCap { .. } => (Expect::Done, vec![]),
        Command::CreateHubAccount { .. } => (Expect::Created(1), vec![]),
        Command::CreateParticipant { .. } => (Expect::Created(2), vec![]),
        Command::SetParticipantActive { name, .. } | Command::SetParticipantMode { name, .. } => {
            match m.participant_named(*name) {
                Some(_) => (Expect::Done, vec![]),
                None => rejected(3200),
            }
        }
        Command::SetAccountActive { name, account, .. } => {
            match (m.participant_named(*name), m.accounts.get(account)) {
                (Some(p), Some(a)) if a.participant == p.id => (Expect::Done, vec![]),
                _ => rejected(3200),
            }
        }
        Command::SetNetDebitCap {
            name,
            currency,
            net_debit_cap,
        } => {
            if m.participant_named(*name).is_none() {
                return rejected(3200);
            }
            if m.position_of(*name, *currency).is_none()
                || net_debit_cap.is_negative()
                || *net_debit_cap > Amount::MAX_TRANSFER
            {
                return rejected(3100);
            }
            (Expect::Done, vec![])
        }
        Command::Prepare(p) => {
            let id = p.transfer_id;
            if let Some(row) = m.transfers.get(&id) {
                return if row.request_hash == p.request_hash {
                    (Expect::Duplicate(id), vec![])
                } else {
                    rejected(3106)
                };
            }
            if !p.amount.is_valid_transfer_amount() || p.payer == p.payee {
                return rejected(3100);
            }
            let (Some(payer), Some(_)) = (
                m.usable_position(p.payer, p.currency, Side::Payer),
                m.usable_position(p.payee, p.currency, Side::Payee),
            ) else {
                return rejected(3100);
            };
            if p.expiration_ms <= now {
                return rejected(3303);
            }
            let (effective, cover, cap) = m.headroom(payer);
            let amount = p.amount.units();
            let failed = |code| {
                let state = TransferState::Rejected;
                (Expect::Failed { id, state, code }, vec![])
            };
            if amount > cover - effective {
                failed(4001)
            } else if amount > cap - effective {
                failed(4200)
            } else {
                let expect = Expect::Transfer {
                    id,
                    state: TransferState::Reserved,
                    reason: None,
                };
                (expect, vec![(payer.id, 0, amount)])
            }
        }
        Command::Fulfil(f) => predict_finish(
            m,
            f.transfer_id,
            f.caller,
            FinishKind::Fulfil,
            f.request_hash,
            now,
            |row, now| {
                let (id, amount) = (f.transfer_id, row.amount.units());
                let release = vec![(row.debit, 0, -amount)];
                if now >= row.expiration_ms {
                    let state = TransferState::Expired;
                    (
                        Expect::Failed {
                            id,
                            state,
                            code: 3303,
                        },
                        release,
                    )
                } else if f.fulfilment.map(|f| f.condition()) != Some(row.condition) {
                    let state = TransferState::Aborted;
                    (
                        Expect::Failed {
                            id,
                            state,
                            code: 3100,
                        },
                        release,
                    )
                } else {
                    let expect = Expect::Transfer {
                        id,
                        state: TransferState::Committed,
                        reason: None,
                    };
                    (
                        expect,
                        vec![(row.debit, amount, -amount), (row.credit, -amount, 0)],
                    )
                }
            },
        ),
        Command::Abort(a) => predict_finish(
            m,
            a.transfer_id,
            a.caller,
            FinishKind::Abort,
            a.request_hash,
            now,
            |row, _| {
                if !a.error_code.is_valid() {
                    return rejected(3100);
                }
                let expect = Expect::Transfer {
                    id: a.transfer_id,
                    state: TransferState::Aborted,
                    reason: Some(a.error_code),
                };
                (expect, vec![(row.debit, 0, -row.amount.units())])
            },
        ),
        Command::GetTransfer {
            transfer_id,
            caller,
        } => {
            let Some(row) = m.transfers.get(transfer_id) else {
                return rejected(3208);
            };
            if *caller != m.owner_name(row.debit) && *caller != m.owner_name(row.credit) {
                return rejected(3000);
            }
            (Expect::Get(*transfer_id), vec![])
        }
        Command::Expire => {
            let mut due: Vec<(i64, TransferId)> = m
                .transfers
                .iter()
                .filter(|(id, row)| {
                    row.kind == TransferKind::Fspiop
                        && m.state(**id) == Some(TransferState::Reserved)
                        && row.expiration_ms <= now
                })
                .map(|(id, row)| (row.expiration_ms, *id))
                .collect();
            due.sort();
            let deltas = due
                .iter()
                .map(|(_, id)| {
                    let row = &m.transfers[id];
                    (row.debit, 0, -row.amount.units())
                })
                .collect();
            (
                Expect::Expired(due.into_iter().map(|(_, id)| id).collect()),
                deltas,
            )
        }
        Command::FundsIn(f) | Command::FundsOutReserve(f) => {
            let out = matches!(command, Command::FundsOutReserve(_));
            let id = f.transfer_id;
            if let Some(row) = m.transfers.get(&id) {
                return if row.request_hash == f.request_hash {
                    (Expect::Duplicate(id), vec![])
                } else {
                    rejected(3106)
                };
            }
            let Some(account) = owned(m, f.participant, f.account) else {
                return rejected(3200);
            };
            if account.kind != AccountKind::Settlement
                || account.currency != f.currency
                || !account.active
                || !f.amount.is_valid_transfer_amount()
            {
                return rejected(3100);
            }
            let reconciliation = m.reconciliation(f.currency).id;
            let amount = f.amount.units();
            if !out {
                let expect = Expect::Transfer {
                    id,
                    state: TransferState::Committed,
                    reason: None,
                };
                return (
                    expect,
                    vec![(reconciliation, amount, 0), (account.id, -amount, 0)],
                );
            }
            if account.value.units() + account.reserved.units() + amount > 0 {
                return rejected(4001);
            }
            let expect = Expect::Transfer {
                id,
                state: TransferState::Reserved,
                reason: None,
            };
            (expect, vec![(account.id, 0, amount)])
        }
        Command::FundsOutCommit(f) | Command::FundsOutAbort(f) => {
            let commit = matches!(command, Command::FundsOutCommit(_));
            let id = f.transfer_id;
            let Some(account) = owned(m, f.participant, f.account) else {
                return rejected(3200);
            };
            let Some(row) = m.transfers.get(&id) else {
                return rejected(3208);
            };
            if row.kind != TransferKind::FundsOut || row.debit != account.id {
                return rejected(3100);
            }
            let kind = if commit {
                FinishKind::Fulfil
            } else {
                FinishKind::Abort
            };
            if let Some(finish) = m.finishes.get(&id).filter(|finish| finish.kind == kind) {
                return if finish.request_hash == f.request_hash {
                    (Expect::Duplicate(id), vec![])
                } else {
                    rejected(3106)
                };
            }
            if m.state(id) != Some(TransferState::Reserved) {
                return rejected(3100);
            }
            let amount = row.amount.units();
            if commit {
                let expect = Expect::Transfer {
                    id,
                    state: TransferState::Committed,
                    reason: None,
                };
                (
                    expect,
                    vec![(row.debit, amount, -amount), (row.credit, -amount, 0)],
                )
            } else {
                let expect = Expect::Transfer {
                    id,
                    state: TransferState::Aborted,
                    reason: None,
                };
                (expect, vec![(row.debit, 0, -amount)])
            }
        }
    }
}

fn owned(m: &Mirror, name: FspName, account: AccountId) -> Option<&AccountRow> {
    let participant = m.participant_named(name)?;
    m.accounts
        .get(&account)
        .filter(|row| row.participant == participant.id)
}

/// The common part of fulfil and abort: lookup, payee check, duplicate check,
/// state check; `then` predicts the finish of a reserved transfer.
fn predict_finish(
    m: &Mirror,
    id: TransferId,
    caller: FspName,
    kind: FinishKind,
    request_hash: RequestHash,
    now: i64,
    then: impl FnOnce(&TransferRow, i64) -> (Expect, Vec<Delta>),
) -> (Expect, Vec<Delta>) {
    let Some(row) = m.transfers.get(&id) else {
        return rejected(3208);
    };
    if row.kind != TransferKind::Fspiop || caller != m.owner_name(row.credit) {
        return rejected(3100);
    }
    if let Some(finish) = m.finishes.get(&id).filter(|finish| finish.kind == kind) {
        return if finish.request_hash == request_hash {
            (Expect::Duplicate(id), vec![])
        } else {
            rejected(3106)
        };
    }
    match m.state(id) {
        Some(TransferState::Reserved) => then(row, now),
        Some(TransferState::Expired) => rejected(3303),
        _ => rejected(3100),
    }
}

/// Checks an outcome against the prediction, using the rows after the command.
fn verify(m: &Mirror, command: &Command, expect: &Expect, outcome: &Outcome) {
    let context = || format!("{command:?}\n expected {expect:?}\n got {outcome:?}");
    let check_view = |view: &TransferView, id: TransferId| {
        assert_eq!(view.transfer_id, id, "{}", context());
        let row = &m.transfers[&id];
        assert_eq!(view.amount, row.amount, "{}", context());
        assert_eq!(Some(view.state), m.state(id), "{}", context());
        assert_eq!(view.payer, m.owner_name(row.debit), "{}", context());
        assert_eq!(view.payee, m.owner_name(row.credit), "{}", context());
        assert_eq!(
            view.completed_at_ms.is_some(),
            view.state.is_final(),
            "{}",
            context()
        );
    };
    match (expect, outcome) {
        (Expect::Done, Outcome::Done) => {}
        (Expect::Created(n), Outcome::AccountsCreated(ids)) => {
            assert_eq!(ids.len(), *n, "{}", context())
        }
        (Expect::Rejected(code), Outcome::Rejected(rejection)) => {
            assert_eq!(rejection.code, ErrorCode(*code), "{}", context())
        }
        (Expect::Duplicate(id), Outcome::Duplicate(view)) => check_view(view, *id),
        (Expect::Get(id), Outcome::Transfer(view)) => check_view(view, *id),
        (Expect::Transfer { id, state, reason }, Outcome::Transfer(view)) => {
            check_view(view, *id);
            assert_eq!(
                (view.state, view.reason),
                (*state, *reason),
                "{}",
                context()
            );
            if let Command::Fulfil(f) = command {
                assert_eq!(view.fulfilment, f.fulfilment, "{}", context());
            }
        }
        (Expect::Failed { id, state, code }, Outcome::Failed { transfer, error }) => {
            check_view(transfer, *id);
            assert_eq!(transfer.state, *state, "{}", context());
            assert_eq!(error.code, ErrorCode(*code), "{}", context());
            assert_eq!(transfer.reason, Some(ErrorCode(*code)), "{}", context());
            assert_eq!(transfer.fulfilment, None, "{}", context());
        }
        (Expect::Expired(ids), Outcome::Expired(views)) => {
            let got: Vec<_> = views.iter().map(|v| v.transfer_id).collect();
            assert_eq!(&got, ids, "{}", context());
            for view in views {
                check_view(view, view.transfer_id);
                assert_eq!(view.state, TransferState::Expired, "{}", context());
                assert_eq!(view.reason, Some(ErrorCode(3303)), "{}", context());
            }
        }
        _ => panic!("outcome mismatch: {}", context()),
    }
    assert_eq!(
        outcome.error_code().is_some(),
        matches!(expect, Expect::Rejected(_) | Expect::Failed { .. })
    );
}

/// Every account's balances moved by exactly `deltas`.
fn verify_deltas(
    before: &BTreeMap<AccountId, AccountRow>,
    after: &BTreeMap<AccountId, AccountRow>,
    deltas: &[Delta],
    command: &Command,
) {
    for (id, row) in after {
        let Some(old) = before.get(id) else { continue };
        let (mut value, mut reserved) = (old.value.units(), old.reserved.units());
        for &(_, dv, dr) in deltas.iter().filter(|d| d.0 == *id) {
            value += dv;
            reserved += dr;
        }
        assert_eq!(
            (row.value.units(), row.reserved.units()),
            (value, reserved),
            "account {} after {command:?} (deltas {deltas:?})",
            id.0
        );
    }
}

/// The position account whose limit this command may lower legitimately:
/// a cap change, or a funds out hold on the settlement account (Mojaloop's
/// funds out checks only the settlement balance, not the position).
fn lowers_limit_of(m: &Mirror, command: &Command, outcome: &Outcome) -> Option<AccountId> {
    match (command, outcome) {
        (Command::SetNetDebitCap { name, currency, .. }, Outcome::Done) => {
            m.position_of(*name, *currency).map(|row| row.id)
        }
        (Command::FundsOutReserve(f), Outcome::Transfer(_)) => {
            m.position_of(f.participant, f.currency).map(|row| row.id)
        }
        _ => None,
    }
}

// ----- the run -------------------------------------------------------------------

const HUB: &str = "Hub";

fn setup(scenario: &Scenario, gen: &mut Gen) -> Vec<Command> {
    let mut commands = vec![Command::CreateHub { name: fsp(HUB) }];
    let mut next_account = 0u32;
    let mut account = || {
        next_account += 1;
        AccountId(next_account)
    };
    for &currency in &gen.currencies {
        for kind in [
            AccountKind::HubMultilateralSettlement,
            AccountKind::HubReconciliation,
        ] {
            commands.push(Command::CreateHubAccount { currency, kind });
            account();
        }
    }
    for (i, spec) in scenario.dfsps.iter().enumerate() {
        let name = fsp(&format!("dfsp{i}"));
        let mut accounts = vec![None; gen.currencies.len()];
        for (c, &currency) in gen.currencies.iter().enumerate() {
            if c > 0 && !spec.second {
                continue;
            }
            commands.push(Command::CreateParticipant { name, currency });
            accounts[c] = Some((account(), account()));
        }
        gen.dfsps.push(GenDfsp { name, accounts });
    }
    let mut funds_id = 1_000u128;
    for (spec, dfsp) in scenario.dfsps.iter().zip(&gen.dfsps) {
        for (c, &currency) in gen.currencies.iter().enumerate() {
            let Some((_, settlement)) = dfsp.accounts[c] else {
                continue;
            };
            if spec.funds[c] > 0 {
                funds_id += 1;
                commands.push(Command::FundsIn(Funds {
                    transfer_id: TransferId::new(funds_id),
                    participant: dfsp.name,
                    account: settlement,
                    amount: whole(spec.funds[c]),
                    currency,
                    memo: FundsMemo::default(),
                    request_hash: hash(1),
                }));
            }
            if let Some(cap) = spec.caps[c] {
                commands.push(Command::InitNetDebitCap {
                    name: dfsp.name,
                    currency,
                    net_debit_cap: whole(cap),
                });
            }
        }
    }
    commands
}

type Batch = (i64, Vec<Command>, BatchResult);

fn transfer_states(snapshot: &Snapshot) -> HashMap<TransferId, TransferState> {
    let finishes: HashMap<u64, TransferState> = snapshot
        .finishes
        .iter()
        .map(|finish| (finish.seq, finish.state))
        .collect();
    let mut states = HashMap::new();
    for row in &snapshot.transfers {
        let state = match finishes.get(&row.seq) {
            Some(&state) => {
                assert_eq!(row.state, TransferState::Reserved);
                state
            }
            None => row.state,
        };
        assert!(
            states.insert(row.transfer_id, state).is_none(),
            "transfer {} appears twice",
            row.transfer_id
        );
    }
    assert_eq!(
        finishes.len(),
        snapshot.finishes.len(),
        "two finishes share a seq"
    );
    states
}

fn run(scenario: Scenario) {
    let mut currencies = vec![usd()];
    if scenario.two_currencies {
        currencies.push(eur());
    }
    let mut gen = Gen {
        currencies,
        dfsps: Vec::new(),
        prepared: HashMap::new(),
        funds_out: HashMap::new(),
        prepared_order: Vec::new(),
        funds_out_order: Vec::new(),
        last_fresh: 10_000,
        history: Vec::new(),
    };
    let mut main = Ledger::new(Limits::default());
    let mut shadow = Ledger::new(Limits::default());
    let mut shadow_rows = Mirror::default();
    let mut main_rows = Mirror::default();
    let mut over_limit: HashSet<AccountId> = HashSet::new();
    let mut last_states: HashMap<TransferId, TransferState> = HashMap::new();
    let mut log: Vec<Batch> = Vec::new();
    let mut restored: Option<Ledger> = None;
    let restore_at = scenario.restore_at % scenario.batches.len();
    let horizon_limits = Limits {
        transfer_retention_ms: Some([0, 300, 2_000][scenario.restore_at % 3]),
        max_finished_in_memory: scenario.restore_at / 3 % 6,
        ..Limits::default()
    };
    let mut horizon = Hub {
        ledger: Ledger::new(horizon_limits),
        now: T0,
        name: fsp("Hub"),
        store: StoreCopy::default(),
    };

    let mut now = T0;
    let setup_batch = setup(&scenario, &mut gen);
    let batches = std::iter::once((0, None)).chain(
        scenario
            .batches
            .iter()
            .map(|(step, ops)| (*step, Some(ops))),
    );
    for (index, (step, ops)) in batches.enumerate() {
        now += step;
        let commands: Vec<Command> = match ops {
            None => setup_batch.clone(),
            Some(ops) => ops
                .iter()
                .map(|op| gen.command(op, now, &main_rows))
                .collect(),
        };
        let result = main.apply_batch(now, &commands);
        assert_eq!(result.outcomes.len(), commands.len());
        assert_eq!(main.now_ms(), now);

        // Each command alone on the shadow ledger, against the oracle.
        for (command, outcome) in commands.iter().zip(&result.outcomes) {
            let (expect, deltas) = predict(&shadow_rows, command, now);
            let before = expect.changes_nothing().then(|| shadow.snapshot());
            let accounts_before = shadow_rows.accounts.clone();
            let single = shadow.apply_batch(now, std::slice::from_ref(command));
            assert_eq!(
                &single.outcomes[0], outcome,
                "{command:?}: one batch and single commands disagree"
            );
            shadow_rows.absorb(&single.records);
            verify(&shadow_rows, command, &expect, outcome);
            verify_deltas(&accounts_before, &shadow_rows.accounts, &deltas, command);
            if let Some(before) = before {
                assert!(
                    single.records.is_empty(),
                    "{command:?} -> {outcome:?} wrote {:?}",
                    single.records
                );
                assert_eq!(
                    shadow.snapshot(),
                    before,
                    "{command:?} -> {outcome:?} changed the ledger"
                );
            }
            if let (Command::Prepare(p), Outcome::Transfer(view)) = (command, outcome) {
                // A reservation never takes the payer past its limits.
                assert_eq!(view.state, TransferState::Reserved);
                let position = shadow_rows.position_of(p.payer, p.currency).unwrap();
                let (effective, cover, cap) = shadow_rows.headroom(position);
                assert!(
                    effective <= cap && effective <= cover,
                    "{command:?} reserved past the limits: position {effective}, cap {cap}, cover {cover}"
                );
            }
            let lowered = lowers_limit_of(&shadow_rows, command, outcome);
            for position in shadow_rows
                .accounts
                .values()
                .filter(|row| row.kind == AccountKind::Position)
            {
                if shadow_rows.within_limits(position) {
                    over_limit.remove(&position.id);
                } else if !over_limit.contains(&position.id) {
                    assert_eq!(
                        lowered,
                        Some(position.id),
                        "{command:?} -> {outcome:?} took account {} past its limits: {:?}",
                        position.id.0,
                        shadow_rows.headroom(position)
                    );
                    over_limit.insert(position.id);
                }
            }
            assert_eq!(shadow.next_expiry_ms(), shadow_rows.next_expiry());
        }

        // The batch as a whole.
        main.check_balances().expect("balances after the batch");
        let snapshot = main.snapshot();
        let problems = snapshot.audit();
        assert!(
            problems.is_empty(),
            "audit after batch {index}: {problems:?}"
        );
        assert_eq!(
            snapshot,
            shadow.snapshot(),
            "batched and single ledgers differ"
        );
        main_rows.absorb(&result.records);
        assert_eq!(
            main_rows.snapshot(),
            snapshot,
            "the batch records do not rebuild the snapshot"
        );
        assert_eq!(main.next_expiry_ms(), main_rows.next_expiry());
        assert_eq!(main.transfer_count(), snapshot.transfers.len());
        for position in snapshot
            .accounts
            .iter()
            .filter(|row| row.kind == AccountKind::Position && !over_limit.contains(&row.id))
        {
            let (effective, cover, cap) = main_rows.headroom(position);
            assert!(
                effective <= cap && effective <= cover,
                "account {} is past its limits: position {effective}, cap {cap}, cover {cover}",
                position.id.0
            );
        }
        let states = transfer_states(&snapshot);
        for (id, old) in &last_states {
            let new = states.get(id).copied();
            assert!(new.is_some(), "transfer {id} disappeared");
            if old.is_final() {
                assert_eq!(new, Some(*old), "final transfer {id} changed");
            }
        }
        last_states = states;

        // Restore from the rows gives the same ledger.
        let copy = Ledger::restore(snapshot.clone(), Limits::default()).expect("restore");
        assert_eq!(copy.snapshot(), snapshot, "restore changed the state");
        assert_eq!(copy.next_expiry_ms(), main.next_expiry_ms());
        assert_eq!(copy.hub_name(), main.hub_name());
        assert_eq!(copy.transfer_count(), main.transfer_count());
        if let Some(restored) = restored.as_mut() {
            let again = restored.apply_batch(now, &commands);
            assert_eq!(again.outcomes, result.outcomes, "restored ledger diverged");
            assert_eq!(again.records, result.records, "restored ledger diverged");
        }
        if index == restore_at {
            restored = Some(copy);
        }
        // The same batch on the ledger with a horizon: the same answers.
        horizon.now = now;
        let far = horizon.batch(&commands);
        assert_eq!(
            far.outcomes, result.outcomes,
            "the horizon changed an answer"
        );
        assert_eq!(far.records, result.records, "the horizon changed a record");
        let durable = horizon.ledger.batches_applied();
        horizon.ledger.evict(now, durable, usize::MAX);
        let held = horizon.ledger.snapshot();
        let all: HashMap<TransferId, &TransferRow> = snapshot
            .transfers
            .iter()
            .map(|row| (row.transfer_id, row))
            .collect();
        for row in &held.transfers {
            assert_eq!(Some(&row), all.get(&row.transfer_id), "held otherwise");
        }
        assert_eq!(held.accounts, snapshot.accounts);
        assert_eq!(horizon.ledger.transfer_count(), held.transfers.len());
        if index == restore_at {
            horizon.ledger = Ledger::restore(snapshot.clone(), horizon_limits).expect("restore");
            assert_eq!(horizon.ledger.snapshot(), snapshot);
        }
        log.push((now, commands, result));
    }
    if let Some(restored) = restored {
        assert_eq!(restored.snapshot(), main.snapshot());
    }

    // Determinism: the same batches on a fresh ledger.
    let mut fresh = Ledger::new(Limits::default());
    for (now, commands, result) in &log {
        let again = fresh.apply_batch(*now, commands);
        assert_eq!(again.outcomes, result.outcomes, "replay diverged");
        assert_eq!(again.records, result.records, "replay diverged");
    }
    assert_eq!(fresh.snapshot(), main.snapshot());
}

proptest! {
    // PROPTEST_CASES=5000 runs a deeper search.
    #![proptest_config(Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|cases| cases.parse().ok())
            .unwrap_or(64),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn random_command_sequences_keep_the_ledger_sound(scenario in scenario()) {
        run(scenario);
    }
}

/// The oracle itself on a fixed, hand-checked sequence (guards the test code).
#[test]
fn oracle_agrees_on_a_simple_sequence() {
    let scenario = Scenario {
        two_currencies: false,
        dfsps: vec![
            DfspSpec {
                second: false,
                funds: [100, 0],
                caps: [Some(80), None],
            },
            DfspSpec {
                second: false,
                funds: [0, 0],
                caps: [None, None],
            },
        ],
        batches: vec![
            (
                0,
                vec![
                    Op::Prepare {
                        fresh: false,
                        id: 1,
                        payer: 0,
                        payee: 1,
                        cur: 0,
                        amount: whole(50).units(),
                        exact: None,
                        secret: 1,
                        expires_in: 1_000,
                    },
                    Op::Prepare {
                        fresh: false,
                        id: 2,
                        payer: 0,
                        payee: 1,
                        cur: 0,
                        amount: whole(50).units(),
                        exact: None,
                        secret: 1,
                        expires_in: 1_000,
                    },
                    Op::Resend(0),
                    Op::Fulfil {
                        id: 1,
                        recent: false,
                        by_payee: true,
                        other: 0,
                        right: true,
                        salt: 0,
                    },
                    Op::Modify(2),
                ],
            ),
            (2_000, vec![Op::Expire, Op::Get { id: 1, who: 0 }]),
        ],
        restore_at: 0,
    };
    run(scenario);
}
