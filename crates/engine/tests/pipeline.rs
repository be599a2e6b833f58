//! The pipeline with a real SQLite store: durability, recovery, expiry at
//! the instant, group commit and fail-stop on a store error.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::{
    recover, system_clock, Engine, EngineConfig, EngineError, PipelineThreads, StoreHealth,
};
use ledger::*;
use store::sqlite::{SqliteOptions, SqliteStore};
use store::{Store, StoreError};

fn name(text: &str) -> FspName {
    FspName::new(text).unwrap()
}

fn usd() -> Currency {
    Currency::parse("USD").unwrap()
}

/// Hub, USD hub accounts, and two funded DFSPs with a cap of 1,000.
fn onboarding() -> Vec<Command> {
    let mut commands = vec![
        Command::CreateHub { name: name("Hub") },
        Command::CreateHubAccount {
            currency: usd(),
            kind: AccountKind::HubMultilateralSettlement,
        },
        Command::CreateHubAccount {
            currency: usd(),
            kind: AccountKind::HubReconciliation,
        },
    ];
    commands.push(Command::CreateSettlementModel {
        name: "DEFAULTDEFERREDNET".into(),
        definition: r#"{"settlementGranularity":"NET"}"#.into(),
        rules: Some(ledger::ModelRules {
            granularity: ledger::Granularity::Net,
            interchange: ledger::Interchange::Multilateral,
            delay: ledger::Delay::Deferred,
            currency: None,
            ledger_account_type: AccountKind::Position,
            settlement_account_type: AccountKind::Settlement,
            auto_position_reset: true,
            require_liquidity_check: true,
        }),
    });
    for (dfsp, settlement) in [("payerfsp", 4), ("payeefsp", 6)] {
        commands.push(Command::CreateParticipant {
            name: name(dfsp),
            currency: usd(),
        });
        commands.push(Command::InitNetDebitCap {
            name: name(dfsp),
            currency: usd(),
            net_debit_cap: Amount::from_whole(1000),
        });
        for endpoint_type in [
            "FSPIOP_CALLBACK_URL_TRANSFER_POST",
            "FSPIOP_CALLBACK_URL_TRANSFER_PUT",
        ] {
            commands.push(Command::SetEndpoint {
                name: name(dfsp),
                endpoint_type: endpoint_type.into(),
                value: format!("http://127.0.0.1:9/{dfsp}/transfers"),
            });
        }
        commands.push(Command::FundsIn(Funds {
            transfer_id: TransferId::new(u128::MAX - settlement),
            participant: name(dfsp),
            account: AccountId(settlement as u32),
            amount: Amount::from_whole(5000),
            currency: usd(),
            memo: FundsMemo::default(),
            request_hash: RequestHash([1; 32]),
        }));
    }
    let party = |identifier: &str, sub_id: Option<&str>| PartyKey {
        id_type: "MSISDN".into(),
        identifier: identifier.into(),
        sub_id: sub_id.map(Into::into),
    };
    commands.push(Command::RegisterParty {
        key: party("255700000001", None),
        fsp: name("payeefsp"),
        currency: Some(usd()),
    });
    commands.push(Command::RegisterParty {
        key: party("255700000001", Some("home")),
        fsp: name("payerfsp"),
        currency: None,
    });
    commands.push(Command::RegisterParty {
        key: party("255700000002", None),
        fsp: name("payerfsp"),
        currency: None,
    });
    commands.push(Command::DeleteParty {
        key: party("255700000002", None),
        caller: name("payerfsp"),
    });
    // Oracles 1 (then updated), 2, and 3 (then deleted: its id stays spent).
    for (id_type, currency, is_default) in [
        ("MSISDN", Some(usd()), true),
        ("EMAIL", None, false),
        ("BUSINESS", None, true),
    ] {
        commands.push(Command::CreateOracle {
            id_type: id_type.into(),
            endpoint: format!("http://127.0.0.1:9/oracle/{id_type}"),
            currency,
            is_default,
        });
    }
    commands.push(Command::UpdateOracle {
        id: 1,
        id_type: "MSISDN".into(),
        endpoint: "http://127.0.0.1:9/oracle/msisdn-v2".into(),
        currency: Some(usd()),
        is_default: true,
    });
    commands.push(Command::DeleteOracle { id: 3 });
    commands.push(Command::RecordQuote {
        quote_id: TransferId::new(7_000),
        payer: name("payerfsp"),
        payee: name("payeefsp"),
        request_hash: RequestHash([3; 32]),
    });
    commands.push(Command::AnswerQuote {
        quote_id: TransferId::new(7_000),
        caller: name("payeefsp"),
        is_error: false,
        body: r#"{"transferAmount":{"amount":"10","currency":"USD"}}"#.into(),
        request_hash: RequestHash([4; 32]),
    });
    commands.push(Command::RecordQuote {
        quote_id: TransferId::new(7_001),
        payer: name("payerfsp"),
        payee: name("payeefsp"),
        request_hash: RequestHash([5; 32]),
    });
    commands
}

fn prepare(id: u128, expiration_ms: i64) -> Command {
    Command::Prepare(Prepare {
        transfer_id: TransferId::new(id),
        payer: name("payerfsp"),
        payee: name("payeefsp"),
        amount: Amount::from_whole(10),
        currency: usd(),
        condition: Fulfilment::from_preimage([id as u8; 32]).condition(),
        expiration_ms,
        request_hash: RequestHash([id as u8; 32]),
        wire_version: 0x11,
        parties: None,
    })
}

fn fulfil(id: u128) -> Command {
    Command::Fulfil(Fulfil {
        transfer_id: TransferId::new(id),
        caller: name("payeefsp"),
        fulfilment: Some(Fulfilment::from_preimage([id as u8; 32])),
        destination: None,
        request_hash: RequestHash([id as u8 ^ 0xff; 32]),
    })
}

type Answered = (u128, Result<Vec<Outcome>, EngineError>);

/// Submits `prepare(id, …)` on its own; its answer arrives tagged with `id`.
fn prepares_answered_by_id(
    handle: &engine::EngineHandle,
) -> (impl Fn(u128) + '_, mpsc::Receiver<Answered>) {
    let (sender, answers) = mpsc::channel::<Answered>();
    let submit = move |id: u128| {
        let sender = sender.clone();
        handle.submit(
            vec![prepare(id, far_future())],
            Box::new(move |result| sender.send((id, result)).unwrap()),
        )
    };
    (submit, answers)
}

