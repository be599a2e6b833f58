//! Replication: kasi on a PostgreSQL primary with a synchronous streaming
//! standby; the primary is lost (immediate stop, no checkpoint), the
//! standby is promoted (`pg_ctl promote`), and kasi, still running on the
//! same multi-host URL (`target_session_attrs=read-write` finds the
//! promoted standby), serves from it with nothing it acknowledged lost.
//!
//! Transfers are in flight when the primary goes: a driver thread keeps
//! preparing and fulfilling through the first kasi and records what it
//! was told (202 to a prepare: reserved; 200 to a fulfil: committed). A
//! commit is acknowledged only once the primary flushed it and the
//! synchronous standby did, so every one of them must be on the promoted
//! standby.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ledger::{TransferId, TransferState};
use serde_json::json;
use store::Store as _;
use support::*;

/// The standby's `application_name`, as `synchronous_standby_names` names it.
const STANDBY: &str = "kasi_standby";
/// Both kasi processes use one name: the second takes the lease at once.
const INSTANCE: &str = "kasi-repl";
const LEASE_MS: &str = "1000";
/// Transfers committed through the first kasi before the primary is lost
/// while the driver keeps going.
const COMMITTED_BEFORE_KILL: usize = 20;

/// What the hub told a DFSP about one transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Told {
    /// No answer (or an error): it may or may not be stored.
    Nothing,
    /// 202 to the prepare: reserved, durably.
    Reserved,
    /// 200 to the fulfil: committed, durably.
    Committed,
}

struct Sent {
    id: String,
    amount: u64,
    told: Told,
}

