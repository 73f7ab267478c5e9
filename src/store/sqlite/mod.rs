//! The embedded store: SQLite in WAL mode, one writer thread doing group commit.
//!
//! Every write goes to one writer thread, which commits whatever queued up meanwhile
//! in one transaction, and a syncer thread fsyncs the WAL behind it before anyone
//! hears "stored" (see `writer`, which says why). Checkpoints run on a third thread,
//! off the commit path (`checkpoint`). Reads use a separate connection (WAL lets
//! them run beside the writer) on the blocking thread pool. The SQL itself is in
//! `queries` (entries as a whole), `delivery` (each route's delivery of an entry,
//! and the entry's summary of them), `lines` (the ordered lines and their heads),
//! `retention` (the purge) and `reconcile` (reconciliation's lookups, origins and
//! leases), the schema in `schema`, the files' permissions in `private`.
//!
//! rusqlite types never leave this folder.

mod checkpoint;
mod controls;
mod delivery;
mod lines;
mod membership;
mod private;
mod queries;
mod reconcile;
mod rejections;
mod retention;
mod rows;
mod schema;
mod search;
mod space;
mod writer;

pub(crate) use writer::register_metrics;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::Connection;
use tokio::sync::watch;

use self::checkpoint::{Checkpointing, Writeback};
use self::schema::DB_FILE;
use self::space::DiskSpace;
use self::writer::{Syncing, WriteKind, Writer};
use super::pace::{self, ceil_ms};
use super::{
    Accepted, Actor, Attempt, AuditEvent, Backend, Claim, Completion, Control, ControlEvent,
    Controls, DeadLetter, Entry, GatewayInfo, Heartbeat, HeartbeatAck, HousekeepingPass, IdPage,
    IndexLookup, Lifecycle, ListQuery, MAX_PAGE, Membership, MinuteActivity, NewEntry, Origin,
    Pacing, Page, PauseTarget, Purged, Queue, Reads, ReconcileLease, Reconciling, Records,
    RejectionBatch, RejectionCount, RejectionPage, RejectionQuery, Rejections, RouteStats, Search,
    SourceStats, Status, StoreError, Transition, Wake, WorkSignals, encode_headers,
};
use crate::clock::Clock;
use crate::config::EmbeddedConfig;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::backend(Backend::Sqlite, e)
    }
}

/// How long a read waits for the read connection before giving up with 503
/// (`StoreError::Timeout`). Reads are short (a listing reads no body), so a read
/// that waits this long is stuck behind something that should not be; the caller
/// hears so instead of waiting forever.
const READ_WAIT: Duration = Duration::from_secs(5);
/// How long `ping` waits for its connection (only another ping holds it).
const PROBE_WAIT: Duration = Duration::from_secs(1);

pub struct SqliteStore {
    /// Takes every write to the writer thread.
    writer: Writer,
    /// The read connection, used on the blocking pool; a read waits at most
    /// `READ_WAIT` for it.
    reader: Arc<tokio::sync::Mutex<Connection>>,
    /// `ping`'s own connection: a long read never makes `/readyz` wait.
    probe: Arc<tokio::sync::Mutex<Connection>>,
    /// Moved after a commit that stored new work, per route.
    work: Arc<WorkSignals>,
    /// Pauses and discards made through this store.
    controls: Controls,
    /// Each paced route's theoretical arrival time (µs): one process owns the
    /// embedded store, so the pace lives in its memory.
    paces: std::sync::Mutex<std::collections::HashMap<(String, String), i64>>,
    /// Set (once, for good) when an fsync failed.
    stopped: watch::Receiver<bool>,
    /// The free space kept for the deliveries of acknowledged entries.
    space: DiskSpace,
    /// The store's clock: the serving process's.
    clock: Clock,
}

