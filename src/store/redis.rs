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
//! | `hg:{src}:e:<id>` | hash | the entry: `d`, the fields written once (source, event id and type, dedupe key, received at, headers as one JSON line, then the raw body); the fields that change (status, next attempt, attempts, lease, …; counters start absent = 0, `budget_start` absent = `received_at`). |
//! | `hg:{src}:d:<dedupe key>` | string, `PX` = dedupe TTL | the id of the first entry with that key |
//! | `hg:{src}:work` | stream | one message per entry to deliver (the forwarder's queue) |
//! | `hg:{src}:st:<status>` | sorted set, all scores 0 | entry ids by status, in lexical (= arrival) order; listing every status merges the four |
//! | `hg:{src}:sched` | sorted set, score = due time (ms) | entries waiting for a retry |
//! | `hg:{src}:a:<id>` | list of JSON | the entry's delivery attempts |
//! | `hg:{src}:audit:<id>` | list of JSON | operator actions on the entry (replay, discard) |
//! | `hg:{src}:stats` | hash | counters: received, duplicates, unverified |
//! | `hg:{src}:dlq` | stream | one message per entry that went dead (id, reason) |
//! | `hg:{src}:done:delivered`, `…:done:dead` | sorted set, score = completion time | retention index |
//! | `hg:sources` | set | every source name seen (for lookups by id) |
//! | `hg:epoch` | string | a random value; its disappearance means Redis lost its data |
//! | `hg:paused` | set | sources whose delivery is paused |
//!
//! # Accept
//!
//! Dedupe and persist are one Lua script (`ACCEPT_MANY`): for each entry, if the
//! dedupe key exists the script returns the original id and writes nothing; otherwise
//! it sets the dedupe key, writes the entry hash, appends to the work stream and the
//! indexes. There is no moment where the dedupe key exists without its entry. With
//! `appendfsync always`, Redis fsyncs the AOF before it answers, so the reply means
//! the entries are durable.
//!
//! Concurrent accepts of one source are batched: a batcher per source keeps at most
//! one script call in flight per connection, and whatever arrives meanwhile goes out
//! together in the next call (one round trip and one fsync for the lot).
//!
//! # Delivery
//!
//! The work stream has one consumer group (`workers`); every gateway process is a
//! consumer. A claim first moves due retries from `sched` to the stream (`PROMOTE`,
//! atomic), then takes messages whose lease expired from other consumers
//! (`XAUTOCLAIM` with the lease as minimum idle time: a crashed worker's entries are
//! delivered again), then new messages (`XREADGROUP >`). `COMPLETE` records the
//! attempt, acknowledges and deletes the message, and either schedules the retry, or
//! marks the entry delivered or dead (appending to the DLQ stream), in one script.
//! If Redis lost the group (it restarted empty), `NOGROUP` is answered by recreating
//! it; the loss itself is detected through `hg:epoch` and logged at ERROR.
//!
//! # Connections
//!
//! The ingest path uses a few multiplexed connections (`store.connections`, round
//! robin) rather than a pool: under `appendfsync always` Redis fsyncs once per event
//! loop pass, so several connections let one fsync cover many requests. Each
//! connection reconnects by itself when Redis comes back. redis crate types never
//! leave this file.

mod preconditions;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{
    Accepted, Attempt, AuditEvent, Claim, Completion, Entry, IdPage, ListQuery, ListedEntry,
    MAX_PAGE, NewEntry, Page, Purged, SourceStats, Status, Store, StoreError, Transition,
    decode_headers, headers_json,
};
use crate::config::RedisConfig;

