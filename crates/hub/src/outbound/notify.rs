//! The callback dispatcher: sends FSPIOP callbacks (`PUT`/`POST`/`PATCH` with
//! a body) to the URLs the DFSPs registered.
//!
//! Mojaloop's notification handler froze for more than 15 s whenever one
//! DFSP's endpoint was unreachable, and every other DFSP's callbacks waited
//! behind it (seed 000). Here each destination (DFSP) has its own bounded
//! queue and its own workers, at most
//! [`DispatcherConfig::max_in_flight_per_destination`] of them, so a dead or
//! slow endpoint only ever holds up its own callbacks.
//!
//! - [`Dispatcher::send`] never blocks and never awaits: it checks the URL,
//!   appends to the destination's queue and, if that destination has fewer
//!   workers than its concurrency limit, spawns one. It can be called from any
//!   thread, inside or outside the runtime.
//! - Workers take callbacks in FIFO order, so callbacks to one destination are
//!   started in the order they were sent (with more than one worker they can
//!   complete out of order). A worker exits when its queue is empty, so an idle
//!   destination holds no task.
//! - All destinations share one hyper-util client with a pool of keep-alive
//!   HTTP/1.1 connections, plain or TLS (`https://`, verified against
//!   `DispatcherConfig::tls`'s roots). Any other URL is a permanent failure,
//!   counted and never retried.
//! - Each attempt has a connect timeout and a whole-request timeout. Transport
//!   errors, timeouts and 5xx answers are retried with exponential backoff
//!   and jitter, as the DFSP may never have seen (or kept) the request; any
//!   other answer is final: 2xx counts `sent_ok`, anything else
//!   `http_error`. An untracked callback (quotes, parties, …) has
//!   [`DispatcherConfig::max_attempts`]; a tracked one (a transfer's prepare
//!   or final state, see [`Tracking`]) is retried until its deadline, then
//!   kept as a dead letter of its destination ([`Dispatcher::dead_letters`],
//!   re-sent with [`Dispatcher::resend`]).
//! - A DFSP's request passed on to the DFSP it asks (a quote, a lookup, …)
//!   is sent with [`Dispatcher::send_asking`]: if it is given up or
//!   refused (a final non-2xx), its [`OnUndelivered`] is told, with a
//!   refusal's status and body, so that the hub can tell the requester
//!   instead of leaving it waiting.
//! - Delivery survives a crash through a watermark (see [`Tracking::event_ms`]
//!   and [`DeliveryJournal`]): a ledger instant before which every tracked
//!   callback has been answered or kept as a dead letter, saved about once a
//!   second; after a restart the hub derives the callbacks of every transfer
//!   prepared or finished since then again (at least once: a DFSP may see one
//!   twice, and FSPIOP receivers treat a repeat idempotently).
//! - Nothing on the per-callback path logs above `debug`, and no body is ever
//!   formatted or logged. Warnings (queue full, gave up, non-2xx answer) are
//!   limited to one per destination and kind per second, and carry the totals.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
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
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::stages::CallbackProbe;

/// Idle keep-alive connections are closed after this long.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// No retry waits longer than this, whatever the base and attempt number.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A response body is read (and thrown away) so that its connection can go
/// back to the pool; a body larger than this is abandoned with its connection.
const MAX_DRAINED_RESPONSE_BYTES: usize = 64 * 1024;
/// At most one warning of each kind per destination per this many ms.
const WARN_INTERVAL_MS: u64 = 1_000;
/// The saved watermark stays this far behind the oldest unanswered tracked
/// callback (or the clock): a batch's callbacks are queued only once it is
/// durable, a moment after the ledger instant its rows carry.
pub const WATERMARK_MARGIN_MS: i64 = 5_000;
/// How often the watermark is saved.
const WATERMARK_EVERY: Duration = Duration::from_secs(1);

/// How a tracked callback — one derived from a transfer row: the prepare
/// forwarded to the payee, a commit, abort, rejection or expiry told to the
/// payer or the payee — is delivered.
#[derive(Clone, Debug, Default)]
pub struct Tracking {
    /// The ledger instant (ms) of the row the callback derives from: the
    /// watermark stays behind it until the callback is answered or kept as
    /// a dead letter. `None` for a re-sent dead letter (its row is its
    /// record).
    pub event_ms: Option<i64>,
    /// Transport errors and 5xx are retried until this wall-clock instant
    /// (ms); `None`: [`DispatcherConfig::final_retry_for`] from now.
    pub retry_until_ms: Option<i64>,
    /// For the dead-letter listing.
    pub transfer_id: Option<String>,
    /// A dead letter being re-sent: forgotten once answered.
    pub dead_letter: Option<u64>,
}

/// A callback that could not be delivered before its deadline, kept until it
/// is re-sent and answered: the row the journal stores (headers as they were
/// sent, signature excluded: a re-send signs again), and whether a re-send
/// is under way. Reads the row's fields through `Deref`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    pub row: store::delivery::DeadLetterRow,
    pub resending: bool,
}

impl DeadLetter {
    /// A stored dead letter, not being re-sent.
    pub fn stored(row: store::delivery::DeadLetterRow) -> DeadLetter {
        DeadLetter {
            row,
            resending: false,
        }
    }
}

impl std::ops::Deref for DeadLetter {
    type Target = store::delivery::DeadLetterRow;

    fn deref(&self) -> &Self::Target {
        &self.row
    }
}

impl std::ops::DerefMut for DeadLetter {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.row
    }
}

/// Where the dispatcher keeps its delivery state durably (the binary's
/// `callbacks.db`). Called on a thread of its own, never on the runtime.
pub trait DeliveryJournal: Send + 'static {
    /// One transaction: the newest watermark, dead letters to keep (an
    /// existing id is replaced), dead letters to forget.
    fn write(
        &mut self,
        watermark: Option<i64>,
        keep: &[DeadLetter],
        forget: &[u64],
    ) -> Result<(), String>;
}

