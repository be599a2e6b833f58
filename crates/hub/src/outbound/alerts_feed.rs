//! The alerts about committed changes, at least once across crashes: a
//! follower of the change feed (`store::feed`) after a durable cursor of
//! its own (`feed_cursors`, [`CURSOR`]), the one source of the alerts of
//! a net debit cap change and of a settlement SETTLED.
//!
//! It reads a page after its cursor, turns the rows that matter into
//! alerts ([`due`]: an `account.changed` whose `netDebitCap` differs from
//! its `previousNetDebitCap`; a `settlement.changed` to SETTLED, whose
//! accounts' nets it reads from the ledger, [`settled_alerts`]), hands each
//! to the sending task and waits until it has ended ([`Alerts::deliver`]:
//! mailed, its webhook answered, or given up for good), and only then
//! moves its cursor past the row. An alert's id holds the row's
//! `feed_seq`, so a resend after a crash is the same Message-ID.
//!
//! It never touches the transfer path or an admin request: it reads the
//! store on the feed's own connection, is woken by the commits (the feed's
//! head), never by a timer, and an SMTP server that is down holds up only
//! it — its lag grows (`kasi_alerts_lag`). On its first start it begins at
//! the feed's newest change: a hub upgraded to it does not mail its
//! history. Position alarms and callback outages are not its: they are
//! live state, computed again when the hub starts (`alerts`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ledger::request::ReadParticipants;
use ledger::{FspName, SettlementState};
use serde_json::Value;
use store::feed::FeedRow;
use tokio::sync::watch;

use crate::alerts::{net_debit_cap_alert, settlement_alert, Alert, Alerts};
use crate::feed::{blocking, FeedConfig};
use crate::Hub;

/// The follower's cursor in `feed_cursors`.
pub const CURSOR: &str = "alerts";

/// Rows read per page.
const PAGE: usize = 500;
/// The kinds of change that may ask for an alert ([`due`]).
const KINDS: &[&str] = &["account.changed", "settlement.changed"];
const BACKOFF_FIRST: Duration = Duration::from_millis(200);
const BACKOFF_MOST: Duration = Duration::from_secs(10);
/// How often a repeating failure is logged at most.
const LOG_EVERY: Duration = Duration::from_secs(60);
/// Once caught up, the least time between two reads of the feed, and
/// between two saves of a cursor that passed only changes that ask for
/// no alert. Each save is a write transaction (SQLite's write lock and an
/// fsync) beside the writer's commits, and woken by every commit the
/// follower would add one to each; a change re-read after a crash that
/// asks for nothing costs nothing. A cursor past a delivered alert is
/// saved at once.
const QUIET_EVERY: Duration = Duration::from_secs(1);

/// What a change of the feed asks of the alerts.
#[derive(Debug, PartialEq, Eq)]
pub enum Due {
    Nothing,
    /// This alert.
    Alert(Alert),
    /// Settlement `id` is SETTLED: its accounts' nets ([`settled_alerts`]).
    Settled(u32),
}

/// The alert a change of the feed makes, if any (a pure function of the
/// row). A net debit cap changed from one value to another (`limits.set`;
/// a first cap, set at onboarding, is not told, nor an activation);
/// a settlement moved to SETTLED.
pub fn due(row: &FeedRow) -> Due {
    let body = || serde_json::from_str::<Value>(&row.body).unwrap_or(Value::Null);
    match row.kind.as_str() {
        "account.changed" => {
            let body = body();
            let text = |name: &str| body[name].as_str().map(str::to_string);
            let (Some(cap), Some(before)) = (text("netDebitCap"), text("previousNetDebitCap"))
            else {
                return Due::Nothing;
            };
            let participant = text("participant").and_then(|name| FspName::new(&name));
            match (participant, text("currency")) {
                (Some(participant), Some(currency)) if cap != before => Due::Alert(
                    net_debit_cap_alert(row.feed_seq, participant, &currency, &cap),
                ),
                _ => Due::Nothing,
            }
        }
        "settlement.changed" => {
            let body = body();
            let settled = body["state"].as_str() == Some(SettlementState::Settled.as_str());
            match body["settlementId"].as_u64().map(u32::try_from) {
                Some(Ok(id)) if settled => Due::Settled(id),
                _ => Due::Nothing,
            }
        }
        _ => Due::Nothing,
    }
}

