//! Routing by `FSPIOP-Destination`, the shape Mojaloop's quoting-service
//! and transaction-requests-service share: a checked request is passed on,
//! as its original bytes and FSPIOP headers, under the destination's
//! endpoint of the resource's type, a bare base URL to which the hub
//! appends `/{resource}[/{ID}[/error]]`. When the destination has no such
//! endpoint (which covers an unknown participant), the sender gets, from
//! the hub, `PUT {its base}/{resource}/{ID}/error` with 3201 "Destination
//! FSP Error", under its own endpoint of the same type.
//!
//! Everything goes through the callback dispatcher, so a slow DFSP only
//! delays its own queue.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method};
use fspiop::Resource;
use ledger::{ErrorCode, FspName};

use crate::notify::{Callback, OnUndelivered, Origin, Undelivered};
use crate::refused::PaymentSide;
use crate::wire::{Caller, Reply};
use crate::{Hub, HubError};

/// 3201 Destination FSP Error: the destination cannot be reached.
const DESTINATION_FSP_ERROR: ErrorCode = ErrorCode(3201);
/// 1001 Destination communication error: a request passed on was not
/// delivered.
const DESTINATION_COMMUNICATION_ERROR: ErrorCode = ErrorCode(1001);

/// The error the hub tells a requester whose request to `addressee` was
/// not delivered, as the Mojaloop service routing `resource` words it:
/// quoting-service (quotes, bulk quotes, FX quotes) passes on the errorInformation
/// of a refusal that carries one, answers any other 4xx with 3000 and
/// everything else (no connection, no answer in time, 5xx) with 1001;
/// account-lookup-service and transaction-requests-service send 1001
/// whatever happened (central-services-shared's `sendRequest`). No
/// transport detail is told (it would describe another DFSP's set-up):
/// the dispatcher logs it.
pub(crate) fn undelivered_error(
    resource: Resource,
    addressee: FspName,
    undelivered: &Undelivered,
) -> (ErrorCode, String) {
    let unreachable = || {
        (
            DESTINATION_COMMUNICATION_ERROR,
            format!("Destination communication error - the request could not be delivered to '{addressee}'"),
        )
    };
    let Undelivered::Refused { status, body } = undelivered else {
        return unreachable();
    };
    if !matches!(
        resource,
        Resource::Quotes | Resource::BulkQuotes | Resource::FxQuotes
    ) {
        return unreachable();
    }
    match fspiop::parse_error_information(body) {
        Ok(error) => (error.code, error.description),
        Err(_) => (
            ErrorCode::GENERIC_CLIENT_ERROR,
            format!(
                "Generic client error - '{addressee}' refused the request with HTTP {}",
                status.as_u16()
            ),
        ),
    }
}

/// A resource routed by destination, and the endpoint type holding each
/// DFSP's base URL for it.
#[derive(Clone, Copy, Debug)]
pub struct Service {
    pub resource: Resource,
    pub endpoint_type: &'static str,
}

