//! What the queue-destination tests (`nats_destination`, `amqp_destination`) share:
//! the source they configure, its webhooks, waiting for a dead-letter group, and
//! the steady load a broker is SIGKILLed under.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookgate::config::{self, Config};

use crate::admin::Admin;
use crate::forward::{DEST_SECRET, FAST};
use crate::support::*;

/// A Stripe source `shop` (with more keys `source_keys`) whose routes are `routes`
/// (each name, destination, more keys), its deliveries signed, retried fast.
pub fn config_text(h: &StoreHandle, routes: &[(&str, &str, &str)], source_keys: &str) -> String {
    let mut text = format!(
        "{}\n{FAST}\n[[sources]]\nname = \"shop\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         destination_secret = \"{DEST_SECRET}\"\n{source_keys}\n\
         [sources.retry]\nbase = \"100ms\"\ncap = \"500ms\"\n",
        h.toml()
    );
    for (name, dest, keys) in routes {
        text.push_str(&format!(
            "[[sources.routes]]\nname = \"{name}\"\ndestination = \"{dest}\"\n{keys}\n"
        ));
    }
    text
}

pub fn config(h: &StoreHandle, routes: &[(&str, &str, &str)]) -> Config {
    config::from_toml_str(&config_text(h, routes, ""), &|_| None).expect("config")
}

/// A Stripe payment event of `customer` (the ordering key the tests use).
pub fn payment(id: &str, customer: &str) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","type":"payment_intent.succeeded","data":{{"object":{{"id":"pi_{id}","customer":"{customer}","amount":2050}}}}}}"#
    )
}

/// Post `body` to `shop`, signed; the entry id of its 200.
pub async fn post(gw: &Gateway, body: &str) -> String {
    let (st, json) = post_stripe_signed(&http(), &gw.ingest, "shop", body.as_bytes()).await;
    assert_eq!(st, 200, "{json}");
    json["id"].as_str().expect("entry id").to_string()
}

/// Wait until `route` of `shop` has one dead-letter group of `count`, and return it.
pub async fn dead_group(admin: &Admin, route: &str, count: u64) -> serde_json::Value {
    wait_until_ok(
        &format!("a dead-letter group of {count} on {route}"),
        Duration::from_secs(30),
        async || {
            let (_, groups) = admin
                .call(
                    "GET",
                    &format!("/admin/dead-letters?source=shop&route={route}"),
                    None,
                )
                .await;
            let g = groups["groups"]
                .as_array()
                .and_then(|gs| gs.first().cloned())
                .ok_or_else(|| format!("no group yet: {groups}"))?;
            if g["count"] == count {
                Ok(g)
            } else {
                Err(format!("{groups}"))
            }
        },
    )
    .await
}

/// 200 signed webhooks a second into `shop`, 600 in all, each posted on its own
/// task: what was sent, and the entry ids of those acknowledged.
pub struct Load {
    acked: Arc<Mutex<Vec<String>>>,
    sent: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Load {
    pub const TOTAL: usize = 600;

    pub fn start(ingest: &str) -> Load {
        let acked: Arc<Mutex<Vec<String>>> = Arc::default();
        let sent = Arc::new(AtomicUsize::new(0));
        let (a, s, ingest) = (acked.clone(), sent.clone(), ingest.to_string());
        let task = tokio::spawn(async move {
            let c = http();
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            let mut posts = Vec::new();
            for i in 0..Load::TOTAL {
                tick.tick().await;
                let (c, acked, ingest) = (c.clone(), a.clone(), ingest.clone());
                s.fetch_add(1, Ordering::Relaxed);
                posts.push(tokio::spawn(async move {
                    let body = payment(&format!("evt_k{i}"), "cus_a");
                    let (st, json) = post_stripe_signed(&c, &ingest, "shop", body.as_bytes()).await;
                    if st == 200 {
                        acked
                            .lock()
                            .unwrap()
                            .push(json["id"].as_str().unwrap().to_string());
                    }
                }));
            }
            for p in posts {
                let _ = p.await;
            }
        });
        Load { acked, sent, task }
    }

    /// Wait until `more` webhooks more than now were sent (the load went on for
    /// `more` / 200 seconds).
    pub async fn goes_on_for(&self, more: usize) {
        let from = self.sent.load(Ordering::Relaxed);
        wait_until("the load going on", Duration::from_secs(20), async || {
            self.sent.load(Ordering::Relaxed) >= from + more
        })
        .await;
    }

    /// Wait for the last answer; the entry ids acknowledged (all of them, or the
    /// test fails).
    pub async fn finish(self) -> Vec<String> {
        self.task.await.expect("the load");
        let acked = self.acked.lock().unwrap().clone();
        assert_eq!(
            acked.len(),
            Load::TOTAL,
            "ingest acknowledged every webhook"
        );
        acked
    }
}

/// A child gateway whose route `q` of `shop` reaches `destination` as `hook` with
/// the wrong password `wrong` (by reference, `DEST_USER` and `DEST_PASSWORD`), two
/// webhooks posted and dead as `auth-refused`.
pub struct Refused {
    pub gw: ChildGateway,
    pub entries: Vec<String>,
    pub group: serde_json::Value,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Refused {
    pub async fn start(h: &StoreHandle, destination: &str, wrong: &str) -> Refused {
        let dir = tempfile::tempdir().unwrap();
        let cfg_path = write_config(
            dir.path(),
            &config_text(
                h,
                &[(
                    "q",
                    destination,
                    "destination_user_env = \"DEST_USER\"\ndestination_password_env = \"DEST_PASSWORD\"\n\
                     [sources.routes.retry]\nmax_attempts = 2",
                )],
                "",
            ),
        );
        let log = dir.path().join("stderr.log");
        let gw = ChildGateway::spawn(
            &cfg_path,
            &[
                ("DEST_USER", "hook"),
                ("DEST_PASSWORD", wrong),
                ("RUST_LOG", "debug"),
            ],
            &log,
        );
        let c = http();
        let mut entries = Vec::new();
        for i in 0..2 {
            let body = payment(&format!("evt_c{i}"), "cus_a");
            let (st, json) = post_stripe_signed(&c, &gw.ingest, "shop", body.as_bytes()).await;
            assert_eq!(st, 200, "{json}");
            entries.push(json["id"].as_str().unwrap().to_string());
        }
        let group = dead_group(&Admin::at(&gw.admin), "q", 2).await;
        assert_eq!(group["failure"], "auth-refused", "{group}");
        Refused {
            gw,
            entries,
            group,
            log,
            _dir: dir,
        }
    }

    /// No credential in the group, the entries, the metrics, the routes or any log
    /// line, and the log says why the deliveries failed.
    pub async fn assert_never_shown(&self, credentials: &[&str]) {
        let admin = Admin::at(&self.gw.admin);
        let mut shown = vec![self.group.to_string()];
        for e in &self.entries {
            let (_, entry) = admin
                .call("GET", &format!("/admin/entries/{e}"), None)
                .await;
            shown.push(entry.to_string());
        }
        shown.push(get_text(&http(), &format!("{}/metrics", self.gw.admin)).await);
        shown.push(admin.call("GET", "/admin/routes", None).await.1.to_string());
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert!(log.contains("auth-refused"), "the log says why");
        shown.push(log);
        for text in &shown {
            for c in credentials {
                assert!(!text.contains(c), "a credential shown: {text}");
            }
        }
    }
}

/// `hookgate check-config --connect -c path`: its exit code, stdout and stderr.
pub fn check_config_connect(path: &std::path::Path) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["check-config", "--connect", "-c"])
        .arg(path)
        .output()
        .expect("run hookgate");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