/// Accept a batch of entries of one source. KEYS: work, st:pending, stats, then per
/// entry: dedupe key, entry key. ARGV: per entry: id, ttl ms, received at, the
/// packed write-once record (`pack_record`). Returns per entry
/// `{duplicate (0|1), id}`. Entries are taken in order, so a batch holding the same
/// event twice stores it once. Fields whose value is their default (`attempts`,
/// `budget_attempts`: 0; `budget_start`: `received_at`) are not written: every
/// webhook costs Redis (and its AOF) only what it must.
const ACCEPT_MANY: &str = r#"
local n = (#KEYS - 3) / 2
local out = {}
local new, dups = 0, 0
for i = 0, n - 1 do
  local dk, ek, a = KEYS[4 + 2 * i], KEYS[5 + 2 * i], 4 * i
  -- SET NX answers nil when the key is there: only a duplicate pays for the GET.
  if not redis.call('SET', dk, ARGV[a + 1], 'NX', 'PX', ARGV[a + 2]) then
    dups = dups + 1
    out[#out + 1] = {1, redis.call('GET', dk)}
  else
    local mid = redis.call('XADD', KEYS[1], '*', 'id', ARGV[a + 1])
    redis.call('HSET', ek, 'd', ARGV[a + 4], 'status', 'pending',
      'next_attempt_at', ARGV[a + 3], 'msg', mid)
    redis.call('ZADD', KEYS[2], 0, ARGV[a + 1])
    new = new + 1
    out[#out + 1] = {0, ARGV[a + 1]}
  end
end
if new > 0 then redis.call('HINCRBY', KEYS[3], 'received', new) end
if dups > 0 then redis.call('HINCRBY', KEYS[3], 'duplicates', dups) end
return out
"#;

/// Most entries one accept script carries.
const ACCEPT_BATCH_MAX: usize = 64;

/// One entry on its way to its source's batcher: what the accept script needs, the
/// write-once fields already packed by the caller's task.
struct AcceptJob {
    id: String,
    dedupe_key: String,
    ttl_ms: u64,
    received_at: i64,
    packed: Vec<u8>,
    reply: oneshot::Sender<Result<Accepted, StoreError>>,
}

/// What a per-source accept batcher needs (cheap clones of the store's parts).
#[derive(Clone)]
struct AcceptContext {
    conns: Vec<Conn>,
    next: Arc<AtomicUsize>,
    prefix: String,
    timeout: Duration,
    script: redis::Script,
    work_tx: Arc<tokio::sync::watch::Sender<u64>>,
}

impl AcceptContext {
    fn key(&self, source: &str, rest: &str) -> String {
        format!("{}:{{{}}}:{}", self.prefix, source, rest)
    }

    /// Collect the accepts of one source into batches: while every connection has a
    /// batch in flight, new accepts queue up and go out together in the next script
    /// call (one round trip, and under `appendfsync always` one fsync).
    async fn run(self, source: String, mut rx: mpsc::Receiver<AcceptJob>) {
        let permits = Arc::new(Semaphore::new(self.conns.len().max(1)));
        loop {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let Some(first) = rx.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < ACCEPT_BATCH_MAX {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            let ctx = self.clone();
            let source = source.clone();
            tokio::spawn(async move {
                ctx.accept_batch(&source, batch).await;
                drop(permit);
            });
        }
    }

    async fn accept_batch(&self, source: &str, batch: Vec<AcceptJob>) {
        let mut inv = self.script.prepare_invoke();
        inv.key(self.key(source, "work"))
            .key(self.key(source, "st:pending"))
            .key(self.key(source, "stats"));
        for job in &batch {
            inv.key(self.key(source, &format!("d:{}", job.dedupe_key)))
                .key(self.key(source, &format!("e:{}", job.id)))
                .arg(&job.id)
                .arg(job.ttl_ms)
                .arg(job.received_at)
                .arg(&job.packed);
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len().max(1);
        let mut c = self.conns[i].clone();
        let result: Result<Vec<(i64, String)>, StoreError> =
            match tokio::time::timeout(self.timeout, inv.invoke_async(&mut c)).await {
                Ok(r) => r.map_err(StoreError::from),
                Err(_) => Err(StoreError::Timeout(self.timeout)),
            };
        match result {
            Ok(answers) if answers.len() == batch.len() => {
                if answers.iter().any(|(dup, _)| *dup == 0) {
                    self.work_tx.send_modify(|n| *n = n.wrapping_add(1));
                }
                for (job, (dup, id)) in batch.into_iter().zip(answers) {
                    let _ = job.reply.send(Ok(if dup == 1 {
                        Accepted::Duplicate(id)
                    } else {
                        Accepted::New(id)
                    }));
                }
            }
            Ok(answers) => {
                let msg = format!(
                    "accept script answered {} results for {} entries",
                    answers.len(),
                    batch.len()
                );
                for job in batch {
                    let _ = job.reply.send(Err(StoreError::Unavailable(msg.clone())));
                }
            }
            Err(e) => {
                let msg = e.to_string();
                let timeout = matches!(e, StoreError::Timeout(_));
                for job in batch {
                    let _ = job.reply.send(Err(if timeout {
                        StoreError::Timeout(self.timeout)
                    } else {
                        StoreError::Unavailable(msg.clone())
                    }));
                }
            }
        }
    }
}

/// KEYS: sched, work. ARGV: now, limit, key base (`hg:{src}:`). The entry keys are
/// derived from the base and share the source's hash tag.
const PROMOTE: &str = r#"
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local ek = ARGV[3] .. 'e:' .. id
  if redis.call('HGET', ek, 'status') == 'pending' then
    local mid = redis.call('XADD', KEYS[2], '*', 'id', id)
    redis.call('HSET', ek, 'msg', mid)
  end
end
return #ids
"#;

/// Take the lease of a claimed stream message. KEYS: entry. ARGV: message id, token.
/// Returns the entry, or nil when the message no longer stands for pending work
/// (the entry ended, was purged, or a newer message replaced this one). An empty
/// `msg` means no message stands for it: it waits in `sched` (a retry, a release, a
/// replay) until `PROMOTE` gives it one. Entries written before `msg` existed have
/// none and take any message.
const LEASE: &str = r#"
local st = redis.call('HMGET', KEYS[1], 'status', 'msg')
if st[1] ~= 'pending' then return false end
if st[2] and st[2] ~= ARGV[1] then return false end
redis.call('HSET', KEYS[1], 'lease', ARGV[2])
return redis.call('HGETALL', KEYS[1])
"#;

/// KEYS: entry, work, sched, attempts, st:pending, st:<new>, done zset, dlq.
/// ARGV: msg id, group, new status, next_at, attempt JSON, last_error, now, entry id,
/// reason, lease token.
/// Only the holder of the current lease completes (returns 1). Anything else returns
/// 0 and changes nothing the current holder relies on (so a retried call after a lost
/// reply is harmless): a message claimed again by another worker after this lease
/// expired stays in its pending list, so that it is reclaimed should that worker die
/// too. A message that no longer stands for work (the entry ended, or a replay gave
/// it a newer message) is acknowledged and deleted, so the stream never leaks it;
/// an attempt that ran while the entry was discarded is recorded, and the status
/// stays discarded.
const COMPLETE: &str = r#"
local st = redis.call('HMGET', KEYS[1], 'status', 'lease', 'msg')
if st[1] ~= 'pending' or st[2] ~= ARGV[10] then
  if st[1] == 'pending' and st[3] == ARGV[1] then
    return 0
  end
  redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
  redis.call('XDEL', KEYS[2], ARGV[1])
  if st[1] == 'discarded' and st[2] == ARGV[10] then
    redis.call('HSET', KEYS[1], 'lease', '')
    if ARGV[5] ~= '' then
      redis.call('RPUSH', KEYS[4], ARGV[5])
      redis.call('HINCRBY', KEYS[1], 'attempts', 1)
    end
  end
  return 0
end
redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
redis.call('XDEL', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'lease', '', 'msg', '')
if ARGV[5] ~= '' then
  redis.call('RPUSH', KEYS[4], ARGV[5])
  redis.call('HINCRBY', KEYS[1], 'attempts', 1)
end
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'last_error', ARGV[6]) end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'next_attempt_at', ARGV[4], 'updated_at', ARGV[7])
if ARGV[3] == 'pending' then
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[8])
else
  redis.call('ZREM', KEYS[5], ARGV[8])
  redis.call('ZADD', KEYS[6], 0, ARGV[8])
  redis.call('ZADD', KEYS[7], ARGV[7], ARGV[8])
  if ARGV[3] == 'dead' then
    redis.call('XADD', KEYS[8], '*', 'id', ARGV[8], 'reason', ARGV[9])
  end
end
return 1
"#;

/// KEYS: done zset, st a, st b. ARGV: cutoff, limit, key base (`hg:{src}:`).
/// The per-entry keys are derived from the base; they share the source's hash tag.
const PURGE: &str = r#"
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  redis.call('DEL', ARGV[3] .. 'e:' .. id, ARGV[3] .. 'a:' .. id, ARGV[3] .. 'audit:' .. id)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end
return #ids
"#;

/// Status transitions by operators. KEYS: entry, st:pending, st:delivered, st:dead,
/// st:discarded, sched, done:delivered, done:dead, audit.
/// ARGV: action (replay|discard), entry id, at, now, audit JSON.
const TRANSITION: &str = r#"
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {0, ''} end
local action = ARGV[1]
if action == 'replay' and status == 'pending' then return {2, status} end
if action == 'discard' and status ~= 'pending' and status ~= 'dead' then return {2, status} end
local st = {pending = KEYS[2], delivered = KEYS[3], dead = KEYS[4], discarded = KEYS[5]}
redis.call('ZREM', st[status], ARGV[2])
if action == 'replay' then
  local attempts = redis.call('HGET', KEYS[1], 'attempts') or '0'
  redis.call('HSET', KEYS[1], 'status', 'pending', 'next_attempt_at', ARGV[3],
    'budget_start', ARGV[4], 'budget_attempts', attempts, 'updated_at', ARGV[4],
    'lease', '', 'msg', '')
  redis.call('ZADD', KEYS[2], 0, ARGV[2])
  redis.call('ZREM', KEYS[7], ARGV[2])
  redis.call('ZREM', KEYS[8], ARGV[2])
  redis.call('ZADD', KEYS[6], ARGV[3], ARGV[2])
else
  -- The lease stays: a worker delivering it right now records its attempt (COMPLETE).
  redis.call('HSET', KEYS[1], 'status', 'discarded', 'next_attempt_at', '', 'updated_at', ARGV[4])
  redis.call('ZADD', KEYS[5], 0, ARGV[2])
  redis.call('ZREM', KEYS[6], ARGV[2])
  redis.call('ZADD', KEYS[8], ARGV[4], ARGV[2])
end
redis.call('RPUSH', KEYS[9], ARGV[5])
return {1, status}
"#;

/// What a listing shows of entries (no headers, no body). KEYS: entry keys of one
/// source. Returns per key `false` (gone) or `{status, attempts, next_attempt_at,
/// last_error, event_id, event_type, received_at}`, all text ('' when absent).
/// The event id and type of a packed entry sit in the metadata line of `d`, in front
/// of the body; a hash field cannot be read in part, so the script takes `d` and
/// returns only what it needs from that line: the body costs Redis a copy inside
/// the script, never the network or the gateway's memory. (Keeping the summary in a
/// field of its own would cost every accept, the hot path, instead.)
const LISTED: &str = r#"
local function text(v)
  if type(v) == 'string' then return v end
  if type(v) == 'number' then return string.format('%.0f', v) end
  return ''
end
local out = {}
for i, k in ipairs(KEYS) do
  local f = redis.call('HMGET', k, 'status', 'attempts', 'next_attempt_at', 'last_error')
  if not f[1] then
    out[i] = false
  else
    local eid, etype, at
    local d = redis.call('HGET', k, 'd')
    local nl = d and string.find(d, '\n', 1, true)
    if nl then
      local ok, meta = pcall(cjson.decode, string.sub(d, 1, nl - 1))
      if ok and type(meta) == 'table' then
        eid, etype, at = meta.event_id, meta.event_type, meta.received_at
      end
    end
    d = nil
    out[i] = {f[1], text(f[2]), text(f[3]), text(f[4]), text(eid), text(etype), text(at)}
  end
end
return out
"#;

/// Most entries one `LISTED` call reads (each may copy a body inside Redis).
const LISTED_BATCH: usize = 100;

/// The consumer group every gateway process joins.
const GROUP: &str = "workers";

/// A connection to one Redis or to a Redis Cluster. Both are multiplexed and
/// reconnect by themselves; the cluster one routes each command (and each script, by
/// its first key) to the node owning the slot.
#[derive(Clone)]
enum Conn {
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

pub struct RedisStore {
    /// Multiplexed connections, used round robin.
    conns: Vec<Conn>,
    next: Arc<AtomicUsize>,
    /// One accept batcher per source, started on its first accept.
    batchers: Mutex<HashMap<String, mpsc::Sender<AcceptJob>>>,
    prefix: String,
    timeout: Duration,
    accept_many: redis::Script,
    /// Sources already recorded in `<prefix>:sources` by this process.
    known_sources: Mutex<BTreeSet<String>>,
    promote: redis::Script,
    lease: redis::Script,
    complete: redis::Script,
    purge: redis::Script,
    transition: redis::Script,
    listed: redis::Script,
    /// `maxmemory-policy` and AOF, as last checked (see `preconditions`).
    preconditions: preconditions::Preconditions,
    /// The `hg:epoch` value this process saw last.
    epoch: Mutex<String>,
    work_tx: Arc<tokio::sync::watch::Sender<u64>>,
    work_rx: tokio::sync::watch::Receiver<u64>,
    /// Pauses and discards made through this store.
    controls: super::Controls,
}

impl RedisStore {
    pub async fn open(cfg: &RedisConfig) -> Result<RedisStore, StoreError> {
        crate::tls::install_provider();
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
        let (work_tx, work_rx) = tokio::sync::watch::channel(0u64);
        let store = RedisStore {
            conns,
            next: Arc::new(AtomicUsize::new(0)),
            batchers: Mutex::new(HashMap::new()),
            prefix: cfg.prefix.clone(),
            timeout: cfg.timeout,
            accept_many: redis::Script::new(ACCEPT_MANY),
            known_sources: Mutex::new(BTreeSet::new()),
            promote: redis::Script::new(PROMOTE),
            lease: redis::Script::new(LEASE),
            complete: redis::Script::new(COMPLETE),
            purge: redis::Script::new(PURGE),
            transition: redis::Script::new(TRANSITION),
            listed: redis::Script::new(LISTED),
            preconditions: preconditions::Preconditions::default(),
            epoch: Mutex::new(String::new()),
            work_tx: Arc::new(work_tx),
            work_rx,
            controls: super::Controls::new(),
        };
        store
            .check_preconditions(preconditions::Phase::Open)
            .await?;
        store.check_epoch().await?;
        Ok(store)
    }

    /// Check `maxmemory-policy` and AOF on every master (see `preconditions`).
    async fn check_preconditions(&self, phase: preconditions::Phase) -> Result<(), StoreError> {
        self.preconditions
            .check(&self.conn(), self.timeout, phase)
            .await
    }

    /// Detect a Redis that lost its data: `hg:epoch` vanished or changed.
    async fn check_epoch(&self) -> Result<(), StoreError> {
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
            .map_err(|_| StoreError::Unavailable("epoch lock poisoned".into()))?;
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

    async fn ensure_group(&self, source: &str) -> Result<(), StoreError> {
        let mut c = self.conn();
        let r: Result<(), redis::RedisError> = self
            .timed(
                redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg(self.key(source, "work"))
                    .arg(GROUP)
                    .arg("0")
                    .arg("MKSTREAM")
                    .query_async(&mut c),
            )
            .await
            .map_err(|e| match e {
                StoreError::Redis(r) => r,
                other => redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "xgroup create",
                    other.to_string(),
                )),
            });
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Read claimable messages (expired leases first, then new ones).
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

    async fn transition(
        &self,
        id: &str,
        action: &str,
        at: i64,
        now: i64,
        audit: &AuditEvent,
    ) -> Result<Transition, StoreError> {
        let Some(src) = self.source_of(id).await? else {
            return Ok(Transition::NotFound);
        };
        let src = src.as_str();
        let audit_json =
            serde_json::to_string(audit).map_err(|e| StoreError::Invalid(format!("audit: {e}")))?;
        let mut inv = self.transition.prepare_invoke();
        inv.key(self.key(src, &format!("e:{id}")))
            .key(self.status_key(src, Status::Pending))
            .key(self.status_key(src, Status::Delivered))
            .key(self.status_key(src, Status::Dead))
            .key(self.status_key(src, Status::Discarded))
            .key(self.key(src, "sched"))
            .key(self.key(src, "done:delivered"))
            .key(self.key(src, "done:dead"))
            .key(self.key(src, &format!("audit:{id}")))
            .arg(action)
            .arg(id)
            .arg(at)
            .arg(now)
            .arg(audit_json);
        let mut c = self.conn();
        let (code, status): (i64, String) = self.timed(inv.invoke_async(&mut c)).await?;
        Ok(match code {
            1 => {
                if action == "replay" {
                    self.work_tx.send_modify(|n| *n = n.wrapping_add(1));
                }
                Transition::Done
            }
            2 => Transition::Conflict(Status::parse(&status).unwrap_or(Status::Pending)),
            _ => Transition::NotFound,
        })
    }

    /// Drop a stream message that no longer stands for pending work.
    async fn discard_message(&self, source: &str, msg: &str) -> Result<(), StoreError> {
        let mut c = self.conn();
        let work = self.key(source, "work");
        let mut pipe = redis::pipe();
        pipe.cmd("XACK").arg(&work).arg(GROUP).arg(msg).ignore();
        pipe.cmd("XDEL").arg(&work).arg(msg).ignore();
        self.timed(pipe.query_async::<()>(&mut c)).await
    }

    /// The JSON records of a list key of `source` (attempts, audit), oldest first;
    /// a record that does not parse is skipped.
    async fn json_list<T: serde::de::DeserializeOwned>(
        &self,
        source: &str,
        rest: &str,
    ) -> Result<Vec<T>, StoreError> {
        let mut c = self.conn();
        let raw: Vec<String> = self.timed(c.lrange(self.key(source, rest), 0, -1)).await?;
        Ok(raw
            .iter()
            .filter_map(|r| serde_json::from_str(r).ok())
            .collect())
    }

    fn conn(&self) -> Conn {
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

    /// The source an entry belongs to (its hash exists there), without reading it.
    async fn source_of(&self, id: &str) -> Result<Option<String>, StoreError> {
        if id.is_empty() || id.len() > 64 {
            return Ok(None);
        }
        for source in self.sources().await? {
            let mut c = self.conn();
            let exists: bool = self
                .timed(c.exists(self.key(&source, &format!("e:{id}"))))
                .await?;
            if exists {
                return Ok(Some(source));
            }
        }
        Ok(None)
    }

    /// The listed form of entries of one source (`None` where the entry is gone).
    async fn listed(
        &self,
        source: &str,
        ids: &[String],
    ) -> Result<Vec<Option<ListedEntry>>, StoreError> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(LISTED_BATCH) {
            let mut inv = self.listed.prepare_invoke();
            for id in chunk {
                inv.key(self.key(source, &format!("e:{id}")));
            }
            let mut c = self.conn();
            let rows: Vec<Option<Vec<String>>> = self.timed(inv.invoke_async(&mut c)).await?;
            if rows.len() != chunk.len() {
                return Err(StoreError::Unavailable(format!(
                    "listing script answered {} rows for {} entries",
                    rows.len(),
                    chunk.len()
                )));
            }
            for (id, row) in chunk.iter().zip(rows) {
                out.push(match row {
                    Some(fields) => Some(listed_from_fields(id, source, fields)?),
                    None => None,
                });
            }
        }
        Ok(out)
    }

    /// The listed form of `ids` (each with its source), in the same order.
    async fn listed_many(
        &self,
        ids: &[(String, String)],
    ) -> Result<Vec<Option<ListedEntry>>, StoreError> {
        let mut by_source: HashMap<&str, Vec<(usize, String)>> = HashMap::new();
        for (i, (id, source)) in ids.iter().enumerate() {
            by_source
                .entry(source.as_str())
                .or_default()
                .push((i, id.clone()));
        }
        let mut out: Vec<Option<ListedEntry>> = vec![None; ids.len()];
        for (source, items) in by_source {
            let just_ids: Vec<String> = items.iter().map(|(_, id)| id.clone()).collect();
            for ((i, _), listed) in items.iter().zip(self.listed(source, &just_ids).await?) {
                out[*i] = listed;
            }
        }
        Ok(out)
    }

    /// Up to `n` ids of one source, newest first, strictly older than `below` and
    /// not older than `floor`; without a status, the four status sets merged.
    async fn ids_page(
        &self,
        source: &str,
        status: Option<Status>,
        below: Option<&str>,
        floor: Option<&str>,
        n: usize,
    ) -> Result<Vec<String>, StoreError> {
        let statuses: Vec<Status> = match status {
            Some(s) => vec![s],
            None => Status::ALL.to_vec(),
        };
        let max = match below {
            Some(c) => format!("({c}"),
            None => "+".to_string(),
        };
        let min = match floor {
            Some(f) => format!("[{f}"),
            None => "-".to_string(),
        };
        let mut ids: Vec<String> = Vec::new();
        for status in statuses {
            let mut c = self.conn();
            let page: Vec<String> = self
                .timed(
                    redis::cmd("ZREVRANGEBYLEX")
                        .arg(self.status_key(source, status))
                        .arg(&max)
                        .arg(&min)
                        .arg("LIMIT")
                        .arg(0)
                        .arg(n)
                        .query_async(&mut c),
                )
                .await?;
            ids.extend(page);
        }
        // The newest `n` of the union are among the newest `n` of each set.
        ids.sort_by(|a, b| b.cmp(a));
        ids.dedup();
        ids.truncate(n);
        Ok(ids)
    }
}

fn field_str(map: &HashMap<String, Vec<u8>>, name: &str) -> Option<String> {
    map.get(name)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The fields of an entry that never change after its accept, as written.
#[derive(serde::Serialize)]
struct RecordOut<'a> {
    source: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_type: Option<&'a str>,
    dedupe_key: &'a str,
    received_at: i64,
    headers: serde_json::Value,
}

/// The same, as read back (borrowing from the stored value).
#[derive(serde::Deserialize)]
struct RecordIn<'a> {
    #[serde(borrow)]
    source: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    event_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    event_type: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    dedupe_key: std::borrow::Cow<'a, str>,
    received_at: i64,
    #[serde(borrow)]
    headers: &'a serde_json::value::RawValue,
}

/// One value for everything written once (hash field `d`): a compact JSON line with
/// the metadata and headers (compact JSON never holds a raw newline), a newline, then
/// the body's raw bytes. One hash field instead of seven costs Redis, and its AOF,
/// measurably less per webhook.
fn pack_record(e: &NewEntry) -> Result<Vec<u8>, StoreError> {
    let record = RecordOut {
        source: &e.source,
        event_id: e.event_id.as_deref(),
        event_type: e.event_type.as_deref(),
        dedupe_key: &e.dedupe_key,
        received_at: e.received_at,
        headers: headers_json(&e.headers),
    };
    let mut out = Vec::with_capacity(e.body.len() + 512);
    serde_json::to_writer(&mut out, &record)
        .map_err(|err| StoreError::Unavailable(format!("cannot encode the entry: {err}")))?;
    out.push(b'\n');
    out.extend_from_slice(&e.body);
    Ok(out)
}

/// An entry whose write-once fields are packed in `d`; `map` holds the rest.
fn entry_from_packed(
    id: &str,
    packed: Vec<u8>,
    map: &HashMap<String, Vec<u8>>,
) -> Result<Entry, StoreError> {
    let corrupt = |problem: &str| StoreError::Corrupt {
        id: id.to_string(),
        problem: problem.to_string(),
    };
    let packed = Bytes::from(packed);
    let split = packed
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| corrupt("the packed record has no metadata line"))?;
    let record: RecordIn<'_> = serde_json::from_slice(&packed[..split])
        .map_err(|_| corrupt("the packed record's metadata is not valid JSON"))?;
    let non_empty =
        |s: Option<std::borrow::Cow<'_, str>>| s.map(|s| s.into_owned()).filter(|s| !s.is_empty());
    let mutable = Mutable::read(id, map)?;
    Ok(Entry {
        id: id.to_string(),
        source: record.source.into_owned(),
        event_id: non_empty(record.event_id),
        event_type: non_empty(record.event_type),
        dedupe_key: record.dedupe_key.into_owned(),
        received_at: record.received_at,
        status: mutable.status,
        attempts: mutable.attempts,
        next_attempt_at: mutable.next_attempt_at,
        last_error: mutable.last_error,
        budget_start: mutable.budget_start.unwrap_or(record.received_at),
        budget_attempts: mutable.budget_attempts,
        headers: decode_headers(id, record.headers.get())?,
        body: packed.slice(split + 1..),
    })
}

/// The fields of an entry hash that change after its accept.
struct Mutable {
    status: Status,
    attempts: u32,
    next_attempt_at: Option<i64>,
    last_error: Option<String>,
    budget_start: Option<i64>,
    budget_attempts: u32,
}

impl Mutable {
    fn read(id: &str, map: &HashMap<String, Vec<u8>>) -> Result<Mutable, StoreError> {
        let corrupt = |problem: String| StoreError::Corrupt {
            id: id.to_string(),
            problem,
        };
        let int = |name: &str| int_field(id, map, name);
        let status_text = field_str(map, "status").unwrap_or_default();
        let status = Status::parse(&status_text)
            .ok_or_else(|| corrupt(format!("unknown status {status_text:?}")))?;
        Ok(Mutable {
            status,
            attempts: u32::try_from(int("attempts")?.unwrap_or(0)).unwrap_or(0),
            next_attempt_at: int("next_attempt_at")?,
            last_error: field_str(map, "last_error").filter(|s| !s.is_empty()),
            budget_start: int("budget_start")?,
            budget_attempts: u32::try_from(int("budget_attempts")?.unwrap_or(0)).unwrap_or(0),
        })
    }
}

/// An integer hash field; absent or empty is `None`.
fn int_field(
    id: &str,
    map: &HashMap<String, Vec<u8>>,
    name: &str,
) -> Result<Option<i64>, StoreError> {
    match field_str(map, name) {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| StoreError::Corrupt {
            id: id.to_string(),
            problem: format!("{name} is not an integer"),
        }),
    }
}

