//! `hookgate listen`: take a pull route's deliveries and forward them to a local app.
//!
//! An app on a laptop or behind a firewall cannot be pushed to, and while it sleeps
//! a push route would spend its retries on it. A pull route keeps its deliveries in
//! the gateway instead; this command long-polls them over an outbound connection
//! (`POST {from}/pull/{source}/{route}`, the consumer API of [`crate::pull`]) and
//! posts each one to `--to`: the exact body bytes (pulled base64-encoded) with every
//! header the gateway signed, so the app verifies the Standard Webhooks signature
//! exactly as it would in production. A 2xx from the app acks the delivery; any other
//! answer, a refused connection or a timeout nacks it with a `retry_in` that doubles
//! from 1 s to 60 s while the app keeps failing (reset by a success).
//!
//! Order: with `--concurrency 1` (the default) a batch is forwarded in order, one at
//! a time. The gateway never hands out two deliveries of one ordering key at once,
//! so a larger `--concurrency` (deliveries of one batch at once) keeps each key in
//! order too.
//!
//! An app that is not running spends no retry budget: nothing is polled until it
//! accepts a TCP connection (looked at from the start, and again after a delivery
//! found it refusing one). The delivery that found it down is nacked; the rest of
//! its batch is not tried but left to its lease, which spends no attempt.
//!
//! Each delivery is given to the app for what is left of its lease (less a margin
//! for the ack); one whose lease ends before its turn is left to the gateway, which
//! hands it out again.
//!
//! A network error or a 5xx/429/503 from the gateway is answered by polling again
//! after a jittered backoff (0.5 s doubling to 30 s, or the gateway's
//! `Retry-After`); a 401 (the token is not that route's consumer token, or the route
//! is not a pull route) ends the command with exit code 1. The token is checked at
//! start, before anything is leased: an ack of a receipt that names no delivery.
//!
//! Output: one line per delivery on stdout (UTC time, event type, entry id, the
//! app's status, latency), or with `--json` one JSON object per line; errors and
//! notices go to stderr. The token is read from the environment and never printed.
//!
//! Ctrl-C or SIGTERM: no new poll is started and no new delivery is forwarded; the
//! delivery being forwarded finishes (its ack or nack included) and the command
//! exits 0. Deliveries leased but not yet forwarded are simply left to expire: the
//! gateway hands them out again when their lease ends. A second Ctrl-C exits at once
//! (130).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use clap::Args;
use futures_util::StreamExt as _;
use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use serde::Deserialize;
use serde_json::json;

use super::out::outln;
use crate::shutdown::{self, CancellationToken};

/// How long each long poll waits for a first delivery (the gateway allows 30 s).
const POLL_WAIT: Duration = Duration::from_secs(25);

/// What a poll may take beyond its wait before it is given up as lost.
const POLL_SLACK: Duration = Duration::from_secs(15);

/// The time kept back from a delivery's lease for its ack.
const ACK_MARGIN: Duration = Duration::from_secs(1);

/// Reconnecting to the gateway: the first delay, and the longest.
const RECONNECT_FIRST: Duration = Duration::from_millis(500);
const RECONNECT_MAX: Duration = Duration::from_secs(30);

/// A `Retry-After` longer than this is shortened to it.
const RETRY_AFTER_MAX: Duration = Duration::from_secs(300);

/// A nack's `retry_in`: the first, and the longest.
const NACK_FIRST: Duration = Duration::from_secs(1);
const NACK_MAX: Duration = Duration::from_secs(60);

/// Headers of one HTTP exchange, not of the webhook: never forwarded to the app.
const NOT_FORWARDED: &[&str] = &[
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "content-length",
    "expect",
    "host",
];

#[derive(Debug, Args)]
pub struct ListenArgs {
    /// The gateway's public (ingest) URL, e.g. https://hooks.example.com.
    #[arg(long, value_parser = http_url)]
    pub from: Url,
    /// The pull route, as `source/route`.
    #[arg(long, value_parser = route_name)]
    pub route: RouteName,
    /// The local app's webhook URL, e.g. http://localhost:3000/webhooks/stripe.
    #[arg(long, value_parser = http_url)]
    pub to: Url,
    /// The environment variable holding the route's consumer token (the value of
    /// its `pull_token_env` on the gateway).
    #[arg(long, default_value = "HOOKGATE_PULL_TOKEN")]
    pub token_env: String,
    /// One JSON object per delivery and line, for scripts.
    #[arg(long)]
    pub json: bool,
    /// How long each delivery is leased (5s to 10m): the app answers within it.
    #[arg(long, default_value = "30s", value_parser = lease)]
    pub lease: Duration,
    /// The most deliveries one poll takes (1 to 100).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub max: u16,
    /// Deliveries of one batch forwarded at once (never two of one ordering key).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub concurrency: u16,
}

