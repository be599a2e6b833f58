//! End-to-end FSPIOP v1.1 discovery through the real `kasi serve` binary:
//! the participant registry (`/participants`), party lookup (`/parties`)
//! and quotes (`/quotes`), with DFSPs onboarded over the admin API and
//! real HTTP callback stubs, against the behaviour Mojaloop's
//! account-lookup-service and quoting-service define
//! (MOJALOOP-REFERENCE.md §2, §8).

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

// ------------------------------------------------------------------ set-up

/// The party the payee holds in most tests.
const ALICE: &str = "255700000001";

/// `name` onboarded as in transfers.rs (no funds needed), plus the
/// endpoint types in `endpoints` at `base_url`.
fn onboard(hub: &Hub, name: &str, base_url: &str, endpoints: &[(&str, &str)]) {
    hub.onboard(name, base_url, 10_000, 0);
    for (kind, path) in endpoints {
        hub.add_endpoint(name, kind, &format!("{base_url}{path}"));
    }
}

/// A hub with a payer and a payee DFSP, both with every discovery endpoint.
struct Discovery {
    hub: Hub,
    payer: Stub,
    payee: Stub,
    dir: tempfile::TempDir,
}

impl Discovery {
    fn new() -> Discovery {
        Discovery::with_flags(&[])
    }

    fn with_flags(flags: &[&str]) -> Discovery {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::start_with(&dir.path().join("data"), flags);
        hub.setup();
        let payer = Stub::start(PAYER);
        let payee = Stub::start(PAYEE);
        onboard(&hub, PAYER, &payer.base_url(), DISCOVERY_ENDPOINTS);
        onboard(&hub, PAYEE, &payee.base_url(), DISCOVERY_ENDPOINTS);
        Discovery {
            hub,
            payer,
            payee,
            dir,
        }
    }

    /// `payee` registers `path` (`MSISDN/1[/sub]`) to itself; the
    /// registration must be accepted and confirmed with
    /// `PUT /participants/{path}` `{"fspId": payee}`.
    fn register(&self, stub: &Stub, path: &str) {
        let response = register(&self.hub, &stub.name, path, &stub.name);
        assert_eq!(
            response.status, 202,
            "POST /participants/{path}: {response:?}"
        );
        expect_participant_put(stub, path, &stub.name);
    }
}

// ------------------------------------------------------------------ requests