enum JournalOp {
    Watermark(i64),
    /// With the event the dead letter releases once written.
    Keep(DeadLetter, Option<i64>),
    Forget(u64),
    /// Written everything before: tell the waiter.
    Flush(std::sync::mpsc::Sender<()>),
}

/// Who wrote a callback's message: the hub signs only its own (see
/// [`CallbackOrigin`]), decided where the callback is built.
pub use store::delivery::CallbackOrigin as Origin;

/// One callback to deliver.
#[derive(Clone)]
pub struct Callback {
    /// The DFSP the callback is for: the key of its queue and its statistics.
    pub destination: String,
    /// Set by the code that built the message, never inferred from its
    /// headers: a [`Origin::Hub`] callback loses any inherited
    /// FSPIOP-Signature and is signed by the hub (with a signer); a
    /// [`Origin::Forwarded`] one is sent with its own signature, or none.
    pub origin: Origin,
    pub method: Method,
    /// Absolute `http://` or `https://` URL.
    pub url: String,
    /// Sent as given, except the framing and hop-by-hop headers (`Host`,
    /// `Content-Length`, `Transfer-Encoding`, `Connection`, `Keep-Alive`, `TE`,
    /// `Upgrade`), which the client sets itself from the URL and the body.
    pub headers: HeaderMap,
    /// Sent byte for byte.
    pub body: Bytes,
}

impl fmt::Debug for Callback {
    /// Never shows the body, only its length.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Callback")
            .field("destination", &self.destination)
            .field("origin", &self.origin)
            .field("method", &self.method)
            .field("url", &self.url)
            .field("headers", &self.headers.len())
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// How a callback that someone awaits the outcome of (a request passed
/// on to the DFSP it asks, see [`Dispatcher::send_asking`]) failed.
#[derive(Debug)]
pub enum Undelivered {
    /// Not delivered: transport errors or 5xx answers until the attempts
    /// ran out, an unusable URL, or the destination's queue full.
    Unreachable,
    /// Answered with a final status other than 2xx (a 4xx): the status
    /// and the start of the answer's body (at most 64 KB).
    Refused {
        status: http::StatusCode,
        body: Bytes,
    },
}

/// Told once, on the runtime, when a callback sent with
/// [`Dispatcher::send_asking`] is not delivered; never when it is, nor
/// when it is abandoned at shutdown.
pub type OnUndelivered = Box<dyn FnOnce(Undelivered) + Send + Sync>;

/// A callback queued once another's first attempt has ended: the payer is
/// told of a commit before the payee, as ml-api-adapter awaits the payer's
/// callback before the payee's. (It sends the payee nothing if the payer's
/// failed; here a payer's failing endpoint delays the payee by one attempt
/// at most, never withholds its notification.) Only an attempt that starts
/// at once is waited for: behind a backlog or a failing destination the
/// follow-up is queued straight away.
pub struct FollowUp {
    pub callback: Callback,
    pub tracking: Option<Tracking>,
}

/// Limits and timeouts of a [`Dispatcher`].
#[derive(Clone, Debug)]
pub struct DispatcherConfig {
    /// Concurrent requests (and workers) per destination. 0 is taken as 1.
    pub max_in_flight_per_destination: usize,
    /// Callbacks waiting per destination, not counting those in flight;
    /// beyond this, [`Dispatcher::send`] drops the callback.
    pub max_queue_per_destination: usize,
    /// TCP connect timeout of one attempt (DNS resolution is not included;
    /// `request_timeout` bounds it).
    pub connect_timeout: Duration,
    /// Whole attempt: resolve, connect, send, and receive the response head.
    pub request_timeout: Duration,
    /// Attempts per callback, the first included. 0 is taken as 1.
    pub max_attempts: u32,
    /// The wait before retry n (n = 0, 1, …) is `backoff_base * 2^n`, scaled
    /// by a jitter factor in [0.5, 1.5], and at most 30 s.
    pub backoff_base: Duration,
    /// TLS of `https://` callbacks (roots, and the hub's client certificate
    /// for DFSPs that require mutual TLS); `None`: the system's roots.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Signs the callbacks the hub originates ([`Origin::Hub`]); none:
    /// nothing is signed, and nothing costs.
    pub signer: Option<CallbackSigner>,
    /// How long a tracked callback of a finished transfer (or a re-sent
    /// dead letter) is retried before it becomes a dead letter.
    pub final_retry_for: Duration,
}

/// The hub's FSPIOP-Signature on the callbacks it originates
/// ([`Origin::Hub`]; Mojaloop decides by FSPIOP-Source, `FSPIOP_SOURCE_TO_SIGN`,
/// which a DFSP's forwarded message could claim). Forwarded DFSP messages
/// keep their own bytes and signature.
#[derive(Clone, Debug)]
pub struct CallbackSigner {
    pub key: Arc<crate::jws::SigningKey>,
    /// The hub's name.
    pub source: String,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            max_in_flight_per_destination: 8,
            max_queue_per_destination: 10_000,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            max_attempts: 3,
            backoff_base: Duration::from_millis(100),
            tls: None,
            signer: None,
            final_retry_for: Duration::from_secs(3_600),
        }
    }
}

