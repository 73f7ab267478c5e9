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
use hookgate::transform::pool::DEFAULT_MEMORY;
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
        // Two deadlines (the run is tried once more on a fresh worker), each at
        // most twice the timeout and a second on the clock when the worker is
        // starved of CPU, and a worker's start.
        let most = 2 * (2 * Duration::from_millis(100) + hookgate::transform::pool::WALL_GRACE);
        assert!(took < most + Duration::from_secs(1), "{took:?}");
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
        let most = 2 * (2 * Duration::from_secs(3) + hookgate::transform::pool::WALL_GRACE);
        assert!(took < most + Duration::from_secs(1), "{took:?}");
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

/// A route whose program never ends, at the longest `transform_timeout`, and a route
/// with a trivial program, both to one destination (its slots are shared): the
/// trivial route's deliveries all arrive, once each, while the endless route's runs
/// fill its half of the workers. The transform runs before a slot is taken, so the
/// endless runs hold none. (One store: the workers are the same on every store.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_route_holds_no_destination_slot_and_starves_no_other_route() {
    let h = StoreHandle::new(Backend::Embedded);
    let up = Upstream::ok().await;
    let raw = Upstream::ok().await;
    let cfg = config(
        &h,
        &raw.url,
        &[
            (
                "slow",
                &format!("{}/slow", up.url),
                "transform = 'def f: f; f'\ntransform_timeout = \"10s\"\ndelivery.concurrency = 4",
            ),
            (
                "flat",
                &format!("{}/flat", up.url),
                "transform = '{b: .data.object.id}'\ndelivery.concurrency = 4",
            ),
        ],
    );
    let gw = Gateway::start(cfg).await;
    let c = http();
    let mut ids = Vec::new();
    for n in 0..16 {
        let body = payment(&format!("evt_s{n}"), "charge.succeeded");
        let (st, json) = post_stripe_signed(&c, &gw.ingest, "shop", body.as_bytes()).await;
        assert_eq!(st, 200);
        ids.push(json["id"].as_str().unwrap().to_string());
    }
    up.wait_for(Duration::from_secs(30), "the trivial route's 16", |r| {
        r.len() >= 16
    })
    .await;
    let mut got = up.webhook_ids(None);
    got.sort();
    ids.sort();
    assert_eq!(
        got, ids,
        "each trivial delivery once, none of the endless route"
    );
    for r in up.received() {
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert!(
            body["b"]
                .as_str()
                .is_some_and(|b| b.starts_with("pi_evt_s")),
            "{body}"
        );
    }
    gw.stop().await;
}

fn pool_of(programs: &[&str], workers: usize, memory: u64) -> std::sync::Arc<Pool> {
    std::sync::Arc::new(Pool::with(
        env!("CARGO_BIN_EXE_hookgate").into(),
        programs.iter().map(|p| p.to_string()).collect(),
        workers,
        memory,
    ))
}

