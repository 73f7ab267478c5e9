//! Reconciliation: ask a source's provider what it sent, and recover what never
//! reached the gateway.
//!
//! A 2xx protects what reached hookgate. A delivery lost before it (a 503 during a
//! store outage or a deploy, a wrong secret after a rotation, a load balancer's
//! mistake) is lost for good unless someone compares with the provider: GitHub does
//! not retry at all, Stripe stops after three days. A source with
//! `[sources.reconcile]` is compared every `interval` (one gateway at a time, under
//! the store's reconciliation lease), over what the provider's API lists since the
//! high-water mark kept in the store, back to the `lookback` at most (capped by what
//! the provider keeps, the source's `dedupe_ttl` and the delivered retention, so
//! that nothing stored and since forgotten is taken for missing):
//!
//! - GitHub (`github`): a delivery whose GUID the source does not hold is asked for
//!   again; it arrives signed through ingest (`origin = redelivered` once stored).
//! - Stripe (`stripe`), Square (`square`): an event the endpoint would have been
//!   sent whose dedupe key the store does not hold is admitted from the API through
//!   the same dedupe and routing (`ingest::fetched_entry`, `origin = reconciled`).
//!
//! A pass that fails (the API's 401, 429, 5xx, a timeout) ends, is counted by kind,
//! and the next one waits longer (the interval doubled per failure, at most an hour,
//! and never before the provider's `Retry-After`); ingest never waits on it.
//! `POST /admin/sources/{name}/reconcile` runs one now ([`Reconciler::run_now`]),
//! over a chosen window and as a dry run if asked. Every recovered webhook is a log
//! line, a counter (`hookgate_reconcile_recovered_total`) and an audit event on its
//! entry.
//!
//! Here: the pass itself ([`Pass`]: lease, state, judging fetched events, the
//! report) and the loop; each provider's API in its own file; `api` the calls;
//! `state` what is kept between passes.

pub mod api;
mod github;
mod square;
pub mod state;
mod stripe;

pub use github::{AppClaims, app_jwt};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::{ReconcileApi, ReconcileConfig, ReconcileProvider};
use crate::ingest::{self, fetched_entry, fetched_key};
use crate::live::Live;
use crate::store::{Accepted, Origin, ReconcileLease, Store, StoreError};
use api::ApiError;
use state::State;

/// How often the loop looks for a source that is due.
const TICK: Duration = Duration::from_secs(1);
/// How long a pass's lease runs before it is renewed (between pages).
const LEASE: Duration = Duration::from_secs(120);
/// The longest backoff after failed passes.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// How far before the mark an events listing starts again (events listed late,
/// several in one second).
const OVERLAP: Duration = Duration::from_secs(10 * 60);
/// The fewest milliseconds between two page requests to Stripe's or Square's API:
/// 50 pages a second, half of Stripe's live read limit; a pass of 1,000 pages takes
/// 20 s at least, and never a core.
const PAGE_EVERY_EVENTS_MS: u64 = 20;
/// The same for GitHub's (its secondary rate limit allows about 15 a second).
const PAGE_EVERY_GITHUB_MS: u64 = 70;

/// Run `f`, CPU work of a page (its events' dedupe keys), on the blocking pool, so
/// that a pass never holds an async worker that ingest needs.
pub(crate) async fn off_the_workers<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PassError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(PassError::Worker)
}

/// Most missing ids a report names.
pub const REPORT_IDS: usize = 100;

/// The sources to reconcile: reconciliation's part of the route table.
#[derive(Default)]
pub struct Plan {
    pub sources: Vec<Arc<Reconciled>>,
    /// The delivered retention: entries older than it may be gone.
    pub retention: Duration,
}

/// One source with `[sources.reconcile]`.
pub struct Reconciled {
    pub name: String,
    pub config: ReconcileConfig,
    /// Ingest's source: what a fetched event becomes an entry through.
    pub ingest: Arc<ingest::Source>,
}

