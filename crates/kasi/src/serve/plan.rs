//! `kasi serve`'s flags and its plan: the flags in groups, each beside the
//! configuration it produces, and [`ServeArgs::plan`], which checks them
//! all and builds that configuration without I/O (ripgrep's low-level
//! arguments and high-level arguments, in one step here).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use engine::PipelineThreads;
use hub::HubConfig;
use ledger::{FspName, Limits};

/// Every flag of `kasi serve`. The groups are the headings of
/// `kasi serve --help`.
#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    listen: ListenArgs,
    #[command(flatten)]
    fspiop: FspiopArgs,
    #[command(flatten)]
    ledger: LedgerArgs,
    #[command(flatten)]
    callbacks: CallbackArgs,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    jws: JwsArgs,
    #[command(flatten)]
    admin: AdminArgs,
    #[command(flatten)]
    watch: WatchArgs,
    #[command(flatten)]
    alerts: AlertArgs,
    #[command(flatten)]
    feed: FeedArgs,
    #[command(flatten)]
    wire_log: WireLogArgs,
}

/// What `kasi serve` will run, decided from its flags alone: each crate's
/// configuration, and the files to read, the addresses to bind and the
/// store to open, named but not yet touched.
///
/// [`ServeArgs::plan`] makes it without any I/O — no file read, no
/// socket, no environment, no clock — so that every rule between flags is
/// checked, and unit-tested, before anything is opened; serve.rs then
/// reads what the plan names and starts what it describes.
#[derive(Debug)]
pub(crate) struct ServePlan {
    pub(crate) store: StorePlan,
    pub(crate) listen: ListenPlan,
    /// The HTTP side's configuration, but what only the I/O phase can
    /// give it: `callback_tls`, `role`, and
    /// `admin_auth` when a tokens file is to be read ([`AdminPlan`]).
    pub(crate) hub: HubConfig,
    pub(crate) ledger: LedgerPlan,
    pub(crate) callbacks: CallbackPlan,
    /// The threads of JWS crypto; `None` when the hub neither signs nor
    /// verifies.
    pub(crate) jws_pool: Option<JwsPoolPlan>,
    pub(crate) tls: Option<TlsPlan>,
    pub(crate) admin: AdminPlan,
    pub(crate) watch: WatchPlan,
    /// The alerts' files to read (their settings are in `hub.alerts`).
    pub(crate) alerts: AlertsFiles,
    pub(crate) feed: FeedPlan,
    /// Where and how much the wire log keeps; `None`: off.
    pub(crate) wire_log: Option<WireLogPlan>,
}

/// A flag's value, or a combination of flags, that cannot be served; the
/// message says what to write instead.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PlanError {
    /// The flag to mend (`--tls-key`).
    pub(crate) flag: &'static str,
    pub(crate) message: String,
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.flag, self.message)
    }
}

impl std::error::Error for PlanError {}

fn refuse<T>(flag: &'static str, message: impl Into<String>) -> Result<T, PlanError> {
    Err(PlanError {
        flag,
        message: message.into(),
    })
}

/// `needs` must be given whenever `flag` is. clap checks this between
/// flags and variables, but not for values from the config file (defaults
/// to clap): here it holds whatever the source.
fn require<T, U>(
    given: &Option<T>,
    flag: &'static str,
    needed: &Option<U>,
    needs: &'static str,
    why: &str,
) -> Result<(), PlanError> {
    match (given, needed) {
        (Some(_), None) => refuse(flag, format!("needs {needs} too ({why})")),
        _ => Ok(()),
    }
}

impl ServeArgs {
    /// Checks every flag and builds what serving needs, without I/O.
    pub(crate) fn plan(&self) -> Result<ServePlan, PlanError> {
        let tls = self.tls.plan(&self.admin)?;
        let hub_name = self.fspiop.hub_name()?;
        let mut hub = HubConfig::new(hub_name);
        self.fspiop.configure(&mut hub);
        self.callbacks.configure(&mut hub);
        hub.identity = self.tls.identity()?;
        hub.max_clock_skew = self.tls.max_clock_skew_s.map(Duration::from_secs);
        hub.jws_verify = self.jws.verify_policy()?;
        hub.jws_keys_dir = self.jws.jws_keys_dir.clone();
        hub.body_idle_timeout = Duration::from_millis(self.listen.body_timeout_ms);
        hub.admin_base_url = format!(
            "{}://{}",
            if tls.is_some() { "https" } else { "http" },
            self.listen.admin_listen
        );
        let admin = self.admin.plan(self.listen.admin_listen)?;
        // On an open admin API every caller is the same one: nobody else
        // could ever approve, so four-eyes is off unless asked for, and
        // asking for it there is refused.
        let open = matches!(admin, AdminPlan::Open(_));
        let actions = match (self.admin.four_eyes.as_deref(), open) {
            (None, true) => "none",
            (None, false) => hub::approvals::DEFAULT_ACTIONS,
            (Some(list), true) if list.trim() != "none" => {
                return refuse(
                    "--four-eyes",
                    "needs --admin-tokens or --oidc-issuer: on an open admin API every caller \
                     is the same one, so no second person could approve",
                )
            }
            (Some(list), _) => list,
        };
        hub.four_eyes = hub::approvals::FourEyes::parse(actions, self.admin.four_eyes_expiry)
            .or_else(|why| refuse("--four-eyes", why))?;
        if let AdminPlan::Open(open) = &admin {
            hub.admin_auth = open.clone();
        }
        let jws_pool = self.jws.pool(&hub.jws_verify);
        let alerts = self.alerts.plan(&mut hub)?;
        Ok(ServePlan {
            store: self.store.plan(&self.ledger)?,
            listen: self.listen.plan(),
            hub,
            ledger: self.ledger.plan(),
            callbacks: self.callbacks.plan(&self.jws, hub_name)?,
            jws_pool,
            tls,
            admin,
            watch: self.watch.plan(),
            alerts,
            feed: self.feed.plan()?,
            wire_log: self.wire_log.plan(&self.store.data_dir),
        })
    }
}

/// The store and, on PostgreSQL, the lease that makes one process of several the active.
#[derive(Args)]
#[command(next_help_heading = "Store")]
struct StoreArgs {
    /// Directory holding the hub's store; created on first start. Only one
    /// kasi process may serve a directory at a time.
    #[arg(long, env = "KASI_DATA_DIR", default_value = "kasi-data")]
    data_dir: PathBuf,

    /// The store, if not the data directory's: `sqlite:DIR`, or a
    /// PostgreSQL URL (`postgres://USER[:PASSWORD]@HOST[:PORT][,HOST2...]/DB`,
    /// with `?target_session_attrs=read-write` to follow a promoted
    /// primary). Any number of kasi processes may serve one PostgreSQL
    /// store: one is active, the others are standbys that take over when
    /// its lease expires.
    #[arg(long, env = "KASI_STORE", value_name = "STORE")]
    store: Option<String>,

    /// With a PostgreSQL store: how long the active's lease lasts without
    /// renewal (it renews every third of it). A standby takes over this
    /// long after the active stops renewing, at the latest.
    #[arg(long, env = "KASI_LEASE_MS", default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(300..=600_000))]
    lease_ms: u64,

    /// With a PostgreSQL store: this process's name in the lease (shown to
    /// operators as the active hub). Default: the host's name and the
    /// process id. A process restarted under the same name takes its own
    /// lease back at once.
    #[arg(long, env = "KASI_INSTANCE_NAME")]
    instance_name: Option<String>,
}

/// Where the hub's state lives, and how a process of several holds it.
#[derive(Debug)]
pub(crate) struct StorePlan {
    pub(crate) location: store::StoreLocation,
    /// With PostgreSQL: how long the lease lasts without renewal.
    pub(crate) lease_ms: u64,
    /// With PostgreSQL: this process's name in the lease; `None`: the
    /// host's name and the process id (read when serving starts).
    pub(crate) instance_name: Option<String>,
    /// The history snapshot's settings; `None` when transfers stay in
    /// memory for ever (nothing to sum).
    pub(crate) history: Option<store::sqlite_history::HistoryOptions>,
}

impl StoreArgs {
    fn plan(&self, ledger: &LedgerArgs) -> Result<StorePlan, PlanError> {
        let location = match &self.store {
            // The error prints the URL with its password redacted.
            Some(text) => text
                .parse::<store::StoreLocation>()
                .or_else(|error| refuse("--store", error))?,
            None => store::StoreLocation::Sqlite(self.data_dir.clone()),
        };
        Ok(StorePlan {
            location,
            lease_ms: self.lease_ms,
            instance_name: self.instance_name.clone(),
            history: ledger.transfer_retention.0.map(|retention_ms| {
                store::sqlite_history::HistoryOptions {
                    retention_ms,
                    interval: ledger.history_snapshot_interval,
                }
            }),
        })
    }
}

/// The two addresses and what they accept.
#[derive(Args)]
#[command(next_help_heading = "Listening")]
struct ListenArgs {
    /// Address of the DFSP-facing FSPIOP API (Mojaloop ml-api-adapter's
    /// port): IP:PORT or HOST:PORT (a host name is resolved once, at start;
    /// port 0 picks a free one).
    #[arg(long, env = "KASI_API_LISTEN", default_value = "127.0.0.1:3000", value_parser = parse_listen)]
    api_listen: SocketAddr,

    /// Address of the operator-facing admin API (Mojaloop central-ledger's
    /// port), written like --api-listen. The operator console is served
    /// there too, at /console/.
    #[arg(long, env = "KASI_ADMIN_LISTEN", default_value = "127.0.0.1:3001", value_parser = parse_listen)]
    admin_listen: SocketAddr,

