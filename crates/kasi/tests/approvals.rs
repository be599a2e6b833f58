//! Maker/checker (four-eyes) end to end, with the real binary: a held
//! change waits as a pending change (202), the maker cannot decide it, a
//! second person whose role may make it approves (then it applies, against
//! the ledger as it is then) or rejects it; it expires; it survives a
//! restart, on SQLite and on PostgreSQL; each step is in the audit trail
//! with how its actor signed in.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{admin_token, new_id, Hub, Response, Scenario, PAYER};

/// The operator (alice, the scenario's), bob (operator), carol (finance)
/// and vic (viewer).
struct People {
    alice: String,
    bob: String,
    carol: String,
    vic: String,
}

/// A hub started with `flags` (four-eyes ones among them) and the tokens
/// file of [`People`], the payer and payee onboarded (cap 10,000, 5,000
/// deposited). `without_test_default`: the binary's own default, not the
/// harness's `KASI_FOUR_EYES=none`.
fn start_with(flags: &[&str], without_test_default: bool) -> (Scenario, People) {
    let dir = tempfile::tempdir().unwrap();
    let (people, file) = people(dir.path());
    let mut args = vec!["--admin-tokens", file.to_str().unwrap()];
    args.extend_from_slice(flags);
    let data = dir.path().join("data");
    let mut command = Hub::serve_command(&data, &args);
    if without_test_default {
        command.env_remove("KASI_FOUR_EYES");
    }
    let mut hub = Hub::spawn(command, &data);
    hub.admin_bearer = Some(people.alice.clone());
    let scenario = Scenario::on(hub, dir, 10_000, 5_000);
    (scenario, people)
}

/// [`People`] and their tokens file, written in `dir`.
fn people(dir: &Path) -> (People, PathBuf) {
    let (alice, alice_line) = admin_token("alice", "operator");
    let (bob, bob_line) = admin_token("bob", "operator");
    let (carol, carol_line) = admin_token("carol", "finance");
    let (vic, vic_line) = admin_token("vic", "viewer");
    let file = dir.join("admin-tokens");
    std::fs::write(
        &file,
        format!("{alice_line}\n{bob_line}\n{carol_line}\n{vic_line}\n"),
    )
    .unwrap();
    let people = People {
        alice,
        bob,
        carol,
        vic,
    };
    (people, file)
}

fn start(flags: &[&str]) -> (Scenario, People) {
    start_with(flags, false)
}

fn call(hub: &Hub, token: &str, method: &str, path: &str, body: Option<&Value>) -> Response {
    hub.admin_as(Some(token), method, path, body)
}

/// Asks for a held change as `token`'s holder: answered 202 with the
/// pending change.
fn ask(hub: &Hub, token: &str, method: &str, path: &str, body: &Value) -> Value {
    let response = call(hub, token, method, path, Some(body));
    assert_eq!(response.status, 202, "{method} {path}: {response:?}");
    let pending = response.json();
    assert_eq!(pending["state"], "pending", "{pending}");
    assert_eq!(pending["request"]["body"], body.to_string());
    pending
}

fn decide(hub: &Hub, token: &str, id: &Value, decision: &str, reason: &str) -> Response {
    call(
        hub,
        token,
        "POST",
        &format!("/approvals/{}", id.as_str().unwrap()),
        Some(&json!({"decision": decision, "reason": reason})),
    )
}

/// `GET /approvals/{id}`.
fn shown(hub: &Hub, id: &Value) -> Value {
    let path = format!("/approvals/{}", id.as_str().unwrap());
    hub.admin_expect("GET", &path, None, 200).json()
}

fn net_debit_cap(hub: &Hub) -> f64 {
    let limits = hub
        .admin_expect("GET", &format!("/participants/{PAYER}/limits"), None, 200)
        .json();
    let value = &limits[0]["limit"]["value"];
    value
        .as_f64()
        .or_else(|| value.as_str().and_then(|v| v.parse().ok()))
        .unwrap_or_else(|| panic!("no cap in {limits}"))
}