fn far_future() -> i64 {
    (system_clock())() + 3_600_000
}

fn open(dir: &std::path::Path) -> SqliteStore {
    SqliteStore::open(dir, SqliteOptions::default()).unwrap()
}

/// The default configuration on `threads` pipeline threads: every test
/// below runs on one thread and on two (see [`both`]).
fn config(threads: PipelineThreads) -> EngineConfig {
    EngineConfig {
        threads,
        ..EngineConfig::default()
    }
}

/// A `#[test]` for each pipeline shape of a test taking `PipelineThreads`.
macro_rules! both {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            #[test]
            fn one_thread() {
                super::$test(engine::PipelineThreads::One)
            }
            #[test]
            fn two_threads() {
                super::$test(engine::PipelineThreads::Two)
            }
        }
    )*};
}

both!(
    acknowledged_outcomes_survive_a_restart_and_recovery_equals_memory,
    a_reserved_transfer_expires_at_its_expiration_instant_without_any_request,
    concurrent_submissions_are_batched_and_each_gets_its_own_outcomes,
    shutdown_commits_and_answers_everything_queued_before_it,
    a_failed_commit_stops_the_pipeline_and_nothing_is_acknowledged_after_it,
    an_oversized_submission_is_refused_whole,
    a_timed_reply_gets_its_batch_instants_in_pipeline_order,
    a_full_disk_holds_the_batch_in_hand_refuses_new_work_and_resumes_when_space_returns,
    shutdown_ends_while_the_store_fails_and_the_queue_is_full,
    a_pipeline_that_fails_for_good_says_so_once,
    an_abandoned_pipeline_commits_nothing_more_and_answers_what_it_held,
    reads_alone_need_no_commit,
    a_failed_pipeline_does_not_spin_on_an_expiry_it_can_never_apply,
);

fn start(dir: &std::path::Path, config: EngineConfig) -> Engine {
    let mut store = open(dir);
    let (ledger, _) = recover(&mut store, Limits::default()).unwrap();
    Engine::start(ledger, Box::new(store), config)
}

fn acknowledged_outcomes_survive_a_restart_and_recovery_equals_memory(threads: PipelineThreads) {
    let dir = tempfile::tempdir().unwrap();
    let engine = start(dir.path(), config(threads));
    let handle = engine.handle();
    let outcomes = handle.execute(onboarding()).unwrap();
    assert!(
        outcomes.iter().all(|o| o.error_code().is_none()),
        "{outcomes:?}"
    );
    for id in 1..=50u128 {
        let outcome = handle.execute(vec![prepare(id, far_future())]).unwrap();
        assert!(
            matches!(&outcome[0], Outcome::Transfer(v) if v.state == TransferState::Reserved),
            "{outcome:?}"
        );
    }
    for id in 1..=25u128 {
        let outcome = handle.execute(vec![fulfil(id)]).unwrap();
        assert!(
            matches!(&outcome[0], Outcome::Transfer(v) if v.state == TransferState::Committed),
            "{outcome:?}"
        );
    }
    let live = engine.shutdown().unwrap();

    let mut store = open(dir.path());
    let (recovered, recovery) = recover(&mut store, Limits::default()).unwrap();
    assert_eq!(recovery.transfers, 52, "50 prepares and 2 funds in");
    assert_eq!(recovered.snapshot(), live.snapshot());
    assert!(recovered.snapshot().audit().is_empty());
    assert_eq!(recovered.snapshot().endpoints.len(), 4);
    let parties = recovered.snapshot().parties;
    assert_eq!(parties.len(), 2, "two registered, one deleted: {parties:?}");
    let quotes = recovered.snapshot().quotes;
    assert_eq!(quotes.len(), 2);
    assert!(quotes[0]
        .answer
        .as_ref()
        .is_some_and(|a| a.body.contains("transferAmount")));
    assert_eq!(quotes[1].answer, None);
    assert_eq!(
        parties[0].key.sub_id, None,
        "the key without a sub-id sorts first"
    );
    assert_eq!(
        recovered.snapshot().settlement_models[0].name,
        "DEFAULTDEFERREDNET"
    );
    let oracles = recovered.snapshot().oracles;
    assert_eq!(
        oracles.len(),
        3,
        "the deleted oracle keeps its row: {oracles:?}"
    );
    assert_eq!(oracles[0].endpoint, "http://127.0.0.1:9/oracle/msisdn-v2");
    assert_eq!(oracles[0].currency, Some(usd()));
    assert!(oracles[0].is_default && oracles[0].active);
    assert_eq!(oracles[1].id_type, "EMAIL");
    assert!(!oracles[2].active, "oracle 3 was deleted");
    let mut recovered = recovered;
    let result = recovered.apply_batch(
        (system_clock())(),
        &[
            Command::ReadOracles,
            Command::CreateOracle {
                id_type: "BUSINESS".into(),
                endpoint: "http://127.0.0.1:9/oracle/business".into(),
                currency: None,
                is_default: true,
            },
        ],
    );
    match &result.outcomes[0] {
        Outcome::Oracles(live) => assert_eq!(
            live.iter().map(|o| o.id).collect::<Vec<_>>(),
            [1, 2],
            "only live oracles are read"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        result.outcomes[1],
        Outcome::OracleCreated(4),
        "a deleted oracle's id is not reused after a restart"
    );
}

#[test]
fn a_second_writer_is_refused_while_the_first_holds_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let _first = open(dir.path());
    let second = SqliteStore::open(dir.path(), SqliteOptions::default());
    assert!(second
        .err()
        .unwrap()
        .to_string()
        .contains("in use by another kasi process"));
}

