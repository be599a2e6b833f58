//! Bounded memory: finished FSPIOP transfers leave memory after the
//! retention horizon, and the ledger answers for them from the store's
//! copy, read before each batch (`prefetch.rs`; the harness's `StoreCopy`
//! plays the store).

mod common;

use common::*;
use ledger::*;

const RETENTION: i64 = 10_000;

fn limits() -> Limits {
    Limits {
        transfer_retention_ms: Some(RETENTION),
        ..Limits::default()
    }
}

/// A USD hub with two DFSPs, restored with a retention horizon.
fn two() -> (Hub, Dfsp, Dfsp) {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 500);
    let payee = hub.dfsp("payeefsp", 1000, 500);
    hub.ledger = Ledger::restore(hub.ledger.snapshot(), limits()).expect("restore");
    (hub, payer, payee)
}

/// `prepare(id, …)` with another request hash: the same id, another body.
fn rehashed(command: Command, request_hash: RequestHash) -> Command {
    match command {
        Command::Prepare(prepare) => Command::Prepare(Prepare {
            request_hash,
            ..prepare
        }),
        other => other,
    }
}

fn evict_all(hub: &mut Hub) -> usize {
    let durable = hub.ledger.batches_applied();
    hub.ledger.evict(hub.now, durable, usize::MAX)
}

#[test]
fn finished_transfers_leave_memory_after_the_horizon_and_the_store_answers_for_them() {
    let (mut hub, payer, payee) = two();
    let before = hub.ledger.transfer_count();
    let expiration = hub.now + 5_000;
    let first = prepare(1, payer, payee, 100, hub.now + TTL);
    view(&hub.one(first.clone()));
    let committed = view(&hub.one(fulfil(1, payee.name)));
    let second = prepare(2, payer, payee, 50, expiration);
    view(&hub.one(second.clone()));
    view(&hub.one(prepare(3, payer, payee, 10, hub.now + 10 * TTL)));
    hub.advance(5_000);
    assert!(matches!(hub.one(Command::Expire), Outcome::Expired(ref v) if v.len() == 1));
    let balances = (hub.balance(payer.position), hub.balance(payee.position));
    assert_eq!(hub.ledger.transfer_count(), before + 3);

    // Within the horizon nothing leaves.
    assert_eq!(evict_all(&mut hub), 0);
    assert_eq!(
        hub.ledger.next_eviction_ms(),
        Some(T0 + RETENTION),
        "the commit is the first to go"
    );
    hub.advance(RETENTION);
    // (Not before the store has the finishes: the next test.)
    // A budget bounds the work of one call.
    assert_eq!(hub.ledger.evict(hub.now, u64::MAX, 1), 1);
    assert_eq!(evict_all(&mut hub), 1);
    assert_eq!(hub.ledger.next_eviction_ms(), None);
    assert_eq!(
        hub.ledger.transfer_count(),
        before + 1,
        "the reserved one stays"
    );
    assert!(!hub.ledger.holds_transfer(TransferId::new(1)));
    assert_eq!(hub.ledger.transfers_evicted(), 2);
    assert_eq!(
        (hub.balance(payer.position), hub.balance(payee.position)),
        balances
    );
    hub.ledger.check_balances().expect("balances");
    // The reserved transfer is untouched.
    assert_eq!(
        hub.state(TransferId::new(3), payer.name),
        TransferState::Reserved
    );

    // An evicted one is answered from the store's copy, as it was in
    // memory, to its parties only.
    let get = |caller: FspName| Command::GetTransfer {
        transfer_id: TransferId::new(1),
        caller,
    };
    assert_eq!(hub.one(get(payer.name)), Outcome::Transfer(committed));
    assert_eq!(hub.one(get(payee.name)), Outcome::Transfer(committed));
    hub.assert_rejected(get(hub.name), ErrorCode::GENERIC_CLIENT_ERROR);
    assert_eq!(
        hub.one(Command::ReadTransfer {
            transfer_id: TransferId::new(1)
        }),
        Outcome::StoredTransfer(committed)
    );
    // A resend of an evicted prepare is a duplicate (its stored state
    // again); a changed one is refused, and so is a deposit with its id:
    // nothing moves twice.
    assert_eq!(hub.assert_duplicate(first.clone()), committed);
    assert_eq!(
        hub.assert_duplicate(second.clone()).state,
        TransferState::Expired
    );
    for command in [
        rehashed(first.clone(), hash(99)),
        funds_in(TransferId::new(1), payer, whole(5), hash(77)),
    ] {
        hub.assert_rejected(command, ErrorCode::MODIFIED_REQUEST);
    }
    // The payee's messages about it: a resent fulfil is a duplicate, a
    // changed one 3106, an abort too late, another FSP not the payee.
    assert_eq!(hub.assert_duplicate(fulfil(1, payee.name)), committed);
    hub.assert_rejected(
        fulfil_with(1, payee.name, secret(1), hash(98)),
        ErrorCode::MODIFIED_REQUEST,
    );
    hub.assert_rejected(
        abort(1, payee.name, 5100, hash(97)),
        ErrorCode::GENERIC_VALIDATION_ERROR,
    );
    hub.assert_rejected(
        abort(2, payee.name, 5100, hash(96)),
        ErrorCode::TRANSFER_EXPIRED,
    );
    hub.assert_rejected(fulfil(1, payer.name), ErrorCode::GENERIC_VALIDATION_ERROR);
    // A funds out commit naming it: not a funds movement.
    hub.assert_rejected(
        Command::FundsOutCommit(funds_finish(TransferId::new(1), payer, hash(5))),
        ErrorCode::GENERIC_VALIDATION_ERROR,
    );
    // A row the store cannot read decides nothing: 2003, retry.
    hub.store.unreadable.insert(TransferId::new(1));
    let refused = hub.assert_rejected(first.clone(), ErrorCode::SERVICE_UNAVAILABLE);
    assert!(refused.description.contains("retry"), "{refused:?}");
    hub.assert_rejected(get(payer.name), ErrorCode::SERVICE_UNAVAILABLE);
    hub.store.unreadable.clear();
    // A fresh id is new.
    view(&hub.one(prepare(5, payer, payee, 1, hub.now + TTL)));
    view(&hub.one(funds_in(TransferId::new(6), payer, whole(1), hash(6))));
    assert_eq!(
        (hub.balance(payer.position), hub.balance(payee.position)),
        (
            (balances.0 .0, balances.0 .1.checked_add(whole(1)).unwrap()),
            balances.1
        ),
        "only the fresh prepare moved a position (it reserved 1)"
    );
    hub.ledger.check_balances().expect("balances");
}

