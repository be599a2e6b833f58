//! The dashboard end to end on the real binary: transfers committed and
//! failed through the FSPIOP flow are folded into the hourly rollup by
//! the hub's follower, `GET /stats/hourly` shows them with exact counts
//! and amounts, nothing doubles when the hub is killed and started again,
//! a DFSP's person sees only its own pairs, bad ranges are refused in the
//! FSPIOP error format, and `/console/dashboard` draws the charts. (The
//! fold itself is checked on both backends in
//! `crates/store/tests/rollup.rs`.)

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

const THIRD: &str = "thirdfsp";

fn hourly(hub: &Hub, token: &str, query: &str) -> Response {
    hub.admin_as(Some(token), "GET", &format!("/stats/hourly?{query}"), None)
}

/// The pair's (committed, amount, failed) summed over the hours.
fn pair(stats: &Value, payer: &str, payee: &str) -> (u64, String, u64) {
    let mut committed = 0;
    let mut failed = 0;
    let mut amount = ledger::Amount::ZERO;
    for row in stats["pairs"].as_array().unwrap() {
        if row["payer"] == payer && row["payee"] == payee {
            assert_eq!(row["currency"], "USD");
            committed += row["committed"].as_u64().unwrap();
            failed += row["failed"].as_u64().unwrap();
            let this = ledger::Amount::parse_signed(row["amount"].as_str().unwrap()).unwrap();
            amount = amount.checked_add(this).unwrap();
        }
    }
    (committed, amount.to_string(), failed)
}