/// What a pass found, as the admin API and the CLI show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub source: String,
    /// `github`, `stripe` or `square`.
    pub provider: ReconcileProvider,
    pub dry_run: bool,
    /// The window judged (unix ms): from `since` to `until` (younger items are left
    /// for the provider's own delivery).
    pub since: i64,
    pub until: i64,
    /// Pages read from the API.
    pub pages: u64,
    /// Deliveries (GitHub) or events listed and judged.
    pub listed: u64,
    /// Events listed that the endpoint would not have been sent (another type,
    /// mode or account).
    pub not_for_endpoint: u64,
    /// GUIDs or events the store holds.
    pub stored: u64,
    /// GUIDs or events the store does not hold.
    pub missing: u64,
    /// Events admitted from the API (Stripe, Square).
    pub admitted: u64,
    /// GUIDs asked for again (GitHub).
    pub asked: u64,
    /// GUIDs asked for before and now stored (GitHub).
    pub redelivered: u64,
    /// GUIDs still missing after the last ask allowed.
    pub gave_up: u64,
    /// The first [`REPORT_IDS`] missing event ids or GUIDs.
    pub missing_ids: Vec<String>,
}

/// Why a pass ended early.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("the store failed")]
    Store(#[source] StoreError),
    /// Another gateway took the lease (this one's expired while it worked).
    #[error("another gateway took the reconciliation lease")]
    LeaseLost,
    /// The blocking task that worked on a page stopped (a panic).
    #[error("a reconciliation worker stopped")]
    Worker(#[source] tokio::task::JoinError),
}

impl PassError {
    /// The `kind` label of `hookgate_reconcile_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            PassError::Api(e) => e.kind(),
            PassError::Store(_) => "store",
            PassError::LeaseLost => "lease_lost",
            PassError::Worker(_) => "worker",
        }
    }
}

/// Why a pass did not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("source {0:?} has no [sources.reconcile]")]
    NotReconciled(String),
    #[error("gateway {holder} is reconciling source {name} until {until} (unix ms)")]
    Busy {
        name: String,
        holder: String,
        until: i64,
    },
    #[error("the pass failed: {0}")]
    Failed(#[source] PassError),
}

/// One pass over one source.
pub struct Pass<'a> {
    pub(crate) store: &'a dyn Store,
    pub(crate) client: &'a reqwest::Client,
    source: &'a Reconciled,
    holder: &'a str,
    clock: &'a Clock,
    pub(crate) now_ms: i64,
    /// The oldest item judged (unix ms).
    pub(crate) since_ms: i64,
    /// An explicit window (`since` of an on-demand run): the mark is not used.
    explicit: bool,
    pub(crate) dry_run: bool,
    pub(crate) state: State,
    pub(crate) report: Report,
    new_mark: Option<i64>,
    renewed_at: i64,
    /// When the last page was asked for (for the pace).
    last_page: Option<tokio::time::Instant>,
}