    /// Threads serving HTTP (both listeners and the callbacks). Default:
    /// one per CPU. The ledger pipeline has one or two threads besides
    /// (--pipeline-threads).
    #[arg(long, env = "KASI_HTTP_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    http_threads: Option<u16>,

    /// Open connections at most on each address; one more is answered 503
    /// (2003) and closed. Default: sized to the open-files limit (raised to
    /// its hard limit at start): a quarter of it (128 to 1,024) kept for
    /// the hub's own files and callback connections, the rest 3:1 between
    /// the FSPIOP and admin addresses, at most 10,000 each (at a limit of
    /// 1,024: 576 and 192). The start-up log says what was chosen.
    #[arg(long, env = "KASI_MAX_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,

    /// Open connections at most from one client address (an IPv6 client by
    /// its /64) on each address, so that one client cannot take every
    /// slot: one more is refused at once (503, 2003, closed), counted
    /// (`kasi_connections_refused_per_client`, refusal class
    /// `client_connections`) and warned about. Default: half of the
    /// address's cap. Behind a gateway every DFSP is the gateway's
    /// address: raise it to the cap.
    #[arg(long, env = "KASI_MAX_CONNECTIONS_PER_CLIENT", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections_per_client: Option<u32>,

    /// Milliseconds a client may take to send a request's head; a
    /// keep-alive connection idle for as long is closed too.
    #[arg(long, env = "KASI_HEADER_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_ms: u64,

    /// Milliseconds a request body may pause between bytes before the
    /// request is answered 400 (3101) and its connection closed: a body
    /// shorter than its Content-Length is found out this fast.
    #[arg(long, env = "KASI_BODY_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    body_timeout_ms: u64,
}

/// The two addresses and their limits.
#[derive(Debug)]
pub(crate) struct ListenPlan {
    pub(crate) api: SocketAddr,
    pub(crate) admin: SocketAddr,
    /// Threads serving HTTP; `None`: one per CPU (tokio's default).
    pub(crate) http_threads: Option<usize>,
    /// As given; the caps are sized against the open-files limit, read
    /// when serving starts (`hub::connections::Caps::size`).
    pub(crate) max_connections: Option<usize>,
    pub(crate) max_connections_per_client: Option<usize>,
    pub(crate) header_read_timeout: Duration,
}

impl ListenArgs {
    fn plan(&self) -> ListenPlan {
        ListenPlan {
            api: self.api_listen,
            admin: self.admin_listen,
            http_threads: self.http_threads.map(usize::from),
            max_connections: self.max_connections.map(|max| max as usize),
            max_connections_per_client: self.max_connections_per_client.map(|max| max as usize),
            header_read_timeout: Duration::from_millis(self.header_timeout_ms),
        }
    }
}

/// How the hub takes part in FSPIOP exchanges.
#[derive(Args)]
#[command(next_help_heading = "FSPIOP")]
struct FspiopArgs {
    /// Name of the hub participant: created with this name on first start,
    /// and the FSPIOP-Source of callbacks the hub originates.
    #[arg(long, env = "KASI_HUB_NAME", default_value = "Hub")]
    hub_name: String,

    /// Record quotes durably and apply the FSPIOP duplicate rules to them
    /// (the quoting service's persistent mode). By default quotes are only
    /// routed, as Mojaloop's SIMPLE_ROUTING_MODE does.
    #[arg(long, env = "KASI_QUOTES_PERSISTENT")]
    quotes_persistent: bool,

    /// Whether the payee of a committed transfer gets the hub's PUT
    /// confirmation (Mojaloop's SEND_TRANSFER_CONFIRMATION_TO_PAYEE), sent
    /// after the payer's callback; and the hub's error when its fulfilment
    /// aborted the transfer. A payee that asked with RESERVED
    /// gets its PATCH either way.
    #[arg(long, env = "KASI_PAYEE_COMMIT_CONFIRMATION", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    payee_commit_confirmation: bool,

    /// Seconds a routed request (a party lookup, a quote, a transaction
    /// request, an authorization, a bulk quote) waits for its answer. Only
    /// the DFSP that was asked may answer, only to the DFSP that asked,
    /// and only within this time; a later or anyone else's answer is
    /// refused (400, 3100) and not forwarded.
    #[arg(long, env = "KASI_ANSWER_WINDOW_S", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    answer_window_s: u64,

    /// Routed requests awaiting an answer at most (about 150 bytes each);
    /// one more is refused with 503 (2003) until answers or expiry make
    /// room.
    #[arg(long, env = "KASI_PENDING_ANSWERS_MAX", default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(16..=100_000_000))]
    pending_answers_max: u64,

    /// Trace one transfer in this many stage by stage, its prepare and its
    /// fulfil (chosen by transfer id), for `GET /stats/traces` on the admin
    /// address; 0 traces none. Per-stage totals (`/stats/stages`) are kept
    /// for every transfer either way.
    #[arg(long, env = "KASI_TRACE_SAMPLE_EVERY", default_value_t = 1000)]
    trace_sample_every: u64,
}

impl FspiopArgs {
    fn hub_name(&self) -> Result<FspName, PlanError> {
        FspName::new(&self.hub_name).map_or_else(
            || {
                refuse(
                    "--hub-name",
                    format!(
                        "{:?} must be 1-32 printable ASCII characters without spaces or '/'",
                        self.hub_name
                    ),
                )
            },
            Ok,
        )
    }

    fn configure(&self, hub: &mut HubConfig) {
        hub.quotes_persistent = self.quotes_persistent;
        hub.payee_commit_confirmation = self.payee_commit_confirmation;
        hub.answer_window = Duration::from_secs(self.answer_window_s);
        hub.pending_answers_max = self.pending_answers_max as usize;
        hub.trace_sample_every = self.trace_sample_every;
    }
}

/// The ledger pipeline, and how long finished transfers stay in memory.
#[derive(Args)]
#[command(next_help_heading = "Ledger and retention")]
struct LedgerArgs {
    /// Threads carrying the ledger pipeline: 2 applies the next batch on
    /// the ledger thread while the store thread commits the last; 1 applies
    /// and commits on one thread, sparing the hand-off between them (a
    /// wake and a context switch per batch) at the price of the overlap.
    /// Default: 1 on machines of up to four cores, 2 above. Either way an
    /// answer waits for its batch's commit.
    #[arg(long, env = "KASI_PIPELINE_THREADS", value_parser = clap::value_parser!(u8).range(1..=2))]
    pipeline_threads: Option<u8>,

    /// How long a finished transfer stays in the ledger's memory (`90s`,
    /// `30m`, `24h`, `7d`, or `forever`). Older ones are answered from the
    /// store: GETs and duplicate resends alike.
    #[arg(long, env = "KASI_TRANSFER_RETENTION", default_value = "24h",
          value_parser = parse_retention, value_name = "DURATION")]
    transfer_retention: Retention,

    /// At most this many finished transfers stay in memory (~140 bytes
    /// each in the ledger): beyond it the oldest leave before
    /// --transfer-retention, and are answered from the store like older
    /// ones.
    #[arg(long, env = "KASI_FINISHED_TRANSFERS_IN_MEMORY", default_value_t = 2_000_000,
          value_parser = clap::value_parser!(u64).range(1_000..), value_name = "COUNT")]
    finished_transfers_in_memory: u64,

    /// How often the history snapshot advances (`30s`, `5m`, ...): it sums
    /// the transfers that finished before the retention horizon, so that a
    /// restart reads only what came since. Unused with
    /// `--transfer-retention forever`.
    #[arg(long, env = "KASI_HISTORY_SNAPSHOT_INTERVAL", default_value = "30s",
          value_parser = parse_interval, value_name = "DURATION")]
    history_snapshot_interval: Duration,
}

/// The ledger's bounds and its pipeline's shape.
#[derive(Debug)]
pub(crate) struct LedgerPlan {
    pub(crate) limits: Limits,
    /// `None`: by the machine's cores (`PipelineThreads::for_cores`),
    /// counted when serving starts.
    pub(crate) pipeline_threads: Option<PipelineThreads>,
}

impl LedgerArgs {
    fn plan(&self) -> LedgerPlan {
        LedgerPlan {
            limits: Limits {
                transfer_retention_ms: self.transfer_retention.0,
                max_finished_in_memory: self.finished_transfers_in_memory as usize,
                ..Limits::default()
            },
            // clap keeps the count to 1 or 2.
            pipeline_threads: self.pipeline_threads.and_then(PipelineThreads::from_count),
        }
    }
}

