//! The durable store: one trait, three backends.
//!
//! Ingest and the forwarder never talk to each other; the [`Store`] is their only
//! channel. `accept` is the ingest contract: dedupe on (source, dedupe key) and persist
//! the entry atomically, and return only once the entry is durable (fsynced on the
//! embedded store; acknowledged under `appendfsync always` on Redis). A duplicate
//! returns the original entry id and stores nothing new (only the `duplicates`
//! counter moves).
//!
//! The gateways sharing a store know each other through it ([`Membership`],
//! `gateways`): heartbeats stamped with the store's clock, the takeover of a dead
//! gateway's leases, and the salt of the configuration versions.
//!
//! [`open`] is the only place that chooses a backend; everything else sees
//! `Arc<dyn Store>`. The three backends (SQLite, Redis, PostgreSQL) pass the same
//! conformance suite (`tests/it/conformance/`, one file per part of the contract).

mod activity;
mod audit;
mod entry;
mod error;
pub mod gateways;
mod headers;
mod listing;
mod origin;
pub(crate) mod pace;
mod postgres;
mod readiness;
mod reconcile;
mod redis;
pub mod rejection;
mod routes;
pub mod search;
mod secrets;
mod signal;
mod sqlite;
pub mod usual;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::config::StoreConfig;
pub use crate::config::{DEFAULT_ROUTE, valid_route_name};

pub use activity::{ACTIVITY_RETENTION, MinuteActivity};
pub use audit::{Actor, CONTROL_AUDIT_KEEP, ControlAction, ControlEvent};
pub use entry::{
    Accepted, Attempt, Delivery, DeliveryOrder, Entry, Header, MAX_ORDER_KEY, NewEntry, Retention,
    RouteOrder, Status,
};
pub use error::{Backend, Cause, StoreError, Unsafe};
pub use gateways::{GatewayInfo, Heartbeat, HeartbeatAck, Membership, TakeOver};
pub(crate) use headers::{decode_headers, encode_headers, headers_json};
pub use listing::{DeadLetter, IdPage, ListQuery, ListedEntry, MAX_PAGE, Page, id_floor};
pub use origin::Origin;
#[doc(hidden)]
pub use postgres::CLAIM_STATEMENT as POSTGRES_CLAIM_STATEMENT;
pub use postgres::{UrlWarning as PostgresUrlWarning, url_warnings as postgres_url_warnings};
pub use readiness::Readiness;
pub use reconcile::{MAX_LOOKUP_KEYS, MAX_RECONCILE_STATE, ReconcileLease, Reconciling};
/// The Redis entry codec, for the `stored` fuzz target.
#[cfg(any(test, fuzzing))]
pub(crate) use redis::{entry_from_map as redis_entry_from_map, pack_record as redis_pack_record};
pub use rejection::{
    REJECTIONS_KEEP, Rejection, RejectionBatch, RejectionCount, RejectionPage, RejectionQuery,
};
pub use routes::KnownRoute;
pub use search::{IndexLookup, IndexUse, IndexedValue, SearchPage, SearchQuery};
pub use secrets::{
    Establish, EstablishedSecret, HandshakeToken, MAX_ESTABLISHED_SECRETS, TOKEN_PARAM, TokenHash,
    secret_id,
};
pub(crate) use signal::{Wake, WorkSignals};

/// The audit action recorded when a dead head of an ordered line lets the next go.
pub const SKIP_ACTION: &str = "skip";
/// Who that audit event names.
pub const SKIP_ACTOR: &str = "hookgate";
/// The note of that event.
pub const SKIP_NOTE: &str = "dead at the head of its ordering key's line; the next delivery of the key went (on_dead = skip)";
/// The audit action recorded when reconciliation marks how an entry came
/// ([`Reconciling::mark_origin`]).
pub const RECOVERED_ACTION: &str = "recovered";
/// Who that audit event names.
pub const RECOVERED_ACTOR: &str = "hookgate";

