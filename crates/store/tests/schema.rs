//! The store's schema across versions: ULID ids and wire versions round
//! trip, a version 1 store (before `transfers.wire_version`) is read by
//! `kasi audit` as it is and migrated when a hub opens it, and a store from
//! a newer kasi is refused.

use ledger::{
    AbortCause, AccountId, Amount, Condition, ErrorCode, FinishKind, FinishRow, Record,
    RequestHash, TransferId, TransferKind, TransferRow, TransferState,
};
use store::sqlite::{SqliteOptions, SqliteStore};
use store::Store;

mod support;

fn transfer(seq: u64, id: &str, wire_version: u8) -> Record {
    Record::Transfer(TransferRow {
        seq,
        transfer_id: TransferId::parse(id).unwrap(),
        kind: TransferKind::Fspiop,
        debit: AccountId(1),
        credit: AccountId(2),
        amount: Amount::from_whole(10),
        condition: Condition([7; 32]),
        expiration_ms: 1_000,
        prepared_at_ms: 500,
        request_hash: RequestHash([seq as u8; 32]),
        state: TransferState::Reserved,
        reason: None,
        memo: None,
        wire_version,
        fx: None,
    })
}

/// The schema version this kasi writes.
const CURRENT_VERSION: i64 = 16;

const ULID: &str = "01K1WV2595Z7XST8FW5K4XRDZB";
const UUID: &str = "b51ec534-ee48-4575-b6a9-ead2955b8069";

fn open(dir: &std::path::Path) -> Result<SqliteStore, store::StoreError> {
    SqliteStore::open(
        dir,
        SqliteOptions {
            fsync: false,
            ..Default::default()
        },
    )
}

#[test]
fn ids_keep_their_form_and_transfers_their_wire_version() {
    let dir = tempfile::tempdir().unwrap();
    let records = vec![transfer(1, ULID, 0x20), transfer(2, UUID, 0x11)];
    {
        let mut store = open(dir.path()).unwrap();
        store.commit(&[&records]).unwrap();
    }
    let snapshot = open(dir.path()).unwrap().load().unwrap();
    let loaded: Vec<Record> = snapshot
        .transfers
        .into_iter()
        .map(Record::Transfer)
        .collect();
    assert_eq!(loaded, records);
    assert_eq!(loaded_id(&loaded[0]), ULID);
    assert_eq!(loaded_id(&loaded[1]), UUID);
}

fn loaded_id(record: &Record) -> String {
    match record {
        Record::Transfer(row) => row.transfer_id.to_string(),
        other => panic!("not a transfer: {other:?}"),
    }
}

/// What version 6 added (FX), undone: a store as kasi wrote it before,
/// its funds movements' index with the old predicate.
const UNDO_VERSION_6: &str =
    "DROP TABLE transfer_fx; DROP TABLE conversion_fulfils; DROP TABLE fxps;
    DROP INDEX transfers_funds;
    CREATE INDEX transfers_funds ON transfers (seq) WHERE kind <> 'TRANSFER';";

/// Makes the store in `dir` what kasi wrote before version 6, then runs
/// `downgrade` (down to an older version still).
fn downgrade(dir: &std::path::Path, downgrade: &str) {
    let connection = rusqlite::Connection::open(dir.join("kasi.db")).unwrap();
    connection
        .execute_batch(&format!("{UNDO_VERSION_6} {downgrade}"))
        .unwrap();
}

fn user_version(dir: &std::path::Path) -> i64 {
    let connection = rusqlite::Connection::open(dir.join("kasi.db")).unwrap();
    connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap()
}

