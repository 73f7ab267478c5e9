//! Failed credentials, throttled per client: a wrong bearer token on the admin API
//! and a wrong token at the console's login count against the client (an IPv4
//! address or an IPv6 prefix, `serve::client_of`) that sent them, in one table.
//!
//! The first failures (`admin.failed_auth_allowance`, [`DEFAULT_ALLOWANCE`] by
//! default) cost nothing. Each one after that locks the
//! client out for twice as long as the one before (1 s, 2 s, 4 s… at most
//! [`MAX_LOCKOUT_MS`]); while it is locked out, every attempt is answered 429 with
//! `Retry-After`, the right token included, without being checked. A success clears
//! the client's count (and only its own); a client with no failure for
//! [`FORGET_AFTER_MS`] starts over. The table holds at most [`MAX_CLIENTS`]
//! clients; when it is full, the one whose last failure is the oldest is dropped.
//!
//! The table is per process: gateways sharing a store each throttle on their own.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Failures a client may make before it is locked out, by default.
pub const DEFAULT_ALLOWANCE: u32 = 5;
/// The first lockout; each further failure doubles it.
const FIRST_LOCKOUT_MS: i64 = 1_000;
/// The longest lockout.
pub const MAX_LOCKOUT_MS: i64 = 5 * 60 * 1000;
/// A client without a failure for this long starts over.
const FORGET_AFTER_MS: i64 = 30 * 60 * 1000;
/// The most clients the table holds.
pub const MAX_CLIENTS: usize = 10_000;

/// What one client did lately.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    /// Unix ms of the last failure.
    last: i64,
    /// Unix ms until which the client is locked out.
    until: i64,
}

/// The per-client failure table.
#[derive(Debug)]
pub struct Throttle {
    /// Failures a client may make before it is locked out.
    allowance: u32,
    clients: Mutex<HashMap<IpAddr, Failures>>,
}

impl Default for Throttle {
    fn default() -> Throttle {
        Throttle::new(DEFAULT_ALLOWANCE)
    }
}

/// A client locked out: it may try again in `retry_after_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockedOut {
    pub retry_after_secs: u64,
}

impl Throttle {
    /// A table that lets a client fail `allowance` times before locking it out.
    pub fn new(allowance: u32) -> Throttle {
        Throttle {
            allowance,
            clients: Mutex::default(),
        }
    }

    /// Whether `client` may have its credentials checked at `now` (unix ms).
    pub fn check(&self, client: IpAddr, now: i64) -> Result<(), LockedOut> {
        let Ok(clients) = self.clients.lock() else {
            return Ok(());
        };
        match clients.get(&client) {
            Some(f) if f.until > now => Err(LockedOut {
                retry_after_secs: u64::try_from((f.until - now + 999) / 1000).unwrap_or(1),
            }),
            _ => Ok(()),
        }
    }

    /// Count a failure of `client` at `now`.
    pub fn failed(&self, client: IpAddr, now: i64) {
        let Ok(mut clients) = self.clients.lock() else {
            return;
        };
        if !clients.contains_key(&client) && clients.len() >= MAX_CLIENTS {
            let oldest = clients.iter().min_by_key(|(_, f)| f.last).map(|(c, _)| *c);
            if let Some(c) = oldest {
                clients.remove(&c);
            }
        }
        let f = clients.entry(client).or_insert(Failures {
            count: 0,
            last: now,
            until: 0,
        });
        if now - f.last > FORGET_AFTER_MS {
            f.count = 0;
        }
        f.count = f.count.saturating_add(1);
        f.last = now;
        if let Some(over) = f.count.checked_sub(self.allowance.saturating_add(1)) {
            let lockout = FIRST_LOCKOUT_MS
                .checked_shl(over.min(30))
                .unwrap_or(MAX_LOCKOUT_MS)
                .min(MAX_LOCKOUT_MS);
            f.until = now + lockout;
        }
    }

    /// `client` presented the right token: its failures are forgotten.
    pub fn succeeded(&self, client: IpAddr) {
        if let Ok(mut clients) = self.clients.lock() {
            clients.remove(&client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn failures_past_the_free_ones_lock_a_client_out_for_longer_each_time() {
        let t = Throttle::default();
        let a = ip("192.0.2.1");
        for _ in 0..DEFAULT_ALLOWANCE {
            assert_eq!(t.check(a, NOW), Ok(()));
            t.failed(a, NOW);
        }
        assert_eq!(t.check(a, NOW), Ok(()));
        t.failed(a, NOW);
        assert_eq!(
            t.check(a, NOW),
            Err(LockedOut {
                retry_after_secs: 1
            })
        );
        assert_eq!(t.check(a, NOW + 1_000), Ok(()));
        t.failed(a, NOW + 1_000);
        assert_eq!(
            t.check(a, NOW + 1_000),
            Err(LockedOut {
                retry_after_secs: 2
            })
        );
        // Another client is not affected; a success clears only its own client.
        let b = ip("192.0.2.2");
        assert_eq!(t.check(b, NOW + 1_000), Ok(()));
        t.succeeded(b);
        assert!(t.check(a, NOW + 1_000).is_err());
        t.succeeded(a);
        assert_eq!(t.check(a, NOW + 1_000), Ok(()));
    }

    #[test]
    fn the_lockout_is_capped_and_old_failures_are_forgotten() {
        let t = Throttle::default();
        let a = ip("2001:db8::");
        for _ in 0..100 {
            t.failed(a, NOW);
        }
        let LockedOut { retry_after_secs } = t.check(a, NOW).unwrap_err();
        assert_eq!(retry_after_secs, (MAX_LOCKOUT_MS / 1000) as u64);
        let later = NOW + FORGET_AFTER_MS + 1;
        t.failed(a, later);
        assert_eq!(t.check(a, later), Ok(()));
    }

    #[test]
    fn a_full_table_drops_the_client_whose_last_failure_is_oldest() {
        let t = Throttle::default();
        let first = IpAddr::from([10, 0, 0, 0]);
        for _ in 0..=DEFAULT_ALLOWANCE {
            t.failed(first, NOW);
        }
        for i in 1..MAX_CLIENTS as u32 {
            t.failed(IpAddr::from((10u32 << 24 | i).to_be_bytes()), NOW + 1);
        }
        assert!(t.check(first, NOW).is_err());
        t.failed(ip("192.0.2.9"), NOW + 2);
        assert_eq!(t.check(first, NOW), Ok(()), "the oldest went");
        assert_eq!(t.clients.lock().unwrap().len(), MAX_CLIENTS);
    }
}
