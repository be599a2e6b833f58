//! A DFSP's statement (`GET /participants/{name}/statement`): a currency,
//! a range (date presets as the transfer search's), the opening balance,
//! the movements a page at a time with their running balances, the
//! closing balance, and the CSV of the range as a download.

use axum::extract::{Path, Query};
use axum::response::Response;
use maud::{html, Markup};
use serde_json::Value;

use crate::page::{self, Section};
use crate::session::Visitor;

#[derive(serde::Deserialize, Default)]
pub(crate) struct Asked {
    currency: Option<String>,
    from: Option<String>,
    to: Option<String>,
    after: Option<String>,
}

fn statement_path(name: &str) -> String {
    format!("/console/participants/{}/statement", page::encode(name))
}

/// A day (`YYYY-MM-DD`) as the start of `from`'s day or of the day after
/// `to`'s (the range is `[from, to)`), anything else as given.
fn api_value(name: &str, value: &str) -> String {
    let day_ms = (value.len() == 10)
        .then(|| fspiop::parse_date_time(&format!("{value}T00:00:00.000Z")))
        .flatten();
    match (name, day_ms) {
        ("from", Some(ms)) => ms.to_string(),
        ("to", Some(ms)) => (ms + 86_400_000).to_string(),
        _ => value.to_string(),
    }
}

/// The API's query for what was asked (and `after`, when going on).
fn api_query(asked: &Asked, with_after: bool) -> String {
    let mut pairs = Vec::new();
    for (name, value) in [
        ("currency", &asked.currency),
        ("from", &asked.from),
        ("to", &asked.to),
    ] {
        if let Some(value) = value.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            pairs.push(format!("{name}={}", page::encode(&api_value(name, value))));
        }
    }
    if with_after {
        if let Some(after) = asked.after.as_deref().filter(|a| !a.is_empty()) {
            pairs.push(format!("after={}", page::encode(after)));
        }
    }
    pairs.join("&")
}

/// `GET /console/participants/{name}/statement`.
pub(crate) async fn show(
    visitor: Visitor,
    Path(name): Path<String>,
    Query(asked): Query<Asked>,
) -> Response {
    // The auditor reads statements, not accounts: it names the currency.
    let may_accounts = visitor.may(
        &axum::http::Method::GET,
        "/participants/:name/accounts",
        &[("name", name.as_str())],
    );
    let accounts = match may_accounts {
        true => match visitor
            .get(&format!("/participants/{}/accounts", page::encode(&name)))
            .await
        {
            Ok(accounts) => accounts,
            Err(e) => return page::api_failure(&visitor, Section::Participants, &e),
        },
        false => Value::Null,
    };
    let mut currencies: Vec<String> = accounts
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| page::text(&a["currency"]))
        .collect();
    currencies.sort();
    currencies.dedup();
    let mut asked = asked;
    if asked.currency.as_deref().is_none_or(str::is_empty) {
        asked.currency = currencies.first().cloned();
    }
    let read = match asked.currency {
        Some(_) => Some(
            visitor
                .get(&format!(
                    "/participants/{}/statement?limit=100&{}",
                    page::encode(&name),
                    api_query(&asked, true)
                ))
                .await,
        ),
        None => None,
    };
    let here = statement_path(&name);
    let today_ms = hub::now_ms() / 86_400_000 * 86_400_000;
    let now_ms = hub::now_ms();
    let currency = asked.currency.clone().unwrap_or_default();
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let content = html! {
        h1 { "Statement of " a href={ "/console/participants/" (page::encode(&name)) } { (name) } }
        form.filters method="get" action=(here) aria-label="Statement" {
            label for="statement-currency" { "Currency" }
            @if currencies.is_empty() {
                input #statement-currency name="currency" value=(currency) placeholder="USD" required;
            } @else {
                select #statement-currency name="currency" {
                    @for c in &currencies {
                        option value=(c) selected[*c == currency] { (c) }
                    }
                }
            }
            label for="statement-from" { "From" }
            input #statement-from name="from" value=(value(&asked.from)) placeholder="2026-11-01 or a date-time";
            label for="statement-to" { "To (not included)" }
            input #statement-to name="to" value=(value(&asked.to)) placeholder="now";
            button type="submit" { "Show" }
            " "
            @for (label, back_ms) in page::DATE_PRESETS {
                @let from = if back_ms == 0 { today_ms } else { now_ms - back_ms };
                a.preset href={ (here) "?currency=" (page::encode(&currency)) "&from=" (from) } { (label) }
                " "
            }
        }
        @match &read {
            None => @if may_accounts { p { "This participant has no accounts." } },
            Some(Err(error)) => p.flash.error role="alert" { (error.message()) },
            Some(Ok(statement)) => (statement_table(&here, &asked, statement)),
        }
        p.hint { "Balances are the ledger's: a debit raises a POSITION (what the DFSP owes); a SETTLEMENT account is negative by the funds deposited. Reservations are not movements: a transfer moves the position when it commits." }
    };
    page::render(
        &visitor,
        Section::Participants,
        &format!("Statement of {name}"),
        content,
    )
}

