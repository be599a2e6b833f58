//! Transfers: a search of the stored transfers (`GET /transfers`, page
//! by page), one found by id with the timeline of its phases (a
//! conversion, found by its `commitRequestId`, with its terms and a link to
//! the transfer it was made for; that transfer with a link back to it), the
//! recent failures by error code, and the callbacks the hub could not
//! deliver.

use axum::extract::Query;
use axum::http::Method;
use axum::response::Response;
use hub::access::Role;
use maud::{html, Markup};
use serde_json::Value;

use crate::page::{self, Section};
use crate::session::{Posted, Visitor};

#[derive(serde::Deserialize)]
pub(crate) struct Find {
    id: Option<String>,
    /// The search's filters, passed on as `GET /transfers` names them.
    #[serde(flatten)]
    search: std::collections::BTreeMap<String, String>,
}

/// The search filters the page offers: the API's name, the label, a hint.
const FILTERS: [(&str, &str, &str); 14] = [
    ("payer", "Payer", "DFSP"),
    ("payee", "Payee", "DFSP"),
    ("partyIdType", "Party id type", "MSISDN"),
    ("partyIdentifier", "Party id", "27713803912"),
    ("partySubIdOrType", "Party sub-id", "(if it has one)"),
    ("partyRole", "Party is the", "payer, payee, or either"),
    ("state", "State", "COMMITTED, ABORTED, …"),
    ("currency", "Currency", "USD"),
    ("errorCode", "Error code", "4001"),
    ("minAmount", "From amount", "100"),
    ("maxAmount", "To amount", "250"),
    ("settlementWindowId", "Window", "12"),
    ("from", "Prepared from", "2026-11-26 or a date-time"),
    ("to", "to", "2026-11-26 or a date-time"),
];

/// A filter's value as the API takes it: a day (`YYYY-MM-DD`) as the
/// start of `from`'s day or the end of `to`'s, anything else as given.
fn api_value(name: &str, value: &str) -> String {
    let day =
        value.len() == 10 && fspiop::parse_date_time(&format!("{value}T00:00:00.000Z")).is_some();
    match (name, day) {
        ("from", true) => format!("{value}T00:00:00.000Z"),
        ("to", true) => format!("{value}T23:59:59.999Z"),
        _ => value.to_string(),
    }
}

