//! The NATS JetStream sender: a publish of the message to the route's subject,
//! acknowledged by the stream (`PubAck`), classified into an [`Outcome`].
//!
//! The message id (`Nats-Msg-Id`) is the delivery's identity,
//! `<entry id>:<route>:<replay generation>`: a retry keeps it, so that the
//! stream's duplicate window drops a retry whose first acknowledgement was lost;
//! an operator's replay changes it, so that a replay is published again. A `PubAck`
//! that says `duplicate` is delivered (the stream holds the message).
//!
//! What becomes of an attempt: acknowledged → delivered (the answer names the
//! stream and its sequence); no responders (no stream for the subject, or one
//! electing a leader or restarting) → unavailable, kind `not-found`, retried with
//! the route's backoff and dead as "not-found" when the budget is spent; a message
//! over the server's `max_payload` or the stream's `max_msg_size` → refused for
//! good, `too-large`; the server not reached, or the connection lost →
//! unreachable; no acknowledgement within the route's timeout → timed out; the
//! credentials refused → unavailable, `auth-refused` (a rotated credential is
//! fixed without losing what waits).
//!
//! One client per broker (its servers and credentials) is shared by every route
//! that publishes there ([`Broker`]); it reconnects by itself, and
//! `hookgate_broker_connected{kind="nats",broker}` says whether it is connected.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use tokio::sync::watch;

use super::{Check, Failed, Identity, Message, Outcome, Sender};
use crate::config::{Credentials, NatsDestination, Template};
use crate::failure::Failure;

/// One NATS deployment (its servers, TLS and credentials) and the client every route
/// publishing there shares, connected on first use.
pub struct Broker {
    servers: Vec<String>,
    tls: bool,
    credentials: Option<Credentials>,
    connect_timeout: Duration,
    /// How logs and metrics name it: its first server, `nats://host:port`.
    name: String,
    conn: std::sync::OnceLock<(async_nats::Client, jetstream::Context)>,
    /// The connection being made, by a task of its own (so that a delivery that
    /// stops waiting does not stop it), and what it came to.
    connecting: std::sync::Mutex<Option<Attempt>>,
    connected: metrics::Gauge,
}

/// A connection being made: what it came to, once it did (`None` until then).
type Attempt = watch::Receiver<Option<Result<(), Failed>>>;

/// Why the broker could not be connected to.
#[derive(Debug)]
struct NotConnected(Failed);

impl Broker {
    pub fn new(
        dest: &NatsDestination,
        credentials: Option<&Credentials>,
        connect_timeout: Duration,
    ) -> Broker {
        let name = dest.servers.first().cloned().unwrap_or_default();
        let connected = metrics::gauge!("hookgate_broker_connected", "kind" => "nats", "broker" => name.clone());
        connected.set(0.0);
        Broker {
            servers: dest.servers.clone(),
            tls: dest.tls,
            credentials: credentials.cloned(),
            connect_timeout,
            name,
            conn: std::sync::OnceLock::new(),
            connecting: std::sync::Mutex::new(None),
            connected,
        }
    }

    /// Whether this broker is the one `dest` and `credentials` name.
    pub fn is(&self, dest: &NatsDestination, credentials: Option<&Credentials>) -> bool {
        self.servers == dest.servers
            && self.tls == dest.tls
            && self.credentials.as_ref() == credentials
    }

    /// How logs and metrics name it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client and its JetStream context, connecting on first use. A failed
    /// connection is tried again by the next caller.
    async fn connection(
        self: &Arc<Self>,
    ) -> Result<&(async_nats::Client, jetstream::Context), NotConnected> {
        if let Some(c) = self.conn.get() {
            return Ok(c);
        }
        let mut rx = {
            let mut connecting = self.connecting.lock().unwrap_or_else(|p| p.into_inner());
            match connecting.as_ref() {
                // A task is connecting, or failed last time (its answer is kept
                // until the next caller starts another).
                Some(rx) if rx.borrow().is_none() => rx.clone(),
                _ => {
                    let (tx, rx) = watch::channel(None);
                    *connecting = Some(rx.clone());
                    let me = self.clone();
                    tokio::spawn(async move {
                        let made = match me.connect().await {
                            Ok(c) => {
                                let _ = me.conn.set(c);
                                Ok(())
                            }
                            Err(NotConnected(failed)) => Err(failed),
                        };
                        let _ = tx.send(Some(made));
                    });
                    rx
                }
            }
        };
        let made = match rx.wait_for(Option::is_some).await {
            Ok(made) => made.clone(),
            Err(_) => None,
        };
        match (made, self.conn.get()) {
            (_, Some(c)) => Ok(c),
            (Some(Err(failed)), None) => Err(NotConnected(failed)),
            _ => Err(NotConnected(Failed::new(
                Failure::Connect,
                "connect: no connection was made",
            ))),
        }
    }

