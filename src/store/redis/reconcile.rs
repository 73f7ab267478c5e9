//! The Redis store's part of reconciliation (`store::Reconciling`): dedupe lookups
//! read the dedupe keys as the accept writes them (one `MGET`: a source's keys share
//! its hash tag, so its slot), the origin of an entry is marked with its audit record
//! by `scripts/mark_origin.lua`, and each source's lease and state are one hash,
//! `reconcile`, changed only by `scripts/reconcile.lua`.

use super::RedisStore;
use super::codec::origin_field;
use crate::store::{
    AuditEvent, Backend, Origin, RECOVERED_ACTION, RECOVERED_ACTOR, ReconcileLease, StoreError,
};

impl RedisStore {
    /// Which of `keys` of `source` have a dedupe key, with the entry each names, in
    /// the order asked. A key whose TTL ran out is gone (`PX`).
    pub(super) async fn lookup_dedupe(
        &self,
        source: &str,
        keys: &[String],
    ) -> Result<Vec<Option<String>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("MGET");
        for k in keys {
            cmd.arg(self.key(source, &format!("d:{k}")));
        }
        let mut c = self.conn();
        let found: Vec<Option<String>> = self.timed(cmd.query_async(&mut c)).await?;
        if found.len() != keys.len() {
            return Err(StoreError::backend(
                Backend::Redis,
                format!(
                    "MGET answered {} values for {} keys",
                    found.len(),
                    keys.len()
                ),
            ));
        }
        Ok(found)
    }

    /// Set the origin of entry `id` with its `recovered` audit record; whether the
    /// entry is there.
    pub(super) async fn set_origin(
        &self,
        id: &str,
        origin: Origin,
        note: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let Some(source) = self.source_of(id).await? else {
            return Ok(false);
        };
        let audit = serde_json::to_string(&AuditEvent {
            at: now,
            action: RECOVERED_ACTION.into(),
            actor: RECOVERED_ACTOR.into(),
            note: Some(note.to_string()),
            route: None,
            session: None,
            client: None,
        })
        .map_err(|source| StoreError::Encode {
            what: "the recovered audit event",
            source,
        })?;
        let mut inv = self.scripts.mark_origin.prepare_invoke();
        inv.key(self.key(&source, &format!("e:{id}")))
            .key(self.key(&source, &format!("audit:{id}")))
            .arg(origin_field(origin))
            .arg(audit);
        let mut c = self.conn();
        let marked: i64 = self.timed(inv.invoke_async(&mut c)).await?;
        Ok(marked == 1)
    }

    /// Take `source`'s lease for `holder` until `until`, unless another's runs past
    /// `now`.
    pub(super) async fn take_reconcile_lease(
        &self,
        source: &str,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<ReconcileLease, StoreError> {
        let mut inv = self.scripts.reconcile.prepare_invoke();
        inv.key(self.key(source, "reconcile"))
            .arg("lease")
            .arg(holder)
            .arg(now)
            .arg(until);
        let mut c = self.conn();
        let (taken, a, b): (i64, String, String) = self.timed(inv.invoke_async(&mut c)).await?;
        Ok(match taken {
            1 => ReconcileLease::Taken {
                state: (a == "1").then_some(b),
            },
            _ => ReconcileLease::Held {
                holder: a,
                until: b.parse().map_err(|_| {
                    StoreError::backend(
                        Backend::Redis,
                        format!("the reconciliation lease of {source} ends at {b:?}"),
                    )
                })?,
            },
        })
    }

    /// Keep `state` as `source`'s if `holder` holds its lease at `now`.
    pub(super) async fn keep_reconcile_state(
        &self,
        source: &str,
        holder: &str,
        state: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let mut inv = self.scripts.reconcile.prepare_invoke();
        inv.key(self.key(source, "reconcile"))
            .arg("save")
            .arg(holder)
            .arg(now)
            .arg(state);
        let mut c = self.conn();
        let kept: i64 = self.timed(inv.invoke_async(&mut c)).await?;
        Ok(kept == 1)
    }

    /// End `holder`'s lease on `source`, if it holds it.
    pub(super) async fn end_reconcile_lease(
        &self,
        source: &str,
        holder: &str,
    ) -> Result<(), StoreError> {
        let mut inv = self.scripts.reconcile.prepare_invoke();
        inv.key(self.key(source, "reconcile"))
            .arg("release")
            .arg(holder);
        let mut c = self.conn();
        let _: i64 = self.timed(inv.invoke_async(&mut c)).await?;
        Ok(())
    }
}
