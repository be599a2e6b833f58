//! Proxy participants and the proxy map (docs/design/interscheme.md,
//! section 8, rule 2): who may be mapped, which entry wins, how a failed
//! route heals, the limits, and the map through a snapshot and restore.

mod common;

use common::*;
use ledger::*;

fn create_proxy(name: &str) -> Command {
    Command::CreateProxy {
        name: fsp(name),
        currency: usd(),
    }
}

fn learn(dfsp: &str, proxy: &str) -> Command {
    Command::MapProxy {
        dfsp: fsp(dfsp),
        proxy: fsp(proxy),
        by_operator: false,
    }
}

fn set(dfsp: &str, proxy: &str) -> Command {
    Command::MapProxy {
        dfsp: fsp(dfsp),
        proxy: fsp(proxy),
        by_operator: true,
    }
}

fn heal(dfsp: &str, via: &str) -> Command {
    Command::UnmapProxy {
        dfsp: fsp(dfsp),
        learnt_via: Some(fsp(via)),
    }
}

fn delete(dfsp: &str) -> Command {
    Command::UnmapProxy {
        dfsp: fsp(dfsp),
        learnt_via: None,
    }
}

/// (dfsp, proxy, by operator), in DFSP order.
fn map(hub: &mut Hub) -> Vec<(String, String, bool)> {
    match hub.one(Command::ReadProxyMap) {
        Outcome::ProxyMap(rows) => rows
            .into_iter()
            .map(|v| (v.dfsp.to_string(), v.proxy.to_string(), v.by_operator))
            .collect(),
        other => panic!("{other:?}"),
    }
}

fn entry(dfsp: &str, proxy: &str, by_operator: bool) -> (String, String, bool) {
    (dfsp.into(), proxy.into(), by_operator)
}

/// A hub in USD with a DFSP and two proxies.
fn hub() -> Hub {
    let mut hub = Hub::usd();
    hub.dfsp("payerfsp", 1_000, 1_000);
    for proxy in ["pxAB", "pxAC"] {
        assert!(matches!(
            hub.one(create_proxy(proxy)),
            Outcome::AccountsCreated(ref ids) if ids.len() == 2
        ));
    }
    hub
}