impl SqliteStore {
    /// Run `f` on the arrival time (µs, GCRA) of `route` of `source`: the pace that
    /// `take_send_slot` and `hold_send_slots` share, kept in process.
    fn with_pace<T>(
        &self,
        source: &str,
        route: &str,
        f: impl FnOnce(&mut i64) -> T,
    ) -> Result<T, StoreError> {
        let mut paces = self
            .paces
            .lock()
            .map_err(|_| StoreError::Unavailable("pace lock poisoned"))?;
        Ok(f(paces
            .entry((source.to_string(), route.to_string()))
            .or_insert(0)))
    }

    /// Open (creating it when new) the store in `cfg.path`; `clock` stamps each
    /// group commit (dedupe expiry, `updated_at`).
    pub async fn open(cfg: &EmbeddedConfig, clock: Clock) -> Result<SqliteStore, StoreError> {
        let cfg = cfg.clone();
        tokio::task::spawn_blocking(move || Self::open_blocking(cfg, clock))
            .await
            .map_err(|e| StoreError::Task {
                what: "the open task failed",
                source: e.into(),
            })?
    }

    fn open_blocking(cfg: EmbeddedConfig, clock: Clock) -> Result<SqliteStore, StoreError> {
        let dir = cfg.path.clone();
        let batch_max = cfg.batch_max.max(1);
        // Webhook bodies carry customer data: a private directory, private files (see
        // `private`), settled before SQLite creates anything.
        private::prepare_dir(&dir)?;
        let path = dir.join(DB_FILE);
        for suffix in ["", "-wal", "-shm", "-journal"] {
            private::tighten_file(&dir.join(format!("{DB_FILE}{suffix}")))?;
        }
        private::create_file(&path)?;
        let mut writer = schema::open_connection(&path)?;
        schema::migrate(&mut writer)?;
        schema::writer_settings(&writer)?;
        // Our own handle on the WAL: fdatasync flushes the file whichever descriptor
        // wrote it. The migration's write made sure the file exists.
        let wal_path = dir.join(format!("{DB_FILE}-wal"));
        let wal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&wal_path)
            .map_err(|source| StoreError::File {
                action: "open the WAL file",
                path: wal_path,
                source,
            })?;
        let reader = schema::open_connection(&path)?;
        let probe = schema::open_connection(&path)?;
        let work = Arc::new(WorkSignals::default());
        let (stopped_tx, stopped_rx) = watch::channel(false);
        let checkpointing = Arc::new(Checkpointing::default());
        let checkpoint_conn = schema::open_connection(&path)?;
        let writeback = Writeback::open(&path).map_err(|source| StoreError::File {
            action: "open for writeback",
            path: path.clone(),
            source,
        })?;
        let checkpointer = checkpoint::start(checkpoint_conn, writeback, checkpointing.clone())
            .map_err(|e| StoreError::Task {
                what: "cannot start the checkpoint thread",
                source: e.into(),
            })?;
        let sync = Syncing::new(wal, work.clone(), stopped_tx);
        let space = DiskSpace::new(dir.clone(), cfg.min_free_bytes, clock.clone());
        let writer = Writer::start(
            writer,
            sync,
            batch_max,
            checkpointer,
            clock.clone(),
            cfg.timeout,
        )
        .map_err(|e| StoreError::Task {
            what: "cannot start the writer thread",
            source: e.into(),
        })?;
        Ok(SqliteStore {
            writer,
            reader: Arc::new(tokio::sync::Mutex::new(reader)),
            probe: Arc::new(tokio::sync::Mutex::new(probe)),
            work,
            controls: Controls::new(),
            paces: std::sync::Mutex::new(std::collections::HashMap::new()),
            stopped: stopped_rx,
            space,
            clock,
        })
    }

    /// Run `statements` on the writer thread inside the next group commit; answer
    /// once the commit is on disk (fsynced).
    async fn write_durable<T: Send + 'static>(
        &self,
        kind: WriteKind,
        wake: Option<Wake>,
        statements: impl FnMut(&Connection, i64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.writer.submit(kind, wake, true, statements).await
    }

    /// The same, answered at the commit, before its fsync: for writes a crash may lose
    /// without harm (leases, delivery records, purges: an entry whose lease or
    /// completion is lost is delivered again).
    async fn write_answered_at_commit<T: Send + 'static>(
        &self,
        kind: WriteKind,
        wake: Option<Wake>,
        statements: impl FnMut(&Connection, i64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.writer.submit(kind, wake, false, statements).await
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        run_on(&self.reader, READ_WAIT, f).await
    }
}

