//! Transformations end to end, on every store, against real upstreams: a route's
//! program shapes what its app receives (and the signature covers that), an
//! endless program is cut at its deadline into its own dead-letter group while the
//! other routes deliver, and after the program is fixed and the gateway restarted,
//! replaying the group sends the new output with the same `webhook-id`; a program
//! with no output skips the delivery (`filtered`). The worker pool itself is driven
//! directly too: programs that never end, recurse without bound or allocate without
//! end cost one run each, never the pool.

use std::time::{Duration, Instant};

use hookgate::config::{self, Config};
use hookgate::forward::request::{decode_destination_secret, sign};
use hookgate::store::Status;
use hookgate::transform::{Pool, Ran, Run, TransformError};
use serde_json::json;

use crate::for_each_store;
use crate::forward::{DEST_SECRET, FAST};
use crate::support::*;
use crate::upstream::{Received, Upstream};

/// A Stripe source `shop` with one plain route and one route per `(name, url, keys)`.
fn config(h: &StoreHandle, plain: &str, routes: &[(&str, &str, &str)]) -> Config {
    let mut text = format!(
        "{}\n{FAST}\n[[sources]]\nname = \"shop\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         destination_secret = \"{DEST_SECRET}\"\n\
         [sources.retry]\nbase = \"100ms\"\ncap = \"1s\"\n\
         [[sources.routes]]\nname = \"raw\"\ndestination = \"{plain}\"\n",
        h.toml()
    );
    for (name, url, keys) in routes {
        text.push_str(&format!(
            "[[sources.routes]]\nname = \"{name}\"\ndestination = \"{url}\"\n{keys}\n"
        ));
    }
    config::from_toml_str(&text, &|_| None).expect("config")
}

fn payment(id: &str, kind: &str) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","type":"{kind}","data":{{"object":{{"id":"pi_{id}","amount":2050,"currency":"eur"}}}}}}"#
    )
}

/// The request's `webhook-signature` is the Standard Webhooks signature of its body.
fn assert_signed(r: &Received) {
    let key = decode_destination_secret(DEST_SECRET);
    let id = r.header("webhook-id").unwrap();
    let ts: i64 = r.header("webhook-timestamp").unwrap().parse().unwrap();
    assert_eq!(
        r.header("webhook-signature").unwrap(),
        sign(&key, &id, ts, &r.body),
        "the signature covers the body sent"
    );
}

