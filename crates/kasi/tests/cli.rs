//! End-to-end tests of the real `kasi` binary: serve, audit, and a writer
//! killed with SIGKILL in the middle of a stream.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ledger::{Snapshot, TransferId, TransferState};
use store::sqlite::SqliteStore;
use store::Store as _;

fn kasi() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kasi"));
    command
        .env_remove("KASI_LOG")
        .env_remove("KASI_LOG_LEVEL")
        .env_remove("KASI_LOG_FORMAT")
        .env_remove("KASI_DATA_DIR")
        .env_remove("KASI_ADMIN_LISTEN")
        .env_remove("KASI_API_LISTEN")
        .env_remove("KASI_HUB_NAME");
    command
}

/// `kasi serve` on ephemeral ports over `data_dir`.
fn serve_command(data_dir: &Path) -> Command {
    let mut command = kasi();
    command
        .args([
            "serve",
            "--api-listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(data_dir);
    command
}

/// Starts `kasi serve` on an ephemeral port; returns the child and the
/// address it logged.
fn serve(
    data_dir: &Path,
    extra: &[&str],
) -> (Child, SocketAddr, BufReader<std::process::ChildStderr>) {
    #[allow(clippy::zombie_processes)] // the caller waits for it
    let mut child = serve_command(data_dir)
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "kasi serve exited before serving"
        );
        if let Some(rest) = line.split("admin=").nth(1) {
            let address = rest
                .split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches(|c: char| !c.is_ascii_digit());
            return (child, address.parse().unwrap(), stderr);
        }
    }
}

fn http_get(address: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait().unwrap()
}

fn load(data_dir: &Path) -> Snapshot {
    SqliteStore::open_read_only(data_dir)
        .unwrap()
        .load()
        .unwrap()
}

#[test]
fn serve_answers_health_stops_on_sigterm_and_restarts_on_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, address, _stderr) = serve(dir.path(), &["--hub-name", "Switch"]);
    let (status, body) = http_get(address, "/health");
    assert_eq!(status, 200);
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "OK");
    assert!(
        terminate(&mut child).success(),
        "SIGTERM must stop the hub cleanly"
    );

    let snapshot = load(dir.path());
    assert_eq!(snapshot.participants.len(), 1);
    assert_eq!(snapshot.participants[0].name.as_str(), "Switch");
    assert!(snapshot.participants[0].is_hub);

    // Restart: the hub is recovered, not created again.
    let (mut child, address, _stderr) = serve(dir.path(), &["--hub-name", "Switch"]);
    assert_eq!(http_get(address, "/health").0, 200);
    assert!(terminate(&mut child).success());
    assert_eq!(load(dir.path()).participants.len(), 1);

    // A different hub name for the same data is refused with a reason.
    let output = serve_command(dir.path()).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("pass --hub-name Switch"));
}

#[test]
fn metrics_are_exposed_on_the_admin_address() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, address, _stderr) = serve(dir.path(), &["--hub-name", "Switch"]);
    assert_eq!(http_get(address, "/health").0, 200);
    let (status, body) = http_get(address, "/metrics");
    assert_eq!(status, 200);
    for expected in [
        "kasi_http_requests_total{api=\"admin\",route=\"GET /health\",status=\"2xx\"} 1",
        "kasi_http_request_duration_seconds_count{api=\"admin\",route=\"GET /health\",status=\"2xx\"} 1",
        // Start-up created the hub participant and read the state back.
        "kasi_ledger_batches_total ",
        "kasi_ledger_commands_total ",
        "kasi_ledger_apply_seconds_total ",
        "kasi_ledger_apply_max_seconds ",
        "kasi_store_commits_total ",
        "kasi_store_records_total ",
        "kasi_store_commit_seconds_total ",
        "kasi_store_commit_max_seconds ",
        "# TYPE kasi_callbacks_sent_ok counter",
        "# TYPE kasi_runtime_lag_seconds histogram",
        "# EOF",
    ] {
        assert!(body.contains(expected), "missing {expected:?} in:\n{body}");
    }
    let batches: u64 = body
        .lines()
        .find_map(|line| line.strip_prefix("kasi_ledger_batches_total "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(batches > 0, "start-up applies batches");
    // The serving process's own resident memory, under the standard name.
    if cfg!(target_os = "linux") {
        let rss: u64 = body
            .lines()
            .find_map(|line| line.strip_prefix("process_resident_memory_bytes "))
            .unwrap_or_else(|| panic!("no process_resident_memory_bytes in:\n{body}"))
            .trim()
            .parse()
            .unwrap();
        assert!((1 << 20..1 << 40).contains(&rss), "{rss}");
    }
    assert!(terminate(&mut child).success());
}

#[test]
fn a_second_hub_on_the_same_data_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut first, _, _stderr) = serve(dir.path(), &[]);
    let output = serve_command(dir.path()).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("in use by another kasi process"));
    assert!(terminate(&mut first).success());
}

