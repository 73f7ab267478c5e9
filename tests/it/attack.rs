//! Hostile clients: memory and CPU before authentication stay bounded, refused
//! senders still read their answer, and planted credentials never come out.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::*;
use crate::upstream::Upstream;

fn addr(base: &str) -> String {
    base.trim_start_matches("http://").to_string()
}

/// Resident memory of a process, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Read an HTTP answer's head (status line and headers), or `None` when nothing
/// complete arrives within `wait`.
fn read_head(s: &mut TcpStream, wait: Duration) -> Option<String> {
    s.set_read_timeout(Some(wait)).unwrap();
    let deadline = Instant::now() + wait;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                    return Some(String::from_utf8_lossy(&got[..end]).into_owned());
                }
            }
            Err(_) => break,
        }
    }
    None
}

/// 32 uploads each declaring 1 MiB stall one byte short. Past the 8 MiB budget (of
/// which one source may hold half) they are answered 503 with Retry-After at once; the gateway's memory grows by less than
/// the budget plus 16 MiB, and a signed webhook for another source still gets its 200
/// within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_uploads_past_the_body_budget_get_503_and_memory_stays_bounded() {
    const MIB: usize = 1024 * 1024;
    let h = StoreHandle::new(Backend::Embedded);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "[server]\nmax_body_bytes = {MIB}\nbody_budget_bytes = {}\nbody_read_timeout = \"30s\"\n{}\n{}",
            8 * MIB,
            h.toml(),
            sources_toml()
        ),
    );
    let gw = ChildGateway::spawn(&cfg, &[], &dir.path().join("stderr.log"));
    let pid = gw.child.id();
    let c = http();
    // Warm up: the allocator's arenas and the store's caches exist before measuring.
    for i in 0..20 {
        let (st, _) = post_stripe(&c, &gw.ingest, &format!("evt_w{i}")).await;
        assert_eq!(st, 200);
    }
    let before = rss(pid);

    let ingest = addr(&gw.ingest);
    let uploads: Vec<_> = (0..32)
        .map(|_| {
            let ingest = ingest.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&ingest).unwrap();
                let head = format!(
                    "POST /ingest/hmac HTTP/1.1\r\nhost: x\r\nx-signature: 00\r\ncontent-type: application/json\r\ncontent-length: {MIB}\r\n\r\n"
                );
                s.write_all(head.as_bytes()).unwrap();
                let chunk = vec![b'a'; 64 * 1024];
                let mut left = MIB - 1;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if s.write_all(&chunk[..n]).is_err() {
                        break;
                    }
                    left -= n;
                }
                let answer = read_head(&mut s, Duration::from_secs(3));
                (s, answer)
            })
        })
        .collect();
    let results: Vec<(TcpStream, Option<String>)> =
        uploads.into_iter().map(|t| t.join().unwrap()).collect();
    let refused: Vec<&String> = results.iter().filter_map(|(_, a)| a.as_ref()).collect();
    for head in &refused {
        assert!(head.starts_with("HTTP/1.1 503"), "{head}");
        assert!(head.to_ascii_lowercase().contains("retry-after:"), "{head}");
    }
    assert!(
        refused.len() >= 24,
        "only {} of 32 refused past an 8 MiB budget",
        refused.len()
    );

    // Meanwhile, a genuine webhook for another source.
    let started = Instant::now();
    let (st, _) = post_stripe(&c, &gw.ingest, "evt_during").await;
    assert_eq!(st, 200);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );

    let grown = rss(pid).saturating_sub(before);
    assert!(
        grown < (8 + 16) as u64 * MIB as u64,
        "RSS grew by {} MiB with 8 MiB of budget",
        grown / MIB as u64
    );
    drop(results);
}

/// Python's `urllib` sends the whole body before it reads the answer: it reads a 413
/// for a body over the limit and a 401 for a request without a signature header,
/// instead of a broken pipe. Senders that keep sending do not slow anyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_senders_read_their_answer() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(config(&h, "")).await;
    let c = http();
    let script = r#"
import sys, urllib.request, urllib.error
url, size, sig = sys.argv[1], int(sys.argv[2]), sys.argv[3]
headers = {"Content-Type": "application/json"}
if sig:
    headers["X-Signature"] = sig
req = urllib.request.Request(url, data=b"a" * size, headers=headers, method="POST")
try:
    urllib.request.urlopen(req, timeout=20)
    print("200")
except urllib.error.HTTPError as e:
    print(e.code)
except Exception as e:
    print("error", type(e).__name__, e)