fn cap_change(value: u64) -> Value {
    json!({"currency": "USD", "limit": {"type": "NET_DEBIT_CAP", "value": value}})
}

fn funds_out(amount: u64) -> Value {
    json!({
        "transferId": new_id(), "externalReference": "ref",
        "action": "recordFundsOutPrepareReserve", "reason": "payout",
        "amount": {"amount": amount.to_string(), "currency": "USD"}
    })
}

fn settlement_path(hub: &Hub) -> String {
    format!(
        "/participants/{PAYER}/accounts/{}",
        hub.account_id(PAYER, "SETTLEMENT")
    )
}

/// The audit trail's `approval.*` actions about pending change `id`, oldest
/// first.
fn approval_steps(hub: &Hub, id: &Value) -> Vec<String> {
    let events = hub.admin_expect("GET", "/audit-events", None, 200).json();
    let target = format!("approval/{}", id.as_str().unwrap());
    let mut steps: Vec<String> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["target"] == json!(target))
        .map(|event| event["action"].as_str().unwrap().to_string())
        .collect();
    steps.reverse();
    steps
}

/// Waits until pending change `id` has a second step: the hub marks it
/// expired by itself (nobody reads the approvals meanwhile).
fn await_expiry(hub: &Hub, id: &Value) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while approval_steps(hub, id).len() < 2 {
        assert!(Instant::now() < deadline, "never expired");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_maker_cannot_approve_and_a_second_person_applies_the_change() {
    let (scenario, people) = start(&["--four-eyes", "net-debit-cap,funds-out"]);
    let hub = &scenario.hub;
    let limits = format!("/participants/{PAYER}/limits");
    let pending = ask(hub, &people.carol, "PUT", &limits, &cap_change(7_000));
    assert_eq!(pending["action"], "net-debit-cap");
    assert_eq!(pending["target"], PAYER);
    assert_eq!(pending["requestedBy"]["name"], "carol");
    assert_eq!(pending["requestedBy"]["role"], "finance");
    assert_eq!(net_debit_cap(hub), 10_000.0, "held, not applied");
    // The hub looks at its pending changes every second.
    hub.await_metrics("one change pending", |metrics| {
        metrics
            .lines()
            .any(|line| line == "kasi_approvals_pending 1")
            .then_some(())
    });

    let own = decide(hub, &people.carol, &pending["id"], "approve", "mine");
    assert_eq!(own.status, 403, "the maker approving: {own:?}");
    assert!(own.text().contains("different person"), "{own:?}");
    let viewer = decide(hub, &people.vic, &pending["id"], "approve", "");
    assert_eq!(viewer.status, 403, "a viewer may not decide: {viewer:?}");
    assert_eq!(net_debit_cap(hub), 10_000.0);

    let listed = call(hub, &people.vic, "GET", "/approvals", None);
    assert_eq!(listed.status, 200, "{listed:?}");
    assert_eq!(listed.json()[0]["id"], pending["id"]);

    let approved = decide(hub, &people.bob, &pending["id"], "approve", "checked");
    assert_eq!(approved.status, 200, "{approved:?}");
    let approved = approved.json();
    assert_eq!(approved["state"], "applied", "{approved}");
    assert_eq!(approved["decidedBy"]["name"], "bob");
    assert_eq!(net_debit_cap(hub), 7_000.0, "applied at approval");
    let again = decide(hub, &people.alice, &pending["id"], "approve", "");
    assert_eq!(again.status, 409, "decided once: {again:?}");
    assert_eq!(
        approval_steps(hub, &pending["id"]),
        [
            "approval.requested",
            "approval.approved",
            "approval.applied"
        ]
    );
    hub.await_metrics("the steps counted, nothing pending", |metrics| {
        let counted = |step: &str| {
            let series =
                format!("kasi_approvals_total{{action=\"net-debit-cap\",step=\"{step}\"}} 1");
            metrics.lines().any(|line| line == series)
        };
        (["requested", "approved", "applied"]
            .into_iter()
            .all(counted)
            && !counted("rejected")
            && metrics
                .lines()
                .any(|line| line == "kasi_approvals_pending 0"))
        .then_some(())
    });
    // The change itself is the approver's, in the audit trail as always.
    let events = hub
        .admin_expect("GET", "/audit-events?actor=bob", None, 200)
        .json();
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|event| event["target"] == PAYER
                && event["outcome"] == "DONE"
                && event["source"] == "tokens-file"),
        "{events}"
    );
}

