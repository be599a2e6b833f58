//! End-to-end settlement through `kasi serve`: the reference's worked
//! example (four DFSPs, six transfers, nets +80, −75, −10, +5) driven through
//! every stage of Mojaloop's central-settlement API with positions, liquidity
//! and hub accounts checked after each, as the Testing Toolkit's golden path
//! asserts; a restart between stages; the error strings; abort; finalize and
//! the report; gross settlement.

mod support;

use serde_json::{json, Value};
use support::*;

const DFSPS: [&str; 4] = ["testfsp1", "testfsp2", "payerfsp", "payeefsp"];

struct Settlement {
    hub: Hub,
    stubs: Vec<Stub>,
    dir: tempfile::TempDir,
}

impl Settlement {
    fn new() -> Settlement {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::start(&dir.path().join("data"));
        hub.setup();
        hub.admin_expect(
            "POST",
            "/settlementModels",
            Some(json!({
                "name": "DEFERREDNETUSD",
                "settlementGranularity": "NET",
                "settlementInterchange": "MULTILATERAL",
                "settlementDelay": "DEFERRED",
                "requireLiquidityCheck": false,
                "ledgerAccountType": "POSITION",
                "settlementAccountType": "SETTLEMENT",
                "autoPositionReset": true,
                "currency": "USD"
            })),
            201,
        );
        let stubs: Vec<Stub> = DFSPS.iter().map(|name| Stub::start(name)).collect();
        for stub in &stubs {
            hub.onboard(&stub.name, &stub.base_url(), 10_000, 5_000);
        }
        Settlement { hub, stubs, dir }
    }

    fn stub(&self, name: &str) -> &Stub {
        self.stubs.iter().find(|s| s.name == name).unwrap()
    }

    /// One committed transfer from `payer` to `payee`.
    fn transfer(&self, payer: &str, payee: &str, amount: u64) {
        let id = new_id();
        let body = prepare_body(&id, payer, payee, &amount.to_string(), far_future());
        let response = self.hub.prepare(payer, payee, &body);
        assert_eq!(response.status, 202, "{response:?}");
        self.stub(payee).expect("POST", "/transfers");
        let response = self
            .hub
            .fulfil(&id, payee, payer, &fulfil_body(FULFILMENT, "COMMITTED"));
        assert_eq!(response.status, 200, "{response:?}");
        self.stub(payer).expect("PUT", &format!("/transfers/{id}"));
        self.stub(payee).expect("PUT", &format!("/transfers/{id}"));
    }

    fn the_six_transfers(&self) {
        for (payer, payee, amount) in [
            ("testfsp1", "testfsp2", 60),
            ("testfsp1", "payeefsp", 55),
            ("payerfsp", "testfsp1", 35),
            ("testfsp2", "payerfsp", 20),
            ("payeefsp", "testfsp2", 35),
            ("payeefsp", "payerfsp", 25),
        ] {
            self.transfer(payer, payee, amount);
        }
    }

    fn positions(&self) -> Vec<f64> {
        DFSPS.iter().map(|name| self.hub.position(name)).collect()
    }

    fn liquidity(&self) -> Vec<f64> {
        DFSPS
            .iter()
            .map(|name| self.hub.account_value(name, "SETTLEMENT"))
            .collect()
    }

    fn hub_accounts(&self) -> Vec<f64> {
        ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"]
            .iter()
            .map(|kind| self.hub.account_value("Hub", kind))
            .collect()
    }

    fn v2(&self, method: &str, path: &str, body: Option<Value>) -> Response {
        self.hub.admin(method, &format!("/v2{path}"), body.as_ref())
    }

