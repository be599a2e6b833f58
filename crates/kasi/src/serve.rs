//! `kasi serve`: open the store, recover, run the pipeline and both APIs.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use engine::{Engine, EngineConfig, PipelineThreads};
use hub::notify::{Dispatcher, DispatcherConfig};
use hub::Hub;
use ledger::{Command, Outcome};
use store::sqlite::{SqliteOptions, SqliteStore};
use tracing::{error, info, warn};

mod plan;

pub use plan::ServeArgs;
use plan::{AdminPlan, ListenPlan, ServePlan};

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // Decided from the flags alone, before anything is read, opened or
    // bound: a refused configuration touches nothing.
    let plan = args.plan()?;
    let settings = Settings::load(&plan)?;
    match plan.store.location.clone() {
        store::StoreLocation::Sqlite(dir) => {
            let runtime = build_runtime(&plan.listen)?;
            let opened = open_sqlite(&dir, plan.store.history)?;
            let mut store = opened.store;
            let (ledger, recovery) =
                engine::recover(store.as_mut(), plan.ledger.limits).context("recovery failed")?;
            let term = Term {
                store,
                ledger,
                recovery,
                reader: opened.reader,
                feed: opened.feed,
                delivery: opened.delivery,
                role: Arc::new(hub::role::Role::embedded()),
                listeners: None,
                fence: None,
            };
            match serve_term(&plan, &settings, term, &runtime)? {
                Ended::Stopped => {
                    info!("stopped cleanly");
                    Ok(ExitCode::SUCCESS)
                }
                // Only a process on a shared store gives up serving.
                Ended::GaveUp(why) => bail!("stopped serving: {why}"),
            }
        }
        store::StoreLocation::Postgres(url) => serve_shared(&plan, &settings, &url),
    }
}

/// What every term of this process shares: what the plan names, read
/// once (certificates, keys, credentials) and the process's limits.
struct Settings {
    admin_auth: Arc<hub::admin_auth::AdminAuth>,
    tls: Option<Tls>,
    callback_tls: Arc<rustls::ClientConfig>,
    signer: Option<hub::notify::CallbackSigner>,
    /// The threads of JWS crypto, for the process's whole life: the
    /// dispatcher signs in it, the FSPIOP middleware verifies in it.
    jws_pool: Option<Arc<hub::jws_pool::JwsPool>>,
    caps: hub::connections::Caps,
    /// The alerts' settings with their files read.
    alerts: hub::alerts::AlertsConfig,
    /// The wire log, opened once for the process (its writer thread owns
    /// the directory).
    wire_log: Option<wirelog::WireLog>,
}

impl Settings {
    fn load(plan: &ServePlan) -> anyhow::Result<Settings> {
        let admin_auth = admin_access(plan)?;
        let tls = match &plan.tls {
            Some(tls) => {
                let reloading =
                    hub::tls::ReloadingCert::load(tls.cert.clone()).map_err(anyhow::Error::msg)?;
                let api = hub::tls::server_config(reloading.clone(), tls.client_ca.as_deref())
                    .map_err(anyhow::Error::msg)?;
                let admin = match &tls.admin_client_ca {
                    Some(ca) => {
                        hub::admin_auth::server_config_with_client_ca(reloading.clone(), ca)
                    }
                    None => hub::tls::server_config(reloading.clone(), None),
                }
                .map_err(anyhow::Error::msg)?;
                info!(
                    cert = %tls.cert.cert.display(),
                    mutual = tls.client_ca.is_some(),
                    "TLS on both addresses"
                );
                Some(Tls {
                    api,
                    admin,
                    reloading,
                })
            }
            None => None,
        };
        let open_files = raise_open_files_limit();
        // A file-size limit reached must be a store error the hub retries and
        // reports (like a full disk), not the default SIGXFSZ that kills it.
        // SAFETY: setting a signal's disposition to SIG_IGN has no handler to
        // race with; nothing else in the process handles SIGXFSZ.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        }
        let caps = hub::connections::Caps::size(
            open_files,
            plan.listen.max_connections,
            plan.listen.max_connections_per_client,
        );
        caps.log(open_files);
        let callbacks = &plan.callbacks;
        let callback_tls =
            hub::tls::client_config(callbacks.ca.as_deref(), callbacks.identity.as_ref())
                .map_err(anyhow::Error::msg)
                .context("outbound TLS (--callback-ca, --callback-cert, --callback-key)")?;
        info!(
            roots = %callbacks
                .ca
                .as_ref()
                .map_or("system".to_string(), |path| path.display().to_string()),
            client_certificate = callbacks.identity.is_some(),
            "https callbacks and oracle calls"
        );
        let jws_pool = plan.jws_pool.as_ref().map(|pool| {
            let threads = pool
                .threads
                .unwrap_or_else(hub::jws_pool::JwsPool::default_threads);
            info!(
                threads,
                queue = hub::jws_pool::QUEUE_CAPACITY,
                "JWS signatures computed and checked off the HTTP threads (--jws-threads)"
            );
            hub::jws_pool::JwsPool::new(threads, hub::jws_pool::QUEUE_CAPACITY)
        });
        let signer = match &callbacks.signing_key {
            Some((path, hub_name)) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read --jws-signing-key {}", path.display()))?;
                let key = hub::jws::SigningKey::from_pem(&text).map_err(|error| {
                    anyhow::anyhow!("--jws-signing-key {}: {error}", path.display())
                })?;
                info!(
                    alg = key.alg().name(),
                    "hub-originated callbacks are signed"
                );
                Some(hub::notify::CallbackSigner {
                    key: Arc::new(key),
                    source: hub_name.to_string(),
                    pool: jws_pool
                        .clone()
                        .context("the plan gives a signing key a JWS pool")?,
                })
            }
            None => None,
        };
        let alerts = alerts_settings(plan)?;
        let wire_log = match &plan.wire_log {
            Some(wire) => {
                let log =
                    wirelog::WireLog::open(&wire.dir, wire.config.clone()).with_context(|| {
                        format!(
                            "cannot open the wire log in {} (--wire-log off to run without it)",
                            wire.dir.display()
                        )
                    })?;
                info!(
                    dir = %wire.dir.display(),
                    max_bytes = wire.config.max_bytes,
                    retention_s = wire.config.retention.as_secs(),
                    "transfers' messages kept in the wire log (--wire-log)"
                );
                Some(log)
            }
            None => None,
        };
        Ok(Settings {
            admin_auth,
            tls,
            callback_tls,
            signer,
            jws_pool,
            caps,
            alerts,
            wire_log,
        })
    }
}

