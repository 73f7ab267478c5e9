//! One delivery: send a claimed entry through its route's sender, turn the outcome
//! into an attempt, let the retry policy decide what follows, and record it in the store.
//!
//! A delivery holds one destination slot only while it is sent: a route's
//! transform runs before the slot is taken (a slow program never holds slots other
//! routes to the destination need), within the same part of the lease as a wait for
//! a slot (see `ahead`): a delivery whose transform no worker started by then, or
//! whose output came after it, gives its lease back unsent, so waiting for a worker
//! never makes a delivery go twice. It gives its claim back untouched when the breaker opened or the source was paused since the
//! claim, stops at once when an operator discards the entry, and releases its lease
//! when shutdown runs out of grace.

use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use super::admission::{self, Admission, InFlight, ProbePermit};
use super::ahead::{NotSent, Place};
use super::meters::DeliveryOutcome;
use super::pace::Answer;
use super::retry::Decision;
use super::route::{Route, origin};
use super::sender::{Identity, Message, Outcome};
use super::{Forwarder, meters, request};
use crate::failure::Failure;
use crate::store::{Attempt, Claim, Completion};
use crate::telemetry::traces::{AttemptOutcome, AttemptSpan, Traces};
use crate::transform::{Ran, Shaped, TransformError, Transforms};

/// Publish a destination's breaker state (0 closed, 1 half-open, 2 open).
pub(super) fn breaker_gauge(route: &Route) {
    route
        .meters
        .breaker_state
        .set(route.breaker.state().gauge());
}

/// The headers attempt number `attempt` of a claimed delivery carries, whether it is
/// sent or pulled: the received ones the route passes on, hookgate's, the
/// destination signature over `transformed` (or the stored body), `traceparent`.
pub(super) fn delivery_headers(
    route: &Route,
    claim: &Claim,
    attempt: u32,
    now_ms: i64,
    transformed: Option<&Shaped>,
    traces: &Traces,
) -> ::http::HeaderMap {
    let entry = &claim.entry;
    let mut headers = request::headers(
        entry,
        request::AttemptOf {
            source: &route.source,
            route: &route.name,
            attempt,
            now_secs: now_ms.div_euclid(1000),
        },
        &route.headers,
        request::Vouched {
            body: route.body_signed,
            event_type: route.event_type_signed,
        },
        route.signing_key.as_deref(),
        transformed,
    );
    traces.inject(&entry.id, &route.name, attempt, &mut headers);
    headers
}

/// Send one attempt (the stored body, or what the route's transform made of it)
/// through the route's sender.
async fn send(
    route: &Route,
    claim: &Claim,
    attempt: u32,
    now_ms: i64,
    transformed: Option<Shaped>,
    traces: &Traces,
) -> Outcome {
    let entry = &claim.entry;
    let headers = delivery_headers(route, claim, attempt, now_ms, transformed.as_ref(), traces);
    let body = match transformed {
        Some(t) => bytes::Bytes::from(t.body),
        None => entry.body.clone(),
    };
    route
        .sender
        .send(Message {
            headers,
            body,
            now_ms,
            identity: Identity {
                entry_id: entry.id.clone(),
                source: route.source.clone(),
                route: route.name.clone(),
                generation: claim.delivery.budget_attempts,
                event_type: entry.event_type.clone(),
            },
        })
        .await
}

/// Where a claimed delivery waits for its destination slot (see `ahead`).
pub(super) struct Queued {
    /// Its place among the route's claims.
    pub place: Place,
    /// Cancelled at shutdown: a delivery still waiting gives its lease back.
    pub shutdown: CancellationToken,
    /// When its claim was sent: its lease runs from then.
    pub leased_at: tokio::time::Instant,
}

