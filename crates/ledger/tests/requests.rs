//! Every typed request's outcome converts to its reply type (`request.rs`):
//! each kind of command applied, answered and refused, and the reply is
//! the one expected. A conversion that failed would be a 2001 at the hub.

mod common;

use common::*;
use ledger::request::*;
use ledger::*;

/// Applies `request` as its own batch; its reply must convert.
fn ask<R: Request>(hub: &mut Hub, request: R) -> R::Reply {
    let command = request.into_command();
    let outcome = hub.one(command.clone());
    R::reply(outcome)
        .unwrap_or_else(|Unexpected(outcome)| panic!("{command:?} came to {outcome:?}"))
}

fn refused<T: std::fmt::Debug>(reply: Result<T, Rejection>) -> ErrorCode {
    match reply {
        Err(rejection) => rejection.code,
        Ok(answer) => panic!("answered {answer:?}, expected a refusal"),
    }
}

#[test]
fn reference_data_requests_reply_in_their_types() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 500);
    let name = fsp("newfsp");
    let ids = ask(
        &mut hub,
        CreateParticipant {
            name,
            currency: eur(),
        },
    );
    assert_eq!(
        refused(ids),
        ErrorCode::ADD_PARTY_INFORMATION_ERROR,
        "no EUR hub accounts"
    );
    let ids = ask(
        &mut hub,
        CreateParticipant {
            name,
            currency: usd(),
        },
    )
    .unwrap();
    assert_eq!(ids.len(), 2);
    let ids = ask(
        &mut hub,
        CreateHubAccount {
            currency: eur(),
            kind: AccountKind::HubReconciliation,
        },
    )
    .unwrap();
    assert_eq!(ids.len(), 1);
    ask(
        &mut hub,
        SetParticipantActive {
            name,
            active: false,
        },
    )
    .unwrap();
    let unknown = fsp("nobody");
    let code = refused(ask(
        &mut hub,
        SetParticipantActive {
            name: unknown,
            active: true,
        },
    ));
    assert_eq!(code, ErrorCode::ID_NOT_FOUND);
    ask(
        &mut hub,
        SetParticipantMode {
            name,
            mode: ParticipantMode::SendOnly,
        },
    )
    .unwrap();
    let code = refused(ask(
        &mut hub,
        SetParticipantMode {
            name: unknown,
            mode: ParticipantMode::Suspended,
        },
    ));
    assert_eq!(code, ErrorCode::ID_NOT_FOUND);
    ask(
        &mut hub,
        SetAccountActive {
            name: payer.name,
            account: payer.position,
            active: true,
        },
    )
    .unwrap();
    ask(
        &mut hub,
        InitNetDebitCap {
            name,
            currency: usd(),
            net_debit_cap: whole(10),
        },
    )
    .unwrap();
    ask(
        &mut hub,
        SetNetDebitCap {
            name,
            currency: usd(),
            net_debit_cap: whole(20),
        },
    )
    .unwrap();
    ask(
        &mut hub,
        SetEndpoint {
            name,
            endpoint_type: "FSPIOP_CALLBACK_URL_TRANSFER_POST".into(),
            value: "http://127.0.0.1:1/transfers".into(),
        },
    )
    .unwrap();
    ask(
        &mut hub,
        CreateSettlementModel {
            name: "DEFERREDNET".into(),
            definition: "{}".into(),
            rules: None,
        },
    )
    .unwrap();
    let key = PartyKey {
        id_type: "MSISDN".into(),
        identifier: "123".into(),
        sub_id: None,
    };
    ask(
        &mut hub,
        RegisterParty {
            key: key.clone(),
            fsp: payer.name,
            currency: None,
        },
    )
    .unwrap();
    let code = refused(ask(
        &mut hub,
        DeleteParty {
            key: key.clone(),
            caller: name,
        },
    ));
    assert!(code.0 >= 3000, "{code:?}");
    ask(
        &mut hub,
        DeleteParty {
            key,
            caller: payer.name,
        },
    )
    .unwrap();
    let id = ask(
        &mut hub,
        CreateOracle {
            id_type: "IBAN".into(),
            endpoint: "http://127.0.0.1:1/oracle".into(),
            currency: None,
            is_default: true,
        },
    )
    .unwrap();
    ask(
        &mut hub,
        UpdateOracle {
            id,
            id_type: "IBAN".into(),
            endpoint: "http://127.0.0.1:2/oracle".into(),
            currency: None,
            is_default: true,
        },
    )
    .unwrap();
    assert_eq!(ask(&mut hub, ReadOracles {}).unwrap().len(), 1);
    ask(&mut hub, DeleteOracle { id }).unwrap();
    refused(ask(&mut hub, DeleteOracle { id }));
    let proxy = fsp("pxAB");
    assert_eq!(
        ask(
            &mut hub,
            CreateProxy {
                name: proxy,
                currency: usd()
            }
        )
        .unwrap()
        .len(),
        2
    );
    let dfsp = fsp("dfspB");
    let learnt = MapProxy {
        dfsp,
        proxy,
        by_operator: false,
    };
    assert!(ask(&mut hub, learnt.clone()).unwrap());
    assert!(!ask(&mut hub, learnt).unwrap());
    assert_eq!(ask(&mut hub, ReadProxyMap {}).unwrap()[0].proxy, proxy);
    let healed = UnmapProxy {
        dfsp,
        learnt_via: Some(proxy),
    };
    assert!(ask(&mut hub, healed.clone()).unwrap());
    assert!(!ask(&mut hub, healed).unwrap());
    refused(ask(
        &mut hub,
        UnmapProxy {
            dfsp,
            learnt_via: None,
        },
    ));
    ask(
        &mut hub,
        PinCertificate {
            name,
            fingerprint: [7; 32],
        },
    )
    .unwrap();
    assert_eq!(ask(&mut hub, ReadCertificatePins {}).unwrap().len(), 1);
    ask(
        &mut hub,
        UnpinCertificate {
            name,
            fingerprint: [7; 32],
        },
    )
    .unwrap();
    let everyone = ask(&mut hub, ReadParticipants { name: None }).unwrap();
    assert!(everyone.iter().any(|view| view.participant.name == name));
    let code = refused(ask(
        &mut hub,
        ReadParticipants {
            name: Some(unknown),
        },
    ));
    assert_eq!(code, ErrorCode::ID_NOT_FOUND);
    assert!(ask(&mut hub, ReadParties {}).unwrap().is_empty());
    assert_eq!(ask(&mut hub, ReadSettlementModels {}).unwrap().len(), 1);
    let events = ask(&mut hub, ReadAuditEvents(AuditQuery::default())).unwrap();
    assert!(events.is_empty(), "nothing here was audited");
    ask(
        &mut hub,
        NoteExternalChange {
            before: "null".into(),
            after: "null".into(),
        },
    )
    .unwrap();
    ask(
        &mut hub,
        NoteRefused {
            outcome: "UNAUTHENTICATED".into(),
            detail: "null".into(),
        },
    )
    .unwrap();
}

