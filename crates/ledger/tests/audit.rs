//! Audit events of admin changes and pinned certificates: an event for a
//! change, in the change's own batch, with the target before and after; a
//! refused change's event shows it unchanged and why; both survive a
//! restore.

use ledger::*;

fn name(text: &str) -> FspName {
    FspName::new(text).unwrap()
}

fn usd() -> Currency {
    Currency::parse("USD").unwrap()
}

/// A rendering as the hub would give: the participant's active flag and
/// its position caps, from the view's outcome.
fn render(target: &str, outcome: &Outcome) -> String {
    match outcome {
        Outcome::Participants(views) => match views.first() {
            Some(view) => format!(
                "{target}:active={}:caps={:?}",
                view.participant.mode.is_active(),
                view.accounts
                    .iter()
                    .filter_map(|a| a.net_debit_cap)
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
            ),
            None => "null".to_string(),
        },
        Outcome::Rejected(_) => "null".to_string(),
        other => format!("{other:?}"),
    }
}

fn audited(command: Command, action: &str, target: &str) -> Command {
    Command::Audited {
        command: Box::new(command),
        tag: Box::new(AuditTag {
            actor: "alice".into(),
            role: "operator".into(),
            source: "identity-provider".into(),
            action: action.into(),
            target: target.into(),
            view: Some(Box::new(Command::ReadParticipants {
                name: FspName::new(target),
            })),
            render: AuditRender(render),
        }),
    }
}

fn hub() -> Ledger {
    let mut ledger = Ledger::new(Limits::default());
    let setup = [
        Command::CreateHub { name: name("Hub") },
        Command::CreateHubAccount {
            currency: usd(),
            kind: AccountKind::HubMultilateralSettlement,
        },
        Command::CreateHubAccount {
            currency: usd(),
            kind: AccountKind::HubReconciliation,
        },
    ];
    let result = ledger.apply_batch(1, &setup);
    assert!(result.outcomes.iter().all(|o| o.error_code().is_none()));
    ledger
}