/// An operator action on an entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// Unix milliseconds.
    pub at: i64,
    /// `replay` or `discard`.
    pub action: String,
    pub actor: String,
    pub note: Option<String>,
    /// The route the action named; `None` when it named none (every delivery it
    /// applied to).
    #[serde(default)]
    pub route: Option<String>,
    /// The console session the action came from (a hash of its nonce).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The address of the client that asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// What [`Store::replay`] and [`Store::discard`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Done,
    NotFound,
    /// The entry has no delivery through the named route.
    NoSuchRoute,
    /// The status does not allow it: the named delivery's, or, when no route was
    /// named and no delivery qualified, the entry's.
    Conflict(Status),
}

/// What an operator paused: a whole source, or one route of it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PauseTarget {
    pub source: String,
    pub route: Option<String>,
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
    pub filtered: u64,
    /// Arrival time (unix ms) of the oldest pending entry.
    pub oldest_pending_at: Option<i64>,
}

/// The deliveries of one route of a source, by status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteStats {
    pub pending: u64,
    pub delivered: u64,
    pub dead: u64,
    pub discarded: u64,
    /// Arrival time (unix ms) of the oldest entry whose delivery through the route
    /// is pending.
    pub oldest_pending_at: Option<i64>,
    /// Ordering keys whose line is held by a dead delivery (`on_dead = "block"`)
    /// until an operator replays or discards it.
    pub blocked_keys: u64,
}

/// A claimed delivery: one route's delivery of an entry, leased to one worker until
/// it completes it or the lease expires (then another worker claims it again:
/// at-least-once).
#[derive(Debug, Clone)]
pub struct Claim {
    pub entry: Entry,
    /// The claimed delivery, as it was when claimed (also found in
    /// `entry.deliveries`); its route names what the claim delivers through.
    pub delivery: Delivery,
    /// This claim's lease token: unique per claim, so a completion by a worker whose
    /// lease expired (and was taken by another claim) changes nothing.
    pub token: String,
    /// The id of the Redis work-stream message this claim was handed out through;
    /// completing the claim acknowledges and deletes it. `None` on the embedded
    /// store, which has no stream, and for a Redis probe taken straight from a
    /// route's retry schedule ([`Store::claim_probe`]).
    pub stream_message: Option<String>,
}

/// The claim a completion finishes, as [`Claim`] tells it: what the completion needs
/// to know about the delivery without reading it again.
pub(crate) struct Finished {
    pub(crate) source: String,
    pub(crate) id: String,
    pub(crate) route: String,
    pub(crate) token: String,
    /// The delivery's ordering (which never changes).
    pub(crate) order: Option<DeliveryOrder>,
    /// The entry has this one delivery (its routes never change): its status is
    /// this delivery's.
    pub(crate) sole: bool,
}

impl Finished {
    pub(crate) fn of(claim: &Claim) -> Finished {
        Finished {
            source: claim.entry.source.clone(),
            id: claim.entry.id.clone(),
            route: claim.delivery.route.clone(),
            token: claim.token.clone(),
            order: claim.delivery.order.clone(),
            sole: claim.entry.deliveries.len() == 1,
        }
    }
}

/// What a worker did with a claimed delivery.
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
    /// Not sent, for good and without an attempt: the route's transform gave no
    /// output. The delivery is `filtered` with `reason` as its last error, and leaves
    /// its line as a delivered one does.
    Filtered {
        reason: String,
    },
}

/// An operator's change, made through this process, that in-flight work must see at
/// once (other processes sharing the store see it at their next poll).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// A source (`route: None`) or one of its routes was paused or resumed.
    Paused {
        source: String,
        route: Option<String>,
        paused: bool,
    },
    /// The delivery of an entry through a route was discarded (one control per
    /// discarded delivery).
    Discarded { id: String, route: String },
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

