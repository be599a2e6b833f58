//! Chaos: transfers under load through a pair of kasi processes on one
//! PostgreSQL store while, on a seeded schedule, kasi processes are
//! SIGKILLed (and started again) or paused, the database is crashed,
//! restarted or made to hang, and either process is cut off from it.
//! Then: every acknowledged transfer is found as it was told, every payer
//! of a committed transfer was told, the store audits clean — and the
//! report says how long nobody served while the database was up.
//!
//! CI runs a short, fixed schedule (`KASI_CHAOS_SECONDS`, default 60;
//! `KASI_CHAOS_SEED`, default 1); `ops/chaos.sh` runs the long one a
//! benchmark records (10 minutes, a random seed, printed to replay it).

mod support;

use std::collections::HashSet;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use support::*;

const LEASE_MS: u64 = 1000;
/// Load: this many DFSP threads preparing and fulfilling at once.
const DRIVERS: usize = 3;

/// splitmix64: a seeded schedule, the same for the same seed.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// What the DFSPs were told, and what the run saw.
#[derive(Default)]
struct Book {
    committed: Vec<String>,
    reserved: Vec<String>,
    refused: u64,
}

/// Who serves, as the monitor sees it.
struct Watch {
    /// The database is deliberately away (crashed, restarting): a gap
    /// then is the database's, not kasi's.
    database_away: AtomicBool,
    /// Milliseconds, while the database was up, with no process ready.
    unserved_ms: AtomicU64,
    longest_gap_ms: AtomicU64,
    /// Every gap of a second or more: when it began (since the run
    /// began) and how long it lasted.
    gaps: Mutex<Vec<(Duration, Duration)>>,
}

/// One FSPIOP request, without panicking on a process that is gone: its
/// status, or `None`.
fn status_of(api: SocketAddr, method: &str, path: &str, source: &str, body: &str) -> Option<u16> {
    let destination = if source == PAYER { PAYEE } else { PAYER };
    let headers = fspiop_headers(source, destination, method == "POST");
    let mut stream = TcpStream::connect_timeout(&api, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in &headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body.as_bytes()).ok()?;
    let mut answer = [0u8; 12];
    stream.read_exact(&mut answer).ok()?;
    std::str::from_utf8(&answer[9..12]).ok()?.parse().ok()
}

