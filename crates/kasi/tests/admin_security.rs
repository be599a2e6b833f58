//! The admin API's security, end to end with the real binary: bearer
//! tokens and roles, the refusal to serve a non-loopback admin address
//! without credentials, audit events of every change (surviving a
//! restart), and the validation of callback URLs.

mod support;

use serde_json::{json, Value};
use support::{admin_token, http, kasi, tokens_file, Hub, Response};

fn call(
    hub: &Hub,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Response {
    hub.admin_as(token, method, path, body)
}

fn expect(response: Response, status: u16, what: &str) -> Response {
    assert_eq!(response.status, status, "{what}: {response:?}");
    response
}

fn assert_error(response: &Response, status: u16, code: &str) {
    assert_eq!(response.status, status, "{response:?}");
    assert_eq!(
        response.json()["errorInformation"]["errorCode"],
        json!(code),
        "{response:?}"
    );
}

#[test]
fn tokens_and_roles_guard_the_admin_api() {
    let dir = tempfile::tempdir().unwrap();
    let (file, tokens) = tokens_file(dir.path());
    let data = dir.path().join("data");
    let hub = Hub::start_with(&data, &["--admin-tokens", file.to_str().unwrap()]);
    let new_dfsp = json!({"name": "newfsp", "currency": "USD"});

    // No credentials, or a wrong one: 401 with the challenge, in the
    // central-ledger error shape.
    for token in [None, Some("kasi_not-a-token"), Some("")] {
        let response = call(&hub, "GET", "/participants", token, None);
        assert_error(&response, 401, "3000");
        assert_eq!(
            response.header("www-authenticate"),
            Some("Bearer realm=\"kasi-admin\"")
        );
    }
    assert_error(
        &call(&hub, "POST", "/participants", None, Some(&new_dfsp)),
        401,
        "3000",
    );
    assert_error(&call(&hub, "GET", "/metrics", None, None), 401, "3000");
    assert_error(
        &call(&hub, "GET", "/v2/settlementWindows", None, None),
        401,
        "3000",
    );
    // Not a bearer scheme.
    let basic = http(
        hub.admin,
        "GET",
        "/participants",
        &[("Authorization".into(), format!("Basic {}", tokens.operator))],
        b"",
    );
    assert_error(&basic, 401, "3000");
    // Health stays open, for load balancers.
    expect(call(&hub, "GET", "/health", None, None), 200, "health");

    // The viewer reads everything...
    let viewer = Some(tokens.viewer.as_str());
    expect(
        call(&hub, "GET", "/participants", viewer, None),
        200,
        "viewer list",
    );
    expect(
        call(&hub, "GET", "/metrics", viewer, None),
        200,
        "viewer metrics",
    );
    expect(
        call(&hub, "GET", "/stats/stages", viewer, None),
        200,
        "viewer stats",
    );
    expect(
        call(
            &hub,
            "GET",
            "/v2/settlementWindows?state=OPEN",
            viewer,
            None,
        ),
        200,
        "viewer windows",
    );
    // ...and changes nothing.
    assert_error(
        &call(&hub, "POST", "/participants", viewer, Some(&new_dfsp)),
        403,
        "3000",
    );
    assert_error(
        &call(&hub, "DELETE", "/stats/stages", viewer, None),
        403,
        "3000",
    );
    assert_error(
        &call(
            &hub,
            "POST",
            "/v2/settlementWindows/1",
            viewer,
            Some(&json!({"state": "CLOSED", "reason": "r"})),
        ),
        403,
        "3000",
    );
    let listed = expect(
        call(&hub, "GET", "/participants", viewer, None),
        200,
        "list",
    );
    assert!(
        !listed.text().contains("newfsp"),
        "a refused write changed something: {}",
        listed.text()
    );

    // The operator changes.
    let operator = Some(tokens.operator.as_str());
    for kind in ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"] {
        expect(
            call(
                &hub,
                "POST",
                "/participants/Hub/accounts",
                operator,
                Some(&json!({"type": kind, "currency": "USD"})),
            ),
            201,
            "operator hub account",
        );
    }
    expect(
        call(&hub, "POST", "/participants", operator, Some(&new_dfsp)),
        201,
        "operator create",
    );
    let listed = expect(
        call(&hub, "GET", "/participants/newfsp", viewer, None),
        200,
        "get",
    );
    assert_eq!(listed.json()["name"], "newfsp");

    // Rotation without a restart: a new operator line replaces the old on
    // SIGHUP; the old token stops working at once, the new one works.
    let (rotated, rotated_line) = admin_token("alice-2026", "operator");
    std::fs::write(&file, format!("{rotated_line}\n")).unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &hub.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !hub.log().contains("SIGHUP: admin credentials reloaded") {
        assert!(std::time::Instant::now() < deadline, "{}", hub.log());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_error(
        &call(&hub, "GET", "/participants", operator, None),
        401,
        "3000",
    );
    assert_error(
        &call(&hub, "GET", "/participants", viewer, None),
        401,
        "3000",
    );
    expect(
        call(&hub, "GET", "/participants", Some(&rotated), None),
        200,
        "the rotated token",
    );
    // A broken file on SIGHUP keeps the credentials in force.
    std::fs::write(&file, "# nothing here\n").unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &hub.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    while !hub.log().contains("SIGHUP: admin credentials not reloaded") {
        assert!(std::time::Instant::now() < deadline, "{}", hub.log());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    expect(
        call(&hub, "GET", "/participants", Some(&rotated), None),
        200,
        "still the rotated token",
    );
}

#[test]
fn a_non_loopback_admin_address_needs_credentials_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Refused before anything is opened or bound (so it binds nothing
    // beyond loopback even in a test).
    let output = kasi()
        .args([
            "serve",
            "--api-listen",
            "127.0.0.1:0",
            "--admin-listen",
            "0.0.0.0:0",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("not loopback") && stderr.contains("--admin-tokens"),
        "{stderr}"
    );
    assert!(!data.join("kasi.db").exists(), "the store was touched");

    // A tokens file that does not parse is refused too, naming the line.
    let file = dir.path().join("bad-tokens");
    std::fs::write(&file, "alice operator kasi_plaintext_token\n").unwrap();
    let output = kasi()
        .args(["serve", "--admin-tokens"])
        .arg(&file)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("line 1"), "{stderr}");
}

/// The audit events of `query`, newest first.
fn audit_events(hub: &Hub, query: &str) -> Vec<Value> {
    let response = hub.admin("GET", &format!("/audit-events{query}"), None);
    assert_eq!(response.status, 200, "{response:?}");
    response.json().as_array().unwrap().clone()
}

fn find<'a>(events: &'a [Value], action: &str, target: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["action"] == action && e["target"] == target)
        .unwrap_or_else(|| panic!("no {action} of {target} in {events:#?}"))
}

