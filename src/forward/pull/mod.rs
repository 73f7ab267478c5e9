//! Pull routes (`destination = "pull"`): deliveries that wait for consumers instead
//! of being sent.
//!
//! The forwarder runs no claim loop for a pull route. A consumer's request claims
//! its deliveries from the store as a push claims them ([`Pulls::pull`]), so every
//! rule of a route holds: filters and transforms (the consumer gets the
//! transformed body and the same signed headers a push carries), ordering per key
//! (a key's next delivery is not handed out while one is leased), pause, replay,
//! dead letters and their groups. A claim spends no attempt, so a delivery no
//! consumer took spends neither attempts nor `max_age`: on a pull route `max_age`
//! counts from the first failed attempt of the budget.
//!
//! A delivery handed out is leased to its consumer for the lease it asked for; the
//! store's lease is a margin longer ([`STORE_MARGIN`]), so that this gateway, which
//! keeps its leases here, ends an expired one itself ([`sweep`]): re-offered at once,
//! and counted as a failed attempt (`lease-expired`) only at the third expiry in a
//! row of the delivery (as this gateway counts them). An `ack` completes the claim
//! as delivered (the attempt names the consumer); a `nack` is a failed attempt
//! (`nacked`) whose `retry_in` replaces the route's backoff, capped by `retry.cap`.
//! A receipt is good on any gateway sharing the store (`receipt`): one this gateway
//! does not hold is completed from the store with the receipt's lease token.
//!
//! While ingest is saturated a pull takes only its share, as a route loop does
//! (`crate::pressure`: ingest first). Long polls that find nothing wait in their
//! route's line ([`Line`]); the route's
//! loop ([`route_loop`]) claims for the first waiter whenever work arrives or a poll
//! interval passes, so a thousand idle polls cost one claim a poll interval, no
//! thread and no store connection. The consumer API itself (HTTP, tokens, limits)
//! is `crate::pull`.

mod receipt;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use super::deliver::{self, Terms};
use super::sender::{Failed, Outcome};
use super::{Forwarder, Route, meters};
use crate::failure::Failure;
use crate::store::{Claim, Completion, Status, StoreError};
use crate::transform::{Ran, Shaped};
pub use receipt::Receipt;

/// How much longer the store's lease of a pulled delivery is than its consumer's:
/// the gateway that handed it out ends it first. (Should that gateway die, the
/// store gives the delivery out again after this much more, or sooner when other
/// gateways take its leases over.)
pub const STORE_MARGIN: Duration = Duration::from_secs(15);

/// How long a request that comes before the forwarder runs waits for it.
const ATTACH_WAIT: Duration = Duration::from_secs(5);

/// How often expired leases are looked for.
const SWEEP: Duration = Duration::from_millis(200);

/// Expiries in a row of one delivery's leases that count as one failed attempt.
const EXPIRIES_PER_ATTEMPT: u32 = 3;

/// How long a delivery's count of expiries in a row is kept after its last expiry.
const EXPIRIES_FORGOTTEN: Duration = Duration::from_secs(3600);

/// The most consumers remembered per route (the least recently seen go first).
const MAX_CONSUMERS: usize = 64;

/// How long a route's transform may wait for a worker when a consumer pulls.
const TRANSFORM_WAIT: Duration = Duration::from_secs(5);

/// Every pull family with a zero series for each pull route (source, route), so
/// that the first scrape lists them.
pub fn register_metrics(routes: &[(String, String)]) {
    for (s, r) in routes {
        backlog_gauges(s, r, 0, 0.0);
        metrics::gauge!("hookgate_pull_leased", "source" => s.clone(), "route" => r.clone())
            .increment(0.0);
        metrics::counter!("hookgate_pull_acked_total", "source" => s.clone(), "route" => r.clone())
            .increment(0);
        metrics::gauge!("hookgate_pull_consumer_seen_timestamp_seconds", "source" => s.clone(), "route" => r.clone())
            .increment(0.0);
    }
}

