//! What can go wrong in the store, as types.
//!
//! Callers decide by variant, never by text: ingest and the admin API answer 503 for
//! every store error (the provider or the operator retries), `/readyz` tells
//! [`StoreError::Evicting`], [`StoreError::NoSpace`] and
//! [`StoreError::ReplicasMissing`] apart, and a stopped store is [`StoreError::Stopped`].
//! A backend's own error is kept as the cause ([`StoreError::Backend`]), never
//! flattened into text; its type stays in the backend's folder, which converts it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// An error kept as the cause of a [`StoreError`], whatever its type.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The backend an error came from; its name starts the error's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded store (SQLite).
    Sqlite,
    Redis,
    Postgres,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Sqlite => "sqlite",
            Backend::Redis => "redis",
            Backend::Postgres => "postgres",
        })
    }
}

/// A store failure. Every variant answers 503 at ingest: the provider retries.
///
/// Variants that keep a cause show it in their text as well: log lines print an
/// error's text alone (`error = %e`), and operators need the cause there.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend failed: a query, a command or a script, the connection to it, or
    /// (on the embedded store) a commit or the fsync behind it.
    #[error("{backend}: {source}")]
    Backend {
        backend: Backend,
        #[source]
        source: Cause,
    },
    /// The store's own machinery cannot serve the request: the store is closed, or a
    /// thread, a queue or a lock it needs is gone. Nothing below it reported an error.
    #[error("store unavailable: {0}")]
    Unavailable(&'static str),
    /// A thread or task of the store could not start, or ended without an answer.
    #[error("store unavailable: {what}: {source}")]
    Task {
        what: &'static str,
        #[source]
        source: Cause,
    },
    #[error("store timed out after {0:?}")]
    Timeout(Duration),
    #[error("corrupt entry {id}: {problem}")]
    Corrupt { id: String, problem: String },
    /// A record could not be encoded for storage.
    #[error("cannot encode {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The store stopped for good (the embedded store after a failed fsync).
    #[error(
        "the store stopped after a failed fsync; restart hookgate to recover from what is on disk"
    )]
    Stopped,
    /// The embedded store's directory is writable by others: files may have been
    /// placed in it already, so hookgate neither uses it nor tightens it by itself.
    #[error(
        "store directory {} is writable by others (mode {mode:04o}); check what is in it, then chmod 700 it",
        path.display()
    )]
    WorldWritable { path: PathBuf, mode: u32 },
    /// Redis may evict keys (its `maxmemory-policy` is not `noeviction`): an evicted
    /// dedupe key lets a webhook through twice, an evicted entry loses one that was
    /// acknowledged. Refused at open; `ping` fails with it while it lasts.
    #[error(
        "redis{} runs with maxmemory-policy {policy}: under memory pressure it evicts dedupe keys (a webhook delivered twice) or acknowledged entries (a webhook lost); run it with maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf as deploy/redis.conf does)",
        .node.as_deref().map(|n| format!(" at {n}")).unwrap_or_default()
    )]
    Evicting {
        /// `host:port` of the cluster node; `None` for a single Redis.
        node: Option<String>,
        policy: String,
    },
    /// Fewer replicas than `store.min_replicas` acknowledged an accept's write within
    /// `store.timeout` (Redis `WAIT`). The entries may be stored on the master alone,
    /// so they get no 2xx; the provider's retry is answered `duplicate` once enough
    /// replicas acknowledge it.
    #[error(
        "redis: {acknowledged} of the {wanted} replicas store.min_replicas asks for acknowledged the write in time; it is not acknowledged to the sender (check the replicas' link to the master: INFO replication)"
    )]
    TooFewReplicas { wanted: u32, acknowledged: u32 },
    /// A Redis master has fewer replicas online than `store.min_replicas`: every
    /// accept would wait for them in vain, so `/readyz` answers 503.
    #[error(
        "redis{}: {online} replicas online, store.min_replicas asks for {wanted}: new webhooks are refused until enough replicas are attached and in sync (INFO replication on the master)",
        .node.as_deref().map(|n| format!(" at {n}")).unwrap_or_default()
    )]
    ReplicasMissing {
        /// `host:port` of the cluster master; `None` for a single Redis.
        node: Option<String>,
        wanted: u32,
        online: u32,
    },
    /// The embedded store's filesystem has less than `store.min_free_bytes` free: new
    /// entries are refused, so that the ones already acknowledged can be delivered.
    #[error(
        "the store's filesystem has {free} bytes free, under store.min_free_bytes ({floor}): new webhooks are refused so that acknowledged ones can still be delivered"
    )]
    NoSpace { free: u64, floor: u64 },
    /// The PostgreSQL server cannot keep the promise a 2xx makes (see
    /// [`Unsafe`]): new webhooks are refused and `/readyz` answers 503 until it can.
    #[error("postgres: {0}")]
    Unsafe(Unsafe),
    /// A caller asked for more than the contract takes at once (a dedupe lookup of
    /// more keys, a larger reconciliation state: `store::reconcile`). Nothing was
    /// read or written.
    #[error("store refused {what}: {size}, over the limit of {limit}")]
    TooLarge {
        what: &'static str,
        size: usize,
        limit: usize,
    },
    /// A file or directory of the embedded store could not be created, opened,
    /// inspected or made private.
    #[error("cannot {action} {}", path.display())]
    File {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// The variant's name, for what tells repeated log lines apart (never the
    /// text: it may hold ids).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Backend { .. } => "backend",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Task { .. } => "task",
            StoreError::Timeout(_) => "timeout",
            StoreError::Corrupt { .. } => "corrupt",
            StoreError::Encode { .. } => "encode",
            StoreError::Stopped => "stopped",
            StoreError::WorldWritable { .. } => "world_writable",
            StoreError::Evicting { .. } => "evicting",
            StoreError::NoSpace { .. } => "no_space",
            StoreError::TooFewReplicas { .. } => "too_few_replicas",
            StoreError::ReplicasMissing { .. } => "replicas_missing",
            StoreError::File { .. } => "file",
            StoreError::Unsafe(_) => "unsafe",
            StoreError::TooLarge { .. } => "too_large",
        }
    }

    /// Whether the failure says the store refuses writes (so `/readyz` answers 503),
    /// rather than something wrong with one entry.
    pub fn refuses_writes(&self) -> bool {
        match self {
            StoreError::Backend { .. }
            | StoreError::Unavailable(_)
            | StoreError::Task { .. }
            | StoreError::Timeout(_)
            | StoreError::Stopped
            | StoreError::Evicting { .. }
            | StoreError::NoSpace { .. }
            | StoreError::TooFewReplicas { .. }
            | StoreError::ReplicasMissing { .. }
            | StoreError::File { .. }
            | StoreError::WorldWritable { .. }
            | StoreError::Unsafe(_) => true,
            StoreError::Corrupt { .. }
            | StoreError::Encode { .. }
            | StoreError::TooLarge { .. } => false,
        }
    }

    /// A failure of `backend`, keeping its error as the cause.
    pub(crate) fn backend(backend: Backend, source: impl Into<Cause>) -> StoreError {
        StoreError::Backend {
            backend,
            source: source.into(),
        }
    }
}