/// Counters of one destination, as returned by [`Dispatcher::stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DestinationStats {
    pub destination: String,
    /// Answered with a 2xx status.
    pub sent_ok: u64,
    /// Given up: attempts exhausted, URL not usable (not `http(s)://`), or still
    /// undelivered when [`Dispatcher::shutdown`]'s deadline passed.
    pub failed: u64,
    /// Retries made (a callback tried three times counts two).
    pub retried: u64,
    /// Refused by `send`: queue full, or sent after shutdown began.
    pub dropped: u64,
    /// Answered with a status other than 2xx (final, not retried).
    pub http_error: u64,
    /// Taken by a worker and not finished (includes waiting for a retry).
    pub in_flight: usize,
    /// Waiting in the queue.
    pub queued: usize,
    /// Time from the start of the answered attempt to the response head, over
    /// every answered callback (2xx or not): sum, count and maximum, in µs.
    pub latency_sum_us: u64,
    pub latency_count: u64,
    pub latency_max_us: u64,
    /// Wall-clock ms of the first failed attempt (transport error or 5xx)
    /// since the destination last answered; 0 while it answers.
    pub failing_since_ms: i64,
    /// Dead letters kept for this destination.
    pub dead_letters: u64,
}

/// Sends callbacks through per-destination queues. Cheap to clone: clones
/// share the queues, the connection pool and the counters.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: DispatcherConfig,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// Where workers are spawned; captured by `new` so that `send` works from
    /// any thread.
    runtime: tokio::runtime::Handle,
    destinations: RwLock<HashMap<String, Arc<Destination>>>,
    /// False once shutdown has begun.
    accepting: AtomicBool,
    /// True once shutdown's deadline has passed: workers stop at once.
    abort: watch::Sender<bool>,
    /// Callbacks accepted and not finished (queued or in flight), all
    /// destinations together.
    pending: AtomicUsize,
    /// Worker tasks alive, all destinations together.
    workers: AtomicUsize,
    /// Notified when `pending` or `workers` drops to zero.
    changed: Notify,
    /// State of the jitter generator.
    jitter: AtomicU64,
    /// Origin of the warning rate limiter's clock.
    epoch: Instant,
    /// Ledger instants of tracked callbacks not yet answered or kept.
    tracker: Mutex<BTreeMap<i64, usize>>,
    dead: Mutex<BTreeMap<u64, DeadLetter>>,
    next_dead_id: AtomicU64,
    /// The journal thread's queue; `None`: nothing is durable (tests).
    journal: Mutex<Option<std::sync::mpsc::Sender<JournalOp>>>,
    journal_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A queued callback, its URL already checked.
struct Job {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    /// Told when a 2xx response head arrives (stage timing).
    probe: Option<CallbackProbe>,
    /// Hub-originated and a signer is configured: the worker signs it
    /// before the first attempt (on the runtime, never on the caller's
    /// thread, which may be the store's).
    sign: bool,
    origin: Origin,
    tracking: Option<Tracking>,
    /// Wall-clock deadline of a tracked callback's retries.
    retry_until_ms: i64,
    /// Told if the callback is not delivered.
    on_undelivered: Option<OnUndelivered>,
    /// Queued once this one's first attempt has ended.
    then: Option<Box<FollowUp>>,
}

/// How a delivery ended.
enum Delivery {
    /// An HTTP answer that is final (2xx, or another non-5xx status);
    /// for a refusal on the first attempt, its status and body.
    Answered(Option<(http::StatusCode, Bytes)>),
    /// Retries exhausted (or deadline passed).
    GaveUp { attempts: u32, reason: String },
}

struct Destination {
    name: String,
    state: Mutex<QueueState>,
    sent_ok: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    dropped: AtomicU64,
    http_error: AtomicU64,
    latency_sum_us: AtomicU64,
    latency_count: AtomicU64,
    latency_max_us: AtomicU64,
    failing_since_ms: AtomicI64,
    warn_dropped: WarnLimiter,
    warn_failed: WarnLimiter,
    warn_http_error: WarnLimiter,
}

#[derive(Default)]
struct QueueState {
    queue: VecDeque<Job>,
    workers: usize,
    in_flight: usize,
}

/// Lets a warning through at most once per `WARN_INTERVAL_MS`.
#[derive(Default)]
struct WarnLimiter {
    next_ms: AtomicU64,
}

impl WarnLimiter {
    fn allow(&self, now_ms: u64) -> bool {
        let next = self.next_ms.load(Ordering::Relaxed);
        now_ms >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now_ms + WARN_INTERVAL_MS,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }
}

impl Destination {
    fn new(name: &str) -> Destination {
        Destination {
            name: name.to_owned(),
            state: Mutex::default(),
            sent_ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            http_error: AtomicU64::new(0),
            latency_sum_us: AtomicU64::new(0),
            latency_count: AtomicU64::new(0),
            latency_max_us: AtomicU64::new(0),
            failing_since_ms: AtomicI64::new(0),
            warn_dropped: WarnLimiter::default(),
            warn_failed: WarnLimiter::default(),
            warn_http_error: WarnLimiter::default(),
        }
    }

    /// The queue state. Never held across an await; a panic while holding it
    /// cannot leave it inconsistent, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record_latency(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_max_us.fetch_max(us, Ordering::Relaxed);
    }

    fn stats(&self) -> DestinationStats {
        let (in_flight, queued) = {
            let state = self.lock();
            (state.in_flight, state.queue.len())
        };
        DestinationStats {
            destination: self.name.clone(),
            sent_ok: self.sent_ok.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            http_error: self.http_error.load(Ordering::Relaxed),
            in_flight,
            queued,
            latency_sum_us: self.latency_sum_us.load(Ordering::Relaxed),
            latency_count: self.latency_count.load(Ordering::Relaxed),
            latency_max_us: self.latency_max_us.load(Ordering::Relaxed),
            failing_since_ms: self.failing_since_ms.load(Ordering::Relaxed),
            dead_letters: 0,
        }
    }
}

