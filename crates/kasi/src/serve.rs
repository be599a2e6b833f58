//! `kasi serve`: open the store, recover, run the pipeline and both APIs.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use engine::{Engine, EngineConfig, PipelineThreads};
use hub::notify::{Dispatcher, DispatcherConfig};
use hub::{Hub, HubConfig};
use ledger::{Command, FspName, Limits, Outcome};
use store::sqlite::{SqliteOptions, SqliteStore};
use tracing::{error, info, warn};

mod plan;

pub use plan::ServeArgs;

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // Decided before the store is opened, so a refused configuration
    // touches nothing and binds nothing.
    let settings = Settings::from_args(&args)?;
    match settings.location.clone() {
        store::StoreLocation::Sqlite(dir) => {
            let runtime = build_runtime(&args)?;
            let opened = open_sqlite(&dir, settings.history)?;
            let limits = limits(&args);
            let mut store = opened.store;
            let (ledger, recovery) =
                engine::recover(store.as_mut(), limits).context("recovery failed")?;
            let term = Term {
                store,
                ledger,
                recovery,
                reader: opened.reader,
                delivery: opened.delivery,
                role: Arc::new(hub::role::Role::embedded()),
                listeners: None,
                fence: None,
            };
            match serve_term(&args, &settings, term, &runtime)? {
                Ended::Stopped => {
                    info!("stopped cleanly");
                    Ok(ExitCode::SUCCESS)
                }
                // Only a process on a shared store gives up serving.
                Ended::GaveUp(why) => bail!("stopped serving: {why}"),
            }
        }
        store::StoreLocation::Postgres(url) => serve_shared(&args, &settings, &url),
    }
}

/// What every term of this process shares: the configuration checked
/// before the store is opened, read once.
struct Settings {
    hub_name: FspName,
    admin_auth: Arc<hub::admin_auth::AdminAuth>,
    history: Option<store::sqlite_history::HistoryOptions>,
    location: store::StoreLocation,
    tls: Option<Tls>,
    callback_tls: Arc<rustls::ClientConfig>,
    signer: Option<hub::notify::CallbackSigner>,
    jws_verify: hub::jws_keys::VerifyPolicy,
    caps: hub::connections::Caps,
}

impl Settings {
    fn from_args(args: &ServeArgs) -> anyhow::Result<Settings> {
        let hub_name = FspName::new(&args.fspiop.hub_name).with_context(|| {
            format!(
                "--hub-name {:?} must be 1-32 printable ASCII characters without spaces or '/'",
                args.fspiop.hub_name
            )
        })?;
        let admin_auth = Arc::new(admin_access(args)?);
        let history = args.ledger.transfer_retention.0.map(|retention_ms| {
            store::sqlite_history::HistoryOptions {
                retention_ms,
                interval: args.ledger.history_snapshot_interval,
            }
        });
        let location = crate::store_location(args.store.store.as_deref())?
            .unwrap_or_else(|| store::StoreLocation::Sqlite(args.store.data_dir.clone()));
        let tls = match (&args.tls.tls_cert, &args.tls.tls_key) {
            (Some(cert), Some(key)) => {
                let files = hub::tls::CertFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                };
                let reloading = hub::tls::ReloadingCert::load(files).map_err(anyhow::Error::msg)?;
                let api =
                    hub::tls::server_config(reloading.clone(), args.tls.tls_client_ca.as_deref())
                        .map_err(anyhow::Error::msg)?;
                let admin = match &args.admin.admin_client_ca {
                    Some(ca) => {
                        hub::admin_auth::server_config_with_client_ca(reloading.clone(), ca)
                    }
                    None => hub::tls::server_config(reloading.clone(), None),
                }
                .map_err(anyhow::Error::msg)?;
                info!(
                    cert = %cert.display(),
                    mutual = args.tls.tls_client_ca.is_some(),
                    "TLS on both addresses"
                );
                Some(Tls {
                    api,
                    admin,
                    reloading,
                })
            }
            _ => None,
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
            args.listen.max_connections.map(|max| max as usize),
            args.listen
                .max_connections_per_client
                .map(|max| max as usize),
        );
        caps.log(open_files);
        let callback_identity = match (&args.callbacks.callback_cert, &args.callbacks.callback_key)
        {
            (Some(cert), Some(key)) => Some(hub::tls::CertFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        };
        let callback_tls = hub::tls::client_config(
            args.callbacks.callback_ca.as_deref(),
            callback_identity.as_ref(),
        )
        .map_err(anyhow::Error::msg)
        .context("outbound TLS (--callback-ca, --callback-cert, --callback-key)")?;
        info!(
            roots = %args
                .callbacks.callback_ca
                .as_ref()
                .map_or("system".to_string(), |path| path.display().to_string()),
            client_certificate = callback_identity.is_some(),
            "https callbacks and oracle calls"
        );
        let signer = match &args.jws.jws_signing_key {
            Some(path) => {
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
                })
            }
            None => None,
        };
        let jws_verify = hub::jws_keys::VerifyPolicy {
            resources: hub::jws_keys::VerifyPolicy::parse_resources(&args.jws.jws_verify)
                .map_err(|error| anyhow::anyhow!("--jws-verify: {error}"))?,
            put_parties: args.jws.jws_verify_put_parties,
            participants: (!args.jws.jws_verify_participants.is_empty())
                .then(|| args.jws.jws_verify_participants.clone()),
        };
        Ok(Settings {
            hub_name,
            admin_auth,
            history,
            location,
            tls,
            callback_tls,
            signer,
            jws_verify,
            caps,
        })
    }
}

