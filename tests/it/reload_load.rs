//! Reloads under load: 200 webhooks a second to three sources of a gateway process
//! while it delivers, and a reload every second, alternating between two files that
//! add a source, rotate a file secret, change one route's destination and transform
//! and remove another route. No acknowledged webhook is lost, the sources answer
//! nothing but 2xx, the added source answers 200 as soon as the reload call has
//! returned (and 404 once it is gone again), the rotated secret verifies exactly
//! while its file is named, and the removed route's deliveries wait and go when it
//! is back.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::for_each_store;
use crate::support::*;
use crate::upstream::Upstream;

const ROTATED: &str = "whsec_rotated_in";

/// The two files: `with_b` adds source `d`, names the second secret file of `c`,
/// moves `a`'s route `main` to `second` with a transform, and removes `a`'s route
/// `audit`.
struct Files {
    store: String,
    first: String,
    second: String,
    audit: String,
    secrets: [String; 2],
}

impl Files {
    fn text(&self, with_b: bool) -> String {
        let mut s = format!(
            "{}\n[forwarder]\npoll_interval = \"50ms\"\nbreaker_failures = 1000\n[log]\nformat = \"json\"\n",
            self.store
        );
        let plain = |name: &str, dest: &str| {
            format!(
                "[[sources]]\nname = \"{name}\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\ndestination = \"{dest}\"\n"
            )
        };
        s.push_str(&format!(
            "[[sources]]\nname = \"a\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n"
        ));
        match with_b {
            false => s.push_str(&format!(
                "[[sources.routes]]\nname = \"main\"\ndestination = \"{}\"\n\
                 [[sources.routes]]\nname = \"audit\"\ndestination = \"{}\"\n",
                self.first, self.audit
            )),
            true => s.push_str(&format!(
                "[[sources.routes]]\nname = \"main\"\ndestination = \"{}\"\ntransform = \"{{wrapped: .}}\"\n",
                self.second
            )),
        }
        s.push_str(&plain("b", &self.first));
        let files: Vec<String> = match with_b {
            false => vec![format!("{:?}", self.secrets[0])],
            true => self.secrets.iter().map(|p| format!("{p:?}")).collect(),
        };
        s.push_str(&format!(
            "[[sources]]\nname = \"c\"\nprovider = \"stripe\"\nsecret_file = [{}]\ndestination = \"{}\"\n",
            files.join(", "),
            self.first
        ));
        if with_b {
            s.push_str(&plain("d", &self.first));
        }
        s
    }
}

/// A Stripe event `id` to `source` at `base`, signed with `secret`: the status and
/// the entry id.
async fn post(
    c: &reqwest::Client,
    base: &str,
    source: &str,
    secret: &str,
    id: &str,
) -> (u16, Option<String>) {
    let body = event_body("stripe", id);
    let headers = sign_headers("stripe", secret, &body, now_secs(), id);
    let (status, json) = post_raw(c, base, source, &body, &headers).await;
    (status, json["id"].as_str().map(String::from))
}

