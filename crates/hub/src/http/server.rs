//! The HTTP/1.1 server loop: keep-alive connections with bounded header
//! size and header read time, a cap on open connections and on those of
//! one client (see [`crate::connections`]), and a graceful stop that lets
//! requests in flight finish (so that their durable outcomes are
//! answered).

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt as _;

pub use crate::connections::DEFAULT_MAX_CONNECTIONS;
use crate::connections::{client_of, ClientSlot, Clients, OnRefused, Refused};
use crate::tls::{ClientIdentity, Connection};

/// Largest request head (request line and headers) accepted: Mojaloop's 64 KB.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Most header fields in a request.
pub const MAX_HEADER_COUNT: usize = 100;
/// What hyper is told: more than [`MAX_HEADER_COUNT`], so that the guard,
/// not hyper, refuses a request with too many (hyper's refusal has no body).
const HYPER_MAX_HEADERS: usize = 1_000;
/// Longest a client may take to send a request head, counted from when the
/// connection is ready for one: it also closes keep-alive connections idle
/// for that long (Node's servers, Mojaloop's, close them after 5 s).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a stop waits for requests in flight.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a listener serves, beyond its application.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// TLS (mutual, if the configuration asks for client certificates).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Open connections at most; one more is answered 503 (2003) on plain
    /// HTTP, or closed before the handshake on TLS.
    pub max_connections: usize,
    /// Open connections from one client (see
    /// [`client_of`](crate::connections::client_of)) at most; one more is
    /// refused the same way, at once.
    pub max_connections_per_client: usize,
    /// Told of each connection refused at a cap (the hub counts it as a
    /// refusal and warns, rate-limited).
    pub on_refused: Option<OnRefused>,
    /// Where the listener counts its connections (for `/metrics`).
    pub stats: Arc<ConnectionStats>,
    /// Longest a client may take to send a request head (and a keep-alive
    /// connection may stay idle).
    pub header_read_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            tls: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS / 2,
            on_refused: None,
            stats: Arc::default(),
            header_read_timeout: HEADER_READ_TIMEOUT,
        }
    }
}

/// A listener's connection counters.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    /// Connections open now.
    pub open: AtomicUsize,
    /// Connections accepted, refusals included.
    pub accepted: AtomicU64,
    /// Connections refused because `max_connections` were open.
    pub refused: AtomicU64,
    /// Connections refused because their client held
    /// `max_connections_per_client`.
    pub refused_per_client: AtomicU64,
    /// Accept calls that failed (out of file descriptors and the like).
    pub accept_errors: AtomicU64,
}

/// The body answering a connection over the cap: FSPIOP's shape
/// (central-ledger uses the same on the admin address).
const TOO_MANY_CONNECTIONS: &str = r#"{"errorInformation":{"errorCode":"2003","errorDescription":"Service currently unavailable - too many open connections"}}"#;
/// The body answering a connection over its client's share.
const TOO_MANY_FROM_CLIENT: &str = r#"{"errorInformation":{"errorCode":"2003","errorDescription":"Service currently unavailable - too many open connections from this address"}}"#;

/// Counts a connection as open (and against its client) until dropped.
struct OpenConnection {
    stats: Arc<ConnectionStats>,
    _client: ClientSlot,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.stats.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Logs failed accepts at most once a second, with how many there were.
struct AcceptErrors {
    next_log: Instant,
    unlogged: u64,
}

impl AcceptErrors {
    fn note(&mut self, stats: &ConnectionStats, error: &std::io::Error) {
        stats.accept_errors.fetch_add(1, Ordering::Relaxed);
        self.unlogged += 1;
        let now = Instant::now();
        if now >= self.next_log {
            tracing::warn!(
                %error,
                failed = self.unlogged,
                open = stats.open.load(Ordering::Relaxed),
                "accept failed (count since the last such line); is the open-files limit too low?"
            );
            self.unlogged = 0;
            self.next_log = now + Duration::from_secs(1);
        }
    }
}

/// Serves `app` on `listener` until `stop` completes, then stops accepting
/// and waits (up to [`DRAIN_TIMEOUT`]) for the connections' requests. Every
/// request carries a [`tls::Connection`](crate::tls::Connection) extension:
/// the peer's address and, on mutual TLS, who its certificate names.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    stop: impl Future<Output = ()>,
    options: ServeOptions,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .keep_alive(true)
        .max_buf_size(MAX_HEADER_BYTES)
        // hyper's own limit (100) would refuse with an empty 431; the
        // guard counts headers exactly and answers in FSPIOP's shape.
        .max_headers(HYPER_MAX_HEADERS)
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    let builder = Arc::new(builder);
    let acceptor = options.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let stats = options.stats.clone();
    let max_connections = options.max_connections.max(1);
    let max_per_client = options.max_connections_per_client.max(1);
    let clients = Arc::new(Clients::default());
    let report = |peer: std::net::SocketAddr, refused: Refused| {
        if let Some(on_refused) = &options.on_refused {
            (on_refused.0)(peer.ip(), refused);
        }
    };
    let mut accept_errors = AcceptErrors {
        next_log: Instant::now(),
        unlogged: 0,
    };
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: back off briefly
                        // instead of spinning on the error.
                        accept_errors.note(&stats, &error);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                stats.accepted.fetch_add(1, Ordering::Relaxed);
                let open = match admit(&stats, &clients, peer, max_connections, max_per_client) {
                    Ok(open) => open,
                    Err((refused, body)) => {
                        report(peer, refused);
                        if acceptor.is_none() {
                            tokio::spawn(refuse(stream, body));
                        }
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (app, builder, watcher, acceptor) =
                    (app.clone(), builder.clone(), graceful.watcher(), acceptor.clone());
                // The handshake runs on the connection's own task, so a slow
                // client never holds up the accept loop.
                tokio::spawn(async move {
                    let _open = open;
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

/// Counts a new connection from `peer` as open, or says which cap refuses
/// it (counted as such) and the body to answer it with. The address's cap
/// first: when it is full, that is why whoever asks is refused.
fn admit(
    stats: &Arc<ConnectionStats>,
    clients: &Arc<Clients>,
    peer: std::net::SocketAddr,
    max_connections: usize,
    max_per_client: usize,
) -> Result<OpenConnection, (Refused, &'static str)> {
    if stats.open.fetch_add(1, Ordering::Relaxed) >= max_connections {
        stats.open.fetch_sub(1, Ordering::Relaxed);
        stats.refused.fetch_add(1, Ordering::Relaxed);
        return Err((
            Refused::Full {
                max: max_connections,
            },
            TOO_MANY_CONNECTIONS,
        ));
    }
    match clients.admit(client_of(peer.ip()), max_per_client) {
        Ok(slot) => Ok(OpenConnection {
            stats: stats.clone(),
            _client: slot,
        }),
        Err(_) => {
            stats.open.fetch_sub(1, Ordering::Relaxed);
            stats.refused_per_client.fetch_add(1, Ordering::Relaxed);
            Err((
                Refused::ClientFull {
                    max: max_per_client,
                },
                TOO_MANY_FROM_CLIENT,
            ))
        }
    }
}

/// Answers a connection over a cap with `body` without reading its
/// request, within a second, and closes it.
async fn refuse(mut stream: tokio::net::TcpStream, body: &'static str) {
    use tokio::io::AsyncWriteExt as _;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         cache-control: no-cache\r\nretry-after: 1\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
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
    let stream = crate::refusals::RefusalRewriter::new(stream);
    let connection =
        builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    if let Err(error) = watcher.watch(connection).await {
        tracing::debug!(%error, "connection ended with an error");
    }
}
