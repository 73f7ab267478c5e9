//! Behaviour of the embedded store that the conformance suite cannot see: what it
//! does to its files under steady load, their permissions, and how it takes over a
//! store written by an older release (the move to routes).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hookgate::store::{Accepted, NewEntry};

use crate::conformance::entry;
use crate::support::*;

/// Writers that never let up must not grow the WAL without bound. SQLite restarts
/// the WAL only when a write begins after every frame was checkpointed, which never
/// happens by itself under steady writes; the store arranges it (see
/// `store::sqlite::checkpoint`). Without that, this load (~41,000 entries of 3 KiB,
/// about 14 KiB of WAL each) leaves a WAL of about 500 MiB, never restarted.
///
/// The WAL header's checkpoint sequence number (bytes 12–15) counts restarts: the
/// test asserts the mechanism (restarts happen under load) and, loosely, the result
/// (the WAL stays well under what it reaches without them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_bounded_under_steady_writes() {
    const WRITERS: u64 = 64;
    const PER_WRITER: u64 = 640;
    let h = StoreHandle::new(Backend::Embedded);
    let store = h.open().await;
    let wal = h.dir.path().join("data").join("hookgate.db-wal");
    let body = Bytes::from(vec![b'x'; 3000]);

    let done = Arc::new(AtomicBool::new(false));
    let largest = Arc::new(AtomicU64::new(0));
    let monitor = {
        let (done, largest, wal) = (done.clone(), largest.clone(), wal.clone());
        tokio::spawn(async move {
            // Checkpoint sequence numbers seen in the WAL header.
            let mut sequences = std::collections::BTreeSet::new();
            while !done.load(Ordering::SeqCst) {
                if let Ok(m) = std::fs::metadata(&wal) {
                    largest.fetch_max(m.len(), Ordering::SeqCst);
                }
                let mut header = [0u8; 16];
                if let Ok(mut f) = std::fs::File::open(&wal)
                    && std::io::Read::read_exact(&mut f, &mut header).is_ok()
                {
                    sequences.insert(u32::from_be_bytes([
                        header[12], header[13], header[14], header[15],
                    ]));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            sequences.len()
        })
    };
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (store, body) = (store.clone(), body.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..PER_WRITER {
                let e = NewEntry {
                    headers: Vec::new(),
                    body: body.clone(),
                    ..entry("s", &format!("evt_{w}_{i}"))
                };
                assert!(matches!(store.accept(e).await, Ok(Accepted::New(_))));
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    done.store(true, Ordering::SeqCst);
    let sequences = monitor.await.expect("monitor");

    assert_eq!(store.count("s").await.unwrap(), WRITERS * PER_WRITER);
    let largest = largest.load(Ordering::SeqCst);
    assert!(
        sequences >= 3,
        "the WAL restarted {} times under load",
        sequences.saturating_sub(1)
    );
    // The WAL restarts at ~16 MiB; it may overshoot by what is written while the
    // checkpointer catches up, more on a slow disk, but nowhere near 500 MiB.
    assert!(
        largest < 300 * 1024 * 1024,
        "the WAL grew to {} MiB",
        largest / (1024 * 1024)
    );
    store.close().await;
}

/// The mode bits of `path`.
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Every file in `dir` with its mode, by name.
fn file_modes(dir: &std::path::Path) -> Vec<(String, u32)> {
    let mut files: Vec<(String, u32)> = std::fs::read_dir(dir)
        .expect("read the store directory")
        .map(|e| {
            let e = e.expect("directory entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                mode(&e.path()),
            )
        })
        .collect();
    files.sort();
    files
}

/// Accept one stripe webhook through `gw`, so the database and its WAL hold it.
async fn accept_one(ingest: &str, event: &str) {
    let (status, json) = post_stripe(&http(), ingest, event).await;
    assert_eq!(status, 200, "{json}");
}

/// Webhook bodies carry customer data: the store directory is 0700 and its files
/// 0600 even under umask 000 (set in the child only: the umask is process-wide), and
/// an older run's looser modes are tightened at start, with a log line for each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_files_are_private_whatever_the_umask() {
    use std::os::unix::process::CommandExt as _;
    let h = StoreHandle::new(Backend::Embedded);
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg_path = config_file(&h, dir.path());
    let data = h.dir.path().join("data");
    let umask_000 = |cmd: &mut std::process::Command| {
        // SAFETY: umask is async-signal-safe and touches no memory of ours.
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0);
                Ok(())
            });
        }
    };

    let mut gw = ChildGateway::spawn_with(&cfg_path, &[], &dir.path().join("log1"), umask_000);
    accept_one(&gw.ingest, "evt_private_1").await;
    // SIGKILL keeps the WAL and the shared-memory file in place (a clean stop removes
    // them), so the restart below finds every kind of file an older run can leave.
    gw.kill();
    assert_eq!(mode(&data), 0o700, "the store directory");
    let files = file_modes(&data);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["hookgate.db", "hookgate.db-shm", "hookgate.db-wal"],
        "{files:?}"
    );
    for (name, m) in &files {
        assert_eq!(*m, 0o600, "{name} is {m:04o}");
    }

    // What an older release left: a group-writable directory, readable files.
    set_mode(&data, 0o775);
    for (name, _) in &files {
        set_mode(&data.join(name), 0o664);
    }
    let log = dir.path().join("log2");
    let gw = ChildGateway::spawn_with(&cfg_path, &[], &log, umask_000);
    accept_one(&gw.ingest, "evt_private_2").await;
    assert_eq!(mode(&data), 0o700, "the store directory, tightened");
    for (name, m) in file_modes(&data) {
        assert_eq!(m, 0o600, "{name} is {m:04o} after the restart");
    }
    let text = std::fs::read_to_string(&log).expect("log");
    for name in ["data", "hookgate.db", "hookgate.db-wal", "hookgate.db-shm"] {
        assert!(
            text.lines()
                .any(|l| l.contains("made it private") && l.contains(&format!("/{name} "))),
            "no log line says {name} was tightened:\n{text}"
        );
    }
}