#[test]
fn a_rejected_change_never_applies() {
    let (scenario, people) = start(&["--four-eyes", "funds-out"]);
    let hub = &scenario.hub;
    let before = hub.account_value(PAYER, "SETTLEMENT");
    let pending = ask(
        hub,
        &people.carol,
        "POST",
        &settlement_path(hub),
        &funds_out(1_000),
    );
    let rejected = decide(hub, &people.alice, &pending["id"], "reject", "no invoice");
    assert_eq!(rejected.status, 200, "{rejected:?}");
    let rejected = rejected.json();
    assert_eq!(rejected["state"], "rejected");
    assert_eq!(rejected["decisionReason"], "no invoice");
    let again = decide(hub, &people.bob, &pending["id"], "approve", "");
    assert_eq!(again.status, 409, "{again:?}");
    assert_eq!(hub.account_value(PAYER, "SETTLEMENT"), before);
    assert_eq!(
        approval_steps(hub, &pending["id"]),
        ["approval.requested", "approval.rejected"]
    );
}

#[test]
fn an_undecided_change_expires() {
    let (scenario, people) = start(&["--four-eyes", "funds-out", "--four-eyes-expiry", "1s"]);
    let hub = &scenario.hub;
    let pending = ask(
        hub,
        &people.carol,
        "POST",
        &settlement_path(hub),
        &funds_out(10),
    );
    await_expiry(hub, &pending["id"]);
    assert_eq!(shown(hub, &pending["id"])["state"], "expired");
    let late = decide(hub, &people.bob, &pending["id"], "approve", "");
    assert_eq!(late.status, 409, "{late:?}");
    assert_eq!(
        approval_steps(hub, &pending["id"]),
        ["approval.requested", "approval.expired"]
    );
}

#[test]
fn a_pending_change_survives_a_restart_and_applies_after_it() {
    let (mut scenario, people) = start(&["--four-eyes", "net-debit-cap"]);
    let limits = format!("/participants/{PAYER}/limits");
    let pending = ask(
        &scenario.hub,
        &people.carol,
        "PUT",
        &limits,
        &cap_change(8_000),
    );
    scenario.hub.terminate();
    let tokens = scenario.dir.path().join("admin-tokens");
    let mut hub = Hub::start_with(
        &scenario.dir.path().join("data"),
        &[
            "--admin-tokens",
            tokens.to_str().unwrap(),
            "--four-eyes",
            "net-debit-cap",
        ],
    );
    hub.admin_bearer = Some(people.alice.clone());
    let shown = shown(&hub, &pending["id"]);
    assert_eq!(shown["state"], "pending", "{shown}");
    assert_eq!(shown["request"], pending["request"]);
    let approved = decide(&hub, &people.alice, &pending["id"], "approve", "");
    assert_eq!(approved.status, 200, "{approved:?}");
    assert_eq!(net_debit_cap(&hub), 8_000.0);
}

