//! `kasi serve`'s flags, in groups beside what each group configures.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// Every flag of `kasi serve`. The groups are the headings of
/// `kasi serve --help`.
#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) listen: ListenArgs,
    #[command(flatten)]
    pub(crate) fspiop: FspiopArgs,
    #[command(flatten)]
    pub(crate) ledger: LedgerArgs,
    #[command(flatten)]
    pub(crate) callbacks: CallbackArgs,
    #[command(flatten)]
    pub(crate) tls: TlsArgs,
    #[command(flatten)]
    pub(crate) jws: JwsArgs,
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    #[command(flatten)]
    pub(crate) watch: WatchArgs,
}

/// The store and, on PostgreSQL, the lease that makes one process of several the active.
#[derive(Args)]
#[command(next_help_heading = "Store")]
pub(crate) struct StoreArgs {
    /// Directory holding the hub's store; created on first start. Only one
    /// kasi process may serve a directory at a time.
    #[arg(long, env = "KASI_DATA_DIR", default_value = "kasi-data")]
    pub(crate) data_dir: PathBuf,

    /// The store, if not the data directory's: `sqlite:DIR`, or a
    /// PostgreSQL URL (`postgres://USER[:PASSWORD]@HOST[:PORT][,HOST2...]/DB`,
    /// with `?target_session_attrs=read-write` to follow a promoted
    /// primary). Any number of kasi processes may serve one PostgreSQL
    /// store: one is active, the others are standbys that take over when
    /// its lease expires.
    #[arg(long, env = "KASI_STORE", value_name = "STORE")]
    pub(crate) store: Option<String>,

    /// With a PostgreSQL store: how long the active's lease lasts without
    /// renewal (it renews every third of it). A standby takes over this
    /// long after the active stops renewing, at the latest.
    #[arg(long, env = "KASI_LEASE_MS", default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(300..=600_000))]
    pub(crate) lease_ms: u64,

    /// With a PostgreSQL store: this process's name in the lease (shown to
    /// operators as the active hub). Default: the host's name and the
    /// process id. A process restarted under the same name takes its own
    /// lease back at once.
    #[arg(long, env = "KASI_INSTANCE_NAME")]
    pub(crate) instance_name: Option<String>,
}

/// The two addresses and what they accept.
#[derive(Args)]
#[command(next_help_heading = "Listening")]
pub(crate) struct ListenArgs {
    /// Address of the DFSP-facing FSPIOP API (Mojaloop ml-api-adapter's
    /// port): IP:PORT or HOST:PORT (a host name is resolved once, at start;
    /// port 0 picks a free one).
    #[arg(long, env = "KASI_API_LISTEN", default_value = "127.0.0.1:3000", value_parser = parse_listen)]
    pub(crate) api_listen: SocketAddr,

    /// Address of the operator-facing admin API (Mojaloop central-ledger's
    /// port), written like --api-listen. The operator console is served
    /// there too, at /console/.
    #[arg(long, env = "KASI_ADMIN_LISTEN", default_value = "127.0.0.1:3001", value_parser = parse_listen)]
    pub(crate) admin_listen: SocketAddr,

    /// Threads serving HTTP (both listeners and the callbacks). Default:
    /// one per CPU. The ledger pipeline has one or two threads besides
    /// (--pipeline-threads).
    #[arg(long, env = "KASI_HTTP_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) http_threads: Option<u16>,

    /// Open connections at most on each address; one more is answered 503
    /// (2003) and closed. Default: sized to the open-files limit (raised to
    /// its hard limit at start): a quarter of it (128 to 1,024) kept for
    /// the hub's own files and callback connections, the rest 3:1 between
    /// the FSPIOP and admin addresses, at most 10,000 each (at a limit of
    /// 1,024: 576 and 192). The start-up log says what was chosen.
    #[arg(long, env = "KASI_MAX_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_connections: Option<u32>,

    /// Open connections at most from one client address (an IPv6 client by
    /// its /64) on each address, so that one client cannot take every
    /// slot: one more is refused at once (503, 2003, closed), counted
    /// (`kasi_connections_refused_per_client`, refusal class
    /// `client_connections`) and warned about. Default: half of the
    /// address's cap. Behind a gateway every DFSP is the gateway's
    /// address: raise it to the cap.
    #[arg(long, env = "KASI_MAX_CONNECTIONS_PER_CLIENT", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_connections_per_client: Option<u32>,

