//! Which of the kasi processes on one PostgreSQL database is active: the
//! lease row and its fencing number.
//!
//! One row, `kasi_lease`. Its times are the database's (`now()`), never a
//! kasi host's: hosts' clocks may disagree, the database's is the one
//! clock every process sees.
//!
//! - **Take** (a standby, once the lease has expired; or a process that
//!   held it under the same name): the fencing number goes up by one and
//!   the lease runs `lease_ms` from now. The taker recovers from the store
//!   and only then serves.
//! - **Renew** (the active, every `lease_ms / 3`): only while the fencing
//!   number is still its own. No row back: deposed.
//! - **Fence** (every commit of the active, [`crate::pg::PgStore::fence`]):
//!   the commit's first statement updates the lease row where the fencing
//!   number is the active's, counting the commit. The row lock it takes
//!   conflicts with a taker's update, so either the commit holds it first
//!   (the taker waits for it, then increments) or the taker did (the
//!   commit finds no row and fails). Invariant: **a transaction that
//!   passed the check with number F commits only while F is the current
//!   number**, so a deposed active (paused, partitioned, slow) never
//!   writes again.

use std::time::Duration;

use postgres::Client;

use crate::pg::{connect, redact_url};
use crate::StoreError;

/// How long taking the lease waits for its row's lock before asking
/// whether the process holding it still holds the lease.
const LOCK_WAIT: Duration = Duration::from_millis(200);

/// The lease as the database sees it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseState {
    /// Who took it last ("" if nobody ever did).
    pub holder: String,
    pub fencing: i64,
    /// Until it expires (negative: expired that long ago).
    pub expires_in_ms: i64,
}

/// Sessions a take ended: those of the process whose lease ran out while
/// its transaction held the lease row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndedSessions {
    /// Whose lease it was, and its fencing number.
    pub holder: String,
    pub fencing: i64,
    pub sessions: u64,
}

/// A connection of its own to the lease row.
pub struct Lease {
    url: String,
    client: Option<Client>,
    holder: String,
    lease_ms: u64,
    ended: Option<EndedSessions>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lease({}, {})", self.holder, redact_url(&self.url))
    }
}

impl Lease {
    /// `holder` names this process in the lease row (and to operators);
    /// `lease_ms` is how long a lease lasts without renewal.
    pub fn new(url: &str, holder: &str, lease_ms: u64) -> Lease {
        Lease {
            url: url.to_string(),
            client: None,
            holder: holder.to_string(),
            lease_ms,
            ended: None,
        }
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    fn client(&mut self) -> Result<&mut Client, StoreError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = None;
            self.client = Some(connect(&self.url)?);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// Takes the lease if it has expired (or this holder has it): the new
    /// fencing number, or `None` while another process holds it.
    ///
    /// The lease row may be locked by a transaction of the process whose
    /// lease ran out: a commit that passed its fencing check when that
    /// process was paused (a frozen VM, SIGSTOP) or cut off with its
    /// connection still open. Waiting for it could take as long as the
    /// pause, so the take waits [`LOCK_WAIT`] at most; then, if the lease
    /// has expired, it ends the sessions holding the row (their
    /// transactions roll back: none of them was acknowledged, as none
    /// committed) and tries again.
    pub fn try_take(&mut self) -> Result<Option<i64>, StoreError> {
        match self.take_waiting_briefly() {
            Err(error) if error.message.contains("(55P03)") => {
                let state = self.state()?;
                if state.expires_in_ms >= 0 {
                    // Held, and renewed: its holder is alive and well.
                    return Ok(None);
                }
                let sessions = self.end_sessions_holding_the_lease()?;
                self.ended = Some(EndedSessions {
                    holder: state.holder,
                    fencing: state.fencing,
                    sessions,
                });
                self.take_waiting_briefly()
            }
            taken => taken,
        }
    }

    fn take_waiting_briefly(&mut self) -> Result<Option<i64>, StoreError> {
        let (holder, lease_ms) = (self.holder.clone(), self.lease_ms as i64);
        let wait_ms = LOCK_WAIT.as_millis() as i64;
        let client = self.client()?;
        let mut transaction = client.transaction()?;
        transaction.execute(&format!("SET LOCAL lock_timeout = {wait_ms}"), &[])?;
        let row = transaction.query_opt(
            "UPDATE kasi_lease SET holder = $1, fencing = fencing + 1,
                expires_at = now() + $2::bigint * interval '1 millisecond'
             WHERE id = 1 AND (expires_at < now() OR holder = $1)
             RETURNING fencing",
            &[&holder, &lease_ms],
        )?;
        transaction.commit()?;
        Ok(row.map(|row| row.get(0)))
    }

    /// What the last [`Lease::try_take`] ended to take the lease, once.
    pub fn ended_sessions(&mut self) -> Option<EndedSessions> {
        self.ended.take()
    }

    /// Ends every other session holding a lock on the lease row; how many.
    /// kasi's processes connect as one role, which may end its own
    /// sessions without further privilege.
    fn end_sessions_holding_the_lease(&mut self) -> Result<u64, StoreError> {
        let row = self.client()?.query_one(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
             FROM (SELECT DISTINCT pid FROM pg_locks
                   WHERE relation = 'kasi_lease'::regclass AND granted
                     AND pid <> pg_backend_pid()) AS holders",
            &[],
        )?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    /// Extends the lease by `lease_ms` from now if `fencing` still holds
    /// it; `false`: deposed.
    pub fn renew(&mut self, fencing: i64) -> Result<bool, StoreError> {
        let lease_ms = self.lease_ms as i64;
        let row = self.client()?.query_opt(
            "UPDATE kasi_lease SET expires_at = now() + $2::bigint * interval '1 millisecond'
             WHERE id = 1 AND fencing = $1 RETURNING 1",
            &[&fencing, &lease_ms],
        )?;
        Ok(row.is_some())
    }

    /// Gives the lease up (a clean stop), so that a standby takes over at
    /// once instead of after it expires.
    pub fn release(&mut self, fencing: i64) -> Result<(), StoreError> {
        self.client()?.execute(
            "UPDATE kasi_lease SET expires_at = '-infinity' WHERE id = 1 AND fencing = $1",
            &[&fencing],
        )?;
        Ok(())
    }

    /// The lease as it stands.
    pub fn state(&mut self) -> Result<LeaseState, StoreError> {
        let row = self.client()?.query_one(
            "SELECT holder, fencing,
                CASE WHEN expires_at = '-infinity' THEN -1
                     ELSE (extract(epoch FROM expires_at - now()) * 1000)::bigint END
             FROM kasi_lease WHERE id = 1",
            &[],
        )?;
        Ok(LeaseState {
            holder: row.get(0),
            fencing: row.get(1),
            expires_in_ms: row.get(2),
        })
    }
}
