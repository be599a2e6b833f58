//! External oracles through the real `kasi serve` binary: ALS's oracle
//! admin API (`GET`/`POST /oracles`, `PUT`/`DELETE /oracles/{ID}`) on the
//! admin address, and party lookups the built-in registry cannot answer
//! resolved through a stub oracle speaking Mojaloop's oracle API
//! (`GET /participants/{Type}/{ID}` → `{"partyList":[{"fspId"}]}`), with
//! answers cached (MOJALOOP-REFERENCE.md §2.1).

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{json, Value};
use support::*;

// ------------------------------------------------------------- the oracle

/// One request the stub oracle received.
#[derive(Clone, Debug)]
struct OracleCall {
    /// Path and query, e.g. `/participants/MSISDN/123?currency=USD`.
    target: String,
    source: Option<String>,
}

#[derive(Default)]
struct OracleState {
    calls: AtomicUsize,
    seen: Mutex<Vec<OracleCall>>,
}

/// A stub oracle. It answers `GET /participants/{Type}/{ID}` by the ID's
/// first digit: `9…` an empty partyList, `2…` an unknown FSP then the
/// payee, `4…` HTTP 404, `5…` HTTP 500, anything else the payee.
struct Oracle {
    address: SocketAddr,
    state: Arc<OracleState>,
    task: tokio::task::JoinHandle<()>,
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("oracle-stub")
            .enable_all()
            .build()
            .unwrap()
    })
}

async fn answer(
    axum::extract::State(state): axum::extract::State<Arc<OracleState>>,
    axum::extract::Path((_id_type, id)): axum::extract::Path<(String, String)>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    state.calls.fetch_add(1, Ordering::SeqCst);
    let target = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let source = request
        .headers()
        .get("fspiop-source")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    state
        .seen
        .lock()
        .unwrap()
        .push(OracleCall { target, source });
    let list = match id.chars().next() {
        Some('9') => json!([]),
        Some('2') => json!([{"fspId": "unknownfsp"}, {"fspId": PAYEE, "currency": "USD"}]),
        Some('4') => {
            return (
                axum::http::StatusCode::NOT_FOUND,
                axum::Json(json!({"errorInformation": {"errorCode": "3204", "errorDescription": "Party not found"}})),
            )
                .into_response()
        }
        Some('5') => return axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        _ => json!([{"fspId": PAYEE}]),
    };
    axum::Json(json!({ "partyList": list })).into_response()
}

