//! Who may use which admin route: the roles, and one table of every route
//! of the admin address (the admin API, the settlement API, `/metrics`,
//! `/stats`, the audit trail, and the console's pages and form posts) with
//! the roles that may use it.
//!
//! The table is enforced in one place per door: the admin API's
//! authentication layer ([`crate::admin_auth::authenticate_reporting`])
//! for every API route, and the console's sign-in check (its `Visitor`,
//! which every console handler takes) for the console's own routes — the
//! console then calls the API as the person, so the API's check applies to
//! its reads and changes too. Handlers check nothing themselves.
//!
//! A route is found by its method and the path pattern it was registered
//! with (axum's `MatchedPath`), so the table names exactly what the
//! router holds; a route the table does not name is the operator's alone
//! (fail closed). `docs/security.md` holds the same table, rendered by
//! [`markdown_table`]; a test checks that they agree, and another walks
//! every route the router holds against every role.
//!
//! A DFSP-scoped caller (`dfsp:<name>`) reads only its own DFSP. On a
//! route about one participant, the path names it ([`Scope::Param`]); on a
//! list or an item whose parties are in the answer, the answer is cut to
//! what is its own ([`Scope::Filtered`], see [`own_only`]): that filtering
//! happens in the same layer, after the handler, because the handlers
//! answer for the whole scheme and the DFSP's share is only known from
//! the answer (a transfer's payer and payee, a settlement's accounts).

use std::fmt;

use axum::http::Method;
use ledger::FspName;
use serde_json::Value;

/// What a caller may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Every admin route.
    Operator,
    /// Reads, and the money: funds in and out, net debit caps, settlement
    /// windows and settlements. Not the scheme's configuration (endpoints,
    /// oracles, certificates, JWS keys, onboarding, FXP corridors).
    Finance,
    /// Reads every route.
    Viewer,
    /// Reads the audit trail and the settlement reports only.
    Auditor,
    /// Reads its own DFSP only: its participant, accounts, positions,
    /// limits, transfers and settlement nets. Never writes.
    Dfsp(FspName),
}

/// A role without its DFSP: what the table and the metrics name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Operator,
    Finance,
    Viewer,
    Auditor,
    Dfsp,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Operator,
        Kind::Finance,
        Kind::Viewer,
        Kind::Auditor,
        Kind::Dfsp,
    ];

    /// The metrics' `role` label and the table's column.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Operator => "operator",
            Kind::Finance => "finance",
            Kind::Viewer => "viewer",
            Kind::Auditor => "auditor",
            Kind::Dfsp => "dfsp",
        }
    }
}

/// The roles a tokens file may name, for its error messages.
pub const ROLES_ALLOWED: &str = "operator, finance, viewer, auditor, or dfsp:<name> (a DFSP's own \
     view, e.g. dfsp:payerfsp)";

impl Role {
    pub fn kind(self) -> Kind {
        match self {
            Role::Operator => Kind::Operator,
            Role::Finance => Kind::Finance,
            Role::Viewer => Kind::Viewer,
            Role::Auditor => Kind::Auditor,
            Role::Dfsp(_) => Kind::Dfsp,
        }
    }

    /// The DFSP a scoped caller is held to.
    pub fn dfsp(self) -> Option<FspName> {
        match self {
            Role::Dfsp(name) => Some(name),
            _ => None,
        }
    }

    /// `operator`, `finance`, `viewer`, `auditor` or `dfsp:<name>`; `Err`
    /// says what is allowed.
    pub fn parse(text: &str) -> Result<Role, String> {
        match text {
            "operator" => Ok(Role::Operator),
            "finance" => Ok(Role::Finance),
            "viewer" => Ok(Role::Viewer),
            "auditor" => Ok(Role::Auditor),
            _ => match text.strip_prefix("dfsp:") {
                Some(name) => FspName::new(name).map(Role::Dfsp).ok_or_else(|| {
                    format!(
                        "role '{text}' does not name a DFSP: dfsp:<name>, the name as the hub \
                         knows it (1-32 printable characters, no '/')"
                    )
                }),
                None => Err(format!("role '{text}' is not one of {ROLES_ALLOWED}")),
            },
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Dfsp(name) => write!(f, "dfsp:{name}"),
            other => f.write_str(other.kind().as_str()),
        }
    }
}

