//! Free ports for child servers (redis-server, a child gateway, chromedriver), taken
//! from below the kernel's ephemeral range so that a parallel test cannot be handed
//! one between its check here and the child's bind.

use std::net::TcpListener as StdListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// A free TCP port on loopback for a child server (redis-server, a child gateway,
/// chromedriver) to bind after this returns.
///
/// A port from `bind(0)` is in the kernel's ephemeral range: between its release here
/// and the child's bind, a parallel test's `bind(0)` or outgoing connection can be
/// handed it, and the child fails with "address in use". So ports come from below
/// that range, each at most once per test process (a counter, started at an offset
/// from the pid so two test processes start apart), checked free by a bind. Cluster
/// nodes also bind the port plus 10,000 for their bus, which stays below the range
/// too. Where the range starts too low for that, it falls back to `bind(0)`.
pub fn free_port() -> u16 {
    const LOW: u32 = 12_000;
    const SPAN: u32 = 10_000;
    const BUS_OFFSET: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    if ephemeral_range_start() >= LOW + SPAN + BUS_OFFSET {
        let seed = std::process::id() % SPAN;
        for _ in 0..SPAN {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = (LOW + (seed + n) % SPAN) as u16;
            if StdListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`); 0 where
/// it cannot be read, which makes [`free_port`] fall back to `bind(0)`.
fn ephemeral_range_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
