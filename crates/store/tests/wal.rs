//! The WAL stays bounded under continuous writes: the background checkpoint
//! copies the bulk, the writer restarts the WAL between commits.

use ledger::{ParticipantId, PartyKey, PartyRow, Record};
use store::sqlite::{SqliteOptions, SqliteStore};
use store::Store;

fn parties(from: u64, count: u64) -> Vec<Record> {
    (from..from + count)
        .map(|n| {
            Record::Party(PartyRow {
                key: PartyKey {
                    id_type: "MSISDN".into(),
                    identifier: format!("{n:015}"),
                    sub_id: None,
                },
                fsp: ParticipantId(1),
                currency: None,
                registered_at_ms: 1,
            })
        })
        .collect()
}

/// fsync off: these tests are about the WAL's size, not durability, and
/// stay fast on a slow disk.
fn open_unsynced(dir: &std::path::Path) -> SqliteStore {
    SqliteStore::open(
        dir,
        SqliteOptions {
            fsync: false,
            ..Default::default()
        },
    )
    .unwrap()
}

fn wal_bytes(dir: &std::path::Path) -> u64 {
    std::fs::metadata(dir.join("kasi.db-wal")).map_or(0, |m| m.len())
}

#[test]
fn the_wal_is_started_over_instead_of_growing_without_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_unsynced(dir.path());
    let mut next = 0u64;
    for commit in 0..400 {
        let batch: Vec<Record> = (0..256)
            .map(|_| {
                next += 1;
                Record::Party(PartyRow {
                    key: PartyKey {
                        id_type: "MSISDN".into(),
                        identifier: format!("{next:015}"),
                        sub_id: None,
                    },
                    fsp: ParticipantId(1),
                    currency: None,
                    registered_at_ms: 1,
                })
            })
            .collect();
        store.commit(&[&batch]).unwrap();
        // The background checkpoint runs on its own thread; give it a
        // chance now and then, as the pace of real load does. (How large
        // the WAL gets depends on that timing; that it is started over is
        // what must hold: without it, SQLite never restarts it under load.)
        if commit % 40 == 39 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    assert!(
        store.wal_restarts() >= 2,
        "the WAL was restarted {} times over 102,400 records",
        store.wal_restarts()
    );
    drop(store);
    // A clean close leaves no WAL behind, and everything written is there.
    assert_eq!(wal_bytes(dir.path()), 0);
    let mut store = open_unsynced(dir.path());
    let snapshot = store.load().unwrap();
    assert_eq!(snapshot.parties.len(), 400 * 256);
}

/// A reader on an old snapshot (`kasi audit`, a `sqlite3` shell) blocks the
/// WAL's restart; the writer must not wait for it, and must restart the WAL
/// once the reader is gone.
#[test]
fn a_long_reader_neither_delays_commits_nor_stops_restarts_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_unsynced(dir.path());
    store.commit(&[&parties(0, 10)]).unwrap();
    let reader = rusqlite::Connection::open(dir.path().join("kasi.db")).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let seen: i64 = reader
        .query_row("SELECT count(*) FROM parties", [], |row| row.get(0))
        .unwrap();
    assert_eq!(seen, 10);
    let mut slowest = std::time::Duration::ZERO;
    let mut next = 10;
    for commit in 0..200 {
        let started = std::time::Instant::now();
        store.commit(&[&parties(next, 256)]).unwrap();
        slowest = slowest.max(started.elapsed());
        next += 256;
        if commit % 40 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    assert_eq!(
        store.wal_restarts(),
        0,
        "the reader's snapshot is still in the WAL"
    );
    assert!(
        slowest < std::time::Duration::from_secs(1),
        "a commit waited {slowest:?} for the reader"
    );
    reader.execute_batch("COMMIT").unwrap();
    drop(reader);
    for commit in 0..200 {
        store.commit(&[&parties(next, 256)]).unwrap();
        next += 256;
        if commit % 40 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    assert!(
        store.wal_restarts() > 0,
        "the WAL was never restarted after the reader left"
    );
}

/// A follower's write (the rollup's fold, the party index's filing) holds
/// the write lock between the writer's commits: the writer's commit waits
/// for it and goes through. (How soon after the lock is free it goes is
/// the busy handler's schedule, `writer_busy`, measured in BENCHMARKS.md,
/// not timed here.)
#[test]
fn a_commit_waits_for_a_followers_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_unsynced(dir.path());
    store.commit(&[&parties(0, 10)]).unwrap();
    let path = dir.path().join("kasi.db");
    let (locked, is_locked) = std::sync::mpsc::channel();
    let follower = std::thread::spawn(move || {
        let mut connection = rusqlite::Connection::open(path).unwrap();
        let transaction = connection
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        locked.send(()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        transaction.commit().unwrap();
    });
    is_locked.recv().unwrap();
    store
        .commit(&[&parties(100, 10)])
        .expect("the commit waits for the lock");
    follower.join().unwrap();
    assert_eq!(store.load().unwrap().parties.len(), 20);
}
