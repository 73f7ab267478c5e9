//! The guard around the admin listener: without a token, what a browser sends for a
//! web page (an `Origin`, a rebound `Host`) is refused and changes nothing; with or
//! without one, a POST body must be JSON. Raw HTTP/1.1, so that every header is ours.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::admin::{TOKEN, admin_config};
use crate::forward::source;
use crate::support::*;

/// One exchange on a fresh connection: `head` is the request line and headers
/// (without the blank line); answers the status and the JSON (or text) body.
async fn raw(base: &str, head: &str, body: &str) -> (u16, Value) {
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the admin listener");
    let req = format!("{head}\r\nconnection: close\r\n\r\n{body}");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.expect("read");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer:?}"));
    let text = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let json = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()));
    (status, json)
}

/// Whether `source` is paused, as the admin API reports it.
async fn paused(base: &str, source: &str) -> bool {
    let host = base.trim_start_matches("http://");
    let (st, v) = raw(
        base,
        &format!("GET /admin/sources HTTP/1.1\r\nhost: {host}"),
        "",
    )
    .await;
    assert_eq!(st, 200, "{v}");
    v.as_array()
        .and_then(|a| a.iter().find(|s| s["source"] == source))
        .map(|s| s["paused"] == true)
        .unwrap_or_else(|| panic!("no source {source} in {v}"))
}

