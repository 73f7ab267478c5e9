//! The destinations the gateway delivers to. [`start_sink`]: a hyper server in the
//! bench process (the forward scenarios) that answers 200, counts deliveries, can
//! record when each arrived, and can be down (it then drops every connection); a
//! path under `/refuse` is answered 422 (a refusal that is not retried and opens no
//! circuit breaker) and not counted. [`SinkProc`]: the same kind of server in a
//! process of its own, for the ingest and latency scenarios with forwarding on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// A sink that counts deliveries (and can be down).
pub struct Sink {
    pub port: u16,
    pub received: Arc<AtomicU64>,
    pub arrivals: Arc<Mutex<Vec<(Instant, String)>>>,
    pub up: Arc<AtomicBool>,
}

impl Sink {
    /// Wait (at most ten minutes) until the sink has received `n` deliveries.
    pub async fn wait_for(&self, n: usize, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(600);
        while (self.received.load(Ordering::Relaxed) as usize) < n {
            assert!(Instant::now() < deadline, "{what} did not finish");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

pub async fn start_sink(port: Option<u16>, record: bool) -> Sink {
    let listener = TcpListener::bind(("127.0.0.1", port.unwrap_or(0)))
        .await
        .expect("sink bind");
    let port = listener.local_addr().expect("addr").port();
    let received = Arc::new(AtomicU64::new(0));
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let up = Arc::new(AtomicBool::new(true));
    let (r, a, u) = (received.clone(), arrivals.clone(), up.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            if !u.load(Ordering::SeqCst) {
                drop(stream); // refuse while "down"
                continue;
            }
            let (r, a) = (r.clone(), a.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (r, a) = (r.clone(), a.clone());
                    async move {
                        let id = event_id(&req);
                        let refuse = req.uri().path().starts_with("/refuse");
                        let _ = req.into_body().collect().await;
                        if refuse {
                            let mut no = hyper::Response::new(Full::new(Bytes::new()));
                            *no.status_mut() = hyper::StatusCode::UNPROCESSABLE_ENTITY;
                            return Ok::<_, std::convert::Infallible>(no);
                        }
                        r.fetch_add(1, Ordering::Relaxed);
                        if record {
                            a.lock().expect("lock").push((Instant::now(), id));
                        }
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::new(),
                        )))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Sink {
        port,
        received,
        arrivals,
        up,
    }
}

/// The destination of the forwarding-on scenarios, in a process of its own (this
/// binary re-executed, as the baseline is): a bare hyper server with the gateway's
/// runtime settings that reads each delivery and answers 200, so that what it costs
/// shows as its own process, never as the gateway's or the load generator's. It
/// records when each delivery arrived (wall clock, µs since the epoch: comparable
/// across processes) by its `hookgate-event-id`. `GET /count` answers how many
/// deliveries arrived, `GET /arrivals` lists them, one `event-id µs` line each.
pub fn sink_server(port: u16) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        let received = Arc::new(AtomicU64::new(0));
        let arrivals: Arc<Mutex<Vec<(u64, String)>>> = Arc::new(Mutex::new(Vec::new()));
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (r, a) = (received.clone(), arrivals.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (r, a) = (r.clone(), a.clone());
                    async move {
                        if req.method() == hyper::Method::GET {
                            let text = match req.uri().path() {
                                "/count" => r.load(Ordering::SeqCst).to_string(),
                                _ => {
                                    let list = a.lock().expect("lock");
                                    let mut out = String::with_capacity(list.len() * 32);
                                    for (at, id) in list.iter() {
                                        out.push_str(id);
                                        out.push(' ');
                                        out.push_str(&at.to_string());
                                        out.push('\n');
                                    }
                                    out
                                }
                            };
                            return Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                Full::new(Bytes::from(text)),
                            ));
                        }
                        let id = event_id(&req);
                        let _ = req.into_body().collect().await;
                        a.lock().expect("lock").push((unix_micros(), id));
                        r.fetch_add(1, Ordering::SeqCst);
                        Ok(hyper::Response::new(Full::new(Bytes::new())))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
}

/// The `hookgate-event-id` a delivery carries (empty when none).
fn event_id(req: &Request<hyper::body::Incoming>) -> String {
    req.headers()
        .get("hookgate-event-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// Microseconds since the Unix epoch, now.
pub fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The sink process seen from the harness.
pub struct SinkProc {
    pub proc: crate::procs::Proc,
    client: reqwest::Client,
}

impl SinkProc {
    pub fn start() -> SinkProc {
        SinkProc {
            proc: crate::procs::start_helper("HOOKGATE_BENCH_SINK"),
            client: reqwest::Client::new(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.proc.port)
    }

    async fn get(&self, path: &str) -> String {
        self.client
            .get(format!("http://127.0.0.1:{}{path}", self.proc.port))
            .send()
            .await
            .expect("sink")
            .text()
            .await
            .expect("sink answer")
    }

    pub async fn count(&self) -> u64 {
        self.get("/count").await.trim().parse().expect("count")
    }

    /// When each delivery arrived (µs since the epoch), by event id; the first
    /// arrival of an id counts.
    pub async fn arrivals(&self) -> HashMap<String, u64> {
        let mut out = HashMap::new();
        for line in self.get("/arrivals").await.lines() {
            if let Some((id, at)) = line.split_once(' ')
                && let Ok(at) = at.parse::<u64>()
            {
                out.entry(id.to_string()).or_insert(at);
            }
        }
        out
    }

    /// Wait until `n` deliveries arrived, or until the count stops growing for
    /// `stall`; the count and how long it took.
    pub async fn settle(&self, n: u64, stall: Duration) -> (u64, Duration) {
        let start = Instant::now();
        let (mut last, mut since) = (self.count().await, Instant::now());
        while last < n && since.elapsed() < stall {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = self.count().await;
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
        (last, start.elapsed())
    }
}