/// Deliver one claimed entry: wait for a destination slot (see `ahead`), send,
/// record. The slot is given back as soon as the send ends, so recording
/// the outcome never holds it.
pub(super) async fn deliver(
    fwd: &Forwarder,
    route: &Route,
    claim: Claim,
    mut permit: Option<ProbePermit>,
    queued: Queued,
) {
    let entry = &claim.entry;
    let claim_delivery = &claim.delivery;
    let attempt_no = claim_delivery.attempts + 1;
    // Watched from the claim on: a discard while it waits or while it is sent stops it.
    let in_flight = InFlight::register(&fwd.in_flight, &entry.id, &route.name);
    let discarded = in_flight.discarded.clone();
    // Given back untouched: the probe (if it was one) and the in-flight mark end
    // first, then the lease goes back.
    let give_back = async |permit: Option<ProbePermit>, in_flight: InFlight<'_>, at: i64| {
        drop(permit);
        drop(in_flight);
        complete(fwd, &claim, Completion::Release { at }).await;
    };
    // The route's program, from the stored body, at every attempt; before the slot
    // is taken, and given up with the lease when it has not run in time.
    let transformed = match shape(fwd, route, &claim, &queued, &discarded).await {
        Shaping::Send(t) => t,
        Shaping::GiveBack(at) => {
            give_back(permit, in_flight, at).await;
            return;
        }
        Shaping::End(completion) => {
            drop(permit);
            drop(in_flight);
            if let Some((attempt, outcome)) = completion_attempt(&completion) {
                let wall = fwd.traces.is_on().then(SystemTime::now);
                trace_attempt(fwd, route, &claim, wall, Duration::ZERO, attempt, outcome);
            }
            complete(fwd, &claim, completion).await;
            return;
        }
    };
    let sending = queued
        .place
        .sending(queued.leased_at, &queued.shutdown, &discarded)
        .await;
    let now = fwd.clock.now_ms();
    let sending = match sending {
        Ok(s) => s,
        Err(why) => {
            // Shutdown or a discard while it waited (a discarded delivery stays
            // discarded), or it waited as long as its lease allows: the lease goes
            // back, and the delivery is claimed again.
            if why == NotSent::TooLong {
                route.meters.slot_waits_expired.increment(1);
                tracing::debug!(
                    source = %route.source, route = %route.name, entry_id = %entry.id,
                    "no destination slot within the lease; the delivery is claimed again"
                );
            }
            give_back(permit, in_flight, now).await;
            return;
        }
    };
    // The breaker may have opened since the claim: give the entry back untouched.
    // (A probe is the one attempt the half-open breaker lets through; an attempt
    // that finds it half-open becomes the probe.)
    if permit.is_none() {
        match admission::admit(&route.breaker, &fwd.clock, now) {
            Admission::Allow => {}
            Admission::Probe(p) => permit = Some(p),
            Admission::Deny(until) => {
                drop(sending);
                give_back(permit, in_flight, until).await;
                return;
            }
        }
    }
    // Paused since the claim (here or, seen at the last poll, elsewhere): give the
    // entry back untouched; it is sent after the resume.
    if fwd.is_paused(route) {
        drop(sending);
        give_back(permit, in_flight, now).await;
        return;
    }
    // Fenced since the claim (the heartbeat does not reach the store): nothing is
    // sent; the lease goes back if the store hears it, else others take it over.
    if !fwd.fence.held() {
        drop(sending);
        give_back(permit, in_flight, now).await;
        return;
    }
    let started = Instant::now();
    let wall = fwd.traces.is_on().then(SystemTime::now);
    let outcome = tokio::select! {
        o = send(route, &claim, attempt_no, now, transformed, &fwd.traces) => Some(o),
        _ = discarded.cancelled() => None,
        _ = fwd.abort.cancelled() => {
            give_back(permit, in_flight, fwd.clock.now_ms()).await;
            return;
        }
        // Fenced while it was sent: the attempt is abandoned before another gateway
        // may take the lease, so an ordered key never has two in flight.
        _ = fwd.fence.lost() => {
            tracing::warn!(
                source = %route.source, route = %route.name, entry_id = %entry.id,
                "attempt abandoned: this gateway's heartbeat does not reach the store"
            );
            give_back(permit, in_flight, fwd.clock.now_ms()).await;
            return;
        }
    };
    drop(in_flight);
    drop(sending);
    let elapsed = started.elapsed();
    let Some(outcome) = outcome else {
        // Discarded while it was being sent: the request is abandoned (the probe, if
        // it was one, goes back without a verdict).
        drop(permit);
        cancelled(fwd, route, &claim, now, wall, elapsed).await;
        return;
    };
    let completion = record(fwd, route, &claim, permit, &outcome, now, elapsed).await;
    if let Some((attempt, outcome)) = completion_attempt(&completion) {
        trace_attempt(fwd, route, &claim, wall, elapsed, attempt, outcome);
    }
    complete(fwd, &claim, completion).await;
}