    /// Milliseconds a client may take to send a request's head; a
    /// keep-alive connection idle for as long is closed too.
    #[arg(long, env = "KASI_HEADER_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) header_timeout_ms: u64,

    /// Milliseconds a request body may pause between bytes before the
    /// request is answered 400 (3101) and its connection closed: a body
    /// shorter than its Content-Length is found out this fast.
    #[arg(long, env = "KASI_BODY_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) body_timeout_ms: u64,
}

/// How the hub takes part in FSPIOP exchanges.
#[derive(Args)]
#[command(next_help_heading = "FSPIOP")]
pub(crate) struct FspiopArgs {
    /// Name of the hub participant: created with this name on first start,
    /// and the FSPIOP-Source of callbacks the hub originates.
    #[arg(long, env = "KASI_HUB_NAME", default_value = "Hub")]
    pub(crate) hub_name: String,

    /// Record quotes durably and apply the FSPIOP duplicate rules to them
    /// (the quoting service's persistent mode). By default quotes are only
    /// routed, as Mojaloop's SIMPLE_ROUTING_MODE does.
    #[arg(long, env = "KASI_QUOTES_PERSISTENT")]
    pub(crate) quotes_persistent: bool,

    /// Whether the payee of a committed transfer gets the hub's PUT
    /// confirmation (Mojaloop's SEND_TRANSFER_CONFIRMATION_TO_PAYEE), sent
    /// after the payer's callback; and the hub's error when its fulfilment
    /// aborted the transfer. A payee that asked with RESERVED
    /// gets its PATCH either way.
    #[arg(long, env = "KASI_PAYEE_COMMIT_CONFIRMATION", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub(crate) payee_commit_confirmation: bool,

    /// Seconds a routed request (a party lookup, a quote, a transaction
    /// request, an authorization, a bulk quote) waits for its answer. Only
    /// the DFSP that was asked may answer, only to the DFSP that asked,
    /// and only within this time; a later or anyone else's answer is
    /// refused (400, 3100) and not forwarded.
    #[arg(long, env = "KASI_ANSWER_WINDOW_S", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub(crate) answer_window_s: u64,

    /// Routed requests awaiting an answer at most (about 150 bytes each);
    /// one more is refused with 503 (2003) until answers or expiry make
    /// room.
    #[arg(long, env = "KASI_PENDING_ANSWERS_MAX", default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(16..=100_000_000))]
    pub(crate) pending_answers_max: u64,

    /// Trace one transfer in this many stage by stage, its prepare and its
    /// fulfil (chosen by transfer id), for `GET /stats/traces` on the admin
    /// address; 0 traces none. Per-stage totals (`/stats/stages`) are kept
    /// for every transfer either way.
    #[arg(long, env = "KASI_TRACE_SAMPLE_EVERY", default_value_t = 1000)]
    pub(crate) trace_sample_every: u64,
}

/// The ledger pipeline, and how long finished transfers stay in memory.
#[derive(Args)]
#[command(next_help_heading = "Ledger and retention")]
pub(crate) struct LedgerArgs {
    /// Threads carrying the ledger pipeline: 2 applies the next batch on
    /// the ledger thread while the store thread commits the last; 1 applies
    /// and commits on one thread, sparing the hand-off between them (a
    /// wake and a context switch per batch) at the price of the overlap.
    /// Default: 1 on machines of up to four cores, 2 above. Either way an
    /// answer waits for its batch's commit.
    #[arg(long, env = "KASI_PIPELINE_THREADS", value_parser = clap::value_parser!(u8).range(1..=2))]
    pub(crate) pipeline_threads: Option<u8>,

