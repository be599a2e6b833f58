//! `kasi sim`: a few simulated DFSPs for people to watch (not for load).
//!
//! One HTTP server plays every DFSP named in `--dfsps`: their callbacks are
//! `http://{listen}/{dfsp}/...`. As a payee a DFSP answers lookups of its
//! parties, quotes (no fees) and prepares (after `--delay-ms`, committed
//! with the fulfilment, or refused at `--reject-percent`); as a payer it
//! makes a whole discovery + quote + transfer when asked on the control
//! endpoint `POST /_sim/send`, which `kasi sim send` calls. Every message
//! seen or sent is printed as one line. The wire shapes, the onboarding and
//! the ILP condition are `kasi bench`'s ([`bench::dfsp`]).

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
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
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
/// A prepare's expiration, from its sending.
const TRANSFER_EXPIRY_MS: i64 = 60_000;

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
    /// awaited. Prints every step; exits 0 when the transfer is COMMITTED,
    /// 1 with the FSPIOP error code and description otherwise, 2 when the
    /// sim cannot be reached. The sim prints the same messages as they
    /// happen.
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

    /// The DFSPs to play, comma-separated: `payerfsp,payeefsp`.
    #[arg(long, value_delimiter = ',', required = true, value_name = "NAME,...")]
    dfsps: Vec<String>,

    /// Onboard the DFSPs first through --hub-admin: the hub's accounts for
    /// --currency and, unless a settlement model already settles it (one
    /// for the currency, or a default one without a currency, such as
    /// examples/onboard.sh's DEFERREDNET, which is kept), a deferred net
    /// model DEFERREDNET<currency>; then each DFSP (participant, net
    /// debit cap, funds in, callback endpoints pointing here) and its
    /// parties. A DFSP that exists already is reported and its endpoints
    /// re-pointed here. Without --onboard the hub is not changed: the DFSPs'
    /// endpoints must already point at --listen.
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

    /// The currency of the DFSPs' accounts (with --onboard) and parties.
    #[arg(long, default_value = "USD")]
    currency: String,

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

    /// The amount and, optionally, its currency: `--amount 10 USD`.
    #[arg(long, num_args = 1..=2, required = true, value_names = ["AMOUNT", "CURRENCY"])]
    amount: Vec<String>,
}

