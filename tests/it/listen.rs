//! `hookgate listen`, the binary itself, between a gateway with a pull route and a
//! fake app: every webhook reaches the app once, byte for byte and signed as in
//! production, each customer's in the order it arrived, and one the app refuses is
//! nacked and delivered again, so nothing is lost while the app is away.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use hookgate::provider::Registry;
use hookgate::store::Status;

use crate::forward::DEST_SECRET;
use crate::pull::{TOKEN, pull_config, start};
use crate::queues::{payment, post};
use crate::support::*;
use crate::upstream::{Received, Reply, Upstream};

/// The app's webhook path.
const PATH: &str = "/webhooks/stripe";

/// `hookgate listen --json` as a child process, its stdout and stderr in files;
/// killed when dropped.
struct Listen {
    child: Child,
    dir: tempfile::TempDir,
}

impl Listen {
    fn spawn(gw: &Gateway, app: &Upstream) -> Listen {
        Self::spawn_to(gw, &app.url)
    }

    /// `listen` forwarding to `{base}{PATH}`.
    fn spawn_to(gw: &Gateway, base: &str) -> Listen {
        Self::spawn_with(gw, base, &[])
    }

    /// `listen` forwarding to `{base}{PATH}`, with more arguments.
    fn spawn_with(gw: &Gateway, base: &str, more: &[&str]) -> Listen {
        let dir = tempfile::tempdir().expect("tempdir");
        let stdout = std::fs::File::create(dir.path().join("stdout")).expect("stdout file");
        let stderr = std::fs::File::create(dir.path().join("stderr")).expect("stderr file");
        let child = Command::new(bin())
            .args(["listen", "--from", &gw.ingest, "--route", "shop/dev"])
            .args(["--to", &format!("{base}{PATH}"), "--json"])
            .args(more)
            .env("HOOKGATE_PULL_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("spawn hookgate listen");
        Listen { child, dir }
    }

    /// The JSON lines written so far (complete ones).
    fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.path().join("stdout")).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// Wait until `count` lines are written; they are answered.
    async fn wait_for_lines(&self, count: usize) -> Vec<Value> {
        wait_until_ok(
            &format!("{count} lines from hookgate listen"),
            Duration::from_secs(120),
            async || {
                let lines = self.lines();
                if lines.len() >= count {
                    Ok(lines)
                } else {
                    Err(format!("{} lines; stderr:\n{}", lines.len(), self.stderr()))
                }
            },
        )
        .await
    }

    /// SIGTERM, and its exit status once it has exited.
    async fn terminate(&mut self) -> ExitStatus {
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("kill -TERM");
        assert!(sent.success());
        wait_until_ok(
            "hookgate listen to exit after SIGTERM",
            Duration::from_secs(20),
            async || match self.child.try_wait() {
                Ok(Some(status)) => Ok(status),
                Ok(None) => Err("still running".to_string()),
                Err(e) => Err(e.to_string()),
            },
        )
        .await
    }
}

impl Drop for Listen {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The customer a payment the app received is for.
fn customer(r: &Received) -> String {
    let body: Value = serde_json::from_slice(&r.body).expect("a JSON body");
    body["data"]["object"]["customer"]
        .as_str()
        .expect("a customer")
        .to_string()
}

/// Assert that every request the app answered `status` verifies as Standard
/// Webhooks with the route's destination secret, over the exact bytes it received.
fn assert_signed(received: &[Received], status: u16) {
    let reg = Registry::builtin().unwrap();
    let sw = hookgate::provider::Verifier::new(
        reg.get("standard-webhooks").unwrap().clone(),
        &[hookgate::config::Secret::new(DEST_SECRET)],
    )
    .unwrap();
    for r in received.iter().filter(|r| r.answered == status) {
        assert_eq!(r.header("hookgate-source").as_deref(), Some("shop"));
        let req = hookgate::provider::Request {
            method: "POST",
            path: PATH,
            url: None,
            headers: &r.headers,
            body: &r.body,
        };
        sw.verify(req, now_secs()).unwrap_or_else(|e| {
            panic!(
                "webhook-signature of {:?} does not verify: {e}",
                r.header("webhook-id")
            )
        });
    }
}

/// Assert that the requests the app answered 200 hold each customer's entries in
/// the order they were posted (`posted`: entry id and customer).
fn assert_in_order(received: &[Received], posted: &[(String, String)]) {
    let mut expected: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, cus) in posted {
        expected.entry(cus).or_default().push(id);
    }
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in received.iter().filter(|r| r.answered == 200) {
        got.entry(customer(r))
            .or_default()
            .push(r.header("webhook-id").expect("webhook-id"));
    }
    for (cus, ids) in &expected {
        assert_eq!(
            got.get(*cus)
                .map(|v| v.iter().map(String::as_str).collect::<Vec<_>>()),
            Some(ids.clone()),
            "customer {cus} out of order"
        );
    }
}

