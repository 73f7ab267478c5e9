//! The per-client connection cap: how many connections one client may hold open on
//! a listener.
//!
//! Without it, one address can take every connection the listener allows
//! (`server.max_connections`) by opening them and sending nothing, and every other
//! client waits. A connection over its client's cap is closed before a byte is
//! read; the accept loop counts and logs that. A client is a peer address; an IPv6
//! peer is its prefix, `server.client_ipv6_prefix` bits (default /56: one customer
//! network gets a /56 or a /48 and can pick any address in it, so counting per IPv6
//! address, or per /64, would cap nothing), and an IPv4-mapped IPv6 peer (a
//! dual-stack listener) is its IPv4 address. [`client_of`] is the one definition,
//! which every per-client bound (connections, body budget, login throttle) uses.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

/// The open connections of each client on one listener, against one cap.
#[derive(Debug)]
pub(super) struct ClientSlots {
    cap: usize,
    v6_prefix: u8,
    /// Open connections per client; a client leaves the map with its last
    /// connection, so it holds at most one key per open connection.
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One client's claim on a connection: held by the connection's task, given back
/// when dropped.
#[derive(Debug)]
pub(super) struct ClientSlot {
    slots: Arc<ClientSlots>,
    client: IpAddr,
}

impl ClientSlots {
    /// Slots for at most `cap` connections per client (at least 1), an IPv6 client
    /// being its first `v6_prefix` bits.
    pub(super) fn new(cap: usize, v6_prefix: u8) -> Arc<ClientSlots> {
        Arc::new(ClientSlots {
            cap: cap.max(1),
            v6_prefix,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for a connection from `peer`, or `None` when its client already holds
    /// the cap.
    pub(super) fn try_take(self: &Arc<Self>, peer: IpAddr) -> Option<ClientSlot> {
        let client = client_of(peer, self.v6_prefix);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.get(&client).copied().unwrap_or(0);
        if n >= self.cap {
            return None;
        }
        open.insert(client, n + 1);
        Some(ClientSlot {
            slots: self.clone(),
            client,
        })
    }

    #[cfg(test)]
    fn clients(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.client);
            }
        }
    }
}

/// The client a peer address counts as: an IPv4 address, or an IPv6 address's first
/// `v6_prefix` bits (the rest zero).
pub fn client_of(peer: IpAddr, v6_prefix: u8) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let mask = match v6_prefix {
                0 => 0,
                p if p >= 128 => u128::MAX,
                p => u128::MAX << (128 - u32::from(p)),
            };
            IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & mask))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn a_client_holds_at_most_the_cap_and_gets_slots_back() {
        let slots = ClientSlots::new(2, 56);
        let a = slots.try_take(ip("10.0.0.1")).expect("first");
        let b = slots.try_take(ip("10.0.0.1")).expect("second");
        assert!(slots.try_take(ip("10.0.0.1")).is_none());
        // Another client is counted apart.
        let other = slots.try_take(ip("10.0.0.2")).expect("another client");
        drop(a);
        let c = slots.try_take(ip("10.0.0.1")).expect("a slot given back");
        drop((b, c, other));
        assert_eq!(
            slots.clients(),
            0,
            "clients leave with their last connection"
        );
    }

    #[test]
    fn an_ipv6_client_is_its_prefix_and_a_mapped_ipv4_its_address() {
        let slots = ClientSlots::new(1, 56);
        let _a = slots.try_take(ip("2001:db8:1:2::1")).expect("first");
        assert!(
            slots.try_take(ip("2001:db8:1:2:ffff::9")).is_none(),
            "same /64"
        );
        assert!(
            slots.try_take(ip("2001:db8:1:ff::9")).is_none(),
            "another /64 of the same /56"
        );
        let _b = slots
            .try_take(ip("2001:db8:1:100::1"))
            .expect("another /56 is another client");
        let per_64 = ClientSlots::new(1, 64);
        let _d = per_64.try_take(ip("2001:db8:1:2::1")).expect("first");
        let _e = per_64
            .try_take(ip("2001:db8:1:3::1"))
            .expect("with a /64 prefix, another /64 is another client");
        let _c = slots.try_take(ip("192.0.2.7")).expect("first");
        assert!(slots.try_take(ip("::ffff:192.0.2.7")).is_none());
    }
}
