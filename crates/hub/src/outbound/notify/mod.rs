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

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::warn;

use crate::stages::CallbackProbe;

// queue: which callback goes when, and who is told; transport: one callback
// on the wire; watermark: what survives a crash.
mod queue;
mod transport;
mod watermark;

pub(crate) use transport::splitmix64;
pub use watermark::{DeadLetter, DeliveryJournal, WATERMARK_MARGIN_MS};

use queue::Destination;
use transport::HttpClient;
use watermark::JournalOp;

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
    /// Where each attempt of a transfer's or conversion's callback is
    /// recorded (see [`crate::wire_log`]); `None`: nowhere.
    pub wire_log: Option<wirelog::WireLog>,
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
    /// Where the signatures are computed: never on the runtime's threads.
    pub pool: Arc<crate::jws_pool::JwsPool>,
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
            wire_log: None,
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

/// The state every clone shares; `queue`, `transport` and `watermark` each
/// add the methods of their concern.
struct Inner {
    config: DispatcherConfig,
    client: HttpClient,
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

impl Dispatcher {
    /// Builds the dispatcher and its connection pool.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime: workers are spawned on the runtime
    /// that was current here.
    pub fn new(config: DispatcherConfig) -> Dispatcher {
        let client = transport::client(&config);
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

    /// The pool the callbacks are signed in, if they are signed.
    pub fn jws_pool(&self) -> Option<Arc<crate::jws_pool::JwsPool>> {
        self.inner.config.signer.as_ref().map(|s| s.pool.clone())
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
}

#[cfg(test)]
mod tests;
