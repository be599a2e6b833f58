//! Alerts mailed to the DFSPs' contacts, end to end: the real `kasi serve`
//! and a real SMTP server (Python's aiosmtpd, Debian's
//! `python3-aiosmtpd`) that writes each message it accepts to a file, one
//! JSON line each, which the tests wait on with deadlines.

mod support;

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

const SINK: &str = r#"
import json, logging, sys, time, warnings
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

port, out, user, password = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
# AUTH without TLS is what this test means (the hub's tls=none).
warnings.simplefilter("ignore")
logging.getLogger("mail.log").setLevel(logging.ERROR)

def authenticate(server, session, envelope, mechanism, auth_data):
    ok = (isinstance(auth_data, LoginPassword)
          and auth_data.login.decode() == user
          and auth_data.password.decode() == password)
    return AuthResult(success=ok, auth_data=auth_data)

class Keep:
    async def handle_DATA(self, server, session, envelope):
        with open(out, "a") as f:
            f.write(json.dumps({
                "authenticated": bool(session.authenticated),
                "tls": session.ssl is not None,
                "login": session.auth_data.login.decode() if session.auth_data else None,
                "from": envelope.mail_from,
                "to": envelope.rcpt_tos,
                "data": envelope.content.decode("utf8", "replace"),
            }) + "\n")
        return "250 OK"

if len(sys.argv) > 6:
    # STARTTLS required, with this certificate and key.
    import ssl
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(sys.argv[5], sys.argv[6])
    security = dict(tls_context=context, require_starttls=True)
else:
    security = dict(auth_require_tls=False)
controller = Controller(Keep(), hostname="127.0.0.1", port=port,
                        authenticator=authenticate, auth_required=True, **security)
controller.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
"#;

const SMTP_USER: &str = "kasi";
const SMTP_PASSWORD: &str = "s3cret word";

