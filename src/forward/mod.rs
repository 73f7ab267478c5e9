//! The forwarder: delivers every stored entry at least once.
//!
//! One loop per route (of each source) claims the route's due deliveries from the
//! store under a lease, and hands each to a delivery task, at most `concurrency` at
//! a time per destination, so a slow or hanging destination only ever holds its own
//! permits, and one route failing never delays another. A delivery hands the
//! original bytes to the route's sender (`sender`: HTTP, NATS JetStream, RabbitMQ), records the attempt, and completes the claim as delivered, retry
//! at (backoff with full jitter) or dead. A circuit breaker per destination stops
//! claims while the destination is down, so waiting deliveries burn no attempts;
//! after its cooldown one probe goes out, preferably a delivery that failed before
//! ([`Store::claim_probe`]). A paced route takes its send slots from the store
//! first.
//!
//! The gateway's heartbeat (`heartbeat`) holds the fence: nothing is claimed or
//! sent while it does not reach the store, and it ends the leases of gateways
//! silent for 10 s.
//!
//! A pull route (`pull`) has no claim loop: its consumers claim its deliveries
//! through the consumer API, and its loop serves their waiting long polls.
//!
//! Paused sources and routes are not claimed. A maintenance loop runs retention, store
//! housekeeping and the gauges. On shutdown the loops stop claiming, in-flight
//! deliveries get `shutdown_grace` to finish, and whatever is left gives its lease
//! back. Time comes from an injected [`Clock`].

mod admission;
mod ahead;
pub mod breaker;
mod deliver;
pub mod destinations;
mod heartbeat;
mod maintenance;
mod meters;
pub mod pace;
pub mod pull;
mod quiet;
pub mod request;
pub mod retry;
mod route;
pub mod sender;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::config::{ForwarderConfig, RetentionConfig};
use crate::live::Live;
use crate::pressure::IngestPressure;
use crate::store::{Claim, Control, HousekeepingPass, PauseTarget, Store, StoreError};
use crate::telemetry::traces::Traces;
use admission::{Admission, InFlightMap, ProbePermit};
use ahead::Place;
pub use heartbeat::{FENCE_AFTER, GatewayIdentity, register_metrics as register_gateway_metrics};
pub use meters::{DeliveryOutcome, DeliveryResult, register_metrics};
use pace::Pace;
pub use route::{ProviderFacts, Route, RouteError, origin, routes};

/// Told about every delivery that goes dead: (source, route, the kind of its last
/// failure, the dead letter's reason). Must not block.
pub type OnDead = Arc<dyn Fn(&str, &str, Option<crate::failure::Failure>, &str) + Send + Sync>;

/// Most entries one claim takes.
const CLAIM_BATCH: usize = 64;

/// How soon a route that has caught up (its last claim found fewer due deliveries
/// than it had slots for) claims again. Every claim is a write (its leases), so a
/// route claiming each time a webhook is stored or a delivery ends would spend the
/// store's writer, and the CPU, on claims of one or two deliveries while webhooks
/// stream in, at the expense of ingest; waiting this long lets a claim take what
/// arrived meanwhile (at 10,000 webhooks a second, twenty of them), for at most this
/// much added delivery latency. A route with a backlog claims without waiting.
const CLAIM_COALESCE: Duration = Duration::from_millis(2);

/// How soon a route held back by ingest first looks for its share again.
const SHARE_POLL: Duration = Duration::from_millis(10);

/// The most a claim takes while ingest is saturated (and so what its share must
/// reach first): a few deliveries a claim, and the share spread over the routes.
const SATURATED_CLAIM: usize = 8;