/// Why `send` refused a callback.
enum Refused {
    QueueFull(Box<Job>),
    ShuttingDown,
}

impl Dispatcher {
    /// Builds the dispatcher and its connection pool.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime: workers are spawned on the runtime
    /// that was current here.
    pub fn new(config: DispatcherConfig) -> Dispatcher {
        let tls = match &config.tls {
            Some(tls) => tls.clone(),
            None => crate::tls::client_config(None, None)
                .expect("a TLS client configuration without files cannot fail"),
        };
        let connector = crate::tls::https_connector(tls, config.connect_timeout);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(TokioTimer::new())
            .build(connector);
        let (abort, _) = watch::channel(false);
        let epoch = Instant::now();
        Dispatcher {
            inner: Arc::new(Inner {
                config,
                client,
                runtime: tokio::runtime::Handle::current(),
                destinations: RwLock::default(),
                accepting: AtomicBool::new(true),
                abort,
                pending: AtomicUsize::new(0),
                workers: AtomicUsize::new(0),
                changed: Notify::new(),
                jitter: AtomicU64::new(0x5DEE_CE66_D1CE_5EED),
                epoch,
                tracker: Mutex::default(),
                dead: Mutex::default(),
                next_dead_id: AtomicU64::new(1),
                journal: Mutex::default(),
                journal_thread: Mutex::default(),
            }),
        }
    }

    /// Queues a callback and returns at once; never blocks, never awaits.
    ///
    /// The callback is dropped (counted in `dropped`) if its destination's
    /// queue is full or shutdown has begun, and failed at once (counted in
    /// `failed`) if its URL is not an absolute `http(s)://` URL.
    pub fn send(&self, callback: Callback) {
        self.send_probed(callback, None);
    }

    /// Like [`send`](Self::send); `probe` is told the instant the response
    /// head of a 2xx answer arrives.
    pub(crate) fn send_probed(&self, callback: Callback, probe: Option<CallbackProbe>) {
        self.send_tracked(callback, probe, None);
    }

    /// Like [`send_probed`](Self::send_probed), `tracking` making it a
    /// callback that is retried until its deadline, then kept as a dead
    /// letter, and that holds the watermark back until then.
    pub(crate) fn send_tracked(
        &self,
        callback: Callback,
        probe: Option<CallbackProbe>,
        tracking: Option<Tracking>,
    ) {
        self.send_with(callback, probe, tracking, None, None);
    }

    /// Like [`send`](Self::send), for a request passed on to the DFSP it
    /// asks: `on_undelivered` is told if it cannot be delivered or is
    /// refused, so that whoever asked can be told in turn.
    pub fn send_asking(&self, callback: Callback, on_undelivered: OnUndelivered) {
        self.send_with(callback, None, None, Some(on_undelivered), None);
    }

    /// Like [`send_tracked`](Self::send_tracked); `then` is queued once
    /// this callback's first attempt has ended, whatever its outcome, or
    /// at once if this one cannot be queued (at shutdown it is dropped: a
    /// restart derives both again while the first holds the watermark).
    pub(crate) fn send_then(
        &self,
        callback: Callback,
        probe: Option<CallbackProbe>,
        tracking: Option<Tracking>,
        then: Option<FollowUp>,
    ) {
        self.send_with(callback, probe, tracking, None, then);
    }

