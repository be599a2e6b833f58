//! End-to-end connection hygiene of the real `kasi serve` binary: a cap on
//! open connections, and on those of one client address, answered at once
//! in FSPIOP's shape and warned about; slow clients cut by the head and
//! body timeouts; a body declared too large refused before it is sent;
//! refusals with a body; and the open-files limit raised at start, the
//! caps sized to it (DFSPs get through a flood from one address even at
//! 1,024 files).

mod support;

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
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
    let hub = Hub::start_with(
        &dir.path().join("data"),
        &[
            "--max-connections",
            "3",
            "--max-connections-per-client",
            "3",
        ],
    );
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
    // Said in the log (rate-limited), and counted as a refusal.
    hub.await_log("the fspiop address holds its 3 connections; one from 127.0.0.1 refused");
    hub.await_refusals("connections", Some("unknown"), 1);
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

/// `count` connections to the FSPIOP address from `from`, opened and left
/// idle (those the hub refuses are answered and closed by it).
fn idle_from(hub: &Hub, from: IpAddr, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|_| connect_from(from, hub.api).unwrap())
        .collect()
}

/// The answer the hub wrote, unasked, on a connection it refused at
/// accept.
fn refusal_on(stream: &mut TcpStream) -> Response {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    read_response(stream).expect("the refused connection is answered")
}

/// Prepares and fulfils one transfer between the scenario's DFSPs (on
/// 127.0.0.1), each step answered and each callback delivered.
fn transfer(scenario: &Scenario) {
    let (id, _) = scenario.reserve("1", far_future());
    scenario.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    let told = scenario.payer.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(told.json()["transferState"], "COMMITTED", "{told:?}");
    scenario.payee.expect("PUT", &format!("/transfers/{id}"));
}

#[test]
fn one_client_holding_idle_connections_cannot_shut_the_dfsps_out() {
    let scenario = Scenario::with_hub_flags(
        10_000,
        5_000,
        &[
            "--max-connections",
            "120",
            "--max-connections-per-client",
            "40",
            // Idle connections stay open for the whole test.
            "--header-timeout-ms",
            "60000",
        ],
    );
    let hub = &scenario.hub;
    // A slowloris from one address: it gets its 40, the rest are refused
    // at once.
    let flooder: IpAddr = "127.0.0.2".parse().unwrap();
    let mut idle = idle_from(hub, flooder, 60);
    hub.await_metric_line("kasi_connections_refused_per_client_total{api=\"fspiop\"} 20");
    let refused = refusal_on(idle.last_mut().unwrap());
    assert_refused_for_now(&refused);
    assert!(refused.text().contains("from this address"), "{refused:?}");
    await_open(hub, 40);
    // Said in the log, naming the address, once for the burst (the next
    // line, if any, counts what it did not say), and counted.
    let warning = "127.0.0.2 holds 40 connections to the fspiop address";
    hub.await_log(warning);
    hub.await_refusals("client_connections", Some("unknown"), 20);
    let lines = hub.log().lines().filter(|l| l.contains(warning)).count();
    assert!(lines <= 2, "{lines} warnings for one burst:\n{}", hub.log());

    // Meanwhile the DFSPs (127.0.0.1) transfer as ever.
    for _ in 0..5 {
        transfer(&scenario);
    }
    assert_eq!(
        connection_metric(hub, "kasi_connections_refused_total", "fspiop"),
        0,
        "the address never filled"
    );
    // The flooder's connections close: its share is free again.
    drop(idle);
    await_open(hub, 0);
    let again = idle_from(hub, flooder, 40);
    await_open(hub, 40);
    drop(again);
}

#[test]
fn a_declared_body_above_the_limit_is_refused_at_once_without_waiting_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    for (address, headers) in [
        (hub.api, fspiop_headers(PAYER, PAYEE, true)),
        (
            hub.admin,
            vec![("Content-Type".to_string(), "application/json".to_string())],
        ),
    ] {
        let path = if address == hub.api {
            "/transfers"
        } else {
            "/participants"
        };
        let mut head = format!("POST {path} HTTP/1.1\r\nHost: kasi\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        // 100 MB declared, nothing sent.
        head.push_str("Content-Length: 100000000\r\n\r\n");
        let mut stream = TcpStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let started = Instant::now();
        stream.write_all(head.as_bytes()).unwrap();
        let response = read_response(&mut stream).expect("an answer");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "answered at once, not after the body timeout: {:?}",
            started.elapsed()
        );
        assert_error_response(&response, 413, "3101");
        assert!(response.text().contains("larger than"), "{response:?}");
        assert_eq!(response.header("connection"), Some("close"));
    }
}

#[test]
fn at_1024_open_files_the_hub_says_its_caps_and_dfsps_get_through_a_flood_from_one_address() {
    use std::os::unix::process::CommandExt as _;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut command = Hub::serve_command(&data, &["--header-timeout-ms", "60000"]);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            // Soft and hard: nothing to raise it to.
            let limit = libc::rlimit {
                rlim_cur: 1_024,
                rlim_max: 1_024,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            Ok(())
        });
    }
    let hub = Hub::spawn(command, &data);
    let log = hub.log();
    let caps = log
        .lines()
        .find(|line| line.contains("connection caps"))
        .unwrap_or_else(|| panic!("no caps said at start:\n{log}"));
    for field in [
        "fspiop_connections=576",
        "fspiop_per_client=288",
        "admin_connections=192",
        "open_files_limit=1024",
        "kept for the hub's own files",
    ] {
        assert!(caps.contains(field), "{field} in {caps}");
    }
    let scenario = Scenario::on(hub, dir, 10_000, 5_000);
    let hub = &scenario.hub;

    let flood = idle_from(hub, "127.0.0.2".parse().unwrap(), 288 + 32);
    hub.await_metric_line("kasi_connections_refused_per_client_total{api=\"fspiop\"} 32");
    await_open(hub, 288);
    hub.await_log("127.0.0.2 holds 288 connections to the fspiop address");
    for _ in 0..3 {
        transfer(&scenario);
    }
    assert_eq!(
        connection_metric(hub, "kasi_accept_errors_total", "fspiop"),
        0,
        "the limit held every connection"
    );
    drop(flood);
}