impl Oracle {
    fn start() -> Oracle {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let state = Arc::new(OracleState::default());
        let app = axum::Router::new()
            .route("/participants/:id_type/:id", axum::routing::get(answer))
            .with_state(state.clone());
        let task = runtime().spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let _ = axum::serve(listener, app).await;
        });
        Oracle {
            address,
            state,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    fn calls(&self) -> usize {
        self.state.calls.load(Ordering::SeqCst)
    }

    fn last_call(&self) -> OracleCall {
        self.state
            .seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("the oracle was called")
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An address nothing listens on.
fn closed_address() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

// ------------------------------------------------------------------ set-up

const LOOKUP_ENDPOINTS: &[(&str, &str)] = &[
    (
        "FSPIOP_CALLBACK_URL_PARTICIPANT_PUT",
        "/participants/{{partyIdType}}/{{partyIdentifier}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTICIPANT_PUT_ERROR",
        "/participants/{{partyIdType}}/{{partyIdentifier}}/error",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTIES_GET",
        "/parties/{{partyIdType}}/{{partyIdentifier}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTIES_SUB_ID_GET",
        "/parties/{{partyIdType}}/{{partyIdentifier}}/{{partySubIdOrType}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTIES_PUT_ERROR",
        "/parties/{{partyIdType}}/{{partyIdentifier}}/error",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTIES_SUB_ID_PUT_ERROR",
        "/parties/{{partyIdType}}/{{partyIdentifier}}/{{partySubIdOrType}}/error",
    ),
];

/// A hub with a payer and a payee, both with the lookup endpoints.
struct Lookup {
    hub: Hub,
    payer: Stub,
    payee: Stub,
    dir: tempfile::TempDir,
}

impl Lookup {
    fn new() -> Lookup {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::start(&dir.path().join("data"));
        let (payer, payee) = hub.payer_and_payee(LOOKUP_ENDPOINTS);
        Lookup {
            hub,
            payer,
            payee,
            dir,
        }
    }

    /// `GET /parties/{path}` from the payer without FSPIOP-Destination,
    /// which must be accepted.
    fn lookup(&self, path: &str) {
        let response = self.hub.api(
            "GET",
            &format!("/parties/{path}"),
            &resource_headers("parties", "1.0", PAYER, None, true),
            b"",
        );
        assert_eq!(response.status, 202, "GET /parties/{path}: {response:?}");
    }

    /// The payee must get the payer's lookup of `path`, routed to it.
    fn expect_forwarded(&self, path: &str) {
        let received = self.payee.expect("GET", &format!("/parties/{path}"));
        assert_eq!(
            received.header("fspiop-source"),
            Some(PAYER),
            "{received:?}"
        );
        assert_eq!(
            received.header("fspiop-destination"),
            Some(PAYEE),
            "{received:?}"
        );
    }

    /// The payer must get the hub's `PUT /{resource}/{path}/error` with `code`.
    fn expect_error(&self, resource: &str, path: &str, code: &str) -> Value {
        let received = self
            .payer
            .expect("PUT", &format!("/{resource}/{path}/error"));
        assert_eq!(
            received.header("fspiop-source"),
            Some(HUB_NAME),
            "{received:?}"
        );
        assert_eq!(
            received.header("fspiop-destination"),
            Some(PAYER),
            "{received:?}"
        );
        let info = received.json()["errorInformation"].clone();
        assert_eq!(info["errorCode"], json!(code), "{received:?}");
        assert!(
            info["errorDescription"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{received:?}"
        );
        info
    }
}

fn oracle_body(id_type: &str, url: &str, currency: Option<&str>, is_default: bool) -> Value {
    json!({
        "oracleIdType": id_type,
        "endpoint": {"value": url, "endpointType": "URL"},
        "currency": currency,
        "isDefault": is_default,
    })
}

/// `POST /oracles`, which must answer 201; the new oracle's id.
fn create_oracle(hub: &Hub, body: Value) -> u64 {
    let response = hub.admin_expect("POST", "/oracles", Some(body), 201);
    response.json()["oracleId"]
        .as_u64()
        .unwrap_or_else(|| panic!("no oracleId in {response:?}"))
}

fn list_oracles(hub: &Hub, query: &str) -> Vec<Value> {
    let response = hub.admin_expect("GET", &format!("/oracles{query}"), None, 200);
    response
        .json()
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {response:?}"))
        .clone()
}

// ------------------------------------------------------------------- tests

#[test]
fn a_party_the_registry_does_not_hold_is_routed_by_the_oracle_and_cached() {
    let setup = Lookup::new();
    let oracle = Oracle::start();
    let id = create_oracle(
        &setup.hub,
        oracle_body("MSISDN", &oracle.url(), Some("USD"), true),
    );
    assert_eq!(
        list_oracles(&setup.hub, ""),
        [json!({
            "oracleId": id,
            "oracleIdType": "MSISDN",
            "endpoint": {"value": oracle.url(), "endpointType": "URL"},
            "currency": "USD",
            "isDefault": true,
            "isActive": 1,
        })]
    );

    setup.lookup("MSISDN/123");
    setup.expect_forwarded("MSISDN/123");
    assert_eq!(oracle.calls(), 1);
    let call = oracle.last_call();
    assert_eq!(call.target, "/participants/MSISDN/123");
    assert_eq!(
        call.source.as_deref(),
        Some(PAYER),
        "FSPIOP-Source passed on"
    );

    // Within the TTL the answer is reused: no second call.
    setup.lookup("MSISDN/123");
    setup.expect_forwarded("MSISDN/123");
    assert_eq!(oracle.calls(), 1, "the second lookup must use the cache");
    // The participant lookup shares the answer.
    let response = setup.hub.api(
        "GET",
        "/participants/MSISDN/123",
        &resource_headers("participants", "1.0", PAYER, None, true),
        b"",
    );
    assert_eq!(response.status, 202, "{response:?}");
    let put = setup.payer.expect("PUT", "/participants/MSISDN/123");
    assert_eq!(put.json(), json!({"fspId": PAYEE}), "{put:?}");
    assert_eq!(oracle.calls(), 1);

    // The currency in the query string selects the oracle and is passed on.
    setup.lookup("MSISDN/123?currency=USD");
    setup.expect_forwarded("MSISDN/123");
    assert_eq!(oracle.calls(), 2, "another currency is another question");
    assert_eq!(
        oracle.last_call().target,
        "/participants/MSISDN/123?currency=USD"
    );

    // A sub-id goes to the oracle as partySubIdOrType.
    setup.lookup("MSISDN/123/home");
    setup.expect_forwarded("MSISDN/123/home");
    assert_eq!(
        oracle.last_call().target,
        "/participants/MSISDN/123?partySubIdOrType=home"
    );

    // The first FSP listed that is a participant here is the holder.
    setup.lookup("MSISDN/2001");
    setup.expect_forwarded("MSISDN/2001");

    // An empty partyList (or a 404) is 3204 to the requester, and cached.
    let calls = oracle.calls();
    setup.lookup("MSISDN/999");
    setup.expect_error("parties", "MSISDN/999", "3204");
    setup.lookup("MSISDN/999");
    setup.expect_error("parties", "MSISDN/999", "3204");
    assert_eq!(oracle.calls(), calls + 1, "a negative answer is cached too");
    setup.lookup("MSISDN/404");
    setup.expect_error("parties", "MSISDN/404", "3204");

    // A type an external oracle serves is the oracle's alone: registering
    // one of its parties in the built-in registry (here the payer claiming
    // a number the oracle gives the payee, to redirect its payments) is
    // refused, and the lookup still goes where the oracle says.
    let calls = oracle.calls();
    let response = setup.hub.api(
        "POST",
        "/participants/MSISDN/777",
        &resource_headers("participants", "1.0", PAYER, None, true),
        format!(r#"{{"fspId":"{PAYER}","currency":"USD"}}"#).as_bytes(),
    );
    assert_eq!(response.status, 202, "{response:?}");
    let info = setup.expect_error("participants", "MSISDN/777", "3100");
    assert!(
        info["errorDescription"]
            .as_str()
            .is_some_and(|text| text.contains("external oracle")),
        "{info}"
    );
    setup.hub.await_refusals("oracle_served", Some(PAYER), 1);
    setup.lookup("MSISDN/777");
    setup.expect_forwarded("MSISDN/777");
    assert_eq!(oracle.calls(), calls + 1);
    let calls = oracle.calls();

    // Other types have no oracle: 3204 as before, nothing asked.
    setup.lookup("EMAIL/a@b.org");
    setup.expect_error("parties", "EMAIL/a@b.org", "3204");
    assert_eq!(oracle.calls(), calls);

    // Deleted, the oracle is no longer asked.
    setup
        .hub
        .admin_expect("DELETE", &format!("/oracles/{id}"), None, 204);
    assert!(list_oracles(&setup.hub, "").is_empty());
    setup.lookup("MSISDN/456");
    setup.expect_error("parties", "MSISDN/456", "3204");
    assert_eq!(oracle.calls(), calls);
    let response = setup.hub.admin("DELETE", &format!("/oracles/{id}"), None);
    assert_error_response(&response, 400, "3200");
    setup.payer.assert_quiet(QUIET_WAIT);
    setup.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn an_oracle_that_fails_gets_the_requester_a_2006_error() {
    let setup = Lookup::new();
    // Nothing listens: the connection is refused.
    create_oracle(
        &setup.hub,
        oracle_body(
            "MSISDN",
            &format!("http://{}", closed_address()),
            None,
            true,
        ),
    );
    setup.lookup("MSISDN/123");
    setup.expect_error("parties", "MSISDN/123", "2006");
    let response = setup.hub.api(
        "GET",
        "/participants/MSISDN/123",
        &resource_headers("participants", "1.0", PAYER, None, true),
        b"",
    );
    assert_eq!(response.status, 202, "{response:?}");
    setup.expect_error("participants", "MSISDN/123", "2006");

    // An oracle answering 500: 2006, and the failure is not cached.
    let oracle = Oracle::start();
    create_oracle(&setup.hub, oracle_body("EMAIL", &oracle.url(), None, false));
    setup.lookup("EMAIL/5@x.org");
    setup.expect_error("parties", "EMAIL/5@x.org", "2006");
    setup.lookup("EMAIL/5@x.org");
    setup.expect_error("parties", "EMAIL/5@x.org", "2006");
    assert_eq!(oracle.calls(), 2);

    // An oracle that accepts the connection and never answers: 2006 after
    // the request timeout.
    let blackhole = Blackhole::start();
    create_oracle(
        &setup.hub,
        oracle_body("ALIAS", &blackhole.base_url(), None, false),
    );
    setup.lookup("ALIAS/someone");
    setup.expect_error("parties", "ALIAS/someone", "2006");
    assert!(blackhole.accepted() >= 1);
    setup.payee.assert_quiet(QUIET_WAIT);
}

#[test]
fn the_admin_api_checks_oracles_and_filters_the_list() {
    let setup = Lookup::new();
    let hub = &setup.hub;
    let first = create_oracle(
        hub,
        oracle_body("MSISDN", "http://oracle-a", Some("USD"), true),
    );
    let second = create_oracle(
        hub,
        oracle_body("MSISDN", "http://oracle-b", Some("EUR"), false),
    );
    let third = create_oracle(
        hub,
        json!({"oracleIdType": "EMAIL", "endpoint": {"value": "http://oracle-c", "endpointType": "URL"}}),
    );
    assert!(first < second && second < third);

    let ids = |query: &str| -> Vec<u64> {
        list_oracles(hub, query)
            .iter()
            .map(|o| o["oracleId"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(ids(""), [first, second, third]);
    assert_eq!(ids("?type=MSISDN"), [first, second]);
    assert_eq!(ids("?currency=EUR"), [second]);
    assert_eq!(ids("?type=MSISDN&currency=USD"), [first]);
    assert_eq!(ids("?type=IBAN"), Vec::<u64>::new());
    let email = &list_oracles(hub, "?type=EMAIL")[0];
    // As ALS answers: the key is there, null (not left out).
    assert_eq!(email.get("currency"), Some(&Value::Null), "{email}");
    assert_eq!(email["isDefault"], json!(false));

    // Refusals, each in the FSPIOP error body.
    for (body, code) in [
        // Same (type, currency) as a live oracle, as ALS: 3003.
        (
            oracle_body("MSISDN", "http://x", Some("USD"), false),
            "3003",
        ),
        // A second default for a type.
        (oracle_body("MSISDN", "http://x", None, true), "3003"),
        (oracle_body("MSISDN_X", "http://x", None, false), "3100"),
        // Neither http nor https, or credentials in the URL.
        (oracle_body("MSISDN", "ftp://x", Some("KES"), false), "3100"),
        (
            oracle_body("MSISDN", "https://user:secret@x", Some("KES"), false),
            "3100",
        ),
        (
            oracle_body("MSISDN", "oracle:80", Some("KES"), false),
            "3100",
        ),
        (oracle_body("MSISDN", "http://x", Some("XX"), false), "3100"),
        (json!({"oracleIdType": "MSISDN"}), "3102"),
        (json!({"endpoint": {"value": "http://x"}}), "3102"),
        (
            json!({"oracleIdType": "IBAN", "endpoint": {"value": "http://x", "endpointType": "EMAIL"}}),
            "3100",
        ),
    ] {
        let response = hub.admin("POST", "/oracles", Some(&body));
        assert_error_response(&response, 400, code);
    }
    let response = http(
        hub.admin,
        "POST",
        "/oracles",
        &[("Content-Type".into(), "application/json".into())],
        b"{not json",
    );
    assert_error_response(&response, 400, "3101");

    // PUT changes only the fields given; "currency": null clears it.
    hub.admin_expect(
        "PUT",
        &format!("/oracles/{second}"),
        Some(json!({"endpoint": {"value": "http://oracle-b2", "endpointType": "URL"}})),
        204,
    );
    let updated = list_oracles(hub, "?currency=EUR");
    assert_eq!(updated[0]["endpoint"]["value"], json!("http://oracle-b2"));
    assert_eq!(updated[0]["isDefault"], json!(false));
    hub.admin_expect(
        "PUT",
        &format!("/oracles/{second}"),
        Some(json!({"currency": null})),
        204,
    );
    assert_eq!(ids("?currency=EUR"), Vec::<u64>::new());
    // Into another oracle's slot: refused.
    let response = hub.admin(
        "PUT",
        &format!("/oracles/{second}"),
        Some(&json!({"currency": "USD"})),
    );
    assert_error_response(&response, 400, "3003");
    let response = hub.admin("PUT", "/oracles/999", Some(&json!({"isDefault": false})));
    assert_error_response(&response, 400, "3200");
    let response = hub.admin("PUT", "/oracles/abc", Some(&json!({})));
    assert_error_response(&response, 400, "3101");
    let response = hub.admin("DELETE", "/oracles/0", None);
    assert_error_response(&response, 400, "3101");
}

#[test]
fn oracle_configuration_survives_a_restart_and_ids_are_not_reused() {
    let mut setup = Lookup::new();
    let oracle = Oracle::start();
    let msisdn = create_oracle(
        &setup.hub,
        oracle_body("MSISDN", "http://old-oracle", None, true),
    );
    setup.hub.admin_expect(
        "PUT",
        &format!("/oracles/{msisdn}"),
        Some(json!({"endpoint": {"value": oracle.url(), "endpointType": "URL"}})),
        204,
    );
    let email = create_oracle(&setup.hub, oracle_body("EMAIL", &oracle.url(), None, false));
    let alias = create_oracle(&setup.hub, oracle_body("ALIAS", &oracle.url(), None, false));
    setup
        .hub
        .admin_expect("DELETE", &format!("/oracles/{alias}"), None, 204);
    let before = list_oracles(&setup.hub, "");
    assert_eq!(before.len(), 2);

    assert!(setup.hub.terminate().success());
    setup.hub = Hub::start(&setup.dir.path().join("data"));
    assert_eq!(list_oracles(&setup.hub, ""), before);

    // The restarted hub asks the oracle as configured.
    setup.lookup("MSISDN/123");
    setup.expect_forwarded("MSISDN/123");
    assert_eq!(oracle.calls(), 1);
    assert_eq!(oracle.last_call().target, "/participants/MSISDN/123");

    // A deleted oracle's id is not given again, even after a restart.
    let next = create_oracle(&setup.hub, oracle_body("ALIAS", &oracle.url(), None, false));
    assert!(next > alias && alias > email && email > msisdn, "{next}");
}
