//! `GET /participants/{name}/statement` on the admin address, end to end
//! on the real binary: the payer's statement of the real FSPIOP flow
//! opens at zero, lists its deposit and its committed transfers with
//! their running balances page by page, and closes at the accounts'
//! values; JSON and CSV; the auditor reads it, a DFSP-scoped person reads
//! its own and is refused another DFSP's (403, counted); bad parameters
//! are refused in the FSPIOP error format; the console shows it. (The
//! figures are checked against the ledger and the audit on both backends
//! in `crates/store/tests/statement.rs`.)

mod support;

use serde_json::Value;
use support::*;

struct Started {
    scenario: Scenario,
    operator: String,
    auditor: String,
    dfsp: String,
}

fn start() -> Started {
    let dir = tempfile::tempdir().unwrap();
    let (operator, operator_line) = admin_token("alice", "operator");
    let (auditor, auditor_line) = admin_token("dave", "auditor");
    let (dfsp, dfsp_line) = admin_token("payer-ops", "dfsp:payerfsp");
    let file = dir.path().join("admin-tokens");
    std::fs::write(
        &file,
        format!("{operator_line}\n{auditor_line}\n{dfsp_line}\n"),
    )
    .unwrap();
    let mut hub = Hub::start_with(
        &dir.path().join("data"),
        &["--admin-tokens", file.to_str().unwrap()],
    );
    hub.admin_bearer = Some(operator.clone());
    Started {
        scenario: Scenario::on(hub, dir, 10_000, 5_000),
        operator,
        auditor,
        dfsp,
    }
}

fn statement_as(hub: &Hub, token: &str, name: &str, query: &str) -> Response {
    hub.admin_as(
        Some(token),
        "GET",
        &format!("/participants/{name}/statement?{query}"),
        None,
    )
}

/// A transfer from the payer to the payee, committed; its id.
fn committed_transfer(s: &Scenario, amount: &str) -> String {
    let (id, _) = s.reserve(amount, far_future());
    s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    s.payer.expect("PUT", &format!("/transfers/{id}"));
    s.payee.expect("PUT", &format!("/transfers/{id}"));
    id
}

/// The value of a counter in `/metrics`, 0 when absent.
/// The first instant a transfer finished at.
fn first_finish_ms(s: &Scenario) -> i64 {
    rusqlite::Connection::open(s.dir.path().join("data/kasi.db"))
        .and_then(|db| {
            db.query_row(
                "SELECT MIN(finished_at_ms) FROM transfer_finishes",
                [],
                |row| row.get(0),
            )
        })
        .expect("a finish")
}

