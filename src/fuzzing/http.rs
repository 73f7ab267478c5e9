//! Target `http`: whole requests through the gateway's own routers, in process: the
//! ingest endpoint of sources of several providers (a form one, routes with filters
//! and an ordering key), the admin API's paths, queries and JSON bodies, and the
//! console's pages, forms and cookie, over an embedded store in a directory of its own
//! and a fixed clock.
//!
//! Input: a request line (`METHOD /path?query`), `name: value` header lines, an empty
//! line, then the body. Placeholders reach what a fuzzer cannot guess: `{token}` the
//! admin token, `{session}` a logged-in console cookie, `{csrf}` that session's form
//! token, `{login-csrf}` the login form's, `{entry}` a stored entry's id; a header line
//! `{sign}` on an `/ingest/<source>` request is replaced by the headers that sign the
//! body for that source, so every body reaches what runs after verification.
//!
//! Checked beyond "no panic": no answer is a 500 (a handler's panic is one, as is
//! every error the gateway did not map to an answer).

use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use tower::ServiceExt as _;

use super::head_and_rest;
use crate::clock::Clock;
use crate::config::Secret;
use crate::provider::Registry;
use crate::provider::sign::{SignInput, sign};

/// The time of the target's clock, unix milliseconds.
const NOW_MS: i64 = 1_700_000_000_000;
const TOKEN: &str = "fuzz-admin-token-0123456789abcdef";
const HOST: &str = "127.0.0.1:8081";

/// Each source: name, provider, secret.
const SOURCES: &[(&str, &str, &str)] = &[
    ("stripe", "stripe", "whsec_test_secret"),
    ("github", "github", "It's a Secret to Everybody"),
    ("slack", "slack", "8f742231b10e8888abcd99yyyzzz85a5"),
    ("twilio", "twilio", "12345"),
    ("hmac", "hmac", "generic-secret"),
];

struct Gateway {
    runtime: tokio::runtime::Runtime,
    ingest: Router,
    admin: Router,
    registry: Registry,
    session: String,
    csrf: String,
    login_csrf: String,
    entry: String,
}

fn config(dir: &std::path::Path) -> String {
    let mut toml = format!(
        r#"
[store]
kind = "embedded"
path = "{}"

[admin]
token_env = "FUZZ_ADMIN_TOKEN"
"#,
        dir.display()
    );
    for (name, provider, secret) in SOURCES {
        toml.push_str(&format!(
            r#"
[[sources]]
name = "{name}"
provider = "{provider}"
secret = "{secret}"
public_url = "https://hooks.example.com/ingest/{name}"

[[sources.routes]]
name = "all"
destination = "http://127.0.0.1:9/{name}"

[[sources.routes]]
name = "some"
destination = "http://127.0.0.1:9/{name}/some"
filter = {{ event_types = ["a.*", "thing.?"], match = [{{ pointer = "/data/object/id", prefix = "o" }}], headers = [{{ name = "X-Kind", exists = false }}] }}
order = {{ by = "json:/data/object/id" }}
"#
        ));
    }
    toml
}

async fn call(router: &Router, req: Request<Body>) -> (StatusCode, http::HeaderMap, Vec<u8>) {
    let resp = match router.clone().oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    (status, headers, body)
}

