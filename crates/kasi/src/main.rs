//! The `kasi` command: the hub (`serve`), its audit and its benchmarks.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

mod audit;
mod config;
mod ha;
mod log_line;
mod migrate;
mod serve;
mod sim;

/// glibc's allocator was ~9 % of the hub's CPU under transfer load
/// (malloc, free and their consolidation, from every HTTP message's header
/// maps and buffers); mimalloc's per-thread free lists make the same
/// allocations cheaper without changing a line that allocates.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// kasi: a fast FSPIOP (Mojaloop) payments interoperability hub in one binary.
///
/// DFSPs find each other's customers, agree terms and move money with
/// two-phase transfers through the hub; the operator onboards DFSPs and caps
/// their risk. Every command reads its settings from flags, or from the
/// environment variables named in each flag's help.
#[derive(Parser)]
#[command(name = "kasi", version, propagate_version = true, max_term_width = 100)]
struct Cli {
    /// Log level: error, warn, info, debug, trace or off; or a filter by
    /// module such as `info,engine=debug`. (KASI_LOG is also read.)
    #[arg(long, global = true, env = "KASI_LOG_LEVEL", default_value = "info")]
    log_level: String,

    /// Log lines as text (for people) or JSON objects, one per line (for a
    /// log pipeline): timestamp, level, target, message and fields.
    #[arg(long, global = true, env = "KASI_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    /// A TOML file of settings named like the flags
    /// (`data-dir = "/var/lib/kasi"`). Flags and KASI_* variables win over it.
    #[arg(long, global = true, env = "KASI_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the hub on its data directory (created on first start).
    ///
    /// Opens the store (embedded SQLite), rebuilds the ledger from it (and
    /// refuses a store that does not add up), creates the hub participant on
    /// first start, then serves the FSPIOP API to DFSPs (`--api-listen`:
    /// transfers, parties, participants, quotes) and the central-ledger
    /// admin API to the operator (`--admin-listen`: onboarding, funds,
    /// positions, oracles, `/metrics`, and the console at `/console/`). Stops cleanly on SIGINT or SIGTERM:
    /// requests in flight are answered, queued work is committed and queued
    /// callbacks are delivered before the store closes.
    Serve(Box<serve::ServeArgs>),
    /// Recompute every account from the recorded transfers and compare.
    ///
    /// Reads the store (safe while the hub runs) and prints every difference
    /// between an account's recorded balance and the sum of its transfers,
    /// and any currency whose accounts do not sum to zero. Exits with status
    /// 1 on any difference, 2 if the store cannot be read. `--file` audits
    /// a backup instead (read-only media are fine).
    Audit(AuditArgs),
    /// Copy a running hub's store to one file, consistent as of one
    /// instant, and audit the copy.
    ///
    /// Uses SQLite's online backup API: the hub keeps serving. The copy is
    /// a self-contained store file: audit it with `kasi audit --file`, and
    /// restore it by stopping the hub and putting it in place as
    /// `DATA_DIR/kasi.db` (docs/operations.md). Never overwrites a file.
    Backup(BackupArgs),
    /// Move a hub's whole state from its SQLite data directory into an empty
    /// PostgreSQL database, then check that both hold the same state.
    ///
    /// `kasi migrate-store --from sqlite:/var/lib/kasi --to postgres://kasi@db/kasi`
    ///
    /// Copies every row: participants, accounts, every transfer and its
    /// finish, endpoints, settlement models, the built-in oracle's parties,
    /// external oracles, quotes, settlement windows, their content and
    /// settlements with their accounts and entries, every audit event (not
    /// only the newest a hub keeps in memory), pinned certificates, and the
    /// callback dispatcher's state in callbacks.db (its watermark and dead
    /// letters). The history snapshot's tables are SQLite's own (a cache of
    /// sums) and are not copied.
    ///
    /// Stop the hub first: migrate-store takes the data directory's lock, so
    /// it refuses to run while a hub serves from it and no hub can start on
    /// it meanwhile, and it reads the source in one read transaction (one
    /// consistent snapshot). The source is never changed. The target must be
    /// an empty database (kasi creates its schema there): one that already
    /// holds a hub's rows is refused.
    ///
    /// Rows are written through the PostgreSQL store's own commits, --chunk
    /// transfers (or other rows) per transaction; transfers, finishes,
    /// parties, quotes and audit events are streamed, never held whole. The
    /// check at the end loads both stores whole (as a hub's recovery without
    /// retention does: allow memory for two copies of the ledger's state),
    /// compares them row by row, runs `kasi audit` on the target, and
    /// compares every audit event, the watermark and the dead letters.
    ///
    /// Prints the rows per table and the time taken. Exits with status 0
    /// when both stores hold the same state, 1 with the first difference
    /// found (do not serve from that target: drop it, create it again and
    /// migrate again), 2 if it could not run (no source, a hub running on
    /// it, a target that is not empty or cannot be reached). Then point the
    /// hub at the target: `kasi serve --store postgres://…`.
    MigrateStore(migrate::MigrateStoreArgs),
    /// Characterize a hub: drive FSPIOP flows through it, playing every DFSP.
    ///
    /// One process is both payer and payee of every simulated DFSP
    /// ("two sides of the same coin"): it onboards them through the admin
    /// API with callback endpoints pointing at itself, then runs `--flow`
    /// (by default `transfer`: `POST /transfers` until the payer's commit
    /// notification; also `lookup`, `quote`, `quote+transfer`,
    /// `discovery+quote+transfer`, the end-to-end of Mojaloop's performance
    /// whitepaper, `transaction-request`, request-to-pay, and `fx`, a
    /// payment across currencies through an FXP the harness also plays:
    /// FX quote, quote, conversion, transfer) while answering every
    /// forwarded request as the other side.
    ///
    /// Load: a closed loop of --concurrency virtual users (default), an open
    /// loop at --rate arrivals per second, k6-style --stages, or a named
    /// --profile (smoke, average-load, stress, spike, breakpoint). The hub is
    /// started here on a temporary data directory (--embedded, the default),
    /// or one already running (--api and --admin; nothing kasi-specific is
    /// needed on the wire), or the built-in null hub (--null-hub). Unless
    /// --null-hub-baseline 0, the null hub is measured first so the report
    /// states the hub's throughput as a ratio of the harness's ceiling.
    ///
    /// Prints a summary (throughput, latency per leg, errors by FSPIOP code,
    /// whether the DFSPs' positions net to zero, in each currency) and
    /// writes a report folder (report.json, report.md with the hub's
    /// per-stage table and sampled waterfalls, timeline.svg); `kasi bench
    /// compare` lays reports side by side. Exits with status 1 if any flow
    /// failed or the positions do not net to zero.
    Bench(Box<bench::BenchArgs>),
    /// Simulated DFSPs for people to watch: `kasi sim --dfsps payerfsp,payeefsp --onboard`.
    ///
    /// One process plays every DFSP of --dfsps against a hub (one callback
    /// server, `http://{--listen}/{dfsp}/...`), and prints each message it
    /// sees or sends. With --onboard it first creates them in the hub
    /// (participant, net debit cap, funds in, endpoints pointing here) and
    /// registers a few MSISDNs each; it prints them. As a payee each DFSP
    /// answers lookups of its parties, quotes (no fees) and prepares
    /// (committed with the fulfilment after --delay-ms, or refused with
    /// 5104 at --reject-percent). Runs until Ctrl-C.
    ///
    /// To make a payment happen, in another terminal:
    /// `kasi sim send --from payerfsp --to MSISDN:<a printed number> --amount 10 USD`
    /// asks the running sim (its control endpoint `POST /_sim/send` on
    /// --listen) to have payerfsp look the party up, ask its DFSP for a
    /// quote and send the transfer, and prints each step; the payer's
    /// callbacks come back to the sim, which is where the hub sends them.
    ///
    /// Across currencies: `kasi sim --dfsps payerfsp,payeefsp:TZS --fxp fxp
    /// --fx-rate USD:TZS=2500 --onboard` plays a payee paid in TZS and an
    /// FXP converting USD to TZS (its corridor declared to the hub); the
    /// same `kasi sim send` to one of payeefsp's numbers then finds the FXP
    /// (`GET /services/FXP/USD/TZS`), gets its terms (`POST /fxQuotes`),
    /// converts (`POST /fxTransfers`) and transfers the TZS.
    Sim(Box<sim::SimCli>),
    /// The null hub of `kasi bench` as a process of its own (it starts one).
    ///
    /// Forwards FSPIOP requests and callbacks between DFSPs with no
    /// validation, ledger or store, on ephemeral ports of 127.0.0.1; logs
    /// `serving api=… admin=…` and runs until SIGTERM or SIGINT.
    #[command(hide = true)]
    NullHub,
    /// Make a fresh admin API bearer token.
    ///
    /// Prints the token (give it to its holder; kasi keeps only its hash)
    /// and the line to add to the --admin-tokens file.
    AdminToken(AdminTokenArgs),
}