/// The filters given (non-empty, known), as a query string.
fn search_query(given: &std::collections::BTreeMap<String, String>) -> String {
    FILTERS
        .iter()
        .filter_map(|(name, _, _)| {
            let value = given.get(*name)?.trim();
            (!value.is_empty()).then(|| format!("{name}={}", page::encode(&api_value(name, value))))
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// The search form, its results and the link to the next page.
fn search_section(
    given: &std::collections::BTreeMap<String, String>,
    results: Option<&Result<Value, crate::api::ApiError>>,
) -> Markup {
    let value = |name: &str| given.get(name).map(String::as_str).unwrap_or("");
    let today_ms = hub::now_ms() / 86_400_000 * 86_400_000;
    let now_ms = hub::now_ms();
    html! {
        h2 #search { "Search" }
        form.filters method="get" action="/console/transfers#search" aria-labelledby="search" {
            @for (name, label, hint) in FILTERS {
                label for={ "search-" (name) } { (label) }
                input id={ "search-" (name) } name=(name) value=(value(name)) placeholder=(hint);
            }
            input type="hidden" name="searched" value="1";
            button type="submit" { "Search" }
            " "
            @for (label, back_ms) in page::DATE_PRESETS {
                @let from = if back_ms == 0 { today_ms } else { now_ms - back_ms };
                a.preset href={ "/console/transfers?searched=1&from=" (from) "#search" } { (label) }
                " "
            }
        }
        @match results {
            None => {}
            Some(Err(error)) => p.flash.error role="alert" { (error.message()) },
            Some(Ok(page)) => (search_results(given, page)),
        }
    }
}

fn search_results(given: &std::collections::BTreeMap<String, String>, page: &Value) -> Markup {
    let transfers: Vec<&Value> = page["transfers"].as_array().into_iter().flatten().collect();
    let next = page["next"].as_str();
    let complete = page["complete"].as_bool().unwrap_or(true);
    let mut onward = given.clone();
    onward.remove("after");
    let onward = search_query(&onward);
    html! {
        @if transfers.is_empty() {
            p { "No transfer matches" @if !complete { " so far" } "." }
        } @else {
            div.table-wrap {
                table.found {
                    thead { tr {
                        th scope="col" { "Prepared" }
                        th scope="col" { "Transfer" }
                        th scope="col" { "Payer → payee" }
                        th.num scope="col" { "Amount" }
                        th scope="col" { "State" }
                        th scope="col" { "Error" }
                    } }
                    tbody {
                        @for t in &transfers {
                            @let id = page::text(&t["transferId"]);
                            tr data-transfer=(id) {
                                td { (page::time_cell(&t["preparedAt"])) }
                                td { a href=(transfer_path(&id)) { code { (id) } } }
                                td { (page::text(&t["payerFsp"])) " → " (page::text(&t["payeeFsp"])) }
                                td.num { (page::text(&t["amount"]["amount"])) " " (page::text(&t["amount"]["currency"])) }
                                td { (page::text(&t["transferState"])) }
                                td { @if let Some(code) = t["errorCode"].as_str() { code { (code) } } }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(next) = next {
            p {
                @if !complete {
                    "The search looked through as many transfers as one page may; there may be older matches. "
                }
                a.next href={ "/console/transfers?searched=1&" (onward) "&after=" (page::encode(next)) "#search" } {
                    @if complete { "Older transfers →" } @else { "Continue searching →" }
                }
            }
        }
    }
}

pub(crate) async fn show(visitor: Visitor, Query(find): Query<Find>) -> Response {
    let id = find
        .id
        .as_deref()
        .map(str::trim)
        .filter(|id| !id.is_empty());
    let searched = find.search.contains_key("searched") || find.search.contains_key("after");
    let mut query = search_query(&find.search);
    if let Some(after) = find.search.get("after").filter(|a| !a.trim().is_empty()) {
        query.push_str(&format!("&after={}", page::encode(after.trim())));
    }
    let (found, messages, results, errors, dead) = tokio::join!(
        async {
            match id {
                Some(id) => Some(
                    visitor
                        .get(&format!("/transfers/{}", page::encode(id)))
                        .await,
                ),
                None => None,
            }
        },
        async {
            match id {
                Some(id) => visitor
                    .get_if_may(
                        "/transfers/:id/messages",
                        &format!("/transfers/{}/messages", page::encode(id)),
                    )
                    .await
                    .and_then(Result::ok),
                None => None,
            }
        },
        async {
            match searched {
                true => Some(visitor.get(&format!("/transfers?{query}")).await),
                false => None,
            }
        },
        // The scheme's failures and dead letters: not a DFSP's to read.
        async {
            visitor
                .get_if_may("/stats/transfer-errors", "/stats/transfer-errors?limit=50")
                .await
                .transpose()
        },
        async {
            visitor
                .get_if_may("/callbacks/dead-letters", "/callbacks/dead-letters")
                .await
                .transpose()
        },
    );
    let (errors, dead) = match (errors, dead) {
        (Ok(e), Ok(d)) => (e, d),
        (Err(e), _) | (_, Err(e)) => return page::api_failure(&visitor, Section::Transfers, &e),
    };
    let content = html! {
        h1 { "Transfers" }
        form.search method="get" action="/console/transfers" role="search" {
            label for="transfer-id" { "Transfer or conversion id" }
            input #transfer-id name="id" value=(id.unwrap_or("")) placeholder="UUID or ULID" autocomplete="off" required;
            button type="submit" { "Find" }
        }
        @match found {
            None => {}
            Some(Ok(transfer)) => {
                (transfer_detail(visitor.session.caller.role, &transfer))
                @if let Some(messages) = &messages { (wire_messages(messages)) }
            }
            Some(Err(error)) => {
                @if error.not_found() {
                    p.flash.error role="alert" { "No transfer with id " code { (id.unwrap_or("")) } " is known to the hub." }
                } @else {
                    p.flash.error role="alert" { (error.message()) }
                }
            }
        }
        (search_section(&find.search, results.as_ref()))
        @if let Some(errors) = &errors {
            h2 { "Recent failures" }
            (failures(errors))
        }
        @if let Some(dead) = &dead {
            h2 #dead-letters { "Undelivered callbacks (dead letters)" }
            (dead_letters(&visitor, dead))
        }
    };
    page::render(&visitor, Section::Transfers, "Transfers", content)
}

fn transfer_path(id: &str) -> String {
    format!("/console/transfers?id={}", page::encode(id))
}

/// The settlement window a committed transfer fell in, linked to that
/// window's page when the person may open the settlement pages.
fn window_link(role: Role, window: &Value) -> Markup {
    let id = page::text(window);
    let linked = hub::access::may(role, &Method::GET, "/console/settlement", &[]);
    html! {
        @if linked { a.window href=(crate::settlement::window_path(&id)) { "Window " (id) } }
        @else { "Window " (id) }
    }
}

/// A DFSP's name, linked to its page when the person may open it (a
/// DFSP's person sees the other party's name, not a link it may not follow).
fn participant_link(role: Role, name: &str) -> Markup {
    let linked = hub::access::may(
        role,
        &Method::GET,
        "/console/participants/:name",
        &[("name", name)],
    );
    html! {
        @if linked { a href={ "/console/participants/" (page::encode(name)) } { (name) } }
        @else { (name) }
    }
}

fn transfer_detail(role: Role, t: &Value) -> Markup {
    let currency = page::text(&t["amount"]["currency"]);
    let state = page::text(&t["transferState"]);
    let fx = &t["fx"];
    let conversion = t["kind"] == "fxTransfer";
    let (payer_label, payee_label, amount_label) = if conversion {
        ("Initiating DFSP", "FXP", "Source amount")
    } else {
        ("Payer", "Payee", "Amount")
    };
    html! {
        section.transfer aria-labelledby="transfer-title" {
            h2 #transfer-title { (if conversion { "Conversion " } else { "Transfer " }) code { (page::text(&t["transferId"])) } }
            dl.effect {
                dt { "State" } dd { (page::state_badge(&state))
                    @if let Some(internal) = t["internalState"].as_str() { @if internal != state { " (" (internal) ")" } } }
                dt { "Kind" } dd { (kind_name(&page::text(&t["kind"]))) }
                dt { (payer_label) } dd { (participant_link(role, &page::text(&t["payerFsp"]))) }
                dt { (payee_label) } dd { (participant_link(role, &page::text(&t["payeeFsp"]))) }
                dt { (amount_label) } dd.num { (page::money(&page::text(&t["amount"]["amount"]), &currency)) }
                dt { "Expiration" } dd { (page::time_cell(&t["expiration"])) }
                @if !t["settlementWindowId"].is_null() {
                    dt { "Settlement window" } dd { (window_link(role, &t["settlementWindowId"])) }
                }
                @if t["errorCode"].is_string() {
                    dt { "Error" } dd { code { (page::text(&t["errorCode"])) } " " (page::text(&t["errorDescription"])) }
                }
                dt { "Read from" } dd { (if t["source"] == "store" { "the store (past the hub's memory horizon)" } else { "the ledger's memory" }) }
            }
            @match fx["role"].as_str() {
                Some("conversion") => (conversion_side(role, t, fx)),
                Some("dependentTransfer") => (dependent_side(role, t, fx)),
                _ => {}
            }
            h3 { "Timeline" }
            ol.timeline {
                @for step in t["timeline"].as_array().into_iter().flatten() {
                    li { span.phase { (page::text(&step["phase"])) } " " (page::time_cell_ms(&step["at"])) }
                }
            }
        }
    }
}

/// The transfer's messages as they crossed the hub (the wire log): one
/// line each, its headers and body behind it, as received or sent.
fn wire_messages(found: &Value) -> Markup {
    let list = found["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    html! {
        section.messages aria-labelledby="messages-title" {
            h3 #messages-title { "Messages" }
            @if found["enabled"] == false {
                p.muted { "The hub keeps no messages (" code { "--wire-log off" } ")." }
            } @else if list.is_empty() {
                p.muted { "None kept: older than the wire log's retention, or not yet written." }
            } @else {
                @if found["transaction"].is_object() { (transaction(&found["transaction"], &found["quote"])) }
                @if found["complete"] == false {
                    p.muted { "Searched through " (page::text(&found["searchedThrough"])) " only." }
                }
                ol.wire {
                    @for message in list { li { (wire_message(message)) } }
                }
            }
        }
    }
}

/// A party of the transaction, as a person reads it.
fn party(party: &Value) -> String {
    let info = &party["partyIdInfo"];
    let mut text = format!(
        "{} {}",
        page::text(&info["partyIdType"]),
        page::text(&info["partyIdentifier"])
    );
    if let Some(sub_id) = info["partySubIdOrType"].as_str() {
        text.push_str(&format!(" / {sub_id}"));
    }
    if let Some(fsp) = info["fspId"].as_str() {
        text.push_str(&format!(" at {fsp}"));
    }
    if let Some(name) = party["name"].as_str() {
        text.push_str(&format!(" ({name})"));
    }
    text
}

/// The transaction the prepare's ILP packet carries, and its quote when
/// the hub kept it.
fn transaction(transaction: &Value, quote: &Value) -> Markup {
    html! {
        h4 { "Transaction (from the prepare's ILP packet)" }
        dl.effect {
            dt { "Payer party" } dd { (party(&transaction["payer"])) }
            dt { "Payee party" } dd { (party(&transaction["payee"])) }
            dt { "Transaction id" } dd { code { (page::text(&transaction["transactionId"])) } }
            dt { "Quote id" } dd { code { (page::text(&transaction["quoteId"])) } }
            @if let Some(note) = transaction["note"].as_str() { dt { "Note" } dd { (note) } }
        }
        @if quote.is_object() {
            details {
                summary { "Quote " @if quote["answerIsError"] == true { "(answered with an error)" } @else { "as the payee answered it" } }
                pre.body { (serde_json::to_string_pretty(&quote["answer"]).unwrap_or_default()) }
            }
        }
    }
}

fn wire_message(message: &Value) -> Markup {
    let inbound = message["direction"] == "in";
    let peer = page::text(&message["peer"]);
    let outcome = match (message["status"].as_u64(), message["note"].as_str()) {
        (Some(status), _) => status.to_string(),
        (None, Some(note)) => format!("no answer: {note}"),
        (None, None) => "no answer".to_string(),
    };
    let headers = message["headers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    html! {
        details {
            summary {
                (page::time_cell(&message["at"])) " "
                @if inbound { (peer) " → hub " } @else { "hub → " (peer) " " }
                code { (page::text(&message["method"])) " " (page::text(&message["target"])) }
                " " span.status { (outcome) }
                @if let Some(attempt) = message["attempt"].as_u64().filter(|a| *a > 1) { " (attempt " (attempt) ")" }
            }
            table.headers {
                @for pair in headers {
                    tr { th scope="row" { (page::text(&pair[0])) } td { code { (page::text(&pair[1])) } } }
                }
            }
            @if let Some(body) = message["body"].as_str().filter(|b| !b.is_empty()) {
                pre.body { (body) }
            } @else if let Some(body) = message["bodyBase64"].as_str() {
                p.muted { "Body (not UTF-8, base64):" } pre.body { (body) }
            }
        }
    }
}

/// The admin API's kind, as a person reads it.
fn kind_name(kind: &str) -> &str {
    match kind {
        "fxTransfer" => "currency conversion (fxTransfer)",
        "fundsIn" => "funds in",
        "fundsOut" => "funds out",
        other => other,
    }
}

/// The other leg's state, as the hub read it (absent: no such leg, or
/// one that does not point back).
fn partner_state(state: &Value, absent: &str) -> Markup {
    html! {
        @match state.as_str() {
            Some(state) => (page::state_badge(state)),
            None => span.muted { (absent) },
        }
    }
}

/// A conversion's terms and the transfer it was made for: the FXP's
/// source-currency position is credited with the source amount when that
/// transfer commits, and its target-currency position pays the payee.
fn conversion_side(role: Role, t: &Value, fx: &Value) -> Markup {
    let determining = page::text(&fx["determiningTransferId"]);
    let source_amount = page::text(&t["amount"]["amount"]);
    let source_currency = page::text(&t["amount"]["currency"]);
    let target_amount = page::text(&fx["targetAmount"]["amount"]);
    let target_currency = page::text(&fx["targetAmount"]["currency"]);
    html! {
        section.fx aria-labelledby="fx-title" {
            h3 #fx-title { "Currency conversion" }
            dl.effect.fx {
                dt { "Converts" } dd { (page::money(&source_amount, &source_currency)) " → " (page::money(&target_amount, &target_currency)) }
                @if let Some(rate) = rate(&source_amount, &target_amount) {
                    dt { "Rate" } dd { "1 " (source_currency) " = " (rate) " " (target_currency) }
                }
                dt { "FXP accepted" } dd {
                    @if fx["fxpAcceptedAt"].is_string() { (page::time_cell_ms(&fx["fxpAcceptedAt"])) }
                    @else { span.muted { "not yet" } }
                }
                dt { "Dependent transfer" } dd.dependent {
                    a href=(transfer_path(&determining)) { code { (determining) } } " "
                    (partner_state(&fx["dependentState"], "not prepared (yet)"))
                }
                @if let Some(payee) = fx["dependentPayeeFsp"].as_str() {
                    dt { "Paid to" } dd { (participant_link(role, payee)) " in " (target_currency) }
                }
            }
            p.hint { "The conversion and its dependent transfer commit together, in one ledger step, or neither does." }
        }
    }
}

/// The conversion a transfer depends on: its FXP's target-currency
/// position pays the payee.
fn dependent_side(role: Role, t: &Value, fx: &Value) -> Markup {
    let commit_request = page::text(&fx["commitRequestId"]);
    let fxp = page::text(&fx["fxpFsp"]);
    html! {
        section.fx aria-labelledby="fx-title" {
            h3 #fx-title { "Paid through a currency conversion" }
            dl.effect.fx {
                dt { "Conversion" } dd.conversion {
                    a href=(transfer_path(&commit_request)) { code { (commit_request) } } " "
                    (partner_state(&fx["conversionState"], "not found"))
                }
                dt { "FXP" } dd { (participant_link(role, &fxp)) " (its " (page::text(&t["amount"]["currency"])) " position pays the payee)" }
            }
            p.hint { "The transfer and its conversion commit together, in one ledger step, or neither does." }
        }
    }
}

/// Target units per source unit, for reading (never used as an amount):
/// up to 6 decimals, trailing zeros dropped.
fn rate(source: &str, target: &str) -> Option<String> {
    let source: f64 = source.parse().ok()?;
    let target: f64 = target.parse().ok()?;
    if source <= 0.0 || !target.is_finite() {
        return None;
    }
    let shown = format!("{:.6}", target / source);
    let shown = shown.trim_end_matches('0').trim_end_matches('.');
    Some(page::grouped(shown))
}

fn failures(errors: &Value) -> Markup {
    let by_code: Vec<&Value> = errors["byCode"].as_array().into_iter().flatten().collect();
    let recent: Vec<&Value> = errors["recent"].as_array().into_iter().flatten().collect();
    html! {
        @if by_code.is_empty() {
            p { "No transfer has failed since the hub started." }
        } @else {
            div.table-wrap {
                table.codes {
                    caption { "Failures by error code, since the hub started" }
                    thead { tr { th scope="col" { "Code" } th.num scope="col" { "Transfers" } } }
                    tbody {
                        @for c in &by_code {
                            tr { td { code { (page::text(&c["code"])) } } td.num { (page::count(c["count"].as_u64().unwrap_or(0))) } }
                        }
                    }
                }
            }
            div.table-wrap {
                table {
                    caption { "The latest failures, newest first" }
                    thead { tr {
                        th scope="col" { "When" }
                        th scope="col" { "Transfer" }
                        th scope="col" { "Payer → payee" }
                        th scope="col" { "Phase" }
                        th scope="col" { "Error" }
                    } }
                    tbody {
                        @for f in &recent {
                            @let id = page::text(&f["transferId"]);
                            tr {
                                td { (page::time_cell(&f["at"])) }
                                td { a href={ "/console/transfers?id=" (page::encode(&id)) } { code { (id) } } }
                                td { (page::text(&f["payerFsp"])) " → " (page::text(&f["payeeFsp"])) }
                                td { (page::text(&f["phase"])) }
                                td { code { (page::text(&f["errorCode"])) } " " (page::text(&f["errorDescription"])) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn dead_letters(visitor: &Visitor, dead: &Value) -> Markup {
    let letters: Vec<&Value> = dead.as_array().into_iter().flatten().collect();
    let mut dfsps: Vec<String> = letters
        .iter()
        .map(|l| page::text(&l["participant"]))
        .collect();
    dfsps.sort();
    dfsps.dedup();
    html! {
        @if letters.is_empty() {
            p { "None: every callback was delivered or is still being tried." }
        } @else {
            p.hint { (letters.len()) " callbacks were given up after their retries; a DFSP can still GET the transfer. Resend a DFSP's once it answers again ("
                code { "POST /callbacks/dead-letters/resend" } ")." }
            @if visitor.may_post("/console/transfers/dead-letters/resend") {
                div.actions {
                    @for dfsp in &dfsps {
                        (page::button_form(visitor, &format!("/console/transfers/dead-letters/resend?participant={}", page::encode(dfsp)), &format!("Resend {dfsp}'s"), ""))
                    }
                }
            }
            div.table-wrap {
                table {
                    thead { tr {
                        th scope="col" { "Failed" }
                        th scope="col" { "DFSP" }
                        th scope="col" { "Transfer" }
                        th scope="col" { "Call" }
                        th scope="col" { "Why" }
                    } }
                    tbody {
                        @for l in letters.iter().take(100) {
                            tr {
                                td { (page::time_cell(&l["failedAt"])) }
                                td { (page::text(&l["participant"])) }
                                td { code { (page::text(&l["transferId"])) } }
                                td { code.url { (page::text(&l["method"])) " " (page::text(&l["url"])) } }
                                td { (page::text(&l["reason"])) }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[derive(serde::Deserialize)]
pub(crate) struct Participant {
    participant: String,
}

/// Sends a DFSP's dead letters again (they are kept again if they fail).
pub(crate) async fn resend(
    Query(query): Query<Participant>,
    Posted { visitor, .. }: Posted,
) -> Response {
    let path = format!(
        "/callbacks/dead-letters/resend?participant={}",
        page::encode(&query.participant)
    );
    let result = visitor.call(Method::POST, &path, None).await;
    let done = |answer: &Value| {
        format!(
            "{} dead letters of {} sent again",
            page::text(&answer["resent"]),
            query.participant
        )
    };
    visitor.after_change(result, done, "/console/transfers#dead-letters")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_shown_grouped_without_trailing_zeros() {
        assert_eq!(rate("300", "750000").as_deref(), Some("2,500"));
        assert_eq!(rate("750000", "300").as_deref(), Some("0.0004"));
        assert_eq!(rate("3", "1").as_deref(), Some("0.333333"));
        assert_eq!(rate("0", "1"), None);
        assert_eq!(rate("x", "1"), None);
    }

    #[test]
    fn a_dfsp_sees_the_other_party_named_not_linked() {
        let transfer = serde_json::json!({
            "transferId": "t1", "kind": "transfer", "payerFsp": "payerfsp", "payeeFsp": "payeefsp",
            "amount": {"amount": "10", "currency": "USD"}, "transferState": "COMMITTED",
            "source": "memory", "timeline": [],
        });
        let payer = Role::Dfsp(ledger::FspName::new("payerfsp").unwrap());
        let html = transfer_detail(payer, &transfer).into_string();
        assert!(
            html.contains(r#"href="/console/participants/payerfsp""#),
            "{html}"
        );
        assert!(
            !html.contains(r#"href="/console/participants/payeefsp""#),
            "{html}"
        );
        assert!(html.contains("payeefsp"), "{html}");
    }

    #[test]
    fn a_committed_transfer_links_to_the_window_it_fell_in() {
        let mut transfer = serde_json::json!({
            "transferId": "t1", "kind": "transfer", "payerFsp": "payerfsp", "payeeFsp": "payeefsp",
            "amount": {"amount": "10", "currency": "USD"}, "transferState": "COMMITTED",
            "settlementWindowId": 12, "source": "store", "timeline": [],
        });
        let html = transfer_detail(Role::Viewer, &transfer).into_string();
        assert!(
            html.contains(r#"href="/console/settlement?window=12#window-12""#),
            "{html}"
        );
        assert!(html.contains("Window 12"), "{html}");
        transfer["transferState"] = "RESERVED".into();
        transfer
            .as_object_mut()
            .unwrap()
            .remove("settlementWindowId");
        let html = transfer_detail(Role::Viewer, &transfer).into_string();
        assert!(!html.contains("Settlement window"), "{html}");
    }

    #[test]
    fn both_legs_link_to_each_other() {
        let conversion = serde_json::json!({
            "transferId": "c1", "kind": "fxTransfer", "payerFsp": "payerfsp", "payeeFsp": "fxp",
            "amount": {"amount": "300", "currency": "USD"}, "transferState": "RESERVED",
            "source": "memory", "timeline": [],
            "fx": {"role": "conversion", "determiningTransferId": "t1",
                   "targetAmount": {"amount": "750000", "currency": "TZS"},
                   "dependentPayeeFsp": "payeefsp", "dependentState": "RESERVED"},
        });
        let html = transfer_detail(Role::Operator, &conversion).into_string();
        assert!(
            html.contains(r#"href="/console/transfers?id=t1""#),
            "{html}"
        );
        assert!(html.contains("750,000"), "{html}");
        assert!(html.contains("1 USD = 2,500 TZS"), "{html}");
        assert!(html.contains("not yet"), "not accepted: {html}");
        let dependent = serde_json::json!({
            "transferId": "t1", "kind": "transfer", "payerFsp": "payerfsp", "payeeFsp": "payeefsp",
            "amount": {"amount": "750000", "currency": "TZS"}, "transferState": "COMMITTED",
            "source": "store", "timeline": [],
            "fx": {"role": "dependentTransfer", "commitRequestId": "c1", "fxpFsp": "fxp"},
        });
        let html = transfer_detail(Role::Operator, &dependent).into_string();
        assert!(
            html.contains(r#"href="/console/transfers?id=c1""#),
            "{html}"
        );
        assert!(
            html.contains(r#"href="/console/participants/fxp""#),
            "{html}"
        );
        assert!(html.contains("not found"), "no conversion read: {html}");
    }
}
