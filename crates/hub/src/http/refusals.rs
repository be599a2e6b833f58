//! hyper answers a request it cannot parse (a broken request line, a NUL in
//! a header, a head over its buffer) by itself, with an empty body, before
//! any of kasi's code sees the request. Those answers are the hub's
//! refusals too, so they must carry the FSPIOP error shape like every other
//! one: this stream wrapper recognises hyper's automatic answer as it is
//! written and writes the same status with an FSPIOP error body instead.
//!
//! hyper's automatic answer is a bare head — status 400, 414 or 431 and
//! `content-length: 0` — which kasi's own handlers never write (the guard
//! gives every error a JSON body), so the recognition cannot catch one of
//! kasi's answers.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection's stream with hyper's automatic refusals rewritten.
pub struct RefusalRewriter<S> {
    inner: S,
    /// The rewritten answer still to be written.
    pending: Vec<u8>,
    written: usize,
}

impl<S> RefusalRewriter<S> {
    pub fn new(inner: S) -> RefusalRewriter<S> {
        RefusalRewriter {
            inner,
            pending: Vec::new(),
            written: 0,
        }
    }
}

/// The FSPIOP answer replacing hyper's automatic one in `head`, if `head`
/// is one.
fn rewrite(head: &[u8]) -> Option<Vec<u8>> {
    let (status, description) = if head.starts_with(b"HTTP/1.1 400 ") {
        (
            "400 Bad Request",
            "Malformed syntax - the request line or a header could not be parsed",
        )
    } else if head.starts_with(b"HTTP/1.1 431 ") {
        (
            "431 Request Header Fields Too Large",
            "Malformed syntax - the request head is larger than allowed",
        )
    } else if head.starts_with(b"HTTP/1.1 414 ") {
        ("414 URI Too Long", "Malformed syntax - the URI is too long")
    } else {
        return None;
    };
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")?;
    // Only a bare head: nothing after it, and no body announced.
    if end + 4 != head.len() {
        return None;
    }
    let lower = head[..end].to_ascii_lowercase();
    if !lower.windows(19).any(|w| w == b"\r\ncontent-length: 0") {
        return None;
    }
    let body = fspiop::error_body(ledger::ErrorCode::MALFORMED_SYNTAX, description);
    let mut answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncache-control: no-cache\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    Some(answer)
}

impl<S: AsyncWrite + Unpin> RefusalRewriter<S> {
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for RefusalRewriter<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for RefusalRewriter<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        if let Some(answer) = rewrite(buf) {
            this.pending = answer;
            this.written = 0;
            // hyper's bytes are taken; ours go out now or on its flush.
            if let Poll::Ready(Err(error)) = this.poll_drain(cx) {
                return Poll::Ready(Err(error));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }

    // Not vectored: hyper then writes each message head as one buffer, so
    // an automatic answer is always seen whole.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bare_refusals_are_rewritten() {
        let canned = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: Mon, 23 Nov 2026 12:00:00 GMT\r\n\r\n";
        let answer = String::from_utf8(rewrite(canned).unwrap()).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{answer}"
        );
        assert!(answer.contains(r#""errorCode":"3101""#), "{answer}");
        let canned = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert!(rewrite(canned).is_some());
        // kasi's own answers have bodies, or are not refusals.
        assert!(rewrite(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 90\r\n\r\n").is_none());
        assert!(rewrite(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}").is_none());
        assert!(rewrite(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(rewrite(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n").is_none());
    }
}
