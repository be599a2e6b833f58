//! End-to-end tests of FSPIOP-Signature (JWS): the hub signs the callbacks
//! it originates, forwards DFSPs' signed messages untouched, and, when
//! asked, refuses inbound requests whose signature does not verify.
//!
//! Keys are made here with the `openssl` CLI, and every signature the hub
//! makes is checked with `openssl dgst`, every DFSP signature is made with
//! it: kasi's own JWS code is never the judge of itself.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use support::*;

/// RS256 over `input` with `openssl dgst`.
fn openssl_sign(key: &Path, input: &[u8]) -> Vec<u8> {
    run_program(
        "openssl",
        &["dgst", "-sha256", "-sign", key.to_str().unwrap()],
        input,
    )
}

/// `body` as Mojaloop's SDK signs it (sorted keys, compact), made by Python.
fn sorted_json(body: &str) -> Vec<u8> {
    run_program(
        "python3",
        &[
            "-c",
            "import json,sys; sys.stdout.write(json.dumps(json.loads(sys.stdin.read()), sort_keys=True, separators=(',',':'), ensure_ascii=False))",
        ],
        body.as_bytes(),
    )
}

/// The headers of a request signed (RS256, by openssl) with `key` over
/// `payload`, covering `method path` and the usual FSPIOP headers.
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
    for (name, protected_name) in [
        ("FSPIOP-Source", "FSPIOP-Source"),
        ("FSPIOP-Destination", "FSPIOP-Destination"),
        ("Date", "Date"),
    ] {
        if let Some(value) = header_value(&headers, name) {
            protected.insert(protected_name.into(), json!(value));
        }
    }
    let protected = b64url(Value::Object(protected).to_string().as_bytes());
    let input = format!("{protected}.{}", b64url(payload));
    let signature = b64url(&openssl_sign(key, input.as_bytes()));
    let value = json!({"signature": signature, "protectedHeader": protected}).to_string();
    let headers = with_header(headers, "FSPIOP-URI", path);
    let headers = with_header(headers, "FSPIOP-HTTP-Method", method);
    with_header(headers, "FSPIOP-Signature", &value)
}

/// Checks a hub-originated callback's signature with openssl and its
/// protected header against what was really sent; returns the header.
fn assert_hub_signed(received: &Received, hub_public: &Path, method: &str, path: &str) -> Value {
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
    // A different body would not have verified.
    let tampered = format!("{protected_b64}.{}", b64url(b"{}"));
    assert!(!openssl_verifies(
        hub_public,
        tampered.as_bytes(),
        &signature
    ));
    let protected: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(protected_b64).unwrap()).unwrap();
    assert_eq!(protected["alg"], json!("RS256"));
    assert_eq!(protected["FSPIOP-URI"], json!(path));
    assert_eq!(protected["FSPIOP-HTTP-Method"], json!(method));
    assert_eq!(protected["FSPIOP-Source"], json!(HUB_NAME));
    assert_eq!(
        protected["FSPIOP-Destination"].as_str(),
        received.header("fspiop-destination")
    );
    assert_eq!(protected["Date"].as_str(), received.header("date"));
    // The HTTP headers say the same, as validators require.
    assert_eq!(received.header("fspiop-uri"), Some(path));
    assert_eq!(received.header("fspiop-http-method"), Some(method));
    protected
}

/// A hub started with `extra` flags, its accounts, the payer and payee
/// onboarded with 5,000 deposited each.
fn scenario(dir: &Path, extra: &[&str]) -> (Hub, Stub, Stub) {
    let hub = Hub::start_with(&dir.join("data"), extra);
    hub.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    hub.onboard(PAYER, &payer.base_url(), 10_000, 5_000);
    hub.onboard(PAYEE, &payee.base_url(), 10_000, 5_000);
    (hub, payer, payee)
}

