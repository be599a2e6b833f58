//! `GET /participants/{name}/statement?currency=&from=&to=&limit=&after=`
//! on the admin address (kasi's): a DFSP's statement per currency — the
//! opening balance of its POSITION and SETTLEMENT accounts at `from`,
//! every committed movement of either in `[from, to)` with its running
//! balance, the closing balance at `to` (the store's
//! [`store::statement`]). JSON a page at a time, or CSV (`Accept:
//! text/csv` or `format=csv`) of up to [`CSV_ROWS`] movements in one
//! answer. A DFSP-scoped person reads only its own (the access table's
//! `Scope::Param`).
//!
//! The cursor (`next`, the following page's `after`) carries the running
//! balances, sealed with a key of this process, so that page N + 1 goes
//! on from page N's balances without reading the history again; a cursor
//! the hub cannot vouch for (another process's, or altered) keeps its
//! place and has its balances read again from the store, exactly.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine;
use ledger::{Amount, Currency, ErrorCode, FspName};
use serde_json::{json, Value};
use store::statement::{
    Balances, Cursor, Key, Movement, StatementPage, StatementQuery, CHUNK, MAX_PAGE, SCAN_BUDGET,
};

use crate::settlement::{csv_field, csv_row};
use crate::{format_time, Hub, HubError};

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/participants/:name/statement", get(statement))
        .with_state(hub)
}

/// The parameters the route takes.
const PARAMETERS: [&str; 6] = ["currency", "from", "to", "limit", "after", "format"];
/// A page's movements when `limit` is not given.
const DEFAULT_PAGE: usize = 100;
/// Movements one CSV answer holds at most (pages read one after the
/// other); the header `Kasi-Statement-Next` says where to go on.
pub const CSV_ROWS: usize = 100_000;
/// The range when `from` is not given: the day before `to`.
const DEFAULT_RANGE_MS: i64 = 24 * 60 * 60 * 1000;

fn invalid(description: String) -> HubError {
    HubError::new(
        ErrorCode::GENERIC_VALIDATION_ERROR,
        format!("Generic validation error - {description}"),
    )
}

/// The statement the query asks for, or why it cannot be read.
pub fn statement_query(
    name: &str,
    query: &HashMap<String, String>,
    now_ms: i64,
) -> Result<(StatementQuery, bool), HubError> {
    if let Some(unknown) = query.keys().find(|k| !PARAMETERS.contains(&k.as_str())) {
        return Err(invalid(format!(
            "unknown parameter '{unknown}'; known: {}",
            PARAMETERS.join(", ")
        )));
    }
    let participant =
        FspName::new(name).ok_or_else(|| invalid(format!("'{name}' is not an FSP name")))?;
    let text = |name: &str| query.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
    let currency = match text("currency") {
        None => return Err(invalid("currency is required (ISO 4217, e.g. USD)".into())),
        Some(t) => {
            Currency::parse(t).ok_or_else(|| invalid(format!("currency '{t}' is not ISO 4217")))?
        }
    };
    let instant = |name: &str| crate::admin_transfers::instant(query, name);
    // A page after the first ends where the first did, unless `to` says
    // otherwise: the cursor names its statement's end.
    let cursor_to =
        text("after").and_then(|after| after.split(CURSOR_SEPARATOR).nth(1)?.parse().ok());
    let to_ms = instant("to")?.or(cursor_to).unwrap_or(now_ms);
    let from_ms = instant("from")?.unwrap_or(to_ms.saturating_sub(DEFAULT_RANGE_MS));
    if from_ms > to_ms {
        return Err(invalid("from must not be after to".into()));
    }
    let limit = match text("limit") {
        None => DEFAULT_PAGE,
        Some(t) => t
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| invalid(format!("limit must be 1 to {MAX_PAGE}")))?,
    };
    let csv = match text("format") {
        None | Some("json") => false,
        Some("csv") => true,
        Some(other) => return Err(invalid(format!("format '{other}' is not json or csv"))),
    };
    let mut statement = StatementQuery {
        participant,
        currency,
        from_ms,
        to_ms,
        after: None,
        limit,
        chunk: CHUNK,
        scan_budget: SCAN_BUDGET,
    };
    if let Some(after) = text("after") {
        statement.after = Some(
            open_cursor(&statement, after)
                .ok_or_else(|| invalid("after is not a cursor this statement gave".into()))?,
        );
    }
    Ok((statement, csv))
}

/// This process's key for sealing cursors.
fn sealing_key() -> &'static ring::hmac::Key {
    static KEY: OnceLock<ring::hmac::Key> = OnceLock::new();
    KEY.get_or_init(|| {
        ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &ring::rand::SystemRandom::new())
            .expect("the system's random source")
    })
}

/// Between a cursor's parts (`key~to~position~settlement~seal`): none of
/// them holds it (the seal is base64url), and it needs no escaping in a
/// URL.
const CURSOR_SEPARATOR: char = '~';

/// What a cursor's seal covers: its place and balances, and the
/// statement it belongs to.
fn sealed_text(query: &StatementQuery, key: Key, balances: Balances) -> String {
    format!(
        "{}~{}~{}|{}|{}|{}|{}",
        key.text(),
        balances.position,
        balances.settlement,
        query.participant,
        query.currency,
        query.from_ms,
        query.to_ms
    )
}