fn a_reserved_transfer_expires_at_its_expiration_instant_without_any_request(
    threads: PipelineThreads,
) {
    let dir = tempfile::tempdir().unwrap();
    let (sender, expired) = mpsc::channel();
    let config = EngineConfig {
        on_expired: Some(Box::new(move |views| {
            let _ = sender.send((views, (system_clock())()));
        })),
        ..config(threads)
    };
    let engine = start(dir.path(), config);
    let handle = engine.handle();
    handle.execute(onboarding()).unwrap();
    let expiration_ms = (system_clock())() + 300;
    let outcome = handle
        .execute(vec![prepare(7, expiration_ms), prepare(8, far_future())])
        .unwrap();
    assert!(
        outcome.iter().all(|o| matches!(o, Outcome::Transfer(_))),
        "{outcome:?}"
    );

    let (views, seen_at_ms) = expired
        .recv_timeout(Duration::from_secs(10))
        .expect("the expiry must fire by itself");
    assert_eq!(views.len(), 1);
    assert_eq!(views[0].transfer_id, TransferId::new(7));
    assert_eq!(views[0].state, TransferState::Expired);
    assert_eq!(views[0].reason, Some(ErrorCode::TRANSFER_EXPIRED));
    assert!(
        seen_at_ms >= expiration_ms,
        "expired at {seen_at_ms}, before its expiration {expiration_ms}"
    );
    // It fires at the instant, not on a coarse scan.
    assert!(
        seen_at_ms - expiration_ms < 1000,
        "expired {} ms late",
        seen_at_ms - expiration_ms
    );

    let live = engine.shutdown().unwrap();
    let state = |id| {
        live.snapshot()
            .finishes
            .iter()
            .find(|f| f.seq == id)
            .map(|f| f.state)
    };
    // Transfer 7 is the 3rd recorded (after two funds in); 8 is still reserved.
    assert_eq!(state(3), Some(TransferState::Expired));
    assert_eq!(state(4), None);
    let account = &live.snapshot().accounts[3 - 1];
    assert_eq!(
        account.reserved,
        Amount::from_whole(10),
        "only transfer 8 is still held"
    );
}

fn concurrent_submissions_are_batched_and_each_gets_its_own_outcomes(threads: PipelineThreads) {
    let dir = tempfile::tempdir().unwrap();
    let engine = start(dir.path(), config(threads));
    let handle = engine.handle();
    handle.execute(onboarding()).unwrap();
    let (sender, receiver) = mpsc::channel();
    let expiration_ms = far_future();
    for id in 1..=2000u128 {
        let sender = sender.clone();
        handle.submit(
            vec![prepare(id, expiration_ms)],
            Box::new(move |result| sender.send((id, result)).unwrap()),
        );
    }
    let mut seen = 0;
    for _ in 0..2000 {
        let (id, result) = receiver.recv_timeout(Duration::from_secs(30)).unwrap();
        let outcomes = result.unwrap();
        assert_eq!(outcomes.len(), 1);
        match &outcomes[0] {
            Outcome::Transfer(view) => assert_eq!(view.transfer_id, TransferId::new(id)),
            // The cap of 1,000 is reached after 100 transfers of 10.
            Outcome::Failed { transfer, error } => {
                assert_eq!(transfer.transfer_id, TransferId::new(id));
                assert_eq!(error.code, ErrorCode::PAYER_LIMIT_ERROR);
            }
            other => panic!("unexpected {other:?}"),
        }
        seen += 1;
    }
    assert_eq!(seen, 2000);
    let stats = handle.stats();
    assert!(stats.store_commits <= stats.ledger_batches);
    assert!(
        stats.ledger_batches < 2000,
        "2000 queued submissions must share batches"
    );
    let live = engine.shutdown().unwrap();
    let reserved: Vec<_> = live
        .snapshot()
        .transfers
        .iter()
        .filter(|t| t.state == TransferState::Reserved)
        .map(|t| t.transfer_id)
        .collect();
    assert_eq!(reserved.len(), 100, "exactly the cap's worth is reserved");
}

fn shutdown_commits_and_answers_everything_queued_before_it(threads: PipelineThreads) {
    let dir = tempfile::tempdir().unwrap();
    let engine = start(dir.path(), config(threads));
    let handle = engine.handle();
    handle.execute(onboarding()).unwrap();
    let (sender, receiver) = mpsc::channel();
    for id in 1..=50u128 {
        let sender = sender.clone();
        handle.submit(
            vec![prepare(id, far_future())],
            Box::new(move |result| sender.send(result).unwrap()),
        );
    }
    let live = engine.shutdown().unwrap();
    for _ in 0..50 {
        assert!(receiver.recv().unwrap().is_ok());
    }
    assert_eq!(
        handle.execute(vec![prepare(99, far_future())]),
        Err(EngineError::Stopped)
    );
    let mut store = open(dir.path());
    let (recovered, _) = recover(&mut store, Limits::default()).unwrap();
    assert_eq!(recovered.snapshot(), live.snapshot());
}

/// A store whose commits fail after the first `healthy` of them.
struct FailingStore {
    healthy: usize,
}

impl Store for FailingStore {
    fn commit(&mut self, _: &[&[Record]]) -> Result<(), StoreError> {
        if self.healthy == 0 {
            return Err(StoreError::fatal("disk I/O error (fsync)"));
        }
        self.healthy -= 1;
        Ok(())
    }

    fn load(&mut self) -> Result<Snapshot, StoreError> {
        Ok(Snapshot::default())
    }

    fn describe(&self) -> String {
        "failing test store".into()
    }
}

fn a_failed_commit_stops_the_pipeline_and_nothing_is_acknowledged_after_it(
    threads: PipelineThreads,
) {
    let engine = Engine::start(
        Ledger::new(Limits::default()),
        Box::new(FailingStore { healthy: 1 }),
        config(threads),
    );
    let handle = engine.handle();
    assert!(handle.execute(onboarding()).is_ok());
    let failed = handle.execute(vec![prepare(1, far_future())]);
    assert!(
        matches!(failed, Err(EngineError::StoreFailed(ref why)) if why.contains("fsync")),
        "{failed:?}"
    );
    let later = handle.execute(vec![prepare(2, far_future())]);
    assert!(
        matches!(later, Err(EngineError::StoreFailed(_))),
        "{later:?}"
    );
    assert!(matches!(
        engine.shutdown(),
        Err(EngineError::StoreFailed(_))
    ));
}

