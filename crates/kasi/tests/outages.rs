//! A PostgreSQL store that goes away — an outage of seconds or minutes, a
//! clean restart, a network partition between the active and its
//! database — with no supervisor: the kasi processes never exit, someone
//! serves again within seconds of the database's return, nothing a DFSP
//! was told is lost, every payer of a committed transfer is told, and a
//! process cut off from the database never writes again (checked in the
//! database). End to end, with the real binary and throw-away clusters.

mod support;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::*;

const LEASE_MS: u64 = 1000;

/// How long after the database's return a transfer must complete (the
/// goal is a few seconds; the rest is slack for a loaded 2-core machine).
const SERVED_AGAIN_WITHIN: Duration = Duration::from_secs(20);

fn node(dir: &std::path::Path, url: &str, name: &str) -> std::process::Command {
    Hub::postgres_command(dir, url, name, LEASE_MS, &[])
}

/// What the DFSPs were told.
#[derive(Default)]
struct Book {
    /// 202 to the prepare, 200 to the fulfil.
    committed: Vec<String>,
    /// 202 to the prepare only.
    reserved: Vec<String>,
    /// Attempted while the store was away and not acknowledged.
    refused: Vec<String>,
}

/// One transfer through the first of `apis` that takes the prepare.
fn transfer(apis: &[SocketAddr], book: &mut Book) -> bool {
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "1", far_future());
    let Some(&api) = apis
        .iter()
        .find(|&&api| try_api(api, "POST", "/transfers", PAYER, PAYEE, &body) == Some(202))
    else {
        book.refused.push(id);
        return false;
    };
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    if try_api(
        api,
        "PUT",
        &format!("/transfers/{id}"),
        PAYEE,
        PAYER,
        &fulfil,
    ) == Some(200)
    {
        book.committed.push(id);
        true
    } else {
        book.reserved.push(id);
        false
    }
}

