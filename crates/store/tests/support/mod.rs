//! The store tests' harness: a ledger driven by random operations, its
//! records committed to the SQLite store and, where a test asks, to a
//! PostgreSQL store as well, batch by batch.
#![allow(dead_code)]

use ledger::*;
use proptest::prelude::*;
use store::pg::PgStore;
use store::sqlite::{SqliteOptions, SqliteStore, TransferLookup};
use store::Store;

pub const T0: i64 = 1_700_000_000_000;

pub fn fsp(name: &str) -> FspName {
    FspName::new(name).expect("valid FSP name")
}

pub fn usd() -> Currency {
    Currency::parse("USD").expect("currency")
}

pub fn eur() -> Currency {
    Currency::parse("EUR").expect("currency")
}

/// A deferred net settlement model of USD positions, reset at settlement.
pub fn deferred_net_usd(require_liquidity_check: bool) -> ModelRules {
    ModelRules {
        granularity: Granularity::Net,
        interchange: Interchange::Multilateral,
        delay: Delay::Deferred,
        currency: Some(usd()),
        ledger_account_type: AccountKind::Position,
        settlement_account_type: AccountKind::Settlement,
        auto_position_reset: true,
        require_liquidity_check,
    }
}

/// The FXP every harness has: it converts USD into EUR.
pub fn fxp() -> FspName {
    fsp("fxp")
}

/// A conversion's fulfilment (the FXP's), and a transfer's (the payee's).
pub const CONVERSION_PREIMAGE: [u8; 32] = [5; 32];
pub const TRANSFER_PREIMAGE: [u8; 32] = [9; 32];

/// What a test does to the hub, one batch each.
#[derive(Clone, Debug)]
pub enum Op {
    /// A prepare from DFSP `payer` to the next one; amounts above the
    /// liquidity are rejected at prepare (a REJECTED row, no finish).
    Prepare {
        payer: u8,
        amount: i64,
        ttl_ms: i64,
    },
    /// Fulfil, abort: the `n`-th reserved transfer (modulo).
    Fulfil(usize),
    Abort(usize),
    /// Moves the clock and expires what is due.
    Advance(i64),
    CloseWindow,
    FundsOut {
        dfsp: u8,
        commit: bool,
    },
    /// Advances the stored snapshot to `now - behind_ms`.
    Snapshot {
        behind_ms: i64,
    },
    /// A conversion (`POST /fxTransfers`) from DFSP `payer`'s USD to the
    /// FXP, into EUR for a transfer to the next DFSP; amounts above the
    /// payer's liquidity are rejected at prepare.
    Convert {
        payer: u8,
        amount: i64,
        ttl_ms: i64,
    },
    /// The FXP answers the `n`-th conversion awaiting it (modulo):
    /// accepts it, or aborts it (`PUT /fxTransfers/{ID}/error`).
    FxpAnswer {
        n: usize,
        accept: bool,
    },
    /// The transfer the `n`-th accepted conversion depends on is prepared
    /// (then fulfilled or aborted by its payee as any reserved transfer).
    Dependent(usize),
    /// The FXP's corridors: USD into EUR, or none (withdrawn).
    Corridors(bool),
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, prop_oneof![9 => 1i64..50, 1 => 5_000i64..6_000], prop_oneof![4 => 100i64..2_000, 1 => 50_000i64..100_000])
            .prop_map(|(payer, amount, ttl_ms)| Op::Prepare { payer, amount, ttl_ms }),
        4 => any::<usize>().prop_map(Op::Fulfil),
        1 => any::<usize>().prop_map(Op::Abort),
        3 => (1i64..3_000).prop_map(Op::Advance),
        1 => Just(Op::CloseWindow),
        1 => (0u8..3, any::<bool>()).prop_map(|(dfsp, commit)| Op::FundsOut { dfsp, commit }),
        2 => (0i64..5_000).prop_map(|behind_ms| Op::Snapshot { behind_ms }),
        // Longer lived than transfers: a conversion takes three more steps
        // to commit (the FXP's answer, its transfer's prepare and fulfil).
        3 => (0u8..3, prop_oneof![9 => 1i64..50, 1 => 5_000i64..6_000], prop_oneof![1 => 100i64..2_000, 3 => 50_000i64..100_000])
            .prop_map(|(payer, amount, ttl_ms)| Op::Convert { payer, amount, ttl_ms }),
        4 => (any::<usize>(), prop::bool::weighted(0.8)).prop_map(|(n, accept)| Op::FxpAnswer { n, accept }),
        4 => any::<usize>().prop_map(Op::Dependent),
        1 => any::<bool>().prop_map(Op::Corridors),
    ]
}

