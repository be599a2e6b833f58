//! FSPIOP v1.1 quotes, routed as Mojaloop's quoting-service does in its
//! default `SIMPLE_ROUTING_MODE`: nothing is kept, every request is checked
//! (headers, path id, body schema) and passed on, as its original bytes and
//! FSPIOP headers, to the DFSP named in `FSPIOP-Destination`.
//!
//! | Request | Answer | Forwarded to the destination's |
//! |---|---|---|
//! | `POST /quotes` | 202 | `POST {base}/quotes` |
//! | `PUT /quotes/{ID}` | 200 | `PUT {base}/quotes/{ID}` |
//! | `PUT /quotes/{ID}/error` | 200 | `PUT {base}/quotes/{ID}/error` |
//! | `GET /quotes/{ID}` | 202 | `GET {base}/quotes/{ID}` |
//!
//! `{base}` is the destination's `FSPIOP_CALLBACK_URL_QUOTES` endpoint, a
//! bare base URL. A destination without one (which covers an unknown
//! participant) gets nothing; the sender instead gets, from the hub,
//! `PUT {its base}/quotes/{ID}/error` with 3201 "Destination FSP Error".
//! So does a request the pause rule refuses (a requester that may not
//! pay: 3202; a destination that may not be paid: 3201; see
//! `ledger::payment_refusal`; the same codes for either's disabled
//! account in the amount's currency, `ledger::accounts_refusal`), before
//! anything is recorded or passed on.
//! No ledger command is involved, so the answer does not wait on the
//! pipeline.
//!
//! The quoting service routes v2.0's FX quotes the same way
//! ([`crate::fx_quotes`]): [`Quoting`] is the one handler of both, a
//! resource's service and body checks its only differences.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use axum::Router;
use fspiop::{FspiopError, Resource};
use ledger::request::{AnswerQuote, RecordQuote};
use ledger::{Currency, ErrorCode, QuoteReply, RequestHash, TransferId};

use crate::routing::{required_destination, Route, Service, Target};
use crate::wire::{check_headers, forwarded_headers, Caller, Shape};
use crate::{Hub, HubError};

/// The endpoint type holding a DFSP's quotes base URL.
pub const QUOTES_ENDPOINT: &str = "FSPIOP_CALLBACK_URL_QUOTES";

static QUOTES: Quoting = Quoting {
    service: Service {
        resource: Resource::Quotes,
        endpoint_type: QUOTES_ENDPOINT,
    },
    post: |body| {
        let parsed = fspiop::parse_quote_post(body)?;
        Ok(Posted {
            id: parsed.quote_id,
            request_hash: parsed.request_hash,
            currency: parsed.amount.currency,
            target: None,
        })
    },
    put: |body| Ok(fspiop::parse_quote_put(body)?.request_hash),
    noun: "quote",
    pause_rule: ledger::payment_refusal,
};

pub fn routes() -> Router<Arc<Hub>> {
    QUOTES.routes()
}

/// Checks a `POST` body and returns what the hub routes it by.
pub(crate) type CheckPost = fn(&[u8]) -> Result<Posted, FspiopError>;

/// A checked `POST`: the request's id, the hash of its bytes, and the
/// currencies of the payment it quotes for, whose accounts the pause rule
/// looks at.
pub(crate) struct Posted {
    pub(crate) id: TransferId,
    pub(crate) request_hash: RequestHash,
    /// The amount's currency (an FX quote's source): the requester pays
    /// in it, the addressee takes it.
    pub(crate) currency: Currency,
    /// An FX quote's target currency, which the FXP pays.
    pub(crate) target: Option<Currency>,
}

