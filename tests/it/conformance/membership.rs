//! The `Membership` part of the store contract, on every backend: heartbeats are
//! listed with the store's time, the configuration salt is one value per store, and
//! on the stores gateways share (Redis, PostgreSQL) a gateway silent for ten seconds
//! by the store's clock loses its leases, counted from when heartbeats resumed after
//! a silence of them all (a store that was away hands no lease over by itself).

use std::time::{Duration, Instant};

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{Heartbeat, Store};

use super::{accept_new, delivered_at, entry};
use crate::for_each_fresh_store;
use crate::for_each_store;
use crate::support::{Backend, StoreHandle};

fn beat(id: &str, version: &str) -> Heartbeat {
    Heartbeat {
        id: id.into(),
        host: format!("host-of-{id}"),
        version: version.into(),
        started: 1_700_000_000_000,
    }
}

async fn heartbeats_are_listed(store: &dyn Store) {
    assert!(store.gateways().await.unwrap().is_empty());
    let before = now_ms();
    let a = store.heartbeat(&beat("gw-a", "v1")).await.unwrap();
    store.heartbeat(&beat("gw-b", "v2")).await.unwrap();
    assert!(!a.taken_over, "a first heartbeat has nothing taken over");
    // The store's clock and this machine's agree here, within a second.
    assert!(
        (a.at - before).abs() < 1_000,
        "store time {} vs {before}",
        a.at
    );
    let listed = store.gateways().await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|g| g.id.as_str()).collect();
    assert_eq!(ids, ["gw-a", "gw-b"]);
    assert_eq!(listed[0].version, "v1");
    assert_eq!(listed[1].version, "v2");
    assert_eq!(listed[0].host, "host-of-gw-a");
    assert_eq!(listed[0].started, 1_700_000_000_000);
    assert!(listed.iter().all(|g| g.alive));
    assert_eq!(listed[0].last_seen, a.at);
    // A later heartbeat moves last_seen and replaces the version.
    let again = store.heartbeat(&beat("gw-a", "v3")).await.unwrap();
    assert!(again.at >= a.at);
    let listed = store.gateways().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].version, "v3");
    assert_eq!(listed[0].last_seen, again.at);
}
for_each_fresh_store!(
    heartbeats_are_listed_with_the_store_time,
    super::heartbeats_are_listed
);

/// Two processes opening one store get the same salt, asking at once; another store
/// has another.
async fn one_salt_per_store(backend: Backend) {
    let h = StoreHandle::new(backend);
    let (one, two) = (h.open().await, h.open().await);
    let (a, b) = tokio::join!(one.config_salt(), two.config_salt());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b, "every gateway on a store has its salt");
    assert_ne!(a, [0u8; 32]);
    assert_eq!(one.config_salt().await.unwrap(), a, "kept");
    two.close().await;
    let other = StoreHandle::new(backend);
    let other_store = other.open().await;
    assert_ne!(other_store.config_salt().await.unwrap(), a);
    other_store.close().await;
    one.close().await;
}
for_each_store!(config_salt_is_one_per_store, super::one_salt_per_store);

/// Poll `take_over_dead` for `by` (which beats every second meanwhile) until it
/// names a gateway; how long that took.
async fn until_taken_over(store: &dyn Store, by: &str) -> (Vec<String>, Duration) {
    let start = Instant::now();
    loop {
        store.heartbeat(&beat(by, "v")).await.unwrap();
        let t = store.take_over_dead(by).await.unwrap();
        if !t.gateways.is_empty() {
            return (t.gateways, start.elapsed());
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no gateway taken over in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn dead_gateways_lose_their_leases(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
    let store = &*store;
    if backend == Backend::Embedded {
        // One gateway owns the embedded store: nothing is ever taken over.
        assert!(!store.takes_over());
        store.heartbeat(&beat("gw-a", "v")).await.unwrap();
        assert!(
            store
                .take_over_dead("gw-b")
                .await
                .unwrap()
                .gateways
                .is_empty()
        );
        store.close().await;
        return;
    }
    assert!(store.takes_over());
    let lease = Duration::from_secs(120);
    store.heartbeat(&beat("gw-a", "v")).await.unwrap();
    store.heartbeat(&beat("gw-b", "v")).await.unwrap();
    let id = accept_new(store, entry("s", "k1")).await;
    let id2 = accept_new(store, entry("s", "k2")).await;
    let id3 = accept_new(store, entry("s", "k3")).await;
    let held = store
        .claim("s", "default", "gw-a", now_ms(), 10, lease)
        .await
        .unwrap();
    assert_eq!(held.len(), 3);
    // gw-b claims from the route too (the takeover looks through its routes).
    assert!(
        store
            .claim("s", "default", "gw-b", now_ms(), 10, lease)
            .await
            .unwrap()
            .is_empty()
    );
    // Alive: nothing is taken over.
    assert!(
        store
            .take_over_dead("gw-b")
            .await
            .unwrap()
            .gateways
            .is_empty()
    );
    // Every heartbeat stops for 11 s: the store was away. The first one after it
    // counts every gateway's silence again, so gw-a keeps its lease for now.
    tokio::time::sleep(Duration::from_secs(11)).await;
    store.heartbeat(&beat("gw-b", "v")).await.unwrap();
    assert!(
        store
            .take_over_dead("gw-b")
            .await
            .unwrap()
            .gateways
            .is_empty(),
        "a store that was away hands no lease over by itself"
    );
    assert!(
        store
            .claim("s", "default", "gw-b", now_ms(), 10, lease)
            .await
            .unwrap()
            .is_empty()
    );
    // gw-b goes on beating and gw-a stays silent: ten seconds later gw-a is dead.
    let (taken, after) = until_taken_over(store, "gw-b").await;
    assert_eq!(taken, ["gw-a"]);
    assert!(
        after >= Duration::from_secs(8),
        "taken over {after:?} after heartbeats resumed"
    );
    assert!(
        after < Duration::from_secs(14),
        "taken over only after {after:?}"
    );
    // Its delivery is claimed again at once, its lease far from run out.
    let again = store
        .claim("s", "default", "gw-b", now_ms(), 10, lease)
        .await
        .unwrap();
    let mut ids: Vec<&str> = again.iter().map(|c| c.entry.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [&id, &id2, &id3],
        "the dead gateway's deliveries are claimable"
    );
    // The dead holder's completion changes nothing; the new holder's does.
    let t = now_ms();
    assert!(
        !store
            .complete(&held[0], "gw-a", delivered_at(t), t)
            .await
            .unwrap()
    );
    assert!(
        store
            .complete(&again[0], "gw-b", delivered_at(t), t)
            .await
            .unwrap()
    );
    // A takeover is done once; the gateway hears of it at its next heartbeat.
    assert_eq!(
        store.take_over_dead("gw-b").await.unwrap(),
        hookgate::store::TakeOver::default()
    );
    assert!(
        store
            .heartbeat(&beat("gw-a", "v"))
            .await
            .unwrap()
            .taken_over
    );
    assert!(
        !store
            .heartbeat(&beat("gw-a", "v"))
            .await
            .unwrap()
            .taken_over
    );
    store.close().await;
}
for_each_store!(
    a_silent_gateway_loses_its_leases_by_the_store_clock,
    super::dead_gateways_lose_their_leases
);