/// What the forwarder's loops and delivery tasks of one process share.
struct Forwarder {
    store: Arc<dyn Store>,
    /// Ingest first: while ingest is saturated, claims are held to a share.
    pressure: Arc<IngestPressure>,
    /// The forwarder's part of the route table in force: its routes and settings.
    plan: Live<Plan>,
    clock: Clock,
    /// This process's consumer name: unique per run, its heartbeat id.
    worker: String,
    /// Who this gateway is, as its heartbeat says.
    identity: GatewayIdentity,
    /// Whether it may claim and send: only while its heartbeat reaches the store.
    fence: heartbeat::Fence,
    /// What is paused, as this process last saw it.
    paused: RwLock<HashSet<PauseTarget>>,
    /// The attempts in flight, by (entry id, route): cancelled when that delivery is
    /// discarded.
    in_flight: InFlightMap,
    /// Cancelled when in-flight deliveries must give up (after the grace period).
    abort: CancellationToken,
    on_dead: Option<OnDead>,
    /// Each attempt's span, and its `traceparent`, when traces are on.
    traces: Traces,
    /// The retired routes whose `hookgate_route_retired_pending` was last set.
    retired: Mutex<HashSet<(String, String)>>,
    /// The last count of each source with an expected traffic (`quiet`).
    quiet: Mutex<HashMap<String, quiet::Checked>>,
    /// The pull routes' leases and waiting consumers.
    pulls: Arc<pull::Pulls>,
}

impl Forwarder {
    /// The routes and settings in force now.
    fn plan(&self) -> Arc<Plan> {
        self.plan.load()
    }

    /// Whether delivery through `route` is paused, for the route itself or for its
    /// whole source (as this process last saw it).
    fn is_paused(&self, route: &Route) -> bool {
        self.paused
            .read()
            .map(|p| {
                p.iter().any(|t| {
                    t.source == route.source && t.route.as_ref().is_none_or(|r| *r == route.name)
                })
            })
            .unwrap_or(false)
    }
}

/// The forwarder's part of the route table: every route, and the settings the
/// forwarder runs by. A reload swaps in a new one: a route whose [`Route`] changed
/// gets a new loop (the old one stops claiming; what it sent finishes under the
/// route it started with), a removed route's loop stops, an added route's starts.
pub struct Plan {
    pub routes: Vec<Arc<Route>>,
    pub cfg: ForwarderConfig,
    pub retention: RetentionConfig,
    /// The connections the routes' senders share, handed on to the next table.
    pub connections: sender::Connections,
    /// The sources with an expected traffic (`[sources.expect]`), watched for
    /// silence at every maintenance pass.
    pub expects: Vec<(String, crate::config::Expectation)>,
}

impl Plan {
    /// Every configured source that has a route, in configuration order.
    fn sources(&self) -> Vec<String> {
        let mut sources: Vec<String> = self.routes.iter().map(|r| r.source.clone()).collect();
        sources.dedup();
        sources
    }

    /// (source, route) of every route.
    fn route_keys(&self) -> Vec<(String, String)> {
        self.routes
            .iter()
            .map(|r| (r.source.clone(), r.name.clone()))
            .collect()
    }
}

/// What the forwarder shares with the rest of the gateway.
pub struct Neighbours {
    /// How saturated ingest is: the forwarder steps back meanwhile.
    pub pressure: Arc<IngestPressure>,
    /// Told about every delivery that goes dead.
    pub on_dead: Option<OnDead>,
    /// Where attempts are traced.
    pub traces: Traces,
    /// Who this gateway is: its heartbeat, and the name its leases are held under.
    pub identity: GatewayIdentity,
    /// The pull routes' side, shared with the consumer API.
    pub pulls: Arc<pull::Pulls>,
}