/// A store directory writable by others may already hold someone else's files:
/// `hookgate serve` refuses it, naming the path and the mode, and creates nothing.
#[test]
fn a_world_writable_store_directory_is_refused() {
    let h = StoreHandle::new(Backend::Embedded);
    let data = h.dir.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    set_mode(&data, 0o777);
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg_path = config_file(&h, dir.path());

    let (status, stderr) = serve_until_it_exits(&cfg_path, "on a world-writable store directory");
    assert!(!status.success(), "exit status {status}: {stderr}");
    let expected = format!(
        "store directory {} is writable by others (mode 0777)",
        data.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(stderr.contains("chmod 700"), "{stderr}");
    assert!(file_modes(&data).is_empty(), "files were created in it");
    assert_eq!(mode(&data), 0o777, "the directory was changed");
}

// ---------------------------------------------------------------------------
// A store written before routes.
// ---------------------------------------------------------------------------

/// The schema of the embedded store before routes (`PRAGMA user_version = 1`), as
/// that release created it: each entry's row held its one delivery's state.
const V1_SCHEMA: &str = r#"
CREATE TABLE entries (
    id              TEXT PRIMARY KEY,
    source          TEXT NOT NULL,
    event_id        TEXT,
    event_type      TEXT,
    dedupe_key      TEXT NOT NULL,
    received_at     INTEGER NOT NULL,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    lease_owner     TEXT,
    lease_until     INTEGER,
    last_error      TEXT,
    budget_start    INTEGER NOT NULL,
    budget_attempts INTEGER NOT NULL DEFAULT 0,
    updated_at      INTEGER NOT NULL,
    headers         TEXT NOT NULL,
    body            BLOB NOT NULL
);
CREATE INDEX entries_due ON entries(source, next_attempt_at) WHERE status = 'pending';
CREATE INDEX entries_done ON entries(status, updated_at) WHERE status != 'pending';
CREATE INDEX entries_source ON entries(source, id);
CREATE INDEX entries_status ON entries(status, id);
CREATE INDEX entries_source_status ON entries(source, status, id);
CREATE TABLE dedupe (
    source     TEXT NOT NULL,
    dkey       TEXT NOT NULL,
    entry_id   TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (source, dkey)
) WITHOUT ROWID;
CREATE INDEX dedupe_expiry ON dedupe(expires_at);
CREATE TABLE attempts (
    entry_id    TEXT NOT NULL,
    n           INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    status_code INTEGER,
    error       TEXT,
    latency_ms  INTEGER,
    PRIMARY KEY (entry_id, n)
) WITHOUT ROWID;
CREATE TABLE audit (
    entry_id TEXT NOT NULL,
    at       INTEGER NOT NULL,
    action   TEXT NOT NULL,
    actor    TEXT,
    note     TEXT
);
CREATE INDEX audit_entry ON audit(entry_id, at);
CREATE TABLE sources (
    name   TEXT PRIMARY KEY,
    paused INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE stats (
    source     TEXT PRIMARY KEY,
    received   INTEGER NOT NULL DEFAULT 0,
    duplicates INTEGER NOT NULL DEFAULT 0,
    unverified INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
"#;

/// The source of the fixture's entries (no configured source: a gateway started on
/// the fixture delivers none of them).
const LEGACY: &str = "legacy";

/// What the fixture holds, as the old store had it.
struct V1Fixture {
    /// Pending, one failed attempt, due.
    pending: NewEntry,
    /// Pending, leased by a run that died (its lease runs for another hour).
    leased: NewEntry,
    /// Delivered at the second attempt (the first one's error still on its row).
    delivered: NewEntry,
    /// Replayed once (budget from then, after one attempt), then dead after two more.
    dead: NewEntry,
    /// Times (unix ms) the fixture's rows use.
    now: i64,
}

impl V1Fixture {
    fn new() -> V1Fixture {
        let now = hookgate::clock::system_now_ms();
        let at = |key: &str, ago: i64| crate::conformance::entry_at(LEGACY, key, now - ago, "x");
        V1Fixture {
            pending: at("evt_pending", 60_000),
            leased: at("evt_leased", 50_000),
            delivered: at("evt_delivered", 40_000),
            dead: at("evt_dead", 20_000),
            now,
        }
    }

    /// Write the fixture as the store before routes did, in the store directory
    /// `data`: schema, entries, dedupe keys, attempts, audit, counters, a paused
    /// source, `user_version = 1`.
    fn write(&self, data: &std::path::Path) {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(data)
            .expect("create the store directory");
        let db = rusqlite::Connection::open(data.join("hookgate.db")).expect("create the db");
        db.execute_batch(V1_SCHEMA).expect("the v1 schema");
        let now = self.now;
        // (entry, status, attempts, next attempt, lease until, last error, budget
        // start, budget attempts, updated at)
        type Row<'a> = (
            &'a NewEntry,
            &'a str,
            i64,
            Option<i64>,
            Option<i64>,
            Option<&'a str>,
            i64,
            i64,
            i64,
        );
        let rows: [Row<'_>; 4] = [
            (
                &self.pending,
                "pending",
                1,
                Some(now - 30_000),
                None,
                Some("HTTP 503"),
                self.pending.received_at,
                0,
                now - 31_000,
            ),
            (
                &self.leased,
                "pending",
                0,
                Some(self.leased.received_at),
                Some(now + 3_600_000),
                None,
                self.leased.received_at,
                0,
                self.leased.received_at,
            ),
            (
                &self.delivered,
                "delivered",
                2,
                None,
                None,
                Some("HTTP 500"),
                self.delivered.received_at,
                0,
                now - 35_000,
            ),
            (
                &self.dead,
                "dead",
                3,
                None,
                None,
                Some("refused"),
                now - 15_000,
                1,
                now - 10_000,
            ),
        ];
        for (e, status, attempts, next, lease_until, error, budget_start, budget_n, updated) in rows
        {
            db.execute(
                "INSERT INTO entries (id, source, event_id, event_type, dedupe_key, received_at,
                     status, attempts, next_attempt_at, lease_owner, lease_until, last_error,
                     budget_start, budget_attempts, updated_at, headers, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
                         '[[\"content-type\",\"application/json\"]]', ?16)",
                rusqlite::params![
                    e.id,
                    e.source,
                    e.event_id,
                    e.event_type,
                    e.dedupe_key,
                    e.received_at,
                    status,
                    attempts,
                    next,
                    lease_until.map(|_| "token-of-a-dead-run"),
                    lease_until,
                    error,
                    budget_start,
                    budget_n,
                    updated,
                    e.body.as_ref(),
                ],
            )
            .expect("an entry");
            db.execute(
                "INSERT INTO dedupe (source, dkey, entry_id, expires_at) VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![e.source, e.dedupe_key, e.id, now + 3_600_000],
            )
            .expect("a dedupe key");
            for n in 1..=attempts {
                let code = if n == attempts && status == "delivered" {
                    200
                } else {
                    500
                };
                db.execute(
                    "INSERT INTO attempts (entry_id, n, at, status_code, error, latency_ms)
                     VALUES (?1, ?2, ?3, ?4, NULL, 7)",
                    rusqlite::params![e.id, n, e.received_at + n * 1_000, code],
                )
                .expect("an attempt");
            }
        }
        db.execute(
            "INSERT INTO audit (entry_id, at, action, actor, note)
             VALUES (?1, ?2, 'replay', 'alice', NULL)",
            rusqlite::params![self.dead.id, now - 15_000],
        )
        .expect("an audit row");
        db.execute_batch(&format!(
            "INSERT INTO stats (source, received, duplicates, unverified)
                 VALUES ('{LEGACY}', 4, 1, 2);
             INSERT INTO sources (name, paused) VALUES ('quiet', 1), ('{LEGACY}', 0);
             PRAGMA user_version = 1;"
        ))
        .expect("counters, pauses and the version");
    }

    fn ids(&self) -> [&str; 4] {
        [
            &self.pending.id,
            &self.leased.id,
            &self.delivered.id,
            &self.dead.id,
        ]
    }
}

/// `PRAGMA user_version` of the store in `data` (closed).
fn schema_version(data: &std::path::Path) -> i64 {
    rusqlite::Connection::open(data.join("hookgate.db"))
        .expect("open the db")
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .expect("user_version")
}

/// Everything the store shows of the fixture's entries, to compare two opens.
async fn snapshot(
    store: &dyn hookgate::store::Store,
    fixture: &V1Fixture,
) -> Vec<(
    Option<hookgate::store::Entry>,
    Vec<hookgate::store::Attempt>,
    Vec<hookgate::store::AuditEvent>,
)> {
    let mut out = Vec::new();
    for id in fixture.ids() {
        out.push((
            store.get(id).await.unwrap(),
            store.attempts(id).await.unwrap(),
            store.audit(id).await.unwrap(),
        ));
    }
    out
}

/// A data directory written before routes opens with the new store: each entry has
/// one delivery through the default route holding its old status, attempts, budget
/// and lease; its attempts went through the default route; the pending ones are
/// delivered through it (the leased one once the dead run's lease is released at
/// start); and a second open changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_written_before_routes_opens_with_one_default_delivery_per_entry() {
    use hookgate::store::{
        Accepted, Attempt, AuditEvent, Completion, DEFAULT_ROUTE, Delivery, HousekeepingPass,
        PauseTarget, RouteStats, Status,
    };
    let h = StoreHandle::new(Backend::Embedded);
    let data = h.dir.path().join("data");
    let fx = V1Fixture::new();
    fx.write(&data);
    let now = fx.now;

    let store = h.open().await;
    let one = |status, attempts, next, last_error: Option<&str>, budget_start, budget_n| {
        vec![Delivery {
            route: DEFAULT_ROUTE.to_string(),
            status,
            attempts,
            next_attempt_at: next,
            last_error: last_error.map(str::to_string),
            last_failure: None,
            budget_start,
            budget_attempts: budget_n,
            order: None,
        }]
    };
    let e = stored_entry(&*store, &fx.pending.id).await;
    assert_eq!(
        (
            e.status,
            e.attempts,
            e.next_attempt_at,
            e.last_error.as_deref()
        ),
        (Status::Pending, 1, Some(now - 30_000), Some("HTTP 503"))
    );
    assert_eq!(
        e.deliveries,
        one(
            Status::Pending,
            1,
            Some(now - 30_000),
            Some("HTTP 503"),
            fx.pending.received_at,
            0
        )
    );
    assert_eq!(
        (e.body.clone(), e.headers.clone()),
        (fx.pending.body.clone(), fx.pending.headers.clone())
    );
    let e = stored_entry(&*store, &fx.leased.id).await;
    assert_eq!(
        e.deliveries,
        one(
            Status::Pending,
            0,
            Some(fx.leased.received_at),
            None,
            fx.leased.received_at,
            0
        )
    );
    let e = stored_entry(&*store, &fx.delivered.id).await;
    assert_eq!(
        (
            e.status,
            e.attempts,
            e.next_attempt_at,
            e.last_error.as_deref()
        ),
        (Status::Delivered, 2, None, None),
        "a delivered entry's summary names no error"
    );
    assert_eq!(
        e.deliveries,
        one(
            Status::Delivered,
            2,
            None,
            Some("HTTP 500"),
            fx.delivered.received_at,
            0
        )
    );
    let e = stored_entry(&*store, &fx.dead.id).await;
    assert_eq!(
        (e.status, e.attempts, e.last_error.as_deref()),
        (Status::Dead, 3, Some("refused"))
    );
    assert_eq!(
        e.deliveries,
        one(Status::Dead, 3, None, Some("refused"), now - 15_000, 1)
    );
    // The old attempts went through the default route.
    let attempts = store.attempts(&fx.dead.id).await.unwrap();
    assert_eq!(attempts.len(), 3);
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(
            *a,
            Attempt {
                route: DEFAULT_ROUTE.to_string(),
                n: u32::try_from(i + 1).unwrap(),
                at: fx.dead.received_at + 1_000 * (i as i64 + 1),
                status_code: Some(500),
                failure: None,
                error: None,
                latency_ms: 7,
                answer: None,
            }
        );
    }
    assert_eq!(
        store.audit(&fx.dead.id).await.unwrap(),
        vec![AuditEvent {
            at: now - 15_000,
            action: "replay".into(),
            actor: "alice".into(),
            note: None,
            route: None,
            session: None,
            client: None,
        }]
    );
    // Counters, pauses and dedupe keys are as they were.
    let st = store.stats(LEGACY).await.unwrap();
    assert_eq!((st.received, st.duplicates, st.unverified), (4, 1, 2));
    assert_eq!(
        (st.pending, st.delivered, st.dead, st.oldest_pending_at),
        (2, 1, 1, Some(fx.pending.received_at))
    );
    assert_eq!(
        store.route_stats(LEGACY, DEFAULT_ROUTE).await.unwrap(),
        RouteStats {
            pending: 2,
            delivered: 1,
            dead: 1,
            discarded: 0,
            oldest_pending_at: Some(fx.pending.received_at),
            blocked_keys: 0,
        }
    );
    assert_eq!(
        store.paused().await.unwrap(),
        vec![PauseTarget {
            source: "quiet".into(),
            route: None
        }]
    );
    let first = snapshot(&*store, &fx).await;
    store.close().await;
    drop(store);
    assert_eq!(schema_version(&data), 10, "migrated to the latest schema");

    // A second open migrates nothing more.
    let store = h.open().await;
    assert_eq!(
        snapshot(&*store, &fx).await,
        first,
        "the second open changed nothing"
    );
    assert_eq!(
        store.accept(fx.pending.clone()).await.unwrap(),
        Accepted::Duplicate(fx.pending.id.clone()),
        "the dedupe keys were kept"
    );
    // The dead run's lease was kept: the leased entry waits for it, or for a start.
    let t = hookgate::clock::system_now_ms();
    let lease = std::time::Duration::from_secs(30);
    let claims = store
        .claim(LEGACY, DEFAULT_ROUTE, "w", t, 10, lease)
        .await
        .unwrap();
    let ids: Vec<&str> = claims.iter().map(|c| c.entry.id.as_str()).collect();
    assert_eq!(ids, [fx.pending.id.as_str()]);
    // Start takes back every lease (this test's own claim's too).
    store
        .housekeeping(HousekeepingPass::Start, &[LEGACY.to_string()])
        .await
        .unwrap();
    let claims = store
        .claim(LEGACY, DEFAULT_ROUTE, "w", t, 10, lease)
        .await
        .unwrap();
    let mut ids: Vec<&str> = claims.iter().map(|c| c.entry.id.as_str()).collect();
    ids.sort();
    let mut want = [fx.pending.id.as_str(), fx.leased.id.as_str()];
    want.sort();
    assert_eq!(ids, want, "both pending entries, through the default route");
    for c in &claims {
        assert_eq!(c.delivery.route, DEFAULT_ROUTE);
        let done = Completion::Delivered {
            attempt: Attempt {
                route: DEFAULT_ROUTE.to_string(),
                n: c.delivery.attempts + 1,
                at: t,
                status_code: Some(200),
                failure: None,
                error: None,
                latency_ms: 3,
                answer: None,
            },
        };
        assert!(store.complete(c, "w", done, t).await.unwrap());
    }
    let e = stored_entry(&*store, &fx.pending.id).await;
    assert_eq!((e.status, e.attempts), (Status::Delivered, 2));
    assert_eq!(
        store
            .attempts(&fx.pending.id)
            .await
            .unwrap()
            .iter()
            .map(|a| (a.route.as_str(), a.n))
            .collect::<Vec<_>>(),
        [(DEFAULT_ROUTE, 1), (DEFAULT_ROUTE, 2)]
    );
    assert_eq!(
        stored_entry(&*store, &fx.leased.id).await.status,
        Status::Delivered
    );
    assert_eq!(
        store.count_status(LEGACY, Status::Pending).await.unwrap(),
        0
    );
    store.close().await;
    assert_eq!(schema_version(&data), 10, "migrated to the latest schema");
}

