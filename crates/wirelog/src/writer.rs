//! The writer thread: batches what is queued into the open segment,
//! closes segments at their size or age (writing their index), and deletes
//! the oldest past the disk bound or the retention.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::format;
use crate::{Config, Encoded, Shared};

/// How often the writer looks for queued messages when it found none: what
/// a message waits before it is written, at most (and a little more).
const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// A batch is written once it holds this much, or the queue is empty.
const BATCH_BYTES: usize = 1 << 20;

/// A segment's file name: `<first at_ms, 16 digits>.wire`; its index is
/// the same with `.idx`.
pub(crate) fn segment_name(first_at_ms: i64) -> String {
    format!("{:016}.wire", first_at_ms.max(0))
}

/// The segments in `dir`, oldest first, as (first at_ms, path).
pub(crate) fn list_segments(dir: &Path) -> std::io::Result<Vec<(i64, PathBuf)>> {
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|ext| ext.to_str()) != Some("wire") {
            continue;
        }
        let Some(first) = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .and_then(|stem| stem.parse::<i64>().ok())
        else {
            continue;
        };
        segments.push((first, path));
    }
    segments.sort();
    Ok(segments)
}

pub(crate) fn index_path(segment: &Path) -> PathBuf {
    segment.with_extension("idx")
}

struct Closed {
    first_at_ms: i64,
    path: PathBuf,
    bytes: u64,
}

struct Open {
    first_at_ms: i64,
    path: PathBuf,
    file: File,
    len: u64,
    index: Vec<u8>,
    opened: Instant,
}

pub(crate) struct Writer {
    dir: PathBuf,
    config: Config,
    shared: Arc<Shared>,
    closed: VecDeque<Closed>,
    open: Option<Open>,
    last_first_at_ms: i64,
    last_housekeeping: Instant,
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|meta| meta.len()).unwrap_or(0)
}

/// The index of a segment written without one (the writer stopped before
/// closing it): every whole record's key and offset.
fn index_of(segment: &[u8]) -> Vec<u8> {
    let mut index = Vec::new();
    let mut offset = 0;
    while let format::Next::Record { payload, end } = format::next_record(segment, offset) {
        if let Some((resource, id)) = format::key_of(payload) {
            format::encode_index_entry(format::key_hash(resource, id), offset as u64, &mut index);
        }
        offset = end;
    }
    index
}

/// Writes `bytes` to `path` whole or not at all (a temporary file renamed).
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temporary = path.with_extension("idx.tmp");
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(&temporary, path)
}

impl Writer {
    pub(crate) fn open(dir: &Path, config: Config, shared: Arc<Shared>) -> std::io::Result<Writer> {
        let mut closed = VecDeque::new();
        let mut last_first_at_ms = 0;
        for (first_at_ms, path) in list_segments(dir)? {
            let index = index_path(&path);
            if !index.exists() {
                // Its writer stopped before closing it: index it now, once.
                let bytes = std::fs::read(&path)?;
                write_atomically(&index, &index_of(&bytes))?;
            }
            let bytes = file_len(&path) + file_len(&index);
            last_first_at_ms = first_at_ms;
            closed.push_back(Closed {
                first_at_ms,
                path,
                bytes,
            });
        }
        let writer = Writer {
            dir: dir.to_path_buf(),
            config,
            shared,
            closed,
            open: None,
            last_first_at_ms,
            last_housekeeping: Instant::now(),
        };
        writer.publish_size();
        Ok(writer)
    }