#[test]
fn a_version_1_store_is_read_as_it_is_and_migrated_when_served() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = open(dir.path()).unwrap();
        store.commit(&[&[transfer(1, UUID, 0x11)]]).unwrap();
    }
    // Make it what kasi wrote before version 2.
    downgrade(
        dir.path(),
        "ALTER TABLE transfers DROP COLUMN wire_version;
                 ALTER TABLE transfer_finishes DROP COLUMN settlement_window;
                 ALTER TABLE transfer_finishes DROP COLUMN cause;
                 ALTER TABLE accounts DROP COLUMN changed_at_ms;
                 ALTER TABLE settlement_models DROP COLUMN granularity;
                 ALTER TABLE settlement_models DROP COLUMN interchange;
                 ALTER TABLE settlement_models DROP COLUMN delay;
                 ALTER TABLE settlement_models DROP COLUMN currency;
                 ALTER TABLE settlement_models DROP COLUMN ledger_account_type;
                 ALTER TABLE settlement_models DROP COLUMN settlement_account_type;
                 ALTER TABLE settlement_models DROP COLUMN auto_position_reset;
                 ALTER TABLE settlement_models DROP COLUMN require_liquidity_check;
                 DROP TABLE settlement_windows; DROP TABLE settlement_content;
                 DROP TABLE settlement_content_accounts; DROP TABLE settlement_content_pairs;
                 DROP TABLE settlements; DROP TABLE settlement_accounts;
                 DROP TABLE settlement_entries;
                 INSERT INTO settlement_models (id, name, definition) VALUES
                    (1, 'DEFERREDNET', '{\"settlementGranularity\":\"NET\",\"settlementInterchange\":\"MULTILATERAL\",\"settlementDelay\":\"DEFERRED\",\"ledgerAccountType\":\"POSITION\",\"autoPositionReset\":true,\"requireLiquidityCheck\":false,\"currency\":\"USD\"}'),
                    (2, 'BROKEN', 'not json');
                 PRAGMA user_version = 1;",
    );
    assert_eq!(user_version(dir.path()), 1);

    let old = SqliteStore::open_read_only(dir.path())
        .unwrap()
        .load()
        .unwrap();
    assert_eq!(old.transfers.len(), 1);
    assert_eq!(old.transfers[0].wire_version, 0, "unknown before version 2");
    assert_eq!(user_version(dir.path()), 1, "audit changes nothing");

    let mut store = open(dir.path()).unwrap();
    assert_eq!(user_version(dir.path()), CURRENT_VERSION);
    store.commit(&[&[transfer(2, ULID, 0x20)]]).unwrap();
    let snapshot = store.load().unwrap();
    let versions: Vec<u8> = snapshot.transfers.iter().map(|t| t.wire_version).collect();
    assert_eq!(versions, [0, 0x20]);
    // The models' rules were read from their JSON; an unreadable one has none.
    let rules = snapshot.settlement_models[0].rules.clone().expect("rules");
    assert_eq!(rules.granularity, ledger::Granularity::Net);
    assert_eq!(rules.currency, ledger::Currency::parse("USD"));
    assert!(rules.auto_position_reset);
    assert!(!rules.require_liquidity_check);
    assert_eq!(snapshot.settlement_models[1].rules, None);
    assert!(
        snapshot.windows.is_empty(),
        "window 1 is the ledger's to open"
    );
}

#[test]
fn a_store_from_a_newer_kasi_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()).unwrap());
    {
        let connection = rusqlite::Connection::open(dir.path().join("kasi.db")).unwrap();
        connection
            .pragma_update(None, "user_version", CURRENT_VERSION + 1)
            .unwrap();
    }
    for error in [
        open(dir.path()).err().expect("refused"),
        SqliteStore::open_read_only(dir.path())
            .err()
            .expect("refused"),
    ] {
        let text = error.to_string();
        assert!(
            text.contains(&format!("schema version {}", CURRENT_VERSION + 1)),
            "{text}"
        );
        assert!(text.contains("newer kasi"), "{text}");
    }
}

fn finish(seq: u64, kind: FinishKind, state: TransferState, reason: Option<u16>) -> FinishRow {
    FinishRow {
        seq,
        kind,
        state,
        reason: reason.map(ErrorCode),
        cause: None,
        finished_at_ms: 600,
        request_hash: RequestHash([0xF0 | seq as u8; 32]),
        fulfilment: None,
        settlement_window: None,
    }
}

#[test]
fn a_version_4_store_learns_which_aborts_were_invalid_fulfilments_when_served() {
    let dir = tempfile::tempdir().unwrap();
    let ids = [UUID, ULID, "0b9e3c53-7d2c-4d1e-9d6b-2f7f3a0c9d11"];
    let finishes = [
        // A fulfil that aborted with 3100: before version 5, only an
        // invalid fulfilment did.
        finish(1, FinishKind::Fulfil, TransferState::Aborted, Some(3100)),
        // The payee's own 3100, and an expiry: no cause.
        finish(2, FinishKind::Abort, TransferState::Aborted, Some(3100)),
        finish(3, FinishKind::Expiry, TransferState::Expired, Some(3303)),
    ];
    {
        let mut store = open(dir.path()).unwrap();
        let transfers: Vec<Record> = (1..=3)
            .map(|seq| transfer(seq, ids[seq as usize - 1], 0x11))
            .collect();
        let finished: Vec<Record> = finishes.iter().cloned().map(Record::Finish).collect();
        store.commit(&[&transfers, &finished]).unwrap();
    }
    downgrade(
        dir.path(),
        "ALTER TABLE transfer_finishes DROP COLUMN cause; PRAGMA user_version = 4;",
    );
    // Read as it is, the cause as the migration would fill it in (what
    // `kasi audit` and `kasi migrate-store` see).
    let old = SqliteStore::open_read_only(dir.path())
        .unwrap()
        .load()
        .unwrap();
    let back_filled = [
        FinishRow {
            cause: Some(AbortCause::InvalidFulfilment),
            ..finishes[0].clone()
        },
        finishes[1].clone(),
        finishes[2].clone(),
    ];
    assert_eq!(old.finishes, back_filled, "read as it is");
    assert_eq!(user_version(dir.path()), 4, "audit changes nothing");

    let snapshot = open(dir.path()).unwrap().load().unwrap();
    assert_eq!(user_version(dir.path()), CURRENT_VERSION);
    let causes: Vec<Option<AbortCause>> = snapshot.finishes.iter().map(|f| f.cause).collect();
    assert_eq!(causes, [Some(AbortCause::InvalidFulfilment), None, None]);
    // And a cause written now reads back.
    let mut store = open(dir.path()).unwrap();
    let misaddressed = FinishRow {
        cause: Some(AbortCause::DestinationNotPayer),
        ..finish(4, FinishKind::Fulfil, TransferState::Aborted, Some(3100))
    };
    store
        .commit(&[&[
            transfer(4, "5f0e5a4c-1d7e-4f6b-8a3e-6c2d9b1e0f44", 0x11),
            Record::Finish(misaddressed.clone()),
        ]])
        .unwrap();
    assert_eq!(store.load().unwrap().finishes.last(), Some(&misaddressed));
}