#[test]
fn a_funds_out_approved_after_the_balance_dropped_is_refused_with_the_reason() {
    let (scenario, people) = start(&["--four-eyes", "funds-out"]);
    let hub = &scenario.hub;
    let first = ask(
        hub,
        &people.carol,
        "POST",
        &settlement_path(hub),
        &funds_out(4_000),
    );
    let second = ask(
        hub,
        &people.carol,
        "POST",
        &settlement_path(hub),
        &funds_out(3_000),
    );
    let applied = decide(hub, &people.bob, &second["id"], "approve", "");
    assert_eq!(applied.status, 200, "{applied:?}");
    let refused = decide(hub, &people.bob, &first["id"], "approve", "ok");
    assert_eq!(refused.status, 409, "{refused:?}");
    let refused = refused.json();
    assert_eq!(refused["state"], "failed", "{refused}");
    let reason = refused["decisionReason"].as_str().unwrap();
    assert!(reason.contains("refused when applied"), "{reason}");
    assert!(
        reason.contains("ok"),
        "the approver's reason stays: {reason}"
    );
    let shown = shown(hub, &first["id"]);
    assert_eq!(shown["state"], "failed");
    assert_eq!(
        approval_steps(hub, &first["id"]),
        ["approval.requested", "approval.approved", "approval.failed"]
    );
}

