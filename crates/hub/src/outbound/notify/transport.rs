//! One callback on the wire: the shared hyper client, URL checks, the
//! FSPIOP-URI and hop-by-hop headers, the hub's signature, and the attempts
//! with their timeouts, retries and jittered backoff.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TE, TRANSFER_ENCODING, UPGRADE};
use http::uri::Scheme;
use http::{HeaderMap, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;
use tracing::{debug, warn};

use super::queue::{release_follow_up, Destination, Job};
use super::{DispatcherConfig, Inner};

/// Idle keep-alive connections are closed after this long.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// No retry waits longer than this, whatever the base and attempt number.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A response body is read (and thrown away) so that its connection can go
/// back to the pool; a body larger than this is abandoned with its connection.
const MAX_DRAINED_RESPONSE_BYTES: usize = 64 * 1024;

/// The client all destinations share: a pool of keep-alive HTTP/1.1
/// connections, plain or TLS.
pub(super) type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Builds the shared client, verifying `https://` against
/// `DispatcherConfig::tls`'s roots (the system's without one).
pub(super) fn client(config: &DispatcherConfig) -> HttpClient {
    let tls = match &config.tls {
        Some(tls) => tls.clone(),
        None => crate::tls::client_config(None, None)
            .expect("a TLS client configuration without files cannot fail"),
    };
    let connector = crate::tls::https_connector(tls, config.connect_timeout);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// How a delivery ended.
pub(super) enum Delivery {
    /// An HTTP answer that is final (2xx, or another non-5xx status);
    /// for a refusal on the first attempt, its status and body.
    Answered(Option<(http::StatusCode, Bytes)>),
    /// Retries exhausted (or deadline passed).
    GaveUp { attempts: u32, reason: String },
}

impl Inner {
    /// A cheap pseudo-random number for jitter (splitmix64 over a counter).
    fn next_random(&self) -> u64 {
        splitmix64(
            self.jitter
                .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed),
        )
    }
}

/// Adds the hub's FSPIOP-Signature over the covered headers as they will
/// be sent and the exact body, once, before the first attempt (every retry
/// sends the same signature). The signing input is built here; the
/// signature itself is computed in the pool, off the runtime. A failure
/// (never expected with a key that loaded) sends the callback unsigned and
/// says so.
pub(super) async fn sign_job(inner: &Inner, destination: &Destination, job: &mut Job) {
    let Some(signer) = &inner.config.signer else {
        return;
    };
    let input = {
        let text = |name: &str| job.headers.get(name).and_then(|v| v.to_str().ok());
        let covered = crate::jws::Covered {
            uri: text("fspiop-uri").unwrap_or("/"),
            method: job.method.as_str(),
            source: &signer.source,
            destination: text("fspiop-destination"),
            date: text("date"),
        };
        crate::jws::SigningInput::new(signer.key.alg(), &covered, &job.body)
    };
    match signer
        .pool
        .sign(&signer.key, input)
        .await
        .and_then(|value| http::HeaderValue::from_str(&value).map_err(|e| e.to_string()))
    {
        Ok(value) => {
            job.headers
                .insert(http::HeaderName::from_static("fspiop-signature"), value);
        }
        Err(error) => {
            if destination.warn_failed.allow(inner.now_ms()) {
                warn!(destination = %destination.name, url = %job.uri, %error, "callback sent unsigned: signing failed");
            }
        }
    }
}

/// Delivers one callback: attempts, retries, counters, warnings.
pub(super) async fn deliver(
    inner: &Arc<Inner>,
    destination: &Destination,
    job: &mut Job,
) -> Delivery {
    let config = &inner.config;
    let max_attempts = config.max_attempts.max(1);
    let mut attempt: u32 = 1;
    loop {
        let mut request = Request::new(Full::new(job.body.clone()));
        *request.method_mut() = job.method.clone();
        *request.uri_mut() = job.uri.clone();
        *request.headers_mut() = job.headers.clone();

        let started = Instant::now();
        let started_ms = crate::now_ms();
        let deadline = started + config.request_timeout;
        let error = match tokio::time::timeout_at(deadline, inner.client.request(request)).await {
            Ok(Ok(response)) => {
                destination.record_latency(started.elapsed());
                let status = response.status();
                log_attempt(
                    inner,
                    destination,
                    job,
                    attempt,
                    started_ms,
                    Some(status.as_u16()),
                    "",
                );
                // Read the (normally empty) body so the connection can be
                // reused; the answer is already counted either way. A
                // refusal's is kept when someone awaits the outcome.
                let keep = !status.is_success()
                    && !status.is_server_error()
                    && job.on_undelivered.is_some();
                let drained = tokio::time::timeout_at(deadline, drain(response.into_body(), keep));
                if status.is_server_error() {
                    let _ = drained.await;
                    format!("answered {status}")
                } else {
                    let failing_since_ms = destination.failing_since_ms.swap(0, Ordering::Relaxed);
                    if failing_since_ms != 0 {
                        // The transition, once: the operator saw it start.
                        tracing::info!(
                            destination = %destination.name,
                            failing_ms = crate::now_ms().saturating_sub(failing_since_ms),
                            "callbacks to this DFSP are answered again"
                        );
                    }
                    if status.is_success() {
                        if let Some(probe) = &job.probe {
                            probe.answered(std::time::Instant::now());
                        }
                        destination.sent_ok.fetch_add(1, Ordering::Relaxed);
                        debug!(destination = %destination.name, url = %job.uri, %status, attempt, "callback delivered");
                    } else {
                        let total = destination.http_error.fetch_add(1, Ordering::Relaxed) + 1;
                        if destination.warn_http_error.allow(inner.now_ms()) {
                            warn!(
                                destination = %destination.name,
                                url = %job.uri,
                                %status,
                                http_error_total = total,
                                "callback answered with an error status"
                            );
                        } else {
                            debug!(destination = %destination.name, url = %job.uri, %status, "callback answered with an error status");
                        }
                    }
                    let body = drained.await.unwrap_or_default();
                    release_follow_up(inner, job);
                    // A refusal counts only on the first attempt: after a
                    // timeout or a 5xx the DFSP may have taken the request
                    // already, and a resend's 4xx (a duplicate) says nothing
                    // against the answer it will still send.
                    let refused = !status.is_success() && attempt == 1;
                    return Delivery::Answered(refused.then_some((status, body)));
                }
            }
            Ok(Err(error)) => {
                let error = ErrorChain(&error).to_string();
                log_attempt(inner, destination, job, attempt, started_ms, None, &error);
                error
            }
            Err(_) => {
                let error = format!("no response within {:?}", config.request_timeout);
                log_attempt(inner, destination, job, attempt, started_ms, None, &error);
                error
            }
        };
        release_follow_up(inner, job);
        let now_ms = crate::now_ms();
        if destination
            .failing_since_ms
            .compare_exchange(0, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            // The transition, once per outage (each failure is counted in
            // the metrics, and rate-limited warnings say more).
            warn!(
                destination = %destination.name,
                url = %job.uri,
                error = %error,
                "callbacks to this DFSP are failing"
            );
        }

        let mut delay = backoff(config.backoff_base, attempt - 1, inner.next_random());
        // A tracked callback is retried until its deadline itself: when the
        // next backoff would pass it, the last attempt is made at the
        // deadline (a prepare's expiry), not a backoff early.
        let exhausted = match &job.tracking {
            Some(_) => {
                let left_ms = job.retry_until_ms.saturating_sub(now_ms);
                let left = Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
                delay = delay.min(left);
                left_ms <= 0
            }
            None => attempt >= max_attempts,
        };
        if exhausted {
            let total = destination.failed.fetch_add(1, Ordering::Relaxed) + 1;
            if destination.warn_failed.allow(inner.now_ms()) {
                warn!(
                    destination = %destination.name,
                    url = %job.uri,
                    attempts = attempt,
                    %error,
                    failed_total = total,
                    "callback failed, giving up"
                );
            } else {
                debug!(destination = %destination.name, url = %job.uri, attempts = attempt, %error, "callback failed, giving up");
            }
            return Delivery::GaveUp {
                attempts: attempt,
                reason: error,
            };
        }
        destination.retried.fetch_add(1, Ordering::Relaxed);
        debug!(destination = %destination.name, url = %job.uri, attempt, %error, ?delay, "callback attempt failed, will retry");
        tokio::time::sleep(delay).await;
        attempt += 1;
    }
}

/// Records one attempt in the wire log, when there is one and the callback
/// is a transfer's or a conversion's; the body with the first attempt only
/// (a retry sends the same bytes).
fn log_attempt(
    inner: &Inner,
    destination: &Destination,
    job: &Job,
    attempt: u32,
    at_ms: i64,
    status: Option<u16>,
    note: &str,
) {
    let Some(log) = &inner.config.wire_log else {
        return;
    };
    let tracked = job
        .tracking
        .as_ref()
        .and_then(|tracking| tracking.transfer_id.as_deref());
    let Some((resource, id)) = crate::wire_log::callback_key(job.uri.path(), tracked) else {
        return;
    };
    let target = job.uri.to_string();
    log.record(wirelog::Message {
        at_ms,
        direction: wirelog::Direction::Out,
        resource,
        id: &id,
        peer: destination.name.as_str(),
        method: job.method.as_str(),
        target: &target,
        status,
        note,
        attempt,
        headers: wirelog::Headers::Map(&job.headers),
        // A retry's body is the first attempt's.
        body: if attempt == 1 { &job.body } else { &[] },
    });
}

/// Reads a response body up to a limit, and returns what it read when
/// asked to `keep` it (else nothing).
async fn drain(mut body: Incoming, keep: bool) -> Bytes {
    let mut seen = 0usize;
    let mut kept = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Some(data) = frame.data_ref() {
            seen += data.len();
            if seen > MAX_DRAINED_RESPONSE_BYTES {
                break;
            }
            if keep {
                kept.extend_from_slice(data);
            }
        }
    }
    Bytes::from(kept)
}