#[test]
fn a_promoted_synchronous_standby_serves_with_nothing_acknowledged_lost() {
    let began = Instant::now();
    let mut primary = testpg::Cluster::start();
    primary.create_database("hub");
    let standby = testpg::Cluster::start_standby_of(&primary, STANDBY);
    primary.configure(&[
        ("synchronous_standby_names", STANDBY),
        ("synchronous_commit", "on"),
    ]);
    wait_until_synchronous(&primary, STANDBY);
    assert_eq!(standby.query("postgres", "SELECT pg_is_in_recovery()"), "t");
    let clusters_ready = began.elapsed();

    // Both hosts: libpq's form, which the `postgres` crate reads too.
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/hub?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let dir = tempfile::tempdir().unwrap();
    let mut first = start_kasi(&dir, &url);
    first.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    first.onboard(PAYER, &payer.base_url(), 1_000_000, 1_000_000);
    first.onboard(PAYEE, &payee.base_url(), 1_000_000, 1_000_000);

    // Transfers the whole way, callbacks and all.
    let mut sent = Vec::new();
    for amount in 1..=5 {
        let id = new_id();
        let body = prepare_body(&id, PAYER, PAYEE, &amount.to_string(), far_future());
        let prepared = first.prepare(PAYER, PAYEE, &body);
        assert_eq!(prepared.status, 202, "{prepared:?}");
        assert_eq!(payee.expect("POST", "/transfers").text(), body);
        let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
        let fulfilled = first.fulfil(&id, PAYEE, PAYER, &fulfil);
        assert_eq!(fulfilled.status, 200, "{fulfilled:?}");
        let to_payer = payer.expect("PUT", &format!("/transfers/{id}"));
        assert_eq!(to_payer.json()["transferState"], json!("COMMITTED"));
        payee.expect("PUT", &format!("/transfers/{id}"));
        sent.push(Sent {
            id,
            amount,
            told: Told::Committed,
        });
    }
    // The synchronous standby confirmed those commits: it replays them.
    assert_eq!(
        primary.query("postgres", &sync_state_sql(STANDBY)),
        "sync",
        "the standby must still be synchronous"
    );

    // Then a stream of transfers, still going when the primary is lost.
    let driven = Arc::new(Mutex::new(Vec::<Sent>::new()));
    let committed = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let (driven, committed, stop) = (driven.clone(), committed.clone(), stop.clone());
        let api = first.api;
        std::thread::spawn(move || drive(api, &driven, &committed, &stop))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while committed.load(Ordering::Acquire) < COMMITTED_BEFORE_KILL {
        assert!(
            Instant::now() < deadline,
            "the driver committed too little before the kill: {}",
            committed.load(Ordering::Acquire)
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    let kill_at = Instant::now();
    primary.kill();
    let killed_in = kill_at.elapsed();
    standby.promote();
    let promoted_in = kill_at.elapsed();
    assert_eq!(standby.query("postgres", "SELECT pg_is_in_recovery()"), "f");

    // The first kasi never stops: it either finds the promoted standby by
    // itself (its lease keeper and its store reconnect through the
    // multi-host URL) and commits again, or gives up serving for want of
    // its lease, becomes a standby on the same URL, takes the lease back
    // from the promoted standby and serves again. Either way a new
    // transfer completes through it, with no restart.
    let committed_at_promotion = committed.load(Ordering::Acquire);
    let deadline = Instant::now() + Duration::from_secs(30);
    while committed.load(Ordering::Acquire) < committed_at_promotion + 5 {
        assert!(
            first.wait_for_exit(Duration::ZERO).is_none(),
            "the kasi stopped when its primary was lost:\n{}",
            first.log()
        );
        assert!(
            Instant::now() < deadline,
            "the kasi does not commit again after the promotion:\n{}",
            first.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let settled_in = kill_at.elapsed();
    let first_after_promotion = if first.log().contains("standby again") {
        "gave up serving, took the lease back as a standby and served again"
    } else {
        "reconnected to the promoted standby and committed again"
    };
    let second = &first;
    let first_log = first.log();
    stop.store(true, Ordering::Release);
    driver.join().unwrap();
    sent.append(&mut driven.lock().unwrap());
    let acknowledged: Vec<&Sent> = sent.iter().filter(|s| s.told == Told::Committed).collect();
    assert!(acknowledged.len() >= 5 + COMMITTED_BEFORE_KILL);

    // Every acknowledged commit is COMMITTED, as the new kasi answers it.
    for sent in &acknowledged {
        let asked = second.get_transfer(&sent.id, PAYER, PAYEE);
        assert_eq!(asked.status, 202, "GET /transfers/{}: {asked:?}", sent.id);
    }
    let mut answered: HashMap<String, String> = HashMap::new();
    while answered.len() < acknowledged.len() {
        let received = payer.next("the answers to GET /transfers/{id}");
        // Deliveries of the first kasi's callbacks come from the payee;
        // the answers to a GET come from the hub.
        if received.method != "PUT" || received.header("fspiop-source") != Some(HUB_NAME) {
            continue;
        }
        let Some(id) = received.path.strip_prefix("/transfers/") else {
            continue;
        };
        let state = received.json()["transferState"]
            .as_str()
            .unwrap_or("(none)")
            .to_string();
        answered.insert(id.to_string(), state);
    }
    for sent in &acknowledged {
        assert_eq!(
            answered.get(&sent.id).map(String::as_str),
            Some("COMMITTED"),
            "transfer {} was acknowledged as committed",
            sent.id
        );
    }

    // The store on the promoted standby agrees, for everything sent, and
    // the positions are the stored transfers' sums.
    let snapshot = store::pg::PgStore::open_read_only(&url)
        .unwrap()
        .load()
        .unwrap();
    let finished: HashMap<u64, TransferState> =
        snapshot.finishes.iter().map(|f| (f.seq, f.state)).collect();
    let stored: HashMap<TransferId, TransferState> = snapshot
        .transfers
        .iter()
        .map(|row| {
            let state = finished.get(&row.seq).copied().unwrap_or(row.state);
            (row.transfer_id, state)
        })
        .collect();
    let (mut reserved_or_committed, mut committed_sum) = (0, 0);
    for sent in &sent {
        let id = TransferId::parse(&sent.id).unwrap();
        let state = stored.get(&id).copied();
        let fine = match sent.told {
            Told::Committed => state == Some(TransferState::Committed),
            Told::Reserved => matches!(
                state,
                Some(TransferState::Reserved | TransferState::Committed)
            ),
            Told::Nothing => matches!(
                state,
                None | Some(TransferState::Reserved | TransferState::Committed)
            ),
        };
        assert!(
            fine,
            "transfer {} was told {:?} but is stored as {state:?}",
            sent.id, sent.told
        );
        match state {
            Some(TransferState::Committed) => {
                committed_sum += sent.amount;
                reserved_or_committed += sent.amount;
            }
            Some(TransferState::Reserved) => reserved_or_committed += sent.amount,
            _ => {}
        }
    }
    // Mojaloop's position counts reservations too.
    assert_eq!(second.position(PAYER), reserved_or_committed as f64);
    assert_eq!(second.position(PAYEE), -(committed_sum as f64));

    // A new transfer completes on the promoted standby.
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "7", far_future());
    let prepared = second.prepare(PAYER, PAYEE, &body);
    assert_eq!(prepared.status, 202, "{prepared:?}");
    next_matching(&payee, "the new prepare", |r| {
        r.method == "POST" && r.path == "/transfers" && r.text() == body
    });
    let fulfilled = second.fulfil(&id, PAYEE, PAYER, &fulfil_body(FULFILMENT, "COMMITTED"));
    assert_eq!(fulfilled.status, 200, "{fulfilled:?}");
    let to_payer = next_matching(&payer, "the new transfer's commit", |r| {
        r.method == "PUT" && r.path == format!("/transfers/{id}")
    });
    assert_eq!(to_payer.json()["transferState"], json!("COMMITTED"));
    assert_eq!(second.position(PAYER), (reserved_or_committed + 7) as f64);
    assert_eq!(second.position(PAYEE), -((committed_sum + 7) as f64));

    // And the store audits clean.
    let audit = kasi().args(["audit", "--store", &url]).output().unwrap();
    assert!(
        audit.status.success(),
        "kasi audit --store: {}{}",
        String::from_utf8_lossy(&audit.stdout),
        String::from_utf8_lossy(&audit.stderr)
    );

    let told = |what: Told| sent.iter().filter(|s| s.told == what).count();
    eprintln!(
        "replication: clusters ready in {clusters_ready:?}; {} transfers sent ({} committed, \
         {} reserved, {} refused or unanswered around the loss of the primary); primary \
         stopped in {killed_in:?}, standby promoted {promoted_in:?}; the first kasi \
         {first_after_promotion} {settled_in:?} after the kill; whole test {:?}",
        sent.len(),
        told(Told::Committed),
        told(Told::Reserved),
        told(Told::Nothing),
        began.elapsed()
    );
    let losing: Vec<&str> = first_log
        .lines()
        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
        .collect();
    eprintln!("the first kasi, losing its primary:\n{}", losing.join("\n"));
}

fn start_kasi(dir: &tempfile::TempDir, url: &str) -> Hub {
    let data_dir = dir.path().join("unused");
    let command = Hub::serve_command(
        &data_dir,
        &[
            "--store",
            url,
            "--lease-ms",
            LEASE_MS,
            "--instance-name",
            INSTANCE,
        ],
    );
    Hub::spawn(command, &data_dir)
}

fn sync_state_sql(name: &str) -> String {
    format!("SELECT sync_state FROM pg_stat_replication WHERE application_name = '{name}'")
}

/// Polls the primary's `pg_stat_replication` until the standby `name`
/// streams as its synchronous standby.
fn wait_until_synchronous(primary: &testpg::Cluster, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let state = primary.query("postgres", &sync_state_sql(name));
        let streaming = primary.query(
            "postgres",
            &format!("SELECT state FROM pg_stat_replication WHERE application_name = '{name}'"),
        );
        if state == "sync" && streaming == "streaming" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the standby {name} is not a streaming synchronous standby: state {streaming:?}, \
             sync_state {state:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Prepares and fulfils transfers of 2 through the hub at `api` until told
/// to stop or the hub goes away, recording what each was told.
fn drive(
    api: std::net::SocketAddr,
    driven: &Mutex<Vec<Sent>>,
    committed: &AtomicUsize,
    stop: &AtomicBool,
) {
    let amount = 2;
    while !stop.load(Ordering::Acquire) {
        let id = new_id();
        let body = prepare_body(&id, PAYER, PAYEE, &amount.to_string(), far_future());
        let prepared = request(api, "POST", "/transfers", PAYER, PAYEE, &body);
        let mut told = Told::Nothing;
        let mut gone = prepared.is_none();
        if prepared == Some(202) {
            told = Told::Reserved;
            let path = format!("/transfers/{id}");
            let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
            let fulfilled = request(api, "PUT", &path, PAYEE, PAYER, &fulfil);
            gone = fulfilled.is_none();
            if fulfilled == Some(200) {
                told = Told::Committed;
            }
        }
        driven.lock().unwrap().push(Sent { id, amount, told });
        if told == Told::Committed {
            committed.fetch_add(1, Ordering::AcqRel);
        }
        if gone {
            // The hub closed the connection unanswered: it gave up serving
            // (and serves again once it holds the lease).
            std::thread::sleep(Duration::from_millis(50));
        } else if told != Told::Committed {
            // Refused (the store is away): no busy loop meanwhile.
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// One FSPIOP request to a hub that may be going away: its status, or
/// `None` when it does not listen or closes the connection unanswered.
fn request(
    api: std::net::SocketAddr,
    method: &str,
    path: &str,
    source: &str,
    destination: &str,
    body: &str,
) -> Option<u16> {
    use std::io::Write as _;
    let mut stream = std::net::TcpStream::connect(api).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n");
    for (name, value) in fspiop_headers(source, destination, method == "POST") {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(head.as_bytes()).ok()?;
    read_response(&mut stream)
        .ok()
        .map(|response| response.status)
}

/// The next request to `stub` that `wanted` accepts, skipping others
/// (callbacks of earlier transfers delivered meanwhile).
fn next_matching(stub: &Stub, what: &str, wanted: impl Fn(&Received) -> bool) -> Received {
    let deadline = Instant::now() + CALLBACK_WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let received = stub.next_within(left).unwrap_or_else(|| {
            panic!(
                "{}: no request within {CALLBACK_WAIT:?} ({what})",
                stub.name
            )
        });
        if wanted(&received) {
            return received;
        }
    }
}