/// A finished transfer leaves only once the batch that finished it is
/// durable: the pipeline's count of committed batches, which only grows (a
/// smaller count than one told before changes nothing).
#[test]
fn a_finish_leaves_memory_only_once_its_batch_is_durable() {
    let (mut hub, payer, payee) = two();
    view(&hub.one(prepare(1, payer, payee, 100, hub.now + TTL)));
    let prepared_in = hub.ledger.batches_applied();
    view(&hub.one(fulfil(1, payee.name)));
    view(&hub.one(prepare(2, payer, payee, 10, hub.now + TTL)));
    let fulfilled_in = prepared_in + 1;
    hub.advance(RETENTION);
    assert_eq!(hub.ledger.evict(hub.now, prepared_in, usize::MAX), 0);
    assert!(hub.ledger.holds_transfer(TransferId::new(1)));
    view(&hub.one(fulfil(2, payee.name)));
    hub.advance(RETENTION);
    assert_eq!(hub.ledger.evict(hub.now, fulfilled_in, usize::MAX), 1);
    assert!(!hub.ledger.holds_transfer(TransferId::new(1)));
    assert!(hub.ledger.holds_transfer(TransferId::new(2)));
    assert_eq!(hub.ledger.evict(hub.now, prepared_in, usize::MAX), 0);
    assert_eq!(evict_all(&mut hub), 1);
    assert!(!hub.ledger.holds_transfer(TransferId::new(2)));
}

