//! End-to-end store faults with the real `kasi serve` binary: when the
//! store cannot write (the process's file-size limit stands in for a full
//! disk: both are write errors before anything reaches the disk), the hub
//! says so on `/health` (503 with the reason), in its log and its metrics,
//! refuses new work at once, holds the request in hand unanswered, and
//! resumes by itself when writes succeed again — losing nothing it
//! acknowledged.

mod support;

use std::time::{Duration, Instant};

use support::*;

/// Sets the soft file-size limit of process `pid` (the hard one stays).
fn set_file_size_limit(pid: u32, bytes: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit reads and writes only the structs it is given.
    unsafe {
        assert_eq!(
            libc::prlimit(
                pid as libc::pid_t,
                libc::RLIMIT_FSIZE,
                std::ptr::null(),
                &mut limit
            ),
            0
        );
        limit.rlim_cur = bytes.min(limit.rlim_max);
        assert_eq!(
            libc::prlimit(
                pid as libc::pid_t,
                libc::RLIMIT_FSIZE,
                &limit,
                std::ptr::null_mut()
            ),
            0,
            "prlimit: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn largest_file(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| entry.ok()?.metadata().ok())
        .map(|metadata| metadata.len())
        .max()
        .unwrap_or(0)
}

fn metric(hub: &Hub, name: &str) -> f64 {
    let metrics = hub.admin("GET", "/metrics", None).text();
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_store_that_cannot_write_is_reported_refuses_new_work_and_recovers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut hub = Hub::start(&data);
    hub.setup();
    let payee = Stub::start(PAYEE);
    hub.onboard(PAYER, &payee.base_url(), 100_000, 50_000);
    hub.onboard(PAYEE, &payee.base_url(), 100_000, 50_000);
    assert_eq!(hub.admin("GET", "/health", None).status, 200);
    assert_eq!(metric(&hub, "kasi_store_healthy"), 1.0);

    // A little room, then none: prepares go through until a write fails.
    set_file_size_limit(hub.pid(), largest_file(&data) + 64 * 1024);
    let api = hub.api;
    let (sender, answers) = std::sync::mpsc::channel();
    let sending = std::thread::spawn(move || {
        // One at a time, until one is held (or refused).
        for _ in 0..2_000 {
            let id = new_id();
            let body = prepare_body(&id, PAYER, PAYEE, "1", far_future());
            let response = http(
                api,
                "POST",
                "/transfers",
                &fspiop_headers(PAYER, PAYEE, true),
                body.as_bytes(),
            );
            let accepted = response.status == 202;
            sender.send((id, response.status)).unwrap();
            if !accepted {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let health = loop {
        let health = hub.admin("GET", "/health", None);
        if health.status != 200 {
            break health;
        }
        assert!(
            Instant::now() < deadline,
            "the store never failed:\n{}",
            hub.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(health.status, 503, "{health:?}");
    let body = health.json();
    assert_eq!(body["status"], "DOWN");
    let reason = body["services"][0]["reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains("cannot commit") && reason.contains("retrying"),
        "{reason}"
    );
    // /health turns before the line is written: wait for it, never read
    // the log once.
    assert!(
        hub.wait_for_log("store commit failed; retrying", CALLBACK_WAIT),
        "the failure is logged when it happens:\n{}",
        hub.log()
    );
    assert_eq!(metric(&hub, "kasi_store_healthy"), 0.0);
    assert!(metric(&hub, "kasi_store_errors_total") >= 1.0);
    // Out of rotation on both addresses, while alive.
    assert_eq!(hub.admin("GET", "/health/ready", None).status, 503);
    assert_eq!(http(hub.api, "GET", "/health/ready", &[], b"").status, 503);
    assert_eq!(http(hub.api, "GET", "/health/live", &[], b"").status, 200);

    // New work is refused at once, in FSPIOP's shape (2003; HTTP 500 as
    // Mojaloop maps every 20xx).
    let started = Instant::now();
    let refused = hub.prepare(
        PAYER,
        PAYEE,
        &prepare_body(&new_id(), PAYER, PAYEE, "1", far_future()),
    );
    assert_error_response(&refused, 500, "2003");
    assert!(
        refused.text().contains("cannot record changes"),
        "{refused:?}"
    );
    // At once, not held until the request times out (slack for a loaded
    // machine).
    assert!(started.elapsed() < Duration::from_secs(10));

    // Room again: the held prepare is answered, and the hub serves.
    let acknowledged_before: Vec<String> = answers
        .try_iter()
        .filter(|(_, status)| *status == 202)
        .map(|(id, _)| id)
        .collect();
    set_file_size_limit(hub.pid(), u64::MAX);
    sending.join().unwrap();
    let mut acknowledged = acknowledged_before;
    let mut last = None;
    for (id, status) in answers.try_iter() {
        if status == 202 {
            acknowledged.push(id);
        } else {
            last = Some(status);
        }
    }
    // Every prepare the thread sent was answered 202: the one held through
    // the fault too, once writes succeeded (the fault lasted far less than
    // the 30 s request timeout).
    assert_eq!(last, None, "the held prepare must be answered 202");
    let deadline = Instant::now() + Duration::from_secs(10);
    while hub.admin("GET", "/health", None).status != 200 {
        assert!(Instant::now() < deadline, "the hub never recovered");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(metric(&hub, "kasi_store_healthy"), 1.0);
    assert_eq!(hub.admin("GET", "/health/ready", None).status, 200);
    hub.await_log("store commits again");
    let response = hub.prepare(
        PAYER,
        PAYEE,
        &prepare_body(&new_id(), PAYER, PAYEE, "1", far_future()),
    );
    assert_eq!(response.status, 202, "{response:?}");
    acknowledged.push(String::new());
    let reserved = hub.position(PAYER);
    assert!(
        reserved >= (acknowledged.len()) as f64,
        "every acknowledged prepare holds its funds: {reserved} < {}",
        acknowledged.len()
    );

    // Nothing acknowledged was lost: after a crash the positions are the same.
    hub.kill();
    let hub = Hub::start(&data);
    assert_eq!(hub.position(PAYER), reserved);
    let audit = kasi()
        .args(["audit", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(audit.status.success(), "{audit:?}");
}