/// The hub's outbound requests: where they may go, how long they are retried, their TLS.
#[derive(Args)]
#[command(next_help_heading = "Callbacks and oracles")]
struct CallbackArgs {
    /// Hosts that DFSP callback URLs and oracle endpoints may name, checked
    /// when they are set (repeat the flag or separate with commas): a host
    /// name (dfsp1.example.com), every subdomain (*.example.com), or an
    /// address range (10.0.0.0/8; matches URLs written with an address,
    /// names are not resolved). By default any host; either way a URL must
    /// be http(s) with a host and without user:password@.
    #[arg(
        long,
        env = "KASI_CALLBACK_ALLOW",
        value_delimiter = ',',
        value_name = "HOST|*.DOMAIN|CIDR"
    )]
    callback_allow: Vec<hub::callback_url::Allowed>,

    /// Seconds a callback of a finished transfer (commit, abort, rejection,
    /// expiry) is retried on transport errors and 5xx answers before it is
    /// kept as a dead letter (`GET /callbacks/dead-letters` on the admin
    /// address). A prepare forwarded to the payee is retried until the
    /// transfer expires.
    #[arg(long, env = "KASI_CALLBACK_RETRY_FOR_S", default_value_t = 3_600, value_parser = clap::value_parser!(u64).range(1..))]
    callback_retry_for_s: u64,

    /// Callback requests in flight at once to one DFSP, each on a
    /// connection of its own (kept open): more queue behind them. A DFSP
    /// that receives a share of every payment (an FXP serving a corridor,
    /// a large bank) may need more; a small DFSP's server, fewer.
    #[arg(long, env = "KASI_CALLBACK_CONCURRENCY", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    callback_concurrency: u16,

    /// Seconds to keep delivering queued callbacks after a stop signal.
    #[arg(long, env = "KASI_SHUTDOWN_GRACE_S", default_value_t = 5)]
    shutdown_grace_s: u64,

    /// Trust anchors (PEM bundle, e.g. the scheme CA) for the servers of
    /// `https://` callback endpoints and oracles. Without it, the system's
    /// roots.
    #[arg(long, env = "KASI_CALLBACK_CA", value_name = "FILE")]
    callback_ca: Option<PathBuf>,

    /// The certificate chain (PEM) the hub presents to DFSPs and oracles
    /// that require mutual TLS on their `https://` endpoints.
    #[arg(
        long,
        env = "KASI_CALLBACK_CERT",
        value_name = "FILE",
        requires = "callback_key"
    )]
    callback_cert: Option<PathBuf>,

    /// The private key of --callback-cert (PEM).
    #[arg(
        long,
        env = "KASI_CALLBACK_KEY",
        value_name = "FILE",
        requires = "callback_cert"
    )]
    callback_key: Option<PathBuf>,
}

/// The hub's outbound requests: their TLS, their signature, how long the
/// callbacks of finished transfers are retried.
#[derive(Debug)]
pub(crate) struct CallbackPlan {
    /// Trust anchors for `https://` endpoints; `None`: the system's.
    pub(crate) ca: Option<PathBuf>,
    /// The certificate the hub presents to endpoints asking for one.
    pub(crate) identity: Option<hub::tls::CertFiles>,
    /// The key signing hub-originated callbacks, and the name they are
    /// signed as (the hub's).
    pub(crate) signing_key: Option<(PathBuf, FspName)>,
    pub(crate) retry_for: Duration,
    /// Requests in flight at once to one destination.
    pub(crate) concurrency: usize,
    /// How long queued callbacks are still delivered after a stop signal.
    pub(crate) shutdown_grace: Duration,
}

impl CallbackArgs {
    fn configure(&self, hub: &mut HubConfig) {
        hub.callback_allow = self.callback_allow.clone();
    }

    fn plan(&self, jws: &JwsArgs, hub_name: FspName) -> Result<CallbackPlan, PlanError> {
        require(
            &self.callback_cert,
            "--callback-cert",
            &self.callback_key,
            "--callback-key FILE",
            "the certificate's private key",
        )?;
        require(
            &self.callback_key,
            "--callback-key",
            &self.callback_cert,
            "--callback-cert FILE",
            "the certificate the key is for",
        )?;
        Ok(CallbackPlan {
            ca: self.callback_ca.clone(),
            identity: match (&self.callback_cert, &self.callback_key) {
                (Some(cert), Some(key)) => Some(hub::tls::CertFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                _ => None,
            },
            signing_key: jws.jws_signing_key.clone().map(|path| (path, hub_name)),
            retry_for: Duration::from_secs(self.callback_retry_for_s),
            concurrency: usize::from(self.callback_concurrency),
            shutdown_grace: Duration::from_secs(self.shutdown_grace_s),
        })
    }
}

/// TLS of both addresses, and how the FSPIOP address knows who calls.
#[derive(Args)]
#[command(next_help_heading = "TLS and caller identity")]
struct TlsArgs {
    /// Serve both addresses over TLS (1.2 and 1.3) with this certificate
    /// chain (PEM); re-read with its key on SIGHUP, without dropping
    /// connections.
    #[arg(long, env = "KASI_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "KASI_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,

    /// Mutual TLS on the FSPIOP address: clients must present a certificate
    /// this CA (the scheme's) signed, or the handshake fails; its subject CN
    /// or a DNS name is the FSP id the client may act as, and a request
    /// whose FSPIOP-Source is any other is refused (400, 3100).
    #[arg(
        long,
        env = "KASI_TLS_CLIENT_CA",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_client_ca: Option<PathBuf>,

    /// Behind a gateway that terminates mutual TLS: the addresses (CIDR,
    /// comma-separated or repeated) whose --client-identity-header is
    /// believed. The header from any other address is refused.
    #[arg(
        long,
        env = "KASI_TRUSTED_PROXY",
        value_delimiter = ',',
        value_name = "CIDR",
        requires = "client_identity_header"
    )]
    trusted_proxy: Vec<hub::tls::Cidr>,

    /// The header in which a trusted gateway names the client's FSP id
    /// (e.g. X-Client-Id); FSPIOP-Source must then be that id. A request
    /// carrying the header twice is refused (400, 3101).
    #[arg(
        long,
        env = "KASI_CLIENT_IDENTITY_HEADER",
        value_name = "NAME",
        requires = "trusted_proxy"
    )]
    client_identity_header: Option<String>,

    /// Refuse an FSPIOP request whose Date header is more than this many
    /// seconds from the hub's clock, ahead or behind (400, 3100): a
    /// captured request cannot be replayed later. Off by default, as in
    /// Mojaloop; DFSPs' clocks must then be kept in time (NTP).
    #[arg(long, env = "KASI_MAX_CLOCK_SKEW_S", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    max_clock_skew_s: Option<u64>,
}

/// TLS on both addresses: the files to load.
#[derive(Debug)]
pub(crate) struct TlsPlan {
    pub(crate) cert: hub::tls::CertFiles,
    /// The CA whose clients the FSPIOP address requires (mutual TLS).
    pub(crate) client_ca: Option<PathBuf>,
    /// The CA whose clients the admin address asks for (optional there).
    pub(crate) admin_client_ca: Option<PathBuf>,
}

impl TlsArgs {
    fn plan(&self, admin: &AdminArgs) -> Result<Option<TlsPlan>, PlanError> {
        let both = "--tls-cert FILE and --tls-key FILE serve both addresses over TLS";
        require(
            &self.tls_cert,
            "--tls-cert",
            &self.tls_key,
            "--tls-key FILE",
            both,
        )?;
        require(
            &self.tls_key,
            "--tls-key",
            &self.tls_cert,
            "--tls-cert FILE",
            both,
        )?;
        require(
            &self.tls_client_ca,
            "--tls-client-ca",
            &self.tls_cert,
            "--tls-cert FILE and --tls-key FILE",
            "mutual TLS is TLS first",
        )?;
        require(
            &admin.admin_client_ca,
            "--admin-client-ca",
            &self.tls_cert,
            "--tls-cert FILE and --tls-key FILE",
            "client certificates come over TLS",
        )?;
        require(
            &admin.admin_client_ca,
            "--admin-client-ca",
            &admin.admin_tokens,
            "--admin-tokens FILE",
            "its `cert:` lines say who each certificate is",
        )?;
        Ok(match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsPlan {
                cert: hub::tls::CertFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                },
                client_ca: self.tls_client_ca.clone(),
                admin_client_ca: admin.admin_client_ca.clone(),
            }),
            _ => None,
        })
    }

    /// How the FSPIOP address knows who calls.
    fn identity(&self) -> Result<hub::tls::IdentityPolicy, PlanError> {
        let proxy = match &self.client_identity_header {
            Some(name) => {
                if self.trusted_proxy.is_empty() {
                    return refuse(
                        "--client-identity-header",
                        "needs --trusted-proxy CIDR too (the gateways whose header is believed)",
                    );
                }
                let header = axum::http::HeaderName::from_bytes(name.as_bytes()).or_else(|_| {
                    refuse(
                        "--client-identity-header",
                        format!("{name:?} is not a header name (letters, digits and '-', such as X-Client-Id)"),
                    )
                })?;
                Some(hub::tls::ProxyIdentity {
                    header,
                    trusted: self.trusted_proxy.clone(),
                })
            }
            None if !self.trusted_proxy.is_empty() => {
                return refuse(
                    "--trusted-proxy",
                    "needs --client-identity-header NAME too (the header the gateway names the caller in)",
                )
            }
            None => None,
        };
        Ok(hub::tls::IdentityPolicy {
            client_certificates: self.tls_client_ca.is_some(),
            proxy,
        })
    }
}

/// FSPIOP-Signature: signing what the hub originates, checking what DFSPs send.
#[derive(Args)]
#[command(next_help_heading = "Signatures (JWS)")]
struct JwsArgs {
    /// Sign every callback the hub originates (FSPIOP-Source = the hub:
    /// its errors, the commit confirmation to the payee, PATCH, GET
    /// answers) with this PEM private key (PKCS#8, PKCS#1 or SEC1): RS256
    /// for an RSA key (at least 2048 bits), ES256 for a P-256 key. DFSPs
    /// verify with the public half, installed under the hub's name.
    /// Forwarded DFSP messages keep their own signature. Without it nothing
    /// is signed.
    #[arg(long, env = "KASI_JWS_SIGNING_KEY", value_name = "FILE")]
    jws_signing_key: Option<PathBuf>,