    fn send_with(
        &self,
        callback: Callback,
        probe: Option<CallbackProbe>,
        tracking: Option<Tracking>,
        on_undelivered: Option<OnUndelivered>,
        then: Option<FollowUp>,
    ) {
        let inner = &self.inner;
        let destination = inner.destination(&callback.destination);
        if let Some(event_ms) = tracking.as_ref().and_then(|t| t.event_ms) {
            inner.track(event_ms);
        }
        let uri = match parse_http_url(&callback.url) {
            Ok(uri) => uri,
            Err(reason) => {
                if let Some(tracking) = tracking {
                    let letter = dead_letter_of(
                        inner,
                        &destination.name,
                        callback.origin,
                        &callback.method,
                        &callback.url,
                        &callback.headers,
                        &callback.body,
                        &tracking,
                        0,
                        format!("unusable URL: {reason}"),
                    );
                    inner.keep_dead(letter, tracking.event_ms);
                }
                let total = destination.failed.fetch_add(1, Ordering::Relaxed) + 1;
                if destination.warn_failed.allow(inner.now_ms()) {
                    warn!(
                        destination = %destination.name,
                        url = %callback.url,
                        reason,
                        failed_total = total,
                        "callback not sent: unusable URL"
                    );
                }
                if let Some(tell) = on_undelivered {
                    tell(Undelivered::Unreachable);
                }
                if let Some(then) = then {
                    self.send_tracked(then.callback, None, then.tracking);
                }
                return;
            }
        };
        let Callback {
            origin,
            method,
            mut headers,
            body,
            ..
        } = callback;
        strip_connection_headers(&mut headers);
        set_fspiop_target(&mut headers, &method, &uri);
        let sign = match origin {
            // A hub-originated callback carries only the hub's signature
            // (the body it repeats may be a DFSP's, signed for another
            // message).
            Origin::Hub => {
                headers.remove("fspiop-signature");
                inner.config.signer.is_some() && !body.is_empty()
            }
            // A DFSP's message keeps its own signature, or none: never the
            // hub's, whatever its headers claim.
            Origin::Forwarded => false,
        };
        let retry_until_ms = match &tracking {
            Some(Tracking {
                retry_until_ms: Some(until),
                ..
            }) => *until,
            _ => crate::now_ms().saturating_add(
                i64::try_from(inner.config.final_retry_for.as_millis()).unwrap_or(i64::MAX),
            ),
        };
        let mut job = Job {
            method,
            uri,
            headers,
            body,
            probe,
            sign,
            origin,
            tracking,
            retry_until_ms,
            on_undelivered,
            then: then.map(Box::new),
        };

        let max_workers = inner.config.max_in_flight_per_destination.max(1);
        let outcome = {
            let mut state = destination.lock();
            // Checked under the queue lock: shutdown clears the queues under
            // the same lock after clearing `accepting`, so nothing slips in.
            if !inner.accepting.load(Ordering::SeqCst) {
                Err(Refused::ShuttingDown)
            } else if state.queue.len() >= inner.config.max_queue_per_destination {
                Err(Refused::QueueFull(Box::new(job)))
            } else {
                // A follow-up waits only for an attempt that starts now: one
                // queued behind this destination's backlog, or behind a
                // destination that is failing (its workers retrying for up to
                // an hour), would hold another DFSP's notification hostage.
                let starts_now = state.queue.is_empty()
                    && state.workers < max_workers
                    && destination.failing_since_ms.load(Ordering::Relaxed) == 0;
                let released = if starts_now { None } else { job.then.take() };
                state.queue.push_back(job);
                inner.pending.fetch_add(1, Ordering::SeqCst);
                let spawn = state.workers < max_workers;
                if spawn {
                    state.workers += 1;
                    inner.workers.fetch_add(1, Ordering::SeqCst);
                }
                Ok((spawn, released))
            }
        };
        match outcome {
            Ok((spawn, released)) => {
                if spawn {
                    inner
                        .runtime
                        .spawn(run_worker(Arc::clone(inner), destination));
                }
                if let Some(then) = released {
                    self.send_tracked(then.callback, None, then.tracking);
                }
            }
            Err(refused) => {
                let total = destination.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                let reason = match &refused {
                    Refused::QueueFull(_) => "queue full",
                    Refused::ShuttingDown => "shutting down",
                };
                // A tracked callback refused for a full queue is kept at
                // once; one refused at shutdown keeps the watermark back
                // and is derived again at the next start.
                if let Refused::QueueFull(mut job) = refused {
                    if let Some(tell) = job.on_undelivered.take() {
                        tell(Undelivered::Unreachable);
                    }
                    if let Some(then) = job.then.take() {
                        self.send_tracked(then.callback, None, then.tracking);
                    }
                    if let Some(tracking) = &job.tracking {
                        let letter = dead_letter_of(
                            inner,
                            &destination.name,
                            job.origin,
                            &job.method,
                            &job.uri.to_string(),
                            &job.headers,
                            &job.body,
                            tracking,
                            0,
                            "queue full".to_owned(),
                        );
                        inner.keep_dead(letter, tracking.event_ms);
                    }
                }
                if destination.warn_dropped.allow(inner.now_ms()) {
                    warn!(
                        destination = %destination.name,
                        reason,
                        dropped_total = total,
                        "callback dropped"
                    );
                }
            }
        }
    }

    /// The counters of every destination seen so far, sorted by name.
    pub fn stats(&self) -> Vec<DestinationStats> {
        let destinations: Vec<Arc<Destination>> = self
            .inner
            .destinations
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let mut stats: Vec<DestinationStats> = destinations.iter().map(|d| d.stats()).collect();
        {
            let dead = self.inner.lock_dead();
            for letter in dead.values() {
                if let Some(s) = stats
                    .iter_mut()
                    .find(|s| s.destination == letter.destination)
                {
                    s.dead_letters += 1;
                } else {
                    stats.push(DestinationStats {
                        destination: letter.destination.clone(),
                        dead_letters: 1,
                        ..DestinationStats::default()
                    });
                }
            }
        }
        stats.sort_by(|a, b| a.destination.cmp(&b.destination));
        stats
    }

    /// Makes delivery durable: `journal` keeps the watermark (saved about
    /// once a second from now on, on a thread of its own) and the dead
    /// letters; `dead` are those it kept before. Call once, at start-up,
    /// before any tracked callback is sent.
    pub fn attach_journal(&self, journal: Box<dyn DeliveryJournal>, dead: Vec<DeadLetter>) {
        let inner = &self.inner;
        {
            let mut kept = inner.lock_dead();
            for letter in dead {
                inner
                    .next_dead_id
                    .fetch_max(letter.id + 1, Ordering::Relaxed);
                kept.insert(letter.id, letter);
            }
        }
        let (sender, receiver) = std::sync::mpsc::channel();
        let weak = Arc::downgrade(inner);
        let thread = std::thread::Builder::new()
            .name("kasi-callbacks-journal".into())
            .spawn(move || run_journal(journal, receiver, weak))
            .expect("cannot start the callback journal thread");
        *inner.journal.lock().unwrap_or_else(|e| e.into_inner()) = Some(sender);
        *inner
            .journal_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(thread);
        let weak = Arc::downgrade(inner);
        inner.runtime.spawn(async move {
            let mut tick = tokio::time::interval(WATERMARK_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                if !inner.accepting.load(Ordering::SeqCst) {
                    return;
                }
                let watermark = inner.watermark(crate::now_ms());
                inner.journal_send(JournalOp::Watermark(watermark));
            }
        });
    }

    /// Keeps the watermark at or before `at_ms - WATERMARK_MARGIN_MS` until
    /// [`release_watermark`](Self::release_watermark) (at start-up, until
    /// the callbacks since the saved watermark are queued again).
    pub fn hold_watermark(&self, at_ms: i64) {
        self.inner.track(at_ms);
    }

    pub fn release_watermark(&self, at_ms: i64) {
        self.inner.untrack(at_ms);
    }

    /// The instant before which every tracked callback has been answered or
    /// kept: the oldest unanswered one's (or `now_ms`), less a margin.
    pub fn watermark(&self, now_ms: i64) -> i64 {
        self.inner.watermark(now_ms)
    }

