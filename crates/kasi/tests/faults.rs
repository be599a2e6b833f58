//! End-to-end store faults with the real `kasi serve` binary: when the
//! store cannot write (the process's file-size limit stands in for a full
//! disk: both are write errors before anything reaches the disk), the hub
//! says so on `/health` (503 with the reason), in its log and its metrics,
//! refuses new work at once (503, 2003, `Retry-After`), holds the request
//! in hand unanswered, answers the operator's reads from memory, says each
//! repeating failure once and then with a count, and resumes by itself
//! when writes succeed again — losing nothing it acknowledged. The same
//! answers when a PostgreSQL store is down.

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

    // New work is refused at once, in FSPIOP's shape: 503 with 2003 and
    // Retry-After (to be sent again), never a 500.
    let started = Instant::now();
    let refused = prepare_one(&hub);
    assert_refused_for_now(&refused);
    assert!(
        refused.text().contains("cannot record changes"),
        "{refused:?}"
    );
    // At once, not held until the request times out (slack for a loaded
    // machine).
    assert!(started.elapsed() < Duration::from_secs(10));

    // The sender waits for the one prepare held in hand; every one before
    // it was answered 202.
    let acknowledged_before: Vec<String> = answers
        .try_iter()
        .filter(|(_, status)| *status == 202)
        .map(|(id, _)| id)
        .collect();
    // The operator still reads positions and participants, from memory:
    // the acknowledged prepares' holds and the held one's.
    let started = Instant::now();
    assert_eq!(
        hub.position(PAYER),
        (acknowledged_before.len() + 1) as f64,
        "{}",
        hub.log()
    );
    assert_eq!(hub.position(PAYEE), 0.0);
    let participants = hub.admin_expect("GET", "/participants", None, 200).json();
    let names: Vec<&str> = participants
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(
        names.contains(&PAYER) && names.contains(&PAYEE),
        "{names:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "at once");
    // A change is refused like new work.
    let change = hub.admin(
        "PUT",
        &format!("/participants/{PAYEE}"),
        Some(&serde_json::json!({"isActive": false})),
    );
    assert_refused_for_now(&change);

    // No room at all: the callback journal (callbacks.db, written about
    // once a second) fails too, and says so once, then with a count — not
    // every second.
    set_file_size_limit(hub.pid(), 1);
    let failing_since = Instant::now();
    assert_said_once_then_counted(&hub, "callback journal: write failed", failing_since);

    // Room again: the held prepare is answered, and the hub serves.
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
    hub.await_log("callback journal: writes again");
    let response = prepare_one(&hub);
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

/// A PostgreSQL store that is down while the active keeps its lease: the
/// first prepare after it went is the batch in hand, held while its commit
/// is retried; every later one is refused 503 with 2003 and Retry-After;
/// the operator still reads participants and positions (reads alone need
/// no commit); the callback journal's failures are said once and then
/// counted; and once the database is back the held prepare commits (its
/// sender heard 202, or 2004 if the outage outlasted its request) and the
/// hub serves again, with nothing acknowledged lost.
#[test]
fn a_postgres_store_that_is_down_refuses_new_work_for_now_and_still_answers_reads() {
    let mut cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().unwrap();
    // The outage fits in the lease: the active stays active.
    let command = Hub::postgres_command(dir.path(), &url, "solo", 120_000, &[]);
    let hub = Hub::spawn(command, dir.path());
    let scenario = Scenario::on(hub, dir, 100_000, 50_000);
    let hub = &scenario.hub;
    scenario.reserve("7", far_future());

    cluster.kill();
    let failing_since = Instant::now();
    // A fresh id needs no read: the first prepare reaches the commit, which
    // fails, and is held while it is retried.
    let held = std::thread::scope(|scope| {
        let held = scope.spawn(|| prepare_one(hub));
        hub.await_log("store commit failed");
        assert_refused_for_now(&prepare_one(hub));
        // Its hold is in memory, as the batch in hand.
        assert_eq!(hub.position(PAYER), 8.0);
        assert_eq!(hub.admin("GET", "/participants", None).status, 200);
        assert_said_once_then_counted(hub, "callback journal: write failed", failing_since);
        cluster.restart();
        held.join().unwrap()
    });
    assert!(
        held.status == 202 || held.text().contains("\"errorCode\":\"2004\""),
        "the held prepare: 202, or 2004 if the outage outlasted it: {held:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = prepare_one(hub);
        if response.status == 202 {
            break;
        }
        assert_refused_for_now(&response);
        assert!(
            Instant::now() < deadline,
            "never served again:\n{}",
            hub.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    hub.await_log("callback journal: writes again");
    hub.await_log("store commits again");
    // 7, the held prepare (committed once the database was back), and
    // the one just answered.
    assert_eq!(hub.position(PAYER), 9.0);
}

/// A prepare of 1 from the payer to the payee, with a new id.
fn prepare_one(hub: &Hub) -> Response {
    hub.prepare(
        PAYER,
        PAYEE,
        &prepare_body(&new_id(), PAYER, PAYEE, "1", far_future()),
    )
}

/// Waits for a failure that repeats (about once a second, since
/// `failing_since`) to be logged once and then again with the count it
/// stands for, and no more often than every 10 s.
fn assert_said_once_then_counted(hub: &Hub, line: &str, failing_since: Instant) {
    let lines = hub.await_log_lines(line, 2);
    let count: u64 = lines[1]
        .split("repeated=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count: {}", lines[1]));
    assert!(count >= 2, "{}", lines[1]);
    let said = hub.log().lines().filter(|l| l.contains(line)).count() as u64;
    assert!(
        said <= 2 + failing_since.elapsed().as_secs() / 10,
        "{said} lines in {:?}",
        failing_since.elapsed()
    );
}
