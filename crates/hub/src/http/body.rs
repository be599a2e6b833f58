//! Request bodies that cannot hold a connection: a body that stops arriving
//! (shorter than its Content-Length, a stalled client) fails after an idle
//! timeout instead of running into the whole request's timeout, and the
//! guard then answers 400 in FSPIOP's shape saying why.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use http_body::Frame;

/// 413 in FSPIOP's shape, at once, for a request whose Content-Length is
/// above `limit`: its body would be refused once `limit` bytes of it had
/// arrived, and one that never comes would hold the request until the idle
/// timeout. The connection is closed (the body is not read). `None` for
/// any other request (no Content-Length, or one within the limit; a
/// malformed one is hyper's to refuse).
pub fn declared_too_large(
    headers: &axum::http::HeaderMap,
    limit: usize,
) -> Option<axum::response::Response> {
    let declared: u64 = headers
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if declared <= limit as u64 {
        return None;
    }
    use axum::response::IntoResponse as _;
    let mut response = crate::HubError::new(
        ledger::ErrorCode::MALFORMED_SYNTAX,
        format!("Malformed syntax - a body of {declared} bytes is larger than the {limit} allowed"),
    )
    .into_response();
    *response.status_mut() = axum::http::StatusCode::PAYLOAD_TOO_LARGE;
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    headers.insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-cache"),
    );
    Some(response)
}

/// Why a request body could not be read, as the guard reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFault {
    /// No body bytes for the idle timeout.
    Stalled,
    /// The connection ended (or failed) before the body was complete.
    Ended,
}

/// Where a wrapped body leaves its fault for the guard to read.
pub type FaultSlot = Arc<Mutex<Option<BodyFault>>>;

/// `inner`, failing once no frame has arrived for `idle`.
pub fn with_idle_timeout(inner: Body, idle: Duration, fault: FaultSlot) -> Body {
    Body::new(IdleTimeout {
        inner,
        idle,
        sleep: Box::pin(tokio::time::sleep(idle)),
        fault,
    })
}

struct IdleTimeout {
    inner: Body,
    idle: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    fault: FaultSlot,
}

#[derive(Debug)]
struct Stalled(Duration);

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no body bytes for {:?}", self.0)
    }
}

impl std::error::Error for Stalled {}

impl IdleTimeout {
    fn note(&self, fault: BodyFault) {
        *self.fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(fault);
    }
}

impl HttpBody for IdleTimeout {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(error))) => {
                this.note(BodyFault::Ended);
                Poll::Ready(Some(Err(error)))
            }
            Poll::Ready(frame) => {
                let deadline = tokio::time::Instant::now() + this.idle;
                this.sleep.as_mut().reset(deadline);
                Poll::Ready(frame)
            }
            Poll::Pending => {
                if this.sleep.as_mut().poll(cx).is_ready() {
                    this.note(BodyFault::Stalled);
                    return Poll::Ready(Some(Err(axum::Error::new(Stalled(this.idle)))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue, StatusCode};

    fn declaring(length: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("content-length", HeaderValue::from_static(length));
        headers
    }

    #[test]
    fn a_declared_length_above_the_limit_is_refused_before_any_body_byte() {
        let response = declared_too_large(&declaring("5242881"), 5 * 1024 * 1024).unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(response.headers()["connection"], "close");
        assert_eq!(response.headers()["content-type"], "application/json");
        for within in ["0", "5242880", " 12 "] {
            assert!(declared_too_large(&declaring(within), 5 * 1024 * 1024).is_none());
        }
        // No Content-Length (chunked), or one hyper would refuse itself.
        assert!(declared_too_large(&HeaderMap::new(), 10).is_none());
        assert!(declared_too_large(&declaring("x"), 10).is_none());
    }
}