/// Where under a DFSP's base URL a request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target<'a> {
    /// `{base}/{resource}`
    Collection,
    /// `{base}/{resource}/{ID}`
    Item(&'a str),
    /// `{base}/{resource}/{ID}?{query}`, the query as the sender wrote it
    /// (an empty one is left out).
    Query(&'a str, &'a str),
    /// `{base}/{resource}/{ID}/error`
    Error(&'a str),
}

impl Service {
    /// The URL of `target` under `base` (one trailing `/` of the base is
    /// dropped, so `http://dfsp/` and `http://dfsp` give the same URLs).
    ///
    /// The id is percent-encoded as one segment and the query keeps only
    /// query syntax (see [`crate::endpoints::push_path_segment`]): ids are
    /// checked correlation ids already, this keeps it so if one ever is not.
    pub(crate) fn url(&self, base: &str, target: Target<'_>) -> String {
        use crate::endpoints::{push_path_segment, push_query};
        let base = base.strip_suffix('/').unwrap_or(base);
        let mut url = format!("{base}/{}", self.resource.as_str());
        let (id, query, suffix) = match target {
            Target::Collection => return url,
            Target::Item(id) => (id, "", ""),
            Target::Query(id, query) => (id, query, ""),
            Target::Error(id) => (id, "", "/error"),
        };
        url.push('/');
        push_path_segment(&mut url, id);
        url.push_str(suffix);
        if !query.is_empty() {
            url.push('?');
            push_query(&mut url, query);
        }
        url
    }

    /// Queues `method` to `target` under `participant`'s base URL, a
    /// message of `origin`; false (and nothing sent) when the participant
    /// has no such endpoint.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send(
        &self,
        hub: &Hub,
        origin: Origin,
        participant: FspName,
        target: Target<'_>,
        method: Method,
        headers: HeaderMap,
        body: Bytes,
    ) -> bool {
        self.send_with(
            hub,
            origin,
            hub.reach(participant),
            target,
            method,
            headers,
            body,
            None,
        )
    }

    /// [`send`](Self::send) to the participant that carries it (the
    /// addressee, or the proxy that reaches it: the message unchanged, its
    /// FSPIOP-Destination still naming the addressee), `on_undelivered`
    /// (if any) told when the callback is not delivered.
    #[allow(clippy::too_many_arguments)]
    fn send_with(
        &self,
        hub: &Hub,
        origin: Origin,
        carrier: FspName,
        target: Target<'_>,
        method: Method,
        headers: HeaderMap,
        body: Bytes,
        on_undelivered: Option<OnUndelivered>,
    ) -> bool {
        let Some(base) = hub.endpoints.url(carrier, self.endpoint_type, &[]) else {
            return false;
        };
        let callback = Callback {
            destination: carrier.to_string(),
            origin,
            method,
            url: self.url(&base, target),
            headers,
            body,
        };
        match on_undelivered {
            Some(tell) => hub.dispatcher.send_asking(callback, tell),
            None => hub.dispatcher.send(callback),
        }
        true
    }

    /// Headers of a callback the hub itself sends `destination`.
    pub(crate) fn hub_headers(&self, hub: &Hub, destination: FspName, reply: Reply) -> HeaderMap {
        crate::wire::hub_headers(hub, self.resource, destination, reply)
    }

    /// An error callback from the hub to the caller about its request `id`.
    /// The pause rule (`ledger::payment_refusal`) for a request of
    /// `caller`'s that starts a payment from `payer` to `payee`, each
    /// needing its accounts in the currencies given with it
    /// (`ledger::accounts_refusal`): when it refuses, `caller` is told by
    /// the hub's error callback (the request is not passed on) and the
    /// answer is true.
    pub(crate) fn refused_by_pause(
        &self,
        hub: &Hub,
        caller: &Caller,
        id: &str,
        (payer, payee): (PaymentSide<'_>, PaymentSide<'_>),
        rule: crate::refused::PauseRule,
    ) -> bool {
        // A request a proxy carried pays or is paid as the proxy.
        let as_carried = |name: FspName| match caller.via {
            Some(via) if name == caller.source => via,
            _ => name,
        };
        let payer = (as_carried(payer.0), payer.1);
        let payee = (as_carried(payee.0), payee.1);
        let Some(refusal) = hub.pause_refusal_by(rule, caller.source, payer, payee) else {
            return false;
        };
        let description = format!("{} - {}", refusal.code.description(), refusal.description);
        self.send_error(hub, caller, id, refusal.code, &description);
        true
    }

    pub(crate) fn send_error(
        &self,
        hub: &Hub,
        caller: &Caller,
        id: &str,
        code: ErrorCode,
        description: &str,
    ) {
        self.send_error_to(
            hub,
            (caller.source, caller.via),
            caller.reply(),
            id,
            code,
            description,
        );
    }

    /// An error callback from the hub to `source` about its request `id`
    /// (through `via`, the proxy that carried the request, if one did),
    /// written as `reply` says.
    fn send_error_to(
        &self,
        hub: &Hub,
        (source, via): (FspName, Option<FspName>),
        reply: Reply,
        id: &str,
        code: ErrorCode,
        description: &str,
    ) {
        let body = Bytes::from(fspiop::error_body(code, description));
        let headers = self.hub_headers(hub, source, reply);
        if !self.send_with(
            hub,
            Origin::Hub,
            via.unwrap_or_else(|| hub.reach(source)),
            Target::Error(id),
            Method::PUT,
            headers,
            body,
            None,
        ) {
            let endpoint_type = self.endpoint_type;
            tracing::warn!(%source, id, code = code.0, "no {endpoint_type} endpoint for the source; error callback dropped");
        }
    }

    /// Passes a checked request on to its destination; if it cannot be,
    /// tells the sender with a 3201 error callback from the hub (and says
    /// false).
    pub(crate) fn route(&self, hub: &Hub, route: Route<'_>) -> bool {
        self.route_with(hub, route, None, None)
    }

    /// [`route`](Self::route) through `carrier` (an answer's: the proxy
    /// that carried its question from another scheme, if one did; None:
    /// the destination or the proxy that reaches it).
    pub(crate) fn route_through(
        &self,
        hub: &Hub,
        route: Route<'_>,
        carrier: Option<FspName>,
    ) -> bool {
        self.route_with(hub, route, carrier, None)
    }

    /// [`route`](Self::route) through `carrier` (None: the destination or
    /// its proxy), `on_undelivered` (if any) told when the request is not
    /// delivered.
    fn route_with(
        &self,
        hub: &Hub,
        route: Route<'_>,
        carrier: Option<FspName>,
        on_undelivered: Option<OnUndelivered>,
    ) -> bool {
        let Route {
            caller,
            destination,
            id,
            target,
            method,
            headers,
            body,
        } = route;
        // The sender's request, passed on as it came, to the destination
        // or the participant that carries messages to it.
        let carrier = carrier.unwrap_or_else(|| hub.reach(destination));
        if self.send_with(
            hub,
            Origin::Forwarded,
            carrier,
            target,
            method,
            headers,
            body,
            on_undelivered,
        ) {
            return true;
        }
        let endpoint_type = self.endpoint_type;
        tracing::debug!(%destination, source = %caller.source, id, "no {endpoint_type} endpoint for the destination; answering 3201");
        let description =
            format!("Destination FSP Error - '{destination}' has no {endpoint_type} endpoint");
        self.send_error(hub, &caller, id, DESTINATION_FSP_ERROR, &description);
        false
    }

    /// Passes on a request that expects an answer, remembering first who
    /// asked whom (see [`crate::answers`]); a question that could not be
    /// passed on is forgotten again. One the addressee cannot be reached
    /// with, or refuses (4xx), is withdrawn and its requester told with
    /// `PUT /{resource}/{ID}/error` from the hub ([`undelivered_error`]):
    /// it would otherwise wait for an answer that cannot come.
    pub(crate) fn ask(&self, hub: &Arc<Hub>, route: Route<'_>) -> Result<(), HubError> {
        // A destination that cannot be reached is told at once (3201):
        // nothing to wait for.
        if hub
            .endpoints
            .url(hub.reach(route.destination), self.endpoint_type, &[])
            .is_none()
        {
            self.route(hub, route);
            return Ok(());
        }
        let question = crate::answers::Key::new(self.resource, route.id);
        let (requester, addressee) = (route.caller.source, route.destination);
        let via = route.caller.via;
        let asked_at = hub.await_answer_via(&question, requester, addressee, via)?;
        let service = *self;
        let (reply, id) = (route.caller.reply(), route.id.to_string());
        // Another scheme's DFSP, reached through the proxy a discovery
        // taught the map: if that route fails, the entry goes (the next
        // discovery learns it again; an operator's entry stays).
        let carrier = hub.reach(addressee);
        let healer = Arc::downgrade(hub);
        let on_undelivered = hub.on_undelivered(
            question.clone(),
            requester,
            addressee,
            asked_at,
            move |hub, code, description| {
                if let Some(hub) = healer.upgrade().filter(|_| carrier != addressee) {
                    crate::proxies::heal_route(hub, addressee, carrier);
                }
                service.send_error_to(hub, (requester, via), reply, &id, code, description);
            },
        );
        if !self.route_with(hub, route, None, Some(on_undelivered)) {
            hub.answers.withdraw(&question, requester, addressee);
        }
        Ok(())
    }

    /// Passes on an answer (`PUT /{resource}/{ID}[/error]`) only from a
    /// DFSP that was asked, to a DFSP that asked it, while pending;
    /// otherwise 3100 and nothing is passed on (see [`crate::answers`]).
    pub(crate) fn answer(&self, hub: &Hub, route: Route<'_>) -> Result<(), HubError> {
        let via = self.check_answer(hub, &route.caller, route.id, route.destination)?;
        // Back through the proxy that carried the question, if one did.
        self.route_through(hub, route, via);
        Ok(())
    }

    /// Whether `caller` may answer request `id` to `destination` now; the
    /// proxy that carried the question, if one did.
    pub(crate) fn check_answer(
        &self,
        hub: &Hub,
        caller: &Caller,
        id: &str,
        destination: FspName,
    ) -> Result<Option<FspName>, HubError> {
        let question = crate::answers::Key::new(self.resource, id);
        hub.answer_route(&question, caller.source, caller.via, Some(destination))
            .map(|answered| answered.via)
    }
}

