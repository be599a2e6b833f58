//! End-to-end: who a message is from. The hub's name is the hub's alone
//! (`FSPIOP-Source: Hub` refused on every route, a client certificate
//! naming the hub refused as a DFSP identity), the hub signs only the
//! messages it builds (a forwarded DFSP message never gains its
//! signature), and a prepare's FSPIOP-Destination must be its payeeFsp.
//!
//! Each attack asserts its synchronous refusal, that nothing reached the
//! DFSPs (or moved a position), that a legitimate message in the same test
//! still arrives, and that the refusal's counter moved. Signatures are made
//! and checked with the `openssl` CLI, never with kasi's own JWS code.

mod support;

use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use support::*;

/// The routed services' bare base-URL endpoints, beside the discovery ones.
const ROUTED_ENDPOINTS: &[(&str, &str)] = &[
    ("FSPIOP_CALLBACK_URL_TRX_REQ_SERVICE", ""),
    ("FSPIOP_CALLBACK_URL_AUTHORIZATIONS", ""),
    ("FSPIOP_CALLBACK_URL_BULK_QUOTES", ""),
    ("FSPIOP_CALLBACK_URL_FX_QUOTES", ""),
];

fn all_endpoints() -> Vec<(&'static str, &'static str)> {
    DISCOVERY_ENDPOINTS
        .iter()
        .chain(ROUTED_ENDPOINTS)
        .copied()
        .collect()
}

// ------------------------------------------------------------------ metrics

/// 400 with 3100, saying the hub's name is reserved.
fn assert_hub_name_refused(response: &Response, what: &str) {
    assert_eq!(response.status, 400, "{what}: {response:?}");
    let body = response.json();
    assert_eq!(
        body["errorInformation"]["errorCode"],
        json!("3100"),
        "{what}: {response:?}"
    );
    let description = body["errorInformation"]["errorDescription"]
        .as_str()
        .unwrap_or_default();
    assert!(
        description.contains("reserved") && description.contains(HUB_NAME),
        "{what}: {description}"
    );
}

// ------------------------------------------------------------------- bodies

fn party_body(msisdn: &str, fsp: &str) -> String {
    format!(
        r#"{{"party":{{"partyIdInfo":{},"name":"Alice","personalInfo":{{"complexName":{{"firstName":"Alice"}}}}}}}}"#,
        party_id_info(fsp, msisdn)
    )
}

fn quote_body(quote_id: &str) -> String {
    format!(
        r#"{{"quoteId":"{quote_id}","transactionId":"{}","payee":{{"partyIdInfo":{}}},"payer":{{"partyIdInfo":{}}},"amountType":"SEND","amount":{{"currency":"USD","amount":"100"}},"transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}"#,
        new_id(),
        party_id_info(PAYEE, "255700000001"),
        party_id_info(PAYER, "255700000002"),
    )
}

fn quote_put_body() -> String {
    format!(
        r#"{{"transferAmount":{{"currency":"USD","amount":"100"}},"expiration":"{}","ilpPacket":"{ILP_PACKET}","condition":"{CONDITION}"}}"#,
        fspiop_time(far_future())
    )
}

