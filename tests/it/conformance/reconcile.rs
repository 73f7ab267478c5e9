//! The `Reconciling` part of the store contract, on every backend: what
//! reconciliation with a provider keeps in the store. The origin of each entry, as
//! accepted and as marked later (with its audit event), the dedupe lookup of the
//! events a provider's API lists, and each source's reconciliation lease and state.

use std::time::Duration;

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{
    Accepted, IndexLookup, IndexedValue, ListQuery, MAX_LOOKUP_KEYS, MAX_RECONCILE_STATE, NewEntry,
    Origin, RECOVERED_ACTION, RECOVERED_ACTOR, ReconcileLease, RouteOrder, Status, Store,
    StoreError, Transition,
};

use super::{DEADLINE, LEASE, accept_new, claim_one, entry, page_through, stored};
use crate::for_each_fresh_store;

// ---------------------------------------------------------------------------
// Origins.
// ---------------------------------------------------------------------------

/// An entry of `source` with event id `key` that came by `origin`.
fn came(source: &str, key: &str, origin: Origin) -> NewEntry {
    NewEntry {
        origin,
        ..entry(source, key)
    }
}

/// Every origin reads back as accepted: in the entry, in a listing, in a claim,
/// and whole by the page; whatever else the entry carries (no route, an ordered
/// route, indexed values), and however the accepts of one source are batched.
async fn origins_round_trip(store: &dyn Store) {
    let mut want = Vec::new();
    for o in Origin::ALL {
        let id = accept_new(store, came("s", &format!("evt_{}", o.as_str()), o)).await;
        want.push((id, o));
        // Filtered: stored without a delivery.
        let mut f = came("s", &format!("evt_f_{}", o.as_str()), o);
        f.routes.clear();
        let id = accept_new(store, f).await;
        assert_eq!(stored(store, &id).await.status, Status::Filtered);
        want.push((id, o));
    }
    // At once (Redis puts them in one script call): ordered and indexed ones among
    // them, so every argument after the origin is read where it is.
    let together = Origin::ALL.map(|o| NewEntry {
        ordering: vec![RouteOrder {
            route: "default".into(),
            key: "k".into(),
            block: true,
        }],
        index: vec![IndexedValue {
            name: "customer".into(),
            value: format!("\"cus_{}\"", o.as_str()),
        }],
        ..came("t", &format!("evt_t_{}", o.as_str()), o)
    });
    let ids: Vec<String> =
        futures_util::future::join_all(together.iter().map(|e| accept_new(store, e.clone()))).await;
    for (id, o) in ids.iter().zip(Origin::ALL) {
        want.push((id.clone(), o));
        let e = stored(store, id).await;
        assert_eq!(
            e.delivery("default").unwrap().order.as_ref().unwrap().key,
            "k"
        );
        let found = store
            .indexed(&IndexLookup {
                source: "t".into(),
                name: "customer".into(),
                values: vec![format!("\"cus_{}\"", o.as_str())],
                below: None,
                floor: None,
                limit: 10,
            })
            .await
            .unwrap();
        assert_eq!(found, vec![id.clone()], "the index of the {o:?} entry");
    }
    let mut in_line = ids.clone();
    in_line.sort();
    assert_eq!(
        store.order_line("t", "default", "k").await.unwrap(),
        in_line,
        "each ordered entry joined its line"
    );

    for (id, o) in &want {
        assert_eq!(stored(store, id).await.origin, *o, "get {id}");
    }
    let keys: Vec<(String, String)> = want
        .iter()
        .map(|(id, _)| (stored_source(id, &ids), id.clone()))
        .collect();
    let many = store.get_many(&keys).await.unwrap();
    assert_eq!(
        many.iter()
            .map(|e| (e.id.clone(), e.origin))
            .collect::<Vec<_>>(),
        want,
        "get_many"
    );
    // Listings (each listed entry is its entry minus headers and body).
    for source in ["s", "t"] {
        let q = ListQuery {
            source: Some(source.into()),
            limit: 2,
            ..Default::default()
        };
        assert_eq!(
            page_through(store, &q).await.len(),
            want.iter()
                .filter(|(id, _)| stored_source(id, &ids) == source)
                .count()
        );
        let page = store.list(&ListQuery { limit: 100, ..q }).await.unwrap();
        for listed in &page.entries {
            let (_, o) = want.iter().find(|(id, _)| *id == listed.id).unwrap();
            assert_eq!(listed.origin, *o, "listed {}", listed.id);
        }
    }
    // Claims.
    let claims = store
        .claim(
            "s",
            "default",
            "w",
            hookgate::clock::system_now_ms(),
            10,
            LEASE,
        )
        .await
        .unwrap();
    assert_eq!(claims.len(), Origin::ALL.len());
    for c in &claims {
        let (_, o) = want.iter().find(|(id, _)| *id == c.entry.id).unwrap();
        assert_eq!(c.entry.origin, *o, "claimed {}", c.entry.id);
    }
}
for_each_fresh_store!(
    every_origin_reads_back_as_accepted,
    super::origins_round_trip
);

