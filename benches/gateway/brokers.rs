//! The brokers of the queue scenarios ([`crate::queues`]): a private `nats-server
//! -js` (a temp store directory, a free port) and a private RabbitMQ node (its own
//! node name, ports, Erlang cookie, epmd and directories, run as the `rabbitmq`
//! user when the bench runs as root), never the machine's shared services on the
//! default ports; each stopped by its pid when its handle is dropped. The recipe
//! for the RabbitMQ node is `tests/it/support/rabbitmq.rs`'s (its module
//! documentation says why each setting is there).
//!
//! [`Brokers`] holds one of each for the whole bench run (a RabbitMQ node takes
//! about 6 s to start), and a client of the bench's own on each: the stream
//! `BENCH` (file storage, over `hooks.>`, duplicate window 2 min) and the durable
//! queues `bench-quorum` (a quorum queue) and `bench-classic` (a classic queue) on
//! the default exchange, which a scenario purges before each run and counts during
//! it.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use lapin::options::{ConfirmSelectOptions, QueueDeclareOptions, QueuePurgeOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties};

use crate::procs::free_port;

/// The stream the JetStream routes publish into, and its subjects.
pub const STREAM: &str = "BENCH";
/// The subject of the JetStream routes (`hooks.>` is the stream's).
pub const SUBJECT: &str = "hooks.bench";

/// Which RabbitMQ queue a route publishes into (on the default exchange, its name
/// the routing key).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum QueueKind {
    /// A quorum queue (one member here): a confirm comes once the message is in its
    /// Raft log on disk.
    Quorum,
    /// A classic durable queue: a persistent message is confirmed once written to
    /// the message store.
    Classic,
}

impl QueueKind {
    pub fn name(self) -> &'static str {
        match self {
            QueueKind::Quorum => "bench-quorum",
            QueueKind::Classic => "bench-classic",
        }
    }

    /// `HOOKGATE_BENCH_AMQP_QUEUE=classic` picks the classic queue; the quorum
    /// queue otherwise.
    pub fn chosen() -> QueueKind {
        match std::env::var("HOOKGATE_BENCH_AMQP_QUEUE").as_deref() {
            Ok("classic") => QueueKind::Classic,
            _ => QueueKind::Quorum,
        }
    }
}

/// Both brokers and the bench's clients on them.
pub struct Brokers {
    pub js: jetstream::Context,
    /// The bench's connection and a channel in confirm mode (the publishes of the
    /// brokers' own figures), and one for the counts and purges.
    _amqp: Connection,
    pub amqp_publish: Channel,
    amqp_admin: Channel,
    // (The servers last: the clients are dropped first.)
    pub nats: NatsServer,
    pub rabbit: RabbitMq,
}