fn seal(query: &StatementQuery, cursor: Cursor) -> String {
    let Some(balances) = cursor.balances else {
        return format!("{}~{}", cursor.key.text(), query.to_ms);
    };
    let text = sealed_text(query, cursor.key, balances);
    let tag = ring::hmac::sign(sealing_key(), text.as_bytes());
    let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag.as_ref());
    format!(
        "{}~{}~{}~{}~{tag}",
        cursor.key.text(),
        query.to_ms,
        balances.position,
        balances.settlement
    )
}

/// A cursor's place, with its balances when its seal holds.
fn open_cursor(query: &StatementQuery, text: &str) -> Option<Cursor> {
    let mut parts = text.split(CURSOR_SEPARATOR);
    let key = Key::parse(parts.next()?)?;
    let _to: i64 = parts.next()?.parse().ok()?;
    let rest: Vec<&str> = parts.collect();
    let balances = match rest.as_slice() {
        [] => None,
        [position, settlement, tag] => {
            let balances = Balances {
                position: Amount::parse_signed(position).ok()?,
                settlement: Amount::parse_signed(settlement).ok()?,
            };
            let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(tag)
                .ok()?;
            // ring compares in constant time: a forged tag learns
            // nothing from the answer's timing.
            let holds = ring::hmac::verify(
                sealing_key(),
                sealed_text(query, key, balances).as_bytes(),
                &tag,
            )
            .is_ok();
            holds.then_some(balances)
        }
        _ => return None,
    };
    Some(Cursor { key, balances })
}

async fn read_page(hub: &Hub, query: StatementQuery) -> Result<StatementPage, HubError> {
    let Some(reader) = hub.config.store_reader.clone() else {
        return Err(HubError::new(
            ErrorCode::SERVICE_UNAVAILABLE,
            "Service currently unavailable - this hub has no store to read statements from",
        ));
    };
    let name = query.participant;
    let page = tokio::task::spawn_blocking(move || reader.statement(&query))
        .await
        .map_err(|error| HubError::new(ErrorCode::INTERNAL_SERVER_ERROR, error.to_string()))?
        .map_err(|error| {
            tracing::warn!(%error, "statement read failed");
            HubError::new(
                ErrorCode::INTERNAL_SERVER_ERROR,
                "Internal server error - the store could not be read",
            )
        })?;
    page.ok_or_else(|| {
        HubError::new(
            ErrorCode::ID_NOT_FOUND,
            format!("participant '{name}' not found"),
        )
    })
}

fn balances_json(balances: Balances) -> Value {
    json!({
        "POSITION": balances.position.to_string(),
        "SETTLEMENT": balances.settlement.to_string(),
    })
}

fn movement_json(movement: &Movement) -> Value {
    json!({
        "at": format_time(movement.key.at_ms),
        "kind": movement.kind,
        "ledgerAccountType": movement.account.as_str(),
        "accountId": movement.account_id.0,
        "transferId": movement.transfer_id.map(|id| id.to_string()),
        "settlementId": movement.settlement_id,
        "counterparty": movement.counterparty,
        "amount": movement.amount.to_string(),
        "balance": movement.balance.to_string(),
    })
}

