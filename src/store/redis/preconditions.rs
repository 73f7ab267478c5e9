//! What Redis itself must guarantee for hookgate's promises, checked at open and at
//! every maintenance pass.
//!
//! * `maxmemory-policy noeviction`, required. Any other policy lets Redis evict keys
//!   under memory pressure: `volatile-*` policies evict dedupe keys (they carry a
//!   TTL), so a provider's retry is delivered twice; `allkeys-*` policies evict
//!   entries that were acknowledged with a 2xx, so they are lost. hookgate refuses to
//!   open such a Redis; if the policy changes at runtime, every maintenance pass logs
//!   an ERROR and `ping` (hence `/readyz`) fails until it is set back.
//! * `appendonly yes` with `appendfsync always`, warned about at open and at every
//!   pass, not refused: without them a 2xx does not survive a Redis crash, but some
//!   operators run `everysec` knowingly, trading up to a second of acknowledged
//!   webhooks for throughput (README and deploy/redis.conf say what it risks).
//!
//! On a Redis Cluster every master is checked. Where `CONFIG` is disabled or renamed
//! (managed Redis services often do this), the check cannot be made: one WARN, and
//! hookgate goes on.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::ErrorKind;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};

use super::Conn;
use crate::store::StoreError;

/// The settings of one node, as `CONFIG GET` answered them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Settings {
    /// `host:port` on a cluster; `None` for a single Redis.
    pub node: Option<String>,
    pub maxmemory_policy: Option<String>,
    pub appendonly: Option<String>,
    pub appendfsync: Option<String>,
}

impl Settings {
    fn from_map(node: Option<String>, map: &HashMap<String, String>) -> Settings {
        Settings {
            node,
            maxmemory_policy: map.get("maxmemory-policy").cloned(),
            appendonly: map.get("appendonly").cloned(),
            appendfsync: map.get("appendfsync").cloned(),
        }
    }

    /// The eviction policy, when it is not `noeviction`.
    fn eviction(&self) -> Option<Eviction> {
        match self.maxmemory_policy.as_deref() {
            None | Some("noeviction") => None,
            Some(policy) => Some(Eviction {
                node: self.node.clone(),
                policy: policy.to_string(),
            }),
        }
    }

    /// Whether a write Redis acknowledged is on disk.
    fn durable(&self) -> bool {
        self.appendonly.as_deref() == Some("yes") && self.appendfsync.as_deref() == Some("always")
    }
}

/// A node whose `maxmemory-policy` is not `noeviction`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Eviction {
    node: Option<String>,
    policy: String,
}

impl Eviction {
    fn error(&self) -> StoreError {
        StoreError::Evicting {
            node: self.node.clone(),
            policy: self.policy.clone(),
        }
    }
}

/// When a check runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// At open: an eviction policy refuses to start.
    Open,
    /// A maintenance pass: an eviction policy fails `ping` until it is fixed.
    Maintenance,
}

/// Why the settings could not be read.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    /// Redis answered with an error: `CONFIG` is disabled, renamed or not permitted.
    #[error("redis refused CONFIG GET")]
    Refused(#[source] redis::RedisError),
    /// No answer (connection lost, timeout): the next pass tries again.
    #[error("cannot reach redis to read its settings")]
    Unreachable(#[source] StoreError),
}

fn classify(e: redis::RedisError) -> ReadError {
    match e.kind() {
        ErrorKind::Server(_) | ErrorKind::Extension => ReadError::Refused(e),
        _ => ReadError::Unreachable(StoreError::from(e)),
    }
}

/// The precondition state of one store.
#[derive(Default)]
pub(super) struct Preconditions {
    /// The eviction policy last seen, while it is not `noeviction`.
    evicting: Mutex<Option<Eviction>>,
    /// Whether the "cannot check" WARN was logged (once per process).
    warned_unreadable: AtomicBool,
}

impl Preconditions {
    /// Read every master's settings and act on them (see the module docs). At
    /// `Phase::Open`, an eviction policy is the error; at `Phase::Maintenance` it is
    /// logged and kept for [`Preconditions::ensure`].
    pub(super) async fn check(
        &self,
        conn: &Conn,
        timeout: Duration,
        phase: Phase,
    ) -> Result<(), StoreError> {
        let nodes = match read(conn, timeout).await {
            Ok(nodes) => nodes,
            Err(ReadError::Refused(e)) => {
                if !self.warned_unreadable.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        error = %e,
                        "cannot read the redis settings (CONFIG is disabled, renamed or not \
                         permitted): maxmemory-policy noeviction and appendfsync always could \
                         not be checked; make sure the service provides both"
                    );
                }
                return Ok(());
            }
            Err(ReadError::Unreachable(e)) => {
                return match phase {
                    Phase::Open => Err(e),
                    Phase::Maintenance => {
                        tracing::debug!(error = %e, "cannot read the redis settings this pass");
                        Ok(())
                    }
                };
            }
        };
        for n in nodes.iter().filter(|n| !n.durable()) {
            tracing::warn!(
                node = n.node.as_deref().unwrap_or(""),
                appendonly = n.appendonly.as_deref().unwrap_or("?"),
                appendfsync = n.appendfsync.as_deref().unwrap_or("?"),
                "redis is not running with appendonly yes + appendfsync always: a 2xx does not \
                 guarantee the entry survives a Redis crash (see deploy/redis.conf)"
            );
        }
        let eviction = nodes.iter().find_map(Settings::eviction);
        let mut seen = self
            .evicting
            .lock()
            .map_err(|_| StoreError::Unavailable("precondition lock poisoned"))?;
        match (eviction, phase) {
            (Some(e), Phase::Open) => Err(e.error()),
            (Some(e), Phase::Maintenance) => {
                tracing::error!(
                    node = e.node.as_deref().unwrap_or(""),
                    policy = %e.policy,
                    "redis now runs with maxmemory-policy {}: it may evict dedupe keys (double \
                     delivery) or acknowledged entries (loss); /readyz answers 503 until \
                     CONFIG SET maxmemory-policy noeviction",
                    e.policy
                );
                *seen = Some(e);
                Ok(())
            }
            (None, _) => {
                if let Some(e) = seen.take() {
                    tracing::info!(previous = %e.policy, "redis maxmemory-policy is noeviction again");
                }
                Ok(())
            }
        }
    }

    /// `Err` while the last check saw an eviction policy.
    pub(super) fn ensure(&self) -> Result<(), StoreError> {
        let seen = self
            .evicting
            .lock()
            .map_err(|_| StoreError::Unavailable("precondition lock poisoned"))?;
        match &*seen {
            Some(e) => Err(e.error()),
            None => Ok(()),
        }
    }
}