#[test]
fn hub_callbacks_are_signed_and_forwarded_messages_keep_their_signature() {
    let dir = tempfile::tempdir().unwrap();
    let (hub_key, hub_public) = rsa_key(dir.path(), "hub");
    let (hub, payer, payee) = scenario(
        dir.path(),
        &["--jws-signing-key", hub_key.to_str().unwrap()],
    );

    // The payer's signed prepare reaches the payee byte for byte, with the
    // payer's own signature (no verification at the hub here).
    let (payer_key, payer_public) = rsa_key(dir.path(), "payer");
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", far_future());
    let headers = signed(
        fspiop_headers(PAYER, PAYEE, true),
        "POST",
        "/transfers",
        &payer_key,
        body.as_bytes(),
    );
    let response = hub.api("POST", "/transfers", &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    let forwarded = payee.expect("POST", "/transfers");
    assert_eq!(forwarded.body, body.as_bytes());
    assert_eq!(
        forwarded.header("fspiop-signature"),
        header_value(&headers, "FSPIOP-Signature")
    );
    assert_eq!(forwarded.header("fspiop-source"), Some(PAYER));
    let value: Value = serde_json::from_str(forwarded.header("fspiop-signature").unwrap()).unwrap();
    let input = format!(
        "{}.{}",
        value["protectedHeader"].as_str().unwrap(),
        b64url(&forwarded.body)
    );
    let signature = URL_SAFE_NO_PAD
        .decode(value["signature"].as_str().unwrap())
        .unwrap();
    assert!(openssl_verifies(
        &payer_public,
        input.as_bytes(),
        &signature
    ));

    // The payee's fulfil: forwarded to the payer with the payee's header;
    // the hub's own confirmation to the payee is signed by the hub.
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    let fulfil_headers = with_header(
        fspiop_headers(PAYEE, PAYER, false),
        "FSPIOP-Signature",
        "{\"signature\":\"payee\",\"protectedHeader\":\"payee\"}",
    );
    let path = format!("/transfers/{id}");
    let response = hub.api("PUT", &path, &fulfil_headers, fulfil.as_bytes());
    assert_eq!(response.status, 200, "{response:?}");
    let to_payer = payer.expect("PUT", &path);
    assert_eq!(to_payer.header("fspiop-source"), Some(PAYEE));
    assert_eq!(to_payer.body, fulfil.as_bytes());
    assert_eq!(
        to_payer.header("fspiop-signature"),
        Some("{\"signature\":\"payee\",\"protectedHeader\":\"payee\"}")
    );
    let confirmation = payee.expect("PUT", &path);
    assert_eq!(confirmation.header("fspiop-source"), Some(HUB_NAME));
    assert_eq!(confirmation.json()["transferState"], json!("COMMITTED"));
    let protected = assert_hub_signed(&confirmation, &hub_public, "PUT", &path);
    assert_eq!(protected["FSPIOP-Destination"], json!(PAYEE));

    // A GET's answer and an error callback the hub writes are signed too.
    assert_eq!(hub.get_transfer(&id, PAYER, PAYEE).status, 202);
    let answer = payer.expect("PUT", &path);
    assert_eq!(answer.header("fspiop-source"), Some(HUB_NAME));
    assert_hub_signed(&answer, &hub_public, "PUT", &path);
    let unknown = new_id();
    assert_eq!(hub.get_transfer(&unknown, PAYER, PAYEE).status, 202);
    let error = payer.expect_error(&unknown, "3208");
    assert_hub_signed(
        &error,
        &hub_public,
        "PUT",
        &format!("/transfers/{unknown}/error"),
    );
}

#[test]
fn hub_callbacks_are_unsigned_without_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let (hub, payer, _payee) = scenario(dir.path(), &[]);
    let unknown = new_id();
    assert_eq!(hub.get_transfer(&unknown, PAYER, PAYEE).status, 202);
    let error = payer.expect_error(&unknown, "3208");
    assert_eq!(error.header("fspiop-signature"), None);
}