/// A pull route's backlog (deliveries waiting for a consumer, leased or not) and
/// the arrival age of its oldest, in seconds.
pub(super) fn backlog_gauges(source: &str, route: &str, backlog: u64, oldest_age: f64) {
    metrics::gauge!("hookgate_pull_backlog", "source" => source.to_string(), "route" => route.to_string())
        .set(backlog as f64);
    metrics::gauge!("hookgate_pull_oldest_age_seconds", "source" => source.to_string(), "route" => route.to_string())
        .set(oldest_age);
}

/// A route, by (source, route).
type RouteKey = (String, String);

/// Who pulls: the token's name and the address the request came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Consumer {
    pub token: String,
    pub address: String,
}

impl Consumer {
    fn describe(&self) -> String {
        format!("{} ({})", self.token, self.address)
    }
}

/// What a consumer asks for.
#[derive(Debug, Clone)]
pub struct Ask {
    /// At most this many deliveries.
    pub max: usize,
    /// Each leased this long.
    pub lease: Duration,
    pub consumer: Consumer,
}

/// One delivery handed to a consumer.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// What the consumer hands back to `ack` or `nack` it.
    pub receipt: String,
    pub entry_id: String,
    /// This attempt's number (1 for the first).
    pub attempt: u32,
    pub event_type: Option<String>,
    /// When the entry was received (unix ms).
    pub received_at: i64,
    /// When the lease ends (unix ms).
    pub leased_until: i64,
    /// The headers a push would carry: the route's, hookgate's and the destination
    /// signature (`webhook-*`, when the route has a `destination_secret`).
    pub headers: ::http::HeaderMap,
    /// The stored body, or what the route's transform made of it.
    pub body: Bytes,
}

/// What became of one receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Acked,
    Nacked,
    /// Its lease ended: the delivery was or will be handed out again.
    Expired,
    /// Not a receipt of this route's deliveries.
    Unknown,
    /// The store did not answer: nothing changed; send it again.
    Unavailable,
}

impl Settled {
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::Acked => "acked",
            Settled::Nacked => "nacked",
            Settled::Expired => "expired",
            Settled::Unknown => "unknown",
            Settled::Unavailable => "unavailable",
        }
    }
}

/// A consumer of a route as this gateway last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenConsumer {
    pub token: String,
    pub address: String,
    /// Unix ms.
    pub last_seen: i64,
}

/// Why a pull could not be served.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The forwarder is not running (starting, or stopped).
    #[error("the gateway is not delivering")]
    NotRunning,
    /// No pull route of that name in the table in force.
    #[error("no such pull route")]
    NoRoute,
    #[error("the store did not answer")]
    Store(#[source] StoreError),
}

/// A lease this gateway handed out.
struct Held {
    claim: Claim,
    route: Arc<Route>,
    /// Unix ms.
    until: i64,
    consumer: Consumer,
    leased_at: Instant,
    /// Unix ms.
    leased_at_ms: i64,
}

/// The leases this gateway handed out, by lease token and by end.
#[derive(Default)]
struct Leases {
    by_token: HashMap<String, Held>,
    by_end: BTreeSet<(i64, String)>,
    /// Expiries in a row, by (entry id, route), with the time of the last (unix
    /// ms). A count whose last expiry is older than [`EXPIRIES_FORGOTTEN`] is
    /// forgotten (the delivery was acknowledged through another gateway, or no
    /// longer expires).
    expiries: HashMap<(String, String), (u32, i64)>,
}

impl Leases {
    fn insert(&mut self, token: String, held: Held) {
        self.by_end.insert((held.until, token.clone()));
        self.by_token.insert(token, held);
    }

    fn take(&mut self, token: &str) -> Option<Held> {
        let held = self.by_token.remove(token)?;
        self.by_end.remove(&(held.until, token.to_string()));
        Some(held)
    }

    fn take_expired(&mut self, now: i64) -> Vec<Held> {
        let mut out = Vec::new();
        while let Some((until, _)) = self.by_end.first()
            && *until <= now
        {
            if let Some((_, token)) = self.by_end.pop_first()
                && let Some(held) = self.by_token.remove(&token)
            {
                out.push(held);
            }
        }
        out
    }

    fn leased(&self, source: &str, route: &str) -> usize {
        self.by_token
            .values()
            .filter(|h| h.route.source == source && h.route.name == route)
            .count()
    }
}

