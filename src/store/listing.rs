//! What a listing asks and answers: the filters, the cursor (ids are UUIDv7, so they
//! sort by arrival), and pages that never hold a header or a body.

use super::{Origin, Status};

/// The id bound for a time: UUIDv7 ids start with the unix-ms timestamp in hex, so
/// every id of an entry received at or after `ms` sorts at or after this string.
pub fn id_floor(ms: i64) -> String {
    let ms = u64::try_from(ms.max(0)).unwrap_or(0) & 0xffff_ffff_ffff;
    format!("{:08x}-{:04x}", ms >> 16, ms & 0xffff)
}

/// A listing query. Entries come newest first; `cursor` is the last id of the
/// previous page.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub source: Option<String>,
    /// Only entries with a delivery through this route (of `source`, when set);
    /// `status` then filters by that delivery's status instead of the entry's.
    pub route: Option<String>,
    pub status: Option<Status>,
    pub event_type: Option<String>,
    /// Only the entry (or entries) with this event id, exactly.
    pub event_id: Option<String>,
    /// Received at or after (unix ms).
    pub since: Option<i64>,
    /// Received before (unix ms).
    pub until: Option<i64>,
    pub limit: usize,
    pub cursor: Option<String>,
}

/// An entry as a listing shows it: everything but its headers and body. A listing
/// never reads a body, so a page of a thousand entries costs kilobytes whatever the
/// bodies weigh ([`Store::get`](super::Store::get) returns the whole [`Entry`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedEntry {
    pub id: String,
    pub source: String,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub received_at: i64,
    pub status: Status,
    pub attempts: u32,
    /// Unix milliseconds of the next delivery attempt, while pending.
    pub next_attempt_at: Option<i64>,
    pub last_error: Option<String>,
    pub origin: Origin,
}

/// A dead delivery, as the dead-letter view shows it: no header, no body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The entry's id.
    pub id: String,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub received_at: i64,
    /// When the delivery went dead (unix ms).
    pub dead_at: i64,
    /// The delivery's attempts.
    pub attempts: u32,
    /// The delivery's last error (the dead letter's reason).
    pub last_error: Option<String>,
    /// The kind of its last failed attempt: its dead-letter group. `None` when it
    /// died without an attempt, or before kinds were recorded.
    pub failure: Option<crate::failure::Failure>,
}

/// A page of listed entries (no headers, no bodies) and the cursor of the next page.
#[derive(Debug, Clone)]
pub struct Page {
    pub entries: Vec<ListedEntry>,
    pub next_cursor: Option<String>,
}

/// A page of entry ids, as [`Store::list_ids`](super::Store::list_ids) returns it.
#[derive(Debug, Clone)]
pub struct IdPage {
    pub ids: Vec<String>,
    pub next_cursor: Option<String>,
}

pub const MAX_PAGE: usize = 1000;

impl ListQuery {
    /// Where a newest-first scan starts: ids strictly below this one (the cursor, or
    /// the id bound of `until`, whichever is lower) are still to be looked at.
    pub(crate) fn scan_below(&self) -> Option<String> {
        let until = self.until.map(id_floor);
        match (&self.cursor, until) {
            (Some(c), Some(u)) => Some(c.min(&u).clone()),
            (Some(c), None) => Some(c.clone()),
            (None, until) => until,
        }
    }
}

impl Page {
    /// The page from up to `limit + 1` entries read newest first: the one past
    /// `limit` only says that another page follows.
    pub(crate) fn from_overfetched(mut entries: Vec<ListedEntry>, limit: usize) -> Page {
        let next_cursor = match entries.len() > limit {
            true => {
                entries.truncate(limit);
                entries.last().map(|e| e.id.clone())
            }
            false => None,
        };
        Page {
            entries,
            next_cursor,
        }
    }
}

impl IdPage {
    /// The page from up to `limit + 1` ids read newest first (see
    /// [`Page::from_overfetched`]).
    pub(crate) fn from_overfetched(mut ids: Vec<String>, limit: usize) -> IdPage {
        let next_cursor = match ids.len() > limit {
            true => {
                ids.truncate(limit);
                ids.last().cloned()
            }
            false => None,
        };
        IdPage { ids, next_cursor }
    }
}

impl ListQuery {
    /// Whether `e` passes the filters that only the entry itself can answer (event
    /// type and event id); the indexes answer the others.
    pub(crate) fn matches_inside(&self, e: &ListedEntry) -> bool {
        self.event_type
            .as_ref()
            .is_none_or(|t| e.event_type.as_ref() == Some(t))
            && self
                .event_id
                .as_ref()
                .is_none_or(|t| e.event_id.as_ref() == Some(t))
    }

    /// Whether a filter needs the entries read (see [`ListQuery::matches_inside`]).
    pub(crate) fn filters_inside(&self) -> bool {
        self.event_type.is_some() || self.event_id.is_some()
    }
}
