//! `kasi sim`: a few simulated DFSPs for people to watch (not for load).
//!
//! One HTTP server plays every DFSP named in `--dfsps` (and the FXP of
//! `--fxp`): their callbacks are `http://{listen}/{dfsp}/...`. As a payee a
//! DFSP answers lookups of its parties (saying the currency it takes),
//! quotes (no fees) and prepares (after `--delay-ms`, committed with the
//! fulfilment, or refused at `--reject-percent`); as a payer it makes a
//! whole discovery + quote + transfer when asked on the control endpoint
//! `POST /_sim/send`, which `kasi sim send` calls — with an FXP's
//! conversion first when the payee takes another currency. The FXP
//! converts at `--fx-rate` ([`fx`]). Every message seen or sent is printed
//! as one line. The wire shapes, the onboarding and the ILP condition are
//! `kasi bench`'s ([`bench::dfsp`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use clap::{Args, Subcommand};
use http::{HeaderMap, Method, StatusCode, Uri};
use http_body_util::Full;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use bench::dfsp::{
    self, describe_error_body, error_body, error_of, fspiop_request, fulfil_body,
    participants_batch_body, party_put_body_named, quote_post_body, quote_put_body, send, Api,
    HttpClient, CONDITION,
};

/// How long a payer waits for each callback of a send.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// A prepare's (and a conversion's) expiration, from its sending.
const TRANSFER_EXPIRY_MS: i64 = 60_000;

mod fx;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SimCli {
    #[command(subcommand)]
    command: Option<SimCommand>,

    #[command(flatten)]
    run: SimArgs,
}

#[derive(Subcommand)]
enum SimCommand {
    /// Make one payment happen through a running `kasi sim`, step by step.
    ///
    /// Asks the sim at --sim (its control endpoint `POST /_sim/send`) to
    /// have DFSP --from pay --to: a lookup (`GET /parties/{Type}/{ID}`,
    /// answered by whichever DFSP holds the party), a quote (`POST /quotes`
    /// to that DFSP) and the transfer (`POST /transfers`), each callback
    /// awaited.
    ///
    /// Across currencies (FSPIOP v2.0 payer conversion) when the payee is
    /// paid in another currency than --amount's: the one given with
    /// --to-currency, else the payee's when its lookup answer names the
    /// currencies it takes (`supportedCurrencies`, as the sim's DFSPs do)
    /// and the amount's is not one of them. After the lookup the payer
    /// asks the hub which FXPs convert (`GET /services/FXP/{SOURCE}/{TARGET}`),
    /// asks the first for terms (`POST /fxQuotes`: the FXP fills in the
    /// target amount), quotes the payee in the target currency, has the
    /// FXP convert (`POST /fxTransfers`, its `determiningTransferId` the
    /// transfer's id: the payer's source currency is held), then
    /// transfers the target amount (`POST /transfers` in the target
    /// currency: the FXP's target currency is held). The payee's commit
    /// commits both; the hub tells the FXP with `PATCH /fxTransfers/{ID}`.
    ///
    /// Prints every step; exits 0 when the transfer is COMMITTED, 1 with
    /// the FSPIOP error code and description otherwise, 2 when the sim
    /// cannot be reached. The sim prints the same messages as they happen.
    Send(SendArgs),
}

#[derive(Args)]
pub struct SimArgs {
    /// The hub's FSPIOP API, where the DFSPs send their requests.
    #[arg(
        long,
        env = "KASI_SIM_HUB_API",
        default_value = "http://127.0.0.1:3000"
    )]
    hub_api: String,

    /// The hub's admin API (used with --onboard).
    #[arg(
        long,
        env = "KASI_SIM_HUB_ADMIN",
        default_value = "http://127.0.0.1:3001"
    )]
    hub_admin: String,

    /// A file holding an operator's admin bearer token, for a hub that
    /// requires one (`serve --admin-tokens`): the token alone, or what
    /// `kasi admin-token` prints. Sent as `Authorization: Bearer` with the
    /// --onboard requests.
    #[arg(long, env = "KASI_ADMIN_TOKEN_FILE", value_name = "PATH")]
    admin_token_file: Option<std::path::PathBuf>,

    /// The hub participant's name (its accounts are created with --onboard).
    #[arg(long, default_value = "Hub")]
    hub_name: String,

    /// The DFSPs to play, comma-separated, each in --currency or in the
    /// currency named after it: `payerfsp,payeefsp`, or
    /// `payerfsp,payeefsp:TZS` for a payee paid in TZS (pay it from a USD
    /// DFSP through --fxp).
    #[arg(
        long,
        value_delimiter = ',',
        required = true,
        value_name = "NAME[:CURRENCY],..."
    )]
    dfsps: Vec<String>,

    /// Onboard the DFSPs first through --hub-admin: the hub's accounts in
    /// each currency played and, unless a settlement model already settles
    /// it (one for the currency, or a default one without a currency, such
    /// as examples/onboard.sh's DEFERREDNET, which is kept), a deferred net
    /// model DEFERREDNET<currency>; then each DFSP in its currency
    /// (participant, net debit cap, funds in, callback endpoints pointing
    /// here — the FX ones too, so that any DFSP may pay across currencies)
    /// and its parties; then --fxp. A DFSP that exists already is reported
    /// and its endpoints re-pointed here. Without --onboard the hub is not
    /// changed: the DFSPs' endpoints must already point at --listen.
    #[arg(long)]
    onboard: bool,

    /// Where the DFSPs' callbacks are served (`127.0.0.1:0`: any free port).
    #[arg(long, default_value = "127.0.0.1:4000")]
    listen: SocketAddr,

    /// The payee waits this long before answering a prepare.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    delay_ms: u64,

    /// The share of prepares the payee refuses instead of committing them,
    /// 0 to 100: with FSPIOP error 5104 "Payee rejected transaction" (the
    /// payee declined; 5101 and 5103 are the quote rejections, 5105 the
    /// payee FSP's own refusal, which the sim answers to a condition it
    /// did not quote).
    #[arg(long, default_value_t = 0, value_name = "PERCENT",
          value_parser = clap::value_parser!(u8).range(0..=100))]
    reject_percent: u8,

    /// The currency of the DFSPs named without one in --dfsps: of their
    /// accounts (with --onboard) and parties.
    #[arg(long, default_value = "USD")]
    currency: String,

    /// Also play a foreign-exchange provider called NAME, converting at
    /// each --fx-rate. It answers FX quotes (`POST /fxQuotes`: both
    /// amounts at its rate, no charges, a condition of its own) and
    /// accepts conversions of what it quoted (`POST /fxTransfers`:
    /// RESERVED with the fulfilment), and prints the hub's `PATCH
    /// /fxTransfers/{ID}` when the transfer a conversion depends on ends.
    /// It holds no parties. With --onboard: its accounts in every currency
    /// of its rates (net debit cap and funds in of each), its callback
    /// endpoints, and its corridors declared to the hub (`PUT
    /// /participants/NAME/fxCorridors`), so that `GET /services/FXP/...`
    /// offers it.
    #[arg(long, value_name = "NAME", requires = "fx_rates")]
    fxp: Option<String>,

    /// A corridor of --fxp and its rate: one SOURCE unit buys RATE TARGET
    /// units, in that direction only (repeat the flag for the way back,
    /// e.g. `--fx-rate USD:TZS=2500 --fx-rate TZS:USD=0.0004`). Amounts
    /// convert exactly, rounded in the FXP's favour at 4 decimals.
    #[arg(long = "fx-rate", value_name = "SOURCE:TARGET=RATE", requires = "fxp",
          value_parser = clap::builder::ValueParser::new(|text: &str| text.parse::<fx::FxRate>()))]
    fx_rates: Vec<fx::FxRate>,

    /// How many MSISDNs each DFSP holds (printed at the start).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    parties: u32,
}

