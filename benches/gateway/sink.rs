//! The sink of the forward scenarios: a hyper server in the bench process that
//! answers 200, counts deliveries, can record when each arrived, and can be down
//! (it then drops every connection). A path under `/refuse` is answered 422 (a
//! refusal that is not retried and opens no circuit breaker) and not counted.

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
                        let id = req
                            .headers()
                            .get("hookgate-event-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string();
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