/// After a commit fails for good no batch is applied any more, so an
/// expiry that falls due afterwards stays due: the pipeline must not wake
/// for it again and again (it would spin a core until the restart), and
/// it still answers what it is sent.
fn a_failed_pipeline_does_not_spin_on_an_expiry_it_can_never_apply(threads: PipelineThreads) {
    // The ledger thread reads its clock on every turn of its loop: counted.
    let reads = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let clock = {
        let reads = reads.clone();
        Arc::new(move || {
            reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (system_clock())()
        })
    };
    let engine = Engine::start(
        Ledger::new(Limits::default()),
        Box::new(FailingStore { healthy: 2 }),
        EngineConfig {
            clock,
            ..config(threads)
        },
    );
    let handle = engine.handle();
    handle.execute(onboarding()).unwrap();
    let expiration_ms = (system_clock())() + 200;
    handle.execute(vec![prepare(1, expiration_ms)]).unwrap();
    let failed = handle.execute(vec![prepare(2, far_future())]);
    assert!(
        matches!(failed, Err(EngineError::StoreFailed(_))),
        "{failed:?}"
    );
    while (system_clock())() < expiration_ms + 100 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = reads.load(std::sync::atomic::Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(500));
    let turns = reads.load(std::sync::atomic::Ordering::Relaxed) - before;
    // Before the fix: ~2.6 million in 500 ms.
    assert!(
        turns < 50,
        "{threads:?}: the idle pipeline read its clock {turns} times in 500 ms"
    );
    let later = handle.execute(vec![prepare(3, far_future())]);
    assert!(
        matches!(later, Err(EngineError::StoreFailed(_))),
        "{later:?}"
    );
    assert!(engine.shutdown().is_err());
}

fn an_oversized_submission_is_refused_whole(threads: PipelineThreads) {
    let config = EngineConfig {
        max_batch_commands: 4,
        clock: Arc::new(|| 1_000),
        ..config(threads)
    };
    let engine = Engine::start(
        Ledger::new(Limits::default()),
        Box::new(FailingStore { healthy: 10 }),
        config,
    );
    let commands = (1..=5).map(|id| prepare(id, 2_000)).collect();
    assert_eq!(
        engine.handle().execute(commands),
        Err(EngineError::TooLarge {
            commands: 5,
            max: 4
        })
    );
    let started = Instant::now();
    engine.shutdown().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
}

fn a_timed_reply_gets_its_batch_instants_in_pipeline_order(threads: PipelineThreads) {
    let dir = tempfile::tempdir().unwrap();
    let engine = start(dir.path(), config(threads));
    let handle = engine.handle();
    handle.execute(onboarding()).unwrap();
    let (sender, receiver) = mpsc::channel();
    let expiration_ms = far_future();
    for id in 1..=50u128 {
        let sender = sender.clone();
        let submitted_at = Instant::now();
        handle.try_submit_timed(
            vec![prepare(id, expiration_ms)],
            Box::new(move |result| {
                let replied_at = Instant::now();
                sender.send((submitted_at, result, replied_at)).unwrap()
            }),
        );
    }
    for _ in 0..50 {
        let (submitted_at, result, replied_at) =
            receiver.recv_timeout(Duration::from_secs(30)).unwrap();
        let (outcomes, timing) = result.unwrap();
        assert!(
            matches!(outcomes.as_slice(), [Outcome::Transfer(_)]),
            "{outcomes:?}"
        );
        assert!(submitted_at <= timing.apply_started_at, "{timing:?}");
        assert!(timing.apply_started_at <= timing.applied_at, "{timing:?}");
        assert!(timing.applied_at <= timing.commit_started_at, "{timing:?}");
        assert!(timing.commit_started_at <= timing.durable_at, "{timing:?}");
        assert!(timing.durable_at <= replied_at, "{timing:?}");
    }
    // A refusal carries no timing, only the error.
    let (sender, receiver) = mpsc::channel();
    let too_many = (0..=handle.max_batch_commands() as u128)
        .map(|id| prepare(1_000 + id, expiration_ms))
        .collect();
    handle.try_submit_timed(
        too_many,
        Box::new(move |result| sender.send(result).unwrap()),
    );
    assert!(matches!(
        receiver.recv_timeout(Duration::from_secs(5)).unwrap(),
        Err(EngineError::TooLarge { .. })
    ));
    engine.shutdown().unwrap();
}

/// A store that refuses commits with a transient error (a full disk)
/// while `full` is set, and keeps every record it committed.
struct FullDiskStore {
    full: Arc<std::sync::atomic::AtomicBool>,
    committed: Arc<std::sync::Mutex<Vec<Record>>>,
}

impl Store for FullDiskStore {
    fn commit(&mut self, batches: &[&[Record]]) -> Result<(), StoreError> {
        if self.full.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::transient("database or disk is full"));
        }
        let mut committed = self.committed.lock().unwrap();
        for batch in batches {
            committed.extend_from_slice(batch);
        }
        Ok(())
    }

    fn load(&mut self) -> Result<Snapshot, StoreError> {
        Ok(Snapshot::default())
    }

    fn describe(&self) -> String {
        "full-disk test store".into()
    }
}

/// A pipeline on a [`FullDiskStore`], onboarded; the store's switch and
/// what it committed.
#[allow(clippy::type_complexity)]
fn on_full_disk_store(
    threads: PipelineThreads,
) -> (
    Engine,
    Arc<std::sync::atomic::AtomicBool>,
    Arc<std::sync::Mutex<Vec<Record>>>,
) {
    let full = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let committed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let engine = Engine::start(
        Ledger::new(Limits::default()),
        Box::new(FullDiskStore {
            full: full.clone(),
            committed: committed.clone(),
        }),
        config(threads),
    );
    engine.handle().execute(onboarding()).unwrap();
    (engine, full, committed)
}

