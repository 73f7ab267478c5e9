//! Redis's share of the forwarder's maintenance pass (`Store::housekeeping`): check
//! what Redis must guarantee (see `preconditions`), notice a Redis that lost its data,
//! and put back what such a Redis lost that the gateway needs to go on (consumer
//! groups, the source registry). Opening the store checks the settings and the
//! epoch too.
//!
//! Consumer groups are per route stream, and a pass is told the sources, not their
//! routes: it recreates the groups of the routes this process claims from, and a
//! claim that meets `NOGROUP` creates its route's group (see `delivery`): a route's
//! first claim, and the first after Redis lost its data, if no pass came before.

use redis::AsyncCommands as _;

use super::{RedisStore, conn, preconditions};
use crate::store::StoreError;

/// Above this share of `maxmemory`, delivered entries are purged before their
/// retention ends, oldest first, until use is back under [`EARLY_PURGE_UNTIL`].
pub const EARLY_PURGE_ABOVE: f64 = 0.85;
/// Where an early purge stops.
pub const EARLY_PURGE_UNTIL: f64 = 0.75;
/// Entries one purge script call removes; a pass makes at most
/// [`EARLY_PURGE_ROUNDS`] rounds over the sources.
const EARLY_PURGE_BATCH: usize = 500;
const EARLY_PURGE_ROUNDS: usize = 50;

impl RedisStore {
    /// One pass, the same at start and after: settings, epoch, the consumer groups
    /// of the routes of `sources` this process claims from, source registry.
    /// Leases need no taking back: a dead consumer's messages are claimed again by
    /// `XAUTOCLAIM` once they are older than the lease.
    pub(super) async fn maintenance_pass(&self, sources: &[String]) -> Result<(), StoreError> {
        self.check_preconditions(preconditions::Phase::Maintenance)
            .await?;
        // First: under memory pressure the rest of the pass may be refused.
        self.purge_early(sources).await?;
        self.check_epoch().await?;
        let routes: Vec<(String, String)> = self
            .claimed_routes
            .lock()
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default();
        for (source, route) in routes.iter().filter(|(s, _)| sources.contains(s)) {
            self.ensure_group(source, route).await?;
        }
        if !sources.is_empty() {
            // Re-register the configured sources (idempotent): after a Redis that lost
            // its data, lookups by id and retention find them again.
            let mut c = self.conn();
            let key = format!("{}:sources", self.prefix);
            self.timed(c.sadd::<_, _, ()>(key, sources)).await?;
        }
        Ok(())
    }

    /// Check `maxmemory-policy` and AOF on every master (see `preconditions`).
    pub(super) async fn check_preconditions(
        &self,
        phase: preconditions::Phase,
    ) -> Result<(), StoreError> {
        self.preconditions
            .check(&self.conn(), self.timeout, phase)
            .await
    }

    /// Under memory pressure (Redis above [`EARLY_PURGE_ABOVE`] of its `maxmemory`),
    /// purge delivered entries before their retention ends, the oldest first, until
    /// it is under [`EARLY_PURGE_UNTIL`]: a Redis out of memory refuses new
    /// webhooks, and delivered entries are the ones nobody is waiting for. Logged
    /// and counted (`hookgate_store_early_purged_total`). Pending and dead entries
    /// are never purged early.
    pub(super) async fn purge_early(&self, sources: &[String]) -> Result<(), StoreError> {
        let Some(mut used) = conn::memory_use(&self.conn(), self.timeout).await? else {
            return Ok(());
        };
        if used < EARLY_PURGE_ABOVE {
            return Ok(());
        }
        let started = used;
        let mut purged = 0u64;
        'rounds: for _ in 0..EARLY_PURGE_ROUNDS {
            let mut round = 0u64;
            for source in sources {
                let mut inv = self.scripts.purge.prepare_invoke();
                inv.key(self.key(source, "done:delivered"))
                    .arg(i64::MAX)
                    .arg(EARLY_PURGE_BATCH)
                    .arg(self.key(source, ""));
                let mut c = self.conn();
                let n: u64 = self.timed(inv.invoke_async(&mut c)).await?;
                metrics::counter!("hookgate_store_early_purged_total", "source" => source.clone())
                    .increment(n);
                round += n;
            }
            purged += round;
            match conn::memory_use(&self.conn(), self.timeout).await? {
                Some(u) => used = u,
                None => break,
            }
            if round == 0 || used < EARLY_PURGE_UNTIL {
                break 'rounds;
            }
        }
        tracing::warn!(
            purged,
            memory_before = format!("{:.0}%", started * 100.0),
            memory_after = format!("{:.0}%", used * 100.0),
            "redis is short of memory: delivered entries purged before their retention ended, oldest first"
        );
        Ok(())
    }

    /// Detect a Redis that lost its data: `hg:epoch` vanished or changed.
    pub(super) async fn check_epoch(&self) -> Result<(), StoreError> {
        let key = format!("{}:epoch", self.prefix);
        let mut c = self.conn();
        let fresh = uuid::Uuid::now_v7().to_string();
        // Read first: a Redis out of memory refuses the SET even when it would
        // change nothing.
        let mut current: Option<String> = self.timed(c.get(&key)).await?;
        if current.is_none() {
            let _: Option<String> = self
                .timed(
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(&fresh)
                        .arg("NX")
                        .query_async(&mut c),
                )
                .await?;
            current = self.timed(c.get(&key)).await?;
        }
        let current = current.unwrap_or(fresh.clone());
        let mut seen = self
            .epoch
            .lock()
            .map_err(|_| StoreError::Unavailable("epoch lock poisoned"))?;
        if seen.is_empty() {
            *seen = current;
        } else if *seen != current {
            if let Ok(mut k) = self.known_sources.lock() {
                k.clear();
            }
            tracing::error!(
                "redis lost its data (it came back empty or was flushed): entries, dedupe keys, \
                 retry schedules and paused-source flags stored before are gone; hookgate \
                 keeps accepting and delivering new webhooks"
            );
            *seen = current;
        }
        Ok(())
    }
}
