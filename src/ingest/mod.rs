//! The ingest endpoint: `POST /ingest/{source}`.
//!
//! Refuse what can be refused from the headers alone (a body over the limit, a
//! missing signature header, a spent body budget), read the raw body (bounded in size,
//! time and shared memory: [`body`]), verify it against the source's provider spec
//! (on the blocking pool when it is large, so a flood of big forgeries never stalls
//! the async workers), answer a handshake if it is one, extract the event id and
//! type, then dedupe and persist through [`Store::accept`]. Only a durable entry gets
//! a 2xx. Ingest never delivers: the forwarder picks entries up from the store.
//!
//! The entry goes to the routes whose filters take it, each ordered one with the
//! entry's ordering key; an entry no route takes is stored all the same, as
//! `filtered`.

pub mod body;
mod handshake;
pub mod hook_secret;
pub mod limit;
pub mod rejections;
pub mod subscription;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use tokio::sync::Semaphore;

use crate::clock::Clock;
use crate::config::{OrderBy, OrderConfig};
use crate::error::ApiError;
use crate::error::RequestOutcome;
use crate::header_policy::HeaderPolicy;
use crate::provider::Verifier;
use crate::provider::certificate::KeyName;
use crate::provider::spec::{Spec, ValueTemplate, parse_value_template};
use crate::provider::verify::{self, HandshakeReply, VerifyError};
use crate::routing::filter::{Filter, Subject};
use crate::store::{
    Accepted, Header, MAX_ORDER_KEY, NewEntry, Readiness, RouteOrder, Store, StoreError,
};
use crate::telemetry;
use crate::telemetry::traces::{IngestEnd, IngestPhase, IngestTrace, Traces};
use body::BodyBudget;
use hook_secret::Refresh;

/// Bodies larger than this are verified on the blocking pool.
pub const OFFLOAD_BODY_BYTES: usize = 64 * 1024;

/// A configured source, ready to verify requests.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub verifier: Verifier,
    pub dedupe_ttl: Duration,
    /// The URL the provider calls, for providers that sign it.
    pub public_url: Option<String>,
    /// Which received headers are stored (credentials only when named).
    pub headers: HeaderPolicy,
    /// The source's routes, in configuration order, with their filters.
    pub routes: Vec<RouteFilter>,
    /// The part of the body budget this source's requests may hold.
    pub body_share: body::SourceShare,
    pub metrics: SourceMetrics,
    /// Keep the bodies (their first bytes) of refused requests in the rejection log.
    pub keep_rejected_bodies: bool,
    /// Indexed JSON pointers of the body, (name, pointer): their values are stored
    /// with each entry (`store::search`).
    pub index: Vec<(String, String)>,
    /// `[sources.limits] requests`: over it, 429 before the body is read.
    pub request_limit: Option<Arc<limit::RequestLimit>>,
    /// `allow_ips`: from any other address, 403 before the body is read.
    pub allowlist: Option<crate::allowlist::Allowlist>,
    /// The token of the provider's endpoint check (Meta's `hub.verify_token`).
    pub verify_token: Option<crate::config::Secret>,
    /// AWS SNS (`confirm_subscriptions`): visit a verified confirmation's
    /// `SubscribeURL` before storing it (`subscription`).
    pub confirm_subscriptions: bool,
    /// A provider whose secret arrives in a handshake (`hook-secret`): the keys,
    /// configured and established (`hook_secret`).
    pub established: Option<Arc<hook_secret::Established>>,
}

/// The configured sources by name: ingest's part of the route table.
pub type Sources = HashMap<String, Arc<Source>>;

/// A route as ingest sees it: its name, which entries it takes, and where an
/// ordered route finds an entry's ordering key.
#[derive(Debug, Clone)]
pub struct RouteFilter {
    pub name: String,
    pub filter: Filter,
    pub order: Option<RouteOrdering>,
}

/// Where an ordered route finds an entry's key (alternatives, tried in order), and
/// its policy for a dead head.
#[derive(Debug, Clone)]
pub struct RouteOrdering {
    pub by: Vec<ValueTemplate>,
    pub block: bool,
}

/// Why an `order.by` cannot be used with a source's provider.
#[derive(Debug, thiserror::Error)]
pub enum OrderingError {
    #[error("{0}")]
    Template(String),
    #[error(
        "provider {0:?} names no object id (event.object in its spec); order by json:/pointer or header:Name"
    )]
    NoProviderObject(String),
}