/// Each id of `ids` exactly once in `seen`, and nothing else.
fn assert_once(seen: &[String], ids: &[String], what: &str) {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for id in seen {
        *counts.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{what}: seen more than once: {twice:?}");
    let expected: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let got: HashSet<&str> = counts.keys().copied().collect();
    assert_eq!(got, expected, "{what}");
}

/// 1,000 webhooks, half posted before `listen` starts and half while it waits: the
/// app receives each once, signed, each customer's in order; stdout names each
/// entry once, acked; the store has each delivered; SIGTERM exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_forwards_each_delivery_once_signed_and_in_order() {
    const N: usize = 1000;
    let h = StoreHandle::new(Backend::Embedded);
    let gw = start(&pull_config(&h, "", "")).await;
    let app = Upstream::ok().await;
    let mut posted = Vec::new();
    let mut listen = None;
    for n in 0..N {
        if n == N / 2 {
            listen = Some(Listen::spawn(&gw, &app));
        }
        let cus = format!("cus_{}", n % 8);
        let id = post(&gw, &payment(&format!("evt_l{n}"), &cus)).await;
        posted.push((id, cus));
    }
    let mut listen = listen.expect("listen started");
    let ids: Vec<String> = posted.iter().map(|(id, _)| id.clone()).collect();
    let lines = listen.wait_for_lines(N).await;
    let received = app.received();
    assert_once(&app.webhook_ids(None), &ids, "the app's requests");
    assert_signed(&received, 200);
    assert_in_order(&received, &posted);
    assert!(received.iter().all(|r| r.answered == 200));

    assert_eq!(lines.len(), N, "{lines:?}");
    for l in &lines {
        assert_eq!(l["result"], "acked", "{l}");
        assert_eq!(l["status"], 200, "{l}");
        assert_eq!(l["attempt"], 1, "{l}");
        assert_eq!(l["event_type"], "payment_intent.succeeded", "{l}");
        assert!(l["latency_ms"].is_u64() && l["time"].is_string(), "{l}");
    }
    let named: Vec<String> = lines
        .iter()
        .map(|l| l["entry_id"].as_str().expect("entry_id").to_string())
        .collect();
    assert_once(&named, &ids, "stdout's lines");

    let store = h.open().await;
    for id in &ids {
        let entry = store.get(id).await.unwrap().unwrap();
        assert_eq!(entry.status, Status::Delivered, "{id}");
    }
    store.close().await;

    let status = listen.terminate().await;
    assert!(status.success(), "{status}; stderr:\n{}", listen.stderr());
    assert_eq!(app.count(), N, "nothing more after the last ack");
    gw.stop().await;
}