#[test]
fn inbound_signatures_are_checked_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let keys_dir = dir.path().join("keys");
    let (hub, payer, payee) = scenario(
        dir.path(),
        &[
            "--jws-verify",
            "transfers,quotes",
            "--jws-keys-dir",
            keys_dir.to_str().unwrap(),
        ],
    );
    let (payer_key, payer_public) = rsa_key(dir.path(), "payer");
    let (payee_key, payee_public) = rsa_key(dir.path(), "payee");
    let (other_key, _) = rsa_key(dir.path(), "other");
    let position = hub.position(PAYER);

    let prepare = |body: &str, headers: &[(String, String)]| {
        hub.api("POST", "/transfers", headers, body.as_bytes())
    };
    // Refused, and nothing reserved or forwarded.
    let refused = |response: Response| {
        assert_error_response(&response, 400, "3105");
        assert_eq!(hub.position(PAYER), position);
        payee.assert_quiet(QUIET_WAIT);
    };

    // No key for the payer yet: refused.
    let body = prepare_body(&new_id(), PAYER, PAYEE, "10", far_future());
    let headers = signed(
        fspiop_headers(PAYER, PAYEE, true),
        "POST",
        "/transfers",
        &payer_key,
        body.as_bytes(),
    );
    refused(prepare(&body, &headers));

    // A key file dropped into the directory is picked up.
    std::fs::write(
        keys_dir.join("payerfsp.pem"),
        std::fs::read(&payer_public).unwrap(),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let accepted_id = loop {
        let id = new_id();
        let body = prepare_body(&id, PAYER, PAYEE, "10", far_future());
        let headers = signed(
            fspiop_headers(PAYER, PAYEE, true),
            "POST",
            "/transfers",
            &payer_key,
            body.as_bytes(),
        );
        let response = prepare(&body, &headers);
        if response.status == 202 {
            let forwarded = payee.expect("POST", "/transfers");
            assert_eq!(forwarded.body, body.as_bytes());
            assert_eq!(
                forwarded.header("fspiop-signature"),
                header_value(&headers, "FSPIOP-Signature")
            );
            break id;
        }
        assert_error_response(&response, 400, "3105");
        assert!(Instant::now() < deadline, "the key file was never loaded");
        std::thread::sleep(Duration::from_millis(200));
    };
    let position = hub.position(PAYER);
    assert_eq!(position, 10.0);

    // A signer that signs the sorted-key form while sending other bytes
    // (as Mojaloop's validator rebuilds the payload) is accepted too.
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "7", far_future());
    let sorted = sorted_json(&body);
    assert_ne!(sorted, body.as_bytes(), "the test body must not be sorted");
    let headers = signed(
        fspiop_headers(PAYER, PAYEE, true),
        "POST",
        "/transfers",
        &payer_key,
        &sorted,
    );
    assert_eq!(prepare(&body, &headers).status, 202);
    assert_eq!(payee.expect("POST", "/transfers").body, body.as_bytes());
    let position = hub.position(PAYER);
    assert_eq!(position, 17.0);
    let refused = |response: Response| {
        assert_error_response(&response, 400, "3105");
        assert_eq!(hub.position(PAYER), position);
        payee.assert_quiet(QUIET_WAIT);
    };

    // Tampered body: signed for 10, sent for 1000.
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", far_future());
    let headers = signed(
        fspiop_headers(PAYER, PAYEE, true),
        "POST",
        "/transfers",
        &payer_key,
        body.as_bytes(),
    );
    let tampered = body.replace("\"10\"", "\"1000\"");
    assert_ne!(tampered, body);
    refused(prepare(&tampered, &headers));
    // Signed by someone else's key.
    let headers = signed(
        fspiop_headers(PAYER, PAYEE, true),
        "POST",
        "/transfers",
        &other_key,
        body.as_bytes(),
    );
    refused(prepare(&body, &headers));
    // No signature at all.
    refused(prepare(&body, &fspiop_headers(PAYER, PAYEE, true)));
    // Signed for another path (replayed).
    let headers = signed(
        fspiop_headers(PAYER, PAYEE, true),
        "POST",
        "/quotes",
        &payer_key,
        body.as_bytes(),
    );
    refused(prepare(&body, &headers));
    // The same transfer, correctly signed, still goes through: the refusals
    // left nothing behind (no duplicate).
    let headers = signed(
        fspiop_headers(PAYER, PAYEE, true),
        "POST",
        "/transfers",
        &payer_key,
        body.as_bytes(),
    );
    assert_eq!(prepare(&body, &headers).status, 202);
    payee.expect("POST", "/transfers");

    // The payee's key, uploaded through the admin API.
    let path = format!("/transfers/{accepted_id}");
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    let unsigned = hub.api(
        "PUT",
        &path,
        &fspiop_headers(PAYEE, PAYER, false),
        fulfil.as_bytes(),
    );
    assert_error_response(&unsigned, 400, "3105");
    payer.assert_quiet(QUIET_WAIT);
    let pem = std::fs::read_to_string(&payee_public).unwrap();
    let bad = hub.admin(
        "PUT",
        "/participants/payeefsp/jwsKey",
        Some(&json!({"publicKey": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"})),
    );
    assert_error_response(&bad, 400, "3100");
    assert!(!keys_dir.join("payeefsp.pem").exists());
    let uploaded = hub.admin(
        "PUT",
        "/participants/payeefsp/jwsKey",
        Some(&json!({"publicKey": pem})),
    );
    assert_eq!(uploaded.status, 200, "{uploaded:?}");
    assert_eq!(
        std::fs::read_to_string(keys_dir.join("payeefsp.pem")).unwrap(),
        pem
    );
    let got = hub.admin_expect("GET", "/participants/payeefsp/jwsKey", None, 200);
    assert_eq!(got.json()["publicKey"], json!(pem));
    assert_eq!(got.json()["keyType"], json!("RSA"));
    let headers = signed(
        fspiop_headers(PAYEE, PAYER, false),
        "PUT",
        &path,
        &payee_key,
        fulfil.as_bytes(),
    );
    let response = hub.api("PUT", &path, &headers, fulfil.as_bytes());
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(payer.expect("PUT", &path).body, fulfil.as_bytes());
    payee.expect("PUT", &path);

    // Removed through the admin API: the payee's requests fail again.
    hub.admin_expect("DELETE", "/participants/payeefsp/jwsKey", None, 204);
    assert!(!keys_dir.join("payeefsp.pem").exists());
    hub.admin_expect("GET", "/participants/payeefsp/jwsKey", None, 404);
    // Both key changes are audit events (the refused upload is not).
    let events = hub
        .admin_expect("GET", "/audit-events?participant=payeefsp", None, 200)
        .json();
    let events: Vec<&serde_json::Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["action"].as_str().unwrap().starts_with("jwsKey."))
        .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["action"], "jwsKey.delete");
    assert_eq!(events[1]["action"], "jwsKey.set");
    assert_eq!(events[1]["before"], serde_json::Value::Null, "{events:?}");
    assert_eq!(events[1]["after"]["keyType"], "RSA", "{events:?}");
    assert_eq!(events[0]["before"], events[1]["after"]);
    assert_eq!(events[0]["after"], serde_json::Value::Null);
    let error_path = format!("/transfers/{id}/error");
    let reject = error_body("5100", "rejected");
    let headers = signed(
        fspiop_headers(PAYEE, PAYER, false),
        "PUT",
        &error_path,
        &payee_key,
        reject.as_bytes(),
    );
    assert_error_response(
        &hub.api("PUT", &error_path, &headers, reject.as_bytes()),
        400,
        "3105",
    );

    // GETs are never checked.
    assert_eq!(hub.get_transfer(&accepted_id, PAYER, PAYEE).status, 202);
    payer.expect("PUT", &path);
}

