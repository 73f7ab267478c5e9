//! The ingest endpoint: `POST /ingest/{source}`.
//!
//! Read the raw body (bounded in size and time), verify it against the source's
//! provider spec, answer a handshake if it is one, extract the event id and type,
//! then dedupe and persist through [`Store::accept`]. Only a durable entry gets a 2xx.
//! Ingest never delivers: the forwarder picks entries up from the store.

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
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::error::ApiError;
use crate::provider::Verifier;
use crate::provider::verify::{self, HandshakeReply};
use crate::store::{Accepted, Header, NewEntry, Store};

/// A configured source, ready to verify requests.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub verifier: Verifier,
    pub dedupe_ttl: Duration,
    /// The URL the provider calls, for providers that sign it.
    pub public_url: Option<String>,
    pub metrics: SourceMetrics,
}

/// A source's ingest metrics for the outcomes every accepted request has, registered
/// once: the hot path bumps a handle instead of building a labelled key and looking
/// it up in the registry on every request. Rarer outcomes use the macros.
#[derive(Debug, Clone)]
pub struct SourceMetrics {
    accepted: metrics::Counter,
    duplicate: metrics::Counter,
    handshake: metrics::Counter,
    ack_seconds: metrics::Histogram,
}

impl SourceMetrics {
    /// Register the handles of `source` with the installed recorder (install it
    /// first: handles taken before are no-ops).
    pub fn new(source: &str) -> Self {
        let requests = |outcome: &'static str| metrics::counter!("hookgate_ingest_requests_total", "source" => source.to_string(), "outcome" => outcome);
        SourceMetrics {
            accepted: requests("accepted"),
            duplicate: requests("duplicate"),
            handshake: requests("handshake"),
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

/// Add the counted verification failures to the store every second until shutdown.
pub async fn flush_unverified(
    counts: Arc<UnverifiedCounts>,
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
        if stop {
            return;
        }
    }
}

/// What the ingest handlers share. Built once by `app`.
pub struct IngestState {
    /// Verification failures not yet added to the store.
    pub unverified: Arc<UnverifiedCounts>,
    pub sources: HashMap<String, Arc<Source>>,
    pub store: Arc<dyn Store>,
    pub max_body_bytes: usize,
    pub body_read_timeout: Duration,
    /// Unix seconds; a function so tests can move time.
    pub clock: fn() -> i64,
}

pub fn router(state: Arc<IngestState>) -> Router {
    Router::new()
        .route(
            "/ingest/{source}",
            post(ingest).fallback(|| async { ApiError::MethodNotAllowed }),
        )
        .fallback(|| async { ApiError::NotFound })
        .with_state(state)
}

/// Unix seconds from the system clock.
pub fn system_clock() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Hop-by-hop and framing headers are not part of what the provider sent us to keep.
fn keep_header(name: &header::HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "proxy-authorization"
            | "proxy-connection"
            | "content-length"
            | "expect"
    )
}

fn capture_headers(headers: &HeaderMap) -> Vec<Header> {
    headers
        .iter()
        .filter(|(n, _)| keep_header(n))
        .map(|(n, v)| Header {
            name: n.as_str().to_string(),
            value: v.as_bytes().to_vec(),
        })
        .collect()
}

async fn read_body(body: Body, limit: usize, timeout: Duration) -> Result<Bytes, ApiError> {
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Err(_) => Err(ApiError::BodyTimeout),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ApiError::TooLarge { limit })
        }
        Ok(Err(_)) => Err(ApiError::BodyRead),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

/// What verification decided, with everything borrowed from the request released.
enum Decision {
    Handshake(HandshakeReply),
    Store(Box<NewEntry>),
}