/// The store contract: every part below, as one trait object (`Arc<dyn Store>`).
/// A backend implements the parts ([`Queue`], [`Reads`], [`Records`], [`Pacing`],
/// [`Membership`], [`Reconciling`], [`Lifecycle`]) and is a `Store` by the blanket
/// impl; the conformance suite (`tests/it/conformance/`, by the same parts) holds
/// each promise below:
///
/// * `accept` is durable when it answers, and atomic: no dedupe key without its
///   entry; a duplicate writes nothing but the `duplicates` counter.
/// * An entry has one delivery per route it was stored for, and each delivery lives
///   on its own: its status, attempts, retry budget, lease and dead letter. What
///   happens to one route's delivery never changes another's. The entry's status is
///   derived from them ([`Status::of_entry`]).
/// * Claims are leases on a delivery: a claimed delivery goes to no other claim
///   until its lease expires, and then it does (at-least-once). Only the claim
///   holding the delivery's current lease completes it (see [`Queue::complete`]).
/// * Listings are newest first, and a cursor page never repeats or skips an entry
///   (ids are UUIDv7: they sort by arrival).
/// * An entry reads back with the [`Origin`] it was accepted with (an entry stored
///   before origins were kept: [`Origin::Received`]), whole, listed or claimed.
/// * Replay and discard are checked against the entry's status and audited, with
///   their actor's session and client; pauses and resumes are kept in the control
///   audit.
/// * A revoked console session stays revoked, for every process on the store, until
///   it would have expired.
/// * An armed handshake establishes one secret for its source, on every process on
///   the store, and only in a handshake that presents its arming's token; an unarmed
///   or expired one, none; a wrong token leaves the arming as it was.
/// * Rejected requests are kept per group (source and reason), the newest
///   [`REJECTIONS_KEEP`] rows of each, with every refusal counted.
/// * A source's indexed values are found by lookup, newest first, and leave with
///   their entry.
/// * Pending entries are never purged.
/// * A gateway's heartbeat is stamped with the store's clock; a gateway silent for
///   [`gateways::DEAD_AFTER`] loses its leases, and the configuration salt is one
///   value per store ([`Membership`]).
/// * A dedupe lookup answers, per key of its source, the entry the key names while
///   its TTL runs, as an accept of the key would (a duplicate: the original); it
///   changes nothing. Marking an entry's origin and its `recovered` audit event are
///   one atomic step ([`Reconciling`]).
/// * A source's reconciliation lease has one holder at a time across every gateway
///   on the store, until its time runs out or its holder releases it; a state is
///   kept only while its saver holds the lease, and outlives the lease.
pub trait Store:
    Queue + Reads + Search + Records + Rejections + Pacing + Membership + Reconciling + Lifecycle
{
}

impl<
    T: Queue
        + Reads
        + Search
        + Records
        + Rejections
        + Pacing
        + Membership
        + Reconciling
        + Lifecycle
        + ?Sized,
> Store for T
{
}