#[test]
fn configuration_comes_from_the_environment_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = kasi()
        .arg("serve")
        .env("KASI_DATA_DIR", dir.path())
        .env("KASI_ADMIN_LISTEN", "127.0.0.1:0")
        .env("KASI_API_LISTEN", "127.0.0.1:0")
        .env("KASI_HUB_NAME", "EnvHub")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("serving") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0);
    }
    assert!(terminate(&mut child).success());
    assert_eq!(load(dir.path()).participants[0].name.as_str(), "EnvHub");
}

#[test]
fn help_explains_the_commands() {
    let output = kasi().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for word in ["serve", "audit", "bench", "KASI_LOG"] {
        assert!(help.contains(word), "--help lacks {word}:\n{help}");
    }
    let output = kasi().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for word in [
        "--data-dir",
        "KASI_DATA_DIR",
        "--admin-listen",
        "--hub-name",
    ] {
        assert!(help.contains(word), "serve --help lacks {word}:\n{help}");
    }
}

/// The crash test: a writer reports each outcome once it is durable; it is
/// killed with SIGKILL mid-stream; everything it reported must be in the
/// store, at least as far along, and the store must audit clean.
#[test]
fn a_writer_killed_mid_stream_loses_nothing_it_reported_durable() {
    // Each kill lands at a different point of a batch's life; a few rounds
    // make a premature acknowledgement very likely to be caught.
    for kill_after in [30_000, 27_000, 34_000] {
        let dir = tempfile::tempdir().unwrap();
        kill_writer_and_check(kill_after, Backend::Sqlite(dir.path().join("data")));
    }
}

/// The same on the PostgreSQL store: what the writer was told is committed
/// (the server flushed it) is there after the writer is killed.
#[test]
fn a_writer_on_postgresql_killed_mid_stream_loses_nothing_it_reported_durable() {
    let cluster = testpg::Cluster::start();
    for (round, kill_after) in [30_000, 27_000, 34_000].into_iter().enumerate() {
        let url = cluster.create_database(&format!("crash{round}"));
        kill_writer_and_check(kill_after, Backend::Postgres(url));
    }
}

/// Where the crash test's writer keeps its store.
enum Backend {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl Backend {
    /// The flags that name it to `kasi bench ledger` and `kasi audit`.
    fn flags(&self) -> Vec<std::ffi::OsString> {
        match self {
            Backend::Sqlite(dir) => vec!["--data-dir".into(), dir.into()],
            Backend::Postgres(url) => vec!["--store".into(), url.into()],
        }
    }

    fn load(&self) -> Snapshot {
        match self {
            Backend::Sqlite(dir) => load(dir),
            Backend::Postgres(url) => store::pg::PgStore::open_read_only(url)
                .unwrap()
                .load()
                .unwrap(),
        }
    }
}

fn kill_writer_and_check(kill_after: usize, backend: Backend) {
    let mut writer = kasi()
        .args([
            "bench",
            "ledger",
            "--fsync",
            "on",
            "--print-durable",
            "--transfers",
            "20000",
            "--dfsps",
            "16",
        ])
        .args(backend.flags())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(writer.stdout.take().unwrap());
    let mut reported = Vec::new();
    let mut line = String::new();
    // Kill it halfway through the fulfil phase (20,000 prepares, then their
    // fulfils), while it is still writing as fast as it can.
    while reported.len() < kill_after {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the writer stopped early"
        );
        let (id, state) = line.trim_end().split_once(' ').unwrap();
        reported.push((
            TransferId::parse(id).unwrap(),
            TransferState::parse(state).unwrap(),
        ));
    }
    writer.kill().unwrap();
    writer.wait().unwrap();
    assert!(reported
        .iter()
        .any(|(_, state)| *state == TransferState::Committed));