/// The wait before retry `retry` (0 for the first): `base * 2^retry`, capped
/// at `MAX_BACKOFF`, then scaled by a factor in [0.5, 1.5] drawn from `random`.
fn backoff(base: Duration, retry: u32, random: u64) -> Duration {
    let exponential = base.saturating_mul(1u32 << retry.min(20)).min(MAX_BACKOFF);
    let nanos = u64::try_from(exponential.as_nanos()).unwrap_or(u64::MAX);
    // random / 2^64 in [0, 1), times `exponential`, without overflow.
    let jitter = ((u128::from(nanos) * u128::from(random)) >> 64) as u64;
    Duration::from_nanos(nanos / 2 + jitter)
}

/// A well-mixed 64-bit hash of `x` (SplitMix64's finaliser).
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Accepts an absolute `http://` or `https://` URL with a host.
pub(super) fn parse_http_url(url: &str) -> Result<Uri, &'static str> {
    let uri: Uri = url.parse().map_err(|_| "not a valid URL")?;
    match uri.scheme() {
        Some(scheme) if *scheme == Scheme::HTTP || *scheme == Scheme::HTTPS => {}
        Some(_) => return Err("scheme is neither http nor https"),
        None => return Err("not an absolute URL"),
    }
    match uri.host() {
        Some(host) if !host.is_empty() => Ok(uri),
        _ => Err("no host"),
    }
}

