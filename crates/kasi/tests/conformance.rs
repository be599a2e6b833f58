//! End-to-end tests of the places where kasi follows Mojaloop's hub rather
//! than the v1.1 specification's text, as Mojaloop's conformance suite (the
//! Testing Toolkit's golden path) checks them: ULIDs, content version 2.0,
//! the headers of callbacks and answers, central-ledger's transfer edge
//! cases, header validation in Mojaloop's words, party answers without
//! FSPIOP-Destination, and `/health`.
//!
//! Each test runs the real `kasi serve` and real DFSP stubs over HTTP.

mod support;

use serde_json::{json, Value};
use support::*;

fn media(resource: &str, version: &str) -> String {
    format!("application/vnd.interoperability.{resource}+json;version={version}")
}

/// Headers of a transfers request in content `version`, Accept `accept`
/// (none on a callback).
fn transfer_headers(
    source: &str,
    destination: &str,
    version: &str,
    accept: Option<&str>,
) -> Vec<(String, String)> {
    let mut headers = with_header(
        fspiop_headers(source, destination, accept.is_some()),
        "Content-Type",
        &media("transfers", version),
    );
    if let Some(accept) = accept {
        headers = with_header(headers, "Accept", &media("transfers", accept));
    }
    headers
}

/// The trace id of a `traceparent` (`00-<trace>-<span>-<flags>`).
fn trace_id(traceparent: &str) -> &str {
    traceparent.split('-').nth(1).unwrap_or("")
}

fn span_id(traceparent: &str) -> &str {
    traceparent.split('-').nth(2).unwrap_or("")
}

/// The hub's `PUT /transfers/{id}` answer of a GET: its JSON body.
fn get_state(s: &Scenario, id: &str, source: &str, destination: &str) -> Value {
    let response = s.hub.get_transfer(id, source, destination);
    assert_eq!(response.status, 202, "GET /transfers/{id}: {response:?}");
    let stub = if source == PAYER { &s.payer } else { &s.payee };
    let answer = stub.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(answer.header("fspiop-source"), Some(HUB_NAME));
    answer.json()
}

// ------------------------------------------------------------------ ids