    let snapshot = backend.load();
    let finished: std::collections::HashMap<u64, TransferState> =
        snapshot.finishes.iter().map(|f| (f.seq, f.state)).collect();
    let stored: std::collections::HashMap<TransferId, TransferState> = snapshot
        .transfers
        .iter()
        .map(|row| {
            (
                row.transfer_id,
                finished.get(&row.seq).copied().unwrap_or(row.state),
            )
        })
        .collect();
    for (id, state) in &reported {
        let now = stored
            .get(id)
            .unwrap_or_else(|| panic!("transfer {id} was reported durable but is not stored"));
        let ok = match state {
            TransferState::Reserved => {
                matches!(now, TransferState::Reserved | TransferState::Committed)
            }
            other => now == other,
        };
        assert!(
            ok,
            "transfer {id} was reported {state:?} but is stored as {now:?}"
        );
    }

    let audit = kasi().arg("audit").args(backend.flags()).output().unwrap();
    assert!(
        audit.status.success(),
        "{}",
        String::from_utf8_lossy(&audit.stdout)
    );
    // And the hub starts on it.
    let unused = tempfile::tempdir().unwrap();
    let (mut child, address, _stderr) = match &backend {
        Backend::Sqlite(dir) => serve(dir, &[]),
        Backend::Postgres(url) => serve(unused.path(), &["--store", url]),
    };
    assert_eq!(http_get(address, "/health").0, 200);
    assert!(terminate(&mut child).success());
}

#[test]
fn audit_finds_a_tampered_balance_and_serve_refuses_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let run = kasi()
        .args([
            "bench",
            "ledger",
            "--fsync",
            "off",
            "--transfers",
            "2000",
            "--dfsps",
            "4",
            "--json",
        ])
        .arg("--data-dir")
        .arg(&data_dir)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert!(summary["transfers_per_s"].as_f64().unwrap() > 0.0);
    assert!(summary["p99_ms"].as_f64().is_some());

    let clean = kasi()
        .arg("audit")
        .arg("--data-dir")
        .arg(&data_dir)
        .output()
        .unwrap();
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );

    // Someone edits a position behind the ledger's back.
    let connection = rusqlite::Connection::open(data_dir.join("kasi.db")).unwrap();
    let changed = connection.execute("UPDATE accounts SET value = '123.45' WHERE kind = 'POSITION' AND id = (SELECT min(id) FROM accounts WHERE kind = 'POSITION')", []).unwrap();
    assert_eq!(changed, 1);
    drop(connection);

    let audit = kasi()
        .arg("audit")
        .arg("--data-dir")
        .arg(&data_dir)
        .output()
        .unwrap();
    assert_eq!(audit.status.code(), Some(1));
    let report = String::from_utf8_lossy(&audit.stdout);
    assert!(report.contains("records value 123.45"), "{report}");
    assert!(report.contains("USD accounts sum to"), "{report}");

    let serve = serve_command(&data_dir).output().unwrap();
    assert_eq!(serve.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&serve.stderr).contains("does not add up"));
}

