//! A private `nats-server -js` per test, on a free port with its own store
//! directory, which a test can SIGKILL and restart (its file-stored streams kept),
//! and a client to make streams and read what they hold.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_nats::jetstream;

use super::{free_port, poll_until_blocking};

/// A private JetStream server.
pub struct NatsServer {
    pub port: u16,
    pub dir: tempfile::TempDir,
    /// More lines of its configuration file (e.g. an `authorization` block).
    extra: String,
    child: Option<Child>,
}

impl NatsServer {
    pub fn start() -> NatsServer {
        Self::start_with("")
    }

    /// With more configuration (`max_payload: 2048`, an `authorization { … }` block).
    pub fn start_with(extra: &str) -> NatsServer {
        let mut last = String::new();
        for _ in 0..5 {
            let mut s = NatsServer {
                port: free_port(),
                dir: tempfile::tempdir().expect("tempdir"),
                extra: extra.to_string(),
                child: None,
            };
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => last = e,
            }
        }
        panic!("cannot start nats-server: {last}");
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("nats.log")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let conf = self.dir.path().join("nats.conf");
        let store = self.dir.path().join("js");
        std::fs::write(
            &conf,
            format!(
                "listen: 127.0.0.1:{}\njetstream {{ store_dir: {:?} }}\n{}\n",
                self.port,
                store.display().to_string(),
                self.extra
            ),
        )
        .map_err(|e| e.to_string())?;
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(&conf)
            .arg("-l")
            .arg(self.log())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("nats-server: {e}"))?;
        self.child = Some(child);
        let port = self.port;
        let up = poll_until_blocking(Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        let log = std::fs::read_to_string(self.log()).unwrap_or_default();
        match up {
            Ok(()) if log.contains("Server is ready") => Ok(()),
            Ok(()) => {
                // Listening, but maybe not yet ready: the log says when.
                let log_path = self.log();
                poll_until_blocking(Duration::from_secs(10), || {
                    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                    if log.contains("Server is ready") {
                        Ok(())
                    } else {
                        Err("not ready".to_string())
                    }
                })
            }
            Err(e) => {
                self.kill();
                Err(format!("{e}; log: {log}"))
            }
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, and wait until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start it again on the same port and store directory.
    pub fn restart(&mut self) {
        self.kill();
        // Until the killed server's port is free again.
        if let Err(e) = poll_until_blocking(Duration::from_secs(10), || self.spawn()) {
            panic!("cannot restart nats-server: {e}");
        }
    }

    /// A JetStream context of a client of its own (with `options`' credentials).
    pub async fn jetstream_with(&self, options: async_nats::ConnectOptions) -> jetstream::Context {
        let client = options.connect(self.url()).await.expect("connect to nats");
        jetstream::new(client)
    }

    pub async fn jetstream(&self) -> jetstream::Context {
        self.jetstream_with(async_nats::ConnectOptions::new()).await
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Make the file-stored stream `name` over `subjects`, with a duplicate window.
pub async fn make_stream(
    js: &jetstream::Context,
    name: &str,
    subjects: &[&str],
    duplicate_window: Duration,
) -> jetstream::stream::Stream {
    js.create_stream(jetstream::stream::Config {
        name: name.to_string(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        storage: jetstream::stream::StorageType::File,
        duplicate_window,
        ..Default::default()
    })
    .await
    .expect("create stream")
}

/// Every message the stream holds, in stream order.
pub async fn stream_messages(
    js: &jetstream::Context,
    name: &str,
) -> Vec<jetstream::message::StreamMessage> {
    let mut stream = js.get_stream(name).await.expect("get stream");
    let info = stream.info().await.expect("stream info").clone();
    let mut out = Vec::new();
    for seq in info.state.first_sequence..=info.state.last_sequence {
        if info.state.messages == 0 {
            break;
        }
        if let Ok(m) = stream.get_raw_message(seq).await {
            out.push(m);
        }
    }
    out
}