/// Run `f` with `conn` on the blocking pool, after waiting at most `wait` for it.
async fn run_on<T: Send + 'static>(
    conn: &Arc<tokio::sync::Mutex<Connection>>,
    wait: Duration,
    f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let guard = tokio::time::timeout(wait, conn.clone().lock_owned())
        .await
        .map_err(|_| StoreError::Timeout(wait))?;
    tokio::task::spawn_blocking(move || f(&guard))
        .await
        .map_err(|e| StoreError::Task {
            what: "the read task failed",
            source: e.into(),
        })?
}

#[async_trait]
impl Queue for SqliteStore {
    async fn accept(&self, entry: NewEntry) -> Result<Accepted, StoreError> {
        // Short of space: keep what is left for delivering what was acknowledged.
        self.space.ensure()?;
        // Encode on the caller's thread: the writer thread is the bottleneck.
        let headers = encode_headers(&entry.headers);
        let wake = (!entry.routes.is_empty()).then(|| Wake::Routes {
            source: entry.source.clone(),
            routes: entry.routes.clone(),
        });
        self.write_durable(WriteKind::Accept, wake, move |conn, now| {
            queries::apply_accept(conn, &entry, &headers, now)
        })
        .await
    }

    async fn set_paused(
        &self,
        source: &str,
        route: Option<&str>,
        paused: bool,
    ) -> Result<(), StoreError> {
        let (name, route_name) = (source.to_string(), route.map(str::to_string));
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            queries::set_paused(conn, &name, route_name.as_deref(), paused)
        })
        .await?;
        self.controls.send(Control::Paused {
            source: source.to_string(),
            route: route.map(str::to_string),
            paused,
        });
        Ok(())
    }

    async fn paused(&self) -> Result<Vec<PauseTarget>, StoreError> {
        self.read(queries::paused).await
    }

    async fn order_line(
        &self,
        source: &str,
        route: &str,
        key: &str,
    ) -> Result<Vec<String>, StoreError> {
        let (source, route, key) = (source.to_string(), route.to_string(), key.to_string());
        self.read(move |conn| lines::order_line(conn, &source, &route, &key))
            .await
    }

    async fn claim(
        &self,
        source: &str,
        route: &str,
        _worker: &str,
        now: i64,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        let (source, route) = (source.to_string(), route.to_string());
        let until = now.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2));
        let limit = i64::try_from(limit.max(1)).unwrap_or(1);
        self.write_answered_at_commit(WriteKind::Claim, None, move |conn, _| {
            delivery::claim(conn, &source, &route, now, until, limit)
        })
        .await
    }

    async fn claim_probe(
        &self,
        source: &str,
        route: &str,
        _worker: &str,
        now: i64,
        lease: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        let (source, route) = (source.to_string(), route.to_string());
        let until = now.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2));
        self.write_answered_at_commit(WriteKind::Claim, None, move |conn, _| {
            delivery::claim_probe(conn, &source, &route, now, until)
        })
        .await
    }

    async fn complete(
        &self,
        claim: &Claim,
        _worker: &str,
        completion: Completion,
        now: i64,
    ) -> Result<bool, StoreError> {
        let finished = super::Finished::of(claim);
        let wake = matches!(completion, Completion::Release { .. })
            .then(|| Wake::route(&finished.source, &finished.route));
        self.write_answered_at_commit(WriteKind::Complete, wake, move |conn, _| {
            delivery::complete(conn, &finished, &completion, now)
        })
        .await
    }

    async fn purge(
        &self,
        now: i64,
        delivered_before: i64,
        dead_before: i64,
        limit: usize,
    ) -> Result<Purged, StoreError> {
        let limit = i64::try_from(limit.max(1)).unwrap_or(1);
        self.write_answered_at_commit(WriteKind::Other, None, move |conn, _| {
            retention::purge(conn, now, delivered_before, dead_before, limit)
        })
        .await
    }

    fn work_signal(&self, source: &str, route: &str) -> watch::Receiver<u64> {
        self.work.subscribe(source, route)
    }

    fn controls(&self) -> tokio::sync::broadcast::Receiver<Control> {
        self.controls.subscribe()
    }

    /// At `Start`: one serving process owns the embedded store, so the leases found
    /// then are a previous run's (it crashed or was killed). They are released now
    /// instead of after they expire. At every pass, the revocations of console
    /// sessions that have expired are forgotten.
    async fn housekeeping(
        &self,
        pass: HousekeepingPass,
        _sources: &[String],
    ) -> Result<(), StoreError> {
        self.write_answered_at_commit(WriteKind::Other, None, |conn, now| {
            controls::purge_revoked_sessions(conn, now)
        })
        .await?;
        if pass != HousekeepingPass::Start {
            return Ok(());
        }
        let released = self
            .write_durable(WriteKind::Other, Some(Wake::All), |conn, _| {
                delivery::release_leases(conn)
            })
            .await?;
        if released > 0 {
            tracing::warn!(
                released,
                "released leases left by a previous run; those entries are delivered again"
            );
        }
        Ok(())
    }

    async fn replay(
        &self,
        id: &str,
        route: Option<&str>,
        at: i64,
        by: &Actor,
        now: i64,
    ) -> Result<Transition, StoreError> {
        let (id, route) = (id.to_string(), route.map(str::to_string));
        let by = by.clone();
        self.write_durable(WriteKind::Other, Some(Wake::All), move |conn, _| {
            delivery::replay(conn, &id, route.as_deref(), at, &by, now)
        })
        .await
    }

    async fn discard(
        &self,
        id: &str,
        route: Option<&str>,
        by: &Actor,
        note: &str,
        now: i64,
    ) -> Result<Transition, StoreError> {
        let (entry_id, route) = (id.to_string(), route.map(str::to_string));
        let by = by.clone();
        let note = note.to_string();
        let (t, discarded) = self
            .write_durable(WriteKind::Other, None, move |conn, _| {
                delivery::discard(conn, &entry_id, route.as_deref(), &by, &note, now)
            })
            .await?;
        // Durable now: in-flight attempts of these deliveries are cancelled.
        for route in discarded {
            self.controls.send(Control::Discarded {
                id: id.to_string(),
                route,
            });
        }
        Ok(t)
    }
}

