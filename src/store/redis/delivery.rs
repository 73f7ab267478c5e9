//! How the forwarder's work moves through Redis: claims and completions, one route
//! at a time.
//!
//! Each route of a source has its work stream (`work:<route>`) with one consumer
//! group (`workers`); every gateway process is a consumer. A claim first checks that
//! neither the source nor the route is paused, then runs the claim script, which in
//! one call (one round trip, one fsync) takes messages whose lease expired from
//! other consumers (`XAUTOCLAIM` with the lease as minimum idle time: a crashed
//! worker's deliveries are claimed again), moves the route's due retries from
//! `sched:<route>` to its stream, then reads new messages (`XREADGROUP >`), and
//! takes the lease of each delivery; messages that stand for nothing any more are
//! dropped and read past. A
//! half-open breaker's probe first looks for a due retry in `sched:<route>` and
//! leases it there, scored at its lease end, without a stream message (the probe
//! script); only when there is none does it claim from the stream. The complete
//! script records the attempt, acknowledges and deletes the message (a probe taken
//! from the schedule has none), and either schedules the retry, or marks the
//! delivery delivered or dead (appending to the DLQ stream), and derives the entry's
//! status again, in one call.
//!
//! A route's group is created when a claim finds none (in the claim script): the
//! route's first claim, or the first after Redis lost its data (it restarted empty;
//! the loss itself is detected through `hg:epoch`, see `RedisStore::check_epoch`,
//! and logged at ERROR; housekeeping also recreates the groups of the routes this
//! process claims from).
//! The group starts at the beginning of the stream, so the messages written before
//! it existed are read too.

use std::collections::HashMap;
use std::time::Duration;

use super::RedisStore;
use super::codec::entry_from_map;
use crate::store::activity::Counted;
use crate::store::{
    AuditEvent, Claim, Completion, SKIP_ACTION, SKIP_ACTOR, SKIP_NOTE, Status, StoreError, Wake,
    attempt_error,
};

/// The member of `hg:paused` that pauses `route` of `source` (a source alone is
/// paused by its name; source names hold no `/`).
pub(super) fn paused_member(source: &str, route: Option<&str>) -> String {
    match route {
        Some(r) => format!("{source}/{r}"),
        None => source.to_string(),
    }
}

/// The consumer group every gateway process joins.
pub(super) const GROUP: &str = "workers";

/// Most due retries one claim moves to the work stream.
const PROMOTE_MAX: i64 = 1000;

/// Most due members of a route's schedule one probe looks through for a retry. The
/// members passed over are releases and replays of deliveries never attempted: a few
/// at most (the deliveries in flight when the breaker opened or a pause began).
const PROBE_SCAN: i64 = 1000;

/// What the claim script answers per claimed delivery: its stream message, the
/// entry id, the lease token and the entry's hash.
type Leased = (String, String, String, HashMap<String, Vec<u8>>);

impl RedisStore {
    /// Claim up to `limit` deliveries through `route` of `source` for `worker` (see
    /// the module docs).
    pub(super) async fn claim_deliveries(
        &self,
        source: &str,
        route: &str,
        worker: &str,
        now: i64,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        self.remember_claimed_route(source, route);
        // A paused source or route yields nothing, whichever process paused it. (A
        // read: the pause set has no source's hash tag, so the claim script cannot
        // look at it on a cluster.)
        if self.is_paused(source, route).await? {
            return Ok(Vec::new());
        }
        self.claim_from_stream(source, route, worker, now, limit, lease)
            .await
    }