#[test]
fn every_admin_change_is_an_audit_event_that_survives_a_restart() {
    use support::*;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut hub = Hub::start(&data);
    // Hub accounts and a settlement model; two DFSPs onboarded with a cap,
    // endpoints and a deposit.
    let (payer, payee) = hub.payer_and_payee(&[]);
    for stub in [&payer, &payee] {
        let settlement = hub.account_id(&stub.name, "SETTLEMENT");
        hub.admin_expect(
            "POST",
            &format!("/participants/{}/accounts/{settlement}", stub.name),
            Some(json!({
                "transferId": new_id(), "externalReference": "ref", "action": "recordFundsIn",
                "reason": "deposit", "amount": {"amount": "1000", "currency": "USD"}
            })),
            202,
        );
    }
    // Limits, activity of a participant and of an account.
    hub.admin_expect(
        "PUT",
        &format!("/participants/{PAYER}/limits"),
        Some(json!({"currency": "USD", "limit": {"type": "NET_DEBIT_CAP", "value": 7000}})),
        200,
    );
    hub.admin_expect(
        "PUT",
        &format!("/participants/{PAYEE}"),
        Some(json!({"isActive": false})),
        200,
    );
    hub.admin_expect(
        "PUT",
        &format!("/participants/{PAYEE}"),
        Some(json!({"isActive": true})),
        200,
    );
    let position = hub.account_id(PAYER, "POSITION");
    hub.admin_expect(
        "PUT",
        &format!("/participants/{PAYER}/accounts/{position}"),
        Some(json!({"isActive": false})),
        200,
    );
    hub.admin_expect(
        "PUT",
        &format!("/participants/{PAYER}/accounts/{position}"),
        Some(json!({"isActive": true})),
        200,
    );
    // Funds out: one committed, one aborted.
    let settlement = hub.account_id(PAYER, "SETTLEMENT");
    for finish in ["recordFundsOutCommit", "recordFundsOutAbort"] {
        let id = new_id();
        hub.admin_expect(
            "POST",
            &format!("/participants/{PAYER}/accounts/{settlement}"),
            Some(json!({
                "transferId": id, "externalReference": "ref", "action": "recordFundsOutPrepareReserve",
                "reason": "payout", "amount": {"amount": "10", "currency": "USD"}
            })),
            202,
        );
        hub.admin_expect(
            "PUT",
            &format!("/participants/{PAYER}/accounts/{settlement}/transfers/{id}"),
            Some(json!({"action": finish})),
            202,
        );
    }
    // Oracles.
    let created = hub.admin_expect(
        "POST",
        "/oracles",
        Some(json!({"oracleIdType": "MSISDN", "endpoint": {"value": "http://127.0.0.1:9/oracle", "endpointType": "URL"}, "isDefault": true})),
        201,
    );
    let oracle = created.json()["oracleId"].as_u64().unwrap();
    hub.admin_expect(
        "PUT",
        &format!("/oracles/{oracle}"),
        Some(json!({"endpoint": {"value": "http://127.0.0.1:10/oracle", "endpointType": "URL"}})),
        204,
    );
    hub.admin_expect("DELETE", &format!("/oracles/{oracle}"), None, 204);
    // A transfer, then settlement: close, create, update, abort, create
    // again and finalize.
    let id = new_id();
    let response = hub.prepare(
        PAYER,
        PAYEE,
        &prepare_body(&id, PAYER, PAYEE, "25", far_future()),
    );
    assert_eq!(response.status, 202, "{response:?}");
    payee.expect("POST", "/transfers");
    let response = hub.fulfil(&id, PAYEE, PAYER, &fulfil_body(FULFILMENT, "COMMITTED"));
    assert_eq!(response.status, 200, "{response:?}");
    let windows = hub
        .admin_expect("GET", "/v2/settlementWindows?state=OPEN", None, 200)
        .json();
    let window = windows[0]["settlementWindowId"].as_u64().unwrap();
    hub.admin_expect(
        "POST",
        &format!("/v2/settlementWindows/{window}"),
        Some(json!({"state": "CLOSED", "reason": "end of day"})),
        200,
    );
    let create = json!({"settlementModel": "DEFAULTDEFERREDNET", "reason": "r", "settlementWindows": [{"id": window}]});
    let first = hub
        .admin_expect("POST", "/v2/settlements", Some(create.clone()), 200)
        .json();
    let first_id = first["id"].as_u64().unwrap();
    let participant = &first["participants"][0];
    hub.admin_expect(
        "PUT",
        &format!("/v2/settlements/{first_id}"),
        Some(json!({"participants": [{"id": participant["id"], "accounts": [
            {"id": participant["accounts"][0]["id"], "state": "PS_TRANSFERS_RECORDED", "reason": "stage"}
        ]}]})),
        200,
    );
    // An update whose every account is refused changes nothing: its event
    // says so.
    let refused = hub.admin_expect(
        "PUT",
        &format!("/v2/settlements/{first_id}"),
        Some(
            json!({"participants": [{"id": participant["id"], "accounts": [
                {"id": participant["accounts"][0]["id"], "state": "NOT_A_STATE", "reason": "stage"}
            ]}]}),
        ),
        200,
    );
    assert!(
        refused.text().contains("errorInformation"),
        "{}",
        refused.text()
    );
    hub.admin_expect(
        "PUT",
        &format!("/v2/settlements/{first_id}"),
        Some(json!({"state": "ABORTED", "reason": "wrong"})),
        200,
    );
    let second = hub
        .admin_expect("POST", "/v2/settlements", Some(create), 200)
        .json();
    let second_id = second["id"].as_u64().unwrap();
    hub.admin_expect(
        "POST",
        &format!("/v2/settlements/{second_id}/finalize"),
        Some(json!({"reason": "bank file"})),
        200,
    );
    // Refused changes change nothing; their events say why.
    let refused = hub.admin(
        "PUT",
        "/participants/nobody",
        Some(&json!({"isActive": true})),
    );
    assert_eq!(refused.status, 400, "{refused:?}");

    let check = |events: &[Value]| {
        for (action, target) in [
            ("account.create", "Hub"),
            (
                "settlementModel.create",
                "settlementModel/DEFAULTDEFERREDNET",
            ),
            ("participant.create", PAYER),
            ("limits.init", PAYER),
            ("endpoint.set", PAYEE),
            ("funds.in", PAYER),
            ("limits.set", PAYER),
            ("participant.deactivate", PAYEE),
            ("participant.activate", PAYEE),
            ("account.deactivate", PAYER),
            ("account.activate", PAYER),
            ("funds.out.reserve", PAYER),
            ("funds.out.commit", PAYER),
            ("funds.out.abort", PAYER),
            ("oracle.create", "oracle"),
            ("oracle.update", &format!("oracle/{oracle}")),
            ("oracle.delete", &format!("oracle/{oracle}")),
            (
                "settlementWindow.close",
                &format!("settlementWindow/{window}"),
            ),
            ("settlement.create", "settlement"),
            ("settlement.update", &format!("settlement/{first_id}")),
            ("settlement.abort", &format!("settlement/{first_id}")),
            ("settlement.finalize", &format!("settlement/{second_id}")),
        ] {
            let event = find(events, action, target);
            assert_eq!(event["actor"], "loopback", "{event}");
            assert_eq!(event["role"], "operator", "{event}");
            assert!(event["time"].as_str().unwrap().ends_with('Z'), "{event}");
            assert!(!event["after"].is_null(), "{event}");
        }
        let refused = find(events, "participant.activate", "nobody");
        assert!(
            refused["outcome"]
                .as_str()
                .unwrap()
                .starts_with("REFUSED 3"),
            "{refused}"
        );
        assert_eq!(refused["before"], refused["after"], "{refused}");
        // Before and after show what changed.
        let limits = find(events, "limits.set", PAYER);
        let cap = |side: &str| {
            limits[side]["accounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["type"] == "POSITION")
                .unwrap()["netDebitCap"]
                .clone()
        };
        assert_eq!((cap("before"), cap("after")), (json!(10000), json!(7000)));
        let deactivated = find(events, "participant.deactivate", PAYEE);
        assert_eq!(deactivated["before"]["isActive"], true);
        assert_eq!(deactivated["after"]["isActive"], false);
        let deposit = find(events, "funds.in", PAYER);
        assert_eq!(deposit["outcome"], "COMMITTED");
        assert!(deposit["before"].is_object());
        let closed = find(
            events,
            "settlementWindow.close",
            &format!("settlementWindow/{window}"),
        );
        assert_eq!(closed["before"]["state"], "OPEN");
        assert_eq!(closed["after"]["state"], "CLOSED");
        let aborted = find(
            events,
            "settlement.abort",
            &format!("settlement/{first_id}"),
        );
        assert_eq!(aborted["after"]["state"], "ABORTED");
        let deleted = find(events, "oracle.delete", &format!("oracle/{oracle}"));
        assert_eq!(deleted["before"].as_array().unwrap().len(), 1);
        assert_eq!(deleted["after"], json!([]));
        // Newest first, ids without gaps.
        let ids: Vec<u64> = events.iter().map(|e| e["id"].as_u64().unwrap()).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(ids, sorted);
        assert_eq!(ids.len() as u64, ids[0]);
    };
    let before_restart = audit_events(&hub, "?limit=1000");
    check(&before_restart);

    let updates = audit_events(&hub, "?action=settlement.update");
    assert_eq!(updates.len(), 2, "{updates:#?}");
    assert!(
        updates[0]["outcome"]
            .as_str()
            .unwrap()
            .starts_with("REFUSED"),
        "the newest, every account refused: {updates:#?}"
    );
    assert!(!updates[1]["outcome"]
        .as_str()
        .unwrap()
        .starts_with("REFUSED"));

    // Filters.
    let payer_events = audit_events(&hub, &format!("?participant={PAYER}"));
    assert!(!payer_events.is_empty());
    assert!(payer_events.iter().all(|e| e["target"] == PAYER));
    let deposits = audit_events(&hub, "?action=funds.in");
    assert_eq!(deposits.len(), 2, "{deposits:#?}");
    assert_eq!(audit_events(&hub, "?action=funds.in&limit=1").len(), 1);
    assert!(audit_events(&hub, "?actor=someone").is_empty());
    assert!(audit_events(&hub, "?from=2999-01-01T00:00:00.000Z").is_empty());
    assert_eq!(
        audit_events(&hub, "?to=2999-01-01T00:00:00.000Z&limit=1000").len(),
        before_restart.len()
    );
    let bad = hub.admin("GET", "/audit-events?limit=zero", None);
    assert_eq!(bad.status, 400, "{bad:?}");
    let bad = hub.admin("GET", "/audit-events?who=me", None);
    assert_eq!(bad.status, 400, "{bad:?}");
    // The log carries one line per event.
    hub.await_log("audit event");

    // A crash loses none of them.
    hub.kill();
    let hub = Hub::start(&data);
    assert_eq!(audit_events(&hub, "?limit=1000"), before_restart);
}

#[test]
fn callback_urls_are_validated_and_held_to_the_allow_list() {
    use support::*;
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start_with(
        &dir.path().join("data"),
        &[
            "--callback-allow",
            "127.0.0.1,*.dfsp.example",
            "--callback-allow",
            "10.0.0.0/8",
        ],
    );
    hub.setup();
    hub.admin_expect(
        "POST",
        "/participants",
        Some(json!({"name": PAYER, "currency": "USD"})),
        201,
    );
    let endpoint = |value: &str| {
        hub.admin(
            "POST",
            &format!("/participants/{PAYER}/endpoints"),
            Some(&json!({"type": "FSPIOP_CALLBACK_URL_PARTIES_GET", "value": value})),
        )
    };
    for good in [
        "http://127.0.0.1:4000/parties/{{partyIdType}}/{{partyIdentifier}}",
        "https://api.dfsp.example/parties/{{partyIdType}}/{{partyIdentifier}}",
        "http://10.2.3.4:3000/parties",
    ] {
        let response = endpoint(good);
        assert_eq!(response.status, 201, "{good}: {response:?}");
    }
    for (bad, why) in [
        ("ftp://127.0.0.1/x", "http"),
        ("http://user:secret@127.0.0.1/x", "credentials"),
        ("http:///parties", "no host"),
        ("http://{{host}}/parties", "templates"),
        ("http://evil.example.com/parties", "callback-allow"),
        ("http://dfsp.example.evil.com/parties", "callback-allow"),
        ("http://11.0.0.1/parties", "callback-allow"),
    ] {
        let response = endpoint(bad);
        assert_error_response(&response, 400, "3100");
        assert!(response.text().contains(why), "{bad}: {}", response.text());
    }
    // E-mail endpoints are not URLs and stay allowed.
    let email = hub.admin(
        "POST",
        &format!("/participants/{PAYER}/endpoints"),
        Some(&json!({"type": "NET_DEBIT_CAP_ADJUSTMENT_EMAIL", "value": "ops@dfsp.example"})),
    );
    assert_eq!(email.status, 201, "{email:?}");
    // The last accepted URL is the one kept; refusals changed nothing.
    let listed = hub.admin_expect(
        "GET",
        &format!("/participants/{PAYER}/endpoints"),
        None,
        200,
    );
    assert!(
        listed.text().contains("http://10.2.3.4:3000/parties"),
        "{}",
        listed.text()
    );
    assert!(!listed.text().contains("evil"), "{}", listed.text());

    // Oracles are held to the same rules.
    let oracle = |value: &str| {
        hub.admin(
            "POST",
            "/oracles",
            Some(&json!({"oracleIdType": "MSISDN", "endpoint": {"value": value, "endpointType": "URL"}, "isDefault": true})),
        )
    };
    assert_error_response(&oracle("http://elsewhere.net/oracle"), 400, "3100");
    assert_error_response(&oracle("http://u:p@127.0.0.1/oracle"), 400, "3100");
    let created = oracle("http://127.0.0.1:9/oracle");
    assert_eq!(created.status, 201, "{created:?}");
    let id = created.json()["oracleId"].as_u64().unwrap();
    let moved = hub.admin(
        "PUT",
        &format!("/oracles/{id}"),
        Some(&json!({"endpoint": {"value": "http://elsewhere.net/oracle", "endpointType": "URL"}})),
    );
    assert_error_response(&moved, 400, "3100");

    // A malformed allow-list entry is refused at start.
    let output = kasi()
        .args(["serve", "--callback-allow", "bad host", "--data-dir"])
        .arg(dir.path().join("other"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("bad host"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn certificates_are_pinned_durably_with_audit_events() {
    use support::*;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut kasi_hub = Hub::start(&data);
    let hub = &kasi_hub;
    hub.setup();
    for name in [PAYER, PAYEE] {
        hub.admin_expect(
            "POST",
            "/participants",
            Some(json!({"name": name, "currency": "USD"})),
            201,
        );
    }
    let path = format!("/participants/{PAYER}/certificates");
    // By fingerprint, and by PEM (the fingerprint of its DER).
    let by_hex = format!("sha256:{}", "ab".repeat(32));
    hub.admin_expect("POST", &path, Some(json!({"fingerprint": by_hex})), 201);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["gateway".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let der_hex = hub::tls::ClientIdentity::of(cert.der()).fingerprint;
    let by_pem = hub.admin_expect("POST", &path, Some(json!({"certificate": cert.pem()})), 201);
    assert_eq!(by_pem.json()["fingerprint"], format!("sha256:{der_hex}"));
    // One participant per certificate; malformed input refused.
    let twice = hub.admin(
        "POST",
        &format!("/participants/{PAYEE}/certificates"),
        Some(&json!({"fingerprint": by_hex})),
    );
    assert_error_response(&twice, 400, "3100");
    for bad in [
        json!({"fingerprint": "md5:00"}),
        json!({"certificate": "nope"}),
        json!({}),
    ] {
        assert_error_response(&hub.admin("POST", &path, Some(&bad)), 400, "3100");
    }
    let listed = hub.admin_expect("GET", &path, None, 200).json();
    let mut fingerprints: Vec<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["fingerprint"].as_str().unwrap().to_string())
        .collect();
    fingerprints.sort();
    let mut wanted = vec![by_hex.clone(), format!("sha256:{der_hex}")];
    wanted.sort();
    assert_eq!(fingerprints, wanted);

    hub.admin_expect("DELETE", &format!("{path}/{by_hex}"), None, 204);
    assert_error_response(
        &hub.admin("DELETE", &format!("{path}/{by_hex}"), None),
        400,
        "3200",
    );

    // Durable, each change an audit event.
    kasi_hub.kill();
    let hub = Hub::start(&data);
    let listed = hub.admin_expect("GET", &path, None, 200).json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["fingerprint"], format!("sha256:{der_hex}"));
    let events = audit_events(
        &hub,
        &format!("?participant={PAYER}&action=certificate.pin"),
    );
    assert_eq!(events.len(), 2, "{events:#?}");
    assert_eq!(events[1]["before"], json!([]));
    assert_eq!(events[1]["after"], json!([by_hex]));
    // The second unpin was refused: its event says so, newest first.
    let unpinned = audit_events(&hub, "?action=certificate.unpin");
    assert_eq!(unpinned.len(), 2, "{unpinned:#?}");
    assert!(
        unpinned[0]["outcome"]
            .as_str()
            .unwrap()
            .starts_with("REFUSED 3200"),
        "{unpinned:#?}"
    );
    assert_eq!(unpinned[0]["before"], unpinned[0]["after"]);
    assert_eq!(unpinned[1]["after"], json!([format!("sha256:{der_hex}")]));
}

/// PEM files of a scheme CA, a server certificate for `localhost` and
/// client certificates, all signed by that CA.
struct Pki {
    ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
}

struct Issued {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Pki {
    fn new() -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "scheme CA");
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        Pki { ca, ca_key }
    }

    fn issue(&self, name: &str, purpose: rcgen::ExtendedKeyUsagePurpose) -> Issued {
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![purpose];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        Issued { cert, key }
    }
}

/// One HTTP/1.1 request over TLS (as `localhost`, trusting `ca`), with a
/// client certificate if given; the status and the JSON body.
fn tls_http(
    address: std::net::SocketAddr,
    ca: &rcgen::Certificate,
    client: Option<&Issued>,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, Value) {
    let (status, _head, body) = tls_http_raw(address, ca, client, method, path, headers, body);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// [`tls_http`], with the answer's head and body as text.
fn tls_http_raw(
    address: std::net::SocketAddr,
    ca: &rcgen::Certificate,
    client: Option<&Issued>,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, String, String) {
    use std::io::{Read, Write};
    use std::sync::Arc;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match client {
        Some(issued) => builder
            .with_client_auth_cert(
                vec![issued.cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(issued.key.serialize_der().into()),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let connection = rustls::ClientConnection::new(
        Arc::new(config),
        rustls::pki_types::ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let tcp = std::net::TcpStream::connect(address).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    stream.flush().unwrap();
    let mut raw = Vec::new();
    // The server may close without close_notify after the answer.
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_string(), body.to_string())
}

#[test]
fn operators_by_certificate_and_a_pinned_certificate_on_fspiop() {
    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let server = pki.issue("localhost", ServerAuth);
    let operator = pki.issue("ops-laptop", ClientAuth);
    let gateway = pki.issue("shared-gateway", ClientAuth);
    let stranger = pki.issue("payerfsp", ClientAuth);
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let ca_file = write("ca.pem", pki.ca.pem());
    let cert_file = write("server.pem", server.cert.pem());
    let key_file = write("server.key", server.key.serialize_pem());
    let operator_fp = hub::tls::ClientIdentity::of(operator.cert.der()).fingerprint;
    let tokens = write(
        "admin-tokens",
        format!("ci operator cert:sha256:{operator_fp}\n"),
    );
    let hub = Hub::start_with(
        &dir.path().join("data"),
        &[
            "--tls-cert",
            &cert_file,
            "--tls-key",
            &key_file,
            "--tls-client-ca",
            &ca_file,
            "--admin-client-ca",
            &ca_file,
            "--admin-tokens",
            &tokens,
        ],
    );
    let json_headers = [("Content-Type".to_string(), "application/json".to_string())];
    let admin = |client: Option<&Issued>, method: &str, path: &str, body: Option<Value>| {
        let bytes = body
            .map(|b| serde_json::to_vec(&b).unwrap())
            .unwrap_or_default();
        tls_http(
            hub.admin,
            &pki.ca,
            client,
            method,
            path,
            &json_headers,
            &bytes,
        )
    };

    // The admin address asks for a certificate; without one (and without
    // a token), or with one not on the list, it is 401.
    assert_eq!(admin(None, "GET", "/participants", None).0, 401);
    assert_eq!(admin(Some(&gateway), "GET", "/participants", None).0, 401);
    // The operator's certificate is its credential.
    for kind in ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"] {
        let (status, body) = admin(
            Some(&operator),
            "POST",
            "/participants/Hub/accounts",
            Some(json!({"type": kind, "currency": "USD"})),
        );
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = admin(
        Some(&operator),
        "POST",
        "/participants",
        Some(json!({"name": "payerfsp", "currency": "USD"})),
    );
    assert_eq!(status, 201, "{body}");
    let (_, events) = admin(
        Some(&operator),
        "GET",
        "/audit-events?participant=payerfsp",
        None,
    );
    assert_eq!(events[0]["actor"], "ci", "{events}");

    // FSPIOP as payerfsp with a certificate of another name: refused,
    // until the operator pins that certificate to payerfsp.
    let lookup = |client: &Issued| {
        tls_http(
            hub.api,
            &pki.ca,
            Some(client),
            "GET",
            "/parties/MSISDN/123456789",
            &support::resource_headers("parties", "1.0", "payerfsp", None, true),
            b"",
        )
    };
    let (status, body) = lookup(&gateway);
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["errorInformation"]["errorCode"], "3100", "{body}");
    let (status, body) = admin(
        Some(&operator),
        "POST",
        "/participants/payerfsp/certificates",
        Some(json!({"certificate": gateway.cert.pem()})),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = lookup(&gateway);
    assert_eq!(status, 202, "{body}");
    // The certificate's own name still works, and the pin is for payerfsp
    // only: the stranger named payerfsp is allowed by its CN as before.
    assert_eq!(lookup(&stranger).0, 202);
    let (status, _) = tls_http(
        hub.api,
        &pki.ca,
        Some(&gateway),
        "GET",
        "/parties/MSISDN/123456789",
        &support::resource_headers("parties", "1.0", "payeefsp", None, true),
        b"",
    );
    assert_eq!(status, 400, "a pin does not extend to other participants");
    // Unpinned: refused again.
    let fingerprint = hub::tls::ClientIdentity::of(gateway.cert.der()).fingerprint;
    let (status, body) = admin(
        Some(&operator),
        "DELETE",
        &format!("/participants/payerfsp/certificates/sha256:{fingerprint}"),
        None,
    );
    assert_eq!(status, 204, "{body}");
    assert_eq!(lookup(&gateway).0, 400);

    // The console: the operator's browser presenting its certificate is
    // signed in by it (no token), and a change it makes is the API's, as
    // the certificate's operator; without a certificate, the sign-in page.
    let console = |client: Option<&Issued>,
                   method: &str,
                   path: &str,
                   headers: &[(String, String)],
                   body: &[u8]| {
        tls_http_raw(hub.admin, &pki.ca, client, method, path, headers, body)
    };
    let (status, head, _) = console(None, "GET", "/console/participants", &[], b"");
    assert_eq!(status, 303, "{head}");
    assert!(head.contains("location: /console/sign-in"), "{head}");
    let (status, head, page) = console(
        Some(&operator),
        "GET",
        "/console/participants/payerfsp",
        &[],
        b"",
    );
    assert_eq!(status, 200, "{head}");
    assert!(page.contains("ci · operator"), "{page}");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .expect("a session cookie");
    assert!(
        cookie.contains("Secure"),
        "a TLS admin address makes Secure cookies: {cookie}"
    );
    let cookie = cookie.split(';').next().unwrap().to_string();
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a CSRF token in the page")
        .to_string();
    let (status, head, _) = console(
        Some(&operator),
        "POST",
        "/console/participants/payerfsp/active",
        &[
            ("Cookie".to_string(), cookie),
            (
                "Content-Type".to_string(),
                "application/x-www-form-urlencoded".to_string(),
            ),
        ],
        format!("csrf={csrf}&active=false").as_bytes(),
    );
    assert_eq!(status, 303, "{head}");
    let (_, participant) = admin(Some(&operator), "GET", "/participants/payerfsp", None);
    assert_eq!(participant["isActive"], 0, "{participant}");
    let (_, events) = admin(
        Some(&operator),
        "GET",
        "/audit-events?participant=payerfsp&limit=1",
        None,
    );
    assert_eq!(events[0]["actor"], "ci", "{events}");
}

/// Onboarding one DFSP (participant, net debit cap, three endpoints, funds
/// in) logs one line per change that names the change — not the
/// participant's whole state before and after, which made each line
/// kilobytes long; the before and after stay in the audit trail.
#[test]
fn each_change_is_logged_in_a_short_line_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    let base = "http://127.0.0.1:9/payerfsp";
    hub.onboard("payerfsp", base, 1000, 5000);
    // A change's line may follow its answer: all six are waited for.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let log = loop {
        let log = hub.log();
        let changes = log
            .lines()
            .filter(|l| l.contains("audit event") && l.contains("target=payerfsp"))
            .count();
        if changes >= 6 {
            break log;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{changes} of 6 lines:\n{log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("audit event") && l.contains("target=payerfsp"))
        .collect();
    // One line per change, in whatever order the onboarding helper makes
    // them.
    let mut actions: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.split("action=").nth(1)?.split_whitespace().next())
        .collect();
    actions.sort_unstable();
    assert_eq!(
        actions,
        [
            "endpoint.set",
            "endpoint.set",
            "endpoint.set",
            "funds.in",
            "limits.init",
            "participant.create",
        ],
        "{log}"
    );
    for line in &lines {
        assert!(line.len() < 600, "{} bytes: {line}", line.len());
        assert!(
            line.contains("actor=") && line.contains("outcome="),
            "{line}"
        );
        assert!(
            !line.contains("before=") && !line.contains("after="),
            "{line}"
        );
    }
    let line_of = |action: &str, words: &str| {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("action={action} ")) && l.contains(words)),
            "no {action} line saying {words:?}:\n{}",
            lines.join("\n")
        );
    };
    line_of("participant.create", "created: ");
    line_of("participant.create", "name=");
    line_of("participant.create", "payerfsp");
    line_of(
        "endpoint.set",
        "FSPIOP_CALLBACK_URL_TRANSFER_POST: (none) -> ",
    );
    line_of("endpoint.set", &format!("{base}/transfers"));
    line_of("limits.init", "netDebitCap: (none) -> 1000");
    line_of("funds.in", "value: 0 -> -5000");
    // The whole before and after are in the audit trail.
    let events = hub
        .admin_expect("GET", "/audit-events?action=funds.in", None, 200)
        .json();
    assert_eq!(events[0]["target"], "payerfsp", "{events}");
    assert!(events[0]["before"]["accounts"].is_array(), "{events}");
    assert!(events[0]["after"]["endpoints"].is_object(), "{events}");
}
