//! The `Rejections` part of the store contract, on every backend: rows kept per
//! group (source and reason, every unknown source one group) up to the newest
//! `REJECTIONS_KEEP`, listed newest first with filters and a cursor that never
//! repeats or skips a row; counts summed per group over the hours asked; retention.

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::rejection::UNKNOWN_SOURCES;
use hookgate::store::{
    REJECTIONS_KEEP, Rejection, RejectionBatch, RejectionCount, RejectionQuery, Store,
};

use crate::for_each_fresh_store;

const HOUR: i64 = 3_600_000;

fn row(source: &str, known: bool, reason: &str, at: i64) -> Rejection {
    Rejection {
        id: uuid::Uuid::now_v7().to_string(),
        at,
        source: source.to_string(),
        known,
        reason: reason.to_string(),
        status: 401,
        client: Some("192.0.2.7".into()),
        size: Some(12),
        digest: Some("sha256:00".into()),
        headers: vec![("user-agent".into(), "Stripe/1.0 <script>".into())],
        body: None,
    }
}

fn count(source: &str, reason: &str, n: u64, at: i64) -> RejectionCount {
    RejectionCount {
        source: source.into(),
        reason: reason.into(),
        count: n,
        last_at: at,
    }
}

async fn all(store: &dyn Store, mut q: RejectionQuery) -> Vec<Rejection> {
    let mut out = Vec::new();
    loop {
        let page = store.rejections(&q).await.unwrap();
        out.extend(page.rows);
        match page.next_cursor {
            Some(c) => q.before = Some(c),
            None => return out,
        }
    }
}

async fn rows_are_kept_per_group_and_listed_newest_first(store: &dyn Store) {
    let t = now_ms();
    // One group overfilled, in three batches; two others with a few rows.
    let mut stripe = Vec::new();
    for b in 0..3 {
        let rows: Vec<Rejection> = (0..REJECTIONS_KEEP / 2 + 1)
            .map(|i| row("stripe", true, "mismatch", t + (b * 1000 + i) as i64))
            .collect();
        stripe.extend(rows.iter().map(|r| r.id.clone()));
        store
            .record_rejections(&RejectionBatch {
                rows,
                counts: vec![count("stripe", "mismatch", 1000, t)],
            })
            .await
            .unwrap();
    }
    let stale = row("stripe", true, "stale", t);
    let typo = row("stirpe", false, "unknown_source", t);
    let other = row("nope", false, "unknown_source", t + 1);
    let mut with_body = row("github", true, "mismatch", t + 2);
    with_body.body = Some(vec![0, 159, 146, 150]);
    store
        .record_rejections(&RejectionBatch {
            rows: vec![
                stale.clone(),
                typo.clone(),
                other.clone(),
                with_body.clone(),
            ],
            counts: vec![
                count("stripe", "stale", 1, t),
                count(UNKNOWN_SOURCES, "unknown_source", 2, t + 1),
                count("github", "mismatch", 1, t + 2),
            ],
        })
        .await
        .unwrap();
    // The same row twice is kept once.
    store
        .record_rejections(&RejectionBatch {
            rows: vec![stale.clone()],
            counts: vec![],
        })
        .await
        .unwrap();

    let q = |source: Option<&str>, reason: Option<&str>| RejectionQuery {
        source: source.map(str::to_string),
        reason: reason.map(str::to_string),
        limit: 7,
        ..RejectionQuery::default()
    };
    let mismatches = all(store, q(Some("stripe"), Some("mismatch"))).await;
    assert_eq!(mismatches.len(), REJECTIONS_KEEP, "the group is trimmed");
    let newest: Vec<String> = stripe.iter().rev().take(REJECTIONS_KEEP).cloned().collect();
    let listed: Vec<String> = mismatches.iter().map(|r| r.id.clone()).collect();
    assert_eq!(listed, newest, "the newest kept, newest first, each once");
    assert_eq!(
        mismatches[0].headers, stale.headers,
        "headers kept as given"
    );

    let everything = all(store, q(None, None)).await;
    assert_eq!(everything.len(), REJECTIONS_KEEP + 4);
    let mut sorted = everything.clone();
    sorted.sort_by(|a, b| b.id.cmp(&a.id));
    assert_eq!(everything, sorted, "newest first");
    assert!(everything.contains(&stale) && everything.contains(&typo));
    assert!(
        everything.contains(&with_body),
        "a body is kept byte for byte"
    );

    // A name that is not configured is found by the name the URL gave.
    assert_eq!(
        all(store, q(Some("stirpe"), None)).await,
        vec![typo.clone()]
    );
    assert_eq!(
        all(store, q(None, Some("unknown_source"))).await,
        vec![other.clone(), typo.clone()]
    );
    let since = all(
        store,
        RejectionQuery {
            since: Some(t + 1),
            reason: Some("unknown_source".into()),
            limit: 10,
            ..RejectionQuery::default()
        },
    )
    .await;
    assert_eq!(since, vec![other]);

    let mut counts = store.rejection_counts(t - HOUR).await.unwrap();
    counts.sort_by(|a, b| (&a.source, &a.reason).cmp(&(&b.source, &b.reason)));
    let got: Vec<(&str, &str, u64)> = counts
        .iter()
        .map(|c| (c.source.as_str(), c.reason.as_str(), c.count))
        .collect();
    assert_eq!(
        got,
        vec![
            ("*", "unknown_source", 2),
            ("github", "mismatch", 1),
            ("stripe", "mismatch", 3000),
            ("stripe", "stale", 1),
        ]
    );
    let stripe_group = counts
        .iter()
        .find(|c| c.source == "stripe" && c.reason == "mismatch")
        .unwrap();
    assert_eq!(stripe_group.last_at, t);
}
for_each_fresh_store!(
    rejected_requests_are_kept_per_group_and_listed_newest_first,
    super::rows_are_kept_per_group_and_listed_newest_first
);