    /// Dead letters kept, oldest first; of one destination if given.
    pub fn dead_letters(&self, destination: Option<&str>) -> Vec<DeadLetter> {
        self.inner
            .lock_dead()
            .values()
            .filter(|letter| destination.is_none_or(|d| letter.destination == d))
            .cloned()
            .collect()
    }

    /// Sends the dead letters (of one destination if given) again, each
    /// retried for [`DispatcherConfig::final_retry_for`]; one answered is
    /// forgotten, one that fails again stays. Returns how many were queued
    /// (those already being re-sent are not counted).
    pub fn resend(&self, destination: Option<&str>) -> usize {
        let letters: Vec<DeadLetter> = {
            let mut dead = self.inner.lock_dead();
            dead.values_mut()
                .filter(|letter| {
                    !letter.resending && destination.is_none_or(|d| letter.destination == d)
                })
                .map(|letter| {
                    letter.resending = true;
                    letter.clone()
                })
                .collect()
        };
        let count = letters.len();
        for DeadLetter { row: letter, .. } in letters {
            let mut headers = HeaderMap::new();
            for (name, value) in &letter.headers {
                if let (Ok(name), Ok(value)) = (
                    http::HeaderName::from_bytes(name.as_bytes()),
                    http::HeaderValue::from_str(value),
                ) {
                    headers.append(name, value);
                }
            }
            let callback = Callback {
                destination: letter.destination.clone(),
                origin: letter.origin,
                method: Method::from_bytes(letter.method.as_bytes()).unwrap_or(Method::PUT),
                url: letter.url.clone(),
                headers,
                body: Bytes::from(letter.body),
            };
            self.send_tracked(
                callback,
                None,
                Some(Tracking {
                    event_ms: None,
                    retry_until_ms: None,
                    transfer_id: letter.transfer_id,
                    dead_letter: Some(letter.id),
                }),
            );
        }
        count
    }

    /// Stops accepting callbacks (later `send`s count as `dropped`), keeps
    /// delivering, retries included, until nothing is left or `deadline` has
    /// passed, then abandons whatever is left (counted as `failed`) and returns
    /// once every worker has stopped. Calling it again is harmless.
    pub async fn shutdown(&self, deadline: Duration) {
        let inner = &self.inner;
        inner.accepting.store(false, Ordering::SeqCst);
        let drained = tokio::time::timeout(
            deadline,
            inner.wait_until(|| inner.pending.load(Ordering::SeqCst) == 0),
        )
        .await
        .is_ok();
        if !drained {
            let left = inner.pending.load(Ordering::SeqCst);
            warn!(
                callbacks = left,
                "callback dispatcher: shutdown deadline passed, abandoning undelivered callbacks"
            );
        }
        inner.abort.send_replace(true);
        let destinations: Vec<Arc<Destination>> = inner
            .destinations
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for destination in destinations {
            let abandoned = std::mem::take(&mut destination.lock().queue).len();
            if abandoned > 0 {
                destination
                    .failed
                    .fetch_add(abandoned as u64, Ordering::Relaxed);
                inner.finish(abandoned);
            }
        }
        // Workers see `abort` at once and cancel what they are sending.
        inner
            .wait_until(|| inner.workers.load(Ordering::SeqCst) == 0)
            .await;
        // The last watermark, then the journal thread ends. Without the
        // margin: whoever shuts down has stopped the pipeline and the
        // request handlers first, so no durable batch's callbacks are still
        // to come; only those abandoned here are owed at the next start.
        let last = inner.watermark(crate::now_ms()) + WATERMARK_MARGIN_MS;
        inner.journal_send(JournalOp::Watermark(last));
        let sender = inner
            .journal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(sender);
        let thread = inner
            .journal_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }

    /// Waits until every dead letter kept and forgotten so far is durable
    /// (for tests; immediate without a journal).
    pub async fn flush_journal(&self) {
        let (sender, receiver) = std::sync::mpsc::channel();
        if self.inner.journal_send(JournalOp::Flush(sender)) {
            let _ = tokio::task::spawn_blocking(move || receiver.recv()).await;
        }
    }
}

