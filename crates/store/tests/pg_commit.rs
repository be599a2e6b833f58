//! The PostgreSQL store's one-statement commit of the transfer path
//! (transfers, finishes, accounts): the same rows as an explicit
//! transaction, under the lease's fencing number, and exactly once across
//! a connection lost before the answer.

mod support;

use ledger::{Amount, Command, Fulfilment, Prepare, RequestHash, TransferId};
use store::pg::PgStore;
use store::Store;
use support::{some_transfers, Harness};

fn scalar(cluster: &testpg::Cluster, sql: &str) -> i64 {
    cluster.query("hub", sql).trim().parse().unwrap()
}

/// A writer holding the lease with fencing number 7, beside SQLite.
fn fenced(cluster: &testpg::Cluster, dir: &std::path::Path) -> Harness {
    let url = cluster.create_database("hub");
    let mut pg = PgStore::open(&url).unwrap();
    cluster.query("hub", "UPDATE kasi_lease SET fencing = 7 WHERE id = 1");
    pg.fence(7);
    Harness::with_pg(dir, Some(pg))
}

#[test]
fn a_transfer_commit_counts_once_under_the_lease_and_writes_what_sqlite_does() {
    let cluster = testpg::Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    let mut harness = fenced(&cluster, dir.path());
    some_transfers(&mut harness, 10);
    // Each transfer-path commit moves the lease's count by exactly one.
    let before = scalar(&cluster, "SELECT commits FROM kasi_lease");
    some_transfers(&mut harness, 4);
    let after = scalar(&cluster, "SELECT commits FROM kasi_lease");
    assert_eq!(after - before, 4 + 2, "4 prepares and 2 fulfils");
    let pg = harness.pg.as_mut().unwrap();
    assert!(
        pg.one_statement_commits() >= 6 + 7,
        "the transfer path took {} one-statement commits",
        pg.one_statement_commits()
    );
    let pg = pg.load().unwrap();
    assert_eq!(
        pg,
        harness.store.load().unwrap(),
        "PostgreSQL differs from SQLite"
    );
}

#[test]
fn a_connection_lost_before_the_answer_is_resolved_and_the_commit_made_once() {
    let cluster = testpg::Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    let mut harness = fenced(&cluster, dir.path());
    harness.pg_retried = Some(0);
    some_transfers(&mut harness, 6);
    let mut terminated = 0;
    for round in 0..3 {
        // The writer's connection dies between two commits: the next
        // commit finds out on sending, fails transiently, and its retry
        // reconnects, learns from the lease's count that it did not
        // happen, and makes it.
        terminated += scalar(
            &cluster,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = 'hub' AND pid <> pg_backend_pid()",
        );
        some_transfers(&mut harness, 3 + round);
    }
    assert!(terminated >= 3, "no writer connection to end");
    assert!(
        harness.pg_retried.unwrap() >= 3,
        "no commit met the lost connection: {:?}",
        harness.pg_retried
    );
    let pg = harness.pg.as_mut().unwrap();
    assert!(pg.one_statement_commits() > 0);
    let pg = pg.load().unwrap();
    assert_eq!(
        pg,
        harness.store.load().unwrap(),
        "a commit lost or made twice"
    );
}

#[test]
fn a_deposed_writer_writes_nothing() {
    let cluster = testpg::Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    let mut harness = fenced(&cluster, dir.path());
    some_transfers(&mut harness, 6);
    let transfers = scalar(&cluster, "SELECT count(*) FROM transfers");
    let commits = scalar(&cluster, "SELECT commits FROM kasi_lease");
    // Another process took over.
    cluster.query("hub", "UPDATE kasi_lease SET fencing = 8 WHERE id = 1");
    let (payer, payee) = (harness.dfsps[0].0, harness.dfsps[1].0);
    let prepare = Command::Prepare(Prepare {
        transfer_id: TransferId::new(9_999),
        payer,
        payee,
        amount: Amount::from_whole(1),
        currency: support::usd(),
        condition: Fulfilment::from_preimage([9; 32]).condition(),
        expiration_ms: harness.now + 60_000,
        request_hash: RequestHash([1; 32]),
        wire_version: 0x11,
        parties: None,
    });
    let result = harness.ledger.apply_batch(harness.now, &[prepare]);
    assert!(!result.records.is_empty());
    let error = harness
        .pg
        .as_mut()
        .unwrap()
        .commit(&[&result.records])
        .expect_err("a deposed writer committed");
    assert!(!error.transient, "{error:?}");
    assert!(error.message.contains("deposed"), "{error:?}");
    assert_eq!(
        scalar(&cluster, "SELECT count(*) FROM transfers"),
        transfers
    );
    assert_eq!(scalar(&cluster, "SELECT commits FROM kasi_lease"), commits);
}
