//! Pausing a DFSP, end to end through the real `kasi serve` binary over
//! real HTTP with real DFSP stubs: for each mode (`active`, `send-only`,
//! `receive-only`, `suspended`) exactly which new transfers, lookups,
//! quotes and party registrations the hub refuses, with which FSPIOP
//! error, to whom, and that nothing is forwarded or reserved for them; a
//! transfer prepared before a suspension still commits after it; the mode
//! is audited, counted in `/metrics`, and survives a restart on SQLite and
//! on PostgreSQL.

mod support;

use serde_json::{json, Value};
use support::*;

/// The DFSP whose mode changes; [`PAYER`] is its counterpart throughout.
const SUBJECT: &str = PAYEE;
/// A party `SUBJECT` holds, and one the counterpart holds.
const SUBJECTS_PARTY: &str = "MSISDN/255700000001";
const COUNTERPARTS_PARTY: &str = "MSISDN/255700000002";

/// Both DFSPs funded, with transfer and discovery endpoints, each holding
/// one party.
fn scenario() -> Scenario {
    let s = Scenario::new();
    let routed = [
        ("FSPIOP_CALLBACK_URL_TRX_REQ_SERVICE", ""),
        ("FSPIOP_CALLBACK_URL_BULK_QUOTES", ""),
    ];
    for stub in [&s.payer, &s.payee] {
        for (kind, path) in DISCOVERY_ENDPOINTS.iter().chain(&routed) {
            s.hub
                .add_endpoint(&stub.name, kind, &format!("{}{path}", stub.base_url()));
        }
    }
    for (stub, party) in [(&s.payee, SUBJECTS_PARTY), (&s.payer, COUNTERPARTS_PARTY)] {
        let body = format!(r#"{{"fspId":"{}","currency":"USD"}}"#, stub.name);
        let response = s.hub.api(
            "POST",
            &format!("/participants/{party}"),
            &resource_headers("participants", "1.0", &stub.name, None, true),
            body.as_bytes(),
        );
        assert_eq!(response.status, 202, "{response:?}");
        stub.expect("PUT", &format!("/participants/{party}"));
    }
    s
}

fn set_mode(hub: &Hub, name: &str, mode: &str) -> Value {
    let response = hub.admin_expect(
        "PUT",
        &format!("/participants/{name}"),
        Some(json!({ "mode": mode })),
        200,
    );
    let participant = response.json();
    assert_eq!(participant["mode"], mode, "{participant}");
    participant
}

/// The stubs as (requester, addressee) for a payment from `from` to `to`.
fn pair<'a>(s: &'a Scenario, from: &str) -> (&'a Stub, &'a Stub) {
    if from == PAYER {
        (&s.payer, &s.payee)
    } else {
        (&s.payee, &s.payer)
    }
}

/// The hub's error callback `received` carries `code`, and its words say `says`.
fn assert_error(received: &Received, code: &str, says: &str) {
    let info = &received.json()["errorInformation"];
    assert_eq!(info["errorCode"], code, "{received:?}");
    let description = info["errorDescription"].as_str().unwrap_or_default();
    assert!(
        description.contains(says),
        "{description:?} should say {says:?}"
    );
    assert_eq!(
        received.header("fspiop-source"),
        Some(HUB_NAME),
        "{received:?}"
    );
}

/// A prepare from `from` to the other: forwarded to it when `allowed`,
/// else refused to `from` with 3100 and neither forwarded nor reserved.
/// The id of a forwarded one.
fn transfer(s: &Scenario, from: &str, allowed: bool, refused_says: &str) -> Option<String> {
    let (requester, addressee) = pair(s, from);
    let id = new_id();
    let body = prepare_body(&id, from, &addressee.name, "10", far_future());
    let position = s.hub.position(from);
    assert_eq!(s.hub.prepare(from, &addressee.name, &body).status, 202);
    if allowed {
        let forwarded = addressee.expect("POST", "/transfers");
        assert_eq!(forwarded.text(), body);
        return Some(id);
    }
    let error = requester.expect("PUT", &format!("/transfers/{id}/error"));
    assert_hub_error_callback(&error, from, "3100");
    assert_error(&error, "3100", refused_says);
    addressee.assert_quiet(QUIET_WAIT);
    assert_eq!(s.hub.position(from), position, "a refusal reserves nothing");
    None
}

