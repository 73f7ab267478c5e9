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
//! | `hg:{src}:e:<id>` | hash | the entry: `record`, the fields written once (source, event id and type, dedupe key, received at, headers as one JSON line, then the raw body: see `codec`); `routes`, its route names in order, comma-separated (empty: filtered); `status`, derived from its deliveries, and `updated_at`, when it reached it; `origin`, how it came (`store::Origin`; absent: received); per route R its delivery: `R:status`, `R:next`, `R:attempts`, `R:lease` and `R:lease_until` (the lease's token and end), `R:msg` (its work-stream message), `R:budget_start`, `R:budget_attempts`, `R:last_error`, `R:last_failure` (the failure kind of its last failed attempt), and once dead `R:dead_at`. Absent means the default: pending, due at the arrival, counters 0, `budget_start` the arrival. |
//! | `hg:{src}:d:<dedupe key>` | string, `PX` = dedupe TTL | the id of the first entry with that key |
//! | `hg:{src}:work:<route>` | stream, group `workers` | one message per delivery through the route to make (the forwarder's queue) |
//! | `hg:{src}:sched:<route>` | sorted set, score = due time (ms) | deliveries through the route waiting for a retry; a half-open breaker's probe leases one there, scored at its lease end (see `delivery`) |
//! | `hg:{src}:st:<status>` | sorted set, all scores 0 | entry ids by entry status (filtered included), in lexical (= arrival) order; listing every status merges them |
//! | `hg:{src}:line:<route>:<key>` | sorted set, all scores 0 | an ordered route's deliveries of one ordering key still waiting, in arrival (id) order (see `scripts/prelude.lua`) |
//! | `hg:{src}:lhead:<route>:<key>` | string | the entry id of that line's head: the one delivery of the key scheduled, in flight, or dead and blocking |
//! | `hg:{src}:blocked:<route>` | set | the ordering keys whose head is dead with `on_dead = "block"` |
//! | `hg:{src}:rst:<route>:<status>` | sorted set, all scores 0 | entry ids by the status of their delivery through the route: route listings, route stats |
//! | `hg:{src}:a:<id>` | list of JSON | the entry's delivery attempts, each naming its route |
//! | `hg:{src}:audit:<id>` | list of JSON | operator actions on the entry (replay, discard), each naming the route it named, if any, and reconciliation's (`recovered`) |
//! | `hg:{src}:stats` | hash | counters: received, duplicates, unverified |
//! | `hg:{src}:dlq` | stream | one message per delivery that went dead (id, route, reason) |
//! | `hg:{src}:done:delivered`, `…:done:dead` | sorted set, score = when the entry reached its status | retention index: delivered and filtered entries, dead and discarded ones; an entry pending again leaves it |
//! | `hg:{src}:act:<day>` | hash, expires 29 days after its day | per-minute activity of the source (`store::activity`) on one UTC day (days since 1970): fields `r<minute>`, `d<minute>`, `f<minute>` (minutes since 1970) count received, delivered and failed |
//! | `hg:{src}:schema` | string | `2`: the source is in this layout (see `migrate`) |
//! | `hg:{src}:pace:<route>` | string, `PX` while it matters | the route's next send time in µs (GCRA; `scripts/pace.lua`; a destination's `Retry-After` pushes it: `scripts/hold.lua`) |
//! | `hg:{src}:armed_handshake` | hash `until`, `token_hash` | the source's armed secret handshake: until when (unix ms), and the SHA-256 of its one-time token (`store::secrets`) |
//! | `hg:{src}:secrets` | hash, id → JSON | the secrets established in the source's handshakes, by id (`store::secrets`) |
//! | `hg:{src}:reconcile` | hash `holder`, `until`, `state` | the source's reconciliation lease (who holds it, until when; both absent once released) and the state its holder kept last (`reconcile`) |
//! | `hg:sources` | set | every source name seen (for lookups by id) |
//! | `hg:epoch` | string | a random value; its disappearance means Redis lost its data |
//! | `hg:paused` | set | what is paused: `src` (a whole source) or `src/route` |
//! | `hg:control_audit` | list of JSON, newest first | pauses and resumes with their actor (the newest 1000) |
//! | `hg:{console}:session_revoked:<id>` | string, `PX` = until the session expires | a revoked console session (`id`: a hash of its nonce) |
//! | `hg:{console}:sessions_revoked_until` | string | unix ms: every console session issued until then is revoked ("log out every session") |
//! | `hg:{gateways}:seen` | sorted set, score = last heartbeat (ms, Redis's clock) | the gateways on the store, by id (`membership`) |
//! | `hg:{gateways}:info` | hash, id → JSON | each gateway's host, configuration version and start time |
//! | `hg:{gateways}:clock` | hash `last_beat`, `resumed_at` | the newest heartbeat, and when heartbeats resumed after a silence of them all |
//! | `hg:{gateways}:taken` | set | the gateways whose leases were taken over since their last heartbeat |
//! | `hg:config_salt` | string | the random salt of the configuration versions |
//! | `hg:{ranges}:<digest>` | hash `url`, `ranges`, `fetched_at` | a provider's last good address ranges, by a digest of the URL they came from (`allowlist`) |
//!
//! # Accept
//!
//! Dedupe and persist are one Lua script (`scripts/accept_many.lua`): for each
//! entry, if the dedupe key exists the script returns the original id and writes
//! nothing; otherwise it sets the dedupe key, writes the entry hash, appends one
//! message to the work stream of each of its routes, and adds it to the indexes.
//! There is no moment where the dedupe key exists without its entry. With
//! `appendfsync always`, Redis fsyncs the AOF before it answers, so the reply means
//! the entries are durable. Concurrent accepts of one source share one script call
//! (see `batch`). With `store.min_replicas`, the answer also waits until that many
//! replicas acknowledged the script's writes (`WAIT`, see `replicas`). An entry costs Redis `3 + 2 × routes` commands (`SET NX`, `HSET`,
//! `ZADD st:pending`, and per route `XADD` and `ZADD rst:<route>:pending`).
//!
//! # Deliveries
//!
//! Every script that changes a delivery derives the entry's status again and moves
//! it between the entry indexes in the same call (`scripts/prelude.lua`), so an
//! entry's status, its indexes and its deliveries never disagree. A store written
//! before routes is migrated at open (`migrate`).
//!
//! # The rest
//!
//! Claims and completions: `delivery`. Listings: `listing`. Reconciliation's
//! lookups, origins and leases: `reconcile`. The connection (one
//! Redis or a cluster): `conn`. What Redis must guarantee: `preconditions`. Every
//! multi-key change is a script of its own (`scripts`). redis crate types never
//! leave this folder.