/// The app answers 500 to the first attempt of each delivery and 200 to the next:
/// each is nacked, handed out again, and delivered once on a 2xx, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_nacks_what_the_app_refuses_and_it_is_delivered_again() {
    const N: usize = 6;
    let h = StoreHandle::new(Backend::Embedded);
    let gw = start(&pull_config(&h, "", "")).await;
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let app = Upstream::scripted(move |headers, _| {
        let id = headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let first = seen.lock().unwrap().insert(id);
        Reply::Status(if first { 500 } else { 200 })
    })
    .await;
    let mut posted = Vec::new();
    for n in 0..N {
        let cus = format!("cus_{}", n % 2);
        let id = post(&gw, &payment(&format!("evt_r{n}"), &cus)).await;
        posted.push((id, cus));
    }
    let ids: Vec<String> = posted.iter().map(|(id, _)| id.clone()).collect();
    let mut listen = Listen::spawn(&gw, &app);
    let lines = listen.wait_for_lines(2 * N).await;

    let received = app.received();
    assert_once(&app.webhook_ids(Some(200)), &ids, "the app's 200s");
    assert_once(&app.webhook_ids(Some(500)), &ids, "the app's 500s");
    assert_eq!(received.len(), 2 * N);
    assert_signed(&received, 200);
    assert_in_order(&received, &posted);

    assert_eq!(lines.len(), 2 * N, "{lines:?}");
    for id in &ids {
        let of: Vec<&Value> = lines.iter().filter(|l| l["entry_id"] == **id).collect();
        assert_eq!(of.len(), 2, "{id}: {of:?}");
        assert_eq!(
            (&of[0]["status"], &of[0]["result"], &of[0]["attempt"]),
            (&Value::from(500), &Value::from("nacked"), &Value::from(1)),
            "{id}: {of:?}"
        );
        assert!(of[0]["retry_in"].is_string(), "{of:?}");
        assert_eq!(
            (&of[1]["status"], &of[1]["result"], &of[1]["attempt"]),
            (&Value::from(200), &Value::from("acked"), &Value::from(2)),
            "{id}: {of:?}"
        );
    }

    let store = h.open().await;
    for id in &ids {
        let entry = store.get(id).await.unwrap().unwrap();
        assert_eq!(entry.status, Status::Delivered, "{id}");
        assert_eq!(store.attempts(id).await.unwrap().len(), 2, "{id}");
    }
    store.close().await;

    listen.terminate().await;
    gw.stop().await;
}

/// An app that is not running spends no attempt: `listen` polls nothing until it
/// accepts connections, then each delivery reaches it on its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_waits_for_an_app_that_is_not_running() {
    const N: usize = 4;
    let h = StoreHandle::new(Backend::Embedded);
    let gw = start(&pull_config(&h, "", "")).await;
    let port = free_port();
    let mut listen = Listen::spawn_to(&gw, &format!("http://127.0.0.1:{port}"));
    let mut posted = Vec::new();
    for n in 0..N {
        let cus = format!("cus_{}", n % 2);
        let id = post(&gw, &payment(&format!("evt_w{n}"), &cus)).await;
        posted.push((id, cus));
    }
    wait_until_ok(
        "listen to say it waits for the app",
        Duration::from_secs(20),
        async || {
            let err = listen.stderr();
            if err.contains("does not accept connections") {
                Ok(())
            } else {
                Err(err)
            }
        },
    )
    .await;
    let app = Upstream::on_port(port, |_, _| Reply::Status(200)).await;
    let lines = listen.wait_for_lines(N).await;
    let ids: Vec<String> = posted.iter().map(|(id, _)| id.clone()).collect();
    assert_once(&app.webhook_ids(None), &ids, "the app's requests");
    assert_in_order(&app.received(), &posted);
    for l in &lines {
        assert_eq!(
            (&l["result"], &l["attempt"]),
            (&Value::from("acked"), &Value::from(1)),
            "{l}"
        );
    }
    listen.terminate().await;
    gw.stop().await;
}

