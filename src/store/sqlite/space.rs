//! The free space the embedded store keeps for what it already acknowledged.
//!
//! A full disk must not strand the entries already answered 200: delivering them
//! still writes (leases, attempts, completions, the WAL and its checkpoints). So new
//! entries are refused (503) once the filesystem holding the store has less than
//! `store.min_free_bytes` free, and what is left stays for those writes. `/readyz`
//! answers 503 as long as the space is short, so a load balancer sends webhooks to
//! another instance, and both recover by themselves once space returns.
//!
//! The free space is read with `statvfs` (a system call, about a microsecond), at
//! most every [`RECHECK_MS`] on the ingest path.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use crate::clock::Clock;
use crate::store::StoreError;

/// How long one reading of the free space stands on the ingest path.
const RECHECK_MS: i64 = 100;

pub(super) struct DiskSpace {
    dir: PathBuf,
    /// `store.min_free_bytes`; 0 turns the floor off.
    floor: u64,
    clock: Clock,
    checked_at: AtomicI64,
    free: AtomicU64,
    short: AtomicBool,
}

impl DiskSpace {
    pub(super) fn new(dir: PathBuf, floor: u64, clock: Clock) -> DiskSpace {
        DiskSpace {
            dir,
            floor,
            clock,
            checked_at: AtomicI64::new(i64::MIN),
            free: AtomicU64::new(u64::MAX),
            short: AtomicBool::new(false),
        }
    }

    /// `Err(NoSpace)` while the filesystem has less than the floor free; the reading
    /// is at most [`RECHECK_MS`] old.
    pub(super) fn ensure(&self) -> Result<(), StoreError> {
        if self.floor == 0 {
            return Ok(());
        }
        let now = self.clock.now_ms();
        let checked = self.checked_at.load(Ordering::Relaxed);
        if now.saturating_sub(checked) >= RECHECK_MS
            && self
                .checked_at
                .compare_exchange(checked, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.read_now()?;
        }
        self.verdict()
    }

    /// Read the free space now (for `/readyz`, which must not see an old reading).
    pub(super) fn ensure_now(&self) -> Result<(), StoreError> {
        if self.floor == 0 {
            return Ok(());
        }
        self.checked_at
            .store(self.clock.now_ms(), Ordering::Relaxed);
        self.read_now()?;
        self.verdict()
    }

    fn read_now(&self) -> Result<(), StoreError> {
        let stat = rustix::fs::statvfs(&self.dir).map_err(|e| StoreError::File {
            action: "read the free space of",
            path: self.dir.clone(),
            source: e.into(),
        })?;
        let free = stat.f_bavail.saturating_mul(stat.f_frsize);
        self.free.store(free, Ordering::Relaxed);
        let short = free < self.floor;
        if self.short.swap(short, Ordering::Relaxed) != short {
            if short {
                tracing::warn!(
                    free_bytes = free,
                    min_free_bytes = self.floor,
                    "sqlite: the store's filesystem is short of space: new webhooks are answered 503 and /readyz 503; deliveries go on"
                );
            } else {
                tracing::info!(
                    free_bytes = free,
                    "sqlite: the store's filesystem has space again: new webhooks are stored"
                );
            }
        }
        Ok(())
    }

    fn verdict(&self) -> Result<(), StoreError> {
        if self.short.load(Ordering::Relaxed) {
            Err(StoreError::NoSpace {
                free: self.free.load(Ordering::Relaxed),
                floor: self.floor,
            })
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_above_the_free_space_refuses_and_zero_turns_it_off() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::system();
        let off = DiskSpace::new(dir.path().to_path_buf(), 0, clock.clone());
        assert!(off.ensure().is_ok());
        let huge = DiskSpace::new(dir.path().to_path_buf(), u64::MAX, clock.clone());
        assert!(matches!(huge.ensure(), Err(StoreError::NoSpace { .. })));
        assert!(matches!(huge.ensure_now(), Err(StoreError::NoSpace { .. })));
        let small = DiskSpace::new(dir.path().to_path_buf(), 1, clock);
        assert!(small.ensure().is_ok());
    }
}
