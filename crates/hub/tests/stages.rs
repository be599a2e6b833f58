//! Stage timing through the real routers: a real pipeline (SQLite in a
//! temporary directory), both apps served on ephemeral ports, a stub DFSP
//! that answers every callback 200, and the admin `/stats` endpoints.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::Router;
use engine::{recover, Engine, EngineConfig};
use http_body_util::{BodyExt, Full};
use hub::notify::{Dispatcher, DispatcherConfig};
use hub::{Hub, HubConfig};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ledger::{
    AccountId, AccountKind, Amount, Command, Currency, FspName, Funds, FundsMemo, Limits,
    RequestHash, TransferId,
};
use serde_json::Value;
use store::sqlite::{SqliteOptions, SqliteStore};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const CONTENT_TYPE: &str = "application/vnd.interoperability.transfers+json;version=1.1";
const ACCEPT: &str = "application/vnd.interoperability.transfers+json;version=1";
const CONDITION: &str = "GRzLaTP7DJ9t4P-a_BA0WA9wzzlsugf00-Tn6kESAfM";
const FULFILMENT: &str = "UNlJ98hZTY_dsw0cAqw4i_UN3v4utt7CZFB4yfLbVFA";
const ILP_PACKET: &str = "AYIBgQAAAAAAAASwNGxldmVsb25lLmRmc3AxLm1lci45T2RTOF81MDdqUUZERmZlakgyOVc4bXFmNEpLMHlGTFGCAUBQU0svMS4wCk5vbmNlOiB1SXlweUYzY3pYSXBFdzVVc05TYWh3CkVuY3J5cHRpb246IG5vbmUKUGF5bWVudC1JZDogMTMyMzZhM2ItOGZhOC00MTYzLTg0NDctNGMzZWQzZGE5OGE3CgpDb250ZW50LUxlbmd0aDogMTM1CkNvbnRlbnQtVHlwZTogYXBwbGljYXRpb24vanNvbgpTZW5kZXItSWRlbnRpZmllcjogOTI4MDYzOTEKCiJ7XCJmZWVcIjowLFwidHJhbnNmZXJDb2RlXCI6XCJpbnZvaWNlXCIsXCJkZWJpdE5hbWVcIjpcImFsaWNlIGNvb3BlclwiLFwiY3JlZGl0TmFtZVwiOlwibWVyIGNoYW50XCIsXCJkZWJpdElkZW50aWZpZXJcIjpcIjkyODA2MzkxXCJ9IgA";
const TRANSFER_ID: &str = "3d8f2c4e-1b7a-4c2d-9e5f-0a1b2c3d4e5f";
const HANDLER_STAGES: [&str; 7] = [
    "http_receive",
    "validation",
    "ledger_queue",
    "ledger_apply",
    "store_queue",
    "store_commit",
    "response",
];
const ALL_STAGES: [&str; 8] = [
    "http_receive",
    "validation",
    "ledger_queue",
    "ledger_apply",
    "store_queue",
    "store_commit",
    "response",
    "callback_send",
];

fn name(text: &str) -> FspName {
    FspName::new(text).unwrap()
}

fn usd() -> Currency {
    Currency::parse("USD").unwrap()
}

/// The hub, its accounts, and two DFSPs whose transfer callbacks go to `stub`.
fn onboarding(stub: SocketAddr) -> Vec<Command> {
    let mut commands = vec![
        Command::CreateHub { name: name("Hub") },
        Command::CreateHubAccount {
            currency: usd(),
            kind: AccountKind::HubMultilateralSettlement,
        },
        Command::CreateHubAccount {
            currency: usd(),
            kind: AccountKind::HubReconciliation,
        },
    ];
    // Accounts 3 and 4 are payerfsp's position and settlement, 5 and 6 payeefsp's.
    for (dfsp, settlement) in [("payerfsp", 4u32), ("payeefsp", 6)] {
        commands.push(Command::CreateParticipant {
            name: name(dfsp),
            currency: usd(),
        });
        commands.push(Command::InitNetDebitCap {
            name: name(dfsp),
            currency: usd(),
            net_debit_cap: Amount::from_whole(1000),
        });
        for (endpoint_type, path) in [
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
            commands.push(Command::SetEndpoint {
                name: name(dfsp),
                endpoint_type: endpoint_type.into(),
                value: format!("http://{stub}/{dfsp}{path}"),
            });
        }
        commands.push(Command::FundsIn(Funds {
            transfer_id: TransferId::new(u128::MAX - u128::from(settlement)),
            participant: name(dfsp),
            account: AccountId(settlement),
            amount: Amount::from_whole(5000),
            currency: usd(),
            memo: FundsMemo::default(),
            request_hash: RequestHash([settlement as u8; 32]),
        }));
    }
    commands
}