/// A pull route, `source/route`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteName {
    pub source: String,
    pub route: String,
}

impl std::fmt::Display for RouteName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.source, self.route)
    }
}

/// `--route`: `source/route`, each a name the configuration would accept.
fn route_name(text: &str) -> Result<RouteName, String> {
    let usage = || format!("{text:?} is not `source/route` (e.g. stripe/dev)");
    let (source, route) = text.split_once('/').ok_or_else(usage)?;
    let name = |s: &str| {
        !s.is_empty()
            && s.len() <= 64
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    if !name(source) || !name(route) {
        return Err(usage());
    }
    Ok(RouteName {
        source: source.to_string(),
        route: route.to_string(),
    })
}

/// `--from` and `--to`: an http or https URL.
fn http_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err(format!("{text:?} is not an http or https URL"));
    }
    Ok(url)
}

/// `--lease`: a duration the gateway accepts for a lease.
fn lease(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))?;
    if d < crate::pull::MIN_LEASE || d > crate::pull::MAX_LEASE {
        return Err(format!(
            "a lease is between {} and {}",
            humantime::format_duration(crate::pull::MIN_LEASE),
            humantime::format_duration(crate::pull::MAX_LEASE)
        ));
    }
    Ok(d)
}

/// `hookgate listen`.
pub async fn run(a: ListenArgs) -> anyhow::Result<()> {
    let token = match std::env::var(&a.token_env) {
        Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
        Ok(_) | Err(std::env::VarError::NotPresent) => bail!(
            "{} is not set: set it to the consumer token of route {} (the value of the \
             route's pull_token_env on the gateway), or name another variable with --token-env",
            a.token_env,
            a.route
        ),
        Err(std::env::VarError::NotUnicode(_)) => {
            bail!("{} does not hold a valid token (not UTF-8)", a.token_env)
        }
    };
    crate::tls::install_provider();
    let gateway = Gateway::new(&a, token)?;
    gateway.check_token().await?;
    let app = App::new(a.to.clone())?;

    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        shutdown::signal().await;
        notice(format_args!(
            "stopping: finishing the delivery being forwarded (press Ctrl-C again to quit at once)"
        ));
        on_signal.cancel();
        shutdown::signal().await;
        notice(format_args!("quitting at once"));
        std::process::exit(130);
    });

    notice(format_args!(
        "listening to {} at {}, forwarding to {} (Ctrl-C to stop)",
        a.route,
        redacted(&a.from),
        redacted(&a.to)
    ));
    let listener = Listener {
        gateway,
        app,
        json: a.json,
        failures: Mutex::new(0),
        // Seen first: deliveries are taken only once the app accepts connections.
        app_down: AtomicBool::new(true),
        cancel: cancel.clone(),
    };
    listener
        .run(usize::from(a.max), a.lease, usize::from(a.concurrency))
        .await?;
    notice(format_args!("stopped"));
    Ok(())
}

/// A URL as printed: without its user and password.
fn redacted(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}

/// One line on stderr (an error or a notice); a closed stderr is ignored.
fn notice(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args);
    let _ = err.write_all(b"\n");
}

/// Why talking to the gateway failed.
enum GatewayError {
    /// Nothing to retry (a refused token, a wrong URL): the command ends.
    Fatal(anyhow::Error),
    /// Try again, after the gateway's `Retry-After` when it gave one.
    Again {
        why: String,
        after: Option<Duration>,
    },
}

/// The gateway's consumer API for one route.
struct Gateway {
    http: reqwest::Client,
    pull: Url,
    ack: Url,
    nack: Url,
    token: String,
    route: RouteName,
    token_env: String,
}

