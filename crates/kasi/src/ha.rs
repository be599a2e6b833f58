//! Active and standby on a PostgreSQL store: waiting for the lease as a
//! standby (answering health checks, refusing everything else), and
//! keeping it as the active. The lease and its fencing number are in
//! `store::pg_lease`; correctness rests on the fencing check in every
//! commit, not on anything here: this module decides only when a process
//! serves and when it gives up.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hub::role::Role;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use store::pg_lease::Lease;
use tokio::net::TcpListener;
use tracing::{error, info, warn};

/// This process's name in the lease row: `--instance-name`, or the host's
/// name and the process id.
pub fn default_instance_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "kasi".to_string());
    format!("{host}-{}", std::process::id())
}

/// Which address a standby answers on.
#[derive(Clone, Copy)]
enum Address {
    Fspiop,
    Admin,
}

/// Serves the standby's answers on both listeners and polls the lease
/// every `lease / 4` until this process takes it: its fencing number and
/// the lease (kept by [`keep_lease`] from then on), or `None` when a stop
/// signal came first.
pub async fn wait_for_lease(
    lease: Lease,
    store: store::pg::PgStore,
    warm: Warm,
    role: Arc<Role>,
    api: &TcpListener,
    admin: &TcpListener,
) -> anyhow::Result<Option<Taken>> {
    let poll = lease.lease() / 4;
    let stop = Arc::new(AtomicBool::new(false));
    let (taken_sender, mut taken) = tokio::sync::oneshot::channel();
    let poller = {
        let (role, stop) = (role.clone(), stop.clone());
        std::thread::Builder::new()
            .name("kasi-standby".into())
            .spawn(move || poll_lease(lease, store, warm, role, stop, poll, taken_sender))?
    };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let outcome = loop {
        let (stream, address) = tokio::select! {
            accepted = api.accept() => (accepted, Address::Fspiop),
            accepted = admin.accept() => (accepted, Address::Admin),
            taken = &mut taken => break taken.ok(),
            _ = tokio::signal::ctrl_c() => break None,
            _ = terminate.recv() => break None,
        };
        let Ok((stream, _)) = stream else { continue };
        let role = role.clone();
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            let answer = standby_answer(&role, address, &request);
            async move { Ok::<_, Infallible>(answer) }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
        });
    };
    stop.store(true, Ordering::Release);
    // Connections a standby answered are closed once their request is
    // done: from now on the same sockets would be the active's.
    let _ = tokio::time::timeout(Duration::from_secs(2), graceful.shutdown()).await;
    match outcome {
        Some(taken) => {
            let _ = poller.join();
            Ok(Some(taken))
        }
        None => {
            info!("stop signal received while standby");
            Ok(None)
        }
    }
}

/// The lease taken: its fencing number, the lease to keep, and the store
/// (with its warm copy) to recover from.
pub type Taken = (i64, Lease, store::pg::PgStore);

/// How a standby keeps its copy of the store warm.
pub struct Warm {
    /// The horizon recovery will read with, as of now (`None`: all).
    pub horizon_ms: Box<dyn Fn() -> Option<i64> + Send>,
    /// How often the copy is brought up to date.
    pub every: Duration,
}

/// A standby keeps what recovery reads loaded and current, so that taking
/// over reads only what was committed since the last refresh.
fn poll_lease(
    mut lease: Lease,
    mut store: store::pg::PgStore,
    warm: Warm,
    role: Arc<Role>,
    stop: Arc<AtomicBool>,
    poll: Duration,
    taken: tokio::sync::oneshot::Sender<Taken>,
) {
    let mut reachable = true;
    let mut holder_seen = String::new();
    let mut warmed_at: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        match lease.try_take() {
            Ok(Some(fencing)) => {
                role.set_store_reachable(true);
                role.set_lease(lease.holder(), fencing);
                info!(
                    fencing,
                    "took the lease: recovering, then serving as the active hub"
                );
                let _ = taken.send((fencing, lease, store));
                return;
            }
            Ok(None) => {
                if !reachable {
                    info!("the store answers again");
                    reachable = true;
                }
                role.set_store_reachable(true);
                if let Ok(state) = lease.state() {
                    if state.holder != holder_seen {
                        info!(
                            active = %state.holder,
                            fencing = state.fencing,
                            "standby: another kasi holds the lease"
                        );
                        holder_seen = state.holder.clone();
                    }
                    role.set_lease(&state.holder, state.fencing);
                }
                if warmed_at.is_none_or(|at| at.elapsed() >= warm.every) {
                    let started = Instant::now();
                    match store.warm((warm.horizon_ms)()) {
                        Ok(()) if warmed_at.is_none() => info!(
                            transfers = store.warm_transfers().unwrap_or(0),
                            ms = started.elapsed().as_millis() as u64,
                            "standby: the store is loaded, and kept current while waiting"
                        ),
                        Ok(()) => {}
                        Err(failure) => {
                            warn!(error = %failure, "standby: cannot read the store (retrying)")
                        }
                    }
                    warmed_at = Some(Instant::now());
                }
            }
            Err(failure) => {
                role.set_store_reachable(false);
                if reachable {
                    warn!(error = %failure, "standby: cannot read or take the lease (retrying)");
                    reachable = false;
                }
            }
        }
        std::thread::sleep(poll);
    }
}

