//! What the simulated DFSPs and operator send: onboarding, then a mix of
//! prepares, fulfils, aborts, GETs, funds in and out, quotes, reference
//! data reads and changes, exact and modified resends of anything sent
//! before (old ids that left the ledger's memory included), all drawn
//! from one seeded generator. As the ledger's property test does, it
//! remembers only what it generated itself (its ids, preimages, payees),
//! never what the hub answered, apart from the account ids onboarding
//! created and the open settlement window.

use ledger::{
    AccountId, Amount, AuditRender, AuditTag, Command, ConversionTerms, Currency, ErrorCode,
    FspName, FulfilConversion, Fulfilment, Funds, FundsFinish, FundsMemo, Ledger, ModelRules,
    Outcome, ParticipantMode, Prepare, PrepareConversion, RequestHash, TransferId,
};

use crate::rng::Rng;

pub const HUB: &str = "Hub";

pub struct Dfsp {
    pub name: FspName,
    /// (position, settlement) per currency index, once onboarded.
    pub accounts: Vec<Option<(AccountId, AccountId)>>,
    /// Holds the second currency (when there is one).
    pub second: bool,
    pub active: bool,
}

/// A prepare as generated: what a fulfil of it needs.
#[derive(Clone, Copy)]
struct Prepared {
    id: TransferId,
    payer: usize,
    payee: usize,
    preimage: u8,
}

/// A conversion as generated (two currencies only): what its answers and
/// its dependent transfer need.
#[derive(Clone, Copy)]
struct Conversion {
    commit_request_id: TransferId,
    determining: TransferId,
    payer: usize,
    fxp: usize,
    payee: usize,
    preimage: u8,
    target: Amount,
}

pub struct Workload {
    rng: Rng,
    pub currencies: Vec<Currency>,
    pub dfsps: Vec<Dfsp>,
    prepared: Vec<Prepared>,
    /// Funds out reservations: (id, DFSP, currency index).
    funds_out: Vec<(TransferId, usize, usize)>,
    /// Quotes recorded: (id, payer, payee).
    quotes: Vec<(TransferId, usize, usize)>,
    conversions: Vec<Conversion>,
    /// Commands that create or finish something, for resends.
    history: Vec<Command>,
    /// The last fulfils, aborts and quote answers.
    finishing: Vec<Command>,
    next_id: u64,
}

fn hash_of(parts: impl std::fmt::Debug) -> RequestHash {
    RequestHash::of(format!("{parts:?}").as_bytes())
}

fn modified(hash: RequestHash) -> RequestHash {
    hash_of(("modified", hash.0))
}

fn render(target: &str, outcome: &Outcome) -> String {
    format!("{target}: {outcome:?}")
}

impl Workload {
    pub fn new(mut rng: Rng) -> Workload {
        let mut currencies = vec![Currency::parse("USD").expect("ISO 4217")];
        if rng.percent(50) {
            currencies.push(Currency::parse("EUR").expect("ISO 4217"));
        }
        let dfsps = (0..rng.range(2, 6))
            .map(|i| Dfsp {
                name: FspName::new(&format!("dfsp{i}")).expect("a valid name"),
                accounts: vec![None; currencies.len()],
                second: i == 0 || rng.percent(70),
                active: true,
            })
            .collect();
        Workload {
            rng,
            currencies,
            dfsps,
            prepared: Vec::new(),
            funds_out: Vec::new(),
            quotes: Vec::new(),
            conversions: Vec::new(),
            history: Vec::new(),
            finishing: Vec::new(),
            next_id: 0,
        }
    }