impl Gateway {
    fn new(a: &ListenArgs, token: String) -> anyhow::Result<Gateway> {
        let url = |tail: Option<&str>| -> anyhow::Result<Url> {
            let mut url = a.from.clone();
            url.set_query(None);
            url.set_fragment(None);
            {
                let mut path = url
                    .path_segments_mut()
                    .map_err(|()| anyhow!("{} cannot take a path", a.from))?;
                path.pop_if_empty()
                    .extend(["pull", &a.route.source, &a.route.route]);
                if let Some(t) = tail {
                    path.push(t);
                }
            }
            Ok(url)
        };
        Ok(Gateway {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .timeout(POLL_WAIT + POLL_SLACK)
                .build()
                .context("cannot build the HTTP client")?,
            pull: url(None)?,
            ack: url(Some("ack"))?,
            nack: url(Some("nack"))?,
            token,
            route: a.route.clone(),
            token_env: a.token_env.clone(),
        })
    }

    /// POST `body` to `url`: the answer's status and text, or why not.
    async fn post(
        &self,
        url: &Url,
        body: &serde_json::Value,
        ok: &[u16],
    ) -> Result<String, GatewayError> {
        let res = self
            .http
            .post(url.clone())
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .map_err(|e| GatewayError::Again {
                why: format!(
                    "cannot reach the gateway at {}: {}",
                    redacted(url),
                    anyhow::Error::from(e).root_cause()
                ),
                after: None,
            })?;
        let status = res.status().as_u16();
        let after = res
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s).min(RETRY_AFTER_MAX));
        let text = res.text().await.map_err(|e| GatewayError::Again {
            why: format!(
                "reading the gateway's answer: {}",
                anyhow::Error::from(e).root_cause()
            ),
            after: None,
        })?;
        if ok.contains(&status) {
            return Ok(text);
        }
        let said = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|j| j.get("error").and_then(|e| e.as_str()).map(String::from))
            .unwrap_or_else(|| text.chars().take(200).collect());
        match status {
            401 => Err(GatewayError::Fatal(anyhow!(
                "the gateway refused the token in {} for route {} (401): it is not that \
                 route's consumer token (its pull_token_env), or {} is not a pull route",
                self.token_env,
                self.route,
                self.route
            ))),
            408 | 429 | 500..=599 => Err(GatewayError::Again {
                why: format!("the gateway answered {status}: {said}"),
                after,
            }),
            _ => Err(GatewayError::Fatal(anyhow!(
                "the gateway answered {status} to {}: {said} (is --from the gateway's ingest URL?)",
                redacted(url)
            ))),
        }
    }

    /// Whether the gateway takes the token for the route, asked without leasing
    /// anything (so before the app is up): an ack of a receipt that names no
    /// delivery, answered 401 or "unknown". A gateway out of reach is left to the
    /// poll loop, which says so and tries again.
    async fn check_token(&self) -> anyhow::Result<()> {
        let body = json!({ "receipts": ["hookgate-listen-token-check"] });
        match self.post(&self.ack, &body, &[200, 409]).await {
            Err(GatewayError::Fatal(e)) => Err(e),
            Ok(_) | Err(GatewayError::Again { .. }) => Ok(()),
        }
    }

    /// Long-poll for up to `max` deliveries, each leased `lease`.
    async fn pull(&self, max: usize, lease: Duration) -> Result<Vec<Delivery>, GatewayError> {
        let body = json!({
            "max": max,
            "wait": humantime::format_duration(POLL_WAIT).to_string(),
            "lease": humantime::format_duration(lease).to_string(),
            "encoding": "base64",
        });
        let text = self.post(&self.pull, &body, &[200]).await?;
        let answer: PullAnswer = serde_json::from_str(&text).map_err(|e| {
            GatewayError::Fatal(anyhow!(
                "the gateway's answer to a pull is not what this hookgate reads: {e}"
            ))
        })?;
        Ok(answer.deliveries)
    }

    /// Ack or nack one receipt: what the gateway says of it (`acked`, `nacked`,
    /// `expired`, `unknown`), trying again until `until` while it cannot answer.
    async fn settle(
        &self,
        url: &Url,
        body: serde_json::Value,
        until: Instant,
    ) -> Result<String, anyhow::Error> {
        let mut backoff = Backoff::new(RECONNECT_FIRST, Duration::from_secs(5));
        loop {
            let why = match self.post(url, &body, &[200, 409]).await {
                Ok(text) => {
                    let answer: SettleAnswer = serde_json::from_str(&text).with_context(
                        || "the gateway's answer to an ack is not what this hookgate reads",
                    )?;
                    return Ok(answer
                        .results
                        .into_iter()
                        .next()
                        .map(|r| r.result)
                        .unwrap_or_else(|| "unknown".to_string()));
                }
                Err(GatewayError::Fatal(e)) => return Err(e),
                Err(GatewayError::Again { why, .. }) => why,
            };
            let pause = backoff.next();
            if Instant::now() + pause >= until {
                notice(format_args!("{why}; giving up on this delivery"));
                return Ok("unsettled".to_string());
            }
            notice(format_args!("{why}; trying again"));
            tokio::time::sleep(pause).await;
        }
    }
}