/// A request: method, path, headers, body.
type Attempt = (&'static str, String, Vec<(String, String)>, String);

/// One request per FSPIOP route family, each claiming to come from the
/// hub and otherwise well formed and routable (to the payer or the payee,
/// who would receive it were it let through): method, path, headers, body.
fn as_hub_requests() -> Vec<Attempt> {
    let transfer = new_id();
    let quote = new_id();
    let msisdn = "255700000001";
    vec![
        (
            "POST",
            "/transfers".to_string(),
            fspiop_headers(HUB_NAME, PAYEE, true),
            prepare_body(&transfer, HUB_NAME, PAYEE, "10", far_future()),
        ),
        (
            "PUT",
            format!("/transfers/{transfer}"),
            fspiop_headers(HUB_NAME, PAYER, false),
            fulfil_body(FULFILMENT, "COMMITTED"),
        ),
        (
            "PUT",
            format!("/transfers/{transfer}/error"),
            fspiop_headers(HUB_NAME, PAYER, false),
            error_body("5100", "refused"),
        ),
        (
            "GET",
            format!("/transfers/{transfer}"),
            fspiop_headers(HUB_NAME, PAYER, true),
            String::new(),
        ),
        (
            "GET",
            format!("/parties/MSISDN/{msisdn}"),
            resource_headers("parties", "1.0", HUB_NAME, Some(PAYEE), true),
            String::new(),
        ),
        (
            "PUT",
            format!("/parties/MSISDN/{msisdn}"),
            resource_headers("parties", "1.0", HUB_NAME, Some(PAYER), false),
            party_body(msisdn, PAYEE),
        ),
        (
            "POST",
            format!("/participants/MSISDN/{msisdn}"),
            resource_headers("participants", "1.0", HUB_NAME, None, true),
            format!(r#"{{"fspId":"{PAYEE}","currency":"USD"}}"#),
        ),
        (
            "POST",
            "/participants".to_string(),
            resource_headers("participants", "1.0", HUB_NAME, None, true),
            format!(
                r#"{{"requestId":"{}","partyList":[{}],"currency":"USD"}}"#,
                new_uuid(),
                party_id_info(PAYEE, msisdn)
            ),
        ),
        (
            "POST",
            "/quotes".to_string(),
            resource_headers("quotes", "1.0", HUB_NAME, Some(PAYEE), true),
            quote_body(&quote),
        ),
        (
            "PUT",
            format!("/quotes/{quote}"),
            resource_headers("quotes", "1.0", HUB_NAME, Some(PAYER), false),
            quote_put_body(),
        ),
        (
            "POST",
            "/transactionRequests".to_string(),
            resource_headers("transactionRequests", "1.1", HUB_NAME, Some(PAYER), true),
            transaction_request_body(&new_id()),
        ),
        (
            "GET",
            format!(
                "/authorizations/{}?authenticationType=OTP&retriesLeft=2&amount=10&currency=USD",
                new_id()
            ),
            resource_headers("authorizations", "1.0", HUB_NAME, Some(PAYER), true),
            String::new(),
        ),
        (
            "POST",
            "/bulkQuotes".to_string(),
            resource_headers("bulkQuotes", "1.1", HUB_NAME, Some(PAYEE), true),
            bulk_quote_body(&new_id()),
        ),
        (
            "POST",
            "/fxQuotes".to_string(),
            resource_headers("fxQuotes", "2.0", HUB_NAME, Some(PAYEE), true),
            format!(
                r#"{{"conversionRequestId":"{}","conversionTerms":{{"conversionId":"{}","initiatingFsp":"{HUB_NAME}","counterPartyFsp":"{PAYEE}","amountType":"SEND","sourceAmount":{{"currency":"USD","amount":"10"}},"targetAmount":{{"currency":"EUR"}},"expiration":"{}"}}}}"#,
                new_id(),
                new_id(),
                fspiop_time(far_future())
            ),
        ),
    ]
}

// ------------------------------------------------------------ the hub's name

#[test]
fn hub_as_fspiop_source_is_refused_on_every_route_without_tls() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    let (payer, payee) = hub.payer_and_payee(&all_endpoints());
    hub.admin_expect(
        "POST",
        &format!(
            "/participants/{PAYER}/accounts/{}",
            hub.account_id(PAYER, "SETTLEMENT")
        ),
        Some(json!({
            "transferId": new_id(), "externalReference": "ref", "action": "recordFundsIn",
            "reason": "deposit", "amount": {"amount": "1000", "currency": "USD"}
        })),
        202,
    );
    let position = hub.position(PAYER);
    let before = hub.refusals("hub_source", None);

    let attempts = as_hub_requests();
    for (method, path, headers, body) in &attempts {
        let response = hub.api(method, path, headers, body.as_bytes());
        assert_hub_name_refused(&response, &format!("{method} {path}"));
    }
    // Padded with spaces, the header is still the hub's name.
    let padded = with_header(fspiop_headers(PAYER, PAYEE, true), "FSPIOP-Source", " Hub ");
    let response = hub.api("GET", &format!("/transfers/{}", new_id()), &padded, b"");
    assert_hub_name_refused(&response, "GET /transfers with ' Hub '");

    hub.await_refusals("hub_source", None, before + attempts.len() as u64 + 1);
    payer.assert_quiet(QUIET_WAIT);
    payee.assert_quiet(QUIET_WAIT);
    assert_eq!(hub.position(PAYER), position);

    // The payer, as itself, is served as ever.
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", far_future());
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    let forwarded = payee.expect("POST", "/transfers");
    assert_eq!(forwarded.body, body.as_bytes());
    assert_eq!(hub.position(PAYER), position + 10.0);
}

#[test]
fn a_client_certificate_naming_the_hub_is_refused_as_an_identity() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("kasi test scheme CA");
    let ca_path = dir.path().join("scheme-ca.pem");
    pki.write_ca(&ca_path);
    let server = pki.issue("kasi hub", &["localhost"], true);
    let (cert, key) = server.write(dir.path(), "hub");
    let mut hub = Hub::start_with(
        &dir.path().join("data"),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--tls-client-ca",
            ca_path.to_str().unwrap(),
        ],
    );
    hub.tls = Some(pki.client(None));
    hub.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    for stub in [&payer, &payee] {
        hub.onboard(&stub.name, &stub.base_url(), 10_000, 5_000);
        for (kind, path) in all_endpoints() {
            hub.add_endpoint(&stub.name, kind, &format!("{}{path}", stub.base_url()));
        }
    }
    let as_payer = pki.client(Some(&pki.issue(PAYER, &[], false)));
    // Issued (by mistake, or to the wrong hands) with the hub's name as its
    // CN, and a DFSP's as a DNS name.
    let named_hub = pki.issue(HUB_NAME, &[PAYER], false);
    let as_named_hub = pki.client(Some(&named_hub));
    // Only the hub's name, in a DNS SAN.
    let as_hub_san = pki.client(Some(&pki.issue("Some Bank", &[HUB_NAME], false)));
    let position = hub.position(PAYER);
    let before = hub.refusals("hub_source", None);

    let send =
        |client: &TlsClient, method: &str, path: &str, headers: &[(String, String)], body: &str| {
            https(client, hub.api, method, path, headers, body.as_bytes())
                .unwrap_or_else(|error| panic!("{method} {path}: {error}"))
        };
    let mut refused = 0;
    // The certificate named after the hub, acting as the DFSP its DNS name
    // gives: refused, although that name would match.
    let body = prepare_body(&new_id(), PAYER, PAYEE, "10", far_future());
    let response = send(
        &as_named_hub,
        "POST",
        "/transfers",
        &fspiop_headers(PAYER, PAYEE, true),
        &body,
    );
    assert_hub_name_refused(&response, "prepare with a certificate named Hub");
    refused += 1;
    // ... and on every other route family, as the hub or as the payer.
    for (method, path, headers, body) in as_hub_requests() {
        let response = send(&as_named_hub, method, &path, &headers, &body);
        assert_hub_name_refused(
            &response,
            &format!("{method} {path} (certificate named Hub)"),
        );
        let as_itself = with_header(headers, "FSPIOP-Source", PAYER);
        let response = send(&as_named_hub, method, &path, &as_itself, &body);
        assert_hub_name_refused(
            &response,
            &format!("{method} {path} as {PAYER} (certificate named Hub)"),
        );
        refused += 2;
    }
    let response = send(
        &as_hub_san,
        "GET",
        &format!("/transfers/{}", new_id()),
        &fspiop_headers(HUB_NAME, PAYER, true),
        "",
    );
    assert_hub_name_refused(&response, "a DNS name Hub");
    refused += 1;
    // The payer's own certificate cannot speak as the hub either.
    let body = prepare_body(&new_id(), HUB_NAME, PAYEE, "10", far_future());
    let response = send(
        &as_payer,
        "POST",
        "/transfers",
        &fspiop_headers(HUB_NAME, PAYEE, true),
        &body,
    );
    assert_hub_name_refused(&response, "the payer as Hub");
    refused += 1;
    // No pin lends the hub's name to a certificate.
    let pin = hub.admin(
        "POST",
        &format!("/participants/{HUB_NAME}/certificates"),
        Some(&json!({"certificate": named_hub.cert_pem})),
    );
    assert_error_response(&pin, 400, "3100");

    hub.await_refusals("hub_source", None, before + refused);
    payer.assert_quiet(QUIET_WAIT);
    payee.assert_quiet(QUIET_WAIT);
    assert_eq!(hub.position(PAYER), position);

    // The payer, with its own certificate and as itself, is served.
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", far_future());
    let response = send(
        &as_payer,
        "POST",
        "/transfers",
        &fspiop_headers(PAYER, PAYEE, true),
        &body,
    );
    assert_eq!(response.status, 202, "{response:?}");
    assert_eq!(payee.expect("POST", "/transfers").body, body.as_bytes());
}