    pub(crate) fn run(mut self, receiver: Receiver<Encoded>) {
        let mut batch = Vec::with_capacity(BATCH_BYTES + (64 << 10));
        let mut keys: Vec<(u64, u64)> = Vec::new();
        loop {
            // Polled, not woken: a writer blocked in recv makes every send
            // wake it (a futex call and a context switch on the request's
            // thread, measured at ~35 % more hub CPU per transfer); asleep,
            // a send is a lock-free push.
            let first = match receiver.try_recv() {
                Ok(message) => message,
                Err(TryRecvError::Empty) => {
                    std::thread::sleep(DRAIN_EVERY);
                    if self.last_housekeeping.elapsed() >= Duration::from_secs(1) {
                        self.housekeeping();
                    }
                    continue;
                }
                Err(TryRecvError::Disconnected) => break,
            };
            batch.clear();
            keys.clear();
            let mut count = 0u64;
            let mut queued = 0usize;
            let mut first_at_ms = first.at_ms;
            let mut next = Some(first);
            while let Some(message) = next.take() {
                first_at_ms = first_at_ms.min(message.at_ms);
                queued += message.queued_bytes;
                keys.push((message.key, batch.len() as u64));
                batch.extend_from_slice(&message.record);
                count += 1;
                if batch.len() < BATCH_BYTES {
                    next = receiver.try_recv().ok();
                }
            }
            self.shared
                .queued_bytes
                .fetch_sub(queued, Ordering::Relaxed);
            if let Err(error) = self.append(first_at_ms, &batch, &keys) {
                self.shared.write_errors.fetch_add(1, Ordering::Relaxed);
                let total = self.shared.dropped.fetch_add(count, Ordering::Relaxed) + count;
                tracing::warn!(%error, dir = %self.dir.display(), "wire log: cannot write; its messages are dropped");
                crate::warn_dropped(&self.shared, total);
                // Start afresh: the segment may end in a partial record.
                self.close();
            } else {
                self.shared.written.fetch_add(count, Ordering::Relaxed);
            }
            if self.last_housekeeping.elapsed() >= Duration::from_secs(1) {
                self.housekeeping();
            }
        }
        self.close();
    }

    fn append(
        &mut self,
        first_at_ms: i64,
        batch: &[u8],
        keys: &[(u64, u64)],
    ) -> std::io::Result<()> {
        let full = self.open.as_ref().is_some_and(|open| {
            open.len > 0
                && (open.len + batch.len() as u64 > self.config.segment_bytes
                    || open.opened.elapsed() >= self.config.segment_age)
        });
        if full {
            self.close();
        }
        if self.open.is_none() {
            // Names ascend even if a clock steps back.
            let first = first_at_ms.max(self.last_first_at_ms + 1);
            let path = self.dir.join(segment_name(first));
            // Bodies name customers: the hub's user only.
            let file = OpenOptions::new()
                .create_new(true)
                .append(true)
                .mode(0o600)
                .open(&path)?;
            self.last_first_at_ms = first;
            self.open = Some(Open {
                first_at_ms: first,
                path,
                file,
                len: 0,
                index: Vec::new(),
                opened: Instant::now(),
            });
        }
        let open = self.open.as_mut().expect("opened above");
        open.file.write_all(batch)?;
        for (hash, offset) in keys {
            format::encode_index_entry(*hash, open.len + offset, &mut open.index);
        }
        open.len += batch.len() as u64;
        self.publish_size();
        Ok(())
    }

    /// Closes the open segment, writing its index.
    fn close(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        let index = index_path(&open.path);
        if let Err(error) = write_atomically(&index, &open.index) {
            // The reader then scans the segment whole; the next start
            // indexes it.
            self.shared.write_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%error, path = %index.display(), "wire log: cannot write a segment's index");
        }
        self.closed.push_back(Closed {
            first_at_ms: open.first_at_ms,
            bytes: open.len + file_len(&index),
            path: open.path,
        });
        self.publish_size();
    }

    fn housekeeping(&mut self) {
        self.last_housekeeping = Instant::now();
        if self
            .open
            .as_ref()
            .is_some_and(|open| open.opened.elapsed() >= self.config.segment_age)
        {
            self.close();
        }
        let horizon_ms = crate::now_ms() - self.config.retention.as_millis() as i64;
        loop {
            let total: u64 = self.total_bytes();
            let Some(oldest) = self.closed.front() else {
                break;
            };
            // Every message of a segment is older than the next one's first.
            let next_first = self
                .closed
                .get(1)
                .map(|next| next.first_at_ms)
                .or(self.open.as_ref().map(|open| open.first_at_ms));
            let expired = next_first.is_some_and(|next| next <= horizon_ms);
            if total <= self.config.max_bytes && !expired {
                break;
            }
            let _ = std::fs::remove_file(index_path(&oldest.path));
            let _ = std::fs::remove_file(&oldest.path);
            self.closed.pop_front();
        }
        self.publish_size();
    }

    fn total_bytes(&self) -> u64 {
        self.closed.iter().map(|segment| segment.bytes).sum::<u64>()
            + self.open.as_ref().map_or(0, |open| open.len)
    }

    fn publish_size(&self) {
        self.shared
            .bytes_on_disk
            .store(self.total_bytes(), Ordering::Relaxed);
    }
}