impl Pass<'_> {
    /// Wait for the next page's turn: the provider's rate limits, and a pass that
    /// never takes a core from ingest.
    pub(crate) async fn page_turn(&mut self) {
        let every = Duration::from_millis(match self.source.config.api {
            ReconcileApi::GitHub { .. } => PAGE_EVERY_GITHUB_MS,
            _ => PAGE_EVERY_EVENTS_MS,
        });
        if let Some(last) = self.last_page {
            tokio::time::sleep_until(last + every).await;
        }
        self.last_page = Some(tokio::time::Instant::now());
    }

    pub(crate) fn base(&self) -> &str {
        &self.source.config.api_base
    }

    /// Items younger than this (unix ms) are left to the provider's own delivery.
    pub(crate) fn settle_cutoff_ms(&self) -> i64 {
        self.now_ms - self.source.config.settle.as_millis() as i64
    }

    pub(crate) fn now_s(&self) -> i64 {
        self.clock.now_secs()
    }

    /// The high-water mark, unless the window was chosen.
    pub(crate) fn mark(&self) -> Option<i64> {
        if self.explicit { None } else { self.state.mark }
    }

    /// Raise the mark to `mark` when the pass ends well.
    pub(crate) fn advance_mark(&mut self, mark: i64) {
        self.new_mark = Some(self.new_mark.map_or(mark, |m| m.max(mark)));
    }

    /// Where an events listing starts (unix s): the mark less an overlap, or the
    /// window's start, whichever is later.
    pub(crate) fn events_since_s(&self) -> i64 {
        let since = self.since_ms.div_euclid(1000);
        match self.mark() {
            Some(m) => since.max(m - OVERLAP.as_secs() as i64),
            None => since,
        }
    }

    /// Renew the lease when a good part of it has run (between pages).
    pub(crate) async fn keep_alive(&mut self) -> Result<(), PassError> {
        if self.dry_run {
            return Ok(());
        }
        let now = self.clock.now_ms();
        if now - self.renewed_at < LEASE.as_millis() as i64 / 4 {
            return Ok(());
        }
        match self
            .store
            .lease_reconcile(
                &self.source.name,
                self.holder,
                now,
                now + LEASE.as_millis() as i64,
            )
            .await
            .map_err(PassError::Store)?
        {
            ReconcileLease::Taken { .. } => {
                self.renewed_at = now;
                Ok(())
            }
            ReconcileLease::Held { .. } => Err(PassError::LeaseLost),
        }
    }

    pub(crate) fn note_missing(&mut self, id: &str) {
        if self.report.missing_ids.len() < REPORT_IDS {
            self.report.missing_ids.push(id.to_string());
        }
    }

    fn label(&self) -> (String, String) {
        (
            self.source.name.clone(),
            self.source.config.api.provider().as_str().to_string(),
        )
    }

    pub(crate) fn asked(&mut self, guid: &str) {
        self.report.asked += 1;
        let (source, provider) = self.label();
        metrics::counter!("hookgate_reconcile_found_total", "source" => source.clone(), "how" => "asked")
            .increment(1);
        tracing::info!(
            source,
            provider,
            guid,
            "reconcile: a delivery hookgate did not store was asked for again"
        );
    }

    pub(crate) fn gave_up(&mut self, guid: &str) {
        self.report.gave_up += 1;
        let (source, provider) = self.label();
        metrics::counter!("hookgate_reconcile_found_total", "source" => source.clone(), "how" => "gave_up")
            .increment(1);
        tracing::warn!(
            source,
            provider,
            guid,
            asks = state::MAX_ASKS,
            "reconcile: a delivery is still missing after the last redelivery allowed; redeliver it by hand once the cause is fixed"
        );
    }

    /// An entry that reached the store through reconciliation: its origin and audit
    /// event, the counter and the log line.
    pub(crate) async fn recovered(
        &mut self,
        entry: &str,
        origin: Origin,
        event_id: &str,
    ) -> Result<(), PassError> {
        let provider = self.source.config.api.provider().as_str();
        let note = match origin {
            Origin::Redelivered => format!(
                "redelivered by {provider} at hookgate's request: reconciliation found the delivery missing"
            ),
            _ => format!(
                "admitted by reconciliation from {provider}'s API: no request of it reached hookgate"
            ),
        };
        if origin == Origin::Redelivered {
            self.report.redelivered += 1;
        }
        if self.dry_run {
            return Ok(());
        }
        self.store
            .mark_origin(entry, origin, &note, self.now_ms)
            .await
            .map_err(PassError::Store)?;
        metrics::counter!(
            "hookgate_reconcile_recovered_total",
            "source" => self.source.name.clone(),
            "origin" => origin.as_str()
        )
        .increment(1);
        tracing::info!(
            source = %self.source.name,
            provider,
            event_id,
            entry,
            origin = origin.as_str(),
            "reconcile: recovered a webhook that never reached hookgate"
        );
        Ok(())
    }

    /// Judge events fetched from the API: those the store's dedupe does not hold
    /// are admitted (unless a dry run); the younger ones are left alone.
    pub(crate) async fn judge_events(&mut self, batch: Vec<Fetched>) -> Result<(), PassError> {
        let cutoff_s = self.settle_cutoff_ms().div_euclid(1000);
        let since_s = self.since_ms.div_euclid(1000);
        let judged: Vec<Fetched> = batch
            .into_iter()
            .filter(|f| f.created_s <= cutoff_s && f.created_s >= since_s)
            .collect();
        if judged.is_empty() {
            return Ok(());
        }
        self.report.listed += judged.len() as u64;
        let source = self.source.ingest.clone();
        let (judged, keys) = off_the_workers(move || {
            let keys: Vec<String> = judged
                .iter()
                .map(|f| fetched_key(&source, &f.body))
                .collect();
            (judged, keys)
        })
        .await?;
        let held = self
            .store
            .dedupe_lookup(&self.source.name, &keys, self.now_ms)
            .await
            .map_err(PassError::Store)?;
        for (f, held) in judged.into_iter().zip(held) {
            if held.is_some() {
                self.report.stored += 1;
                continue;
            }
            let event_id = f.event_id;
            let entry = fetched_entry(&self.source.ingest, f.body, self.now_ms);
            self.report.missing += 1;
            self.note_missing(&event_id);
            if self.dry_run {
                self.report.admitted += 1;
                continue;
            }
            match self.store.accept(entry).await.map_err(PassError::Store)? {
                Accepted::New(id) => {
                    self.report.admitted += 1;
                    metrics::counter!(
                        "hookgate_reconcile_found_total",
                        "source" => self.source.name.clone(),
                        "how" => "admitted"
                    )
                    .increment(1);
                    self.recovered(&id, Origin::Reconciled, &event_id).await?;
                }
                // Its delivery arrived meanwhile.
                Accepted::Duplicate(_) => {
                    self.report.missing -= 1;
                    self.report.stored += 1;
                }
            }
        }
        Ok(())
    }
}