impl RouteOrdering {
    /// The ordering of a route of a source whose provider is `spec` (`provider` by
    /// name, for the error).
    pub fn new(
        cfg: &OrderConfig,
        spec: &Spec,
        provider: &str,
    ) -> Result<RouteOrdering, OrderingError> {
        let by = match &cfg.by {
            OrderBy::Provider if spec.event_object.is_empty() => {
                return Err(OrderingError::NoProviderObject(provider.to_string()));
            }
            OrderBy::Provider => spec.event_object.clone(),
            OrderBy::Value(text) => {
                vec![parse_value_template(text).map_err(OrderingError::Template)?]
            }
        };
        Ok(RouteOrdering {
            by,
            block: cfg.block,
        })
    }
}

/// An ordering key as stored: as found, or its SHA-256 when longer than
/// [`MAX_ORDER_KEY`] (a webhook decides how long it is).
fn order_key(found: String) -> String {
    if found.len() > MAX_ORDER_KEY {
        use sha2::Digest as _;
        format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(found.as_bytes()))
        )
    } else {
        found
    }
}

/// The routes whose filters take this entry, in configuration order. Runs once per
/// entry, after verification; a filter that takes everything costs nothing.
fn matching_routes(routes: &[RouteFilter], subject: &Subject<'_>) -> Vec<String> {
    routes
        .iter()
        .filter(|r| r.filter.takes_everything() || r.filter.matches(subject))
        .map(|r| r.name.clone())
        .collect()
}

/// A source's ingest metrics for the outcomes every accepted request has, registered
/// once: the hot path bumps a handle instead of building a labelled key and looking
/// it up in the registry on every request. Rarer outcomes use the macros.
#[derive(Debug, Clone)]
pub struct SourceMetrics {
    accepted: metrics::Counter,
    duplicate: metrics::Counter,
    handshake: metrics::Counter,
    /// Entries stored that no route's filter selected.
    filtered: metrics::Counter,
    ack_seconds: metrics::Histogram,
}

impl SourceMetrics {
    /// Register the handles of `source` with the installed recorder (install it
    /// first: handles taken before are no-ops).
    pub fn new(source: &str) -> Self {
        let requests = |outcome: RequestOutcome| metrics::counter!("hookgate_ingest_requests_total", "source" => source.to_string(), "outcome" => outcome.label());
        SourceMetrics {
            accepted: requests(RequestOutcome::Accepted),
            duplicate: requests(RequestOutcome::Duplicate),
            handshake: requests(RequestOutcome::Handshake),
            filtered: metrics::counter!("hookgate_entries_filtered_total", "source" => source.to_string()),
            ack_seconds: metrics::histogram!("hookgate_ingest_ack_seconds", "source" => source.to_string()),
        }
    }
}

/// Verification failures per source, counted in memory and added to the store's
/// counters by [`flush_unverified`] once a second, so that a flood of forged requests
/// never turns into a flood of store writes.
#[derive(Debug, Default)]
pub struct UnverifiedCounts(std::sync::Mutex<HashMap<String, u64>>);

impl UnverifiedCounts {
    fn bump(&self, source: &str) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(source.to_string()).or_default() += 1;
        }
    }

    fn take(&self) -> HashMap<String, u64> {
        self.0
            .lock()
            .map(|mut m| std::mem::take(&mut *m))
            .unwrap_or_default()
    }
}

/// Every second until shutdown, add the counted verification failures to the
/// store's counters and hand it the rejection log's rows and counts.
pub async fn flush_refused(
    counts: Arc<UnverifiedCounts>,
    rejections: Arc<rejections::RejectionLog>,
    store: Arc<dyn Store>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        let stop = tokio::select! {
            _ = shutdown.cancelled() => true,
            _ = tokio::time::sleep(Duration::from_secs(1)) => false,
        };
        for (source, n) in counts.take() {
            if let Err(e) = store.record_unverified(&source, n).await {
                tracing::debug!(source, error = %e, "cannot record verification failures");
            }
        }
        let batch = rejections.take();
        if !batch.rows.is_empty() || !batch.counts.is_empty() {
            // Lost when the store refuses it: the log is a clue, not a record.
            if let Err(e) = store.record_rejections(&batch).await {
                const MSG: &str = "cannot record rejected requests";
                if telemetry::throttle::hit(MSG, e.kind()) {
                    tracing::warn!(error = %e, rows = batch.rows.len(), "{MSG}");
                }
            }
        }
        if stop {
            return;
        }
    }
}

