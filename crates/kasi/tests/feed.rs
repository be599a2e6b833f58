//! `GET /feed` on the admin address, end to end on the real binary: the
//! transfers of the real FSPIOP flow appear in commit order, a long poll
//! returns when a transfer commits (woken by the commit), a DFSP-scoped
//! person reads only its own DFSP's changes, bad parameters are refused in
//! the FSPIOP error format, and a cursor older than retention is told to
//! resynchronise (410). (The store's rows are checked on both backends in
//! `crates/store/tests/backends.rs` and `feed.rs`.)

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

const THIRD: &str = "thirdfsp";

/// The changes of an NDJSON answer.
fn lines(response: &Response) -> Vec<Value> {
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        response.header("content-type"),
        Some("application/x-ndjson"),
        "{response:?}"
    );
    response
        .text()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON object per line"))
        .collect()
}

fn feed_as(hub: &Hub, token: &str, query: &str) -> Response {
    hub.admin_as(Some(token), "GET", &format!("/feed?{query}"), None)
}

/// The newest feed_seq the hub has committed.
fn newest(hub: &Hub, token: &str) -> u64 {
    let response = feed_as(hub, token, "limit=1");
    assert_eq!(response.status, 200, "{response:?}");
    response
        .header("kasi-feed-newest")
        .expect("kasi-feed-newest")
        .parse()
        .unwrap()
}

struct Started {
    scenario: Scenario,
    operator: String,
    dfsp: String,
    third: Stub,
}

fn start(extra: &[&str]) -> Started {
    let dir = tempfile::tempdir().unwrap();
    let (operator, operator_line) = admin_token("alice", "operator");
    let (dfsp, dfsp_line) = admin_token("payer-ops", "dfsp:payerfsp");
    let file = dir.path().join("admin-tokens");
    std::fs::write(&file, format!("{operator_line}\n{dfsp_line}\n")).unwrap();
    let mut flags = vec!["--admin-tokens", file.to_str().unwrap()];
    flags.extend_from_slice(extra);
    let mut hub = Hub::start_with(&dir.path().join("data"), &flags);
    hub.admin_bearer = Some(operator.clone());
    let scenario = Scenario::on(hub, dir, 10_000, 5_000);
    let third = Stub::start(THIRD);
    scenario
        .hub
        .onboard(THIRD, &third.base_url(), 10_000, 5_000);
    Started {
        scenario,
        operator,
        dfsp,
        third,
    }
}

/// `GET /feed?after=&wait=` on a thread of its own: its answer and how
/// long it took.
fn long_poll(
    hub: &Hub,
    token: &str,
    after: u64,
    wait_s: u64,
) -> std::thread::JoinHandle<(Response, Duration)> {
    let admin = hub.admin;
    let bearer = format!("Bearer {token}");
    std::thread::spawn(move || {
        let started = Instant::now();
        let response = http(
            admin,
            "GET",
            &format!("/feed?after={after}&wait={wait_s}"),
            &[("Authorization".to_string(), bearer)],
            b"",
        );
        (response, started.elapsed())
    })
}

/// A transfer from the payer to the payee, committed; its id.
fn committed_transfer(s: &Scenario, amount: &str) -> String {
    let (id, _) = s.reserve(amount, far_future());
    s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    s.payer.expect("PUT", &format!("/transfers/{id}"));
    s.payee.expect("PUT", &format!("/transfers/{id}"));
    id
}

