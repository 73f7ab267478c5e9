//! A source's request limit (`[sources.limits] requests`), end to end on every
//! store: 300 requests in about a second to a `100/s` source get 200 up to the
//! limit and its burst and 429 with `Retry-After` beyond it, while another source
//! on the same gateway is untouched; a refused request is answered before its body
//! is sent, counted and kept in the rejection log; and two gateways on one store
//! share one limit.

use std::time::{Duration, Instant};

use crate::admin::{Admin, admin_config};
use crate::for_each_store;
use crate::forward::source;
use crate::support::*;

const LIMITED: &str = "[sources.limits]\nrequests = \"100/s\"\n";

/// What `n` signed requests to `source`, 16 at a time, came to: (200s, 429s, the
/// `Retry-After` of each 429, the time they took). Every event is distinct.
async fn flood(base: &str, source: &str, prefix: &str, n: usize) -> Flood {
    let client = http();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..16 {
        let (client, base, source) = (client.clone(), base.to_string(), source.to_string());
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in (w..n).step_by(16) {
                let body = event_body("stripe", &format!("{prefix}_{i}"));
                let headers = sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x");
                let mut req = client
                    .post(format!("{base}/ingest/{source}"))
                    .header("content-type", "application/json")
                    .body(body);
                for (k, v) in &headers {
                    req = req.header(k.as_str(), v.as_str());
                }
                let resp = req.send().await.expect("request");
                let retry_after = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                out.push((resp.status().as_u16(), retry_after));
            }
            out
        }));
    }
    let mut flood = Flood::default();
    for t in tasks {
        for (status, retry_after) in t.await.expect("worker") {
            match status {
                200 => flood.ok += 1,
                429 => {
                    flood.limited += 1;
                    flood.retry_after.push(retry_after);
                }
                other => panic!("unexpected status {other}"),
            }
        }
    }
    flood.took = started.elapsed();
    flood
}

#[derive(Debug, Default)]
struct Flood {
    ok: usize,
    limited: usize,
    retry_after: Vec<Option<u64>>,
    took: Duration,
}

impl Flood {
    /// The most a `per_second` limit with `burst` lets through in the time the
    /// flood took (and one slot more for the clock's rounding).
    fn allowed(&self, per_second: f64, burst: usize) -> usize {
        burst + (per_second * self.took.as_secs_f64()).ceil() as usize + 1
    }
}

async fn over_the_limit(backend: Backend) {
    let h = StoreHandle::new(backend);
    let sources = format!(
        "{}{}{}",
        source("limited", "http://127.0.0.1:9/", LIMITED),
        source("other", "http://127.0.0.1:9/", ""),
        source(
            "trickle",
            "http://127.0.0.1:9/",
            "[sources.limits]\nrequests = \"1/h\"\n"
        )
    );
    let gw = Gateway::start(admin_config(&h, "", &sources)).await;
    let (limited, other) = tokio::join!(
        flood(&gw.ingest, "limited", "evt_l", 300),
        // Fewer, since each one is stored: enough to overlap the whole flood.
        flood(&gw.ingest, "other", "evt_o", 60)
    );
    // 100/s with a burst of 10: the burst and a hundred a second, the rest refused.
    assert!(
        limited.ok >= 10 && limited.ok <= limited.allowed(100.0, 10),
        "{limited:?}"
    );
    assert_eq!(limited.ok + limited.limited, 300);
    assert!(limited.limited > 0, "{limited:?}");
    assert!(
        limited.retry_after.iter().all(|r| matches!(r, Some(1..=2))),
        "{limited:?}"
    );
    // The other source, at the same time, had none refused.
    assert_eq!((other.ok, other.limited), (60, 0), "{other:?}");

    // A refused request is answered from its headers: the body is never sent.
    // (`trickle` takes one request an hour: its first, then none.)
    let (st, _) = post_stripe_signed(
        &http(),
        &gw.ingest,
        "trickle",
        &event_body("stripe", "evt_t"),
    )
    .await;
    assert_eq!(st, 200);
    let refused = head_only(&gw.ingest, "trickle").await;
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused:?}");
    let retry_after = refused
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("retry-after: ")
                .map(str::to_string)
        })
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(matches!(retry_after, Some(3_000..=3_600)), "{refused:?}");

    // Counted, and kept in the rejection log with its reason.
    let metrics = get_text(&http(), &format!("{}/metrics", gw.admin)).await;
    let counted: f64 = metrics
        .lines()
        .find(|l| {
            l.starts_with("hookgate_ingest_requests_total{")
                && l.contains("outcome=\"rate_limited\"")
                && l.contains("source=\"limited\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0);
    assert!(counted >= limited.limited as f64, "{counted}");
    let admin = Admin::new(&gw);
    wait_until_ok(
        "both sources' refusals in the rejection log",
        Duration::from_secs(15),
        async || {
            let page = admin.get("/admin/rejections?reason=rate_limited").await;
            let rows = page["rejections"].as_array().cloned().unwrap_or_default();
            let kept = |source: &str| {
                rows.iter()
                    .any(|row| row["source"] == source && row["status"] == 429)
            };
            if kept("limited") && kept("trickle") {
                Ok(())
            } else {
                Err(page.to_string())
            }
        },
    )
    .await;
    gw.stop().await;
}
for_each_store!(
    a_source_over_its_request_limit_gets_429_and_others_do_not,
    super::over_the_limit
);

/// Two gateways on one store share one limit: together they take no more than one
/// gateway's limit would.
async fn shared_limit(backend: Backend) {
    let h = StoreHandle::new(backend);
    let sources = source(
        "limited",
        "http://127.0.0.1:9/",
        "[sources.limits]\nrequests = \"50/s\"\nburst = 5\n",
    );
    let (one, two) = (
        Gateway::start(admin_config(&h, "", &sources)).await,
        Gateway::start(admin_config(&h, "", &sources)).await,
    );
    let (a, b) = tokio::join!(
        flood(&one.ingest, "limited", "evt_a", 150),
        flood(&two.ingest, "limited", "evt_b", 150)
    );
    let took = Flood {
        took: a.took.max(b.took),
        ..Flood::default()
    };
    assert!(
        a.ok + b.ok <= took.allowed(50.0, 5),
        "one gateway {a:?}, the other {b:?}"
    );
    assert!(a.limited > 0 && b.limited > 0, "{a:?} {b:?}");
    one.stop().await;
    two.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis_share_a_request_limit() {
    shared_limit(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_postgres_share_a_request_limit() {
    shared_limit(Backend::Postgres).await;
}