/// The plan's alerts, with the password and CA files it names read.
fn alerts_settings(plan: &ServePlan) -> anyhow::Result<hub::alerts::AlertsConfig> {
    let mut alerts = plan.hub.alerts.clone();
    let Some(mail) = &mut alerts.mail else {
        return Ok(alerts);
    };
    if let Some(path) = &plan.alerts.password {
        let password = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --smtp-password-file {}", path.display()))?;
        mail.smtp.password = Some(password.trim_end_matches(['\r', '\n']).to_string());
    }
    if let Some(path) = &plan.alerts.ca {
        mail.ca_pem = Some(
            std::fs::read(path)
                .with_context(|| format!("cannot read --smtp-ca {}", path.display()))?,
        );
    }
    info!(
        server = %mail.smtp.host,
        port = mail.smtp.port,
        tls = ?mail.smtp.tls,
        from = %mail.from,
        "alerts mailed to the DFSPs' contacts"
    );
    Ok(alerts)
}

fn build_runtime(listen: &ListenPlan) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = listen.http_threads {
        runtime.worker_threads(threads);
    }
    runtime
        .enable_all()
        .thread_name("kasi-http")
        .build()
        .context("cannot start the async runtime")
}

/// One term of serving: a recovered ledger on an open store, and what
/// serving needs besides.
struct Term {
    store: Box<dyn store::Store>,
    ledger: ledger::Ledger,
    recovery: engine::Recovery,
    reader: Arc<dyn store::StoreReader>,
    /// The change feed's own connection (`GET /feed`, retention, the
    /// publisher's cursor).
    feed: Arc<dyn store::feed::FeedLog>,
    delivery: Box<dyn store::delivery::Delivery>,
    role: Arc<hub::role::Role>,
    /// With PostgreSQL: the listeners the standby answered on, bound
    /// before the lease was taken.
    listeners: Option<(tokio::net::TcpListener, tokio::net::TcpListener)>,
    /// With PostgreSQL: tripped when this process must stop serving at
    /// once (its lease lost, its pipeline failed).
    fence: Option<crate::ha::Fence>,
}

/// How a term ended.
enum Ended {
    /// A stop signal: everything acknowledged is committed, the callbacks
    /// drained (as far as the grace allowed).
    Stopped,
    /// This process may no longer serve (its lease lost, the store gone
    /// for longer than a lease, its pipeline failed): it stopped at once,
    /// committing nothing more; what it acknowledged is in the store and
    /// whoever serves next recovers it and sends its callbacks again.
    GaveUp(String),
}