/// The rule for an id is memory's when memory holds it, the store's copy's
/// when not; an id the pipeline did not read is refused, never taken as
/// new; two prepares with one fresh id in one batch meet in memory.
#[test]
fn memory_decides_first_then_the_store_and_an_unread_id_is_refused() {
    let (mut hub, payer, payee) = two();
    let first = prepare(1, payer, payee, 100, hub.now + TTL);
    view(&hub.one(first.clone()));
    let reads = hub.store.reads;
    let committed = view(&hub.one(fulfil(1, payee.name)));
    assert_eq!(hub.store.reads, reads, "held in memory: nothing read");
    let resent = hub.assert_duplicate(first.clone());
    assert_eq!(resent.state, TransferState::Committed);

    hub.advance(RETENTION);
    assert_eq!(evict_all(&mut hub), 1);
    // Applied without its read (a pipeline that skipped the prefetch):
    // refused, never taken as new.
    let before = hub.ledger.snapshot();
    let outcome = hub
        .ledger
        .apply_batch(hub.now, std::slice::from_ref(&first));
    assert_eq!(
        outcome.outcomes[0].error_code(),
        Some(ErrorCode::SERVICE_UNAVAILABLE),
        "{:?}",
        outcome.outcomes
    );
    assert!(outcome.records.is_empty());
    assert_eq!(hub.ledger.snapshot(), before);
    assert_eq!(hub.assert_duplicate(first.clone()), committed);

    // Within one batch the second of two prepares with one fresh id meets
    // the first in memory; a fresh id needs no read (it never left).
    let second = prepare(2, payer, payee, 5, hub.now + TTL);
    let reads = hub.store.reads;
    let outcomes = hub.apply(&[second.clone(), second]);
    assert_eq!(hub.store.reads, reads, "a fresh id is not read");
    view(&outcomes[0]);
    assert!(
        matches!(outcomes[1], Outcome::Duplicate(_)),
        "{:?}",
        outcomes[1]
    );
    hub.ledger.check_balances().expect("balances");
}

#[test]
fn without_a_horizon_nothing_leaves() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 500);
    let payee = hub.dfsp("payeefsp", 1000, 500);
    view(&hub.one(prepare(1, payer, payee, 100, hub.now + TTL)));
    view(&hub.one(fulfil(1, payee.name)));
    hub.advance(365 * 86_400_000);
    assert_eq!(evict_all(&mut hub), 0);
    assert_eq!(hub.ledger.next_eviction_ms(), None);
    hub.assert_duplicate(prepare(1, payer, payee, 100, T0 + TTL));
}

/// Recovery from a store that archived the old transfers (summed, not
/// loaded) gives the live ledger's state, and the audit still checks the
/// sums.
#[test]
fn a_restore_with_archived_transfers_equals_the_live_state() {
    let (mut hub, payer, payee) = two();
    view(&hub.one(prepare(1, payer, payee, 100, hub.now + TTL)));
    view(&hub.one(fulfil(1, payee.name)));
    hub.advance(RETENTION);
    view(&hub.one(prepare(2, payer, payee, 7, hub.now + TTL)));
    let full = hub.ledger.snapshot();
    evict_all(&mut hub);
    let live = hub.ledger.snapshot();

    // What the store gives with a horizon: transfer 1 summed, not loaded.
    let mut stored = full.clone();
    let at = stored
        .transfers
        .iter()
        .position(|row| row.transfer_id == TransferId::new(1))
        .expect("transfer 1");
    let old = stored.transfers.remove(at);
    stored.finishes.retain(|finish| finish.seq != old.seq);
    stored.archived = Archived {
        transfers: 1,
        values: vec![(old.debit, old.amount), (old.credit, whole(-100))],
        last_seq: old.seq,
        last_at_ms: T0,
        open_window_pairs: vec![WindowPairSum {
            debit: old.debit,
            credit: old.credit,
            amount: old.amount,
            commits: 1,
        }],
    };
    assert_eq!(stored.audit(), Vec::<String>::new());
    let restored = Ledger::restore(stored.clone(), limits()).expect("restore");
    let mut again = restored.snapshot();
    again.archived = Archived::default();
    assert_eq!(again, live);
    assert_eq!(restored.transfer_count(), hub.ledger.transfer_count());

    // Archived sums that do not add up are refused.
    let mut wrong = stored;
    wrong.archived.values[1].1 = whole(-99);
    assert!(!wrong.audit().is_empty());
    assert!(Ledger::restore(wrong, limits()).is_err());
}