fn event(id: u64, action: &str) -> ledger::AuditEventRow {
    ledger::AuditEventRow {
        id,
        at_ms: 1_000 + id as i64,
        actor: "alice".into(),
        role: "operator".into(),
        action: action.into(),
        target: "payerfsp".into(),
        before: "null".into(),
        after: format!("{{\"n\":{id}}}"),
        outcome: "DONE".into(),
        source: "identity-provider".into(),
    }
}

#[test]
fn a_version_2_store_gains_audit_events_and_pins_when_served() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = open(dir.path()).unwrap();
        store.commit(&[&[transfer(1, UUID, 0x11)]]).unwrap();
    }
    // Make it what kasi wrote before version 3.
    downgrade(
        dir.path(),
        "DROP TABLE audit_events; DROP TABLE certificate_pins;
                 ALTER TABLE transfer_finishes DROP COLUMN cause;
                 ALTER TABLE accounts DROP COLUMN changed_at_ms; PRAGMA user_version = 2;",
    );
    // Read as it is (no events), without changing it.
    let old = SqliteStore::open_read_only(dir.path())
        .unwrap()
        .load()
        .unwrap();
    assert_eq!(old.transfers.len(), 1);
    assert!(old.audit_events.is_empty());
    assert_eq!(user_version(dir.path()), 2, "audit changes nothing");

    let mut store = open(dir.path()).unwrap();
    assert_eq!(user_version(dir.path()), CURRENT_VERSION);
    let pin = ledger::PinRow {
        fingerprint: [9; 32],
        participant: ledger::ParticipantId(2),
        pinned_at_ms: 5,
    };
    let other_pin = ledger::PinRow {
        fingerprint: [3; 32],
        ..pin.clone()
    };
    store
        .commit(&[
            &[
                Record::AuditEvent(event(1, "participant.create")),
                Record::CertificatePin(pin.clone()),
                Record::CertificatePin(other_pin.clone()),
            ],
            &[
                Record::AuditEvent(event(2, "funds.in")),
                Record::CertificateUnpinned([9; 32]),
            ],
        ])
        .unwrap();
    drop(store);
    let snapshot = open(dir.path()).unwrap().load().unwrap();
    assert_eq!(
        snapshot.audit_events,
        [event(1, "participant.create"), event(2, "funds.in")]
    );
    assert_eq!(snapshot.certificate_pins, [other_pin]);
    assert_eq!(snapshot.transfers.len(), 1);
}

#[test]
fn only_the_newest_audit_events_are_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let total = ledger::AUDIT_EVENTS_IN_MEMORY as u64 + 5;
    {
        let mut store = open(dir.path()).unwrap();
        let records: Vec<Record> = (1..=total)
            .map(|id| Record::AuditEvent(event(id, "limits.set")))
            .collect();
        store.commit(&[&records]).unwrap();
    }
    let snapshot = open(dir.path()).unwrap().load().unwrap();
    assert_eq!(snapshot.audit_events.len(), ledger::AUDIT_EVENTS_IN_MEMORY);
    assert_eq!(
        snapshot.audit_events[0].id, 6,
        "the oldest five stay on disk only"
    );
    assert_eq!(snapshot.audit_events.last().unwrap().id, total);
}

fn account(id: u32, created_at_ms: i64, changed_at_ms: i64) -> Record {
    Record::Account(ledger::AccountRow {
        id: AccountId(id),
        participant: ledger::ParticipantId(1),
        currency: ledger::Currency::parse("USD").unwrap(),
        kind: ledger::AccountKind::Position,
        active: true,
        value: Amount::ZERO,
        reserved: Amount::ZERO,
        net_debit_cap: None,
        created_at_ms,
        changed_at_ms,
    })
}

