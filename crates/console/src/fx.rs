//! Foreign exchange: the FXPs (foreign-exchange providers) the operator
//! declared, the corridors each converts and its position in every
//! currency it holds (`GET /fxps`), and the set-up of one participant's
//! corridors (`GET|PUT /participants/{name}/fxCorridors`, audited
//! `fxp.corridors`): what the hub answers to `GET /services/FXP`.
//!
//! The set-up form offers the corridors between the currencies the
//! participant holds a position in: an FXP's conversion credits its
//! source-currency position and its dependent transfer debits its
//! target-currency position, so a corridor in a currency it does not hold
//! could be declared but never used. A declared corridor outside them (the
//! API takes one) is shown, marked, and can be withdrawn.

use axum::extract::Query;
use axum::http::Method;
use axum::response::Response;
use maud::{html, Markup};
use serde_json::{json, Value};

use crate::api::ApiError;
use crate::page::{self, Flash, Section};
use crate::participants::{
    corridor_list, corridor_pairs, standing_cells, standing_headers, standings,
};
use crate::session::{Posted, Visitor};

const HERE: &str = "/console/fx";

fn set_up_path(name: &str) -> String {
    format!("{HERE}?participant={}#corridors", page::encode(name))
}

#[derive(serde::Deserialize)]
pub(crate) struct FxQuery {
    /// The participant whose corridors are set up.
    participant: Option<String>,
}

/// An FXP as the page shows it.
struct Fxp {
    name: String,
    active: bool,
    corridors: Vec<(String, String)>,
    standings: Vec<crate::participants::Standing>,
}

/// One participant's corridors, and the currencies it holds a position in.
struct SetUp {
    name: String,
    corridors: Vec<(String, String)>,
    held: Vec<String>,
}

async fn set_up(visitor: &Visitor, name: &str) -> Result<SetUp, ApiError> {
    let path = format!("/participants/{}", page::encode(name));
    let (accounts, corridors) = tokio::join!(
        visitor.get(format!("{path}/accounts")),
        visitor.get(format!("{path}/fxCorridors")),
    );
    let held = standings(&accounts?, &[])
        .into_iter()
        .map(|s| s.currency)
        .collect();
    Ok(SetUp {
        name: name.to_string(),
        corridors: corridor_pairs(&corridors?),
        held,
    })
}

