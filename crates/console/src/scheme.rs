//! The scheme's own set-up, what a fresh hub needs before its first DFSP:
//! the hub's accounts per currency, the settlement models, and the oracles
//! account lookup asks (ALS's `/oracles`).

use axum::http::Method;
use axum::response::Response;
use maud::html;
use serde_json::{json, Value};

use crate::page::{self, Section};
use crate::session::{Posted, Visitor};

const HERE: &str = "/console/scheme";

/// The hub's two accounts in each currency it settles.
const HUB_ACCOUNTS: [&str; 2] = ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"];

pub(crate) async fn show(visitor: Visitor) -> Response {
    let hub_path = format!("/participants/{}", page::encode(&visitor.console.hub_name));
    let (hub, models, oracles) = tokio::join!(
        visitor.get(hub_path),
        visitor.get("/settlementModels"),
        visitor.get("/oracles"),
    );
    let (hub, models, oracles) = match (hub, models, oracles) {
        (Ok(h), Ok(m), Ok(o)) => (h, m, o),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            return page::api_failure(&visitor, Section::Scheme, &e)
        }
    };
    let may_add_currency = visitor.may_post("/console/scheme/currencies");
    let may_add_model = visitor.may_post("/console/scheme/settlement-models");
    let may_add_oracle = visitor.may_post("/console/scheme/oracles");
    let accounts: Vec<&Value> = hub["accounts"].as_array().into_iter().flatten().collect();
    let content = html! {
        h1 { "Scheme" }
        p.hint { "What the hub needs before its first DFSP: its own accounts in each currency, a settlement model, and (for account lookup beyond the built-in registry) oracles." }
        h2 { "The hub's accounts (" (visitor.console.hub_name) ")" }
        @if accounts.is_empty() {
            p.flash.warn role="status" { "The hub has no accounts yet: add a currency before onboarding DFSPs in it." }
        } @else {
            div.table-wrap {
                table.hub-accounts {
                    thead { tr { th.num scope="col" { "Id" } th scope="col" { "Type" } th scope="col" { "Currency" } th scope="col" { "Status" } } }
                    tbody {
                        @for a in &accounts {
                            tr {
                                td.num { (page::text(&a["id"])) }
                                td { (page::text(&a["ledgerAccountType"])) }
                                td { (page::text(&a["currency"])) }
                                td { @if a["isActive"] == 1 { span.badge.on { "active" } } @else { span.badge.off { "inactive" } } }
                            }
                        }
                    }
                }
            }
        }
        @if may_add_currency {
            form.grid #hub-currency method="post" action={ (HERE) "/currencies" } {
                (page::csrf(&visitor))
                label for="hub-currency-code" { "Currency" }
                input #hub-currency-code name="currency" required maxlength="3" placeholder="e.g. USD" autocomplete="off";
                button type="submit" { "Add the hub's accounts in it" }
            }
        }
        h2 { "Settlement models" }
        div.table-wrap {
            table.models {
                thead { tr {
                    th scope="col" { "Name" }
                    th scope="col" { "Granularity" }
                    th scope="col" { "Interchange" }
                    th scope="col" { "Delay" }
                    th scope="col" { "Currency" }
                    th scope="col" { "Account type" }
                    th scope="col" { "Liquidity check" }
                    th scope="col" { "Position reset" }
                } }
                tbody {
                    @for m in models.as_array().into_iter().flatten() {
                        tr {
                            td { (page::text(&m["name"])) }
                            td { (page::text(&m["settlementGranularity"])) }
                            td { (page::text(&m["settlementInterchange"])) }
                            td { (page::text(&m["settlementDelay"])) }
                            td { (if m["currency"].is_null() { "any".to_string() } else { page::text(&m["currency"]) }) }
                            td { (page::text(&m["ledgerAccountType"])) }
                            td { (yes_no(&m["requireLiquidityCheck"])) }
                            td { (yes_no(&m["autoPositionReset"])) }
                        }
                    }
                }
            }
        }
        @if may_add_model {
            form.grid #new-model method="post" action={ (HERE) "/settlement-models" } {
                (page::csrf(&visitor))
                label for="model-name" { "Name" }
                input #model-name name="name" required placeholder="e.g. DEFERREDNET" autocomplete="off";
                label for="model-granularity" { "Granularity" }
                select #model-granularity name="settlementGranularity" { option value="NET" { "NET" } option value="GROSS" { "GROSS" } }
                label for="model-interchange" { "Interchange" }
                select #model-interchange name="settlementInterchange" { option value="MULTILATERAL" { "MULTILATERAL" } option value="BILATERAL" { "BILATERAL" } }
                label for="model-delay" { "Delay" }
                select #model-delay name="settlementDelay" { option value="DEFERRED" { "DEFERRED" } option value="IMMEDIATE" { "IMMEDIATE" } }
                label for="model-currency" { "Currency" }
                input #model-currency name="currency" maxlength="3" placeholder="empty: every currency" autocomplete="off";
                label for="model-account" { "Ledger account type" }
                select #model-account name="ledgerAccountType" { option value="POSITION" { "POSITION" } option value="SETTLEMENT" { "SETTLEMENT" } option value="INTERCHANGE_FEE" { "INTERCHANGE_FEE" } }
                label.check for="model-liquidity" { input #model-liquidity type="checkbox" name="requireLiquidityCheck" value="true" checked; " Require a liquidity check" }
                label.check for="model-reset" { input #model-reset type="checkbox" name="autoPositionReset" value="true" checked; " Reset positions when settled" }
                button type="submit" { "Create settlement model" }
            }
        }
        h2 { "Oracles" }
        @let oracles: Vec<&Value> = oracles.as_array().into_iter().flatten().collect();
        @if oracles.is_empty() {
            p { "None: parties are looked up in the hub's own registry only." }
        } @else {
            div.table-wrap {
                table.oracles {
                    thead { tr { th.num scope="col" { "Id" } th scope="col" { "Party id type" } th scope="col" { "Endpoint" } th scope="col" { "Currency" } th scope="col" { "Default" } } }
                    tbody {
                        @for o in &oracles {
                            tr {
                                td.num { (page::text(&o["oracleId"])) }
                                td { (page::text(&o["oracleIdType"])) }
                                td { code.url { (page::text(&o["endpoint"]["value"])) } }
                                td { (if o["currency"].is_null() { "any".to_string() } else { page::text(&o["currency"]) }) }
                                td { (yes_no(&o["isDefault"])) }
                            }
                        }
                    }
                }
            }
        }
        @if may_add_oracle {
            form.grid #new-oracle method="post" action={ (HERE) "/oracles" } {
                (page::csrf(&visitor))
                label for="oracle-type" { "Party id type" }
                select #oracle-type name="oracleIdType" { @for t in fspiop::PartyIdType::ALL.map(fspiop::PartyIdType::as_str) { option value=(t) { (t) } } }
                label for="oracle-endpoint" { "Endpoint" }
                input #oracle-endpoint name="endpoint" type="url" required placeholder="http://oracle.example:8444";
                label for="oracle-currency" { "Currency" }
                input #oracle-currency name="currency" maxlength="3" placeholder="empty: every currency" autocomplete="off";
                label.check for="oracle-default" { input #oracle-default type="checkbox" name="isDefault" value="true"; " The default for its type" }
                button type="submit" { "Add oracle" }
            }
        }
    };
    page::render(&visitor, Section::Scheme, "Scheme", content)
}

