//! Behaviour of the embedded store that the conformance suite cannot see: what it
//! does to its files under steady load, and their permissions.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hookgate::store::{Accepted, NewEntry};

use crate::conformance::entry;
use crate::util::*;

/// Writers that never let up must not grow the WAL without bound. SQLite restarts
/// the WAL only when a write begins after every frame was checkpointed, which never
/// happens by itself under steady writes; the store arranges it (see
/// `store::sqlite::checkpoint`). Without that, this load (~41,000 entries of 3 KiB,
/// about 14 KiB of WAL each) leaves a WAL of about 500 MiB, never restarted.
///
/// The WAL header's checkpoint sequence number (bytes 12–15) counts restarts: the
/// test asserts the mechanism (restarts happen under load) and, loosely, the result
/// (the WAL stays well under what it reaches without them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_bounded_under_steady_writes() {
    const WRITERS: u64 = 64;
    const PER_WRITER: u64 = 640;
    let h = StoreHandle::new(Backend::Embedded);
    let store = h.open().await;
    let wal = h.dir.path().join("data").join("hookgate.db-wal");
    let body = Bytes::from(vec![b'x'; 3000]);

    let done = Arc::new(AtomicBool::new(false));
    let largest = Arc::new(AtomicU64::new(0));
    let monitor = {
        let (done, largest, wal) = (done.clone(), largest.clone(), wal.clone());
        tokio::spawn(async move {
            // Checkpoint sequence numbers seen in the WAL header.
            let mut sequences = std::collections::BTreeSet::new();
            while !done.load(Ordering::SeqCst) {
                if let Ok(m) = std::fs::metadata(&wal) {
                    largest.fetch_max(m.len(), Ordering::SeqCst);
                }
                let mut header = [0u8; 16];
                if let Ok(mut f) = std::fs::File::open(&wal)
                    && std::io::Read::read_exact(&mut f, &mut header).is_ok()
                {
                    sequences.insert(u32::from_be_bytes([
                        header[12], header[13], header[14], header[15],
                    ]));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            sequences.len()
        })
    };
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (store, body) = (store.clone(), body.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..PER_WRITER {
                let e = NewEntry {
                    headers: Vec::new(),
                    body: body.clone(),
                    ..entry("s", &format!("evt_{w}_{i}"))
                };
                assert!(matches!(store.accept(e).await, Ok(Accepted::New(_))));
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    done.store(true, Ordering::SeqCst);
    let sequences = monitor.await.expect("monitor");

    assert_eq!(store.count("s").await.unwrap(), WRITERS * PER_WRITER);
    let largest = largest.load(Ordering::SeqCst);
    assert!(
        sequences >= 3,
        "the WAL restarted {} times under load",
        sequences.saturating_sub(1)
    );
    // The WAL restarts at ~16 MiB; it may overshoot by what is written while the
    // checkpointer catches up, more on a slow disk, but nowhere near 500 MiB.
    assert!(
        largest < 300 * 1024 * 1024,
        "the WAL grew to {} MiB",
        largest / (1024 * 1024)
    );
    store.close().await;
}

/// The mode bits of `path`.
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Every file in `dir` with its mode, by name.
fn file_modes(dir: &std::path::Path) -> Vec<(String, u32)> {
    let mut files: Vec<(String, u32)> = std::fs::read_dir(dir)
        .expect("read the store directory")
        .map(|e| {
            let e = e.expect("directory entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                mode(&e.path()),
            )
        })
        .collect();
    files.sort();
    files
}

/// Accept one stripe webhook through `gw`, so the database and its WAL hold it.
async fn accept_one(ingest: &str, event: &str) {
    let (status, json) = post_stripe(&http(), ingest, event).await;
    assert_eq!(status, 200, "{json}");
}

/// Webhook bodies carry customer data: the store directory is 0700 and its files
/// 0600 even under umask 000 (set in the child only: the umask is process-wide), and
/// an older run's looser modes are tightened at start, with a log line for each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_files_are_private_whatever_the_umask() {
    use std::os::unix::process::CommandExt as _;
    let h = StoreHandle::new(Backend::Embedded);
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg_path = config_file(&h, dir.path());
    let data = h.dir.path().join("data");
    let umask_000 = |cmd: &mut std::process::Command| {
        // SAFETY: umask is async-signal-safe and touches no memory of ours.
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0);
                Ok(())
            });
        }
    };

    let mut gw = ChildGateway::spawn_with(&cfg_path, &[], &dir.path().join("log1"), umask_000);
    accept_one(&gw.ingest, "evt_private_1").await;
    // SIGKILL keeps the WAL and the shared-memory file in place (a clean stop removes
    // them), so the restart below finds every kind of file an older run can leave.
    gw.kill();
    assert_eq!(mode(&data), 0o700, "the store directory");
    let files = file_modes(&data);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["hookgate.db", "hookgate.db-shm", "hookgate.db-wal"],
        "{files:?}"
    );
    for (name, m) in &files {
        assert_eq!(*m, 0o600, "{name} is {m:04o}");
    }

    // What an older release left: a group-writable directory, readable files.
    set_mode(&data, 0o775);
    for (name, _) in &files {
        set_mode(&data.join(name), 0o664);
    }
    let log = dir.path().join("log2");
    let gw = ChildGateway::spawn_with(&cfg_path, &[], &log, umask_000);
    accept_one(&gw.ingest, "evt_private_2").await;
    assert_eq!(mode(&data), 0o700, "the store directory, tightened");
    for (name, m) in file_modes(&data) {
        assert_eq!(m, 0o600, "{name} is {m:04o} after the restart");
    }
    let text = std::fs::read_to_string(&log).expect("log");
    for name in ["data", "hookgate.db", "hookgate.db-wal", "hookgate.db-shm"] {
        assert!(
            text.lines()
                .any(|l| l.contains("made it private") && l.contains(&format!("/{name} "))),
            "no log line says {name} was tightened:\n{text}"
        );
    }
}

/// A store directory writable by others may already hold someone else's files:
/// `hookgate serve` refuses it, naming the path and the mode, and creates nothing.
#[test]
fn a_world_writable_store_directory_is_refused() {
    let h = StoreHandle::new(Backend::Embedded);
    let data = h.dir.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    set_mode(&data, 0o777);
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg_path = config_file(&h, dir.path());

    let (status, stderr) = serve_until_it_exits(&cfg_path, "on a world-writable store directory");
    assert!(!status.success(), "exit status {status}: {stderr}");
    let expected = format!(
        "store directory {} is writable by others (mode 0777)",
        data.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(stderr.contains("chmod 700"), "{stderr}");
    assert!(file_modes(&data).is_empty(), "files were created in it");
    assert_eq!(mode(&data), 0o777, "the directory was changed");
}
