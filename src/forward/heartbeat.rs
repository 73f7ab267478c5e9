//! This gateway's heartbeat, the fence it holds, and the takeover of dead gateways'
//! leases.
//!
//! Every [`BEAT_EVERY`] the gateway writes its heartbeat into the store, which
//! stamps it with its own clock; after each successful one it asks the store to end
//! the leases of gateways silent for [`DEAD_AFTER`] (`Membership::take_over_dead`),
//! so a crashed gateway's deliveries are claimed again within seconds rather than
//! when their leases run out.
//!
//! The fence is what makes that safe: a gateway may claim and send only while its
//! last successful heartbeat was *sent* less than [`FENCE_AFTER`] ago (by its own
//! monotonic clock). The store stamps a heartbeat no earlier than it was sent, and
//! ends leases only after [`DEAD_AFTER`] of silence by its clock, so a gateway cut
//! off from the store stops claiming, and abandons the attempts it is sending,
//! seconds before another gateway may take its deliveries: an ordered key never has
//! two deliveries in flight. Until its first heartbeat succeeds a gateway claims
//! nothing (one that comes back after a takeover writes its heartbeat first). The
//! embedded store has one gateway: there the fence always holds.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Forwarder;
use crate::store::Heartbeat;
use crate::store::gateways::{BEAT_EVERY, DEAD_AFTER};

/// A gateway stops claiming and sending once its last successful heartbeat was sent
/// this long ago: well before the [`DEAD_AFTER`] after which others take its leases.
pub const FENCE_AFTER: Duration = Duration::from_secs(5);

/// Longer than this, a heartbeat is given up: it could not extend the fence by much.
const BEAT_TIMEOUT: Duration = Duration::from_secs(4);

const _: () = assert!(FENCE_AFTER.as_millis() * 2 <= DEAD_AFTER.as_millis());

/// Who this gateway is: its id (also the name its leases are held under), host,
/// the configuration version it runs, and its start time. Cheap to clone; clones
/// share the version, which a reload changes ([`GatewayIdentity::set_version`]).
#[derive(Debug, Clone)]
pub struct GatewayIdentity {
    pub id: String,
    pub host: String,
    /// The version of the configuration it runs now.
    version: Arc<watch::Sender<String>>,
    /// Unix ms.
    pub started: i64,
}

impl GatewayIdentity {
    /// A new identity for this run: the id is the host, the process id and a UUIDv7.
    pub fn new(version: String, started: i64) -> GatewayIdentity {
        let host = std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "hookgate".into());
        let id = format!(
            "{host}-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        );
        GatewayIdentity {
            id,
            host,
            version: Arc::new(watch::channel(version).0),
            started,
        }
    }

    /// The version of the configuration it runs now.
    pub fn version(&self) -> String {
        self.version.borrow().clone()
    }

    /// It runs the configuration `version` from now on: its next heartbeat says so,
    /// and `hookgate_config_version_info` moves to it (the series of the version
    /// before drops to 0, which the drift rule does not count).
    pub fn set_version(&self, version: String) {
        let before = self.version.send_replace(version.clone());
        if before != version {
            metrics::gauge!("hookgate_config_version_info", "version" => before).set(0.0);
            metrics::gauge!("hookgate_config_version_info", "version" => version).set(1.0);
        }
    }

    fn beat(&self) -> Heartbeat {
        Heartbeat {
            id: self.id.clone(),
            host: self.host.clone(),
            version: self.version(),
            started: self.started,
        }
    }
}

/// Until when this gateway may claim and send.
pub(super) struct Fence {
    /// `None`: not yet (no heartbeat succeeded).
    until: watch::Sender<Option<Instant>>,
    /// False on a store no other gateway shares: the fence always holds.
    enforced: bool,
}

impl Fence {
    pub(super) fn new(enforced: bool) -> Fence {
        Fence {
            until: watch::channel(None).0,
            enforced,
        }
    }

    /// Whether the gateway may claim and send now.
    pub(super) fn held(&self) -> bool {
        !self.enforced || self.until.borrow().is_some_and(|u| Instant::now() < u)
    }

    /// Extend the fence to `until` (never shortening it).
    fn extend(&self, until: Instant) {
        self.until.send_modify(|u| {
            if u.is_none_or(|u| u < until) {
                *u = Some(until);
            }
        });
    }

    /// Wait until the fence holds; `false` when `shutdown` came first.
    pub(super) async fn wait_held(&self, shutdown: &CancellationToken) -> bool {
        let mut rx = self.until.subscribe();
        while !self.held() {
            tokio::select! {
                _ = shutdown.cancelled() => return false,
                _ = rx.changed() => {}
            }
        }
        true
    }

    /// Resolves when the fence no longer holds (never, where it is not enforced).
    pub(super) async fn lost(&self) {
        if !self.enforced {
            return std::future::pending().await;
        }
        let mut rx = self.until.subscribe();
        loop {
            let until = *rx.borrow_and_update();
            match until {
                Some(u) if Instant::now() < u => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(u) => {}
                        _ = rx.changed() => {}
                    }
                }
                _ => return,
            }
        }
    }
}

