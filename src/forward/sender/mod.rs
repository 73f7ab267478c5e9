//! The delivery seam: how one message reaches a route's destination, whatever the
//! destination is.
//!
//! A route holds one [`Sender`], made by [`sender`] from the destination's kind:
//! [`http`] (`http://`, `https://`), [`nats`] (NATS JetStream, `nats://`, `tls://`)
//! and [`amqp`] (RabbitMQ, `amqp://`, `amqps://`); a pull route's [`pull`] sender
//! is never asked to send. The forwarder hands it a
//! [`Message`] (the body, the delivery headers already signed, and the delivery's
//! [`Identity`], which a broker's subject and message id are made of) and gets back a typed
//! [`Outcome`]: delivered, refused for good, asked to slow down, unavailable for
//! now, unreachable, timed out. Each failed outcome carries a [`Failure`] kind and a
//! log-safe detail: the retry policy, the breaker, the route's pace, the meters and
//! the store read the outcome and the kind, never the text. A sender owns what is
//! particular to its destination (an HTTP status and `Retry-After`, a broker's
//! acknowledgement) and turns it into an outcome; everything else (transforms,
//! slots, breaker, retries, leases, recording) is the forwarder's and the same for
//! every destination. A broker's connection is shared by every route that
//! publishes there ([`Connections`]), and kept from one route table to the next.
//! Another kind of destination (Kafka) is one more file here and one more arm of
//! [`sender`].

pub mod amqp;
pub mod http;
pub mod nats;
pub mod pull;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::config::{AmqpDestination, Credentials, Destination, NatsDestination, RouteConfig};
use crate::failure::Failure;

/// One delivery attempt as a destination receives it.
#[derive(Debug, Clone)]
pub struct Message {
    /// The delivery headers: hookgate's and the received ones the route passes on.
    pub headers: ::http::HeaderMap,
    /// The stored body, or what the route's transform made of it.
    pub body: Bytes,
    /// When the attempt started (unix ms): a `Retry-After` date is read against it.
    pub now_ms: i64,
    /// Which delivery it is.
    pub identity: Identity,
}

/// Which delivery a message is: what a broker's subject, routing key and message
/// id are made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub entry_id: String,
    pub source: String,
    pub route: String,
    /// The replay generation: the attempts made before the operator's last replay
    /// of this delivery (0 until one). Every retry within one budget keeps it; a
    /// replay changes it.
    pub generation: u32,
    pub event_type: Option<String>,
}

impl Identity {
    /// `<entry id>:<route>:<replay generation>`: a broker's message id
    /// (`Nats-Msg-Id`, AMQP `message_id`), the same for every retry of one
    /// delivery and new at each replay.
    pub fn message_id(&self) -> String {
        format!("{}:{}:{}", self.entry_id, self.route, self.generation)
    }
}

/// Why an attempt failed: the kind (what the forwarder decides by) and a short,
/// log-safe detail (what people read; never a body, a secret or a URL's password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    pub kind: Failure,
    pub detail: String,
}

impl Failed {
    pub fn new(kind: Failure, detail: impl Into<String>) -> Failed {
        Failed {
            kind,
            detail: detail.into(),
        }
    }
}

/// What one attempt produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The destination took it: with the HTTP status (an HTTP destination), or the
    /// broker's answer (a stream and its sequence, a confirm).
    Delivered {
        status: Option<u16>,
        answer: Option<String>,
    },
    /// Refused for good: sending it again cannot help (a 4xx, a message too large).
    Refused(Failed),
    /// Asked to slow down (a 429 or a 503), maybe saying when to come back: the
    /// route's pace steps back, and the retry waits at least `retry_after`.
    SlowDown {
        failed: Failed,
        retry_after: Option<Duration>,
    },
    /// It answered but could not take it now (a 5xx, a 408): retried.
    Unavailable {
        failed: Failed,
        retry_after: Option<Duration>,
    },
    /// Not reached, or the exchange broke: connection refused, DNS, TLS, reset.
    Unreachable(Failed),
    /// No answer within the route's timeout.
    TimedOut(Failed),
}

impl Outcome {
    /// The failure, unless it was delivered.
    pub fn failed(&self) -> Option<&Failed> {
        match self {
            Outcome::Delivered { .. } => None,
            Outcome::Refused(f) | Outcome::Unreachable(f) | Outcome::TimedOut(f) => Some(f),
            Outcome::SlowDown { failed, .. } | Outcome::Unavailable { failed, .. } => Some(failed),
        }
    }

    /// The failure's kind, unless it was delivered.
    pub fn kind(&self) -> Option<Failure> {
        self.failed().map(|f| f.kind)
    }

    /// The HTTP status the destination answered, when it is an HTTP destination
    /// that answered (detail: the outcome is the type).
    pub fn status(&self) -> Option<u16> {
        match self {
            Outcome::Delivered { status, .. } => *status,
            other => other.kind().and_then(|k| k.status()),
        }
    }