/// The entry codec, for the `stored` fuzz target.
#[cfg(any(test, fuzzing))]
pub(crate) use codec::pack_record;
mod batch;
mod codec;
mod conn;
mod controls;
mod delivery;
mod housekeeping;
mod listing;
mod membership;
mod migrate;
mod preconditions;
mod reconcile;
mod rejections;
mod replicas;
mod scripts;
mod search;
mod transition;
mod views;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use redis::AsyncCommands;

use self::batch::Batchers;
pub(crate) use self::codec::entry_from_map;
use self::conn::{Conn, timed};
use self::delivery::paused_member;
use self::scripts::Scripts;
use self::transition::{Action, audit_event};
use super::{
    Accepted, Actor, Attempt, AuditEvent, Claim, Completion, Control, ControlEvent, Controls,
    DeadLetter, Entry, GatewayInfo, Heartbeat, HeartbeatAck, HousekeepingPass, IdPage, IndexLookup,
    Lifecycle, ListQuery, Membership, MinuteActivity, NewEntry, Origin, Pacing, Page, PauseTarget,
    Purged, Queue, Reads, ReconcileLease, Reconciling, Records, RejectionBatch, RejectionCount,
    RejectionPage, RejectionQuery, Rejections, RouteStats, Search, SourceStats, Status, StoreError,
    TakeOver, Transition, WorkSignals,
};
use crate::config::RedisConfig;

