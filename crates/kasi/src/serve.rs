//! `kasi serve`: open the store, recover, run the pipeline, answer health.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use axum::routing::get;
use axum::{Json, Router};
use clap::Args;
use engine::{Engine, EngineConfig};
use ledger::{Command, FspName, Limits, Outcome};
use store::sqlite::{SqliteOptions, SqliteStore};
use store::Store as _;
use tracing::{info, warn};

#[derive(Args)]
pub struct ServeArgs {
    /// Directory holding the hub's store; created on first start. Only one
    /// kasi process may serve a directory at a time.
    #[arg(long, env = "KASI_DATA_DIR", default_value = "kasi-data")]
    data_dir: PathBuf,

    /// Address of the operator-facing admin API (Mojaloop central-ledger's port).
    #[arg(long, env = "KASI_ADMIN_LISTEN", default_value = "127.0.0.1:3001")]
    admin_listen: SocketAddr,

    /// Name of the hub participant: created with this name on first start,
    /// and the FSPIOP-Source of callbacks the hub originates.
    #[arg(long, env = "KASI_HUB_NAME", default_value = "Hub")]
    hub_name: String,
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let hub_name = FspName::new(&args.hub_name).with_context(|| {
        format!(
            "--hub-name {:?} must be 1-32 printable ASCII characters without spaces or '/'",
            args.hub_name
        )
    })?;
    let started = Instant::now();
    let mut store = SqliteStore::open(&args.data_dir, SqliteOptions::default())
        .with_context(|| format!("cannot open the store in {}", args.data_dir.display()))?;
    let (ledger, recovery) =
        engine::recover(&mut store, Limits::default()).context("recovery failed")?;
    info!(
        store = %store.describe(),
        participants = recovery.participants,
        accounts = recovery.accounts,
        transfers = recovery.transfers,
        load_ms = recovery.load_time.as_millis() as u64,
        rebuild_ms = recovery.rebuild_time.as_millis() as u64,
        "recovered the ledger"
    );
    let existing_hub = ledger.hub_name();
    if let Some(existing) = existing_hub {
        if existing != hub_name {
            bail!(
                "the hub in {} is named '{existing}', not '{hub_name}': pass --hub-name {existing}",
                args.data_dir.display()
            );
        }
    }
    let config = EngineConfig {
        on_expired: Some(Box::new(|expired| {
            info!(count = expired.len(), "transfers expired")
        })),
        ..EngineConfig::default()
    };
    let engine = Engine::start(ledger, Box::new(store), config);
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

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kasi-http")
        .build()
        .context("cannot start the async runtime")?;
    let served = runtime.block_on(serve_http(args.admin_listen, started));
    info!("stopping: committing queued work");
    let stopped = engine.shutdown().map(drop);
    served?;
    stopped.context("the ledger pipeline failed")?;
    info!("stopped cleanly");
    Ok(ExitCode::SUCCESS)
}

async fn serve_http(admin_listen: SocketAddr, started: Instant) -> anyhow::Result<()> {
    let start_time = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let health = move || async move {
        Json(serde_json::json!({
            "status": "OK",
            "uptime": started.elapsed().as_secs(),
            "startTime": start_time,
            "versionNumber": env!("CARGO_PKG_VERSION"),
        }))
    };
    let admin = Router::new().route("/health", get(health));
    let listener = tokio::net::TcpListener::bind(admin_listen)
        .await
        .with_context(|| format!("cannot listen on {admin_listen} (--admin-listen)"))?;
    info!(admin = %listener.local_addr()?, "serving");
    axum::serve(listener, admin)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                warn!(%error, "cannot listen for SIGTERM; stop with SIGINT");
                let _ = interrupt.await;
                return;
            }
        };
    tokio::select! {
        _ = interrupt => info!("SIGINT received"),
        _ = terminate.recv() => info!("SIGTERM received"),
    }
}
