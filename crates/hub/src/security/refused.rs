//! Every refusal leaves a trace: a counter by class and participant, a
//! warning that a burst cannot turn into a flood, and a per-DFSP tally of
//! the last hour (the console's overview, `GET /stats/refusals`).
//!
//! A scheme's DFSPs hold valid credentials, so a refusal of a
//! well-authenticated request is the first sign of a participant probing
//! the hub. Operators need to see it without reading 10,000 lines: the
//! warning for one (class, participant) is written at most once per
//! [`LOG_INTERVAL`], and the next one says how many were not written.
//!
//! Label sets are bounded: `class` is a closed enum, and `participant` is
//! a DFSP the hub knows (or the hub's own name), else `unknown` — a stream
//! of made-up names cannot grow the metrics or these tables.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use ledger::{Currency, FspName};

use crate::Hub;

/// At most one warning per (class, participant) in this time.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The tally's window: the console shows refusals of the last hour.
const WINDOW_MINUTES: usize = 60;

/// What kind of refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// FSPIOP-Source is not who the connection proved to be.
    Identity,
    /// FSPIOP-Source (or a client certificate) names the hub itself.
    HubSource,
    /// The caller is not the payer or payee a transfer message needs, or a
    /// header and the body disagree on who that is.
    NotParty,
    /// A JWS signature that is missing, malformed or does not verify.
    Jws,
    /// An answer nobody asked this DFSP for: from someone other than the
    /// addressee, to someone other than the requester, or for nothing
    /// pending.
    UnsolicitedAnswer,
    /// A path value that would be URL syntax in a callback (`/`, `?`, `#`,
    /// dot segments, control characters).
    PathSyntax,
    /// More than one FSPIOP-Source or identity header.
    DuplicateHeader,
    /// A `Date` further from the hub's clock than `--max-clock-skew-s`.
    StaleDate,
    /// Admin API without a valid credential (401).
    AdminUnauthenticated,
    /// Admin API write by a role that may not write (403).
    AdminForbidden,
    /// An admin change the hub refused as invalid.
    AdminInvalid,
    /// An admin write from another site or host (open loopback admin API).
    AdminCrossSite,
    /// A request that expects an answer, refused because too many await
    /// answers (the table is full, or the requester holds its share).
    Busy,
    /// A party registered in the built-in registry although an external
    /// oracle serves its type (it would override the oracle's holder).
    OracleServed,
    /// A message carried by a proxy (FSPIOP-Proxy) from a caller that is
    /// not that proxy, through a participant that is not one, or from a
    /// source the proxy may not speak for (docs/design/interscheme.md,
    /// section 8, rule 6).
    ProxySource,
    /// A connection refused at accept: the address held its
    /// `--max-connections`.
    Connections,
    /// A connection refused at accept: its client held its share of the
    /// address's connections (`--max-connections-per-client`).
    ClientConnections,
    /// Pausing a DFSP (`ledger::PauseRefusal`): a new payment whose payer
    /// may not send (receive-only or suspended).
    PayerMayNotSend,
    /// A new payment whose payee may not receive (send-only or suspended).
    PayeeMayNotReceive,
    /// A new payment needing a disabled currency account.
    AccountInactive,
}

impl Class {
    pub const ALL: [Class; 20] = [
        Class::Identity,
        Class::HubSource,
        Class::NotParty,
        Class::Jws,
        Class::UnsolicitedAnswer,
        Class::PathSyntax,
        Class::DuplicateHeader,
        Class::StaleDate,
        Class::AdminUnauthenticated,
        Class::AdminForbidden,
        Class::AdminInvalid,
        Class::AdminCrossSite,
        Class::Busy,
        Class::OracleServed,
        Class::ProxySource,
        Class::Connections,
        Class::ClientConnections,
        Class::PayerMayNotSend,
        Class::PayeeMayNotReceive,
        Class::AccountInactive,
    ];

    /// The class of a refusal by the pause rule.
    pub fn of_pause(reason: ledger::PauseRefusal) -> Class {
        match reason {
            ledger::PauseRefusal::PayerMayNotSend => Class::PayerMayNotSend,
            ledger::PauseRefusal::PayeeMayNotReceive => Class::PayeeMayNotReceive,
            ledger::PauseRefusal::AccountInactive => Class::AccountInactive,
        }
    }