/// A resource the quoting service routes as it routes quotes: where it
/// goes (its [`Service`]) and how its bodies are checked. In persistent
/// mode (`--quotes-persistent`) each is recorded through the ledger's
/// quote requests (`RecordQuote`, `AnswerQuote`), the request as its
/// requester and addressee, its id and the hash of its bytes, the answer
/// as its bytes, so the duplicate rules are the ledger's.
pub(crate) struct Quoting {
    pub(crate) service: Service,
    /// Checks a `POST` body: the request's id and the hash of its bytes.
    pub(crate) post: CheckPost,
    /// Checks a `PUT /{ID}` body: the hash of its bytes.
    pub(crate) put: fn(&[u8]) -> Result<RequestHash, FspiopError>,
    /// What the hub's own words call one request ("quote").
    pub(crate) noun: &'static str,
    /// Whom the pause rule lets ask whom: a payment's requester pays and
    /// its addressee is paid (`ledger::payment_refusal`); an FXP asked for
    /// an FX quote must also pay (`ledger::conversion_refusal`).
    pub(crate) pause_rule: crate::refused::PauseRule,
}

impl Quoting {
    pub(crate) fn routes(&'static self) -> Router<Arc<Hub>> {
        let collection = format!("/{}", self.service.resource);
        let item = format!("{collection}/:id");
        let error = format!("{item}/error");
        let answer = move |is_error| {
            move |State(hub): State<Arc<Hub>>,
                  Path(id): Path<String>,
                  headers: HeaderMap,
                  body: Bytes| async move {
                self.route_answer(&hub, &id, &headers, body, is_error).await
            }
        };
        let get_item = move |State(hub): State<Arc<Hub>>,
                             Path(id): Path<String>,
                             headers: HeaderMap| async move {
            self.get(&hub, &id, &headers)
        };
        let post_new = move |State(hub): State<Arc<Hub>>, headers: HeaderMap, body: Bytes| async move {
            self.post(&hub, &headers, body).await
        };
        Router::new()
            .route(&collection, post(post_new))
            .route(&item, put(answer(false)).get(get_item))
            .route(&error, put(answer(true)))
    }