    /// When the destination asked to be tried again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Outcome::SlowDown { retry_after, .. } | Outcome::Unavailable { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }

    /// Whether the outcome says the destination itself is unhealthy (what the
    /// circuit breaker counts): it is down, slow, overloaded or failing, not
    /// refusing one message. (A 408 is the destination timing one request out.)
    pub fn is_destination_failure(&self) -> bool {
        match self {
            Outcome::Delivered { .. } | Outcome::Refused(_) => false,
            Outcome::SlowDown { .. } | Outcome::Unreachable(_) | Outcome::TimedOut(_) => true,
            Outcome::Unavailable { failed, .. } => failed.kind != Failure::Status(408),
        }
    }
}

/// Sends messages to one destination. Implementations classify everything their
/// destination can answer into an [`Outcome`]; they never panic on an answer and
/// never put a secret or a body into a failure's detail.
#[async_trait::async_trait]
pub trait Sender: Send + Sync {
    /// Send one message and say what became of it.
    async fn send(&self, message: Message) -> Outcome;

    /// Ask the destination, without delivering anything, whether it exists and
    /// takes a publish for `sample` (a message of the route), and what it keeps that
    /// bears on the route's promises: `span` is the longest a retry can come after a
    /// first attempt. `None`: nothing to ask (an HTTP destination).
    async fn check(&self, _sample: &Identity, _span: Duration) -> Option<Check> {
        None
    }
}

/// What a broker said of a route's destination before anything was sent
/// (`hookgate check-config --connect`, and the log at start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Whether the destination exists and takes a publish, as far as the broker
    /// lets a dry check tell.
    pub ok: bool,
    /// What was found (the stream, its duplicate window and limits; the exchange),
    /// or why not.
    pub facts: Vec<String>,
    /// What weakens the route's promise (a retry later than the duplicate window).
    pub warnings: Vec<String>,
}

impl Check {
    pub fn failed(why: impl Into<String>) -> Check {
        Check {
            ok: false,
            facts: vec![why.into()],
            warnings: Vec::new(),
        }
    }
}

/// Why a destination has no sender.
#[derive(Debug, thiserror::Error)]
pub enum SenderError {
    /// (The message names no URL: it may hold a password.)
    #[error("the destination is not a URL")]
    NotAUrl(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("no sender delivers to {0}:// destinations")]
    Scheme(String),
    #[error("cannot build the delivery client")]
    Client(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// How a route sends: its timeout and connect timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub timeout: Duration,
    pub connect_timeout: Duration,
}

/// The connections senders share: one HTTP client (one pool of kept-alive
/// connections) per connect timeout, and one connection per broker, kept from one
/// route table to the next so that a reload does not drop them.
#[derive(Clone, Default)]
pub struct Connections {
    http: Arc<Mutex<HashMap<Duration, reqwest::Client>>>,
    nats: Arc<Mutex<Vec<Arc<nats::Broker>>>>,
    amqp: Arc<Mutex<Vec<Arc<amqp::Broker>>>>,
}

impl Connections {
    /// The HTTP client for `connect_timeout`, made on first use.
    fn http(&self, connect_timeout: Duration) -> Result<reqwest::Client, SenderError> {
        let mut clients = self.http.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&connect_timeout) {
            return Ok(c.clone());
        }
        let c = http::client(connect_timeout).map_err(|e| SenderError::Client(Box::new(e)))?;
        clients.insert(connect_timeout, c.clone());
        Ok(c)
    }

    /// The NATS broker `dest` and `credentials` name (connected on first use).
    pub fn nats(
        &self,
        dest: &NatsDestination,
        credentials: Option<&Credentials>,
        connect_timeout: Duration,
    ) -> Arc<nats::Broker> {
        let mut brokers = self.nats.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = brokers.iter().find(|b| b.is(dest, credentials)) {
            return b.clone();
        }
        let b = Arc::new(nats::Broker::new(dest, credentials, connect_timeout));
        brokers.push(b.clone());
        b
    }

    /// The RabbitMQ broker `dest` and `credentials` name (connected on first use).
    pub fn amqp(
        &self,
        dest: &AmqpDestination,
        credentials: Option<&Credentials>,
        connect_timeout: Duration,
    ) -> Arc<amqp::Broker> {
        let mut brokers = self.amqp.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = brokers.iter().find(|b| b.is(dest, credentials)) {
            return b.clone();
        }
        let b = Arc::new(amqp::Broker::new(dest, credentials, connect_timeout));
        brokers.push(b.clone());
        b
    }
}

