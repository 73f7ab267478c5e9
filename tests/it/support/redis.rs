//! A private redis-server per test, on its own port and directory, which a test can
//! stop, freeze and restart to show what the gateway does when its store goes away.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, poll_until_blocking};

/// A private redis-server on a free port ([`free_port`]) with its own directory, so a test can
/// stop and restart it.
pub struct RedisServer {
    pub port: u16,
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    persistent: bool,
    /// More `redis-server` arguments (e.g. `--maxmemory-policy allkeys-lru`).
    extra: Vec<String>,
}

impl RedisServer {
    /// AOF with `appendfsync always`: what the durability promise requires.
    pub fn start() -> RedisServer {
        Self::start_with(true)
    }

    /// `persistent = false`: no AOF and no RDB (a restart comes back empty).
    pub fn start_with(persistent: bool) -> RedisServer {
        Self::start_with_args(persistent, &[])
    }

    /// As [`RedisServer::start_with`], with more `redis-server` arguments.
    pub fn start_with_args(persistent: bool, extra: &[&str]) -> RedisServer {
        let mut last_err = String::new();
        for _ in 0..5 {
            let mut s = RedisServer {
                port: free_port(),
                dir: tempfile::tempdir().expect("tempdir"),
                child: None,
                persistent,
                extra: extra.iter().map(|a| a.to_string()).collect(),
            };
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => last_err = e,
            }
        }
        panic!("cannot start redis-server: {last_err}");
    }

    /// A replica of the Redis on `master_port` (`--replicaof`), persistent as
    /// [`RedisServer::start`] is. It answers PING at once; whether it is in sync is
    /// the master's to say (`INFO replication`). A [`RedisServer::restart`] makes it
    /// a replica again, even after a `REPLICAOF NO ONE`.
    pub fn start_replica_of(master_port: u16, extra: &[&str]) -> RedisServer {
        let port = master_port.to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", port.as_str()];
        args.extend_from_slice(extra);
        Self::start_with_args(true, &args)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--save")
            .arg("")
            .arg("--daemonize")
            .arg("no")
            .arg("--protected-mode")
            .arg("no")
            .arg("--unixsocket")
            .arg(self.socket())
            .arg("--unixsocketperm")
            .arg("700");
        if self.persistent {
            // As deploy/redis.conf ships it: entries stay compact listpacks. The
            // servers without persistence keep Redis's default (hash tables), so the
            // tests cover both encodings.
            cmd.arg("--appendonly")
                .arg("yes")
                .arg("--appendfsync")
                .arg("always")
                .arg("--hash-max-ziplist-value")
                .arg("16384");
        } else {
            cmd.arg("--appendonly").arg("no");
        }
        cmd.args(&self.extra);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let child = cmd.spawn().map_err(|e| {
            format!("cannot run redis-server ({e}); install it with `apt-get install redis-server`")
        })?;
        self.child = Some(child);
        let port = self.port;
        let exited = poll_until_blocking(Duration::from_secs(10), || {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                return Ok(Some(status));
            }
            if redis_ping(port) { Ok(None) } else { Err(()) }
        });
        match exited {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!("redis-server exited: {status}")),
            Err(()) => Err("redis-server did not answer PING within 10 s".into()),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The same server through its Unix socket.
    pub fn unix_url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// Stop it (SIGKILL: nothing is flushed beyond what AOF already fsynced).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Its process id while it runs (for `kill -STOP`).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Start it again on the same port and directory.
    pub fn restart(&mut self) {
        self.stop();
        if let Err(e) = poll_until_blocking(Duration::from_secs(10), || self.spawn()) {
            panic!("redis restart failed: {e}");
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(super) fn redis_ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}
