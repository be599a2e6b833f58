//! Throw-away PostgreSQL clusters for tests.
//!
//! [`Cluster::start`] finds the server binaries (`initdb`, `pg_ctl`),
//! creates a cluster in a temporary directory, starts it on a free port on
//! 127.0.0.1 (and a Unix socket inside that directory), and on drop stops
//! it and removes the directory. Run as root, the server runs as the
//! unprivileged `postgres` user (PostgreSQL refuses to run as root).
//!
//! Missing binaries are a test failure, never a skip: the panic says how
//! to install them. `bash .ci/run` installs Debian's `postgresql` package
//! when they are missing.
//!
//! A watchdog process stops the server if the test process dies without
//! dropping the cluster (SIGKILL, abort), so no server outlives its test.

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where to look for the binaries besides `KASI_PG_BIN` and `PATH`.
const DEBIAN_BIN_GLOB_ROOT: &str = "/usr/lib/postgresql";

const INSTALL_HINT: &str = "PostgreSQL's server binaries (initdb, pg_ctl) were not found: \
    install them (Debian/Ubuntu: `apt-get install postgresql`; `bash .ci/run` does it for you), \
    or set KASI_PG_BIN to the directory that holds them";

/// A running throw-away cluster. Dropping it stops the server (immediate
/// shutdown) and removes its files.
#[derive(Debug)]
pub struct Cluster {
    root: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    run_as: Option<(u32, u32)>,
    running: bool,
}

impl Cluster {
    /// A new primary cluster, started.
    pub fn start() -> Cluster {
        Cluster::start_with(&[])
    }

    /// [`Cluster::start`] with extra server settings (`-c name=value`).
    pub fn start_with(settings: &[(&str, &str)]) -> Cluster {
        let bin = find_binaries().unwrap_or_else(|| panic!("{INSTALL_HINT}"));
        let run_as = server_user();
        let root = tempfile::Builder::new()
            .prefix("kasi-pg-")
            .tempdir()
            .expect("create a temporary directory for the cluster");
        prepare_root(root.path(), run_as);
        let cluster = Cluster {
            root,
            bin,
            port: 0,
            run_as,
            running: false,
        };
        cluster.run(
            "initdb",
            &[
                "-D",
                cluster.data_dir().to_str().expect("UTF-8 temporary path"),
                "--no-sync",
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--locale=C",
            ],
        );
        let mut cluster = cluster;
        cluster.start_server(settings);
        cluster
    }