fn build_runtime(args: &ServeArgs) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.listen.http_threads {
        runtime.worker_threads(usize::from(threads));
    }
    runtime
        .enable_all()
        .thread_name("kasi-http")
        .build()
        .context("cannot start the async runtime")
}

fn limits(args: &ServeArgs) -> Limits {
    Limits {
        transfer_retention_ms: args.ledger.transfer_retention.0,
        max_finished_in_memory: args.ledger.finished_transfers_in_memory as usize,
        ..Limits::default()
    }
}

/// One term of serving: a recovered ledger on an open store, and what
/// serving needs besides.
struct Term {
    store: Box<dyn store::Store>,
    ledger: ledger::Ledger,
    recovery: engine::Recovery,
    reader: Arc<dyn store::StoreReader>,
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
    args: &ServeArgs,
    settings: &Settings,
    term: Term,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<Ended> {
    let hub_name = settings.hub_name;
    let Term {
        store,
        ledger,
        recovery,
        reader,
        mut delivery,
        role,
        listeners,
        fence,
    } = term;
    let transfer_lookup = args.ledger.transfer_retention.0.map(|_| reader.clone());
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
                settings.location
            );
        }
    }

    // Expired transfers come from the committing thread once durable; a task
    // turns them into 3303 callbacks.
    let (expired_sender, mut expired) = tokio::sync::mpsc::unbounded_channel();
    let threads = args
        .ledger
        .pipeline_threads
        .and_then(PipelineThreads::from_count)
        .unwrap_or_else(|| {
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

    let grace = Duration::from_secs(args.callbacks.shutdown_grace_s);
    let served = runtime.block_on(async {
        let dispatcher = Dispatcher::new(DispatcherConfig {
            tls: Some(settings.callback_tls.clone()),
            signer: settings.signer.clone(),
            final_retry_for: Duration::from_secs(args.callbacks.callback_retry_for_s),
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
        let mut hub_config = HubConfig::new(hub_name);
        hub_config.callback_tls = Some(settings.callback_tls.clone());
        hub_config.body_idle_timeout = Duration::from_millis(args.listen.body_timeout_ms);
        hub_config.admin_base_url = format!(
            "{}://{}",
            if settings.tls.is_some() {
                "https"
            } else {
                "http"
            },
            args.listen.admin_listen
        );
        hub_config.quotes_persistent = args.fspiop.quotes_persistent;
        hub_config.payee_commit_confirmation = args.fspiop.payee_commit_confirmation;
        hub_config.answer_window = Duration::from_secs(args.fspiop.answer_window_s);
        hub_config.pending_answers_max = args.fspiop.pending_answers_max as usize;
        hub_config.trace_sample_every = args.fspiop.trace_sample_every;
        let jws_verify = settings.jws_verify.clone();
        if jws_verify.is_on() {
            info!(resources = %jws_verify.resources.join(","), "inbound FSPIOP-Signature checked");
        }
        hub_config.jws_verify = jws_verify;
        hub_config.jws_keys_dir = args.jws.jws_keys_dir.clone();
        hub_config.admin_auth = settings.admin_auth.clone();
        hub_config.transfer_lookup = transfer_lookup.clone();
        hub_config.role = role.clone();
        hub_config.callback_allow = args.callbacks.callback_allow.clone();
        hub_config.max_clock_skew = args.tls.max_clock_skew_s.map(Duration::from_secs);
        hub_config.identity = hub::tls::IdentityPolicy {
            client_certificates: args.tls.tls_client_ca.is_some(),
            proxy: match &args.tls.client_identity_header {
                Some(name) => Some(hub::tls::ProxyIdentity {
                    header: axum::http::HeaderName::from_bytes(name.as_bytes()).with_context(
                        || format!("--client-identity-header {name:?} is not a header name"),
                    )?,
                    trusted: args.tls.trusted_proxy.clone(),
                }),
                None => None,
            },
        };
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
        if !args.watch.settlement_close_at.is_empty() {
            let times: Vec<String> = args
                .watch
                .settlement_close_at
                .iter()
                .map(ToString::to_string)
                .collect();
            info!(times = %times.join(","), "settlement windows close on schedule (UTC)");
            tokio::spawn(hub::watch::close_on_schedule(
                hub.clone(),
                args.watch.settlement_close_at.clone(),
            ));
        }
        if args.watch.position_alarm_percent > 0 {
            tokio::spawn(hub::watch::watch_positions(
                hub.clone(),
                args.watch.position_alarm_percent,
                Duration::from_millis(args.watch.position_watch_interval_ms),
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
            header_read_timeout: Duration::from_millis(args.listen.header_timeout_ms),
        };
        let serving = serve_http(
            hub,
            args.listen.api_listen,
            args.listen.admin_listen,
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
    Ok(OpenedSqlite {
        store: Box::new(store),
        reader: Arc::new(reader),
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
fn serve_shared(args: &ServeArgs, settings: &Settings, url: &str) -> anyhow::Result<ExitCode> {
    let name = args
        .store
        .instance_name
        .clone()
        .unwrap_or_else(crate::ha::default_instance_name);
    let role = Arc::new(hub::role::Role::shared("postgres", &name));
    // Bound once for the process's life: between terms, connections wait
    // in the kernel's queue rather than being refused.
    let listeners = bind_std_listeners(args.listen.api_listen, args.listen.admin_listen)?;
    let retention_ms = args.ledger.transfer_retention.0;
    let mut kept: Option<store::pg::PgStore> = None;
    let mut terms: u64 = 0;
    loop {
        let runtime = build_runtime(args)?;
        let ended = serve_shared_term(
            args,
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
    args: &ServeArgs,
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
    let location = &settings.location;
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
    let lease = store::pg_lease::Lease::new(url, name, args.store.lease_ms);
    let standby_options =
        |tls: Option<Arc<rustls::ServerConfig>>, max, per_client| hub::server::ServeOptions {
            tls,
            max_connections: max,
            max_connections_per_client: per_client,
            on_refused: Some(crate::ha::standby_refusals()),
            header_read_timeout: Duration::from_millis(args.listen.header_timeout_ms),
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
    store.keep_history_snapshot(settings.history);
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
        Ok((reader, delivery))
    })();
    let (reader, delivery) = match opened {
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
    let (ledger, recovery) = match engine::recover(&mut store, limits(args)) {
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
        delivery: Box::new(delivery),
        role: role.clone(),
        listeners: Some(copies()?),
        fence: Some(fence),
    };
    let ended = match serve_term(args, settings, term, runtime) {
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

/// Who may use the admin API: the tokens file, or open on loopback (or
/// when the operator insists); anything else refuses to start.
fn admin_access(args: &ServeArgs) -> anyhow::Result<hub::admin_auth::AdminAuth> {
    let credentials = match &args.admin.admin_tokens {
        Some(path) => Some(hub::admin_auth::AdminAuth::load(path).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let configured = credentials.is_some();
    let auth = hub::admin_auth::decide(
        args.listen.admin_listen,
        credentials,
        args.admin.admin_insecure,
    )
    .map_err(anyhow::Error::msg)?;
    if configured {
        info!(tokens = %args.admin.admin_tokens.as_deref().unwrap_or_else(|| std::path::Path::new("")).display(), "admin API requires credentials");
    } else if !args.listen.admin_listen.ip().is_loopback() {
        tracing::warn!(admin = %args.listen.admin_listen, "admin API served WITHOUT authentication (--admin-insecure) on a non-loopback address");
    }
    Ok(auth)
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
    let console = console::router(
        admin_api.clone(),
        hub.config.admin_auth.clone(),
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