"#;
    let url = format!("{}/ingest/hmac", gw.ingest);
    let run = move |size: usize, sig: &str| {
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&url)
            .arg(size.to_string())
            .arg(sig)
            .output()
            .expect("python3");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };

    // Four senders that keep sending declared 12 MiB bodies, over and over.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let ingest = addr(&gw.ingest);
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(&ingest) else { continue };
                    let len = 12 * 1024 * 1024;
                    let _ = s.write_all(format!("POST /ingest/hmac HTTP/1.1\r\nhost: x\r\nx-signature: 00\r\ncontent-length: {len}\r\n\r\n").as_bytes());
                    let chunk = vec![b'b'; 64 * 1024];
                    for _ in 0..len / chunk.len() {
                        if stop.load(std::sync::atomic::Ordering::Relaxed) || s.write_all(&chunk).is_err() {
                            break;
                        }
                    }
                }
            })
        })
        .collect();

    let tasks = [
        tokio::task::spawn_blocking({
            let run = run.clone();
            move || run(3 * 1024 * 1024, "00")
        }),
        tokio::task::spawn_blocking({
            let run = run.clone();
            move || run(512 * 1024, "")
        }),
    ];
    for _ in 0..10 {
        let started = Instant::now();
        let (st, _) = post_signed(&c, &gw, "stripe", &event_body("stripe", &uuid()), "x").await;
        assert_eq!(st, 200);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }
    let [too_large, unsigned] = tasks;
    assert_eq!(too_large.await.unwrap(), "413");
    assert_eq!(unsigned.await.unwrap(), "401");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in senders {
        s.join().unwrap();
    }
    gw.stop().await;
}

fn uuid() -> String {
    format!("evt_{}", fastrand::u64(..))
}

/// A Twilio form bomb (160k parameters, garbage signature) is refused as malformed,
/// Discord with sixteen signature headers is refused, and genuine webhooks for other
/// sources keep answering while twenty such forgeries arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_expensive_requests_are_refused_cheaply() {
    let h = StoreHandle::new(Backend::Embedded);
    let extra = r#"
[[sources]]
name = "twilio"
provider = "twilio"
secrets = ["twilio-token-a", "twilio-token-b"]
public_url = "https://hooks.example.com/ingest/twilio"
destination = "http://127.0.0.1:9/twilio"

[[sources]]
name = "discord"
provider = "discord"
secret = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
destination = "http://127.0.0.1:9/discord"
"#;
    let gw = Gateway::start(config(&h, extra)).await;
    let store = h.open().await;
    let c = http();
    let bomb = {
        let mut b = "ab=1&".repeat(160_000);
        b.push_str(&format!("pad={}", "x".repeat(1_048_000 - b.len())));
        b
    };
    assert!(bomb.len() <= 1_048_576 && bomb.len() > 1_000_000);
    let twilio_forgery = {
        let c = c.clone();
        let url = format!("{}/ingest/twilio", gw.ingest);
        let bomb = bomb.clone();
        move || {
            c.post(url.clone())
                .header("content-type", "application/x-www-form-urlencoded")
                .header("x-twilio-signature", "AAAAAAAAAAAAAAAAAAAAAAAAAAA=")
                .body(bomb.clone())
                .send()
        }
    };
    let r = twilio_forgery().await.unwrap();
    assert_eq!(r.status(), 401);
    let json: serde_json::Value = r.json().await.unwrap();
    assert_eq!(json["error"], "malformed form body");

    let mut discord = c
        .post(format!("{}/ingest/discord", gw.ingest))
        .header("content-type", "application/json")
        .header("x-signature-timestamp", now_secs().to_string());
    for i in 0..16 {
        discord = discord.header("x-signature-ed25519", format!("{i:02x}").repeat(64));
    }
    let r = discord.body(r#"{"type":2,"id":"1"}"#).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let json: serde_json::Value = r.json().await.unwrap();
    assert_eq!(json["error"], "malformed signature header");

    // Twenty forgeries at once; genuine webhooks keep their pace.
    let forgeries: Vec<_> = (0..20).map(|_| tokio::spawn(twilio_forgery())).collect();
    for _ in 0..10 {
        let started = Instant::now();
        let (st, _) = post_signed(&c, &gw, "github", &event_body("github", &uuid()), &uuid()).await;
        assert_eq!(st, 200);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }
    // All from one client: past its part of the source's body budget (a quarter of
    // the source's half) they are refused 503 before their body is read, the rest
    // 401 once verified.
    let mut verified_and_refused = 0;
    for f in forgeries {
        match f.await.unwrap().unwrap().status().as_u16() {
            401 => verified_and_refused += 1,
            503 => {}
            other => panic!("a forgery answered {other}"),
        }
    }
    assert!(verified_and_refused >= 1);
    assert_eq!(store.count("twilio").await.unwrap(), 0);
    gw.stop().await;
}