    /// Require a valid FSPIOP-Signature on inbound non-GET requests of
    /// these resources (comma-separated: transfers, quotes, parties,
    /// participants, transactionRequests, authorizations, bulkQuotes,
    /// bulkTransfers, fxQuotes, fxTransfers; or `all`). A request that
    /// fails is answered 400 with error 3105 and changes nothing. Off by
    /// default, as in Mojaloop. Keys come from --jws-keys-dir.
    #[arg(
        long,
        env = "KASI_JWS_VERIFY",
        value_delimiter = ',',
        value_name = "RESOURCES",
        requires = "jws_keys_dir"
    )]
    jws_verify: Vec<String>,

    /// Also check PUT /parties (Mojaloop's JWS_VALIDATE_PUT_PARTIES); by
    /// default party answers are not checked even when `parties` is listed.
    #[arg(long, env = "KASI_JWS_VERIFY_PUT_PARTIES")]
    jws_verify_put_parties: bool,

    /// Check signatures only on requests from these FSPs (comma-separated),
    /// to turn verification on one DFSP at a time; by default every
    /// FSPIOP-Source is checked (and one without a key is refused).
    #[arg(
        long,
        env = "KASI_JWS_VERIFY_PARTICIPANTS",
        value_delimiter = ',',
        value_name = "FSP"
    )]
    jws_verify_participants: Vec<String>,

    /// Directory of the DFSPs' JWS public keys, one `<fspId>.pem` each (a
    /// public key or a certificate); created if missing, re-read within a
    /// second of any change, and written by the admin API's
    /// `PUT`/`DELETE /participants/{name}/jwsKey`.
    #[arg(long, env = "KASI_JWS_KEYS_DIR", value_name = "DIR")]
    jws_keys_dir: Option<PathBuf>,

    /// Threads that compute and check signatures, so that no HTTP thread
    /// is held up by the crypto (an RSA-2048 signature is ~0.25 ms of CPU),
    /// behind a queue of 1,024 jobs (beyond, callers wait for room).
    /// Default: one per CPU. Started only with --jws-signing-key or
    /// --jws-verify; `kasi_jws_*` on /metrics shows how busy they are.
    #[arg(long, env = "KASI_JWS_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    jws_threads: Option<u16>,
}

/// The threads of JWS crypto (`hub::jws_pool`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct JwsPoolPlan {
    /// `None`: one per CPU, counted when serving starts.
    pub(crate) threads: Option<usize>,
}

impl JwsArgs {
    /// A pool only for a hub that signs or verifies: otherwise nothing
    /// would ever run on its threads.
    fn pool(&self, verify: &hub::jws_keys::VerifyPolicy) -> Option<JwsPoolPlan> {
        let used = self.jws_signing_key.is_some() || verify.is_on();
        used.then(|| JwsPoolPlan {
            threads: self.jws_threads.map(usize::from),
        })
    }

    fn verify_policy(&self) -> Result<hub::jws_keys::VerifyPolicy, PlanError> {
        let resources = hub::jws_keys::VerifyPolicy::parse_resources(&self.jws_verify)
            .or_else(|error| refuse("--jws-verify", error))?;
        if !resources.is_empty() && self.jws_keys_dir.is_none() {
            return refuse(
                "--jws-verify",
                "needs --jws-keys-dir DIR too (the DFSPs' public keys to verify with)",
            );
        }
        Ok(hub::jws_keys::VerifyPolicy {
            resources,
            put_parties: self.jws_verify_put_parties,
            participants: (!self.jws_verify_participants.is_empty())
                .then(|| self.jws_verify_participants.clone()),
        })
    }
}

/// Who may use the admin address.
#[derive(Args)]
#[command(next_help_heading = "Admin API and console")]
struct AdminArgs {
    /// Credentials of the admin API: one `name role credential` per line,
    /// role `operator` (everything), `finance` (funds, limits, settlement),
    /// `viewer` (reads), `auditor` (the audit trail and reports) or
    /// `dfsp:<name>` (one DFSP's own view; docs/security.md has the table
    /// of every route), credential the sha256 hex of a bearer token (`kasi
    /// admin-token` makes one) or `cert:sha256:<hex>` of a client
    /// certificate (--admin-client-ca). With this file (or --oidc-issuer)
    /// every admin request but /health needs a credential (401 without,
    /// 403 for a route the role may not use). Without either the admin API
    /// is open, which is allowed only on a loopback --admin-listen.
    #[arg(long, env = "KASI_ADMIN_TOKENS", value_name = "FILE")]
    admin_tokens: Option<PathBuf>,

    /// Serve a non-loopback --admin-listen without --admin-tokens (every
    /// caller is an operator). For a network that authenticates by other
    /// means; logged as a warning at start.
    #[arg(long, env = "KASI_ADMIN_INSECURE")]
    admin_insecure: bool,

    /// Ask admin clients for a certificate this CA signed (optional for
    /// the client: bearer tokens still work); its fingerprint is looked up
    /// in the `cert:` lines of --admin-tokens.
    #[arg(
        long,
        env = "KASI_ADMIN_CLIENT_CA",
        value_name = "FILE",
        requires_all = ["tls_cert", "admin_tokens"]
    )]
    admin_client_ca: Option<PathBuf>,

    /// The scheme's OpenID Connect identity provider, exactly as its
    /// tokens' `iss` names it (`https://idp.example/realms/scheme`): the
    /// admin API then also accepts its JWT access tokens as bearer tokens,
    /// checked against the keys its discovery document's `jwks_uri` lists
    /// (signature, issuer, audience, expiry, not-before), each naming a
    /// person and their roles, and the console offers "Sign in with your
    /// identity provider" (authorization code with PKCE). The tokens file
    /// stays for automation and break-glass. Needs --oidc-client-id.
    #[arg(
        long,
        env = "KASI_OIDC_ISSUER",
        value_name = "URL",
        requires = "oidc_client_id"
    )]
    oidc_issuer: Option<String>,

    /// kasi's client id at the identity provider.
    #[arg(
        long,
        env = "KASI_OIDC_CLIENT_ID",
        value_name = "ID",
        requires = "oidc_issuer"
    )]
    oidc_client_id: Option<String>,

    /// A file holding kasi's client secret at the provider (a confidential
    /// client; sent with HTTP Basic when the console trades a sign-in's
    /// code for tokens). Without it the console signs in as a public client
    /// with PKCE alone.
    #[arg(
        long,
        env = "KASI_OIDC_CLIENT_SECRET_FILE",
        value_name = "FILE",
        requires = "oidc_issuer"
    )]
    oidc_client_secret_file: Option<PathBuf>,

    /// The console's sign-in callback as registered at the provider, e.g.
    /// `https://hub.example:3001/console/oidc/callback`. Default: the
    /// admin address as the person's browser names it (its Host header),
    /// which the provider accepts only if it is registered.
    #[arg(
        long,
        env = "KASI_OIDC_REDIRECT_URL",
        value_name = "URL",
        requires = "oidc_issuer"
    )]
    oidc_redirect_url: Option<String>,

    /// What an access token's `aud` must contain. Default: the client id.
    #[arg(
        long,
        env = "KASI_OIDC_AUDIENCE",
        value_name = "AUDIENCE",
        requires = "oidc_issuer"
    )]
    oidc_audience: Option<String>,

    /// The claim holding a person's roles, a dotted path for nested claims
    /// (Keycloak: `realm_access.roles`): an array of strings, or one
    /// space-separated string. kasi's roles are `operator`, `finance`,
    /// `viewer`, `auditor` and `dfsp:<name>`; a person with several acts in
    /// the most privileged.
    #[arg(
        long,
        env = "KASI_OIDC_ROLES_CLAIM",
        value_name = "PATH",
        default_value = "roles"
    )]
    oidc_roles_claim: String,

    /// Admin changes that need two people (maker/checker): a comma list of
    /// funds-out, funds-in, net-debit-cap, settlement-finalize,
    /// participant-deactivate, endpoints, or `none`. Such a request does
    /// not apply: it is kept as a pending change (202 Accepted) that a
    /// different person whose role may make it approves or rejects with
    /// `POST /approvals/{id}`; it applies then, against the state then.
    /// Default: funds-out,net-debit-cap,settlement-finalize with
    /// credentials (--admin-tokens, --oidc-issuer); none on an open admin
    /// API, whose callers are all one, so no second person could approve.
    #[arg(long, env = "KASI_FOUR_EYES", value_name = "ACTIONS")]
    four_eyes: Option<String>,

    /// How long a pending change waits for its decision (`24h`, `30m`,
    /// `90s`); then it expires and must be asked for again.
    #[arg(
        long,
        env = "KASI_FOUR_EYES_EXPIRY",
        value_name = "DURATION",
        default_value = "24h",
        value_parser = parse_expiry
    )]
    four_eyes_expiry: Duration,

    /// The claim naming the person in audit events and logs (`sub` when a
    /// token lacks it).
    #[arg(
        long,
        env = "KASI_OIDC_NAME_CLAIM",
        value_name = "CLAIM",
        default_value = "preferred_username"
    )]
    oidc_name_claim: String,

    /// The provider's role names that mean kasi's, e.g.
    /// `--oidc-role-map hub-ops=operator,treasury=finance`.
    #[arg(
        long,
        env = "KASI_OIDC_ROLE_MAP",
        value_name = "PROVIDER_ROLE=KASI_ROLE",
        value_delimiter = ','
    )]
    oidc_role_map: Vec<String>,

    /// How far the provider's clock and kasi's may disagree when checking
    /// `exp` and `nbf`, in seconds (at most 300).
    #[arg(
        long,
        env = "KASI_OIDC_CLOCK_SKEW",
        value_name = "SECONDS",
        default_value_t = 60
    )]
    oidc_clock_skew: u64,

    /// The CA (PEM) the identity provider's HTTPS certificate chains to,
    /// if not one the system trusts.
    #[arg(
        long,
        env = "KASI_OIDC_CA",
        value_name = "FILE",
        requires = "oidc_issuer"
    )]
    oidc_ca: Option<PathBuf>,
}

