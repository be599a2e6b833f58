//! The threads JWS crypto runs on: signing hub-originated callbacks and
//! checking inbound FSPIOP-Signatures, off the async runtime.
//!
//! An RSA-2048 signature costs 0.25–0.7 ms of CPU: computed on a runtime
//! thread it would hold up every task queued behind it (on two cores, half
//! of the HTTP side). So the runtime prepares the work (the protected
//! header, base64, the header checks), hands the crypto to one of `threads`
//! OS threads through a bounded queue, and awaits the result on a oneshot
//! channel. A full queue makes callers wait for room (backpressure), never
//! fail; a caller that goes away before its turn costs no crypto.
//!
//! The pool lives as long as its last handle: dropping it closes the
//! queue, and the threads end once they have run what was queued (nothing
//! is left waiting for an answer that never comes). `kasi serve` makes one
//! per process, shared by the dispatcher (signing) and the FSPIOP
//! middleware (verifying), and `/metrics` shows its saturation (see
//! [`JwsPool::register`]).

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot};

use crate::jws::{self, Alg, Invalid, SigningInput, SigningKey, VerifyingKey};

/// Jobs that may wait for a thread. Each holds what it signs or checks
/// (memory the caller holds anyway): the bound is what stops a burst from
/// queueing without limit, not a memory budget.
pub const QUEUE_CAPACITY: usize = 1_024;

/// Buckets of the queue wait, 10 µs to 1 s: a hand-off to an idle thread
/// takes tens of µs, a saturated RSA pool milliseconds.
const WAIT_BUCKETS: [f64; 16] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0,
];

/// What a job does, for the metrics' `kind` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sign,
    Verify,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Sign => "sign",
            Kind::Verify => "verify",
        }
    }
}

/// The pool is gone, or the job panicked (a bug): no result will come.
#[derive(Debug, PartialEq, Eq)]
pub struct Unavailable;

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the JWS pool gave no result")
    }
}

type Labels = [(&'static str, &'static str); 2];

/// The pool's figures, shared with the threads and registered in `/metrics`.
#[derive(Clone)]
struct Stats {
    operations: Family<Labels, Counter>,
    busy_seconds: Family<Labels, Counter<f64, AtomicU64>>,
    queued: Gauge,
    wait: Histogram,
    threads: Gauge,
    capacity: Gauge,
}

struct Job {
    asked: Instant,
    /// Runs the crypto and sends its result; does nothing if the caller
    /// has gone.
    work: Box<dyn FnOnce() + Send>,
}

/// A bounded pool of OS threads for JWS signing and verification.
pub struct JwsPool {
    sender: mpsc::Sender<Job>,
    threads: usize,
    stats: Stats,
}

impl fmt::Debug for JwsPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwsPool")
            .field("threads", &self.threads)
            .field("queued", &self.stats.queued.get())
            .finish()
    }
}

impl JwsPool {
    /// Starts `threads` threads (at least one) behind a queue of
    /// `capacity` jobs (at least one).
    pub fn new(threads: usize, capacity: usize) -> Arc<JwsPool> {
        let threads = threads.max(1);
        let capacity = capacity.max(1);
        let stats = Stats {
            operations: Family::default(),
            busy_seconds: Family::default(),
            queued: Gauge::default(),
            wait: Histogram::new(WAIT_BUCKETS),
            threads: Gauge::default(),
            capacity: Gauge::default(),
        };
        stats.threads.set(threads as i64);
        stats.capacity.set(capacity as i64);
        let (sender, receiver) = mpsc::channel::<Job>(capacity);
        // One receiver, taken in turn: the thread holding the lock waits
        // for the next job, the others for the lock.
        let receiver = Arc::new(Mutex::new(receiver));
        for index in 0..threads {
            let receiver = Arc::clone(&receiver);
            let stats = stats.clone();
            std::thread::Builder::new()
                .name(format!("kasi-jws-{index}"))
                .spawn(move || run_thread(&receiver, &stats))
                .expect("cannot start a JWS pool thread");
        }
        Arc::new(JwsPool {
            sender,
            threads,
            stats,
        })
    }