/// An attempt abandoned because the entry was discarded while it was sent: recorded
/// against the discarded entry (its status stays discarded).
async fn cancelled(
    fwd: &Forwarder,
    route: &Route,
    claim: &Claim,
    now: i64,
    wall: Option<SystemTime>,
    elapsed: Duration,
) {
    let attempt_no = claim.delivery.attempts + 1;
    route.meters.attempt(meters::DeliveryResult::Cancelled);
    tracing::info!(
        source = %route.source,
        route = %route.name,
        entry_id = %claim.entry.id,
        attempt = attempt_no,
        "delivery cancelled: the entry was discarded"
    );
    let attempt = Attempt {
        route: claim.delivery.route.clone(),
        n: attempt_no,
        at: now,
        status_code: None,
        failure: Some(Failure::Cancelled),
        error: Some("cancelled: the entry was discarded".into()),
        latency_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        answer: None,
    };
    trace_attempt(
        fwd,
        route,
        claim,
        wall,
        elapsed,
        &attempt,
        AttemptOutcome::Cancelled,
    );
    let at = fwd.clock.now_ms();
    complete(fwd, claim, Completion::Retry { attempt, at }).await;
}

/// What the route's transform made of a claimed delivery, before it is sent.
enum Shaping {
    /// Send it: what the transform made, or the stored body (no transform).
    Send(Option<Shaped>),
    /// Give the lease back untouched, due again at this time (unix ms): paused,
    /// shut down or discarded meanwhile, not run within the lease, or no worker.
    GiveBack(i64),
    /// The delivery ends here: skipped (no output), or dead (the program failed).
    End(Completion),
}

/// Run the route's transform, if it has one, within the part of the lease a
/// delivery may wait (see `ahead`).
async fn shape(
    fwd: &Forwarder,
    route: &Route,
    claim: &Claim,
    queued: &Queued,
    discarded: &CancellationToken,
) -> Shaping {
    let Some(t) = &route.transforms else {
        return Shaping::Send(None);
    };
    let entry = &claim.entry;
    if fwd.is_paused(route) {
        return Shaping::GiveBack(fwd.clock.now_ms());
    }
    let deadline = queued.place.deadline(queued.leased_at);
    let ran = tokio::select! {
        biased;
        _ = queued.shutdown.cancelled() => None,
        _ = discarded.cancelled() => None,
        r = transform(t, route, entry, deadline) => Some(r),
    };
    let Some(ran) = ran else {
        return Shaping::GiveBack(fwd.clock.now_ms());
    };
    // A run that started in time may end after the deadline: what it made is not
    // sent then (the lease left may be too short to record the send).
    let late = match &ran {
        Err(TransformError::Late) => true,
        Ok(Ran::Send(_)) => tokio::time::Instant::now() >= deadline,
        _ => false,
    };
    if late {
        route.meters.slot_waits_expired.increment(1);
        tracing::debug!(
            source = %route.source, route = %route.name, entry_id = %entry.id,
            "the transform did not run within the lease; the delivery is claimed again"
        );
        return Shaping::GiveBack(fwd.clock.now_ms());
    }
    match ran {
        Ok(Ran::Send(shaped)) => Shaping::Send(Some(shaped)),
        Ok(Ran::Empty) => {
            route.meters.transform_skipped.increment(1);
            tracing::info!(
                source = %route.source, route = %route.name, entry_id = %entry.id,
                "delivery skipped: the route's transform gave no output"
            );
            let reason = crate::transform::EMPTY_REASON.to_string();
            Shaping::End(Completion::Filtered { reason })
        }
        Err(e) if e.is_final() => {
            let now = fwd.clock.now_ms();
            Shaping::End(transform_failed(fwd, route, claim, &e, now))
        }
        Err(e) => {
            // No worker: the program is not at fault; the delivery waits.
            const MSG: &str = "cannot run the route's transform; the delivery waits";
            let kind = format!("{}/{}", route.source, route.name);
            if crate::telemetry::throttle::hit(MSG, &kind) {
                tracing::warn!(source = %route.source, route = %route.name, error = %e, "{MSG}");
            }
            Shaping::GiveBack(fwd.clock.now_ms() + 1_000)
        }
    }
}

