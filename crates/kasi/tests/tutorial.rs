//! The tutorial, run as written: every ```sh block of docs/tutorial.md (and
//! so examples/onboard.sh) in order, in one bash, against the real binary,
//! with real callback stubs standing in for the DFSPs and the FXP. If the
//! tutorial rots, this fails.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The ```sh blocks of a Markdown text, in order.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_end() == "```sh" => current = Some(String::new()),
            None => {}
            Some(block) if line.trim_end() == "```" => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    assert!(current.is_none(), "an unclosed ```sh block");
    blocks
}

/// Waits until `stub` has received every (method, path) of `expected`, in
/// any order; what it received.
fn await_all(stub: &Stub, expected: &[(&str, String)]) -> Vec<Received> {
    let deadline = Instant::now() + CALLBACK_WAIT;
    let mut received: Vec<Received> = Vec::new();
    while !expected.iter().all(|(method, path)| {
        received
            .iter()
            .any(|r| r.method == *method && r.path == *path)
    }) {
        let left = deadline.saturating_duration_since(Instant::now());
        match stub.next_within(left.max(Duration::from_millis(1))) {
            Some(request) => received.push(request),
            None => panic!(
                "{} never received all of {expected:?}; it got {:?}",
                stub.name,
                received
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect::<Vec<_>>()
            ),
        }
    }
    received
}

#[test]
fn the_tutorial_runs_as_written() {
    let root = repository();
    let tutorial = std::fs::read_to_string(root.join("docs/tutorial.md")).unwrap();
    let blocks = sh_blocks(&tutorial);
    assert!(
        blocks.len() >= 8,
        "the tutorial lost its steps: {}",
        blocks.len()
    );
    assert!(blocks.iter().any(|b| b.contains("examples/onboard.sh")));

    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    let fxp = Stub::start("fxp");
    let script = format!("set -euo pipefail\n{}", blocks.join("\n"));
    let output = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&root)
        .env("KASI_API", format!("http://{}", hub.api))
        .env("KASI_ADMIN", format!("http://{}", hub.admin))
        .env("PAYER_URL", payer.base_url())
        .env("PAYEE_URL", payee.base_url())
        .env("FXP_URL", fxp.base_url())
        .env_remove("KASI_TOKEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the tutorial failed:\n{stdout}\n{stderr}\nhub log:\n{}",
        hub.log()
    );
    // Requests (202) and callbacks (200): 4 and 3 in one currency, 7 and
    // 5 more across currencies.
    assert_eq!(stdout.matches(" -> 202").count(), 11, "{stdout}");
    assert_eq!(stdout.matches(" -> 200").count(), 8, "{stdout}");

    let id_of = |received: &[Received], path: &str, key: &str| -> String {
        received
            .iter()
            .find(|r| r.method == "POST" && r.path == path)
            .map(|r| r.json()[key].as_str().unwrap().to_string())
            .unwrap()
    };
    let at_payee = await_all(
        &payee,
        &[
            ("PUT", "/participants/MSISDN/255700000001".into()),
            ("GET", "/parties/MSISDN/255700000001".into()),
            ("POST", "/quotes".into()),
            ("POST", "/transfers".into()),
        ],
    );
    let quote_id = id_of(&at_payee, "/quotes", "quoteId");
    let transfer_id = id_of(&at_payee, "/transfers", "transferId");
    let at_payer = await_all(
        &payer,
        &[
            ("PUT", "/parties/MSISDN/255700000001".into()),
            ("PUT", format!("/quotes/{quote_id}")),
            ("PUT", format!("/transfers/{transfer_id}")),
        ],
    );
    let notification = at_payer
        .iter()
        .find(|r| r.path == format!("/transfers/{transfer_id}"))
        .unwrap();
    assert_eq!(notification.json()["transferState"], "COMMITTED");
    let confirmation = await_all(&payee, &[("PUT", format!("/transfers/{transfer_id}"))]);
    assert_eq!(
        confirmation.last().unwrap().json()["transferState"],
        "COMMITTED"
    );
    assert!(stdout.contains("payerfsp: [{"), "{stdout}");

    // Across currencies: the FXP was asked for terms and to convert, the
    // payer heard the FXP list, the terms and the acceptance, the payee
    // got the transfer in TZS, and the hub told the FXP of the commit.
    let at_fxp = await_all(
        &fxp,
        &[
            ("POST", "/fxQuotes".into()),
            ("POST", "/fxTransfers".into()),
        ],
    );
    let fx_quote_id = id_of(&at_fxp, "/fxQuotes", "conversionRequestId");
    let conversion_id = id_of(&at_fxp, "/fxTransfers", "commitRequestId");
    let patch = await_all(&fxp, &[("PATCH", format!("/fxTransfers/{conversion_id}"))]);
    assert_eq!(patch.last().unwrap().json()["conversionState"], "COMMITTED");
    let at_payee = await_all(&payee, &[("POST", "/transfers".into())]);
    let dependent_id = id_of(&at_payee, "/transfers", "transferId");
    assert_eq!(
        at_payee.last().unwrap().json()["amount"],
        serde_json::json!({"currency": "TZS", "amount": "25000"})
    );
    let at_payer = await_all(
        &payer,
        &[
            ("PUT", "/services/FXP/USD/TZS".into()),
            ("PUT", format!("/fxQuotes/{fx_quote_id}")),
            ("PUT", format!("/fxTransfers/{conversion_id}")),
            ("PUT", format!("/transfers/{dependent_id}")),
        ],
    );
    let fxps = at_payer
        .iter()
        .find(|r| r.path == "/services/FXP/USD/TZS")
        .unwrap();
    assert_eq!(fxps.json()["providers"], serde_json::json!(["fxp"]));
    let committed = at_payer
        .iter()
        .find(|r| r.path == format!("/transfers/{dependent_id}"))
        .unwrap();
    assert_eq!(committed.json()["transferState"], "COMMITTED");
    assert!(stdout.contains("fxp: [{"), "{stdout}");
    assert!(
        stdout.contains(&dependent_id),
        "the conversion names its transfer: {stdout}"
    );

    // The positions in both currencies: 100 USD and 10 USD paid, 10 USD
    // converted into 25,000 TZS.
    assert_eq!(hub.position_in(PAYER, "USD"), 110.0);
    assert_eq!(hub.position_in(PAYEE, "USD"), -100.0);
    assert_eq!(hub.position_in("fxp", "USD"), -10.0);
    assert_eq!(hub.position_in("fxp", "TZS"), 25_000.0);
    assert_eq!(hub.position_in(PAYEE, "TZS"), -25_000.0);

    // What the tutorial says the console shows: both positions on the
    // overview, and the transfer found by its id.
    let overview = support::http(hub.admin, "GET", "/console/", &[], b"");
    assert_eq!(overview.status, 200, "{overview:?}");
    let page = overview.text();
    for expected in [
        "data-dfsp=\"payerfsp\"",
        "data-dfsp=\"payeefsp\"",
        "100 <abbr",
    ] {
        assert!(
            page.contains(expected),
            "{expected} in the overview: {page}"
        );
    }
    let found = support::http(
        hub.admin,
        "GET",
        &format!("/console/transfers?id={transfer_id}"),
        &[],
        b"",
    );
    assert_eq!(found.status, 200);
    assert!(found.text().contains("COMMITTED"), "{}", found.text());
}