/// Why a PostgreSQL server cannot keep the promise a 2xx makes: checked at open, at
/// every housekeeping pass and by `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsafe {
    /// `fsync = off`: a crash of the server's machine loses committed webhooks.
    FsyncOff,
    /// `synchronous_commit = off`: a commit answers before its WAL is on disk.
    SynchronousCommitOff,
    /// `store.require_sync_standby = true`, and no synchronous standby is both
    /// listed (`synchronous_standby_names`) and streaming, or commits do not wait
    /// for one (`synchronous_commit = local`).
    NoSyncStandby {
        /// `synchronous_standby_names` as the server has it.
        names: String,
        /// Standbys streaming as `sync` or `quorum` (`pg_stat_replication`).
        streaming: u64,
        /// `synchronous_commit` as the server has it.
        commit: String,
    },
    /// `store.require_sync_standby = true`, and the server hides its standbys'
    /// state from hookgate's user (it lacks `pg_monitor`).
    StandbysHidden,
    /// The connection reached a server in recovery (a standby): it refuses writes.
    ReadOnly,
}

impl fmt::Display for Unsafe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsafe::FsyncOff => f.write_str(
                "the server runs with fsync = off: a crash of its machine loses acknowledged webhooks; set fsync = on",
            ),
            Unsafe::SynchronousCommitOff => f.write_str(
                "the server runs with synchronous_commit = off: a commit answers before it is on disk; set it to on (or remote_apply)",
            ),
            Unsafe::NoSyncStandby {
                names,
                streaming,
                commit,
            } => write!(
                f,
                "store.require_sync_standby is set, but no synchronous standby confirms commits (synchronous_standby_names = {names:?}, {streaming} streaming as sync or quorum, synchronous_commit = {commit}): a failover could lose acknowledged webhooks, so new ones are refused"
            ),
            Unsafe::StandbysHidden => f.write_str(
                "store.require_sync_standby is set, but the server hides its standbys' state (pg_stat_replication) from hookgate's user; GRANT pg_monitor TO that user",
            ),
            Unsafe::ReadOnly => f.write_str(
                "connected to a server in recovery (a standby), which refuses writes; list the primary's hosts with target_session_attrs=read-write",
            ),
        }
    }
}
