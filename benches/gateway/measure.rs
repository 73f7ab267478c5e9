//! What the harness measures besides the load generator's own figures: CPU time
//! per process and the machine's busy share (from `/proc`), the disk's own
//! `fdatasync` latency while a scenario runs, and the median of the rounds.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// CPU time that processes spend over a measured window, read from `/proc` (Linux;
/// zeros elsewhere). It turns a throughput ratio into its cause: on a machine whose
/// cores are shared by everyone, req/s follows the CPU that each request costs.
pub struct CpuMeter {
    pids: Vec<u32>,
    ticks: Vec<u64>,
    machine: (u64, u64),
}

/// A finished `CpuMeter` window: CPU seconds per process, and the machine's share busy.
pub struct CpuUse {
    secs: Vec<f64>,
    pub busy: f64,
}

impl CpuMeter {
    /// `pids[0]` may be 0 for "this process" (the load generator).
    pub fn start(pids: &[u32]) -> CpuMeter {
        CpuMeter {
            pids: pids.to_vec(),
            ticks: pids.iter().map(|&p| proc_ticks(p)).collect(),
            machine: machine_ticks(),
        }
    }

    pub fn stop(self) -> CpuUse {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let secs = self
            .pids
            .iter()
            .zip(&self.ticks)
            .map(|(&p, &t)| proc_ticks(p).saturating_sub(t) as f64 / hz)
            .collect();
        let (busy, total) = machine_ticks();
        let busy = busy.saturating_sub(self.machine.0);
        let total = total.saturating_sub(self.machine.1);
        CpuUse {
            secs,
            busy: busy as f64 / total.max(1) as f64,
        }
    }
}

impl CpuUse {
    /// Microseconds of CPU that process `i` spent per request.
    pub fn per_request(&self, i: usize, requests: u64) -> f64 {
        self.secs[i] * 1e6 / requests.max(1) as f64
    }
}

/// User + system ticks of a process and of its reaped children (Redis's AOF rewrite
/// children count for Redis); pid 0 is this process.
fn proc_ticks(pid: u32) -> u64 {
    let path = if pid == 0 {
        "/proc/self/stat".to_string()
    } else {
        format!("/proc/{pid}/stat")
    };
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            // Fields after the command name, which ends at the last ')': utime is the
            // 14th field overall, so the 12th here; then stime, cutime, cstime.
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<u64> = rest
                .split_whitespace()
                .skip(11)
                .take(4)
                .filter_map(|v| v.parse().ok())
                .collect();
            Some(f.iter().sum())
        })
        .unwrap_or(0)
}

/// (busy, total) ticks of the whole machine; idle and iowait count as not busy.
fn machine_ticks() -> (u64, u64) {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let f: Vec<u64> = s
                .lines()
                .next()?
                .split_whitespace()
                .skip(1)
                .take(8)
                .filter_map(|v| v.parse().ok())
                .collect();
            let total: u64 = f.iter().sum();
            let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
            Some((total.saturating_sub(idle), total))
        })
        .unwrap_or((0, 0))
}

/// Measures the disk itself while a scenario runs: a 4 KiB overwrite plus `fdatasync`
/// every 10 ms in the store's directory. Every acknowledgement waits for one such
/// flush, so this is the floor under the gateway's latency tail.
pub struct FsyncProbe {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Histogram<u64>>,
}

impl FsyncProbe {
    pub fn start(dir: &Path) -> FsyncProbe {
        use std::io::{Seek, SeekFrom, Write};
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let path = dir.join("fsync-probe");
        let thread = std::thread::spawn(move || {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(&path)
                .expect("probe file");
            let page = [7u8; 4096];
            let mut i = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let t = Instant::now();
                f.seek(SeekFrom::Start((i % 256) * 4096)).expect("seek");
                f.write_all(&page).expect("write");
                f.sync_data().expect("fdatasync");
                let _ = hist.record(t.elapsed().as_micros().max(1) as u64);
                i += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            hist
        });
        FsyncProbe { stop, thread }
    }

    /// "p50 …, p99 …, max …" in milliseconds.
    pub fn finish(self) -> String {
        self.stop.store(true, Ordering::Relaxed);
        let h = self.thread.join().expect("probe");
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            h.value_at_quantile(0.5) as f64 / 1000.0,
            h.value_at_quantile(0.99) as f64 / 1000.0,
            h.max() as f64 / 1000.0
        )
    }
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// CPU time per thread of one process over a window, summed by thread name (tokio's
/// workers and its blocking pool share one name), with the time those threads were
/// ready to run but waited for a core (the scheduler's run delay): which thread a
/// process's CPU went to, and whether its threads were starved of CPU. From
/// `/proc/PID/task/*/schedstat`; empty elsewhere.
pub struct ThreadMeter {
    pid: u32,
    start: HashMap<u32, (String, u64, u64)>,
}

impl ThreadMeter {
    pub fn start(pid: u32) -> ThreadMeter {
        ThreadMeter {
            pid,
            start: thread_times(pid),
        }
    }

    /// "name: 1.23 s on CPU, 0.10 s waiting for one; …", the busiest first.
    pub fn stop(self) -> String {
        let mut by_name: HashMap<String, (u64, u64, usize)> = HashMap::new();
        for (tid, (name, run, wait)) in thread_times(self.pid) {
            let (run0, wait0) = self.start.get(&tid).map_or((0, 0), |t| (t.1, t.2));
            let e = by_name.entry(name).or_default();
            e.0 += run.saturating_sub(run0);
            e.1 += wait.saturating_sub(wait0);
            e.2 += 1;
        }
        let mut v: Vec<_> = by_name
            .into_iter()
            .filter(|(_, (run, _, _))| *run > 1_000_000)
            .collect();
        v.sort_by_key(|(_, (run, _, _))| std::cmp::Reverse(*run));
        v.iter()
            .map(|(name, (run, wait, n))| {
                let threads = if *n > 1 {
                    format!(" ×{n}")
                } else {
                    String::new()
                };
                format!(
                    "{name}{threads} {:.2} s on CPU, {:.2} s waiting for one",
                    *run as f64 / 1e9,
                    *wait as f64 / 1e9
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// (name, ns on CPU, ns runnable but waiting for a CPU) of every thread of `pid`, by
/// thread id.
fn thread_times(pid: u32) -> HashMap<u32, (String, u64, u64)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in dir.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        let name = std::fs::read_to_string(task.path().join("comm"))
            .map(|n| n.trim().to_string())
            .unwrap_or_default();
        let Ok(sched) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let f: Vec<u64> = sched
            .split_whitespace()
            .take(2)
            .filter_map(|v| v.parse().ok())
            .collect();
        if let [run, wait] = f[..] {
            out.insert(tid, (name, run, wait));
        }
    }
    out
}
