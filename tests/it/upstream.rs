//! A real fake upstream: a hyper (axum) server whose answers the test scripts, and
//! which records every request it receives.

#![allow(dead_code)]

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;

use crate::support::wait_until_ok;

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The status the upstream answered.
    pub answered: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    }
}

/// What the upstream answers.
#[derive(Debug, Clone)]
pub enum Reply {
    Status(u16),
    StatusWith(u16, Vec<(&'static str, String)>),
    /// Never answer (until the client gives up).
    Hang,
    /// Answer after a delay.
    Slow(u16, Duration),
}

type Script = Box<dyn FnMut(&HeaderMap, usize) -> Reply + Send>;

struct Inner {
    received: Mutex<Vec<Received>>,
    script: Mutex<Script>,
    started: Instant,
}

pub struct Upstream {
    pub url: String,
    pub port: u16,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    /// An upstream answering 200 to everything.
    pub async fn ok() -> Upstream {
        Self::scripted(|_, _| Reply::Status(200)).await
    }

    /// `script(headers, n)` decides the answer to the n-th request (0-based).
    pub async fn scripted(
        script: impl FnMut(&HeaderMap, usize) -> Reply + Send + 'static,
    ) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::on(listener, Box::new(script))
    }

    /// An upstream that answers `status` until the switch it returns is set, and 200
    /// from then on.
    pub async fn failing_until_fixed(status: u16) -> (Upstream, Arc<AtomicBool>) {
        let fixed = Arc::new(AtomicBool::new(false));
        let switch = fixed.clone();
        let up = Self::scripted(move |_, _| {
            Reply::Status(if switch.load(Ordering::SeqCst) {
                200
            } else {
                status
            })
        })
        .await;
        (up, fixed)
    }

    /// Start again on a given port (after `stop`), with a new script.
    pub async fn on_port(
        port: u16,
        script: impl FnMut(&HeaderMap, usize) -> Reply + Send + 'static,
    ) -> Upstream {
        let listener = wait_until_ok(
            &format!("port {port} to be free again"),
            Duration::from_secs(10),
            async || TcpListener::bind(("127.0.0.1", port)).await,
        )
        .await;
        Self::on(listener, Box::new(script))
    }

    fn on(listener: TcpListener, script: Script) -> Upstream {
        let port = listener.local_addr().unwrap().port();
        let inner = Arc::new(Inner {
            received: Mutex::new(Vec::new()),
            script: Mutex::new(script),
            started: Instant::now(),
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(inner.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Upstream {
            url: format!("http://127.0.0.1:{port}"),
            port,
            inner,
            task,
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.received.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.inner.received.lock().unwrap().len()
    }

    pub fn since_start(&self, at: Instant) -> Duration {
        at.duration_since(self.inner.started)
    }

    /// The `webhook-id` of each request received (only of those answered
    /// `only_status`, when given), in the order they came.
    pub fn webhook_ids(&self, only_status: Option<u16>) -> Vec<String> {
        self.received()
            .iter()
            .filter(|r| only_status.is_none_or(|s| r.answered == s))
            .filter_map(|r| r.header("webhook-id"))
            .collect()
    }

    /// Stop serving (the port refuses connections afterwards).
    pub fn stop(&self) {
        self.task.abort();
    }

    /// Wait until `pred(received)` holds, or panic after `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&[Received]) -> bool,
    ) {
        wait_until_ok(what, timeout, async || {
            let received = self.received();
            if pred(&received) {
                Ok(())
            } else {
                Err(format!("{} requests received", received.len()))
            }
        })
        .await;
    }
}

/// Whether `received` holds a request for each entry id of `entries` (its
/// `webhook-id`).
pub fn reached<'r, 'a>(
    received: impl IntoIterator<Item = &'r Received>,
    entries: impl IntoIterator<Item = &'a String>,
) -> bool {
    let got: HashSet<String> = received
        .into_iter()
        .filter_map(|r| r.header("webhook-id"))
        .collect();
    entries.into_iter().all(|id| got.contains(id))
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let n = inner.received.lock().unwrap().len();
    let reply = (inner.script.lock().unwrap())(&headers, n);
    let answered = match &reply {
        Reply::Status(s) | Reply::StatusWith(s, _) | Reply::Slow(s, _) => *s,
        Reply::Hang => 0,
    };
    inner.received.lock().unwrap().push(Received {
        at: Instant::now(),
        headers,
        body,
        answered,
    });
    match reply {
        Reply::Status(s) => StatusCode::from_u16(s).unwrap().into_response(),
        Reply::StatusWith(s, hs) => {
            let mut r = StatusCode::from_u16(s).unwrap().into_response();
            for (n, v) in hs {
                r.headers_mut().insert(n, v.parse().unwrap());
            }
            r
        }
        Reply::Slow(s, d) => {
            tokio::time::sleep(d).await;
            StatusCode::from_u16(s).unwrap().into_response()
        }
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK.into_response()
        }
    }
}
