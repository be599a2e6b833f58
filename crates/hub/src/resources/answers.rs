//! Only the DFSP that was asked may answer, only to the DFSP that asked,
//! and only while the question is pending.
//!
//! Mojaloop's routing services forward a `PUT` answer to whatever
//! `FSPIOP-Destination` it names. On a scheme where every DFSP holds a
//! valid certificate that lets a third DFSP answer someone else's lookup —
//! `PUT /parties/MSISDN/{the payee's number}` naming itself as the holder —
//! and receive the payment meant for the payee. kasi remembers every
//! request it routes that expects an answer: its key (the resource and
//! id, or the party), who asked (the requester), who was asked (the
//! addressee: the holder a lookup went to, or the FSPIOP-Destination),
//! and until when. An answer is forwarded only from an addressee to a
//! requester of a pending question; anything else is refused, counted and
//! logged ([`crate::refused`]), and nothing is forwarded.
//!
//! A genuine answer may come twice (the addressee resends; the requester
//! asks again): an answered question stays for [`ANSWERED_GRACE`] more, and
//! a repeated request renews it.
//!
//! Memory is bounded: at most `capacity` questions are pending; when full,
//! a new request is refused (2003, nothing forwarded) rather than an old
//! question forgotten, so a flood of questions cannot make a genuine
//! answer unroutable. Questions leave at expiry (swept as new ones
//! arrive, oldest first) or [`ANSWERED_GRACE`] after their answer.

use std::cmp::{Ordering, Reverse};
use std::collections::hash_map::RandomState;
use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fspiop::Resource;
use ledger::FspName;

/// How long a question waits for its answer, by default.
pub const DEFAULT_ANSWER_WINDOW: Duration = Duration::from_secs(60);
/// Questions pending at most, by default.
pub const DEFAULT_CAPACITY: usize = 1_000_000;
/// How long an answered question still accepts a repeat of its answer.
pub const ANSWERED_GRACE: Duration = Duration::from_secs(10);

/// Independent locks, so that HTTP workers rarely wait on one another.
const SHARDS: usize = 16;
/// Questions one requester may have pending with one addressee for one
/// key: a requester asking again renews its question; distinct requesters
/// each get theirs.
const ASKERS_PER_KEY: usize = 64;
/// One requester may hold at most this share (1/n) of each shard.
const REQUESTER_SHARE_DIVISOR: usize = 4;

/// What a question is about: the resource and its id (a quote id, a
/// transaction request id, ...; for a party, `{Type}/{ID}[/{SubId}]`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub resource: Resource,
    pub id: String,
}

impl Key {
    pub fn new(resource: Resource, id: impl Into<String>) -> Key {
        Key {
            resource,
            id: id.into(),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Question {
    requester: FspName,
    addressee: FspName,
    /// The proxy that carried the question from another scheme's
    /// requester (FSPIOP-Proxy, bound by the gate): the answer goes back
    /// through it.
    via: Option<FspName>,
    /// A discovery asked of every proxy that another proxy's scheme has
    /// answered (see [`Answers::close_others`]): kept for its window so
    /// that its late answer is recognised, and never passed on.
    superseded: bool,
    expires_at: Instant,
    /// When it was asked, or asked again: an answer without a named
    /// destination goes to the latest requester; and the stamp by which a
    /// failed delivery withdraws only the asking it was about.
    asked_at: Instant,
    /// Answered since it was (last) asked.
    answered: bool,
}

/// The questions about one key, and when they are next checked for
/// expiry.
#[derive(Debug)]
struct Slot {
    questions: Vec<Question>,
    /// The instant of this key's one live entry in the sweep queue; other
    /// entries of the key there are stale and skipped.
    sweep_at: Instant,
}

/// A key's expiry check, due at its instant (ordered by instant alone).
#[derive(Debug)]
struct Due(Instant, Key);

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        self.0 == other.0
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Due) -> Ordering {
        self.0.cmp(&other.0)
    }
}

#[derive(Debug, Default)]
struct Shard {
    questions: HashMap<Key, Slot>,
    /// Keys' expiry checks, earliest first (a window's and an answered
    /// question's grace end interleave, so the order is kept by a heap, not
    /// by arrival). A key has one live entry at a time (its `sweep_at`):
    /// asking the same question again does not add one — a renewed
    /// question is found pending at its check and checked again at its new
    /// expiry. Entries of withdrawn questions are stale and skipped, and
    /// compacted away once they outnumber the live ones.
    due: BinaryHeap<Reverse<Due>>,
    len: usize,
    /// Questions pending per requester, for the fair-share bound.
    by_requester: HashMap<FspName, usize>,
}

impl Shard {
    /// Drops every question that expired by `now`, earliest check first.
    fn sweep(&mut self, now: Instant) {
        while let Some(Reverse(Due(at, _))) = self.due.peek() {
            if *at > now {
                break;
            }
            let Reverse(Due(at, key)) = self.due.pop().expect("peeked");
            let Some(slot) = self.questions.get_mut(&key) else {
                continue;
            };
            if slot.sweep_at != at {
                continue;
            }
            let mut removed = Vec::new();
            slot.questions.retain(|question| {
                let live = question.expires_at > now;
                if !live {
                    removed.push(question.requester);
                }
                live
            });
            match slot.questions.iter().map(|q| q.expires_at).min() {
                Some(next) => {
                    slot.sweep_at = next;
                    self.due.push(Reverse(Due(next, key)));
                }
                None => {
                    self.questions.remove(&key);
                }
            }
            for requester in removed {
                self.forget(requester);
            }
        }
        if self.due.len() > 2 * self.len + 64 {
            let questions = &self.questions;
            self.due.retain(|Reverse(Due(at, key))| {
                questions.get(key).is_some_and(|slot| slot.sweep_at == *at)
            });
        }
    }

