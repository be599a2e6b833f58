//! Reading the PostgreSQL store's rows back into the ledger's types: column
//! access that turns every surprise (a NULL, a wrong length, text kasi did
//! not write) into a [`StoreError`] naming the column, never a panic.

use ledger::{
    AbortCause, AccountId, Amount, Condition, Currency, ErrorCode, FinishKind, FinishRow,
    Fulfilment, FundsMemo, ParticipantId, QuoteAnswer, QuoteRow, RequestHash, TransferId,
    TransferKind, TransferRow, TransferState,
};
use postgres::types::FromSql;
use postgres::Row;

use crate::StoreError;

/// Column `index`, as `T`.
pub(crate) fn col<'a, T: FromSql<'a>>(row: &'a Row, index: usize) -> Result<T, StoreError> {
    row.try_get(index).map_err(|error| {
        StoreError::fatal(format!(
            "postgres: column {} of a row: {error}",
            row.columns()
                .get(index)
                .map(|c| c.name().to_string())
                .unwrap_or_else(|| index.to_string())
        ))
    })
}

/// A text column parsed by `parse`.
pub(crate) fn parsed<T>(
    row: &Row,
    index: usize,
    what: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, StoreError> {
    let text: &str = col(row, index)?;
    parse(text).ok_or_else(|| StoreError::fatal(format!("bad {what} {text:?} in the store")))
}

/// A nullable text column parsed by `parse`.
pub(crate) fn parsed_opt<T>(
    row: &Row,
    index: usize,
    what: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Option<T>, StoreError> {
    match col::<Option<&str>>(row, index)? {
        None => Ok(None),
        Some(text) => parse(text)
            .map(Some)
            .ok_or_else(|| StoreError::fatal(format!("bad {what} {text:?} in the store"))),
    }
}

pub(crate) fn amount(row: &Row, index: usize, what: &str) -> Result<Amount, StoreError> {
    parsed(row, index, what, |t| Amount::parse_signed(t).ok())
}

pub(crate) fn currency(row: &Row, index: usize) -> Result<Currency, StoreError> {
    parsed(row, index, "currency", Currency::parse)
}

/// A BIGINT column that holds one of the ledger's narrower numbers.
pub(crate) fn narrow<T: TryFrom<i64>>(row: &Row, index: usize) -> Result<T, StoreError> {
    let wide: i64 = col(row, index)?;
    T::try_from(wide).map_err(|_| {
        StoreError::fatal(format!(
            "column {index} holds {wide}, out of range for its type"
        ))
    })
}

pub(crate) fn narrow_opt<T: TryFrom<i64>>(
    row: &Row,
    index: usize,
) -> Result<Option<T>, StoreError> {
    match col::<Option<i64>>(row, index)? {
        None => Ok(None),
        Some(_) => narrow(row, index).map(Some),
    }
}

pub(crate) fn participant(row: &Row, index: usize) -> Result<ParticipantId, StoreError> {
    narrow(row, index).map(ParticipantId)
}

pub(crate) fn account(row: &Row, index: usize) -> Result<AccountId, StoreError> {
    narrow(row, index).map(AccountId)
}

pub(crate) fn reason(row: &Row, index: usize) -> Result<Option<ErrorCode>, StoreError> {
    match col::<Option<i32>>(row, index)? {
        None => Ok(None),
        Some(code) => u16::try_from(code)
            .map(|code| Some(ErrorCode(code)))
            .map_err(|_| StoreError::fatal(format!("bad error code {code} in the store"))),
    }
}

/// A BYTEA column of exactly `N` bytes.
pub(crate) fn fixed<const N: usize>(row: &Row, index: usize) -> Result<[u8; N], StoreError> {
    let bytes: &[u8] = col(row, index)?;
    bytes.try_into().map_err(|_| {
        StoreError::fatal(format!(
            "column {index} holds {} bytes, not {N}",
            bytes.len()
        ))
    })
}

/// A [`TransferId`] column: 16 bytes for a UUID, 17 for a ULID.
pub(crate) fn id(row: &Row, index: usize) -> Result<TransferId, StoreError> {
    let bytes: &[u8] = col(row, index)?;
    TransferId::from_blob(bytes).ok_or_else(|| {
        StoreError::fatal(format!(
            "column {index} holds {} bytes, not an id",
            bytes.len()
        ))
    })
}

/// The `transfers` columns in table order, as selected by [`TRANSFER_COLUMNS`].
pub(crate) const TRANSFER_COLUMNS: &str = "t.seq, t.transfer_id, t.kind, t.debit_account_id,
    t.credit_account_id, t.amount, t.condition, t.expiration_ms, t.prepared_at_ms, t.request_hash,
    t.state, t.reason, t.external_reference, t.memo, t.wire_version";

/// The `transfer_finishes` columns in table order (of a database at the
/// current schema version: see [`finish_columns`]).
pub(crate) const FINISH_COLUMNS: &str = "f.seq, f.kind, f.state, f.reason, f.finished_at_ms,
    f.request_hash, f.fulfilment, f.settlement_window, f.cause";

/// [`FINISH_COLUMNS`] for a database at schema `version`: before
/// migration 4, `cause` reads as that migration fills it in, so that a
/// database read as it is (`kasi audit`) says what it would once migrated.
pub(crate) fn finish_columns(version: i64) -> std::borrow::Cow<'static, str> {
    match version >= 4 {
        true => FINISH_COLUMNS.into(),
        false => "f.seq, f.kind, f.state, f.reason, f.finished_at_ms,
            f.request_hash, f.fulfilment, f.settlement_window,
            CASE WHEN f.kind = 'FULFIL' AND f.state = 'ABORTED' AND f.reason = 3100
                THEN 'INVALID_FULFILMENT' END"
            .into(),
    }
}

pub(crate) fn transfer_row(row: &Row) -> Result<TransferRow, StoreError> {
    let external_reference: Option<String> = col(row, 12)?;
    let memo_reason: Option<String> = col(row, 13)?;
    let memo = match (external_reference, memo_reason) {
        (None, None) => None,
        (external_reference, reason) => Some(Box::new(FundsMemo {
            external_reference: external_reference.unwrap_or_default(),
            reason: reason.unwrap_or_default(),
        })),
    };
    Ok(TransferRow {
        seq: narrow(row, 0)?,
        transfer_id: id(row, 1)?,
        kind: parsed(row, 2, "transfer kind", TransferKind::parse)?,
        debit: account(row, 3)?,
        credit: account(row, 4)?,
        amount: amount(row, 5, "amount")?,
        condition: match col::<Option<&[u8]>>(row, 6)? {
            None => Condition::default(),
            Some(_) => Condition(fixed(row, 6)?),
        },
        expiration_ms: col::<Option<i64>>(row, 7)?.unwrap_or(i64::MAX),
        prepared_at_ms: col(row, 8)?,
        request_hash: RequestHash(fixed(row, 9)?),
        state: parsed(row, 10, "transfer state", TransferState::parse)?,
        reason: reason(row, 11)?,
        memo,
        wire_version: {
            let version: i32 = col(row, 14)?;
            u8::try_from(version).map_err(|_| {
                StoreError::fatal(format!("bad wire version {version} in the store"))
            })?
        },
        fx: None,
    })
}

/// A `transfer_finishes` row from its columns starting at `at`; `None`
/// when they are NULL (a LEFT JOIN without a finish).
pub(crate) fn finish_row(row: &Row, at: usize) -> Result<Option<FinishRow>, StoreError> {
    if col::<Option<i64>>(row, at)?.is_none() {
        return Ok(None);
    }
    Ok(Some(FinishRow {
        seq: narrow(row, at)?,
        kind: parsed(row, at + 1, "finish kind", FinishKind::parse)?,
        state: parsed(row, at + 2, "transfer state", TransferState::parse)?,
        reason: reason(row, at + 3)?,
        finished_at_ms: col(row, at + 4)?,
        request_hash: RequestHash(fixed(row, at + 5)?),
        fulfilment: match col::<Option<&[u8]>>(row, at + 6)? {
            None => None,
            Some(_) => Some(Fulfilment::from_preimage(fixed(row, at + 6)?)),
        },
        settlement_window: narrow_opt(row, at + 7)?,
        cause: parsed_opt(row, at + 8, "abort cause", AbortCause::parse)?,
    }))
}

/// The `quotes` columns in table order.
pub(crate) const QUOTE_COLUMNS: &str = "quote_id, payer_id, payee_id, request_hash, received_at_ms,
    answer_hash, answer_is_error, answer_body, answered_at_ms";

pub(crate) fn quote_row(row: &Row) -> Result<QuoteRow, StoreError> {
    let answer = match col::<Option<&[u8]>>(row, 5)? {
        None => None,
        Some(_) => Some(QuoteAnswer {
            request_hash: RequestHash(fixed(row, 5)?),
            is_error: col::<Option<bool>>(row, 6)?.unwrap_or(false),
            body: col::<Option<String>>(row, 7)?.unwrap_or_default(),
            answered_at_ms: col::<Option<i64>>(row, 8)?.unwrap_or(0),
        }),
    };
    Ok(QuoteRow {
        quote_id: id(row, 0)?,
        payer: participant(row, 1)?,
        payee: participant(row, 2)?,
        request_hash: RequestHash(fixed(row, 3)?),
        received_at_ms: col(row, 4)?,
        answer,
    })
}