    async fn connect(&self) -> Result<(async_nats::Client, jetstream::Context), NotConnected> {
        let mut options = match &self.credentials {
            // (A consumer token is a pull route's; never a broker's.)
            None | Some(Credentials::PullToken(_)) => async_nats::ConnectOptions::new(),
            Some(Credentials::UserPassword { user, password }) => {
                async_nats::ConnectOptions::with_user_and_password(
                    user.expose().to_string(),
                    password.expose().to_string(),
                )
            }
            Some(Credentials::Token(t)) => {
                async_nats::ConnectOptions::with_token(t.expose().to_string())
            }
            Some(Credentials::CredsFile(path)) => {
                async_nats::ConnectOptions::with_credentials_file(path)
                    .await
                    .map_err(|e| {
                        NotConnected(Failed::new(
                            Failure::AuthRefused,
                            format!(
                                "auth-refused: the credentials file cannot be read ({})",
                                e.kind()
                            ),
                        ))
                    })?
            }
        };
        let gauge = self.connected.clone();
        options = options
            .name(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
            .connection_timeout(self.connect_timeout)
            .require_tls(self.tls)
            .event_callback(move |event| {
                let gauge = gauge.clone();
                async move {
                    match event {
                        async_nats::Event::Connected => gauge.set(1.0),
                        async_nats::Event::Disconnected | async_nats::Event::Closed => {
                            gauge.set(0.0)
                        }
                        _ => {}
                    }
                }
            });
        crate::tls::install_provider();
        let client = options
            .connect(self.servers.as_slice())
            .await
            .map_err(|e| NotConnected(of_connect_error(e.kind())))?;
        self.connected.set(1.0);
        tracing::info!(broker = %self.name, "connected to the NATS broker");
        // The route's timeout bounds each publish from outside; the context's own
        // bounds (API requests, acks left behind) are generous.
        let js = jetstream::ContextBuilder::new()
            .timeout(Duration::from_secs(60))
            .backpressure_on_inflight(true)
            .build(client.clone());
        Ok((client, js))
    }
}

/// What a failed connection means.
fn of_connect_error(kind: async_nats::ConnectErrorKind) -> Failed {
    use async_nats::ConnectErrorKind as K;
    match kind {
        K::Authentication | K::AuthorizationViolation => Failed::new(
            Failure::AuthRefused,
            "auth-refused: the broker refused the credentials",
        ),
        K::TimedOut => Failed::new(Failure::Timeout, "timeout: connecting to the broker"),
        K::Tls => Failed::new(
            Failure::Tls,
            "tls: the TLS handshake with the broker failed",
        ),
        K::Dns | K::Io | K::MaxReconnects => {
            Failed::new(Failure::Connect, "connect: the broker cannot be reached")
        }
        K::ServerParse => Failed::new(
            Failure::Io,
            "io: the broker's address or greeting is malformed",
        ),
    }
}

/// Publishes to one route's subject.
pub struct NatsSender {
    broker: Arc<Broker>,
    subject: Template,
    timeout: Duration,
}

impl NatsSender {
    pub fn new(broker: Arc<Broker>, subject: Template, timeout: Duration) -> NatsSender {
        NatsSender {
            broker,
            subject,
            timeout,
        }
    }
}

#[async_trait::async_trait]
impl Sender for NatsSender {
    async fn send(&self, message: Message) -> Outcome {
        match tokio::time::timeout(self.timeout, self.publish(message)).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::TimedOut(Failed::new(
                Failure::Timeout,
                format!(
                    "timeout: no acknowledgement within {}",
                    humantime::format_duration(self.timeout)
                ),
            )),
        }
    }

    async fn check(&self, sample: &Identity, span: Duration) -> Option<Check> {
        let bound = self.timeout.max(Duration::from_secs(5));
        Some(
            match tokio::time::timeout(bound, self.inspect(sample, span)).await {
                Ok(check) => check,
                Err(_) => Check::failed(format!(
                    "no answer within {}",
                    humantime::format_duration(bound)
                )),
            },
        )
    }
}