#[derive(Deserialize)]
struct PullAnswer {
    deliveries: Vec<Delivery>,
}

/// One delivery, as the consumer API hands it out.
#[derive(Deserialize)]
struct Delivery {
    receipt: String,
    entry_id: String,
    attempt: u32,
    #[serde(default)]
    event_type: Option<String>,
    leased_until: String,
    #[serde(default)]
    headers: serde_json::Map<String, serde_json::Value>,
    body_encoding: String,
    body: Box<serde_json::value::RawValue>,
}

impl Delivery {
    /// The exact bytes of the body.
    fn body(&self) -> anyhow::Result<Vec<u8>> {
        match self.body_encoding.as_str() {
            "base64" => {
                let text: String = serde_json::from_str(self.body.get())
                    .context("a base64 body that is not a string")?;
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .context("a body that is not base64")
            }
            "json" => Ok(self.body.get().as_bytes().to_vec()),
            other => bail!("a body encoded as {other:?}"),
        }
    }

    /// The headers to send the app: every one of the delivery's, but those of one
    /// HTTP exchange.
    fn headers(&self) -> HeaderMap {
        let mut out = HeaderMap::new();
        for (name, value) in &self.headers {
            let Some(value) = value.as_str() else {
                continue;
            };
            let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
                continue;
            };
            if NOT_FORWARDED.contains(&name.as_str()) {
                continue;
            }
            if let Ok(value) = HeaderValue::from_str(value) {
                out.append(name, value);
            }
        }
        out
    }

    /// When the lease ends, by this machine's monotonic clock. It began after the
    /// poll was `sent` and before its answer was `got`; within those bounds, the
    /// gateway's `leased_until` read by the wall clock says where.
    fn lease_end(&self, sent: Instant, got: Instant, lease: Duration) -> Instant {
        let (earliest, latest) = (sent + lease, got + lease);
        let by_clock = humantime::parse_rfc3339(&self.leased_until)
            .ok()
            .and_then(|t| t.duration_since(SystemTime::now()).ok())
            .map(|left| Instant::now() + left);
        by_clock.unwrap_or(earliest).max(earliest).min(latest)
    }
}

#[derive(Deserialize)]
struct SettleAnswer {
    results: Vec<ReceiptResult>,
}

#[derive(Deserialize)]
struct ReceiptResult {
    result: String,
}

/// The local app.
struct App {
    http: reqwest::Client,
    to: Url,
}

/// What the app did with one delivery.
struct Answer {
    status: Option<u16>,
    error: Option<String>,
    /// The app could not be reached at all.
    unreachable: bool,
    latency: Duration,
}

impl App {
    fn new(to: Url) -> anyhow::Result<App> {
        Ok(App {
            // A redirect is an answer (not a 2xx), and a local app needs no proxy.
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .connect_timeout(Duration::from_secs(5))
                .build()
                .context("cannot build the HTTP client")?,
            to,
        })
    }

    /// Whether the app accepts a TCP connection (nothing is sent).
    async fn reachable(&self) -> bool {
        let (Some(host), Some(port)) = (self.to.host_str(), self.to.port_or_known_default()) else {
            return false;
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect((host, port)),
        )
        .await
        .is_ok_and(|c| c.is_ok())
    }

    async fn forward(&self, headers: HeaderMap, body: Vec<u8>, timeout: Duration) -> Answer {
        let started = Instant::now();
        let sent = self
            .http
            .post(self.to.clone())
            .headers(headers)
            .body(body)
            .timeout(timeout)
            .send()
            .await;
        let latency = started.elapsed();
        match sent {
            Ok(res) => Answer {
                status: Some(res.status().as_u16()),
                error: None,
                unreachable: false,
                latency,
            },
            Err(e) => {
                let unreachable = e.is_connect();
                let error = if e.is_timeout() && !unreachable {
                    format!("no answer within {}", shown(timeout))
                } else {
                    anyhow::Error::from(e).root_cause().to_string()
                };
                Answer {
                    status: None,
                    unreachable,
                    error: Some(error),
                    latency,
                }
            }
        }
    }
}

