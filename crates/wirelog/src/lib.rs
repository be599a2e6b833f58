//! The wire log: the FSPIOP messages of transfers and conversions as they
//! crossed the hub — each request a DFSP sent (headers and body as
//! received, and the status the hub answered) and each attempt to deliver a
//! callback (headers and body as sent, and the DFSP's status or why it
//! failed) — so that support can show a transfer's raw messages.
//!
//! It is a diagnostic record, not ledger state, and it is built so that it
//! can never slow or stop a transfer:
//! - [`WireLog::record`] never blocks and never does I/O: it encodes the
//!   message on the caller's thread into one buffer (a few µs of copying,
//!   cheaper than sharing the request's header map and body with another
//!   thread, whose reference counts the two threads would then bounce) and
//!   hands it to one writer thread through a queue bounded in bytes; when the queue is full the message is dropped
//!   and counted ([`Stats::dropped`]), with a warning at most every 10 s.
//!   The writer drains the queue every 20 ms rather than being woken by
//!   each message: a wake per message cost the request's thread a futex
//!   call and a context switch (BENCHMARKS.md, "The wire log").
//! - The writer appends to size- and age-bounded segment files in its own
//!   directory, without fsync (a crash of the machine may lose the last
//!   seconds, and a torn tail is detected by each record's checksum), and
//!   writes each closed segment's index (key hash → offset) beside it.
//! - The disk it uses is bounded ([`Config::max_bytes`]) and so is the time
//!   it keeps a message ([`Config::retention`]): the oldest segments go
//!   first.
//! - Credentials in headers (`Authorization`, cookies, API keys) are never
//!   written ([`format::REDACTED`]).
//! - [`find`] reads one resource's messages in a time range from the
//!   segments that can hold them (through their indexes), on the caller's
//!   thread: call it off the async runtime.
//!
//! Owns: its directory and the format of the files in it. Must never: hold
//! a lock its sender waits on, block or fail a sender, keep more in memory
//! than its queue's bound, or write a credential.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

pub mod format;
mod reader;
mod writer;

pub use format::{EncodedHeaders, Headers};
pub use reader::{find, Found};

/// Which way a message crossed the hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Direction {
    /// A DFSP's request to the hub.
    In = 1,
    /// One attempt of the hub to deliver a callback to a DFSP.
    Out = 2,
}

impl Direction {
    fn from_u8(byte: u8) -> Option<Direction> {
        match byte {
            1 => Some(Direction::In),
            2 => Some(Direction::Out),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }
}

/// The FSPIOP resource a message is about; with its id, a record's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Resource {
    Transfer = 1,
    FxTransfer = 2,
}

impl Resource {
    fn from_u8(byte: u8) -> Option<Resource> {
        match byte {
            1 => Some(Resource::Transfer),
            2 => Some(Resource::FxTransfer),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Transfer => "transfers",
            Resource::FxTransfer => "fxTransfers",
        }
    }
    /// The resource and id an FSPIOP path (or URL) names:
    /// `…/transfers/{ID}[/error]`, `…/fxTransfers/{ID}[/error]`. A `POST`
    /// to the collection names no id (it is in the body).
    pub fn of_path(path: &str) -> Option<(Resource, Option<&str>)> {
        let path = path.split('?').next().unwrap_or(path);
        let mut segments = path.rsplit('/').filter(|segment| !segment.is_empty());
        let mut last = segments.next()?;
        if last == "error" {
            last = segments.next()?;
        }
        let collection = |name: &str| match name {
            "transfers" => Some(Resource::Transfer),
            "fxTransfers" => Some(Resource::FxTransfer),
            _ => None,
        };
        if let Some(resource) = collection(last) {
            return Some((resource, None));
        }
        let resource = collection(segments.next()?)?;
        Some((resource, Some(last)))
    }
}

/// One message to record, borrowed from what the hub holds: [`WireLog::record`]
/// encodes it on the caller's thread into one buffer, so the writer thread
/// shares nothing with the request (no header map or body whose reference
/// counts two threads would touch) and frees one allocation per message.
#[derive(Clone, Copy)]
pub struct Message<'a> {
    /// When it arrived (in) or the attempt began (out), wall clock.
    pub at_ms: i64,
    pub direction: Direction,
    pub resource: Resource,
    pub id: &'a str,
    /// In: the `FSPIOP-Source` it claimed. Out: the DFSP it is for.
    pub peer: &'a str,
    pub method: &'a str,
    /// In: the path. Out: the URL.
    pub target: &'a str,
    /// In: the hub's answer. Out: the DFSP's answer; `None` when none came.
    pub status: Option<u16>,
    /// Out: why no answer came (a transport error, a timeout).
    pub note: &'a str,
    /// Out: 1 for the first attempt. In: 0.
    pub attempt: u32,
    pub headers: Headers<'a>,
    pub body: &'a [u8],
}

/// A message encoded, on its way to the writer.
struct Encoded {
    at_ms: i64,
    key: u64,
    record: Vec<u8>,
    /// What it holds of the queue's bound (taken before it was encoded).
    queued_bytes: usize,
}

