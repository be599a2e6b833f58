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

pub(crate) async fn decide(Path(id): Path<String>, Posted { visitor, fields }: Posted) -> Response {
    let decision = fields.text("decision").to_string();
    if decision != "approve" && decision != "reject" {
        visitor
            .session
            .set_flash(Flash::error("choose Approve or Reject"));
        return visitor.redirect(HERE);
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