/// `GET /participants/{name}/statement`.
async fn statement(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, HubError> {
    let (query, csv) = statement_query(&name, &params, crate::now_ms())?;
    let csv = csv
        || headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/csv"));
    if csv {
        return csv_statement(&hub, query).await;
    }
    let started = std::time::Instant::now();
    let page = read_page(&hub, query.clone()).await?;
    tracing::debug!(
        participant = %query.participant,
        movements = page.movements.len(),
        examined = page.examined,
        method = page.method.as_str(),
        ms = started.elapsed().as_millis() as u64,
        "statement page"
    );
    let mut accounts = Vec::new();
    for (kind, id) in [
        ("POSITION", page.position_account),
        ("SETTLEMENT", page.settlement_account),
    ] {
        if let Some(id) = id {
            accounts.push(json!({"ledgerAccountType": kind, "accountId": id.0}));
        }
    }
    let opening_name = match query.after {
        None => "openingBalance",
        Some(_) => "balanceBefore",
    };
    let mut body = json!({
        "participant": query.participant.as_str(),
        "currency": query.currency.as_str(),
        "from": format_time(query.from_ms),
        "to": format_time(query.to_ms),
        "accounts": accounts,
        "openingMethod": page.method.as_str(),
        "movements": page.movements.iter().map(movement_json).collect::<Vec<_>>(),
        "next": page.next.map(|cursor| seal(&query, cursor)),
        "complete": page.complete,
    });
    body[opening_name] = balances_json(page.opening);
    if let Some(closing) = page.closing {
        body["closingBalance"] = balances_json(closing);
    }
    Ok(Json(body).into_response())
}

/// The statement as CSV: a row per account for the opening balance, the
/// movements, a row per account for the closing balance; up to
/// [`CSV_ROWS`] movements, the rest after `Kasi-Statement-Next`.
async fn csv_statement(hub: &Hub, mut query: StatementQuery) -> Result<Response, HubError> {
    query.limit = MAX_PAGE;
    let mut csv = String::from(
        "participant,currency,at,kind,ledgerAccountType,accountId,transferId,settlementId,counterparty,amount,balance\n",
    );
    let participant = csv_field(query.participant.as_str());
    let currency = query.currency;
    let mut rows = 0;
    let mut first = true;
    let balance_rows =
        |csv: &mut String, at: i64, kind: &str, page: &StatementPage, b: Balances| {
            for (account, id, value) in [
                ("POSITION", page.position_account, b.position),
                ("SETTLEMENT", page.settlement_account, b.settlement),
            ] {
                if let Some(id) = id {
                    csv_row(
                        csv,
                        &[
                            &participant,
                            &currency,
                            &format_time(at),
                            &kind,
                            &account,
                            &id.0,
                            &"",
                            &"",
                            &"",
                            &"",
                            &value,
                        ],
                    );
                }
            }
        };
    let next = loop {
        let page = read_page(hub, query.clone()).await?;
        if first {
            // Going on from a cursor: the balances before its place.
            let kind = match query.after {
                None => "OPENING_BALANCE",
                Some(_) => "BALANCE_BEFORE",
            };
            let at = query.after.map_or(query.from_ms, |cursor| cursor.key.at_ms);
            balance_rows(&mut csv, at, kind, &page, page.opening);
            first = false;
        }
        for movement in &page.movements {
            csv_row(
                &mut csv,
                &[
                    &participant,
                    &currency,
                    &format_time(movement.key.at_ms),
                    &movement.kind,
                    &movement.account.as_str(),
                    &movement.account_id.0,
                    &movement
                        .transfer_id
                        .map(|id| id.to_string())
                        .unwrap_or_default(),
                    &movement
                        .settlement_id
                        .map(|id| id.to_string())
                        .unwrap_or_default(),
                    &csv_field(&movement.counterparty),
                    &movement.amount,
                    &movement.balance,
                ],
            );
        }
        rows += page.movements.len();
        if let Some(closing) = page.closing {
            balance_rows(&mut csv, query.to_ms, "CLOSING_BALANCE", &page, closing);
            break None;
        }
        let Some(cursor) = page.next else {
            break None;
        };
        if rows >= CSV_ROWS {
            break Some(seal(&query, cursor));
        }
        query.after = Some(cursor);
    };
    let mut response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/csv; charset=utf-8")],
        csv,
    )
        .into_response();
    if let Some(next) = next.and_then(|n| header::HeaderValue::from_str(&n).ok()) {
        response.headers_mut().insert("kasi-statement-next", next);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Result<(StatementQuery, bool), HubError> {
        let map = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        statement_query("payerfsp", &map, 1_700_000_000_000)
    }

    #[test]
    fn a_cursor_keeps_its_balances_only_while_its_seal_holds() {
        let (statement, _) = query(&[("currency", "USD"), ("from", "0")]).unwrap();
        let cursor = Cursor {
            key: Key::at(5),
            balances: Some(Balances {
                position: Amount::from_whole(-3),
                settlement: Amount::parse_signed("-12.5").unwrap(),
            }),
        };
        let text = seal(&statement, cursor);
        assert_eq!(open_cursor(&statement, &text), Some(cursor));
        // Another balance under the same seal: the place stays, the
        // balances are read again.
        let forged = text.replacen("~-3~", "~-300~", 1);
        assert_ne!(forged, text);
        assert_eq!(
            open_cursor(&statement, &forged),
            Some(Cursor {
                key: cursor.key,
                balances: None
            })
        );
        // Another statement's cursor vouches for nothing here.
        let (other, _) = query(&[("currency", "EUR"), ("from", "0")]).unwrap();
        assert_eq!(open_cursor(&other, &text).unwrap().balances, None);
        assert_eq!(open_cursor(&statement, "nonsense"), None);
        // A page after the first ends where the first did.
        let later: HashMap<String, String> = [("currency", "USD"), ("from", "0"), ("after", &text)]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (next, _) = statement_query("payerfsp", &later, 1_800_000_000_000).unwrap();
        assert_eq!(next.to_ms, statement.to_ms);
        assert_eq!(next.after, Some(cursor));
    }

    #[test]
    fn the_query_is_checked() {
        assert!(query(&[]).is_err(), "currency is required");
        assert!(query(&[("currency", "USD"), ("limit", "1001")]).is_err());
        assert!(query(&[("currency", "USD"), ("format", "xml")]).is_err());
        assert!(query(&[("currency", "USD"), ("from", "10"), ("to", "5")]).is_err());
        assert!(query(&[("currency", "USD"), ("bogus", "1")]).is_err());
        let (q, csv) = query(&[("currency", "USD"), ("format", "csv")]).unwrap();
        assert!(csv);
        assert_eq!(q.to_ms, 1_700_000_000_000);
        assert_eq!(q.from_ms, 1_700_000_000_000 - DEFAULT_RANGE_MS);
        assert_eq!(q.limit, DEFAULT_PAGE);
    }
}
