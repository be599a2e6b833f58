//! Inter-scheme through the real `kasi serve` binary (issue 34,
//! docs/design/interscheme.md): proxy participants created as Mojaloop's
//! onboarding creates them (`"isProxy": true` on `POST /participants`),
//! listed by central-ledger's filter, and the proxy map on the admin
//! address — set and deleted by the operator, audited, in the change feed,
//! durable across a restart.

mod support;

use serde_json::{json, Value};
use support::*;

/// `POST /participants` as central-ledger's onboarding sends it.
fn create(hub: &Hub, name: &str, is_proxy: Option<Value>) -> Value {
    let mut body = json!({"name": name, "currency": "USD"});
    if let Some(flag) = is_proxy {
        body["isProxy"] = flag;
    }
    hub.admin_expect("POST", "/participants", Some(body), 201)
        .json()
}

fn names(hub: &Hub, query: &str) -> Vec<String> {
    let response = hub.admin_expect("GET", &format!("/participants{query}"), None, 200);
    let mut names: Vec<String> = response
        .json()
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {response:?}"))
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

fn proxy_map(hub: &Hub) -> Vec<Value> {
    hub.admin_expect("GET", "/proxyMap", None, 200)
        .json()
        .as_array()
        .expect("a list")
        .clone()
}

#[test]
fn proxies_are_onboarded_as_mojaloop_does_and_the_operator_maps_dfsps_to_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut hub = Hub::start(&data);
    hub.setup();
    create(&hub, "payerfsp", None);
    let proxy = create(&hub, "pxAB", Some(json!(true)));
    assert_eq!(proxy["isProxy"], json!(1), "{proxy}");
    // The string form central-ledger's Joi boolean converts, and false.
    create(&hub, "pxAC", Some(json!("true")));
    create(&hub, "payeefsp", Some(json!(false)));
    let refused = hub.admin(
        "POST",
        "/participants",
        Some(&json!({"name": "odd", "currency": "USD", "isProxy": "yes"})),
    );
    assert_error_response(&refused, 400, "3100");
    assert_eq!(names(&hub, "?isProxy=true"), ["pxAB", "pxAC"]);
    assert_eq!(names(&hub, "?isProxy=1"), ["pxAB", "pxAC"]);
    assert_eq!(
        names(&hub, "?isProxy=false"),
        ["Hub", "payeefsp", "payerfsp"]
    );
    assert_eq!(names(&hub, "").len(), 5);
    let payer = hub.admin_expect("GET", "/participants/payerfsp", None, 200);
    assert_eq!(payer.json()["isProxy"], json!(0));
    // A proxy has positions and accounts like any DFSP.
    hub.admin_expect(
        "POST",
        "/participants/pxAB/initialPositionAndLimits",
        Some(json!({"currency": "USD", "limit": {"type": "NET_DEBIT_CAP", "value": 1000}, "initialPosition": 0})),
        201,
    );
    let positions = hub.admin_expect("GET", "/participants/pxAB/positions", None, 200);
    assert_eq!(positions.json()[0]["value"], json!(0), "{positions:?}");

    // The operator's entries: 201 when new, 200 when replaced.
    let set = hub.admin_expect(
        "PUT",
        "/proxyMap/dfspB",
        Some(json!({"proxy": "pxAB"})),
        201,
    );
    assert_eq!(set.json()["proxy"], json!("pxAB"));
    assert_eq!(set.json()["source"], json!("operator"));
    hub.admin_expect(
        "PUT",
        "/proxyMap/dfspB",
        Some(json!({"proxy": "pxAC"})),
        200,
    );
    hub.admin_expect(
        "PUT",
        "/proxyMap/dfspC",
        Some(json!({"proxy": "pxAB"})),
        201,
    );
    // A DFSP of this scheme is never mapped; only proxies are mapped to.
    for (dfsp, body, code, status) in [
        ("payerfsp", json!({"proxy": "pxAB"}), "3100", 400),
        ("dfspD", json!({"proxy": "payeefsp"}), "3100", 400),
        ("dfspD", json!({"proxy": "nobody"}), "3200", 400),
        ("dfspD", json!({"proxi": "pxAB"}), "3101", 400),
    ] {
        let response = hub.admin("PUT", &format!("/proxyMap/{dfsp}"), Some(&body));
        assert_error_response(&response, status, code);
    }
    let map = proxy_map(&hub);
    assert_eq!(map.len(), 2, "{map:?}");
    assert_eq!(
        (&map[0]["fspId"], &map[0]["proxy"]),
        (&json!("dfspB"), &json!("pxAC"))
    );
    assert_eq!(
        (&map[1]["fspId"], &map[1]["proxy"]),
        (&json!("dfspC"), &json!("pxAB"))
    );
    hub.admin_expect("DELETE", "/proxyMap/dfspC", None, 204);
    let again = hub.admin("DELETE", "/proxyMap/dfspC", None);
    assert_error_response(&again, 400, "3200");

    // Each change audited with the entry before and after.
    let events = hub.admin_expect("GET", "/audit-events?limit=1000", None, 200);
    let events: Vec<Value> = events.json().as_array().expect("a list").clone();
    let of = |action: &str, target: &str| -> Vec<Value> {
        events
            .iter()
            .filter(|e| e["action"] == json!(action) && e["target"] == json!(target))
            .cloned()
            .collect()
    };
    let sets = of("proxyMap.set", "proxyMap/dfspB");
    assert_eq!(sets.len(), 2, "{events:?}");
    let deletes = of("proxyMap.delete", "proxyMap/dfspC");
    assert!(!deletes.is_empty(), "{events:?}");
    assert!(
        deletes.iter().any(|e| e["after"].is_null()),
        "the entry gone after: {deletes:?}"
    );

    // The feed has the map's changes, in the commit of each.
    let feed = hub.admin_expect("GET", "/feed?after=0&limit=1000", None, 200);
    let kinds: Vec<(String, String)> = feed
        .text()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("NDJSON"))
        .filter(|row| {
            row["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("proxy."))
        })
        .map(|row| {
            (
                row["kind"].as_str().unwrap().to_string(),
                row["key"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let kinds: Vec<(&str, &str)> = kinds
        .iter()
        .map(|(k, d)| (k.as_str(), d.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("proxy.mapped", "dfspB"),
            ("proxy.mapped", "dfspB"),
            ("proxy.mapped", "dfspC"),
            ("proxy.unmapped", "dfspC"),
        ]
    );

    // Durable: the same after a restart.
    hub.terminate();
    let hub = Hub::start(&data);
    assert_eq!(names(&hub, "?isProxy=true"), ["pxAB", "pxAC"]);
    let map = proxy_map(&hub);
    assert_eq!(map.len(), 1, "{map:?}");
    assert_eq!(map[0]["fspId"], json!("dfspB"));
    assert_eq!(map[0]["proxy"], json!("pxAC"));
    assert_eq!(map[0]["source"], json!("operator"));

    // A DFSP of the other scheme that joins this one leaves the map.
    create(&hub, "dfspB", None);
    assert!(proxy_map(&hub).is_empty());
}

/// Rule 6 at the door: a message with FSPIOP-Proxy is taken only from the
/// caller authenticated as that proxy, through a participant created as a
/// proxy, for a source that is no participant here and that the map does
/// not place behind another proxy. Every refusal is 400 (3100), counted
/// `proxy_source`, and changes nothing.
#[test]
fn a_proxy_speaks_only_as_itself_and_only_for_its_schemes_dfsps() {
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
    let stub = Stub::start("dfsps");
    hub.onboard("payerfsp", &stub.base_url(), 10_000, 5_000);
    create(&hub, "pxAB", Some(json!(true)));
    create(&hub, "pxAC", Some(json!(true)));
    hub.admin_expect(
        "PUT",
        "/proxyMap/dfspC",
        Some(json!({"proxy": "pxAC"})),
        201,
    );
    let trusted: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    // A lookup, as a proxy passes one on: FSPIOP-Proxy set, the rest the
    // other scheme's DFSP's.
    let lookup = |identity: &str, proxies: &[&str], source: &str| {
        let mut headers = resource_headers("parties", "1.1", source, None, true);
        headers.push(("X-Client-Identity".into(), identity.into()));
        for proxy in proxies {
            headers.push(("FSPIOP-Proxy".into(), proxy.to_string()));
        }
        http_from(
            trusted,
            hub.api,
            "GET",
            "/parties/MSISDN/2557000",
            &headers,
            b"",
        )
    };
    let mut refused = hub.refusals("proxy_source", None);
    for (identity, proxy, source, why) in [
        ("payerfsp", "pxAB", "dfspB", "is not the client's identity"),
        ("pxAB", "pxAC", "dfspB", "is not the client's identity"),
        ("pxAB", "pxAB", "payerfsp", "a participant of this scheme"),
        ("pxAB", "pxAB", "pxAC", "a participant of this scheme"),
        ("pxAB", "pxAB", "dfspC", "behind another proxy"),
        (
            "payerfsp",
            "payerfsp",
            "dfspB",
            "not a participant created as a proxy",
        ),
        (
            "payerfsp",
            "payerfsp",
            "payerfsp",
            "not a participant created as a proxy",
        ),
        ("pxAB", "px AB", "dfspB", "is not a participant name"),
        ("pxAB", "pxAB", "", "names no DFSP it may carry"),
        ("pxAB", "pxAB", "dfsp B", "names no DFSP it may carry"),
    ] {
        let response = lookup(identity, &[proxy], source);
        let case = format!("{identity} as {proxy} for {source}");
        assert_error_response(&response, 400, "3100");
        let description = response.json()["errorInformation"]["errorDescription"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            description.contains("fspiop-proxy") && description.contains(why),
            "{case}: {description}"
        );
        refused += 1;
        assert_eq!(hub.refusals("proxy_source", None), refused, "{case}");
    }
    // One name only, as for FSPIOP-Source.
    let twice = lookup("pxAB", &["pxAB", "pxAB"], "dfspB");
    assert_error_response(&twice, 400, "3101");
    stub.assert_nothing_pending();

    // The proxy as itself, and for a DFSP of its scheme (mapped to it or
    // not in the map): past the door (what follows is the routes').
    for source in ["pxAB", "dfspB", "dfspZ"] {
        let response = lookup("pxAB", &["pxAB"], source);
        let text = response.text();
        assert!(
            !text.contains("fspiop-proxy") && !text.contains("is not a participant of this hub"),
            "{source}: {response:?}"
        );
    }
    assert_eq!(hub.refusals("proxy_source", None), refused);
    // Without FSPIOP-Proxy, a proxy is held to its own name as any DFSP.
    let mut headers = resource_headers("parties", "1.1", "dfspB", None, true);
    headers.push(("X-Client-Identity".into(), "pxAB".into()));
    let response = http_from(
        trusted,
        hub.api,
        "GET",
        "/parties/MSISDN/2557000",
        &headers,
        b"",
    );
    assert_error_response(&response, 400, "3100");
}

fn quote_body(quote_id: &str, payer: &str, payee: &str) -> String {
    format!(
        r#"{{"quoteId":"{quote_id}","transactionId":"{}","payee":{{"partyIdInfo":{}}},"payer":{{"partyIdInfo":{}}},"amountType":"SEND","amount":{{"currency":"USD","amount":"100"}},"transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}"#,
        new_id(),
        party_id_info(payee, "255700000001"),
        party_id_info(payer, "255700000002"),
    )
}

fn quote_put_body() -> String {
    format!(
        r#"{{"transferAmount":{{"currency":"USD","amount":"100"}},"expiration":"{}","ilpPacket":"{ILP_PACKET}","condition":"{CONDITION}"}}"#,
        fspiop_time(far_future())
    )
}

/// `POST /quotes` from the local `payer` to `payee` (which must be taken,
/// 202); the quote's id.
fn post_quote(hub: &Hub, payer: &str, payee: &str) -> String {
    let quote_id = new_id();
    let response = hub.api(
        "POST",
        "/quotes",
        &resource_headers("quotes", "1.1", payer, Some(payee), true),
        quote_body(&quote_id, payer, payee).as_bytes(),
    );
    assert_eq!(response.status, 202, "{response:?}");
    quote_id
}

/// The payer's side of a quote across schemes: a `POST /quotes` for a DFSP
/// the map places behind a proxy goes, unchanged, to the proxy; the answer
/// the proxy carries back reaches the payer byte for byte; an answer for
/// that DFSP carried by another proxy is refused at the door, and a DFSP
/// of the other scheme nothing maps is still 3201.
#[test]
fn a_quote_for_another_schemes_dfsp_goes_through_its_proxy_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    let payer = Stub::start("payerfsp");
    let far_side = Stub::start("pxAB");
    hub.onboard("payerfsp", &payer.base_url(), 10_000, 5_000);
    hub.add_endpoint("payerfsp", "FSPIOP_CALLBACK_URL_QUOTES", &payer.base_url());
    for proxy in ["pxAB", "pxAC"] {
        create(&hub, proxy, Some(json!(true)));
        hub.add_endpoint(proxy, "FSPIOP_CALLBACK_URL_QUOTES", &far_side.base_url());
    }
    hub.admin_expect(
        "PUT",
        "/proxyMap/dfspB",
        Some(json!({"proxy": "pxAB"})),
        201,
    );

    let quote_id = new_id();
    let body = quote_body(&quote_id, "payerfsp", "dfspB");
    let response = hub.api(
        "POST",
        "/quotes",
        &resource_headers("quotes", "1.1", "payerfsp", Some("dfspB"), true),
        body.as_bytes(),
    );
    assert_eq!(response.status, 202, "{response:?}");
    let passed = far_side.expect("POST", "/quotes");
    assert_eq!(passed.body, body.as_bytes(), "the payer's bytes");
    assert_eq!(passed.header("fspiop-source"), Some("payerfsp"));
    assert_eq!(passed.header("fspiop-destination"), Some("dfspB"));

    // The answer, as the proxy carries it back.
    let answer = quote_put_body();
    let carried = |proxy: &str| {
        let mut headers = resource_headers("quotes", "1.1", "dfspB", Some("payerfsp"), false);
        headers.push(("FSPIOP-Proxy".into(), proxy.into()));
        hub.api(
            "PUT",
            &format!("/quotes/{quote_id}"),
            &headers,
            answer.as_bytes(),
        )
    };
    let before = hub.refusals("proxy_source", None);
    let forged = carried("pxAC");
    assert_error_response(&forged, 400, "3100");
    assert_eq!(hub.refusals("proxy_source", None), before + 1);
    let response = carried("pxAB");
    assert_eq!(response.status, 200, "{response:?}");
    let delivered = payer.expect("PUT", &format!("/quotes/{quote_id}"));
    assert_eq!(delivered.body, answer.as_bytes(), "the payee's bytes");
    assert_eq!(delivered.header("fspiop-source"), Some("dfspB"));
    assert_eq!(
        delivered.header("fspiop-proxy"),
        None,
        "the header stays on the link"
    );

    // A DFSP of another scheme nothing maps: the payer hears 3201.
    let unmapped = post_quote(&hub, "payerfsp", "dfspZ");
    let told = payer.expect("PUT", &format!("/quotes/{unmapped}/error"));
    assert_eq!(told.json()["errorInformation"]["errorCode"], json!("3201"));
    far_side.assert_nothing_pending();

    // A paused proxy pauses the payments through it: its DFSPs may not be
    // paid (3201), as a paused DFSP's own.
    hub.admin_expect(
        "PUT",
        "/participants/pxAB",
        Some(json!({"isActive": false})),
        200,
    );
    let paused = post_quote(&hub, "payerfsp", "dfspB");
    let told = payer.expect("PUT", &format!("/quotes/{paused}/error"));
    assert_eq!(told.json()["errorInformation"]["errorCode"], json!("3201"));
    far_side.assert_nothing_pending();
}

/// The payee's side of a quote across schemes: a `POST /quotes` a proxy
/// carries from another scheme's payer reaches the payee byte for byte,
/// and the payee's answer goes back through that proxy (no map entry
/// needed: the question remembers who carried it); the hub's own errors
/// about a carried request go back through the proxy too, and the proxy's
/// mode is the payer's for the pause rule.
#[test]
fn a_quote_a_proxy_carries_in_is_answered_back_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    let payee = Stub::start("payeefsp");
    let far_side = Stub::start("pxAB");
    hub.onboard("payeefsp", &payee.base_url(), 10_000, 5_000);
    hub.add_endpoint("payeefsp", "FSPIOP_CALLBACK_URL_QUOTES", &payee.base_url());
    create(&hub, "pxAB", Some(json!(true)));
    hub.add_endpoint("pxAB", "FSPIOP_CALLBACK_URL_QUOTES", &far_side.base_url());
    let carried_in = |quote_id: &str, destination: &str| {
        let mut headers = resource_headers("quotes", "1.1", "payerX", Some(destination), true);
        headers.push(("FSPIOP-Proxy".into(), "pxAB".into()));
        let body = quote_body(quote_id, "payerX", destination);
        (hub.api("POST", "/quotes", &headers, body.as_bytes()), body)
    };

    let quote_id = new_id();
    let (response, body) = carried_in(&quote_id, "payeefsp");
    assert_eq!(response.status, 202, "{response:?}");
    let asked = payee.expect("POST", "/quotes");
    assert_eq!(asked.body, body.as_bytes());
    assert_eq!(asked.header("fspiop-source"), Some("payerX"));
    let answer = quote_put_body();
    let response = hub.api(
        "PUT",
        &format!("/quotes/{quote_id}"),
        &resource_headers("quotes", "1.1", "payeefsp", Some("payerX"), false),
        answer.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");
    let back = far_side.expect("PUT", &format!("/quotes/{quote_id}"));
    assert_eq!(back.body, answer.as_bytes(), "the payee's bytes");
    assert_eq!(back.header("fspiop-destination"), Some("payerX"));
    assert!(
        proxy_map(&hub).is_empty(),
        "nothing learnt from a message nobody here asked for"
    );

    // A destination this scheme does not have: the hub's 3201 goes back
    // through the proxy, addressed to the payer.
    let nowhere = new_id();
    let (response, _) = carried_in(&nowhere, "nobodyfsp");
    assert_eq!(response.status, 202, "{response:?}");
    let told = far_side.expect("PUT", &format!("/quotes/{nowhere}/error"));
    assert_eq!(told.header("fspiop-destination"), Some("payerX"));
    assert_eq!(told.json()["errorInformation"]["errorCode"], json!("3201"));

    // The proxy paused: the payers behind it may not pay (3202).
    hub.admin_expect(
        "PUT",
        "/participants/pxAB",
        Some(json!({"isActive": false})),
        200,
    );
    let paused = new_id();
    let (response, _) = carried_in(&paused, "payeefsp");
    assert_eq!(response.status, 202, "{response:?}");
    let told = far_side.expect("PUT", &format!("/quotes/{paused}/error"));
    assert_eq!(told.json()["errorInformation"]["errorCode"], json!("3202"));
    payee.assert_nothing_pending();
}

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
        "FSPIOP_CALLBACK_URL_PARTIES_PUT",
        "/parties/{{partyIdType}}/{{partyIdentifier}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTIES_PUT_ERROR",
        "/parties/{{partyIdType}}/{{partyIdentifier}}/error",
    ),
];

/// The payee's scheme's side of a discovery across schemes: a lookup a
/// proxy carries in from another scheme's payer reaches the party's
/// holder, whose answer goes back through the proxy; a party nobody here
/// holds is told (3204) through the proxy too. Nothing is learnt into the
/// map from it.
#[test]
fn a_lookup_a_proxy_carries_in_is_answered_back_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    let payee = Stub::start("payeefsp");
    let far_side = Stub::start("pxAB");
    hub.onboard("payeefsp", &payee.base_url(), 10_000, 5_000);
    create(&hub, "pxAB", Some(json!(true)));
    for (kind, path) in LOOKUP_ENDPOINTS {
        hub.add_endpoint("payeefsp", kind, &format!("{}{path}", payee.base_url()));
        hub.add_endpoint("pxAB", kind, &format!("{}{path}", far_side.base_url()));
    }
    // The payee holds the party, in this scheme's built-in oracle.
    let response = hub.api(
        "POST",
        "/participants/MSISDN/2557001",
        &resource_headers("participants", "1.0", "payeefsp", None, true),
        br#"{"fspId":"payeefsp","currency":"USD"}"#,
    );
    assert_eq!(response.status, 202, "{response:?}");
    payee.expect("PUT", "/participants/MSISDN/2557001");

    let carried_in = |path: &str| {
        let mut headers = resource_headers("parties", "1.1", "payerX", None, true);
        headers.push(("FSPIOP-Proxy".into(), "pxAB".into()));
        hub.api("GET", &format!("/parties/{path}"), &headers, b"")
    };
    let response = carried_in("MSISDN/2557001");
    assert_eq!(response.status, 202, "{response:?}");
    let asked = payee.expect("GET", "/parties/MSISDN/2557001");
    assert_eq!(asked.header("fspiop-source"), Some("payerX"));
    assert_eq!(asked.header("fspiop-destination"), Some("payeefsp"));
    let answer = r#"{"party":{"partyIdInfo":{"partyIdType":"MSISDN","partyIdentifier":"2557001","fspId":"payeefsp"},"name":"Awa"}}"#;
    let response = hub.api(
        "PUT",
        "/parties/MSISDN/2557001",
        &resource_headers("parties", "1.1", "payeefsp", Some("payerX"), false),
        answer.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");
    let back = far_side.expect("PUT", "/parties/MSISDN/2557001");
    assert_eq!(back.body, answer.as_bytes(), "the holder's bytes");
    assert_eq!(back.header("fspiop-destination"), Some("payerX"));

    // Nobody here holds it: 3204, through the proxy.
    let response = carried_in("MSISDN/2557999");
    assert_eq!(response.status, 202, "{response:?}");
    let told = far_side.expect("PUT", "/parties/MSISDN/2557999/error");
    assert_eq!(told.header("fspiop-destination"), Some("payerX"));
    assert_eq!(told.json()["errorInformation"]["errorCode"], json!("3204"));
    assert!(proxy_map(&hub).is_empty());
    payee.assert_nothing_pending();
}

/// `GET /parties` from `source` (carried by `proxy`, if any).
fn lookup_from(hub: &Hub, source: &str, proxy: Option<&str>, path: &str) -> Response {
    let mut headers = resource_headers("parties", "1.1", source, None, true);
    if let Some(proxy) = proxy {
        headers.push(("FSPIOP-Proxy".into(), proxy.into()));
    }
    hub.api("GET", &format!("/parties/{path}"), &headers, b"")
}

/// `PUT /parties/{path}[/error]` from another scheme's `source`, carried
/// by `proxy`, to `destination`.
fn party_answer(
    hub: &Hub,
    (source, proxy): (&str, &str),
    destination: &str,
    path: &str,
    body: &str,
) -> Response {
    let mut headers = resource_headers("parties", "1.1", source, Some(destination), false);
    headers.push(("FSPIOP-Proxy".into(), proxy.into()));
    hub.api(
        "PUT",
        &format!("/parties/{path}"),
        &headers,
        body.as_bytes(),
    )
}

fn holder_answer(identifier: &str, fsp: &str) -> String {
    format!(
        r#"{{"party":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"{identifier}","fspId":"{fsp}"}},"name":"Awa"}}}}"#
    )
}

/// The payer's side of a discovery across schemes (rule 3): a party no
/// FSP here holds is asked of every proxy; an error is passed on only once
/// every proxy has answered, the first answer naming a holder wins (the
/// others dropped and counted after it) and teaches the map where the
/// holder is, so
/// the payer's quote that follows goes through that proxy; a lookup that
/// came through a proxy is never sent round again.
#[test]
fn a_party_nobody_here_holds_is_asked_of_every_proxy_and_the_first_holder_wins() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    let payer = Stub::start("payerfsp");
    let far_b = Stub::start("pxAB");
    let far_c = Stub::start("pxAC");
    hub.onboard("payerfsp", &payer.base_url(), 10_000, 5_000);
    hub.add_endpoint("payerfsp", "FSPIOP_CALLBACK_URL_QUOTES", &payer.base_url());
    for (proxy, stub) in [("pxAB", &far_b), ("pxAC", &far_c)] {
        create(&hub, proxy, Some(json!(true)));
        hub.add_endpoint(proxy, "FSPIOP_CALLBACK_URL_QUOTES", &stub.base_url());
    }
    for (kind, path) in LOOKUP_ENDPOINTS {
        for (name, stub) in [("payerfsp", &payer), ("pxAB", &far_b), ("pxAC", &far_c)] {
            hub.add_endpoint(name, kind, &format!("{}{path}", stub.base_url()));
        }
    }

    let response = lookup_from(&hub, "payerfsp", None, "MSISDN/777");
    assert_eq!(response.status, 202, "{response:?}");
    for stub in [&far_b, &far_c] {
        let asked = stub.expect("GET", "/parties/MSISDN/777");
        assert_eq!(asked.header("fspiop-source"), Some("payerfsp"));
    }
    // pxAC's scheme does not hold it: not passed on while pxAB may.
    let error = error_body("3204", "Party not found");
    let response = party_answer(
        &hub,
        ("dfspC", "pxAC"),
        "payerfsp",
        "MSISDN/777/error",
        &error,
    );
    assert_eq!(response.status, 200, "{response:?}");
    payer.assert_quiet(QUIET_WAIT);
    // pxAB's does: the payer hears it, byte for byte.
    let answer = holder_answer("777", "dfspB");
    let response = party_answer(&hub, ("dfspB", "pxAB"), "payerfsp", "MSISDN/777", &answer);
    assert_eq!(response.status, 200, "{response:?}");
    let heard = payer.expect("PUT", "/parties/MSISDN/777");
    assert_eq!(heard.body, answer.as_bytes());
    let map = proxy_map(&hub);
    assert_eq!(map.len(), 1, "{map:?}");
    assert_eq!(
        (&map[0]["fspId"], &map[0]["proxy"], &map[0]["source"]),
        (&json!("dfspB"), &json!("pxAB"), &json!("discovery"))
    );
    // A later holder through the other proxy: taken, counted, passed on
    // to nobody and learnt by nobody.
    let late = holder_answer("777", "dfspC");
    let response = party_answer(&hub, ("dfspC", "pxAC"), "payerfsp", "MSISDN/777", &late);
    assert_eq!(response.status, 200, "{response:?}");
    hub.await_metric_line("kasi_discovery_answers_dropped_total 1");
    payer.assert_quiet(QUIET_WAIT);
    assert_eq!(proxy_map(&hub).len(), 1);
    // Another proxy's answer nobody asked it for is still refused.
    let response = party_answer(&hub, ("dfspD", "pxAC"), "payerfsp", "MSISDN/778", &late);
    assert_error_response(&response, 400, "3100");

    // The payer's quote to the holder goes through the proxy it learnt.
    post_quote(&hub, "payerfsp", "dfspB");
    far_b.expect("POST", "/quotes");
    far_c.assert_nothing_pending();

    // Every scheme says no: the last error is passed on.
    let response = lookup_from(&hub, "payerfsp", None, "MSISDN/888");
    assert_eq!(response.status, 202, "{response:?}");
    far_b.expect("GET", "/parties/MSISDN/888");
    far_c.expect("GET", "/parties/MSISDN/888");
    for (source, proxy) in [("dfspB", "pxAB"), ("dfspC", "pxAC")] {
        let response = party_answer(
            &hub,
            (source, proxy),
            "payerfsp",
            "MSISDN/888/error",
            &error,
        );
        assert_eq!(response.status, 200, "{response:?}");
    }
    let told = payer.expect("PUT", "/parties/MSISDN/888/error");
    assert_eq!(told.json()["errorInformation"]["errorCode"], json!("3204"));

    // The loop guard: a lookup pxAB carried in is not sent to pxAC.
    let response = lookup_from(&hub, "payerX", Some("pxAB"), "MSISDN/999");
    assert_eq!(response.status, 202, "{response:?}");
    let told = far_b.expect("PUT", "/parties/MSISDN/999/error");
    assert_eq!(told.header("fspiop-destination"), Some("payerX"));
    far_c.assert_nothing_pending();
    payer.assert_nothing_pending();
}

