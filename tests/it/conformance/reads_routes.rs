//! The `Reads` part of the store contract for routes, on every backend: listings by
//! route go by that route's delivery, and a route's statistics count its deliveries
//! by status.

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{ListQuery, RouteStats, SourceStats, Status, Store, Transition};

use super::{Outcome, accept_new, page_through, routed_at, settle};
use crate::for_each_fresh_store;

async fn list_by_route(store: &dyn Store) {
    let base = now_ms() - 60_000;
    let at = |i: i64| base + 1_000 * i;
    let t = now_ms();
    // e1: a delivered, b pending (pending); e2: a pending; e3: b dead (dead);
    // e4: filtered; e5: a dead, b delivered (dead); e6: another source, a pending.
    let e1 = accept_new(store, routed_at("s", "e1", &["a", "b"], at(1))).await;
    let e2 = accept_new(store, routed_at("s", "e2", &["a"], at(2))).await;
    let e3 = accept_new(store, routed_at("s", "e3", &["b"], at(3))).await;
    let e4 = accept_new(store, routed_at("s", "e4", &[], at(4))).await;
    let e5 = accept_new(store, routed_at("s", "e5", &["a", "b"], at(5))).await;
    let e6 = accept_new(store, routed_at("t", "e6", &["a"], at(6))).await;
    settle(store, "s", &e1, "a", Outcome::Delivered, t).await;
    settle(store, "s", &e3, "b", Outcome::Refused, t).await;
    settle(store, "s", &e5, "a", Outcome::Refused, t).await;
    settle(store, "s", &e5, "b", Outcome::Delivered, t).await;

    let ids = |v: &[&String]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    let q = |source: Option<&str>, route: Option<&str>, status: Option<Status>| ListQuery {
        source: source.map(str::to_string),
        route: route.map(str::to_string),
        status,
        limit: 1,
        ..Default::default()
    };
    let cases: Vec<(&str, ListQuery, Vec<String>)> = vec![
        (
            "route a of s",
            q(Some("s"), Some("a"), None),
            ids(&[&e5, &e2, &e1]),
        ),
        (
            "route a anywhere",
            q(None, Some("a"), None),
            ids(&[&e6, &e5, &e2, &e1]),
        ),
        (
            "route b of s",
            q(Some("s"), Some("b"), None),
            ids(&[&e5, &e3, &e1]),
        ),
        (
            "delivered through a, pending overall",
            q(Some("s"), Some("a"), Some(Status::Delivered)),
            ids(&[&e1]),
        ),
        (
            "pending through a",
            q(Some("s"), Some("a"), Some(Status::Pending)),
            ids(&[&e2]),
        ),
        (
            "dead through a",
            q(Some("s"), Some("a"), Some(Status::Dead)),
            ids(&[&e5]),
        ),
        (
            "pending through b",
            q(None, Some("b"), Some(Status::Pending)),
            ids(&[&e1]),
        ),
        (
            "delivered through b, dead overall",
            q(Some("s"), Some("b"), Some(Status::Delivered)),
            ids(&[&e5]),
        ),
        (
            "dead through b",
            q(Some("s"), Some("b"), Some(Status::Dead)),
            ids(&[&e3]),
        ),
        (
            "the entry's status without a route",
            q(Some("s"), None, Some(Status::Dead)),
            ids(&[&e5, &e3]),
        ),
        (
            "pending entries without a route",
            q(Some("s"), None, Some(Status::Pending)),
            ids(&[&e2, &e1]),
        ),
        (
            "filtered entries",
            q(None, None, Some(Status::Filtered)),
            ids(&[&e4]),
        ),
        (
            "filtered through a route",
            q(None, Some("a"), Some(Status::Filtered)),
            Vec::new(),
        ),
        ("a route nobody has", q(None, Some("c"), None), Vec::new()),
        (
            "route a of a source without it",
            q(Some("u"), Some("a"), None),
            Vec::new(),
        ),
    ];
    for (name, query, want) in cases {
        assert_eq!(page_through(store, &query).await, want, "{name}");
        let wide = ListQuery {
            limit: 100,
            ..query.clone()
        };
        assert_eq!(page_through(store, &wide).await, want, "{name}, one page");
    }
    // With the other filters.
    let since = ListQuery {
        since: Some(at(2)),
        until: Some(at(5)),
        ..q(Some("s"), Some("a"), None)
    };
    assert_eq!(page_through(store, &since).await, ids(&[&e2]));
}
for_each_fresh_store!(
    listings_by_route_filter_by_that_delivery,
    super::list_by_route
);

async fn route_stats_count_deliveries(store: &dyn Store) {
    let base = now_ms() - 60_000;
    let at = |i: i64| base + 1_000 * i;
    let t = now_ms();
    // e1: a delivered, b pending; e2: a dead, b discarded; e3: a pending;
    // e4: b pending; e5: filtered; another source: a pending.
    let e1 = accept_new(store, routed_at("s", "e1", &["a", "b"], at(1))).await;
    let e2 = accept_new(store, routed_at("s", "e2", &["a", "b"], at(2))).await;
    let e3 = accept_new(store, routed_at("s", "e3", &["a"], at(3))).await;
    accept_new(store, routed_at("s", "e4", &["b"], at(4))).await;
    accept_new(store, routed_at("s", "e5", &[], at(5))).await;
    accept_new(store, routed_at("t", "e6", &["a"], at(0))).await;
    settle(store, "s", &e1, "a", Outcome::Delivered, t).await;
    settle(store, "s", &e2, "a", Outcome::Refused, t).await;
    assert_eq!(
        store
            .discard(&e2, Some("b"), &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(
        store.route_stats("s", "a").await.unwrap(),
        RouteStats {
            pending: 1,
            delivered: 1,
            dead: 1,
            discarded: 0,
            oldest_pending_at: Some(at(3)),
            blocked_keys: 0,
        }
    );
    assert_eq!(
        store.route_stats("s", "b").await.unwrap(),
        RouteStats {
            pending: 2,
            delivered: 0,
            dead: 0,
            discarded: 1,
            oldest_pending_at: Some(at(1)),
            blocked_keys: 0,
        }
    );
    assert_eq!(
        store.route_stats("t", "a").await.unwrap(),
        RouteStats {
            pending: 1,
            oldest_pending_at: Some(at(0)),
            ..Default::default()
        }
    );
    assert_eq!(
        store.route_stats("s", "c").await.unwrap(),
        RouteStats::default()
    );
    assert_eq!(
        store.route_stats("u", "a").await.unwrap(),
        RouteStats::default()
    );
    // The source's stats count entries, by their derived status.
    assert_eq!(
        store.stats("s").await.unwrap(),
        SourceStats {
            received: 5,
            pending: 3,
            dead: 1,
            filtered: 1,
            oldest_pending_at: Some(at(1)),
            ..Default::default()
        }
    );
    assert_eq!(store.count_status("s", Status::Discarded).await.unwrap(), 0);
    // e3 delivered: nothing pending through a.
    settle(store, "s", &e3, "a", Outcome::Delivered, t).await;
    let a = store.route_stats("s", "a").await.unwrap();
    assert_eq!((a.pending, a.delivered, a.oldest_pending_at), (0, 2, None));
}
for_each_fresh_store!(
    route_stats_count_each_routes_deliveries_by_status,
    super::route_stats_count_deliveries
);