#[derive(Args)]
struct SendArgs {
    /// The running `kasi sim` (its --listen address).
    #[arg(long, env = "KASI_SIM", default_value = "http://127.0.0.1:4000")]
    sim: String,

    /// The paying DFSP: one of the sim's --dfsps.
    #[arg(long)]
    from: String,

    /// The party paid, as TYPE:ID, e.g. `MSISDN:9123456001` (the sim prints
    /// its parties' MSISDNs when it starts).
    #[arg(long, value_name = "TYPE:ID")]
    to: String,

    /// The amount the payer sends and, optionally, its currency (else the
    /// payer's): `--amount 10 USD`.
    #[arg(long, num_args = 1..=2, required = true, value_names = ["AMOUNT", "CURRENCY"])]
    amount: Vec<String>,

    /// Pay the payee in this currency, converting --amount through an FXP
    /// when it differs. Without it the payee's lookup answer decides.
    #[arg(long, value_name = "CURRENCY")]
    to_currency: Option<String>,
}

/// What `kasi sim send` asks the sim for.
#[derive(Serialize, Deserialize)]
struct SendRequest {
    from: String,
    party_type: String,
    party_id: String,
    amount: String,
    currency: Option<String>,
    #[serde(default)]
    to_currency: Option<String>,
}

pub fn run(cli: SimCli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    match cli.command {
        Some(SimCommand::Send(args)) => runtime.block_on(send_through_sim(args)),
        None => runtime.block_on(serve(cli.run)),
    }
}

// ------------------------------------------------------------------ output

/// `HH:MM:SS.mmm` (UTC) now.
fn clock() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let day_ms = ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000
    )
}

/// The fields of an FSPIOP body a person wants to see.
fn summary(body: &[u8]) -> String {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let Some(error) = value.get("errorInformation") {
        parts.push(format!(
            "error {} {}",
            error["errorCode"].as_str().unwrap_or("?"),
            error["errorDescription"].as_str().unwrap_or("")
        ));
    }
    for key in ["amount", "transferAmount"] {
        if let Some(amount) = value.get(key) {
            if let (Some(a), Some(c)) = (amount["amount"].as_str(), amount["currency"].as_str()) {
                parts.push(format!("{key} {a} {c}"));
            }
        }
    }
    // An FX quote's terms, or a conversion's own amounts.
    let terms = value.get("conversionTerms").unwrap_or(&value);
    if let (Some(source), Some(target)) = (
        terms["sourceAmount"]["currency"].as_str(),
        terms["targetAmount"]["currency"].as_str(),
    ) {
        let amount = |side: &str| terms[side]["amount"].as_str().unwrap_or("?").to_string();
        parts.push(format!(
            "convert {} {source} to {} {target}",
            amount("sourceAmount"),
            amount("targetAmount")
        ));
    }
    for key in ["transferState", "conversionState"] {
        if let Some(state) = value[key].as_str() {
            parts.push(format!("state {state}"));
        }
    }
    if let Some(providers) = value["providers"].as_array() {
        let names: Vec<&str> = providers.iter().filter_map(Value::as_str).collect();
        parts.push(format!("FXPs [{}]", names.join(", ")));
    }
    if let Some(fsp) = value["party"]["partyIdInfo"]["fspId"].as_str() {
        parts.push(format!("held by {fsp}"));
    }
    if let (Some(payer), Some(payee)) = (value["payerFsp"].as_str(), value["payeeFsp"].as_str()) {
        parts.push(format!("{payer} -> {payee}"));
    }
    if let (Some(payer), Some(fxp)) = (
        terms["initiatingFsp"].as_str(),
        terms["counterPartyFsp"].as_str(),
    ) {
        parts.push(format!("{payer} with FXP {fxp}"));
    }
    if let Some(list) = value["partyList"].as_array() {
        parts.push(format!("{} parties", list.len()));
    }
    parts.join(", ")
}

/// One line on stdout: a message `dfsp` received (`<-`) or sent (`->`).
fn print_message(dfsp: &str, arrow: &str, method: &Method, path: &str, body: &[u8]) {
    let summary = summary(body);
    let sep = if summary.is_empty() { "" } else { "  " };
    println!("{} {dfsp} {arrow} {method} {path}{sep}{summary}", clock());
}

