//! What the server must promise before hookgate answers 2xx on its word: commits
//! on disk (`fsync`, `synchronous_commit`), and, with
//! `store.require_sync_standby`, on a synchronous standby too. Checked at open (a
//! server that loses commits on a crash is refused), at every housekeeping pass and
//! by `/readyz`; a change is logged once, when it happens. The verdict is the gauge
//! `hookgate_store_unsafe`, the standbys found `hookgate_store_sync_standbys`.

use std::sync::Mutex;

use deadpool_postgres::GenericClient;

use super::cached::Cached as _;

use crate::store::{StoreError, Unsafe};

/// What the server says about itself: `Ok` when it keeps the promise.
pub(super) async fn check(c: &impl GenericClient, require_sync: bool) -> Result<(), Unsafe> {
    let row = match c
        .query_one_cached(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit'),
                    current_setting('synchronous_standby_names'), pg_is_in_recovery(),
                    (SELECT count(*) FROM pg_stat_replication
                     WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')),
                    (SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NULL)",
            &[],
        )
        .await
    {
        Ok(row) => row,
        // Not the server's word: the caller hears of the failure otherwise.
        Err(_) => return Ok(()),
    };
    let (fsync, commit_text, names): (String, String, String) =
        (row.get(0), row.get(1), row.get(2));
    let (fsync, commit) = (fsync == "on", Commit::of(&commit_text));
    let (recovery, streaming, hidden): (bool, i64, i64) = (row.get(3), row.get(4), row.get(5));
    metrics::gauge!("hookgate_store_sync_standbys").set(streaming as f64);
    if recovery {
        return Err(Unsafe::ReadOnly);
    }
    if !fsync {
        return Err(Unsafe::FsyncOff);
    }
    if commit == Commit::Off {
        return Err(Unsafe::SynchronousCommitOff);
    }
    // Standbys are listed to every user, their state only to those with
    // pg_read_all_stats (pg_monitor has it).
    if require_sync && streaming < 1 && hidden > 0 {
        return Err(Unsafe::StandbysHidden);
    }
    if require_sync && (names.trim().is_empty() || streaming < 1 || commit != Commit::Standby) {
        return Err(Unsafe::NoSyncStandby {
            names,
            streaming: u64::try_from(streaming).unwrap_or(0),
            commit: commit_text,
        });
    }
    Ok(())
}

/// What a commit waits for, by `synchronous_commit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// `off`: nothing; a commit answers before its WAL is on disk.
    Off,
    /// `local`: this server's disk only.
    Local,
    /// `on`, `remote_write`, `remote_apply`: this server's disk and the synchronous
    /// standbys, when `synchronous_standby_names` lists some.
    Standby,
}

impl Commit {
    fn of(setting: &str) -> Commit {
        match setting {
            "off" => Commit::Off,
            "local" => Commit::Local,
            _ => Commit::Standby,
        }
    }
}

/// The last verdict, and its log lines.
#[derive(Debug, Default)]
pub(super) struct Verdict(Mutex<Option<Unsafe>>);

impl Verdict {
    /// Keep `now`, logging a change: at ERROR when the server stops keeping the
    /// promise, at INFO when it keeps it again.
    pub(super) fn set(&self, now: Result<(), Unsafe>) -> Result<(), StoreError> {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = now.err();
        metrics::gauge!("hookgate_store_unsafe").set(if now.is_some() { 1.0 } else { 0.0 });
        if *last != now {
            match &now {
                Some(u) => {
                    tracing::error!(problem = %u, "postgres store: new webhooks are refused")
                }
                None => tracing::info!(
                    "postgres store: the server keeps acknowledged webhooks safe again"
                ),
            }
            last.clone_from(&now);
        }
        match now {
            Some(u) => Err(StoreError::Unsafe(u)),
            None => Ok(()),
        }
    }

    /// The last verdict, as an error when it refuses.
    pub(super) fn get(&self) -> Result<(), StoreError> {
        match &*self.0.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(u) => Err(StoreError::Unsafe(u.clone())),
            None => Ok(()),
        }
    }
}
