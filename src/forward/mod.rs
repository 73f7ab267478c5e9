//! The forwarder: delivers every stored entry at least once.
//!
//! One loop per source claims due entries from the store under a lease, and hands
//! each to a delivery task, at most `concurrency` at a time per source, so a slow or
//! hanging destination only ever holds its own permits. A delivery POSTs the
//! original bytes, records the attempt, and completes the claim as delivered, retry
//! at (backoff with full jitter) or dead. A circuit breaker per destination stops
//! claims while the destination is down, so waiting entries burn no attempts.
//!
//! Paused sources are not claimed. A maintenance loop runs retention, store
//! housekeeping and the gauges. On shutdown the loops stop claiming, in-flight
//! deliveries get `shutdown_grace` to finish, and whatever is left gives its lease
//! back. Time comes from an injected [`Clock`].

pub mod breaker;
pub mod request;
pub mod retry;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{ForwarderConfig, RetentionConfig};
use crate::header_policy::HeaderPolicy;
use crate::store::{Attempt, Claim, Completion, Control, HousekeepingPass, Store};
use crate::telemetry::{DeliveryOutcome, DeliveryResult};
use breaker::{Breaker, Gate};
use retry::{Next, Outcome, RetryPolicy};

/// Unix milliseconds. Injected so that tests control time.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Told about every entry that goes dead: (source, reason). Must not block.
pub type OnDead = Arc<dyn Fn(&str, &str) + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(crate::store::now_ms)
}

/// Most entries one claim takes.
const CLAIM_BATCH: usize = 64;
/// Entries purged per retention step (the step repeats while it fills up).
const PURGE_BATCH: usize = 500;

/// Where and how one source's entries are delivered.
pub struct Route {
    pub source: String,
    pub destination: String,
    pub signing_key: Option<Vec<u8>>,
    pub policy: RetryPolicy,
    pub timeout: Duration,
    pub concurrency: usize,
    /// Which stored headers go to the destination.
    pub headers: HeaderPolicy,
    /// Whether the provider's signature covers the whole body; when it does not,
    /// deliveries say so (`hookgate-body-signed: false`).
    pub body_signed: bool,
    pub client: reqwest::Client,
    /// Attempts in flight to the destination origin, shared by every source that
    /// delivers there.
    pub permits: Arc<Semaphore>,
    /// Shared by every source with the same destination origin.
    pub breaker: Arc<Breaker>,
}

/// Build the HTTP client of a route: no redirects (a 3xx is a final answer), the
/// connect timeout, and keep-alive.
pub fn client(connect_timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    crate::tls::install_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(connect_timeout)
        .pool_idle_timeout(Duration::from_secs(60))
        .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// The key of a destination's breaker, and how logs and metrics name a destination:
/// `scheme://host:port` only. A `user:password@` in the URL never leaves the route.
pub fn origin(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(u) => {
            let host = u.host().unwrap_or("");
            match u.port_u16() {
                Some(port) => format!("{}://{host}:{port}", u.scheme_str().unwrap_or("http")),
                None => format!("{}://{host}", u.scheme_str().unwrap_or("http")),
            }
        }
        // Not a URL (config validation refuses those): name nothing of it.
        Err(_) => "invalid-url".to_string(),
    }
}

/// Shared state of the forwarder's loops.
struct Shared {
    store: Arc<dyn Store>,
    cfg: ForwarderConfig,
    retention: RetentionConfig,
    clock: Clock,
    /// This process's consumer name: unique per run.
    worker: String,
    paused: RwLock<HashSet<String>>,
    /// The attempts in flight, by entry id: cancelled when the entry is discarded.
    in_flight: Mutex<HashMap<String, CancellationToken>>,
    /// Cancelled when in-flight deliveries must give up (after the grace period).
    abort: CancellationToken,
    on_dead: Option<OnDead>,
}

