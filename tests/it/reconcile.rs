//! Reconciliation against fake provider APIs on loopback (`fake_api`): what never
//! reached the gateway is recovered once, what it stored is left alone, and the
//! API's failures are counted and backed off without touching ingest.

use std::time::Duration;

use hookgate::config;

use crate::fake_api::{Failure, FakeGitHub, FakeSquare, FakeStripe, Send};
use crate::for_each_store;
use crate::support::*;
use crate::upstream::Upstream;

const GH_SECRET: &str = "gh-hook-secret";
const GH_TOKEN: &str = "ghp_test_token";
const STRIPE_KEY: &str = "sk_test_reconcile";

fn env(var: &str) -> Option<String> {
    match var {
        "GH_TOKEN" => Some(GH_TOKEN.to_string()),
        "STRIPE_KEY" => Some(STRIPE_KEY.to_string()),
        "SQUARE_TOKEN" => Some("sq_token".to_string()),
        _ => None,
    }
}

/// POST `/admin/sources/{source}/reconcile` with `body`, again while the source's
/// periodic pass holds the lease (409): (status, answer).
async fn reconcile(
    gw: &Gateway,
    source: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    wait_until_ok(
        "the lease free",
        Duration::from_secs(15),
        async || match reconcile_once(gw, source, body.clone()).await {
            (409, r) => Err(r.to_string()),
            other => Ok(other),
        },
    )
    .await
}