/// Run the forwarder until `shutdown` is cancelled, then drain. The identity in
/// `with` names this process as the holder of its leases.
pub async fn run(
    store: Arc<dyn Store>,
    plan: Live<Plan>,
    clock: Clock,
    with: Neighbours,
    shutdown: CancellationToken,
) {
    let Neighbours {
        pressure,
        on_dead,
        traces,
        identity,
        pulls,
    } = with;
    let fence = heartbeat::Fence::new(store.takes_over());
    let fwd = Arc::new(Forwarder {
        store,
        pressure,
        plan,
        clock,
        worker: identity.id.clone(),
        identity,
        fence,
        paused: RwLock::new(HashSet::new()),
        in_flight: Mutex::new(HashMap::new()),
        abort: CancellationToken::new(),
        on_dead,
        traces,
        retired: Mutex::new(HashSet::new()),
        quiet: Mutex::new(HashMap::new()),
        pulls,
    });
    fwd.pulls.attach(fwd.clone());
    refresh_paused(&fwd).await;
    if let Err(e) = fwd
        .store
        .housekeeping(HousekeepingPass::Start, &fwd.plan().sources())
        .await
    {
        tracing::warn!(error = %e, "store housekeeping failed at start");
    }
    // Its heartbeat first: the route loops claim nothing before one succeeded. It
    // beats on until the deliveries in flight at shutdown have drained: they must
    // not lose the fence meanwhile.
    let beat_until = CancellationToken::new();
    let beating = tokio::spawn(heartbeat::run(fwd.clone(), beat_until.clone()));
    let deliveries = TaskTracker::new();
    let loops = tokio::spawn(supervise(fwd.clone(), deliveries.clone(), shutdown.clone()));
    let control = tokio::spawn(control_loop(fwd.clone(), shutdown.clone()));
    let operator = tokio::spawn(operator_loop(fwd.clone(), shutdown.clone()));
    let sweeping = tokio::spawn(pull::sweep(fwd.clone(), shutdown.clone()));

    shutdown.cancelled().await;
    fwd.pulls.close();
    let _ = loops.await;
    let _ = control.await;
    let _ = operator.await;
    let _ = sweeping.await;
    deliveries.close();
    if tokio::time::timeout(fwd.plan().cfg.shutdown_grace, deliveries.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            in_flight = deliveries.len(),
            "deliveries still running after the grace period; releasing their leases"
        );
        fwd.abort.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), deliveries.wait()).await;
    }
    beat_until.cancel();
    let _ = beating.await;
    tracing::info!("forwarder stopped");
}

async fn refresh_paused(fwd: &Forwarder) {
    match fwd.store.paused().await {
        Ok(list) => {
            if let Ok(mut p) = fwd.paused.write() {
                *p = list.into_iter().collect();
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot read what is paused"),
    }
}

/// Applies pauses and discards made through this process the moment they happen: a
/// paused source sends nothing more, and a discarded entry's attempt is cancelled.
/// (Other processes sharing the store see a pause at their next `poll_interval`.)
async fn operator_loop(fwd: Arc<Forwarder>, shutdown: CancellationToken) {
    use tokio::sync::broadcast::error::RecvError;
    let mut controls = fwd.store.controls();
    loop {
        let control = tokio::select! {
            _ = shutdown.cancelled() => return,
            c = controls.recv() => c,
        };
        match control {
            Ok(Control::Paused {
                source,
                route,
                paused,
            }) => {
                if let Ok(mut p) = fwd.paused.write() {
                    let target = PauseTarget { source, route };
                    if paused {
                        p.insert(target);
                    } else {
                        p.remove(&target);
                    }
                }
            }
            Ok(Control::Discarded { id, route }) => {
                if let Some(token) = fwd
                    .in_flight
                    .lock()
                    .ok()
                    .and_then(|m| m.get(&(id, route)).cloned())
                {
                    token.cancel();
                }
            }
            // Missed some: the pause state is read again; a missed discard's
            // attempt runs to its end and is recorded against the discarded entry.
            Err(RecvError::Lagged(_)) => refresh_paused(&fwd).await,
            Err(RecvError::Closed) => return,
        }
    }
}

/// Keeps one loop per route of the table in force: at every swap a route whose
/// [`Route`] is new (added or changed) gets a new loop and its old loop, if any, is
/// told to stop claiming; a removed route's loop stops. Deliveries already claimed
/// finish under the route they were claimed with. Returns once every loop has
/// ended after `shutdown`.
async fn supervise(fwd: Arc<Forwarder>, deliveries: TaskTracker, shutdown: CancellationToken) {
    type Running = (Arc<Route>, CancellationToken, tokio::task::JoinHandle<()>);
    let mut changes = fwd.plan.changes();
    let mut running: HashMap<(String, String), Running> = HashMap::new();
    let mut stopping = Vec::new();
    loop {
        changes.mark_unchanged();
        let plan = fwd.plan();
        let mut current = HashSet::new();
        for route in &plan.routes {
            let key = (route.source.clone(), route.name.clone());
            current.insert(key.clone());
            if running
                .get(&key)
                .is_some_and(|(r, _, _)| Arc::ptr_eq(r, route))
            {
                continue;
            }
            if let Some((_, stop, handle)) = running.remove(&key) {
                stop.cancel();
                stopping.push(handle);
            }
            let stop = shutdown.child_token();
            // A pull route is claimed by its consumers: its loop serves their long polls.
            let handle = if route.config.target.kind() == crate::config::DestinationKind::Pull {
                tokio::spawn(pull::route_loop(fwd.clone(), route.clone(), stop.clone()))
            } else {
                tokio::spawn(route_loop(
                    fwd.clone(),
                    route.clone(),
                    deliveries.clone(),
                    stop.clone(),
                    shutdown.clone(),
                ))
            };
            running.insert(key, (route.clone(), stop, handle));
        }
        let gone: Vec<(String, String)> = running
            .keys()
            .filter(|k| !current.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            if let Some((_, stop, handle)) = running.remove(&key) {
                stop.cancel();
                stopping.push(handle);
            }
        }
        stopping.retain(|h| !h.is_finished());
        tokio::select! {
            _ = shutdown.cancelled() => break,
            changed = changes.changed() => if changed.is_err() {
                shutdown.cancelled().await;
                break;
            },
        }
    }
    for (_, (_, _, handle)) in running {
        let _ = handle.await;
    }
    for handle in stopping {
        let _ = handle.await;
    }
}

/// Refreshes pause state every poll interval; runs maintenance every
/// `maintenance_interval`.
async fn control_loop(fwd: Arc<Forwarder>, shutdown: CancellationToken) {
    let mut last_maintenance = Instant::now();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(fwd.plan().cfg.poll_interval) => {}
        }
        refresh_paused(&fwd).await;
        if last_maintenance.elapsed() >= fwd.plan().cfg.maintenance_interval {
            last_maintenance = Instant::now();
            let plan = fwd.plan();
            maintenance::run(&fwd, &plan.sources(), &plan.route_keys(), &shutdown).await;
        }
    }
}

