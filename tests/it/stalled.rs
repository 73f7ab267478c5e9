//! Requests that send a head and then stall: they never lock a provider out. A body
//! must start within `server.body_first_byte_timeout` and keep `min_body_rate`; when
//! every connection slot is busy the most stalled body is shed for a new connection;
//! a provider's pooled keep-alive connection outlives a flood of new ones; one client
//! holds a bounded part of a source's body budget; and on the admin listener every
//! request is bounded by `admin.request_timeout` while the probes keep answering.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::connections::{
    ANSWERED_WITHIN, client_from, closed_by_server, idle_from, ingest_addr, metric, room_for_files,
    timed_webhook,
};
use crate::support::*;

/// A request head for `path` that declares `length` body bytes and carries a
/// signature header that will not verify.
fn stalled_head(path: &str, length: usize) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         content-length: {length}\r\nstripe-signature: t=1,v1=00\r\n\r\n"
    )
    .into_bytes()
}

/// Connect to `to` from `from`; `None` when the connection is refused.
async fn try_connect(from: Ipv4Addr, to: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0)).ok()?;
    socket.connect(to).await.ok()
}

/// Read `s` until the server closes it; what it sent.
async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Keep one stalled request open from `from` to `to`: send `head`, then nothing;
/// whenever the gateway closes it, open another, until `stop`.
async fn keep_stalling(
    from: Ipv4Addr,
    to: SocketAddr,
    head: Arc<Vec<u8>>,
    stop: CancellationToken,
) {
    while !stop.is_cancelled() {
        if let Some(mut s) = try_connect(from, to).await
            && s.write_all(&head).await.is_ok()
        {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = read_to_close(&mut s) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Read one HTTP/1.1 response (head and a `content-length` body) from `s`; its head.
async fn read_response(s: &mut TcpStream, what: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).into_owned();
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                if got.len() >= end + 4 + length {
                    return head;
                }
            }
            let n = s.read(&mut buf).await.expect("read");
            assert!(
                n > 0,
                "{what}: closed by the server after {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or_else(|_| panic!("{what}: a response within 10 s"))
}

/// A signed Stripe webhook as raw HTTP/1.1 bytes, kept alive.
fn signed_request(event: &str) -> Vec<u8> {
    let body = event_body("stripe", event);
    let mut req = format!(
        "POST /ingest/stripe HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n",
        body.len()
    );
    for (name, value) in sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), event) {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(&body);
    bytes
}

const OPEN: &str = "hookgate_connections_open{listener=\"ingest\"}";

/// Timed against a bound: the test command runs these alone, one at a time (see
/// `scripts/test`), since on two cores a neighbour's load moves the timings.
mod alone {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stalled_bodies_from_every_address_leave_room_for_a_signed_webhook() {
        let _alone = TIMED_ALONE.lock().await;
        const MAX: usize = 64;
        const PER_CLIENT: usize = 16;
        let h = StoreHandle::new(Backend::Embedded);
        let cfg = config(
            &h,
            &format!(
                "[server]\nmax_connections = {MAX}\nmax_connections_per_client = {PER_CLIENT}\n\
                 header_read_timeout = \"300s\"\n"
            ),
        );
        let gw = Gateway::start(cfg).await;
        let to = ingest_addr(&gw);

        // Stalled requests from one address more than it takes to fill every slot, at
        // twice max_connections, each reopened as soon as the gateway closes it.
        let addresses = MAX / PER_CLIENT + 1;
        let stop = CancellationToken::new();
        let head = Arc::new(stalled_head("/ingest/stripe", 100));
        let attackers: Vec<_> = (0..2 * MAX)
            .map(|i| {
                let from = Ipv4Addr::new(127, 0, 1, 10 + (i % addresses) as u8);
                tokio::spawn(keep_stalling(from, to, head.clone(), stop.clone()))
            })
            .collect();
        wait_until(
            "the stalled requests to hold every connection slot",
            Duration::from_secs(20),
            async || metric(&gw.admin, OPEN).await >= MAX as f64,
        )
        .await;

        let mut in_time = 0;
        let mut took = Vec::new();
        for i in 0..6 {
            let t =
                timed_webhook(&gw, Ipv4Addr::new(127, 0, 0, 9), &format!("evt_stall_{i}")).await;
            in_time += usize::from(t < ANSWERED_WITHIN);
            took.push(t);
        }
        assert!(
            in_time >= 5,
            "signed webhooks answered within {ANSWERED_WITHIN:?}: {in_time} of 6 ({took:?})"
        );
        let shed = metric(
            &gw.admin,
            "hookgate_request_bodies_cut_total{listener=\"ingest\",reason=\"shed\"}",
        )
        .await;
        assert!(shed >= 1.0, "stalled bodies were shed: {shed}");
        stop.cancel();
        for a in attackers {
            let _ = a.await;
        }
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_starts_or_dribbles_is_cut_off_and_a_slow_one_in_time_is_stored() {
    let h = StoreHandle::new(Backend::Embedded);
    let cfg = config(
        &h,
        "[server]\nbody_first_byte_timeout = \"1s\"\nmin_body_rate = 1000\n",
    );
    let gw = Gateway::start(cfg).await;
    let to = ingest_addr(&gw);

    // Nothing after the head: 408 once the first byte is a second late.
    let mut silent = try_connect(Ipv4Addr::new(127, 0, 0, 40), to)
        .await
        .expect("connect");
    let started = Instant::now();
    silent
        .write_all(&stalled_head("/ingest/stripe", 100))
        .await
        .expect("send the head");
    let answer = read_response(&mut silent, "the silent body").await;
    let took = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "cut off after {took:?}"
    );

    // A byte every 100 ms (10 bytes a second against 1,000): cut off soon after the
    // first-byte allowance, long before the 30 s body timeout.
    let mut dribbler = try_connect(Ipv4Addr::new(127, 0, 0, 41), to)
        .await
        .expect("connect");
    dribbler
        .write_all(&stalled_head("/ingest/stripe", 2000))
        .await
        .expect("send the head");
    let started = Instant::now();
    let dribble = async {
        loop {
            if dribbler.write_all(b" ").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            if started.elapsed() > Duration::from_secs(10) {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), dribble).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the dribbling body was still read after {took:?}"
    );
    let cut = metric(
        &gw.admin,
        "hookgate_request_bodies_cut_total{listener=\"ingest\",reason=\"too_slow\"}",
    )
    .await;
    assert!(cut >= 1.0, "counted as too slow: {cut}");

    // A body sent in three parts with pauses well within the allowance is stored.
    let request = signed_request("evt_slow_in_time");
    let split = request.len() - 30;
    let mut slow = try_connect(Ipv4Addr::new(127, 0, 0, 42), to)
        .await
        .expect("connect");
    slow.write_all(&request[..split])
        .await
        .expect("head and most");
    tokio::time::sleep(Duration::from_millis(300)).await;
    slow.write_all(&request[split..split + 15])
        .await
        .expect("more");
    tokio::time::sleep(Duration::from_millis(300)).await;
    slow.write_all(&request[split + 15..])
        .await
        .expect("the rest");
    let answer = read_response(&mut slow, "the slow body in time").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_keep_alive_connection_outlives_a_flood_of_new_ones() {
    const MAX: usize = 64;
    if !room_for_files(4 * MAX + 1_024) {
        return;
    }
    let h = StoreHandle::new(Backend::Embedded);
    let cfg = config(
        &h,
        &format!("[server]\nmax_connections = {MAX}\nheader_read_timeout = \"300s\"\n"),
    );
    let gw = Gateway::start(cfg).await;
    let to = ingest_addr(&gw);

    // A provider's pooled connection: one webhook answered, kept open.
    let mut pooled = try_connect(Ipv4Addr::new(127, 0, 0, 20), to)
        .await
        .expect("connect");
    pooled
        .write_all(&signed_request("evt_pooled_1"))
        .await
        .expect("send");
    let answer = read_response(&mut pooled, "the pooled connection's first webhook").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // Twice max_connections of new connections that send nothing, from 8 clients.
    let mut flood = Vec::with_capacity(2 * MAX);
    for i in 0..2 * MAX {
        flood.push(idle_from(Ipv4Addr::new(127, 0, 2, 10 + (i % 8) as u8), to).await);
    }
    wait_until(
        "the flood to be shed down to the connection cap",
        Duration::from_secs(30),
        async || flood.iter().filter(|s| closed_by_server(s)).count() >= MAX,
    )
    .await;

    // The pooled connection is still open and takes the next webhook.
    pooled
        .write_all(&signed_request("evt_pooled_2"))
        .await
        .expect("send on the pooled connection");
    let answer = read_response(&mut pooled, "the pooled connection's second webhook").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(flood);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_spend_a_sources_body_budget() {
    const UPLOADS: usize = 192;
    const MIB: usize = 1024 * 1024;
    if !room_for_files(2 * UPLOADS + 1_024) {
        return;
    }
    let h = StoreHandle::new(Backend::Embedded);
    let cfg = config(&h, "");
    assert_eq!(cfg.server.max_body_bytes, MIB);
    let gw = Gateway::start(cfg).await;
    let to = ingest_addr(&gw);

    // 1 MiB uploads from one address that stall after the head: the address holds
    // its part of the source's share, and the rest are refused at once.
    let head = stalled_head("/ingest/stripe", MIB);
    let refused = Arc::new(AtomicUsize::new(0));
    let mut uploads = Vec::with_capacity(UPLOADS);
    for _ in 0..UPLOADS {
        let mut s = try_connect(Ipv4Addr::new(127, 0, 3, 1), to)
            .await
            .expect("connect");
        s.write_all(&head).await.expect("send the head");
        uploads.push(s);
    }
    let mut held = Vec::new();
    for mut s in uploads {
        let mut buf = [0u8; 12];
        match tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut buf)).await {
            Ok(Ok(_)) if buf.starts_with(b"HTTP/1.1 503") => {
                refused.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Ok(_)) => panic!("unexpected answer {:?}", String::from_utf8_lossy(&buf)),
            Ok(Err(e)) => panic!("upload closed: {e}"),
            Err(_) => held.push(s),
        }
    }
    let refused = refused.load(Ordering::Relaxed);
    assert!(
        !held.is_empty() && refused >= UPLOADS / 2,
        "one client held {} uploads, {refused} refused",
        held.len()
    );

    // A genuine webhook from another address is stored.
    let client = client_from(Ipv4Addr::new(127, 0, 3, 2));
    let body = event_body("stripe", "evt_budget_other");
    let (status, answer) = post_signed(&client, &gw, "stripe", &body, "evt_budget_other").await;
    assert_eq!(status, 200, "{answer}");
    drop(held);
    gw.stop().await;
}

/// Keep uploads of `length` bytes going from `from` to `to`, each trickled at
/// 2 KiB every 100 ms (above `min_body_rate`), a new one whenever the gateway ends
/// one, until `stop`; `sent` counts the bytes of bodies sent.
async fn keep_trickling(
    from: Ipv4Addr,
    to: SocketAddr,
    length: usize,
    sent: Arc<AtomicUsize>,
    stop: CancellationToken,
) {
    let head = stalled_head("/ingest/stripe", length);
    let chunk = vec![b' '; 2048];
    while !stop.is_cancelled() {
        let Some(mut s) = try_connect(from, to).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        if s.write_all(&head).await.is_err() {
            continue;
        }
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let mut buf = [0u8; 64];
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                // An answer, or the connection closed: this upload is over.
                _ = s.read(&mut buf) => break,
                _ = tick.tick() => {
                    if s.write_all(&chunk).await.is_err() {
                        break;
                    }
                    sent.fetch_add(chunk.len(), Ordering::Relaxed);
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_trickling_uploads_cannot_refuse_another_clients_webhooks() {
    const MIB: usize = 1024 * 1024;
    const CLIENTS: u8 = 4;
    const UPLOADS: usize = 8;
    if !room_for_files(4 * usize::from(CLIENTS) * UPLOADS + 1_024) {
        return;
    }
    let h = StoreHandle::new(Backend::Embedded);
    // Behind a proxy that keeps no client address (deploy/k8s): clients are not told
    // apart, so only shedding keeps the share for the provider.
    let cfg = config(&h, "[server]\nmax_connections_per_client = 0\n");
    assert_eq!(cfg.server.max_body_bytes, MIB);
    let gw = Gateway::start(cfg).await;
    let to = ingest_addr(&gw);

    // Four addresses, eight 1 MiB uploads each, trickled: together they would hold
    // the source's whole share (half of the 64 MiB budget).
    let stop = CancellationToken::new();
    let sent = Arc::new(AtomicUsize::new(0));
    let mut trickles = Vec::new();
    for c in 0..CLIENTS {
        for _ in 0..UPLOADS {
            trickles.push(tokio::spawn(keep_trickling(
                Ipv4Addr::new(127, 0, 5, c + 1),
                to,
                MIB,
                sent.clone(),
                stop.clone(),
            )));
        }
    }
    // Every upload under way for more than a second (2 KiB a tenth of a second:
    // 40 KiB each is two seconds).
    let all = usize::from(CLIENTS) * UPLOADS * 40 * 1024;
    wait_until(
        "the uploads under way",
        Duration::from_secs(30),
        async || sent.load(Ordering::Relaxed) >= all,
    )
    .await;

    // The provider's webhooks from a fifth address are stored, every one.
    let client = client_from(Ipv4Addr::new(127, 0, 5, 99));
    let mut tick = tokio::time::interval(Duration::from_millis(300));
    for i in 0..10 {
        tick.tick().await;
        let event = format!("evt_trickled_{i}");
        let body = event_body("stripe", &event);
        let (status, answer) = post_signed(&client, &gw, "stripe", &body, &event).await;
        assert_eq!(status, 200, "webhook {i}: {answer}");
    }
    // The slow uploads paid for it.
    let shed = metric(
        &gw.admin,
        "hookgate_ingest_bodies_shed_total{source=\"stripe\"}",
    )
    .await;
    assert!(shed >= 1.0, "{shed}");
    stop.cancel();
    for t in trickles {
        let _ = t.await;
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_admin_request_is_cut_off_and_the_probes_keep_answering() {
    const STALLED: usize = 64;
    let h = StoreHandle::new(Backend::Embedded);
    let cfg = config(
        &h,
        "[admin]\nrequest_timeout = \"2s\"\nprobe_listen = \"127.0.0.1:0\"\n",
    );
    let gw = Gateway::start(cfg).await;
    let admin: SocketAddr = gw
        .admin
        .trim_start_matches("http://")
        .parse()
        .expect("the admin address");
    let probes = gw.probes.clone().expect("a probe listener");

    // Console logins that send their head and then nothing: each one is closed
    // within the request timeout (and not at once).
    let head = b"POST /console/login HTTP/1.1\r\nhost: 127.0.0.1\r\n\
                 content-type: application/x-www-form-urlencoded\r\ncontent-length: 100\r\n\r\n";
    let started = Instant::now();
    let mut stalled = Vec::with_capacity(STALLED);
    for _ in 0..STALLED {
        let mut s = try_connect(Ipv4Addr::LOCALHOST, admin)
            .await
            .expect("connect");
        s.write_all(head).await.expect("send the head");
        stalled.push(tokio::spawn(async move {
            read_to_close(&mut s).await;
            started.elapsed()
        }));
    }

    // Meanwhile the probes answer at once, on their listener and on the admin one.
    for url in [format!("{probes}/readyz"), format!("{}/healthz", gw.admin)] {
        let t = Instant::now();
        let status = tokio::time::timeout(Duration::from_secs(5), http().get(&url).send())
            .await
            .expect("answered within 5 s")
            .expect("a response")
            .status();
        assert_eq!(status, 200, "{url}");
        assert!(
            t.elapsed() < ANSWERED_WITHIN,
            "{url} took {:?}",
            t.elapsed()
        );
    }
    assert!(
        get_text(&http(), &format!("{probes}/metrics"))
            .await
            .contains("hookgate_request_bodies_cut_total")
    );

    for s in stalled {
        let closed_after = tokio::time::timeout(Duration::from_secs(10), s)
            .await
            .expect("closed within 10 s")
            .expect("the reader");
        assert!(
            closed_after >= Duration::from_millis(1_500) && closed_after < Duration::from_secs(5),
            "a stalled login closed after {closed_after:?}"
        );
    }
    let cut = metric(
        &gw.admin,
        "hookgate_request_bodies_cut_total{listener=\"admin\",reason=\"total\"}",
    )
    .await;
    assert!(cut >= STALLED as f64, "counted: {cut}");

    // A login body is read with a small limit.
    let big = format!("token={}", "a".repeat(8 * 1024));
    let status = http()
        .post(format!("{}/console/login", gw.admin))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(big)
        .send()
        .await
        .expect("a response")
        .status();
    assert_eq!(status, 413);
    gw.stop().await;
}

/// An admin request whose body stops before it is whole is answered 408, which says
/// what happened (the client was too slow), not 400 (a malformed request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_admin_body_is_answered_408() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(config(&h, "[server]\nbody_first_byte_timeout = \"1s\"\n")).await;
    let admin: SocketAddr = gw
        .admin
        .trim_start_matches("http://")
        .parse()
        .expect("the admin address");
    let mut s = try_connect(Ipv4Addr::LOCALHOST, admin)
        .await
        .expect("connect");
    let head = format!(
        "POST /admin/entries/00000000-0000-0000-0000-000000000000/discard HTTP/1.1\r\n\
         host: {admin}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"note\""
    );
    s.write_all(head.as_bytes()).await.expect("send the head");
    let answer = tokio::time::timeout(Duration::from_secs(10), read_to_close(&mut s))
        .await
        .expect("answered within 10 s");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("timed out reading the body"), "{answer}");
    gw.stop().await;
}
