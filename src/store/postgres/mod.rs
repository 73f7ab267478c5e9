//! The PostgreSQL store: the database operators already run, back up and
//! replicate. With a synchronous standby (`store.require_sync_standby`), a 2xx
//! means the webhook is on two machines: it survives the primary's.
//!
//! Accepts are group-committed (`accept`), claims lease with `FOR UPDATE SKIP
//! LOCKED` (`delivery`), ordered lines are kept under advisory locks (`lines`),
//! gateways wake each other with `LISTEN/NOTIFY` (`notify`), and pacing lives in
//! the database, so every gateway on it shares each route's pace (`records`), as it
//! does each source's reconciliation lease (`reconcile`). The schema is versioned
//! (`schema`), the server's promises checked
//! (`preconditions`), and every call bounded by `store.timeout` (`connect`).
//!
//! tokio-postgres types never leave this folder.

mod accept;
mod cached;
mod committers;
mod connect;
mod delivery;
mod finish;
mod lines;
mod membership;
mod notify;
mod preconditions;
mod reads;
mod reconcile;
mod records;
mod rejections;
mod retention;
mod rows;
mod schema;
mod search;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot, watch};

pub use self::connect::{UrlWarning, url_warnings};
/// The claim statement, for the test that checks the plan a connection keeps for it.
#[doc(hidden)]
pub use self::delivery::CLAIM as CLAIM_STATEMENT;

use self::accept::Waiting;
use self::preconditions::Verdict;
use super::activity::minute_of;
use super::{
    Accepted, Actor, Attempt, AuditEvent, Backend, Claim, Completion, Control, ControlEvent,
    Controls, DeadLetter, Entry, Finished, GatewayInfo, Heartbeat, HeartbeatAck, HousekeepingPass,
    IdPage, IndexLookup, Lifecycle, ListQuery, MAX_PAGE, Membership, MinuteActivity, NewEntry,
    Origin, Pacing, Page, PauseTarget, Purged, Queue, Reads, ReconcileLease, Reconciling, Records,
    RejectionBatch, RejectionCount, RejectionPage, RejectionQuery, Rejections, RouteStats, Search,
    SourceStats, Status, StoreError, TakeOver, Transition, Unsafe, Wake, WorkSignals,
    encode_headers,
};
use crate::clock::Clock;
use crate::config::PostgresConfig;

/// Accepts that may wait for a committer at once; more wait for room (within the
/// store's timeout).
const QUEUE: usize = 8192;

/// What the committers and the store share.
pub(super) struct PgShared {
    /// Commits that answer once durable: accepts, operators' actions.
    durable: Pool,
    /// Commits that may be lost in a crash without harm (see `connect`), and reads.
    relaxed: Pool,
    schema: String,
    /// The notification channel of this deployment.
    channel: String,
    timeout: Duration,
    clock: Clock,
    work: Arc<WorkSignals>,
    require_sync: bool,
    verdict: Verdict,
}

pub struct PostgresStore {
    shared: Arc<PgShared>,
    accepts: mpsc::Sender<Waiting>,
    /// Completions of one statement, group-committed (`finish`).
    completions: mpsc::Sender<finish::Waiting>,
    controls: Controls,
    listener: tokio::task::JoinHandle<()>,
}

/// A copy of `e` for each accept of a failed batch: the kind is kept (a timeout is
/// a timeout), the backend's error shared.
fn fan_out(e: &StoreError) -> StoreError {
    match e {
        StoreError::Timeout(d) => StoreError::Timeout(*d),
        StoreError::Unsafe(u) => StoreError::Unsafe(u.clone()),
        StoreError::Unavailable(what) => StoreError::Unavailable(what),
        other => StoreError::backend(Backend::Postgres, Shared(other.to_string())),
    }
}

/// A failure of a batch, told to each of its accepts.
#[derive(Debug)]
struct Shared(String);

impl std::fmt::Display for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Shared {}

fn lease_until(now: i64, lease: Duration) -> i64 {
    now.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2))
}

