//! Fake provider APIs on loopback, serving the JSON shapes the providers document,
//! for reconciliation's tests: GitHub's hook deliveries (listed with a `link`
//! cursor, redelivered for real: the fake signs and POSTs to the gateway as GitHub
//! does), Stripe's events and webhook endpoint, Square's events search and webhook
//! subscription. Each records what it was asked, and answers a scripted failure
//! first when the test queues one.

#![allow(dead_code)]

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::support::{http, now_secs, sign_headers};

/// A failure the next call answers.
#[derive(Debug, Clone)]
pub struct Failure {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    /// Wait this long before answering.
    pub delay: Duration,
}

impl Failure {
    pub fn status(status: u16) -> Failure {
        Failure {
            status,
            headers: Vec::new(),
            delay: Duration::ZERO,
        }
    }
}

/// What every fake shares: the failures queued, the calls seen.
#[derive(Default)]
pub struct Calls {
    failures: Mutex<VecDeque<Failure>>,
    /// Method and path with query of every call.
    pub seen: Mutex<Vec<String>>,
    /// Every `Authorization` header.
    pub auth: Mutex<Vec<String>>,
}

impl Calls {
    pub fn fail_next(&self, f: Failure) {
        self.failures.lock().unwrap().push_back(f);
    }

    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    /// Record a call; the failure to answer it with, if one is queued.
    async fn take(&self, what: String, headers: &HeaderMap) -> Option<Response> {
        self.seen.lock().unwrap().push(what);
        if let Some(a) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
            self.auth.lock().unwrap().push(a.to_string());
        }
        let f = self.failures.lock().unwrap().pop_front()?;
        tokio::time::sleep(f.delay).await;
        let mut resp = (
            StatusCode::from_u16(f.status).unwrap(),
            r#"{"message":"scripted failure"}"#,
        )
            .into_response();
        for (n, v) in f.headers {
            resp.headers_mut().insert(n, v.parse().unwrap());
        }
        Some(resp)
    }
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    url
}

fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

// ---------------------------------------------------------------------- GitHub

/// How the fake GitHub sends a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Send {
    /// Signed with the hook's secret, to the gateway.
    Signed,
    /// Signed with another secret (a rotation not made on both sides yet).
    WrongSecret,
    /// Nowhere: the gateway could not be reached (a deploy, an outage): status 0.
    Nowhere,
}

#[derive(Debug, Clone)]
pub struct FakeDelivery {
    pub id: i64,
    pub guid: String,
    pub delivered_at: i64,
    pub status_code: u16,
    pub redelivery: bool,
    pub body: Vec<u8>,
}

pub struct GitHubState {
    pub calls: Calls,
    pub deliveries: Mutex<Vec<FakeDelivery>>,
    next_id: Mutex<i64>,
    secret: String,
    /// Where deliveries go: the gateway's `…/ingest/{source}`.
    pub target: Mutex<String>,
    /// GUIDs whose redeliveries fail too.
    pub failing: Mutex<HashSet<String>>,
    /// The path of the hook's deliveries.
    path: String,
    token: String,
    /// The App's public key (PEM): its JWT is checked with it.
    app_public_key: Option<String>,
    pub app_id: String,
}

pub struct FakeGitHub {
    pub url: String,
    pub state: Arc<GitHubState>,
}

#[derive(serde::Deserialize)]
struct PageQuery {
    #[serde(default)]
    cursor: Option<usize>,
    #[serde(default)]
    per_page: Option<usize>,
}

impl FakeGitHub {
    /// A fake for the repository hook `repos/acme/api/hooks/1`, read with `token`,
    /// signing with `secret`.
    pub async fn start(secret: &str, token: &str) -> FakeGitHub {
        Self::start_with(
            "/repos/acme/api/hooks/1/deliveries",
            secret,
            token,
            None,
            "",
        )
        .await
    }

    /// A fake of a GitHub App's webhook (`/app/hook/deliveries`), whose JWT must
    /// verify under `public_key` (PEM) with `iss` = `app_id`.
    pub async fn start_app(secret: &str, public_key: &str, app_id: &str) -> FakeGitHub {
        Self::start_with(
            "/app/hook/deliveries",
            secret,
            "",
            Some(public_key.to_string()),
            app_id,
        )
        .await
    }