// ------------------------------------------------------------ destination

#[test]
fn a_prepare_whose_destination_is_not_its_payee_is_refused_and_reserves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    let other = Stub::start("otherfsp");
    for stub in [&payer, &payee, &other] {
        hub.onboard(&stub.name, &stub.base_url(), 10_000, 5_000);
    }
    let position = hub.position(PAYER);
    let before = hub.refusals("not_party", None);

    // The header sends it to one DFSP, the body names another.
    let body = prepare_body(&new_id(), PAYER, PAYEE, "10", far_future());
    let response = hub.prepare(PAYER, "otherfsp", &body);
    assert_error_response(&response, 400, "3100");
    assert!(
        response
            .text()
            .contains("FSPIOP-Destination 'otherfsp' does not match payeeFsp"),
        "{response:?}"
    );
    // The existing header/body check (FSPIOP-Source vs payerFsp) is
    // counted the same way.
    let body = prepare_body(&new_id(), "otherfsp", PAYEE, "10", far_future());
    let response = hub.prepare(PAYER, PAYEE, &body);
    assert_error_response(&response, 400, "3100");
    hub.await_refusals("not_party", None, before + 2);
    assert_eq!(hub.position(PAYER), position);
    assert_eq!(hub.position("otherfsp"), 0.0);
    for stub in [&payer, &payee, &other] {
        stub.assert_quiet(QUIET_WAIT);
    }

    // The same prepare, header and body agreeing, goes through.
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", far_future());
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    assert_eq!(payee.expect("POST", "/transfers").body, body.as_bytes());
    assert_eq!(hub.position(PAYER), position + 10.0);

    // A third DFSP reaching for that transfer (fulfil, abort, read) is
    // told no, counted, and the transfer is untouched.
    let path = format!("/transfers/{id}");
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    let response = hub.api(
        "PUT",
        &path,
        &fspiop_headers("otherfsp", PAYER, false),
        fulfil.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");
    other.expect_error(&id, "3100");
    let abort = error_body("5100", "no");
    let response = hub.api(
        "PUT",
        &format!("{path}/error"),
        &fspiop_headers("otherfsp", PAYER, false),
        abort.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");
    other.expect_error(&id, "3100");
    assert_eq!(hub.get_transfer(&id, "otherfsp", PAYER).status, 202);
    other.expect_error(&id, "3000");
    hub.await_refusals("not_party", None, before + 5);
    payer.assert_quiet(QUIET_WAIT);
    assert_eq!(hub.position(PAYER), position + 10.0);
}

// ---------------------------------------------------------------- signatures

/// `headers` signed (RS256, by openssl) with `key` over `payload`.
fn signed(
    headers: Vec<(String, String)>,
    method: &str,
    path: &str,
    key: &Path,
    payload: &[u8],
) -> Vec<(String, String)> {
    let mut protected = serde_json::Map::new();
    protected.insert("alg".into(), json!("RS256"));
    protected.insert("FSPIOP-URI".into(), json!(path));
    protected.insert("FSPIOP-HTTP-Method".into(), json!(method));
    for name in ["FSPIOP-Source", "FSPIOP-Destination", "Date"] {
        if let Some(value) = header_value(&headers, name) {
            protected.insert(name.into(), json!(value));
        }
    }
    let protected = b64url(Value::Object(protected).to_string().as_bytes());
    let input = format!("{protected}.{}", b64url(payload));
    let signature = run_program(
        "openssl",
        &["dgst", "-sha256", "-sign", key.to_str().unwrap()],
        input.as_bytes(),
    );
    let value = json!({"signature": b64url(&signature), "protectedHeader": protected}).to_string();
    let headers = with_header(headers, "FSPIOP-URI", path);
    let headers = with_header(headers, "FSPIOP-HTTP-Method", method);
    with_header(headers, "FSPIOP-Signature", &value)
}

/// The hub's signature on `received`, checked with openssl.
fn assert_hub_signed(received: &Received, hub_public: &Path) {
    let value: Value = serde_json::from_str(
        received
            .header("fspiop-signature")
            .unwrap_or_else(|| panic!("no FSPIOP-Signature on {received:?}")),
    )
    .unwrap();
    let protected_b64 = value["protectedHeader"].as_str().unwrap();
    let signature = URL_SAFE_NO_PAD
        .decode(value["signature"].as_str().unwrap())
        .unwrap();
    let input = format!("{protected_b64}.{}", b64url(&received.body));
    assert!(
        openssl_verifies(hub_public, input.as_bytes(), &signature),
        "openssl rejects the hub's signature on {received:?}"
    );
    let protected: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(protected_b64).unwrap()).unwrap();
    assert_eq!(protected["FSPIOP-Source"], json!(HUB_NAME));
}

