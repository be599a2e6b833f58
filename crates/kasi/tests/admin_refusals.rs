//! Refused admin requests, end to end with the real binary: an open
//! loopback admin API refuses what another site's page could make the
//! operator's browser send (cross-site writes, DNS rebinding) while curl
//! and the console keep working; and every refusal of the admin API —
//! 401, 403, a change refused as invalid, a cross-site request — is
//! counted in `kasi_refusals_total` and appears in `GET /audit-events`
//! with its outcome, unauthenticated floods coalesced.

mod support;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{tokens_file, Hub};

const WAIT: Duration = Duration::from_secs(20);

/// An answer read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn description(&self) -> String {
        self.json()["errorInformation"]["errorDescription"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// One request written exactly as given (the test's own `Host`, or none),
/// on a fresh connection.
fn raw(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no answer to {method} {path}: {text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    // Chunked answers: keep the JSON between the chunk sizes.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body.lines()
            .filter(|line| !line.chars().all(|c| c.is_ascii_hexdigit()))
            .collect::<Vec<_>>()
            .join("")
    } else {
        body.to_string()
    };
    Answer { status, body }
}

fn assert_refused(answer: &Answer, status: u16, words: &str) {
    assert_eq!(answer.status, status, "{answer:?}");
    assert_eq!(
        answer.json()["errorInformation"]["errorCode"],
        "3000",
        "central-ledger's error shape: {answer:?}"
    );
    assert!(
        answer.description().contains(words),
        "{words:?} in {answer:?}"
    );
}

fn audit_events(hub: &Hub, query: &str) -> Vec<Value> {
    let answer = hub.admin("GET", &format!("/audit-events{query}"), None);
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.json().as_array().unwrap().clone()
}

/// Polls `GET /audit-events{query}` until one event satisfies `found`.
fn await_event(hub: &Hub, query: &str, found: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let events = audit_events(hub, query);
        if let Some(event) = events.iter().find(|e| found(e)) {
            return event.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no such audit event for {query}: {events:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn participants(hub: &Hub) -> Vec<String> {
    let answer = hub.admin("GET", "/participants", None);
    assert_eq!(answer.status, 200, "{answer:?}");
    answer
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

fn net_debit_cap(hub: &Hub, name: &str) -> Value {
    let answer = hub.admin("GET", &format!("/participants/{name}/limits"), None);
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.json()[0]["limit"]["value"].clone()
}

#[test]
fn an_open_loopback_admin_api_refuses_cross_site_writes_and_rebound_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    hub.onboard("payerfsp", "http://127.0.0.1:9", 10_000, 0);
    let port = hub.admin.port();
    let own = format!("127.0.0.1:{port}");
    let new_dfsp = br#"{"name":"evilfsp","currency":"USD"}"#;
    let lower_cap = br#"{"currency":"USD","limit":{"type":"NET_DEBIT_CAP","value":1}}"#;
    let cap_before = net_debit_cap(&hub, "payerfsp");
    assert_eq!(cap_before, json!(10000));

    // A page of another site posting JSON (fetch with no-cors cannot, but
    // a page that may is still another site): its Origin gives it away.
    for origin in [
        "https://evil.example",
        "null",
        // Another service on this machine is another site too.
        "http://localhost:8080",
        "http://127.0.0.1:1",
    ] {
        let answer = raw(
            hub.admin,
            "POST",
            "/participants",
            &[
                ("Host", &own),
                ("Origin", origin),
                ("Content-Type", "application/json"),
            ],
            new_dfsp,
        );
        assert_refused(&answer, 403, "Origin");
        let answer = raw(
            hub.admin,
            "PUT",
            "/participants/payerfsp/limits",
            &[
                ("Host", &own),
                ("Origin", origin),
                ("Content-Type", "application/json"),
            ],
            lower_cap,
        );
        assert_refused(&answer, 403, "Origin");
    }
    // A form, or text/plain: what any page can send without asking, even
    // without an Origin (an old browser, a stripped header).
    for (content_type, body) in [
        (
            Some("application/x-www-form-urlencoded"),
            &b"name=evilfsp&currency=USD"[..],
        ),
        (Some("multipart/form-data; boundary=x"), &b"--x--"[..]),
        (Some("text/plain;charset=UTF-8"), &new_dfsp[..]),
        (None, &new_dfsp[..]),
    ] {
        let mut headers = vec![("Host", own.as_str())];
        if let Some(content_type) = content_type {
            headers.push(("Content-Type", content_type));
        }
        let answer = raw(hub.admin, "POST", "/participants", &headers, body);
        assert_refused(&answer, 403, "application/json");
    }
    let answer = raw(
        hub.admin,
        "PUT",
        "/participants/payerfsp/limits",
        &[("Host", &own), ("Content-Type", "text/plain")],
        lower_cap,
    );
    assert_refused(&answer, 403, "application/json");
    // DNS rebinding: a page whose name now resolves to 127.0.0.1 is
    // same-origin with itself, so its Host is what tells: reads are
    // refused too (the answer is what it is after), and the console.
    let rebound = format!("evil.example:{port}");
    for (method, path, body) in [
        ("GET", "/participants", &b""[..]),
        ("GET", "/console/", &b""[..]),
        ("POST", "/participants", &new_dfsp[..]),
        ("PUT", "/participants/payerfsp/limits", &lower_cap[..]),
    ] {
        let answer = raw(
            hub.admin,
            method,
            path,
            &[
                ("Host", &rebound),
                ("Origin", &format!("http://{rebound}")),
                ("Content-Type", "application/json"),
            ],
            body,
        );
        assert_refused(&answer, 403, "Host");
        let answer = raw(
            hub.admin,
            method,
            path,
            &[("Host", &rebound), ("Content-Type", "application/json")],
            body,
        );
        assert_refused(&answer, 403, "Host");
    }
    // Health stays open to probes, whatever they call the host.
    assert_eq!(
        raw(hub.admin, "GET", "/health", &[("Host", &rebound)], b"").status,
        200
    );

    // Nothing changed.
    assert!(!participants(&hub).contains(&"evilfsp".to_string()));
    assert_eq!(net_debit_cap(&hub, "payerfsp"), cap_before);

    // Each refusal was counted; the limit ones under the DFSP they were
    // about.
    hub.await_refusals("admin_cross_site", None, 4 * 2 + 4 + 1 + 4 * 2);
    hub.await_refusals("admin_cross_site", Some("payerfsp"), 4 + 1 + 2);
    let event = await_event(&hub, "?action=admin.crossSite", |_| true);
    assert_eq!(event["outcome"], "REFUSED CROSS-SITE", "{event}");
    assert!(event["after"]["attempts"].as_u64().unwrap() >= 1, "{event}");

    // Meanwhile what operators and scripts send keeps working: curl-style
    // JSON against 127.0.0.1 or localhost, with or without a charset, and
    // a page of the admin address itself (its own Origin).
    let answer = raw(
        hub.admin,
        "POST",
        "/participants",
        &[
            ("Host", &own),
            ("Content-Type", "application/json; charset=utf-8"),
        ],
        br#"{"name":"goodfsp","currency":"USD"}"#,
    );
    assert_eq!(answer.status, 201, "{answer:?}");
    let localhost = format!("localhost:{port}");
    let answer = raw(
        hub.admin,
        "PUT",
        "/participants/payerfsp/limits",
        &[
            ("Host", &localhost),
            ("Origin", &format!("http://localhost:{port}")),
            ("Content-Type", "application/json"),
        ],
        br#"{"currency":"USD","limit":{"type":"NET_DEBIT_CAP","value":9000}}"#,
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(net_debit_cap(&hub, "payerfsp"), json!(9000));
    let answer = raw(
        hub.admin,
        "GET",
        "/participants",
        &[("Host", &format!("[::1]:{port}"))],
        b"",
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    // A bodyless write (curl -X DELETE) needs no Content-Type.
    let answer = raw(hub.admin, "DELETE", "/stats/stages", &[("Host", &own)], b"");
    assert!(answer.status < 300, "{answer:?}");
    // The real curl, as the onboarding scripts run it.
    for base in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
    ] {
        let output = std::process::Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
            .args(["-H", "Content-Type: application/json"])
            .args([
                "-d",
                r#"{"currency":"USD","limit":{"type":"NET_DEBIT_CAP","value":8000}}"#,
            ])
            .arg(format!("{base}/participants/payerfsp/limits"))
            .output()
            .expect("curl");
        // POST on limits is not a route (PUT is): curl was let through to it.
        let status = String::from_utf8_lossy(&output.stdout).to_string();
        assert_eq!(status, "405", "{output:?}");
        let output = std::process::Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT"])
            .args(["-H", "Content-Type: application/json"])
            .args([
                "-d",
                r#"{"currency":"USD","limit":{"type":"NET_DEBIT_CAP","value":8000}}"#,
            ])
            .arg(format!("{base}/participants/payerfsp/limits"))
            .output()
            .expect("curl");
        assert_eq!(String::from_utf8_lossy(&output.stdout), "200", "{output:?}");
    }
    assert_eq!(net_debit_cap(&hub, "payerfsp"), json!(8000));
    assert!(participants(&hub).contains(&"goodfsp".to_string()));
}

#[test]
fn admin_refusals_are_counted_and_audited_and_floods_coalesced() {
    let dir = tempfile::tempdir().unwrap();
    let (file, tokens) = tokens_file(dir.path());
    let data = dir.path().join("data");
    let args = ["--admin-tokens", file.to_str().unwrap()];
    let mut hub = Hub::start_with(&data, &args);
    hub.admin_bearer = Some(tokens.operator.clone());
    hub.setup();
    hub.onboard("payerfsp", "http://127.0.0.1:9", 10_000, 0);
    let own = format!("127.0.0.1:{}", hub.admin.port());
    let json_type = ("Content-Type", "application/json");

    // 401: a wrong token.
    let bad = "Bearer kasi_not-a-token";
    let answer = raw(
        hub.admin,
        "GET",
        "/participants",
        &[("Host", &own), ("Authorization", bad)],
        b"",
    );
    assert_eq!(answer.status, 401, "{answer:?}");
    hub.await_refusals("admin_unauthenticated", Some("unknown"), 1);
    let unauthenticated = await_event(&hub, "?action=admin.authenticate", |_| true);
    assert_eq!(
        unauthenticated["outcome"], "UNAUTHENTICATED",
        "{unauthenticated}"
    );
    assert_eq!(unauthenticated["actor"], "unknown");
    assert_eq!(unauthenticated["target"], "remote/127.0.0.1");
    assert_eq!(unauthenticated["after"]["attempts"], 1);
    assert_eq!(unauthenticated["after"]["request"], "GET /participants");

    // 403: the viewer tries to lower payerfsp's cap.
    let viewer = format!("Bearer {}", tokens.viewer);
    let answer = raw(
        hub.admin,
        "PUT",
        "/participants/payerfsp/limits",
        &[("Host", &own), ("Authorization", &viewer), json_type],
        br#"{"currency":"USD","limit":{"type":"NET_DEBIT_CAP","value":1}}"#,
    );
    assert_eq!(answer.status, 403, "{answer:?}");
    hub.await_refusals("admin_forbidden", Some("payerfsp"), 1);
    let forbidden = await_event(&hub, "?action=admin.authorize", |_| true);
    assert_eq!(forbidden["outcome"], "FORBIDDEN", "{forbidden}");
    assert_eq!(
        (forbidden["actor"].as_str(), forbidden["role"].as_str()),
        (Some("grafana"), Some("viewer"))
    );
    assert_eq!(
        forbidden["after"]["request"],
        "PUT /participants/payerfsp/limits"
    );

    // Invalid changes: one the ledger refuses (no such participant), one
    // the handler refuses before it (a body that is not JSON).
    let answer = hub.admin(
        "PUT",
        "/participants/nobody",
        Some(&json!({"isActive": false})),
    );
    assert_eq!(answer.status, 400, "{answer:?}");
    let code = answer.json()["errorInformation"]["errorCode"]
        .as_str()
        .unwrap()
        .to_string();
    let refused = await_event(&hub, "?participant=nobody", |_| true);
    assert_eq!(refused["action"], "participant.deactivate", "{refused}");
    assert_eq!(refused["actor"], "alice");
    let outcome = refused["outcome"].as_str().unwrap();
    assert!(
        outcome.starts_with(&format!("REFUSED {code}: ")),
        "{refused}"
    );
    assert_eq!(refused["before"], refused["after"], "nothing changed");
    let operator = format!("Bearer {}", tokens.operator);
    let answer = raw(
        hub.admin,
        "PUT",
        "/participants/payerfsp/limits",
        &[("Host", &own), ("Authorization", &operator), json_type],
        b"{not json",
    );
    assert!((400..500).contains(&answer.status), "{answer:?}");
    let malformed = await_event(&hub, "?action=admin.request", |_| true);
    assert_eq!(malformed["target"], "payerfsp", "{malformed}");
    assert_eq!(malformed["actor"], "alice");
    assert!(
        malformed["outcome"]
            .as_str()
            .unwrap()
            .starts_with("REFUSED 3"),
        "{malformed}"
    );
    assert_eq!(
        malformed["after"]["request"],
        "PUT /participants/payerfsp/limits"
    );
    hub.await_refusals("admin_invalid", Some("payerfsp"), 1);
    hub.await_refusals("admin_invalid", Some("unknown"), 1);
    assert_eq!(
        net_debit_cap(&hub, "payerfsp"),
        json!(10000),
        "nothing changed"
    );

    // The last hour per DFSP, for the console.
    let stats = hub.admin("GET", "/stats/refusals", None).json();
    let payer = stats["participants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["participant"] == "payerfsp")
        .unwrap_or_else(|| panic!("{stats}"))
        .clone();
    assert_eq!(payer["byClass"]["admin_forbidden"], 1, "{stats}");
    assert_eq!(payer["byClass"]["admin_invalid"], 1, "{stats}");

    // A flood of bad tokens: every attempt counted, but a bounded number
    // of audit events and warnings.
    let started = Instant::now();
    const BURST: u64 = 200;
    for i in 0..BURST {
        let token = format!("Bearer kasi_guess-{i}");
        let answer = raw(
            hub.admin,
            "GET",
            "/participants",
            &[("Host", &own), ("Authorization", &token)],
            b"",
        );
        assert_eq!(answer.status, 401, "{answer:?}");
    }
    hub.await_refusals("admin_unauthenticated", None, BURST + 1);
    let elapsed = started.elapsed();
    let events = audit_events(&hub, "?action=admin.authenticate&limit=1000");
    // The first attempt's event; the burst's own, at most one a minute
    // (this test ends well within two).
    assert!(
        (1..=3).contains(&events.len()),
        "{} events for {} attempts: {events:#?}",
        events.len(),
        BURST + 1
    );
    let log = hub.await_log("admin request refused: no valid credential");
    let warnings = log
        .lines()
        .filter(|line| line.contains("admin request refused: no valid credential"))
        .count() as u64;
    // One warning per 10 s per (class, participant), saying how many it
    // did not write.
    let bound = 2 + elapsed.as_secs() / 10;
    assert!(
        (1..=bound).contains(&warnings),
        "{warnings} warnings in {elapsed:?} for {} refusals:\n{log}",
        BURST + 1
    );

    // Durable like every other event: they survive a crash.
    let before = audit_events(&hub, "?limit=1000");
    assert!(before.iter().any(|e| e["outcome"] == "FORBIDDEN"));
    hub.kill();
    let mut hub = Hub::start_with(&data, &args);
    hub.admin_bearer = Some(tokens.operator.clone());
    let after = audit_events(&hub, "?limit=1000");
    for event in &before {
        assert!(after.contains(event), "{event} lost in a crash");
    }
}