/// `GET /parties/{party}` from `from` (the other holds the party): asked
/// of the holder when `allowed`, else the hub's error to `from`.
fn lookup(s: &Scenario, from: &str, allowed: bool, refused: (&str, &str)) {
    lookup_with(s, from, "", allowed, refused)
}

/// [`lookup`] with `query` (`""` or `?currency=…`) on both lookups.
fn lookup_with(s: &Scenario, from: &str, query: &str, allowed: bool, refused: (&str, &str)) {
    let (requester, holder) = pair(s, from);
    let party = if from == PAYER {
        SUBJECTS_PARTY
    } else {
        COUNTERPARTS_PARTY
    };
    let headers = resource_headers("parties", "1.0", from, None, true);
    let response = s
        .hub
        .api("GET", &format!("/parties/{party}{query}"), &headers, b"");
    assert_eq!(response.status, 202, "{response:?}");
    if allowed {
        holder.expect("GET", &format!("/parties/{party}"));
    } else {
        let error = requester.expect("PUT", &format!("/parties/{party}/error"));
        assert_error(&error, refused.0, refused.1);
        holder.assert_quiet(QUIET_WAIT);
    }
    // The registry answers the same way: who holds the party, or why not.
    let headers = resource_headers("participants", "1.0", from, None, true);
    let response = s.hub.api(
        "GET",
        &format!("/participants/{party}{query}"),
        &headers,
        b"",
    );
    assert_eq!(response.status, 202, "{response:?}");
    let answer = requester.next(&format!("the answer about {party}"));
    if allowed {
        assert_eq!(answer.path, format!("/participants/{party}"), "{answer:?}");
        assert_eq!(answer.json(), json!({"fspId": holder.name}));
    } else {
        assert_eq!(
            answer.path,
            format!("/participants/{party}/error"),
            "{answer:?}"
        );
        assert_error(&answer, refused.0, refused.1);
    }
}

/// `POST /quotes` from `from` to the other: forwarded when `allowed`, else
/// the hub's `PUT /quotes/{ID}/error` to `from`.
fn quote(s: &Scenario, from: &str, allowed: bool, refused: (&str, &str)) {
    quote_in(s, from, "USD", allowed, refused)
}