#[async_trait]
impl Reads for SqliteStore {
    async fn get(&self, id: &str) -> Result<Option<Entry>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| rows::load_entry(conn, &id)).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Page, StoreError> {
        let q = query.clone();
        let limit = q.limit.clamp(1, MAX_PAGE);
        self.read(move |conn| queries::list(conn, &q, limit)).await
    }

    async fn list_ids(&self, query: &ListQuery) -> Result<IdPage, StoreError> {
        let q = query.clone();
        let limit = q.limit.clamp(1, MAX_PAGE);
        self.read(move |conn| queries::list_ids(conn, &q, limit))
            .await
    }

    async fn count(&self, source: &str) -> Result<u64, StoreError> {
        let source = source.to_string();
        self.read(move |conn| queries::count(conn, &source)).await
    }

    async fn route_stats(&self, source: &str, route: &str) -> Result<RouteStats, StoreError> {
        let (source, route) = (source.to_string(), route.to_string());
        self.read(move |conn| queries::route_stats(conn, &source, &route))
            .await
    }

    async fn attempts(&self, id: &str) -> Result<Vec<Attempt>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| queries::attempts(conn, &id)).await
    }

    async fn count_status(&self, source: &str, status: Status) -> Result<u64, StoreError> {
        let source = source.to_string();
        self.read(move |conn| queries::count_status(conn, &source, status))
            .await
    }

    async fn audit(&self, id: &str) -> Result<Vec<AuditEvent>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| queries::audit(conn, &id)).await
    }

    async fn dead_letters(
        &self,
        source: &str,
        route: &str,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let (source, route) = (source.to_string(), route.to_string());
        self.read(move |conn| queries::dead_letters(conn, &source, &route, limit))
            .await
    }

    async fn activity(
        &self,
        source: &str,
        since: i64,
        until: i64,
    ) -> Result<Vec<MinuteActivity>, StoreError> {
        let source = source.to_string();
        self.read(move |conn| queries::activity(conn, &source, since, until))
            .await
    }

    async fn record_unverified(&self, source: &str, n: u64) -> Result<(), StoreError> {
        let source = source.to_string();
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            queries::record_unverified(conn, &source, n)
        })
        .await
    }

    async fn stats(&self, source: &str) -> Result<SourceStats, StoreError> {
        let source = source.to_string();
        self.read(move |conn| queries::stats(conn, &source)).await
    }
}