fn counter(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn a_statement_reconciles_pages_and_is_the_dfsps_own() {
    let Started {
        scenario: s,
        operator,
        auditor,
        dfsp,
    } = start();
    let ids: Vec<String> = ["1.5", "2", "3.25"]
        .iter()
        .map(|amount| committed_transfer(&s, amount))
        .collect();
    // A transfer reserved and not committed is no movement.
    let (reserved, _) = s.reserve("4", far_future());

    // Page by page, two movements a page: the deposit, then the three
    // commits, each with the position's running balance.
    let mut movements: Vec<Value> = Vec::new();
    let mut after: Option<String> = None;
    let mut opening = Value::Null;
    let closing;
    let mut pages = 0;
    loop {
        let mut query = "currency=USD&from=0&limit=2".to_string();
        if let Some(after) = &after {
            query.push_str(&format!("&after={}", urlencode(after)));
        }
        let page = statement_as(&s.hub, &operator, PAYER, &query);
        assert_eq!(page.status, 200, "{page:?}");
        let page = page.json();
        pages += 1;
        if pages == 1 {
            opening = page["openingBalance"].clone();
        } else {
            assert!(page.get("balanceBefore").is_some(), "{page}");
        }
        movements.extend(page["movements"].as_array().unwrap().iter().cloned());
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => {
                closing = page["closingBalance"].clone();
                break;
            }
        }
        assert!(pages < 10, "the statement never ended");
    }
    assert!(pages >= 2, "{pages} pages");
    // The commit index's follower looked at the store and recorded where
    // its minutes start: at or before the first commit, on a minute. (A
    // minute is filed once a later minute's commit is durable; the index
    // itself is checked against an oracle in the store's tests.)
    let first_commit_ms = first_finish_ms(&s);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let index: Option<(i64, i64, i64)> =
            rusqlite::Connection::open(s.dir.path().join("data/kasi.db"))
                .and_then(|db| {
                    db.query_row(
                        "SELECT origin_ms, span_ms, next_span FROM commit_index",
                        [],
                        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                    )
                })
                .ok();
        if let Some((origin_ms, span_ms, _)) = index {
            assert_eq!(span_ms, 60_000, "{index:?}");
            assert_eq!(origin_ms % span_ms, 0, "{index:?}");
            assert!(
                (0..span_ms).contains(&(first_commit_ms - origin_ms)),
                "{index:?} first commit at {first_commit_ms}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the commit index was never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        opening,
        serde_json::json!({"POSITION": "0", "SETTLEMENT": "0"})
    );
    let shown: Vec<(&str, &str, &str, &str, &str)> = movements
        .iter()
        .map(|m| {
            (
                m["kind"].as_str().unwrap(),
                m["ledgerAccountType"].as_str().unwrap(),
                m["counterparty"].as_str().unwrap(),
                m["amount"].as_str().unwrap(),
                m["balance"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![
            ("FUNDS_IN", "SETTLEMENT", "Hub", "-5000", "-5000"),
            ("TRANSFER", "POSITION", PAYEE, "1.5", "1.5"),
            ("TRANSFER", "POSITION", PAYEE, "2", "3.5"),
            ("TRANSFER", "POSITION", PAYEE, "3.25", "6.75"),
        ]
    );
    let transfer_ids: Vec<&str> = movements[1..]
        .iter()
        .map(|m| m["transferId"].as_str().unwrap())
        .collect();
    assert_eq!(
        transfer_ids,
        ids.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert!(!movements
        .iter()
        .any(|m| m["transferId"] == reserved.as_str()));
    assert_eq!(
        closing,
        serde_json::json!({"POSITION": "6.75", "SETTLEMENT": "-5000"})
    );
    // The closing balance is the accounts' value as the ledger holds it:
    // the accounts API's, which counts what is held (the reserved 4) as
    // central-ledger's position does, less what is held.
    let accounts = s
        .hub
        .admin("GET", &format!("/participants/{PAYER}/accounts"), None)
        .json();
    let number = |v: &Value| -> f64 { v.to_string().trim_matches('"').parse().unwrap() };
    for account in accounts.as_array().unwrap() {
        let kind = account["ledgerAccountType"].as_str().unwrap();
        let value = number(&account["value"]) - number(&account["heldValue"]);
        let closed: f64 = closing[kind].as_str().unwrap().parse().unwrap();
        assert_eq!(value, closed, "{kind}: {account}");
    }

    // CSV: the same figures, opening and closing rows included.
    let csv = statement_as(&s.hub, &operator, PAYER, "currency=USD&from=0&format=csv");
    assert_eq!(csv.status, 200, "{csv:?}");
    assert_eq!(csv.header("content-type"), Some("text/csv; charset=utf-8"));
    let text = csv.text();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("participant,currency,at,kind,"),
        "{text}"
    );
    assert!(text.contains(",OPENING_BALANCE,POSITION,"), "{text}");
    assert!(text.contains(",CLOSING_BALANCE,POSITION,"), "{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&ids[2]) && l.ends_with(",3.25,6.75")),
        "{text}"
    );

    // The auditor reads statements; the payer's person its own only.
    assert_eq!(
        statement_as(&s.hub, &auditor, PAYEE, "currency=USD&from=0").status,
        200
    );
    let own = statement_as(&s.hub, &dfsp, PAYER, "currency=USD&from=0&limit=1000");
    assert_eq!(own.status, 200, "{own:?}");
    assert_eq!(own.json()["movements"].as_array().unwrap().len(), 4);
    let series = "kasi_admin_forbidden_total{role=\"dfsp\",reason=\"other_dfsp\"}";
    let before = counter(&s.hub.admin("GET", "/metrics", None).text(), series);
    let other = statement_as(&s.hub, &dfsp, PAYEE, "currency=USD&from=0");
    assert_eq!(other.status, 403, "{other:?}");
    let description = other.json()["errorInformation"]["errorDescription"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(description.contains("Forbidden: "), "{description}");
    assert!(!other.text().contains("5000"), "nothing of the payee's");
    s.hub.await_metrics("the refusal counted", |metrics| {
        (counter(metrics, series) > before).then_some(())
    });

    // Bad input: the FSPIOP error format, 400.
    for query in [
        "from=0",
        "currency=US",
        "currency=USD&limit=1001",
        "currency=USD&from=10&to=5",
        "currency=USD&after=bogus",
        "currency=USD&colour=red",
    ] {
        let refused = statement_as(&s.hub, &operator, PAYER, query);
        assert_eq!(refused.status, 400, "{query}: {refused:?}");
        assert_eq!(
            refused.json()["errorInformation"]["errorCode"],
            "3100",
            "{query}"
        );
    }
    let unknown = statement_as(&s.hub, &operator, "nobodyfsp", "currency=USD");
    // As the other participant routes answer an unknown name.
    assert_eq!(unknown.status, 400, "{unknown:?}");
    assert_eq!(unknown.json()["errorInformation"]["errorCode"], "3200");

    // The console: the statement page, linked from the participant's, and
    // its CSV; another DFSP's refused.
    let cookie = s.hub.console_session(&dfsp);
    let get = |path: &str| {
        http(
            s.hub.admin,
            "GET",
            path,
            &[("Cookie".to_string(), cookie.clone())],
            b"",
        )
    };
    let portal = get(&format!("/console/participants/{PAYER}"));
    assert_eq!(portal.status, 200, "{portal:?}");
    let link = format!("/console/participants/{PAYER}/statement?currency=USD");
    assert!(portal.text().contains(&link), "{}", portal.text());
    let page = get(&format!("{link}&from=0"));
    assert_eq!(page.status, 200, "{page:?}");
    let text = page.text();
    assert!(text.contains("Opening balance"), "{text}");
    assert!(text.contains("Closing balance"), "{text}");
    assert!(text.contains(&ids[0]), "{text}");
    assert!(text.contains("statement.csv?"), "{text}");
    let download = get(&format!(
        "/console/participants/{PAYER}/statement.csv?currency=USD&from=0"
    ));
    assert_eq!(download.status, 200, "{download:?}");
    assert!(
        download.text().contains(",CLOSING_BALANCE,"),
        "{download:?}"
    );
    let refused = get(&format!(
        "/console/participants/{PAYEE}/statement?currency=USD"
    ));
    assert_eq!(refused.status, 403, "{refused:?}");
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}