/// Serves one term: starts the pipeline on the recovered ledger, the
/// dispatcher and both addresses, until a stop signal or the fence.
fn serve_term(
    plan: &ServePlan,
    settings: &Settings,
    term: Term,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<Ended> {
    let hub_name = plan.hub.hub_name;
    let Term {
        mut store,
        ledger,
        recovery,
        reader,
        feed,
        mut delivery,
        role,
        listeners,
        fence,
    } = term;
    if let Some(problem) = &recovery.history_snapshot_dropped {
        warn!(
            %problem,
            "what recovery read first (the history snapshot, or a standby's warm copy) did not add up: dropped, the whole store was read instead (and audited)"
        );
    }
    info!(
        store = %store.describe(),
        history_snapshot_through_seq = recovery.history_snapshot_through,
        participants = recovery.participants,
        accounts = recovery.accounts,
        transfers = recovery.transfers,
        archived = recovery.archived,
        load_ms = recovery.load_time.as_millis() as u64,
        rebuild_ms = recovery.rebuild_time.as_millis() as u64,
        "recovered the ledger"
    );
    // Delivery state: the watermark and the dead letters. The callbacks of
    // transfers prepared or finished since the watermark are derived again
    // (read now, queued once the dispatcher runs).
    let dead_letters = delivery.dead_letters().context("callback delivery state")?;
    let watermark = match delivery.watermark().context("callback delivery state")? {
        Some(watermark) => watermark,
        // First start with delivery state: nothing before now is owed.
        None => {
            let watermark = hub::now_ms() - hub::notify::WATERMARK_MARGIN_MS;
            delivery
                .apply(Some(watermark), &[], &[])
                .context("callback delivery state")?;
            watermark
        }
    };
    let redeliver = reader
        .transfers_touched_since(watermark)
        .context("cannot read the transfers to notify again")?;
    info!(
        transfers = redeliver.len(),
        dead_letters = dead_letters.len(),
        "callback delivery state read"
    );
    let existing_hub = ledger.hub_name();
    if let Some(existing) = existing_hub {
        if existing != hub_name {
            bail!(
                "the hub in {} is named '{existing}', not '{hub_name}': pass --hub-name {existing}",
                plan.store.location
            );
        }
    }

    // Expired transfers come from the committing thread once durable; a task
    // turns them into 3303 callbacks.
    let (expired_sender, mut expired) = tokio::sync::mpsc::unbounded_channel();
    let threads = plan.ledger.pipeline_threads.unwrap_or_else(|| {
        PipelineThreads::for_cores(
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        )
    });
    let config = EngineConfig {
        on_expired: Some(Box::new(move |views| {
            let _ = expired_sender.send(views);
        })),
        threads,
        // On a shared store a pipeline that failed for good gives the
        // term up: this process becomes a standby and recovers afresh.
        on_failed: fence.clone().map(|fence| -> engine::FailedSink {
            Box::new(move |why: &str| fence.trip(&format!("the ledger pipeline stopped: {why}")))
        }),
        ..EngineConfig::default()
    };
    info!(
        threads = threads.count(),
        "ledger pipeline (--pipeline-threads)"
    );
    // The store tells the last durable feed_seq after each commit: long
    // polls and the publisher wake on it, never on a timer.
    // It starts at the newest change kept, so that a follower that starts
    // behind it (the rollup after an upgrade) shows its lag at once, not
    // only after the first commit.
    let newest = feed.read_feed(0, 1, None).map_or(0, |page| page.newest);
    let (feed_head, feed_heads) = tokio::sync::watch::channel(newest);
    store.set_feed_listener(Box::new(move |through| {
        feed_head.send_replace(through);
    }));
    let feed = hub::feed::FeedConfig {
        log: feed,
        head: feed_heads,
        retention: plan.feed.retention,
    };
    let engine = Engine::start(ledger, store, config);
    if existing_hub.is_none() {
        match engine
            .handle()
            .execute(vec![Command::CreateHub { name: hub_name }])?
            .as_slice()
        {
            [Outcome::Done] => info!(hub = %hub_name, "created the hub participant"),
            other => bail!("could not create the hub participant: {other:?}"),
        }
    }

    let grace = plan.callbacks.shutdown_grace;
    let served = runtime.block_on(async {
        let dispatcher = Dispatcher::new(DispatcherConfig {
            tls: Some(settings.callback_tls.clone()),
            signer: settings.signer.clone(),
            final_retry_for: plan.callbacks.retry_for,
            max_in_flight_per_destination: plan.callbacks.concurrency,
            wire_log: settings.wire_log.clone(),
            ..DispatcherConfig::default()
        });
        // Until the callbacks since `watermark` are queued again, the saved
        // watermark must not move past it.
        let hold = watermark + hub::notify::WATERMARK_MARGIN_MS;
        dispatcher.hold_watermark(hold);
        dispatcher.attach_journal(
            Box::new(Journal(delivery)),
            dead_letters
                .into_iter()
                .map(hub::notify::DeadLetter::stored)
                .collect(),
        );
        // The plan's configuration, with what only this term can give.
        let mut hub_config = plan.hub.clone();
        hub_config.callback_tls = Some(settings.callback_tls.clone());
        hub_config.admin_auth = settings.admin_auth.clone();
        hub_config.role = role.clone();
        hub_config.jws_pool = settings.jws_pool.clone();
        hub_config.store_reader = Some(reader.clone());
        hub_config.feed = Some(feed.clone());
        hub_config.alerts = settings.alerts.clone();
        hub_config.wire_log = settings.wire_log.clone();
        if hub_config.jws_verify.is_on() {
            info!(resources = %hub_config.jws_verify.resources.join(","), "inbound FSPIOP-Signature checked");
        }
        let hub = Arc::new(Hub::new(hub_config, engine.handle(), dispatcher.clone()).await?);
        if !redeliver.is_empty() {
            let queued = hub.redeliver(&redeliver, hub::now_ms());
            info!(
                transfers = redeliver.len(),
                callbacks = queued,
                "callbacks since the delivery watermark queued again"
            );
        }
        drop(redeliver);
        dispatcher.release_watermark(hold);
        hub.metrics.start_runtime_probe();
        hub.start_jws_key_watch();
        hub.start_four_eyes_expiry();
        let watch = &plan.watch;
        if !watch.close_at.is_empty() {
            let times: Vec<String> = watch.close_at.iter().map(ToString::to_string).collect();
            info!(times = %times.join(","), "settlement windows close on schedule (UTC)");
            tokio::spawn(hub::watch::close_on_schedule(
                hub.clone(),
                watch.close_at.clone(),
            ));
        }
        if let Some((percent, every)) = watch.position_alarm {
            tokio::spawn(hub::watch::watch_positions(hub.clone(), percent, every));
        }
        if hub.alerts.is_on() {
            tokio::spawn(hub::alerts::watch_callbacks(hub.clone()));
            // Cap changes and settlements, at least once: from the feed.
            tokio::spawn(hub::alerts_feed::follow(hub.clone(), feed.clone()));
        }
        tokio::spawn(hub::feed::keep_retention(feed.clone()));
        tokio::spawn(hub::rollup::follow(feed.clone(), hub.metrics.clone()));
        tokio::spawn(hub::indexes::follow(feed.clone(), hub.metrics.clone()));
        if let Some(amqp) = &plan.feed.amqp {
            tokio::spawn(hub::feed_amqp::publish(
                feed.clone(),
                hub::feed_amqp::AmqpSettings {
                    url: amqp.url.clone(),
                    exchange: amqp.exchange.clone(),
                },
                hub.metrics.clone(),
            ));
        }
        let expiry_hub = hub.clone();
        let expiry_task = tokio::spawn(async move {
            while let Some(views) = expired.recv().await {
                info!(
                    count = views.len(),
                    transfers = %expired_ids(&views),
                    "transfers expired"
                );
                expiry_hub.notify_expired(&views);
            }
        });
        let listening = Listening {
            caps: settings.caps.clone(),
            header_read_timeout: plan.listen.header_read_timeout,
        };
        let serving = serve_http(
            hub,
            plan.listen.api,
            plan.listen.admin,
            listeners,
            settings.tls.clone(),
            listening,
        );
        let tripped = async {
            match &fence {
                Some(fence) => fence.tripped().await,
                None => std::future::pending().await,
            }
        };
        // The fence wins over everything: a process that may no longer
        // serve stops answering at once (its connections are dropped with
        // this term's runtime), without draining anything.
        let result = tokio::select! {
            biased;
            why = tripped => {
                role.set_active(false);
                return anyhow::Ok(Err(why));
            }
            result = serving => result,
        };
        info!("stopped accepting requests");
        anyhow::Ok(Ok((result, dispatcher, expiry_task)))
    })?;
    let (served, dispatcher, expiry_task) = match served {
        Ok(served) => served,
        Err(why) => {
            error!(
                %why,
                "gave up serving: stopped answering; nothing more is committed (what was acknowledged is in the store, and whoever serves next sends its callbacks again)"
            );
            if !engine.abandon(ABANDON_WAIT) {
                warn!(
                    wait_s = ABANDON_WAIT.as_secs(),
                    "the ledger pipeline has not stopped yet (a commit waits on a dead connection); left to end by itself"
                );
            }
            return Ok(Ended::GaveUp(why));
        }
    };

    info!("committing queued work");
    let stopped = engine.shutdown().map(drop);
    runtime.block_on(async {
        // The pipeline is stopped, so no expiry can follow; deliver what is queued.
        let _ = expiry_task.await;
        let started = Instant::now();
        dispatcher.shutdown(grace).await;
        info!(
            ms = started.elapsed().as_millis() as u64,
            "callbacks drained"
        );
        for stats in dispatcher.stats() {
            info!(
                destination = %stats.destination,
                sent_ok = stats.sent_ok,
                http_error = stats.http_error,
                failed = stats.failed,
                retried = stats.retried,
                dropped = stats.dropped,
                mean_us = stats.latency_sum_us.checked_div(stats.latency_count).unwrap_or(0),
                max_us = stats.latency_max_us,
                "callbacks by destination"
            );
        }
    });
    served?;
    stopped.context("the ledger pipeline failed")?;
    Ok(Ended::Stopped)
}

/// How long a process giving up waits for its pipeline's threads.
const ABANDON_WAIT: Duration = Duration::from_secs(5);

/// What serving needs of the embedded store.
struct OpenedSqlite {
    store: Box<dyn store::Store>,
    reader: Arc<dyn store::StoreReader>,
    feed: Arc<dyn store::feed::FeedLog>,
    delivery: Box<dyn store::delivery::Delivery>,
}

fn open_sqlite(
    dir: &std::path::Path,
    history: Option<store::sqlite_history::HistoryOptions>,
) -> anyhow::Result<OpenedSqlite> {
    let store = SqliteStore::open(
        dir,
        SqliteOptions {
            history,
            ..SqliteOptions::default()
        },
    )
    .with_context(|| format!("cannot open the store in {}", dir.display()))?;
    let reader = store::sqlite::TransferLookup::open(dir)
        .context("cannot open the store for transfer lookups")?;
    let delivery = store::delivery::DeliveryDb::open(dir)
        .context("cannot open the callback delivery state (callbacks.db)")?;
    let feed = store::sqlite_feed::SqliteFeed::open(dir)
        .context("cannot open the store for the change feed")?;
    Ok(OpenedSqlite {
        store: Box::new(store),
        reader: Arc::new(reader),
        feed: Arc::new(feed),
        delivery: Box::new(delivery),
    })
}

/// Serves a PostgreSQL store, one of any number of processes: a standby
/// until it takes the lease, then the active until it is stopped — or
/// until it may no longer serve (the lease lost, the database gone for
/// longer than a lease, the pipeline failed), when it stops at once and
/// is a standby again, in the same process, on the same addresses. Only a
/// stop signal, or a fault no waiting can mend (a refused password, a
/// store that is not kasi's), ends it.
fn serve_shared(plan: &ServePlan, settings: &Settings, url: &str) -> anyhow::Result<ExitCode> {
    let name = plan
        .store
        .instance_name
        .clone()
        .unwrap_or_else(crate::ha::default_instance_name);
    let role = Arc::new(hub::role::Role::shared("postgres", &name));
    // Bound once for the process's life: between terms, connections wait
    // in the kernel's queue rather than being refused.
    let listeners = bind_std_listeners(plan.listen.api, plan.listen.admin)?;
    let retention_ms = plan.ledger.limits.transfer_retention_ms;
    let mut kept: Option<store::pg::PgStore> = None;
    let mut terms: u64 = 0;
    loop {
        let runtime = build_runtime(&plan.listen)?;
        let ended = serve_shared_term(
            plan,
            settings,
            url,
            &name,
            &role,
            &listeners,
            &runtime,
            &mut kept,
            retention_ms,
            terms,
        );
        terms += 1;
        // Every task of the term (connections, callbacks, watchers) ends
        // with its runtime.
        runtime.shutdown_timeout(Duration::from_secs(2));
        match ended? {
            Ended::Stopped => {
                info!("stopped cleanly");
                return Ok(ExitCode::SUCCESS);
            }
            Ended::GaveUp(why) => {
                role.set_active(false);
                warn!(
                    %why,
                    "standby again: this process waits for the lease and serves when it holds it"
                );
                // A moment for the database (or the other process) before
                // this one competes for the lease again.
                std::thread::sleep(REJOIN_PAUSE);
            }
        }
    }
}

/// Whether `error` is a store fault that may pass by waiting (the
/// database restarting, unreachable), not a configuration to mend.
fn store_may_recover(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<store::StoreError>()
            .is_some_and(|error| error.transient)
            || cause
                .downcast_ref::<engine::EngineError>()
                .is_some_and(|error| {
                    matches!(
                        error,
                        engine::EngineError::StoreUnavailable(_)
                            | engine::EngineError::StoreFailed(_)
                    )
                })
    })
}

