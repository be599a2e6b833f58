//! The hub's own clockwork: closing the settlement window on a schedule,
//! and watching each DFSP's position against its net debit cap so that an
//! operator can alert before the hub starts refusing its prepares.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use ledger::request::{CloseSettlementWindow, ReadParticipants, ReadSettlementWindows};
use ledger::{AccountKind, WindowState};

use crate::{now_ms, Hub};

const DAY_MS: i64 = 86_400_000;

/// A time of day in UTC, `HH:MM` or `HH:MM:SS`, at which the open window
/// is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CloseAt {
    second_of_day: u32,
}

impl FromStr for CloseAt {
    type Err = String;

    fn from_str(text: &str) -> Result<CloseAt, String> {
        let bad = || format!("'{text}' is not a UTC time of day HH:MM or HH:MM:SS");
        let parts: Vec<&str> = text.trim().split(':').collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(bad());
        }
        let number = |part: &str, max: u32| {
            (part.len() == 2 && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse::<u32>().ok())
                .flatten()
                .filter(|n| *n <= max)
                .ok_or_else(bad)
        };
        let hours = number(parts[0], 23)?;
        let minutes = number(parts[1], 59)?;
        let seconds = parts.get(2).map_or(Ok(0), |part| number(part, 59))?;
        Ok(CloseAt {
            second_of_day: hours * 3600 + minutes * 60 + seconds,
        })
    }
}

impl fmt::Display for CloseAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.second_of_day;
        write!(f, "{:02}:{:02}", s / 3600, s / 60 % 60)?;
        if !s.is_multiple_of(60) {
            write!(f, ":{:02}", s % 60)?;
        }
        Ok(())
    }
}

/// The first instant strictly after `now_ms` at one of `times` (UTC).
pub fn next_close_ms(times: &[CloseAt], now_ms: i64) -> Option<i64> {
    let day_start = now_ms - now_ms.rem_euclid(DAY_MS);
    times
        .iter()
        .flat_map(|at| {
            let offset = i64::from(at.second_of_day) * 1_000;
            [day_start + offset, day_start + DAY_MS + offset]
        })
        .filter(|&at| at > now_ms)
        .min()
}

/// Closes the open window at each of `times`, every day, skipping a window
/// with nothing in it. Runs until the runtime stops.
pub async fn close_on_schedule(hub: Arc<Hub>, times: Vec<CloseAt>) {
    loop {
        let Some(at) = next_close_ms(&times, now_ms()) else {
            return;
        };
        let wait = Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0));
        tokio::time::sleep(wait).await;
        // The clock may be late by a scheduling delay; the close is still
        // the one due at `at`.
        close_open_window(&hub).await;
    }
}

async fn close_open_window(hub: &Hub) {
    let windows = match hub.ask(ReadSettlementWindows {}).await {
        Ok(Ok(windows)) => windows,
        other => {
            tracing::error!(
                ?other,
                "scheduled close: cannot read the settlement windows"
            );
            return;
        }
    };
    let Some(open) = windows
        .iter()
        .rev()
        .find(|w| w.row.state == WindowState::Open)
    else {
        tracing::error!("scheduled close: no open settlement window");
        return;
    };
    let id = open.row.id;
    let close = CloseSettlementWindow {
        id,
        reason: "scheduled close".into(),
    };
    match hub
        .ask_audited(crate::audit::Change::window_close(id), close)
        .await
    {
        Ok(Ok(next)) => {
            hub.metrics.record_window_closed("schedule");
            tracing::info!(
                closed = id,
                opened = next.row.id,
                "settlement window closed on schedule"
            );
        }
        Ok(Err(rejection)) if rejection.description.ends_with("is empty") => {
            tracing::info!(window = id, "scheduled close skipped: the window is empty");
        }
        other => tracing::error!(window = id, ?other, "scheduled close failed"),
    }
}