#[test]
fn transfer_and_quote_requests_reply_in_their_types() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 500);
    let payee = hub.dfsp("payeefsp", 1000, 500);
    let prepare = |id, amount| match common::prepare(id, payer, payee, amount, T0 + TTL) {
        Command::Prepare(prepare) => prepare,
        other => panic!("{other:?}"),
    };
    let reserved = match ask(&mut hub, prepare(1, 10)) {
        TransferReply::Done(view) => view,
        other => panic!("{other:?}"),
    };
    assert_eq!(reserved.state, TransferState::Reserved);
    assert!(matches!(
        ask(&mut hub, prepare(1, 10)),
        TransferReply::Duplicate(_)
    ));
    let modified = Prepare {
        request_hash: hash(99),
        ..prepare(1, 10)
    };
    assert!(matches!(ask(&mut hub, modified), TransferReply::Refused(_)));
    // Over the net debit cap: refused, and that is the transfer's state.
    assert!(matches!(
        ask(&mut hub, prepare(2, 900)),
        TransferReply::Failed { .. }
    ));
    let fulfil = match common::fulfil(1, payee.name) {
        Command::Fulfil(fulfil) => fulfil,
        other => panic!("{other:?}"),
    };
    assert!(
        matches!(ask(&mut hub, fulfil), TransferReply::Done(v) if v.state == TransferState::Committed)
    );
    let view = ask(
        &mut hub,
        GetTransfer {
            transfer_id: TransferId::new(1),
            caller: payer.name,
        },
    )
    .unwrap();
    assert_eq!(view.state, TransferState::Committed);
    let hub_name = hub.name;
    let code = refused(ask(
        &mut hub,
        GetTransfer {
            transfer_id: TransferId::new(1),
            caller: hub_name,
        },
    ));
    assert_eq!(code, ErrorCode::GENERIC_CLIENT_ERROR);
    let (_, held) = ask(
        &mut hub,
        ReadTransfer {
            transfer_id: TransferId::new(1),
        },
    )
    .unwrap();
    assert_eq!(held, Held::InMemory);
    let code = refused(ask(
        &mut hub,
        ReadTransfer {
            transfer_id: TransferId::new(9),
        },
    ));
    assert_eq!(code, ErrorCode::TRANSFER_ID_NOT_FOUND);
    prepare(3, 5);
    let Command::Abort(abort) = common::abort(3, payee.name, 5100, hash(3)) else {
        unreachable!()
    };
    assert!(
        matches!(ask(&mut hub, abort), TransferReply::Refused(_)),
        "never prepared"
    );

    let deposit = funds(TransferId::new(10), payer, whole(5), hash(10));
    assert!(matches!(
        ask(&mut hub, FundsIn(deposit)),
        TransferReply::Done(_)
    ));
    let out = funds(TransferId::new(11), payer, whole(5), hash(11));
    assert!(matches!(
        ask(&mut hub, FundsOutReserve(out)),
        TransferReply::Done(_)
    ));
    let finish = funds_finish(TransferId::new(11), payer, hash(12));
    assert!(matches!(
        ask(&mut hub, FundsOutCommit(finish.clone())),
        TransferReply::Done(_)
    ));
    assert!(matches!(
        ask(&mut hub, FundsOutAbort(finish)),
        TransferReply::Refused(_)
    ));

    let record = |hash_byte| RecordQuote {
        quote_id: TransferId::new(20),
        payer: payer.name,
        payee: payee.name,
        request_hash: hash(hash_byte),
    };
    assert_eq!(ask(&mut hub, record(1)), QuoteReply::Recorded);
    assert!(matches!(ask(&mut hub, record(1)), QuoteReply::Duplicate(_)));
    assert!(matches!(ask(&mut hub, record(2)), QuoteReply::Refused(_)));
    let answer = AnswerQuote {
        quote_id: TransferId::new(20),
        caller: payee.name,
        is_error: false,
        body: "{}".into(),
        request_hash: hash(3),
    };
    assert_eq!(ask(&mut hub, answer), QuoteReply::Recorded);
}