#[test]
fn by_default_the_cap_waits_and_funds_in_applies_at_once() {
    let (scenario, people) = start_with(&[], true);
    let hub = &scenario.hub;
    let limits = format!("/participants/{PAYER}/limits");
    ask(hub, &people.carol, "PUT", &limits, &cap_change(9_000));
    assert_eq!(net_debit_cap(hub), 10_000.0);
    let before = hub.account_value(PAYER, "SETTLEMENT");
    let funds_in = json!({
        "transferId": new_id(), "externalReference": "ref",
        "action": "recordFundsIn", "reason": "top up",
        "amount": {"amount": "100", "currency": "USD"}
    });
    let response = call(
        hub,
        &people.carol,
        "POST",
        &settlement_path(hub),
        Some(&funds_in),
    );
    assert_eq!(response.status, 202, "{response:?}");
    assert!(response.text().is_empty(), "not held: {response:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while hub.account_value(PAYER, "SETTLEMENT") == before {
        assert!(Instant::now() < deadline, "funds in never applied");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The console's session cookie and CSRF token of `token`'s holder, and
/// the Approvals page as they see it.
fn approvals_page(hub: &Hub, token: &str) -> (String, String, String) {
    let cookie = support::console_sign_in(hub.admin, token);
    let page = support::http(
        hub.admin,
        "GET",
        "/console/approvals",
        &[("Cookie".to_string(), cookie.clone())],
        b"",
    );
    assert_eq!(page.status, 200, "{page:?}");
    let html = page.text();
    let csrf = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a CSRF token on the page")
        .to_string();
    (cookie, csrf, html)
}

/// A console form `body` posted to `path` with `cookie`'s session.
fn console_form(hub: &Hub, cookie: &str, path: &str, body: &str) -> Response {
    support::http(
        hub.admin,
        "POST",
        path,
        &[
            ("Cookie".to_string(), cookie.to_string()),
            (
                "Content-Type".to_string(),
                "application/x-www-form-urlencoded".to_string(),
            ),
        ],
        body.as_bytes(),
    )
}

#[test]
fn the_console_lists_pending_changes_and_a_second_person_approves_there() {
    let (scenario, people) = start(&["--four-eyes", "net-debit-cap"]);
    let hub = &scenario.hub;
    let limits = format!("/participants/{PAYER}/limits");
    let pending = ask(hub, &people.carol, "PUT", &limits, &cap_change(6_000));
    let id = pending["id"].as_str().unwrap();
    let form = format!("action=\"/console/approvals/{id}\"");

    let (maker_cookie, maker_csrf, _) = approvals_page(hub, &people.carol);
    let form_post = |cookie: &str, path: &str, body: String| console_form(hub, cookie, path, &body);
    // The console's own cap form is held the same way, and says so.
    let held = form_post(
        &maker_cookie,
        &format!("/console/participants/{PAYER}/limits"),
        format!("csrf={maker_csrf}&currency=USD&value=5000&reason=holiday+peak"),
    );
    assert_eq!(held.status, 303, "{held:?}");
    // Kept with the maker's why, from the form's reason.
    let listed = hub.admin_expect("GET", "/approvals", None, 200).json();
    let from_console = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|change| change["request"]["body"].to_string().contains("5000"))
        .unwrap_or_else(|| panic!("the console's cap change is pending: {listed}"));
    assert_eq!(from_console["reason"], "holiday peak", "{from_console}");
    let told = support::http(
        hub.admin,
        "GET",
        &format!("/console/participants/{PAYER}"),
        &[("Cookie".to_string(), maker_cookie.clone())],
        b"",
    )
    .text();
    assert!(
        told.contains("Waiting for a second person: net-debit-cap of payerfsp"),
        "{told}"
    );
    assert_eq!(net_debit_cap(hub), 10_000.0);
    let (_, _, maker) = approvals_page(hub, &people.carol);
    assert!(maker.contains(id), "the maker sees it");
    assert!(!maker.contains(&form), "but may not decide it");
    assert!(maker.contains("asked by you"));
    let (_, _, viewer) = approvals_page(hub, &people.vic);
    assert!(
        viewer.contains(id) && !viewer.contains(&form),
        "a viewer only reads"
    );

    let (cookie, csrf, checker) = approvals_page(hub, &people.bob);
    assert!(checker.contains(&form), "{checker}");
    let posted = form_post(
        &cookie,
        &format!("/console/approvals/{id}"),
        format!("csrf={csrf}&decision=approve&reason=checked"),
    );
    assert_eq!(posted.status, 303, "{posted:?}");
    assert_eq!(net_debit_cap(hub), 6_000.0, "applied from the console");
    let after = support::http(
        hub.admin,
        "GET",
        "/console/approvals",
        &[("Cookie".to_string(), cookie)],
        b"",
    )
    .text();
    assert!(
        after.contains("net-debit-cap of payerfsp applied"),
        "the flash: {after}"
    );
}

/// `participant-deactivate` holds every way of pausing: a participant's
/// `isActive` false or 0 (central-ledger takes both), a mode other than
/// active, a currency account's `isActive` false or 0; activating is not
/// held.
#[test]
fn every_spelling_of_a_deactivation_is_held() {
    let (scenario, people) = start(&["--four-eyes", "participant-deactivate"]);
    let hub = &scenario.hub;
    let participant = format!("/participants/{PAYER}");
    let account = settlement_path(hub);
    for (path, body) in [
        (&participant, json!({"isActive": false})),
        (&participant, json!({"isActive": 0})),
        (&participant, json!({"mode": "suspended"})),
        (&account, json!({"isActive": false})),
        (&account, json!({"isActive": 0})),
    ] {
        let pending = ask(hub, &people.bob, "PUT", path, &body);
        assert_eq!(pending["action"], "participant-deactivate", "{body}");
        assert_eq!(pending["state"], "pending", "{body}");
    }
    let shown = hub.admin_expect("GET", &participant, None, 200).json();
    assert_eq!(
        (shown["isActive"].clone(), shown["mode"].clone()),
        (json!(1), json!("active"))
    );
    let accounts = hub
        .admin_expect("GET", &format!("{participant}/accounts"), None, 200)
        .json();
    assert!(
        accounts
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["isActive"] == 1),
        "no account disabled: {accounts}"
    );
    let activated = call(
        hub,
        &people.bob,
        "PUT",
        &participant,
        Some(&json!({"isActive": 1})),
    );
    assert_eq!(
        activated.status, 200,
        "activating is not held: {activated:?}"
    );
}