    fn v2_ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let response = self.v2(method, path, body);
        assert_eq!(response.status, 200, "{method} /v2{path}: {response:?}");
        response.json()
    }

    fn open_window(&self) -> u64 {
        let windows = self.v2_ok("GET", "/settlementWindows?state=OPEN", None);
        assert_eq!(windows[0]["state"], "OPEN", "{windows}");
        windows[0]["settlementWindowId"].as_u64().unwrap()
    }

    fn close(&self, id: u64) -> Value {
        self.v2_ok(
            "POST",
            &format!("/settlementWindows/{id}"),
            Some(json!({"state": "CLOSED", "reason": "string"})),
        )
    }

    fn create(&self, model: &str, window: u64) -> Value {
        self.v2_ok(
            "POST",
            "/settlements",
            Some(json!({
                "settlementModel": model,
                "reason": "TESTING",
                "settlementWindows": [{"id": window}]
            })),
        )
    }

    /// Moves every account to `state`, one PUT per account (as the golden
    /// path's script does), and returns the settlement as GET shows it.
    fn advance(&self, settlement: &Value, state: &str) -> Value {
        let id = settlement["id"].as_u64().unwrap();
        for participant in settlement["participants"].as_array().unwrap() {
            for account in participant["accounts"].as_array().unwrap() {
                let body = json!({"participants": [{
                    "id": participant["id"],
                    "accounts": [{"id": account["id"], "state": state, "reason": "stage", "externalReference": "ref"}]
                }]});
                let answer = self.v2_ok("PUT", &format!("/settlements/{id}"), Some(body));
                let returned = &answer["participants"][0]["accounts"][0];
                assert_eq!(returned["state"], state, "{answer}");
                assert!(returned.get("errorInformation").is_none(), "{answer}");
            }
        }
        let after = self.v2_ok("GET", &format!("/settlements/{id}"), None);
        for participant in after["participants"].as_array().unwrap() {
            for account in participant["accounts"].as_array().unwrap() {
                assert_eq!(account["state"], state, "{after}");
            }
        }
        after
    }

    fn restart(&mut self) {
        let data_dir = self.hub.data_dir.clone();
        self.hub.kill();
        self.hub = Hub::start(&data_dir);
    }
}