#[test]
fn settlement_requests_reply_in_their_types() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 500);
    let payee = hub.dfsp("payeefsp", 1000, 500);
    ask(
        &mut hub,
        CreateSettlementModel {
            name: "DEFERREDNET".into(),
            definition: "{}".into(),
            rules: Some(ModelRules {
                granularity: Granularity::Net,
                interchange: Interchange::Multilateral,
                delay: Delay::Deferred,
                currency: None,
                ledger_account_type: AccountKind::Position,
                settlement_account_type: AccountKind::Settlement,
                auto_position_reset: true,
                require_liquidity_check: false,
            }),
        },
    )
    .unwrap();
    let close = |reason: &str| CloseSettlementWindow {
        id: 1,
        reason: reason.into(),
    };
    let code = refused(ask(&mut hub, close("empty")));
    assert_eq!(code, ErrorCode::GENERIC_VALIDATION_ERROR, "nothing in it");
    view(&hub.one(common::prepare(1, payer, payee, 10, T0 + TTL)));
    view(&hub.one(common::fulfil(1, payee.name)));
    let next = ask(&mut hub, close("test")).unwrap();
    assert_eq!(next.row.id, 2);
    assert_eq!(ask(&mut hub, ReadSettlementWindows {}).unwrap().len(), 2);
    let create = |windows: Vec<u32>| CreateSettlement {
        model: "DEFERREDNET".into(),
        reason: "test".into(),
        windows,
    };
    refused(ask(&mut hub, create(vec![9])));
    let settlement = ask(&mut hub, create(vec![1])).unwrap();
    let id = settlement.row.id;
    assert_eq!(ask(&mut hub, ReadSettlements {}).unwrap().len(), 1);
    let report = ask(&mut hub, ReadSettlementReport { settlement: id }).unwrap();
    let _ = report;
    refused(ask(&mut hub, ReadSettlementReport { settlement: 99 }));
    let update = ask(
        &mut hub,
        UpdateSettlement {
            settlement: id,
            changes: vec![],
        },
    );
    let _ = update;
    let settled = ask(
        &mut hub,
        FinalizeSettlement {
            settlement: id,
            reason: "done".into(),
            external_reference: None,
        },
    )
    .unwrap();
    assert_eq!(settled.row.state, SettlementState::Settled);
    refused(ask(
        &mut hub,
        AbortSettlement {
            settlement: id,
            reason: "too late".into(),
            external_reference: None,
        },
    ));
}

