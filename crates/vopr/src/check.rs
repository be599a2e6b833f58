//! Comparing states: snapshots row by row, a partial memory (a retention
//! horizon lets finished transfers and quotes go) against the whole
//! state, and outcomes.

use std::collections::HashMap;
use std::fmt::Debug;

use ledger::{Command, Outcome, Snapshot, TransferId, TransferState};

/// Rows whose order the ledger and the stores need not agree on, in one
/// order.
pub fn normalize(snapshot: &mut Snapshot) {
    snapshot
        .content_accounts
        .sort_by_key(|row| (row.content, row.account));
    snapshot
        .content_pairs
        .sort_by_key(|row| (row.content, row.payer, row.payee));
    for settlement in &mut snapshot.settlements {
        settlement.accounts.sort_by_key(|row| row.account);
    }
}

/// The first difference between two lists of rows, if any.
fn rows<T: PartialEq + Debug>(what: &str, left: &[T], right: &[T]) -> Option<String> {
    if left == right {
        return None;
    }
    let at = left
        .iter()
        .zip(right)
        .position(|(l, r)| l != r)
        .unwrap_or(left.len().min(right.len()));
    Some(format!(
        "{what} differ at row {at} ({} vs {} rows):\n  {:?}\n  {:?}",
        left.len(),
        right.len(),
        left.get(at),
        right.get(at)
    ))
}

/// Everything but transfers, finishes and quotes (which a partial memory
/// may lack): the first difference.
fn reference_difference(left: &Snapshot, right: &Snapshot) -> Option<String> {
    None.or_else(|| rows("participants", &left.participants, &right.participants))
        .or_else(|| rows("accounts", &left.accounts, &right.accounts))
        .or_else(|| rows("endpoints", &left.endpoints, &right.endpoints))
        .or_else(|| {
            rows(
                "settlement models",
                &left.settlement_models,
                &right.settlement_models,
            )
        })
        .or_else(|| rows("parties", &left.parties, &right.parties))
        .or_else(|| rows("oracles", &left.oracles, &right.oracles))
        .or_else(|| rows("proxy map", &left.proxy_map, &right.proxy_map))
        .or_else(|| rows("windows", &left.windows, &right.windows))
        .or_else(|| rows("window content", &left.content, &right.content))
        .or_else(|| {
            rows(
                "content accounts",
                &left.content_accounts,
                &right.content_accounts,
            )
        })
        .or_else(|| rows("content pairs", &left.content_pairs, &right.content_pairs))
        .or_else(|| rows("settlements", &left.settlements, &right.settlements))
        .or_else(|| rows("settlement entries", &left.entries, &right.entries))
        .or_else(|| rows("audit events", &left.audit_events, &right.audit_events))
        .or_else(|| {
            rows(
                "certificate pins",
                &left.certificate_pins,
                &right.certificate_pins,
            )
        })
        .or_else(|| rows("FXPs", &left.fxps, &right.fxps))
        .or_else(|| {
            rows(
                "pending changes",
                &left.pending_changes,
                &right.pending_changes,
            )
        })
}

/// The first difference between two whole states (`archived` aside).
pub fn difference(left: &Snapshot, right: &Snapshot) -> Option<String> {
    reference_difference(left, right)
        .or_else(|| rows("transfers", &left.transfers, &right.transfers))
        .or_else(|| rows("finishes", &left.finishes, &right.finishes))
        .or_else(|| rows("quotes", &left.quotes, &right.quotes))
        .or_else(|| {
            rows(
                "conversion acceptances",
                &left.conversion_fulfils,
                &right.conversion_fulfils,
            )
        })
}

/// How a partial memory must relate to the whole state.
pub struct Partial {
    /// Finished FSPIOP transfers and quotes may be missing.
    pub partial: bool,
    /// Those finished (received) at or after this instant must be there
    /// (what recovery with a retention horizon loads).
    pub loaded_from_ms: Option<i64>,
}

