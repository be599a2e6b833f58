//! Alerts that reach the DFSPs: mail to the contacts a DFSP registered
//! under Mojaloop's email endpoint types, about its position nearing the
//! net debit cap or its liquidity, a change of that cap, a settlement that moved its
//! position, and its callback endpoint failing and recovering.
//!
//! Who gets what:
//!
//! | event | endpoint type |
//! |---|---|
//! | position reaches the alarm share of the net debit cap | `NET_DEBIT_CAP_THRESHOLD_BREACH_EMAIL` |
//! | position reaches the alarm share of the liquidity (settlement funds) | `NET_DEBIT_CAP_THRESHOLD_BREACH_EMAIL` |
//! | callbacks to the DFSP failing, then answered again | `NET_DEBIT_CAP_THRESHOLD_BREACH_EMAIL` |
//! | the net debit cap changed (`limits.set`) | `NET_DEBIT_CAP_ADJUSTMENT_EMAIL` |
//! | a settlement it is part of SETTLED | `SETTLEMENT_TRANSFER_POSITION_CHANGE_EMAIL` |
//!
//! The callback alert goes to the threshold contact because both tell the
//! DFSP's operations that payments are about to stop (no headroom, or no
//! way to tell it of them); Mojaloop has no type of its own for it. A DFSP
//! may also register kasi's [`WEBHOOK_TYPE`], a URL every alert of every
//! kind is POSTed to as JSON, whether mail is configured or not.
//!
//! The events are noticed where they happen (the position watch, a watch
//! of the dispatcher's per-destination health) and queued here with
//! [`Alerts::send`], which never waits: a bounded queue, a full one drops
//! the alert (counted). The alerts about committed changes (a net debit
//! cap changed, a settlement SETTLED) come from one source only, the
//! change feed's follower (`alerts_feed`), which queues each with
//! [`Alerts::deliver`] and waits until it has ended before it moves its
//! durable cursor. One task sends them, one at a time, over one SMTP
//! server: deduplicated by the alert's id (which is also its Message-ID,
//! so a resend after a lost answer or a crash is one mail to a receiver
//! that deduplicates), rate-limited per DFSP, retried with backoff on a
//! transient SMTP failure until it is sent (a permanent refusal, 5xx, is
//! given up); a webhook's delivery is a task of its own, so that a DFSP's
//! dead webhook holds up nobody else. Every alert ends counted in
//! `kasi_alerts_total{kind,result}`; failures are logged at most once a
//! minute with how many the line stands for.
//!
//! Across a restart: the cap changes and settlements are at least once
//! (the follower reads again from its cursor, with the same ids). The
//! queue of the rest is lost when the hub stops: the position alarms are
//! computed again from the positions when it starts, so a DFSP still above
//! its threshold is told again (at least once, not exactly once); a
//! callback outage under way when the hub stopped is told only if it goes
//! on after the start.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ledger::FspName;
use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use tokio::sync::{mpsc, oneshot};

use crate::endpoints::Endpoints;
use crate::metrics::Metrics;

/// How far below the alarm share a position must fall before the alarm
/// clears (percentage points): a position oscillating around the
/// threshold alarms once, not at every transfer.
pub const CLEAR_MARGIN_PERCENT: u8 = 5;

/// Alerts waiting to be sent; one more is dropped and counted.
pub const QUEUE_CAPACITY: usize = 1_024;

/// Ids of alerts already taken, remembered to drop a repeat.
const REMEMBERED_IDS: usize = 4_096;

/// First and longest wait between two tries of a transient SMTP failure.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// How often a repeating failure is logged at most.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// What an alert is about; names its label and its recipients' type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    PositionThreshold,
    LiquidityCover,
    NetDebitCap,
    Settlement,
    Callbacks,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::PositionThreshold => "position_threshold",
            Kind::LiquidityCover => "liquidity_cover",
            Kind::NetDebitCap => "net_debit_cap",
            Kind::Settlement => "settlement",
            Kind::Callbacks => "callbacks",
        }
    }

    /// The endpoint type whose addresses receive this kind.
    pub fn endpoint_type(self) -> &'static str {
        match self {
            Kind::PositionThreshold | Kind::LiquidityCover | Kind::Callbacks => {
                "NET_DEBIT_CAP_THRESHOLD_BREACH_EMAIL"
            }
            Kind::NetDebitCap => "NET_DEBIT_CAP_ADJUSTMENT_EMAIL",
            Kind::Settlement => "SETTLEMENT_TRANSFER_POSITION_CHANGE_EMAIL",
        }
    }
}

