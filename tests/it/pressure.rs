//! A store in trouble: Redis paused (`kill -STOP`) and Redis out of memory. Ingest
//! answers in time, and what was acknowledged keeps moving.

use std::time::{Duration, Instant};

use hookgate::config;

use crate::forward::source;
use crate::support::*;
use crate::upstream::{Upstream, reached};

/// Timed against a bound: the test command runs these alone, one at a time (see
/// `scripts/test`), since on two cores a neighbour's load moves the timings.
mod alone {
    use super::*;

    /// Redis stopped (`kill -STOP`) for 15 s under 50 webhooks a second: every answer,
    /// 200 or 503, comes within `store.timeout` plus half a second; 503s while it is
    /// stopped, 200s again after it resumes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_answer_comes_within_the_store_timeout_while_redis_is_stopped() {
        let _alone = TIMED_ALONE.lock().await;
        let redis = RedisServer::start();
        let pid = redis.pid().expect("redis runs");
        let up = Upstream::ok().await;
        let text = format!(
            "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout = \"1s\"\n{}",
            redis.url(),
            source("stripe", &up.url, "")
        );
        let dir = tempfile::tempdir().unwrap();
        let cfg = write_config(dir.path(), &text);
        let log = dir.path().join("stderr.log");
        // A process of its own: the answer times measured are the gateway's alone.
        let mut gw = ChildGateway::spawn(&cfg, &[("RUST_LOG", "info")], &log);
        let c = http_builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let signal = |sig: &str| {
            let ok = std::process::Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(pid.to_string())
                .status()
                .unwrap()
                .success();
            assert!(ok, "kill -{sig} {pid}");
        };
        // 50 a second for 18 s; Redis stopped from the 1st second to the 16th.
        let started = Instant::now();
        let mut sent = Vec::new();
        let mut stopped = false;
        let mut resumed = false;
        for n in 0..900u32 {
            let at = Duration::from_millis(20 * u64::from(n));
            if let Some(wait) = at.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
            if !stopped && at >= Duration::from_secs(1) {
                signal("STOP");
                stopped = true;
            }
            if !resumed && at >= Duration::from_secs(16) {
                signal("CONT");
                resumed = true;
            }
            let c = c.clone();
            let base = gw.ingest.clone();
            sent.push(tokio::spawn(async move {
                let t = Instant::now();
                let (status, _) = post_stripe(&c, &base, &format!("evt_stop{n}")).await;
                (n, status, t.elapsed())
            }));
        }
        if !resumed {
            signal("CONT");
        }
        let mut late = Vec::new();
        let (mut ok, mut refused) = (0, 0);
        let mut ok_after_resume = 0;
        for task in sent {
            let (n, status, took) = task.await.unwrap();
            match status {
                200 => {
                    ok += 1;
                    if n >= 850 {
                        ok_after_resume += 1;
                    }
                }
                503 => refused += 1,
                other => panic!("webhook {n}: {other}"),
            }
            if took > Duration::from_millis(1500) {
                late.push((n, status, took));
            }
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let warnings: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .collect();
        assert!(
            late.is_empty(),
            "{} of {} answers later than 1.5 s (the latest {:?}): {:?}\nthe gateway's warnings:\n{}",
            late.len(),
            ok + refused,
            late.iter().map(|l| l.2).max(),
            late.iter().take(20).collect::<Vec<_>>(),
            warnings.join("\n")
        );
        assert!(refused > 100, "{refused} 503s while redis was stopped");
        assert!(ok > 50, "{ok} 200s");
        assert!(ok_after_resume > 0, "nothing stored after redis resumed");
        gw.kill();
    }
}

/// A private Redis with a small `maxmemory` (and `noeviction`, as hookgate requires).
///
/// Redis 7 keeps a latency histogram of about 27 KB for every command it has run
/// (`latency-tracking`), counted in `used_memory`: the thirty-odd commands the
/// gateway uses take 0.8 MB of a 2 MB Redis, and with the dedupe keys of 1,500
/// webhooks no room is left for entries however early they are purged. Switched
/// off where Redis has it, so that `maxmemory` is the room the tests mean.
fn small_redis(maxmemory: &str) -> RedisServer {
    let redis = RedisServer::start_with_args(
        true,
        &["--maxmemory", maxmemory, "--maxmemory-policy", "noeviction"],
    );
    // Redis 6 has no such setting and refuses it: nothing to switch off there.
    if let Ok(mut c) = redis::Client::open(redis.url()).and_then(|c| c.get_connection()) {
        let _: redis::RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg("latency-tracking")
            .arg("no")
            .query(&mut c);
    }
    redis
}