/// Wait for new work, a timeout, or shutdown.
async fn idle(
    signal: &mut tokio::sync::watch::Receiver<u64>,
    wait: Duration,
    shutdown: &CancellationToken,
) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = signal.changed() => {}
        _ = tokio::time::sleep(wait) => {}
    }
}

/// Take up to `want` send slots of a paced route: `Ok(n)` with `n ≥ 1` slots taken,
/// or `Err(wait)` when none is free (the route is held after a 429/503, or its pace
/// is spent), with how long until the next one. A store that cannot answer gives no
/// slot: a paced route never sends unpaced.
async fn send_slots(
    fwd: &Forwarder,
    route: &Route,
    pace: &std::sync::Mutex<Pace>,
    want: usize,
) -> Result<usize, Duration> {
    let now = fwd.clock.now_ms();
    let Ok((hold_until, spacing, burst)) = pace
        .lock()
        .map(|p| (p.hold_until(), p.spacing(), p.burst()))
    else {
        return Err(Duration::from_secs(1));
    };
    if hold_until > now {
        return Err(Duration::from_millis(
            u64::try_from(hold_until - now).unwrap_or(0),
        ));
    }
    let mut granted = 0;
    while granted < want {
        match fwd
            .store
            .take_send_slot(&route.source, &route.name, now, spacing, burst)
            .await
        {
            Ok(None) => granted += 1,
            Ok(Some(at)) if granted == 0 => {
                return Err(Duration::from_millis(u64::try_from(at - now).unwrap_or(0)));
            }
            Ok(Some(_)) => break,
            Err(e) => {
                const MSG: &str = "cannot take a send slot; waiting";
                let kind = format!("{}/{} {}", route.source, route.name, e.kind());
                if crate::telemetry::throttle::hit(MSG, &kind) {
                    tracing::warn!(source = %route.source, route = %route.name, error = %e, "{MSG}");
                }
                if granted == 0 {
                    return Err(fwd.plan().cfg.poll_interval);
                }
                break;
            }
        }
    }
    Ok(granted)
}