/// What the ingest handlers share. Built once by `app`.
pub struct IngestState {
    /// Verification failures not yet added to the store.
    pub unverified: Arc<UnverifiedCounts>,
    /// Refused requests not yet handed to the store.
    pub rejections: Arc<rejections::RejectionLog>,
    /// The sources of the route table in force, by name.
    pub sources: crate::live::Live<Sources>,
    pub store: Arc<dyn Store>,
    pub max_body_bytes: usize,
    pub body_read_timeout: Duration,
    /// Bytes every body in flight shares.
    pub body_budget: BodyBudget,
    /// Large bodies verified at once on the blocking pool (one per core).
    pub verify_slots: Arc<Semaphore>,
    /// Signature windows are checked, and arrival times stamped, at its time.
    pub clock: Clock,
    /// `store.timeout`: the longest a request waits for its write before it answers
    /// 503.
    pub store_timeout: Duration,
    /// What `/readyz` says; every write's outcome feeds it.
    pub readiness: Arc<Readiness>,
    /// How many verified webhooks wait for their write: the forwarder steps back
    /// while ingest is saturated.
    pub pressure: Arc<crate::pressure::IngestPressure>,
    /// Each request's spans, when traces are on.
    pub traces: Traces,
    /// `server.trusted_proxies` and `server.client_ip_header`: whose forwarding
    /// header names the client, and which header that is.
    pub client_ip: crate::serve::forwarded::ClientIp,
    /// `server.client_ipv6_prefix`: the IPv6 network one client is counted by.
    pub client_ipv6_prefix: u8,
    /// The certificates of certificate schemes (SNS, PayPal), fetched and kept.
    pub fetched_keys: Arc<crate::provider::certificate::FetchedKeys>,
}

pub fn router(state: Arc<IngestState>) -> Router {
    Router::new()
        .route(
            "/ingest/{source}",
            post(ingest)
                .get(endpoint_check)
                .fallback(|| async { ApiError::MethodNotAllowed }),
        )
        .fallback(|| async { ApiError::NotFound })
        .with_state(state)
}

fn capture_headers(policy: &HeaderPolicy, headers: &HeaderMap) -> Vec<Header> {
    headers
        .iter()
        .filter(|(n, _)| policy.keeps(n.as_str()))
        .map(|(n, v)| Header {
            name: n.as_str().to_string(),
            value: v.as_bytes().to_vec(),
        })
        .collect()
}

/// What verification decided, with everything borrowed from the request released.
enum Decision {
    Handshake(HandshakeReply),
    Store(Box<NewEntry>),
}

async fn ingest(
    State(ingest): State<Arc<IngestState>>,
    Path(source_name): Path<String>,
    req: Request<Body>,
) -> Response {
    let started = Instant::now();
    let mut trace = ingest.traces.ingest_start(req.headers());
    let outcome = handle(&ingest, &source_name, req, trace.as_mut()).await;
    let elapsed = started.elapsed();
    let latency_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    let kind = match &outcome {
        Ok(Handled::Stored {
            accepted: Accepted::Duplicate(_),
            ..
        }) => RequestOutcome::Duplicate,
        Ok(Handled::Stored {
            accepted: Accepted::New(_),
            ..
        }) => RequestOutcome::Accepted,
        Ok(Handled::Handshake(_)) => RequestOutcome::Handshake,
        Err(e) => e.outcome(),
    };
    // The name comes from the URL: only configured names are logged verbatim, and
    // metrics label every unknown name as one value.
    let source_name = match ingest.sources.load().get(&source_name) {
        Some(source) => {
            let m = &source.metrics;
            match kind {
                RequestOutcome::Accepted => {
                    m.accepted.increment(1);
                    m.ack_seconds.record(elapsed.as_secs_f64());
                }
                RequestOutcome::Duplicate => {
                    m.duplicate.increment(1);
                    m.ack_seconds.record(elapsed.as_secs_f64());
                }
                RequestOutcome::Handshake => m.handshake.increment(1),
                _ => {
                    metrics::counter!("hookgate_ingest_requests_total", "source" => source_name.clone(), "outcome" => kind.label())
                        .increment(1);
                    if let Err(ApiError::Unverified(reason)) = &outcome {
                        metrics::counter!("hookgate_ingest_unverified_total", "source" => source_name.clone(), "reason" => reason.label())
                            .increment(1);
                    }
                }
            }
            source_name
        }
        None => {
            metrics::counter!("hookgate_ingest_requests_total", "source" => crate::error::UNKNOWN_SOURCE, "outcome" => kind.label())
                .increment(1);
            let escaped: String = source_name.escape_debug().take(64).collect();
            format!("unknown:{escaped}")
        }
    };
    if let Some(trace) = trace {
        record_trace(&ingest.traces, trace, &source_name, &outcome);
    }
    match outcome {
        Ok(Handled::Stored {
            response,
            accepted,
            event_id,
            ..
        }) => {
            let dup = matches!(accepted, Accepted::Duplicate(_));
            tracing::info!(
                source = %source_name,
                entry_id = %accepted.id(),
                event_id = event_id.as_deref().unwrap_or(""),
                outcome = if dup { "duplicate" } else { "accepted" },
                latency_us,
                "ingest"
            );
            response
        }
        Ok(Handled::Handshake(response)) => {
            tracing::info!(source = %source_name, outcome = "handshake", latency_us, "ingest");
            response
        }
        Err(e) => {
            if matches!(e, ApiError::Unverified(_)) {
                ingest.unverified.bump(&source_name);
            }
            // A refused signature is logged with its reason (the metric's `reason`).
            let outcome = match &e {
                ApiError::Unverified(reason) => reason.label(),
                other => other.outcome().label(),
            };
            // Repeats of one kind are counted, not each logged (`telemetry::throttle`):
            // a full disk or an attack fails every request the same way. (A source
            // name that is not configured came from the request: it is not a key.)
            let known = if ingest.sources.load().contains_key(&source_name) {
                source_name.as_str()
            } else {
                "_unknown"
            };
            match &e {
                // Logged once per burst by the limit itself.
                ApiError::RateLimited { .. } => {}
                ApiError::NotStored(cause) => {
                    const MSG: &str = "ingest: store write failed, answered 503";
                    if telemetry::throttle::hit(MSG, &format!("{known} {}", cause.kind())) {
                        tracing::error!(
                            source = %source_name, outcome, error = %cause, latency_us, "{MSG}"
                        );
                    }
                }
                _ => {
                    const MSG: &str = "ingest refused";
                    if telemetry::throttle::hit(MSG, &format!("{known} {outcome}")) {
                        tracing::warn!(source = %source_name, outcome, latency_us, "{MSG}");
                    }
                }
            }
            e.into_response()
        }
    }
}

