//! The durable store: one trait, two backends.
//!
//! Ingest and the forwarder never talk to each other; the [`Store`] is their only
//! channel. `accept` is the ingest contract: dedupe on (source, dedupe key) and persist
//! the entry atomically, and return only once the entry is durable (fsynced on the
//! embedded store; acknowledged under `appendfsync always` on Redis). A duplicate
//! returns the original entry id and stores nothing new (only the `duplicates`
//! counter moves).
//!
//! [`open`] is the only place that chooses a backend; everything else sees
//! `Arc<dyn Store>`. Both backends pass the same conformance suite
//! (`tests/it/conformance.rs`).

mod error;
mod headers;
pub(crate) mod pace;
mod redis;
mod sqlite;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::config::StoreConfig;

pub use error::{Backend, Cause, StoreError};
pub(crate) use headers::{decode_headers, encode_headers, headers_json};

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
    /// The dedupe key, as the provider made it (`Verified::identity`): `id:<event
    /// id>`, the id bound to a content digest, or the digest alone. Opaque here.
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
    /// The id of the Redis work-stream message this claim was handed out through;
    /// completing the claim acknowledges and deletes it. `None` on the embedded
    /// store, which has no stream.
    pub stream_message: Option<String>,
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

/// When the forwarder asks the store for housekeeping (see [`Store::housekeeping`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HousekeepingPass {
    /// Once, when a serving process starts its forwarder, before its first claim.
    Start,
    /// At every maintenance pass after that (`forwarder.maintenance_interval`).
    Periodic,
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

/// The store contract. Both backends pass the conformance suite
/// (`tests/it/conformance.rs`), which holds each promise below:
///
/// * `accept` is durable when it answers, and atomic: no dedupe key without its
///   entry; a duplicate writes nothing but the `duplicates` counter.
/// * Claims are leases: a claimed entry goes to no other claim until its lease
///   expires, and then it does (at-least-once). Only the claim holding the entry's
///   current lease completes it (see [`Store::complete`]).
/// * Listings are newest first, and a cursor page never repeats or skips an entry
///   (ids are UUIDv7: they sort by arrival).
/// * Replay and discard are checked against the entry's status and audited.
/// * Pending entries are never purged.
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

    /// Record what happened to a claimed entry.
    ///
    /// Returns `true` when the completion was applied: the entry is still pending and
    /// its current lease is this claim's. A lease whose time ran out still counts as
    /// long as no other claim took the entry since (the lease time only decides when
    /// the entry may be claimed again, not whether its holder may complete it).
    ///
    /// Otherwise it returns `false`, and:
    /// * an entry claimed again since (a stale lease), replayed, already completed
    ///   (a repeated call after a lost reply) or purged is left as it is: no attempt,
    ///   status or error is recorded, and the current holder's lease stays;
    /// * an entry discarded while this claim's attempt ran (discard keeps the lease)
    ///   gets the attempt recorded (its `attempts` count and trail grow by it, if
    ///   the completion carries one) and loses the lease; it stays discarded.
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

    /// Housekeeping the backend needs from the serving process: its forwarder calls
    /// it with [`HousekeepingPass::Start`] before its first claim and with
    /// [`HousekeepingPass::Periodic`] at every maintenance pass; `sources` are the
    /// sources it delivers. The default does nothing.
    ///
    /// * The embedded store, at `Start`, takes back the leases a previous run left
    ///   (one serving process owns the embedded store, so they are a dead run's):
    ///   their entries are delivered now rather than once the leases expire. Not at
    ///   open: the store is also opened beside a serving process (to read it), and
    ///   taking leases back there would hand out entries whose attempts are running.
    /// * Redis, at every pass, checks its settings (`maxmemory-policy`, AOF), detects
    ///   a Redis that came back empty (logged at ERROR), and recreates the consumer
    ///   groups and the registration of `sources`. It takes no leases back: a dead
    ///   consumer's messages are claimed again once they are older than the lease.
    async fn housekeeping(
        &self,
        pass: HousekeepingPass,
        sources: &[String],
    ) -> Result<(), StoreError> {
        let _ = (pass, sources);
        Ok(())
    }

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

    /// Take the next send slot of `route` of `source`, paced at one send per
    /// `spacing` with up to `burst` at once (GCRA): `Ok(None)` when a send may go
    /// now (the slot is taken), `Ok(Some(at))` when the next slot opens at `at` (unix
    /// ms; nothing is taken). Every process sharing the store shares the pace. The
    /// pace is not durable: after a restart (of Redis, or of the embedded store's
    /// process) a route starts with its burst.
    async fn take_send_slot(
        &self,
        source: &str,
        route: &str,
        now: i64,
        spacing: Duration,
        burst: u32,
    ) -> Result<Option<i64>, StoreError>;

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
pub async fn open(cfg: &StoreConfig, clock: &Clock) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match cfg {
        StoreConfig::Embedded(c) => Arc::new(sqlite::SqliteStore::open(c, clock.clone()).await?),
        StoreConfig::Redis(c) => Arc::new(redis::RedisStore::open(c).await?),
    })
}

/// The text kept as `last_error` for a failed attempt.
pub(crate) fn attempt_error(a: &Attempt) -> Option<String> {
    match (&a.error, a.status_code) {
        (Some(e), _) => Some(e.clone()),
        (None, Some(code)) => Some(format!("HTTP {code}")),
        (None, None) => None,
    }
}
