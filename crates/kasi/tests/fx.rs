//! End-to-end FX (FSPIOP v2.0 payer conversion) through the real
//! `kasi serve` binary: a payer DFSP in USD, an FXP in USD and TZS, a payee
//! in TZS, each a real HTTP stub; every position checked after every step
//! in both currencies, every way a conversion ends, the dependent
//! transfer's checks, duplicates, a restart in the middle, and
//! `/services/FXP`.

mod support;

use serde_json::{json, Value};
use support::*;

const FXP: &str = "fxp";
const FX_CONTENT_TYPE: &str = "application/vnd.interoperability.fxTransfers+json;version=2.0";
const FX_ACCEPT: &str = "application/vnd.interoperability.fxTransfers+json;version=2";

/// The FX endpoints of a DFSP at `base`.
fn fx_endpoints(hub: &Hub, name: &str, base: &str) {
    for (kind, path) in [
        ("FSPIOP_CALLBACK_URL_FX_TRANSFER_POST", "/fxTransfers"),
        (
            "FSPIOP_CALLBACK_URL_FX_TRANSFER_PUT",
            "/fxTransfers/{{commitRequestId}}",
        ),
        (
            "FSPIOP_CALLBACK_URL_FX_TRANSFER_ERROR",
            "/fxTransfers/{{commitRequestId}}/error",
        ),
        ("FSPIOP_CALLBACK_URL_FX_QUOTES", ""),
    ] {
        hub.add_endpoint(name, kind, &format!("{base}{path}"));
    }
}

fn transfer_endpoints(hub: &Hub, name: &str, base: &str) {
    for (kind, path) in [
        ("FSPIOP_CALLBACK_URL_TRANSFER_POST", "/transfers"),
        (
            "FSPIOP_CALLBACK_URL_TRANSFER_PUT",
            "/transfers/{{transferId}}",
        ),
        (
            "FSPIOP_CALLBACK_URL_TRANSFER_ERROR",
            "/transfers/{{transferId}}/error",
        ),
    ] {
        hub.add_endpoint(name, kind, &format!("{base}{path}"));
    }
}

struct Fx {
    _dir: tempfile::TempDir,
    hub: Hub,
    payer: Stub,
    fxp: Stub,
    payee: Stub,
}

impl Fx {
    fn new() -> Fx {
        Fx::start(&[])
    }

    fn start(extra: &[&str]) -> Fx {
        Fx::with_fxp_liquidity(extra, 1_000_000)
    }

