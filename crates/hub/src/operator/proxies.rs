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
//!
//! [`ProxyRoutes`] is the hub's copy of the proxies and the map (kept by
//! `references.rs` from every commit), and [`ProxyRoutes::may_act_for`]
//! is rule 6: whom a proxy may speak for.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::Router;
use ledger::request::{MapProxy, ReadProxyMap, UnmapProxy};
use ledger::{ErrorCode, FspName, Outcome, ParticipantView, ProxyMapView};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::admin::participant_name;
use crate::audit::Change;
use crate::{format_time, Hub, HubError};

/// The proxies, the participants' names and the proxy map, as committed.
#[derive(Default)]
pub struct ProxyRoutes {
    state: RwLock<RouteState>,
}

#[derive(Default)]
struct RouteState {
    participants: HashSet<FspName>,
    proxies: HashSet<FspName>,
    /// Another scheme's DFSP → the proxy that reaches it.
    map: HashMap<FspName, FspName>,
}

/// Why a proxy may not speak for a source (rule 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotFor {
    /// FSPIOP-Proxy names no participant created as a proxy.
    NotAProxy,
    /// FSPIOP-Source is a participant of this scheme: it speaks for itself.
    LocalSource,
    /// The map places FSPIOP-Source behind another proxy.
    AnotherProxys,
}

impl NotFor {
    pub fn reason(self) -> &'static str {
        match self {
            NotFor::NotAProxy => "FSPIOP-Proxy is not a participant created as a proxy",
            NotFor::LocalSource => {
                "FSPIOP-Source is a participant of this scheme, which no proxy may speak for"
            }
            NotFor::AnotherProxys => "the proxy map places FSPIOP-Source behind another proxy",
        }
    }
}

impl ProxyRoutes {
    fn state(&self) -> std::sync::RwLockReadGuard<'_, RouteState> {
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn state_mut(&self) -> std::sync::RwLockWriteGuard<'_, RouteState> {
        self.state
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The participants and the map as loaded at start.
    pub(crate) fn load(&self, views: &[ParticipantView], map: &[ProxyMapView]) {
        let mut state = self.state_mut();
        *state = RouteState::default();
        for view in views {
            state.participants.insert(view.participant.name);
            if view.participant.is_proxy {
                state.proxies.insert(view.participant.name);
            }
        }
        state.map = map.iter().map(|row| (row.dfsp, row.proxy)).collect();
    }

    pub(crate) fn note_participant(&self, name: FspName, is_proxy: bool) {
        let mut state = self.state_mut();
        state.participants.insert(name);
        if is_proxy {
            state.proxies.insert(name);
        }
    }

    /// A map entry set (`Some(proxy)`) or dropped.
    pub(crate) fn note_mapping(&self, dfsp: FspName, proxy: Option<FspName>) {
        let mut state = self.state_mut();
        match proxy {
            Some(proxy) => state.map.insert(dfsp, proxy),
            None => state.map.remove(&dfsp),
        };
    }

    /// Every proxy, in name order.
    pub fn proxies(&self) -> Vec<FspName> {
        let mut proxies: Vec<FspName> = self.state().proxies.iter().copied().collect();
        proxies.sort();
        proxies
    }

    pub fn is_proxy(&self, name: FspName) -> bool {
        self.state().proxies.contains(&name)
    }

    /// The proxy the map reaches `dfsp` through.
    pub fn proxy_of(&self, dfsp: FspName) -> Option<FspName> {
        self.state().map.get(&dfsp).copied()
    }

    /// Rule 6: whether `proxy` may carry a message from `source`. It must
    /// be a proxy; it speaks as itself, or for a DFSP that is not one of
    /// this scheme and that the map does not place behind another proxy
    /// (a DFSP not in the map yet is one the proxy's scheme holds: its
    /// messages move the proxy's own positions, never another's).
    pub fn may_act_for(&self, proxy: FspName, source: FspName) -> Result<(), NotFor> {
        let state = self.state();
        if !state.proxies.contains(&proxy) {
            return Err(NotFor::NotAProxy);
        }
        if source == proxy {
            return Ok(());
        }
        if state.participants.contains(&source) {
            return Err(NotFor::LocalSource);
        }
        match state.map.get(&source) {
            Some(mapped) if *mapped != proxy => Err(NotFor::AnotherProxys),
            _ => Ok(()),
        }
    }
}

impl Hub {
    /// Who carries messages to `dfsp`, and whose mode and accounts apply
    /// to it: itself when it is a participant here, else the proxy the
    /// map reaches it through (rule 2); itself when neither (it has no
    /// endpoint, and the sender is told 3201).
    pub(crate) fn reach(&self, dfsp: FspName) -> FspName {
        if self.endpoints.participant_mode(dfsp).is_some() {
            return dfsp;
        }
        self.proxies.proxy_of(dfsp).unwrap_or(dfsp)
    }
}