/// Mailgun signs a timestamp and a token, not the event. A forged event posted
/// first under a genuine signature block does not make the genuine webhook a
/// duplicate, and deliveries say the body is not signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_body_cannot_preempt_the_genuine_one() {
    let h = StoreHandle::new(Backend::Embedded);
    let upstream = Upstream::ok().await;
    let extra = format!(
        "[[sources]]\nname = \"mailgun\"\nprovider = \"mailgun\"\nsecret = \"key-mailgun-signing\"\ndestination = \"{}\"\n",
        upstream.url
    );
    let gw = Gateway::start(config(&h, &extra)).await;
    let c = http();
    let genuine_event =
        br#"{"event-data":{"id":"ev-1","event":"delivered","recipient":"alice@example.com"}}"#;
    let signed = {
        let reg = hookgate::provider::Registry::builtin().unwrap();
        hookgate::provider::sign::sign(
            reg.get("mailgun").unwrap(),
            &hookgate::config::Secret::new("key-mailgun-signing"),
            &hookgate::provider::sign::SignInput {
                body: genuine_event,
                timestamp: now_secs(),
                id: "tok-0123456789",
                event_type: None,
                method: "POST",
                path: "/",
                url: None,
            },
        )
        .unwrap()
    };
    let genuine = signed.body(genuine_event).to_vec();
    let mut forged: serde_json::Value = serde_json::from_slice(&genuine).unwrap();
    forged["event-data"]["recipient"] = "mallory@example.com".into();
    let forged = serde_json::to_vec(&forged).unwrap();

    let (st, first) = post_raw(&c, &gw.ingest, "mailgun", &forged, &[]).await;
    assert_eq!((st, &first["duplicate"]), (200, &false.into()), "{first}");
    let (st, second) = post_raw(&c, &gw.ingest, "mailgun", &genuine, &[]).await;
    assert_eq!((st, &second["duplicate"]), (200, &false.into()), "{second}");
    assert_ne!(first["id"], second["id"]);
    // The genuine one, delivered again by Mailgun, is a duplicate of itself.
    let (st, again) = post_raw(&c, &gw.ingest, "mailgun", &genuine, &[]).await;
    assert_eq!((st, &again["id"]), (200, &second["id"]));

    upstream
        .wait_for(Duration::from_secs(10), "both deliveries", |r| r.len() >= 2)
        .await;
    for r in &upstream.received() {
        assert_eq!(r.header("hookgate-body-signed").as_deref(), Some("false"));
    }
    gw.stop().await;
}

