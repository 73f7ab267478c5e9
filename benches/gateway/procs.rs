//! The processes a scenario runs: the bare-hyper baseline (this binary
//! re-executed), `hookgate serve`, and a private `redis-server` or PostgreSQL
//! server; each is stopped when its handle is dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::SECRET;

/// The baseline: a bare hyper server that reads the body and answers 200, with the
/// gateway's runtime settings.
pub fn baseline_server(port: u16) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async move {
                        let _ = req.into_body().collect().await;
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::from_static(b"{\"ok\":true}"),
                        )))
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

fn wait_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "port {port} never opened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub struct Proc {
    pub child: Child,
    pub port: u16,
    pub admin: u16,
}

impl Proc {
    /// Peak resident set size (VmHWM) in MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
            .map(|kb| kb / 1024.0)
            .unwrap_or(0.0)
    }
}

impl Proc {
    /// CPU time the process has used so far (user and system, every thread), in
    /// seconds: what a phase costs, read before and after it, steadier than its wall
    /// time on a host that other work shares.
    pub fn cpu_secs(&self) -> f64 {
        stat_cpu_secs(&format!("/proc/{}/stat", self.child.id()))
    }

    /// CPU time the process's threads named `thread` have used so far, in seconds
    /// (the embedded store's writer is `hg-sqlite-write`).
    pub fn thread_cpu_secs(&self, thread: &str) -> f64 {
        let tasks = format!("/proc/{}/task", self.child.id());
        std::fs::read_dir(&tasks)
            .map(|dir| {
                dir.flatten()
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim() == thread)
                    })
                    .map(|t| stat_cpu_secs(&t.path().join("stat").to_string_lossy()))
                    .sum()
            })
            .unwrap_or(0.0)
    }
}

/// The user and system time in a `/proc/.../stat` file, in seconds (fields 14 and
/// 15, after the parenthesised command name); 0 when unreadable.
fn stat_cpu_secs(path: &str) -> f64 {
    let ticks = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.to_string();
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?)
        })
        .unwrap_or(0.0);
    // SAFETY: sysconf only reads a system constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz.max(1.0)
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_baseline() -> Proc {
    start_helper("HOOKGATE_BENCH_BASELINE")
}

/// This binary re-executed with `role` set to a free port: the baseline
/// (`HOOKGATE_BENCH_BASELINE`) or the sink process (`HOOKGATE_BENCH_SINK`).
pub fn start_helper(role: &str) -> Proc {
    let port = free_port();
    let child = Command::new(std::env::current_exe().expect("exe"))
        .env(role, port.to_string())
        .stdout(Stdio::null())
        .spawn()
        .expect("baseline");
    wait_port(port);
    Proc {
        child,
        port,
        admin: 0,
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Store {
    Embedded,
    Redis,
    /// A private PostgreSQL server (`fsync` and `synchronous_commit` on).
    Postgres,
    /// The same with a synchronous standby on the same host: every commit waits
    /// until the standby has it on disk.
    PostgresStandby,
}

impl Store {
    pub fn is_postgres(self) -> bool {
        matches!(self, Store::Postgres | Store::PostgresStandby)
    }

    pub fn name(self) -> &'static str {
        match self {
            Store::Embedded => "embedded",
            Store::Redis => "redis",
            Store::Postgres => "postgres",
            Store::PostgresStandby => "postgres with a synchronous standby",
        }
    }
}

/// A private PostgreSQL server, and its synchronous standby when asked for.
pub struct Postgres {
    pub primary: crate::pgserver::PostgresServer,
    _standby: Option<crate::pgserver::PostgresServer>,
}

impl Postgres {
    /// The pids of every process of the primary (and standby): what their CPU is
    /// read from.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = self.primary.pids();
        pids.extend(self._standby.iter().flat_map(|s| s.pids()));
        pids
    }
}

pub fn start_postgres(standby: bool) -> Postgres {
    let primary = crate::pgserver::PostgresServer::start();
    let standby = standby.then(|| {
        let s = primary.start_standby();
        primary.require_sync_standby();
        s
    });
    Postgres {
        primary,
        _standby: standby,
    }
}