    /// The `class` label and JSON key.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Identity => "identity",
            Class::HubSource => "hub_source",
            Class::NotParty => "not_party",
            Class::Jws => "jws",
            Class::UnsolicitedAnswer => "unsolicited_answer",
            Class::PathSyntax => "path_syntax",
            Class::DuplicateHeader => "duplicate_header",
            Class::StaleDate => "stale_date",
            Class::AdminUnauthenticated => "admin_unauthenticated",
            Class::AdminForbidden => "admin_forbidden",
            Class::AdminInvalid => "admin_invalid",
            Class::AdminCrossSite => "admin_cross_site",
            Class::Busy => "busy",
            Class::OracleServed => "oracle_served",
            Class::ProxySource => "proxy_source",
            Class::Connections => "connections",
            Class::ClientConnections => "client_connections",
            Class::PayerMayNotSend => ledger::PauseRefusal::PayerMayNotSend.as_str(),
            Class::PayeeMayNotReceive => ledger::PauseRefusal::PayeeMayNotReceive.as_str(),
            Class::AccountInactive => ledger::PauseRefusal::AccountInactive.as_str(),
        }
    }

    /// The warning's words.
    fn message(self) -> &'static str {
        match self {
            Class::Identity => "FSPIOP request refused: the caller is not who FSPIOP-Source says",
            Class::HubSource => "FSPIOP request refused: it claims to come from the hub itself",
            Class::NotParty => {
                "FSPIOP request refused: the caller is not the party this message needs"
            }
            Class::Jws => "FSPIOP request refused: its JWS signature does not hold",
            Class::UnsolicitedAnswer => {
                "FSPIOP answer refused: no request pending from its destination to its source"
            }
            Class::PathSyntax => "FSPIOP request refused: a path value is URL syntax",
            Class::DuplicateHeader => "request refused: an identity header appears more than once",
            Class::StaleDate => "FSPIOP request refused: its Date is too far from the hub's clock",
            Class::AdminUnauthenticated => "admin request refused: no valid credential",
            Class::AdminForbidden => "admin request refused: the caller's role may not do this",
            Class::AdminInvalid => "admin change refused",
            Class::AdminCrossSite => "admin request refused: cross-site or foreign Host",
            Class::Busy => "request refused (2003): too many requests await answers",
            Class::OracleServed => "party registration refused: an external oracle serves its type",
            Class::ProxySource => {
                "FSPIOP request refused: its FSPIOP-Proxy may not carry it (not the caller, not a proxy, or not for that source)"
            }
            Class::Connections => "connection refused: the address holds its --max-connections",
            Class::ClientConnections => {
                "connection refused: its client holds its share of the address's connections (--max-connections-per-client)"
            }
            Class::PayerMayNotSend => {
                "payment refused: its payer's mode forbids sending (receive-only or suspended)"
            }
            Class::PayeeMayNotReceive => {
                "payment refused: its payee's mode forbids receiving (send-only or suspended)"
            }
            Class::AccountInactive => "payment refused: a currency account it needs is disabled",
        }
    }
}

/// One (class, participant)'s warning gate.
struct Gate {
    /// When the next warning may be written.
    next_at: Instant,
    /// Refusals not written since the last warning.
    suppressed: u64,
}

/// Per-minute counts of the last [`WINDOW_MINUTES`] minutes.
struct Tally {
    /// The minute (since the tally's origin) of `counts[minute % 60]`.
    minutes: [u64; WINDOW_MINUTES],
    counts: [u64; WINDOW_MINUTES],
}

impl Tally {
    fn new() -> Tally {
        Tally {
            minutes: [u64::MAX; WINDOW_MINUTES],
            counts: [0; WINDOW_MINUTES],
        }
    }

    fn add(&mut self, minute: u64) {
        let slot = (minute % WINDOW_MINUTES as u64) as usize;
        if self.minutes[slot] != minute {
            self.minutes[slot] = minute;
            self.counts[slot] = 0;
        }
        self.counts[slot] += 1;
    }

    fn sum_since(&self, now_minute: u64) -> u64 {
        let oldest = now_minute.saturating_sub(WINDOW_MINUTES as u64 - 1);
        self.minutes
            .iter()
            .zip(self.counts)
            .filter(|(minute, _)| {
                **minute != u64::MAX && **minute >= oldest && **minute <= now_minute
            })
            .map(|(_, count)| count)
            .sum()
    }
}