/// `GET /ingest/{source}`: the provider's endpoint check, when its provider sends
/// one as a GET ([`handshake`]); 405 otherwise, as for any method but POST.
async fn endpoint_check(
    State(ingest): State<Arc<IngestState>>,
    Path(source_name): Path<String>,
    req: Request<Body>,
) -> Response {
    let Some(source) = ingest.sources.load().get(&source_name).cloned() else {
        return ApiError::MethodNotAllowed.into_response();
    };
    let address = req
        .extensions()
        .get::<crate::serve::Peer>()
        .map(|p| ingest.client_ip.address(p.addr.ip(), req.headers()));
    let outcome = match &source.allowlist {
        Some(list) if !address.is_some_and(|a| list.allows(a)) => Err(ApiError::IpNotAllowed),
        _ => handshake::answer(&ingest, &source, &req),
    };
    match outcome {
        Ok(response) => {
            source.metrics.handshake.increment(1);
            tracing::info!(source = %source_name, outcome = "handshake", method = "GET", "ingest");
            response
        }
        Err(ApiError::MethodNotAllowed) => ApiError::MethodNotAllowed.into_response(),
        Err(e) => {
            metrics::counter!("hookgate_ingest_requests_total", "source" => source_name.clone(), "outcome" => e.outcome().label())
                .increment(1);
            let outcome = match &e {
                ApiError::Unverified(reason) => {
                    metrics::counter!("hookgate_ingest_unverified_total", "source" => source_name.clone(), "reason" => reason.label())
                        .increment(1);
                    reason.label()
                }
                other => other.outcome().label(),
            };
            const MSG: &str = "ingest: endpoint check refused";
            if telemetry::throttle::hit(MSG, &format!("{source_name} {outcome}")) {
                tracing::warn!(source = %source_name, outcome, method = "GET", "{MSG}");
            }
            e.into_response()
        }
    }
}

/// What a request came to, for its metrics and its log line.
enum Handled {
    /// A provider's handshake, answered without storing anything.
    Handshake(Response),
    /// A webhook the store took (new) or already had (duplicate).
    Stored {
        response: Response,
        accepted: Accepted,
        /// The provider's event id, when it sent one.
        event_id: Option<String>,
        event_type: Option<String>,
    },
}

/// Record a request's spans (see `telemetry::traces`).
fn record_trace(
    traces: &Traces,
    trace: IngestTrace,
    source: &str,
    outcome: &Result<Handled, ApiError>,
) {
    let mut end = IngestEnd {
        source,
        outcome: "accepted",
        status: 200,
        entry_id: None,
        duplicate: false,
        event_id: None,
        event_type: None,
    };
    match outcome {
        Ok(Handled::Stored {
            accepted,
            event_id,
            event_type,
            ..
        }) => {
            end.duplicate = matches!(accepted, Accepted::Duplicate(_));
            if end.duplicate {
                end.outcome = "duplicate";
            }
            end.entry_id = Some(accepted.id());
            end.event_id = event_id.as_deref();
            end.event_type = event_type.as_deref();
        }
        Ok(Handled::Handshake(_)) => end.outcome = "handshake",
        Err(e) => {
            end.status = e.status().as_u16();
            end.outcome = match e {
                ApiError::Unverified(reason) => reason.label(),
                other => other.outcome().label(),
            };
        }
    }
    traces.ingest_end(trace, end);
}

