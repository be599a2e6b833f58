//! End-to-end operations with the real binary: `kasi backup` of a hub
//! under load, the copy audited and restored.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::*;

const TRANSFERS: usize = 400;

fn kasi_ok(args: &[&str]) -> String {
    let output = kasi().args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kasi {args:?}: {output:?}\n{stdout}"
    );
    stdout
}

#[test]
fn a_backup_taken_under_load_audits_clean_and_restores_to_the_same_positions() {
    let scenario = Scenario::new();
    let hub = &scenario.hub;
    let data = scenario.dir.path().join("data");
    let data = data.to_str().unwrap();
    let completed = AtomicUsize::new(0);
    let mid = scenario.dir.path().join("mid.db");
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for _ in 0..TRANSFERS {
                let id = new_id();
                let body = prepare_body(&id, PAYER, PAYEE, "1.5", far_future());
                let response = hub.prepare(PAYER, PAYEE, &body);
                assert_eq!(response.status, 202, "{response:?}");
                let response = hub.fulfil(&id, PAYEE, PAYER, &fulfil_body(FULFILMENT, "COMMITTED"));
                assert_eq!(response.status, 200, "{response:?}");
                completed.fetch_add(1, Ordering::SeqCst);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while completed.load(Ordering::SeqCst) < 30 {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(2));
        }
        // In the middle of the stream.
        let out = kasi_ok(&["backup", "--data-dir", data, "--to", mid.to_str().unwrap()]);
        assert!(out.contains("every account matches"), "{out}");
        assert!(
            completed.load(Ordering::SeqCst) < TRANSFERS,
            "the backup should overlap the load"
        );
    });
    assert!(
        completed.load(Ordering::SeqCst) == TRANSFERS,
        "the load ran to its end"
    );
    let out = kasi_ok(&["audit", "--file", mid.to_str().unwrap()]);
    assert!(out.contains("every account matches"), "{out}");

    // A second backup never overwrites the first.
    let refused = kasi()
        .args(["backup", "--data-dir", data, "--to", mid.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("never overwrites"));

    // Quiet now: back up, restore into a new directory, compare.
    let last = scenario.dir.path().join("last.db");
    kasi_ok(&["backup", "--data-dir", data, "--to", last.to_str().unwrap()]);
    let (payer, payee) = (hub.position(PAYER), hub.position(PAYEE));
    assert_eq!(payer, 1.5 * TRANSFERS as f64);
    let restored = scenario.dir.path().join("restored");
    std::fs::create_dir(&restored).unwrap();
    std::fs::copy(&last, restored.join("kasi.db")).unwrap();
    let restored_hub = Hub::start(&restored);
    assert_eq!(restored_hub.position(PAYER), payer);
    assert_eq!(restored_hub.position(PAYEE), payee);
}

/// The Grafana dashboard (`ops/grafana/kasi.json`) only charts metrics the
/// hub exposes: every metric name in its queries is on a served hub's
/// `/metrics` after one transfer (so per-destination series exist).
#[test]
fn the_dashboard_charts_only_metrics_the_hub_exposes() {
    let s = Scenario::new();
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "1", now_ms() + 60_000);
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
    s.payee.expect("POST", "/transfers");
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    assert_eq!(s.hub.fulfil(&id, PAYEE, PAYER, &fulfil).status, 200);
    s.payer.expect("PUT", &format!("/transfers/{id}"));

    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ops/grafana/kasi.json"),
    )
    .unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let mut names = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            // Metric names: identifiers followed by a label set.
            for (at, _) in expr.match_indices('{') {
                let name: String = expr[..at]
                    .chars()
                    .rev()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                if name.starts_with("kasi_") || name.starts_with("process_") {
                    names.insert(name);
                }
            }
        }
    }
    assert!(names.len() >= 20, "{names:?}");
    // Counters of events one transfer does not make (refusals, four-eyes
    // steps, alerts) have no series until their first event: the family must be
    // registered, under the name the query uses.
    const FIRST_EVENT: [&str; 5] = [
        "kasi_refusals_total",
        "kasi_admin_forbidden_total",
        "kasi_admin_provider_refused_total",
        "kasi_approvals_total",
        "kasi_alerts_total",
    ];
    for name in FIRST_EVENT {
        assert!(names.contains(name), "the dashboard charts {name}");
    }
    // A callback's series appear once its answer is counted, a moment after
    // the DFSP saw it: waited for.
    s.hub.await_metrics("every charted metric", |exposed| {
        names
            .iter()
            .all(|name| {
                let family = name.strip_suffix("_total").unwrap_or(name);
                exposed.lines().any(|line| {
                    (!line.starts_with('#') && line.starts_with(name.as_str()))
                        || (FIRST_EVENT.contains(&name.as_str())
                            && line == format!("# TYPE {family} counter"))
                })
            })
            .then_some(())
    });
}
