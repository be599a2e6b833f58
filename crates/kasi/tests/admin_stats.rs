//! The operator console's reads through the real binary: the admin
//! `GET /transfers/{ID}` (memory and, past the retention horizon, the
//! store), `GET /stats/dfsps`, `GET /stats/transfer-errors` and the
//! matching `/metrics` lines, after transfers that commit, are rejected,
//! aborted by the payee, aborted by a wrong fulfilment and expire.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

fn admin_json(hub: &Hub, path: &str) -> Value {
    let response = hub.admin("GET", path, None);
    assert_eq!(response.status, 200, "{path}: {response:?}");
    response.json()
}

/// The id of the settlement window open now.
fn open_window(hub: &Hub) -> u64 {
    let windows = admin_json(hub, "/v2/settlementWindows?state=OPEN");
    windows[0]["settlementWindowId"]
        .as_u64()
        .unwrap_or_else(|| panic!("no open window in {windows}"))
}

fn metrics(hub: &Hub) -> String {
    let response = hub.admin("GET", "/metrics", None);
    assert_eq!(response.status, 200, "{response:?}");
    response.text()
}

fn payer_stats(hub: &Hub) -> Value {
    let stats = admin_json(hub, "/stats/dfsps");
    assert!(stats["at"].is_string(), "{stats}");
    stats["dfsps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|dfsp| dfsp["name"] == PAYER)
        .cloned()
        .unwrap_or_else(|| panic!("no {PAYER} in {stats}"))
}

#[test]
fn the_console_reads_a_transfer_and_the_outcomes_by_dfsp_and_error() {
    // A net debit cap of 100: a prepare over it is rejected with 4200.
    let s = Scenario::with_payer(100, 5_000);

    // Reserved: in memory, not finished.
    let (committed, _) = s.reserve("50", far_future());
    let view = admin_json(&s.hub, &format!("/transfers/{committed}"));
    assert_eq!(view["transferId"], json!(committed), "{view}");
    assert_eq!(view["kind"], "transfer");
    assert_eq!(view["payerFsp"], PAYER);
    assert_eq!(view["payeeFsp"], PAYEE);
    assert_eq!(view["amount"]["amount"], "50");
    assert_eq!(view["amount"]["currency"], "USD");
    assert_eq!(view["transferState"], "RESERVED");
    assert_eq!(view["internalState"], "RESERVED");
    assert_eq!(view["hasFulfilment"], false);
    assert_eq!(view["source"], "memory");
    assert!(view["expiration"].is_string() && view["preparedAt"].is_string());
    for absent in [
        "completedAt",
        "errorCode",
        "errorDescription",
        "settlementWindowId",
    ] {
        assert!(view.get(absent).is_none(), "{absent}: {view}");
    }
    assert_eq!(view["timeline"].as_array().unwrap().len(), 1, "{view}");

    // Committed.
    s.fulfil(&committed, &fulfil_body(FULFILMENT, "COMMITTED"));
    s.payer.expect("PUT", &format!("/transfers/{committed}"));
    s.payee.expect("PUT", &format!("/transfers/{committed}"));
    let view = admin_json(&s.hub, &format!("/transfers/{committed}"));
    assert_eq!(view["transferState"], "COMMITTED", "{view}");
    assert_eq!(view["hasFulfilment"], true);
    assert!(view["completedAt"].is_string(), "{view}");
    assert!(view.get("errorCode").is_none(), "{view}");
    assert_eq!(view["settlementWindowId"], open_window(&s.hub), "{view}");
    let phases: Vec<&Value> = view["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| &step["phase"])
        .collect();
    assert_eq!(phases, [&json!("prepare"), &json!("commit")], "{view}");

    // Rejected at prepare: over the net debit cap.
    let rejected = new_id();
    let body = prepare_body(&rejected, PAYER, PAYEE, "200", far_future());
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
    s.payer.expect_error(&rejected, "4200");
    let view = admin_json(&s.hub, &format!("/transfers/{rejected}"));
    assert_eq!(view["transferState"], "ABORTED", "{view}");
    assert_eq!(view["internalState"], "ABORTED_REJECTED");
    assert_eq!(view["errorCode"], "4200");
    assert!(view["errorDescription"].is_string(), "{view}");
    assert!(view.get("settlementWindowId").is_none(), "{view}");

    // Aborted by the payee with its own code.
    let (aborted, _) = s.reserve("10", far_future());
    let response = s
        .hub
        .reject(&aborted, PAYEE, PAYER, &error_body("5101", "too much"));
    assert_eq!(response.status, 200, "{response:?}");
    s.payer
        .expect("PUT", &format!("/transfers/{aborted}/error"));

    // Aborted by a wrong fulfilment.
    let (wrong, _) = s.reserve("10", far_future());
    s.fulfil(&wrong, &fulfil_body(WRONG_FULFILMENT, "COMMITTED"));
    s.payer.expect_error(&wrong, "3100");
    s.payee.expect_error(&wrong, "3100");

    // Expired by the hub.
    let (expired, _) = s.reserve("10", now_ms() + 1_000);
    s.payer.expect_error(&expired, "3303");
    s.payee.expect_error(&expired, "3303");
    let view = admin_json(&s.hub, &format!("/transfers/{expired}"));
    assert_eq!(view["transferState"], "ABORTED", "{view}");
    assert_eq!(view["internalState"], "EXPIRED_RESERVED");
    assert_eq!(view["errorCode"], "3303");
    assert_eq!(view["timeline"][1]["phase"], "expire", "{view}");
    assert!(view.get("settlementWindowId").is_none(), "{view}");

    // Unknown and malformed ids.
    let response = s
        .hub
        .admin("GET", &format!("/transfers/{}", new_id()), None);
    assert_error_response(&response, 404, "3208");
    let response = s.hub.admin("GET", "/transfers/not-an-id", None);
    assert_error_response(&response, 400, "3101");

    // Outcomes by payer.
    let stats = payer_stats(&s.hub);
    assert_eq!(stats["prepared"], 4, "{stats}");
    assert_eq!(stats["committed"], 1, "{stats}");
    assert_eq!(stats["rejected"], 1, "{stats}");
    assert_eq!(stats["aborted"], 2, "{stats}");
    assert_eq!(stats["expired"], 1, "{stats}");
    assert_eq!(stats["latency"]["count"], 1, "{stats}");
    assert!(stats["latency"]["sumSeconds"].as_f64().unwrap() >= 0.0);
    let buckets = stats["latency"]["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 17, "{stats}");
    assert_eq!(buckets[16], json!({"le": "+Inf", "count": 1}), "{stats}");
    // The payee paid nothing: it has no line.
    let all = admin_json(&s.hub, "/stats/dfsps");
    let names: Vec<&Value> = all["dfsps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["name"])
        .collect();
    assert_eq!(names, [&json!(PAYER)], "{all}");

    // Failures by code and the most recent ones, newest first.
    let errors = admin_json(&s.hub, "/stats/transfer-errors");
    assert_eq!(
        errors["byCode"],
        json!([
            {"code": "3100", "count": 1},
            {"code": "3303", "count": 1},
            {"code": "4200", "count": 1},
            {"code": "5101", "count": 1},
        ]),
        "{errors}"
    );
    let recent = errors["recent"].as_array().unwrap();
    let summary: Vec<(&str, &str, &str)> = recent
        .iter()
        .map(|f| {
            (
                f["transferId"].as_str().unwrap(),
                f["errorCode"].as_str().unwrap(),
                f["phase"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (expired.as_str(), "3303", "expire"),
            (wrong.as_str(), "3100", "fulfil"),
            (aborted.as_str(), "5101", "abort"),
            (rejected.as_str(), "4200", "prepare"),
        ],
        "{errors}"
    );
    assert_eq!(recent[2]["errorDescription"], "too much", "{errors}");
    assert_eq!(recent[0]["payerFsp"], PAYER);
    assert_eq!(recent[0]["payeeFsp"], PAYEE);
    assert!(recent[0]["at"].is_string());
    let limited = admin_json(&s.hub, "/stats/transfer-errors?limit=1");
    assert_eq!(limited["recent"].as_array().unwrap().len(), 1);
    assert_eq!(limited["recent"][0]["transferId"], json!(expired));
    let response = s.hub.admin("GET", "/stats/transfer-errors?limit=257", None);
    assert_error_response(&response, 400, "3101");

    // The same on /metrics.
    let text = metrics(&s.hub);
    for line in [
        format!("kasi_dfsp_transfers_total{{payer=\"{PAYER}\",result=\"prepared\"}} 4"),
        format!("kasi_dfsp_transfers_total{{payer=\"{PAYER}\",result=\"committed\"}} 1"),
        format!("kasi_dfsp_transfers_total{{payer=\"{PAYER}\",result=\"rejected\"}} 1"),
        format!("kasi_dfsp_transfers_total{{payer=\"{PAYER}\",result=\"aborted\"}} 2"),
        format!("kasi_dfsp_transfers_total{{payer=\"{PAYER}\",result=\"expired\"}} 1"),
        format!("kasi_dfsp_transfer_seconds_count{{payer=\"{PAYER}\"}} 1"),
        "kasi_transfer_errors_total{code=\"4200\"} 1".to_string(),
        "kasi_transfer_errors_total{code=\"3303\"} 1".to_string(),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no {line} on /metrics:\n{text}"
        );
    }
}

fn metric(hub: &Hub, name: &str) -> f64 {
    let text = metrics(hub);
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_transfer_past_the_retention_horizon_is_read_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut hub = Hub::start_with(&data, &["--transfer-retention", "1s"]);
    hub.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    hub.onboard(PAYER, &payer.base_url(), 10_000, 5_000);
    hub.onboard(PAYEE, &payee.base_url(), 10_000, 5_000);

    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "100", far_future());
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    payee.expect("POST", "/transfers");
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    assert_eq!(hub.fulfil(&id, PAYEE, PAYER, &fulfil).status, 200);
    payer.expect("PUT", &format!("/transfers/{id}"));
    let window = open_window(&hub);
    let view = admin_json(&hub, &format!("/transfers/{id}"));
    assert_eq!(view["source"], "memory", "{view}");
    assert_eq!(view["settlementWindowId"], window, "{view}");

    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&hub, "kasi_ledger_transfers_evicted_total") < 1.0 {
        assert!(Instant::now() < deadline, "the transfer never left memory");
        std::thread::sleep(Duration::from_millis(50));
    }
    let view = admin_json(&hub, &format!("/transfers/{id}"));
    assert_eq!(view["source"], "store", "{view}");
    assert_eq!(view["transferState"], "COMMITTED", "{view}");
    assert_eq!(view["hasFulfilment"], true, "{view}");
    assert_eq!(view["amount"]["amount"], "100", "{view}");
    assert_eq!(view["timeline"][1]["phase"], "commit", "{view}");
    assert_eq!(view["settlementWindowId"], window, "{view}");
    let response = hub.admin("GET", &format!("/transfers/{}", new_id()), None);
    assert_error_response(&response, 404, "3208");

    // After a restart: past the horizon, still from the store; without
    // one, restored into memory from the finish's row.
    for (flags, source) in [
        (&["--transfer-retention", "1s"][..], "store"),
        (&[][..], "memory"),
    ] {
        assert!(hub.terminate().success());
        hub = Hub::start_with(&data, flags);
        let view = admin_json(&hub, &format!("/transfers/{id}"));
        assert_eq!(view["source"], source, "{flags:?}: {view}");
        assert_eq!(view["transferState"], "COMMITTED", "{view}");
        assert_eq!(view["settlementWindowId"], window, "{flags:?}: {view}");
        assert_eq!(open_window(&hub), window, "no window closed");
    }
}