/// One alert to one DFSP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alert {
    pub kind: Kind,
    pub participant: FspName,
    /// Names the event, the same for every try of it: the dedupe key and
    /// the Message-ID's left part (letters, digits, `.` and `-`).
    pub id: String,
    pub subject: String,
    pub body: String,
}

/// Whether a position is alarmed, given whether it was: alarmed from
/// `alarm_percent` up, cleared only below `alarm_percent` −
/// [`CLEAR_MARGIN_PERCENT`].
pub fn position_alarmed(was: bool, percent: f64, alarm_percent: u8) -> bool {
    let threshold = if was {
        alarm_percent.saturating_sub(CLEAR_MARGIN_PERCENT)
    } else {
        alarm_percent
    };
    percent >= f64::from(threshold)
}

/// How the connection to the SMTP server is secured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmtpTls {
    /// STARTTLS, refused if the server does not offer it (`?tls=required`,
    /// the default).
    Required,
    /// TLS from the first byte (`smtps://`).
    Wrapper,
    /// Plain text (`?tls=none`): a relay on the same host only.
    None,
}

/// The SMTP server, from `--smtp-url`.
#[derive(Clone, PartialEq, Eq)]
pub struct SmtpSettings {
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    pub user: Option<String>,
    pub password: Option<String>,
}

impl fmt::Debug for SmtpSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .finish()
    }
}

