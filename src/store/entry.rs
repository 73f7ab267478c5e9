//! What the store keeps: an entry as received and verified, its deliveries (one per
//! route that took it), their statuses and attempts, and how an entry's status is
//! derived from its deliveries.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use std::time::Duration;

use super::{DEFAULT_ROUTE, ListedEntry, Origin};
use crate::failure::Failure;

/// The life of a delivery, and of an entry (derived from its deliveries: see
/// [`Status::of_entry`]).
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
    /// An entry no route's filter selected, or whose every delivery its route's
    /// transform skipped: stored and answered, never delivered, purged with the
    /// delivered ones. A delivery has it when its route's transform skipped it.
    Filtered,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Delivered => "delivered",
            Status::Dead => "dead",
            Status::Discarded => "discarded",
            Status::Filtered => "filtered",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "pending" => Status::Pending,
            "delivered" => Status::Delivered,
            "dead" => Status::Dead,
            "discarded" => Status::Discarded,
            "filtered" => Status::Filtered,
            _ => return None,
        })
    }

    pub const ALL: [Status; 5] = [
        Status::Pending,
        Status::Delivered,
        Status::Dead,
        Status::Discarded,
        Status::Filtered,
    ];

    /// The status of an entry whose deliveries have these statuses: `Pending`
    /// while one is; else `Dead` if one is; else `Discarded` if one is; else
    /// `Delivered` if one is; else (none, or every one skipped by its transform)
    /// `Filtered`.
    pub fn of_entry(deliveries: impl IntoIterator<Item = Status>) -> Status {
        let (mut pending, mut dead, mut discarded, mut delivered) = (false, false, false, false);
        for s in deliveries {
            match s {
                Status::Pending => pending = true,
                Status::Dead => dead = true,
                Status::Discarded => discarded = true,
                Status::Delivered => delivered = true,
                Status::Filtered => {}
            }
        }
        match (pending, dead, discarded, delivered) {
            (true, ..) => Status::Pending,
            (_, true, ..) => Status::Dead,
            (_, _, true, _) => Status::Discarded,
            (_, _, _, true) => Status::Delivered,
            _ => Status::Filtered,
        }
    }

    /// Whether an entry with this status has ended (retention may remove it), and
    /// with which cutoff: delivered and filtered entries go with the delivered
    /// retention, dead and discarded ones with the dead retention.
    pub fn retention(self) -> Option<Retention> {
        match self {
            Status::Pending => None,
            Status::Delivered | Status::Filtered => Some(Retention::Delivered),
            Status::Dead | Status::Discarded => Some(Retention::Dead),
        }
    }
}

/// Which retention period an ended entry is kept for (see [`Status::retention`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    Delivered,
    Dead,
}

/// One request header as received (the leaf `header` owns the type).
pub use crate::header::Header;

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
    /// The routes to deliver it through (those whose filter selected it), in
    /// configuration order, without repeats. Empty: the entry is stored as
    /// [`Status::Filtered`] and never delivered.
    pub routes: Vec<String>,
    /// The ordering key of each ordered route (of `routes`) the entry carries a key
    /// for; a route not named here delivers the entry without order.
    pub ordering: Vec<RouteOrder>,
    /// The values of the source's indexed pointers found in the body
    /// (`search::extract`), kept so a search by one is a lookup.
    pub index: Vec<super::IndexedValue>,
    /// How it came: [`Origin::Received`] for a request to the ingest URL.
    pub origin: Origin,
}

/// An entry's place in an ordered route: the deliveries through `route` with the
/// same `key` go one at a time, in the order their entries arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteOrder {
    pub route: String,
    /// The key's value as found in the entry (at most [`MAX_ORDER_KEY`] bytes).
    pub key: String,
    /// What a dead delivery does to its key's line: `true` holds the line until an
    /// operator replays or discards it (`on_dead = "block"`); `false` lets the next
    /// one go (`skip`, recorded in the dead one's audit trail).
    pub block: bool,
}