/// The attempt a completion records, and what became of the delivery.
pub(super) fn completion_attempt(c: &Completion) -> Option<(&Attempt, AttemptOutcome)> {
    match c {
        Completion::Delivered { attempt } => Some((attempt, AttemptOutcome::Delivered)),
        Completion::Retry { attempt, .. } => Some((attempt, AttemptOutcome::Retry)),
        Completion::Dead { attempt, .. } => Some((attempt.as_ref()?, AttemptOutcome::Dead)),
        _ => None,
    }
}

/// The span of `attempt` (sent from `wall`, taking `elapsed`), when traces are on.
pub(super) fn trace_attempt(
    fwd: &Forwarder,
    route: &Route,
    claim: &Claim,
    wall: Option<SystemTime>,
    elapsed: Duration,
    attempt: &Attempt,
    outcome: AttemptOutcome,
) {
    let Some(start) = wall else { return };
    let failure = attempt.failure.map(|f| f.name());
    fwd.traces.attempt(AttemptSpan {
        entry_id: &claim.entry.id,
        source: &route.source,
        route: &route.name,
        attempt: attempt.n,
        destination: &origin(&route.destination),
        start,
        elapsed,
        status_code: attempt.status_code,
        failure: failure.as_deref(),
        error: attempt.error.as_deref(),
        outcome,
        origin: claim
            .entry
            .origin
            .is_recovered()
            .then(|| claim.entry.origin.as_str()),
        messaging: match route.config.target.kind() {
            crate::config::DestinationKind::Http | crate::config::DestinationKind::Pull => None,
            crate::config::DestinationKind::Nats => Some("nats"),
            crate::config::DestinationKind::Amqp => Some("rabbitmq"),
        },
        answer: attempt.answer.as_deref(),
    });
}

/// Run the route's program on the stored body, with `$meta` describing the entry;
/// not started after `start_by` ([`TransformError::Late`]).
pub(super) async fn transform(
    t: &Transforms,
    route: &Route,
    entry: &crate::store::Entry,
    start_by: tokio::time::Instant,
) -> Result<Ran, TransformError> {
    let meta = || request::transform_meta(entry, &route.name);
    let started = Instant::now();
    let ran = t
        .run_by(
            &route.source,
            &route.name,
            meta,
            &entry.body,
            Some(start_by),
        )
        .await
        .unwrap_or_else(|| {
            Err(TransformError::Unavailable(
                "the route has no program".into(),
            ))
        });
    route
        .meters
        .transform_seconds
        .record(started.elapsed().as_secs_f64());
    ran
}

/// A transform that failed for good: the delivery is dead, in its own dead-letter
/// group (`transform: <kind>`). The log names the kind only: a program's error
/// may quote the body.
pub(super) fn transform_failed(
    fwd: &Forwarder,
    route: &Route,
    claim: &Claim,
    e: &TransformError,
    now: i64,
) -> Completion {
    let entry = &claim.entry;
    let reason = e.to_string();
    let kind = e.failure().map(Failure::Transform);
    route.meters.attempt(meters::DeliveryResult::Transform);
    route.meters.outcome(DeliveryOutcome::Dead);
    route.meters.dead_lettered.increment(1);
    tracing::error!(
        source = %route.source, route = %route.name, entry_id = %entry.id,
        event_id = entry.event_id.as_deref().unwrap_or(""),
        attempt = claim.delivery.attempts + 1,
        failure = %format!("transform: {}", e.kind()),
        "delivery failed; dead: the route's transform failed"
    );
    if let Some(notify) = &fwd.on_dead {
        // The kind only: a program's error may quote the body.
        notify(
            &route.source,
            &route.name,
            kind,
            &format!("transform: {}", e.kind()),
        );
    }
    let attempt = Attempt {
        route: claim.delivery.route.clone(),
        n: claim.delivery.attempts + 1,
        at: now,
        status_code: None,
        failure: kind,
        error: Some(reason.clone()),
        latency_ms: 0,
        answer: None,
    };
    Completion::Dead {
        attempt: Some(attempt),
        reason,
    }
}

