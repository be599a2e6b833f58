//! W3C trace context (`traceparent`) on the callbacks the hub sends itself.
//!
//! A forwarded request keeps the sender's `traceparent` and `tracestate`
//! byte for byte (they travel with its signed headers). A callback the hub
//! writes on its own continues the trace of the request that caused it, as
//! a child span (same trace id, a span id of its own), or, when no request
//! had one (an expiry), starts a trace, so that every callback a DFSP gets
//! can be followed in its tracing system.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::HeaderValue;

/// The part of a request's `traceparent` a child span needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: u128,
    pub flags: u8,
}

impl TraceParent {
    /// Reads `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>` (version
    /// 00's shape; a later version's value starts the same way and may
    /// carry more). All-zero ids are invalid; an invalid value is ignored,
    /// as the W3C specification asks, so `None`.
    pub fn parse(value: &[u8]) -> Option<TraceParent> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.splitn(5, '-');
        let version = parts.next()?;
        let trace_id = parts.next()?;
        let span_id = parts.next()?;
        let flags = parts.next()?;
        let rest = parts.next();
        let hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if !hex(version, 2) || version == "ff" || (version == "00" && rest.is_some()) {
            return None;
        }
        if !hex(trace_id, 32) || !hex(span_id, 16) || !hex(flags, 2) {
            return None;
        }
        let trace_id = u128::from_str_radix(trace_id, 16).ok()?;
        let span_id = u64::from_str_radix(span_id, 16).ok()?;
        if trace_id == 0 || span_id == 0 {
            return None;
        }
        Some(TraceParent {
            trace_id,
            flags: u8::from_str_radix(flags, 16).ok()?,
        })
    }

    /// A new trace, sampled.
    pub fn start() -> TraceParent {
        let high = u128::from(random_u64());
        TraceParent {
            trace_id: (high << 64 | u128::from(random_u64())).max(1),
            flags: 1,
        }
    }

    /// The `traceparent` of a new span of this trace.
    pub fn child_header(self) -> HeaderValue {
        let mut text = String::with_capacity(55);
        let _ = write!(
            text,
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id,
            random_u64().max(1),
            self.flags
        );
        HeaderValue::from_str(&text).expect("hex digits and dashes are a valid header value")
    }
}

/// Span and trace ids only need to be unlikely to repeat, not secret: a
/// splitmix64 sequence seeded from the clock and the address space layout.
fn random_u64() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut seed = STATE.load(Ordering::Relaxed);
    if seed == 0 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let address = &STATE as *const AtomicU64 as u64;
        seed = nanos ^ address.rotate_left(32) | 1;
        let _ = STATE.compare_exchange(0, seed, Ordering::Relaxed, Ordering::Relaxed);
    }
    let mut z = STATE
        .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_child_keeps_the_trace_and_gets_its_own_span() {
        let parent = TraceParent::parse(PARENT.as_bytes()).unwrap();
        assert_eq!(parent.trace_id, 0x0af7651916cd43dd8448eb211c80319c);
        assert_eq!(parent.flags, 1);
        let child = parent.child_header();
        let child = child.to_str().unwrap();
        assert_eq!(child.len(), 55);
        assert_eq!(&child[..36], &PARENT[..36]);
        assert_ne!(&child[36..52], &PARENT[36..52]);
        assert_eq!(&child[52..], "-01");
        assert_eq!(
            TraceParent::parse(child.as_bytes()).map(|t| t.trace_id),
            Some(parent.trace_id)
        );
    }

    #[test]
    fn invalid_values_are_ignored() {
        for bad in [
            "",
            "00",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
        ] {
            assert_eq!(TraceParent::parse(bad.as_bytes()), None, "{bad}");
        }
        // A later version may append fields.
        assert!(TraceParent::parse(
            b"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more"
        )
        .is_some());
    }

    #[test]
    fn new_traces_differ() {
        let (a, b) = (TraceParent::start(), TraceParent::start());
        assert_ne!(a.trace_id, b.trace_id);
        assert!(TraceParent::parse(a.child_header().as_bytes()).is_some());
    }
}