/// Secrets planted everywhere an operator puts them never come out: not on
/// `/metrics`, not in the log at trace level, not in `check-config`, not in admin
/// answers, not in stored headers, not in what the internal app receives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_secrets_never_come_out() {
    const PASSWORD: &str = "S3cretPW";
    const GITLAB_TOKEN: &str = "glwt-PLANTED-9f1c";
    const AUTH: &str = "PLANTED-BEARER-77";
    const COOKIE: &str = "PLANTED-COOKIE-55";
    const WHSEC: &str = "whsec_PLANTEDmistyped00";
    let h = StoreHandle::new(Backend::Embedded);
    let upstream = Upstream::ok().await;
    let closed = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config_text = format!(
        r#"{store}
[forwarder]
poll_interval = "100ms"
breaker_failures = 1
breaker_cooldown = "200ms"

[[sources]]
name = "gitlab"
provider = "gitlab"
secret_env = "PLANTED_GITLAB_TOKEN"
destination = "{up}"

[[sources]]
name = "leaky"
provider = "hmac"
secret = "{HMAC_SECRET}"
destination = "http://u:{PASSWORD}@127.0.0.1:{closed}/"
[sources.retry]
max_attempts = 2
base = "100ms"
"#,
        store = h.toml(),
        up = upstream.url,
    );
    let cfg = write_config(dir.path(), &config_text);
    let log_path = dir.path().join("stderr.log");
    let env = [
        ("PLANTED_GITLAB_TOKEN", GITLAB_TOKEN),
        ("RUST_LOG", "trace"),
        ("HOOKGATE_LOG__FORMAT", "json"),
    ];
    let mut gw = ChildGateway::spawn(&cfg, &env, &log_path);
    let c = http();

    let body = br#"{"object_kind":"push","ref":"refs/heads/main"}"#;
    let headers = vec![
        ("x-gitlab-token".to_string(), GITLAB_TOKEN.to_string()),
        ("x-gitlab-event".to_string(), "Push Hook".to_string()),
        ("idempotency-key".to_string(), "idem-1".to_string()),
        ("authorization".to_string(), format!("Bearer {AUTH}")),
        ("cookie".to_string(), format!("session={COOKIE}")),
        ("x-forwarded-for".to_string(), "203.0.113.66".to_string()),
    ];
    let (st, json) = post_raw(&c, &gw.ingest, "gitlab", body, &headers).await;
    assert_eq!(st, 200, "{json}");
    let gitlab_id = json["id"].as_str().unwrap().to_string();
    let hmac_body = event_body("leaky", "evt_leaky");
    let hmac_headers = sign_headers("hmac", HMAC_SECRET, &hmac_body, now_secs(), "x");
    let (st, json) = post_raw(&c, &gw.ingest, "leaky", &hmac_body, &hmac_headers).await;
    assert_eq!(st, 200, "{json}");
    let leaky_id = json["id"].as_str().unwrap().to_string();

    // The internal app gets the webhook without the credentials or the proxy header.
    upstream
        .wait_for(Duration::from_secs(10), "the gitlab delivery", |r| {
            !r.is_empty()
        })
        .await;
    let got = upstream.received();
    let r = &got[0];
    for name in [
        "x-gitlab-token",
        "authorization",
        "cookie",
        "x-forwarded-for",
    ] {
        assert!(r.header(name).is_none(), "{name} was passed on");
    }
    assert_eq!(r.header("x-gitlab-event").as_deref(), Some("Push Hook"));
    assert_eq!(r.header("hookgate-body-signed").as_deref(), Some("false"));

    // The leaky destination's breaker opens and the entry goes dead (two attempts).
    let admin = gw.admin.clone();
    wait_until(
        "the leaky entry goes dead",
        Duration::from_secs(15),
        async || {
            get_json(&c, &format!("{admin}/admin/entries/{leaky_id}")).await["status"] == "dead"
        },
    )
    .await;

    let mut outputs: Vec<(String, String)> = Vec::new();
    let metrics = get_text(&c, &format!("{admin}/metrics")).await;
    assert!(
        metrics.contains(&format!("destination=\"http://127.0.0.1:{closed}\"")),
        "the breaker gauge names the destination by origin:\n{metrics}"
    );
    outputs.push(("/metrics".into(), metrics));
    for path in [
        "/admin/entries?limit=100".to_string(),
        format!("/admin/entries/{gitlab_id}"),
        format!("/admin/entries/{leaky_id}"),
        "/admin/sources".to_string(),
        "/admin/stats".to_string(),
    ] {
        let text = get_text(&c, &format!("{admin}{path}")).await;
        outputs.push((path, text));
    }
    let check = std::process::Command::new(bin())
        .arg("check-config")
        .arg("--config")
        .arg(&cfg)
        .env("PLANTED_GITLAB_TOKEN", GITLAB_TOKEN)
        .output()
        .unwrap();
    assert!(check.status.success());
    outputs.push((
        "check-config".into(),
        String::from_utf8_lossy(&check.stdout).into_owned()
            + &String::from_utf8_lossy(&check.stderr),
    ));
    // A secret under a mistyped key: the error names the key, never the value.
    let mistyped = dir.path().join("mistyped.toml");
    std::fs::write(
        &mistyped,
        config_text
            .replace(
                "secret_env = \"PLANTED_GITLAB_TOKEN\"",
                &format!("secrets = \"{GITLAB_TOKEN}\""),
            )
            // A Standard Webhooks secret given as a list where a string belongs.
            .replace(
                &format!("secret = \"{HMAC_SECRET}\""),
                &format!("secret = \"{HMAC_SECRET}\"\ndestination_secret = [\"{WHSEC}\"]"),
            ),
    )
    .unwrap();
    let check = std::process::Command::new(bin())
        .arg("check-config")
        .arg("--config")
        .arg(&mistyped)
        .output()
        .unwrap();
    assert!(!check.status.success());
    let text = String::from_utf8_lossy(&check.stderr).into_owned();
    assert!(text.contains("secrets"), "{text}");
    outputs.push(("check-config, mistyped".into(), text));

    gw.terminate();
    outputs.push(("log".into(), std::fs::read_to_string(&log_path).unwrap()));
    let store = h.open().await;
    let entry = store.get(&gitlab_id).await.unwrap().unwrap();
    let stored: Vec<String> = entry.headers.iter().map(|h| h.name.clone()).collect();
    for name in ["x-gitlab-token", "authorization", "cookie"] {
        assert!(
            !stored.iter().any(|n| n == name),
            "{name} stored: {stored:?}"
        );
    }
    assert!(stored.iter().any(|n| n == "x-forwarded-for"), "{stored:?}");
    outputs.push((
        "stored headers".into(),
        entry
            .headers
            .iter()
            .map(|h| format!("{}: {}\n", h.name, String::from_utf8_lossy(&h.value)))
            .collect(),
    ));
    for (what, text) in &outputs {
        for planted in [PASSWORD, GITLAB_TOKEN, AUTH, COOKIE, WHSEC] {
            assert!(!text.contains(planted), "{what} contains {planted}");
        }
    }
}
