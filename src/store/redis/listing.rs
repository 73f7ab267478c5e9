//! Listings on Redis: pages of entries (or of ids only), newest first.
//!
//! Ids sort by arrival (UUIDv7), so the per-status sorted sets (all scores 0, in
//! lexical order) answer a page by range (`ZREVRANGEBYLEX`); a listing of every
//! status merges the status sets, and one of every source merges the sources. A
//! listing of a route reads the route's delivery status sets (`rst:<route>:<status>`)
//! instead of the entry's. What a page shows of each entry comes from the listing
//! script, which never sends a body.

use std::collections::HashMap;

use super::RedisStore;
use super::codec::listed_from_fields;
use crate::store::{
    Backend, IdPage, ListQuery, ListedEntry, MAX_PAGE, Page, Status, StoreError, id_floor,
};

/// Most entries one listing script call reads (each may copy a body inside Redis).
const LISTED_BATCH: usize = 100;
/// Most entries a listing round looks through when a filter is inside the entries
/// (event type, event id): the script sends back only the matches, so a search that
/// finds little reads up to this many per round, and a page about
/// `SEARCH_ROUND × ROUNDS` before it answers with a cursor to go on from.
const SEARCH_ROUND: usize = 500;
/// Rounds of one listing page.
const ROUNDS: usize = 20;

impl RedisStore {
    /// Entries, newest first, filtered (see `Store::list`).
    pub(super) async fn list_page(&self, q: &ListQuery) -> Result<Page, StoreError> {
        let limit = q.limit.clamp(1, MAX_PAGE);
        let sources = match &q.source {
            Some(s) => vec![s.clone()],
            None => self.sources().await?,
        };
        let floor = q.since.map(id_floor);
        // The scan position: ids strictly below it are still to be looked at.
        let mut below = q.scan_below();
        let mut entries: Vec<ListedEntry> = Vec::new();
        let mut exhausted = false;
        // Filters that the indexes do not cover (event type, event id) may need
        // several rounds; a bounded number of them, then the cursor says where to go
        // on. Such a search reads more per round while it finds little: four times
        // more each round, up to `SEARCH_ROUND`.
        let search = q.filters_inside();
        let mut round = limit + 1;
        for _ in 0..ROUNDS {
            let need = limit + 1 - entries.len();
            let need = if search { need.max(round) } else { need };
            round = (round * 4).min(SEARCH_ROUND);
            let mut ids: Vec<(String, String)> = Vec::new();
            for s in &sources {
                for id in self
                    .source_ids(s, q, below.as_deref(), floor.as_deref(), need)
                    .await?
                {
                    ids.push((id, s.clone()));
                }
            }
            ids.sort_by(|a, b| b.0.cmp(&a.0));
            // Every source gave fewer than asked: nothing older is left. (A full
            // batch says nothing: the next round looks further down.)
            if ids.len() < need {
                exhausted = true;
            }
            ids.truncate(need);
            // An id whose hash is gone (purged between the two reads) is skipped.
            for e in self.listed_many(&ids, q).await?.into_iter().flatten() {
                if q.matches_inside(&e) {
                    entries.push(e);
                }
            }
            if let Some((last, _)) = ids.last() {
                below = Some(last.clone());
            }
            if exhausted || entries.len() > limit {
                break;
            }
        }
        let next_cursor = if entries.len() > limit {
            entries.truncate(limit);
            entries.last().map(|e| e.id.clone())
        } else if exhausted {
            None
        } else {
            below
        };
        Ok(Page {
            entries,
            next_cursor,
        })
    }

    /// The ids `list_page` would return (see `Store::list_ids`).
    pub(super) async fn list_id_page(&self, q: &ListQuery) -> Result<IdPage, StoreError> {
        if q.filters_inside() {
            // The event type and id are inside the entries: the listing reads them.
            let page = self.list_page(q).await?;
            return Ok(IdPage {
                ids: page.entries.into_iter().map(|e| e.id).collect(),
                next_cursor: page.next_cursor,
            });
        }
        // Everything else is in the status indexes: no entry is read.
        let limit = q.limit.clamp(1, MAX_PAGE);
        let sources = match &q.source {
            Some(s) => vec![s.clone()],
            None => self.sources().await?,
        };
        let floor = q.since.map(id_floor);
        let below = q.scan_below();
        let mut ids = Vec::new();
        for s in &sources {
            ids.extend(
                self.source_ids(s, q, below.as_deref(), floor.as_deref(), limit + 1)
                    .await?,
            );
        }
        ids.sort_by(|a, b| b.cmp(a));
        ids.dedup();
        Ok(IdPage::from_overfetched(ids, limit))
    }

