//! The overview: each DFSP's position against its net debit cap and its
//! liquidity cover, and its traffic (from the hub's own counters, `GET
//! /stats/dfsps`, and callback health, `GET /callbacks/health`), and the
//! refusals of the last hour per DFSP (`GET /stats/refusals`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Query;
use axum::response::Response;
use ledger::Amount;
use maud::{html, Markup};
use serde_json::Value;

use crate::api::ApiError;
use crate::page::{self, Section};
use crate::session::Visitor;

/// Rows shown unless the person asks for all: the most used first.
const ROWS_SHOWN: usize = 100;
/// Reads of the participants' accounts in flight at once: the ledger's
/// queue refuses (2003) rather than waits, so a big scheme is read in
/// waves, not all at once.
const READS_IN_FLIGHT: usize = 32;
/// Rates are taken over at least this long…
const MIN_RATE_SPAN: Duration = Duration::from_secs(1);
/// …and at most this long.
const MAX_RATE_SPAN: Duration = Duration::from_secs(60);
/// Headroom under this share of a limit is an alarm (red), as Mojaloop's
/// default `alarmPercentage` of 10; under twice that a warning (amber).
const ALARM_PERCENT: f64 = 10.0;

/// Overviews rendered: each render's number is on its live section, so
/// that a refresh in place can be told from the page it replaced.
static RENDERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One DFSP's counters from `GET /stats/dfsps`.
#[derive(Clone, Default)]
struct Counters {
    prepared: u64,
    committed: u64,
    failed: u64,
    latency_count: u64,
    latency_sum_s: f64,
    /// Cumulative counts by upper bound (seconds).
    buckets: Vec<(f64, u64)>,
}

struct Sample {
    at: Instant,
    dfsps: HashMap<String, Counters>,
}

/// Recent reads of the counters, so that a page shows rates (the counters
/// themselves only grow).
#[derive(Default)]
pub(crate) struct Rates {
    samples: Mutex<VecDeque<Sample>>,
}

impl Rates {
    /// Keeps this read and gives the one to take rates against: the newest
    /// one at least [`MIN_RATE_SPAN`] before now (so a page refreshed every
    /// 5 s shows the last 5 s, and a stall shows at once), no older than
    /// [`MAX_RATE_SPAN`].
    fn note(
        &self,
        now: Instant,
        dfsps: &HashMap<String, Counters>,
    ) -> Option<(f64, HashMap<String, Counters>)> {
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        while samples
            .front()
            .is_some_and(|s| now.duration_since(s.at) > MAX_RATE_SPAN)
        {
            samples.pop_front();
        }
        let base = samples
            .iter()
            .rev()
            .find(|s| now.duration_since(s.at) >= MIN_RATE_SPAN)
            .map(|s| (now.duration_since(s.at).as_secs_f64(), s.dfsps.clone()));
        // One read a second is enough to keep.
        if samples
            .back()
            .is_none_or(|s| now.duration_since(s.at) >= MIN_RATE_SPAN)
        {
            samples.push_back(Sample {
                at: now,
                dfsps: dfsps.clone(),
            });
        }
        base
    }
}