    /// The FXP with `tzs` of TZS liquidity and net debit cap.
    fn with_fxp_liquidity(extra: &[&str], tzs: u64) -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::start_with(dir.path(), extra);
        hub.setup();
        for kind in ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"] {
            hub.admin_expect(
                "POST",
                "/participants/Hub/accounts",
                Some(json!({"type": kind, "currency": "TZS"})),
                201,
            );
        }
        let payer = Stub::start(PAYER);
        let fxp = Stub::start(FXP);
        let payee = Stub::start(PAYEE);
        hub.add_currency(PAYER, "USD", 1_000, 1_000);
        hub.add_currency(FXP, "USD", 0, 0);
        hub.add_currency(FXP, "TZS", tzs, tzs);
        hub.add_currency(PAYEE, "TZS", 0, 0);
        for stub in [&payer, &fxp, &payee] {
            transfer_endpoints(&hub, &stub.name, &stub.base_url());
            fx_endpoints(&hub, &stub.name, &stub.base_url());
        }
        Fx {
            _dir: dir,
            hub,
            payer,
            fxp,
            payee,
        }
    }

    /// Declares the FXP's one corridor, USD to TZS (`/services/FXP`).
    fn declare_usd_to_tzs(&self) {
        self.hub.admin_expect(
            "PUT",
            &format!("/participants/{FXP}/fxCorridors"),
            Some(json!({"corridors": [{"sourceCurrency": "USD", "targetCurrency": "TZS"}]})),
            200,
        );
    }

    /// (payer USD, FXP USD, FXP TZS, payee TZS) positions, as the admin
    /// API shows them (reservations included, as Mojaloop's).
    fn positions(&self) -> [f64; 4] {
        [
            self.hub.position_in(PAYER, "USD"),
            self.hub.position_in(FXP, "USD"),
            self.hub.position_in(FXP, "TZS"),
            self.hub.position_in(PAYEE, "TZS"),
        ]
    }

    fn fx_headers(
        &self,
        source: &str,
        destination: &str,
        with_accept: bool,
    ) -> Vec<(String, String)> {
        let mut headers = vec![("Content-Type".to_string(), FX_CONTENT_TYPE.to_string())];
        if with_accept {
            headers.push(("Accept".to_string(), FX_ACCEPT.to_string()));
        }
        headers.push(("Date".to_string(), http_date(now_ms())));
        headers.push(("FSPIOP-Source".to_string(), source.to_string()));
        headers.push(("FSPIOP-Destination".to_string(), destination.to_string()));
        headers
    }

    /// `POST /fxTransfers`: USD 300 into TZS 750,000 for `determining`.
    fn convert(&self, commit_request_id: &str, determining: &str, expiration_ms: i64) -> String {
        let body = conversion_body(commit_request_id, determining, "300", expiration_ms);
        let headers = self.fx_headers(PAYER, FXP, true);
        let response = self
            .hub
            .api("POST", "/fxTransfers", &headers, body.as_bytes());
        assert_eq!(response.status, 202, "{response:?}");
        body
    }

    fn accept(&self, commit_request_id: &str) -> String {
        let body = format!(
            r#"{{"conversionState":"RESERVED","fulfilment":"{FULFILMENT}","completedTimestamp":"{}"}}"#,
            fspiop_time(now_ms())
        );
        let headers = self.fx_headers(FXP, PAYER, false);
        let path = format!("/fxTransfers/{commit_request_id}");
        let response = self.hub.api("PUT", &path, &headers, body.as_bytes());
        assert_eq!(response.status, 200, "{response:?}");
        body
    }

    /// The dependent transfer: payer to payee, TZS `amount`.
    fn transfer(&self, transfer_id: &str, amount: &str) -> String {
        let body = prepare_body(transfer_id, PAYER, PAYEE, amount, far_future())
            .replace("\"USD\"", "\"TZS\"");
        let response = self.hub.prepare(PAYER, PAYEE, &body);
        assert_eq!(response.status, 202, "{response:?}");
        body
    }

    fn commit(&self, transfer_id: &str) {
        let body = fulfil_body(FULFILMENT, "COMMITTED");
        let headers = fspiop_headers(PAYEE, PAYER, false);
        let path = format!("/transfers/{transfer_id}");
        let response = self.hub.api("PUT", &path, &headers, body.as_bytes());
        assert_eq!(response.status, 200, "{response:?}");
    }

    /// The conversion prepared and accepted, the dependent transfer
    /// reserved: each party's messages checked on the way.
    fn up_to_the_dependent_transfer(&self) -> (String, String) {
        let (conversion, transfer) = (new_id(), new_id());
        let sent = self.convert(&conversion, &transfer, far_future());
        let forwarded = self.fxp.expect("POST", "/fxTransfers");
        assert_eq!(
            forwarded.body,
            sent.as_bytes(),
            "the FXP gets the payer's bytes"
        );
        assert_eq!(forwarded.header("fspiop-source"), Some(PAYER));
        assert_eq!(self.positions(), [300.0, 0.0, 0.0, 0.0]);

        let accepted = self.accept(&conversion);
        let told = self
            .payer
            .expect("PUT", &format!("/fxTransfers/{conversion}"));
        assert_eq!(
            told.body,
            accepted.as_bytes(),
            "the payer gets the FXP's bytes"
        );
        assert_eq!(
            self.positions(),
            [300.0, 0.0, 0.0, 0.0],
            "acceptance moves nothing"
        );

        let sent = self.transfer(&transfer, "750000");
        let forwarded = self.payee.expect("POST", "/transfers");
        assert_eq!(forwarded.body, sent.as_bytes());
        assert_eq!(
            self.positions(),
            [300.0, 0.0, 750_000.0, 0.0],
            "the FXP's TZS is held"
        );
        (conversion, transfer)
    }
}

fn conversion_body(
    commit_request_id: &str,
    determining: &str,
    source: &str,
    expiration_ms: i64,
) -> String {
    format!(
        r#"{{"commitRequestId":"{commit_request_id}","determiningTransferId":"{determining}","initiatingFsp":"{PAYER}","counterPartyFsp":"{FXP}","amountType":"SEND","sourceAmount":{{"currency":"USD","amount":"{source}"}},"targetAmount":{{"currency":"TZS","amount":"750000"}},"condition":"{CONDITION}","expiration":"{}"}}"#,
        fspiop_time(expiration_ms)
    )
}