/// Approving a change that moves money is irreversible for the approver:
/// the console first shows what it moves (the amount) and applies it only
/// once confirmed; a net debit cap change is approved at once.
#[test]
fn the_console_asks_the_approver_to_confirm_a_money_movement_with_its_amount() {
    let (scenario, people) = start(&["--four-eyes", "funds-out,net-debit-cap"]);
    let hub = &scenario.hub;
    let pending = ask(
        hub,
        &people.carol,
        "POST",
        &settlement_path(hub),
        &funds_out(1_234),
    );
    let id = pending["id"].as_str().unwrap();
    let before = hub.account_value(PAYER, "SETTLEMENT");
    let (cookie, csrf, _) = approvals_page(hub, &people.bob);
    let approve = |extra: &str| {
        let body = format!("csrf={csrf}&decision=approve&reason=checked{extra}");
        console_form(hub, &cookie, &format!("/console/approvals/{id}"), &body)
    };
    let asked = approve("");
    assert_eq!(asked.status, 200, "a confirmation page: {asked:?}");
    let page = asked.text();
    assert!(
        page.contains("Confirm: approve funds-out of payerfsp"),
        "{page}"
    );
    assert!(page.contains("1,234"), "the amount is shown: {page}");
    assert!(page.contains("name=\"confirmed\" value=\"yes\""), "{page}");
    assert_eq!(
        shown(hub, &pending["id"])["state"],
        "pending",
        "nothing applied yet"
    );
    assert_eq!(hub.account_value(PAYER, "SETTLEMENT"), before);

    let confirmed = approve("&confirmed=yes");
    assert_eq!(confirmed.status, 303, "{confirmed:?}");
    assert_eq!(shown(hub, &pending["id"])["state"], "applied");

    // A cap change moves no money: approved without a confirmation.
    let limits = format!("/participants/{PAYER}/limits");
    let cap = ask(hub, &people.carol, "PUT", &limits, &cap_change(7_000));
    let cap_id = cap["id"].as_str().unwrap();
    let posted = console_form(
        hub,
        &cookie,
        &format!("/console/approvals/{cap_id}"),
        &format!("csrf={csrf}&decision=approve&reason=ok"),
    );
    assert_eq!(posted.status, 303, "{posted:?}");
    assert_eq!(net_debit_cap(hub), 7_000.0);
}

/// Advancing a settlement in the console into a stage it cannot be taken
/// back from (its transfers committed, then SETTLED) first shows the net
/// amounts and changes nothing until confirmed; the earlier stages advance
/// at once.
#[test]
fn the_console_asks_to_confirm_advancing_a_settlement_past_abort_with_the_amounts() {
    let (s, people) = start(&[]);
    let hub = &s.hub;
    let (transfer, _) = s.reserve("321", support::far_future());
    s.fulfil(
        &transfer,
        &support::fulfil_body(support::FULFILMENT, "COMMITTED"),
    );
    s.payer.expect("PUT", &format!("/transfers/{transfer}"));
    hub.admin_expect(
        "POST",
        "/v2/settlementWindows/1",
        Some(json!({"state": "CLOSED", "reason": "test"})),
        200,
    );
    let settlement = hub
        .admin_expect(
            "POST",
            "/v2/settlements",
            Some(json!({"settlementModel": "DEFAULTDEFERREDNET", "reason": "test", "settlementWindows": [{"id": 1}]})),
            200,
        )
        .json();
    let id = settlement["id"].to_string();
    let state = || {
        hub.admin_expect("GET", &format!("/v2/settlements/{id}"), None, 200)
            .json()["state"]
            .clone()
    };
    let (cookie, csrf, _) = approvals_page(hub, &people.alice);
    let advance = |extra: &str| {
        let path = format!("/console/settlement/settlements/{id}/advance");
        console_form(hub, &cookie, &path, &format!("csrf={csrf}{extra}"))
    };
    for reversible in ["PS_TRANSFERS_RECORDED", "PS_TRANSFERS_RESERVED"] {
        let response = advance("");
        assert_eq!(response.status, 303, "{reversible}: {response:?}");
        assert_eq!(state(), reversible);
    }
    for (before, last) in [
        ("PS_TRANSFERS_RESERVED", "PS_TRANSFERS_COMMITTED"),
        ("PS_TRANSFERS_COMMITTED", "SETTLED"),
    ] {
        let asked = advance("");
        assert_eq!(asked.status, 200, "a confirmation page: {asked:?}");
        let page = asked.text();
        assert!(
            page.contains(&format!("Confirm: advance settlement {id} to {last}")),
            "{page}"
        );
        assert!(page.contains("321"), "the net amounts: {page}");
        assert_eq!(state(), before, "nothing changed before the confirmation");
        let confirmed = advance("&confirmed=yes");
        assert_eq!(confirmed.status, 303, "{confirmed:?}");
        assert_eq!(state(), last);
    }
}