/// The first way `memory` is not the whole state `whole` as a ledger with
/// (or without) a retention horizon holds it.
pub fn memory_difference(memory: &Snapshot, whole: &Snapshot, how: Partial) -> Option<String> {
    if !how.partial {
        return difference(memory, whole);
    }
    if let Some(problem) = reference_difference(memory, whole) {
        return Some(problem);
    }
    let transfers: HashMap<u64, _> = whole.transfers.iter().map(|t| (t.seq, t)).collect();
    let finishes: HashMap<u64, _> = whole.finishes.iter().map(|f| (f.seq, f)).collect();
    for row in &memory.transfers {
        if transfers.get(&row.seq) != Some(&row) {
            return Some(format!(
                "memory holds transfer {row:?}; the whole state has {:?}",
                transfers.get(&row.seq)
            ));
        }
    }
    for row in &memory.finishes {
        if finishes.get(&row.seq) != Some(&row) {
            return Some(format!(
                "memory holds finish {row:?}; the whole state has {:?}",
                finishes.get(&row.seq)
            ));
        }
    }
    let accepted: HashMap<u64, _> = whole
        .conversion_fulfils
        .iter()
        .map(|f| (f.seq, f))
        .collect();
    for row in &memory.conversion_fulfils {
        if accepted.get(&row.seq) != Some(&row) {
            return Some(format!(
                "memory holds the acceptance {row:?}; the whole state has {:?}",
                accepted.get(&row.seq)
            ));
        }
    }
    let held_accepted: HashMap<u64, _> = memory
        .conversion_fulfils
        .iter()
        .map(|c| (c.seq, c))
        .collect();
    let held: HashMap<u64, _> = memory.transfers.iter().map(|t| (t.seq, t)).collect();
    let held_finishes: HashMap<u64, _> = memory.finishes.iter().map(|f| (f.seq, f)).collect();
    for row in &whole.transfers {
        let finish = finishes.get(&row.seq);
        let finished_at_ms = match finish {
            Some(finish) => Some(finish.finished_at_ms),
            None => row.state.is_final().then_some(row.prepared_at_ms),
        };
        let must = !row.kind.is_between_positions()
            || finished_at_ms.is_none()
            || how
                .loaded_from_ms
                .zip(finished_at_ms)
                .is_some_and(|(from, at)| at >= from);
        if must && !held.contains_key(&row.seq) {
            return Some(format!(
                "memory lacks transfer {} (seq {}, {:?}, finished at {finished_at_ms:?})",
                row.transfer_id, row.seq, row.kind
            ));
        }
        if must && finish.is_some() && !held_finishes.contains_key(&row.seq) {
            return Some(format!("memory lacks the finish of seq {}", row.seq));
        }
        let acceptance = accepted.contains_key(&row.seq);
        if held.contains_key(&row.seq) && acceptance && !held_accepted.contains_key(&row.seq) {
            return Some(format!(
                "memory holds conversion seq {} without its acceptance",
                row.seq
            ));
        }
        if row.state == TransferState::Reserved && finish.is_none() && !held.contains_key(&row.seq)
        {
            return Some(format!(
                "memory lacks reserved transfer {}",
                row.transfer_id
            ));
        }
    }
    let quotes: HashMap<TransferId, _> = whole.quotes.iter().map(|q| (q.quote_id, q)).collect();
    for row in &memory.quotes {
        if quotes.get(&row.quote_id) != Some(&row) {
            return Some(format!(
                "memory holds quote {row:?}; the whole state has {:?}",
                quotes.get(&row.quote_id)
            ));
        }
    }
    let held_quotes: HashMap<TransferId, _> =
        memory.quotes.iter().map(|q| (q.quote_id, q)).collect();
    if let Some(from) = how.loaded_from_ms {
        for row in &whole.quotes {
            if row.received_at_ms >= from && !held_quotes.contains_key(&row.quote_id) {
                return Some(format!("memory lacks quote {}", row.quote_id));
            }
        }
    }
    None
}

/// An outcome as a ledger holding everything would give it: a transfer
/// read back from the store is shown as a transfer.
pub fn as_whole(outcome: &Outcome) -> Outcome {
    match outcome {
        Outcome::StoredTransfer(view) => Outcome::Transfer(*view),
        other => other.clone(),
    }
}

/// The transfer and quote ids a command makes the pipeline read from the
/// store (as the ledger's `prefetch.rs` collects them).
pub fn ids_named(command: &Command, into: &mut Vec<TransferId>) {
    match command {
        Command::Prepare(prepare) => into.push(prepare.transfer_id),
        Command::Fulfil(fulfil) => into.push(fulfil.transfer_id),
        Command::Abort(abort) => into.push(abort.transfer_id),
        Command::FundsIn(funds) | Command::FundsOutReserve(funds) => into.push(funds.transfer_id),
        Command::FundsOutCommit(finish) | Command::FundsOutAbort(finish) => {
            into.push(finish.transfer_id)
        }
        Command::GetTransfer { transfer_id, .. } | Command::ReadTransfer { transfer_id } => {
            into.push(*transfer_id)
        }
        Command::RecordQuote { quote_id, .. } | Command::AnswerQuote { quote_id, .. } => {
            into.push(*quote_id)
        }
        Command::PrepareConversion(prepare) => {
            into.push(prepare.commit_request_id);
            into.push(prepare.terms.determining_transfer_id);
        }
        Command::FulfilConversion(fulfil) => into.push(fulfil.commit_request_id),
        Command::AbortConversion(abort) => into.push(abort.transfer_id),
        Command::GetConversion {
            commit_request_id, ..
        } => into.push(*commit_request_id),
        Command::Audited { command, tag } => {
            ids_named(command, into);
            if let Some(view) = tag.view.as_deref() {
                ids_named(view, into);
            }
        }
        _ => {}
    }
}