/// Run the forwarder until `shutdown` is cancelled, then drain.
pub async fn run(
    store: Arc<dyn Store>,
    routes: Vec<Route>,
    cfg: ForwarderConfig,
    retention: RetentionConfig,
    clock: Clock,
    on_dead: Option<OnDead>,
    shutdown: CancellationToken,
) {
    let worker = format!(
        "{}-{}-{}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "hookgate".into()),
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    );
    let shared = Arc::new(Shared {
        store,
        cfg,
        retention,
        clock,
        worker,
        paused: RwLock::new(HashSet::new()),
        in_flight: Mutex::new(HashMap::new()),
        abort: CancellationToken::new(),
        on_dead,
    });
    refresh_paused(&shared).await;
    let sources: Vec<String> = routes.iter().map(|r| r.source.clone()).collect();
    if let Err(e) = shared
        .store
        .housekeeping(HousekeepingPass::Start, &sources)
        .await
    {
        tracing::warn!(error = %e, "store housekeeping failed at start");
    }
    let deliveries = TaskTracker::new();
    let mut loops = Vec::new();
    for route in routes {
        loops.push(tokio::spawn(source_loop(
            shared.clone(),
            Arc::new(route),
            deliveries.clone(),
            shutdown.clone(),
        )));
    }
    let control = tokio::spawn(control_loop(shared.clone(), sources, shutdown.clone()));
    let operator = tokio::spawn(operator_loop(shared.clone(), shutdown.clone()));

    shutdown.cancelled().await;
    for l in loops {
        let _ = l.await;
    }
    let _ = control.await;
    let _ = operator.await;
    deliveries.close();
    if tokio::time::timeout(shared.cfg.shutdown_grace, deliveries.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            in_flight = deliveries.len(),
            "deliveries still running after the grace period; releasing their leases"
        );
        shared.abort.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), deliveries.wait()).await;
    }
    tracing::info!("forwarder stopped");
}

async fn refresh_paused(shared: &Shared) {
    match shared.store.paused_sources().await {
        Ok(list) => {
            if let Ok(mut p) = shared.paused.write() {
                *p = list.into_iter().collect();
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot read paused sources"),
    }
}

/// Applies pauses and discards made through this process the moment they happen: a
/// paused source sends nothing more, and a discarded entry's attempt is cancelled.
/// (Other processes sharing the store see a pause at their next `poll_interval`.)
async fn operator_loop(shared: Arc<Shared>, shutdown: CancellationToken) {
    use tokio::sync::broadcast::error::RecvError;
    let mut controls = shared.store.controls();
    loop {
        let control = tokio::select! {
            _ = shutdown.cancelled() => return,
            c = controls.recv() => c,
        };
        match control {
            Ok(Control::Paused { source, paused }) => {
                if let Ok(mut p) = shared.paused.write() {
                    if paused {
                        p.insert(source);
                    } else {
                        p.remove(&source);
                    }
                }
            }
            Ok(Control::Discarded { id }) => {
                if let Some(token) = shared
                    .in_flight
                    .lock()
                    .ok()
                    .and_then(|m| m.get(&id).cloned())
                {
                    token.cancel();
                }
            }
            // Missed some: the pause state is read again; a missed discard's
            // attempt runs to its end and is recorded against the discarded entry.
            Err(RecvError::Lagged(_)) => refresh_paused(&shared).await,
            Err(RecvError::Closed) => return,
        }
    }
}

fn is_paused(shared: &Shared, source: &str) -> bool {
    shared
        .paused
        .read()
        .map(|p| p.contains(source))
        .unwrap_or(false)
}

/// Refreshes pause state every poll interval; runs maintenance every
/// `maintenance_interval`.
async fn control_loop(shared: Arc<Shared>, sources: Vec<String>, shutdown: CancellationToken) {
    let mut last_maintenance = Instant::now();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(shared.cfg.poll_interval) => {}
        }
        refresh_paused(&shared).await;
        if last_maintenance.elapsed() >= shared.cfg.maintenance_interval {
            last_maintenance = Instant::now();
            maintain(&shared, &sources, &shutdown).await;
        }
    }
}