/// The answer to a stored (or already stored) webhook.
#[derive(serde::Serialize)]
struct Ack<'a> {
    id: &'a str,
    duplicate: bool,
}

/// Refuse from the headers alone: a body over the limit (413), no signature header
/// where the provider sends one (401).
fn refuse_early(
    ingest: &IngestState,
    source: &Source,
    headers: &HeaderMap,
    declared: Option<u64>,
) -> Result<(), ApiError> {
    if declared.is_some_and(|len| len > ingest.max_body_bytes as u64) {
        return Err(ApiError::TooLarge {
            limit: ingest.max_body_bytes,
        });
    }
    let spec = &source.verifier.spec;
    if spec.signature_header().is_some()
        && !hook_secret::is_handshake(source, headers)
        && !spec
            .signature_headers()
            .any(|name| headers.contains_key(name))
    {
        return Err(ApiError::Unverified(VerifyError::MissingSignature));
    }
    Ok(())
}

/// For a source whose provider signs with a fetched key (a certificate's, a key an
/// API gives by id): that key and the name it is kept under, once the request's
/// unsigned claims could verify at `now` (unix seconds) and the URL it names is one
/// the spec allows; fetched on the budgets of `asker`. `None` for every other
/// scheme.
async fn certified_key(
    ingest: &IngestState,
    source: &Source,
    head: Head<'_>,
    url: Option<&str>,
    body: &[u8],
    now: i64,
    asker: crate::provider::certificate::Asker<'_>,
) -> Result<Option<(crate::provider::Key, KeyName)>, ApiError> {
    if !source.verifier.fetches_keys() {
        return Ok(None);
    }
    let req = verify::Request {
        method: head.method.as_str(),
        path: head.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"),
        url,
        headers: head.headers,
        body,
    };
    // Nothing is fetched for a request that would fail whatever the key.
    source.verifier.precheck(req, now)?;
    let asked = match source.verifier.key_request(req) {
        None => return Ok(None),
        Some(Ok(asked)) => asked,
        Some(Err(_)) => return Err(ApiError::Unverified(VerifyError::CertificateUrl)),
    };
    match ingest.fetched_keys.key_for(&asked, asker).await {
        Ok(key) => Ok(Some(key)),
        Err(e) => Err(no_key(e)),
    }
}

/// The answer to a request whose signing key could not be had: 401 when the
/// request named one it may not, 503 (retry) when it could not be fetched now.
fn no_key(e: crate::provider::certificate::FetchedKeyError) -> ApiError {
    use crate::provider::certificate::FetchedKeyError;
    match e {
        FetchedKeyError::Refused => ApiError::Unverified(VerifyError::CertificateUrl),
        FetchedKeyError::Invalid(_) => ApiError::Unverified(VerifyError::CertificateInvalid),
        FetchedKeyError::Unavailable(cause) => ApiError::CertificateUnavailable(cause),
    }
}

/// Verify a request and decide what to do with it: answer a handshake, or store an
/// entry (with its dedupe key). Synchronous, so that it can run on the blocking pool.
fn decide(
    source: &Source,
    head: Head<'_>,
    url: Option<&str>,
    body: &Bytes,
    now_ms: i64,
    certified: Option<&crate::provider::Key>,
    keys: Option<&[crate::provider::Key]>,
) -> Result<Decision, VerifyError> {
    let path = head.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let req = verify::Request {
        method: head.method.as_str(),
        path,
        url,
        headers: head.headers,
        body,
    };
    let now = now_ms.div_euclid(1000);
    let verified = match (certified, keys) {
        (Some(key), _) => source.verifier.verify_certified(req, Some(now), key)?,
        (None, Some(keys)) => source.verifier.verify_with(keys, req, now)?,
        (None, None) => source.verifier.verify(req, now)?,
    };
    if let Some(reply) = verified.handshake() {
        return Ok(Decision::Handshake(reply));
    }
    let identity = verified.identity();
    let event_type = verified.event_type();
    let headers = capture_headers(&source.headers, head.headers);
    let routes = matching_routes(
        &source.routes,
        &Subject {
            event_type: event_type.as_deref(),
            body,
            headers: &headers,
        },
    );
    // Ordered routes: each entry's key (one without a key is delivered unordered).
    let ordering = source
        .routes
        .iter()
        .filter_map(|r| {
            let o = r.order.as_ref()?;
            if !routes.contains(&r.name) {
                return None;
            }
            Some(RouteOrder {
                route: r.name.clone(),
                key: order_key(verified.first_value(&o.by)?),
                block: o.block,
            })
        })
        .collect();
    Ok(Decision::Store(Box::new(NewEntry {
        id: uuid::Uuid::now_v7().to_string(),
        source: source.name.clone(),
        event_type,
        event_id: identity.event_id,
        dedupe_key: identity.dedupe_key,
        dedupe_ttl: source.dedupe_ttl,
        received_at: now_ms,
        headers,
        body: body.clone(),
        routes,
        ordering,
        index: crate::store::search::extract(&source.index, body),
    })))
}