async fn ingest(
    State(st): State<Arc<IngestState>>,
    Path(source_name): Path<String>,
    req: Request<Body>,
) -> Response {
    let started = Instant::now();
    let outcome = handle(&st, &source_name, req).await;
    let elapsed = started.elapsed();
    let latency_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    let outcome_label = match &outcome {
        Ok((_, Some(Accepted::Duplicate(_)), _)) => "duplicate",
        Ok((_, Some(Accepted::New(_)), _)) => "accepted",
        Ok((_, None, _)) => "handshake",
        Err(e) => e.outcome(),
    };
    // The name comes from the URL: only configured names are logged verbatim, and
    // metrics label every unknown name as one value.
    let source_name = match st.sources.get(&source_name) {
        Some(source) => {
            let m = &source.metrics;
            match outcome_label {
                "accepted" | "duplicate" => {
                    let counter = if outcome_label == "accepted" {
                        &m.accepted
                    } else {
                        &m.duplicate
                    };
                    counter.increment(1);
                    m.ack_seconds.record(elapsed.as_secs_f64());
                }
                "handshake" => m.handshake.increment(1),
                _ => {
                    metrics::counter!("hookgate_ingest_requests_total", "source" => source_name.clone(), "outcome" => outcome_label)
                        .increment(1);
                    if let Err(ApiError::Unverified(reason)) = &outcome {
                        metrics::counter!("hookgate_ingest_unverified_total", "source" => source_name.clone(), "reason" => reason.code())
                            .increment(1);
                    }
                }
            }
            source_name
        }
        None => {
            metrics::counter!("hookgate_ingest_requests_total", "source" => "_unknown", "outcome" => outcome_label)
                .increment(1);
            let escaped: String = source_name.escape_debug().take(64).collect();
            format!("unknown:{escaped}")
        }
    };
    match outcome {
        Ok((resp, Some(accepted), event_id)) => {
            let dup = matches!(accepted, Accepted::Duplicate(_));
            tracing::info!(
                source = %source_name,
                entry_id = %accepted.id(),
                event_id = event_id.as_deref().unwrap_or(""),
                outcome = if dup { "duplicate" } else { "accepted" },
                latency_us,
                "ingest"
            );
            resp
        }
        Ok((resp, None, _)) => {
            tracing::info!(source = %source_name, outcome = "handshake", latency_us, "ingest");
            resp
        }
        Err(e) => {
            if matches!(e, ApiError::Unverified(_)) {
                st.unverified.bump(&source_name);
            }
            match &e {
                ApiError::Store(cause) => tracing::error!(
                    source = %source_name, outcome = e.code(), error = %cause, latency_us,
                    "ingest: store write failed, answered 503"
                ),
                _ => tracing::warn!(
                    source = %source_name, outcome = e.code(), latency_us, "ingest refused"
                ),
            }
            e.into_response()
        }
    }
}

type Handled = (Response, Option<Accepted>, Option<String>);

/// The answer to a stored (or already stored) webhook.
#[derive(serde::Serialize)]
struct Ack<'a> {
    id: &'a str,
    duplicate: bool,
}

async fn handle(
    st: &IngestState,
    source_name: &str,
    req: Request<Body>,
) -> Result<Handled, ApiError> {
    let source = st
        .sources
        .get(source_name)
        .cloned()
        .ok_or_else(|| ApiError::UnknownSource(source_name.to_string()))?;
    let (parts, body) = req.into_parts();
    if let Some(len) = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > st.max_body_bytes as u64
    {
        return Err(ApiError::TooLarge {
            limit: st.max_body_bytes,
        });
    }
    let body = read_body(body, st.max_body_bytes, st.body_read_timeout).await?;
    let now = (st.clock)();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let url = source
        .public_url
        .as_deref()
        .map(|base| crate::provider::request_url(base, parts.uri.query()));

    // Verification borrows the request; it ends before the first await below.
    let decision = {
        let verified = source.verifier.verify(
            verify::Request {
                method: parts.method.as_str(),
                path,
                url: url.as_deref(),
                headers: &parts.headers,
                body: &body,
            },
            now,
        )?;
        match verified.handshake() {
            Some(reply) => Decision::Handshake(reply),
            None => {
                let event_id = verified.event_id();
                let dedupe_key = match &event_id {
                    Some(id) if source.verifier.spec.event_id_is_signed() => format!("id:{id}"),
                    // The id is not signed (GitHub's X-GitHub-Delivery, Shopify's
                    // X-Shopify-Event-Id): bind it to the signed body, so a captured
                    // request replayed under someone else's id cannot pre-empt that id.
                    // A genuine redelivery has the same id and the same body.
                    Some(id) => format!("id:{id}:{}", verified.content_digest()),
                    None => verified.content_digest(),
                };
                Decision::Store(Box::new(NewEntry {
                    id: uuid::Uuid::now_v7().to_string(),
                    source: source.name.clone(),
                    event_type: verified.event_type(),
                    event_id,
                    dedupe_key,
                    dedupe_ttl: source.dedupe_ttl,
                    received_at: crate::store::now_ms(),
                    headers: capture_headers(&parts.headers),
                    body: body.clone(),
                }))
            }
        }
    };
    match decision {
        Decision::Handshake(HandshakeReply::Text(text)) => Ok((
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                text,
            )
                .into_response(),
            None,
            None,
        )),
        Decision::Handshake(HandshakeReply::Json(value)) => {
            Ok(((StatusCode::OK, Json(value)).into_response(), None, None))
        }
        Decision::Store(entry) => {
            let event_id = entry.event_id.clone();
            let accepted = st.store.accept(*entry).await?;
            let body = Json(Ack {
                id: accepted.id(),
                duplicate: matches!(accepted, Accepted::Duplicate(_)),
            });
            Ok((
                (StatusCode::OK, body).into_response(),
                Some(accepted),
                event_id,
            ))
        }
    }
}
