//! `kasi sim` against a real hub: the sim onboards two DFSPs, `kasi sim
//! send` makes a whole lookup + quote + transfer happen, the hub's positions
//! move by the amount; a sim refusing every prepare makes the send fail with
//! the payee's error and leaves the positions alone. With an FXP, a send to
//! a payee paid in another currency converts through it, and the positions
//! move in both currencies.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// How long the sim may take to print an awaited line.
const LINE_WAIT: Duration = Duration::from_secs(60);

/// A running `kasi sim`, its stdout read line by line.
struct Sim {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    url: String,
}

impl Sim {
    fn start(hub: &Hub, extra: &[&str]) -> Sim {
        Sim::playing(hub, "payerfsp,payeefsp", extra)
    }

    /// A sim playing `dfsps` (its --dfsps).
    fn playing(hub: &Hub, dfsps: &str, extra: &[&str]) -> Sim {
        let mut child = kasi()
            .args(["sim", "--hub-api"])
            .arg(format!("http://{}", hub.api))
            .arg("--hub-admin")
            .arg(format!("http://{}", hub.admin))
            .args(["--dfsps", dfsps, "--onboard", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut sim = Sim {
            child,
            lines,
            seen: Vec::new(),
            url: String::new(),
        };
        let listening = sim.await_line(|line| line.starts_with("kasi sim: listening on "));
        let address = listening
            .trim_start_matches("kasi sim: listening on ")
            .split(':')
            .take(2)
            .collect::<Vec<_>>()
            .join(":");
        sim.url = format!("http://{address}");
        sim.await_line(|line| line.starts_with("ready: "));
        sim
    }

    /// Waits for the first line (from the last one taken on) that `matches`.
    fn await_line(&mut self, matches: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + LINE_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if matches(&line) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "kasi sim never printed the line awaited; it printed:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// The first MSISDN the sim says `dfsp` holds.
    fn party_of(&self, dfsp: &str) -> String {
        let prefix = format!("{dfsp} holds MSISDN ");
        let line = self
            .seen
            .iter()
            .find(|line| line.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no parties printed for {dfsp}: {:?}", self.seen));
        line[prefix.len()..]
            .split([',', ' '])
            .next()
            .unwrap()
            .to_string()
    }

    fn send(&self, from: &str, to: &str, amount: &str) -> Output {
        self.send_with(from, to, &["--amount", amount, "USD"])
    }

    fn send_with(&self, from: &str, to: &str, args: &[&str]) -> Output {
        kasi()
            .args([
                "sim", "send", "--sim", &self.url, "--from", from, "--to", to,
            ])
            .args(args)
            .output()
            .unwrap()
    }

    /// Waits until every one of `matchers` has matched a line, in any
    /// order (from the last line taken on).
    fn await_lines(&mut self, matchers: &[&dyn Fn(&str) -> bool]) {
        let mut left: Vec<_> = matchers.iter().collect();
        while !left.is_empty() {
            let line = self.await_line(|line| left.iter().any(|matches| matches(line)));
            left.retain(|matches| !matches(&line));
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn position(hub: &Hub, dfsp: &str) -> f64 {
    let answer = hub
        .admin("GET", &format!("/participants/{dfsp}/positions"), None)
        .json();
    let rows = answer.as_array().expect("an array of positions");
    let usd = rows
        .iter()
        .find(|row| row["currency"] == "USD")
        .unwrap_or_else(|| panic!("no USD position for {dfsp}: {answer}"));
    match &usd["value"] {
        Value::Number(value) => value.as_f64().unwrap(),
        Value::String(value) => value.parse().unwrap(),
        other => panic!("position of {dfsp}: {other}"),
    }
}

fn model_names(hub: &Hub) -> Vec<String> {
    let models = hub.admin("GET", "/settlementModels", None).json();
    models
        .as_array()
        .unwrap_or_else(|| panic!("{models}"))
        .iter()
        .map(|model| model["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn sim_onboards_sends_and_commits_then_rejects() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));

    let mut sim = Sim::start(&hub, &[]);
    assert!(sim.seen.iter().any(|l| l.contains("payerfsp: onboarded")));
    assert!(sim.seen.iter().any(|l| l.contains("payeefsp: onboarded")));
    // A hub without a settlement model got one for the currency.
    assert_eq!(model_names(&hub), ["DEFERREDNETUSD"]);
    let payee_party = sim.party_of("payeefsp");
    let (payer_before, payee_before) = (position(&hub, "payerfsp"), position(&hub, "payeefsp"));

    let output = sim.send("payerfsp", &format!("MSISDN:{payee_party}"), "10");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "send failed: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("1. lookup"), "{text}");
    assert!(text.contains("held by payeefsp"), "{text}");
    assert!(text.contains("2. quote"), "{text}");
    assert!(text.contains("3. transfer"), "{text}");
    assert!(
        text.lines().last().unwrap().starts_with("COMMITTED"),
        "{text}"
    );
    // The sim printed each message as the payee saw it and as the payer
    // heard back.
    sim.await_line(|l| l.contains("payeefsp <- GET /parties/MSISDN/"));
    sim.await_line(|l| l.contains("payeefsp <- POST /quotes"));
    sim.await_line(|l| l.contains("payeefsp <- POST /transfers") && l.contains("amount 10 USD"));
    sim.await_line(|l| l.contains("payerfsp <- PUT /transfers/") && l.contains("state COMMITTED"));
    sim.await_line(|l| l.contains("send: COMMITTED"));
    assert_eq!(position(&hub, "payerfsp"), payer_before + 10.0);
    assert_eq!(position(&hub, "payeefsp"), payee_before - 10.0);

    // Unknown party: the hub's 3204, exit status 1.
    let output = sim.send("payerfsp", "MSISDN:123456789", "10");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("3204"), "{text}");
    drop(sim);

    // A sim started again on the same hub: the DFSPs exist, their endpoints
    // now point at it; its payee refuses every prepare, after --delay-ms.
    let mut rejecting = Sim::start(&hub, &["--reject-percent", "100", "--delay-ms", "300"]);
    assert!(rejecting
        .seen
        .iter()
        .any(|l| l.contains("payeefsp: exists in the hub already")));
    let started = Instant::now();
    let output = rejecting.send("payerfsp", &format!("MSISDN:{payee_party}"), "7");
    assert!(started.elapsed() >= Duration::from_millis(300));
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with("error: transfer ") && last.contains("5104"),
        "{text}"
    );
    rejecting.await_line(|l| l.contains("payerfsp <- PUT /transfers/") && l.contains("/error"));
    assert_eq!(position(&hub, "payerfsp"), payer_before + 10.0);
    assert_eq!(position(&hub, "payeefsp"), payee_before - 10.0);
}

/// `kasi sim --onboard` against a hub whose admin API needs credentials:
/// without a token it says so (not "is the hub running?"), with a viewer's
/// it says the token may not change the hub, and with an operator's token
/// file — given as a flag or through `KASI_ADMIN_TOKEN_FILE` — it onboards.
#[test]
fn sim_onboards_a_hub_that_requires_an_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let (tokens_path, tokens) = tokens_file(dir.path());
    let mut hub = Hub::start_with(
        &dir.path().join("data"),
        &["--admin-tokens", tokens_path.to_str().unwrap()],
    );
    let refused = |extra: &[&str], env: Option<&std::path::Path>| {
        let mut command = kasi();
        command
            .args(["sim", "--hub-api"])
            .arg(format!("http://{}", hub.api))
            .arg("--hub-admin")
            .arg(format!("http://{}", hub.admin))
            .args(["--dfsps", "payerfsp,payeefsp", "--onboard"])
            .args(["--listen", "127.0.0.1:0"])
            .args(extra);
        if let Some(file) = env {
            command.env("KASI_ADMIN_TOKEN_FILE", file);
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let stderr = refused(&[], None);
    assert!(
        stderr.contains("401 unauthorized: the hub needs an admin token (--admin-token-file)"),
        "{stderr}"
    );
    assert!(!stderr.contains("is the hub running"), "{stderr}");
    // A viewer's token, in the environment variable, as `kasi admin-token`
    // printed it.
    let viewer_file = dir.path().join("viewer.token");
    std::fs::write(&viewer_file, format!("token: {}\n", tokens.viewer)).unwrap();
    let stderr = refused(&[], Some(&viewer_file));
    assert!(stderr.contains("403 forbidden"), "{stderr}");
    // A token the hub does not know.
    let unknown_file = dir.path().join("unknown.token");
    std::fs::write(&unknown_file, "kasi_not-a-token\n").unwrap();
    let stderr = refused(
        &["--admin-token-file", unknown_file.to_str().unwrap()],
        None,
    );
    assert!(
        stderr.contains("401 unauthorized: the hub does not accept the token"),
        "{stderr}"
    );

    let operator_file = dir.path().join("operator.token");
    std::fs::write(&operator_file, format!("{}\n", tokens.operator)).unwrap();
    let sim = Sim::start(
        &hub,
        &["--admin-token-file", operator_file.to_str().unwrap()],
    );
    assert!(sim.seen.iter().any(|l| l.contains("payerfsp: onboarded")));
    hub.admin_bearer = Some(tokens.operator.clone());
    assert_eq!(position(&hub, "payerfsp"), 0.0);
    let events = hub
        .admin_expect("GET", "/audit-events?action=participant.create", None, 200)
        .json();
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["actor"] == "alice" && e["target"] == "payeefsp"),
        "the sim's changes are the operator's: {events}"
    );
}

/// The tutorial's trap: the hub has a default model (no currency); the
/// sim keeps it rather than add a USD one that would take USD from it, so
/// the default model settles what the sim sent.
#[test]
fn sim_onboarding_keeps_the_hubs_default_settlement_model() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    let sim = Sim::start(&hub, &[]);
    assert!(sim.seen.iter().any(|l| l.contains("payeefsp: onboarded")));
    assert_eq!(model_names(&hub), ["DEFAULTDEFERREDNET"]);

    let payee_party = sim.party_of("payeefsp");
    let output = sim.send("payerfsp", &format!("MSISDN:{payee_party}"), "10");
    assert!(output.status.success(), "{output:?}");
    let closed = hub.admin(
        "POST",
        "/v2/settlementWindows/1",
        Some(&serde_json::json!({"state": "CLOSED", "reason": "end of day"})),
    );
    assert_eq!(closed.status, 200, "{closed:?}");
    let settlement = hub.admin(
        "POST",
        "/v2/settlements",
        Some(&serde_json::json!({
            "settlementModel": "DEFAULTDEFERREDNET",
            "reason": "end of day",
            "settlementWindows": [{"id": 1}],
        })),
    );
    assert_eq!(settlement.status, 200, "{settlement:?}");
    assert_eq!(settlement.json()["state"], "PENDING_SETTLEMENT");
}

/// `kasi sim --fxp`: the sim onboards an FXP in both currencies with its
/// corridors, a payee paid in TZS, and `kasi sim send` of 10 USD to that
/// payee finds the FXP, takes its terms, converts and transfers 25,000
/// TZS; the payer owes USD, the FXP is owed USD and owes TZS, the payee is
/// owed TZS. A currency no FXP converts to ends the send at once.
#[test]
fn sim_fxp_converts_and_a_cross_currency_send_moves_both_currencies() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    let mut sim = Sim::playing(
        &hub,
        "payerfsp,payeefsp:TZS",
        &[
            "--fxp",
            "fxp",
            "--fx-rate",
            "USD:TZS=2500",
            "--fx-rate",
            "TZS:USD=0.0004",
        ],
    );
    for expected in [
        "payerfsp: onboarded (net debit cap and funds in of USD)",
        "payeefsp: onboarded (net debit cap and funds in of TZS)",
        "fxp: onboarded as an FXP in USD",
        "fxp: onboarded as an FXP in TZS",
        "fxp: its corridors declared (PUT /participants/fxp/fxCorridors): USD to TZS, TZS to USD",
        "fxp converts USD to TZS at 2500, TZS to USD at 0.0004",
    ] {
        assert!(
            sim.seen.iter().any(|line| line.contains(expected)),
            "{expected:?} in {:#?}",
            sim.seen
        );
    }
    assert_eq!(model_names(&hub), ["DEFERREDNETUSD", "DEFERREDNETTZS"]);
    let fxps = hub.admin_expect("GET", "/fxps", None, 200).json();
    assert_eq!(fxps[0]["name"], "fxp", "{fxps}");
    assert_eq!(fxps[0]["corridors"].as_array().unwrap().len(), 2, "{fxps}");
    let positions = |hub: &Hub| {
        [
            hub.position_in("payerfsp", "USD"),
            hub.position_in("fxp", "USD"),
            hub.position_in("fxp", "TZS"),
            hub.position_in("payeefsp", "TZS"),
        ]
    };
    assert_eq!(positions(&hub), [0.0; 4]);

    let payee_party = sim.party_of("payeefsp");
    let output = sim.send("payerfsp", &format!("MSISDN:{payee_party}"), "10");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "send failed: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "1. lookup",
        "held by payeefsp, paid in TZS",
        "payeefsp is to be paid in TZS: payerfsp converts 10 USD through an FXP",
        "2. FXPs: payerfsp asks the hub who converts USD to TZS (GET /services/FXP/USD/TZS)",
        "offered: fxp",
        "3. FX quote: payerfsp asks fxp to convert 10 USD to TZS",
        "fxp offers 25000 TZS for 10 USD",
        "4. quote: payerfsp asks payeefsp for terms to send 25000 TZS",
        "5. conversion: payerfsp asks fxp to convert 10 USD into 25000 TZS",
        "fxp accepted: RESERVED",
        "6. transfer: payerfsp prepares 25000 TZS to payeefsp, paid from fxp's TZS",
    ] {
        assert!(text.contains(expected), "{expected:?} in {text}");
    }
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with("COMMITTED: transfer ")
            && last.contains("25000 TZS from payerfsp to payeefsp, converted from 10 USD by fxp"),
        "{text}"
    );
    // The sim printed what each party saw: the FXP's questions, the
    // payee's transfer in TZS, and the hub's PATCH telling the FXP.
    sim.await_line(|l| {
        l.contains("fxp <- POST /fxQuotes") && l.contains("convert 10 USD to ? TZS")
    });
    sim.await_line(|l| {
        l.contains("payerfsp <- PUT /fxQuotes/") && l.contains("convert 10 USD to 25000 TZS")
    });
    sim.await_line(|l| l.contains("fxp <- POST /fxTransfers"));
    sim.await_line(|l| l.contains("payerfsp <- PUT /fxTransfers/") && l.contains("state RESERVED"));
    sim.await_line(|l| l.contains("payeefsp <- POST /transfers") && l.contains("amount 25000 TZS"));
    sim.await_lines(&[
        &|l| l.contains("fxp <- PATCH /fxTransfers/") && l.contains("state COMMITTED"),
        &|l| l.contains("payerfsp <- PUT /transfers/") && l.contains("state COMMITTED"),
    ]);
    assert_eq!(
        positions(&hub),
        [10.0, -10.0, 25_000.0, -25_000.0],
        "payer owes USD; the FXP is owed USD and owes TZS; the payee is owed TZS"
    );

    // No FXP converts USD to KES: the send ends after the hub's empty list.
    let output = sim.send_with(
        "payerfsp",
        &format!("MSISDN:{payee_party}"),
        &["--amount", "10", "USD", "--to-currency", "KES"],
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("error: no FXP converts USD to KES"),
        "{text}"
    );
    assert_eq!(positions(&hub), [10.0, -10.0, 25_000.0, -25_000.0]);
}
