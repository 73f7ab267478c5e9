//! The open loop: requests due at a fixed rate, each sent at its due time on a free
//! keep-alive HTTP/1.1 connection, latency counted from the due time. A request due
//! while every connection waits for an answer waits in a backlog and is sent by the
//! first connection answered, its latency still counted from its due time, so a
//! gateway that answers late is charged for what it delays (no coordinated omission).
//!
//! Built as wrk2 is, for what it costs the machine it shares with the gateway: one
//! timing thread sleeps until each due time and writes the request straight to a free
//! connection's socket (one write), and one reader thread (a current-thread runtime)
//! reads every connection's answers. Before, the timing thread handed each request
//! to one of 64 tokio tasks through a channel they took turns at, and the generator
//! spent about three times per request what the closed loop spends, most of it
//! switching threads (BENCHMARKS.md, "Half of the maximum is not half of the
//! machine").

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::AsyncReadExt;

use crate::load::{LoadResult, Prepared};

/// An answer slower than this is printed with `HOOKGATE_BENCH_SLOW`.
const SLOW: Duration = Duration::from_millis(40);

/// How long the last answers may take once every request was sent.
const DRAIN: Duration = Duration::from_secs(60);

/// One connection: the socket's write side, and the request it waits on.
struct Conn {
    /// A duplicate of the reader's socket, written by whoever sends on it: the timing
    /// thread, or the reader when it sends from the backlog. Never both: a
    /// connection is written only while it is free of any request.
    writer: Mutex<std::net::TcpStream>,
    /// The request in flight: its index and its due time.
    in_flight: Mutex<Option<(usize, Instant)>>,
}

/// Which connections are free, and what is due but found none.
#[derive(Default)]
struct Dispatch {
    free: Vec<usize>,
    backlog: VecDeque<(usize, Instant)>,
}

struct Shared {
    conns: Vec<Conn>,
    dispatch: Mutex<Dispatch>,
    requests: Arc<Vec<Prepared>>,
    /// The request line and the headers every request shares (those `load::request`
    /// gives the closed loop's requests).
    head: String,
    errors: AtomicU64,
    start: Instant,
    trace_slow: bool,
}

impl Shared {
    /// Send request `i` (due at `due`) on connection `k`, which is free.
    fn send(&self, k: usize, i: usize, due: Instant) {
        let conn = &self.conns[k];
        if let Ok(mut f) = conn.in_flight.lock() {
            *f = Some((i, due));
        }
        let p = &self.requests[i];
        let mut bytes = Vec::with_capacity(self.head.len() + p.body.len() + 160);
        bytes.extend_from_slice(self.head.as_bytes());
        bytes.extend_from_slice(
            format!(
                "stripe-signature: {}\r\ncontent-length: {}\r\n\r\n",
                p.signature,
                p.body.len()
            )
            .as_bytes(),
        );
        bytes.extend_from_slice(&p.body);
        let mut writer = conn.writer.lock().expect("writer");
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            match writer.write(rest) {
                Ok(0) => break,
                Ok(n) => rest = &rest[n..],
                // The socket is non-blocking (the reader's runtime shares it); a free
                // connection's send buffer is empty, so this is rare.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                // A broken connection: its reader finds out and counts the error.
                Err(_) => break,
            }
        }
    }

    /// Send what is due on a free connection, or keep it for the next one answered.
    fn dispatch(&self, i: usize, due: Instant) {
        let free = {
            let mut d = self.dispatch.lock().expect("dispatch");
            match d.free.pop() {
                Some(k) => Some(k),
                None => {
                    d.backlog.push_back((i, due));
                    None
                }
            }
        };
        if let Some(k) = free {
            self.send(k, i, due);
        }
    }

    /// Connection `k` is done with its request: it sends the oldest one waiting, or
    /// becomes free.
    fn next(&self, k: usize) {
        let waiting = {
            let mut d = self.dispatch.lock().expect("dispatch");
            let job = d.backlog.pop_front();
            if job.is_none() {
                d.free.push(k);
            }
            job
        };
        if let Some((i, due)) = waiting {
            self.send(k, i, due);
        }
    }

    /// Whether every connection is free and nothing waits.
    fn idle(&self) -> bool {
        let d = self.dispatch.lock().expect("dispatch");
        d.free.len() == self.conns.len() && d.backlog.is_empty()
    }
}

/// A connected socket in non-blocking mode, and a duplicate of it to write on.
fn connect(addr: SocketAddr) -> (std::net::TcpStream, std::net::TcpStream) {
    let s = std::net::TcpStream::connect(addr).expect("connect");
    let _ = s.set_nodelay(true);
    s.set_nonblocking(true).expect("nonblocking");
    let w = s.try_clone().expect("clone");
    (s, w)
}

