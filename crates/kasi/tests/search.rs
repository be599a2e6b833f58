//! `GET /transfers` on the admin address, end to end: the real binary's
//! stored transfers searched by DFSP, state, error code, amount and time,
//! newest first, page by page; bad filters refused in the FSPIOP error
//! format. (The store's search itself is checked against an oracle in
//! `crates/store/tests/search.rs`.)

mod support;

use serde_json::Value;
use support::*;

/// The amounts of a search's transfers, in the order answered.
fn amounts(page: &Value) -> Vec<String> {
    page["transfers"]
        .as_array()
        .expect("transfers")
        .iter()
        .map(|t| t["amount"]["amount"].as_str().unwrap().to_string())
        .collect()
}

fn search(hub: &Hub, query: &str) -> Value {
    let response = hub.admin("GET", &format!("/transfers?{query}"), None);
    assert_eq!(response.status, 200, "{query}: {response:?}");
    response.json()
}

#[test]
fn the_operator_finds_transfers_by_dfsp_state_error_amount_and_time_page_by_page() {
    let s = Scenario::new();
    let started = now_ms();
    for amount in 1..=5 {
        let id = new_id();
        let body = prepare_body(&id, PAYER, PAYEE, &amount.to_string(), far_future());
        assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
        s.payee.expect("POST", "/transfers");
        let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
        assert_eq!(s.hub.fulfil(&id, PAYEE, PAYER, &fulfil).status, 200);
        s.payer.expect("PUT", &format!("/transfers/{id}"));
        // The payee is told of the commit too (the fulfil's copy).
        s.payee.expect("PUT", &format!("/transfers/{id}"));
    }
    // Beyond the payer's liquidity: refused at prepare, with its code.
    let refused = new_id();
    let body = prepare_body(&refused, PAYER, PAYEE, "9000", far_future());
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
    let error = s
        .payer
        .expect("PUT", &format!("/transfers/{refused}/error"));
    let code = error.json()["errorInformation"]["errorCode"]
        .as_str()
        .unwrap()
        .to_string();

    let committed = search(&s.hub, &format!("payer={PAYER}&state=COMMITTED"));
    assert_eq!(
        amounts(&committed),
        ["5", "4", "3", "2", "1"],
        "{committed:#}"
    );
    assert_eq!(committed["complete"], true);
    assert!(committed["transfers"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["payerFsp"] == PAYER
            && t["payeeFsp"] == PAYEE
            && t["transferState"] == "COMMITTED"));

    // Page by page: each page's `next` is the following page's `after`.
    let mut seen = Vec::new();
    let mut after = String::new();
    for _ in 0..6 {
        let page = search(
            &s.hub,
            &format!("payer={PAYER}&state=COMMITTED&limit=2{after}"),
        );
        assert!(amounts(&page).len() <= 2);
        seen.extend(amounts(&page));
        match page["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen, ["5", "4", "3", "2", "1"]);

    let by_error = search(&s.hub, &format!("errorCode={code}"));
    assert_eq!(amounts(&by_error), ["9000"], "{by_error:#}");
    assert_eq!(by_error["transfers"][0]["transferId"], refused);
    let by_amount = search(&s.hub, &format!("payer={PAYER}&minAmount=2&maxAmount=4"));
    assert_eq!(amounts(&by_amount), ["4", "3", "2"]);
    let by_payee = search(
        &s.hub,
        &format!("payee={PAYEE}&currency=USD&state=COMMITTED&limit=1"),
    );
    assert_eq!(amounts(&by_payee), ["5"]);
    let since = search(&s.hub, &format!("from={started}&payer={PAYER}"));
    assert_eq!(amounts(&since).len(), 6, "{since:#}");
    let future = search(&s.hub, &format!("from={}", now_ms() + 3_600_000));
    assert_eq!(amounts(&future), Vec::<String>::new());
    assert_eq!(future["next"], Value::Null);

    // Bad filters: the FSPIOP error format, 400, and what is known.
    for (query, says) in [
        ("state=DONE", "state 'DONE'"),
        ("limit=0", "limit must be"),
        ("minAmount=ten", "minAmount"),
        ("from=yesterday", "from must be"),
        ("partyIdType=NOPE&partyIdentifier=123", "party: "),
        ("partyIdentifier=123", "together"),
        (
            "partyIdType=MSISDN&partyIdentifier=1&partyRole=both",
            "partyRole 'both'",
        ),
        ("who=me", "unknown parameter 'who'"),
    ] {
        let response = s.hub.admin("GET", &format!("/transfers?{query}"), None);
        assert_eq!(response.status, 400, "{query}: {response:?}");
        let body = response.json();
        assert_eq!(
            body["errorInformation"]["errorCode"], "3100",
            "{query}: {body}"
        );
        let description = body["errorInformation"]["errorDescription"]
            .as_str()
            .unwrap();
        assert!(description.contains(says), "{query}: {description}");
    }
}

/// Issue 33: support searches by the customer's number. The parties are
/// read from each prepare's ILP packet (as Mojaloop builds it) and kept
/// with the transfer; the search finds them on either side or on one,
/// before the writer's pass has filed the transfers and after (the test
/// waits for it in the store itself).
#[test]
fn support_finds_a_transfer_by_the_payers_or_payees_party_id() {
    let s = Scenario::new();
    let packets = [
        ("v1_payment_no_sub_ids", "1"),
        ("v4_prepare_no_sub_ids", "2"),
        ("v4_prepare_sub_ids", "3"),
        // No transaction in it: found by nothing of a party.
        ("v4_prepare_fx_conversion", "4"),
    ];
    for (vector, amount) in packets {
        let id = new_id();
        let body = prepare_body(&id, PAYER, PAYEE, amount, far_future())
            .replace(ILP_PACKET, &ilp_packet(vector));
        assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
        s.payee.expect("POST", "/transfers");
    }
    let check = |when: &str| {
        for (query, want) in [
            ("partyIdType=MSISDN&partyIdentifier=22507008181", vec!["2", "1"]),
            (
                "partyIdType=MSISDN&partyIdentifier=22507008181&partyRole=payer",
                vec!["2", "1"],
            ),
            (
                "partyIdType=MSISDN&partyIdentifier=22507008181&partyRole=payee",
                vec![],
            ),
            (
                "partyIdType=EMAIL&partyIdentifier=awa.diop@example.org&partyRole=payee",
                vec!["2", "1"],
            ),
            (
                "partyIdType=ACCOUNT_ID&partyIdentifier=FR7630006000011234567890189&partySubIdOrType=EUR-1",
                vec!["3"],
            ),
            // The sub-id is part of the party: without it, another party.
            (
                "partyIdType=ACCOUNT_ID&partyIdentifier=FR7630006000011234567890189",
                vec![],
            ),
            (
                "partyIdType=PERSONAL_ID&partyIdentifier=16135551212&partySubIdOrType=DRIVING_LICENSE&payer=payerfsp&limit=1",
                vec!["3"],
            ),
        ] {
            let page = search(&s.hub, query);
            assert_eq!(amounts(&page), want, "{when}: {query}: {page:#}");
            assert_eq!(page["complete"], true, "{when}: {query}");
        }
    };
    check("just prepared");
    // The writer's pass (every 250 ms, with a commit) files the
    // transfers for search; the answers stay the same.
    let filed = || -> bool {
        rusqlite::Connection::open(s.dir.path().join("data/kasi.db"))
            .and_then(|db| {
                db.query_row(
                    "SELECT (SELECT COALESCE(MAX(through_seq), 0) FROM search_index)
                        >= (SELECT MAX(seq) FROM transfers WHERE payer_party IS NOT NULL)",
                    [],
                    |row| row.get(0),
                )
            })
            .unwrap_or(false)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !filed() {
        assert!(
            std::time::Instant::now() < deadline,
            "the pass never filed the transfers"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
        // A pass runs with a commit.
        let nudge = new_id();
        let body = prepare_body(&nudge, PAYER, PAYEE, "0.01", far_future());
        assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
        s.payee.expect("POST", "/transfers");
    }
    check("filed by the pass");
    // The party index's follower looked at the store: its block is not
    // whole yet, so every transfer is one a search walks (the index
    // itself is checked against an oracle in the store's tests).
    let transfers: u64 = rusqlite::Connection::open(s.dir.path().join("data/kasi.db"))
        .and_then(|db| db.query_row("SELECT MAX(seq) FROM transfers", [], |row| row.get(0)))
        .expect("the last seq");
    s.hub.await_metrics("kasi_party_index_unfiled", |text| {
        text.lines()
            .find_map(|line| line.strip_prefix("kasi_party_index_unfiled "))
            .and_then(|value| value.trim().parse::<u64>().ok())
            .filter(|&unfiled| unfiled > transfers)
    });
    check("looked at by the party index");
}
