//! The durable store: one trait, two backends.
//!
//! Ingest and the forwarder never talk to each other; the [`Store`] is their only
//! channel. `accept` is the ingest contract: dedupe on (source, dedupe key) and persist
//! the entry atomically, and return only once the entry is durable (fsynced on the
//! embedded store; acknowledged under `appendfsync always` on Redis). A duplicate
//! returns the original entry id and writes nothing.
//!
//! [`open`] is the only place that chooses a backend; everything else sees
//! `Arc<dyn Store>`. Both backends pass the same conformance suite
//! (`tests/it/conformance.rs`).

mod private;
pub mod redis;
pub mod sqlite;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::config::StoreConfig;

/// A store failure. Every variant answers 503 at ingest: the provider retries.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("store timed out after {0:?}")]
    Timeout(Duration),
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("redis: {0}")]
    Redis(#[from] ::redis::RedisError),
    #[error("corrupt entry {id}: {problem}")]
    Corrupt { id: String, problem: String },
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The store stopped for good (the embedded store after a failed fsync).
    #[error(
        "the store stopped after a failed fsync; restart hookgate to recover from what is on disk"
    )]
    Stopped,
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The embedded store's directory is writable by others: files may have been
    /// placed in it already, so hookgate neither uses it nor tightens it by itself.
    #[error(
        "store directory {} is writable by others (mode {mode:04o}); check what is in it, then chmod 700 it",
        path.display()
    )]
    WorldWritable { path: PathBuf, mode: u32 },
    /// Redis may evict keys (its `maxmemory-policy` is not `noeviction`): an evicted
    /// dedupe key lets a webhook through twice, an evicted entry loses one that was
    /// acknowledged. Refused at open; `ping` fails with it while it lasts.
    #[error(
        "redis{} runs with maxmemory-policy {policy}: under memory pressure it evicts dedupe keys (a webhook delivered twice) or acknowledged entries (a webhook lost); run it with maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf as deploy/redis.conf does)",
        .node.as_deref().map(|n| format!(" at {n}")).unwrap_or_default()
    )]
    Evicting {
        /// `host:port` of the cluster node; `None` for a single Redis.
        node: Option<String>,
        policy: String,
    },
    /// A file or directory of the embedded store could not be created, inspected or
    /// made private.
    #[error("cannot {action} {}", path.display())]
    File {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The life of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Waiting for (another) delivery attempt.
    Pending,
    Delivered,
    /// The retry budget ran out or the destination refused it for good.
    Dead,
    /// An operator discarded it.
    Discarded,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Delivered => "delivered",
            Status::Dead => "dead",
            Status::Discarded => "discarded",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "pending" => Status::Pending,
            "delivered" => Status::Delivered,
            "dead" => Status::Dead,
            "discarded" => Status::Discarded,
            _ => return None,
        })
    }

    pub const ALL: [Status; 4] = [
        Status::Pending,
        Status::Delivered,
        Status::Dead,
        Status::Discarded,
    ];
}

/// One request header as received. Values are bytes: header values need not be UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub name: String,
    pub value: Vec<u8>,
}

/// An entry to persist, built by ingest after verification.
#[derive(Debug, Clone)]
pub struct NewEntry {
    /// A fresh id (UUIDv7, so ids sort by arrival time).
    pub id: String,
    pub source: String,
    /// The provider's event id, when the request carries one.
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    /// The dedupe key: the event id, or `body-sha256:<hex>` without one.
    pub dedupe_key: String,
    pub dedupe_ttl: Duration,
    /// Unix milliseconds.
    pub received_at: i64,
    pub headers: Vec<Header>,
    pub body: Bytes,
}

/// The outcome of [`Store::accept`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// Stored now, under this id.
    New(String),
    /// Seen before (within the dedupe TTL): the original entry's id. Nothing written.
    Duplicate(String),
}

impl Accepted {
    pub fn id(&self) -> &str {
        match self {
            Accepted::New(id) | Accepted::Duplicate(id) => id,
        }
    }
}

