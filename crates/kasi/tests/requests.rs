//! End-to-end request-to-pay (`/transactionRequests`, `/authorizations`)
//! and bulk quotes (`/bulkQuotes`) through the real `kasi serve` binary,
//! routed as Mojaloop's transaction-requests-service and quoting-service
//! route them (MOJALOOP-SERVICES.md C.1-C.3): checked, then passed on as
//! the sender's bytes and FSPIOP headers under the destination's endpoint,
//! or answered with 3201 from the hub when the destination has none.

mod support;

use support::*;

/// One routed resource, and the requests of a happy exchange.
struct Routed {
    /// The path word and media type word.
    name: &'static str,
    /// Content-Type version its DFSPs send.
    version: &'static str,
    endpoint_type: &'static str,
    /// Who asks (`POST`/`GET`) and who answers (`PUT`).
    requester: &'static str,
    answerer: &'static str,
    /// The `POST` body for an id; `None`: the resource has no `POST`.
    post: Option<fn(&str) -> String>,
    /// A valid `PUT /{ID}` body.
    put: &'static str,
    /// The query of `GET /{ID}` (empty: none).
    query: &'static str,
}

const ROUTED: [Routed; 3] = [
    Routed {
        name: "transactionRequests",
        version: "1.1",
        endpoint_type: "FSPIOP_CALLBACK_URL_TRX_REQ_SERVICE",
        requester: PAYEE,
        answerer: PAYER,
        post: Some(transaction_request_body),
        put: r#"{"transactionRequestState":"RECEIVED"}"#,
        query: "",
    },
    Routed {
        name: "authorizations",
        version: "1.0",
        endpoint_type: "FSPIOP_CALLBACK_URL_AUTHORIZATIONS",
        requester: PAYEE,
        answerer: PAYER,
        post: None,
        put: r#"{"authenticationInfo":{"authentication":"OTP","authenticationValue":"1234"},"responseType":"ENTERED"}"#,
        // Percent-encoding and order as the sender chose; forwarded as is.
        query: "authenticationType=OTP&retriesLeft=2&amount=102&currency=USD&note=caf%C3%A9+1",
    },
    Routed {
        name: "bulkQuotes",
        version: "1.1",
        endpoint_type: "FSPIOP_CALLBACK_URL_BULK_QUOTES",
        requester: PAYER,
        answerer: PAYEE,
        post: Some(bulk_quote_body),
        put: r#"{"individualQuoteResults":[{"quoteId":"b51ec534-ee48-4575-b6a9-ead2955b8069","transferAmount":{"currency":"USD","amount":"10"}}],"expiration":"2030-01-01T00:00:00.000Z"}"#,
        query: "",
    },
];

/// A hub with a payer and a payee, each with the three endpoint types as
/// bare base URLs, and `bare`, onboarded with none of them.
struct Requests {
    hub: Hub,
    payer: Stub,
    payee: Stub,
    _dir: tempfile::TempDir,
}

impl Requests {
    fn new() -> Requests {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::start(&dir.path().join("data"));
        // Bare base URLs: the hub appends the resource's path.
        let endpoints = ROUTED.map(|routed| (routed.endpoint_type, ""));
        let (payer, payee) = hub.payer_and_payee(&endpoints);
        hub.onboard("bare", &payer.base_url(), 10_000, 0);
        Requests {
            hub,
            payer,
            payee,
            _dir: dir,
        }
    }

    fn stub(&self, name: &str) -> &Stub {
        if name == PAYER {
            &self.payer
        } else {
            &self.payee
        }
    }

    fn assert_quiet(&self) {
        self.payer.assert_quiet(QUIET_WAIT);
        self.payee.assert_nothing_pending();
    }
}

impl Routed {
    fn headers(&self, source: &str, destination: &str, with_accept: bool) -> Vec<(String, String)> {
        let headers = resource_headers(self.name, self.version, source, Some(destination), true);
        let headers = if with_accept {
            headers
        } else {
            without_header(headers, "Accept")
        };
        // Signed requests must reach the other side with their signature.
        with_header(
            headers,
            "FSPIOP-Signature",
            r#"{"signature":"s","protectedHeader":"p"}"#,
        )
    }

    /// The asking request (`POST`, or `GET /{ID}?query` without one), its
    /// headers and body.
    fn ask(
        &self,
        id: &str,
        destination: &str,
    ) -> (&'static str, String, Vec<(String, String)>, String) {
        match self.post {
            Some(body) => (
                "POST",
                format!("/{}", self.name),
                self.headers(self.requester, destination, true),
                body(id),
            ),
            None => (
                "GET",
                format!("/{}/{id}?{}", self.name, self.query),
                self.headers(self.requester, destination, true),
                String::new(),
            ),
        }
    }
}