/// Every `period`, computes each DFSP's position (reservations included)
/// as a share of its net debit cap, publishes it as a gauge, and logs when
/// it crosses `alarm_percent` — and alerts the DFSP's contacts
/// ([`crate::alerts`]) — and when it falls back below it by
/// [`crate::alerts::CLEAR_MARGIN_PERCENT`] (the hysteresis that keeps a
/// position oscillating around the threshold from alarming at every
/// transfer). The alarms start cleared: after a restart a DFSP still above
/// its threshold is alarmed, and told, again.
///
/// The same share of its liquidity (the funds of its settlement account
/// in that currency, beyond which prepares are refused with 4001) is a
/// second alarm, the liquidity cover, with the same hysteresis.
pub async fn watch_positions(hub: Arc<Hub>, alarm_percent: u8, period: Duration) {
    let mut near_cap = Alarms::new(alarm_percent);
    let mut low_cover = Alarms::new(alarm_percent);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let views = match hub.ask(ReadParticipants { name: None }).await {
            Ok(Ok(views)) => views,
            _ => continue,
        };
        for view in views.iter().filter(|v| !v.participant.is_hub) {
            for account in view
                .accounts
                .iter()
                .filter(|a| a.kind == AccountKind::Position)
            {
                let used = account
                    .value
                    .units()
                    .saturating_add(account.reserved.units());
                let key = (
                    view.participant.name.to_string(),
                    account.currency.to_string(),
                );
                let (participant, currency) = (&key.0, &key.1);
                let settlement = view
                    .accounts
                    .iter()
                    .find(|a| a.kind == AccountKind::Settlement && a.currency == account.currency);
                if let Some(settlement) = settlement {
                    // A deposit makes the settlement balance negative.
                    let liquidity = 0i128.saturating_sub(
                        settlement
                            .value
                            .units()
                            .saturating_add(settlement.reserved.units()),
                    );
                    let ratio = share(used, liquidity);
                    hub.metrics
                        .set_liquidity_share(participant, currency, ratio);
                    let percent = (ratio * 100.0).round();
                    match low_cover.look(&key, ratio) {
                        Some(true) => {
                            let liquidity = ledger::Amount::from_units(liquidity);
                            hub.alerts.liquidity_alarm(
                                view.participant.name,
                                currency,
                                &ledger::Amount::from_units(used).to_string(),
                                &liquidity.to_string(),
                                ratio * 100.0,
                                alarm_percent,
                                now_ms(),
                            );
                            tracing::warn!(%participant, %currency, position = %account.value, reserved = %account.reserved, %liquidity, percent, "position reached the alarm share of the liquidity (settlement funds)");
                        }
                        Some(false) => {
                            tracing::info!(%participant, %currency, percent, "position back below the alarm share of the liquidity, by the margin")
                        }
                        None => {}
                    }
                }
                let Some(cap) = account.net_debit_cap else {
                    continue;
                };
                let ratio = share(used, cap.units());
                let percent = (ratio * 100.0).round();
                let change = near_cap.look(&key, ratio);
                hub.metrics
                    .set_position(participant, currency, ratio, near_cap.is_on(&key));
                match change {
                    Some(true) => {
                        hub.alerts.position_alarm(
                            view.participant.name,
                            currency,
                            &account.value.to_string(),
                            &account.reserved.to_string(),
                            &cap.to_string(),
                            ratio * 100.0,
                            alarm_percent,
                            now_ms(),
                        );
                        tracing::warn!(%participant, %currency, position = %account.value, reserved = %account.reserved, net_debit_cap = %cap, percent, "position reached the alarm share of the net debit cap");
                    }
                    Some(false) => {
                        tracing::info!(%participant, %currency, percent, "position back below the alarm share of the net debit cap, by the margin")
                    }
                    None => {}
                }
            }
        }
    }
}

/// Which (participant, currency) pairs are alarmed, by one share, with the
/// hysteresis of [`crate::alerts::position_alarmed`].
struct Alarms {
    percent: u8,
    on: HashSet<(String, String)>,
}

impl Alarms {
    fn new(percent: u8) -> Alarms {
        Alarms {
            percent,
            on: HashSet::new(),
        }
    }

    fn is_on(&self, key: &(String, String)) -> bool {
        self.on.contains(key)
    }

    /// Takes the share now: `Some(true)` if the alarm is raised by it,
    /// `Some(false)` if cleared, `None` if it stays as it was.
    fn look(&mut self, key: &(String, String), ratio: f64) -> Option<bool> {
        let was = self.is_on(key);
        let now = crate::alerts::position_alarmed(was, ratio * 100.0, self.percent);
        match (was, now) {
            (false, true) => Some(self.on.insert(key.clone())),
            (true, false) => Some(!self.on.remove(key)),
            _ => None,
        }
    }
}

/// `used` as a share of `of`: infinite when there is nothing to share and
/// something is used.
fn share(used: i128, of: i128) -> f64 {
    match of {
        of if of <= 0 && used > 0 => f64::INFINITY,
        of if of <= 0 => 0.0,
        of => used as f64 / of as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alarm_is_raised_and_cleared_once_each() {
        let mut alarms = Alarms::new(80);
        let key = ("dfspa".to_string(), "USD".to_string());
        let looks: Vec<Option<bool>> = [0.5, 0.8, 0.9, 0.76, 0.81, 0.74, 0.7, 0.8]
            .iter()
            .map(|ratio| alarms.look(&key, *ratio))
            .collect();
        assert_eq!(
            looks,
            [
                None,
                Some(true),
                None,
                None,
                None,
                Some(false),
                None,
                Some(true)
            ]
        );
        assert!(alarms.is_on(&key));
        assert_eq!(share(10, 0), f64::INFINITY);
        assert_eq!(share(0, 0), 0.0);
        assert_eq!(share(-10, 100), -0.1);
    }

    #[test]
    fn close_times_parse_and_print() {
        assert_eq!("00:00".parse::<CloseAt>().unwrap().to_string(), "00:00");
        assert_eq!("23:59".parse::<CloseAt>().unwrap().to_string(), "23:59");
        assert_eq!(
            "06:30:15".parse::<CloseAt>().unwrap().to_string(),
            "06:30:15"
        );
        assert_eq!("06:30:00".parse::<CloseAt>().unwrap().to_string(), "06:30");
        for bad in [
            "24:00", "12:60", "7:00", "12", "ab:cd", "12:5", "", "12:00:60", "1:2:3:4",
        ] {
            assert!(bad.parse::<CloseAt>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_next_close_is_the_first_time_after_now() {
        let times: Vec<CloseAt> = ["06:00", "18:30"]
            .iter()
            .map(|t| t.parse().unwrap())
            .collect();
        let day = 20_000 * DAY_MS;
        let at = |h: i64, m: i64| day + h * 3_600_000 + m * 60_000;
        assert_eq!(next_close_ms(&times, at(5, 0)), Some(at(6, 0)));
        assert_eq!(next_close_ms(&times, at(6, 0)), Some(at(18, 30)));
        assert_eq!(next_close_ms(&times, at(19, 0)), Some(at(24 + 6, 0)));
        assert_eq!(next_close_ms(&[], at(1, 0)), None);
    }
}
