//! Requests ingest refused, as the store keeps them: the answer to "the provider
//! says it sent it, and there is no entry".
//!
//! A refused request is not a webhook: it may be a forgery, a flood, a sender with
//! the wrong secret or a proxy that rewrote the body. So what is kept is bounded
//! twice. Ingest samples (`ingest::rejections`): each gateway writes at most a few
//! rows per source and reason per second, in one batch a second, and counts the
//! rest. The store keeps the newest [`REJECTIONS_KEEP`] rows per group (a source and
//! a reason; every name that is not a configured source is one group per reason),
//! and the counts per group and hour; housekeeping removes both once older than the
//! dead letters' retention.
//!
//! A row holds no body unless the source keeps them (`keep_rejected_bodies`), and
//! its headers are those an entry of the source would store, with the signature
//! header's value redacted.

use serde::{Deserialize, Serialize};

/// The newest rows kept per group (a source, or every unknown source, and a reason).
pub const REJECTIONS_KEEP: usize = 100;

/// The most rows one listing answers.
pub const REJECTIONS_PAGE_MAX: usize = 500;

/// The group every name that is not a configured source falls in: not a valid
/// source name, so no source's group is it.
pub const UNKNOWN_SOURCES: &str = "*";

/// One refused request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    /// UUIDv7: sorts by arrival.
    pub id: String,
    /// Unix milliseconds.
    pub at: i64,
    /// The source the URL named (escaped and bounded when it is not configured).
    pub source: String,
    /// Whether `source` is a configured source.
    pub known: bool,
    /// Why: the `reason` of `hookgate_ingest_unverified_total` for a refused
    /// signature (`mismatch`, `stale`, …), else the request's outcome (`too_large`,
    /// `unknown_source`, `busy`, `rate_limited`, `ip_not_allowed`, `body_timeout`,
    /// `body_read`).
    pub reason: String,
    /// The HTTP status answered.
    pub status: u16,
    /// The client's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The body's size: as read, or as declared when it was not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// `sha256:<hex>` of the body, when it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The headers an entry of the source would keep (lower-case names; values as
    /// text), the signature's value redacted.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The body (or its first bytes), only for a source with `keep_rejected_bodies`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Vec<u8>>,
}

impl Rejection {
    /// The group the row is bounded in.
    pub fn group(&self) -> (&str, &str) {
        (group_source(&self.source, self.known), &self.reason)
    }

    /// The headers as the SQL stores keep them (JSON).
    pub(crate) fn headers_text(&self) -> Result<String, super::StoreError> {
        serde_json::to_string(&self.headers).map_err(|source| super::StoreError::Encode {
            what: "a rejected request's headers",
            source,
        })
    }
}

/// The source part of a group: the source, or [`UNKNOWN_SOURCES`].
pub fn group_source(source: &str, known: bool) -> &str {
    if known { source } else { UNKNOWN_SOURCES }
}

/// How many requests of one group were refused in one hour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectionCount {
    /// A configured source, or [`UNKNOWN_SOURCES`].
    pub source: String,
    pub reason: String,
    pub count: u64,
    /// The newest refusal counted (unix ms).
    pub last_at: i64,
}

/// What a gateway hands the store once a second: sampled rows, and every refusal
/// counted (sampled or not), per group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RejectionBatch {
    pub rows: Vec<Rejection>,
    pub counts: Vec<RejectionCount>,
}

/// Which rows a listing wants, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RejectionQuery {
    /// The source as the URL named it.
    pub source: Option<String>,
    pub reason: Option<String>,
    /// Only rows older than this id (the previous page's cursor).
    pub before: Option<String>,
    /// Only rows at or after this time (unix ms).
    pub since: Option<i64>,
    pub limit: usize,
}

impl RejectionQuery {
    /// Whether `r` is one of the rows asked for (the cursor and time included).
    pub fn admits(&self, r: &Rejection) -> bool {
        self.source.as_ref().is_none_or(|s| *s == r.source)
            && self.reason.as_ref().is_none_or(|s| *s == r.reason)
            && self.before.as_ref().is_none_or(|b| r.id < *b)
            && self.since.is_none_or(|t| r.at >= t)
    }
}

/// A page of rows, newest first, and the cursor of the next page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RejectionPage {
    pub rows: Vec<Rejection>,
    pub next_cursor: Option<String>,
}

impl RejectionPage {
    /// A page of at most `limit` from `rows` (newest first, one more than `limit`
    /// when there is a next page).
    pub fn of(mut rows: Vec<Rejection>, limit: usize) -> RejectionPage {
        let next_cursor = if rows.len() > limit {
            rows.truncate(limit);
            rows.last().map(|r| r.id.clone())
        } else {
            None
        };
        RejectionPage { rows, next_cursor }
    }
}

/// The hour a time falls in (unix ms → hours since the epoch).
pub fn hour_of(at: i64) -> i64 {
    at.div_euclid(3_600_000)
}

/// Counts summed per group (source and reason), the newest first.
pub fn sum_counts(counts: impl IntoIterator<Item = RejectionCount>) -> Vec<RejectionCount> {
    let mut groups: std::collections::BTreeMap<(String, String), RejectionCount> =
        std::collections::BTreeMap::new();
    for c in counts {
        match groups.get_mut(&(c.source.clone(), c.reason.clone())) {
            Some(g) => {
                g.count = g.count.saturating_add(c.count);
                g.last_at = g.last_at.max(c.last_at);
            }
            None => {
                groups.insert((c.source.clone(), c.reason.clone()), c);
            }
        }
    }
    let mut out: Vec<RejectionCount> = groups.into_values().collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.last_at));
    out
}
