//! Active and standby on one PostgreSQL store, end to end with the real
//! binary: a standby answers health checks and refuses work; when the
//! active is SIGKILLed mid-stream, the standby takes the lease, recovers
//! and serves, and every transfer a DFSP was told was committed is
//! COMMITTED there; a deposed active that wakes up (SIGSTOP, SIGCONT)
//! cannot write and stops.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;

const LEASE_MS: u64 = 1000;

fn node(dir: &std::path::Path, url: &str, name: &str) -> std::process::Command {
    Hub::postgres_command(dir, url, name, LEASE_MS, &[])
}

/// What the DFSPs were told, per transfer.
#[derive(Default)]
struct Told {
    /// The prepare was accepted (202: recorded durably).
    reserved: Vec<String>,
    /// The payer was told by callback that it committed.
    committed: Vec<String>,
}

/// Prepares and fulfils transfers on `hub` until `stop`, recording what
/// the DFSPs were told; stops at the first failure (the hub died). Gives
/// the payer's stub back.
fn drive(
    api: std::net::SocketAddr,
    payer: Stub,
    stop: Arc<AtomicBool>,
    told: Arc<Mutex<Told>>,
) -> Stub {
    while !stop.load(Ordering::Acquire) {
        let id = new_id();
        let body = prepare_body(&id, PAYER, PAYEE, "1", far_future());
        if try_api(api, "POST", "/transfers", PAYER, PAYEE, &body) != Some(202) {
            return payer;
        }
        told.lock().unwrap().reserved.push(id.clone());
        let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
        let path = format!("/transfers/{id}");
        if try_api(api, "PUT", &path, PAYEE, PAYER, &fulfil) != Some(200) {
            return payer;
        }
        // The payer learns the outcome by callback. Delivery is at least
        // once: if the active dies while this one is awaited, the standby
        // that takes over sends again every callback since the delivery
        // watermark, so earlier transfers' outcomes may come first.
        let deadline = Instant::now() + Duration::from_secs(5);
        let received = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(received) = payer.next_within(left) else {
                return payer;
            };
            let earlier = received.method == "PUT"
                && received
                    .path
                    .strip_prefix("/transfers/")
                    .is_some_and(|other| told.lock().unwrap().committed.iter().any(|c| c == other));
            if !earlier {
                break received;
            }
        };
        assert_eq!(
            (received.method.as_str(), received.path.as_str()),
            ("PUT", path.as_str())
        );
        assert_eq!(
            received.json()["transferState"],
            "COMMITTED",
            "{received:?}"
        );
        told.lock().unwrap().committed.push(id);
    }
    payer
}

