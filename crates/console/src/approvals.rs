//! Four-eyes pending changes (`GET /approvals`), with approve and reject
//! buttons on the pending ones for whom may decide them: not the person
//! who asked, and only a role that may make the change (the API checks
//! both again; the page only leaves out what would be refused).

use axum::extract::Path;
use axum::http::Method;
use axum::response::Response;
use maud::{html, Markup};
use serde_json::{json, Value};

use crate::page::{self, Flash, Section};
use crate::session::{Posted, Visitor};

const HERE: &str = "/console/approvals";

pub(crate) async fn show(visitor: Visitor) -> Response {
    let changes = visitor.get("/approvals").await;
    if let Err(error) = &changes {
        if error.status == axum::http::StatusCode::UNAUTHORIZED {
            return visitor.redirect("/console/sign-in");
        }
    }
    let content = html! {
        h1 { "Approvals" }
        p.hint {
            "Changes that need a second person (" code { "--four-eyes" } "): each waits here until someone other than "
            "who asked, in a role that may make it, approves it (it applies then, against the hub as it is then) or "
            "rejects it, or until it expires."
        }
        @match &changes {
            Ok(changes) => (table(&visitor, changes)),
            Err(error) => p.flash.error role="alert" { (error.message()) },
        }
    };
    page::render(&visitor, Section::Approvals, "Approvals", content)
}

fn table(visitor: &Visitor, changes: &Value) -> Markup {
    let changes: Vec<&Value> = changes.as_array().into_iter().flatten().collect();
    html! {
        @if changes.is_empty() {
            p { "No pending changes." }
        } @else {
            div.table-wrap {
                table.approvals {
                    thead { tr {
                        th scope="col" { "Asked" }
                        th scope="col" { "By" }
                        th scope="col" { "Action" }
                        th scope="col" { "Target" }
                        th scope="col" { "Request" }
                        th scope="col" { "Why" }
                        th scope="col" { "State" }
                        th scope="col" { "Decision" }
                    } }
                    tbody {
                        @for change in changes {
                            (row(visitor, change))
                        }
                    }
                }
            }
        }
    }
}

fn row(visitor: &Visitor, change: &Value) -> Markup {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let id = text(&change["id"]);
    let maker = text(&change["requestedBy"]["name"]);
    let pending = change["state"] == "pending";
    let own = maker == visitor.session.caller.name;
    let may_decide = pending && !own && visitor.may_post("/console/approvals/:id");
    html! {
        tr data-id=(id) {
            td { (text(&change["createdDate"])) br; small { "expires " (text(&change["expiresDate"])) } }
            td { (maker) " (" (text(&change["requestedBy"]["role"])) ")" }
            td { (text(&change["action"])) }
            td { (text(&change["target"])) }
            td { code { (text(&change["request"]["method"])) " " (text(&change["request"]["path"])) } br; code.body { (text(&change["request"]["body"])) } }
            td { (text(&change["reason"])) }
            td { span.status { (text(&change["state"])) } }
            td {
                @if may_decide {
                    form method="post" action={ (HERE) "/" (id) } {
                        (page::csrf(visitor))
                        label for={ "reason-" (id) } { "Reason" }
                        input id={ "reason-" (id) } name="reason";
                        button type="submit" name="decision" value="approve" { "Approve" }
                        " "
                        button type="submit" name="decision" value="reject" { "Reject" }
                    }
                } @else if pending && own {
                    small { "asked by you: another person decides" }
                } @else if !pending {
                    (text(&change["decidedBy"]["name"])) " " small { (text(&change["decisionReason"])) }
                }
            }
        }
    }
}

/// The four-eyes actions that move money for good once approved: the
/// approver is asked to confirm them, with the amounts, first.
const MONEY_ACTIONS: [&str; 3] = ["funds-out", "funds-in", "settlement-finalize"];

pub(crate) async fn decide(Path(id): Path<String>, Posted { visitor, fields }: Posted) -> Response {
    let decision = fields.text("decision").to_string();
    if decision != "approve" && decision != "reject" {
        visitor
            .session
            .set_flash(Flash::error("choose Approve or Reject"));
        return visitor.redirect(HERE);
    }
    if decision == "approve" && fields.text("confirmed") != "yes" {
        let path = format!("/approvals/{}", page::encode(&id));
        let change = match visitor.get(&path).await {
            Ok(change) => change,
            Err(error) => return page::api_failure(&visitor, Section::Approvals, &error),
        };
        let action = change["action"].as_str().unwrap_or_default();
        if MONEY_ACTIONS.contains(&action) {
            return confirm_approval(&visitor, &id, &change, fields.text("reason")).await;
        }
    }
    let body = json!({"decision": decision, "reason": fields.text("reason")});
    let path = format!("/approvals/{}", page::encode(&id));
    let result = visitor.call(Method::POST, &path, Some(&body)).await;
    let done = |answer: &Value| {
        format!(
            "{} of {} {}",
            answer["action"].as_str().unwrap_or("change"),
            answer["target"].as_str().unwrap_or_default(),
            answer["state"].as_str().unwrap_or("decided")
        )
    };
    visitor.after_change(result, done, HERE)
}

/// Step one of approving a change that moves money: what it moves — the
/// amount of a funds movement, each participant's net amount of a
/// settlement — and a button that approves it (applying it then).
async fn confirm_approval(visitor: &Visitor, id: &str, change: &Value, reason: &str) -> Response {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let action = text(&change["action"]);
    let target = text(&change["target"]);
    let body: Value =
        serde_json::from_str(change["request"]["body"].as_str().unwrap_or("")).unwrap_or_default();
    let settlement = match target.strip_prefix("settlement/") {
        Some(settlement) => {
            match crate::settlement::settlement_and_owners(visitor, settlement).await {
                Ok(read) => Some(read),
                Err(error) => return page::api_failure(visitor, Section::Approvals, &error),
            }
        }
        None => None,
    };
    let content = html! {
        h1 #confirm-title { "Confirm: approve " (action) " of " (target) }
        p {
            "Approving applies this change now, against the hub as it is now; the money it moves cannot be moved back by "
            "undoing it. Asked by " (text(&change["requestedBy"]["name"])) " (" (text(&change["requestedBy"]["role"])) "): "
            (text(&change["reason"]))
        }
        @if let Some((settlement, owners)) = &settlement {
            (crate::settlement::net_amounts(settlement, owners))
        } @else {
            dl.effect {
                dt { "Movement" }
                dd.amount { (action) " of " (page::money(&page::text(&body["amount"]["amount"]), &page::text(&body["amount"]["currency"]))) }
            }
        }
        form method="post" action={ (HERE) "/" (id) } aria-labelledby="confirm-title" {
            (page::csrf(visitor))
            input type="hidden" name="reason" value=(reason);
            input type="hidden" name="confirmed" value="yes";
            button.primary type="submit" name="decision" value="approve" { "Approve " (action) " of " (target) }
            " "
            a href=(HERE) { "Cancel" }
        }
    };
    page::render(visitor, Section::Approvals, "Confirm approval", content)
}