/// The Python that has aiosmtpd: the one on PATH, or Debian's.
fn python() -> &'static str {
    for python in ["python3", "/usr/bin/python3"] {
        let has = Command::new(python)
            .args(["-c", "import aiosmtpd"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if has {
            return python;
        }
    }
    panic!("no python3 with aiosmtpd: apt-get install -y python3-aiosmtpd");
}

/// A local SMTP server keeping what it accepts.
struct MailSink {
    child: Child,
    file: PathBuf,
}

impl MailSink {
    fn start(dir: &Path, address: SocketAddr) -> MailSink {
        MailSink::start_with(dir, address, &[])
    }

    /// A sink that requires STARTTLS, presenting `cert` and `key`.
    fn start_tls(dir: &Path, address: SocketAddr, cert: &Path, key: &Path) -> MailSink {
        MailSink::start_with(dir, address, &[cert, key])
    }

    fn start_with(dir: &Path, address: SocketAddr, tls: &[&Path]) -> MailSink {
        let script = dir.join("sink.py");
        std::fs::write(&script, SINK).unwrap();
        let file = dir.join("mail.jsonl");
        let mut child = Command::new(python())
            .arg(&script)
            .arg(address.port().to_string())
            .arg(&file)
            .args([SMTP_USER, SMTP_PASSWORD])
            .args(tls)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready", "the SMTP sink did not start");
        MailSink { child, file }
    }

    fn mails(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.file)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// The mails to `to`, once there are `count` of them.
    fn await_mails(&self, to: &str, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let mails: Vec<Value> = self
                .mails()
                .into_iter()
                .filter(|mail| mail["to"] == json!([to]))
                .collect();
            if mails.len() >= count {
                assert_eq!(mails.len(), count, "more mails than expected: {mails:#?}");
                return mails;
            }
            assert!(
                Instant::now() < deadline,
                "{count} mails to {to} never came; got {:#?}",
                self.mails()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for MailSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn header<'a>(mail: &'a Value, name: &str) -> &'a str {
    let data = mail["data"].as_str().unwrap();
    data.lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
        .unwrap_or_else(|| panic!("no {name} in {data}"))
}

/// A hub mailing alerts through `smtp`, its password in a file.
fn hub_with_alerts(dir: &Path, smtp: SocketAddr, extra: &[&str]) -> Hub {
    let password = dir.join("smtp-password");
    std::fs::write(&password, format!("{SMTP_PASSWORD}\n")).unwrap();
    let url = format!("smtp://{SMTP_USER}@{smtp}?tls=none");
    let mut args = vec![
        "--smtp-url",
        &url,
        "--smtp-password-file",
        password.to_str().unwrap(),
        "--alerts-from",
        "Hub alerts <alerts@hub.test>",
    ];
    args.extend_from_slice(extra);
    Hub::start_with(&dir.join("data"), &args)
}

/// A running SMTP sink and a hub mailing through it, the scheme set up.
fn mailing_hub(extra: &[&str]) -> (tempfile::TempDir, MailSink, Hub) {
    let dir = tempfile::tempdir().unwrap();
    let smtp = reserve_address();
    let sink = MailSink::start(dir.path(), smtp);
    let hub = hub_with_alerts(dir.path(), smtp, extra);
    hub.setup();
    (dir, sink, hub)
}

/// The payer and the payee, onboarded with `cap` and `deposit`.
fn two_dfsps(hub: &Hub, cap: u64, deposit: u64) -> (Stub, Stub) {
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    hub.onboard(PAYER, &payer.base_url(), cap, deposit);
    hub.onboard(PAYEE, &payee.base_url(), cap, deposit);
    (payer, payee)
}

/// The operator sets the payer's USD net debit cap.
fn set_cap(hub: &Hub, value: u64) {
    hub.admin_expect(
        "PUT",
        &format!("/participants/{PAYER}/limits"),
        Some(json!({"currency": "USD", "limit": {"type": "NET_DEBIT_CAP", "value": value}})),
        200,
    );
}

/// One committed transfer of `amount` from `from` to `to`.
fn pay(hub: &Hub, (from, from_stub): (&str, &Stub), (to, to_stub): (&str, &Stub), amount: &str) {
    let id = new_id();
    let body = prepare_body(&id, from, to, amount, far_future());
    assert_eq!(hub.prepare(from, to, &body).status, 202);
    to_stub.expect("POST", "/transfers");
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    assert_eq!(hub.fulfil(&id, to, from, &fulfil).status, 200);
    from_stub.expect("PUT", &format!("/transfers/{id}"));
    to_stub.expect("PUT", &format!("/transfers/{id}"));
}

/// Waits until the position watch has seen the payer's position at
/// `percent` of its cap, and its alarm as `alarmed`.
fn await_position(hub: &Hub, percent: f64, alarmed: bool) {
    let ratio =
        format!("kasi_position_net_debit_cap_ratio{{participant=\"{PAYER}\",currency=\"USD\"}} ");
    let alarm = format!(
        "kasi_position_alarm{{participant=\"{PAYER}\",currency=\"USD\"}} {}",
        u8::from(alarmed)
    );
    hub.await_metrics(
        &format!("{PAYER} at {percent}%, alarmed {alarmed}"),
        |text| {
            let seen: f64 = text
                .lines()
                .find_map(|line| line.strip_prefix(&ratio))?
                .parse()
                .ok()?;
            ((seen * 100.0 - percent).abs() < 0.01 && text.contains(&alarm)).then_some(())
        },
    );
}

#[test]
fn a_position_crossing_the_threshold_mails_once_until_it_clears_by_the_margin() {
    let (_dir, sink, hub) = mailing_hub(&[
        "--position-alarm-percent",
        "80",
        "--position-watch-interval-ms",
        "50",
    ]);
    let (payer, payee) = two_dfsps(&hub, 1_000, 5_000);
    let ops = "ops@payer.test";
    let limits = "limits@payer.test";
    hub.add_endpoint(PAYER, "NET_DEBIT_CAP_THRESHOLD_BREACH_EMAIL", ops);
    hub.add_endpoint(PAYER, "NET_DEBIT_CAP_ADJUSTMENT_EMAIL", limits);
    let payer_side = (PAYER, &payer);
    let payee_side = (PAYEE, &payee);

    pay(&hub, payer_side, payee_side, "850");
    await_position(&hub, 85.0, true);
    let first = sink.await_mails(ops, 1);
    assert_eq!(first[0]["authenticated"], true, "{first:?}");
    assert_eq!(first[0]["tls"], false, "{first:?}");
    assert_eq!(first[0]["login"], SMTP_USER);
    assert_eq!(first[0]["from"], "alerts@hub.test");
    let subject = header(&first[0], "Subject");
    assert!(
        subject.contains(PAYER) && subject.contains("85%"),
        "{subject}"
    );

    // Further up, then down into the margin and up again: still the one
    // alarm.
    pay(&hub, payer_side, payee_side, "50");
    await_position(&hub, 90.0, true);
    pay(&hub, payee_side, payer_side, "130");
    await_position(&hub, 77.0, true);
    pay(&hub, payer_side, payee_side, "60");
    await_position(&hub, 83.0, true);
    // Below the margin (75%) the alarm clears, without a mail.
    pay(&hub, payee_side, payer_side, "200");
    await_position(&hub, 63.0, false);
    assert_eq!(sink.await_mails(ops, 1).len(), 1);

    // Across the threshold again: a second mail, its own Message-ID.
    pay(&hub, payer_side, payee_side, "200");
    await_position(&hub, 83.0, true);
    let both = sink.await_mails(ops, 2);
    assert_ne!(
        header(&both[0], "Message-ID"),
        header(&both[1], "Message-ID")
    );
    hub.await_metric_line("kasi_alerts_total{kind=\"position_threshold\",result=\"sent\"} 2");

    // A cap change mails the adjustment contact (and, the position now far
    // below the cap, clears the alarm without a mail).
    set_cap(&hub, 2000);
    let adjusted = sink.await_mails(limits, 1);
    let subject = header(&adjusted[0], "Subject");
    assert!(subject.contains("net debit cap set to 2000"), "{subject}");
    await_position(&hub, 41.5, false);
    hub.await_metric_line("kasi_alerts_total{kind=\"net_debit_cap\",result=\"sent\"} 1");
    assert_eq!(sink.await_mails(ops, 2).len(), 2);
    // The payee registered no contact: nothing was sent for it.
    assert!(
        sink.mails()
            .iter()
            .all(|mail| mail["to"] == json!([ops]) || mail["to"] == json!([limits])),
        "{:#?}",
        sink.mails()
    );
}

#[test]
fn an_alert_waits_for_an_smtp_server_that_is_down_and_is_sent_once_it_is_up() {
    let dir = tempfile::tempdir().unwrap();
    let smtp = reserve_address();
    let hub = hub_with_alerts(dir.path(), smtp, &[]);
    hub.setup();
    let payer = Stub::start(PAYER);
    hub.onboard(PAYER, &payer.base_url(), 1_000, 5_000);
    let limits = "limits@payer.test";
    hub.add_endpoint(PAYER, "NET_DEBIT_CAP_ADJUSTMENT_EMAIL", limits);
    set_cap(&hub, 3000);
    // Refused connections are retried, and said in the log.
    hub.await_metric_line("kasi_alerts_total{kind=\"net_debit_cap\",result=\"retried\"}");
    hub.await_log("the SMTP server failed; retrying");

    let sink = MailSink::start(dir.path(), smtp);
    let mails = sink.await_mails(limits, 1);
    assert!(header(&mails[0], "Subject").contains("net debit cap set to 3000"));
    hub.await_metric_line("kasi_alerts_total{kind=\"net_debit_cap\",result=\"sent\"} 1");
    hub.await_log("alerts are sent again");
}

/// Closes the open window and settles it at once (finalize): the
/// settlement's id.
fn settle(hub: &Hub) -> u64 {
    let windows = hub.admin_expect("GET", "/v2/settlementWindows?state=OPEN", None, 200);
    let window = windows.json()[0]["settlementWindowId"].as_u64().unwrap();
    hub.admin_expect(
        "POST",
        &format!("/v2/settlementWindows/{window}"),
        Some(json!({"state": "CLOSED", "reason": "end of day"})),
        200,
    );
    let created = hub.admin_expect(
        "POST",
        "/v2/settlements",
        Some(json!({
            "settlementModel": "DEFAULTDEFERREDNET",
            "reason": "end of day",
            "settlementWindows": [{"id": window}]
        })),
        200,
    );
    let id = created.json()["id"].as_u64().unwrap();
    let done = hub.admin_expect(
        "POST",
        &format!("/v2/settlements/{id}/finalize"),
        Some(json!({})),
        200,
    );
    assert_eq!(done.json()["state"], "SETTLED");
    id
}

/// The `feedSeq` of the first change of `kind` whose fields hold `fields`.
fn feed_seq_of(hub: &Hub, kind: &str, fields: &Value) -> u64 {
    let feed = hub.admin_expect("GET", "/feed?after=0&limit=1000", None, 200);
    feed.text()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|change| {
            change["kind"] == kind
                && fields
                    .as_object()
                    .unwrap()
                    .iter()
                    .all(|(name, value)| &change[name] == value)
        })
        .unwrap_or_else(|| panic!("no {kind} with {fields} in the feed:\n{}", feed.text()))
        ["feedSeq"]
        .as_u64()
        .unwrap()
}

/// Waits until the unlabelled metric `name` is above 0.
fn await_above_zero(hub: &Hub, name: &str) {
    let prefix = format!("{name} ");
    hub.await_metrics(&format!("{name} above 0"), |text| {
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))?
            .parse::<u64>()
            .ok()
            .filter(|&value| value > 0)
    });
}