pub(crate) async fn show(visitor: Visitor, Query(query): Query<FxQuery>) -> Response {
    let chosen_name = query
        .participant
        .as_deref()
        .map(str::trim)
        .filter(|name| !name.is_empty());
    let (fxps, participants, limits, chosen) = tokio::join!(
        visitor.get("/fxps"),
        visitor.get("/participants"),
        visitor.get("/participants/limits"),
        async {
            match chosen_name {
                Some(name) => Some(set_up(&visitor, name).await),
                None => None,
            }
        },
    );
    let (fxps, participants, limits) = match (fxps, participants, limits) {
        (Ok(f), Ok(p), Ok(l)) => (f, p, l),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            return page::api_failure(&visitor, Section::Fx, &e)
        }
    };
    // A handful of FXPs in a scheme: their accounts are read one by one.
    let mut listed = Vec::new();
    for fxp in fxps.as_array().into_iter().flatten() {
        let name = page::text(&fxp["name"]);
        let accounts = match visitor
            .get(format!("/participants/{}/accounts", page::encode(&name)))
            .await
        {
            Ok(accounts) => accounts,
            Err(e) => return page::api_failure(&visitor, Section::Fx, &e),
        };
        let caps: Vec<&Value> = limits
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["name"] == name.as_str())
            .collect();
        listed.push(Fxp {
            active: fxp["isActive"] == 1,
            corridors: corridor_pairs(fxp),
            standings: standings(&accounts, &caps),
            name,
        });
    }
    let candidates: Vec<String> = participants
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| page::text(&p["name"]))
        .filter(|name| *name != visitor.console.hub_name)
        .collect();
    let may_change = visitor.may_post("/console/fx/corridors");
    let content = html! {
        h1 { "Foreign exchange" }
        p.hint {
            "An FXP converts a payer's currency into the payee's: its conversion (" code { "POST /fxTransfers" } ") credits its position in the source currency, "
            "the transfer that depends on it pays the payee from its position in the target currency, and the two commit together or not at all. "
            "The hub answers " code { "GET /services/FXP/{source}/{target}" } " with the FXPs declared here for that corridor."
        }
        h2 { "FXPs" }
        @if listed.is_empty() {
            p { "No participant is a declared FXP: " code { "GET /services/FXP" } " names none." }
        } @else {
            div.table-wrap {
                table.fxps {
                    thead { tr {
                        th scope="col" { "FXP" }
                        th scope="col" { "Status" }
                        th scope="col" { "Corridors (source → target)" }
                    } }
                    tbody {
                        @for fxp in &listed {
                            tr data-fxp=(fxp.name) {
                                th scope="row" { a href={ "/console/participants/" (page::encode(&fxp.name)) } { (fxp.name) } }
                                td { @if fxp.active { span.badge.on { "active" } } @else { span.badge.off { "inactive" } } }
                                td { (corridor_list(&fxp.corridors, &held(&fxp.standings))) }
                            }
                        }
                    }
                }
            }
            h2 #fxp-positions { "FXP positions per currency" }
            div.table-wrap {
                table.fxp-positions {
                    thead { tr { th scope="col" { "FXP" } (standing_headers()) } }
                    tbody {
                        @for fxp in &listed {
                            @for standing in &fxp.standings {
                                tr data-fxp=(fxp.name) data-currency=(standing.currency) {
                                    th scope="row" { (fxp.name) }
                                    (standing_cells(standing))
                                }
                            }
                        }
                    }
                }
            }
        }
        @if may_change {
            h2 #set-up { "Declare an FXP or change its corridors" }
            form.search method="get" action=(HERE) {
                label for="fx-participant" { "Participant" }
                select #fx-participant name="participant" {
                    @for name in &candidates {
                        option value=(name) selected[chosen_name == Some(name.as_str())] { (name) }
                    }
                }
                button type="submit" { "Set up its corridors" }
            }
        }
        @match &chosen {
            None => {}
            Some(Ok(set_up)) => (corridors_form(&visitor, set_up)),
            Some(Err(error)) => p.flash.error role="alert" { (error.message()) },
        }
    };
    if let Some(Err(error)) = &chosen {
        if error.status == axum::http::StatusCode::UNAUTHORIZED {
            return visitor.redirect("/console/sign-in");
        }
    }
    page::render(&visitor, Section::Fx, "Foreign exchange", content)
}

fn held(standings: &[crate::participants::Standing]) -> Vec<String> {
    standings.iter().map(|s| s.currency.clone()).collect()
}

/// The corridors a participant can be declared for: every ordered pair of
/// the currencies it holds, then any declared corridor outside them.
fn offered(set_up: &SetUp) -> Vec<(String, String)> {
    let mut offered: Vec<(String, String)> = set_up
        .held
        .iter()
        .flat_map(|source| {
            set_up
                .held
                .iter()
                .filter(move |target| *target != source)
                .map(move |target| (source.clone(), target.clone()))
        })
        .collect();
    for declared in &set_up.corridors {
        if !offered.contains(declared) {
            offered.push(declared.clone());
        }
    }
    offered
}

