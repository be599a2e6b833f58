//! Only the DFSP that was asked may answer, only to the DFSP that asked,
//! only while the question is pending (issue 26): a third DFSP with valid
//! credentials tries to answer lookups, quotes, transaction requests,
//! authorizations and bulk quotes meant for someone else, through the
//! real `kasi serve` binary against real DFSP stubs. Each attempt must be
//! refused at once (400, 3100), reach nobody, and move the refusal's
//! counter; the genuine answer in the same test must still arrive.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::*;

const MALLORY: &str = "mallory";
const ALICE: &str = "27713803912";

/// Endpoint types whose value is a bare base URL.
const ROUTED_ENDPOINTS: [&str; 4] = [
    "FSPIOP_CALLBACK_URL_QUOTES",
    "FSPIOP_CALLBACK_URL_TRX_REQ_SERVICE",
    "FSPIOP_CALLBACK_URL_AUTHORIZATIONS",
    "FSPIOP_CALLBACK_URL_BULK_QUOTES",
];

/// A payer, a payee holding [`ALICE`], and mallory: three participants
/// with every discovery and routed endpoint.
struct Scheme {
    hub: Hub,
    payer: Stub,
    payee: Stub,
    mallory: Stub,
    _dir: tempfile::TempDir,
}

impl Scheme {
    fn new(extra: &[&str]) -> Scheme {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::start_with(&dir.path().join("data"), extra);
        hub.setup();
        let payer = Stub::start(PAYER);
        let payee = Stub::start(PAYEE);
        let mallory = Stub::start(MALLORY);
        for stub in [&payer, &payee, &mallory] {
            hub.onboard(&stub.name, &stub.base_url(), 10_000, 1_000);
            let base = stub.base_url();
            for (kind, path) in DISCOVERY_ENDPOINTS {
                hub.add_endpoint(&stub.name, kind, &format!("{base}{path}"));
            }
            for kind in ROUTED_ENDPOINTS {
                hub.add_endpoint(&stub.name, kind, &base);
            }
        }
        let scheme = Scheme {
            hub,
            payer,
            payee,
            mallory,
            _dir: dir,
        };
        let registration = scheme.hub.api(
            "POST",
            &format!("/participants/MSISDN/{ALICE}"),
            &resource_headers("participants", "1.1", PAYEE, None, true),
            format!(r#"{{"fspId":"{PAYEE}","currency":"USD"}}"#).as_bytes(),
        );
        assert_eq!(registration.status, 202, "{registration:?}");
        scheme
            .payee
            .expect("PUT", &format!("/participants/MSISDN/{ALICE}"));
        scheme
    }

    fn assert_all_quiet(&self) {
        for stub in [&self.payer, &self.payee, &self.mallory] {
            stub.assert_quiet(QUIET_WAIT);
        }
    }

    /// The payer looks Alice up; the payee (her holder) is asked.
    fn payer_looks_up_alice(&self) {
        let party = format!("/parties/MSISDN/{ALICE}");
        let lookup = self.hub.api(
            "GET",
            &party,
            &resource_headers("parties", "1.1", PAYER, None, true),
            b"",
        );
        assert_eq!(lookup.status, 202, "{lookup:?}");
        self.payee.expect("GET", &party);
    }
}

fn party_answer(fsp: &str) -> String {
    format!(
        r#"{{"party":{{"partyIdInfo":{{"partyIdType":"MSISDN","partyIdentifier":"{ALICE}","fspId":"{fsp}"}},"name":"Alice"}}}}"#
    )
}

fn party_put(
    hub: &Hub,
    source: &str,
    destination: Option<&str>,
    path: &str,
    body: &str,
) -> Response {
    hub.api(
        "PUT",
        path,
        &resource_headers("parties", "1.1", source, destination, false),
        body.as_bytes(),
    )
}

#[test]
fn a_third_dfsp_cannot_answer_a_lookup_it_was_not_asked() {
    let s = Scheme::new(&[]);
    let party = format!("/parties/MSISDN/{ALICE}");
    let error_path = format!("{party}/error");

    // Nothing pending: mallory's answer for Alice is refused.
    let response = party_put(&s.hub, MALLORY, Some(PAYER), &party, &party_answer(MALLORY));
    assert_error_response(&response, 400, "3100");
    s.assert_all_quiet();

    s.payer_looks_up_alice();
    // While the payer's lookup is pending: mallory names itself the holder,
    // to the payer, without a destination, or as an error.
    for (destination, path, body) in [
        (Some(PAYER), &party, party_answer(MALLORY)),
        (None, &party, party_answer(MALLORY)),
        // Even posing as the payee in the body.
        (Some(PAYER), &party, party_answer(PAYEE)),
        (
            Some(PAYER),
            &error_path,
            error_body("3204", "Party not found"),
        ),
    ] {
        let response = party_put(&s.hub, MALLORY, destination, path, &body);
        assert_error_response(&response, 400, "3100");
    }
    // The holder answering for an accomplice, or to someone who did not ask.
    let response = party_put(&s.hub, PAYEE, Some(PAYER), &party, &party_answer(MALLORY));
    assert_error_response(&response, 400, "3100");
    assert!(response.text().contains("fspId"), "{response:?}");
    let response = party_put(&s.hub, PAYEE, Some(MALLORY), &party, &party_answer(PAYEE));
    assert_error_response(&response, 400, "3100");
    s.assert_all_quiet();
    s.hub.await_refusals("unsolicited_answer", Some(MALLORY), 5);
    s.hub.await_refusals("unsolicited_answer", Some(PAYEE), 2);

    // The genuine answer still reaches the payer, byte for byte.
    let genuine = party_answer(PAYEE);
    let response = party_put(&s.hub, PAYEE, Some(PAYER), &party, &genuine);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(s.payer.expect("PUT", &party).text(), genuine);
    s.assert_all_quiet();

    // The refusals are in the log, saying who and what.
    assert!(
        s.hub.wait_for_log("FSPIOP answer refused", CALLBACK_WAIT),
        "{}",
        s.hub.log()
    );
    let log = s.hub.log();
    let line = log
        .lines()
        .find(|line| line.contains("FSPIOP answer refused"))
        .unwrap();
    assert!(
        line.contains("unsolicited_answer") && line.contains(MALLORY),
        "{line}"
    );
}

#[test]
fn an_answer_after_the_window_is_refused() {
    let s = Scheme::new(&["--answer-window-s", "1"]);
    let party = format!("/parties/MSISDN/{ALICE}");
    s.payer_looks_up_alice();
    let asked = Instant::now();
    // Past the window (and the grace an answered lookup keeps), the
    // payee's answer finds nothing pending.
    while asked.elapsed() < Duration::from_millis(1_100) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let response = party_put(&s.hub, PAYEE, Some(PAYER), &party, &party_answer(PAYEE));
    assert_error_response(&response, 400, "3100");
    s.assert_all_quiet();
    // Asking again opens it again.
    s.payer_looks_up_alice();
    let response = party_put(&s.hub, PAYEE, None, &party, &party_answer(PAYEE));
    assert_eq!(response.status, 200, "{response:?}");
    s.payer.expect("PUT", &party);
}

/// One routed resource: who asks and who answers.
struct Routed {
    name: &'static str,
    version: &'static str,
    requester: &'static str,
    answerer: &'static str,
    /// The asking request for an id: method, path and body.
    ask: fn(&str) -> (&'static str, String, String),
    put: fn() -> String,
}

const ROUTED: [Routed; 4] = [
    Routed {
        name: "quotes",
        version: "1.1",
        requester: PAYER,
        answerer: PAYEE,
        ask: |id| {
            (
                "POST",
                "/quotes".to_string(),
                format!(
                    r#"{{"quoteId":"{id}","transactionId":"{}","payee":{{"partyIdInfo":{}}},"payer":{{"partyIdInfo":{}}},"amountType":"SEND","amount":{{"currency":"USD","amount":"100"}},"transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}"#,
                    new_id(),
                    party_id_info(PAYEE, ALICE),
                    party_id_info(PAYER, "255700000009"),
                ),
            )
        },
        put: || {
            format!(
                r#"{{"transferAmount":{{"currency":"USD","amount":"100"}},"expiration":"{}","ilpPacket":"{ILP_PACKET}","condition":"{CONDITION}"}}"#,
                fspiop_time(far_future())
            )
        },
    },
    Routed {
        name: "transactionRequests",
        version: "1.1",
        requester: PAYEE,
        answerer: PAYER,
        ask: |id| {
            (
                "POST",
                "/transactionRequests".to_string(),
                format!(
                    r#"{{"transactionRequestId":"{id}","payee":{{"partyIdInfo":{}}},"payer":{},"amount":{{"currency":"USD","amount":"25.5"}},"transactionType":{{"scenario":"PAYMENT","initiator":"PAYEE","initiatorType":"BUSINESS"}},"authenticationType":"OTP"}}"#,
                    party_id_info(PAYEE, ALICE),
                    party_id_info(PAYER, "255700000009"),
                ),
            )
        },
        put: || r#"{"transactionRequestState":"RECEIVED"}"#.to_string(),
    },
    Routed {
        name: "authorizations",
        version: "1.0",
        requester: PAYEE,
        answerer: PAYER,
        ask: |id| {
            (
                "GET",
                format!("/authorizations/{id}?authenticationType=OTP&retriesLeft=2&amount=102&currency=USD"),
                String::new(),
            )
        },
        put: || {
            r#"{"authenticationInfo":{"authentication":"OTP","authenticationValue":"1234"},"responseType":"ENTERED"}"#
                .to_string()
        },
    },
    Routed {
        name: "bulkQuotes",
        version: "1.1",
        requester: PAYER,
        answerer: PAYEE,
        ask: |id| {
            (
                "POST",
                "/bulkQuotes".to_string(),
                format!(
                    r#"{{"bulkQuoteId":"{id}","payer":{{"partyIdInfo":{}}},"individualQuotes":[{{"quoteId":"{}","transactionId":"{}","payee":{{"partyIdInfo":{}}},"amountType":"SEND","amount":{{"currency":"USD","amount":"10"}},"transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}]}}"#,
                    party_id_info(PAYER, "255700000009"),
                    new_id(),
                    new_id(),
                    party_id_info(PAYEE, ALICE),
                ),
            )
        },
        put: || {
            r#"{"individualQuoteResults":[{"quoteId":"b51ec534-ee48-4575-b6a9-ead2955b8069","transferAmount":{"currency":"USD","amount":"10"}}],"expiration":"2030-01-01T00:00:00.000Z"}"#
                .to_string()
        },
    },
];

impl Routed {
    fn headers(&self, source: &str, destination: &str, with_accept: bool) -> Vec<(String, String)> {
        resource_headers(
            self.name,
            self.version,
            source,
            Some(destination),
            with_accept,
        )
    }

