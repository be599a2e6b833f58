//! `kasi migrate-store`: a SQLite hub with real history moves to a
//! throw-away PostgreSQL database whole, audits there, and serves there;
//! a target that already holds a hub is refused; a target that does not
//! keep what it was given is caught.

mod support;

use std::path::Path;
use std::process::Output;

use ledger::{
    AccountKind, Amount, Command, ConversionTerms, Corridor, Currency, FspName, FulfilConversion,
    Fulfilment, Funds, Ledger, Limits, Outcome, Prepare, PrepareConversion, Record, RequestHash,
    Snapshot, TransferId,
};
use ledger::{AuditEventRow, Fulfil};
use store::delivery::{DeadLetterRow, Delivery, DeliveryDb};
use store::sqlite::{SqliteOptions, SqliteStore};
use store::Store;
use support::*;

/// More than a hub keeps in memory: the copy must take every one.
const AUDIT_EVENTS: u64 = ledger::AUDIT_EVENTS_IN_MEMORY as u64 + 25;

fn run_migrate(from: &Path, to: &str) -> Output {
    kasi()
        .args(["migrate-store", "--chunk", "500", "--from"])
        .arg(format!("sqlite:{}", from.display()))
        .args(["--to", to])
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn dead_letter() -> DeadLetterRow {
    DeadLetterRow {
        id: 7,
        destination: "dfsp0001".into(),
        transfer_id: Some("01K1WV2595Z7XST8FW5K4XRDZB".into()),
        method: "PUT".into(),
        url: "http://127.0.0.1:9/transfers/01K1WV2595Z7XST8FW5K4XRDZB".into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("fspiop-source".into(), "Hub".into()),
        ],
        body: b"{\"transferState\":\"COMMITTED\"}".to_vec(),
        failed_at_ms: 1_700_000_000_000,
        attempts: 5,
        reason: "503 Service Unavailable".into(),
        origin: store::delivery::CallbackOrigin::Hub,
    }
}

/// Conversions through an FXP, made by the ledger itself on the stopped
/// hub's state and committed to its store as a hub would: the payer's USD
/// into EUR for the payee, committed with its transfer; another accepted
/// by the FXP, awaiting its transfer; the FXP's corridors.
fn convert(store: &mut SqliteStore) {
    let mut ledger = Ledger::restore(store.load().unwrap(), Limits::default()).unwrap();
    let fsp = |name: &str| FspName::new(name).unwrap();
    let (usd, eur) = (
        Currency::parse("USD").unwrap(),
        Currency::parse("EUR").unwrap(),
    );
    let (fxp, payer, payee) = (fsp("fxp0001"), fsp(PAYER), fsp(PAYEE));
    let mut at = now_ms();
    let mut apply = |commands: Vec<Command>| -> Vec<Outcome> {
        at += 1;
        let result = ledger.apply_batch(at, &commands);
        for outcome in &result.outcomes {
            assert!(!matches!(outcome, Outcome::Rejected(_)), "{outcome:?}");
        }
        store.commit(&[&result.records]).unwrap();
        result.outcomes
    };
    let mut onboarding = Vec::new();
    for kind in [
        AccountKind::HubMultilateralSettlement,
        AccountKind::HubReconciliation,
    ] {
        onboarding.push(Command::CreateHubAccount {
            currency: eur,
            kind,
        });
    }
    for (name, currency) in [(payee, eur), (fxp, usd), (fxp, eur)] {
        onboarding.push(Command::CreateParticipant { name, currency });
        onboarding.push(Command::InitNetDebitCap {
            name,
            currency,
            net_debit_cap: Amount::from_whole(1_000),
        });
    }
    onboarding.push(Command::SetFxpCorridors {
        name: fxp,
        corridors: vec![Corridor {
            source: usd,
            target: eur,
        }],
    });
    let outcomes = apply(onboarding);
    let Outcome::AccountsCreated(fxp_eur) = &outcomes[6] else {
        panic!("{outcomes:?}");
    };
    apply(vec![Command::FundsIn(Funds {
        transfer_id: TransferId::new(0xF0_0001),
        participant: fxp,
        account: fxp_eur[1],
        amount: Amount::from_whole(1_000),
        currency: eur,
        memo: Default::default(),
        request_hash: RequestHash([1; 32]),
    })]);
    let fxp_fulfilment = Fulfilment::from_preimage([5; 32]);
    let fulfilment = Fulfilment::from_preimage([6; 32]);
    for (n, pay) in [(0xF0_0010u128, true), (0xF0_0020, false)] {
        let (commit_request_id, determining_transfer_id) =
            (TransferId::new(n), TransferId::new(n + 1));
        apply(vec![Command::PrepareConversion(PrepareConversion {
            commit_request_id,
            initiating: payer,
            fxp,
            source_amount: Amount::from_whole(20),
            source_currency: usd,
            terms: ConversionTerms {
                determining_transfer_id,
                target_currency: eur,
                target_amount: Amount::from_whole(18),
            },
            condition: fxp_fulfilment.condition(),
            expiration_ms: far_future(),
            request_hash: RequestHash([2; 32]),
            wire_version: 0x20,
        })]);
        apply(vec![Command::FulfilConversion(FulfilConversion {
            commit_request_id,
            caller: fxp,
            fulfilment: Some(fxp_fulfilment),
            destination: None,
            request_hash: RequestHash([3; 32]),
        })]);
        if !pay {
            continue;
        }
        apply(vec![Command::Prepare(Prepare {
            transfer_id: determining_transfer_id,
            payer,
            payee,
            amount: Amount::from_whole(18),
            currency: eur,
            condition: fulfilment.condition(),
            expiration_ms: far_future(),
            request_hash: RequestHash([4; 32]),
            wire_version: 0x20,
            parties: None,
        })]);
        apply(vec![Command::Fulfil(Fulfil {
            transfer_id: determining_transfer_id,
            caller: payee,
            fulfilment: Some(fulfilment),
            destination: None,
            request_hash: RequestHash([6; 32]),
        })]);
    }
}