/// The queue: what makes a webhook delivered at least once. Entries are accepted
/// (deduped, durable), their deliveries claimed under leases and completed, replayed,
/// discarded, paused and purged; each route's ordered deliveries wait in lines.
#[async_trait]
pub trait Queue: Send + Sync + 'static {
    /// Dedupe and persist atomically; durable when it returns `Ok`.
    async fn accept(&self, entry: NewEntry) -> Result<Accepted, StoreError>;

    /// Pause or resume delivery for a source (`route: None`) or for one of its
    /// routes. Ingest is unaffected; the state is durable. Pausing a source and
    /// pausing its routes are independent: resuming the source leaves a paused
    /// route paused.
    async fn set_paused(
        &self,
        source: &str,
        route: Option<&str>,
        paused: bool,
    ) -> Result<(), StoreError>;

    /// What is paused, sorted.
    async fn paused(&self) -> Result<Vec<PauseTarget>, StoreError>;

    /// Claim up to `limit` due, pending deliveries through `route` of `source` for
    /// `worker`, leased for `lease` (a crashed worker's deliveries are claimed again
    /// once it expires, or once its gateway's leases are taken over as dead:
    /// [`Membership::take_over_dead`]; `worker` is the gateway's heartbeat id). A paused source or route yields nothing, whoever paused it.
    ///
    /// Ordered deliveries (those with a [`DeliveryOrder`]) form one line per key of
    /// a route, in the order their entries arrived (entry id order): only the head
    /// of a line is ever handed out, so no two deliveries of one key are in flight
    /// at once, in any process sharing the store, a reclaimed lease included. The
    /// head is the earliest delivery of the key that is pending (due or not: the
    /// ones behind a retrying head wait, without burning attempts) or dead with
    /// `block`; when it ends (delivered, discarded, or dead with `skip`) the next
    /// one becomes the head. A delivery replayed or discarded while another of its
    /// key is leased waits for that lease to end (complete or expire) before its
    /// line moves on. A dead head with `skip` gets a `skip` audit event.
    async fn claim(
        &self,
        source: &str,
        route: &str,
        worker: &str,
        now: i64,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError>;

    /// Claim the one delivery through `route` of `source` that a half-open circuit
    /// breaker tests its destination with: of the due deliveries that were attempted
    /// before (`attempts > 0`: a retry, or a replay of one that failed), the one due
    /// first; only when there is none, the one [`Queue::claim`] would hand out first.
    /// A destination that fails some first attempts but accepts retries (one that
    /// answers an event's first delivery 503) then sees a probe it accepts, and the
    /// breaker closes.
    ///
    /// A delivery is never taken before it is due (its time may be a destination's
    /// `Retry-After`), and the lease, pause and route rules are those of `claim`. On
    /// Redis only the retries still waiting in the route's schedule are looked
    /// through: one that an earlier claim already moved to the work stream waits in
    /// line there like a new delivery.
    async fn claim_probe(
        &self,
        source: &str,
        route: &str,
        worker: &str,
        now: i64,
        lease: Duration,
    ) -> Result<Option<Claim>, StoreError>;

    /// Record what happened to a claimed delivery. The entry's derived status,
    /// attempts, next attempt and last error follow.
    ///
    /// Returns `true` when the completion was applied: the delivery is still pending
    /// and its current lease is this claim's. A lease whose time ran out still counts
    /// as long as no other claim took the delivery since (the lease time only decides
    /// when it may be claimed again, not whether its holder may complete it).
    ///
    /// Otherwise it returns `false`, and:
    /// * a delivery claimed again since (a stale lease), replayed, already completed
    ///   (a repeated call after a lost reply) or purged is left as it is: no attempt,
    ///   status or error is recorded, and the current holder's lease stays;
    /// * a delivery discarded while this claim's attempt ran (discard keeps the
    ///   lease) gets the attempt recorded (its `attempts` count and the trail grow
    ///   by it, if the completion carries one) and loses the lease; it stays
    ///   discarded.
    async fn complete(
        &self,
        claim: &Claim,
        worker: &str,
        completion: Completion,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Remove up to `limit` delivered and filtered entries that reached their status
    /// before `delivered_before`, up to `limit` dead and discarded ones that reached
    /// it before `dead_before` (see [`Status::retention`]), and up to `limit`
    /// expired dedupe keys (on Redis the limits hold per source). Pending entries
    /// (an entry with any pending delivery) are never removed.
    async fn purge(
        &self,
        now: i64,
        delivered_before: i64,
        dead_before: i64,
        limit: usize,
    ) -> Result<Purged, StoreError>;

    /// A counter that moves whenever this process stores new work for `route` of
    /// `source`, and for no other route's: an accept moves the counters of the
    /// routes its entry went to, a released lease its route's, a
    /// replay and the leases taken back at `Start` every route's. The forwarder's
    /// loop of a route waits on it instead of polling hard, and is not woken by
    /// another route's work.
    fn work_signal(&self, source: &str, route: &str) -> tokio::sync::watch::Receiver<u64>;

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

    /// Queue deliveries of an entry again at `at`, each with a fresh retry budget;
    /// the entry keeps its id. With a `route`, that route's delivery (unless it is
    /// pending). Without one, every dead or discarded delivery; when there is none
    /// and every delivery was delivered, all of them (a re-send); otherwise
    /// `Conflict` with the entry's status. Recorded in the audit trail.
    async fn replay(
        &self,
        id: &str,
        route: Option<&str>,
        at: i64,
        by: &Actor,
        now: i64,
    ) -> Result<Transition, StoreError>;

    /// Discard deliveries of an entry (pending or dead): they are never delivered.
    /// With a `route`, that route's delivery; without one, every pending or dead
    /// delivery (`Conflict` with the entry's status when there is none). Recorded
    /// with the note; one [`Control::Discarded`] per discarded delivery.
    async fn discard(
        &self,
        id: &str,
        route: Option<&str>,
        by: &Actor,
        note: &str,
        now: i64,
    ) -> Result<Transition, StoreError>;

    /// The line of ordering key `key` of `route` of `source`: the ids of the
    /// deliveries waiting in it (pending, or a dead head that blocks it), head first.
    /// Empty for a key with nothing waiting.
    async fn order_line(
        &self,
        source: &str,
        route: &str,
        key: &str,
    ) -> Result<Vec<String>, StoreError>;
}

/// The read models the admin API and the console show: entries, their attempts and
/// audit trails, dead letters, activity and counts. None changes what is delivered.
#[async_trait]
pub trait Reads: Send + Sync + 'static {
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

    /// How many entries of `source` have `status`.
    async fn count_status(&self, source: &str, status: Status) -> Result<u64, StoreError>;

    /// Every attempt of an entry, through every route, oldest first (by start time;
    /// ties by route, then `n`).
    async fn attempts(&self, id: &str) -> Result<Vec<Attempt>, StoreError>;

    /// The audit trail of an entry, oldest first; each event names its actor's
    /// session and client when the action carried them.
    async fn audit(&self, id: &str) -> Result<Vec<AuditEvent>, StoreError>;

    /// The dead deliveries through `route` of `source`, newest entry first, at most
    /// `limit`; no header or body is read.
    async fn dead_letters(
        &self,
        source: &str,
        route: &str,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError>;

    /// The activity of `source` per minute, for the minutes starting in `[since,
    /// until)` (unix ms), oldest first; minutes with nothing are left out. A new
    /// entry counts as received in the minute of its `received_at` (a duplicate does
    /// not); an applied completion counts in the minute of its `now`: delivered, or
    /// failed (a retry, or a dead letter with an attempt). Each count is written
    /// atomically with what it counts, and kept for [`ACTIVITY_RETENTION`].
    async fn activity(
        &self,
        source: &str,
        since: i64,
        until: i64,
    ) -> Result<Vec<MinuteActivity>, StoreError>;

    /// Add `n` to the count of requests that failed verification.
    async fn record_unverified(&self, source: &str, n: u64) -> Result<(), StoreError>;

    /// Counters and gauges of a source (its entries, by derived status).
    async fn stats(&self, source: &str) -> Result<SourceStats, StoreError>;

    /// The deliveries through `route` of `source`, by status.
    async fn route_stats(&self, source: &str, route: &str) -> Result<RouteStats, StoreError>;
}

/// What payload search reads (`search`): the values of the sources' indexed
/// pointers, and whole entries by the page.
#[async_trait]
pub trait Search: Send + Sync + 'static {
    /// The ids of the entries of `lookup.source` whose value in the index
    /// `lookup.name` is one of `lookup.values`, newest first, strictly below
    /// `lookup.below` and at or above `lookup.floor`, at most `lookup.limit`: a lookup,
    /// whatever the number of entries.
    async fn indexed(&self, lookup: &IndexLookup) -> Result<Vec<String>, StoreError>;

    /// The size in bytes of each entry these `(source, id)` name, as stored (its
    /// headers and body), in the order asked; 0 for one that is not there. Read
    /// without the bodies, so that a search decides how many entries to read at once.
    async fn sizes(&self, keys: &[(String, String)]) -> Result<Vec<u64>, StoreError>;

    /// The entries with these `(source, id)`, whole (headers and bodies), in the order
    /// asked; one that is not there is left out.
    async fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<Entry>, StoreError>;
}