/// The FSPIOP resources a callback path can name, for [`fspiop_uri`].
const FSPIOP_RESOURCES: &[&str] = &[
    "transfers",
    "parties",
    "participants",
    "quotes",
    "transactionRequests",
    "authorizations",
    "bulkQuotes",
    "bulkTransfers",
    "fxQuotes",
    "fxTransfers",
    "services",
];

/// The `FSPIOP-URI` of a callback to `uri`: its path from the last FSPIOP
/// resource segment on (with the query, if any), so a DFSP whose endpoint
/// is `http://dfsp/inbound/transfers/{id}` is told `/transfers/{id}`, as
/// ml-api-adapter does; the whole path when it names no resource.
fn fspiop_uri(uri: &Uri) -> &str {
    let Some(path_and_query) = uri.path_and_query() else {
        return "/";
    };
    let path = path_and_query.path();
    let full = path_and_query.as_str();
    let mut segments = path.match_indices('/').map(|(at, _)| at);
    let start = segments
        .rfind(|&at| {
            let segment = path[at + 1..].split('/').next().unwrap_or("");
            FSPIOP_RESOURCES.contains(&segment)
        })
        .unwrap_or(0);
    &full[start..]
}

/// Every callback says where it really goes, whoever wrote it: the
/// forwarded request's own `FSPIOP-URI` and `FSPIOP-HTTP-Method`, if any,
/// are replaced (ml-api-adapter's `createCallbackHeaders`).
pub(super) fn set_fspiop_target(headers: &mut HeaderMap, method: &Method, uri: &Uri) {
    if let Ok(value) = http::HeaderValue::from_str(fspiop_uri(uri)) {
        headers.insert(http::HeaderName::from_static("fspiop-uri"), value);
    }
    // FSPIOP's methods without a copy of their name per callback.
    let method = match *method {
        Method::PUT => http::HeaderValue::from_static("PUT"),
        Method::POST => http::HeaderValue::from_static("POST"),
        Method::PATCH => http::HeaderValue::from_static("PATCH"),
        Method::GET => http::HeaderValue::from_static("GET"),
        Method::DELETE => http::HeaderValue::from_static("DELETE"),
        ref other => http::HeaderValue::from_str(other.as_str())
            .unwrap_or(http::HeaderValue::from_static("PUT")),
    };
    headers.insert(http::HeaderName::from_static("fspiop-http-method"), method);
}

