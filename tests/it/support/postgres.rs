//! A private PostgreSQL server per test: its own data directory (`initdb` in a temp
//! dir), a free port, and its socket in that directory, never the machine's shared
//! server. PostgreSQL refuses to run as root, so when the suite runs as root the
//! server's commands run as the unprivileged `postgres` user (`setpriv`, which
//! execs the program itself: the server is our child, with no process between that
//! job control could stop), which owns the data directory. A test can SIGKILL, freeze and restart it, as it does Redis.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, poll_until_blocking};

/// The unprivileged user the server runs as when the suite runs as root.
const SERVER_USER: &str = "postgres";

/// The directory of PostgreSQL's server programs (`initdb`, `postgres`,
/// `pg_basebackup`): Debian keeps them out of `PATH`, under
/// `/usr/lib/postgresql/<version>/bin`; elsewhere they are on `PATH`.
pub fn postgres_bin_dir() -> PathBuf {
    let debian = Path::new("/usr/lib/postgresql");
    let newest = std::fs::read_dir(debian).ok().and_then(|dirs| {
        dirs.flatten()
            .filter_map(|d| {
                let version: u32 = d.file_name().to_str()?.parse().ok()?;
                let bin = d.path().join("bin");
                bin.join("initdb").exists().then_some((version, bin))
            })
            .max_by_key(|(v, _)| *v)
            .map(|(_, bin)| bin)
    });
    newest.unwrap_or_else(|| {
        let which = Command::new("sh")
            .args(["-c", "command -v initdb"])
            .output()
            .expect("sh");
        let path = String::from_utf8_lossy(&which.stdout).trim().to_string();
        assert!(
            !path.is_empty(),
            "PostgreSQL's initdb is missing: install it with `apt-get install -y postgresql` (.ci/run does)"
        );
        Path::new(&path)
            .parent()
            .expect("initdb has a directory")
            .to_path_buf()
    })
}

fn running_as_root() -> bool {
    // SAFETY: geteuid only reads the process's effective user id.
    unsafe { libc::geteuid() == 0 }
}

/// A command for one of PostgreSQL's programs, run as [`SERVER_USER`] when the
/// suite runs as root (PostgreSQL refuses root).
fn server_command(program: &str) -> Command {
    let path = postgres_bin_dir().join(program);
    if running_as_root() {
        let mut c = Command::new("setpriv");
        c.args([
            &format!("--reuid={SERVER_USER}"),
            &format!("--regid={SERVER_USER}"),
            "--init-groups",
            "--",
        ])
        .arg(path)
        // The server's user cannot read root's working directory.
        .current_dir("/");
        c
    } else {
        Command::new(path)
    }
}

/// A private PostgreSQL server on a free port ([`free_port`]) with its own data
/// directory; the database `hookgate` exists, and user `hookgate` owns it (trust
/// authentication: the server listens on loopback and its own socket only).
pub struct PostgresServer {
    pub port: u16,
    /// Holds the data directory (`data/`) and the server's socket.
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// More server settings (`-c name=value`), after hookgate's own (they win).
    settings: Vec<String>,
}

impl PostgresServer {
    /// `initdb`, start, and create the `hookgate` user and database. `fsync` stays on
    /// and `synchronous_commit` at its default (`on`): what the durability promise
    /// requires.
    pub fn start() -> PostgresServer {
        Self::start_in(None, &[])
    }

    /// [`PostgresServer::start`] with the server's directory (data and socket) inside
    /// `parent` (a small filesystem a test mounted) instead of the system's temp dir.
    /// With `settings` (`name=value`) given to the server.
    pub fn start_in(parent: Option<&Path>, settings: &[&str]) -> PostgresServer {
        let dir = server_dir(parent);
        let data = dir.path().join("data");
        let out = server_command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale"])
            .stdout(Stdio::null())
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s = Self::serve(dir, settings);
        s.create_database();
        s
    }

