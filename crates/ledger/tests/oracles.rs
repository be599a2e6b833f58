//! External oracle configuration: created, updated and deleted through the
//! ledger, refused atomically, restored and audited like the other
//! reference data; ids are never reused.

mod common;

use common::*;
use ledger::*;

fn create(id_type: &str, endpoint: &str, currency: Option<Currency>, is_default: bool) -> Command {
    Command::CreateOracle {
        id_type: id_type.into(),
        endpoint: endpoint.into(),
        currency,
        is_default,
    }
}

fn update(
    id: u32,
    id_type: &str,
    endpoint: &str,
    currency: Option<Currency>,
    is_default: bool,
) -> Command {
    Command::UpdateOracle {
        id,
        id_type: id_type.into(),
        endpoint: endpoint.into(),
        currency,
        is_default,
    }
}

fn live(hub: &mut Hub) -> Vec<OracleRow> {
    match hub.one(Command::ReadOracles) {
        Outcome::Oracles(rows) => rows,
        other => panic!("{other:?}"),
    }
}

const URL: &str = "http://oracle.example:8080/api";

#[test]
fn oracles_are_created_read_updated_and_deleted_with_records() {
    let mut hub = Hub::bare();
    let result = hub.batch(&[create("MSISDN", URL, Some(usd()), true)]);
    assert_eq!(result.outcomes, [Outcome::OracleCreated(1)]);
    let row = OracleRow {
        id: 1,
        id_type: "MSISDN".into(),
        endpoint: URL.into(),
        currency: Some(usd()),
        is_default: true,
        active: true,
    };
    assert_eq!(result.records, [Record::Oracle(row.clone())]);
    assert_eq!(
        hub.one(create("MSISDN", URL, Some(eur()), false)),
        Outcome::OracleCreated(2)
    );
    assert_eq!(live(&mut hub).len(), 2);

    let result = hub.batch(&[update(1, "MSISDN", "https://other/x", None, true)]);
    assert_eq!(result.outcomes, [Outcome::Done]);
    let updated = OracleRow {
        endpoint: "https://other/x".into(),
        currency: None,
        ..row
    };
    assert_eq!(result.records, [Record::Oracle(updated.clone())]);
    // The same configuration again changes nothing and writes nothing.
    let result = hub.batch(&[update(1, "MSISDN", "https://other/x", None, true)]);
    assert_eq!(result.outcomes, [Outcome::Done]);
    assert!(result.records.is_empty());

    let result = hub.batch(&[Command::DeleteOracle { id: 2 }]);
    assert_eq!(result.outcomes, [Outcome::Done]);
    assert_eq!(result.records, [Record::OracleDeleted(2)]);
    assert_eq!(live(&mut hub), [updated]);
    // Oracle 2's (type, currency) is free again, but its id is not.
    assert_eq!(
        hub.one(create("MSISDN", URL, Some(eur()), false)),
        Outcome::OracleCreated(3)
    );
    let snapshot = hub.ledger.snapshot();
    assert_eq!(snapshot.oracles.len(), 3);
    assert!(!snapshot.oracles[1].active);
    assert!(snapshot.audit().is_empty(), "{:?}", snapshot.audit());
}