async fn maintain(shared: &Shared, sources: &[String], shutdown: &CancellationToken) {
    if let Err(e) = shared
        .store
        .housekeeping(HousekeepingPass::Periodic, sources)
        .await
    {
        tracing::warn!(error = %e, "store housekeeping failed");
    }
    let now = (shared.clock)();
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let delivered_before = now.saturating_sub(ms(shared.retention.delivered));
    let dead_before = now.saturating_sub(ms(shared.retention.dead));
    // Bounded steps, yielding between them, so retention never stalls ingest.
    for _ in 0..20 {
        if shutdown.is_cancelled() {
            return;
        }
        match shared
            .store
            .purge(now, delivered_before, dead_before, PURGE_BATCH)
            .await
        {
            Ok(p) => {
                if p.entries > 0 || p.dedupe_keys > 0 {
                    tracing::info!(
                        entries = p.entries,
                        dedupe_keys = p.dedupe_keys,
                        "retention purged"
                    );
                }
                if p.entries < PURGE_BATCH as u64 && p.dedupe_keys < PURGE_BATCH as u64 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention pass failed");
                break;
            }
        }
    }
    for s in sources {
        if let Ok(st) = shared.store.stats(s).await {
            metrics::gauge!("hookgate_dead_entries", "source" => s.clone()).set(st.dead as f64);
            metrics::gauge!("hookgate_pending_entries", "source" => s.clone())
                .set(st.pending as f64);
            let age = st
                .oldest_pending_at
                .map(|t| ((now - t).max(0) as f64) / 1000.0)
                .unwrap_or(0.0);
            metrics::gauge!("hookgate_oldest_pending_age_seconds", "source" => s.clone()).set(age);
        }
    }
}

/// Publish a destination's breaker state (0 closed, 1 half-open, 2 open).
fn breaker_gauge(route: &Route) {
    let v = route.breaker.state().gauge();
    metrics::gauge!("hookgate_circuit_breaker_state", "destination" => origin(&route.destination))
        .set(v);
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

async fn source_loop(
    shared: Arc<Shared>,
    route: Arc<Route>,
    deliveries: TaskTracker,
    shutdown: CancellationToken,
) {
    let permits = route.permits.clone();
    let mut signal = shared.store.work_signal();
    let lease = shared.cfg.lease;
    let poll = shared.cfg.poll_interval;
    let mut store_errors = 0u32;
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        if is_paused(&shared, &route.source) {
            idle(&mut signal, poll, &shutdown).await;
            continue;
        }
        let now = (shared.clock)();
        let mut limit = CLAIM_BATCH;
        let mut probe = false;
        let gate = route.breaker.gate(now);
        breaker_gauge(&route);
        match gate {
            Gate::Allow => {}
            Gate::Probe => {
                limit = 1;
                probe = true;
            }
            Gate::Deny(until) => {
                let wait = Duration::from_millis(u64::try_from(until - now).unwrap_or(0));
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wait.min(poll)) => {}
                }
                continue;
            }
        }
        // Slow start after a recovery: no more in flight than the breaker allows.
        let in_flight = route
            .concurrency
            .saturating_sub(permits.available_permits());
        let allowed = route.breaker.ramp(now, route.concurrency);
        // (Only while ramping: at full concurrency, waiting for a slot below is enough.)
        if !probe && allowed < route.concurrency && in_flight >= allowed {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            continue;
        }
        if !probe && allowed < route.concurrency {
            limit = limit.min(allowed.saturating_sub(in_flight).max(1));
        }
        // Wait for a free slot before claiming, so nothing is claimed while the
        // destination is saturated; then take every other slot free right now. Only
        // as many entries are claimed as can start at once: a claimed entry never
        // waits for a slot, so its lease (longer than the delivery timeout) cannot run
        // out before its attempt ends, however many sources share the destination.
        let first = tokio::select! {
            _ = shutdown.cancelled() => return,
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
        };
        let limit = limit.min(route.concurrency.max(1));
        let mut slots = vec![first];
        while slots.len() < limit {
            match permits.clone().try_acquire_owned() {
                Ok(p) => slots.push(p),
                Err(_) => break,
            }
        }
        // From here on, a granted probe that sends nothing must be handed back.
        let unused_probe = |route: &Route| {
            if probe {
                route.breaker.release_probe((shared.clock)());
            }
        };
        // The lease runs from now: read the clock after waiting for the permit.
        let now = (shared.clock)();
        let claims = match shared
            .store
            .claim(&route.source, &shared.worker, now, slots.len(), lease)
            .await
        {
            Ok(c) => {
                store_errors = 0;
                c
            }
            Err(e) => {
                store_errors += 1;
                unused_probe(&route);
                if store_errors == 1 || store_errors.is_multiple_of(60) {
                    tracing::warn!(source = %route.source, error = %e, "claim failed; retrying");
                }
                drop(slots);
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(poll) => {}
                }
                continue;
            }
        };
        if claims.is_empty() {
            unused_probe(&route);
            drop(slots);
            idle(&mut signal, poll, &shutdown).await;
            continue;
        }
        // One slot per claim (the store returns at most as many as asked); the
        // slots left over go back at once.
        for (claim, permit) in claims.into_iter().zip(slots.drain(..)) {
            let shared = shared.clone();
            let route = route.clone();
            deliveries.spawn(async move {
                deliver(&shared, &route, claim, probe, permit).await;
            });
        }
    }
}

