//! Bounded memory: finished FSPIOP transfers leave memory after the
//! retention horizon, and their ids are still refused for a grace period.

mod common;

use common::*;
use ledger::*;

const RETENTION: i64 = 10_000;
const GRACE: i64 = 60_000;

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

fn checked(command: Command, evictions_seen: u64) -> Command {
    match command {
        Command::Prepare(prepare) => Command::PrepareChecked {
            prepare,
            evictions_seen,
        },
        other => other,
    }
}

fn looked_up(command: Command, lookup: StoreLookup) -> Command {
    match command {
        Command::Prepare(prepare) => Command::PrepareWithLookup { prepare, lookup },
        other => other,
    }
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
fn finished_transfers_leave_memory_after_the_horizon_and_their_ids_stay_refused() {
    let (mut hub, payer, payee) = two();
    let before = hub.ledger.transfer_count();
    let expiration = hub.now + 5_000;
    view(&hub.one(checked(prepare(1, payer, payee, 100, hub.now + TTL), 0)));
    view(&hub.one(fulfil(1, payee.name)));
    view(&hub.one(prepare(2, payer, payee, 50, expiration)));
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
    // Not before the store has the finishes.
    assert_eq!(hub.ledger.evict(hub.now, 0, usize::MAX), 0);
    // A budget bounds the work of one call.
    assert_eq!(hub.ledger.evict(hub.now, u64::MAX, 1), 1);
    assert_eq!(evict_all(&mut hub), 1);
    assert_eq!(
        hub.ledger.transfer_count(),
        before + 1,
        "the reserved one stays"
    );
    assert_eq!(hub.ledger.transfers_evicted(), 2);
    assert_eq!(hub.ledger.evicted_ids_remembered(), 2);
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
    // An evicted one is unknown to the ledger (the hub asks the store).
    match hub.one(Command::GetTransfer {
        transfer_id: TransferId::new(1),
        caller: payer.name,
    }) {
        Outcome::Rejected(error) => assert_eq!(error.code, ErrorCode::TRANSFER_ID_NOT_FOUND),
        other => panic!("{other:?}"),
    }
    // A resend of an evicted prepare is refused, checked or not, same body
    // or not, and so is a deposit with its id: nothing moves twice.
    for command in [
        prepare(1, payer, payee, 100, hub.now + TTL),
        checked(prepare(2, payer, payee, 50, hub.now + TTL), 2),
        funds_in(TransferId::new(1), payer, whole(5), hash(1)),
    ] {
        hub.assert_rejected(command, ErrorCode::MODIFIED_REQUEST);
    }
    // A check made before both evictions is still good: both ids are
    // remembered.
    view(&hub.one(checked(prepare(4, payer, payee, 1, hub.now + TTL), 0)));

    // After the grace period the ids are forgotten: the store answers, and
    // a check made before they were evicted is no longer trusted.
    hub.advance(GRACE);
    evict_all(&mut hub);
    assert_eq!(hub.ledger.evicted_ids_remembered(), 0);
    assert_eq!(hub.ledger.next_eviction_ms(), None);
    for seen in [0, 1] {
        hub.assert_rejected(
            checked(prepare(5, payer, payee, 1, hub.now + TTL), seen),
            ErrorCode(2003),
        );
    }
    view(&hub.one(checked(prepare(5, payer, payee, 1, hub.now + TTL), 2)));
    // A deposit's id is checked the same way (the hub looks it up in the
    // store first): a check from before the ids were forgotten is refused.
    let deposit = |evictions_seen| {
        let mut funds = funds(TransferId::new(6), payer, whole(1), hash(6));
        funds.evictions_seen = Some(evictions_seen);
        Command::FundsIn(funds)
    };
    hub.assert_rejected(deposit(0), ErrorCode(2003));
    view(&hub.one(deposit(2)));
    hub.ledger.check_balances().expect("balances");
}

/// The pipeline's own lookup (`Command::PrepareWithLookup`): memory
/// decides for an id it holds, the store's answer for one it does not, a
/// missing or failed answer refuses the prepare, and nothing ever moves
/// twice.
#[test]
fn a_prepare_looked_up_by_the_pipeline_follows_memory_then_the_store() {
    let (mut hub, payer, payee) = two();
    let first = prepare(1, payer, payee, 100, hub.now + TTL);
    view(&hub.one(looked_up(first.clone(), StoreLookup::Absent)));
    let committed = view(&hub.one(fulfil(1, payee.name)));
    let balances = (hub.balance(payer.position), hub.balance(payee.position));

    // In memory: memory decides, whatever the lookup said (or did not).
    for lookup in [StoreLookup::Pending, StoreLookup::Absent] {
        let resent = hub.assert_duplicate(looked_up(first.clone(), lookup.clone()));
        assert_eq!(resent.state, TransferState::Committed);
        hub.assert_rejected(
            looked_up(rehashed(first.clone(), hash(99)), lookup),
            ErrorCode::MODIFIED_REQUEST,
        );
    }

    hub.advance(RETENTION);
    assert_eq!(evict_all(&mut hub), 1);
    assert!(!hub.ledger.holds_transfer(TransferId::new(1)));
    let stored = || {
        StoreLookup::Found(Box::new(StoredPrepare {
            view: committed,
            request_hash: hash(1),
        }))
    };
    // Found in the store: the duplicate rule against its copy.
    let resent = hub.assert_duplicate(looked_up(first.clone(), stored()));
    assert_eq!(resent, committed);
    hub.assert_rejected(
        looked_up(rehashed(first.clone(), hash(99)), stored()),
        ErrorCode::MODIFIED_REQUEST,
    );
    // Not looked up, or the lookup failed: refused, never taken as new.
    hub.assert_rejected(
        looked_up(first.clone(), StoreLookup::Pending),
        ErrorCode::INTERNAL_SERVER_ERROR,
    );
    let refused = hub.assert_rejected(
        looked_up(first.clone(), StoreLookup::Failed),
        ErrorCode::SERVICE_UNAVAILABLE,
    );
    assert!(refused.description.contains("retry"), "{refused:?}");
    // An answer that contradicts the ledger's own memory of evictions is
    // not trusted: the id is still remembered as evicted.
    hub.assert_rejected(
        looked_up(first.clone(), StoreLookup::Absent),
        ErrorCode::MODIFIED_REQUEST,
    );
    assert_eq!(
        (hub.balance(payer.position), hub.balance(payee.position)),
        balances,
        "nothing moved twice"
    );

    // Within one batch the second of two prepares with one id meets the
    // first in memory, though both were looked up before the batch.
    let second = prepare(2, payer, payee, 5, hub.now + TTL);
    let outcomes = hub.apply(&[
        looked_up(second.clone(), StoreLookup::Absent),
        looked_up(second, StoreLookup::Absent),
    ]);
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
    // Next: forgetting the evicted ids, after the grace period.
    assert_eq!(hub.ledger.next_eviction_ms(), Some(hub.now + GRACE));
    // The oldest went: 1-3 are asked of the store, 4 and 5 answered here.
    for id in 1..=3 {
        match hub.one(Command::GetTransfer {
            transfer_id: TransferId::new(id),
            caller: payer.name,
        }) {
            Outcome::Rejected(error) => assert_eq!(error.code, ErrorCode::TRANSFER_ID_NOT_FOUND),
            other => panic!("{other:?}"),
        }
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
    // Past the horizon the rest go too.
    hub.advance(RETENTION);
    evict_all(&mut hub);
    assert_eq!(hub.ledger.quote_count(), 0);
}