/// Between giving up and waiting for the lease again.
const REJOIN_PAUSE: Duration = Duration::from_millis(200);

/// One standby-then-active term on a PostgreSQL store (see
/// [`serve_shared`]). `kept` carries the store, and its warm copy, from a
/// term that gave up before serving into the next.
#[allow(clippy::too_many_arguments)]
fn serve_shared_term(
    plan: &ServePlan,
    settings: &Settings,
    url: &str,
    name: &str,
    role: &Arc<hub::role::Role>,
    listeners: &(std::net::TcpListener, std::net::TcpListener),
    runtime: &tokio::runtime::Runtime,
    kept: &mut Option<store::pg::PgStore>,
    retention_ms: Option<i64>,
    terms: u64,
) -> anyhow::Result<Ended> {
    let location = &plan.store.location;
    // Copies of the listeners for the standby's server, then others for
    // the active's: each server closes its own when it stops.
    let copies = || -> anyhow::Result<(tokio::net::TcpListener, tokio::net::TcpListener)> {
        let _entered = runtime.enter();
        Ok((
            tokio::net::TcpListener::from_std(listeners.0.try_clone()?)?,
            tokio::net::TcpListener::from_std(listeners.1.try_clone()?)?,
        ))
    };
    let (api, admin) = copies()?;
    if terms == 0 {
        info!(
            instance = %name,
            store = %location,
            addresses = %format!("FSPIOP {}, admin {}", api.local_addr()?, admin.local_addr()?),
            "standby: waiting for the lease (this process serves once it holds it)"
        );
    }
    let warm = crate::ha::Warm {
        horizon_ms: Box::new(move || retention_ms.map(|retention_ms| hub::now_ms() - retention_ms)),
        every: WARM_EVERY,
    };
    let lease = store::pg_lease::Lease::new(url, name, plan.store.lease_ms);
    let standby_options =
        |tls: Option<Arc<rustls::ServerConfig>>, max, per_client| hub::server::ServeOptions {
            tls,
            max_connections: max,
            max_connections_per_client: per_client,
            on_refused: Some(crate::ha::standby_refusals()),
            header_read_timeout: plan.listen.header_read_timeout,
            ..hub::server::ServeOptions::default()
        };
    let caps = &settings.caps;
    let options = (
        standby_options(
            settings.tls.as_ref().map(|tls| tls.api.clone()),
            caps.fspiop,
            caps.fspiop_per_client,
        ),
        standby_options(
            settings.tls.as_ref().map(|tls| tls.admin.clone()),
            caps.admin,
            caps.admin_per_client,
        ),
    );
    let Some((fencing, lease, mut store)) = runtime.block_on(crate::ha::wait_for_lease(
        lease,
        url.to_string(),
        kept.take(),
        warm,
        role.clone(),
        (api, admin),
        options,
    ))?
    else {
        return Ok(Ended::Stopped);
    };
    role.set_lease(name, fencing);
    // The active keeps the history snapshot current (a standby never
    // commits, so it computes none).
    store.keep_history_snapshot(plan.store.history);
    let fence = crate::ha::Fence::new();
    // Renewed from now on, through recovery.
    let lease_keeper = crate::ha::keep_lease(lease, fencing, role.clone(), fence.clone());
    store.fence(fencing);
    role.set_active(true);
    // A store fault from here until serving gives the lease back (so that
    // another process, or this one, tries again at once) and keeps the
    // store, with its warm copy, for the next try.
    let opened = (|| -> Result<_, store::StoreError> {
        let reader = store::pg_reader::PgReader::open(url)?;
        let delivery = store::pg_delivery::PgDelivery::open(url, Some(fencing))?;
        let feed = store::pg_feed::PgFeed::open(url)?;
        Ok((reader, delivery, feed))
    })();
    let (reader, delivery, feed) = match opened {
        Ok(opened) => opened,
        Err(error) if error.transient => {
            role.set_active(false);
            lease_keeper.release();
            *kept = Some(store);
            return Ok(Ended::GaveUp(format!(
                "cannot open the store at {location} for lookups and callbacks: {error}"
            )));
        }
        Err(error) => {
            return Err(anyhow::Error::new(error))
                .with_context(|| format!("cannot open the store at {location}"))
        }
    };
    let (ledger, recovery) = match engine::recover(&mut store, plan.ledger.limits) {
        Ok(recovered) => recovered,
        Err(error) if error.transient => {
            role.set_active(false);
            lease_keeper.release();
            *kept = Some(store);
            return Ok(Ended::GaveUp(format!("recovery failed: {error}")));
        }
        Err(error) => return Err(anyhow::Error::new(error)).context("recovery failed"),
    };
    let term = Term {
        store: Box::new(store),
        ledger,
        recovery,
        reader: Arc::new(reader),
        feed: Arc::new(feed),
        delivery: Box::new(delivery),
        role: role.clone(),
        listeners: Some(copies()?),
        fence: Some(fence),
    };
    let ended = match serve_term(plan, settings, term, runtime) {
        Ok(ended) => ended,
        // The store lost while starting to serve (reading the delivery
        // state, say): as any store fault, the term is given up.
        Err(error) if store_may_recover(&error) => Ended::GaveUp(format!("{error:#}")),
        Err(error) => {
            lease_keeper.release();
            return Err(error);
        }
    };
    // After a clean stop every acknowledged commit is made: the lease is
    // given up so that a standby takes over now. After giving up, it is
    // given up too where it still can be (a pipeline that failed with the
    // lease still held), so that the next active need not wait for it.
    lease_keeper.release();
    Ok(ended)
}