/// An event a listing gave: its id, creation time and the event as listed.
pub(crate) struct Fetched {
    pub(crate) event_id: String,
    pub(crate) created_s: i64,
    pub(crate) body: bytes::Bytes,
}

/// How a pass is asked for.
#[derive(Debug, Clone, Copy)]
pub struct Ask {
    /// Judge from this long ago (an on-demand run); `None`: from the mark.
    pub since: Option<Duration>,
    pub dry_run: bool,
}

/// Runs the passes: the loop, and the on-demand ones.
pub struct Reconciler {
    store: Arc<dyn Store>,
    plan: Live<Plan>,
    client: reqwest::Client,
    /// Who holds the leases this gateway takes (its heartbeat id).
    holder: String,
    clock: Clock,
    /// When each source is due next here (unix ms).
    due: Mutex<HashMap<String, i64>>,
}

impl Reconciler {
    pub fn new(
        store: Arc<dyn Store>,
        plan: Live<Plan>,
        holder: String,
        clock: Clock,
    ) -> Result<Reconciler, reqwest::Error> {
        Ok(Reconciler {
            store,
            plan,
            client: api::client()?,
            holder,
            clock,
            due: Mutex::new(HashMap::new()),
        })
    }

    /// Pass over each source when it is due, until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let plan = self.plan.load();
            for source in &plan.sources {
                if shutdown.is_cancelled() {
                    return;
                }
                let now = self.clock.now_ms();
                let due = self.due_at(&source.name);
                if due.is_some_and(|d| d > now) {
                    continue;
                }
                // A pass cut short keeps its lease until it runs out: the next
                // gateway goes on from the state saved last.
                let next = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    next = self.periodic(&plan, source) => next,
                };
                self.set_due(&source.name, next);
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(TICK) => {}
            }
        }
    }

    fn due_at(&self, source: &str) -> Option<i64> {
        self.due.lock().ok().and_then(|d| d.get(source).copied())
    }

    fn set_due(&self, source: &str, at: i64) {
        if let Ok(mut d) = self.due.lock() {
            d.insert(source.to_string(), at);
        }
    }

    /// A periodic pass over `source`; answers when the next one is due here.
    async fn periodic(&self, plan: &Plan, source: &Reconciled) -> i64 {
        let interval = source.config.interval.as_millis() as i64;
        let ask = Ask {
            since: None,
            dry_run: false,
        };
        match self.pass(plan, source, ask, true).await {
            Ok(_) => self.clock.now_ms() + interval,
            Err(RunError::Busy { .. }) | Err(RunError::NotReconciled(_)) => {
                self.clock.now_ms() + interval
            }
            Err(RunError::Failed(_)) => self.clock.now_ms() + interval.min(60_000),
        }
    }

    /// One pass over the source named `name` now, as `ask` says (the admin API's
    /// `POST /admin/sources/{name}/reconcile`).
    pub async fn run_now(&self, name: &str, ask: Ask) -> Result<Report, RunError> {
        let plan = self.plan.load();
        let source = plan
            .sources
            .iter()
            .find(|s| s.name == name)
            .cloned()
            .ok_or_else(|| RunError::NotReconciled(name.to_string()))?;
        self.pass(&plan, &source, ask, false).await
    }

    /// Whether `name` is reconciled by the table in force.
    pub fn reconciles(&self, name: &str) -> bool {
        self.plan.load().sources.iter().any(|s| s.name == name)
    }

    /// How far back a pass may look for `source`.
    fn lookback(plan: &Plan, source: &Reconciled) -> Duration {
        let c = &source.config;
        let mut l = c.lookback.min(c.api.keeps());
        match c.api {
            // The store's dedupe is what says "held".
            ReconcileApi::Stripe { .. } | ReconcileApi::Square { .. } => {
                l = l.min(source.ingest.dedupe_ttl);
            }
            // The entries are what say "held".
            ReconcileApi::GitHub { .. } => {
                if !plan.retention.is_zero() {
                    l = l.min(plan.retention);
                }
            }
        }
        l
    }

    async fn pass(
        &self,
        plan: &Plan,
        source: &Reconciled,
        ask: Ask,
        periodic: bool,
    ) -> Result<Report, RunError> {
        let now = self.clock.now_ms();
        let provider = source.config.api.provider();
        let lease = self
            .store
            .lease_reconcile(
                &source.name,
                &self.holder,
                now,
                now + LEASE.as_millis() as i64,
            )
            .await
            .map_err(|e| RunError::Failed(PassError::Store(e)))?;
        let kept = match lease {
            ReconcileLease::Taken { state } => state,
            ReconcileLease::Held { holder, until } => {
                return Err(RunError::Busy {
                    name: source.name.clone(),
                    holder,
                    until,
                });
            }
        };
        let state = State::read(kept.as_deref());
        if let Some(s) = state.last_success {
            metrics::gauge!("hookgate_reconcile_last_success_timestamp_seconds", "source" => source.name.clone())
                .set(s as f64 / 1000.0);
        }
        if periodic && state.not_before.is_some_and(|t| t > now) {
            let _ = self
                .store
                .release_reconcile(&source.name, &self.holder)
                .await;
            return Err(RunError::Busy {
                name: source.name.clone(),
                holder: "(backing off)".to_string(),
                until: state.not_before.unwrap_or(now),
            });
        }
        let lookback = Self::lookback(plan, source);
        let window = ask.since.map_or(lookback, |s| s.min(lookback));
        let since_ms = now - window.as_millis() as i64;
        let mut pass = Pass {
            store: self.store.as_ref(),
            client: &self.client,
            source,
            holder: &self.holder,
            clock: &self.clock,
            now_ms: now,
            since_ms,
            explicit: ask.since.is_some(),
            dry_run: ask.dry_run,
            state,
            report: Report {
                source: source.name.clone(),
                provider,
                dry_run: ask.dry_run,
                since: since_ms,
                until: now - source.config.settle.as_millis() as i64,
                ..Report::default()
            },
            new_mark: None,
            renewed_at: now,
            last_page: None,
        };
        let outcome = match &source.config.api {
            ReconcileApi::GitHub { hook, auth } => github::reconcile(&mut pass, hook, auth).await,
            ReconcileApi::Stripe { api_key, endpoint } => {
                stripe::reconcile(&mut pass, api_key, endpoint).await
            }
            ReconcileApi::Square {
                token,
                subscription,
            } => square::reconcile(&mut pass, token, subscription).await,
        };
        if ask.dry_run {
            let _ = self
                .store
                .release_reconcile(&source.name, &self.holder)
                .await;
            return outcome.map(|()| pass.report).map_err(RunError::Failed);
        }
        let end = self.clock.now_ms();
        let mut state = pass.state;
        match &outcome {
            Ok(()) => {
                if let Some(m) = pass.new_mark {
                    state.mark = Some(state.mark.map_or(m, |old| old.max(m)));
                } else if !matches!(source.config.api, ReconcileApi::GitHub { .. }) {
                    // Every event up to the settle cutoff was judged.
                    let cutoff = (now - source.config.settle.as_millis() as i64).div_euclid(1000);
                    state.mark = Some(state.mark.map_or(cutoff, |old| old.max(cutoff)));
                }
                state.failures = 0;
                state.not_before = None;
                state.last_success = Some(end);
                state.forget_asked_before(end - lookback.as_millis() as i64);
                metrics::gauge!("hookgate_reconcile_last_success_timestamp_seconds", "source" => source.name.clone())
                    .set(end as f64 / 1000.0);
            }
            Err(e) => {
                state.failures = state.failures.saturating_add(1);
                let backoff = source
                    .config
                    .interval
                    .saturating_mul(1u32 << state.failures.min(10).saturating_sub(1))
                    .min(MAX_BACKOFF);
                let asked = match e {
                    PassError::Api(a) => a.retry_after().unwrap_or_default(),
                    _ => Duration::ZERO,
                };
                state.not_before = Some(end + backoff.max(asked).as_millis() as i64);
                metrics::counter!(
                    "hookgate_reconcile_errors_total",
                    "source" => source.name.clone(),
                    "kind" => e.kind()
                )
                .increment(1);
                tracing::warn!(
                    source = %source.name,
                    provider = provider.as_str(),
                    kind = e.kind(),
                    error = %e,
                    failures = state.failures,
                    retry_in_ms = state.not_before.unwrap_or(end) - end,
                    "reconcile: the pass failed; the next one backs off"
                );
            }
        }
        if !matches!(outcome, Err(PassError::LeaseLost)) {
            let _ = self
                .store
                .save_reconcile(&source.name, &self.holder, &state.write(), end)
                .await;
            let _ = self
                .store
                .release_reconcile(&source.name, &self.holder)
                .await;
        }
        outcome.map(|()| pass.report).map_err(RunError::Failed)
    }
}