fn yes_no(value: &Value) -> &'static str {
    match value {
        Value::Bool(true) => "yes",
        Value::Number(n) if n.as_u64() == Some(1) => "yes",
        Value::String(s) if s == "true" || s == "1" => "yes",
        _ => "no",
    }
}

/// The hub's two accounts in a currency, as the golden-path collection's
/// hub set-up creates them; the first refusal stops it.
pub(crate) async fn add_currency(Posted { visitor, fields }: Posted) -> Response {
    let currency = fields.text("currency").to_ascii_uppercase();
    let path = format!(
        "/participants/{}/accounts",
        page::encode(&visitor.console.hub_name)
    );
    let mut result = Ok(Value::Null);
    for kind in HUB_ACCOUNTS {
        result = visitor
            .call(
                Method::POST,
                &path,
                Some(&json!({ "type": kind, "currency": currency })),
            )
            .await;
        if result.is_err() {
            break;
        }
    }
    visitor.after_change(
        result,
        |_| format!("The hub's {currency} accounts are created"),
        HERE,
    )
}

pub(crate) async fn create_model(Posted { visitor, fields }: Posted) -> Response {
    let currency = fields.text("currency").to_ascii_uppercase();
    let mut model = json!({
        "name": fields.text("name"),
        "settlementGranularity": fields.text("settlementGranularity"),
        "settlementInterchange": fields.text("settlementInterchange"),
        "settlementDelay": fields.text("settlementDelay"),
        "ledgerAccountType": fields.text("ledgerAccountType"),
        "requireLiquidityCheck": fields.get("requireLiquidityCheck").is_some(),
        "autoPositionReset": fields.get("autoPositionReset").is_some(),
    });
    if !currency.is_empty() {
        model["currency"] = json!(currency);
    }
    let result = visitor
        .call(Method::POST, "/settlementModels", Some(&model))
        .await;
    visitor.after_change(
        result,
        |_| format!("Settlement model {} created", fields.text("name")),
        HERE,
    )
}

pub(crate) async fn create_oracle(Posted { visitor, fields }: Posted) -> Response {
    let currency = fields.text("currency").to_ascii_uppercase();
    let mut oracle = json!({
        "oracleIdType": fields.text("oracleIdType"),
        "endpoint": { "value": fields.text("endpoint"), "endpointType": "URL" },
        "isDefault": fields.get("isDefault").is_some(),
    });
    if !currency.is_empty() {
        oracle["currency"] = json!(currency);
    }
    let result = visitor.call(Method::POST, "/oracles", Some(&oracle)).await;
    visitor.after_change(
        result,
        |_| format!("Oracle for {} added", fields.text("oracleIdType")),
        HERE,
    )
}
