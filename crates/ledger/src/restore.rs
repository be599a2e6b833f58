//! The ledger as rows and back: [`Ledger::snapshot`] for the store and the
//! audit, [`Ledger::restore`] to rebuild it from stored rows.

use std::collections::HashMap;

use crate::amount::Amount;
use crate::ids::{AccountId, ParticipantId};
use crate::ledger::{
    account_row, index, participant_row, Account, Finish, FxSlot, Ledger, Limits, Participant,
    PartyEntry, Transfer,
};
use crate::model::*;
use crate::snapshot::Snapshot;

impl Ledger {
    /// The whole state as rows, in a canonical order: what the store holds
    /// after every batch so far has been committed.
    pub fn snapshot(&self) -> Snapshot {
        let participants = self
            .participants
            .iter()
            .enumerate()
            .map(|(i, p)| participant_row(ParticipantId(i as u32 + 1), p))
            .collect();
        let accounts = self
            .accounts
            .iter()
            .enumerate()
            .map(|(i, a)| account_row(AccountId(i as u32 + 1), a))
            .collect();
        let mut transfers = Vec::with_capacity(self.transfers.len());
        let mut finishes = Vec::new();
        let mut conversion_fulfils = Vec::new();
        for (transfer_id, transfer) in self.transfers.iter() {
            let initial_state = if transfer.finish.is_some() {
                TransferState::Reserved
            } else {
                transfer.state
            };
            transfers.push(TransferRow {
                seq: transfer.seq,
                transfer_id,
                kind: transfer.kind,
                debit: transfer.debit,
                credit: transfer.credit,
                amount: transfer.amount,
                condition: transfer.condition,
                expiration_ms: transfer.expiration_ms,
                prepared_at_ms: transfer.prepared_at_ms,
                request_hash: transfer.request_hash,
                state: initial_state,
                reason: if transfer.finish.is_some() {
                    None
                } else {
                    transfer.reason
                },
                memo: transfer.memo.clone(),
                wire_version: transfer.wire_version,
                fx: transfer.fx.as_ref().map(|slot| slot.link),
            });
            if let Some(row) = transfer
                .fx
                .as_ref()
                .and_then(|slot| slot.fxp_fulfil.clone())
            {
                conversion_fulfils.push(row);
            }
            if let Some(finish) = transfer.finish {
                finishes.push(FinishRow {
                    seq: transfer.seq,
                    kind: finish.kind,
                    state: transfer.state,
                    reason: transfer.reason,
                    cause: finish.cause,
                    finished_at_ms: finish.at_ms,
                    request_hash: finish.request_hash,
                    fulfilment: transfer.fulfilment,
                    settlement_window: finish.settlement_window,
                });
            }
        }
        transfers.sort_unstable_by_key(|row| row.seq);
        finishes.sort_unstable_by_key(|row| row.seq);
        conversion_fulfils.sort_unstable_by_key(|row| row.seq);
        let mut endpoints: Vec<EndpointRow> = self
            .participants
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                p.endpoints
                    .iter()
                    .map(move |(endpoint_type, value)| EndpointRow {
                        participant: ParticipantId(i as u32 + 1),
                        endpoint_type: endpoint_type.clone(),
                        value: value.clone(),
                    })
            })
            .collect();
        endpoints.sort();
        let mut parties: Vec<PartyRow> = self
            .parties
            .iter()
            .map(|(key, entry)| PartyRow {
                key: key.clone(),
                fsp: entry.fsp,
                currency: entry.currency,
                registered_at_ms: entry.registered_at_ms,
            })
            .collect();
        parties.sort_by(|a, b| a.key.cmp(&b.key));
        Snapshot {
            parties,
            oracles: self.oracles.clone(),
            proxy_map: self.proxy_map.values().cloned().collect(),
            quotes: {
                let mut quotes: Vec<QuoteRow> = self.quotes.values().cloned().collect();
                quotes.sort_by_key(|row| row.quote_id);
                quotes
            },
            endpoints,
            settlement_models: self.settlement_models.clone(),
            participants,
            accounts,
            transfers,
            finishes,
            windows: self.book.windows.clone(),
            content: self.book.content.clone(),
            content_accounts: self.book.content_accounts.concat(),
            content_pairs: self.book.content_pairs.concat(),
            settlements: self.book.settlements.clone(),
            entries: self.book.entries.clone(),
            audit_events: self.audit_events.iter().cloned().collect(),
            certificate_pins: self.pin_rows(),
            conversion_fulfils,
            fxps: self
                .fxps
                .iter()
                .map(|(&participant, corridors)| FxpRow {
                    participant,
                    corridors: corridors.clone(),
                })
                .collect(),
            pending_changes: self.pending_changes.values().cloned().collect(),
            // Evicted transfers are the store's to give; a snapshot holds
            // what is in memory.
            archived: Default::default(),
        }
    }

    /// Rebuilds the ledger from stored rows. The rows are audited first; a
    /// store that does not add up is refused rather than served.
    pub fn restore(snapshot: Snapshot, limits: Limits) -> Result<Ledger, String> {
        let problems = snapshot.audit();
        if !problems.is_empty() {
            let shown: Vec<_> = problems.iter().take(10).map(String::as_str).collect();
            return Err(format!(
                "the store does not add up ({} problems; run `kasi audit`): {}",
                problems.len(),
                shown.join("; ")
            ));
        }
        let mut ledger = Ledger::new(limits);
        let mut now_ms = i64::MIN;
        for row in snapshot.participants {
            now_ms = now_ms.max(row.created_at_ms);
            if row.is_hub {
                ledger.hub = Some(row.id);
            }
            ledger.participant_by_name.insert(row.name, row.id);
            ledger.participants.push(Participant {
                name: row.name,
                is_hub: row.is_hub,
                is_proxy: row.is_proxy,
                mode: row.mode,
                created_at_ms: row.created_at_ms,
                accounts: Vec::new(),
                endpoints: Vec::new(),
                dirty: false,
            });
        }
        for row in snapshot.accounts {
            now_ms = now_ms.max(row.created_at_ms).max(row.changed_at_ms);
            ledger.participants[index(row.participant.0)]
                .accounts
                .push(row.id);
            ledger.accounts.push(Account {
                participant: row.participant,
                currency: row.currency,
                kind: row.kind,
                active: row.active,
                value: row.value,
                reserved: row.reserved,
                net_debit_cap: row.net_debit_cap,
                created_at_ms: row.created_at_ms,
                changed_at_ms: row.changed_at_ms,
                dirty: false,
            });
        }
        for endpoint in snapshot.endpoints {
            let participant = &mut ledger.participants[index(endpoint.participant.0)];
            participant
                .endpoints
                .push((endpoint.endpoint_type, endpoint.value));
        }
        ledger.settlement_models = snapshot.settlement_models;
        ledger.oracles = snapshot.oracles;
        for row in snapshot.proxy_map {
            now_ms = now_ms.max(row.since_ms);
            ledger.proxy_map.insert(row.dfsp, row);
        }
        if ledger.limits.transfer_retention_ms.is_some() {
            let quotes = snapshot.quotes.iter();
            ledger.retention.restored_quotes(
                quotes
                    .map(|row| (row.received_at_ms, row.quote_id))
                    .collect(),
            );
        }
        ledger.quotes = snapshot
            .quotes
            .into_iter()
            .map(|row| (row.quote_id, row))
            .collect();
        for row in snapshot.parties {
            let entry = PartyEntry {
                fsp: row.fsp,
                currency: row.currency,
                registered_at_ms: row.registered_at_ms,
            };
            ledger.parties.insert(row.key, entry);
        }
        // Settlement: windows and their frozen content as stored; the open
        // window's running sums from the commits recorded in it.
        let open_window = snapshot
            .windows
            .last()
            .filter(|w| w.state == WindowState::Open)
            .map(|w| w.id);
        // The open window's commits, summed per (payer, payee) pair in the
        // order the pairs first committed (a million pushes and as many
        // window updates were a sixth of a restart's rebuild).
        let mut open_commits = OpenCommits::default();
        ledger.book.windows = snapshot.windows;
        for row in &snapshot.content {
            let of = |content: u32| content == row.id;
            ledger.book.content_accounts.push(
                snapshot
                    .content_accounts
                    .iter()
                    .filter(|a| of(a.content))
                    .cloned()
                    .collect(),
            );
            ledger.book.content_pairs.push(
                snapshot
                    .content_pairs
                    .iter()
                    .filter(|p| of(p.content))
                    .cloned()
                    .collect(),
            );
        }
        ledger.book.content = snapshot.content;
        ledger.book.settlements = snapshot.settlements;
        ledger.book.entries = snapshot.entries;
        if let Some(event) = snapshot.audit_events.last() {
            now_ms = now_ms.max(event.at_ms);
        }
        ledger.restore_audit(snapshot.audit_events, snapshot.certificate_pins);
        for row in snapshot.fxps {
            ledger.fxps.insert(row.participant, row.corridors);
        }
        for row in snapshot.pending_changes {
            ledger.pending_changes.insert(row.id.clone(), row);
        }
        let conversion_fulfils: HashMap<u64, ConversionFulfilRow> = snapshot
            .conversion_fulfils
            .into_iter()
            .map(|row| (row.seq, row))
            .collect();
        let rows = snapshot.transfers;
        let finish_rows = snapshot.finishes;
        // Each row's finish (both lists are in seq order: the audit checked
        // it), and the finished transfers in finishing order, as they are
        // held (`compact.rs`): the order retention evicts them in.
        let mut finish_of = Vec::with_capacity(rows.len());
        let mut finished_order = Vec::new();
        let mut finishes = finish_rows.iter().enumerate().peekable();
        for (i, row) in rows.iter().enumerate() {
            let finish = finishes.next_if(|(_, finish)| finish.seq == row.seq);
            finish_of.push(finish.map(|(at, _)| at));
            let finished_at = match finish {
                Some((_, finish)) => Some(finish.finished_at_ms),
                None => row.state.is_final().then_some(row.prepared_at_ms),
            };
            if let Some(at_ms) = finished_at.filter(|_| row.kind.is_between_positions()) {
                finished_order.push((at_ms, row.transfer_id, i));
            }
        }
        finished_order.sort_unstable();
        ledger
            .transfers
            .reserve(rows.len() - finished_order.len(), finished_order.len());
        let restored = |i: usize| {
            let row: &TransferRow = &rows[i];
            let fxp_fulfil = row
                .fx
                .and_then(|_| conversion_fulfils.get(&row.seq).cloned());
            restored_transfer(row, finish_of[i].map(|at| &finish_rows[at]), fxp_fulfil)
        };
        for (i, row) in rows.iter().enumerate() {
            now_ms = now_ms.max(row.prepared_at_ms);
            if let Some(accepted) = row.fx.and_then(|_| conversion_fulfils.get(&row.seq)) {
                now_ms = now_ms.max(accepted.at_ms);
            }
            if let Some(FxLink::Conversion(terms)) = row.fx {
                ledger
                    .conversions_by_determining
                    .insert(terms.determining_transfer_id, row.transfer_id);
            }
            let finish = finish_of[i].map(|at| &finish_rows[at]);
            if let Some(finish) = finish {
                now_ms = now_ms.max(finish.finished_at_ms);
                if finish.settlement_window.is_some() && finish.settlement_window == open_window {
                    open_commits.add(row.debit, row.credit, row.amount);
                }
            }
            ledger.last_seq = row.seq;
            let finished =
                row.kind.is_between_positions() && (finish.is_some() || row.state.is_final());
            if finished {
                continue;
            }
            let transfer = restored(i);
            if transfer.state == TransferState::Reserved && transfer.kind.is_between_positions() {
                ledger
                    .expiry
                    .insert((transfer.expiration_ms, row.transfer_id));
            }
            ledger.transfers.insert(row.transfer_id, transfer);
        }
        // Restored finishes are durable: batch 0.
        for &(_, transfer_id, i) in &finished_order {
            ledger
                .transfers
                .insert_finished(transfer_id, restored(i), 0);
        }
        let archived = snapshot.archived;
        ledger.last_seq = ledger.last_seq.max(archived.last_seq);
        if archived.transfers > 0 {
            // Their ids are the store's alone: every id memory does not
            // hold is read (`prefetch.rs`).
            ledger.retention.left.incomplete();
            now_ms = now_ms.max(archived.last_at_ms);
        }
        for (debit, credit, amount, commits) in open_commits.pairs {
            ledger.restore_window_commits(debit, credit, amount, commits);
        }
        for pair in archived.open_window_pairs {
            ledger.restore_window_commits(pair.debit, pair.credit, pair.amount, pair.commits);
        }
        for entry in &ledger.book.entries {
            now_ms = now_ms.max(entry.at_ms);
        }
        ledger.now_ms = now_ms;
        if ledger.hub.is_some() {
            ledger.ensure_window(false);
        }
        Ok(ledger)
    }
}