/// The source of one of the entries of `origins_round_trip`: `t` for those accepted
/// together, else `s`.
fn stored_source(id: &str, together: &[String]) -> String {
    match together.iter().any(|t| t == id) {
        true => "t".into(),
        false => "s".into(),
    }
}

/// A received entry marked redelivered reads so (whole, listed, claimed), and its
/// audit trail ends with the `recovered` event and its note; marked received again,
/// it reads received. An unknown entry is not found, and nothing is written.
async fn marking_an_origin(store: &dyn Store) {
    let t = now_ms();
    let id = accept_new(store, entry("s", "evt_m")).await;
    assert_eq!(
        store
            .discard(&id, None, &"ops".into(), "before", t)
            .await
            .unwrap(),
        Transition::Done
    );
    assert!(
        store
            .mark_origin(
                &id,
                Origin::Redelivered,
                "sent again by the provider",
                t + 5
            )
            .await
            .unwrap()
    );
    let e = stored(store, &id).await;
    assert_eq!(e.origin, Origin::Redelivered);
    assert_eq!(e.status, Status::Discarded, "the mark changes nothing else");
    let listed = store
        .list(&ListQuery {
            source: Some("s".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.entries, vec![e.listed()]);
    let trail = store.audit(&id).await.unwrap();
    assert_eq!(trail.len(), 2, "{trail:?}");
    assert_eq!(trail[0].action, "discard");
    let last = trail.last().unwrap();
    assert_eq!(last.action, RECOVERED_ACTION);
    assert_eq!(last.actor, RECOVERED_ACTOR);
    assert_eq!(last.note.as_deref(), Some("sent again by the provider"));
    assert_eq!(last.at, t + 5);
    assert_eq!(
        (&last.route, &last.session, &last.client),
        (&None, &None, &None)
    );

    // A pending one is claimed with the origin it was marked with.
    let pending = accept_new(store, entry("s", "evt_p")).await;
    assert!(
        store
            .mark_origin(&pending, Origin::Reconciled, "admitted", t + 6)
            .await
            .unwrap()
    );
    let c = claim_one(store, "s", "w", now_ms()).await;
    assert_eq!(
        (c.entry.id.as_str(), c.entry.origin),
        (pending.as_str(), Origin::Reconciled)
    );

    // Back to received: the mark is one more event.
    assert!(
        store
            .mark_origin(&id, Origin::Received, "was received after all", t + 7)
            .await
            .unwrap()
    );
    assert_eq!(stored(store, &id).await.origin, Origin::Received);
    assert_eq!(store.audit(&id).await.unwrap().len(), 3);

    assert!(
        !store
            .mark_origin("no-such-id", Origin::Reconciled, "n", t)
            .await
            .unwrap()
    );
    assert!(store.audit("no-such-id").await.unwrap().is_empty());
    assert!(store.get("no-such-id").await.unwrap().is_none());
}
for_each_fresh_store!(
    marking_an_origin_is_read_back_and_audited,
    super::marking_an_origin
);

// ---------------------------------------------------------------------------
// Dedupe lookups.
// ---------------------------------------------------------------------------

fn keys(names: &[&str]) -> Vec<String> {
    names.iter().map(|k| format!("id:{k}")).collect()
}

/// Each key accepted answers the entry it names (a duplicate's accept does not move
/// it), in the order asked; an unknown key, and another source's same key, answer
/// none. The limit holds.
async fn dedupe_lookups(store: &dyn Store) {
    let a = accept_new(store, entry("s", "a")).await;
    let b = accept_new(store, entry("s", "b")).await;
    assert_eq!(
        store.accept(entry("s", "a")).await.unwrap(),
        Accepted::Duplicate(a.clone())
    );
    let other = accept_new(store, entry("t", "c")).await;
    let t = now_ms();
    assert_eq!(
        store
            .dedupe_lookup("s", &keys(&["b", "nope", "a", "c", "a"]), t)
            .await
            .unwrap(),
        vec![
            Some(b.clone()),
            None,
            Some(a.clone()),
            None,
            Some(a.clone())
        ]
    );
    assert_eq!(
        store
            .dedupe_lookup("t", &keys(&["a", "c"]), t)
            .await
            .unwrap(),
        vec![None, Some(other)]
    );
    assert_eq!(
        store.dedupe_lookup("u", &keys(&["a"]), t).await.unwrap(),
        vec![None],
        "a source never seen"
    );
    assert!(store.dedupe_lookup("s", &[], t).await.unwrap().is_empty());

    // As many keys as a call takes, and one more.
    let mut many: Vec<String> = (0..MAX_LOOKUP_KEYS - 1)
        .map(|i| format!("id:n{i}"))
        .collect();
    many.push("id:b".into());
    let found = store.dedupe_lookup("s", &many, t).await.unwrap();
    assert_eq!(found.len(), MAX_LOOKUP_KEYS);
    assert!(found[..MAX_LOOKUP_KEYS - 1].iter().all(Option::is_none));
    assert_eq!(found[MAX_LOOKUP_KEYS - 1], Some(b));
    many.push("id:a".into());
    assert!(matches!(
        store.dedupe_lookup("s", &many, t).await,
        Err(StoreError::TooLarge { .. })
    ));
}
for_each_fresh_store!(
    a_dedupe_lookup_answers_each_key_of_its_source_in_order,
    super::dedupe_lookups
);

/// A key whose dedupe TTL ran out answers none (its entry is still stored), until
/// the event is accepted again: then the new entry.
async fn an_expired_key_is_not_held(store: &dyn Store) {
    let ttl = Duration::from_secs(2);
    let with_ttl = || NewEntry {
        dedupe_ttl: ttl,
        ..entry("s", "evt_ttl")
    };
    let first = accept_new(store, with_ttl()).await;
    let asked = keys(&["evt_ttl"]);
    assert_eq!(
        store.dedupe_lookup("s", &asked, now_ms()).await.unwrap(),
        vec![Some(first.clone())]
    );
    // Redis expires the key by its own clock (PX): wait for the lookup to see it.
    crate::support::wait_until_ok("the dedupe key expires", DEADLINE, async || {
        match store.dedupe_lookup("s", &asked, now_ms()).await.unwrap() {
            found if found == vec![None] => Ok(()),
            found => Err(format!("{found:?}")),
        }
    })
    .await;
    assert_eq!(stored(store, &first).await.id, first, "the entry stays");
    let second = accept_new(store, with_ttl()).await;
    assert_ne!(first, second);
    assert_eq!(
        store.dedupe_lookup("s", &asked, now_ms()).await.unwrap(),
        vec![Some(second)]
    );
}
for_each_fresh_store!(
    a_dedupe_key_whose_ttl_ran_out_is_not_held,
    super::an_expired_key_is_not_held
);

// ---------------------------------------------------------------------------
// The reconciliation lease and state.
// ---------------------------------------------------------------------------

fn taken(state: Option<&str>) -> ReconcileLease {
    ReconcileLease::Taken {
        state: state.map(str::to_string),
    }
}

fn held(holder: &str, until: i64) -> ReconcileLease {
    ReconcileLease::Held {
        holder: holder.to_string(),
        until,
    }
}

/// One holder at a time: A takes the lease, B is refused until it runs out (A
/// renewing it moves that), then B takes it with A's state; A, having lost it,
/// keeps nothing; a release lets the other take it at once, and leaves the state.
/// Another source's lease is its own, and retention keeps every state.
async fn one_reconciler_at_a_time(store: &dyn Store) {
    let t = now_ms();
    assert_eq!(
        store.lease_reconcile("s", "A", t, t + 1000).await.unwrap(),
        taken(None)
    );
    assert_eq!(
        store
            .lease_reconcile("s", "B", t + 10, t + 1010)
            .await
            .unwrap(),
        held("A", t + 1000)
    );
    assert!(
        store
            .save_reconcile("s", "A", r#"{"n":1}"#, t + 20)
            .await
            .unwrap()
    );
    assert!(
        !store
            .save_reconcile("s", "B", r#"{"n":9}"#, t + 20)
            .await
            .unwrap(),
        "B holds no lease"
    );
    // A renews its own lease, and finds its state.
    assert_eq!(
        store
            .lease_reconcile("s", "A", t + 30, t + 2000)
            .await
            .unwrap(),
        taken(Some(r#"{"n":1}"#))
    );
    assert_eq!(
        store
            .lease_reconcile("s", "B", t + 1500, t + 3000)
            .await
            .unwrap(),
        held("A", t + 2000),
        "the renewal holds past the first lease's end"
    );
    // A's lease runs until t + 2000: at that time it no longer runs past now.
    assert_eq!(
        store
            .lease_reconcile("s", "B", t + 2000, t + 3000)
            .await
            .unwrap(),
        taken(Some(r#"{"n":1}"#))
    );
    assert!(
        !store
            .save_reconcile("s", "A", r#"{"n":2}"#, t + 2001)
            .await
            .unwrap(),
        "A lost the lease"
    );
    assert_eq!(
        store
            .lease_reconcile("s", "A", t + 2002, t + 4000)
            .await
            .unwrap(),
        held("B", t + 3000)
    );
    // B renews: the state is still A's last.
    assert_eq!(
        store
            .lease_reconcile("s", "B", t + 2003, t + 3000)
            .await
            .unwrap(),
        taken(Some(r#"{"n":1}"#))
    );
    // A release by one that does not hold the lease leaves it alone.
    store.release_reconcile("s", "A").await.unwrap();
    assert_eq!(
        store
            .lease_reconcile("s", "A", t + 2004, t + 4000)
            .await
            .unwrap(),
        held("B", t + 3000)
    );
    assert!(
        store
            .save_reconcile("s", "B", r#"{"n":3}"#, t + 2005)
            .await
            .unwrap()
    );
    store.release_reconcile("s", "B").await.unwrap();
    assert!(
        !store
            .save_reconcile("s", "B", r#"{"n":4}"#, t + 2006)
            .await
            .unwrap(),
        "a released lease keeps nothing"
    );
    assert_eq!(
        store
            .lease_reconcile("s", "A", t + 2007, t + 5000)
            .await
            .unwrap(),
        taken(Some(r#"{"n":3}"#)),
        "taken at once after the release, with the state"
    );

    // Another source's lease is its own.
    assert_eq!(
        store
            .lease_reconcile("t", "B", t + 2008, t + 5000)
            .await
            .unwrap(),
        taken(None)
    );
    // Retention purges entries, never a reconciliation state.
    let far = t + 10 * 86_400_000;
    store.purge(far, far, far, 100).await.unwrap();
    assert_eq!(
        store
            .lease_reconcile("s", "A", t + 2009, t + 5000)
            .await
            .unwrap(),
        taken(Some(r#"{"n":3}"#))
    );
}
for_each_fresh_store!(
    a_reconciliation_lease_has_one_holder_at_a_time,
    super::one_reconciler_at_a_time
);

/// A state of about 100 KiB (any text: the caller's JSON) reads back as kept; one
/// past the limit is refused and changes nothing.
async fn large_states(store: &dyn Store) {
    let t = now_ms();
    assert_eq!(
        store
            .lease_reconcile("s", "A", t, t + 60_000)
            .await
            .unwrap(),
        taken(None)
    );
    let cursor: String = (0..100 * 1024 / 16).map(|i| format!("é{i:014}")).collect();
    let state = format!(
        r#"{{"cursor":"{cursor}","quote":""
"}}"#
    );
    assert!(state.len() > 100 * 1024);
    assert!(store.save_reconcile("s", "A", &state, t + 1).await.unwrap());
    assert_eq!(
        store
            .lease_reconcile("s", "A", t + 2, t + 60_000)
            .await
            .unwrap(),
        taken(Some(&state))
    );
    let too_large = "x".repeat(MAX_RECONCILE_STATE + 1);
    assert!(matches!(
        store.save_reconcile("s", "A", &too_large, t + 3).await,
        Err(StoreError::TooLarge { .. })
    ));
    assert_eq!(
        store
            .lease_reconcile("s", "A", t + 4, t + 60_000)
            .await
            .unwrap(),
        taken(Some(&state))
    );
}
for_each_fresh_store!(
    a_large_reconciliation_state_round_trips,
    super::large_states
);