/// Waits until the alerts' follower has read the whole feed (its
/// `kasi_alerts_lag` 0) after this process started following it.
fn await_alerts_caught_up(hub: &Hub) {
    hub.await_log("alerts: following the change feed");
    hub.await_metric_line("\nkasi_alerts_lag 0\n");
}

/// A cap change and a settlement committed while the SMTP server is down
/// and the hub then crashes are mailed after the restart, from the change
/// feed, each with the Message-ID of its change; and once only.
#[test]
fn alerts_of_committed_changes_survive_a_crash_and_are_sent_once() {
    let dir = tempfile::tempdir().unwrap();
    let smtp = reserve_address();
    let mut hub = hub_with_alerts(dir.path(), smtp, &[]);
    hub.setup();
    let (payer, payee) = two_dfsps(&hub, 1_000, 5_000);
    let limits = "limits@payer.test";
    let payer_finance = "finance@payer.test";
    let payee_finance = "finance@payee.test";
    let settled = "SETTLEMENT_TRANSFER_POSITION_CHANGE_EMAIL";
    hub.add_endpoint(PAYER, "NET_DEBIT_CAP_ADJUSTMENT_EMAIL", limits);
    hub.add_endpoint(PAYER, settled, payer_finance);
    hub.add_endpoint(PAYEE, settled, payee_finance);
    pay(&hub, (PAYER, &payer), (PAYEE, &payee), "120");

    // No SMTP server: the alerts wait, the requests do not.
    set_cap(&hub, 3000);
    let id = settle(&hub);
    hub.await_metric_line("kasi_alerts_total{kind=\"net_debit_cap\",result=\"retried\"}");
    await_above_zero(&hub, "kasi_alerts_lag");
    let cap_seq = feed_seq_of(
        &hub,
        "account.changed",
        &json!({"participant": PAYER, "netDebitCap": "3000", "previousNetDebitCap": "1000"}),
    );
    let settled_seq = feed_seq_of(
        &hub,
        "settlement.changed",
        &json!({"settlementId": id, "state": "SETTLED"}),
    );
    hub.kill();

    let sink = MailSink::start(dir.path(), smtp);
    let mut hub = hub_with_alerts(dir.path(), smtp, &[]);
    let mail = sink.await_mails(limits, 1);
    assert_eq!(
        header(&mail[0], "Message-ID"),
        format!("<ndc.{PAYER}.USD.{cap_seq}@hub.kasi>")
    );
    assert!(header(&mail[0], "Subject").contains("USD net debit cap set to 3000"));
    let text = mail[0]["data"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "The hub operator set the USD net debit cap of {PAYER} to"
        )) && text.contains("refused (4200)"),
        "{text}"
    );
    for (to, net) in [(payer_finance, "120"), (payee_finance, "-120")] {
        let mail = sink.await_mails(to, 1);
        let subject = header(&mail[0], "Subject");
        assert!(
            subject.contains(&format!("settlement {id} settled (USD {net})")),
            "{subject}"
        );
        let message_id = header(&mail[0], "Message-ID");
        assert!(
            message_id.starts_with(&format!("<settlement.{id}."))
                && message_id.ends_with(&format!(".{settled_seq}.settled@hub.kasi>")),
            "{message_id}"
        );
    }
    await_alerts_caught_up(&hub);
    assert_eq!(sink.mails().len(), 3, "{:#?}", sink.mails());

    // Delivered and the cursor kept: a restart sends nothing again.
    assert!(hub.terminate().success());
    let hub = hub_with_alerts(dir.path(), smtp, &[]);
    await_alerts_caught_up(&hub);
    std::thread::sleep(QUIET_WAIT);
    assert_eq!(sink.mails().len(), 3, "{:#?}", sink.mails());
}