    /// Counts a question of `requester` as gone.
    fn forget(&mut self, requester: FspName) {
        self.len -= 1;
        if let Some(count) = self.by_requester.get_mut(&requester) {
            *count -= 1;
            if *count == 0 {
                self.by_requester.remove(&requester);
            }
        }
    }

    /// Whether `requester` may add a question, and counts it if so.
    fn admit(&mut self, requester: FspName, capacity: usize, share: usize) -> bool {
        let held = self.by_requester.get(&requester).copied().unwrap_or(0);
        if self.len >= capacity || held >= share {
            return false;
        }
        self.len += 1;
        *self.by_requester.entry(requester).or_insert(0) += 1;
        true
    }
}

/// An answer accepted: to whom it goes, through which proxy (the one
/// that carried the question, if one did), and whom the question was put
/// to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answered {
    pub requester: FspName,
    pub via: Option<FspName>,
    pub addressee: FspName,
}

/// Why a request was not remembered.
#[derive(Debug, PartialEq, Eq)]
pub enum AskError {
    /// `capacity` questions are pending.
    Full,
}

/// Why an answer was refused. Deliberately one answer for every reason
/// on the wire (see [`Refusal::description`]), so that a DFSP cannot probe
/// whether someone else's question is pending.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No question with this key is pending.
    NothingPending,
    /// Questions are pending, but none was put to the answer's source.
    NotTheAddressee,
    /// The source was asked, but not by the named destination.
    NotTheRequester,
}

impl Refusal {
    /// Why, for the log and the counter (never for the DFSP).
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NothingPending => "nothing pending",
            Refusal::NotTheAddressee => "the source was not asked",
            Refusal::NotTheRequester => "the destination did not ask the source",
        }
    }
}

/// The questions the hub routed and awaits answers to.
#[derive(Debug)]
pub struct Answers {
    shards: Vec<Mutex<Shard>>,
    window: Duration,
    /// Per shard: the whole capacity spread evenly.
    shard_capacity: usize,
    /// Per shard, what one requester may hold: a quarter, so that one
    /// DFSP asking and never being answered cannot fill the table for
    /// everyone.
    requester_share: usize,
    /// Keyed per process, so that nobody can choose ids that all land in
    /// one shard and fill it.
    hasher: RandomState,
}

impl Answers {
    pub fn new(window: Duration, capacity: usize) -> Answers {
        Answers {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            window,
            shard_capacity: capacity.div_ceil(SHARDS).max(1),
            requester_share: (capacity.div_ceil(SHARDS) / REQUESTER_SHARE_DIVISOR).max(1),
            hasher: RandomState::new(),
        }
    }

    /// Questions that may be pending at once.
    pub fn capacity(&self) -> usize {
        self.shard_capacity * SHARDS
    }