fn ready(admin: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&admin, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let request =
        format!("GET /health/ready HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    let mut answer = [0u8; 12];
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_exact(&mut answer).is_ok()
        && &answer[9..12] == b"200"
}

/// A process of the pair, its link to the database, and how to start it
/// again.
struct Node {
    name: &'static str,
    link: TcpCut,
    hub: Option<Hub>,
    dir: std::path::PathBuf,
}

impl Node {
    fn command(&self) -> std::process::Command {
        let url = format!("postgres://postgres@{}/hub", self.link.address());
        Hub::postgres_command(&self.dir, &url, self.name, LEASE_MS, &[])
    }

    fn hub(&self) -> &Hub {
        self.hub.as_ref().expect("running")
    }
}

#[test]
fn transfers_survive_seeded_chaos_with_nothing_lost_and_everyone_told() {
    let seconds: u64 = std::env::var("KASI_CHAOS_SECONDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("KASI_CHAOS_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(1);
    eprintln!("chaos: {seconds} s, seed {seed} (KASI_CHAOS_SEED={seed} replays the schedule)");
    let mut schedule = Seeded(seed);
    let mut cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let database = SocketAddr::from(([127, 0, 0, 1], cluster.port()));
    let dirs = tempfile::tempdir().unwrap();
    let mut nodes = ["node-a", "node-b"].map(|name| Node {
        name,
        link: TcpCut::start(database),
        hub: None,
        dir: dirs.path().join(name),
    });
    nodes[0].hub = Some(Hub::spawn(nodes[0].command(), &nodes[0].dir));
    let payer = Arc::new(Stub::start(PAYER));
    let payee = Stub::start(PAYEE);
    {
        let hub = nodes[0].hub();
        hub.setup();
        hub.onboard(PAYER, &payer.base_url(), 1_000_000_000, 1_000_000_000);
        hub.onboard(PAYEE, &payee.base_url(), 1_000_000_000, 1_000_000_000);
    }
    nodes[1].hub = Some(Hub::spawn_standby(nodes[1].command(), &nodes[1].dir));

    // Where the load goes: both processes' addresses (a process started
    // again has new ones).
    let apis = Arc::new(RwLock::new(
        nodes.iter().map(|node| node.hub().api).collect::<Vec<_>>(),
    ));
    let admins = Arc::new(RwLock::new(
        nodes
            .iter()
            .map(|node| node.hub().admin)
            .collect::<Vec<_>>(),
    ));
    let book = Arc::new(Mutex::new(Book::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let drivers: Vec<_> = (0..DRIVERS)
        .map(|_| {
            let (apis, book, stop) = (apis.clone(), book.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let id = new_id();
                    let body = prepare_body(&id, PAYER, PAYEE, "1", far_future());
                    let targets = apis.read().unwrap().clone();
                    let taken = targets.into_iter().find(|&api| {
                        status_of(api, "POST", "/transfers", PAYER, &body) == Some(202)
                    });
                    let Some(api) = taken else {
                        book.lock().unwrap().refused += 1;
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
                    let path = format!("/transfers/{id}");
                    let committed = status_of(api, "PUT", &path, PAYEE, &fulfil) == Some(200);
                    let mut book = book.lock().unwrap();
                    match committed {
                        true => book.committed.push(id),
                        false => book.reserved.push(id),
                    }
                }
            })
        })
        .collect();
    // The payer's callbacks, as they come (the stub keeps them in order).
    let told = Arc::new(Mutex::new(HashSet::<String>::new()));
    let collecting = Arc::new(AtomicBool::new(true));
    let collector = {
        let (payer, told, collecting) = (payer.clone(), told.clone(), collecting.clone());
        std::thread::spawn(move || {
            while collecting.load(Ordering::Acquire) {
                if let Some(received) = payer.next_within(Duration::from_millis(100)) {
                    if received.method == "PUT" && received.json()["transferState"] == "COMMITTED" {
                        if let Some(id) = received.path.strip_prefix("/transfers/") {
                            told.lock().unwrap().insert(id.to_string());
                        }
                    }
                }
            }
        })
    };
    let watch = Arc::new(Watch {
        database_away: AtomicBool::new(false),
        unserved_ms: AtomicU64::new(0),
        longest_gap_ms: AtomicU64::new(0),
        gaps: Mutex::new(Vec::new()),
    });
    let began = Instant::now();
    let monitor = {
        let (admins, watch, stop) = (admins.clone(), watch.clone(), stop.clone());
        std::thread::spawn(move || {
            let tick = Duration::from_millis(100);
            let mut gap_ms = 0;
            let mut last = Instant::now();
            while !stop.load(Ordering::Acquire) {
                let serving = admins.read().unwrap().iter().any(|&admin| ready(admin));
                // A probe of a paused process takes its timeout: the time
                // counted is the time that passed.
                let passed_ms = last.elapsed().as_millis() as u64;
                last = Instant::now();
                if serving || watch.database_away.load(Ordering::Acquire) {
                    if gap_ms >= 1_000 {
                        let length = Duration::from_millis(gap_ms);
                        let start = began.elapsed().saturating_sub(length);
                        watch.gaps.lock().unwrap().push((start, length));
                    }
                    gap_ms = 0;
                } else {
                    gap_ms += passed_ms;
                    watch.unserved_ms.fetch_add(passed_ms, Ordering::AcqRel);
                    watch.longest_gap_ms.fetch_max(gap_ms, Ordering::AcqRel);
                }
                std::thread::sleep(tick);
            }
        })
    };

    // The schedule.
    let mut actions: Vec<(Duration, String)> = Vec::new();
    while began.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_millis(schedule.between(2_000, 6_000)));
        let at = began.elapsed();
        let which = schedule.between(0, 1) as usize;
        let pause = Duration::from_millis(schedule.between(1_000, 5_000));
        let action = match schedule.between(0, 5) {
            0 => {
                // SIGKILL, then start it again a moment later.
                nodes[which].hub.as_mut().unwrap().kill();
                std::thread::sleep(pause);
                let hub = Hub::spawn_standby(nodes[which].command(), &nodes[which].dir);
                apis.write().unwrap()[which] = hub.api;
                admins.write().unwrap()[which] = hub.admin;
                nodes[which].hub = Some(hub);
                format!(
                    "SIGKILL {} and start it again after {pause:?}",
                    nodes[which].name
                )
            }
            1 => {
                nodes[which].hub().signal("STOP");
                std::thread::sleep(pause);
                nodes[which].hub().signal("CONT");
                format!("pause {} for {pause:?}", nodes[which].name)
            }
            2 => {
                watch.database_away.store(true, Ordering::Release);
                cluster.kill();
                std::thread::sleep(pause);
                cluster.restart();
                watch.database_away.store(false, Ordering::Release);
                format!("crash the database for {pause:?}")
            }
            3 => {
                watch.database_away.store(true, Ordering::Release);
                cluster.stop_fast();
                cluster.restart();
                watch.database_away.store(false, Ordering::Release);
                "restart the database".to_string()
            }
            4 => {
                nodes[which].link.cut();
                std::thread::sleep(pause);
                nodes[which].link.heal();
                format!("cut {} off the database for {pause:?}", nodes[which].name)
            }
            _ => {
                nodes[which].link.stall();
                std::thread::sleep(pause);
                nodes[which].link.heal();
                format!("hang {}'s database link for {pause:?}", nodes[which].name)
            }
        };
        eprintln!("chaos {:>6.1} s: {action}", at.as_secs_f64());
        actions.push((at, action));
    }

    // Calm: someone serves again, then the load stops.
    let calm_at = Instant::now();
    while !admins.read().unwrap().iter().any(|&admin| ready(admin)) {
        assert!(
            calm_at.elapsed() < Duration::from_secs(30),
            "nobody serves after the chaos:\n{}\n------\n{}",
            nodes[0].hub().log(),
            nodes[1].hub().log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Release);
    for driver in drivers {
        driver.join().unwrap();
    }
    monitor.join().unwrap();
    let book = std::mem::take(&mut *book.lock().unwrap());
    assert!(!book.committed.is_empty(), "nothing committed");

    // Every payer of a committed transfer is told (at least once; a
    // process that takes over sends again what may not have arrived).
    let deadline = Instant::now() + Duration::from_secs(90);
    let never_told = loop {
        let untold = {
            let told = told.lock().unwrap();
            book.committed
                .iter()
                .filter(|id| !told.contains(*id))
                .count()
        };
        if untold == 0 || Instant::now() > deadline {
            break untold;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    collecting.store(false, Ordering::Release);
    collector.join().unwrap();

    // Everything acknowledged is stored as told.
    let stored = stored_states(&url);
    let lost_commits = book
        .committed
        .iter()
        .filter(|id| stored.get(*id).map(String::as_str) != Some("COMMITTED"))
        .count();
    let lost_reservations = book
        .reserved
        .iter()
        .filter(|id| {
            !matches!(
                stored.get(*id).map(String::as_str),
                Some("RESERVED" | "COMMITTED")
            )
        })
        .count();
    let audit = kasi().args(["audit", "--store", &url]).output().unwrap();
    let unserved = Duration::from_millis(watch.unserved_ms.load(Ordering::Acquire));
    let longest_gap = Duration::from_millis(watch.longest_gap_ms.load(Ordering::Acquire));
    eprintln!(
        "chaos report: seed {seed}, {seconds} s, {} actions; acknowledged {} committed and {} \
         reserved, found {} and {}; lost {lost_commits} commits and {lost_reservations} \
         reservations; payers never told {never_told}; {} refused attempts; nobody serving \
         (database up) {unserved:?} in all, longest gap {longest_gap:?}",
        actions.len(),
        book.committed.len(),
        book.reserved.len(),
        book.committed.len() - lost_commits,
        book.reserved.len() - lost_reservations,
        book.refused,
    );
    // The longest gaps, each with what the schedule did last before it.
    let mut gaps = watch.gaps.lock().unwrap().clone();
    gaps.sort_by_key(|&(_, length)| std::cmp::Reverse(length));
    for (start, length) in gaps.iter().take(5) {
        let cause = actions
            .iter()
            .rev()
            .find(|(at, _)| at <= start)
            .map_or("(before any action)", |(_, action)| action.as_str());
        eprintln!(
            "chaos gap: nobody served for {length:?} from {:.1} s, after: {cause}",
            start.as_secs_f64()
        );
    }
    assert_eq!(lost_commits, 0);
    assert_eq!(lost_reservations, 0);
    assert_eq!(never_told, 0, "payers never told");
    assert!(
        audit.status.success(),
        "{}",
        String::from_utf8_lossy(&audit.stdout)
    );
    // Both processes still run (nothing the schedule did stops one for
    // good), and nobody served for no longer than a lease, a recovery and
    // a restart of a killed process (its pause is at most 5 s) allow.
    for node in &mut nodes {
        assert!(
            node.hub
                .as_mut()
                .unwrap()
                .wait_for_exit(Duration::ZERO)
                .is_none(),
            "{} exited:\n{}",
            node.name,
            node.hub().log()
        );
    }
    let bound = Duration::from_millis(LEASE_MS) + Duration::from_secs(3);
    assert!(
        longest_gap <= bound,
        "nobody served for {longest_gap:?} with the database up (bound {bound:?})"
    );
    drop(payee);
}