/// A checked request to pass on to `destination`.
pub(crate) struct Route<'a> {
    pub caller: Caller,
    pub destination: FspName,
    /// The request's id, for the error callback's URL.
    pub id: &'a str,
    pub target: Target<'a>,
    pub method: Method,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// `FSPIOP-Destination`, which routing cannot do without: 3102 when
/// absent or empty, 3101 when not an FSP id.
pub(crate) fn required_destination(headers: &HeaderMap) -> Result<FspName, HubError> {
    let value = fspiop::header_str(
        fspiop::FSPIOP_DESTINATION,
        headers
            .get("fspiop-destination")
            .map(|value| value.as_bytes()),
    )?;
    let destination = fspiop::check_fsp_header(fspiop::FSPIOP_DESTINATION, value, true)?;
    destination.ok_or_else(|| fspiop::FspiopError::missing(fspiop::FSPIOP_DESTINATION).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "b51ec534-ee48-4575-b6a9-ead2955b8069";

    #[test]
    fn an_undelivered_request_is_told_in_its_services_words() {
        let payee = FspName::new("payeefsp").unwrap();
        let refused = |status: u16, body: &'static str| Undelivered::Refused {
            status: http::StatusCode::from_u16(status).unwrap(),
            body: Bytes::from_static(body.as_bytes()),
        };
        let with_error = refused(
            400,
            r#"{"errorInformation":{"errorCode":"5104","errorDescription":"No"}}"#,
        );
        // quoting-service: a refusal's own error, else 3000; no answer 1001.
        for resource in [Resource::Quotes, Resource::BulkQuotes, Resource::FxQuotes] {
            let (code, description) = undelivered_error(resource, payee, &with_error);
            assert_eq!((code, description.as_str()), (ErrorCode(5104), "No"));
            let (code, description) = undelivered_error(resource, payee, &refused(404, ""));
            assert_eq!(code, ErrorCode::GENERIC_CLIENT_ERROR);
            assert!(description.contains("HTTP 404"), "{description}");
            let (code, _) = undelivered_error(resource, payee, &Undelivered::Unreachable);
            assert_eq!(code, DESTINATION_COMMUNICATION_ERROR);
        }
        // ALS and TRS: 1001 whatever happened, naming the addressee only.
        for resource in [
            Resource::Parties,
            Resource::TransactionRequests,
            Resource::Authorizations,
        ] {
            for undelivered in [&with_error, &Undelivered::Unreachable] {
                let (code, description) = undelivered_error(resource, payee, undelivered);
                assert_eq!(code, DESTINATION_COMMUNICATION_ERROR);
                assert_eq!(
                    description,
                    "Destination communication error - the request could not be delivered to 'payeefsp'"
                );
            }
        }
    }

    #[test]
    fn each_resource_hangs_off_its_base() {
        let authorizations = Service {
            resource: Resource::Authorizations,
            endpoint_type: "FSPIOP_CALLBACK_URL_AUTHORIZATIONS",
        };
        assert_eq!(
            authorizations.url("http://payer/", Target::Query(ID, "a=1&b=%20")),
            format!("http://payer/authorizations/{ID}?a=1&b=%20")
        );
        assert_eq!(
            authorizations.url("http://payer", Target::Query(ID, "")),
            format!("http://payer/authorizations/{ID}")
        );
        let requests = Service {
            resource: Resource::TransactionRequests,
            endpoint_type: "FSPIOP_CALLBACK_URL_TRX_REQ_SERVICE",
        };
        assert_eq!(
            requests.url("http://payer", Target::Collection),
            "http://payer/transactionRequests"
        );
        assert_eq!(
            authorizations.url("http://payer", Target::Query("../x", "a=1\r\n#")),
            "http://payer/authorizations/..%2Fx?a=1%0D%0A%23"
        );
        let bulk = Service {
            resource: Resource::BulkQuotes,
            endpoint_type: "FSPIOP_CALLBACK_URL_BULK_QUOTES",
        };
        assert_eq!(
            bulk.url("http://payee/", Target::Error(ID)),
            format!("http://payee/bulkQuotes/{ID}/error")
        );
    }
}