/// The hub's record of refusals.
pub struct Refusals {
    origin: Instant,
    gates: Mutex<HashMap<(Class, String), Gate>>,
    tallies: Mutex<HashMap<(String, Class), Tally>>,
    log_interval: Duration,
}

impl Default for Refusals {
    fn default() -> Refusals {
        Refusals::with_log_interval(LOG_INTERVAL)
    }
}

/// What one participant was refused in the last hour, by class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentRefusals {
    pub participant: String,
    pub total: u64,
    pub by_class: Vec<(Class, u64)>,
}

impl Refusals {
    pub fn with_log_interval(log_interval: Duration) -> Refusals {
        Refusals {
            origin: Instant::now(),
            gates: Mutex::default(),
            tallies: Mutex::default(),
            log_interval,
        }
    }

    fn minute(&self, at: Instant) -> u64 {
        at.duration_since(self.origin).as_secs() / 60
    }

    /// Tallies a refusal of `participant` (already a bounded label) and
    /// says whether to write a warning now, with the count of those not
    /// written since the last one.
    pub fn note(&self, class: Class, participant: &str, at: Instant) -> Option<u64> {
        let minute = self.minute(at);
        {
            let mut tallies = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
            match tallies.get_mut(&(participant.to_string(), class)) {
                Some(tally) => tally.add(minute),
                None => {
                    let mut tally = Tally::new();
                    tally.add(minute);
                    tallies.insert((participant.to_string(), class), tally);
                }
            }
        }
        let mut gates = self.gates.lock().unwrap_or_else(|e| e.into_inner());
        let gate = gates
            .entry((class, participant.to_string()))
            .or_insert(Gate {
                next_at: at,
                suppressed: 0,
            });
        if at >= gate.next_at {
            let suppressed = gate.suppressed;
            gate.suppressed = 0;
            gate.next_at = at + self.log_interval;
            Some(suppressed)
        } else {
            gate.suppressed += 1;
            None
        }
    }

    /// Refusals of the last hour per participant, most first.
    pub fn last_hour(&self, now: Instant) -> Vec<RecentRefusals> {
        let minute = self.minute(now);
        let tallies = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        let mut by_participant: HashMap<&str, Vec<(Class, u64)>> = HashMap::new();
        for ((participant, class), tally) in tallies.iter() {
            let count = tally.sum_since(minute);
            if count > 0 {
                by_participant
                    .entry(participant.as_str())
                    .or_default()
                    .push((*class, count));
            }
        }
        let mut recent: Vec<RecentRefusals> = by_participant
            .into_iter()
            .map(|(participant, mut by_class)| {
                by_class.sort();
                RecentRefusals {
                    participant: participant.to_string(),
                    total: by_class.iter().map(|(_, count)| count).sum(),
                    by_class,
                }
            })
            .collect();
        recent.sort_by(|a, b| {
            b.total
                .cmp(&a.total)
                .then_with(|| a.participant.cmp(&b.participant))
        });
        recent
    }
}

/// A pause rule over (payer, payee) and their modes: a payment's
/// (`ledger::payment_refusal`) or an FX quote's (`ledger::conversion_refusal`).
pub(crate) type PauseRule = fn(
    (FspName, ledger::ParticipantMode),
    (FspName, ledger::ParticipantMode),
) -> Option<ledger::Rejection>;

/// One side of a payment for the pause rule: the participant, and the
/// currencies it needs its POSITION accounts enabled in (none for a lookup
/// naming no currency).
pub(crate) type PaymentSide<'a> = (FspName, &'a [Currency]);

impl Hub {
    /// Counts and logs a refusal by the pause rule, if `error` is one (its
    /// class is the rule's reason), under the participant that asked.
    pub(crate) fn note_paused(&self, caller: FspName, error: &ledger::Rejection) {
        if let Some(reason) = error.paused {
            let description = format!("{} - {}", error.code.description(), error.description);
            self.refuse(Class::of_pause(reason), caller.as_str(), &description);
        }
    }