/// A conversion the harness made, and what its dependent transfer will be.
#[derive(Clone, Copy, Debug)]
pub struct Conversion {
    pub commit_request_id: TransferId,
    pub determining_transfer_id: TransferId,
    pub initiating: FspName,
    pub payee: FspName,
    pub target_amount: Amount,
}

pub struct Harness {
    pub ledger: Ledger,
    pub store: SqliteStore,
    /// Receives every batch the SQLite store does, when present.
    pub pg: Option<PgStore>,
    dir: std::path::PathBuf,
    pub now: i64,
    pub dfsps: Vec<(FspName, AccountId)>,
    pub reserved: Vec<(TransferId, FspName)>,
    pub funds_out: Vec<(TransferId, usize)>,
    /// Conversions reserved, awaiting the FXP.
    pub conversions: Vec<Conversion>,
    /// Conversions the FXP accepted, awaiting their dependent transfer.
    pub accepted: Vec<Conversion>,
    pub next_id: u128,
    pub last_cut: i64,
    /// A PostgreSQL commit that fails transiently is tried again, as the
    /// engine does, and counted here; otherwise it panics.
    pub pg_retried: Option<u32>,
}

impl Harness {
    /// The data directory of the SQLite store.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub fn new(dir: &std::path::Path) -> Harness {
        Harness::with_pg(dir, None)
    }

    /// Also commits every batch to `pg`.
    pub fn with_pg(dir: &std::path::Path, pg: Option<PgStore>) -> Harness {
        Harness::with_search_pass(dir, pg, store::search::SearchPass::default())
    }

    /// Both stores file transfers for search by `pass`.
    pub fn with_search_pass(
        dir: &std::path::Path,
        mut pg: Option<PgStore>,
        pass: store::search::SearchPass,
    ) -> Harness {
        let store = SqliteStore::open(
            dir,
            SqliteOptions {
                fsync: false,
                search_pass: pass,
                ..SqliteOptions::default()
            },
        )
        .expect("open");
        if let Some(pg) = pg.as_mut() {
            pg.set_search_pass(pass);
        }
        let mut harness = Harness {
            ledger: Ledger::new(Limits::default()),
            store,
            pg,
            dir: dir.to_path_buf(),
            now: T0,
            dfsps: Vec::new(),
            reserved: Vec::new(),
            funds_out: Vec::new(),
            conversions: Vec::new(),
            accepted: Vec::new(),
            next_id: 1,
            last_cut: i64::MIN,
            pg_retried: None,
        };
        harness.apply(vec![Command::CreateHub { name: fsp("Hub") }]);
        for currency in [usd(), eur()] {
            for kind in [
                AccountKind::HubMultilateralSettlement,
                AccountKind::HubReconciliation,
            ] {
                harness.apply(vec![Command::CreateHubAccount { currency, kind }]);
            }
        }
        for name in ["dfspa", "dfspb", "dfspc"] {
            let name = fsp(name);
            let settlement = harness.participant(name, usd(), 1_000);
            harness.dfsps.push((name, settlement));
            // Payees of the transfers conversions depend on.
            harness.participant(name, eur(), 0);
        }
        harness.participant(fxp(), usd(), 0);
        harness.participant(fxp(), eur(), 1_000);
        harness.run(Op::Corridors(true));
        harness
    }

    /// Accounts in `currency` for `name` (created if new), `liquidity`
    /// funded in and as its net debit cap; its settlement account.
    fn participant(&mut self, name: FspName, currency: Currency, liquidity: i64) -> AccountId {
        let outcomes = self.apply(vec![Command::CreateParticipant { name, currency }]);
        let Outcome::AccountsCreated(ids) = &outcomes[0] else {
            panic!("{outcomes:?}");
        };
        let settlement = ids[1];
        if liquidity > 0 {
            let transfer_id = self.id();
            let funds = Funds {
                participant: name,
                account: settlement,
                currency,
                ..self.funds_into(transfer_id, settlement, liquidity)
            };
            let outcomes = self.apply(vec![Command::FundsIn(funds)]);
            assert!(
                matches!(&outcomes[0], Outcome::Transfer(view) if view.state == TransferState::Committed),
                "{outcomes:?}"
            );
        }
        let outcomes = self.apply(vec![Command::InitNetDebitCap {
            name,
            currency,
            net_debit_cap: Amount::from_whole(liquidity),
        }]);
        assert_eq!(outcomes[0], Outcome::Done);
        settlement
    }

    fn funds_into(&self, transfer_id: TransferId, account: AccountId, amount: i64) -> Funds {
        Funds {
            transfer_id,
            participant: fsp("nobody"),
            account,
            amount: Amount::from_whole(amount),
            currency: usd(),
            memo: FundsMemo {
                external_reference: "ref".into(),
                reason: "test".into(),
            },
            request_hash: RequestHash([7; 32]),
        }
    }

    fn id(&mut self) -> TransferId {
        self.next_id += 1;
        TransferId::new(self.next_id)
    }

    fn funds(&self, transfer_id: TransferId, dfsp: usize, amount: i64) -> Funds {
        Funds {
            participant: self.dfsps[dfsp].0,
            ..self.funds_into(transfer_id, self.dfsps[dfsp].1, amount)
        }
    }

    pub fn apply(&mut self, commands: Vec<Command>) -> Vec<Outcome> {
        let result = self.ledger.apply_batch(self.now, &commands);
        self.store.commit(&[&result.records]).expect("commit");
        if let Some(pg) = &mut self.pg {
            match (pg.commit(&[&result.records]), &mut self.pg_retried) {
                (Ok(()), _) => {}
                (Err(error), Some(retried)) if error.transient => {
                    *retried += 1;
                    pg.commit(&[&result.records])
                        .expect("commit to PostgreSQL, tried again");
                }
                (Err(error), _) => panic!("commit to PostgreSQL: {error:?}"),
            }
        }
        result.outcomes
    }

    /// The id of the settlement window open now, if one is.
    pub fn open_window(&mut self) -> Option<u32> {
        let outcomes = self.apply(vec![Command::ReadSettlementWindows]);
        let Outcome::SettlementWindows(windows) = &outcomes[0] else {
            panic!("{outcomes:?}");
        };
        windows
            .iter()
            .find(|w| w.row.state.as_str() == "OPEN")
            .map(|open| open.row.id)
    }

    /// A reader of the SQLite store.
    pub fn lookup(&self) -> TransferLookup {
        TransferLookup::open(&self.dir).expect("open a reader")
    }

    pub fn run(&mut self, op: Op) {
        match op {
            Op::Prepare {
                payer,
                amount,
                ttl_ms,
            } => {
                let transfer_id = self.id();
                let payee = self.dfsps[(payer as usize + 1) % self.dfsps.len()].0;
                let payer = self.dfsps[payer as usize].0;
                let outcomes = self.apply(vec![Command::Prepare(Prepare {
                    transfer_id,
                    payer,
                    payee,
                    amount: Amount::from_whole(amount),
                    currency: usd(),
                    condition: Fulfilment::from_preimage(TRANSFER_PREIMAGE).condition(),
                    expiration_ms: self.now + ttl_ms,
                    request_hash: RequestHash([1; 32]),
                    wire_version: 0x11,
                    parties: parties_of(Amount::from_whole(amount)).map(std::sync::Arc::new),
                })]);
                if matches!(&outcomes[0], Outcome::Transfer(view) if view.state == TransferState::Reserved)
                {
                    self.reserved.push((transfer_id, payee));
                }
            }
            Op::Fulfil(n) | Op::Abort(n) if !self.reserved.is_empty() => {
                let (transfer_id, payee) = self.reserved.remove(n % self.reserved.len());
                let command = match op {
                    Op::Fulfil(_) => Command::Fulfil(Fulfil {
                        transfer_id,
                        caller: payee,
                        fulfilment: Some(Fulfilment::from_preimage(TRANSFER_PREIMAGE)),
                        destination: None,
                        request_hash: RequestHash([2; 32]),
                    }),
                    _ => Command::Abort(Abort {
                        transfer_id,
                        caller: payee,
                        error_code: ErrorCode(5101),
                        destination: None,
                        request_hash: RequestHash([3; 32]),
                    }),
                };
                self.apply(vec![command]);
            }
            Op::Fulfil(_) | Op::Abort(_) => {}
            Op::Advance(ms) => {
                self.now += ms;
                self.apply(vec![Command::Expire]);
            }
            Op::CloseWindow => {
                if let Some(id) = self.open_window() {
                    self.apply(vec![Command::CloseSettlementWindow {
                        id,
                        reason: "test".into(),
                    }]);
                }
            }
            Op::FundsOut { dfsp, commit } => match self.funds_out.pop() {
                Some((transfer_id, dfsp)) => {
                    let finish = FundsFinish {
                        transfer_id,
                        participant: self.dfsps[dfsp].0,
                        account: self.dfsps[dfsp].1,
                        request_hash: RequestHash([8; 32]),
                    };
                    self.apply(vec![match commit {
                        true => Command::FundsOutCommit(finish),
                        false => Command::FundsOutAbort(finish),
                    }]);
                }
                None => {
                    let transfer_id = self.id();
                    let funds = self.funds(transfer_id, dfsp as usize, 1);
                    self.apply(vec![Command::FundsOutReserve(funds)]);
                    self.funds_out.push((transfer_id, dfsp as usize));
                }
            },
            Op::Snapshot { behind_ms } => self.snapshot(self.now - behind_ms),
            Op::Convert {
                payer,
                amount,
                ttl_ms,
            } => {
                let conversion = Conversion {
                    commit_request_id: self.id(),
                    determining_transfer_id: self.id(),
                    initiating: self.dfsps[payer as usize].0,
                    payee: self.dfsps[(payer as usize + 1) % self.dfsps.len()].0,
                    target_amount: Amount::from_whole(amount * 9 / 10 + 1),
                };
                let outcomes =
                    self.apply(vec![self.prepare_conversion(conversion, amount, ttl_ms)]);
                if matches!(&outcomes[0], Outcome::Transfer(view) if view.state == TransferState::Reserved)
                {
                    self.conversions.push(conversion);
                }
            }
            Op::FxpAnswer { n, accept } if !self.conversions.is_empty() => {
                let conversion = self.conversions.remove(n % self.conversions.len());
                let outcomes = self.apply(vec![self.fxp_answer(conversion, accept)]);
                let accepted = matches!(&outcomes[0], Outcome::Transfer(view)
                    if view.state == TransferState::Reserved);
                if accepted {
                    self.accepted.push(conversion);
                }
            }
            Op::FxpAnswer { .. } => {}
            Op::Dependent(n) if !self.accepted.is_empty() => {
                let conversion = self.accepted.remove(n % self.accepted.len());
                let outcomes = self.apply(vec![self.dependent(conversion)]);
                if matches!(&outcomes[0], Outcome::Transfer(view) if view.state == TransferState::Reserved)
                {
                    self.reserved
                        .push((conversion.determining_transfer_id, conversion.payee));
                }
            }
            Op::Dependent(_) => {}
            Op::Corridors(offered) => {
                let corridors = match offered {
                    true => vec![Corridor {
                        source: usd(),
                        target: eur(),
                    }],
                    false => vec![],
                };
                self.apply(vec![Command::SetFxpCorridors {
                    name: fxp(),
                    corridors,
                }]);
            }
        }
    }

    /// `POST /fxTransfers` for `conversion`, of `amount` USD.
    pub fn prepare_conversion(&self, conversion: Conversion, amount: i64, ttl_ms: i64) -> Command {
        Command::PrepareConversion(PrepareConversion {
            commit_request_id: conversion.commit_request_id,
            initiating: conversion.initiating,
            fxp: fxp(),
            source_amount: Amount::from_whole(amount),
            source_currency: usd(),
            terms: ConversionTerms {
                determining_transfer_id: conversion.determining_transfer_id,
                target_currency: eur(),
                target_amount: conversion.target_amount,
            },
            condition: Fulfilment::from_preimage(CONVERSION_PREIMAGE).condition(),
            expiration_ms: self.now + ttl_ms,
            request_hash: RequestHash([0xC1; 32]),
            wire_version: 0x20,
        })
    }

    /// The FXP's `PUT /fxTransfers/{ID}` (accepting) or `…/error`.
    pub fn fxp_answer(&self, conversion: Conversion, accept: bool) -> Command {
        match accept {
            true => Command::FulfilConversion(FulfilConversion {
                commit_request_id: conversion.commit_request_id,
                caller: fxp(),
                fulfilment: Some(Fulfilment::from_preimage(CONVERSION_PREIMAGE)),
                destination: Some(conversion.initiating),
                request_hash: RequestHash([0xC2; 32]),
            }),
            false => Command::AbortConversion(Abort {
                transfer_id: conversion.commit_request_id,
                caller: fxp(),
                error_code: ErrorCode(5001),
                destination: None,
                request_hash: RequestHash([0xC3; 32]),
            }),
        }
    }

    /// `POST /transfers` of the transfer `conversion` depends on: from the
    /// initiating DFSP (paid by the FXP's EUR position) to its payee.
    pub fn dependent(&self, conversion: Conversion) -> Command {
        Command::Prepare(Prepare {
            transfer_id: conversion.determining_transfer_id,
            payer: conversion.initiating,
            payee: conversion.payee,
            amount: conversion.target_amount,
            currency: eur(),
            condition: Fulfilment::from_preimage(TRANSFER_PREIMAGE).condition(),
            expiration_ms: self.now + 60_000,
            request_hash: RequestHash([0xC4; 32]),
            wire_version: 0x20,
            parties: parties_of(conversion.target_amount).map(std::sync::Arc::new),
        })
    }

    /// Advances the stored history snapshot to `cut_ms`, on both stores
    /// alike: the same algorithm over the same rows gives the same
    /// snapshot.
    pub fn snapshot(&mut self, cut_ms: i64) {
        let snapshot = self
            .store
            .advance_history_snapshot(cut_ms)
            .expect("advance the snapshot");
        if let Some(pg) = &mut self.pg {
            // PostgreSQL's advance is a commit (of no records), which
            // carries the writer's pass when one is due: SQLite's too, so
            // that both pass at the same commits (the search keys compared
            // between them depend on it).
            self.store.commit(&[]).expect("an empty commit");
            let on_pg = pg
                .advance_history_snapshot(cut_ms)
                .expect("advance the snapshot on PostgreSQL");
            assert_eq!(on_pg, snapshot, "the backends' snapshots differ");
            assert_eq!(
                pg.history_snapshot().expect("read it back"),
                Some(snapshot.clone()),
                "PostgreSQL stored another snapshot than it computed"
            );
        }
        self.last_cut = snapshot.cut_ms;
    }
}

