//! The `Search` part of the store contract, on every backend: indexed values found
//! by lookup, newest first, within a cursor and a floor, per source, and gone with
//! their entry; whole entries read by the page; and the search built on them
//! (`store::search`): by index, by scan with a budget that says where it stopped,
//! with header predicates and the listing's filters, pages that never repeat or
//! skip an entry.

use bytes::Bytes;
use hookgate::routing::filter::{Filter, Test};
use hookgate::store::search::{IndexLookup, IndexUse, SearchQuery, extract, search};
use hookgate::store::{Header, ListQuery, NewEntry, Status, Store, id_floor};
use serde_json::json;

use super::{accept_new, entry_at};
use crate::for_each_fresh_store;

const INDEX: &[(&str, &str)] = &[("customer", "/data/customer")];

fn indexes() -> Vec<(String, String)> {
    INDEX
        .iter()
        .map(|(n, p)| (n.to_string(), p.to_string()))
        .collect()
}

/// Entry `i` of `source`, received at `t + i`: customer `cus_A` when `i` is even,
/// else `cus_B`; every third is filtered (no route); every fifth carries the header
/// `x-tenant: blue`.
fn indexed_entry(source: &str, t: i64, i: usize) -> NewEntry {
    let mut e = entry_at(
        source,
        &format!("evt_{source}_{i}"),
        t + i as i64,
        "thing.happened",
    );
    let customer = if i.is_multiple_of(2) {
        "cus_A"
    } else {
        "cus_B"
    };
    let body = json!({"id": format!("evt_{i}"), "data": {"customer": customer, "n": i}});
    e.body = Bytes::from(body.to_string());
    e.index = extract(&indexes(), &e.body);
    if i.is_multiple_of(3) {
        e.routes.clear();
    }
    if i.is_multiple_of(5) {
        e.headers.push(Header {
            name: "x-tenant".into(),
            value: b"blue".to_vec(),
        });
    }
    e
}

/// Accept entries 0..n of `source` from `t`; their ids by `i`.
async fn accept_indexed(store: &dyn Store, source: &str, t: i64, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(accept_new(store, indexed_entry(source, t, i)).await);
    }
    ids
}

fn lookup(source: &str, values: &[&str], limit: usize) -> IndexLookup {
    IndexLookup {
        source: source.into(),
        name: "customer".into(),
        values: values.iter().map(|v| v.to_string()).collect(),
        below: None,
        floor: None,
        limit,
    }
}

async fn indexed_values_are_looked_up_newest_first_and_leave_with_their_entry(store: &dyn Store) {
    let t = hookgate::clock::system_now_ms() - 60_000;
    let ids = accept_indexed(store, "ix", t, 30).await;
    // The same values in another source are not this source's.
    accept_indexed(store, "other", t, 4).await;
    let newest_first = |pick: &dyn Fn(usize) -> bool| -> Vec<String> {
        let mut v: Vec<String> = (0..30)
            .filter(|i| pick(*i))
            .map(|i| ids[i].clone())
            .collect();
        v.reverse();
        v
    };
    let a = "\"cus_A\"";
    let b = "\"cus_B\"";
    assert_eq!(
        store.indexed(&lookup("ix", &[a], 100)).await.unwrap(),
        newest_first(&|i| i % 2 == 0)
    );
    // Several values: merged, newest first, cut at the limit.
    let both = store.indexed(&lookup("ix", &[a, b], 10)).await.unwrap();
    assert_eq!(both, newest_first(&|_| true)[..10].to_vec());
    // Below a cursor, and at or above a floor.
    let mut q = lookup("ix", &[a], 100);
    q.below = Some(ids[20].clone());
    q.floor = Some(id_floor(t + 10));
    assert_eq!(
        store.indexed(&q).await.unwrap(),
        newest_first(&|i| i % 2 == 0 && (10..20).contains(&i))
    );
    assert!(
        store
            .indexed(&lookup("ix", &["\"cus_C\""], 10))
            .await
            .unwrap()
            .is_empty()
    );

    // Whole entries, in the order asked; an unknown id or a wrong source is left out.
    let keys = vec![
        ("ix".to_string(), ids[7].clone()),
        (
            "ix".to_string(),
            "01890000-0000-7000-8000-000000000000".to_string(),
        ),
        ("other".to_string(), ids[3].clone()),
        ("ix".to_string(), ids[2].clone()),
    ];
    let got = store.get_many(&keys).await.unwrap();
    let got_ids: Vec<&str> = got.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(got_ids, vec![ids[7].as_str(), ids[2].as_str()]);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&got[0].body).unwrap()["data"]["customer"],
        "cus_B"
    );
    assert!(got[1].headers.iter().any(|h| h.name == "content-type"));

    // Retention removes the filtered ones (every third) and their indexed values.
    let far = hookgate::clock::system_now_ms() + 86_400_000;
    let purged = store.purge(far, far, far, 1000).await.unwrap();
    assert!(purged.entries >= 10, "{}", purged.entries);
    assert_eq!(
        store.indexed(&lookup("ix", &[a, b], 100)).await.unwrap(),
        newest_first(&|i| i % 3 != 0)
    );
}
for_each_fresh_store!(
    indexed_values_are_looked_up_newest_first_and_leave_with_their_entry,
    super::indexed_values_are_looked_up_newest_first_and_leave_with_their_entry
);