/// One account of a settlement: its DFSP, currency, net and id.
pub struct SettledAccount {
    pub participant: FspName,
    pub currency: String,
    pub net: String,
    pub account: u32,
}

/// The alerts of settlement `id` SETTLED at change `feed_seq`: one per
/// account.
pub fn settled_alerts(feed_seq: u64, id: u32, accounts: &[SettledAccount]) -> Vec<Alert> {
    accounts
        .iter()
        .map(|a| settlement_alert(feed_seq, id, a.participant, &a.currency, &a.net, a.account))
        .collect()
}

/// The accounts of settlement `id`, named, read from the ledger (a
/// SETTLED settlement no longer changes).
async fn settled_accounts(hub: &Hub, id: u32) -> Result<Vec<SettledAccount>, String> {
    let settlements = crate::settlement::settlements(hub)
        .await
        .map_err(|e| format!("reading the settlements: {}", e.description))?;
    let Some(view) = settlements.into_iter().find(|s| s.row.id == id) else {
        tracing::warn!(
            settlement = id,
            "alerts: a settlement SETTLED in the change feed is not in the ledger; not told"
        );
        return Ok(Vec::new());
    };
    let participants = match hub.ask(ReadParticipants { name: None }).await {
        Ok(Ok(views)) => views,
        other => return Err(format!("reading the participants: {other:?}")),
    };
    Ok(view
        .row
        .accounts
        .iter()
        .filter_map(|account| {
            let participant = participants
                .iter()
                .find(|v| v.participant.id == account.participant)?;
            Some(SettledAccount {
                participant: participant.participant.name,
                currency: account.currency.as_str().to_string(),
                net: account.net.to_string(),
                account: account.account.0,
            })
        })
        .collect())
}

/// Runs the follower for ever (a task of the serving runtime).
pub async fn follow(hub: Arc<Hub>, feed: FeedConfig) {
    let cursor = Arc::new(AtomicU64::new(0));
    crate::feed::track_lag(&feed, cursor.clone(), hub.metrics.alerts_lag.clone());
    let mut failures = engine::Repeats::new(LOG_EVERY);
    let mut backoff = BACKOFF_FIRST;
    loop {
        let mut moved = false;
        let error = session(&hub, &feed, &cursor, &mut moved).await;
        if moved {
            backoff = BACKOFF_FIRST;
        }
        if let Some(repeated) = failures.failed() {
            tracing::warn!(%error, repeated, retry_ms = backoff.as_millis() as u64, "alerts: the change feed cannot be followed; transfers go on, the alerts' lag grows (kasi_alerts_lag)");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MOST);
    }
}