/// Who may use a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// Anyone, without a credential (health probes, the sign-in page, the
    /// console's stylesheet and script).
    Open,
    /// Callers of these roles (a DFSP-scoped caller as its [`Scope`] says).
    Roles(&'static [Kind]),
}

/// How a DFSP-scoped caller is held to its own DFSP on a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Refused.
    Refused,
    /// Allowed when this path parameter is its own DFSP's name.
    Param(&'static str),
    /// Allowed; the answer is cut to its own DFSP ([`own_only`]).
    Filtered(Filter),
    /// Allowed: nothing of any DFSP in particular (a health answer, the
    /// settlement windows' states, its own session, the console's pages
    /// that show only what their API reads allow).
    Any,
}

/// How an answer is cut to one DFSP's share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// A JSON array of objects: those whose field names the DFSP.
    ListBy(&'static str),
    /// A transfer: its own when it is the payer or the payee, else not
    /// found.
    Transfer,
    /// A page of a transfer search: only its own transfers (as
    /// [`Filter::Transfer`]) stay in `transfers`.
    TransferPage,
    /// A settlement (or a list of them): only its own accounts' nets; a
    /// settlement without any is not found (left out of a list).
    Settlements,
    /// Rows the handler reads already cut to the DFSP (the change feed:
    /// the store filters by participant, so that a page and a long poll
    /// hold only its own): the gate hands the handler [`ScopedTo`] and
    /// cuts nothing after.
    Rows,
}

/// The DFSP a [`Filter::Rows`] route's rows are cut to, a request
/// extension the gate sets; a handler answers only its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScopedTo(pub FspName);

/// One route of the admin address and who may use it.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// `GET` (HEAD too), `POST`, `PUT`, `DELETE`.
    pub method: &'static str,
    /// The path pattern as registered on the router (`:name` parameters).
    pub path: &'static str,
    pub who: Who,
    /// A DFSP-scoped caller, when [`Who::Roles`].
    pub dfsp: Scope,
}

const OPERATOR: &[Kind] = &[Kind::Operator];
/// The money: funds, caps, settlement.
const FINANCE: &[Kind] = &[Kind::Operator, Kind::Finance];
/// Everything that reads the scheme as a whole.
const READERS: &[Kind] = &[Kind::Operator, Kind::Finance, Kind::Viewer];
/// The audit trail and the reports: the readers and the auditor.
const AUDIT: &[Kind] = &[Kind::Operator, Kind::Finance, Kind::Viewer, Kind::Auditor];
/// Every signed-in role (DFSPs as the scope says).
const EVERYONE: &[Kind] = &[Kind::Operator, Kind::Finance, Kind::Viewer, Kind::Auditor];

const fn rule(method: &'static str, path: &'static str, who: &'static [Kind], dfsp: Scope) -> Rule {
    Rule {
        method,
        path,
        who: Who::Roles(who),
        dfsp,
    }
}

const fn open(method: &'static str, path: &'static str) -> Rule {
    Rule {
        method,
        path,
        who: Who::Open,
        dfsp: Scope::Any,
    }
}

const OWN: Scope = Scope::Param("name");
const NO: Scope = Scope::Refused;