/// Claims and delivers the due deliveries of one route, for as long as the
/// forwarder runs: admit (the breaker, its slow start), reserve (room among the
/// route's slots, ingest's share, a paced route's send slots), claim, dispatch.
async fn route_loop(
    fwd: Arc<Forwarder>,
    route: Arc<Route>,
    deliveries: TaskTracker,
    stop: CancellationToken,
    shutdown: CancellationToken,
) {
    // The loop ends when it is told to stop (its route changed or went, or the
    // gateway shuts down); its deliveries end with the gateway.
    let deliveries_shutdown = shutdown;
    let shutdown = stop;
    let ahead = ahead::Ahead::new(
        route.concurrency,
        route.permits.clone(),
        fwd.plan().cfg.lease,
        route.timeout,
        route.pace.is_some(),
    );
    let mut signal = fwd.store.work_signal(&route.source, &route.name);
    let poll = fwd.plan().cfg.poll_interval;
    let mut store_errors = 0u32;
    // Set after a claim that caught up: the next claim waits until then.
    let mut next_claim: Option<tokio::time::Instant> = None;
    // Sleep, unless shutdown comes first (then the loop ends).
    let pause = async |wait: Duration| -> bool {
        tokio::select! {
            _ = shutdown.cancelled() => false,
            _ = tokio::time::sleep(wait) => true,
        }
    };
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        if fwd.is_paused(&route) {
            idle(&mut signal, poll, &shutdown).await;
            continue;
        }
        // Nothing is claimed while this gateway's heartbeat does not reach the store
        // (see `heartbeat`): others may take its leases over.
        if !fwd.fence.held() {
            if !fwd.fence.wait_held(&shutdown).await {
                return;
            }
            continue;
        }
        if let Some(at) = next_claim.take()
            && !pause(at.saturating_duration_since(tokio::time::Instant::now())).await
        {
            return;
        }
        // A probe's permit goes back to the breaker wherever it is dropped unused.
        let (limit, mut permit) = match admit(&fwd, &route, &ahead) {
            Ok(admitted) => admitted,
            Err(wait) if pause(wait).await => continue,
            Err(_) => return,
        };
        // Wait for room to claim (see `ahead`): nothing is claimed beyond what the
        // route's slots will send next, and a claimed delivery never waits for a slot
        // longer than its lease allows.
        let Some(mut places) = ahead.room(limit, &shutdown).await else {
            return;
        };
        let shared = match reserve(&fwd, &route, &mut places).await {
            Ok(shared) => shared,
            Err(wait) => {
                drop((permit, places));
                match pause(wait).await {
                    true => continue,
                    false => return,
                }
            }
        };
        // The lease runs from the claim's start: a slow store's answer has spent
        // part of it (see `ahead`).
        let leased_at = tokio::time::Instant::now();
        let claimed = claim(&fwd, &route, places.len(), permit.is_some()).await;
        fwd.pressure
            .give_back(shared.saturating_sub(claimed.as_ref().map_or(0, Vec::len)));
        let claims = match claimed {
            Ok(c) => {
                store_errors = 0;
                c
            }
            Err(e) => {
                store_errors += 1;
                const MSG: &str = "claim failed; retrying";
                let kind = format!("{}/{} {}", route.source, route.name, e.kind());
                if crate::telemetry::throttle::hit(MSG, &kind) {
                    tracing::warn!(source = %route.source, route = %route.name, error = %e, consecutive = store_errors, "{MSG}");
                }
                drop((permit, places));
                match pause(poll).await {
                    true => continue,
                    false => return,
                }
            }
        };
        if claims.len() < places.len() {
            next_claim = Some(tokio::time::Instant::now() + CLAIM_COALESCE);
        }
        if claims.is_empty() {
            drop((permit, places));
            idle(&mut signal, poll, &shutdown).await;
            continue;
        }
        // One place per claim (the store returns at most as many as asked); the
        // room left over goes back at once. Each delivery waits for its destination
        // slot in claim order. (A probe claims one delivery, which takes the permit.)
        for (claim, place) in claims.into_iter().zip(places.drain(..)) {
            let fwd = fwd.clone();
            let route = route.clone();
            let shutdown = deliveries_shutdown.clone();
            let permit = permit.take();
            deliveries.spawn(async move {
                let queued = deliver::Queued {
                    place,
                    shutdown,
                    leased_at,
                };
                deliver::deliver(&fwd, &route, claim, permit, queued).await;
            });
        }
    }
}

