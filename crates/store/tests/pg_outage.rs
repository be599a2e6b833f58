//! A standby's copy of a PostgreSQL store across a database restart: a
//! refresh that fails keeps the copy, the next one reconnects and brings
//! it up to date, and the load a takeover makes from it is the cold load.

mod support;

use store::pg::PgStore;
use store::Store;
use support::{some_transfers, Harness};

#[test]
fn a_standby_copy_survives_a_database_restart() {
    let mut cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().unwrap();
    let mut harness = Harness::with_pg(dir.path(), Some(PgStore::open(&url).unwrap()));
    some_transfers(&mut harness, 20);
    let mut standby = PgStore::open(&url).unwrap();
    standby.warm(None).expect("the first read");
    let held = standby.warm_transfers().expect("a copy");
    assert!(held >= 20, "{held}");

    cluster.kill();
    let failed = standby.warm(None);
    assert!(failed.is_err(), "a refresh without a database: {failed:?}");
    assert!(
        failed.unwrap_err().transient,
        "a lost database may come back"
    );
    assert_eq!(standby.warm_transfers(), Some(held), "the copy was dropped");

    cluster.restart();
    // The writer's connection died with the server: a new one, as a new
    // active would have.
    harness.pg = Some(PgStore::open(&url).unwrap());
    some_transfers(&mut harness, 10);
    standby.warm(None).expect("reconnects and refreshes");
    assert!(standby.warm_transfers().unwrap() >= held + 10);

    let warm = standby.load().expect("a takeover's load");
    assert!(
        standby.forget_history_snapshot().unwrap(),
        "the load did not come from the warm copy"
    );
    let cold = PgStore::open(&url).unwrap().load().unwrap();
    assert_eq!(warm, cold, "the warm copy differs from a cold load");
    assert_eq!(warm, harness.store.load().unwrap(), "and from SQLite's");
}

/// A process paused (or cut off with its connection open) in the middle of
/// a commit holds the lease row's lock: once its lease has run out, a
/// standby ends that transaction instead of waiting for the pause to
/// end, and the paused commit can never complete.
#[test]
fn a_lease_that_ran_out_is_taken_from_a_transaction_still_holding_it() {
    use store::pg_lease::Lease;
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    drop(PgStore::open(&url).unwrap());
    let mut paused = Lease::new(&url, "paused", 300);
    assert_eq!(paused.try_take().unwrap(), Some(1));
    // Its commit passed the fencing check, then the process froze.
    let mut frozen = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut in_flight = frozen.transaction().unwrap();
    let counted = in_flight
        .execute(
            "UPDATE kasi_lease SET commits = commits + 1 WHERE fencing = 1",
            &[],
        )
        .unwrap();
    assert_eq!(counted, 1);
    std::thread::sleep(std::time::Duration::from_millis(400));

    let mut standby = Lease::new(&url, "standby", 300);
    let started = std::time::Instant::now();
    assert_eq!(standby.try_take().unwrap(), Some(2));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let ended = standby
        .ended_sessions()
        .expect("the holder's session ended");
    assert_eq!(
        (ended.holder.as_str(), ended.fencing, ended.sessions),
        ("paused", 1, 1)
    );
    assert!(in_flight.commit().is_err(), "the paused commit completed");
    // A live holder is never ended: its lease has not run out.
    let mut other = Lease::new(&url, "other", 300);
    let mut live = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut holding = live.transaction().unwrap();
    holding
        .execute(
            "UPDATE kasi_lease SET commits = commits + 1 WHERE fencing = 2",
            &[],
        )
        .unwrap();
    assert_eq!(other.try_take().unwrap(), None);
    assert_eq!(other.ended_sessions(), None);
    holding.commit().unwrap();
}