/// A jittered doubling delay.
struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The next delay: between half and all of the current step, which doubles.
    fn next(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(self.max);
        step.mul_f64(0.5 + fastrand::f64() / 2.0)
    }

    fn reset(&mut self) {
        self.next = self.first;
    }
}

/// A nack's `retry_in` after `failures` consecutive failures (1 or more).
fn nack_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    NACK_FIRST.saturating_mul(1 << doublings).min(NACK_MAX)
}

/// A duration as printed, to the millisecond.
fn shown(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_millis(
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
    ))
}

/// Sleep `d`, or less when `cancel` fires; whether it did.
async fn pause(d: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(d) => false,
        () = cancel.cancelled() => true,
    }
}

/// What became of one delivery.
enum Handled {
    /// Forwarded, and acked or nacked.
    Done,
    /// Not forwarded (a stop asked for, its lease run out): left to its lease.
    Left,
    /// Not forwarded, because the app had just refused a connection: left to its
    /// lease, which spends no attempt.
    Held,
}

struct Listener {
    gateway: Gateway,
    app: App,
    json: bool,
    /// Consecutive failures of the app (reset by a 2xx).
    failures: Mutex<u32>,
    /// The app refused a connection (or has not been seen yet): no poll until it
    /// accepts one.
    app_down: AtomicBool,
    cancel: CancellationToken,
}

