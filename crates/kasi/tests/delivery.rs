//! Callbacks are delivered at least once: to a DFSP that was down once it
//! is back, across a SIGKILL, and as dead letters re-sent by the operator.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// Polls `check` every 20 ms until it gives a value, or fails after `within`.
fn eventually<T>(within: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn health_of(hub: &Hub, participant: &str) -> Value {
    let list = hub
        .admin_expect(
            "GET",
            &format!("/callbacks/health?participant={participant}"),
            None,
            200,
        )
        .json();
    list[0].clone()
}

#[test]
fn a_dfsp_that_was_down_gets_its_callbacks_when_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    let payer = Stub::start(PAYER);
    let payee_address = reserve_address();
    hub.onboard(PAYER, &payer.base_url(), 10_000, 5_000);
    hub.onboard(PAYEE, &format!("http://{payee_address}"), 10_000, 5_000);

    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", now_ms() + 60_000);
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    // The hub tries, fails, and says so.
    // (Failing from the first failure; retried once its backoff has passed.)
    let failing = eventually(CALLBACK_WAIT, "payee failing and retried", || {
        let health = health_of(&hub, PAYEE);
        (health["failingSince"].is_string() && health["retried"].as_u64() >= Some(1))
            .then_some(health)
    });
    assert_eq!(failing["sentOk"], 0, "{failing}");
    hub.await_metric_line("kasi_callbacks_failing_since_seconds{destination=\"payeefsp\"} 1");

    let payee = Stub::start_on(PAYEE, payee_address);
    let forwarded = payee.expect("POST", "/transfers");
    assert_eq!(forwarded.text(), body, "the prepare as the payer sent it");
    let healthy = eventually(CALLBACK_WAIT, "payee healthy", || {
        let health = health_of(&hub, PAYEE);
        health["failingSince"].is_null().then_some(health)
    });
    assert_eq!(healthy["deadLetters"], 0, "{healthy}");
    // The operator's log has the outage's start and end, once each.
    eventually(CALLBACK_WAIT, "the outage in the log", || {
        let log = hub.log();
        (log.contains("callbacks to this DFSP are failing")
            && log.contains("callbacks to this DFSP are answered again"))
        .then_some(())
    });
    assert_eq!(
        hub.log()
            .matches("callbacks to this DFSP are failing")
            .count(),
        1,
        "one line per outage, not per retry"
    );

    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    assert_eq!(hub.fulfil(&id, PAYEE, PAYER, &fulfil).status, 200);
    payer.expect("PUT", &format!("/transfers/{id}"));
    payee.expect("PUT", &format!("/transfers/{id}"));
}

/// The transfer id a callback is about: the path's, or a POST's body's.
fn transfer_of(received: &Received) -> Option<String> {
    if received.method == "POST" && received.path == "/transfers" {
        return received.json()["transferId"].as_str().map(str::to_string);
    }
    received
        .path
        .strip_prefix("/transfers/")
        .map(|rest| rest.trim_end_matches("/error").to_string())
}