fn a_full_disk_holds_the_batch_in_hand_refuses_new_work_and_resumes_when_space_returns(
    threads: PipelineThreads,
) {
    let (engine, full, committed) = on_full_disk_store(threads);
    let handle = engine.handle();
    assert_eq!(handle.store_health(), StoreHealth::Healthy);

    full.store(true, std::sync::atomic::Ordering::SeqCst);
    let (sender, held) = mpsc::channel();
    handle.submit(
        vec![prepare(1, far_future())],
        Box::new(move |result| sender.send(result).unwrap()),
    );
    await_fault(&handle);
    assert!(
        held.recv_timeout(Duration::from_millis(200)).is_err(),
        "nothing is acknowledged before it is durable"
    );
    let refused = handle.execute(vec![prepare(2, far_future())]);
    assert!(
        matches!(refused, Err(EngineError::StoreUnavailable(ref why)) if why.contains("full")),
        "{refused:?}"
    );
    assert!(matches!(
        handle.unavailable(),
        Some(EngineError::StoreUnavailable(_))
    ));
    assert!(handle.stats().store_errors >= 1);

    // Meanwhile balances and reference data are read from memory, at once
    // (on one thread, between two tries of the commit): the held prepare's
    // hold is in them. A read of one transfer waits for the store like any
    // answer, so it is refused.
    for _ in 0..3 {
        let started = Instant::now();
        let read = handle.execute(vec![
            Command::ReadParticipants {
                name: Some(name("payerfsp")),
            },
            Command::ReadSettlementModels,
        ]);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "answered at once"
        );
        let outcomes = read.expect("reads are answered from memory");
        assert_eq!(position_reserved(&outcomes[0]), Amount::from_whole(10));
        assert!(matches!(&outcomes[1], Outcome::SettlementModels(models) if models.len() == 1));
    }
    let one_transfer = handle.execute(vec![Command::ReadTransfer {
        transfer_id: TransferId::new(1),
    }]);
    assert!(
        matches!(one_transfer, Err(EngineError::StoreUnavailable(_))),
        "{one_transfer:?}"
    );
    assert!(
        held.recv_timeout(Duration::from_millis(50)).is_err(),
        "the held prepare is still not acknowledged"
    );

    full.store(false, std::sync::atomic::Ordering::SeqCst);
    let outcomes = held
        .recv_timeout(Duration::from_secs(10))
        .expect("the held batch commits once space returns")
        .expect("and its outcome is the prepare's");
    assert!(
        matches!(outcomes.as_slice(), [Outcome::Transfer(view)] if view.state == TransferState::Reserved),
        "{outcomes:?}"
    );
    assert_eq!(handle.store_health(), StoreHealth::Healthy);
    assert!(handle.unavailable().is_none());
    handle.execute(vec![prepare(3, far_future())]).unwrap();
    let transfers: Vec<TransferId> = committed
        .lock()
        .unwrap()
        .iter()
        .filter_map(|record| match record {
            Record::Transfer(row) => Some(row.transfer_id),
            _ => None,
        })
        .filter(|id| (1..=3).any(|n| *id == TransferId::new(n)))
        .collect();
    assert_eq!(
        transfers,
        vec![TransferId::new(1), TransferId::new(3)],
        "the held prepare committed exactly once; the refused one never"
    );
    engine.shutdown().unwrap();
}

/// A batch that records nothing (reads alone) is answered without a
/// commit: every batch before it is committed, and a store that cannot
/// commit (a database that is down) does not hold it. A batch that
/// records something still waits for its commit.
fn reads_alone_need_no_commit(threads: PipelineThreads) {
    let (engine, full, _) = on_full_disk_store(threads);
    let handle = engine.handle();
    handle.execute(vec![prepare(1, far_future())]).unwrap();
    let commits = handle.stats().store_commits;
    full.store(true, std::sync::atomic::Ordering::SeqCst);
    for read in [
        Command::ReadTransfer {
            transfer_id: TransferId::new(1),
        },
        Command::ReadParticipants { name: None },
    ] {
        let outcomes = handle.execute(vec![read]).expect("answered");
        assert!(outcomes[0].error_code().is_none(), "{outcomes:?}");
    }
    assert_eq!(handle.stats().store_commits, commits, "no commit for reads");
    assert_eq!(
        handle.store_health(),
        StoreHealth::Healthy,
        "nothing failed"
    );
    full.store(false, std::sync::atomic::Ordering::SeqCst);
    handle.execute(vec![prepare(2, far_future())]).unwrap();
    assert_eq!(handle.stats().store_commits, commits + 1);
    engine.shutdown().unwrap();
}

/// A store whose commits wait for the test: each says it has begun, then
/// holds until the test lets it finish, and records how many records of
/// transfers it took.
struct GatedStore {
    began: mpsc::Sender<()>,
    proceed: mpsc::Receiver<()>,
    transfers_per_commit: Arc<std::sync::Mutex<Vec<usize>>>,
}

impl Store for GatedStore {
    fn commit(&mut self, batches: &[&[Record]]) -> Result<(), StoreError> {
        let _ = self.began.send(());
        let _ = self.proceed.recv();
        let transfers = batches
            .iter()
            .flat_map(|batch| batch.iter())
            .filter(|record| matches!(record, Record::Transfer(_)))
            .count();
        self.transfers_per_commit.lock().unwrap().push(transfers);
        Ok(())
    }

    fn load(&mut self) -> Result<Snapshot, StoreError> {
        Ok(Snapshot::default())
    }

    fn describe(&self) -> String {
        "gated test store".into()
    }
}

#[test]
fn on_one_thread_what_arrives_during_a_commit_is_the_next_batch_and_waits_for_it() {
    let (began, commit_began) = mpsc::channel();
    let (let_finish, proceed) = mpsc::channel();
    let transfers_per_commit = Arc::new(std::sync::Mutex::new(Vec::new()));
    let engine = Engine::start(
        Ledger::new(Limits::default()),
        Box::new(GatedStore {
            began,
            proceed,
            transfers_per_commit: transfers_per_commit.clone(),
        }),
        config(PipelineThreads::One),
    );
    let handle = engine.handle();
    let onboarded = {
        let handle = handle.clone();
        std::thread::spawn(move || handle.execute(onboarding()))
    };
    commit_began.recv().unwrap();
    let_finish.send(()).unwrap();
    onboarded.join().unwrap().unwrap();
    let batches_before = handle.stats().ledger_batches;

    // The first prepare's commit holds the pipeline's only thread ...
    let (submit, answers) = prepares_answered_by_id(&handle);
    submit(1);
    commit_began.recv().unwrap();
    // ... so these 20 wait in the queue, applied by nobody, answered to
    // nobody, until it is done.
    for id in 2..=21 {
        submit(id);
    }
    assert!(
        answers.recv_timeout(Duration::from_millis(50)).is_err(),
        "nothing is answered before its commit"
    );
    let_finish.send(()).unwrap();
    let (first, result) = answers.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(first, 1);
    assert!(result.is_ok(), "{result:?}");
    commit_began.recv().unwrap();
    assert!(
        answers.recv_timeout(Duration::from_millis(50)).is_err(),
        "the second batch is answered only after its own commit"
    );
    let_finish.send(()).unwrap();
    let mut answered: Vec<u128> = (2..=21)
        .map(|_| {
            let (id, result) = answers.recv_timeout(Duration::from_secs(10)).unwrap();
            assert!(result.is_ok(), "{result:?}");
            id
        })
        .collect();
    answered.sort_unstable();
    assert_eq!(answered, (2..=21).collect::<Vec<_>>());
    assert_eq!(
        handle.stats().ledger_batches - batches_before,
        2,
        "one batch for the first prepare, one for the 20 that waited"
    );
    assert_eq!(transfers_per_commit.lock().unwrap()[1..], [1, 20]);
    drop(let_finish);
    engine.shutdown().unwrap();
}