/// Waits (with a deadline) until the rollup shows `expected` for the pair.
fn await_pair(
    hub: &Hub,
    token: &str,
    payer: &str,
    payee: &str,
    expected: (u64, &str, u64),
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = hourly(hub, token, "range=24h");
        assert_eq!(response.status, 200, "{response:?}");
        let stats = response.json();
        let seen = pair(&stats, payer, payee);
        if (seen.0, seen.1.as_str(), seen.2) == expected {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "{payer}->{payee}: {seen:?}, not {expected:?}: {stats}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map(|value| value as u64)
}

fn committed_transfer(s: &Scenario, amount: &str) {
    let (id, _) = s.reserve(amount, far_future());
    s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    s.payer.expect("PUT", &format!("/transfers/{id}"));
    s.payee.expect("PUT", &format!("/transfers/{id}"));
}

fn console_page(hub: &Hub, token: &str) -> Response {
    let cookie = hub.console_session(token);
    let response = http(
        hub.admin,
        "GET",
        "/console/dashboard?range=7d",
        &[("Cookie".to_string(), cookie)],
        b"",
    );
    assert_eq!(response.status, 200, "{response:?}");
    response
}

#[test]
fn the_rollup_counts_each_transfer_once_across_a_restart_and_a_dfsp_sees_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (operator, operator_line) = admin_token("alice", "operator");
    let (dfsp, dfsp_line) = admin_token("payer-ops", "dfsp:payerfsp");
    let file = dir.path().join("admin-tokens");
    std::fs::write(&file, format!("{operator_line}\n{dfsp_line}\n")).unwrap();
    let data = dir.path().join("data");
    let flags = ["--admin-tokens", file.to_str().unwrap()];
    let mut hub = Hub::start_with(&data, &flags);
    hub.admin_bearer = Some(operator.clone());
    let mut s = Scenario::on(hub, dir, 10_000, 5_000);
    let third = Stub::start(THIRD);
    s.hub.onboard(THIRD, &third.base_url(), 10_000, 5_000);

    for amount in ["1.5", "2", "3"] {
        committed_transfer(&s, amount);
    }
    // Refused by the payee: a failure with its code.
    let (refused, _) = s.reserve("9", far_future());
    let response = s.hub.reject(
        &refused,
        PAYEE,
        PAYER,
        &error_body("5101", "Payee transaction limit reached"),
    );
    assert_eq!(response.status, 200, "{response:?}");
    s.payer
        .expect("PUT", &format!("/transfers/{refused}/error"));
    // Between two other DFSPs: not the payer's to see.
    let other = new_id();
    let body = prepare_body(&other, PAYEE, THIRD, "7", far_future());
    assert_eq!(s.hub.prepare(PAYEE, THIRD, &body).status, 202);
    third.expect("POST", "/transfers");
    let response = s
        .hub
        .fulfil(&other, THIRD, PAYEE, &fulfil_body(FULFILMENT, "COMMITTED"));
    assert_eq!(response.status, 200, "{response:?}");

    await_pair(&s.hub, &operator, PAYEE, THIRD, (1, "7", 0));
    let stats = await_pair(&s.hub, &operator, PAYER, PAYEE, (3, "6.5", 1));
    assert_eq!(stats["hours"], 24);
    let errors: Vec<(String, u64)> = stats["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["errorCode"].as_str().unwrap().to_string(),
                e["failures"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(errors, [("5101".to_string(), 1)]);
    let timed: u64 = stats["latency"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["transfers"].as_u64().unwrap())
        .sum();
    assert_eq!(timed, 5, "every finish of a prepared transfer is timed");
    assert!(stats["latency"][0]["p99Ms"].as_u64().is_some(), "{stats}");
    s.hub.await_metrics("kasi_rollup_lag 0", |text| {
        (metric(text, "kasi_rollup_lag") == Some(0)).then_some(())
    });

    // The payer's person: its own pairs only.
    let own = hourly(&s.hub, &dfsp, "range=24h");
    assert_eq!(own.status, 200, "{own:?}");
    let own = own.json();
    assert!(!own["pairs"].as_array().unwrap().is_empty());
    for list in ["pairs", "errors", "latency"] {
        for row in own[list].as_array().unwrap() {
            assert!(
                row["payer"] == PAYER || row["payee"] == PAYER,
                "{list}: {row}"
            );
        }
    }
    assert_eq!(pair(&own, PAYEE, THIRD), (0, "0".to_string(), 0));
    assert_eq!(pair(&own, PAYER, PAYEE), (3, "6.5".to_string(), 1));

    // Refused in the admin API's error format.
    for query in [
        "range=1y",
        "from=0&to=3000000000",
        "range=24h&from=0",
        "foo=1",
    ] {
        assert_error_response(&hourly(&s.hub, &operator, query), 400, "3100");
    }

    // The console draws it: the operator sees every DFSP, the payer's
    // person only its own.
    let page = console_page(&s.hub, &operator).text();
    assert!(
        page.contains("<svg") && page.contains("aria-labelledby=\"by-payer-title by-payer-desc\"")
    );
    for name in [PAYER, PAYEE, THIRD, "5101"] {
        assert!(page.contains(name), "{name} on the page");
    }
    assert!(
        page.contains(&format!("<title>{PAYER}: 4 transfers</title>")),
        "{page}"
    );
    assert!(
        page.contains("href=\"/console/dashboard\""),
        "in the navigation"
    );
    let theirs = console_page(&s.hub, &dfsp).text();
    assert!(theirs.contains("<svg") && theirs.contains(PAYER));
    assert!(!theirs.contains(THIRD), "{theirs}");

    // Killed and started again: it goes on from its cursor, nothing twice.
    s.hub.kill();
    s.hub = Hub::start_with(&data, &flags);
    s.hub.admin_bearer = Some(operator.clone());
    // Not through the stubs: callbacks owed from before the crash may
    // reach them again.
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "4", far_future());
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.hub.admin("GET", &format!("/transfers/{id}"), None).status != 200 {
        assert!(Instant::now() < deadline, "the prepare is not committed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let response = s
        .hub
        .fulfil(&id, PAYEE, PAYER, &fulfil_body(FULFILMENT, "COMMITTED"));
    assert_eq!(response.status, 200, "{response:?}");
    await_pair(&s.hub, &operator, PAYER, PAYEE, (4, "10.5", 1));
    let stats = await_pair(&s.hub, &operator, PAYEE, THIRD, (1, "7", 0));
    assert_eq!(stats["errors"].as_array().unwrap().len(), 1, "{stats}");
}