/// What operators leave behind, shared by every process on the store: the control
/// audit (pauses and resumes) and the revoked console sessions.
#[async_trait]
pub trait Records: Send + Sync + 'static {
    /// Add `event` to the control audit, shared by every process on the store. The
    /// newest [`CONTROL_AUDIT_KEEP`] events are kept.
    async fn record_control(&self, event: &ControlEvent) -> Result<(), StoreError>;

    /// The newest `limit` control events (at most [`CONTROL_AUDIT_KEEP`]), newest
    /// first.
    async fn control_audit(&self, limit: usize) -> Result<Vec<ControlEvent>, StoreError>;

    /// Revoke the console session `id` (a hash of its nonce) until `expires_at`
    /// (unix ms, when the session would have expired anyway): every process on the
    /// store refuses it from now on. Housekeeping (or Redis itself) forgets the
    /// revocation once it has expired.
    async fn revoke_session(&self, id: &str, expires_at: i64, now: i64) -> Result<(), StoreError>;

    /// Revoke every console session issued at or before `at` (unix ms): "log out
    /// every session". A later call with an earlier `at` changes nothing.
    async fn revoke_sessions_until(&self, at: i64) -> Result<(), StoreError>;

    /// Whether the console session `id`, issued at `issued_at` (unix ms), was
    /// revoked: by itself, or with every session issued until then.
    async fn session_revoked(&self, id: &str, issued_at: i64) -> Result<bool, StoreError>;

    /// Keep `ranges` as the last good list of addresses fetched from `url` (a
    /// provider's published ranges, `crate::allowlist`), replacing the one kept, so
    /// that a gateway starting without network still applies it. Durable.
    async fn save_ranges(&self, url: &str, ranges: &SavedRanges) -> Result<(), StoreError>;

    /// The last good list kept for `url`, if any.
    async fn saved_ranges(&self, url: &str) -> Result<Option<SavedRanges>, StoreError>;

    /// Every route of the route registry (`store::routes`), in no order.
    async fn known_routes(&self) -> Result<Vec<KnownRoute>, StoreError>;

    /// Put `routes` in the registry, each replacing what it said of its (source,
    /// route). Durable.
    async fn remember_routes(&self, routes: &[KnownRoute]) -> Result<(), StoreError>;

    /// Take `route` of `source` out of the registry (a retired route whose
    /// deliveries are all gone). Forgetting one it does not hold changes nothing.
    async fn forget_route(&self, source: &str, route: &str) -> Result<(), StoreError>;

    /// Arm `source`'s secret handshake until `until` (unix ms) for the token whose
    /// hash is `token`, replacing an arming in place (its token with it): the next
    /// handshake before then that presents the token may establish a secret
    /// ([`Records::establish_secret`]). Durable.
    async fn arm_handshake(
        &self,
        source: &str,
        until: i64,
        token: &TokenHash,
    ) -> Result<(), StoreError>;

    /// Until when `source`'s handshake is armed, if it is armed at `now`.
    async fn handshake_armed(&self, source: &str, now: i64) -> Result<Option<i64>, StoreError>;

    /// Keep `secret` for `source` if its handshake is armed at `now` and `token` is
    /// the hash of its arming's token, disarming it in the same atomic step (so one
    /// arming establishes one secret, whichever gateway the handshake reached),
    /// unless the source keeps [`MAX_ESTABLISHED_SECRETS`] already. Another token
    /// changes nothing ([`Establish::WrongToken`]): the arming stays for the
    /// handshake that has it. The same secret again is kept once. Durable.
    async fn establish_secret(
        &self,
        source: &str,
        secret: &EstablishedSecret,
        token: &TokenHash,
        now: i64,
    ) -> Result<Establish, StoreError>;

    /// The secrets kept for `source`, oldest first.
    async fn established_secrets(&self, source: &str)
    -> Result<Vec<EstablishedSecret>, StoreError>;

    /// Forget the secret `id` of `source`; whether it was kept. Durable.
    async fn forget_secret(&self, source: &str, id: &str) -> Result<bool, StoreError>;
}