/// `CONFIG GET` of the settings, from the one Redis or from every cluster master.
async fn read(conn: &Conn, timeout: Duration) -> Result<Vec<Settings>, ReadError> {
    let mut by_node: HashMap<Option<String>, HashMap<String, String>> = HashMap::new();
    // Two patterns rather than one call with two names: Redis before 7 takes one.
    for pattern in ["maxmemory-policy", "append*"] {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg(pattern);
        let answers = tokio::time::timeout(timeout, config_get(conn, cmd))
            .await
            .map_err(|_| ReadError::Unreachable(StoreError::Timeout(timeout)))??;
        for (node, map) in answers {
            by_node.entry(node).or_default().extend(map);
        }
    }
    let mut nodes: Vec<Settings> = by_node
        .iter()
        .map(|(node, map)| Settings::from_map(node.clone(), map))
        .collect();
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(nodes)
}

/// One `CONFIG GET`, answered per node.
async fn config_get(
    conn: &Conn,
    cmd: redis::Cmd,
) -> Result<Vec<(Option<String>, HashMap<String, String>)>, ReadError> {
    match conn.clone() {
        Conn::Single(mut c) => {
            let map: HashMap<String, String> = cmd.query_async(&mut c).await.map_err(classify)?;
            Ok(vec![(None, map)])
        }
        Conn::Cluster(mut c) => {
            let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let answer = c.route_command(cmd, routing).await.map_err(classify)?;
            let redis::Value::Map(per_node) = answer else {
                return Err(ReadError::Refused(redis::RedisError::from((
                    ErrorKind::Parse,
                    "CONFIG GET on every master: not one answer per node",
                ))));
            };
            per_node
                .into_iter()
                .map(|(node, value)| {
                    let node: String = redis::from_redis_value(node)
                        .map_err(|e| classify(redis::RedisError::from(e)))?;
                    let value = value.extract_error().map_err(classify)?;
                    let map: HashMap<String, String> = redis::from_redis_value(value)
                        .map_err(|e| classify(redis::RedisError::from(e)))?;
                    Ok((Some(node), map))
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(policy: &str, aof: &str, fsync: &str) -> Settings {
        Settings {
            node: Some("10.0.0.1:7000".into()),
            maxmemory_policy: Some(policy.into()),
            appendonly: Some(aof.into()),
            appendfsync: Some(fsync.into()),
        }
    }

    #[test]
    fn only_noeviction_keeps_every_key() {
        assert!(node("noeviction", "yes", "always").eviction().is_none());
        for policy in [
            "allkeys-lru",
            "volatile-ttl",
            "volatile-lfu",
            "allkeys-random",
        ] {
            let e = node(policy, "yes", "always").eviction();
            assert_eq!(e.as_ref().map(|e| e.policy.as_str()), Some(policy));
            assert_eq!(e.and_then(|e| e.node).as_deref(), Some("10.0.0.1:7000"));
        }
        // A node that did not say (CONFIG answered without the name) is not refused.
        assert!(Settings::default().eviction().is_none());
    }

    #[test]
    fn durable_only_with_aof_always() {
        assert!(node("noeviction", "yes", "always").durable());
        assert!(!node("noeviction", "yes", "everysec").durable());
        assert!(!node("noeviction", "no", "always").durable());
    }

    #[test]
    fn the_error_names_the_policy_and_the_fix() {
        let text = node("volatile-lru", "yes", "always")
            .eviction()
            .map(|e| e.error().to_string())
            .unwrap_or_default();
        assert!(text.contains("volatile-lru"), "{text}");
        assert!(text.contains("10.0.0.1:7000"), "{text}");
        assert!(
            text.contains("CONFIG SET maxmemory-policy noeviction"),
            "{text}"
        );
        assert!(text.contains("deploy/redis.conf"), "{text}");
    }
}