/// However long the horizon, at most `max_finished_in_memory` finished
/// transfers stay: the oldest leave first, at once, and reserved ones never.
#[test]
fn a_crowded_ledger_lets_its_oldest_finished_transfers_go_before_the_horizon() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 500);
    let payee = hub.dfsp("payeefsp", 1000, 500);
    let crowded = Limits {
        transfer_retention_ms: Some(365 * 86_400_000),
        max_finished_in_memory: 2,
        ..Limits::default()
    };
    hub.ledger = Ledger::restore(hub.ledger.snapshot(), crowded).expect("restore");
    let before = hub.ledger.transfer_count();
    for id in 1..=5 {
        view(&hub.one(prepare(id, payer, payee, 1, hub.now + TTL)));
        view(&hub.one(fulfil(id, payee.name)));
        hub.advance(1);
    }
    view(&hub.one(prepare(6, payer, payee, 1, hub.now + TTL)));
    assert_eq!(hub.ledger.next_eviction_ms(), Some(hub.now), "due now");
    assert_eq!(evict_all(&mut hub), 3);
    assert_eq!(
        hub.ledger.transfer_count(),
        before + 3,
        "2 finished + 1 reserved"
    );
    assert_eq!(
        hub.ledger.next_eviction_ms(),
        Some(T0 + 3 + 365 * 86_400_000),
        "no longer crowded: 4 leaves at its horizon"
    );
    // The oldest went: 1-3 are read from the store, 4 and 5 answered here.
    for id in 1..=3 {
        assert!(!hub.ledger.holds_transfer(TransferId::new(id)));
        assert_eq!(
            hub.state(TransferId::new(id), payer.name),
            TransferState::Committed
        );
    }
    for id in 4..=6 {
        hub.state(TransferId::new(id), payer.name);
    }
    hub.ledger.check_balances().expect("balances");
}

/// Recorded quotes leave memory like finished transfers: past the horizon,
/// or oldest first beyond `max_quotes` (instead of refusing new ones).
#[test]
fn recorded_quotes_leave_memory_past_the_horizon_or_when_crowded() {
    let mut hub = Hub::usd();
    let payer = hub.dfsp("payerfsp", 1000, 500);
    let payee = hub.dfsp("payeefsp", 1000, 500);
    let limits = Limits {
        transfer_retention_ms: Some(RETENTION),
        max_quotes: 2,
        ..Limits::default()
    };
    hub.ledger = Ledger::restore(hub.ledger.snapshot(), limits).expect("restore");
    let quote = |id: u128| Command::RecordQuote {
        quote_id: TransferId::new(id),
        payer: payer.name,
        payee: payee.name,
        request_hash: hash(id as u8),
    };
    for id in 1..=4 {
        assert_eq!(hub.one(quote(id)), Outcome::Done, "no refusal when crowded");
        hub.advance(1);
    }
    assert_eq!(hub.ledger.quote_count(), 4);
    assert!(
        hub.ledger.next_eviction_ms() < Some(hub.now),
        "crowded: due at once"
    );
    evict_all(&mut hub);
    assert_eq!(hub.ledger.quote_count(), 2);
    assert_eq!(hub.ledger.quotes_evicted(), 2);
    // The newest stay: a resend of one is still a duplicate here.
    assert!(matches!(hub.one(quote(4)), Outcome::QuoteDuplicate(_)));
    // One that left is answered from the store's copy: a resend is a
    // duplicate, a changed one 3106, and its answer is taken once.
    assert!(matches!(hub.one(quote(1)), Outcome::QuoteDuplicate(ref v) if v.answer.is_none()));
    hub.assert_rejected(
        Command::RecordQuote {
            quote_id: TransferId::new(2),
            payer: payer.name,
            payee: payee.name,
            request_hash: hash(99),
        },
        ErrorCode::MODIFIED_REQUEST,
    );
    let answer = |hash_byte: u8| Command::AnswerQuote {
        quote_id: TransferId::new(2),
        caller: payee.name,
        is_error: false,
        body: "{}".into(),
        request_hash: hash(hash_byte),
    };
    assert_eq!(hub.one(answer(50)), Outcome::Done);
    assert!(matches!(hub.one(answer(50)), Outcome::QuoteDuplicate(_)));
    hub.assert_rejected(answer(51), ErrorCode::MODIFIED_REQUEST);
    // Past the horizon the rest go too.
    hub.advance(RETENTION);
    evict_all(&mut hub);
    assert_eq!(hub.ledger.quote_count(), 0);
    // The answer was kept: once gone again, a resend finds it in the store.
    match hub.one(quote(2)) {
        Outcome::QuoteDuplicate(view) => assert!(view.answer.is_some()),
        other => panic!("{other:?}"),
    }
}

