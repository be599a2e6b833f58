//! Active and standby on a PostgreSQL store: waiting for the lease as a
//! standby (answering health checks, refusing everything else), and
//! keeping it as the active. The lease and its fencing number are in
//! `store::pg_lease`; correctness rests on the fencing check in every
//! commit, not on anything here: this module decides only when a process
//! serves and when it stops serving (the [`Fence`]). A process that stops
//! serving does not exit: `serve.rs` makes it a standby again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hub::role::Role;
use hyper::{Response, StatusCode};
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
///
/// `store` is the store a term that gave up before serving kept (with its
/// warm copy); without one the standby opens it, waiting (and answering
/// health checks) for as long as the database cannot be reached. A fault
/// no waiting mends (a refused password, a database that is not kasi's)
/// is returned as an error.
pub async fn wait_for_lease(
    lease: Lease,
    url: String,
    store: Option<store::pg::PgStore>,
    warm: Warm,
    role: Arc<Role>,
    listeners: (TcpListener, TcpListener),
    options: (hub::server::ServeOptions, hub::server::ServeOptions),
) -> anyhow::Result<Option<Taken>> {
    let poll = lease.lease() / 4;
    let stop = Arc::new(AtomicBool::new(false));
    let (taken_sender, mut taken) = tokio::sync::oneshot::channel();
    let poller = {
        let (role, stop) = (role.clone(), stop.clone());
        let standby = Standby {
            lease,
            url,
            store,
            warm,
            role,
            stop,
            poll,
        };
        std::thread::Builder::new()
            .name("kasi-standby".into())
            .spawn(move || standby.run(taken_sender))?
    };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    // The standby's answers through the same server as the active's:
    // TLS, connection caps and header timeouts alike.
    let (stop_serving, serving) = tokio::sync::watch::channel(false);
    let until_stopped = |mut serving: tokio::sync::watch::Receiver<bool>| async move {
        let _ = serving.wait_for(|stopped| *stopped).await;
    };
    let app = |address: Address| {
        let role = role.clone();
        axum::Router::new().fallback(move |request: axum::extract::Request| {
            let answer = standby_answer(&role, address, request.method(), request.uri().path());
            async move { answer.map(axum::body::Body::new) }
        })
    };
    let (api, admin) = listeners;
    let (api_options, admin_options) = options;
    let (api_app, admin_app) = (app(Address::Fspiop), app(Address::Admin));
    let servers = tokio::spawn(async move {
        tokio::join!(
            hub::server::serve(api, api_app, until_stopped(serving.clone()), api_options),
            hub::server::serve(admin, admin_app, until_stopped(serving), admin_options),
        )
    });
    let outcome = tokio::select! {
        taken = &mut taken => taken.ok(),
        _ = tokio::signal::ctrl_c() => None,
        _ = terminate.recv() => None,
    };
    stop.store(true, Ordering::Release);
    // Connections a standby answered are closed once their request is
    // done: from now on the same addresses are the active's.
    let _ = stop_serving.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), servers).await;
    match outcome {
        Some(Ok(taken)) => {
            let _ = poller.join();
            Ok(Some(taken))
        }
        Some(Err(fatal)) => {
            let _ = poller.join();
            Err(fatal)
        }
        None => {
            info!("stop signal received while standby");
            Ok(None)
        }
    }
}