/// A hub down longer than `--feed-retention`: the changes deleted before
/// the alerts read them are passed over, said loudly and counted, and the
/// follower goes on.
#[test]
fn changes_deleted_by_retention_before_the_alerts_read_them_are_passed_over_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let smtp = reserve_address();
    let flags = ["--feed-retention", "2s"];
    let mut hub = hub_with_alerts(dir.path(), smtp, &flags);
    hub.setup();
    let payer = Stub::start(PAYER);
    hub.onboard(PAYER, &payer.base_url(), 1_000, 5_000);
    hub.add_endpoint(PAYER, "NET_DEBIT_CAP_ADJUSTMENT_EMAIL", "limits@payer.test");
    set_cap(&hub, 3000);
    hub.await_metric_line("kasi_alerts_total{kind=\"net_debit_cap\",result=\"retried\"}");
    // A later change: retention keeps the newest row, whatever its age.
    hub.add_endpoint(
        PAYER,
        "SETTLEMENT_TRANSFER_POSITION_CHANGE_EMAIL",
        "finance@payer.test",
    );
    hub.kill();
    std::thread::sleep(Duration::from_secs(3));

    let skipped = "deleted by --feed-retention before their alerts were sent";
    let mut hub = hub_with_alerts(dir.path(), smtp, &flags);
    if !hub.wait_for_log(skipped, Duration::from_secs(10)) {
        // The follower read the cap's change before retention's first
        // pass deleted it, and waits on the SMTP server; the next start
        // finds it deleted.
        hub.await_log("changes past retention deleted");
        hub.kill();
        hub = hub_with_alerts(dir.path(), smtp, &flags);
        hub.await_log(skipped);
    }
    await_above_zero(&hub, "kasi_alerts_skipped_total");
    await_alerts_caught_up(&hub);
}