pub struct RedisStore {
    /// Multiplexed connections, used round robin.
    conns: Vec<Conn>,
    next: Arc<AtomicUsize>,
    /// The connections accepts go out on, round robin: `conns` themselves, or with
    /// `min_replicas` connections of their own, since each accept's `WAIT` holds its
    /// connection (see `replicas`).
    accept_conns: Vec<Conn>,
    accept_next: Arc<AtomicUsize>,
    /// `store.min_replicas`: replicas each accept waits for; 0: no `WAIT`.
    min_replicas: u32,
    /// One accept batcher per source, started on its first accept.
    batchers: Batchers,
    prefix: String,
    timeout: Duration,
    scripts: Scripts,
    /// Sources already recorded in `<prefix>:sources` by this process.
    known_sources: Mutex<BTreeSet<String>>,
    /// The (source, route) pairs this process claimed from: housekeeping recreates
    /// their consumer groups.
    claimed_routes: Mutex<BTreeSet<(String, String)>>,
    /// `maxmemory-policy` and AOF, as last checked (see `preconditions`).
    preconditions: preconditions::Preconditions,
    /// The `hg:epoch` value this process saw last.
    epoch: Mutex<String>,
    /// Moved when this process stores new work, per route.
    work: Arc<WorkSignals>,
    /// Pauses and discards made through this store.
    controls: Controls,
    /// The dead gateways whose stream messages this process handed over (see
    /// `membership`).
    taken_over: Mutex<BTreeSet<String>>,
}

/// The key `rest` of `source`: `<prefix>:{<source>}:<rest>`.
fn key(prefix: &str, source: &str, rest: &str) -> String {
    format!("{prefix}:{{{source}}}:{rest}")
}

impl RedisStore {
    pub async fn open(cfg: &RedisConfig) -> Result<RedisStore, StoreError> {
        crate::tls::install_provider();
        let conns = conn::connect(cfg).await?;
        let major = match conns.first() {
            Some(c) => conn::major_version(c, cfg.timeout).await?,
            None => 0,
        };
        let next = Arc::new(AtomicUsize::new(0));
        let (accept_conns, accept_next) = if cfg.min_replicas > 0 {
            (conn::connect(cfg).await?, Arc::new(AtomicUsize::new(0)))
        } else {
            (conns.clone(), next.clone())
        };
        let store = RedisStore {
            conns,
            next,
            accept_conns,
            accept_next,
            min_replicas: cfg.min_replicas,
            batchers: Mutex::new(HashMap::new()),
            prefix: cfg.prefix.clone(),
            timeout: cfg.timeout,
            scripts: Scripts::load(major >= 7),
            known_sources: Mutex::new(BTreeSet::new()),
            claimed_routes: Mutex::new(BTreeSet::new()),
            preconditions: preconditions::Preconditions::default(),
            epoch: Mutex::new(String::new()),
            work: Arc::new(WorkSignals::default()),
            controls: Controls::new(),
            taken_over: Mutex::new(BTreeSet::new()),
        };
        store
            .check_preconditions(preconditions::Phase::Open)
            .await?;
        store.check_epoch().await?;
        store.migrate().await?;
        Ok(store)
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
        key(&self.prefix, source, rest)
    }

    fn status_key(&self, source: &str, status: Status) -> String {
        self.key(source, &format!("st:{}", status.as_str()))
    }

    /// A key of one route of `source`: `<kind>:<route>` (`work`, `sched`).
    fn route_key(&self, source: &str, kind: &str, route: &str) -> String {
        self.key(source, &format!("{kind}:{route}"))
    }

    /// The index of the deliveries through `route` of `source` that have `status`.
    fn route_status_key(&self, source: &str, route: &str, status: Status) -> String {
        self.key(source, &format!("rst:{route}:{}", status.as_str()))
    }

