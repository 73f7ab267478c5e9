//! The Lua scripts that make each multi-key change of the Redis store atomic.
//!
//! Each script lives in its own file under `scripts/`, with its KEYS, ARGV and answer
//! described at its top. They are compiled into the binary; `redis::Script` sends a
//! script by its SHA1 and loads it on the first `NOSCRIPT`. The scripts that read or
//! change deliveries start with `scripts/prelude.lua` (the entry's derived status and
//! the route indexes, in one place): Lua scripts cannot share code otherwise.

use redis::Script;

/// The helpers every script that reads or changes deliveries starts with.
const PRELUDE: &str = include_str!("scripts/prelude.lua");

/// Every script of the store, loaded once at open.
pub(super) struct Scripts {
    /// Dedupe and persist a batch of entries of one source (see `batch`).
    pub accept_many: Script,
    /// Move due retries of one route from its schedule to its work stream.
    pub promote: Script,
    /// Take the lease of a claimed delivery; answers the entry.
    pub lease: Script,
    /// Record what a worker did with a claimed delivery.
    pub complete: Script,
    /// Remove the entries of a retention index that ended before a cutoff.
    pub purge: Script,
    /// Replay or discard deliveries of an entry, with its audit record.
    pub transition: Script,
    /// What a listing shows of entries, without their bodies.
    pub listed: Script,
    /// Take the next send slot of a paced route.
    pub pace: Script,
    /// Hold the send slots of a paced route until a time.
    pub hold: Script,
    /// Migration to routes: a source's work stream and schedule.
    pub migrate_queues: Script,
    /// Migration to routes: a batch of a source's entries.
    pub migrate_entries: Script,
}

/// A script that starts with the shared helpers.
fn with_prelude(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

impl Scripts {
    pub(super) fn load() -> Scripts {
        Scripts {
            accept_many: Script::new(include_str!("scripts/accept_many.lua")),
            promote: Script::new(include_str!("scripts/promote.lua")),
            lease: Script::new(include_str!("scripts/lease.lua")),
            complete: with_prelude(include_str!("scripts/complete.lua")),
            purge: with_prelude(include_str!("scripts/purge.lua")),
            transition: with_prelude(include_str!("scripts/transition.lua")),
            listed: with_prelude(include_str!("scripts/listed.lua")),
            pace: Script::new(include_str!("scripts/pace.lua")),
            hold: Script::new(include_str!("scripts/hold.lua")),
            migrate_queues: Script::new(include_str!("scripts/migrate_queues.lua")),
            migrate_entries: Script::new(include_str!("scripts/migrate_entries.lua")),
        }
    }
}
