//! The admin API's security, end to end with the real binary: bearer
//! tokens and roles, the refusal to serve a non-loopback admin address
//! without credentials, audit events of every change (surviving a
//! restart), and the validation of callback URLs.

mod support;

use std::path::Path;

use serde_json::{json, Value};
use support::{http, kasi, Hub, Response};

/// `kasi admin-token`'s token and tokens-file line.
fn admin_token(name: &str, role: &str) -> (String, String) {
    let output = kasi()
        .args(["admin-token", "--name", name, "--role", role])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let token = text
        .lines()
        .find_map(|l| l.strip_prefix("token: "))
        .unwrap()
        .to_string();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("line for --admin-tokens: "))
        .unwrap()
        .to_string();
    assert!(
        !line.contains(&token),
        "the file line must not hold the token"
    );
    (token, line)
}

struct Tokens {
    operator: String,
    viewer: String,
}

fn tokens_file(dir: &Path) -> (std::path::PathBuf, Tokens) {
    let (operator, operator_line) = admin_token("alice", "operator");
    let (viewer, viewer_line) = admin_token("grafana", "viewer");
    let path = dir.join("admin-tokens");
    std::fs::write(
        &path,
        format!("# kasi admin credentials\n{operator_line}\n\n{viewer_line}  # read only\n"),
    )
    .unwrap();
    (path, Tokens { operator, viewer })
}

fn call(
    hub: &Hub,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Response {
    let mut headers = Vec::new();
    if let Some(token) = token {
        headers.push(("Authorization".to_string(), format!("Bearer {token}")));
    }
    let bytes = match body {
        Some(body) => {
            headers.push(("Content-Type".to_string(), "application/json".to_string()));
            serde_json::to_vec(body).unwrap()
        }
        None => Vec::new(),
    };
    http(hub.admin, method, path, &headers, &bytes)
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
