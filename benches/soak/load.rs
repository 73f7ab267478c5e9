//! The steady signed load, as a provider sends it: Stripe events signed at the
//! moment they are sent, each key's events one after another (the next only once
//! the previous was acknowledged, so the gateway's arrival order is the key's
//! order), resent like a provider resends until a gateway answers 200. On a shared
//! store a resend goes to the other gateway (a load balancer's failover); on the
//! embedded store each key belongs to one gateway (its own database).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookgate::config::Secret;
use hookgate::provider::Registry;
use hookgate::provider::sign::{SignInput, sign};

use crate::record::{Answer, Attempt, Event};

pub const SECRET: &str = "whsec_soak_secret";

pub struct Load {
    pub events: Arc<Mutex<Vec<Event>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

pub struct Plan {
    pub store: &'static str,
    pub keys: usize,
    /// Events per second, over all keys.
    pub rate: f64,
    /// The gateways' ingest URLs.
    pub gateways: Vec<String>,
    /// Each key to one gateway (the embedded store), or any.
    pub pinned: bool,
}

impl Load {
    pub fn start(plan: Plan, clock: crate::Clock) -> Load {
        let events: Arc<Mutex<Vec<Event>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(plan.keys)
            .build()
            .unwrap_or_default();
        let gateways = Arc::new(plan.gateways);
        let pause = Duration::from_secs_f64(plan.keys as f64 / plan.rate);
        let tasks = (0..plan.keys)
            .map(|k| {
                let line = Line {
                    key: format!("{}-k{k}", plan.store),
                    home: k % gateways.len(),
                    pinned: plan.pinned,
                    gateways: gateways.clone(),
                    client: client.clone(),
                    clock: clock.clone(),
                    events: events.clone(),
                    stop: stop.clone(),
                };
                tokio::spawn(async move {
                    // Spread the keys' first sends over one pause.
                    tokio::time::sleep(pause.mul_f64(fastrand::f64())).await;
                    line.run(pause).await
                })
            })
            .collect();
        Load {
            events,
            stop,
            tasks,
        }
    }

    /// Stop making events; each key finishes (or gives up on) the one it is sending.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

struct Line {
    key: String,
    home: usize,
    pinned: bool,
    gateways: Arc<Vec<String>>,
    client: reqwest::Client,
    clock: crate::Clock,
    events: Arc<Mutex<Vec<Event>>>,
    stop: Arc<AtomicBool>,
}

/// How long a key keeps resending its event once the load stops.
const GIVE_UP_AFTER_STOP: Duration = Duration::from_secs(60);

impl Line {
    async fn run(self, pause: Duration) {
        let mut seq = 0u64;
        while !self.stop.load(Ordering::SeqCst) {
            seq += 1;
            let event = self.send(seq).await;
            if let Ok(mut all) = self.events.lock() {
                all.push(event);
            }
            tokio::time::sleep(pause.mul_f64(0.5 + fastrand::f64())).await;
        }
    }

    /// Send event `seq` of this key until a gateway answers 200 (or the load has
    /// stopped and a minute has passed).
    async fn send(&self, seq: u64) -> Event {
        let event = format!("evt_{}_s{seq}", self.key);
        let body = serde_json::json!({
            "id": event,
            "object": "event",
            "type": "customer.subscription.updated",
            "data": {"object": {"id": self.key, "seq": seq}},
        })
        .to_string();
        let mut record = Event {
            event,
            key: self.key.clone(),
            seq,
            attempts: Vec::new(),
        };
        let mut backoff = Duration::from_millis(100);
        let mut gateway = self.home;
        let mut stopped_at = None;
        loop {
            let answer = self.attempt(gateway, body.as_bytes()).await;
            let accepted = matches!(answer, Answer::Accepted { .. });
            record.attempts.push(Attempt {
                at: self.clock.ms(),
                gateway,
                answer,
            });
            if accepted {
                return record;
            }
            if self.stop.load(Ordering::SeqCst) {
                let since = *stopped_at.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > GIVE_UP_AFTER_STOP {
                    return record;
                }
            }
            tokio::time::sleep(backoff.mul_f64(0.5 + fastrand::f64() / 2.0)).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
            if !self.pinned {
                gateway = (gateway + 1) % self.gateways.len();
            }
        }
    }

    async fn attempt(&self, gateway: usize, body: &[u8]) -> Answer {
        let Some(headers) = signed_headers(body, &self.key) else {
            return Answer::Status(0);
        };
        let url = format!("{}/ingest/stripe", self.gateways[gateway]);
        let mut req = self.client.post(url).body(body.to_vec());
        for (name, value) in headers {
            req = req.header(name, value);
        }
        let Ok(resp) = req.send().await else {
            return Answer::Unanswered;
        };
        let status = resp.status().as_u16();
        if status != 200 {
            return Answer::Status(status);
        }
        let Ok(json) = resp.json::<serde_json::Value>().await else {
            return Answer::Unanswered;
        };
        Answer::Accepted {
            entry: json["id"].as_str().unwrap_or_default().to_string(),
            duplicate: json["duplicate"].as_bool().unwrap_or_default(),
        }
    }
}

/// The `Stripe-Signature` header for `body`, signed now.
fn signed_headers(body: &[u8], id: &str) -> Option<Vec<(String, String)>> {
    static REGISTRY: std::sync::OnceLock<Option<Registry>> = std::sync::OnceLock::new();
    let spec = REGISTRY
        .get_or_init(|| Registry::builtin().ok())
        .as_ref()?
        .get("stripe")?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs() as i64;
    let signed = sign(
        spec,
        &Secret::new(SECRET),
        &SignInput {
            body,
            timestamp: now,
            id,
            event_type: None,
            method: "POST",
            path: "/",
            url: None,
        },
    )
    .ok()?;
    Some(
        signed
            .headers
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect(),
    )
}
