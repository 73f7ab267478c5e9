//! The faults and the operator: every few seconds one of them, never two at once,
//! each written down with its start and end. A gateway SIGKILLed and restarted; the
//! store's server SIGKILLed and restarted (Redis, PostgreSQL); the embedded store's
//! disk filled and freed; a route paused and resumed, a delivered entry replayed, the
//! dead letters replayed, through the admin API. Meanwhile the upstream's weather
//! changes on its own clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::record::{Delivery, Fault, FaultKind};
use crate::rig::{Kind, ROUTES, Rig};
use crate::upstream::{Upstream, Weather};

pub struct Chaos {
    pub faults: Arc<Mutex<Vec<Fault>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Result<(), String>>,
    weather: tokio::task::JoinHandle<()>,
}

/// Seconds between faults (uniform).
const EVERY: (f64, f64) = (4.0, 9.0);

impl Chaos {
    pub fn start(rig: Arc<Mutex<Rig>>, upstream: Arc<Upstream>, clock: crate::Clock) -> Chaos {
        let faults: Arc<Mutex<Vec<Fault>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let admin = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_default();
        let task = {
            let (faults, stop, upstream, clock) = (
                faults.clone(),
                stop.clone(),
                upstream.clone(),
                clock.clone(),
            );
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let wait = EVERY.0 + fastrand::f64() * (EVERY.1 - EVERY.0);
                    tokio::time::sleep(Duration::from_secs_f64(wait)).await;
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let fault = one_fault(&rig, &upstream, &admin, &clock).await?;
                    if let (Some(f), Ok(mut all)) = (fault, faults.lock()) {
                        all.push(f);
                    }
                }
                Ok(())
            })
        };
        let weather = {
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let (w, secs) = match fastrand::u32(0..10) {
                        0..=5 => (Weather::Fair, 4.0 + fastrand::f64() * 8.0),
                        6..=8 => (Weather::Showers, 3.0 + fastrand::f64() * 6.0),
                        _ => (Weather::Storm, 1.0 + fastrand::f64() * 4.0),
                    };
                    upstream.set_weather(w);
                    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
                }
                upstream.set_weather(Weather::Fair);
            })
        };
        Chaos {
            faults,
            stop,
            task,
            weather,
        }
    }

    /// Stop after the fault in progress has ended (everything back up); the
    /// upstream's weather turns fair.
    pub async fn stop(self) -> Result<(), String> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.weather.await;
        self.task
            .await
            .map_err(|e| format!("the fault task failed: {e}"))?
    }
}

/// Run `f` on the rig off the runtime's threads (process starts block).
async fn on_rig<T: Send + 'static>(
    rig: &Arc<Mutex<Rig>>,
    f: impl FnOnce(&mut Rig) -> T + Send + 'static,
) -> Result<T, String> {
    let rig = rig.clone();
    tokio::task::spawn_blocking(move || {
        let mut rig = rig.lock().map_err(|_| "rig lock poisoned".to_string())?;
        Ok(f(&mut rig))
    })
    .await
    .map_err(|e| e.to_string())?
}

fn pause_for(min: f64, max: f64) -> Duration {
    Duration::from_secs_f64(min + fastrand::f64() * (max - min))
}

