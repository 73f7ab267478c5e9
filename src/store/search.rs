//! Payload search: entries found by what their bodies and headers hold, on every
//! store, in two ways.
//!
//! * **By index.** A source may name JSON pointers to index (`[sources.index]`):
//!   ingest extracts their values at accept ([`index_value`]) and the store keeps
//!   them with the entry, so an `equals` or `in` on one is a lookup
//!   ([`Search::indexed`](super::Search::indexed)), whatever the number of entries.
//! * **By scan.** Any other predicate reads the entries of the window newest first,
//!   in pages, with their bodies, at most [`SCAN_MAX`] of them per request; an answer
//!   that stopped says where (`stopped_at`), and its cursor goes on from there.
//!
//! Both read candidates through the store's parts (`indexed`, `list`, `sizes`,
//! `get_many`) and decide here, the same way for every backend, with the route
//! filter's predicates ([`Filter`]). Whole entries are read in batches of at most
//! [`SCAN_BYTES`] (their sizes asked first, without their bodies), each decided and
//! dropped before the next is read: a round of 500 entries of 1 MiB would otherwise
//! hold half a gigabyte at once, which one search request must not cost.

use super::{Entry, ListQuery, ListedEntry, MAX_PAGE, Store, StoreError, id_floor};
use crate::routing::filter::{Filter, Subject};

/// The longest indexed value (its canonical text, see [`index_value`]): a longer one
/// is not indexed, and a search for one scans.
pub const INDEX_VALUE_MAX: usize = 512;

/// The most entries one search request reads to decide a predicate the indexes do
/// not answer; past it the answer says where it stopped.
pub const SCAN_MAX: usize = 10_000;

/// Entries read per round of a scan.
const SCAN_ROUND: usize = 500;

/// The most bytes (stored headers and bodies) of the entries one batch of a search
/// reads at once; an entry larger than this is read alone.
pub const SCAN_BYTES: u64 = 4 << 20;

/// One indexed value of an entry: the index's name (a key of `[sources.index]`) and
/// the value its pointer found, as [`index_value`] writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedValue {
    pub name: String,
    pub value: String,
}

/// The text an index keeps for a JSON value: a string as its JSON text (quoted, so
/// `"1"` and `1` differ), a number as its value (`1`, `1.0` and `1e0` are one), `true`,
/// `false`, `null`. Arrays, objects and values longer than [`INDEX_VALUE_MAX`] have
/// none. Ingest and search both write values this way, so equal values meet.
pub fn index_value(v: &serde_json::Value) -> Option<String> {
    let text = match v {
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(f) if f.is_finite() => format!("{f}"),
            _ => n.to_string(),
        },
        serde_json::Value::String(_) | serde_json::Value::Bool(_) | serde_json::Value::Null => {
            serde_json::to_string(v).ok()?
        }
        serde_json::Value::Array(_) | serde_json::Value::Object(_) => return None,
    };
    (text.len() <= INDEX_VALUE_MAX).then_some(text)
}

/// The values of a source's indexes in `body` (JSON; anything else has none): for
/// each `(name, pointer)`, the value found there, when it has an index text.
pub fn extract(indexes: &[(String, String)], body: &[u8]) -> Vec<IndexedValue> {
    if indexes.is_empty() {
        return Vec::new();
    }
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Vec::new();
    };
    indexes
        .iter()
        .filter_map(|(name, pointer)| {
            let value = index_value(doc.pointer(pointer)?)?;
            Some(IndexedValue {
                name: name.clone(),
                value,
            })
        })
        .collect()
}

/// A lookup in one index of one source: the ids of the entries whose value is one
/// of `values`, newest first, strictly below `below` and at or above `floor` (ids,
/// see [`id_floor`]), at most `limit`.
#[derive(Debug, Clone)]
pub struct IndexLookup {
    pub source: String,
    pub name: String,
    pub values: Vec<String>,
    pub below: Option<String>,
    pub floor: Option<String>,
    pub limit: usize,
}

/// A search: the listing's filters, window and cursor (`list`), predicates on the
/// body and headers (`filter`), and the index lookup that gives the candidates, when
/// one of the predicates is on an indexed pointer of `list.source`.
#[derive(Debug, Clone)]
pub struct SearchQuery {
    pub list: ListQuery,
    pub filter: Filter,
    pub index: Option<IndexUse>,
    /// The most entries to read with their bodies ([`SCAN_MAX`] for a request).
    pub scan_max: usize,
}

