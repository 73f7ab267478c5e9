//! The soak: two gateways per store, a flapping upstream, a steady signed load and
//! random faults for N minutes, then a checker over what the load generator and the
//! upstream wrote down (see `check` for what it checks, RELIABILITY.md for the
//! figures).
//!
//! ```text
//! cargo bench --bench soak -- --minutes 30                   # every store at once, 30 min
//! cargo bench --bench soak -- --minutes 2 --stores redis     # one store
//! cargo bench --bench soak -- --check target/soak/redis      # check saved records again
//! ```
//!
//! Every store runs at the same time, each with its own processes: two `hookgate
//! serve` (release build under `cargo bench`), its store's server, its upstream
//! and its load. The embedded store mounts a tmpfs (root). Records go to
//! `target/soak/<store>/` (`load.jsonl`, `upstream.jsonl`, `faults.jsonl`,
//! `report.json`, the gateways' logs). The exit status is non-zero when a promise
//! broke.
//!
//! Modules: [`load`] (the signed load and its record), [`upstream`] (the flapping
//! upstream and its record), [`chaos`] (faults and admin actions), [`rig`] (the
//! processes), [`check`] (the history checker), [`record`] (what is written down).

mod chaos;
mod check;
mod load;
mod record;
mod rig;
mod upstream;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use check::Report;
use record::{Delivery, Event, Fault};
use rig::{Kind, ORDERED, ROUTES, Rig};

/// Milliseconds since the run began, shared by every record.
#[derive(Clone)]
pub struct Clock(Arc<Instant>);

impl Clock {
    fn new() -> Clock {
        Clock(Arc::new(Instant::now()))
    }

    pub fn ms(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }
}

struct Args {
    minutes: f64,
    stores: Vec<Kind>,
    rate: f64,
    keys: usize,
    out: PathBuf,
    check: Option<PathBuf>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        minutes: 2.0,
        stores: vec![Kind::Embedded, Kind::Redis, Kind::Postgres],
        rate: 40.0,
        keys: 40,
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/soak"),
        check: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--minutes" => a.minutes = value()?.parse().map_err(|e| format!("--minutes: {e}"))?,
            "--rate" => a.rate = value()?.parse().map_err(|e| format!("--rate: {e}"))?,
            "--keys" => a.keys = value()?.parse().map_err(|e| format!("--keys: {e}"))?,
            "--out" => a.out = PathBuf::from(value()?),
            "--check" => a.check = Some(PathBuf::from(value()?)),
            "--stores" => {
                a.stores = value()?
                    .split(',')
                    .map(|s| Kind::parse(s).ok_or(format!("unknown store {s}")))
                    .collect::<Result<_, _>>()?
            }
            // cargo bench passes --bench.
            "--bench" => {}
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

fn main() {
    let code = match args().and_then(run) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("soak: {e}");
            2
        }
    };
    std::process::exit(code);
}

fn run(args: Args) -> Result<bool, String> {
    if let Some(dir) = &args.check {
        let report = check_dir(dir)?;
        println!("{}:\n{report}", dir.display());
        return Ok(report.holds());
    }
    hookgate::tls::install_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let reports = rt.block_on(async {
        let runs = args.stores.iter().map(|&kind| {
            let out = args.out.join(kind.name());
            let (minutes, rate, keys) = (args.minutes, args.rate, args.keys);
            tokio::spawn(async move { soak(kind, minutes, rate, keys, &out).await })
        });
        let mut reports = Vec::new();
        for (run, kind) in runs.collect::<Vec<_>>().into_iter().zip(&args.stores) {
            let r = run.await.map_err(|e| e.to_string()).and_then(|r| r);
            reports.push((*kind, r));
        }
        reports
    });
    let mut ok = true;
    for (kind, r) in reports {
        match r {
            Ok(report) => {
                let holds = report.holds();
                ok &= holds;
                println!(
                    "soak {} ({} min): {}\n{report}",
                    kind.name(),
                    args.minutes,
                    if holds {
                        "every promise held"
                    } else {
                        "A PROMISE BROKE"
                    }
                );
            }
            Err(e) => {
                ok = false;
                println!("soak {}: could not run: {e}", kind.name());
            }
        }
    }
    Ok(ok)
}