/// The production configuration: a hub on a PostgreSQL store, with the
/// tokens file of [`People`], the scenario's DFSPs onboarded, and alice's
/// token on its own admin calls.
struct OnPostgres {
    scenario: Scenario,
    people: People,
    url: String,
    tokens: PathBuf,
    // Dropped after the hub, which would otherwise lose its database first.
    _cluster: testpg::Cluster,
}

impl OnPostgres {
    fn start(flags: &[&str]) -> OnPostgres {
        let cluster = testpg::Cluster::start();
        let url = cluster.create_database("hub");
        let dir = tempfile::tempdir().unwrap();
        let (people, tokens) = people(dir.path());
        let hub = OnPostgres::spawn(&dir.path().join("data"), &url, &tokens, &people, flags);
        OnPostgres {
            scenario: Scenario::on(hub, dir, 10_000, 5_000),
            people,
            url,
            tokens,
            _cluster: cluster,
        }
    }

    fn spawn(data: &Path, url: &str, tokens: &Path, people: &People, flags: &[&str]) -> Hub {
        let mut args = vec!["--admin-tokens", tokens.to_str().unwrap()];
        args.extend_from_slice(flags);
        let mut hub = Hub::spawn(
            Hub::postgres_command(data, url, "solo", 120_000, &args),
            data,
        );
        hub.admin_bearer = Some(people.alice.clone());
        hub
    }

    /// Stops the hub and starts it again on the same database, with
    /// `flags`: what it knows from then on, it read from PostgreSQL.
    fn restart(&mut self, flags: &[&str]) {
        self.scenario.hub.terminate();
        let data = self.scenario.dir.path().join("data");
        self.scenario.hub = OnPostgres::spawn(&data, &self.url, &self.tokens, &self.people, flags);
    }

    fn hub(&self) -> &Hub {
        &self.scenario.hub
    }
}

/// The audit events about pending change `id`, oldest first.
fn approval_events(hub: &Hub, id: &Value) -> Vec<Value> {
    let events = hub.admin_expect("GET", "/audit-events", None, 200).json();
    let target = format!("approval/{}", id.as_str().unwrap());
    let mut events: Vec<Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["target"] == json!(target))
        .cloned()
        .collect();
    events.reverse();
    events
}