fn query(list: ListQuery, body: Vec<(&str, Test)>, headers: Vec<(&str, Test)>) -> SearchQuery {
    SearchQuery {
        list,
        filter: Filter::of_predicates(
            body.into_iter().map(|(p, t)| (p.to_string(), t)).collect(),
            headers
                .into_iter()
                .map(|(n, t)| (n.to_string(), t))
                .collect(),
        ),
        index: None,
        scan_max: 10_000,
    }
}

/// Every page of `q` from its cursor on: the ids, and whether each page said it
/// was complete.
async fn all_pages(store: &dyn Store, mut q: SearchQuery) -> (Vec<String>, Vec<bool>, usize) {
    let (mut ids, mut complete, mut scanned) = (Vec::new(), Vec::new(), 0);
    for _ in 0..100 {
        let page = search(store, &q).await.unwrap();
        ids.extend(page.entries.iter().map(|e| e.id.clone()));
        complete.push(page.complete);
        scanned += page.scanned;
        match page.next_cursor {
            Some(c) => q.list.cursor = Some(c),
            None => return (ids, complete, scanned),
        }
    }
    panic!("a search that never ends: {complete:?}");
}

async fn searches_by_index_and_by_scan_page_without_repeats_or_gaps(store: &dyn Store) {
    let t = hookgate::clock::system_now_ms() - 60_000;
    let ids = accept_indexed(store, "sx", t, 40).await;
    accept_indexed(store, "sy", t, 6).await;
    let pick = |f: &dyn Fn(usize) -> bool| -> Vec<String> {
        let mut v: Vec<String> = (0..40).filter(|i| f(*i)).map(|i| ids[i].clone()).collect();
        v.reverse();
        v
    };
    let list = |limit: usize| ListQuery {
        source: Some("sx".into()),
        limit,
        ..ListQuery::default()
    };

    // By index, in pages of 3.
    let mut by_index = query(
        list(3),
        vec![("/data/customer", Test::Equals(json!("cus_A")))],
        vec![],
    );
    by_index.index = Some(IndexUse {
        name: "customer".into(),
        values: vec!["\"cus_A\"".into()],
    });
    let first = search(store, &by_index).await.unwrap();
    assert_eq!(first.index.as_deref(), Some("customer"));
    assert!(
        first.scanned <= 4,
        "an index search reads its candidates only"
    );
    let (found, complete, _) = all_pages(store, by_index).await;
    assert_eq!(found, pick(&|i| i % 2 == 0));
    assert!(complete.iter().all(|c| *c));

    // By scan: a prefix on the body and a header, with the status filter.
    let (found, _, _) = all_pages(
        store,
        query(
            ListQuery {
                status: Some(Status::Pending),
                ..list(4)
            },
            vec![("/data/customer", Test::Prefix("cus_".into()))],
            vec![("x-tenant", Test::Equals(json!("blue")))],
        ),
    )
    .await;
    assert_eq!(found, pick(&|i| i % 5 == 0 && i % 3 != 0));
    // Across sources (no source named): both sources' matches.
    let (found, _, _) = all_pages(
        store,
        query(
            ListQuery {
                limit: 100,
                ..ListQuery::default()
            },
            vec![("/data/n", Test::Equals(json!(5)))],
            vec![],
        ),
    )
    .await;
    assert_eq!(found.len(), 2, "entry 5 of sx and of sy");

    // A budget of 7 entries per request: each answer that stopped says where, and
    // the cursors go on until the window's end, reading every entry once.
    let mut tight = query(
        list(50),
        vec![("/data/missing", Test::Exists(true))],
        vec![],
    );
    tight.scan_max = 7;
    let page = search(store, &tight).await.unwrap();
    assert!(page.entries.is_empty());
    assert!(!page.complete);
    assert_eq!(page.scanned, 7);
    assert_eq!(page.stopped_at, Some(t + 33), "the 7th newest of 40");
    let (found, complete, scanned) = all_pages(store, tight).await;
    assert!(found.is_empty());
    assert_eq!(scanned, 40);
    assert_eq!(complete.last(), Some(&true));
    assert!(complete[..complete.len() - 1].iter().all(|c| !c));

    // A window: since and until bound the scan.
    let (found, _, _) = all_pages(
        store,
        query(
            ListQuery {
                since: Some(t + 10),
                until: Some(t + 20),
                ..list(100)
            },
            vec![("/data/customer", Test::Equals(json!("cus_B")))],
            vec![],
        ),
    )
    .await;
    assert_eq!(found, pick(&|i| i % 2 == 1 && (10..20).contains(&i)));
}
for_each_fresh_store!(
    searches_by_index_and_by_scan_page_without_repeats_or_gaps,
    super::searches_by_index_and_by_scan_page_without_repeats_or_gaps
);

