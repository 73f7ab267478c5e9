//! The private PostgreSQL servers of the PostgreSQL scenarios: the integration
//! tests' harness (`tests/it/support/postgres.rs`: `initdb` in a temp dir, a free
//! port, run as the unprivileged `postgres` user when the bench runs as root), with
//! the two helpers it takes from its parent module.

use std::time::{Duration, Instant};

pub use crate::procs::free_port;

/// Call `probe` until it succeeds or `deadline` has passed (then its last error).
pub fn poll_until_blocking<T, E>(
    deadline: Duration,
    mut probe: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let end = Instant::now() + deadline;
    loop {
        match probe() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= end => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[allow(dead_code)]
#[path = "../../tests/it/support/postgres.rs"]
mod harness;

pub use harness::PostgresServer;