/// One `POST /admin/sources/{source}/reconcile`: (status, answer).
async fn reconcile_once(
    gw: &Gateway,
    source: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let resp = http()
        .post(format!("{}/admin/sources/{source}/reconcile", gw.admin))
        .json(&body)
        .send()
        .await
        .expect("reconcile request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

/// The entries of `source` with event id `event_id`, as the admin API lists them.
async fn entries_of(gw: &Gateway, source: &str, event_id: &str) -> Vec<serde_json::Value> {
    let page = get_json(
        &http(),
        &format!(
            "{}/admin/entries?source={source}&event_id={event_id}&limit=10",
            gw.admin
        ),
    )
    .await;
    page["entries"].as_array().cloned().unwrap_or_default()
}

fn github_source(name: &str, api: &str, destination: &str, extra: &str) -> String {
    format!(
        r#"
[[sources]]
name = "{name}"
provider = "github"
secret = "{GH_SECRET}"
destination = "{destination}"
[sources.reconcile]
token_env = "GH_TOKEN"
hook = "repos/acme/api/hooks/1"
api_base = "{api}"
interval = "1h"
lookback = "2h"
settle = "0s"
{extra}
"#
    )
}

async fn github(backend: Backend) {
    let up = Upstream::ok().await;
    let gh = FakeGitHub::start(GH_SECRET, GH_TOKEN).await;
    let mut h = StoreHandle::new(backend);
    let name = format!("gh_{}", format!("{backend:?}").to_lowercase());
    // Older than the lookback (2h): never judged, never asked for.
    for i in 0..150 {
        gh.plant_old(&format!("old-{i}"), Duration::from_secs(3 * 3600));
    }
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\n{}",
        h.toml(),
        github_source(&name, &gh.url, &up.url, "")
    );
    let gw = Gateway::start(config::from_toml_str(&text, &env).unwrap()).await;
    gh.target(&gw.ingest, &name);
    // The pass at start judged nothing new: the old ones are past the lookback.
    wait_until("the first pass", Duration::from_secs(10), async || {
        gh.lists() >= 1
    })
    .await;
    for i in 0..205 {
        gh.deliver(&format!("ok-{i}"), Send::Signed).await;
    }
    // On Redis, one the gateway answered 503 for: its store was down.
    let mut store_down = None;
    if backend == Backend::Redis {
        h.redis_mut().stop();
        let id = gh.deliver("store-down", Send::Signed).await;
        assert_eq!(
            gh.state
                .deliveries
                .lock()
                .unwrap()
                .iter()
                .find(|d| d.id == id)
                .map(|d| d.status_code),
            Some(503)
        );
        h.redis_mut().restart();
        gw.wait_ready().await;
        store_down = Some(id);
    }
    // One the gateway never saw (down during a deploy), one it refused (the sender
    // signed with a secret the gateway did not have yet).
    let lost = gh.deliver("lost-in-a-deploy", Send::Nowhere).await;
    let refused = gh.deliver("refused-wrong-secret", Send::WrongSecret).await;
    assert_eq!(
        gh.state
            .deliveries
            .lock()
            .unwrap()
            .iter()
            .find(|d| d.id == refused)
            .map(|d| d.status_code),
        Some(401)
    );
    let lists_before = gh.lists();
    let (status, report) = reconcile(&gw, &name, serde_json::json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["provider"], "github");
    let lost_count = 2 + u64::from(store_down.is_some());
    assert_eq!(report["missing"], lost_count, "{report}");
    assert_eq!(report["asked"], lost_count, "{report}");
    assert_eq!(report["stored"], 205, "{report}");
    // 207 deliveries in the window and 150 past it: three pages, not four.
    assert_eq!(gh.lists() - lists_before, 3, "{:?}", gh.state.calls.seen());
    let mut asked = gh.asked();
    asked.sort();
    let mut want: Vec<i64> = store_down.into_iter().chain([lost, refused]).collect();
    want.sort();
    assert_eq!(asked, want, "only the missing ones are asked for");
    // GitHub redelivered them, signed: stored through ingest.
    let guids: Vec<&str> = store_down
        .map(|_| "store-down")
        .into_iter()
        .chain(["lost-in-a-deploy", "refused-wrong-secret"])
        .collect();
    for guid in guids {
        wait_until_ok(guid, Duration::from_secs(10), async || {
            let found = entries_of(&gw, &name, guid).await;
            if found.len() == 1 {
                Ok(())
            } else {
                Err(format!("{found:?}"))
            }
        })
        .await;
    }
    // The next pass sees the redeliveries stored: recovered, marked and audited.
    let (status, report) = reconcile(&gw, &name, serde_json::json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        (report["redelivered"].as_u64(), report["missing"].as_u64()),
        (Some(lost_count), Some(0)),
        "{report}"
    );
    assert_eq!(gh.asked().len() as u64, lost_count, "nothing asked again");
    let entry = &entries_of(&gw, &name, "lost-in-a-deploy").await[0];
    let id = entry["id"].as_str().unwrap();
    let full = get_json(&http(), &format!("{}/admin/entries/{id}", gw.admin)).await;
    assert_eq!(full["origin"], "redelivered", "{full}");
    let audit = full["audit"].as_array().cloned().unwrap_or_default();
    assert!(
        audit
            .iter()
            .any(|e| e["action"] == "recovered" && e["actor"] == "hookgate"),
        "{full}"
    );
    // The redelivery arrived as GitHub sends it (signed, through ingest), so its
    // first delivery could not say where it came from; a replay of it now does.
    let replayed = http()
        .post(format!("{}/admin/entries/{id}/replay", gw.admin))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(replayed.status().as_u16(), 202);
    wait_until_ok(
        "the replay says it was redelivered",
        Duration::from_secs(10),
        async || {
            let said: Vec<_> = up
                .received()
                .into_iter()
                .filter(|r| String::from_utf8_lossy(&r.body).contains("lost-in-a-deploy"))
                .map(|r| r.header("hookgate-origin"))
                .collect();
            if said.contains(&Some("redelivered".to_string())) {
                Ok(())
            } else {
                Err(format!("{said:?}"))
            }
        },
    )
    .await;
    assert!(
        entries_of(&gw, &name, "ok-3").await[0]
            .get("origin")
            .is_none_or(|o| o == "received")
    );

    // A GUID whose redeliveries keep failing is asked for three times, then left.
    gh.state
        .failing
        .lock()
        .unwrap()
        .insert("keeps-failing".into());
    gh.deliver("keeps-failing", Send::Nowhere).await;
    for pass in 1..=4 {
        let (status, report) = reconcile(&gw, &name, serde_json::json!({})).await;
        assert_eq!(status, 200, "{report}");
        if pass == 4 {
            assert_eq!(report["gave_up"], 1, "{report}");
            assert_eq!(report["asked"], 0, "{report}");
        }
    }
    let asked_failing = gh
        .asked()
        .into_iter()
        .filter(|id| gh.guid_of(*id) == "keeps-failing")
        .count();
    assert_eq!(asked_failing, 3);
    gw.stop().await;
}

for_each_store!(github_deliveries_missed_are_redelivered_once, super::github);

fn stripe_source(name: &str, api: &str, destination: &str) -> String {
    format!(
        r#"
[[sources]]
name = "{name}"
provider = "stripe"
secret = "{STRIPE_SECRET}"
destination = "{destination}"
[sources.reconcile]
api_key_env = "STRIPE_KEY"
endpoint = "we_1"
api_base = "{api}"
interval = "1h"
settle = "0s"
"#
    )
}

async fn stripe(backend: Backend) {
    let up = Upstream::ok().await;
    let stripe = FakeStripe::start(STRIPE_KEY, &["invoice.paid", "customer.created"]).await;
    let h = StoreHandle::new(backend);
    let name = format!("st_{}", format!("{backend:?}").to_lowercase());
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\n{}",
        h.toml(),
        stripe_source(&name, &stripe.url, &up.url)
    );
    let cfg = config::from_toml_str(&text, &env).unwrap();
    let gw = Gateway::start(cfg.clone()).await;
    let c = http();
    let minute = Duration::from_secs(60);
    // Delivered as Stripe sends it: stored, and left alone.
    let delivered = stripe.add("evt_delivered", "invoice.paid", false, 10 * minute);
    let body = serde_json::to_vec(&delivered).unwrap();
    let (status, answer) = post_stripe_signed(&c, &gw.ingest, &name, &body).await;
    assert_eq!(status, 200, "{answer}");
    // Never delivered: admitted.
    stripe.add("evt_missed", "invoice.paid", false, 9 * minute);
    // Not this endpoint's: another type, the other mode.
    stripe.add("evt_other_type", "charge.failed", false, 8 * minute);
    stripe.add("evt_live", "invoice.paid", true, 7 * minute);
    let (status, dry) = reconcile(
        &gw,
        &name,
        serde_json::json!({"since": "1h", "dry_run": true}),
    )
    .await;
    assert_eq!(status, 200, "{dry}");
    assert_eq!(
        (dry["missing"].as_u64(), dry["admitted"].as_u64()),
        (Some(1), Some(1)),
        "{dry}"
    );
    assert!(
        entries_of(&gw, &name, "evt_missed").await.is_empty(),
        "a dry run admits nothing"
    );
    let (status, report) = reconcile(&gw, &name, serde_json::json!({"since": "1h"})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["admitted"], 1, "{report}");
    assert_eq!(report["stored"], 1, "{report}");
    assert_eq!(report["not_for_endpoint"], 2, "{report}");
    assert_eq!(report["missing_ids"], serde_json::json!(["evt_missed"]));
    let admitted = entries_of(&gw, &name, "evt_missed").await;
    assert_eq!(admitted.len(), 1);
    let id = admitted[0]["id"].as_str().unwrap();
    let full = get_json(&c, &format!("{}/admin/entries/{id}", gw.admin)).await;
    assert_eq!(full["origin"], "reconciled", "{full}");
    assert_eq!(full["event_type"], "invoice.paid", "{full}");
    let got = wait_until_ok(
        "the admitted event delivered",
        Duration::from_secs(10),
        async || {
            let got: Vec<_> = up
                .received()
                .into_iter()
                .filter(|r| String::from_utf8_lossy(&r.body).contains("evt_missed"))
                .collect();
            if got.is_empty() {
                Err("none yet".to_string())
            } else {
                Ok(got)
            }
        },
    )
    .await;
    assert_eq!(
        got[0].header("hookgate-origin").as_deref(),
        Some("reconciled")
    );
    assert!(got[0].header("stripe-signature").is_none());
    // Again: nothing new.
    let (_, again) = reconcile(&gw, &name, serde_json::json!({"since": "1h"})).await;
    assert_eq!(
        (again["admitted"].as_u64(), again["stored"].as_u64()),
        (Some(0), Some(2)),
        "{again}"
    );

    // Two gateways on one store reconcile at once (each also passes at its start):
    // every missed event is admitted once.
    if backend != Backend::Embedded {
        for i in 0..20 {
            stripe.add(
                &format!("evt_raced_{i}"),
                "customer.created",
                false,
                5 * minute,
            );
        }
        let second = Gateway::start(cfg).await;
        let (a, b) = tokio::join!(
            reconcile_once(&gw, &name, serde_json::json!({"since": "1h"})),
            reconcile_once(&second, &name, serde_json::json!({"since": "1h"})),
        );
        for (s, r) in [&a, &b] {
            assert!(*s == 200 || *s == 409, "{s} {r}");
        }
        for i in 0..20 {
            let event = format!("evt_raced_{i}");
            wait_until_ok(&event, Duration::from_secs(10), async || match entries_of(
                &gw, &name, &event,
            )
            .await
            .len()
            {
                1 => Ok(()),
                n => Err(format!("{n} entries")),
            })
            .await;
        }
        // Whichever gateway admitted them, the reports never add up to more.
        let admitted: u64 = [&a, &b]
            .iter()
            .map(|(_, r)| r["admitted"].as_u64().unwrap_or(0))
            .sum();
        assert!(admitted <= 20, "{a:?} {b:?}");
        second.stop().await;
    }
    gw.stop().await;
}

