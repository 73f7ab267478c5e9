//! What the server must promise before hookgate answers 2xx on its word: commits
//! on disk (`fsync`, `synchronous_commit`), and, with
//! `store.require_sync_standby`, on a synchronous standby too. Checked at open (a
//! server that loses commits on a crash is refused), at every housekeeping pass and
//! by `/readyz`; a change is logged once, when it happens.

use std::sync::Mutex;

use deadpool_postgres::GenericClient;

use crate::store::{StoreError, Unsafe};

/// What the server says about itself: `Ok` when it keeps the promise.
pub(super) async fn check(c: &impl GenericClient, require_sync: bool) -> Result<(), Unsafe> {
    let row = match c
        .query_one(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit'),
                    current_setting('synchronous_standby_names'), pg_is_in_recovery(),
                    (SELECT count(*) FROM pg_stat_replication
                     WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum'))",
            &[],
        )
        .await
    {
        Ok(row) => row,
        // Not the server's word: the caller hears of the failure otherwise.
        Err(_) => return Ok(()),
    };
    let (fsync, commit, names): (String, String, String) = (row.get(0), row.get(1), row.get(2));
    let (recovery, streaming): (bool, i64) = (row.get(3), row.get(4));
    if recovery {
        return Err(Unsafe::ReadOnly);
    }
    if fsync != "on" {
        return Err(Unsafe::FsyncOff);
    }
    if commit == "off" {
        return Err(Unsafe::SynchronousCommitOff);
    }
    if require_sync && (names.trim().is_empty() || streaming < 1 || commit == "local") {
        return Err(Unsafe::NoSyncStandby {
            names,
            streaming: u64::try_from(streaming).unwrap_or(0),
            commit,
        });
    }
    Ok(())
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