impl NatsSender {
    /// The stream that takes the route's subjects, its duplicate window and limits,
    /// and a dry publish: one that expects a stream sequence no stream has
    /// (`Nats-Expected-Last-Sequence`), which the stream refuses without storing it,
    /// after checking that it exists and that this client may publish there.
    async fn inspect(&self, sample: &Identity, span: Duration) -> Check {
        let (client, js) = match self.broker.connection().await {
            Ok(c) => c,
            Err(NotConnected(failed)) => return Check::failed(failed.detail),
        };
        let mut check = Check {
            ok: true,
            facts: vec![format!(
                "server max_payload {} bytes",
                client.server_info().max_payload
            )],
            warnings: Vec::new(),
        };
        let filter = self.subject.filter(&sample.source, &sample.route);
        let stream = match js.stream_by_subject(filter.clone()).await {
            Ok(name) => name,
            Err(_) => return Check::failed(format!("no stream takes {filter}")),
        };
        match js.get_stream(&stream).await {
            Ok(s) => {
                let c = &s.cached_info().config;
                let window = c.duplicate_window;
                check.facts.push(format!(
                    "stream {stream} takes {filter}: {} storage, {} replica(s), duplicate window {}, max_msg_size {}",
                    match c.storage {
                        jetstream::stream::StorageType::File => "file",
                        jetstream::stream::StorageType::Memory => "memory",
                    },
                    c.num_replicas,
                    humantime::format_duration(window),
                    if c.max_message_size < 0 {
                        "unlimited".to_string()
                    } else {
                        format!("{} bytes", c.max_message_size)
                    }
                ));
                if span > window {
                    check.warnings.push(format!(
                        "a retry can come up to {} after the first publish, later than stream {stream}'s duplicate window ({}): a retry after a lost acknowledgement may then be stored twice; widen the stream's duplicate_window or shorten the route's retry (max_age, max_attempts)",
                        humantime::format_duration(span),
                        humantime::format_duration(window),
                    ));
                }
            }
            Err(e) => {
                return Check::failed(format!("stream {stream} cannot be read ({})", e.kind()));
            }
        }
        let subject =
            self.subject
                .render(&sample.source, &sample.route, sample.event_type.as_deref());
        let dry = PublishMessage::build()
            .payload(bytes::Bytes::new())
            .expected_last_sequence(u64::MAX);
        let answer = match js.send_publish(subject.clone(), dry).await {
            Ok(ack) => ack.await,
            Err(e) => Err(e),
        };
        match answer {
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                check
                    .facts
                    .push(format!("a dry publish to {subject} was taken (and not stored)"));
            }
            Err(e) => {
                check.ok = false;
                let outcome = of_publish_error(&e, client.server_info().max_payload);
                let why = outcome.failed().map_or_else(|| e.kind().to_string(), |f| f.detail.clone());
                check.facts.push(format!("a dry publish to {subject} failed: {why}"));
            }
            Ok(ack) => check.facts.push(format!(
                "a dry publish to {subject} was stored (stream {} seq {}): the stream ignores expected sequences",
                ack.stream, ack.sequence
            )),
        }
        check
    }
}

impl NatsSender {
    async fn publish(&self, message: Message) -> Outcome {
        let (client, js) = match self.broker.connection().await {
            Ok(c) => c,
            Err(NotConnected(failed)) => return unreachable_or(failed),
        };
        let id = &message.identity;
        let subject = self
            .subject
            .render(&id.source, &id.route, id.event_type.as_deref());
        let mut headers = async_nats::HeaderMap::new();
        for (name, value) in &message.headers {
            headers.append(
                name.as_str(),
                String::from_utf8_lossy(value.as_bytes()).as_ref(),
            );
        }
        let publish = PublishMessage::build()
            .payload(message.body)
            .headers(headers)
            .message_id(id.message_id());
        let ack = match js.send_publish(subject, publish).await {
            Ok(ack) => ack,
            Err(e) => return of_publish_error(&e, client.server_info().max_payload),
        };
        match ack.await {
            Ok(ack) => Outcome::Delivered {
                status: None,
                answer: Some(format!(
                    "stream {} seq {}{}",
                    ack.stream,
                    ack.sequence,
                    if ack.duplicate { " (duplicate)" } else { "" }
                )),
            },
            Err(e) => of_publish_error(&e, client.server_info().max_payload),
        }
    }
}