/// Route 0's program never ends (10 s, the longest timeout); its eight runs fill
/// half of the four workers and wait for them. Meanwhile 10,000 runs of route 1's
/// trivial program, at the default 50 ms, all answer, none as a timeout: the
/// workers the endless runs keep busy burn the machine's CPU, but a deadline counts
/// the worker's own CPU time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_route_fills_half_the_workers_and_a_trivial_route_never_times_out() {
    let pool = pool_of(&["def f: f; f", "{b: .a}"], 4, DEFAULT_MEMORY);
    let slow: Vec<_> = (0..8)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.run(Run {
                    program: 0,
                    envelope: false,
                    cap: 1 << 20,
                    timeout: Duration::from_secs(10),
                    meta: b"",
                    body: b"{}",
                })
                .await
            })
        })
        .collect();
    wait_until(
        "the endless route at its share",
        Duration::from_secs(10),
        async || pool.busy(0) == 2,
    )
    .await;
    let bodies: Vec<String> = (0..10_000).map(|i| format!(r#"{{"a":{i}}}"#)).collect();
    let runs = bodies.iter().map(|body| {
        pool.run(Run {
            program: 1,
            envelope: false,
            cap: 1 << 20,
            timeout: Duration::from_millis(50),
            meta: b"",
            body: body.as_bytes(),
        })
    });
    let outs = futures_util::future::join_all(runs).await;
    let timeouts = outs
        .iter()
        .filter(|o| matches!(o, Err(TransformError::Timeout(_))))
        .count();
    assert_eq!(timeouts, 0, "trivial runs cut as timeouts");
    for (i, out) in outs.into_iter().enumerate() {
        match out {
            Ok(Ran::Send(s)) => assert_eq!(s.body, format!(r#"{{"b":{i}}}"#).into_bytes()),
            other => panic!("run {i}: {other:?}"),
        }
    }
    assert_eq!(
        pool.busy(0),
        2,
        "the endless route keeps at most half the workers"
    );
    for s in slow {
        s.abort();
    }
}

/// A run still going at its deadline is tried once more on a fresh worker before it
/// fails: an endless program's answer comes after two deadlines of CPU time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_tried_once_more_before_it_is_final() {
    let pool = pool_of(&["def f: f; f", "{b: .a}"], 2, DEFAULT_MEMORY);
    let started = Instant::now();
    let out = pool
        .run(Run {
            program: 0,
            envelope: false,
            cap: 1 << 20,
            timeout: Duration::from_millis(300),
            meta: b"",
            body: b"{}",
        })
        .await;
    assert_eq!(
        out,
        Err(TransformError::Timeout(Duration::from_millis(300)))
    );
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

/// Input nested deeper than the worker takes fails as `runtime` before it is parsed
/// (a 1 MB body 500,000 deep with `[paths]` took a worker to 1.9 GB); a worker's
/// address space is what the pool gives it: a string of 200 MB fits in 2 GiB, not in
/// 384 MiB (most of which is the worker's stack).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_input_and_memory_are_bounded() {
    let programs = ["[paths] | length", "\"x\" * 200000000 | length"];
    let deep = format!("{}{}", "[".repeat(500_000), "]".repeat(500_000));
    let run = |pool: &std::sync::Arc<Pool>, program: usize, body: &str| {
        let (pool, body) = (pool.clone(), body.to_string());
        async move {
            pool.run(Run {
                program,
                envelope: false,
                cap: 1 << 20,
                timeout: Duration::from_secs(5),
                meta: b"",
                body: body.as_bytes(),
            })
            .await
        }
    };
    let pool = pool_of(&programs, 2, 2 << 30);
    match run(&pool, 0, &deep).await {
        Err(TransformError::Runtime(m)) => assert!(m.contains("nested deeper than 128"), "{m}"),
        other => panic!("{other:?}"),
    }
    let shallow = format!("{}{}", "[".repeat(128), "]".repeat(128));
    assert!(matches!(run(&pool, 0, &shallow).await, Ok(Ran::Send(_))));
    assert!(matches!(run(&pool, 1, "{}").await, Ok(Ran::Send(_))));
    let small = pool_of(&programs, 2, hookgate::transform::pool::MIN_MEMORY);
    assert_eq!(run(&small, 1, "{}").await, Err(TransformError::Crashed));
    assert!(matches!(run(&small, 0, "[1]").await, Ok(Ran::Send(_))));
}

/// Timed: these run one at a time (see scripts/test).
mod alone {
    use super::*;

    /// The transform workers this process started, by their process ids.
    fn worker_pids() -> Vec<u32> {
        let me = std::process::id();
        let mut pids = Vec::new();
        for dir in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = dir.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let (Ok(stat), Ok(cmdline)) = (
                std::fs::read_to_string(format!("/proc/{pid}/stat")),
                std::fs::read(format!("/proc/{pid}/cmdline")),
            ) else {
                continue;
            };
            // The parent's id is the second field after the command's `(…)`.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(me) && cmdline.ends_with(b"transform-worker\0") {
                pids.push(pid);
            }
        }
        pids
    }

    /// A starved worker: stopped for 300 ms (six times the 50 ms deadline) with a
    /// run handed to it, as a machine busy with a burst leaves a process unscheduled.
    /// The run is answered once the worker goes on, by the same worker: it had not
    /// used its deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_worker_that_was_not_scheduled_has_not_used_its_deadline() {
        let pool = pool_of(&["{b: .a}"], 1, DEFAULT_MEMORY);
        let run = |pool: std::sync::Arc<Pool>| async move {
            pool.run(Run {
                program: 0,
                envelope: false,
                cap: 1 << 20,
                timeout: Duration::from_millis(50),
                meta: b"",
                body: br#"{"a":1}"#,
            })
            .await
        };
        assert!(matches!(run(pool.clone()).await, Ok(Ran::Send(_))));
        let pids = worker_pids();
        assert_eq!(pids.len(), 1, "{pids:?}");
        // Confined: no new privileges, and a seccomp filter.
        let status = std::fs::read_to_string(format!("/proc/{}/status", pids[0])).unwrap();
        assert!(status.contains("NoNewPrivs:\t1"), "{status}");
        assert!(status.contains("Seccomp:\t2"), "{status}");
        let pid = libc::pid_t::try_from(pids[0]).unwrap();
        // SAFETY: signals our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        let pending = tokio::spawn(run(pool.clone()));
        // The starvation itself.
        tokio::time::sleep(Duration::from_millis(300)).await;
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
        match pending.await.unwrap() {
            Ok(Ran::Send(s)) => assert_eq!(s.body, br#"{"b":1}"#),
            other => panic!("{other:?}"),
        }
        assert_eq!(worker_pids(), pids, "the same worker answered");
    }

    /// Six views at once of an entry whose route's program never ends (10 s): each
    /// page answers within the 2 s preview wait and a margin, says that route's
    /// transform is still running, and shows the other route's output.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_console_preview_answers_within_two_seconds() {
        let h = StoreHandle::new(Backend::Embedded);
        let raw = Upstream::ok().await;
        let up = Upstream::ok().await;
        let cfg = config(
            &h,
            &raw.url,
            &[
                (
                    "slow",
                    &up.url,
                    "transform = 'def f: f; f'\ntransform_timeout = \"10s\"",
                ),
                ("flat", &up.url, "transform = '{b: .data.object.id}'"),
            ],
        );
        let gw = Gateway::start(cfg).await;
        let c = http();
        let body = payment("evt_p1", "charge.succeeded");
        let (st, json) = post_stripe_signed(&c, &gw.ingest, "shop", body.as_bytes()).await;
        assert_eq!(st, 200);
        let id = json["id"].as_str().unwrap().to_string();
        let url = format!("{}/console/entries/{id}", gw.admin);
        let views = (0..6).map(|_| {
            let (c, url) = (c.clone(), url.clone());
            async move {
                let started = Instant::now();
                let page = get_text(&c, &url).await;
                (page, started.elapsed())
            }
        });
        for (page, took) in futures_util::future::join_all(views).await {
            assert!(took < Duration::from_secs(4), "{took:?}");
            assert!(
                page.contains("route slow: its transform is still running"),
                "{page}"
            );
            assert!(page.contains(r#"data-route="flat""#), "{page}");
            assert!(page.contains("pi_evt_p1"), "{page}");
        }
        gw.stop().await;
    }
}
