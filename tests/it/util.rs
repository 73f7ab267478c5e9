//! Test harness: a private redis-server per test, the real gateway on ephemeral
//! ports (in-process or as a child process), and signing helpers.

#![allow(dead_code)]

use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use hookgate::config::{self, Config, Secret};
use hookgate::provider::Registry;
use hookgate::provider::sign::{SignInput, sign};
use hookgate::store::{self, Entry, ListQuery, ListedEntry, Page, Status, Store};
use tokio_util::sync::CancellationToken;

/// How often the waits below look at their condition again.
pub const POLL: Duration = Duration::from_millis(25);

/// Look at `probe` every [`POLL`] until it answers `Ok`, for at most `deadline`; after
/// that, its last `Err` (what it saw instead). The probe runs at least once, and once
/// more at or after the deadline.
pub async fn poll_until<T, E>(
    deadline: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, E>,
) -> Result<T, E> {
    let end = Instant::now() + deadline;
    loop {
        match probe().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= end => return Err(e),
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Wait until `cond` holds (looked at every [`POLL`]); panic naming `what` once
/// `deadline` has passed without it.
pub async fn wait_until(what: &str, deadline: Duration, mut cond: impl AsyncFnMut() -> bool) {
    let got = poll_until(
        deadline,
        async || if cond().await { Ok(()) } else { Err(()) },
    )
    .await;
    assert!(
        got.is_ok(),
        "timed out after {deadline:?} waiting for {what}"
    );
}

/// As [`wait_until`], for a probe that returns what it waited for, or what it saw
/// instead (shown in the panic).
pub async fn wait_until_ok<T, E: std::fmt::Display>(
    what: &str,
    deadline: Duration,
    probe: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    poll_until(deadline, probe).await.unwrap_or_else(|last| {
        panic!("timed out after {deadline:?} waiting for {what}; last seen: {last}")
    })
}

/// [`poll_until`] for code that runs outside the runtime (child processes, servers).
pub fn poll_until_blocking<T, E>(
    deadline: Duration,
    mut probe: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let end = Instant::now() + deadline;
    loop {
        match probe() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= end => return Err(e),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// [`wait_until`] for code that runs outside the runtime.
pub fn wait_until_blocking(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let got = poll_until_blocking(deadline, || if cond() { Ok(()) } else { Err(()) });
    assert!(
        got.is_ok(),
        "timed out after {deadline:?} waiting for {what}"
    );
}

/// The longest window [`quiet_for`] accepts.
pub const QUIET_MAX: Duration = Duration::from_secs(2);

/// Assert that something does not happen: `still` (say, "the destination has seen one
/// request") holds throughout `window`, looked at every [`POLL`] and once more at its
/// end. Panics naming `what` the moment it stops holding.
///
/// This is the one place the suite waits a fixed time, and it does so only to show an
/// absence. That something happens is waited for ([`wait_until`]); that it does not
/// cannot be observed, only bounded: a wrong attempt, delivery or alert would show up
/// within some time, and the window is that time. So the caller derives it from the
/// configuration under test ([`quiet_window`]: a few forwarder poll intervals; a
/// breaker's cooldown) rather than picking a number. The window is at most
/// [`QUIET_MAX`] (2 s, refused above): long enough for anything the configurations
/// here would do, short enough that a fixed wait cannot stand in for synchronization.
pub async fn quiet_for(what: &str, window: Duration, mut still: impl AsyncFnMut() -> bool) {
    assert!(
        window <= QUIET_MAX,
        "quiet_for({what}): a {window:?} window is above the {QUIET_MAX:?} bound"
    );
    let start = Instant::now();
    loop {
        let last = start.elapsed() >= window;
        assert!(
            still().await,
            "{what}: broken {:?} into a {window:?} quiet window",
            start.elapsed()
        );
        if last {
            return;
        }
        tokio::time::sleep(POLL.min(window.saturating_sub(start.elapsed()))).await;
    }
}

/// Ten forwarder poll intervals of `cfg`: the [`quiet_for`] window after which a
/// forwarder that would act (claim, retry, deliver) has acted, since it looks for due
/// work at least once per interval.
pub fn quiet_window(cfg: &Config) -> Duration {
    cfg.forwarder.poll_interval * 10
}

/// The store backends every store-facing test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Embedded,
    Redis,
}

/// A free TCP port on loopback for a child server (redis-server, a child gateway,
/// chromedriver) to bind after this returns.
///
/// A port from `bind(0)` is in the kernel's ephemeral range: between its release here
/// and the child's bind, a parallel test's `bind(0)` or outgoing connection can be
/// handed it, and the child fails with "address in use". So ports come from below
/// that range, each at most once per test process (a counter, started at an offset
/// from the pid so two test processes start apart), checked free by a bind. Cluster
/// nodes also bind the port plus 10,000 for their bus, which stays below the range
/// too. Where the range starts too low for that, it falls back to `bind(0)`.
pub fn free_port() -> u16 {
    const LOW: u32 = 12_000;
    const SPAN: u32 = 10_000;
    const BUS_OFFSET: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    if ephemeral_range_start() >= LOW + SPAN + BUS_OFFSET {
        let seed = std::process::id() % SPAN;
        for _ in 0..SPAN {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = (LOW + (seed + n) % SPAN) as u16;
            if StdListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`); 0 where
/// it cannot be read, which makes [`free_port`] fall back to `bind(0)`.
fn ephemeral_range_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

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

fn redis_ping(port: u16) -> bool {
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

/// Whatever keeps a backend alive for the duration of a test.
pub struct StoreHandle {
    pub backend: Backend,
    pub redis: Option<RedisServer>,
    pub dir: tempfile::TempDir,
}

impl StoreHandle {
    pub fn new(backend: Backend) -> StoreHandle {
        StoreHandle {
            backend,
            redis: (backend == Backend::Redis).then(RedisServer::start),
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// The `[store]` section for this backend.
    pub fn toml(&self) -> String {
        match &self.redis {
            Some(r) => format!(
                "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
                r.url()
            ),
            None => format!(
                "[store]\nkind = \"embedded\"\npath = \"{}\"\n",
                self.dir.path().join("data").display()
            ),
        }
    }

    pub async fn open(&self) -> Arc<dyn Store> {
        let cfg = config::from_toml_str(&self.toml(), &|_| None).expect("store config");
        store::open(&cfg.store, &hookgate::clock::Clock::system())
            .await
            .expect("open store")
    }

    pub fn redis_mut(&mut self) -> &mut RedisServer {
        self.redis.as_mut().expect("a redis backend")
    }
}

/// Open a fresh store of `backend`, run `body` on it, and close it: the frame of every
/// test that needs nothing but a store (see [`both_fresh_stores!`]).
pub async fn on_a_fresh_store(backend: Backend, body: impl AsyncFnOnce(&dyn Store)) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
    body(&*store).await;
    store.close().await;
}

/// The first page of `store`'s listing of the entries with `status`, up to `limit`.
pub async fn first_page_with_status(store: &dyn Store, status: Status, limit: usize) -> Page {
    let query = ListQuery {
        status: Some(status),
        limit,
        ..Default::default()
    };
    store.list(&query).await.expect("list by status")
}

/// The first page of `store`'s listing of the entries of `source`, up to `limit`.
pub async fn first_page_of_source(store: &dyn Store, source: &str, limit: usize) -> Page {
    let query = ListQuery {
        source: Some(source.into()),
        limit,
        ..Default::default()
    };
    store.list(&query).await.expect("list by source")
}

/// Assert that each of `listed` is its stored entry as a listing shows it: the
/// entry minus headers and body.
pub async fn assert_listed_as_stored(store: &dyn Store, listed: &[ListedEntry]) {
    for e in listed {
        let full = store
            .get(&e.id)
            .await
            .expect("get a listed entry")
            .unwrap_or_else(|| panic!("listed entry {} is not stored", e.id));
        assert_eq!(
            *e,
            full.listed(),
            "a listed entry is its entry minus headers and body"
        );
    }
}

/// The stored entry an ingest answer (`{"id": …}`) names.
pub async fn answered_entry(store: &dyn Store, answer: &serde_json::Value) -> Entry {
    let id = answer["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no entry id in {answer}"));
    store
        .get(id)
        .await
        .expect("get the entry")
        .unwrap_or_else(|| panic!("{id} is not stored"))
}

/// Secrets used by [`sources_toml`].
pub const STRIPE_SECRET: &str = "whsec_test_secret";
pub const GITHUB_SECRET: &str = "It's a Secret to Everybody";
pub const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
pub const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const SHOPIFY_SECRET: &str = "shpss_0123456789abcdef";
pub const HMAC_SECRET: &str = "generic-secret";

/// One source per built-in provider, named after it, plus `rotated` (GitHub with two
/// secrets) and `paused`.
pub fn sources_toml() -> String {
    format!(
        r#"
[[sources]]
name = "stripe"
provider = "stripe"
secret = "{STRIPE_SECRET}"
destination = "http://127.0.0.1:9/stripe"

[[sources]]
name = "github"
provider = "github"
secret = "{GITHUB_SECRET}"
destination = "http://127.0.0.1:9/github"

[[sources]]
name = "slack"
provider = "slack"
secret = "{SLACK_SECRET}"
destination = "http://127.0.0.1:9/slack"

[[sources]]
name = "standard-webhooks"
provider = "standard-webhooks"
secret = "{SW_SECRET}"
destination = "http://127.0.0.1:9/sw"

[[sources]]
name = "shopify"
provider = "shopify"
secret = "{SHOPIFY_SECRET}"
destination = "http://127.0.0.1:9/shopify"

[[sources]]
name = "hmac"
provider = "hmac"
secret = "{HMAC_SECRET}"
destination = "http://127.0.0.1:9/hmac"

[[sources]]
name = "rotated"
provider = "github"
secrets = ["new-secret-2026", "{GITHUB_SECRET}"]
destination = "http://127.0.0.1:9/rotated"

[[sources]]
name = "paused"
provider = "hmac"
secret = "{HMAC_SECRET}"
destination = "http://127.0.0.1:9/paused"
"#
    )
}

pub fn secret_for(source: &str) -> &'static str {
    match source {
        "stripe" => STRIPE_SECRET,
        "github" | "rotated" => GITHUB_SECRET,
        "slack" => SLACK_SECRET,
        "standard-webhooks" => SW_SECRET,
        "shopify" => SHOPIFY_SECRET,
        _ => HMAC_SECRET,
    }
}

pub fn provider_for(source: &str) -> &'static str {
    match source {
        "stripe" => "stripe",
        "github" | "rotated" => "github",
        "slack" => "slack",
        "standard-webhooks" => "standard-webhooks",
        "shopify" => "shopify",
        _ => "hmac",
    }
}

pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The headers `provider` sends for `body`, signed with `secret` at `ts`.
pub fn sign_headers(
    provider: &str,
    secret: &str,
    body: &[u8],
    ts: i64,
    id: &str,
) -> Vec<(String, String)> {
    let reg = Registry::builtin().unwrap();
    let spec = reg.get(provider).unwrap();
    sign(
        spec,
        &Secret::new(secret),
        &SignInput {
            body,
            timestamp: ts,
            id,
            event_type: Some("test.event"),
            method: "POST",
            path: "/",
            url: None,
        },
    )
    .unwrap()
    .headers
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

/// A body with a unique event id for each provider's id location.
pub fn event_body(source: &str, id: &str) -> Vec<u8> {
    match provider_for(source) {
        "stripe" => format!(
            r#"{{"id":"{id}","object":"event","type":"payment_intent.succeeded","data":{{"object":{{"amount":2000}}}}}}"#
        ),
        "slack" => format!(
            r#"{{"type":"event_callback","event_id":"{id}","event":{{"type":"app_mention","text":"hi"}}}}"#
        ),
        _ => format!(r#"{{"id":"{id}","type":"thing.happened","n":1}}"#),
    }
    .into_bytes()
}

/// Held by the tests that time the gateway against a bound (answers within the store
/// timeout, one source's ingest against another's) and by the tests that load the
/// machine most, so that no two of them run at once: on two cores one's load moves
/// the other's timings, which neither measures.
pub static TIMED_ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The gateway running in this process on ephemeral ports.
pub struct Gateway {
    pub ingest: String,
    pub admin: String,
    /// The probe listener's URL, when the configuration sets `admin.probe_listen`.
    pub probes: Option<String>,
    pub shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Gateway {
    pub async fn start(cfg: Config) -> Gateway {
        let ingest = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let probes = match cfg.admin.probe_listen {
            Some(_) => Some(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()),
            None => None,
        };
        let ingest_url = format!("http://{}", ingest.local_addr().unwrap());
        let admin_url = format!("http://{}", admin.local_addr().unwrap());
        let probes_url = probes
            .as_ref()
            .map(|p| format!("http://{}", p.local_addr().unwrap()));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(hookgate::app::run(
            cfg,
            hookgate::app::Listeners {
                ingest,
                admin,
                probes,
            },
            shutdown.clone(),
        ));
        let gw = Gateway {
            ingest: ingest_url,
            admin: admin_url,
            probes: probes_url,
            shutdown,
            task: Some(task),
        };
        gw.wait_ready().await;
        gw
    }

    pub async fn wait_ready(&self) {
        let client = crate::util::http();
        let url = format!("{}/readyz", self.admin);
        wait_until(
            "the gateway to be ready",
            Duration::from_secs(15),
            async || {
                client
                    .get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200)
            },
        )
        .await;
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A config for `handle`'s store with the standard sources, plus `extra` TOML.
pub fn config(handle: &StoreHandle, extra: &str) -> Config {
    let text = format!("{}\n{extra}\n{}", handle.toml(), sources_toml());
    config::from_toml_str(&text, &|_| None).expect("test config")
}

/// POST a signed event to `source`; returns (status, json body).
pub async fn post_signed(
    client: &reqwest::Client,
    gw: &Gateway,
    source: &str,
    body: &[u8],
    id: &str,
) -> (u16, serde_json::Value) {
    let headers = sign_headers(
        provider_for(source),
        secret_for(source),
        body,
        now_secs(),
        id,
    );
    post_raw(client, &gw.ingest, source, body, &headers).await
}

pub async fn post_raw(
    client: &reqwest::Client,
    base: &str,
    source: &str,
    body: &[u8],
    headers: &[(String, String)],
) -> (u16, serde_json::Value) {
    let mut req = client
        .post(format!("{base}/ingest/{source}"))
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (n, v) in headers {
        req = req.header(n.as_str(), v.as_str());
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, json)
}

/// POST `body` to `source` at the ingest listener `base`, signed as Stripe signs it
/// with [`STRIPE_SECRET`] (the secret of `stripe` and of every source
/// `forward::source` makes).
pub async fn post_stripe_signed(
    client: &reqwest::Client,
    base: &str,
    source: &str,
    body: &[u8],
) -> (u16, serde_json::Value) {
    let headers = sign_headers("stripe", STRIPE_SECRET, body, now_secs(), "x");
    post_raw(client, base, source, body, &headers).await
}

/// POST the Stripe event `event` (its id) to the `stripe` source at `base`.
pub async fn post_stripe(
    client: &reqwest::Client,
    base: &str,
    event: &str,
) -> (u16, serde_json::Value) {
    post_stripe_signed(client, base, "stripe", &event_body("stripe", event)).await
}

/// Change one character of the value of the header `name` (case-insensitive), the
/// `from_end`-th from its end, to another of the same alphabet: the value still
/// parses, and no longer verifies.
pub fn flip_signature(headers: &mut [(String, String)], name: &str, from_end: usize) {
    let (_, v) = headers
        .iter_mut()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .expect("signature header");
    let mut bytes = v.clone().into_bytes();
    let i = bytes.len() - from_end;
    bytes[i] = if bytes[i] == b'a' { b'b' } else { b'a' };
    *v = String::from_utf8(bytes).expect("an ASCII header value");
}

/// GET `url` and return its body as text.
pub async fn get_text(client: &reqwest::Client, url: &str) -> String {
    client
        .get(url)
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("body")
}

/// GET `url` and return its body as JSON.
pub async fn get_json(client: &reqwest::Client, url: &str) -> serde_json::Value {
    serde_json::from_str(&get_text(client, url).await).expect("a JSON body")
}

/// The path of the hookgate binary built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hookgate"))
}

/// Write `text` as `hookgate.toml` in `dir`; its path.
pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("hookgate.toml");
    std::fs::write(&path, text).expect("write the config file");
    path
}

/// A config file in `dir` for `handle`'s store with the standard sources: what
/// [`config`] builds, for a child gateway.
pub fn config_file(handle: &StoreHandle, dir: &Path) -> PathBuf {
    write_config(dir, &format!("{}\n{}", handle.toml(), sources_toml()))
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
        gw.wait_ready();
        gw
    }

    fn wait_ready(&self) {
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
            if buf.starts_with(b"HTTP/1.1 200") {
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

/// Run the async test body once per backend: `async fn body(backend: Backend)`.
#[macro_export]
macro_rules! both_stores {
    ($name:ident, $body:expr) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                ($body)($crate::util::Backend::Embedded).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                ($body)($crate::util::Backend::Redis).await;
            }
        }
    };
}

/// Run the async test body once per backend, on a fresh store opened for it and closed
/// after it ([`on_a_fresh_store`]): `async fn body(store: &dyn Store)`.
#[macro_export]
macro_rules! both_fresh_stores {
    ($name:ident, $body:path) => {
        $crate::both_stores!($name, |backend| $crate::util::on_a_fresh_store(
            backend, $body
        ));
    };
}

/// An HTTP client for tests (the TLS provider installed first, as the binary does).
pub fn http() -> reqwest::Client {
    http_builder().build().expect("http client")
}

pub fn http_builder() -> reqwest::ClientBuilder {
    hookgate::tls::install_provider();
    reqwest::Client::builder()
}

/// A local Redis Cluster of three masters on free ports ([`free_port`]) (no replicas).
pub struct RedisCluster {
    pub nodes: Vec<RedisClusterNode>,
}

pub struct RedisClusterNode {
    pub port: u16,
    _dir: tempfile::TempDir,
    child: Child,
}

impl Drop for RedisClusterNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("tempdir");
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(dir.path())
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                    "--save",
                    "",
                    "--protected-mode",
                    "no",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server (apt-get install redis-server)");
            nodes.push(RedisClusterNode {
                port,
                _dir: dir,
                child,
            });
        }
        for n in &nodes {
            wait_until_blocking(
                &format!("cluster node {} to answer PING", n.port),
                Duration::from_secs(10),
                || redis_ping(n.port),
            );
        }
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        // Wait until every node agrees the cluster is up.
        wait_until_blocking(
            "every cluster node to report cluster_state:ok",
            Duration::from_secs(20),
            || {
                nodes.iter().all(|n| {
                    let info = Command::new("redis-cli")
                        .args(["-p", &n.port.to_string(), "cluster", "info"])
                        .output()
                        .expect("redis-cli");
                    String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok")
                })
            },
        );
        RedisCluster { nodes }
    }

    /// `store.url` for the cluster: every node as a seed.
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[tokio::test]
#[should_panic(expected = "above the 2s bound")]
async fn quiet_for_refuses_a_window_above_its_bound() {
    quiet_for("nothing", QUIET_MAX + POLL, async || true).await;
}

#[tokio::test]
#[should_panic(expected = "the clock stands still: broken")]
async fn quiet_for_fails_once_its_condition_breaks() {
    let start = Instant::now();
    quiet_for("the clock stands still", QUIET_MAX, async || {
        start.elapsed() < 4 * POLL
    })
    .await;
}

#[tokio::test]
#[should_panic(expected = "timed out after 100ms waiting for the impossible")]
async fn wait_until_gives_up_at_its_deadline() {
    wait_until("the impossible", 4 * POLL, async || false).await;
}

/// The sources paused as a whole (not one of their routes), sorted.
pub async fn paused_sources(store: &dyn hookgate::store::Store) -> Vec<String> {
    store
        .paused()
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.route.is_none())
        .map(|p| p.source)
        .collect()
}
