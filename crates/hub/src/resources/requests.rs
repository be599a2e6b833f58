//! FSPIOP v1.1 request-to-pay and bulk quotes, routed as Mojaloop's
//! transaction-requests-service and quoting-service route them: nothing is
//! kept, every request is checked (headers, path id, query, body schema)
//! and passed on by `FSPIOP-Destination` (see [`crate::routing`]).
//!
//! | Request | Answer | Forwarded to the destination's |
//! |---|---|---|
//! | `POST /transactionRequests` | 202 | `FSPIOP_CALLBACK_URL_TRX_REQ_SERVICE` + `/transactionRequests` |
//! | `PUT /transactionRequests/{ID}[/error]` | 200 | … + `/transactionRequests/{ID}[/error]` |
//! | `GET /transactionRequests/{ID}` | 202 | … + `/transactionRequests/{ID}` |
//! | `GET /authorizations/{ID}?…` | 202 | `FSPIOP_CALLBACK_URL_AUTHORIZATIONS` + `/authorizations/{ID}?…` |
//! | `PUT /authorizations/{ID}[/error]` | 200 | … + `/authorizations/{ID}[/error]` |
//! | `POST /bulkQuotes` | 202 | `FSPIOP_CALLBACK_URL_BULK_QUOTES` + `/bulkQuotes` |
//! | `PUT /bulkQuotes/{ID}[/error]` | 200 | … + `/bulkQuotes/{ID}[/error]` |
//! | `GET /bulkQuotes/{ID}` | 202 | … + `/bulkQuotes/{ID}` |
//!
//! A `POST` the pause rule refuses (`ledger::payment_refusal`: the bulk
//! quote's requester pays, the transaction request's addressee does; and
//! `ledger::accounts_refusal`, either side's account disabled in the
//! amount's currency, or for a bulk quote in any of its individual
//! quotes' currencies) is not passed on; the
//! requester gets the hub's `PUT …/{ID}/error`.
//!
//! The query of `GET /authorizations/{ID}` is checked (all four keys) and
//! forwarded as the sender wrote it, so a signature over `FSPIOP-URI`
//! still verifies; other GETs forward no query, as Mojaloop's do.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use axum::Router;
use fspiop::{FspiopError, Resource};
use ledger::{Currency, TransferId};

use crate::routing::{required_destination, Route, Service, Target};
use crate::wire::{check_headers, forwarded_headers, Shape};
use crate::{Hub, HubError};

/// Checks a `POST` body and returns its id, and the currencies of the
/// payments it starts (a bulk quote's individual quotes each have their
/// own).
type CheckPost = fn(&[u8]) -> Result<(TransferId, Vec<Currency>), FspiopError>;
/// Checks the query string of a `GET` (without its `?`).
type CheckQuery = fn(Option<&str>) -> Result<(), FspiopError>;

/// A routed resource and how its requests are checked.
struct Routed {
    service: Service,
    /// `None`: the resource has no `POST`.
    post: Option<CheckPost>,
    /// Checks a `PUT /{ID}` body.
    put: fn(&[u8]) -> Result<(), FspiopError>,
    /// The query of `GET /{ID}`, forwarded once checked; `None`: none is
    /// defined, none is forwarded.
    query: Option<CheckQuery>,
    /// Who would pay in the payment a `POST` starts, for the pause rule.
    payer: Payer,
}

/// The side of the payment a `POST` starts that pays.
#[derive(Clone, Copy)]
enum Payer {
    /// The requester (a bulk quote, as a quote).
    Requester,
    /// The addressee (a transaction request: the payee asks the payer).
    Addressee,
}

static TRANSACTION_REQUESTS: Routed = Routed {
    service: Service {
        resource: Resource::TransactionRequests,
        endpoint_type: "FSPIOP_CALLBACK_URL_TRX_REQ_SERVICE",
    },
    post: Some(|body| {
        let parsed = fspiop::parse_transaction_request_post(body)?;
        Ok((parsed.transaction_request_id, vec![parsed.amount.currency]))
    }),
    put: |body| fspiop::parse_transaction_request_put(body).map(drop),
    query: None,
    payer: Payer::Addressee,
};

/// `GET` and `PUT` only: the payee FSP asks, the payer FSP answers.
static AUTHORIZATIONS: Routed = Routed {
    service: Service {
        resource: Resource::Authorizations,
        endpoint_type: "FSPIOP_CALLBACK_URL_AUTHORIZATIONS",
    },
    post: None,
    put: |body| fspiop::parse_authorization_put(body).map(drop),
    query: Some(|query| fspiop::parse_authorization_query(query).map(drop)),
    // No `POST`: an authorization belongs to a payment already asked for.
    payer: Payer::Addressee,
};

