//! What every FSPIOP route shares on the wire: header checks by request
//! shape, the headers forwarded with a DFSP's request (so that its signature
//! still verifies), and the headers of callbacks the hub originates.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use fspiop::Resource;
use ledger::FspName;

use crate::{Hub, HubError};

/// What the headers of a request said.
pub struct Caller {
    pub source: FspName,
    pub version: fspiop::Version,
}

/// Which headers a request must carry (FSPIOP §3.2.1): a `POST` has a body
/// and expects an answer (Content-Type and Accept), a `PUT` callback has a
/// body and no Accept, a `GET` has no body (Content-Type optional).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Post,
    Put,
    Get,
}

/// Header checks shared by every FSPIOP request about `resource`.
pub fn check_headers(
    headers: &HeaderMap,
    resource: Resource,
    shape: Shape,
) -> Result<Caller, HubError> {
    let header =
        |name: &str| fspiop::header_str(name, headers.get(name).map(|value| value.as_bytes()));
    let content_type = header("content-type")?;
    let mut version = match (shape, content_type) {
        (Shape::Get, None) => None,
        (_, content_type) => Some(fspiop::check_content_type(resource, content_type)?),
    };
    if shape != Shape::Put {
        let accepted = fspiop::negotiate_accept(resource, header("accept")?)?;
        version.get_or_insert(accepted);
    }
    fspiop::check_date(header("date")?)?;
    let source = fspiop::check_fsp_header("FSPIOP-Source", header("fspiop-source")?, true)?
        .expect("a required header is present when Ok");
    fspiop::check_fsp_header("FSPIOP-Destination", header("fspiop-destination")?, false)?;
    Ok(Caller {
        source,
        version: version.unwrap_or(fspiop::Version::V1_1),
    })
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

/// Headers of a callback the hub itself originates (FSPIOP-Source is the hub).
pub fn hub_headers(
    hub: &Hub,
    resource: Resource,
    destination: FspName,
    version: fspiop::Version,
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let content_type = fspiop::content_type_for(resource, version);
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
    headers
}