/// A stopped SQLite hub with real history: `kasi bench ledger` (transfers
/// and settlement), a transfer through `kasi serve` (whose id it returns),
/// then audit events (more than a hub keeps in memory), a
/// pinned certificate, a registered party, conversions, and the callback
/// dispatcher's watermark and a dead letter, written with the store's
/// API. Its snapshot.
fn sqlite_hub(dir: &Path) -> (Snapshot, String) {
    let output = kasi()
        .args([
            "bench",
            "ledger",
            "--fsync",
            "off",
            "--transfers",
            "2000",
            "--dfsps",
            "4",
            "--data-dir",
        ])
        .arg(dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    // A real FSPIOP transfer through a hub on it (and the audit events of
    // onboarding its DFSPs).
    let mut hub = Hub::start(dir);
    let (payer, payee) = (Stub::start(PAYER), Stub::start(PAYEE));
    hub.onboard(PAYER, &payer.base_url(), 10_000, 5_000);
    hub.onboard(PAYEE, &payee.base_url(), 10_000, 5_000);
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "12.34", far_future());
    let response = hub.prepare(PAYER, PAYEE, &body);
    assert_eq!(response.status, 202, "prepare: {response:?}");
    payee.expect("POST", "/transfers");
    let response = hub.fulfil(&id, PAYEE, PAYER, &fulfil_body(FULFILMENT, "COMMITTED"));
    assert_eq!(response.status, 200, "fulfil: {response:?}");
    payer.expect("PUT", &format!("/transfers/{id}"));
    assert!(hub.terminate().success());
    let mut store = SqliteStore::open(
        dir,
        SqliteOptions {
            fsync: false,
            history: None,
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    let snapshot = store.load().unwrap();
    let dfsp = snapshot
        .participants
        .iter()
        .find(|p| !p.is_hub)
        .expect("a DFSP")
        .id;
    let first = snapshot.audit_events.last().map_or(1, |e| e.id + 1);
    let mut records: Vec<Record> = (first..first + AUDIT_EVENTS)
        .map(|id| {
            Record::AuditEvent(AuditEventRow {
                id,
                at_ms: 1_700_000_000_000 + id as i64,
                actor: "ops".into(),
                role: "operator".into(),
                action: "POST /participants/dfsp0000/endpoints".into(),
                target: format!("participant/dfsp0000/{id}"),
                before: "null".into(),
                after: format!("{{\"n\":{id}}}"),
                outcome: "CREATED".into(),
                source: "tokens-file".into(),
            })
        })
        .collect();
    records.push(Record::CertificatePin(ledger::PinRow {
        fingerprint: [7; 32],
        participant: dfsp,
        pinned_at_ms: 1_700_000_000_000,
    }));
    records.push(Record::Party(ledger::PartyRow {
        key: ledger::PartyKey {
            id_type: "MSISDN".into(),
            identifier: "27710000001".into(),
            sub_id: None,
        },
        fsp: dfsp,
        currency: None,
        registered_at_ms: 1_700_000_000_000,
    }));
    store.commit(&[&records]).unwrap();
    convert(&mut store);
    let snapshot = store.load().unwrap();
    drop(store);
    let mut delivery = DeliveryDb::open(dir).unwrap();
    delivery
        .apply(Some(now_ms()), &[dead_letter()], &[])
        .unwrap();
    assert!(!snapshot.windows.is_empty(), "the bench settled nothing");
    assert_eq!(snapshot.conversion_fulfils.len(), 2);
    assert_eq!(snapshot.fxps.len(), 1);
    assert!(!snapshot.entries.is_empty() || !snapshot.settlements.is_empty());
    (snapshot, id)
}

#[test]
fn a_sqlite_hub_moves_to_postgresql_whole_audits_and_serves_there() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (source, id) = sqlite_hub(&data);
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("moved");
    let source_events = SqliteStore::open_read_only(&data)
        .unwrap()
        .audit_events_after(0, 1 << 40)
        .unwrap();
    assert!(source_events.len() as u64 > AUDIT_EVENTS);

    let output = run_migrate(&data, &url);
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("both stores hold the same state"),
        "{stdout}"
    );
    let audit_line = stdout
        .lines()
        .find(|line| line.trim_start().starts_with("audit_events "))
        .unwrap_or_else(|| panic!("no audit_events count: {stdout}"));
    assert!(
        audit_line
            .trim_end()
            .ends_with(&format!(" {}", source_events.len())),
        "{audit_line}"
    );
    let fx_transfers = source.transfers.iter().filter(|t| t.fx.is_some()).count();
    assert_eq!(
        fx_transfers, 3,
        "two conversions, one transfer depending on one"
    );
    for (table, rows) in [
        ("transfers", source.transfers.len()),
        ("transfer_fx", fx_transfers),
        ("conversion_fulfils", source.conversion_fulfils.len()),
        ("fxps", source.fxps.len()),
    ] {
        let line = stdout
            .lines()
            .find(|line| line.trim_start().starts_with(&format!("{table} ")))
            .unwrap_or_else(|| panic!("no {table} count: {stdout}"));
        assert!(line.trim_end().ends_with(&format!(" {rows}")), "{line}");
    }

    // The target, as PostgreSQL holds it.
    let mut target = store::pg::PgStore::open_read_only(&url).unwrap();
    assert_eq!(target.load().unwrap(), source);
    assert_eq!(
        target.audit_events_after(0, 1 << 40).unwrap(),
        source_events
    );
    drop(target);
    let mut delivery = store::pg_delivery::PgDelivery::open(&url, None).unwrap();
    assert_eq!(delivery.dead_letters().unwrap(), vec![dead_letter()]);
    assert!(delivery.watermark().unwrap().is_some());
    drop(delivery);

    let audit = kasi().args(["audit", "--store", &url]).output().unwrap();
    assert!(audit.status.success(), "{}", text(&audit));

    // The source is unchanged, and free again.
    let mut again = SqliteStore::open_read_only(&data).unwrap();
    assert_eq!(again.load().unwrap(), source);
    drop(again);

    // A hub serves from the target, and answers for a migrated transfer.
    let unused = tempfile::tempdir().unwrap();
    let hub = Hub::start_with(unused.path(), &["--store", &url]);
    let stub = Stub::start(PAYER);
    hub.add_endpoint(
        PAYER,
        "FSPIOP_CALLBACK_URL_TRANSFER_PUT",
        &format!("{}/transfers/{{{{transferId}}}}", stub.base_url()),
    );
    let response = hub.get_transfer(&id, PAYER, PAYEE);
    assert_eq!(response.status, 202, "GET /transfers/{id}: {response:?}");
    let answer = stub.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(
        answer.json()["transferState"],
        "COMMITTED",
        "{}",
        answer.text()
    );
}