#[test]
fn a_version_3_store_gains_the_accounts_last_change_when_served() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = open(dir.path()).unwrap();
        store.commit(&[&[account(1, 10, 70)]]).unwrap();
        assert_eq!(store.load().unwrap().accounts[0].changed_at_ms, 70);
    }
    // Make it what kasi wrote before version 4.
    downgrade(
        dir.path(),
        "ALTER TABLE accounts DROP COLUMN changed_at_ms;
                 ALTER TABLE transfer_finishes DROP COLUMN cause; PRAGMA user_version = 3;",
    );
    // Read as it is: the creation stands in for the last change.
    let old = SqliteStore::open_read_only(dir.path())
        .unwrap()
        .load()
        .unwrap();
    assert_eq!(old.accounts[0].changed_at_ms, 10);
    assert_eq!(user_version(dir.path()), 3, "audit changes nothing");

    let mut store = open(dir.path()).unwrap();
    assert_eq!(user_version(dir.path()), CURRENT_VERSION);
    assert_eq!(store.load().unwrap().accounts[0].changed_at_ms, 10);
    store.commit(&[&[account(1, 10, 90)]]).unwrap();
    assert_eq!(store.load().unwrap().accounts[0].changed_at_ms, 90);
}

/// A store of `version` (made so by `older`) with a history snapshot:
/// `kasi audit` reads it as it is, checks the snapshot and reads the
/// causes as the migration to version 5 would fill them in.
fn an_old_store_with_a_history_snapshot_is_audited_as_it_is(version: i64, older: &str) {
    let dir = tempfile::tempdir().unwrap();
    let ids = [
        UUID,
        ULID,
        "0b9e3c53-7d2c-4d1e-9d6b-2f7f3a0c9d11",
        "5f0e5a4c-1d7e-4f6b-8a3e-6c2d9b1e0f44",
        "7a1c2b3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
    ];
    // Finished at 600 (after the snapshot's cut): read through the
    // finishes' index; seq 4 finished long before (summed); seq 5 is
    // unfinished (kept).
    let finishes = [
        finish(1, FinishKind::Fulfil, TransferState::Aborted, Some(3100)),
        finish(2, FinishKind::Abort, TransferState::Aborted, Some(3100)),
        finish(3, FinishKind::Expiry, TransferState::Expired, Some(3303)),
        FinishRow {
            finished_at_ms: 100,
            ..finish(4, FinishKind::Fulfil, TransferState::Aborted, Some(3100))
        },
    ];
    {
        let mut store = open(dir.path()).unwrap();
        let transfers: Vec<Record> = (1..=5)
            .map(|seq| transfer(seq, ids[seq as usize - 1], 0x11))
            .collect();
        let finished: Vec<Record> = finishes.iter().cloned().map(Record::Finish).collect();
        store.commit(&[&transfers, &finished]).unwrap();
        let snapshot = store.advance_history_snapshot(500).unwrap();
        assert_eq!((snapshot.through_seq, snapshot.transfers), (5, 1));
        assert_eq!(snapshot.kept, [5]);
    }
    downgrade(dir.path(), older);
    assert_eq!(user_version(dir.path()), version);

    let mut old = SqliteStore::open_read_only(dir.path()).unwrap();
    assert_eq!(
        old.check_history_snapshot().unwrap(),
        Some((5, Ok(()))),
        "version {version}"
    );
    let causes = |finishes: &[FinishRow]| -> Vec<(u64, Option<AbortCause>)> {
        finishes.iter().map(|f| (f.seq, f.cause)).collect()
    };
    let invalid = Some(AbortCause::InvalidFulfilment);
    // From the snapshot: the summed transfer's finish is not loaded.
    let recent = old.load_recent(500).unwrap();
    assert_eq!(old.history_snapshot_through(), Some(5));
    assert_eq!(
        causes(&recent.finishes),
        [(1, invalid), (2, None), (3, None)]
    );
    let whole = old.load().unwrap();
    assert_eq!(
        causes(&whole.finishes),
        [(1, invalid), (2, None), (3, None), (4, invalid)]
    );
    drop(old);
    assert_eq!(user_version(dir.path()), version, "audit changes nothing");

    // Migrated, the store says the same.
    let mut store = open(dir.path()).unwrap();
    assert_eq!(user_version(dir.path()), CURRENT_VERSION);
    assert_eq!(
        causes(&store.load().unwrap().finishes),
        causes(&whole.finishes)
    );
    assert_eq!(store.check_history_snapshot().unwrap(), Some((5, Ok(()))));
}

#[test]
fn a_version_4_store_with_a_history_snapshot_is_audited_as_it_is() {
    an_old_store_with_a_history_snapshot_is_audited_as_it_is(
        4,
        "ALTER TABLE transfer_finishes DROP COLUMN cause; PRAGMA user_version = 4;",
    );
}

#[test]
fn a_version_3_store_with_a_history_snapshot_is_audited_as_it_is() {
    an_old_store_with_a_history_snapshot_is_audited_as_it_is(
        3,
        "ALTER TABLE accounts DROP COLUMN changed_at_ms;
         ALTER TABLE transfer_finishes DROP COLUMN cause; PRAGMA user_version = 3;",
    );
}

