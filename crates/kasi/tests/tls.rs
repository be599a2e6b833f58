//! End-to-end TLS and identity: the real `kasi serve` binary with TLS on
//! both addresses, mutual TLS on the FSPIOP address, and the gateway
//! (trusted proxy) mode. Certificates are made by each test (rcgen); no key
//! material is checked in.
//!
//! What must hold: a client without a certificate from the scheme CA never
//! gets to HTTP; a DFSP's certificate (CN or DNS SAN) is the only
//! FSPIOP-Source it can use, on every route, and a refused request changes
//! nothing; a gateway's identity header counts only from a trusted
//! address; a certificate replaced on disk is served after SIGHUP without
//! dropping open connections.

mod support;

use std::net::IpAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

/// Waits (bounded) until the hub's log contains `needle`.
fn await_log(hub: &Hub, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !hub.log().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "the hub never logged {needle:?}:\n{}",
            hub.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The hub's server certificate as a client sees it (DER).
fn served_certificate(client: &TlsClient, address: std::net::SocketAddr) -> Vec<u8> {
    let stream = client.connect(address).expect("TLS handshake");
    stream
        .conn
        .peer_certificates()
        .expect("a server certificate")[0]
        .to_vec()
}

/// The value of `name{participant="fsp"}` in the hub's metrics, 0 if absent.
fn counter(hub: &Hub, name: &str, participant: &str) -> u64 {
    let metrics = hub.admin("GET", "/metrics", None).text();
    let prefix = format!("{name}{{participant=\"{participant}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.trim().parse().unwrap())
        .unwrap_or(0)
}

/// A hub serving TLS with `server` on both addresses; `extra` flags after.
fn start_tls_hub(dir: &Path, pki: &Pki, server: &Issued, extra: &[&str]) -> Hub {
    let (cert, key) = server.write(dir, "hub");
    let mut args = vec![
        "--tls-cert".to_string(),
        cert.display().to_string(),
        "--tls-key".to_string(),
        key.display().to_string(),
    ];
    args.extend(extra.iter().map(|arg| arg.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut hub = Hub::start_with(&dir.join("data"), &args);
    hub.tls = Some(pki.client(None));
    hub
}

/// A request: method, path, headers, body.
type Attempt = (&'static str, String, Vec<(String, String)>, String);

#[test]
fn mutual_tls_binds_fspiop_source_to_the_client_certificate_on_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("kasi test scheme CA");
    let ca_path = dir.path().join("scheme-ca.pem");
    pki.write_ca(&ca_path);
    let server = pki.issue("kasi hub", &["localhost"], true);
    let hub = start_tls_hub(
        dir.path(),
        &pki,
        &server,
        &["--tls-client-ca", ca_path.to_str().unwrap()],
    );
    assert!(hub.log().contains("tls=true"), "{}", hub.log());

    hub.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    for stub in [&payer, &payee] {
        hub.onboard(&stub.name, &stub.base_url(), 10_000, 5_000);
        for (kind, path) in DISCOVERY_ENDPOINTS {
            hub.add_endpoint(&stub.name, kind, &format!("{}{path}", stub.base_url()));
        }
    }
    // The payer is named by its CN; the payee by a DNS SAN (its CN is its
    // legal name), the two ways a scheme CA usually issues them.
    let as_payer = pki.client(Some(&pki.issue(PAYER, &[], false)));
    let as_payee = pki.client(Some(&pki.issue("Payee Bank Ltd", &[PAYEE], false)));

    // --- who never gets to HTTP: no certificate, another CA's certificate.
    let body = prepare_body(&new_id(), PAYER, PAYEE, "10", far_future());
    let headers = fspiop_headers(PAYER, PAYEE, true);
    let anonymous = pki.client(None);
    let refused = https(
        &anonymous,
        hub.api,
        "POST",
        "/transfers",
        &headers,
        body.as_bytes(),
    );
    assert!(
        refused.is_err(),
        "a client without a certificate must be refused at the handshake: {refused:?}"
    );
    let rogue_ca = Pki::new("rogue CA");
    let rogue_identity = rogue_ca.issue(PAYER, &[], false);
    let rogue = TlsClient::new(
        &pki.ca_der(),
        Some((&rogue_identity.cert_der, &rogue_identity.key_der)),
    );
    let refused = https(
        &rogue,
        hub.api,
        "POST",
        "/transfers",
        &headers,
        body.as_bytes(),
    );
    assert!(
        refused.is_err(),
        "a certificate from another CA must be refused at the handshake: {refused:?}"
    );

    // --- a real transfer: each side with its own certificate.
    let transfer_id = new_id();
    let body = prepare_body(&transfer_id, PAYER, PAYEE, "10", far_future());
    let response = https(
        &as_payer,
        hub.api,
        "POST",
        "/transfers",
        &headers,
        body.as_bytes(),
    )
    .expect("the payer's certificate is accepted");
    assert_eq!(response.status, 202, "{response:?}");
    payee.expect("POST", "/transfers");
    assert_eq!(hub.position(PAYER), 10.0);

    // --- every route, as the payer's certificate claiming to be the payee
    // (or the hub): refused with 3100, and nothing reaches anyone.
    let spoof_id = new_id();
    let spoofed_prepare = prepare_body(&spoof_id, PAYEE, PAYER, "2500", far_future());
    let quote_id = new_id();
    let quote = format!(
        r#"{{"quoteId":"{quote_id}","transactionId":"{}","payee":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"255700000001","fspId":"{PAYER}"}}}},"payer":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"255700000009","fspId":"{PAYEE}"}}}},"amountType":"SEND","amount":{{"currency":"USD","amount":"100"}},"transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}"#,
        new_id()
    );
    let party = format!(
        r#"{{"party":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"255700000001","fspId":"{PAYEE}"}},"name":"Mallory"}}}}"#
    );
    let batch_id = new_id();
    let batch = json!({
        "requestId": batch_id,
        "partyList": [{"partyIdType": "MSISDN", "partyIdentifier": "255700000002", "fspId": PAYEE}],
        "currency": "USD"
    })
    .to_string();
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    let abort = error_body("5101", "forged abort");
    let registration = format!(r#"{{"fspId":"{PAYEE}","currency":"USD"}}"#);
    let attempts: Vec<Attempt> = vec![
        (
            "POST",
            "/transfers".into(),
            fspiop_headers(PAYEE, PAYER, true),
            spoofed_prepare.clone(),
        ),
        (
            "PUT",
            format!("/transfers/{transfer_id}"),
            fspiop_headers(PAYEE, PAYER, false),
            fulfil.clone(),
        ),
        (
            "PUT",
            format!("/transfers/{transfer_id}/error"),
            fspiop_headers(PAYEE, PAYER, false),
            abort.clone(),
        ),
        (
            "PUT",
            format!("/transfers/{transfer_id}/error"),
            fspiop_headers(HUB_NAME, PAYER, false),
            abort.clone(),
        ),
        (
            "GET",
            format!("/transfers/{transfer_id}"),
            fspiop_headers(PAYEE, PAYER, true),
            String::new(),
        ),
        (
            "POST",
            "/participants/MSISDN/255700000001".into(),
            resource_headers("participants", "1.0", PAYEE, None, true),
            registration.clone(),
        ),
        (
            "POST",
            "/participants".into(),
            resource_headers("participants", "1.0", PAYEE, None, true),
            batch,
        ),
        (
            "DELETE",
            "/participants/MSISDN/255700000001".into(),
            resource_headers("participants", "1.0", PAYEE, None, true),
            String::new(),
        ),
        (
            "GET",
            "/participants/MSISDN/255700000001".into(),
            resource_headers("participants", "1.0", PAYEE, None, true),
            String::new(),
        ),
        (
            "GET",
            "/parties/MSISDN/255700000001".into(),
            resource_headers("parties", "1.0", PAYEE, None, true),
            String::new(),
        ),
        (
            "PUT",
            "/parties/MSISDN/255700000001".into(),
            resource_headers("parties", "1.0", PAYEE, Some(PAYER), false),
            party,
        ),
        (
            "POST",
            "/quotes".into(),
            resource_headers("quotes", "1.0", PAYEE, Some(PAYER), true),
            quote,
        ),
        (
            "PUT",
            format!("/quotes/{quote_id}/error"),
            resource_headers("quotes", "1.0", PAYEE, Some(PAYER), false),
            abort.clone(),
        ),
    ];
    let refused_before = counter(&hub, "kasi_fspiop_source_refused_total", PAYEE);
    for (method, path, headers, body) in &attempts {
        let response = https(&as_payer, hub.api, method, path, headers, body.as_bytes())
            .expect("the TLS connection itself is fine");
        assert_error_response(&response, 400, "3100");
        assert!(
            response.text().contains("fspiop-source"),
            "{method} {path}: the refusal should name FSPIOP-Source: {response:?}"
        );
    }
    payer.assert_quiet(QUIET_WAIT);
    payee.assert_nothing_pending();
    assert_eq!(hub.position(PAYER), 10.0, "nothing changed");
    assert_eq!(hub.position(PAYEE), 0.0, "nothing changed");
    let refused_after = counter(&hub, "kasi_fspiop_source_refused_total", PAYEE);
    assert_eq!(
        refused_after - refused_before,
        attempts.len() as u64 - 1,
        "one count per refusal claiming {PAYEE} (the one claiming Hub is counted apart)"
    );
    assert!(counter(&hub, "kasi_fspiop_source_refused_total", HUB_NAME) >= 1);
    await_log(&hub, "the caller is not who FSPIOP-Source says");

    // --- the real payee, by its SAN, finishes the transfer.
    let response = https(
        &as_payee,
        hub.api,
        "PUT",
        &format!("/transfers/{transfer_id}"),
        &fspiop_headers(PAYEE, PAYER, false),
        fulfil.as_bytes(),
    )
    .unwrap();
    assert_eq!(response.status, 200, "{response:?}");
    let committed = payer.expect("PUT", &format!("/transfers/{transfer_id}"));
    assert_eq!(committed.json()["transferState"], "COMMITTED");
    let confirmation = payee.expect("PUT", &format!("/transfers/{transfer_id}"));
    assert_eq!(confirmation.json()["transferState"], "COMMITTED");
    assert_eq!(hub.position(PAYER), 10.0);
    assert_eq!(hub.position(PAYEE), -10.0);

    // --- and it can register its own party, while the payer could not.
    let response = https(
        &as_payee,
        hub.api,
        "POST",
        "/participants/MSISDN/255700000001",
        &resource_headers("participants", "1.0", PAYEE, None, true),
        registration.as_bytes(),
    )
    .unwrap();
    assert_eq!(response.status, 202, "{response:?}");
    payee.expect("PUT", "/participants/MSISDN/255700000001");
}

#[test]
fn a_gateway_identity_header_counts_only_from_a_trusted_address() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start_with(
        &dir.path().join("data"),
        &[
            "--trusted-proxy",
            "127.0.0.1/32",
            "--client-identity-header",
            "X-Client-Identity",
        ],
    );
    hub.setup();
    let payee = Stub::start(PAYEE);
    hub.onboard(PAYER, &payee.base_url(), 10_000, 5_000);
    hub.onboard(PAYEE, &payee.base_url(), 10_000, 5_000);
    let trusted: IpAddr = "127.0.0.1".parse().unwrap();
    let untrusted: IpAddr = "127.0.0.2".parse().unwrap();
    let prepare = |from: IpAddr, identity: Option<&str>| {
        let body = prepare_body(&new_id(), PAYER, PAYEE, "1", far_future());
        let mut headers = fspiop_headers(PAYER, PAYEE, true);
        if let Some(identity) = identity {
            headers.push(("X-Client-Identity".into(), identity.into()));
        }
        http_from(
            from,
            hub.api,
            "POST",
            "/transfers",
            &headers,
            body.as_bytes(),
        )
    };

    let response = prepare(trusted, Some(PAYER));
    assert_eq!(response.status, 202, "{response:?}");
    payee.expect("POST", "/transfers");

    for (from, identity, why) in [
        (trusted, Some(PAYEE), "the gateway vouches for another FSP"),
        (trusted, None, "the gateway vouches for nobody"),
        (
            untrusted,
            Some(PAYER),
            "the header comes from an untrusted address",
        ),
        (untrusted, None, "an untrusted client has no identity"),
    ] {
        let response = prepare(from, identity);
        assert_eq!(response.status, 400, "{why}: {response:?}");
        assert_error_response(&response, 400, "3100");
    }
    payee.assert_quiet(QUIET_WAIT);
    assert_eq!(hub.position(PAYER), 1.0, "only the first prepare reserved");
}

#[test]
fn sighup_serves_a_replaced_certificate_without_dropping_connections() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("kasi test scheme CA");
    let first = pki.issue("kasi hub (first)", &["localhost"], true);
    let hub = start_tls_hub(dir.path(), &pki, &first, &[]);
    let client = pki.client(None);
    assert_eq!(served_certificate(&client, hub.api), first.cert_der);
    assert_eq!(served_certificate(&client, hub.admin), first.cert_der);

    // A keep-alive connection made before the reload.
    let mut open = client.connect(hub.admin).unwrap();

    let second = pki.issue("kasi hub (second)", &["localhost"], true);
    second.write(dir.path(), "hub");
    let hup = |hub: &Hub| {
        let status = Command::new("kill")
            .args(["-HUP", &hub_pid(hub).to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    hup(&hub);
    await_log(&hub, "SIGHUP: TLS certificate reloaded");
    assert_eq!(served_certificate(&client, hub.api), second.cert_der);
    assert_eq!(served_certificate(&client, hub.admin), second.cert_der);

    use std::io::Write;
    open.write_all(b"GET /health HTTP/1.1\r\nHost: kasi\r\nConnection: close\r\n\r\n")
        .unwrap();
    let response = read_response(&mut open).expect("the old connection still answers");
    assert_eq!(response.status, 200, "{response:?}");

    // A broken file on SIGHUP keeps the certificate being served.
    std::fs::write(dir.path().join("hub.crt"), "not a certificate").unwrap();
    hup(&hub);
    await_log(&hub, "SIGHUP: TLS certificate not reloaded");
    assert_eq!(served_certificate(&client, hub.api), second.cert_der);
}

fn hub_pid(hub: &Hub) -> u32 {
    hub.pid()
}

#[test]
fn callbacks_reach_https_dfsps_verified_against_the_callback_ca_with_the_hubs_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let scheme = Pki::new("kasi test scheme CA");
    let ca_path = dir.path().join("scheme-ca.pem");
    scheme.write_ca(&ca_path);
    let (hub_cert, hub_key) = scheme
        .issue(HUB_NAME, &[], false)
        .write(dir.path(), "hub-client");

    // Three payees: plain TLS, TLS requiring a client certificate from the
    // scheme CA, and TLS with a certificate the scheme never issued.
    let server = scheme.issue("dfsp", &["127.0.0.1"], true);
    let tls_payee = Stub::start_tls(PAYEE, Pki::server_config(&server, None));
    let mtls_payee = Stub::start_tls("mtlsfsp", Pki::server_config(&server, Some(&scheme)));
    let rogue = Pki::new("rogue CA");
    let rogue_payee = Stub::start_tls(
        "roguefsp",
        Pki::server_config(&rogue.issue("dfsp", &["127.0.0.1"], true), None),
    );
    let payer = Stub::start(PAYER);
    assert!(tls_payee.base_url().starts_with("https://"));

    let data = dir.path().join("data");
    let callback_ca = ["--callback-ca", ca_path.to_str().unwrap()];
    let mut hub = Hub::start_with(&data, &callback_ca);
    hub.setup();
    hub.onboard(PAYER, &payer.base_url(), 100_000, 50_000);
    for stub in [&tls_payee, &mtls_payee, &rogue_payee] {
        hub.onboard(&stub.name, &stub.base_url(), 10_000, 0);
    }
    let prepare_to = |hub: &Hub, payee: &str| {
        let id = new_id();
        let body = prepare_body(&id, PAYER, payee, "1", far_future());
        let response = hub.prepare(PAYER, payee, &body);
        assert_eq!(response.status, 202, "{response:?}");
        (id, body)
    };

    let (_, body) = prepare_to(&hub, PAYEE);
    let forwarded = tls_payee.expect("POST", "/transfers");
    assert_eq!(forwarded.text(), body, "the exact bytes, over TLS");

    // Without the hub's client certificate the mutual-TLS DFSP refuses the
    // connection, and a server the scheme CA did not sign is not trusted.
    let (refused, _) = prepare_to(&hub, "mtlsfsp");
    prepare_to(&hub, "roguefsp");
    mtls_payee.assert_quiet(Duration::from_secs(1));
    rogue_payee.assert_quiet(QUIET_WAIT);
    assert_eq!(hub.terminate().code(), Some(0));

    let mut args = callback_ca.to_vec();
    args.extend([
        "--callback-cert",
        hub_cert.to_str().unwrap(),
        "--callback-key",
        hub_key.to_str().unwrap(),
    ]);
    let hub = Hub::start_with(&data, &args);
    let (_, body) = prepare_to(&hub, "mtlsfsp");
    // The prepare it refused before the restart is owed and delivered now
    // (rebuilt by the hub), besides the new one, in either order.
    let mut got: Vec<serde_json::Value> = (0..2)
        .map(|_| mtls_payee.expect("POST", "/transfers").json())
        .collect();
    got.sort_by_key(|body| body["transferId"] != serde_json::json!(refused));
    assert_eq!(got[0]["transferId"], serde_json::json!(refused));
    assert_eq!(
        got[1],
        serde_json::from_str::<serde_json::Value>(&body).unwrap()
    );
    prepare_to(&hub, "roguefsp");
    rogue_payee.assert_quiet(QUIET_WAIT);
}

/// A standby on a PostgreSQL store answers as the active does on the wire:
/// over TLS, with its health and its 2003; and once it takes over it
/// serves TLS on the same addresses.
#[test]
fn a_standby_answers_over_tls_and_serves_it_once_it_takes_over() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("kasi test scheme CA");
    let (cert, key) = pki
        .issue("kasi hub", &["localhost"], true)
        .write(dir.path(), "hub");
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let flags = ["--tls-cert", cert.as_str(), "--tls-key", key.as_str()];
    let mut active = Hub::spawn(
        Hub::postgres_command(&dir.path().join("a"), &url, "node-a", 1000, &flags),
        &dir.path().join("a"),
    );
    let standby = Hub::spawn_standby(
        Hub::postgres_command(&dir.path().join("b"), &url, "node-b", 1000, &flags),
        &dir.path().join("b"),
    );
    let client = pki.client(None);
    let health = https(&client, standby.admin, "GET", "/health", &[], b"").expect("TLS");
    assert_eq!(health.status, 503, "{health:?}");
    assert_eq!(health.json()["role"], "standby", "{health:?}");
    let refused = https(
        &client,
        standby.api,
        "POST",
        "/transfers",
        &fspiop_headers(PAYER, PAYEE, true),
        prepare_body(&new_id(), PAYER, PAYEE, "1", far_future()).as_bytes(),
    )
    .expect("TLS");
    assert_error_response(&refused, 503, "2003");
    assert!(refused.header("retry-after").is_some(), "{refused:?}");

    active.kill();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let health = https(&client, standby.admin, "GET", "/health", &[], b"");
        if health.as_ref().is_ok_and(|health| health.status == 200) {
            assert_eq!(health.unwrap().json()["role"], "active");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the standby did not take over over TLS: {health:?}\n{}",
            standby.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
