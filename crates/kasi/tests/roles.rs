//! Roles and scopes end to end, with the real binary: a DFSP-scoped
//! token sees its own DFSP (positions, transfers, settlement nets) and
//! nothing of another's, through the API and the console; `finance`
//! moves money and caps but configures nothing; `auditor` reads the audit
//! trail and nothing else. Every refusal is counted by role and reason.

mod support;

use serde_json::{json, Value};
use support::{admin_token, http, new_id, Hub, Response, Scenario, PAYEE, PAYER};

struct Tokens {
    finance: String,
    auditor: String,
    dfsp: String,
}

/// A hub whose tokens file holds an operator (the scenario's), `carol`
/// (finance), `erin` (auditor) and `payer-ops` (dfsp:payerfsp); the payer
/// and payee onboarded.
fn start() -> (Scenario, Tokens) {
    let dir = tempfile::tempdir().unwrap();
    let (operator, operator_line) = admin_token("alice", "operator");
    let (finance, finance_line) = admin_token("carol", "finance");
    let (auditor, auditor_line) = admin_token("erin", "auditor");
    let (dfsp, dfsp_line) = admin_token("payer-ops", "dfsp:payerfsp");
    let file = dir.path().join("admin-tokens");
    std::fs::write(
        &file,
        format!("{operator_line}\n{finance_line}\n{auditor_line}\n{dfsp_line}\n"),
    )
    .unwrap();
    let mut hub = Hub::start_with(
        &dir.path().join("data"),
        &["--admin-tokens", file.to_str().unwrap()],
    );
    hub.admin_bearer = Some(operator);
    let scenario = Scenario::on(hub, dir, 10_000, 5_000);
    (
        scenario,
        Tokens {
            finance,
            auditor,
            dfsp,
        },
    )
}

fn call(hub: &Hub, token: &str, method: &str, path: &str, body: Option<&Value>) -> Response {
    hub.admin_as(Some(token), method, path, body)
}

fn expect(response: Response, status: u16, what: &str) -> Response {
    assert_eq!(response.status, status, "{what}: {response:?}");
    response
}