impl PostgresStore {
    /// Connect, migrate the schema, check the server's promises, and start the
    /// committers and the listener.
    pub async fn open(cfg: &PostgresConfig, clock: Clock) -> Result<PostgresStore, StoreError> {
        let target = connect::parse(&cfg.url, cfg.timeout)
            .map_err(|e| StoreError::backend(Backend::Postgres, e))?;
        let pool = |relaxed| {
            connect::pool(&target, &cfg.schema, cfg.connections, relaxed)
                .map_err(|e| StoreError::backend(Backend::Postgres, e))
        };
        let (durable, relaxed) = (pool(false)?, pool(true)?);
        let schema = cfg.schema.clone();
        connect::with(&durable, cfg.timeout, async |conn| {
            schema::migrate(conn, &schema).await
        })
        .await?;
        let verdict = Verdict::default();
        let require_sync = cfg.require_sync_standby;
        let found = connect::with(&durable, cfg.timeout, async |conn| {
            Ok(preconditions::check(&*conn, require_sync).await)
        })
        .await?;
        match found {
            // A standby may join later: start, not ready until it does.
            Err(u @ (Unsafe::NoSyncStandby { .. } | Unsafe::ReadOnly)) => {
                let _ = verdict.set(Err(u));
            }
            Err(u) => return Err(StoreError::Unsafe(u)),
            Ok(()) => {}
        }
        let work = Arc::new(WorkSignals::default());
        let channel = notify::channel(&cfg.schema);
        let shared = Arc::new(PgShared {
            durable,
            relaxed,
            schema: cfg.schema.clone(),
            channel: channel.clone(),
            timeout: cfg.timeout,
            clock,
            work: work.clone(),
            require_sync,
            verdict,
        });
        let (tx, rx) = mpsc::channel(QUEUE);
        accept::start(
            shared.clone(),
            rx,
            (cfg.connections / 2).max(1),
            cfg.batch_max.max(1),
        );
        let (done_tx, done_rx) = mpsc::channel(QUEUE);
        finish::start(
            shared.clone(),
            done_rx,
            (cfg.connections / 2).max(1),
            cfg.batch_max.max(1),
        );
        let listener = notify::start(Arc::new(target), cfg.schema.clone(), channel, work);
        Ok(PostgresStore {
            shared,
            accepts: tx,
            completions: done_tx,
            controls: Controls::new(),
            listener,
        })
    }

    /// Run `work` on a connection of the relaxed pool (reads, leases, completions).
    async fn relaxed<T>(
        &self,
        work: impl AsyncFnOnce(&mut deadpool_postgres::Object) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        connect::with(&self.shared.relaxed, self.shared.timeout, work).await
    }

    /// Run `work` on a connection of the durable pool (operators' actions).
    async fn durable<T>(
        &self,
        work: impl AsyncFnOnce(&mut deadpool_postgres::Object) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        connect::with(&self.shared.durable, self.shared.timeout, work).await
    }

    /// Check the server's promises now, keeping and logging the verdict.
    async fn check_preconditions(&self) -> Result<(), StoreError> {
        let require_sync = self.shared.require_sync;
        let found = self
            .durable(async |conn| Ok(preconditions::check(&*conn, require_sync).await))
            .await?;
        self.shared.verdict.set(found)
    }
}

/// Run `body` in a transaction on `conn`, again when PostgreSQL rolled it back for a
/// deadlock (at most three times).
macro_rules! transaction {
    ($conn:ident, |$tx:ident| $body:expr) => {{
        let mut tries = 0;
        loop {
            tries += 1;
            let result = async {
                let $tx = $conn.transaction().await?;
                let out = $body;
                $tx.commit().await?;
                Ok::<_, StoreError>(out)
            }
            .await;
            match result {
                Err(e) if tries < 3 && connect::retryable(&e) => continue,
                other => break other,
            }
        }
    }};
}