/// The parts of a request's head verification reads.
#[derive(Clone, Copy)]
struct Head<'a> {
    method: &'a http::Method,
    uri: &'a http::Uri,
    headers: &'a HeaderMap,
}

/// Why a refusal goes to the rejection log: the refused signature's reason, or the
/// outcome. `None` for what is not a refusal of the request (the store failed).
fn rejection_reason(e: &ApiError) -> Option<&'static str> {
    match e {
        ApiError::Unverified(reason) => Some(reason.label()),
        ApiError::UnknownSource(_)
        | ApiError::TooLarge { .. }
        | ApiError::BodyTimeout
        | ApiError::BodyRead
        | ApiError::Busy
        | ApiError::RateLimited { .. }
        | ApiError::IpNotAllowed => Some(e.outcome().label()),
        _ => None,
    }
}

/// Handle a request, and note it in the rejection log when it is refused.
async fn handle(
    ingest: &IngestState,
    source_name: &str,
    req: Request<Body>,
    trace: Option<&mut IngestTrace>,
) -> Result<Handled, ApiError> {
    let declared = body::declared_length(req.headers());
    let peer = req.extensions().get::<crate::serve::Peer>();
    let client = peer.map(|p| p.client);
    // The client's own address: behind a trusted proxy, the one it forwarded.
    let address = peer.map(|p| ingest.client_ip.address(p.addr.ip(), req.headers()));
    let source = ingest.sources.load().get(source_name).cloned();
    let (parts, body) = req.into_parts();
    let mut read = None;
    let result = match &source {
        Some(source) => {
            if let Some(list) = &source.allowlist
                && !address.is_some_and(|a| list.allows(a))
            {
                body::drain(body, declared);
                Err(ApiError::IpNotAllowed)
            } else {
                let caller = Caller { client, address };
                handle_source(
                    ingest, source, &parts, body, declared, caller, &mut read, trace,
                )
                .await
            }
        }
        None => Err(ApiError::UnknownSource(source_name.to_string())),
    };
    if let Err(e) = &result
        && let Some(reason) = rejection_reason(e)
    {
        ingest.rejections.note(rejections::Refused {
            source: source_name,
            policy: source.as_ref().map(|s| &s.headers),
            keep_body: source.as_ref().is_some_and(|s| s.keep_rejected_bodies),
            reason,
            status: e.status().as_u16(),
            client: address.or(client),
            headers: &parts.headers,
            declared,
            body: read.as_deref(),
            at: ingest.clock.now_ms(),
        });
    }
    result
}

/// Who sent a request.
#[derive(Debug, Clone, Copy)]
struct Caller {
    /// The client its connection counts as (`serve::Peer::client`): the key of the
    /// per-connection bounds.
    client: Option<std::net::IpAddr>,
    /// Its own address: behind trusted proxies, the one they forwarded.
    address: Option<std::net::IpAddr>,
}