    /// The hub, its accounts, a settlement model, and every DFSP with its
    /// accounts: one submission per command.
    pub fn onboarding(&self) -> Vec<Vec<Command>> {
        let mut commands = vec![Command::CreateHub {
            name: FspName::new(HUB).expect("a valid name"),
        }];
        for &currency in &self.currencies {
            for kind in [
                ledger::AccountKind::HubMultilateralSettlement,
                ledger::AccountKind::HubReconciliation,
            ] {
                commands.push(Command::CreateHubAccount { currency, kind });
            }
        }
        commands.push(Command::CreateSettlementModel {
            name: "DEFAULTDEFERREDNET".into(),
            definition: r#"{"settlementGranularity":"NET"}"#.into(),
            rules: Some(ModelRules {
                granularity: ledger::Granularity::Net,
                interchange: ledger::Interchange::Multilateral,
                delay: ledger::Delay::Deferred,
                currency: None,
                ledger_account_type: ledger::AccountKind::Position,
                settlement_account_type: ledger::AccountKind::Settlement,
                auto_position_reset: true,
                require_liquidity_check: true,
            }),
        });
        for dfsp in &self.dfsps {
            for (index, &currency) in self.currencies.iter().enumerate() {
                if index == 0 || dfsp.second {
                    commands.push(Command::CreateParticipant {
                        name: dfsp.name,
                        currency,
                    });
                }
            }
        }
        commands.into_iter().map(|command| vec![command]).collect()
    }

    /// Learns the accounts onboarding created, from the hub's answers.
    pub fn onboarded(&mut self, commands: &[Command], outcome: &Outcome) {
        let (Command::CreateParticipant { name, currency }, Outcome::AccountsCreated(ids)) =
            (&commands[0], outcome)
        else {
            return;
        };
        let index = self.currencies.iter().position(|c| c == currency);
        let dfsp = self.dfsps.iter_mut().find(|d| d.name == *name);
        if let (Some(index), Some(dfsp), [position, settlement]) = (index, dfsp, ids.as_slice()) {
            dfsp.accounts[index] = Some((*position, *settlement));
        }
    }

    /// Funds, caps and endpoints for every DFSP: one submission each.
    pub fn funding(&mut self) -> Vec<Vec<Command>> {
        let mut submissions = Vec::new();
        for d in 0..self.dfsps.len() {
            for c in 0..self.currencies.len() {
                let Some((_, settlement)) = self.dfsps[d].accounts[c] else {
                    continue;
                };
                let funds = self.funds(d, c, settlement, Amount::from_whole(10_000));
                submissions.push(vec![Command::FundsIn(funds)]);
                submissions.push(vec![Command::InitNetDebitCap {
                    name: self.dfsps[d].name,
                    currency: self.currencies[c],
                    net_debit_cap: Amount::from_whole(self.rng.range(2_000, 8_000)),
                }]);
            }
            submissions.push(vec![self.endpoint(d, 0)]);
        }
        submissions
    }

    fn fresh_id(&mut self) -> TransferId {
        self.next_id += 1;
        let bits = (u128::from(self.rng.next_u64() >> 16) << 64) | u128::from(self.next_id);
        match self.rng.percent(25) {
            true => TransferId::ulid(bits),
            false => TransferId::new(bits),
        }
    }

    fn dfsp(&mut self) -> usize {
        self.rng.index(self.dfsps.len())
    }

    fn endpoint(&mut self, d: usize, step: u64) -> Command {
        Command::SetEndpoint {
            name: self.dfsps[d].name,
            endpoint_type: "FSPIOP_CALLBACK_URL_TRANSFER_PUT".into(),
            value: format!("http://sim.invalid/{}/{step}", self.dfsps[d].name),
        }
    }

    fn funds(&mut self, d: usize, c: usize, account: AccountId, amount: Amount) -> Funds {
        let transfer_id = self.fresh_id();
        let dfsp = &self.dfsps[d];
        Funds {
            transfer_id,
            participant: dfsp.name,
            account,
            amount,
            currency: self.currencies[c],
            memo: FundsMemo {
                external_reference: format!("sim-{transfer_id}"),
                reason: match self.rng.percent(50) {
                    true => "sim".into(),
                    false => String::new(),
                },
            },
            request_hash: hash_of(("funds", transfer_id, dfsp.name, account, amount)),
        }
    }

    /// Mostly the first currency.
    fn currency(&mut self) -> usize {
        usize::from(self.currencies.len() > 1 && self.rng.percent(25))
    }

    /// A recent one mostly, any one (perhaps long gone from memory) else.
    fn pick<T: Copy>(rng: &mut Rng, items: &[T]) -> Option<T> {
        if items.is_empty() {
            return None;
        }
        let from = match rng.percent(70) {
            true => items.len().saturating_sub(8),
            false => 0,
        };
        Some(items[from + rng.index(items.len() - from)])
    }