/// A stored entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub source: String,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub dedupe_key: String,
    pub received_at: i64,
    pub status: Status,
    pub attempts: u32,
    /// Unix milliseconds of the next delivery attempt, while pending.
    pub next_attempt_at: Option<i64>,
    pub last_error: Option<String>,
    /// When the current retry budget started (unix ms): arrival, or the last replay.
    pub budget_start: i64,
    /// Attempts made before the current budget started.
    pub budget_attempts: u32,
    pub headers: Vec<Header>,
    pub body: Bytes,
}

impl Entry {
    /// The entry as a listing shows it.
    pub fn listed(&self) -> ListedEntry {
        ListedEntry {
            id: self.id.clone(),
            source: self.source.clone(),
            event_id: self.event_id.clone(),
            event_type: self.event_type.clone(),
            received_at: self.received_at,
            status: self.status,
            attempts: self.attempts,
            next_attempt_at: self.next_attempt_at,
            last_error: self.last_error.clone(),
        }
    }
}

/// An operator action on an entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// Unix milliseconds.
    pub at: i64,
    /// `replay` or `discard`.
    pub action: String,
    pub actor: String,
    pub note: Option<String>,
}

/// What [`Store::replay`] and [`Store::discard`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Done,
    NotFound,
    /// The entry's status does not allow it (replay of a pending entry; discard of a
    /// delivered or discarded one).
    Conflict(Status),
}

/// Per-source counters and gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceStats {
    /// Entries stored (duplicates excluded).
    pub received: u64,
    pub duplicates: u64,
    /// Requests refused by verification.
    pub unverified: u64,
    pub pending: u64,
    pub delivered: u64,
    pub dead: u64,
    pub discarded: u64,
    /// Arrival time (unix ms) of the oldest pending entry.
    pub oldest_pending_at: Option<i64>,
}

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
    pub status: Option<Status>,
    pub event_type: Option<String>,
    /// Received at or after (unix ms).
    pub since: Option<i64>,
    /// Received before (unix ms).
    pub until: Option<i64>,
    pub limit: usize,
    pub cursor: Option<String>,
}

/// An entry as a listing shows it: everything but its headers and body. A listing
/// never reads a body, so a page of a thousand entries costs kilobytes whatever the
/// bodies weigh ([`Store::get`] returns the whole [`Entry`]).
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
}

/// A page of listed entries (no headers, no bodies) and the cursor of the next page.
#[derive(Debug, Clone)]
pub struct Page {
    pub entries: Vec<ListedEntry>,
    pub next_cursor: Option<String>,
}

/// A page of entry ids, as [`Store::list_ids`] returns it.
#[derive(Debug, Clone)]
pub struct IdPage {
    pub ids: Vec<String>,
    pub next_cursor: Option<String>,
}

pub const MAX_PAGE: usize = 1000;

/// One delivery attempt, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1 for the first attempt.
    pub n: u32,
    /// Unix milliseconds when the attempt started.
    pub at: i64,
    /// The destination's HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// The error kind when it did not answer (or why the answer failed).
    pub error: Option<String>,
    pub latency_ms: u64,
}

/// A claimed entry: leased to one worker until it completes it or the lease expires
/// (then another worker claims it again: at-least-once).
#[derive(Debug, Clone)]
pub struct Claim {
    pub entry: Entry,
    /// This claim's lease token: unique per claim, so a completion by a worker whose
    /// lease expired (and was taken by another claim) changes nothing.
    pub token: String,
    /// The work-stream message behind the claim (Redis); empty on the embedded store.
    pub message: String,
}

/// What a worker did with a claimed entry.
#[derive(Debug, Clone)]
pub enum Completion {
    Delivered {
        attempt: Attempt,
    },
    /// Failed, retry at `at` (unix ms).
    Retry {
        attempt: Attempt,
        at: i64,
    },
    /// Moved to the dead-letter queue.
    Dead {
        attempt: Option<Attempt>,
        reason: String,
    },
    /// Give the lease back without an attempt (shutdown, open circuit breaker): the
    /// entry is due again at `at`.
    Release {
        at: i64,
    },
}

/// An operator's change, made through this process, that in-flight work must see at
/// once (other processes sharing the store see it at their next poll).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// A source was paused or resumed.
    Paused { source: String, paused: bool },
    /// An entry was discarded.
    Discarded { id: String },
}

