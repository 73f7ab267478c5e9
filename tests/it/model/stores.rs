//! A fresh store for every history, on one server per test: the embedded store in
//! a directory of its own, a key prefix of its own on the test's private
//! redis-server, a schema of its own on the test's private PostgreSQL. Each store
//! reads the history's time from a clock the history moves, and the leases of a
//! history run out when it says so, not when the wall clock says: the embedded
//! and PostgreSQL stores compare a lease with the `now` of each call, and on Redis
//! a lease is its stream message's idle time, which the test sets past the lease
//! (`XCLAIM … IDLE`, the one way to move Redis's clock for one message).

use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use hookgate::clock::Clock;
use hookgate::store::{self, Store};

use super::ops::{ROUTES, SOURCES};
use super::reference::LEASE_MS;
use crate::support::{Backend, PostgresServer, RedisServer};

/// The consumer group of every Redis work stream (`store::redis::delivery::GROUP`).
const REDIS_GROUP: &str = "workers";

/// What a test keeps for all its histories: the backend, its server, and the
/// store of the next history, opened while the current one runs (opening costs
/// more than running a short history, on PostgreSQL most of all).
pub struct Server {
    pub backend: Backend,
    redis: Option<RedisServer>,
    postgres: Option<PostgresServer>,
    cases: AtomicU32,
    next: Mutex<Option<tokio::task::JoinHandle<CaseStore>>>,
    /// The closes of the stores of finished histories, which run behind the next
    /// history (the embedded store's close waits for its checkpointer's pass).
    closing: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// The store of one history, and the time it reads.
pub struct CaseStore {
    pub store: Arc<dyn Store>,
    now: Arc<AtomicI64>,
    /// The embedded store's directory.
    _dir: tempfile::TempDir,
    /// The Redis key prefix, and a connection of the test's own to age leases.
    redis: Option<(String, redis::aio::MultiplexedConnection)>,
}

impl Server {
    /// Start what `backend` needs for a whole test.
    pub fn start(backend: Backend) -> Server {
        let redis = match backend {
            Backend::Redis => Some(RedisServer::start()),
            Backend::Embedded | Backend::Postgres => None,
        };
        let postgres = match backend {
            Backend::Postgres => Some(PostgresServer::start_in(scratch(), &[])),
            Backend::Embedded | Backend::Redis => None,
        };
        Server {
            backend,
            redis,
            postgres,
            cases: AtomicU32::new(0),
            next: Mutex::new(None),
            closing: Mutex::new(Vec::new()),
        }
    }

    /// A store no earlier history touched, reading the time `now` holds; the
    /// store of the history after starts opening.
    pub async fn fresh(&self, now: i64) -> CaseStore {
        let ready = self.next.lock().expect("next").take();
        let case = match ready {
            Some(opening) => opening.await.expect("a store opens"),
            None => self.opening().await,
        };
        let next = tokio::spawn(self.opening());
        *self.next.lock().expect("next") = Some(next);
        case.set_now(now);
        case
    }

    /// The opening of a store no history touched: the `[store]` section is written
    /// now, the store opened when the future runs.
    fn opening(&self) -> impl Future<Output = CaseStore> + Send + 'static {
        let case = self.cases.fetch_add(1, Ordering::Relaxed);
        let dir = scratch_dir();
        let (section, prefix) = match self.backend {
            Backend::Embedded => (
                format!(
                    "kind = \"embedded\"\npath = \"{}\"\n",
                    dir.path().join("data").display()
                ),
                None,
            ),
            Backend::Redis => {
                let prefix = format!("m{case}");
                let url = self.redis.as_ref().expect("a redis-server").url();
                (
                    format!(
                        "kind = \"redis\"\nurl = \"{url}\"\nprefix = \"{prefix}\"\ntimeout = \"10s\"\n"
                    ),
                    Some((prefix, url)),
                )
            }
            Backend::Postgres => (
                format!(
                    "kind = \"postgres\"\nurl = \"{}\"\nprefix = \"{}\"\ntimeout = \"10s\"\n",
                    self.postgres.as_ref().expect("a PostgreSQL server").url(),
                    crate::support::fresh_schema()
                ),
                None,
            ),
        };
        async move {
            let cfg = hookgate::config::from_toml_str(&format!("[store]\n{section}"), &|_| None)
                .expect("store config");
            let time = Arc::new(AtomicI64::new(hookgate::clock::system_now_ms()));
            let read = time.clone();
            let clock = Clock::from_fn(move || read.load(Ordering::SeqCst));
            let store = store::open(&cfg.store, &clock).await.expect("open store");
            let redis = match prefix {
                Some((prefix, url)) => {
                    let conn = redis::Client::open(url)
                        .expect("redis url")
                        .get_multiplexed_async_connection()
                        .await
                        .expect("connect to redis");
                    Some((prefix, conn))
                }
                None => None,
            };
            CaseStore {
                store,
                now: time,
                _dir: dir,
                redis,
            }
        }
    }
}