    fn remember(&mut self, command: &Command) {
        if matches!(
            command,
            Command::Prepare(_)
                | Command::Fulfil(_)
                | Command::Abort(_)
                | Command::FundsIn(_)
                | Command::FundsOutReserve(_)
                | Command::FundsOutCommit(_)
                | Command::FundsOutAbort(_)
                | Command::RecordQuote { .. }
                | Command::AnswerQuote { .. }
                | Command::PrepareConversion(_)
                | Command::FulfilConversion(_)
                | Command::AbortConversion(_)
        ) {
            self.history.push(command.clone());
        }
    }

    /// One submission: one to three commands, as an API request (or a
    /// DFSP's batch of them) would make.
    pub fn submission(&mut self, now_ms: i64, shadow: &Ledger) -> Vec<Command> {
        let count = 1 + usize::from(self.rng.percent(25)) + usize::from(self.rng.percent(10));
        (0..count).map(|_| self.command(now_ms, shadow)).collect()
    }

    /// A submission that only reads what is answered from memory during a
    /// store fault (balances, reference data).
    pub fn read_only(&mut self) -> Vec<Command> {
        let name = match self.rng.percent(50) {
            true => None,
            false => {
                let d = self.dfsp();
                Some(self.dfsps[d].name)
            }
        };
        let mut commands = vec![Command::ReadParticipants { name }];
        if self.rng.percent(30) {
            commands.push(Command::ReadSettlementWindows);
        }
        commands
    }

    /// A change that always records something (the store must be asked).
    pub fn recorded_change(&mut self, step: u64) -> Command {
        let d = self.dfsp();
        self.endpoint(d, step)
    }

    /// A submission that needs the store (never answered from memory).
    pub fn needs_store(&mut self, now_ms: i64, shadow: &Ledger) -> Vec<Command> {
        let mut commands = self.submission(now_ms, shadow);
        commands.push(self.get());
        commands
    }

    fn get(&mut self) -> Command {
        let Some(prepared) = Self::pick(&mut self.rng, &self.prepared) else {
            return Command::ReadTransfer {
                transfer_id: TransferId::new(1),
            };
        };
        let caller = match self.rng.weighted(&[45, 45, 10]) {
            0 => prepared.payer,
            1 => prepared.payee,
            _ => self.dfsp(),
        };
        match self.rng.percent(80) {
            true => Command::GetTransfer {
                transfer_id: prepared.id,
                caller: self.dfsps[caller].name,
            },
            false => Command::ReadTransfer {
                transfer_id: prepared.id,
            },
        }
    }

