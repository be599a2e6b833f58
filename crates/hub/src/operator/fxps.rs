//! The FXPs (foreign-exchange providers) and the corridors each converts,
//! as the operator declares them: what the hub answers to
//! `GET /services/FXP[/{SourceCurrency}/{TargetCurrency}]`
//! (`resources/services.rs`). Mojaloop has no such declaration (an FXP
//! is any participant with accounts in two currencies) and never built
//! `/services/FXP` (fx-research §3); conversions themselves need no
//! declaration, so Mojaloop's onboarding of an FXP works unchanged.
//!
//! | Route | Role | Body / answer |
//! |---|---|---|
//! | `GET /fxps` | viewer | `[{"name","isActive","corridors":[{"sourceCurrency","targetCurrency"}]}]` |
//! | `GET /participants/{name}/fxCorridors` | viewer | `{"corridors":[…]}` |
//! | `PUT /participants/{name}/fxCorridors` | operator | `{"corridors":[…]}` (replaces; `[]` withdraws), audited `fxp.corridors` |

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use ledger::request::{ReadFxps, SetFxpCorridors};
use ledger::{Corridor, Currency, ErrorCode, FxpView, Outcome};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::audit::Change;
use crate::{Hub, HubError};

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/fxps", get(list_fxps))
        .route(
            "/participants/:name/fxCorridors",
            get(get_corridors).put(set_corridors),
        )
        .with_state(hub)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CorridorsBody {
    corridors: Vec<CorridorBody>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CorridorBody {
    source_currency: String,
    target_currency: String,
}

fn corridor_json(corridor: &Corridor) -> Value {
    json!({
        "sourceCurrency": corridor.source.as_str(),
        "targetCurrency": corridor.target.as_str(),
    })
}

fn fxp_json(fxp: &FxpView) -> Value {
    json!({
        "name": fxp.fsp.as_str(),
        "isActive": u8::from(fxp.active),
        "corridors": fxp.corridors.iter().map(corridor_json).collect::<Vec<_>>(),
    })
}

/// An audit event's view of one FXP: its corridors (`[]` when none).
pub fn render_fxp(target: &str, outcome: &Outcome) -> String {
    let corridors = match outcome {
        Outcome::Fxps(fxps) => fxps
            .iter()
            .find(|fxp| fxp.fsp.as_str() == target)
            .map(|fxp| fxp.corridors.iter().map(corridor_json).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    json!({ "corridors": corridors }).to_string()
}

fn currency(text: &str, field: &str) -> Result<Currency, HubError> {
    Currency::parse(text).ok_or_else(|| {
        HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!("{field} '{text}' is not an ISO 4217 currency FSPIOP knows"),
        )
    })
}

async fn read_fxps(hub: &Hub) -> Result<Vec<FxpView>, HubError> {
    Ok(hub.ask(ReadFxps {}).await??)
}

async fn list_fxps(State(hub): State<Arc<Hub>>) -> Result<Response, HubError> {
    let fxps = read_fxps(&hub).await?;
    let body: Vec<Value> = fxps.iter().map(fxp_json).collect();
    Ok(axum::Json(body).into_response())
}

async fn get_corridors(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
) -> Result<Response, HubError> {
    let name = crate::admin::participant_name(&name)?;
    // A participant that is not an FXP has no corridors; an unknown one
    // is not found.
    crate::admin::read_participant(&hub, name.as_str()).await?;
    let fxps = read_fxps(&hub).await?;
    let corridors: Vec<Value> = fxps
        .iter()
        .find(|fxp| fxp.fsp == name)
        .map(|fxp| fxp.corridors.iter().map(corridor_json).collect())
        .unwrap_or_default();
    Ok(axum::Json(json!({ "corridors": corridors })).into_response())
}

async fn set_corridors(
    State(hub): State<Arc<Hub>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let request: CorridorsBody = serde_json::from_slice(&body).map_err(|error| {
        HubError::new(
            ErrorCode::MALFORMED_SYNTAX,
            format!("Malformed syntax - {error}"),
        )
    })?;
    let corridors = request
        .corridors
        .iter()
        .map(|corridor| {
            Ok(Corridor {
                source: currency(&corridor.source_currency, "sourceCurrency")?,
                target: currency(&corridor.target_currency, "targetCurrency")?,
            })
        })
        .collect::<Result<Vec<_>, HubError>>()?;
    let name = crate::admin::participant_name(&name)?;
    hub.ask_audited(
        Change::fxp("fxp.corridors", name),
        SetFxpCorridors { name, corridors },
    )
    .await??;
    Ok(StatusCode::OK.into_response())
}
