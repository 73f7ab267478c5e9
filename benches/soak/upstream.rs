//! The flapping upstream: the internal app the gateways deliver to. Its weather
//! changes every few seconds: fair (nearly every delivery answered 200), showers
//! (many 500s, 503s, 429s with `Retry-After`, and deliveries held past the gateway's
//! timeout) and storms (everything refused for a while). Every request it receives
//! is recorded with what it answered, before it answers.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use crate::record::Delivery;

/// How long a held delivery is held: past the gateway's delivery timeout.
pub const HOLD: Duration = Duration::from_millis(2_500);

#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(u8)]
pub enum Weather {
    Fair = 0,
    Showers = 1,
    Storm = 2,
}

pub struct Upstream {
    pub port: u16,
    pub record: Arc<Mutex<Vec<Delivery>>>,
    weather: Arc<AtomicU8>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Shared {
    clock: crate::Clock,
    record: Arc<Mutex<Vec<Delivery>>>,
    order: Arc<AtomicU64>,
    weather: Arc<AtomicU8>,
}

impl Upstream {
    pub async fn start(clock: crate::Clock) -> std::io::Result<Upstream> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let shared = Shared {
            clock,
            record: Arc::default(),
            order: Arc::default(),
            weather: Arc::new(AtomicU8::new(Weather::Fair as u8)),
        };
        let record = shared.record.clone();
        let weather = shared.weather.clone();
        let app = Router::new()
            .route("/{route}", post(deliver))
            .with_state(shared);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Upstream {
            port,
            record,
            weather,
            task,
        })
    }

    pub fn set_weather(&self, w: Weather) {
        self.weather.store(w as u8, Ordering::SeqCst);
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.record.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What this request gets, by the weather.
fn decide(weather: u8) -> u16 {
    let roll = fastrand::u32(0..100);
    match weather {
        0 => match roll {
            0..=96 => 200,
            97 => 500,
            98 => 429,
            _ => 0,
        },
        1 => match roll {
            0..=49 => 200,
            50..=64 => 500,
            65..=79 => 503,
            80..=89 => 429,
            _ => 0,
        },
        _ => 503,
    }
}

async fn deliver(
    State(s): State<Shared>,
    Path(route): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let status = decide(s.weather.load(Ordering::SeqCst));
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let object = &json["data"]["object"];
    let delivery = Delivery {
        at: s.clock.ms(),
        order: s.order.fetch_add(1, Ordering::SeqCst),
        route,
        entry: headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        event: json["id"].as_str().unwrap_or_default().to_string(),
        key: object["id"].as_str().unwrap_or_default().to_string(),
        seq: object["seq"].as_u64().unwrap_or_default(),
        status,
    };
    if let Ok(mut r) = s.record.lock() {
        r.push(delivery);
    }
    match status {
        0 => {
            tokio::time::sleep(HOLD).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        429 => (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")]).into_response(),
        s => StatusCode::from_u16(s)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response(),
    }
}