/// A row of `kind` with an FX link, prepared at 500.
fn fx_transfer(seq: u64, kind: TransferKind, fx: ledger::FxLink) -> TransferRow {
    let Record::Transfer(row) = transfer(seq, UUID, 0x20) else {
        unreachable!("a transfer");
    };
    TransferRow {
        transfer_id: TransferId::new(0xF0_0000 + u128::from(seq)),
        kind,
        fx: Some(fx),
        ..row
    }
}

/// A version 5 store (before FX) with a history snapshot is read as it is
/// (no FX rows; its funds movements' index with the old predicate, which
/// counted every kind but TRANSFER); a hub migrates it: the FX tables
/// appear and the index is built again without conversions, so that a
/// conversion written then is summed, kept and loaded as a transfer is,
/// never read as a funds movement.
#[test]
fn a_version_5_store_gains_fx_when_served() {
    let dir = tempfile::tempdir().unwrap();
    let ids = [UUID, ULID, "0b9e3c53-7d2c-4d1e-9d6b-2f7f3a0c9d11"];
    {
        let mut store = open(dir.path()).unwrap();
        let transfers: Vec<Record> = (1..=3)
            .map(|seq| transfer(seq, ids[seq as usize - 1], 0x11))
            .collect();
        let finished = [
            Record::Finish(finish(
                1,
                FinishKind::Fulfil,
                TransferState::Committed,
                None,
            )),
            Record::Finish(FinishRow {
                finished_at_ms: 100,
                ..finish(2, FinishKind::Abort, TransferState::Aborted, Some(5101))
            }),
        ];
        store.commit(&[&transfers, &finished]).unwrap();
        let snapshot = store.advance_history_snapshot(500).unwrap();
        assert_eq!(
            (snapshot.transfers, snapshot.kept.as_slice()),
            (1, &[3][..])
        );
    }
    downgrade(dir.path(), "PRAGMA user_version = 5;");

    let mut old = SqliteStore::open_read_only(dir.path()).unwrap();
    assert_eq!(old.check_history_snapshot().unwrap(), Some((3, Ok(()))));
    let recent = old.load_recent(500).unwrap();
    assert_eq!(recent.transfers.len(), 2);
    assert!(recent.fxps.is_empty() && recent.conversion_fulfils.is_empty());
    assert_eq!(old.load().unwrap().transfers.len(), 3);
    drop(old);
    assert_eq!(user_version(dir.path()), 5, "audit changes nothing");

    let mut store = open(dir.path()).unwrap();
    assert_eq!(user_version(dir.path()), CURRENT_VERSION);
    let index: String = rusqlite::Connection::open(dir.path().join("kasi.db"))
        .unwrap()
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'transfers_funds'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert!(index.contains("'FUNDS_IN', 'FUNDS_OUT'"), "{index}");
    // A conversion and the transfer depending on it, committed together
    // long ago (summed by the next snapshot); another still reserved,
    // accepted by its FXP (kept).
    let terms = |determining: u128| {
        ledger::FxLink::Conversion(ledger::ConversionTerms {
            determining_transfer_id: TransferId::new(determining),
            target_currency: ledger::Currency::parse("EUR").unwrap(),
            target_amount: Amount::from_whole(9),
        })
    };
    let conversion = fx_transfer(4, TransferKind::FxConversion, terms(0xF0_0005));
    let dependent = fx_transfer(
        5,
        TransferKind::Fspiop,
        ledger::FxLink::Dependent {
            commit_request_id: conversion.transfer_id,
            payer: ledger::ParticipantId(2),
        },
    );
    let reserved = fx_transfer(6, TransferKind::FxConversion, terms(0xF0_0099));
    let accepted = |seq: u64| ledger::ConversionFulfilRow {
        seq,
        fulfilment: ledger::Fulfilment::from_preimage([5; 32]),
        request_hash: RequestHash([0xC2; 32]),
        at_ms: 550,
    };
    let committed = |seq: u64, kind: FinishKind| FinishRow {
        finished_at_ms: 600,
        ..finish(seq, kind, TransferState::Committed, None)
    };
    store
        .commit(&[&[
            Record::Transfer(conversion.clone()),
            Record::Transfer(dependent.clone()),
            Record::Transfer(reserved.clone()),
            Record::ConversionFulfilled(accepted(4)),
            Record::ConversionFulfilled(accepted(6)),
            Record::Finish(committed(5, FinishKind::Fulfil)),
            Record::Finish(committed(4, FinishKind::Linked)),
        ]])
        .unwrap();
    let whole = store.load().unwrap();
    assert_eq!(
        whole.transfers[3..],
        [conversion, dependent, reserved.clone()]
    );
    assert_eq!(whole.conversion_fulfils, [accepted(4), accepted(6)]);
    let snapshot = store.advance_history_snapshot(700).unwrap();
    assert_eq!(snapshot.transfers, 1 + 3, "seqs 1, 2, 4 and 5 summed");
    assert_eq!(snapshot.kept, [3, 6]);
    assert_eq!(store.check_history_snapshot().unwrap(), Some((6, Ok(()))));
    let recent = store.load_recent(700).unwrap();
    let loaded: Vec<u64> = recent.transfers.iter().map(|t| t.seq).collect();
    assert_eq!(loaded, [3, 6], "the reserved ones, no conversion as funds");
    assert_eq!(recent.transfers[1], reserved);
    assert_eq!(recent.conversion_fulfils, [accepted(6)]);
    assert!(store.forget_history_snapshot().unwrap());
    assert_eq!(store.load_recent(700).unwrap(), recent);
}

