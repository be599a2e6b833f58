//! What every FSPIOP route shares on the wire: header checks by request
//! shape, the headers forwarded with a DFSP's request (so that its signature
//! still verifies), and the headers of callbacks the hub originates.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use fspiop::Resource;
use ledger::FspName;

use crate::trace::TraceParent;
use crate::{Hub, HubError};

/// What the headers of a request said.
pub struct Caller {
    pub source: FspName,
    /// FSPIOP-Destination, when the request named one.
    pub destination: Option<FspName>,
    /// The version to answer in: the highest the request's Accept allows,
    /// or, on a callback without Accept, the version of its own body.
    pub version: fspiop::Version,
    /// The version of the request's body (its Content-Type).
    pub content_version: fspiop::Version,
    /// The request's W3C trace context, if it sent a valid one.
    pub trace: Option<TraceParent>,
    /// The proxy that carried the request from another scheme
    /// (FSPIOP-Proxy): the gate bound it to the caller's identity and to
    /// whom it may speak for (`hub::Proxied`) before any route runs, so
    /// the header is the gate's word here. The hub's answers to the
    /// request, and the answer to its question, go back through it.
    pub via: Option<FspName>,
}

impl Caller {
    /// How the hub answers this request with a callback of its own.
    pub fn reply(&self) -> Reply {
        Reply {
            version: self.version,
            trace: self.trace,
        }
    }
}

/// How the hub writes a callback of its own: in the version the request
/// asked for, within the request's trace (a new one when there is none).
#[derive(Clone, Copy, Debug)]
pub struct Reply {
    pub version: fspiop::Version,
    pub trace: Option<TraceParent>,
}

impl Reply {
    /// A callback no request is waiting for (an expiry), in `version`.
    pub fn unprompted(version: fspiop::Version) -> Reply {
        Reply {
            version,
            trace: None,
        }
    }
}

/// Which headers a request must carry (FSPIOP §3.2.1, as Mojaloop's header
/// validation reads it): a `POST`, `GET` or `DELETE` expects an answer
/// (Accept required), a `PUT` callback does not (Accept checked only if
/// sent); every request names its media type and version in Content-Type,
/// a `GET` included.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Post,
    Put,
    /// `GET` or `DELETE`.
    Get,
}

/// Header checks shared by every FSPIOP request about `resource`, in
/// Mojaloop's order (Accept, Date, Content-Type, FSPIOP-Source,
/// FSPIOP-Destination) and with its descriptions.
pub fn check_headers(
    headers: &HeaderMap,
    resource: Resource,
    shape: Shape,
) -> Result<Caller, HubError> {
    let checked = fspiop::RequestHeaders {
        content_type: header(headers, "content-type")?,
        accept: header(headers, "accept")?,
        date: header(headers, "date")?,
        source: header(headers, "fspiop-source")?,
        destination: header(headers, "fspiop-destination")?,
        ..fspiop::RequestHeaders::default()
    }
    .check(resource, shape != Shape::Put)?;
    Ok(Caller {
        source: checked.source,
        destination: checked.destination,
        version: checked.accept_version.unwrap_or(checked.content_version),
        content_version: checked.content_version,
        trace: headers
            .get("traceparent")
            .and_then(|value| TraceParent::parse(value.as_bytes())),
        via: headers
            .get("fspiop-proxy")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| FspName::new(value.trim())),
    })
}

/// A header's value as text; 3101 naming it if it is not UTF-8.
fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, HubError> {
    Ok(fspiop::header_str(
        name,
        headers.get(name).map(|value| value.as_bytes()),
    )?)
}

/// Headers of the original request that travel with it to the other DFSP,
/// so that its signature still verifies.
const FORWARDED_HEADERS: &[&str] = &[
    "content-type",
    "date",
    "fspiop-source",
    "fspiop-destination",
    "fspiop-signature",
    "fspiop-uri",
    "fspiop-http-method",
    "fspiop-encryption",
    "traceparent",
    "tracestate",
];

pub fn forwarded_headers(original: &HeaderMap, keep_accept: bool) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for name in FORWARDED_HEADERS
        .iter()
        .copied()
        .chain(keep_accept.then_some("accept"))
    {
        if let Some(value) = original.get(name) {
            headers.insert(HeaderName::from_static(name), value.clone());
        }
    }
    headers
}

/// Headers of a callback the hub itself originates (FSPIOP-Source is the
/// hub), in `reply`'s version — never older than the resource, so FX
/// messages are 2.0 ([`Resource::hub_version`]) — and trace. FSPIOP-URI
/// and FSPIOP-HTTP-Method are set by the dispatcher, which knows where the
/// callback goes.
pub fn hub_headers(hub: &Hub, resource: Resource, destination: FspName, reply: Reply) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let content_type = fspiop::content_type_for(resource, resource.hub_version(reply.version));
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    for (name, value) in [
        ("content-type", content_type.as_str()),
        ("date", date.as_str()),
        ("fspiop-source", hub.config.hub_name.as_str()),
        ("fspiop-destination", destination.as_str()),
    ] {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    let trace = reply.trace.unwrap_or_else(TraceParent::start);
    headers.insert(HeaderName::from_static("traceparent"), trace.child_header());
    headers
}
