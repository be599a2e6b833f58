//! The whole dispatcher against a stub HTTP server: order, isolation of
//! dead destinations, signing, retries, dead letters, follow-ups, shutdown.

use super::watermark::dead_letter_of;
use super::*;
use http::HeaderValue;
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A request as a stub server saw it.
#[derive(Debug)]
struct Received {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers every request with this status and an empty body.
    Answer(u16),
    /// Closes the first connection as soon as it is accepted, then
    /// answers 200.
    DropFirstConnection,
    /// Reads requests and never answers.
    Hang,
    /// Answers with whatever status the cell holds at the time.
    Status(&'static std::sync::atomic::AtomicU16),
}

struct Stub {
    addr: SocketAddr,
    requests: mpsc::UnboundedReceiver<Received>,
    connections: Arc<AtomicUsize>,
}

impl Stub {
    fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The next request, or a panic after `within`.
    async fn next(&mut self, within: Duration) -> Received {
        tokio::time::timeout(within, self.requests.recv())
            .await
            .expect("no request arrived in time")
            .expect("stub server stopped")
    }

    /// Requests received and not yet taken.
    fn count_received(&mut self) -> usize {
        let mut n = 0;
        while self.requests.try_recv().is_ok() {
            n += 1;
        }
        n
    }
}

/// A minimal HTTP/1.1 server on an ephemeral 127.0.0.1 port (keep-alive,
/// `Content-Length` bodies only: all the dispatcher sends).
async fn stub(behaviour: Behaviour) -> Stub {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, requests) = mpsc::unbounded_channel();
    let connections = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::clone(&connections);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let n = accepted.fetch_add(1, Ordering::SeqCst);
            if n == 0 && matches!(behaviour, Behaviour::DropFirstConnection) {
                drop(stream);
                continue;
            }
            tokio::spawn(serve_connection(stream, behaviour, tx.clone()));
        }
    });
    Stub {
        addr,
        requests,
        connections,
    }
}

