//! The dashboard (`/console/dashboard`): the hourly rollup (`GET
//! /stats/hourly`) drawn as inline SVG (`chart.rs`) — transfers per hour
//! by currency, by payer and by payee (the eight busiest, then
//! "others"), failures by error code, and the p99 prepare-to-finish time
//! per payee DFSP — for the last 24 h, 48 h, 7 d or 31 d. Each chart has
//! a small table beside it. A DFSP's person sees what the API lets it
//! read: the transfers it paid or was paid.

use std::collections::{BTreeMap, HashMap};

use axum::extract::Query;
use axum::response::Response;
use ledger::Amount;
use maud::{html, Markup};
use serde_json::Value;

use crate::chart::{self, Series};
use crate::page::{self, Section};
use crate::session::Visitor;

/// Series a chart draws before "others".
const TOP: usize = 8;
const OTHERS: &str = "others";
const HOUR_MS: i64 = 3_600_000;

/// The columns of a chart's table.
#[derive(Clone, Copy, PartialEq)]
enum Columns {
    /// Committed, the amount, failed.
    Currency,
    /// Committed, failed.
    Dfsp,
    /// Failures only.
    Code,
}

#[derive(serde::Deserialize, Default)]
pub(crate) struct Asked {
    range: Option<String>,
}

/// Per series name: its value in each hour, and its totals.
#[derive(Default)]
struct Tally {
    hours: BTreeMap<String, Vec<u64>>,
    committed: BTreeMap<String, u64>,
    failed: BTreeMap<String, u64>,
    amount: BTreeMap<String, Amount>,
}

impl Tally {
    fn add(&mut self, name: &str, hour: usize, hours: usize, committed: u64, failed: u64) {
        self.hours
            .entry(name.to_string())
            .or_insert_with(|| vec![0; hours])[hour] += committed + failed;
        *self.committed.entry(name.to_string()).or_default() += committed;
        *self.failed.entry(name.to_string()).or_default() += failed;
    }

    fn total(&self, name: &str) -> u64 {
        self.committed.get(name).copied().unwrap_or(0) + self.failed.get(name).copied().unwrap_or(0)
    }

    /// The [`TOP`] busiest series, then the rest summed as "others".
    fn series(&self) -> Vec<Series> {
        let mut names: Vec<&String> = self.hours.keys().collect();
        names.sort_by(|a, b| self.total(b).cmp(&self.total(a)).then(a.cmp(b)));
        let mut series: Vec<Series> = names
            .iter()
            .take(TOP)
            .map(|name| Series {
                name: name.to_string(),
                values: self.hours[*name].clone(),
            })
            .collect();
        if names.len() > TOP {
            let mut values = vec![0; series[0].values.len()];
            for name in &names[TOP..] {
                for (sum, v) in values.iter_mut().zip(&self.hours[*name]) {
                    *sum += v;
                }
            }
            series.push(Series {
                name: OTHERS.into(),
                values,
            });
        }
        series
    }
}

/// `GET /console/dashboard`.
pub(crate) async fn show(visitor: Visitor, Query(asked): Query<Asked>) -> Response {
    let range = asked
        .range
        .filter(|r| hub::rollup::PRESETS.iter().any(|(name, _)| name == r))
        .unwrap_or_else(|| "24h".to_string());
    let stats = match visitor.get(&format!("/stats/hourly?range={range}")).await {
        Ok(stats) => stats,
        Err(e) => return page::api_failure(&visitor, Section::Dashboard, &e),
    };
    let content = render(&stats, &range);
    page::render(&visitor, Section::Dashboard, "Dashboard", content)
}

fn hour_label(iso: &str) -> String {
    page::time(iso)
}

