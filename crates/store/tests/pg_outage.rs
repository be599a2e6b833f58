//! A standby's copy of a PostgreSQL store across a database restart: a
//! refresh that fails keeps the copy, the next one reconnects and brings
//! it up to date, and the load a takeover makes from it is the cold load.

mod support;

use store::pg::PgStore;
use store::Store;
use support::{Harness, Op};

fn some_transfers(harness: &mut Harness, count: usize) {
    for n in 0..count {
        harness.run(Op::Prepare {
            payer: (n % 3) as u8,
            amount: 1 + n as i64 % 7,
            ttl_ms: 60_000,
        });
        if n % 2 == 0 {
            harness.run(Op::Fulfil(n));
        }
    }
}

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