    /// The id of the oldest entry in the lexical index `index` (ids sort by arrival).
    async fn oldest_in(&self, index: String) -> Result<Option<String>, StoreError> {
        let mut c = self.conn();
        let oldest: Vec<String> = self
            .timed(
                redis::cmd("ZRANGEBYLEX")
                    .arg(index)
                    .arg("-")
                    .arg("+")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(1)
                    .query_async(&mut c),
            )
            .await?;
        Ok(oldest.into_iter().next())
    }

    /// When the entry `id` of `source` arrived, unless it is gone.
    async fn received_at(
        &self,
        source: &str,
        id: Option<String>,
    ) -> Result<Option<i64>, StoreError> {
        let Some(id) = id else {
            return Ok(None);
        };
        Ok(self
            .listed(source, std::slice::from_ref(&id), None)
            .await?
            .into_iter()
            .flatten()
            .next()
            .map(|e| e.received_at))
    }

    async fn timed<T>(
        &self,
        call: impl Future<Output = Result<T, redis::RedisError>>,
    ) -> Result<T, StoreError> {
        timed(self.timeout, call).await
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
        // Registered by this layout: the migration at open has nothing to do for it.
        // (Two commands: on a cluster the two keys live in different slots.)
        let mut c = self.conn();
        let _: Option<String> = self
            .timed(
                redis::cmd("SET")
                    .arg(self.key(source, "schema"))
                    .arg(migrate::SCHEMA)
                    .arg("NX")
                    .query_async(&mut c),
            )
            .await?;
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
}

/// What a member of `hg:paused` pauses: `src` a whole source, `src/route` one of its
/// routes (source names hold no `/`).
fn pause_target(member: String) -> PauseTarget {
    match member.split_once('/') {
        Some((source, route)) => PauseTarget {
            source: source.to_string(),
            route: Some(route.to_string()),
        },
        None => PauseTarget {
            source: member,
            route: None,
        },
    }
}

#[async_trait]
impl Queue for RedisStore {
    async fn accept(&self, e: NewEntry) -> Result<Accepted, StoreError> {
        self.remember_source(&e.source).await?;
        self.accept_batched(e).await
    }

    async fn set_paused(
        &self,
        source: &str,
        route: Option<&str>,
        paused: bool,
    ) -> Result<(), StoreError> {
        let mut c = self.conn();
        let key = format!("{}:paused", self.prefix);
        let member = paused_member(source, route);
        if paused {
            self.timed(c.sadd::<_, _, ()>(key, member)).await?;
        } else {
            self.timed(c.srem::<_, _, ()>(key, member)).await?;
        }
        self.controls.send(Control::Paused {
            route: route.map(str::to_string),
            source: source.to_string(),
            paused,
        });
        Ok(())
    }

    async fn paused(&self) -> Result<Vec<PauseTarget>, StoreError> {
        let mut c = self.conn();
        let members: Vec<String> = self
            .timed(c.smembers(format!("{}:paused", self.prefix)))
            .await?;
        let mut targets: Vec<PauseTarget> = members.into_iter().map(pause_target).collect();
        targets.sort();
        Ok(targets)
    }

    async fn order_line(
        &self,
        source: &str,
        route: &str,
        key: &str,
    ) -> Result<Vec<String>, StoreError> {
        let mut c = self.conn();
        let line = self.key(source, &format!("line:{route}:{key}"));
        self.timed(c.zrange(line, 0, -1)).await
    }

    async fn claim(
        &self,
        source: &str,
        route: &str,
        worker: &str,
        now: i64,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        self.claim_deliveries(source, route, worker, now, limit, lease)
            .await
    }

    async fn claim_probe(
        &self,
        source: &str,
        route: &str,
        worker: &str,
        now: i64,
        lease: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        self.claim_probe_delivery(source, route, worker, now, lease)
            .await
    }