#[test]
fn bad_or_conflicting_oracles_are_refused_and_change_nothing() {
    let mut hub = Hub::bare();
    assert_eq!(
        hub.one(create("MSISDN", URL, Some(usd()), true)),
        Outcome::OracleCreated(1)
    );
    assert_eq!(
        hub.one(create("EMAIL", URL, None, false)),
        Outcome::OracleCreated(2)
    );
    // Same (type, currency) as a live oracle: 3003, as ALS.
    hub.assert_rejected(
        create("MSISDN", "http://elsewhere", Some(usd()), false),
        ErrorCode::ADD_PARTY_INFORMATION_ERROR,
    );
    hub.assert_rejected(
        create("EMAIL", "http://elsewhere", None, true),
        ErrorCode::ADD_PARTY_INFORMATION_ERROR,
    );
    // A second default for a type.
    hub.assert_rejected(
        create("MSISDN", URL, None, true),
        ErrorCode::ADD_PARTY_INFORMATION_ERROR,
    );
    // Updating into another oracle's slot.
    hub.assert_rejected(
        update(2, "MSISDN", URL, Some(usd()), false),
        ErrorCode::ADD_PARTY_INFORMATION_ERROR,
    );
    for (id_type, endpoint) in [
        ("", URL),
        ("msisdn", URL),
        ("MSISDN TYPE", URL),
        (&"A".repeat(ORACLE_ID_TYPE_MAX_LEN + 1), URL),
        ("ALIAS", ""),
        ("ALIAS", "ftp://oracle"),
        ("ALIAS", "oracle:8080"),
        ("ALIAS", "http://"),
        ("ALIAS", "http:///path"),
        ("ALIAS", "http://oracle /x"),
        ("ALIAS", "http://oracle\n/x"),
        (
            "ALIAS",
            &format!("http://{}", "a".repeat(ORACLE_ENDPOINT_MAX_LEN)),
        ),
    ] {
        hub.assert_rejected(
            create(id_type, endpoint, None, false),
            ErrorCode::GENERIC_VALIDATION_ERROR,
        );
    }
    // Unknown ids, including id 0 and a deleted one.
    for id in [0, 3, u32::MAX] {
        hub.assert_rejected(Command::DeleteOracle { id }, ErrorCode::ID_NOT_FOUND);
        hub.assert_rejected(
            update(id, "ALIAS", URL, None, false),
            ErrorCode::ID_NOT_FOUND,
        );
    }
    assert_eq!(hub.one(Command::DeleteOracle { id: 2 }), Outcome::Done);
    hub.assert_rejected(Command::DeleteOracle { id: 2 }, ErrorCode::ID_NOT_FOUND);
    hub.assert_rejected(
        update(2, "EMAIL", URL, None, false),
        ErrorCode::ID_NOT_FOUND,
    );
    // Updating an oracle keeps its own slot.
    assert_eq!(
        hub.one(update(1, "MSISDN", "http://moved", Some(usd()), true)),
        Outcome::Done
    );
}

#[test]
fn oracles_survive_restore_and_the_next_id_follows_deleted_ones() {
    let mut hub = Hub::bare();
    for id_type in ["MSISDN", "EMAIL", "ALIAS"] {
        hub.one(create(id_type, URL, None, true));
    }
    assert_eq!(hub.one(Command::DeleteOracle { id: 3 }), Outcome::Done);
    let snapshot = hub.ledger.snapshot();
    let mut restored = Ledger::restore(snapshot.clone(), Limits::default()).unwrap();
    assert_eq!(restored.snapshot(), snapshot);
    let result = restored.apply_batch(T0, &[create("ALIAS", URL, None, true)]);
    assert_eq!(result.outcomes, [Outcome::OracleCreated(4)]);
}

#[test]
fn the_audit_refuses_inconsistent_oracle_rows() {
    let mut hub = Hub::bare();
    hub.one(create("MSISDN", URL, Some(usd()), true));
    hub.one(create("MSISDN", URL, Some(eur()), false));
    let good = hub.ledger.snapshot();
    assert!(good.audit().is_empty());

    let mut gap = good.clone();
    gap.oracles[1].id = 5;
    let mut duplicate = good.clone();
    duplicate.oracles[1].currency = Some(usd());
    let mut two_defaults = good.clone();
    two_defaults.oracles[1].is_default = true;
    let mut bad_url = good.clone();
    bad_url.oracles[0].endpoint = "not a url".into();
    for (what, snapshot) in [
        ("id gap", gap),
        ("duplicate", duplicate),
        ("two defaults", two_defaults),
        ("bad url", bad_url),
    ] {
        assert!(!snapshot.audit().is_empty(), "{what} passed the audit");
        assert!(
            Ledger::restore(snapshot, Limits::default()).is_err(),
            "{what} was restored"
        );
    }
    // A deleted duplicate is no conflict.
    let mut deleted = good.clone();
    deleted.oracles[1].currency = Some(usd());
    deleted.oracles[1].is_default = true;
    deleted.oracles[1].active = false;
    assert!(deleted.audit().is_empty(), "{:?}", deleted.audit());
}