    /// How long a finished transfer stays in the ledger's memory (`90s`,
    /// `30m`, `24h`, `7d`, or `forever`). Older ones are answered from the
    /// store: GETs and duplicate resends alike.
    #[arg(long, env = "KASI_TRANSFER_RETENTION", default_value = "24h",
          value_parser = parse_retention, value_name = "DURATION")]
    pub(crate) transfer_retention: Retention,

    /// At most this many finished transfers stay in memory (~650 bytes
    /// each): beyond it the oldest leave before --transfer-retention, and
    /// are answered from the store like older ones.
    #[arg(long, env = "KASI_FINISHED_TRANSFERS_IN_MEMORY", default_value_t = 2_000_000,
          value_parser = clap::value_parser!(u64).range(1_000..), value_name = "COUNT")]
    pub(crate) finished_transfers_in_memory: u64,

    /// How often the history snapshot advances (`30s`, `5m`, ...): it sums
    /// the transfers that finished before the retention horizon, so that a
    /// restart reads only what came since. Unused with
    /// `--transfer-retention forever`.
    #[arg(long, env = "KASI_HISTORY_SNAPSHOT_INTERVAL", default_value = "30s",
          value_parser = parse_interval, value_name = "DURATION")]
    pub(crate) history_snapshot_interval: Duration,
}

/// The hub's outbound requests: where they may go, how long they are retried, their TLS.
#[derive(Args)]
#[command(next_help_heading = "Callbacks and oracles")]
pub(crate) struct CallbackArgs {
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
    pub(crate) callback_allow: Vec<hub::callback_url::Allowed>,

    /// Seconds a callback of a finished transfer (commit, abort, rejection,
    /// expiry) is retried on transport errors and 5xx answers before it is
    /// kept as a dead letter (`GET /callbacks/dead-letters` on the admin
    /// address). A prepare forwarded to the payee is retried until the
    /// transfer expires.
    #[arg(long, env = "KASI_CALLBACK_RETRY_FOR_S", default_value_t = 3_600, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) callback_retry_for_s: u64,

    /// Seconds to keep delivering queued callbacks after a stop signal.
    #[arg(long, env = "KASI_SHUTDOWN_GRACE_S", default_value_t = 5)]
    pub(crate) shutdown_grace_s: u64,

    /// Trust anchors (PEM bundle, e.g. the scheme CA) for the servers of
    /// `https://` callback endpoints and oracles. Without it, the system's
    /// roots.
    #[arg(long, env = "KASI_CALLBACK_CA", value_name = "FILE")]
    pub(crate) callback_ca: Option<PathBuf>,

    /// The certificate chain (PEM) the hub presents to DFSPs and oracles
    /// that require mutual TLS on their `https://` endpoints.
    #[arg(
        long,
        env = "KASI_CALLBACK_CERT",
        value_name = "FILE",
        requires = "callback_key"
    )]
    pub(crate) callback_cert: Option<PathBuf>,

    /// The private key of --callback-cert (PEM).
    #[arg(
        long,
        env = "KASI_CALLBACK_KEY",
        value_name = "FILE",
        requires = "callback_cert"
    )]
    pub(crate) callback_key: Option<PathBuf>,
}

/// TLS of both addresses, and how the FSPIOP address knows who calls.
#[derive(Args)]
#[command(next_help_heading = "TLS and caller identity")]
pub(crate) struct TlsArgs {
    /// Serve both addresses over TLS (1.2 and 1.3) with this certificate
    /// chain (PEM); re-read with its key on SIGHUP, without dropping
    /// connections.
    #[arg(long, env = "KASI_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "KASI_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,

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
    pub(crate) tls_client_ca: Option<PathBuf>,

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
    pub(crate) trusted_proxy: Vec<hub::tls::Cidr>,

    /// The header in which a trusted gateway names the client's FSP id
    /// (e.g. X-Client-Id); FSPIOP-Source must then be that id. A request
    /// carrying the header twice is refused (400, 3101).
    #[arg(
        long,
        env = "KASI_CLIENT_IDENTITY_HEADER",
        value_name = "NAME",
        requires = "trusted_proxy"
    )]
    pub(crate) client_identity_header: Option<String>,

    /// Refuse an FSPIOP request whose Date header is more than this many
    /// seconds from the hub's clock, ahead or behind (400, 3100): a
    /// captured request cannot be replayed later. Off by default, as in
    /// Mojaloop; DFSPs' clocks must then be kept in time (NTP).
    #[arg(long, env = "KASI_MAX_CLOCK_SKEW_S", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_clock_skew_s: Option<u64>,
}