/// Every route of the admin address. Order: as the routers register them.
pub const TABLE: &[Rule] = &[
    // Health: probes need no credential.
    open("GET", "/health"),
    open("GET", "/health/live"),
    open("GET", "/health/ready"),
    rule("GET", "/v2/health", EVERYONE, Scope::Any),
    // Participants (central-ledger's admin API).
    rule(
        "GET",
        "/participants",
        READERS,
        Scope::Filtered(Filter::ListBy("name")),
    ),
    rule("POST", "/participants", OPERATOR, NO),
    rule(
        "GET",
        "/participants/limits",
        READERS,
        Scope::Filtered(Filter::ListBy("name")),
    ),
    rule("GET", "/participants/:name", READERS, OWN),
    rule("PUT", "/participants/:name", OPERATOR, NO),
    rule("GET", "/participants/:name/accounts", READERS, OWN),
    rule("POST", "/participants/:name/accounts", OPERATOR, NO),
    rule("PUT", "/participants/:name/accounts/:id", OPERATOR, NO),
    rule("POST", "/participants/:name/accounts/:id", FINANCE, NO),
    rule(
        "PUT",
        "/participants/:name/accounts/:id/transfers/:transfer_id",
        FINANCE,
        NO,
    ),
    rule(
        "POST",
        "/participants/:name/initialPositionAndLimits",
        OPERATOR,
        NO,
    ),
    rule("GET", "/participants/:name/limits", READERS, OWN),
    rule("PUT", "/participants/:name/limits", FINANCE, NO),
    rule("GET", "/participants/:name/endpoints", READERS, OWN),
    rule("POST", "/participants/:name/endpoints", OPERATOR, NO),
    rule("GET", "/participants/:name/positions", READERS, OWN),
    rule("GET", "/participants/:name/fxCorridors", READERS, OWN),
    rule("PUT", "/participants/:name/fxCorridors", OPERATOR, NO),
    // A DFSP's statement: a report (the auditor reads it too).
    rule("GET", "/participants/:name/statement", AUDIT, OWN),
    rule("GET", "/participants/:name/jwsKey", READERS, NO),
    rule("PUT", "/participants/:name/jwsKey", OPERATOR, NO),
    rule("DELETE", "/participants/:name/jwsKey", OPERATOR, NO),
    rule("GET", "/participants/:name/certificates", READERS, NO),
    rule("POST", "/participants/:name/certificates", OPERATOR, NO),
    rule(
        "DELETE",
        "/participants/:name/certificates/:fingerprint",
        OPERATOR,
        NO,
    ),
    rule("GET", "/settlementModels", READERS, NO),
    rule("POST", "/settlementModels", OPERATOR, NO),
    // Four-eyes pending changes: whoever may make a change may decide on
    // it (the handler checks the original route's rule for the decider).
    rule("GET", "/approvals", READERS, NO),
    rule("GET", "/approvals/:id", READERS, NO),
    rule("POST", "/approvals/:id", FINANCE, NO),
    rule("GET", "/oracles", READERS, NO),
    rule("POST", "/oracles", OPERATOR, NO),
    rule("PUT", "/oracles/:id", OPERATOR, NO),
    rule("DELETE", "/oracles/:id", OPERATOR, NO),
    rule("GET", "/proxyMap", READERS, NO),
    rule("PUT", "/proxyMap/:fsp_id", OPERATOR, NO),
    rule("DELETE", "/proxyMap/:fsp_id", OPERATOR, NO),
    rule("GET", "/fxps", READERS, NO),
    rule(
        "GET",
        "/transfers",
        READERS,
        Scope::Filtered(Filter::TransferPage),
    ),
    rule(
        "GET",
        "/transfers/:id",
        READERS,
        Scope::Filtered(Filter::Transfer),
    ),
    rule(
        "GET",
        "/transfers/:id/messages",
        READERS,
        Scope::Filtered(Filter::Transfer),
    ),
    // Settlement (central-settlement's API).
    rule("GET", "/v2/settlementWindows", READERS, Scope::Any),
    rule("GET", "/v2/settlementWindows/:id", READERS, Scope::Any),
    rule("POST", "/v2/settlementWindows/:id", FINANCE, NO),
    rule(
        "GET",
        "/v2/settlements",
        READERS,
        Scope::Filtered(Filter::Settlements),
    ),
    rule("POST", "/v2/settlements", FINANCE, NO),
    rule(
        "GET",
        "/v2/settlements/:id",
        READERS,
        Scope::Filtered(Filter::Settlements),
    ),
    rule("PUT", "/v2/settlements/:id", FINANCE, NO),
    rule("POST", "/v2/settlements/:id/finalize", FINANCE, NO),
    rule("GET", "/v2/settlements/:id/report", AUDIT, NO),
    rule(
        "GET",
        "/v2/settlements/:id/participants/:pid",
        READERS,
        Scope::Filtered(Filter::Settlements),
    ),
    rule("PUT", "/v2/settlements/:id/participants/:pid", FINANCE, NO),
    rule(
        "GET",
        "/v2/settlements/:id/participants/:pid/accounts/:aid",
        READERS,
        Scope::Filtered(Filter::Settlements),
    ),
    rule(
        "PUT",
        "/v2/settlements/:id/participants/:pid/accounts/:aid",
        FINANCE,
        NO,
    ),
    // The change feed: the whole scheme's, or a DFSP's own.
    rule("GET", "/feed", AUDIT, Scope::Filtered(Filter::Rows)),
    // The hourly rollup (the dashboard): the scheme's, or a DFSP's own
    // pairs.
    rule(
        "GET",
        "/stats/hourly",
        READERS,
        Scope::Filtered(Filter::Rows),
    ),
    // The audit trail, callbacks, statistics, metrics.
    rule("GET", "/audit-events", AUDIT, NO),
    rule(
        "GET",
        "/callbacks/health",
        READERS,
        Scope::Filtered(Filter::ListBy("participant")),
    ),
    rule("GET", "/callbacks/dead-letters", READERS, NO),
    rule("POST", "/callbacks/dead-letters/resend", OPERATOR, NO),
    rule("GET", "/stats/stages", READERS, NO),
    rule("DELETE", "/stats/stages", OPERATOR, NO),
    rule("GET", "/stats/traces", READERS, NO),
    rule("GET", "/stats/dfsps", READERS, NO),
    rule("GET", "/stats/transfer-errors", READERS, NO),
    rule("GET", "/stats/refusals", READERS, NO),
    rule("GET", "/metrics", READERS, NO),
    // The console: its pages and form posts.
    open("GET", "/console"),
    rule("GET", "/console/", EVERYONE, Scope::Any),
    open("GET", "/console/sign-in"),
    open("POST", "/console/sign-in"),
    open("GET", "/console/oidc/start"),
    open("GET", "/console/oidc/callback"),
    rule("POST", "/console/sign-out", EVERYONE, Scope::Any),
    open("GET", "/console/assets/console.css"),
    open("GET", "/console/assets/console.js"),
    rule("GET", "/console/participants", READERS, NO),
    rule("POST", "/console/participants", OPERATOR, NO),
    rule("GET", "/console/participants/:name", READERS, OWN),
    rule("POST", "/console/participants/:name/limits", FINANCE, NO),
    rule("POST", "/console/participants/:name/active", OPERATOR, NO),
    rule("POST", "/console/participants/:name/mode", OPERATOR, NO),
    rule(
        "POST",
        "/console/participants/:name/endpoints",
        OPERATOR,
        NO,
    ),
    rule("POST", "/console/participants/:name/funds", FINANCE, NO),
    rule(
        "POST",
        "/console/participants/:name/funds/confirm",
        FINANCE,
        NO,
    ),
    rule(
        "POST",
        "/console/participants/:name/funds/abort",
        FINANCE,
        NO,
    ),
    rule("GET", "/console/participants/:name/statement", AUDIT, OWN),
    rule(
        "GET",
        "/console/participants/:name/statement.csv",
        AUDIT,
        OWN,
    ),
    rule("GET", "/console/fx", READERS, NO),
    rule("POST", "/console/fx/corridors", OPERATOR, NO),
    rule("GET", "/console/transfers", READERS, Scope::Any),
    rule("GET", "/console/dashboard", READERS, Scope::Any),
    rule(
        "POST",
        "/console/transfers/dead-letters/resend",
        OPERATOR,
        NO,
    ),
    rule("GET", "/console/settlement", READERS, Scope::Any),
    rule("POST", "/console/settlement/windows/:id/close", FINANCE, NO),
    rule("POST", "/console/settlement/settlements", FINANCE, NO),
    rule(
        "GET",
        "/console/settlement/settlements/:id",
        READERS,
        Scope::Any,
    ),
    rule(
        "POST",
        "/console/settlement/settlements/:id/advance",
        FINANCE,
        NO,
    ),
    rule(
        "POST",
        "/console/settlement/settlements/:id/finalize",
        FINANCE,
        NO,
    ),
    rule(
        "POST",
        "/console/settlement/settlements/:id/finalize/confirm",
        FINANCE,
        NO,
    ),
    rule(
        "POST",
        "/console/settlement/settlements/:id/abort",
        FINANCE,
        NO,
    ),
    rule(
        "GET",
        "/console/settlement/settlements/:id/report.csv",
        AUDIT,
        NO,
    ),
    rule("GET", "/console/audit", AUDIT, NO),
    rule("GET", "/console/approvals", READERS, NO),
    rule("POST", "/console/approvals/:id", FINANCE, NO),
    rule("GET", "/console/scheme", READERS, NO),
    rule("POST", "/console/scheme/currencies", OPERATOR, NO),
    rule("POST", "/console/scheme/settlement-models", OPERATOR, NO),
    rule("POST", "/console/scheme/oracles", OPERATOR, NO),
];