/// A provider's address ranges as the store keeps them: the ranges as text, one per
/// line (parsed again when read), and when they were fetched (unix ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedRanges {
    pub ranges: String,
    pub fetched_at: i64,
}

/// The requests ingest refused (`rejection`), shared by every process on the store.
#[async_trait]
pub trait Rejections: Send + Sync + 'static {
    /// Keep `batch`: its rows, each group then trimmed to its newest
    /// [`REJECTIONS_KEEP`], and its counts, added to each group's count of the hour
    /// of their `last_at`. A row already kept (same id) is not added twice.
    async fn record_rejections(&self, batch: &RejectionBatch) -> Result<(), StoreError>;

    /// Rows newest first, as `query` asks.
    async fn rejections(&self, query: &RejectionQuery) -> Result<RejectionPage, StoreError>;

    /// The counts of every group over the hours from the one `since` (unix ms) falls
    /// in, summed per group, the group refused last first.
    async fn rejection_counts(&self, since: i64) -> Result<Vec<RejectionCount>, StoreError>;

    /// Remove the rows older than `before` (unix ms) and the counts of the hours
    /// before its hour; answers how many rows went.
    async fn purge_rejections(&self, before: i64) -> Result<u64, StoreError>;
}

/// The send slots of paced routes (GCRA), shared by every process on the store.
#[async_trait]
pub trait Pacing: Send + Sync + 'static {
    /// Take the next request slot of `source`'s request limit (`[sources.limits]`),
    /// as [`Pacing::take_send_slot`] takes a route's: `Ok(None)` when the request may
    /// be taken now, `Ok(Some(at))` when the next slot opens at `at` (unix ms). Every
    /// gateway on the store shares it; it is kept apart from every route's pace.
    async fn take_request_slot(
        &self,
        source: &str,
        now: i64,
        spacing: Duration,
        burst: u32,
    ) -> Result<Option<i64>, StoreError> {
        self.take_send_slot(source, pace::REQUESTS, now, spacing, burst)
            .await
    }

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

    /// Hold the send slots of `route` of `source` from `now` until `until` (unix ms):
    /// no slot
    /// opens before then for any process sharing the store (a destination's 429 or
    /// 503 with `Retry-After`), and the route is paced as before afterwards
    /// (`spacing`, `burst` as for [`Pacing::take_send_slot`]). A hold never shortens
    /// one already in place. Like the pace, it is not durable.
    async fn hold_send_slots(
        &self,
        source: &str,
        route: &str,
        now: i64,
        until: i64,
        spacing: Duration,
        burst: u32,
    ) -> Result<(), StoreError>;
}