    fn put(&self, hub: &Hub, source: &str, destination: &str, path: &str, body: &str) -> Response {
        hub.api(
            "PUT",
            path,
            &self.headers(source, destination, false),
            body.as_bytes(),
        )
    }

    fn stub<'a>(&self, s: &'a Scheme, name: &str) -> &'a Stub {
        match name {
            PAYER => &s.payer,
            PAYEE => &s.payee,
            _ => &s.mallory,
        }
    }

    /// The requester asks the answerer about `id`; the answerer receives it.
    fn ask(&self, s: &Scheme, id: &str) {
        let (method, path, body) = (self.ask)(id);
        let response = s.hub.api(
            method,
            &path,
            &self.headers(self.requester, self.answerer, true),
            body.as_bytes(),
        );
        assert_eq!(response.status, 202, "{} {path}: {response:?}", method);
        let received = self
            .stub(s, self.answerer)
            .next(&format!("{method} {path}"));
        assert_eq!(received.method, method);
    }

    /// Every forged answer about `id` is refused and reaches nobody; the
    /// genuine one still arrives.
    fn attack_and_answer(&self, s: &Scheme, id: &str) {
        let item = format!("/{}/{id}", self.name);
        let error = format!("{item}/error");
        let body = (self.put)();
        let refused = |response: Response| assert_error_response(&response, 400, "3100");
        // Mallory answers the requester, as an answer and as an error.
        refused(self.put(&s.hub, MALLORY, self.requester, &item, &body));
        refused(self.put(
            &s.hub,
            MALLORY,
            self.requester,
            &error,
            &error_body("3200", "Generic ID not found"),
        ));
        // The answerer answers someone who did not ask.
        refused(self.put(&s.hub, self.answerer, MALLORY, &item, &body));
        // The requester answers its own question.
        refused(self.put(&s.hub, self.requester, self.answerer, &item, &body));
        s.assert_all_quiet();
        // The genuine answer reaches the requester, and a repeat of it too.
        for _ in 0..2 {
            let response = self.put(&s.hub, self.answerer, self.requester, &item, &body);
            assert_eq!(response.status, 200, "{item}: {response:?}");
            let received = self.stub(s, self.requester).expect("PUT", &item);
            assert_eq!(received.text(), body);
        }
    }
}

