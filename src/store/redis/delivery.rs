//! How the forwarder's work moves through Redis: claims and completions.
//!
//! The work stream of a source has one consumer group (`workers`); every gateway
//! process is a consumer. A claim first moves due retries from `sched` to the stream
//! (the promote script, atomic), then takes messages whose lease expired from other
//! consumers (`XAUTOCLAIM` with the lease as minimum idle time: a crashed worker's
//! entries are delivered again), then new messages (`XREADGROUP >`), and takes the
//! lease of each entry (the lease script). The complete script records the attempt,
//! acknowledges and deletes the message, and either schedules the retry, or marks
//! the entry delivered or dead (appending to the DLQ stream), in one call.
//!
//! If Redis lost the group (it restarted empty), `NOGROUP` is answered by recreating
//! it; the loss itself is detected through `hg:epoch` (see `RedisStore::check_epoch`)
//! and logged at ERROR.

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands as _;

use super::RedisStore;
use super::codec::entry_from_map;
use super::conn::timed;
use crate::store::{Claim, Completion, Status, StoreError, attempt_error};

/// The consumer group every gateway process joins.
pub(super) const GROUP: &str = "workers";

/// Most due retries one claim moves to the work stream.
const PROMOTE_MAX: i64 = 1000;

impl RedisStore {
    /// Claim up to `limit` entries of `source` for `worker` (see the module docs).
    pub(super) async fn claim_entries(
        &self,
        source: &str,
        worker: &str,
        now: i64,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        let limit = limit.max(1);
        let mut c = self.conn();
        // A paused source yields nothing, whichever process paused it.
        let paused: bool = self
            .timed(c.sismember(format!("{}:paused", self.prefix), source))
            .await?;
        if paused {
            return Ok(Vec::new());
        }
        let mut inv = self.scripts.promote.prepare_invoke();
        inv.key(self.key(source, "sched"))
            .key(self.key(source, "work"))
            .arg(now)
            .arg(PROMOTE_MAX)
            .arg(self.key(source, ""));
        let _: i64 = self.timed(inv.invoke_async(&mut c)).await?;
        let messages = match tokio::time::timeout(
            self.timeout,
            self.read_messages(source, worker, limit, lease),
        )
        .await
        {
            Err(_) => return Err(StoreError::Timeout(self.timeout)),
            Ok(Ok(m)) => m,
            Ok(Err(e)) if e.code() == Some("NOGROUP") => {
                tracing::warn!(source, "redis consumer group missing; recreating it");
                self.ensure_group(source).await?;
                self.timed(self.read_messages(source, worker, limit, lease))
                    .await?
            }
            Ok(Err(e)) => return Err(e.into()),
        };
        let mut claims = Vec::with_capacity(messages.len());
        for (message, id) in messages {
            let token = uuid::Uuid::now_v7().simple().to_string();
            let mut inv = self.scripts.lease.prepare_invoke();
            inv.key(self.key(source, &format!("e:{id}")))
                .arg(&message)
                .arg(&token);
            let mut c = self.conn();
            let map: Option<HashMap<String, Vec<u8>>> =
                self.timed(inv.invoke_async(&mut c)).await?;
            match map {
                Some(map) if !map.is_empty() => claims.push(Claim {
                    entry: entry_from_map(&id, map)?,
                    token,
                    stream_message: Some(message),
                }),
                // Ended, purged or superseded meanwhile: the message is stale.
                _ => self.discard_message(source, &message).await?,
            }
        }
        Ok(claims)
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
        };
        let done = if status == Status::Delivered {
            "done:delivered"
        } else {
            "done:dead"
        };
        let attempt_json = match attempt {
            Some(a) => serde_json::to_string(a).map_err(|source| StoreError::Encode {
                what: "the attempt",
                source,
            })?,
            None => String::new(),
        };
        let mut inv = self.scripts.complete.prepare_invoke();
        inv.key(self.key(source, &format!("e:{}", e.id)))
            .key(self.key(source, "work"))
            .key(self.key(source, "sched"))
            .key(self.key(source, &format!("a:{}", e.id)))
            .key(self.status_key(source, Status::Pending))
            .key(self.status_key(source, status))
            .key(self.key(source, done))
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
            .arg(&claim.token);
        let mut c = self.conn();
        let applied: i64 = self.timed(inv.invoke_async(&mut c)).await?;
        if matches!(completion, Completion::Release { .. }) {
            self.work_tx.send_modify(|n| *n = n.wrapping_add(1));
        }
        Ok(applied == 1)
    }

    /// Create the consumer group of `source` (and its stream) unless it exists.
    pub(super) async fn ensure_group(&self, source: &str) -> Result<(), StoreError> {
        let mut c = self.conn();
        let created = tokio::time::timeout(
            self.timeout,
            redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(self.key(source, "work"))
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

    /// Read claimable messages (expired leases first, then new ones) as
    /// (message id, entry id).
    async fn read_messages(
        &self,
        source: &str,
        worker: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<(String, String)>, redis::RedisError> {
        let mut c = self.conn();
        let work = self.key(source, "work");
        let mut out: Vec<(String, String)> = Vec::new();
        let reclaimed: redis::streams::StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
            .arg(&work)
            .arg(GROUP)
            .arg(worker)
            .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
            .arg("0-0")
            .arg("COUNT")
            .arg(limit)
            .query_async(&mut c)
            .await?;
        for m in reclaimed.claimed {
            let id: Option<String> = m.get("id");
            out.push((m.id, id.unwrap_or_default()));
        }
        if out.len() < limit {
            let reply: Option<redis::streams::StreamReadReply> = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(worker)
                .arg("COUNT")
                .arg(limit - out.len())
                .arg("STREAMS")
                .arg(&work)
                .arg(">")
                .query_async(&mut c)
                .await?;
            for k in reply.map(|r| r.keys).unwrap_or_default() {
                for m in k.ids {
                    let id: Option<String> = m.get("id");
                    out.push((m.id, id.unwrap_or_default()));
                }
            }
        }
        Ok(out)
    }

    /// Drop a stream message that no longer stands for pending work.
    async fn discard_message(&self, source: &str, message: &str) -> Result<(), StoreError> {
        let mut c = self.conn();
        let work = self.key(source, "work");
        let mut pipe = redis::pipe();
        pipe.cmd("XACK").arg(&work).arg(GROUP).arg(message).ignore();
        pipe.cmd("XDEL").arg(&work).arg(message).ignore();
        timed(self.timeout, pipe.query_async::<()>(&mut c)).await
    }
}