/// Every `kind` of `hookgate_reconcile_errors_total` ([`PassError::kind`]).
pub const ERROR_KINDS: &[&str] = &[
    "unauthorized",
    "rate_limited",
    "server",
    "refused",
    "timeout",
    "transport",
    "answer",
    "credential",
    "store",
    "lease_lost",
    "worker",
];

/// Register the reconciliation's metric families with a zero series for each
/// source that is reconciled, so that the first scrape lists them; and one series
/// without a source each, so that a gateway reconciling nothing lists them too (the
/// shipped alert rules read them).
pub fn register_metrics<'a>(sources: impl IntoIterator<Item = &'a str>) {
    metrics::counter!("hookgate_reconcile_found_total").increment(0);
    metrics::counter!("hookgate_reconcile_recovered_total").increment(0);
    metrics::counter!("hookgate_reconcile_errors_total").increment(0);
    metrics::gauge!("hookgate_reconcile_last_success_timestamp_seconds").increment(0.0);
    for s in sources {
        for how in ["admitted", "asked", "gave_up"] {
            metrics::counter!("hookgate_reconcile_found_total", "source" => s.to_string(), "how" => how)
                .increment(0);
        }
        for origin in [Origin::Reconciled, Origin::Redelivered] {
            metrics::counter!("hookgate_reconcile_recovered_total", "source" => s.to_string(), "origin" => origin.as_str())
                .increment(0);
        }
        for kind in ERROR_KINDS {
            metrics::counter!("hookgate_reconcile_errors_total", "source" => s.to_string(), "kind" => *kind)
                .increment(0);
        }
        metrics::gauge!("hookgate_reconcile_last_success_timestamp_seconds", "source" => s.to_string())
            .increment(0.0);
    }
}