/// The stored entry `id`, which must exist.
async fn stored_entry(store: &dyn hookgate::store::Store, id: &str) -> hookgate::store::Entry {
    store.get(id).await.unwrap().expect("the entry")
}

/// The migration is logged once, by the gateway that runs it, with how many entries
/// it moved; a restart logs nothing about it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_move_to_routes_is_logged_once() {
    let h = StoreHandle::new(Backend::Embedded);
    let fx = V1Fixture::new();
    fx.write(&h.dir.path().join("data"));
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg_path = config_file(&h, dir.path());
    let env = [("HOOKGATE_LOG__FORMAT", "json")];
    let migration_lines = |log: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(log)
            .expect("the log")
            .lines()
            .filter(|l| l.contains("migrated the store to routes"))
            .map(str::to_string)
            .collect()
    };
    for (run, expected) in [("first", 1), ("second", 0)] {
        let log = dir.path().join(format!("{run}.log"));
        let mut gw = ChildGateway::spawn(&cfg_path, &env, &log);
        gw.terminate();
        let lines = migration_lines(&log);
        assert_eq!(lines.len(), expected, "{run} run: {lines:?}");
        if let Some(line) = lines.first() {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
            // Events are flattened into the line (`log.format = "json"`).
            assert_eq!(v["level"], "INFO", "{line}");
            assert_eq!(v["entries"], 4, "{line}");
            assert_eq!(v["to_version"], 2, "{line}");
        }
    }
}