fn corridors_form(visitor: &Visitor, set_up: &SetUp) -> Markup {
    let name = &set_up.name;
    let offered = offered(set_up);
    html! {
        section #corridors aria-labelledby="corridors-title" {
            h2 #corridors-title { "Corridors of " a href={ "/console/participants/" (page::encode(name)) } { (name) } }
            @if set_up.corridors.is_empty() {
                p { (name) " is not a declared FXP." }
            } @else {
                p { (name) " is declared for:" }
                (corridor_list(&set_up.corridors, &set_up.held))
            }
            @if set_up.held.len() < 2 {
                p.flash.warn role="status" {
                    (name) " holds a position in " (if set_up.held.is_empty() { "no currency".to_string() } else { format!("{} only", set_up.held.join(", ")) })
                    ": an FXP converts between currencies it holds positions in."
                    @if visitor.may_post("/console/participants") {
                        " Onboard " (name) " again with another currency on the "
                        a href="/console/participants#onboard" { "participants page" } " first."
                    }
                }
            }
            @if visitor.may_post("/console/fx/corridors") && !offered.is_empty() {
                form.grid.corridors method="post" action={ (HERE) "/corridors" } {
                    (page::csrf(visitor))
                    input type="hidden" name="participant" value=(name);
                    fieldset {
                        legend { "The corridors " (name) " converts (source → target)" }
                        @for (source, target) in &offered {
                            @let id = format!("corridor-{source}-{target}");
                            label.check for=(id) {
                                input id=(id) type="checkbox" name="corridor" value={ (source) ":" (target) } checked[set_up.corridors.contains(&(source.clone(), target.clone()))];
                                " " (source) " → " (target)
                                @for missing in [source, target].into_iter().filter(|c| !set_up.held.contains(c)) {
                                    " " span.status.warn { "(no " (missing) " position)" }
                                }
                            }
                        }
                    }
                    p.hint { "Replaces " (name) "'s corridors with those checked; with none checked, " (name) " is no longer an FXP." }
                    button type="submit" { "Save " (name) "'s corridors" }
                }
            }
        }
    }
}

/// Replaces a participant's corridors with those checked
/// (`PUT /participants/{name}/fxCorridors`; none withdraws it as an FXP).
pub(crate) async fn set_corridors(Posted { visitor, fields }: Posted) -> Response {
    let name = fields.text("participant").to_string();
    let mut corridors = Vec::new();
    for value in fields.all("corridor") {
        match value.split_once(':') {
            Some((source, target)) => corridors.push((source.to_string(), target.to_string())),
            None => {
                visitor.session.set_flash(Flash::error(format!(
                    "'{value}' is not a corridor (SOURCE:TARGET)"
                )));
                return visitor.redirect(&set_up_path(&name));
            }
        }
    }
    let body = json!({
        "corridors": corridors
            .iter()
            .map(|(source, target)| json!({ "sourceCurrency": source, "targetCurrency": target }))
            .collect::<Vec<_>>(),
    });
    let path = format!("/participants/{}/fxCorridors", page::encode(&name));
    let result = visitor.call(Method::PUT, &path, Some(&body)).await;
    let done = |_: &Value| {
        if corridors.is_empty() {
            format!("{name} is no longer an FXP: no corridors declared")
        } else {
            let listed: Vec<String> = corridors
                .iter()
                .map(|(source, target)| format!("{source} → {target}"))
                .collect();
            format!("{name}'s corridors set: {}", listed.join(", "))
        }
    };
    visitor.after_change(result, done, &set_up_path(&name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(source: &str, target: &str) -> (String, String) {
        (source.to_string(), target.to_string())
    }

    #[test]
    fn every_direction_between_held_currencies_is_offered_and_declared_ones_stay() {
        let set_up = SetUp {
            name: "fxp".to_string(),
            corridors: vec![pair("USD", "TZS"), pair("USD", "KES")],
            held: vec!["TZS".to_string(), "USD".to_string()],
        };
        assert_eq!(
            offered(&set_up),
            [pair("TZS", "USD"), pair("USD", "TZS"), pair("USD", "KES")]
        );
        let one_currency = SetUp {
            name: "payerfsp".to_string(),
            corridors: Vec::new(),
            held: vec!["USD".to_string()],
        };
        assert!(offered(&one_currency).is_empty());
    }
}