impl SmtpSettings {
    /// `smtp://[USER[:PASSWORD]@]HOST[:PORT][?tls=required|none]` (port
    /// 587 with TLS, 25 without) or `smtps://…` (port 465); user and
    /// password percent-encoded.
    pub fn parse(text: &str) -> Result<SmtpSettings, String> {
        let url = url::Url::parse(text).map_err(|e| format!("not a URL: {e}"))?;
        let mut tls = match url.scheme() {
            "smtp" => SmtpTls::Required,
            "smtps" => SmtpTls::Wrapper,
            other => return Err(format!("scheme '{other}' is neither smtp nor smtps")),
        };
        for (key, value) in url.query_pairs() {
            match (key.as_ref(), value.as_ref(), tls) {
                ("tls", "required", SmtpTls::Required) => {}
                ("tls", "none", SmtpTls::Required) => tls = SmtpTls::None,
                ("tls", other, _) => {
                    return Err(format!(
                        "tls={other}: write tls=required (STARTTLS) or tls=none with smtp://; smtps:// is always TLS"
                    ))
                }
                (other, _, _) => return Err(format!("unknown parameter '{other}' (only tls=)")),
            }
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or("no host")?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if url.path().len() > 1 {
            return Err("a path has no meaning here".into());
        }
        let decode = |part: &str| {
            url::form_urlencoded::parse(format!("x={}", part.replace('+', "%2B")).as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        let user = Some(url.username()).filter(|u| !u.is_empty()).map(decode);
        let password = url.password().map(decode);
        let port = url.port().unwrap_or(match tls {
            SmtpTls::Required => 587,
            SmtpTls::Wrapper => 465,
            SmtpTls::None => 25,
        });
        Ok(SmtpSettings {
            host,
            port,
            tls,
            user,
            password,
        })
    }
}

/// Refuses a sender that is not one mailbox (`a@b.example` or
/// `Name <a@b.example>`).
pub fn check_address(text: &str) -> Result<(), String> {
    text.parse::<Mailbox>()
        .map(drop)
        .map_err(|e| format!("'{text}' is not an address: {e}"))
}

/// How alerts are mailed (`--smtp-url`).
#[derive(Clone, Debug)]
pub struct MailConfig {
    pub smtp: SmtpSettings,
    /// The sender, `alerts@hub.example` or `Hub <alerts@hub.example>`.
    pub from: String,
    /// A CA (PEM) the SMTP server's certificate chains to, beside the
    /// system's.
    pub ca_pem: Option<Vec<u8>>,
}

/// Settings of the alerts.
#[derive(Clone, Debug)]
pub struct AlertsConfig {
    /// Mail; `None`: only the DFSPs' webhooks.
    pub mail: Option<MailConfig>,
    /// Alerts sent to one DFSP in any hour, at most.
    pub per_dfsp_per_hour: u32,
    /// How long callbacks to a DFSP fail before it is told.
    pub callbacks_failing_after: Duration,
}

impl Default for AlertsConfig {
    fn default() -> AlertsConfig {
        AlertsConfig {
            mail: None,
            per_dfsp_per_hour: 20,
            callbacks_failing_after: Duration::from_secs(60),
        }
    }
}

/// kasi's endpoint type of a DFSP's alerts webhook: each alert is POSTed
/// there as JSON (see [`webhook_body`]).
pub const WEBHOOK_TYPE: &str = "KASI_ALERTS_WEBHOOK_URL";

/// Webhook deliveries under way at once (across DFSPs); one more is
/// dropped and counted.
const WEBHOOKS_IN_FLIGHT: usize = 64;

/// How long a webhook delivery is retried before it is given up.
const WEBHOOK_RETRY_FOR: Duration = Duration::from_secs(3_600);

/// Queues alerts for the sending task; off (everything ignored) in a hub
/// built without it. Cheap to clone.
#[derive(Clone, Default)]
pub struct Alerts {
    inner: Option<Arc<Queue>>,
}

/// Held by whatever still works on an alert that someone awaits (its
/// mail, its webhook's delivery); the alert has ended, delivered or given
/// up for good, once the last holder drops it.
type Ending = Option<Arc<oneshot::Sender<()>>>;

struct Queue {
    sender: mpsc::Sender<(Alert, Ending)>,
    metrics: Arc<Metrics>,
    callbacks_failing_after: Duration,
    dropped: Mutex<engine::Repeats>,
}

impl Alerts {
    /// Starts the sending task on the current runtime; webhooks are
    /// called with `tls` (the hub's outbound TLS) for `https://`.
    pub fn start(
        config: AlertsConfig,
        hub_name: FspName,
        endpoints: Arc<Endpoints>,
        metrics: Arc<Metrics>,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Alerts, String> {
        let mail = match &config.mail {
            Some(mail) => {
                let from: Mailbox = mail
                    .from
                    .parse()
                    .map_err(|e| format!("--alerts-from '{}': {e}", mail.from))?;
                Some((transport(mail)?, from))
            }
            None => None,
        };
        let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let sending = Sending {
            mail,
            webhooks: Webhooks::new(tls, metrics.clone()),
            hub_name,
            endpoints,
            metrics: metrics.clone(),
            limit: RateLimit::new(config.per_dfsp_per_hour),
            seen: Remembered::new(REMEMBERED_IDS),
            failures: engine::Repeats::new(LOG_EVERY),
            not_sent: engine::Repeats::new(LOG_EVERY),
        };
        tokio::spawn(sending.run(receiver));
        Ok(Alerts {
            inner: Some(Arc::new(Queue {
                sender,
                metrics,
                callbacks_failing_after: config.callbacks_failing_after,
                dropped: Mutex::new(engine::Repeats::new(LOG_EVERY)),
            })),
        })
    }

    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// Queues `alert`; never waits. Dropped (and counted) when the queue
    /// is full.
    pub fn send(&self, alert: Alert) {
        let Some(queue) = &self.inner else {
            return;
        };
        let kind = alert.kind;
        if let Err(error) = queue.sender.try_send((alert, None)) {
            queue.metrics.record_alert(kind.label(), "dropped");
            let repeated = queue
                .dropped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .failed();
            if let Some(repeated) = repeated {
                tracing::warn!(kind = kind.label(), %error, repeated, "alert dropped: its queue is full");
            }
        }
    }

    /// Queues `alert`, waiting for room, and returns once it has ended:
    /// mailed (the SMTP server accepted it) and its webhook answered 2xx,
    /// or given up for good (no recipient, the DFSP's hourly limit, a
    /// permanent refusal, a webhook failing for an hour). For the change
    /// feed's alerts (`alerts_feed`), whose cursor moves only then.
    pub async fn deliver(&self, alert: Alert) {
        let Some(queue) = &self.inner else {
            return;
        };
        let (held, ended) = oneshot::channel();
        if queue
            .sender
            .send((alert, Some(Arc::new(held))))
            .await
            .is_ok()
        {
            // Never sent to: this returns once the last holder drops it.
            let _ = ended.await;
        }
    }

    /// A DFSP's position reached the alarm share of its net debit cap.
    #[allow(clippy::too_many_arguments)]
    pub fn position_alarm(
        &self,
        participant: FspName,
        currency: &str,
        position: &str,
        reserved: &str,
        net_debit_cap: &str,
        percent: f64,
        alarm_percent: u8,
        at_ms: i64,
    ) {
        let percent = percent_text(percent);
        self.send(Alert {
            kind: Kind::PositionThreshold,
            participant,
            id: format!("position.{participant}.{currency}.{at_ms}"),
            subject: format!(
                "{participant}: {currency} position at {percent} of the net debit cap"
            ),
            body: format!(
                "The {currency} position of {participant} (reservations included) reached \
                 {percent} of its net debit cap, at or above the alarm share of \
                 {alarm_percent}%.\n\n\
                 Position: {position}\nReserved by transfers in flight: {reserved}\n\
                 Net debit cap: {net_debit_cap}\n\n\
                 Prepares that would pass the cap are refused (4200). Add funds or settle \
                 to make room. {again}",
                again = told_again(alarm_percent),
            ),
        });
    }

    /// A DFSP's position reached the alarm share of its liquidity (the
    /// funds of its settlement account).
    #[allow(clippy::too_many_arguments)]
    pub fn liquidity_alarm(
        &self,
        participant: FspName,
        currency: &str,
        used: &str,
        liquidity: &str,
        percent: f64,
        alarm_percent: u8,
        at_ms: i64,
    ) {
        let percent = percent_text(percent);
        self.send(Alert {
            kind: Kind::LiquidityCover,
            participant,
            id: format!("liquidity.{participant}.{currency}.{at_ms}"),
            subject: format!("{participant}: {currency} position at {percent} of its liquidity"),
            body: format!(
                "The {currency} position of {participant}, reservations included ({used}), \
                 reached {percent} of its liquidity, the funds of its settlement account \
                 ({liquidity}), at or above the alarm share of {alarm_percent}%.\n\n\
                 Prepares beyond the liquidity are refused (4001). Add funds to make room. \
                 {again}",
                again = told_again(alarm_percent),
            ),
        });
    }

    /// Callbacks to a DFSP have failed since `since_ms` (`failing`), or
    /// are answered again after that outage (`!failing`).
    pub fn callbacks(&self, participant: FspName, since_ms: i64, failing: bool) {
        let since = http_time(since_ms);
        let (id, subject, body) = if failing {
            (
                format!("callbacks.{participant}.{since_ms}.failing"),
                format!("{participant}: the hub's callbacks are failing"),
                format!(
                    "The hub's callbacks to {participant} have failed since {since} (no \
                     answer, or a 5xx). The hub keeps retrying them; transfers whose \
                     callbacks cannot be delivered are kept as dead letters. Check the \
                     endpoints {participant} registered and that they answer.\n"
                ),
            )
        } else {
            (
                format!("callbacks.{participant}.{since_ms}.recovered"),
                format!("{participant}: the hub's callbacks are answered again"),
                format!(
                    "The hub's callbacks to {participant}, failing since {since}, are \
                     answered again.\n"
                ),
            )
        };
        self.send(Alert {
            kind: Kind::Callbacks,
            participant,
            id,
            subject,
            body,
        });
    }
}

/// The operator changed a DFSP's net debit cap: change `feed_seq` of
/// the feed (the alert's id, so a resend after a crash is the same mail).
pub fn net_debit_cap_alert(
    feed_seq: u64,
    participant: FspName,
    currency: &str,
    net_debit_cap: &str,
) -> Alert {
    Alert {
        kind: Kind::NetDebitCap,
        participant,
        id: format!("ndc.{participant}.{currency}.{feed_seq}"),
        subject: format!("{participant}: {currency} net debit cap set to {net_debit_cap}"),
        body: format!(
            "The hub operator set the {currency} net debit cap of {participant} to \
             {net_debit_cap}.\n\nPrepares that would take the position past it are \
             refused (4200).\n"
        ),
    }
}

/// A settlement SETTLED (change `feed_seq` of the feed) moved a DFSP's
/// position: one alert per account.
pub fn settlement_alert(
    feed_seq: u64,
    settlement: u32,
    participant: FspName,
    currency: &str,
    net: &str,
    account: u32,
) -> Alert {
    Alert {
        kind: Kind::Settlement,
        participant,
        id: format!("settlement.{settlement}.{account}.{feed_seq}.settled"),
        subject: format!("{participant}: settlement {settlement} settled ({currency} {net})"),
        body: format!(
            "Settlement {settlement} is SETTLED. The net settlement amount of \
             {participant} in {currency} (account {account}) is {net}; its position \
             moved by it.\n"
        ),
    }
}

/// A share in percent, as a person reads it; a cap or liquidity of 0 with
/// anything used is an infinite share.
fn percent_text(percent: f64) -> String {
    if percent.is_finite() {
        format!("{percent:.0}%")
    } else {
        "over 100%".to_string()
    }
}

/// The hysteresis, said to the DFSP.
fn told_again(alarm_percent: u8) -> String {
    format!(
        "You are told again only after the position has fallen below {}% and reached \
         {alarm_percent}% once more.\n",
        alarm_percent.saturating_sub(CLEAR_MARGIN_PERCENT)
    )
}

fn http_time(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    httpdate::fmt_http_date(at)
}

/// Which DFSPs were told their callbacks fail, and since when: the
/// dispatcher's per-destination `failing_since` turned into one alert when
/// an outage has lasted `after_ms`, and one when it ends.
#[derive(Default)]
pub struct CallbackOutages {
    told: HashMap<String, i64>,
}

impl CallbackOutages {
    /// Given each destination's `failing_since_ms` (0: answering) at
    /// `now_ms`, the alerts due: (destination, since, failing).
    pub fn step(
        &mut self,
        now_ms: i64,
        after_ms: i64,
        destinations: &[(String, i64)],
    ) -> Vec<(String, i64, bool)> {
        let mut due = Vec::new();
        // An outage told ends when its destination answers, or fails anew
        // (answered in between).
        self.told.retain(|destination, since| {
            let still = destinations
                .iter()
                .any(|(d, s)| d == destination && s == since);
            if !still {
                due.push((destination.clone(), *since, false));
            }
            still
        });
        for (destination, since) in destinations {
            if *since != 0
                && now_ms.saturating_sub(*since) >= after_ms
                && !self.told.contains_key(destination)
            {
                self.told.insert(destination.clone(), *since);
                due.push((destination.clone(), *since, true));
            }
        }
        due
    }
}

/// Every second, tells a DFSP whose callbacks have failed for
/// `--alerts-callbacks-failing-after-s`, and again once they are answered.
pub async fn watch_callbacks(hub: Arc<crate::Hub>) {
    let after_ms =
        i64::try_from(hub.alerts.callbacks_failing_after().as_millis()).unwrap_or(i64::MAX);
    let mut outages = CallbackOutages::default();
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let destinations: Vec<(String, i64)> = hub
            .dispatcher
            .stats()
            .into_iter()
            .map(|s| (s.destination, s.failing_since_ms))
            .collect();
        for (destination, since, failing) in outages.step(crate::now_ms(), after_ms, &destinations)
        {
            if let Some(participant) = FspName::new(&destination) {
                hub.alerts.callbacks(participant, since, failing);
            }
        }
    }
}

impl Alerts {
    /// How long callbacks must fail before the DFSP is told.
    pub fn callbacks_failing_after(&self) -> Duration {
        self.inner
            .as_ref()
            .map_or(Duration::ZERO, |q| q.callbacks_failing_after)
    }
}

fn transport(config: &MailConfig) -> Result<AsyncSmtpTransport<Tokio1Executor>, String> {
    let smtp = &config.smtp;
    let mut builder =
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&smtp.host).port(smtp.port);
    let parameters = || {
        let mut parameters = TlsParameters::builder(smtp.host.clone());
        if let Some(pem) = &config.ca_pem {
            let ca = Certificate::from_pem(pem).map_err(|e| format!("--smtp-ca: {e}"))?;
            parameters = parameters.add_root_certificate(ca);
        }
        parameters
            .build_rustls()
            .map_err(|e| format!("--smtp-url: TLS: {e}"))
    };
    builder = match smtp.tls {
        SmtpTls::Required => builder.tls(Tls::Required(parameters()?)),
        SmtpTls::Wrapper => builder.tls(Tls::Wrapper(parameters()?)),
        SmtpTls::None => builder.tls(Tls::None),
    };
    if let Some(user) = &smtp.user {
        builder = builder.credentials(Credentials::new(
            user.clone(),
            smtp.password.clone().unwrap_or_default(),
        ));
    }
    Ok(builder.timeout(Some(Duration::from_secs(30))).build())
}

/// The sending task's state.
struct Sending {
    /// The SMTP server and the sender; `None`: no mail.
    mail: Option<(AsyncSmtpTransport<Tokio1Executor>, Mailbox)>,
    webhooks: Webhooks,
    hub_name: FspName,
    endpoints: Arc<Endpoints>,
    metrics: Arc<Metrics>,
    limit: RateLimit,
    seen: Remembered,
    /// The SMTP server's failures.
    failures: engine::Repeats,
    /// Alerts not sent for the DFSP's sake (its limit, its address).
    not_sent: engine::Repeats,
}

impl Sending {
    async fn run(mut self, mut queue: mpsc::Receiver<(Alert, Ending)>) {
        while let Some((alert, ending)) = queue.recv().await {
            if let Some(result) = self.deliver(&alert, ending).await {
                self.metrics.record_alert(alert.kind.label(), result);
            }
        }
    }

    /// Sends one alert: its webhook's delivery started (counted by
    /// itself), its mail sent, retrying a transient failure until it
    /// goes. The label of what became of it, if anything is to be counted
    /// here.
    async fn deliver(&mut self, alert: &Alert, ending: Ending) -> Option<&'static str> {
        if !self.seen.insert(&alert.id) {
            return Some("duplicate");
        }
        let to = match self.mail {
            Some(_) => self
                .endpoints
                .value(alert.participant, alert.kind.endpoint_type()),
            None => None,
        };
        let hook = self.endpoints.value(alert.participant, WEBHOOK_TYPE);
        if to.is_none() && hook.is_none() {
            return Some("no_recipient");
        }
        if !self.limit.allow(alert.participant, Instant::now()) {
            if let Some(repeated) = self.not_sent.failed() {
                tracing::warn!(
                    participant = %alert.participant,
                    kind = alert.kind.label(),
                    id = %alert.id,
                    repeated,
                    "alert not sent: the DFSP's alerts of the last hour reached --alerts-per-dfsp-per-hour"
                );
            }
            return Some("rate_limited");
        }
        if let Some(url) = hook {
            self.webhooks.post(
                url,
                alert,
                webhook_body(self.hub_name, alert),
                ending.clone(),
            );
        }
        let to = to?;
        Some(self.mail(alert, &to).await)
    }

    async fn mail(&mut self, alert: &Alert, to: &str) -> &'static str {
        let Some((transport, _)) = &self.mail else {
            return "no_recipient";
        };
        let transport = transport.clone();
        let message = match self.message(alert, to) {
            Ok(message) => message,
            Err(error) => {
                if let Some(repeated) = self.not_sent.failed() {
                    tracing::warn!(participant = %alert.participant, endpoint_type = alert.kind.endpoint_type(), %error, repeated, "alert not sent: the DFSP's address is not usable");
                }
                return "bad_address";
            }
        };
        let mut wait = RETRY_FIRST;
        loop {
            match transport.send(message.clone()).await {
                Ok(_) => {
                    if let Some(recovered) = self.failures.recovered() {
                        tracing::info!(failures = recovered.failures, "alerts are sent again");
                    }
                    tracing::info!(participant = %alert.participant, kind = alert.kind.label(), id = %alert.id, "alert sent");
                    return "sent";
                }
                Err(error) if error.is_permanent() => {
                    if let Some(repeated) = self.failures.failed() {
                        tracing::warn!(participant = %alert.participant, kind = alert.kind.label(), %error, repeated, "alert refused by the SMTP server; given up");
                    }
                    return "refused";
                }
                Err(error) => {
                    self.metrics.record_alert(alert.kind.label(), "retried");
                    if let Some(repeated) = self.failures.failed() {
                        tracing::warn!(participant = %alert.participant, kind = alert.kind.label(), %error, repeated, retry_ms = wait.as_millis() as u64, "alert not sent yet: the SMTP server failed; retrying");
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RETRY_MAX);
                }
            }
        }
    }

