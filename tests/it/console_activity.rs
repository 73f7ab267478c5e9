//! The overview's charts and the Dead letters page with a week of history behind
//! them, in real Chromium: the store is filled first, through the store API, with
//! entries received and completed over the last 7 days (a daily rhythm, an outage
//! with three kinds of failure), then the gateway serves it. The charts' totals
//! must be what was stored, the dead letters must group by failure, and the
//! screenshots (`overview-week.png`, `dead-letters-groups.png`) are the README's.

use std::collections::BTreeMap;
use std::time::Duration;

use hookgate::store::{Accepted, Attempt, Completion, NewEntry, Store};

use crate::admin::admin_config;
use crate::browser::Browser;
use crate::conformance::entry;
use crate::support::*;
use crate::upstream::Upstream;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 3_600_000;

/// How an entry of the seeded history ends.
#[derive(Clone, Copy)]
enum End {
    Delivered,
    Dead(u16),
    Timeout,
}

/// The history: (received at, how it ends), over the last 7 days: a daily rhythm,
/// some more in the last hour's minutes, and an outage 30 hours ago.
fn history(now: i64) -> Vec<(i64, End)> {
    let mut out = Vec::new();
    for h in 1..168i64 {
        // A daily rhythm: busier in the day than at night.
        let hour_of_day = ((now - h * HOUR) / HOUR).rem_euclid(24);
        let n = 6
            + (10.0 * (1.0 + ((hour_of_day as f64 - 8.0) * std::f64::consts::PI / 12.0).sin()))
                as i64;
        for i in 0..n {
            let at = now - h * HOUR + i * (HOUR / n.max(1));
            let end = match (h, i % 4) {
                (29..=31, 0) => End::Dead(503),
                (29..=31, 1) => End::Timeout,
                (_, _) if i == 5 && h % 17 == 0 => End::Dead(422),
                _ => End::Delivered,
            };
            out.push((at, end));
        }
    }
    for m in 1..60i64 {
        for i in 0..(m % 3) {
            let at = now - m * MINUTE + i * 7_000;
            let end = if m % 13 == 1 && i == 0 {
                End::Dead(422)
            } else {
                End::Delivered
            };
            out.push((at, end));
        }
    }
    out
}

fn attempt(at: i64, code: Option<u16>, error: Option<&str>) -> Attempt {
    use hookgate::failure::Failure;
    Attempt {
        route: "default".into(),
        n: 1,
        at,
        status_code: code,
        // What the forwarder records: the status's kind, or a timeout's.
        failure: match (code, error) {
            (Some(c), _) if !(200..300).contains(&c) => Some(Failure::Status(c)),
            (None, Some(_)) => Some(Failure::Timeout),
            _ => None,
        },
        error: error.map(str::to_string),
        latency_ms: 40,
        answer: None,
    }
}