/// Pausing a DFSP (version 7): a participant's mode is stored beside
/// central-ledger's `is_active`; a version 6 store, which has only the
/// flag, is read as the flag says (`active` or `suspended`), as it is and
/// once migrated, and every mode written after reads back.
#[test]
fn a_version_6_store_reads_its_participants_modes_from_is_active() {
    use ledger::{FspName, ParticipantId, ParticipantMode, ParticipantRow};
    let participant = |id: u32, name: &str, mode: ParticipantMode| {
        Record::Participant(ParticipantRow {
            id: ParticipantId(id),
            name: FspName::new(name).unwrap(),
            is_hub: false,
            is_proxy: false,
            mode,
            created_at_ms: 1,
        })
    };
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = open(dir.path()).unwrap();
        let rows = [
            participant(1, "payerfsp", ParticipantMode::Active),
            participant(2, "payeefsp", ParticipantMode::Suspended),
        ];
        store.commit(&[&rows]).unwrap();
    }
    rusqlite::Connection::open(dir.path().join("kasi.db"))
        .unwrap()
        .execute_batch("ALTER TABLE participants DROP COLUMN mode; PRAGMA user_version = 6;")
        .unwrap();
    let modes = |snapshot: &ledger::Snapshot| -> Vec<ParticipantMode> {
        snapshot.participants.iter().map(|p| p.mode).collect()
    };
    let old = SqliteStore::open_read_only(dir.path())
        .unwrap()
        .load()
        .unwrap();
    let expected = [ParticipantMode::Active, ParticipantMode::Suspended];
    assert_eq!(modes(&old), expected, "read as it is");
    assert_eq!(user_version(dir.path()), 6, "audit changes nothing");

    let mut store = open(dir.path()).unwrap();
    assert_eq!(user_version(dir.path()), CURRENT_VERSION);
    assert_eq!(modes(&store.load().unwrap()), expected, "migrated");
    for mode in ParticipantMode::ALL {
        store
            .commit(&[&[participant(1, "payerfsp", mode)]])
            .unwrap();
        drop(store);
        store = open(dir.path()).unwrap();
        assert_eq!(store.load().unwrap().participants[0].mode, mode);
    }
}

/// Four-eyes (version 8): a version 7 store has no pending changes, read
/// as it is; once served it gains the table, and a change kept there,
/// then decided, reads back as its last step after a reopen.
#[test]
fn a_version_7_store_gains_pending_changes_when_served() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()).unwrap());
    rusqlite::Connection::open(dir.path().join("kasi.db"))
        .unwrap()
        .execute_batch("DROP TABLE pending_changes; PRAGMA user_version = 7;")
        .unwrap();
    let old = SqliteStore::open_read_only(dir.path())
        .unwrap()
        .load()
        .unwrap();
    assert!(old.pending_changes.is_empty());
    assert_eq!(user_version(dir.path()), 7, "audit changes nothing");

    let asked = ledger::PendingChangeRow {
        id: "9b2f".into(),
        action: "net-debit-cap".into(),
        target: "payerfsp".into(),
        method: "POST".into(),
        path: "/participants/payerfsp/initialPositionAndLimits".into(),
        body: "{}".into(),
        maker: "alice".into(),
        maker_role: "finance".into(),
        maker_source: "token".into(),
        reason: "new cap".into(),
        created_at_ms: 5,
        expires_at_ms: 50,
        state: "pending".into(),
        checker: String::new(),
        checker_role: String::new(),
        decision_reason: String::new(),
        decided_at_ms: 0,
    };
    let rejected = ledger::PendingChangeRow {
        state: "rejected".into(),
        checker: "bob".into(),
        checker_role: "operator".into(),
        decision_reason: "wrong amount".into(),
        decided_at_ms: 7,
        ..asked.clone()
    };
    let mut store = open(dir.path()).unwrap();
    assert_eq!(user_version(dir.path()), CURRENT_VERSION);
    store
        .commit(&[
            &[Record::PendingChange(asked)],
            &[Record::PendingChange(rejected.clone())],
        ])
        .unwrap();
    drop(store);
    let mut store = open(dir.path()).unwrap();
    assert_eq!(store.load().unwrap().pending_changes, [rejected]);
}

