//! FSPIOP v2.0 FX quotes through the real `kasi serve` binary against real
//! DFSP stubs: a payer DFSP asks an FXP for a conversion's terms, routed
//! as quoting-service routes them — the sender's bytes and FSPIOP headers
//! to the destination's `FSPIOP_CALLBACK_URL_FX_QUOTES` base URL, only the
//! FXP asked answers, only to the payer, 3201 from the hub when the FXP
//! has no FX endpoint — and, with `--quotes-persistent`, the duplicate
//! rules of quotes.

mod support;

use support::*;

const FXP: &str = "fxp";
const MALLORY: &str = "mallory";
/// A participant without an FX quotes endpoint.
const PLAIN: &str = "plainfsp";
const FX_QUOTES_ENDPOINT: &str = "FSPIOP_CALLBACK_URL_FX_QUOTES";

/// A payer, an FXP and mallory, each with an FX quotes endpoint at its
/// stub's base URL, and a participant without one.
struct Fx {
    hub: Hub,
    payer: Stub,
    fxp: Stub,
    mallory: Stub,
    plain: Stub,
    dir: tempfile::TempDir,
}

impl Fx {
    fn new(flags: &[&str]) -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::start_with(&dir.path().join("data"), flags);
        hub.setup();
        let payer = Stub::start(PAYER);
        let fxp = Stub::start(FXP);
        let mallory = Stub::start(MALLORY);
        let plain = Stub::start(PLAIN);
        for stub in [&payer, &fxp, &mallory, &plain] {
            hub.onboard(&stub.name, &stub.base_url(), 10_000, 0);
        }
        for stub in [&payer, &fxp, &mallory] {
            hub.add_endpoint(&stub.name, FX_QUOTES_ENDPOINT, &stub.base_url());
        }
        Fx {
            hub,
            payer,
            fxp,
            mallory,
            plain,
            dir,
        }
    }

    fn assert_all_quiet(&self) {
        for stub in [&self.payer, &self.fxp, &self.mallory, &self.plain] {
            stub.assert_quiet(QUIET_WAIT);
        }
    }

    /// `POST /fxQuotes` from the payer to `destination`, answered 202.
    fn ask(&self, destination: &str, body: &str) -> Vec<(String, String)> {
        let headers = fx_headers(PAYER, destination, true);
        let response = self.hub.api("POST", "/fxQuotes", &headers, body.as_bytes());
        assert_eq!(response.status, 202, "POST /fxQuotes: {response:?}");
        headers
    }

    fn put(&self, source: &str, destination: &str, path: &str, body: &str) -> Response {
        self.hub.api(
            "PUT",
            path,
            &fx_headers(source, destination, false),
            body.as_bytes(),
        )
    }
}