    async fn post(
        &self,
        hub: &Arc<Hub>,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Response, HubError> {
        let resource = self.service.resource;
        let caller = check_headers(headers, resource, Shape::Post)?;
        let destination = required_destination(headers)?;
        let posted = (self.post)(&body)?;
        let (request_id, request_hash) = (posted.id, posted.request_hash);
        let id = request_id.to_string();
        // The pause rule, before anything is recorded or passed on: the
        // requester would pay, the addressee be paid — and pay too, for
        // an FXP (quoting-service's 3202 / 3201 for a participant it
        // finds inactive), each with its accounts in those currencies
        // enabled.
        let paying = [posted.currency];
        let both = [posted.currency, posted.target.unwrap_or(posted.currency)];
        let paid: &[Currency] = match posted.target {
            Some(target) if target != posted.currency => &both,
            _ => &paying,
        };
        if self.service.refused_by_pause(
            hub,
            &caller,
            &id,
            ((caller.source, &paying), (destination, paid)),
            self.pause_rule,
        ) {
            return Ok(StatusCode::ACCEPTED.into_response());
        }
        if hub.config.quotes_persistent {
            // A request the ledger no longer holds (past the retention
            // horizon) is read from the store by the pipeline before the
            // ledger applies this: the duplicate rule is the ledger's
            // either way.
            let reply = hub
                .ask(RecordQuote {
                    quote_id: request_id,
                    payer: caller.source,
                    payee: destination,
                    request_hash,
                })
                .await?;
            match reply {
                QuoteReply::Recorded => {}
                // Seen before with the same body: resend the answer if
                // there is one; a request still waiting for its answer is
                // not sent again, but its addressee may still answer it
                // (after a restart too). Another DFSP resending the
                // requester's bytes (the addressee saw them) is not the
                // requester: it hears no answer, it is refused.
                QuoteReply::Duplicate(view) if view.payer != caller.source => {
                    let description =
                        format!("'{}' is not the payer of {} {id}", caller.source, self.noun);
                    hub.refuse(
                        crate::refused::Class::NotParty,
                        caller.source.as_str(),
                        &description,
                    );
                    let error = ledger::Rejection::not_party(
                        ErrorCode::GENERIC_VALIDATION_ERROR,
                        description,
                    );
                    self.send_error(hub, &caller, &id, &error);
                    return Ok(StatusCode::ACCEPTED.into_response());
                }
                QuoteReply::Duplicate(view) => {
                    if view.answer.is_none() {
                        let question = crate::answers::Key::new(resource, id.as_str());
                        hub.await_answer(&question, view.payer, view.payee)?;
                    }
                    if let Some(answer) = view.answer {
                        let target = if answer.is_error {
                            Target::Error(&id)
                        } else {
                            Target::Item(&id)
                        };
                        let headers = self.service.hub_headers(hub, caller.source, caller.reply());
                        // The known answer again, from the hub (the
                        // addressee's signature was over its own message,
                        // not this one).
                        self.service.send(
                            hub,
                            crate::notify::Origin::Hub,
                            caller.source,
                            target,
                            Method::PUT,
                            headers,
                            Bytes::from(answer.body),
                        );
                    }
                    return Ok(StatusCode::ACCEPTED.into_response());
                }
                QuoteReply::Refused(error) if HubError::is_retry_later(&error) => {
                    return Err(HubError::refused(error));
                }
                QuoteReply::Refused(error) => {
                    self.send_error(hub, &caller, &id, &error);
                    return Ok(StatusCode::ACCEPTED.into_response());
                }
            }
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

    /// An error callback from the hub to the caller about its request.
    fn send_error(&self, hub: &Hub, caller: &Caller, id: &str, error: &ledger::Rejection) {
        let description = format!("{} - {}", error.code.description(), error.description);
        self.service
            .send_error(hub, caller, id, error.code, &description);
    }

    /// In persistent mode, records the addressee's answer before it is
    /// forwarded; false when the answer was refused (the addressee has
    /// been told why).
    #[allow(clippy::too_many_arguments)]
    async fn record_answer(
        &self,
        hub: &Hub,
        caller: &Caller,
        id: &str,
        request_id: TransferId,
        is_error: bool,
        body: &Bytes,
        request_hash: RequestHash,
    ) -> Result<bool, HubError> {
        if !hub.config.quotes_persistent {
            return Ok(true);
        }
        let body_text = std::str::from_utf8(body).map_err(|_| {
            HubError::new(
                ErrorCode::MALFORMED_SYNTAX,
                "Malformed syntax - the body is not UTF-8",
            )
        })?;
        let command = AnswerQuote {
            quote_id: request_id,
            caller: caller.source,
            is_error,
            body: body_text.to_string(),
            request_hash,
        };
        match hub.ask(command).await? {
            // A resent answer is forwarded again: the requester may have
            // missed it.
            QuoteReply::Recorded | QuoteReply::Duplicate(_) => Ok(true),
            QuoteReply::Refused(error) if HubError::is_retry_later(&error) => {
                Err(HubError::refused(error))
            }
            QuoteReply::Refused(error) => {
                self.send_error(hub, caller, id, &error);
                Ok(false)
            }
        }
    }

    /// The addressee's answer (`PUT /{resource}/{ID}`, or `.../error`),
    /// recorded in persistent mode, then forwarded as its bytes to the
    /// destination.
    async fn route_answer(
        &self,
        hub: &Hub,
        id: &str,
        headers: &HeaderMap,
        body: Bytes,
        is_error: bool,
    ) -> Result<Response, HubError> {
        let caller = check_headers(headers, self.service.resource, Shape::Put)?;
        let destination = required_destination(headers)?;
        let request_id = fspiop::parse_correlation_id(id)?;
        let id = request_id.to_string();
        let request_hash = match is_error {
            true => fspiop::parse_error_information(&body)?.request_hash,
            false => (self.put)(&body)?,
        };
        // Only the addressee asked, only to the requester that asked, only
        // while pending; in persistent mode the ledger then checks the
        // stored request.
        let via = self.service.check_answer(hub, &caller, &id, destination)?;
        if !self
            .record_answer(hub, &caller, &id, request_id, is_error, &body, request_hash)
            .await?
        {
            return Ok(StatusCode::OK.into_response());
        }
        let target = if is_error {
            Target::Error(&id)
        } else {
            Target::Item(&id)
        };
        // Back through the proxy that carried the question, if one did.
        self.service.route_through(
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
            via,
        );
        Ok(StatusCode::OK.into_response())
    }

    fn get(&self, hub: &Arc<Hub>, id: &str, headers: &HeaderMap) -> Result<Response, HubError> {
        let caller = check_headers(headers, self.service.resource, Shape::Get)?;
        let destination = required_destination(headers)?;
        let id = fspiop::parse_correlation_id(id)?.to_string();
        self.service.ask(
            hub,
            Route {
                caller,
                destination,
                id: &id,
                target: Target::Item(&id),
                method: Method::GET,
                headers: forwarded_headers(headers, true),
                body: Bytes::new(),
            },
        )?;
        Ok(StatusCode::ACCEPTED.into_response())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderName, HeaderValue};
    use ledger::FspName;

    const ID: &str = "b51ec534-ee48-4575-b6a9-ead2955b8069";

    #[test]
    fn urls_hang_off_the_base() {
        for base in ["http://payee:4000", "http://payee:4000/"] {
            assert_eq!(
                QUOTES.service.url(base, Target::Collection),
                "http://payee:4000/quotes"
            );
            assert_eq!(
                QUOTES.service.url(base, Target::Item(ID)),
                format!("http://payee:4000/quotes/{ID}")
            );
            assert_eq!(
                QUOTES.service.url(base, Target::Error(ID)),
                format!("http://payee:4000/quotes/{ID}/error")
            );
        }
        assert_eq!(
            QUOTES
                .service
                .url("http://sdk/inbound/", Target::Collection),
            "http://sdk/inbound/quotes"
        );
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(
                HeaderName::from_static(name),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn the_destination_is_required() {
        assert_eq!(
            required_destination(&headers(&[("fspiop-destination", "payeefsp")])).unwrap(),
            FspName::new("payeefsp").unwrap()
        );
        for (map, code) in [
            (headers(&[]), ErrorCode::MISSING_MANDATORY_ELEMENT),
            (
                headers(&[("fspiop-destination", "")]),
                ErrorCode::MISSING_MANDATORY_ELEMENT,
            ),
            (
                headers(&[("fspiop-destination", "a b")]),
                ErrorCode::MALFORMED_SYNTAX,
            ),
        ] {
            let error = required_destination(&map).unwrap_err();
            assert_eq!(error.code, code, "{}", error.description);
            assert!(error.description.contains("fspiop-destination"));
        }
    }

    #[test]
    fn forwarding_keeps_fspiop_headers_and_accept_only_when_asked() {
        let original = headers(&[
            (
                "content-type",
                "application/vnd.interoperability.quotes+json;version=1.0",
            ),
            (
                "accept",
                "application/vnd.interoperability.quotes+json;version=1",
            ),
            ("date", "Tue, 15 Nov 1994 08:12:31 GMT"),
            ("fspiop-source", "payerfsp"),
            ("fspiop-destination", "payeefsp"),
            ("fspiop-signature", "{\"signature\":\"x\"}"),
            ("authorization", "Bearer secret"),
            ("host", "hub"),
        ]);
        let with_accept = forwarded_headers(&original, true);
        assert_eq!(with_accept.len(), 6);
        assert!(with_accept.get("authorization").is_none());
        assert!(with_accept.get("host").is_none());
        assert_eq!(
            with_accept.get("fspiop-signature"),
            original.get("fspiop-signature")
        );
        let without = forwarded_headers(&original, false);
        assert_eq!(without.len(), 5);
        assert!(without.get("accept").is_none());
    }
}