fn check_dir(dir: &Path) -> Result<Report, String> {
    let read = |name: &str| dir.join(name);
    let events: Vec<Event> = record::read_lines(&read("load.jsonl")).map_err(|e| e.to_string())?;
    let deliveries: Vec<Delivery> =
        record::read_lines(&read("upstream.jsonl")).map_err(|e| e.to_string())?;
    let faults: Vec<Fault> =
        record::read_lines(&read("faults.jsonl")).map_err(|e| e.to_string())?;
    Ok(check::check(
        &events,
        &deliveries,
        &faults,
        &ROUTES,
        ORDERED,
    ))
}

/// Longest wait, after the load and the faults stopped, for every acknowledged event
/// to be delivered.
const DRAIN: Duration = Duration::from_secs(180);
/// After the last one arrived: a lease and more, for late second deliveries to show.
const SETTLE: Duration = Duration::from_secs(8);

async fn soak(
    kind: Kind,
    minutes: f64,
    rate: f64,
    keys: usize,
    out: &Path,
) -> Result<Report, String> {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let clock = Clock::new();
    let upstream = Arc::new(
        upstream::Upstream::start(clock.clone())
            .await
            .map_err(|e| format!("upstream: {e}"))?,
    );
    let port = upstream.port;
    let logs = out.to_path_buf();
    let rig = tokio::task::spawn_blocking(move || Rig::start(kind, port, &logs))
        .await
        .map_err(|e| e.to_string())??;
    let ingest: Vec<String> = rig.gateways.iter().map(|g| g.ingest()).collect();
    let admins: Vec<String> = rig.gateways.iter().map(|g| g.admin()).collect();
    let rig = Arc::new(Mutex::new(rig));

    let load = load::Load::start(
        load::Plan {
            store: kind.name(),
            keys,
            rate,
            gateways: ingest,
            pinned: kind == Kind::Embedded,
        },
        clock.clone(),
    );
    let events = load.events.clone();
    let chaos = chaos::Chaos::start(rig.clone(), upstream.clone(), clock.clone());
    let faults = chaos.faults.clone();
    tokio::time::sleep(Duration::from_secs_f64(minutes * 60.0)).await;
    let stopped = chaos.stop().await;
    load.stop().await;
    stopped?;

    // Drain: every acknowledged event delivered on every route, dead letters
    // replayed along the way (a retry budget no weather exhausts should leave none).
    let admin = reqwest::Client::new();
    let started = Instant::now();
    let snapshot = || {
        let events = events.lock().map(|e| e.clone()).unwrap_or_default();
        let faults = faults.lock().map(|f| f.clone()).unwrap_or_default();
        (events, upstream.deliveries(), faults)
    };
    loop {
        let (e, d, f) = snapshot();
        let r = check::check(&e, &d, &f, &ROUTES, ORDERED);
        if r.undelivered() == 0 || started.elapsed() > DRAIN {
            break;
        }
        let _ = chaos::replay_dead(&admin, &admins).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(SETTLE).await;
    let (e, d, f) = snapshot();
    let report = check::check(&e, &d, &f, &ROUTES, ORDERED);
    let exited: Vec<String> = tokio::task::spawn_blocking(move || {
        rig.lock()
            .map(|mut r| r.gateways.iter_mut().filter_map(|g| g.exited()).collect())
            .unwrap_or_default()
    })
    .await
    .map_err(|e| e.to_string())?;
    let write = |name: &str| out.join(name);
    record::write_lines(&write("load.jsonl"), &e).map_err(|e| e.to_string())?;
    record::write_lines(&write("upstream.jsonl"), &d).map_err(|e| e.to_string())?;
    record::write_lines(&write("faults.jsonl"), &f).map_err(|e| e.to_string())?;
    std::fs::write(
        write("report.json"),
        serde_json::to_vec_pretty(&report).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    if !exited.is_empty() {
        return Err(format!("a gateway exited on its own: {exited:?}"));
    }
    Ok(report)
}