    async fn complete(
        &self,
        claim: &Claim,
        _worker: &str,
        completion: Completion,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.complete_claim(claim, completion, now).await
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
            for (done, cutoff) in [
                ("done:delivered", delivered_before),
                ("done:dead", dead_before),
            ] {
                let mut inv = self.scripts.purge.prepare_invoke();
                inv.key(self.key(&source, done))
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

    fn work_signal(&self, source: &str, route: &str) -> tokio::sync::watch::Receiver<u64> {
        self.work.subscribe(source, route)
    }

    fn controls(&self) -> tokio::sync::broadcast::Receiver<Control> {
        self.controls.subscribe()
    }

    async fn housekeeping(
        &self,
        _pass: HousekeepingPass,
        sources: &[String],
    ) -> Result<(), StoreError> {
        self.maintenance_pass(sources).await
    }

    async fn replay(
        &self,
        id: &str,
        route: Option<&str>,
        at: i64,
        by: &Actor,
        now: i64,
    ) -> Result<Transition, StoreError> {
        let audit = audit_event(Action::Replay, by, None, route, now);
        let (t, _) = self.transition(id, Action::Replay, at, &audit).await?;
        Ok(t)
    }

    async fn discard(
        &self,
        id: &str,
        route: Option<&str>,
        by: &Actor,
        note: &str,
        now: i64,
    ) -> Result<Transition, StoreError> {
        let audit = audit_event(Action::Discard, by, Some(note), route, now);
        let (t, routes) = self.transition(id, Action::Discard, now, &audit).await?;
        for route in routes {
            self.controls.send(Control::Discarded {
                id: id.to_string(),
                route,
            });
        }
        Ok(t)
    }
}

#[async_trait]
impl Reads for RedisStore {
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
        self.list_page(q).await
    }

    async fn list_ids(&self, q: &ListQuery) -> Result<IdPage, StoreError> {
        self.list_id_page(q).await
    }

    async fn count(&self, source: &str) -> Result<u64, StoreError> {
        let mut total = 0;
        for status in Status::ALL {
            total += self.count_status(source, status).await?;
        }
        Ok(total)
    }

    async fn route_stats(&self, source: &str, route: &str) -> Result<RouteStats, StoreError> {
        let mut c = self.conn();
        let mut pipe = redis::pipe();
        for status in [
            Status::Pending,
            Status::Delivered,
            Status::Dead,
            Status::Discarded,
        ] {
            pipe.zcard(self.route_status_key(source, route, status));
        }
        pipe.scard(self.route_key(source, "blocked", route));
        let (pending, delivered, dead, discarded, blocked_keys): (u64, u64, u64, u64, u64) =
            self.timed(pipe.query_async(&mut c)).await?;
        let oldest = self
            .oldest_in(self.route_status_key(source, route, Status::Pending))
            .await?;
        Ok(RouteStats {
            pending,
            delivered,
            dead,
            discarded,
            oldest_pending_at: self.received_at(source, oldest).await?,
            blocked_keys,
        })
    }

    async fn attempts(&self, id: &str) -> Result<Vec<Attempt>, StoreError> {
        let Some(source) = self.source_of(id).await? else {
            return Ok(Vec::new());
        };
        let mut out: Vec<Attempt> = self.json_list(&source, &format!("a:{id}")).await?;
        out.sort_by(|a, b| (a.at, &a.route, a.n).cmp(&(b.at, &b.route, b.n)));
        Ok(out)
    }

    async fn count_status(&self, source: &str, status: Status) -> Result<u64, StoreError> {
        let mut c = self.conn();
        self.timed(c.zcard(self.status_key(source, status))).await
    }

    async fn audit(&self, id: &str) -> Result<Vec<AuditEvent>, StoreError> {
        let Some(source) = self.source_of(id).await? else {
            return Ok(Vec::new());
        };
        self.json_list(&source, &format!("audit:{id}")).await
    }

    async fn dead_letters(
        &self,
        source: &str,
        route: &str,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.read_dead_letters(source, route, limit).await
    }

    async fn activity(
        &self,
        source: &str,
        since: i64,
        until: i64,
    ) -> Result<Vec<MinuteActivity>, StoreError> {
        self.read_activity(source, since, until).await
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
        let mut stats = SourceStats {
            received: counters.get("received").copied().unwrap_or(0),
            duplicates: counters.get("duplicates").copied().unwrap_or(0),
            unverified: counters.get("unverified").copied().unwrap_or(0),
            ..Default::default()
        };
        stats.pending = self.count_status(source, Status::Pending).await?;
        stats.delivered = self.count_status(source, Status::Delivered).await?;
        stats.dead = self.count_status(source, Status::Dead).await?;
        stats.discarded = self.count_status(source, Status::Discarded).await?;
        stats.filtered = self.count_status(source, Status::Filtered).await?;
        let oldest = self
            .oldest_in(self.status_key(source, Status::Pending))
            .await?;
        stats.oldest_pending_at = self.received_at(source, oldest).await?;
        Ok(stats)
    }
}

#[async_trait]
impl Search for RedisStore {
    async fn indexed(&self, lookup: &IndexLookup) -> Result<Vec<String>, StoreError> {
        self.index_lookup(lookup).await
    }