/// A failed connection as an outcome: credentials refused are unavailable (a
/// retry after the operator fixes them delivers), the rest unreachable or timed out.
fn unreachable_or(failed: Failed) -> Outcome {
    match failed.kind {
        Failure::AuthRefused => Outcome::Unavailable {
            failed,
            retry_after: None,
        },
        Failure::Timeout => Outcome::TimedOut(failed),
        _ => Outcome::Unreachable(failed),
    }
}

/// What a failed publish means (see the module's documentation).
fn of_publish_error(e: &jetstream::context::PublishError, max_payload: usize) -> Outcome {
    match e.kind() {
        PublishErrorKind::StreamNotFound => Outcome::Unavailable {
            failed: Failed::new(
                Failure::NotFound,
                "not-found: no stream answered for the subject (none exists, or it is electing a leader)",
            ),
            retry_after: None,
        },
        PublishErrorKind::MaxPayloadExceeded => Outcome::Refused(Failed::new(
            Failure::TooLarge,
            format!(
                "too-large: the message is over the server's max_payload ({max_payload} bytes)"
            ),
        )),
        PublishErrorKind::TimedOut => Outcome::TimedOut(Failed::new(
            Failure::Timeout,
            "timeout: no acknowledgement from the stream",
        )),
        PublishErrorKind::BrokenPipe => Outcome::Unreachable(Failed::new(
            Failure::Io,
            "io: the connection to the broker broke",
        )),
        PublishErrorKind::MaxAckPending => Outcome::SlowDown {
            failed: Failed::new(Failure::Io, "io: too many acknowledgements pending"),
            retry_after: None,
        },
        _ => {
            let api =
                std::error::Error::source(e).and_then(|s| s.downcast_ref::<jetstream::Error>());
            match api {
                Some(err)
                    if err.error_code() == jetstream::ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM =>
                {
                    Outcome::Refused(Failed::new(
                        Failure::TooLarge,
                        "too-large: the message is over the stream's max_msg_size",
                    ))
                }
                // The server's own words (a code and a fixed description, never
                // the message).
                Some(err) => Outcome::Unavailable {
                    failed: Failed::new(Failure::Io, format!("io: the stream refused it: {err}")),
                    retry_after: None,
                },
                None => Outcome::Unavailable {
                    failed: Failed::new(Failure::Io, "io: the publish failed"),
                    retry_after: None,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::ConnectErrorKind;
    use jetstream::context::PublishError;

    #[test]
    fn refused_credentials_wait_for_a_fix_and_the_rest_is_unreachable() {
        let auth = of_connect_error(ConnectErrorKind::AuthorizationViolation);
        assert_eq!(auth.kind, Failure::AuthRefused);
        assert!(matches!(unreachable_or(auth), Outcome::Unavailable { .. }));
        for (kind, failure) in [
            (ConnectErrorKind::Io, Failure::Connect),
            (ConnectErrorKind::Dns, Failure::Connect),
            (ConnectErrorKind::Tls, Failure::Tls),
        ] {
            let o = unreachable_or(of_connect_error(kind));
            assert!(
                matches!(&o, Outcome::Unreachable(f) if f.kind == failure),
                "{o:?}"
            );
        }
        assert!(matches!(
            unreachable_or(of_connect_error(ConnectErrorKind::TimedOut)),
            Outcome::TimedOut(_)
        ));
    }

    #[test]
    fn publish_failures_are_classified_by_kind() {
        let of = |k| of_publish_error(&PublishError::new(k), 1024);
        let no_stream = of(PublishErrorKind::StreamNotFound);
        assert!(
            matches!(&no_stream, Outcome::Unavailable { failed, .. } if failed.kind == Failure::NotFound),
            "retried: a stream may be electing a leader"
        );
        let big = of(PublishErrorKind::MaxPayloadExceeded);
        assert!(matches!(&big, Outcome::Refused(f) if f.kind == Failure::TooLarge));
        assert!(big.failed().unwrap().detail.contains("1024 bytes"));
        assert!(matches!(
            of(PublishErrorKind::TimedOut),
            Outcome::TimedOut(_)
        ));
        assert!(matches!(
            of(PublishErrorKind::BrokenPipe),
            Outcome::Unreachable(f) if f.kind == Failure::Io
        ));
        assert!(matches!(
            of(PublishErrorKind::Other),
            Outcome::Unavailable { failed, .. } if failed.kind == Failure::Io
        ));
    }
}