fn events(records: &[Record]) -> Vec<AuditEventRow> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::AuditEvent(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_change_has_its_event_in_its_batch_and_a_refusal_says_so() {
    let mut ledger = hub();
    let create = audited(
        Command::CreateParticipant {
            name: name("payerfsp"),
            currency: usd(),
        },
        "participant.create",
        "payerfsp",
    );
    let result = ledger.apply_batch(10, &[create]);
    assert!(matches!(result.outcomes[0], Outcome::AccountsCreated(_)));
    let created = events(&result.records);
    assert_eq!(created.len(), 1);
    let event = &created[0];
    assert_eq!(event.id, 1);
    assert_eq!(event.at_ms, 10);
    assert_eq!(
        (
            event.actor.as_str(),
            event.action.as_str(),
            event.target.as_str()
        ),
        ("alice", "participant.create", "payerfsp")
    );
    assert_eq!(event.source, "identity-provider", "how the actor signed in");
    assert_eq!(event.before, "null");
    assert_eq!(event.after, "payerfsp:active=true:caps=[]");
    assert_eq!(event.outcome, "CREATED");

    let cap = audited(
        Command::InitNetDebitCap {
            name: name("payerfsp"),
            currency: usd(),
            net_debit_cap: Amount::from_whole(500),
        },
        "limits.init",
        "payerfsp",
    );
    let refused = audited(
        Command::SetNetDebitCap {
            name: name("nobody"),
            currency: usd(),
            net_debit_cap: Amount::from_whole(1),
        },
        "limits.set",
        "nobody",
    );
    let result = ledger.apply_batch(20, &[cap, refused]);
    let code = result.outcomes[1].error_code().expect("refused");
    let capped = events(&result.records);
    assert_eq!(capped.len(), 2, "a refused change is an event too");
    assert_eq!(capped[0].id, 2);
    assert_eq!(capped[0].before, "payerfsp:active=true:caps=[]");
    assert_eq!(capped[0].after, "payerfsp:active=true:caps=[\"500\"]");
    // It shows the target as it stays, and why it stayed.
    assert_eq!(capped[1].id, 3);
    assert_eq!(capped[1].target, "nobody");
    assert_eq!(
        (capped[1].before.as_str(), capped[1].after.as_str()),
        ("null", "null")
    );
    assert!(
        capped[1].outcome.starts_with(&format!("REFUSED {code}: ")),
        "{}",
        capped[1].outcome
    );
    // A refusal before the ledger is noted as it was given, changing nothing.
    let noted = Command::Audited {
        command: Box::new(Command::NoteRefused {
            outcome: "UNAUTHENTICATED".into(),
            detail: "{\"attempts\":3}".into(),
        }),
        tag: Box::new(AuditTag {
            actor: "unknown".into(),
            role: "none".into(),
            source: "none".into(),
            action: "admin.authenticate".into(),
            target: "remote/127.0.0.1".into(),
            view: None,
            render: AuditRender(render),
        }),
    };
    let result = ledger.apply_batch(25, &[noted]);
    assert_eq!(result.outcomes[0], Outcome::Done);
    let noted = events(&result.records);
    assert_eq!(noted.len(), 1);
    assert_eq!(noted[0].id, 4);
    assert_eq!(noted[0].outcome, "UNAUTHENTICATED");
    assert_eq!(
        (noted[0].before.as_str(), noted[0].after.as_str()),
        ("null", "{\"attempts\":3}")
    );
    assert_eq!(result.records.len(), 1, "nothing but the event");

    // Newest first, filtered, limited.
    let read = |ledger: &mut Ledger, query: AuditQuery| match ledger
        .apply_batch(30, &[Command::ReadAuditEvents(query)])
        .outcomes
        .pop()
    {
        Some(Outcome::AuditEvents(events)) => events.iter().map(|e| e.id).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let all = AuditQuery {
        limit: 10,
        ..AuditQuery::default()
    };
    assert_eq!(read(&mut ledger, all.clone()), [4, 3, 2, 1]);
    let first = AuditQuery {
        limit: 1,
        ..all.clone()
    };
    assert_eq!(read(&mut ledger, first), [4]);
    let creates = AuditQuery {
        action: Some("participant.create".into()),
        ..all.clone()
    };
    assert_eq!(read(&mut ledger, creates), [1]);
    let late = AuditQuery {
        from_ms: Some(15),
        ..all.clone()
    };
    assert_eq!(read(&mut ledger, late), [4, 3, 2]);
    let someone = AuditQuery {
        actor: Some("bob".into()),
        ..all.clone()
    };
    assert!(read(&mut ledger, someone).is_empty());

    // A restore keeps the events and goes on numbering after them.
    let mut restored = Ledger::restore(ledger.snapshot(), Limits::default()).unwrap();
    assert_eq!(read(&mut restored, all), [4, 3, 2, 1]);
    let again = audited(
        Command::SetParticipantActive {
            name: name("payerfsp"),
            active: false,
        },
        "participant.deactivate",
        "payerfsp",
    );
    let result = restored.apply_batch(40, &[again]);
    assert_eq!(events(&result.records)[0].id, 5);
}

#[test]
fn certificates_are_pinned_to_one_participant() {
    let mut ledger = hub();
    for fsp in ["payerfsp", "payeefsp"] {
        let create = Command::CreateParticipant {
            name: name(fsp),
            currency: usd(),
        };
        assert!(ledger.apply_batch(2, &[create]).outcomes[0]
            .error_code()
            .is_none());
    }
    let pin = |fsp: &str, byte: u8| Command::PinCertificate {
        name: name(fsp),
        fingerprint: [byte; 32],
    };
    let result = ledger.apply_batch(
        3,
        &[pin("payerfsp", 1), pin("payeefsp", 1), pin("nobody", 2)],
    );
    assert_eq!(result.outcomes[0], Outcome::Done);
    assert!(
        result.outcomes[1].error_code().is_some(),
        "pinned elsewhere"
    );
    assert!(
        result.outcomes[2].error_code().is_some(),
        "unknown participant"
    );
    assert!(result.records.contains(&Record::CertificatePin(PinRow {
        fingerprint: [1; 32],
        participant: ParticipantId(2),
        pinned_at_ms: 3,
    })));
    let restored = Ledger::restore(ledger.snapshot(), Limits::default()).unwrap();
    let mut ledger = restored;
    match ledger
        .apply_batch(4, &[Command::ReadCertificatePins])
        .outcomes
        .pop()
    {
        Some(Outcome::CertificatePins(pins)) => {
            assert_eq!(pins.len(), 1);
            assert_eq!(pins[0].fsp, name("payerfsp"));
        }
        other => panic!("{other:?}"),
    }
    let unpin = |fsp: &str| Command::UnpinCertificate {
        name: name(fsp),
        fingerprint: [1; 32],
    };
    let result = ledger.apply_batch(
        5,
        &[unpin("payeefsp"), unpin("payerfsp"), unpin("payerfsp")],
    );
    assert!(result.outcomes[0].error_code().is_some(), "not its pin");
    assert_eq!(result.outcomes[1], Outcome::Done);
    assert!(result.outcomes[2].error_code().is_some(), "already gone");
    assert!(result
        .records
        .contains(&Record::CertificateUnpinned([1; 32])));
}

#[test]
fn a_store_with_a_pin_of_a_missing_participant_is_refused() {
    let mut snapshot = hub().snapshot();
    snapshot.certificate_pins.push(PinRow {
        fingerprint: [7; 32],
        participant: ParticipantId(99),
        pinned_at_ms: 1,
    });
    let problems = snapshot.audit();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("missing participant 99")),
        "{problems:?}"
    );
    assert!(Ledger::restore(snapshot, Limits::default()).is_err());
}

