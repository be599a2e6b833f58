//! End-to-end FSPIOP v1.1 transfers through the real `kasi serve` binary:
//! DFSPs onboarded over the admin API as Mojaloop's golden-path collection
//! does it, real HTTP callback stubs, and the behaviour Mojaloop's
//! ml-api-adapter and central-ledger define (MOJALOOP-REFERENCE.md §1, §4).

mod support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

// ----------------------------------------------------------------- happy path

#[test]
fn a_transfer_is_forwarded_fulfilled_and_moves_the_positions() {
    let s = Scenario::new();
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "100", far_future());
    let headers = fspiop_headers(PAYER, PAYEE, true);
    let response = s.hub.api("POST", "/transfers", &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");

    // The payee gets the payer's bytes and headers (so a JWS still verifies).
    let forwarded = s.payee.expect("POST", "/transfers");
    assert_eq!(
        forwarded.body,
        body.as_bytes(),
        "the forwarded body must be the payer's exact bytes"
    );
    assert_eq!(forwarded.header("fspiop-source"), Some(PAYER));
    assert_eq!(forwarded.header("fspiop-destination"), Some(PAYEE));
    assert_eq!(forwarded.header("date"), header_value(&headers, "Date"));
    assert_eq!(forwarded.header("content-type"), Some(CONTENT_TYPE));
    // While reserved, Mojaloop's position includes the reservation.
    assert_eq!(s.hub.position(PAYER), 100.0);
    assert_eq!(s.hub.position(PAYEE), 0.0);

    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    let fulfil_headers = fspiop_headers(PAYEE, PAYER, false);
    let response = s.hub.api(
        "PUT",
        &format!("/transfers/{id}"),
        &fulfil_headers,
        fulfil.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");

    let to_payer = s.payer.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(
        to_payer.body,
        fulfil.as_bytes(),
        "the payer must get the payee's exact bytes"
    );
    assert_eq!(to_payer.header("fspiop-source"), Some(PAYEE));
    assert_eq!(to_payer.header("fspiop-destination"), Some(PAYER));
    assert_eq!(
        to_payer.header("date"),
        header_value(&fulfil_headers, "Date")
    );

    // SEND_TRANSFER_CONFIRMATION_TO_PAYEE (Mojaloop's default): the same
    // body, sent by the hub itself (ml-api-adapter's notification handler
    // builds these headers `fromSwitch`, FSPIOP-Source the switch).
    let to_payee = s.payee.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(to_payee.body, fulfil.as_bytes(), "{to_payee:?}");
    assert_eq!(
        to_payee.header("fspiop-source"),
        Some(HUB_NAME),
        "the confirmation comes from the hub: {to_payee:?}"
    );

    assert_eq!(s.hub.position(PAYER), 100.0);
    assert_eq!(s.hub.position(PAYEE), -100.0);
    assert_eq!(s.hub.account_value(PAYER, "SETTLEMENT"), -5000.0);
    assert_eq!(s.hub.account_value(PAYEE, "SETTLEMENT"), -5000.0);
    s.payer.assert_nothing_pending();
}

#[test]
fn a_reserved_fulfil_commits_and_the_payee_gets_a_patch() {
    let s = Scenario::new();
    let (id, _) = s.reserve("100", far_future());
    s.fulfil(&id, &fulfil_body(FULFILMENT, "RESERVED"));

    let to_payer = s.payer.expect("PUT", &format!("/transfers/{id}"));
    let body = to_payer.json();
    assert_eq!(body["transferState"], json!("COMMITTED"), "{to_payer:?}");
    assert_eq!(body["fulfilment"], json!(FULFILMENT), "{to_payer:?}");
    assert!(body["completedTimestamp"].is_string(), "{to_payer:?}");

    let patch = s.payee.expect("PATCH", &format!("/transfers/{id}"));
    let body = patch.json();
    assert_eq!(body["transferState"], json!("COMMITTED"), "{patch:?}");
    assert!(
        body["completedTimestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') || t.contains('+')),
        "{patch:?}"
    );
    assert!(
        body.get("fulfilment").is_none(),
        "a PATCH carries no fulfilment: {patch:?}"
    );
    assert_eq!(patch.header("fspiop-source"), Some(HUB_NAME), "{patch:?}");
    assert_eq!(patch.header("fspiop-destination"), Some(PAYEE), "{patch:?}");

    assert_eq!(s.hub.position(PAYER), 100.0);
    assert_eq!(s.hub.position(PAYEE), -100.0);
    // The payee asked for a PATCH, not the PUT confirmation.
    s.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn the_payee_is_confirmed_only_after_the_payer_is_told() {
    // ml-api-adapter awaits the payer's callback before it sends the
    // payee's confirmation (SEND_TRANSFER_CONFIRMATION_TO_PAYEE, on by
    // default); the hub queues the payee's once the payer's first attempt
    // has ended.
    let s = Scenario::with_hub_flags(10_000, 5_000, &["--payee-commit-confirmation", "on"]);
    for _ in 0..3 {
        let (id, _) = s.reserve("10", far_future());
        s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
        let to_payer = s.payer.expect("PUT", &format!("/transfers/{id}"));
        let to_payee = s.payee.expect("PUT", &format!("/transfers/{id}"));
        assert_eq!(to_payee.header("fspiop-source"), Some(HUB_NAME));
        assert!(
            to_payer.at < to_payee.at,
            "the payee's confirmation arrived {:?} before the payer's callback",
            to_payer.at - to_payee.at
        );
        // A payee that asked with RESERVED: its PATCH also follows.
        let (id, _) = s.reserve("10", far_future());
        s.fulfil(&id, &fulfil_body(FULFILMENT, "RESERVED"));
        let to_payer = s.payer.expect("PUT", &format!("/transfers/{id}"));
        let patch = s.payee.expect("PATCH", &format!("/transfers/{id}"));
        assert!(to_payer.at < patch.at, "the PATCH came first");
    }
    s.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn with_payee_commit_confirmation_off_the_payee_gets_no_put_on_commit() {
    let s = Scenario::with_hub_flags(10_000, 5_000, &["--payee-commit-confirmation", "off"]);
    let (id, _) = s.reserve("10", far_future());
    s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    s.payer.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(s.hub.position(PAYEE), -10.0, "committed");
    // Its PATCH is not a confirmation: a payee that asked still gets it.
    let (patched, _) = s.reserve("10", far_future());
    s.fulfil(&patched, &fulfil_body(FULFILMENT, "RESERVED"));
    s.payer.expect("PUT", &format!("/transfers/{patched}"));
    let patch = s.payee.expect("PATCH", &format!("/transfers/{patched}"));
    assert_eq!(patch.json()["transferState"], "COMMITTED");
    // A wrong fulfilment: the payer is told, the payee (who sent it) not.
    let (wrong, _) = s.reserve("10", far_future());
    s.fulfil(&wrong, &fulfil_body(WRONG_FULFILMENT, "COMMITTED"));
    s.payer.expect_error(&wrong, "3100");
    s.payee.assert_quiet(QUIET_WAIT);
    // And the payee can still ask.
    let response = s.hub.get_transfer(&id, PAYEE, PAYER);
    assert_eq!(response.status, 202, "{response:?}");
    let state = s.payee.expect("PUT", &format!("/transfers/{id}")).json();
    assert_eq!(state["transferState"], "COMMITTED", "{state}");
}

// ----------------------------------------------------------------- rejections

#[test]
fn a_prepare_above_the_liquidity_cover_is_refused_with_4001() {
    let s = Scenario::new();
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "6000", far_future());
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
    s.payer.expect_error(&id, "4001");
    assert_eq!(s.hub.position(PAYER), 0.0);
    s.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn a_prepare_above_the_net_debit_cap_is_refused_with_4200() {
    let s = Scenario::with_payer(100, 5_000);
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "200", far_future());
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
    s.payer.expect_error(&id, "4200");
    assert_eq!(s.hub.position(PAYER), 0.0);
    s.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn a_wrong_fulfilment_aborts_with_3100_to_both_sides() {
    let s = Scenario::new();
    let (id, _) = s.reserve("100", far_future());
    s.fulfil(&id, &fulfil_body(WRONG_FULFILMENT, "COMMITTED"));
    s.payer.expect_error(&id, "3100");
    s.payee.expect_error(&id, "3100");
    assert_eq!(s.hub.position(PAYER), 0.0);
    assert_eq!(s.hub.position(PAYEE), 0.0);
    assert_eq!(s.hub.account_value(PAYER, "SETTLEMENT"), -5000.0);

    // The transfer is over: the right fulfilment now changes nothing.
    s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    let late = s.payee.next("an answer to the late fulfil");
    assert!(
        late.path.starts_with(&format!("/transfers/{id}")),
        "{late:?}"
    );
    assert_ne!(
        late.json()["transferState"],
        json!("COMMITTED"),
        "an aborted transfer never commits: {late:?}"
    );
    assert_eq!(s.hub.position(PAYER), 0.0);
    assert_eq!(s.hub.position(PAYEE), 0.0);
    s.payer.assert_quiet(QUIET_WAIT);
}

#[test]
fn a_modified_duplicate_prepare_gets_3106() {
    let s = Scenario::new();
    let (id, _) = s.reserve("100", far_future());
    let modified = prepare_body(&id, PAYER, PAYEE, "200", far_future());
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &modified).status, 202);
    let error = s.payer.expect_error(&id, "3106");
    assert_eq!(
        error.json()["errorInformation"]["errorDescription"],
        "Modified request"
    );
    assert_eq!(
        s.hub.position(PAYER),
        100.0,
        "the original reservation stands"
    );
    s.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn a_changed_fulfil_after_the_commit_gets_modified_request() {
    // The Testing Toolkit's duplicate_handling/transfers/fulfill_commit
    // compares the description whole.
    let s = Scenario::new();
    let (id, _) = s.reserve("100", far_future());
    s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    s.payer.expect("PUT", &format!("/transfers/{id}"));
    s.payee.expect("PUT", &format!("/transfers/{id}"));
    let changed = format!(
        r#"{{"fulfilment":"{FULFILMENT}","completedTimestamp":"{}","transferState":"COMMITTED","extensionList":{{"extension":[{{"key":"k","value":"v"}}]}}}}"#,
        fspiop_time(now_ms())
    );
    s.fulfil(&id, &changed);
    let error = s.payee.expect_error(&id, "3106");
    assert_eq!(
        error.json()["errorInformation"]["errorDescription"],
        "Modified request"
    );
    assert_eq!(s.hub.position(PAYER), 100.0);
    s.payer.assert_quiet(QUIET_WAIT);
}

#[test]
fn a_prepare_already_expired_gets_3303() {
    let s = Scenario::new();
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "100", now_ms() - 1_000);
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
    s.payer.expect_error(&id, "3303");
    assert_eq!(s.hub.position(PAYER), 0.0);
    s.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn a_reserved_transfer_expires_at_its_expiration_with_3303_to_both_sides() {
    let s = Scenario::new();
    let expiration = now_ms() + 2_000;
    let (id, _) = s.reserve("100", expiration);
    assert_eq!(s.hub.position(PAYER), 100.0);

    let mut errors = HashMap::new();
    for _ in 0..2 {
        let (stub, received) = loop {
            if let Some(received) = s.payer.next_within(Duration::from_millis(20)) {
                break (&s.payer, received);
            }
            if let Some(received) = s.payee.next_within(Duration::from_millis(20)) {
                break (&s.payee, received);
            }
            assert!(
                now_ms() < expiration + 10_000,
                "no 3303 callbacks within 10 s of the expiration"
            );
        };
        assert_eq!(
            received.path,
            format!("/transfers/{id}/error"),
            "{received:?}"
        );
        assert_hub_error_callback(&received, &stub.name, "3303");
        assert!(
            received.at_ms >= expiration,
            "{} got the expiry {} ms before the expiration",
            stub.name,
            expiration - received.at_ms
        );
        assert!(
            received.at_ms <= expiration + 2_000,
            "{} got the expiry {} ms after the expiration",
            stub.name,
            received.at_ms - expiration
        );
        assert!(
            errors.insert(stub.name.clone(), received).is_none(),
            "two expiry callbacks to {}",
            stub.name
        );
    }
    assert_eq!(s.hub.position(PAYER), 0.0, "the reservation is released");
    assert_eq!(s.hub.position(PAYEE), 0.0);
    // The operator's log names it (written before the callbacks were sent;
    // the log is read on another thread, hence the bounded wait).
    let deadline = Instant::now() + CALLBACK_WAIT;
    while !s
        .hub
        .log()
        .lines()
        .any(|line| line.contains("transfers expired") && line.contains(&id))
    {
        assert!(Instant::now() < deadline, "{}", s.hub.log());
        std::thread::sleep(Duration::from_millis(10));
    }

    // Too late now: the fulfil gets 3303, the money does not move.
    s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    assert_eq!(s.hub.position(PAYER), 0.0);
    assert_eq!(s.hub.position(PAYEE), 0.0);
}

#[test]
fn an_inactive_payer_is_refused_with_3100() {
    let s = Scenario::new();
    s.hub.admin_expect(
        "PUT",
        &format!("/participants/{PAYER}"),
        Some(json!({"isActive": false})),
        200,
    );
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "100", far_future());
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
    let error = s.payer.expect_error(&id, "3100");
    // central-ledger's words, which Mojaloop's collections look for.
    assert_eq!(
        error.json()["errorInformation"]["errorDescription"],
        format!("Generic validation error - Participant {PAYER} is inactive")
    );
    assert_eq!(s.hub.position(PAYER), 0.0);
    s.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn a_payee_rejection_is_forwarded_to_the_payer_and_releases_the_reservation() {
    let s = Scenario::new();
    let (id, _) = s.reserve("100", far_future());
    assert_eq!(s.hub.position(PAYER), 100.0);
    let rejection = error_body("5101", "Payee transaction limit reached");
    let headers = fspiop_headers(PAYEE, PAYER, false);
    let response = s.hub.api(
        "PUT",
        &format!("/transfers/{id}/error"),
        &headers,
        rejection.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");

    let forwarded = s.payer.expect("PUT", &format!("/transfers/{id}/error"));
    assert_eq!(
        forwarded.body,
        rejection.as_bytes(),
        "the payer gets the payee's exact bytes"
    );
    assert_eq!(forwarded.header("fspiop-source"), Some(PAYEE));
    assert_eq!(forwarded.header("fspiop-destination"), Some(PAYER));
    assert_eq!(s.hub.position(PAYER), 0.0);
    assert_eq!(s.hub.position(PAYEE), 0.0);

    // Aborted for good: a fulfil now cannot commit it.
    s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    assert_eq!(s.hub.position(PAYER), 0.0);
    assert_eq!(s.hub.position(PAYEE), 0.0);
    s.payer.assert_quiet(QUIET_WAIT);
}

#[test]
fn an_unknown_payee_is_refused_with_3100() {
    let s = Scenario::new();
    let id = new_id();
    let body = prepare_body(&id, PAYER, "nobody", "100", far_future());
    // A v1.0 caller is answered in v1.0.
    let v1_0 = "application/vnd.interoperability.transfers+json;version=1.0";
    let headers = with_header(fspiop_headers(PAYER, "nobody", true), "Content-Type", v1_0);
    assert_eq!(
        s.hub
            .api("POST", "/transfers", &headers, body.as_bytes())
            .status,
        202
    );
    let error = s.payer.expect_error(&id, "3100");
    assert_eq!(error.header("content-type"), Some(v1_0), "{error:?}");
    assert_eq!(s.hub.position(PAYER), 0.0);
    s.payee.assert_quiet(QUIET_WAIT);
}

// ------------------------------------------------------- synchronous errors

#[test]
fn header_and_body_errors_are_answered_synchronously_and_nothing_is_forwarded() {
    let s = Scenario::new();
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "100", far_future());
    let good = || fspiop_headers(PAYER, PAYEE, true);
    let post = |headers: Vec<(String, String)>, body: &[u8]| {
        s.hub.api("POST", "/transfers", &headers, body)
    };

    // FSPIOP-Source must be the payer.
    let spoofed = post(fspiop_headers(PAYEE, PAYER, true), body.as_bytes());
    assert_error_response(&spoofed, 400, "3100");

    // Missing mandatory headers.
    assert_error_response(
        &post(without_header(good(), "Date"), body.as_bytes()),
        400,
        "3102",
    );
    assert_error_response(
        &post(without_header(good(), "FSPIOP-Source"), body.as_bytes()),
        400,
        "3102",
    );
    assert_error_response(
        &post(without_header(good(), "Content-Type"), body.as_bytes()),
        400,
        "3102",
    );
    assert_error_response(
        &post(without_header(good(), "Accept"), body.as_bytes()),
        400,
        "3102",
    );

    // Malformed headers.
    for content_type in [
        "text/plain",
        "application/vnd.interoperability.transfers+json;version=one",
    ] {
        let response = post(
            with_header(good(), "Content-Type", content_type),
            body.as_bytes(),
        );
        assert_error_response(&response, 400, "3101");
    }
    assert_error_response(
        &post(with_header(good(), "Date", "yesterday"), body.as_bytes()),
        400,
        "3101",
    );

    // Unsupported versions.
    let v3 = "application/vnd.interoperability.transfers+json;version=3.0";
    assert_error_response(
        &post(with_header(good(), "Content-Type", v3), body.as_bytes()),
        406,
        "3001",
    );
    let accept_v3 = "application/vnd.interoperability.transfers+json;version=3";
    assert_error_response(
        &post(with_header(good(), "Accept", accept_v3), body.as_bytes()),
        406,
        "3001",
    );

    // Malformed JSON.
    let truncated = &body.as_bytes()[..body.len() / 2];
    assert_error_response(&post(good(), truncated), 400, "3101");

    // Larger than the 5 MB Mojaloop accepts.
    let mut huge = Vec::with_capacity(6 * 1024 * 1024 + 64);
    huge.extend_from_slice(br#"{"transferId":""#);
    huge.resize(6 * 1024 * 1024, b'a');
    huge.extend_from_slice(br#""}"#);
    let response = post(good(), &huge);
    assert_eq!(response.status, 413, "{response:?}");
    let error = response.json();
    assert!(
        error["errorInformation"]["errorCode"]
            .as_str()
            .is_some_and(|c| c.len() == 4 && c.bytes().all(|b| b.is_ascii_digit())),
        "{response:?}"
    );
    assert!(
        error["errorInformation"]["errorDescription"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "{response:?}"
    );

    // None of these became a transfer: the id is still free.
    s.payee.assert_quiet(QUIET_WAIT);
    s.payer.assert_nothing_pending();
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
    let forwarded = s.payee.expect("POST", "/transfers");
    assert_eq!(forwarded.body, body.as_bytes());
}

// ---------------------------------------------------------------- duplicates

#[test]
fn a_prepare_resent_after_commit_gets_the_committed_state() {
    let s = Scenario::new();
    let (id, body) = s.reserve("100", far_future());
    s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    s.payer.expect("PUT", &format!("/transfers/{id}"));
    s.payee.expect("PUT", &format!("/transfers/{id}"));

    let response = s.hub.prepare(PAYER, PAYEE, &body);
    assert_eq!(response.status, 202, "{response:?}");
    let state = s.payer.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(
        state.json()["transferState"],
        json!("COMMITTED"),
        "{state:?}"
    );
    assert_eq!(state.header("fspiop-destination"), Some(PAYER), "{state:?}");

    assert_eq!(s.hub.position(PAYER), 100.0, "a duplicate moves no money");
    assert_eq!(s.hub.position(PAYEE), -100.0);
    s.payee.assert_quiet(QUIET_WAIT);
    s.payer.assert_nothing_pending();
}

#[test]
fn a_fulfil_resent_after_commit_gets_the_committed_state() {
    let s = Scenario::new();
    let (id, _) = s.reserve("100", far_future());
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    s.fulfil(&id, &fulfil);
    s.payer.expect("PUT", &format!("/transfers/{id}"));
    s.payee.expect("PUT", &format!("/transfers/{id}"));

    // FULFIL_DUPLICATE: the sender (the payee) is told the current state.
    s.fulfil(&id, &fulfil);
    let state = s.payee.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(
        state.json()["transferState"],
        json!("COMMITTED"),
        "{state:?}"
    );
    assert_eq!(s.hub.position(PAYER), 100.0, "a duplicate moves no money");
    assert_eq!(s.hub.position(PAYEE), -100.0);
    s.payer.assert_quiet(QUIET_WAIT);
}

/// central-ledger's prepare handler (`processDuplication`) ignores a resend
/// whose transfer is still RECEIVED or RESERVED: no callback to the payer,
/// nothing forwarded again.
#[test]
fn a_prepare_resent_while_reserved_is_ignored() {
    let s = Scenario::new();
    let (id, body) = s.reserve("100", far_future());
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
    s.payer.assert_quiet(QUIET_WAIT);
    s.payee.assert_nothing_pending();
    assert_eq!(
        s.hub.position(PAYER),
        100.0,
        "a duplicate reserves nothing more"
    );

    // And the transfer goes on as if the resend never happened.
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    s.fulfil(&id, &fulfil);
    assert_eq!(
        s.payer.expect("PUT", &format!("/transfers/{id}")).body,
        fulfil.as_bytes()
    );
}

// ---------------------------------------------------------------------- GET

#[test]
fn get_transfer_answers_parties_refuses_others_and_unknown_ids() {
    let s = Scenario::new();
    let other = Stub::start("otherfsp");
    s.hub.onboard("otherfsp", &other.base_url(), 10_000, 0);
    let (id, _) = s.reserve("100", far_future());

    assert_eq!(s.hub.get_transfer(&id, PAYER, PAYEE).status, 202);
    let state = s.payer.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(
        state.json()["transferState"],
        json!("RESERVED"),
        "{state:?}"
    );
    assert_eq!(state.header("fspiop-source"), Some(HUB_NAME), "{state:?}");

    // Only the payee may fulfil: anyone else gets 3100, the transfer stays
    // reserved.
    let impostor = s.hub.fulfil(
        &id,
        "otherfsp",
        PAYER,
        &fulfil_body(FULFILMENT, "COMMITTED"),
    );
    assert_eq!(impostor.status, 200, "{impostor:?}");
    other.expect_error(&id, "3100");
    s.payer.assert_quiet(QUIET_WAIT);
    assert_eq!(s.hub.position(PAYER), 100.0);
    assert_eq!(s.hub.position(PAYEE), 0.0);

    s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    s.payer.expect("PUT", &format!("/transfers/{id}"));
    s.payee.expect("PUT", &format!("/transfers/{id}"));

    assert_eq!(s.hub.get_transfer(&id, PAYER, PAYEE).status, 202);
    let state = s.payer.expect("PUT", &format!("/transfers/{id}"));
    let body = state.json();
    assert_eq!(body["transferState"], json!("COMMITTED"), "{state:?}");
    assert_eq!(body["fulfilment"], json!(FULFILMENT), "{state:?}");
    assert_eq!(state.header("fspiop-source"), Some(HUB_NAME), "{state:?}");
    assert_eq!(state.header("fspiop-destination"), Some(PAYER), "{state:?}");

    // The payee may ask too.
    assert_eq!(s.hub.get_transfer(&id, PAYEE, PAYER).status, 202);
    let state = s.payee.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(
        state.json()["transferState"],
        json!("COMMITTED"),
        "{state:?}"
    );

    // A DFSP that is not a party learns nothing.
    // (The words are central-ledger's, which the Testing Toolkit's
    // get_transfers compares whole.)
    assert_eq!(s.hub.get_transfer(&id, "otherfsp", PAYER).status, 202);
    let error = other.expect_error(&id, "3000");
    assert_eq!(
        error.json()["errorInformation"]["errorDescription"],
        "Generic client error"
    );

    let unknown = new_id();
    assert_eq!(s.hub.get_transfer(&unknown, PAYER, PAYEE).status, 202);
    let error = s.payer.expect_error(&unknown, "3208");
    assert_eq!(
        error.json()["errorInformation"]["errorDescription"],
        "Transfer ID not found - Provided Transfer ID was not found on the server."
    );

    s.payer.assert_quiet(QUIET_WAIT);
    s.payee.assert_nothing_pending();
    other.assert_nothing_pending();
}

// ------------------------------------------------------------ dead endpoint

#[test]
fn a_dead_dfsp_endpoint_does_not_delay_callbacks_to_others() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    let payer = Stub::start(PAYER);
    // One DFSP accepts connections and never answers; another's port has
    // nothing listening.
    let dead = Blackhole::start();
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let healthy = Stub::start("healthyfsp");
    hub.onboard(PAYER, &payer.base_url(), 10_000, 5_000);
    hub.onboard("deadfsp", &dead.base_url(), 10_000, 0);
    hub.onboard("refusedfsp", &refused, 10_000, 0);
    hub.onboard("healthyfsp", &healthy.base_url(), 10_000, 0);

    let mut to_healthy = HashMap::new();
    for _ in 0..20 {
        for payee in ["deadfsp", "refusedfsp", "healthyfsp"] {
            let id = new_id();
            let body = prepare_body(&id, PAYER, payee, "10", far_future());
            let response = hub.prepare(PAYER, payee, &body);
            assert_eq!(response.status, 202, "{response:?}");
            if payee == "healthyfsp" {
                to_healthy.insert(id, Instant::now());
            }
        }
    }
    let last_ack = Instant::now();

    let mut pending: HashSet<String> = to_healthy.keys().cloned().collect();
    while !pending.is_empty() {
        let waited = last_ack.elapsed();
        // Below the 5 s a callback to the dead DFSP hangs before it times
        // out, so a forward queued behind one would miss it; the rest is
        // slack for a loaded machine.
        let left = Duration::from_secs(4).saturating_sub(waited);
        let received = healthy.next_within(left).unwrap_or_else(|| {
            panic!(
                "{} of 20 forwards to the healthy DFSP still missing 4 s after the last prepare \
                 (the dead DFSP has {} connections hanging)",
                pending.len(),
                dead.accepted()
            )
        });
        assert_eq!(
            (received.method.as_str(), received.path.as_str()),
            ("POST", "/transfers"),
            "{received:?}"
        );
        let id = received.json()["transferId"].as_str().unwrap().to_string();
        assert!(
            pending.remove(&id),
            "unexpected or repeated forward {received:?}"
        );
        let delay = received.at.duration_since(to_healthy[&id]);
        assert!(
            delay < Duration::from_secs(4),
            "a forward to the healthy DFSP took {delay:?}"
        );
    }
    // The hub did try the dead DFSP: its callbacks hang there while the
    // healthy DFSP's arrive.
    assert!(
        dead.accepted() > 0,
        "the hub never tried to reach the dead DFSP"
    );
    healthy.assert_nothing_pending();
}

// ---------------------------------------------------------------- restarts

#[test]
fn transfers_prepared_before_a_sigkill_are_fulfilled_after_a_restart() {
    let mut s = Scenario::new();
    let expiration = now_ms() + 600_000;
    let mut ids = Vec::new();
    for _ in 0..50 {
        let id = new_id();
        let body = prepare_body(&id, PAYER, PAYEE, "10", expiration);
        let response = s.hub.prepare(PAYER, PAYEE, &body);
        assert_eq!(response.status, 202, "{response:?}");
        ids.push(id);
    }
    // One more that expires around the restart: recovery must rebuild the
    // expiry and still send its 3303s.
    let short = new_id();
    let short_expiration = now_ms() + 1_500;
    let body = prepare_body(&short, PAYER, PAYEE, "7", short_expiration);
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
    s.hub.kill();

    s.hub = Hub::start(&s.dir.path().join("data"));
    // The payee's channel may still hold forwards sent before the crash.
    let expired = loop {
        let received = s
            .payee
            .next("the payee's 3303 for the transfer that expired across the restart");
        if (received.method.as_str(), received.path.as_str()) != ("POST", "/transfers") {
            break received;
        }
    };
    assert_eq!(
        expired.path,
        format!("/transfers/{short}/error"),
        "{expired:?}"
    );
    assert_hub_error_callback(&expired, PAYEE, "3303");
    s.payer.expect_error(&short, "3303");
    assert!(
        expired.at_ms >= short_expiration,
        "expired {} ms early",
        short_expiration - expired.at_ms
    );
    assert_eq!(
        s.hub.position(PAYER),
        500.0,
        "every acknowledged reservation survives the crash"
    );

    let mut sent = HashMap::new();
    for id in &ids {
        let body = fulfil_body(FULFILMENT, "COMMITTED");
        let response = s.hub.fulfil(id, PAYEE, PAYER, &body);
        assert_eq!(response.status, 200, "fulfil of {id}: {response:?}");
        sent.insert(id.clone(), body);
    }
    for _ in 0..ids.len() {
        let received = s.payer.next("the payer's PUT of a fulfilled transfer");
        assert_eq!(received.method, "PUT", "{received:?}");
        let id = received
            .path
            .strip_prefix("/transfers/")
            .unwrap_or_else(|| panic!("{received:?}"))
            .to_string();
        let body = sent
            .remove(&id)
            .unwrap_or_else(|| panic!("unexpected or repeated callback {received:?}"));
        assert_eq!(
            received.text(),
            body,
            "the payer must get the payee's exact bytes"
        );
    }
    assert_eq!(s.hub.position(PAYER), 500.0);
    assert_eq!(s.hub.position(PAYEE), -500.0);
    assert_eq!(s.hub.account_value(PAYER, "SETTLEMENT"), -5000.0);

    // The audit reads the store while the hub serves it.
    let audit = kasi()
        .arg("audit")
        .arg("--data-dir")
        .arg(&s.hub.data_dir)
        .output()
        .unwrap();
    assert!(
        audit.status.success(),
        "audit failed:\n{}{}",
        String::from_utf8_lossy(&audit.stdout),
        String::from_utf8_lossy(&audit.stderr)
    );
}

#[test]
fn sigterm_stops_cleanly_and_a_restart_resumes_reserved_transfers() {
    let mut s = Scenario::new();
    let (id, _) = s.reserve("100", far_future());
    let status = s.hub.terminate();
    assert!(
        status.success(),
        "SIGTERM must stop the hub with status 0, got {status}:\n{}",
        s.hub.log()
    );

    s.hub = Hub::start(&s.dir.path().join("data"));
    assert_eq!(s.hub.position(PAYER), 100.0);
    let body = fulfil_body(FULFILMENT, "COMMITTED");
    s.fulfil(&id, &body);
    let to_payer = s.payer.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(to_payer.text(), body);
    s.payee.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(s.hub.position(PAYER), 100.0);
    assert_eq!(s.hub.position(PAYEE), -100.0);

    let status = s.hub.terminate();
    assert!(status.success(), "second SIGTERM: {status}");
    let audit = kasi()
        .arg("audit")
        .arg("--data-dir")
        .arg(&s.hub.data_dir)
        .output()
        .unwrap();
    assert!(
        audit.status.success(),
        "audit failed:\n{}",
        String::from_utf8_lossy(&audit.stdout)
    );
}