    async fn sizes(&self, keys: &[(String, String)]) -> Result<Vec<u64>, StoreError> {
        self.record_sizes(keys).await
    }

    async fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<Entry>, StoreError> {
        self.load_many(keys).await
    }
}

#[async_trait]
impl Rejections for RedisStore {
    async fn record_rejections(&self, batch: &RejectionBatch) -> Result<(), StoreError> {
        self.keep_rejections(batch).await
    }

    async fn rejections(&self, query: &RejectionQuery) -> Result<RejectionPage, StoreError> {
        self.list_rejections(query).await
    }

    async fn rejection_counts(&self, since: i64) -> Result<Vec<RejectionCount>, StoreError> {
        self.count_rejections(since).await
    }

    async fn purge_rejections(&self, before: i64) -> Result<u64, StoreError> {
        self.purge_rejected(before).await
    }
}

#[async_trait]
impl Records for RedisStore {
    async fn record_control(&self, event: &ControlEvent) -> Result<(), StoreError> {
        self.push_control(event).await
    }

    async fn control_audit(&self, limit: usize) -> Result<Vec<ControlEvent>, StoreError> {
        self.read_controls(limit).await
    }

    async fn revoke_session(&self, id: &str, expires_at: i64, now: i64) -> Result<(), StoreError> {
        self.revoke(id, expires_at, now).await
    }

    async fn revoke_sessions_until(&self, at: i64) -> Result<(), StoreError> {
        self.revoke_until(at).await
    }

    async fn session_revoked(&self, id: &str, issued_at: i64) -> Result<bool, StoreError> {
        self.is_revoked(id, issued_at).await
    }

    async fn save_ranges(
        &self,
        url: &str,
        ranges: &crate::store::SavedRanges,
    ) -> Result<(), StoreError> {
        self.put_ranges(url, ranges).await
    }

    async fn saved_ranges(
        &self,
        url: &str,
    ) -> Result<Option<crate::store::SavedRanges>, StoreError> {
        self.get_ranges(url).await
    }

    async fn known_routes(&self) -> Result<Vec<crate::store::KnownRoute>, StoreError> {
        self.get_known_routes().await
    }

    async fn remember_routes(&self, routes: &[crate::store::KnownRoute]) -> Result<(), StoreError> {
        self.put_known_routes(routes).await
    }

    async fn forget_route(&self, source: &str, route: &str) -> Result<(), StoreError> {
        self.drop_known_route(source, route).await
    }

    async fn arm_handshake(
        &self,
        source: &str,
        until: i64,
        token: &crate::store::TokenHash,
    ) -> Result<(), StoreError> {
        self.put_handshake(source, until, token).await
    }

    async fn handshake_armed(&self, source: &str, now: i64) -> Result<Option<i64>, StoreError> {
        self.get_handshake(source, now).await
    }