    /// How long a question waits for its answer.
    pub fn window(&self) -> Duration {
        self.window
    }

    fn shard(&self, key: &Key) -> &Mutex<Shard> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// Questions pending now (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(|e| e.into_inner()).len)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Remembers that `requester` asked `addressee` about `key`, at `now`.
    /// Asking again renews the question.
    pub fn ask(
        &self,
        key: &Key,
        requester: FspName,
        addressee: FspName,
        now: Instant,
    ) -> Result<Instant, AskError> {
        self.ask_via(key, requester, addressee, None, now)
    }

    /// [`ask`](Self::ask), for a question `via` carried from another
    /// scheme (its answer goes back through that proxy).
    pub fn ask_via(
        &self,
        key: &Key,
        requester: FspName,
        addressee: FspName,
        via: Option<FspName>,
        now: Instant,
    ) -> Result<Instant, AskError> {
        let expires_at = now + self.window;
        let mut guard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let shard: &mut Shard = &mut guard;
        shard.sweep(now);
        if let Some(slot) = shard.questions.get_mut(key) {
            if let Some(question) = slot
                .questions
                .iter_mut()
                .find(|q| q.requester == requester && q.addressee == addressee)
            {
                question.expires_at = expires_at;
                question.asked_at = now;
                question.answered = false;
                question.via = via;
                question.superseded = false;
                return Ok(now);
            }
            if slot.questions.len() >= ASKERS_PER_KEY
                || !shard.admit(requester, self.shard_capacity, self.requester_share)
            {
                return Err(AskError::Full);
            }
            // `admit` counted it; the slot is looked up again after it.
            let slot = shard.questions.get_mut(key).expect("looked up above");
            slot.questions.push(Question {
                requester,
                addressee,
                via,
                superseded: false,
                expires_at,
                asked_at: now,
                answered: false,
            });
            return Ok(now);
        }
        if !shard.admit(requester, self.shard_capacity, self.requester_share) {
            return Err(AskError::Full);
        }
        shard.questions.insert(
            key.clone(),
            Slot {
                questions: vec![Question {
                    requester,
                    addressee,
                    via,
                    superseded: false,
                    expires_at,
                    asked_at: now,
                    answered: false,
                }],
                sweep_at: expires_at,
            },
        );
        shard.due.push(Reverse(Due(expires_at, key.clone())));
        Ok(now)
    }

    /// Forgets the asking stamped `asked_at` (see [`Answers::ask`]) whose
    /// request could not be delivered, unless it was asked again since or
    /// answered meanwhile (a resend went through, or the addressee answered
    /// an earlier attempt that did arrive); whether it was forgotten, and
    /// so whether the requester is to be told.
    pub fn withdraw_undelivered(
        &self,
        key: &Key,
        requester: FspName,
        addressee: FspName,
        asked_at: Instant,
    ) -> bool {
        let mut guard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let shard: &mut Shard = &mut guard;
        let Some(slot) = shard.questions.get_mut(key) else {
            return false;
        };
        let Some(at) = slot.questions.iter().position(|q| {
            q.requester == requester
                && q.addressee == addressee
                && q.asked_at == asked_at
                && !q.answered
        }) else {
            return false;
        };
        slot.questions.swap_remove(at);
        if slot.questions.is_empty() {
            shard.questions.remove(key);
        }
        shard.forget(requester);
        true
    }

    /// Forgets a question asked but never sent (the addressee could not
    /// be reached).
    pub fn withdraw(&self, key: &Key, requester: FspName, addressee: FspName) {
        let mut guard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let shard: &mut Shard = &mut guard;
        let Some(slot) = shard.questions.get_mut(key) else {
            return;
        };
        let before = slot.questions.len();
        slot.questions
            .retain(|q| !(q.requester == requester && q.addressee == addressee));
        let removed = before - slot.questions.len();
        if slot.questions.is_empty() {
            shard.questions.remove(key);
        }
        for _ in 0..removed {
            shard.forget(requester);
        }
    }