    async fn start_with(
        path: &str,
        secret: &str,
        token: &str,
        app_public_key: Option<String>,
        app_id: &str,
    ) -> FakeGitHub {
        let state = Arc::new(GitHubState {
            calls: Calls::default(),
            deliveries: Mutex::new(Vec::new()),
            next_id: Mutex::new(1000),
            secret: secret.to_string(),
            target: Mutex::new(String::new()),
            failing: Mutex::new(HashSet::new()),
            path: path.to_string(),
            token: token.to_string(),
            app_public_key,
            app_id: app_id.to_string(),
        });
        let router = Router::new()
            .route(path, get(gh_list))
            .route(&format!("{path}/{{id}}/attempts"), post(gh_redeliver))
            .with_state(state.clone());
        FakeGitHub {
            url: serve(router).await,
            state,
        }
    }

    pub fn target(&self, ingest: &str, source: &str) {
        *self.state.target.lock().unwrap() = format!("{ingest}/ingest/{source}");
    }

    /// Send a delivery of `guid` now, as `how` says; its id.
    pub async fn deliver(&self, guid: &str, how: Send) -> i64 {
        self.state.send(guid, how, false).await
    }

    /// A delivery listed `ago` in the past that reached nobody.
    pub fn plant_old(&self, guid: &str, ago: Duration) -> i64 {
        let id = self.state.next_id();
        self.state.deliveries.lock().unwrap().push(FakeDelivery {
            id,
            guid: guid.to_string(),
            delivered_at: now_ms() - ago.as_millis() as i64,
            status_code: 0,
            redelivery: false,
            body: b"{}".to_vec(),
        });
        id
    }

    /// The ids asked for again (in order).
    pub fn asked(&self) -> Vec<i64> {
        self.state
            .calls
            .seen()
            .iter()
            .filter(|c| c.starts_with("POST"))
            .filter_map(|c| c.split('/').rev().nth(1)?.parse().ok())
            .collect()
    }

    /// The GUID of delivery `id`.
    pub fn guid_of(&self, id: i64) -> String {
        self.state
            .deliveries
            .lock()
            .unwrap()
            .iter()
            .find(|d| d.id == id)
            .map(|d| d.guid.clone())
            .unwrap_or_default()
    }

    /// The list calls made.
    pub fn lists(&self) -> usize {
        self.state
            .calls
            .seen()
            .iter()
            .filter(|c| c.starts_with("GET"))
            .count()
    }
}

impl GitHubState {
    fn next_id(&self) -> i64 {
        let mut n = self.next_id.lock().unwrap();
        *n += 1;
        *n
    }

    async fn send(&self, guid: &str, how: Send, redelivery: bool) -> i64 {
        let id = self.next_id();
        let body = format!(
            r#"{{"ref":"refs/heads/main","after":"{guid}","repository":{{"id":7,"full_name":"acme/api"}}}}"#
        )
        .into_bytes();
        let target = self.target.lock().unwrap().clone();
        let status_code = match how {
            Send::Nowhere => 0,
            Send::Signed | Send::WrongSecret => {
                let secret = if how == Send::Signed {
                    self.secret.clone()
                } else {
                    "a secret hookgate does not have".to_string()
                };
                let mut req = http()
                    .post(&target)
                    .header("content-type", "application/json")
                    .header("x-github-delivery", guid)
                    .header("x-github-event", "push")
                    .body(body.clone());
                for (n, v) in sign_headers("github", &secret, &body, now_secs(), guid) {
                    req = req.header(n, v);
                }
                req.send().await.map_or(0, |r| r.status().as_u16())
            }
        };
        self.deliveries.lock().unwrap().push(FakeDelivery {
            id,
            guid: guid.to_string(),
            delivered_at: now_ms(),
            status_code,
            redelivery,
            body,
        });
        id
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(auth) = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|a| a.strip_prefix("Bearer "))
        else {
            return false;
        };
        match &self.app_public_key {
            None => auth == self.token,
            Some(pem) => {
                let Ok(key) = jsonwebtoken::DecodingKey::from_rsa_pem(pem.as_bytes()) else {
                    return false;
                };
                let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
                v.set_issuer(&[self.app_id.as_str()]);
                v.set_required_spec_claims(&["exp", "iat", "iss"]);
                jsonwebtoken::decode::<hookgate::reconcile::AppClaims>(auth, &key, &v).is_ok_and(
                    |t| {
                        let now = now_secs();
                        t.claims.iat <= now - 59 && t.claims.exp <= now + 600
                    },
                )
            }
        }
    }
}