    async fn establish_secret(
        &self,
        source: &str,
        secret: &crate::store::EstablishedSecret,
        token: &crate::store::TokenHash,
        now: i64,
    ) -> Result<crate::store::Establish, StoreError> {
        self.keep_secret(source, secret, token, now).await
    }

    async fn established_secrets(
        &self,
        source: &str,
    ) -> Result<Vec<crate::store::EstablishedSecret>, StoreError> {
        self.read_secrets(source).await
    }

    async fn forget_secret(&self, source: &str, id: &str) -> Result<bool, StoreError> {
        self.drop_secret(source, id).await
    }
}

#[async_trait]
impl Membership for RedisStore {
    async fn heartbeat(&self, beat: &Heartbeat) -> Result<HeartbeatAck, StoreError> {
        self.beat(beat).await
    }

    async fn gateways(&self) -> Result<Vec<GatewayInfo>, StoreError> {
        self.list_gateways().await
    }

    async fn take_over_dead(&self, by: &str) -> Result<TakeOver, StoreError> {
        self.take_over(by).await
    }

    async fn config_salt(&self) -> Result<[u8; 32], StoreError> {
        self.salt().await
    }
}

#[async_trait]
impl Pacing for RedisStore {
    async fn take_send_slot(
        &self,
        source: &str,
        route: &str,
        now: i64,
        spacing: Duration,
        burst: u32,
    ) -> Result<Option<i64>, StoreError> {
        let mut inv = self.scripts.pace.prepare_invoke();
        inv.key(self.key(source, &format!("pace:{route}")))
            .arg(now.saturating_mul(1000))
            .arg(i64::try_from(spacing.as_micros()).unwrap_or(i64::MAX))
            .arg(burst);
        let mut c = self.conn();
        let at: i64 = self.timed(inv.invoke_async(&mut c)).await?;
        Ok((at >= 0).then(|| crate::store::pace::ceil_ms(at)))
    }

    async fn hold_send_slots(
        &self,
        source: &str,
        route: &str,
        now: i64,
        until: i64,
        spacing: Duration,
        burst: u32,
    ) -> Result<(), StoreError> {
        let mut inv = self.scripts.hold.prepare_invoke();
        inv.key(self.key(source, &format!("pace:{route}")))
            .arg(now.saturating_mul(1000))
            .arg(until.saturating_mul(1000))
            .arg(i64::try_from(spacing.as_micros()).unwrap_or(i64::MAX))
            .arg(burst);
        let mut c = self.conn();
        let _: i64 = self.timed(inv.invoke_async(&mut c)).await?;
        Ok(())
    }
}

#[async_trait]
impl Reconciling for RedisStore {
    async fn dedupe_lookup(
        &self,
        source: &str,
        keys: &[String],
        _now: i64,
    ) -> Result<Vec<Option<String>>, StoreError> {
        super::reconcile::check_lookup(keys)?;
        self.lookup_dedupe(source, keys).await
    }

    async fn mark_origin(
        &self,
        id: &str,
        origin: Origin,
        note: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.set_origin(id, origin, note, now).await
    }

    async fn lease_reconcile(
        &self,
        source: &str,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<ReconcileLease, StoreError> {
        self.take_reconcile_lease(source, holder, now, until).await
    }

    async fn save_reconcile(
        &self,
        source: &str,
        holder: &str,
        state: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        super::reconcile::check_state(state)?;
        self.keep_reconcile_state(source, holder, state, now).await
    }

    async fn release_reconcile(&self, source: &str, holder: &str) -> Result<(), StoreError> {
        self.end_reconcile_lease(source, holder).await
    }
}

#[async_trait]
impl Lifecycle for RedisStore {
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
        // Every accept would wait for replicas in vain (`replicas`).
        if self.min_replicas > 0 {
            let (node, online) = replicas::fewest_online(&self.conn(), self.timeout).await?;
            if online < self.min_replicas {
                return Err(StoreError::ReplicasMissing {
                    node,
                    wanted: self.min_replicas,
                    online,
                });
            }
        }
        Ok(())
    }

    async fn close(&self) {}
}