/// The next `count` requests a stub receives, in whatever order they come,
/// by (method, path).
fn next_requests(stub: &Stub, count: usize) -> Vec<Received> {
    let mut received: Vec<Received> = (0..count).map(|_| stub.next("a callback")).collect();
    received.sort_by(|a, b| (&a.method, &a.path).cmp(&(&b.method, &b.path)));
    received
}

fn error_code(received: &Received) -> Value {
    received.json()["errorInformation"]["errorCode"].clone()
}

#[test]
fn a_cross_currency_payment_commits_both_legs_and_tells_the_fxp() {
    let fx = Fx::new();
    let (conversion, transfer) = fx.up_to_the_dependent_transfer();
    fx.commit(&transfer);
    let told = fx.payer.expect("PUT", &format!("/transfers/{transfer}"));
    assert_eq!(told.json()["transferState"], json!("COMMITTED"));
    // The hub's confirmation to the payee (SEND_TRANSFER_CONFIRMATION_TO_PAYEE).
    fx.payee.expect("PUT", &format!("/transfers/{transfer}"));
    let patch = fx
        .fxp
        .expect("PATCH", &format!("/fxTransfers/{conversion}"));
    assert_eq!(
        patch.json()["conversionState"],
        json!("COMMITTED"),
        "{patch:?}"
    );
    assert_eq!(patch.header("fspiop-source"), Some(HUB_NAME));
    assert!(patch
        .header("content-type")
        .is_some_and(|value| value
            .starts_with("application/vnd.interoperability.fxTransfers+json;version=2")));
    assert_eq!(
        fx.positions(),
        [300.0, -300.0, 750_000.0, -750_000.0],
        "payer owes USD; the FXP is owed USD and owes TZS; the payee is owed TZS"
    );

    // Either party reads the conversion; nobody else does.
    let headers = fx.fx_headers(PAYER, HUB_NAME, true);
    let path = format!("/fxTransfers/{conversion}");
    assert_eq!(fx.hub.api("GET", &path, &headers, b"").status, 202);
    let state = fx.payer.expect("PUT", &path);
    assert_eq!(state.json()["conversionState"], json!("COMMITTED"));
    assert_eq!(state.json()["fulfilment"], json!(FULFILMENT));
    let headers = fx.fx_headers(PAYEE, HUB_NAME, true);
    assert_eq!(fx.hub.api("GET", &path, &headers, b"").status, 202);
    let refused = fx.payee.expect("PUT", &format!("{path}/error"));
    assert_eq!(error_code(&refused), json!("3000"));
    fx.hub.await_refusals("not_party", Some(PAYEE), 1);
}

#[test]
fn the_fxps_error_releases_every_hold_and_tells_payer_and_payee() {
    let fx = Fx::new();
    let (conversion, transfer) = fx.up_to_the_dependent_transfer();
    let body = error_body("5100", "FXP cannot convert");
    let headers = fx.fx_headers(FXP, PAYER, false);
    let path = format!("/fxTransfers/{conversion}/error");
    assert_eq!(
        fx.hub.api("PUT", &path, &headers, body.as_bytes()).status,
        200
    );
    let to_payer = next_requests(&fx.payer, 2);
    assert_eq!(to_payer[0].path, format!("/fxTransfers/{conversion}/error"));
    assert_eq!(to_payer[0].body, body.as_bytes(), "the FXP's own words");
    assert_eq!(to_payer[1].path, format!("/transfers/{transfer}/error"));
    assert_eq!(error_code(&to_payer[1]), json!("5100"));
    let to_payee = fx
        .payee
        .expect("PUT", &format!("/transfers/{transfer}/error"));
    assert_eq!(error_code(&to_payee), json!("5100"));
    assert_eq!(fx.positions(), [0.0; 4], "every hold released once");
}