#[test]
fn fx_requests_reply_in_their_types() {
    let tzs = cur("TZS");
    let mut hub = Hub::new(&[usd(), tzs]);
    let payer = hub.dfsp("payerfsp", 1000, 1000);
    let fxp = hub.dfsp("fxp", 0, 0);
    hub.dfsp_in("fxp", tzs, 1_000_000, 1_000_000);
    let conversion = |id: u128, source: i64| PrepareConversion {
        commit_request_id: TransferId::new(id),
        initiating: payer.name,
        fxp: fxp.name,
        source_amount: whole(source),
        source_currency: usd(),
        terms: ConversionTerms {
            determining_transfer_id: TransferId::new(id + 1),
            target_currency: tzs,
            target_amount: whole(1_000),
        },
        condition: secret(7).condition(),
        expiration_ms: T0 + TTL,
        request_hash: hash(id as u8),
        wire_version: 0x20,
    };
    let prepared = ask(&mut hub, conversion(0x10, 100));
    assert!(matches!(prepared, TransferReply::Done(ref v) if v.kind == TransferKind::FxConversion));
    let again = ask(&mut hub, conversion(0x10, 100));
    assert!(matches!(again, TransferReply::Duplicate(_)), "{again:?}");
    let over = ask(&mut hub, conversion(0x20, 5_000));
    assert!(matches!(over, TransferReply::Failed { .. }), "{over:?}");
    let accepted = ask(
        &mut hub,
        FulfilConversion {
            commit_request_id: TransferId::new(0x10),
            caller: fxp.name,
            fulfilment: Some(secret(7)),
            destination: None,
            request_hash: hash(0x11),
        },
    );
    assert!(matches!(accepted, TransferReply::Done(_)), "{accepted:?}");
    let foreign = ask(
        &mut hub,
        FulfilConversion {
            commit_request_id: TransferId::new(0x10),
            caller: payer.name,
            fulfilment: Some(secret(7)),
            destination: None,
            request_hash: hash(0x12),
        },
    );
    assert!(matches!(foreign, TransferReply::Refused(_)), "{foreign:?}");
    let read = ask(
        &mut hub,
        GetConversion {
            commit_request_id: TransferId::new(0x10),
            caller: payer.name,
        },
    );
    assert_eq!(read.unwrap().state, TransferState::Reserved);
    let aborted = ask(
        &mut hub,
        AbortConversion(Abort {
            transfer_id: TransferId::new(0x10),
            caller: fxp.name,
            error_code: ErrorCode(5100),
            destination: None,
            request_hash: hash(0x13),
        }),
    );
    assert!(matches!(aborted, TransferReply::Done(ref v) if v.state == TransferState::Aborted));
    let corridors = vec![Corridor {
        source: usd(),
        target: tzs,
    }];
    let name = fxp.name;
    ask(&mut hub, SetFxpCorridors { name, corridors }).unwrap();
    let fxps = ask(&mut hub, ReadFxps {}).unwrap();
    assert_eq!(fxps.len(), 1);
    let refused_code = refused(ask(
        &mut hub,
        SetFxpCorridors {
            name: fsp("nobody"),
            corridors: vec![],
        },
    ));
    assert_eq!(refused_code, ErrorCode::ID_NOT_FOUND);
}