    /// Whether `source` may answer `key`, and to whom: `destination` when
    /// named (it must have asked `source`), else the latest requester that
    /// asked `source`. An accepted answer leaves its question pending for
    /// [`ANSWERED_GRACE`] more at most, so a repeat is forwarded too.
    pub fn answer(
        &self,
        key: &Key,
        source: FspName,
        destination: Option<FspName>,
        now: Instant,
    ) -> Result<FspName, Refusal> {
        self.answer_via(key, source, None, destination, now)
            .map(|answered| answered.requester)
    }

    /// [`answer`](Self::answer), with the proxy the question came through
    /// (if it did), which the answer goes back through.
    ///
    /// `carrier`: the proxy that carried the answer from another scheme
    /// (bound by the gate to speak for `source`); a question put to that
    /// proxy itself (a discovery asked of every proxy) is answered by
    /// whichever DFSP of its scheme holds the party.
    pub fn answer_via(
        &self,
        key: &Key,
        source: FspName,
        carrier: Option<FspName>,
        destination: Option<FspName>,
        now: Instant,
    ) -> Result<Answered, Refusal> {
        let mut guard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let shard: &mut Shard = &mut guard;
        let slot = shard
            .questions
            .get_mut(key)
            .ok_or(Refusal::NothingPending)?;
        let questions = &mut slot.questions;
        let mut asked_source = false;
        let mut chosen: Option<&mut Question> = None;
        for question in questions.iter_mut() {
            let asked = question.addressee == source || Some(question.addressee) == carrier;
            if question.expires_at <= now || !asked || question.superseded {
                continue;
            }
            asked_source = true;
            let fits = match destination {
                Some(destination) => question.requester == destination,
                None => chosen
                    .as_ref()
                    .is_none_or(|best| question.asked_at >= best.asked_at),
            };
            if fits {
                chosen = Some(question);
            }
        }
        let Some(question) = chosen else {
            return Err(if asked_source {
                Refusal::NotTheRequester
            } else if questions.iter().any(|q| q.expires_at > now) {
                Refusal::NotTheAddressee
            } else {
                Refusal::NothingPending
            });
        };
        let answered = Answered {
            requester: question.requester,
            via: question.via,
            addressee: question.addressee,
        };
        question.answered = true;
        let until = now + ANSWERED_GRACE;
        if question.expires_at > until {
            question.expires_at = until;
            // Checked sooner, so that an answered question leaves (and
            // frees its room) soon after its grace.
            if until < slot.sweep_at {
                slot.sweep_at = until;
                shard.due.push(Reverse(Due(until, key.clone())));
            }
        }
        Ok(answered)
    }

    /// Questions `requester` has about `key` that still await an answer.
    pub fn awaiting(&self, key: &Key, requester: FspName, now: Instant) -> usize {
        let guard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        guard.questions.get(key).map_or(0, |slot| {
            slot.questions
                .iter()
                .filter(|q| q.requester == requester && !q.answered && q.expires_at > now)
                .count()
        })
    }

    /// Supersedes the questions `requester` put about `key` to anyone but
    /// `kept`, answered or not: the first answer naming a holder of a
    /// discovery asked of every proxy wins, and the others' answers (a
    /// success after an error too) are never passed on after it
    /// ([`Answers::superseded`] recognises them while they are kept).
    pub fn close_others(&self, key: &Key, requester: FspName, kept: FspName) {
        let mut guard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = guard.questions.get_mut(key) {
            for question in &mut slot.questions {
                if question.requester == requester && question.addressee != kept {
                    question.superseded = true;
                }
            }
        }
    }

    /// Whether an answer carried by `carrier` (to `destination`, if named)
    /// is a late one to a discovery another proxy's scheme already
    /// answered.
    pub fn superseded(
        &self,
        key: &Key,
        carrier: FspName,
        destination: Option<FspName>,
        now: Instant,
    ) -> bool {
        let guard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        guard.questions.get(key).is_some_and(|slot| {
            slot.questions.iter().any(|q| {
                q.superseded
                    && q.addressee == carrier
                    && q.expires_at > now
                    && destination.is_none_or(|d| q.requester == d)
            })
        })
    }
}