    fn message(&self, alert: &Alert, to: &str) -> Result<Message, String> {
        let from = self.mail.as_ref().ok_or("no mail")?.1.clone();
        let mut builder = Message::builder()
            .from(from)
            .subject(format!("[{}] {}", self.hub_name, alert.subject))
            .message_id(Some(message_id(self.hub_name, &alert.id)))
            .header(ContentType::TEXT_PLAIN);
        let mut any = false;
        for address in to.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            let mailbox: Mailbox = address.parse().map_err(|e| format!("'{address}': {e}"))?;
            builder = builder.to(mailbox);
            any = true;
        }
        if !any {
            return Err("no address".into());
        }
        builder.body(alert.body.clone()).map_err(|e| e.to_string())
    }
}

/// The Message-ID of alert `id`: `<id@hub.kasi>`, any byte but a letter,
/// a digit, `.` or `-` as `-` (a DFSP's name may hold `<`, `>` or `@`).
fn message_id(hub_name: FspName, id: &str) -> String {
    let clean = |text: &str| -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect()
    };
    format!(
        "<{}@{}.kasi>",
        clean(id),
        clean(&hub_name.as_str().to_ascii_lowercase())
    )
}

/// What a webhook is sent: the alert as JSON.
pub fn webhook_body(hub_name: FspName, alert: &Alert) -> String {
    serde_json::json!({
        "id": alert.id,
        "hub": hub_name.as_str(),
        "kind": alert.kind.label(),
        "participant": alert.participant.as_str(),
        "subject": alert.subject,
        "text": alert.body,
    })
    .to_string()
}

type WebhookClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    http_body_util::Full<bytes::Bytes>,
>;

/// The DFSPs' alert webhooks: each delivery a task of its own, so that one
/// DFSP's dead webhook delays nobody else's alerts; at most
/// [`WEBHOOKS_IN_FLIGHT`] at once.
struct Webhooks {
    client: WebhookClient,
    in_flight: Arc<tokio::sync::Semaphore>,
    metrics: Arc<Metrics>,
    failures: Arc<Mutex<engine::Repeats>>,
}

impl Webhooks {
    fn new(tls: Option<Arc<rustls::ClientConfig>>, metrics: Arc<Metrics>) -> Webhooks {
        let tls = tls.unwrap_or_else(|| {
            crate::tls::client_config(None, None)
                .expect("a TLS client configuration without files cannot fail")
        });
        let connector = crate::tls::https_connector(tls, Duration::from_secs(5));
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .pool_timer(hyper_util::rt::TokioTimer::new())
                .build(connector);
        Webhooks {
            client,
            in_flight: Arc::new(tokio::sync::Semaphore::new(WEBHOOKS_IN_FLIGHT)),
            metrics,
            failures: Arc::new(Mutex::new(engine::Repeats::new(LOG_EVERY))),
        }
    }

    /// POSTs `body` to `url`, retried on a transport error or a 5xx with
    /// backoff for up to [`WEBHOOK_RETRY_FOR`]; a 4xx is final. An alert
    /// someone awaits (`ending`) waits for room rather than being dropped.
    fn post(&self, url: String, alert: &Alert, body: String, ending: Ending) {
        let kind = alert.kind.label();
        let permit = match self.in_flight.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) if ending.is_some() => None,
            Err(_) => {
                self.metrics.record_alert(kind, "webhook_dropped");
                return;
            }
        };
        let in_flight = self.in_flight.clone();
        let client = self.client.clone();
        let metrics = self.metrics.clone();
        let failures = self.failures.clone();
        let id = alert.id.clone();
        let participant = alert.participant;
        tokio::spawn(async move {
            let _ending = ending;
            let _permit = match permit {
                Some(permit) => permit,
                None => match in_flight.acquire_owned().await {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
            };
            let started = Instant::now();
            let mut wait = RETRY_FIRST;
            loop {
                let request = http::Request::post(url.as_str())
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .header("X-Kasi-Alert-Id", id.as_str())
                    .body(http_body_util::Full::new(bytes::Bytes::from(body.clone())));
                let request = match request {
                    Ok(request) => request,
                    Err(error) => {
                        metrics.record_alert(kind, "webhook_refused");
                        tracing::warn!(%participant, %error, "alert webhook not called: its URL is not usable");
                        return;
                    }
                };
                let answer =
                    tokio::time::timeout(Duration::from_secs(10), client.request(request)).await;
                let why = match answer {
                    Ok(Ok(response)) if response.status().is_success() => {
                        metrics.record_alert(kind, "webhook_sent");
                        return;
                    }
                    Ok(Ok(response)) if response.status().is_client_error() => {
                        metrics.record_alert(kind, "webhook_refused");
                        tracing::warn!(%participant, status = response.status().as_u16(), "alert webhook refused the alert; given up");
                        return;
                    }
                    Ok(Ok(response)) => format!("answered {}", response.status()),
                    Ok(Err(error)) => error.to_string(),
                    Err(_) => "no answer within 10 s".to_string(),
                };
                if started.elapsed() + wait > WEBHOOK_RETRY_FOR {
                    metrics.record_alert(kind, "webhook_failed");
                    tracing::warn!(%participant, id = %id, why, "alert webhook failed for an hour; given up");
                    return;
                }
                metrics.record_alert(kind, "webhook_retried");
                let repeated = failures.lock().unwrap_or_else(|e| e.into_inner()).failed();
                if let Some(repeated) = repeated {
                    tracing::warn!(%participant, why, repeated, "alert webhook failed; retrying");
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MAX);
            }
        });
    }
}