#[derive(Args)]
struct AdminTokenArgs {
    /// Who holds the token: the actor named in audit events.
    #[arg(long)]
    name: String,
    /// operator (every admin route), finance (reads, funds, net debit
    /// caps, settlement), viewer (reads), auditor (the audit trail and
    /// settlement reports), or dfsp:<name> (that DFSP's own data, read
    /// only). docs/security.md has the table of routes by role.
    #[arg(long, value_parser = parse_role)]
    role: String,
}

#[derive(Args)]
struct AuditArgs {
    /// Directory holding the hub's store.
    #[arg(long, env = "KASI_DATA_DIR", default_value = "kasi-data")]
    data_dir: PathBuf,

    /// Audit this store file (a `kasi backup`, or a data directory's
    /// kasi.db) instead of --data-dir's.
    #[arg(long, value_name = "FILE", conflicts_with = "store")]
    file: Option<PathBuf>,

    /// Audit this store instead of --data-dir's: `sqlite:DIR` or a
    /// PostgreSQL URL (read in one consistent snapshot while a hub may be
    /// writing; nothing is changed).
    #[arg(long, env = "KASI_STORE", value_name = "STORE")]
    store: Option<String>,
}

#[derive(clap::Args)]
struct BackupArgs {
    /// Directory holding the hub's store.
    #[arg(long, env = "KASI_DATA_DIR", default_value = "kasi-data")]
    data_dir: PathBuf,