/// `POST /participants/{path}` `{"fspId": fsp_id, "currency": "USD"}` from
/// `source`, without FSPIOP-Destination.
fn register(hub: &Hub, source: &str, path: &str, fsp_id: &str) -> Response {
    let body = format!(r#"{{"fspId":"{fsp_id}","currency":"USD"}}"#);
    hub.api(
        "POST",
        &format!("/participants/{path}"),
        &resource_headers("participants", "1.0", source, None, true),
        body.as_bytes(),
    )
}

/// `GET /parties/{path}` from `source`, without FSPIOP-Destination (the hub
/// finds the holder).
fn lookup(hub: &Hub, source: &str, path: &str) -> Response {
    hub.api(
        "GET",
        &format!("/parties/{path}"),
        &resource_headers("parties", "1.0", source, None, true),
        b"",
    )
}

/// A lookup that must be accepted (202).
fn lookup_accepted(hub: &Hub, source: &str, path: &str) {
    let response = lookup(hub, source, path);
    assert_eq!(response.status, 202, "GET /parties/{path}: {response:?}");
}

/// `PUT /parties/{type}/{id}[/{sub}]` body naming `fsp` as the holder.
fn party_body(id_type: &str, id: &str, sub_id: Option<&str>, fsp: &str, name: &str) -> String {
    let sub = sub_id
        .map(|sub| format!(r#","partySubIdOrType":"{sub}""#))
        .unwrap_or_default();
    format!(
        r#"{{"party":{{"partyIdInfo":{{"partyIdType":"{id_type}","partyIdentifier":"{id}"{sub},"fspId":"{fsp}"}},"name":"{name}","personalInfo":{{"complexName":{{"firstName":"{name}"}}}}}}}}"#
    )
}

fn quote_body(quote_id: &str, with_amount: bool) -> String {
    let amount = if with_amount {
        r#""amount":{"currency":"USD","amount":"100"},"#
    } else {
        ""
    };
    format!(
        r#"{{"quoteId":"{quote_id}","transactionId":"{}","payee":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"{ALICE}","fspId":"{PAYEE}"}}}},"payer":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"255700000009","fspId":"{PAYER}"}}}},"amountType":"SEND",{amount}"transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}"#,
        new_id()
    )
}

fn quote_put_body() -> String {
    format!(
        r#"{{"transferAmount":{{"currency":"USD","amount":"100"}},"expiration":"{}","ilpPacket":"{ILP_PACKET}","condition":"{CONDITION}"}}"#,
        fspiop_time(far_future())
    )
}

/// `stub`'s DFSP registers the MSISDNs `identifiers` to itself with one
/// batch `POST /participants`, which must succeed for every one.
fn register_batch(hub: &Hub, stub: &Stub, identifiers: &[String]) {
    let request_id = new_id();
    let list: Vec<Value> = identifiers
        .iter()
        .map(|id| json!({"partyIdType": "MSISDN", "partyIdentifier": id, "fspId": stub.name}))
        .collect();
    let body = json!({"requestId": request_id, "partyList": list, "currency": "USD"});
    let response = hub.api(
        "POST",
        "/participants",
        &resource_headers("participants", "1.0", &stub.name, None, true),
        &serde_json::to_vec(&body).unwrap(),
    );
    assert_eq!(response.status, 202, "{response:?}");
    let callback = stub.expect("PUT", &format!("/participants/{request_id}"));
    let answer = callback.json();
    assert!(
        answer["partyList"]
            .as_array()
            .is_some_and(|list| list.len() == identifiers.len()
                && list
                    .iter()
                    .all(|item| item.get("errorInformation").is_none())),
        "every party should be registered: {callback:?}"
    );
}

// ---------------------------------------------------------------- callbacks

/// The next request to `stub` must be the hub's
/// `PUT /participants/{path}` `{"fspId": fsp}`.
fn expect_participant_put(stub: &Stub, path: &str, fsp: &str) -> Received {
    let received = stub.expect("PUT", &format!("/participants/{path}"));
    assert_from_hub(&received, "participants", &stub.name);
    assert_eq!(received.json(), json!({"fspId": fsp}), "{received:?}");
    received
}

/// A request the hub itself sends `destination`: FSPIOP-Source the hub,
/// FSPIOP-Destination the DFSP, a Date, and the `resource`'s Content-Type.
fn assert_from_hub(received: &Received, resource: &str, destination: &str) {
    assert_eq!(
        received.header("fspiop-source"),
        Some(HUB_NAME),
        "FSPIOP-Source of {received:?}"
    );
    assert_eq!(
        received.header("fspiop-destination"),
        Some(destination),
        "FSPIOP-Destination of {received:?}"
    );
    let content_type = format!("application/vnd.interoperability.{resource}+json");
    assert!(
        received
            .header("content-type")
            .is_some_and(|value| value.starts_with(&content_type)),
        "Content-Type of {received:?} should be {content_type};version=..."
    );
    assert!(received.header("date").is_some(), "Date of {received:?}");
}

/// The next request to `stub` must be the hub's `PUT {path}` error
/// callback carrying `code`; returns its `errorInformation`.
fn expect_hub_error(stub: &Stub, path: &str, resource: &str, code: &str) -> Value {
    let received = stub.expect("PUT", path);
    assert_hub_error(&received, resource, &stub.name, Some(code))
}

/// The next request to `stub` must be the hub's `PUT {path}` error
/// callback with 3201 "Destination FSP Error".
fn expect_destination_fsp_error(stub: &Stub, path: &str, resource: &str) {
    let info = expect_hub_error(stub, path, resource, "3201");
    assert!(
        info["errorDescription"]
            .as_str()
            .is_some_and(|d| d.starts_with("Destination FSP Error")),
        "{info}"
    );
}

/// A hub error callback; `code` `None` accepts any 3xxx client error.
fn assert_hub_error(
    received: &Received,
    resource: &str,
    destination: &str,
    code: Option<&str>,
) -> Value {
    assert_from_hub(received, resource, destination);
    let info = received.json()["errorInformation"].clone();
    let actual = info["errorCode"].as_str().unwrap_or_default();
    match code {
        Some(code) => assert_eq!(actual, code, "errorCode of {received:?}"),
        None => assert!(
            actual.len() == 4 && actual.starts_with('3'),
            "errorCode of {received:?} should be a 3xxx client error"
        ),
    }
    assert!(
        info["errorDescription"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "errorDescription of {received:?}"
    );
    info
}

/// The request must have been forwarded as sent: same FSPIOP-Source, the
/// given FSPIOP-Destination, the sender's Date.
fn assert_forwarded(received: &Received, sent: &[(String, String)], destination: &str) {
    assert_eq!(
        received.header("fspiop-source"),
        header_value(sent, "FSPIOP-Source"),
        "FSPIOP-Source of {received:?}"
    );
    assert_eq!(
        received.header("fspiop-destination"),
        Some(destination),
        "FSPIOP-Destination of {received:?}"
    );
    assert_eq!(
        received.header("date"),
        header_value(sent, "Date"),
        "Date of {received:?}"
    );
}

// ------------------------------------------------------- lookup, happy path

#[test]
fn a_registered_party_is_looked_up_at_its_fsp_and_the_answer_reaches_the_payer() {
    let d = Discovery::new();
    let path = format!("MSISDN/{ALICE}");

    // The payee registers its customer; the hub confirms to it.
    let response = register(&d.hub, PAYEE, &path, PAYEE);
    assert_eq!(response.status, 202, "{response:?}");
    expect_participant_put(&d.payee, &path, PAYEE);

    // The payer looks the party up without knowing who holds it.
    let headers = resource_headers("parties", "1.0", PAYER, None, true);
    let response = d.hub.api("GET", &format!("/parties/{path}"), &headers, b"");
    assert_eq!(response.status, 202, "{response:?}");
    let forwarded = d.payee.expect("GET", &format!("/parties/{path}"));
    assert_forwarded(&forwarded, &headers, PAYEE);
    assert!(forwarded.body.is_empty(), "{forwarded:?}");
    d.payer.assert_nothing_pending();

    // The payee answers; the payer gets its exact bytes and headers.
    let body = party_body("MSISDN", ALICE, None, PAYEE, "Alice");
    let put_headers = resource_headers("parties", "1.0", PAYEE, Some(PAYER), false);
    let response = d.hub.api(
        "PUT",
        &format!("/parties/{path}"),
        &put_headers,
        body.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");
    let answer = d.payer.expect("PUT", &format!("/parties/{path}"));
    assert_eq!(
        answer.body,
        body.as_bytes(),
        "the payer must get the payee's exact bytes: {answer:?}"
    );
    assert_forwarded(&answer, &put_headers, PAYER);
    d.payee.assert_nothing_pending();

    // The registry itself answers who holds the party.
    let response = d.hub.api(
        "GET",
        &format!("/participants/{path}"),
        &resource_headers("participants", "1.0", PAYER, None, true),
        b"",
    );
    assert_eq!(response.status, 202, "{response:?}");
    expect_participant_put(&d.payer, &path, PAYEE);
    d.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn a_party_with_a_sub_id_is_its_own_registry_entry() {
    let d = Discovery::new();
    d.register(&d.payee, "MSISDN/1/home");

    lookup_accepted(&d.hub, PAYER, "MSISDN/1/home");
    let forwarded = d.payee.expect("GET", "/parties/MSISDN/1/home");
    assert_eq!(forwarded.header("fspiop-destination"), Some(PAYEE));
    assert_eq!(forwarded.header("fspiop-source"), Some(PAYER));

    // The answer goes to the payer's SUB_ID_PUT endpoint.
    let body = party_body("MSISDN", "1", Some("home"), PAYEE, "Alice");
    let response = d.hub.api(
        "PUT",
        "/parties/MSISDN/1/home",
        &resource_headers("parties", "1.0", PAYEE, Some(PAYER), false),
        body.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");
    let answer = d.payer.expect("PUT", "/parties/MSISDN/1/home");
    assert_eq!(answer.body, body.as_bytes(), "{answer:?}");

    // A payee's error answer goes to the SUB_ID_PUT_ERROR endpoint.
    lookup_accepted(&d.hub, PAYER, "MSISDN/1/home");
    d.payee.expect("GET", "/parties/MSISDN/1/home");
    let error = error_body("5000", "Generic Payee error");
    let response = d.hub.api(
        "PUT",
        "/parties/MSISDN/1/home/error",
        &resource_headers("parties", "1.0", PAYEE, Some(PAYER), false),
        error.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");
    let answer = d.payer.expect("PUT", "/parties/MSISDN/1/home/error");
    assert_eq!(answer.body, error.as_bytes(), "{answer:?}");
    assert_eq!(answer.header("fspiop-source"), Some(PAYEE), "{answer:?}");

    // MSISDN/1 without the sub-id was never registered.
    lookup_accepted(&d.hub, PAYER, "MSISDN/1");
    expect_hub_error(&d.payer, "/parties/MSISDN/1/error", "parties", "3204");
    d.payee.assert_quiet(QUIET_WAIT);
}

// ----------------------------------------------------------- lookup errors

#[test]
fn an_unknown_party_is_answered_3204_by_the_hub() {
    let d = Discovery::new();
    lookup_accepted(&d.hub, PAYER, "MSISDN/999");
    expect_hub_error(&d.payer, "/parties/MSISDN/999/error", "parties", "3204");
    d.payee.assert_quiet(QUIET_WAIT);
    d.payer.assert_nothing_pending();
}

#[test]
fn a_holder_without_a_parties_endpoint_is_a_3201_to_the_requester() {
    let d = Discovery::new();
    // This FSP can register parties but never said where to ask for them.
    let stub = Stub::start("nogetfsp");
    let registry_only: Vec<(&str, &str)> = DISCOVERY_ENDPOINTS
        .iter()
        .copied()
        .filter(|(kind, _)| kind.starts_with("FSPIOP_CALLBACK_URL_PARTICIPANT"))
        .collect();
    onboard(&d.hub, "nogetfsp", &stub.base_url(), &registry_only);
    d.register(&stub, "MSISDN/255700000004");

    lookup_accepted(&d.hub, PAYER, "MSISDN/255700000004");
    expect_destination_fsp_error(&d.payer, "/parties/MSISDN/255700000004/error", "parties");
    stub.assert_quiet(QUIET_WAIT);
    d.payee.assert_nothing_pending();
}

#[test]
fn a_lookup_or_quote_its_holder_fails_or_refuses_gets_the_payer_an_error_from_the_hub() {
    let d = Discovery::new();
    // A DFSP whose endpoints answer 500, one that refuses with an FSPIOP
    // error, one that refuses without a body.
    let failing = Stub::start_answering("failingfsp", 500, "");
    let refusing = Stub::start_answering(
        "refusingfsp",
        400,
        r#"{"errorInformation":{"errorCode":"5104","errorDescription":"Request rejected"}}"#,
    );
    let terse = Stub::start_answering("tersefsp", 404, "");
    let holders = [&failing, &refusing, &terse];
    for stub in holders {
        onboard(&d.hub, &stub.name, &stub.base_url(), DISCOVERY_ENDPOINTS);
    }

    // A lookup: ALS tells the requester 1001 whatever happened.
    for (index, holder) in holders.into_iter().enumerate() {
        let identifier = format!("25570000010{index}");
        let path = format!("MSISDN/{identifier}");
        let response = register(&d.hub, &holder.name, &path, &holder.name);
        assert_eq!(response.status, 202, "{response:?}");
        expect_participant_put(holder, &path, &holder.name);
        lookup_accepted(&d.hub, PAYER, &path);
        let info = expect_hub_error(
            &d.payer,
            &format!("/parties/{path}/error"),
            "parties",
            "1001",
        );
        assert!(
            info["errorDescription"]
                .as_str()
                .is_some_and(|d| d.starts_with("Destination communication error")
                    && d.contains(&holder.name)),
            "{info}"
        );
        // The lookup was withdrawn: the holder's late answer is refused.
        let response = d.hub.api(
            "PUT",
            &format!("/parties/{path}"),
            &resource_headers("parties", "1.0", &holder.name, Some(PAYER), false),
            party_body("MSISDN", &identifier, None, &holder.name, "Late").as_bytes(),
        );
        assert_error_response(&response, 400, "3100");
    }

    // A quote (and its GET): quoting-service passes a refusal's error on,
    // answers another 4xx 3000, and a failure 1001.
    for (holder, code) in [(&failing, "1001"), (&refusing, "5104"), (&terse, "3000")] {
        let quote_id = new_id();
        let headers = resource_headers("quotes", "1.0", PAYER, Some(&holder.name), true);
        let response = d.hub.api(
            "POST",
            "/quotes",
            &headers,
            quote_body(&quote_id, true).as_bytes(),
        );
        assert_eq!(response.status, 202, "{response:?}");
        let error = format!("/quotes/{quote_id}/error");
        let info = expect_hub_error(&d.payer, &error, "quotes", code);
        if code == "5104" {
            assert_eq!(info["errorDescription"], "Request rejected", "{info}");
        }
        let path = format!("/quotes/{quote_id}");
        let response = d.hub.api("GET", &path, &headers, b"");
        assert_eq!(response.status, 202, "{response:?}");
        expect_hub_error(&d.payer, &error, "quotes", code);
        let response = d.hub.api(
            "PUT",
            &path,
            &resource_headers("quotes", "1.0", &holder.name, Some(PAYER), false),
            quote_put_body().as_bytes(),
        );
        assert_error_response(&response, 400, "3100");
    }
    d.payer.assert_quiet(QUIET_WAIT);
    d.payee.assert_nothing_pending();
}

#[test]
fn a_participants_error_is_answered_as_als_does_and_forwarded_to_nobody() {
    let d = Discovery::new();
    let error = error_body("5100", "This is an error description.");
    let put = |source: &str, destination: Option<&str>, path: &str, body: &str| {
        d.hub.api(
            "PUT",
            &format!("/participants/{path}/error"),
            &resource_headers("participants", "1.0", source, destination, false),
            body.as_bytes(),
        )
    };
    for path in ["MSISDN/255700000201", "MSISDN/255700000201/home"] {
        // Without FSPIOP-Destination (the golden path's request): 200,
        // then 3201 from the hub to the sender, as ALS answers it.
        let response = put(PAYER, None, path, &error);
        assert_eq!(response.status, 200, "{response:?}");
        expect_destination_fsp_error(
            &d.payer,
            &format!("/participants/{path}/error"),
            "participants",
        );
        // Naming a DFSP: the hub asked nobody about the registry, so this
        // answers nothing; forwarding it would let any DFSP tell another
        // that its registration failed. Refused, counted, sent to nobody.
        let response = put(PAYER, Some(PAYEE), path, &error);
        assert_error_response(&response, 400, "3100");
    }
    d.hub.await_refusals("unsolicited_answer", Some(PAYER), 2);
    // Its body is checked as on any error callback.
    let response = put(PAYER, None, "MSISDN/255700000201", "{}");
    assert_error_response(&response, 400, "3102");
    d.payee.assert_quiet(QUIET_WAIT);
    d.payer.assert_nothing_pending();
}

#[test]
fn malformed_lookups_are_refused_synchronously_and_not_forwarded() {
    let d = Discovery::new();
    let path = format!("MSISDN/{ALICE}");
    d.register(&d.payee, &path);

    let response = lookup(&d.hub, PAYER, "FOO/1");
    assert_error_response(&response, 400, "3101");

    let headers = without_header(
        resource_headers("parties", "1.0", PAYER, None, true),
        "Date",
    );
    let response = d.hub.api("GET", &format!("/parties/{path}"), &headers, b"");
    assert_error_response(&response, 400, "3102");
    assert_eq!(
        response.json()["errorInformation"]["errorDescription"],
        "Missing mandatory element - Missing required date header",
        "Mojaloop's words for the missing header: {response:?}"
    );

    d.payee.assert_quiet(QUIET_WAIT);
    d.payer.assert_nothing_pending();
}

// ---------------------------------------------------------------- registry

#[test]
fn a_batch_registration_answers_each_party_and_registers_the_valid_ones() {
    let d = Discovery::new();
    let request_id = new_id();
    let body = json!({
        "requestId": request_id,
        "partyList": [
            {"partyIdType": "MSISDN", "partyIdentifier": "255700000002", "fspId": PAYEE},
            // Not the sender's to register.
            {"partyIdType": "EMAIL", "partyIdentifier": "bob@example.com", "fspId": PAYER}
        ],
        "currency": "USD"
    });
    // As the SDK sends it: no FSPIOP-Destination.
    let response = d.hub.api(
        "POST",
        "/participants",
        &resource_headers("participants", "1.0", PAYEE, None, true),
        &serde_json::to_vec(&body).unwrap(),
    );
    assert_eq!(response.status, 202, "{response:?}");

    let callback = d
        .payee
        .expect("PUT", &format!("/participants/{request_id}"));
    assert_from_hub(&callback, "participants", PAYEE);
    let answer = callback.json();
    let list = answer["partyList"]
        .as_array()
        .unwrap_or_else(|| panic!("no partyList: {callback:?}"));
    assert_eq!(list.len(), 2, "{callback:?}");
    assert_eq!(list[0]["partyId"]["partyIdType"], json!("MSISDN"));
    assert_eq!(list[0]["partyId"]["partyIdentifier"], json!("255700000002"));
    assert!(
        list[0].get("errorInformation").is_none(),
        "the first party is registered: {callback:?}"
    );
    assert_eq!(list[1]["partyId"]["partyIdType"], json!("EMAIL"));
    assert_eq!(
        list[1]["partyId"]["partyIdentifier"],
        json!("bob@example.com")
    );
    let error = &list[1]["errorInformation"];
    assert!(
        error["errorCode"]
            .as_str()
            .is_some_and(|c| c.len() == 4 && c.starts_with('3')),
        "the second party is refused with a client error: {callback:?}"
    );
    assert!(
        error["errorDescription"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "{callback:?}"
    );
    d.payer.assert_nothing_pending();

    // The first is now found at the payee; the second nowhere.
    lookup_accepted(&d.hub, PAYER, "MSISDN/255700000002");
    let forwarded = d.payee.expect("GET", "/parties/MSISDN/255700000002");
    assert_eq!(forwarded.header("fspiop-destination"), Some(PAYEE));
    lookup_accepted(&d.hub, PAYEE, "EMAIL/bob@example.com");
    expect_hub_error(
        &d.payee,
        "/parties/EMAIL/bob@example.com/error",
        "parties",
        "3204",
    );
    d.payer.assert_quiet(QUIET_WAIT);
}

#[test]
fn the_registry_keeps_each_party_to_its_own_fsp() {
    let d = Discovery::new();
    let path = "MSISDN/255700000006";
    d.register(&d.payee, path);

    // Another FSP claiming the same party: 3003 Add Party information error.
    let response = register(&d.hub, PAYER, path, PAYER);
    assert_eq!(response.status, 202, "{response:?}");
    expect_hub_error(
        &d.payer,
        &format!("/participants/{path}/error"),
        "participants",
        "3003",
    );
    d.payee.assert_nothing_pending();

    // Registering a party for someone else (fspId is not FSPIOP-Source).
    let other = "MSISDN/255700000007";
    let response = register(&d.hub, PAYER, other, PAYEE);
    assert_eq!(response.status, 202, "{response:?}");
    let received = d
        .payer
        .expect("PUT", &format!("/participants/{other}/error"));
    assert_hub_error(&received, "participants", PAYER, None);
    lookup_accepted(&d.hub, PAYER, other);
    expect_hub_error(
        &d.payer,
        &format!("/parties/{other}/error"),
        "parties",
        "3204",
    );

    // Only the holder may delete.
    let delete_headers = |source: &str| resource_headers("participants", "1.0", source, None, true);
    let response = d.hub.api(
        "DELETE",
        &format!("/participants/{path}"),
        &delete_headers(PAYER),
        b"",
    );
    assert_eq!(response.status, 202, "{response:?}");
    let received = d
        .payer
        .expect("PUT", &format!("/participants/{path}/error"));
    assert_hub_error(&received, "participants", PAYER, None);
    // Still held by the payee.
    lookup_accepted(&d.hub, PAYER, path);
    d.payee.expect("GET", &format!("/parties/{path}"));

    let response = d.hub.api(
        "DELETE",
        &format!("/participants/{path}"),
        &delete_headers(PAYEE),
        b"",
    );
    assert_eq!(response.status, 202, "{response:?}");
    let received = d.payee.expect("PUT", &format!("/participants/{path}"));
    assert_from_hub(&received, "participants", PAYEE);
    lookup_accepted(&d.hub, PAYER, path);
    expect_hub_error(
        &d.payer,
        &format!("/parties/{path}/error"),
        "parties",
        "3204",
    );
    d.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn the_registry_survives_a_restart() {
    let mut d = Discovery::new();
    let path = "MSISDN/255700000007";
    d.register(&d.payee, path);

    let status = d.hub.terminate();
    assert!(
        status.success(),
        "SIGTERM must stop the hub with status 0, got {status}:\n{}",
        d.hub.log()
    );
    d.hub = Hub::start(&d.dir.path().join("data"));

    lookup_accepted(&d.hub, PAYER, path);
    let forwarded = d.payee.expect("GET", &format!("/parties/{path}"));
    assert_eq!(forwarded.header("fspiop-destination"), Some(PAYEE));
    assert_eq!(forwarded.header("fspiop-source"), Some(PAYER));
    d.payer.assert_quiet(QUIET_WAIT);
}

// ------------------------------------------------------------------ quotes

#[test]
fn quotes_are_routed_as_the_senders_bytes() {
    let d = Discovery::new();
    let quote_id = new_id();
    let body = quote_body(&quote_id, true);
    let headers = resource_headers("quotes", "1.0", PAYER, Some(PAYEE), true);
    let response = d.hub.api("POST", "/quotes", &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    let forwarded = d.payee.expect("POST", "/quotes");
    assert_eq!(
        forwarded.body,
        body.as_bytes(),
        "the payee must get the payer's exact bytes"
    );
    assert_forwarded(&forwarded, &headers, PAYEE);
    assert_eq!(
        forwarded.header("content-type"),
        header_value(&headers, "Content-Type")
    );

    let answer = quote_put_body();
    let put_headers = resource_headers("quotes", "1.0", PAYEE, Some(PAYER), false);
    let response = d.hub.api(
        "PUT",
        &format!("/quotes/{quote_id}"),
        &put_headers,
        answer.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");
    let received = d.payer.expect("PUT", &format!("/quotes/{quote_id}"));
    assert_eq!(received.body, answer.as_bytes(), "{received:?}");
    assert_forwarded(&received, &put_headers, PAYER);

    let error = error_body("5100", "Payee rejected the quote");
    let response = d.hub.api(
        "PUT",
        &format!("/quotes/{quote_id}/error"),
        &put_headers,
        error.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");
    let received = d.payer.expect("PUT", &format!("/quotes/{quote_id}/error"));
    assert_eq!(received.body, error.as_bytes(), "{received:?}");
    assert_forwarded(&received, &put_headers, PAYER);

    let get_headers = resource_headers("quotes", "1.0", PAYER, Some(PAYEE), true);
    let response = d
        .hub
        .api("GET", &format!("/quotes/{quote_id}"), &get_headers, b"");
    assert_eq!(response.status, 202, "{response:?}");
    let received = d.payee.expect("GET", &format!("/quotes/{quote_id}"));
    assert_forwarded(&received, &get_headers, PAYEE);

    d.payer.assert_quiet(QUIET_WAIT);
    d.payee.assert_nothing_pending();
}

#[test]
fn quote_errors() {
    let d = Discovery::new();

    // An unknown destination: 3201 to the sender, from the hub.
    let quote_id = new_id();
    let response = d.hub.api(
        "POST",
        "/quotes",
        &resource_headers("quotes", "1.0", PAYER, Some("nosuchfsp"), true),
        quote_body(&quote_id, true).as_bytes(),
    );
    assert_eq!(response.status, 202, "{response:?}");
    expect_destination_fsp_error(&d.payer, &format!("/quotes/{quote_id}/error"), "quotes");

    // No FSPIOP-Destination: quotes are not routed without it, as
    // quoting-service's schema requires it (the body's payee fspId is not
    // read) and the golden path checks: 3102 naming the header.
    let response = d.hub.api(
        "POST",
        "/quotes",
        &resource_headers("quotes", "1.0", PAYER, None, true),
        quote_body(&new_id(), true).as_bytes(),
    );
    assert_error_response(&response, 400, "3102");
    assert!(
        response.json()["errorInformation"]["errorDescription"]
            .as_str()
            .is_some_and(|d| d.contains("fspiop-destination")),
        "{response:?}"
    );

    // A body without its amount.
    let response = d.hub.api(
        "POST",
        "/quotes",
        &resource_headers("quotes", "1.0", PAYER, Some(PAYEE), true),
        quote_body(&new_id(), false).as_bytes(),
    );
    assert_eq!(response.status, 400, "{response:?}");
    let info = &response.json()["errorInformation"];
    assert!(
        matches!(info["errorCode"].as_str(), Some("3102" | "3100")),
        "{response:?}"
    );
    assert!(
        info["errorDescription"]
            .as_str()
            .is_some_and(|d| d.contains("amount")),
        "the description should name the field: {response:?}"
    );

    d.payee.assert_quiet(QUIET_WAIT);
    d.payer.assert_nothing_pending();
}

// --------------------------------------------------------------- isolation

#[test]
fn a_slow_holder_does_not_delay_lookups_at_others() {
    let d = Discovery::new();
    // slowfsp's registry callbacks reach a stub, but its PARTIES_GET
    // endpoints accept connections and never answer.
    let slow = Stub::start("slowfsp");
    let hole = Blackhole::start();
    let registry_only: Vec<(&str, &str)> = DISCOVERY_ENDPOINTS
        .iter()
        .copied()
        .filter(|(kind, _)| !kind.starts_with("FSPIOP_CALLBACK_URL_PARTIES_GET"))
        .collect();
    onboard(&d.hub, "slowfsp", &slow.base_url(), &registry_only);
    d.hub.add_endpoint(
        "slowfsp",
        "FSPIOP_CALLBACK_URL_PARTIES_GET",
        &format!(
            "{}/parties/{{{{partyIdType}}}}/{{{{partyIdentifier}}}}",
            hole.base_url()
        ),
    );

    let slow_party = |i: usize| format!("2557001{i:05}");
    let fast_party = |i: usize| format!("2557002{i:05}");
    register_batch(&d.hub, &slow, &(0..20).map(slow_party).collect::<Vec<_>>());
    register_batch(
        &d.hub,
        &d.payee,
        &(0..20).map(fast_party).collect::<Vec<_>>(),
    );

    let mut pending = HashSet::new();
    for i in 0..20 {
        lookup_accepted(&d.hub, PAYER, &format!("MSISDN/{}", slow_party(i)));
        lookup_accepted(&d.hub, PAYER, &format!("MSISDN/{}", fast_party(i)));
        pending.insert(format!("/parties/MSISDN/{}", fast_party(i)));
    }
    let last_ack = Instant::now();

    while !pending.is_empty() {
        let left = Duration::from_secs(2).saturating_sub(last_ack.elapsed());
        let received = d.payee.next_within(left).unwrap_or_else(|| {
            panic!(
                "{} of 20 lookups forwarded to payeefsp still missing 2 s after the last \
                 request (the slow FSP has {} connections hanging)",
                pending.len(),
                hole.accepted()
            )
        });
        assert_eq!(received.method, "GET", "{received:?}");
        assert!(pending.remove(&received.path), "unexpected {received:?}");
    }

    // The slow FSP really was asked.
    let deadline = Instant::now() + CALLBACK_WAIT;
    while hole.accepted() == 0 {
        assert!(
            Instant::now() < deadline,
            "no lookup ever reached the slow FSP's endpoint"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    slow.assert_nothing_pending();
}

/// `--quotes-persistent`: the quoting service's duplicate rules, durable.
#[test]
fn persistent_quotes_apply_the_duplicate_rules_across_a_restart() {
    let mut d = Discovery::with_flags(&["--quotes-persistent"]);
    let quote_id = new_id();
    let body = quote_body(&quote_id, true);
    let headers = resource_headers("quotes", "1.0", PAYER, Some(PAYEE), true);
    assert_eq!(
        d.hub
            .api("POST", "/quotes", &headers, body.as_bytes())
            .status,
        202
    );
    d.payee.expect("POST", "/quotes");

    // The same request again while unanswered: nothing is forwarded.
    assert_eq!(
        d.hub
            .api("POST", "/quotes", &headers, body.as_bytes())
            .status,
        202
    );
    // A modified request with the same id: 3106 to the payer.
    let modified = body.replace("\"100\"", "\"101\"");
    assert_ne!(modified, body);
    assert_eq!(
        d.hub
            .api("POST", "/quotes", &headers, modified.as_bytes())
            .status,
        202
    );
    let error = d.payer.expect("PUT", &format!("/quotes/{quote_id}/error"));
    assert_eq!(
        error.json()["errorInformation"]["errorCode"],
        "3106",
        "{error:?}"
    );
    d.payee.assert_quiet(QUIET_WAIT);

    // Only the payee may answer: anyone else is refused at once, and the
    // payer hears nothing.
    let answer = quote_put_body();
    let wrong = resource_headers("quotes", "1.0", PAYER, Some(PAYEE), false);
    let refused = d.hub.api(
        "PUT",
        &format!("/quotes/{quote_id}"),
        &wrong,
        answer.as_bytes(),
    );
    assert_error_response(&refused, 400, "3100");
    d.payer.assert_quiet(QUIET_WAIT);
    d.payee.assert_quiet(QUIET_WAIT);

    let put_headers = resource_headers("quotes", "1.0", PAYEE, Some(PAYER), false);
    assert_eq!(
        d.hub
            .api(
                "PUT",
                &format!("/quotes/{quote_id}"),
                &put_headers,
                answer.as_bytes()
            )
            .status,
        200
    );
    let received = d.payer.expect("PUT", &format!("/quotes/{quote_id}"));
    assert_eq!(received.body, answer.as_bytes());

    // After a restart, a resent request gets the known answer from the hub.
    d.hub.terminate();
    d.hub = Hub::start_with(&d.dir.path().join("data"), &["--quotes-persistent"]);
    assert_eq!(
        d.hub
            .api("POST", "/quotes", &headers, body.as_bytes())
            .status,
        202
    );
    let resent = d.payer.expect("PUT", &format!("/quotes/{quote_id}"));
    assert_eq!(resent.body, answer.as_bytes(), "the known answer is resent");
    assert_eq!(resent.header("fspiop-source"), Some("Hub"));
    d.payee.assert_quiet(QUIET_WAIT);

    // The payee resending the payer's request (it saw its bytes) is not
    // the payer: refused (3100), never told the answer.
    let as_payee = resource_headers("quotes", "1.0", PAYEE, Some(PAYER), true);
    assert_eq!(
        d.hub
            .api("POST", "/quotes", &as_payee, body.as_bytes())
            .status,
        202
    );
    let error = d.payee.expect("PUT", &format!("/quotes/{quote_id}/error"));
    assert_eq!(
        error.json()["errorInformation"]["errorCode"],
        "3100",
        "{error:?}"
    );
    d.payer.assert_quiet(QUIET_WAIT);

    // An answer for a quote the hub never saw is refused at once.
    let unknown = new_id();
    let refused = d.hub.api(
        "PUT",
        &format!("/quotes/{unknown}"),
        &put_headers,
        answer.as_bytes(),
    );
    assert_error_response(&refused, 400, "3100");
    d.payer.assert_quiet(QUIET_WAIT);
    d.payee.assert_quiet(QUIET_WAIT);
}

/// `--quotes-persistent` with a short retention horizon: a recorded quote
/// leaves the ledger's memory (so quotes never fill it), and is then
/// answered from the store: a resend gets the known answer, a modified one
/// 3106.
#[test]
fn persistent_quotes_past_the_horizon_are_answered_from_the_store() {
    let d = Discovery::with_flags(&["--quotes-persistent", "--transfer-retention", "1s"]);
    let quote_id = new_id();
    let body = quote_body(&quote_id, true);
    let headers = resource_headers("quotes", "1.0", PAYER, Some(PAYEE), true);
    let post = |body: &str| {
        d.hub
            .api("POST", "/quotes", &headers, body.as_bytes())
            .status
    };
    assert_eq!(post(&body), 202);
    d.payee.expect("POST", "/quotes");
    let answer = quote_put_body();
    let put_headers = resource_headers("quotes", "1.0", PAYEE, Some(PAYER), false);
    let path = format!("/quotes/{quote_id}");
    assert_eq!(
        d.hub
            .api("PUT", &path, &put_headers, answer.as_bytes())
            .status,
        200
    );
    d.payer.expect("PUT", &path);

    // It leaves memory a second later, with no traffic to prompt it.
    let in_memory = || {
        let text = d.hub.admin_expect("GET", "/metrics", None, 200).text();
        let line = text
            .lines()
            .find(|line| line.starts_with("kasi_ledger_quotes_in_memory "))
            .unwrap_or_else(|| panic!("no quotes gauge in /metrics:\n{text}"))
            .to_string();
        line.rsplit(' ').next().unwrap().parse::<f64>().unwrap()
    };
    assert_eq!(in_memory(), 1.0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while in_memory() > 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the quote stayed in memory"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // A resend: the known answer, from the hub, nothing forwarded.
    assert_eq!(post(&body), 202);
    let resent = d.payer.expect("PUT", &path);
    assert_eq!(resent.body, answer.as_bytes(), "the known answer is resent");
    assert_eq!(resent.header("fspiop-source"), Some("Hub"));
    // Modified: 3106 to the payer.
    assert_eq!(post(&body.replace("\"100\"", "\"101\"")), 202);
    let error = d.payer.expect("PUT", &format!("{path}/error"));
    assert_eq!(
        error.json()["errorInformation"]["errorCode"],
        "3106",
        "{error:?}"
    );
    d.payee.assert_quiet(QUIET_WAIT);

    // New quotes still go through.
    let next = new_id();
    assert_eq!(post(&quote_body(&next, true)), 202);
    d.payee.expect("POST", "/quotes");
}