/// What `listen` refuses before it forwards anything: a `--route` that is not
/// `source/route` (usage, 2), an unset token variable (1, naming it), and a token
/// the gateway refuses (401: 1, saying the token is wrong for the route, and never
/// printing it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_refuses_a_bad_route_an_unset_token_and_a_wrong_one() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = start(&pull_config(&h, "", "")).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |route: &str, token: Option<&str>| {
        let (out_path, err_path) = (dir.path().join("out"), dir.path().join("err"));
        let mut cmd = Command::new(bin());
        cmd.args(["listen", "--from", &gw.ingest, "--route", route])
            .args(["--to", "http://127.0.0.1:9/hook"])
            .args(["--token-env", "LISTEN_TEST_TOKEN"])
            .env_remove("LISTEN_TEST_TOKEN")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).expect("stdout file"))
            .stderr(std::fs::File::create(&err_path).expect("stderr file"));
        if let Some(t) = token {
            cmd.env("LISTEN_TEST_TOKEN", t);
        }
        let mut child = cmd.spawn().expect("spawn hookgate listen");
        let exited = poll_until_blocking(Duration::from_secs(20), || {
            child.try_wait().expect("wait").ok_or(())
        });
        let _ = child.kill();
        let _ = child.wait();
        let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
        let status = exited.unwrap_or_else(|()| {
            panic!("listen --route {route} kept running: {}", read(&err_path))
        });
        (status.code(), read(&out_path), read(&err_path))
    };
    let (code, _, err) = tokio::task::block_in_place(|| run("shop", Some(TOKEN)));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("source/route"), "{err}");
    let (code, _, err) = tokio::task::block_in_place(|| run("shop/dev", None));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("LISTEN_TEST_TOKEN is not set"), "{err}");
    let wrong = "wrong-token-9876543210";
    let (code, out, err) = tokio::task::block_in_place(|| run("shop/dev", Some(wrong)));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("refused the token in LISTEN_TEST_TOKEN for route shop/dev (401)"),
        "{err}"
    );
    assert!(!err.contains(wrong) && !out.contains(wrong), "{err}");
    gw.stop().await;
}

/// `kill -<signal>` to a child.
fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(sent.success(), "kill -{signal}");
}

/// A `listen` SIGSTOPped while its long poll waits is handed deliveries it cannot
/// take; while it is stopped for longer than its 5 s lease, webhooks keep arriving
/// and a second `listen` takes over (the first's leases expire). Continued, the
/// first forwards none of what it held after its lease: every webhook reaches the
/// app, each customer's in order, and each is acknowledged once over both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_listen_is_taken_over_and_nothing_is_lost_or_reordered() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = start(&pull_config(&h, "", "")).await;
    let app = Upstream::ok().await;
    let first = Listen::spawn_with(&gw, &app.url, &["--lease", "5s"]);
    let mut posted = Vec::new();
    for n in 0..4 {
        let cus = format!("cus_{}", n % 4);
        posted.push((
            post(&gw, &payment(&format!("evt_stop{n}"), &cus)).await,
            cus,
        ));
    }
    first.wait_for_lines(4).await;
    // Stopped while its next long poll waits: what arrives now is handed to it.
    signal(&first.child, "STOP");
    for n in 4..24 {
        let cus = format!("cus_{}", n % 4);
        posted.push((
            post(&gw, &payment(&format!("evt_stop{n}"), &cus)).await,
            cus,
        ));
    }
    let second = Listen::spawn(&gw, &app);
    let ids: Vec<String> = posted.iter().map(|(id, _)| id.clone()).collect();
    wait_until_ok(
        "every webhook at the app",
        Duration::from_secs(60),
        async || {
            let got: HashSet<String> = app.webhook_ids(None).into_iter().collect();
            let missing = ids.iter().filter(|id| !got.contains(*id)).count();
            if missing == 0 {
                Ok(())
            } else {
                Err(format!(
                    "{missing} missing; second's stderr:\n{}",
                    second.stderr()
                ))
            }
        },
    )
    .await;
    signal(&first.child, "CONT");
    // The first had leases (its poll was answered while it was stopped).
    wait_until_ok(
        "the first to give up what it held",
        Duration::from_secs(30),
        async || {
            let err = first.stderr();
            if err.contains("lease ended") || err.contains("no longer held its lease") {
                Ok(())
            } else {
                Err(err)
            }
        },
    )
    .await;
    let received = app.received();
    assert_once(&app.webhook_ids(None), &ids, "the app's requests");
    assert_signed(&received, 200);
    assert_in_order(&received, &posted);
    let acked: Vec<String> = first
        .lines()
        .iter()
        .chain(second.lines().iter())
        .filter(|l| l["result"] == "acked")
        .map(|l| l["entry_id"].as_str().expect("entry_id").to_string())
        .collect();
    assert_once(&acked, &ids, "acks over both listeners");
    gw.stop().await;
}