    fn command(&mut self, now_ms: i64, shadow: &Ledger) -> Command {
        // Reactivate a DFSP taken out, soon.
        if let Some(d) = self.dfsps.iter().position(|d| !d.active) {
            if self.rng.percent(30) {
                self.dfsps[d].active = true;
                return Command::SetParticipantActive {
                    name: self.dfsps[d].name,
                    active: true,
                };
            }
        }
        let weights = [
            30, // prepare
            16, // fulfil
            6,  // abort
            8,  // exact resend
            4,  // modified resend
            8,  // get
            5,  // quote
            4,  // funds in
            3,  // funds out
            3,  // funds out finish
            3,  // read participants
            1,  // cap
            1,  // deactivate
            1,  // close window
            1,  // endpoint
            6,  // a fulfil, abort or quote answer just sent, again or changed
            4,  // GET of a transfer a fulfil or abort just named
            match self.currencies.len() {
                1 => 0,
                _ => 12, // a conversion's step
            },
        ];
        let command = match self.rng.weighted(&weights) {
            0 => self.prepare(now_ms),
            1 => self.fulfil(),
            2 => self.abort(),
            3 => match self.history.is_empty() {
                true => self.prepare(now_ms),
                false => self.history[self.rng.index(self.history.len())].clone(),
            },
            4 => match self.history.is_empty() {
                true => self.prepare(now_ms),
                false => modify(self.history[self.rng.index(self.history.len())].clone()),
            },
            5 => self.get(),
            6 => self.quote(),
            7 => self.funds_in(),
            8 => self.funds_out(),
            9 => self.funds_out_finish(),
            10 => self.read_only().remove(0),
            11 => {
                let d = self.dfsp();
                let c = self.currency();
                Command::SetNetDebitCap {
                    name: self.dfsps[d].name,
                    currency: self.currencies[c],
                    net_debit_cap: Amount::from_whole(self.rng.range(500, 8_000)),
                }
            }
            12 => {
                let d = self.dfsp();
                self.dfsps[d].active = false;
                let name = self.dfsps[d].name;
                // Paused both ways (central-ledger's `isActive: false`)
                // or one way (a mode), with transfers in flight.
                match self.rng.range(0, 3) {
                    0 => Command::SetParticipantActive {
                        name,
                        active: false,
                    },
                    1 => Command::SetParticipantMode {
                        name,
                        mode: ParticipantMode::SendOnly,
                    },
                    _ => Command::SetParticipantMode {
                        name,
                        mode: ParticipantMode::ReceiveOnly,
                    },
                }
            }
            13 => match shadow.open_window_id() {
                Some(id) => Command::CloseSettlementWindow {
                    id,
                    reason: "sim".into(),
                },
                None => self.prepare(now_ms),
            },
            14 => {
                let (d, value) = (self.dfsp(), self.rng.below(1_000));
                self.endpoint(d, value)
            }
            // A payee that got no answer yet sends its message again, or
            // a party asks at once: the id may have just left memory.
            15 => match self.finishing.len() {
                0 => self.fulfil(),
                n => {
                    let recent = self.finishing[n - 1 - self.rng.index(n.min(3))].clone();
                    match self.rng.percent(70) {
                        true => recent,
                        false => modify(recent),
                    }
                }
            },
            17 => self.fx_step(now_ms),
            _ => match self.finishing.len() {
                0 => self.get(),
                n => match &self.finishing[n - 1 - self.rng.index(n.min(3))] {
                    Command::Fulfil(ledger::Fulfil {
                        transfer_id,
                        caller,
                        ..
                    })
                    | Command::Abort(ledger::Abort {
                        transfer_id,
                        caller,
                        ..
                    }) => Command::GetTransfer {
                        transfer_id: *transfer_id,
                        caller: *caller,
                    },
                    _ => self.get(),
                },
            },
        };
        if matches!(
            command,
            Command::Fulfil(_) | Command::Abort(_) | Command::AnswerQuote { .. }
        ) {
            self.finishing.push(command.clone());
            if self.finishing.len() > 8 {
                self.finishing.remove(0);
            }
        }
        self.remember(&command);
        command
    }

    /// A step of a payer conversion (first currency into the second):
    /// a new conversion, the FXP's acceptance or error (or another's), the
    /// transfer that depends on it — then fulfilled, aborted or expired as
    /// any prepared transfer.
    fn fx_step(&mut self, now_ms: i64) -> Command {
        let existing = Self::pick(&mut self.rng, &self.conversions);
        match (existing, self.rng.weighted(&[35, 30, 8, 27])) {
            (Some(conversion), 1) => {
                let caller = self.payee_or_other(conversion.fxp);
                let preimage = match self.rng.percent(92) {
                    true => conversion.preimage,
                    false => conversion.preimage ^ 0x33,
                };
                let salt = self.rng.below(2);
                Command::FulfilConversion(FulfilConversion {
                    commit_request_id: conversion.commit_request_id,
                    caller,
                    fulfilment: Some(Fulfilment::from_preimage([preimage; 32])),
                    destination: self.destination(conversion.payer),
                    request_hash: hash_of((
                        "fx-accept",
                        conversion.commit_request_id,
                        preimage,
                        salt,
                    )),
                })
            }
            (Some(conversion), 2) => {
                let caller = self.payee_or_other(conversion.fxp);
                Command::AbortConversion(ledger::Abort {
                    transfer_id: conversion.commit_request_id,
                    caller,
                    error_code: ErrorCode(5100),
                    destination: None,
                    request_hash: hash_of(("fx-abort", conversion.commit_request_id)),
                })
            }
            (Some(conversion), 3) => self.dependent(conversion, now_ms),
            _ => self.conversion(now_ms),
        }
    }