fn counters(stats: &Value) -> HashMap<String, Counters> {
    let number = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).unwrap_or(0);
    stats
        .get("dfsps")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|d| {
                    let name = d.get("name")?.as_str()?.to_string();
                    let latency = d.get("latency");
                    let counters = Counters {
                        prepared: number(d, "prepared"),
                        committed: number(d, "committed"),
                        failed: number(d, "rejected") + number(d, "aborted") + number(d, "expired"),
                        latency_count: latency.map(|l| number(l, "count")).unwrap_or(0),
                        latency_sum_s: latency
                            .and_then(|l| l.get("sumSeconds"))
                            .and_then(page::float)
                            .unwrap_or(0.0),
                        buckets: latency
                            .and_then(|l| l.get("buckets"))
                            .and_then(Value::as_array)
                            .map(|b| {
                                b.iter()
                                    .filter_map(|b| {
                                        Some((
                                            page::float(b.get("le")?)?,
                                            b.get("count")?.as_u64()?,
                                        ))
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                    };
                    Some((name, counters))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What a DFSP did over the rate span.
#[derive(Clone, Copy, Default)]
struct Activity {
    prepares_per_s: f64,
    commits_per_s: f64,
    /// Failed / finished, percent; `None` when nothing finished.
    error_percent: Option<f64>,
    mean_ms: Option<f64>,
    p99_ms: Option<f64>,
}

fn activity(now: &Counters, base: Option<&Counters>, span_s: f64) -> Activity {
    let zero = Counters::default();
    let base = base.unwrap_or(&zero);
    let delta = |a: u64, b: u64| a.saturating_sub(b);
    let committed = delta(now.committed, base.committed);
    let failed = delta(now.failed, base.failed);
    let finished = committed + failed;
    let latency_count = delta(now.latency_count, base.latency_count);
    let p99_ms = (latency_count > 0)
        .then(|| {
            let wanted = (latency_count as f64 * 0.99).ceil() as u64;
            now.buckets.iter().find_map(|(le, count)| {
                let before = base
                    .buckets
                    .iter()
                    .find(|(b, _)| b == le)
                    .map_or(0, |(_, c)| *c);
                (delta(*count, before) >= wanted).then_some(le * 1000.0)
            })
        })
        .flatten();
    Activity {
        prepares_per_s: delta(now.prepared, base.prepared) as f64 / span_s,
        commits_per_s: committed as f64 / span_s,
        error_percent: (finished > 0).then(|| failed as f64 * 100.0 / finished as f64),
        mean_ms: (latency_count > 0).then(|| {
            (now.latency_sum_s - base.latency_sum_s).max(0.0) * 1000.0 / latency_count as f64
        }),
        p99_ms,
    }
}

/// One row: a DFSP in one currency.
struct Row {
    name: String,
    active: bool,
    currency: String,
    position: Amount,
    net_debit_cap: Option<Amount>,
    /// Funds deposited and not yet used: −(settlement account value).
    liquidity: Amount,
}

impl Row {
    /// How much of a limit the position uses, percent. A limit of zero
    /// leaves no headroom at all: every prepare is refused, so it is full.
    fn used_percent(position: Amount, limit: Amount) -> f64 {
        let limit = limit.to_string().parse::<f64>().unwrap_or(0.0);
        let position = position.to_string().parse::<f64>().unwrap_or(0.0);
        if limit <= 0.0 {
            return 100.0;
        }
        (position / limit * 100.0).max(0.0)
    }

    /// No net debit cap is a cap of 0, as the ledger applies it.
    fn cap_used(&self) -> f64 {
        Row::used_percent(self.position, self.net_debit_cap.unwrap_or(Amount::ZERO))
    }

    fn liquidity_used(&self) -> f64 {
        Row::used_percent(self.position, self.liquidity)
    }

    fn most_used(&self) -> f64 {
        self.cap_used().max(self.liquidity_used())
    }
}

fn amount(value: Option<&Value>) -> Amount {
    value.and_then(page::signed_amount).unwrap_or(Amount::ZERO)
}

/// The rows, and the DFSPs whose accounts could not be read this time
/// (a busy ledger refuses rather than queues: 2003), shown as such rather
/// than failing the page.
async fn rows(visitor: &Visitor) -> Result<(Vec<Row>, Vec<String>), ApiError> {
    let participants = visitor.get("/participants").await?;
    let limits = visitor.get("/participants/limits").await?;
    let mut caps: HashMap<(String, String), Amount> = HashMap::new();
    for limit in limits.as_array().into_iter().flatten() {
        let name = page::text(&limit["name"]);
        let currency = page::text(&limit["currency"]);
        caps.insert((name, currency), amount(limit["limit"].get("value")));
    }
    let dfsps: Vec<(String, bool)> = participants
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["accounts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|a| a["ledgerAccountType"] == "POSITION"))
        })
        .map(|p| (page::text(&p["name"]), p["isActive"] == 1))
        .collect();
    let permits = Arc::new(tokio::sync::Semaphore::new(READS_IN_FLIGHT));
    let mut reads = tokio::task::JoinSet::new();
    for (index, (name, _)) in dfsps.iter().enumerate() {
        let visitor = visitor.clone();
        let permits = permits.clone();
        let path = format!("/participants/{}/accounts", page::encode(name));
        reads.spawn(async move {
            let _permit = permits.acquire_owned().await;
            (index, visitor.get(&path).await)
        });
    }
    let mut accounts: Vec<Value> = vec![Value::Null; dfsps.len()];
    while let Some(joined) = reads.join_next().await {
        let (index, read) = joined.map_err(|error| ApiError {
            status: axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            code: String::new(),
            description: format!("a read of accounts failed: {error}"),
        })?;
        match read {
            Ok(read) => accounts[index] = read,
            Err(error) if error.status == axum::http::StatusCode::UNAUTHORIZED => {
                return Err(error)
            }
            Err(error) => {
                tracing::debug!(dfsp = %dfsps[index].0, %error, "console: accounts not read");
            }
        }
    }
    let unread: Vec<String> = dfsps
        .iter()
        .zip(&accounts)
        .filter(|(_, a)| a.is_null())
        .map(|((name, _), _)| name.clone())
        .collect();
    let mut rows = Vec::new();
    for ((name, active), accounts) in dfsps.into_iter().zip(accounts) {
        let accounts = accounts.as_array().cloned().unwrap_or_default();
        let by_kind = |kind: &str, currency: &str| {
            accounts
                .iter()
                .find(|a| a["ledgerAccountType"] == kind && a["currency"] == currency)
                .map(|a| amount(a.get("value")))
        };
        for position in accounts
            .iter()
            .filter(|a| a["ledgerAccountType"] == "POSITION")
        {
            let currency = page::text(&position["currency"]);
            let settlement = by_kind("SETTLEMENT", &currency).unwrap_or(Amount::ZERO);
            rows.push(Row {
                position: amount(position.get("value")),
                net_debit_cap: caps.get(&(name.clone(), currency.clone())).copied(),
                liquidity: Amount::ZERO.checked_sub(settlement).unwrap_or(Amount::ZERO),
                name: name.clone(),
                active,
                currency,
            });
        }
    }
    Ok((rows, unread))
}

#[derive(serde::Deserialize)]
pub(crate) struct OverviewQuery {
    all: Option<String>,
}

pub(crate) async fn show(visitor: Visitor, Query(query): Query<OverviewQuery>) -> Response {
    // The overview reads the whole scheme: a DFSP's person lands on its
    // own DFSP's page (its portal), an auditor on the audit trail.
    match visitor.session.caller.role {
        hub::access::Role::Dfsp(own) => {
            return visitor.redirect(&format!(
                "/console/participants/{}",
                page::encode(own.as_str())
            ))
        }
        hub::access::Role::Auditor => return visitor.redirect("/console/audit"),
        _ => {}
    }
    let (rows, stats, callbacks, health_of_hub, refusals) = tokio::join!(
        rows(&visitor),
        visitor.get("/stats/dfsps"),
        visitor.get("/callbacks/health"),
        // Answered 503 with the same JSON when the store is unreachable:
        // read whatever it says.
        visitor.call_raw(axum::http::Method::GET, "/health", None, "application/json"),
        visitor.get("/stats/refusals"),
    );
    let ((mut rows, unread), stats, callbacks) = match (rows, stats, callbacks) {
        (Ok(r), Ok(s), Ok(c)) => (r, s, c),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            return page::api_failure(&visitor, Section::Overview, &e)
        }
    };
    let hub_health: Value = health_of_hub
        .ok()
        .and_then(|raw| serde_json::from_slice(&raw.body).ok())
        .unwrap_or(Value::Null);
    let hub_ok = hub_health["status"] == "OK";
    let now = counters(&stats);
    let base = visitor.console.rates.note(Instant::now(), &now);
    let span_s = base.as_ref().map_or(1.0, |(span, _)| *span);
    let activity_of = |name: &str| -> Option<Activity> {
        let (_, base) = base.as_ref()?;
        Some(activity(now.get(name)?, base.get(name), span_s))
    };
    let health: HashMap<String, &Value> = callbacks
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| (page::text(&h["participant"]), h))
        .collect();

    // The whole hub: the sums of every DFSP.
    let mut total_now = Counters::default();
    let mut total_base = Counters::default();
    let mut merged_buckets: BTreeMap<u64, (f64, u64, u64)> = BTreeMap::new();
    for (name, c) in &now {
        total_now.prepared += c.prepared;
        total_now.committed += c.committed;
        total_now.failed += c.failed;
        total_now.latency_count += c.latency_count;
        total_now.latency_sum_s += c.latency_sum_s;
        let b = base.as_ref().and_then(|(_, b)| b.get(name));
        if let Some(b) = b {
            total_base.prepared += b.prepared;
            total_base.committed += b.committed;
            total_base.failed += b.failed;
            total_base.latency_count += b.latency_count;
            total_base.latency_sum_s += b.latency_sum_s;
        }
        for (le, count) in &c.buckets {
            let before = b
                .and_then(|b| b.buckets.iter().find(|(x, _)| x == le))
                .map_or(0, |(_, c)| *c);
            let entry = merged_buckets
                .entry((le * 1e6) as u64)
                .or_insert((*le, 0, 0));
            entry.1 += count;
            entry.2 += before;
        }
    }
    total_now.buckets = merged_buckets
        .values()
        .map(|(le, c, _)| (*le, *c))
        .collect();
    total_base.buckets = merged_buckets
        .values()
        .map(|(le, _, b)| (*le, *b))
        .collect();
    let hub_activity = base
        .as_ref()
        .map(|_| activity(&total_now, Some(&total_base), span_s));
    let failing = health
        .values()
        .filter(|h| !h["failingSince"].is_null())
        .count();
    let dead_letters: u64 = health
        .values()
        .filter_map(|h| h["deadLetters"].as_u64())
        .sum();

    let summary = live_summary(hub_ok, &rows, failing, dead_letters);
    rows.sort_by(|a, b| {
        b.most_used()
            .total_cmp(&a.most_used())
            .then_with(|| a.name.cmp(&b.name))
    });
    let total_rows = rows.len();
    let show_all = query.all.is_some();
    if !show_all {
        rows.truncate(ROWS_SHOWN);
    }
    let dfsp_count = rows
        .iter()
        .map(|r| r.name.as_str())
        .collect::<std::collections::HashSet<_>>()
        .len();

    let content = html! {
        h1 { "Overview" }
        // The one thing a screen reader announces as the page refreshes:
        // this short line, and only when its words change (the script
        // rewrites it then; the table below is replaced silently).
        p #live-summary role="status" aria-live="polite" aria-atomic="true" { (summary) }
        section #live data-refresh-s="5" data-summary="live-summary" data-rendered=(RENDERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) aria-label="Live figures" {
            @if !hub_ok {
                p.flash.error role="alert" {
                    "The hub is not healthy: status " (page::text(&hub_health["status"]))
                    "; store " (page::text(&hub_health["store"]["kind"]))
                    @if hub_health["store"]["reachable"] == false { " unreachable" }
                    ". New transfers are refused until it recovers."
                }
            }
            div.tiles {
                (tile("Transfers committed", hub_activity.map(|a| format!("{:.1}/s", a.commits_per_s)), "since the previous read; refreshes every 5 s"))
                (tile("Prepares", hub_activity.map(|a| format!("{:.1}/s", a.prepares_per_s)), ""))
                (tile("Error rate", hub_activity.and_then(|a| a.error_percent).map(|p| format!("{p:.2} %")), "of transfers finished"))
                (tile("Latency p99", hub_activity.and_then(|a| a.p99_ms).map(ms), "prepare to commit"))
                (tile("Callbacks failing", Some(failing.to_string()), &format!("DFSPs; {dead_letters} dead letters")))
                (tile("Since start", Some(page::count(total_now.committed)), &format!("committed; {} failed", page::count(total_now.failed))))
                (tile("Hub", Some(if hub_ok { "OK".to_string() } else { page::text(&hub_health["status"]) }),
                    &format!("{} store, {}; up {}", page::text(&hub_health["store"]["kind"]), page::text(&hub_health["role"]), uptime(page::float(&hub_health["uptime"]).unwrap_or(0.0)))))
            }
            @if !unread.is_empty() {
                p.flash.warn role="status" {
                    "The accounts of " (unread.len()) " DFSPs could not be read this time (the ledger was busy): "
                    (unread.iter().take(10).cloned().collect::<Vec<_>>().join(", "))
                    @if unread.len() > 10 { ", …" }
                    ". They are missing below until the next refresh."
                }
            }
            @if base.is_none() {
                p.hint { "Rates appear from the next refresh (they are taken between two reads)." }
            }
            h2 { "Positions against limits" }
            p.hint {
                "Position (reserved included) against the net debit cap and against the liquidity cover (funds deposited, the settlement account). "
                "Amber when less than " (ALARM_PERCENT * 2.0) " % of a limit is left, red under " (ALARM_PERCENT) " %. Most used first."
            }
            div.table-wrap {
                table.positions {
                    thead { tr {
                        th scope="col" { "DFSP" }
                        th scope="col" { "Currency" }
                        th.num scope="col" { "Position" }
                        th.num scope="col" { "Net debit cap" }
                        th scope="col" { "Cap used" }
                        th.num scope="col" { "Liquidity cover" }
                        th scope="col" { "Liquidity used" }
                        th.num scope="col" { "Transfers/s" }
                        th.num scope="col" { "Errors" }
                        th.num scope="col" { "Latency mean / p99" }
                        th scope="col" { "Callbacks" }
                    } }
                    tbody {
                        @for row in &rows {
                            @let act = activity_of(&row.name);
                            tr data-dfsp=(row.name) {
                                th scope="row" {
                                    a href={ "/console/participants/" (page::encode(&row.name)) } { (row.name) }
                                    @if !row.active { " " span.badge.off { "inactive" } }
                                }
                                td { (row.currency) }
                                td.num { (page::money(&row.position.to_string(), &row.currency)) }
                                td.num { @match row.net_debit_cap {
                                    Some(cap) => (page::money(&cap.to_string(), &row.currency)),
                                    None => span.muted { "none (0)" },
                                } }
                                td { (meter("net debit cap used", row.cap_used())) }
                                td.num { (page::money(&row.liquidity.to_string(), &row.currency)) }
                                td { (meter("liquidity cover used", row.liquidity_used())) }
                                td.num { (act.map(|a| format!("{:.1}", a.commits_per_s)).unwrap_or_else(|| "—".into())) }
                                td.num { (act.and_then(|a| a.error_percent).map(|p| format!("{p:.1} %")).unwrap_or_else(|| "—".into())) }
                                td.num { (act.and_then(|a| a.mean_ms).map(ms).unwrap_or_else(|| "—".into())) " / " (act.and_then(|a| a.p99_ms).map(ms).unwrap_or_else(|| "—".into())) }
                                td { (callback_health(health.get(&row.name).copied())) }
                            }
                        }
                    }
                }
            }
            @if rows.is_empty() {
                p { "No DFSP yet. " a href="/console/participants#onboard" { "Onboard one" } "." }
            }
            (refusals_section(refusals.as_ref().ok()))
            @if !show_all && total_rows > rows.len() {
                p { "Showing the " (rows.len()) " most used of " (total_rows) ". " a href="/console/?all=1" { "Show all" } }
            } @else {
                p.hint { (dfsp_count) " DFSPs, " (total_rows) " positions." }
            }
        }
    };
    page::render(&visitor, Section::Overview, "Overview", content)
}

/// Refusals of the last hour per DFSP (`GET /stats/refusals`): a DFSP
/// probing the hub, or a neighbour's misconfiguration, shows here first.
/// Requests that named no known DFSP are counted as `unknown`.
fn refusals_section(refusals: Option<&Value>) -> Markup {
    let participants: Vec<&Value> = refusals
        .and_then(|r| r["participants"].as_array())
        .into_iter()
        .flatten()
        .collect();
    html! {
        h2 #refusals { "Refusals in the last hour" }
        p.hint {
            "Requests the hub refused, by the DFSP they claimed to come from (FSPIOP) or were about (admin API), and why. "
            "Each class is also counted in " code { "kasi_refusals_total" } " and logged as a warning."
        }
        @if refusals.is_none() {
            p.muted { "The refusals could not be read this time." }
        } @else if participants.is_empty() {
            p { "None." }
        } @else {
            div.table-wrap {
                table.refusals {
                    thead { tr {
                        th scope="col" { "DFSP" }
                        th.num scope="col" { "Refusals" }
                        th scope="col" { "By class" }
                    } }
                    tbody {
                        @for entry in &participants {
                            @let name = page::text(&entry["participant"]);
                            tr data-refusals=(name) {
                                th scope="row" { (name) }
                                td.num { (entry["refusals"].as_u64().unwrap_or(0)) }
                                td {
                                    @for (class, count) in entry["byClass"].as_object().into_iter().flatten() {
                                        span.badge data-class=(class) { (class) " " (count.as_u64().unwrap_or(0)) }
                                        " "
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Seconds as a person reads a duration: `3 d 4 h`, `5 h 12 min`, `42 s`.
fn uptime(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        0..=119 => format!("{s} s"),
        120..=7_199 => format!("{} min", s / 60),
        7_200..=172_799 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

fn ms(value: f64) -> String {
    if !value.is_finite() {
        // The histogram's last bucket has no upper bound.
        return "> 10 s".to_string();
    }
    if value >= 100.0 {
        format!("{value:.0} ms")
    } else {
        format!("{value:.1} ms")
    }
}

fn tile(label: &str, value: Option<String>, note: &str) -> Markup {
    html! {
        div.tile {
            div.label { (label) }
            div.value { (value.unwrap_or_else(|| "—".to_string())) }
            @if !note.is_empty() { div.note { (note) } }
        }
    }
}

/// A bar that the browser colours by itself: green, amber past `low`, red
/// past `high` (a `<meter>` whose optimum is empty), with the number beside
/// it for those who do not see colour.
/// How close a usage is to its limit: `ok`, `warn` (amber) or `alarm`.
fn usage_level(percent: f64) -> &'static str {
    if percent >= 100.0 - ALARM_PERCENT {
        "alarm"
    } else if percent >= 100.0 - 2.0 * ALARM_PERCENT {
        "warn"
    } else {
        "ok"
    }
}

/// The overview in one sentence, of states rather than rates, so that it
/// changes (and is announced) only when something a person should hear
/// about changes: the hub's health, positions near a limit, failing
/// callbacks.
fn live_summary(hub_ok: bool, rows: &[Row], failing: usize, dead_letters: u64) -> String {
    let near = |level: &str| {
        rows.iter()
            .filter(|r| usage_level(r.most_used()) == level)
            .count()
    };
    let (red, amber) = (near("alarm"), near("warn"));
    let positions = match (red, amber) {
        (0, 0) => "no position near a limit".to_string(),
        (red, 0) => format!("{} red (near a limit)", of(red, "position", "positions")),
        (0, amber) => format!("{} amber", of(amber, "position", "positions")),
        (red, amber) => format!(
            "{} red (near a limit), {amber} amber",
            of(red, "position", "positions")
        ),
    };
    let callbacks = match (failing, dead_letters) {
        (0, 0) => "callbacks delivered".to_string(),
        (failing, dead) => format!(
            "callbacks failing to {}, {}",
            of(failing, "DFSP", "DFSPs"),
            of(dead as usize, "dead letter", "dead letters")
        ),
    };
    format!(
        "Hub {}; {positions}; {callbacks}.",
        if hub_ok { "OK" } else { "not healthy" },
    )
}

/// `1 position`, `2 positions`.
fn of(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn meter(label: &str, percent: f64) -> Markup {
    let level = usage_level(percent);
    html! {
        span class={ "usage " (level) } {
            meter min="0" max="100" low=(100.0 - 2.0 * ALARM_PERCENT) high=(100.0 - ALARM_PERCENT) optimum="0"
                value=(format!("{:.1}", percent.min(100.0))) aria-label=(label) {}
            " " span.pct { (format!("{percent:.0} %")) }
        }
    }
}

fn callback_health(health: Option<&Value>) -> Markup {
    let Some(h) = health else {
        return html! { span.muted { "no callbacks yet" } };
    };
    let queued = h["queued"].as_u64().unwrap_or(0) + h["inFlight"].as_u64().unwrap_or(0);
    let dead = h["deadLetters"].as_u64().unwrap_or(0);
    html! {
        @if h["failingSince"].is_null() {
            span.status.ok { "answering" }
        } @else {
            span.status.alarm { "failing since " (page::time(&page::text(&h["failingSince"]))) }
        }
        @if queued > 0 { " · " (queued) " waiting" }
        @if dead > 0 { " · " a href="/console/transfers#dead-letters" { (dead) " dead letters" } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(prepared: u64, committed: u64, failed: u64, buckets: &[(f64, u64)]) -> Counters {
        let count = buckets.last().map_or(0, |b| b.1);
        Counters {
            prepared,
            committed,
            failed,
            latency_count: count,
            latency_sum_s: count as f64 * 0.002,
            buckets: buckets.to_vec(),
        }
    }

    #[test]
    fn rates_are_taken_between_two_reads() {
        let base = counters(100, 90, 0, &[(0.001, 10), (0.01, 90)]);
        let now = counters(300, 280, 10, &[(0.001, 20), (0.01, 270), (0.1, 280)]);
        let a = activity(&now, Some(&base), 2.0);
        assert_eq!(a.prepares_per_s, 100.0);
        assert_eq!(a.commits_per_s, 95.0);
        // 10 failed of 200 finished.
        assert_eq!(a.error_percent, Some(5.0));
        // 190 latencies: 10 under 1 ms, 180 under 10 ms, all under 100 ms:
        // the 99th percentile is in the 100 ms bucket.
        assert_eq!(a.p99_ms, Some(100.0));
    }

    #[test]
    fn refusals_are_shown_per_dfsp_and_class() {
        let refusals = serde_json::json!({"windowSeconds": 3600, "participants": [
            {"participant": "payerfsp", "refusals": 3, "byClass": {"admin_invalid": 1, "identity": 2}},
            {"participant": "unknown", "refusals": 1, "byClass": {"admin_unauthenticated": 1}},
        ]});
        let html = refusals_section(Some(&refusals)).into_string();
        assert!(html.contains("data-refusals=\"payerfsp\""), "{html}");
        assert!(html.contains("identity 2"), "{html}");
        assert!(html.contains("admin_unauthenticated 1"), "{html}");
        let none = serde_json::json!({"windowSeconds": 3600, "participants": []});
        assert!(refusals_section(Some(&none))
            .into_string()
            .contains("None."));
        assert!(refusals_section(None)
            .into_string()
            .contains("could not be read"));
    }

    #[test]
    fn uptimes_read_as_durations() {
        assert_eq!(uptime(42.5), "42 s");
        assert_eq!(uptime(600.0), "10 min");
        assert_eq!(uptime(3.0 * 3600.0 + 120.0), "3 h 2 min");
        assert_eq!(uptime(3.0 * 86_400.0 + 4.0 * 3600.0), "3 d 4 h");
    }

    #[test]
    fn limits_turn_amber_then_red() {
        assert!(meter("x", 50.0)
            .into_string()
            .contains("class=\"usage ok\""));
        assert!(meter("x", 85.0)
            .into_string()
            .contains("class=\"usage warn\""));
        assert!(meter("x", 95.0)
            .into_string()
            .contains("class=\"usage alarm\""));
        assert!(meter("x", 250.0).into_string().contains("value=\"100.0\""));
    }
}