for_each_store!(stripe_events_missed_are_admitted_once, super::stripe);

/// The API's 401, 429, 5xx and a slow answer: the pass fails with its kind, is
/// counted, backs off, and ingest answers meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_failures_are_counted_and_never_block_ingest() {
    let up = Upstream::ok().await;
    let stripe = FakeStripe::start(STRIPE_KEY, &["*"]).await;
    let h = StoreHandle::new(Backend::Embedded);
    let text = format!(
        "{}\n{}",
        h.toml(),
        stripe_source("st_faults", &stripe.url, &up.url)
    );
    let gw = Gateway::start(config::from_toml_str(&text, &env).unwrap()).await;
    let c = http();
    // The pass at start, before any failure is queued.
    wait_until("the pass at start", Duration::from_secs(10), async || {
        !stripe.state.calls.seen().is_empty()
    })
    .await;
    let _ = crate::observe::promtool();
    let before = crate::observe::scrape(&c, &gw.admin)
        .await
        .own(&["st_faults"], &[]);
    stripe.add(
        "evt_after_faults",
        "invoice.paid",
        false,
        Duration::from_secs(120),
    );
    let kind_of = |r: &serde_json::Value| r["error"].as_str().unwrap_or_default().to_string();
    stripe.state.calls.fail_next(Failure::status(401));
    let (status, r) = reconcile(&gw, "st_faults", serde_json::json!({})).await;
    assert_eq!(status, 502, "{r}");
    assert!(kind_of(&r).contains("unauthorized"), "{r}");
    // A long Retry-After ends the pass at once, and is kept as the next pass's start.
    stripe.state.calls.fail_next(Failure {
        status: 429,
        headers: vec![("retry-after", "600".into())],
        delay: Duration::ZERO,
    });
    let (status, r) = reconcile(&gw, "st_faults", serde_json::json!({})).await;
    assert_eq!(status, 502, "{r}");
    assert!(kind_of(&r).contains("rate_limited"), "{r}");
    // A short one is waited out within the pass.
    stripe.state.calls.fail_next(Failure {
        status: 429,
        headers: vec![("retry-after", "1".into())],
        delay: Duration::ZERO,
    });
    let (status, r) = reconcile(&gw, "st_faults", serde_json::json!({})).await;
    assert_eq!(status, 200, "{r}");
    // Three 500s: tried three times, then the pass fails.
    for _ in 0..3 {
        stripe.state.calls.fail_next(Failure::status(500));
    }
    let (status, r) = reconcile(&gw, "st_faults", serde_json::json!({})).await;
    assert_eq!(status, 502, "{r}");
    assert!(kind_of(&r).contains("server"), "{r}");
    // A slow API: ingest answers while a pass waits on it.
    stripe.state.calls.fail_next(Failure {
        status: 500,
        headers: Vec::new(),
        delay: Duration::from_secs(2),
    });
    let gw_admin = gw.admin.clone();
    let slow = tokio::spawn(async move {
        http()
            .post(format!("{gw_admin}/admin/sources/st_faults/reconcile"))
            .json(&serde_json::json!({}))
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    for i in 0..20 {
        let body = event_body("stripe", &format!("evt_during_{i}"));
        let started = std::time::Instant::now();
        let (status, answer) = post_stripe_signed(&c, &gw.ingest, "st_faults", &body).await;
        assert_eq!(status, 200, "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "ingest waited on the pass"
        );
    }
    assert_eq!(slow.await.unwrap().unwrap(), 200);
    // `HookgateReconcileFailing` over the scrapes before and after the failures,
    // the last success put at the start of the evaluation (promtool's clock starts
    // at 0): the errors of minute 10 and no success for 30 minutes fire it (after
    // its 5 minutes), until the errors leave the 30-minute window.
    let after = crate::observe::scrape(&c, &gw.admin)
        .await
        .own(&["st_faults"], &[]);
    let at_zero = |m: &std::collections::BTreeMap<String, f64>| {
        m.iter()
            .map(|(k, v)| {
                let v = if k.starts_with("hookgate_reconcile_last_success") {
                    0.0
                } else {
                    *v
                };
                (k.clone(), v)
            })
            .collect::<std::collections::BTreeMap<String, f64>>()
    };
    let (before, after) = (at_zero(&before), at_zero(&after));
    let at = |m: u32, firing: bool| {
        let exp: Vec<serde_json::Value> = if firing {
            vec![serde_json::json!({"exp_labels": {"severity": "warning", "source": "st_faults"}})]
        } else {
            Vec::new()
        };
        serde_json::json!({"eval_time": format!("{m}m"), "alertname": "HookgateReconcileFailing", "exp_alerts": exp})
    };
    crate::observe::promtool_test(vec![serde_json::json!({
        "interval": "1m",
        "input_series": crate::observe::input_series(&[(&before, 10), (&after, 40)]),
        "alert_rule_test": [at(9, false), at(25, false), at(37, true), at(45, false)],
    })]);
    let metrics = get_text(&c, &format!("{}/metrics", gw.admin)).await;
    for kind in ["unauthorized", "rate_limited", "server"] {
        let line =
            format!("hookgate_reconcile_errors_total{{source=\"st_faults\",kind=\"{kind}\"}}");
        assert!(
            metrics.lines().any(|l| l.starts_with(&line)),
            "{line} missing from the scrape"
        );
    }
    gw.stop().await;
}

/// A GitHub App's webhook is read with the App's JWT, which the fake verifies with
/// the App's public key (RS256, `iss` the App's id, `iat` 60 s back, `exp` within 10
/// minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_github_app_reads_its_deliveries_with_its_jwt() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("app.pem");
    let public = dir.path().join("app.pub.pem");
    let ok = std::process::Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&key)
        .arg("2048")
        .output()
        .expect("openssl genrsa");
    assert!(ok.status.success(), "{ok:?}");
    let ok = std::process::Command::new("openssl")
        .args(["rsa", "-pubout", "-in"])
        .arg(&key)
        .arg("-out")
        .arg(&public)
        .output()
        .expect("openssl rsa -pubout");
    assert!(ok.status.success(), "{ok:?}");
    let public_pem = std::fs::read_to_string(&public).unwrap();
    let gh = FakeGitHub::start_app(GH_SECRET, &public_pem, "Iv1.app123").await;
    let up = Upstream::ok().await;
    let h = StoreHandle::new(Backend::Embedded);
    let text = format!(
        r#"{}
[[sources]]
name = "gh_app"
provider = "github"
secret = "{GH_SECRET}"
destination = "{}"
[sources.reconcile]
app_id = "Iv1.app123"
private_key_file = "{}"
hook = "app"
api_base = "{}"
interval = "1h"
settle = "0s"
"#,
        h.toml(),
        up.url,
        key.display(),
        gh.url
    );
    let gw = Gateway::start(config::from_toml_str(&text, &env).unwrap()).await;
    gh.target(&gw.ingest, "gh_app");
    gh.deliver("app-lost", Send::Nowhere).await;
    let (status, report) = reconcile(&gw, "gh_app", serde_json::json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["asked"], 1, "{report}");
    wait_until_ok(
        "the app's redelivery stored",
        Duration::from_secs(10),
        async || {
            let found = entries_of(&gw, "gh_app", "app-lost").await;
            if found.len() == 1 {
                Ok(())
            } else {
                Err(format!("{found:?}"))
            }
        },
    )
    .await;
    // The claims, read back with the public key.
    let jwt = gh.state.calls.auth.lock().unwrap()[0]
        .strip_prefix("Bearer ")
        .unwrap()
        .to_string();
    let key = jsonwebtoken::DecodingKey::from_rsa_pem(public_pem.as_bytes()).unwrap();
    let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    v.set_issuer(&["Iv1.app123"]);
    let claims = jsonwebtoken::decode::<hookgate::reconcile::AppClaims>(&jwt, &key, &v)
        .unwrap()
        .claims;
    let now = now_secs();
    assert!(
        (now - 70..=now - 55).contains(&claims.iat),
        "iat {} now {now}",
        claims.iat
    );
    assert!(
        claims.exp > now && claims.exp <= now + 600,
        "exp {} now {now}",
        claims.exp
    );
    // A wrong key is refused by the API: the pass fails as unauthorized.
    gw.stop().await;
}