/// Each entry's size is told without its body (0 for one not there, or of another
/// source), and a scan over entries larger than a batch of `SCAN_BYTES` reads them in
/// several batches and finds every one, newest first.
async fn sizes_are_told_and_a_scan_of_large_entries_finds_each(store: &dyn Store) {
    use hookgate::store::search::SCAN_BYTES;
    let t = hookgate::clock::system_now_ms() - 60_000;
    let big = usize::try_from(SCAN_BYTES).unwrap() / 2 + 1;
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut e = entry_at("sz", &format!("evt_sz_{i}"), t + i, "thing.happened");
        let body = json!({"n": i, "big": i % 2 == 0, "pad": "x".repeat(big)});
        e.body = Bytes::from(body.to_string());
        ids.push(accept_new(store, e).await);
    }
    let mut keys: Vec<(String, String)> = ids.iter().map(|id| ("sz".into(), id.clone())).collect();
    keys.push(("sz".into(), "00000000-0000-7000-8000-000000000000".into()));
    keys.push(("other".into(), ids[0].clone()));
    let sizes = store.sizes(&keys).await.unwrap();
    assert_eq!(sizes.len(), keys.len());
    for (i, size) in sizes.iter().take(5).enumerate() {
        let size = usize::try_from(*size).unwrap();
        assert!(size > big && size < big + 4096, "entry {i}: {size}");
    }
    assert_eq!(&sizes[5..], &[0, 0]);

    let q = query(
        ListQuery {
            source: Some("sz".into()),
            limit: 10,
            ..ListQuery::default()
        },
        vec![("/big", Test::Equals(json!(true)))],
        vec![],
    );
    let page = search(store, &q).await.unwrap();
    let found: Vec<&str> = page.entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        found,
        vec![ids[4].as_str(), ids[2].as_str(), ids[0].as_str()]
    );
    assert_eq!(page.scanned, 5);
    assert!(page.complete);
}
for_each_fresh_store!(
    sizes_are_told_and_a_scan_of_large_entries_finds_each,
    super::sizes_are_told_and_a_scan_of_large_entries_finds_each
);
