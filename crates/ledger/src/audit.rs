//! Audit events of admin changes, and client certificates pinned to
//! participants.
//!
//! An [`Command::Audited`] change is applied like any other; if it changed
//! something, its event is a record of the same batch, so the store writes
//! both in one transaction: no change is durable without its event. A
//! change the ledger refused is an event too (outcome `REFUSED <code>`,
//! the target unchanged before and after), and so is a request the hub
//! refused before the ledger ([`Command::NoteRefused`]). The
//! HTTP side says who and what; the ledger gives the id and the time (the
//! batch's) and shows the target before and after through the tag's view.

use std::collections::VecDeque;

use crate::error::{ErrorCode, Rejection};
use crate::ids::FspName;
use crate::ledger::Ledger;
use crate::model::*;

/// What a change answered, as its event names it.
fn outcome_label(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Done => "DONE".to_string(),
        Outcome::AccountsCreated(_) => "CREATED".to_string(),
        Outcome::Transfer(view) => view.state.as_str().to_string(),
        Outcome::OracleCreated(id) => format!("CREATED oracle {id}"),
        Outcome::Window(view) => format!("CLOSED; window {} OPEN", view.row.id),
        Outcome::Settlement(view)
        | Outcome::SettlementUpdated {
            settlement: view, ..
        } => {
            format!("settlement {} {}", view.row.id, view.row.state.as_str())
        }
        _ => "DONE".to_string(),
    }
}

/// Longest refusal description an event keeps (the answer had it whole).
const REFUSAL_DESCRIPTION_MAX: usize = 200;

/// Why a change changed nothing, as its event names it (`REFUSED`, the
/// code, the ledger's words); `None` for an outcome that is no refusal (a
/// duplicate: the change it repeats has its event already).
fn refusal_label(outcome: &Outcome) -> Option<String> {
    let (code, description) = match outcome {
        Outcome::Rejected(rejection)
        | Outcome::Failed {
            error: rejection, ..
        } => (
            format!(" {}", rejection.code),
            rejection.description.as_str(),
        ),
        Outcome::SettlementUpdated { results, .. }
            if !results.is_empty() && results.iter().all(|r| r.error.is_some()) =>
        {
            (
                String::new(),
                results[0].error.as_deref().unwrap_or_default(),
            )
        }
        _ => return None,
    };
    let mut cut = description.len().min(REFUSAL_DESCRIPTION_MAX);
    while !description.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(format!("REFUSED{code}: {}", &description[..cut]))
}

/// Whether an outcome is a change (a refusal or a duplicate changes
/// nothing, nor does a settlement update whose every account was refused).
fn changed(outcome: &Outcome) -> bool {
    match outcome {
        Outcome::Rejected(_)
        | Outcome::Failed { .. }
        | Outcome::Duplicate(_)
        | Outcome::QuoteDuplicate(_) => false,
        Outcome::SettlementUpdated { results, .. } => {
            results.iter().any(|result| result.error.is_none())
        }
        _ => true,
    }
}

impl Ledger {
    pub(crate) fn apply_audited(&mut self, command: &Command, tag: &AuditTag) -> Outcome {
        let render = tag.render.0;
        let (outcome, before, after) = match command {
            // The change happened outside the ledger; the caller says what
            // it was.
            Command::NoteExternalChange { before, after } => {
                (Outcome::Done, Some(before.clone()), after.clone())
            }
            // Refused before the ledger (authentication, the role, the
            // request itself): nothing to show before, what was tried
            // after.
            Command::NoteRefused { outcome, detail } => {
                self.record_audit_event(tag, "null".to_string(), detail.clone(), outcome.clone());
                return Outcome::Done;
            }
            _ => {
                let before = tag
                    .view
                    .as_deref()
                    .map(|view| render(&tag.target, &self.apply(view)));
                let outcome = self.apply(command);
                if !changed(&outcome) {
                    // A refused change changed nothing, but an operator
                    // must see that it was tried: its event shows the
                    // target as it stays, and why.
                    if let Some(label) = refusal_label(&outcome) {
                        let unchanged = before.unwrap_or_else(|| "null".to_string());
                        self.record_audit_event(tag, unchanged.clone(), unchanged, label);
                    }
                    return outcome;
                }
                let after = match tag.view.as_deref() {
                    Some(view) => render(&tag.target, &self.apply(view)),
                    None => render(&tag.target, &outcome),
                };
                (outcome, before, after)
            }
        };
        let label = outcome_label(&outcome);
        self.record_audit_event(
            tag,
            before.unwrap_or_else(|| "null".to_string()),
            after,
            label,
        );
        outcome
    }

