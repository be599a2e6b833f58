use std::time::{Duration, Instant};

use super::*;

fn test_headers() -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert("fspiop-source", "payerfsp".parse().unwrap());
    headers.insert("authorization", "Bearer secret-token".parse().unwrap());
    headers.append("x-repeated", "one".parse().unwrap());
    headers.append("x-repeated", "two".parse().unwrap());
    headers
}

/// A request's message (its strings leaked: a test's few).
fn message(at_ms: i64, resource: Resource, id: &str, body: &str) -> Message<'static> {
    static HEADERS: std::sync::OnceLock<http::HeaderMap> = std::sync::OnceLock::new();
    Message {
        at_ms,
        direction: Direction::In,
        resource,
        id: Box::leak(id.into()),
        peer: "payerfsp",
        method: "POST",
        target: "/transfers",
        status: Some(202),
        note: "",
        attempt: 0,
        headers: Headers::Map(HEADERS.get_or_init(test_headers)),
        body: Box::leak(body.as_bytes().into()),
    }
}

/// Waits until the writer has written `count` messages.
fn written(log: &WireLog, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.stats().written < count {
        assert!(Instant::now() < deadline, "written {:?}", log.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn all(dir: &std::path::Path, resource: Resource, id: &str) -> Found {
    find(
        dir,
        resource,
        id,
        i64::MIN,
        i64::MAX,
        usize::MAX,
        usize::MAX,
    )
    .unwrap()
}

#[test]
fn a_message_reads_back_as_written_without_its_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let log = WireLog::open(dir.path(), Config::default()).unwrap();
    log.record(message(
        1_000,
        Resource::Transfer,
        "t-1",
        "{\"transferId\":\"t-1\"}",
    ));
    log.record(message(1_001, Resource::FxTransfer, "t-1", "fx"));
    log.record(message(1_002, Resource::Transfer, "t-2", "other"));
    written(&log, 3);
    let found = all(dir.path(), Resource::Transfer, "t-1");
    assert!(found.complete);
    assert_eq!(found.messages.len(), 1);
    let recorded = &found.messages[0];
    assert_eq!(recorded.body, b"{\"transferId\":\"t-1\"}");
    assert_eq!(recorded.status, Some(202));
    assert_eq!(
        (recorded.direction, recorded.method.as_str()),
        (Direction::In, "POST")
    );
    let header = |name: &str| {
        recorded
            .headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(header("authorization"), vec![format::REDACTED]);
    assert_eq!(header("x-repeated"), vec!["one", "two"]);
    assert_eq!(header("fspiop-source"), vec!["payerfsp"]);
    // The conversion with the same id is another key.
    assert_eq!(
        all(dir.path(), Resource::FxTransfer, "t-1").messages[0].body,
        b"fx"
    );
    // No secret reached the disk at all.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(!bytes.windows(12).any(|w| w == b"secret-token"));
    }
}

#[test]
fn segments_close_at_their_size_are_indexed_and_searched_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        segment_bytes: 4_096,
        ..Config::default()
    };
    let log = WireLog::open(dir.path(), config).unwrap();
    let body = "x".repeat(900);
    for n in 0..40 {
        log.record(message(
            10_000 + n * 100,
            Resource::Transfer,
            &format!("t-{}", n % 4),
            &body,
        ));
        // One at a time, so that each batch is a write of its own.
        written(&log, n as u64 + 1);
    }
    let segments = writer::list_segments(dir.path()).unwrap();
    assert!(segments.len() >= 8, "{} segments", segments.len());
    let indexed = segments
        .iter()
        .filter(|(_, path)| writer::index_path(path).exists())
        .count();
    assert_eq!(indexed, segments.len() - 1, "all but the open one");
    let found = all(dir.path(), Resource::Transfer, "t-1");
    let times: Vec<i64> = found.messages.iter().map(|m| m.at_ms).collect();
    let expected: Vec<i64> = (0..40)
        .filter(|n| n % 4 == 1)
        .map(|n| 10_000 + n * 100)
        .collect();
    assert_eq!(times, expected);
    // A range: only its messages, from the segments that can hold them.
    let found = find(
        dir.path(),
        Resource::Transfer,
        "t-1",
        12_000,
        13_000,
        usize::MAX,
        usize::MAX,
    )
    .unwrap();
    let times: Vec<i64> = found.messages.iter().map(|m| m.at_ms).collect();
    assert_eq!(times, vec![12_100, 12_500, 12_900]);
    // A segment budget: cut short, and says where it stopped.
    let found = find(
        dir.path(),
        Resource::Transfer,
        "t-1",
        0,
        i64::MAX,
        2,
        usize::MAX,
    )
    .unwrap();
    assert!(!found.complete);
    assert!(found.searched_through_ms.unwrap() < 14_000);
    assert!(found
        .messages
        .iter()
        .all(|m| m.at_ms <= found.searched_through_ms.unwrap()));
}