#[test]
fn the_payees_error_ends_the_conversion_and_the_fxp_hears_aborted() {
    let fx = Fx::new();
    let (conversion, transfer) = fx.up_to_the_dependent_transfer();
    let body = error_body("5104", "payee refused");
    let headers = fspiop_headers(PAYEE, PAYER, false);
    let path = format!("/transfers/{transfer}/error");
    assert_eq!(
        fx.hub.api("PUT", &path, &headers, body.as_bytes()).status,
        200
    );
    fx.payer.expect("PUT", &path);
    let patch = fx
        .fxp
        .expect("PATCH", &format!("/fxTransfers/{conversion}"));
    assert_eq!(patch.json()["conversionState"], json!("ABORTED"));
    assert_eq!(fx.positions(), [0.0; 4]);
}

#[test]
fn a_dependent_transfer_that_does_not_match_its_conversion_is_refused() {
    let fx = Fx::new();
    let (conversion, transfer) = (new_id(), new_id());
    fx.convert(&conversion, &transfer, far_future());
    fx.fxp.expect("POST", "/fxTransfers");
    // Before the FXP accepted.
    fx.transfer(&transfer, "750000");
    let refused = fx.payer.expect_error(&transfer, "3100");
    assert!(refused.text().contains("not fulfilled"), "{refused:?}");
    fx.accept(&conversion);
    fx.payer
        .expect("PUT", &format!("/fxTransfers/{conversion}"));
    // Above what was converted.
    fx.transfer(&transfer, "750001");
    fx.payer.expect_error(&transfer, "3100");
    assert_eq!(fx.positions(), [300.0, 0.0, 0.0, 0.0], "nothing more held");
    // The conversion still stands: the right transfer goes through.
    fx.transfer(&transfer, "750000");
    fx.payee.expect("POST", "/transfers");
    fx.commit(&transfer);
    fx.payer.expect("PUT", &format!("/transfers/{transfer}"));
    fx.fxp
        .expect("PATCH", &format!("/fxTransfers/{conversion}"));
    assert_eq!(fx.positions(), [300.0, -300.0, 750_000.0, -750_000.0]);
}

#[test]
fn an_expired_conversion_is_reported_to_both_and_releases_the_payer() {
    let fx = Fx::new();
    let (conversion, transfer) = (new_id(), new_id());
    fx.convert(&conversion, &transfer, now_ms() + 1_500);
    fx.fxp.expect("POST", "/fxTransfers");
    assert_eq!(fx.positions()[0], 300.0);
    let path = format!("/fxTransfers/{conversion}/error");
    let to_payer = fx.payer.expect("PUT", &path);
    assert_eq!(error_code(&to_payer), json!("3303"));
    let to_fxp = fx.fxp.expect("PUT", &path);
    assert_eq!(error_code(&to_fxp), json!("3303"));
    assert_eq!(fx.positions(), [0.0; 4]);
}