impl Hub {
    /// Rule 2's learning: `dfsp` answered, through `proxy`, a discovery
    /// this hub asked of it. Kept only where the map has no entry (the
    /// ledger's rule); a refusal (the map full) is logged, and the answer
    /// still goes to the payer.
    pub(crate) async fn learn_proxy(&self, dfsp: FspName, proxy: FspName) {
        let learnt = MapProxy {
            dfsp,
            proxy,
            by_operator: false,
        };
        match self.ask(learnt).await {
            Ok(Ok(true)) => {
                tracing::info!(%dfsp, %proxy, "proxy map: learnt from a discovery answer")
            }
            Ok(Ok(false)) => {}
            Ok(Err(rejection)) => {
                tracing::warn!(%dfsp, %proxy, reason = %rejection.description, "proxy map: not learnt")
            }
            Err(error) => tracing::warn!(%dfsp, %proxy, %error, "proxy map: not learnt"),
        }
    }
}

/// Rule 2's healing: a message for `dfsp` through `proxy` was not
/// delivered, so a learnt entry mapping it there goes (the ledger keeps an
/// operator's entry, and one that moved since). On a task of its own: the
/// caller is the dispatcher's report of the failure.
pub(crate) fn heal_route(hub: Arc<Hub>, dfsp: FspName, proxy: FspName) {
    tokio::spawn(async move {
        let heal = UnmapProxy {
            dfsp,
            learnt_via: Some(proxy),
        };
        match hub.ask(heal).await {
            Ok(Ok(true)) => {
                tracing::info!(%dfsp, %proxy, "proxy map: a route through the proxy failed; the learnt entry is dropped")
            }
            Ok(Ok(false)) => {}
            Ok(Err(rejection)) => {
                tracing::warn!(%dfsp, %proxy, reason = %rejection.description, "proxy map: not healed")
            }
            Err(error) => tracing::warn!(%dfsp, %proxy, %error, "proxy map: not healed"),
        }
    });
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::{ParticipantId, ParticipantMode, ParticipantRow};

    fn fsp(name: &str) -> FspName {
        FspName::new(name).unwrap()
    }

    fn view(id: u32, name: &str, is_proxy: bool) -> ParticipantView {
        ParticipantView {
            participant: ParticipantRow {
                id: ParticipantId(id),
                name: fsp(name),
                is_hub: false,
                is_proxy,
                mode: ParticipantMode::Active,
                created_at_ms: 0,
            },
            accounts: Vec::new(),
            endpoints: Vec::new(),
        }
    }

    fn mapped(dfsp: &str, proxy: &str) -> ProxyMapView {
        ProxyMapView {
            dfsp: fsp(dfsp),
            proxy: fsp(proxy),
            by_operator: true,
            since_ms: 0,
        }
    }

    #[test]
    fn a_proxy_speaks_for_itself_and_for_other_schemes_dfsps_not_mapped_elsewhere() {
        let routes = ProxyRoutes::default();
        routes.load(
            &[
                view(1, "payerfsp", false),
                view(2, "pxAB", true),
                view(3, "pxAC", true),
            ],
            &[mapped("dfspB", "pxAB"), mapped("dfspC", "pxAC")],
        );
        let may = |proxy: &str, source: &str| routes.may_act_for(fsp(proxy), fsp(source));
        assert_eq!(may("pxAB", "pxAB"), Ok(()));
        assert_eq!(may("pxAB", "dfspB"), Ok(()));
        assert_eq!(may("pxAB", "unmapped"), Ok(()));
        assert_eq!(may("pxAB", "dfspC"), Err(NotFor::AnotherProxys));
        assert_eq!(may("pxAB", "payerfsp"), Err(NotFor::LocalSource));
        assert_eq!(may("pxAB", "pxAC"), Err(NotFor::LocalSource));
        assert_eq!(may("payerfsp", "dfspB"), Err(NotFor::NotAProxy));
        assert_eq!(may("nobody", "dfspB"), Err(NotFor::NotAProxy));

        // Kept current: a new proxy, a moved entry, a DFSP that joined.
        routes.note_participant(fsp("pxAD"), true);
        routes.note_mapping(fsp("dfspC"), Some(fsp("pxAB")));
        routes.note_participant(fsp("unmapped"), false);
        assert_eq!(may("pxAD", "dfspE"), Ok(()));
        assert_eq!(may("pxAB", "dfspC"), Ok(()));
        assert_eq!(may("pxAC", "dfspC"), Err(NotFor::AnotherProxys));
        assert_eq!(may("pxAB", "unmapped"), Err(NotFor::LocalSource));
        routes.note_mapping(fsp("dfspC"), None);
        assert_eq!(may("pxAC", "dfspC"), Ok(()));
        assert_eq!(routes.proxy_of(fsp("dfspB")), Some(fsp("pxAB")));
        assert_eq!(routes.proxy_of(fsp("dfspC")), None);
    }
}