    /// A streaming standby of this server: `pg_basebackup -R` (it writes
    /// `standby.signal` and the primary's address), started on a port of its own. It
    /// becomes synchronous once the primary lists it ([`PostgresServer::require_sync_standby`]).
    pub fn start_standby(&self) -> PostgresServer {
        let dir = server_dir(None);
        let out = server_command("pg_basebackup")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["-R", "-X", "stream", "-c", "fast"])
            .output()
            .expect("run pg_basebackup");
        assert!(
            out.status.success(),
            "pg_basebackup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self::serve(dir, &[])
    }

    /// Make every commit wait until a standby has it on disk
    /// (`synchronous_standby_names = '*'`, `synchronous_commit = on`), in this
    /// server's own settings (a standby copied before keeps none of it), and wait
    /// until one streams as `sync`.
    pub fn require_sync_standby(&self) {
        let (ok, out) = self.psql("ALTER SYSTEM SET synchronous_standby_names = '*'");
        assert!(ok, "{out}");
        let (ok, out) = self.psql("SELECT pg_reload_conf()");
        assert!(ok, "{out}");
        poll_until_blocking(Duration::from_secs(20), || {
            let (ok, out) = self.psql("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'");
            match ok && out.trim() == "1" {
                true => Ok(()),
                false => Err(()),
            }
        })
        .expect("a synchronous standby streams");
    }

    /// Promote this standby to a primary, and wait until it takes writes.
    pub fn promote(&self) {
        let (ok, out) = self.psql("SELECT pg_promote(true, 30)");
        assert!(ok && out.trim() == "t", "promote: {out}");
    }

    /// Start the server in `dir` (its `data` initialized) on a free port.
    fn serve(dir: tempfile::TempDir, settings: &[&str]) -> PostgresServer {
        let settings = settings.iter().map(|s| s.to_string()).collect();
        let mut s = PostgresServer {
            port: 0,
            dir,
            child: None,
            settings,
        };
        let mut last_err = String::new();
        for _ in 0..5 {
            s.port = free_port();
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => last_err = e,
            }
        }
        panic!("cannot start postgres: {last_err}");
    }

    /// The postmaster and every process it started (backends, the WAL writer, …).
    pub fn pids(&self) -> Vec<u32> {
        let Some(pm) = postmaster_pid(&self.data_dir()) else {
            return Vec::new();
        };
        let children = Command::new("pgrep")
            .args(["-P", &pm.to_string()])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        let mut pids = vec![pm];
        pids.extend(
            children
                .lines()
                .filter_map(|l| l.trim().parse::<u32>().ok()),
        );
        pids
    }

    fn signal_all(&self, sig: &str) {
        for pid in self.pids() {
            let _ = Command::new("kill")
                .args([&format!("-{sig}"), &pid.to_string()])
                .status();
        }
    }

    /// SIGSTOP every process of the server: a machine that stops answering.
    pub fn freeze(&self) {
        // The postmaster first: it starts no process while the others are stopped.
        if let Some(pm) = postmaster_pid(&self.data_dir()) {
            let _ = Command::new("kill")
                .args(["-STOP", &pm.to_string()])
                .status();
        }
        self.signal_all("STOP");
    }

    /// SIGCONT every process of the server.
    pub fn thaw(&self) {
        self.signal_all("CONT");
    }

    /// SIGKILL every process of the server at once, as the death of its machine
    /// would end them (the postmaster alone would leave its backends running).
    pub fn kill_all(&mut self) {
        self.freeze();
        self.signal_all("KILL");
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start the server again on its port and data directory (crash recovery runs).
    pub fn restart(&mut self) {
        self.spawn().expect("restart postgres");
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `postgres://hookgate@127.0.0.1:PORT/hookgate`.
    pub fn url(&self) -> String {
        format!("postgres://hookgate@127.0.0.1:{}/hookgate", self.port)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = server_command("postgres");
        cmd.arg("-D")
            .arg(self.data_dir())
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.dir.path().display()
            ))
            .args(["-c", "fsync=on", "-c", "max_connections=200"])
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().map_err(|e| format!("spawn postgres: {e}"))?;
        self.child = Some(child);
        let port = self.port;
        let up =
            poll_until_blocking(Duration::from_secs(20), || {
                match std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && self.accepts() {
                    true => Ok(()),
                    false => Err(()),
                }
            });
        if up.is_ok() {
            Ok(())
        } else {
            self.kill();
            Err(format!(
                "postgres did not accept connections on port {port}"
            ))
        }
    }

    /// Whether the server accepts a session (not only the TCP connection).
    fn accepts(&self) -> bool {
        server_command("pg_isready")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn create_database(&self) {
        for sql in [
            "CREATE ROLE hookgate LOGIN",
            "CREATE DATABASE hookgate OWNER hookgate",
        ] {
            let out = self.psql(sql);
            assert!(out.0, "{sql}: {}", out.1);
        }
    }

    /// Run `sql` as the superuser through `psql`: (success, output).
    pub fn psql(&self, sql: &str) -> (bool, String) {
        self.psql_in("postgres", sql)
    }

    /// Run `sql` as the superuser in database `db`: (success, output).
    pub fn psql_in(&self, db: &str, sql: &str) -> (bool, String) {
        let out = Command::new(postgres_bin_dir().join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-d", db, "-tAc", sql])
            .output();
        match out {
            Ok(o) => (
                o.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ),
            ),
            Err(e) => (false, e.to_string()),
        }
    }

    /// SIGKILL the server (its children, the backends, go with it once the
    /// postmaster is gone), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = postmaster_pid(&self.data_dir()).unwrap_or(c.id());
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The server every per-store test of this run shares (each test in a schema of its
/// own: [`fresh_schema`]), started at the first call. A process watches the test
/// run and stops the server, and removes its directory, when the run ends (a
/// static is never dropped).
pub fn shared() -> &'static PostgresServer {
    static SHARED: std::sync::OnceLock<PostgresServer> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| {
        let s = PostgresServer::start();
        let pid = postmaster_pid(&s.data_dir()).expect("the postmaster's pid");
        let watchdog = format!(
            "while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill -KILL {pid}; sleep 1; rm -rf '{dir}'",
            parent = std::process::id(),
            dir = s.dir.path().display(),
        );
        // In the background of a shell that exits at once: nothing to wait for.
        Command::new("sh")
            .args(["-c", &format!("({watchdog}) >/dev/null 2>&1 &")])
            .stdin(Stdio::null())
            .status()
            .expect("start the shared server's watchdog");
        s
    })
}

