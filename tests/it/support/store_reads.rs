//! What tests read back from a store to check it: listing pages, the entry an ingest
//! answer names, the paused sources.

use hookgate::store::{Entry, ListQuery, ListedEntry, Page, Status, Store};

/// The first page of `store`'s listing of the entries with `status`, up to `limit`.
pub async fn first_page_with_status(store: &dyn Store, status: Status, limit: usize) -> Page {
    let query = ListQuery {
        status: Some(status),
        limit,
        ..Default::default()
    };
    store.list(&query).await.expect("list by status")
}

/// The first page of `store`'s listing of the entries of `source`, up to `limit`.
pub async fn first_page_of_source(store: &dyn Store, source: &str, limit: usize) -> Page {
    let query = ListQuery {
        source: Some(source.into()),
        limit,
        ..Default::default()
    };
    store.list(&query).await.expect("list by source")
}

/// Assert that each of `listed` is its stored entry as a listing shows it: the
/// entry minus headers and body.
pub async fn assert_listed_as_stored(store: &dyn Store, listed: &[ListedEntry]) {
    for e in listed {
        let full = store
            .get(&e.id)
            .await
            .expect("get a listed entry")
            .unwrap_or_else(|| panic!("listed entry {} is not stored", e.id));
        assert_eq!(
            *e,
            full.listed(),
            "a listed entry is its entry minus headers and body"
        );
    }
}

/// The stored entry an ingest answer (`{"id": …}`) names.
pub async fn answered_entry(store: &dyn Store, answer: &serde_json::Value) -> Entry {
    let id = answer["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no entry id in {answer}"));
    store
        .get(id)
        .await
        .expect("get the entry")
        .unwrap_or_else(|| panic!("{id} is not stored"))
}

/// The sources paused as a whole (not one of their routes), sorted.
pub async fn paused_sources(store: &dyn hookgate::store::Store) -> Vec<String> {
    store
        .paused()
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.route.is_none())
        .map(|p| p.source)
        .collect()
}