/// Why a request was refused: the metrics' `reason` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The caller's role may not use the route.
    Role,
    /// A DFSP-scoped caller asked for another DFSP's data.
    OtherDfsp,
    /// The route is in no table entry: the operator's alone.
    UnlistedRoute,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Role => "role",
            Refusal::OtherDfsp => "other_dfsp",
            Refusal::UnlistedRoute => "unlisted_route",
        }
    }

    /// The refusal's words, for the answer and the log.
    pub fn describe(self, role: Role, method: &Method, path: &str) -> String {
        match self {
            Refusal::Role => format!("Forbidden: role {role} may not {method} {path}"),
            Refusal::OtherDfsp => format!(
                "Forbidden: role {role} may read only its own DFSP's data, not {method} {path}"
            ),
            Refusal::UnlistedRoute => {
                format!("Forbidden: {method} {path} is for the operator role only")
            }
        }
    }
}

/// What the gate does with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Allowed; the answer is cut to this DFSP's share.
    Filter(Filter, FspName),
    Refuse(Refusal),
}

/// The table's entry for a request, if any (HEAD is GET's).
pub fn rule_for(method: &Method, pattern: &str) -> Option<&'static Rule> {
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    TABLE
        .iter()
        .find(|rule| rule.method == method && rule.path == pattern)
}