fn render(stats: &Value, range: &str) -> Markup {
    let from_ms = fspiop::parse_date_time(&page::text(&stats["from"])).unwrap_or(0);
    let hours = stats["hours"].as_u64().unwrap_or(0) as usize;
    let labels: Vec<String> = (0..hours)
        .map(|h| hour_label(&hub::format_time(from_ms + h as i64 * HOUR_MS)))
        .collect();
    let index = |row: &Value| -> Option<usize> {
        let at = fspiop::parse_date_time(row["hour"].as_str()?)?;
        let i = ((at - from_ms) / HOUR_MS) as usize;
        (i < hours).then_some(i)
    };
    let (mut currencies, mut payers, mut payees, mut codes) = (
        Tally::default(),
        Tally::default(),
        Tally::default(),
        Tally::default(),
    );
    for row in stats["pairs"].as_array().into_iter().flatten() {
        let Some(i) = index(row) else { continue };
        let committed = row["committed"].as_u64().unwrap_or(0);
        let failed = row["failed"].as_u64().unwrap_or(0);
        let currency = page::text(&row["currency"]);
        currencies.add(&currency, i, hours, committed, failed);
        if let Some(amount) = page::signed_amount(&row["amount"]) {
            let sum = currencies.amount.entry(currency).or_insert(Amount::ZERO);
            *sum = sum.checked_add(amount).unwrap_or(*sum);
        }
        payers.add(&page::text(&row["payer"]), i, hours, committed, failed);
        payees.add(&page::text(&row["payee"]), i, hours, committed, failed);
    }
    for row in stats["errors"].as_array().into_iter().flatten() {
        let Some(i) = index(row) else { continue };
        let failures = row["failures"].as_u64().unwrap_or(0);
        codes.add(&page::text(&row["errorCode"]), i, hours, 0, failures);
    }
    // p99 per payee: the pairs' histograms merged.
    let bounds: Vec<u64> = stats["latencyBucketsMs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect();
    let mut by_payee: HashMap<String, Vec<u64>> = HashMap::new();
    for row in stats["latency"].as_array().into_iter().flatten() {
        let merged = by_payee
            .entry(page::text(&row["payee"]))
            .or_insert_with(|| vec![0; bounds.len() + 1]);
        for (sum, v) in merged
            .iter_mut()
            .zip(row["buckets"].as_array().into_iter().flatten())
        {
            *sum += v.as_u64().unwrap_or(0);
        }
    }
    let mut latency: Vec<(String, u64, Option<u64>)> = by_payee
        .into_iter()
        .map(|(payee, buckets)| {
            let total: u64 = buckets.iter().sum();
            (payee, total, p99(&buckets, &bounds))
        })
        .collect();
    latency.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    let bars: Vec<(String, u64, String)> = latency
        .iter()
        .map(|(payee, total, p99)| {
            let value = p99.unwrap_or(60_000);
            let said = match p99 {
                Some(ms) => format!("{payee}: p99 at most {ms} ms over {total} transfers"),
                None => format!("{payee}: p99 over 60 s over {total} transfers"),
            };
            (payee.clone(), value, said)
        })
        .collect();
    let span = format!(
        "{} to {}",
        page::time(&page::text(&stats["from"])),
        page::time(&page::text(&stats["to"]))
    );
    let counted = stats["countedThroughFeedSeq"].as_u64().unwrap_or(0);
    let newest = stats["feedNewest"].as_u64().unwrap_or(0);
    html! {
        h1 { "Dashboard" }
        nav.presets aria-label="Range" {
            @for (name, _) in hub::rollup::PRESETS {
                @if name == range {
                    a href={ "/console/dashboard?range=" (name) } aria-current="page" { (name) }
                } @else {
                    a href={ "/console/dashboard?range=" (name) } { (name) }
                }
                " "
            }
        }
        p.muted {
            "Finished transfers per hour (UTC), " (span) ". "
            @if newest > counted {
                "The rollup is " (newest - counted) " changes behind the feed."
            } @else {
                "Counted through change " (counted) "."
            }
        }
        (section("by-currency", "Transfers per hour by currency",
            "Committed and failed transfers each hour, a line per currency.",
            &labels, &currencies, Columns::Currency))
        (section("by-payer", "Transfers per hour by payer",
            "Committed and failed transfers each hour, a line per payer DFSP (the eight busiest, then others).",
            &labels, &payers, Columns::Dfsp))
        (section("by-payee", "Transfers per hour by payee",
            "Committed and failed transfers each hour, a line per payee DFSP (the eight busiest, then others).",
            &labels, &payees, Columns::Dfsp))
        section aria-labelledby="failures-heading" {
            h2 #failures-heading { "Failures by error code" }
            (chart::lines("failures", "Failures per hour by error code",
                "Aborted, expired and rejected transfers each hour, a line per FSPIOP error code.",
                &labels, &codes.series(), "failures"))
            (totals_table(&codes, "Error code", Columns::Code))
        }
        section aria-labelledby="latency-heading" {
            h2 #latency-heading { "p99 latency per DFSP" }
            (chart::bars("latency", "p99 prepare-to-finish time per payee DFSP (ms)",
                "The time within which 99 of 100 transfers to each payee were finished, as the upper bound of its bucket.",
                &bars, "No finished transfers in this range"))
            table {
                caption { "p99 prepare-to-finish time per payee" }
                thead { tr { th scope="col" { "Payee" } th scope="col" { "Transfers" } th scope="col" { "p99" } } }
                tbody {
                    @for (payee, total, p99) in &latency {
                        tr {
                            th scope="row" { (payee) }
                            td.num { (page::count(*total)) }
                            td.num { @match p99 { Some(ms) => { "≤ " (ms) " ms" } None => { "> 60 s" } } }
                        }
                    }
                }
            }
        }
    }
}

/// A percentile's bucket bound (`None`: above the last).
fn p99(buckets: &[u64], bounds: &[u64]) -> Option<u64> {
    let total: u64 = buckets.iter().sum();
    let rank = (total * 99).div_ceil(100).max(1);
    let mut seen = 0;
    for (i, count) in buckets.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return bounds.get(i).copied();
        }
    }
    None
}

fn section(
    id: &str,
    title: &str,
    desc: &str,
    labels: &[String],
    tally: &Tally,
    columns: Columns,
) -> Markup {
    let heading = format!("{id}-heading");
    let first = match columns {
        Columns::Currency => "Currency",
        _ => "DFSP",
    };
    html! {
        section aria-labelledby=(heading) {
            h2 id=(heading) { (title) }
            (chart::lines(id, title, desc, labels, &tally.series(), "transfers"))
            (totals_table(tally, first, columns))
        }
    }
}

/// The chart's table: each series' totals over the range.
fn totals_table(tally: &Tally, first: &str, columns: Columns) -> Markup {
    let amounts = columns == Columns::Currency;
    let committed = columns != Columns::Code;
    let mut names: Vec<&String> = tally.hours.keys().collect();
    names.sort_by(|a, b| tally.total(b).cmp(&tally.total(a)).then(a.cmp(b)));
    html! {
        table {
            thead {
                tr {
                    th scope="col" { (first) }
                    @if committed { th scope="col" { "Committed" } }
                    @if amounts { th scope="col" { "Amount committed" } }
                    th scope="col" { "Failed" }
                }
            }
            tbody {
                @for name in names {
                    tr {
                        th scope="row" { (name) }
                        @if committed {
                            td.num { (page::count(tally.committed.get(name).copied().unwrap_or(0))) }
                        }
                        @if amounts {
                            td.num { (page::money(&tally.amount.get(name).copied().unwrap_or(Amount::ZERO).to_string(), name)) }
                        }
                        td.num { (page::count(tally.failed.get(name).copied().unwrap_or(0))) }
                    }
                }
            }
        }
    }
}