/// A schema name no other test of this run uses (`store.prefix` of a PostgreSQL
/// store): tests share [`shared`] without seeing each other's data.
pub fn fresh_schema() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "t{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Some(c) = &self.child {
            // A fast shutdown: the backends end with the postmaster.
            let pid = postmaster_pid(&self.data_dir()).unwrap_or(c.id());
            let _ = Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status();
            let pid_file = self.data_dir().join("postmaster.pid");
            let gone = poll_until_blocking(Duration::from_secs(10), || match pid_file.exists() {
                true => Err(()),
                false => Ok(()),
            });
            if gone.is_err() {
                self.kill();
            }
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }
}

/// A directory for a server (its data and socket), owned by the server's user when
/// the suite runs as root.
fn server_dir(parent: Option<&Path>) -> tempfile::TempDir {
    let mut b = tempfile::Builder::new();
    b.prefix("hookgate-pg-");
    let dir = match parent {
        Some(p) => b.tempdir_in(p),
        None => b.tempdir(),
    }
    .expect("tempdir");
    if running_as_root() {
        // The server's user must reach and own its directory.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod the server's directory");
        let owned = Command::new("chown")
            .arg(format!("{SERVER_USER}:"))
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(
            owned.success(),
            "cannot give the server's directory to {SERVER_USER}"
        );
    }
    dir
}

/// The postmaster's pid, from the first line of `postmaster.pid`.
fn postmaster_pid(data: &Path) -> Option<u32> {
    std::fs::read_to_string(data.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}
