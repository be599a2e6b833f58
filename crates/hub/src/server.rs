//! The HTTP/1.1 server loop: keep-alive connections with bounded header
//! size and header read time, and a graceful stop that lets requests in
//! flight finish (so that their durable outcomes are answered).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt as _;

use crate::tls::{ClientIdentity, Connection};

/// Largest request head (request line and headers) accepted: Mojaloop's 64 KB.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Longest a client may take to send its request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a stop waits for requests in flight.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `stop` completes, then stops accepting
/// and waits (up to [`DRAIN_TIMEOUT`]) for the connections' requests. With
/// `tls`, each connection is a TLS one (mutual, if the configuration asks
/// for client certificates). Every request carries a
/// [`tls::Connection`](crate::tls::Connection) extension: the peer's address
/// and, on mutual TLS, who its certificate names.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    stop: impl Future<Output = ()>,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .keep_alive(true)
        .max_buf_size(MAX_HEADER_BYTES)
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let builder = Arc::new(builder);
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
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
                let (app, builder, watcher, acceptor) =
                    (app.clone(), builder.clone(), graceful.watcher(), acceptor.clone());
                // The handshake runs on the connection's own task, so a slow
                // client never holds up the accept loop.
                tokio::spawn(async move {
                    match acceptor {
                        None => {
                            let connection = Connection { peer, certificate: None };
                            serve_connection(&builder, watcher, stream, app, connection).await;
                        }
                        Some(acceptor) => {
                            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                            let stream = match handshake {
                                Ok(Ok(stream)) => stream,
                                Ok(Err(error)) => {
                                    tracing::debug!(%peer, %error, "TLS handshake refused");
                                    return;
                                }
                                Err(_) => {
                                    tracing::debug!(%peer, "TLS handshake timed out");
                                    return;
                                }
                            };
                            let certificate = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|chain| chain.first())
                                .map(|cert| Arc::new(ClientIdentity::of(cert)));
                            let connection = Connection { peer, certificate };
                            serve_connection(&builder, watcher, stream, app, connection).await;
                        }
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

async fn serve_connection<S>(
    builder: &http1::Builder,
    watcher: hyper_util::server::graceful::Watcher,
    stream: S,
    app: Router,
    connection: Connection,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = app.map_request(
        move |mut request: axum::http::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(connection.clone());
            request
        },
    );
    let connection =
        builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    if let Err(error) = watcher.watch(connection).await {
        tracing::debug!(%error, "connection ended with an error");
    }
}