/// The headers a DFSP sends with an FX quotes request, in v2.0 as
/// Mojaloop's SDK writes them, with a (not verified) signature to see it
/// forwarded untouched.
fn fx_headers(source: &str, destination: &str, with_accept: bool) -> Vec<(String, String)> {
    let mut headers = vec![(
        "Content-Type".to_string(),
        "application/vnd.interoperability.fxQuotes+json;version=2.0".to_string(),
    )];
    if with_accept {
        headers.push((
            "Accept".to_string(),
            "application/vnd.interoperability.fxQuotes+json;version=2".to_string(),
        ));
    }
    headers.push(("Date".to_string(), http_date(now_ms())));
    headers.push(("FSPIOP-Source".to_string(), source.to_string()));
    headers.push(("FSPIOP-Destination".to_string(), destination.to_string()));
    headers.push((
        "FSPIOP-Signature".to_string(),
        format!(r#"{{"signature":"sig-of-{source}","protectedHeader":"x"}}"#),
    ));
    headers
}

/// The conversion terms the payer asks `fxp` for: 300 BWP to TZS, the
/// target amount left to the FXP (`with_target` fills it in, as the FXP's
/// answer does).
fn terms(fxp: &str, source_amount: &str, with_target: bool) -> String {
    let target = if with_target {
        r#","amount":"48000""#
    } else {
        ""
    };
    format!(
        r#"{{"conversionId":"{}","determiningTransferId":"{}","initiatingFsp":"{PAYER}","counterPartyFsp":"{fxp}","amountType":"SEND","sourceAmount":{{"currency":"BWP","amount":"{source_amount}"}},"targetAmount":{{"currency":"TZS"{target}}},"expiration":"{}"}}"#,
        new_id(),
        new_id(),
        fspiop_time(far_future())
    )
}

fn fx_quote_body(conversion_request_id: &str, fxp: &str) -> String {
    format!(
        r#"{{"conversionRequestId":"{conversion_request_id}","conversionTerms":{}}}"#,
        terms(fxp, "300", false)
    )
}

fn fx_answer_body() -> String {
    format!(
        r#"{{"condition":"{CONDITION}","conversionTerms":{}}}"#,
        terms(FXP, "300", true)
    )
}

/// A message passed on as sent: the same bytes, and every FSPIOP header
/// the sender wrote (Accept only on a request).
fn assert_forwarded(received: &Received, body: &str, sent: &[(String, String)]) {
    assert_eq!(received.text(), body, "the exact bytes: {received:?}");
    for name in [
        "Content-Type",
        "Accept",
        "Date",
        "FSPIOP-Source",
        "FSPIOP-Destination",
        "FSPIOP-Signature",
    ] {
        assert_eq!(
            received.header(name),
            header_value(sent, name),
            "{name} of {received:?}"
        );
    }
}

/// The next request to `stub` must be the hub's own
/// `PUT /fxQuotes/{id}/error` with `code`, written in v2.0.
fn expect_hub_fx_error(stub: &Stub, id: &str, code: &str) -> Received {
    let received = stub.expect("PUT", &format!("/fxQuotes/{id}/error"));
    assert_eq!(
        received.header("fspiop-source"),
        Some(HUB_NAME),
        "{received:?}"
    );
    assert_eq!(
        received.header("fspiop-destination"),
        Some(stub.name.as_str()),
        "{received:?}"
    );
    assert_eq!(
        received.header("content-type"),
        Some("application/vnd.interoperability.fxQuotes+json;version=2.0"),
        "the hub writes FX messages in 2.0: {received:?}"
    );
    assert_eq!(
        received.json()["errorInformation"]["errorCode"],
        code,
        "{received:?}"
    );
    received
}

#[test]
fn fx_quotes_are_routed_between_the_payer_and_the_fxp_as_sent() {
    let fx = Fx::new(&[]);
    let id = new_id();
    let body = fx_quote_body(&id, FXP);
    let sent = fx.ask(FXP, &body);
    let forwarded = fx.fxp.expect("POST", "/fxQuotes");
    assert_forwarded(&forwarded, &body, &sent);

    // The FXP's answer reaches the payer, as sent, without Accept.
    let item = format!("/fxQuotes/{id}");
    let answer = fx_answer_body();
    let response = fx.put(FXP, PAYER, &item, &answer);
    assert_eq!(response.status, 200, "{response:?}");
    let received = fx.payer.expect("PUT", &item);
    assert_forwarded(&received, &answer, &fx_headers(FXP, PAYER, false));
    assert_eq!(received.header("accept"), None);

    // The payer asks again with a GET; the FXP answers with an error.
    let get = fx_headers(PAYER, FXP, true);
    let response = fx.hub.api("GET", &item, &get, b"");
    assert_eq!(response.status, 202, "{response:?}");
    assert_forwarded(&fx.fxp.expect("GET", &item), "", &get);
    let error = error_body("3302", "Quote expired");
    let error_path = format!("{item}/error");
    let response = fx.put(FXP, PAYER, &error_path, &error);
    assert_eq!(response.status, 200, "{response:?}");
    let received = fx.payer.expect("PUT", &error_path);
    assert_forwarded(&received, &error, &fx_headers(FXP, PAYER, false));

    // Mojaloop's header checks accept an FX request labelled 1.x (they
    // are not per resource): so does kasi, and it routes the bytes.
    let id = new_id();
    let body = fx_quote_body(&id, FXP);
    let headers = resource_headers("fxQuotes", "1.1", PAYER, Some(FXP), true);
    let response = fx.hub.api("POST", "/fxQuotes", &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    assert_eq!(fx.fxp.expect("POST", "/fxQuotes").text(), body);

    fx.assert_all_quiet();
}

/// The pause rule for an FX quote: the FXP asked would take the source
/// currency and pay the target, so an FXP whose mode forbids either
/// (send-only, receive-only, suspended) is not asked — the payer hears
/// 3201 from the hub, counted under it — and an active one is.
#[test]
fn an_fxp_that_may_not_both_take_and_pay_is_not_asked_for_a_quote() {
    let fx = Fx::new(&[]);
    let mut refused = 0;
    for (mode, may_not) in [
        ("receive-only", "send"),
        ("send-only", "receive"),
        ("suspended", "receive"),
        ("active", ""),
    ] {
        fx.hub.admin_expect(
            "PUT",
            &format!("/participants/{FXP}"),
            Some(serde_json::json!({ "mode": mode })),
            200,
        );
        let id = new_id();
        let body = fx_quote_body(&id, FXP);
        let sent = fx.ask(FXP, &body);
        if mode == "active" {
            assert_forwarded(&fx.fxp.expect("POST", "/fxQuotes"), &body, &sent);
            continue;
        }
        let error = expect_hub_fx_error(&fx.payer, &id, "3201");
        let description = error.json()["errorInformation"]["errorDescription"].to_string();
        let says = format!("Unsupported participant '{FXP}': it is {mode} and may not {may_not}");
        assert!(description.contains(&says), "{mode}: {description}");
        let class = match may_not {
            "send" => "payer_may_not_send",
            _ => "payee_may_not_receive",
        };
        refused += 1;
        fx.hub.await_refusals(class, Some(PAYER), 1);
        assert_eq!(
            fx.hub.refusals("payer_may_not_send", Some(PAYER))
                + fx.hub.refusals("payee_may_not_receive", Some(PAYER)),
            refused
        );
        fx.fxp.assert_quiet(QUIET_WAIT);
    }
    fx.assert_all_quiet();
}

/// A disabled currency account pauses FX quotes as the FXP's mode does:
/// the payer's in the source currency (3202), the FXP's in the source
/// currency it would take or the target it would pay (3201), each naming
/// the currency and counted as `account_inactive` under the payer; the
/// FXP is not asked. Enabled again, it is.
#[test]
fn an_fx_quote_needs_the_payers_source_and_the_fxps_source_and_target_accounts() {
    let fx = Fx::new(&[]);
    for currency in ["BWP", "TZS"] {
        for kind in ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"] {
            fx.hub.admin_expect(
                "POST",
                "/participants/Hub/accounts",
                Some(serde_json::json!({"type": kind, "currency": currency})),
                201,
            );
        }
    }
    for (name, currency) in [(PAYER, "BWP"), (FXP, "BWP"), (FXP, "TZS"), (PAYER, "TZS")] {
        fx.hub.add_currency(name, currency, 10_000, 0);
    }
    let mut refused = 0;
    for (name, currency, code) in [
        (PAYER, "BWP", Some("3202")),
        // The payer pays no TZS: its TZS account is not needed.
        (PAYER, "TZS", None),
        (FXP, "BWP", Some("3201")),
        (FXP, "TZS", Some("3201")),
    ] {
        fx.hub.set_position_active(name, currency, false);
        let id = new_id();
        let body = fx_quote_body(&id, FXP);
        let sent = fx.ask(FXP, &body);
        match code {
            None => assert_forwarded(&fx.fxp.expect("POST", "/fxQuotes"), &body, &sent),
            Some(code) => {
                let error = expect_hub_fx_error(&fx.payer, &id, code);
                let description = error.json()["errorInformation"]["errorDescription"].to_string();
                let says =
                    format!("Unsupported participant '{name}': its {currency} account is inactive");
                assert!(description.contains(&says), "{description}");
                refused += 1;
                fx.hub
                    .await_refusals("account_inactive", Some(PAYER), refused);
                fx.fxp.assert_quiet(QUIET_WAIT);
            }
        }
        fx.hub.set_position_active(name, currency, true);
    }
    // All enabled again: the FXP is asked.
    let id = new_id();
    let body = fx_quote_body(&id, FXP);
    let sent = fx.ask(FXP, &body);
    assert_forwarded(&fx.fxp.expect("POST", "/fxQuotes"), &body, &sent);
    assert_eq!(fx.hub.refusals("account_inactive", None), refused);
    fx.assert_all_quiet();
}

#[test]
fn only_the_fxp_asked_answers_and_only_to_the_payer() {
    let fx = Fx::new(&[]);
    let answer = fx_answer_body();

    // Nothing pending: refused.
    let id = new_id();
    let item = format!("/fxQuotes/{id}");
    assert_error_response(&fx.put(FXP, PAYER, &item, &answer), 400, "3100");

    fx.ask(FXP, &fx_quote_body(&id, FXP));
    fx.fxp.expect("POST", "/fxQuotes");
    let refused = |response: Response| assert_error_response(&response, 400, "3100");
    // A DFSP that was not asked answers the payer, as an answer and as an
    // error.
    refused(fx.put(MALLORY, PAYER, &item, &answer));
    refused(fx.put(
        MALLORY,
        PAYER,
        &format!("{item}/error"),
        &error_body("3200", "Generic ID not found"),
    ));
    // The FXP answers someone who did not ask; the payer its own question.
    refused(fx.put(FXP, MALLORY, &item, &answer));
    refused(fx.put(PAYER, FXP, &item, &answer));
    fx.assert_all_quiet();
    fx.hub
        .await_refusals("unsolicited_answer", Some(MALLORY), 2);

    // The genuine answer still reaches the payer, and a repeat of it too.
    for _ in 0..2 {
        let response = fx.put(FXP, PAYER, &item, &answer);
        assert_eq!(response.status, 200, "{response:?}");
        assert_eq!(fx.payer.expect("PUT", &item).text(), answer);
    }
    // An answer to an FX quote is not an answer to a quote of the same id.
    let quote_answer = format!(
        r#"{{"transferAmount":{{"currency":"USD","amount":"100"}},"expiration":"{}","ilpPacket":"{ILP_PACKET}","condition":"{CONDITION}"}}"#,
        fspiop_time(far_future())
    );
    let response = fx.hub.api(
        "PUT",
        &format!("/quotes/{id}"),
        &resource_headers("quotes", "1.1", FXP, Some(PAYER), false),
        quote_answer.as_bytes(),
    );
    assert_error_response(&response, 400, "3100");
    fx.assert_all_quiet();
}

#[test]
fn fx_quote_faults() {
    let fx = Fx::new(&[]);

    // An FXP without an FX quotes endpoint: 3201 to the payer, from the
    // hub, in 2.0 even when the payer wrote and accepts 1.x.
    let id = new_id();
    let body = fx_quote_body(&id, PLAIN);
    let headers = resource_headers("fxQuotes", "1.1", PAYER, Some(PLAIN), true);
    let response = fx.hub.api("POST", "/fxQuotes", &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    let error = expect_hub_fx_error(&fx.payer, &id, "3201");
    assert!(
        error.json()["errorInformation"]["errorDescription"]
            .as_str()
            .is_some_and(|d| d.starts_with("Destination FSP Error")),
        "{error:?}"
    );
    // An unknown destination likewise.
    let id = new_id();
    fx.ask("nosuchfsp", &fx_quote_body(&id, "nosuchfsp"));
    expect_hub_fx_error(&fx.payer, &id, "3201");

    // Refused at once, naming what is wrong: no FSPIOP-Destination; a
    // body without its conversion terms; a malformed amount; another
    // resource's media type.
    let without_destination = without_header(fx_headers(PAYER, FXP, true), "FSPIOP-Destination");
    let response = fx.hub.api(
        "POST",
        "/fxQuotes",
        &without_destination,
        fx_quote_body(&new_id(), FXP).as_bytes(),
    );
    assert_error_response(&response, 400, "3102");
    let description = |response: &Response| {
        response.json()["errorInformation"]["errorDescription"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        description(&response).contains("fspiop-destination"),
        "{response:?}"
    );
    let headers = fx_headers(PAYER, FXP, true);
    let response = fx.hub.api(
        "POST",
        "/fxQuotes",
        &headers,
        format!(r#"{{"conversionRequestId":"{}"}}"#, new_id()).as_bytes(),
    );
    assert_error_response(&response, 400, "3102");
    assert!(
        description(&response).ends_with("conversionTerms"),
        "{response:?}"
    );
    let response = fx.hub.api(
        "POST",
        "/fxQuotes",
        &headers,
        fx_quote_body(&new_id(), FXP)
            .replace(r#""amount":"300""#, r#""amount":"300.00""#)
            .as_bytes(),
    );
    assert_error_response(&response, 400, "3100");
    assert!(
        description(&response).contains("conversionTerms.sourceAmount.amount"),
        "{response:?}"
    );
    let quotes_media = with_header(
        headers.clone(),
        "Content-Type",
        "application/vnd.interoperability.quotes+json;version=2.0",
    );
    let response = fx.hub.api(
        "POST",
        "/fxQuotes",
        &quotes_media,
        fx_quote_body(&new_id(), FXP).as_bytes(),
    );
    assert_error_response(&response, 400, "3101");
    // An answer with a malformed path id.
    let response = fx.put(FXP, PAYER, "/fxQuotes/not-an-id", &fx_answer_body());
    assert_error_response(&response, 400, "3101");

    fx.assert_all_quiet();
}

/// `--quotes-persistent`: FX quotes under the quotes' duplicate rules,
/// durable across a restart.
#[test]
fn persistent_fx_quotes_apply_the_duplicate_rules() {
    let mut fx = Fx::new(&["--quotes-persistent"]);
    let id = new_id();
    let body = fx_quote_body(&id, FXP);
    let headers = fx.ask(FXP, &body);
    fx.fxp.expect("POST", "/fxQuotes");

    // The same request again while unanswered: not forwarded again.
    let response = fx.hub.api("POST", "/fxQuotes", &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    // Modified with the same id: 3106 to the payer, nothing to the FXP.
    let modified = body.replace(r#""amount":"300""#, r#""amount":"301""#);
    assert_ne!(modified, body);
    let response = fx
        .hub
        .api("POST", "/fxQuotes", &headers, modified.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    expect_hub_fx_error(&fx.payer, &id, "3106");
    fx.assert_all_quiet();

    // Only the FXP answers; its answer is recorded and reaches the payer.
    let item = format!("/fxQuotes/{id}");
    let answer = fx_answer_body();
    assert_error_response(&fx.put(MALLORY, PAYER, &item, &answer), 400, "3100");
    let response = fx.put(FXP, PAYER, &item, &answer);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(fx.payer.expect("PUT", &item).text(), answer);
    // A different answer to the same request: 3106 to the FXP.
    let response = fx.put(FXP, PAYER, &item, &fx_answer_body());
    assert_eq!(response.status, 200, "{response:?}");
    expect_hub_fx_error(&fx.fxp, &id, "3106");
    fx.assert_all_quiet();

    // After a restart, the payer's resend gets the known answer from the
    // hub, as an FX quote; the FXP is not asked again.
    fx.hub.terminate();
    fx.hub = Hub::start_with(&fx.dir.path().join("data"), &["--quotes-persistent"]);
    let response = fx.hub.api("POST", "/fxQuotes", &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    let resent = fx.payer.expect("PUT", &item);
    assert_eq!(resent.text(), answer, "the known answer is resent");
    assert_eq!(resent.header("fspiop-source"), Some(HUB_NAME));
    assert_eq!(
        resent.header("content-type"),
        Some("application/vnd.interoperability.fxQuotes+json;version=2.0")
    );
    // A modified resend is still 3106.
    let response = fx
        .hub
        .api("POST", "/fxQuotes", &headers, modified.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    expect_hub_fx_error(&fx.payer, &id, "3106");

    // The FXP resending the payer's request (it saw its bytes) is not the
    // payer: refused, never told the answer.
    let as_fxp = fx_headers(FXP, PAYER, true);
    let response = fx.hub.api("POST", "/fxQuotes", &as_fxp, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    expect_hub_fx_error(&fx.fxp, &id, "3100");
    fx.hub.await_refusals("not_party", Some(FXP), 1);
    fx.assert_all_quiet();
}