    fn conversion(&mut self, now_ms: i64) -> Command {
        let holders: Vec<usize> = (0..self.dfsps.len())
            .filter(|&d| self.dfsps[d].second)
            .collect();
        let payer = self.dfsp();
        let fxp = holders[self.rng.index(holders.len())];
        let payee = holders[self.rng.index(holders.len())];
        let commit_request_id = self.fresh_id();
        let determining = self.fresh_id();
        let preimage = self.rng.below(256) as u8;
        let source = Amount::from_whole(self.rng.range(1, 600));
        let target = Amount::from_whole(self.rng.range(1, 900));
        let expiration_ms = now_ms + self.rng.range(200, 5_000);
        self.conversions.push(Conversion {
            commit_request_id,
            determining,
            payer,
            fxp,
            payee,
            preimage,
            target,
        });
        let (initiating, fxp) = (self.dfsps[payer].name, self.dfsps[fxp].name);
        let (source_currency, target_currency) = (self.currencies[0], self.currencies[1]);
        Command::PrepareConversion(PrepareConversion {
            commit_request_id,
            initiating,
            fxp,
            source_amount: source,
            source_currency,
            terms: ConversionTerms {
                determining_transfer_id: determining,
                target_currency,
                target_amount: target,
            },
            condition: Fulfilment::from_preimage([preimage; 32]).condition(),
            expiration_ms,
            request_hash: hash_of((
                "conversion",
                commit_request_id,
                determining,
                source,
                target,
                preimage,
                expiration_ms,
            )),
            wire_version: 0x20,
        })
    }

    /// The transfer a conversion depends on, mostly as it should be.
    fn dependent(&mut self, conversion: Conversion, now_ms: i64) -> Command {
        let amount = match self.rng.weighted(&[80, 15, 5]) {
            0 => conversion.target,
            1 => Amount::from_whole(1),
            _ => conversion
                .target
                .checked_add(Amount::from_units(1))
                .unwrap_or(conversion.target),
        };
        let payer = match self.rng.percent(95) {
            true => conversion.payer,
            false => self.dfsp(),
        };
        let preimage = self.rng.below(256) as u8;
        let transfer_id = conversion.determining;
        let expiration_ms = now_ms + self.rng.range(100, 4_000);
        let (payer_name, payee_name) = (self.dfsps[payer].name, self.dfsps[conversion.payee].name);
        let currency = self.currencies[1];
        self.prepared.push(Prepared {
            id: transfer_id,
            payer,
            payee: conversion.payee,
            preimage,
        });
        Command::Prepare(Prepare {
            transfer_id,
            payer: payer_name,
            payee: payee_name,
            amount,
            currency,
            condition: Fulfilment::from_preimage([preimage; 32]).condition(),
            expiration_ms,
            request_hash: hash_of((
                "dependent",
                transfer_id,
                payer_name,
                amount,
                preimage,
                expiration_ms,
            )),
            wire_version: 1,
            parties: None,
        })
    }

    fn prepare(&mut self, now_ms: i64) -> Command {
        let n = self.dfsps.len();
        let payer = self.dfsp();
        let payee = match self.rng.percent(4) {
            true => payer,
            false => (payer + 1 + self.rng.index(n - 1)) % n,
        };
        let c = self.currency();
        let amount = match self.rng.weighted(&[70, 20, 10]) {
            0 => Amount::from_whole(self.rng.range(1, 100)),
            1 => Amount::from_whole(self.rng.range(100, 4_000)),
            _ => Amount::from_units(i128::from(self.rng.range(1, 1_000_000))),
        };
        let expiration_ms = match self.rng.percent(4) {
            true => now_ms - self.rng.range(0, 100),
            false => now_ms + self.rng.range(100, 4_000),
        };
        let transfer_id = self.fresh_id();
        let preimage = self.rng.below(256) as u8;
        let (payer_name, payee_name) = (self.dfsps[payer].name, self.dfsps[payee].name);
        let currency = self.currencies[c];
        self.prepared.push(Prepared {
            id: transfer_id,
            payer,
            payee,
            preimage,
        });
        Command::Prepare(Prepare {
            transfer_id,
            payer: payer_name,
            payee: payee_name,
            amount,
            currency,
            condition: Fulfilment::from_preimage([preimage; 32]).condition(),
            expiration_ms,
            request_hash: hash_of((
                "prepare",
                transfer_id,
                payer_name,
                payee_name,
                amount,
                currency,
                preimage,
                expiration_ms,
            )),
            wire_version: self.rng.below(3) as u8,
            parties: None,
        })
    }