    /// The pause rule for a request the hub routes without the ledger (a
    /// lookup, a quote, a request to pay) that starts a payment from
    /// `payer` to `payee`, in `currency` if it names one, asked by `asker`
    /// (one of the two), on the hub's copy of the committed modes and
    /// disabled accounts (current as of the last committed batch); a
    /// refusal is counted and logged under `asker`. A participant the hub
    /// does not know is left to the route's other checks.
    pub(crate) fn pause_refusal(
        &self,
        asker: FspName,
        payer: FspName,
        payee: FspName,
        currency: Option<Currency>,
    ) -> Option<ledger::Rejection> {
        let currencies = currency.as_slice();
        self.pause_refusal_by(
            ledger::payment_refusal,
            asker,
            (payer, currencies),
            (payee, currencies),
        )
    }

    /// [`Hub::pause_refusal`] by another `rule` than a payment's (an FX
    /// quote's: `ledger::conversion_refusal`), the payer needing accounts
    /// in its currencies and the payee in its own (an FXP: the source
    /// currency it takes and the target it pays): the modes first, then
    /// the accounts (`ledger::accounts_refusal`).
    pub(crate) fn pause_refusal_by(
        &self,
        rule: PauseRule,
        asker: FspName,
        (payer, payer_currencies): PaymentSide<'_>,
        (payee, payee_currencies): PaymentSide<'_>,
    ) -> Option<ledger::Rejection> {
        // Another scheme's DFSP pays or is paid through its proxy: the
        // proxy's mode and accounts are the ones that apply.
        let (payer, payee) = (self.reach(payer), self.reach(payee));
        let payer_mode = self.endpoints.participant_mode(payer)?;
        let payee_mode = self.endpoints.participant_mode(payee)?;
        let refusal = rule((payer, payer_mode), (payee, payee_mode)).or_else(|| {
            ledger::accounts_refusal(
                (payer, payer_currencies),
                (payee, payee_currencies),
                |name, currency| self.endpoints.account_disabled(name, currency),
            )
        })?;
        self.note_paused(asker, &refusal);
        Some(refusal)
    }

    /// The pause rule for `holder` registering a party: every payment
    /// found through the party pays its holder, so a holder that may not
    /// receive (send-only, suspended) is refused as a lookup would refuse
    /// it as the payee (3201), counted and logged under it.
    /// A party registered in a `currency` is found to be paid in it: the
    /// holder's account in it disabled refuses it too (3201, naming it).
    pub(crate) fn holder_refusal(
        &self,
        holder: FspName,
        currency: Option<ledger::Currency>,
    ) -> Option<ledger::Rejection> {
        let mode = self.endpoints.participant_mode(holder)?;
        let refusal = ledger::side_refusal((holder, mode), ledger::Side::Payee).or_else(|| {
            ledger::accounts_refusal(
                (holder, &[]),
                (holder, currency.as_slice()),
                |name, currency| self.endpoints.account_disabled(name, currency),
            )
        })?;
        self.note_paused(holder, &refusal);
        Some(refusal)
    }

    /// The label a claimed participant name is counted under: a DFSP the
    /// hub knows, the hub's own name, or `unknown`.
    pub(crate) fn participant_label(&self, claimed: &str) -> String {
        match ledger::FspName::new(claimed.trim()) {
            Some(fsp) if fsp == self.config.hub_name || self.endpoints.contains(fsp) => {
                fsp.to_string()
            }
            _ => "unknown".to_string(),
        }
    }

    /// Records a refusal: `kasi_refusals_total{class, participant}`, the
    /// last hour's tally, and a warning at most every [`LOG_INTERVAL`] per
    /// (class, participant). `claimed` is the participant the request
    /// claimed to be (FSPIOP-Source, or for the admin API the caller's
    /// name); `detail` says what was refused (it is escaped by the log).
    pub fn refuse(&self, class: Class, claimed: &str, detail: &str) {
        let participant = self.participant_label(claimed);
        let total = self.metrics.record_refusal(class.as_str(), &participant);
        if let Some(suppressed) = self.refusals.note(class, &participant, Instant::now()) {
            tracing::warn!(
                class = class.as_str(),
                participant = %participant,
                claimed = %crate::log_safe(claimed),
                detail = %crate::log_safe(detail),
                refused_total = total,
                suppressed_since_last_warning = suppressed,
                "{}",
                class.message()
            );
        }
    }
}