static BULK_QUOTES: Routed = Routed {
    service: Service {
        resource: Resource::BulkQuotes,
        endpoint_type: "FSPIOP_CALLBACK_URL_BULK_QUOTES",
    },
    post: Some(|body| {
        let parsed = fspiop::parse_bulk_quote_post(body)?;
        Ok((parsed.bulk_quote_id, parsed.currencies))
    }),
    put: |body| fspiop::parse_bulk_quote_put(body).map(drop),
    query: None,
    payer: Payer::Requester,
};

pub fn routes() -> Router<Arc<Hub>> {
    [&TRANSACTION_REQUESTS, &AUTHORIZATIONS, &BULK_QUOTES]
        .into_iter()
        .fold(Router::new(), |router, routed| {
            router.merge(routed.routes())
        })
}

impl Routed {
    fn routes(&'static self) -> Router<Arc<Hub>> {
        let collection = format!("/{}", self.service.resource);
        let item = format!("{collection}/:id");
        let error = format!("{item}/error");
        let answer = move |is_error| {
            move |State(hub): State<Arc<Hub>>,
                  Path(id): Path<String>,
                  headers: HeaderMap,
                  body: Bytes| async move {
                self.answer(&hub, &id, &headers, body, is_error)
            }
        };
        let get_item = move |State(hub): State<Arc<Hub>>,
                             Path(id): Path<String>,
                             RawQuery(query): RawQuery,
                             headers: HeaderMap| async move {
            self.get(&hub, &id, query.as_deref(), &headers)
        };
        let mut router = Router::new()
            .route(&item, put(answer(false)).get(get_item))
            .route(&error, put(answer(true)));
        if let Some(check) = self.post {
            router = router.route(
                &collection,
                post(
                    move |State(hub): State<Arc<Hub>>, headers: HeaderMap, body: Bytes| async move {
                        self.post(&hub, check, &headers, body)
                    },
                ),
            );
        }
        router
    }

    fn post(
        &self,
        hub: &Arc<Hub>,
        check: CheckPost,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Response, HubError> {
        let caller = check_headers(headers, self.service.resource, Shape::Post)?;
        let destination = required_destination(headers)?;
        let (id, currencies) = check(&body)?;
        let id = id.to_string();
        let (payer, payee) = match self.payer {
            Payer::Requester => (caller.source, destination),
            Payer::Addressee => (destination, caller.source),
        };
        if self.service.refused_by_pause(
            hub,
            &caller,
            &id,
            ((payer, &currencies), (payee, &currencies)),
            ledger::payment_refusal,
        ) {
            return Ok(StatusCode::ACCEPTED.into_response());
        }
        self.service.ask(
            hub,
            Route {
                caller,
                destination,
                id: &id,
                target: Target::Collection,
                method: Method::POST,
                headers: forwarded_headers(headers, true),
                body,
            },
        )?;
        Ok(StatusCode::ACCEPTED.into_response())
    }

    /// `PUT /{ID}` or `PUT /{ID}/error`, from the DFSP that was asked, to
    /// the DFSP that asked, while the request is pending.
    fn answer(
        &self,
        hub: &Hub,
        id: &str,
        headers: &HeaderMap,
        body: Bytes,
        is_error: bool,
    ) -> Result<Response, HubError> {
        let caller = check_headers(headers, self.service.resource, Shape::Put)?;
        let destination = required_destination(headers)?;
        let id = fspiop::parse_correlation_id(id)?.to_string();
        match is_error {
            true => fspiop::parse_error_information(&body).map(drop)?,
            false => (self.put)(&body)?,
        }
        let target = match is_error {
            true => Target::Error(&id),
            false => Target::Item(&id),
        };
        self.service.answer(
            hub,
            Route {
                caller,
                destination,
                id: &id,
                target,
                method: Method::PUT,
                headers: forwarded_headers(headers, false),
                body,
            },
        )?;
        Ok(StatusCode::OK.into_response())
    }

    fn get(
        &self,
        hub: &Arc<Hub>,
        id: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Result<Response, HubError> {
        let caller = check_headers(headers, self.service.resource, Shape::Get)?;
        let destination = required_destination(headers)?;
        let id = fspiop::parse_correlation_id(id)?.to_string();
        let target = match self.query {
            Some(check) => {
                check(query)?;
                Target::Query(&id, query.unwrap_or(""))
            }
            None => Target::Item(&id),
        };
        self.service.ask(
            hub,
            Route {
                caller,
                destination,
                id: &id,
                target,
                method: Method::GET,
                headers: forwarded_headers(headers, true),
                body: Bytes::new(),
            },
        )?;
        Ok(StatusCode::ACCEPTED.into_response())
    }
}