/// At most `per_hour` alerts per DFSP in any hour.
struct RateLimit {
    per_hour: usize,
    sent: HashMap<FspName, VecDeque<Instant>>,
}

impl RateLimit {
    fn new(per_hour: u32) -> RateLimit {
        RateLimit {
            per_hour: per_hour as usize,
            sent: HashMap::new(),
        }
    }

    fn allow(&mut self, participant: FspName, now: Instant) -> bool {
        let hour = Duration::from_secs(3_600);
        let sent = self.sent.entry(participant).or_default();
        while sent
            .front()
            .is_some_and(|at| now.saturating_duration_since(*at) >= hour)
        {
            sent.pop_front();
        }
        if sent.len() >= self.per_hour {
            return false;
        }
        sent.push_back(now);
        true
    }
}

/// The last `capacity` ids taken.
struct Remembered {
    capacity: usize,
    order: VecDeque<String>,
    ids: HashSet<String>,
}

impl Remembered {
    fn new(capacity: usize) -> Remembered {
        Remembered {
            capacity,
            order: VecDeque::new(),
            ids: HashSet::new(),
        }
    }

    /// False if `id` was taken already.
    fn insert(&mut self, id: &str) -> bool {
        if self.ids.contains(id) {
            return false;
        }
        if self.order.len() >= self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.ids.remove(&oldest);
            }
        }
        self.order.push_back(id.to_string());
        self.ids.insert(id.to_string());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alarm_clears_only_below_the_margin() {
        assert!(!position_alarmed(false, 79.9, 80));
        assert!(position_alarmed(false, 80.0, 80));
        // Alarmed: stays so down to the margin.
        assert!(position_alarmed(true, 79.0, 80));
        assert!(position_alarmed(true, 75.0, 80));
        assert!(!position_alarmed(true, 74.9, 80));
        // Not alarmed: the margin does not raise it.
        assert!(!position_alarmed(false, 77.0, 80));
        assert!(position_alarmed(true, 1.0, 3));
        assert!(position_alarmed(true, 0.0, 3));
    }

    #[test]
    fn smtp_urls_parse() {
        let s = SmtpSettings::parse("smtp://alerts%40hub:p%2Fss+w@mail.example:2525?tls=required")
            .unwrap();
        assert_eq!(s.host, "mail.example");
        assert_eq!(s.port, 2525);
        assert_eq!(s.tls, SmtpTls::Required);
        assert_eq!(s.user.as_deref(), Some("alerts@hub"));
        assert_eq!(s.password.as_deref(), Some("p/ss+w"));
        assert!(!format!("{s:?}").contains("p/ss"));
        let s = SmtpSettings::parse("smtp://127.0.0.1?tls=none").unwrap();
        assert_eq!((s.port, s.tls, s.user), (25, SmtpTls::None, None));
        let s = SmtpSettings::parse("smtp://mail.example").unwrap();
        assert_eq!((s.port, s.tls), (587, SmtpTls::Required));
        let s = SmtpSettings::parse("smtps://mail.example").unwrap();
        assert_eq!((s.port, s.tls), (465, SmtpTls::Wrapper));
        for bad in [
            "http://mail.example",
            "smtp://mail.example?tls=maybe",
            "smtps://mail.example?tls=none",
            "smtp://mail.example?foo=1",
            "smtp://mail.example/path",
            "mail.example:25",
        ] {
            assert!(SmtpSettings::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn at_most_the_hourly_count_per_dfsp() {
        let mut limit = RateLimit::new(2);
        let a = FspName::new("dfspa").unwrap();
        let b = FspName::new("dfspb").unwrap();
        let start = Instant::now();
        assert!(limit.allow(a, start));
        assert!(limit.allow(a, start + Duration::from_secs(1)));
        assert!(!limit.allow(a, start + Duration::from_secs(2)));
        assert!(limit.allow(b, start + Duration::from_secs(2)));
        assert!(limit.allow(a, start + Duration::from_secs(3_600)));
        assert!(!limit.allow(a, start + Duration::from_secs(3_600)));
    }

    #[test]
    fn a_callback_outage_is_told_once_it_lasts_and_once_it_ends() {
        let mut outages = CallbackOutages::default();
        let d = |since: i64| vec![("dfspa".to_string(), since)];
        assert!(outages.step(1_000, 60_000, &d(0)).is_empty());
        // Failing, but not for long enough yet.
        assert!(outages.step(30_000, 60_000, &d(1_000)).is_empty());
        assert_eq!(
            outages.step(61_000, 60_000, &d(1_000)),
            vec![("dfspa".to_string(), 1_000, true)]
        );
        assert!(outages.step(70_000, 60_000, &d(1_000)).is_empty());
        assert_eq!(
            outages.step(80_000, 60_000, &d(0)),
            vec![("dfspa".to_string(), 1_000, false)]
        );
        assert!(outages.step(90_000, 60_000, &d(0)).is_empty());
        // A short outage, never told, ends untold.
        assert!(outages.step(100_000, 60_000, &d(95_000)).is_empty());
        assert!(outages.step(101_000, 60_000, &d(0)).is_empty());
        // Answered and failing anew between two looks: the first ends.
        assert_eq!(
            outages.step(200_000, 60_000, &d(110_000)),
            vec![("dfspa".to_string(), 110_000, true)]
        );
        assert_eq!(
            outages.step(300_000, 60_000, &d(290_000)),
            vec![("dfspa".to_string(), 110_000, false)]
        );
    }

    #[test]
    fn a_message_id_holds_only_what_one_may() {
        let hub = FspName::new("Hub_1").unwrap();
        assert_eq!(
            message_id(hub, "ndc.a>b@c.USD.17"),
            "<ndc.a-b-c.USD.17@hub-1.kasi>"
        );
    }

    #[test]
    fn an_id_is_taken_once_while_remembered() {
        let mut seen = Remembered::new(2);
        assert!(seen.insert("a"));
        assert!(!seen.insert("a"));
        assert!(seen.insert("b"));
        assert!(seen.insert("c"));
        // "a" was forgotten to make room.
        assert!(seen.insert("a"));
        assert!(!seen.insert("c"));
    }
}