/// Send one attempt and turn the result into an [`Outcome`].
async fn send(route: &Route, claim: &Claim, attempt: u32, now_ms: i64) -> Outcome {
    let entry = &claim.entry;
    let headers = request::headers(
        entry,
        &route.source,
        attempt,
        now_ms.div_euclid(1000),
        &route.headers,
        route.body_signed,
        route.signing_key.as_deref(),
    );
    let req = route
        .client
        .post(&route.destination)
        .timeout(route.timeout)
        .headers(headers)
        .body(entry.body.clone());
    match req.send().await {
        Ok(mut resp) => {
            let code = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry::parse_retry_after(v, now_ms));
            // Read (a bounded part of) the body so the connection can be reused. The
            // status is the answer: a body that fails to arrive does not change it.
            let mut read = 0usize;
            while read < 64 * 1024 {
                match resp.chunk().await {
                    Ok(Some(c)) => read += c.len(),
                    Ok(None) | Err(_) => break,
                }
            }
            Outcome::Status { code, retry_after }
        }
        Err(e) if e.is_timeout() => Outcome::Timeout,
        Err(e) if e.is_connect() => Outcome::Connect(root_cause(&e)),
        Err(e) => Outcome::Io(root_cause(&e)),
    }
}

/// The innermost error message (e.g. "Connection refused (os error 111)"). It never
/// holds request data, nor a URL's `user:password@` should an error quote its URL.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    let text = without_userinfo(&cur.to_string());
    text.chars().take(200).collect()
}