#[async_trait]
impl Rejections for SqliteStore {
    async fn record_rejections(&self, batch: &RejectionBatch) -> Result<(), StoreError> {
        let batch = batch.clone();
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            rejections::record(conn, &batch)
        })
        .await
    }

    async fn rejections(&self, query: &RejectionQuery) -> Result<RejectionPage, StoreError> {
        let query = query.clone();
        self.read(move |conn| rejections::list(conn, &query)).await
    }

    async fn rejection_counts(&self, since: i64) -> Result<Vec<RejectionCount>, StoreError> {
        self.read(move |conn| rejections::counts(conn, since)).await
    }

    async fn purge_rejections(&self, before: i64) -> Result<u64, StoreError> {
        self.write_answered_at_commit(WriteKind::Other, None, move |conn, _| {
            rejections::purge(conn, before)
        })
        .await
    }
}

#[async_trait]
impl Search for SqliteStore {
    async fn indexed(&self, lookup: &IndexLookup) -> Result<Vec<String>, StoreError> {
        let lookup = lookup.clone();
        self.read(move |conn| search::indexed(conn, &lookup)).await
    }

    async fn sizes(&self, keys: &[(String, String)]) -> Result<Vec<u64>, StoreError> {
        let keys = keys.to_vec();
        self.read(move |conn| search::sizes(conn, &keys)).await
    }

    async fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<Entry>, StoreError> {
        let keys = keys.to_vec();
        self.read(move |conn| search::get_many(conn, &keys)).await
    }
}