// ------------------------------------------------------------------ the sim

/// The answer a payer waits for: the callback's body, or its FSPIOP error.
type Answer = Result<Value, (String, String)>;

struct Sim {
    client: HttpClient,
    api: String,
    /// Every DFSP played, the FXP included.
    names: Vec<String>,
    /// DFSP → the currency it pays and is paid in (the FXP: its first
    /// rate's source).
    currencies: HashMap<String, String>,
    /// MSISDN → the DFSP holding it.
    parties: HashMap<String, String>,
    fxp: Option<fx::Fxp>,
    delay: Duration,
    reject_percent: u8,
    rng: AtomicU64,
    /// Callbacks awaited, by `kind:id`.
    waiters: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
}

/// FNV-1a, for the MSISDNs of a DFSP (the same on every run).
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The `index`-th MSISDN of `dfsp`: `9`, six digits of its name's hash,
/// three of the index. The same on every run, so a sim started without
/// --onboard knows the parties an earlier one registered.
fn party_msisdn(dfsp: &str, index: u32) -> String {
    format!("9{:06}{:03}", fnv(dfsp) % 1_000_000, index)
}

/// A random UUID (version 4 layout) from `rng`.
fn new_uuid(rng: &AtomicU64) -> String {
    let next = || {
        let state = rng.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        let mut z = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let (high, low) = (next(), next());
    let high = (high & !0xf000) | 0x4000;
    let low = (low & !(0xc << 60)) | (0x8 << 60);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        high >> 32,
        (high >> 16) & 0xffff,
        high & 0xffff,
        low >> 48,
        low & 0xffff_ffff_ffff
    )
}

fn seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(40)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Sim {
    fn uuid(&self) -> String {
        new_uuid(&self.rng)
    }

    /// Whether this prepare is one of the `--reject-percent` refused.
    fn rejects(&self) -> bool {
        let draw = fnv(&self.uuid()) % 100;
        draw < u64::from(self.reject_percent)
    }

    fn wait_for(&self, key: String) -> oneshot::Receiver<Answer> {
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().expect("not poisoned").insert(key, tx);
        rx
    }

    fn forget(&self, key: &str) {
        self.waiters.lock().expect("not poisoned").remove(key);
    }

    /// Hands a callback to whoever waits for it; whether anyone did.
    fn deliver(&self, key: &str, answer: Answer) -> bool {
        let waiter = self.waiters.lock().expect("not poisoned").remove(key);
        waiter.is_some_and(|waiter| waiter.send(answer).is_ok())
    }

    /// Sends an FSPIOP request or callback to the hub as `source`, printing
    /// it; `Err` (a description) unless the hub accepted it.
    async fn to_hub(
        &self,
        method: Method,
        path: &str,
        api: Api,
        source: &str,
        destination: Option<&str>,
        body: String,
    ) -> Result<(), String> {
        print_message(source, "->", &method, path, body.as_bytes());
        let url = format!("{}{path}", self.api);
        let request = fspiop_request(method.clone(), &url, api, source, destination, body)?;
        match tokio::time::timeout(STEP_TIMEOUT, send(&self.client, request)).await {
            Err(_) => Err(format!(
                "{method} {url}: no answer from the hub within 30 s"
            )),
            Ok(Err((_, description))) => Err(format!(
                "{method} {url}: {description} (is the hub running? --hub-api)"
            )),
            Ok(Ok((status, _))) if status.is_success() => Ok(()),
            Ok(Ok((status, body))) => Err(format!(
                "{method} {path}: the hub answered {} {}",
                status.as_u16(),
                describe_error_body(&body)
            )),
        }
    }
}

/// `--dfsps`' DFSPs and their currencies, each once, in order.
fn played_dfsps(args: &SimArgs) -> anyhow::Result<Vec<(String, String)>> {
    let known = |currency: &str, what: &str| {
        if ledger::Currency::parse(currency).is_none() {
            bail!("{what}: {currency} is not an ISO 4217 currency FSPIOP knows");
        }
        Ok(())
    };
    known(&args.currency, "--currency")?;
    let mut dfsps: Vec<(String, String)> = Vec::new();
    for entry in &args.dfsps {
        let (name, currency) = entry
            .split_once(':')
            .unwrap_or((entry.as_str(), args.currency.as_str()));
        if name.is_empty() {
            bail!("--dfsps: name at least one DFSP, e.g. --dfsps payerfsp,payeefsp");
        }
        known(currency, &format!("--dfsps {entry}"))?;
        match dfsps.iter().find(|(known, _)| known == name) {
            Some((_, first)) if first != currency => bail!(
                "--dfsps: {name} is named in {first} and in {currency}; a simulated DFSP pays and is paid in one currency"
            ),
            Some(_) => {}
            None => dfsps.push((name.to_string(), currency.to_string())),
        }
    }
    if dfsps.is_empty() {
        bail!("--dfsps: name at least one DFSP, e.g. --dfsps payerfsp,payeefsp");
    }
    if let Some(fxp) = &args.fxp {
        if dfsps.iter().any(|(name, _)| name == fxp) {
            bail!(
                "--fxp {fxp}: also named in --dfsps; the FXP is played apart (it holds no parties)"
            );
        }
    }
    Ok(dfsps)
}