/// A row of the `LISTED` script: status, attempts, next attempt, last error, event
/// id, event type, received at ('' when absent).
fn listed_from_fields(
    id: &str,
    source: &str,
    fields: Vec<String>,
) -> Result<ListedEntry, StoreError> {
    let corrupt = |problem: String| StoreError::Corrupt {
        id: id.to_string(),
        problem,
    };
    let [
        status,
        attempts,
        next_at,
        last_error,
        event_id,
        event_type,
        received_at,
    ]: [String; 7] = fields
        .try_into()
        .map_err(|f: Vec<String>| corrupt(format!("listing row of {} fields", f.len())))?;
    let int = |name: &str, v: &str| -> Result<Option<i64>, StoreError> {
        if v.is_empty() {
            return Ok(None);
        }
        v.parse()
            .map(Some)
            .map_err(|_| corrupt(format!("{name} is not an integer")))
    };
    let non_empty = |s: String| Some(s).filter(|s| !s.is_empty());
    Ok(ListedEntry {
        id: id.to_string(),
        source: source.to_string(),
        status: Status::parse(&status)
            .ok_or_else(|| corrupt(format!("unknown status {status:?}")))?,
        attempts: u32::try_from(int("attempts", &attempts)?.unwrap_or(0)).unwrap_or(0),
        next_attempt_at: int("next_attempt_at", &next_at)?,
        last_error: non_empty(last_error),
        event_id: non_empty(event_id),
        event_type: non_empty(event_type),
        received_at: int("received_at", &received_at)?
            .ok_or_else(|| corrupt("no received_at".into()))?,
    })
}

