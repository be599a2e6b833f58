//! Shared machinery of the end-to-end transfer tests: the real `kasi serve`
//! process, DFSP callback stubs (real HTTP servers), a small HTTP/1.1
//! client, onboarding over the admin API, and FSPIOP bodies and headers.
//!
//! Nothing here sleeps for a fixed time to wait for something: callbacks
//! are awaited on a channel with a deadline, and "nothing arrives" is a
//! short bounded wait.

#![allow(dead_code)]

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::response::IntoResponse as _;
use serde_json::{json, Value};

// ------------------------------------------------------------------ constants

pub const CONTENT_TYPE: &str = "application/vnd.interoperability.transfers+json;version=1.1";
pub const ACCEPT: &str = "application/vnd.interoperability.transfers+json;version=1";
pub const CONDITION: &str = "GRzLaTP7DJ9t4P-a_BA0WA9wzzlsugf00-Tn6kESAfM";
pub const FULFILMENT: &str = "UNlJ98hZTY_dsw0cAqw4i_UN3v4utt7CZFB4yfLbVFA";
/// 32 zero bytes: a well-formed fulfilment that does not match [`CONDITION`].
pub const WRONG_FULFILMENT: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
pub const ILP_PACKET: &str = "AYIBgQAAAAAAAASwNGxldmVsb25lLmRmc3AxLm1lci45T2RTOF81MDdqUUZERmZlakgyOVc4bXFmNEpLMHlGTFGCAUBQU0svMS4wCk5vbmNlOiB1SXlweUYzY3pYSXBFdzVVc05TYWh3CkVuY3J5cHRpb246IG5vbmUKUGF5bWVudC1JZDogMTMyMzZhM2ItOGZhOC00MTYzLTg0NDctNGMzZWQzZGE5OGE3CgpDb250ZW50LUxlbmd0aDogMTM1CkNvbnRlbnQtVHlwZTogYXBwbGljYXRpb24vanNvbgpTZW5kZXItSWRlbnRpZmllcjogOTI4MDYzOTEKCiJ7XCJmZWVcIjowLFwidHJhbnNmZXJDb2RlXCI6XCJpbnZvaWNlXCIsXCJkZWJpdE5hbWVcIjpcImFsaWNlIGNvb3BlclwiLFwiY3JlZGl0TmFtZVwiOlwibWVyIGNoYW50XCIsXCJkZWJpdElkZW50aWZpZXJcIjpcIjkyODA2MzkxXCJ9IgA";

pub const PAYER: &str = "payerfsp";
pub const PAYEE: &str = "payeefsp";
pub const HUB_NAME: &str = "Hub";

/// How long a callback that must come may take.
pub const CALLBACK_WAIT: Duration = Duration::from_secs(10);
/// How long to listen for a callback that must not come.
pub const QUIET_WAIT: Duration = Duration::from_millis(300);

