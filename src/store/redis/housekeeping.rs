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

use super::{RedisStore, preconditions};
use crate::store::StoreError;

impl RedisStore {
    /// One pass, the same at start and after: settings, epoch, the consumer groups
    /// of the routes of `sources` this process claims from, source registry.
    /// Leases need no taking back: a dead consumer's messages are claimed again by
    /// `XAUTOCLAIM` once they are older than the lease.
    pub(super) async fn maintenance_pass(&self, sources: &[String]) -> Result<(), StoreError> {
        self.check_preconditions(preconditions::Phase::Maintenance)
            .await?;
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

    /// Detect a Redis that lost its data: `hg:epoch` vanished or changed.
    pub(super) async fn check_epoch(&self) -> Result<(), StoreError> {
        let key = format!("{}:epoch", self.prefix);
        let mut c = self.conn();
        let fresh = uuid::Uuid::now_v7().to_string();
        let _: Option<String> = self
            .timed(
                redis::cmd("SET")
                    .arg(&key)
                    .arg(&fresh)
                    .arg("NX")
                    .query_async(&mut c),
            )
            .await?;
        let current: Option<String> = self.timed(c.get(&key)).await?;
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