/// A standby's connections refused at a cap: a warning, at most one per
/// 10 s with how many it stands for (a standby has no metrics of its
/// own but its role's).
pub fn standby_refusals() -> hub::connections::OnRefused {
    let repeats = std::sync::Mutex::new(engine::Repeats::new(Duration::from_secs(10)));
    hub::connections::OnRefused(Arc::new(move |ip, refused| {
        let repeated = repeats.lock().unwrap_or_else(|e| e.into_inner()).failed();
        if let Some(repeated) = repeated {
            warn!(client = %ip, ?refused, repeated, "standby: a connection refused at its cap");
        }
    }))
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

/// The standby's thread: opens the store (again, after an outage), polls
/// the lease, and keeps what recovery reads loaded and current, so that
/// taking over reads only what was committed since the last refresh.
struct Standby {
    lease: Lease,
    url: String,
    store: Option<store::pg::PgStore>,
    warm: Warm,
    role: Arc<Role>,
    stop: Arc<AtomicBool>,
    poll: Duration,
}

impl Standby {
    fn run(mut self, taken: tokio::sync::oneshot::Sender<anyhow::Result<Taken>>) {
        let mut unreachable = Quiet::new("standby: cannot reach the store (retrying)");
        let mut warm_failing = Quiet::new(
            "standby: cannot bring its copy of the store up to date (retrying; the copy is kept)",
        );
        let mut holder_seen = String::new();
        let mut warmed_at: Option<Instant> = None;
        while !self.stop.load(Ordering::Acquire) {
            let store = match self.store.take() {
                Some(store) => store,
                None => match store::pg::PgStore::open(&self.url) {
                    Ok(store) => store,
                    Err(failure) if failure.transient => {
                        self.role.set_store_reachable(false);
                        unreachable.failed(&failure.message);
                        std::thread::sleep(self.poll);
                        continue;
                    }
                    Err(failure) => {
                        error!(error = %failure, "standby: cannot open the store, and waiting will not mend it");
                        let _ = taken.send(Err(anyhow::Error::new(failure).context(format!(
                            "cannot open the store at {}",
                            store::pg::redact_url(&self.url)
                        ))));
                        return;
                    }
                },
            };
            let taking = self.lease.try_take();
            if let Some(ended) = self.lease.ended_sessions() {
                warn!(
                    holder = %ended.holder,
                    fencing = ended.fencing,
                    sessions = ended.sessions,
                    "the lease ran out while a transaction of its holder still held its row (a paused or cut-off process): ended it, so that this process can take over"
                );
            }
            match taking {
                Ok(Some(fencing)) => {
                    unreachable.passed();
                    self.role.set_store_reachable(true);
                    self.role.set_lease(self.lease.holder(), fencing);
                    info!(
                        fencing,
                        "took the lease: recovering, then serving as the active hub"
                    );
                    let _ = taken.send(Ok((fencing, self.lease, store)));
                    return;
                }
                Ok(None) => {
                    unreachable.passed();
                    self.role.set_store_reachable(true);
                    if let Ok(state) = self.lease.state() {
                        if state.holder != holder_seen {
                            info!(
                                active = %state.holder,
                                fencing = state.fencing,
                                "standby: another kasi holds the lease"
                            );
                            holder_seen = state.holder.clone();
                        }
                        self.role.set_lease(&state.holder, state.fencing);
                    }
                }
                Err(failure) => {
                    self.role.set_store_reachable(false);
                    unreachable.failed(&failure.message);
                }
            }
            let mut store = store;
            if warmed_at.is_none_or(|at| at.elapsed() >= self.warm.every) {
                let started = Instant::now();
                let first = store.warm_transfers().is_none();
                match store.warm((self.warm.horizon_ms)()) {
                    Ok(()) => {
                        warm_failing.passed();
                        if first {
                            info!(
                                transfers = store.warm_transfers().unwrap_or(0),
                                ms = started.elapsed().as_millis() as u64,
                                "standby: the store is loaded, and kept current while waiting"
                            );
                        }
                    }
                    Err(failure) => warm_failing.failed(&failure.message),
                }
                warmed_at = Some(Instant::now());
            }
            self.store = Some(store);
            std::thread::sleep(self.poll);
        }
    }
}

/// A failure that repeats while it lasts (an outage): said once, then at
/// most every [`Quiet::EVERY`] with how many times it happened since, and
/// once more when it passes (the lines of `engine::Repeats`).
struct Quiet {
    what: &'static str,
    repeats: engine::Repeats,
}

impl Quiet {
    const EVERY: Duration = Duration::from_secs(30);

    fn new(what: &'static str) -> Quiet {
        Quiet {
            what,
            repeats: engine::Repeats::new(Quiet::EVERY),
        }
    }

    fn failed(&mut self, why: &str) {
        if let Some(repeated) = self.repeats.failed() {
            warn!(error = %why, repeated, "{}", self.what);
        }
    }

    fn passed(&mut self) {
        if let Some(recovered) = self.repeats.recovered() {
            info!(
                failures = recovered.failures,
                failing_ms = recovered.failing_for.as_millis() as u64,
                "{}: it works again",
                self.what
            );
        }
    }
}

/// What a standby answers: its role on the health routes (`/health/live`
/// 200, `/health` and `/health/ready` 503 so that a load balancer sends it
/// nothing), the role's gauges on the admin address's `/metrics`, and 503
/// with `Retry-After` and an FSPIOP error (2003) to everything else.
fn standby_answer(
    role: &Arc<Role>,
    address: Address,
    method: &hyper::Method,
    path: &str,
) -> Response<Full<Bytes>> {
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
    match (method == hyper::Method::GET, path) {
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

/// Tripped once when this process must stop serving at once (its lease
/// lost, or its pipeline failed for good), with why; whoever serves waits
/// on it. Trips from any thread.
#[derive(Clone)]
pub struct Fence(Arc<tokio::sync::watch::Sender<Option<String>>>);

impl Fence {
    pub fn new() -> Fence {
        Fence(Arc::new(tokio::sync::watch::Sender::new(None)))
    }

    /// Trips the fence (the first reason is the one kept).
    pub fn trip(&self, why: &str) {
        self.0.send_if_modified(|reason| {
            if reason.is_some() {
                return false;
            }
            *reason = Some(why.to_string());
            true
        });
    }

    /// Why, once tripped.
    pub async fn tripped(&self) -> String {
        let mut receiver = self.0.subscribe();
        let reason = match receiver.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone(),
            // The sender lives as long as `self`.
            Err(_) => None,
        };
        match reason {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }
}

/// The active's lease keeper: a thread renewing the lease every `lease /
/// 3`. Deposed (the fencing number moved), or without a renewal for a
/// whole lease — a renewal that fails, or one that hangs on a connection
/// into a partition (a watchdog counts the time) — it trips the [`Fence`]:
/// a standby may hold the lease by then, and every commit this process
/// tries would fail its fencing check anyway, so it stops answering at
/// once and becomes a standby itself.
pub struct LeaseKeeper {
    /// Dropped to stop the threads at once.
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<JoinHandle<Lease>>,
    /// Cleared once the fence is tripped: the lease is no longer this
    /// process's to renew or release.
    held: Arc<AtomicBool>,
    fencing: i64,
}

pub fn keep_lease(mut lease: Lease, fencing: i64, role: Arc<Role>, fence: Fence) -> LeaseKeeper {
    let (stop, stopping) = std::sync::mpsc::channel::<()>();
    let (watchdog_stop, watchdog_stopping) = std::sync::mpsc::channel::<()>();
    let every = lease.lease() / 3;
    let lease_length = lease.lease();
    let held = Arc::new(AtomicBool::new(true));
    let born = Instant::now();
    // Milliseconds after `born` of the last renewal that succeeded.
    let renewed_ms = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let give_up = {
        let (held, role, fence) = (held.clone(), role.clone(), fence.clone());
        move |why: &str| {
            if held.swap(false, Ordering::AcqRel) {
                role.set_active(false);
                fence.trip(why);
            }
        }
    };
    {
        let (renewed_ms, held, give_up) = (renewed_ms.clone(), held.clone(), give_up.clone());
        std::thread::Builder::new()
            .name("kasi-lease-watchdog".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    watchdog_stopping.recv_timeout(every)
                {
                    if !held.load(Ordering::Acquire) {
                        return;
                    }
                    let renewed_at = born + Duration::from_millis(renewed_ms.load(Ordering::Acquire));
                    if renewed_at.elapsed() >= lease_length {
                        error!(
                            lease_ms = lease_length.as_millis() as u64,
                            "no lease renewal for a whole lease period (the database unreachable, or not answering): a standby may take over; this process stops serving"
                        );
                        give_up("could not renew the lease for a whole lease period");
                        return;
                    }
                }
            })
            .expect("start the lease watchdog");
    }
    let thread = {
        let held = held.clone();
        std::thread::Builder::new()
            .name("kasi-lease".into())
            .spawn(move || {
                // The watchdog ends with this thread.
                let _watchdog = watchdog_stop;
                let mut failing = Quiet::new("cannot renew the lease (retrying)");
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopping.recv_timeout(every)
                {
                    if !held.load(Ordering::Acquire) {
                        break;
                    }
                    let attempt = Instant::now();
                    match lease.renew(fencing) {
                        Ok(true) => {
                            failing.passed();
                            renewed_ms.fetch_max(
                                (attempt - born).as_millis() as u64,
                                Ordering::AcqRel,
                            );
                            role.set_store_reachable(true);
                        }
                        Ok(false) => {
                            let now = lease.state().map(|s| (s.holder, s.fencing)).ok();
                            error!(
                                fencing,
                                now = ?now,
                                "deposed: another kasi took the lease; this process stops serving (nothing it did not commit was acknowledged)"
                            );
                            give_up("deposed: another kasi took the lease");
                            break;
                        }
                        Err(failure) => {
                            role.set_store_reachable(false);
                            failing.failed(&failure.message);
                        }
                    }
                }
                lease
            })
            .expect("start the lease thread")
    };
    LeaseKeeper {
        stop: Some(stop),
        thread: Some(thread),
        held,
        fencing,
    }
}

impl LeaseKeeper {
    /// Gives the lease up if this process still holds it, so that a standby
    /// (or this process, as one) takes over now rather than when it
    /// expires. After a clean stop every acknowledged commit is made; after
    /// giving up, nothing more will be.
    pub fn release(mut self) {
        drop(self.stop.take());
        let Some(thread) = self.thread.take() else {
            return;
        };
        if !self.held.swap(false, Ordering::AcqRel) {
            // Not ours any more: the keeper may still wait on a dead
            // connection, and ends by itself when it fails.
            return;
        }
        let Ok(mut lease) = thread.join() else {
            return;
        };
        match lease.release(self.fencing) {
            Ok(()) => info!("released the lease"),
            Err(failure) => {
                warn!(error = %failure, "could not release the lease (it expires by itself)")
            }
        }
    }
}