#[test]
fn ulids_and_uuids_go_through_whole_transfers_and_a_restart_as_given() {
    let mut s = Scenario::new();
    let ids = [new_ulid(), new_uuid()];
    for id in &ids {
        let body = prepare_body(id, PAYER, PAYEE, "10", far_future());
        assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
        assert_eq!(s.payee.expect("POST", "/transfers").text(), body);
        s.fulfil(id, &fulfil_body(FULFILMENT, "COMMITTED"));
        let to_payer = s.payer.expect("PUT", &format!("/transfers/{id}"));
        assert_eq!(to_payer.json()["transferState"], "COMMITTED");
        s.payee.expect("PUT", &format!("/transfers/{id}"));
    }
    assert_eq!(s.hub.position(PAYER), 20.0);

    // The form of each id is durable: after a crash, each is still found
    // and echoed in the form it came in.
    let data_dir = s.hub.data_dir.clone();
    s.hub.kill();
    s.hub = Hub::start(&data_dir);
    // At least once: the final states of transfers finished within the
    // delivery watermark's margin are told both DFSPs again after a crash.
    for stub in [&s.payer, &s.payee] {
        let mut told: Vec<String> = (0..ids.len())
            .map(|_| {
                let received = stub.next("a final state told again");
                assert_eq!(received.json()["transferState"], "COMMITTED");
                received.path.trim_start_matches("/transfers/").to_string()
            })
            .collect();
        told.sort();
        let mut expected = ids.to_vec();
        expected.sort();
        assert_eq!(told, expected, "{}", stub.name);
    }
    for id in &ids {
        let state = get_state(&s, id, PAYER, PAYEE);
        assert_eq!(state["transferState"], "COMMITTED", "{id}: {state}");
        assert_eq!(state["fulfilment"], FULFILMENT);
    }
    // A ULID in lower case is not one (Mojaloop's pattern is upper case).
    let lower = ids[0].to_lowercase();
    let body = prepare_body(&lower, PAYER, PAYEE, "10", far_future());
    let response = s.hub.prepare(PAYER, PAYEE, &body);
    assert_error_response(&response, 400, "3100");
    let response = s.hub.get_transfer(&lower, PAYER, PAYEE);
    assert_error_response(&response, 400, "3101");
    s.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn a_quote_with_ulids_is_routed_with_its_ids_as_given() {
    let s = Scenario::new();
    for stub in [&s.payer, &s.payee] {
        s.hub
            .add_endpoint(&stub.name, "FSPIOP_CALLBACK_URL_QUOTES", &stub.base_url());
    }
    let quote_id = new_ulid();
    let body = format!(
        r#"{{"quoteId":"{quote_id}","transactionId":"{}","transactionRequestId":"{}","payee":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"123","fspId":"{PAYEE}"}}}},"payer":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"456","fspId":"{PAYER}"}}}},"amountType":"SEND","amount":{{"currency":"USD","amount":"100"}},"transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}"#,
        new_ulid(),
        new_uuid()
    );
    let headers = resource_headers("quotes", "1.0", PAYER, Some(PAYEE), true);
    let response = s.hub.api("POST", "/quotes", &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    assert_eq!(s.payee.expect("POST", "/quotes").text(), body);

    let answer = format!(
        r#"{{"transferAmount":{{"currency":"USD","amount":"100"}},"expiration":"{}","ilpPacket":"{ILP_PACKET}","condition":"{CONDITION}"}}"#,
        fspiop_time(far_future())
    );
    let headers = resource_headers("quotes", "1.0", PAYEE, Some(PAYER), false);
    let path = format!("/quotes/{quote_id}");
    let response = s.hub.api("PUT", &path, &headers, answer.as_bytes());
    assert_eq!(response.status, 200, "{response:?}");
    let forwarded = s.payer.expect("PUT", &path);
    assert_eq!(forwarded.text(), answer);
    assert_eq!(forwarded.header("fspiop-uri"), Some(path.as_str()));
}

// ------------------------------------------------------------- versions

#[test]
fn version_2_0_requests_are_taken_and_answered_in_2_0() {
    let s = Scenario::new();
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    // A prepare in 2.0 with a field 2.0 added is forwarded byte for byte.
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", far_future()).replacen(
        '{',
        r#"{"extensionList":{"extension":[{"key":"v2","value":"yes"}]},"#,
        1,
    );
    let headers = with_header(
        transfer_headers(PAYER, PAYEE, "2.0", Some("2")),
        "traceparent",
        traceparent,
    );
    let response = s.hub.api("POST", "/transfers", &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    let forwarded = s.payee.expect("POST", "/transfers");
    assert_eq!(forwarded.text(), body);
    assert_eq!(
        forwarded.header("content-type"),
        Some(media("transfers", "2.0").as_str())
    );
    assert_eq!(forwarded.header("traceparent"), Some(traceparent));

    // A resend of it is answered by the hub in 2.0, within the same trace.
    let response = s.hub.api("POST", "/transfers", &headers, body.as_bytes());
    assert_eq!(response.status, 202);
    s.payee.assert_quiet(QUIET_WAIT);
    // (In flight: nothing to resend yet.) Fulfil in 2.0, then resend.
    let fulfil_headers = transfer_headers(PAYEE, PAYER, "2.0", None);
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    let path = format!("/transfers/{id}");
    let response = s.hub.api("PUT", &path, &fulfil_headers, fulfil.as_bytes());
    assert_eq!(response.status, 200);
    s.payer.expect("PUT", &path);
    s.payee.expect("PUT", &path);
    let response = s.hub.api("POST", "/transfers", &headers, body.as_bytes());
    assert_eq!(response.status, 202);
    let resent = s.payer.expect("PUT", &path);
    assert_eq!(resent.header("fspiop-source"), Some(HUB_NAME));
    assert_eq!(
        resent.header("content-type"),
        Some(media("transfers", "2.0").as_str())
    );
    assert_eq!(resent.json()["transferState"], "COMMITTED");
    let child = resent.header("traceparent").expect("a traceparent");
    assert_eq!(trace_id(child), trace_id(traceparent));
    assert_ne!(span_id(child), span_id(traceparent));

    // A hub error to a 2.0 request is in 2.0 too.
    let id = new_id();
    let body = prepare_body(&id, PAYER, "nobody", "10", far_future());
    let headers = transfer_headers(PAYER, "nobody", "2.0", Some("2"));
    assert_eq!(
        s.hub
            .api("POST", "/transfers", &headers, body.as_bytes())
            .status,
        202
    );
    let error = s.payer.expect_error(&id, "3100");
    assert_eq!(
        error.header("content-type"),
        Some(media("transfers", "2.0").as_str())
    );
    // Without a traceparent in the request, the hub starts a trace.
    let generated = error.header("traceparent").expect("a traceparent");
    assert_eq!(generated.len(), 55, "{generated}");
    assert!(generated.starts_with("00-"), "{generated}");
}

#[test]
fn an_expiry_is_told_in_the_version_of_the_prepare() {
    let s = Scenario::new();
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", now_ms() + 400);
    let headers = transfer_headers(PAYER, PAYEE, "2.0", Some("2"));
    assert_eq!(
        s.hub
            .api("POST", "/transfers", &headers, body.as_bytes())
            .status,
        202
    );
    s.payee.expect("POST", "/transfers");
    for stub in [&s.payer, &s.payee] {
        let expired = stub.expect_error(&id, "3303");
        assert_eq!(
            expired.header("content-type"),
            Some(media("transfers", "2.0").as_str()),
            "{expired:?}"
        );
        assert_eq!(
            expired.header("fspiop-uri"),
            Some(format!("/transfers/{id}/error").as_str())
        );
        assert_eq!(expired.header("fspiop-http-method"), Some("PUT"));
        assert!(expired.header("traceparent").is_some(), "{expired:?}");
    }
    assert_eq!(s.hub.position(PAYER), 0.0);
}

// ------------------------------------------------------------- headers

#[test]
fn callbacks_say_where_they_really_go_and_answers_are_not_cached() {
    let s = Scenario::new();
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", far_future());
    // The payer's own FSPIOP-URI and method are kept on what is forwarded
    // as it came...
    let headers = with_header(
        with_header(
            fspiop_headers(PAYER, PAYEE, true),
            "FSPIOP-URI",
            "/transfers",
        ),
        "FSPIOP-HTTP-Method",
        "POST",
    );
    let response = s.hub.api("POST", "/transfers", &headers, body.as_bytes());
    assert_eq!(response.status, 202);
    assert_eq!(response.header("cache-control"), Some("no-cache"));
    let prepare = s.payee.expect("POST", "/transfers");
    assert_eq!(prepare.header("fspiop-uri"), Some("/transfers"));
    assert_eq!(prepare.header("fspiop-http-method"), Some("POST"));

    // ... and a forwarded callback's wrong ones are replaced.
    let path = format!("/transfers/{id}");
    let headers = with_header(
        with_header(
            fspiop_headers(PAYEE, PAYER, false),
            "FSPIOP-URI",
            "/somewhere/else",
        ),
        "FSPIOP-HTTP-Method",
        "PATCH",
    );
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    let response = s.hub.api("PUT", &path, &headers, fulfil.as_bytes());
    assert_eq!(response.status, 200);
    assert_eq!(response.header("cache-control"), Some("no-cache"));
    for stub in [&s.payer, &s.payee] {
        let callback = stub.expect("PUT", &path);
        assert_eq!(callback.header("fspiop-uri"), Some(path.as_str()));
        assert_eq!(callback.header("fspiop-http-method"), Some("PUT"));
        assert_eq!(callback.text(), fulfil);
    }

    // A refusal is not cached either, and says what it is.
    let response = s.hub.api(
        "POST",
        "/transfers",
        &without_header(fspiop_headers(PAYER, PAYEE, true), "Date"),
        body.as_bytes(),
    );
    assert_error_response(&response, 400, "3102");
    assert_eq!(response.header("cache-control"), Some("no-cache"));
    assert_eq!(response.header("content-type"), Some("application/json"));
}

#[test]
fn header_faults_get_mojaloops_codes_and_words() {
    let s = Scenario::new();
    let (id, _) = s.reserve("10", far_future());
    let path = format!("/transfers/{id}");
    let get = |headers: Vec<(String, String)>| s.hub.api("GET", &path, &headers, b"");
    let description = |response: &Response| {
        response.json()["errorInformation"]["errorDescription"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let good = || fspiop_headers(PAYER, PAYEE, true);

    // Content-Type is required on a GET too.
    let response = get(without_header(good(), "Content-Type"));
    assert_error_response(&response, 400, "3102");
    assert_eq!(
        description(&response),
        "Missing mandatory element - Content-type is required"
    );
    let response = get(with_header(good(), "Content-Type", "application/json"));
    assert_error_response(&response, 400, "3101");
    assert_eq!(
        description(&response),
        "Malformed syntax - Invalid content-type header"
    );
    let response = get(with_header(
        good(),
        "Content-Type",
        &media("transfers", "3.0"),
    ));
    assert_error_response(&response, 406, "3001");

    // A malformed Accept is 3101 naming it (the golden path sends
    // `testAcceptText` and `*/*`); only a well-formed one with no version
    // kasi speaks is 406.
    for malformed in ["application/json", "transfers", "*/*", "testAcceptText"] {
        let response = get(with_header(good(), "Accept", malformed));
        assert_error_response(&response, 400, "3101");
        assert_eq!(
            description(&response),
            "Malformed syntax - Invalid accept header"
        );
    }
    let response = get(with_header(good(), "Accept", &media("transfers", "9")));
    assert_error_response(&response, 406, "3001");
    assert_eq!(
        description(&response),
        "Unacceptable version requested - The Client requested an unsupported version, see extension list for supported version(s)."
    );
    assert_eq!(
        response.json()["errorInformation"]["extensionList"],
        json!({"extension": [
            {"key": "1", "value": "0"},
            {"key": "1", "value": "1"},
            {"key": "2", "value": "0"}
        ]})
    );
    let response = get(without_header(good(), "Accept"));
    assert_error_response(&response, 400, "3102");
    assert_eq!(
        description(&response),
        "Missing mandatory element - Accept is required"
    );
    let response = get(without_header(good(), "Date"));
    assert_eq!(
        description(&response),
        "Missing mandatory element - Missing required date header"
    );
    let response = get(with_header(good(), "Date", "yesterday"));
    assert_error_response(&response, 400, "3101");
    assert_eq!(
        description(&response),
        "Malformed syntax - Invalid date header"
    );
    let response = get(without_header(good(), "FSPIOP-Source"));
    assert_error_response(&response, 400, "3102");
    assert_eq!(
        description(&response),
        "Missing mandatory element - /header must have required property 'fspiop-source'"
    );

    // On a callback, Accept is not required, but checked when sent.
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    let response = s.hub.api(
        "PUT",
        &path,
        &with_header(fspiop_headers(PAYEE, PAYER, false), "Accept", "text/html"),
        fulfil.as_bytes(),
    );
    assert_error_response(&response, 400, "3101");
    s.payer.assert_quiet(QUIET_WAIT);
    s.payee.assert_nothing_pending();
    // Nothing was changed by any of them.
    assert_eq!(
        get_state(&s, &id, PAYER, PAYEE)["transferState"],
        "RESERVED"
    );
}

// ------------------------------------------------- transfer edge cases

#[test]
fn a_get_of_a_transfer_that_did_not_commit_answers_aborted_with_its_cause() {
    let s = Scenario::new();
    let (expired, _) = s.reserve("10", now_ms() + 300);
    s.payer.expect_error(&expired, "3303");
    s.payee.expect_error(&expired, "3303");
    let state = get_state(&s, &expired, PAYER, PAYEE);
    assert_eq!(state["transferState"], "ABORTED", "{state}");
    assert_eq!(
        state["extensionList"],
        json!({"extension": [{"key": "cause", "value": "3303: Transfer expired"}]})
    );
    assert!(state["completedTimestamp"].is_string(), "{state}");

    let (rejected, _) = s.reserve("10", far_future());
    let response = s
        .hub
        .reject(&rejected, PAYEE, PAYER, &error_body("5101", "no"));
    assert_eq!(response.status, 200);
    s.payer
        .expect("PUT", &format!("/transfers/{rejected}/error"));
    let state = get_state(&s, &rejected, PAYEE, PAYER);
    assert_eq!(state["transferState"], "ABORTED");
    assert_eq!(state["extensionList"]["extension"][0]["key"], "cause");
    assert!(state["extensionList"]["extension"][0]["value"]
        .as_str()
        .is_some_and(|cause| cause.starts_with("5101: ")));
}

/// `fulfilment` with its last character's spare bits set: the schema's
/// pattern holds, the bytes are `fulfilment`'s.
fn with_trailing_bits(fulfilment: &str) -> String {
    const ALPHABET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let last = fulfilment.chars().last().unwrap();
    let value = ALPHABET.find(last).unwrap();
    assert_eq!(value & 3, 0, "a canonical 43rd character has no spare bits");
    let mut out = fulfilment[..42].to_string();
    out.push(ALPHABET.as_bytes()[value | 1] as char);
    out
}

#[test]
fn a_wrong_or_missing_fulfilment_is_taken_then_aborts_the_transfer_with_3100() {
    let s = Scenario::new();
    // Trailing bits on a fulfilment that does not match: 200, then 3100.
    let (id, _) = s.reserve("10", far_future());
    let wrong = with_trailing_bits(WRONG_FULFILMENT);
    s.fulfil(&id, &fulfil_body(&wrong, "COMMITTED"));
    for stub in [&s.payer, &s.payee] {
        let error = stub.expect_error(&id, "3100");
        assert_eq!(
            error.json()["errorInformation"]["errorDescription"],
            "Generic validation error - invalid fulfilment"
        );
    }
    // A later GET carries the reason in central-ledger's words (the Testing
    // Toolkit's payee_invalid_fulfillment checks them exactly).
    let state = get_state(&s, &id, PAYER, PAYEE);
    assert_eq!(state["transferState"], "ABORTED");
    assert_eq!(
        cause_of(&state),
        Some("3100: Generic validation error - invalid fulfilment"),
        "{state}"
    );
    assert_eq!(s.hub.position(PAYER), 0.0);

    // No fulfilment at all: the same.
    let (id, _) = s.reserve("10", far_future());
    let body = format!(
        r#"{{"completedTimestamp":"{}","transferState":"COMMITTED"}}"#,
        fspiop_time(now_ms())
    );
    s.fulfil(&id, &body);
    s.payer.expect_error(&id, "3100");
    s.payee.expect_error(&id, "3100");
    assert_eq!(get_state(&s, &id, PAYER, PAYEE)["transferState"], "ABORTED");

    // Trailing bits on the right fulfilment: its bytes match, as in
    // central-ledger, so the transfer commits and the payer gets the
    // payee's bytes.
    let (id, _) = s.reserve("10", far_future());
    let body = fulfil_body(&with_trailing_bits(FULFILMENT), "COMMITTED");
    s.fulfil(&id, &body);
    assert_eq!(
        s.payer.expect("PUT", &format!("/transfers/{id}")).text(),
        body
    );
    s.payee.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(s.hub.position(PAYER), 10.0);
}

/// The `cause` extension of a `PUT /transfers/{ID}` body (GET answer or
/// PATCH), if it has one.
fn cause_of(state: &Value) -> Option<&str> {
    let extension = &state["extensionList"]["extension"][0];
    (extension["key"] == "cause")
        .then(|| extension["value"].as_str())
        .flatten()
}

/// The hub's answer to a `GET` of `id` from `source`, skipping the error
/// callbacks a restart may deliver again to `stub` meanwhile (at least
/// once: they go to `…/error`, the answer to `/transfers/{id}`).
fn get_state_after_restart(s: &Scenario, stub: &Stub, id: &str, source: &str) -> Value {
    let destination = if source == PAYER { PAYEE } else { PAYER };
    let response = s.hub.get_transfer(id, source, destination);
    assert_eq!(response.status, 202, "GET /transfers/{id}: {response:?}");
    let path = format!("/transfers/{id}");
    loop {
        let received = stub.next("the answer to a GET");
        if received.method == "PUT" && received.path == path {
            assert_eq!(received.header("fspiop-source"), Some(HUB_NAME));
            return received.json();
        }
        assert!(
            received.path.ends_with("/error"),
            "only error callbacks may be delivered again: {received:?}"
        );
    }
}

/// central-ledger's words for a fulfil or error whose FSPIOP-Destination is
/// not the payer (ABORT_VALIDATION, Testing Toolkit's bug fix #2697).
const NOT_TO_THE_PAYER: &str =
    "Generic validation error - fspiop-destination does not match payer fsp on the Fulfil callback response";

#[test]
fn a_fulfil_or_error_addressed_to_another_than_the_payer_aborts_the_transfer() {
    let mut s = Scenario::new();
    let third = Stub::start("thirdfsp");
    s.hub.onboard("thirdfsp", &third.base_url(), 10_000, 5_000);

    // COMMITTED: the payer is told 3100; the payee nothing (central-ledger
    // sends its ABORT_VALIDATION from the switch, to the payer only).
    let (committed, _) = s.reserve("10", far_future());
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    let response = s.hub.fulfil(&committed, PAYEE, "thirdfsp", &fulfil);
    assert_eq!(response.status, 200, "{response:?}");
    let error = s.payer.expect_error(&committed, "3100");
    assert_eq!(
        error.json()["errorInformation"]["errorDescription"],
        NOT_TO_THE_PAYER
    );
    assert_eq!(s.hub.position(PAYER), 0.0, "the reservation is released");
    assert_eq!(s.hub.position(PAYEE), 0.0);
    s.payee.assert_quiet(QUIET_WAIT);

    // RESERVED: the payee asked to be told, so it gets the PATCH ABORTED
    // with the cause.
    let (reserved, _) = s.reserve("10", far_future());
    let response = s.hub.fulfil(
        &reserved,
        PAYEE,
        "thirdfsp",
        &fulfil_body(FULFILMENT, "RESERVED"),
    );
    assert_eq!(response.status, 200, "{response:?}");
    s.payer.expect_error(&reserved, "3100");
    let patch = s.payee.expect("PATCH", &format!("/transfers/{reserved}"));
    assert_eq!(patch.header("fspiop-source"), Some(HUB_NAME), "{patch:?}");
    let patched = patch.json();
    assert_eq!(patched["transferState"], "ABORTED", "{patch:?}");
    assert_eq!(
        cause_of(&patched),
        Some(format!("3100: {NOT_TO_THE_PAYER}").as_str())
    );

    // An error addressed elsewhere: the payer gets the hub's 3100, not the
    // payee's error.
    let (errored, _) = s.reserve("10", far_future());
    let response = s
        .hub
        .reject(&errored, PAYEE, "thirdfsp", &error_body("5101", "no"));
    assert_eq!(response.status, 200, "{response:?}");
    let error = s.payer.expect_error(&errored, "3100");
    assert_eq!(
        error.json()["errorInformation"]["errorDescription"],
        NOT_TO_THE_PAYER
    );
    assert_eq!(s.hub.position(PAYER), 0.0);

    // The same fulfil again is a duplicate: its sender gets the state.
    let response = s.hub.fulfil(&committed, PAYEE, "thirdfsp", &fulfil);
    assert_eq!(response.status, 200, "{response:?}");
    let state = s
        .payee
        .expect("PUT", &format!("/transfers/{committed}"))
        .json();
    assert_eq!(state["transferState"], "ABORTED", "{state}");
    // A source that is not the payee changes nothing (kasi's stricter rule).
    let response = s.hub.fulfil(&committed, "thirdfsp", PAYER, &fulfil);
    assert_eq!(response.status, 200, "{response:?}");
    third.expect_error(&committed, "3100");
    s.payer.assert_quiet(QUIET_WAIT);
    s.payee.assert_nothing_pending();

    // Later GETs, before and after a restart, show ABORTED and why.
    let cause = format!("3100: {NOT_TO_THE_PAYER}");
    for id in [&committed, &reserved, &errored] {
        let state = get_state(&s, id, PAYER, PAYEE);
        assert_eq!(state["transferState"], "ABORTED", "{id}: {state}");
        assert_eq!(cause_of(&state), Some(cause.as_str()), "{id}: {state}");
    }
    s.hub.kill();
    s.hub = Hub::start(&s.dir.path().join("data"));
    for id in [&committed, &reserved, &errored] {
        let state = get_state_after_restart(&s, &s.payee, id, PAYEE);
        assert_eq!(state["transferState"], "ABORTED", "{id}: {state}");
        assert_eq!(cause_of(&state), Some(cause.as_str()), "{id}: {state}");
    }
    assert_eq!(s.hub.position(PAYER), 0.0);
    third.assert_nothing_pending();
}

#[test]
fn aborted_in_a_put_and_reserved_from_a_1_0_payee_change_nothing() {
    let s = Scenario::new();
    let (id, _) = s.reserve("10", now_ms() + 1_500);
    let path = format!("/transfers/{id}");

    // ABORTED belongs in PUT …/error: answered, ignored.
    let response = s
        .hub
        .fulfil(&id, PAYEE, PAYER, &fulfil_body(FULFILMENT, "ABORTED"));
    assert_eq!(response.status, 200, "{response:?}");
    // RESERVED from a 1.0 client: answered, ignored (central-ledger).
    let headers = transfer_headers(PAYEE, PAYER, "1.0", None);
    let body = fulfil_body(FULFILMENT, "RESERVED");
    let response = s.hub.api("PUT", &path, &headers, body.as_bytes());
    assert_eq!(response.status, 200, "{response:?}");
    s.payer.assert_quiet(QUIET_WAIT);
    s.payee.assert_nothing_pending();
    assert_eq!(
        get_state(&s, &id, PAYER, PAYEE)["transferState"],
        "RESERVED"
    );
    assert_eq!(s.hub.position(PAYER), 10.0);

    // So the transfer stays reserved until it expires.
    s.payer.expect_error(&id, "3303");
    s.payee.expect_error(&id, "3303");
    assert_eq!(s.hub.position(PAYER), 0.0);

    // RESERVED in 1.1 is a commit with a PATCH, as before.
    let (id, _) = s.reserve("10", far_future());
    s.fulfil(&id, &fulfil_body(FULFILMENT, "RESERVED"));
    s.payer.expect("PUT", &format!("/transfers/{id}"));
    let patch = s.payee.expect("PATCH", &format!("/transfers/{id}"));
    assert_eq!(patch.json()["transferState"], "COMMITTED");
}

// ------------------------------------------------------------- parties

#[test]
fn a_party_answer_without_destination_goes_to_the_fsp_that_asked() {
    let s = Scenario::new();
    for stub in [&s.payer, &s.payee] {
        let base = stub.base_url();
        for (kind, path) in [
            (
                "FSPIOP_CALLBACK_URL_PARTIES_GET",
                "/parties/{{partyIdType}}/{{partyIdentifier}}",
            ),
            (
                "FSPIOP_CALLBACK_URL_PARTIES_PUT",
                "/parties/{{partyIdType}}/{{partyIdentifier}}",
            ),
            (
                "FSPIOP_CALLBACK_URL_PARTIES_PUT_ERROR",
                "/parties/{{partyIdType}}/{{partyIdentifier}}/error",
            ),
            (
                "FSPIOP_CALLBACK_URL_PARTICIPANT_PUT",
                "/participants/{{partyIdType}}/{{partyIdentifier}}",
            ),
        ] {
            s.hub
                .add_endpoint(&stub.name, kind, &format!("{base}{path}"));
        }
    }
    let party = "/parties/MSISDN/27713803912";
    let registration = s.hub.api(
        "POST",
        "/participants/MSISDN/27713803912",
        &resource_headers("participants", "1.1", PAYEE, None, true),
        format!(r#"{{"fspId":"{PAYEE}","currency":"USD"}}"#).as_bytes(),
    );
    assert_eq!(registration.status, 202);
    s.payee.expect("PUT", "/participants/MSISDN/27713803912");

    let lookup = s.hub.api(
        "GET",
        party,
        &resource_headers("parties", "1.1", PAYER, None, true),
        b"",
    );
    assert_eq!(lookup.status, 202);
    s.payee.expect("GET", party);

    // The payee answers in 2.0 without FSPIOP-Destination.
    let answer = format!(
        r#"{{"party":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"27713803912","fspId":"{PAYEE}"}},"name":"Alice","supportedCurrencies":["USD"]}}}}"#
    );
    let headers = resource_headers("parties", "2.0", PAYEE, None, false);
    let response = s.hub.api("PUT", party, &headers, answer.as_bytes());
    assert_eq!(response.status, 200, "{response:?}");
    let forwarded = s.payer.expect("PUT", party);
    assert_eq!(forwarded.text(), answer);

    // The payee's answer repeated soon after is forwarded again.
    let response = s.hub.api("PUT", party, &headers, answer.as_bytes());
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(s.payer.expect("PUT", party).text(), answer);

    // An answer from an FSP the lookup did not go to is refused at once,
    // and nobody hears of it.
    let forged = answer.replace(PAYEE, PAYER);
    let headers = resource_headers("parties", "2.0", PAYER, None, false);
    let response = s.hub.api("PUT", party, &headers, forged.as_bytes());
    assert_error_response(&response, 400, "3100");
    s.payer.assert_quiet(QUIET_WAIT);
    s.payee.assert_quiet(QUIET_WAIT);
}

// --------------------------------------------------------------- health

#[test]
fn health_has_mojaloops_shape_on_both_addresses() {
    let s = Scenario::new();
    for address in [s.hub.api, s.hub.admin] {
        let response = http(address, "GET", "/health", &[], b"");
        assert_eq!(response.status, 200, "{response:?}");
        let body = response.json();
        assert_eq!(body["status"], "OK");
        assert!(body["uptime"].is_number(), "{body}");
        assert!(body["startTime"].is_string(), "{body}");
        assert!(body["versionNumber"].is_string(), "{body}");
        assert_eq!(
            body["services"],
            json!([{"name": "datastore", "status": "OK"}]),
            "{body}"
        );
    }
}

// ----------------------------------------------------------- currencies

#[test]
fn the_testing_and_no_currency_codes_onboard_quote_and_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    // XXX (no currency) and XTS (testing): hub accounts, a settlement
    // model and an oracle each, as for any currency.
    for currency in ["XXX", "XTS"] {
        for kind in ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"] {
            hub.admin_expect(
                "POST",
                "/participants/Hub/accounts",
                Some(json!({"type": kind, "currency": currency})),
                201,
            );
        }
        hub.admin_expect(
            "POST",
            "/settlementModels",
            Some(json!({
                "name": format!("DEFERREDNET{currency}"),
                "settlementGranularity": "NET",
                "settlementInterchange": "MULTILATERAL",
                "settlementDelay": "DEFERRED",
                "currency": currency,
                "requireLiquidityCheck": true,
                "ledgerAccountType": "POSITION",
                "autoPositionReset": true
            })),
            201,
        );
        hub.admin_expect(
            "POST",
            "/oracles",
            Some(json!({
                "oracleIdType": "ACCOUNT_ID",
                "endpoint": {"value": "http://127.0.0.1:9/oracle", "endpointType": "URL"},
                "currency": currency,
                "isDefault": false
            })),
            201,
        );
    }
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    for (stub, deposit) in [(&payer, 1000), (&payee, 0)] {
        hub.add_currency(&stub.name, "XXX", 1000, deposit);
        hub.add_currency(&stub.name, "XTS", 1000, deposit);
        let base = stub.base_url();
        for (kind, path) in [
            ("FSPIOP_CALLBACK_URL_QUOTES", ""),
            ("FSPIOP_CALLBACK_URL_TRANSFER_POST", "/transfers"),
            (
                "FSPIOP_CALLBACK_URL_TRANSFER_PUT",
                "/transfers/{{transferId}}",
            ),
            (
                "FSPIOP_CALLBACK_URL_TRANSFER_ERROR",
                "/transfers/{{transferId}}/error",
            ),
        ] {
            hub.add_endpoint(&stub.name, kind, &format!("{base}{path}"));
        }
    }

    // A quote in XTS, routed both ways.
    let quote_id = new_id();
    let quote = format!(
        r#"{{"quoteId":"{quote_id}","transactionId":"{}","payee":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"123","fspId":"{PAYEE}"}}}},"payer":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"456","fspId":"{PAYER}"}}}},"amountType":"SEND","amount":{{"currency":"XTS","amount":"12.5"}},"transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}"#,
        new_id()
    );
    let headers = resource_headers("quotes", "1.0", PAYER, Some(PAYEE), true);
    let response = hub.api("POST", "/quotes", &headers, quote.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    assert_eq!(payee.expect("POST", "/quotes").text(), quote);
    let answer = format!(
        r#"{{"transferAmount":{{"currency":"XTS","amount":"12.5"}},"expiration":"{}","ilpPacket":"{ILP_PACKET}","condition":"{CONDITION}"}}"#,
        fspiop_time(far_future())
    );
    let path = format!("/quotes/{quote_id}");
    let headers = resource_headers("quotes", "1.0", PAYEE, Some(PAYER), false);
    let response = hub.api("PUT", &path, &headers, answer.as_bytes());
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(payer.expect("PUT", &path).text(), answer);

    // The transfer in XTS: reserved, committed, both told.
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "12.5", far_future()).replace("USD", "XTS");
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    payee.expect("POST", "/transfers");
    let response = hub.fulfil(&id, PAYEE, PAYER, &fulfil_body(FULFILMENT, "COMMITTED"));
    assert_eq!(response.status, 200, "{response:?}");
    let committed = payer.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(committed.json()["transferState"], "COMMITTED");
    payee.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(hub.position_in(PAYER, "XTS"), 12.5);
    assert_eq!(hub.position_in(PAYEE, "XTS"), -12.5);
    assert_eq!(hub.position_in(PAYER, "XXX"), 0.0);

    // A currency the admin API does not know is malformed syntax, in
    // central-ledger's words (the golden path's bug #742 test).
    let response = hub.admin(
        "POST",
        "/participants",
        Some(&json!({"name": "payer10", "currency": "A#"})),
    );
    assert_error_response(&response, 400, "3101");
    assert!(
        response.json()["errorInformation"]["errorDescription"]
            .as_str()
            .is_some_and(|d| d.starts_with("Malformed syntax")),
        "{response:?}"
    );
    payer.assert_quiet(QUIET_WAIT);
    payee.assert_nothing_pending();
}
