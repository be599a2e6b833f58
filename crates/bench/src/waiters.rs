//! Payers waiting for callbacks: the pending transfers and conversions,
//! the FXPs' wait for the hub's `PATCH`, and the waiters of lookups,
//! quotes, FX quotes and transaction requests.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::oneshot;

/// How a stage ended, as its payer's callback handler saw it.
pub(crate) enum Completion {
    /// The payer received the stage's last callback at this instant.
    Done(Instant),
    /// The error's key (`HTTP 400`, `3303`, …) and a description.
    Failed(String, String),
}

/// Why a stage did not end well.
#[derive(Debug, PartialEq)]
pub(crate) enum Failure {
    /// The error's key and a description.
    Error(String, String),
    Timeout,
}

impl Completion {
    pub(crate) fn into_result(self) -> Result<Instant, Failure> {
        match self {
            Completion::Done(at) => Ok(at),
            Completion::Failed(key, description) => Err(Failure::Error(key, description)),
        }
    }
}

/// A transfer (or a conversion) between its `POST` and its end.
pub(crate) struct Pending {
    pub(crate) payer: u32,
    /// The payee's DFSP; of a conversion, the FXP.
    pub(crate) payee: u32,
    pub(crate) post_sent: Instant,
    pub(crate) fulfil_sent: Option<Instant>,
    /// Its flow started inside the measured window.
    pub(crate) measured: bool,
    /// Of a transfer that depends on a conversion: the conversion's
    /// counter, whose FXP waits for the hub's `PATCH`.
    pub(crate) conversion: Option<u64>,
    pub(crate) done: oneshot::Sender<Completion>,
}

/// An FXP waiting for the hub's `PATCH /fxTransfers/{ID}`: the final state
/// of its conversion, once the transfer that depends on it ended.
pub(crate) struct Patch {
    pub(crate) fxp: u32,
    /// When the payee sent its fulfilment (the `fx_patch` leg's start).
    pub(crate) fulfil_sent: Option<Instant>,
    pub(crate) measured: bool,
    pub(crate) done: oneshot::Sender<Completion>,
}

/// A payer waiting for a lookup's or a quote's answer.
pub(crate) struct Waiter {
    /// Tells the waiters of one key apart.
    pub(crate) ticket: u64,
    pub(crate) payer: u32,
    pub(crate) payee: u32,
    pub(crate) done: oneshot::Sender<Completion>,
}

/// Payers waiting for callbacks, by key, oldest first: lookups by (payer,
/// party), since `PUT /parties/{Type}/{ID}` carries nothing else that says
/// which lookup it answers, and quotes by quote id. An answer completes the
/// oldest waiter of its key (two users looking up one party at once from
/// one DFSP cannot be told apart; the round robin over the parties makes
/// it rare).
pub(crate) struct Waiters<K> {
    pub(crate) map: Mutex<HashMap<K, VecDeque<Waiter>>>,
}

impl<K: Eq + Hash> Waiters<K> {
    pub(crate) fn new() -> Waiters<K> {
        Waiters {
            map: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<K, VecDeque<Waiter>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn insert(&self, key: K, waiter: Waiter) {
        self.lock().entry(key).or_default().push_back(waiter);
    }

    /// (payer, payee) of the oldest waiter of `key`.
    pub(crate) fn peek(&self, key: &K) -> Option<(u32, u32)> {
        let map = self.lock();
        let waiter = map.get(key)?.front()?;
        Some((waiter.payer, waiter.payee))
    }

    /// Removes the oldest waiter of `key`, if `payer` is its payer.
    pub(crate) fn take_oldest(&self, key: &K, payer: Option<u32>) -> Option<Waiter> {
        let mut map = self.lock();
        let queue = map.get_mut(key)?;
        if payer.is_some_and(|payer| queue.front().is_some_and(|w| w.payer != payer)) {
            return None;
        }
        let waiter = queue.pop_front();
        if queue.is_empty() {
            map.remove(key);
        }
        waiter
    }

    /// Removes the waiter holding `ticket`.
    pub(crate) fn take(&self, key: &K, ticket: u64) -> Option<Waiter> {
        let mut map = self.lock();
        let queue = map.get_mut(key)?;
        let position = queue.iter().position(|waiter| waiter.ticket == ticket)?;
        let waiter = queue.remove(position);
        if queue.is_empty() {
            map.remove(key);
        }
        waiter
    }

    /// Ends the oldest waiter of `key` as failed; false if there is none.
    pub(crate) fn fail(&self, key: &K, error_key: String, description: String) -> bool {
        match self.take_oldest(key, None) {
            Some(waiter) => {
                let _ = waiter.done.send(Completion::Failed(error_key, description));
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(ticket: u64, payer: u32, payee: u32) -> (Waiter, oneshot::Receiver<Completion>) {
        let (done, outcome) = oneshot::channel();
        (
            Waiter {
                ticket,
                payer,
                payee,
                done,
            },
            outcome,
        )
    }

    #[test]
    fn waiters_of_one_key_are_answered_oldest_first() {
        let waiters: Waiters<u64> = Waiters::new();
        let (first, mut first_outcome) = waiter(1, 0, 1);
        let (second, mut second_outcome) = waiter(2, 0, 1);
        let (other, _other_outcome) = waiter(3, 2, 3);
        waiters.insert(7, first);
        waiters.insert(7, second);
        waiters.insert(8, other);
        assert_eq!(waiters.peek(&7), Some((0, 1)));
        assert_eq!(waiters.peek(&8), Some((2, 3)));
        assert_eq!(waiters.peek(&9), None);

        // Not its payer: nothing taken.
        assert!(waiters.take_oldest(&7, Some(5)).is_none());
        let taken = waiters.take_oldest(&7, Some(0)).expect("the oldest");
        assert_eq!(taken.ticket, 1);
        let now = Instant::now();
        let _ = taken.done.send(Completion::Done(now));
        assert!(matches!(first_outcome.try_recv(), Ok(Completion::Done(at)) if at == now));

        assert!(waiters.fail(&7, "3204".into(), "not found".into()));
        assert!(matches!(
            second_outcome.try_recv(),
            Ok(Completion::Failed(key, _)) if key == "3204"
        ));
        assert!(!waiters.fail(&7, "3204".into(), "again".into()));
        assert!(waiters.lock().get(&7).is_none(), "an empty key is dropped");

        // A timed-out waiter removes itself by ticket, not somebody else.
        let (a, _a) = waiter(10, 0, 1);
        let (b, _b) = waiter(11, 0, 1);
        waiters.insert(7, a);
        waiters.insert(7, b);
        assert!(waiters.take(&7, 12).is_none());
        assert_eq!(waiters.take(&7, 11).map(|w| w.ticket), Some(11));
        assert_eq!(waiters.take(&7, 11).map(|w| w.ticket), None);
        assert_eq!(waiters.take_oldest(&7, None).map(|w| w.ticket), Some(10));
        assert!(waiters.lock().get(&7).is_none());
    }
}