/// Removes the headers that describe the connection or the framing rather
/// than the callback; the client writes its own from the URL and the body.
pub(super) fn strip_connection_headers(headers: &mut HeaderMap) {
    for name in [
        HOST,
        CONTENT_LENGTH,
        TRANSFER_ENCODING,
        CONNECTION,
        TE,
        UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
}

/// Formats an error with its chain of causes, `a: b: c`.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn fspiop_uri_is_the_path_from_the_resource_on() {
        for (url, expected) in [
            (
                "http://payer:4000/transfers/01K1WV2595Z7XST8FW5K4XRDZB",
                "/transfers/01K1WV2595Z7XST8FW5K4XRDZB",
            ),
            (
                "http://payer:4000/sdk/inbound/transfers/x/error",
                "/transfers/x/error",
            ),
            ("http://payer:4000/transfers", "/transfers"),
            ("http://payee/parties/MSISDN/123", "/parties/MSISDN/123"),
            ("http://payee/api/quotes/x", "/quotes/x"),
            ("http://fxp/inbound/fxQuotes/x/error", "/fxQuotes/x/error"),
            (
                "http://payer/inbound/services/FXP/BWP/TZS",
                "/services/FXP/BWP/TZS",
            ),
            (
                "http://payer/authorizations/x?retriesLeft=2&amount=1",
                "/authorizations/x?retriesLeft=2&amount=1",
            ),
            // The last resource segment counts: a base path may repeat a word.
            (
                "http://dfsp/transfers-api/quotes/participants/MSISDN/1",
                "/participants/MSISDN/1",
            ),
            ("http://dfsp/callbacks/x", "/callbacks/x"),
            ("http://dfsp", "/"),
        ] {
            let uri: Uri = url.parse().unwrap();
            assert_eq!(fspiop_uri(&uri), expected, "{url}");
        }
        let mut headers = HeaderMap::new();
        headers.insert("fspiop-uri", HeaderValue::from_static("/transfers"));
        headers.insert("fspiop-http-method", HeaderValue::from_static("POST"));
        set_fspiop_target(
            &mut headers,
            &Method::PUT,
            &"http://p/transfers/x".parse().unwrap(),
        );
        assert_eq!(headers["fspiop-uri"], "/transfers/x");
        assert_eq!(headers["fspiop-http-method"], "PUT");
    }

    #[test]
    fn backoff_doubles_with_bounded_jitter() {
        let base = Duration::from_millis(100);
        for retry in 0..6u32 {
            let nominal = base * 2u32.pow(retry);
            for random in [
                0,
                1,
                u64::MAX / 3,
                u64::MAX / 2,
                u64::MAX,
                splitmix64(u64::from(retry)),
            ] {
                let delay = backoff(base, retry, random);
                assert!(
                    delay >= nominal / 2 && delay <= nominal * 3 / 2,
                    "{retry} {delay:?}"
                );
            }
        }
        assert!(backoff(base, 1_000, u64::MAX) <= MAX_BACKOFF * 3 / 2);
        assert_eq!(backoff(Duration::ZERO, 3, 12345), Duration::ZERO);
        // The source varies.
        let draws: std::collections::HashSet<u64> = (0..100).map(splitmix64).collect();
        assert_eq!(draws.len(), 100);
    }
}
