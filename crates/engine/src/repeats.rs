//! Log lines of a failure that repeats (a store that cannot be read, a
//! journal that cannot write, a directory that cannot be listed): written
//! the first time at once, then at most once per interval with how many
//! failures the line stands for (`repeated`), and once when it works again
//! — so a fault that lasts an hour is a handful of lines, not 3,600.
//!
//! The caller keeps one [`Repeats`] per failing thing and writes the lines
//! itself (their words and fields are its own):
//!
//! ```
//! # use engine::Repeats;
//! # use std::time::Duration;
//! let mut failures = Repeats::new(Duration::from_secs(10));
//! # let result: Result<(), String> = Err("disk full".into());
//! match result {
//!     Ok(()) => {
//!         if let Some(recovered) = failures.recovered() {
//!             tracing::info!(failures = recovered.failures, "works again");
//!         }
//!     }
//!     Err(error) => {
//!         if let Some(repeated) = failures.failed() {
//!             tracing::warn!(%error, repeated, "write failed");
//!         }
//!     }
//! }
//! ```

use std::time::{Duration, Instant};

/// One repeating failure's log gate (see the module's documentation).
#[derive(Clone, Debug)]
pub struct Repeats {
    every: Duration,
    /// When the first failure since the last success happened.
    failing_since: Option<Instant>,
    /// When the last line was due.
    logged_at: Option<Instant>,
    /// Failures since the last line.
    unlogged: u64,
    /// Failures since the last success.
    failures: u64,
}

/// What a recovery line says: how many failures there were, for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovered {
    pub failures: u64,
    pub failing_for: Duration,
}

impl Repeats {
    /// At most one line per `every` while it keeps failing.
    pub const fn new(every: Duration) -> Repeats {
        Repeats {
            every,
            failing_since: None,
            logged_at: None,
            unlogged: 0,
            failures: 0,
        }
    }

    /// One more failure: `Some(repeated)` when a line is due, where
    /// `repeated` is how many failures that line stands for (this one and
    /// those not written since the last line: 1 the first time).
    pub fn failed(&mut self) -> Option<u64> {
        self.failed_at(Instant::now())
    }

    /// [`failed`](Self::failed) at `now`.
    pub fn failed_at(&mut self, now: Instant) -> Option<u64> {
        self.failing_since.get_or_insert(now);
        self.failures += 1;
        self.unlogged += 1;
        let due = self
            .logged_at
            .is_none_or(|at| now.saturating_duration_since(at) >= self.every);
        if !due {
            return None;
        }
        self.logged_at = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }

    /// It worked: `Some` (what to say in a recovery line) if it had been
    /// failing since the last success, else `None` (nothing to say).
    pub fn recovered(&mut self) -> Option<Recovered> {
        self.recovered_at(Instant::now())
    }

    /// [`recovered`](Self::recovered) at `now`.
    pub fn recovered_at(&mut self, now: Instant) -> Option<Recovered> {
        let since = self.failing_since.take()?;
        let recovered = Recovered {
            failures: std::mem::take(&mut self.failures),
            failing_for: now.saturating_duration_since(since),
        };
        self.logged_at = None;
        self.unlogged = 0;
        Some(recovered)
    }

    /// Whether it has failed since the last success.
    pub fn is_failing(&self) -> bool {
        self.failing_since.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_said_at_once_then_one_line_per_interval_with_its_count() {
        let mut repeats = Repeats::new(Duration::from_secs(10));
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert_eq!(repeats.failed_at(at(0)), Some(1));
        // One a second for 25 s: lines at 10 s and 20 s, each standing for
        // the ten failures since the line before.
        let said: Vec<(u64, u64)> = (1..=25)
            .filter_map(|s| repeats.failed_at(at(s * 1000)).map(|n| (s, n)))
            .collect();
        assert_eq!(said, vec![(10, 10), (20, 10)]);
        assert!(repeats.is_failing());
        assert_eq!(
            repeats.recovered_at(at(25_500)),
            Some(Recovered {
                failures: 26,
                failing_for: Duration::from_millis(25_500),
            })
        );
        assert!(!repeats.is_failing());
        // Said once: the next success has nothing to say.
        assert_eq!(repeats.recovered_at(at(26_000)), None);
        // A new outage is said at once again.
        assert_eq!(repeats.failed_at(at(26_100)), Some(1));
    }
}