/// The state `hub` answers for transfer `id` (a GET from the payer; the
/// answer comes to the payer's stub as `PUT /transfers/{id}`).
fn state_of(hub: &Hub, payer: &Stub, id: &str) -> String {
    let response = hub.get_transfer(id, PAYER, PAYEE);
    assert_eq!(response.status, 202, "GET {id}: {response:?}");
    let path = format!("/transfers/{id}");
    loop {
        let received = payer.next(&format!("the answer to GET {path}"));
        if received.method == "PUT" && received.path == path {
            return received.json()["transferState"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        }
    }
}

#[test]
fn a_standby_takes_over_from_a_killed_active_and_a_deposed_one_cannot_write() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dirs = tempfile::tempdir().unwrap();

    let mut a = Hub::spawn(node(dirs.path(), &url, "node-a"), dirs.path());
    a.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    for stub in [&payer, &payee] {
        a.onboard(&stub.name, &stub.base_url(), 1_000_000, 1_000_000);
    }
    let mut b = Hub::spawn_standby(node(dirs.path(), &url, "node-b"), dirs.path());

    // The standby says what it is and refuses work, naming the active
    // (once it has read the lease).
    b.await_log("standby: another kasi holds the lease");
    let deadline = Instant::now() + Duration::from_secs(10);
    let health = loop {
        let health = http(b.admin, "GET", "/health", &[], b"");
        if health.json()["store"]["leaseHolder"] == "node-a" || Instant::now() > deadline {
            break health;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(health.status, 503, "{health:?}");
    let body = health.json();
    assert_eq!(body["role"], "standby", "{body}");
    assert_eq!(body["store"]["kind"], "postgres", "{body}");
    assert_eq!(body["store"]["leaseHolder"], "node-a", "{body}");
    assert_eq!(body["store"]["reachable"], true, "{body}");
    assert_eq!(http(b.api, "GET", "/health/live", &[], b"").status, 200);
    let refused = http(
        b.api,
        "POST",
        "/transfers",
        &fspiop_headers(PAYER, PAYEE, true),
        prepare_body(&new_id(), PAYER, PAYEE, "1", far_future()).as_bytes(),
    );
    assert_error_response(&refused, 503, "2003");
    assert!(refused.header("retry-after").is_some(), "{refused:?}");
    assert!(refused.text().contains("node-a"), "{refused:?}");
    let refused = http(b.admin, "POST", "/participants", &[], b"{}");
    assert_eq!(refused.status, 503, "{refused:?}");
    let metrics = http(b.admin, "GET", "/metrics", &[], b"").text();
    assert!(
        metrics.contains("kasi_role_active{store=\"postgres\"} 0"),
        "{metrics}"
    );
    // And the active says it is.
    let health = a.admin("GET", "/health", None).json();
    assert_eq!(health["role"], "active", "{health}");
    assert_eq!(health["store"]["leaseHolder"], "node-a", "{health}");

    // Transfers stream through the active; it dies mid-stream.
    let stop = Arc::new(AtomicBool::new(false));
    let told = Arc::new(Mutex::new(Told::default()));
    let driver = {
        let (api, stop, told) = (a.api, stop.clone(), told.clone());
        std::thread::spawn(move || drive(api, payer, stop, told))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while told.lock().unwrap().committed.len() < 200 {
        assert!(Instant::now() < deadline, "the driver stalled");
        std::thread::sleep(Duration::from_millis(5));
    }
    a.kill();
    let killed_at = Instant::now();
    let payer = driver.join().unwrap();
    stop.store(true, Ordering::Release);

    assert!(
        b.wait_for_log("serving", Duration::from_secs(20)),
        "the standby did not take over:\n{}",
        b.log()
    );
    let takeover = killed_at.elapsed();
    // It recovered from the copy it kept warm while waiting, which added up.
    assert!(
        b.log().contains("the store is loaded, and kept current"),
        "{}",
        b.log()
    );
    assert!(!b.log().contains("did not add up"), "{}", b.log());
    eprintln!("takeover: serving {takeover:?} after the active's SIGKILL");
    assert!(takeover < Duration::from_secs(10), "{takeover:?}");

    let told = std::mem::take(&mut *told.lock().unwrap());
    assert!(told.committed.len() >= 200);
    let stored = stored_states(&url);
    for id in &told.committed {
        assert_eq!(
            stored.get(id).map(String::as_str),
            Some("COMMITTED"),
            "transfer {id}"
        );
    }
    // The new active answers from what it recovered (a few, by GET).
    while payer.next_within(Duration::from_millis(300)).is_some() {}
    for id in told.committed.iter().rev().take(3) {
        assert_eq!(state_of(&b, &payer, id), "COMMITTED", "transfer {id}");
    }
    // A prepare acknowledged but not fulfilled before the kill is still
    // reserved (so may be one whose acknowledgement the kill cut off): the
    // payee fulfils them on the new active.
    for id in told
        .reserved
        .iter()
        .filter(|id| !told.committed.contains(id))
    {
        assert!(
            matches!(
                stored.get(id).map(String::as_str),
                Some("RESERVED" | "COMMITTED")
            ),
            "transfer {id}: {:?}",
            stored.get(id)
        );
    }
    let reserved: Vec<&String> = stored
        .iter()
        .filter(|(_, state)| *state == "RESERVED")
        .map(|(id, _)| id)
        .collect();
    assert!(reserved.len() <= 2, "{reserved:?}");
    for id in reserved {
        let response = b.fulfil(id, PAYEE, PAYER, &fulfil_body(FULFILMENT, "COMMITTED"));
        assert_eq!(response.status, 200, "{response:?}");
    }
    // Positions net to zero: every transfer is committed, none lost or
    // counted twice.
    let stored = stored_states(&url);
    assert!(
        stored.values().all(|state| state == "COMMITTED"),
        "{stored:?}"
    );
    let committed = stored.len() as f64;
    assert!(committed >= told.reserved.len() as f64);
    assert_eq!(b.position(PAYER), committed);
    assert_eq!(b.position(PAYEE), -committed);
    let health = b.admin("GET", "/health", None).json();
    assert_eq!(health["role"], "active", "{health}");
    assert_eq!(health["store"]["leaseHolder"], "node-b", "{health}");
    assert!(
        health["store"]["fencing"].as_i64().unwrap() >= 2,
        "{health}"
    );

    // A third process waits; the active is paused (a long GC, a partition)
    // long enough for its lease to expire, and the third takes over.
    let mut c = Hub::spawn_standby(node(dirs.path(), &url, "node-c"), dirs.path());
    b.signal("STOP");
    assert!(
        c.wait_for_log("serving", Duration::from_secs(20)),
        "the third did not take over:\n{}",
        c.log()
    );
    let id = new_id();
    let response = c.prepare(
        PAYER,
        PAYEE,
        &prepare_body(&id, PAYER, PAYEE, "5", far_future()),
    );
    assert_eq!(response.status, 202, "{response:?}");
    // The paused one wakes: whatever it tries, it cannot write; it stops.
    b.signal("CONT");
    let late = new_id();
    let late_body = prepare_body(&late, PAYER, PAYEE, "7", far_future());
    let attempt = try_api(b.api, "POST", "/transfers", PAYER, PAYEE, &late_body);
    assert_ne!(
        attempt,
        Some(202),
        "a deposed active acknowledged a prepare"
    );
    // It stops serving and becomes a standby, in the same process.
    b.await_log("deposed");
    b.await_log("standby again");
    b.await_health("the deposed active is a standby", |health| {
        health["role"] == "standby" && health["status"] == "STANDBY"
    });
    assert!(
        b.wait_for_exit(Duration::ZERO).is_none(),
        "the deposed active exited"
    );
    let stored = stored_states(&url);
    assert!(
        !stored.contains_key(&late),
        "the deposed active's prepare reached the store"
    );
    assert_eq!(stored.get(&id).map(String::as_str), Some("RESERVED"));

    // When the active dies, the deposed one, a standby now, takes over.
    c.kill();
    let deadline = Instant::now() + Duration::from_secs(20);
    let again = new_id();
    loop {
        let body = prepare_body(&again, PAYER, PAYEE, "2", far_future());
        if try_api(b.api, "POST", "/transfers", PAYER, PAYEE, &body) == Some(202) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the once-deposed process did not take over again:\n{}",
            b.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let stored = stored_states(&url);
    assert_eq!(stored.get(&again).map(String::as_str), Some("RESERVED"));
    assert_eq!(stored.get(&id).map(String::as_str), Some("RESERVED"));

    // What the store holds adds up.
    let audit = kasi().args(["audit", "--store", &url]).output().unwrap();
    assert!(
        audit.status.success(),
        "{}",
        String::from_utf8_lossy(&audit.stdout)
    );
    drop((payer, payee));
}

/// The database goes away under a serving active and comes back within
/// the lease: nothing is acknowledged while it is away (2003), and the hub
/// resumes by itself, with nothing acknowledged lost and nothing written
/// twice.
#[test]
fn the_active_rides_out_a_database_restart_within_its_lease() {
    let mut cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::spawn(
        Hub::serve_command(
            dir.path(),
            &[
                "--store",
                &url,
                "--instance-name",
                "solo",
                // Long enough that the database's stop and restart fit in it
                // on a loaded machine (a restart there has taken over 6 s).
                "--lease-ms",
                "15000",
            ],
        ),
        dir.path(),
    );
    hub.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    for stub in [&payer, &payee] {
        hub.onboard(&stub.name, &stub.base_url(), 1_000_000, 1_000_000);
    }
    let transfer = |id: &str| -> (Option<u16>, Option<u16>) {
        let body = prepare_body(id, PAYER, PAYEE, "1", far_future());
        let prepared = try_api(hub.api, "POST", "/transfers", PAYER, PAYEE, &body);
        let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
        let path = format!("/transfers/{id}");
        let fulfilled = match prepared {
            Some(202) => try_api(hub.api, "PUT", &path, PAYEE, PAYER, &fulfil),
            _ => None,
        };
        (prepared, fulfilled)
    };
    let before = new_id();
    assert_eq!(transfer(&before), (Some(202), Some(200)));

    cluster.kill();
    // While the database is away, nothing is acknowledged.
    let during = new_id();
    let (prepared, _) = transfer(&during);
    assert_ne!(
        prepared,
        Some(202),
        "a prepare was acknowledged without a database"
    );
    // Readiness says so by the next lease renewal (every 5 s here; the
    // rest is slack for a loaded machine).
    let deadline = Instant::now() + Duration::from_secs(15);
    while http(hub.admin, "GET", "/health/ready", &[], b"").status != 503 {
        assert!(Instant::now() < deadline, "still ready without a database");
        std::thread::sleep(Duration::from_millis(50));
    }
    let health = http(hub.admin, "GET", "/health", &[], b"");
    assert_eq!(health.status, 503, "{health:?}");
    assert_eq!(health.json()["store"]["reachable"], false, "{health:?}");

    cluster.restart();
    // It resumes by itself: a new transfer completes.
    let deadline = Instant::now() + Duration::from_secs(15);
    let after = loop {
        let id = new_id();
        if transfer(&id) == (Some(202), Some(200)) {
            break id;
        }
        assert!(
            Instant::now() < deadline,
            "the hub did not resume:\n{}",
            hub.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let stored = stored_states(&url);
    assert_eq!(stored.get(&before).map(String::as_str), Some("COMMITTED"));
    assert_eq!(stored.get(&after).map(String::as_str), Some("COMMITTED"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while http(hub.admin, "GET", "/health/ready", &[], b"").status != 200 {
        assert!(Instant::now() < deadline, "not ready again:\n{}", hub.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let committed = stored.values().filter(|s| *s == "COMMITTED").count() as f64;
    assert_eq!(hub.position(PAYER), committed + reserved_amount(&stored));
    let audit = kasi().args(["audit", "--store", &url]).output().unwrap();
    assert!(
        audit.status.success(),
        "{}",
        String::from_utf8_lossy(&audit.stdout)
    );
    drop((payer, payee));
}

/// Reserved transfers (of 1 each) still held on the payer's position.
fn reserved_amount(stored: &std::collections::HashMap<String, String>) -> f64 {
    stored.values().filter(|s| *s == "RESERVED").count() as f64
}
