//! The change feed's AMQP publisher (`--feed-amqp-url`), end to end: the
//! real `kasi serve` binary and a throw-away RabbitMQ of the test's own
//! (its own node name, ports, epmd, directories; stopped at the end).
//! Every change reaches a queue bound to the exchange, with its feedSeq as
//! message id and `<kind>.<participant>` as routing key; a broker outage
//! stops the publisher, never the transfers, and once the broker is back
//! every change arrives; after the hub is killed and started again it
//! resumes from its durable cursor. At least once: changes may come twice,
//! none may be missing.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lapin::options::{
    BasicAckOptions, BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use serde_json::Value;
use support::*;

/// RabbitMQ's own start script (Debian's `rabbitmq-server` package): run
/// as it is, not through the wrapper that switches to the `rabbitmq` user.
const RABBITMQ_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const EXCHANGE: &str = "kasi.feed";
const BROKER_WAIT: Duration = Duration::from_secs(90);

/// A RabbitMQ node in a temporary directory, with an epmd of its own.
struct Broker {
    dir: tempfile::TempDir,
    port: u16,
    dist_port: u16,
    epmd_port: u16,
    epmd: Child,
    server: Option<Child>,
}

impl Broker {
    fn start() -> Broker {
        assert!(
            Path::new(RABBITMQ_SERVER).exists(),
            "{RABBITMQ_SERVER} is missing: apt-get install -y rabbitmq-server (.ci/run does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let port = reserve_address().port();
        let dist_port = reserve_address().port();
        let epmd_port = reserve_address().port();
        std::fs::write(
            dir.path().join("rabbitmq.conf"),
            format!("listeners.tcp.default = 127.0.0.1:{port}\nloopback_users.guest = true\n"),
        )
        .unwrap();
        std::fs::write(dir.path().join("enabled_plugins"), "[].\n").unwrap();
        let epmd = Command::new("epmd")
            .args(["-port", &epmd_port.to_string(), "-address", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("epmd (erlang-base)");
        let mut broker = Broker {
            dir,
            port,
            dist_port,
            epmd_port,
            epmd,
            server: None,
        };
        broker.run();
        broker
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    fn listening(&self) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }

    /// Starts the node (again, on the same directories) and waits until
    /// it accepts connections.
    fn run(&mut self) {
        let log = std::fs::File::create(self.path("server.out")).unwrap();
        let server = Command::new(RABBITMQ_SERVER)
            .env("HOME", self.dir.path())
            .env("RABBITMQ_NODENAME", format!("kasi{}@localhost", self.port))
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", self.path("mnesia"))
            .env("RABBITMQ_LOG_BASE", self.path("log"))
            .env("RABBITMQ_CONFIG_FILE", self.path("rabbitmq.conf"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                self.path("enabled_plugins"),
            )
            .env("RABBITMQ_PID_FILE", self.path("pid"))
            .env("RABBITMQ_FEATURE_FLAGS_FILE", self.path("feature_flags"))
            .env("RABBITMQ_PLUGINS_EXPAND_DIR", self.path("plugins-expand"))
            .env("RABBITMQ_QUORUM_DIR", self.path("quorum"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start rabbitmq-server");
        self.server = Some(server);
        let deadline = Instant::now() + BROKER_WAIT;
        while !self.listening() {
            assert!(
                Instant::now() < deadline,
                "RabbitMQ did not start within {BROKER_WAIT:?}:\n{}",
                std::fs::read_to_string(self.path("server.out")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the node (SIGTERM to its VM, as `rabbitmqctl stop` would) and
    /// waits until it is gone.
    fn stop(&mut self) {
        let Some(mut server) = self.server.take() else {
            return;
        };
        if let Ok(pid) = std::fs::read_to_string(self.path("pid")) {
            let _ = Command::new("kill").args(["-TERM", pid.trim()]).status();
        }
        let _ = server.kill();
        let deadline = Instant::now() + BROKER_WAIT;
        while self.listening() {
            assert!(Instant::now() < deadline, "RabbitMQ did not stop");
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = server.wait();
        // The VM's pid file goes with a clean stop; wait for the VM itself.
        if let Ok(pid) = std::fs::read_to_string(self.path("pid")) {
            let proc = PathBuf::from(format!("/proc/{}", pid.trim()));
            while proc.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
        let _ = self.epmd.kill();
        let _ = self.epmd.wait();
    }
}

/// A durable queue bound to the whole exchange, read as the data team's
/// consumer would.
struct Consumer {
    runtime: tokio::runtime::Runtime,
    queue: String,
    /// feedSeq → (routing key, change), each kept once.
    seen: BTreeMap<u64, (String, Value)>,
    deliveries: usize,
}

impl Consumer {
    fn declare(broker: &Broker) -> Consumer {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let queue = "reporting".to_string();
        runtime.block_on(async {
            let connection = Connection::connect(&broker.url(), ConnectionProperties::default())
                .await
                .expect("connect to RabbitMQ");
            let channel = connection.create_channel().await.unwrap();
            channel
                .exchange_declare(
                    EXCHANGE.into(),
                    ExchangeKind::Topic,
                    ExchangeDeclareOptions {
                        durable: true,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .unwrap();
            channel
                .queue_declare(
                    queue.as_str().into(),
                    QueueDeclareOptions::durable(),
                    FieldTable::default(),
                )
                .await
                .unwrap();
            channel
                .queue_bind(
                    queue.as_str().into(),
                    EXCHANGE.into(),
                    "#".into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .unwrap();
            let _ = connection.close(200, "declared".into()).await;
        });
        Consumer {
            runtime,
            queue,
            seen: BTreeMap::new(),
            deliveries: 0,
        }
    }

    /// Reads until every feedSeq from 1 to `through` has arrived.
    fn await_all(&mut self, broker: &Broker, through: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !(1..=through).all(|seq| self.seen.contains_key(&seq)) {
            assert!(
                Instant::now() < deadline,
                "feedSeqs missing through {through}: {:?}",
                (1..=through)
                    .filter(|seq| !self.seen.contains_key(seq))
                    .collect::<Vec<_>>()
            );
            self.drain(broker);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn drain(&mut self, broker: &Broker) {
        let url = broker.url();
        let queue = self.queue.clone();
        let got: Vec<(String, Option<String>, Vec<u8>)> = self.runtime.block_on(async move {
            let mut got = Vec::new();
            let Ok(connection) = Connection::connect(&url, ConnectionProperties::default()).await
            else {
                return got;
            };
            let channel = connection.create_channel().await.unwrap();
            while let Ok(Some(message)) = channel
                .basic_get(queue.as_str().into(), BasicGetOptions::default())
                .await
            {
                let delivery = &message.delivery;
                got.push((
                    delivery.routing_key.to_string(),
                    delivery
                        .properties
                        .message_id()
                        .as_ref()
                        .map(|id| id.to_string()),
                    delivery.data.clone(),
                ));
                delivery.ack(BasicAckOptions::default()).await.unwrap();
            }
            let _ = connection.close(200, "drained".into()).await;
            got
        });
        for (routing_key, message_id, body) in got {
            let change: Value = serde_json::from_slice(&body).expect("a JSON change");
            let seq = change["feedSeq"].as_u64().expect("feedSeq");
            assert_eq!(message_id, Some(seq.to_string()), "message id = feedSeq");
            assert_eq!(
                routing_key,
                format!(
                    "{}.{}",
                    change["kind"].as_str().unwrap(),
                    change["participant"].as_str().unwrap()
                )
            );
            self.deliveries += 1;
            if let Some((_, before)) = self.seen.get(&seq) {
                assert_eq!(before, &change, "a change published again is the same");
            }
            self.seen.insert(seq, (routing_key, change));
        }
    }
}

fn newest(hub: &Hub) -> u64 {
    let response = hub.admin("GET", "/feed?limit=1", None);
    assert_eq!(response.status, 200, "{response:?}");
    response
        .header("kasi-feed-newest")
        .unwrap()
        .parse()
        .unwrap()
}

fn committed_transfer(s: &Scenario, amount: &str) -> String {
    let (id, _) = s.reserve(amount, far_future());
    s.fulfil(&id, &fulfil_body(FULFILMENT, "COMMITTED"));
    s.payer.expect("PUT", &format!("/transfers/{id}"));
    s.payee.expect("PUT", &format!("/transfers/{id}"));
    id
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map(|value| value as u64)
}

#[test]
fn every_change_reaches_the_broker_across_its_outage_and_a_hub_crash() {
    let mut broker = Broker::start();
    let mut consumer = Consumer::declare(&broker);
    let url = broker.url();
    let flags = ["--feed-amqp-url", url.as_str()];
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let hub = Hub::start_with(&data, &flags);
    let mut s = Scenario::on(hub, dir, 10_000, 5_000);

    let first = committed_transfer(&s, "1");
    committed_transfer(&s, "2");
    consumer.await_all(&broker, newest(&s.hub));
    let changes: Vec<&Value> = consumer.seen.values().map(|(_, c)| c).collect();
    let prepared = changes
        .iter()
        .find(|c| c["kind"] == "transfer.prepared" && c["key"] == first.as_str())
        .expect("the first transfer's prepare");
    assert_eq!(prepared["payer"], PAYER);
    assert_eq!(
        consumer.seen[&prepared["feedSeq"].as_u64().unwrap()].0,
        format!("transfer.prepared.{PAYER}")
    );
    s.hub.await_metrics("the lag back to 0", |text| {
        (metric(text, "kasi_feed_lag") == Some(0)
            && metric(text, "kasi_feed_published_total").is_some_and(|n| n > 0))
        .then_some(())
    });

    // The broker goes away: transfers go on, the lag grows.
    broker.stop();
    for amount in ["3", "4", "5"] {
        committed_transfer(&s, amount);
    }
    s.hub
        .await_metrics("a lag while the broker is down", |text| {
            metric(text, "kasi_feed_lag").filter(|&lag| lag > 0)
        });
    s.hub.await_log("the broker cannot be reached");
    broker.run();
    consumer.await_all(&broker, newest(&s.hub));
    s.hub.await_log("the broker is reachable again");

    // The hub crashes and starts again: it resumes from its cursor.
    let published_before = newest(&s.hub);
    s.hub.kill();
    s.hub = Hub::start_with(&data, &flags);
    let line = s
        .hub
        .await_log_lines("change feed publisher: publishing", 1)
        .remove(0);
    let from: u64 = line
        .split("from_feed_seq=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no from_feed_seq in {line}"));
    assert!(
        from > 1 && from <= published_before + 1,
        "resumed from {from}, not from its cursor (published through {published_before})"
    );
    // A prepare through the restarted hub (the stubs may be sent the
    // callbacks owed from before the crash again: not read here).
    let after_restart = new_id();
    let body = prepare_body(&after_restart, PAYER, PAYEE, "6", far_future());
    assert_eq!(s.hub.prepare(PAYER, PAYEE, &body).status, 202);
    consumer.await_all(&broker, newest(&s.hub));
    assert!(consumer
        .seen
        .values()
        .any(|(_, c)| c["kind"] == "transfer.prepared" && c["key"] == after_restart.as_str()));
    assert!(consumer.deliveries >= consumer.seen.len());
}
