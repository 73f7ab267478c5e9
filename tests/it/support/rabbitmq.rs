//! A private RabbitMQ node per test: its own node name, AMQP and distribution ports,
//! Erlang cookie, epmd, data (mnesia) and log directories, all in a temp dir, never
//! the machine's shared broker (port 5672, node `rabbit@localhost`, settings in
//! `/etc/rabbitmq`, cookie in `/var/lib/rabbitmq`). When the suite runs as root the
//! node runs as the unprivileged `rabbitmq` user (`setpriv`, which execs the
//! program), which owns the directory. A test can SIGKILL the broker and start it
//! again on the same ports and data, to show what a crash keeps.
//!
//! The recipe, found by hand (Debian's rabbitmq-server 3.10, Erlang/OTP 25):
//!
//! - The scripts under `/usr/lib/rabbitmq/bin`, not Debian's wrappers in `/usr/sbin`:
//!   those `su` to `rabbitmq` (which resets `HOME`, so the shared cookie would be
//!   used), `cd` to `/var/lib/rabbitmq` and send the server's output to
//!   `/var/log/rabbitmq/startup_log`.
//! - `RABBITMQ_CONF_ENV_FILE` names an empty file of ours: the default,
//!   `/etc/rabbitmq/rabbitmq-env.conf`, sets `NODENAME=rabbit@localhost`. The
//!   environment is cleared, so nothing of the suite's (`ERL_FLAGS`, `RABBITMQ_*`)
//!   reaches the node either.
//! - `HOME` is the temp dir, which holds a cookie of the node's own
//!   (`.erlang.cookie`, mode 0400): the node and `rabbitmqctl` both read it there.
//! - An epmd of its own (`epmd -port P -address 127.0.0.1`, our child, in the
//!   foreground), listening before the node starts and stopped after it;
//!   `ERL_EPMD_PORT` points the node and `rabbitmqctl` at it. Without it the node
//!   registers with the shared epmd on 4369; and the node, or `rabbitmqctl`, that
//!   finds no epmd on its port starts a daemonized one, which no one would stop.
//! - `RABBITMQ_ALLOW_INPUT=true` (with `-noinput` as the server's argument, so no
//!   Erlang shell runs): the script then execs `erl`, which execs `beam.smp`, instead
//!   of running it behind a shell that traps signals. The child is the broker: its
//!   pid is `beam.smp`'s, and SIGKILL to it is a crash.
//! - `RABBITMQ_CTL_DIST_PORT_MIN=0` and `..._MAX=0`: each `rabbitmqctl` listens on an
//!   ephemeral port of the kernel's, not in 35672–35682, the eleven ports every
//!   `rabbitmqctl` on the machine shares by default (parallel tests would run out).
//! - Loopback only: the AMQP listener (`RABBITMQ_NODE_IP_ADDRESS` and the config
//!   file), distribution and `rabbitmqctl`'s node (`inet_dist_use_interface`), epmd.
//!
//! A first start takes about 5.5 s on a 2-core machine (two at once about 6 s), a
//! restart on existing data about 2.7 s. A port another process took makes the node
//! exit within a few seconds (`eaddrinuse` in its output): [`RabbitMq::start`]
//! starts over on other ports.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{free_port, poll_until_blocking, wait_until_blocking};

/// The unprivileged user the node and its epmd run as when the suite runs as root.
const SERVER_USER: &str = "rabbitmq";

/// How long a start may take before it counts as failed (a start takes a few
/// seconds; parallel tests on a small machine make it slower).
const START_DEADLINE: Duration = Duration::from_secs(60);

/// Where Debian keeps RabbitMQ's real scripts (its `/usr/sbin` ones are wrappers
/// that must not be used: see the module's doc).
const DEBIAN_BIN: &str = "/usr/lib/rabbitmq/bin";

/// A private RabbitMQ node on free ports ([`free_port`]) with its own epmd and
/// directory; `guest`/`guest` may connect, from loopback only (RabbitMQ's default).
pub struct RabbitMq {
    port: u16,
    dist_port: u16,
    epmd_port: u16,
    /// The node's `HOME`: cookie, config files, `mnesia/`, `log/`, and the server's
    /// and epmd's output (`server.out`, `epmd.out`).
    dir: tempfile::TempDir,
    /// `beam.smp` itself (the scripts exec it), while it runs.
    server: Option<Child>,
    epmd: Option<Child>,
}

