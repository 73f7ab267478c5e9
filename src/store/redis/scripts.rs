//! The Lua scripts that make each multi-key change of the Redis store atomic.
//!
//! Each script lives in its own file under `scripts/`, with its KEYS, ARGV and answer
//! described at its top. They are compiled into the binary; `redis::Script` sends a
//! script by its SHA1 and loads it on the first `NOSCRIPT`. The scripts that read or
//! change deliveries start with `scripts/prelude.lua` (the entry's derived status and
//! the route indexes, in one place): Lua scripts cannot share code otherwise.
//!
//! # Out of memory
//!
//! Redis at `maxmemory` (policy `noeviction`) refuses every command that may add
//! memory, and a script's first such command. New webhooks must be refused then, but
//! the ones already acknowledged must keep moving: their leases, completions,
//! retries and operator actions, and the purges that free memory. So on Redis 7 and
//! newer every script but the accept runs with the `allow-oom` flag (a shebang line);
//! what these scripts add is small and bounded by the entries already stored, and the
//! early purge (`housekeeping`) frees room ahead of them. Redis 6 has no script
//! flags: there the scripts run as before, and a Redis out of memory stalls
//! deliveries until memory is freed.

use redis::Script;

/// The helpers every script that reads or changes deliveries starts with.
const PRELUDE: &str = include_str!("scripts/prelude.lua");

/// Every script of the store, loaded once at open.
pub(super) struct Scripts {
    /// Dedupe and persist a batch of entries of one source (see `batch`).
    pub accept_many: Script,
    /// Claim a route's deliveries: take back expired leases, move its due retries
    /// to its work stream, read new messages, lease what was read.
    pub claim: Script,
    /// Lease the due retry a half-open breaker's probe sends, from the schedule.
    pub probe: Script,
    /// Record what a worker did with a claimed delivery.
    pub complete: Script,
    /// Remove the entries of a retention index that ended before a cutoff.
    pub purge: Script,
    /// Replay or discard deliveries of an entry, with its audit record.
    pub transition: Script,
    /// What a listing shows of entries, without their bodies.
    pub listed: Script,
    /// What the dead-letter view shows of a route's dead deliveries.
    pub dead_letters: Script,
    /// Take the next send slot of a paced route.
    pub pace: Script,
    /// Hold the send slots of a paced route until a time.
    pub hold: Script,
    /// Keep a batch of rejected requests (refused at maxmemory, as an accept).
    pub reject: Script,
    /// Raise a number kept as a string (the console's "sessions revoked until").
    pub raise: Script,
    /// Keep a secret established in an armed handshake, disarming it.
    pub establish: Script,
    /// Record a gateway's heartbeat with Redis's clock.
    pub heartbeat: Script,
    /// The gateways dead by Redis's clock.
    pub dead: Script,
    /// Hand a route's messages held by dead consumers over, expired.
    pub take_over: Script,
    /// Migration to routes: a source's work stream and schedule.
    pub migrate_queues: Script,
    /// Migration to routes: a batch of a source's entries.
    pub migrate_entries: Script,
    /// Mark how an entry came (reconciliation), with its audit record.
    pub mark_origin: Script,
    /// Take, renew or end a source's reconciliation lease, or keep its state.
    pub reconcile: Script,
}

/// The shebang line that lets a script run while Redis is out of memory (Redis 7+).
const ALLOW_OOM: &str = "#!lua flags=allow-oom\n";

impl Scripts {
    /// The scripts; with `allow_oom` (Redis 7 and newer) all but the accept run while
    /// Redis is out of memory (see the module docs).
    pub(super) fn load(allow_oom: bool) -> Scripts {
        let flags = if allow_oom { ALLOW_OOM } else { "" };
        let plain = |body: &str| Script::new(&format!("{flags}{body}"));
        // A shebang must be the script's first line: it goes before the prelude.
        let with_prelude = |body: &str| Script::new(&format!("{flags}{PRELUDE}\n{body}"));
        Scripts {
            // New entries are what a Redis out of memory must refuse.
            accept_many: Script::new(&format!(
                "{PRELUDE}\n{}",
                include_str!("scripts/accept_many.lua")
            )),
            claim: with_prelude(include_str!("scripts/claim.lua")),
            probe: plain(include_str!("scripts/probe.lua")),
            complete: with_prelude(include_str!("scripts/complete.lua")),
            purge: with_prelude(include_str!("scripts/purge.lua")),
            transition: with_prelude(include_str!("scripts/transition.lua")),
            // Reads only: it runs out of memory as it is (and on a replica).
            listed: Script::new(&format!(
                "{PRELUDE}\n{}",
                include_str!("scripts/listed.lua")
            )),
            // Reads only, as `listed`.
            dead_letters: Script::new(&format!(
                "{PRELUDE}\n{}",
                include_str!("scripts/dead_letters.lua")
            )),
            pace: plain(include_str!("scripts/pace.lua")),
            hold: plain(include_str!("scripts/hold.lua")),
            raise: plain(include_str!("scripts/raise.lua")),
            establish: plain(include_str!("scripts/establish.lua")),
            heartbeat: plain(include_str!("scripts/heartbeat.lua")),
            dead: plain(include_str!("scripts/dead.lua")),
            take_over: plain(include_str!("scripts/take_over.lua")),
            // Refused while out of memory, as the accept.
            reject: Script::new(include_str!("scripts/reject.lua")),
            migrate_queues: Script::new(include_str!("scripts/migrate_queues.lua")),
            migrate_entries: Script::new(include_str!("scripts/migrate_entries.lua")),
            mark_origin: plain(include_str!("scripts/mark_origin.lua")),
            // A state may weigh a megabyte: refused while out of memory, as an accept
            // (reconciliation admits what it finds through accepts anyway).
            reconcile: Script::new(include_str!("scripts/reconcile.lua")),
        }
    }
}

#[cfg(test)]
mod tests {
    /// The scripts keep per-minute activity as long as the other stores do.
    #[test]
    fn the_scripts_keep_activity_for_the_store_retention() {
        let prelude = include_str!("scripts/prelude.lua");
        let ms: u128 = prelude
            .lines()
            .find_map(|l| l.strip_prefix("local HG_ACTIVITY_MS = "))
            .and_then(|v| v.trim().parse().ok())
            .expect("HG_ACTIVITY_MS in prelude.lua");
        assert_eq!(ms, crate::store::ACTIVITY_RETENTION.as_millis());
    }
}