/// [`quote`] of an amount in `currency`.
fn quote_in(s: &Scenario, from: &str, currency: &str, allowed: bool, refused: (&str, &str)) {
    let (requester, addressee) = pair(s, from);
    let id = new_id();
    let body = format!(
        r#"{{"quoteId":"{id}","transactionId":"{}","payee":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"1","fspId":"{to}"}}}},"payer":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"2","fspId":"{from}"}}}},"amountType":"SEND","amount":{{"currency":"{currency}","amount":"10"}},"transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}"#,
        new_id(),
        to = addressee.name,
    );
    let headers = resource_headers("quotes", "1.0", from, Some(&addressee.name), true);
    let response = s.hub.api("POST", "/quotes", &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    if allowed {
        let forwarded = addressee.expect("POST", "/quotes");
        assert_eq!(forwarded.text(), body);
    } else {
        let error = requester.expect("PUT", &format!("/quotes/{id}/error"));
        assert_error(&error, refused.0, refused.1);
        addressee.assert_quiet(QUIET_WAIT);
    }
}

/// `POST /{resource}` of `body` from `from` to the other DFSP: forwarded
/// unless `refused`, else the hub's `PUT /{resource}/{ID}/error` to `from`
/// with that code, saying that.
fn routed(
    s: &Scenario,
    resource: &str,
    from: &str,
    body: fn(&str) -> String,
    refused: Option<(&str, &str)>,
) {
    let (requester, addressee) = pair(s, from);
    let id = new_id();
    let body = body(&id);
    let headers = resource_headers(resource, "1.1", from, Some(&addressee.name), true);
    let response = s
        .hub
        .api("POST", &format!("/{resource}"), &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    match refused {
        None => {
            let forwarded = addressee.expect("POST", &format!("/{resource}"));
            assert_eq!(forwarded.text(), body);
        }
        Some((code, says)) => {
            let error = requester.expect("PUT", &format!("/{resource}/{id}/error"));
            assert_error(&error, code, says);
            addressee.assert_quiet(QUIET_WAIT);
        }
    }
}

#[test]
fn each_mode_refuses_exactly_what_it_forbids_and_a_transfer_in_flight_still_commits() {
    let s = scenario();
    // (mode, SUBJECT may be paid, SUBJECT may pay)
    let modes = [
        ("active", true, true),
        ("send-only", false, true),
        ("receive-only", true, false),
        ("suspended", false, false),
    ];
    let mut refused_payee = 0;
    let mut refused_payer = 0;
    let mut in_flight = None;
    for (mode, may_be_paid, may_pay) in modes {
        if mode == "suspended" {
            // Prepared while SUBJECT may still be paid: it must commit
            // after the suspension.
            in_flight = transfer(&s, PAYER, true, "");
        }
        set_mode(&s.hub, SUBJECT, mode);
        s.hub.await_metric_line(&format!(
            "kasi_participant_mode{{participant=\"{SUBJECT}\",mode=\"{mode}\"}} 1"
        ));
        // central-ledger's words for a suspended participant, kasi's for
        // the two modes between.
        let (not_paid, not_paying) = match mode {
            "suspended" => (
                format!("Participant {SUBJECT} is inactive"),
                format!("Participant {SUBJECT} is inactive"),
            ),
            _ => (
                format!("Participant {SUBJECT} is {mode}: it may not receive"),
                format!("Participant {SUBJECT} is {mode}: it may not send"),
            ),
        };
        let unsupported = format!("Unsupported participant '{SUBJECT}'");
        // Paid by the counterpart; paying it.
        transfer(&s, PAYER, may_be_paid, &not_paid);
        transfer(&s, SUBJECT, may_pay, &not_paying);
        // Lookups and quotes: quoting-service's 3201 for an addressee that
        // may not be paid, 3202 for a requester that may not pay.
        lookup(&s, PAYER, may_be_paid, ("3201", &unsupported));
        lookup(&s, SUBJECT, may_pay, ("3202", &unsupported));
        quote(&s, PAYER, may_be_paid, ("3201", &unsupported));
        quote(&s, SUBJECT, may_pay, ("3202", &unsupported));
        // Each refusal counted, by reason, under the DFSP that asked.
        refused_payee += if may_be_paid { 0 } else { 4 };
        refused_payer += if may_pay { 0 } else { 4 };
        s.hub
            .await_refusals("payee_may_not_receive", Some(PAYER), refused_payee);
        s.hub
            .await_refusals("payer_may_not_send", Some(SUBJECT), refused_payer);
        assert_eq!(s.hub.refusals("payee_may_not_receive", None), refused_payee);
        assert_eq!(s.hub.refusals("payer_may_not_send", None), refused_payer);
    }
    assert!(
        s.hub.log().contains("payment refused"),
        "a refusal is logged"
    );
    let metrics = s.hub.admin("GET", "/metrics", None).text();
    assert!(
        !metrics.contains(&format!(
            "kasi_participant_mode{{participant=\"{HUB_NAME}\""
        )),
        "the hub itself has no mode to show"
    );

    // Suspended now, yet the transfer prepared before completes: the
    // payee's fulfil commits it and both positions move.
    let id = in_flight.expect("prepared before the suspension");
    let before = (s.hub.position(PAYER), s.hub.position(SUBJECT));
    s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    s.payer.expect("PUT", &format!("/transfers/{id}"));
    s.payee.expect("PUT", &format!("/transfers/{id}"));
    let state = s.hub.get_transfer(&id, PAYER, SUBJECT);
    assert_eq!(state.status, 202, "{state:?}");
    assert_eq!(
        s.payer.expect("PUT", &format!("/transfers/{id}")).json()["transferState"],
        "COMMITTED"
    );
    // The reservation (already in the payer's position) is now posted;
    // the payee is credited.
    assert_eq!(s.hub.position(PAYER), before.0);
    assert_eq!(s.hub.position(SUBJECT), before.1 - 10.0);

    // isActive keeps central-ledger's meaning: 0 only when suspended.
    let participant = s
        .hub
        .admin("GET", &format!("/participants/{SUBJECT}"), None)
        .json();
    assert_eq!(participant["isActive"], 0, "{participant}");
    assert_eq!(participant["mode"], "suspended");
    let participant = set_mode(&s.hub, SUBJECT, "send-only");
    assert_eq!(participant["isActive"], 1, "{participant}");

    // Every change audited, before and after.
    let events = s
        .hub
        .admin("GET", "/audit-events?participant=payeefsp", None)
        .json();
    let changes: Vec<(Value, Value)> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "participant.mode")
        .map(|e| (e["before"]["mode"].clone(), e["after"]["mode"].clone()))
        .collect();
    // Newest first.
    assert_eq!(
        changes,
        [
            (json!("suspended"), json!("send-only")),
            (json!("receive-only"), json!("suspended")),
            (json!("send-only"), json!("receive-only")),
            (json!("active"), json!("send-only")),
            (json!("active"), json!("active")),
        ],
        "{events:#}"
    );
}

#[test]
fn central_ledgers_is_active_and_a_disabled_account_pause_as_before_and_a_mode_survives_a_restart()
{
    let mut s = scenario();
    // isActive false is `suspended`, true `active`.
    s.hub.admin_expect(
        "PUT",
        &format!("/participants/{SUBJECT}"),
        Some(json!({"isActive": false})),
        200,
    );
    let participant = s
        .hub
        .admin("GET", &format!("/participants/{SUBJECT}"), None)
        .json();
    assert_eq!(
        (participant["isActive"].clone(), participant["mode"].clone()),
        (json!(0), json!("suspended"))
    );
    transfer(
        &s,
        PAYER,
        false,
        &format!("Participant {SUBJECT} is inactive"),
    );
    s.hub.admin_expect(
        "PUT",
        &format!("/participants/{SUBJECT}"),
        Some(json!({"isActive": 1})),
        200,
    );
    transfer(&s, PAYER, true, "").expect("forwarded");

    // A disabled currency account: 3100 in central-ledger's words, counted.
    let account = s.hub.account_id(SUBJECT, "POSITION");
    let path = format!("/participants/{SUBJECT}/accounts/{account}");
    s.hub
        .admin_expect("PUT", &path, Some(json!({"isActive": false})), 200);
    transfer(
        &s,
        PAYER,
        false,
        &format!("Participant {SUBJECT} USD account is inactive"),
    );
    s.hub.await_refusals("account_inactive", Some(PAYER), 1);
    s.hub
        .admin_expect("PUT", &path, Some(json!({"isActive": true})), 200);

    // A mode the API does not know, or both fields at once: refused.
    for body in [
        json!({"mode": "paused"}),
        json!({"mode": "active", "isActive": true}),
    ] {
        let response = s
            .hub
            .admin("PUT", &format!("/participants/{SUBJECT}"), Some(&body));
        assert_error_response(&response, 400, "3100");
    }

    // Durable: after a restart SUBJECT is still receive-only.
    set_mode(&s.hub, SUBJECT, "receive-only");
    s.hub.terminate();
    s.hub = Hub::start(&s.dir.path().join("data"));
    let participant = s
        .hub
        .admin("GET", &format!("/participants/{SUBJECT}"), None)
        .json();
    assert_eq!(participant["mode"], "receive-only", "{participant}");
    s.hub.await_metric_line(&format!(
        "kasi_participant_mode{{participant=\"{SUBJECT}\",mode=\"receive-only\"}} 1"
    ));
    transfer(
        &s,
        SUBJECT,
        false,
        &format!("Participant {SUBJECT} is receive-only: it may not send"),
    );
    quote(&s, SUBJECT, false, ("3202", "Unsupported participant"));
    transfer(&s, PAYER, true, "").expect("forwarded");
}

/// A registered party is found to be paid: a DFSP that may not receive
/// (send-only, suspended) registers none, alone or in a batch — 3201 as a
/// lookup of its parties is answered, counted under it — so nobody finds
/// it; receive-only, it registers again.
#[test]
fn a_dfsp_that_may_not_receive_registers_no_party() {
    let s = scenario();
    let (single, listed) = ("255700000009", "255700000010");
    let headers = resource_headers("participants", "1.0", SUBJECT, None, true);
    let register = || {
        let path = format!("/participants/MSISDN/{single}");
        let body = format!(r#"{{"fspId":"{SUBJECT}","currency":"USD"}}"#);
        let response = s.hub.api("POST", &path, &headers, body.as_bytes());
        assert_eq!(response.status, 202, "{response:?}");
        s.payee.next("the registration's answer")
    };
    let register_batch = || {
        let request_id = new_id();
        let body = json!({
            "requestId": request_id,
            "partyList": [{"partyIdType": "MSISDN", "partyIdentifier": listed, "fspId": SUBJECT}],
            "currency": "USD",
        });
        let body = serde_json::to_vec(&body).unwrap();
        let response = s.hub.api("POST", "/participants", &headers, &body);
        assert_eq!(response.status, 202, "{response:?}");
        let answer = s
            .payee
            .expect("PUT", &format!("/participants/{request_id}"));
        answer.json()["partyList"][0].clone()
    };
    // Who the counterpart finds holding `identifier`: the answer's path
    // and body.
    let holder = |identifier: &str| {
        let path = format!("/participants/MSISDN/{identifier}");
        let headers = resource_headers("participants", "1.0", PAYER, None, true);
        let response = s.hub.api("GET", &path, &headers, b"");
        assert_eq!(response.status, 202, "{response:?}");
        let answer = s.payer.next(&format!("the answer about {identifier}"));
        (answer.path.clone(), answer.json())
    };
    let mut refused = 0;
    for mode in ["send-only", "suspended"] {
        set_mode(&s.hub, SUBJECT, mode);
        let says = format!("Unsupported participant '{SUBJECT}': it is {mode} and may not receive");
        let answer = register();
        assert_eq!(
            answer.path,
            format!("/participants/MSISDN/{single}/error"),
            "{answer:?}"
        );
        assert_error(&answer, "3201", &says);
        let item = register_batch();
        assert_eq!(item["errorInformation"]["errorCode"], "3201", "{item}");
        let description = item["errorInformation"]["errorDescription"].to_string();
        assert!(description.contains(&says), "{description}");
        refused += 2;
        s.hub
            .await_refusals("payee_may_not_receive", Some(SUBJECT), refused);
    }
    assert!(s.hub.log().contains("payment refused"), "logged");
    // Nothing was registered: active again, its parties are not found.
    set_mode(&s.hub, SUBJECT, "active");
    for identifier in [single, listed] {
        let (path, answer) = holder(identifier);
        assert_eq!(path, format!("/participants/MSISDN/{identifier}/error"));
        assert_eq!(answer["errorInformation"]["errorCode"], "3200", "{answer}");
    }
    // Receive-only, it may be paid: it registers, and is found.
    set_mode(&s.hub, SUBJECT, "receive-only");
    let answer = register();
    assert_eq!(answer.path, format!("/participants/MSISDN/{single}"));
    assert_eq!(answer.json(), json!({"fspId": SUBJECT}));
    let item = register_batch();
    assert!(item.get("errorInformation").is_none(), "{item}");
    for identifier in [single, listed] {
        let (path, answer) = holder(identifier);
        assert_eq!(path, format!("/participants/MSISDN/{identifier}"));
        assert_eq!(answer, json!({"fspId": SUBJECT}));
    }
    assert_eq!(
        s.hub.refusals("payee_may_not_receive", Some(SUBJECT)),
        refused,
        "a registration allowed is not counted"
    );
}

/// A request to pay is a payment the addressee would make to the
/// requester; a bulk quote one the requester would make, as a quote.
#[test]
fn requests_to_pay_and_bulk_quotes_follow_the_same_rule() {
    let s = scenario();
    // SUBJECT asks PAYER to pay it; PAYER asks SUBJECT for a bulk quote.
    let request_to_pay = |refused| {
        routed(
            &s,
            "transactionRequests",
            SUBJECT,
            transaction_request_body,
            refused,
        )
    };
    let bulk_quote = |refused| routed(&s, "bulkQuotes", PAYER, bulk_quote_body, refused);
    let payee_refused = format!("Unsupported participant '{SUBJECT}'");
    let payer_refused = format!("Unsupported participant '{PAYER}'");

    // SUBJECT send-only: it may not ask to be paid, nor be quoted as payee.
    set_mode(&s.hub, SUBJECT, "send-only");
    request_to_pay(Some(("3201", &payee_refused)));
    bulk_quote(Some(("3201", &payee_refused)));
    s.hub
        .await_refusals("payee_may_not_receive", Some(SUBJECT), 1);
    s.hub
        .await_refusals("payee_may_not_receive", Some(PAYER), 1);
    // SUBJECT receive-only: both go through.
    set_mode(&s.hub, SUBJECT, "receive-only");
    request_to_pay(None);
    bulk_quote(None);
    // The payer asked to pay may not: 3202, counted under who asked.
    set_mode(&s.hub, PAYER, "receive-only");
    request_to_pay(Some(("3202", &payer_refused)));
    s.hub.await_refusals("payer_may_not_send", Some(SUBJECT), 1);
}

/// A disabled currency account (`PUT /participants/{name}/accounts/{id}`
/// `isActive: false`) pauses lookups, quotes, bulk quotes, requests to pay
/// and party registrations in its
/// currency as it pauses prepares: its holder is neither asked nor found
/// — 3201 as an addressee, 3202 as a requester, naming the currency,
/// counted as `account_inactive` under who asked — while another currency
/// and a lookup naming none go through; enabled again, its currency does.
/// Loaded again after a restart.
#[test]
fn a_disabled_currency_account_pauses_lookups_quotes_and_requests_to_pay_in_its_currency() {
    let mut s = scenario();
    for kind in ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"] {
        s.hub.admin_expect(
            "POST",
            "/participants/Hub/accounts",
            Some(json!({"type": kind, "currency": "EUR"})),
            201,
        );
    }
    for name in [PAYER, SUBJECT] {
        s.hub.add_currency(name, "EUR", 10_000, 0);
    }
    let eur_request_to_pay: fn(&str) -> String =
        |id| transaction_request_body(id).replace(r#""currency":"USD""#, r#""currency":"EUR""#);
    let eur_bulk_quote: fn(&str) -> String =
        |id| bulk_quote_body(id).replace(r#""currency":"USD""#, r#""currency":"EUR""#);
    // An individual quote in EUR, then one in USD: any of its currencies
    // paused pauses the bulk quote.
    let mixed_bulk_quote: fn(&str) -> String = |id| {
        let mut body: Value = serde_json::from_str(&bulk_quote_body(id)).unwrap();
        let mut in_eur = body["individualQuotes"][0].clone();
        in_eur["quoteId"] = json!(new_id());
        in_eur["transactionId"] = json!(new_id());
        in_eur["amount"]["currency"] = json!("EUR");
        body["individualQuotes"]
            .as_array_mut()
            .unwrap()
            .insert(0, in_eur);
        body.to_string()
    };
    let says = format!("Unsupported participant '{SUBJECT}': its USD account is inactive");
    let as_payee = ("3201", says.as_str());
    let as_payer = ("3202", says.as_str());
    let allowed = ("", "");
    // Everything in USD, before and after: both ways.
    let all_in_usd_and_eur = |s: &Scenario, usd_allowed: bool| {
        let refusals = s.hub.refusals("account_inactive", None);
        quote_in(s, PAYER, "USD", usd_allowed, as_payee);
        quote_in(s, SUBJECT, "USD", usd_allowed, as_payer);
        lookup_with(s, PAYER, "?currency=USD", usd_allowed, as_payee);
        lookup_with(s, SUBJECT, "?currency=USD", usd_allowed, as_payer);
        // SUBJECT asks PAYER to pay it in USD: SUBJECT is the payee.
        routed(
            s,
            "transactionRequests",
            SUBJECT,
            transaction_request_body,
            (!usd_allowed).then_some(as_payee),
        );
        // PAYER asks SUBJECT for a bulk quote with a quote in USD.
        routed(
            s,
            "bulkQuotes",
            PAYER,
            mixed_bulk_quote,
            (!usd_allowed).then_some(as_payee),
        );
        // Another currency, and a lookup naming none, are not paused.
        quote_in(s, PAYER, "EUR", true, allowed);
        quote_in(s, SUBJECT, "EUR", true, allowed);
        lookup_with(s, PAYER, "?currency=EUR", true, allowed);
        lookup(s, SUBJECT, true, allowed);
        routed(s, "transactionRequests", SUBJECT, eur_request_to_pay, None);
        routed(s, "bulkQuotes", PAYER, eur_bulk_quote, None);
        if !usd_allowed {
            // quote, 2 lookups (/parties and /participants), request to
            // pay, bulk quote under PAYER and SUBJECT: 1 + 2 + 0 + 1 and
            // 1 + 2 + 1 + 0.
            s.hub.await_refusals("account_inactive", Some(PAYER), 4);
            s.hub.await_refusals("account_inactive", Some(SUBJECT), 4);
            assert!(s
                .hub
                .log()
                .contains("a currency account it needs is disabled"));
        } else {
            assert_eq!(
                s.hub.refusals("account_inactive", None),
                refusals,
                "nothing allowed is counted"
            );
        }
    };
    all_in_usd_and_eur(&s, true);

    s.hub.set_position_active(SUBJECT, "USD", false);
    all_in_usd_and_eur(&s, false);
    {
        // SUBJECT registers no party in USD (it would be found to be paid
        // in USD, and refused then), and one in EUR.
        let headers = resource_headers("participants", "1.0", SUBJECT, None, true);
        let register_in = |identifier: &str, currency: &str| {
            let path = format!("/participants/MSISDN/{identifier}");
            let body = format!(r#"{{"fspId":"{SUBJECT}","currency":"{currency}"}}"#);
            let response = s.hub.api("POST", &path, &headers, body.as_bytes());
            assert_eq!(response.status, 202, "{response:?}");
            s.payee.next("the registration's answer")
        };
        let refused = s.hub.refusals("account_inactive", Some(SUBJECT));
        let answer = register_in("255700000021", "USD");
        assert_eq!(
            answer.path, "/participants/MSISDN/255700000021/error",
            "{answer:?}"
        );
        assert_error(&answer, "3201", &says);
        s.hub
            .await_refusals("account_inactive", Some(SUBJECT), refused + 1);
        let answer = register_in("255700000022", "EUR");
        assert_eq!(
            answer.path, "/participants/MSISDN/255700000022",
            "{answer:?}"
        );
    }
    // The mode is unchanged: only the account is paused.
    let participant = s
        .hub
        .admin("GET", &format!("/participants/{SUBJECT}"), None)
        .json();
    assert_eq!(participant["mode"], "active", "{participant}");
    let audited = format!("/audit-events?participant={SUBJECT}&action=account.deactivate");
    let events = s.hub.admin_expect("GET", &audited, None, 200).json();
    assert_eq!(
        events.as_array().map(Vec::len),
        Some(1),
        "the change is audited: {events:#}"
    );

    // Loaded at start: still paused after a restart.
    s.hub.terminate();
    s.hub = Hub::start(&s.dir.path().join("data"));
    quote_in(&s, PAYER, "USD", false, as_payee);
    quote_in(&s, PAYER, "EUR", true, allowed);

    // Enabled again: its currency goes through.
    s.hub.set_position_active(SUBJECT, "USD", true);
    let counted = s.hub.refusals("account_inactive", None);
    quote_in(&s, PAYER, "USD", true, allowed);
    quote_in(&s, SUBJECT, "USD", true, allowed);
    lookup_with(&s, PAYER, "?currency=USD", true, allowed);
    routed(
        &s,
        "transactionRequests",
        SUBJECT,
        transaction_request_body,
        None,
    );
    assert_eq!(s.hub.refusals("account_inactive", None), counted);
}

/// Durable on PostgreSQL too: the mode is a column of the participant's
/// row, read back by the next hub.
#[test]
fn a_mode_survives_a_restart_on_postgresql() {
    let cluster = testpg::Cluster::start();
    let url = cluster.create_database("hub");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let command = || Hub::postgres_command(&data, &url, "solo", 120_000, &[]);
    let mut s = Scenario::on(Hub::spawn(command(), &data), dir, 10_000, 5_000);
    set_mode(&s.hub, SUBJECT, "send-only");
    set_mode(&s.hub, PAYER, "receive-only");
    s.hub.terminate();
    s.hub = Hub::spawn(command(), &data);
    for (name, mode) in [(SUBJECT, "send-only"), (PAYER, "receive-only")] {
        let participant = s
            .hub
            .admin("GET", &format!("/participants/{name}"), None)
            .json();
        assert_eq!(participant["mode"], mode, "{participant}");
    }
    transfer(
        &s,
        PAYER,
        false,
        &format!("Participant {PAYER} is receive-only: it may not send"),
    );
    transfer(&s, SUBJECT, true, "").expect("forwarded");
}
