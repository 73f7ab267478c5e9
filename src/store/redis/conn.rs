//! The connection to Redis: one Redis or a Redis Cluster, behind one type, and how
//! its errors and timeouts become [`StoreError`]s.
//!
//! The store uses a few multiplexed connections (`store.connections`, round robin)
//! rather than a pool: under `appendfsync always` Redis fsyncs once per event loop
//! pass, so several connections let one fsync cover many requests. Each connection
//! reconnects by itself when Redis comes back.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::config::RedisConfig;
use crate::store::{Backend, StoreError};

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> StoreError {
        StoreError::backend(Backend::Redis, e)
    }
}

/// A connection to one Redis or to a Redis Cluster. Both are multiplexed and
/// reconnect by themselves; the cluster one routes each command (and each script, by
/// its first key) to the node owning the slot.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The seed URLs of a cluster (`store.url` lists several, comma-separated), or `None`
/// for a single Redis.
fn cluster_seeds(cfg: &RedisConfig) -> Option<Vec<String>> {
    let urls: Vec<String> = cfg
        .url
        .split(',')
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
        .collect();
    (urls.len() > 1 || cfg.cluster).then_some(urls)
}

/// Open `store.connections` connections (at least one), each within twice the
/// timeout.
pub(super) async fn connect(cfg: &RedisConfig) -> Result<Vec<Conn>, StoreError> {
    let mut conns = Vec::with_capacity(cfg.connections);
    match cluster_seeds(cfg) {
        Some(seeds) => {
            let client = redis::cluster::ClusterClientBuilder::new(seeds)
                .connection_timeout(cfg.timeout)
                .response_timeout(cfg.timeout)
                .build()?;
            for _ in 0..cfg.connections.max(1) {
                let conn = tokio::time::timeout(cfg.timeout * 2, client.get_async_connection())
                    .await
                    .map_err(|_| StoreError::Timeout(cfg.timeout * 2))??;
                conns.push(Conn::Cluster(conn));
            }
        }
        None => {
            let client = redis::Client::open(cfg.url.as_str())?;
            let mgr_cfg = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(cfg.timeout))
                .set_response_timeout(Some(cfg.timeout))
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_secs(1));
            for _ in 0..cfg.connections.max(1) {
                let conn = tokio::time::timeout(
                    cfg.timeout * 2,
                    ConnectionManager::new_with_config(client.clone(), mgr_cfg.clone()),
                )
                .await
                .map_err(|_| StoreError::Timeout(cfg.timeout * 2))??;
                conns.push(Conn::Single(conn));
            }
        }
    }
    Ok(conns)
}

/// A Redis call bounded by `timeout`: Redis's own error or [`StoreError::Timeout`].
pub(super) async fn timed<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, redis::RedisError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => r.map_err(StoreError::from),
        Err(_) => Err(StoreError::Timeout(timeout)),
    }
}