#[async_trait]
impl Records for SqliteStore {
    async fn record_control(&self, event: &ControlEvent) -> Result<(), StoreError> {
        let event = event.clone();
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            controls::record_control(conn, &event)
        })
        .await
    }

    async fn control_audit(&self, limit: usize) -> Result<Vec<ControlEvent>, StoreError> {
        self.read(move |conn| controls::control_audit(conn, limit))
            .await
    }

    async fn revoke_session(&self, id: &str, expires_at: i64, _now: i64) -> Result<(), StoreError> {
        let id = id.to_string();
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            controls::revoke_session(conn, &id, expires_at)
        })
        .await
    }

    async fn revoke_sessions_until(&self, at: i64) -> Result<(), StoreError> {
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            controls::revoke_sessions_until(conn, at)
        })
        .await
    }

    async fn session_revoked(&self, id: &str, issued_at: i64) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.read(move |conn| controls::session_revoked(conn, &id, issued_at))
            .await
    }

    async fn save_ranges(
        &self,
        url: &str,
        ranges: &crate::store::SavedRanges,
    ) -> Result<(), StoreError> {
        let (url, ranges) = (url.to_string(), ranges.clone());
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            controls::save_ranges(conn, &url, &ranges)
        })
        .await
    }

    async fn saved_ranges(
        &self,
        url: &str,
    ) -> Result<Option<crate::store::SavedRanges>, StoreError> {
        let url = url.to_string();
        self.read(move |conn| controls::saved_ranges(conn, &url))
            .await
    }

    async fn known_routes(&self) -> Result<Vec<crate::store::KnownRoute>, StoreError> {
        self.read(controls::known_routes).await
    }

    async fn remember_routes(&self, routes: &[crate::store::KnownRoute]) -> Result<(), StoreError> {
        let routes = routes.to_vec();
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            controls::remember_routes(conn, &routes)
        })
        .await
    }

    async fn forget_route(&self, source: &str, route: &str) -> Result<(), StoreError> {
        let (source, route) = (source.to_string(), route.to_string());
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            controls::forget_route(conn, &source, &route)
        })
        .await
    }

    async fn arm_handshake(
        &self,
        source: &str,
        until: i64,
        token: &crate::store::TokenHash,
    ) -> Result<(), StoreError> {
        let (source, token) = (source.to_string(), token.clone());
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            controls::arm_handshake(conn, &source, until, &token)
        })
        .await
    }

    async fn handshake_armed(&self, source: &str, now: i64) -> Result<Option<i64>, StoreError> {
        let source = source.to_string();
        self.read(move |conn| controls::handshake_armed(conn, &source, now))
            .await
    }

    async fn establish_secret(
        &self,
        source: &str,
        secret: &crate::store::EstablishedSecret,
        token: &crate::store::TokenHash,
        now: i64,
    ) -> Result<crate::store::Establish, StoreError> {
        let (source, secret, token) = (source.to_string(), secret.clone(), token.clone());
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            controls::establish_secret(conn, &source, &secret, &token, now)
        })
        .await
    }

    async fn established_secrets(
        &self,
        source: &str,
    ) -> Result<Vec<crate::store::EstablishedSecret>, StoreError> {
        let source = source.to_string();
        self.read(move |conn| controls::established_secrets(conn, &source))
            .await
    }

    async fn forget_secret(&self, source: &str, id: &str) -> Result<bool, StoreError> {
        let (source, id) = (source.to_string(), id.to_string());
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            controls::forget_secret(conn, &source, &id)
        })
        .await
    }
}

#[async_trait]
impl Membership for SqliteStore {
    async fn heartbeat(&self, beat: &Heartbeat) -> Result<HeartbeatAck, StoreError> {
        let beat = beat.clone();
        self.write_answered_at_commit(WriteKind::Other, None, move |conn, now| {
            membership::heartbeat(conn, &beat, now)
        })
        .await
    }

    async fn gateways(&self) -> Result<Vec<GatewayInfo>, StoreError> {
        let now = self.clock.now_ms();
        self.read(move |conn| membership::gateways(conn, now)).await
    }

    fn takes_over(&self) -> bool {
        false
    }

    async fn config_salt(&self) -> Result<[u8; 32], StoreError> {
        let fresh = super::gateways::new_salt()?;
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            membership::config_salt(conn, &fresh)
        })
        .await
    }
}

#[async_trait]
impl Pacing for SqliteStore {
    async fn take_send_slot(
        &self,
        source: &str,
        route: &str,
        now: i64,
        spacing: Duration,
        burst: u32,
    ) -> Result<Option<i64>, StoreError> {
        let spacing_us = i64::try_from(spacing.as_micros()).unwrap_or(i64::MAX);
        self.with_pace(source, route, |tat| {
            match pace::gcra(*tat, now.saturating_mul(1000), spacing_us, burst) {
                Ok(next) => {
                    *tat = next;
                    None
                }
                Err(at_us) => Some(ceil_ms(at_us)),
            }
        })
    }