/// Whether `role` may make this request. `pattern` is the route's matched
/// path pattern (`None`: no route matched, a 404 or 405 to come) and
/// `params` its path parameters.
pub fn decide(
    role: Role,
    method: &Method,
    pattern: Option<&str>,
    params: &[(&str, &str)],
) -> Decision {
    let Some(rule) = pattern.and_then(|pattern| rule_for(method, pattern)) else {
        // Unlisted: the operator's alone, so a route added without an
        // entry is never open to the others by mistake.
        return match role {
            Role::Operator => Decision::Allow,
            _ => Decision::Refuse(Refusal::UnlistedRoute),
        };
    };
    let roles = match rule.who {
        Who::Open => return Decision::Allow,
        Who::Roles(roles) => roles,
    };
    let Role::Dfsp(own) = role else {
        return if roles.contains(&role.kind()) {
            Decision::Allow
        } else {
            Decision::Refuse(Refusal::Role)
        };
    };
    match rule.dfsp {
        Scope::Refused => Decision::Refuse(Refusal::Role),
        Scope::Any => Decision::Allow,
        Scope::Filtered(filter) => Decision::Filter(filter, own),
        Scope::Param(name) => {
            let named = params.iter().find(|(key, _)| *key == name);
            match named {
                Some((_, value)) if *value == own.as_str() => Decision::Allow,
                _ => Decision::Refuse(Refusal::OtherDfsp),
            }
        }
    }
}