/// Square: an event the subscription would have been sent and the store does not
/// hold is admitted from the Events API, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn square_events_missed_are_admitted_once() {
    let up = Upstream::ok().await;
    let sq = FakeSquare::start(&["payment.created", "payment.updated"]).await;
    let h = StoreHandle::new(Backend::Embedded);
    let text = format!(
        r#"{}
[[sources]]
name = "sq"
provider = "square"
secret = "square-signature-key"
public_url = "https://hooks.example.com/ingest/sq"
destination = "{}"
[sources.reconcile]
api_key_env = "SQUARE_TOKEN"
subscription = "wbhk_1"
api_base = "{}"
interval = "1h"
settle = "0s"
"#,
        h.toml(),
        up.url,
        sq.url
    );
    let gw = Gateway::start(config::from_toml_str(&text, &env).unwrap()).await;
    let minute = Duration::from_secs(60);
    sq.add("sq-missed", "payment.created", 5 * minute);
    sq.add("sq-other", "refund.created", 4 * minute);
    for _ in 0..2 {
        let (status, report) = reconcile(&gw, "sq", serde_json::json!({"since": "1h"})).await;
        assert_eq!(status, 200, "{report}");
        assert_eq!(report["not_for_endpoint"], 1, "{report}");
    }
    let found = entries_of(&gw, "sq", "sq-missed").await;
    assert_eq!(found.len(), 1, "{found:?}");
    let auth = sq.state.calls.auth.lock().unwrap().clone();
    assert!(auth.iter().all(|a| a == "Bearer sq_token"), "{auth:?}");
    gw.stop().await;
}

