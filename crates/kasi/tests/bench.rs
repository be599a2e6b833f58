//! End-to-end: `kasi bench` against an embedded hub, through the real
//! binary; the JSON summary must show a clean run whose DFSP positions net
//! to zero, and the report folder must hold files that parse.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Runs `kasi bench` with `args`; its exit status must be success and its
/// standard output the JSON summary.
fn run(args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_kasi"))
        .arg("bench")
        .args(args)
        .args(["--json", "--quiet"])
        .env_remove("KASI_CONFIG")
        .env_remove("KASI_LOG")
        .env_remove("KASI_LOG_LEVEL")
        .env_remove("KASI_LOG_FORMAT")
        .output()
        .expect("kasi runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{args:?}: {}\nstdout: {stdout}\nstderr: {stderr}",
        output.status
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {stdout}"))
}

/// A short embedded run that must be clean: everything started completed,
/// nothing failed, the positions net to zero.
fn bench(extra: &[&str]) -> Value {
    let mut args = vec!["--duration", "2", "--warmup", "0"];
    args.extend(["--dfsps", "4", "--parties", "20", "--concurrency", "16"]);
    args.extend(["--null-hub-baseline", "0", "--no-report"]);
    args.extend(extra);
    let report = run(&args);
    assert_clean(&report);
    // No warm-up: every flow started in the window, and every one ended well.
    assert_eq!(report["started"], report["started_in_window"], "{report}");
    report
}

fn assert_clean(report: &Value) {
    let count = |key: &str| {
        report[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {report}"))
    };
    assert!(count("completed") > 0, "{report}");
    assert_eq!(count("errors"), 0, "{report}");
    assert_eq!(count("timeouts"), 0, "{report}");
    // Every flow started in the window ended well.
    assert_eq!(count("started_in_window"), count("completed"), "{report}");
    assert_eq!(report["positions_net_zero"], Value::Bool(true), "{report}");
    assert_eq!(report["positions_sum"], "0", "{report}");
    assert!(
        report["throughput_per_s"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert!(report["e2e_p99_ms"].as_f64().is_some(), "{report}");
}

#[test]
fn a_transfer_run_completes_and_nets_to_zero() {
    let report = bench(&[]);
    assert_eq!(report["flow"], "transfer");
    assert_eq!(report["load"], "closed");
    assert_eq!(report["concurrency"], 16.0);
}

#[test]
fn a_discovery_quote_transfer_run_completes_and_nets_to_zero() {
    let report = bench(&["--flow", "discovery+quote+transfer"]);
    assert_eq!(report["flow"], "discovery+quote+transfer");
    assert!(report["legs"]["lookup"]["count"].as_u64().unwrap() > 0);
    assert!(report["legs"]["quote"]["count"].as_u64().unwrap() > 0);
}

#[test]
fn a_quote_transfer_run_skips_the_lookup() {
    let report = bench(&["--flow", "quote+transfer"]);
    assert_eq!(report["legs"]["lookup"], Value::Null, "{report}");
    assert!(report["legs"]["quote"]["count"].as_u64().unwrap() > 0);
    assert!(report["legs"]["prepare"]["count"].as_u64().unwrap() > 0);
}

/// Request-to-pay: the payee asks the payer through the hub, the payer
/// answers RECEIVED through the hub; no transfer, so positions stay at zero.
#[test]
fn a_transaction_request_run_completes() {
    let report = bench(&["--flow", "transaction-request"]);
    assert_eq!(report["flow"], "transaction-request");
    let leg = &report["legs"]["transaction_request"];
    assert_eq!(leg["count"], report["completed"], "{report}");
    assert_eq!(report["legs"]["prepare"], Value::Null, "{report}");
    // The null hub routes it too.
    let report = run(&[
        "--null-hub",
        "--flow",
        "transaction-request",
        "--duration",
        "1",
        "--warmup",
        "0",
        "--parties",
        "20",
        "--no-report",
    ]);
    assert!(report["completed"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["timeouts"], 0, "{report}");
}

/// FX (FSPIOP v2.0 payer conversion): every payment an FX quote, a quote
/// in TZS, a conversion from USD and the transfer that depends on it,
/// through two FXPs; each currency nets to zero, the FXPs' positions are
/// each other's at the rate, and every payment moved between 1 and 100
/// USD through them.
#[test]
fn an_fx_run_completes_and_each_currency_nets_to_zero() {
    let report = bench(&["--flow", "fx", "--fxps", "2"]);
    assert_eq!(report["flow"], "fx");
    assert_eq!(report["fxps"], 2, "{report}");
    let completed = report["completed"].as_u64().unwrap();
    assert_eq!(report["legs"]["e2e"]["count"], completed, "{report}");
    for leg in [
        "fx_quote",
        "quote",
        "fx_prepare",
        "fx_forward",
        "fx_fulfil",
        "fx_notify",
        "prepare",
        "forward",
        "fulfil",
        "notify",
        "fx_patch",
    ] {
        let count = report["legs"][leg]["count"].as_u64().unwrap_or(0);
        assert!(count > 0, "{leg}: {report}");
    }
    assert_eq!(report["legs"]["lookup"], Value::Null, "{report}");
    let positions = &report["positions_by_currency"];
    for currency in ["USD", "TZS"] {
        assert_eq!(positions[currency]["sum"], "0", "{currency}: {report}");
    }
    assert_eq!(report["fxps_at_rate"], Value::Bool(true), "{report}");
    // The FXPs are owed what the payers sent (1 to 100 USD a payment) and
    // owe the payees 2500 times that in TZS.
    let amount = |currency: &str| -> f64 {
        positions[currency]["fxps"]
            .as_str()
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("{currency}: {report}"))
    };
    let (usd, tzs) = (amount("USD"), amount("TZS"));
    assert!(
        -usd >= completed as f64 && -usd <= 100.0 * completed as f64,
        "{report}"
    );
    assert_eq!(tzs, -2500.0 * usd, "{report}");

    // The null hub routes FX too (and sends the FXP its PATCH).
    let report = run(&[
        "--null-hub",
        "--flow",
        "fx",
        "--duration",
        "1",
        "--warmup",
        "0",
        "--parties",
        "20",
        "--no-report",
    ]);
    assert!(report["completed"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["timeouts"], 0, "{report}");
}

/// The configuration a scheme runs: every connection mutual TLS, the hub
/// signing what it originates, every DFSP signing what it sends and the
/// hub checking it; the DFSPs verify every signature they receive.
#[test]
fn a_run_in_the_production_configuration_verifies_every_signature_over_mutual_tls() {
    let report = bench(&[
        "--flow",
        "discovery+quote+transfer",
        "--tls",
        "--hub-jws",
        "es256",
        "--dfsp-jws",
        "rs256",
        "--verify-every",
        "1",
    ]);
    assert_eq!(
        report["configuration"], "mTLS, hub signs ES256, DFSPs sign RS256 (hub verifies)",
        "{report}"
    );
    assert!(
        report["api"].as_str().unwrap().starts_with("https://"),
        "{report}"
    );
    let security = &report["security"];
    let count = |key: &str| {
        security[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {report}"))
    };
    assert_eq!(count("signatures_invalid"), 0, "{report}");
    assert_eq!(count("signatures_missing"), 0, "{report}");
    assert_eq!(count("callback_tls_handshakes_failed"), 0, "{report}");
    // Each flow: the party, the quote and the prepare forwarded with the
    // sender's signature, their answers with the receiver's, and the hub's
    // own messages with the hub's.
    let completed = report["completed"].as_u64().unwrap();
    assert!(count("signatures_verified") >= 6 * completed, "{report}");
    assert!(count("signatures_verified_hub") > 0, "{report}");
    // The hub's pool signed its messages and checked the DFSPs'.
    let pool = &report["hub_jws_pool"];
    assert!(
        pool["operations"].as_f64().unwrap() >= 2.0 * completed as f64,
        "{report}"
    );
    assert!(pool["utilisation"].as_f64().unwrap() > 0.0, "{report}");
}

#[test]
fn an_open_loop_run_offers_its_rate() {
    let report = bench(&["--rate", "500"]);
    assert_eq!(report["load"], "open");
    assert_eq!(report["offered_rate_per_s"], 500.0);
    assert_eq!(report["concurrency"], Value::Null);
    // 2 s at 500/s: 1000 arrivals, all started.
    assert_eq!(report["started"], 1000, "{report}");
}

/// `--count`: exactly that many flows measured, closed or open loop.
#[test]
fn a_count_run_measures_that_many_flows() {
    for load in [&["--concurrency", "8"][..], &["--rate", "400"][..]] {
        let mut args = vec!["--count", "300", "--warmup", "0", "--dfsps", "4"];
        args.extend(["--null-hub-baseline", "0", "--no-report"]);
        args.extend(load);
        let report = run(&args);
        assert_clean(&report);
        assert_eq!(report["count"], 300, "{report}");
        assert_eq!(report["started"], 300, "{report}");
        assert_eq!(report["completed"], 300, "{report}");
        assert_eq!(report["completed_in_window"], 300, "{report}");
        // The window is the time the 300 took, not the nominal hour.
        let window_s = report["duration_s"].as_f64().unwrap();
        assert!(window_s > 0.0 && window_s < 60.0, "{report}");
    }
}

#[test]
fn a_null_hub_run_measures_the_harness() {
    // The null hub runs as a process of its own (`kasi null-hub`), as a hub
    // under test does.
    let report = run(&[
        "--null-hub",
        "--duration",
        "2",
        "--warmup",
        "0",
        "--no-report",
    ]);
    assert_eq!(report["null_hub"], Value::Bool(true), "{report}");
    assert!(report["completed"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    // No ledger: the positions check does not apply rather than pass.
    assert_eq!(
        report["positions_applicable"],
        Value::Bool(false),
        "{report}"
    );
    assert_eq!(report["positions_net_zero"], Value::Null, "{report}");
    // Nothing to compare with itself.
    assert_eq!(report["null_hub_ratio"], Value::Null, "{report}");
    // It has no /metrics: its samples have no hub figures (and the run did
    // not fail for it), only the harness's own memory.
    let timeline = report["timeline"].as_array().unwrap();
    assert!(!timeline.is_empty(), "{report}");
    for sample in timeline {
        assert!(sample.get("hub_rss_bytes").is_none(), "{sample}");
        assert!(sample.get("callback_backlog").is_none(), "{sample}");
    }
    if cfg!(target_os = "linux") {
        assert!(timeline
            .iter()
            .all(|s| s["harness_rss_bytes"].as_u64().is_some()));
    }
}

/// The report folder of a whole embedded run: the null-hub baseline, the
/// hub's stage table and waterfalls (every transfer sampled), a timeline;
/// and `kasi bench compare` reads two such folders.
#[test]
fn a_report_folder_holds_the_whole_story_and_compares() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let report = run(&[
        "--duration",
        "2",
        "--warmup",
        "1",
        "--dfsps",
        "4",
        "--concurrency",
        "8",
        "--null-hub-baseline",
        "1",
        "--trace-sample-every",
        "1",
        "--label",
        "first run",
        "--out",
        first.to_str().unwrap(),
    ]);
    assert_clean(&report);
    let json = read_json(&first.join("report.json"));
    assert_eq!(json, report, "report.json is the printed summary");
    assert_eq!(json["kasi_bench_report"], 1);
    assert_eq!(json["label"], "first run");

    let ratio = &json["null_hub_ratio"];
    let null_hub = ratio["null_hub_throughput_per_s"].as_f64().unwrap();
    assert!(null_hub > 0.0, "{ratio}");
    let expected = json["throughput_per_s"].as_f64().unwrap() / null_hub;
    assert!((ratio["ratio"].as_f64().unwrap() - expected).abs() < 1e-9);
    // Both hubs ran as child processes: their CPU per flow was measured,
    // and so was the harness's own.
    assert!(
        ratio["null_hub_us_per_flow"].as_f64().unwrap() > 0.0,
        "{ratio}"
    );
    let cpu = &json["cpu"];
    assert!(cpu["hub_us_per_flow"].as_f64().unwrap() > 0.0, "{cpu}");
    assert!(cpu["harness_us_per_flow"].as_f64().unwrap() > 0.0, "{cpu}");
    assert!(markdown_mentions(&first, "hub CPU in the window"));

    // The hub's stages cover the window: at least every transfer completed
    // in it went through each stage of both phases.
    let stages = json["hub_stages"]["stages"].as_array().expect("stages");
    let completed = json["completed_in_window"].as_u64().unwrap();
    for phase in ["prepare", "fulfil"] {
        for stage in [
            "http_receive",
            "validation",
            "ledger_apply",
            "store_commit",
            "callback_send",
        ] {
            let row = stages
                .iter()
                .find(|row| row["phase"] == phase && row["stage"] == stage)
                .unwrap_or_else(|| panic!("{phase} {stage} in {stages:?}"));
            let calls = row["calls"].as_u64().unwrap();
            assert!(
                calls >= completed.saturating_sub(16),
                "{phase} {stage}: {calls} < {completed}"
            );
            assert!(row["min_us"].as_f64().unwrap() <= row["mean_us"].as_f64().unwrap());
            assert!(row["mean_us"].as_f64().unwrap() <= row["max_us"].as_f64().unwrap());
        }
    }
    // Sampled transfers, their spans in time order.
    let waterfalls = json["waterfalls"].as_array().expect("waterfalls");
    assert!(!waterfalls.is_empty(), "{json}");
    for waterfall in waterfalls {
        let spans = waterfall["spans"].as_array().unwrap();
        let starts: Vec<f64> = spans
            .iter()
            .map(|s| s["start_us"].as_f64().unwrap())
            .collect();
        assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{waterfall}");
    }
    // One timeline point a second: warm-up, then measuring.
    let timeline = json["timeline"].as_array().unwrap();
    assert!(timeline.len() >= 2, "{timeline:?}");
    assert_eq!(timeline[0]["phase"], "warm-up");
    let completed_per_second: u64 = timeline
        .iter()
        .map(|p| p["completed"].as_u64().unwrap())
        .sum();
    assert!(completed_per_second > 0);
    // The embedded hub's /metrics was scraped once a second: its RSS, its
    // callback backlog and the ledger's transfers in memory (a scrape may be
    // missed, not all of them).
    if cfg!(target_os = "linux") {
        let scraped: Vec<&Value> = timeline
            .iter()
            .filter(|s| s.get("hub_rss_bytes").is_some())
            .collect();
        assert!(!scraped.is_empty(), "{timeline:?}");
        for sample in scraped {
            let rss = sample["hub_rss_bytes"].as_u64().unwrap();
            assert!((1 << 20..1 << 40).contains(&rss), "{sample}");
            assert!(sample["callback_backlog"].as_u64().is_some(), "{sample}");
            assert!(sample["transfers_in_memory"].as_u64().is_some(), "{sample}");
        }
    }

    let markdown = std::fs::read_to_string(first.join("report.md")).unwrap();
    assert!(markdown.contains("first run"), "{markdown}");
    assert!(markdown.contains("store_commit"), "{markdown}");
    let svg = std::fs::read_to_string(first.join("timeline.svg")).unwrap();
    assert!(
        svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    assert!(svg.contains("<path") || svg.contains("<polyline"), "{svg}");
    if cfg!(target_os = "linux") {
        assert!(svg.contains(r#"id="series-hub-rss""#), "{svg}");
    }

    // A second, smaller run, then the comparison of the two.
    let second = dir.path().join("second");
    let report = run(&[
        "--profile",
        "smoke",
        "--duration",
        "1",
        "--null-hub-baseline",
        "0",
        "--label",
        "second run",
        "--out",
        second.to_str().unwrap(),
    ]);
    assert_clean(&report);
    assert_eq!(report["profile"], "smoke");
    assert_eq!(report["concurrency"], 2.0);
    let output = Command::new(env!("CARGO_BIN_EXE_kasi"))
        .args(["bench", "compare"])
        .arg(&first)
        .arg(second.join("report.json"))
        .output()
        .expect("kasi runs");
    assert!(output.status.success(), "{output:?}");
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.contains("first run") && table.contains("second run"),
        "{table}"
    );
    assert!(table.contains("× p99"), "{table}");
    // A folder without a report is refused, naming it.
    let output = Command::new(env!("CARGO_BIN_EXE_kasi"))
        .args(["bench", "compare"])
        .arg(&first)
        .arg(dir.path())
        .output()
        .expect("kasi runs");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains(dir.path().to_str().unwrap()));
}

/// A breakpoint search whose threshold cannot hold stops at its first
/// step and says why.
#[test]
fn a_breakpoint_search_reports_where_it_broke() {
    let report = run(&[
        "--profile",
        "breakpoint",
        "--rate",
        "200",
        "--step-duration",
        "1",
        "--max-p99-ms",
        "0.001",
        "--dfsps",
        "4",
        "--null-hub-baseline",
        "0",
        "--no-report",
    ]);
    let breakpoint = &report["breakpoint"];
    assert_eq!(breakpoint["broke_at_rate_per_s"], 200.0, "{breakpoint}");
    assert_eq!(
        breakpoint["last_good_rate_per_s"],
        Value::Null,
        "{breakpoint}"
    );
    assert!(
        breakpoint["reason"].as_str().unwrap().contains("p99"),
        "{breakpoint}"
    );
    assert_eq!(breakpoint["steps"].as_array().unwrap().len(), 1);
    assert_eq!(report["load"], "open");
    assert_eq!(report["positions_net_zero"], Value::Bool(true), "{report}");
}

/// Stages ramp the level: the timeline's planned level rises and falls.
#[test]
fn stages_ramp_the_virtual_users() {
    let report = run(&[
        "--stages",
        "1s:8,1s:8,1s:0,1s:0",
        "--dfsps",
        "4",
        "--null-hub-baseline",
        "0",
        "--no-report",
    ]);
    assert_clean(&report);
    assert_eq!(
        report["concurrency"],
        Value::Null,
        "a varying level has no one concurrency"
    );
    assert_eq!(report["stages"].as_array().unwrap().len(), 4);
    let targets: Vec<f64> = report["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["target"].as_f64().unwrap())
        .collect();
    assert!(targets.len() >= 3, "{targets:?}");
    // Half way up the ramp, then the hold, then half way down.
    assert!((targets[0] - 4.0).abs() < 0.01, "{targets:?}");
    assert!((targets[1] - 8.0).abs() < 0.01, "{targets:?}");
    assert!((targets[2] - 4.0).abs() < 0.01, "{targets:?}");
}

fn markdown_mentions(dir: &Path, text: &str) -> bool {
    std::fs::read_to_string(dir.join("report.md"))
        .unwrap()
        .contains(text)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn settlement_windows_can_be_closed_while_transfers_flow() {
    let report = bench(&["--close-window-every", "0.4"]);
    let closes = &report["settlement_window_closes"];
    assert!(closes["count"].as_u64().unwrap() >= 2, "{report}");
    assert!(closes["max_ms"].as_f64().unwrap() > 0.0, "{report}");
}

/// Against a running hub whose admin API needs credentials: refused with
/// the reason (not "is the hub running?") without a token, clean with an
/// operator's token file.
#[test]
fn a_run_against_a_hub_that_requires_an_admin_token_takes_a_token_file() {
    let dir = tempfile::tempdir().unwrap();
    let (tokens_path, tokens) = support::tokens_file(dir.path());
    let hub = support::Hub::start_with(
        &dir.path().join("data"),
        &["--admin-tokens", tokens_path.to_str().unwrap()],
    );
    let api = format!("http://{}", hub.api);
    let admin = format!("http://{}", hub.admin);
    let mut args = vec!["--api", &api, "--admin", &admin];
    args.extend(["--duration", "1", "--warmup", "0", "--dfsps", "2"]);
    args.extend([
        "--concurrency",
        "4",
        "--null-hub-baseline",
        "0",
        "--no-report",
    ]);

    let without = support::kasi()
        .arg("bench")
        .args(&args)
        .args(["--json", "--quiet"])
        .output()
        .unwrap();
    assert_eq!(without.status.code(), Some(2), "{without:?}");
    let stderr = String::from_utf8_lossy(&without.stderr);
    assert!(
        stderr.contains("401 unauthorized: the hub needs an admin token (--admin-token-file)"),
        "{stderr}"
    );

    let token_file = dir.path().join("operator.token");
    std::fs::write(&token_file, format!("token: {}\n", tokens.operator)).unwrap();
    args.extend(["--admin-token-file", token_file.to_str().unwrap()]);
    let report = run(&args);
    assert_clean(&report);
}