/// The value of the first `name="csrf" value="…"` in a page.
fn scrape_csrf(page: &[u8]) -> String {
    let page = String::from_utf8_lossy(page);
    page.split(r#"name="csrf" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
        .to_string()
}

fn gateway() -> &'static Gateway {
    static GATEWAY: OnceLock<Gateway> = OnceLock::new();
    GATEWAY.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("hookgate-fuzz-http-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            panic!("{}: {e}", dir.display());
        }
        let cfg = match crate::config::from_toml_str(&config(&dir), &|name| {
            (name == "FUZZ_ADMIN_TOKEN").then(|| TOKEN.to_string())
        }) {
            Ok(c) => c,
            Err(e) => panic!("the target's configuration: {e}"),
        };
        // One worker: the store's background tasks run between requests too.
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => panic!("a runtime: {e}"),
        };
        let registry = match Registry::builtin() {
            Ok(r) => r,
            Err(e) => panic!("the built-in registry: {e}"),
        };
        let (ingest, admin, session, csrf, login_csrf, entry) = runtime.block_on(async {
            let (ingest, admin) = match crate::app::routers(&cfg, Clock::from_fn(|| NOW_MS)).await {
                Ok(r) => r,
                Err(e) => panic!("the gateway: {e:#}"),
            };
            // Log into the console, as a browser does.
            let get = |path: &str, cookie: &str| {
                let mut b = Request::get(path).header("host", HOST);
                if !cookie.is_empty() {
                    b = b.header("cookie", cookie);
                }
                b.body(Body::empty()).unwrap_or_default()
            };
            let (_, _, page) = call(&admin, get("/console/login", "")).await;
            let login_csrf = scrape_csrf(&page);
            let login = Request::post("/console/login")
                .header("host", HOST)
                .header("origin", format!("http://{HOST}"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(Body::from(format!("csrf={login_csrf}&token={TOKEN}")))
                .unwrap_or_default();
            let (_, headers, _) = call(&admin, login).await;
            let session = headers
                .get("set-cookie")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(';').next())
                .unwrap_or_default()
                .to_string();
            assert!(!session.is_empty(), "the console login gave no cookie");
            // One stored entry, signed for the hmac source.
            let body = br#"{"id":"evt_seed","type":"a.b","data":{"object":{"id":"o_1"}}}"#;
            let mut req = Request::post("/ingest/hmac").header("host", "hooks.example.com");
            for (n, v) in signed_headers(&registry, "hmac", body) {
                req = req.header(n, v);
            }
            let (status, _, _) =
                call(&ingest, req.body(Body::from(&body[..])).unwrap_or_default()).await;
            assert!(status.is_success(), "the seed entry was refused: {status}");
            let list = Request::get("/admin/entries?source=hmac&limit=1")
                .header("host", HOST)
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Body::empty())
                .unwrap_or_default();
            let (_, _, listed) = call(&admin, list).await;
            let entry = serde_json::from_slice::<serde_json::Value>(&listed)
                .ok()
                .and_then(|v| v.pointer("/entries/0/id")?.as_str().map(str::to_string))
                .unwrap_or_default();
            assert!(!entry.is_empty(), "the seed entry is not listed");
            let (_, _, page) =
                call(&admin, get(&format!("/console/entries/{entry}"), &session)).await;
            let csrf = scrape_csrf(&page);
            assert!(!csrf.is_empty(), "the entry page has no form token");
            (ingest, admin, session, csrf, login_csrf, entry)
        });
        Gateway {
            runtime,
            ingest,
            admin,
            registry,
            session,
            csrf,
            login_csrf,
            entry,
        }
    })
}

/// The headers that sign `body` for `source`, at the target's time.
fn signed_headers(registry: &Registry, source: &str, body: &[u8]) -> Vec<(HeaderName, String)> {
    let Some((name, provider, secret)) = SOURCES.iter().find(|s| s.0 == source) else {
        return Vec::new();
    };
    let Some(spec) = registry.get(provider) else {
        return Vec::new();
    };
    let url = format!("https://hooks.example.com/ingest/{name}");
    let input = SignInput {
        body,
        timestamp: NOW_MS / 1000,
        id: "d-1",
        event_type: Some("a.b"),
        method: "POST",
        path: &format!("/ingest/{name}"),
        url: Some(&url),
    };
    sign(spec, &Secret::new(*secret), &input)
        .map(|s| s.headers)
        .unwrap_or_default()
}

pub fn http(data: &[u8]) {
    let g = gateway();
    let (lines, body) = head_and_rest(data);
    let fill = |line: &[u8]| -> Vec<u8> {
        let mut out = line.to_vec();
        for (key, value) in [
            ("{token}", TOKEN),
            ("{session}", g.session.as_str()),
            ("{csrf}", g.csrf.as_str()),
            ("{login-csrf}", g.login_csrf.as_str()),
            ("{entry}", g.entry.as_str()),
        ] {
            while let Some(i) = out.windows(key.len()).position(|w| w == key.as_bytes()) {
                out.splice(i..i + key.len(), value.bytes());
            }
        }
        out
    };
    let body = fill(body);
    let Some(first) = lines.first() else {
        return;
    };
    let first = String::from_utf8_lossy(&fill(first)).into_owned();
    let mut parts = first.split(' ');
    let method = parts.next().unwrap_or_default();
    let target = parts.next().unwrap_or_default();
    let Ok(mut builder) = http::Method::from_bytes(method.as_bytes())
        .map(|m| Request::builder().method(m).uri(target))
    else {
        return;
    };
    let mut host = false;
    for line in lines.iter().skip(1) {
        if *line == b"{sign}" {
            let source = target
                .strip_prefix("/ingest/")
                .and_then(|s| s.split(['?', '/']).next())
                .unwrap_or_default();
            for (n, v) in signed_headers(&g.registry, source, &body) {
                builder = builder.header(n, v);
            }
            continue;
        }
        let line = fill(line);
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(line[..colon].trim_ascii()),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) {
            host |= n == http::header::HOST;
            builder = builder.header(n, v);
        }
    }
    if !host {
        builder = builder.header(http::header::HOST, HOST);
    }
    let ingest = target.starts_with("/ingest");
    let Ok(req) = builder.body(Body::from(body)) else {
        return;
    };
    let router = if ingest { &g.ingest } else { &g.admin };
    let (status, _, _) = g.runtime.block_on(call(router, req));
    assert_ne!(
        status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{method} {target} answered 500"
    );
}