/// A long poll waiting for its route's deliveries.
struct Waiter {
    ask: Ask,
    reply: oneshot::Sender<Vec<Pulled>>,
}

/// The long polls of one route, first come first served.
#[derive(Default)]
struct Line {
    waiting: Mutex<VecDeque<Waiter>>,
    arrived: Notify,
}

/// The pull side of the forwarder, shared with the consumer API.
#[derive(Default)]
pub struct Pulls {
    fwd: OnceLock<Arc<Forwarder>>,
    /// Told when the forwarder is attached.
    attached: Notify,
    /// Cancelled when the forwarder stops: waiting long polls are answered.
    closing: CancellationToken,
    leases: Mutex<Leases>,
    lines: Mutex<HashMap<RouteKey, Arc<Line>>>,
    consumers: Mutex<HashMap<RouteKey, Vec<SeenConsumer>>>,
}

impl Pulls {
    pub fn new() -> Arc<Pulls> {
        Arc::new(Pulls::default())
    }

    /// Called by the forwarder once it runs.
    pub(super) fn attach(&self, fwd: Arc<Forwarder>) {
        let _ = self.fwd.set(fwd);
        self.attached.notify_waiters();
    }

    /// Called by the forwarder at shutdown: every waiting long poll is answered.
    pub(super) fn close(&self) {
        self.closing.cancel();
    }

    /// The forwarder, once it runs: a request that comes as the gateway starts
    /// waits for it (a moment) rather than being refused.
    async fn forwarder(&self) -> Result<Arc<Forwarder>, PullError> {
        if let Some(f) = self.fwd.get() {
            return Ok(f.clone());
        }
        let attached = self.attached.notified();
        tokio::pin!(attached);
        attached.as_mut().enable();
        if let Some(f) = self.fwd.get() {
            return Ok(f.clone());
        }
        let _ = tokio::time::timeout(ATTACH_WAIT, attached).await;
        self.fwd.get().cloned().ok_or(PullError::NotRunning)
    }

    /// The pull route `route` of `source` in the table in force.
    pub async fn route(&self, source: &str, route: &str) -> Result<Arc<Route>, PullError> {
        let fwd = self.forwarder().await?;
        fwd.plan()
            .routes
            .iter()
            .find(|r| {
                r.source == source
                    && r.name == route
                    && r.config.target.kind() == crate::config::DestinationKind::Pull
            })
            .cloned()
            .ok_or(PullError::NoRoute)
    }

    /// Up to `ask.max` deliveries of `route`, waiting up to `wait` for one; empty
    /// when none came by then, or at once when the gateway shuts down.
    pub async fn pull(
        &self,
        route: &Arc<Route>,
        ask: Ask,
        wait: Duration,
    ) -> Result<Vec<Pulled>, PullError> {
        let shutdown = &self.closing;
        let fwd = self.forwarder().await?;
        self.seen(&fwd, route, &ask.consumer);
        if !fwd.is_paused(route) && fwd.fence.held() {
            let got = take(&fwd, route, &ask).await.map_err(PullError::Store)?;
            if !got.is_empty() {
                return Ok(got);
            }
        }
        if wait.is_zero() || shutdown.is_cancelled() {
            return Ok(Vec::new());
        }
        let (reply, mut rx) = oneshot::channel();
        let line = self.line(route);
        if let Ok(mut w) = line.waiting.lock() {
            w.push_back(Waiter { ask, reply });
        }
        line.arrived.notify_one();
        tokio::select! {
            got = &mut rx => return Ok(got.unwrap_or_default()),
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => {}
        }
        // What the route's loop handed over meanwhile is answered, never dropped.
        rx.close();
        Ok(rx.try_recv().unwrap_or_default())
    }

    /// Acknowledge deliveries of `route` by their receipts: each is delivered.
    pub async fn ack(
        &self,
        route: &Arc<Route>,
        receipts: &[String],
        consumer: &Consumer,
    ) -> Result<Vec<Settled>, PullError> {
        let fwd = self.forwarder().await?;
        self.seen(&fwd, route, consumer);
        // At once: the store commits their completions together.
        let settling = receipts
            .iter()
            .map(|r| self.settle(&fwd, route, r, None, consumer));
        Ok(futures_util::future::join_all(settling).await)
    }