/// At most one `callback journal: write failed` line per this.
const JOURNAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// The journal thread: writes what it is sent, a few at a time, and
/// releases the watermark for dead letters once they are durable.
fn run_journal(
    mut journal: Box<dyn DeliveryJournal>,
    receiver: std::sync::mpsc::Receiver<JournalOp>,
    inner: std::sync::Weak<Inner>,
) {
    let mut saved: Option<i64> = None;
    // A store that cannot write fails every write (about one a second):
    // said once, then every JOURNAL_LOG_EVERY with the count, and once
    // when it writes again.
    let mut failures = engine::Repeats::new(JOURNAL_LOG_EVERY);
    while let Ok(first) = receiver.recv() {
        let mut watermark = None;
        let mut keep = Vec::new();
        let mut releases = Vec::new();
        let mut forget = Vec::new();
        let mut flushes = Vec::new();
        let mut next = Some(first);
        while let Some(op) = next {
            match op {
                JournalOp::Watermark(at) => {
                    // Never backwards.
                    if saved.is_none_or(|saved| at > saved) {
                        watermark = Some(at.max(watermark.unwrap_or(at)));
                    }
                }
                JournalOp::Keep(letter, release) => {
                    forget.retain(|id| *id != letter.id);
                    keep.push(letter);
                    releases.extend(release);
                }
                JournalOp::Forget(id) => {
                    keep.retain(|letter: &DeadLetter| letter.id != id);
                    forget.push(id);
                }
                JournalOp::Flush(done) => flushes.push(done),
            }
            next = receiver.try_recv().ok();
        }
        if watermark.is_none() && keep.is_empty() && forget.is_empty() {
            for done in flushes {
                let _ = done.send(());
            }
            continue;
        }
        match journal.write(watermark, &keep, &forget) {
            Ok(()) => {
                if let Some(recovered) = failures.recovered() {
                    warn!(
                        failures = recovered.failures,
                        failing_ms = recovered.failing_for.as_millis() as u64,
                        "callback journal: writes again"
                    );
                }
                if watermark.is_some() {
                    saved = watermark;
                }
                if let Some(inner) = inner.upgrade() {
                    for event_ms in releases {
                        inner.untrack(event_ms);
                    }
                }
            }
            // The dead letters stay in memory and keep the watermark back:
            // after a restart their callbacks are derived again.
            Err(error) => {
                if let Some(repeated) = failures.failed() {
                    warn!(%error, repeated, "callback journal: write failed");
                }
            }
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

/// A dead letter of a callback about to be given up.
#[allow(clippy::too_many_arguments)]
fn dead_letter_of(
    inner: &Inner,
    destination: &str,
    origin: Origin,
    method: &Method,
    url: &str,
    headers: &HeaderMap,
    body: &Bytes,
    tracking: &Tracking,
    attempts: u32,
    reason: String,
) -> DeadLetter {
    let id = tracking
        .dead_letter
        .unwrap_or_else(|| inner.next_dead_id.fetch_add(1, Ordering::Relaxed));
    DeadLetter::stored(store::delivery::DeadLetterRow {
        id,
        destination: destination.to_owned(),
        transfer_id: tracking.transfer_id.clone(),
        method: method.to_string(),
        url: url.to_owned(),
        // The hub's own signature is made again at the re-send; a DFSP's
        // is kept, as it cannot be.
        headers: headers
            .iter()
            .filter(|(name, _)| origin == Origin::Forwarded || name.as_str() != "fspiop-signature")
            .filter_map(|(name, value)| {
                value
                    .to_str()
                    .ok()
                    .map(|value| (name.as_str().to_owned(), value.to_owned()))
            })
            .collect(),
        body: body.to_vec(),
        failed_at_ms: crate::now_ms(),
        attempts,
        reason,
        origin,
    })
}

impl Inner {
    fn destination(&self, name: &str) -> Arc<Destination> {
        if let Some(destination) = self
            .destinations
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return Arc::clone(destination);
        }
        let mut destinations = self.destinations.write().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            destinations
                .entry(name.to_owned())
                .or_insert_with(|| Arc::new(Destination::new(name))),
        )
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn lock_dead(&self) -> MutexGuard<'_, BTreeMap<u64, DeadLetter>> {
        self.dead.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn track(&self, event_ms: i64) {
        *self
            .tracker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(event_ms)
            .or_insert(0) += 1;
    }

    fn untrack(&self, event_ms: i64) {
        let mut tracker = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = tracker.get_mut(&event_ms) {
            *count -= 1;
            if *count == 0 {
                tracker.remove(&event_ms);
            }
        }
    }

    fn watermark(&self, now_ms: i64) -> i64 {
        let oldest = self
            .tracker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .next()
            .copied();
        oldest.map_or(now_ms, |oldest| oldest.min(now_ms)) - WATERMARK_MARGIN_MS
    }

    /// False when there is no journal.
    fn journal_send(&self, op: JournalOp) -> bool {
        match &*self.journal.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(sender) => sender.send(op).is_ok(),
            None => false,
        }
    }

    /// Keeps a dead letter (in memory, and durably if there is a journal);
    /// the watermark is released for `event_ms` once it is durable.
    fn keep_dead(&self, letter: DeadLetter, event_ms: Option<i64>) {
        self.lock_dead().insert(letter.id, letter.clone());
        if !self.journal_send(JournalOp::Keep(letter, event_ms)) {
            if let Some(event_ms) = event_ms {
                self.untrack(event_ms);
            }
        }
    }

    /// A tracked callback was answered.
    fn answered(&self, tracking: &Tracking) {
        if let Some(event_ms) = tracking.event_ms {
            self.untrack(event_ms);
        }
        if let Some(id) = tracking.dead_letter {
            self.lock_dead().remove(&id);
            self.journal_send(JournalOp::Forget(id));
        }
    }

    /// `count` callbacks are finished, whatever their outcome.
    fn finish(&self, count: usize) {
        if self.pending.fetch_sub(count, Ordering::SeqCst) == count {
            self.changed.notify_waiters();
        }
    }

    async fn wait_until(&self, condition: impl Fn() -> bool) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if condition() {
                return;
            }
            notified.await;
        }
    }

    /// A cheap pseudo-random number for jitter (splitmix64 over a counter).
    fn next_random(&self) -> u64 {
        splitmix64(
            self.jitter
                .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed),
        )
    }
}

