//! The Redis store: for several gateway instances and scale-out.
//!
//! # Key layout
//!
//! Every key of a source carries the hash tag `{<source>}`, so that one Lua script
//! can touch all of them on a Redis Cluster (a source lives in one slot; sources
//! spread over the cluster). With the default prefix `hg`:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `hg:{src}:e:<id>` | hash | the entry: metadata, headers (JSON), body, status, attempts |
//! | `hg:{src}:d:<dedupe key>` | string, `PX` = dedupe TTL | the id of the first entry with that key |
//! | `hg:{src}:work` | stream | one message per entry to deliver (the forwarder's queue) |
//! | `hg:{src}:idx` | sorted set, all scores 0 | every entry id, in lexical (= arrival) order |
//! | `hg:{src}:st:<status>` | sorted set, all scores 0 | entry ids by status |
//! | `hg:sources` | set | every source name seen (for lookups by id) |
//! | `hg:paused` | set | sources whose delivery is paused |
//!
//! # Accept
//!
//! Dedupe and persist are one Lua script (`ACCEPT`): if the dedupe key exists the
//! script returns the original id and writes nothing; otherwise it sets the dedupe
//! key, writes the entry hash, appends to the work stream and the indexes. There is no
//! moment where the dedupe key exists without its entry. With `appendfsync always`,
//! Redis fsyncs the AOF before it answers, so the reply means the entry is durable.
//!
//! # Connections
//!
//! The ingest path uses a few multiplexed connections (`store.connections`, round
//! robin) rather than a pool: under `appendfsync always` Redis fsyncs once per event
//! loop pass, so several connections let one fsync cover many requests. Each
//! connection reconnects by itself when Redis comes back. redis crate types never
//! leave this file.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::{
    Accepted, Entry, ListQuery, MAX_PAGE, NewEntry, Page, Status, Store, StoreError,
    decode_headers, encode_headers,
};
use crate::config::RedisConfig;

const ACCEPT: &str = r#"
local existing = redis.call('GET', KEYS[1])
if existing then
  return {1, existing}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[2],
  'source', ARGV[3], 'event_id', ARGV[4], 'event_type', ARGV[5], 'dedupe_key', ARGV[6],
  'received_at', ARGV[7], 'status', 'pending', 'attempts', 0, 'next_attempt_at', ARGV[7],
  'headers', ARGV[8], 'body', ARGV[9])
redis.call('XADD', KEYS[3], '*', 'id', ARGV[1])
redis.call('ZADD', KEYS[4], 0, ARGV[1])
redis.call('ZADD', KEYS[5], 0, ARGV[1])
return {0, ARGV[1]}
"#;

pub struct RedisStore {
    /// Multiplexed connections, used round robin.
    conns: Vec<ConnectionManager>,
    next: AtomicUsize,
    prefix: String,
    timeout: Duration,
    accept: redis::Script,
    /// Sources already recorded in `<prefix>:sources` by this process.
    known_sources: Mutex<BTreeSet<String>>,
}

impl RedisStore {
    pub async fn open(cfg: &RedisConfig) -> Result<RedisStore, StoreError> {
        let client = redis::Client::open(cfg.url.as_str())?;
        let mgr_cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(cfg.timeout))
            .set_response_timeout(Some(cfg.timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        let mut conns = Vec::with_capacity(cfg.connections);
        for _ in 0..cfg.connections.max(1) {
            let conn = tokio::time::timeout(
                cfg.timeout * 2,
                ConnectionManager::new_with_config(client.clone(), mgr_cfg.clone()),
            )
            .await
            .map_err(|_| StoreError::Timeout(cfg.timeout * 2))??;
            conns.push(conn);
        }
        let store = RedisStore {
            conns,
            next: AtomicUsize::new(0),
            prefix: cfg.prefix.clone(),
            timeout: cfg.timeout,
            accept: redis::Script::new(ACCEPT),
            known_sources: Mutex::new(BTreeSet::new()),
        };
        store.check_persistence().await;
        Ok(store)
    }

    /// Warn when Redis is not configured to make acknowledged writes durable.
    async fn check_persistence(&self) {
        let mut c = self.conn();
        let got: Result<HashMap<String, String>, _> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("append*")
            .query_async(&mut c)
            .await;
        match got {
            Ok(map) => {
                let aof = map.get("appendonly").map(String::as_str);
                let fsync = map.get("appendfsync").map(String::as_str);
                if aof != Some("yes") || fsync != Some("always") {
                    tracing::warn!(
                        appendonly = aof.unwrap_or("?"),
                        appendfsync = fsync.unwrap_or("?"),
                        "redis is not running with appendonly yes + appendfsync always: \
                         a 2xx does not guarantee the entry survives a Redis crash"
                    );
                }
            }
            Err(e) => tracing::info!(error = %e, "cannot read the redis persistence settings"),
        }
    }

    fn conn(&self) -> ConnectionManager {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        self.conns[i].clone()
    }

    fn key(&self, source: &str, rest: &str) -> String {
        format!("{}:{{{}}}:{}", self.prefix, source, rest)
    }

    fn status_key(&self, source: &str, status: Status) -> String {
        self.key(source, &format!("st:{}", status.as_str()))
    }

    async fn timed<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, redis::RedisError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(r) => r.map_err(StoreError::from),
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }

    async fn remember_source(&self, source: &str) -> Result<(), StoreError> {
        let known = self
            .known_sources
            .lock()
            .map(|k| k.contains(source))
            .unwrap_or(false);
        if known {
            return Ok(());
        }
        let mut c = self.conn();
        let key = format!("{}:sources", self.prefix);
        self.timed(c.sadd::<_, _, ()>(key, source)).await?;
        if let Ok(mut k) = self.known_sources.lock() {
            k.insert(source.to_string());
        }
        Ok(())
    }

    async fn sources(&self) -> Result<Vec<String>, StoreError> {
        let mut c = self.conn();
        let key = format!("{}:sources", self.prefix);
        let mut v: Vec<String> = self.timed(c.smembers(key)).await?;
        v.sort();
        Ok(v)
    }

    async fn load(&self, source: &str, id: &str) -> Result<Option<Entry>, StoreError> {
        let mut c = self.conn();
        let map: HashMap<String, Vec<u8>> = self
            .timed(c.hgetall(self.key(source, &format!("e:{id}"))))
            .await?;
        if map.is_empty() {
            return Ok(None);
        }
        entry_from_map(id, map).map(Some)
    }

    /// Up to `n` ids of one source, newest first, strictly older than `cursor`.
    async fn ids_page(
        &self,
        source: &str,
        status: Option<Status>,
        cursor: Option<&str>,
        n: usize,
    ) -> Result<Vec<String>, StoreError> {
        let key = match status {
            Some(s) => self.status_key(source, s),
            None => self.key(source, "idx"),
        };
        let max = match cursor {
            Some(c) => format!("({c}"),
            None => "+".to_string(),
        };
        let mut c = self.conn();
        self.timed(
            redis::cmd("ZREVRANGEBYLEX")
                .arg(key)
                .arg(max)
                .arg("-")
                .arg("LIMIT")
                .arg(0)
                .arg(n)
                .query_async(&mut c),
        )
        .await
    }
}