/// Handle a request to a configured source; `read` gets the body once it is read,
/// `trace` (when traces are on) the time of each phase.
#[allow(clippy::too_many_arguments)]
async fn handle_source(
    ingest: &IngestState,
    source: &Arc<Source>,
    parts: &http::request::Parts,
    body: Body,
    declared: Option<u64>,
    caller: Caller,
    read: &mut Option<Bytes>,
    mut trace: Option<&mut IngestTrace>,
) -> Result<Handled, ApiError> {
    let Caller { client, address } = caller;
    let phase_start = trace.is_some().then(Instant::now);
    let mut mark = |phase: IngestPhase, since: Option<Instant>| {
        if let (Some(t), Some(since)) = (trace.as_deref_mut(), since) {
            t.phase(phase, since);
        }
    };
    // What the headers alone decide, before a byte of the body is buffered.
    if let Err(e) = refuse_early(ingest, source, &parts.headers, declared) {
        body::drain(body, declared);
        return Err(e);
    }
    // The client a per-client budget charges: an IPv4 address, an IPv6 prefix.
    let budget_client = address
        .or(client)
        .map(|a| crate::serve::client_of(a, ingest.client_ipv6_prefix));
    if let Some(limit) = &source.request_limit
        && let Err(e) = limit.refuse_early(budget_client, ingest.clock.now_ms())
    {
        body::drain(body, declared);
        return Err(e);
    }
    // A request that fails verification is charged to its client's budget, not to
    // the source's limit (`limit`).
    let charge_unverified = |e: ApiError| {
        if let (ApiError::Unverified(_), Some(limit)) = (&e, &source.request_limit) {
            limit.unverified(budget_client, ingest.clock.now_ms());
        }
        e
    };
    // The declared body's bytes, from the budget (503 when there is no room, even
    // once the source's slowest upload is shed).
    let mut reservation = ingest.body_budget.none(&source.body_share, budget_client);
    if let Some(len) = declared
        && let Err(e) = ingest
            .body_budget
            // Within max_body_bytes, which is a usize.
            .reserve(
                &source.body_share,
                &mut reservation,
                usize::try_from(len).unwrap_or(usize::MAX),
                None,
            )
            .await
    {
        body::drain(body, declared);
        return Err(e);
    }
    let got = match body::read(
        body,
        declared,
        ingest.max_body_bytes,
        ingest.body_read_timeout,
        &ingest.body_budget,
        &source.body_share,
        reservation,
    )
    .await
    {
        Ok(got) => got,
        Err(e) => {
            if let Some(rest) = e.rest {
                body::drain(rest, None);
            }
            mark(IngestPhase::ReadBody, phase_start);
            return Err(e.error);
        }
    };
    mark(IngestPhase::ReadBody, phase_start);
    if let Some(answer) = handshake::graph_validation(source, parts.uri.query(), &got.bytes) {
        return answer.map(Handled::Handshake);
    }
    if hook_secret::is_handshake(source, &parts.headers) {
        *read = Some(got.bytes.clone());
        return hook_secret::answer(ingest, source, &parts.headers, parts.uri.query(), client)
            .await
            .map(Handled::Handshake);
    }
    let verify_start = phase_start.map(|_| Instant::now());
    let now_ms = ingest.clock.now_ms();
    // The reservation is held until the store has the entry (it shares the buffer).
    let body::ReadBody {
        bytes: body,
        reservation: _reservation,
    } = got;
    *read = Some(body.clone());
    let url = source
        .public_url
        .as_deref()
        .map(|base| crate::provider::request_url(base, parts.uri.query()));
    let head = Head {
        method: &parts.method,
        uri: &parts.uri,
        headers: &parts.headers,
    };
    // A certificate scheme: the key of the certificate the request names, its URL
    // checked first (see `provider::certificate`).
    let asker = crate::provider::certificate::Asker {
        source: &source.name,
        client: budget_client,
    };
    let fetched = certified_key(
        ingest,
        source,
        head,
        url.as_deref(),
        &body,
        now_ms.div_euclid(1000),
        asker,
    )
    .await
    .map_err(charge_unverified)?;
    let (certified, key_name) = fetched.unzip();
    // A source whose secrets arrive in handshakes: its keys as the store has them
    // (read again when stale), and once more when the request matches none of them
    // (another gateway may have taken a handshake since).
    let keys = match &source.established {
        Some(e) => {
            e.refresh(
                ingest.store.as_ref(),
                ingest.store_timeout,
                Refresh::IfStale,
            )
            .await
            .map_err(ApiError::NotStored)?;
            Some(e.keys())
        }
        None => None,
    };
    let first = verify_and_decide(
        ingest,
        source,
        parts,
        url.clone(),
        body.clone(),
        now_ms,
        certified.clone(),
        keys,
    )
    .await;
    let decision = match (&source.established, first) {
        (Some(e), Err(ApiError::Unverified(VerifyError::Mismatch)))
            if e.refresh(
                ingest.store.as_ref(),
                ingest.store_timeout,
                Refresh::AfterMismatch,
            )
            .await
            .unwrap_or(false) =>
        {
            verify_and_decide(
                ingest,
                source,
                parts,
                url,
                body,
                now_ms,
                certified,
                Some(e.keys()),
            )
            .await
        }
        (_, first) => first,
    };
    mark(IngestPhase::Verify, verify_start);
    let decision = decision.map_err(charge_unverified)?;
    if let Some(name) = &key_name {
        ingest.fetched_keys.verified(name);
    }
    // Verified: now the request takes a slot of the source's limit.
    if let Some(limit) = &source.request_limit {
        limit
            .admit(
                ingest.store.as_ref(),
                &source.name,
                ingest.clock.now_ms(),
                ingest.store_timeout,
            )
            .await?;
    }
    answer_decision(ingest, source, decision, phase_start.is_some(), &mut mark).await
}