/// The sending side of [`Store::controls`], held by each backend.
#[derive(Debug, Clone)]
pub(crate) struct Controls(tokio::sync::broadcast::Sender<Control>);

impl Controls {
    pub(crate) fn new() -> Controls {
        Controls(tokio::sync::broadcast::channel(256).0)
    }

    pub(crate) fn send(&self, c: Control) {
        // Nobody listening (no forwarder in this process) is fine.
        let _ = self.0.send(c);
    }

    pub(crate) fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Control> {
        self.0.subscribe()
    }
}

/// What one retention pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Entries removed, with their attempts and audit trails.
    pub entries: u64,
    /// Expired dedupe keys removed by this pass. Redis expires them by itself (`PX`),
    /// so a pass there removes none.
    pub dedupe_keys: u64,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Dedupe and persist atomically; durable when it returns `Ok`.
    async fn accept(&self, entry: NewEntry) -> Result<Accepted, StoreError>;

    /// One entry by id.
    async fn get(&self, id: &str) -> Result<Option<Entry>, StoreError>;

    /// Entries, newest first, filtered, without their headers and bodies: a listing
    /// never reads a body (see [`ListedEntry`]).
    async fn list(&self, query: &ListQuery) -> Result<Page, StoreError>;

    /// The ids `list` would return for `query`, in the same order and with the same
    /// cursor, reading as little as the backend can (only the indexes when no filter
    /// needs the entries themselves). For bulk operations that need nothing else.
    async fn list_ids(&self, query: &ListQuery) -> Result<IdPage, StoreError>;

    /// Count entries of a source (all statuses).
    async fn count(&self, source: &str) -> Result<u64, StoreError>;

    /// Pause or resume delivery for a source. Ingest is unaffected; the state is
    /// durable.
    async fn set_paused(&self, source: &str, paused: bool) -> Result<(), StoreError>;

    /// The sources whose delivery is paused.
    async fn paused_sources(&self) -> Result<Vec<String>, StoreError>;

    /// Claim up to `limit` due, pending entries of `source` for `worker`, leased for
    /// `lease` (a crashed worker's entries are claimed again once it expires). A
    /// paused source yields nothing, whoever paused it.
    async fn claim(
        &self,
        source: &str,
        worker: &str,
        now: i64,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError>;

    /// Record what happened to a claimed entry. Returns `true` when the claim still
    /// held the lease and the completion was applied. Otherwise (`false`) nothing the
    /// current holder relies on changes: a lease that expired and was claimed again
    /// stays the new holder's (nothing is recorded), and an entry discarded while its
    /// attempt ran records the attempt and stays discarded.
    async fn complete(
        &self,
        claim: &Claim,
        worker: &str,
        completion: Completion,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Every attempt of an entry, oldest first.
    async fn attempts(&self, id: &str) -> Result<Vec<Attempt>, StoreError>;

    /// How many entries of `source` have `status`.
    async fn count_status(&self, source: &str, status: Status) -> Result<u64, StoreError>;

    /// Remove up to `limit` delivered entries completed before `delivered_before`,
    /// up to `limit` dead and discarded ones completed (or discarded) before
    /// `dead_before`, and up to `limit` expired dedupe keys (on Redis the limits hold
    /// per source). Pending entries are never removed.
    async fn purge(
        &self,
        now: i64,
        delivered_before: i64,
        dead_before: i64,
        limit: usize,
    ) -> Result<Purged, StoreError>;

    /// A counter that moves whenever this process stores new work; the forwarder
    /// waits on it instead of polling hard.
    fn work_signal(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Pauses, resumes and discards made through this process, as they happen: the
    /// forwarder stops sending to a paused source and cancels the attempt of a
    /// discarded entry at once.
    fn controls(&self) -> tokio::sync::broadcast::Receiver<Control>;

    /// Periodic backend housekeeping (Redis: detect a Redis that came back empty,
    /// recreate consumer groups).
    async fn maintain(&self, sources: &[String]) -> Result<(), StoreError>;

    /// Queue an entry for delivery again at `at`, with a fresh retry budget; it keeps
    /// its id. Recorded in the audit trail.
    async fn replay(
        &self,
        id: &str,
        at: i64,
        actor: &str,
        now: i64,
    ) -> Result<Transition, StoreError>;

    /// Discard an entry (pending or dead): it is never delivered. Recorded with the note.
    async fn discard(
        &self,
        id: &str,
        actor: &str,
        note: &str,
        now: i64,
    ) -> Result<Transition, StoreError>;

    /// The audit trail of an entry, oldest first.
    async fn audit(&self, id: &str) -> Result<Vec<AuditEvent>, StoreError>;

    /// Add `n` to the count of requests that failed verification.
    async fn record_unverified(&self, source: &str, n: u64) -> Result<(), StoreError>;

    /// Counters and gauges of a source.
    async fn stats(&self, source: &str) -> Result<SourceStats, StoreError>;

    /// Called once when a serving process starts its forwarder: take back what a
    /// previous run of this process left leased (embedded store only).
    async fn recover(&self) -> Result<(), StoreError>;

    /// Whether the store answers, reads and writes (for `/readyz`).
    async fn ping(&self) -> Result<(), StoreError>;

    /// Becomes `true` when the store has stopped for good (the embedded store after a
    /// failed fsync). The serving process then drains what it can and exits
    /// non-zero; a restart recovers from what is on disk. Stores that never stop
    /// answer a receiver that stays `false`.
    fn stopped(&self) -> tokio::sync::watch::Receiver<bool> {
        tokio::sync::watch::channel(false).1
    }

    /// Flush and release resources; called once on shutdown.
    async fn close(&self);
}

/// Open the configured backend. The only place that matches on the store kind.
pub async fn open(cfg: &StoreConfig) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match cfg {
        StoreConfig::Embedded(c) => Arc::new(sqlite::SqliteStore::open(c).await?),
        StoreConfig::Redis(c) => Arc::new(redis::RedisStore::open(c).await?),
    })
}