async fn one_fault(
    rig: &Arc<Mutex<Rig>>,
    upstream: &Upstream,
    admin: &reqwest::Client,
    clock: &crate::Clock,
) -> Result<Option<Fault>, String> {
    let (kind, admins) = on_rig(rig, |r| {
        (
            r.kind,
            r.gateways.iter().map(|g| g.admin()).collect::<Vec<_>>(),
        )
    })
    .await?;
    let fault = |k: FaultKind, detail: String| Fault {
        kind: k,
        start: clock.ms(),
        end: 0,
        detail,
    };
    let roll = fastrand::u32(0..12);
    let mut f = match roll {
        0..=3 => {
            let i = fastrand::usize(0..admins.len());
            let mut f = fault(FaultKind::GatewayKill, format!("gateway {i}"));
            on_rig(rig, move |r| r.gateways[i].kill()).await?;
            tokio::time::sleep(pause_for(0.3, 3.0)).await;
            on_rig(rig, move |r| r.gateways[i].start()).await??;
            f.end = clock.ms();
            f
        }
        4..=6 if kind == Kind::Embedded => {
            let mut f = fault(FaultKind::DiskFull, String::new());
            on_rig(rig, |r| r.fill_disk()).await??;
            tokio::time::sleep(pause_for(2.0, 6.0)).await;
            on_rig(rig, |r| r.free_disk()).await??;
            f.end = clock.ms();
            f
        }
        4..=6 => {
            let mut f = fault(FaultKind::StoreKill, kind.name().to_string());
            on_rig(rig, |r| r.kill_store()).await?;
            tokio::time::sleep(pause_for(0.5, 4.0)).await;
            on_rig(rig, |r| r.restart_store()).await?;
            f.end = clock.ms();
            f
        }
        7..=8 => {
            let route = ROUTES[fastrand::usize(0..ROUTES.len())];
            let mut f = fault(FaultKind::Pause, route.to_string());
            let base = format!("/admin/sources/stripe/routes/{route}");
            every_gateway(admin, &admins, &format!("{base}/pause"), "{}").await?;
            tokio::time::sleep(pause_for(1.0, 5.0)).await;
            every_gateway(admin, &admins, &format!("{base}/resume"), "{}").await?;
            f.end = clock.ms();
            f
        }
        9..=10 => {
            let Some(entry) = delivered_entry(&upstream.deliveries(), clock.ms()) else {
                return Ok(None);
            };
            let mut f = fault(FaultKind::Replay, entry.clone());
            // The entry lives in one gateway's store (embedded) or the shared one.
            let path = format!("/admin/entries/{entry}/replay");
            let mut replayed = false;
            for a in &admins {
                if let Ok(resp) = post(admin, a, &path, "{}").await
                    && resp.status().as_u16() == 202
                {
                    replayed = true;
                    break;
                }
            }
            if !replayed {
                return Ok(None);
            }
            f.end = clock.ms();
            f
        }
        _ => {
            let mut f = fault(FaultKind::ReplayDead, String::new());
            replay_dead(admin, &admins).await?;
            f.end = clock.ms();
            f
        }
    };
    if f.end == 0 {
        f.end = clock.ms();
    }
    Ok(Some(f))
}

/// A delivered entry, delivered at least a second ago.
fn delivered_entry(deliveries: &[Delivery], now: u64) -> Option<String> {
    let old: Vec<&Delivery> = deliveries
        .iter()
        .filter(|d| d.succeeded() && d.at + 1_000 < now && !d.entry.is_empty())
        .collect();
    old.get(fastrand::usize(0..old.len().max(1)))
        .map(|d| d.entry.clone())
}

/// Replay every dead delivery on every gateway.
pub async fn replay_dead(admin: &reqwest::Client, admins: &[String]) -> Result<(), String> {
    every_gateway(admin, admins, "/admin/replay", r#"{"status":"dead"}"#).await
}

async fn post(
    admin: &reqwest::Client,
    base: &str,
    path: &str,
    body: &'static str,
) -> reqwest::Result<reqwest::Response> {
    admin
        .post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
}

/// POST to every gateway (each has its own store on the embedded store; on a shared
/// one the second call repeats the first), retrying each for up to half a minute:
/// a resume must not be lost to a store that is briefly away.
async fn every_gateway(
    admin: &reqwest::Client,
    admins: &[String],
    path: &str,
    body: &'static str,
) -> Result<(), String> {
    for a in admins {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match post(admin, a, path, body).await {
                Ok(resp) if resp.status().is_success() => break,
                Ok(resp) if std::time::Instant::now() > deadline => {
                    return Err(format!("POST {path}: {}", resp.status()));
                }
                Err(e) if std::time::Instant::now() > deadline => {
                    return Err(format!("POST {path}: {e}"));
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    Ok(())
}