fn description(response: &Response) -> String {
    response.json()["errorInformation"]["errorDescription"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
fn the_worked_example_settles_stage_by_stage_across_restarts() {
    let mut s = Settlement::new();
    let before = s.positions();
    let liquidity = s.liquidity();
    let hub_before = s.hub_accounts();

    // Clear nothing: window 1 is empty, and says so in Mojaloop's words.
    let window = s.open_window();
    let response = s.v2(
        "POST",
        &format!("/settlementWindows/{window}"),
        Some(json!({"state": "CLOSED", "reason": "string"})),
    );
    assert_error_response(&response, 400, "3100");
    assert_eq!(
        description(&response),
        format!("Generic validation error - Window {window} is empty")
    );

    s.the_six_transfers();
    let after: Vec<f64> = s.positions();
    assert_eq!(after, [80.0, -75.0, -10.0, 5.0]);

    let next = s.close(window);
    assert_eq!(next["state"], "OPEN");
    assert_eq!(next["settlementWindowId"].as_u64(), Some(window + 1));
    let closed = s.v2_ok("GET", &format!("/settlementWindows/{window}"), None);
    assert_eq!(closed["state"], "CLOSED");
    assert_eq!(closed["content"][0]["currencyId"], "USD");
    assert_eq!(closed["content"][0]["ledgerAccountType"], "POSITION");
    // Keys central-settlement answers as null are there, null.
    assert_eq!(
        closed["content"][0]
            .as_object()
            .unwrap()
            .get("settlementId"),
        Some(&Value::Null),
        "{closed}"
    );
    // A position's changedDate is its last change (the last transfer), as
    // in the accounts' list, not the time of the request; a restart keeps it.
    let changed = |s: &Settlement, name: &str| {
        let position = s
            .hub
            .admin_expect("GET", &format!("/participants/{name}/positions"), None, 200)
            .json();
        let accounts = s
            .hub
            .admin_expect("GET", &format!("/participants/{name}/accounts"), None, 200)
            .json();
        let account = accounts
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["ledgerAccountType"] == "POSITION")
            .cloned()
            .unwrap();
        assert_eq!(position[0]["changedDate"], account["changedDate"]);
        position[0]["changedDate"].as_str().unwrap().to_string()
    };
    let changed_before: Vec<String> = DFSPS.iter().map(|name| changed(&s, name)).collect();
    s.restart();
    let changed_after: Vec<String> = DFSPS.iter().map(|name| changed(&s, name)).collect();
    assert_eq!(changed_before, changed_after);
    // payeefsp's last change was the last transfer's commit, before the
    // close (the window's changedDate).
    let last = |text: &str| fspiop::parse_date_time(text).unwrap();
    assert!(
        last(&changed_after[3]) <= last(closed["changedDate"].as_str().unwrap()),
        "{changed_after:?} {closed}"
    );

    // Created right after the close: the window is closed already.
    let created = s.create("DEFERREDNETUSD", window);
    let taken = s.v2_ok("GET", &format!("/settlementWindows/{window}"), None);
    assert_eq!(
        taken["content"][0]["settlementId"], created["id"],
        "{taken}"
    );
    // An account moved without an externalReference answers it null.
    let first = &created["participants"][0];
    let answer = s.v2_ok(
        "PUT",
        &format!("/settlements/{}", created["id"]),
        Some(json!({"participants": [{"id": first["id"], "accounts": [
            {"id": first["accounts"][0]["id"], "state": "PENDING_SETTLEMENT", "reason": "same"}
        ]}]})),
    );
    let account = answer["participants"][0]["accounts"][0]
        .as_object()
        .unwrap()
        .clone();
    assert_eq!(
        account.get("externalReference"),
        Some(&Value::Null),
        "{answer}"
    );
    assert_eq!(account["state"], "PENDING_SETTLEMENT", "{answer}");
    assert_eq!(created["state"], "PENDING_SETTLEMENT");
    assert_eq!(created["settlementModel"], "DEFERREDNETUSD");
    assert_eq!(created["settlementWindows"].as_array().unwrap().len(), 1);
    assert_eq!(created["settlementWindows"][0]["id"].as_u64(), Some(window));
    assert_eq!(
        created["settlementWindows"][0]["state"],
        "PENDING_SETTLEMENT"
    );
    let mut nets: Vec<f64> = created["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| number(&p["accounts"][0]["netSettlementAmount"]["amount"]))
        .collect();
    nets.sort_by(f64::total_cmp);
    assert_eq!(nets, [-75.0, -10.0, 5.0, 80.0]);
    assert!(created["participants"][0]["accounts"][0]["netSettlementAmount"]["amount"].is_number());

    let recorded = s.advance(&created, "PS_TRANSFERS_RECORDED");
    assert_eq!(recorded["state"], "PS_TRANSFERS_RECORDED");
    assert_eq!(s.positions(), after);
    assert_eq!(s.liquidity(), liquidity);
    s.restart();

    let reserved = s.advance(&recorded, "PS_TRANSFERS_RESERVED");
    assert_eq!(reserved["state"], "PS_TRANSFERS_RESERVED");
    assert_eq!(
        reserved["settlementWindows"][0]["state"],
        "PENDING_SETTLEMENT"
    );
    // Net recipients are back to where they were; senders not yet.
    assert_eq!(s.positions(), [80.0, before[1], before[2], 5.0]);
    assert_eq!(s.liquidity(), liquidity);
    s.restart();

    let committed = s.advance(&reserved, "PS_TRANSFERS_COMMITTED");
    assert_eq!(committed["state"], "PS_TRANSFERS_COMMITTED");
    assert_eq!(s.positions(), before);
    assert_eq!(s.hub_accounts(), hub_before);
    assert_eq!(s.liquidity(), liquidity);
    s.restart();

    let settled = s.advance(&committed, "SETTLED");
    assert_eq!(settled["state"], "SETTLED");
    assert_eq!(settled["settlementWindows"][0]["state"], "SETTLED");
    assert_eq!(s.positions(), before);
    let windows = s.v2_ok("GET", "/settlementWindows?state=SETTLED", None);
    assert!(windows
        .as_array()
        .unwrap()
        .iter()
        .all(|w| w["state"] == "SETTLED"));

    // The report: per DFSP and who paid whom, and where the settlement
    // bank pays or debits each (its account there, set as an endpoint).
    let bank_account = |value: &str| {
        s.hub.admin(
            "POST",
            "/participants/testfsp1/endpoints",
            Some(&serde_json::json!({"type": "SETTLEMENT_BANK_ACCOUNT", "value": value})),
        )
    };
    let refused = bank_account("KE12\nBANK");
    assert_eq!(
        refused.status, 400,
        "no line breaks into the bank's CSV: {refused:?}"
    );
    let set = bank_account("KE12 BANK 0001 2345");
    assert!(set.status == 201 || set.status == 200, "{set:?}");
    let id = settled["id"].as_u64().unwrap();
    let report = s.v2_ok("GET", &format!("/settlements/{id}/report"), None);
    let line = |name: &str| {
        report["accounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["participant"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(number(&line("testfsp1")["netSettlementAmount"]), 80.0);
    assert_eq!(
        line("testfsp1")["settlementBankAccount"],
        "KE12 BANK 0001 2345"
    );
    assert_eq!(
        line("testfsp2")["settlementBankAccount"],
        serde_json::Value::Null
    );
    assert_eq!(number(&line("testfsp1")["sent"]["amount"]), 115.0);
    assert_eq!(line("testfsp1")["sent"]["count"], 2);
    assert_eq!(number(&line("testfsp1")["received"]["amount"]), 35.0);
    let pair = report["bilateral"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["payer"] == "payeefsp" && p["payee"] == "payerfsp")
        .cloned()
        .unwrap();
    assert_eq!(number(&pair["amount"]), 25.0);
    let csv = s.hub.admin_with_headers(
        "GET",
        &format!("/v2/settlements/{id}/report"),
        &[("Accept", "text/csv")],
    );
    assert_eq!(csv.status, 200);
    assert!(csv.header("content-type").unwrap().starts_with("text/csv"));
    let text = csv.text();
    // Three tables, a blank line between: accounts, bilateral, windows.
    let tables: Vec<Vec<&str>> = text
        .split("\n\n")
        .map(|table| table.lines().collect())
        .collect();
    assert_eq!(tables.len(), 3, "{text}");
    let [accounts, bilateral, windows] = [&tables[0], &tables[1], &tables[2]];
    assert_eq!(accounts.len(), 5, "{text}");
    assert!(
        accounts
            .iter()
            .any(|l| l.contains(",testfsp2,USD,") && l.contains(",-75,")),
        "{text}"
    );
    assert!(
        accounts
            .iter()
            .any(|l| l.contains(",testfsp1,USD,") && l.ends_with(",KE12 BANK 0001 2345")),
        "{text}"
    );
    assert_eq!(
        bilateral[0],
        "settlementId,currency,payerId,payer,payeeId,payee,amount,count"
    );
    // The six transfers, one pair each.
    assert_eq!(bilateral.len(), 7, "{text}");
    assert!(
        bilateral
            .iter()
            .any(|l| l.contains(",payeefsp,") && l.ends_with(",payerfsp,25,1")),
        "{text}"
    );
    assert_eq!(
        windows[0],
        "settlementId,settlementWindowId,state,openedDate,closedDate"
    );
    assert_eq!(windows.len(), 2, "{text}");
    let window_id = window;
    let window: Vec<&str> = windows[1].split(',').collect();
    assert_eq!(
        window[..3],
        [
            id.to_string().as_str(),
            window_id.to_string().as_str(),
            "SETTLED"
        ],
        "{text}"
    );
    // Opened, then closed, both ISO 8601 instants.
    let (opened, closed) = (
        fspiop::parse_date_time(window[3]).expect("opened"),
        fspiop::parse_date_time(window[4]).expect("closed"),
    );
    assert!(opened <= closed, "{text}");
    let json_window = &report["windows"][0];
    assert_eq!(json_window["openedDate"], window[3]);
    assert_eq!(json_window["closedDate"], window[4]);
}

#[test]
fn the_error_cases_answer_as_central_settlement_does() {
    let s = Settlement::new();
    let refuse = |method: &str, path: &str, body: Option<Value>, code: &str, text: &str| {
        let response = s.v2(method, path, body);
        assert_error_response(&response, 400, code);
        assert_eq!(description(&response), text, "{method} {path}");
    };
    refuse(
        "GET",
        "/settlementWindows",
        None,
        "3100",
        "Generic validation error - Use at least one parameter: participantId, state, fromDateTime, toDateTime, currency",
    );
    // Mojaloop's "Check Settlements Error #956": a query value outside the
    // schema (state 'open') is 3101 Malformed syntax.
    refuse(
        "GET",
        "/settlementWindows?participantId=0&state=open",
        None,
        "3101",
        "Malformed syntax - state 'open' is not one of OPEN, CLOSED, PENDING_SETTLEMENT, SETTLED, ABORTED",
    );
    refuse(
        "GET",
        "/settlementWindows?participantId=x",
        None,
        "3101",
        "Malformed syntax - participantId 'x' is not an integer",
    );
    // participantId 0 is an integer: it finds nothing.
    refuse(
        "GET",
        "/settlementWindows?participantId=0",
        None,
        "3100",
        "Generic validation error - settlementWindow by filters: {participantId:0} not found",
    );
    // A currency a participant has already: central-ledger's 3000 and
    // words, which the onboarding collections look for; a second initial
    // limit: "already set".
    let again = s.hub.admin(
        "POST",
        "/participants",
        Some(&json!({"name": "testfsp1", "currency": "USD"})),
    );
    assert_error_response(&again, 400, "3000");
    assert_eq!(
        description(&again),
        "Generic client error - Participant currency has already been registered: 'testfsp1' holds USD"
    );
    let again = s.hub.admin(
        "POST",
        "/participants/testfsp1/initialPositionAndLimits",
        Some(&json!({"currency": "USD", "limit": {"type": "NET_DEBIT_CAP", "value": 5}, "initialPosition": 0})),
    );
    assert_error_response(&again, 400, "3000");
    assert!(description(&again).contains("already set"), "{again:?}");
    refuse(
        "GET",
        "/settlementWindows?state=SETTLED",
        None,
        "3100",
        "Generic validation error - settlementWindow by filters: {state:SETTLED} not found",
    );
    refuse(
        "POST",
        "/settlementWindows/1",
        Some(json!({"state": "CLOSE", "reason": "x"})),
        "3100",
        "Generic validation error - state must be CLOSED",
    );
    refuse(
        "POST",
        "/settlementWindows/99",
        Some(json!({"state": "CLOSED", "reason": "x"})),
        "3100",
        "Generic validation error - Window 99 does not exist",
    );
    s.transfer("testfsp1", "testfsp2", 10);
    let window = s.open_window();
    refuse(
        "POST",
        "/settlements",
        Some(
            json!({"settlementModel": "DEFERREDNETUSD", "reason": "r", "settlementWindows": [{"id": window}]}),
        ),
        "3100",
        &format!("Generic validation error - Inapplicable windows {window}: it is OPEN"),
    );
    refuse(
        "POST",
        "/settlements",
        Some(
            json!({"settlementModel": "NOPE", "reason": "r", "settlementWindows": [{"id": window}]}),
        ),
        "3100",
        "Generic validation error - Settlement model not found: NOPE",
    );
    refuse(
        "GET",
        "/settlements/42",
        None,
        "3100",
        "Generic validation error - Settlement with ID '42' not found",
    );
    s.close(window);
    let created = s.create("DEFERREDNETUSD", window);
    let id = created["id"].as_u64().unwrap();
    refuse(
        "PUT",
        &format!("/settlements/{id}"),
        Some(json!({"state": "ABORTED"})),
        "3102",
        "Missing mandatory element - State and reason are mandatory",
    );
    refuse(
        "PUT",
        &format!("/settlements/{id}"),
        Some(json!({"participants": [], "state": "ABORTED", "reason": "r"})),
        "3100",
        "Generic validation error - No other properties are allowed when participants is provided",
    );
    // Per-account problems are inside a 200.
    let participant = created["participants"][0]["id"].clone();
    let answer = s.v2_ok(
        "PUT",
        &format!("/settlements/{id}"),
        Some(json!({"participants": [{"id": participant, "accounts": [
            {"id": 9999, "state": "PS_TRANSFERS_RECORDED", "reason": "r"}
        ]}]})),
    );
    assert_eq!(
        answer["participants"][0]["accounts"][0]["errorInformation"],
        json!({"errorCode": "3000", "errorDescription": "Generic client error - Account not found"})
    );
    refuse(
        "GET",
        &format!("/settlements/{id}/participants/9999"),
        None,
        "3100",
        &format!("Generic validation error - Participant with ID '9999' is not part of settlement '{id}'"),
    );
    let account = created["participants"][0]["accounts"][0]["id"]
        .as_u64()
        .unwrap();
    let one = s.v2_ok(
        "GET",
        &format!("/settlements/{id}/participants/{participant}/accounts/{account}"),
        None,
    );
    assert_eq!(
        one["participants"][0]["accounts"].as_array().unwrap().len(),
        1
    );
}

#[test]
fn abort_gives_the_window_back_and_finalize_settles_in_one_call() {
    let s = Settlement::new();
    let before = s.positions();
    let liquidity = s.liquidity();
    s.the_six_transfers();
    let after = s.positions();
    let window = s.open_window();
    s.close(window);
    let created = s.create("DEFERREDNETUSD", window);
    let recorded = s.advance(&created, "PS_TRANSFERS_RECORDED");
    s.advance(&recorded, "PS_TRANSFERS_RESERVED");
    let id = created["id"].as_u64().unwrap();
    let aborted = s.v2_ok(
        "PUT",
        &format!("/settlements/{id}"),
        Some(json!({"state": "ABORTED", "reason": "wrong figures"})),
    );
    assert_eq!(
        aborted,
        json!({"id": id, "state": "ABORTED", "reason": "wrong figures"})
    );
    assert_eq!(s.positions(), after, "resets given back");
    let window_now = s.v2_ok("GET", &format!("/settlementWindows/{window}"), None);
    assert_eq!(window_now["state"], "ABORTED");

    // Settled again, in one call this time.
    let again = s.create("DEFERREDNETUSD", window);
    let id = again["id"].as_u64().unwrap();
    let done = s.v2_ok(
        "POST",
        &format!("/settlements/{id}/finalize"),
        Some(json!({"reason": "bank file 7", "externalReference": "BANK-7"})),
    );
    assert_eq!(done["state"], "SETTLED");
    assert_eq!(done["settlementWindows"][0]["state"], "SETTLED");
    assert_eq!(s.positions(), before);
    // Senders paid out of their liquidity, recipients were paid into theirs
    // (a SETTLEMENT balance is negative by the liquidity it holds).
    let moved: Vec<f64> = s
        .liquidity()
        .iter()
        .zip(&liquidity)
        .map(|(now, was)| now - was)
        .collect();
    assert_eq!(moved, [80.0, -75.0, -10.0, 5.0]);
    // Once settled, it cannot be aborted or finalized again.
    for (method, path, body) in [
        (
            "PUT",
            format!("/settlements/{id}"),
            json!({"state": "ABORTED", "reason": "late"}),
        ),
        ("POST", format!("/settlements/{id}/finalize"), json!({})),
    ] {
        let response = s.v2(method, &path, Some(body));
        assert_error_response(&response, 400, "3100");
    }
    let audit = kasi()
        .args(["audit", "--data-dir"])
        .arg(&s.hub.data_dir)
        .output()
        .unwrap();
    assert!(
        audit.status.success(),
        "{}",
        String::from_utf8_lossy(&audit.stderr)
    );
    drop(s.dir);
}

#[test]
fn a_gross_model_settles_each_transfer_as_it_commits() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup_with_models(&[json!({
        "name": "CGS",
        "settlementGranularity": "GROSS",
        "settlementInterchange": "BILATERAL",
        "settlementDelay": "IMMEDIATE",
        "requireLiquidityCheck": true,
        "ledgerAccountType": "POSITION",
        "settlementAccountType": "SETTLEMENT",
        "autoPositionReset": false,
        "currency": "USD"
    })]);
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    hub.onboard(PAYER, &payer.base_url(), 10_000, 5_000);
    hub.onboard(PAYEE, &payee.base_url(), 10_000, 5_000);
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "100", far_future());
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    payee.expect("POST", "/transfers");
    let response = hub.fulfil(&id, PAYEE, PAYER, &fulfil_body(FULFILMENT, "COMMITTED"));
    assert_eq!(response.status, 200);
    payer.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(hub.position(PAYER), 0.0);
    assert_eq!(hub.position(PAYEE), 0.0);
    assert_eq!(hub.account_value(PAYER, "SETTLEMENT"), -4_900.0);
    assert_eq!(hub.account_value(PAYEE, "SETTLEMENT"), -5_100.0);
    // A settlement cannot be made of a gross model.
    let response = hub.admin(
        "POST",
        "/v2/settlements",
        Some(&json!({"settlementModel": "CGS", "reason": "r", "settlementWindows": [{"id": 1}]})),
    );
    assert_error_response(&response, 400, "3100");
    assert_eq!(
        description(&response),
        "Generic validation error - Settlement can not be created for GROSS or IMMEDIATE models"
    );
}

/// `HH:MM:SS` (UTC) of `ms` since the epoch.
fn utc_time_of_day(ms: i64) -> String {
    let seconds = ms.div_euclid(1_000).rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3_600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// Polls `check` until it holds or `within` passes (the hub's clockwork
/// runs on its own schedule; there is no event to wait on from outside).
fn eventually(within: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    check()
}

#[test]
fn windows_close_on_schedule_and_positions_near_the_cap_raise_an_alarm() {
    let dir = tempfile::tempdir().unwrap();
    let close_at = utc_time_of_day(now_ms() + 4_000);
    let hub = Hub::start_with(
        &dir.path().join("data"),
        &[
            "--settlement-close-at",
            &close_at,
            "--position-alarm-percent",
            "50",
            "--position-watch-interval-ms",
            "50",
        ],
    );
    hub.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    hub.onboard(PAYER, &payer.base_url(), 1_000, 5_000);
    hub.onboard(PAYEE, &payee.base_url(), 1_000, 5_000);
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "600", far_future());
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    payee.expect("POST", "/transfers");
    assert_eq!(
        hub.fulfil(&id, PAYEE, PAYER, &fulfil_body(FULFILMENT, "COMMITTED"))
            .status,
        200
    );
    payer.expect("PUT", &format!("/transfers/{id}"));

    hub.await_metric_line(&format!(
        "kasi_position_alarm{{participant=\"{PAYER}\",currency=\"USD\"}} 1"
    ));
    hub.await_log("position reached the alarm share");

    let closed = || {
        hub.admin("GET", "/v2/settlementWindows?state=CLOSED", None)
            .status
            == 200
    };
    assert!(
        eventually(std::time::Duration::from_secs(15), closed),
        "no window closed at {close_at}: {}",
        hub.log()
    );
    hub.await_metric_line("kasi_settlement_windows_closed_total{trigger=\"schedule\"} 1");
    let open = hub
        .admin("GET", "/v2/settlementWindows?state=OPEN", None)
        .json();
    assert_eq!(open[0]["settlementWindowId"], 2);
}

#[test]
fn two_models_on_one_window_keep_it_pending_until_both_settle() {
    let s = Settlement::new();
    s.hub.admin_expect(
        "POST",
        "/participants/Hub/accounts",
        Some(json!({"type": "HUB_MULTILATERAL_SETTLEMENT", "currency": "EUR"})),
        201,
    );
    s.hub.admin_expect(
        "POST",
        "/participants/Hub/accounts",
        Some(json!({"type": "HUB_RECONCILIATION", "currency": "EUR"})),
        201,
    );
    // EUR is settled by the default model.
    s.hub.admin_expect(
        "POST",
        "/settlementModels",
        Some(json!({
            "name": "DEFAULTNET",
            "settlementGranularity": "NET",
            "settlementInterchange": "MULTILATERAL",
            "settlementDelay": "DEFERRED",
            "requireLiquidityCheck": true,
            "ledgerAccountType": "POSITION",
            "settlementAccountType": "SETTLEMENT",
            "autoPositionReset": true
        })),
        201,
    );
    // As central-ledger answers: a model without a currency says null.
    let models = s
        .hub
        .admin_expect("GET", "/settlementModels", None, 200)
        .json();
    let currency_of = |name: &str| {
        let model = models
            .as_array()
            .unwrap()
            .iter()
            .find(|model| model["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {models}"));
        model
            .as_object()
            .unwrap()
            .get("currency")
            .cloned()
            .unwrap_or_else(|| panic!("{name} has no currency key: {model}"))
    };
    assert_eq!(currency_of("DEFAULTNET"), Value::Null);
    assert_eq!(currency_of("DEFERREDNETUSD"), json!("USD"));
    // central-ledger's key for the ledger account type in its answers.
    for model in models.as_array().unwrap() {
        assert_eq!(model["ledgerAccountTypeId"], "POSITION", "{model}");
    }
    for name in ["testfsp1", "testfsp2"] {
        s.hub.add_currency(name, "EUR", 1000, 1000);
    }
    s.transfer("testfsp1", "testfsp2", 10);
    let id = new_id();
    let body = prepare_body(&id, "testfsp2", "testfsp1", "7", far_future()).replace("USD", "EUR");
    assert_eq!(s.hub.prepare("testfsp2", "testfsp1", &body).status, 202);
    s.stub("testfsp1").expect("POST", "/transfers");
    s.hub.fulfil(
        &id,
        "testfsp1",
        "testfsp2",
        &fulfil_body(FULFILMENT, "COMMITTED"),
    );
    s.stub("testfsp2")
        .expect("PUT", &format!("/transfers/{id}"));
    s.stub("testfsp1")
        .expect("PUT", &format!("/transfers/{id}"));

    let window = s.open_window();
    s.close(window);
    let closed = s.v2_ok("GET", &format!("/settlementWindows/{window}"), None);
    let mut currencies: Vec<&str> = closed["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["currencyId"].as_str().unwrap())
        .collect();
    currencies.sort_unstable();
    assert_eq!(currencies, ["EUR", "USD"]);

    // A window of USD alone is not the default model's: the refusal names
    // the model that settles it.
    s.transfer("testfsp1", "testfsp2", 3);
    let usd_only = s.open_window();
    s.close(usd_only);
    let refused = s.v2(
        "POST",
        "/settlements",
        Some(json!({"settlementModel": "DEFAULTNET", "reason": "r", "settlementWindows": [{"id": usd_only}]})),
    );
    assert_eq!(refused.status, 400, "{refused:?}");
    assert_eq!(
        refused.json()["errorInformation"],
        json!({
            "errorCode": "3100",
            "errorDescription": format!("Generic validation error - Inapplicable windows {usd_only}: its USD content is settled by model DEFERREDNETUSD"),
        })
    );

    let finalize = |settlement: &Value| {
        let id = settlement["id"].as_u64().unwrap();
        s.v2_ok(
            "POST",
            &format!("/settlements/{id}/finalize"),
            Some(json!({"reason": "r"})),
        )
    };
    let content_states = |window: &Value| {
        let mut states: Vec<(String, String)> = window["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["currencyId"].as_str().unwrap().to_string(),
                    c["state"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        states.sort_unstable();
        states
    };
    let pair = |currency: &str, state: &str| (currency.to_string(), state.to_string());
    // The USD content settled first, alone: the window waits for its EUR
    // content (central-settlement's roll-up: SETTLED once all content is).
    let usd = s.create("DEFERREDNETUSD", window);
    let first = finalize(&usd);
    assert_eq!(first["state"], "SETTLED");
    assert_eq!(first["settlementWindows"][0]["state"], "PENDING_SETTLEMENT");
    let pending = s.v2_ok("GET", &format!("/settlementWindows/{window}"), None);
    assert_eq!(pending["state"], "PENDING_SETTLEMENT", "{pending}");
    assert_eq!(
        content_states(&pending),
        [pair("EUR", "CLOSED"), pair("USD", "SETTLED")]
    );
    let eur = s.create("DEFAULTNET", window);
    for (settlement, currency) in [(&usd, "USD"), (&eur, "EUR")] {
        for participant in settlement["participants"].as_array().unwrap() {
            for account in participant["accounts"].as_array().unwrap() {
                assert_eq!(account["netSettlementAmount"]["currency"], currency);
            }
        }
    }
    let second = finalize(&eur);
    assert_eq!(second["settlementWindows"][0]["state"], "SETTLED");
    let window_now = s.v2_ok("GET", &format!("/settlementWindows/{window}"), None);
    assert_eq!(window_now["state"], "SETTLED");
    assert_eq!(
        content_states(&window_now),
        [pair("EUR", "SETTLED"), pair("USD", "SETTLED")]
    );
}
