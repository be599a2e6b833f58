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
