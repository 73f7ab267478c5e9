//! The Redis store's rejected requests (`store::rejection`): a sorted set of rows
//! (JSON, scored by time) per group, trimmed to its newest [`REJECTIONS_KEEP`] in
//! the script that adds to it (`scripts/reject.lua`), the set of groups, and one hash
//! of counts per group and hour. Every key shares the hash tag `{rejections}`, so one
//! script changes them all on a cluster; the groups are few (sources × reasons), so
//! a listing reads every group its filters leave and merges them.

use std::collections::HashMap;

use redis::AsyncCommands;

use super::RedisStore;
use crate::store::StoreError;
use crate::store::rejection::{
    REJECTIONS_KEEP, REJECTIONS_PAGE_MAX, Rejection, RejectionBatch, RejectionCount, RejectionPage,
    RejectionQuery, UNKNOWN_SOURCES, hour_of, sum_counts,
};

/// The hash tag of the rejection keys (no source key ends in these suffixes).
const TAG: &str = "rejections";

impl RedisStore {
    fn rejection_groups_key(&self) -> String {
        self.key(TAG, "groups")
    }

    fn rejection_counts_key(&self) -> String {
        self.key(TAG, "counts")
    }

    fn rejection_rows_key(&self, group: &str) -> String {
        self.key(TAG, &format!("rows:{group}"))
    }

    pub(super) async fn keep_rejections(&self, batch: &RejectionBatch) -> Result<(), StoreError> {
        if batch.rows.is_empty() && batch.counts.is_empty() {
            return Ok(());
        }
        let mut inv = self.scripts.reject.prepare_invoke();
        inv.key(self.rejection_groups_key())
            .key(self.rejection_counts_key());
        inv.arg(REJECTIONS_KEEP).arg(batch.rows.len());
        for r in &batch.rows {
            let (source, reason) = r.group();
            let group = format!("{source}|{reason}");
            let json = serde_json::to_string(r).map_err(|source| StoreError::Encode {
                what: "a rejected request",
                source,
            })?;
            inv.key(self.rejection_rows_key(&group));
            inv.arg(group).arg(r.at).arg(json);
        }
        for c in &batch.counts {
            inv.arg(format!("{}|{}|{}", c.source, c.reason, hour_of(c.last_at)))
                .arg(c.count)
                .arg(c.last_at);
        }
        let mut c = self.conn();
        self.timed(inv.invoke_async::<i64>(&mut c)).await?;
        Ok(())
    }

    /// The groups kept, as `(group source, reason)`.
    async fn rejection_groups(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut c = self.conn();
        let groups: Vec<String> = self.timed(c.smembers(self.rejection_groups_key())).await?;
        Ok(groups
            .into_iter()
            .filter_map(|g| {
                let (s, r) = g.split_once('|')?;
                Some((s.to_string(), r.to_string()))
            })
            .collect())
    }

    pub(super) async fn list_rejections(
        &self,
        q: &RejectionQuery,
    ) -> Result<RejectionPage, StoreError> {
        let limit = q.limit.clamp(1, REJECTIONS_PAGE_MAX);
        let mut rows: Vec<Rejection> = Vec::new();
        for (source, reason) in self.rejection_groups().await? {
            // A source filter names the source as the URL did: a name that is not
            // configured is in the group of unknown sources.
            if q.reason.as_ref().is_some_and(|r| *r != reason)
                || q.source
                    .as_ref()
                    .is_some_and(|s| *s != source && source != UNKNOWN_SOURCES)
            {
                continue;
            }
            let min = q.since.map_or("-inf".to_string(), |t| t.to_string());
            let mut c = self.conn();
            let raw: Vec<String> = self
                .timed(c.zrevrangebyscore(
                    self.rejection_rows_key(&format!("{source}|{reason}")),
                    "+inf",
                    min,
                ))
                .await?;
            // A row that does not parse is skipped: a row is only a clue.
            rows.extend(
                raw.iter()
                    .filter_map(|r| serde_json::from_str::<Rejection>(r).ok())
                    .filter(|r| q.admits(r)),
            );
        }
        rows.sort_by(|a, b| b.id.cmp(&a.id));
        rows.truncate(limit + 1);
        Ok(RejectionPage::of(rows, limit))
    }

    /// The counts hash as `(group source, reason, hour) → (count, last)`.
    async fn rejection_hours(
        &self,
    ) -> Result<HashMap<(String, String, i64), (u64, i64)>, StoreError> {
        let mut c = self.conn();
        let raw: HashMap<String, i64> = self.timed(c.hgetall(self.rejection_counts_key())).await?;
        let mut hours: HashMap<(String, String, i64), (u64, i64)> = HashMap::new();
        for (field, value) in raw {
            let mut parts = field.rsplitn(2, '|');
            let (Some(kind), Some(rest)) = (parts.next(), parts.next()) else {
                continue;
            };
            let mut parts = rest.rsplitn(3, '|');
            let (Some(hour), Some(reason), Some(source)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(hour) = hour.parse::<i64>() else {
                continue;
            };
            let slot = hours
                .entry((source.to_string(), reason.to_string(), hour))
                .or_default();
            match kind {
                "n" => slot.0 = value.max(0) as u64,
                "last" => slot.1 = value,
                _ => {}
            }
        }
        Ok(hours)
    }

    pub(super) async fn count_rejections(
        &self,
        since: i64,
    ) -> Result<Vec<RejectionCount>, StoreError> {
        let from = hour_of(since);
        Ok(sum_counts(
            self.rejection_hours()
                .await?
                .into_iter()
                .filter(|((_, _, hour), _)| *hour >= from)
                .map(|((source, reason, _), (count, last_at))| RejectionCount {
                    source,
                    reason,
                    count,
                    last_at,
                }),
        ))
    }

    pub(super) async fn purge_rejected(&self, before: i64) -> Result<u64, StoreError> {
        let mut removed = 0u64;
        for (source, reason) in self.rejection_groups().await? {
            let mut c = self.conn();
            let n: u64 = self
                .timed(c.zrembyscore(
                    self.rejection_rows_key(&format!("{source}|{reason}")),
                    "-inf",
                    format!("({before}"),
                ))
                .await?;
            removed += n;
        }
        let from = hour_of(before);
        let old: Vec<String> = self
            .rejection_hours()
            .await?
            .into_keys()
            .filter(|(_, _, hour)| *hour < from)
            .flat_map(|(source, reason, hour)| {
                ["n", "last"].map(|kind| format!("{source}|{reason}|{hour}|{kind}"))
            })
            .collect();
        if !old.is_empty() {
            let mut c = self.conn();
            self.timed(c.hdel::<_, _, ()>(self.rejection_counts_key(), old))
                .await?;
        }
        Ok(removed)
    }
}