#[test]
fn on_postgresql_a_change_asked_before_a_restart_is_approved_and_applied_after_it() {
    let flags = ["--four-eyes", "net-debit-cap"];
    let mut pg = OnPostgres::start(&flags);
    let limits = format!("/participants/{PAYER}/limits");
    let pending = ask(
        pg.hub(),
        &pg.people.carol,
        "PUT",
        &limits,
        &cap_change(7_000),
    );
    assert_eq!(pending["requestedBy"]["source"], "tokens-file", "{pending}");

    pg.restart(&flags);
    let hub = pg.hub();
    let held = shown(hub, &pending["id"]);
    assert_eq!(held["state"], "pending", "{held}");
    assert_eq!(held["request"], pending["request"]);
    assert_eq!(held["requestedBy"], pending["requestedBy"]);
    assert_eq!(net_debit_cap(hub), 10_000.0, "still held after the restart");
    let own = decide(hub, &pg.people.carol, &pending["id"], "approve", "");
    assert_eq!(own.status, 403, "the maker, after a restart too: {own:?}");
    let approved = decide(hub, &pg.people.bob, &pending["id"], "approve", "checked");
    assert_eq!(approved.status, 200, "{approved:?}");
    assert_eq!(approved.json()["state"], "applied", "{approved:?}");
    assert_eq!(net_debit_cap(hub), 7_000.0, "applied at approval");

    // The trail read back from PostgreSQL: who did each step, and how
    // they signed in.
    let events = approval_events(hub, &pending["id"]);
    let steps: Vec<(&str, &str, &str)> = events
        .iter()
        .map(|event| {
            (
                event["action"].as_str().unwrap(),
                event["actor"].as_str().unwrap(),
                event["source"].as_str().unwrap_or("none"),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("approval.requested", "carol", "tokens-file"),
            ("approval.approved", "bob", "tokens-file"),
            ("approval.applied", "bob", "tokens-file"),
        ],
        "{events:#?}"
    );
    // And once more after a second restart: nothing of it lived only in
    // the process.
    pg.restart(&flags);
    let hub = pg.hub();
    assert_eq!(net_debit_cap(hub), 7_000.0);
    assert_eq!(shown(hub, &pending["id"])["state"], "applied");
    assert_eq!(approval_events(hub, &pending["id"]), events);
}

#[test]
fn on_postgresql_an_expired_or_rejected_change_never_applies() {
    let mut pg = OnPostgres::start(&[
        "--four-eyes",
        "funds-out,net-debit-cap",
        "--four-eyes-expiry",
        "1s",
    ]);
    let hub = pg.hub();
    let before = hub.account_value(PAYER, "SETTLEMENT");
    let expiring = ask(
        hub,
        &pg.people.carol,
        "POST",
        &settlement_path(hub),
        &funds_out(1_000),
    );
    await_expiry(hub, &expiring["id"]);

    // Restarted with a day to decide, so that the next one waits.
    let flags = ["--four-eyes", "funds-out,net-debit-cap"];
    pg.restart(&flags);
    let hub = pg.hub();
    assert_eq!(shown(hub, &expiring["id"])["state"], "expired");
    let late = decide(hub, &pg.people.bob, &expiring["id"], "approve", "");
    assert_eq!(late.status, 409, "expired before the restart: {late:?}");
    assert_eq!(hub.account_value(PAYER, "SETTLEMENT"), before);
    let expired = approval_events(hub, &expiring["id"]);
    assert_eq!(expired.len(), 2, "{expired:#?}");
    assert_eq!(expired[1]["action"], "approval.expired");
    assert_eq!(expired[1]["actor"], "kasi", "the hub expired it");
    assert_eq!(expired[1]["source"], "hub", "{expired:#?}");
    assert_eq!(expired[0]["source"], "tokens-file", "{expired:#?}");

    let limits = format!("/participants/{PAYER}/limits");
    let refused = ask(hub, &pg.people.carol, "PUT", &limits, &cap_change(3_000));
    let rejected = decide(hub, &pg.people.bob, &refused["id"], "reject", "too low");
    assert_eq!(rejected.status, 200, "{rejected:?}");
    assert_eq!(rejected.json()["state"], "rejected");
    pg.restart(&flags);
    let hub = pg.hub();
    let again = decide(hub, &pg.people.alice, &refused["id"], "approve", "");
    assert_eq!(again.status, 409, "rejected before the restart: {again:?}");
    assert_eq!(net_debit_cap(hub), 10_000.0);
    assert_eq!(hub.account_value(PAYER, "SETTLEMENT"), before);
    assert_eq!(
        approval_steps(hub, &refused["id"]),
        ["approval.requested", "approval.rejected"]
    );
    assert_eq!(
        approval_steps(hub, &expiring["id"]),
        ["approval.requested", "approval.expired"]
    );
}