    /// One thread per CPU: the crypto is pure CPU, and the runtime's
    /// threads are idle while they wait for it.
    pub fn default_threads() -> usize {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `work` on a pool thread and returns its result. Waits for room
    /// when the queue is full. Cancel-safe: dropped before a thread takes
    /// the job, the job is skipped.
    pub async fn run<T: Send + 'static>(
        &self,
        kind: Kind,
        alg: Alg,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Unavailable> {
        let asked = Instant::now();
        let (answer, result) = oneshot::channel();
        let stats = self.stats.clone();
        let job = Job {
            asked,
            work: Box::new(move || {
                if answer.is_closed() {
                    return;
                }
                let labels = [("kind", kind.name()), ("alg", alg.name())];
                let started = Instant::now();
                let value = work();
                stats
                    .busy_seconds
                    .get_or_create(&labels)
                    .inc_by(started.elapsed().as_secs_f64());
                stats.operations.get_or_create(&labels).inc();
                let _ = answer.send(value);
            }),
        };
        let permit = self.sender.reserve().await.map_err(|_| Unavailable)?;
        // Counted before the job can be taken, so the gauge never dips
        // below zero.
        self.stats.queued.inc();
        permit.send(job);
        result.await.map_err(|_| Unavailable)
    }

    /// The raw signature of `input` with `key`, as an `FSPIOP-Signature`
    /// value.
    pub async fn sign(&self, key: &Arc<SigningKey>, input: SigningInput) -> Result<String, String> {
        let signer = Arc::clone(key);
        let (input, signature) = self
            .run(Kind::Sign, key.alg(), move || {
                let signature = signer.sign(input.bytes());
                (input, signature)
            })
            .await
            .map_err(|error| error.to_string())?;
        Ok(input.header_value(&signature?))
    }

    /// Whether `body` is what `checked` (a header that passed
    /// [`jws::check`]) signs, with `key`.
    pub async fn verify(
        &self,
        key: Arc<VerifyingKey>,
        checked: jws::Checked,
        body: bytes::Bytes,
    ) -> Result<Result<(), Invalid>, Unavailable> {
        self.run(Kind::Verify, checked.alg(), move || {
            checked.verify_body(&key, &body)
        })
        .await
    }

    /// Registers the pool's figures: `kasi_jws_operations_total` and
    /// `kasi_jws_busy_seconds_total` by `kind` and `alg`,
    /// `kasi_jws_queued`, `kasi_jws_queue_wait_seconds`, `kasi_jws_threads`
    /// and `kasi_jws_queue_capacity`.
    pub fn register(&self, registry: &mut Registry) {
        let stats = &self.stats;
        registry.register(
            "kasi_jws_operations",
            "JWS signatures made and checked in the pool, by kind (sign, verify) and alg",
            stats.operations.clone(),
        );
        registry.register(
            "kasi_jws_busy_seconds",
            "Time the pool's threads spent on JWS crypto, by kind and alg; its rate over kasi_jws_threads is their utilisation",
            stats.busy_seconds.clone(),
        );
        registry.register(
            "kasi_jws_queued",
            "JWS jobs waiting for a pool thread",
            stats.queued.clone(),
        );
        registry.register(
            "kasi_jws_queue_wait_seconds",
            "Time from asking the pool to a thread starting the job, waiting for room in a full queue included",
            stats.wait.clone(),
        );
        registry.register(
            "kasi_jws_threads",
            "Threads of the JWS pool (--jws-threads)",
            stats.threads.clone(),
        );
        registry.register(
            "kasi_jws_queue_capacity",
            "Jobs the JWS pool's queue holds; beyond, callers wait for room",
            stats.capacity.clone(),
        );
    }
}

/// A pool thread: takes jobs until the queue is closed and empty.
fn run_thread(receiver: &Mutex<mpsc::Receiver<Job>>, stats: &Stats) {
    loop {
        let job = {
            // A thread that panicked never holds the lock (jobs run
            // outside it), so poisoning cannot leave the receiver torn.
            let mut receiver = receiver.lock().unwrap_or_else(|e| e.into_inner());
            receiver.blocking_recv()
        };
        let Some(job) = job else {
            return;
        };
        stats.queued.dec();
        stats.wait.observe(job.asked.elapsed().as_secs_f64());
        // A panic in the crypto (a bug) drops the job's answer, so its
        // caller hears `Unavailable`; the thread stays for the next job.
        if std::panic::catch_unwind(AssertUnwindSafe(job.work)).is_err() {
            tracing::error!("a JWS pool job panicked; its caller was told the pool is unavailable");
        }
    }
}

#[cfg(test)]
mod tests;
