//! Bounded memory through the real binary: with a short
//! `--transfer-retention`, finished transfers leave the ledger's memory
//! (seen on `/metrics`), yet a `GET`, a resent prepare and a resent fulfil of
//! one are still answered, from the store, and move no money twice; a
//! restart loads only what is within the horizon and still adds up.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

/// Both pipeline shapes: the ledger thread reads ids that left memory from
/// the store just before it applies the batch naming them, on the writer's
/// connection (one pipeline thread) or on a reader of its own (two).
const RETENTION_ONE_THREAD: &[&str] = &["--transfer-retention", "1s", "--pipeline-threads", "1"];
const RETENTION_TWO_THREADS: &[&str] = &["--transfer-retention", "1s", "--pipeline-threads", "2"];
const LOOKUPS: &str = "kasi_store_lookups_total";

fn metric(hub: &Hub, name: &str) -> f64 {
    let response = hub.admin("GET", "/metrics", None);
    assert_eq!(response.status, 200, "{response:?}");
    let text = response.text();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Polls `/metrics` until `name` reaches `at_least` (the eviction is an
/// event of the ledger thread's own; there is nothing else to wait on).
fn wait_for_metric(hub: &Hub, name: &str, at_least: f64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let value = metric(hub, name);
        if value >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} stayed at {value}, below {at_least}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

const IN_MEMORY: &str = "kasi_ledger_transfers_in_memory";
const EVICTED: &str = "kasi_ledger_transfers_evicted_total";

#[test]
fn transfers_past_the_horizon_leave_memory_and_are_still_answered_and_recognised() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut hub = Hub::start_with(&data, RETENTION_ONE_THREAD);
    hub.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    hub.onboard(PAYER, &payer.base_url(), 10_000, 5_000);
    hub.onboard(PAYEE, &payee.base_url(), 10_000, 5_000);
    // The deposits (funds movements) stay in memory for good.
    let deposits = metric(&hub, IN_MEMORY);

    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "100", far_future());
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    payee.expect("POST", "/transfers");
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    assert_eq!(hub.fulfil(&id, PAYEE, PAYER, &fulfil).status, 200);
    payer.expect("PUT", &format!("/transfers/{id}"));
    payee.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(hub.position(PAYER), 100.0);

    // A second later it leaves memory, with no traffic to prompt it.
    wait_for_metric(&hub, EVICTED, 1.0);
    assert_eq!(
        metric(&hub, IN_MEMORY),
        deposits,
        "the transfer left memory"
    );

    let check = |hub: &Hub| {
        // GET: answered from the store with the final state.
        let response = hub.get_transfer(&id, PAYER, PAYEE);
        assert_eq!(response.status, 202, "{response:?}");
        let state = payer.expect("PUT", &format!("/transfers/{id}"));
        assert_eq!(
            state.json()["transferState"],
            json!("COMMITTED"),
            "{state:?}"
        );
        assert!(state.json()["fulfilment"].is_string(), "{state:?}");

        // A resent prepare is a duplicate: its state again, no money moves.
        assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
        let state = payer.expect("PUT", &format!("/transfers/{id}"));
        assert_eq!(
            state.json()["transferState"],
            json!("COMMITTED"),
            "{state:?}"
        );

        // The same id with another body: 3106, nothing forwarded.
        let modified = prepare_body(&id, PAYER, PAYEE, "101", far_future());
        assert_eq!(hub.prepare(PAYER, PAYEE, &modified).status, 202);
        payer.expect_error(&id, "3106");

        // A resent fulfil: the payee gets the state.
        assert_eq!(hub.fulfil(&id, PAYEE, PAYER, &fulfil).status, 200);
        let state = payee.expect("PUT", &format!("/transfers/{id}"));
        assert_eq!(
            state.json()["transferState"],
            json!("COMMITTED"),
            "{state:?}"
        );

        // A deposit cannot take the id either (one transfer table, as in
        // central-ledger): refused, the balance unchanged.
        let settlement = hub.account_id(PAYER, "SETTLEMENT");
        let accounts = format!("/participants/{PAYER}/accounts");
        let balances_before = hub.admin("GET", &accounts, None).json();
        let deposit = hub.admin(
            "POST",
            &format!("{accounts}/{settlement}"),
            Some(&json!({
                "transferId": id,
                "externalReference": "ref",
                "action": "recordFundsIn",
                "reason": "an id already used",
                "amount": {"amount": "7", "currency": "USD"}
            })),
        );
        assert_eq!(deposit.status, 400, "{deposit:?}");
        assert_eq!(
            deposit.json()["errorInformation"]["errorCode"],
            json!("3106"),
            "{deposit:?}"
        );
        assert_eq!(hub.admin("GET", &accounts, None).json(), balances_before);

        assert_eq!(hub.position(PAYER), 100.0, "no money moved twice");
        assert_eq!(hub.position(PAYEE), -100.0);
        payee.assert_quiet(QUIET_WAIT);
        payer.assert_nothing_pending();
    };
    let lookups_before = metric(&hub, LOOKUPS);
    check(&hub);
    // The GET, the two resent prepares, the resent fulfil and the deposit
    // were read by the ledger thread, before each was applied.
    assert_eq!(metric(&hub, LOOKUPS), lookups_before + 5.0);

    // A restart loads only what is within the horizon (the store audits
    // the rest in a streaming pass), and answers the same, now with a
    // two-thread pipeline.
    // (A clean stop: it saves the exact callback delivery watermark, so the
    // restart re-sends nothing and the callbacks below are the answers.)
    assert!(hub.terminate().success());
    hub = Hub::start_with(&data, RETENTION_TWO_THREADS);
    assert_eq!(
        metric(&hub, IN_MEMORY),
        deposits,
        "the old transfer is not loaded"
    );
    check(&hub);
    assert_eq!(metric(&hub, LOOKUPS), 5.0, "two threads: read alike");
    // And again on one thread: the ledger never held this transfer since
    // the restart (it was not loaded, not evicted), so only the store knows.
    assert!(hub.terminate().success());
    hub = Hub::start_with(&data, RETENTION_ONE_THREAD);
    check(&hub);
    assert_eq!(metric(&hub, LOOKUPS), 5.0);

    // New transfers still go through, and leave too.
    let next = new_id();
    let body = prepare_body(&next, PAYER, PAYEE, "5", far_future());
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    payee.expect("POST", "/transfers");
    assert_eq!(hub.fulfil(&next, PAYEE, PAYER, &fulfil).status, 200);
    payer.expect("PUT", &format!("/transfers/{next}"));
    payee.expect("PUT", &format!("/transfers/{next}"));
    wait_for_metric(&hub, EVICTED, 1.0);
    assert_eq!(metric(&hub, IN_MEMORY), deposits);
    assert_eq!(hub.position(PAYER), 105.0);
}

