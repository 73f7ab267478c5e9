//! Gateways that share a store know each other: each writes a heartbeat every
//! [`BEAT_EVERY`], stamped with the store's clock (never the gateway's), so that an
//! operator sees who runs which configuration, and a crashed gateway's leases are
//! handed over in seconds rather than when they expire.
//!
//! The rules every backend keeps:
//!
//! * `last_seen` is the store's time of the last heartbeat; a gateway is alive while
//!   it is less than [`ALIVE_WITHIN`] old, and forgotten once it is [`FORGET_AFTER`]
//!   old.
//! * A gateway is dead, and its leases taken over ([`Membership::take_over_dead`]),
//!   only when its heartbeat row exists and has been silent for [`DEAD_AFTER`] by
//!   the store's clock, counted from no earlier than when heartbeats last resumed on
//!   the store: heartbeats that stopped arriving for every gateway at once (the
//!   store was down, failed over or restarted) resume the count, so a failover never
//!   hands every lease over at once.
//! * The configuration salt is one random value per store, created by the first
//!   gateway that asks and the same for every gateway after it.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::StoreError;

/// How often a gateway writes its heartbeat.
pub const BEAT_EVERY: Duration = Duration::from_secs(2);

/// A gateway whose last heartbeat is younger than this (by the store's clock) is
/// alive.
pub const ALIVE_WITHIN: Duration = Duration::from_secs(10);

/// A gateway silent this long (by the store's clock) loses its leases.
pub const DEAD_AFTER: Duration = Duration::from_secs(10);

/// A silence of every heartbeat longer than this means the store stopped taking
/// them (down, failing over): the silence of each gateway is counted again from
/// the first heartbeat after it.
pub const RESUME_GAP: Duration = Duration::from_secs(5);

/// A gateway not seen for this long leaves the list.
pub const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// What a gateway writes at each heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The gateway's id: unique per run, and the name its leases are held under.
    pub id: String,
    pub host: String,
    /// The version of the configuration it runs.
    pub version: String,
    /// When it started (unix ms, its own clock).
    pub started: i64,
}

/// What the store answered a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatAck {
    /// The store's time of the heartbeat (unix ms).
    pub at: i64,
    /// The gateway's leases were taken over since its previous heartbeat (it had
    /// been silent for [`DEAD_AFTER`]).
    pub taken_over: bool,
}

/// A gateway on the store, as its last heartbeat left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayInfo {
    pub id: String,
    pub host: String,
    pub version: String,
    /// Unix ms (the gateway's clock).
    pub started: i64,
    /// Unix ms (the store's clock).
    pub last_seen: i64,
    /// Seen within [`ALIVE_WITHIN`], by the store's clock.
    pub alive: bool,
}

/// What one pass of [`Membership::take_over_dead`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TakeOver {
    /// The dead gateways whose leases it looked for, by id.
    pub gateways: Vec<String>,
    /// The leases it ended.
    pub leases: u64,
}

/// The gateways sharing the store: heartbeats, the list, the takeover of a dead
/// gateway's leases, and the salt their configuration versions are computed with.
#[async_trait]
pub trait Membership: Send + Sync + 'static {
    /// Record `beat` with the store's time, forgetting gateways not seen for
    /// [`FORGET_AFTER`].
    async fn heartbeat(&self, beat: &Heartbeat) -> Result<HeartbeatAck, StoreError>;

    /// The gateways seen within [`FORGET_AFTER`], by id.
    async fn gateways(&self) -> Result<Vec<GatewayInfo>, StoreError>;

    /// End the leases held by dead gateways (see the module docs), so their
    /// deliveries are claimed again at once; `by` is the gateway asking (on Redis
    /// the messages pass to it, already expired, for whichever claim comes first),
    /// and only the routes it claims from are looked through. Safe to call from
    /// every gateway at once; the default takes nothing (one gateway per store).
    async fn take_over_dead(&self, by: &str) -> Result<TakeOver, StoreError> {
        let _ = by;
        Ok(TakeOver::default())
    }

    /// Whether gateways sharing this store take each other's leases over, so that a
    /// gateway that cannot write its heartbeat must stop claiming and sending. The
    /// embedded store has one gateway: no.
    fn takes_over(&self) -> bool {
        true
    }

    /// The store's random 32-byte salt, created at the first call (atomically: every
    /// gateway on the store gets the same value).
    async fn config_salt(&self) -> Result<[u8; 32], StoreError>;
}

/// A fresh random salt.
pub(crate) fn new_salt() -> Result<[u8; 32], StoreError> {
    let mut salt = [0u8; 32];
    getrandom::fill(&mut salt).map_err(|e| StoreError::Task {
        what: "reading randomness for the configuration salt",
        source: Box::new(e),
    })?;
    Ok(salt)
}

/// A salt read back from the store (32 bytes).
pub(crate) fn salt_from(bytes: &[u8]) -> Result<[u8; 32], StoreError> {
    <[u8; 32]>::try_from(bytes).map_err(|_| StoreError::Corrupt {
        id: "config salt".into(),
        problem: format!("{} bytes, not 32", bytes.len()),
    })
}

/// Milliseconds of `d`.
pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
