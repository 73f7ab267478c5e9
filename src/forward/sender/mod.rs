//! The delivery seam: how one message reaches a route's destination, whatever the
//! destination is.
//!
//! A route holds one [`Sender`], made by [`sender`] from the destination's scheme
//! (`http://` and `https://` today: [`http`]). The forwarder hands it a [`Message`]
//! (the body and the delivery headers, already signed) and gets back a typed
//! [`Outcome`]: delivered, refused for good, asked to slow down, unavailable for
//! now, unreachable, timed out. Each failed outcome carries a [`Failure`] kind and a
//! log-safe detail: the retry policy, the breaker, the route's pace, the meters and
//! the store read the outcome and the kind, never the text. A sender owns what is
//! particular to its destination (an HTTP status and `Retry-After`, a broker's
//! acknowledgement) and turns it into an outcome; everything else (transforms,
//! slots, breaker, retries, leases, recording) is the forwarder's and the same for
//! every destination.

pub mod http;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

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
    /// The destination took it (with the HTTP status, for an HTTP destination).
    Delivered { status: Option<u16> },
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
            Outcome::Delivered { status } => *status,
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
/// connections) per connect timeout, kept from one route table to the next so that
/// a reload does not drop them.
#[derive(Clone, Default)]
pub struct Connections {
    http: Arc<Mutex<HashMap<Duration, reqwest::Client>>>,
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
}

/// The sender of `destination`, chosen by its scheme.
pub fn sender(
    destination: &str,
    settings: Settings,
    connections: &Connections,
) -> Result<Arc<dyn Sender>, SenderError> {
    let url = reqwest::Url::parse(destination).map_err(|e| SenderError::NotAUrl(Box::new(e)))?;
    match url.scheme() {
        "http" | "https" => Ok(Arc::new(http::HttpSender::new(
            connections.http(settings.connect_timeout)?,
            url,
            settings.timeout,
        ))),
        other => Err(SenderError::Scheme(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_scheme_chooses_the_sender() {
        let c = Connections::default();
        assert!(sender("http://127.0.0.1:1/x", settings(), &c).is_ok());
        assert!(sender("https://example.invalid/x", settings(), &c).is_ok());
        assert!(matches!(
            sender("ftp://example.invalid/x", settings(), &c),
            Err(SenderError::Scheme(s)) if s == "ftp"
        ));
        let e = sender("http://u:S3cretPW@[::1", settings(), &c)
            .err()
            .unwrap();
        assert!(matches!(e, SenderError::NotAUrl(_)));
        assert!(!e.to_string().contains("S3cretPW"));
    }

    #[test]
    fn senders_with_one_connect_timeout_share_their_connections() {
        let c = Connections::default();
        let _ = sender("http://a/", settings(), &c);
        let _ = sender("http://b/", settings(), &c);
        let other = Settings {
            connect_timeout: Duration::from_secs(2),
            ..settings()
        };
        let _ = sender("http://b/", other, &c);
        assert_eq!(c.http.lock().unwrap().len(), 2);
    }

    #[test]
    fn only_a_destination_in_trouble_counts_against_it() {
        let f = |k| Failed::new(k, "x");
        assert!(!Outcome::Delivered { status: Some(200) }.is_destination_failure());
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