fn error_of(v: &Value) -> &str {
    v["error"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_browser_requests_are_refused_and_change_nothing() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(config(&h, "")).await;
    let base = gw.admin.as_str();
    let host = base.trim_start_matches("http://").to_string();
    let port = host.rsplit_once(':').map(|(_, p)| p.to_string()).unwrap();

    // What a page's `fetch(…, {method: 'POST', mode: 'no-cors'})` sends: refused.
    let (st, v) = raw(
        base,
        &format!(
            "POST /admin/sources/stripe/pause HTTP/1.1\r\nhost: {host}\r\norigin: https://evil.example"
        ),
        "",
    )
    .await;
    assert_eq!(st, 403, "{v}");
    assert!(error_of(&v).contains("cross-site request refused"), "{v}");
    assert!(error_of(&v).contains("admin token"), "{v}");
    // What a page reaching the listener through a rebound DNS name sends: refused.
    for h in ["evil.example", &format!("evil.example:{port}")] {
        let (st, v) = raw(
            base,
            &format!("POST /admin/sources/stripe/pause HTTP/1.1\r\nhost: {h}"),
            "",
        )
        .await;
        assert_eq!(st, 403, "host {h}: {v}");
        assert!(error_of(&v).contains("host not loopback"), "{v}");
    }
    assert!(!paused(base, "stripe").await, "a refused request paused");

    // Every route of the listener, reads included.
    for path in [
        "/admin/entries",
        "/metrics",
        "/healthz",
        "/readyz",
        "/admin/openapi.json",
    ] {
        for extra in [
            format!("host: evil.example:{port}"),
            format!("host: {host}\r\norigin: null"),
            format!("host: 127.0.0.1.nip.io:{port}"),
            // No Host at all (HTTP/1.1 requires one).
            String::new(),
        ] {
            let head = format!("GET {path} HTTP/1.1\r\n{extra}");
            let (st, v) = raw(base, head.trim_end(), "").await;
            assert_eq!(st, 403, "{head:?}: {v}");
        }
    }
    // An absolute-form target names the host too.
    let (st, v) = raw(
        base,
        &format!("GET http://evil.example:{port}/admin/entries HTTP/1.1\r\nhost: {host}"),
        "",
    )
    .await;
    assert_eq!(st, 403, "{v}");

    // What the CLI, curl and probes send: answered, under every loopback spelling.
    for h in [
        host.clone(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "127.0.0.1".to_string(),
    ] {
        for path in [
            "/admin/entries",
            "/metrics",
            "/readyz",
            "/admin/openapi.json",
        ] {
            let (st, v) = raw(base, &format!("GET {path} HTTP/1.1\r\nhost: {h}"), "").await;
            assert_eq!(st, 200, "GET {path} with host {h}: {v}");
        }
    }
    let (st, v) = raw(base, "GET /admin/entries HTTP/1.0", "").await;
    assert_eq!(st, 200, "HTTP/1.0 needs no Host: {v}");

    // A POST without a body needs no content type.
    let (st, v) = raw(
        base,
        &format!("POST /admin/sources/stripe/pause HTTP/1.1\r\nhost: {host}"),
        "",
    )
    .await;
    assert_eq!((st, &v["paused"]), (200, &json!(true)), "{v}");
    assert!(paused(base, "stripe").await);
    gw.stop().await;
}

/// What a page makes a browser fetch without an `Origin` (an `<img>`, a link) still
/// carries `Sec-Fetch-Site`: without a token, a cross-site or same-site one is
/// refused by the guard, a console search and an admin listing alike;
/// the user's own navigation (`none`), the console's own pages (`same-origin`) and
/// clients that send no such header (curl, the CLI, probes, Prometheus) are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_a_fetch_the_browser_marks_as_another_sites_is_refused() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(config(&h, "")).await;
    let base = gw.admin.as_str();
    let host = base.trim_start_matches("http://").to_string();
    for path in [
        "/console/entries?search=match%3D%2Fnope%3A1",
        "/admin/entries?source=stripe&match=/nope:1",
        "/metrics",
        "/readyz",
    ] {
        for site in ["cross-site", "same-site", "Cross-Site"] {
            let (st, v) = raw(
                base,
                &format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nsec-fetch-site: {site}"),
                "",
            )
            .await;
            assert_eq!(st, 403, "{path} with {site}: {v}");
            assert!(error_of(&v).contains("cross-site request refused"), "{v}");
        }
        for extra in [
            "\r\nsec-fetch-site: same-origin",
            "\r\nsec-fetch-site: none",
            "",
        ] {
            let (st, v) = raw(
                base,
                &format!("GET {path} HTTP/1.1\r\nhost: {host}{extra}"),
                "",
            )
            .await;
            assert_eq!(st, 200, "{path} with {extra:?}: {v}");
        }
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_body_must_be_json() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(config(&h, "")).await;
    let base = gw.admin.as_str();
    let host = base.trim_start_matches("http://").to_string();
    // A pending entry (its destination refuses connections) to discard.
    let (st, v) = post_stripe(&http(), &gw.ingest, "evt_guard_json").await;
    assert_eq!(st, 200, "{v}");
    let id = v["id"].as_str().expect("entry id").to_string();
    let status = || async {
        let (st, v) = raw(
            base,
            &format!("GET /admin/entries/{id} HTTP/1.1\r\nhost: {host}"),
            "",
        )
        .await;
        assert_eq!(st, 200, "{v}");
        v["status"].as_str().unwrap_or_default().to_string()
    };

    // What an HTML form or a no-cors fetch can send cross-site, and no type at all.
    let note = r#"{"note":"spam"}"#;
    for (content_type, framing) in [
        (
            "content-type: text/plain",
            format!("content-length: {}", note.len()),
        ),
        (
            "content-type: application/x-www-form-urlencoded",
            format!("content-length: {}", note.len()),
        ),
        (
            "content-type: multipart/form-data; boundary=x",
            format!("content-length: {}", note.len()),
        ),
        (
            "content-type: application/jsonx",
            format!("content-length: {}", note.len()),
        ),
        ("x-none: 1", format!("content-length: {}", note.len())),
    ] {
        let (st, v) = raw(
            base,
            &format!(
                "POST /admin/entries/{id}/discard HTTP/1.1\r\nhost: {host}\r\n{content_type}\r\n{framing}"
            ),
            note,
        )
        .await;
        assert_eq!(st, 415, "{content_type}: {v}");
        assert!(error_of(&v).contains("application/json"), "{v}");
    }
    // A chunked body counts as a body.
    let chunked = format!("{:x}\r\n{note}\r\n0\r\n\r\n", note.len());
    let (st, v) = raw(
        base,
        &format!(
            "POST /admin/entries/{id}/discard HTTP/1.1\r\nhost: {host}\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked"
        ),
        &chunked,
    )
    .await;
    assert_eq!(st, 415, "chunked: {v}");
    // A body on a route that takes none is refused the same way, and changes nothing.
    let (st, v) = raw(
        base,
        &format!(
            "POST /admin/sources/stripe/pause HTTP/1.1\r\nhost: {host}\r\ncontent-type: text/plain\r\ncontent-length: 2"
        ),
        "{}",
    )
    .await;
    assert_eq!(st, 415, "{v}");
    assert!(!paused(base, "stripe").await, "a refused request paused");
    assert_eq!(status().await, "pending", "a refused request discarded");

    // JSON, with parameters and in any case, goes through.
    let (st, v) = raw(
        base,
        &format!(
            "POST /admin/entries/{id}/discard HTTP/1.1\r\nhost: {host}\r\ncontent-type: Application/JSON; charset=utf-8\r\ncontent-length: {}",
            note.len()
        ),
        note,
    )
    .await;
    assert_eq!((st, &v["status"]), (200, &json!("discarded")), "{v}");
    assert_eq!(status().await, "discarded");
    gw.stop().await;
}

/// With a token, the bearer token is what protects the API: requests from anywhere
/// are answered once authenticated, and a POST body must still be JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_token_decides_and_bodies_are_still_json() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(admin_config(
        &h,
        "",
        &source("a", "http://127.0.0.1:9/a", ""),
    ))
    .await;
    let base = gw.admin.as_str();
    let host = base.trim_start_matches("http://").to_string();
    let auth = format!("authorization: Bearer {TOKEN}");
    let (st, v) = raw(
        base,
        &format!(
            "GET /admin/entries HTTP/1.1\r\nhost: admin.example\r\norigin: https://ops.example\r\n{auth}"
        ),
        "",
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let replay_as = async |content_type: &str| {
        let head = format!(
            "POST /admin/replay HTTP/1.1\r\nhost: {host}\r\n{auth}\r\ncontent-type: {content_type}\r\ncontent-length: 2"
        );
        raw(base, &head, "{}").await
    };
    let (st, v) = replay_as("text/plain").await;
    assert_eq!(st, 415, "{v}");
    let (st, v) = replay_as("application/json").await;
    assert_eq!((st, &v["queued"]), (202, &json!(0)), "{v}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_only_the_consoles_own_requests_pass_with_an_origin() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(config(&h, "")).await;
    let base = gw.admin.as_str();
    let host = base.trim_start_matches("http://").to_string();
    let own = format!("http://{host}");
    let form = "csrf=x";
    let form_head = |path: &str, origin: &str, host: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nhost: {host}\r\norigin: {origin}\r\n\
             content-type: application/x-www-form-urlencoded\r\ncontent-length: {}",
            form.len()
        )
    };

    // The console's pages and forms, from its own origin: past the guard (the
    // console itself then refuses a form without its form token, as an HTML page).
    let (st, v) = raw(
        base,
        &format!("GET /console/ HTTP/1.1\r\nhost: {host}\r\norigin: {own}"),
        "",
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = raw(base, &form_head("/console/logout", &own, &host), form).await;
    assert_eq!(st, 403, "{v}");
    assert!(
        v.as_str().is_some_and(|t| t.contains("<!DOCTYPE html>")),
        "{v}"
    );

    // Everything else the guard protects stays protected, from that origin too.
    let (st, v) = raw(
        base,
        &form_head("/admin/sources/stripe/pause", &own, &host),
        form,
    )
    .await;
    assert_eq!(st, 403, "{v}");
    assert!(error_of(&v).contains("cross-site request refused"), "{v}");
    let (st, v) = raw(
        base,
        &format!("GET /admin/entries HTTP/1.1\r\nhost: {host}\r\norigin: {own}"),
        "",
    )
    .await;
    assert_eq!(st, 403, "{v}");
    let (st, v) = raw(
        base,
        &format!(
            "POST /admin/sources/stripe/pause HTTP/1.1\r\nhost: {host}\r\n\
             content-type: application/x-www-form-urlencoded\r\ncontent-length: {}",
            form.len()
        ),
        form,
    )
    .await;
    assert_eq!(st, 415, "a form body is still not JSON for the API: {v}");
    assert!(!paused(base, "stripe").await);

    // The console from another origin, or through a rebound name: refused by the guard.
    for (origin, h) in [
        ("http://evil.example".to_string(), host.clone()),
        ("http://127.0.0.1:1".to_string(), host.clone()),
        ("null".to_string(), host.clone()),
        (
            format!(
                "http://evil.example:{}",
                gw.admin.rsplit(':').next().unwrap()
            ),
            format!("evil.example:{}", gw.admin.rsplit(':').next().unwrap()),
        ),
    ] {
        let (st, v) = raw(base, &form_head("/console/logout", &origin, &h), form).await;
        assert_eq!(st, 403, "origin {origin}, host {h}: {v}");
        assert!(v.get("error").is_some(), "the guard's answer: {v}");
    }
    gw.stop().await;
}

