//! The per-destination queues: bounded and FIFO, each with its own workers
//! up to the concurrency limit; follow-ups, counters and the warning limiter.
//! A worker hands each callback to `transport`, and its outcome to `watermark`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Uri};
use tracing::{debug, warn};

use super::transport::{
    deliver, parse_http_url, set_fspiop_target, sign_job, strip_connection_headers, Delivery,
};
use super::watermark::dead_letter_of;
use super::{
    Callback, DestinationStats, Dispatcher, FollowUp, Inner, OnUndelivered, Origin, Tracking,
    Undelivered,
};
use crate::stages::CallbackProbe;

/// At most one warning of each kind per destination per this many ms.
const WARN_INTERVAL_MS: u64 = 1_000;

/// A queued callback, its URL already checked.
pub(super) struct Job {
    pub(super) method: Method,
    pub(super) uri: Uri,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
    /// Told when a 2xx response head arrives (stage timing).
    pub(super) probe: Option<CallbackProbe>,
    /// Hub-originated and a signer is configured: the worker has it signed
    /// (in the JWS pool) before the first attempt, never on the caller's
    /// thread, which may be the store's.
    sign: bool,
    origin: Origin,
    pub(super) tracking: Option<Tracking>,
    /// Wall-clock deadline of a tracked callback's retries.
    pub(super) retry_until_ms: i64,
    /// Told if the callback is not delivered.
    pub(super) on_undelivered: Option<OnUndelivered>,
    /// Queued once this one's first attempt has ended.
    then: Option<Box<FollowUp>>,
}

pub(super) struct Destination {
    pub(super) name: String,
    state: Mutex<QueueState>,
    pub(super) sent_ok: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) retried: AtomicU64,
    dropped: AtomicU64,
    pub(super) http_error: AtomicU64,
    latency_sum_us: AtomicU64,
    latency_count: AtomicU64,
    latency_max_us: AtomicU64,
    pub(super) failing_since_ms: AtomicI64,
    warn_dropped: WarnLimiter,
    pub(super) warn_failed: WarnLimiter,
    pub(super) warn_http_error: WarnLimiter,
}

#[derive(Default)]
pub(super) struct QueueState {
    pub(super) queue: VecDeque<Job>,
    workers: usize,
    in_flight: usize,
}

/// Lets a warning through at most once per `WARN_INTERVAL_MS`.
#[derive(Default)]
pub(super) struct WarnLimiter {
    next_ms: AtomicU64,
}

impl WarnLimiter {
    pub(super) fn allow(&self, now_ms: u64) -> bool {
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
    pub(super) fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn record_latency(&self, latency: Duration) {
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
    pub(super) fn send_with(
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

    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// `count` callbacks are finished, whatever their outcome.
    pub(super) fn finish(&self, count: usize) {
        if self.pending.fetch_sub(count, Ordering::SeqCst) == count {
            self.changed.notify_waiters();
        }
    }

    pub(super) async fn wait_until(&self, condition: impl Fn() -> bool) {
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
        let delivery = if *abort.borrow() {
            None
        } else {
            // Waiting for the signature (a full pool) is cut short by the
            // shutdown's deadline like an attempt.
            tokio::select! {
                biased;
                _ = abort.wait_for(|abort| *abort) => None,
                delivery = async {
                    if job.sign {
                        sign_job(&inner, &destination, &mut job).await;
                    }
                    deliver(&inner, &destination, &mut job).await
                } => Some(delivery),
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

/// Queues the callback waiting for `job`'s first attempt (see
/// [`FollowUp`]), before `job`'s own instant can be released, so the
/// watermark never passes the follow-up's.
pub(super) fn release_follow_up(inner: &Arc<Inner>, job: &mut Job) {
    if let Some(then) = job.then.take() {
        let FollowUp { callback, tracking } = *then;
        Dispatcher {
            inner: Arc::clone(inner),
        }
        .send_tracked(callback, None, tracking);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_rate_limited() {
        let limiter = WarnLimiter::default();
        assert!(limiter.allow(0));
        assert!(!limiter.allow(1));
        assert!(!limiter.allow(999));
        assert!(limiter.allow(1_000));
        assert!(!limiter.allow(1_500));
    }
}
