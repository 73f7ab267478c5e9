//! What the console's triage and charts read from Redis: a route's dead letters
//! (never a body), and a source's per-minute activity counters.

use std::collections::BTreeMap;

use super::RedisStore;
use crate::store::activity::MINUTE_MS;
use crate::store::{Backend, DeadLetter, MinuteActivity, Status, StoreError};

/// Entries one dead-letter script call reads (each may copy a body inside Redis).
const DEAD_BATCH: usize = 200;
/// A UTC day in ms: activity is kept in one hash per day (`act:<day>`).
const DAY_MS: i64 = 86_400_000;

impl RedisStore {
    /// The dead deliveries through `route` of `source`, newest entry first (see
    /// `Store::dead_letters`): the route's dead index, then `scripts/dead_letters.lua`
    /// over each batch of entries.
    pub(super) async fn read_dead_letters(
        &self,
        source: &str,
        route: &str,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let mut c = self.conn();
        let ids: Vec<String> = self
            .timed(
                redis::cmd("ZREVRANGEBYLEX")
                    .arg(self.route_status_key(source, route, Status::Dead))
                    .arg("+")
                    .arg("-")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit)
                    .query_async(&mut c),
            )
            .await?;
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(DEAD_BATCH) {
            let mut inv = self.scripts.dead_letters.prepare_invoke();
            for id in chunk {
                inv.key(self.key(source, &format!("e:{id}")));
            }
            inv.arg(route);
            let mut c = self.conn();
            let rows: Vec<Option<Vec<String>>> = self.timed(inv.invoke_async(&mut c)).await?;
            if rows.len() != chunk.len() {
                return Err(StoreError::backend(
                    Backend::Redis,
                    format!(
                        "dead-letter script answered {} rows for {} entries",
                        rows.len(),
                        chunk.len()
                    ),
                ));
            }
            for (id, row) in chunk.iter().zip(rows) {
                // Purged between the two reads: skipped.
                if let Some(fields) = row {
                    out.push(dead_letter(id, fields)?);
                }
            }
        }
        Ok(out)
    }

    /// `source`'s activity in the minutes starting in `[since, until)` (see
    /// `Store::activity`): the day hashes the window touches.
    pub(super) async fn read_activity(
        &self,
        source: &str,
        since: i64,
        until: i64,
    ) -> Result<Vec<MinuteActivity>, StoreError> {
        if until <= since {
            return Ok(Vec::new());
        }
        let days = since.div_euclid(DAY_MS)..=(until - 1).div_euclid(DAY_MS);
        let mut pipe = redis::pipe();
        for day in days {
            pipe.cmd("HGETALL")
                .arg(self.key(source, &format!("act:{day}")));
        }
        let mut c = self.conn();
        let hashes: Vec<Vec<(String, i64)>> = self.timed(pipe.query_async(&mut c)).await?;
        let mut by_minute: BTreeMap<i64, MinuteActivity> = BTreeMap::new();
        for (field, n) in hashes.into_iter().flatten() {
            let (kind, minute) = field.split_at(field.len().min(1));
            let Ok(minute) = minute.parse::<i64>() else {
                continue;
            };
            let at = minute * MINUTE_MS;
            if !(since..until).contains(&at) {
                continue;
            }
            let m = by_minute.entry(at).or_insert(MinuteActivity {
                minute: at,
                ..MinuteActivity::default()
            });
            let n = u64::try_from(n).unwrap_or(0);
            match kind {
                "r" => m.received += n,
                "d" => m.delivered += n,
                "f" => m.failed += n,
                _ => {}
            }
        }
        Ok(by_minute.into_values().collect())
    }
}

/// A row of `scripts/dead_letters.lua` as a [`DeadLetter`].
fn dead_letter(id: &str, fields: Vec<String>) -> Result<DeadLetter, StoreError> {
    let corrupt = |problem: String| StoreError::Corrupt {
        id: id.to_string(),
        problem,
    };
    let [
        event_id,
        event_type,
        received_at,
        dead_at,
        attempts,
        last_error,
        last_failure,
    ]: [String; 7] = fields
        .try_into()
        .map_err(|f: Vec<String>| corrupt(format!("dead-letter row of {} fields", f.len())))?;
    let int = |name: &str, v: &str| -> Result<i64, StoreError> {
        match v {
            "" => Ok(0),
            v => v
                .parse()
                .map_err(|_| corrupt(format!("{name} is not an integer"))),
        }
    };
    let non_empty = |s: String| Some(s).filter(|s| !s.is_empty());
    let received_at = int("received_at", &received_at)?;
    Ok(DeadLetter {
        id: id.to_string(),
        event_id: non_empty(event_id),
        event_type: non_empty(event_type),
        received_at,
        dead_at: match int("dead_at", &dead_at)? {
            0 => received_at,
            t => t,
        },
        attempts: u32::try_from(int("attempts", &attempts)?).unwrap_or(0),
        last_error: non_empty(last_error),
        failure: crate::failure::stored(Some(&last_failure)),
    })
}
