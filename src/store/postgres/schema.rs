//! The PostgreSQL store's schema: its tables and indexes, in the schema named by
//! `store.prefix` (two deployments with different prefixes share a database), as
//! versioned migrations applied once, in order, each in a transaction of its own.
//!
//! `migrations` records the versions applied. Migrations are one-way: a release
//! refuses a schema a newer release migrated ([`NewerSchema`]). Gateways starting
//! together migrate one at a time (an advisory lock), so each migration is applied
//! and logged once.

use deadpool_postgres::Object;

use crate::store::{Backend, StoreError};

/// The migrations, in order; version `n` is `MIGRATIONS[n - 1]`.
///
/// 1. Everything the store contract needs ([`V1`]).
/// 2. The requests ingest refused ([`V2`]).
/// 3. The values of the sources' indexed pointers ([`V3`]).
/// 4. The providers' last good address ranges ([`V4`]).
/// 5. The armed secret handshakes and the secrets they established ([`V5`]).
/// 6. An armed handshake's token ([`V6`]).
/// 7. The gateways' heartbeats, who holds a lease, the configuration salt ([`V7`]).
/// 8. The route registry ([`V8`]).
/// 9. The failure kind of each attempt and of a delivery's last ([`V9`]).
/// 10. How each entry came, and reconciliation's leases and states ([`V10`]).
/// 11. A broker's answer to each attempt ([`V11`]).
const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11];

/// What a queue destination answered an attempt (a stream and its sequence, a
/// confirm). Attempts recorded before have none.
const V11: &str = r#"
ALTER TABLE attempts ADD COLUMN answer TEXT;
"#;

/// How an entry came (`store::Origin`, by its name): `received` for every entry
/// stored before. (A column with a constant default rewrites no row.) `reconcile`
/// keeps, per source, reconciliation's lease (its `holder` and `until`, both NULL
/// once released) and the state its holder saved last; retention never reads it.
const V10: &str = r#"
ALTER TABLE entries ADD COLUMN origin TEXT NOT NULL DEFAULT 'received';
CREATE TABLE reconcile (
    source TEXT PRIMARY KEY,
    holder TEXT,
    until  BIGINT,
    state  TEXT
);
"#;

/// The kind of a failed attempt (`crate::failure`, by its canonical name), and of
/// the last failed attempt of a delivery, which its dead letter is grouped by.
/// Attempts recorded before have none. (Adding a nullable column rewrites no row.)
const V9: &str = r#"
ALTER TABLE attempts ADD COLUMN failure TEXT;
ALTER TABLE deliveries ADD COLUMN last_failure TEXT;
"#;

/// The route registry (`store::routes`): every route a gateway on the store had
/// in force, its destination's fingerprint, and when it was retired.
const V8: &str = r#"
CREATE TABLE known_routes (
    source      TEXT NOT NULL,
    route       TEXT NOT NULL,
    destination TEXT NOT NULL,
    retired_at  BIGINT,
    PRIMARY KEY (source, route)
);
"#;

/// The gateways sharing the database (`store::gateways`): one row per gateway with
/// its last heartbeat by the server's clock; `heartbeat_clock` the time of the
/// newest heartbeat and when heartbeats last resumed after a silence of them all (a
/// failover), from which a gateway's silence is counted. `deliveries.lease_holder`
/// names the gateway a lease was taken by, so that a dead gateway's leases are
/// ended in one statement; no index names it, so a claim stays a HOT update.
/// `store_settings` keeps the configuration salt.
const V7: &str = r#"
CREATE TABLE gateways (
    id         TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    version    TEXT NOT NULL,
    started    BIGINT NOT NULL,
    last_seen  BIGINT NOT NULL,
    taken_over BOOLEAN NOT NULL DEFAULT false
);
CREATE TABLE heartbeat_clock (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    last_beat  BIGINT NOT NULL,
    resumed_at BIGINT NOT NULL
);
CREATE TABLE store_settings (
    name  TEXT PRIMARY KEY,
    value BYTEA NOT NULL
);
ALTER TABLE deliveries ADD COLUMN lease_holder TEXT;
"#;