    /// Give a delivery back as failed: retried after `retry_in` (capped by the
    /// route's `retry.cap`), or the route's backoff; dead when its budget is spent.
    pub async fn nack(
        &self,
        route: &Arc<Route>,
        receipt: &str,
        retry_in: Option<Duration>,
        consumer: &Consumer,
    ) -> Result<Settled, PullError> {
        let fwd = self.forwarder().await?;
        self.seen(&fwd, route, consumer);
        Ok(self
            .settle(&fwd, route, receipt, Some(retry_in), consumer)
            .await)
    }

    /// The consumers this gateway saw pulling from `route` of `source`, the most
    /// recent first.
    pub fn consumers(&self, source: &str, route: &str) -> Vec<SeenConsumer> {
        let mut seen = self
            .consumers
            .lock()
            .ok()
            .and_then(|c| c.get(&(source.to_string(), route.to_string())).cloned())
            .unwrap_or_default();
        seen.sort_by_key(|c| std::cmp::Reverse(c.last_seen));
        seen
    }

    fn seen(&self, fwd: &Forwarder, route: &Route, consumer: &Consumer) {
        let now = fwd.clock.now_ms();
        if let Ok(mut all) = self.consumers.lock() {
            let list = all
                .entry((route.source.clone(), route.name.clone()))
                .or_default();
            match list
                .iter_mut()
                .find(|c| c.token == consumer.token && c.address == consumer.address)
            {
                Some(c) => c.last_seen = now,
                None => {
                    if list.len() >= MAX_CONSUMERS
                        && let Some(oldest) = list
                            .iter()
                            .enumerate()
                            .min_by_key(|(_, c)| c.last_seen)
                            .map(|(i, _)| i)
                    {
                        list.swap_remove(oldest);
                    }
                    list.push(SeenConsumer {
                        token: consumer.token.clone(),
                        address: consumer.address.clone(),
                        last_seen: now,
                    });
                }
            }
        }
        metrics::gauge!("hookgate_pull_consumer_seen_timestamp_seconds", "source" => route.source.clone(), "route" => route.name.clone())
            .set(now as f64 / 1000.0);
    }

    fn line(&self, route: &Route) -> Arc<Line> {
        match self.lines.lock() {
            Ok(mut lines) => lines
                .entry((route.source.clone(), route.name.clone()))
                .or_default()
                .clone(),
            Err(_) => Arc::new(Line::default()),
        }
    }

    fn set_leased_gauge(&self, route: &Route) {
        let n = self
            .leases
            .lock()
            .map(|l| l.leased(&route.source, &route.name))
            .unwrap_or(0);
        metrics::gauge!("hookgate_pull_leased", "source" => route.source.clone(), "route" => route.name.clone())
            .set(n as f64);
    }