/// FSPIOP-Signature: signing what the hub originates, checking what DFSPs send.
#[derive(Args)]
#[command(next_help_heading = "Signatures (JWS)")]
pub(crate) struct JwsArgs {
    /// Sign every callback the hub originates (FSPIOP-Source = the hub:
    /// its errors, the commit confirmation to the payee, PATCH, GET
    /// answers) with this PEM private key (PKCS#8, PKCS#1 or SEC1): RS256
    /// for an RSA key (at least 2048 bits), ES256 for a P-256 key. DFSPs
    /// verify with the public half, installed under the hub's name.
    /// Forwarded DFSP messages keep their own signature. Without it nothing
    /// is signed.
    #[arg(long, env = "KASI_JWS_SIGNING_KEY", value_name = "FILE")]
    pub(crate) jws_signing_key: Option<PathBuf>,

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
    pub(crate) jws_verify: Vec<String>,

    /// Also check PUT /parties (Mojaloop's JWS_VALIDATE_PUT_PARTIES); by
    /// default party answers are not checked even when `parties` is listed.
    #[arg(long, env = "KASI_JWS_VERIFY_PUT_PARTIES")]
    pub(crate) jws_verify_put_parties: bool,

    /// Check signatures only on requests from these FSPs (comma-separated),
    /// to turn verification on one DFSP at a time; by default every
    /// FSPIOP-Source is checked (and one without a key is refused).
    #[arg(
        long,
        env = "KASI_JWS_VERIFY_PARTICIPANTS",
        value_delimiter = ',',
        value_name = "FSP"
    )]
    pub(crate) jws_verify_participants: Vec<String>,

    /// Directory of the DFSPs' JWS public keys, one `<fspId>.pem` each (a
    /// public key or a certificate); created if missing, re-read within a
    /// second of any change, and written by the admin API's
    /// `PUT`/`DELETE /participants/{name}/jwsKey`.
    #[arg(long, env = "KASI_JWS_KEYS_DIR", value_name = "DIR")]
    pub(crate) jws_keys_dir: Option<PathBuf>,
}

/// Who may use the admin address.
#[derive(Args)]
#[command(next_help_heading = "Admin API and console")]
pub(crate) struct AdminArgs {
    /// Credentials of the admin API: one `name role credential` per line,
    /// role `operator` (everything) or `viewer` (GET/HEAD only), credential
    /// the sha256 hex of a bearer token (`kasi admin-token` makes one) or
    /// `cert:sha256:<hex>` of a client certificate (--admin-client-ca). With
    /// this file every admin request but /health needs a credential (401
    /// without, 403 for a viewer's write). Without it the admin API is
    /// open, which is allowed only on a loopback --admin-listen.
    #[arg(long, env = "KASI_ADMIN_TOKENS", value_name = "FILE")]
    pub(crate) admin_tokens: Option<PathBuf>,

    /// Serve a non-loopback --admin-listen without --admin-tokens (every
    /// caller is an operator). For a network that authenticates by other
    /// means; logged as a warning at start.
    #[arg(long, env = "KASI_ADMIN_INSECURE")]
    pub(crate) admin_insecure: bool,

    /// Ask admin clients for a certificate this CA signed (optional for
    /// the client: bearer tokens still work); its fingerprint is looked up
    /// in the `cert:` lines of --admin-tokens.
    #[arg(
        long,
        env = "KASI_ADMIN_CLIENT_CA",
        value_name = "FILE",
        requires_all = ["tls_cert", "admin_tokens"]
    )]
    pub(crate) admin_client_ca: Option<PathBuf>,
}

/// Scheduled window closes and the position alarm.
#[derive(Args)]
#[command(next_help_heading = "Settlement windows and positions")]
pub(crate) struct WatchArgs {
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
    pub(crate) settlement_close_at: Vec<hub::watch::CloseAt>,

    /// Flag a DFSP whose position (reservations included) reaches this
    /// percentage of its net debit cap: a warning in the log and
    /// `kasi_position_alarm` = 1 on `/metrics` (Mojaloop's alarm
    /// percentage). 0 turns the watch off.
    #[arg(long, env = "KASI_POSITION_ALARM_PERCENT", default_value_t = 90)]
    pub(crate) position_alarm_percent: u8,

    /// How often positions are checked against the alarm share, in ms.
    #[arg(long, env = "KASI_POSITION_WATCH_INTERVAL_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(10..))]
    pub(crate) position_watch_interval_ms: u64,
}

/// `--transfer-retention`: milliseconds, or `None` for ever.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retention(pub(crate) Option<i64>);

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