    /// Who sends a payee's message: the payee mostly.
    fn payee_or_other(&mut self, payee: usize) -> FspName {
        match self.rng.percent(94) {
            true => self.dfsps[payee].name,
            false => {
                let d = self.dfsp();
                self.dfsps[d].name
            }
        }
    }

    fn destination(&mut self, payer: usize) -> Option<FspName> {
        match self.rng.weighted(&[88, 8, 4]) {
            0 => None,
            1 => Some(self.dfsps[payer].name),
            _ => {
                let d = self.dfsp();
                Some(self.dfsps[d].name)
            }
        }
    }

    fn fulfil(&mut self) -> Command {
        let Some(target) = Self::pick(&mut self.rng, &self.prepared) else {
            return self.funds_in();
        };
        let caller = self.payee_or_other(target.payee);
        let preimage = match self.rng.weighted(&[85, 12, 3]) {
            0 => Some(target.preimage),
            1 => Some(target.preimage ^ 0x5a),
            _ => None,
        };
        let salt = self.rng.below(3);
        Command::Fulfil(ledger::Fulfil {
            transfer_id: target.id,
            caller,
            fulfilment: preimage.map(|p| Fulfilment::from_preimage([p; 32])),
            destination: self.destination(target.payer),
            request_hash: hash_of(("fulfil", target.id, preimage, salt)),
        })
    }

    fn abort(&mut self) -> Command {
        let Some(target) = Self::pick(&mut self.rng, &self.prepared) else {
            return self.funds_in();
        };
        let caller = self.payee_or_other(target.payee);
        let code = match self.rng.weighted(&[60, 35, 5]) {
            0 => ErrorCode(5100),
            1 => ErrorCode(5104),
            _ => ErrorCode(999),
        };
        let salt = self.rng.below(2);
        Command::Abort(ledger::Abort {
            transfer_id: target.id,
            caller,
            error_code: code,
            destination: self.destination(target.payer),
            request_hash: hash_of(("abort", target.id, code.0, salt)),
        })
    }

    fn settlement_account(&mut self, d: usize, c: usize) -> AccountId {
        let accounts = &self.dfsps[d].accounts;
        let (position, settlement) = accounts[c]
            .or(accounts[0])
            .expect("every DFSP holds the first currency");
        match self.rng.percent(4) {
            true => position,
            false => settlement,
        }
    }

    fn audited(&mut self, command: Command, action: &str, d: usize) -> Command {
        if !self.rng.percent(25) {
            return command;
        }
        let name = self.dfsps[d].name;
        Command::Audited {
            command: Box::new(command),
            tag: Box::new(AuditTag {
                actor: "sim".into(),
                role: "operator".into(),
                source: "tokens-file".into(),
                action: action.into(),
                target: name.to_string(),
                view: Some(Box::new(Command::ReadParticipants { name: Some(name) })),
                render: AuditRender(render),
            }),
        }
    }

    fn funds_in(&mut self) -> Command {
        let (d, c) = (self.dfsp(), self.currency());
        let account = self.settlement_account(d, c);
        let amount = Amount::from_whole(self.rng.range(1, 500));
        let funds = self.funds(d, c, account, amount);
        self.audited(Command::FundsIn(funds), "funds.in", d)
    }

    fn funds_out(&mut self) -> Command {
        let (d, c) = (self.dfsp(), self.currency());
        let account = self.settlement_account(d, c);
        let amount = Amount::from_whole(self.rng.range(1, 300));
        let funds = self.funds(d, c, account, amount);
        self.funds_out.push((funds.transfer_id, d, c));
        self.audited(Command::FundsOutReserve(funds), "funds.out", d)
    }