/// The longest ordering key stored as it is; a longer value is replaced by its
/// SHA-256 (hex), which orders the same and bounds what a webhook can make the
/// store keep.
pub const MAX_ORDER_KEY: usize = 128;

/// The outcome of [`Store::accept`](super::Store::accept).
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

/// One route's delivery of an entry: each has its own status, attempts, retry
/// budget, lease and dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub route: String,
    /// Never [`Status::Filtered`].
    pub status: Status,
    /// Attempts made through this route.
    pub attempts: u32,
    /// Unix milliseconds of the next attempt, while pending.
    pub next_attempt_at: Option<i64>,
    pub last_error: Option<String>,
    /// The kind of its last failed attempt (what its dead letter is grouped by).
    pub last_failure: Option<Failure>,
    /// When the current retry budget started (unix ms): arrival, or the last replay.
    pub budget_start: i64,
    /// Attempts made before the current budget started.
    pub budget_attempts: u32,
    /// The delivery's ordering key and policy, on an ordered route.
    pub order: Option<DeliveryOrder>,
}

/// An ordered delivery's key and what its death does to the key's line (see
/// [`RouteOrder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryOrder {
    pub key: String,
    pub block: bool,
}

impl DeliveryOrder {
    /// The policy as configuration writes it: `block` or `skip`.
    pub fn on_dead(&self) -> &'static str {
        if self.block { "block" } else { "skip" }
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
    /// Derived from the deliveries ([`Status::of_entry`]).
    pub status: Status,
    /// Attempts of every route together.
    pub attempts: u32,
    /// The earliest next attempt of a pending delivery.
    pub next_attempt_at: Option<i64>,
    /// The last error of the first delivery (in route order) that has not been
    /// delivered and has one.
    pub last_error: Option<String>,
    /// One per route the entry was stored for, in the order of
    /// [`NewEntry::routes`]. Empty for a filtered entry.
    pub deliveries: Vec<Delivery>,
    pub headers: Vec<Header>,
    pub body: Bytes,
    /// How it came ([`Origin::Received`] for every entry stored before origins
    /// were kept); reconciliation may mark it later
    /// ([`Reconciling::mark_origin`](super::Reconciling::mark_origin)).
    pub origin: Origin,
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
            origin: self.origin,
        }
    }

    /// The delivery through `route`, if the entry has one.
    pub fn delivery(&self, route: &str) -> Option<&Delivery> {
        self.deliveries.iter().find(|d| d.route == route)
    }

    /// The entry-level summary of `deliveries`: (status, attempts, next attempt,
    /// last error), as [`Entry`] documents each. Both stores derive it with this.
    pub fn summary(deliveries: &[Delivery]) -> (Status, u32, Option<i64>, Option<String>) {
        let status = Status::of_entry(deliveries.iter().map(|d| d.status));
        let attempts = deliveries
            .iter()
            .fold(0u32, |n, d| n.saturating_add(d.attempts));
        let next = deliveries
            .iter()
            .filter(|d| d.status == Status::Pending)
            .filter_map(|d| d.next_attempt_at)
            .min();
        let last_error = deliveries
            .iter()
            .filter(|d| d.status != Status::Delivered)
            .find_map(|d| d.last_error.clone());
        (status, attempts, next, last_error)
    }
}

/// One delivery attempt, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// The route it went through. (Attempts recorded before routes existed went
    /// through the default route.)
    #[serde(default = "default_route")]
    pub route: String,
    /// 1 for the route's first attempt.
    pub n: u32,
    /// Unix milliseconds when the attempt started.
    pub at: i64,
    /// The destination's HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// The kind of failure, when it failed (what groups, metrics and the console
    /// go by). `None` when it delivered, and for attempts recorded before kinds were.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::failure::lenient"
    )]
    pub failure: Option<Failure>,
    /// What went wrong, for people, when there was no status to say it.
    pub error: Option<String>,
    pub latency_ms: u64,
    /// What a queue destination answered, when it took the message: the stream
    /// and its sequence (NATS JetStream), `confirmed` (RabbitMQ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

fn default_route() -> String {
    DEFAULT_ROUTE.to_string()
}