#[test]
fn a_settled_settlement_mails_each_dfsp_its_net() {
    let (_dir, sink, hub) = mailing_hub(&[]);
    let (payer, payee) = two_dfsps(&hub, 1_000, 5_000);
    let payer_finance = "finance@payer.test";
    let payee_finance = "finance@payee.test";
    let kind = "SETTLEMENT_TRANSFER_POSITION_CHANGE_EMAIL";
    hub.add_endpoint(PAYER, kind, payer_finance);
    hub.add_endpoint(PAYEE, kind, payee_finance);
    pay(&hub, (PAYER, &payer), (PAYEE, &payee), "120");

    let id = settle(&hub);

    let to_payer = sink.await_mails(payer_finance, 1);
    let to_payee = sink.await_mails(payee_finance, 1);
    for (mail, net) in [(&to_payer[0], "120"), (&to_payee[0], "-120")] {
        let subject = header(mail, "Subject");
        assert!(
            subject.contains(&format!("settlement {id} settled (USD {net})")),
            "{subject}"
        );
        let message_id = header(mail, "Message-ID");
        assert!(
            message_id.starts_with(&format!("<settlement.{id}."))
                && message_id.ends_with(".settled@hub.kasi>"),
            "{message_id}"
        );
    }
    hub.await_metric_line("kasi_alerts_total{kind=\"settlement\",result=\"sent\"} 2");
    // Settled once: one mail each, whatever else is asked of it.
    let again = hub.admin(
        "POST",
        &format!("/v2/settlements/{id}/finalize"),
        Some(&json!({})),
    );
    assert_error_response(&again, 400, "3100");
    assert_eq!(sink.mails().len(), 2, "{:#?}", sink.mails());
}