    fn funds_out_finish(&mut self) -> Command {
        let Some((transfer_id, d, c)) = Self::pick(&mut self.rng, &self.funds_out) else {
            return self.funds_out();
        };
        let account = self.settlement_account(d, c);
        let commit = self.rng.percent(60);
        let salt = self.rng.below(2);
        let finish = FundsFinish {
            transfer_id,
            participant: self.dfsps[d].name,
            account,
            request_hash: hash_of(("funds-finish", transfer_id, commit, salt)),
        };
        let command = match commit {
            true => Command::FundsOutCommit(finish),
            false => Command::FundsOutAbort(finish),
        };
        self.audited(command, "funds.out.finish", d)
    }

    fn quote(&mut self) -> Command {
        let answer = match Self::pick(&mut self.rng, &self.quotes) {
            Some(quote) if self.rng.percent(50) => Some(quote),
            _ => None,
        };
        match answer {
            None => {
                let quote_id = self.fresh_id();
                let n = self.dfsps.len();
                let payer = self.dfsp();
                let payee = (payer + 1 + self.rng.index(n - 1)) % n;
                self.quotes.push((quote_id, payer, payee));
                Command::RecordQuote {
                    quote_id,
                    payer: self.dfsps[payer].name,
                    payee: self.dfsps[payee].name,
                    request_hash: hash_of(("quote", quote_id, payer, payee)),
                }
            }
            Some((quote_id, _, payee)) => {
                let caller = self.payee_or_other(payee);
                let is_error = self.rng.percent(10);
                let body = format!(
                    r#"{{"transferAmount":{{"amount":"{}","currency":"USD"}}}}"#,
                    1 + self.rng.below(3)
                );
                Command::AnswerQuote {
                    quote_id,
                    caller,
                    is_error,
                    request_hash: hash_of(("answer", quote_id, is_error, &body)),
                    body,
                }
            }
        }
    }
}

/// The same request with a changed body, hence a different hash.
fn modify(command: Command) -> Command {
    let one = Amount::from_units(1);
    match command {
        Command::Prepare(mut p) => {
            p.amount = p.amount.checked_add(one).unwrap_or(p.amount);
            p.request_hash = modified(p.request_hash);
            Command::Prepare(p)
        }
        Command::Fulfil(mut f) => {
            f.request_hash = modified(f.request_hash);
            Command::Fulfil(f)
        }
        Command::Abort(mut a) => {
            a.error_code = ErrorCode(a.error_code.0 + 1);
            a.request_hash = modified(a.request_hash);
            Command::Abort(a)
        }
        Command::FundsIn(mut f) => {
            f.amount = f.amount.checked_add(one).unwrap_or(f.amount);
            f.request_hash = modified(f.request_hash);
            Command::FundsIn(f)
        }
        Command::FundsOutReserve(mut f) => {
            f.amount = f.amount.checked_add(one).unwrap_or(f.amount);
            f.request_hash = modified(f.request_hash);
            Command::FundsOutReserve(f)
        }
        Command::FundsOutCommit(mut f) => {
            f.request_hash = modified(f.request_hash);
            Command::FundsOutCommit(f)
        }
        Command::FundsOutAbort(mut f) => {
            f.request_hash = modified(f.request_hash);
            Command::FundsOutAbort(f)
        }
        Command::PrepareConversion(mut c) => {
            c.source_amount = c.source_amount.checked_add(one).unwrap_or(c.source_amount);
            c.request_hash = modified(c.request_hash);
            Command::PrepareConversion(c)
        }
        Command::FulfilConversion(mut f) => {
            f.request_hash = modified(f.request_hash);
            Command::FulfilConversion(f)
        }
        Command::AbortConversion(mut a) => {
            a.error_code = ErrorCode(a.error_code.0 + 1);
            a.request_hash = modified(a.request_hash);
            Command::AbortConversion(a)
        }
        Command::RecordQuote {
            quote_id,
            payer,
            payee,
            request_hash,
        } => Command::RecordQuote {
            quote_id,
            payer,
            payee,
            request_hash: modified(request_hash),
        },
        Command::AnswerQuote {
            quote_id,
            caller,
            is_error,
            body,
            request_hash,
        } => Command::AnswerQuote {
            quote_id,
            caller,
            is_error,
            body: format!("{body} "),
            request_hash: modified(request_hash),
        },
        other => other,
    }
}
