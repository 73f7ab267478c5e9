//! Hostile input: each gets its 4xx (or the connection is closed on a timeout),
//! nothing is stored, and the process stays up.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::for_each_store;
use crate::support::*;

fn addr(base: &str) -> String {
    base.trim_start_matches("http://").to_string()
}

/// Send raw bytes, return what the server answered before closing (or timing out).
fn raw_exchange(base: &str, bytes: &[u8], read_for: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(addr(base)).unwrap();
    s.set_read_timeout(Some(read_for)).unwrap();
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    out
}

/// The start of `answer`, as text, for a failure message.
fn shown(answer: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(&answer[..answer.len().min(100)])
}

/// Send `request` raw and assert that the answer's status is `status`.
fn assert_answered(base: &str, request: &[u8], status: u16) {
    let answer = raw_exchange(base, request, Duration::from_secs(5));
    let status_line = format!("HTTP/1.1 {status}");
    assert!(
        answer.starts_with(status_line.as_bytes()),
        "not {status}: {}",
        shown(&answer)
    );
}

async fn hostile(backend: Backend) {
    let h = StoreHandle::new(backend);
    let extra = "[server]\nmax_body_bytes = 65536\nheader_read_timeout = \"1s\"\nbody_read_timeout = \"1s\"\n";
    let gw = Gateway::start(config(&h, extra)).await;
    let store = h.open().await;
    // No connection reuse: with a 1 s header read timeout, idle keep-alive connections
    // are closed by the server between the slow steps below.
    let c = crate::support::http_builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();

    // A client dribbling its headers is cut off by the header read timeout.
    let base = gw.ingest.clone();
    let dribble = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr(&base)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let start = Instant::now();
        let _ = s.write_all(b"POST /ingest/stripe HTTP/1.1\r\nhost: x\r\n");
        let mut buf = [0u8; 256];
        loop {
            if s.write_all(b"x").is_err() {
                break;
            }
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => break,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => break,
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "dribbling client never cut off"
            );
        }
        start.elapsed()
    })
    .await
    .unwrap();
    assert!(
        dribble < Duration::from_secs(5),
        "cut off after {dribble:?}"
    );

    // A body that stops half way: 408 after the body read timeout.
    assert_answered(
        &gw.ingest,
        b"POST /ingest/hmac HTTP/1.1\r\nhost: x\r\nx-signature: 00\r\ncontent-length: 100\r\n\r\n0123456789",
        408,
    );

    // Huge header counts: 431.
    let mut req = String::from("POST /ingest/stripe HTTP/1.1\r\nhost: x\r\n");
    for i in 0..500 {
        req.push_str(&format!("x-h{i}: v\r\n"));
    }
    req.push_str("content-length: 2\r\n\r\n{}");
    assert_answered(&gw.ingest, req.as_bytes(), 431);

    // One enormous header: refused (431) or the connection is closed.
    let mut req = String::from("POST /ingest/stripe HTTP/1.1\r\nhost: x\r\nx-big: ");
    req.push_str(&"a".repeat(1 << 20));
    req.push_str("\r\ncontent-length: 2\r\n\r\n{}");
    let answer = raw_exchange(&gw.ingest, req.as_bytes(), Duration::from_secs(5));
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 431"),
        "{}",
        shown(&answer)
    );

    // Bodies over the limit, declared or not.
    let mut req = b"POST /ingest/hmac HTTP/1.1\r\nhost: x\r\nx-signature: 00\r\ncontent-length: 65537\r\n\r\n".to_vec();
    req.extend_from_slice(&[b'a'; 1000]);
    assert_answered(&gw.ingest, &req, 413);
    let mut req = b"POST /ingest/hmac HTTP/1.1\r\nhost: x\r\nx-signature: 00\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..70 {
        req.extend_from_slice(b"3e8\r\n");
        req.extend_from_slice(&[b'a'; 1000]);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    assert_answered(&gw.ingest, &req, 413);
    assert_answered(
        &gw.ingest,
        b"POST /ingest/hmac HTTP/1.1\r\nhost: x\r\nx-signature: 00\r\ncontent-length: 99999999999\r\n\r\n",
        413,
    );

    // Malformed signature headers.
    let body = event_body("stripe", "evt_hostile");
    let malformed = [
        "",
        ",,,,",
        "t=",
        "v1=",
        "t=1,v1",
        "t=99999999999999999999999,v1=00",
        "t=1700000000,t=1700000001,v1=aa",
        &format!("t={},{}", now_secs(), "v1=00,".repeat(100)),
        &"=".repeat(5000),
    ];
    for value in malformed {
        let headers = vec![("stripe-signature".to_string(), value.to_string())];
        let (st, json) = post_raw(&c, &gw.ingest, "stripe", &body, &headers).await;
        assert_eq!(st, 401, "{value:?}: {json}");
    }
    // A signature header that is not UTF-8.
    assert_answered(
        &gw.ingest,
        b"POST /ingest/stripe HTTP/1.1\r\nhost: x\r\nstripe-signature: t=1,v1=\xff\xfe\r\ncontent-length: 2\r\n\r\n{}",
        401,
    );

    // Non-UTF-8 bodies: refused unsigned, accepted byte for byte when signed.
    let binary: Vec<u8> = (0..=255u8).rev().collect();
    let (st, _) = post_raw(
        &c,
        &gw.ingest,
        "hmac",
        &binary,
        &[("x-signature".into(), "00".into())],
    )
    .await;
    assert_eq!(st, 401);
    assert_eq!(store.count("hmac").await.unwrap(), 0);
    assert_eq!(
        store.count("stripe").await.unwrap(),
        0,
        "nothing stored by hostile input"
    );
    let (st, json) = post_signed(&c, &gw, "hmac", &binary, "x").await;
    assert_eq!(st, 200);
    let e = answered_entry(&*store, &json).await;
    assert_eq!(e.body.as_ref(), binary.as_slice());

    // A verified body that is not JSON: stored, deduped on its hash.
    let not_json = b"\xff not json {";
    let (st, json) = post_signed(&c, &gw, "stripe", not_json, "x").await;
    assert_eq!(st, 200);
    let (st, json2) = post_signed(&c, &gw, "stripe", not_json, "x").await;
    assert_eq!(
        (st, &json2["id"], &json2["duplicate"]),
        (200, &json["id"], &true.into())
    );

    // Still up.
    let r = c.get(format!("{}/readyz", gw.admin)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let (st, _) = post_signed(&c, &gw, "stripe", &event_body("stripe", "evt_after"), "x").await;
    assert_eq!(st, 200);
    gw.stop().await;
}
for_each_store!(hostile_input_is_refused_and_stores_nothing, super::hostile);

/// A client that sends its whole request and then closes its sending side (a
/// half-close, `shutdown(SHUT_WR)`) still reads the answer, and the webhook is stored
/// once: the answer says what happened to it.
async fn half_closed_request_is_answered(backend: Backend) {
    let h = StoreHandle::new(backend);
    let gw = Gateway::start(config(&h, "")).await;
    let store = h.open().await;
    let body = event_body("stripe", "evt_half_closed");
    let mut request = format!(
        "POST /ingest/stripe HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (n, v) in sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x") {
        request.push_str(&format!("{n}: {v}\r\n"));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(&body);
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr(&gw.ingest)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&bytes).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        (out, gw)
    })
    .await
    .unwrap();
    let (answer, gw) = answer;
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "no answer to a half-closed request: {}",
        shown(&answer)
    );
    let stored = store
        .list(&hookgate::store::ListQuery {
            source: Some("stripe".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(stored.entries.len(), 1);
    assert!(
        String::from_utf8_lossy(&answer).contains(&stored.entries[0].id),
        "the answer names the stored entry"
    );
    gw.stop().await;
}
for_each_store!(
    a_half_closed_request_gets_its_answer,
    super::half_closed_request_is_answered
);