/// Where the stores keep their files: in memory (`/dev/shm`) where there is such a
/// place. The model checks what a store answers, not what survives a crash (the
/// conformance and crash tests do), and an fsync on disk would make each
/// history's writes, and opening its store, cost several times what running it
/// does. (PostgreSQL still runs with `fsync` on, as the store requires.)
fn scratch() -> Option<&'static Path> {
    let shm = Path::new("/dev/shm");
    shm.is_dir().then_some(shm)
}

/// The embedded store's directory, in [`scratch`].
fn scratch_dir() -> tempfile::TempDir {
    match scratch() {
        Some(dir) => tempfile::tempdir_in(dir),
        None => tempfile::tempdir(),
    }
    .expect("tempdir")
}

impl Server {
    /// Close a history's store behind the next history.
    pub fn retire(&self, case: CaseStore) {
        let closing = tokio::spawn(case.close());
        self.closing.lock().expect("closing").push(closing);
    }

    /// Close the store opened for a next history, and wait for every store
    /// retired so far to be closed.
    pub async fn closed(&self) {
        let next = self.next.lock().expect("next").take();
        if let Some(opening) = next {
            opening.await.expect("a store opens").close().await;
        }
        let closing = std::mem::take(&mut *self.closing.lock().expect("closing"));
        for c in closing {
            c.await.expect("a store closes");
        }
    }
}

impl CaseStore {
    /// The time the store reads from now on.
    pub fn set_now(&self, now: i64) {
        self.now.store(now, Ordering::SeqCst);
    }

    /// Every lease taken so far has run out (the history's time moved past it): on
    /// Redis, every message in a work stream's pending list gets an idle time past
    /// the lease, as if that time had passed since its claim.
    pub async fn expire_leases(&mut self) -> Result<(), String> {
        let Some((prefix, conn)) = self.redis.as_mut() else {
            return Ok(());
        };
        for source in SOURCES {
            for route in ROUTES {
                let stream = format!("{prefix}:{{{source}}}:work:{route}");
                let pending: Vec<(String, String, u64, u64)> = match redis::cmd("XPENDING")
                    .arg(&stream)
                    .arg(REDIS_GROUP)
                    .arg("-")
                    .arg("+")
                    .arg(10_000)
                    .query_async(conn)
                    .await
                {
                    Ok(p) => p,
                    // No stream or no group yet: nothing claimed through it.
                    Err(e) if e.code() == Some("NOGROUP") => continue,
                    Err(e) => return Err(format!("XPENDING {stream}: {e}")),
                };
                for (id, consumer, _, _) in pending {
                    let _: Vec<String> = redis::cmd("XCLAIM")
                        .arg(&stream)
                        .arg(REDIS_GROUP)
                        .arg(&consumer)
                        .arg(0)
                        .arg(&id)
                        .arg("IDLE")
                        .arg(LEASE_MS + 1)
                        .arg("JUSTID")
                        .query_async(conn)
                        .await
                        .map_err(|e| format!("XCLAIM {stream} {id}: {e}"))?;
                }
            }
        }
        Ok(())
    }

    pub async fn close(self) {
        self.store.close().await;
    }
}
