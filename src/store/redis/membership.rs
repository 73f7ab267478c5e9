//! The Redis store's gateways (`store::gateways`): heartbeats stamped with Redis's
//! clock (`TIME` inside the script), the list, the takeover of a dead gateway's
//! leases, and the configuration salt.
//!
//! A gateway's consumer name in the routes' consumer groups is its heartbeat id. A
//! takeover pass asks which gateways are dead (`scripts/dead.lua`), then, route by
//! route (each stream lives in its source's slot), hands the messages they hold to
//! the asking consumer already idle for longer than any lease
//! (`scripts/take_over.lua`): the next claim of any gateway takes them back with
//! `XAUTOCLAIM` and leases them anew, so the dead holder's completions find another
//! lease and change nothing. A probe leased in a route's schedule (no stream
//! message) waits for its lease to run out.

use std::collections::HashMap;

use redis::AsyncCommands as _;
use serde::{Deserialize, Serialize};

use super::RedisStore;
use super::delivery::GROUP;
use crate::store::StoreError;
use crate::store::gateways::{
    ALIVE_WITHIN, DEAD_AFTER, FORGET_AFTER, GatewayInfo, Heartbeat, HeartbeatAck, RESUME_GAP,
    TakeOver, ms, new_salt, salt_from,
};

/// The idle time a handed-over message gets: more than any lease.
const EXPIRED_IDLE_MS: i64 = 24 * 3600 * 1000;

/// What the `info` hash keeps per gateway.
#[derive(Serialize, Deserialize)]
struct Info {
    host: String,
    version: String,
    started: i64,
}

impl RedisStore {
    /// A key of the gateways' records (one hash tag: one slot on a cluster).
    fn gateways_key(&self, rest: &str) -> String {
        format!("{}:{{gateways}}:{rest}", self.prefix)
    }

    pub(super) async fn beat(&self, beat: &Heartbeat) -> Result<HeartbeatAck, StoreError> {
        let info = serde_json::to_string(&Info {
            host: beat.host.clone(),
            version: beat.version.clone(),
            started: beat.started,
        })
        .map_err(|source| StoreError::Encode {
            what: "a heartbeat",
            source,
        })?;
        let mut inv = self.scripts.heartbeat.prepare_invoke();
        inv.key(self.gateways_key("seen"))
            .key(self.gateways_key("info"))
            .key(self.gateways_key("clock"))
            .key(self.gateways_key("taken"))
            .arg(&beat.id)
            .arg(info)
            .arg(ms(FORGET_AFTER))
            .arg(ms(RESUME_GAP));
        let mut c = self.conn();
        let (at, taken): (i64, i64) = self.timed(inv.invoke_async(&mut c)).await?;
        Ok(HeartbeatAck {
            at,
            taken_over: taken > 0,
        })
    }

    pub(super) async fn list_gateways(&self) -> Result<Vec<GatewayInfo>, StoreError> {
        let mut c = self.conn();
        let (secs, micros): (i64, i64) = self.timed(redis::cmd("TIME").query_async(&mut c)).await?;
        let now = secs * 1000 + micros / 1000;
        let seen: Vec<(String, i64)> = self
            .timed(c.zrangebyscore_withscores(
                self.gateways_key("seen"),
                now - ms(FORGET_AFTER),
                "+inf",
            ))
            .await?;
        let infos: HashMap<String, String> =
            self.timed(c.hgetall(self.gateways_key("info"))).await?;
        let mut out: Vec<GatewayInfo> = seen
            .into_iter()
            .filter_map(|(id, last_seen)| {
                let info: Info = serde_json::from_str(infos.get(&id)?).ok()?;
                Some(GatewayInfo {
                    host: info.host,
                    version: info.version,
                    started: info.started,
                    last_seen,
                    alive: now - last_seen < ms(ALIVE_WITHIN),
                    id,
                })
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    pub(super) async fn take_over(&self, by: &str) -> Result<TakeOver, StoreError> {
        let mut inv = self.scripts.dead.prepare_invoke();
        inv.key(self.gateways_key("seen"))
            .key(self.gateways_key("clock"))
            .key(self.gateways_key("taken"))
            .arg(ms(DEAD_AFTER))
            .arg(ms(FORGET_AFTER))
            .arg(by);
        let mut c = self.conn();
        let dead: Vec<String> = self.timed(inv.invoke_async(&mut c)).await?;
        // The dead this process already handed over: once each, while they stay
        // dead (one heard from again is forgotten, and looked at anew should it die).
        let gateways: Vec<String> = match self.taken_over.lock() {
            Ok(mut done) => {
                done.retain(|g| dead.contains(g));
                dead.into_iter().filter(|g| !done.contains(g)).collect()
            }
            Err(_) => dead,
        };
        if gateways.is_empty() {
            return Ok(TakeOver::default());
        }
        let routes: Vec<(String, String)> = self
            .claimed_routes
            .lock()
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default();
        let mut leases = 0u64;
        let mut unfinished = 0u64;
        for (source, route) in routes {
            let mut inv = self.scripts.take_over.prepare_invoke();
            inv.key(self.route_key(&source, "work", &route))
                .arg(GROUP)
                .arg(by)
                .arg(EXPIRED_IDLE_MS);
            for g in &gateways {
                inv.arg(g);
            }
            let (moved, left): (u64, u64) = self.timed(inv.invoke_async(&mut c)).await?;
            leases += moved;
            unfinished += left;
        }
        if unfinished == 0
            && let Ok(mut done) = self.taken_over.lock()
        {
            done.extend(gateways.iter().cloned());
        }
        Ok(TakeOver { gateways, leases })
    }

    pub(super) async fn salt(&self) -> Result<[u8; 32], StoreError> {
        let key = format!("{}:config_salt", self.prefix);
        let fresh = new_salt()?;
        let mut c = self.conn();
        let _: Option<String> = self
            .timed(
                redis::cmd("SET")
                    .arg(&key)
                    .arg(fresh.as_slice())
                    .arg("NX")
                    .query_async(&mut c),
            )
            .await?;
        let kept: Option<Vec<u8>> = self.timed(c.get(&key)).await?;
        salt_from(kept.as_deref().unwrap_or_default())
    }
}