#[async_trait]
impl Queue for PostgresStore {
    async fn accept(&self, entry: NewEntry) -> Result<Accepted, StoreError> {
        self.shared.verdict.get()?;
        let headers = encode_headers(&entry.headers);
        let (reply, answer) = oneshot::channel();
        let timeout = self.shared.timeout;
        tokio::time::timeout(timeout, async {
            self.accepts
                .send(Waiting {
                    entry,
                    headers,
                    reply,
                })
                .await
                .map_err(|_| StoreError::Unavailable("the committers have stopped"))?;
            answer
                .await
                .map_err(|_| StoreError::Unavailable("the committer dropped the accept"))?
        })
        .await
        .map_err(|_| StoreError::Timeout(timeout))?
    }

    async fn set_paused(
        &self,
        source: &str,
        route: Option<&str>,
        paused: bool,
    ) -> Result<(), StoreError> {
        self.durable(async |conn| reads::set_paused(&*conn, source, route, paused).await)
            .await?;
        self.controls.send(Control::Paused {
            source: source.to_string(),
            route: route.map(str::to_string),
            paused,
        });
        Ok(())
    }

    async fn paused(&self) -> Result<Vec<PauseTarget>, StoreError> {
        self.relaxed(async |conn| reads::paused(&*conn).await).await
    }