    /// The new file to write (it must not exist).
    #[arg(long, value_name = "FILE")]
    to: PathBuf,
}

#[derive(clap::Args)]
struct DataDirArgs {
    /// Directory holding the hub's store.
    #[arg(long, env = "KASI_DATA_DIR", default_value = "kasi-data")]
    data_dir: PathBuf,
}

/// A role the tokens file accepts, as it spells it.
fn parse_role(text: &str) -> Result<String, String> {
    hub::access::Role::parse(text).map(|role| role.to_string())
}

/// Prints a new token and its tokens-file line; the token is shown once.
fn admin_token(args: &AdminTokenArgs) -> anyhow::Result<ExitCode> {
    if args.name.is_empty() || args.name.chars().any(|c| c.is_whitespace() || c == '#') {
        anyhow::bail!("--name must be one word without '#'");
    }
    let token = hub::admin_auth::new_token()?;
    println!("token: {token}");
    println!(
        "line for --admin-tokens: {} {} {}",
        args.name,
        args.role,
        hub::admin_auth::token_hash(&token)
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

const LOG_LEVELS: &[&str] = &["error", "warn", "info", "debug", "trace", "off"];

/// The filter `--log-level` names. A bare word must be a level: tracing
/// would take `warning` or `verbose` for a module name and log nothing.
fn log_filter(text: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    for directive in text.split(',').map(str::trim) {
        let level = directive
            .rsplit_once('=')
            .map_or(directive, |(_, level)| level);
        if !LOG_LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "{level:?} is not a log level: use one of {} (or a filter by module such as `info,engine=debug`)",
                LOG_LEVELS.join(", ")
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(text).map_err(|error| format!("{text:?}: {error}"))
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli: Cli = match config::parse(&args) {
        Ok(cli) => cli,
        Err(config::Error::Clap(error)) => error.exit(),
        Err(config::Error::File(error)) => {
            eprintln!("kasi: {error}");
            return ExitCode::from(2);
        }
    };
    let filter = match log_filter(&cli.log_level) {
        Ok(filter) => filter,
        Err(error) => {
            eprintln!("kasi: --log-level: {error}");
            return ExitCode::from(2);
        }
    };
    match cli.log_format {
        LogFormat::Text => {
            // Colour only for a person at a terminal; files and pipes get
            // plain text.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_ansi(ansi)
                .with_writer(log_line::OneLine::new(std::io::stderr, ansi))
                .init();
        }
        LogFormat::Json => {
            tracing_subscriber::fmt()
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .init();
        }
    }
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Audit(args) => match (&args.file, store_location(args.store.as_deref())) {
            (Some(file), _) => audit::run_file(file),
            (None, Err(error)) => Err(error),
            (None, Ok(Some(store::StoreLocation::Postgres(url)))) => audit::run_postgres(&url),
            (None, Ok(Some(store::StoreLocation::Sqlite(dir)))) => audit::run(&dir),
            (None, Ok(None)) => audit::run(&args.data_dir),
        },
        Command::Backup(args) => audit::backup(&args.data_dir, &args.to),
        Command::MigrateStore(args) => migrate::run(args),
        Command::NullHub => bench::null_hub::run_process(),
        Command::AdminToken(args) => admin_token(&args),
        Command::Sim(args) => sim::run(*args),
        Command::Bench(args) => bench::run(*args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("kasi: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// `--store`'s value (`store::StoreLocation::from_flag`, shared with
/// `kasi bench ledger`), as an error to print.
pub fn store_location(text: Option<&str>) -> anyhow::Result<Option<store::StoreLocation>> {
    store::StoreLocation::from_flag(text).map_err(anyhow::Error::msg)
}
