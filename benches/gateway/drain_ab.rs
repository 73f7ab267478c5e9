//! `drain-ab`: the forward drain of this build against another build of the
//! gateway (`HOOKGATE_BENCH_BEFORE_BIN`, e.g. the commit before a change), in the
//! same run: `--rounds` rounds (5 when the default of 3 is not changed), each
//! draining `--drain-entries` entries once with each build, the order swapped from
//! one round to the next (the host's rate drifts from one drain to the next, and
//! whichever goes second in a round inherits a warmer page cache).
//!
//! Reported: each round's rate ratio (this build's deliveries a second over the
//! other's), their median, and the gateway's CPU per delivery of each build (CPU
//! time moves less with the host's drift than wall time does). One route, the
//! embedded store, concurrency 64, a sink that answers 200 at once.
//!
//! Build the other binary as the bench builds its own (`cargo bench --bench gateway
//! --no-run` in a worktree of that commit, then its `target/release/hookgate`).

use std::path::PathBuf;

use crate::Settings;
use crate::measure::median;
use crate::procs::Store;
use crate::scenarios::{Drained, drain_with};

pub async fn drain_ab(report: &mut crate::Report, s: Settings) {
    let Some(before) = std::env::var_os("HOOKGATE_BENCH_BEFORE_BIN").filter(|b| !b.is_empty())
    else {
        report
            .add("drain-ab: skipped (HOOKGATE_BENCH_BEFORE_BIN names no other build)".to_string());
        return;
    };
    let before = PathBuf::from(before);
    assert!(
        before.is_file(),
        "HOOKGATE_BENCH_BEFORE_BIN: no file {before:?}"
    );
    let rounds = if s.rounds == 3 { 5 } else { s.rounds.max(1) };
    let n = s.drain_entries as f64;
    let mut ratios = Vec::new();
    let (mut this_cpu, mut before_cpu) = (Vec::new(), Vec::new());
    let (mut this_rates, mut before_rates) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let run = async |bin: Option<&std::path::Path>| -> Drained {
            drain_with(s, 1, false, Store::Embedded, None, bin).await
        };
        let (this, other) = if round % 2 == 0 {
            let this = run(None).await;
            (this, run(Some(&before)).await)
        } else {
            let other = run(Some(&before)).await;
            (run(None).await, other)
        };
        let ratio = other.secs / this.secs;
        report.add(format!(
            "drain-ab round {}: this build {:.0} deliveries/s ({:.1} µs CPU each), the other {:.0} ({:.1} µs): {ratio:.3}×{}",
            round + 1,
            n / this.secs,
            this.cpu_secs * 1e6 / n,
            n / other.secs,
            other.cpu_secs * 1e6 / n,
            if round % 2 == 0 { "" } else { " (the other first)" },
        ));
        ratios.push(ratio);
        this_rates.push(n / this.secs);
        before_rates.push(n / other.secs);
        this_cpu.push(this.cpu_secs * 1e6 / n);
        before_cpu.push(other.cpu_secs * 1e6 / n);
    }
    report.add(format!(
        "drain-ab, {rounds} rounds of {} entries, embedded, 1 route: this build against the other, median of the rounds' rate ratios {:.3}× (median rates {:.0} and {:.0} deliveries/s); CPU per delivery, median {:.1} µs against {:.1} µs ({:.3}×)",
        s.drain_entries,
        median(ratios.clone()),
        median(this_rates.clone()),
        median(before_rates.clone()),
        median(this_cpu.clone()),
        median(before_cpu.clone()),
        median(before_cpu.clone()) / median(this_cpu.clone()),
    ));
}