fn participant(hub: &mut Hub, name: &str) -> ParticipantRow {
    match hub.one(Command::ReadParticipants {
        name: Some(fsp(name)),
    }) {
        Outcome::Participants(mut views) => views.pop().expect("one").participant,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_proxy_is_a_participant_marked_as_one_and_stays_one() {
    let mut hub = hub();
    assert!(participant(&mut hub, "pxAB").is_proxy);
    assert!(!participant(&mut hub, "payerfsp").is_proxy);
    // A second currency added either way leaves each what it is.
    let mut hub = {
        let mut hub = Hub::new(&[usd(), eur()]);
        hub.one(create_proxy("pxAB"));
        hub.dfsp("payerfsp", 1_000, 1_000);
        hub
    };
    for (command, name) in [
        (
            Command::CreateParticipant {
                name: fsp("pxAB"),
                currency: eur(),
            },
            "pxAB",
        ),
        (
            Command::CreateProxy {
                name: fsp("payerfsp"),
                currency: eur(),
            },
            "payerfsp",
        ),
    ] {
        let was = participant(&mut hub, name).is_proxy;
        assert!(matches!(hub.one(command), Outcome::AccountsCreated(_)));
        assert_eq!(participant(&mut hub, name).is_proxy, was, "{name}");
    }
}

#[test]
fn the_first_learnt_entry_and_the_operators_stay() {
    let mut hub = hub();
    let result = hub.batch(&[learn("dfspB", "pxAB")]);
    assert_eq!(result.outcomes, [Outcome::ProxyMapChanged(true)]);
    assert!(matches!(
        result.records.as_slice(),
        [Record::ProxyMapping(ProxyMapRow { dfsp, by_operator: false, .. })] if *dfsp == fsp("dfspB")
    ));
    // Another proxy answering for the same DFSP later does not move it.
    let result = hub.batch(&[learn("dfspB", "pxAC")]);
    assert_eq!(result.outcomes, [Outcome::ProxyMapChanged(false)]);
    assert!(result.records.is_empty());
    assert_eq!(map(&mut hub), [entry("dfspB", "pxAB", false)]);
    // The operator's word replaces a learnt entry, and no learnt one
    // replaces the operator's.
    assert_eq!(
        hub.one(set("dfspB", "pxAC")),
        Outcome::ProxyMapChanged(true)
    );
    assert_eq!(
        hub.one(learn("dfspB", "pxAB")),
        Outcome::ProxyMapChanged(false)
    );
    assert_eq!(map(&mut hub), [entry("dfspB", "pxAC", true)]);
    // The same operator entry again changes nothing.
    let result = hub.batch(&[set("dfspB", "pxAC")]);
    assert_eq!(result.outcomes, [Outcome::ProxyMapChanged(false)]);
    assert!(result.records.is_empty());
}

#[test]
fn a_failed_route_drops_only_a_learnt_entry_through_that_proxy() {
    let mut hub = hub();
    hub.apply(&[learn("dfspB", "pxAB"), set("dfspC", "pxAC")]);
    // Through another proxy, or an operator's entry: kept.
    assert_eq!(
        hub.one(heal("dfspB", "pxAC")),
        Outcome::ProxyMapChanged(false)
    );
    assert_eq!(
        hub.one(heal("dfspC", "pxAC")),
        Outcome::ProxyMapChanged(false)
    );
    assert_eq!(
        hub.one(heal("nobody", "pxAC")),
        Outcome::ProxyMapChanged(false)
    );
    assert_eq!(map(&mut hub).len(), 2);
    let result = hub.batch(&[heal("dfspB", "pxAB")]);
    assert_eq!(result.outcomes, [Outcome::ProxyMapChanged(true)]);
    assert_eq!(result.records, [Record::ProxyUnmapped(fsp("dfspB"))]);
    // The next discovery learns it again, through whichever proxy answers.
    assert_eq!(
        hub.one(learn("dfspB", "pxAC")),
        Outcome::ProxyMapChanged(true)
    );
    // The operator deletes any entry; a missing one is 3200.
    assert_eq!(hub.one(delete("dfspC")), Outcome::ProxyMapChanged(true));
    hub.assert_rejected(delete("dfspC"), ErrorCode::ID_NOT_FOUND);
    assert_eq!(map(&mut hub), [entry("dfspB", "pxAC", false)]);
}

#[test]
fn only_other_schemes_dfsps_are_mapped_and_only_to_proxies() {
    let mut hub = hub();
    // A participant's own name, the hub's, a proxy's: local wins.
    for dfsp in ["payerfsp", "Hub", "pxAC"] {
        hub.assert_rejected(learn(dfsp, "pxAB"), ErrorCode::GENERIC_VALIDATION_ERROR);
        hub.assert_rejected(set(dfsp, "pxAB"), ErrorCode::GENERIC_VALIDATION_ERROR);
    }
    // Through a DFSP that is not a proxy, the hub, or nobody.
    hub.assert_rejected(
        set("dfspB", "payerfsp"),
        ErrorCode::GENERIC_VALIDATION_ERROR,
    );
    hub.assert_rejected(set("dfspB", "Hub"), ErrorCode::GENERIC_VALIDATION_ERROR);
    hub.assert_rejected(learn("dfspB", "nobody"), ErrorCode::ID_NOT_FOUND);
    assert!(map(&mut hub).is_empty());
}

#[test]
fn a_dfsp_that_joins_this_scheme_leaves_the_map() {
    let mut hub = hub();
    hub.apply(&[set("dfspB", "pxAB"), learn("dfspC", "pxAB")]);
    let result = hub.batch(&[Command::CreateParticipant {
        name: fsp("dfspB"),
        currency: usd(),
    }]);
    assert!(matches!(result.outcomes[0], Outcome::AccountsCreated(_)));
    assert!(result
        .records
        .contains(&Record::ProxyUnmapped(fsp("dfspB"))));
    assert_eq!(map(&mut hub), [entry("dfspC", "pxAB", false)]);
    assert!(hub.ledger.snapshot().audit().is_empty());
}

#[test]
fn the_map_is_bounded() {
    let mut hub = hub();
    let commands: Vec<Command> = (0..PROXY_MAP_MAX)
        .map(|i| learn(&format!("d{i}"), "pxAB"))
        .collect();
    for chunk in commands.chunks(10_000) {
        assert!(hub
            .apply(chunk)
            .iter()
            .all(|o| *o == Outcome::ProxyMapChanged(true)));
    }
    let rejection = hub.assert_rejected(learn("onemore", "pxAB"), ErrorCode::INTERNAL_SERVER_ERROR);
    assert!(
        rejection.description.contains("limit"),
        "{}",
        rejection.description
    );
    // A change of an entry it holds is not a new one.
    assert_eq!(hub.one(set("d7", "pxAC")), Outcome::ProxyMapChanged(true));
    assert_eq!(hub.one(delete("d8")), Outcome::ProxyMapChanged(true));
    assert_eq!(
        hub.one(learn("onemore", "pxAB")),
        Outcome::ProxyMapChanged(true)
    );
}

#[test]
fn proxies_and_the_map_survive_restore_and_the_audit_checks_them() {
    let mut hub = hub();
    hub.apply(&[set("dfspB", "pxAB"), learn("dfspC", "pxAC")]);
    let snapshot = hub.ledger.snapshot();
    assert_eq!(snapshot.proxy_map.len(), 2);
    assert!(snapshot.audit().is_empty(), "{:?}", snapshot.audit());
    let mut restored = Ledger::restore(snapshot.clone(), Limits::default()).unwrap();
    assert_eq!(restored.snapshot(), snapshot);
    let result = restored.apply_batch(T0 + 1, &[learn("dfspB", "pxAC")]);
    assert_eq!(
        result.outcomes,
        [Outcome::ProxyMapChanged(false)],
        "the restored operator entry stays"
    );

    // A snapshot whose map names a DFSP of this scheme, a non-proxy, or is
    // out of order, fails the audit.
    let payer = snapshot
        .participants
        .iter()
        .find(|p| p.name == fsp("payerfsp"))
        .unwrap()
        .id;
    let mut bad = snapshot.clone();
    bad.proxy_map[0].dfsp = fsp("payerfsp");
    assert!(!bad.audit().is_empty());
    let mut bad = snapshot.clone();
    bad.proxy_map[1].proxy = payer;
    assert!(!bad.audit().is_empty());
    let mut bad = snapshot.clone();
    bad.proxy_map.swap(0, 1);
    assert!(!bad.audit().is_empty());
    let mut bad = snapshot;
    let proxy = bad.proxy_map[0].proxy;
    bad.participants[proxy.0 as usize - 1].is_proxy = false;
    assert!(!bad.audit().is_empty());
}