/// What a standby answers: its role on the health routes (`/health/live`
/// 200, `/health` and `/health/ready` 503 so that a load balancer sends it
/// nothing), the role's gauges on the admin address's `/metrics`, and 503
/// with `Retry-After` and an FSPIOP error (2003) to everything else.
fn standby_answer(
    role: &Arc<Role>,
    address: Address,
    request: &Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let retry_after_s = 1;
    let json = |status: StatusCode, body: serde_json::Value| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .header("retry-after", retry_after_s.to_string())
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("a valid response")
    };
    let active = role
        .lease()
        .map(|(holder, _)| holder)
        .filter(|holder| !holder.is_empty());
    match (request.method() == hyper::Method::GET, path) {
        (true, "/health/live") => {
            let mut body = serde_json::json!({"status": "OK"});
            role.health_fields(&mut body);
            json(StatusCode::OK, body)
        }
        (true, "/health" | "/health/ready") => {
            let mut body = serde_json::json!({"status": "STANDBY"});
            role.health_fields(&mut body);
            json(StatusCode::SERVICE_UNAVAILABLE, body)
        }
        (true, "/metrics") if matches!(address, Address::Admin) => {
            let mut registry = prometheus_client::registry::Registry::default();
            registry.register_collector(Box::new(hub::metrics::RoleCollector(role.clone())));
            let mut text = String::new();
            let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
            Response::builder()
                .status(StatusCode::OK)
                .header(
                    "content-type",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )
                .body(Full::new(Bytes::from(text)))
                .expect("a valid response")
        }
        _ => {
            let description = match active {
                Some(holder) => format!(
                    "Service currently unavailable - this kasi is a standby; {holder} is the active hub"
                ),
                None => "Service currently unavailable - this kasi is a standby".to_string(),
            };
            json(
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"errorInformation": {"errorCode": "2003", "errorDescription": description}}),
            )
        }
    }
}

/// The active's lease keeper: a thread renewing the lease every `lease /
/// 3`. Deposed (the fencing number moved), or unable to renew for a whole
/// lease, the process exits: a standby may hold the lease by then, and
/// every commit this process tries would fail its fencing check anyway.
pub struct LeaseKeeper {
    /// Dropped to stop the thread at once.
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<JoinHandle<Lease>>,
    fencing: i64,
}

pub fn keep_lease(mut lease: Lease, fencing: i64, role: Arc<Role>) -> LeaseKeeper {
    let (stop, stopping) = std::sync::mpsc::channel::<()>();
    let every = lease.lease() / 3;
    let thread = std::thread::Builder::new()
        .name("kasi-lease".into())
        .spawn(move || {
            let mut renewed_at = Instant::now();
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopping.recv_timeout(every)
            {
                let attempt = Instant::now();
                match lease.renew(fencing) {
                    Ok(true) => {
                        renewed_at = attempt;
                        role.set_store_reachable(true);
                    }
                    Ok(false) => {
                        let now = lease.state().map(|s| (s.holder, s.fencing)).ok();
                        error!(
                            fencing,
                            now = ?now,
                            "deposed: another kasi took the lease; this process stops (nothing it did not commit was acknowledged)"
                        );
                        std::process::exit(3);
                    }
                    Err(failure) => {
                        role.set_store_reachable(false);
                        warn!(error = %failure, "cannot renew the lease (retrying)");
                        if renewed_at.elapsed() >= lease.lease() {
                            error!(
                                lease_ms = lease.lease().as_millis() as u64,
                                "could not renew the lease for a whole lease period: a standby may take over; this process stops"
                            );
                            std::process::exit(3);
                        }
                    }
                }
            }
            lease
        })
        .expect("start the lease thread");
    LeaseKeeper {
        stop: Some(stop),
        thread: Some(thread),
        fencing,
    }
}

impl LeaseKeeper {
    /// After a clean stop (every acknowledged commit made): gives the lease
    /// up, so that a standby takes over now rather than when it expires.
    pub fn release(mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            if let Ok(mut lease) = thread.join() {
                match lease.release(self.fencing) {
                    Ok(()) => info!("released the lease"),
                    Err(failure) => {
                        warn!(error = %failure, "could not release the lease (it expires by itself)")
                    }
                }
            }
        }
    }
}