/// Audit events' source (version 9): a version 8 store's events have
/// none, read as empty as it is and once migrated; an event written after
/// keeps how its actor signed in.
#[test]
fn a_version_8_store_keeps_its_events_and_gains_their_source() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = open(dir.path()).unwrap();
        store
            .commit(&[&[Record::AuditEvent(event(1, "participant.create"))]])
            .unwrap();
    }
    rusqlite::Connection::open(dir.path().join("kasi.db"))
        .unwrap()
        .execute_batch("ALTER TABLE audit_events DROP COLUMN source; PRAGMA user_version = 8;")
        .unwrap();
    let unknown = ledger::AuditEventRow {
        source: String::new(),
        ..event(1, "participant.create")
    };
    let old = SqliteStore::open_read_only(dir.path())
        .unwrap()
        .load()
        .unwrap();
    assert_eq!(
        old.audit_events,
        std::slice::from_ref(&unknown),
        "read as it is"
    );
    assert_eq!(user_version(dir.path()), 8, "audit changes nothing");

    let mut store = open(dir.path()).unwrap();
    assert_eq!(user_version(dir.path()), CURRENT_VERSION);
    let break_glass = ledger::AuditEventRow {
        source: "tokens-file".into(),
        ..event(2, "funds.out")
    };
    store
        .commit(&[&[Record::AuditEvent(break_glass.clone())]])
        .unwrap();
    drop(store);
    let mut store = open(dir.path()).unwrap();
    assert_eq!(
        store.load().unwrap().audit_events,
        [unknown.clone(), break_glass.clone()]
    );
    assert_eq!(
        store.audit_events_after(0, 10).unwrap(),
        [unknown, break_glass],
        "every event, a page at a time"
    );
}

/// Two DFSPs with a USD position account each (ids 1 and 2) and a hub
/// account in EUR (3), as the records that make them.
fn owners() -> Vec<Record> {
    use ledger::{AccountKind, AccountRow, Currency, FspName, ParticipantId, ParticipantRow};
    let participant = |id: u32, name: &str| {
        Record::Participant(ParticipantRow {
            id: ParticipantId(id),
            name: FspName::new(name).unwrap(),
            is_hub: id == 9,
            is_proxy: false,
            mode: ledger::ParticipantMode::Active,
            created_at_ms: 1,
        })
    };
    let account = |id: u32, participant: u32, currency: &str| {
        Record::Account(AccountRow {
            id: AccountId(id),
            participant: ParticipantId(participant),
            currency: Currency::parse(currency).unwrap(),
            kind: AccountKind::Position,
            active: true,
            value: Amount::ZERO,
            reserved: Amount::ZERO,
            net_debit_cap: None,
            created_at_ms: 1,
            changed_at_ms: 1,
        })
    };
    vec![
        participant(4, "payerfsp"),
        participant(5, "payeefsp"),
        participant(9, "Hub"),
        account(1, 4, "USD"),
        account(2, 5, "USD"),
        account(3, 9, "EUR"),
    ]
}

/// The search columns (version 10): a transfer is filed under its
/// accounts' participants and currency, and its amount in ten-thousandths;
/// a version 9 store's transfers are filed so when a hub opens it.
#[test]
fn a_version_9_stores_transfers_are_filed_for_search_when_served() {
    let dir = tempfile::tempdir().unwrap();
    let odd_amount = |seq: u64, debit: u32, credit: u32, amount: Amount| {
        let Record::Transfer(row) = transfer(seq, UUID, 0x11) else {
            unreachable!()
        };
        Record::Transfer(TransferRow {
            transfer_id: TransferId::new(u128::from(seq)),
            debit: AccountId(debit),
            credit: AccountId(credit),
            amount,
            ..row
        })
    };
    let before = [
        odd_amount(1, 1, 2, Amount::parse_fspiop("12.5").unwrap()),
        odd_amount(2, 2, 1, Amount::from_whole(7)),
        // An account the store never heard of: filed under nobody.
        odd_amount(3, 1, 77, Amount::from_whole(1)),
    ];
    {
        let mut store = open(dir.path()).unwrap();
        store.commit(&[&owners(), &before]).unwrap();
    }
    let filed = vec![
        (1, Some(4), Some(5), Some("USD".to_string()), Some(125_000)),
        (2, Some(5), Some(4), Some("USD".to_string()), Some(70_000)),
        (3, Some(4), None, Some("USD".to_string()), Some(10_000)),
    ];
    assert_eq!(
        support::sqlite_search_columns(dir.path()),
        filed,
        "written so"
    );
    rusqlite::Connection::open(dir.path().join("kasi.db"))
        .unwrap()
        .execute_batch(
            "ALTER TABLE transfers DROP COLUMN payer_id; ALTER TABLE transfers DROP COLUMN payee_id;
             ALTER TABLE transfers DROP COLUMN currency; ALTER TABLE transfers DROP COLUMN amount_units;
             PRAGMA user_version = 9;",
        )
        .unwrap();
    let old = SqliteStore::open_read_only(dir.path())
        .unwrap()
        .load()
        .unwrap();
    assert_eq!(old.transfers.len(), 3, "read as it is");
    assert_eq!(user_version(dir.path()), 9, "audit changes nothing");

    let mut store = open(dir.path()).unwrap();
    assert_eq!(user_version(dir.path()), CURRENT_VERSION);
    assert_eq!(
        support::sqlite_search_columns(dir.path()),
        filed,
        "filed by the migration"
    );
    store
        .commit(&[&[odd_amount(4, 3, 1, Amount::from_whole(2))]])
        .unwrap();
    drop(store);
    assert_eq!(
        support::sqlite_search_columns(dir.path()).last(),
        Some(&(4, Some(9), Some(4), Some("EUR".to_string()), Some(20_000))),
        "the writer knows the accounts read at open"
    );
    // Indexed by nothing but seq: an index per commit costs the transfer
    // path too much (store::search).
    let connection = rusqlite::Connection::open(dir.path().join("kasi.db")).unwrap();
    let indexed: i64 = connection
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index'
             AND (sql LIKE '%payer_id%' OR sql LIKE '%currency%' OR sql LIKE '%amount_units%')
             AND tbl_name = 'transfers'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(indexed, 0);
}