    /// Ack (`nack: None`) or nack one receipt.
    async fn settle(
        &self,
        fwd: &Forwarder,
        route: &Arc<Route>,
        text: &str,
        nack: Option<Option<Duration>>,
        consumer: &Consumer,
    ) -> Settled {
        let Some(receipt) = Receipt::decode(text) else {
            return Settled::Unknown;
        };
        let now = fwd.clock.now_ms();
        if receipt.until <= now {
            return Settled::Expired;
        }
        let held = self.leases.lock().ok().and_then(|mut l| {
            let mine = l.by_token.get(&receipt.token).is_some_and(|h| {
                h.claim.entry.id == receipt.entry_id
                    && h.route.source == route.source
                    && h.route.name == route.name
            });
            if mine { l.take(&receipt.token) } else { None }
        });
        let (claim, leased_at, leased_at_ms) = match held {
            Some(h) => (h.claim, h.leased_at, h.leased_at_ms),
            // Handed out by another gateway sharing the store, or by this one
            // before a restart: completed from the store with the receipt's token.
            None => match fwd.store.get(&receipt.entry_id).await {
                Ok(Some(entry)) => {
                    let Some(delivery) = entry
                        .deliveries
                        .iter()
                        .find(|d| d.route == route.name)
                        .cloned()
                    else {
                        return Settled::Unknown;
                    };
                    if entry.source != route.source {
                        return Settled::Unknown;
                    }
                    if delivery.status != Status::Pending {
                        return Settled::Expired;
                    }
                    let claim = Claim {
                        entry,
                        delivery,
                        token: receipt.token.clone(),
                        stream_message: receipt.stream_message.clone(),
                    };
                    (claim, Instant::now(), now)
                }
                Ok(None) => return Settled::Unknown,
                Err(_) => return Settled::Unavailable,
            },
        };
        let elapsed = leased_at.elapsed();
        let latency_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let (outcome, terms) = match nack {
            None => (
                Outcome::Delivered {
                    status: None,
                    answer: Some(format!("acked by {}", consumer.describe())),
                },
                Terms {
                    budget_start: claim.delivery.budget_start,
                    retry_in: None,
                },
            ),
            Some(retry_in) => (
                Outcome::Unavailable {
                    failed: Failed::new(
                        Failure::Nacked,
                        format!("nacked by {}", consumer.describe()),
                    ),
                    retry_after: None,
                },
                pull_terms(fwd, &claim, retry_in).await,
            ),
        };
        route.meters.attempt(meters::result_of(&outcome));
        route.meters.delivery_seconds.record(elapsed.as_secs_f64());
        let completion = deliver::conclude(
            fwd,
            route,
            &claim,
            &outcome,
            (leased_at_ms, latency_ms),
            terms,
        );
        trace(fwd, route, &claim, &completion, elapsed);
        let applied = fwd
            .store
            .complete(&claim, &fwd.worker, completion, fwd.clock.now_ms())
            .await;
        if let Ok(mut l) = self.leases.lock() {
            l.expiries
                .remove(&(claim.entry.id.clone(), route.name.clone()));
        }
        self.set_leased_gauge(route);
        match applied {
            Ok(true) if nack.is_none() => {
                metrics::counter!("hookgate_pull_acked_total", "source" => route.source.clone(), "route" => route.name.clone()).increment(1);
                Settled::Acked
            }
            Ok(true) => Settled::Nacked,
            Ok(false) => Settled::Expired,
            Err(e) => {
                tracing::warn!(source = %route.source, route = %route.name, entry_id = %claim.entry.id, error = %e, "cannot record a consumer's answer");
                Settled::Unavailable
            }
        }
    }
}

/// The terms of a pull route's failed attempt: `max_age` counts from the first
/// failed attempt of the budget (a delivery no consumer took spent none of it).
async fn pull_terms(fwd: &Forwarder, claim: &Claim, retry_in: Option<Duration>) -> Terms {
    let first_failure = fwd
        .store
        .attempts(&claim.entry.id)
        .await
        .ok()
        .and_then(|all| {
            all.iter()
                .filter(|a| a.route == claim.delivery.route && a.n > claim.delivery.budget_attempts)
                .map(|a| a.at)
                .min()
        });
    Terms {
        budget_start: first_failure.unwrap_or_else(|| fwd.clock.now_ms()),
        retry_in,
    }
}

/// The span of the attempt a completion records, when traces are on.
fn trace(
    fwd: &Forwarder,
    route: &Route,
    claim: &Claim,
    completion: &Completion,
    elapsed: Duration,
) {
    if let Some((attempt, outcome)) = deliver::completion_attempt(completion) {
        let wall = fwd.traces.is_on().then(|| SystemTime::now() - elapsed);
        deliver::trace_attempt(fwd, route, claim, wall, elapsed, attempt, outcome);
    }
}