async fn serve(args: SimArgs) -> anyhow::Result<ExitCode> {
    let dfsps = played_dfsps(&args)?;
    let mut names: Vec<String> = dfsps.iter().map(|(name, _)| name.clone()).collect();
    let mut currencies: HashMap<String, String> = dfsps.iter().cloned().collect();
    let fxp = args.fxp.as_ref().map(|name| {
        names.push(name.clone());
        let source = args.fx_rates[0].source.to_string();
        currencies.insert(name.clone(), source);
        fx::Fxp::new(name.clone(), args.fx_rates.clone(), seed())
    });
    let api = args.hub_api.trim_end_matches('/').to_string();
    let admin = args.hub_admin.trim_end_matches('/').to_string();
    if let Some(path) = &args.admin_token_file {
        dfsp::present_admin_token(&admin, dfsp::read_admin_token_file(path)?);
    }
    let mut parties = HashMap::new();
    for (name, _) in &dfsps {
        for index in 1..=args.parties {
            parties.insert(party_msisdn(name, index), name.clone());
        }
    }
    let sim = Arc::new(Sim {
        client: dfsp::plain_client(),
        api: api.clone(),
        names: names.clone(),
        currencies,
        parties,
        fxp,
        delay: Duration::from_millis(args.delay_ms),
        reject_percent: args.reject_percent,
        rng: AtomicU64::new(seed()),
        waiters: Mutex::new(HashMap::new()),
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("--listen {}: cannot listen there", args.listen))?;
    let local = listener.local_addr().context("the listening address")?;
    let app = Router::new()
        .route("/_sim/send", post(on_send))
        .fallback(on_message)
        .with_state(sim.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    println!(
        "kasi sim: listening on {local}: callbacks of {} at http://{local}/{{dfsp}}/..., hub API {api}",
        names.join(", ")
    );

    if args.onboard {
        onboard(&sim, &args, &dfsps, &admin, local).await?;
    }
    for (name, currency) in &dfsps {
        let list: Vec<String> = (1..=args.parties)
            .map(|index| party_msisdn(name, index))
            .collect();
        println!(
            "{name} holds MSISDN {} (paid in {currency})",
            list.join(", ")
        );
    }
    if let Some(fxp) = &sim.fxp {
        let rates: Vec<String> = fxp
            .rates
            .iter()
            .map(|rate| format!("{} to {} at {}", rate.source, rate.target, rate.rate()))
            .collect();
        println!("{} converts {}", fxp.name, rates.join(", "));
    }
    let (payer, currency) = &dfsps[0];
    let example_to = party_msisdn(&dfsps[dfsps.len() - 1].0, 1);
    println!(
        "ready: try `kasi sim send --sim http://{local} --from {payer} --to MSISDN:{example_to} --amount 10 {currency}` (Ctrl-C to stop)"
    );
    tokio::select! {
        served = server => {
            served.context("the server stopped")?.context("serving")?;
        }
        _ = tokio::signal::ctrl_c() => println!("{} kasi sim: stopped", clock()),
    }
    Ok(ExitCode::SUCCESS)
}

async fn onboard(
    sim: &Sim,
    args: &SimArgs,
    dfsps: &[(String, String)],
    admin: &str,
    local: SocketAddr,
) -> anyhow::Result<()> {
    // The hub's accounts, and a model that settles them, in every currency
    // played.
    let mut currencies: Vec<String> = dfsps.iter().map(|(_, currency)| currency.clone()).collect();
    if let Some(fxp) = &sim.fxp {
        currencies.extend(fxp.currencies().iter().map(|currency| currency.to_string()));
    }
    let mut onboarded_hub = Vec::new();
    for currency in currencies {
        if onboarded_hub.contains(&currency) {
            continue;
        }
        dfsp::onboard_hub(&sim.client, admin, &args.hub_name, &currency)
            .await
            .with_context(|| format!("onboarding through --hub-admin {admin}"))?;
        onboarded_hub.push(currency);
    }
    for (name, currency) in dfsps {
        if onboard_dfsp(sim, admin, local, name, currency, true).await? {
            println!(
                "{} {name}: onboarded (net debit cap and funds in of {currency})",
                clock()
            );
        } else {
            println!(
                "{} {name}: exists in the hub already: its endpoints now point here",
                clock()
            );
        }
        register_parties(sim, name, currency, args.parties).await?;
    }
    if let Some(fxp) = &sim.fxp {
        let name = &fxp.name;
        for currency in fxp.currencies() {
            let currency = currency.to_string();
            if onboard_dfsp(sim, admin, local, name, &currency, false).await? {
                println!(
                    "{} {name}: onboarded as an FXP in {currency} (net debit cap and funds in)",
                    clock()
                );
            } else {
                println!(
                    "{} {name}: exists in the hub already in {currency}: its endpoints now point here",
                    clock()
                );
            }
        }
        dfsp::admin_call(
            &sim.client,
            Method::PUT,
            &format!("{admin}/participants/{name}/fxCorridors"),
            Some(fxp.corridors_body()),
            false,
        )
        .await
        .with_context(|| format!("declaring {name}'s corridors"))?;
        let corridors: Vec<String> = fxp
            .rates
            .iter()
            .map(|rate| format!("{} to {}", rate.source, rate.target))
            .collect();
        println!(
            "{} {name}: its corridors declared (PUT /participants/{name}/fxCorridors): {}",
            clock(),
            corridors.join(", ")
        );
    }
    Ok(())
}

/// Onboards `name` in `currency` (a DFSP that exists is re-pointed here),
/// with its transfer, FX and, for a DFSP that `discovers`, discovery
/// callbacks: every DFSP may pay across currencies. Whether it was new in
/// that currency.
async fn onboard_dfsp(
    sim: &Sim,
    admin: &str,
    local: SocketAddr,
    name: &str,
    currency: &str,
    discovers: bool,
) -> anyhow::Result<bool> {
    let funds_id = sim.uuid();
    let callback_root = format!("http://{local}");
    let new = dfsp::onboard_dfsp(
        &sim.client,
        &dfsp::Onboarding {
            admin,
            name,
            currency,
            callback_root: &callback_root,
            discovers,
            funds_id: &funds_id,
            existing_ok: true,
        },
    )
    .await
    .with_context(|| format!("onboarding {name} in {currency}"))?;
    for (kind, path) in fspiop::FX_CALLBACKS {
        dfsp::admin_call(
            &sim.client,
            Method::POST,
            &format!("{admin}/participants/{name}/endpoints"),
            Some(json!({ "type": kind, "value": format!("http://{local}/{name}{path}") })),
            false,
        )
        .await
        .with_context(|| format!("registering {name}'s FX endpoints"))?;
    }
    Ok(new)
}

/// `name` registers its MSISDNs in `currency` with one batch
/// `POST /participants` and waits for `PUT /participants/{requestId}`.
async fn register_parties(
    sim: &Sim,
    name: &str,
    currency: &str,
    parties: u32,
) -> anyhow::Result<()> {
    let identifiers: Vec<String> = (1..=parties)
        .map(|index| party_msisdn(name, index))
        .collect();
    let request_id = sim.uuid();
    let key = format!("participants:{request_id}");
    let answer = sim.wait_for(key.clone());
    let body = participants_batch_body(&request_id, name, &identifiers, currency);
    if let Err(error) = sim
        .to_hub(
            Method::POST,
            "/participants",
            Api::Participants,
            name,
            None,
            body,
        )
        .await
    {
        sim.forget(&key);
        bail!("registering {name}'s parties: {error}");
    }
    match tokio::time::timeout(STEP_TIMEOUT, answer).await {
        Ok(Ok(Ok(body))) => {
            if let Some(problem) =
                dfsp::batch_answer_problem(body.to_string().as_bytes(), identifiers.len())
            {
                println!(
                    "{} {name}: note: registering its parties: {problem}",
                    clock()
                );
            }
            Ok(())
        }
        Ok(Ok(Err((code, description)))) => {
            bail!("registering {name}'s parties: error {code} {description}")
        }
        Ok(Err(_)) => bail!("registering {name}'s parties: the answer was lost"),
        Err(_) => {
            sim.forget(&key);
            bail!("{name} got no PUT /participants/{request_id} within 30 s of registering its parties")
        }
    }
}

// -------------------------------------------------------- messages received

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// Every FSPIOP message the hub sends to the sim's DFSPs.
async fn on_message(
    State(sim): State<Arc<Sim>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let path = uri.path();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let Some((dfsp, rest)) = segments.split_first() else {
        return StatusCode::NOT_FOUND;
    };
    let Some(dfsp) = sim.names.iter().find(|name| name == dfsp).cloned() else {
        println!(
            "{} (not one of this sim's DFSPs) <- {method} {path}",
            clock()
        );
        return StatusCode::NOT_FOUND;
    };
    let resource = format!("/{}", rest.join("/"));
    print_message(&dfsp, "<-", &method, &resource, &body);
    let source = header(&headers, "fspiop-source")
        .unwrap_or_default()
        .to_string();
    let answer = || -> Answer {
        match serde_json::from_slice::<Value>(&body) {
            Ok(value) => Ok(value),
            Err(error) => Err(("unreadable".into(), error.to_string())),
        }
    };
    let failure = || -> Answer { Err(error_of(&body)) };
    match (&method, rest) {
        (&Method::GET, ["parties", kind, id]) => {
            let (kind, id) = (kind.to_string(), id.to_string());
            tokio::spawn(async move { answer_party(&sim, &dfsp, &source, &kind, &id).await });
            StatusCode::ACCEPTED
        }
        (&Method::PUT, ["parties", kind, id]) => {
            sim.deliver(&format!("party:{dfsp}:{kind}/{id}"), answer());
            StatusCode::OK
        }
        (&Method::PUT, ["parties", kind, id, "error"]) => {
            sim.deliver(&format!("party:{dfsp}:{kind}/{id}"), failure());
            StatusCode::OK
        }
        (&Method::PUT, ["participants", id]) => {
            sim.deliver(&format!("participants:{id}"), answer());
            StatusCode::OK
        }
        (&Method::PUT, ["participants", id, "error"]) => {
            sim.deliver(&format!("participants:{id}"), failure());
            StatusCode::OK
        }
        (&Method::POST, ["quotes"]) => {
            tokio::spawn(async move { answer_quote(&sim, &dfsp, &source, &body).await });
            StatusCode::ACCEPTED
        }
        (&Method::PUT, ["quotes", id]) => {
            sim.deliver(&format!("quote:{dfsp}:{id}"), answer());
            StatusCode::OK
        }
        (&Method::PUT, ["quotes", id, "error"]) => {
            sim.deliver(&format!("quote:{dfsp}:{id}"), failure());
            StatusCode::OK
        }
        (&Method::POST, ["transfers"]) => {
            tokio::spawn(async move { answer_prepare(&sim, &dfsp, &source, &body).await });
            StatusCode::ACCEPTED
        }
        (&Method::PUT, ["transfers", id]) => {
            sim.deliver(&format!("transfer:{dfsp}:{id}"), answer());
            StatusCode::OK
        }
        (&Method::PUT, ["transfers", id, "error"]) => {
            sim.deliver(&format!("transfer:{dfsp}:{id}"), failure());
            StatusCode::OK
        }
        (&Method::PUT, ["services", "FXP", source, target]) => {
            sim.deliver(&format!("services:{dfsp}:{source}/{target}"), answer());
            StatusCode::OK
        }
        (&Method::PUT, ["services", "FXP", source, target, "error"]) => {
            sim.deliver(&format!("services:{dfsp}:{source}/{target}"), failure());
            StatusCode::OK
        }
        (&Method::POST, [kind @ ("fxQuotes" | "fxTransfers")]) => {
            let path = format!("/{kind}");
            tokio::spawn(async move {
                match &sim.fxp {
                    Some(fxp) if fxp.name == dfsp && path == "/fxQuotes" => {
                        fx::answer_fx_quote(&sim, fxp, &source, &body).await
                    }
                    Some(fxp) if fxp.name == dfsp => {
                        fx::answer_conversion(&sim, fxp, &source, &body).await
                    }
                    _ => fx::refuse_as_no_fxp(&sim, &dfsp, &source, &path, &body).await,
                }
            });
            StatusCode::ACCEPTED
        }
        (&Method::PUT, ["fxQuotes", id]) => {
            sim.deliver(&format!("fxquote:{dfsp}:{id}"), answer());
            StatusCode::OK
        }
        (&Method::PUT, ["fxQuotes", id, "error"]) => {
            sim.deliver(&format!("fxquote:{dfsp}:{id}"), failure());
            StatusCode::OK
        }
        (&Method::PUT, ["fxTransfers", id]) => {
            sim.deliver(&format!("conversion:{dfsp}:{id}"), answer());
            StatusCode::OK
        }
        (&Method::PUT, ["fxTransfers", id, "error"]) => {
            sim.deliver(&format!("conversion:{dfsp}:{id}"), failure());
            StatusCode::OK
        }
        // Notifications (PATCH /transfers/{ID}, and to the FXP PATCH
        // /fxTransfers/{ID}) and anything else: seen, printed, acknowledged.
        _ => StatusCode::OK,
    }
}

/// The payee's answer to `GET /parties/{Type}/{ID}`.
async fn answer_party(sim: &Sim, dfsp: &str, source: &str, kind: &str, id: &str) {
    let path = format!("/parties/{kind}/{id}");
    let held = kind == "MSISDN" && sim.parties.get(id).is_some_and(|holder| holder == dfsp);
    let sent = if held {
        // With the currency it is paid in: FSPIOP v2.0's
        // `supportedCurrencies`, which tells a payer to convert (unknown
        // to v1.x, whose parsers ignore it; the hub passes it on).
        let mut party: Value = serde_json::from_str(&party_put_body_named(
            id,
            dfsp,
            &format!("Sim party {id} of {dfsp}"),
        ))
        .expect("a JSON body");
        if let Some(currency) = sim.currencies.get(dfsp) {
            party["party"]["supportedCurrencies"] = json!([currency]);
        }
        sim.to_hub(
            Method::PUT,
            &path,
            Api::Parties,
            dfsp,
            Some(source),
            party.to_string(),
        )
        .await
    } else {
        sim.to_hub(
            Method::PUT,
            &format!("{path}/error"),
            Api::Parties,
            dfsp,
            Some(source),
            error_body("3204", "Party not found"),
        )
        .await
    };
    if let Err(error) = sent {
        println!("{} {dfsp}: {error}", clock());
    }
}

/// The payee's answer to `POST /quotes`: no fees, the condition every
/// simulated transfer uses.
async fn answer_quote(sim: &Sim, dfsp: &str, source: &str, body: &[u8]) {
    let quote: Value = serde_json::from_slice(body).unwrap_or_default();
    let id = quote["quoteId"].as_str().unwrap_or_default();
    let (amount, currency) = (
        quote["amount"]["amount"].as_str().unwrap_or_default(),
        quote["amount"]["currency"].as_str().unwrap_or_default(),
    );
    let sent = sim
        .to_hub(
            Method::PUT,
            &format!("/quotes/{id}"),
            Api::Quotes,
            dfsp,
            Some(source),
            quote_put_body(amount, currency, now_ms() + TRANSFER_EXPIRY_MS),
        )
        .await;
    if let Err(error) = sent {
        println!("{} {dfsp}: {error}", clock());
    }
}

/// The payee's answer to `POST /transfers`: after --delay-ms, committed
/// with the fulfilment, or refused at --reject-percent.
async fn answer_prepare(sim: &Sim, dfsp: &str, source: &str, body: &[u8]) {
    let prepare: Value = serde_json::from_slice(body).unwrap_or_default();
    let id = prepare["transferId"].as_str().unwrap_or_default();
    if !sim.delay.is_zero() {
        tokio::time::sleep(sim.delay).await;
    }
    let (path, body) = if prepare["condition"].as_str() != Some(CONDITION) {
        (
            format!("/transfers/{id}/error"),
            error_body(
                "5105",
                "Payee FSP rejected transaction: not a condition this simulated DFSP quoted",
            ),
        )
    } else if sim.rejects() {
        (
            format!("/transfers/{id}/error"),
            error_body(
                "5104",
                "Payee rejected transaction (simulated: --reject-percent)",
            ),
        )
    } else {
        (format!("/transfers/{id}"), fulfil_body(now_ms()))
    };
    if let Err(error) = sim
        .to_hub(Method::PUT, &path, Api::Transfers, dfsp, Some(source), body)
        .await
    {
        println!("{} {dfsp}: {error}", clock());
    }
}

// ------------------------------------------------------------------ sending

/// `POST /_sim/send`: the payer's whole discovery, quote and transfer.
/// Answers the steps as text lines, 200 when committed, 422 otherwise.
async fn on_send(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let request: SendRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("error: not a send request: {error}\n"),
            )
                .into_response()
        }
    };
    let mut steps = Vec::new();
    let outcome = payment(&sim, &request, &mut steps).await;
    let status = match outcome {
        Ok(line) => {
            println!("{} send: {line}", clock());
            steps.push(line);
            StatusCode::OK
        }
        Err(line) => {
            println!("{} send: error: {line}", clock());
            steps.push(format!("error: {line}"));
            StatusCode::UNPROCESSABLE_ENTITY
        }
    };
    let mut text = steps.join("\n");
    text.push('\n');
    (status, text).into_response()
}