#[test]
fn quote_request_authorization_and_bulk_quote_answers_only_from_the_one_asked() {
    let s = Scheme::new(&[]);
    let mut expected_mallory = 0;
    for routed in &ROUTED {
        // Nothing pending: refused.
        let id = new_id();
        let response = routed.put(
            &s.hub,
            MALLORY,
            routed.requester,
            &format!("/{}/{id}", routed.name),
            &(routed.put)(),
        );
        assert_error_response(&response, 400, "3100");
        expected_mallory += 1;

        routed.ask(&s, &id);
        routed.attack_and_answer(&s, &id);
        expected_mallory += 2;
        s.hub
            .await_refusals("unsolicited_answer", Some(MALLORY), expected_mallory);
    }
    // The quote's GET is a question too: only its addressee answers it.
    let quotes = &ROUTED[0];
    let id = new_id();
    let response = s.hub.api(
        "GET",
        &format!("/quotes/{id}"),
        &quotes.headers(PAYER, PAYEE, true),
        b"",
    );
    assert_eq!(response.status, 202, "{response:?}");
    s.payee.expect("GET", &format!("/quotes/{id}"));
    quotes.attack_and_answer(&s, &id);
}

#[test]
fn persistent_quotes_hold_the_same_rules_across_a_restart() {
    let mut s = Scheme::new(&["--quotes-persistent"]);
    let quotes = &ROUTED[0];
    let id = new_id();
    let (_, path, body) = (quotes.ask)(&id);
    let headers = quotes.headers(PAYER, PAYEE, true);
    assert_eq!(
        s.hub.api("POST", &path, &headers, body.as_bytes()).status,
        202
    );
    s.payee.expect("POST", "/quotes");
    let item = format!("/quotes/{id}");
    let answer = (quotes.put)();
    let response = quotes.put(&s.hub, MALLORY, PAYER, &item, &answer);
    assert_error_response(&response, 400, "3100");
    s.assert_all_quiet();

    // After a restart the hub has forgotten who is waiting; the payer's
    // resend (a duplicate: not forwarded again) makes the payee's answer
    // welcome again, and mallory's is still refused.
    s.hub.terminate();
    s.hub = Hub::start_with(&s._dir.path().join("data"), &["--quotes-persistent"]);
    let response = quotes.put(&s.hub, PAYEE, PAYER, &item, &answer);
    assert_error_response(&response, 400, "3100");
    assert_eq!(
        s.hub.api("POST", &path, &headers, body.as_bytes()).status,
        202
    );
    s.assert_all_quiet();
    let response = quotes.put(&s.hub, MALLORY, PAYER, &item, &answer);
    assert_error_response(&response, 400, "3100");
    let response = quotes.put(&s.hub, PAYEE, PAYER, &item, &answer);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(s.payer.expect("PUT", &item).text(), answer);
    // The answer is recorded: the payer's resend now gets it from the hub.
    assert_eq!(
        s.hub.api("POST", &path, &headers, body.as_bytes()).status,
        202
    );
    let resent = s.payer.expect("PUT", &item);
    assert_eq!(resent.text(), answer);
    assert_eq!(resent.header("fspiop-source"), Some(HUB_NAME));
}