/// Transfers until one commits through any of `apis`: how long it took.
fn until_served(apis: &[SocketAddr], book: &mut Book, what: &str, logs: &[&Hub]) -> Duration {
    let began = Instant::now();
    while !transfer(apis, book) {
        if began.elapsed() > SERVED_AGAIN_WITHIN {
            let logs: Vec<String> = logs.iter().map(|hub| hub.log()).collect();
            panic!(
                "nobody served {what} within {SERVED_AGAIN_WITHIN:?}:\n{}",
                logs.join("\n------\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    began.elapsed()
}

/// While the database is away nothing is acknowledged, and no process
/// exits.
fn nothing_acknowledged_while_away(apis: &[SocketAddr], book: &mut Book, hubs: &mut [&mut Hub]) {
    for _ in 0..3 {
        assert!(
            !transfer(apis, book),
            "a transfer was acknowledged without a database"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for hub in hubs.iter_mut() {
        assert!(
            hub.wait_for_exit(Duration::ZERO).is_none(),
            "a kasi exited while its database was away:\n{}",
            hub.log()
        );
    }
}

/// Every acknowledged transfer is stored as it was told; every committed
/// one's payer was told (delivery is at least once: a process that took
/// over sends again what may not have reached the payer).
fn nothing_lost(url: &str, book: &Book, payer: &Stub) {
    let stored = stored_states(url);
    for id in &book.committed {
        assert_eq!(
            stored.get(id).map(String::as_str),
            Some("COMMITTED"),
            "transfer {id} was acknowledged as committed"
        );
    }
    for id in &book.reserved {
        let state = stored.get(id).map(String::as_str);
        assert!(
            matches!(state, Some("RESERVED" | "COMMITTED")),
            "transfer {id} was acknowledged as reserved: {state:?}"
        );
    }
    let mut untold: HashSet<String> = book
        .committed
        .iter()
        .map(|id| format!("/transfers/{id}"))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !untold.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(received) = payer.next_within(left) else {
            panic!(
                "{} committed transfers' payers never told, e.g. {:?}",
                untold.len(),
                untold.iter().next()
            );
        };
        if received.method == "PUT" && received.json()["transferState"] == "COMMITTED" {
            untold.remove(&received.path);
        }
    }
    let audit = kasi().args(["audit", "--store", url]).output().unwrap();
    assert!(
        audit.status.success(),
        "{}",
        String::from_utf8_lossy(&audit.stdout)
    );
}

fn onboarded(hub: &Hub) -> (Stub, Stub) {
    hub.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    for stub in [&payer, &payee] {
        hub.onboard(&stub.name, &stub.base_url(), 1_000_000, 1_000_000);
    }
    (payer, payee)
}

#[test]
fn a_pair_rides_out_outages_and_a_restart_with_its_active_killed() {
    let mut cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dirs = tempfile::tempdir().unwrap();
    let mut a = Hub::spawn(node(dirs.path(), &url, "node-a"), dirs.path());
    let (payer, payee) = onboarded(&a);
    let mut b = Hub::spawn_standby(node(dirs.path(), &url, "node-b"), dirs.path());
    let apis = [a.api, b.api];
    let mut book = Book::default();
    for _ in 0..10 {
        assert!(transfer(&apis, &mut book), "{}", a.log());
    }

    // Outages of 5 and 30 seconds (an immediate stop: no checkpoint).
    for outage in [Duration::from_secs(5), Duration::from_secs(30)] {
        cluster.kill();
        let went_at = Instant::now();
        nothing_acknowledged_while_away(&apis, &mut book, &mut [&mut a, &mut b]);
        std::thread::sleep(outage.saturating_sub(went_at.elapsed()));
        cluster.restart();
        let served_in = until_served(&apis, &mut book, "after the outage", &[&a, &b]);
        eprintln!(
            "outage of {outage:?}: a transfer committed {served_in:?} after the database's return"
        );
        for _ in 0..5 {
            assert!(transfer(&apis, &mut book));
        }
    }

    // A clean restart of the database, then the active is SIGKILLed: the
    // other takes over within a lease and its recovery.
    cluster.stop_fast();
    cluster.restart();
    until_served(&apis, &mut book, "after the restart", &[&a, &b]);
    let active_is_a = http(a.admin, "GET", "/health", &[], b"").json()["role"] == "active";
    let (dead, survivor) = if active_is_a {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    dead.kill();
    let killed_at = Instant::now();
    let served_in = until_served(&[survivor.api], &mut book, "after the kill", &[&*survivor]);
    eprintln!(
        "the active SIGKILLed after a database restart: the other served {:?} later",
        killed_at.elapsed()
    );
    assert!(served_in < SERVED_AGAIN_WITHIN);
    assert!(survivor.wait_for_exit(Duration::ZERO).is_none());

    nothing_lost(&url, &book, &payer);
    drop(payee);
}

#[test]
fn a_single_node_rides_out_a_two_minute_outage() {
    let mut cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().unwrap();
    let mut hub = Hub::spawn(node(dir.path(), &url, "solo"), dir.path());
    let (payer, payee) = onboarded(&hub);
    let apis = [hub.api];
    let mut book = Book::default();
    for _ in 0..10 {
        assert!(transfer(&apis, &mut book), "{}", hub.log());
    }

    cluster.kill();
    let went_at = Instant::now();
    nothing_acknowledged_while_away(&apis, &mut book, &mut [&mut hub]);
    // It says so: a standby that cannot reach its store, refusing work
    // with 503 and Retry-After.
    hub.await_health("a standby that cannot reach its store", |health| {
        health["role"] == "standby" && health["store"]["reachable"] == false
    });
    let refused = http(
        hub.api,
        "POST",
        "/transfers",
        &fspiop_headers(PAYER, PAYEE, true),
        prepare_body(&new_id(), PAYER, PAYEE, "1", far_future()).as_bytes(),
    );
    assert_error_response(&refused, 503, "2003");
    assert!(refused.header("retry-after").is_some(), "{refused:?}");
    std::thread::sleep(Duration::from_secs(120).saturating_sub(went_at.elapsed()));
    assert!(hub.wait_for_exit(Duration::ZERO).is_none(), "{}", hub.log());
    cluster.restart();
    let served_in = until_served(&apis, &mut book, "after two minutes away", &[&hub]);
    eprintln!("outage of 120 s: a transfer committed {served_in:?} after the database's return");
    hub.await_health("active again", |health| health["role"] == "active");
    // The repeated failures of those two minutes were said a few times, not
    // every poll.
    let log = hub.log();
    let said = log.matches("standby: cannot reach the store").count();
    assert!((1..=10).contains(&said), "said {said} times:\n{log}");

    nothing_lost(&url, &book, &payer);
    drop(payee);
}

/// A pair whose active, `a`, reaches the database through a link the
/// test controls, and whose standby, `b`, directly; ten transfers done.
struct Linked {
    cluster: testpg::Cluster,
    url: String,
    link: TcpCut,
    a: Hub,
    b: Hub,
    payer: Stub,
    payee: Stub,
    book: Book,
    _dirs: tempfile::TempDir,
}

impl Linked {
    fn start() -> Linked {
        let cluster = testpg::Cluster::start();
        let url = cluster.create_database("hub");
        let link = TcpCut::start(SocketAddr::from(([127, 0, 0, 1], cluster.port())));
        let url_through_link = format!("postgres://postgres@{}/hub", link.address());
        let dirs = tempfile::tempdir().unwrap();
        let a = Hub::spawn(node(dirs.path(), &url_through_link, "node-a"), dirs.path());
        let (payer, payee) = onboarded(&a);
        let b = Hub::spawn_standby(node(dirs.path(), &url, "node-b"), dirs.path());
        let mut book = Book::default();
        for _ in 0..10 {
            assert!(transfer(&[a.api], &mut book), "{}", a.log());
        }
        Linked {
            cluster,
            url,
            link,
            a,
            b,
            payer,
            payee,
            book,
            _dirs: dirs,
        }
    }

    fn lease(&self) -> String {
        self.cluster
            .query("hub", "SELECT holder, fencing FROM kasi_lease")
    }

    /// After `b` took over: `a` acknowledges nothing; once the link heals
    /// it is a standby of `b`, the lease does not move, `b` keeps serving,
    /// and nothing `a` was asked reached the store.
    fn heal_and_check(mut self) {
        let late = new_id();
        let body = prepare_body(&late, PAYER, PAYEE, "3", far_future());
        assert_ne!(
            try_api(self.a.api, "POST", "/transfers", PAYER, PAYEE, &body),
            Some(202)
        );
        let lease = self.lease();
        self.link.heal();
        self.a
            .await_health("a standby of node-b once the link heals", |health| {
                health["role"] == "standby"
                    && health["store"]["reachable"] == true
                    && health["store"]["leaseHolder"] == "node-b"
            });
        for _ in 0..5 {
            assert!(transfer(&[self.b.api], &mut self.book), "{}", self.b.log());
        }
        assert!(!stored_states(&self.url).contains_key(&late));
        assert_eq!(self.lease(), lease, "the lease moved after the link healed");
        assert!(self.a.wait_for_exit(Duration::ZERO).is_none());
        assert!(self.b.wait_for_exit(Duration::ZERO).is_none());
        nothing_lost(&self.url, &self.book, &self.payer);
        drop(self.payee);
    }
}

#[test]
fn an_active_cut_off_from_its_database_is_fenced_and_the_standby_takes_over() {
    let mut pair = Linked::start();
    let fencing_before: i64 = pair
        .cluster
        .query("hub", "SELECT fencing FROM kasi_lease")
        .parse()
        .unwrap();

    pair.link.cut();
    let cut_at = Instant::now();
    let served_in = until_served(
        &[pair.b.api],
        &mut pair.book,
        "by the standby",
        &[&pair.a, &pair.b],
    );
    eprintln!(
        "partition: the standby served {:?} after the active was cut off",
        cut_at.elapsed()
    );
    assert!(served_in < SERVED_AGAIN_WITHIN);
    // The lease is the standby's, under a higher fencing number, and the
    // cut-off process stopped serving.
    let lease = pair.lease();
    let (holder, fencing) = lease.split_once('|').unwrap();
    assert_eq!(holder, "node-b");
    assert!(fencing.parse::<i64>().unwrap() > fencing_before, "{lease}");
    pair.a
        .await_health("the cut-off active is a standby", |health| {
            health["role"] == "standby"
        });
    pair.heal_and_check();
}

#[test]
fn an_active_whose_database_stops_answering_stops_serving_by_the_clock() {
    let mut pair = Linked::start();
    // Its database host hangs: the active's renewal waits on a connection
    // that neither answers nor fails. It stops serving when its lease
    // runs out all the same, and the standby takes over. Whatever it had
    // in flight arrives when the host answers again, and fails its
    // fencing check.
    pair.link.stall();
    let stalled_at = Instant::now();
    pair.a
        .await_health("the hung active stops serving", |health| {
            health["role"] == "standby"
        });
    let stopped_in = stalled_at.elapsed();
    until_served(
        &[pair.b.api],
        &mut pair.book,
        "by the standby",
        &[&pair.a, &pair.b],
    );
    eprintln!(
        "a hung database host: the active stopped serving {stopped_in:?} after, the standby served {:?} after",
        stalled_at.elapsed()
    );
    pair.heal_and_check();
}

/// A database that is not there yet (a machine booting, a database
/// restarting) is waited for, as a standby that says why without printing
/// the password; a stop signal ends the wait cleanly.
#[test]
fn a_store_not_there_yet_is_waited_for_without_printing_its_password() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1.
    let mut waiting = Hub::spawn_standby(
        Hub::serve_command(
            dir.path(),
            &["--store", "postgres://kasi:s3cret@127.0.0.1:1/hub"],
        ),
        dir.path(),
    );
    waiting.await_log("cannot connect to postgres://kasi:***@127.0.0.1:1/hub");
    waiting.await_health("waiting for an unreachable store", |health| {
        health["role"] == "standby" && health["store"]["reachable"] == false
    });
    let status = waiting.terminate();
    assert!(status.success(), "{status:?}\n{}", waiting.log());
    assert!(!waiting.log().contains("s3cret"), "{}", waiting.log());
}

/// A fault no waiting mends — here a database that does not exist — stops
/// the process with the cause, instead of waiting for ever.
#[test]
fn a_store_that_waiting_cannot_mend_is_refused_with_its_cause() {
    let cluster = testpg::Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    let output = Hub::serve_command(dir.path(), &["--store", &cluster.url("nosuchdb")])
        .output()
        .unwrap();
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("nosuchdb"), "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
}
