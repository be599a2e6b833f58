//! `GET /transfers/{ID}` on the admin address (a kasi extension): the
//! operator reads any transfer — an FSPIOP transfer or a funds in/out
//! movement — whoever its parties, as JSON rather than as a callback.
//! `GET /transfers?…` searches the stored transfers (the store's
//! `search`: newest first, a page at a time, within a scan budget).
//!
//! The ledger answers from memory (`ReadTransfer`, a read without
//! the payer/payee check the FSPIOP `GET` has); a transfer past the
//! retention horizon is read from the store, as the FSPIOP `GET` does.

use std::sync::Arc;

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ledger::request::ReadTransfer;
use ledger::{ErrorCode, FxView, Held, TransferKind, TransferState, TransferView};
use serde_json::{json, Map, Value};

use crate::{format_time, Hub, HubError};

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/transfers", get(search_transfers))
        .route("/transfers/:id", get(get_transfer))
        .with_state(hub)
}

/// Where the answer was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Memory,
    Store,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Memory => "memory",
            Source::Store => "store",
        }
    }
}

/// The kind as the admin API spells it.
pub fn kind_name(kind: TransferKind) -> &'static str {
    match kind {
        TransferKind::Fspiop => "transfer",
        TransferKind::FundsIn => "fundsIn",
        TransferKind::FundsOut => "fundsOut",
        TransferKind::FxConversion => "fxTransfer",
    }
}

/// What happened to a transfer, in order, with ledger instants: its
/// prepare, then the step that finished it, if any.
pub fn timeline(view: &TransferView) -> Vec<(&'static str, i64)> {
    let mut steps = vec![("prepare", view.prepared_at_ms)];
    let finished_at = view.completed_at_ms;
    match view.state {
        TransferState::Reserved => {}
        TransferState::Committed => {
            steps.push(("commit", finished_at.unwrap_or(view.prepared_at_ms)))
        }
        TransferState::Aborted => steps.push(("abort", finished_at.unwrap_or(view.prepared_at_ms))),
        TransferState::Rejected => {
            steps.push(("reject", finished_at.unwrap_or(view.prepared_at_ms)))
        }
        // The hub expires a transfer at (or just after) its expiration.
        TransferState::Expired => steps.push(("expire", finished_at.unwrap_or(view.expiration_ms))),
    }
    steps
}

/// The admin API's JSON for a transfer (see docs/operations.md).
pub fn transfer_json(view: &TransferView, partner: Option<&TransferView>, source: Source) -> Value {
    let mut body = Map::new();
    body.insert("transferId".into(), json!(view.transfer_id.to_string()));
    body.insert("kind".into(), json!(kind_name(view.kind)));
    body.insert("payerFsp".into(), json!(view.payer.as_str()));
    body.insert("payeeFsp".into(), json!(view.payee.as_str()));
    body.insert(
        "amount".into(),
        json!({"amount": view.amount.to_string(), "currency": view.currency.to_string()}),
    );
    body.insert("transferState".into(), json!(view.state.fspiop()));
    body.insert("internalState".into(), json!(view.state.as_str()));
    // A transfer that did not commit always has a reason; the ledger's
    // rule, but a missing one is shown as absent rather than invented.
    if view.state != TransferState::Committed {
        if let Some(code) = view.reason {
            body.insert("errorCode".into(), json!(code.to_string()));
            body.insert("errorDescription".into(), json!(code.description()));
        }
    }
    body.insert("expiration".into(), json!(format_time(view.expiration_ms)));
    body.insert("preparedAt".into(), json!(format_time(view.prepared_at_ms)));
    if let Some(completed) = view.completed_at_ms.filter(|_| view.state.is_final()) {
        body.insert("completedAt".into(), json!(format_time(completed)));
    }
    body.insert("hasFulfilment".into(), json!(view.fulfilment.is_some()));
    // central-settlement's name for a window's id.
    if let Some(window) = view.settlement_window {
        body.insert("settlementWindowId".into(), json!(window));
    }
    if let Some(fx) = view.fx {
        body.insert("fx".into(), fx_json(&fx, partner));
    }
    body.insert("source".into(), json!(source.as_str()));
    let timeline: Vec<Value> = timeline(view)
        .into_iter()
        .map(|(phase, at)| json!({"phase": phase, "at": format_time(at)}))
        .collect();
    body.insert("timeline".into(), Value::Array(timeline));
    Value::Object(body)
}