/// Writes `requests` on one keep-alive connection from another thread
/// while this one counts the answers; returns their status lines' codes.
fn burst(address: std::net::SocketAddr, request: Vec<u8>, count: usize) -> Vec<u16> {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut chunk = Vec::with_capacity(request.len() * 64);
        let mut sent = 0;
        while sent < count {
            chunk.clear();
            let n = (count - sent).min(64);
            for _ in 0..n {
                chunk.extend_from_slice(&request);
            }
            writer.write_all(&chunk).unwrap();
            sent += n;
        }
    });
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut statuses = Vec::with_capacity(count);
    let mut pending: Vec<u8> = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    while statuses.len() < count {
        let n = stream
            .read(&mut buffer)
            .expect("the hub answers every request");
        assert!(
            n > 0,
            "the hub closed the connection after {} answers",
            statuses.len()
        );
        pending.extend_from_slice(&buffer[..n]);
        // Each answer: a head, then a Content-Length body.
        while let Some(head_end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..head_end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |value| value.trim().parse().unwrap());
            if pending.len() < head_end + 4 + length {
                break;
            }
            statuses.push(head[9..12].parse().unwrap());
            pending.drain(..head_end + 4 + length);
        }
    }
    sender.join().unwrap();
    statuses
}

#[test]
fn a_flood_of_forged_answers_reaches_nobody_and_writes_a_handful_of_lines() {
    const FORGED: usize = 50_000;
    const CONNECTIONS: usize = 4;
    let s = Scheme::new(&[]);
    let party = format!("/parties/MSISDN/{ALICE}");
    let body = party_answer(MALLORY);
    let mut head = format!("PUT {party} HTTP/1.1\r\nHost: {}\r\n", s.hub.api);
    for (name, value) in resource_headers("parties", "1.1", MALLORY, Some(PAYER), false) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut request = head.into_bytes();
    request.extend_from_slice(body.as_bytes());

    // Legitimate lookups, answered by the holder, while the flood runs.
    let address = s.hub.api;
    let flood = std::thread::spawn(move || {
        let senders: Vec<_> = (0..CONNECTIONS)
            .map(|_| {
                let request = request.clone();
                std::thread::spawn(move || burst(address, request, FORGED / CONNECTIONS))
            })
            .collect();
        senders
            .into_iter()
            .flat_map(|sender| sender.join().unwrap())
            .collect::<Vec<u16>>()
    });
    let mut lookups = Vec::new();
    while !flood.is_finished() || lookups.is_empty() {
        let started = Instant::now();
        s.payer_looks_up_alice();
        let genuine = party_answer(PAYEE);
        let response = party_put(&s.hub, PAYEE, Some(PAYER), &party, &genuine);
        assert_eq!(response.status, 200, "{response:?}");
        assert_eq!(s.payer.expect("PUT", &party).text(), genuine);
        lookups.push(started.elapsed());
    }
    let statuses = flood.join().unwrap();
    assert_eq!(statuses.len(), FORGED);
    assert!(
        statuses.iter().all(|status| *status == 400),
        "every forged answer is refused: {:?}",
        statuses
            .iter()
            .filter(|s| **s != 400)
            .take(5)
            .collect::<Vec<_>>()
    );
    s.assert_all_quiet();
    s.hub
        .await_refusals("unsolicited_answer", Some(MALLORY), FORGED as u64);
    lookups.sort();
    eprintln!(
        "{} legitimate lookups during the flood: median {:?}, max {:?}",
        lookups.len(),
        lookups[lookups.len() / 2],
        lookups[lookups.len() - 1]
    );
    // A warning per (class, participant) every 10 s at most, each saying
    // how many it stood for.
    let lines = s
        .hub
        .await_log("suppressed_since_last_warning")
        .lines()
        .filter(|line| line.contains("FSPIOP answer refused"))
        .count();
    assert!((1..=20).contains(&lines), "{lines} warning lines");
}

