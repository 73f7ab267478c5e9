//! The one-way migration of a Redis written before routes existed, run at open.
//!
//! Before routes, a source had one work stream (`work`), one retry schedule
//! (`sched`), and each entry hash held its delivery state itself (`status`,
//! `next_attempt_at`, `attempts`, `lease`, `msg`, `budget_*`, `last_error`). Now
//! each entry has one delivery per route, and every entry of that layout gets one,
//! through the default route:
//!
//! 1. `work` becomes `work:default` and `sched` becomes `sched:default` (`RENAME`
//!    keeps the consumer group and the messages its consumers read and never
//!    acknowledged, so a dead consumer's message is claimed again after the lease);
//! 2. each entry (found through its status set, in batches) gets `routes` =
//!    `default` and its delivery fields under the `default:` prefix, and joins
//!    `rst:default:<status>`;
//! 3. `hg:{src}:schema` is set to `2`: the next open skips the source. A schema key
//!    with any other value was written by a newer release: open refuses the store
//!    rather than misread it.
//!
//! Every step is a script that leaves what is migrated already as it is, so a second
//! run, or two gateways opening together, change nothing more. Attempts and audit records need no
//! change: an attempt without a route went through the default route, an audit
//! record without one named none. A source first registered by this layout gets its
//! schema key then (`RedisStore::remember_source`), so it is never scanned.

use super::RedisStore;
use crate::store::{Backend, Status, StoreError};

/// The layout this code writes, as `hg:{src}:schema` holds it.
pub(super) const SCHEMA: &str = "2";

/// A source whose schema key names a layout this release does not know: a newer
/// release migrated it, and migrations are one-way.
#[derive(Debug, thiserror::Error)]
#[error(
    "source {source_name} is in layout {found:?}, which this hookgate does not know (it \
     writes {SCHEMA}): a newer release migrated it, and migrations are one-way; run that \
     release"
)]
struct UnknownSchema {
    source_name: String,
    found: String,
}

/// Entries one migration script call takes.
const BATCH: usize = 500;

/// The entry statuses of the layout before routes (it had no filtered entries).
const OLD_STATUSES: [Status; 4] = [
    Status::Pending,
    Status::Delivered,
    Status::Dead,
    Status::Discarded,
];

impl RedisStore {
    /// Migrate every registered source still in the layout before routes (see the
    /// module docs); logged at INFO with what it moved.
    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        let (mut sources, mut entries) = (0u64, 0u64);
        for source in self.sources().await? {
            let mut c = self.conn();
            let schema: Option<String> = self
                .timed(
                    redis::cmd("GET")
                        .arg(self.key(&source, "schema"))
                        .query_async(&mut c),
                )
                .await?;
            match schema.as_deref() {
                Some(SCHEMA) => continue,
                None => {}
                Some(found) => {
                    return Err(StoreError::backend(
                        Backend::Redis,
                        UnknownSchema {
                            source_name: source.clone(),
                            found: found.to_string(),
                        },
                    ));
                }
            }
            let (queues, moved) = self.migrate_source(&source).await?;
            if queues > 0 || moved > 0 {
                tracing::info!(
                    source = %source,
                    entries = moved,
                    queues,
                    "migrated the source to routes: its entries are delivered through route \
                     \"default\""
                );
                sources += 1;
                entries += moved;
            }
        }
        if sources > 0 {
            tracing::info!(
                sources,
                entries,
                "migrated the redis store to routes (one-way: older gateways cannot read it)"
            );
        }
        Ok(())
    }

    /// Migrate one source: (queues renamed, entries migrated).
    async fn migrate_source(&self, source: &str) -> Result<(u64, u64), StoreError> {
        let mut inv = self.scripts.migrate_queues.prepare_invoke();
        inv.key(self.key(source, "work"))
            .key(self.key(source, "work:default"))
            .key(self.key(source, "sched"))
            .key(self.key(source, "sched:default"));
        let mut c = self.conn();
        let (queues, left): (u64, u64) = self.timed(inv.invoke_async(&mut c)).await?;
        if left > 0 {
            tracing::warn!(
                source,
                "the work stream or retry schedule of the layout before routes exists beside \
                 the default route's: it was written after the migration (by an older \
                 gateway?) and is left as it is; its entries wait in the status sets"
            );
        }
        let mut entries = 0;
        for status in OLD_STATUSES {
            let index = self.status_key(source, status);
            let mut from = "-".to_string();
            loop {
                let ids: Vec<String> = self
                    .timed(
                        redis::cmd("ZRANGEBYLEX")
                            .arg(&index)
                            .arg(&from)
                            .arg("+")
                            .arg("LIMIT")
                            .arg(0)
                            .arg(BATCH)
                            .query_async(&mut c),
                    )
                    .await?;
                let Some(last) = ids.last() else {
                    break;
                };
                let mut inv = self.scripts.migrate_entries.prepare_invoke();
                inv.arg(self.key(source, ""));
                for id in &ids {
                    inv.key(self.key(source, &format!("e:{id}"))).arg(id);
                }
                let n: u64 = self.timed(inv.invoke_async(&mut c)).await?;
                entries += n;
                if ids.len() < BATCH {
                    break;
                }
                from = format!("({last}");
            }
        }
        let _: () = self
            .timed(
                redis::cmd("SET")
                    .arg(self.key(source, "schema"))
                    .arg(SCHEMA)
                    .query_async(&mut c),
            )
            .await?;
        Ok((queues, entries))
    }
}