/// The filter of ids that left memory: a ledger that saw every departure
/// reads only the ids that may have left (a fresh one needs no read); one
/// restored with transfers it did not load reads every id memory does not
/// hold, as their ids are the store's alone.
#[test]
fn only_ids_that_may_have_left_memory_are_read() {
    let (mut hub, payer, payee) = two();
    let reads = hub.store.reads;
    view(&hub.one(prepare(1, payer, payee, 10, hub.now + TTL)));
    view(&hub.one(fulfil(1, payee.name)));
    view(&hub.one(prepare(2, payer, payee, 10, hub.now + TTL)));
    assert_eq!(
        hub.store.reads, reads,
        "fresh ids, and one in memory: no read"
    );
    hub.advance(RETENTION);
    view(&hub.one(fulfil(2, payee.name)));
    assert_eq!(evict_all(&mut hub), 1, "1 left; 2 finished just now");
    hub.assert_duplicate(prepare(1, payer, payee, 10, T0 + TTL));
    assert_eq!(hub.store.reads, reads + 1, "the id that left is read");
    view(&hub.one(prepare(3, payer, payee, 10, hub.now + TTL)));
    assert_eq!(hub.store.reads, reads + 1, "a fresh id still is not");

    // Restored from a store that summed transfer 1 instead of loading it:
    // the ledger cannot know its id, so every id it does not hold is read.
    let mut stored = hub.ledger.snapshot();
    let row = hub.store.transfers[&TransferId::new(1)].clone();
    let finish = hub.store.finishes[&row.seq].clone();
    stored.archived = Archived {
        transfers: 1,
        values: vec![(row.debit, row.amount), (row.credit, whole(-10))],
        last_seq: stored.transfers.iter().map(|t| t.seq).max().unwrap_or(0),
        last_at_ms: finish.finished_at_ms,
        open_window_pairs: vec![WindowPairSum {
            debit: row.debit,
            credit: row.credit,
            amount: row.amount,
            commits: 1,
        }],
    };
    hub.ledger = Ledger::restore(stored, limits()).expect("restore");
    let reads = hub.store.reads;
    view(&hub.one(prepare(4, payer, payee, 10, hub.now + TTL)));
    assert_eq!(
        hub.store.reads,
        reads + 1,
        "a fresh id is read after such a restore"
    );
    hub.assert_duplicate(prepare(1, payer, payee, 10, T0 + TTL));
}

/// An answer changes a quote memory holds: until the batch that answered
/// it is durable, the store's copy has no answer, so the quote stays (as a
/// finished transfer waits for its finish). Found by the pipeline's
/// simulation (`vopr`, seed 200543, two pipeline threads, retention on):
/// the quote left memory right after its answer was applied, the next
/// batch read the store's copy, not yet answered, and took a second,
/// different answer as the first.
#[test]
fn an_answered_quote_stays_in_memory_until_its_answer_is_durable() {
    let (mut hub, payer, payee) = two();
    let quote_id = TransferId::new(7);
    let recorded = Command::RecordQuote {
        quote_id,
        payer: payer.name,
        payee: payee.name,
        request_hash: hash(1),
    };
    assert_eq!(hub.one(recorded), Outcome::Done);
    let recorded_in = hub.ledger.batches_applied();
    hub.advance(RETENTION);
    let answer = |hash_byte: u8| Command::AnswerQuote {
        quote_id,
        caller: payee.name,
        is_error: false,
        body: "{}".into(),
        request_hash: hash(hash_byte),
    };
    assert_eq!(hub.one(answer(50)), Outcome::Done);
    // Only the recording is durable: the quote stays.
    hub.ledger.evict(hub.now, recorded_in, usize::MAX);
    assert_eq!(
        hub.ledger.quote_count(),
        1,
        "left before its answer was durable"
    );
    hub.assert_rejected(answer(51), ErrorCode::MODIFIED_REQUEST);
    // Once the answer is, it goes, and the store's copy has the answer.
    evict_all(&mut hub);
    assert_eq!(hub.ledger.quote_count(), 0);
    hub.assert_rejected(answer(51), ErrorCode::MODIFIED_REQUEST);
}