/// Whether the store answers, whether it stopped for good, and its close.
#[async_trait]
pub trait Lifecycle: Send + Sync + 'static {
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

/// Register the store's metric families with their zero series (the embedded store's
/// write waits, by kind; the PostgreSQL store's verdict and standbys), so that the
/// first scrape lists them all.
pub fn register_metrics() {
    sqlite::register_metrics();
    // Set by the PostgreSQL store's checks; 0 on the others.
    metrics::gauge!("hookgate_store_unsafe").increment(0.0);
    metrics::gauge!("hookgate_store_sync_standbys").increment(0.0);
}

/// Open the configured backend. The only place that matches on the store kind.
///
/// A store written before routes existed is migrated once, at open, and logged: each
/// of its entries gets one delivery, through [`DEFAULT_ROUTE`], holding the entry's
/// status, attempts, retry budget and lease as they were (so pending entries are
/// delivered, and leased ones are claimed again once their lease expires). The
/// migration is one-way: no release older than this one may be started on the store
/// afterwards (it would misread it); this release and later ones refuse a store
/// whose schema is newer than they know.
pub async fn open(cfg: &StoreConfig, clock: &Clock) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match cfg {
        StoreConfig::Embedded(c) => Arc::new(sqlite::SqliteStore::open(c, clock.clone()).await?),
        StoreConfig::Redis(c) => Arc::new(redis::RedisStore::open(c).await?),
        StoreConfig::Postgres(c) => {
            Arc::new(postgres::PostgresStore::open(c, clock.clone()).await?)
        }
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