fn field_str(map: &HashMap<String, Vec<u8>>, name: &str) -> Option<String> {
    map.get(name)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

fn entry_from_map(id: &str, mut map: HashMap<String, Vec<u8>>) -> Result<Entry, StoreError> {
    let corrupt = |problem: String| StoreError::Corrupt {
        id: id.to_string(),
        problem,
    };
    let int = |map: &HashMap<String, Vec<u8>>, name: &str| -> Result<Option<i64>, StoreError> {
        match field_str(map, name) {
            None => Ok(None),
            Some(s) if s.is_empty() => Ok(None),
            Some(s) => s
                .parse()
                .map(Some)
                .map_err(|_| corrupt(format!("{name} is not an integer"))),
        }
    };
    let status_text = field_str(&map, "status").unwrap_or_default();
    let status = Status::parse(&status_text)
        .ok_or_else(|| corrupt(format!("unknown status {status_text:?}")))?;
    let non_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
    Ok(Entry {
        id: id.to_string(),
        source: field_str(&map, "source").ok_or_else(|| corrupt("no source".into()))?,
        event_id: non_empty(field_str(&map, "event_id")),
        event_type: non_empty(field_str(&map, "event_type")),
        dedupe_key: field_str(&map, "dedupe_key").unwrap_or_default(),
        received_at: int(&map, "received_at")?.unwrap_or(0),
        status,
        attempts: u32::try_from(int(&map, "attempts")?.unwrap_or(0)).unwrap_or(0),
        next_attempt_at: int(&map, "next_attempt_at")?,
        last_error: non_empty(field_str(&map, "last_error")),
        headers: decode_headers(
            id,
            &field_str(&map, "headers").unwrap_or_else(|| "[]".into()),
        )?,
        body: Bytes::from(map.remove("body").unwrap_or_default()),
    })
}

#[async_trait]
impl Store for RedisStore {
    async fn accept(&self, e: NewEntry) -> Result<Accepted, StoreError> {
        self.remember_source(&e.source).await?;
        let ttl_ms = u64::try_from(e.dedupe_ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut inv = self.accept.prepare_invoke();
        inv.key(self.key(&e.source, &format!("d:{}", e.dedupe_key)))
            .key(self.key(&e.source, &format!("e:{}", e.id)))
            .key(self.key(&e.source, "work"))
            .key(self.key(&e.source, "idx"))
            .key(self.status_key(&e.source, Status::Pending))
            .arg(&e.id)
            .arg(ttl_ms)
            .arg(&e.source)
            .arg(e.event_id.as_deref().unwrap_or(""))
            .arg(e.event_type.as_deref().unwrap_or(""))
            .arg(&e.dedupe_key)
            .arg(e.received_at)
            .arg(encode_headers(&e.headers))
            .arg(e.body.as_ref());
        let mut c = self.conn();
        let (dup, id): (i64, String) = self.timed(inv.invoke_async(&mut c)).await?;
        Ok(if dup == 1 {
            Accepted::Duplicate(id)
        } else {
            Accepted::New(id)
        })
    }

    async fn get(&self, id: &str) -> Result<Option<Entry>, StoreError> {
        if id.is_empty() || id.len() > 64 {
            return Ok(None);
        }
        for source in self.sources().await? {
            if let Some(e) = self.load(&source, id).await? {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    async fn list(&self, q: &ListQuery) -> Result<Page, StoreError> {
        let limit = q.limit.clamp(1, MAX_PAGE);
        let sources = match &q.source {
            Some(s) => vec![s.clone()],
            None => self.sources().await?,
        };
        // Merge the newest `limit + 1` ids of every source.
        let mut ids: Vec<(String, String)> = Vec::new();
        for s in &sources {
            for id in self
                .ids_page(s, q.status, q.cursor.as_deref(), limit + 1)
                .await?
            {
                ids.push((id, s.clone()));
            }
        }
        ids.sort_by(|a, b| b.0.cmp(&a.0));
        let more = ids.len() > limit;
        ids.truncate(limit);
        let mut entries = Vec::with_capacity(ids.len());
        for (id, source) in &ids {
            // An id whose hash is gone (purged between the two reads) is skipped.
            if let Some(e) = self.load(source, id).await? {
                entries.push(e);
            }
        }
        Ok(Page {
            next_cursor: if more {
                ids.last().map(|(id, _)| id.clone())
            } else {
                None
            },
            entries,
        })
    }

    async fn count(&self, source: &str) -> Result<u64, StoreError> {
        let mut c = self.conn();
        self.timed(c.zcard(self.key(source, "idx"))).await
    }

    async fn set_paused(&self, source: &str, paused: bool) -> Result<(), StoreError> {
        let mut c = self.conn();
        let key = format!("{}:paused", self.prefix);
        if paused {
            self.timed(c.sadd::<_, _, ()>(key, source)).await
        } else {
            self.timed(c.srem::<_, _, ()>(key, source)).await
        }
    }

    async fn paused_sources(&self) -> Result<Vec<String>, StoreError> {
        let mut c = self.conn();
        let mut v: Vec<String> = self
            .timed(c.smembers(format!("{}:paused", self.prefix)))
            .await?;
        v.sort();
        Ok(v)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let mut c = self.conn();
        let _: String = self.timed(redis::cmd("PING").query_async(&mut c)).await?;
        Ok(())
    }

    async fn close(&self) {}
}