/// Headers are stored as JSON: `[[name, text]]`, or `[name, null, base64]` for a
/// value that is not UTF-8, so nothing is lost.
pub(crate) fn encode_headers(headers: &[Header]) -> String {
    headers_json(headers).to_string()
}

/// Headers as a JSON array: `[name, value]`, or `[name, null, base64]` for a value
/// that is not UTF-8.
pub(crate) fn headers_json(headers: &[Header]) -> serde_json::Value {
    let arr: Vec<serde_json::Value> = headers
        .iter()
        .map(|h| match std::str::from_utf8(&h.value) {
            Ok(text) => serde_json::json!([h.name, text]),
            Err(_) => serde_json::json!([h.name, null, B64.encode(&h.value)]),
        })
        .collect();
    serde_json::Value::Array(arr)
}

pub(crate) fn decode_headers(id: &str, text: &str) -> Result<Vec<Header>, StoreError> {
    let corrupt = |problem: &str| StoreError::Corrupt {
        id: id.to_string(),
        problem: problem.to_string(),
    };
    let v: Vec<serde_json::Value> =
        serde_json::from_str(text).map_err(|_| corrupt("headers are not a JSON array"))?;
    v.into_iter()
        .map(|item| {
            let name = item
                .get(0)
                .and_then(|n| n.as_str())
                .ok_or_else(|| corrupt("header without a name"))?
                .to_string();
            let value = match (item.get(1), item.get(2)) {
                (Some(serde_json::Value::String(s)), _) => s.as_bytes().to_vec(),
                (Some(serde_json::Value::Null), Some(serde_json::Value::String(b))) => B64
                    .decode(b)
                    .map_err(|_| corrupt("header value is not base64"))?,
                _ => return Err(corrupt("header without a value")),
            };
            Ok(Header { name, value })
        })
        .collect()
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_including_non_utf8() {
        let h = vec![
            Header {
                name: "content-type".into(),
                value: b"application/json".to_vec(),
            },
            Header {
                name: "x-odd".into(),
                value: vec![0xff, 0xfe, b'a'],
            },
        ];
        let text = encode_headers(&h);
        assert_eq!(decode_headers("e", &text).unwrap(), h);
        assert!(decode_headers("e", "{}").is_err());
    }
}