#[test]
fn a_torn_tail_is_ignored_and_a_restart_indexes_the_last_segment() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = WireLog::open(dir.path(), Config::default()).unwrap();
        log.record(message(5_000, Resource::Transfer, "t-1", "first"));
        log.record(message(5_001, Resource::Transfer, "t-1", "second"));
        written(&log, 2);
    }
    // Wait for the writer (its handle dropped) to close its segment, then
    // make it look like a crash: no index, and half a record at the end.
    let deadline = Instant::now() + Duration::from_secs(20);
    let segment = loop {
        let segments = writer::list_segments(dir.path()).unwrap();
        if let Some((_, path)) = segments
            .last()
            .filter(|(_, p)| writer::index_path(p).exists())
        {
            break path.clone();
        }
        assert!(Instant::now() < deadline, "the segment was never closed");
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = std::fs::remove_file(writer::index_path(&segment));
    let mut torn = Vec::new();
    format::encode(
        &message(5_002, Resource::Transfer, "t-1", "torn"),
        &mut torn,
    );
    torn.truncate(torn.len() - 3);
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap()
        .write_all(&torn)
        .unwrap();
    let bodies =
        |found: Found| -> Vec<Vec<u8>> { found.messages.into_iter().map(|m| m.body).collect() };
    assert_eq!(
        bodies(all(dir.path(), Resource::Transfer, "t-1")),
        vec![b"first".to_vec(), b"second".to_vec()]
    );
    // A new writer indexes it, and appends to a new segment.
    let log = WireLog::open(dir.path(), Config::default()).unwrap();
    assert!(writer::index_path(&segment).exists());
    log.record(message(6_000, Resource::Transfer, "t-1", "after"));
    written(&log, 1);
    assert_eq!(
        bodies(all(dir.path(), Resource::Transfer, "t-1")),
        vec![b"first".to_vec(), b"second".to_vec(), b"after".to_vec()]
    );
}

#[test]
fn the_disk_bound_deletes_the_oldest_segments() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        segment_bytes: 4_096,
        max_bytes: 20_000,
        ..Config::default()
    };
    let log = WireLog::open(dir.path(), config).unwrap();
    let body = "y".repeat(1_500);
    for n in 0..60 {
        log.record(message(
            1_000 + n,
            Resource::Transfer,
            &format!("t-{n}"),
            &body,
        ));
        written(&log, n as u64 + 1);
    }
    // Housekeeping runs at least every second.
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.stats().bytes_on_disk > 20_000 {
        assert!(Instant::now() < deadline, "{:?}", log.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    let on_disk: u64 = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().len())
        .sum();
    assert!(on_disk <= 20_000 + 4_096 + 2_000, "{on_disk} bytes");
    assert!(all(dir.path(), Resource::Transfer, "t-0")
        .messages
        .is_empty());
    assert_eq!(
        all(dir.path(), Resource::Transfer, "t-59").messages.len(),
        1
    );
}

#[test]
fn segments_past_the_retention_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        retention: Duration::from_secs(5),
        segment_age: Duration::ZERO,
        ..Config::default()
    };
    let log = WireLog::open(dir.path(), config).unwrap();
    let now = now_ms();
    for (n, at) in [now - 60_000, now - 30_000, now].into_iter().enumerate() {
        log.record(message(at, Resource::Transfer, &format!("t-{n}"), "body"));
        written(&log, n as u64 + 1);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !all(dir.path(), Resource::Transfer, "t-0")
        .messages
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the oldest segment is still there"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The next one holds a message past the retention too, but also
    // (as far as the writer knows) newer ones: kept.
    assert_eq!(all(dir.path(), Resource::Transfer, "t-1").messages.len(), 1);
    assert_eq!(all(dir.path(), Resource::Transfer, "t-2").messages.len(), 1);
}

#[test]
fn a_full_queue_drops_and_counts_never_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        max_queued_bytes: 10_000,
        ..Config::default()
    };
    let log = WireLog::open(dir.path(), config).unwrap();
    let body = "z".repeat(4_000);
    let started = Instant::now();
    for n in 0..2_000 {
        log.record(message(n, Resource::Transfer, "t", &body));
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = log.stats();
        if stats.written + stats.dropped == 2_000 {
            assert!(stats.dropped > 0, "{stats:?}");
            assert!(stats.written > 0, "{stats:?}");
            break;
        }
        assert!(Instant::now() < deadline, "{stats:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        all(dir.path(), Resource::Transfer, "t").messages.len() as u64,
        log.stats().written
    );
}

#[test]
fn paths_name_their_resource_and_id() {
    assert_eq!(
        Resource::of_path("/transfers"),
        Some((Resource::Transfer, None))
    );
    assert_eq!(
        Resource::of_path("/transfers/abc"),
        Some((Resource::Transfer, Some("abc")))
    );
    assert_eq!(
        Resource::of_path("http://dfsp:8080/api/fxTransfers/abc/error"),
        Some((Resource::FxTransfer, Some("abc")))
    );
    assert_eq!(
        Resource::of_path("https://dfsp/base/transfers"),
        Some((Resource::Transfer, None))
    );
    assert_eq!(Resource::of_path("/quotes/abc"), None);
    assert_eq!(Resource::of_path("/parties/MSISDN/123"), None);
}

#[test]
fn headers_encoded_before_the_handler_make_the_same_record() {
    let headers = test_headers();
    let encoded = EncodedHeaders::of(&headers);
    let base = message(7_000, Resource::Transfer, "t-1", "{\"transferId\":\"t-1\"}");
    let from_map = Message {
        headers: Headers::Map(&headers),
        ..base
    };
    let from_section = Message {
        headers: Headers::Encoded(&encoded),
        ..base
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    format::encode(&from_map, &mut a);
    format::encode(&from_section, &mut b);
    assert_eq!(a, b);
    assert!(format::encoded_len_hint(&from_map) >= a.len());
    assert!(format::encoded_len_hint(&from_section) >= b.len());
    let text = String::from_utf8_lossy(&b);
    assert!(!text.contains("secret-token"), "a credential was encoded");
    assert!(text.contains(format::REDACTED));
}