/// The search keys (version 11): a failure is filed under its error code
/// and final state in its own commit, every transfer under its payer,
/// payee and currency by the writer's passes; a version 10 store's
/// failures are filed by the migration, the rest by the passes that
/// follow.
#[test]
fn a_version_10_stores_failures_are_filed_for_search_and_the_passes_file_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let keys = |dir: &std::path::Path| -> Vec<(String, i64)> {
        let connection = rusqlite::Connection::open(dir.join("kasi.db")).unwrap();
        let mut statement = connection
            .prepare("SELECT key, seq FROM transfer_keys ORDER BY seq, key")
            .unwrap();
        statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let rejected = |seq: u64| {
        let Record::Transfer(row) = transfer(seq, UUID, 0x11) else {
            unreachable!()
        };
        Record::Transfer(TransferRow {
            transfer_id: TransferId::new(u128::from(seq)),
            state: TransferState::Rejected,
            reason: Some(ErrorCode(4001)),
            ..row
        })
    };
    let reserved = |seq: u64| {
        let Record::Transfer(row) = transfer(seq, UUID, 0x11) else {
            unreachable!()
        };
        Record::Transfer(TransferRow {
            transfer_id: TransferId::new(u128::from(seq)),
            ..row
        })
    };
    {
        // No pass (a day between them): only the failures' keys.
        let mut store = SqliteStore::open(
            dir.path(),
            SqliteOptions {
                fsync: false,
                search_pass: store::search::SearchPass {
                    every: std::time::Duration::from_secs(86_400),
                    most_transfers: 1_000,
                },
                ..Default::default()
            },
        )
        .unwrap();
        store
            .commit(&[&owners(), &[reserved(1), rejected(2)]])
            .unwrap();
        store
            .commit(&[&[Record::Finish(finish(
                1,
                FinishKind::Abort,
                TransferState::Aborted,
                Some(5101),
            ))]])
            .unwrap();
    }
    let failures = vec![
        ("e:5101".to_string(), 1),
        ("s:ABORTED".to_string(), 1),
        ("e:4001".to_string(), 2),
        ("s:ABORTED_REJECTED".to_string(), 2),
    ];
    // The first commit passed over nothing (nothing was committed before
    // it), and no second pass was due.
    assert_eq!(keys(dir.path()), failures, "failures, in their own commit");
    rusqlite::Connection::open(dir.path().join("kasi.db"))
        .unwrap()
        .execute_batch(
            "DROP TABLE transfer_keys; DROP TABLE search_index; PRAGMA user_version = 10;",
        )
        .unwrap();
    let old = SqliteStore::open_read_only(dir.path())
        .unwrap()
        .load()
        .unwrap();
    assert_eq!(old.transfers.len(), 2, "read as it is");

    let mut store = SqliteStore::open(
        dir.path(),
        SqliteOptions {
            fsync: false,
            search_pass: store::search::SearchPass {
                every: std::time::Duration::ZERO,
                most_transfers: 1,
            },
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(user_version(dir.path()), CURRENT_VERSION);
    assert_eq!(keys(dir.path()), failures, "filed by the migration");
    // Each commit now passes over one transfer committed before it.
    store.commit(&[&[reserved(3)]]).unwrap();
    let mut want = failures.clone();
    want.extend([("p:4".to_string(), 1), ("q:5".to_string(), 1)]);
    want.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    assert_eq!(keys(dir.path()), want, "the first pass: seq 1");
    store.commit(&[]).unwrap();
    store.commit(&[]).unwrap();
    drop(store);
    let filed = keys(dir.path());
    for seq in 1..=3 {
        for key in ["p:4", "q:5"] {
            assert!(
                filed.contains(&(key.to_string(), seq)),
                "{key} of seq {seq}: {filed:?}"
            );
        }
    }
    let through: i64 = rusqlite::Connection::open(dir.path().join("kasi.db"))
        .unwrap()
        .query_row("SELECT through_seq FROM search_index", [], |row| row.get(0))
        .unwrap();
    assert_eq!(through, 3);
}