impl Brokers {
    /// Start both (each on free ports), make the stream and the queues.
    pub async fn start() -> Brokers {
        let t = Instant::now();
        let nats = tokio::task::spawn_blocking(NatsServer::start)
            .await
            .expect("nats");
        let rabbit = tokio::task::spawn_blocking(RabbitMq::start)
            .await
            .expect("rabbitmq");
        let client = async_nats::connect(nats.url()).await.expect("nats client");
        let js = jetstream::new(client);
        js.create_stream(jetstream::stream::Config {
            name: STREAM.to_string(),
            subjects: vec!["hooks.>".to_string()],
            storage: jetstream::stream::StorageType::File,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .expect("create the stream");
        let amqp = Connection::connect(&rabbit.url(), ConnectionProperties::default())
            .await
            .expect("amqp client");
        let amqp_admin = amqp.create_channel().await.expect("channel");
        for kind in [QueueKind::Quorum, QueueKind::Classic] {
            let mut args = FieldTable::default();
            if kind == QueueKind::Quorum {
                args.insert(
                    "x-queue-type".into(),
                    AMQPValue::LongString("quorum".into()),
                );
            }
            amqp_admin
                .queue_declare(
                    kind.name().into(),
                    QueueDeclareOptions {
                        durable: true,
                        ..QueueDeclareOptions::default()
                    },
                    args,
                )
                .await
                .expect("declare the queue");
        }
        let amqp_publish = amqp.create_channel().await.expect("channel");
        amqp_publish
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        println!(
            "  brokers: nats-server on port {} (pid {}), RabbitMQ node {} (pid {}), up in {:.1} s",
            nats.port,
            nats.pid(),
            rabbit.node(),
            rabbit.pid(),
            t.elapsed().as_secs_f64()
        );
        Brokers {
            js,
            _amqp: amqp,
            amqp_publish,
            amqp_admin,
            nats,
            rabbit,
        }
    }

    /// The JetStream destination of a route: the stream's subject on this server.
    pub fn nats_destination(&self) -> String {
        format!("{}/{SUBJECT}", self.nats.url())
    }

    /// The RabbitMQ destination of a route: queue `kind` on the default exchange.
    pub fn amqp_destination(&self, kind: QueueKind) -> String {
        format!("{}?routing_key={}", self.rabbit.url(), kind.name())
    }

    /// How many messages the stream holds.
    pub async fn stream_messages(&self) -> u64 {
        let mut stream = self.js.get_stream(STREAM).await.expect("get the stream");
        stream.info().await.expect("stream info").state.messages
    }

    /// How many messages queue `kind` holds (ready: nothing consumes them).
    pub async fn queue_messages(&self, kind: QueueKind) -> u64 {
        let q = self
            .amqp_admin
            .queue_declare(
                kind.name().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("queue count");
        u64::from(q.message_count())
    }

    /// Empty the stream and both queues.
    pub async fn purge(&self) {
        let stream = self.js.get_stream(STREAM).await.expect("get the stream");
        stream.purge().await.expect("purge the stream");
        for kind in [QueueKind::Quorum, QueueKind::Classic] {
            self.amqp_admin
                .queue_purge(kind.name().into(), QueuePurgeOptions::default())
                .await
                .expect("purge the queue");
        }
    }
}

/// Poll `probe` until it succeeds or `deadline` passes: its last answer.
fn poll<T, E>(deadline: Duration, mut probe: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    let end = Instant::now() + deadline;
    loop {
        match probe() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= end => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )
    .is_ok()
}

/// A private `nats-server -js`.
pub struct NatsServer {
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    /// On a free port with a store directory of its own; ready when its log says so
    /// (started over on another port a few times when one was taken).
    pub fn start() -> NatsServer {
        let mut last = String::new();
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("tempdir");
            let port = free_port();
            let conf = dir.path().join("nats.conf");
            let log = dir.path().join("nats.log");
            std::fs::write(
                &conf,
                format!(
                    "listen: 127.0.0.1:{port}\njetstream {{ store_dir: {:?} }}\n",
                    dir.path().join("js").display().to_string()
                ),
            )
            .expect("nats.conf");
            let mut child = Command::new("nats-server")
                .arg("-c")
                .arg(&conf)
                .arg("-l")
                .arg(&log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nats-server (apt-get install nats-server)");
            let ready = poll(Duration::from_secs(15), || {
                if let Ok(Some(status)) = child.try_wait() {
                    return Ok(Some(status));
                }
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if port_open(port) && text.contains("Server is ready") {
                    Ok(None)
                } else {
                    Err(())
                }
            });
            match ready {
                Ok(None) => {
                    return NatsServer {
                        port,
                        child,
                        _dir: dir,
                    };
                }
                Ok(Some(status)) => {
                    last = format!(
                        "exited ({status}): {}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    )
                }
                Err(()) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    last = "not ready within 15 s".into();
                }
            }
        }
        panic!("cannot start nats-server: {last}");
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The unprivileged user the node and its epmd run as when the bench runs as root.
const SERVER_USER: &str = "rabbitmq";

/// Where Debian keeps RabbitMQ's real scripts (not its `/usr/sbin` wrappers, which
/// `su` to `rabbitmq` and use the shared cookie).
const DEBIAN_BIN: &str = "/usr/lib/rabbitmq/bin";

/// A private RabbitMQ node; `guest`/`guest` may connect from loopback.
pub struct RabbitMq {
    port: u16,
    dist_port: u16,
    epmd_port: u16,
    dir: tempfile::TempDir,
    /// `beam.smp` itself (the scripts exec it).
    server: Option<Child>,
    epmd: Option<Child>,
}

impl RabbitMq {
    /// Start a node and wait until `rabbitmqctl await_startup` says it is ready;
    /// on other ports a few times when one was taken.
    pub fn start() -> RabbitMq {
        let mut last = String::new();
        for _ in 0..4 {
            let dir = tempfile::Builder::new()
                .prefix("hookgate-bench-rmq-")
                .tempdir()
                .expect("tempdir");
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
                .expect("chmod the node's directory");
            let mut node = RabbitMq {
                port: free_port(),
                dist_port: free_port(),
                epmd_port: free_port(),
                dir,
                server: None,
                epmd: None,
            };
            node.write_config();
            match node.spawn_epmd().and_then(|()| node.spawn_server()) {
                Ok(()) => return node,
                Err(e) => last = e,
            }
        }
        panic!("cannot start rabbitmq-server: {last}");
    }

    /// `amqp://127.0.0.1:PORT/%2F`: the default vhost, as `guest`.
    pub fn url(&self) -> String {
        format!("amqp://127.0.0.1:{}/%2F", self.port)
    }

    pub fn node(&self) -> String {
        format!("hgbench{}@localhost", self.port)
    }

    /// `beam.smp`'s pid.
    pub fn pid(&self) -> u32 {
        self.server.as_ref().map_or(0, Child::id)
    }

    fn write_config(&self) {
        let d = self.dir.path();
        for sub in ["mnesia", "log"] {
            std::fs::create_dir(d.join(sub)).expect("the node's directories");
        }
        // The disk alarm (50 MB free by default) would block publishers when the
        // machine's disk runs low: not what the benchmark measures.
        std::fs::write(
            d.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.1 = 127.0.0.1:{}\nloopback_users.guest = true\ndisk_free_limit.absolute = 1MB\n",
                self.port
            ),
        )
        .expect("rabbitmq.conf");
        std::fs::write(d.join("enabled_plugins"), "[].\n").expect("enabled_plugins");
        std::fs::write(d.join("rabbitmq-env.conf"), "").expect("rabbitmq-env.conf");
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|t| t.as_nanos())
            .unwrap_or_default();
        let cookie = d.join(".erlang.cookie");
        std::fs::write(
            &cookie,
            format!("HGBENCH{nanos:X}{:X}{}", std::process::id(), self.port),
        )
        .expect("the cookie");
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

    fn spawn_epmd(&mut self) -> Result<(), String> {
        let out =
            std::fs::File::create(self.dir.path().join("epmd.out")).map_err(|e| e.to_string())?;
        let child = self
            .command(Path::new("epmd"), true)
            .arg("-port")
            .arg(self.epmd_port.to_string())
            .args(["-address", "127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out)
            .spawn()
            .map_err(|e| format!("cannot run epmd ({e})"))?;
        self.epmd = Some(child);
        let port = self.epmd_port;
        poll(Duration::from_secs(10), || {
            if port_open(port) { Ok(()) } else { Err(()) }
        })
        .map_err(|()| format!("epmd did not listen on port {port}"))
    }

    fn spawn_server(&mut self) -> Result<(), String> {
        let out =
            std::fs::File::create(self.dir.path().join("server.out")).map_err(|e| e.to_string())?;
        let child = self
            .command(&rabbitmq_bin("rabbitmq-server"), true)
            .arg("-noinput")
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out)
            .spawn()
            .map_err(|e| {
                format!("cannot run rabbitmq-server ({e}): apt-get install rabbitmq-server")
            })?;
        self.server = Some(child);
        let port = self.port;
        let ready = poll(Duration::from_secs(60), || -> Result<bool, String> {
            if let Some(c) = self.server.as_mut()
                && let Ok(Some(_)) = c.try_wait()
            {
                return Ok(false);
            }
            if !port_open(port) {
                return Err("its AMQP port is closed".into());
            }
            match self.ctl(&["-q", "await_startup", "--timeout", "30"]) {
                (true, _) => Ok(true),
                (false, out) => Err(format!("await_startup: {out}")),
            }
        });
        let tail =
            || std::fs::read_to_string(self.dir.path().join("server.out")).unwrap_or_default();
        match ready {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.server = None;
                Err(format!("rabbitmq-server exited: {}", tail()))
            }
            Err(e) => {
                if let Some(mut c) = self.server.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                Err(format!("rabbitmq-server not ready: {e}\n{}", tail()))
            }
        }
    }

    /// `rabbitmqctl -n <node> ARGS`: (success, output).
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        if !port_open(self.epmd_port) {
            return (false, "its epmd is not running".into());
        }
        match self
            .command(&rabbitmq_bin("rabbitmqctl"), false)
            .arg("-n")
            .arg(self.node())
            .args(args)
            .stdin(Stdio::null())
            .output()
        {
            Ok(o) => (
                o.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ),
            ),
            Err(e) => (false, format!("cannot run rabbitmqctl: {e}")),
        }
    }

    /// `program` in the node's environment only, as [`SERVER_USER`] when
    /// `as_server` and the bench runs as root.
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
            .current_dir(d);
        c
    }
}

impl Drop for RabbitMq {
    fn drop(&mut self) {
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

fn rabbitmq_bin(program: &str) -> PathBuf {
    let debian = Path::new(DEBIAN_BIN).join(program);
    if debian.exists() {
        debian
    } else {
        PathBuf::from(program)
    }
}