/// A client whose connections come from `ip` (a loopback address: 127.0.0.0/8 is
/// all this host's).
fn client_from(ip: [u8; 4]) -> reqwest::Client {
    http_builder()
        .local_address(std::net::IpAddr::from(ip))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_are_throttled_per_client_and_the_right_one_still_works_elsewhere() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(admin_config(&h, "", &sources_toml())).await;
    let url = format!("{}/admin/sources", gw.admin);
    let guesser = client_from([127, 0, 0, 1]);
    let other = client_from([127, 0, 0, 2]);
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for i in 0..20 {
        let resp = guesser
            .get(&url)
            .bearer_auth(format!("guess-{i}"))
            .send()
            .await
            .unwrap();
        statuses.push(resp.status().as_u16());
        if resp.status() == 429 {
            retry_after = resp.headers().get("retry-after").cloned();
            break;
        }
    }
    assert_eq!(statuses[..5], [401; 5], "the first failures answer 401");
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    let secs: u64 = retry_after
        .expect("a 429 says when to retry")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=300).contains(&secs), "{secs}");
    // Locked out: the right token is not even checked.
    let st = guesser.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(st.status(), 429);
    // The console's login counts in the same table.
    let login = format!("{}/console/login", gw.admin);
    let form = guesser
        .get(&login)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = crate::console::form_token(&form);
    let resp = guesser
        .post(&login)
        .form(&[("csrf", csrf.as_str()), ("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().contains_key("retry-after"));
    // Another client is not held back.
    let st = other.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(st.status(), 200);
    let resp = other
        .post(&login)
        .form(&[("csrf", csrf.as_str()), ("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303, "the other client logs in");
    // Wrong logins from a third client lock it out too.
    let third = client_from([127, 0, 0, 3]);
    let mut last = 0;
    for _ in 0..10 {
        last = third
            .post(&login)
            .form(&[("csrf", csrf.as_str()), ("token", "wrong")])
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if last == 429 {
            break;
        }
    }
    assert_eq!(last, 429);
    gw.stop().await;
}

#[test]
fn a_short_admin_token_is_warned_about_at_start() {
    let h = StoreHandle::new(Backend::Embedded);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_file(&h, dir.path());
    let started_with = |token: &str, log: &str| {
        let log_path = dir.path().join(log);
        let mut gw = ChildGateway::spawn(&cfg, &[("HOOKGATE_ADMIN_TOKEN", token)], &log_path);
        gw.terminate();
        std::fs::read_to_string(&log_path).unwrap()
    };
    let short = "only-twenty-three-chars";
    assert_eq!(short.len(), 23);
    let log = started_with(short, "short.log");
    assert!(log.contains("the admin token is short"), "{log}");
    assert!(!log.contains(short), "the token is never logged");
    let log = started_with("twenty-four-characters!!", "long.log");
    assert!(log.contains("admin"), "the log is there: {log}");
    assert!(!log.contains("the admin token is short"), "{log}");
}
