//! A source's `rate_limit` against a real upstream: a backlog reaches it no faster
//! than the limit plus its burst, two gateways on one Redis share the limit, and a
//! 429 with `Retry-After` holds the source while other sources go on.

use std::time::{Duration, Instant};

use crate::for_each_store;
use crate::forward::{fwd_config, ingest_many, source};
use crate::support::*;
use crate::upstream::{Received, Reply, Upstream};

const LIMITED: &str = "[sources.delivery]\nrate_limit = \"20/s\"\n";

/// The most arrivals one second may hold at 20/s with a burst of 2. The send slots
/// themselves never exceed 22 in a second (`store::pace`'s unit test holds that
/// exactly); an arrival comes a claim and an HTTP exchange after its slot, and on a
/// loaded machine that time varies by more than the 50 ms between two slots, so a
/// second of arrivals may hold one or two sends more (seen: 23 on a busy machine).
/// Each test also checks the span of the whole
/// backlog, which jitter cannot shorten by more than one such delay: a pace kept
/// per gateway, not shared, would send twice as fast.
const BUSIEST_SECOND_AT_20: usize = 24;

/// `received` came at 20/s with a burst of 2: no second holds more than
/// [`BUSIEST_SECOND_AT_20`], and the whole backlog took at least `at_least`.
pub(crate) fn assert_paced_at_20(received: &[Received], at_least: Duration) {
    let busiest = busiest_second(received);
    assert!(
        busiest <= BUSIEST_SECOND_AT_20,
        "{busiest} in one second at 20/s (burst 2): {:?}",
        offsets(received)
    );
    assert!(span(received) >= at_least, "{:?}", span(received));
}

/// The most requests `received` holds in any one-second window.
fn busiest_second(received: &[Received]) -> usize {
    let times: Vec<Instant> = received.iter().map(|r| r.at).collect();
    times
        .iter()
        .map(|start| {
            times
                .iter()
                .filter(|t| **t >= *start && **t < *start + Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Arrival times in ms after the first.
fn offsets(received: &[Received]) -> Vec<u128> {
    let first = received.iter().map(|r| r.at).min();
    let mut v: Vec<u128> = received
        .iter()
        .filter_map(|r| first.map(|f| (r.at - f).as_millis()))
        .collect();
    v.sort();
    v
}

/// The time from the first request to the last.
fn span(received: &[Received]) -> Duration {
    let first = received.iter().map(|r| r.at).min();
    let last = received.iter().map(|r| r.at).max();
    match (first, last) {
        (Some(a), Some(b)) => b - a,
        _ => Duration::ZERO,
    }
}

/// Store a backlog of `n` entries (per gateway) while delivery is paused, then
/// resume: the backlog is what the rate limit meters.
async fn backlog(h: &StoreHandle, gateways: &[&Gateway], n: usize) {
    let store = h.open().await;
    store.set_paused("paced", None, true).await.expect("pause");
    for (i, gw) in gateways.iter().enumerate() {
        ingest_many(&gw.ingest, "paced", &format!("evt_{i}"), n).await;
    }
    store
        .set_paused("paced", None, false)
        .await
        .expect("resume");
    store.close().await;
}

/// Wait for the 60 entries of the backlog at `up`: 20/s with a burst of 2 means
/// never more than 22 sends in a second (see `BUSIEST_SECOND_AT_20` for arrivals),
/// and 60 take about 3 s.
async fn received_at_the_limit(up: &Upstream) {
    up.wait_for(Duration::from_secs(20), "60 paced deliveries", |r| {
        r.len() >= 60
    })
    .await;
    assert_paced_at_20(&up.received(), Duration::from_millis(2_500));
}

async fn backlog_at_the_limit(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up = Upstream::ok().await;
    let gw = Gateway::start(fwd_config(&h, "", &source("paced", &up.url, LIMITED))).await;
    backlog(&h, &[&gw], 60).await;
    received_at_the_limit(&up).await;
    gw.stop().await;
}
for_each_store!(
    a_backlog_reaches_the_app_at_its_rate_limit,
    super::backlog_at_the_limit
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis_share_the_rate_limit() {
    let h = StoreHandle::new(Backend::Redis);
    let up = Upstream::ok().await;
    let cfg = || fwd_config(&h, "", &source("paced", &up.url, LIMITED));
    let (one, two) = (Gateway::start(cfg()).await, Gateway::start(cfg()).await);
    backlog(&h, &[&one, &two], 30).await;
    received_at_the_limit(&up).await;
    one.stop().await;
    two.stop().await;
}

async fn retry_after_holds_the_source(backend: Backend) {
    let h = StoreHandle::new(backend);
    // The fifth request is told to come back in 2 s.
    let paced = Upstream::scripted(|_, n| match n {
        4 => Reply::StatusWith(429, vec![("retry-after", "2".to_string())]),
        _ => Reply::Status(200),
    })
    .await;
    let other = Upstream::ok().await;
    let sources = format!(
        "{}{}",
        source(
            "paced",
            &paced.url,
            &format!("{LIMITED}{}", crate::forward::FAST_RETRY)
        ),
        source("other", &other.url, "")
    );
    let gw = Gateway::start(fwd_config(&h, "", &sources)).await;
    ingest_many(&gw.ingest, "paced", "evt_held", 20).await;
    paced
        .wait_for(Duration::from_secs(10), "the 429", |r| {
            r.iter().any(|r| r.answered == 429)
        })
        .await;
    let told = paced
        .received()
        .iter()
        .find(|r| r.answered == 429)
        .map(|r| r.at);
    let told = told.expect("a 429 was answered");
    // While the paced source waits, another source delivers at once.
    ingest_many(&gw.ingest, "other", "evt_other", 10).await;
    other
        .wait_for(
            Duration::from_secs(5),
            "the other source's deliveries",
            |r| r.len() >= 10,
        )
        .await;
    let other_done = other
        .received()
        .iter()
        .map(|r| r.at)
        .max()
        .expect("deliveries");
    assert!(
        other_done < told + Duration::from_secs(2),
        "the other source waited"
    );
    paced
        .wait_for(Duration::from_secs(20), "every paced delivery", |r| {
            r.iter().filter(|r| r.answered == 200).count() >= 20
        })
        .await;
    // A delivery whose slot was taken before the 429 came back (the burst of 2 at
    // 20/s) may still arrive just after it: it was on its way. None starts later
    // until the 2 s of Retry-After have passed.
    let after: Vec<Duration> = paced
        .received()
        .iter()
        .filter(|r| r.at > told)
        .map(|r| r.at - told)
        .collect();
    let on_its_way = Duration::from_millis(100);
    let in_flight = after.iter().filter(|d| **d < on_its_way).count();
    assert!(
        in_flight <= 1,
        "{in_flight} arrived within 100 ms of the 429: {after:?}"
    );
    let first_after = after
        .iter()
        .filter(|d| **d >= on_its_way)
        .min()
        .copied()
        .expect("requests after the 429");
    assert!(
        first_after >= Duration::from_secs(2),
        "sent {first_after:?} after the 429"
    );
    gw.stop().await;
}
for_each_store!(
    a_429_with_retry_after_holds_its_source_only,
    super::retry_after_holds_the_source
);