/// How often a standby brings its copy of the store up to date.
const WARM_EVERY: Duration = Duration::from_secs(2);

/// Both addresses, bound once by a process on a shared store (each term
/// serves on copies of them).
fn bind_std_listeners(
    api_listen: SocketAddr,
    admin_listen: SocketAddr,
) -> anyhow::Result<(std::net::TcpListener, std::net::TcpListener)> {
    // Bound as the embedded store's hub binds them (tokio's backlog), then
    // handed out of this short-lived runtime.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("cannot start the async runtime")?;
    let (api, admin) = runtime.block_on(bind_listeners(api_listen, admin_listen))?;
    Ok((api.into_std()?, admin.into_std()?))
}

async fn bind_listeners(
    api_listen: SocketAddr,
    admin_listen: SocketAddr,
) -> anyhow::Result<(tokio::net::TcpListener, tokio::net::TcpListener)> {
    let api = tokio::net::TcpListener::bind(api_listen)
        .await
        .with_context(|| format!("cannot listen on {api_listen} (--api-listen)"))?;
    let admin = tokio::net::TcpListener::bind(admin_listen)
        .await
        .with_context(|| format!("cannot listen on {admin_listen} (--admin-listen)"))?;
    Ok((api, admin))
}

/// The dispatcher's journal: `callbacks.db`, or the PostgreSQL store's
/// tables.
struct Journal(Box<dyn store::delivery::Delivery>);

