//! The Lua scripts that make each multi-key change of the Redis store atomic.
//!
//! Each script lives in its own file under `scripts/`, with its KEYS, ARGV and answer
//! described at its top. They are compiled into the binary; `redis::Script` sends a
//! script by its SHA1 and loads it on the first `NOSCRIPT`.

use redis::Script;

/// Every script of the store, loaded once at open.
pub(super) struct Scripts {
    /// Dedupe and persist a batch of entries of one source (see `batch`).
    pub accept_many: Script,
    /// Move due retries from the schedule to the work stream.
    pub promote: Script,
    /// Take the lease of a claimed stream message; answers the entry.
    pub lease: Script,
    /// Record what a worker did with a claimed entry.
    pub complete: Script,
    /// Remove the entries of a retention index completed before a cutoff.
    pub purge: Script,
    /// Replay or discard an entry, with its audit record.
    pub transition: Script,
    /// What a listing shows of entries, without their bodies.
    pub listed: Script,
    /// Take the next send slot of a paced route.
    pub pace: Script,
}

impl Scripts {
    pub(super) fn load() -> Scripts {
        Scripts {
            accept_many: Script::new(include_str!("scripts/accept_many.lua")),
            promote: Script::new(include_str!("scripts/promote.lua")),
            lease: Script::new(include_str!("scripts/lease.lua")),
            complete: Script::new(include_str!("scripts/complete.lua")),
            purge: Script::new(include_str!("scripts/purge.lua")),
            transition: Script::new(include_str!("scripts/transition.lua")),
            listed: Script::new(include_str!("scripts/listed.lua")),
            pace: Script::new(include_str!("scripts/pace.lua")),
        }
    }
}