/// Open loop: `requests` due at `rate` a second for `duration` over `connections`
/// connections; latency counts from each request's due time, which `sent_at` records
/// when given.
pub async fn open_loop(
    addr: SocketAddr,
    path: &str,
    requests: Arc<Vec<Prepared>>,
    connections: usize,
    rate: f64,
    duration: Duration,
    sent_at: Option<Arc<Mutex<HashMap<usize, Instant>>>>,
) -> LoadResult {
    let total = ((rate * duration.as_secs_f64()) as usize).min(requests.len());
    let mut conns = Vec::with_capacity(connections);
    let mut readers = Vec::with_capacity(connections);
    for _ in 0..connections {
        let (r, w) = connect(addr);
        conns.push(Conn {
            writer: Mutex::new(w),
            in_flight: Mutex::new(None),
        });
        readers.push(r);
    }
    let start = Instant::now();
    let shared = Arc::new(Shared {
        conns,
        dispatch: Mutex::new(Dispatch {
            free: (0..connections).collect(),
            backlog: VecDeque::new(),
        }),
        requests,
        head: format!("POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n"),
        errors: AtomicU64::new(0),
        start,
        trace_slow: std::env::var_os("HOOKGATE_BENCH_SLOW").is_some(),
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let reader = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("reader runtime");
            rt.block_on(async move {
                let mut tasks = Vec::new();
                for (k, socket) in readers.into_iter().enumerate() {
                    let shared = shared.clone();
                    let stop = stop_rx.clone();
                    tasks.push(tokio::spawn(read_answers(shared, k, socket, addr, stop)));
                }
                let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
                for t in tasks {
                    hist.add(t.await.expect("reader")).expect("merge");
                }
                hist
            })
        })
    };
    // The timing thread: an OS thread that sleeps until each due time (tokio's timer
    // has a 1 ms grain, which would bunch the requests at each tick).
    let producer = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            let interval = Duration::from_secs_f64(1.0 / rate);
            for i in 0..total {
                let due = start + interval.mul_f64(i as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                if let Some(s) = &sent_at {
                    s.lock().expect("lock").insert(i, due);
                }
                shared.dispatch(i, due);
            }
        })
    };
    let _ = tokio::task::spawn_blocking(move || producer.join()).await;
    let deadline = Instant::now() + DRAIN;
    while !shared.idle() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let _ = stop_tx.send(true);
    let hist = tokio::task::spawn_blocking(move || reader.join().expect("reader thread"))
        .await
        .expect("join");
    // Requests never answered within the drain count as errors.
    let unanswered = shared
        .conns
        .iter()
        .filter(|c| c.in_flight.lock().map(|f| f.is_some()).unwrap_or(false))
        .count() as u64
        + shared.dispatch.lock().map(|d| d.backlog.len()).unwrap_or(0) as u64;
    LoadResult::new(
        hist.len() + unanswered,
        shared.errors.load(Ordering::Relaxed) + unanswered,
        start.elapsed(),
        hist,
    )
}

/// Read connection `k`'s answers until `stop`: time each against its request's due
/// time, then let the connection send what waits or become free. A connection that
/// breaks counts its request as an error and connects again.
async fn read_answers(
    shared: Arc<Shared>,
    k: usize,
    socket: std::net::TcpStream,
    addr: SocketAddr,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Histogram<u64> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
    let mut stream = tokio::net::TcpStream::from_std(socket).expect("tokio stream");
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    loop {
        let read = tokio::select! {
            r = stream.read_buf(&mut buf) => r,
            _ = stop.changed() => break,
        };
        if !matches!(read, Ok(n) if n > 0) {
            // Broken: the request in flight is an error; a new connection takes over.
            let lost = shared.conns[k]
                .in_flight
                .lock()
                .ok()
                .and_then(|mut f| f.take());
            buf.clear();
            let (r, w) = connect(addr);
            if let Ok(mut writer) = shared.conns[k].writer.lock() {
                *writer = w;
            }
            stream = tokio::net::TcpStream::from_std(r).expect("tokio stream");
            if lost.is_some() {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                shared.next(k);
            }
            continue;
        }
        while let Some((code, used)) = answer(&buf) {
            buf.drain(..used);
            let Some((_, due)) = shared.conns[k]
                .in_flight
                .lock()
                .ok()
                .and_then(|mut f| f.take())
            else {
                continue;
            };
            if !(200..300).contains(&code) {
                shared.errors.fetch_add(1, Ordering::Relaxed);
            }
            let took = due.elapsed();
            let _ = hist.record(took.as_micros().max(1) as u64);
            if shared.trace_slow && took > SLOW {
                eprintln!(
                    "slow: due at +{:.3} s, answered after {:.1} ms",
                    due.duration_since(shared.start).as_secs_f64(),
                    took.as_secs_f64() * 1000.0
                );
            }
            shared.next(k);
        }
    }
    hist
}

/// The status code and length of the complete HTTP/1.1 answer at the front of
/// `buf`, if it holds one (bodies framed by `content-length`, as every server the
/// bench loads answers).
fn answer(buf: &[u8]) -> Option<(u16, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Complete(head)) => {
            let length = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok())
                .and_then(|v| v.trim().parse::<usize>().ok());
            assert!(
                length.is_some()
                    || !resp
                        .headers
                        .iter()
                        .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding")),
                "the open loop reads answers framed by content-length only"
            );
            let total = head + length.unwrap_or(0);
            (buf.len() >= total).then_some((resp.code.unwrap_or(0), total))
        }
        Ok(httparse::Status::Partial) => None,
        Err(e) => panic!("unreadable answer: {e}"),
    }
}