/// A 403 of the access table, in central-ledger's error shape.
fn forbidden(response: Response, what: &str) {
    assert_eq!(response.status, 403, "{what}: {response:?}");
    let description = response.json()["errorInformation"]["errorDescription"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(description.contains("Forbidden: "), "{what}: {description}");
}

fn page(hub: &Hub, cookie: &str, path: &str) -> Response {
    http(
        hub.admin,
        "GET",
        path,
        &[("Cookie".to_string(), cookie.to_string())],
        b"",
    )
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_dfsp_sees_its_own_and_finance_and_auditor_only_what_they_should() {
    let (s, tokens) = start();
    let hub = &s.hub;
    let (transfer, _) = s.reserve("25", support::far_future());
    s.fulfil(
        &transfer,
        &support::fulfil_body(support::FULFILMENT, "COMMITTED"),
    );

    // finance: funds in, the net debit cap; not endpoints, nor onboarding.
    let finance = tokens.finance.as_str();
    let settlement_account = hub.account_id(PAYEE, "SETTLEMENT");
    let payee_deposit = new_id();
    expect(
        call(
            hub,
            finance,
            "POST",
            &format!("/participants/{PAYEE}/accounts/{settlement_account}"),
            Some(&json!({
                "transferId": payee_deposit, "externalReference": "ref",
                "action": "recordFundsIn", "reason": "deposit",
                "amount": {"amount": "100", "currency": "USD"}
            })),
        ),
        202,
        "finance funds in",
    );
    expect(
        call(
            hub,
            finance,
            "PUT",
            &format!("/participants/{PAYER}/limits"),
            Some(&json!({"currency": "USD", "limit": {"type": "NET_DEBIT_CAP", "value": 7000}})),
        ),
        200,
        "finance net debit cap",
    );
    forbidden(
        call(
            hub,
            finance,
            "POST",
            &format!("/participants/{PAYER}/endpoints"),
            Some(
                &json!({"type": "FSPIOP_CALLBACK_URL_TRANSFER_POST", "value": "http://127.0.0.1:9/x"}),
            ),
        ),
        "finance endpoints",
    );
    forbidden(
        call(
            hub,
            finance,
            "POST",
            "/participants",
            Some(&json!({"name": "newfsp", "currency": "USD"})),
        ),
        "finance onboarding",
    );
    // finance settles: window 1 closed, a settlement of it.
    expect(
        call(
            hub,
            finance,
            "POST",
            "/v2/settlementWindows/1",
            Some(&json!({"state": "CLOSED", "reason": "end of day"})),
        ),
        200,
        "finance closes the window",
    );
    let settlement = expect(
        call(
            hub,
            finance,
            "POST",
            "/v2/settlements",
            Some(&json!({
                "settlementModel": "DEFAULTDEFERREDNET", "reason": "end of day",
                "settlementWindows": [{"id": 1}]
            })),
        ),
        200,
        "finance creates a settlement",
    )
    .json();
    let settlement_id = settlement["id"].as_u64().unwrap();
    assert_eq!(settlement["participants"].as_array().unwrap().len(), 2);

    // dfsp:payerfsp through the API: its own...
    let dfsp = tokens.dfsp.as_str();
    let own = expect(
        call(
            hub,
            dfsp,
            "GET",
            &format!("/participants/{PAYER}/positions"),
            None,
        ),
        200,
        "own positions",
    );
    assert_eq!(own.json()[0]["currency"], "USD", "{own:?}");
    let seen = expect(
        call(hub, dfsp, "GET", &format!("/transfers/{transfer}"), None),
        200,
        "own transfer",
    )
    .json();
    assert_eq!(seen["payerFsp"], PAYER);
    assert_eq!(
        names(&call(hub, dfsp, "GET", "/participants", None).json()),
        [PAYER]
    );
    assert_eq!(
        names(&call(hub, dfsp, "GET", "/participants/limits", None).json()),
        [PAYER]
    );
    let nets = expect(
        call(
            hub,
            dfsp,
            "GET",
            &format!("/v2/settlements/{settlement_id}"),
            None,
        ),
        200,
        "own settlement net",
    )
    .json();
    let own_accounts: Vec<u64> = ["POSITION", "SETTLEMENT"]
        .iter()
        .map(|kind| hub.account_id(PAYER, kind))
        .collect();
    let participants = nets["participants"].as_array().unwrap();
    assert_eq!(participants.len(), 1, "{nets}");
    for account in participants[0]["accounts"].as_array().unwrap() {
        assert!(
            own_accounts.contains(&account["id"].as_u64().unwrap()),
            "{nets}"
        );
    }
    // ...and nothing of payeefsp's.
    forbidden(
        call(
            hub,
            dfsp,
            "GET",
            &format!("/participants/{PAYEE}/positions"),
            None,
        ),
        "another DFSP's positions",
    );
    forbidden(
        call(
            hub,
            dfsp,
            "GET",
            &format!("/participants/{PAYEE}/accounts"),
            None,
        ),
        "another DFSP's accounts",
    );
    // The payee's deposit exists (the operator reads it), and is not told
    // to the payer.
    expect(
        hub.admin("GET", &format!("/transfers/{payee_deposit}"), None),
        200,
        "operator",
    );
    expect(
        call(
            hub,
            dfsp,
            "GET",
            &format!("/transfers/{payee_deposit}"),
            None,
        ),
        404,
        "another DFSP's transfer",
    );
    forbidden(
        call(
            hub,
            dfsp,
            "PUT",
            &format!("/participants/{PAYER}/limits"),
            Some(&json!({"currency": "USD", "limit": {"type": "NET_DEBIT_CAP", "value": 1}})),
        ),
        "a DFSP's own cap",
    );
    forbidden(call(hub, dfsp, "GET", "/audit-events", None), "audit trail");
    forbidden(call(hub, dfsp, "GET", "/metrics", None), "metrics");

    // ...and through the console: its portal.
    let cookie = hub.console_session(dfsp);
    let landing = page(hub, &cookie, "/console/");
    assert_eq!(landing.status, 303, "{landing:?}");
    assert_eq!(
        landing.header("location"),
        Some(format!("/console/participants/{PAYER}").as_str())
    );
    let portal = page(hub, &cookie, &format!("/console/participants/{PAYER}"));
    assert_eq!(portal.status, 200, "{portal:?}");
    let text = portal.text();
    assert!(text.contains("Positions per currency"), "{text}");
    assert!(
        !text.contains("Set net debit cap"),
        "no form it may not use"
    );
    assert!(!text.contains("Recent changes"), "no audit section");
    assert!(
        !text.contains("href=\"/console/participants\""),
        "no link to the list of DFSPs"
    );
    assert!(!text.contains(PAYEE), "nothing names payeefsp: {text}");
    let other = page(hub, &cookie, &format!("/console/participants/{PAYEE}"));
    assert_eq!(other.status, 403, "{other:?}");
    assert_eq!(page(hub, &cookie, "/console/participants").status, 403);
    assert_eq!(page(hub, &cookie, "/console/audit").status, 403);
    let found = page(hub, &cookie, &format!("/console/transfers?id={transfer}"));
    assert_eq!(found.status, 200, "{found:?}");
    assert!(found.text().contains(&transfer), "{found:?}");
    assert!(!found.text().contains("dead letters"), "not the scheme's");
    let hidden = page(
        hub,
        &cookie,
        &format!("/console/transfers?id={payee_deposit}"),
    );
    assert!(hidden.text().contains("is known to the hub"), "{hidden:?}");
    let net = page(
        hub,
        &cookie,
        &format!("/console/settlement/settlements/{settlement_id}"),
    );
    assert_eq!(net.status, 200, "{net:?}");
    assert!(!net.text().contains(PAYEE), "{net:?}");

    // auditor: the audit trail, which names the finance person and role.
    let auditor = tokens.auditor.as_str();
    let events = expect(
        call(hub, auditor, "GET", "/audit-events?actor=carol", None),
        200,
        "auditor reads the trail",
    )
    .json();
    let events = events.as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["action"] == "funds.in" && e["role"] == "finance"),
        "{events:#?}"
    );
    forbidden(
        call(hub, auditor, "GET", "/participants", None),
        "auditor participants",
    );
    forbidden(
        call(hub, auditor, "GET", &format!("/transfers/{transfer}"), None),
        "auditor transfers",
    );
    let auditor_cookie = hub.console_session(auditor);
    assert_eq!(page(hub, &auditor_cookie, "/console/audit").status, 200);
    assert_eq!(
        page(hub, &auditor_cookie, "/console/participants").status,
        403
    );

    // Refusals are audited with the caller's role, and counted by role and
    // reason.
    hub.await_metrics("forbidden by role and reason", |metrics| {
        let other = "kasi_admin_forbidden_total{role=\"dfsp\",reason=\"other_dfsp\"}";
        let role = "kasi_admin_forbidden_total{role=\"auditor\",reason=\"role\"}";
        (metrics.contains(other) && metrics.contains(role)).then_some(())
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let refused = hub
            .admin("GET", "/audit-events?action=admin.authorize", None)
            .json();
        if refused
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["actor"] == "payer-ops" && e["role"] == "dfsp:payerfsp")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{refused:#}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
