//! `GET /services/FXP` and `GET /services/FXP/{SourceCurrency}/{TargetCurrency}`
//! (FSPIOP v2.0): which FXPs convert, answered by the hub itself with
//! `PUT /services/FXP[…]` `{"providers": […]}` from the corridors the
//! operator declared (`operator/fxps.rs`). Mojaloop specifies these and
//! never built them (project#3783; fx-research §3); its DFSPs keep FXP
//! lists in local configuration.
//!
//! Offered: exactly the FXPs that could complete a conversion now — a
//! conversion makes the FXP its payee (it takes the source currency) and
//! the payer of the dependent transfer (it pays the target), so its mode
//! must allow both (`active`: not send-only, receive-only or suspended,
//! `ledger::may_convert`) and both currencies' position accounts must be
//! enabled — with a declared corridor so open (the one asked, for the
//! corridor's path), never the asker itself, at most 16 (the schema's
//! limit) in name order. The answer goes to the asker's
//! `FSPIOP_CALLBACK_URL_FX_QUOTES` base URL (FSPIOP names no endpoint type
//! for services; a DFSP asking for FXPs is about to ask one for a quote),
//! under `/services/FXP…`; an asker without one is answered nothing
//! (logged), as any callback without an endpoint.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use fspiop::Resource;
use ledger::request::ReadFxps;
use ledger::{Corridor, Currency, ErrorCode, FspName};

use crate::notify::{Callback, Origin};
use crate::wire::{check_headers, Shape};
use crate::{Hub, HubError};

const SERVICES_ENDPOINT: &str = "FSPIOP_CALLBACK_URL_FX_QUOTES";

pub fn routes() -> Router<Arc<Hub>> {
    Router::new()
        .route("/services/FXP", get(all_fxps))
        .route("/services/FXP/:source/:target", get(corridor_fxps))
}

async fn all_fxps(State(hub): State<Arc<Hub>>, headers: HeaderMap) -> Result<Response, HubError> {
    answer(&hub, &headers, None).await
}

async fn corridor_fxps(
    State(hub): State<Arc<Hub>>,
    Path((source, target)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, HubError> {
    let currency = |text: &str, name: &str| {
        Currency::parse(text).ok_or_else(|| {
            HubError::new(
                ErrorCode(3101),
                format!("Malformed syntax - {name} '{text}' is not an ISO 4217 currency"),
            )
        })
    };
    let corridor = Corridor {
        source: currency(&source, "SourceCurrency")?,
        target: currency(&target, "TargetCurrency")?,
    };
    answer(&hub, &headers, Some(corridor)).await
}

/// The FXPs offered to `asker` for `corridor` (any, when `None`).
pub fn offered(
    fxps: &[ledger::FxpView],
    asker: FspName,
    corridor: Option<Corridor>,
) -> Vec<FspName> {
    let mut offered: Vec<FspName> = fxps
        .iter()
        .filter(|fxp| fxp.active && fxp.fsp != asker)
        .filter(|fxp| match corridor {
            Some(wanted) => fxp.convertible.contains(&wanted),
            None => !fxp.convertible.is_empty(),
        })
        .map(|fxp| fxp.fsp)
        .collect();
    offered.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    offered
}

async fn answer(
    hub: &Arc<Hub>,
    headers: &HeaderMap,
    corridor: Option<Corridor>,
) -> Result<Response, HubError> {
    let caller = check_headers(headers, Resource::Services, Shape::Get)?;
    let fxps = hub.ask(ReadFxps {}).await??;
    let providers = offered(&fxps, caller.source, corridor);
    let Some(base) = hub.endpoints.url(caller.source, SERVICES_ENDPOINT, &[]) else {
        tracing::warn!(destination = %caller.source, endpoint_type = SERVICES_ENDPOINT, "no callback endpoint registered; the FXP list was not sent");
        return Ok(StatusCode::ACCEPTED.into_response());
    };
    let base = base.strip_suffix('/').unwrap_or(&base);
    let url = match corridor {
        Some(corridor) => format!(
            "{base}/services/FXP/{}/{}",
            corridor.source, corridor.target
        ),
        None => format!("{base}/services/FXP"),
    };
    hub.dispatcher.send(Callback {
        destination: caller.source.to_string(),
        origin: Origin::Hub,
        method: Method::PUT,
        url,
        headers: crate::wire::hub_headers(hub, Resource::Services, caller.source, caller.reply()),
        body: Bytes::from(fspiop::services_fxp_put_body(&providers)),
    });
    Ok(StatusCode::ACCEPTED.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::FxpView;

    #[test]
    fn offered_are_the_active_fxps_of_the_corridor_but_the_asker() {
        let name = |n: &str| FspName::new(n).unwrap();
        let c = |s: &str, t: &str| Corridor {
            source: Currency::parse(s).unwrap(),
            target: Currency::parse(t).unwrap(),
        };
        let fxp = |n: &str, active: bool, corridors: Vec<Corridor>| FxpView {
            fsp: name(n),
            active,
            convertible: corridors.clone(),
            corridors,
        };
        let mut disabled = fxp("disabled", true, vec![c("USD", "TZS"), c("TZS", "USD")]);
        // Its TZS account disabled: it declares both, converts neither.
        disabled.convertible.clear();
        let fxps = vec![
            fxp("zeta", true, vec![c("USD", "TZS")]),
            fxp("alpha", true, vec![c("USD", "TZS"), c("TZS", "USD")]),
            fxp("asleep", false, vec![c("USD", "TZS")]),
            fxp("other", true, vec![c("EUR", "XOF")]),
            disabled,
        ];
        let asker = name("payerfsp");
        assert_eq!(
            offered(&fxps, asker, Some(c("USD", "TZS"))),
            [name("alpha"), name("zeta")]
        );
        assert_eq!(
            offered(&fxps, asker, Some(c("TZS", "USD"))),
            [name("alpha")]
        );
        assert_eq!(
            offered(&fxps, asker, None),
            [name("alpha"), name("other"), name("zeta")]
        );
        assert_eq!(
            offered(&fxps, name("alpha"), Some(c("TZS", "USD"))),
            Vec::<FspName>::new()
        );
    }
}