/// The FX side of a transfer: a conversion's terms, or a dependent
/// transfer's conversion and FXP; with `partner`, the other leg as read.
fn fx_json(fx: &FxView, partner: Option<&TransferView>) -> Value {
    match *fx {
        FxView::Conversion {
            terms,
            fxp_fulfilled_at_ms,
        } => {
            let mut body = json!({
                "role": "conversion",
                "determiningTransferId": terms.determining_transfer_id.to_string(),
                "targetAmount": {
                    "amount": terms.target_amount.to_string(),
                    "currency": terms.target_currency.to_string(),
                },
            });
            if let Some(at) = fxp_fulfilled_at_ms {
                body["fxpAcceptedAt"] = json!(format_time(at));
            }
            if let Some(dependent) = partner {
                body["dependentPayeeFsp"] = json!(dependent.payee.as_str());
                body["dependentState"] = json!(dependent.state.as_str());
            }
            body
        }
        FxView::Dependent {
            commit_request_id,
            fxp,
        } => {
            let mut body = json!({
                "role": "dependentTransfer",
                "commitRequestId": commit_request_id.to_string(),
                "fxpFsp": fxp.as_str(),
            });
            if let Some(conversion) = partner {
                body["conversionState"] = json!(conversion.state.as_str());
            }
            body
        }
    }
}

/// The other leg of an FX transfer, when it exists and points back.
async fn partner_of(hub: &Hub, view: &TransferView) -> Option<TransferView> {
    let (other, points_back): (_, fn(&TransferView, ledger::TransferId) -> bool) = match view.fx? {
        FxView::Conversion { terms, .. } => (
            terms.determining_transfer_id,
            |partner, id| matches!(partner.fx, Some(FxView::Dependent { commit_request_id, .. }) if commit_request_id == id),
        ),
        FxView::Dependent {
            commit_request_id, ..
        } => (commit_request_id, |partner, _| {
            partner.kind == TransferKind::FxConversion
        }),
    };
    match hub.ask(ReadTransfer { transfer_id: other }).await {
        Ok(Ok((partner, _))) if points_back(&partner, view.transfer_id) => Some(partner),
        _ => None,
    }
}

async fn get_transfer(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
) -> Result<Response, HubError> {
    let (view, held) = match read_transfer(&hub, &id).await? {
        Ok(found) => found,
        Err(not_found) => return Ok(not_found),
    };
    let source = match held {
        Held::InMemory => Source::Memory,
        // Past the retention horizon: the ledger answered from the store's
        // copy (an evicted transfer was durable before it left).
        Held::InStore => Source::Store,
    };
    let partner = partner_of(&hub, &view).await;
    Ok(Json(transfer_json(&view, partner.as_ref(), source)).into_response())
}

/// The transfer a path's `{id}` names, or the 404 to answer (3208: a 400
/// on the FSPIOP API, an answer to a callback; a read of an unknown
/// resource is a 404 here); a malformed id is 400 (3101).
pub(crate) async fn read_transfer(
    hub: &Hub,
    id: &str,
) -> Result<Result<(TransferView, Held), Response>, HubError> {
    let transfer_id = fspiop::parse_correlation_id(id)?;
    match hub.ask(ReadTransfer { transfer_id }).await? {
        Ok(found) => Ok(Ok(found)),
        Err(error) if error.code == ErrorCode::TRANSFER_ID_NOT_FOUND => {
            let error = HubError::new(
                ErrorCode::TRANSFER_ID_NOT_FOUND,
                format!("Transfer ID not found - transfer {transfer_id} not found"),
            );
            Ok(Err((StatusCode::NOT_FOUND, error).into_response()))
        }
        Err(error) => Err(HubError::refused(error)),
    }
}

/// The filters `GET /transfers` takes.
const SEARCH_PARAMETERS: [&str; 16] = [
    "from",
    "to",
    "payer",
    "payee",
    "partyIdType",
    "partyIdentifier",
    "partySubIdOrType",
    "partyRole",
    "state",
    "currency",
    "errorCode",
    "minAmount",
    "maxAmount",
    "settlementWindowId",
    "limit",
    "after",
];
/// A page's transfers when `limit` is not given.
const DEFAULT_PAGE: usize = 50;

fn invalid(description: String) -> HubError {
    HubError::new(
        ErrorCode::GENERIC_VALIDATION_ERROR,
        format!("Generic validation error - {description}"),
    )
}

/// The instant a query parameter names (a date-time or milliseconds), if
/// it is given.
pub(crate) fn instant(
    query: &HashMap<String, String>,
    name: &str,
) -> Result<Option<i64>, HubError> {
    query
        .get(name)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .map(|t| {
            t.parse::<i64>()
                .ok()
                .or_else(|| fspiop::parse_date_time(t))
                .ok_or_else(|| {
                    invalid(format!(
                        "{name} must be a date-time (2026-01-31T12:00:00.000Z) or milliseconds"
                    ))
                })
        })
        .transpose()
}

