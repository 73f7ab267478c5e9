//! What reconciliation with a provider keeps in the store, on every backend: the
//! origin of each entry, as accepted and as marked later.

use hookgate::store::{
    IndexLookup, IndexedValue, ListQuery, NewEntry, Origin, RouteOrder, Status, Store,
};

use super::{LEASE, accept_new, entry, page_through, stored};
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