impl Hub {
    /// What a listener tells of each connection it refused at a cap: a
    /// refusal of [`Class::Connections`] or [`Class::ClientConnections`],
    /// counted under `unknown` (an address is not a participant, nor a
    /// bounded label) and warned at most every [`LOG_INTERVAL`] naming the
    /// client's address and how many were not warned of.
    pub fn connection_refusals(
        self: &std::sync::Arc<Self>,
        api: &'static str,
    ) -> crate::connections::OnRefused {
        use crate::connections::Refused;
        let hub = self.clone();
        crate::connections::OnRefused(std::sync::Arc::new(move |ip, refused| {
            let (class, detail) = match refused {
                Refused::Full { max } => (
                    Class::Connections,
                    format!("the {api} address holds its {max} connections; one from {ip} refused"),
                ),
                Refused::ClientFull { max } => (
                    Class::ClientConnections,
                    format!("{ip} holds {max} connections to the {api} address, its share"),
                ),
            };
            // Never a participant's name: counted as `unknown`, named in
            // the warning.
            hub.refuse(class, &format!("address {ip}"), &detail);
        }))
    }
}

pub fn router(hub: std::sync::Arc<Hub>) -> Router {
    Router::new()
        .route("/stats/refusals", get(get_refusals))
        .with_state(hub)
}

/// `GET /stats/refusals`: refusals of the last hour per participant.
async fn get_refusals(State(hub): State<std::sync::Arc<Hub>>) -> Response {
    let recent = hub.refusals.last_hour(Instant::now());
    let participants: Vec<_> = recent
        .iter()
        .map(|entry| {
            let by_class: serde_json::Map<String, serde_json::Value> = entry
                .by_class
                .iter()
                .map(|(class, count)| (class.as_str().to_string(), json!(count)))
                .collect();
            json!({
                "participant": entry.participant,
                "refusals": entry.total,
                "byClass": by_class,
            })
        })
        .collect();
    Json(json!({
        "windowSeconds": WINDOW_MINUTES * 60,
        "participants": participants,
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_writes_one_warning_per_interval_and_counts_the_rest() {
        let refusals = Refusals::with_log_interval(Duration::from_secs(10));
        let start = Instant::now();
        let mut written = Vec::new();
        for i in 0..10_000u64 {
            // 10,000 refusals over 25 s.
            let at = start + Duration::from_micros(i * 2_500);
            if let Some(suppressed) = refusals.note(Class::UnsolicitedAnswer, "mallory", at) {
                written.push(suppressed);
            }
        }
        assert_eq!(written.len(), 3, "{written:?}");
        assert_eq!(written[0], 0);
        assert_eq!(
            written.iter().sum::<u64>() + written.len() as u64,
            10_000 - {
                // Those after the last warning are still waiting to be told.
                let gates = refusals.gates.lock().unwrap();
                gates[&(Class::UnsolicitedAnswer, "mallory".to_string())].suppressed
            }
        );
        // Another participant and another class have gates of their own.
        assert_eq!(
            refusals.note(Class::UnsolicitedAnswer, "eve", start),
            Some(0)
        );
        assert_eq!(refusals.note(Class::Identity, "mallory", start), Some(0));
    }

    #[test]
    fn the_tally_forgets_what_is_older_than_an_hour() {
        let refusals = Refusals::default();
        let start = refusals.origin;
        refusals.note(Class::Jws, "a", start);
        refusals.note(Class::Jws, "a", start + Duration::from_secs(30 * 60));
        refusals.note(Class::Identity, "a", start + Duration::from_secs(30 * 60));
        refusals.note(Class::Jws, "b", start + Duration::from_secs(59 * 60));
        let at = |minutes: u64| start + Duration::from_secs(minutes * 60);
        let recent = refusals.last_hour(at(59));
        assert_eq!(recent.len(), 2);
        assert_eq!(recent[0].participant, "a");
        assert_eq!(recent[0].total, 3);
        assert_eq!(
            recent[0].by_class,
            vec![(Class::Identity, 1), (Class::Jws, 2)]
        );
        // An hour after the first, it has left the window.
        let recent = refusals.last_hour(at(60));
        assert_eq!(recent[0].total, 2, "{recent:?}");
        // 90 minutes on, only b's remains.
        let recent = refusals.last_hour(at(90));
        assert_eq!(recent.len(), 1);
        assert_eq!(recent[0].participant, "b");
        // Far later, nothing.
        assert!(refusals.last_hour(at(600)).is_empty());
    }
}