#[test]
fn resends_get_the_state_and_a_modified_resend_3106() {
    let fx = Fx::new();
    let (conversion, transfer) = (new_id(), new_id());
    let body = fx.convert(&conversion, &transfer, far_future());
    fx.fxp.expect("POST", "/fxTransfers");
    let headers = fx.fx_headers(PAYER, FXP, true);
    assert_eq!(
        fx.hub
            .api("POST", "/fxTransfers", &headers, body.as_bytes())
            .status,
        202
    );
    let state = fx
        .payer
        .expect("PUT", &format!("/fxTransfers/{conversion}"));
    assert_eq!(state.json()["conversionState"], json!("RESERVED"));
    let modified = body.replace("\"300\"", "\"301\"");
    assert_eq!(
        fx.hub
            .api("POST", "/fxTransfers", &headers, modified.as_bytes())
            .status,
        202
    );
    let refused = fx
        .payer
        .expect("PUT", &format!("/fxTransfers/{conversion}/error"));
    assert_eq!(error_code(&refused), json!("3106"));
    assert_eq!(fx.positions(), [300.0, 0.0, 0.0, 0.0]);
    // Only the FXP answers: the payee's PUT is refused and changes nothing.
    let accept = format!(r#"{{"conversionState":"RESERVED","fulfilment":"{FULFILMENT}"}}"#);
    let headers = fx.fx_headers(PAYEE, PAYER, false);
    let path = format!("/fxTransfers/{conversion}");
    assert_eq!(
        fx.hub.api("PUT", &path, &headers, accept.as_bytes()).status,
        200
    );
    fx.payee.expect("PUT", &format!("{path}/error"));
    fx.payer.assert_quiet(QUIET_WAIT);
    // conversionState ABORTED in a PUT is refused at once.
    let aborted = r#"{"conversionState":"ABORTED"}"#;
    let headers = fx.fx_headers(FXP, PAYER, false);
    let response = fx.hub.api("PUT", &path, &headers, aborted.as_bytes());
    assert_error_response(&response, 400, "3100");
}

/// The first request `method path` the stub receives, skipping others (a
/// restarted hub sends again what it cannot know was delivered).
fn expect_skipping(stub: &Stub, method: &str, path: &str) -> Received {
    loop {
        let received = stub.next(&format!("{method} {path}"));
        if received.method == method && received.path == path {
            return received;
        }
    }
}

#[test]
fn a_restart_between_the_legs_loses_nothing() {
    // Killed (SIGKILL) after the conversion was accepted and the dependent
    // transfer reserved, the restarted hub finishes the payment.
    let mut fx = Fx::new();
    let (conversion, transfer) = fx.up_to_the_dependent_transfer();
    let data_dir = fx._dir.path().to_path_buf();
    fx.hub.kill();
    fx.hub = Hub::start(&data_dir);
    assert_eq!(fx.positions(), [300.0, 0.0, 750_000.0, 0.0]);
    fx.commit(&transfer);
    expect_skipping(&fx.payer, "PUT", &format!("/transfers/{transfer}"));
    let patch = expect_skipping(&fx.fxp, "PATCH", &format!("/fxTransfers/{conversion}"));
    assert_eq!(patch.json()["conversionState"], json!("COMMITTED"));
    assert_eq!(fx.positions(), [300.0, -300.0, 750_000.0, -750_000.0]);
}

#[test]
fn services_fxp_lists_the_declared_fxps_of_a_corridor() {
    let fx = Fx::new();
    fx.declare_usd_to_tzs();
    let listed = fx.hub.admin_expect("GET", "/fxps", None, 200).json();
    assert_eq!(listed[0]["name"], json!(FXP));
    let headers = resource_headers("services", "2.0", PAYER, None, true);
    let response = fx.hub.api("GET", "/services/FXP/USD/TZS", &headers, b"");
    assert_eq!(response.status, 202, "{response:?}");
    let answer = fx.payer.expect("PUT", "/services/FXP/USD/TZS");
    assert_eq!(answer.json(), json!({"providers": [FXP]}));
    let response = fx.hub.api("GET", "/services/FXP/TZS/USD", &headers, b"");
    assert_eq!(response.status, 202);
    let answer = fx.payer.expect("PUT", "/services/FXP/TZS/USD");
    assert_eq!(answer.json(), json!({"providers": []}));
    let events = fx
        .hub
        .admin_expect("GET", "/audit-events?action=fxp.corridors", None, 200)
        .json();
    assert!(events.to_string().contains("USD"), "{events}");
}

/// The providers `/services/FXP[/USD/TZS]` name to the payer.
fn services_fxp(fx: &Fx, corridor: &str) -> Value {
    let headers = resource_headers("services", "2.0", PAYER, None, true);
    let path = format!("/services/FXP{corridor}");
    let response = fx.hub.api("GET", &path, &headers, b"");
    assert_eq!(response.status, 202, "{response:?}");
    fx.payer.expect("PUT", &path).json()["providers"].clone()
}

/// `/services/FXP` lists exactly the FXPs that could complete a conversion
/// now: one whose mode lets it both take the source currency (the
/// conversion's payee) and pay the target (the dependent transfer's
/// payer), with both position accounts enabled — the same rule
/// `POST /fxTransfers` applies, checked here side by side.
#[test]
fn services_fxp_offers_only_an_fxp_that_could_convert_now() {
    let fx = Fx::new();
    fx.declare_usd_to_tzs();
    let set_mode = |mode: &str| {
        fx.hub.admin_expect(
            "PUT",
            &format!("/participants/{FXP}"),
            Some(json!({ "mode": mode })),
            200,
        );
    };
    // A conversion to the FXP: forwarded to it, or refused to the payer.
    let converts = |refused_says: Option<&str>| {
        let conversion = new_id();
        fx.convert(&conversion, &new_id(), far_future());
        match refused_says {
            None => {
                fx.fxp.expect("POST", "/fxTransfers");
            }
            Some(says) => {
                let refused = fx
                    .payer
                    .expect("PUT", &format!("/fxTransfers/{conversion}/error"));
                assert!(refused.text().contains(says), "{says}: {refused:?}");
                fx.fxp.assert_quiet(QUIET_WAIT);
            }
        }
    };
    for (mode, says) in [
        ("receive-only", "is receive-only: it may not send"),
        ("send-only", "is send-only: it may not receive"),
        ("suspended", "is inactive"),
    ] {
        set_mode(mode);
        assert_eq!(services_fxp(&fx, "/USD/TZS"), json!([]), "{mode}");
        assert_eq!(services_fxp(&fx, ""), json!([]), "{mode}");
        converts(Some(says));
    }
    set_mode("active");
    assert_eq!(services_fxp(&fx, "/USD/TZS"), json!([FXP]));
    assert_eq!(services_fxp(&fx, ""), json!([FXP]));

    // Its TZS position account disabled: it cannot pay the target.
    let accounts = fx
        .hub
        .admin_expect("GET", &format!("/participants/{FXP}/accounts"), None, 200)
        .json();
    let tzs = accounts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["currency"] == "TZS" && a["ledgerAccountType"] == "POSITION")
        .expect("the FXP's TZS position account")["id"]
        .clone();
    let path = format!("/participants/{FXP}/accounts/{tzs}");
    fx.hub
        .admin_expect("PUT", &path, Some(json!({"isActive": false})), 200);
    assert_eq!(services_fxp(&fx, "/USD/TZS"), json!([]));
    assert_eq!(services_fxp(&fx, ""), json!([]));
    converts(Some(&format!("Participant {FXP} TZS account is inactive")));
    fx.hub
        .admin_expect("PUT", &path, Some(json!({"isActive": true})), 200);
    assert_eq!(services_fxp(&fx, "/USD/TZS"), json!([FXP]));
    converts(None);
}