impl Listener {
    async fn run(&self, max: usize, lease: Duration, concurrency: usize) -> anyhow::Result<()> {
        let mut reconnect = Backoff::new(RECONNECT_FIRST, RECONNECT_MAX);
        let mut troubled = false;
        while !self.cancel.is_cancelled() {
            if self.app_down.load(Ordering::Acquire) && self.wait_for_app().await {
                break;
            }
            let sent = Instant::now();
            let polled = tokio::select! {
                r = self.gateway.pull(max, lease) => r,
                () = self.cancel.cancelled() => break,
            };
            let batch = match polled {
                Ok(batch) => batch,
                Err(GatewayError::Fatal(e)) => return Err(e),
                Err(GatewayError::Again { why, after }) => {
                    troubled = true;
                    let d = after.unwrap_or_else(|| reconnect.next());
                    notice(format_args!("{why}; polling again in {}", shown(d)));
                    if pause(d, &self.cancel).await {
                        break;
                    }
                    continue;
                }
            };
            if troubled {
                notice(format_args!("connected to the gateway again"));
                troubled = false;
            }
            reconnect.reset();
            let got = Instant::now();
            let mut handled = futures_util::stream::iter(batch.iter())
                .map(|d| self.handle(d, d.lease_end(sent, got, lease)))
                .buffer_unordered(concurrency);
            let mut held = 0usize;
            while let Some(h) = handled.next().await {
                held += usize::from(matches!(h?, Handled::Held));
            }
            drop(handled);
            if held > 0 {
                notice(format_args!(
                    "{held} more of this batch not forwarded: the gateway hands them out \
                     again when their lease ends"
                ));
            }
            if self.app_down.load(Ordering::Acquire) {
                // At most one attempt spent per backoff while the app is away.
                let failures = self.failures.lock().map(|f| *f).unwrap_or(1);
                if pause(nack_delay(failures.max(1)), &self.cancel).await {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Wait until the app accepts a connection; whether a stop was asked for first.
    /// Meanwhile nothing is polled: the deliveries wait in the gateway, spending no
    /// attempt.
    async fn wait_for_app(&self) -> bool {
        let mut backoff = Backoff::new(RECONNECT_FIRST, Duration::from_secs(5));
        let mut told = false;
        loop {
            if self.app.reachable().await {
                self.app_down.store(false, Ordering::Release);
                if told {
                    notice(format_args!(
                        "the app at {} accepts connections: forwarding",
                        redacted(&self.app.to)
                    ));
                }
                return false;
            }
            if !told {
                notice(format_args!(
                    "the app at {} does not accept connections: waiting for it (the \
                     deliveries wait in the gateway)",
                    redacted(&self.app.to)
                ));
                told = true;
            }
            if pause(backoff.next(), &self.cancel).await {
                return true;
            }
        }
    }

    /// Forward one delivery and ack or nack it; a fatal error (a refused token, a
    /// closed stdout) ends the command.
    async fn handle(&self, d: &Delivery, lease_end: Instant) -> anyhow::Result<Handled> {
        if self.cancel.is_cancelled() {
            return Ok(Handled::Left);
        }
        if self.app_down.load(Ordering::Acquire) {
            return Ok(Handled::Held);
        }
        let left = lease_end.saturating_duration_since(Instant::now());
        if left <= ACK_MARGIN + Duration::from_millis(100) {
            notice(format_args!(
                "{}: its lease ended before its turn; the gateway hands it out again \
                 (a longer --lease or a smaller --max gives the app more time)",
                d.entry_id
            ));
            return Ok(Handled::Left);
        }
        let answer = match d.body() {
            Ok(body) => self.app.forward(d.headers(), body, left - ACK_MARGIN).await,
            Err(e) => Answer {
                status: None,
                error: Some(format!("not forwarded: {e:#}")),
                unreachable: false,
                latency: Duration::ZERO,
            },
        };
        if answer.unreachable {
            self.app_down.store(true, Ordering::Release);
        }
        let ok = answer.status.is_some_and(|s| (200..300).contains(&s));
        let (result, retry_in) = if ok {
            if let Ok(mut f) = self.failures.lock() {
                *f = 0;
            }
            let body = json!({ "receipts": [d.receipt] });
            let result = self
                .gateway
                .settle(&self.gateway.ack, body, lease_end)
                .await?;
            (result, None)
        } else {
            let failures = match self.failures.lock() {
                Ok(mut f) => {
                    *f = f.saturating_add(1);
                    *f
                }
                Err(_) => 1,
            };
            let retry_in = nack_delay(failures);
            let body = json!({
                "receipt": d.receipt,
                "retry_in": humantime::format_duration(retry_in).to_string(),
            });
            let result = self
                .gateway
                .settle(&self.gateway.nack, body, lease_end)
                .await?;
            (result, Some(retry_in))
        };
        if result == "expired" || result == "unknown" {
            notice(format_args!(
                "{}: the gateway no longer held its lease ({result}); it hands it out again{}",
                d.entry_id,
                if ok {
                    " (the app may see it twice)"
                } else {
                    ""
                }
            ));
        }
        self.print(d, &answer, &result, retry_in)?;
        Ok(Handled::Done)
    }

    /// The line of one delivery on stdout.
    fn print(
        &self,
        d: &Delivery,
        answer: &Answer,
        result: &str,
        retry_in: Option<Duration>,
    ) -> std::io::Result<()> {
        let now = SystemTime::now();
        let latency_ms = u64::try_from(answer.latency.as_millis()).unwrap_or(u64::MAX);
        if self.json {
            let mut line = json!({
                "time": humantime::format_rfc3339_millis(now).to_string(),
                "event_type": d.event_type,
                "entry_id": d.entry_id,
                "attempt": d.attempt,
                "status": answer.status,
                "latency_ms": latency_ms,
                "result": result,
            });
            if let Some(r) = retry_in {
                line["retry_in"] = json!(humantime::format_duration(r).to_string());
            }
            if let Some(e) = &answer.error {
                line["error"] = json!(e);
            }
            return outln!("{line}");
        }
        // 2026-12-08T10:21:03Z → 2026-12-08 10:21:03 (UTC).
        let time = humantime::format_rfc3339_seconds(now)
            .to_string()
            .replace('T', " ")
            .replace('Z', "");
        let status = match (answer.status, &answer.error) {
            (Some(s), _) => format!("[{s}]"),
            (None, Some(e)) => format!("[{e}]"),
            (None, None) => "[-]".to_string(),
        };
        let mut tail = String::new();
        if d.attempt > 1 {
            tail.push_str(&format!("  attempt {}", d.attempt));
        }
        match (result, retry_in) {
            ("acked", _) => {}
            ("nacked", Some(r)) => tail.push_str(&format!(
                "  nacked, again in {}",
                humantime::format_duration(r)
            )),
            (other, _) => tail.push_str(&format!("  {other}")),
        }
        outln!(
            "{time}  {}  {}  {status}  {latency_ms} ms{tail}",
            d.event_type.as_deref().unwrap_or("-"),
            d.entry_id
        )
    }
}