#[test]
fn after_a_sigkill_under_load_every_acknowledged_outcome_is_told() {
    let mut s = Scenario::with_payer(1_000_000, 1_000_000);
    let api = s.hub.api;
    let stop = AtomicBool::new(false);
    let prepared = Mutex::new(Vec::<String>::new());
    let committed = Mutex::new(Vec::<String>::new());
    let expiration = now_ms() + 120_000;
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    let id = new_id();
                    let body = prepare_body(&id, PAYER, PAYEE, "1", expiration);
                    if try_api(api, "POST", "/transfers", PAYER, PAYEE, &body) != Some(202) {
                        continue;
                    }
                    prepared.lock().unwrap().push(id.clone());
                    // Every third stays reserved: its prepare must reach the payee.
                    if id.as_bytes()[id.len() - 1].is_multiple_of(3) {
                        continue;
                    }
                    let path = format!("/transfers/{id}");
                    let body = fulfil_body(FULFILMENT, "COMMITTED");
                    if try_api(api, "PUT", &path, PAYEE, PAYER, &body) == Some(200) {
                        committed.lock().unwrap().push(id);
                    }
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while committed.lock().unwrap().len() < 300 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        s.hub.kill();
        stop.store(true, Ordering::SeqCst);
    });
    let prepared: HashSet<String> = prepared.into_inner().unwrap().into_iter().collect();
    let committed: HashSet<String> = committed.into_inner().unwrap().into_iter().collect();
    assert!(committed.len() >= 100, "only {} committed", committed.len());

    s.hub = Hub::start(&s.dir.path().join("data"));
    let mut payee_prepares = HashSet::new();
    let mut payer_commits = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    let missing = |payee_prepares: &HashSet<String>, payer_commits: &HashSet<String>| {
        prepared.difference(payee_prepares).count() + committed.difference(payer_commits).count()
    };
    while missing(&payee_prepares, &payer_commits) > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "{} acknowledged prepares never reached the payee, {} acknowledged commits never reached the payer",
            prepared.difference(&payee_prepares).count(),
            committed.difference(&payer_commits).count()
        );
        let step = left.min(Duration::from_millis(50));
        while let Some(received) = s.payee.next_within(Duration::ZERO) {
            if received.method == "POST" {
                payee_prepares.extend(transfer_of(&received));
            }
        }
        if let Some(received) = s.payer.next_within(step) {
            if received.method == "PUT" && !received.path.ends_with("/error") {
                let body = received.json();
                assert_eq!(body["transferState"], "COMMITTED", "{received:?}");
                payer_commits.extend(transfer_of(&received));
            }
        }
    }
}

#[test]
fn dead_letters_are_listed_kept_across_a_restart_and_resent() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut hub = Hub::start_with(&data, &["--callback-retry-for-s", "1"]);
    hub.setup();
    let payer_address = reserve_address();
    let payee = Stub::start(PAYEE);
    hub.onboard(PAYER, &format!("http://{payer_address}"), 10_000, 5_000);
    hub.onboard(PAYEE, &payee.base_url(), 10_000, 5_000);

    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", now_ms() + 60_000);
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    payee.expect("POST", "/transfers");
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    assert_eq!(hub.fulfil(&id, PAYEE, PAYER, &fulfil).status, 200);
    payee.expect("PUT", &format!("/transfers/{id}"));

    let list = |hub: &Hub| {
        hub.admin_expect(
            "GET",
            &format!("/callbacks/dead-letters?participant={PAYER}"),
            None,
            200,
        )
        .json()
    };
    let letters = eventually(Duration::from_secs(8), "a dead letter", || {
        let letters = list(&hub);
        (!letters.as_array().unwrap().is_empty()).then_some(letters)
    });
    assert_eq!(letters.as_array().unwrap().len(), 1, "{letters}");
    assert_eq!(letters[0]["transferId"], id.as_str(), "{letters}");
    assert_eq!(letters[0]["method"], "PUT", "{letters}");
    assert!(letters[0]["attempts"].as_u64().unwrap() >= 1, "{letters}");
    let others = hub
        .admin_expect(
            "GET",
            &format!("/callbacks/dead-letters?participant={PAYEE}"),
            None,
            200,
        )
        .json();
    assert_eq!(others, serde_json::json!([]));
    hub.await_metric_line("kasi_callbacks_dead_letters{destination=\"payerfsp\"} 1");

    // Kept durably.
    hub.terminate();
    let hub = Hub::start_with(&data, &["--callback-retry-for-s", "5"]);
    let kept = list(&hub);
    assert_eq!(kept[0]["transferId"], id.as_str(), "{kept}");

    let payer = Stub::start_on(PAYER, payer_address);
    let answer = hub.admin_expect(
        "POST",
        &format!("/callbacks/dead-letters/resend?participant={PAYER}"),
        None,
        202,
    );
    assert_eq!(answer.json()["resent"], 1);
    let resent = payer.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(resent.text(), fulfil, "the payee's fulfil, byte for byte");
    eventually(CALLBACK_WAIT, "the dead letter forgotten", || {
        list(&hub).as_array().unwrap().is_empty().then_some(())
    });
}