/// Rule 2's healing: a request to a DFSP that the proxy a discovery
/// taught the map will not take drops the learnt entry (the payer told as
/// for any undelivered request); an operator's entry stays.
#[test]
fn a_failed_route_through_a_learnt_proxy_drops_the_entry_and_not_the_operators() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    let payer = Stub::start("payerfsp");
    let far_side = Stub::start("pxAB");
    let refusing = Stub::start_answering(
        "pxAB quotes",
        400,
        r#"{"errorInformation":{"errorCode":"3201","errorDescription":"Destination FSP Error"}}"#,
    );
    hub.onboard("payerfsp", &payer.base_url(), 10_000, 5_000);
    hub.add_endpoint("payerfsp", "FSPIOP_CALLBACK_URL_QUOTES", &payer.base_url());
    create(&hub, "pxAB", Some(json!(true)));
    hub.add_endpoint("pxAB", "FSPIOP_CALLBACK_URL_QUOTES", &refusing.base_url());
    for (kind, path) in LOOKUP_ENDPOINTS {
        hub.add_endpoint("payerfsp", kind, &format!("{}{path}", payer.base_url()));
        hub.add_endpoint("pxAB", kind, &format!("{}{path}", far_side.base_url()));
    }
    hub.admin_expect(
        "PUT",
        "/proxyMap/dfspO",
        Some(json!({"proxy": "pxAB"})),
        201,
    );
    // Learnt: dfspB through pxAB.
    assert_eq!(
        lookup_from(&hub, "payerfsp", None, "MSISDN/777").status,
        202
    );
    far_side.expect("GET", "/parties/MSISDN/777");
    let answer = holder_answer("777", "dfspB");
    let response = party_answer(&hub, ("dfspB", "pxAB"), "payerfsp", "MSISDN/777", &answer);
    assert_eq!(response.status, 200, "{response:?}");
    payer.expect("PUT", "/parties/MSISDN/777");
    assert_eq!(proxy_map(&hub).len(), 2);

    for dfsp in ["dfspB", "dfspO"] {
        let quote_id = post_quote(&hub, "payerfsp", dfsp);
        refusing.expect("POST", "/quotes");
        let told = payer.expect("PUT", &format!("/quotes/{quote_id}/error"));
        assert_eq!(
            told.json()["errorInformation"]["errorCode"],
            json!("3201"),
            "{dfsp}: the proxy's refusal passed on"
        );
    }
    // The learnt entry goes (after the failure is reported: wait for it);
    // the operator's stays.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let map = proxy_map(&hub);
        let dfsps: Vec<&str> = map.iter().map(|e| e["fspId"].as_str().unwrap()).collect();
        if dfsps == ["dfspO"] {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not healed: {map:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    hub.await_log("the learnt entry is dropped");
}

/// Request-to-pay across a link, on the payee's side: the routed services
/// other than quotes take the same way (`hub::routing`): a transaction
/// request for another scheme's payer goes to its proxy unchanged, and the
/// payer's answer the proxy carries back reaches the payee byte for byte.
#[test]
fn a_transaction_request_for_another_schemes_payer_goes_through_its_proxy_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    let payee = Stub::start("payeefsp");
    let far_side = Stub::start("pxAB");
    hub.onboard("payeefsp", &payee.base_url(), 10_000, 5_000);
    hub.add_endpoint(
        "payeefsp",
        "FSPIOP_CALLBACK_URL_TRX_REQ_SERVICE",
        &payee.base_url(),
    );
    create(&hub, "pxAB", Some(json!(true)));
    hub.add_endpoint(
        "pxAB",
        "FSPIOP_CALLBACK_URL_TRX_REQ_SERVICE",
        &far_side.base_url(),
    );
    hub.admin_expect(
        "PUT",
        "/proxyMap/dfspB",
        Some(json!({"proxy": "pxAB"})),
        201,
    );
    let request_id = new_id();
    let body = transaction_request_body(&request_id);
    let response = hub.api(
        "POST",
        "/transactionRequests",
        &resource_headers(
            "transactionRequests",
            "1.1",
            "payeefsp",
            Some("dfspB"),
            true,
        ),
        body.as_bytes(),
    );
    assert_eq!(response.status, 202, "{response:?}");
    let passed = far_side.expect("POST", "/transactionRequests");
    assert_eq!(passed.body, body.as_bytes());
    assert_eq!(passed.header("fspiop-destination"), Some("dfspB"));

    let answer = r#"{"transactionRequestState":"RECEIVED"}"#;
    let mut headers = resource_headers(
        "transactionRequests",
        "1.1",
        "dfspB",
        Some("payeefsp"),
        false,
    );
    headers.push(("FSPIOP-Proxy".into(), "pxAB".into()));
    let response = hub.api(
        "PUT",
        &format!("/transactionRequests/{request_id}"),
        &headers,
        answer.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");
    let back = payee.expect("PUT", &format!("/transactionRequests/{request_id}"));
    assert_eq!(back.body, answer.as_bytes());
    far_side.assert_nothing_pending();
}