/// The sender of a route's destination, chosen by its kind.
pub fn sender(
    route: &RouteConfig,
    connections: &Connections,
) -> Result<Arc<dyn Sender>, SenderError> {
    let settings = Settings {
        timeout: route.delivery.timeout,
        connect_timeout: route.delivery.connect_timeout,
    };
    match &route.target {
        Destination::Pull => Ok(Arc::new(pull::PullSender)),
        Destination::Http => {
            let url = reqwest::Url::parse(&route.destination)
                .map_err(|e| SenderError::NotAUrl(Box::new(e)))?;
            match url.scheme() {
                "http" | "https" => Ok(Arc::new(http::HttpSender::new(
                    connections.http(settings.connect_timeout)?,
                    url,
                    settings.timeout,
                ))),
                other => Err(SenderError::Scheme(other.to_string())),
            }
        }
        Destination::Nats(dest) => {
            let broker =
                connections.nats(dest, route.credentials.as_ref(), settings.connect_timeout);
            Ok(Arc::new(nats::NatsSender::new(
                broker,
                dest.subject.clone(),
                settings.timeout,
            )))
        }
        Destination::Amqp(dest) => {
            let broker =
                connections.amqp(dest, route.credentials.as_ref(), settings.connect_timeout);
            Ok(Arc::new(amqp::AmqpSender::new(
                broker,
                dest,
                settings.timeout,
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The routes of a source whose routes deliver to `destinations`, the last one
    /// with a connect timeout of 2s.
    fn routes(destinations: &[&str]) -> Vec<RouteConfig> {
        let mut toml = String::from(
            "[[sources]]\nname = \"s\"\nprovider = \"stripe\"\nsecret = \"whsec_x\"\n",
        );
        for (i, d) in destinations.iter().enumerate() {
            toml.push_str(&format!(
                "[[sources.routes]]\nname = \"r{i}\"\ndestination = \"{d}\"\n"
            ));
            if d.starts_with("amqp") {
                toml.push_str("destination_user_env = \"U\"\ndestination_password_env = \"P\"\n");
            }
        }
        toml.push_str("[sources.routes.delivery]\nconnect_timeout = \"2s\"\n");
        let env = |v: &str| Some(format!("{v}-value"));
        crate::config::from_toml_str(&toml, &env).unwrap().sources[0]
            .routes
            .clone()
    }

    #[test]
    fn the_kind_chooses_the_sender() {
        let c = Connections::default();
        for r in routes(&[
            "http://127.0.0.1:1/x",
            "https://example.invalid/x",
            "nats://127.0.0.1:1/a.{source}",
            "amqp://127.0.0.1:1/?exchange=x",
        ]) {
            assert!(sender(&r, &c).is_ok(), "{}", r.destination);
        }
    }

    #[tokio::test]
    async fn routes_share_their_connections() {
        let c = Connections::default();
        let rs = routes(&[
            "http://a/",
            "http://b/",
            "nats://127.0.0.1:1/a",
            "nats://127.0.0.1:1/b",
            "nats://127.0.0.1:2/a",
            "amqp://127.0.0.1:1/?exchange=x",
            "amqp://127.0.0.1:1/?exchange=y",
            "amqp://127.0.0.1:1/other?exchange=x",
            "http://b/",
        ]);
        for r in &rs {
            sender(r, &c).unwrap();
        }
        // One HTTP client per connect timeout, one broker per servers (NATS) or
        // virtual host (RabbitMQ) and credentials.
        assert_eq!(c.http.lock().unwrap().len(), 2);
        assert_eq!(c.nats.lock().unwrap().len(), 2);
        assert_eq!(c.amqp.lock().unwrap().len(), 2);
        assert_eq!(c.amqp.lock().unwrap()[0].name(), "amqp://127.0.0.1:1");
    }

    #[test]
    fn the_message_id_changes_with_a_replay_only() {
        let mut id = Identity {
            entry_id: "e1".into(),
            source: "s".into(),
            route: "r".into(),
            generation: 0,
            event_type: None,
        };
        assert_eq!(id.message_id(), "e1:r:0");
        id.generation = 3;
        assert_eq!(id.message_id(), "e1:r:3");
    }

    #[test]
    fn only_a_destination_in_trouble_counts_against_it() {
        let f = |k| Failed::new(k, "x");
        assert!(
            !Outcome::Delivered {
                status: Some(200),
                answer: None
            }
            .is_destination_failure()
        );
        assert!(!Outcome::Refused(f(Failure::Status(422))).is_destination_failure());
        for o in [
            Outcome::SlowDown {
                failed: f(Failure::Status(429)),
                retry_after: None,
            },
            Outcome::Unavailable {
                failed: f(Failure::Status(500)),
                retry_after: None,
            },
            Outcome::Unreachable(f(Failure::Connect)),
            Outcome::TimedOut(f(Failure::Timeout)),
        ] {
            assert!(o.is_destination_failure(), "{o:?}");
        }
        let timed_out_one = Outcome::Unavailable {
            failed: f(Failure::Status(408)),
            retry_after: None,
        };
        assert!(!timed_out_one.is_destination_failure());
        assert_eq!(timed_out_one.status(), Some(408));
        assert_eq!(Outcome::TimedOut(f(Failure::Timeout)).status(), None);
    }
}