/// Register this gateway's metric families: the version it runs, and whether it is
/// fenced.
pub fn register_metrics(identity: &GatewayIdentity) {
    metrics::gauge!("hookgate_config_version_info", "version" => identity.version()).set(1.0);
    metrics::gauge!("hookgate_gateway_fenced").set(0.0);
    metrics::counter!("hookgate_heartbeat_failures_total").increment(0);
    metrics::counter!("hookgate_leases_taken_over_total").increment(0);
}

/// Beat, take over the dead, and keep the fence, until `shutdown`.
pub(super) async fn run(fwd: Arc<Forwarder>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(BEAT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Watches the fence, to log and count when it is lost.
    let watch = tokio::spawn(watch_fence(fwd.clone(), shutdown.clone()));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        // Read at each beat: a reload may have changed the version.
        let beat = fwd.identity.beat();
        let sent = Instant::now();
        let answered = tokio::time::timeout(BEAT_TIMEOUT, fwd.store.heartbeat(&beat)).await;
        let ack = match answered {
            Ok(Ok(ack)) => ack,
            Ok(Err(e)) => {
                metrics::counter!("hookgate_heartbeat_failures_total").increment(1);
                const MSG: &str = "cannot write the heartbeat";
                if crate::telemetry::throttle::hit(MSG, e.kind()) {
                    tracing::warn!(error = %e, "{MSG}");
                }
                continue;
            }
            Err(_) => {
                metrics::counter!("hookgate_heartbeat_failures_total").increment(1);
                const MSG: &str = "the heartbeat timed out";
                if crate::telemetry::throttle::hit(MSG, "") {
                    tracing::warn!(timeout = ?BEAT_TIMEOUT, "{MSG}");
                }
                continue;
            }
        };
        fwd.fence.extend(sent + FENCE_AFTER);
        if ack.taken_over {
            tracing::warn!(
                gateway = %beat.id,
                "this gateway was silent long enough for others to take its leases over; its attempts in flight then are not recorded"
            );
        }
        if !fwd.store.takes_over() {
            continue;
        }
        match fwd.store.take_over_dead(&beat.id).await {
            Ok(t) if !t.gateways.is_empty() => {
                metrics::counter!("hookgate_leases_taken_over_total").increment(t.leases);
                tracing::warn!(
                    gateways = ?t.gateways,
                    leases = t.leases,
                    "took over the leases of gateways silent for {DEAD_AFTER:?}"
                );
            }
            Ok(_) => {}
            Err(e) => {
                const MSG: &str = "cannot take over dead gateways' leases";
                if crate::telemetry::throttle::hit(MSG, e.kind()) {
                    tracing::warn!(error = %e, "{MSG}");
                }
            }
        }
    }
    let _ = watch.await;
}

/// Log and publish each loss and recovery of the fence.
async fn watch_fence(fwd: Arc<Forwarder>, shutdown: CancellationToken) {
    if !fwd.store.takes_over() {
        return;
    }
    // Not lost before the first heartbeat succeeds.
    if !fwd.fence.wait_held(&shutdown).await {
        return;
    }
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = fwd.fence.lost() => {}
        }
        metrics::gauge!("hookgate_gateway_fenced").set(1.0);
        tracing::error!(
            "no heartbeat reached the store for {FENCE_AFTER:?}: this gateway stops claiming and sending (and abandons the attempts in flight) until one does, before other gateways may take its leases"
        );
        if !fwd.fence.wait_held(&shutdown).await {
            return;
        }
        metrics::gauge!("hookgate_gateway_fenced").set(0.0);
        tracing::info!("the heartbeat reaches the store again: claiming and sending resume");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_fence_holds_from_a_heartbeat_until_its_deadline() {
        let fence = Fence::new(true);
        assert!(!fence.held(), "nothing is claimed before a first heartbeat");
        let t0 = Instant::now();
        fence.extend(t0 + FENCE_AFTER);
        assert!(fence.held());
        // An older heartbeat's deadline never shortens it.
        fence.extend(t0 + Duration::from_secs(1));
        fence.lost().await;
        assert_eq!(Instant::now() - t0, FENCE_AFTER);
        assert!(!fence.held());
        // A heartbeat heard again holds it again; waiting for it ends then.
        let shutdown = CancellationToken::new();
        let waiting = fence.wait_held(&shutdown);
        fence.extend(Instant::now() + FENCE_AFTER);
        assert!(waiting.await);
        assert!(fence.held());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unenforced_fence_always_holds() {
        let fence = Fence::new(false);
        assert!(fence.held());
        let lost = tokio::time::timeout(Duration::from_secs(3600), fence.lost()).await;
        assert!(lost.is_err(), "never lost");
    }

    #[test]
    fn the_next_heartbeat_says_the_version_set_last() {
        let identity = GatewayIdentity::new("v1".into(), 5);
        assert_eq!(identity.beat().version, "v1");
        identity.clone().set_version("v2".into());
        let beat = identity.beat();
        assert_eq!(beat.version, "v2");
        assert_eq!(beat.id, identity.id);
        assert_eq!(beat.started, 5);
    }
}