#[test]
fn the_pipeline_shape_follows_the_thread_count_and_the_machine() {
    for count in [1, 2] {
        assert_eq!(PipelineThreads::from_count(count).unwrap().count(), count);
    }
    assert_eq!(PipelineThreads::from_count(0), None);
    assert_eq!(PipelineThreads::from_count(3), None);
    assert_eq!(PipelineThreads::for_cores(2), PipelineThreads::One);
    assert_eq!(PipelineThreads::for_cores(4), PipelineThreads::One);
    assert_eq!(PipelineThreads::for_cores(5), PipelineThreads::Two);
    assert_eq!(PipelineThreads::for_cores(64), PipelineThreads::Two);
}

/// With a retention horizon both pipeline shapes read the ids a batch names
/// that left memory from the store before applying it (on the writer in a
/// one-thread pipeline, on the ledger thread's own reader in a two-thread
/// one), and the ledger applies its rules to the stored copy: a resend of a
/// transfer that left memory is a duplicate, a changed one is refused, a
/// resent fulfil is a duplicate, a read finds it, a fresh id is new, and
/// nothing moves twice.
#[test]
fn both_pipeline_shapes_read_ids_that_left_memory_before_applying() {
    let limits = Limits {
        transfer_retention_ms: Some(60_000),
        // Crowded at once: finished transfers leave as soon as durable.
        max_finished_in_memory: 0,
        ..Limits::default()
    };
    for threads in [PipelineThreads::One, PipelineThreads::Two] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let (ledger, _) = recover(&mut store, limits).unwrap();
        let engine = Engine::start(ledger, Box::new(store), config(threads));
        let handle = engine.handle();
        handle.execute(onboarding()).unwrap();
        // Its deposits' ids were read too.
        let onboarding_reads = handle.stats().store_lookups;
        let reserved = handle.execute(vec![prepare(1, far_future())]).unwrap();
        assert!(
            matches!(&reserved[0], Outcome::Transfer(v) if v.state == TransferState::Reserved),
            "{threads:?}: {reserved:?}"
        );
        let committed = match &handle.execute(vec![fulfil(1)]).unwrap()[0] {
            Outcome::Transfer(view) if view.state == TransferState::Committed => *view,
            other => panic!("{other:?}"),
        };
        // Eviction is the ledger thread's own business, after the commit.
        let deadline = Instant::now() + Duration::from_secs(10);
        while handle.transfer_memory().1 < 1 {
            assert!(Instant::now() < deadline, "transfer 1 never left memory");
            std::thread::sleep(Duration::from_millis(5));
        }

        let resent = handle.execute(vec![prepare(1, far_future())]).unwrap();
        assert_eq!(resent, [Outcome::Duplicate(committed)], "{threads:?}");
        let mut modified = prepare(1, far_future());
        if let Command::Prepare(prepare) = &mut modified {
            prepare.request_hash = RequestHash([0xee; 32]);
        }
        let refused = handle.execute(vec![modified]).unwrap();
        assert_eq!(refused[0].error_code(), Some(ErrorCode::MODIFIED_REQUEST));
        let fulfilled_again = handle.execute(vec![fulfil(1)]).unwrap();
        assert_eq!(fulfilled_again, [Outcome::Duplicate(committed)]);
        let read = handle
            .execute(vec![Command::ReadTransfer {
                transfer_id: TransferId::new(1),
            }])
            .unwrap();
        assert_eq!(read, [Outcome::StoredTransfer(committed)]);
        // A fresh id twice in one submission: read once, new, then a
        // duplicate.
        let fresh = handle
            .execute(vec![prepare(2, far_future()), prepare(2, far_future())])
            .unwrap();
        assert!(matches!(&fresh[0], Outcome::Transfer(v) if v.state == TransferState::Reserved));
        assert!(matches!(&fresh[1], Outcome::Duplicate(_)), "{fresh:?}");
        assert_eq!(
            handle.stats().store_lookups - onboarding_reads,
            4,
            "1 resent, modified, fulfilled again and read once it left; fresh ids are not read"
        );
        let live = engine.shutdown().unwrap();

        let mut store = open(dir.path());
        let (recovered, _) = recover(&mut store, Limits::default()).unwrap();
        assert!(recovered.snapshot().audit().is_empty());
        let payer_position = |ledger: &Ledger| {
            let accounts = ledger.snapshot().accounts;
            accounts.into_iter().find(|a| a.id == AccountId(3)).unwrap()
        };
        let payer = payer_position(&live);
        assert_eq!(payer, payer_position(&recovered));
        assert_eq!(
            (payer.value, payer.reserved),
            (Amount::from_whole(10), Amount::from_whole(10)),
            "one transfer committed once, one reserved once"
        );
    }
}

/// Reads where the row of transfer 2 is damaged and a read that asks for
/// transfer 9 fails as a whole (an I/O error); nothing else is stored.
struct FailingReads;

impl store::Prefetch for FailingReads {
    fn prefetch(&mut self, ids: &PrefetchIds) -> Result<Prefetched, StoreError> {
        if ids.transfers.contains(&TransferId::new(9)) {
            return Err(StoreError::fatal("disk I/O error"));
        }
        let mut prefetched = Prefetched::default();
        for &id in &ids.transfers {
            let lookup = match id == TransferId::new(2) {
                true => {
                    let damaged = "participant name is stored as Null, not text";
                    prefetched.unreadable.push(format!("{id}: {damaged}"));
                    Lookup::Failed
                }
                false => Lookup::Absent,
            };
            prefetched.transfers.insert(id, lookup);
        }
        // One answer per id asked, as the trait says (a debug build of the
        // pipeline checks it): no quote is stored.
        for &id in &ids.quotes {
            prefetched.quotes.insert(id, Lookup::Absent);
        }
        for &id in &ids.conversions {
            prefetched.conversions.insert(id, Lookup::Absent);
        }
        Ok(prefetched)
    }
}