impl crate::Hub {
    /// What to do when the request behind a question `requester` asked
    /// `addressee` is not delivered (see [`crate::notify::Undelivered`]):
    /// withdraw the question, as no answer can come, and let `tell` send
    /// the requester the error from the hub, in the words of
    /// [`crate::routing::undelivered_error`].
    pub(crate) fn on_undelivered(
        self: &std::sync::Arc<Self>,
        key: Key,
        requester: FspName,
        addressee: FspName,
        asked_at: Instant,
        tell: impl FnOnce(&crate::Hub, ledger::ErrorCode, &str) + Send + Sync + 'static,
    ) -> crate::notify::OnUndelivered {
        let hub = std::sync::Arc::downgrade(self);
        Box::new(move |undelivered| {
            let Some(hub) = hub.upgrade() else { return };
            // Asked again since (a resend that may have gone through), or
            // answered already: nobody is told of this attempt's failure.
            if !hub
                .answers
                .withdraw_undelivered(&key, requester, addressee, asked_at)
            {
                tracing::debug!(%requester, %addressee, resource = %key.resource, id = %key.id, ?undelivered, "request not delivered, but asked again or answered since; nobody told");
                return;
            }
            let (code, description) =
                crate::routing::undelivered_error(key.resource, addressee, &undelivered);
            tracing::debug!(%requester, %addressee, resource = %key.resource, id = %key.id, ?undelivered, code = code.0, "request not delivered; telling the requester");
            tell(&hub, code, &description);
        })
    }
}

impl crate::Hub {
    /// Remembers, before the request is passed on (so that the fastest
    /// answer finds it), that `requester` asked `addressee` about `key`;
    /// 2003 when too many questions are pending (nothing is passed on).
    pub(crate) fn await_answer(
        &self,
        key: &Key,
        requester: FspName,
        addressee: FspName,
    ) -> Result<Instant, crate::HubError> {
        self.await_answer_via(key, requester, addressee, None)
    }

    /// [`await_answer`](Self::await_answer) for a question carried `via`
    /// a proxy from another scheme.
    pub(crate) fn await_answer_via(
        &self,
        key: &Key,
        requester: FspName,
        addressee: FspName,
        via: Option<FspName>,
    ) -> Result<Instant, crate::HubError> {
        match self
            .answers
            .ask_via(key, requester, addressee, via, Instant::now())
        {
            Ok(asked_at) => Ok(asked_at),
            Err(AskError::Full) => {
                self.refuse(
                    crate::refused::Class::Busy,
                    requester.as_str(),
                    &format!("{} {} to '{addressee}'", key.resource, key.id),
                );
                Err(crate::HubError::new(
                    ledger::ErrorCode::SERVICE_UNAVAILABLE,
                    "Service currently unavailable - too many requests are awaiting answers; retry later",
                ))
            }
        }
    }

