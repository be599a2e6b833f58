//! What the FSPIOP address refuses at the door, end to end through the real
//! `kasi serve`: path values that would be URL syntax in a callback, a
//! header that names who speaks (or to whom) sent twice, a Date too far
//! from the hub's clock; and that no value from a request can forge a log
//! line. Each refusal changes nothing, reaches no DFSP, is counted in
//! `kasi_refusals_total{class}`, and a legitimate request in the same test
//! still arrives.

mod support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

/// The party the payee holds.
const ALICE: &str = "255700000001";

/// A hub with a payer and a payee DFSP, both with every discovery
/// endpoint; the payee holds [`ALICE`].
struct Scheme {
    hub: Hub,
    payer: Stub,
    payee: Stub,
    _dir: tempfile::TempDir,
}

impl Scheme {
    fn new(flags: &[&str]) -> Scheme {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::start_with(&dir.path().join("data"), flags);
        hub.setup();
        let payer = Stub::start(PAYER);
        let payee = Stub::start(PAYEE);
        for stub in [&payer, &payee] {
            hub.onboard(&stub.name, &stub.base_url(), 10_000, 0);
            for (kind, path) in DISCOVERY_ENDPOINTS {
                hub.add_endpoint(&stub.name, kind, &format!("{}{path}", stub.base_url()));
            }
        }
        let scheme = Scheme {
            hub,
            payer,
            payee,
            _dir: dir,
        };
        let response = scheme.register(PAYEE, &format!("MSISDN/{ALICE}"));
        assert_eq!(response.status, 202, "{response:?}");
        scheme
            .payee
            .expect("PUT", &format!("/participants/MSISDN/{ALICE}"));
        scheme
    }

    /// `POST /participants/{path}` from `source`, registering to itself.
    fn register(&self, source: &str, path: &str) -> Response {
        self.register_with(
            path,
            resource_headers("participants", "1.0", source, None, true),
        )
    }