/// A DFSP that answers every request 200 and reports "METHOD /path".
async fn stub_dfsp() -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    async fn answer(
        State(seen): State<mpsc::UnboundedSender<String>>,
        method: Method,
        uri: Uri,
        _body: Bytes,
    ) -> StatusCode {
        let _ = seen.send(format!("{method} {}", uri.path()));
        StatusCode::OK
    }
    let (sender, seen) = mpsc::unbounded_channel();
    let app = Router::new().fallback(answer).with_state(sender);
    (serve(app).await, seen)
}

async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(hub::server::serve(
        listener,
        app,
        std::future::pending(),
        hub::server::ServeOptions::default(),
    ));
    addr
}

struct Running {
    api: SocketAddr,
    admin: SocketAddr,
    dfsp: mpsc::UnboundedReceiver<String>,
    client: Client<HttpConnector, Full<Bytes>>,
    _engine: Engine,
    _dir: tempfile::TempDir,
}

async fn start(config: impl FnOnce(&mut HubConfig)) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    let (ledger, _) = recover(&mut store, Limits::default()).unwrap();
    let engine = Engine::start(ledger, Box::new(store), EngineConfig::default());
    let (stub, dfsp) = stub_dfsp().await;
    let handle = engine.handle();
    tokio::task::spawn_blocking(move || handle.execute(onboarding(stub)))
        .await
        .unwrap()
        .unwrap();
    let mut hub_config = HubConfig::new(name("Hub"));
    config(&mut hub_config);
    let dispatcher = Dispatcher::new(DispatcherConfig::default());
    let hub = Arc::new(
        Hub::new(hub_config, engine.handle(), dispatcher)
            .await
            .unwrap(),
    );
    Running {
        api: serve(hub::api_app(hub.clone())).await,
        admin: serve(hub::admin_app(hub)).await,
        dfsp,
        client: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
        _engine: engine,
        _dir: dir,
    }
}

impl Running {
    async fn call(
        &self,
        method: Method,
        url: String,
        headers: &[(&str, String)],
        body: String,
    ) -> (StatusCode, Bytes) {
        let mut request = axum::http::Request::builder().method(method).uri(url);
        for (header, value) in headers {
            request = request.header(*header, value);
        }
        let request = request.body(Full::new(Bytes::from(body))).unwrap();
        let response = self.client.request(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, body)
    }

    async fn fspiop(&self, method: Method, path: &str, source: &str, body: String) -> StatusCode {
        let destination = if source == "payerfsp" {
            "payeefsp"
        } else {
            "payerfsp"
        };
        let mut headers = vec![
            ("content-type", CONTENT_TYPE.to_string()),
            ("date", httpdate::fmt_http_date(SystemTime::now())),
            ("fspiop-source", source.to_string()),
            ("fspiop-destination", destination.to_string()),
        ];
        if method == Method::POST {
            headers.push(("accept", ACCEPT.to_string()));
        }
        let url = format!("http://{}{path}", self.api);
        let (status, body) = self.call(method, url, &headers, body).await;
        assert!(
            status.is_success(),
            "{status}: {}",
            String::from_utf8_lossy(&body)
        );
        status
    }

    async fn admin(&self, method: Method, path: &str) -> (StatusCode, Value) {
        let url = format!("http://{}{path}", self.admin);
        let (status, body) = self.call(method, url, &[], String::new()).await;
        let json = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).unwrap()
        };
        (status, json)
    }

    async fn stages(&self) -> Value {
        let (status, body) = self.admin(Method::GET, "/stats/stages").await;
        assert_eq!(status, StatusCode::OK);
        body
    }

    /// The next callback the stub DFSP received.
    async fn callback(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(10), self.dfsp.recv())
            .await
            .expect("no callback in time")
            .unwrap()
    }
}

fn prepare_body() -> String {
    let expiration = hub::format_time(hub::now_ms() + 60_000);
    format!(
        r#"{{"transferId":"{TRANSFER_ID}","payerFsp":"payerfsp","payeeFsp":"payeefsp","amount":{{"amount":"10","currency":"USD"}},"ilpPacket":"{ILP_PACKET}","condition":"{CONDITION}","expiration":"{expiration}"}}"#
    )
}

fn fulfil_body() -> String {
    let completed = hub::format_time(hub::now_ms());
    format!(
        r#"{{"fulfilment":"{FULFILMENT}","completedTimestamp":"{completed}","transferState":"COMMITTED"}}"#
    )
}