impl hub::notify::DeliveryJournal for Journal {
    fn write(
        &mut self,
        watermark: Option<i64>,
        keep: &[hub::notify::DeadLetter],
        forget: &[u64],
    ) -> Result<(), String> {
        let rows: Vec<store::delivery::DeadLetterRow> =
            keep.iter().map(|letter| letter.row.clone()).collect();
        self.0
            .apply(watermark, &rows, forget)
            .map_err(|error| error.to_string())
    }
}

/// Limits of the two listeners.
struct Listening {
    caps: hub::connections::Caps,
    header_read_timeout: Duration,
}

/// Who may use the admin API: the tokens file the plan names, read now,
/// or the open access the plan decided (on loopback, or as the operator
/// insisted).
fn admin_access(plan: &ServePlan) -> anyhow::Result<Arc<hub::admin_auth::AdminAuth>> {
    match &plan.admin {
        AdminPlan::Credentials {
            tokens,
            provider,
            provider_secret,
        } => {
            let provider = match provider {
                Some(settings) => {
                    let mut settings = (**settings).clone();
                    if let Some(path) = provider_secret {
                        let secret = std::fs::read_to_string(path).with_context(|| {
                            format!("--oidc-client-secret-file {}", path.display())
                        })?;
                        settings.client_secret = Some(secret.trim().to_string());
                    }
                    Some(Arc::new(
                        hub::oidc::Oidc::new(settings).map_err(anyhow::Error::msg)?,
                    ))
                }
                None => None,
            };
            let auth = match (tokens, provider) {
                (Some(path), provider) => {
                    let auth =
                        hub::admin_auth::AdminAuth::load(path).map_err(anyhow::Error::msg)?;
                    info!(tokens = %path.display(), "admin API requires credentials");
                    match provider {
                        Some(oidc) => auth.with_oidc(oidc),
                        None => auth,
                    }
                }
                (None, Some(oidc)) => hub::admin_auth::AdminAuth::provider_only(oidc),
                (None, None) => unreachable!("the plan is open without credentials"),
            };
            if let Some(oidc) = auth.oidc() {
                info!(issuer = %oidc.settings().issuer, audience = %oidc.settings().audience, "admin API accepts the identity provider's access tokens");
            }
            Ok(Arc::new(auth))
        }
        AdminPlan::Open(open) => {
            if !plan.listen.admin.ip().is_loopback() {
                tracing::warn!(admin = %plan.listen.admin, "admin API served WITHOUT authentication (--admin-insecure) on a non-loopback address");
            }
            Ok(open.clone())
        }
    }
}