/// A message a proxy carries from another scheme (FSPIOP-Proxy) is
/// verified with the proxy's key: the other scheme's DFSP has none here
/// (docs/design/interscheme.md, rule 6). What is signed still names that
/// DFSP as its source.
#[test]
fn a_message_a_proxy_carries_is_verified_with_the_proxys_key() {
    let dir = tempfile::tempdir().unwrap();
    let keys_dir = dir.path().join("keys");
    std::fs::create_dir_all(&keys_dir).unwrap();
    let (proxy_key, proxy_public) = rsa_key(dir.path(), "proxy");
    let (other_key, _) = rsa_key(dir.path(), "other");
    std::fs::write(
        keys_dir.join("pxAB.pem"),
        std::fs::read(&proxy_public).unwrap(),
    )
    .unwrap();
    let (hub, _payer, payee) = scenario(
        dir.path(),
        &[
            "--jws-verify",
            "quotes",
            "--jws-keys-dir",
            keys_dir.to_str().unwrap(),
        ],
    );
    hub.add_endpoint(PAYEE, "FSPIOP_CALLBACK_URL_QUOTES", &payee.base_url());
    hub.admin_expect(
        "POST",
        "/participants",
        Some(json!({"name": "pxAB", "currency": "USD", "isProxy": true})),
        201,
    );
    let carried = |key: &Path| {
        let quote_id = new_id();
        let body = format!(
            r#"{{"quoteId":"{quote_id}","transactionId":"{}","payee":{{"partyIdInfo":{}}},"payer":{{"partyIdInfo":{}}},"amountType":"SEND","amount":{{"currency":"USD","amount":"5"}},"transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}"#,
            new_id(),
            party_id_info(PAYEE, "255700000001"),
            party_id_info("payerX", "255700000002"),
        );
        let mut headers = resource_headers("quotes", "1.1", "payerX", Some(PAYEE), true);
        headers.push(("FSPIOP-Proxy".into(), "pxAB".into()));
        let headers = signed(headers, "POST", "/quotes", key, body.as_bytes());
        (hub.api("POST", "/quotes", &headers, body.as_bytes()), body)
    };
    let (response, body) = carried(&proxy_key);
    assert_eq!(response.status, 202, "{response:?}");
    assert_eq!(payee.expect("POST", "/quotes").body, body.as_bytes());
    let (response, _) = carried(&other_key);
    assert_error_response(&response, 400, "3105");
    payee.assert_quiet(QUIET_WAIT);
}