async fn shapes_what_the_app_receives(backend: Backend) {
    let h = StoreHandle::new(backend);
    let raw = Upstream::ok().await;
    let flat = Upstream::ok().await;
    let form = Upstream::ok().await;
    let cfg = config(
        &h,
        &raw.url,
        &[
            (
                "flat",
                &flat.url,
                "transform = '{order: .data.object.id, cents: .data.object.amount, kind: .type, source: $meta.source, route: $meta.route, event: $meta.event_id, sig: ($meta.headers[\"stripe-signature\"] != null)}'",
            ),
            (
                "form",
                &form.url,
                "transform = '{body: {order: .data.object.id, currency: .data.object.currency}, content_type: \"application/x-www-form-urlencoded\", headers: {\"X-Legacy-Kind\": .type}}'\ntransform_output = \"envelope\"",
            ),
        ],
    );
    let gw = Gateway::start(cfg).await;
    let c = http();
    let body = payment("evt_t1", "payment_intent.succeeded");
    let (st, _) = post_stripe_signed(&c, &gw.ingest, "shop", body.as_bytes()).await;
    assert_eq!(st, 200);
    for (up, what) in [(&raw, "raw"), (&flat, "flat"), (&form, "form")] {
        up.wait_for(Duration::from_secs(10), what, |r| !r.is_empty())
            .await;
    }
    let r = &raw.received()[0];
    assert_eq!(
        r.body,
        body.as_bytes(),
        "the plain route gets the stored body"
    );
    assert!(r.header("hookgate-transformed").is_none());
    assert_signed(r);

    let f = &flat.received()[0];
    let got: serde_json::Value = serde_json::from_slice(&f.body).unwrap();
    assert_eq!(
        got,
        json!({"order": "pi_evt_t1", "cents": 2050, "kind": "payment_intent.succeeded",
               "source": "shop", "route": "flat", "event": "evt_t1", "sig": true})
    );
    assert_eq!(
        f.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(f.header("hookgate-transformed").as_deref(), Some("true"));
    assert_eq!(f.header("webhook-id"), r.header("webhook-id"));
    assert_signed(f);

    let g = &form.received()[0];
    assert_eq!(g.body, &b"order=pi_evt_t1&currency=eur"[..]);
    assert_eq!(
        g.header("content-type").as_deref(),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(
        g.header("x-legacy-kind").as_deref(),
        Some("payment_intent.succeeded")
    );
    assert_eq!(
        g.header("content-length").as_deref(),
        Some(g.body.len().to_string().as_str())
    );
    assert_signed(g);
    gw.stop().await;
}
for_each_store!(
    a_route_program_shapes_what_its_app_receives_and_the_signature_covers_it,
    super::shapes_what_the_app_receives
);

async fn endless_then_fixed(backend: Backend) {
    let h = StoreHandle::new(backend);
    let raw = Upstream::ok().await;
    let legacy = Upstream::ok().await;
    let broken = config(
        &h,
        &raw.url,
        &[("legacy", &legacy.url, "transform = 'def f: f; f'")],
    );
    let gw = Gateway::start(broken).await;
    let c = http();
    let (st, json) = post_stripe_signed(
        &c,
        &gw.ingest,
        "shop",
        payment("evt_t2", "charge.succeeded").as_bytes(),
    )
    .await;
    assert_eq!(st, 200);
    let id = json["id"].as_str().unwrap().to_string();
    let store = h.open().await;
    let started = Instant::now();
    let dead = wait_until_ok(
        "the legacy delivery dead",
        Duration::from_secs(10),
        async || {
            let e = store
                .get(&id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("gone")?;
            let d = e.delivery("legacy").ok_or("no delivery")?.clone();
            if d.status == Status::Dead {
                Ok(d)
            } else {
                Err(format!("{:?}", d.status))
            }
        },
    )
    .await;
    // Cut at the deadline: one attempt, within a second of it.
    assert_eq!(dead.attempts, 1);
    assert_eq!(
        dead.last_error.as_deref(),
        Some("transform: timeout after 50ms")
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // The other route delivered meanwhile, and the legacy app got nothing.
    raw.wait_for(Duration::from_secs(10), "the plain route", |r| {
        !r.is_empty()
    })
    .await;
    assert_eq!(legacy.count(), 0);
    let groups = get_json(&c, &format!("{}/admin/dead-letters?source=shop", gw.admin)).await;
    let group = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["route"] == "legacy")
        .unwrap_or_else(|| panic!("no group of the legacy route: {groups}"))
        .clone();
    assert_eq!(group["failure"], "transform: timeout", "{groups}");
    assert_eq!(group["count"], 1);
    gw.stop().await;

    // The program fixed, the gateway restarted, the group replayed.
    let fixed = config(
        &h,
        &raw.url,
        &[(
            "legacy",
            &legacy.url,
            "transform = '{charge: .data.object.id}'",
        )],
    );
    let gw = Gateway::start(fixed).await;
    let replay = c
        .post(format!("{}/admin/dead-letters/replay", gw.admin))
        .json(&json!({"source": "shop", "route": "legacy", "failure": "transform: timeout"}))
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 202);
    legacy
        .wait_for(Duration::from_secs(10), "the replayed delivery", |r| {
            !r.is_empty()
        })
        .await;
    let got = &legacy.received()[0];
    assert_eq!(got.body, &br#"{"charge":"pi_evt_t2"}"#[..]);
    assert_eq!(got.header("webhook-id").as_deref(), Some(id.as_str()));
    assert_signed(got);
    store.close().await;
    gw.stop().await;
}
for_each_store!(
    an_endless_program_is_cut_into_its_group_and_a_fixed_one_replays_it,
    super::endless_then_fixed
);

async fn empty_skips(backend: Backend) {
    let h = StoreHandle::new(backend);
    let raw = Upstream::ok().await;
    let picky = Upstream::ok().await;
    let cfg = config(
        &h,
        &raw.url,
        &[(
            "picky",
            &picky.url,
            "transform = 'select(.type == \"charge.refunded\") | {refund: .data.object.id}'",
        )],
    );
    let gw = Gateway::start(cfg).await;
    let c = http();
    let mut ids = Vec::new();
    for (n, kind) in [(1, "charge.succeeded"), (2, "charge.refunded")] {
        let body = payment(&format!("evt_t3_{n}"), kind);
        let (st, json) = post_stripe_signed(&c, &gw.ingest, "shop", body.as_bytes()).await;
        assert_eq!(st, 200);
        ids.push(json["id"].as_str().unwrap().to_string());
    }
    picky
        .wait_for(Duration::from_secs(10), "the refund", |r| !r.is_empty())
        .await;
    raw.wait_for(Duration::from_secs(10), "both on the plain route", |r| {
        r.len() >= 2
    })
    .await;
    let store = h.open().await;
    let skipped = wait_until_ok(
        "the skipped delivery",
        Duration::from_secs(10),
        async || {
            let e = store
                .get(&ids[0])
                .await
                .map_err(|e| e.to_string())?
                .ok_or("gone")?;
            let d = e.delivery("picky").ok_or("no delivery")?.clone();
            match (e.status, d.status) {
                (Status::Delivered, Status::Filtered) => Ok(d),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(skipped.attempts, 0, "never sent");
    assert_eq!(
        skipped.last_error.as_deref(),
        Some(hookgate::transform::EMPTY_REASON)
    );
    let sent = picky.received();
    assert_eq!(sent.len(), 1, "only the refund reached the picky app");
    assert_eq!(sent[0].body, &br#"{"refund":"pi_evt_t3_2"}"#[..]);
    assert_eq!(
        sent[0].header("webhook-id").as_deref(),
        Some(ids[1].as_str())
    );
    store.close().await;
    gw.stop().await;
}
for_each_store!(
    a_program_with_no_output_skips_the_delivery_as_filtered,
    super::empty_skips
);

/// The worker pool alone: what a program does to its worker never reaches the
/// next run, nor the runs handed to the same worker with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_survives_programs_that_never_end_recurse_or_explode() {
    let programs = [
        "{a: .a}",
        "def f: f; f",
        "repeat(1)",
        "def f: 1 + f; f",
        "[range(1e12)] | length",
        ".a | error",
    ];
    let pool = Pool::new(
        env!("CARGO_BIN_EXE_hookgate").into(),
        programs.iter().map(|p| p.to_string()).collect(),
    );
    let run = |program: usize, timeout_ms: u64| {
        let pool = &pool;
        async move {
            let started = Instant::now();
            let out = pool
                .run(Run {
                    program,
                    envelope: false,
                    cap: 1 << 20,
                    timeout: Duration::from_millis(timeout_ms),
                    meta: b"{}",
                    body: br#"{"a":"secret-ish"}"#,
                })
                .await;
            (out, started.elapsed())
        }
    };
    let (ok, _) = run(0, 5_000).await;
    assert_eq!(
        ok.unwrap(),
        Ran::Send(hookgate::transform::Shaped {
            body: br#"{"a":"secret-ish"}"#.to_vec(),
            content_type: "application/json".into(),
            headers: Vec::new(),
        })
    );
    for endless in [1, 2] {
        let (out, took) = run(endless, 100).await;
        assert_eq!(
            out,
            Err(TransformError::Timeout(Duration::from_millis(100)))
        );
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
    // Unbounded recursion or allocation ends the worker, or the deadline does.
    for exploding in [3, 4] {
        let (out, took) = run(exploding, 3_000).await;
        assert!(
            matches!(
                out,
                Err(TransformError::Crashed) | Err(TransformError::Timeout(_))
            ),
            "{out:?}"
        );
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
    let (err, _) = run(5, 5_000).await;
    assert!(matches!(err, Err(TransformError::Runtime(_))), "{err:?}");
    // And the next run is served as the first was.
    let (again, _) = run(0, 5_000).await;
    assert!(matches!(again, Ok(Ran::Send(_))), "{again:?}");
    // Runs handed to a worker together: an endless one among them is cut at its
    // deadline, and the ones behind it are run by a new worker.
    let many = (0..60).map(|i| {
        run(
            if i == 10 { 1 } else { 0 },
            if i == 10 { 200 } else { 5_000 },
        )
    });
    let outs = futures_util::future::join_all(many).await;
    for (i, (out, _)) in outs.into_iter().enumerate() {
        match i {
            10 => assert_eq!(
                out,
                Err(TransformError::Timeout(Duration::from_millis(200)))
            ),
            _ => assert!(matches!(out, Ok(Ran::Send(_))), "run {i}: {out:?}"),
        }
    }
}

async fn preview_matches(backend: Backend) {
    let h = StoreHandle::new(backend);
    let raw = Upstream::ok().await;
    let flat = Upstream::ok().await;
    let skip = Upstream::ok().await;
    let fails = Upstream::ok().await;
    let cfg = config(
        &h,
        &raw.url,
        &[
            (
                "flat",
                &flat.url,
                "transform = '{body: {id: .data.object.id, at: $meta.received_at}, headers: {\"X-Kind\": .type}, content_type: \"application/vnd.legacy+json\"}'\ntransform_output = \"envelope\"",
            ),
            ("skip", &skip.url, "transform = 'empty'"),
            ("fails", &fails.url, "transform = '.data.object.id | error'"),
        ],
    );
    let gw = Gateway::start(cfg).await;
    let c = http();
    let admin = |path: String, body: serde_json::Value| {
        let c = c.clone();
        let url = format!("{}{path}", gw.admin);
        async move {
            let r = c.post(url).json(&body).send().await.unwrap();
            let st = r.status().as_u16();
            (st, r.json::<serde_json::Value>().await.unwrap())
        }
    };
    // Held, so that the previews come before the deliveries.
    let (st, _) = admin("/admin/sources/shop/pause".into(), json!({})).await;
    assert_eq!(st, 200);
    let body = payment("evt_t4", "charge.succeeded");
    let (st, json) = post_stripe_signed(&c, &gw.ingest, "shop", body.as_bytes()).await;
    assert_eq!(st, 200);
    let id = json["id"].as_str().unwrap().to_string();
    let preview = |route: &str| {
        admin(
            format!("/admin/entries/{id}/preview"),
            json!({"route": route}),
        )
    };

    let (st, p) = preview("flat").await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(
        (p["outcome"].as_str(), p["transformed"].as_bool()),
        (Some("send"), Some(true))
    );
    assert_eq!(p["content_type"], "application/vnd.legacy+json");
    assert_eq!(
        p["headers"],
        json!([{"name": "x-kind", "value": "charge.succeeded"}])
    );
    let (st, raw_p) = preview("raw").await;
    assert_eq!(st, 200);
    assert_eq!(raw_p["transformed"], false);
    assert_eq!(raw_p["body"], body.as_str());
    let (_, s) = preview("skip").await;
    assert_eq!(s["outcome"], "skip");
    let (_, f) = preview("fails").await;
    assert_eq!(f["outcome"], "failed");
    assert_eq!(f["failure"], "transform: runtime");
    assert!(f["error"].as_str().unwrap().contains("pi_evt_t4"), "{f}");
    // Refusals.
    assert_eq!(preview("nope").await.0, 404);
    assert_eq!(
        admin(format!("/admin/entries/{id}/preview"), json!({}))
            .await
            .0,
        400
    );
    assert_eq!(
        admin(
            "/admin/entries/nope/preview".into(),
            json!({"route": "raw"})
        )
        .await
        .0,
        404
    );

    // What is then sent is what was previewed.
    let (st, _) = admin("/admin/sources/shop/resume".into(), json!({})).await;
    assert_eq!(st, 200);
    for (up, what) in [(&raw, "raw"), (&flat, "flat")] {
        up.wait_for(Duration::from_secs(10), what, |r| !r.is_empty())
            .await;
    }
    let sent = &flat.received()[0];
    assert_eq!(
        String::from_utf8_lossy(&sent.body),
        p["body"].as_str().unwrap()
    );
    assert_eq!(
        sent.header("content-type").as_deref(),
        p["content_type"].as_str()
    );
    assert_eq!(sent.header("x-kind").as_deref(), Some("charge.succeeded"));
    assert_eq!(raw.received()[0].body, body.as_bytes());
    let store = h.open().await;
    let e = wait_until_ok(
        "every delivery ended",
        Duration::from_secs(10),
        async || {
            let e = store
                .get(&id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("gone")?;
            let statuses: Vec<Status> = e.deliveries.iter().map(|d| d.status).collect();
            match statuses.contains(&Status::Pending) {
                false => Ok(e),
                true => Err(format!("{statuses:?}")),
            }
        },
    )
    .await;
    assert_eq!(e.delivery("skip").unwrap().status, Status::Filtered);
    assert_eq!(e.delivery("fails").unwrap().status, Status::Dead);
    assert_eq!(skip.count() + fails.count(), 0);
    // A skipped delivery is replayed through its route like any ended one.
    let (st, _) = admin(
        format!("/admin/entries/{id}/replay"),
        json!({"route": "skip"}),
    )
    .await;
    assert_eq!(st, 202);
    store.close().await;
    gw.stop().await;
}
for_each_store!(
    a_preview_shows_what_each_route_then_sends,
    super::preview_matches
);

/// `hookgate transform test --body`: the route's program on a file, here.
#[test]
fn the_cli_runs_a_route_transform_on_a_body_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("hookgate.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[sources]]\nname = \"shop\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
             [[sources.routes]]\nname = \"flat\"\ndestination = \"http://127.0.0.1:9/\"\n\
             transform = '{{order: .data.object.id}}'\n\
             [[sources.routes]]\nname = \"broken\"\ndestination = \"http://127.0.0.1:9/\"\n\
             transform = '.a | error'\n"
        ),
    )
    .unwrap();
    let body = dir.path().join("event.json");
    std::fs::write(&body, payment("evt_cli", "charge.succeeded")).unwrap();
    let cfg = cfg.to_str().unwrap();
    let body = body.to_str().unwrap();
    let (code, out, err) = crate::cli::run(
        &[
            "transform",
            "test",
            "--config",
            cfg,
            "--route",
            "shop/flat",
            "--body",
            body,
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim_end(), r#"{"order":"pi_evt_cli"}"#);
    assert!(err.contains("route flat: sends"), "{err}");
    assert!(err.contains("content-type: application/json"), "{err}");
    let (code, out, _) = crate::cli::run(
        &[
            "transform",
            "test",
            "--config",
            cfg,
            "--route",
            "flat",
            "--body",
            body,
            "--json",
        ],
        &[],
    );
    assert_eq!(code, 0);
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(p["outcome"], "send");
    let (code, _, err) = crate::cli::run(
        &[
            "transform",
            "test",
            "--config",
            cfg,
            "--route",
            "broken",
            "--body",
            body,
        ],
        &[],
    );
    assert_eq!(code, 1);
    assert!(err.contains("transform: runtime"), "{err}");
    let (code, _, err) = crate::cli::run(
        &[
            "transform",
            "test",
            "--config",
            cfg,
            "--route",
            "nope",
            "--body",
            body,
        ],
        &[],
    );
    assert_eq!(code, 1);
    assert!(err.contains("no route \"nope\""), "{err}");
}
