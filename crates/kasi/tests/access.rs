//! Every route of the admin address against every role, as the access
//! table (`hub::access::TABLE`) says: the routes are read from the real
//! router (the admin API and the console, as `kasi serve` builds them),
//! so a route added without a table entry, or an entry left for a route
//! that is gone, fails here; each is then asked by each role over HTTP,
//! and the gate's verdict must be the table's.

mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use engine::{recover, Engine, EngineConfig};
use hub::access::{Filter, Kind, Rule, Scope, Who, TABLE};
use hub::admin_auth::{token_hash, AdminAuth};
use hub::notify::{Dispatcher, DispatcherConfig};
use hub::{Hub, HubConfig};
use ledger::{FspName, Limits};
use store::sqlite::{SqliteOptions, SqliteStore};
use support::{http, Response};

/// The tokens of the roles walked: `(role as the file spells it, token)`.
const ROLES: [(&str, &str); 5] = [
    ("operator", "kasi_walk_operator"),
    ("finance", "kasi_walk_finance"),
    ("viewer", "kasi_walk_viewer"),
    ("auditor", "kasi_walk_auditor"),
    ("dfsp:payerfsp", "kasi_walk_dfsp"),
];

/// `(METHOD, pattern)` of every route the router holds, from its `Debug`
/// form (axum prints each path with the methods it routes). HEAD is
/// GET's; `/health`'s and the settlement API's own health are routes too.
fn routes_of(router: &axum::Router) -> BTreeSet<(String, String)> {
    let text = format!("{router:?}");
    // The fallback router's ids are its own: read the path router only.
    let text = text.split("fallback_router").next().unwrap();
    let (routes, paths) = text
        .split_once("node: Node { paths: {")
        .expect("axum's Router Debug names its paths");
    let mut by_id = std::collections::HashMap::new();
    for entry in paths.split("RouteId(").skip(1) {
        let (id, rest) = entry.split_once("): \"").unwrap();
        let path = rest.split('"').next().unwrap();
        by_id.insert(id.to_string(), path.to_string());
    }
    let mut found = BTreeSet::new();
    for entry in routes.split("RouteId(").skip(1) {
        let (id, rest) = entry.split_once(')').unwrap();
        let Some(methods) = rest.strip_prefix(": MethodRouter(MethodRouter { ") else {
            continue;
        };
        let path = &by_id[id];
        for field in methods.split(", ") {
            let Some((method, endpoint)) = field.split_once(": ") else {
                continue;
            };
            let method = match method {
                "get" => "GET",
                "post" => "POST",
                "put" => "PUT",
                "delete" => "DELETE",
                "patch" => "PATCH",
                "options" => "OPTIONS",
                "trace" => "TRACE",
                "connect" => "CONNECT",
                _ => continue,
            };
            if endpoint != "None" {
                found.insert((method.to_string(), path.clone()));
            }
        }
    }
    assert!(
        found.len() > 50,
        "the router's routes could not be read from its Debug form: {found:?}"
    );
    found
}

struct Walk {
    admin: SocketAddr,
    routes: BTreeSet<(String, String)>,
    _engine: Engine,
    _dir: tempfile::TempDir,
    _runtime: tokio::runtime::Runtime,
}

/// A hub in-process with a tokens file of every role, its admin address
/// (API and console, as `kasi serve` builds it) on an ephemeral port.
fn start() -> Walk {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    let (ledger, _) = recover(&mut store, Limits::default()).unwrap();
    let engine = Engine::start(ledger, Box::new(store), EngineConfig::default());
    let file: String = ROLES
        .iter()
        .map(|(role, token)| format!("{} {role} {}\n", role.replace(':', "-"), token_hash(token)))
        .collect();
    let mut config = HubConfig::new(FspName::new("Hub").unwrap());
    config.admin_auth = Arc::new(AdminAuth::parse(&file).unwrap());
    let handle = engine.handle();
    let (admin, routes) = runtime.block_on(async move {
        let hub = Arc::new(
            Hub::new(config, handle, Dispatcher::new(DispatcherConfig::default()))
                .await
                .unwrap(),
        );
        let api = hub::admin_api(hub.clone());
        let refused = hub.clone();
        let console = console::router(
            api.clone(),
            hub.config.admin_auth.clone(),
            Some(Arc::new(
                move |refusal: &hub::admin_auth::GateRefusal<'_>| {
                    refused.admin_gate_refused(refusal)
                },
            )),
            "Hub",
            false,
        );
        let routes = routes_of(&api.clone().merge(console.clone()));
        // One route no entry names: the operator's alone.
        let unlisted = axum::Router::new()
            .route("/unlisted", axum::routing::get(|| async { "unlisted" }))
            .layer(axum::middleware::from_fn({
                let auth = hub.config.admin_auth.clone();
                move |request, next| hub::admin_auth::authenticate(auth.clone(), request, next)
            }));
        let app = hub::admin_app_with(hub, api.merge(unlisted), console);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = listener.local_addr().unwrap();
        tokio::spawn(hub::server::serve(
            listener,
            app,
            std::future::pending(),
            hub::server::ServeOptions::default(),
        ));
        (admin, routes)
    });
    Walk {
        admin,
        routes,
        _engine: engine,
        _dir: dir,
        _runtime: runtime,
    }
}