#[test]
fn audit_of_a_missing_store_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let output = kasi()
        .arg("audit")
        .arg("--data-dir")
        .arg(dir.path().join("nothing"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no kasi store"));
}

/// A store kasi cannot reach, or cannot name, stops the start with a
/// message that names it (its password never printed).
#[test]
fn an_unknown_store_is_refused_without_printing_its_password() {
    // An unreachable PostgreSQL store is waited for (crates/kasi/tests/outages.rs).
    let dir = tempfile::tempdir().unwrap();
    let output = serve_command(dir.path())
        .args(["--store", "mysql://kasi:s3cret@db/hub"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("sqlite:DIR or postgres://"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

#[test]
fn an_unknown_log_level_is_refused_naming_the_accepted_ones() {
    let dir = tempfile::tempdir().unwrap();
    for level in ["warning", "verbose", "info,engine=loud"] {
        let output = serve_command(dir.path())
            .args(["--log-level", level])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{level}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("not a log level") && stderr.contains("error, warn, info"),
            "{level}: {stderr}"
        );
    }
    assert!(
        !dir.path().join("kasi.db").exists(),
        "refused before the store is created"
    );
}

#[test]
fn json_logs_are_one_object_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = serve_command(dir.path())
        .args(["--log-format", "json"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "kasi serve exited before serving: {log}"
        );
        log.push_str(&line);
        if line.contains("\"serving\"") {
            break;
        }
    }
    assert!(terminate(&mut child).success());
    stderr.read_to_string(&mut log).unwrap();
    let lines: Vec<&str> = log.lines().filter(|line| !line.is_empty()).collect();
    for line in &lines {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}"));
        assert!(event["timestamp"].is_string(), "{line}");
        assert!(event["level"].is_string(), "{line}");
        assert!(event["message"].is_string(), "{line}");
    }
    let serving: serde_json::Value = serde_json::from_str(
        lines
            .iter()
            .find(|line| line.contains("\"serving\""))
            .unwrap(),
    )
    .unwrap();
    assert!(
        serving["api"]
            .as_str()
            .is_some_and(|api| api.starts_with("127.0.0.1:")),
        "fields are keys of their own: {serving}"
    );
    assert!(
        lines
            .iter()
            .any(|line| line.contains("\"stopped cleanly\"")),
        "{log}"
    );
}

#[test]
fn listen_addresses_may_be_host_names_and_both_have_probes() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = kasi()
        .args([
            "serve",
            "--api-listen",
            "localhost:0",
            "--admin-listen",
            "localhost:0",
            "--data-dir",
        ])
        .arg(dir.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let (api, admin) = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "exited before serving"
        );
        if line.contains("serving") {
            let address = |key: &str| -> SocketAddr {
                line.split(key)
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .trim_end_matches(|c: char| !c.is_ascii_digit())
                    .parse()
                    .unwrap()
            };
            break (address("api="), address("admin="));
        }
    };
    for address in [api, admin] {
        assert!(address.ip().is_loopback(), "{address}");
        for path in ["/health", "/health/live", "/health/ready"] {
            let (status, body) = http_get(address, path);
            assert_eq!(status, 200, "{address}{path}: {body}");
            assert!(body.contains("\"OK\""), "{body}");
        }
    }
    assert!(terminate(&mut child).success());

    let output = kasi()
        .args([
            "serve",
            "--api-listen",
            "no-such-host.invalid:3000",
            "--data-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("neither IP:PORT nor a HOST:PORT"),
        "{output:?}"
    );
}

#[test]
fn the_example_config_names_every_serve_setting_and_every_key_is_known() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let example = std::fs::read_to_string(root.join("deploy/kasi.conf")).unwrap();
    let keys: std::collections::BTreeSet<String> = example
        .lines()
        .filter_map(|line| line.strip_prefix("# "))
        .filter_map(|line| line.split_once(" = "))
        .map(|(key, _)| key.to_string())
        .filter(|key| {
            key.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
        .collect();
    let help = kasi().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let flags: std::collections::BTreeSet<String> = help
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("--"))
        .map(|rest| {
            rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .next()
                .unwrap()
                .to_string()
        })
        .filter(|flag| !["help", "version", "config"].contains(&flag.as_str()))
        .collect();
    assert_eq!(
        keys, flags,
        "deploy/kasi.conf and `kasi serve --help` disagree"
    );

    // `false` is shown only for switches: uncommenting `callback-allow =
    // false` once started a hub that refused every callback (a list whose
    // one entry is the host "false").
    let takes_a_value: std::collections::BTreeSet<String> = help
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("--"))
        .filter(|rest| {
            rest.split_whitespace()
                .nth(1)
                .is_some_and(|word| word.starts_with('<'))
        })
        .map(|rest| rest.split_whitespace().next().unwrap().to_string())
        .collect();
    for line in example.lines().filter_map(|line| line.strip_prefix("# ")) {
        if let Some((key, "false")) = line.split_once(" = ") {
            assert!(
                !takes_a_value.contains(key),
                "deploy/kasi.conf shows `{key} = false`, but --{key} takes a value"
            );
        }
    }

    // Every key, uncommented, is a setting kasi knows.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kasi.conf");
    let uncommented: String = example
        .lines()
        .filter_map(|line| line.strip_prefix("# "))
        .filter(|line| line.contains(" = ") && keys.contains(line.split(" = ").next().unwrap()))
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(&config, uncommented).unwrap();
    // (The file's `store` names a PostgreSQL example; the flag wins.)
    let output = kasi()
        .args(["audit", "--config"])
        .arg(&config)
        .arg("--store")
        .arg(format!("sqlite:{}", dir.path().join("no-store").display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("unknown setting"), "{stderr}");
    assert!(stderr.contains("no kasi store"), "{stderr}");
}

/// The config file is TOML: a `#` inside a quoted value (a PostgreSQL
/// password) is part of it, and a flag wins over a KASI_* variable, which
/// wins over the file, which wins over the built-in default.
#[test]
fn the_config_file_is_toml_and_gives_way_to_variables_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kasi.toml");
    let audit = |extra: &[&str], env: Option<&Path>| {
        let mut command = kasi();
        command.args(["audit", "--config"]).arg(&config).args(extra);
        command.env_remove("KASI_STORE");
        if let Some(dir) = env {
            command.env("KASI_DATA_DIR", dir);
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };

    // Nothing listens on port 1: the audit fails to connect, naming the
    // whole URL (the password redacted), not a URL cut at the `#`.
    std::fs::write(
        &config,
        "# the hub's database\nstore = \"postgres://kasi:pa#ss@127.0.0.1:1/kasi\" # password and all\n",
    )
    .unwrap();
    let stderr = audit(&[], None);
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
    assert!(
        !stderr.contains("pa#ss") && !stderr.contains("not a store"),
        "{stderr}"
    );

    let from = |name: &str| dir.path().join(name);
    std::fs::write(
        &config,
        format!("data_dir = \"{}\"\n", from("file").display()),
    )
    .unwrap();
    let stderr = audit(&[], None);
    assert!(
        stderr.contains(&from("file").display().to_string()),
        "{stderr}"
    );
    let stderr = audit(&[], Some(&from("env")));
    assert!(
        stderr.contains(&from("env").display().to_string()),
        "{stderr}"
    );
    let flag = from("flag").display().to_string();
    let stderr = audit(&["--data-dir", &flag], Some(&from("env")));
    assert!(stderr.contains(&flag), "{stderr}");

    // An unquoted string is not TOML: the error says how to write it.
    std::fs::write(&config, "data-dir = /var/lib/kasi\n").unwrap();
    let stderr = audit(&[], None);
    assert!(stderr.contains("kasi.toml"), "{stderr}");
    assert!(
        stderr.contains("`data-dir = \"/var/lib/kasi\"`"),
        "{stderr}"
    );
}

/// `kasi bench ledger --history`: the history it builds is summed by the
/// snapshot, and recovery from the snapshot loads only what it must (the
/// DFSPs' deposits), reporting both recoveries.
#[test]
fn bench_ledger_history_times_recovery_with_and_without_the_snapshot() {
    let output = kasi()
        .args([
            "bench",
            "ledger",
            "--history",
            "3000",
            "--dfsps",
            "4",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["history_transfers"], 3000, "{report}");
    assert_eq!(report["snapshot_summed"], 3000, "{report}");
    assert_eq!(report["archived_from_snapshot"], 3000, "{report}");
    assert_eq!(
        report["loaded_from_snapshot"], 4,
        "the four deposits: {report}"
    );
    assert!(report["recovery_whole_history_ms"].as_f64().unwrap() > 0.0);
    assert!(report["recovery_from_snapshot_ms"].as_f64().unwrap() > 0.0);
}