const SNAPSHOTS: &[&str] = &[
    "--transfer-retention",
    "1s",
    "--history-snapshot-interval",
    "20ms",
];

/// The history snapshot advances every 20 ms under load while the hub is
/// SIGKILLed, again and again (so some kills land while one is computed or
/// written): each restart starts from a snapshot, nothing acknowledged is
/// lost, every balance adds up (the audit before serving, and `kasi audit`
/// over the whole history at the end).
#[test]
fn sigkills_while_history_snapshots_are_written_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    sigkills_while_history_snapshots_are_written(
        &data,
        &[],
        &["--data-dir".into(), data.display().to_string()],
    );
}

/// The same on PostgreSQL: each restart waits for the killed one's lease
/// to expire, warming its copy from the stored snapshot meanwhile.
#[test]
fn sigkills_while_history_snapshots_are_written_on_postgres_lose_nothing() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    sigkills_while_history_snapshots_are_written(
        &data,
        &["--store", &url, "--lease-ms", "1000"],
        &["--store".into(), url.clone()],
    );
}

fn sigkills_while_history_snapshots_are_written(
    data: &std::path::Path,
    store: &[&str],
    audit_store: &[String],
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    let flags: Vec<&str> = store.iter().chain(SNAPSHOTS).copied().collect();
    let data = data.to_path_buf();
    let mut hub = Hub::start_with(&data, &flags);
    hub.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    hub.onboard(PAYER, &payer.base_url(), 1_000_000, 1_000_000);
    hub.onboard(PAYEE, &payee.base_url(), 1_000_000, 1_000_000);
    let mut committed: Vec<String> = Vec::new();
    for round in 0..3 {
        let api = hub.api;
        let stop = AtomicBool::new(false);
        let acknowledged = Mutex::new(Vec::<String>::new());
        let started = Instant::now();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    while !stop.load(Ordering::SeqCst) {
                        let id = new_id();
                        let body = prepare_body(&id, PAYER, PAYEE, "1", now_ms() + 60_000);
                        if try_api(api, "POST", "/transfers", PAYER, PAYEE, &body) != Some(202) {
                            continue;
                        }
                        let path = format!("/transfers/{id}");
                        let body = fulfil_body(FULFILMENT, "COMMITTED");
                        if try_api(api, "PUT", &path, PAYEE, PAYER, &body) == Some(200) {
                            acknowledged.lock().unwrap().push(id);
                        }
                    }
                });
            }
            // Long enough for transfers to pass the 1 s horizon and be
            // summed into snapshots while more arrive.
            while acknowledged.lock().unwrap().len() < 200
                || started.elapsed() < Duration::from_millis(1_500)
            {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "round {round}: only {} transfers in 20 s",
                    acknowledged.lock().unwrap().len()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            hub.kill();
            stop.store(true, Ordering::SeqCst);
        });
        committed.extend(acknowledged.into_inner().unwrap());

        hub = Hub::start_with(&data, &flags);
        let log = hub.log();
        let recovered = log
            .lines()
            .find(|line| line.contains("recovered the ledger"))
            .unwrap_or_else(|| panic!("no recovery line:\n{log}"));
        assert!(
            recovered.contains("history_snapshot_through_seq=") && recovered.contains("archived="),
            "round {round}: recovery did not start from a snapshot: {recovered}"
        );
        assert!(!log.contains("did not add up"), "{log}");
        // Every acknowledged commit is in the payee's position (a commit
        // whose answer was lost in the kill may be there too; the payer's
        // also holds what is still reserved).
        let received = -hub.position(PAYEE);
        assert!(
            received >= committed.len() as f64 && hub.position(PAYER) >= received,
            "round {round}: payee received {received} < {} acknowledged commits",
            committed.len()
        );
    }
    // Acknowledged commits from every round, long evicted, answered from
    // the store as committed.
    for id in committed.iter().step_by(committed.len() / 10) {
        let response = hub.get_transfer(id, PAYER, PAYEE);
        assert_eq!(response.status, 202, "{response:?}");
        // (Callbacks re-sent after the kills may arrive first.)
        let path = format!("/transfers/{id}");
        let deadline = Instant::now() + Duration::from_secs(10);
        let state = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let received = payer
                .next_within(left)
                .unwrap_or_else(|| panic!("no answer to GET {path}"));
            if received.method == "PUT"
                && received.path == path
                && received.json()["transferState"] == json!("COMMITTED")
            {
                break received;
            }
        };
        assert!(state.json()["fulfilment"].is_string(), "{state:?}");
    }
    assert!(hub.terminate().success());
    let audit = kasi().arg("audit").args(audit_store).output().unwrap();
    assert!(
        audit.status.success(),
        "{}{}",
        String::from_utf8_lossy(&audit.stdout),
        String::from_utf8_lossy(&audit.stderr)
    );
    let said = String::from_utf8_lossy(&audit.stdout);
    assert!(
        said.contains("the history snapshot (through seq") && said.contains("agrees"),
        "{said}"
    );
}