/// The search `GET /transfers`' query asks for, or why it cannot be run.
pub fn transfer_query(
    query: &HashMap<String, String>,
) -> Result<store::search::TransferQuery, HubError> {
    if let Some(unknown) = query
        .keys()
        .find(|k| !SEARCH_PARAMETERS.contains(&k.as_str()))
    {
        return Err(invalid(format!(
            "unknown parameter '{unknown}'; known: {}",
            SEARCH_PARAMETERS.join(", ")
        )));
    }
    let text = |name: &str| query.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
    let instant = |name: &str| instant(query, name);
    let fsp = |name: &str| -> Result<Option<ledger::FspName>, HubError> {
        text(name)
            .map(|t| {
                ledger::FspName::new(t)
                    .ok_or_else(|| invalid(format!("{name} '{t}' is not an FSP name")))
            })
            .transpose()
    };
    let amount = |name: &str| -> Result<Option<ledger::Amount>, HubError> {
        text(name)
            .map(|t| {
                ledger::Amount::parse_fspiop(t)
                    .map_err(|_| invalid(format!("{name} '{t}' is not an amount")))
            })
            .transpose()
    };
    let number = |name: &str, most: u64| -> Result<Option<u64>, HubError> {
        text(name)
            .map(|t| {
                t.parse::<u64>()
                    .ok()
                    .filter(|n| *n <= most)
                    .ok_or_else(|| invalid(format!("{name} must be a whole number up to {most}")))
            })
            .transpose()
    };
    let state = text("state")
        .map(|t| {
            TransferState::parse(&t.to_ascii_uppercase()).ok_or_else(|| {
                invalid(format!(
                    "state '{t}' is not one of RESERVED, COMMITTED, ABORTED, EXPIRED, REJECTED"
                ))
            })
        })
        .transpose()?;
    let currency = text("currency")
        .map(|t| {
            ledger::Currency::parse(t)
                .ok_or_else(|| invalid(format!("currency '{t}' is not ISO 4217")))
        })
        .transpose()?;
    let error_code = text("errorCode")
        .map(|t| {
            t.parse::<u16>()
                .ok()
                .filter(|code| (1000..10_000).contains(code))
                .ok_or_else(|| invalid(format!("errorCode '{t}' is not a four-digit FSPIOP code")))
        })
        .transpose()?;
    // A party as the prepares' ILP packets name it, checked as
    // `/parties/{Type}/{ID}/{SubId}` would be, in the registry's key form.
    let party = match (text("partyIdType"), text("partyIdentifier")) {
        (None, None) if text("partySubIdOrType").is_none() && text("partyRole").is_none() => None,
        (Some(id_type), Some(identifier)) => {
            let key = fspiop::parse_party_key(id_type, identifier, text("partySubIdOrType"))
                .map_err(|error| invalid(format!("party: {}", error.description)))?;
            Some(match &key.sub_id {
                Some(sub_id) => format!("{}/{}/{sub_id}", key.id_type, key.identifier),
                None => format!("{}/{}", key.id_type, key.identifier),
            })
        }
        _ => {
            return Err(invalid(
                "a party is searched by partyIdType and partyIdentifier together \
                 (partySubIdOrType and partyRole refine them)"
                    .to_string(),
            ))
        }
    };
    let party_role = text("partyRole")
        .map(|t| match t.to_ascii_lowercase().as_str() {
            "payer" => Ok(store::search::PartyRole::Payer),
            "payee" => Ok(store::search::PartyRole::Payee),
            _ => Err(invalid(format!("partyRole '{t}' is not payer or payee"))),
        })
        .transpose()?;
    let limit =
        number("limit", store::search::MAX_PAGE as u64)?.map_or(Ok(DEFAULT_PAGE), |n| match n {
            0 => Err(invalid(format!(
                "limit must be 1 to {}",
                store::search::MAX_PAGE
            ))),
            n => Ok(n as usize),
        })?;
    Ok(store::search::TransferQuery {
        payer: fsp("payer")?,
        payee: fsp("payee")?,
        party,
        party_role,
        currency,
        state,
        error_code,
        min_amount: amount("minAmount")?,
        max_amount: amount("maxAmount")?,
        settlement_window: number("settlementWindowId", u64::from(u32::MAX))?.map(|n| n as u32),
        from_ms: instant("from")?,
        to_ms: instant("to")?,
        before_seq: number("after", u64::MAX)?,
        limit,
        ..store::search::TransferQuery::default()
    })
}

