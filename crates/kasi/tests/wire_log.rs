//! The wire log end to end, with the real binary: a transfer's messages —
//! the prepare and the fulfil as the DFSPs sent them, each callback as the
//! hub sent it — read back through `GET /transfers/{id}/messages` and the
//! console's transfer page, byte for byte, credentials redacted; a DFSP's
//! person reads only its own transfers' messages; `--wire-log off` keeps
//! nothing.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// Waits until the transfer's messages include `count` of them (the wire
/// log is written off the request path, so not at once).
fn messages(hub: &Hub, token: Option<&str>, id: &str, count: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = hub.admin_as(token, "GET", &format!("/transfers/{id}/messages"), None);
        assert_eq!(response.status, 200, "{response:?}");
        let body = response.json();
        if body["messages"].as_array().unwrap().len() >= count {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{count} messages never came: {body:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn header<'a>(message: &'a Value, name: &str) -> Vec<&'a str> {
    message["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|pair| pair[0].as_str().unwrap().eq_ignore_ascii_case(name))
        .map(|pair| pair[1].as_str().unwrap())
        .collect()
}

fn find<'a>(all: &'a Value, direction: &str, method: &str, peer: &str) -> &'a Value {
    all["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["direction"] == direction && m["method"] == method && m["peer"] == peer)
        .unwrap_or_else(|| panic!("no {direction} {method} with {peer}: {all:#}"))
}

/// A hub whose tokens file holds an operator (the scenario's), a person of
/// the payer and one of a third DFSP that takes no part.
fn start(extra: &[&str]) -> (Scenario, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let (operator, operator_line) = admin_token("alice", "operator");
    let (payer_person, payer_line) = admin_token("payer-ops", "dfsp:payerfsp");
    let (third_person, third_line) = admin_token("third-ops", "dfsp:thirdfsp");
    let file = dir.path().join("admin-tokens");
    std::fs::write(
        &file,
        format!("{operator_line}\n{payer_line}\n{third_line}\n"),
    )
    .unwrap();
    let mut flags = vec![
        "--admin-tokens",
        file.to_str().unwrap(),
        "--four-eyes",
        "none",
    ];
    flags.extend_from_slice(extra);
    let mut hub = Hub::start_with(&dir.path().join("data"), &flags);
    hub.admin_bearer = Some(operator);
    (
        Scenario::on(hub, dir, 10_000, 5_000),
        payer_person,
        third_person,
    )
}

/// The quote a Mojaloop-built ILP packet names, asked by the payer and
/// answered by the payee (kept: `--quotes-persistent`); the packet.
fn quoted(s: &Scenario) -> (String, String) {
    for (name, stub) in [(PAYER, &s.payer), (PAYEE, &s.payee)] {
        s.hub
            .add_endpoint(name, "FSPIOP_CALLBACK_URL_QUOTES", &stub.base_url());
    }
    let packet = ilp_packet("v4_prepare_no_sub_ids");
    let transaction = fspiop::ilp::transaction_json(&packet).unwrap();
    let quote_id = transaction["quoteId"].as_str().unwrap().to_string();
    let quote = format!(
        r#"{{"quoteId":"{quote_id}","transactionId":"{}","payee":{{"partyIdInfo":{{"partyIdType":"EMAIL","partyIdentifier":"awa.diop@example.org","fspId":"{PAYEE}"}}}},"payer":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"22507008181","fspId":"{PAYER}"}}}},"amountType":"SEND","amount":{{"currency":"USD","amount":"12.5"}},"transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}"#,
        transaction["transactionId"].as_str().unwrap()
    );
    let headers = resource_headers("quotes", "1.0", PAYER, Some(PAYEE), true);
    let asked = s.hub.api("POST", "/quotes", &headers, quote.as_bytes());
    assert_eq!(asked.status, 202, "{asked:?}");
    s.payee.expect("POST", "/quotes");
    let answer = format!(
        r#"{{"transferAmount":{{"currency":"USD","amount":"12.5"}},"expiration":"{}","ilpPacket":"{packet}","condition":"{CONDITION}"}}"#,
        fspiop_time(far_future())
    );
    let headers = resource_headers("quotes", "1.0", PAYEE, Some(PAYER), false);
    let path = format!("/quotes/{quote_id}");
    let answered = s.hub.api("PUT", &path, &headers, answer.as_bytes());
    assert_eq!(answered.status, 200, "{answered:?}");
    s.payer.expect("PUT", &path);
    (quote_id, packet)
}

#[test]
fn a_transfers_messages_read_back_as_they_crossed_the_hub() {
    let (s, payer_person, third_person) = start(&["--quotes-persistent"]);
    let third = Stub::start("thirdfsp");
    s.hub.onboard("thirdfsp", &third.base_url(), 1_000, 1_000);
    let (quote_id, packet) = quoted(&s);

    let id = new_id();
    let prepare =
        prepare_body(&id, PAYER, PAYEE, "12.5", far_future()).replace(ILP_PACKET, &packet);
    // A gateway's credential the DFSP sends along: never kept.
    let headers = with_header(
        fspiop_headers(PAYER, PAYEE, true),
        "Authorization",
        "Bearer gateway-secret-1234",
    );
    let response = s
        .hub
        .api("POST", "/transfers", &headers, prepare.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    let forwarded = s.payee.expect("POST", "/transfers");
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    assert_eq!(s.hub.fulfil(&id, PAYEE, PAYER, &fulfil).status, 200);
    let notified = s.payer.expect("PUT", &format!("/transfers/{id}"));
    let confirmed = s.payee.expect("PUT", &format!("/transfers/{id}"));

    // In: the prepare and the fulfil. Out: the prepare to the payee, the
    // commit to the payer, the confirmation to the payee.
    let all = messages(&s.hub, s.hub.admin_bearer.as_deref(), &id, 5);
    assert_eq!(all["transferId"], id.as_str());
    assert_eq!(all["complete"], true, "{all:#}");

    // The transaction the packet carries, and the quote it was agreed in.
    assert_eq!(
        all["transaction"]["payer"]["partyIdInfo"]["partyIdentifier"], "22507008181",
        "{all:#}"
    );
    assert_eq!(all["transaction"]["quoteId"], quote_id.as_str());
    assert_eq!(all["quote"]["quoteId"], quote_id.as_str(), "{all:#}");
    assert_eq!(all["quote"]["answerIsError"], false);
    assert_eq!(all["quote"]["answer"]["transferAmount"]["amount"], "12.5");

    let asked = find(&all, "in", "POST", PAYER);
    assert_eq!(asked["target"], "/transfers");
    assert_eq!(asked["status"], 202);
    assert_eq!(asked["body"], prepare.as_str(), "the prepare byte for byte");
    assert_eq!(header(asked, "authorization"), ["[redacted]"]);
    assert_eq!(header(asked, "fspiop-destination"), [PAYEE]);

    let passed_on = find(&all, "out", "POST", PAYEE);
    assert_eq!(passed_on["status"], 200);
    assert_eq!(passed_on["attempt"], 1);
    assert!(passed_on["target"]
        .as_str()
        .unwrap()
        .ends_with("/transfers"));
    assert_eq!(
        passed_on["body"].as_str().unwrap().as_bytes(),
        forwarded.body.as_slice()
    );
    assert!(
        header(passed_on, "authorization").is_empty(),
        "not passed on"
    );

    let fulfilled = find(&all, "in", "PUT", PAYEE);
    assert_eq!(fulfilled["target"], format!("/transfers/{id}"));
    assert_eq!(fulfilled["status"], 200);
    assert_eq!(fulfilled["body"], fulfil.as_str());

    let told_payer = find(&all, "out", "PUT", PAYER);
    assert_eq!(
        told_payer["body"].as_str().unwrap().as_bytes(),
        notified.body.as_slice()
    );
    let told_payee = find(&all, "out", "PUT", PAYEE);
    assert_eq!(
        told_payee["body"].as_str().unwrap().as_bytes(),
        confirmed.body.as_slice()
    );

    // In the order they crossed: the prepare first, the fulfil after the
    // prepare went on.
    let order: Vec<(String, String)> = all["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["direction"].as_str().unwrap().into(),
                m["method"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(order[0], ("in".into(), "POST".into()), "{order:?}");

    // The payer's person reads them; a DFSP with no part in it does not.
    let theirs = messages(&s.hub, Some(&payer_person), &id, 5);
    assert_eq!(theirs["messages"], all["messages"]);
    let refused = s.hub.admin_as(
        Some(&third_person),
        "GET",
        &format!("/transfers/{id}/messages"),
        None,
    );
    assert_eq!(refused.status, 404, "{refused:?}");
    // Nobody without a credential.
    let anonymous = s
        .hub
        .admin_as(None, "GET", &format!("/transfers/{id}/messages"), None);
    assert_eq!(anonymous.status, 401, "{anonymous:?}");

    // An id the hub never saw, and one that is no id.
    let unknown = s
        .hub
        .admin("GET", &format!("/transfers/{}/messages", new_id()), None);
    assert_eq!(unknown.status, 404, "{unknown:?}");
    let malformed = s.hub.admin("GET", "/transfers/not-an-id/messages", None);
    assert_error_response(&malformed, 400, "3101");

    // Counted, and the credential reached no file.
    s.hub.await_metrics("messages written", |text| {
        let line = text
            .lines()
            .find(|l| l.starts_with("kasi_wire_log_written_total "))?;
        let written: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        (written >= 5).then_some(())
    });
    let wire = s.dir.path().join("data").join("wire");
    let mut files = 0;
    for entry in std::fs::read_dir(&wire).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        files += 1;
        assert!(!bytes.windows(11).any(|w| w == b"gateway-sec"));
    }
    assert!(files > 0, "no file in {}", wire.display());

    // The console's transfer page shows them.
    let cookie = s
        .hub
        .console_session(s.hub.admin_bearer.as_deref().unwrap());
    let page = http(
        s.hub.admin,
        "GET",
        &format!("/console/transfers?id={id}"),
        &[("Cookie".to_string(), cookie)],
        b"",
    );
    assert_eq!(page.status, 200, "{page:?}");
    let html = page.text();
    assert!(html.contains("Messages"), "{html}");
    assert!(
        html.contains("&quot;transferId&quot;") || html.contains("\"transferId\""),
        "{html}"
    );
    assert!(html.contains("[redacted]"), "{html}");
    assert!(
        html.contains("MSISDN 22507008181 at dfspa (Mats Hagman)"),
        "{html}"
    );
    assert!(html.contains("Loyer de novembre"), "{html}");
    assert!(html.contains(&quote_id), "{html}");
}

#[test]
fn with_the_wire_log_off_nothing_is_kept() {
    let (s, _, _) = start(&["--wire-log", "off"]);
    let (id, _) = s.reserve("1", far_future());
    let answer = s
        .hub
        .admin("GET", &format!("/transfers/{id}/messages"), None);
    assert_eq!(answer.status, 200, "{answer:?}");
    let body = answer.json();
    assert_eq!(body["enabled"], false);
    assert_eq!(body["messages"].as_array().unwrap().len(), 0);
    assert!(!s.dir.path().join("data").join("wire").exists());
}