/// Follows the feed until the store fails: returns why.
async fn session(hub: &Hub, feed: &FeedConfig, shared: &AtomicU64, moved: &mut bool) -> String {
    let kept = match blocking(&feed.log, |log| log.feed_cursor(CURSOR)).await {
        Ok(kept) => kept,
        Err(error) => return error,
    };
    let mut cursor = match kept {
        Some(cursor) => cursor,
        None => {
            // The first start: from the newest change on, not the history.
            let newest = match blocking(&feed.log, |log| log.read_feed(0, 1, None)).await {
                Ok(page) => page.newest,
                Err(error) => return error,
            };
            if let Err(error) =
                blocking(&feed.log, move |log| log.set_feed_cursor(CURSOR, newest)).await
            {
                return error;
            }
            tracing::info!(
                from_feed_seq = newest + 1,
                "alerts: first start; the changes before it are not told"
            );
            newest
        }
    };
    shared.store(cursor, Ordering::Relaxed);
    let mut head = feed.head.clone();
    let mut said = false;
    // The cursor as saved, and when.
    let mut saved = cursor;
    let mut saved_at = std::time::Instant::now();
    loop {
        // Seen before the read: a commit after it wakes the wait below.
        head.borrow_and_update();
        // Only the kinds that may ask for an alert: the others are passed
        // over in the database, never turned into rows.
        let page = match blocking(&feed.log, move |log| {
            log.read_feed_kinds(cursor, PAGE, KINDS)
        })
        .await
        {
            Ok(page) => page,
            Err(error) => return error,
        };
        let newest = page.newest;
        let lag = |head: &watch::Receiver<u64>, cursor: u64| {
            (*head.borrow()).max(newest).saturating_sub(cursor) as i64
        };
        hub.metrics.alerts_lag.set(lag(&head, cursor));
        if !said {
            tracing::info!(
                from_feed_seq = cursor + 1,
                lag = lag(&head, cursor),
                "alerts: following the change feed"
            );
            said = true;
        }
        if let Some(oldest) = page.oldest.filter(|&oldest| oldest > cursor + 1) {
            let (first, lost) = (oldest, oldest - cursor - 1);
            hub.metrics.alerts_skipped.inc_by(lost);
            tracing::error!(
                from = cursor + 1,
                to = first - 1,
                lost,
                "alerts: changes were deleted by --feed-retention before their alerts were sent (the hub was down longer than it); they are passed over, never told (kasi_alerts_skipped)"
            );
            // Counted once: read again from the oldest change kept.
            cursor = oldest - 1;
            continue;
        }
        // Past the last change examined, whichever its kind.
        let (examined, more) = (page.next_after, page.next_after < page.newest);
        if page.rows.is_empty() && examined <= cursor {
            if saved < cursor && saved_at.elapsed() >= QUIET_EVERY {
                if let Err(error) = keep(feed, cursor).await {
                    return error;
                }
                (saved, saved_at) = (cursor, std::time::Instant::now());
            }
            let quiet = saved < cursor;
            tokio::select! {
                changed = head.changed() => if changed.is_err() {
                    return "the hub is stopping".to_string();
                },
                // A cursor left unsaved is saved when the feed stays quiet.
                () = tokio::time::sleep(QUIET_EVERY), if quiet => {}
            }
            continue;
        }
        let mut kept = cursor;
        for row in &page.rows {
            let alerts = match due(row) {
                Due::Nothing => Vec::new(),
                Due::Alert(alert) => vec![alert],
                Due::Settled(id) => match settled_accounts(hub, id).await {
                    Ok(accounts) => settled_alerts(row.feed_seq, id, &accounts),
                    Err(error) => return error,
                },
            };
            cursor = row.feed_seq;
            if alerts.is_empty() {
                continue;
            }
            // The rows before it are done too: kept before waiting on mail.
            if kept < cursor - 1 {
                if let Err(error) = keep(feed, cursor - 1).await {
                    return error;
                }
                shared.store(cursor - 1, Ordering::Relaxed);
            }
            deliver_all(&hub.alerts, alerts).await;
            if let Err(error) = keep(feed, cursor).await {
                return error;
            }
            (saved, saved_at) = (cursor, std::time::Instant::now());
            kept = cursor;
            shared.store(cursor, Ordering::Relaxed);
            *moved = true;
        }
        cursor = cursor.max(examined);
        if kept < cursor {
            // Past changes that ask for nothing: saved at most once a
            // second ([`QUIET_EVERY`]).
            if saved_at.elapsed() >= QUIET_EVERY {
                if let Err(error) = keep(feed, cursor).await {
                    return error;
                }
                (saved, saved_at) = (cursor, std::time::Instant::now());
            }
            shared.store(cursor, Ordering::Relaxed);
            *moved = true;
        }
        hub.metrics.alerts_lag.set(lag(&head, cursor));
        if !more {
            // Caught up: the next commits are read together.
            tokio::time::sleep(QUIET_EVERY).await;
        }
    }
}

/// Delivers `alerts` (a settlement's, one per account) together; returns
/// once each has ended.
async fn deliver_all(alerts: &Alerts, batch: Vec<Alert>) {
    let mut ends = tokio::task::JoinSet::new();
    for alert in batch {
        let alerts = alerts.clone();
        ends.spawn(async move { alerts.deliver(alert).await });
    }
    while ends.join_next().await.is_some() {}
}