fn balances(label: &str, balances: &Value, currency: &str) -> Markup {
    html! {
        tr.balance {
            th scope="row" colspan="5" { (label) }
            td.num { "POSITION " (page::money(&page::text(&balances["POSITION"]), currency)) }
            td.num { "SETTLEMENT " (page::money(&page::text(&balances["SETTLEMENT"]), currency)) }
        }
    }
}

fn statement_table(here: &str, asked: &Asked, statement: &Value) -> Markup {
    let currency = page::text(&statement["currency"]);
    let movements: Vec<&Value> = statement["movements"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let complete = statement["complete"].as_bool().unwrap_or(true);
    let onward = api_query(asked, false);
    html! {
        p {
            "From " (page::time_cell(&statement["from"])) " to " (page::time_cell(&statement["to"])) ". "
            a.button href={ (here) ".csv?" (onward) } download="statement.csv" { "Download the statement (CSV)" }
        }
        div.table-wrap {
            table.statement {
                thead { tr {
                    th scope="col" { "Committed" }
                    th scope="col" { "Kind" }
                    th scope="col" { "Account" }
                    th scope="col" { "Transfer" }
                    th scope="col" { "Counterparty" }
                    th.num scope="col" { "Amount" }
                    th.num scope="col" { "Balance" }
                } }
                tbody {
                    @if let Some(opening) = statement.get("openingBalance") {
                        (balances("Opening balance", opening, &currency))
                    }
                    @if let Some(before) = statement.get("balanceBefore") {
                        (balances("Carried over", before, &currency))
                    }
                    @for m in &movements {
                        tr {
                            td { (page::time_cell(&m["at"])) }
                            td { (page::text(&m["kind"])) }
                            td { (page::text(&m["ledgerAccountType"])) }
                            td {
                                @if let Some(id) = m["transferId"].as_str() {
                                    a href={ "/console/transfers?id=" (page::encode(id)) } { code { (id) } }
                                } @else if let Some(id) = m["settlementId"].as_u64() {
                                    a href={ "/console/settlement/settlements/" (id) } { "settlement " (id) }
                                }
                            }
                            td { (page::text(&m["counterparty"])) }
                            td.num { (page::money(&page::text(&m["amount"]), &currency)) }
                            td.num { (page::money(&page::text(&m["balance"]), &currency)) }
                        }
                    }
                    @if let Some(closing) = statement.get("closingBalance") {
                        (balances("Closing balance", closing, &currency))
                    }
                }
            }
        }
        @if movements.is_empty() && statement.get("closingBalance").is_some() {
            p { "No movement in this range." }
        }
        @if let Some(next) = statement["next"].as_str() {
            p {
                @if !complete {
                    "The statement looked through as many commits as one page may. "
                }
                a.next href={ (here) "?" (onward) "&after=" (page::encode(next)) } {
                    @if complete { "Next movements →" } @else { "Continue →" }
                }
            }
        }
    }
}

/// `GET /console/participants/{name}/statement.csv`: the API's CSV, as a
/// download.
pub(crate) async fn csv(
    visitor: Visitor,
    Path(name): Path<String>,
    Query(asked): Query<Asked>,
) -> Response {
    let safe: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    page::csv_download(
        &visitor,
        &format!(
            "/participants/{}/statement?{}",
            page::encode(&name),
            api_query(&asked, false)
        ),
        &format!("statement-{safe}.csv"),
        Section::Participants,
    )
    .await
}