async fn serve_connection(
    stream: TcpStream,
    behaviour: Behaviour,
    tx: mpsc::UnboundedSender<Received>,
) {
    let mut buffer = Vec::new();
    while let Some(request) = read_request(&stream, &mut buffer).await {
        let _ = tx.send(request);
        let status = match behaviour {
            Behaviour::Answer(status) => status,
            Behaviour::DropFirstConnection => 200,
            Behaviour::Hang => std::future::pending().await,
            Behaviour::Status(cell) => cell.load(Ordering::SeqCst),
        };
        let response = format!("HTTP/1.1 {status} Stub\r\ncontent-length: 0\r\n\r\n");
        if write_all(&stream, response.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn read_more(stream: &TcpStream, buffer: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        stream.readable().await.ok()?;
        match stream.try_read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => {
                buffer.extend_from_slice(&chunk[..n]);
                return Some(());
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
    }
}

async fn write_all(stream: &TcpStream, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        stream.writable().await?;
        match stream.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn read_request(stream: &TcpStream, buffer: &mut Vec<u8>) -> Option<Received> {
    let head_end = loop {
        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        read_more(stream, buffer).await?;
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let target = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter(|line| !line.is_empty())
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    while buffer.len() < head_end + length {
        read_more(stream, buffer).await?;
    }
    let body = buffer[head_end..head_end + length].to_vec();
    buffer.drain(..head_end + length);
    Some(Received {
        method,
        target,
        headers,
        body,
    })
}

/// A port nothing listens on (bound, then released).
/// A URL whose connections are refused. Not a port freed by a test
/// listener: another test in this process could be given it next.
/// Port 1 (tcpmux) is privileged and served by nothing here.
async fn closed_port_url() -> String {
    "http://127.0.0.1:1/transfers/1".to_string()
}

fn callback(destination: &str, url: String, body: &'static [u8]) -> Callback {
    let mut headers = HeaderMap::new();
    headers.insert(
        "content-type",
        HeaderValue::from_static("application/vnd.interoperability.transfers+json;version=1.1"),
    );
    Callback {
        destination: destination.to_owned(),
        origin: Origin::Forwarded,
        method: Method::PUT,
        url,
        headers,
        body: Bytes::from_static(body),
    }
}

fn stats_of(dispatcher: &Dispatcher, destination: &str) -> DestinationStats {
    dispatcher
        .stats()
        .into_iter()
        .find(|s| s.destination == destination)
        .unwrap_or_else(|| panic!("no stats for {destination}"))
}

/// How long a test waits for a callback that must come: long enough for
/// a loaded 2-core machine; a callback that comes costs nothing of it.
const ARRIVAL_WAIT: Duration = Duration::from_secs(10);

fn fast_config() -> DispatcherConfig {
    DispatcherConfig {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(2),
        backoff_base: Duration::from_millis(10),
        ..DispatcherConfig::default()
    }
}

#[tokio::test]
async fn delivers_method_path_headers_and_exact_body_in_order() {
    let mut server = stub(Behaviour::Answer(200)).await;
    let dispatcher = Dispatcher::new(DispatcherConfig {
        max_in_flight_per_destination: 1,
        ..fast_config()
    });
    let body: &'static [u8] = b"{\"transferState\":\"COMMITTED\"}\x00\xff\r\n\r\nGET / HTTP/1.1";
    let mut first = callback("payeefsp", server.url("/transfers/0a1b/error?x=1"), body);
    first
        .headers
        .insert("fspiop-source", HeaderValue::from_static("switch"));
    first
        .headers
        .insert("fspiop-destination", HeaderValue::from_static("payeefsp"));
    first
        .headers
        .append("x-multi", HeaderValue::from_static("a"));
    first
        .headers
        .append("x-multi", HeaderValue::from_static("b"));
    // Framing headers from elsewhere must not reach the wire.
    first
        .headers
        .insert("content-length", HeaderValue::from_static("999"));
    first
        .headers
        .insert("host", HeaderValue::from_static("kasi.example"));
    let mut second = callback("payeefsp", server.url("/quotes/7"), b"");
    second.method = Method::PATCH;
    let mut third = callback("payeefsp", server.url("/parties/MSISDN/1"), b"{}");
    third.method = Method::POST;
    dispatcher.send(first);
    dispatcher.send(second);
    dispatcher.send(third);

    let got = server.next(ARRIVAL_WAIT).await;
    assert_eq!(got.method, "PUT");
    assert_eq!(got.target, "/transfers/0a1b/error?x=1");
    assert_eq!(got.body, body);
    assert_eq!(
        got.header("content-length"),
        Some(body.len().to_string().as_str())
    );
    assert_eq!(got.header("host"), Some(server.addr.to_string().as_str()));
    assert_eq!(
        got.header("content-type"),
        Some("application/vnd.interoperability.transfers+json;version=1.1")
    );
    assert_eq!(got.header("fspiop-source"), Some("switch"));
    assert_eq!(got.header("fspiop-destination"), Some("payeefsp"));
    let multi: Vec<&str> = got
        .headers
        .iter()
        .filter(|(n, _)| n == "x-multi")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(multi, ["a", "b"]);

    let got = server.next(ARRIVAL_WAIT).await;
    assert_eq!(
        (got.method.as_str(), got.target.as_str()),
        ("PATCH", "/quotes/7")
    );
    assert!(got.body.is_empty());
    let got = server.next(ARRIVAL_WAIT).await;
    assert_eq!(
        (got.method.as_str(), got.target.as_str()),
        ("POST", "/parties/MSISDN/1")
    );
    assert_eq!(got.body, b"{}");

    dispatcher.shutdown(Duration::from_secs(2)).await;
    let stats = stats_of(&dispatcher, "payeefsp");
    assert_eq!(
        (stats.sent_ok, stats.failed, stats.retried, stats.http_error),
        (3, 0, 0, 0)
    );
    assert_eq!(stats.latency_count, 3);
    assert!(stats.latency_max_us > 0 && stats.latency_sum_us >= stats.latency_max_us);
    // Keep-alive: the three went over one connection.
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_endpoints_do_not_delay_a_healthy_destination() {
    let mut healthy = stub(Behaviour::Answer(200)).await;
    let mut hanging = stub(Behaviour::Hang).await;
    let refused = closed_port_url().await;
    // A hanging callback times out after 20 s: anything queued behind
    // one would take at least that long, far beyond a loaded machine's
    // slowness.
    let dispatcher = Dispatcher::new(DispatcherConfig {
        request_timeout: Duration::from_secs(20),
        ..fast_config()
    });

    let started = std::time::Instant::now();
    for i in 0..200 {
        dispatcher.send(callback("dead-refused", refused.clone(), b"{}"));
        dispatcher.send(callback(
            "dead-hanging",
            hanging.url(&format!("/transfers/{i}")),
            b"{}",
        ));
        dispatcher.send(callback(
            "healthy",
            healthy.url(&format!("/transfers/{i}")),
            b"{}",
        ));
    }
    for _ in 0..200 {
        healthy.next(ARRIVAL_WAIT).await;
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(10),
        "healthy callbacks took {elapsed:?}: they waited behind hanging ones"
    );

    // The hanging endpoint holds all its workers, and no more.
    let stuck = stats_of(&dispatcher, "dead-hanging");
    assert_eq!(stuck.in_flight, 8, "{stuck:?}");
    assert_eq!(stuck.queued, 192, "{stuck:?}");
    assert_eq!(stuck.sent_ok + stuck.failed, 0, "{stuck:?}");
    assert!(hanging.count_received() <= 8);

    dispatcher.shutdown(Duration::from_millis(200)).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the 20 s request timeout never had to elapse"
    );
    let ok = stats_of(&dispatcher, "healthy");
    assert_eq!(
        (ok.sent_ok, ok.failed, ok.dropped, ok.http_error),
        (200, 0, 0, 0)
    );
    let stuck = stats_of(&dispatcher, "dead-hanging");
    assert_eq!(
        (stuck.sent_ok, stuck.failed, stuck.in_flight, stuck.queued),
        (0, 200, 0, 0)
    );
    let dead = stats_of(&dispatcher, "dead-refused");
    assert_eq!(
        (dead.sent_ok, dead.failed, dead.in_flight, dead.queued),
        (0, 200, 0, 0)
    );
    assert!(dead.retried > 0, "{dead:?}");
}

#[tokio::test]
async fn hub_originated_callbacks_are_signed_and_forwarded_ones_kept() {
    let mut server = stub(Behaviour::Answer(200)).await;
    let key = Arc::new(crate::jws::SigningKey::from_pem(&crate::jws::test_keys::ec_pem()).unwrap());
    let dispatcher = Dispatcher::new(DispatcherConfig {
        max_in_flight_per_destination: 1,
        signer: Some(CallbackSigner {
            key: key.clone(),
            source: "Hub".into(),
            pool: crate::jws_pool::JwsPool::new(1, 16),
        }),
        ..fast_config()
    });
    let body: &'static [u8] = b"{\"transferState\":\"COMMITTED\"}";
    let mut own = callback("payeefsp", server.url("/base/transfers/1"), body);
    own.origin = Origin::Hub;
    own.headers
        .insert("fspiop-source", HeaderValue::from_static("Hub"));
    own.headers
        .insert("fspiop-destination", HeaderValue::from_static("payeefsp"));
    own.headers.insert(
        "date",
        HeaderValue::from_static("Tue, 01 Jul 2025 10:00:00 GMT"),
    );
    // Inherited from somewhere: must not survive.
    own.headers
        .insert("fspiop-signature", HeaderValue::from_static("inherited"));
    let mut forwarded = callback("payeefsp", server.url("/transfers"), body);
    forwarded
        .headers
        .insert("fspiop-source", HeaderValue::from_static("payerfsp"));
    forwarded
        .headers
        .insert("fspiop-signature", HeaderValue::from_static("the payer's"));
    // Forwarded messages whose headers claim the hub: the header is
    // not what decides.
    let mut posing = callback("payeefsp", server.url("/transfers/2"), body);
    posing
        .headers
        .insert("fspiop-source", HeaderValue::from_static("Hub"));
    posing
        .headers
        .insert("fspiop-signature", HeaderValue::from_static("the DFSP's"));
    let mut posing_unsigned = callback("payeefsp", server.url("/transfers/3"), body);
    posing_unsigned
        .headers
        .insert("fspiop-source", HeaderValue::from_static("Hub"));
    dispatcher.send(own);
    dispatcher.send(forwarded);
    dispatcher.send(posing);
    dispatcher.send(posing_unsigned);

    let got = server.next(ARRIVAL_WAIT).await;
    let signature = got.header("fspiop-signature").unwrap().to_string();
    assert_ne!(signature, "inherited");
    let covered = crate::jws::Covered {
        uri: "/transfers/1",
        method: "PUT",
        source: "Hub",
        destination: Some("payeefsp"),
        date: Some("Tue, 01 Jul 2025 10:00:00 GMT"),
    };
    crate::jws::verify(&key.public_key(), &signature, &covered, body).unwrap();
    let got = server.next(ARRIVAL_WAIT).await;
    assert_eq!(got.header("fspiop-signature"), Some("the payer's"));
    assert_eq!(got.body, body);
    let got = server.next(ARRIVAL_WAIT).await;
    assert_eq!(got.header("fspiop-signature"), Some("the DFSP's"));
    let got = server.next(ARRIVAL_WAIT).await;
    assert_eq!(got.header("fspiop-signature"), None);
    dispatcher.shutdown(Duration::from_secs(2)).await;
}

/// The `kasi_jws_operations_total` sample of `kind` and `alg` in `pool`.
fn operations(pool: &crate::jws_pool::JwsPool, kind: &str, alg: &str) -> u64 {
    let mut registry = prometheus_client::registry::Registry::default();
    pool.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let name = format!("kasi_jws_operations_total{{kind=\"{kind}\",alg=\"{alg}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(name.as_str())?.parse().ok())
        .unwrap_or(0)
}

/// What the hub's signature covers on a `PUT` to `uri` without
/// FSPIOP-Destination or Date (as `callback` builds them).
fn hub_put(uri: &str) -> crate::jws::Covered<'_> {
    crate::jws::Covered {
        uri,
        method: "PUT",
        source: "Hub",
        destination: None,
        date: None,
    }
}

/// A dispatcher signing with a fresh RSA key in a pool of one thread
/// behind a queue of 4; the pool, and the key's public half.
fn rsa_signing_dispatcher() -> (
    Dispatcher,
    Arc<crate::jws_pool::JwsPool>,
    crate::jws::VerifyingKey,
) {
    let pool = crate::jws_pool::JwsPool::new(1, 4);
    let key = crate::jws::SigningKey::from_pem(&crate::jws::test_keys::rsa_pem()).unwrap();
    let public = key.public_key();
    let dispatcher = Dispatcher::new(DispatcherConfig {
        signer: Some(CallbackSigner {
            key: Arc::new(key),
            source: "Hub".into(),
            pool: pool.clone(),
        }),
        ..fast_config()
    });
    (dispatcher, pool, public)
}

#[tokio::test]
async fn a_signature_is_computed_once_and_sent_on_every_attempt() {
    static STATUS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(503);
    let mut server = stub(Behaviour::Status(&STATUS)).await;
    let (dispatcher, pool, public) = rsa_signing_dispatcher();
    let body: &'static [u8] = b"{\"transferState\":\"COMMITTED\"}";
    let mut own = callback("payeefsp", server.url("/transfers/1"), body);
    own.origin = Origin::Hub;
    dispatcher.send_tracked(own, None, tracked(crate::now_ms(), 60_000));
    let mut signatures = Vec::new();
    for _ in 0..2 {
        let got = server.next(ARRIVAL_WAIT).await;
        signatures.push(got.header("fspiop-signature").unwrap().to_string());
    }
    STATUS.store(200, Ordering::SeqCst);
    let got = server.next(ARRIVAL_WAIT).await;
    signatures.push(got.header("fspiop-signature").unwrap().to_string());
    dispatcher.shutdown(Duration::from_secs(2)).await;
    assert!(
        signatures.iter().all(|s| *s == signatures[0]),
        "{signatures:?}"
    );
    crate::jws::verify(&public, &signatures[0], &hub_put("/transfers/1"), body).unwrap();
    assert_eq!(operations(&pool, "sign", "RS256"), 1);
}

#[tokio::test]
async fn a_stop_delivers_every_queued_callback_signed() {
    let mut server = stub(Behaviour::Answer(200)).await;
    // One thread for 40 RSA signatures, behind a queue of 4: when the stop
    // begins, workers wait for the pool (some for room in its queue) and
    // the other callbacks for the workers.
    let (dispatcher, pool, public) = rsa_signing_dispatcher();
    for i in 0..40 {
        let mut own = callback("payeefsp", server.url(&format!("/transfers/{i}")), b"{}");
        own.origin = Origin::Hub;
        dispatcher.send(own);
    }
    dispatcher.shutdown(Duration::from_secs(30)).await;
    let stats = stats_of(&dispatcher, "payeefsp");
    assert_eq!((stats.sent_ok, stats.failed), (40, 0), "{stats:?}");
    for _ in 0..40 {
        let got = server.next(ARRIVAL_WAIT).await;
        let signature = got.header("fspiop-signature").expect("signed");
        crate::jws::verify(&public, signature, &hub_put(&got.target), b"{}").unwrap();
    }
    assert_eq!(operations(&pool, "sign", "RS256"), 40);
}

#[test]
fn a_dead_letter_keeps_a_forwarded_signature_and_drops_the_hubs() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _entered = runtime.enter();
    let dispatcher = Dispatcher::new(fast_config());
    let mut headers = HeaderMap::new();
    headers.insert("fspiop-signature", HeaderValue::from_static("signed"));
    let letter = |origin| {
        dead_letter_of(
            &dispatcher.inner,
            "payeefsp",
            origin,
            &Method::PUT,
            "http://p/transfers/1",
            &headers,
            &Bytes::from_static(b"{}"),
            &Tracking::default(),
            1,
            "503".into(),
        )
    };
    let forwarded = letter(Origin::Forwarded);
    assert_eq!(forwarded.origin, Origin::Forwarded);
    assert_eq!(
        forwarded.headers,
        vec![("fspiop-signature".to_string(), "signed".to_string())]
    );
    let own = letter(Origin::Hub);
    assert_eq!(own.origin, Origin::Hub);
    assert!(own.headers.is_empty());
}

#[tokio::test]
async fn a_dropped_connection_is_retried_and_delivered() {
    let mut server = stub(Behaviour::DropFirstConnection).await;
    let dispatcher = Dispatcher::new(fast_config());
    dispatcher.send(callback(
        "payeefsp",
        server.url("/transfers/1"),
        b"{\"a\":1}",
    ));
    let got = server.next(ARRIVAL_WAIT).await;
    assert_eq!(got.body, b"{\"a\":1}");
    dispatcher.shutdown(Duration::from_secs(2)).await;
    let stats = stats_of(&dispatcher, "payeefsp");
    assert_eq!(
        (stats.sent_ok, stats.retried, stats.failed),
        (1, 1, 0),
        "{stats:?}"
    );
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
    assert_eq!(server.count_received(), 0);
}

#[tokio::test]
async fn gives_up_after_max_attempts() {
    let dispatcher = Dispatcher::new(DispatcherConfig {
        max_attempts: 3,
        backoff_base: Duration::from_millis(1),
        ..fast_config()
    });
    dispatcher.send(callback("gone", closed_port_url().await, b"{}"));
    dispatcher.shutdown(Duration::from_secs(2)).await;
    let stats = stats_of(&dispatcher, "gone");
    assert_eq!(
        (stats.sent_ok, stats.retried, stats.failed),
        (0, 2, 1),
        "{stats:?}"
    );
    assert_eq!(stats.latency_count, 0);
}

fn tracked(event_ms: i64, retry_for_ms: i64) -> Option<Tracking> {
    Some(Tracking {
        event_ms: Some(event_ms),
        retry_until_ms: Some(crate::now_ms() + retry_for_ms),
        transfer_id: Some("t1".into()),
        dead_letter: None,
    })
}

#[derive(Default)]
struct Written {
    watermarks: Vec<i64>,
    kept: Vec<u64>,
    forgotten: Vec<u64>,
}

struct FakeJournal(Arc<Mutex<Written>>);

impl DeliveryJournal for FakeJournal {
    fn write(
        &mut self,
        watermark: Option<i64>,
        keep: &[DeadLetter],
        forget: &[u64],
    ) -> Result<(), String> {
        let mut written = self.0.lock().unwrap();
        written.watermarks.extend(watermark);
        written.kept.extend(keep.iter().map(|l| l.id));
        written.forgotten.extend(forget);
        Ok(())
    }
}

#[tokio::test]
async fn a_refusal_counts_only_on_the_first_attempt_of_a_request_passed_on() {
    static STATUS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(503);
    let mut server = stub(Behaviour::Status(&STATUS)).await;
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let url = server.url("/quotes");
    let ask = |dispatcher: &Dispatcher| {
        let told = Arc::clone(&told);
        dispatcher.send_asking(
            callback("payeefsp", url.clone(), b"{}"),
            Box::new(move |undelivered| told.lock().unwrap().push(format!("{undelivered:?}"))),
        );
    };
    let dispatcher = Dispatcher::new(fast_config());
    ask(&dispatcher);
    // Two 503s (the first surely answered before the second came),
    // then a 4xx: the DFSP may have taken an earlier attempt, and its
    // "duplicate" says nothing against the answer it will send.
    server.next(ARRIVAL_WAIT).await;
    server.next(ARRIVAL_WAIT).await;
    STATUS.store(400, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + ARRIVAL_WAIT;
    while stats_of(&dispatcher, "payeefsp").http_error == 0 {
        assert!(std::time::Instant::now() < deadline, "no 4xx answer");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    dispatcher.shutdown(Duration::from_secs(2)).await;
    assert!(
        told.lock().unwrap().is_empty(),
        "{:?}",
        told.lock().unwrap()
    );
    // A refusal at the first attempt is one.
    let dispatcher = Dispatcher::new(fast_config());
    ask(&dispatcher);
    server.next(ARRIVAL_WAIT).await;
    dispatcher.shutdown(Duration::from_secs(2)).await;
    let told = told.lock().unwrap();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].contains("Refused") && told[0].contains("400"),
        "{told:?}"
    );
}

#[tokio::test]
async fn a_5xx_is_retried_until_the_destination_answers() {
    static STATUS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(503);
    let mut server = stub(Behaviour::Status(&STATUS)).await;
    let dispatcher = Dispatcher::new(fast_config());
    let event = crate::now_ms();
    dispatcher.send_tracked(
        callback("payeefsp", server.url("/transfers/1"), b"{}"),
        None,
        tracked(event, 60_000),
    );
    server.next(ARRIVAL_WAIT).await;
    server.next(ARRIVAL_WAIT).await;
    let failing = stats_of(&dispatcher, "payeefsp");
    assert!(failing.failing_since_ms > 0, "{failing:?}");
    assert_eq!(
        dispatcher.watermark(event + 10_000),
        event - WATERMARK_MARGIN_MS,
        "an unanswered callback holds the watermark"
    );
    STATUS.store(200, Ordering::SeqCst);
    server.next(ARRIVAL_WAIT).await;
    dispatcher.shutdown(Duration::from_secs(2)).await;
    let stats = stats_of(&dispatcher, "payeefsp");
    assert_eq!(
        (stats.sent_ok, stats.failed, stats.failing_since_ms),
        (1, 0, 0)
    );
    assert!(stats.retried >= 2, "{stats:?}");
    assert_eq!(
        dispatcher.watermark(event + 10_000),
        event + 10_000 - WATERMARK_MARGIN_MS
    );
}

#[tokio::test]
async fn a_tracked_callback_past_its_deadline_is_a_dead_letter_until_resent() {
    static STATUS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(502);
    let mut server = stub(Behaviour::Status(&STATUS)).await;
    let dispatcher = Dispatcher::new(DispatcherConfig {
        final_retry_for: Duration::from_secs(60),
        ..fast_config()
    });
    let written = Arc::new(Mutex::new(Written::default()));
    dispatcher.attach_journal(Box::new(FakeJournal(written.clone())), Vec::new());
    let event = crate::now_ms();
    dispatcher.send_tracked(
        callback("payerfsp", server.url("/transfers/1"), b"{\"x\":1}"),
        None,
        tracked(event, 100),
    );
    server.next(ARRIVAL_WAIT).await;
    let letter = loop {
        if let Some(letter) = dispatcher.dead_letters(Some("payerfsp")).pop() {
            break letter;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(letter.transfer_id.as_deref(), Some("t1"));
    assert_eq!(letter.body, b"{\"x\":1}");
    assert!(letter.reason.contains("502"), "{letter:?}");
    assert!(dispatcher.dead_letters(Some("payeefsp")).is_empty());
    dispatcher.flush_journal().await;
    assert_eq!(written.lock().unwrap().kept, [letter.id]);
    // Kept durably: the watermark is released.
    assert_eq!(
        dispatcher.watermark(event + 1),
        event + 1 - WATERMARK_MARGIN_MS
    );
    assert_eq!(stats_of(&dispatcher, "payerfsp").dead_letters, 1);
    while server.count_received() > 0 {}

    STATUS.store(200, Ordering::SeqCst);
    assert_eq!(dispatcher.resend(Some("payeefsp")), 0);
    assert_eq!(dispatcher.resend(None), 1);
    let got = server.next(ARRIVAL_WAIT).await;
    assert_eq!(got.body, b"{\"x\":1}");
    dispatcher.shutdown(Duration::from_secs(2)).await;
    assert!(dispatcher.dead_letters(None).is_empty());
    let written = written.lock().unwrap();
    assert_eq!(written.forgotten, [letter.id]);
    assert!(!written.watermarks.is_empty());
}

#[tokio::test]
async fn a_tracked_callback_gets_a_last_attempt_at_its_deadline() {
    // A payee down until just before the prepare's expiry: the next
    // backoff (≥ 1 s) would pass the deadline, so the last attempt is
    // made at the deadline itself, and delivers.
    static STATUS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(503);
    let mut server = stub(Behaviour::Status(&STATUS)).await;
    let dispatcher = Dispatcher::new(DispatcherConfig {
        backoff_base: Duration::from_secs(2),
        ..fast_config()
    });
    let deadline_ms = crate::now_ms() + 400;
    dispatcher.send_tracked(
        callback("payeefsp", server.url("/transfers"), b"{}"),
        None,
        Some(Tracking {
            event_ms: Some(crate::now_ms()),
            retry_until_ms: Some(deadline_ms),
            transfer_id: Some("t1".into()),
            dead_letter: None,
        }),
    );
    server.next(Duration::from_secs(2)).await;
    // Up now, well before the deadline (the first attempt's answer,
    // read as its request arrived, was the 503).
    tokio::time::sleep(Duration::from_millis(150)).await;
    STATUS.store(200, Ordering::SeqCst);
    server.next(Duration::from_secs(2)).await;
    let last_attempt_ms = crate::now_ms();
    // (The wall clock and the timer's clock may differ by a tick.)
    assert!(
        last_attempt_ms + 20 >= deadline_ms,
        "the last attempt came {} ms before the deadline",
        deadline_ms - last_attempt_ms
    );
    dispatcher.shutdown(Duration::from_secs(2)).await;
    let stats = stats_of(&dispatcher, "payeefsp");
    assert_eq!((stats.sent_ok, stats.retried), (1, 1), "{stats:?}");
    assert!(dispatcher.dead_letters(None).is_empty());
}

#[tokio::test]
async fn a_follow_up_goes_once_the_first_attempt_has_ended() {
    static PAYER_STATUS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(200);
    let mut payer = stub(Behaviour::Status(&PAYER_STATUS)).await;
    let mut payee = stub(Behaviour::Answer(200)).await;
    // The payer's retries wait 30 s (long past anything a loaded
    // machine could take to deliver the payee's), on its one worker.
    let dispatcher = Dispatcher::new(DispatcherConfig {
        backoff_base: Duration::from_secs(30),
        max_in_flight_per_destination: 1,
        ..fast_config()
    });
    let (payer_url, payee_url) = (payer.url(""), payee.url(""));
    let send = |path: &str, body: &'static [u8]| {
        dispatcher.send_then(
            callback("payerfsp", format!("{payer_url}{path}"), b"first"),
            None,
            None,
            Some(FollowUp {
                callback: callback("payeefsp", format!("{payee_url}{path}"), body),
                tracking: None,
            }),
        )
    };
    // Answered: then the payee's goes.
    send("/transfers/1", b"then");
    payer.next(ARRIVAL_WAIT).await;
    let got = payee.next(ARRIVAL_WAIT).await;
    assert_eq!(got.body, b"then");
    // A payer whose endpoint fails: the payee is told after its first
    // attempt, not held back by the payer's retries.
    PAYER_STATUS.store(503, Ordering::SeqCst);
    send("/transfers/2", b"still told");
    payer.next(ARRIVAL_WAIT).await;
    let got = payee.next(ARRIVAL_WAIT).await;
    assert_eq!(got.body, b"still told");
    assert_eq!(
        payer.count_received(),
        0,
        "the payer's retry waits its backoff"
    );
    // While the payer fails (its one worker waits out the backoff), a
    // new follow-up does not queue behind it: the payee hears at once,
    // before the payer's callback is even attempted (it would have
    // waited 30 s).
    send("/transfers/3", b"not held");
    let got = payee.next(ARRIVAL_WAIT).await;
    assert_eq!(got.body, b"not held");
    assert_eq!(payer.count_received(), 0, "the payer's is still queued");
    dispatcher.shutdown(Duration::from_millis(100)).await;
    assert_eq!(stats_of(&dispatcher, "payeefsp").sent_ok, 3);
}

#[tokio::test]
async fn a_client_error_is_counted_and_not_retried() {
    let mut server = stub(Behaviour::Answer(400)).await;
    let dispatcher = Dispatcher::new(fast_config());
    for _ in 0..3 {
        dispatcher.send(callback("payeefsp", server.url("/transfers/1"), b"{}"));
    }
    dispatcher.shutdown(Duration::from_secs(2)).await;
    let stats = stats_of(&dispatcher, "payeefsp");
    assert_eq!(
        (stats.http_error, stats.sent_ok, stats.retried, stats.failed),
        (3, 0, 0, 0),
        "{stats:?}"
    );
    assert_eq!(stats.latency_count, 3);
    assert_eq!(server.count_received(), 3);
}

#[tokio::test]
async fn a_full_queue_drops_and_counts() {
    let mut server = stub(Behaviour::Hang).await;
    let dispatcher = Dispatcher::new(DispatcherConfig {
        max_in_flight_per_destination: 1,
        max_queue_per_destination: 5,
        ..fast_config()
    });
    dispatcher.send(callback("slow", server.url("/1"), b"{}"));
    // The worker has taken the first one: the queue is empty again.
    server.next(ARRIVAL_WAIT).await;
    for _ in 0..8 {
        dispatcher.send(callback("slow", server.url("/2"), b"{}"));
    }
    let stats = stats_of(&dispatcher, "slow");
    assert_eq!(
        (stats.in_flight, stats.queued, stats.dropped),
        (1, 5, 3),
        "{stats:?}"
    );

    dispatcher.shutdown(Duration::ZERO).await;
    let stats = stats_of(&dispatcher, "slow");
    assert_eq!(
        (stats.in_flight, stats.queued, stats.dropped, stats.failed),
        (0, 0, 3, 6),
        "{stats:?}"
    );
}

#[tokio::test]
async fn shutdown_delivers_what_is_queued() {
    let mut server = stub(Behaviour::Answer(202)).await;
    let dispatcher = Dispatcher::new(DispatcherConfig {
        max_in_flight_per_destination: 2,
        ..fast_config()
    });
    for i in 0..100 {
        dispatcher.send(callback(
            "payeefsp",
            server.url(&format!("/transfers/{i}")),
            b"{}",
        ));
    }
    dispatcher.shutdown(Duration::from_secs(3)).await;
    assert_eq!(server.count_received(), 100);
    let stats = stats_of(&dispatcher, "payeefsp");
    assert_eq!(
        (stats.sent_ok, stats.failed, stats.in_flight, stats.queued),
        (100, 0, 0, 0),
        "{stats:?}"
    );

    // Closed for good.
    dispatcher.send(callback("payeefsp", server.url("/late"), b"{}"));
    let stats = stats_of(&dispatcher, "payeefsp");
    assert_eq!((stats.dropped, stats.queued), (1, 0));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(server.count_received(), 0);
}

#[tokio::test]
async fn shutdown_gives_up_at_its_deadline() {
    let mut server = stub(Behaviour::Hang).await;
    // The hanging request would time out after 20 s: shutdown's 100 ms
    // deadline, not that, must end it.
    let dispatcher = Dispatcher::new(DispatcherConfig {
        request_timeout: Duration::from_secs(20),
        ..fast_config()
    });
    for _ in 0..3 {
        dispatcher.send(callback("slow", server.url("/1"), b"{}"));
    }
    server.next(ARRIVAL_WAIT).await;
    let started = std::time::Instant::now();
    dispatcher.shutdown(Duration::from_millis(100)).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(100) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    let stats = stats_of(&dispatcher, "slow");
    assert_eq!(
        (stats.failed, stats.in_flight, stats.queued),
        (3, 0, 0),
        "{stats:?}"
    );
}

#[tokio::test]
async fn unusable_urls_fail_at_once_without_retry() {
    let dispatcher = Dispatcher::new(fast_config());
    for url in ["not a url", "/transfers/1", "ftp://host/x"] {
        dispatcher.send(callback("odd", url.to_owned(), b"{}"));
    }
    let stats = stats_of(&dispatcher, "odd");
    assert_eq!(
        (stats.failed, stats.retried, stats.queued, stats.in_flight),
        (3, 0, 0, 0),
        "{stats:?}"
    );
    dispatcher.shutdown(Duration::ZERO).await;
}

#[tokio::test]
async fn send_works_from_a_thread_outside_the_runtime() {
    let mut server = stub(Behaviour::Answer(200)).await;
    let dispatcher = Dispatcher::new(fast_config());
    let sender = dispatcher.clone();
    let url = server.url("/transfers/1");
    std::thread::spawn(move || sender.send(callback("payeefsp", url, b"{}")))
        .join()
        .unwrap();
    server.next(ARRIVAL_WAIT).await;
    dispatcher.shutdown(Duration::from_secs(2)).await;
    assert_eq!(stats_of(&dispatcher, "payeefsp").sent_ok, 1);
}

#[test]
fn debug_never_shows_the_body() {
    let cb = callback("payeefsp", "http://h/x".to_owned(), b"secret-payload");
    let text = format!("{cb:?}");
    assert!(!text.contains("secret"), "{text}");
    assert!(text.contains("body_len: 14"), "{text}");
}