/// What `kasi sim send` asks the sim for.
#[derive(Serialize, Deserialize)]
struct SendRequest {
    from: String,
    party_type: String,
    party_id: String,
    amount: String,
    currency: Option<String>,
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
    if let Some(state) = value["transferState"].as_str() {
        parts.push(format!("state {state}"));
    }
    if let Some(fsp) = value["party"]["partyIdInfo"]["fspId"].as_str() {
        parts.push(format!("held by {fsp}"));
    }
    if let (Some(payer), Some(payee)) = (value["payerFsp"].as_str(), value["payeeFsp"].as_str()) {
        parts.push(format!("{payer} -> {payee}"));
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
    names: Vec<String>,
    /// MSISDN → the DFSP holding it.
    parties: HashMap<String, String>,
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

async fn serve(args: SimArgs) -> anyhow::Result<ExitCode> {
    if args.dfsps.is_empty() || args.dfsps.iter().any(|name| name.is_empty()) {
        bail!("--dfsps: name at least one DFSP, e.g. --dfsps payerfsp,payeefsp");
    }
    let mut names = args.dfsps.clone();
    names.dedup();
    let api = args.hub_api.trim_end_matches('/').to_string();
    let admin = args.hub_admin.trim_end_matches('/').to_string();
    if let Some(path) = &args.admin_token_file {
        dfsp::present_admin_token(&admin, dfsp::read_admin_token_file(path)?);
    }
    let mut parties = HashMap::new();
    for name in &names {
        for index in 1..=args.parties {
            parties.insert(party_msisdn(name, index), name.clone());
        }
    }
    let sim = Arc::new(Sim {
        client: Client::builder(TokioExecutor::new()).build_http(),
        api: api.clone(),
        names: names.clone(),
        parties,
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
        onboard(&sim, &args, &admin, local).await?;
    }
    for name in &names {
        let list: Vec<String> = (1..=args.parties)
            .map(|index| party_msisdn(name, index))
            .collect();
        println!("{name} holds MSISDN {}", list.join(", "));
    }
    let example_to = party_msisdn(names.last().expect("one DFSP"), 1);
    println!(
        "ready: try `kasi sim send --sim http://{local} --from {} --to MSISDN:{example_to} --amount 10 {}` (Ctrl-C to stop)",
        names[0], args.currency
    );
    tokio::select! {
        served = server => {
            served.context("the server stopped")?.context("serving")?;
        }
        _ = tokio::signal::ctrl_c() => println!("{} kasi sim: stopped", clock()),
    }
    Ok(ExitCode::SUCCESS)
}

async fn onboard(sim: &Sim, args: &SimArgs, admin: &str, local: SocketAddr) -> anyhow::Result<()> {
    dfsp::onboard_hub(&sim.client, admin, &args.hub_name, &args.currency)
        .await
        .with_context(|| format!("onboarding through --hub-admin {admin}"))?;
    for name in &sim.names {
        let funds_id = sim.uuid();
        let new = dfsp::onboard_dfsp(
            &sim.client,
            &dfsp::Onboarding {
                admin,
                name,
                currency: &args.currency,
                callback_addr: local,
                discovers: true,
                funds_id: &funds_id,
                existing_ok: true,
            },
        )
        .await
        .with_context(|| format!("onboarding {name}"))?;
        if new {
            println!(
                "{} {name}: onboarded (net debit cap and funds in of {})",
                clock(),
                args.currency
            );
        } else {
            println!(
                "{} {name}: exists in the hub already: its endpoints now point here",
                clock()
            );
        }
        register_parties(sim, name, args).await?;
    }
    Ok(())
}

/// `name` registers its MSISDNs with one batch `POST /participants` and
/// waits for `PUT /participants/{requestId}`.
async fn register_parties(sim: &Sim, name: &str, args: &SimArgs) -> anyhow::Result<()> {
    let identifiers: Vec<String> = (1..=args.parties)
        .map(|index| party_msisdn(name, index))
        .collect();
    let request_id = sim.uuid();
    let key = format!("participants:{request_id}");
    let answer = sim.wait_for(key.clone());
    let body = participants_batch_body(&request_id, name, &identifiers, &args.currency);
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
        // Notifications (PATCH /transfers/{ID}) and anything else: seen,
        // printed, acknowledged.
        _ => StatusCode::OK,
    }
}

/// The payee's answer to `GET /parties/{Type}/{ID}`.
async fn answer_party(sim: &Sim, dfsp: &str, source: &str, kind: &str, id: &str) {
    let path = format!("/parties/{kind}/{id}");
    let held = kind == "MSISDN" && sim.parties.get(id).is_some_and(|holder| holder == dfsp);
    let sent = if held {
        sim.to_hub(
            Method::PUT,
            &path,
            Api::Parties,
            dfsp,
            Some(source),
            party_put_body_named(id, dfsp, &format!("Sim party {id} of {dfsp}")),
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
    let mut step = |line: String| {
        println!("{} send: {line}", clock());
        steps.push(line);
    };
    let (kind, id) = (&request.party_type, &request.party_id);

    // 1. Discovery.
    let path = format!("/parties/{kind}/{id}");
    step(format!(
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
    let payee = party["party"]["partyIdInfo"]["fspId"]
        .as_str()
        .ok_or("lookup: the answer names no fspId")?
        .to_string();
    let name = party["party"]["name"].as_str().unwrap_or("(no name)");
    step(format!("   {kind} {id} is {name:?}, held by {payee}"));

    // 2. Quote.
    let currency = request
        .currency
        .clone()
        .unwrap_or_else(|| "USD".to_string());
    let quote_id = sim.uuid();
    let transaction_id = sim.uuid();
    step(format!(
        "2. quote: {payer} asks {payee} for terms to send {} {currency} (POST /quotes {quote_id})",
        request.amount
    ));
    let payer_party = party_msisdn(payer, 1);
    let body = quote_post_body(
        &quote_id,
        &transaction_id,
        (payer, &payer_party),
        (&payee, id),
        (&request.amount, &currency),
    );
    let sent = sim.to_hub(
        Method::POST,
        "/quotes",
        Api::Quotes,
        payer,
        Some(&payee),
        body,
    );
    let quote = ask(sim, format!("quote:{payer}:{quote_id}"), sent, STEP_TIMEOUT)
        .await
        .map_err(|error| format!("quote {quote_id}: {error}"))?;
    let (amount, quoted_currency) = (
        quote["transferAmount"]["amount"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        quote["transferAmount"]["currency"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    );
    step(format!(
        "   {payee} quotes: transfer {amount} {quoted_currency}, condition {}",
        quote["condition"].as_str().unwrap_or("?")
    ));

    // 3. Transfer.
    let transfer_id = sim.uuid();
    step(format!(
        "3. transfer: {payer} prepares {amount} {quoted_currency} to {payee} (POST /transfers {transfer_id})"
    ));
    let body = json!({
        "transferId": transfer_id,
        "payerFsp": payer,
        "payeeFsp": payee,
        "amount": { "amount": amount, "currency": quoted_currency },
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
        Some(&payee),
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
        Some("COMMITTED") => Ok(format!(
            "COMMITTED: transfer {transfer_id}, {amount} {quoted_currency} from {payer} to {payee}"
        )),
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
    };
    let url = format!("{}/_sim/send", args.sim.trim_end_matches('/'));
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
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
    }
}