/// What the breaker lets the route claim now: how many, and the probe's permit
/// when the breaker is half-open (then one); `Err` is how long to wait first
/// (open, or the slow start after a recovery has as many in flight as it allows).
fn admit(
    fwd: &Forwarder,
    route: &Route,
    ahead: &ahead::Ahead,
) -> Result<(usize, Option<ProbePermit>), Duration> {
    let now = fwd.clock.now_ms();
    let admission = admission::admit(&route.breaker, &fwd.clock, now);
    deliver::breaker_gauge(route);
    match admission {
        Admission::Allow => {}
        Admission::Probe(p) => return Ok((1, Some(p))),
        Admission::Deny(until) => {
            let wait = Duration::from_millis(u64::try_from(until - now).unwrap_or(0));
            return Err(wait.min(fwd.plan().cfg.poll_interval));
        }
    }
    // Slow start after a recovery: no more claimed than the breaker allows.
    // (Only while ramping: at full concurrency, waiting for room below is enough.)
    let held = ahead.held();
    let allowed = route.breaker.ramp(now, route.concurrency);
    if allowed >= route.concurrency {
        return Ok((CLAIM_BATCH, None));
    }
    if held >= allowed {
        return Err(Duration::from_millis(20));
    }
    Ok((CLAIM_BATCH.min(allowed.saturating_sub(held).max(1)), None))
}

/// Narrow the route's places to what it may claim now: ingest first
/// (`crate::pressure`: while ingest is saturated, only once the webhooks stored
/// meanwhile have earned a share of a few deliveries, each claim being a write), and
/// on a paced route the send slots it has (taken before claiming: a claimed entry
/// must not wait). `Ok` is the share of ingest's pressure taken (what a claim that
/// takes fewer gives back); `Err` how long to wait before looking again, the share
/// given back.
async fn reserve(
    fwd: &Forwarder,
    route: &Route,
    places: &mut Vec<Place>,
) -> Result<usize, Duration> {
    if fwd.pressure.saturated() {
        places.truncate(SATURATED_CLAIM);
    }
    let shared = fwd.pressure.share(places.len());
    if shared == 0 {
        return Err(SHARE_POLL);
    }
    let Some(pace) = &route.pace else {
        return Ok(shared);
    };
    match send_slots(fwd, route, pace, places.len()).await {
        Ok(n) => {
            places.truncate(n);
            fwd.pressure.give_back(shared.saturating_sub(n));
            Ok(places.len())
        }
        Err(wait) => {
            fwd.pressure.give_back(shared);
            Err(wait.min(fwd.plan().cfg.poll_interval))
        }
    }
}

/// Claim up to `n` due deliveries of the route; a probe claims one, preferably a
/// delivery that failed before: a destination that fails only first attempts then
/// accepts it, and the breaker closes.
async fn claim(
    fwd: &Forwarder,
    route: &Route,
    n: usize,
    probe: bool,
) -> Result<Vec<Claim>, StoreError> {
    // The lease runs from now: read the clock after waiting for room and slots.
    let now = fwd.clock.now_ms();
    let lease = fwd.plan().cfg.lease;
    match probe {
        true => fwd
            .store
            .claim_probe(&route.source, &route.name, &fwd.worker, now, lease)
            .await
            .map(Vec::from_iter),
        false => {
            fwd.store
                .claim(&route.source, &route.name, &fwd.worker, now, n, lease)
                .await
        }
    }
}