fn pending_change(id: &str, state: &str) -> PendingChangeRow {
    PendingChangeRow {
        id: id.to_string(),
        action: "funds-out".to_string(),
        target: "payerfsp".to_string(),
        method: "POST".to_string(),
        path: "/participants/payerfsp/accounts/3".to_string(),
        body: r#"{"action":"recordFundsOutPrepareReserve"}"#.to_string(),
        maker: "alice".to_string(),
        maker_role: "operator".to_string(),
        maker_source: "token".to_string(),
        reason: "month end".to_string(),
        created_at_ms: 10,
        expires_at_ms: 1_000,
        state: state.to_string(),
        checker: String::new(),
        checker_role: String::new(),
        decision_reason: String::new(),
        decided_at_ms: 0,
    }
}

#[test]
fn a_pending_change_is_kept_whole_replaced_whole_and_restored() {
    let mut ledger = hub();
    let asked = pending_change("b", "pending");
    let result = ledger.apply_batch(
        2,
        &[
            Command::KeepPendingChange(Box::new(pending_change("a", "pending"))),
            Command::KeepPendingChange(Box::new(asked.clone())),
        ],
    );
    assert_eq!(result.outcomes, [Outcome::Done, Outcome::Done]);
    assert!(result
        .records
        .contains(&Record::PendingChange(asked.clone())));
    let approved = PendingChangeRow {
        state: "applied".to_string(),
        checker: "bob".to_string(),
        checker_role: "finance".to_string(),
        decided_at_ms: 20,
        ..asked
    };
    ledger.apply_batch(3, &[Command::KeepPendingChange(Box::new(approved.clone()))]);
    let mut restored = Ledger::restore(ledger.snapshot(), Limits::default()).unwrap();
    let result = restored.apply_batch(4, &[Command::ReadPendingChanges]);
    assert_eq!(
        result.outcomes,
        [Outcome::PendingChanges(vec![
            pending_change("a", "pending"),
            approved
        ])]
    );
}