/// Awaits the callback `key` that `sent` asked for.
async fn ask(
    sim: &Sim,
    key: String,
    sent: impl std::future::Future<Output = Result<(), String>>,
    timeout: Duration,
) -> Result<Value, String> {
    let answer = sim.wait_for(key.clone());
    if let Err(error) = sent.await {
        sim.forget(&key);
        return Err(error);
    }
    match tokio::time::timeout(timeout, answer).await {
        Ok(Ok(Ok(value))) => Ok(value),
        Ok(Ok(Err((code, description)))) => Err(format!("{code} {description}")),
        Ok(Err(_)) => Err("the answer was lost".into()),
        Err(_) => {
            sim.forget(&key);
            Err(format!("no callback within {} s", timeout.as_secs()))
        }
    }
}

/// A send's steps as they happen: printed, and kept for `kasi sim send`.
struct Progress<'a>(&'a mut Vec<String>);

impl Progress<'_> {
    fn step(&mut self, line: String) {
        println!("{} send: {line}", clock());
        self.0.push(line);
    }
}

/// The payee as the lookup found it.
struct Payee {
    fsp: String,
    /// The currencies it is paid in, when its answer says
    /// (`supportedCurrencies`).
    currencies: Vec<String>,
}

/// The payment `request` asks for, each step logged in `steps`; the final
/// line, or why it failed.
async fn payment(
    sim: &Sim,
    request: &SendRequest,
    steps: &mut Vec<String>,
) -> Result<String, String> {
    let payer = request.from.as_str();
    if !sim.names.iter().any(|name| name == payer) {
        return Err(format!(
            "--from {payer}: not one of this sim's DFSPs ({})",
            sim.names.join(", ")
        ));
    }
    let mut progress = Progress(steps);
    let payee = lookup(
        sim,
        &mut progress,
        payer,
        &request.party_type,
        &request.party_id,
    )
    .await?;
    let source = request
        .currency
        .clone()
        .or_else(|| sim.currencies.get(payer).cloned())
        .unwrap_or_else(|| "USD".to_string());
    let target = match &request.to_currency {
        Some(currency) => currency.clone(),
        None if payee.currencies.is_empty() || payee.currencies.contains(&source) => source.clone(),
        None => payee.currencies[0].clone(),
    };
    let transfer_id = sim.uuid();
    if target == source {
        let quote = quote(
            sim,
            &mut progress,
            2,
            payer,
            request,
            &payee,
            (&request.amount, &source),
        )
        .await?;
        let (amount, currency) = transfer(
            sim,
            &mut progress,
            3,
            payer,
            &payee,
            &quote,
            &transfer_id,
            None,
        )
        .await?;
        return Ok(format!(
            "COMMITTED: transfer {transfer_id}, {amount} {currency} from {payer} to {}",
            payee.fsp
        ));
    }
    progress.step(format!(
        "   {} is to be paid in {target}: {payer} converts {} {source} through an FXP",
        payee.fsp, request.amount
    ));
    let offer = fx::find_and_quote(
        sim,
        &mut progress,
        2,
        payer,
        &transfer_id,
        (&request.amount, &source),
        &target,
    )
    .await?;
    let quote = quote(
        sim,
        &mut progress,
        4,
        payer,
        request,
        &payee,
        (&offer.target.0, &target),
    )
    .await?;
    fx::convert(sim, &mut progress, 5, payer, &offer, &transfer_id).await?;
    let (amount, currency) = transfer(
        sim,
        &mut progress,
        6,
        payer,
        &payee,
        &quote,
        &transfer_id,
        Some(&offer.fxp),
    )
    .await?;
    Ok(format!(
        "COMMITTED: transfer {transfer_id}, {amount} {currency} from {payer} to {}, converted from {} {} by {} (conversion {})",
        payee.fsp, offer.source.0, offer.source.1, offer.fxp, offer.conversion_id
    ))
}

