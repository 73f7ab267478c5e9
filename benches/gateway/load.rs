//! The load generator: pre-signed Stripe webhooks, and the closed loop (fixed
//! concurrency: throughput) that sends them over keep-alive HTTP/1.1 connections
//! (the open loop, fixed rate, is [`crate::open`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::SECRET;

/// A pre-signed request.
pub struct Prepared {
    pub signature: String,
    pub body: Bytes,
}

/// `n` distinct Stripe events with 1–4 KiB bodies, signed now. With `dup_every = 2`,
/// every second request repeats an earlier event (a redelivery).
/// `HOOKGATE_BENCH_BODY_BYTES` makes every body that size instead (e.g. 7168: a
/// GitHub `push` of a few commits).
pub fn prepare(n: usize, prefix: &str, dup_every: Option<usize>) -> Vec<Prepared> {
    use hookgate::config::Secret;
    use hookgate::provider::Registry;
    use hookgate::provider::sign::{SignInput, sign};
    let reg = Registry::builtin().expect("registry");
    let spec = reg.get("stripe").expect("stripe spec").clone();
    let secret = Secret::new(SECRET);
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let mut out = Vec::with_capacity(n);
    let mut rng = fastrand::Rng::with_seed(7);
    let body_bytes = std::env::var("HOOKGATE_BENCH_BODY_BYTES")
        .ok()
        .and_then(|b| b.parse::<usize>().ok());
    for i in 0..n {
        let event = match dup_every {
            Some(k) if i % k == k - 1 && i > 0 => i / 2,
            _ => i,
        };
        let (pad, commits) = match body_bytes {
            // The body without its description and commits: 243 bytes, the prefix and
            // the event twice.
            Some(size) => {
                let room = size.saturating_sub(243 + prefix.len() + 2 * event.to_string().len());
                let commits = commits_of(&mut rng, room);
                (room.saturating_sub(commits.len()), commits)
            }
            None => (rng.usize(700..3800), String::new()),
        };
        let body = format!(
            r#"{{"id":"evt_{prefix}_{event}","object":"event","type":"payment_intent.succeeded","api_version":"2024-06-20","created":{ts},"data":{{"object":{{"id":"pi_{event}","amount":2000,"currency":"usd","description":"{}"}}}},"commits":[{commits}],"livemode":false,"pending_webhooks":1}}"#,
            "x".repeat(pad)
        );
        let headers = sign(
            &spec,
            &secret,
            &SignInput {
                body: body.as_bytes(),
                timestamp: ts,
                id: "",
                event_type: None,
                method: "POST",
                path: "/",
                url: None,
            },
        )
        .expect("sign");
        out.push(Prepared {
            signature: headers.headers[0].1.clone(),
            body: Bytes::from(body),
        });
    }
    out
}

/// Commits as a GitHub `push` lists them, at most `room` bytes of them: each with
/// its own random SHA (twice, as GitHub gives it: id and URL), so a body compresses
/// about as much as a real one, not as much as a run of one letter.
fn commits_of(rng: &mut fastrand::Rng, room: usize) -> String {
    let mut out = String::new();
    for n in 0.. {
        let hex: String = (0..80)
            .map(|_| char::from_digit(rng.u32(0..16), 16).unwrap_or('0'))
            .collect();
        let (sha, tree) = hex.split_at(40);
        let commit = format!(
            r#"{}{{"id":"{sha}","tree_id":"{tree}","distinct":true,"message":"Fix the retry of delivery {n} when the upstream answers 503","timestamp":"2026-12-07T15:{m:02}:{s:02}+00:00","url":"https://github.com/acme/widgets/commit/{sha}","author":{{"name":"Dev {a}","email":"dev{a}@example.com","username":"dev{a}"}},"added":[],"removed":[],"modified":["src/forward/retry.rs"]}}"#,
            if n == 0 { "" } else { "," },
            m = rng.u32(0..60),
            s = rng.u32(0..60),
            a = rng.u32(0..9),
        );
        if out.len() + commit.len() > room {
            break;
        }
        out.push_str(&commit);
    }
    out
}

pub struct LoadResult {
    pub requests: u64,
    pub errors: u64,
    elapsed: Duration,
    pub hist: Histogram<u64>,
}

impl LoadResult {
    pub fn new(requests: u64, errors: u64, elapsed: Duration, hist: Histogram<u64>) -> LoadResult {
        LoadResult {
            requests,
            errors,
            elapsed,
            hist,
        }
    }

    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
    pub fn pct(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }
}

async fn connect(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    sender
}

fn request(addr: SocketAddr, path: &str, p: &Prepared) -> Request<Full<Bytes>> {
    Request::post(format!("http://{addr}{path}"))
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("stripe-signature", &p.signature)
        .body(Full::new(p.body.clone()))
        .expect("request")
}

/// Closed loop: `connections` connections each send the next request as soon as the
/// previous answer is read, for `duration` (or until the requests run out, unless
/// `cycle`: servers that do not dedupe, the baseline and the sink, take them again).
pub async fn closed_loop(
    addr: SocketAddr,
    path: &str,
    requests: Arc<Vec<Prepared>>,
    connections: usize,
    duration: Duration,
    cycle: bool,
) -> LoadResult {
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let requests = requests.clone();
        let next = next.clone();
        let errors = errors.clone();
        let path = path.to_string();
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
            let mut sender = connect(addr).await;
            let mut done = 0u64;
            while Instant::now() < deadline {
                let mut i = next.fetch_add(1, Ordering::Relaxed);
                if cycle {
                    i %= requests.len();
                }
                let Some(p) = requests.get(i) else { break };
                let t = Instant::now();
                match sender.send_request(request(addr, &path, p)).await {
                    Ok(resp) => {
                        let ok = resp.status().is_success();
                        let _ = resp.into_body().collect().await;
                        if !ok {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        let _ = hist.record(t.elapsed().as_micros() as u64);
                        done += 1;
                    }
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        sender = connect(addr).await;
                    }
                }
            }
            (done, hist)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
    let mut total = 0;
    for t in tasks {
        let (n, h) = t.await.expect("load task");
        total += n;
        hist.add(h).expect("merge");
    }
    LoadResult {
        requests: total,
        errors: errors.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
        hist,
    }
}

pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}