    /// A standby of `primary`: a base backup of it (`pg_basebackup -R`),
    /// streaming from it as `application_name` `name`, started. To make it
    /// synchronous, [`configure`](Cluster::configure) the primary with
    /// `synchronous_standby_names` = `name` and wait until
    /// `pg_stat_replication` says `sync` (see [`Cluster::query`]). Only the
    /// databases that exist at backup time are copied; later ones come by
    /// replication.
    pub fn start_standby_of(primary: &Cluster, name: &str) -> Cluster {
        let root = tempfile::Builder::new()
            .prefix("kasi-pg-standby-")
            .tempdir()
            .expect("create a temporary directory for the standby");
        prepare_root(root.path(), primary.run_as);
        let mut standby = Cluster {
            root,
            bin: primary.bin.clone(),
            port: 0,
            run_as: primary.run_as,
            running: false,
        };
        let port = primary.port.to_string();
        let connection = format!("application_name={name}");
        standby.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                standby.data_dir().to_str().expect("UTF-8 temporary path"),
                "-R",
                "--no-sync",
                // At once, not after a spread checkpoint (a minute or more
                // on an idle cluster).
                "--checkpoint=fast",
                "-X",
                "stream",
                "-d",
                &connection,
            ],
        );
        standby.start_server(&[]);
        standby
    }

    /// `postgres://postgres@127.0.0.1:PORT/DATABASE`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// The server's log file.
    pub fn log_file(&self) -> PathBuf {
        self.root.path().join("server.log")
    }

    /// Creates a database and returns its URL.
    pub fn create_database(&self, name: &str) -> String {
        let port = self.port.to_string();
        self.run(
            "createdb",
            &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", name],
        );
        self.url(name)
    }

    /// Runs `sql` in `database` with `psql` and returns what it printed,
    /// unaligned and without headers (`-At`): one line per row, columns
    /// separated by `|`.
    pub fn query(&self, database: &str, sql: &str) -> String {
        let port = self.port.to_string();
        let args = [
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "-d",
            database,
            "-c",
            sql,
        ];
        self.run("psql", &args)
    }

    /// Stops the server the hard way (like a lost machine: no checkpoint).
    pub fn kill(&mut self) {
        if self.running {
            self.pg_ctl(&["stop", "-m", "immediate", "-w"]);
            self.running = false;
        }
    }

    /// Stops the server cleanly (`pg_ctl stop -m fast`: sessions ended, a
    /// checkpoint written), as an operator's restart does.
    pub fn stop_fast(&mut self) {
        if self.running {
            self.pg_ctl(&["stop", "-m", "fast", "-w"]);
            self.running = false;
        }
    }

    /// Starts the server again after [`Cluster::kill`], on the same port.
    pub fn restart(&mut self) {
        assert!(!self.running, "the server is running");
        self.launch(&[]);
    }

    /// Promotes a standby to a primary and waits until it accepts writes.
    pub fn promote(&self) {
        self.pg_ctl(&["promote", "-w"]);
    }

    /// Appends settings to `postgresql.conf` and reloads the server.
    pub fn configure(&self, settings: &[(&str, &str)]) {
        let path = self.data_dir().join("postgresql.conf");
        let mut conf = fs::read_to_string(&path).expect("read postgresql.conf");
        for (name, value) in settings {
            conf.push_str(&format!("\n{name} = '{value}'\n"));
        }
        fs::write(&path, conf).expect("write postgresql.conf");
        self.pg_ctl(&["reload"]);
    }

    fn start_server(&mut self, settings: &[(&str, &str)]) {
        // A port found free may be taken before the server binds it: try
        // a few.
        let mut last_error = String::new();
        for _ in 0..5 {
            self.port = free_port();
            match self.try_launch(settings) {
                Ok(()) => {
                    self.spawn_watchdog();
                    return;
                }
                Err(error) => last_error = error,
            }
        }
        panic!("cannot start a throw-away PostgreSQL: {last_error}");
    }

    fn launch(&mut self, settings: &[(&str, &str)]) {
        if let Err(error) = self.try_launch(settings) {
            panic!("cannot start PostgreSQL again: {error}");
        }
    }

    fn try_launch(&mut self, settings: &[(&str, &str)]) -> Result<(), String> {
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c shared_buffers=32MB -c max_connections=60 \
             -c fsync=on -c synchronous_commit=on",
            self.port,
            self.root.path().display()
        );
        for (name, value) in settings {
            options.push_str(&format!(" -c {name}={value}"));
        }
        let data = self.data_dir();
        let log = self.log_file();
        let output = self
            .command("pg_ctl")
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(&data)
            .arg("-l")
            .arg(&log)
            .args(["-o", &options])
            .output()
            .map_err(|e| format!("pg_ctl: {e}"))?;
        if output.status.success() {
            self.running = true;
            return Ok(());
        }
        Err(format!(
            "pg_ctl start failed: {}{}\n--- server log ---\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            fs::read_to_string(&log).unwrap_or_default()
        ))
    }

    /// Stops the server and removes the directory if this process dies
    /// without dropping the cluster.
    fn spawn_watchdog(&self) {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             '{pg_ctl}' stop -D '{data}' -m immediate >/dev/null 2>&1; rm -rf '{root}'",
            pid = std::process::id(),
            pg_ctl = self.bin.join("pg_ctl").display(),
            data = self.data_dir().display(),
            root = self.root.path().display(),
        );
        let _ = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
    }

    fn pg_ctl(&self, args: &[&str]) {
        let mut all = args.to_vec();
        let data = self.data_dir();
        all.extend(["-D", data.to_str().expect("UTF-8 temporary path")]);
        self.run("pg_ctl", &all);
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        command.current_dir(self.root.path()).stdin(Stdio::null());
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid);
        }
        command
    }

    /// Runs a server tool, which must succeed; its standard output, trimmed.
    fn run(&self, program: &str, args: &[&str]) -> String {
        let output = self
            .command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        assert!(
            output.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.running {
            let data = self.data_dir();
            let _ = self
                .command("pg_ctl")
                .args(["stop", "-m", "immediate", "-w", "-D"])
                .arg(&data)
                .output();
        }
    }
}

/// `KASI_PG_BIN`, then `PATH`, then Debian's newest `/usr/lib/postgresql/N/bin`.
fn find_binaries() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(dir) = std::env::var_os("KASI_PG_BIN") {
        let dir = PathBuf::from(dir);
        return has_both(&dir).then_some(dir);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_both(&dir) {
                // Resolve Debian's symlinks to the versioned directory,
                // where pg_basebackup and createdb also live.
                let real = fs::canonicalize(dir.join("initdb")).ok();
                let real_dir = real
                    .as_deref()
                    .and_then(Path::parent)
                    .map(Path::to_path_buf);
                return Some(real_dir.filter(|d| has_both(d)).unwrap_or(dir));
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(DEBIAN_BIN_GLOB_ROOT)
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// As root, the `postgres` user's uid and gid; otherwise the server runs as
/// the current user.
fn server_user() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = c"postgres";
    // SAFETY: getpwnam takes a NUL-terminated name and returns a pointer to
    // static storage (or null), read at once before any other call.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        panic!(
            "tests run as root, and PostgreSQL refuses to run as root: create an unprivileged \
             `postgres` user (Debian's postgresql package does), or run the tests as another user"
        );
    }
    // SAFETY: checked non-null above.
    let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
    Some((uid, gid))
}

fn prepare_root(root: &Path, run_as: Option<(u32, u32)>) {
    if let Some((uid, gid)) = run_as {
        std::os::unix::fs::chown(root, Some(uid), Some(gid)).expect("chown the cluster directory");
    }
    fs::set_permissions(root, fs::Permissions::from_mode(0o700)).expect("chmod the cluster dir");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("find a free port on 127.0.0.1")
}
