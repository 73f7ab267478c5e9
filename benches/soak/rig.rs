//! The processes one store's soak runs: two `hookgate serve` gateways on fixed ports
//! (so a killed one comes back where the load generator and the upstream expect
//! it), and the store behind them: a private `redis-server` (AOF, `appendfsync
//! always`), a private PostgreSQL (the integration tests' harness), or, for the
//! embedded store, a small tmpfs holding each gateway's own database, which a
//! ballast file fills up to below `min_free_bytes` and frees again.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../../tests/it/support/redis.rs"]
mod redis_server;

#[allow(dead_code)]
#[path = "../../tests/it/support/postgres.rs"]
mod postgres_server;

use postgres_server::PostgresServer;
use redis_server::RedisServer;

/// Ports from below the kernel's ephemeral range: a gateway restarted on its port
/// must not find it taken by one of the load's outgoing connections.
#[path = "../../tests/it/support/ports.rs"]
mod ports;

pub use ports::free_port;

/// Call `probe` until it succeeds or `deadline` has passed (then its last error).
pub fn poll_until_blocking<T, E>(
    deadline: Duration,
    mut probe: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let end = Instant::now() + deadline;
    loop {
        match probe() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= end => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Embedded,
    Redis,
    Postgres,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Embedded => "embedded",
            Kind::Redis => "redis",
            Kind::Postgres => "postgres",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        [Kind::Embedded, Kind::Redis, Kind::Postgres]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// Routes every event goes to; the second delivers each key's events in order.
pub const ROUTES: [&str; 2] = ["all", "ordered"];
pub const ORDERED: &str = "ordered";
/// The embedded store refuses new webhooks below this much free disk.
const MIN_FREE: u64 = 16 * 1024 * 1024;
/// The tmpfs the embedded store's databases live on.
const TMPFS_BYTES: u64 = 768 * 1024 * 1024;

pub struct Gateway {
    config: PathBuf,
    log: PathBuf,
    pub ingest_port: u16,
    pub admin_port: u16,
    child: Option<Child>,
}

impl Gateway {
    pub fn ingest(&self) -> String {
        format!("http://127.0.0.1:{}", self.ingest_port)
    }

    pub fn admin(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin_port)
    }

    /// Start it and wait until `/readyz` answers 200 (at most a minute).
    pub fn start(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("open {}: {e}", self.log.display()))?;
        let child = Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .env(
                "HOOKGATE_SERVER__LISTEN",
                format!("127.0.0.1:{}", self.ingest_port),
            )
            .env(
                "HOOKGATE_ADMIN__LISTEN",
                format!("127.0.0.1:{}", self.admin_port),
            )
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("spawn hookgate: {e}"))?;
        self.child = Some(child);
        let addr = format!("127.0.0.1:{}", self.admin_port);
        poll_until_blocking(Duration::from_secs(60), || {
            use std::io::{Read, Write};
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                return Ok(Err(format!("hookgate exited at start: {status}")));
            }
            let mut s = std::net::TcpStream::connect(&addr).map_err(|_| ())?;
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let req = format!("GET /readyz HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
            let _ = s.write_all(req.as_bytes());
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf);
            if buf.starts_with(b"HTTP/1.1 200") {
                Ok(Ok(()))
            } else {
                Err(())
            }
        })
        .map_err(|()| {
            format!(
                "hookgate not ready within a minute (log: {})",
                self.log.display()
            )
        })?
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Exited on its own (it must not).
    pub fn exited(&mut self) -> Option<String> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A tmpfs the soak mounts (root only) and unmounts when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(bytes: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
            .arg("tmpfs")
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            Ok(Tmpfs { dir })
        } else {
            Err("cannot mount a tmpfs (the embedded store's full-disk fault needs root)".into())
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

pub struct Rig {
    pub kind: Kind,
    pub gateways: Vec<Gateway>,
    redis: Option<RedisServer>,
    postgres: Option<PostgresServer>,
    tmpfs: Option<Tmpfs>,
    _dir: tempfile::TempDir,
}

impl Rig {
    /// Start the store and two gateways delivering to the upstream on `upstream`.
    pub fn start(kind: Kind, upstream: u16, logs: &Path) -> Result<Rig, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut rig = Rig {
            kind,
            gateways: Vec::new(),
            redis: None,
            postgres: None,
            tmpfs: None,
            _dir: dir,
        };
        match kind {
            Kind::Embedded => rig.tmpfs = Some(Tmpfs::mount(TMPFS_BYTES)?),
            Kind::Redis => rig.redis = Some(RedisServer::start()),
            Kind::Postgres => rig.postgres = Some(PostgresServer::start()),
        }
        for i in 0..2 {
            let store = match kind {
                Kind::Embedded => {
                    let fs = rig.tmpfs.as_ref().ok_or("no tmpfs")?;
                    format!(
                        "kind = \"embedded\"\npath = \"{}\"\nmin_free_bytes = {MIN_FREE}\n",
                        fs.dir.path().join(format!("gateway-{i}")).display()
                    )
                }
                Kind::Redis => format!(
                    "kind = \"redis\"\nurl = \"{}\"\n",
                    rig.redis.as_ref().ok_or("no redis")?.url()
                ),
                Kind::Postgres => format!(
                    "kind = \"postgres\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
                    rig.postgres.as_ref().ok_or("no postgres")?.url()
                ),
            };
            let config = rig._dir.path().join(format!("gateway-{i}.toml"));
            std::fs::write(&config, config_toml(&store, upstream)).map_err(|e| e.to_string())?;
            let mut gw = Gateway {
                config,
                log: logs.join(format!("gateway-{i}.log")),
                ingest_port: free_port(),
                admin_port: free_port(),
                child: None,
            };
            gw.start()?;
            rig.gateways.push(gw);
        }
        Ok(rig)
    }

    /// SIGKILL the store's server (Redis, PostgreSQL).
    pub fn kill_store(&mut self) {
        if let Some(r) = self.redis.as_mut() {
            r.stop();
        }
        if let Some(p) = self.postgres.as_mut() {
            p.kill_all();
        }
    }

    /// Start the store's server again on its port and data.
    pub fn restart_store(&mut self) {
        if let Some(r) = self.redis.as_mut() {
            r.restart();
        }
        if let Some(p) = self.postgres.as_mut() {
            p.restart();
        }
    }

    /// Fill the embedded store's disk to below `min_free_bytes` (half of it left).
    pub fn fill_disk(&self) -> Result<(), String> {
        let fs = self.tmpfs.as_ref().ok_or("no tmpfs")?;
        let stat = rustix::fs::statvfs(fs.dir.path()).map_err(|e| e.to_string())?;
        let free = stat.f_bavail * stat.f_frsize;
        let fill = free.saturating_sub(MIN_FREE / 2);
        let file = std::fs::File::create(self.ballast()?).map_err(|e| e.to_string())?;
        file.set_len(0).map_err(|e| e.to_string())?;
        // A tmpfs allocates on write, not on set_len: write the ballast.
        use std::io::Write as _;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        let chunk = vec![0x5au8; 1 << 20];
        let mut left = fill;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            if w.write_all(&chunk[..n]).is_err() {
                break;
            }
            left -= n as u64;
        }
        let _ = w.flush();
        Ok(())
    }

    pub fn free_disk(&self) -> Result<(), String> {
        let ballast = self.ballast()?;
        match std::fs::remove_file(&ballast) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("remove {}: {e}", ballast.display())),
        }
    }

    fn ballast(&self) -> Result<PathBuf, String> {
        Ok(self
            .tmpfs
            .as_ref()
            .ok_or("no tmpfs")?
            .dir
            .path()
            .join("ballast"))
    }
}

/// One gateway's configuration: a Stripe source with two routes on the upstream,
/// the second ordered by the Stripe object id; short timeouts, leases and backoff
/// so that a few minutes hold many faults and their recoveries; a retry budget no
/// weather exhausts.
fn config_toml(store: &str, upstream: u16) -> String {
    format!(
        r#"
[admin]
replay_rate = 500

[forwarder]
lease = "4s"
poll_interval = "200ms"
breaker_failures = 8
breaker_cooldown = "1s"
maintenance_interval = "2s"

[store]
{store}
[[sources]]
name = "stripe"
provider = "stripe"
secret = "{secret}"

[sources.retry]
max_attempts = 1000
max_age = "2h"
base = "100ms"
cap = "2s"

[sources.delivery]
timeout = "1s"
connect_timeout = "1s"
concurrency = 8

[[sources.routes]]
name = "all"
destination = "http://127.0.0.1:{upstream}/all"

[[sources.routes]]
name = "ordered"
destination = "http://127.0.0.1:{upstream}/ordered"
[sources.routes.order]
by = "provider"
on_dead = "block"
"#,
        secret = crate::load::SECRET,
    )
}
