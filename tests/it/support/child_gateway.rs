//! The gateway as a child process, for what only a process shows: SIGKILL and
//! SIGTERM, its exit status, what it logs to stderr, refusals at start-up.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use super::{free_port, poll_until_blocking};

/// The path of the hookgate binary built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hookgate"))
}

/// Run `hookgate serve` on `config_path`, which it must refuse: wait (at most 20 s)
/// until it exits, and answer its exit status and what it wrote to stderr. Panics,
/// saying it `kept_running` (e.g. "on an allkeys-lru redis"), if it does not exit.
pub fn serve_until_it_exits(config_path: &Path, kept_running: &str) -> (ExitStatus, String) {
    let mut child = Command::new(bin())
        .arg("serve")
        .arg("--config")
        .arg(config_path)
        .env(
            "HOOKGATE_SERVER__LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env(
            "HOOKGATE_ADMIN__LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hookgate");
    let exited = poll_until_blocking(Duration::from_secs(20), || {
        child.try_wait().expect("wait").ok_or(())
    });
    let Ok(status) = exited else {
        let _ = child.kill();
        panic!("hookgate serve kept running {kept_running}");
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    (status, stderr)
}

/// The gateway as a child process (for SIGKILL and log capture).
pub struct ChildGateway {
    pub child: Child,
    pub ingest: String,
    pub admin: String,
    pub stderr_path: PathBuf,
}

impl ChildGateway {
    pub fn spawn(config_path: &Path, env: &[(&str, &str)], stderr_path: &Path) -> ChildGateway {
        Self::spawn_with(config_path, env, stderr_path, |_| {})
    }

    /// As [`ChildGateway::spawn`], with a last say on the command (e.g. its umask).
    pub fn spawn_with(
        config_path: &Path,
        env: &[(&str, &str)],
        stderr_path: &Path,
        customize: impl FnOnce(&mut Command),
    ) -> ChildGateway {
        Self::spawn_answering(config_path, env, stderr_path, customize, b"HTTP/1.1 200")
    }

    /// As [`ChildGateway::spawn`], waiting only until `/readyz` answers, whatever it
    /// says (a gateway whose store refuses writes from the start).
    pub fn spawn_unready(
        config_path: &Path,
        env: &[(&str, &str)],
        stderr_path: &Path,
    ) -> ChildGateway {
        Self::spawn_answering(config_path, env, stderr_path, |_| {}, b"HTTP/1.1 ")
    }

    /// Start `hookgate serve` and wait until `/readyz` answers with a status line
    /// starting with `answer`.
    fn spawn_answering(
        config_path: &Path,
        env: &[(&str, &str)],
        stderr_path: &Path,
        customize: impl FnOnce(&mut Command),
        answer: &[u8],
    ) -> ChildGateway {
        let ingest_port = free_port();
        let admin_port = free_port();
        let stderr = std::fs::File::create(stderr_path).unwrap();
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .arg("--config")
            .arg(config_path)
            .env(
                "HOOKGATE_SERVER__LISTEN",
                format!("127.0.0.1:{ingest_port}"),
            )
            .env("HOOKGATE_ADMIN__LISTEN", format!("127.0.0.1:{admin_port}"))
            .stdout(Stdio::null())
            .stderr(stderr);
        for (k, v) in env {
            cmd.env(k, v);
        }
        customize(&mut cmd);
        let child = cmd.spawn().expect("spawn hookgate");
        let gw = ChildGateway {
            child,
            ingest: format!("http://127.0.0.1:{ingest_port}"),
            admin: format!("http://127.0.0.1:{admin_port}"),
            stderr_path: stderr_path.to_path_buf(),
        };
        gw.wait_ready(answer);
        gw
    }

    /// Wait until `/readyz` answers with a status line starting with `answer`.
    fn wait_ready(&self, answer: &[u8]) {
        let addr = self.admin.trim_start_matches("http://").to_string();
        let ready = poll_until_blocking(Duration::from_secs(20), || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(&addr).map_err(|_| ())?;
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            // A loopback Host: without an admin token, the listener refuses others.
            let req = format!("GET /readyz HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
            let _ = s.write_all(req.as_bytes());
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf);
            if buf.starts_with(answer) {
                Ok(())
            } else {
                Err(())
            }
        });
        if ready.is_err() {
            let log = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
            panic!("child gateway not ready within 20 s; its log:\n{log}");
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn terminate(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for ChildGateway {
    fn drop(&mut self) {
        self.kill();
    }
}
