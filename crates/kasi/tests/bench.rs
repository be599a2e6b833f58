//! End-to-end: `kasi bench transfers` against an embedded hub, through the
//! real binary; the JSON summary must show a clean run whose DFSP
//! positions net to zero.

use std::process::Command;

use serde_json::Value;

fn bench(extra: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_kasi"))
        .args(["bench", "transfers", "--duration", "2", "--warmup", "0"])
        .args(["--dfsps", "4", "--parties", "20", "--concurrency", "16"])
        .args(["--json", "--quiet"])
        .args(extra)
        .env_remove("KASI_CONFIG")
        .env_remove("KASI_LOG")
        .output()
        .expect("kasi runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{extra:?}: {}\nstdout: {stdout}\nstderr: {stderr}",
        output.status
    );
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{extra:?}: not JSON ({e}): {stdout}"));
    let count = |key: &str| {
        report[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {report}"))
    };
    assert!(count("completed") > 0, "{report}");
    assert_eq!(count("errors"), 0, "{report}");
    assert_eq!(count("timeouts"), 0, "{report}");
    // No warm-up: every flow started in the window, and every one ended well.
    assert_eq!(count("started"), count("started_in_window"), "{report}");
    assert_eq!(count("started"), count("completed"), "{report}");
    assert_eq!(report["positions_net_zero"], Value::Bool(true), "{report}");
    assert_eq!(report["positions_sum"], "0", "{report}");
    assert!(
        report["throughput_per_s"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert!(report["e2e_p99_ms"].as_f64().is_some(), "{report}");
    report
}

#[test]
fn a_transfer_run_completes_and_nets_to_zero() {
    let report = bench(&[]);
    assert_eq!(report["flow"], "transfer");
    assert_eq!(report["load"], "closed");
}

#[test]
fn a_discovery_quote_transfer_run_completes_and_nets_to_zero() {
    let report = bench(&["--flow", "discovery+quote+transfer"]);
    assert_eq!(report["flow"], "discovery+quote+transfer");
    assert!(report["legs"]["lookup"]["count"].as_u64().unwrap() > 0);
    assert!(report["legs"]["quote"]["count"].as_u64().unwrap() > 0);
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

#[test]
fn a_null_hub_run_measures_the_harness() {
    let output = Command::new(env!("CARGO_BIN_EXE_kasi"))
        .args(["bench", "transfers", "--null-hub"])
        .args(["--duration", "2", "--warmup", "0", "--json", "--quiet"])
        .env_remove("KASI_CONFIG")
        .env_remove("KASI_LOG")
        .output()
        .expect("kasi runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
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
}
