//! The accept batcher: concurrent accepts of one source share one script call.
//!
//! A batcher per source (started on the source's first accept) keeps at most one
//! accept script call in flight per connection; whatever arrives meanwhile goes out
//! together in the next call: one round trip, and under `appendfsync always` one
//! fsync, for the lot. The caller's task packs the entry first, so the batcher only
//! moves bytes.
//!
//! With `store.min_replicas`, the script call carries a `WAIT` in the same pipeline,
//! so one `WAIT` covers the whole batch: every entry of it is answered 2xx only once
//! that many replicas acknowledged the script's writes, or 503 with
//! [`StoreError::TooFewReplicas`] (`replicas` says why the count is right for each).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use super::codec::{origin_field, pack_record, routes_field};
use super::conn::Conn;
use super::{RedisStore, key, replicas};
use crate::store::{Accepted, Backend, NewEntry, StoreError, Wake, WorkSignals, valid_route_name};

/// Most entries one accept script carries.
const ACCEPT_BATCH_MAX: usize = 64;

/// Accepts one source's batcher may have queued.
const ACCEPT_QUEUE: usize = 4096;

/// The batchers of a store, one per source, by source.
pub(super) type Batchers = Mutex<HashMap<String, mpsc::Sender<AcceptJob>>>;

/// The accept script's answer: per entry, (duplicate 0 or 1, id).
type ScriptAnswers = Vec<(i64, String)>;

/// One entry on its way to its source's batcher: what the accept script needs, the
/// write-once fields already packed by the caller's task.
pub(super) struct AcceptJob {
    id: String,
    dedupe_key: String,
    ttl_ms: u64,
    received_at: i64,
    packed: Vec<u8>,
    /// The routes, comma-separated (empty: filtered).
    routes: String,
    /// The origin's name, empty when received (the default, not written).
    origin: &'static str,
    /// The ordered routes the entry has a key for: (route, key, block).
    ordering: Vec<(String, String, bool)>,
    /// The indexed values: (index name, index text).
    index: Vec<(String, String)>,
    /// When the caller gives up (`store.timeout` after it handed the entry over): a
    /// batch's `WAIT` for replicas ends before its earliest caller's.
    deadline: Instant,
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
    work: Arc<WorkSignals>,
    /// Replicas each batch waits for (`WAIT`); 0: none.
    min_replicas: u32,
}

impl RedisStore {
    /// Hand the entry to its source's batcher and wait for the script's answer.
    pub(super) async fn accept_batched(&self, e: NewEntry) -> Result<Accepted, StoreError> {
        let deadline = Instant::now() + self.timeout;
        let sender = {
            let mut batchers = self
                .batchers
                .lock()
                .map_err(|_| StoreError::Unavailable("batcher lock poisoned"))?;
            batchers
                .entry(e.source.clone())
                .or_insert_with(|| {
                    let (tx, rx) = mpsc::channel(ACCEPT_QUEUE);
                    let ctx = AcceptContext {
                        conns: self.accept_conns.clone(),
                        next: self.accept_next.clone(),
                        prefix: self.prefix.clone(),
                        timeout: self.timeout,
                        script: self.scripts.accept_many.clone(),
                        work: self.work.clone(),
                        min_replicas: self.min_replicas,
                    };
                    tokio::spawn(ctx.run(e.source.clone(), rx));
                    tx
                })
                .clone()
        };
        if let Some(bad) = e.routes.iter().find(|r| !valid_route_name(r)) {
            return Err(StoreError::Corrupt {
                id: e.id.clone(),
                problem: format!("route name {bad:?} is not valid"),
            });
        }
        let (reply, rx) = oneshot::channel();
        let job = AcceptJob {
            packed: pack_record(&e)?,
            routes: routes_field(&e.routes),
            origin: origin_field(e.origin),
            ordering: e
                .ordering
                .iter()
                .map(|o| (o.route.clone(), o.key.clone(), o.block))
                .collect(),
            index: e
                .index
                .iter()
                .map(|v| (v.name.clone(), v.value.clone()))
                .collect(),
            ttl_ms: u64::try_from(e.dedupe_ttl.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
            received_at: e.received_at,
            id: e.id,
            dedupe_key: e.dedupe_key,
            deadline,
            reply,
        };
        let wait = async move {
            sender
                .send(job)
                .await
                .map_err(|_| StoreError::Unavailable("accept batcher stopped"))?;
            rx.await
                .map_err(|_| StoreError::Unavailable("accept batcher dropped the entry"))?
        };
        // Queueing plus the script call, within `store.timeout` in all: the answer
        // (200 or 503) must come in time, whatever Redis or the network does.
        match tokio::time::timeout_at(deadline, wait).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }
}

impl AcceptContext {
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