#[test]
fn a_full_table_of_pending_questions_refuses_new_ones_and_forwards_nothing() {
    let s = Scheme::new(&["--pending-answers-max", "16"]);
    let quotes = &ROUTED[0];
    let headers = quotes.headers(PAYER, PAYEE, true);
    let (mut accepted, mut refused) = (Vec::new(), 0);
    for _ in 0..40 {
        let id = new_id();
        let (_, path, body) = (quotes.ask)(&id);
        let response = s.hub.api("POST", &path, &headers, body.as_bytes());
        match response.status {
            202 => accepted.push(id),
            _ => {
                assert_error_response(&response, 503, "2003");
                assert_eq!(response.header("retry-after"), Some("1"), "{response:?}");
                refused += 1;
            }
        }
    }
    assert!(refused >= 40 - 16, "{refused} refused");
    s.hub.await_refusals("busy", Some(PAYER), refused as u64);
    // Exactly the accepted ones reached the payee.
    for _ in &accepted {
        s.payee.expect("POST", "/quotes");
    }
    s.assert_all_quiet();
    let metrics = s.hub.admin("GET", "/metrics", None).text();
    let pending: f64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix("kasi_pending_answers "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no kasi_pending_answers in {metrics}"));
    assert_eq!(pending, accepted.len() as f64);
    // Their answers still go through.
    let answer = (quotes.put)();
    for id in &accepted {
        let item = format!("/quotes/{id}");
        let response = quotes.put(&s.hub, PAYEE, PAYER, &item, &answer);
        assert_eq!(response.status, 200, "{response:?}");
        s.payer.expect("PUT", &item);
    }
}