/// `text` with the userinfo of every URL in it removed.
fn without_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace() || c == ')')
            .unwrap_or(tail.len());
        match tail[..end].rfind('@') {
            Some(at) => rest = &tail[at + 1..],
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

/// Deliver one claimed entry. `permit` is the destination slot: it is given back as
/// soon as the HTTP exchange ends, so recording the outcome never holds it.
async fn deliver(
    shared: &Shared,
    route: &Route,
    claim: Claim,
    probe: bool,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let entry = &claim.entry;
    let attempt_no = entry.attempts + 1;
    // The breaker may have opened since the claim: give the entry back untouched.
    // (A probe is the one attempt the half-open breaker lets through.)
    let now = (shared.clock)();
    if !probe && let Gate::Deny(until) = route.breaker.gate(now) {
        complete(shared, &claim, Completion::Release { at: until }).await;
        return;
    }
    // Paused since the claim (here or, seen at the last poll, elsewhere): give the
    // entry back untouched; it is sent after the resume.
    if is_paused(shared, &route.source) {
        if probe {
            route.breaker.release_probe(now);
        }
        complete(shared, &claim, Completion::Release { at: now }).await;
        return;
    }
    let discarded = CancellationToken::new();
    if let Ok(mut m) = shared.in_flight.lock() {
        m.insert(entry.id.clone(), discarded.clone());
    }
    let started = Instant::now();
    let outcome = tokio::select! {
        o = send(route, &claim, attempt_no, now) => Some(o),
        _ = discarded.cancelled() => None,
        _ = shared.abort.cancelled() => {
            if probe {
                route.breaker.release_probe((shared.clock)());
            }
            forget_in_flight(shared, &entry.id);
            complete(shared, &claim, Completion::Release { at: (shared.clock)() }).await;
            return;
        }
    };
    forget_in_flight(shared, &entry.id);
    drop(permit);
    let elapsed = started.elapsed();
    let latency_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    let Some(outcome) = outcome else {
        // Discarded while it was being sent: the request is abandoned, the attempt
        // recorded against the discarded entry (its status stays discarded).
        if probe {
            route.breaker.release_probe((shared.clock)());
        }
        tracing::info!(
            source = %route.source,
            entry_id = %entry.id,
            attempt = attempt_no,
            "delivery cancelled: the entry was discarded"
        );
        let attempt = Attempt {
            n: attempt_no,
            at: now,
            status_code: None,
            error: Some("cancelled: the entry was discarded".into()),
            latency_ms,
        };
        let at = (shared.clock)();
        complete(shared, &claim, Completion::Retry { attempt, at }).await;
        return;
    };
    let done_at = (shared.clock)();
    let result = DeliveryResult::of(&outcome).label();
    metrics::counter!("hookgate_delivery_attempts_total", "source" => route.source.clone(), "result" => result)
        .increment(1);
    metrics::histogram!("hookgate_delivery_seconds", "source" => route.source.clone())
        .record(elapsed.as_secs_f64());
    let opened = route
        .breaker
        .record(!retry::is_destination_failure(&outcome), done_at);
    breaker_gauge(route);
    if opened {
        tracing::warn!(
            source = %route.source,
            destination = %origin(&route.destination),
            "circuit breaker opened: deliveries to this destination wait"
        );
    }
    let (status_code, error) = match &outcome {
        Outcome::Status { code, .. } => (Some(*code), None),
        Outcome::Timeout => (
            None,
            Some(format!(
                "timeout after {}",
                humantime::format_duration(route.timeout)
            )),
        ),
        other => (None, Some(retry::describe(other))),
    };
    // What the log says went wrong: the error, or the HTTP status of a refusal.
    let failure = match (&error, status_code) {
        (Some(e), _) => Some(e.clone()),
        (None, Some(code)) if !(200..300).contains(&code) => Some(format!("HTTP {code}")),
        _ => None,
    };
    let attempt = Attempt {
        n: attempt_no,
        at: now,
        status_code,
        error,
        latency_ms,
    };
    // The budget counts from arrival, or from the last replay.
    let next = route.policy.next(
        attempt_no.saturating_sub(entry.budget_attempts),
        entry.budget_start,
        &outcome,
        done_at,
        fastrand::f64(),
    );
    let delivery_outcome = DeliveryOutcome::of(&next);
    let outcome_label = delivery_outcome.label();
    metrics::counter!("hookgate_deliveries_total", "source" => route.source.clone(), "outcome" => outcome_label)
        .increment(1);
    if matches!(next, Next::RetryAt(_)) {
        metrics::counter!("hookgate_retries_scheduled_total", "source" => route.source.clone())
            .increment(1);
    }
    let completion = match next {
        Next::Delivered => Completion::Delivered { attempt },
        Next::RetryAt(at) => Completion::Retry { attempt, at },
        Next::Dead(reason) => {
            tracing::error!(
                source = %route.source,
                entry_id = %entry.id,
                event_id = entry.event_id.as_deref().unwrap_or(""),
                attempts = attempt_no,
                reason = %reason,
                "entry moved to the dead-letter queue"
            );
            metrics::counter!("hookgate_dead_lettered_total", "source" => route.source.clone())
                .increment(1);
            if let Some(notify) = &shared.on_dead {
                notify(&route.source, &reason);
            }
            Completion::Dead {
                attempt: Some(attempt),
                reason,
            }
        }
    };
    // One line per attempt: INFO when delivered, WARN when it failed and will be
    // retried, ERROR when the entry is dead; a failure says what went wrong.
    let failure = failure.as_deref().unwrap_or("");
    match delivery_outcome {
        DeliveryOutcome::Delivered => tracing::info!(
            source = %route.source, entry_id = %entry.id,
            event_id = entry.event_id.as_deref().unwrap_or(""), attempt = attempt_no,
            status = status_code.unwrap_or(0), outcome = outcome_label, latency_ms, "delivery"
        ),
        DeliveryOutcome::Retry => tracing::warn!(
            source = %route.source, entry_id = %entry.id,
            event_id = entry.event_id.as_deref().unwrap_or(""), attempt = attempt_no,
            error = failure, outcome = outcome_label, latency_ms, "delivery failed; retrying"
        ),
        DeliveryOutcome::Dead => tracing::error!(
            source = %route.source, entry_id = %entry.id,
            event_id = entry.event_id.as_deref().unwrap_or(""), attempt = attempt_no,
            error = failure, outcome = outcome_label, latency_ms, "delivery failed; dead"
        ),
    }
    complete(shared, &claim, completion).await;
}

fn forget_in_flight(shared: &Shared, id: &str) {
    if let Ok(mut m) = shared.in_flight.lock() {
        m.remove(id);
    }
}

/// Record a completion, retrying while the store is unreachable. If it never
/// succeeds, the lease expires and the entry is delivered again (at-least-once).
async fn complete(shared: &Shared, claim: &Claim, completion: Completion) {
    let mut delay = Duration::from_millis(50);
    for _ in 0..8 {
        let now = (shared.clock)();
        match shared
            .store
            .complete(claim, &shared.worker, completion.clone(), now)
            .await
        {
            Ok(true) => return,
            Ok(false) => {
                tracing::warn!(
                    entry_id = %claim.entry.id,
                    "completion not applied: the lease expired and another worker holds the entry, or an operator discarded or replayed it"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(entry_id = %claim.entry.id, error = %e, "cannot record the delivery; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }
    tracing::error!(
        entry_id = %claim.entry.id,
        "could not record the delivery; the entry will be delivered again when its lease expires"
    );
}

/// What the forwarder needs to know of a source's provider.
#[derive(Debug, Clone)]
pub struct ProviderFacts {
    pub headers: HeaderPolicy,
    pub body_signed: bool,
}

/// Build the routes of every source. Sources delivering to the same destination
/// origin share one breaker and one concurrency limit (the smallest configured).
/// `facts` gives each source's provider facts (by source name).
pub fn routes(
    sources: &[crate::config::SourceConfig],
    cfg: &ForwarderConfig,
    facts: &HashMap<String, ProviderFacts>,
) -> Result<Vec<Route>, reqwest::Error> {
    let mut limits: HashMap<String, usize> = HashMap::new();
    for s in sources {
        let l = limits
            .entry(origin(&s.destination))
            .or_insert(s.delivery.concurrency);
        *l = (*l).min(s.delivery.concurrency);
    }
    let mut shared: HashMap<String, (Arc<Breaker>, Arc<Semaphore>)> = HashMap::new();
    sources
        .iter()
        .map(|s| {
            let key = origin(&s.destination);
            let limit = limits.get(&key).copied().unwrap_or(s.delivery.concurrency);
            let (breaker, permits) = shared
                .entry(key)
                .or_insert_with(|| {
                    (
                        Arc::new(Breaker::new(cfg.breaker_failures, cfg.breaker_cooldown)),
                        Arc::new(Semaphore::new(limit)),
                    )
                })
                .clone();
            Ok(Route {
                source: s.name.clone(),
                destination: s.destination.clone(),
                signing_key: s
                    .destination_secret
                    .as_ref()
                    .map(|k| request::decode_destination_secret(k.expose())),
                policy: RetryPolicy {
                    max_attempts: s.retry.max_attempts,
                    max_age: s.retry.max_age,
                    base: s.retry.base,
                    cap: s.retry.cap,
                },
                timeout: s.delivery.timeout,
                concurrency: limit,
                headers: facts
                    .get(&s.name)
                    .map(|f| f.headers.clone())
                    .unwrap_or_else(|| HeaderPolicy::new(&s.delivery.pass_headers, &[])),
                body_signed: facts.get(&s.name).is_none_or(|f| f.body_signed),
                client: client(s.delivery.connect_timeout)?,
                permits,
                breaker,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn https_destinations_have_a_tls_provider() {
        // A refused HTTPS connection is an ordinary connect error, not a panic for
        // want of a crypto provider.
        let c = client(Duration::from_secs(1)).unwrap();
        let err = c.post("https://127.0.0.1:1/").send().await.unwrap_err();
        assert!(err.is_connect(), "{err}");
    }

    #[test]
    fn error_texts_lose_url_userinfo() {
        assert_eq!(
            without_userinfo("error sending request for url (http://u:S3cretPW@h:81/x): boom"),
            "error sending request for url (http://h:81/x): boom"
        );
        assert_eq!(
            without_userinfo("Connection refused (os error 111)"),
            "Connection refused (os error 111)"
        );
        assert_eq!(without_userinfo("a https://h/x@y b"), "a https://h/x@y b");
    }

    #[test]
    fn origin_keys_scheme_host_and_port() {
        assert_eq!(origin("http://a.example:8080/x?y"), "http://a.example:8080");
        assert_eq!(origin("https://a.example/x"), "https://a.example");
        assert_eq!(
            origin("http://user:S3cretPW@a.example:81/x"),
            "http://a.example:81"
        );
        assert_eq!(origin("http://[::1]:81/x"), "http://[::1]:81");
    }
}