/// What an attempt's outcome means, told to the meters, the route's pace, the
/// breaker (the probe's verdict, when it was one) and the log: the completion to
/// record. `now` is when the attempt started.
async fn record(
    fwd: &Forwarder,
    route: &Route,
    claim: &Claim,
    permit: Option<ProbePermit>,
    outcome: &Outcome,
    now: i64,
    elapsed: Duration,
) -> Completion {
    let claim_delivery = &claim.delivery;
    let latency_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    let done_at = fwd.clock.now_ms();
    route.meters.attempt(meters::result_of(outcome));
    route.meters.delivery_seconds.record(elapsed.as_secs_f64());
    share_hold(fwd, route, outcome, done_at).await;
    let healthy = !outcome.is_destination_failure();
    let opened = match permit {
        Some(probe) => probe.record(healthy, done_at),
        None => route.breaker.record(healthy, done_at),
    };
    breaker_gauge(route);
    if opened {
        tracing::warn!(
            source = %route.source,
            route = %route.name,
            destination = %origin(&route.destination),
            "circuit breaker opened: deliveries to this destination wait"
        );
    }
    // The budget counts from arrival, or from the last replay.
    let terms = Terms {
        budget_start: claim_delivery.budget_start,
        retry_in: None,
    };
    conclude(fwd, route, claim, outcome, (now, latency_ms), terms)
}

/// How an attempt's failure is weighed against the route's retry budget.
pub(super) struct Terms {
    /// When the budget's `max_age` started counting (unix ms).
    pub budget_start: i64,
    /// When the next attempt comes, replacing the backoff (a pull consumer's
    /// `retry_in`), capped by `retry.cap`.
    pub retry_in: Option<Duration>,
}

/// The attempt an outcome makes (started at `at.0`, taking `at.1` ms), what the
/// retry policy decides of it under `terms`, told to the meters and the log: the
/// completion to record.
pub(super) fn conclude(
    fwd: &Forwarder,
    route: &Route,
    claim: &Claim,
    outcome: &Outcome,
    (now, latency_ms): (i64, u64),
    terms: Terms,
) -> Completion {
    let entry = &claim.entry;
    let claim_delivery = &claim.delivery;
    let attempt_no = claim_delivery.attempts + 1;
    let done_at = fwd.clock.now_ms();
    // The status is detail of the outcome; an error's text is kept when there is
    // no status to say what went wrong.
    let status_code = outcome.status();
    let error = outcome
        .failed()
        .filter(|f| f.kind.status().is_none())
        .map(|f| f.detail.clone());
    // What the log says went wrong.
    let failure = outcome.failed().map(|f| f.detail.clone());
    let attempt = Attempt {
        route: claim_delivery.route.clone(),
        n: attempt_no,
        at: now,
        status_code,
        failure: outcome.kind(),
        error,
        latency_ms,
        answer: match outcome {
            Outcome::Delivered { answer, .. } => answer.clone(),
            _ => None,
        },
    };
    let mut decision = route.policy.decide(
        attempt_no.saturating_sub(claim_delivery.budget_attempts),
        terms.budget_start,
        outcome,
        done_at,
        fastrand::f64(),
    );
    if let (Decision::RetryAt(at), Some(wait)) = (&mut decision, terms.retry_in) {
        let wait = wait.min(route.policy.cap);
        *at = done_at.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX));
    }
    let delivery_outcome = meters::outcome_of(&decision);
    route.meters.outcome(delivery_outcome);
    if matches!(decision, Decision::RetryAt(_)) {
        route.meters.retries_scheduled.increment(1);
    }
    let completion = match decision {
        Decision::MarkDelivered => Completion::Delivered { attempt },
        Decision::RetryAt(at) => Completion::Retry { attempt, at },
        Decision::DeadLetter(reason) => {
            tracing::error!(
                source = %route.source,
                route = %route.name,
                entry_id = %entry.id,
                event_id = entry.event_id.as_deref().unwrap_or(""),
                attempts = attempt_no,
                reason = %reason,
                "delivery moved to the dead-letter queue"
            );
            route.meters.dead_lettered.increment(1);
            if let Some(notify) = &fwd.on_dead {
                notify(&route.source, &route.name, outcome.kind(), &reason);
            }
            Completion::Dead {
                attempt: Some(attempt),
                reason,
            }
        }
    };
    log_attempt(
        route,
        claim,
        delivery_outcome,
        status_code,
        failure,
        latency_ms,
    );
    completion
}