#[test]
fn a_dfsp_is_told_when_its_callbacks_fail_and_when_they_are_answered_again() {
    let (_dir, sink, hub) = mailing_hub(&["--alerts-callbacks-failing-after-s", "1"]);
    let payer = Stub::start(PAYER);
    hub.onboard(PAYER, &payer.base_url(), 1_000, 5_000);
    // The payee is down: its callbacks are refused until its server starts.
    let payee_address = reserve_address();
    hub.onboard(PAYEE, &format!("http://{payee_address}"), 1_000, 5_000);
    let ops = "ops@payee.test";
    hub.add_endpoint(PAYEE, "NET_DEBIT_CAP_THRESHOLD_BREACH_EMAIL", ops);

    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", far_future());
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    let failing = sink.await_mails(ops, 1);
    let subject = header(&failing[0], "Subject");
    assert!(subject.contains("callbacks are failing"), "{subject}");

    let payee = Stub::start_on(PAYEE, payee_address);
    payee.expect("POST", "/transfers");
    let both = sink.await_mails(ops, 2);
    let subject = header(&both[1], "Subject");
    assert!(subject.contains("answered again"), "{subject}");
    hub.await_metric_line("kasi_alerts_total{kind=\"callbacks\",result=\"sent\"} 2");
}

#[test]
fn a_dfsp_webhook_gets_each_alert_as_json_without_any_smtp_server() {
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    hub.setup();
    let payer = Stub::start(PAYER);
    hub.onboard(PAYER, &payer.base_url(), 1_000, 5_000);
    let hook = Stub::start("payer-alerts");
    hub.add_endpoint(
        PAYER,
        "KASI_ALERTS_WEBHOOK_URL",
        &format!("{}/kasi-alerts", hook.base_url()),
    );
    set_cap(&hub, 4000);
    let posted = hook.expect("POST", "/kasi-alerts");
    assert_eq!(posted.header("content-type"), Some("application/json"));
    let alert = posted.json();
    assert_eq!(alert["kind"], "net_debit_cap");
    assert_eq!(alert["participant"], PAYER);
    assert_eq!(alert["hub"], HUB_NAME);
    assert!(
        alert["subject"].as_str().unwrap().contains("set to 4000"),
        "{alert}"
    );
    assert_eq!(posted.header("x-kasi-alert-id"), alert["id"].as_str());
    hub.await_metric_line("kasi_alerts_total{kind=\"net_debit_cap\",result=\"webhook_sent\"} 1");
    hook.assert_quiet(QUIET_WAIT);

    // Not a URL: refused when registered, as any URL endpoint.
    let refused = hub.admin(
        "POST",
        &format!("/participants/{PAYER}/endpoints"),
        Some(&json!({"type": "KASI_ALERTS_WEBHOOK_URL", "value": "alerts@payer.test"})),
    );
    assert_error_response(&refused, 400, "3100");
}