/// [`decide`] for a request that has been routed: its matched path pattern
/// (axum's `MatchedPath`, absent when no route matched) and its path
/// parameters are read from it.
pub async fn decide_for_parts(role: Role, parts: &mut axum::http::request::Parts) -> Decision {
    use axum::extract::FromRequestParts as _;
    let pattern = parts
        .extensions
        .get::<axum::extract::MatchedPath>()
        .map(|matched| matched.as_str().to_string());
    let params = axum::extract::RawPathParams::from_request_parts(parts, &())
        .await
        .map(|params| {
            params
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let params: Vec<(&str, &str)> = params
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect();
    decide(role, &parts.method, pattern.as_deref(), &params)
}

/// Whether `role` may use this route with these path parameters: for the
/// console, to show only the links and forms a person may use.
pub fn may(role: Role, method: &Method, pattern: &str, params: &[(&str, &str)]) -> bool {
    !matches!(
        decide(role, method, Some(pattern), params),
        Decision::Refuse(_)
    )
}

/// A DFSP's own, for cutting answers: its name and its accounts' ids
/// (settlements name accounts, not DFSPs).
#[derive(Clone, Debug, Default)]
pub struct Own {
    pub name: String,
    pub accounts: Vec<u64>,
}

/// `answer` cut to `own`'s share, as [`Filter`] says; `None`: nothing of
/// it is the DFSP's (answered as not found, so that whether another
/// DFSP's transfer or settlement exists is not told either).
///
/// The one place answers are filtered: the handlers answer for the scheme
/// and stay unaware of scoped callers.
pub fn own_only(filter: Filter, own: &Own, answer: Value) -> Option<Value> {
    match (filter, answer) {
        (Filter::ListBy(field), Value::Array(items)) => Some(Value::Array(
            items
                .into_iter()
                .filter(|item| item[field].as_str() == Some(own.name.as_str()))
                .collect(),
        )),
        (Filter::Transfer, transfer) => {
            let party = |field: &str| transfer[field].as_str() == Some(own.name.as_str());
            (party("payerFsp") || party("payeeFsp")).then_some(transfer)
        }
        (Filter::TransferPage, mut page) => {
            let transfers = page.get_mut("transfers")?.as_array_mut()?;
            transfers
                .retain(|transfer| own_only(Filter::Transfer, own, transfer.clone()).is_some());
            Some(page)
        }
        (Filter::Settlements, Value::Array(settlements)) => Some(Value::Array(
            settlements
                .into_iter()
                .filter_map(|settlement| own_settlement(own, settlement))
                .collect(),
        )),
        (Filter::Settlements, settlement) => own_settlement(own, settlement),
        // Cut by the handler's read (the gate never filters these after).
        (Filter::Rows, answer) => Some(answer),
        // Not the shape the filter reads: nothing is known to be its own.
        (Filter::ListBy(_), _) => None,
    }
}

/// A settlement with only `own`'s participant entry (by its accounts).
fn own_settlement(own: &Own, mut settlement: Value) -> Option<Value> {
    let participants = settlement.get_mut("participants")?.as_array_mut()?;
    participants.retain(|participant| {
        participant["accounts"].as_array().is_some_and(|accounts| {
            accounts.iter().any(|account| {
                account["id"]
                    .as_u64()
                    .is_some_and(|id| own.accounts.contains(&id))
            })
        })
    });
    (!participants.is_empty()).then_some(settlement)
}

/// The table as docs/security.md shows it (a test checks they agree).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| Method | Route | operator | finance | viewer | auditor | `dfsp:<name>` |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|\n");
    for rule in TABLE {
        let cells: Vec<String> = match rule.who {
            Who::Open => vec!["open".to_string(); 5],
            Who::Roles(roles) => Kind::ALL
                .iter()
                .map(|kind| match kind {
                    Kind::Dfsp => match rule.dfsp {
                        Scope::Refused => "-".to_string(),
                        Scope::Any => "yes".to_string(),
                        Scope::Param(name) => format!("own `:{name}`"),
                        Scope::Filtered(Filter::ListBy(field)) => format!("own `{field}` only"),
                        Scope::Filtered(Filter::Transfer) => "own (payer or payee)".to_string(),
                        Scope::Filtered(Filter::TransferPage) => {
                            "own (payer or payee) only".to_string()
                        }
                        Scope::Filtered(Filter::Settlements) => "own accounts only".to_string(),
                        Scope::Filtered(Filter::Rows) => {
                            "own (participant or counterparty) only".to_string()
                        }
                    },
                    kind if roles.contains(kind) => "yes".to_string(),
                    _ => "-".to_string(),
                })
                .collect(),
        };
        out.push_str(&format!(
            "| {} | `{}` | {} |\n",
            rule.method,
            rule.path,
            cells.join(" | ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dfsp(name: &str) -> Role {
        Role::Dfsp(FspName::new(name).unwrap())
    }

    #[test]
    fn roles_read_and_print_as_the_tokens_file_spells_them() {
        for text in ["operator", "finance", "viewer", "auditor", "dfsp:payerfsp"] {
            assert_eq!(Role::parse(text).unwrap().to_string(), text);
        }
        let unknown = Role::parse("root").unwrap_err();
        assert!(unknown.contains("dfsp:<name>"), "{unknown}");
        let nameless = Role::parse("dfsp:").unwrap_err();
        assert!(nameless.contains("does not name a DFSP"), "{nameless}");
        assert!(Role::parse("dfsp:a/b").is_err());
    }

    #[test]
    fn each_route_is_listed_once() {
        let mut seen = std::collections::HashSet::new();
        for rule in TABLE {
            assert!(
                seen.insert((rule.method, rule.path)),
                "{} {} twice",
                rule.method,
                rule.path
            );
            if let Scope::Param(name) = rule.dfsp {
                assert!(
                    rule.path.contains(&format!(":{name}")),
                    "{} {}: no :{name}",
                    rule.method,
                    rule.path
                );
            }
        }
    }

    #[test]
    fn a_dfsp_reads_only_its_own_and_never_writes() {
        let payer = dfsp("payerfsp");
        let own = [("name", "payerfsp")];
        let other = [("name", "payeefsp")];
        let path = Some("/participants/:name/positions");
        assert_eq!(decide(payer, &Method::GET, path, &own), Decision::Allow);
        assert_eq!(
            decide(payer, &Method::GET, path, &other),
            Decision::Refuse(Refusal::OtherDfsp)
        );
        assert_eq!(
            decide(
                payer,
                &Method::PUT,
                Some("/participants/:name/limits"),
                &own
            ),
            Decision::Refuse(Refusal::Role)
        );
        for rule in TABLE.iter().filter(|rule| rule.method != "GET") {
            if let Who::Roles(_) = rule.who {
                let allowed = decide(payer, &rule.method.parse().unwrap(), Some(rule.path), &own);
                let harmless = ["/console/sign-out"].contains(&rule.path);
                assert!(
                    harmless || matches!(allowed, Decision::Refuse(_)),
                    "{} {}",
                    rule.method,
                    rule.path
                );
            }
        }
        assert_eq!(
            decide(Role::Viewer, &Method::GET, None, &[]),
            Decision::Refuse(Refusal::UnlistedRoute)
        );
        assert_eq!(
            decide(Role::Operator, &Method::GET, None, &[]),
            Decision::Allow
        );
    }

    #[test]
    fn answers_are_cut_to_the_dfsp_share() {
        let own = Own {
            name: "payerfsp".into(),
            accounts: vec![3, 4],
        };
        let list = serde_json::json!([{"name": "payerfsp"}, {"name": "payeefsp"}]);
        assert_eq!(
            own_only(Filter::ListBy("name"), &own, list),
            Some(serde_json::json!([{"name": "payerfsp"}]))
        );
        let theirs = serde_json::json!({"payerFsp": "payeefsp", "payeeFsp": "other"});
        assert_eq!(own_only(Filter::Transfer, &own, theirs.clone()), None);
        let ours = serde_json::json!({"payerFsp": "payeefsp", "payeeFsp": "payerfsp"});
        assert!(own_only(Filter::Transfer, &own, ours.clone()).is_some());
        let page = serde_json::json!({"transfers": [theirs, ours], "next": "7", "complete": true});
        let kept = own_only(Filter::TransferPage, &own, page).expect("a page");
        assert_eq!(kept["transfers"].as_array().map(Vec::len), Some(1));
        assert_eq!(kept["transfers"][0]["payeeFsp"], own.name.as_str());
        assert_eq!(kept["next"], "7");
        let settlement = |id: u64, accounts: &[u64]| {
            serde_json::json!({"id": id, "participants": accounts.iter()
                .map(|a| serde_json::json!({"id": a + 100, "accounts": [{"id": a}]}))
                .collect::<Vec<_>>()})
        };
        let list = serde_json::json!([settlement(1, &[3, 7]), settlement(2, &[7, 8])]);
        assert_eq!(
            own_only(Filter::Settlements, &own, list),
            Some(serde_json::json!([settlement(1, &[3])]))
        );
        assert_eq!(
            own_only(Filter::Settlements, &own, settlement(2, &[7])),
            None
        );
    }
}