/// The registry and lookup callbacks of a DFSP, under its base URL.
pub const DISCOVERY_ENDPOINTS: &[(&str, &str)] = &[
    (
        "FSPIOP_CALLBACK_URL_PARTICIPANT_PUT",
        "/participants/{{partyIdType}}/{{partyIdentifier}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTICIPANT_SUB_ID_PUT",
        "/participants/{{partyIdType}}/{{partyIdentifier}}/{{partySubIdOrType}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTICIPANT_PUT_ERROR",
        "/participants/{{partyIdType}}/{{partyIdentifier}}/error",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTICIPANT_SUB_ID_PUT_ERROR",
        "/participants/{{partyIdType}}/{{partyIdentifier}}/{{partySubIdOrType}}/error",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTICIPANT_BATCH_PUT",
        "/participants/{{requestId}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTICIPANT_BATCH_PUT_ERROR",
        "/participants/{{requestId}}/error",
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
        "FSPIOP_CALLBACK_URL_PARTIES_PUT",
        "/parties/{{partyIdType}}/{{partyIdentifier}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTIES_SUB_ID_PUT",
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
    // A bare base URL: the hub appends `/quotes[/{ID}[/error]]`.
    ("FSPIOP_CALLBACK_URL_QUOTES", ""),
];

// ---------------------------------------------------------------------- time

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// (year, month 1-12, day 1-31) of a day count since 1970-01-01
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

/// FSPIOP `DateTime`, e.g. `2026-11-22T08:00:00.000Z`.
pub fn fspiop_time(ms: i64) -> String {
    let (year, month, day) = civil_from_days(ms.div_euclid(86_400_000));
    let in_day = ms.rem_euclid(86_400_000);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

/// RFC 7231 IMF-fixdate, e.g. `Sun, 22 Nov 2026 08:00:00 GMT`.
pub fn http_date(ms: i64) -> String {
    const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = ms.div_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let in_day = ms.rem_euclid(86_400_000) / 1000;
    format!(
        "{}, {day:02} {} {year:04} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[(days + 4).rem_euclid(7) as usize],
        MONTHS[month as usize - 1],
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60
    )
}

/// An expiration far enough ahead never to matter in a test.
pub fn far_future() -> i64 {
    now_ms() + 3_600_000
}

/// A fresh id, alternately a lowercase version-4 UUID and a ULID: Mojaloop's
/// hub takes both (its Testing Toolkit sends ULIDs by default), so every
/// test that makes ids runs with both.
pub fn new_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    if COUNTER.fetch_add(1, Ordering::Relaxed) % 2 == 1 {
        new_ulid()
    } else {
        new_uuid()
    }
}

/// A fresh ULID: 26 uppercase Crockford base32 characters, the first 0-7.
pub fn new_ulid() -> String {
    const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let uuid = new_uuid().replace('-', "");
    let bits = u128::from_str_radix(&uuid, 16).unwrap();
    (0..26)
        .map(|index| {
            let digit = (bits >> (5 * (25 - index))) & if index == 0 { 7 } else { 31 };
            char::from(CROCKFORD[digit as usize])
        })
        .collect()
}

/// A fresh lowercase version-4 UUID.
pub fn new_uuid() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let mut first = RandomState::new().build_hasher();
    first.write_u64(count);
    first.write_u128(nanos);
    let high = first.finish();
    let mut second = RandomState::new().build_hasher();
    second.write_u64(high);
    second.write_u64(count);
    let low = second.finish();
    let mut hex = format!("{high:016x}{low:016x}").into_bytes();
    hex[12] = b'4';
    hex[16] = b"89ab"[usize::from(hex[16]) % 4];
    let hex = String::from_utf8(hex).unwrap();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

// -------------------------------------------------------------------- bodies

pub fn prepare_body(
    id: &str,
    payer: &str,
    payee: &str,
    amount: &str,
    expiration_ms: i64,
) -> String {
    format!(
        r#"{{"transferId":"{id}","payerFsp":"{payer}","payeeFsp":"{payee}","amount":{{"amount":"{amount}","currency":"USD"}},"ilpPacket":"{ILP_PACKET}","condition":"{CONDITION}","expiration":"{}"}}"#,
        fspiop_time(expiration_ms)
    )
}

/// A party's `partyIdInfo`: an MSISDN held by `fsp`.
pub fn party_id_info(fsp: &str, msisdn: &str) -> String {
    format!(r#"{{"partyIdType":"MSISDN","partyIdentifier":"{msisdn}","fspId":"{fsp}"}}"#)
}

/// `POST /transactionRequests`: [`PAYEE`] asks [`PAYER`] to pay it.
pub fn transaction_request_body(id: &str) -> String {
    format!(
        r#"{{"transactionRequestId":"{id}","payee":{{"partyIdInfo":{}}},"payer":{},"amount":{{"currency":"USD","amount":"25.5"}},"transactionType":{{"scenario":"PAYMENT","initiator":"PAYEE","initiatorType":"BUSINESS"}},"authenticationType":"OTP"}}"#,
        party_id_info(PAYEE, "255700000001"),
        party_id_info(PAYER, "255700000002"),
    )
}

/// `POST /bulkQuotes`: [`PAYER`] asks [`PAYEE`] for one quote.
pub fn bulk_quote_body(id: &str) -> String {
    format!(
        r#"{{"bulkQuoteId":"{id}","payer":{{"partyIdInfo":{}}},"individualQuotes":[{{"quoteId":"{}","transactionId":"{}","payee":{{"partyIdInfo":{}}},"amountType":"SEND","amount":{{"currency":"USD","amount":"10"}},"transactionType":{{"scenario":"TRANSFER","initiator":"PAYER","initiatorType":"CONSUMER"}}}}]}}"#,
        party_id_info(PAYER, "255700000002"),
        new_id(),
        new_id(),
        party_id_info(PAYEE, "255700000001"),
    )
}

pub fn fulfil_body(fulfilment: &str, state: &str) -> String {
    format!(
        r#"{{"fulfilment":"{fulfilment}","completedTimestamp":"{}","transferState":"{state}"}}"#,
        fspiop_time(now_ms())
    )
}

pub fn error_body(code: &str, description: &str) -> String {
    format!(r#"{{"errorInformation":{{"errorCode":"{code}","errorDescription":"{description}"}}}}"#)
}

/// The headers a DFSP sends with an FSPIOP request (Accept only on POST
/// and GET).
pub fn fspiop_headers(source: &str, destination: &str, with_accept: bool) -> Vec<(String, String)> {
    let mut headers = vec![("Content-Type".to_string(), CONTENT_TYPE.to_string())];
    if with_accept {
        headers.push(("Accept".to_string(), ACCEPT.to_string()));
    }
    headers.push(("Date".to_string(), http_date(now_ms())));
    headers.push(("FSPIOP-Source".to_string(), source.to_string()));
    headers.push(("FSPIOP-Destination".to_string(), destination.to_string()));
    headers
}

pub fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

/// `headers` with `name` set to `value` (replaced or added).
pub fn with_header(
    mut headers: Vec<(String, String)>,
    name: &str,
    value: &str,
) -> Vec<(String, String)> {
    headers.retain(|(key, _)| !key.eq_ignore_ascii_case(name));
    headers.push((name.to_string(), value.to_string()));
    headers
}

/// `headers` without `name`.
pub fn without_header(mut headers: Vec<(String, String)>, name: &str) -> Vec<(String, String)> {
    headers.retain(|(key, _)| !key.eq_ignore_ascii_case(name));
    headers
}

/// The headers a DFSP sends with an FSPIOP request on `resource`
/// (`parties`, `participants`, `quotes`, ...): Content-Type in
/// `content_version`, Accept `version=1` only when `with_accept` (POST,
/// GET, DELETE), Date, FSPIOP-Source, and FSPIOP-Destination only when
/// given.
pub fn resource_headers(
    resource: &str,
    content_version: &str,
    source: &str,
    destination: Option<&str>,
    with_accept: bool,
) -> Vec<(String, String)> {
    let mut headers = vec![(
        "Content-Type".to_string(),
        format!("application/vnd.interoperability.{resource}+json;version={content_version}"),
    )];
    if with_accept {
        headers.push((
            "Accept".to_string(),
            format!("application/vnd.interoperability.{resource}+json;version=1"),
        ));
    }
    headers.push(("Date".to_string(), http_date(now_ms())));
    headers.push(("FSPIOP-Source".to_string(), source.to_string()));
    if let Some(destination) = destination {
        headers.push(("FSPIOP-Destination".to_string(), destination.to_string()));
    }
    headers
}

/// The `ilpPacket` of a Mojaloop-built test vector (crates/fspiop/tests/
/// ilp-vectors), by name.
pub fn ilp_packet(name: &str) -> String {
    let vectors = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fspiop/tests/ilp-vectors/vectors.jsonl"),
    )
    .unwrap();
    vectors
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|vector| vector["name"] == name)
        .and_then(|vector| vector["ilpPacket"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no vector {name}"))
}

// --------------------------------------------------------------- HTTP client

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|error| panic!("response body is not JSON ({error}): {self:?}"))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = self.text();
        if text.len() > 2000 {
            text.truncate(2000);
            text.push_str("...");
        }
        write!(f, "HTTP {} {:?} {text}", self.status, self.headers)
    }
}

/// Where a complete response ends in `raw`, if it is complete.
fn response_end(raw: &[u8], eof: bool) -> Option<usize> {
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let field = |name: &str| {
        head.lines()
            .find_map(|line| {
                line.strip_prefix(name)
                    .and_then(|rest| rest.strip_prefix(':'))
            })
            .map(|value| value.trim().to_string())
    };
    if let Some(length) = field("content-length") {
        let length: usize = length.parse().ok()?;
        return (raw.len() >= head_end + length).then_some(head_end + length);
    }
    if field("transfer-encoding").is_some_and(|value| value.contains("chunked")) {
        return raw[head_end..]
            .windows(5)
            .position(|w| w == b"0\r\n\r\n")
            .map(|at| head_end + at + 5)
            .or(eof.then_some(raw.len()));
    }
    let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    if status == 204 || status == 304 || (100..200).contains(&status) {
        return Some(head_end);
    }
    eof.then_some(raw.len())
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        data = &data[line_end + 2..];
        if size == 0 || data.len() < size {
            break;
        }
        out.extend_from_slice(&data[..size]);
        data = data.get(size + 2..).unwrap_or(&[]);
    }
    out
}