/// Verify a request and decide what to do with it ([`decide`]), on the blocking
/// pool when its body is large.
#[allow(clippy::too_many_arguments)]
async fn verify_and_decide(
    ingest: &IngestState,
    source: &Arc<Source>,
    parts: &http::request::Parts,
    url: Option<String>,
    body: Bytes,
    now_ms: i64,
    certified: Option<crate::provider::Key>,
    keys: Option<Arc<Vec<crate::provider::Key>>>,
) -> Result<Decision, ApiError> {
    let head = Head {
        method: &parts.method,
        uri: &parts.uri,
        headers: &parts.headers,
    };
    if body.len() > OFFLOAD_BODY_BYTES {
        // Hashing a large body takes long enough to stall the other requests of an
        // async worker: do it on the blocking pool, a bounded number at a time.
        let _slot = ingest
            .verify_slots
            .acquire()
            .await
            .map_err(|_| ApiError::Busy)?;
        let source = source.clone();
        let (method, uri, headers) = (
            parts.method.clone(),
            parts.uri.clone(),
            parts.headers.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let head = Head {
                method: &method,
                uri: &uri,
                headers: &headers,
            };
            decide(
                &source,
                head,
                url.as_deref(),
                &body,
                now_ms,
                certified.as_ref(),
                keys.as_deref().map(Vec::as_slice),
            )
        })
        .await
        .map_err(|_| ApiError::Busy)
        .and_then(|d| d.map_err(ApiError::from))
    } else {
        decide(
            source,
            head,
            url.as_deref(),
            &body,
            now_ms,
            certified.as_ref(),
            keys.as_deref().map(Vec::as_slice),
        )
        .map_err(ApiError::from)
    }
}

/// Answer what [`decide`] decided: a handshake's reply, or the entry stored (within
/// `store.timeout`); `mark` takes the store phase when the request is traced
/// (`timed`).
async fn answer_decision(
    ingest: &IngestState,
    source: &Source,
    decision: Decision,
    timed: bool,
    mark: &mut impl FnMut(IngestPhase, Option<Instant>),
) -> Result<Handled, ApiError> {
    match decision {
        Decision::Handshake(HandshakeReply::Text(text)) => Ok(Handled::Handshake(
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                text,
            )
                .into_response(),
        )),
        Decision::Handshake(HandshakeReply::Json(value)) => Ok(Handled::Handshake(
            (StatusCode::OK, Json(value)).into_response(),
        )),
        Decision::Store(entry) => {
            // AWS SNS, when the source confirms subscriptions: visit SubscribeURL
            // before the confirmation is stored (`subscription`).
            if source.confirm_subscriptions
                && entry.event_type.as_deref() == Some(subscription::CONFIRMATION)
                && let Some(rule) = &source.verifier.spec.certificate
            {
                subscription::confirm(
                    ingest.fetched_keys.client(),
                    rule,
                    &source.name,
                    &entry.body,
                )
                .await?;
            }
            let event_id = entry.event_id.clone();
            let event_type = entry.event_type.clone();
            let filtered = entry.routes.is_empty();
            let store_start = timed.then(Instant::now);
            // The answer comes within `store.timeout`, whatever the store or the
            // network does: a write still queued then is dropped by the store.
            let storing = ingest.pressure.storing();
            let accepted = tokio::time::timeout(ingest.store_timeout, ingest.store.accept(*entry))
                .await
                .unwrap_or(Err(StoreError::Timeout(ingest.store_timeout)));
            drop(storing);
            mark(IngestPhase::Store, store_start);
            let accepted = match accepted {
                Ok(a) => {
                    ingest.readiness.write_succeeded();
                    a
                }
                Err(e) => {
                    ingest.readiness.write_failed(&e);
                    return Err(ApiError::NotStored(e));
                }
            };
            if filtered && matches!(accepted, Accepted::New(_)) {
                source.metrics.filtered.increment(1);
            }
            let body = Json(Ack {
                id: accepted.id(),
                duplicate: matches!(accepted, Accepted::Duplicate(_)),
            });
            Ok(Handled::Stored {
                response: (StatusCode::OK, body).into_response(),
                accepted,
                event_id,
                event_type,
            })
        }
    }
}

/// Register `hookgate_ingest_requests_total` with a zero series for every configured
/// source and every outcome counted per source, and the unknown source's, so that
/// the first scrape lists them all.
pub fn register_metrics(sources: &[crate::telemetry::SourceRoutes]) {
    use crate::error::{RequestOutcome, UNKNOWN_SOURCE};
    for outcome in RequestOutcome::ALL {
        if !outcome.counted_per_source() {
            continue;
        }
        for s in sources {
            metrics::counter!("hookgate_ingest_requests_total", "source" => s.source.clone(), "outcome" => outcome.label()).increment(0);
        }
    }
    metrics::counter!("hookgate_ingest_requests_total", "source" => UNKNOWN_SOURCE, "outcome" => RequestOutcome::UnknownSource.label()).increment(0);
}