/// `hookgate reconcile` runs a pass through the admin API and says what it found;
/// `--dry-run` recovers nothing, and `--json` is the API's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reconciles_a_source_and_says_what_it_found() {
    let up = Upstream::ok().await;
    let stripe = FakeStripe::start(STRIPE_KEY, &["invoice.paid"]).await;
    let h = StoreHandle::new(Backend::Embedded);
    let text = format!(
        "{}\n{}",
        h.toml(),
        stripe_source("st_cli", &stripe.url, &up.url)
    );
    let gw = Gateway::start(config::from_toml_str(&text, &env).unwrap()).await;
    // The pass at start is over (its lease given back) once a dry run answers.
    let (status, _) = reconcile(&gw, "st_cli", serde_json::json!({"dry_run": true})).await;
    assert_eq!(status, 200);
    stripe.add(
        "evt_cli_missed",
        "invoice.paid",
        false,
        Duration::from_secs(600),
    );
    let cli = |args: &[&str]| {
        let mut all = vec!["reconcile", "--admin-url", &gw.admin, "--source", "st_cli"];
        all.extend_from_slice(args);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .args(&all)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = cli(&["--since", "1h", "--dry-run"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("dry run: source st_cli (stripe)"), "{out}");
    assert!(out.contains("stored 0, missing 1"), "{out}");
    assert!(out.contains("1 would be admitted from the API"), "{out}");
    assert!(out.contains("missing: evt_cli_missed"), "{out}");
    assert!(entries_of(&gw, "st_cli", "evt_cli_missed").await.is_empty());
    let (code, out, err) = cli(&["--since", "1h", "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("the API's answer");
    assert_eq!(report["admitted"], 1, "{report}");
    assert_eq!(entries_of(&gw, "st_cli", "evt_cli_missed").await.len(), 1);
    // A source without [sources.reconcile] is refused, saying why.
    let (code, _, err) = {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .args(["reconcile", "--admin-url", &gw.admin, "--source", "nope"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_ne!(code, Some(0));
    assert!(err.contains("no source \"nope\""), "{err}");
    gw.stop().await;
}