#[test]
fn a_target_that_holds_a_hub_is_refused_and_a_missing_source_too() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    sqlite_hub(&data);
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("taken");
    let first = run_migrate(&data, &url);
    assert!(first.status.success(), "{}", text(&first));

    let second = run_migrate(&data, &url);
    assert!(!second.status.success(), "{}", text(&second));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("already holds a hub's rows") && stderr.contains(&url),
        "{}",
        text(&second)
    );

    let secret = url.replace("postgres@", "postgres:s3cret@");
    let missing = run_migrate(&dir.path().join("nothing-here"), &secret);
    assert!(!missing.status.success(), "{}", text(&missing));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("no kasi store at sqlite:") && stderr.contains("nothing-here"),
        "{}",
        text(&missing)
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");

    // A hub serving from the source: refused too.
    let hub = Hub::start(&data);
    let busy = run_migrate(&data, &cluster.create_database("busy"));
    assert!(!busy.status.success(), "{}", text(&busy));
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("stop the hub first"),
        "{}",
        text(&busy)
    );
    drop(hub);
}

/// The check is real: a target that quietly changes a row it was given
/// (here a trigger rewriting one transfer's amount) fails the migration
/// with that row named.
#[test]
fn a_target_that_does_not_keep_what_it_was_given_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (source, _) = sqlite_hub(&data);
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("tampered");
    // Kasi's schema, no rows: still an empty hub store.
    drop(store::pg::PgStore::open(&url).unwrap());
    let tampered = source.transfers[41].seq;
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .batch_execute(&format!(
            "CREATE FUNCTION tamper() RETURNS trigger AS $$
             BEGIN NEW.amount := '1234567'; RETURN NEW; END $$ LANGUAGE plpgsql;
             CREATE TRIGGER tamper BEFORE INSERT ON transfers
             FOR EACH ROW WHEN (NEW.seq = {tampered}) EXECUTE FUNCTION tamper();"
        ))
        .unwrap();
    drop(client);

    let output = run_migrate(&data, &url);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("differs from the source") && stdout.contains("transfers[41]"),
        "{}",
        text(&output)
    );
}