    /// The listed form of entries of one source (`None` where the entry is gone, or
    /// does not match the event type and id of `q`, when it names them).
    pub(super) async fn listed(
        &self,
        source: &str,
        ids: &[String],
        q: Option<&ListQuery>,
    ) -> Result<Vec<Option<ListedEntry>>, StoreError> {
        let mut out = Vec::with_capacity(ids.len());
        let event_type = q.and_then(|q| q.event_type.as_deref()).unwrap_or_default();
        let event_id = q.and_then(|q| q.event_id.as_deref()).unwrap_or_default();
        for chunk in ids.chunks(LISTED_BATCH) {
            let mut inv = self.scripts.listed.prepare_invoke();
            for id in chunk {
                inv.key(self.key(source, &format!("e:{id}")));
            }
            inv.arg(event_type).arg(event_id);
            let mut c = self.conn();
            let rows: Vec<Option<Vec<String>>> = self.timed(inv.invoke_async(&mut c)).await?;
            if rows.len() != chunk.len() {
                return Err(StoreError::backend(
                    Backend::Redis,
                    format!(
                        "listing script answered {} rows for {} entries",
                        rows.len(),
                        chunk.len()
                    ),
                ));
            }
            for (id, row) in chunk.iter().zip(rows) {
                out.push(match row {
                    Some(fields) => Some(listed_from_fields(id, source, fields)?),
                    None => None,
                });
            }
        }
        Ok(out)
    }

    /// The listed form of `ids` (each with its source), in the same order.
    async fn listed_many(
        &self,
        ids: &[(String, String)],
        q: &ListQuery,
    ) -> Result<Vec<Option<ListedEntry>>, StoreError> {
        let mut by_source: HashMap<&str, Vec<(usize, String)>> = HashMap::new();
        for (i, (id, source)) in ids.iter().enumerate() {
            by_source
                .entry(source.as_str())
                .or_default()
                .push((i, id.clone()));
        }
        let mut out: Vec<Option<ListedEntry>> = vec![None; ids.len()];
        for (source, items) in by_source {
            let just_ids: Vec<String> = items.iter().map(|(_, id)| id.clone()).collect();
            let listed = self.listed(source, &just_ids, Some(q)).await?;
            for ((i, _), listed) in items.iter().zip(listed) {
                out[*i] = listed;
            }
        }
        Ok(out)
    }

    /// The index sets a listing of `source` by `q` reads: the entry status sets, or
    /// with a route that route's delivery status sets (a delivery is filtered when
    /// its route's transform skipped it); the one of `q.status`, or every one.
    fn index_keys(&self, source: &str, q: &ListQuery) -> Vec<String> {
        let statuses = Status::ALL
            .into_iter()
            .filter(|s| q.status.is_none_or(|want| want == *s));
        match q.route.as_deref() {
            None => statuses.map(|s| self.status_key(source, s)).collect(),
            Some(route) => statuses
                .map(|s| self.route_status_key(source, route, s))
                .collect(),
        }
    }

    /// Up to `n` ids of one source that `q` selects by index (its status and route),
    /// newest first, strictly older than `below` and not older than `floor`.
    async fn source_ids(
        &self,
        source: &str,
        q: &ListQuery,
        below: Option<&str>,
        floor: Option<&str>,
        n: usize,
    ) -> Result<Vec<String>, StoreError> {
        let max = match below {
            Some(c) => format!("({c}"),
            None => "+".to_string(),
        };
        let min = match floor {
            Some(f) => format!("[{f}"),
            None => "-".to_string(),
        };
        let mut ids: Vec<String> = Vec::new();
        for index in self.index_keys(source, q) {
            let mut c = self.conn();
            let page: Vec<String> = self
                .timed(
                    redis::cmd("ZREVRANGEBYLEX")
                        .arg(index)
                        .arg(&max)
                        .arg(&min)
                        .arg("LIMIT")
                        .arg(0)
                        .arg(n)
                        .query_async(&mut c),
                )
                .await?;
            ids.extend(page);
        }
        // The newest `n` of the union are among the newest `n` of each set.
        ids.sort_by(|a, b| b.cmp(a));
        ids.dedup();
        ids.truncate(n);
        Ok(ids)
    }
}