/// An entry hash as stored: the packed write-once record (`d`) and the fields that
/// change.
fn entry_from_map(id: &str, mut map: HashMap<String, Vec<u8>>) -> Result<Entry, StoreError> {
    match map.remove("d") {
        Some(packed) => entry_from_packed(id, packed, &map),
        None => Err(StoreError::Corrupt {
            id: id.to_string(),
            problem: "no packed record (field d)".into(),
        }),
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn accept(&self, e: NewEntry) -> Result<Accepted, StoreError> {
        self.remember_source(&e.source).await?;
        let sender = {
            let mut batchers = self
                .batchers
                .lock()
                .map_err(|_| StoreError::Unavailable("batcher lock poisoned".into()))?;
            batchers
                .entry(e.source.clone())
                .or_insert_with(|| {
                    let (tx, rx) = mpsc::channel(4096);
                    let ctx = AcceptContext {
                        conns: self.conns.clone(),
                        next: self.next.clone(),
                        prefix: self.prefix.clone(),
                        timeout: self.timeout,
                        script: self.accept_many.clone(),
                        work_tx: self.work_tx.clone(),
                    };
                    tokio::spawn(ctx.run(e.source.clone(), rx));
                    tx
                })
                .clone()
        };
        let (reply, rx) = oneshot::channel();
        let job = AcceptJob {
            packed: pack_record(&e)?,
            ttl_ms: u64::try_from(e.dedupe_ttl.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
            received_at: e.received_at,
            id: e.id,
            dedupe_key: e.dedupe_key,
            reply,
        };
        let wait = async move {
            sender
                .send(job)
                .await
                .map_err(|_| StoreError::Unavailable("accept batcher stopped".into()))?;
            rx.await
                .map_err(|_| StoreError::Unavailable("accept batcher dropped the entry".into()))?
        };
        // Queueing plus the script call; the call itself is bounded by `timeout`.
        match tokio::time::timeout(self.timeout * 2, wait).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(self.timeout * 2)),
        }
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
        let until = q.until.map(super::id_floor);
        let floor = q.since.map(super::id_floor);
        // The scan position: ids strictly below it are still to be looked at.
        let mut below: Option<String> = match (&q.cursor, &until) {
            (Some(c), Some(u)) => Some(c.min(u).clone()),
            (Some(c), None) => Some(c.clone()),
            (None, Some(u)) => Some(u.clone()),
            (None, None) => None,
        };
        let mut entries: Vec<ListedEntry> = Vec::new();
        let mut exhausted = false;
        // Filters that the indexes do not cover (event type) may need several rounds;
        // a bounded number of them, then the cursor says where to go on.
        for _ in 0..20 {
            let need = limit + 1 - entries.len();
            let mut ids: Vec<(String, String)> = Vec::new();
            for s in &sources {
                for id in self
                    .ids_page(s, q.status, below.as_deref(), floor.as_deref(), need)
                    .await?
                {
                    ids.push((id, s.clone()));
                }
            }
            ids.sort_by(|a, b| b.0.cmp(&a.0));
            // Every source gave fewer than asked: nothing older is left. (A full
            // batch says nothing: the next round looks further down.)
            if ids.len() < need {
                exhausted = true;
            }
            ids.truncate(need);
            // An id whose hash is gone (purged between the two reads) is skipped.
            for e in self.listed_many(&ids).await?.into_iter().flatten() {
                if q.event_type
                    .as_ref()
                    .is_none_or(|t| e.event_type.as_ref() == Some(t))
                {
                    entries.push(e);
                }
            }
            if let Some((last, _)) = ids.last() {
                below = Some(last.clone());
            }
            if exhausted || entries.len() > limit {
                break;
            }
        }
        let next_cursor = if entries.len() > limit {
            entries.truncate(limit);
            entries.last().map(|e| e.id.clone())
        } else if exhausted {
            None
        } else {
            below
        };
        Ok(Page {
            entries,
            next_cursor,
        })
    }

    async fn list_ids(&self, q: &ListQuery) -> Result<IdPage, StoreError> {
        if q.event_type.is_some() {
            // The event type is inside the entries: the listing reads it.
            let page = self.list(q).await?;
            return Ok(IdPage {
                ids: page.entries.into_iter().map(|e| e.id).collect(),
                next_cursor: page.next_cursor,
            });
        }
        // Everything else is in the status indexes: no entry is read.
        let limit = q.limit.clamp(1, MAX_PAGE);
        let sources = match &q.source {
            Some(s) => vec![s.clone()],
            None => self.sources().await?,
        };
        let until = q.until.map(super::id_floor);
        let floor = q.since.map(super::id_floor);
        let below: Option<String> = match (&q.cursor, &until) {
            (Some(c), Some(u)) => Some(c.min(u).clone()),
            (Some(c), None) => Some(c.clone()),
            (None, Some(u)) => Some(u.clone()),
            (None, None) => None,
        };
        let mut ids = Vec::new();
        for s in &sources {
            ids.extend(
                self.ids_page(s, q.status, below.as_deref(), floor.as_deref(), limit + 1)
                    .await?,
            );
        }
        ids.sort_by(|a, b| b.cmp(a));
        ids.dedup();
        let next_cursor = if ids.len() > limit {
            ids.truncate(limit);
            ids.last().cloned()
        } else {
            None
        };
        Ok(IdPage { ids, next_cursor })
    }

    async fn count(&self, source: &str) -> Result<u64, StoreError> {
        let mut total = 0;
        for status in Status::ALL {
            total += self.count_status(source, status).await?;
        }
        Ok(total)
    }

    async fn set_paused(&self, source: &str, paused: bool) -> Result<(), StoreError> {
        let mut c = self.conn();
        let key = format!("{}:paused", self.prefix);
        if paused {
            self.timed(c.sadd::<_, _, ()>(key, source)).await?;
        } else {
            self.timed(c.srem::<_, _, ()>(key, source)).await?;
        }
        self.controls.send(super::Control::Paused {
            source: source.to_string(),
            paused,
        });
        Ok(())
    }

    async fn paused_sources(&self) -> Result<Vec<String>, StoreError> {
        let mut c = self.conn();
        let mut v: Vec<String> = self
            .timed(c.smembers(format!("{}:paused", self.prefix)))
            .await?;
        v.sort();
        Ok(v)
    }

    async fn claim(
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
        let mut inv = self.promote.prepare_invoke();
        inv.key(self.key(source, "sched"))
            .key(self.key(source, "work"))
            .arg(now)
            .arg(1000)
            .arg(self.key(source, ""));
        let _: i64 = self.timed(inv.invoke_async(&mut c)).await?;
        let messages = match self
            .timed(async { Ok(self.read_messages(source, worker, limit, lease).await) })
            .await?
        {
            Ok(m) => m,
            Err(e) if e.code() == Some("NOGROUP") => {
                tracing::warn!(source, "redis consumer group missing; recreating it");
                self.ensure_group(source).await?;
                self.timed(self.read_messages(source, worker, limit, lease))
                    .await?
            }
            Err(e) => return Err(e.into()),
        };
        let mut claims = Vec::with_capacity(messages.len());
        for (msg, id) in messages {
            let token = uuid::Uuid::now_v7().simple().to_string();
            let mut inv = self.lease.prepare_invoke();
            inv.key(self.key(source, &format!("e:{id}")))
                .arg(&msg)
                .arg(&token);
            let mut c = self.conn();
            let map: Option<HashMap<String, Vec<u8>>> =
                self.timed(inv.invoke_async(&mut c)).await?;
            match map {
                Some(map) if !map.is_empty() => claims.push(Claim {
                    entry: entry_from_map(&id, map)?,
                    token,
                    message: msg,
                }),
                // Ended, purged or superseded meanwhile: the message is stale.
                _ => self.discard_message(source, &msg).await?,
            }
        }
        Ok(claims)
    }

    async fn complete(
        &self,
        claim: &Claim,
        _worker: &str,
        completion: Completion,
        now: i64,
    ) -> Result<bool, StoreError> {
        let e = &claim.entry;
        let source = e.source.as_str();
        let (status, next_at, attempt, last_error, reason) = match &completion {
            Completion::Delivered { attempt } => {
                (Status::Delivered, None, Some(attempt), None, String::new())
            }
            Completion::Retry { attempt, at } => (
                Status::Pending,
                Some(*at),
                Some(attempt),
                super::sqlite::attempt_error(attempt),
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
            Some(a) => serde_json::to_string(a)
                .map_err(|e| StoreError::Invalid(format!("attempt: {e}")))?,
            None => String::new(),
        };
        let mut inv = self.complete.prepare_invoke();
        inv.key(self.key(source, &format!("e:{}", e.id)))
            .key(self.key(source, "work"))
            .key(self.key(source, "sched"))
            .key(self.key(source, &format!("a:{}", e.id)))
            .key(self.status_key(source, Status::Pending))
            .key(self.status_key(source, status))
            .key(self.key(source, done))
            .key(self.key(source, "dlq"))
            .arg(&claim.message)
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

    async fn attempts(&self, id: &str) -> Result<Vec<Attempt>, StoreError> {
        let Some(source) = self.source_of(id).await? else {
            return Ok(Vec::new());
        };
        let mut out: Vec<Attempt> = self.json_list(&source, &format!("a:{id}")).await?;
        out.sort_by_key(|a| a.n);
        Ok(out)
    }

    async fn count_status(&self, source: &str, status: Status) -> Result<u64, StoreError> {
        let mut c = self.conn();
        self.timed(c.zcard(self.status_key(source, status))).await
    }

    async fn purge(
        &self,
        _now: i64,
        delivered_before: i64,
        dead_before: i64,
        limit: usize,
    ) -> Result<Purged, StoreError> {
        let mut purged = Purged::default();
        for source in self.sources().await? {
            let base = self.key(&source, "");
            for (done, cutoff, a, b) in [
                (
                    "done:delivered",
                    delivered_before,
                    Status::Delivered,
                    Status::Delivered,
                ),
                ("done:dead", dead_before, Status::Dead, Status::Discarded),
            ] {
                let mut inv = self.purge.prepare_invoke();
                inv.key(self.key(&source, done))
                    .key(self.status_key(&source, a))
                    .key(self.status_key(&source, b))
                    .arg(cutoff)
                    .arg(limit.max(1))
                    .arg(&base);
                let mut c = self.conn();
                let n: u64 = self.timed(inv.invoke_async(&mut c)).await?;
                purged.entries += n;
            }
            let mut c = self.conn();
            let _: i64 = self
                .timed(
                    redis::cmd("XTRIM")
                        .arg(self.key(&source, "dlq"))
                        .arg("MINID")
                        .arg(dead_before.max(0))
                        .query_async(&mut c),
                )
                .await?;
        }
        // Dedupe keys expire by themselves (PX).
        Ok(purged)
    }

    fn work_signal(&self) -> tokio::sync::watch::Receiver<u64> {
        self.work_rx.clone()
    }

    fn controls(&self) -> tokio::sync::broadcast::Receiver<super::Control> {
        self.controls.subscribe()
    }

    async fn maintain(&self, sources: &[String]) -> Result<(), StoreError> {
        self.check_preconditions(preconditions::Phase::Maintenance)
            .await?;
        self.check_epoch().await?;
        for s in sources {
            self.ensure_group(s).await?;
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

    async fn replay(
        &self,
        id: &str,
        at: i64,
        actor: &str,
        now: i64,
    ) -> Result<Transition, StoreError> {
        let audit = AuditEvent {
            at: now,
            action: "replay".into(),
            actor: actor.to_string(),
            note: None,
        };
        self.transition(id, "replay", at, now, &audit).await
    }

    async fn discard(
        &self,
        id: &str,
        actor: &str,
        note: &str,
        now: i64,
    ) -> Result<Transition, StoreError> {
        let audit = AuditEvent {
            at: now,
            action: "discard".into(),
            actor: actor.to_string(),
            note: Some(note.to_string()),
        };
        let t = self.transition(id, "discard", now, now, &audit).await?;
        if t == Transition::Done {
            self.controls
                .send(super::Control::Discarded { id: id.to_string() });
        }
        Ok(t)
    }

    async fn audit(&self, id: &str) -> Result<Vec<AuditEvent>, StoreError> {
        let Some(source) = self.source_of(id).await? else {
            return Ok(Vec::new());
        };
        self.json_list(&source, &format!("audit:{id}")).await
    }

    async fn record_unverified(&self, source: &str, n: u64) -> Result<(), StoreError> {
        let mut c = self.conn();
        self.timed(c.hincr::<_, _, _, ()>(self.key(source, "stats"), "unverified", n))
            .await
    }

    async fn stats(&self, source: &str) -> Result<SourceStats, StoreError> {
        let mut c = self.conn();
        let counters: HashMap<String, u64> =
            self.timed(c.hgetall(self.key(source, "stats"))).await?;
        let mut st = SourceStats {
            received: counters.get("received").copied().unwrap_or(0),
            duplicates: counters.get("duplicates").copied().unwrap_or(0),
            unverified: counters.get("unverified").copied().unwrap_or(0),
            ..Default::default()
        };
        st.pending = self.count_status(source, Status::Pending).await?;
        st.delivered = self.count_status(source, Status::Delivered).await?;
        st.dead = self.count_status(source, Status::Dead).await?;
        st.discarded = self.count_status(source, Status::Discarded).await?;
        let oldest: Vec<String> = self
            .timed(
                redis::cmd("ZRANGEBYLEX")
                    .arg(self.status_key(source, Status::Pending))
                    .arg("-")
                    .arg("+")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(1)
                    .query_async(&mut c),
            )
            .await?;
        if let Some(id) = oldest.first() {
            st.oldest_pending_at = self
                .listed(source, std::slice::from_ref(id))
                .await?
                .into_iter()
                .flatten()
                .next()
                .map(|e| e.received_at);
        }
        Ok(st)
    }

    async fn recover(&self) -> Result<(), StoreError> {
        // Several processes share the stream: a dead consumer's leases are taken over
        // by XAUTOCLAIM once they are older than the lease.
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        // Not ready while Redis may evict keys (see `preconditions`).
        self.preconditions.ensure()?;
        // A write, not a PING: a Redis that answers but refuses writes (read-only
        // replica, `min-replicas-to-write` unmet, out of memory) is not ready.
        let mut c = self.conn();
        let _: () = self
            .timed(
                redis::cmd("SET")
                    .arg(format!("{}:ready", self.prefix))
                    .arg(1)
                    .arg("PX")
                    .arg(60_000)
                    .query_async(&mut c),
            )
            .await?;
        Ok(())
    }

    async fn close(&self) {}
}