/// Claim up to `ask.max` deliveries of `route` for `ask.consumer`, shaped as a push
/// would send them, and keep their leases.
async fn take(fwd: &Forwarder, route: &Arc<Route>, ask: &Ask) -> Result<Vec<Pulled>, StoreError> {
    // Ingest first (`crate::pressure`), as for a route loop: while ingest is
    // saturated, a pull takes a few deliveries once the webhooks stored meanwhile
    // have earned them, and nothing before (the long poll waits).
    let want = if fwd.pressure.saturated() {
        ask.max.min(super::SATURATED_CLAIM)
    } else {
        ask.max
    };
    let shared = fwd.pressure.share(want);
    if shared == 0 {
        return Ok(Vec::new());
    }
    let now = fwd.clock.now_ms();
    let claimed = fwd
        .store
        .claim(
            &route.source,
            &route.name,
            &fwd.worker,
            now,
            shared,
            ask.lease + STORE_MARGIN,
        )
        .await;
    fwd.pressure
        .give_back(shared.saturating_sub(claimed.as_ref().map_or(0, Vec::len)));
    let claims = claimed?;
    if claims.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(claims.len());
    for claim in claims {
        let Some(transformed) = shape(fwd, route, &claim).await else {
            continue;
        };
        let attempt = claim.delivery.attempts + 1;
        let now = fwd.clock.now_ms();
        let headers = deliver::delivery_headers(
            route,
            &claim,
            attempt,
            now,
            transformed.as_ref(),
            &fwd.traces,
        );
        let body = match transformed {
            Some(t) => Bytes::from(t.body),
            None => claim.entry.body.clone(),
        };
        let until = now.saturating_add(i64::try_from(ask.lease.as_millis()).unwrap_or(i64::MAX));
        let receipt = Receipt {
            token: claim.token.clone(),
            entry_id: claim.entry.id.clone(),
            until,
            stream_message: claim.stream_message.clone(),
        };
        out.push(Pulled {
            receipt: receipt.encode(),
            entry_id: claim.entry.id.clone(),
            attempt,
            event_type: claim.entry.event_type.clone(),
            received_at: claim.entry.received_at,
            leased_until: until,
            headers,
            body,
        });
        if let Ok(mut l) = fwd.pulls.leases.lock() {
            l.insert(
                claim.token.clone(),
                Held {
                    claim,
                    route: route.clone(),
                    until,
                    consumer: ask.consumer.clone(),
                    leased_at: Instant::now(),
                    leased_at_ms: now,
                },
            );
        }
    }
    fwd.pulls.set_leased_gauge(route);
    Ok(out)
}

/// What the route's transform makes of a claimed delivery: `Some(None)` without a
/// transform, `Some(Some(_))` its output, `None` when the delivery is not handed
/// out (skipped, dead, or no worker: then given back for a second later).
async fn shape(fwd: &Forwarder, route: &Route, claim: &Claim) -> Option<Option<Shaped>> {
    let Some(t) = &route.transforms else {
        return Some(None);
    };
    let start_by = tokio::time::Instant::now() + TRANSFORM_WAIT;
    let completion = match deliver::transform(t, route, &claim.entry, start_by).await {
        Ok(Ran::Send(shaped)) => return Some(Some(shaped)),
        Ok(Ran::Empty) => {
            route.meters.transform_skipped.increment(1);
            Completion::Filtered {
                reason: crate::transform::EMPTY_REASON.to_string(),
            }
        }
        Err(e) if e.is_final() => {
            deliver::transform_failed(fwd, route, claim, &e, fwd.clock.now_ms())
        }
        Err(_) => Completion::Release {
            at: fwd.clock.now_ms() + 1_000,
        },
    };
    deliver::complete(fwd, claim, completion).await;
    None
}

/// Serve the long polls waiting in `route`'s line, until `stop`: claim for the
/// first one whenever work arrives for the route or a poll interval passes.
pub(super) async fn route_loop(fwd: Arc<Forwarder>, route: Arc<Route>, stop: CancellationToken) {
    let line = fwd.pulls.line(&route);
    let mut signal = fwd.store.work_signal(&route.source, &route.name);
    loop {
        // Wait for a live waiter.
        let ask = loop {
            let front = line.waiting.lock().ok().and_then(|mut w| {
                while w.front().is_some_and(|f| f.reply.is_closed()) {
                    w.pop_front();
                }
                w.front().map(|f| f.ask.clone())
            });
            if let Some(ask) = front {
                break ask;
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = line.arrived.notified() => {}
            }
        };
        let poll = fwd.plan().cfg.poll_interval;
        if fwd.is_paused(&route) || !fwd.fence.held() {
            super::idle(&mut signal, poll, &stop).await;
            if stop.is_cancelled() {
                return;
            }
            continue;
        }
        match take(&fwd, &route, &ask).await {
            Ok(got) if got.is_empty() => {
                super::idle(&mut signal, poll, &stop).await;
                if stop.is_cancelled() {
                    return;
                }
            }
            Ok(got) => {
                let waiter = line.waiting.lock().ok().and_then(|mut w| w.pop_front());
                let undelivered = match waiter {
                    Some(w) => w.reply.send(got).err(),
                    None => Some(got),
                };
                // The waiter left meanwhile: its deliveries go back at once.
                for p in undelivered.unwrap_or_default() {
                    give_back(&fwd, &p).await;
                }
            }
            Err(e) => {
                const MSG: &str = "a pull route's claim failed; retrying";
                let kind = format!("{}/{} {}", route.source, route.name, e.kind());
                if crate::telemetry::throttle::hit(MSG, &kind) {
                    tracing::warn!(source = %route.source, route = %route.name, error = %e, "{MSG}");
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(poll) => {}
                }
            }
        }
    }
}