fn parse_response(raw: &[u8]) -> Response {
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| {
            panic!(
                "incomplete HTTP response: {:?}",
                String::from_utf8_lossy(raw)
            )
        })
        + 4;
    let head = String::from_utf8_lossy(&raw[..head_end - 4]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    let mut body = raw[head_end..].to_vec();
    if header_value(&headers, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        body = dechunk(&body);
    } else if let Some(length) =
        header_value(&headers, "content-length").and_then(|v| v.parse::<usize>().ok())
    {
        body.truncate(length);
    }
    Response {
        status,
        headers,
        body,
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`). A large
/// body is written from another thread while the answer is read, so that a
/// server refusing it early (413) is still heard.
pub fn http(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Response {
    let stream =
        TcpStream::connect(address).unwrap_or_else(|error| panic!("connect {address}: {error}"));
    http_on(stream, address, method, path, headers, body)
}

/// [`http`] from the local address `from` (e.g. 127.0.0.2, to be a client
/// the hub does not trust).
pub fn http_from(
    from: std::net::IpAddr,
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Response {
    let stream = connect_from(from, address)
        .unwrap_or_else(|error| panic!("connect {address} from {from}: {error}"));
    http_on(stream, address, method, path, headers, body)
}

/// A blocking connection to `address` from the local address `from` (all
/// of 127/8 is this machine on Linux: 127.0.0.2 is another client).
pub fn connect_from(from: std::net::IpAddr, address: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = runtime().block_on(async {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(from, 0))?;
        socket.connect(address).await?.into_std()
    })?;
    stream.set_nonblocking(false)?;
    Ok(stream)
}

fn request_head(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> String {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    head
}

fn http_on(
    mut stream: TcpStream,
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Response {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = request_head(address, method, path, headers, body);
    stream.write_all(head.as_bytes()).unwrap();
    let writer = if body.len() > 256 * 1024 {
        let mut clone = stream.try_clone().unwrap();
        let body = body.to_vec();
        Some(std::thread::spawn(move || {
            let _ = clone.write_all(&body);
        }))
    } else {
        stream.write_all(body).unwrap();
        None
    };
    let mut raw = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => {
                break;
            }
            Ok(n) => {
                raw.extend_from_slice(&buffer[..n]);
                if response_end(&raw, false).is_some() {
                    break;
                }
            }
            // A server that refused a body early may reset the connection
            // after answering; what was read is the answer.
            Err(error) if !raw.is_empty() => {
                let _ = error;
                break;
            }
            Err(error) => panic!("{method} {path} to {address}: no answer: {error}"),
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    parse_response(&raw)
}

/// A TLS client: the roots it trusts and, for mutual TLS, its certificate.
#[derive(Clone)]
pub struct TlsClient {
    pub config: Arc<rustls::ClientConfig>,
}

impl TlsClient {
    /// Trusts `ca` and presents `identity` (certificate chain and key, DER)
    /// when the server asks for one.
    pub fn new(ca: &[u8], identity: Option<(&[u8], &[u8])>) -> TlsClient {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from(ca.to_vec()))
            .unwrap();
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
        let config = match identity {
            Some((certificate, key)) => builder
                .with_client_auth_cert(
                    vec![rustls::pki_types::CertificateDer::from(
                        certificate.to_vec(),
                    )],
                    rustls::pki_types::PrivateKeyDer::Pkcs8(key.to_vec().into()),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        TlsClient {
            config: Arc::new(config),
        }
    }

    /// Connects and completes the handshake (for a client certificate the
    /// server refuses, TLS 1.3 reports it only at the first read).
    pub fn connect(
        &self,
        address: SocketAddr,
    ) -> std::io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
        let server_name = rustls::pki_types::ServerName::try_from("localhost")
            .unwrap()
            .to_owned();
        let connection = rustls::ClientConnection::new(self.config.clone(), server_name)
            .map_err(std::io::Error::other)?;
        let socket = TcpStream::connect(address)?;
        socket.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut stream = rustls::StreamOwned::new(connection, socket);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(stream)
    }
}

/// One request over TLS on a fresh connection; an `Err` when the handshake
/// or the exchange fails (a refused client certificate).
pub fn https(
    client: &TlsClient,
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<Response> {
    let mut stream = client.connect(address)?;
    let head = request_head(address, method, path, headers, body);
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    read_response(&mut stream)
}

/// Reads one response from `stream`; the request must have said
/// `Connection: close` or the response must be delimited.
pub fn read_response(stream: &mut impl Read) -> std::io::Result<Response> {
    let mut raw = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buffer[..n]);
                if let Some(end) = response_end(&raw, false) {
                    raw.truncate(end);
                    break;
                }
            }
            Err(error) if raw.is_empty() => return Err(error),
            Err(_) => break,
        }
    }
    if response_end(&raw, true).is_none() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("no complete response: {:?}", String::from_utf8_lossy(&raw)),
        ));
    }
    Ok(parse_response(&raw))
}

// --------------------------------------------------------------- DFSP stubs

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("dfsp-stubs")
            .enable_all()
            .build()
            .unwrap()
    })
}

/// One request a stub received.
#[derive(Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// The query string as received, without its `?`.
    pub query: Option<String>,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Wall-clock arrival, ms since the epoch.
    pub at_ms: i64,
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|error| panic!("callback body is not JSON ({error}): {self:?}"))
    }
}

impl fmt::Debug for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {:?} {}",
            self.method,
            self.path,
            self.headers,
            self.text()
        )
    }
}

/// What a stub answers every request with: a status and a JSON body
/// (empty: none).
#[derive(Clone)]
struct Answer {
    sender: mpsc::Sender<Received>,
    status: u16,
    body: &'static str,
}

/// A DFSP's callback server: records every request and answers 200 (or
/// what [`Stub::start_answering`] says).
pub struct Stub {
    pub name: String,
    address: SocketAddr,
    /// `https` for a stub started with [`Stub::start_tls`].
    scheme: &'static str,
    requests: Mutex<mpsc::Receiver<Received>>,
    task: tokio::task::JoinHandle<()>,
}

async fn record(
    axum::extract::State(answer): axum::extract::State<Answer>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let _ = answer.sender.send(Received {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        headers,
        body: body.to_vec(),
        at_ms: now_ms(),
        at: Instant::now(),
    });
    let status = axum::http::StatusCode::from_u16(answer.status).unwrap();
    if answer.body.is_empty() {
        return status.into_response();
    }
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        answer.body,
    )
        .into_response()
}

impl Stub {
    pub fn start(name: &str) -> Stub {
        Stub::start_on(name, "127.0.0.1:0".parse().unwrap())
    }

    /// A stub on a given address (e.g. one a DFSP registered while it was
    /// down: see [`reserve_address`]).
    pub fn start_on(name: &str, address: SocketAddr) -> Stub {
        Stub::start_answering_on(name, address, 200, "")
    }

    /// A stub that records every request and answers each with `status`
    /// and the JSON `body` (none when empty): a DFSP refusing (4xx) or
    /// failing (5xx) what it is sent.
    pub fn start_answering(name: &str, status: u16, body: &'static str) -> Stub {
        Stub::start_answering_on(name, "127.0.0.1:0".parse().unwrap(), status, body)
    }

    fn start_answering_on(
        name: &str,
        address: SocketAddr,
        status: u16,
        body: &'static str,
    ) -> Stub {
        let listener = std::net::TcpListener::bind(address).unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let (sender, requests) = mpsc::channel();
        let answer = Answer {
            sender,
            status,
            body,
        };
        let app = axum::Router::new().fallback(record).with_state(answer);
        let task = runtime().spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let _ = axum::serve(listener, app).await;
        });
        Stub {
            name: name.to_string(),
            address,
            scheme: "http",
            requests: Mutex::new(requests),
            task,
        }
    }

    /// A stub serving HTTPS with `tls` (its certificate, and a client
    /// certificate requirement if the configuration has one). Connections
    /// whose handshake fails are dropped and record nothing.
    pub fn start_tls(name: &str, tls: Arc<rustls::ServerConfig>) -> Stub {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let (sender, requests) = mpsc::channel();
        let answer = Answer {
            sender,
            status: 200,
            body: "",
        };
        let app = axum::Router::new().fallback(record).with_state(answer);
        let task = runtime().spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            serve_tls(listener, app, tls).await
        });
        Stub {
            name: name.to_string(),
            address,
            scheme: "https",
            requests: Mutex::new(requests),
            task,
        }
    }

    pub fn base_url(&self) -> String {
        format!("{}://{}", self.scheme, self.address)
    }

    pub fn next_within(&self, within: Duration) -> Option<Received> {
        self.requests.lock().unwrap().recv_timeout(within).ok()
    }

    /// The next request; fails the test if none comes within [`CALLBACK_WAIT`].
    pub fn next(&self, waiting_for: &str) -> Received {
        self.next_within(CALLBACK_WAIT).unwrap_or_else(|| {
            panic!(
                "{}: no request within {CALLBACK_WAIT:?} (waiting for {waiting_for})",
                self.name
            )
        })
    }

    /// The next request, which must be `method path`.
    pub fn expect(&self, method: &str, path: &str) -> Received {
        let received = self.next(&format!("{method} {path}"));
        assert_eq!(
            (received.method.as_str(), received.path.as_str()),
            (method, path),
            "{}: expected {method} {path}, got {received:?}",
            self.name
        );
        received
    }

    /// The next request, which must be the hub's `PUT /transfers/{id}/error`
    /// carrying `code`, addressed to this DFSP.
    pub fn expect_error(&self, transfer_id: &str, code: &str) -> Received {
        let received = self.expect("PUT", &format!("/transfers/{transfer_id}/error"));
        assert_hub_error_callback(&received, &self.name, code);
        received
    }

    /// Fails the test if any request arrives within `within`.
    pub fn assert_quiet(&self, within: Duration) {
        if let Some(received) = self.next_within(within) {
            panic!("{}: expected no request, got {received:?}", self.name);
        }
    }

    /// Fails the test if a request is already waiting (no wait at all).
    pub fn assert_nothing_pending(&self) {
        if let Ok(received) = self.requests.lock().unwrap().try_recv() {
            panic!("{}: expected no request, got {received:?}", self.name);
        }
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An address nothing listens on yet (bound, then released), for a DFSP
/// that is down until a test starts its stub there.
/// Serves `app` over TLS with `tls` on `listener`, one HTTP/1.1
/// connection per handshake (a failed handshake is the client's problem).
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    tls: Arc<rustls::ServerConfig>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(socket).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

pub fn reserve_address() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// A callback error sent by the hub: `FSPIOP-Source: Hub`, destination the
/// DFSP, the FSPIOP error body with `code`.
pub fn assert_hub_error_callback(received: &Received, destination: &str, code: &str) {
    assert_eq!(
        received.header("fspiop-source"),
        Some(HUB_NAME),
        "FSPIOP-Source of {received:?}"
    );
    assert_eq!(
        received.header("fspiop-destination"),
        Some(destination),
        "FSPIOP-Destination of {received:?}"
    );
    assert!(
        received.header("content-type").is_some_and(
            |value| value.starts_with("application/vnd.interoperability.transfers+json")
        ),
        "Content-Type of {received:?}"
    );
    assert!(received.header("date").is_some(), "Date of {received:?}");
    let body = received.json();
    assert_eq!(
        body["errorInformation"]["errorCode"],
        json!(code),
        "error code of {received:?}"
    );
    assert!(
        body["errorInformation"]["errorDescription"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "errorDescription of {received:?}"
    );
}

/// A synchronous FSPIOP error answer: `status` and
/// `{"errorInformation":{"errorCode":code,"errorDescription":...}}`.
pub fn assert_error_response(response: &Response, status: u16, code: &str) {
    assert_eq!(response.status, status, "{response:?}");
    let body = response.json();
    assert_eq!(
        body["errorInformation"]["errorCode"],
        json!(code),
        "{response:?}"
    );
    assert!(
        body["errorInformation"]["errorDescription"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "{response:?}"
    );
}

/// A refusal for now: 503, FSPIOP 2003 and `Retry-After: 1` (nothing was
/// done; send it again later).
pub fn assert_refused_for_now(response: &Response) {
    assert_error_response(response, 503, "2003");
    assert_eq!(response.header("retry-after"), Some("1"), "{response:?}");
}

/// An endpoint that accepts connections and never answers.
pub struct Blackhole {
    address: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Blackhole {
    pub fn start() -> Blackhole {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let task = runtime().spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        });
        Blackhole {
            address,
            accepted,
            task,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ------------------------------------------------------------- the hub process

/// A console session of `token`'s holder on the admin address `admin`,
/// signed in through the sign-in form: the `Cookie` header's value.
pub fn console_sign_in(admin: SocketAddr, token: &str) -> String {
    let response = http(
        admin,
        "POST",
        "/console/sign-in",
        &[(
            "Content-Type".into(),
            "application/x-www-form-urlencoded".into(),
        )],
        format!("token={token}&next=/console/").as_bytes(),
    );
    assert_eq!(response.status, 303, "sign-in: {response:?}");
    let cookie = response.header("set-cookie").expect("a session cookie");
    cookie.split(';').next().unwrap().to_string()
}

/// `kasi admin-token`'s token and tokens-file line.
pub fn admin_token(name: &str, role: &str) -> (String, String) {
    let output = kasi()
        .args(["admin-token", "--name", name, "--role", role])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let token = text
        .lines()
        .find_map(|l| l.strip_prefix("token: "))
        .unwrap()
        .to_string();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("line for --admin-tokens: "))
        .unwrap()
        .to_string();
    assert!(
        !line.contains(&token),
        "the file line must not hold the token"
    );
    (token, line)
}

/// Bearer tokens of an operator (alice) and a viewer (grafana).
pub struct Tokens {
    pub operator: String,
    pub viewer: String,
}

/// A tokens file in `dir` with an operator and a viewer.
pub fn tokens_file(dir: &Path) -> (PathBuf, Tokens) {
    let (operator, operator_line) = admin_token("alice", "operator");
    let (viewer, viewer_line) = admin_token("grafana", "viewer");
    let path = dir.join("admin-tokens");
    std::fs::write(
        &path,
        format!("# kasi admin credentials\n{operator_line}\n\n{viewer_line}  # read only\n"),
    )
    .unwrap();
    (path, Tokens { operator, viewer })
}

pub fn kasi() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kasi"));
    command
        .env_remove("KASI_LOG")
        .env_remove("KASI_LOG_LEVEL")
        .env_remove("KASI_LOG_FORMAT")
        .env_remove("KASI_DATA_DIR")
        .env_remove("KASI_ADMIN_LISTEN")
        .env_remove("KASI_API_LISTEN")
        .env_remove("KASI_HUB_NAME")
        .env_remove("KASI_SHUTDOWN_GRACE_S")
        .env_remove("KASI_STORE")
        .env_remove("KASI_LEASE_MS")
        .env_remove("KASI_INSTANCE_NAME")
        .env_remove("KASI_ADMIN_TOKEN_FILE")
        .env_remove("KASI_FOUR_EYES_EXPIRY")
        // The other tests make their changes at once; tests/approvals.rs
        // asks for four-eyes with --four-eyes, which this yields to.
        .env("KASI_FOUR_EYES", "none");
    command
}

/// A running `kasi serve` on ephemeral ports.
pub struct Hub {
    child: Child,
    pub api: SocketAddr,
    pub admin: SocketAddr,
    pub data_dir: PathBuf,
    log: Arc<Mutex<String>>,
    exited: bool,
    /// Set when the hub serves TLS: how [`Hub::admin`] and [`Hub::api`]
    /// connect.
    pub tls: Option<TlsClient>,
    /// Set when the hub's admin API wants credentials: the bearer token
    /// [`Hub::admin`] (and so `setup`, `onboard`, …) sends.
    pub admin_bearer: Option<String>,
}

fn address_after(line: &str, key: &str) -> Option<SocketAddr> {
    let rest = line.split(key).nth(1)?;
    let token = rest.split_whitespace().next()?;
    token
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()
}

/// The address in `"key":"…"` of a JSON log line.
fn json_address(line: &str, key: &str) -> Option<SocketAddr> {
    let rest = line.split(&format!("\"{key}\":\"")).nth(1)?;
    rest.split('"').next()?.parse().ok()
}

impl Hub {
    pub fn start(data_dir: &Path) -> Hub {
        Hub::start_with(data_dir, &[])
    }

    /// Starts `kasi serve` with `extra` flags after the usual ones.
    pub fn start_with(data_dir: &Path, extra: &[&str]) -> Hub {
        Hub::spawn(Hub::serve_command(data_dir, extra), data_dir)
    }

    /// `kasi serve` on the PostgreSQL store at `url`, as `instance`, with a
    /// lease of `lease_ms`, and `extra` flags.
    pub fn postgres_command(
        data_dir: &Path,
        url: &str,
        instance: &str,
        lease_ms: u64,
        extra: &[&str],
    ) -> Command {
        let mut command = Hub::serve_command(
            data_dir,
            &[
                "--store",
                url,
                "--instance-name",
                instance,
                "--lease-ms",
                &lease_ms.to_string(),
            ],
        );
        command.args(extra);
        command
    }

    /// The command [`Hub::start_with`] runs, for a test to adjust.
    pub fn serve_command(data_dir: &Path, extra: &[&str]) -> Command {
        let mut command = kasi();
        command
            .args([
                "serve",
                "--api-listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(data_dir)
            .args(extra);
        command
    }

    /// Waits (20 s at most, failing the test with the log) until this
    /// process's `GET /health` body satisfies `check`.
    pub fn await_health(&self, what: &str, check: impl Fn(&serde_json::Value) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let health = http(self.admin, "GET", "/health", &[], b"");
            if check(&health.json()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {health:?}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `command` (a `kasi serve`, either log format) and waits until
    /// it serves.
    pub fn spawn(command: Command, data_dir: &Path) -> Hub {
        Hub::spawn_until(command, data_dir, |line| {
            if !line.contains("serving") {
                return None;
            }
            let text = || Some((address_after(line, "api=")?, address_after(line, "admin=")?));
            let json = || Some((json_address(line, "api")?, json_address(line, "admin")?));
            text().or_else(json)
        })
    }

    /// Runs `command` (a `kasi serve` on a PostgreSQL store whose lease
    /// another process holds) and waits until it waits as a standby: its
    /// addresses answer health checks, and it serves once it takes over.
    pub fn spawn_standby(command: Command, data_dir: &Path) -> Hub {
        Hub::spawn_until(command, data_dir, |line| {
            if !line.contains("standby: waiting for the lease") {
                return None;
            }
            Some((
                address_after(line, "FSPIOP ")?,
                address_after(line, "admin ")?,
            ))
        })
    }

    fn spawn_until(
        mut command: Command,
        data_dir: &Path,
        addresses: impl Fn(&str) -> Option<(SocketAddr, SocketAddr)>,
    ) -> Hub {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(String::new()));
        let mut line = String::new();
        let (api, admin) = loop {
            line.clear();
            if stderr.read_line(&mut line).unwrap() == 0 {
                let status = child.wait().unwrap();
                panic!(
                    "kasi serve exited ({status}) before serving:\n{}",
                    log.lock().unwrap()
                );
            }
            log.lock().unwrap().push_str(&line);
            if let Some(found) = addresses(&line) {
                break found;
            }
        };
        // Keep reading the log so the hub never blocks on a full pipe.
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while matches!(stderr.read_line(&mut line), Ok(n) if n > 0) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Hub {
            child,
            api,
            admin,
            data_dir: data_dir.to_path_buf(),
            log,
            exited: false,
            tls: None,
            admin_bearer: None,
        }
    }

    /// Waits (at most `within`) until the log has a line containing
    /// `needle`; whether it came.
    pub fn wait_for_log(&self, needle: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.log().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.log().contains(needle)
    }

    /// Waits until the log has a line containing `needle`, failing the
    /// test (with the log) if none comes within [`CALLBACK_WAIT`]; the log
    /// then. A line is read from the hub's stderr by a thread a moment
    /// after it is written, so a log is waited for, never read once.
    pub fn await_log(&self, needle: &str) -> String {
        assert!(
            self.wait_for_log(needle, CALLBACK_WAIT),
            "no log line with {needle:?} within {CALLBACK_WAIT:?}:\n{}",
            self.log()
        );
        self.log()
    }

    /// Waits until the log has at least `count` lines containing `needle`
    /// (failing the test after 30 s); those lines.
    pub fn await_log_lines(&self, needle: &str, count: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let lines: Vec<String> = self
                .log()
                .lines()
                .filter(|line| line.contains(needle))
                .map(str::to_string)
                .collect();
            if lines.len() >= count {
                return lines;
            }
            assert!(
                Instant::now() < deadline,
                "fewer than {count} log lines with {needle:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Polls `/metrics` until `check` finds what it needs in the text;
    /// what it found. Counters and gauges may move a moment after the
    /// answer that caused them, so they are waited for, never read once.
    pub fn await_metrics<T>(&self, what: &str, mut check: impl FnMut(&str) -> Option<T>) -> T {
        let deadline = Instant::now() + CALLBACK_WAIT;
        loop {
            let metrics = self.admin("GET", "/metrics", None);
            assert_eq!(metrics.status, 200, "{metrics:?}");
            let text = metrics.text();
            if let Some(found) = check(&text) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "/metrics never showed {what} within {CALLBACK_WAIT:?}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `/metrics` has a line containing `line`.
    pub fn await_metric_line(&self, line: &str) {
        self.await_metrics(line, |text| text.contains(line).then_some(()));
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} failed");
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.exited = true;
    }

    /// Waits (at most `within`) for the process to exit by itself: its
    /// status, or `None` if it is still running.
    pub fn wait_for_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.exited = true;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and wait (at most 30 s) for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.exited = true;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "kasi serve did not stop within 30 s of SIGTERM:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn send(
        &self,
        address: SocketAddr,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Response {
        match &self.tls {
            Some(client) => https(client, address, method, path, headers, body)
                .unwrap_or_else(|error| panic!("{method} {path} over TLS: {error}")),
            None => http(address, method, path, headers, body),
        }
    }

    // ---------------------------------------------------------- admin API

    pub fn admin(&self, method: &str, path: &str, body: Option<&Value>) -> Response {
        self.admin_as(self.admin_bearer.as_deref(), method, path, body)
    }

    /// An admin request with `token` as its bearer token (none: no
    /// credential), a JSON body if any.
    pub fn admin_as(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Response {
        let mut headers = Vec::new();
        if let Some(token) = token {
            headers.push(("Authorization".to_string(), format!("Bearer {token}")));
        }
        let bytes = match body {
            Some(body) => {
                headers.push(("Content-Type".to_string(), "application/json".to_string()));
                serde_json::to_vec(body).unwrap()
            }
            None => Vec::new(),
        };
        self.send(self.admin, method, path, &headers, &bytes)
    }

    /// A console session of `token`'s holder (plain HTTP): see
    /// [`console_sign_in`].
    pub fn console_session(&self, token: &str) -> String {
        console_sign_in(self.admin, token)
    }

    /// An admin request without a body, with extra `headers`.
    pub fn admin_with_headers(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Response {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        self.send(self.admin, method, path, &headers, b"")
    }

    /// An admin request that must answer `status`.
    pub fn admin_expect(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        status: u16,
    ) -> Response {
        let response = self.admin(method, path, body.as_ref());
        assert_eq!(
            response.status, status,
            "{method} {path} {body:?}: {response:?}"
        );
        response
    }

    /// The hub's accounts and `models` (instead of the default one).
    pub fn setup_with_models(&self, models: &[Value]) {
        for kind in ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"] {
            self.admin_expect(
                "POST",
                "/participants/Hub/accounts",
                Some(json!({"type": kind, "currency": "USD"})),
                201,
            );
        }
        for model in models {
            self.admin_expect("POST", "/settlementModels", Some(model.clone()), 201);
        }
    }

    /// The hub's accounts and the settlement model, as the golden-path
    /// collection's hub setup does it.
    pub fn setup(&self) {
        for kind in ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"] {
            self.admin_expect(
                "POST",
                "/participants/Hub/accounts",
                Some(json!({"type": kind, "currency": "USD"})),
                201,
            );
        }
        self.admin_expect(
            "POST",
            "/settlementModels",
            Some(json!({
                "name": "DEFAULTDEFERREDNET",
                "settlementGranularity": "NET",
                "settlementInterchange": "MULTILATERAL",
                "settlementDelay": "DEFERRED",
                "requireLiquidityCheck": true,
                "ledgerAccountType": "POSITION",
                "autoPositionReset": true
            })),
            201,
        );
    }

    /// A DFSP onboarded as the golden-path collection does it: participant,
    /// net debit cap, the three transfer endpoints at `base_url`, funds in.
    pub fn onboard(&self, name: &str, base_url: &str, net_debit_cap: u64, deposit: u64) {
        self.add_currency(name, "USD", net_debit_cap, deposit);
        for (kind, path) in [
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
            self.add_endpoint(name, kind, &format!("{base_url}{path}"));
        }
    }

    /// DFSP `name` (created if new) in `currency`: its accounts, its net
    /// debit cap, and `deposit` funds in (none when 0).
    pub fn add_currency(&self, name: &str, currency: &str, net_debit_cap: u64, deposit: u64) {
        self.admin_expect(
            "POST",
            "/participants",
            Some(json!({"name": name, "currency": currency})),
            201,
        );
        self.admin_expect(
            "POST",
            &format!("/participants/{name}/initialPositionAndLimits"),
            Some(json!({
                "currency": currency,
                "limit": {"type": "NET_DEBIT_CAP", "value": net_debit_cap},
                "initialPosition": 0
            })),
            201,
        );
        if deposit > 0 {
            let settlement = self.account_in(name, "SETTLEMENT", currency)["id"].clone();
            self.admin_expect(
                "POST",
                &format!("/participants/{name}/accounts/{settlement}"),
                Some(json!({
                    "transferId": new_id(),
                    "externalReference": "ref",
                    "action": "recordFundsIn",
                    "reason": "deposit",
                    "amount": {"amount": deposit.to_string(), "currency": currency}
                })),
                202,
            );
        }
    }

    /// After [`setup`](Self::setup): stubs for [`PAYER`] and [`PAYEE`],
    /// each onboarded (no funds) with `endpoints`, (type, path) pairs under
    /// its base URL.
    pub fn payer_and_payee(&self, endpoints: &[(&str, &str)]) -> (Stub, Stub) {
        self.setup();
        let payer = Stub::start(PAYER);
        let payee = Stub::start(PAYEE);
        for stub in [&payer, &payee] {
            self.onboard(&stub.name, &stub.base_url(), 10_000, 0);
            for (kind, path) in endpoints {
                self.add_endpoint(&stub.name, kind, &format!("{}{path}", stub.base_url()));
            }
        }
        (payer, payee)
    }

    /// One endpoint of `kind` for DFSP `name`, which must be accepted (201).
    pub fn add_endpoint(&self, name: &str, kind: &str, value: &str) {
        self.admin_expect(
            "POST",
            &format!("/participants/{name}/endpoints"),
            Some(json!({"type": kind, "value": value})),
            201,
        );
    }

    fn account(&self, name: &str, kind: &str) -> Value {
        self.account_in(name, kind, "USD")
    }

    fn account_in(&self, name: &str, kind: &str, currency: &str) -> Value {
        let accounts = self
            .admin_expect("GET", &format!("/participants/{name}/accounts"), None, 200)
            .json();
        accounts
            .as_array()
            .unwrap_or_else(|| panic!("accounts of {name} are not a list: {accounts}"))
            .iter()
            .find(|account| {
                account["ledgerAccountType"] == json!(kind)
                    && account["currency"] == json!(currency)
            })
            .unwrap_or_else(|| panic!("{name} has no {currency} {kind} account: {accounts}"))
            .clone()
    }

    pub fn account_id(&self, name: &str, kind: &str) -> u64 {
        self.account(name, kind)["id"]
            .as_u64()
            .expect("numeric account id")
    }

    /// The id of a DFSP's `currency` account of `kind`.
    pub fn account_id_in(&self, name: &str, kind: &str, currency: &str) -> u64 {
        self.account_in(name, kind, currency)["id"]
            .as_u64()
            .expect("numeric account id")
    }

    /// Enables or disables (`isActive`) a DFSP's `currency` POSITION
    /// account through the admin API.
    pub fn set_position_active(&self, name: &str, currency: &str, active: bool) {
        let account = self.account_id_in(name, "POSITION", currency);
        self.admin_expect(
            "PUT",
            &format!("/participants/{name}/accounts/{account}"),
            Some(json!({ "isActive": active })),
            200,
        );
    }

    /// The `value` of a DFSP's USD account of `kind`, from
    /// `GET /participants/{name}/accounts`.
    pub fn account_value(&self, name: &str, kind: &str) -> f64 {
        number(&self.account(name, kind)["value"])
    }

    /// The USD position, from `GET /participants/{name}/positions`.
    pub fn position(&self, name: &str) -> f64 {
        self.position_in(name, "USD")
    }

    /// The position in `currency`, from `GET /participants/{name}/positions`.
    pub fn position_in(&self, name: &str, currency: &str) -> f64 {
        let positions = self
            .admin_expect("GET", &format!("/participants/{name}/positions"), None, 200)
            .json();
        let position = match &positions {
            Value::Array(list) => list
                .iter()
                .find(|p| p["currency"] == json!(currency))
                .cloned(),
            Value::Object(_) => Some(positions.clone()),
            _ => None,
        };
        let position =
            position.unwrap_or_else(|| panic!("{name} has no {currency} position: {positions}"));
        number(&position["value"])
    }

    // ---------------------------------------------------------- FSPIOP API

    pub fn api(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Response {
        self.send(self.api, method, path, headers, body)
    }

    /// `POST /transfers` from `source` with the standard headers.
    pub fn prepare(&self, source: &str, destination: &str, body: &str) -> Response {
        self.api(
            "POST",
            "/transfers",
            &fspiop_headers(source, destination, true),
            body.as_bytes(),
        )
    }

    /// `PUT /transfers/{id}` from `source` (no Accept on a callback).
    pub fn fulfil(
        &self,
        transfer_id: &str,
        source: &str,
        destination: &str,
        body: &str,
    ) -> Response {
        let path = format!("/transfers/{transfer_id}");
        self.api(
            "PUT",
            &path,
            &fspiop_headers(source, destination, false),
            body.as_bytes(),
        )
    }

    /// `PUT /transfers/{id}/error` from `source`.
    pub fn reject(
        &self,
        transfer_id: &str,
        source: &str,
        destination: &str,
        body: &str,
    ) -> Response {
        let path = format!("/transfers/{transfer_id}/error");
        self.api(
            "PUT",
            &path,
            &fspiop_headers(source, destination, false),
            body.as_bytes(),
        )
    }

    /// `GET /transfers/{id}` from `source`.
    pub fn get_transfer(&self, transfer_id: &str, source: &str, destination: &str) -> Response {
        let path = format!("/transfers/{transfer_id}");
        self.api(
            "GET",
            &path,
            &fspiop_headers(source, destination, true),
            b"",
        )
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        if !self.exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("---- kasi serve log (last lines) ----");
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// A JSON number or numeric string as f64 (test amounts are small).
pub fn number(value: &Value) -> f64 {
    match value {
        Value::Number(n) => n.as_f64().unwrap(),
        Value::String(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("not a number: {value}")),
        other => panic!("not a number: {other}"),
    }
}

// -------------------------------------------------------------- a scenario

/// A hub with a payer and a payee, each with a callback stub.
pub struct Scenario {
    pub hub: Hub,
    pub payer: Stub,
    pub payee: Stub,
    pub dir: tempfile::TempDir,
}

impl Scenario {
    /// Both DFSPs with a net debit cap of 10,000 and 5,000 deposited.
    pub fn new() -> Scenario {
        Scenario::with_payer(10_000, 5_000)
    }

    pub fn with_payer(net_debit_cap: u64, deposit: u64) -> Scenario {
        Scenario::with_hub_flags(net_debit_cap, deposit, &[])
    }

    /// [`Scenario::with_payer`] on a hub started with `extra` flags.
    pub fn with_hub_flags(net_debit_cap: u64, deposit: u64, extra: &[&str]) -> Scenario {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::start_with(&dir.path().join("data"), extra);
        Scenario::on(hub, dir, net_debit_cap, deposit)
    }

    /// The scenario on a running `hub` (whose files are in `dir`): set
    /// up, and the payer onboarded with `net_debit_cap` and `deposit`.
    pub fn on(hub: Hub, dir: tempfile::TempDir, net_debit_cap: u64, deposit: u64) -> Scenario {
        hub.setup();
        let payer = Stub::start(PAYER);
        let payee = Stub::start(PAYEE);
        hub.onboard(PAYER, &payer.base_url(), net_debit_cap, deposit);
        hub.onboard(PAYEE, &payee.base_url(), 10_000, 5_000);
        Scenario {
            hub,
            payer,
            payee,
            dir,
        }
    }

    /// A prepare from the payer that must be accepted (202) and forwarded to
    /// the payee; returns the transfer id and the body sent.
    pub fn reserve(&self, amount: &str, expiration_ms: i64) -> (String, String) {
        let id = new_id();
        let body = prepare_body(&id, PAYER, PAYEE, amount, expiration_ms);
        let response = self.hub.prepare(PAYER, PAYEE, &body);
        assert_eq!(response.status, 202, "prepare: {response:?}");
        let forwarded = self.payee.expect("POST", "/transfers");
        assert_eq!(
            forwarded.text(),
            body,
            "the payee must get the payer's exact bytes"
        );
        (id, body)
    }

    /// A fulfil from the payee that must be answered 200.
    pub fn fulfil(&self, transfer_id: &str, body: &str) {
        let response = self.hub.fulfil(transfer_id, PAYEE, PAYER, body);
        assert_eq!(response.status, 200, "fulfil: {response:?}");
    }
}

// ---------------------------------------------------------------------- PKI

/// A certificate and its private key, made for a test.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
}

impl Issued {
    /// Writes `<name>.crt` and `<name>.key` into `dir`; their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).unwrap();
        std::fs::write(&key, &self.key_pem).unwrap();
        (cert, key)
    }
}

/// A scheme CA made for one test (rcgen, ECDSA P-256).
pub struct Pki {
    ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca = params.self_signed(&ca_key).unwrap();
        Pki { ca, ca_key }
    }

    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    pub fn ca_der(&self) -> Vec<u8> {
        self.ca.der().to_vec()
    }

    /// Writes the CA certificate to `path`.
    pub fn write_ca(&self, path: &Path) {
        std::fs::write(path, self.ca.pem()).unwrap();
    }

    /// A certificate with subject CN `common_name` and DNS SANs `dns_names`,
    /// for a server (`localhost` is what [`TlsClient`] expects) or a client.
    pub fn issue(&self, common_name: &str, dns_names: &[&str], server: bool) -> Issued {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = dns_names.iter().map(|name| name.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        params.extended_key_usages = vec![if server {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        }];
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        }
    }

    /// A server configuration presenting `server`; with `client_ca`,
    /// clients must present a certificate that CA signed.
    pub fn server_config(server: &Issued, client_ca: Option<&Pki>) -> Arc<rustls::ServerConfig> {
        let builder = rustls::ServerConfig::builder();
        let builder = match client_ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots
                    .add(rustls::pki_types::CertificateDer::from(ca.ca_der()))
                    .unwrap();
                builder.with_client_cert_verifier(
                    rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
                        .build()
                        .unwrap(),
                )
            }
            None => builder.with_no_client_auth(),
        };
        Arc::new(
            builder
                .with_single_cert(
                    vec![rustls::pki_types::CertificateDer::from(
                        server.cert_der.clone(),
                    )],
                    rustls::pki_types::PrivateKeyDer::Pkcs8(server.key_der.clone().into()),
                )
                .unwrap(),
        )
    }

    /// A [`TlsClient`] trusting this CA, presenting `identity` if given.
    pub fn client(&self, identity: Option<&Issued>) -> TlsClient {
        TlsClient::new(
            &self.ca_der(),
            identity.map(|issued| (issued.cert_der.as_slice(), issued.key_der.as_slice())),
        )
    }
}

/// One FSPIOP request that may meet a hub being killed: its status, or
/// `None` when the connection broke.
pub fn try_api(
    address: std::net::SocketAddr,
    method: &str,
    path: &str,
    source: &str,
    destination: &str,
    body: &str,
) -> Option<u16> {
    let headers = fspiop_headers(source, destination, method == "POST");
    std::panic::catch_unwind(|| http(address, method, path, &headers, body.as_bytes()).status).ok()
}

// --------------------------------------------------------------- refusals

/// The sum of the `kasi_refusals_total` lines of `class` (and of
/// `participant`, if given) in a `/metrics` text.
pub fn refusals_in(metrics: &str, class: &str, participant: Option<&str>) -> u64 {
    let class = format!("class=\"{class}\"");
    let participant = participant.map(|p| format!("participant=\"{p}\""));
    metrics
        .lines()
        .filter(|line| line.starts_with("kasi_refusals_total{") && line.contains(&class))
        .filter(|line| participant.as_ref().is_none_or(|p| line.contains(p)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

impl Hub {
    /// Polls `/metrics` until `kasi_refusals_total` of `class` (and of
    /// `participant`, if given) reaches `at_least`; the count. A refusal
    /// may be counted a moment after its answer was written, so it is
    /// waited for, never read once.
    pub fn await_refusals(&self, class: &str, participant: Option<&str>, at_least: u64) -> u64 {
        let deadline = Instant::now() + CALLBACK_WAIT;
        loop {
            let metrics = self.admin("GET", "/metrics", None);
            assert_eq!(metrics.status, 200, "{metrics:?}");
            let count = refusals_in(&metrics.text(), class, participant);
            if count >= at_least {
                return count;
            }
            assert!(
                Instant::now() < deadline,
                "kasi_refusals_total{{class={class}, participant={participant:?}}} is {count}, expected at least {at_least}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kasi_refusals_total` of `class` (and `participant`) now.
    pub fn refusals(&self, class: &str, participant: Option<&str>) -> u64 {
        refusals_in(
            &self.admin("GET", "/metrics", None).text(),
            class,
            participant,
        )
    }
}

// --------------------------------------------------------------- openssl, an independent party

/// Runs `program` with `args`, feeding it `stdin`; its standard output
/// (it must succeed).
pub fn run_program(program: &str, args: &[&str], stdin: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// A fresh RSA-2048 key in `dir`: (private key file, public key file).
pub fn rsa_key(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let private = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    run_program(
        "openssl",
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            private.to_str().unwrap(),
        ],
        b"",
    );
    run_program(
        "openssl",
        &[
            "pkey",
            "-in",
            private.to_str().unwrap(),
            "-pubout",
            "-out",
            public.to_str().unwrap(),
        ],
        b"",
    );
    (private, public)
}

pub fn b64url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether `openssl dgst` accepts `signature` of `input` under `public`.
pub fn openssl_verifies(public: &Path, input: &[u8], signature: &[u8]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let input_file = dir.path().join("input");
    let signature_file = dir.path().join("sig");
    std::fs::write(&input_file, input).unwrap();
    std::fs::write(&signature_file, signature).unwrap();
    let output = Command::new("openssl")
        .args(["dgst", "-sha256", "-verify"])
        .arg(public)
        .arg("-signature")
        .arg(&signature_file)
        .arg(&input_file)
        .output()
        .unwrap();
    output.status.success() && String::from_utf8_lossy(&output.stdout).contains("Verified OK")
}

/// A TCP proxy the test controls, between a kasi and its database: a
/// network partition on demand. Cut, it closes every connection it
/// carries and new ones as soon as they are accepted, until healed.
pub struct TcpCut {
    address: SocketAddr,
    cut: Arc<AtomicBool>,
    /// Stalled, it forwards nothing but keeps every connection open: the
    /// peer's requests are accepted (by this side's kernel) and never
    /// answered, as with a database host that hangs.
    stalled: Arc<AtomicBool>,
    /// Bumped by each cut: a connection opened before it ends.
    generation: Arc<AtomicUsize>,
}

impl TcpCut {
    /// Forwards connections on a new local port to `upstream`.
    pub fn start(upstream: SocketAddr) -> TcpCut {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let stalled = Arc::new(AtomicBool::new(false));
        let generation = Arc::new(AtomicUsize::new(0));
        let (cut_flag, generations, stall) = (cut.clone(), generation.clone(), stalled.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if cut_flag.load(Ordering::Acquire) {
                    drop(client);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(upstream) else {
                    continue;
                };
                let born = generations.load(Ordering::Acquire);
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let (generations, stall) = (generations.clone(), stall.clone());
                    std::thread::spawn(move || pump(from, to, &generations, born, &stall));
                }
            }
        });
        TcpCut {
            address,
            cut,
            stalled,
            generation,
        }
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The partition: every connection through the proxy is closed, and
    /// new ones as soon as they are accepted.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The database host hangs: nothing is forwarded either way, and no
    /// connection is closed.
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::Release);
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::Release);
        self.stalled.store(false, Ordering::Release);
    }
}