/// A tampered history snapshot is caught: the check against the whole
/// history (`kasi audit`'s) names a difference, and the audit before
/// serving refuses what a load from it gives.
pub fn assert_tampered_snapshot_caught(
    check: Option<store::history::HistoryCheck>,
    through_seq: u64,
    loaded: Snapshot,
    limits: Limits,
) {
    let (through, verdict) = check.expect("a snapshot");
    assert_eq!(through, through_seq);
    assert!(verdict.is_err(), "the tampered snapshot passed the check");
    let problem = Ledger::restore(loaded, limits).err().expect("refused");
    assert!(problem.contains("does not add up"), "{problem}");
}

/// `count` prepares among the DFSPs, every other one fulfilled.
pub fn some_transfers(harness: &mut Harness, count: usize) {
    for n in 0..count {
        harness.run(Op::Prepare {
            payer: (n % 3) as u8,
            amount: 1 + n as i64 % 7,
            ttl_ms: 60_000,
        });
        if n % 2 == 0 {
            harness.run(Op::Fulfil(n));
        }
    }
}

/// A transfer's seq and search columns: payer, payee, currency, amount.
pub type Filed = (i64, Option<i64>, Option<i64>, Option<String>, Option<i64>);

/// The search columns' query, the same on both backends.
pub const SEARCH_COLUMNS: &str =
    "SELECT seq, payer_id, payee_id, currency, amount_units FROM transfers ORDER BY seq";