/// Which index answers a search, and the values it looks up (index texts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexUse {
    pub name: String,
    pub values: Vec<String>,
}

/// What a search found: a page of entries (as a listing shows them) and its cursor,
/// how many entries it read to decide, and where it stopped when it ran out of
/// [`SCAN_MAX`] before it had a page or the window's end.
#[derive(Debug, Clone)]
pub struct SearchPage {
    pub entries: Vec<ListedEntry>,
    /// Where the next page starts; `None` when the window holds nothing more.
    pub next_cursor: Option<String>,
    /// Entries read with their bodies (candidates of the index, or of the scan).
    pub scanned: usize,
    /// Whether the window was searched to its end (or to the page's last entry).
    /// When not, the cursor goes on from where the search stopped.
    pub complete: bool,
    /// The arrival time (unix ms) of the last entry read, when not complete: the
    /// entries older than it are not searched yet.
    pub stopped_at: Option<i64>,
    /// The index that gave the candidates.
    pub index: Option<String>,
}

impl ListQuery {
    /// Whether a whole entry passes this query's filters (what `list` decides from
    /// its indexes): source, route and status (the route's delivery's, when a route is
    /// named), event type and id, and the window.
    pub(crate) fn matches_entry(&self, e: &Entry) -> bool {
        let status = match &self.route {
            Some(route) => match e.delivery(route) {
                Some(d) => d.status,
                None => return false,
            },
            None => e.status,
        };
        self.source.as_ref().is_none_or(|s| *s == e.source)
            && self.status.is_none_or(|s| s == status)
            && self.since.is_none_or(|t| e.received_at >= t)
            && self.until.is_none_or(|t| e.received_at < t)
            && self.matches_inside(&e.listed())
    }
}

/// Whether `e` passes `filter` (its body and header predicates; its event types).
fn passes(filter: &Filter, e: &Entry) -> bool {
    filter.matches(&Subject {
        event_type: e.event_type.as_deref(),
        body: &e.body,
        headers: &e.headers,
    })
}

/// Run `q` on `store` (see the module's doc). A search with no predicate and no
/// index is the listing itself.
pub async fn search<S: Store + ?Sized>(
    store: &S,
    q: &SearchQuery,
) -> Result<SearchPage, StoreError> {
    let limit = q.list.limit.clamp(1, MAX_PAGE);
    if q.index.is_none() && q.filter.takes_everything() {
        let page = store.list(&q.list).await?;
        return Ok(SearchPage {
            entries: page.entries,
            next_cursor: page.next_cursor,
            scanned: 0,
            complete: true,
            stopped_at: None,
            index: None,
        });
    }
    let mut found: Vec<ListedEntry> = Vec::new();
    let mut scanned = 0usize;
    let mut below = q.list.scan_below();
    let mut last_at = None;
    let mut exhausted = false;
    let scan_max = q.scan_max.max(1);
    // A listing may answer a round with no candidate and a cursor (its own filters
    // found nothing in what it read): the rounds are bounded too.
    let mut rounds = scan_max.div_ceil(SCAN_ROUND) + 8;
    // A round reads a page's worth first (an index's candidates mostly match), then
    // four times more each round while it finds little, up to `SCAN_ROUND`.
    let mut round = (limit + 1).min(SCAN_ROUND);
    while found.len() <= limit && scanned < scan_max && rounds > 0 {
        rounds -= 1;
        let want = round.min(scan_max - scanned);
        round = (round * 4).min(SCAN_ROUND);
        // The candidates of this round, newest first, (source, id); whether more
        // may follow, and where the next round starts.
        let (candidates, more, next_below): (Vec<(String, String)>, bool, Option<String>) =
            match (&q.index, &q.list.source) {
                (Some(ix), Some(source)) => {
                    let ids = store
                        .indexed(&IndexLookup {
                            source: source.clone(),
                            name: ix.name.clone(),
                            values: ix.values.clone(),
                            below: below.clone(),
                            floor: q.list.since.map(id_floor),
                            limit: want,
                        })
                        .await?;
                    let more = ids.len() >= want;
                    let next = ids.last().cloned();
                    let keys = ids.into_iter().map(|id| (source.clone(), id)).collect();
                    (keys, more, next)
                }
                _ => {
                    let mut page_q = q.list.clone();
                    page_q.cursor = below.clone();
                    page_q.until = None;
                    page_q.limit = want;
                    let page = store.list(&page_q).await?;
                    let more = page.next_cursor.is_some();
                    let next = page
                        .next_cursor
                        .or_else(|| page.entries.last().map(|e| e.id.clone()));
                    let keys = page.entries.into_iter().map(|e| (e.source, e.id)).collect();
                    (keys, more, next)
                }
            };
        exhausted = !more;
        if next_below.is_some() {
            below = next_below;
        }
        let sizes = store.sizes(&candidates).await?;
        for batch in batches(&candidates, &sizes, SCAN_BYTES) {
            let entries = store.get_many(batch).await?;
            // Entries purged between the reads are missing: they are not found.
            for e in entries {
                scanned += 1;
                last_at = Some(e.received_at);
                if q.list.matches_entry(&e) && passes(&q.filter, &e) && found.len() <= limit {
                    found.push(e.listed());
                }
            }
        }
        if exhausted {
            break;
        }
    }
    let full = found.len() > limit;
    found.truncate(limit);
    let (next_cursor, complete) = match (full, exhausted) {
        (true, _) => (found.last().map(|e| e.id.clone()), true),
        (false, true) => (None, true),
        // The budget ran out before a page or the end: go on below what was read.
        (false, false) => (below, false),
    };
    Ok(SearchPage {
        entries: found,
        next_cursor,
        scanned,
        complete,
        stopped_at: if complete { None } else { last_at },
        index: q.index.as_ref().map(|i| i.name.clone()),
    })
}