/// An armed handshake takes only the handshake that presents its token
/// (`store::secrets`): `armed_handshakes` keeps each arming with the SHA-256 of its
/// token and replaces `handshakes`, whose armings had none and are not honoured (an
/// arming with no token takes the handshake of anyone polling the endpoint; the
/// operator arms again). A new table rather than a column: a gateway of an older
/// release still running on the store reads `handshakes`, so it finds neither an
/// arming of this release to take a tokenless handshake in (the table is gone, and
/// its handshakes fail) nor one of its own that this release would honour.
const V6: &str = r#"
DROP TABLE handshakes;
CREATE TABLE armed_handshakes (
    source     TEXT PRIMARY KEY,
    until      BIGINT NOT NULL,
    token_hash TEXT NOT NULL
);
"#;

/// The armed secret handshakes and the secrets providers established in them
/// (`store::secrets`).
const V5: &str = r#"
CREATE TABLE handshakes (
    source TEXT PRIMARY KEY,
    until  BIGINT NOT NULL
);
CREATE TABLE established_secrets (
    source         TEXT NOT NULL,
    id             TEXT NOT NULL,
    secret         TEXT NOT NULL,
    established_at BIGINT NOT NULL,
    PRIMARY KEY (source, id)
);
"#;

/// The last good address ranges fetched per URL (`crate::allowlist`), so that a
/// gateway starting without network still applies them.
const V4: &str = r#"
CREATE TABLE provider_ranges (
    url        TEXT PRIMARY KEY,
    ranges     TEXT NOT NULL,
    fetched_at BIGINT NOT NULL
);
"#;

/// The values of the sources' indexed pointers (`store::search`): one row per entry
/// and index, keyed so a lookup is a range read backwards; `entry_index_entry` finds
/// an entry's rows when retention removes it.
const V3: &str = r#"
CREATE TABLE entry_index (
    source   TEXT COLLATE "C" NOT NULL,
    name     TEXT COLLATE "C" NOT NULL,
    value    TEXT COLLATE "C" NOT NULL,
    entry_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (source, name, value, entry_id)
);
CREATE INDEX entry_index_entry ON entry_index (entry_id);
"#;

/// The requests ingest refused (`store::rejection`): a row per sampled refusal,
/// each group (`grp`, `reason`) trimmed to its newest rows, and a count per group
/// and hour.
const V2: &str = r#"
CREATE TABLE rejections (
    id      TEXT COLLATE "C" PRIMARY KEY,
    at      BIGINT NOT NULL,
    grp     TEXT COLLATE "C" NOT NULL,
    source  TEXT COLLATE "C" NOT NULL,
    known   BOOLEAN NOT NULL,
    reason  TEXT COLLATE "C" NOT NULL,
    status  INTEGER NOT NULL,
    client  TEXT,
    size    BIGINT,
    digest  TEXT,
    headers TEXT NOT NULL,
    body    BYTEA
);
CREATE INDEX rejections_group ON rejections (grp, reason, id);
CREATE INDEX rejections_at ON rejections (at);
CREATE TABLE rejection_counts (
    grp     TEXT COLLATE "C" NOT NULL,
    reason  TEXT COLLATE "C" NOT NULL,
    hour    BIGINT NOT NULL,
    count   BIGINT NOT NULL,
    last_at BIGINT NOT NULL,
    PRIMARY KEY (grp, reason, hour)
);
"#;