/// `GET /transfers?from=&to=&payer=&payee=&partyIdType=&partyIdentifier=
/// &partySubIdOrType=&partyRole=&state=&currency=&errorCode=&minAmount=
/// &maxAmount=&settlementWindowId=&limit=&after=`: the stored
/// transfers that match, newest first, `limit` at a time; `next` is the
/// `after` of the following page (absent when there is none), and
/// `complete` is false when the scan budget ended the page early (more
/// may match after `next`).
async fn search_transfers(
    State(hub): State<Arc<Hub>>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, HubError> {
    let search = transfer_query(&query)?;
    let Some(reader) = hub.config.store_reader.clone() else {
        return Err(HubError::new(
            ErrorCode::SERVICE_UNAVAILABLE,
            "Service currently unavailable - this hub has no store to search",
        ));
    };
    let started = std::time::Instant::now();
    let page = tokio::task::spawn_blocking(move || reader.search_transfers(&search))
        .await
        .map_err(|error| HubError::new(ErrorCode::INTERNAL_SERVER_ERROR, error.to_string()))?
        .map_err(|error| {
            tracing::warn!(%error, "transfer search failed");
            HubError::new(
                ErrorCode::INTERNAL_SERVER_ERROR,
                "Internal server error - the store could not be searched",
            )
        })?;
    tracing::debug!(
        found = page.transfers.len(),
        examined = page.examined,
        complete = page.complete,
        ms = started.elapsed().as_millis() as u64,
        "transfer search"
    );
    let transfers: Vec<Value> = page
        .transfers
        .iter()
        .map(|(_, stored)| transfer_json(&stored.view, None, Source::Store))
        .collect();
    Ok(Json(json!({
        "transfers": transfers,
        "next": page.next.map(|seq| seq.to_string()),
        "complete": page.complete,
    }))
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::{Amount, Currency, FspName, TransferId};

    fn view(state: TransferState, completed: Option<i64>) -> TransferView {
        TransferView {
            transfer_id: TransferId::new(7),
            kind: TransferKind::Fspiop,
            payer: FspName::new("payerfsp").unwrap(),
            payee: FspName::new("payeefsp").unwrap(),
            amount: Amount::parse_fspiop("10.5").unwrap(),
            currency: Currency::parse("USD").unwrap(),
            state,
            reason: match state {
                TransferState::Expired => Some(ErrorCode::TRANSFER_EXPIRED),
                _ => None,
            },
            cause: None,
            expiration_ms: 1_700_000_010_000,
            prepared_at_ms: 1_700_000_000_000,
            completed_at_ms: completed,
            fulfilment: None,
            wire_version: 0,
            fx: None,
            settlement_window: (state == TransferState::Committed).then_some(3),
        }
    }

    #[test]
    fn a_dependent_transfer_names_its_conversion_and_fxp() {
        let mut dependent = view(TransferState::Committed, Some(1_700_000_000_500));
        dependent.fx = Some(FxView::Dependent {
            commit_request_id: TransferId::new(9),
            fxp: FspName::new("fxp").unwrap(),
        });
        let mut conversion = view(TransferState::Committed, Some(1_700_000_000_500));
        conversion.kind = TransferKind::FxConversion;
        let body = transfer_json(&dependent, Some(&conversion), Source::Memory);
        assert_eq!(body["fx"]["role"], "dependentTransfer");
        assert_eq!(body["fx"]["fxpFsp"], "fxp");
        assert_eq!(body["fx"]["conversionState"], "COMMITTED");
        assert_eq!(
            body["settlementWindowId"], 3,
            "the window its commit fell in"
        );
        assert_eq!(
            body["fx"]["commitRequestId"],
            TransferId::new(9).to_string()
        );
        assert!(
            transfer_json(&view(TransferState::Reserved, None), None, Source::Memory)
                .get("fx")
                .is_none()
        );
    }

    #[test]
    fn a_reserved_transfer_has_no_completion_nor_error() {
        let body = transfer_json(&view(TransferState::Reserved, None), None, Source::Memory);
        assert_eq!(body["transferState"], "RESERVED");
        assert_eq!(body["amount"], json!({"amount": "10.5", "currency": "USD"}));
        assert_eq!(body["source"], "memory");
        assert_eq!(body["kind"], "transfer");
        assert_eq!(body["hasFulfilment"], false);
        for absent in [
            "completedAt",
            "errorCode",
            "errorDescription",
            "settlementWindowId",
        ] {
            assert!(body.get(absent).is_none(), "{absent} in {body}");
        }
        assert_eq!(body["timeline"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn an_expired_transfer_is_aborted_with_3303_and_its_expiry_in_the_timeline() {
        let completed = Some(1_700_000_010_004);
        let body = transfer_json(
            &view(TransferState::Expired, completed),
            None,
            Source::Store,
        );
        assert_eq!(body["transferState"], "ABORTED");
        assert_eq!(body["internalState"], "EXPIRED_RESERVED");
        assert_eq!(body["errorCode"], "3303");
        assert_eq!(body["source"], "store");
        assert_eq!(body["completedAt"], format_time(1_700_000_010_004));
        assert!(body.get("settlementWindowId").is_none(), "{body}");
        assert_eq!(
            body["timeline"],
            json!([
                {"phase": "prepare", "at": format_time(1_700_000_000_000)},
                {"phase": "expire", "at": format_time(1_700_000_010_004)},
            ])
        );
    }
}
