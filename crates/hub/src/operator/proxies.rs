//! The proxy map on the admin address (docs/design/interscheme.md, section
//! 8, rule 2): which proxy participant reaches each DFSP of another scheme.
//!
//! Mojaloop keeps this map in Redis, written by whichever header arrived
//! last, with a static `PROXY_MAP` setting beside it; kasi keeps it in the
//! ledger. The operator's entries are set and deleted here (audited, like
//! every admin change); the hub learns the others from proxies' answers to
//! its own discovery requests, and an operator's entry always wins.
//!
//! - `GET /proxyMap`: every entry, in DFSP name order;
//! - `PUT /proxyMap/{fspId}` `{"proxy": "<proxy participant>"}`: the
//!   operator's entry (201 when new, 200 when it replaced one);
//! - `DELETE /proxyMap/{fspId}`: drops an entry, learnt or set (204).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::Router;
use ledger::request::{MapProxy, ReadProxyMap, UnmapProxy};
use ledger::{ErrorCode, Outcome, ProxyMapView};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::admin::participant_name;
use crate::audit::Change;
use crate::{format_time, Hub, HubError};

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/proxyMap", get(list))
        .route("/proxyMap/:fsp_id", put(set).delete(delete))
        .with_state(hub)
}

fn entry_json(view: &ProxyMapView) -> Value {
    json!({
        "fspId": view.dfsp.as_str(),
        "proxy": view.proxy.as_str(),
        // Who put it there: the operator, or a proxy's answer to a
        // discovery this hub asked.
        "source": if view.by_operator { "operator" } else { "discovery" },
        "since": format_time(view.since_ms),
    })
}

/// The audit event's view of the map: the target DFSP's entry (`null`
/// when it has none).
pub(crate) fn render_entry(target: &str, outcome: &Outcome) -> String {
    let Outcome::ProxyMap(rows) = outcome else {
        return "null".to_string();
    };
    let dfsp = target.strip_prefix("proxyMap/").unwrap_or(target);
    rows.iter()
        .find(|row| row.dfsp.as_str() == dfsp)
        .map_or_else(|| "null".to_string(), |row| entry_json(row).to_string())
}

async fn list(State(hub): State<Arc<Hub>>) -> Result<Response, HubError> {
    let rows = hub.ask(ReadProxyMap {}).await??;
    Ok(axum::Json(rows.iter().map(entry_json).collect::<Vec<_>>()).into_response())
}

#[derive(Deserialize)]
struct Entry {
    proxy: String,
}

async fn set(
    State(hub): State<Arc<Hub>>,
    Path(fsp_id): Path<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let dfsp = participant_name(&fsp_id)?;
    let entry: Entry = serde_json::from_slice(&body).map_err(|error| {
        HubError::new(
            ErrorCode::MALFORMED_SYNTAX,
            format!("Malformed syntax - {error} (expected {{\"proxy\": \"<proxy participant>\"}})"),
        )
    })?;
    let proxy = participant_name(&entry.proxy)?;
    let existed = hub
        .ask(ReadProxyMap {})
        .await??
        .iter()
        .any(|row| row.dfsp == dfsp);
    let change = Change::proxy_map("proxyMap.set", dfsp);
    hub.ask_audited(
        change,
        MapProxy {
            dfsp,
            proxy,
            by_operator: true,
        },
    )
    .await??;
    let rows = hub.ask(ReadProxyMap {}).await??;
    let row = rows.iter().find(|row| row.dfsp == dfsp).ok_or_else(|| {
        HubError::new(
            ErrorCode::INTERNAL_SERVER_ERROR,
            format!("'{dfsp}' was mapped and is not in the map"),
        )
    })?;
    let status = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, axum::Json(entry_json(row))).into_response())
}

async fn delete(
    State(hub): State<Arc<Hub>>,
    Path(fsp_id): Path<String>,
) -> Result<Response, HubError> {
    let dfsp = participant_name(&fsp_id)?;
    let change = Change::proxy_map("proxyMap.delete", dfsp);
    hub.ask_audited(
        change,
        UnmapProxy {
            dfsp,
            learnt_via: None,
        },
    )
    .await??;
    Ok(StatusCode::NO_CONTENT.into_response())
}
