//! The HTTP/1.1 server loop: keep-alive connections with bounded header
//! size and header read time, and a graceful stop that lets requests in
//! flight finish (so that their durable outcomes are answered).

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Largest request head (request line and headers) accepted: Mojaloop's 64 KB.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Longest a client may take to send its request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a stop waits for requests in flight.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `app` on `listener` until `stop` completes, then stops accepting
/// and waits (up to [`DRAIN_TIMEOUT`]) for the connections' requests.
pub async fn serve(listener: TcpListener, app: Router, stop: impl Future<Output = ()>) {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .keep_alive(true)
        .max_buf_size(MAX_HEADER_BYTES)
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: back off briefly
                        // instead of spinning on the error.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let connection = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                });
            }
            () = &mut stop => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still in flight after {DRAIN_TIMEOUT:?}; closing their connections"
        );
    }
}