    async fn order_line(
        &self,
        source: &str,
        route: &str,
        key: &str,
    ) -> Result<Vec<String>, StoreError> {
        self.relaxed(async |conn| lines::order_line(&*conn, source, route, key).await)
            .await
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
        let until = lease_until(now, lease);
        let limit = i64::try_from(limit.max(1)).unwrap_or(1);
        self.relaxed(async |conn| {
            delivery::claim(&*conn, (source, route, worker), now, until, limit).await
        })
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
        let until = lease_until(now, lease);
        self.relaxed(async |conn| {
            delivery::claim_probe(&*conn, (source, route, worker), now, until).await
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
        let f = Finished::of(claim);
        let release = matches!(completion, Completion::Release { .. })
            .then(|| Wake::route(&f.source, &f.route));
        if !f.needs_transaction(&completion) {
            let (reply, answer) = oneshot::channel();
            let timeout = self.shared.timeout;
            let applied = tokio::time::timeout(timeout, async {
                self.completions
                    .send(finish::Waiting {
                        finished: f,
                        completion,
                        now,
                        reply,
                    })
                    .await
                    .map_err(|_| StoreError::Unavailable("the committers have stopped"))?;
                answer
                    .await
                    .map_err(|_| StoreError::Unavailable("the committer dropped the completion"))?
            })
            .await
            .map_err(|_| StoreError::Timeout(timeout))??;
            if let Some(wake) = release {
                self.shared.work.wake(&wake);
            }
            return Ok(applied);
        }
        let schema = self.shared.schema.as_str();
        let applied = self
            .relaxed(async |conn| {
                transaction!(conn, |tx| {
                    if let Some(order) = &f.order {
                        lines::lock(
                            &tx,
                            vec![lines::line_lock(schema, &f.source, &f.route, &order.key)],
                        )
                        .await?;
                    }
                    delivery::complete(&tx, &f, &completion, now).await?
                })
            })
            .await?;
        if let Some(wake) = release {
            self.shared.work.wake(&wake);
        }
        Ok(applied)
    }

    async fn purge(
        &self,
        now: i64,
        delivered_before: i64,
        dead_before: i64,
        limit: usize,
    ) -> Result<Purged, StoreError> {
        let limit = i64::try_from(limit.max(1)).unwrap_or(1);
        let schema = self.shared.schema.as_str();
        self.relaxed(async |conn| {
            transaction!(conn, |tx| {
                retention::purge(&tx, schema, now, delivered_before, dead_before, limit).await?
            })
        })
        .await
    }

    fn work_signal(&self, source: &str, route: &str) -> watch::Receiver<u64> {
        self.shared.work.subscribe(source, route)
    }

    fn controls(&self) -> tokio::sync::broadcast::Receiver<Control> {
        self.controls.subscribe()
    }

    /// At every pass: the server's promises checked (a change logged), and the
    /// revocations of expired console sessions forgotten. No lease is taken back:
    /// other gateways may hold them; an expired lease is claimed again by itself.
    async fn housekeeping(
        &self,
        _pass: HousekeepingPass,
        _sources: &[String],
    ) -> Result<(), StoreError> {
        let now = self.shared.clock.now_ms();
        self.relaxed(async |conn| records::purge_revoked_sessions(&*conn, now).await)
            .await?;
        self.check_preconditions().await
    }

    async fn replay(
        &self,
        id: &str,
        route: Option<&str>,
        at: i64,
        by: &Actor,
        now: i64,
    ) -> Result<Transition, StoreError> {
        let schema = self.shared.schema.as_str();
        let done = self
            .durable(async |conn| {
                transaction!(conn, |tx| {
                    delivery::replay(&tx, schema, id, route, at, by, now).await?
                })
            })
            .await?;
        if done == Transition::Done {
            self.shared.work.wake(&Wake::All);
            let channel = self.shared.channel.as_str();
            // Other gateways' forwarders learn of it at once too (best effort: they
            // poll anyway).
            let _ = self
                .relaxed(async |conn| {
                    conn.execute("SELECT pg_notify($1, '')", &[&channel])
                        .await
                        .map_err(StoreError::from)
                })
                .await;
        }
        Ok(done)
    }

    async fn discard(
        &self,
        id: &str,
        route: Option<&str>,
        by: &Actor,
        note: &str,
        now: i64,
    ) -> Result<Transition, StoreError> {
        let schema = self.shared.schema.as_str();
        let (t, discarded) = self
            .durable(async |conn| {
                transaction!(conn, |tx| {
                    delivery::discard(&tx, schema, id, route, by, note, now).await?
                })
            })
            .await?;
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
impl Reads for PostgresStore {
    async fn get(&self, id: &str) -> Result<Option<Entry>, StoreError> {
        self.relaxed(async |conn| rows::load_entry(&*conn, id).await)
            .await
    }

    async fn list(&self, query: &ListQuery) -> Result<Page, StoreError> {
        let limit = query.limit.clamp(1, MAX_PAGE);
        self.relaxed(async |conn| reads::list(&*conn, query, limit).await)
            .await
    }

    async fn list_ids(&self, query: &ListQuery) -> Result<IdPage, StoreError> {
        let limit = query.limit.clamp(1, MAX_PAGE);
        self.relaxed(async |conn| reads::list_ids(&*conn, query, limit).await)
            .await
    }

    async fn count(&self, source: &str) -> Result<u64, StoreError> {
        self.relaxed(async |conn| reads::count(&*conn, source).await)
            .await
    }

    async fn count_status(&self, source: &str, status: Status) -> Result<u64, StoreError> {
        self.relaxed(async |conn| reads::count_status(&*conn, source, status).await)
            .await
    }

    async fn attempts(&self, id: &str) -> Result<Vec<Attempt>, StoreError> {
        self.relaxed(async |conn| reads::attempts(&*conn, id).await)
            .await
    }

    async fn audit(&self, id: &str) -> Result<Vec<AuditEvent>, StoreError> {
        self.relaxed(async |conn| reads::audit(&*conn, id).await)
            .await
    }

    async fn dead_letters(
        &self,
        source: &str,
        route: &str,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.relaxed(async |conn| reads::dead_letters(&*conn, source, route, limit).await)
            .await
    }

    async fn activity(
        &self,
        source: &str,
        since: i64,
        until: i64,
    ) -> Result<Vec<MinuteActivity>, StoreError> {
        self.relaxed(async |conn| reads::activity(&*conn, source, since, until).await)
            .await
    }

    async fn record_unverified(&self, source: &str, n: u64) -> Result<(), StoreError> {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let minute = minute_of(self.shared.clock.now_ms());
        self.durable(async |conn| reads::record_unverified(&*conn, source, minute, n).await)
            .await
    }

    async fn stats(&self, source: &str) -> Result<SourceStats, StoreError> {
        self.relaxed(async |conn| reads::stats(&*conn, source).await)
            .await
    }

    async fn route_stats(&self, source: &str, route: &str) -> Result<RouteStats, StoreError> {
        self.relaxed(async |conn| reads::route_stats(&*conn, source, route).await)
            .await
    }
}

#[async_trait]
impl Rejections for PostgresStore {
    async fn record_rejections(&self, batch: &RejectionBatch) -> Result<(), StoreError> {
        self.durable(async |conn| transaction!(conn, |tx| rejections::record(&tx, batch).await?))
            .await
    }

    async fn rejections(&self, query: &RejectionQuery) -> Result<RejectionPage, StoreError> {
        self.relaxed(async |conn| rejections::list(&*conn, query).await)
            .await
    }

    async fn rejection_counts(&self, since: i64) -> Result<Vec<RejectionCount>, StoreError> {
        self.relaxed(async |conn| rejections::counts(&*conn, since).await)
            .await
    }

    async fn purge_rejections(&self, before: i64) -> Result<u64, StoreError> {
        self.durable(async |conn| transaction!(conn, |tx| rejections::purge(&tx, before).await?))
            .await
    }
}

#[async_trait]
impl Search for PostgresStore {
    async fn indexed(&self, lookup: &IndexLookup) -> Result<Vec<String>, StoreError> {
        self.relaxed(async |conn| search::indexed(&*conn, lookup).await)
            .await
    }

    async fn sizes(&self, keys: &[(String, String)]) -> Result<Vec<u64>, StoreError> {
        self.relaxed(async |conn| search::sizes(&*conn, keys).await)
            .await
    }

    async fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<Entry>, StoreError> {
        self.relaxed(async |conn| search::get_many(&*conn, keys).await)
            .await
    }
}

#[async_trait]
impl Records for PostgresStore {
    async fn record_control(&self, event: &ControlEvent) -> Result<(), StoreError> {
        self.durable(async |conn| {
            transaction!(conn, |tx| records::record_control(&tx, event).await?)
        })
        .await
    }

    async fn control_audit(&self, limit: usize) -> Result<Vec<ControlEvent>, StoreError> {
        self.relaxed(async |conn| records::control_audit(&*conn, limit).await)
            .await
    }

    async fn revoke_session(&self, id: &str, expires_at: i64, _now: i64) -> Result<(), StoreError> {
        self.durable(async |conn| records::revoke_session(&*conn, id, expires_at).await)
            .await
    }

    async fn revoke_sessions_until(&self, at: i64) -> Result<(), StoreError> {
        self.durable(async |conn| records::revoke_sessions_until(&*conn, at).await)
            .await
    }

    async fn save_ranges(
        &self,
        url: &str,
        ranges: &crate::store::SavedRanges,
    ) -> Result<(), StoreError> {
        self.durable(async |conn| records::save_ranges(&*conn, url, ranges).await)
            .await
    }

    async fn saved_ranges(
        &self,
        url: &str,
    ) -> Result<Option<crate::store::SavedRanges>, StoreError> {
        self.relaxed(async |conn| records::saved_ranges(&*conn, url).await)
            .await
    }

    async fn known_routes(&self) -> Result<Vec<crate::store::KnownRoute>, StoreError> {
        self.relaxed(async |conn| records::known_routes(&*conn).await)
            .await
    }

    async fn remember_routes(&self, routes: &[crate::store::KnownRoute]) -> Result<(), StoreError> {
        self.durable(async |conn| records::remember_routes(&*conn, routes).await)
            .await
    }

    async fn forget_route(&self, source: &str, route: &str) -> Result<(), StoreError> {
        self.durable(async |conn| records::forget_route(&*conn, source, route).await)
            .await
    }

    async fn arm_handshake(
        &self,
        source: &str,
        until: i64,
        token: &crate::store::TokenHash,
    ) -> Result<(), StoreError> {
        self.durable(async |conn| records::arm_handshake(&*conn, source, until, token).await)
            .await
    }

    async fn handshake_armed(&self, source: &str, now: i64) -> Result<Option<i64>, StoreError> {
        self.relaxed(async |conn| records::handshake_armed(&*conn, source, now).await)
            .await
    }

    async fn establish_secret(
        &self,
        source: &str,
        secret: &crate::store::EstablishedSecret,
        token: &crate::store::TokenHash,
        now: i64,
    ) -> Result<crate::store::Establish, StoreError> {
        self.durable(async |conn| {
            transaction!(conn, |tx| records::establish_secret(
                &tx, source, secret, token, now
            )
            .await?)
        })
        .await
    }

    async fn established_secrets(
        &self,
        source: &str,
    ) -> Result<Vec<crate::store::EstablishedSecret>, StoreError> {
        self.relaxed(async |conn| records::established_secrets(&*conn, source).await)
            .await
    }

    async fn forget_secret(&self, source: &str, id: &str) -> Result<bool, StoreError> {
        self.durable(async |conn| records::forget_secret(&*conn, source, id).await)
            .await
    }

    async fn session_revoked(&self, id: &str, issued_at: i64) -> Result<bool, StoreError> {
        self.relaxed(async |conn| records::session_revoked(&*conn, id, issued_at).await)
            .await
    }
}

#[async_trait]
impl Membership for PostgresStore {
    async fn heartbeat(&self, beat: &Heartbeat) -> Result<HeartbeatAck, StoreError> {
        self.relaxed(async |conn| transaction!(conn, |tx| membership::heartbeat(&tx, beat).await?))
            .await
    }

    async fn gateways(&self) -> Result<Vec<GatewayInfo>, StoreError> {
        self.relaxed(async |conn| membership::gateways(&*conn).await)
            .await
    }

    async fn take_over_dead(&self, by: &str) -> Result<TakeOver, StoreError> {
        self.relaxed(async |conn| {
            transaction!(conn, |tx| membership::take_over_dead(&tx, by).await?)
        })
        .await
    }

    async fn config_salt(&self) -> Result<[u8; 32], StoreError> {
        self.durable(async |conn| membership::config_salt(&*conn).await)
            .await
    }
}

#[async_trait]
impl Pacing for PostgresStore {
    async fn take_send_slot(
        &self,
        source: &str,
        route: &str,
        now: i64,
        spacing: Duration,
        burst: u32,
    ) -> Result<Option<i64>, StoreError> {
        let spacing_us = i64::try_from(spacing.as_micros()).unwrap_or(i64::MAX);
        self.relaxed(async |conn| {
            transaction!(conn, |tx| {
                records::take_send_slot(&tx, source, route, now, spacing_us, burst).await?
            })
        })
        .await
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
        self.relaxed(async |conn| {
            transaction!(conn, |tx| {
                records::hold_send_slots(&tx, source, route, until, spacing_us, burst).await?
            })
        })
        .await
    }
}

#[async_trait]
impl Reconciling for PostgresStore {
    async fn dedupe_lookup(
        &self,
        source: &str,
        keys: &[String],
        now: i64,
    ) -> Result<Vec<Option<String>>, StoreError> {
        super::reconcile::check_lookup(keys)?;
        self.relaxed(async |conn| reconcile::dedupe_lookup(&*conn, source, keys, now).await)
            .await
    }

    async fn mark_origin(
        &self,
        id: &str,
        origin: Origin,
        note: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.durable(async |conn| {
            transaction!(conn, |tx| {
                reconcile::mark_origin(&tx, id, origin, note, now).await?
            })
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
        self.durable(async |conn| {
            transaction!(conn, |tx| {
                reconcile::lease(&tx, source, holder, now, until).await?
            })
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
        self.durable(async |conn| reconcile::save(&*conn, source, holder, state, now).await)
            .await
    }

    async fn release_reconcile(&self, source: &str, holder: &str) -> Result<(), StoreError> {
        self.durable(async |conn| reconcile::release(&*conn, source, holder).await)
            .await
    }
}

#[async_trait]
impl Lifecycle for PostgresStore {
    /// A write through the durable pool (a server in recovery refuses it), then the
    /// server's promises.
    async fn ping(&self) -> Result<(), StoreError> {
        self.durable(async |conn| {
            conn.execute(
                "INSERT INTO console_settings (name, value) VALUES ('ping', 0)
                 ON CONFLICT (name) DO NOTHING",
                &[],
            )
            .await
            .map_err(StoreError::from)
        })
        .await?;
        self.check_preconditions().await
    }

    async fn close(&self) {
        self.listener.abort();
        self.shared.durable.close();
        self.shared.relaxed.close();
    }
}
