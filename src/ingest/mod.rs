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
mod entry;
mod handshake;
pub mod hook_secret;
mod keys;
pub mod limit;
mod meters;
pub mod rejections;
mod source;
pub mod subscription;

pub use entry::{fetched_entry, fetched_key};
use keys::certified_key;
pub use meters::{SourceMetrics, UnverifiedCounts, register_metrics};
pub use rejections::flush_refused;
pub use source::{OrderingError, RouteFilter, RouteOrdering, Source};

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
use crate::error::ApiError;
use crate::error::RequestOutcome;
use crate::header_policy::HeaderPolicy;
use crate::provider::verify::{self, HandshakeReply, VerifyError};
use crate::store::{Accepted, Header, NewEntry, Origin, Readiness, Store, StoreError};
use crate::telemetry;
use crate::telemetry::traces::{IngestEnd, IngestPhase, IngestTrace, Traces};
use body::BodyBudget;
use hook_secret::Refresh;

/// Bodies larger than this are verified on the blocking pool.
pub const OFFLOAD_BODY_BYTES: usize = 64 * 1024;

/// The configured sources by name: ingest's part of the route table.
pub type Sources = HashMap<String, Arc<Source>>;

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
    let headers = capture_headers(&source.headers, head.headers);
    Ok(Decision::Store(Box::new(entry::entry_of(
        source,
        &verified,
        headers,
        body,
        now_ms,
        Origin::Received,
    ))))
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
    // The client a per-client budget charges: an IPv4 address, an IPv6 prefix.
    let budget_client = address
        .or(client)
        .map(|a| crate::serve::client_of(a, ingest.client_ipv6_prefix));
    let got = read_body(
        ingest,
        source,
        &parts.headers,
        body,
        declared,
        budget_client,
    )
    .await;
    mark(IngestPhase::ReadBody, phase_start);
    let got = got?;
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
    let decision = verify_request(ingest, source, parts, body, now_ms, budget_client).await;
    mark(IngestPhase::Verify, verify_start);
    // A request that fails verification is charged to its client's budget, not to
    // the source's limit (`limit`).
    if let (Err(ApiError::Unverified(_)), Some(limit)) = (&decision, &source.request_limit) {
        limit.unverified(budget_client, ingest.clock.now_ms());
    }
    let decision = decision?;
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

/// What the headers alone decide (before a byte of the body is buffered), the
/// source's request limit for this client, then the body, read within its budget.
async fn read_body(
    ingest: &IngestState,
    source: &Source,
    headers: &HeaderMap,
    body: Body,
    declared: Option<u64>,
    budget_client: Option<std::net::IpAddr>,
) -> Result<body::ReadBody, ApiError> {
    // What the headers alone decide, before a byte of the body is buffered.
    if let Err(e) = refuse_early(ingest, source, headers, declared) {
        body::drain(body, declared);
        return Err(e);
    }
    if let Some(limit) = &source.request_limit
        && let Err(e) = limit.refuse_early(budget_client, ingest.clock.now_ms())
    {
        body::drain(body, declared);
        return Err(e);
    }
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
    match body::read(
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
        Ok(got) => Ok(got),
        Err(e) => {
            if let Some(rest) = e.rest {
                body::drain(rest, None);
            }
            Err(e.error)
        }
    }
}

/// Verify a request whose body was read: with the key it names fetched first (a
/// fetched-key scheme), or with the keys handshakes established (read again once
/// when the request matches none), and decide what to do with it.
async fn verify_request(
    ingest: &IngestState,
    source: &Arc<Source>,
    parts: &http::request::Parts,
    body: Bytes,
    now_ms: i64,
    budget_client: Option<std::net::IpAddr>,
) -> Result<Decision, ApiError> {
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
    .await?;
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
    if let Some(name) = &key_name {
        ingest.fetched_keys.verified(name);
    }
    decision
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