async fn counts_add_up_per_hour_and_retention_removes_the_old(store: &dyn Store) {
    let now = now_ms();
    let old = now - 3 * 24 * HOUR;
    store
        .record_rejections(&RejectionBatch {
            rows: vec![
                row("stripe", true, "stale", old),
                row("stripe", true, "stale", now),
            ],
            counts: vec![
                count("stripe", "stale", 5, old),
                count("stripe", "stale", 7, now),
            ],
        })
        .await
        .unwrap();
    // A second gateway's batch adds to the same hour.
    store
        .record_rejections(&RejectionBatch {
            rows: vec![],
            counts: vec![count("stripe", "stale", 1, now - 1)],
        })
        .await
        .unwrap();
    let sum = |c: Vec<RejectionCount>| c.iter().map(|c| c.count).sum::<u64>();
    assert_eq!(sum(store.rejection_counts(old - HOUR).await.unwrap()), 13);
    assert_eq!(sum(store.rejection_counts(now - HOUR).await.unwrap()), 8);
    let latest = store.rejection_counts(now - HOUR).await.unwrap();
    assert_eq!(latest[0].last_at, now, "the newest time of the group");

    assert_eq!(store.purge_rejections(now - 24 * HOUR).await.unwrap(), 1);
    assert_eq!(sum(store.rejection_counts(old - HOUR).await.unwrap()), 8);
    let left = store
        .rejections(&RejectionQuery {
            limit: 10,
            ..RejectionQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(left.rows.len(), 1);
    assert_eq!(left.rows[0].at, now);
    assert_eq!(store.purge_rejections(now - 24 * HOUR).await.unwrap(), 0);
}
for_each_fresh_store!(
    rejection_counts_add_up_per_hour_and_retention_removes_the_old,
    super::counts_add_up_per_hour_and_retention_removes_the_old
);