/// The first schema, shaped like the embedded store's (`store::sqlite::schema`),
/// for a server shared by several gateways:
///
/// * Text that is compared or ordered (ids, ordering keys) is `COLLATE "C"`: byte
///   order, as UUIDv7 ids sort by arrival, whatever the database's locale.
/// * `deliveries_due` holds only what a claim may take (pending, not behind a line's
///   head), in due order; `deliveries_route` serves listings, counts and dead letters.
///   `deliveries_line` holds the members of ordered lines, `deliveries_holding` the
///   leases that may hold a line's head back (`holds`: a lease on a delivery
///   discarded, or put behind, while its attempt was in flight),
///   `deliveries_retried` the retries a half-open breaker's probe looks for first
///   (see `lines` and `delivery`).
/// * A claim changes only the lease columns, which no index names (`holds` is
///   derived from them but stays false for a line's head), and `deliveries` leaves
///   a fifth of each page free: a claim rewrites its row in place (a HOT update)
///   without a new entry in any index.
/// * `counts` is appended to, never updated: each accept batch, completion and
///   verification failure adds a row (per source and minute), so that gateways
///   never queue on one hot counter row; the purge folds each past minute into one
///   row, and folds minutes past the activity retention into `totals`.
/// * `paces` is `UNLOGGED`: a pace is not durable (the contract allows it), and
///   costs no WAL.
const V1: &str = r#"
CREATE TABLE entries (
    id          TEXT COLLATE "C" PRIMARY KEY,
    source      TEXT NOT NULL,
    event_id    TEXT,
    event_type  TEXT,
    dedupe_key  TEXT NOT NULL,
    received_at BIGINT NOT NULL,
    status      TEXT NOT NULL,
    updated_at  BIGINT NOT NULL,
    headers     TEXT NOT NULL,
    body        BYTEA NOT NULL
);
-- Bodies past the TOAST threshold compressed with lz4 where the server has it
-- (pglz, the default, took a tenth of the server's time under load).
DO $$ BEGIN
    ALTER TABLE entries ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN NULL;
END $$;
CREATE INDEX entries_source ON entries (source, id);
CREATE INDEX entries_source_status ON entries (source, status, id);
CREATE INDEX entries_done ON entries (status, updated_at) WHERE status <> 'pending';

CREATE TABLE dedupe (
    source     TEXT NOT NULL,
    dkey       TEXT NOT NULL,
    entry_id   TEXT COLLATE "C" NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (source, dkey)
);
CREATE INDEX dedupe_expiry ON dedupe (expires_at);

CREATE TABLE deliveries (
    entry_id        TEXT COLLATE "C" NOT NULL,
    route           TEXT NOT NULL,
    position        INTEGER NOT NULL,
    source          TEXT NOT NULL,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT,
    lease_owner     TEXT,
    lease_until     BIGINT,
    last_error      TEXT,
    budget_start    BIGINT NOT NULL,
    budget_attempts INTEGER NOT NULL DEFAULT 0,
    updated_at      BIGINT NOT NULL,
    order_key       TEXT COLLATE "C",
    order_block     BOOLEAN NOT NULL DEFAULT false,
    behind          BOOLEAN NOT NULL DEFAULT false,
    holds           BOOLEAN GENERATED ALWAYS AS (
        order_key IS NOT NULL AND lease_owner IS NOT NULL AND (status <> 'pending' OR behind)
    ) STORED,
    PRIMARY KEY (entry_id, route)
) WITH (fillfactor = 80);
CREATE INDEX deliveries_due ON deliveries (source, route, next_attempt_at)
    WHERE status = 'pending' AND NOT behind;
CREATE INDEX deliveries_route ON deliveries (source, route, status, entry_id);
CREATE INDEX deliveries_line ON deliveries (source, route, order_key, entry_id)
    WHERE order_key IS NOT NULL AND (status = 'pending' OR (status = 'dead' AND order_block));
CREATE INDEX deliveries_holding ON deliveries (source, route, order_key) WHERE holds;
CREATE INDEX deliveries_retried ON deliveries (source, route, next_attempt_at)
    WHERE status = 'pending' AND attempts > 0;

CREATE TABLE attempts (
    entry_id    TEXT COLLATE "C" NOT NULL,
    route       TEXT NOT NULL,
    n           INTEGER NOT NULL,
    at          BIGINT NOT NULL,
    status_code INTEGER,
    error       TEXT,
    latency_ms  BIGINT,
    PRIMARY KEY (entry_id, route, n)
);

CREATE TABLE audit (
    seq      BIGSERIAL PRIMARY KEY,
    entry_id TEXT COLLATE "C" NOT NULL,
    at       BIGINT NOT NULL,
    action   TEXT NOT NULL,
    actor    TEXT,
    note     TEXT,
    route    TEXT,
    session  TEXT,
    client   TEXT
);
CREATE INDEX audit_entry ON audit (entry_id, at);

CREATE TABLE paused_sources (
    name TEXT PRIMARY KEY
);
CREATE TABLE paused_routes (
    source TEXT NOT NULL,
    route  TEXT NOT NULL,
    PRIMARY KEY (source, route)
);

CREATE TABLE counts (
    source     TEXT NOT NULL,
    minute     BIGINT NOT NULL,
    received   BIGINT NOT NULL DEFAULT 0,
    duplicates BIGINT NOT NULL DEFAULT 0,
    unverified BIGINT NOT NULL DEFAULT 0,
    delivered  BIGINT NOT NULL DEFAULT 0,
    failed     BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX counts_minute ON counts (source, minute);
CREATE TABLE totals (
    source     TEXT PRIMARY KEY,
    received   BIGINT NOT NULL DEFAULT 0,
    duplicates BIGINT NOT NULL DEFAULT 0,
    unverified BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE control_audit (
    seq     BIGSERIAL PRIMARY KEY,
    at      BIGINT NOT NULL,
    action  TEXT NOT NULL,
    source  TEXT NOT NULL,
    route   TEXT,
    actor   TEXT NOT NULL,
    session TEXT,
    client  TEXT
);
CREATE TABLE revoked_sessions (
    id         TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
CREATE TABLE console_settings (
    name  TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);

CREATE UNLOGGED TABLE paces (
    source TEXT NOT NULL,
    route  TEXT NOT NULL,
    tat    BIGINT NOT NULL,
    PRIMARY KEY (source, route)
);
"#;

/// A schema migrated by a newer release: its migrations are one-way, and this
/// release would misread what it wrote.
#[derive(Debug, thiserror::Error)]
#[error(
    "schema {schema:?} is at version {found}, newer than this release knows ({known}): a newer hookgate migrated it, and migrations are one-way; run that release or a later one"
)]
pub(crate) struct NewerSchema {
    schema: String,
    found: i32,
    known: usize,
}

/// Create `schema` when missing and apply the migrations it has not seen, each in
/// its own transaction, under an advisory lock that gateways starting together
/// take in turn. Each applied migration is logged once; a schema newer than
/// [`MIGRATIONS`] is refused.
pub(super) async fn migrate(conn: &mut Object, schema: &str) -> Result<(), StoreError> {
    let lock = super::lines::lock_id(&["hookgate-migrate", schema]);
    let known = MIGRATIONS.len();
    loop {
        let tx = conn.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock])
            .await?;
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema};
             CREATE TABLE IF NOT EXISTS {schema}.migrations (
                 version    INTEGER PRIMARY KEY,
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
             );"
        ))
        .await?;
        let found: i32 = tx
            .query_one(
                &format!("SELECT coalesce(max(version), 0) FROM {schema}.migrations"),
                &[],
            )
            .await?
            .get(0);
        let from = usize::try_from(found).unwrap_or(0);
        if from > known {
            return Err(StoreError::backend(
                Backend::Postgres,
                NewerSchema {
                    schema: schema.to_string(),
                    found,
                    known,
                },
            ));
        }
        let Some(sql) = MIGRATIONS.get(from) else {
            return Ok(());
        };
        tx.batch_execute(&format!("SET LOCAL search_path TO {schema}; {sql}"))
            .await?;
        let to = i32::try_from(from + 1).unwrap_or(i32::MAX);
        tx.execute(
            &format!("INSERT INTO {schema}.migrations (version) VALUES ($1)"),
            &[&to],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(schema, version = to, "postgres store: schema migrated");
    }
}
