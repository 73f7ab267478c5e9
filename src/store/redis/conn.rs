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

/// The oldest major version among the Redis servers behind `conn` (`INFO server`;
/// every master of a cluster answers). 0 when no server names one.
pub(super) async fn major_version(conn: &Conn, timeout: Duration) -> Result<u32, StoreError> {
    let texts = info(conn, "server", timeout).await?;
    Ok(texts
        .iter()
        .flat_map(|t| t.lines())
        .filter_map(|l| l.strip_prefix("redis_version:"))
        .filter_map(|v| v.trim().split('.').next()?.parse::<u32>().ok())
        .min()
        .unwrap_or(0))
}

/// How full the fullest Redis behind `conn` is: `used_memory / maxmemory` (`INFO
/// memory`; every master of a cluster answers), `None` when none has a `maxmemory`.
pub(super) async fn memory_use(conn: &Conn, timeout: Duration) -> Result<Option<f64>, StoreError> {
    let texts = info(conn, "memory", timeout).await?;
    let field = |text: &str, name: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    Ok(texts
        .iter()
        .filter_map(|t| {
            let max = field(t, "maxmemory")?;
            (max > 0.0).then_some(field(t, "used_memory")? / max)
        })
        .reduce(f64::max))
}

/// `INFO <section>`: one text per server (every master of a cluster answers).
async fn info(conn: &Conn, section: &str, timeout: Duration) -> Result<Vec<String>, StoreError> {
    let reply = info_reply(conn, section, timeout).await?;
    let mut texts = Vec::new();
    collect_text(&reply, &mut texts);
    Ok(texts)
}

/// `INFO <section>` as Redis answered it: one text, or on a cluster a map of each
/// master's address to its text.
pub(super) async fn info_reply(
    conn: &Conn,
    section: &str,
    timeout: Duration,
) -> Result<redis::Value, StoreError> {
    let mut c = conn.clone();
    timed(timeout, redis::cmd("INFO").arg(section).query_async(&mut c)).await
}

/// Every text in a reply, however nested (a cluster answers per node).
fn collect_text(v: &redis::Value, out: &mut Vec<String>) {
    match v {
        redis::Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => out.push(s.clone()),
        redis::Value::VerbatimString { text, .. } => out.push(text.clone()),
        redis::Value::Array(items) | redis::Value::Set(items) => {
            items.iter().for_each(|i| collect_text(i, out));
        }
        redis::Value::Map(pairs) => pairs.iter().for_each(|(_, v)| collect_text(v, out)),
        _ => {}
    }
}