/// A store that commits whatever it is given and reads as [`FailingReads`]
/// on its writer and on a reader of its own.
struct LookupFailingStore;

impl Store for LookupFailingStore {
    fn commit(&mut self, _: &[&[Record]]) -> Result<(), StoreError> {
        Ok(())
    }

    fn load(&mut self) -> Result<Snapshot, StoreError> {
        Ok(Snapshot::default())
    }

    fn prefetch(&mut self, ids: &PrefetchIds) -> Result<Prefetched, StoreError> {
        store::Prefetch::prefetch(&mut FailingReads, ids)
    }

    fn open_prefetcher(&self) -> Result<Box<dyn store::Prefetch>, StoreError> {
        Ok(Box::new(FailingReads))
    }

    fn describe(&self) -> String {
        "lookup-failing test store".into()
    }
}

/// A failed read refuses the commands that needed it (2003, nothing
/// reserved) and nothing else: a damaged row only its own prepare, a read
/// failing as a whole those of its batch; an expiry and a prepare whose id
/// is answered in the same batch go through, and the pipeline takes work
/// afterwards. Both pipeline shapes.
#[test]
fn a_failed_store_read_refuses_only_the_commands_that_needed_it() {
    for threads in [PipelineThreads::One, PipelineThreads::Two] {
        a_failed_store_read_refuses_only_what_needed_it(threads);
    }
}

fn a_failed_store_read_refuses_only_what_needed_it(threads: PipelineThreads) {
    let clock_ms = Arc::new(std::sync::atomic::AtomicI64::new(1_000));
    let clock = {
        let clock_ms = clock_ms.clone();
        Arc::new(move || clock_ms.load(std::sync::atomic::Ordering::SeqCst))
    };
    // Restored from a store that summed a transfer it did not load: the
    // ledger cannot know which ids left memory, so it reads every id it
    // does not hold (a fresh ledger would read only ids that left).
    let limits = Limits {
        transfer_retention_ms: Some(60_000),
        ..Limits::default()
    };
    let summed = Snapshot {
        archived: Archived {
            transfers: 1,
            ..Archived::default()
        },
        ..Snapshot::default()
    };
    let engine = Engine::start(
        Ledger::restore(summed, limits).expect("restore"),
        Box::new(LookupFailingStore),
        EngineConfig {
            clock,
            ..config(threads)
        },
    );
    let handle = engine.handle();
    handle.execute(onboarding()).unwrap();
    let onboarding_reads = handle.stats().store_lookups;
    let lookups = || handle.stats().store_lookups - onboarding_reads;
    let reserved = handle.execute(vec![prepare(1, 2_000)]).unwrap();
    assert!(matches!(&reserved[0], Outcome::Transfer(v) if v.state == TransferState::Reserved));
    assert_eq!(lookups(), 1);

    // Transfer 1 is due: the next batch starts with its expiry.
    clock_ms.store(2_500, std::sync::atomic::Ordering::SeqCst);
    let reserved = |outcome: &Outcome| matches!(outcome, Outcome::Transfer(v) if v.state == TransferState::Reserved);
    let outcomes = handle
        .execute(vec![
            prepare(2, 10_000),
            prepare(5, 10_000),
            prepare(3, 10_000),
        ])
        .unwrap();
    assert_eq!(
        outcomes[0].error_code(),
        Some(ErrorCode::SERVICE_UNAVAILABLE),
        "{threads:?}: {outcomes:?}"
    );
    assert!(reserved(&outcomes[1]), "{outcomes:?}");
    assert!(reserved(&outcomes[2]), "{outcomes:?}");
    assert_eq!(lookups(), 4);
    let outcomes = handle
        .execute(vec![prepare(6, 10_000), prepare(9, 10_000)])
        .unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| o.error_code() == Some(ErrorCode::SERVICE_UNAVAILABLE)),
        "{outcomes:?}"
    );
    assert_eq!(lookups(), 6);
    let read = |id| {
        handle.execute(vec![Command::ReadTransfer {
            transfer_id: TransferId::new(id),
        }])
    };
    assert!(
        matches!(&read(1).unwrap()[0], Outcome::Transfer(v) if v.state == TransferState::Expired),
        "the expiry in the same batch went through"
    );
    assert_eq!(
        read(6).unwrap()[0].error_code(),
        Some(ErrorCode::TRANSFER_ID_NOT_FOUND),
        "never created"
    );
    for unreadable in [2, 9] {
        assert_eq!(
            read(unreadable).unwrap()[0].error_code(),
            Some(ErrorCode::SERVICE_UNAVAILABLE),
            "not decided without the store"
        );
    }
    let later = handle.execute(vec![prepare(4, 10_000)]).unwrap();
    assert!(matches!(&later[0], Outcome::Transfer(v) if v.state == TransferState::Reserved));
    engine.shutdown().unwrap();
}

/// A store that commits the first `healthy` batches, then holds the next
/// commit until the test lets it go and fails it, and every later one,
/// with a transient error (a database connection that will not come back).
struct StuckStore {
    healthy: usize,
    held: bool,
    began: mpsc::Sender<()>,
    proceed: mpsc::Receiver<()>,
}

impl Store for StuckStore {
    fn commit(&mut self, _: &[&[Record]]) -> Result<(), StoreError> {
        if self.healthy > 0 {
            self.healthy -= 1;
            return Ok(());
        }
        if !self.held {
            self.held = true;
            let _ = self.began.send(());
            let _ = self.proceed.recv();
        }
        Err(StoreError::transient(
            "server closed the connection unexpectedly",
        ))
    }

    fn load(&mut self) -> Result<Snapshot, StoreError> {
        Ok(Snapshot::default())
    }

    fn describe(&self) -> String {
        "stuck test store".into()
    }
}