fn entry<'a>(stages: &'a Value, phase: &str, stage: &str) -> &'a Value {
    stages["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["phase"] == phase && s["stage"] == stage)
        .unwrap_or_else(|| panic!("no {phase}/{stage} in {stages}"))
}

fn number(value: &Value, field: &str) -> f64 {
    value[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {value}"))
}

/// Polls `/stats/stages` until both forwarded callbacks are counted (the
/// dispatcher records them when the stub's answer arrives).
async fn stages_with_callbacks(running: &Running) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stages = running.stages().await;
        let done = ["prepare", "fulfil"]
            .iter()
            .all(|phase| entry(&stages, phase, "callback_send")["calls"] == 1);
        if done || Instant::now() > deadline {
            return stages;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepare_and_fulfil_are_timed_stage_by_stage_traced_and_reset() {
    let mut running = start(|config| config.trace_sample_every = 1).await;
    let before_ms = hub::now_ms();

    let sent = Instant::now();
    let status = running
        .fspiop(Method::POST, "/transfers", "payerfsp", prepare_body())
        .await;
    let prepare_round_trip_us = sent.elapsed().as_secs_f64() * 1e6;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(running.callback().await, "POST /payeefsp/transfers");

    let path = format!("/transfers/{TRANSFER_ID}");
    let status = running
        .fspiop(Method::PUT, &path, "payeefsp", fulfil_body())
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut callbacks = vec![running.callback().await, running.callback().await];
    callbacks.sort();
    assert_eq!(
        callbacks,
        [
            format!("PUT /payeefsp/transfers/{TRANSFER_ID}"),
            format!("PUT /payerfsp/transfers/{TRANSFER_ID}"),
        ]
    );

    let stages = stages_with_callbacks(&running).await;
    let since_ms = stages["since_ms"].as_i64().unwrap();
    assert!(since_ms > 0 && since_ms <= before_ms, "{stages}");
    // Pipeline order: prepare's seven stages, fulfil's, then abort's.
    let order: Vec<(String, String)> = stages["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["phase"].as_str().unwrap().to_string(),
                s["stage"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = ["prepare", "fulfil", "abort"]
        .iter()
        .flat_map(|phase| {
            ALL_STAGES
                .iter()
                .map(move |stage| (phase.to_string(), stage.to_string()))
        })
        .collect();
    assert_eq!(order, expected);

    for phase in ["prepare", "fulfil"] {
        for stage in ALL_STAGES {
            let s = entry(&stages, phase, stage);
            assert_eq!(s["calls"], 1, "{phase}/{stage}: {s}");
            let (min, mean, max) = (
                number(s, "min_us"),
                number(s, "mean_us"),
                number(s, "max_us"),
            );
            assert!(min >= 0.0, "{phase}/{stage}: {s}");
            assert!(min == mean && mean == max, "{phase}/{stage}: {s}");
            assert_eq!(number(s, "std_us"), 0.0, "{phase}/{stage}: {s}");
            assert_eq!(number(s, "cum_us"), mean, "{phase}/{stage}: {s}");
        }
        // A real commit (fsync) and a real delivery take time.
        assert!(number(entry(&stages, phase, "store_commit"), "mean_us") > 0.0);
        assert!(number(entry(&stages, phase, "callback_send"), "mean_us") > 0.0);
    }
    for stage in ALL_STAGES {
        let s = entry(&stages, "abort", stage);
        assert_eq!(s["calls"], 0, "{s}");
        assert_eq!(number(s, "max_us"), 0.0, "{s}");
    }
    // The handler's stages are contiguous and inside the client's round trip.
    let prepare_in_hub_us: f64 = HANDLER_STAGES
        .iter()
        .map(|stage| number(entry(&stages, "prepare", stage), "mean_us"))
        .sum();
    assert!(
        prepare_in_hub_us > 0.0 && prepare_in_hub_us <= prepare_round_trip_us,
        "{prepare_in_hub_us} µs in the hub, {prepare_round_trip_us} µs round trip"
    );

    // The same durations reach Prometheus.
    let url = format!("http://{}/metrics", running.admin);
    let (_, text) = running.call(Method::GET, url, &[], String::new()).await;
    let text = String::from_utf8_lossy(&text);
    for expected in [
        "kasi_stage_duration_seconds_count{phase=\"prepare\",stage=\"ledger_apply\"} 1",
        "kasi_stage_duration_seconds_count{phase=\"fulfil\",stage=\"callback_send\"} 1",
        "kasi_stage_duration_seconds_count{phase=\"abort\",stage=\"response\"} 0",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }

    // The transfer was sampled (1 in 1): one trace, both phases, in order.
    let (status, traces) = running.admin(Method::GET, "/stats/traces").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(traces["sample_every"], 1);
    let list = traces["traces"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{traces}");
    assert_eq!(list[0]["transfer_id"], TRANSFER_ID);
    let spans = list[0]["spans"].as_array().unwrap();
    assert_eq!(spans.len(), 16, "{traces}");
    assert_eq!(spans[0]["phase"], "prepare");
    assert_eq!(spans[0]["stage"], "http_receive");
    assert_eq!(number(&spans[0], "start_us"), 0.0);
    let mut last_start = 0.0;
    for span in spans {
        let (start, end) = (number(span, "start_us"), number(span, "end_us"));
        assert!(start >= last_start, "spans out of order: {traces}");
        assert!(end >= start, "span ends before it starts: {span}");
        last_start = start;
    }
    let span = |phase: &str, stage: &str| {
        spans
            .iter()
            .find(|s| s["phase"] == phase && s["stage"] == stage)
            .unwrap_or_else(|| panic!("no {phase}/{stage} span in {traces}"))
    };
    for phase in ["prepare", "fulfil"] {
        // Each stage begins where the one before it ended.
        for pair in HANDLER_STAGES.windows(2) {
            assert_eq!(
                number(span(phase, pair[0]), "end_us"),
                number(span(phase, pair[1]), "start_us"),
                "{phase}: {} then {}",
                pair[0],
                pair[1]
            );
        }
        // The callback is handed over before the answer.
        assert!(
            number(span(phase, "callback_send"), "start_us")
                <= number(span(phase, "response"), "end_us")
        );
    }
    // The fulfil was sent after the prepare was answered.
    assert!(
        number(span("prepare", "response"), "end_us")
            <= number(span("fulfil", "http_receive"), "start_us")
    );

    // A reset zeroes every figure and empties the ring.
    let (status, body) = running.admin(Method::DELETE, "/stats/stages").await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    let stages = running.stages().await;
    assert!(stages["since_ms"].as_i64().unwrap() >= since_ms);
    let entries = stages["stages"].as_array().unwrap();
    assert_eq!(entries.len(), 24);
    for s in entries {
        assert_eq!(s["calls"], 0, "{s}");
        for field in ["min_us", "mean_us", "max_us", "std_us", "cum_us"] {
            assert_eq!(number(s, field), 0.0, "{field}: {s}");
        }
    }
    let (_, traces) = running.admin(Method::GET, "/stats/traces").await;
    assert_eq!(traces["traces"], Value::Array(vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_the_body_in_the_handler_keeps_the_size_limit_and_its_error() {
    let running = start(|config| {
        config.max_body_bytes = 1024;
        config.trace_sample_every = 0;
    })
    .await;
    let headers = [
        ("content-type", CONTENT_TYPE.to_string()),
        ("accept", ACCEPT.to_string()),
        ("date", httpdate::fmt_http_date(SystemTime::now())),
        ("fspiop-source", "payerfsp".to_string()),
        ("fspiop-destination", "payeefsp".to_string()),
    ];
    // Declared too large (Content-Length): refused by the guard before
    // any of it is read.
    let url = format!("http://{}/transfers", running.api);
    let (status, body) = running
        .call(Method::POST, url, &headers, "x".repeat(4096))
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let error: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["errorInformation"]["errorCode"], "3101", "{error}");
    assert_eq!(
        error["errorInformation"]["errorDescription"],
        "Malformed syntax - a body of 4096 bytes is larger than the 1024 allowed",
        "{error}"
    );
    // Chunked, so with no length declared: the handler's read of the body
    // refuses it once it passes the limit.
    let mut raw = "POST /transfers HTTP/1.1\r\nHost: kasi\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n".to_string();
    for (name, value) in &headers {
        raw.push_str(&format!("{name}: {value}\r\n"));
    }
    raw.push_str(&format!("\r\n1000\r\n{}\r\n0\r\n\r\n", "x".repeat(4096)));
    let answer = {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = tokio::net::TcpStream::connect(running.api).await.unwrap();
        stream.write_all(raw.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    };
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.ends_with(
            r#"{"errorInformation":{"errorCode":"3101","errorDescription":"Malformed syntax - the body is larger than allowed"}}"#
        ),
        "{answer}"
    );
    // Refused before the ledger: nothing timed, nothing traced.
    let stages = running.stages().await;
    assert!(stages["stages"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["calls"] == 0));
    let (_, traces) = running.admin(Method::GET, "/stats/traces").await;
    assert_eq!(traces["sample_every"], 0);
    assert_eq!(traces["traces"], Value::Array(vec![]));
}