/// Who may use the admin address.
#[derive(Debug)]
pub(crate) enum AdminPlan {
    /// Credentials: a tokens file, read when serving starts (and again on
    /// SIGHUP), and/or an identity provider's access tokens.
    Credentials {
        tokens: Option<PathBuf>,
        provider: Option<Box<hub::oidc::OidcSettings>>,
        /// The provider's client secret, read when serving starts.
        provider_secret: Option<PathBuf>,
    },
    /// No credentials: served open, on a loopback address or because the
    /// operator insisted (--admin-insecure).
    Open(Arc<hub::admin_auth::AdminAuth>),
}

impl AdminArgs {
    fn plan(&self, listen: SocketAddr) -> Result<AdminPlan, PlanError> {
        let provider = match (&self.oidc_issuer, &self.oidc_client_id) {
            (Some(issuer), Some(client_id)) => Some(
                hub::oidc::OidcSettings::new(
                    issuer,
                    client_id,
                    self.oidc_audience.as_deref(),
                    // Read with the other files, when serving starts.
                    None,
                    self.oidc_redirect_url.as_deref(),
                    &self.oidc_roles_claim,
                    &self.oidc_name_claim,
                    &self.oidc_role_map,
                    Duration::from_secs(self.oidc_clock_skew),
                    self.oidc_ca.clone(),
                )
                .or_else(|error| refuse("--oidc-issuer", error))?,
            ),
            _ => None,
        };
        Ok(match (&self.admin_tokens, provider) {
            (None, None) => AdminPlan::Open(Arc::new(
                hub::admin_auth::decide(listen, None, self.admin_insecure)
                    .or_else(|error| refuse("--admin-listen", error))?,
            )),
            (tokens, provider) => AdminPlan::Credentials {
                tokens: tokens.clone(),
                provider: provider.map(Box::new),
                provider_secret: self.oidc_client_secret_file.clone(),
            },
        })
    }
}

/// Scheduled window closes and the position alarm.
#[derive(Args)]
#[command(next_help_heading = "Settlement windows and positions")]
struct WatchArgs {
    /// Close the open settlement window every day at these UTC times
    /// (HH:MM or HH:MM:SS), e.g. `--settlement-close-at 00:00,12:00` (a
    /// window with no committed
    /// transfer is left open). Without it, windows close only when the
    /// operator asks (`POST /v2/settlementWindows/{id}`).
    #[arg(
        long,
        env = "KASI_SETTLEMENT_CLOSE_AT",
        value_delimiter = ',',
        value_name = "HH:MM"
    )]
    settlement_close_at: Vec<hub::watch::CloseAt>,

    /// Flag a DFSP whose position (reservations included) reaches this
    /// percentage of its net debit cap: a warning in the log,
    /// `kasi_position_alarm` = 1 on `/metrics` and, with --smtp-url, a mail
    /// to its NET_DEBIT_CAP_THRESHOLD_BREACH_EMAIL (Mojaloop's alarm
    /// percentage); the same share of its liquidity (its settlement
    /// account's funds) is alarmed alike. The alarm clears only 5 points
    /// below, so a position going up and down around the threshold alarms
    /// once. 0 turns the watch off.
    #[arg(long, env = "KASI_POSITION_ALARM_PERCENT", default_value_t = 90)]
    position_alarm_percent: u8,

    /// How often positions are checked against the alarm share, in ms.
    #[arg(long, env = "KASI_POSITION_WATCH_INTERVAL_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(10..))]
    position_watch_interval_ms: u64,
}

/// The settlement and position watches.
#[derive(Debug)]
pub(crate) struct WatchPlan {
    /// UTC times the open settlement window closes each day; none: only
    /// when the operator asks.
    pub(crate) close_at: Vec<hub::watch::CloseAt>,
    /// The position alarm's percentage of the net debit cap and how often
    /// it is checked; `None`: off.
    pub(crate) position_alarm: Option<(u8, Duration)>,
}

impl WatchArgs {
    fn plan(&self) -> WatchPlan {
        WatchPlan {
            close_at: self.settlement_close_at.clone(),
            position_alarm: (self.position_alarm_percent > 0).then(|| {
                (
                    self.position_alarm_percent,
                    Duration::from_millis(self.position_watch_interval_ms),
                )
            }),
        }
    }
}

/// Alerts mailed to the DFSPs' contacts.
#[derive(Args)]
#[command(next_help_heading = "Alerts to the DFSPs")]
struct AlertArgs {
    /// Mail alerts to the addresses each DFSP registered under the email
    /// endpoint types, through this SMTP server:
    /// `smtp://[USER[:PASSWORD]@]HOST[:PORT][?tls=required|none]` (STARTTLS
    /// required by default, port 587; `tls=none`, port 25, for a relay on
    /// this host only) or `smtps://` (TLS from the start, port 465); user
    /// and password percent-encoded. NET_DEBIT_CAP_THRESHOLD_BREACH_EMAIL
    /// gets the position alarms (see --position-alarm-percent) and the
    /// callbacks failing and recovering; NET_DEBIT_CAP_ADJUSTMENT_EMAIL a
    /// change of the net debit cap; SETTLEMENT_TRANSFER_POSITION_CHANGE_EMAIL
    /// a settlement SETTLED. Without it no alert is mailed (a DFSP's
    /// KASI_ALERTS_WEBHOOK_URL endpoint, if any, is still POSTed each alert
    /// as JSON). Needs --alerts-from.
    #[arg(long, env = "KASI_SMTP_URL", value_name = "URL")]
    smtp_url: Option<String>,

    /// A file holding the SMTP password, instead of the URL's.
    #[arg(long, env = "KASI_SMTP_PASSWORD_FILE", value_name = "FILE")]
    smtp_password_file: Option<PathBuf>,

    /// The CA (PEM) the SMTP server's certificate chains to, if not one
    /// the system trusts.
    #[arg(long, env = "KASI_SMTP_CA", value_name = "FILE")]
    smtp_ca: Option<PathBuf>,

    /// The alerts' sender: `alerts@hub.example` or `Hub <alerts@hub.example>`.
    #[arg(long, env = "KASI_ALERTS_FROM", value_name = "ADDRESS")]
    alerts_from: Option<String>,

    /// At most this many alerts to one DFSP in any hour (mail and webhook
    /// alike); more are not sent (counted `rate_limited`, logged).
    #[arg(long, env = "KASI_ALERTS_PER_DFSP_PER_HOUR", default_value_t = 20, value_name = "COUNT",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    alerts_per_dfsp_per_hour: u32,

    /// How long the hub's callbacks to a DFSP must have failed before its
    /// contacts are told (and told again once they are answered), in
    /// seconds.
    #[arg(
        long,
        env = "KASI_ALERTS_CALLBACKS_FAILING_AFTER_S",
        default_value_t = 60,
        value_name = "SECONDS"
    )]
    alerts_callbacks_failing_after_s: u64,
}

/// The files of the alerts' settings, read when serving starts.
#[derive(Debug, Default)]
pub(crate) struct AlertsFiles {
    pub(crate) password: Option<PathBuf>,
    pub(crate) ca: Option<PathBuf>,
}

impl AlertArgs {
    fn plan(&self, hub: &mut HubConfig) -> Result<AlertsFiles, PlanError> {
        hub.alerts.per_dfsp_per_hour = self.alerts_per_dfsp_per_hour;
        hub.alerts.callbacks_failing_after =
            Duration::from_secs(self.alerts_callbacks_failing_after_s);
        let Some(url) = &self.smtp_url else {
            for (given, flag) in [
                (self.smtp_password_file.is_some(), "--smtp-password-file"),
                (self.smtp_ca.is_some(), "--smtp-ca"),
                (self.alerts_from.is_some(), "--alerts-from"),
            ] {
                if given {
                    return refuse(flag, "needs --smtp-url URL too");
                }
            }
            return Ok(AlertsFiles::default());
        };
        let smtp = hub::alerts::SmtpSettings::parse(url).or_else(|why| {
            refuse(
                "--smtp-url",
                format!("{why}; write smtp://USER:PASSWORD@HOST:PORT?tls=required"),
            )
        })?;
        if smtp.password.is_some() && self.smtp_password_file.is_some() {
            return refuse(
                "--smtp-password-file",
                "--smtp-url holds a password already: give it in one place",
            );
        }
        if smtp.user.is_none() && self.smtp_password_file.is_some() {
            return refuse(
                "--smtp-password-file",
                "--smtp-url names no user: write smtp://USER@HOST",
            );
        }
        let Some(from) = &self.alerts_from else {
            return refuse(
                "--alerts-from",
                "--smtp-url needs --alerts-from ADDRESS too",
            );
        };
        hub::alerts::check_address(from).or_else(|why| refuse("--alerts-from", why))?;
        hub.alerts.mail = Some(hub::alerts::MailConfig {
            smtp,
            from: from.clone(),
            ca_pem: None,
        });
        Ok(AlertsFiles {
            password: self.smtp_password_file.clone(),
            ca: self.smtp_ca.clone(),
        })
    }
}

/// The change feed (`GET /feed`) and its publisher to a message broker.
#[derive(Args)]
#[command(next_help_heading = "Change feed")]
struct FeedArgs {
    /// How long the change feed keeps a change (`12h`, `7d`, ...): older
    /// ones are deleted (checked every quarter of it, at most every
    /// minute), and a consumer whose cursor is older is told to
    /// resynchronise (410).
    #[arg(long, env = "KASI_FEED_RETENTION", default_value = "7d",
          value_parser = parse_feed_retention, value_name = "DURATION")]
    feed_retention: Duration,

    /// Publish every change to this AMQP 0.9.1 broker (RabbitMQ):
    /// `amqp://USER:PASSWORD@HOST:5672/VHOST` (`%2f` for the default
    /// vhost). At least once, with publisher confirms, from a durable
    /// cursor in the store.
    #[arg(long, env = "KASI_FEED_AMQP_URL", value_name = "URL")]
    feed_amqp_url: Option<String>,

    /// The topic exchange changes are published to (declared durable),
    /// routing key `<kind>.<participant>`.
    #[arg(long, env = "KASI_FEED_AMQP_EXCHANGE", value_name = "NAME")]
    feed_amqp_exchange: Option<String>,
}