/// A transfer as its rows say: the prepare's, changed by its finish (and,
/// for a conversion, the FXP's acceptance).
fn restored_transfer(
    row: &TransferRow,
    finish: Option<&FinishRow>,
    fxp_fulfil: Option<ConversionFulfilRow>,
) -> Transfer {
    let accepted = fxp_fulfil.as_ref().map(|accepted| accepted.fulfilment);
    Transfer {
        seq: row.seq,
        kind: row.kind,
        debit: row.debit,
        credit: row.credit,
        amount: row.amount,
        condition: row.condition,
        expiration_ms: row.expiration_ms,
        prepared_at_ms: row.prepared_at_ms,
        request_hash: row.request_hash,
        state: finish.map_or(row.state, |finish| finish.state),
        reason: finish.map_or(row.reason, |finish| finish.reason),
        finish: finish.map(|finish| Finish {
            kind: finish.kind,
            request_hash: finish.request_hash,
            at_ms: finish.finished_at_ms,
            settlement_window: finish.settlement_window,
            cause: finish.cause,
        }),
        fulfilment: match finish {
            Some(finish) => finish.fulfilment,
            None => accepted,
        },
        memo: row.memo.clone(),
        wire_version: row.wire_version,
        fx: row.fx.map(|link| Box::new(FxSlot { link, fxp_fulfil })),
    }
}

/// Commits in the open window, summed per (payer, payee) pair for
/// [`Ledger::restore`].
#[derive(Default)]
struct OpenCommits {
    pairs: Vec<(AccountId, AccountId, Amount, u64)>,
    at: HashMap<(AccountId, AccountId), usize>,
}

impl OpenCommits {
    fn add(&mut self, debit: AccountId, credit: AccountId, amount: Amount) {
        let next = self.pairs.len();
        let at = *self.at.entry((debit, credit)).or_insert(next);
        if at == next {
            self.pairs.push((debit, credit, Amount::ZERO, 0));
        }
        let pair = &mut self.pairs[at];
        match pair.2.checked_add(amount) {
            Some(sum) => {
                pair.2 = sum;
                pair.3 += 1;
            }
            // A sum the audit let through but that does not fit: counted
            // on its own (as before the sums).
            None => {
                self.at.insert((debit, credit), self.pairs.len());
                self.pairs.push((debit, credit, amount, 1));
            }
        }
    }
}