/// One line per attempt: INFO when delivered, WARN when it failed and will be
/// retried, ERROR when the entry is dead; a failure says what went wrong.
fn log_attempt(
    route: &Route,
    claim: &Claim,
    delivery_outcome: DeliveryOutcome,
    status_code: Option<u16>,
    failure: Option<String>,
    latency_ms: u64,
) {
    let entry = &claim.entry;
    let attempt_no = claim.delivery.attempts + 1;
    let outcome_label = delivery_outcome.label();
    let failure = failure.as_deref().unwrap_or("");
    match delivery_outcome {
        DeliveryOutcome::Delivered => tracing::info!(
            source = %route.source,
            route = %route.name, entry_id = %entry.id,
            event_id = entry.event_id.as_deref().unwrap_or(""), attempt = attempt_no,
            status = status_code.unwrap_or(0), outcome = outcome_label, latency_ms, "delivery"
        ),
        DeliveryOutcome::Retry => tracing::warn!(
            source = %route.source,
            route = %route.name, entry_id = %entry.id,
            event_id = entry.event_id.as_deref().unwrap_or(""), attempt = attempt_no,
            error = failure, outcome = outcome_label, latency_ms, "delivery failed; retrying"
        ),
        DeliveryOutcome::Dead => tracing::error!(
            source = %route.source,
            route = %route.name, entry_id = %entry.id,
            event_id = entry.event_id.as_deref().unwrap_or(""), attempt = attempt_no,
            error = failure, outcome = outcome_label, latency_ms, "delivery failed; dead"
        ),
    }
    // A dead head of an ordered line: it holds its key, or the next one goes.
    if matches!(delivery_outcome, DeliveryOutcome::Dead)
        && let Some(order) = &claim.delivery.order
    {
        tracing::warn!(
            source = %route.source, route = %route.name, entry_id = %entry.id,
            order_key = order.key.as_str(), on_dead = order.on_dead(),
            "{}",
            if order.block {
                "its ordering key waits for an operator: replay or discard the entry"
            } else {
                "the next delivery of its ordering key goes"
            }
        );
    }
}

/// A paced route told to slow down (a 429 or a 503, maybe with `Retry-After`) holds its send
/// slots, in the store, so every process sharing it holds the route too.
async fn share_hold(fwd: &Forwarder, route: &Route, outcome: &Outcome, done_at: i64) {
    if let Some(pace) = &route.pace {
        let answer = match outcome {
            Outcome::Delivered { .. } => Answer::Delivered,
            Outcome::SlowDown { retry_after, .. } => Answer::SlowDown {
                retry_after: *retry_after,
            },
            _ => Answer::Other,
        };
        let hold = pace.lock().ok().and_then(|mut pace| {
            pace.record(answer, done_at);
            let slowed = matches!(answer, Answer::SlowDown { .. });
            slowed.then(|| (pace.hold_until(), pace.spacing(), pace.burst()))
        });
        // Every process sharing the store holds the route too: the send slots are
        // the store's.
        if let Some((until, spacing, burst)) = hold
            && let Err(e) = fwd
                .store
                .hold_send_slots(&route.source, &route.name, done_at, until, spacing, burst)
                .await
        {
            const MSG: &str = "cannot share the route's hold through the store";
            let kind = format!("{}/{} {}", route.source, route.name, e.kind());
            if crate::telemetry::throttle::hit(MSG, &kind) {
                tracing::warn!(source = %route.source, route = %route.name, error = %e, "{MSG}");
            }
        }
    }
}

/// Record a completion, retrying while the store is unreachable, for as long as a
/// lease lasts: a store that comes back within it (a restart, a failover, a frozen
/// server thawed) gets the completion within a couple of seconds, and the entry is
/// not delivered again. If it never succeeds, the lease has expired by then and the
/// entry is delivered again (at-least-once).
pub(super) async fn complete(fwd: &Forwarder, claim: &Claim, completion: Completion) {
    let mut delay = Duration::from_millis(50);
    let until = tokio::time::Instant::now() + fwd.plan().cfg.lease;
    loop {
        let now = fwd.clock.now_ms();
        match fwd
            .store
            .complete(claim, &fwd.worker, completion.clone(), now)
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
                const MSG: &str = "cannot record the delivery; retrying";
                let kind = format!(
                    "{}/{} {}",
                    claim.entry.source,
                    claim.delivery.route,
                    e.kind()
                );
                if crate::telemetry::throttle::hit(MSG, &kind) {
                    tracing::warn!(entry_id = %claim.entry.id, error = %e, "{MSG}");
                }
                if tokio::time::Instant::now() + delay >= until {
                    break;
                }
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
