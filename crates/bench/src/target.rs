//! The hub under test as a child process: this executable's `serve` on a
//! temporary data directory (`--embedded`), or `null-hub`; where it
//! listens, its log, its stop.

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

/// How long the embedded hub may take to say where it listens.
pub(crate) const HUB_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the embedded hub may take to stop after SIGTERM.
pub(crate) const HUB_STOP_TIMEOUT: Duration = Duration::from_secs(45);

/// The null hub, as a child process or in this one: its API and admin
/// URLs, and the process to stop.
pub(crate) fn start_null_hub(
    runtime: &tokio::runtime::Runtime,
    in_process: bool,
) -> anyhow::Result<(String, String, Option<EmbeddedHub>)> {
    if in_process {
        let hub = runtime.block_on(crate::null_hub::start())?;
        Ok((
            format!("http://{}", hub.api),
            format!("http://{}", hub.admin),
            None,
        ))
    } else {
        let hub = EmbeddedHub::start(HubProcess::Null)?;
        Ok((
            format!("http://{}", hub.api),
            format!("http://{}", hub.admin),
            Some(hub),
        ))
    }
}

/// Which hub a child process runs.
pub(crate) enum HubProcess<'a> {
    /// `kasi serve` on a temporary data directory.
    Kasi {
        hub_name: &'a str,
        trace_sample_every: Option<u32>,
        /// Its `--store`; `None`: SQLite in the temporary data directory.
        store: Option<&'a str>,
        /// More flags: the TLS and JWS of `security::Material::serve_args`.
        extra: Vec<std::ffi::OsString>,
    },
    /// `kasi null-hub`.
    Null,
}

/// A hub as a child process: `kasi serve` on a temporary data directory,
/// or the null hub.
pub(crate) struct EmbeddedHub {
    pub(crate) child: Child,
    pub(crate) api: SocketAddr,
    pub(crate) admin: SocketAddr,
    /// WARN and ERROR lines the hub logged (they are also copied to stderr).
    pub(crate) warnings: Arc<AtomicU64>,
    pub(crate) drain: Option<std::thread::JoinHandle<()>>,
    pub(crate) stopped: bool,
    /// `kasi serve`'s store, removed with the hub.
    pub(crate) _data_dir: Option<tempfile::TempDir>,
}

impl EmbeddedHub {
    pub(crate) fn start(process: HubProcess) -> anyhow::Result<EmbeddedHub> {
        let exe = std::env::current_exe().context("cannot find this executable")?;
        let mut command = std::process::Command::new(exe);
        let mut store = None;
        match process {
            HubProcess::Kasi {
                hub_name,
                trace_sample_every,
                store: hub_store,
                extra,
            } => {
                let data_dir = tempfile::Builder::new()
                    .prefix("kasi-bench-hub-")
                    .tempdir()
                    .context("cannot make a temp dir")?;
                command
                    .arg("serve")
                    .arg("--data-dir")
                    .arg(data_dir.path())
                    .args(["--api-listen", "127.0.0.1:0"])
                    .args(["--admin-listen", "127.0.0.1:0"])
                    .args(["--hub-name", hub_name])
                    // Every simulated DFSP connects from this one address:
                    // the hub's cap per client would cap the load.
                    .args(["--max-connections-per-client", "1000000"]);
                if let Some(every) = trace_sample_every {
                    command.args(["--trace-sample-every", &every.to_string()]);
                }
                if let Some(hub_store) = hub_store {
                    command.args(["--store", hub_store]);
                }
                command.args(extra);
                store = Some(data_dir);
            }
            HubProcess::Null => {
                command.arg("null-hub");
            }
        }
        let mut child = command
            .args(["--log-level", "warn,kasi::serve=info,kasi::null_hub=info"])
            // Flags give every setting that matters; a config file of the
            // caller's must not change the hub under test.
            .env_remove("KASI_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start the embedded hub")?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let warnings = Arc::new(AtomicU64::new(0));
        let (announce, announced) = mpsc::channel();
        let counter = warnings.clone();
        let drain = std::thread::Builder::new()
            .name("kasi-hub-log".into())
            .spawn(move || drain_hub_log(stderr, announce, &counter))
            .context("cannot start a thread")?;
        let mut hub = EmbeddedHub {
            child,
            api: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin: SocketAddr::from(([127, 0, 0, 1], 0)),
            warnings,
            drain: Some(drain),
            stopped: false,
            _data_dir: store,
        };
        match announced.recv_timeout(HUB_START_TIMEOUT) {
            Ok(Ok((api, admin))) => {
                hub.api = api;
                hub.admin = admin;
                Ok(hub)
            }
            Ok(Err(log)) => {
                let status = hub.child.wait().ok();
                hub.stopped = true;
                bail!(
                    "the embedded hub exited ({}) before serving; its last log lines:\n{log}",
                    status.map_or("unknown status".to_string(), |s| s.to_string())
                )
            }
            Err(_) => bail!(
                "the embedded hub did not say where it serves within {} s",
                HUB_START_TIMEOUT.as_secs()
            ),
        }
    }