async fn keep(feed: &FeedConfig, feed_seq: u64) -> Result<(), String> {
    blocking(&feed.log, move |log| log.set_feed_cursor(CURSOR, feed_seq)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::Kind;

    fn row(feed_seq: u64, kind: &str, body: &str) -> FeedRow {
        FeedRow {
            feed_seq,
            at_ms: 1,
            kind: kind.to_string(),
            participant: "payerfsp".to_string(),
            counterparty: None,
            key: "7".to_string(),
            body: body.to_string(),
        }
    }

    fn account(cap: &str, before: Option<&str>) -> String {
        let mut body = format!(
            r#"{{"accountId":7,"participant":"payerfsp","currency":"USD","ledgerAccountType":"POSITION","isActive":true,"netDebitCap":{cap}"#
        );
        if let Some(before) = before {
            body.push_str(&format!(r#","previousNetDebitCap":{before}"#));
        }
        body.push('}');
        body
    }

    #[test]
    fn a_cap_changed_from_one_value_to_another_is_told_with_the_feed_seq_in_its_id() {
        let Due::Alert(alert) = due(&row(
            42,
            "account.changed",
            &account(r#""2000""#, Some(r#""1000""#)),
        )) else {
            panic!("no alert");
        };
        // The follower reads this kind (it reads no other kinds).
        assert!(KINDS.contains(&"account.changed"));
        let payer = FspName::new("payerfsp").unwrap();
        assert_eq!(alert, net_debit_cap_alert(42, payer, "USD", "2000"));
        assert_eq!(alert.kind, Kind::NetDebitCap);
        assert_eq!(alert.id, "ndc.payerfsp.USD.42");
        assert_eq!(alert.subject, "payerfsp: USD net debit cap set to 2000");
        assert_eq!(
            alert.body,
            "The hub operator set the USD net debit cap of payerfsp to 2000.\n\n\
             Prepares that would take the position past it are refused (4200).\n"
        );
        // The same row again (after a crash): the same alert.
        assert_eq!(
            due(&row(
                42,
                "account.changed",
                &account(r#""2000""#, Some(r#""1000""#))
            )),
            Due::Alert(alert)
        );
    }

    #[test]
    fn other_account_changes_are_not_told() {
        for body in [
            // Opened: no cap before to speak of.
            account(r#""1000""#, None),
            account("null", None),
            // A first cap (onboarding).
            account(r#""1000""#, Some("null")),
            // (De)activated, the cap as it was.
            account(r#""1000""#, Some(r#""1000""#)),
            "not JSON".to_string(),
        ] {
            assert_eq!(
                due(&row(3, "account.changed", &body)),
                Due::Nothing,
                "{body}"
            );
        }
    }

    #[test]
    fn a_settlement_is_told_once_settled() {
        let step = |state: &str| {
            format!(
                r#"{{"settlementId":9,"state":"{state}","settlementModelId":1,"settlementWindowIds":[4],"reason":"r"}}"#
            )
        };
        assert_eq!(
            due(&row(5, "settlement.changed", &step("SETTLED"))),
            Due::Settled(9)
        );
        assert!(KINDS.contains(&"settlement.changed"));
        for state in ["PENDING_SETTLEMENT", "PS_TRANSFERS_RECORDED", "ABORTED"] {
            assert_eq!(
                due(&row(5, "settlement.changed", &step(state))),
                Due::Nothing
            );
        }
        assert_eq!(due(&row(5, "transfer.committed", "{}")), Due::Nothing);
        assert_eq!(
            due(&row(5, "settlement_window.changed", &step("SETTLED"))),
            Due::Nothing
        );

        let accounts = [
            SettledAccount {
                participant: FspName::new("payerfsp").unwrap(),
                currency: "USD".into(),
                net: "120".into(),
                account: 3,
            },
            SettledAccount {
                participant: FspName::new("payeefsp").unwrap(),
                currency: "USD".into(),
                net: "-120".into(),
                account: 5,
            },
        ];
        let alerts = settled_alerts(77, 9, &accounts);
        let ids: Vec<&str> = alerts.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(
            ids,
            ["settlement.9.3.77.settled", "settlement.9.5.77.settled"]
        );
        assert_eq!(alerts[1].participant.as_str(), "payeefsp");
        assert_eq!(alerts[1].kind, Kind::Settlement);
        assert_eq!(
            alerts[1].subject,
            "payeefsp: settlement 9 settled (USD -120)"
        );
        assert_eq!(
            alerts[1].body,
            "Settlement 9 is SETTLED. The net settlement amount of payeefsp in USD \
             (account 5) is -120; its position moved by it.\n"
        );
    }
}
