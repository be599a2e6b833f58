//! Quotes in persistent mode: recording a quote request and its answer.

use crate::crypto::RequestHash;
use crate::error::{ErrorCode, Rejection};
use crate::ids::{FspName, TransferId};
use crate::ledger::{validation, Ledger};
use crate::model::*;

impl Ledger {
    /// A recorded quote: memory's, or the store's copy of one that left it
    /// (`prefetch.rs`), so that one set of rules answers for both.
    fn quote(&self, quote_id: TransferId) -> Result<Option<QuoteRow>, Rejection> {
        match self.quotes.get(&quote_id) {
            Some(row) => Ok(Some(row.clone())),
            None => Ok(self.stored_quote(quote_id)?.cloned()),
        }
    }

    fn quote_view(&self, row: &QuoteRow) -> QuoteView {
        QuoteView {
            quote_id: row.quote_id,
            payer: self.participant(row.payer).name,
            payee: self.participant(row.payee).name,
            answer: row.answer.clone(),
        }
    }

    pub(crate) fn record_quote(
        &mut self,
        quote_id: TransferId,
        payer: FspName,
        payee: FspName,
        request_hash: RequestHash,
    ) -> Result<Outcome, Rejection> {
        if let Some(existing) = self.quote(quote_id)? {
            if existing.request_hash == request_hash {
                return Ok(Outcome::QuoteDuplicate(self.quote_view(&existing)));
            }
            return Err(Rejection::new(
                ErrorCode::MODIFIED_REQUEST,
                format!("quote {quote_id} was received before with a different body"),
            ));
        }
        // With a retention horizon the oldest quotes leave memory instead
        // (the pipeline reads ids the ledger does not hold: `prefetch.rs`).
        if self.limits.transfer_retention_ms.is_none()
            && self.quotes.len() >= self.limits.max_quotes
        {
            return Err(Rejection::new(
                ErrorCode::INTERNAL_SERVER_ERROR,
                format!(
                    "the ledger holds its limit of {} quotes",
                    self.limits.max_quotes
                ),
            ));
        }
        let known = |name: FspName| self.participant_by_name.get(&name).copied();
        let (Some(payer), Some(payee)) = (known(payer), known(payee)) else {
            return Err(Rejection::new(
                ErrorCode(3201),
                "Destination FSP Error - payer or payee is not a participant",
            ));
        };
        let row = QuoteRow {
            quote_id,
            payer,
            payee,
            request_hash,
            received_at_ms: self.now_ms,
            answer: None,
        };
        self.records.push(Record::Quote(row.clone()));
        self.quotes.insert(quote_id, row);
        if self.limits.transfer_retention_ms.is_some() {
            self.retention.quote_recorded(self.now_ms, quote_id);
        }
        Ok(Outcome::Done)
    }

    pub(crate) fn answer_quote(
        &mut self,
        quote_id: TransferId,
        caller: FspName,
        is_error: bool,
        body: &str,
        request_hash: RequestHash,
    ) -> Result<Outcome, Rejection> {
        let mut row = self.quote(quote_id)?.ok_or_else(|| {
            Rejection::new(
                ErrorCode(3205),
                format!("Quote ID not found - quote {quote_id}"),
            )
        })?;
        if self.participant(row.payee).name != caller {
            return Err(validation(format!(
                "'{caller}' is not the payee asked for quote {quote_id}"
            )));
        }
        if let Some(answer) = &row.answer {
            if answer.request_hash == request_hash && answer.is_error == is_error {
                return Ok(Outcome::QuoteDuplicate(self.quote_view(&row)));
            }
            return Err(Rejection::new(
                ErrorCode::MODIFIED_REQUEST,
                format!("quote {quote_id} was answered before with a different body"),
            ));
        }
        if body.len() > QUOTE_ANSWER_MAX_BYTES {
            return Err(validation(format!(
                "a quote answer may hold at most {QUOTE_ANSWER_MAX_BYTES} bytes"
            )));
        }
        let answer = QuoteAnswer {
            request_hash,
            is_error,
            body: body.to_string(),
            answered_at_ms: self.now_ms,
        };
        row.answer = Some(answer);
        self.records.push(Record::Quote(row.clone()));
        // One answered after it left memory is held again, as newly
        // recorded (its answer is resent on a duplicate request); one
        // held stays until its answer is durable (`retention.rs`).
        match self.quotes.insert(quote_id, row) {
            None => self.retention.quote_recorded(self.now_ms, quote_id),
            Some(_) if self.limits.transfer_retention_ms.is_some() => {
                self.retention.quote_answered(quote_id)
            }
            Some(_) => {}
        }
        Ok(Outcome::Done)
    }
}