    /// Where `source`'s answer about `key` may go: `destination` if named
    /// and it asked `source`, else the latest requester that asked
    /// `source`. Anything else is refused with 3100 — one description
    /// for every reason, so a DFSP cannot probe what others are asking —
    /// counted and logged as an unsolicited answer. With the requester,
    /// the proxy its question came through (the answer's carrier), if it
    /// did.
    pub(crate) fn answer_route(
        &self,
        key: &Key,
        source: FspName,
        carrier: Option<FspName>,
        destination: Option<FspName>,
    ) -> Result<Answered, crate::HubError> {
        self.answers
            .answer_via(key, source, carrier, destination, Instant::now())
            .map_err(|refusal| {
                let to = destination.map_or_else(|| "any requester".to_string(), |d| format!("'{d}'"));
                self.refuse(
                    crate::refused::Class::UnsolicitedAnswer,
                    source.as_str(),
                    &format!(
                        "{} {} to {to}: {}",
                        key.resource,
                        key.id,
                        refusal.reason()
                    ),
                );
                let awaited = match destination {
                    Some(destination) => format!("from '{destination}' "),
                    None => String::new(),
                };
                crate::HubError::new(
                    ledger::ErrorCode::GENERIC_VALIDATION_ERROR,
                    format!(
                        "Generic validation error - no {} request {} {awaited}is awaiting an answer from '{source}'",
                        key.resource, key.id
                    ),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fsp(name: &str) -> FspName {
        FspName::new(name).unwrap()
    }

    fn party(id: &str) -> Key {
        Key::new(Resource::Parties, format!("MSISDN/{id}"))
    }

    #[test]
    fn only_the_addressee_answers_only_the_requester() {
        let answers = Answers::new(Duration::from_secs(60), 100);
        let now = Instant::now();
        let key = party("123");
        answers.ask(&key, fsp("payer"), fsp("payee"), now).unwrap();
        // A third DFSP answering, to the requester or to itself: refused.
        assert_eq!(
            answers.answer(&key, fsp("mallory"), Some(fsp("payer")), now),
            Err(Refusal::NotTheAddressee)
        );
        assert_eq!(
            answers.answer(&key, fsp("mallory"), None, now),
            Err(Refusal::NotTheAddressee)
        );
        // The addressee answering someone who did not ask: refused.
        assert_eq!(
            answers.answer(&key, fsp("payee"), Some(fsp("mallory")), now),
            Err(Refusal::NotTheRequester)
        );
        // Another key: nothing pending.
        assert_eq!(
            answers.answer(&party("124"), fsp("payee"), Some(fsp("payer")), now),
            Err(Refusal::NothingPending)
        );
        // The genuine answer, with and without its destination.
        assert_eq!(
            answers.answer(&key, fsp("payee"), Some(fsp("payer")), now),
            Ok(fsp("payer"))
        );
        assert_eq!(
            answers.answer(&key, fsp("payee"), None, now),
            Ok(fsp("payer"))
        );
    }

    /// A discovery asked of two proxies: an answer carried by either is
    /// taken (whichever DFSP of its scheme sends it); once one wins, the
    /// other's questions are superseded: its late answer is recognised and
    /// never accepted, and nothing else is.
    #[test]
    fn a_question_put_to_a_proxy_is_answered_by_what_it_carries_and_superseded_once_won() {
        let answers = Answers::new(Duration::from_secs(60), 10_000);
        let now = Instant::now();
        let key = party("777");
        for proxy in ["pxAB", "pxAC"] {
            answers.ask(&key, fsp("payer"), fsp(proxy), now).unwrap();
        }
        assert_eq!(answers.awaiting(&key, fsp("payer"), now), 2);
        // Not carried by a proxy asked: refused.
        assert_eq!(
            answers
                .answer_via(&key, fsp("dfspB"), Some(fsp("pxAD")), None, now)
                .map(|a| a.requester),
            Err(Refusal::NotTheAddressee)
        );
        let won = answers
            .answer_via(
                &key,
                fsp("dfspB"),
                Some(fsp("pxAB")),
                Some(fsp("payer")),
                now,
            )
            .unwrap();
        assert_eq!(
            won,
            Answered {
                requester: fsp("payer"),
                via: None,
                addressee: fsp("pxAB"),
            }
        );
        assert_eq!(answers.awaiting(&key, fsp("payer"), now), 1);
        answers.close_others(&key, fsp("payer"), fsp("pxAB"));
        assert!(answers.superseded(&key, fsp("pxAC"), Some(fsp("payer")), now));
        assert!(!answers.superseded(&key, fsp("pxAB"), Some(fsp("payer")), now));
        assert!(!answers.superseded(&key, fsp("pxAC"), Some(fsp("other")), now));
        assert!(answers
            .answer_via(
                &key,
                fsp("dfspC"),
                Some(fsp("pxAC")),
                Some(fsp("payer")),
                now
            )
            .is_err());
        // Past its window it is gone like any question.
        let later = now + Duration::from_secs(61);
        assert!(!answers.superseded(&key, fsp("pxAC"), Some(fsp("payer")), later));
    }

    #[test]
    fn an_answered_question_accepts_repeats_for_a_grace_then_leaves() {
        let answers = Answers::new(Duration::from_secs(60), 100);
        let now = Instant::now();
        let key = Key::new(Resource::Quotes, "q1");
        answers.ask(&key, fsp("payer"), fsp("payee"), now).unwrap();
        let answer = |at| answers.answer(&key, fsp("payee"), Some(fsp("payer")), at);
        assert_eq!(answer(now), Ok(fsp("payer")));
        assert_eq!(answer(now + ANSWERED_GRACE / 2), Ok(fsp("payer")));
        assert_eq!(
            answer(now + ANSWERED_GRACE + Duration::from_millis(1)),
            Err(Refusal::NothingPending)
        );
        // Asking again opens it again.
        let later = now + Duration::from_secs(30);
        answers
            .ask(&key, fsp("payer"), fsp("payee"), later)
            .unwrap();
        assert_eq!(answer(later), Ok(fsp("payer")));
    }

    #[test]
    fn questions_expire_and_leave_memory() {
        let answers = Answers::new(Duration::from_secs(60), 10_000);
        let now = Instant::now();
        for i in 0..50 {
            answers
                .ask(&party(&i.to_string()), fsp("payer"), fsp("payee"), now)
                .unwrap();
        }
        assert_eq!(answers.len(), 50);
        let late = now + Duration::from_secs(61);
        assert_eq!(
            answers.answer(&party("1"), fsp("payee"), Some(fsp("payer")), late),
            Err(Refusal::NothingPending)
        );
        // Each shard sweeps what expired when it is next asked: 400 new
        // questions touch every shard.
        for i in 0..400 {
            answers
                .ask(&party(&format!("new{i}")), fsp("payer"), fsp("payee"), late)
                .unwrap();
        }
        assert_eq!(answers.len(), 400);
        assert_eq!(
            answers.answer(&party("new1"), fsp("payee"), None, late),
            Ok(fsp("payer"))
        );
    }

    #[test]
    fn asking_again_and_again_does_not_grow_the_sweep_queue_nor_leak() {
        let answers = Answers::new(Duration::from_secs(60), 10_000);
        let start = Instant::now();
        let key = party("555");
        for i in 0..10_000u64 {
            let at = start + Duration::from_millis(i * 10);
            answers.ask(&key, fsp("payer"), fsp("payee"), at).unwrap();
            // The addressee's answer (and its repeats) too.
            let _ = answers.answer(&key, fsp("payee"), None, at);
        }
        let queued = |answers: &Answers| -> usize {
            answers
                .shards
                .iter()
                .map(|shard| shard.lock().unwrap().due.len())
                .sum()
        };
        assert!(queued(&answers) <= 3, "{}", queued(&answers));
        assert_eq!(answers.len(), 1);
        // Last asked at +99.99 s and answered then: accepted until the
        // grace ends, and gone from memory once a sweep passes that.
        let last = start + Duration::from_millis(99_990);
        assert_eq!(
            answers.answer(&key, fsp("payee"), None, last + ANSWERED_GRACE / 2),
            Ok(fsp("payer"))
        );
        let later = last + Duration::from_secs(61);
        for i in 0..400 {
            answers
                .ask(&party(&format!("other{i}")), fsp("a"), fsp("b"), later)
                .unwrap();
        }
        assert_eq!(answers.len(), 400, "the renewed question was swept");
    }

    #[test]
    fn one_requester_holds_at_most_a_quarter_and_others_still_ask() {
        let answers = Answers::new(Duration::from_secs(60), SHARDS * 8);
        let now = Instant::now();
        let mut held = 0;
        for i in 0..1_000 {
            if answers
                .ask(
                    &party(&format!("m{i}")),
                    fsp("mallory"),
                    fsp("mallory"),
                    now,
                )
                .is_ok()
            {
                held += 1;
            }
        }
        assert!(held <= SHARDS * 2, "{held}");
        // An honest requester still gets a question into every shard.
        for shard in 0..SHARDS {
            let key = (0..)
                .map(|i| party(&format!("h{i}")))
                .find(|key| (answers.hasher.hash_one(key) as usize) % SHARDS == shard)
                .unwrap();
            answers.ask(&key, fsp("payer"), fsp("payee"), now).unwrap();
        }
    }

    #[test]
    fn a_failed_delivery_withdraws_only_its_own_unanswered_asking() {
        let answers = Answers::new(Duration::from_secs(60), 1_000);
        let key = Key::new(Resource::Quotes, "q1".to_string());
        let now = Instant::now();
        let first = answers.ask(&key, fsp("payer"), fsp("payee"), now).unwrap();
        // Asked again (a resend) before the first attempt gave up: the
        // first's failure leaves the renewed question alone.
        let later = now + Duration::from_secs(15);
        let second = answers
            .ask(&key, fsp("payer"), fsp("payee"), later)
            .unwrap();
        assert!(!answers.withdraw_undelivered(&key, fsp("payer"), fsp("payee"), first));
        assert_eq!(answers.len(), 1);
        // Answered, then its delivery is reported failed (an earlier
        // attempt arrived): the answer stands, nobody is told.
        assert_eq!(
            answers.answer(&key, fsp("payee"), None, later),
            Ok(fsp("payer"))
        );
        assert!(!answers.withdraw_undelivered(&key, fsp("payer"), fsp("payee"), second));
        // Asked again and not answered: its own failure withdraws it.
        let third = answers
            .ask(
                &key,
                fsp("payer"),
                fsp("payee"),
                later + Duration::from_secs(1),
            )
            .unwrap();
        assert!(answers.withdraw_undelivered(&key, fsp("payer"), fsp("payee"), third));
        assert_eq!(answers.len(), 0);
        assert!(!answers.withdraw_undelivered(&key, fsp("payer"), fsp("payee"), third));
    }

    #[test]
    fn withdrawn_questions_leave_no_trail() {
        let answers = Answers::new(Duration::from_secs(60), 1_000);
        let now = Instant::now();
        for i in 0..10_000 {
            let key = Key::new(Resource::Quotes, format!("q{i}"));
            answers
                .ask(&key, fsp("mallory"), fsp("nosuchfsp"), now)
                .unwrap();
            answers.withdraw(&key, fsp("mallory"), fsp("nosuchfsp"));
        }
        assert_eq!(answers.len(), 0);
        let queued: usize = answers
            .shards
            .iter()
            .map(|shard| shard.lock().unwrap().due.len())
            .sum();
        assert!(queued <= SHARDS * 66, "{queued}");
    }

    #[test]
    fn an_answered_question_leaves_at_its_grace_even_behind_later_ones() {
        let answers = Answers::new(Duration::from_secs(60), 10_000);
        let start = Instant::now();
        // Questions asked later than the answered one, still pending.
        for i in 0..400 {
            answers
                .ask(&party(&format!("p{i}")), fsp("a"), fsp("b"), start)
                .unwrap();
        }
        let key = party("answered");
        let later = start + Duration::from_secs(1);
        answers
            .ask(&key, fsp("payer"), fsp("payee"), later)
            .unwrap();
        answers.answer(&key, fsp("payee"), None, later).unwrap();
        assert_eq!(answers.len(), 401);
        // Past its grace (long before the others' window ends), the next
        // questions in every shard sweep it away.
        let after = later + ANSWERED_GRACE + Duration::from_secs(1);
        for i in 0..400 {
            answers
                .ask(&party(&format!("n{i}")), fsp("a"), fsp("b"), after)
                .unwrap();
        }
        assert_eq!(answers.len(), 800);
    }

    #[test]
    fn a_full_table_refuses_new_questions_and_keeps_the_old() {
        let answers = Answers::new(Duration::from_secs(60), SHARDS * 2);
        let now = Instant::now();
        let mut refused = 0;
        let mut asked = Vec::new();
        for i in 0..SHARDS * 10 {
            let key = party(&i.to_string());
            match answers.ask(&key, fsp("payer"), fsp("payee"), now) {
                Ok(_) => asked.push(key),
                Err(AskError::Full) => refused += 1,
            }
        }
        assert!(answers.len() <= SHARDS * 2);
        assert_eq!(asked.len() + refused, SHARDS * 10);
        assert!(refused >= SHARDS * 8);
        for key in &asked {
            assert_eq!(
                answers.answer(key, fsp("payee"), Some(fsp("payer")), now),
                Ok(fsp("payer"))
            );
        }
    }

    #[test]
    fn two_requesters_of_one_party_each_get_theirs() {
        let answers = Answers::new(Duration::from_secs(60), 100);
        let now = Instant::now();
        let key = party("777");
        answers.ask(&key, fsp("a"), fsp("payee"), now).unwrap();
        answers
            .ask(&key, fsp("b"), fsp("payee"), now + Duration::from_secs(1))
            .unwrap();
        assert_eq!(
            answers.answer(&key, fsp("payee"), Some(fsp("a")), now),
            Ok(fsp("a"))
        );
        // Without a destination: the latest requester.
        assert_eq!(
            answers.answer(&key, fsp("payee"), None, now + Duration::from_secs(2)),
            Ok(fsp("b"))
        );
        answers.withdraw(&key, fsp("a"), fsp("payee"));
        assert_eq!(
            answers.answer(&key, fsp("payee"), Some(fsp("a")), now),
            Err(Refusal::NotTheRequester)
        );
    }
}