/// `received` is `sent` as the sender wrote it: same bytes, every FSPIOP
/// header the same.
fn assert_forwarded(received: &Received, sent: &[(String, String)], body: &[u8]) {
    assert_eq!(received.body, body, "the exact bytes: {received:?}");
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

/// The hub's `PUT /{resource}/{ID}/error` with 3201 to `stub`.
fn expect_3201(stub: &Stub, routed: &Routed, id: &str) {
    let received = stub.expect("PUT", &format!("/{}/{id}/error", routed.name));
    assert_eq!(
        received.header("fspiop-source"),
        Some(HUB_NAME),
        "{received:?}"
    );
    assert_eq!(
        received.header("fspiop-destination"),
        Some(stub.name.as_str())
    );
    let media = format!(
        "application/vnd.interoperability.{}+json;version=",
        routed.name
    );
    assert!(
        received
            .header("content-type")
            .is_some_and(|value| value.starts_with(&media)),
        "{received:?}"
    );
    let info = &received.json()["errorInformation"];
    assert_eq!(info["errorCode"], "3201", "{received:?}");
    assert!(
        info["errorDescription"]
            .as_str()
            .is_some_and(|d| d.starts_with("Destination FSP Error")),
        "{received:?}"
    );
}

#[test]
fn every_route_forwards_the_senders_bytes_to_the_destinations_endpoint() {
    let r = Requests::new();
    for routed in &ROUTED {
        let asker = r.stub(routed.requester);
        let answerer = r.stub(routed.answerer);
        let id = new_id();

        // The request: 202, and the answering DFSP gets it under its base URL.
        let (method, path, headers, body) = routed.ask(&id, routed.answerer);
        let response = r.hub.api(method, &path, &headers, body.as_bytes());
        assert_eq!(response.status, 202, "{method} {path}: {response:?}");
        let expected_path = match method {
            "POST" => format!("/{}", routed.name),
            _ => format!("/{}/{id}", routed.name),
        };
        let received = answerer.expect(method, &expected_path);
        assert_forwarded(&received, &headers, body.as_bytes());
        assert_eq!(
            received.query.as_deref(),
            (!routed.query.is_empty()).then_some(routed.query),
            "the query as sent: {received:?}"
        );

        // Its answer and an error answer: 200, forwarded to the asker.
        let error = error_body("5100", "Payer rejected the request");
        for (path, body) in [
            (format!("/{}/{id}", routed.name), routed.put.to_string()),
            (format!("/{}/{id}/error", routed.name), error),
        ] {
            let headers = routed.headers(routed.answerer, routed.requester, false);
            let response = r.hub.api("PUT", &path, &headers, body.as_bytes());
            assert_eq!(response.status, 200, "PUT {path}: {response:?}");
            let received = asker.expect("PUT", &path);
            assert_forwarded(&received, &headers, body.as_bytes());
            assert_eq!(received.header("accept"), None, "{received:?}");
        }

        // A GET of a resource with a POST carries no query of its own.
        if routed.post.is_some() {
            let headers = routed.headers(routed.requester, routed.answerer, true);
            let path = format!("/{}/{id}", routed.name);
            let response = r.hub.api("GET", &path, &headers, b"");
            assert_eq!(response.status, 202, "GET {path}: {response:?}");
            let received = answerer.expect("GET", &path);
            assert_forwarded(&received, &headers, b"");
        }
    }
    r.assert_quiet();
}

#[test]
fn an_unreachable_destination_gets_the_sender_a_3201_from_the_hub() {
    let r = Requests::new();
    for routed in &ROUTED {
        let asker = r.stub(routed.requester);
        for destination in ["nosuchfsp", "bare"] {
            let id = new_id();
            let (method, path, headers, body) = routed.ask(&id, destination);
            let response = r.hub.api(method, &path, &headers, body.as_bytes());
            assert_eq!(response.status, 202, "{method} {path}: {response:?}");
            expect_3201(asker, routed, &id);

            // An answer to nowhere answers nothing pending: refused at
            // once, sent to nobody.
            let path = format!("/{}/{id}", routed.name);
            let headers = routed.headers(routed.answerer, destination, false);
            let response = r.hub.api("PUT", &path, &headers, routed.put.as_bytes());
            assert_error_response(&response, 400, "3100");
        }
    }
    r.assert_quiet();
}

#[test]
fn a_request_its_destination_fails_or_refuses_gets_the_requester_an_error_from_the_hub() {
    let r = Requests::new();
    // A DFSP whose endpoint answers 500, one that refuses with an FSPIOP
    // error, one that refuses without a body, and one nobody listens for.
    let failing = Stub::start_answering("failingfsp", 500, "");
    let refusing = Stub::start_answering(
        "refusingfsp",
        400,
        r#"{"errorInformation":{"errorCode":"5104","errorDescription":"Payee rejected the request"}}"#,
    );
    let terse = Stub::start_answering("tersefsp", 403, "");
    let down = format!("http://{}", reserve_address());
    for (name, base) in [
        ("failingfsp", failing.base_url()),
        ("refusingfsp", refusing.base_url()),
        ("tersefsp", terse.base_url()),
        ("downfsp", down),
    ] {
        r.hub.onboard(name, &base, 10_000, 0);
        for routed in &ROUTED {
            r.hub.add_endpoint(name, routed.endpoint_type, &base);
        }
    }
    for routed in &ROUTED {
        let asker = r.stub(routed.requester);
        // quoting-service passes a refusal's error on (3000 without one);
        // transaction-requests-service answers 1001 whatever happened.
        let quoting = routed.name == "bulkQuotes";
        for (destination, code) in [
            ("failingfsp", "1001"),
            ("downfsp", "1001"),
            ("refusingfsp", if quoting { "5104" } else { "1001" }),
            ("tersefsp", if quoting { "3000" } else { "1001" }),
        ] {
            let id = new_id();
            let (method, path, headers, body) = routed.ask(&id, destination);
            let response = r.hub.api(method, &path, &headers, body.as_bytes());
            assert_eq!(response.status, 202, "{method} {path}: {response:?}");
            let received = asker.expect("PUT", &format!("/{}/{id}/error", routed.name));
            assert_eq!(received.header("fspiop-source"), Some(HUB_NAME));
            assert_eq!(
                received.header("fspiop-destination"),
                Some(asker.name.as_str())
            );
            let info = &received.json()["errorInformation"];
            assert_eq!(info["errorCode"], code, "{destination}: {received:?}");
            if code == "1001" {
                assert!(
                    info["errorDescription"]
                        .as_str()
                        .is_some_and(|d| d.starts_with("Destination communication error")
                            && d.contains(destination)),
                    "{received:?}"
                );
            }

            // The question was withdrawn: a late answer from the
            // destination is refused and forwarded to nobody.
            let path = format!("/{}/{id}", routed.name);
            let headers = routed.headers(destination, routed.requester, false);
            let response = r.hub.api("PUT", &path, &headers, routed.put.as_bytes());
            assert_error_response(&response, 400, "3100");
        }
    }
    // Each request reached the DFSPs that answered (the failing one more
    // than once: a 5xx is retried, a refusal is not).
    let count = |stub: &Stub| std::iter::from_fn(|| stub.next_within(QUIET_WAIT)).count();
    assert!(count(&failing) > ROUTED.len());
    assert_eq!(count(&refusing), ROUTED.len());
    assert_eq!(count(&terse), ROUTED.len());
    r.assert_quiet();
}

#[test]
fn an_authorization_answer_of_any_response_type_is_passed_on_as_sent() {
    // transaction-requests-service's schema takes any string as
    // responseType (the golden path sends "WHAT" and expects 200); the
    // payer FSP's answer reaches the payee FSP that asked, unchanged.
    let r = Requests::new();
    let authorizations = &ROUTED[1];
    let id = new_id();
    let (method, path, headers, body) = authorizations.ask(&id, PAYER);
    let response = r.hub.api(method, &path, &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    r.payer.expect("GET", &format!("/authorizations/{id}"));
    let answer = r#"{"authenticationInfo":{"authentication":"OTP","authenticationValue":"234567"},"responseType":"WHAT"}"#;
    let path = format!("/authorizations/{id}");
    let headers = authorizations.headers(PAYER, PAYEE, false);
    let response = r.hub.api("PUT", &path, &headers, answer.as_bytes());
    assert_eq!(response.status, 200, "{response:?}");
    let received = r.payee.expect("PUT", &path);
    assert_forwarded(&received, &headers, answer.as_bytes());
    r.assert_quiet();
}

#[test]
fn bad_headers_paths_queries_and_bodies_are_refused_before_routing() {
    let r = Requests::new();
    for routed in &ROUTED {
        let id = new_id();
        let (method, path, headers, body) = routed.ask(&id, routed.answerer);
        let refused = |headers: &[(String, String)], status: u16, code: &str| {
            let response = r.hub.api(method, &path, headers, body.as_bytes());
            assert_error_response(&response, status, code);
        };
        refused(&without_header(headers.clone(), "Date"), 400, "3102");
        refused(
            &without_header(headers.clone(), "FSPIOP-Source"),
            400,
            "3102",
        );
        refused(
            &without_header(headers.clone(), "FSPIOP-Destination"),
            400,
            "3102",
        );
        let media = format!("application/vnd.interoperability.{}+json", routed.name);
        refused(
            &with_header(
                headers.clone(),
                "Content-Type",
                &format!("{media};version=3.0"),
            ),
            406,
            "3001",
        );
        refused(
            &with_header(headers.clone(), "Accept", &format!("{media};version=3")),
            406,
            "3001",
        );
        refused(
            &with_header(headers.clone(), "Content-Type", "application/json"),
            400,
            "3101",
        );
        refused(
            &with_header(headers.clone(), "Content-Type", CONTENT_TYPE),
            400,
            "3101",
        );

        // A path id that is not a CorrelationId.
        let put_headers = routed.headers(routed.answerer, routed.requester, false);
        let response = r.hub.api(
            "PUT",
            &format!("/{}/not-an-id", routed.name),
            &put_headers,
            routed.put.as_bytes(),
        );
        assert_error_response(&response, 400, "3101");
        for (suffix, body, field) in [
            ("", "", "body"),
            (
                "/error",
                r#"{"errorInformation":{"errorCode":"5100"}}"#,
                "errorDescription",
            ),
        ] {
            let path = format!("/{}/{id}{suffix}", routed.name);
            let response = r.hub.api("PUT", &path, &put_headers, body.as_bytes());
            assert_error_response(&response, 400, "3102");
            assert!(response.text().contains(field), "{field}: {response:?}");
        }
    }

    // Bodies: a missing required property is 3102, a broken pattern 3100,
    // each naming its field.
    let [requests, authorizations, bulk] = &ROUTED;
    let id = new_id();
    let request = transaction_request_body(&id);
    let quote = bulk_quote_body(&id);
    let no_amount = request.replace(r#""amount":"#, r#""sum":"#);
    let bad_request_id = request.replace(&id, "abc");
    let bad_authentication = request.replace("OTP", "PIN");
    let no_payer = quote.replace(r#""payer":"#, r#""payor":"#);
    let bad_amount_type = quote.replace("SEND", "GIVE");
    for (routed, method, body, code, field) in [
        (requests, "POST", no_amount.as_str(), "3102", "amount"),
        (
            requests,
            "POST",
            &bad_request_id,
            "3100",
            "transactionRequestId",
        ),
        (
            requests,
            "POST",
            &bad_authentication,
            "3100",
            "authenticationType",
        ),
        (bulk, "POST", &no_payer, "3102", "payer"),
        (
            bulk,
            "POST",
            &bad_amount_type,
            "3100",
            "individualQuotes[0].amountType",
        ),
        (
            requests,
            "PUT",
            r#"{"transactionRequestState":"DONE"}"#,
            "3100",
            "transactionRequestState",
        ),
        (
            authorizations,
            "PUT",
            r#"{"authenticationInfo":{}}"#,
            "3102",
            "authenticationInfo.authentication",
        ),
        (
            authorizations,
            "PUT",
            r#"{"responseType":1}"#,
            "3101",
            "responseType",
        ),
        (
            bulk,
            "PUT",
            r#"{"individualQuoteResults":[]}"#,
            "3102",
            "expiration",
        ),
    ] {
        let (headers, path) = match method {
            "POST" => (
                routed.headers(routed.requester, routed.answerer, true),
                format!("/{}", routed.name),
            ),
            _ => (
                routed.headers(routed.answerer, routed.requester, false),
                format!("/{}/{id}", routed.name),
            ),
        };
        let response = r.hub.api(method, &path, &headers, body.as_bytes());
        assert_error_response(&response, 400, code);
        assert!(response.text().contains(field), "{field}: {response:?}");
    }

    // The query of GET /authorizations: all four keys, each of its type.
    let headers = authorizations.headers(PAYEE, PAYER, true);
    for (query, code, field) in [
        (
            "authenticationType=OTP&retriesLeft=2&amount=102",
            "3102",
            "currency",
        ),
        ("", "3102", "authenticationType"),
        (
            "authenticationType=SMS&retriesLeft=2&amount=102&currency=USD",
            "3100",
            "authenticationType",
        ),
        (
            "authenticationType=OTP&retriesLeft=two&amount=102&currency=USD",
            "3101",
            "retriesLeft",
        ),
        (
            "authenticationType=OTP&retriesLeft=2&amount=1.20&currency=USD",
            "3100",
            "amount",
        ),
    ] {
        let path = format!("/authorizations/{id}?{query}");
        let response = r.hub.api("GET", &path, &headers, b"");
        assert_error_response(&response, 400, code);
        assert!(response.text().contains(field), "{field}: {response:?}");
    }
    r.assert_quiet();
}