/// No signature the hub made: none at all, or exactly `expected`'s.
fn assert_not_hub_signed(received: &Received, expected: Option<&str>, hub_public: &Path) {
    assert_eq!(
        received.header("fspiop-signature"),
        expected,
        "the forwarded message's signature: {received:?}"
    );
    if let Some(value) = received.header("fspiop-signature") {
        let value: Value = serde_json::from_str(value).unwrap();
        let input = format!(
            "{}.{}",
            value["protectedHeader"].as_str().unwrap(),
            b64url(&received.body)
        );
        let signature = URL_SAFE_NO_PAD
            .decode(value["signature"].as_str().unwrap())
            .unwrap();
        assert!(!openssl_verifies(hub_public, input.as_bytes(), &signature));
    }
}

#[test]
fn the_hub_never_signs_a_forwarded_message_and_always_signs_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (hub_key, hub_public) = rsa_key(dir.path(), "hub");
    let (payee_key, payee_public) = rsa_key(dir.path(), "payee");
    let hub = Hub::start_with(
        &dir.path().join("data"),
        &["--jws-signing-key", hub_key.to_str().unwrap()],
    );
    let (payer, payee) = hub.payer_and_payee(DISCOVERY_ENDPOINTS);
    // A DFSP without a quotes endpoint, for the hub's own error callback.
    hub.onboard("bare", &payer.base_url(), 10_000, 0);
    let before = hub.refusals("hub_source", None);

    // --- quotes: the payer asks, the payee answers (a) unsigned, (b)
    // signed by itself; neither gains the hub's signature.
    for signed_by_payee in [false, true] {
        let quote = new_id();
        let response = hub.api(
            "POST",
            "/quotes",
            &resource_headers("quotes", "1.0", PAYER, Some(PAYEE), true),
            quote_body(&quote).as_bytes(),
        );
        assert_eq!(response.status, 202, "{response:?}");
        payee.expect("POST", "/quotes");
        let path = format!("/quotes/{quote}");
        let answer = quote_put_body();
        let headers = resource_headers("quotes", "1.0", PAYEE, Some(PAYER), false);
        let headers = match signed_by_payee {
            true => signed(headers, "PUT", &path, &payee_key, answer.as_bytes()),
            false => headers,
        };
        // First the trick: the same answer claiming to come from the hub.
        let posing = with_header(headers.clone(), "FSPIOP-Source", HUB_NAME);
        assert_hub_name_refused(
            &hub.api("PUT", &path, &posing, answer.as_bytes()),
            "a quote answer as Hub",
        );
        let response = hub.api("PUT", &path, &headers, answer.as_bytes());
        assert_eq!(response.status, 200, "{response:?}");
        let delivered = payer.expect("PUT", &path);
        assert_eq!(delivered.body, answer.as_bytes());
        assert_eq!(delivered.header("fspiop-source"), Some(PAYEE));
        let own = header_value(&headers, "FSPIOP-Signature");
        assert_not_hub_signed(&delivered, own, &hub_public);
        if let Some(own) = own {
            // The payee's signature, byte for byte, still verifies.
            let value: Value = serde_json::from_str(own).unwrap();
            let input = format!(
                "{}.{}",
                value["protectedHeader"].as_str().unwrap(),
                b64url(&delivered.body)
            );
            let signature = URL_SAFE_NO_PAD
                .decode(value["signature"].as_str().unwrap())
                .unwrap();
            assert!(openssl_verifies(
                &payee_public,
                input.as_bytes(),
                &signature
            ));
        }
    }

    // --- parties: a lookup answered by the holder, unsigned then signed.
    let msisdn = "255700000077";
    let register = hub.api(
        "POST",
        &format!("/participants/MSISDN/{msisdn}"),
        &resource_headers("participants", "1.0", PAYEE, None, true),
        format!(r#"{{"fspId":"{PAYEE}","currency":"USD"}}"#).as_bytes(),
    );
    assert_eq!(register.status, 202, "{register:?}");
    let registered = payee.expect("PUT", &format!("/participants/MSISDN/{msisdn}"));
    // The registry's answer is the hub's own: signed.
    assert_hub_signed(&registered, &hub_public);
    let path = format!("/parties/MSISDN/{msisdn}");
    for signed_by_payee in [false, true] {
        let lookup = hub.api(
            "GET",
            &path,
            &resource_headers("parties", "1.0", PAYER, None, true),
            b"",
        );
        assert_eq!(lookup.status, 202, "{lookup:?}");
        payee.expect("GET", &path);
        let answer = party_body(msisdn, PAYEE);
        let headers = resource_headers("parties", "1.0", PAYEE, Some(PAYER), false);
        let headers = match signed_by_payee {
            true => signed(headers, "PUT", &path, &payee_key, answer.as_bytes()),
            false => headers,
        };
        let posing = with_header(headers.clone(), "FSPIOP-Source", HUB_NAME);
        assert_hub_name_refused(
            &hub.api("PUT", &path, &posing, answer.as_bytes()),
            "a party answer as Hub",
        );
        let response = hub.api("PUT", &path, &headers, answer.as_bytes());
        assert_eq!(response.status, 200, "{response:?}");
        let delivered = payer.expect("PUT", &path);
        assert_eq!(delivered.body, answer.as_bytes());
        assert_not_hub_signed(
            &delivered,
            header_value(&headers, "FSPIOP-Signature"),
            &hub_public,
        );
    }
    hub.await_refusals("hub_source", None, before + 4);

    // --- the hub's own error callback is signed, and openssl agrees.
    let quote = new_id();
    let response = hub.api(
        "POST",
        "/quotes",
        &resource_headers("quotes", "1.0", PAYER, Some("bare"), true),
        quote_body(&quote).as_bytes(),
    );
    assert_eq!(response.status, 202, "{response:?}");
    let error = payer.expect("PUT", &format!("/quotes/{quote}/error"));
    assert_eq!(error.header("fspiop-source"), Some(HUB_NAME));
    assert_eq!(error.json()["errorInformation"]["errorCode"], json!("3201"));
    assert_hub_signed(&error, &hub_public);
    payee.assert_quiet(QUIET_WAIT);
}