    async fn hold_send_slots(
        &self,
        source: &str,
        route: &str,
        _now: i64,
        until: i64,
        spacing: Duration,
        burst: u32,
    ) -> Result<(), StoreError> {
        let spacing_us = i64::try_from(spacing.as_micros()).unwrap_or(i64::MAX);
        self.with_pace(source, route, |tat| {
            *tat = pace::held(*tat, until.saturating_mul(1000), spacing_us, burst);
        })
    }
}

#[async_trait]
impl Reconciling for SqliteStore {
    async fn dedupe_lookup(
        &self,
        source: &str,
        keys: &[String],
        now: i64,
    ) -> Result<Vec<Option<String>>, StoreError> {
        super::reconcile::check_lookup(keys)?;
        let (source, keys) = (source.to_string(), keys.to_vec());
        self.read(move |conn| reconcile::dedupe_lookup(conn, &source, &keys, now))
            .await
    }

    async fn mark_origin(
        &self,
        id: &str,
        origin: Origin,
        note: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let (id, note) = (id.to_string(), note.to_string());
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            reconcile::mark_origin(conn, &id, origin, &note, now)
        })
        .await
    }

    async fn lease_reconcile(
        &self,
        source: &str,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<ReconcileLease, StoreError> {
        let (source, holder) = (source.to_string(), holder.to_string());
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            reconcile::lease(conn, &source, &holder, now, until)
        })
        .await
    }

    async fn save_reconcile(
        &self,
        source: &str,
        holder: &str,
        state: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        super::reconcile::check_state(state)?;
        let (source, holder, state) = (source.to_string(), holder.to_string(), state.to_string());
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            reconcile::save(conn, &source, &holder, &state, now)
        })
        .await
    }

    async fn release_reconcile(&self, source: &str, holder: &str) -> Result<(), StoreError> {
        let (source, holder) = (source.to_string(), holder.to_string());
        self.write_durable(WriteKind::Other, None, move |conn, _| {
            reconcile::release(conn, &source, &holder)
        })
        .await
    }
}

#[async_trait]
impl Lifecycle for SqliteStore {
    async fn ping(&self) -> Result<(), StoreError> {
        if *self.stopped.borrow() {
            return Err(StoreError::Stopped);
        }
        if !self.writer.is_running() {
            return Err(StoreError::Unavailable("the writer has stopped"));
        }
        self.space.ensure_now()?;
        // On its own connection: a long admin read holds the reader, not this.
        run_on(&self.probe, PROBE_WAIT, queries::probe).await
    }

    fn stopped(&self) -> watch::Receiver<bool> {
        self.stopped.clone()
    }

    async fn close(&self) {
        self.writer.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that cannot get the read connection within `READ_WAIT` answers
    /// `Timeout` (503) instead of waiting forever; `ping` has its own connection.
    #[tokio::test(start_paused = true)]
    async fn a_read_waits_for_the_reader_at_most_read_wait_and_ping_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(
            &EmbeddedConfig {
                path: dir.path().join("data"),
                batch_max: 8,
                min_free_bytes: 0,
                timeout: Duration::from_secs(5),
            },
            Clock::system(),
        )
        .await
        .unwrap();
        let held = store.reader.clone().lock_owned().await;
        let started = tokio::time::Instant::now();
        let got = store.list(&ListQuery::default()).await;
        assert!(
            matches!(got, Err(StoreError::Timeout(d)) if d == READ_WAIT),
            "{got:?}"
        );
        assert!(started.elapsed() >= READ_WAIT);
        store.ping().await.unwrap();
        drop(held);
        assert!(
            store
                .list(&ListQuery::default())
                .await
                .unwrap()
                .entries
                .is_empty()
        );
        store.close().await;
    }
}