/// Store `history` for source `stripe` through the store API, each entry completed
/// a few seconds after it arrived.
async fn seed(store: &dyn Store, history: &[(i64, End)]) {
    let mut ends: BTreeMap<String, (i64, End)> = BTreeMap::new();
    let mut accepting = Vec::new();
    for (i, (at, end)) in history.iter().enumerate() {
        let e = NewEntry {
            received_at: *at,
            ..entry("stripe", &format!("evt_hist_{i:05}"))
        };
        accepting.push((e.id.clone(), *at, *end, e));
    }
    // Accepted concurrently: the embedded store's writer commits them in batches.
    for chunk in accepting.chunks(64) {
        let mut tasks = Vec::new();
        for (id, at, end, e) in chunk.iter().cloned() {
            ends.insert(id, (at, end));
            tasks.push(async move { store.accept(e).await });
        }
        for r in futures_util::future::join_all(tasks).await {
            assert!(matches!(r.unwrap(), Accepted::New(_)));
        }
    }
    let now = hookgate::clock::system_now_ms();
    loop {
        let claims = store
            .claim(
                "stripe",
                "default",
                "seed",
                now,
                200,
                Duration::from_secs(60),
            )
            .await
            .unwrap();
        if claims.is_empty() {
            break;
        }
        let mut tasks = Vec::new();
        for c in claims {
            let (at, end) = ends[&c.entry.id];
            let done = at + 3_000;
            let completion = match end {
                End::Delivered => Completion::Delivered {
                    attempt: attempt(done, Some(200), None),
                },
                End::Dead(code) => Completion::Dead {
                    attempt: Some(attempt(done, Some(code), None)),
                    reason: match code {
                        422 => format!("not retryable: HTTP {code}"),
                        _ => format!("retry budget exhausted: 8 attempts; last: HTTP {code}"),
                    },
                },
                End::Timeout => Completion::Dead {
                    attempt: Some(attempt(done, None, Some("timeout after 10s"))),
                    reason: "retry budget exhausted: 8 attempts; last: timeout".into(),
                },
            };
            tasks.push(async move {
                assert!(store.complete(&c, "seed", completion, done).await.unwrap());
            });
        }
        futures_util::future::join_all(tasks).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_the_overview_charts_a_week_and_dead_letters_group_by_failure() {
    let h = StoreHandle::new(Backend::Embedded);
    let now = hookgate::clock::system_now_ms();
    let history = history(now);
    let store = h.open().await;
    seed(&*store, &history).await;
    store.close().await;
    drop(store);

    let ok = Upstream::ok().await;
    let sources = format!(
        "[[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         destination = \"{}/stripe\"\n",
        ok.url
    );
    let gw = Gateway::start(admin_config(&h, "", &sources)).await;
    let b = Browser::start().await;
    b.log_in(&gw).await;
    b.viewport(1280, 800).await;

    let total = |from: i64, end: fn(End) -> bool| {
        history
            .iter()
            .filter(|(at, e)| *at >= from && end(*e))
            .count()
    };
    // The charts end at the minute the page was rendered, which may be later than
    // `now` (seeding takes a while): load the overview until one load begins and
    // ends in the same minute, and count from that minute.
    let rendered = loop {
        let before = hookgate::clock::system_now_ms();
        b.client
            .goto(&format!("{}/console/", gw.admin))
            .await
            .unwrap();
        b.wait_for_path("/console/").await;
        let after = hookgate::clock::system_now_ms();
        if before.div_euclid(MINUTE) == after.div_euclid(MINUTE) {
            break after;
        }
    };
    let this_minute = rendered - rendered.rem_euclid(MINUTE);
    let this_hour = rendered - rendered.rem_euclid(HOUR);
    // The charts' legends say what was stored: the last hour's 60 minutes, and the
    // 168 hours of the week (the oldest one in part).
    let hour_from = this_minute - 59 * MINUTE;
    let week_from = this_hour - 167 * HOUR;
    let legend = async |chart: &str, key: &str| -> String {
        b.text_of(&format!("#chart-0-{chart}-title .{key} strong"))
            .await
    };
    // As the page writes counts: 1,483.
    let written = |n: usize| {
        let digits = n.to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    };
    assert_eq!(
        legend("hour", "received").await,
        written(total(hour_from, |_| true))
    );
    assert_eq!(
        legend("week", "received").await,
        written(total(week_from, |_| true))
    );
    assert_eq!(
        legend("week", "failed").await,
        written(total(week_from, |e| !matches!(e, End::Delivered)))
    );
    assert_eq!(
        legend("week", "delivered").await,
        written(total(week_from, |e| matches!(e, End::Delivered)))
    );
    let bars = b
        .client
        .execute(
            "return document.querySelectorAll('#chart-0-week-title ~ .plot rect.failed').length;",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        bars.as_u64().unwrap() >= 3,
        "the outage's failures show as bars: {bars}"
    );
    b.screenshot("overview-week").await;

    // Dead letters: three groups, largest first.
    b.client
        .goto(&format!("{}/console/dead-letters", gw.admin))
        .await
        .unwrap();
    let failures = b
        .client
        .execute(
            "return Array.from(document.querySelectorAll('table.groups td.failure'), td => td.textContent.trim());",
            vec![],
        )
        .await
        .unwrap();
    let failures: Vec<String> = serde_json::from_value(failures).unwrap();
    let mut want = vec!["HTTP 503", "timeout", "HTTP 422"];
    let count = |f: &str| {
        history
            .iter()
            .filter(|(_, e)| {
                matches!(
                    (f, e),
                    ("HTTP 503", End::Dead(503))
                        | ("timeout", End::Timeout)
                        | ("HTTP 422", End::Dead(422))
                )
            })
            .count()
    };
    // Largest first; equal counts by name.
    want.sort_by_key(|f| (std::cmp::Reverse(count(f)), *f));
    assert_eq!(failures, want);
    let counts = b
        .client
        .execute(
            "return Array.from(document.querySelectorAll('table.groups td.count'), td => td.textContent.trim());",
            vec![],
        )
        .await
        .unwrap();
    let counts: Vec<String> = serde_json::from_value(counts).unwrap();
    let want_counts: Vec<String> = want.iter().map(|f| written(count(f))).collect();
    assert_eq!(counts, want_counts);
    b.assert_no_sideways_scroll("dead letters").await;
    b.screenshot("dead-letters-groups").await;

    b.close().await;
    gw.stop().await;
}