/// The exchange when `--feed-amqp-exchange` is not given.
pub(crate) const DEFAULT_FEED_EXCHANGE: &str = "kasi.feed";

/// The change feed's settings.
#[derive(Debug)]
pub(crate) struct FeedPlan {
    pub(crate) retention: Duration,
    pub(crate) amqp: Option<AmqpPlan>,
}

/// Where the publisher sends the feed.
pub(crate) struct AmqpPlan {
    pub(crate) url: String,
    pub(crate) exchange: String,
}

/// Passwords stay out of debug output.
impl std::fmt::Debug for AmqpPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpPlan")
            .field("url", &store::pg::redact_url(&self.url))
            .field("exchange", &self.exchange)
            .finish()
    }
}

impl FeedArgs {
    fn plan(&self) -> Result<FeedPlan, PlanError> {
        require(
            &self.feed_amqp_exchange,
            "--feed-amqp-exchange",
            &self.feed_amqp_url,
            "--feed-amqp-url",
            "the exchange is on that broker",
        )?;
        let amqp = match &self.feed_amqp_url {
            None => None,
            Some(url) => {
                if !url.starts_with("amqp://") {
                    return refuse(
                        "--feed-amqp-url",
                        "must be amqp://USER:PASSWORD@HOST:PORT/VHOST (amqps:// is not built in: \
                         reach a remote broker through a TLS tunnel on the hub's host)",
                    );
                }
                let exchange = self
                    .feed_amqp_exchange
                    .clone()
                    .unwrap_or_else(|| DEFAULT_FEED_EXCHANGE.to_string());
                let well_formed = !exchange.is_empty()
                    && exchange.len() <= 127
                    && exchange
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
                    && !exchange.starts_with("amq.");
                if !well_formed {
                    return refuse(
                        "--feed-amqp-exchange",
                        "1-127 letters, digits, '-', '_', '.', ':', not starting with 'amq.' \
                         (the broker's own)",
                    );
                }
                Some(AmqpPlan {
                    url: url.clone(),
                    exchange,
                })
            }
        };
        Ok(FeedPlan {
            retention: self.feed_retention,
            amqp,
        })
    }
}

/// The wire log: the FSPIOP messages of transfers and conversions.
#[derive(Args)]
#[command(next_help_heading = "Wire log")]
struct WireLogArgs {
    /// Keep the FSPIOP messages of every transfer and conversion — each
    /// request as a DFSP sent it (headers and body) with the hub's answer,
    /// each callback attempt as the hub sent it with the DFSP's answer —
    /// for the console's transfer page and `GET /transfers/{id}/messages`.
    /// Kept in `<data-dir>/wire`, written off the request path (a message
    /// the writer cannot keep up with is dropped and counted, never
    /// waited for), credentials in headers redacted: `on` or `off`.
    #[arg(long, env = "KASI_WIRE_LOG", default_value = "on", value_name = "on|off",
          value_parser = ["on", "off"])]
    wire_log: String,

    /// The disk the wire log may use (`4GiB`, `500MiB`, bytes): the oldest
    /// messages are deleted first. At 1,000 transfers/s a transfer's
    /// messages take ~5 KB, so 4 GiB holds about 15 minutes of that.
    #[arg(long, env = "KASI_WIRE_LOG_MAX_BYTES", default_value = "4GiB",
          value_parser = parse_bytes, value_name = "SIZE")]
    wire_log_max_bytes: u64,

    /// How long the wire log keeps a message (`2d`, `12h`, ...), at most:
    /// the disk bound may delete it sooner.
    #[arg(long, env = "KASI_WIRE_LOG_RETENTION", default_value = "7d",
          value_parser = parse_feed_retention, value_name = "DURATION")]
    wire_log_retention: Duration,
}

/// Where the wire log is kept, and its bounds.
#[derive(Debug)]
pub(crate) struct WireLogPlan {
    pub(crate) dir: PathBuf,
    pub(crate) config: wirelog::Config,
}

impl WireLogArgs {
    fn plan(&self, data_dir: &std::path::Path) -> Option<WireLogPlan> {
        (self.wire_log == "on").then(|| WireLogPlan {
            dir: data_dir.join("wire"),
            config: wirelog::Config {
                max_bytes: self.wire_log_max_bytes,
                retention: self.wire_log_retention,
                ..wirelog::Config::default()
            },
        })
    }
}

/// A size: bytes, or with `KiB`, `MiB`, `GiB` (at least 1 MiB).
fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale: u64 = match unit.trim() {
        "" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit {other:?}: use bytes, KiB, MiB or GiB"
            ))
        }
    };
    let bytes = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{text:?} is not a size (e.g. 4GiB)"))?;
    if bytes < 1 << 20 {
        return Err("at least 1MiB".into());
    }
    Ok(bytes)
}

/// `--feed-retention`: at least a second.
fn parse_feed_retention(text: &str) -> Result<Duration, String> {
    match parse_duration_ms(text)? {
        ms if ms >= 1_000 => Ok(Duration::from_millis(ms as u64)),
        _ => Err("at least 1s".into()),
    }
}

/// `--transfer-retention`: milliseconds, or `None` for ever.
#[derive(Clone, Copy, Debug)]
struct Retention(Option<i64>);

fn parse_retention(text: &str) -> Result<Retention, String> {
    if text == "forever" {
        return Ok(Retention(None));
    }
    match parse_duration_ms(text) {
        Ok(ms) if ms >= 1_000 => Ok(Retention(Some(ms))),
        Ok(_) => Err("at least 1s (or `forever`)".into()),
        Err(error) => Err(format!("{error}, or `forever`")),
    }
}

/// How often the history snapshot advances: at least 10 ms.
fn parse_interval(text: &str) -> Result<Duration, String> {
    match parse_duration_ms(text)? {
        ms if ms >= 10 => Ok(Duration::from_millis(ms as u64)),
        _ => Err("at least 10ms".into()),
    }
}

/// `90s`, `30m`, `24h`, `7d`, `250ms`: milliseconds.
fn parse_duration_ms(text: &str) -> Result<i64, String> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit_ms = match &text[digits.len()..] {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err("a number with ms, s, m, h or d (`24h`)".into()),
    };
    let count: i64 = digits
        .parse()
        .map_err(|_| format!("{digits:?} is not a whole number"))?;
    count
        .checked_mul(unit_ms)
        .ok_or_else(|| "absurdly long".to_string())
}

/// How long a pending change waits: at least a second.
fn parse_expiry(text: &str) -> Result<Duration, String> {
    match parse_duration_ms(text)? {
        ms if ms >= 1_000 => Ok(Duration::from_millis(ms as u64)),
        _ => Err("at least 1s".into()),
    }
}

/// A switch: `on` or `off`.
fn parse_on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("expected on or off, not {other:?}")),
    }
}