#[test]
fn mail_goes_over_starttls_to_a_server_the_smtp_ca_vouches_for() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("mail CA");
    let (cert, key) = pki
        .issue("localhost", &["localhost"], true)
        .write(dir.path(), "smtp");
    let ca = dir.path().join("smtp-ca.pem");
    pki.write_ca(&ca);
    let smtp = reserve_address();
    let sink = MailSink::start_tls(dir.path(), smtp, &cert, &key);
    let password = dir.path().join("smtp-password");
    std::fs::write(&password, SMTP_PASSWORD).unwrap();
    // STARTTLS required (the default), the name checked against the
    // certificate's.
    let url = format!("smtp://{SMTP_USER}@localhost:{}", smtp.port());
    let hub = Hub::start_with(
        &dir.path().join("data"),
        &[
            "--smtp-url",
            &url,
            "--smtp-password-file",
            password.to_str().unwrap(),
            "--smtp-ca",
            ca.to_str().unwrap(),
            "--alerts-from",
            "alerts@hub.test",
        ],
    );
    hub.setup();
    let payer = Stub::start(PAYER);
    hub.onboard(PAYER, &payer.base_url(), 1_000, 5_000);
    let limits = "limits@payer.test";
    hub.add_endpoint(PAYER, "NET_DEBIT_CAP_ADJUSTMENT_EMAIL", limits);
    set_cap(&hub, 1500);
    let mails = sink.await_mails(limits, 1);
    assert_eq!(mails[0]["tls"], true, "{mails:?}");
    assert_eq!(mails[0]["authenticated"], true, "{mails:?}");
    assert_eq!(mails[0]["login"], SMTP_USER);
}

/// Nothing is stored: the alarm is computed again when the hub starts, so
/// a DFSP still above its threshold is told again (an alert lost with the
/// process is not lost for good), once.
#[test]
fn after_a_restart_a_dfsp_still_above_its_threshold_is_told_again_once() {
    let dir = tempfile::tempdir().unwrap();
    let smtp = reserve_address();
    let sink = MailSink::start(dir.path(), smtp);
    let flags = [
        "--position-alarm-percent",
        "80",
        "--position-watch-interval-ms",
        "50",
    ];
    let mut hub = hub_with_alerts(dir.path(), smtp, &flags);
    hub.setup();
    let (payer, payee) = two_dfsps(&hub, 1_000, 5_000);
    let ops = "ops@payer.test";
    hub.add_endpoint(PAYER, "NET_DEBIT_CAP_THRESHOLD_BREACH_EMAIL", ops);
    pay(&hub, (PAYER, &payer), (PAYEE, &payee), "900");
    await_position(&hub, 90.0, true);
    sink.await_mails(ops, 1);

    assert!(hub.terminate().success());
    let hub = hub_with_alerts(dir.path(), smtp, &flags);
    await_position(&hub, 90.0, true);
    let both = sink.await_mails(ops, 2);
    assert_ne!(
        header(&both[0], "Message-ID"),
        header(&both[1], "Message-ID")
    );
    // Later looks find it alarmed already.
    pay(&hub, (PAYER, &payer), (PAYEE, &payee), "10");
    await_position(&hub, 91.0, true);
    assert_eq!(sink.await_mails(ops, 2).len(), 2);
}