async fn gh_list(
    State(s): State<Arc<GitHubState>>,
    headers: HeaderMap,
    Query(q): Query<PageQuery>,
    uri: axum::http::Uri,
) -> Response {
    if let Some(r) = s.calls.take(format!("GET {uri}"), &headers).await {
        return r;
    }
    if headers
        .get("x-github-api-version")
        .and_then(|v| v.to_str().ok())
        != Some("2022-11-28")
        || !s.authorized(&headers)
    {
        return (StatusCode::UNAUTHORIZED, r#"{"message":"Bad credentials"}"#).into_response();
    }
    let per_page = q.per_page.unwrap_or(30).min(100);
    let from = q.cursor.unwrap_or(0);
    let all: Vec<FakeDelivery> = s.deliveries.lock().unwrap().iter().rev().cloned().collect();
    let page: Vec<serde_json::Value> = all
        .iter()
        .skip(from)
        .take(per_page)
        .map(|d| {
            serde_json::json!({
                "id": d.id,
                "guid": d.guid,
                "delivered_at": rfc3339(d.delivered_at),
                "redelivery": d.redelivery,
                "duration": 0.03,
                "status": if d.status_code == 0 { "failed to connect".to_string() } else { format!("HTTP {}", d.status_code) },
                "status_code": d.status_code,
                "event": "push",
                "action": null,
                "installation_id": null,
                "repository_id": 7
            })
        })
        .collect();
    let mut resp = axum::Json(page).into_response();
    if from + per_page < all.len() {
        let host = headers
            .get("host")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("127.0.0.1");
        let next = format!(
            "<http://{host}{}?per_page={per_page}&cursor={}>; rel=\"next\"",
            s.path,
            from + per_page
        );
        resp.headers_mut().insert("link", next.parse().unwrap());
    }
    resp
}

async fn gh_redeliver(
    State(s): State<Arc<GitHubState>>,
    headers: HeaderMap,
    Path(id): Path<i64>,
    uri: axum::http::Uri,
) -> Response {
    if let Some(r) = s.calls.take(format!("POST {uri}"), &headers).await {
        return r;
    }
    if !s.authorized(&headers) {
        return (StatusCode::UNAUTHORIZED, r#"{"message":"Bad credentials"}"#).into_response();
    }
    let Some(guid) = s
        .deliveries
        .lock()
        .unwrap()
        .iter()
        .find(|d| d.id == id)
        .map(|d| d.guid.clone())
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let how = if s.failing.lock().unwrap().contains(&guid) {
        Send::Nowhere
    } else {
        Send::Signed
    };
    s.send(&guid, how, true).await;
    (StatusCode::ACCEPTED, "{}").into_response()
}

// ---------------------------------------------------------------------- Stripe

pub struct StripeState {
    pub calls: Calls,
    /// Newest first.
    pub events: Mutex<Vec<serde_json::Value>>,
    key: String,
    enabled: Vec<String>,
}

pub struct FakeStripe {
    pub url: String,
    pub state: Arc<StripeState>,
}

impl FakeStripe {
    /// The endpoint `we_1` (test mode) sends `enabled` event types; `key` reads.
    pub async fn start(key: &str, enabled: &[&str]) -> FakeStripe {
        let state = Arc::new(StripeState {
            calls: Calls::default(),
            events: Mutex::new(Vec::new()),
            key: key.to_string(),
            enabled: enabled.iter().map(|s| s.to_string()).collect(),
        });
        let router = Router::new()
            .route("/v1/webhook_endpoints/we_1", get(stripe_endpoint))
            .route("/v1/events", get(stripe_events))
            .with_state(state.clone());
        FakeStripe {
            url: serve(router).await,
            state,
        }
    }

    /// Add an event created `ago`; its JSON, as the API lists it.
    pub fn add(&self, id: &str, kind: &str, livemode: bool, ago: Duration) -> serde_json::Value {
        let created = now_secs() - ago.as_secs() as i64;
        let e = serde_json::json!({
            "id": id,
            "object": "event",
            "api_version": "2024-06-20",
            "created": created,
            "data": {"object": {"id": format!("in_{id}"), "object": "invoice", "amount_paid": 2000}},
            "livemode": livemode,
            "pending_webhooks": 1,
            "request": {"id": null, "idempotency_key": null},
            "type": kind
        });
        let mut events = self.state.events.lock().unwrap();
        events.push(e.clone());
        events.sort_by_key(|e| std::cmp::Reverse(e["created"].as_i64().unwrap_or(0)));
        e
    }
}

async fn stripe_endpoint(
    State(s): State<Arc<StripeState>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    if let Some(r) = s.calls.take(format!("GET {uri}"), &headers).await {
        return r;
    }
    if headers.get("authorization").and_then(|v| v.to_str().ok())
        != Some(&format!("Bearer {}", s.key))
    {
        return (
            StatusCode::UNAUTHORIZED,
            r#"{"error":{"type":"invalid_request_error"}}"#,
        )
            .into_response();
    }
    axum::Json(serde_json::json!({
        "id": "we_1", "object": "webhook_endpoint", "api_version": "2024-06-20",
        "enabled_events": s.enabled, "livemode": false, "status": "enabled",
        "url": "https://hooks.example.com/ingest/stripe"
    }))
    .into_response()
}

async fn stripe_events(
    State(s): State<Arc<StripeState>>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
    uri: axum::http::Uri,
) -> Response {
    if let Some(r) = s.calls.take(format!("GET {uri}"), &headers).await {
        return r;
    }
    if headers.get("authorization").and_then(|v| v.to_str().ok())
        != Some(&format!("Bearer {}", s.key))
    {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let arg = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let limit: usize = arg("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(10)
        .min(100);
    let gte: i64 = arg("created[gte]")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let after = arg("starting_after");
    let events = s.events.lock().unwrap().clone();
    let mut listed = events
        .into_iter()
        .filter(|e| e["created"].as_i64().unwrap_or(0) >= gte);
    let mut rest: Vec<serde_json::Value> = match &after {
        Some(a) => listed
            .by_ref()
            .skip_while(|e| e["id"].as_str() != Some(a))
            .skip(1)
            .collect(),
        None => listed.collect(),
    };
    let has_more = rest.len() > limit;
    rest.truncate(limit);
    axum::Json(serde_json::json!({
        "object": "list", "url": "/v1/events", "has_more": has_more, "data": rest
    }))
    .into_response()
}

// ---------------------------------------------------------------------- Square

pub struct SquareState {
    pub calls: Calls,
    /// Newest first.
    pub events: Mutex<Vec<serde_json::Value>>,
    types: Vec<String>,
}

pub struct FakeSquare {
    pub url: String,
    pub state: Arc<SquareState>,
}

impl FakeSquare {
    pub async fn start(types: &[&str]) -> FakeSquare {
        let state = Arc::new(SquareState {
            calls: Calls::default(),
            events: Mutex::new(Vec::new()),
            types: types.iter().map(|s| s.to_string()).collect(),
        });
        let router = Router::new()
            .route(
                "/v2/webhooks/subscriptions/wbhk_1",
                get(square_subscription),
            )
            .route("/v2/events", post(square_search))
            .with_state(state.clone());
        FakeSquare {
            url: serve(router).await,
            state,
        }
    }

    pub fn add(&self, id: &str, kind: &str, ago: Duration) -> serde_json::Value {
        let created = rfc3339(now_ms() - ago.as_millis() as i64);
        let e = serde_json::json!({
            "merchant_id": "MLEFBHHSJGVHD", "location_id": "L1", "type": kind,
            "event_id": id, "created_at": created,
            "data": {"type": "payment", "id": format!("p_{id}"), "object": {"payment": {"id": format!("p_{id}")}}}
        });
        let mut events = self.state.events.lock().unwrap();
        events.push(e.clone());
        events.sort_by(|a, b| b["created_at"].as_str().cmp(&a["created_at"].as_str()));
        e
    }
}

async fn square_subscription(
    State(s): State<Arc<SquareState>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    if let Some(r) = s.calls.take(format!("GET {uri}"), &headers).await {
        return r;
    }
    axum::Json(serde_json::json!({"subscription": {
        "id": "wbhk_1", "name": "hookgate", "enabled": true, "event_types": s.types,
        "notification_url": "https://hooks.example.com/ingest/square", "api_version": "2025-01-23"
    }}))
    .into_response()
}

async fn square_search(
    State(s): State<Arc<SquareState>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    body: Bytes,
) -> Response {
    if let Some(r) = s.calls.take(format!("POST {uri}"), &headers).await {
        return r;
    }
    let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let start = req["query"]["filter"]["created_at"]["start_at"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let limit = req["limit"].as_u64().unwrap_or(100) as usize;
    let from: usize = req["cursor"]
        .as_str()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let events: Vec<serde_json::Value> = s
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["created_at"].as_str().unwrap_or("") >= start.as_str())
        .cloned()
        .collect();
    let page: Vec<_> = events.iter().skip(from).take(limit).cloned().collect();
    let mut answer = serde_json::json!({"events": page, "metadata": []});
    if from + limit < events.len() {
        answer["cursor"] = serde_json::Value::String((from + limit).to_string());
    }
    axum::Json(answer).into_response()
}