/// Each transfer's search columns in the SQLite store of `dir`, by seq.
pub fn sqlite_search_columns(dir: &std::path::Path) -> Vec<Filed> {
    rusqlite::Connection::open(dir.join("kasi.db"))
        .expect("open SQLite")
        .prepare(SEARCH_COLUMNS)
        .expect("prepare")
        .query_map([], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
            ))
        })
        .expect("query")
        .map(Result::unwrap)
        .collect()
}

/// The parties a harness prepare of `amount` names (its ILP packet's, in
/// the hub): a few parties shared by many transfers, on either side, and
/// none for every fourth amount.
pub fn parties_of(amount: Amount) -> Option<PartyIds> {
    let units = amount.units().unsigned_abs();
    let n = units / 10_000 + units % 10_000;
    (!n.is_multiple_of(4)).then(|| PartyIds {
        payer: format!("MSISDN/{}", n % 3).into(),
        payee: format!("MSISDN/{}", n % 5).into(),
    })
}

/// The feed's connections to a SQLite store and a PostgreSQL one, as the
/// hub's followers open them (beside the open writer).
pub fn feeds(dir: &std::path::Path, url: &str) -> [Box<dyn store::feed::FeedLog>; 2] {
    [
        Box::new(store::sqlite_feed::SqliteFeed::open(dir).expect("the SQLite feed")),
        Box::new(store::pg_feed::PgFeed::open(url).expect("the PostgreSQL feed")),
    ]
}