    fn register_with(&self, path: &str, headers: Vec<(String, String)>) -> Response {
        let source = header_value(&headers, "FSPIOP-Source")
            .unwrap_or(PAYEE)
            .to_string();
        let body = format!(r#"{{"fspId":"{source}","currency":"USD"}}"#);
        self.hub.api(
            "POST",
            &format!("/participants/{path}"),
            &headers,
            body.as_bytes(),
        )
    }

    /// `GET /parties/{path}` from the payer (the hub finds the holder).
    fn lookup(&self, path: &str) -> Response {
        self.lookup_with(path, resource_headers("parties", "1.0", PAYER, None, true))
    }

    fn lookup_with(&self, path: &str, headers: Vec<(String, String)>) -> Response {
        self.hub
            .api("GET", &format!("/parties/{path}"), &headers, b"")
    }

    /// The payee's `PUT /parties/{path}` to the payer about `identifier`.
    fn answer(&self, path: &str, id_type: &str, identifier: &str) -> Response {
        let body = json!({"party": {
            "partyIdInfo": {"partyIdType": id_type, "partyIdentifier": identifier, "fspId": PAYEE},
            "name": "Alice",
        }});
        self.hub.api(
            "PUT",
            &format!("/parties/{path}"),
            &resource_headers("parties", "1.0", PAYEE, Some(PAYER), false),
            body.to_string().as_bytes(),
        )
    }

    /// A lookup of [`ALICE`] that the payee receives: the control message
    /// of every test.
    fn lookup_arrives(&self) {
        let response = self.lookup(&format!("MSISDN/{ALICE}"));
        assert_eq!(response.status, 202, "{response:?}");
        let received = self
            .payee
            .expect("GET", &format!("/parties/MSISDN/{ALICE}"));
        assert_eq!(received.header("fspiop-source"), Some(PAYER));
    }

    fn assert_nothing_delivered(&self) {
        self.payer.assert_quiet(QUIET_WAIT);
        self.payee.assert_quiet(QUIET_WAIT);
    }
}

/// `kasi_refusals_total` summed over participants for `class`.
fn refusals(hub: &Hub, class: &str) -> f64 {
    let response = hub.admin("GET", "/metrics", None);
    assert_eq!(response.status, 200, "{response:?}");
    let label = format!("class=\"{class}\"");
    response
        .text()
        .lines()
        .filter(|line| line.starts_with("kasi_refusals_total{") && line.contains(&label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits (with a deadline) until `class` counted at least `at_least`.
fn await_refusals(hub: &Hub, class: &str, at_least: f64) {
    let deadline = Instant::now() + CALLBACK_WAIT;
    loop {
        let counted = refusals(hub, class);
        if counted >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kasi_refusals_total{{class=\"{class}\"}} is {counted}, expected at least {at_least}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_malformed(response: &Response, naming: &str, why: &str) {
    assert_eq!(response.status, 400, "{why}: {response:?}");
    let error = response.json();
    assert_eq!(
        error["errorInformation"]["errorCode"],
        json!("3101"),
        "{why}: {error}"
    );
    let description = error["errorInformation"]["errorDescription"]
        .as_str()
        .unwrap_or_default();
    assert!(description.contains(naming), "{why}: {description}");
}

/// Ids whose decoded form is a new segment, a query, a fragment, a dot
/// segment or a control character: `..%2F`, `%2F`, `%3F`, `%23`,
/// `%0D%0A`, `%00`, a bare dot segment, and an encoded one.
const URL_SYNTAX_IDS: &[&str] = &[
    "..%2F..%2Fadmin",
    "255%2F700",
    "255%3Fx=1",
    "255%23frag",
    "255%0D%0AFAKE",
    "255%00",
    "255%1B%5B2J",
    "..",
    "%2E%2E",
];

#[test]
fn party_ids_that_would_be_url_syntax_are_refused_at_the_door() {
    let scheme = Scheme::new(&[]);
    let before = refusals(&scheme.hub, "path_syntax");
    let mut refused = 0.0;
    for id in URL_SYNTAX_IDS {
        let why = format!("GET /parties/MSISDN/{id}");
        assert_malformed(
            &scheme.lookup(&format!("MSISDN/{id}")),
            "path parameter ID",
            &why,
        );
        let why = format!("PUT /parties/MSISDN/{id}");
        let answer = scheme.answer(&format!("MSISDN/{id}"), "MSISDN", ALICE);
        assert_malformed(&answer, "path parameter ID", &why);
        let why = format!("POST /participants/MSISDN/{id}");
        let registration = scheme.register(PAYEE, &format!("MSISDN/{id}"));
        assert_malformed(&registration, "path parameter ID", &why);
        let why = format!("GET /parties/MSISDN/{ALICE}/{id}");
        let sub_id = scheme.lookup(&format!("MSISDN/{ALICE}/{id}"));
        assert_malformed(&sub_id, "path parameter SubId", &why);
        refused += 4.0;
    }
    scheme.assert_nothing_delivered();
    await_refusals(&scheme.hub, "path_syntax", before + refused);
    // Nothing was registered: the holder of ALICE is still the payee, and
    // a lookup still arrives there.
    scheme.lookup_arrives();
    scheme.payer.assert_quiet(QUIET_WAIT);
}

/// FSPIOP gives `PartyIdentifier` no pattern: `+`, `@`, a space, `;`, `%`
/// and letters beyond ASCII are data, carried to the holder percent-encoded
/// as one path segment.
#[test]
fn party_ids_with_special_characters_reach_the_holder_correctly_encoded() {
    let scheme = Scheme::new(&[]);
    // "+1 bob@example.org;v=100%é", as a DFSP sends it.
    let sent = "+1%20bob@example.org%3Bv=100%25%C3%A9";
    let identifier = "+1 bob@example.org;v=100%é";
    let expected = "+1%20bob@example.org%3Bv=100%25%C3%A9";
    let path = format!("ALIAS/{sent}");

    let response = scheme.register(PAYEE, &path);
    assert_eq!(response.status, 202, "{response:?}");
    scheme
        .payee
        .expect("PUT", &format!("/participants/ALIAS/{expected}"));

    let response = scheme.lookup(&path);
    assert_eq!(response.status, 202, "{response:?}");
    scheme
        .payee
        .expect("GET", &format!("/parties/ALIAS/{expected}"));

    let response = scheme.answer(&path, "ALIAS", identifier);
    assert_eq!(response.status, 200, "{response:?}");
    let received = scheme
        .payer
        .expect("PUT", &format!("/parties/ALIAS/{expected}"));
    assert_eq!(
        received.json()["party"]["partyIdInfo"]["partyIdentifier"],
        json!(identifier)
    );

    // A sub-id too (the `_SUB_ID_` endpoints).
    let response = scheme.lookup(&format!("MSISDN/{ALICE}/home%201"));
    assert_eq!(response.status, 202, "{response:?}");
    // The payee holds ALICE without a sub-id; the lookup with one is not
    // found: the hub answers the payer at its sub-id error endpoint.
    let received = scheme.payer.next("the sub-id lookup's answer");
    assert_eq!(
        received.path,
        format!("/parties/MSISDN/{ALICE}/home%201/error"),
        "{received:?}"
    );
}

/// Two values of a header that names who speaks, or to whom.
#[test]
fn a_repeated_fspiop_source_or_destination_is_refused_on_every_route() {
    let scheme = Scheme::new(&[]);
    let before = refusals(&scheme.hub, "duplicate_header");
    let twice = |headers: Vec<(String, String)>, name: &str, second: &str| {
        let mut headers = headers;
        headers.push((name.to_string(), second.to_string()));
        headers
    };
    let mut refused = 0.0;
    for (name, second) in [
        ("FSPIOP-Source", PAYEE),
        ("FSPIOP-Source", PAYER),
        ("FSPIOP-Destination", PAYER),
    ] {
        let why = format!("{name} twice, the second {second}");
        let naming = format!("header {name} appears more than once");
        // A lookup.
        let headers = resource_headers("parties", "1.0", PAYER, Some(PAYEE), true);
        let response = scheme.lookup_with(&format!("MSISDN/{ALICE}"), twice(headers, name, second));
        assert_malformed(&response, &naming, &why);
        // A registration.
        let headers = resource_headers("participants", "1.0", PAYEE, Some(PAYEE), true);
        let response = scheme.register_with("MSISDN/255700000002", twice(headers, name, second));
        assert_malformed(&response, &naming, &why);
        // A prepare.
        let body = prepare_body(&new_id(), PAYER, PAYEE, "1", far_future());
        let headers = twice(fspiop_headers(PAYER, PAYEE, true), name, second);
        let response = scheme
            .hub
            .api("POST", "/transfers", &headers, body.as_bytes());
        assert_malformed(&response, &naming, &why);
        // A quote.
        let headers = twice(
            resource_headers("quotes", "1.0", PAYER, Some(PAYEE), true),
            name,
            second,
        );
        let response = scheme.hub.api("POST", "/quotes", &headers, b"{}");
        assert_malformed(&response, &naming, &why);
        refused += 4.0;
    }
    scheme.assert_nothing_delivered();
    await_refusals(&scheme.hub, "duplicate_header", before + refused);
    assert_eq!(
        scheme.hub.position(PAYER),
        0.0,
        "no prepare reserved anything"
    );
    scheme.lookup_arrives();
}

#[test]
fn a_repeated_identity_header_is_refused_in_trusted_proxy_mode() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start_with(
        &dir.path().join("data"),
        &[
            "--trusted-proxy",
            "127.0.0.1/32",
            "--client-identity-header",
            "X-Client-Identity",
        ],
    );
    hub.setup();
    let payee = Stub::start(PAYEE);
    hub.onboard(PAYER, &payee.base_url(), 10_000, 5_000);
    hub.onboard(PAYEE, &payee.base_url(), 10_000, 5_000);
    let trusted: IpAddr = "127.0.0.1".parse().unwrap();
    let prepare = |identities: &[&str]| {
        let body = prepare_body(&new_id(), PAYER, PAYEE, "1", far_future());
        let mut headers = fspiop_headers(PAYER, PAYEE, true);
        for identity in identities {
            headers.push(("X-Client-Identity".into(), identity.to_string()));
        }
        http_from(
            trusted,
            hub.api,
            "POST",
            "/transfers",
            &headers,
            body.as_bytes(),
        )
    };
    let before = refusals(&hub, "duplicate_header");
    for identities in [[PAYER, PAYER], [PAYER, PAYEE], [PAYEE, PAYER]] {
        let why = format!("X-Client-Identity {identities:?}");
        assert_malformed(
            &prepare(&identities),
            "header x-client-identity appears more than once",
            &why,
        );
    }
    payee.assert_quiet(QUIET_WAIT);
    await_refusals(&hub, "duplicate_header", before + 3.0);
    assert_eq!(hub.position(PAYER), 0.0, "nothing reserved");

    // One header, as a gateway that overwrites it sends it.
    let response = prepare(&[PAYER]);
    assert_eq!(response.status, 202, "{response:?}");
    payee.expect("POST", "/transfers");
    assert_eq!(hub.position(PAYER), 1.0);
}

#[test]
fn a_date_far_from_the_hubs_clock_is_refused_only_when_the_scheme_asks() {
    let hour_ms = 3_600_000;
    let dated = |offset_ms: i64| {
        with_header(
            resource_headers("parties", "1.0", PAYER, None, true),
            "Date",
            &http_date(now_ms() + offset_ms),
        )
    };

    let strict = Scheme::new(&["--max-clock-skew-s", "60"]);
    let before = refusals(&strict.hub, "stale_date");
    for (offset, direction) in [(-hour_ms, "behind"), (hour_ms, "ahead of")] {
        let response = strict.lookup_with(&format!("MSISDN/{ALICE}"), dated(offset));
        assert_eq!(response.status, 400, "{direction}: {response:?}");
        let error = response.json();
        assert_eq!(
            error["errorInformation"]["errorCode"],
            json!("3100"),
            "{error}"
        );
        let description = error["errorInformation"]["errorDescription"]
            .as_str()
            .unwrap_or_default();
        assert!(
            description.contains("header Date is")
                && description.contains(direction)
                && description.contains("at most 60 s"),
            "{description}"
        );
    }
    strict.assert_nothing_delivered();
    await_refusals(&strict.hub, "stale_date", before + 2.0);
    // Within the allowed skew, it is routed.
    let response = strict.lookup_with(&format!("MSISDN/{ALICE}"), dated(-20_000));
    assert_eq!(response.status, 202, "{response:?}");
    strict
        .payee
        .expect("GET", &format!("/parties/MSISDN/{ALICE}"));
    drop(strict);

    // Off by default, as in Mojaloop: an hour-old Date is routed.
    let lenient = Scheme::new(&[]);
    let response = lenient.lookup_with(&format!("MSISDN/{ALICE}"), dated(-hour_ms));
    assert_eq!(response.status, 202, "{response:?}");
    lenient
        .payee
        .expect("GET", &format!("/parties/MSISDN/{ALICE}"));
    assert_eq!(refusals(&lenient.hub, "stale_date"), 0.0);
}

/// CR/LF (and NUL, ESC) sent through path values, JSON values and headers
/// that the hub logs cannot start a line of their own, in either log
/// format. The admin API's settlement model name reaches the log as the
/// audit target; a party id as a refusal's detail; FSPIOP-Source as the
/// refusal's claimed participant.
#[test]
fn no_request_value_forges_a_log_line_in_either_format() {
    for format in ["text", "json"] {
        let scheme = Scheme::new(&["--log-format", format]);
        let hub = &scheme.hub;
        let forged = "m\r\nFAKE LOG LINE\u{0}\u{1b}[2J";

        // A JSON value: the settlement model's name, the audit target.
        let model = json!({
            "name": forged,
            "settlementGranularity": "NET",
            "settlementInterchange": "MULTILATERAL",
            "settlementDelay": "DEFERRED",
            "requireLiquidityCheck": true,
            "ledgerAccountType": "POSITION",
            "autoPositionReset": true,
        });
        let response = hub.admin("POST", "/settlementModels", Some(&model));
        assert!(response.status < 500, "{response:?}");

        // Path values, decoded by the router, on each party route.
        let id = "1%0D%0AFAKE%20LOG%20LINE%00%1B";
        assert_eq!(scheme.lookup(&format!("MSISDN/{id}")).status, 400);
        assert_eq!(scheme.register(PAYEE, &format!("MSISDN/{id}")).status, 400);
        assert_eq!(
            scheme.answer(&format!("MSISDN/{id}"), "MSISDN", "1").status,
            400
        );
        // A header value that is logged (the claimed participant of a
        // refusal): raw CR/LF cannot cross HTTP/1.1, so a duplicate source
        // carrying what can (obs-text).
        let mut headers = resource_headers("parties", "1.0", "payer\u{85}FAKE", None, true);
        headers.push(("FSPIOP-Source".into(), PAYER.into()));
        assert_eq!(
            scheme
                .lookup_with(&format!("MSISDN/{ALICE}"), headers)
                .status,
            400
        );
        scheme.assert_nothing_delivered();

        // The injected values reached the log (a refusal's detail names
        // the decoded id), so the check below looked at a log that holds
        // them.
        assert!(
            hub.wait_for_log("FAKE LOG LINE", CALLBACK_WAIT),
            "{format}: the injected value is not in the log (model: {response:?})"
        );
        // A control message after the injections, logged after them.
        scheme.lookup_arrives();
        let log = hub.log();
        for line in log.lines() {
            assert!(
                !line.starts_with("FAKE") && !line.contains('\r') && !line.contains('\u{1b}'),
                "{format}: forged or raw line {line:?} in:\n{log}"
            );
            if format == "json" {
                assert!(
                    serde_json::from_str::<serde_json::Value>(line).is_ok(),
                    "not one JSON object: {line:?}"
                );
            }
        }
        assert!(!log.contains('\0'), "{format}: NUL in the log:\n{log}");
    }
}