/// TLS of both listeners, and the certificate SIGHUP reloads.
#[derive(Clone)]
struct Tls {
    api: Arc<rustls::ServerConfig>,
    admin: Arc<rustls::ServerConfig>,
    reloading: Arc<hub::tls::ReloadingCert>,
}

async fn serve_http(
    hub: Arc<Hub>,
    api_listen: SocketAddr,
    admin_listen: SocketAddr,
    listeners: Option<(tokio::net::TcpListener, tokio::net::TcpListener)>,
    tls: Option<Tls>,
    listening: Listening,
) -> anyhow::Result<()> {
    let (api, admin) = match listeners {
        Some(bound) => bound,
        None => bind_listeners(api_listen, admin_listen).await?,
    };
    // Listen for the stop signals before saying we serve, so a signal sent
    // right after the log line is never the default (fatal) one.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    let (stop_sender, stop) = tokio::sync::watch::channel(false);
    let signal = tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => info!("SIGINT received"),
            _ = terminate.recv() => info!("SIGTERM received"),
        }
        let _ = stop_sender.send(true);
    });
    // SIGHUP re-reads what an operator rotates: the TLS certificate and
    // the admin credentials. Anything that does not load keeps what is in
    // force.
    let reloading = tls.as_ref().map(|tls| tls.reloading.clone());
    let admin_auth = hub.config.admin_auth.clone();
    if let Some(oidc) = admin_auth.oidc().cloned() {
        // Fetched now, so that the first person does not wait and the log
        // says at start whether the provider answers; one that is down
        // does not stop the hub (the tokens file is the way in meanwhile),
        // and the first token tries again.
        tokio::spawn(async move {
            if let Ok(keys) = oidc.refresh().await {
                info!(issuer = %oidc.settings().issuer, keys, "identity provider's keys fetched");
            }
        });
    }
    if reloading.is_some() || admin_auth.file().is_some() {
        let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("cannot listen for SIGHUP")?;
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                if let Some(reloading) = &reloading {
                    match reloading.reload() {
                        Ok(()) => {
                            info!(cert = %reloading.files().cert.display(), "SIGHUP: TLS certificate reloaded")
                        }
                        Err(error) => {
                            tracing::error!(%error, "SIGHUP: TLS certificate not reloaded; the previous one stays")
                        }
                    }
                }
                if let Some(file) = admin_auth.file() {
                    match admin_auth.reload() {
                        Ok(credentials) => {
                            info!(file = %file.display(), credentials, "SIGHUP: admin credentials reloaded")
                        }
                        Err(error) => {
                            tracing::error!(%error, "SIGHUP: admin credentials not reloaded; the previous ones stay")
                        }
                    }
                }
            }
        });
    }
    info!(
        api = %api.local_addr()?,
        admin = %admin.local_addr()?,
        tls = tls.is_some(),
        "serving"
    );
    info!(
        url = %format!(
            "{}://{}/console/",
            if tls.is_some() { "https" } else { "http" },
            admin.local_addr()?
        ),
        "operator console"
    );
    let wait = |mut stop: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    let caps = &listening.caps;
    let api_options = hub::server::ServeOptions {
        tls: tls.as_ref().map(|tls| tls.api.clone()),
        max_connections: caps.fspiop,
        max_connections_per_client: caps.fspiop_per_client,
        on_refused: Some(hub.connection_refusals("fspiop")),
        stats: hub.metrics.api_connections.clone(),
        header_read_timeout: listening.header_read_timeout,
    };
    let admin_options = hub::server::ServeOptions {
        tls: tls.as_ref().map(|tls| tls.admin.clone()),
        max_connections: caps.admin,
        max_connections_per_client: caps.admin_per_client,
        on_refused: Some(hub.connection_refusals("admin")),
        stats: hub.metrics.admin_connections.clone(),
        header_read_timeout: listening.header_read_timeout,
    };
    let api_app = hub::api_app(hub.clone());
    // The console is served beside the admin API and calls it in-process
    // as the person signed in (see crates/console).
    let admin_api = hub::admin_api(hub.clone());
    let refused = hub.clone();
    let console = console::router(
        admin_api.clone(),
        hub.config.admin_auth.clone(),
        Some(Arc::new(
            move |refusal: &hub::admin_auth::GateRefusal<'_>| refused.admin_gate_refused(refusal),
        )),
        hub.config.hub_name.as_str(),
        admin_options.tls.is_some(),
    );
    let admin_app = hub::admin_app_with(hub, admin_api, console);
    tokio::join!(
        hub::server::serve(api, api_app, wait(stop.clone()), api_options),
        hub::server::serve(admin, admin_app, wait(stop), admin_options),
    );
    signal.abort();
    Ok(())
}

/// Raises the soft open-files limit to the hard limit (a hub holds a socket
/// per DFSP connection, and 1,024 is a common default); the soft limit now
/// in force, or `None` if it cannot be read.
fn raise_open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            info!(
                from = limit.rlim_cur,
                to = raised.rlim_cur,
                "raised the open-files limit"
            );
            return Some(raised.rlim_cur);
        }
        tracing::warn!(
            limit = limit.rlim_cur,
            hard = limit.rlim_max,
            "could not raise the open-files limit"
        );
    }
    Some(limit.rlim_cur)
}

/// Transfers logged by id in one expiry line, at most; the rest are counted.
const EXPIRED_IDS_LOGGED: usize = 10;

/// `id, id, … (+N more)`: an operator can follow an expiry without a log
/// line per transfer.
fn expired_ids(views: &[ledger::TransferView]) -> String {
    let mut ids: Vec<String> = views
        .iter()
        .take(EXPIRED_IDS_LOGGED)
        .map(|view| view.transfer_id.to_string())
        .collect();
    if views.len() > EXPIRED_IDS_LOGGED {
        ids.push(format!("(+{} more)", views.len() - EXPIRED_IDS_LOGGED));
    }
    ids.join(", ")
}