/// One message read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub at_ms: i64,
    pub direction: Direction,
    pub resource: Resource,
    pub status: Option<u16>,
    pub attempt: u32,
    pub id: String,
    pub peer: String,
    pub method: String,
    pub target: String,
    pub note: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The wire log's limits.
#[derive(Clone, Debug)]
pub struct Config {
    /// The disk its segments may use, at most; the oldest go first.
    pub max_bytes: u64,
    /// How long a message is kept, at least as long as the disk allows.
    pub retention: Duration,
    /// A segment is closed (and indexed) at this size ...
    pub segment_bytes: u64,
    /// ... or this age, whichever comes first.
    pub segment_age: Duration,
    /// Messages waiting for the writer, in bytes: above it, messages are
    /// dropped (counted), never waited for.
    pub max_queued_bytes: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_bytes: 4 << 30,
            retention: Duration::from_secs(7 * 24 * 3600),
            segment_bytes: 64 << 20,
            segment_age: Duration::from_secs(600),
            max_queued_bytes: 64 << 20,
        }
    }
}

/// The wire log's counters, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages written to a segment.
    pub written: u64,
    /// Messages dropped because the writer was behind (or the log failed).
    pub dropped: u64,
    /// Writes that failed (a full disk, ...): their messages are dropped.
    pub write_errors: u64,
    /// The size of its segments and indexes now.
    pub bytes_on_disk: u64,
}

#[derive(Default)]
struct Shared {
    queued_bytes: AtomicUsize,
    written: AtomicU64,
    dropped: AtomicU64,
    write_errors: AtomicU64,
    bytes_on_disk: AtomicU64,
    last_drop_warning_ms: AtomicI64,
}

/// A handle to the wire log: clone it freely. The writer thread ends (after
/// writing what is queued) when the last handle is dropped.
#[derive(Clone)]
pub struct WireLog {
    sender: SyncSender<Encoded>,
    shared: Arc<Shared>,
    max_queued_bytes: usize,
    dir: Arc<PathBuf>,
}

impl std::fmt::Debug for WireLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireLog").field("dir", &self.dir).finish()
    }
}

/// The queue's length bound; the byte bound is the one that matters.
const QUEUE_MESSAGES: usize = 65_536;

impl WireLog {
    /// Opens (creating) the directory and starts the writer thread. The
    /// segments already there are kept (and indexed if they were not).
    pub fn open(dir: &Path, config: Config) -> std::io::Result<WireLog> {
        std::fs::create_dir_all(dir)?;
        let shared = Arc::new(Shared::default());
        let (sender, receiver) = sync_channel(QUEUE_MESSAGES);
        let max_queued_bytes = config.max_queued_bytes;
        let writer = writer::Writer::open(dir, config, shared.clone())?;
        std::thread::Builder::new()
            .name("kasi-wirelog".into())
            .spawn(move || writer.run(receiver))?;
        Ok(WireLog {
            sender,
            shared,
            max_queued_bytes,
            dir: Arc::new(dir.to_path_buf()),
        })
    }

    /// Encodes `message` and queues it for the writer; drops it (counted)
    /// when the queue is full. Never blocks.
    pub fn record(&self, message: Message<'_>) {
        let len = format::encoded_len_hint(&message);
        // Its room in the queue is taken first: a message that will be
        // dropped is not encoded.
        let bytes = 64 + len;
        let queued = self.shared.queued_bytes.fetch_add(bytes, Ordering::Relaxed);
        if queued + bytes > self.max_queued_bytes {
            self.shared.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
            self.dropped(1);
            return;
        }
        let mut record = Vec::with_capacity(len);
        format::encode(&message, &mut record);
        let encoded = Encoded {
            at_ms: message.at_ms,
            key: format::key_hash(message.resource, message.id),
            record,
            queued_bytes: bytes,
        };
        match self.sender.try_send(encoded) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
                self.dropped(1);
            }
        }
    }

    fn dropped(&self, count: u64) {
        let total = self.shared.dropped.fetch_add(count, Ordering::Relaxed) + count;
        warn_dropped(&self.shared, total);
    }

    pub fn stats(&self) -> Stats {
        stats_of(&self.shared)
    }

    /// Where its segments are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn stats_of(shared: &Shared) -> Stats {
    Stats {
        written: shared.written.load(Ordering::Relaxed),
        dropped: shared.dropped.load(Ordering::Relaxed),
        write_errors: shared.write_errors.load(Ordering::Relaxed),
        bytes_on_disk: shared.bytes_on_disk.load(Ordering::Relaxed),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// At most one warning every 10 s, with the total.
fn warn_dropped(shared: &Shared, total: u64) {
    let now = now_ms();
    let last = shared.last_drop_warning_ms.load(Ordering::Relaxed);
    if now - last >= 10_000
        && shared
            .last_drop_warning_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::warn!(
            dropped_total = total,
            "wire log behind: messages dropped from the wire log (transfers are not affected)"
        );
    }
}

#[cfg(test)]
mod tests;