    /// An event among this batch's records, so durable with the batch.
    fn record_audit_event(
        &mut self,
        tag: &AuditTag,
        before: String,
        after: String,
        outcome: String,
    ) {
        self.last_audit_id += 1;
        let event = AuditEventRow {
            id: self.last_audit_id,
            at_ms: self.now_ms,
            actor: tag.actor.clone(),
            role: tag.role.clone(),
            source: tag.source.clone(),
            action: tag.action.clone(),
            target: tag.target.clone(),
            before,
            after,
            outcome,
        };
        self.push_record(Record::AuditEvent(event.clone()));
        if self.audit_events.len() == AUDIT_EVENTS_IN_MEMORY {
            self.audit_events.pop_front();
        }
        self.audit_events.push_back(event);
    }

    pub(crate) fn read_audit_events(&self, query: &AuditQuery) -> Outcome {
        Outcome::AuditEvents(
            self.audit_events
                .iter()
                .rev()
                .filter(|event| query.matches(event))
                .take(query.limit)
                .cloned()
                .collect(),
        )
    }

    pub(crate) fn restore_audit(&mut self, events: Vec<AuditEventRow>, pins: Vec<PinRow>) {
        self.last_audit_id = events.last().map_or(0, |event| event.id);
        let skip = events.len().saturating_sub(AUDIT_EVENTS_IN_MEMORY);
        self.audit_events = events.into_iter().skip(skip).collect::<VecDeque<_>>();
        for pin in pins {
            self.pins
                .insert(pin.fingerprint, (pin.participant, pin.pinned_at_ms));
        }
    }

    pub(crate) fn pin_certificate(
        &mut self,
        name: FspName,
        fingerprint: [u8; 32],
    ) -> Result<Outcome, Rejection> {
        let id = self.participant_id_of(name)?;
        match self.pins.get(&fingerprint) {
            Some((holder, _)) if *holder == id => {
                return Err(Rejection::new(
                    ErrorCode::GENERIC_VALIDATION_ERROR,
                    format!("the certificate is already pinned to '{name}'"),
                ))
            }
            Some((holder, _)) => {
                return Err(Rejection::new(
                    ErrorCode::GENERIC_VALIDATION_ERROR,
                    format!(
                        "the certificate is pinned to '{}'; unpin it there first",
                        self.participant(*holder).name
                    ),
                ))
            }
            None => {}
        }
        if self
            .pins
            .values()
            .filter(|(holder, _)| *holder == id)
            .count()
            >= PINS_PER_PARTICIPANT_MAX
        {
            return Err(Rejection::new(
                ErrorCode::GENERIC_VALIDATION_ERROR,
                format!("'{name}' has {PINS_PER_PARTICIPANT_MAX} pinned certificates, the most"),
            ));
        }
        self.pins.insert(fingerprint, (id, self.now_ms));
        self.push_record(Record::CertificatePin(PinRow {
            fingerprint,
            participant: id,
            pinned_at_ms: self.now_ms,
        }));
        Ok(Outcome::Done)
    }

    pub(crate) fn unpin_certificate(
        &mut self,
        name: FspName,
        fingerprint: [u8; 32],
    ) -> Result<Outcome, Rejection> {
        let id = self.participant_id_of(name)?;
        match self.pins.get(&fingerprint) {
            Some((holder, _)) if *holder == id => {
                self.pins.remove(&fingerprint);
                self.push_record(Record::CertificateUnpinned(fingerprint));
                Ok(Outcome::Done)
            }
            _ => Err(Rejection::new(
                ErrorCode::ID_NOT_FOUND,
                format!("no such certificate pinned to '{name}'"),
            )),
        }
    }

    pub(crate) fn read_pins(&self) -> Outcome {
        Outcome::CertificatePins(
            self.pins
                .iter()
                .map(|(fingerprint, (holder, at_ms))| PinView {
                    fingerprint: *fingerprint,
                    fsp: self.participant(*holder).name,
                    pinned_at_ms: *at_ms,
                })
                .collect(),
        )
    }

    pub(crate) fn pin_rows(&self) -> Vec<PinRow> {
        self.pins
            .iter()
            .map(|(fingerprint, (participant, at_ms))| PinRow {
                fingerprint: *fingerprint,
                participant: *participant,
                pinned_at_ms: *at_ms,
            })
            .collect()
    }
}
