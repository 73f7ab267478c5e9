//! A source's request limit (`[sources.limits] requests`), end to end on every
//! store: 300 requests in about a second to a `100/s` source get 200 up to the
//! limit and its burst and 429 with `Retry-After` beyond it, while another source
//! on the same gateway is untouched; a refused request is answered before its body
//! is sent once the source is over, counted and kept in the rejection log; and two
//! gateways on one store share one limit. Only verified requests spend it: a
//! forger flooding the source spends a budget of their own client's, and the
//! provider's webhooks from another address keep getting 200.

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

    // Once a source is over its limit, a request is answered from its headers: the
    // body is never sent. (`trickle` takes one request an hour: its first, then
    // none; the second is refused once verified, and from then on the source is
    // over.)
    for (event, status) in [("evt_t", 200), ("evt_t2", 429)] {
        let (st, _) =
            post_stripe_signed(&http(), &gw.ingest, "trickle", &event_body("stripe", event)).await;
        assert_eq!(st, status, "{event}");
    }
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

/// `n` requests to `source` from `from`, one every `every`, each made by
/// `request(i)`: their statuses.
async fn paced(
    base: &str,
    source: &str,
    from: &str,
    n: usize,
    every: Duration,
    request: impl Fn(usize) -> (Vec<u8>, Vec<(String, String)>),
) -> Vec<u16> {
    let client = http_builder()
        .local_address(from.parse::<std::net::IpAddr>().ok())
        .build()
        .unwrap();
    let mut tick = tokio::time::interval(every);
    let mut statuses = Vec::new();
    for i in 0..n {
        tick.tick().await;
        let (body, headers) = request(i);
        statuses.push(post_raw(&client, base, source, &body, &headers).await.0);
    }
    statuses
}

/// A forger at 50 a second against a `5/s` source, while the provider sends ten
/// genuine webhooks from another address: the forger spends its own client's budget
/// of unverified requests (401s, then 429s answered from the headers), and every
/// genuine webhook is stored.
async fn forgeries_spend_their_own_budget(backend: Backend) {
    let h = StoreHandle::new(backend);
    let sources = source(
        "limited",
        "http://127.0.0.1:9/",
        "[sources.limits]\nrequests = \"5/s\"\n",
    );
    let gw = Gateway::start(admin_config(&h, "", &sources)).await;
    let forged = |i: usize| {
        let body = event_body("stripe", &format!("evt_forged_{i}"));
        let headers = sign_headers("stripe", "whsec_not_the_secret", &body, now_secs(), "x");
        (body, headers)
    };
    let genuine = |i: usize| {
        let body = event_body("stripe", &format!("evt_genuine_{i}"));
        let headers = sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x");
        (body, headers)
    };
    let (forger, provider) = tokio::join!(
        paced(
            &gw.ingest,
            "limited",
            "127.0.0.2",
            150,
            Duration::from_millis(20),
            forged
        ),
        paced(
            &gw.ingest,
            "limited",
            "127.0.0.3",
            10,
            Duration::from_millis(300),
            genuine
        ),
    );
    assert_eq!(provider, vec![200; 10], "the provider's webhooks");
    assert!(forger.iter().all(|s| *s == 401 || *s == 429), "{forger:?}");
    // 150 forgeries against a budget of 10 a second (and 10 at once): most are
    // refused from their head, however slowly a loaded machine sends them.
    let refused = forger.iter().filter(|s| **s == 429).count();
    assert!(refused >= 20, "the forger kept its budget: {forger:?}");
    let store = h.open().await;
    assert_eq!(store.count("limited").await.unwrap(), 10);
    gw.stop().await;
}
for_each_store!(
    forged_requests_never_spend_a_sources_request_limit,
    super::forgeries_spend_their_own_budget
);

/// A source held at the edge of its limit goes over and back under several times a
/// second: the log says so once per window, not each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn going_over_and_back_under_is_logged_once_per_window() {
    let dir = tempfile::tempdir().unwrap();
    let h = StoreHandle::new(Backend::Embedded);
    let cfg_path = dir.path().join("hookgate.toml");
    std::fs::write(
        &cfg_path,
        format!(
            "{}\n{}",
            h.toml(),
            source(
                "edge",
                "http://127.0.0.1:9/",
                "[sources.limits]\nrequests = \"5/s\"\nburst = 1\n"
            )
        ),
    )
    .unwrap();
    let gw = ChildGateway::spawn(&cfg_path, &[], &dir.path().join("stderr.log"));
    let statuses = paced(
        &gw.ingest,
        "edge",
        "127.0.0.1",
        60,
        Duration::from_millis(50),
        |i| {
            let body = event_body("stripe", &format!("evt_edge_{i}"));
            let headers = sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x");
            (body, headers)
        },
    )
    .await;
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    assert!(
        admitted >= 6 && statuses.len() - admitted >= 30,
        "{statuses:?}"
    );
    let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap();
    let count = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    // Over and back under about as often as requests were admitted, in 3 s: one
    // line each in a 10 s window.
    assert_eq!(count("source over its request limit"), 1, "{log}");
    assert!(count("source back under its request limit") <= 1, "{log}");
}