#[test]
fn each_currencys_caps_hold_the_payer_and_the_fxp() {
    // The payer's USD liquidity (1,000) refuses a conversion of 1,001.
    let fx = Fx::with_fxp_liquidity(&[], 100);
    let (conversion, transfer) = (new_id(), new_id());
    let body = conversion_body(&conversion, &transfer, "1001", far_future());
    let headers = fx.fx_headers(PAYER, FXP, true);
    assert_eq!(
        fx.hub
            .api("POST", "/fxTransfers", &headers, body.as_bytes())
            .status,
        202
    );
    let refused = fx
        .payer
        .expect("PUT", &format!("/fxTransfers/{conversion}/error"));
    assert_eq!(error_code(&refused), json!("4001"));
    assert_eq!(fx.positions(), [0.0; 4]);

    // The FXP's TZS liquidity (100) refuses the transfer: the conversion
    // ends at once, the payer's USD released, the FXP told ABORTED.
    let (conversion, transfer) = (new_id(), new_id());
    fx.convert(&conversion, &transfer, far_future());
    fx.fxp.expect("POST", "/fxTransfers");
    fx.accept(&conversion);
    fx.payer
        .expect("PUT", &format!("/fxTransfers/{conversion}"));
    fx.transfer(&transfer, "750000");
    let refused = fx.payer.expect_error(&transfer, "4001");
    assert!(refused.text().contains("FXP"), "names the FXP: {refused:?}");
    let patch = fx
        .fxp
        .expect("PATCH", &format!("/fxTransfers/{conversion}"));
    assert_eq!(patch.json()["conversionState"], json!("ABORTED"));
    assert_eq!(fx.positions(), [0.0; 4], "nothing held in either currency");
    fx.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn the_fxps_resent_acceptance_gets_the_state_and_a_changed_one_3106() {
    let fx = Fx::new();
    let (conversion, transfer) = (new_id(), new_id());
    fx.convert(&conversion, &transfer, far_future());
    fx.fxp.expect("POST", "/fxTransfers");
    let accepted = fx.accept(&conversion);
    fx.payer
        .expect("PUT", &format!("/fxTransfers/{conversion}"));
    let headers = fx.fx_headers(FXP, PAYER, false);
    let path = format!("/fxTransfers/{conversion}");
    assert_eq!(
        fx.hub
            .api("PUT", &path, &headers, accepted.as_bytes())
            .status,
        200
    );
    let state = fx.fxp.expect("PUT", &path);
    assert_eq!(state.json()["conversionState"], json!("RESERVED"));
    assert_eq!(state.header("fspiop-source"), Some(HUB_NAME));
    let changed = accepted.replace("RESERVED", "COMMITTED");
    assert_eq!(
        fx.hub
            .api("PUT", &path, &headers, changed.as_bytes())
            .status,
        200
    );
    let refused = fx.fxp.expect("PUT", &format!("{path}/error"));
    assert_eq!(error_code(&refused), json!("3106"));
    fx.payer.assert_quiet(QUIET_WAIT);
    assert_eq!(fx.positions(), [300.0, 0.0, 0.0, 0.0]);
}

#[test]
fn a_restart_before_the_fxp_answers_and_after_the_commit_loses_nothing() {
    let mut fx = Fx::new();
    let (conversion, transfer) = (new_id(), new_id());
    fx.convert(&conversion, &transfer, far_future());
    fx.fxp.expect("POST", "/fxTransfers");
    let data_dir = fx._dir.path().to_path_buf();
    fx.hub.kill();
    fx.hub = Hub::start(&data_dir);
    assert_eq!(
        fx.positions(),
        [300.0, 0.0, 0.0, 0.0],
        "the payer's USD still held"
    );
    fx.accept(&conversion);
    expect_skipping(&fx.payer, "PUT", &format!("/fxTransfers/{conversion}"));
    fx.transfer(&transfer, "750000");
    expect_skipping(&fx.payee, "POST", "/transfers");
    fx.commit(&transfer);
    expect_skipping(&fx.fxp, "PATCH", &format!("/fxTransfers/{conversion}"));
    fx.hub.kill();
    fx.hub = Hub::start(&data_dir);
    assert_eq!(fx.positions(), [300.0, -300.0, 750_000.0, -750_000.0]);
    let conversion_read = fx
        .hub
        .admin_expect("GET", &format!("/transfers/{conversion}"), None, 200)
        .json();
    assert_eq!(conversion_read["kind"], json!("fxTransfer"));
    assert_eq!(conversion_read["transferState"], json!("COMMITTED"));
    assert_eq!(conversion_read["fx"]["dependentState"], json!("COMMITTED"));
    let transfer_read = fx
        .hub
        .admin_expect("GET", &format!("/transfers/{transfer}"), None, 200)
        .json();
    assert_eq!(
        transfer_read["payerFsp"],
        json!(PAYER),
        "its FSPIOP payer, not the FXP"
    );
    assert_eq!(transfer_read["fx"]["commitRequestId"], json!(conversion));
}

#[test]
fn a_window_with_a_conversion_settles_the_fxp_in_both_currencies() {
    let fx = Fx::new();
    let (conversion, transfer) = fx.up_to_the_dependent_transfer();
    fx.commit(&transfer);
    expect_skipping(&fx.fxp, "PATCH", &format!("/fxTransfers/{conversion}"));
    let v2 = |method: &str, path: &str, body: Option<Value>| {
        let response = fx.hub.admin(method, &format!("/v2{path}"), body.as_ref());
        assert_eq!(response.status, 200, "{method} /v2{path}: {response:?}");
        response.json()
    };
    v2(
        "POST",
        "/settlementWindows/1",
        Some(json!({"state": "CLOSED", "reason": "end of day"})),
    );
    let settlement = v2(
        "POST",
        "/settlements",
        Some(json!({
            "settlementModel": "DEFAULTDEFERREDNET",
            "reason": "FX",
            "settlementWindows": [{"id": 1}]
        })),
    );
    let mut nets: Vec<(String, i64)> = settlement["participants"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|participant| participant["accounts"].as_array().unwrap().clone())
        .map(|account| {
            let net = &account["netSettlementAmount"];
            (
                net["currency"].as_str().unwrap().to_string(),
                net["amount"].as_f64().unwrap() as i64,
            )
        })
        .collect();
    nets.sort();
    assert_eq!(
        nets,
        [
            ("TZS".to_string(), -750_000),
            ("TZS".to_string(), 750_000),
            ("USD".to_string(), -300),
            ("USD".to_string(), 300),
        ],
        "the FXP owes in one currency and is owed in the other; no netting across"
    );
    let id = settlement["id"].as_u64().unwrap();
    let settled = v2(
        "POST",
        &format!("/settlements/{id}/finalize"),
        Some(json!({"reason": "FX day"})),
    );
    assert_eq!(settled["state"], json!("SETTLED"), "{settled}");
    assert_eq!(
        fx.positions(),
        [0.0; 4],
        "positions reset in both currencies"
    );
}
