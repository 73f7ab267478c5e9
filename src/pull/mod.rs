//! The consumer API of pull routes, on the ingest listener under `/pull/`:
//! `POST /pull/{source}/{route}` (long-poll for deliveries), `…/ack` and `…/nack`,
//! and `GET /pull/openapi.json`, its document.
//!
//! A request is authenticated before anything else is looked at: its bearer token
//! is compared in constant time with the route's consumer token
//! (`pull_token_env`); a wrong or missing one, or a route that is not a pull route,
//! is 401 and nothing is leased. A consumer token is good only here, and no admin
//! token is (the admin listener never reads consumer tokens). Each token may have
//! [`MAX_WAITING_PER_TOKEN`] long polls waiting at once, so one stuck client cannot
//! hold every connection. Providers' source allowlists and request limits do not
//! apply here. What a pull, an ack and a nack do is `forward::pull`'s; this module
//! reads requests and writes answers.
//!
//! A delivery's body is answered as JSON, verbatim, when it is JSON byte for byte,
//! and as base64 otherwise or when the request asks for `"encoding": "base64"`
//! (the destination signature is over the exact bytes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Request, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::forward::Route;
use crate::forward::pull::{Ask, Consumer, PullError, Pulled, Pulls, Settled};

/// The document of this API.
pub const OPENAPI: &str = include_str!("../../pull-openapi.json");

/// Long polls one token may have waiting at once.
pub const MAX_WAITING_PER_TOKEN: usize = 16;

/// The longest a long poll waits.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// The shortest and longest lease a consumer may ask for.
pub const MIN_LEASE: Duration = Duration::from_secs(5);
pub const MAX_LEASE: Duration = Duration::from_secs(600);

/// The most deliveries one pull takes.
pub const MAX_BATCH: usize = 100;

/// The name the route's own consumer token goes by (in `/admin/routes`, in the
/// attempt that says who acknowledged a delivery).
pub const ROUTE_TOKEN: &str = "pull_token";

/// What the consumer API shares.
pub struct PullState {
    pub pulls: Arc<Pulls>,
    /// How a request's client address is read (trusted proxies).
    pub client_ip: crate::serve::forwarded::ClientIp,
    /// Long polls waiting, by token.
    waiting: Mutex<HashMap<String, Arc<AtomicUsize>>>,
}

impl PullState {
    pub fn new(pulls: Arc<Pulls>, client_ip: crate::serve::forwarded::ClientIp) -> PullState {
        PullState {
            pulls,
            client_ip,
            waiting: Mutex::new(HashMap::new()),
        }
    }