/// A shutdown while a commit retries a transient failure and the queue is
/// full still ends: the retrying gives up once the stop is said, and
/// everything queued is answered with why, never acknowledged.
fn shutdown_ends_while_the_store_fails_and_the_queue_is_full(threads: PipelineThreads) {
    let (began, commit_began) = mpsc::channel();
    let (let_fail, proceed) = mpsc::channel();
    let engine = Engine::start(
        Ledger::new(Limits::default()),
        Box::new(StuckStore {
            healthy: 1,
            held: false,
            began,
            proceed,
        }),
        EngineConfig {
            queue_capacity: 1,
            ..config(threads)
        },
    );
    let handle = engine.handle();
    handle.execute(onboarding()).unwrap();
    let (submit, answers) = prepares_answered_by_id(&handle);
    submit(1);
    commit_began.recv().unwrap();
    // The pipeline is busy with 1; 2 fills the queue's only place.
    submit(2);
    let_fail.send(()).unwrap();
    await_fault(&handle);
    let (stopped, shut_down) = mpsc::channel();
    std::thread::spawn(move || stopped.send(engine.shutdown()).unwrap());
    let result = shut_down
        .recv_timeout(Duration::from_secs(60))
        .expect("shutdown ended");
    assert!(
        matches!(result, Err(EngineError::StoreFailed(_))),
        "{:?}",
        result.err()
    );
    let mut answered: Vec<u128> = (0..2)
        .map(|_| {
            let (id, result) = answers.recv_timeout(Duration::from_secs(5)).unwrap();
            assert!(result.is_err(), "{id}: {result:?}");
            id
        })
        .collect();
    answered.sort_unstable();
    assert_eq!(answered, [1, 2], "{threads:?}");
}

fn a_pipeline_that_fails_for_good_says_so_once(threads: PipelineThreads) {
    let (sender, told) = mpsc::channel();
    let config = EngineConfig {
        on_failed: Some(Box::new(move |why: &str| {
            let _ = sender.send(why.to_string());
        })),
        ..config(threads)
    };
    let engine = Engine::start(
        Ledger::new(Limits::default()),
        Box::new(FailingStore { healthy: 1 }),
        config,
    );
    let handle = engine.handle();
    handle.execute(onboarding()).unwrap();
    assert!(told.try_recv().is_err(), "told of a failure before one");
    let failed = handle.execute(vec![prepare(1, far_future())]);
    assert!(
        matches!(failed, Err(EngineError::StoreFailed(_))),
        "{failed:?}"
    );
    let why = told
        .recv_timeout(Duration::from_secs(10))
        .expect("told when the pipeline stops for good");
    assert!(why.contains("fsync"), "{why}");
    let _ = handle.execute(vec![prepare(2, far_future())]);
    assert!(
        told.recv_timeout(Duration::from_millis(200)).is_err(),
        "told twice"
    );
    assert!(engine.shutdown().is_err());
}

fn an_abandoned_pipeline_commits_nothing_more_and_answers_what_it_held(threads: PipelineThreads) {
    let (engine, full, committed) = on_full_disk_store(threads);
    let handle = engine.handle();
    let before = committed.lock().unwrap().len();

    // A commit is being retried (the database away) when the process must
    // stop serving.
    full.store(true, std::sync::atomic::Ordering::SeqCst);
    let (sender, held) = mpsc::channel();
    handle.submit(
        vec![prepare(1, far_future())],
        Box::new(move |result| sender.send(result).unwrap()),
    );
    await_fault(&handle);
    let abandoned_at = Instant::now();
    assert!(
        engine.abandon(Duration::from_secs(10)),
        "the threads did not end"
    );
    // At once, not after the shutdown's last retries.
    assert!(abandoned_at.elapsed() < Duration::from_secs(5));
    let answer = held
        .recv_timeout(Duration::from_secs(1))
        .expect("the held submission is answered");
    assert!(
        matches!(answer, Err(EngineError::StoreFailed(ref why)) if why.contains("abandoned")),
        "{answer:?}"
    );
    // The store works again: nothing of the abandoned pipeline reaches it.
    full.store(false, std::sync::atomic::Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(committed.lock().unwrap().len(), before);
    assert!(handle.execute(vec![prepare(2, far_future())]).is_err());
    assert_eq!(committed.lock().unwrap().len(), before);
}

/// Waits until the pipeline reports a transient store fault.
fn await_fault(handle: &engine::EngineHandle) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !matches!(handle.store_health(), StoreHealth::Faulted(_)) {
        assert!(Instant::now() < deadline, "the fault is never reported");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// On one thread, a read queued while the commit in hand was still being
/// tried (before its failure was known) is answered from memory once the
/// fault is, not held for the whole outage; a change queued alike waits
/// for the store.
#[test]
fn on_one_thread_a_read_queued_before_the_fault_is_answered_from_memory() {
    let (began, commit_began) = mpsc::channel();
    let (let_fail, proceed) = mpsc::channel();
    let engine = Engine::start(
        Ledger::new(Limits::default()),
        Box::new(StuckStore {
            healthy: 1,
            held: false,
            began,
            proceed,
        }),
        config(PipelineThreads::One),
    );
    let handle = engine.handle();
    handle.execute(onboarding()).unwrap();
    let (submit, answers) = prepares_answered_by_id(&handle);
    submit(1);
    commit_began.recv().unwrap();
    let (read_sent, read) = mpsc::channel();
    handle.submit(
        vec![Command::ReadParticipants {
            name: Some(name("payerfsp")),
        }],
        Box::new(move |result| read_sent.send(result).unwrap()),
    );
    submit(2);
    let_fail.send(()).unwrap();
    let outcomes = read
        .recv_timeout(Duration::from_secs(10))
        .expect("answered while the store fails")
        .expect("from memory");
    assert_eq!(position_reserved(&outcomes[0]), Amount::from_whole(10));
    assert!(
        answers.recv_timeout(Duration::from_millis(200)).is_err(),
        "no prepare is acknowledged"
    );
    // The shutdown gives up on the store after a while; not waited for.
    std::thread::spawn(move || drop(engine.shutdown()));
}

/// The reserved amount of the first participant's position account in a
/// `ReadParticipants` outcome.
fn position_reserved(outcome: &Outcome) -> Amount {
    let Outcome::Participants(views) = outcome else {
        panic!("{outcome:?}");
    };
    views[0]
        .accounts
        .iter()
        .find(|account| account.kind == AccountKind::Position)
        .unwrap()
        .reserved
}