    /// Claim the delivery a half-open breaker's probe sends through `route` of
    /// `source` (`Store::claim_probe`): the due retry that waits in the route's
    /// schedule with the earliest time, leased there by the probe script (see
    /// `scripts/probe.lua`), or else the first claim the work stream hands out.
    ///
    /// Retries already moved to the stream are not looked for: a stream is read in
    /// order, and finding them would mean reading the backlog before them. The
    /// retries of the failures that opened the breaker normally still wait in the
    /// schedule: while it was open, this process claimed nothing through the route,
    /// so moved none of them.
    pub(super) async fn claim_probe_delivery(
        &self,
        source: &str,
        route: &str,
        worker: &str,
        now: i64,
        lease: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        self.remember_claimed_route(source, route);
        if self.is_paused(source, route).await? {
            return Ok(None);
        }
        let token = uuid::Uuid::now_v7().simple().to_string();
        let until = now.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2));
        let mut inv = self.scripts.probe.prepare_invoke();
        inv.key(self.route_key(source, "sched", route))
            .arg(now)
            .arg(PROBE_SCAN)
            .arg(self.key(source, ""))
            .arg(route)
            .arg(&token)
            .arg(until);
        let mut c = self.conn();
        let found: Option<(String, HashMap<String, Vec<u8>>)> =
            self.timed(inv.invoke_async(&mut c)).await?;
        if let Some((id, map)) = found {
            let entry = entry_from_map(&id, map)?;
            // The script leased a pending delivery of the route, so the entry has it.
            if let Some(delivery) = entry.delivery(route).cloned() {
                return Ok(Some(Claim {
                    entry,
                    delivery,
                    token,
                    stream_message: None,
                }));
            }
        }
        Ok(self
            .claim_from_stream(source, route, worker, now, 1, lease)
            .await?
            .pop())
    }

    /// Whether `source`, or its `route`, is paused (by any process).
    async fn is_paused(&self, source: &str, route: &str) -> Result<bool, StoreError> {
        let mut c = self.conn();
        let paused: Vec<bool> = self
            .timed(
                redis::cmd("SMISMEMBER")
                    .arg(format!("{}:paused", self.prefix))
                    .arg(paused_member(source, None))
                    .arg(paused_member(source, Some(route)))
                    .query_async(&mut c),
            )
            .await?;
        Ok(paused.contains(&true))
    }

    /// Claim up to `limit` deliveries through `route` of `source` from its work
    /// stream, after moving the due retries there, in one call of the claim script
    /// (see the module docs).
    async fn claim_from_stream(
        &self,
        source: &str,
        route: &str,
        worker: &str,
        now: i64,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        let token = uuid::Uuid::now_v7().simple().to_string();
        let mut inv = self.scripts.claim.prepare_invoke();
        inv.key(self.route_key(source, "sched", route))
            .key(self.route_key(source, "work", route))
            .arg(now)
            .arg(PROMOTE_MAX)
            .arg(self.key(source, ""))
            .arg(route)
            .arg(GROUP)
            .arg(worker)
            .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
            .arg(limit.max(1))
            .arg(&token);
        let mut c = self.conn();
        let leased: Vec<Leased> = self.timed(inv.invoke_async(&mut c)).await?;
        let mut claims = Vec::with_capacity(leased.len());
        for (message, id, token, map) in leased {
            let entry = entry_from_map(&id, map)?;
            // The script leased a pending delivery of the route, so the entry has it.
            if let Some(delivery) = entry.delivery(route).cloned() {
                claims.push(Claim {
                    delivery,
                    entry,
                    token,
                    stream_message: Some(message),
                });
            }
        }
        Ok(claims)
    }

    /// Note that this process claims from `route` of `source` (see `housekeeping`).
    fn remember_claimed_route(&self, source: &str, route: &str) {
        if let Ok(mut routes) = self.claimed_routes.lock()
            && !routes.iter().any(|(s, r)| s == source && r == route)
        {
            routes.insert((source.to_string(), route.to_string()));
        }
    }

    /// Record a claim's completion with the complete script; `true` when applied.
    pub(super) async fn complete_claim(
        &self,
        claim: &Claim,
        completion: Completion,
        now: i64,
    ) -> Result<bool, StoreError> {
        let e = &claim.entry;
        let source = e.source.as_str();
        let route = claim.delivery.route.as_str();
        // Every claim this store hands out names its message.
        let message = claim.stream_message.as_deref().unwrap_or_default();
        let (status, next_at, attempt, last_error, reason) = match &completion {
            Completion::Delivered { attempt } => {
                (Status::Delivered, None, Some(attempt), None, String::new())
            }
            Completion::Retry { attempt, at } => (
                Status::Pending,
                Some(*at),
                Some(attempt),
                attempt_error(attempt),
                String::new(),
            ),
            Completion::Dead { attempt, reason } => (
                Status::Dead,
                None,
                attempt.as_ref(),
                Some(reason.clone()),
                reason.clone(),
            ),
            Completion::Release { at } => (Status::Pending, Some(*at), None, None, String::new()),
            Completion::Filtered { reason } => (
                Status::Filtered,
                None,
                None,
                Some(reason.clone()),
                String::new(),
            ),
        };
        let attempt_json = match attempt {
            Some(a) => serde_json::to_string(a).map_err(|source| StoreError::Encode {
                what: "the attempt",
                source,
            })?,
            None => String::new(),
        };
        // Pushed by the script only when a dead head of an ordered line lets the next
        // one go.
        let skip_json = serde_json::to_string(&AuditEvent {
            at: now,
            action: SKIP_ACTION.into(),
            actor: SKIP_ACTOR.into(),
            note: Some(SKIP_NOTE.into()),
            route: Some(route.to_string()),
            session: None,
            client: None,
        })
        .map_err(|source| StoreError::Encode {
            what: "the skip audit event",
            source,
        })?;
        let mut inv = self.scripts.complete.prepare_invoke();
        inv.key(self.key(source, &format!("e:{}", e.id)))
            .key(self.route_key(source, "work", route))
            .key(self.route_key(source, "sched", route))
            .key(self.key(source, &format!("a:{}", e.id)))
            .key(self.key(source, "dlq"))
            .arg(message)
            .arg(GROUP)
            .arg(status.as_str())
            .arg(next_at.map(|t| t.to_string()).unwrap_or_default())
            .arg(attempt_json)
            .arg(last_error.unwrap_or_default())
            .arg(now)
            .arg(&e.id)
            .arg(reason)
            .arg(&claim.token)
            .arg(route)
            .arg(self.key(source, ""))
            .arg(skip_json)
            .arg(match Counted::of(&completion) {
                Some(Counted::Delivered) => "d",
                Some(Counted::Failed) => "f",
                None => "",
            })
            .arg(
                attempt
                    .and_then(|a| a.failure)
                    .map(|f| f.name())
                    .unwrap_or_default(),
            );
        let mut c = self.conn();
        let applied: i64 = self.timed(inv.invoke_async(&mut c)).await?;
        if matches!(completion, Completion::Release { .. }) {
            self.work.wake(&Wake::route(source, route));
        }
        Ok(applied == 1)
    }

    /// Create the consumer group of `route` of `source` (and its stream) unless it
    /// exists.
    pub(super) async fn ensure_group(&self, source: &str, route: &str) -> Result<(), StoreError> {
        let mut c = self.conn();
        let created = tokio::time::timeout(
            self.timeout,
            redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(self.route_key(source, "work", route))
                .arg(GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .query_async::<()>(&mut c),
        )
        .await
        .map_err(|_| StoreError::Timeout(self.timeout))?;
        match created {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