#[test]
fn transfers_appear_in_commit_order_a_long_poll_wakes_on_commit_and_a_dfsp_reads_its_own() {
    let Started {
        scenario: s,
        operator,
        dfsp,
        third,
    } = start(&[]);
    let before = newest(&s.hub, &operator);
    assert!(before > 0, "the setup's changes are in the feed");

    let ids: Vec<String> = (1..=3)
        .map(|n| committed_transfer(&s, &n.to_string()))
        .collect();
    // Between two other DFSPs: not the payer's to read.
    let other = new_id();
    let body = prepare_body(&other, PAYEE, THIRD, "7", far_future());
    assert_eq!(s.hub.prepare(PAYEE, THIRD, &body).status, 202);
    third.expect("POST", "/transfers");

    let changes = lines(&feed_as(
        &s.hub,
        &operator,
        &format!("after={before}&limit=1000"),
    ));
    for (at, change) in changes.iter().enumerate() {
        assert_eq!(change["feedSeq"], before + 1 + at as u64, "gap-free");
        assert!(change["at"].as_str().is_some_and(|at| at.ends_with('Z')));
    }
    let transfer_changes: Vec<(String, String)> = changes
        .iter()
        .filter(|c| c["kind"].as_str().unwrap().starts_with("transfer."))
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["key"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut expected = Vec::new();
    for id in &ids {
        expected.push(("transfer.prepared".to_string(), id.clone()));
        expected.push(("transfer.committed".to_string(), id.clone()));
    }
    expected.push(("transfer.prepared".to_string(), other.clone()));
    assert_eq!(transfer_changes, expected, "in commit order");
    let committed = changes
        .iter()
        .find(|c| c["kind"] == "transfer.committed" && c["key"] == ids[1].as_str())
        .unwrap();
    assert_eq!(committed["transferId"], ids[1].as_str());
    assert_eq!(committed["participant"], PAYER);
    assert_eq!(committed["payer"], PAYER);
    assert_eq!(committed["payee"], PAYEE);
    assert_eq!(committed["amount"], "2");
    assert_eq!(committed["currency"], "USD");
    assert_eq!(committed["state"], "COMMITTED");

    // Page by page from the start: the same changes, each once.
    let mut paged = Vec::new();
    let mut after = 0u64;
    loop {
        let page = lines(&feed_as(
            &s.hub,
            &operator,
            &format!("after={after}&limit=7"),
        ));
        let Some(last) = page.last() else { break };
        after = last["feedSeq"].as_u64().unwrap();
        paged.extend(page);
    }
    assert_eq!(paged.len() as u64, after);
    assert_eq!(&paged[before as usize..], &changes[..]);

    // The payer's person: its own changes only, all of them.
    let own = lines(&feed_as(&s.hub, &dfsp, "after=0&limit=1000"));
    assert!(own
        .iter()
        .all(|c| c["participant"] == PAYER || c["counterparty"] == PAYER));
    assert!(!own.iter().any(|c| c["key"] == other.as_str()));
    for id in &ids {
        assert_eq!(own.iter().filter(|c| c["key"] == id.as_str()).count(), 2);
    }

    // A long poll returns once a transfer commits, not at its wait's end.
    let through = newest(&s.hub, &operator);
    let poll = long_poll(&s.hub, &operator, through, 25);
    // The poll is waiting when the transfer comes (it waits 25 s at most;
    // what it answers shows whether the commit woke it).
    std::thread::sleep(Duration::from_millis(500));
    let (woken_by, _) = s.reserve("4", far_future());
    let (response, waited) = poll.join().unwrap();
    let woke = lines(&response);
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    assert_eq!(woke[0]["feedSeq"], through + 1);
    assert_eq!(woke[0]["kind"], "transfer.prepared");
    assert_eq!(woke[0]["key"], woken_by.as_str());

    // A DFSP's long poll is not woken by another DFSP's change.
    let through = newest(&s.hub, &operator);
    let poll = long_poll(&s.hub, &dfsp, through, 2);
    std::thread::sleep(Duration::from_millis(300));
    let theirs = new_id();
    let body = prepare_body(&theirs, PAYEE, THIRD, "3", far_future());
    assert_eq!(s.hub.prepare(PAYEE, THIRD, &body).status, 202);
    third.expect("POST", "/transfers");
    let (response, waited) = poll.join().unwrap();
    assert_eq!(lines(&response), Vec::<Value>::new());
    assert!(waited >= Duration::from_secs(2), "waited {waited:?}");
    let next: u64 = response.header("kasi-feed-next").unwrap().parse().unwrap();
    assert!(next > through, "the rows examined are passed over");

    // Refused: in the FSPIOP error format.
    for query in ["limit=0", "limit=1001", "wait=61", "after=x"] {
        let response = feed_as(&s.hub, &operator, query);
        assert_error_response(&response, 400, "3100");
    }
}

#[test]
fn a_cursor_older_than_retention_is_told_to_resynchronise() {
    let Started {
        scenario: s,
        operator,
        ..
    } = start(&["--feed-retention", "2s"]);
    committed_transfer(&s, "1");
    let deadline = Instant::now() + Duration::from_secs(30);
    let gone = loop {
        let response = feed_as(&s.hub, &operator, "after=1");
        if response.status == 410 {
            break response;
        }
        assert_eq!(response.status, 200, "{response:?}");
        assert!(
            Instant::now() < deadline,
            "the feed kept its changes past retention"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let body = gone.json();
    assert_eq!(body["errorInformation"]["errorCode"], "3000");
    let description = body["errorInformation"]["errorDescription"]
        .as_str()
        .unwrap();
    assert!(description.contains("GET /transfers"), "{description}");
    // The newest change is kept, so that a consumer can go on from it.
    let newest = newest(&s.hub, &operator);
    let response = feed_as(&s.hub, &operator, &format!("after={}", newest - 1));
    assert_eq!(lines(&response).len(), 1);
}