    async fn accept_batch(&self, source: &str, mut batch: Vec<AcceptJob>) {
        // A caller that gave up (it answered 503 at its deadline) does not get its
        // entry stored behind its back; the provider's retry stores it.
        batch.retain(|job| !job.reply.is_closed());
        if batch.is_empty() {
            return;
        }
        let mut inv = self.script.prepare_invoke();
        inv.key(key(&self.prefix, source, "st:pending"))
            .key(key(&self.prefix, source, "stats"))
            .key(key(&self.prefix, source, "st:filtered"))
            .key(key(&self.prefix, source, "done:delivered"))
            .arg(key(&self.prefix, source, ""));
        for job in &batch {
            inv.key(key(&self.prefix, source, &format!("d:{}", job.dedupe_key)))
                .key(key(&self.prefix, source, &format!("e:{}", job.id)))
                .arg(&job.id)
                .arg(job.ttl_ms)
                .arg(job.received_at)
                .arg(&job.packed)
                .arg(&job.routes)
                .arg(job.origin)
                .arg(job.ordering.len());
            for (route, key, block) in &job.ordering {
                inv.arg(route).arg(key).arg(if *block { "1" } else { "0" });
            }
            inv.arg(job.index.len());
            for (name, value) in &job.index {
                inv.arg(name).arg(value);
            }
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len().max(1);
        let mut c = self.conns[i].clone();
        let call = async {
            if self.min_replicas == 0 {
                return inv.invoke_async(&mut c).await.map(|a| (a, None));
            }
            // `WAIT` ends before the batch's earliest caller gives up.
            let deadline = batch.iter().map(|job| job.deadline).min();
            let deadline = deadline.unwrap_or_else(|| Instant::now() + self.timeout);
            let waited =
                replicas::invoke_and_wait(&inv, &mut c, self.min_replicas, deadline, self.timeout)
                    .await?;
            // No answer only with too few replicas: every entry is refused below.
            Ok((waited.answer.unwrap_or_default(), Some(waited.acknowledged)))
        };
        // Redis's error is shared by every entry of the batch: one cause, many answers.
        let result: Result<(ScriptAnswers, Option<u32>), redis::RedisError> =
            match tokio::time::timeout(self.timeout, call).await {
                Ok(r) => r,
                Err(_) => {
                    for job in batch {
                        let _ = job.reply.send(Err(StoreError::Timeout(self.timeout)));
                    }
                    return;
                }
            };
        match result {
            // Too few replicas hold the writes: no 2xx. The entries may be stored
            // on the master all the same (and are delivered); the provider's retry
            // is answered `duplicate` once replicas acknowledge.
            Ok((_, Some(acknowledged))) if acknowledged < self.min_replicas => {
                for job in batch {
                    let _ = job.reply.send(Err(StoreError::TooFewReplicas {
                        wanted: self.min_replicas,
                        acknowledged,
                    }));
                }
            }
            Ok((answers, _)) if answers.len() == batch.len() => {
                // The routes the new entries went to (a duplicate's were woken
                // when it was new).
                let mut routes: Vec<String> = batch
                    .iter()
                    .zip(&answers)
                    .filter(|(_, (dup, _))| *dup == 0)
                    .flat_map(|(job, _)| job.routes.split(',').filter(|r| !r.is_empty()))
                    .map(str::to_string)
                    .collect();
                routes.sort_unstable();
                routes.dedup();
                if !routes.is_empty() {
                    self.work.wake(&Wake::Routes {
                        source: source.to_string(),
                        routes,
                    });
                }
                for (job, (dup, id)) in batch.into_iter().zip(answers) {
                    let _ = job.reply.send(Ok(if dup == 1 {
                        Accepted::Duplicate(id)
                    } else {
                        Accepted::New(id)
                    }));
                }
            }
            Ok((answers, _)) => {
                let problem = format!(
                    "accept script answered {} results for {} entries",
                    answers.len(),
                    batch.len()
                );
                for job in batch {
                    let _ = job
                        .reply
                        .send(Err(StoreError::backend(Backend::Redis, problem.clone())));
                }
            }
            Err(e) => {
                let cause = Arc::new(e);
                for job in batch {
                    let _ = job
                        .reply
                        .send(Err(StoreError::backend(Backend::Redis, cause.clone())));
                }
            }
        }
    }
}
