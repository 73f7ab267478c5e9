//! The Redis store's part of payload search (`store::search`): per source and
//! index, a sorted set `ix:<name>` (all scores 0) whose members are `<value>\0<id>`,
//! in the source's hash slot. Values are index texts (no NUL: strings are JSON
//! text), so one value's members are a lexical range, ordered by id: a lookup is
//! `ZREVRANGEBYLEX` over it. The accept script adds the members and keeps them in
//! the entry's `ix` field too, which the purge script reads to remove them.

use super::RedisStore;
use super::codec::{RECORD_FIELD, entry_from_map};
use crate::store::{Entry, IndexLookup, StoreError};

/// Above every entry id (ids are lower-case hex and dashes).
const ABOVE_EVERY_ID: &str = "~";

impl RedisStore {
    /// The ids `lookup` asks for (see `Search::indexed`): each value's range, newest
    /// first, merged.
    pub(super) async fn index_lookup(
        &self,
        lookup: &IndexLookup,
    ) -> Result<Vec<String>, StoreError> {
        if lookup.values.is_empty() {
            return Ok(Vec::new());
        }
        let key = self.key(&lookup.source, &format!("ix:{}", lookup.name));
        let below = lookup.below.as_deref().unwrap_or(ABOVE_EVERY_ID);
        let floor = lookup.floor.as_deref().unwrap_or("");
        let mut pipe = redis::pipe();
        for value in &lookup.values {
            let mut max = format!("({value}\0").into_bytes();
            max.extend_from_slice(below.as_bytes());
            let mut min = format!("[{value}\0").into_bytes();
            min.extend_from_slice(floor.as_bytes());
            pipe.cmd("ZREVRANGEBYLEX")
                .arg(&key)
                .arg(max)
                .arg(min)
                .arg("LIMIT")
                .arg(0)
                .arg(lookup.limit);
        }
        let mut c = self.conn();
        let ranges: Vec<Vec<Vec<u8>>> = self.timed(pipe.query_async(&mut c)).await?;
        let mut ids: Vec<String> = ranges
            .into_iter()
            .flatten()
            .filter_map(|member| {
                let at = member.iter().position(|&b| b == 0)?;
                String::from_utf8(member[at + 1..].to_vec()).ok()
            })
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids.dedup();
        ids.truncate(lookup.limit);
        Ok(ids)
    }

    /// The size of each entry `keys` names, 0 for one not there (see
    /// `Search::sizes`): the length of its packed record (which holds its headers and
    /// body), one pipeline per source.
    pub(super) async fn record_sizes(
        &self,
        keys: &[(String, String)],
    ) -> Result<Vec<u64>, StoreError> {
        let mut by_source: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
        for (i, (source, _)) in keys.iter().enumerate() {
            by_source.entry(source.as_str()).or_default().push(i);
        }
        let mut sizes = vec![0u64; keys.len()];
        for (source, at) in by_source {
            let mut pipe = redis::pipe();
            for &i in &at {
                pipe.cmd("HSTRLEN")
                    .arg(self.key(source, &format!("e:{}", keys[i].1)))
                    .arg(RECORD_FIELD);
            }
            let mut c = self.conn();
            let lengths: Vec<u64> = self.timed(pipe.query_async(&mut c)).await?;
            for (&i, n) in at.iter().zip(lengths) {
                sizes[i] = n;
            }
        }
        Ok(sizes)
    }

    /// The entries `keys` name, whole, in the order asked (see `Search::get_many`):
    /// one pipeline per source (one hash slot each).
    pub(super) async fn load_many(
        &self,
        keys: &[(String, String)],
    ) -> Result<Vec<Entry>, StoreError> {
        let mut by_source: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
        for (i, (source, _)) in keys.iter().enumerate() {
            by_source.entry(source.as_str()).or_default().push(i);
        }
        let mut found: Vec<Option<Entry>> = vec![None; keys.len()];
        for (source, at) in by_source {
            let mut pipe = redis::pipe();
            for &i in &at {
                pipe.hgetall(self.key(source, &format!("e:{}", keys[i].1)));
            }
            let mut c = self.conn();
            let maps: Vec<std::collections::HashMap<String, Vec<u8>>> =
                self.timed(pipe.query_async(&mut c)).await?;
            for (&i, map) in at.iter().zip(maps) {
                if !map.is_empty() {
                    found[i] = Some(entry_from_map(&keys[i].1, map)?);
                }
            }
        }
        Ok(found.into_iter().flatten().collect())
    }
}
