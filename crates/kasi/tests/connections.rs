//! End-to-end connection hygiene of the real `kasi serve` binary: a cap on
//! open connections answered at once in FSPIOP's shape, slow clients cut by
//! the head and body timeouts, refusals with a body, and the open-files
//! limit raised at start.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::*;

/// `name{api="api"}` on the hub's `/metrics`.
fn connection_metric(hub: &Hub, name: &str, api: &str) -> u64 {
    let prefix = format!("{name}{{api=\"{api}\"}} ");
    let metrics = hub.admin("GET", "/metrics", None).text();
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in /metrics"))
        .trim()
        .parse()
        .unwrap()
}

/// Waits (bounded) until `kasi_connections_open{api="fspiop"}` is `open`.
fn await_open(hub: &Hub, open: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = connection_metric(hub, "kasi_connections_open", "fspiop");
        if now == open {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{now} FSPIOP connections open, expected {open}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn health(hub: &Hub) -> Response {
    http(hub.api, "GET", "/health", &[], b"")
}

#[test]
fn a_connection_over_the_cap_is_answered_at_once_and_the_next_after_a_close_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start_with(&dir.path().join("data"), &["--max-connections", "3"]);
    let mut idle: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(hub.api).unwrap())
        .collect();
    await_open(&hub, 3);

    let started = Instant::now();
    let refused = health(&hub);
    assert_error_response(&refused, 503, "2003");
    assert!(
        refused.text().contains("too many open connections"),
        "{refused:?}"
    );
    // Over the cap a connection would otherwise wait in the backlog for
    // ever; seconds of slack for a loaded machine.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered at once"
    );
    assert_eq!(
        connection_metric(&hub, "kasi_connections_refused_total", "fspiop"),
        1
    );
    // The admin address has a cap of its own and is unaffected.
    assert_eq!(hub.admin("GET", "/health", None).status, 200);

    drop(idle.pop());
    await_open(&hub, 2);
    assert_eq!(health(&hub).status, 200);
    assert_eq!(
        connection_metric(&hub, "kasi_connections_refused_total", "fspiop"),
        1
    );
}

#[test]
fn too_many_header_fields_are_refused_in_fspiop_shape() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    let headers: Vec<(String, String)> = (0..150)
        .map(|n| (format!("X-Filler-{n}"), "x".to_string()))
        .collect();
    let response = http(hub.api, "GET", "/health", &headers, b"");
    assert_error_response(&response, 431, "3101");
    assert!(response.text().contains("header fields"), "{response:?}");
    let response = http(hub.api, "GET", "/health", &headers[..90], b"");
    assert_eq!(
        response.status, 200,
        "90 header fields are fine: {response:?}"
    );
}

#[test]
fn slow_heads_are_cut_and_short_bodies_answered_without_waiting_for_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start_with(
        &dir.path().join("data"),
        &["--header-timeout-ms", "300", "--body-timeout-ms", "300"],
    );
    hub.setup();
    hub.onboard(PAYER, "http://127.0.0.1:9", 10_000, 5_000);
    hub.onboard(PAYEE, "http://127.0.0.1:9", 10_000, 5_000);

    // A head that never ends: the connection is closed (after the 300 ms
    // header timeout; the bound below leaves a loaded machine slack and
    // stays far under the 30 s request timeout).
    let mut slow = TcpStream::connect(hub.api).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    slow.write_all(b"POST /transfers HTTP/1.1\r\nHost: kasi\r\n")
        .unwrap();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "a slow head must be cut, not held: {:?}",
        started.elapsed()
    );

    // A body shorter than its Content-Length: 400 with why, and nothing
    // changed.
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", far_future());
    let mut head = "POST /transfers HTTP/1.1\r\nHost: kasi\r\n".to_string();
    for (name, value) in fspiop_headers(PAYER, PAYEE, true) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len() + 50));
    let mut short = TcpStream::connect(hub.api).unwrap();
    short
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    short.write_all(head.as_bytes()).unwrap();
    short.write_all(body.as_bytes()).unwrap();
    let response = read_response(&mut short).expect("an answer");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "answered after the body timeout, not the request timeout: {:?}",
        started.elapsed()
    );
    assert_error_response(&response, 400, "3101");
    assert!(response.text().contains("Content-Length"), "{response:?}");
    assert_eq!(hub.position(PAYER), 0.0, "nothing reserved");
}

#[test]
fn the_open_files_limit_is_raised_to_the_hard_limit() {
    use std::os::unix::process::CommandExt as _;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut command = Hub::serve_command(&data, &[]);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            limit.rlim_cur = 256.min(limit.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            Ok(())
        });
    }
    let hub = Hub::spawn(command, &data);
    let log = hub.log();
    let line = log
        .lines()
        .find(|line| line.contains("raised the open-files limit"))
        .unwrap_or_else(|| panic!("no raise logged:\n{log}"));
    assert!(line.contains("from=256"), "{line}");
    let pid = hub.pid();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let open_files = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap();
    let fields: Vec<&str> = open_files.split_whitespace().collect();
    assert_eq!(fields[3], fields[4], "soft = hard: {open_files}");
    assert_eq!(health(&hub).status, 200);
}

/// Sends `raw` as is and reads the answer.
fn raw_exchange(hub: &Hub, raw: &[u8]) -> Response {
    let mut stream = TcpStream::connect(hub.api).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(raw).unwrap();
    read_response(&mut stream).expect("an answer")
}

#[test]
fn requests_hyper_cannot_parse_are_refused_in_fspiop_shape() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    for (raw, status) in [
        (b"NOT AN HTTP REQUEST\r\n\r\n".to_vec(), 400),
        (
            b"GET /health HTTP/1.1\r\nHost: kasi\r\nX-Bad: a\0b\r\n\r\n".to_vec(),
            400,
        ),
        (
            format!(
                "GET /health HTTP/1.1\r\nHost: kasi\r\nX-Big: {}\r\n\r\n",
                "x".repeat(80 * 1024)
            )
            .into_bytes(),
            431,
        ),
    ] {
        let response = raw_exchange(&hub, &raw);
        assert_error_response(&response, status, "3101");
        assert_eq!(response.header("content-type"), Some("application/json"));
    }
    // And the hub's ordinary answers are untouched.
    let response = health(&hub);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.json()["status"], "OK");
}