    fn waiting(&self, token: &str) -> Arc<AtomicUsize> {
        match self.waiting.lock() {
            Ok(mut w) => w.entry(token.to_string()).or_default().clone(),
            Err(_) => Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// The routes under `/pull/`.
pub fn router(state: Arc<PullState>) -> Router {
    Router::new()
        .route("/pull/openapi.json", get(openapi))
        .route("/pull/{source}/{route}", post(pull))
        .route("/pull/{source}/{route}/ack", post(ack))
        .route("/pull/{source}/{route}/nack", post(nack))
        .with_state(state)
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// A pull request's body (every field optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PullRequest {
    /// 1..=100 (default 10).
    max: Option<usize>,
    /// How long to wait for a first delivery, at most 30 s (default 0 s).
    wait: Option<String>,
    /// How long each delivery is leased, 5 s..10 min (default 30 s).
    lease: Option<String>,
    /// `auto` (default: JSON bodies verbatim) or `base64`.
    encoding: Option<Encoding>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Encoding {
    #[default]
    Auto,
    Base64,
}

#[derive(Debug, Serialize)]
struct PullAnswer {
    deliveries: Vec<Delivery>,
}

/// One delivery as a consumer receives it.
#[derive(Debug, Serialize)]
struct Delivery {
    receipt: String,
    entry_id: String,
    attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_type: Option<String>,
    received_at: String,
    leased_until: String,
    headers: serde_json::Map<String, serde_json::Value>,
    body_encoding: &'static str,
    body: Box<serde_json::value::RawValue>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AckRequest {
    receipts: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NackRequest {
    receipt: String,
    retry_in: Option<String>,
}

#[derive(Debug, Serialize)]
struct SettleAnswer {
    results: Vec<ReceiptResult>,
}

#[derive(Debug, Serialize)]
struct ReceiptResult {
    receipt: String,
    result: &'static str,
}

/// The most receipts one ack takes.
const MAX_RECEIPTS: usize = 1000;

/// Authenticate a request for `route` of `source`: the route (a pull route of the
/// table in force) and the consumer, or 401.
async fn authenticate(
    state: &PullState,
    source: &str,
    route: &str,
    headers: &HeaderMap,
    address: String,
) -> Result<(Arc<Route>, Consumer), ApiError> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let route = match state.pulls.route(source, route).await {
        Ok(r) => r,
        Err(PullError::NotRunning) => return Err(ApiError::NotDelivering),
        // Unknown route or not a pull route: the same answer as a wrong token.
        Err(_) => return Err(ApiError::Unauthorized),
    };
    let Some(expected) = route.config.pull_token() else {
        return Err(ApiError::Unauthorized);
    };
    let good =
        presented.is_some_and(|p| bool::from(p.as_bytes().ct_eq(expected.expose().as_bytes())));
    if !good {
        return Err(ApiError::Unauthorized);
    }
    Ok((
        route,
        Consumer {
            token: ROUTE_TOKEN.to_string(),
            address,
        },
    ))
}

/// A request for `route` of `source`, authenticated (see [`authenticate`]), and
/// its body.
async fn admitted(
    state: &PullState,
    source: &str,
    route: &str,
    req: Request<axum::body::Body>,
) -> Result<(Arc<Route>, Consumer, Bytes), ApiError> {
    let address = address(state, &req);
    let (route, consumer) = authenticate(state, source, route, req.headers(), address).await?;
    Ok((route, consumer, read(req).await?))
}

/// The client address of a request (its peer, or what a trusted proxy says).
fn address<B>(state: &PullState, req: &Request<B>) -> String {
    req.extensions()
        .get::<crate::serve::Peer>()
        .map(|p| {
            state
                .client_ip
                .address(p.addr.ip(), req.headers())
                .to_string()
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// A JSON body (`None` for an empty one), or 400.
fn body<T: serde::de::DeserializeOwned>(bytes: &Bytes) -> Result<Option<T>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(bytes)
        .map(Some)
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))
}

/// A duration within `min..=max`, or 400 naming `field`.
fn duration(
    field: &str,
    text: Option<&str>,
    default: Duration,
    (min, max): (Duration, Duration),
) -> Result<Duration, ApiError> {
    let Some(text) = text else {
        return Ok(default);
    };
    let d = humantime::parse_duration(text)
        .map_err(|_| ApiError::BadRequest(format!("{field}: {text:?} is not a duration")))?;
    if d < min || d > max {
        return Err(ApiError::BadRequest(format!(
            "{field} is between {} and {}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        )));
    }
    Ok(d)
}

fn pull_error(e: PullError) -> ApiError {
    match e {
        PullError::NotRunning => ApiError::NotDelivering,
        PullError::NoRoute => ApiError::Unauthorized,
        PullError::Store(e) => ApiError::NotStored(e),
    }
}

/// Counts a waiting long poll of one token while it lives.
struct WaitSlot(Arc<AtomicUsize>);

impl Drop for WaitSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn pull(
    State(state): State<Arc<PullState>>,
    Path((source, route)): Path<(String, String)>,
    req: Request<axum::body::Body>,
) -> Result<Response, ApiError> {
    let (route, consumer, bytes) = admitted(&state, &source, &route, req).await?;
    let ask: PullRequest = body(&bytes)?.unwrap_or_default();
    let max = ask.max.unwrap_or(10);
    if !(1..=MAX_BATCH).contains(&max) {
        return Err(ApiError::BadRequest(format!(
            "max is between 1 and {MAX_BATCH}"
        )));
    }
    let wait = duration(
        "wait",
        ask.wait.as_deref(),
        Duration::ZERO,
        (Duration::ZERO, MAX_WAIT),
    )?;
    let lease = duration(
        "lease",
        ask.lease.as_deref(),
        Duration::from_secs(30),
        (MIN_LEASE, MAX_LEASE),
    )?;
    let encoding = ask.encoding.unwrap_or_default();
    // A waiting slot of the token, for as long as this request may wait.
    let _slot = if wait.is_zero() {
        None
    } else {
        // A route token is its route's: its polls are counted per route.
        let counter = state.waiting(&format!(
            "{}/{}/{}",
            route.source, route.name, consumer.token
        ));
        if counter.fetch_add(1, Ordering::AcqRel) >= MAX_WAITING_PER_TOKEN {
            counter.fetch_sub(1, Ordering::AcqRel);
            return Err(ApiError::TooManyWaiting);
        }
        Some(WaitSlot(counter))
    };
    let got = state
        .pulls
        .pull(
            &route,
            Ask {
                max,
                lease,
                consumer,
            },
            wait,
        )
        .await
        .map_err(pull_error)?;
    let deliveries = got.into_iter().map(|p| shown(p, encoding)).collect();
    Ok(Json(PullAnswer { deliveries }).into_response())
}

async fn ack(
    State(state): State<Arc<PullState>>,
    Path((source, route)): Path<(String, String)>,
    req: Request<axum::body::Body>,
) -> Result<Response, ApiError> {
    let (route, consumer, bytes) = admitted(&state, &source, &route, req).await?;
    let Some(AckRequest { receipts }) = body(&bytes)? else {
        return Err(ApiError::BadRequest(
            "a JSON body {\"receipts\": [...]} is required".into(),
        ));
    };
    if receipts.is_empty() || receipts.len() > MAX_RECEIPTS {
        return Err(ApiError::BadRequest(format!(
            "receipts holds 1 to {MAX_RECEIPTS} receipts"
        )));
    }
    let settled = state
        .pulls
        .ack(&route, &receipts, &consumer)
        .await
        .map_err(pull_error)?;
    Ok(settle_answer(receipts.into_iter().zip(settled).collect()))
}

async fn nack(
    State(state): State<Arc<PullState>>,
    Path((source, route)): Path<(String, String)>,
    req: Request<axum::body::Body>,
) -> Result<Response, ApiError> {
    let (route, consumer, bytes) = admitted(&state, &source, &route, req).await?;
    let Some(NackRequest { receipt, retry_in }) = body(&bytes)? else {
        return Err(ApiError::BadRequest(
            "a JSON body {\"receipt\": \"...\"} is required".into(),
        ));
    };
    let retry_in = match retry_in.as_deref() {
        None => None,
        Some(t) => Some(duration(
            "retry_in",
            Some(t),
            Duration::ZERO,
            (Duration::ZERO, Duration::from_secs(7 * 24 * 3600)),
        )?),
    };
    let settled = state
        .pulls
        .nack(&route, &receipt, retry_in, &consumer)
        .await
        .map_err(pull_error)?;
    Ok(settle_answer(vec![(receipt, settled)]))
}

/// 200 when every receipt took effect; 409 when one expired or is unknown (the
/// delivery was or will be handed out again); 503 when the store did not answer.
fn settle_answer(results: Vec<(String, Settled)>) -> Response {
    let status = if results.iter().any(|(_, s)| *s == Settled::Unavailable) {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    } else if results
        .iter()
        .any(|(_, s)| matches!(s, Settled::Expired | Settled::Unknown))
    {
        axum::http::StatusCode::CONFLICT
    } else {
        axum::http::StatusCode::OK
    };
    let results = results
        .into_iter()
        .map(|(receipt, s)| ReceiptResult {
            receipt,
            result: s.as_str(),
        })
        .collect();
    (status, Json(SettleAnswer { results })).into_response()
}

/// Read a request's (small) body: the listener bounds its size and time.
async fn read(req: Request<axum::body::Body>) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(req.into_body(), 64 * 1024)
        .await
        .map_err(|_| ApiError::BodyRead)
}

fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// A pulled delivery as the consumer receives it.
fn shown(p: Pulled, encoding: Encoding) -> Delivery {
    let mut headers = serde_json::Map::new();
    for (name, value) in &p.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.get_mut(name.as_str()) {
            Some(serde_json::Value::String(v)) => {
                v.push_str(", ");
                v.push_str(&value);
            }
            _ => {
                headers.insert(name.as_str().to_string(), serde_json::Value::String(value));
            }
        }
    }
    let verbatim = (encoding == Encoding::Auto)
        .then(|| std::str::from_utf8(&p.body).ok())
        .flatten()
        .and_then(|text| {
            serde_json::from_str::<Box<serde_json::value::RawValue>>(text)
                .ok()
                .filter(|raw| raw.get().len() == text.len())
        });
    let (body_encoding, body) = match verbatim {
        Some(raw) => ("json", raw),
        None => {
            let b64 = base64::engine::general_purpose::STANDARD.encode(&p.body);
            // (A JSON string of base64 characters is always valid JSON.)
            let raw = serde_json::value::to_raw_value(&b64)
                .unwrap_or_else(|_| serde_json::value::RawValue::NULL.to_owned());
            ("base64", raw)
        }
    };
    Delivery {
        receipt: p.receipt,
        entry_id: p.entry_id,
        attempt: p.attempt,
        event_type: p.event_type,
        received_at: rfc3339(p.received_at),
        leased_until: rfc3339(p.leased_until),
        headers,
        body_encoding,
        body,
    }
}
