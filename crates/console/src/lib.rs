//! The operator console: the hub as a person sees it, served by kasi
//! itself under `/console/` on the admin address.
//!
//! Every page is rendered on the server from the admin API's own answers,
//! and every change a person makes is a request to the admin API: the
//! console holds the admin router and calls it in-process
//! (`tower::ServiceExt::oneshot`) with the signed-in person's credential,
//! so the same authentication, the same role rule, the same validation
//! messages and the same audit event apply as for an operator's script.
//! What a person sees and what a script sees cannot disagree, because they
//! are the same answers.
//!
//! Sign-in: with admin credentials (`--admin-tokens`) a person signs in
//! with their bearer token (kept in a server-side session; the browser
//! holds only a random session id in an `HttpOnly`, `SameSite=Strict`
//! cookie), or is signed in by the client certificate their browser
//! presents on an admin address that asks for one. Without credentials
//! (the admin address open on loopback) everyone is the open operator.
//! Every form carries the session's CSRF token.
//!
//! Roles: every page and form post is in the access table
//! (`hub::access`), checked once, in one layer of every console route
//! (`session::checked`: before the handler's own extractors); a page shows only the links, forms and
//! sections its visitor may use, and the API refuses the rest anyway. A
//! DFSP-scoped person (`dfsp:<name>`) has a portal: the overview is its
//! own participant page, and the transfers and settlement pages show what
//! the API lets it read (its own transfers, its own settlement nets).
//!
//! Progressive enhancement only: the pages work without JavaScript; a small
//! script (`assets/console.js`) refreshes the overview in place.

mod api;
mod approvals;
mod audit;
mod chart;
mod dashboard;
mod fx;
mod overview;
mod page;
mod participants;
mod provider;
mod scheme;
mod session;
mod settlement;
mod statement;
mod transfers;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use hub::admin_auth::AdminAuth;

pub use session::SESSION_COOKIE;

/// What the console's handlers share.
pub struct Console {
    /// The admin API, behind its authentication layer: every read and
    /// every change goes through it.
    api: Router,
    auth: Arc<AdminAuth>,
    /// The hub participant's name (`--hub-name`): its accounts are the
    /// scheme's.
    hub_name: String,
    sessions: session::Sessions,
    /// Sign-ins through the identity provider: the key of their cookies,
    /// and the callbacks used.
    sign_ins: provider::SignIns,
    /// Told of every console request the access table refuses (the hub
    /// counts, logs and audits it as the API's refusals).
    on_refusal: Option<hub::admin_auth::OnRefusal>,
    /// The admin address is served over TLS: cookies are `Secure`.
    secure_cookies: bool,
    rates: overview::Rates,
}

/// The console's routes, to be served beside the admin API (not behind
/// its bearer-token layer: the console signs people in itself and calls
/// the API with their credential).
pub fn router(
    api: Router,
    auth: Arc<AdminAuth>,
    on_refusal: Option<hub::admin_auth::OnRefusal>,
    hub_name: &str,
    secure_cookies: bool,
) -> Router {
    let console = Arc::new(Console {
        api,
        auth,
        on_refusal,
        hub_name: hub_name.to_string(),
        sessions: session::Sessions::default(),
        sign_ins: provider::SignIns::default(),
        secure_cookies,
        rates: overview::Rates::default(),
    });
    Router::new()
        .route("/console", get(page::to_overview))
        .route("/console/", get(overview::show))
        .route(
            "/console/sign-in",
            get(session::sign_in_page).post(session::sign_in),
        )
        .route("/console/oidc/start", get(provider::start))
        .route("/console/oidc/callback", get(provider::callback))
        .route("/console/sign-out", post(session::sign_out))
        .route("/console/assets/console.css", get(page::stylesheet))
        .route("/console/assets/console.js", get(page::script))
        .route(
            "/console/participants",
            get(participants::list).post(participants::onboard),
        )
        .route("/console/participants/:name", get(participants::detail))
        .route(
            "/console/participants/:name/limits",
            post(participants::set_limit),
        )
        .route(
            "/console/participants/:name/active",
            post(participants::set_active),
        )
        .route(
            "/console/participants/:name/mode",
            post(participants::set_mode),
        )
        .route(
            "/console/participants/:name/endpoints",
            post(participants::set_endpoint),
        )
        .route(
            "/console/participants/:name/funds",
            post(participants::funds_preview),
        )
        .route(
            "/console/participants/:name/funds/confirm",
            post(participants::funds_confirm),
        )
        .route(
            "/console/participants/:name/funds/abort",
            post(participants::funds_abort),
        )
        .route(
            "/console/participants/:name/statement",
            get(statement::show),
        )
        .route(
            "/console/participants/:name/statement.csv",
            get(statement::csv),
        )
        .route("/console/fx", get(fx::show))
        .route("/console/fx/corridors", post(fx::set_corridors))
        .route("/console/transfers", get(transfers::show))
        .route("/console/dashboard", get(dashboard::show))
        .route(
            "/console/transfers/dead-letters/resend",
            post(transfers::resend),
        )
        .route("/console/settlement", get(settlement::overview))
        .route(
            "/console/settlement/windows/:id/close",
            post(settlement::close_window),
        )
        .route(
            "/console/settlement/settlements",
            post(settlement::create_settlement),
        )
        .route(
            "/console/settlement/settlements/:id",
            get(settlement::detail),
        )
        .route(
            "/console/settlement/settlements/:id/advance",
            post(settlement::advance),
        )
        .route(
            "/console/settlement/settlements/:id/finalize",
            post(settlement::finalize_review),
        )
        .route(
            "/console/settlement/settlements/:id/finalize/confirm",
            post(settlement::finalize),
        )
        .route(
            "/console/settlement/settlements/:id/abort",
            post(settlement::abort),
        )
        .route(
            "/console/settlement/settlements/:id/report.csv",
            get(settlement::report),
        )
        .route("/console/audit", get(audit::show))
        .route("/console/approvals", get(approvals::show))
        .route("/console/approvals/:id", post(approvals::decide))
        .route("/console/scheme", get(scheme::show))
        .route("/console/scheme/currencies", post(scheme::add_currency))
        .route(
            "/console/scheme/settlement-models",
            post(scheme::create_model),
        )
        .route("/console/scheme/oracles", post(scheme::create_oracle))
        .route_layer(axum::middleware::from_fn_with_state(
            console.clone(),
            session::checked,
        ))
        .with_state(console)
}