/// A gateway on `redis` for `sources`, polling every 50 ms, with more `[forwarder]`
/// keys in `forwarder`.
async fn gateway_on(redis: &RedisServer, sources: &str, forwarder: &str) -> Gateway {
    let text = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n\
         [forwarder]\npoll_interval = \"50ms\"\n{forwarder}{sources}",
        redis.url(),
    );
    Gateway::start(config::from_toml_str(&text, &|_| None).unwrap()).await
}

/// Redis at its `maxmemory` (2 MB): once new webhooks are refused, every webhook
/// acknowledged before is still delivered within 10 s, with no operator action
/// (leases, completions and retries run while Redis is out of memory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_out_of_memory_still_delivers_what_it_acknowledged() {
    let redis = small_redis("2mb");
    let up = Upstream::ok().await;
    let gw = gateway_on(&redis, &source("stripe", &up.url, ""), "").await;
    let c = http();
    // Hold deliveries, so that what is acknowledged is pending when memory runs out.
    let admin = |action: &str| {
        c.post(format!("{}/admin/sources/stripe/{action}", gw.admin))
            .send()
    };
    assert_eq!(admin("pause").await.unwrap().status(), 200);
    let padding = "x".repeat(2048);
    let mut acked = Vec::new();
    let mut refused = 0;
    for n in 0..5000 {
        let body = format!(r#"{{"id":"evt_m{n}","object":"event","type":"t","pad":"{padding}"}}"#);
        let (st, json) = post_stripe_signed(&c, &gw.ingest, "stripe", body.as_bytes()).await;
        match st {
            200 => acked.push(json["id"].as_str().unwrap().to_string()),
            503 => {
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
            other => panic!("{other}: {json}"),
        }
    }
    assert_eq!(refused, 3, "redis never ran out of memory");
    assert!(acked.len() > 50, "only {} acknowledged", acked.len());
    // A load balancer hears it.
    let ready = c.get(format!("{}/readyz", gw.admin)).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    // Resume (a removal, which Redis takes out of memory too) and wait.
    assert_eq!(admin("resume").await.unwrap().status(), 200);
    up.wait_for(
        Duration::from_secs(10),
        "every acknowledged entry delivered while redis is out of memory",
        |r| reached(r, &acked),
    )
    .await;
    gw.stop().await;
}

/// Redis with a `maxmemory` (2 MB) smaller than what the retained delivered entries
/// would take: delivered entries are purged early, oldest first, and ingest goes on
/// with no operator action; the purge is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_short_of_memory_purges_delivered_entries_early() {
    let redis = small_redis("3mb");
    let up = Upstream::ok().await;
    let gw = gateway_on(
        &redis,
        &source("early", &up.url, ""),
        "maintenance_interval = \"200ms\"\n",
    )
    .await;
    let c = http();
    // 1,500 webhooks of 2 KiB: more than Redis holds, were delivered entries kept.
    let padding = "x".repeat(2048);
    let mut refused = 0;
    for n in 0..1500 {
        let body = format!(r#"{{"id":"evt_e{n}","object":"event","type":"t","pad":"{padding}"}}"#);
        // A provider retries a 503; so does this test, for a while.
        wait_until_ok("the webhook stored", Duration::from_secs(10), async || {
            let (st, json) = post_stripe_signed(&c, &gw.ingest, "early", body.as_bytes()).await;
            match st {
                200 => Ok(()),
                503 => {
                    refused += 1;
                    Err(format!("503 {json}"))
                }
                other => panic!("{other}: {json}"),
            }
        })
        .await;
    }
    up.wait_for(Duration::from_secs(30), "all 1,500 delivered", |r| {
        r.len() >= 1500
    })
    .await;
    let metrics = get_text(&c, &format!("{}/metrics", gw.admin)).await;
    let purged: f64 = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("hookgate_store_early_purged_total{source=\"early\"}"))
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum();
    assert!(purged > 0.0, "no early purge ({refused} 503s on the way)");
    gw.stop().await;
}
