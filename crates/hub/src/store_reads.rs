//! The hub's reads of the store beside the pipeline (`store::StoreReader`:
//! transfers and quotes that left the ledger's memory). One that fails —
//! the database is down, a disk error — decides nothing: the request is
//! answered 503 with 2003 and `Retry-After` (it may be sent again), never
//! 2001, and the store's own words go to the log, said once, then at most
//! every [`LOG_EVERY`] with how many failed meanwhile, and once when reads
//! work again (during an outage every prepare would fail this way).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use engine::Repeats;
use ledger::ErrorCode;
use store::{StoreError, StoreReader};

use crate::{Hub, HubError};

/// At most one log line per this while reads keep failing.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// Whether the store's reads fail, for their log lines.
pub struct StoreReads {
    /// Set from the first failure until a read succeeds: a successful read
    /// looks no further while it is clear (no lock on the hot path).
    failing: AtomicBool,
    log: Mutex<Repeats>,
}

impl Default for StoreReads {
    fn default() -> StoreReads {
        StoreReads {
            failing: AtomicBool::new(false),
            log: Mutex::new(Repeats::new(LOG_EVERY)),
        }
    }
}

impl StoreReads {
    fn failed(&self, what: &str, error: &StoreError) {
        self.failing.store(true, Ordering::Relaxed);
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(repeated) = log.failed() {
            tracing::error!(
                what,
                %error,
                repeated,
                "reading the store failed; the request is refused (503, 2003, retry later)"
            );
        }
    }

    fn succeeded(&self) {
        if !self.failing.load(Ordering::Relaxed) {
            return;
        }
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        self.failing.store(false, Ordering::Relaxed);
        if let Some(recovered) = log.recovered() {
            tracing::warn!(
                failures = recovered.failures,
                failing_ms = recovered.failing_for.as_millis() as u64,
                "reading the store works again"
            );
        }
    }
}

impl Hub {
    /// Runs `read` on the store's reader (`None` when there is none: the
    /// ledger keeps every transfer). On the request's task; a database
    /// server's round trip is long enough to matter, so the runtime moves
    /// this worker's other tasks elsewhere meanwhile. A failure is answered
    /// 503/2003 with `Retry-After`; `what` names the read in the log.
    pub(crate) fn read_store<T>(
        &self,
        what: &str,
        read: impl FnOnce(&dyn StoreReader) -> Result<T, StoreError>,
    ) -> Result<Option<T>, HubError> {
        let Some(reader) = self.config.transfer_lookup.as_deref() else {
            return Ok(None);
        };
        let result = match reader.is_remote() {
            true => tokio::task::block_in_place(|| read(reader)),
            false => read(reader),
        };
        match result {
            Ok(found) => {
                self.store_reads.succeeded();
                Ok(Some(found))
            }
            Err(error) => {
                self.store_reads.failed(what, &error);
                Err(HubError::new(
                    ErrorCode::SERVICE_UNAVAILABLE,
                    "Service currently unavailable - the hub cannot read its store for now; retry later",
                ))
            }
        }
    }
}