/// Step 1: who holds party `kind` `id`.
async fn lookup(
    sim: &Sim,
    progress: &mut Progress<'_>,
    payer: &str,
    kind: &str,
    id: &str,
) -> Result<Payee, String> {
    let path = format!("/parties/{kind}/{id}");
    progress.step(format!(
        "1. lookup: {payer} asks the hub who holds {kind} {id} (GET {path})"
    ));
    let sent = sim.to_hub(Method::GET, &path, Api::Parties, payer, None, String::new());
    let party = ask(
        sim,
        format!("party:{payer}:{kind}/{id}"),
        sent,
        STEP_TIMEOUT,
    )
    .await
    .map_err(|error| format!("lookup of {kind} {id}: {error}"))?;
    let fsp = party["party"]["partyIdInfo"]["fspId"]
        .as_str()
        .ok_or("lookup: the answer names no fspId")?
        .to_string();
    let name = party["party"]["name"].as_str().unwrap_or("(no name)");
    let currencies: Vec<String> = party["party"]["supportedCurrencies"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let takes = if currencies.is_empty() {
        String::new()
    } else {
        format!(", paid in {}", currencies.join(", "))
    };
    progress.step(format!("   {kind} {id} is {name:?}, held by {fsp}{takes}"));
    Ok(Payee { fsp, currencies })
}

/// Step `number`: the payee's terms for `amount` (`POST /quotes`).
async fn quote(
    sim: &Sim,
    progress: &mut Progress<'_>,
    number: u32,
    payer: &str,
    request: &SendRequest,
    payee: &Payee,
    (amount, currency): (&str, &str),
) -> Result<Value, String> {
    let payee_fsp = payee.fsp.as_str();
    let quote_id = sim.uuid();
    let transaction_id = sim.uuid();
    progress.step(format!(
        "{number}. quote: {payer} asks {payee_fsp} for terms to send {amount} {currency} (POST /quotes {quote_id})"
    ));
    let payer_party = party_msisdn(payer, 1);
    let body = quote_post_body(
        &quote_id,
        &transaction_id,
        (payer, &payer_party),
        (payee_fsp, &request.party_id),
        (amount, currency),
    );
    let sent = sim.to_hub(
        Method::POST,
        "/quotes",
        Api::Quotes,
        payer,
        Some(payee_fsp),
        body,
    );
    let quote = ask(sim, format!("quote:{payer}:{quote_id}"), sent, STEP_TIMEOUT)
        .await
        .map_err(|error| format!("quote {quote_id}: {error}"))?;
    progress.step(format!(
        "   {payee_fsp} quotes: transfer {} {}, condition {}",
        quote["transferAmount"]["amount"].as_str().unwrap_or("?"),
        quote["transferAmount"]["currency"].as_str().unwrap_or("?"),
        quote["condition"].as_str().unwrap_or("?")
    ));
    Ok(quote)
}

/// Step `number`: the transfer `quote` agreed (`POST /transfers`), awaited
/// to its end; with `fxp`, the transfer a conversion by it depends on.
/// The amount and currency moved.
#[allow(clippy::too_many_arguments)]
async fn transfer(
    sim: &Sim,
    progress: &mut Progress<'_>,
    number: u32,
    payer: &str,
    payee: &Payee,
    quote: &Value,
    transfer_id: &str,
    fxp: Option<&str>,
) -> Result<(String, String), String> {
    let payee_fsp = payee.fsp.as_str();
    let (amount, currency) = (
        quote["transferAmount"]["amount"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        quote["transferAmount"]["currency"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    );
    let paid_by = match fxp {
        Some(fxp) => format!(", paid from {fxp}'s {currency} under the conversion"),
        None => String::new(),
    };
    progress.step(format!(
        "{number}. transfer: {payer} prepares {amount} {currency} to {payee_fsp}{paid_by} (POST /transfers {transfer_id})"
    ));
    let body = json!({
        "transferId": transfer_id,
        "payerFsp": payer,
        "payeeFsp": payee_fsp,
        "amount": { "amount": amount, "currency": currency },
        "ilpPacket": quote["ilpPacket"],
        "condition": quote["condition"],
        "expiration": fspiop::format_date_time(now_ms() + TRANSFER_EXPIRY_MS),
    })
    .to_string();
    let sent = sim.to_hub(
        Method::POST,
        "/transfers",
        Api::Transfers,
        payer,
        Some(payee_fsp),
        body,
    );
    let timeout = Duration::from_millis(TRANSFER_EXPIRY_MS as u64) + STEP_TIMEOUT;
    let transfer = ask(
        sim,
        format!("transfer:{payer}:{transfer_id}"),
        sent,
        timeout,
    )
    .await
    .map_err(|error| format!("transfer {transfer_id}: {error}"))?;
    match transfer["transferState"].as_str() {
        Some("COMMITTED") => Ok((amount, currency)),
        state => Err(format!(
            "transfer {transfer_id} ended {}",
            state.unwrap_or("in no state")
        )),
    }
}

/// `kasi sim send`: asks the sim and prints its steps.
async fn send_through_sim(args: SendArgs) -> anyhow::Result<ExitCode> {
    let Some((party_type, party_id)) = args.to.split_once(':') else {
        bail!("--to {}: write TYPE:ID, e.g. MSISDN:9123456001", args.to);
    };
    let request = SendRequest {
        from: args.from.clone(),
        party_type: party_type.to_string(),
        party_id: party_id.to_string(),
        amount: args.amount[0].clone(),
        currency: args.amount.get(1).cloned(),
        to_currency: args.to_currency.clone(),
    };
    let url = format!("{}/_sim/send", args.sim.trim_end_matches('/'));
    let client: HttpClient = dfsp::plain_client();
    let http_request = http::Request::builder()
        .method(Method::POST)
        .uri(&url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(&request)?)))
        .with_context(|| format!("--sim {}: not a URL", args.sim))?;
    let (status, body) = send(&client, http_request).await.map_err(|(_, error)| {
        anyhow::anyhow!(
            "no kasi sim at {} ({error}): start one with `kasi sim --dfsps {},...`",
            args.sim,
            args.from
        )
    })?;
    print!("{}", String::from_utf8_lossy(&body));
    Ok(if status.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msisdns_are_stable_e164_and_distinct() {
        let a = party_msisdn("payerfsp", 1);
        assert_eq!(a, party_msisdn("payerfsp", 1));
        assert_eq!(a.len(), 10);
        assert!(a.bytes().all(|b| b.is_ascii_digit()));
        assert_ne!(a, party_msisdn("payeefsp", 1));
        assert_ne!(a, party_msisdn("payerfsp", 2));
    }

    #[test]
    fn uuids_are_version_4() {
        let rng = AtomicU64::new(7);
        let id = new_uuid(&rng);
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(id, new_uuid(&rng));
    }

    #[test]
    fn summaries_name_the_key_fields() {
        let line = summary(br#"{"transferState":"COMMITTED"}"#);
        assert_eq!(line, "state COMMITTED");
        let line = summary(error_body("5104", "no").as_bytes());
        assert_eq!(line, "error 5104 no");
        let line = summary(
            br#"{"conversionTerms":{"initiatingFsp":"payerfsp","counterPartyFsp":"fxp","sourceAmount":{"currency":"USD","amount":"10"},"targetAmount":{"currency":"TZS"}}}"#,
        );
        assert_eq!(line, "convert 10 USD to ? TZS, payerfsp with FXP fxp");
        let line = summary(br#"{"conversionState":"COMMITTED"}"#);
        assert_eq!(line, "state COMMITTED");
        let line = summary(br#"{"providers":["fxp","fxp2"]}"#);
        assert_eq!(line, "FXPs [fxp, fxp2]");
    }

    fn sim_args(args: &[&str]) -> SimArgs {
        #[derive(clap::Parser)]
        struct Command {
            #[command(flatten)]
            sim: SimArgs,
        }
        let args = std::iter::once("sim").chain(args.iter().copied());
        <Command as clap::Parser>::try_parse_from(args).unwrap().sim
    }

    #[test]
    fn each_dfsp_has_one_currency_and_the_fxp_is_apart() {
        let dfsps = |args: &[&str]| played_dfsps(&sim_args(args)).map_err(|e| e.to_string());
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(n, c)| (n.to_string(), c.to_string()))
                .collect()
        };
        assert_eq!(
            dfsps(&["--dfsps", "payerfsp,payeefsp:TZS,payerfsp"]).unwrap(),
            pairs(&[("payerfsp", "USD"), ("payeefsp", "TZS")])
        );
        assert_eq!(
            dfsps(&["--dfsps", "a,b", "--currency", "KES"]).unwrap(),
            pairs(&[("a", "KES"), ("b", "KES")])
        );
        for (args, says) in [
            (&["--dfsps", "a,b:XYZ"][..], "XYZ is not an ISO 4217"),
            (&["--dfsps", "a", "--currency", "usd"], "--currency: usd"),
            (&["--dfsps", "a,a:TZS"], "a is named in USD and in TZS"),
            (&["--dfsps", "a,:TZS"], "name at least one DFSP"),
            (
                &["--dfsps", "a,fxp", "--fxp", "fxp", "--fx-rate", "USD:TZS=1"],
                "--fxp fxp: also named in --dfsps",
            ),
        ] {
            let error = dfsps(args).unwrap_err();
            assert!(error.contains(says), "{args:?}: {error}");
        }
    }
}