/// A listen address: `IP:PORT`, or `HOST:PORT` resolved now (its first
/// address, which for `localhost` is a loopback one).
fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = text.parse() {
        return Ok(address);
    }
    use std::net::ToSocketAddrs as _;
    let mut addresses = text.to_socket_addrs().map_err(|error| {
        format!("{text:?} is neither IP:PORT nor a HOST:PORT that resolves ({error})")
    })?;
    addresses
        .next()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches, Parser};
    use std::path::Path;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    /// `kasi serve FLAGS…` as clap parses it, without the environment,
    /// and without clap's `requires` between flags: the plan must hold
    /// those rules by itself, as it does for a config file's values
    /// (which clap takes as defaults and does not check).
    fn args(flags: &[&str]) -> ServeArgs {
        let command = Serve::command()
            .mut_args(|arg| arg.env(None).requires(clap::builder::Resettable::Reset));
        let argv = std::iter::once("serve").chain(flags.iter().copied());
        let mut matches = command.try_get_matches_from(argv).unwrap();
        Serve::from_arg_matches_mut(&mut matches).unwrap().args
    }

    fn plan(flags: &[&str]) -> ServePlan {
        args(flags)
            .plan()
            .unwrap_or_else(|error| panic!("{flags:?} refused: {error}"))
    }

    #[test]
    fn the_change_feed_flags() {
        let defaults = plan(&[]).feed;
        assert_eq!(defaults.retention, Duration::from_secs(7 * 86_400));
        assert!(defaults.amqp.is_none());
        let amqp = plan(&["--feed-amqp-url", "amqp://kasi:s3cret@broker:5672/%2f"])
            .feed
            .amqp
            .expect("a publisher");
        assert_eq!(amqp.exchange, DEFAULT_FEED_EXCHANGE);
        assert!(!format!("{amqp:?}").contains("s3cret"));
        for (flags, flag) in [
            (
                &["--feed-amqp-exchange", "reports"][..],
                "--feed-amqp-exchange",
            ),
            (
                &["--feed-amqp-url", "amqps://broker/"][..],
                "--feed-amqp-url",
            ),
            (
                &[
                    "--feed-amqp-url",
                    "amqp://broker/",
                    "--feed-amqp-exchange",
                    "amq.topic",
                ][..],
                "--feed-amqp-exchange",
            ),
        ] {
            let refused = args(flags).plan().expect_err("refused");
            assert_eq!(refused.flag, flag, "{flags:?}");
        }
    }

    #[test]
    fn the_defaults() {
        let plan = plan(&[]);
        let store::StoreLocation::Sqlite(dir) = &plan.store.location else {
            panic!("{:?}", plan.store.location)
        };
        assert_eq!(dir, Path::new("kasi-data"));
        assert_eq!(plan.store.lease_ms, 2_000);
        assert_eq!(plan.store.instance_name, None);
        let history = plan.store.history.unwrap();
        assert_eq!(history.retention_ms, 86_400_000);
        assert_eq!(history.interval, Duration::from_secs(30));
        assert_eq!(plan.ledger.limits.transfer_retention_ms, Some(86_400_000));
        assert_eq!(plan.ledger.limits.max_finished_in_memory, 2_000_000);
        assert_eq!(plan.ledger.pipeline_threads, None);
        assert_eq!(plan.listen.api, "127.0.0.1:3000".parse().unwrap());
        assert_eq!(plan.listen.admin, "127.0.0.1:3001".parse().unwrap());
        assert_eq!(plan.listen.http_threads, None);
        assert_eq!(plan.listen.max_connections, None);
        assert_eq!(plan.listen.max_connections_per_client, None);
        assert_eq!(plan.listen.header_read_timeout, Duration::from_secs(10));
        let hub = &plan.hub;
        assert_eq!(hub.hub_name.as_str(), "Hub");
        assert_eq!(hub.admin_base_url, "http://127.0.0.1:3001");
        assert!(!hub.quotes_persistent);
        assert!(hub.payee_commit_confirmation);
        assert_eq!(hub.answer_window, Duration::from_secs(60));
        assert_eq!(hub.pending_answers_max, 1_000_000);
        assert_eq!(hub.trace_sample_every, 1_000);
        assert_eq!(hub.body_idle_timeout, Duration::from_secs(5));
        assert_eq!(hub.max_clock_skew, None);
        assert!(!hub.identity.is_enforced());
        assert!(!hub.jws_verify.is_on());
        // Neither signing nor verifying: no JWS threads.
        assert_eq!(plan.jws_pool, None);
        assert!(hub.callback_allow.is_empty());
        assert!(hub.admin_auth.is_open_on_loopback());
        assert!(matches!(&plan.admin, AdminPlan::Open(open) if open.is_open_on_loopback()));
        assert!(plan.tls.is_none());
        assert!(plan.callbacks.ca.is_none());
        assert!(plan.callbacks.identity.is_none());
        assert!(plan.callbacks.signing_key.is_none());
        assert_eq!(plan.callbacks.retry_for, Duration::from_secs(3_600));
        assert_eq!(plan.callbacks.concurrency, 8);
        assert_eq!(plan.callbacks.shutdown_grace, Duration::from_secs(5));
        assert!(plan.watch.close_at.is_empty());
        assert_eq!(
            plan.watch.position_alarm,
            Some((90, Duration::from_secs(5)))
        );
    }

    /// Each derived value worth a rule, from the flags that make it.
    #[test]
    fn derived_values() {
        type Check = fn(&ServePlan);
        let cases: &[(&[&str], Check)] = &[
            (&["--transfer-retention", "forever"], |plan| {
                assert!(plan.store.history.is_none());
                assert_eq!(plan.ledger.limits.transfer_retention_ms, None);
            }),
            (
                &[
                    "--transfer-retention",
                    "90s",
                    "--history-snapshot-interval",
                    "250ms",
                ],
                |plan| {
                    let history = plan.store.history.unwrap();
                    assert_eq!(history.retention_ms, 90_000);
                    assert_eq!(history.interval, Duration::from_millis(250));
                    assert_eq!(plan.ledger.limits.transfer_retention_ms, Some(90_000));
                },
            ),
            (&["--data-dir", "/y", "--store", "sqlite:/x"], |plan| {
                assert!(
                    matches!(&plan.store.location, store::StoreLocation::Sqlite(dir) if dir == Path::new("/x"))
                );
            }),
            (
                &[
                    "--store",
                    "postgres://kasi:pa#ss@db1,db2/kasi",
                    "--lease-ms",
                    "900",
                    "--instance-name",
                    "hub-a",
                ],
                |plan| {
                    assert!(
                        matches!(&plan.store.location, store::StoreLocation::Postgres(url) if url == "postgres://kasi:pa#ss@db1,db2/kasi")
                    );
                    assert_eq!(plan.store.lease_ms, 900);
                    assert_eq!(plan.store.instance_name.as_deref(), Some("hub-a"));
                },
            ),
            (
                &["--pipeline-threads", "1", "--http-threads", "3"],
                |plan| {
                    assert_eq!(plan.ledger.pipeline_threads, Some(PipelineThreads::One));
                    assert_eq!(plan.listen.http_threads, Some(3));
                },
            ),
            (
                &[
                    "--max-connections",
                    "50",
                    "--max-connections-per-client",
                    "5",
                ],
                |plan| {
                    assert_eq!(plan.listen.max_connections, Some(50));
                    assert_eq!(plan.listen.max_connections_per_client, Some(5));
                },
            ),
            (
                &[
                    "--tls-cert",
                    "/no/cert.pem",
                    "--tls-key",
                    "/no/key.pem",
                    "--tls-client-ca",
                    "/no/ca.pem",
                    "--admin-listen",
                    "127.0.0.1:4001",
                ],
                |plan| {
                    // Named, not read: the files need not exist yet.
                    let tls = plan.tls.as_ref().unwrap();
                    assert_eq!(tls.cert.cert, Path::new("/no/cert.pem"));
                    assert_eq!(tls.cert.key, Path::new("/no/key.pem"));
                    assert_eq!(tls.client_ca.as_deref(), Some(Path::new("/no/ca.pem")));
                    assert_eq!(tls.admin_client_ca, None);
                    assert!(plan.hub.identity.client_certificates);
                    assert_eq!(plan.hub.admin_base_url, "https://127.0.0.1:4001");
                },
            ),
            (
                &[
                    "--trusted-proxy",
                    "10.0.0.0/8,192.168.0.0/16",
                    "--client-identity-header",
                    "X-Client-Id",
                ],
                |plan| {
                    let proxy = plan.hub.identity.proxy.as_ref().unwrap();
                    assert_eq!(proxy.header, "x-client-id");
                    assert_eq!(proxy.trusted.len(), 2);
                    assert!(!plan.hub.identity.client_certificates);
                },
            ),
            (
                &["--admin-listen", "0.0.0.0:3001", "--admin-insecure"],
                |plan| {
                    assert!(
                        matches!(&plan.admin, AdminPlan::Open(open) if open.is_open() && !open.is_open_on_loopback())
                    );
                },
            ),
            (
                &[
                    "--admin-listen",
                    "0.0.0.0:3001",
                    "--admin-tokens",
                    "/no/tokens",
                ],
                |plan| {
                    assert!(
                        matches!(&plan.admin, AdminPlan::Credentials { tokens: Some(path), provider: None, .. } if path == Path::new("/no/tokens"))
                    );
                },
            ),
            (
                &["--hub-name", "Switch", "--jws-signing-key", "/no/hub.pem"],
                |plan| {
                    let (path, name) = plan.callbacks.signing_key.as_ref().unwrap();
                    assert_eq!(path, Path::new("/no/hub.pem"));
                    assert_eq!(name.as_str(), "Switch");
                    assert_eq!(plan.hub.hub_name.as_str(), "Switch");
                    // One thread per CPU, counted when serving starts.
                    assert_eq!(plan.jws_pool, Some(JwsPoolPlan { threads: None }));
                },
            ),
            (
                &["--jws-signing-key", "/no/hub.pem", "--jws-threads", "3"],
                |plan| assert_eq!(plan.jws_pool, Some(JwsPoolPlan { threads: Some(3) })),
            ),
            // Nothing to sign or verify: the threads are not started.
            (&["--jws-threads", "3"], |plan| {
                assert_eq!(plan.jws_pool, None)
            }),
            (
                &[
                    "--jws-verify",
                    "transfers,quotes",
                    "--jws-keys-dir",
                    "/no/keys",
                    "--jws-verify-participants",
                    "dfsp1,dfsp2",
                    "--jws-verify-put-parties",
                ],
                |plan| {
                    let verify = &plan.hub.jws_verify;
                    assert_eq!(verify.resources, ["transfers", "quotes"]);
                    assert!(verify.put_parties);
                    assert_eq!(
                        verify.participants.as_deref(),
                        Some(&["dfsp1".to_string(), "dfsp2".to_string()][..])
                    );
                    assert_eq!(
                        plan.hub.jws_keys_dir.as_deref(),
                        Some(Path::new("/no/keys"))
                    );
                },
            ),
            (&["--jws-verify", "all", "--jws-keys-dir", "k"], |plan| {
                assert!(plan.hub.jws_verify.resources.len() > 5);
                assert_eq!(plan.hub.jws_verify.participants, None);
                assert_eq!(plan.jws_pool, Some(JwsPoolPlan { threads: None }));
            }),
            (
                &[
                    "--callback-ca",
                    "/no/ca.pem",
                    "--callback-cert",
                    "/no/c.pem",
                    "--callback-key",
                    "/no/k.pem",
                    "--callback-retry-for-s",
                    "60",
                    "--callback-concurrency",
                    "32",
                    "--shutdown-grace-s",
                    "1",
                ],
                |plan| {
                    let callbacks = &plan.callbacks;
                    assert_eq!(callbacks.ca.as_deref(), Some(Path::new("/no/ca.pem")));
                    let identity = callbacks.identity.as_ref().unwrap();
                    assert_eq!(identity.cert, Path::new("/no/c.pem"));
                    assert_eq!(identity.key, Path::new("/no/k.pem"));
                    assert_eq!(callbacks.retry_for, Duration::from_secs(60));
                    assert_eq!(callbacks.concurrency, 32);
                    assert_eq!(callbacks.shutdown_grace, Duration::from_secs(1));
                },
            ),
            (
                &[
                    "--callback-allow",
                    "*.example.com",
                    "--callback-allow",
                    "10.0.0.0/8",
                ],
                |plan| {
                    assert_eq!(plan.hub.callback_allow.len(), 2);
                },
            ),
            (
                &[
                    "--quotes-persistent",
                    "--payee-commit-confirmation",
                    "off",
                    "--answer-window-s",
                    "5",
                    "--pending-answers-max",
                    "64",
                    "--trace-sample-every",
                    "0",
                    "--body-timeout-ms",
                    "700",
                    "--header-timeout-ms",
                    "800",
                    "--max-clock-skew-s",
                    "30",
                ],
                |plan| {
                    let hub = &plan.hub;
                    assert!(hub.quotes_persistent);
                    assert!(!hub.payee_commit_confirmation);
                    assert_eq!(hub.answer_window, Duration::from_secs(5));
                    assert_eq!(hub.pending_answers_max, 64);
                    assert_eq!(hub.trace_sample_every, 0);
                    assert_eq!(hub.body_idle_timeout, Duration::from_millis(700));
                    assert_eq!(plan.listen.header_read_timeout, Duration::from_millis(800));
                    assert_eq!(hub.max_clock_skew, Some(Duration::from_secs(30)));
                },
            ),
            (&["--position-alarm-percent", "0"], |plan| {
                assert_eq!(plan.watch.position_alarm, None);
            }),
            (&[], |plan| {
                assert!(plan.hub.alerts.mail.is_none());
                assert_eq!(plan.hub.alerts.per_dfsp_per_hour, 20);
            }),
            (
                &[
                    "--smtp-url",
                    "smtp://alerts@mail.example?tls=required",
                    "--smtp-password-file",
                    "/run/secrets/smtp",
                    "--alerts-from",
                    "Hub <alerts@hub.example>",
                    "--alerts-per-dfsp-per-hour",
                    "5",
                ],
                |plan| {
                    let alerts = &plan.hub.alerts;
                    let mail = alerts.mail.as_ref().unwrap();
                    assert_eq!(mail.smtp.host, "mail.example");
                    assert_eq!(mail.smtp.port, 587);
                    assert_eq!(mail.smtp.user.as_deref(), Some("alerts"));
                    assert_eq!(alerts.per_dfsp_per_hour, 5);
                    assert_eq!(alerts.callbacks_failing_after, Duration::from_secs(60));
                    assert_eq!(
                        plan.alerts.password.as_deref(),
                        Some(Path::new("/run/secrets/smtp"))
                    );
                },
            ),
            (
                &[
                    "--position-alarm-percent",
                    "75",
                    "--position-watch-interval-ms",
                    "100",
                    "--settlement-close-at",
                    "00:00,12:30",
                ],
                |plan| {
                    assert_eq!(
                        plan.watch.position_alarm,
                        Some((75, Duration::from_millis(100)))
                    );
                    let times: Vec<String> = plan
                        .watch
                        .close_at
                        .iter()
                        .map(ToString::to_string)
                        .collect();
                    assert_eq!(times, ["00:00", "12:30"]);
                },
            ),
        ];
        for (flags, check) in cases {
            check(&plan(flags));
        }
    }

    /// Four-eyes holds the money-moving changes once there are people to
    /// tell apart, and is off on an open admin API unless asked (refused
    /// there, see `refusals`).
    #[test]
    fn four_eyes_needs_people() {
        use hub::approvals::{Action, FourEyes, DEFAULT_ACTIONS, DEFAULT_EXPIRY};
        assert_eq!(plan(&[]).hub.four_eyes, FourEyes::off());
        assert_eq!(
            plan(&["--four-eyes", "none"]).hub.four_eyes,
            FourEyes::off()
        );
        let with_tokens = plan(&["--admin-tokens", "t"]).hub.four_eyes;
        assert_eq!(
            with_tokens,
            FourEyes::parse(DEFAULT_ACTIONS, DEFAULT_EXPIRY).unwrap()
        );
        let chosen = plan(&[
            "--admin-tokens",
            "t",
            "--four-eyes",
            "endpoints",
            "--four-eyes-expiry",
            "30m",
        ])
        .hub
        .four_eyes;
        assert!(chosen.holds(Action::Endpoints) && !chosen.holds(Action::FundsOut));
        assert_eq!(chosen.expiry, Duration::from_secs(1800));
    }

    /// Each refusal names the flag to mend and says how.
    #[test]
    fn refusals() {
        let cases: &[(&[&str], &str, &str)] = &[
            (&["--hub-name", "the hub"], "--hub-name", "\"the hub\" must be 1-32 printable ASCII characters without spaces or '/'"),
            (&["--hub-name", "a/b"], "--hub-name", "must be 1-32"),
            (&["--store", "mysql://kasi:secret@db/kasi"], "--store", "is not a store: use sqlite:DIR or postgres://USER@HOST/DATABASE"),
            (&["--store", "sqlite:"], "--store", "sqlite: needs a directory"),
            (&["--admin-listen", "0.0.0.0:3001"], "--admin-listen", "is not loopback and no admin credentials are configured: give --admin-tokens FILE (see `kasi admin-token`), or --admin-insecure"),
            (&["--tls-cert", "c.pem"], "--tls-cert", "needs --tls-key FILE too"),
            (&["--tls-key", "k.pem"], "--tls-key", "needs --tls-cert FILE too"),
            (&["--tls-client-ca", "ca.pem"], "--tls-client-ca", "needs --tls-cert FILE and --tls-key FILE too"),
            (&["--admin-client-ca", "ca.pem", "--admin-tokens", "t"], "--admin-client-ca", "needs --tls-cert FILE and --tls-key FILE too"),
            (&["--admin-client-ca", "ca.pem", "--tls-cert", "c", "--tls-key", "k"], "--admin-client-ca", "needs --admin-tokens FILE too"),
            (&["--callback-cert", "c.pem"], "--callback-cert", "needs --callback-key FILE too"),
            (&["--callback-key", "k.pem"], "--callback-key", "needs --callback-cert FILE too"),
            (&["--trusted-proxy", "10.0.0.0/8"], "--trusted-proxy", "needs --client-identity-header NAME too"),
            (&["--client-identity-header", "X-Client-Id"], "--client-identity-header", "needs --trusted-proxy CIDR too"),
            (&["--client-identity-header", "X Client", "--trusted-proxy", "10.0.0.0/8"], "--client-identity-header", "\"X Client\" is not a header name"),
            (&["--jws-verify", "transfers,quotse", "--jws-keys-dir", "k"], "--jws-verify", "unknown resource \"quotse\"; known: all, transfers"),
            (&["--jws-verify", "transfers"], "--jws-verify", "needs --jws-keys-dir DIR too"),
            (&["--four-eyes", "funds-out"], "--four-eyes", "needs --admin-tokens or --oidc-issuer"),
            (&["--four-eyes", "payouts", "--admin-tokens", "t"], "--four-eyes", "'payouts' is not a four-eyes action"),
            (&["--alerts-from", "a@b.example"], "--alerts-from", "needs --smtp-url URL too"),
            (&["--smtp-url", "smtp://mail.example"], "--alerts-from", "--smtp-url needs --alerts-from ADDRESS too"),
            (&["--smtp-url", "http://mail.example", "--alerts-from", "a@b.example"], "--smtp-url", "neither smtp nor smtps"),
            (&["--smtp-url", "smtp://u:secret@mail.example", "--smtp-password-file", "p", "--alerts-from", "a@b.example"], "--smtp-password-file", "give it in one place"),
            (&["--smtp-url", "smtp://mail.example", "--alerts-from", "not an address"], "--alerts-from", "not an address"),
        ];
        for (flags, flag, message) in cases {
            let error = args(flags).plan().expect_err(&format!("{flags:?} planned"));
            assert_eq!(error.flag, *flag, "{flags:?}: {error}");
            assert!(
                error.to_string().starts_with(&format!("{flag}: ")),
                "{error}"
            );
            assert!(
                error.message.contains(message),
                "{flags:?}: {error}\nlacks: {message}"
            );
            assert!(!error.message.contains("secret"), "{error}");
        }
    }

    /// A config file's values reach the plan as clap defaults, which clap
    /// does not check against each other: the plan does.
    #[test]
    fn a_config_file_is_held_to_the_same_rules() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kasi.toml");
        let serve = |text: &str| {
            std::fs::write(&file, text).unwrap();
            let argv: Vec<std::ffi::OsString> = vec![
                "kasi".into(),
                "serve".into(),
                "--config".into(),
                file.clone().into(),
            ];
            match crate::config::parse::<crate::Cli>(&argv) {
                Ok(crate::Cli {
                    command: crate::Command::Serve(args),
                    ..
                }) => args.plan(),
                Ok(_) => panic!("not serve"),
                Err(error) => panic!("{error:?}"),
            }
        };
        let error = serve("tls-cert = \"/no/cert.pem\"\n").unwrap_err();
        assert_eq!(error.flag, "--tls-cert");
        let plan = serve("tls-cert = \"c\"\ntls-key = \"k\"\nhub-name = \"FileHub\"\n").unwrap();
        assert!(plan.tls.is_some());
        assert_eq!(plan.hub.hub_name.as_str(), "FileHub");
    }
}