    /// SIGTERM, then waits for the exit (SIGKILL if it takes too long).
    pub(crate) fn stop(&mut self) -> anyhow::Result<ExitStatus> {
        self.stopped = true;
        let pid = self.child.id().to_string();
        let signalled = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .context("cannot run kill")?;
        if !signalled.success() {
            let _ = self.child.kill();
        }
        let deadline = Instant::now() + HUB_STOP_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!(
                    "the embedded hub did not stop within {} s of SIGTERM; killed it",
                    HUB_STOP_TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(drain) = self.drain.take() {
            let _ = drain.join();
        }
        Ok(status)
    }
}

impl Drop for EmbeddedHub {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads the hub's log until it closes: announces the `serving` line's
/// addresses (or, if the hub ends first, its last lines), and copies every
/// warning and error to our stderr.
pub(crate) fn drain_hub_log(
    stderr: std::process::ChildStderr,
    announce: mpsc::Sender<Result<(SocketAddr, SocketAddr), String>>,
    warnings: &AtomicU64,
) {
    let mut recent: Vec<String> = Vec::new();
    let mut serving = false;
    for line in std::io::BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        let line = strip_ansi(&line);
        if !serving {
            if let Some(addresses) = parse_serving_line(&line) {
                serving = true;
                let _ = announce.send(Ok(addresses));
                continue;
            }
            if recent.len() == 20 {
                recent.remove(0);
            }
            recent.push(line.clone());
        }
        if line.contains(" WARN ") || line.contains(" ERROR ") {
            warnings.fetch_add(1, Ordering::Relaxed);
            eprintln!("hub: {line}");
        }
    }
    if !serving {
        let _ = announce.send(Err(recent.join("\n")));
    }
}

/// The API and admin addresses of `kasi serve`'s `serving api=… admin=…` line.
pub(crate) fn parse_serving_line(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let rest = &line[line.find("serving ")? + "serving ".len()..];
    let (mut api, mut admin) = (None, None);
    for token in rest.split_whitespace() {
        if let Some(value) = token.strip_prefix("api=") {
            api = value.parse().ok();
        } else if let Some(value) = token.strip_prefix("admin=") {
            admin = value.parse().ok();
        }
    }
    Some((api?, admin?))
}

/// Removes terminal colour sequences (`ESC [ … letter`).
pub(crate) fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_serving_line() {
        let api: SocketAddr = "127.0.0.1:41234".parse().unwrap();
        let admin: SocketAddr = "127.0.0.1:41235".parse().unwrap();
        let line = "2026-11-22T10:00:00.123456Z  INFO kasi::serve: serving api=127.0.0.1:41234 admin=127.0.0.1:41235";
        assert_eq!(parse_serving_line(line), Some((api, admin)));
        // Field order and IPv6 do not matter.
        let line = "INFO kasi::serve: serving admin=[::1]:9 api=127.0.0.1:41234";
        assert_eq!(
            parse_serving_line(line),
            Some((api, "[::1]:9".parse().unwrap()))
        );
        // With colours, as when stderr is a terminal.
        let coloured = "\u{1b}[2m2026-11-22T10:00:00Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mkasi::serve\u{1b}[0m\u{1b}[2m:\u{1b}[0m serving \u{1b}[3mapi\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:41234 \u{1b}[3madmin\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:41235";
        assert_eq!(
            parse_serving_line(&strip_ansi(coloured)),
            Some((api, admin))
        );
        for other in [
            "INFO kasi::serve: recovered the ledger participants=0",
            "INFO kasi::serve: serving api=127.0.0.1:1",
            "INFO kasi::serve: serving api=nowhere admin=127.0.0.1:2",
            "INFO kasi::serve: stopped accepting requests",
            "",
        ] {
            assert_eq!(parse_serving_line(other), None, "{other}");
        }
    }
}