async fn under_load(backend: Backend, seconds: u64) {
    let h = StoreHandle::new(backend);
    let (first, second, audit) = (
        Upstream::ok().await,
        Upstream::ok().await,
        Upstream::ok().await,
    );
    let dir = tempfile::tempdir().unwrap();
    let secrets = [dir.path().join("c.secret"), dir.path().join("c.rotated")];
    std::fs::write(&secrets[0], STRIPE_SECRET).unwrap();
    std::fs::write(&secrets[1], ROTATED).unwrap();
    let files = Files {
        store: h.toml(),
        first: first.url.clone(),
        second: second.url.clone(),
        audit: audit.url.clone(),
        secrets: secrets.map(|p| p.display().to_string()),
    };
    let cfg = write_config(dir.path(), &files.text(false));
    let mut gw = ChildGateway::spawn(&cfg, &[], &dir.path().join("stderr.log"));
    let c = http_builder()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();

    // The load: 200 a second, round-robin over a, b and c, each request on its own
    // task at its own time.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (c, base, stop) = (c.clone(), gw.ingest.clone(), stop.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            let mut sent = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                tick.tick().await;
                let source = ["a", "b", "c"][(n % 3) as usize];
                let (c, base) = (c.clone(), base.clone());
                let id = format!("evt_load_{n}");
                sent.push(tokio::spawn(async move {
                    let (status, entry) = post(&c, &base, source, STRIPE_SECRET, &id).await;
                    (source, id, status, entry)
                }));
                n += 1;
            }
            let mut out = Vec::new();
            for t in sent {
                out.push(t.await.expect("a request task"));
            }
            out
        })
    };

    // A reload a second, `seconds` of them: counted, not timed, so that a loaded
    // machine makes the run longer, not the reloads fewer.
    let mut reloads = 0u32;
    while u64::from(reloads) < seconds {
        let with_b = reloads.is_multiple_of(2);
        std::fs::write(&cfg, files.text(with_b)).unwrap();
        let r = c
            .post(format!("{}/admin/config/reload", gw.admin))
            .send()
            .await
            .expect("reload");
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        assert_eq!(status, 200, "reload {reloads}: {body}");
        reloads += 1;
        // In force as soon as the call returned.
        let probe = format!("evt_probe_{reloads}");
        let (d, _) = post(&c, &gw.ingest, "d", STRIPE_SECRET, &probe).await;
        let (rotated, _) = post(&c, &gw.ingest, "c", ROTATED, &probe).await;
        match with_b {
            true => {
                assert_eq!(d, 200, "reload {reloads}: the added source");
                assert_eq!(rotated, 200, "reload {reloads}: the rotated-in secret");
            }
            false => {
                assert_eq!(d, 404, "reload {reloads}: the removed source");
                assert_eq!(rotated, 401, "reload {reloads}: the rotated-out secret");
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // End on the first file, where route `audit` exists again.
    if !reloads.is_multiple_of(2) {
        std::fs::write(&cfg, files.text(false)).unwrap();
        let r = c
            .post(format!("{}/admin/config/reload", gw.admin))
            .send()
            .await
            .expect("reload");
        assert_eq!(r.status().as_u16(), 200);
    }
    stop.store(true, Ordering::SeqCst);
    let results = load.await.unwrap();

    let refused: Vec<_> = results.iter().filter(|r| r.2 != 200).take(10).collect();
    assert!(
        refused.is_empty(),
        "non-2xx answers under reloads: {refused:?}"
    );
    let acked: BTreeSet<String> = results.iter().filter_map(|r| r.3.clone()).collect();
    assert_eq!(acked.len(), results.len());
    // Every acknowledged webhook delivered: a's through `main` (at either of its
    // destinations), b's and c's at the first.
    let ids = |up: &Upstream| -> BTreeSet<String> {
        up.received()
            .iter()
            .filter_map(|r| r.header("webhook-id"))
            .collect()
    };
    wait_until(
        "every acknowledged webhook delivered",
        Duration::from_secs(60),
        async || {
            let got: BTreeSet<String> = ids(&first).union(&ids(&second)).cloned().collect();
            acked.is_subset(&got)
        },
    )
    .await;
    // And nothing is left behind: no delivery pending or dead, the removed route's
    // kept ones included (they went once it was back).
    let admin = |q: &'static str| {
        let (c, base) = (c.clone(), gw.admin.clone());
        async move { get_json(&c, &format!("{base}/admin/entries?{q}&limit=5")).await }
    };
    wait_until("no delivery pending", Duration::from_secs(60), async || {
        admin("status=pending").await["entries"]
            .as_array()
            .is_some_and(|e| e.is_empty())
    })
    .await;
    let dead = admin("status=dead").await;
    assert_eq!(dead["entries"].as_array().map(Vec::len), Some(0), "{dead}");
    assert!(audit.count() > 0, "route audit delivered");
    let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
    for secret in [STRIPE_SECRET, ROTATED] {
        assert!(!log.contains(secret), "a secret in the log");
    }
    gw.kill();
}

async fn reloads_under_load(backend: Backend) {
    // A minute on the embedded store; on the servers, a third of it (the test
    // suite runs every store).
    let seconds = match backend {
        Backend::Embedded => 60,
        _ => 20,
    };
    under_load(backend, seconds).await;
}
for_each_store!(
    a_reload_every_second_under_load_loses_nothing_and_refuses_nothing,
    super::reloads_under_load
);