impl RabbitMq {
    /// Start a node and wait until it is ready: its AMQP port takes connections and
    /// `rabbitmqctl await_startup` succeeds. Starts over on other ports (and a new
    /// directory) a few times when one was taken; panics with the logs' tails when
    /// it cannot start.
    pub fn start() -> RabbitMq {
        let mut last_err = String::new();
        for _ in 0..4 {
            let mut node = RabbitMq {
                port: free_port(),
                dist_port: free_port(),
                epmd_port: free_port(),
                dir: node_dir(),
                server: None,
                epmd: None,
            };
            node.write_config();
            match node.spawn_epmd().and_then(|()| node.spawn_server()) {
                Ok(()) => return node,
                Err(e) => last_err = e,
            }
        }
        panic!("cannot start rabbitmq-server: {last_err}");
    }

    /// The AMQP port (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `amqp://127.0.0.1:PORT/%2F`: the default vhost, as `guest` (clients' default
    /// user), which RabbitMQ admits from loopback.
    pub fn url(&self) -> String {
        format!("amqp://127.0.0.1:{}/%2F", self.port)
    }

    /// The default vhost as `user` with `password` (both URL-safe: they are not
    /// escaped); see [`RabbitMq::add_user`].
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!("amqp://{user}:{password}@127.0.0.1:{}/%2F", self.port)
    }

    /// The node's name, `hg<port>@localhost`.
    pub fn node(&self) -> String {
        format!("hg{}@localhost", self.port)
    }

    /// The broker's OS process (`beam.smp`) while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(|c| c.id())
    }

    /// The node's directory (its `HOME`, data and logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// SIGKILL the broker, as a crash would (nothing is flushed beyond what it had
    /// written), and wait until its AMQP port is closed. Its epmd stays, for
    /// [`RabbitMq::restart`].
    pub fn kill(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let port = self.port;
        wait_until_blocking(
            "the killed broker's AMQP port to close",
            Duration::from_secs(10),
            || !port_open(port),
        );
    }

    /// Start the broker again on the same node name, ports and data (SIGKILLing it
    /// first if it still runs); durable queues and persistent messages it had
    /// written come back. Waits until it is ready, as [`RabbitMq::start`] does.
    pub fn restart(&mut self) {
        if self.server.is_some() {
            self.kill();
        }
        let epmd_alive = self
            .epmd
            .as_mut()
            .is_some_and(|e| matches!(e.try_wait(), Ok(None)));
        if !epmd_alive && let Err(e) = self.spawn_epmd() {
            panic!("rabbitmq restart: {e}");
        }
        let mut last_err = String::new();
        for _ in 0..3 {
            match self.spawn_server() {
                Ok(()) => return,
                Err(e) => last_err = e,
            }
        }
        panic!("rabbitmq restart failed: {last_err}");
    }

    /// Run `rabbitmqctl -n <node> ARGS` against this node (its cookie, epmd and
    /// name): (success, stdout), with stderr after stdout when it fails. `-q` and
    /// `--no-table-headers` leave only the rows of a listing. `rabbitmqctl` cannot
    /// declare exchanges, queues or bindings: a test declares them over AMQP.
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        // Finding no epmd on its port, rabbitmqctl would start a daemonized one,
        // which no one would stop.
        if !port_open(self.epmd_port) {
            return (
                false,
                format!("its epmd (port {}) is not running", self.epmd_port),
            );
        }
        let out = self
            .command(&rabbitmq_bin("rabbitmqctl"), false)
            .arg("-n")
            .arg(self.node())
            .args(args)
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => (true, String::from_utf8_lossy(&o.stdout).into()),
            Ok(o) => (
                false,
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ),
            ),
            Err(e) => (false, format!("cannot run rabbitmqctl: {e}")),
        }
    }

    /// The queues of the default vhost and how many messages each holds (ready and
    /// unacknowledged), from `rabbitmqctl list_queues name messages`.
    pub fn queues(&self) -> Vec<(String, u64)> {
        let (ok, out) = self.ctl(&[
            "-q",
            "--no-table-headers",
            "list_queues",
            "name",
            "messages",
        ]);
        assert!(ok, "rabbitmqctl list_queues: {out}");
        out.lines()
            .filter_map(|l| {
                let (name, n) = l.rsplit_once('\t')?;
                Some((name.to_string(), n.trim().parse().ok()?))
            })
            .collect()
    }

    /// How many messages queue `name` holds (ready and unacknowledged); `None`
    /// when it does not exist.
    pub fn queue_messages(&self, name: &str) -> Option<u64> {
        self.queues()
            .into_iter()
            .find_map(|(q, n)| (q == name).then_some(n))
    }

    /// Add `user` with `password` and every permission (configure, write, read) on
    /// the default vhost; unlike `guest`, it may connect from anywhere.
    pub fn add_user(&self, user: &str, password: &str) {
        let (ok, out) = self.ctl(&["-q", "add_user", user, password]);
        assert!(ok, "rabbitmqctl add_user {user}: {out}");
        let (ok, out) = self.ctl(&["-q", "set_permissions", "-p", "/", user, ".*", ".*", ".*"]);
        assert!(ok, "rabbitmqctl set_permissions {user}: {out}");
    }

    /// The last lines of the server's output and of the node's log, for a failure
    /// message.
    pub fn log_tail(&self) -> String {
        let node_log = self
            .dir
            .path()
            .join("log")
            .join(format!("{}.log", self.node()));
        format!(
            "--- server output ---\n{}\n--- {} ---\n{}",
            tail(&self.dir.path().join("server.out"), 30),
            node_log.display(),
            tail(&node_log, 30)
        )
    }

    /// The node's config: its listener on loopback, no plugins, an empty
    /// `rabbitmq-env.conf` (instead of `/etc/rabbitmq`'s), its own cookie.
    fn write_config(&self) {
        let d = self.dir.path();
        for sub in ["mnesia", "log"] {
            std::fs::create_dir(d.join(sub)).expect("create the node's directories");
        }
        // The same listener as `RABBITMQ_NODE_IP_ADDRESS`/`RABBITMQ_NODE_PORT` set. The
        // disk alarm (50 MB free by default) would block publishers when the machine's
        // disk runs low: not what a test of the gateway is about.
        let conf = format!(
            "listeners.tcp.1 = 127.0.0.1:{}\nloopback_users.guest = true\ndisk_free_limit.absolute = 1MB\n",
            self.port
        );
        std::fs::write(d.join("rabbitmq.conf"), conf).expect("write rabbitmq.conf");
        std::fs::write(d.join("enabled_plugins"), "[].\n").expect("write enabled_plugins");
        std::fs::write(d.join("rabbitmq-env.conf"), "").expect("write rabbitmq-env.conf");
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|t| t.as_nanos())
            .unwrap_or_default();
        let cookie = d.join(".erlang.cookie");
        let cookie_text = format!("HOOKGATE{:X}{:X}{}", nanos, std::process::id(), self.port);
        std::fs::write(&cookie, cookie_text).expect("write the cookie");
        // Erlang refuses a cookie others can read.
        std::fs::set_permissions(&cookie, std::fs::Permissions::from_mode(0o400))
            .expect("chmod the cookie");
        if running_as_root() {
            let owned = Command::new("chown")
                .arg("-R")
                .arg(format!("{SERVER_USER}:{SERVER_USER}"))
                .arg(d)
                .status()
                .expect("chown");
            assert!(
                owned.success(),
                "cannot give the node's directory to {SERVER_USER} (is rabbitmq-server installed?)"
            );
        }
    }

    /// The node's epmd, in the foreground, listening before this returns.
    fn spawn_epmd(&mut self) -> Result<(), String> {
        let out_path = self.dir.path().join("epmd.out");
        let out = output_file(&out_path)?;
        let mut cmd = self.command(Path::new("epmd"), true);
        cmd.arg("-port")
            .arg(self.epmd_port.to_string())
            .args(["-address", "127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot run epmd ({e}); it comes with erlang-base"))?;
        self.epmd = Some(child);
        let port = self.epmd_port;
        let up = poll_until_blocking(Duration::from_secs(10), || {
            if let Some(c) = self.epmd.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                return Ok(Some(status));
            }
            if port_open(port) { Ok(None) } else { Err(()) }
        });
        match up {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                self.epmd = None;
                Err(format!(
                    "epmd on port {port} exited ({status}): {}",
                    tail(&out_path, 10)
                ))
            }
            Err(()) => Err(format!("epmd did not listen on port {port} within 10 s")),
        }
    }

    /// Start the broker and wait until it is ready ([`RabbitMq::start`]); on failure
    /// it is stopped, and the error holds the logs' tails.
    fn spawn_server(&mut self) -> Result<(), String> {
        let out = output_file(&self.dir.path().join("server.out"))?;
        let mut cmd = self.command(&rabbitmq_bin("rabbitmq-server"), true);
        cmd.arg("-noinput")
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out);
        let child = cmd.spawn().map_err(|e| {
            format!("cannot run rabbitmq-server ({e}); install it with `apt-get install rabbitmq-server`")
        })?;
        self.server = Some(child);
        let port = self.port;
        let ready =
            poll_until_blocking(START_DEADLINE, || -> Result<Option<ExitStatus>, String> {
                if let Some(c) = self.server.as_mut()
                    && let Ok(Some(status)) = c.try_wait()
                {
                    return Ok(Some(status));
                }
                if !port_open(port) {
                    return Err("its AMQP port is closed".into());
                }
                // The port could be another process's (a collision): ask the node itself.
                match self.ctl(&["-q", "await_startup", "--timeout", "30"]) {
                    (true, _) => Ok(None),
                    (false, out) => Err(format!("await_startup: {out}")),
                }
            });
        match ready {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                self.server = None;
                Err(format!(
                    "rabbitmq-server {} (ports {}, {}, {}) exited ({status})\n{}",
                    self.node(),
                    self.port,
                    self.dist_port,
                    self.epmd_port,
                    self.log_tail()
                ))
            }
            Err(last) => {
                if let Some(mut c) = self.server.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                Err(format!(
                    "rabbitmq-server {} not ready within {START_DEADLINE:?}: {last}\n{}",
                    self.node(),
                    self.log_tail()
                ))
            }
        }
    }

    /// `program` in the node's environment (and nothing else of the suite's), run as
    /// [`SERVER_USER`] when `as_server` and the suite runs as root.
    fn command(&self, program: &Path, as_server: bool) -> Command {
        let d = self.dir.path();
        let mut c = if as_server && running_as_root() {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={SERVER_USER}"),
                &format!("--regid={SERVER_USER}"),
                "--init-groups",
                "--",
            ])
            .arg(program);
            c
        } else {
            Command::new(program)
        };
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into());
        let loopback = "-kernel inet_dist_use_interface {127,0,0,1}";
        c.env_clear()
            .env("PATH", path)
            .env("HOME", d)
            .env("LANG", "C.UTF-8")
            .env("LC_ALL", "C.UTF-8")
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("ERL_CRASH_DUMP", d.join("erl_crash.dump"))
            .env("RABBITMQ_CONF_ENV_FILE", d.join("rabbitmq-env.conf"))
            .env("RABBITMQ_NODENAME", self.node())
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", d.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", d.join("log"))
            .env("RABBITMQ_CONFIG_FILE", d.join("rabbitmq.conf"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", d.join("advanced.config"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d.join("enabled_plugins"))
            .env("RABBITMQ_ALLOW_INPUT", "true")
            .env("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", loopback)
            .env("RABBITMQ_CTL_ERL_ARGS", loopback)
            .env("RABBITMQ_CTL_DIST_PORT_MIN", "0")
            .env("RABBITMQ_CTL_DIST_PORT_MAX", "0")
            // The server's user cannot read root's working directory.
            .current_dir(d);
        c
    }
}

impl Drop for RabbitMq {
    fn drop(&mut self) {
        // The broker, then the epmd it registered with.
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(mut e) = self.epmd.take() {
            let _ = e.kill();
            let _ = e.wait();
        }
    }
}

fn running_as_root() -> bool {
    // SAFETY: geteuid only reads the process's effective user id.
    unsafe { libc::geteuid() == 0 }
}

/// One of RabbitMQ's scripts: Debian's real ones under [`DEBIAN_BIN`], elsewhere on
/// `PATH`.
fn rabbitmq_bin(program: &str) -> PathBuf {
    let debian = Path::new(DEBIAN_BIN).join(program);
    if debian.exists() {
        debian
    } else {
        PathBuf::from(program)
    }
}

/// A temp dir for a node, owned by [`SERVER_USER`] (once its files are written) when
/// the suite runs as root, whom it must let in.
fn node_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("hookgate-rmq-")
        .tempdir()
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod the node's directory");
    dir
}

/// `path`, opened for appending (a restart's output follows the first start's).
fn output_file(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("open {}: {e}", path.display()))
}

fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )
    .is_ok()
}

/// The last `n` lines of the file at `path` (or why there are none).
fn tail(path: &Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}