/// Takes callbacks from one destination's queue until it is empty.
async fn run_worker(inner: Arc<Inner>, destination: Arc<Destination>) {
    let mut abort = inner.abort.subscribe();
    loop {
        let mut job = {
            let mut state = destination.lock();
            match state.queue.pop_front() {
                Some(job) => {
                    state.in_flight += 1;
                    job
                }
                None => {
                    state.workers -= 1;
                    break;
                }
            }
        };
        if job.sign {
            sign_job(&inner, &destination, &mut job);
        }
        let delivery = if *abort.borrow() {
            None
        } else {
            tokio::select! {
                biased;
                _ = abort.wait_for(|abort| *abort) => None,
                delivery = deliver(&inner, &destination, &mut job) => Some(delivery),
            }
        };
        if let (Some(delivery), Some(tell)) = (&delivery, job.on_undelivered.take()) {
            match delivery {
                Delivery::Answered(None) => {}
                Delivery::Answered(Some((status, body))) => tell(Undelivered::Refused {
                    status: *status,
                    body: body.clone(),
                }),
                Delivery::GaveUp { .. } => tell(Undelivered::Unreachable),
            }
        }
        if let Some(then) = job.then.take() {
            debug!(destination = %then.callback.destination, url = %then.callback.url, "follow-up callback dropped at shutdown");
        }
        match (&delivery, &job.tracking) {
            (Some(Delivery::Answered(_)), Some(tracking)) => inner.answered(tracking),
            (Some(Delivery::GaveUp { attempts, reason }), Some(tracking)) => {
                let letter = dead_letter_of(
                    &inner,
                    &destination.name,
                    job.origin,
                    &job.method,
                    &job.uri.to_string(),
                    &job.headers,
                    &job.body,
                    tracking,
                    *attempts,
                    reason.clone(),
                );
                inner.keep_dead(letter, tracking.event_ms);
            }
            // At shutdown a tracked callback keeps the watermark back (and
            // a re-sent dead letter stays): derived again at the next start.
            (None, Some(tracking)) => {
                if let Some(id) = tracking.dead_letter {
                    if let Some(letter) = inner.lock_dead().get_mut(&id) {
                        letter.resending = false;
                    }
                }
            }
            (_, None) => {}
        }
        if delivery.is_none() {
            destination.failed.fetch_add(1, Ordering::Relaxed);
            debug!(destination = %destination.name, url = %job.uri, "callback abandoned at shutdown");
        }
        destination.lock().in_flight -= 1;
        inner.finish(1);
    }
    if inner.workers.fetch_sub(1, Ordering::SeqCst) == 1 {
        inner.changed.notify_waiters();
    }
}

/// Adds the hub's FSPIOP-Signature over the covered headers as they will
/// be sent and the exact body; a failure (never expected with a key that
/// loaded) sends the callback unsigned and says so.
fn sign_job(inner: &Inner, destination: &Destination, job: &mut Job) {
    let Some(signer) = &inner.config.signer else {
        return;
    };
    let text = |name: &str| job.headers.get(name).and_then(|v| v.to_str().ok());
    let covered = crate::jws::Covered {
        uri: text("fspiop-uri").unwrap_or("/"),
        method: job.method.as_str(),
        source: &signer.source,
        destination: text("fspiop-destination"),
        date: text("date"),
    };
    match crate::jws::sign(&signer.key, &covered, &job.body)
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
/// Queues the callback waiting for `job`'s first attempt (see
/// [`FollowUp`]), before `job`'s own instant can be released, so the
/// watermark never passes the follow-up's.
fn release_follow_up(inner: &Arc<Inner>, job: &mut Job) {
    if let Some(then) = job.then.take() {
        let FollowUp { callback, tracking } = *then;
        Dispatcher {
            inner: Arc::clone(inner),
        }
        .send_tracked(callback, None, tracking);
    }
}

async fn deliver(inner: &Arc<Inner>, destination: &Destination, job: &mut Job) -> Delivery {
    let config = &inner.config;
    let max_attempts = config.max_attempts.max(1);
    let mut attempt: u32 = 1;
    loop {
        let mut request = Request::new(Full::new(job.body.clone()));
        *request.method_mut() = job.method.clone();
        *request.uri_mut() = job.uri.clone();
        *request.headers_mut() = job.headers.clone();

        let started = Instant::now();
        let deadline = started + config.request_timeout;
        let error = match tokio::time::timeout_at(deadline, inner.client.request(request)).await {
            Ok(Ok(response)) => {
                destination.record_latency(started.elapsed());
                let status = response.status();
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
            Ok(Err(error)) => ErrorChain(&error).to_string(),
            Err(_) => format!("no response within {:?}", config.request_timeout),
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
fn parse_http_url(url: &str) -> Result<Uri, &'static str> {
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
fn set_fspiop_target(headers: &mut HeaderMap, method: &Method, uri: &Uri) {
    if let Ok(value) = http::HeaderValue::from_str(fspiop_uri(uri)) {
        headers.insert(http::HeaderName::from_static("fspiop-uri"), value);
    }
    headers.insert(
        http::HeaderName::from_static("fspiop-http-method"),
        http::HeaderValue::from_str(method.as_str())
            .unwrap_or(http::HeaderValue::from_static("PUT")),
    );
}

/// Removes the headers that describe the connection or the framing rather
/// than the callback; the client writes its own from the URL and the body.
fn strip_connection_headers(headers: &mut HeaderMap) {
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
    use std::net::SocketAddr;
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::mpsc;

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
        let body: &'static [u8] =
            b"{\"transferState\":\"COMMITTED\"}\x00\xff\r\n\r\nGET / HTTP/1.1";
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
        let key = Arc::new(crate::jws::SigningKey::from_pem(&crate::jws::tests::ec_pem()).unwrap());
        let dispatcher = Dispatcher::new(DispatcherConfig {
            max_in_flight_per_destination: 1,
            signer: Some(CallbackSigner {
                key: key.clone(),
                source: "Hub".into(),
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

    #[test]
    fn warnings_are_rate_limited() {
        let limiter = WarnLimiter::default();
        assert!(limiter.allow(0));
        assert!(!limiter.allow(1));
        assert!(!limiter.allow(999));
        assert!(limiter.allow(1_000));
        assert!(!limiter.allow(1_500));
    }

    #[test]
    fn debug_never_shows_the_body() {
        let cb = callback("payeefsp", "http://h/x".to_owned(), b"secret-payload");
        let text = format!("{cb:?}");
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("body_len: 14"), "{text}");
    }
}