pub struct Redis {
    pub child: Child,
    port: u16,
    /// Its Unix socket, which the gateway uses instead of TCP when
    /// `HOOKGATE_BENCH_REDIS_UNIX` is set (Redis on the gateway's own host).
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Redis {
    /// `INFO commandstats`: (command, calls, µs of Redis CPU) per command or script.
    pub fn command_stats(&self) -> Vec<(String, u64, u64)> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "INFO", "commandstats"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        out.lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let field = |k: &str| -> Option<u64> {
                    rest.split(',')
                        .find_map(|kv| kv.strip_prefix(k))
                        .and_then(|v| v.parse().ok())
                };
                Some((name.to_string(), field("calls=")?, field("usec=")?))
            })
            .collect()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_redis() -> Redis {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    // The Redis settings that deploy/ ships (AOF `appendfsync always`, rewrites, …),
    // on a private port and directory.
    let conf = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/redis.conf");
    let socket = dir.path().join("redis.sock");
    let child = Command::new("redis-server")
        .arg(conf)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        // Extra redis-server arguments, for diagnosis (e.g. what AOF rewrites cost:
        // `HOOKGATE_BENCH_REDIS_ARGS="--auto-aof-rewrite-percentage 0"`).
        .args(
            std::env::var("HOOKGATE_BENCH_REDIS_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .arg("--unixsocket")
        .arg(&socket)
        .args(["--unixsocketperm", "700"])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (apt-get install redis-server)");
    wait_port(port);
    Redis {
        child,
        port,
        socket,
        _dir: dir,
    }
}

/// Start `hookgate serve` with `store`, one source `bench` delivering to `sink`;
/// `global` holds top-level tables, `source_extra` the source's own
/// (`[sources.retry]`, `[sources.delivery]`).
pub fn start_gateway(
    dir: &Path,
    store: &str,
    sink: &str,
    global: &str,
    source_extra: &str,
) -> Proc {
    start_gateway_with(dir, store, sink, global, source_extra, None)
}

/// [`start_gateway`] running the gateway binary `bin` when given (another build:
/// the `traces` scenario's build from before traces), else the one every scenario
/// runs (`HOOKGATE_BENCH_BIN`, or this build's).
pub fn start_gateway_with(
    dir: &Path,
    store: &str,
    sink: &str,
    global: &str,
    source_extra: &str,
    bin: Option<&Path>,
) -> Proc {
    let port = free_port();
    let admin = free_port();
    let cfg = dir.join("hookgate.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n{store}\n{global}\n\
             [[sources]]\nname = \"bench\"\nprovider = \"stripe\"\nsecret = \"{SECRET}\"\n\
             {destination}{source_extra}\n",
            // No sink: the source's routes (in `source_extra`) name their destinations.
            destination = if sink.is_empty() {
                String::new()
            } else {
                format!("destination = \"{sink}\"\n")
            },
        ),
    )
    .expect("config");
    run_gateway(&cfg, bin, (port, admin), &[])
}

/// `hookgate serve --config cfg` (the build `bin`, else [`gateway_bin`]) with more
/// environment `env`, once its listeners (`ports`: ingest, admin) accept.
pub fn run_gateway(
    cfg: &Path,
    bin: Option<&Path>,
    (port, admin): (u16, u16),
    env: &[(&str, &str)],
) -> Proc {
    let bin = bin
        .map(|b| b.as_os_str().to_owned())
        .unwrap_or_else(gateway_bin);
    let child = Command::new(bin)
        .arg("serve")
        .arg("--config")
        .arg(cfg)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("hookgate");
    wait_port(admin);
    wait_port(port);
    Proc { child, port, admin }
}

/// The gateway every scenario runs: `HOOKGATE_BENCH_BIN` (another build: an A/B of
/// two builds alternating in one session), else this build's.
pub fn gateway_bin() -> std::ffi::OsString {
    std::env::var_os("HOOKGATE_BENCH_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_hookgate").into())
}

pub fn store_toml(
    store: Store,
    dir: &Path,
    redis: Option<&Redis>,
    pg: Option<&Postgres>,
) -> String {
    match store {
        Store::Postgres | Store::PostgresStandby => format!(
            "[store]\nkind = \"postgres\"\nurl = \"{}\"\n",
            pg.expect("postgres").primary.url()
        ),
        Store::Embedded => format!(
            "[store]\nkind = \"embedded\"\npath = \"{}\"\n",
            dir.join("data").display()
        ),
        Store::Redis if std::env::var_os("HOOKGATE_BENCH_REDIS_UNIX").is_some() => format!(
            "[store]\nkind = \"redis\"\nurl = \"redis+unix://{}\"\n",
            redis.expect("redis").socket.display()
        ),
        Store::Redis => format!(
            "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:{}\"\n",
            redis.expect("redis").port
        ),
    }
}