/// `keys` cut, in order, into runs whose `sizes` add up to at most `budget` bytes (a
/// run holds one key at least, however large).
fn batches<'a, K>(
    keys: &'a [K],
    sizes: &'a [u64],
    budget: u64,
) -> impl Iterator<Item = &'a [K]> + 'a {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= keys.len() {
            return None;
        }
        let mut end = start;
        let mut bytes = 0u64;
        while end < keys.len() {
            // A size the store did not give (an entry purged meanwhile) costs nothing.
            let size = sizes.get(end).copied().unwrap_or(0);
            if end > start && bytes.saturating_add(size) > budget {
                break;
            }
            bytes = bytes.saturating_add(size);
            end += 1;
        }
        let run = &keys[start..end];
        start = end;
        Some(run)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn batches_hold_at_most_the_budget_and_a_large_entry_alone() {
        let keys = [1, 2, 3, 4, 5, 6];
        let sizes = [3, 3, 5, 12, 1, 0];
        let runs: Vec<&[i32]> = batches(&keys, &sizes, 6).collect();
        assert_eq!(runs, vec![&[1, 2][..], &[3][..], &[4][..], &[5, 6][..]]);
        assert_eq!(
            batches(&keys, &[], 6).count(),
            1,
            "unknown sizes cost nothing"
        );
        assert_eq!(batches::<i32>(&[], &[], 6).count(), 0);
    }

    #[test]
    fn equal_values_have_one_text_and_different_types_differ() {
        assert_eq!(index_value(&json!(1200)), index_value(&json!(1200.0)));
        assert_eq!(index_value(&json!(1200)).as_deref(), Some("1200"));
        assert_eq!(index_value(&json!("1200")).as_deref(), Some("\"1200\""));
        assert_eq!(index_value(&json!(true)).as_deref(), Some("true"));
        assert_eq!(index_value(&json!(null)).as_deref(), Some("null"));
        assert_eq!(index_value(&json!([1])), None);
        assert_eq!(index_value(&json!({"a": 1})), None);
        assert_eq!(index_value(&json!("x".repeat(INDEX_VALUE_MAX))), None);
    }

    #[test]
    fn extraction_takes_each_pointer_that_has_a_value() {
        let indexes = vec![
            ("customer".to_string(), "/data/object/customer".to_string()),
            ("amount".to_string(), "/data/object/amount".to_string()),
            ("missing".to_string(), "/nope".to_string()),
        ];
        let body = br#"{"data":{"object":{"customer":"cus_1","amount":5}}}"#;
        let got = extract(&indexes, body);
        assert_eq!(
            got,
            vec![
                IndexedValue {
                    name: "customer".into(),
                    value: "\"cus_1\"".into()
                },
                IndexedValue {
                    name: "amount".into(),
                    value: "5".into()
                },
            ]
        );
        assert!(extract(&indexes, b"not json").is_empty());
    }
}