#[test]
fn a_position_near_its_liquidity_mails_the_liquidity_cover_alarm_once() {
    let (_dir, sink, hub) = mailing_hub(&[
        "--position-alarm-percent",
        "80",
        "--position-watch-interval-ms",
        "50",
    ]);
    // A cap far above the funds: the liquidity is what runs short.
    let (payer, payee) = two_dfsps(&hub, 10_000, 1_000);
    let ops = "ops@payer.test";
    hub.add_endpoint(PAYER, "NET_DEBIT_CAP_THRESHOLD_BREACH_EMAIL", ops);
    let liquidity_share = |percent: f64| {
        let line =
            format!("kasi_position_liquidity_ratio{{participant=\"{PAYER}\",currency=\"USD\"}} ");
        hub.await_metrics(&format!("{PAYER} at {percent}% of its liquidity"), |text| {
            let seen: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix(&line))?
                .parse()
                .ok()?;
            ((seen * 100.0 - percent).abs() < 0.01).then_some(())
        });
    };

    pay(&hub, (PAYER, &payer), (PAYEE, &payee), "850");
    liquidity_share(85.0);
    let mails = sink.await_mails(ops, 1);
    let subject = header(&mails[0], "Subject");
    assert!(subject.contains("85% of its liquidity"), "{subject}");
    hub.await_metric_line("kasi_alerts_total{kind=\"liquidity_cover\",result=\"sent\"} 1");
    // 8.5% of the cap: no cap alarm.
    await_position(&hub, 8.5, false);

    // More funds: the share falls below the margin, the alarm clears
    // without a mail; crossing again is a second mail.
    let settlement = hub.account_id(PAYER, "SETTLEMENT");
    hub.admin_expect(
        "POST",
        &format!("/participants/{PAYER}/accounts/{settlement}"),
        Some(json!({
            "transferId": new_id(),
            "externalReference": "top-up",
            "action": "recordFundsIn",
            "reason": "deposit",
            "amount": {"amount": "1000", "currency": "USD"}
        })),
        202,
    );
    liquidity_share(42.5);
    pay(&hub, (PAYER, &payer), (PAYEE, &payee), "800");
    liquidity_share(82.5);
    assert_eq!(sink.await_mails(ops, 2).len(), 2);
}

/// A cap change held for a second person (four-eyes) is mailed when it
/// applies, not when it is asked for.
#[test]
fn a_held_cap_change_is_mailed_once_approved_not_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let smtp = reserve_address();
    let sink = MailSink::start(dir.path(), smtp);
    let (alice, alice_line) = admin_token("alice", "operator");
    let (bob, bob_line) = admin_token("bob", "operator");
    let tokens = dir.path().join("admin-tokens");
    std::fs::write(&tokens, format!("{alice_line}\n{bob_line}\n")).unwrap();
    let mut hub = hub_with_alerts(
        dir.path(),
        smtp,
        &[
            "--admin-tokens",
            tokens.to_str().unwrap(),
            "--four-eyes",
            "net-debit-cap",
        ],
    );
    hub.admin_bearer = Some(alice.clone());
    hub.setup();
    let payer = Stub::start(PAYER);
    hub.onboard(PAYER, &payer.base_url(), 1_000, 5_000);
    let limits = "limits@payer.test";
    hub.add_endpoint(PAYER, "NET_DEBIT_CAP_ADJUSTMENT_EMAIL", limits);

    let asked = hub.admin(
        "PUT",
        &format!("/participants/{PAYER}/limits"),
        Some(&json!({"currency": "USD", "limit": {"type": "NET_DEBIT_CAP", "value": 2500}})),
    );
    assert_eq!(asked.status, 202, "{asked:?}");
    let pending = asked.json();
    std::thread::sleep(QUIET_WAIT);
    assert!(
        sink.mails().is_empty(),
        "mailed before approval: {:#?}",
        sink.mails()
    );

    let approved = hub.admin_as(
        Some(&bob),
        "POST",
        &format!("/approvals/{}", pending["id"].as_str().unwrap()),
        Some(&json!({"decision": "approve", "reason": "checked"})),
    );
    assert_eq!(approved.status, 200, "{approved:?}");
    assert_eq!(approved.json()["state"], "applied");
    let mails = sink.await_mails(limits, 1);
    assert!(header(&mails[0], "Subject").contains("net debit cap set to 2500"));
}