/// Copies `from` to `to` until either closes or the proxy is cut.
fn pump(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    generations: &AtomicUsize,
    born: usize,
    stalled: &AtomicBool,
) {
    use std::io::{Read as _, Write as _};
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buffer = [0u8; 16 * 1024];
    loop {
        if generations.load(Ordering::Acquire) != born {
            break;
        }
        if stalled.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(std::net::Shutdown::Both);
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// Every FSPIOP transfer's state as stored: a finish's, else the
/// prepare's (with its reason code, if any), read from a PostgreSQL store.
pub fn stored_states(url: &str) -> std::collections::HashMap<String, String> {
    use store::Store as _;
    let snapshot = store::pg::PgStore::open_read_only(url)
        .unwrap()
        .load()
        .unwrap();
    let finished: std::collections::HashMap<u64, ledger::TransferState> =
        snapshot.finishes.iter().map(|f| (f.seq, f.state)).collect();
    snapshot
        .transfers
        .iter()
        .filter(|t| t.kind == ledger::TransferKind::Fspiop)
        .map(|t| {
            let state = finished.get(&t.seq).copied().unwrap_or(t.state);
            let reason = snapshot
                .finishes
                .iter()
                .find(|f| f.seq == t.seq)
                .and_then(|f| f.reason)
                .or(t.reason);
            let text = match reason {
                Some(code) => format!("{} {}", state.as_str(), code.0),
                None => state.as_str().to_string(),
            };
            (t.transfer_id.to_string(), text)
        })
        .collect()
}