/// A delivery handed out to no one: its lease ends now, untouched.
async fn give_back(fwd: &Forwarder, pulled: &Pulled) {
    let Some(receipt) = Receipt::decode(&pulled.receipt) else {
        return;
    };
    let held = fwd
        .pulls
        .leases
        .lock()
        .ok()
        .and_then(|mut l| l.take(&receipt.token));
    if let Some(h) = held {
        let at = fwd.clock.now_ms();
        deliver::complete(fwd, &h.claim, Completion::Release { at }).await;
        fwd.pulls.set_leased_gauge(&h.route);
    }
}

/// End the leases whose time ran out, until `shutdown`: each delivery is offered
/// again at once; every third expiry in a row of one delivery is a failed attempt.
pub(super) async fn sweep(fwd: Arc<Forwarder>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SWEEP) => {}
        }
        let now = fwd.clock.now_ms();
        let forget_before = now - i64::try_from(EXPIRIES_FORGOTTEN.as_millis()).unwrap_or(0);
        let expired = fwd
            .pulls
            .leases
            .lock()
            .map(|mut l| {
                l.expiries.retain(|_, (_, last)| *last >= forget_before);
                l.take_expired(now)
            })
            .unwrap_or_default();
        for held in expired {
            expire(&fwd, held).await;
        }
    }
}

async fn expire(fwd: &Forwarder, held: Held) {
    let route = held.route.clone();
    let key = (held.claim.entry.id.clone(), route.name.clone());
    let n = fwd
        .pulls
        .leases
        .lock()
        .map(|mut l| {
            let n = l.expiries.entry(key.clone()).or_insert((0, 0));
            n.0 += 1;
            n.1 = fwd.clock.now_ms();
            let count = n.0;
            if count >= EXPIRIES_PER_ATTEMPT {
                l.expiries.remove(&key);
            }
            count
        })
        .unwrap_or(1);
    let now = fwd.clock.now_ms();
    tracing::info!(
        source = %route.source, route = %route.name, entry_id = %held.claim.entry.id,
        consumer = %held.consumer.describe(), expiries = n,
        "a pulled delivery's lease expired unacknowledged; it is offered again"
    );
    let completion = if n < EXPIRIES_PER_ATTEMPT {
        Completion::Release { at: now }
    } else {
        let outcome = Outcome::TimedOut(Failed::new(
            Failure::LeaseExpired,
            format!(
                "not acknowledged within its lease by {}, {n} times in a row",
                held.consumer.describe()
            ),
        ));
        route.meters.attempt(meters::result_of(&outcome));
        let elapsed = held.leased_at.elapsed();
        let terms = pull_terms(fwd, &held.claim, None).await;
        let latency_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let mut completion = deliver::conclude(
            fwd,
            &route,
            &held.claim,
            &outcome,
            (held.leased_at_ms, latency_ms),
            terms,
        );
        // Offered again at once: the consumer's lease was its wait.
        if let Completion::Retry { at, .. } = &mut completion {
            *at = now;
        }
        trace(fwd, &route, &held.claim, &completion, elapsed);
        completion
    };
    // (A released lease moves the route's work signal: its waiters are served.)
    deliver::complete(fwd, &held.claim, completion).await;
    fwd.pulls.set_leased_gauge(&route);
}