impl Walk {
    fn ask(&self, method: &str, path: &str, credential: &Credential) -> Response {
        let mut headers = vec![("Content-Type".to_string(), "application/json".to_string())];
        match credential {
            Credential::Bearer(token) => {
                headers.push(("Authorization".into(), format!("Bearer {token}")))
            }
            Credential::Cookie(cookie) => headers.push(("Cookie".into(), cookie.clone())),
        }
        http(self.admin, method, path, &headers, b"")
    }
}

enum Credential {
    Bearer(String),
    Cookie(String),
}

/// Whether the access check refused it (not the handler: a refusal of the
/// table always says `Forbidden: `, in the API's error or the console's
/// page; a stale CSRF token, a body the handler refuses, say otherwise).
fn refused_by_the_table(response: &Response) -> bool {
    response.status == 403 && response.text().contains("Forbidden: ")
}

/// A concrete path for a pattern: `:name` is `dfsp`, any other parameter 1.
fn concrete(pattern: &str, dfsp: &str) -> String {
    pattern
        .split('/')
        .map(|segment| match segment.strip_prefix(':') {
            Some("name") => dfsp.to_string(),
            Some(_) => "1".to_string(),
            None => segment.to_string(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// What the table says of `kind` on `rule`, the path naming `dfsp` (the
/// scoped caller's own is payerfsp).
fn expected(rule: &Rule, kind: Kind, dfsp: &str) -> bool {
    match (rule.who, kind) {
        (Who::Open, _) => true,
        (Who::Roles(_), Kind::Dfsp) => match rule.dfsp {
            Scope::Refused => false,
            Scope::Any | Scope::Filtered(_) => true,
            Scope::Param(_) => dfsp == "payerfsp",
        },
        (Who::Roles(roles), kind) => roles.contains(&kind),
    }
}

#[test]
fn every_route_answers_every_role_as_the_table_says() {
    let walk = start();
    let listed: BTreeSet<(String, String)> = TABLE
        .iter()
        .map(|rule| (rule.method.to_string(), rule.path.to_string()))
        .collect();
    let routes: BTreeSet<_> = walk
        .routes
        .iter()
        .filter(|(_, path)| path != "/unlisted")
        .cloned()
        .collect();
    let unlisted: Vec<_> = routes.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "routes without an access table entry (hub::access::TABLE, and docs/security.md): {unlisted:?}"
    );
    let stale: Vec<_> = listed.difference(&routes).collect();
    assert!(
        stale.is_empty(),
        "table entries for routes the router does not hold: {stale:?}"
    );

    let mut checked = 0;
    for (role, token) in ROLES {
        let kind = hub::access::Role::parse(role).unwrap().kind();
        let cookie = support::console_sign_in(walk.admin, token);
        for rule in TABLE {
            let console = rule.path.starts_with("/console");
            let credential = match console {
                true => Credential::Cookie(cookie.clone()),
                false => Credential::Bearer(token.to_string()),
            };
            let names: &[&str] = match rule.dfsp {
                Scope::Param(_) => &["payerfsp", "payeefsp"],
                _ => &["payerfsp"],
            };
            for dfsp in names {
                // Signing out would end the session the walk goes on with.
                if rule.path == "/console/sign-out" {
                    continue;
                }
                let path = concrete(rule.path, dfsp);
                let response = walk.ask(rule.method, &path, &credential);
                assert_eq!(
                    !refused_by_the_table(&response),
                    expected(rule, kind, dfsp),
                    "{role} {} {path}: {response:?}",
                    rule.method
                );
                checked += 1;
            }
        }
        // Unlisted: the operator's alone.
        let response = walk.ask("GET", "/unlisted", &Credential::Bearer(token.to_string()));
        assert_eq!(
            refused_by_the_table(&response),
            kind != Kind::Operator,
            "{role} GET /unlisted: {response:?}"
        );
    }
    assert!(checked > 5 * TABLE.len(), "{checked}");
}

#[test]
fn the_docs_table_is_the_code_table() {
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/security.md"),
    )
    .unwrap();
    let (_, rest) = docs
        .split_once("<!-- access-table:begin -->\n")
        .expect("docs/security.md marks the access table's start");
    let (table, _) = rest
        .split_once("<!-- access-table:end -->")
        .expect("docs/security.md marks the access table's end");
    let wanted = hub::access::markdown_table();
    assert!(
        table.trim() == wanted.trim(),
        "docs/security.md's access table differs from hub::access::TABLE; paste this between its markers:\n{wanted}"
    );
    // Every filter the table uses is described there.
    for rule in TABLE {
        if let Scope::Filtered(Filter::ListBy(field)) = rule.dfsp {
            assert!(table.contains(field));
        }
    }
}
