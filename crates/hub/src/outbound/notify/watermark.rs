//! Delivery across crashes: the watermark (the instants of tracked callbacks
//! not yet answered), the dead letters (kept, listed, re-sent) and the
//! journal thread that makes both durable.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method};
use tracing::warn;

use super::{Callback, Dispatcher, Inner, Origin, Tracking};

/// The saved watermark stays this far behind the oldest unanswered tracked
/// callback (or the clock): a batch's callbacks are queued only once it is
/// durable, a moment after the ledger instant its rows carry.
pub const WATERMARK_MARGIN_MS: i64 = 5_000;
/// How often the watermark is saved.
const WATERMARK_EVERY: Duration = Duration::from_secs(1);

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

pub(super) enum JournalOp {
    Watermark(i64),
    /// With the event the dead letter releases once written.
    Keep(DeadLetter, Option<i64>),
    Forget(u64),
    /// Written everything before: tell the waiter.
    Flush(std::sync::mpsc::Sender<()>),
}

impl Dispatcher {
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
    /// retried for
    /// [`DispatcherConfig::final_retry_for`](super::DispatcherConfig::final_retry_for);
    /// one answered is forgotten, one that fails again stays. Returns how
    /// many were queued (those already being re-sent are not counted).
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

    /// Waits until every dead letter kept and forgotten so far is durable
    /// (for tests; immediate without a journal).
    pub async fn flush_journal(&self) {
        let (sender, receiver) = std::sync::mpsc::channel();
        if self.inner.journal_send(JournalOp::Flush(sender)) {
            let _ = tokio::task::spawn_blocking(move || receiver.recv()).await;
        }
    }
}

impl Inner {
    pub(super) fn lock_dead(&self) -> MutexGuard<'_, BTreeMap<u64, DeadLetter>> {
        self.dead.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn track(&self, event_ms: i64) {
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

    pub(super) fn watermark(&self, now_ms: i64) -> i64 {
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
    pub(super) fn journal_send(&self, op: JournalOp) -> bool {
        match &*self.journal.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(sender) => sender.send(op).is_ok(),
            None => false,
        }
    }

    /// Keeps a dead letter (in memory, and durably if there is a journal);
    /// the watermark is released for `event_ms` once it is durable.
    pub(super) fn keep_dead(&self, letter: DeadLetter, event_ms: Option<i64>) {
        self.lock_dead().insert(letter.id, letter.clone());
        if !self.journal_send(JournalOp::Keep(letter, event_ms)) {
            if let Some(event_ms) = event_ms {
                self.untrack(event_ms);
            }
        }
    }

    /// A tracked callback was answered.
    pub(super) fn answered(&self, tracking: &Tracking) {
        if let Some(event_ms) = tracking.event_ms {
            self.untrack(event_ms);
        }
        if let Some(id) = tracking.dead_letter {
            self.lock_dead().remove(&id);
            self.journal_send(JournalOp::Forget(id));
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
pub(super) fn dead_letter_of(
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
