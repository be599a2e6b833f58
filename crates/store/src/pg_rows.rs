//! Reading the PostgreSQL store's rows back into the ledger's types: column
//! access that turns every surprise (a NULL, a wrong length, text kasi did
//! not write) into a [`StoreError`] naming the column, never a panic.

use ledger::{
    AbortCause, AccountId, Amount, Condition, ConversionFulfilRow, Currency, ErrorCode, FinishKind,
    FinishRow, Fulfilment, FundsMemo, FxLink, ParticipantId, QuoteAnswer, QuoteRow, RequestHash,
    TransferId, TransferKind, TransferRow, TransferState,
};

use crate::pg_schema::FX_SINCE;
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

/// The `transfers` columns in table order, then its `transfer_fx` row's
/// (`x`, the row's seq first), as [`transfer_row`] reads them.
const TRANSFER_COLUMNS: &str = "t.seq, t.transfer_id, t.kind, t.debit_account_id,
    t.credit_account_id, t.amount, t.condition, t.expiration_ms, t.prepared_at_ms, t.request_hash,
    t.state, t.reason, t.external_reference, t.memo, t.wire_version,
    x.seq, x.determining_transfer_id, x.target_currency, x.target_amount, x.commit_request_id,
    x.payer_id";

/// [`TRANSFER_COLUMNS`] for a database at schema `version`: before
/// migration 6 there is no `transfer_fx` (nor any FX transfer).
pub(crate) fn transfer_columns(version: i64) -> std::borrow::Cow<'static, str> {
    match version >= FX_SINCE {
        true => TRANSFER_COLUMNS.into(),
        false => "t.seq, t.transfer_id, t.kind, t.debit_account_id,
            t.credit_account_id, t.amount, t.condition, t.expiration_ms, t.prepared_at_ms,
            t.request_hash, t.state, t.reason, t.external_reference, t.memo, t.wire_version,
            NULL::bigint, NULL::bytea, NULL::text, NULL::text, NULL::bytea, NULL::bigint"
            .into(),
    }
}

/// The `conversion_fulfils` columns (`c`) in table order, as
/// [`conversion_fulfil_row`] reads them (of a database at schema
/// `version`: none before migration 6).
pub(crate) fn fulfil_columns(version: i64) -> &'static str {
    match version >= FX_SINCE {
        true => "c.seq, c.fulfilment, c.request_hash, c.at_ms",
        false => "NULL::bigint, NULL::bytea, NULL::bytea, NULL::bigint",
    }
}

/// The joins that give a transfer `t` its FX row `x` and a conversion its
/// acceptance by the FXP `c` (none before migration 6).
pub(crate) fn fx_joins(version: i64) -> &'static str {
    match version >= FX_SINCE {
        true => " LEFT JOIN transfer_fx x ON x.seq = t.seq LEFT JOIN conversion_fulfils c ON c.seq = t.seq",
        false => "",
    }
}

/// A transfer with its FX row, its finish and its acceptance, as
/// [`transfer_row`], [`finish_row`] at [`FINISH_AT`] and
/// [`conversion_fulfil_row`] at [`FULFIL_AT`] read them, for a database at
/// schema `version`.
pub(crate) fn joined_columns(version: i64) -> String {
    format!(
        "{}, {}, {}",
        transfer_columns(version),
        finish_columns(version),
        fulfil_columns(version)
    )
}

/// Transfers `t` with their finishes `f` and FX rows `x`, `c`.
pub(crate) fn joined_from(version: i64) -> String {
    format!(
        "transfers t LEFT JOIN transfer_finishes f ON f.seq = t.seq{}",
        fx_joins(version)
    )
}

/// Where a row of [`joined_columns`] has the finish (after the transfer's
/// 15 columns and its FX row's 6), and the acceptance (after the finish's 9).
pub(crate) const FINISH_AT: usize = 21;
pub(crate) const FULFIL_AT: usize = 30;

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

/// A `transfers` row with its FX link, from [`transfer_columns`].
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
    let seq = narrow(row, 0)?;
    Ok(TransferRow {
        seq,
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
        fx: fx_link(row, seq, 15)?,
    })
}

/// A transfer's FX link from its `transfer_fx` columns at `at` (the
/// row's seq first); `None` without a row.
fn fx_link(row: &Row, seq: u64, at: usize) -> Result<Option<FxLink>, StoreError> {
    if col::<Option<i64>>(row, at)?.is_none() {
        return Ok(None);
    }
    let optional_id = |index: usize| match col::<Option<&[u8]>>(row, index)? {
        None => Ok(None),
        Some(_) => id(row, index).map(Some),
    };
    let columns = crate::FxColumns {
        determining_transfer_id: optional_id(at + 1)?,
        target_currency: parsed_opt(row, at + 2, "target currency", Currency::parse)?,
        target_amount: parsed_opt(row, at + 3, "target amount", |t| {
            Amount::parse_signed(t).ok()
        })?,
        commit_request_id: optional_id(at + 4)?,
        payer: match col::<Option<i64>>(row, at + 5)? {
            None => None,
            Some(_) => Some(participant(row, at + 5)?),
        },
    };
    columns.link(seq).map(Some)
}

/// A `conversion_fulfils` row from its columns starting at `at`; `None`
/// when they are NULL (a LEFT JOIN without one).
pub(crate) fn conversion_fulfil_row(
    row: &Row,
    at: usize,
) -> Result<Option<ConversionFulfilRow>, StoreError> {
    if col::<Option<i64>>(row, at)?.is_none() {
        return Ok(None);
    }
    Ok(Some(ConversionFulfilRow {
        seq: narrow(row, at)?,
        fulfilment: Fulfilment::from_preimage(fixed(row, at + 1)?),
        request_hash: RequestHash(fixed(row, at + 2)?),
        at_ms: col(row, at + 3)?,
    }))
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
