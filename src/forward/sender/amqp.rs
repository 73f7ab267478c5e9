//! The RabbitMQ (AMQP 0-9-1) sender: a persistent, `mandatory` publish to the
//! route's exchange and routing key on a channel in confirm mode, classified by the
//! broker's confirm into an [`Outcome`].
//!
//! RabbitMQ answers an unroutable mandatory message with a return and then a
//! positive confirm; the two are correlated (the confirm carries the return), so an
//! unroutable message is refused for good as `not-found` with the broker's reason,
//! never delivered. (Within 60 s of a connection made again after one was lost, it
//! is retried instead: a restarted broker takes publishes before it has recovered
//! its queues, and returns them unroutable meanwhile.) A missing exchange closes the channel with 404: refused for
//! good, `not-found`; the route's channel is opened again for the next message. A
//! negative confirm (the broker could not store it) is unavailable and retried.
//! Credentials refused → unavailable, `auth-refused`; the broker not reached or
//! the connection lost → unreachable; no confirm within the route's timeout →
//! timed out.
//!
//! Each message carries `message_id` = the delivery's identity
//! (`<entry id>:<route>:<replay generation>`), `delivery_mode` 2 (persistent), the
//! content type, the timestamp, and the delivery headers. At least once: a confirm
//! lost in a crash means one more copy, which a consumer drops by `message_id`.
//!
//! One connection per broker (host, port, virtual host, credentials) is shared by
//! every route that publishes there ([`Broker`]), each route on its own channel
//! (a 404 closes only that route's channel); a connection or channel found closed
//! is opened again by the next message, so both recover after a broker restart.
//! `hookgate_broker_connected{kind="amqp",broker}` says whether it is connected.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueDeclareOptions,
};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::uri::{AMQPAuthority, AMQPQueryString, AMQPScheme, AMQPUri, AMQPUserInfo};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};

use super::{Check, Failed, Identity, Message, Outcome, Sender};
use crate::config::{AmqpDestination, Credentials, Template};
use crate::failure::Failure;

/// One RabbitMQ virtual host reached with one set of credentials, and the
/// connection its routes share, opened on first use and again after it closed.
pub struct Broker {
    dest: AmqpDestination,
    credentials: Option<Credentials>,
    connect_timeout: Duration,
    /// How logs and metrics name it: `amqp://host:port`.
    name: String,
    conn: std::sync::Mutex<Slot>,
    /// Whether a connection was ever made.
    had_one: std::sync::atomic::AtomicBool,
    connected: metrics::Gauge,
}

/// A connection to the broker, and when it was made.
struct Link {
    conn: Connection,
    since: std::time::Instant,
    /// Whether it replaced one that was lost (the broker may have restarted).
    again: bool,
}

impl std::ops::Deref for Link {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

/// How long after a connection is made again (one was lost) a message the broker
/// returns as unroutable is tried again rather than refused: a broker that has just restarted takes
/// publishes before it has recovered its queues, and returns them unroutable
/// meanwhile (seen on RabbitMQ 3.10 after a SIGKILL, for up to half a minute).
const RECOVERY_GRACE: Duration = Duration::from_secs(60);

/// A broker's connection: none, being made (by a task of its own, so that a
/// delivery that stops waiting does not stop it), or made.
enum Slot {
    Empty,
    Connecting(watch::Receiver<Option<Result<Arc<Link>, Failed>>>),
    Ready(Arc<Link>),
}

impl Broker {
    pub fn new(
        dest: &AmqpDestination,
        credentials: Option<&Credentials>,
        connect_timeout: Duration,
    ) -> Broker {
        let scheme = if dest.tls { "amqps" } else { "amqp" };
        let host = if dest.host.contains(':') {
            format!("[{}]", dest.host)
        } else {
            dest.host.clone()
        };
        let name = format!("{scheme}://{host}:{}", dest.port);
        let connected = metrics::gauge!("hookgate_broker_connected", "kind" => "amqp", "broker" => name.clone());
        connected.set(0.0);
        Broker {
            dest: dest.clone(),
            credentials: credentials.cloned(),
            connect_timeout,
            name,
            conn: std::sync::Mutex::new(Slot::Empty),
            had_one: std::sync::atomic::AtomicBool::new(false),
            connected,
        }
    }

    /// Whether this broker is the one `dest` and `credentials` name.
    pub fn is(&self, dest: &AmqpDestination, credentials: Option<&Credentials>) -> bool {
        self.dest.tls == dest.tls
            && self.dest.host == dest.host
            && self.dest.port == dest.port
            && self.dest.vhost == dest.vhost
            && self.credentials.as_ref() == credentials
    }

    /// How logs and metrics name it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The open connection, opening one when there is none or it closed. The
    /// connection is made by a task of its own: the deliveries waiting for it each
    /// stop at their own timeout, and the attempt goes on for the next ones.
    async fn connection(self: &Arc<Self>) -> Result<Arc<Link>, Failed> {
        let mut rx = {
            let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            match &*slot {
                Slot::Ready(c) if c.status().connected() => return Ok(c.clone()),
                Slot::Connecting(rx) => rx.clone(),
                _ => {
                    self.connected.set(0.0);
                    let (tx, rx) = watch::channel(None);
                    *slot = Slot::Connecting(rx.clone());
                    let me = self.clone();
                    tokio::spawn(async move {
                        let made = me.connect().await;
                        *me.conn.lock().unwrap_or_else(|p| p.into_inner()) = match &made {
                            Ok(c) => Slot::Ready(c.clone()),
                            Err(_) => Slot::Empty,
                        };
                        let _ = tx.send(Some(made));
                    });
                    rx
                }
            }
        };
        match rx.wait_for(Option::is_some).await {
            Ok(made) => made.clone().unwrap_or_else(|| {
                Err(Failed::new(
                    Failure::Connect,
                    "connect: no connection was made",
                ))
            }),
            Err(_) => Err(Failed::new(
                Failure::Connect,
                "connect: the connection attempt ended",
            )),
        }
    }

    async fn connect(&self) -> Result<Arc<Link>, Failed> {
        let (username, password) = match &self.credentials {
            Some(Credentials::UserPassword { user, password }) => {
                (user.expose().to_string(), password.expose().to_string())
            }
            // (Configuration takes only a user and password for RabbitMQ.)
            _ => ("guest".to_string(), "guest".to_string()),
        };
        let uri = AMQPUri {
            scheme: if self.dest.tls {
                AMQPScheme::AMQPS
            } else {
                AMQPScheme::AMQP
            },
            authority: AMQPAuthority {
                userinfo: AMQPUserInfo { username, password },
                host: self.dest.host.clone(),
                port: self.dest.port,
            },
            vhost: self.dest.vhost.clone(),
            query: AMQPQueryString {
                heartbeat: Some(30),
                ..AMQPQueryString::default()
            },
        };
        crate::tls::install_provider();
        let props = ConnectionProperties::default()
            .with_connection_name(concat!("hookgate/", env!("CARGO_PKG_VERSION")).into());
        let c =
            match tokio::time::timeout(self.connect_timeout, Connection::connect_uri(uri, props))
                .await
            {
                Ok(Ok(c)) => Arc::new(Link {
                    conn: c,
                    since: std::time::Instant::now(),
                    again: self
                        .had_one
                        .swap(true, std::sync::atomic::Ordering::Relaxed),
                }),
                Ok(Err(e)) => return Err(of_error(&e, Failure::Connect)),
                Err(_) => {
                    return Err(Failed::new(
                        Failure::Timeout,
                        "timeout: connecting to the broker",
                    ));
                }
            };
        tracing::info!(broker = %self.name, "connected to the RabbitMQ broker");
        self.connected.set(1.0);
        Ok(c)
    }

    /// Stop using `conn` (it failed, or a publish on it got no answer in time): the
    /// next delivery connects anew.
    fn forget(&self, conn: &Arc<Link>) {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if let Slot::Ready(c) = &*slot
            && Arc::ptr_eq(c, conn)
        {
            *slot = Slot::Empty;
            self.connected.set(0.0);
            // Closed, not only dropped: a connection the broker still holds would
            // otherwise stay open on its side.
            let conn = conn.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    conn.close(320, "hookgate: no answer in time".into()),
                )
                .await;
            });
        }
    }
}

/// Publishes to one route's exchange and routing key, on the route's own channel.
pub struct AmqpSender {
    broker: Arc<Broker>,
    exchange: String,
    routing_key: Template,
    timeout: Duration,
    channel: tokio::sync::Mutex<Option<Channel>>,
}

impl AmqpSender {
    pub fn new(broker: Arc<Broker>, dest: &AmqpDestination, timeout: Duration) -> AmqpSender {
        AmqpSender {
            broker,
            exchange: dest.exchange.clone(),
            routing_key: dest.routing_key.clone(),
            timeout,
            channel: tokio::sync::Mutex::new(None),
        }
    }

    /// The route's channel in confirm mode, opened again when it closed.
    async fn channel(&self) -> Result<(Arc<Link>, Channel), Failed> {
        let conn = self.broker.connection().await?;
        let mut channel = self.channel.lock().await;
        if let Some(ch) = channel.as_ref()
            && ch.status().connected()
        {
            return Ok((conn, ch.clone()));
        }
        *channel = None;
        let ch = match conn.create_channel().await {
            Ok(ch) => ch,
            Err(e) => {
                self.forget_closed(&conn);
                return Err(of_error(&e, Failure::Io));
            }
        };
        if let Err(e) = ch.confirm_select(ConfirmSelectOptions::default()).await {
            self.forget_closed(&conn);
            return Err(of_error(&e, Failure::Io));
        }
        *channel = Some(ch.clone());
        Ok((conn, ch))
    }

    /// Stop using `channel` (and `conn` too when `connection_too`, or when it is
    /// found closed): the next delivery opens them again.
    async fn forget(&self, conn: &Arc<Link>, channel: &Channel, connection_too: bool) {
        {
            let mut ours = self.channel.lock().await;
            if ours.as_ref().is_some_and(|c| c.id() == channel.id()) {
                *ours = None;
            }
        }
        if connection_too {
            self.broker.forget(conn);
        } else {
            self.forget_closed(conn);
        }
    }

    /// Stop using `conn` if it is found closed.
    fn forget_closed(&self, conn: &Arc<Link>) {
        if !conn.status().connected() {
            self.broker.forget(conn);
        }
    }

    async fn publish(&self, conn: &Arc<Link>, channel: &Channel, message: Message) -> Outcome {
        let id = &message.identity;
        let routing_key = self
            .routing_key
            .render(&id.source, &id.route, id.event_type.as_deref());
        if routing_key.len() > 255 {
            return Outcome::Refused(Failed::new(
                Failure::TooLarge,
                "too-large: the routing key is longer than 255 bytes",
            ));
        }
        let mut headers = FieldTable::default();
        let mut content_type = None;
        for (name, value) in &message.headers {
            if name == ::http::header::CONTENT_TYPE {
                content_type = value.to_str().ok().map(ShortString::from);
            }
            // A header with several values is one, its values joined as HTTP
            // would fold them.
            let key: ShortString = name.as_str().into();
            let mut bytes = match headers.inner().get(&key) {
                Some(AMQPValue::LongString(before)) => {
                    let mut b = before.as_bytes().to_vec();
                    b.extend_from_slice(b", ");
                    b
                }
                _ => Vec::new(),
            };
            bytes.extend_from_slice(value.as_bytes());
            headers.insert(key, AMQPValue::LongString(LongString::from(bytes)));
        }
        let mut properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(id.message_id().into())
            .with_timestamp(u64::try_from(message.now_ms.div_euclid(1000)).unwrap_or(0))
            .with_headers(headers);
        if let Some(ct) = content_type {
            properties = properties.with_content_type(ct);
        }
        let confirm = channel
            .basic_publish(
                self.exchange.as_str().into(),
                routing_key.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &message.body,
                properties,
            )
            .await;
        let confirmation = match confirm {
            Ok(confirm) => confirm.await,
            Err(e) => Err(e),
        };
        match confirmation {
            Ok(Confirmation::Ack(None)) => Outcome::Delivered {
                status: None,
                answer: Some("confirmed".to_string()),
            },
            Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned))) => {
                let failed = Failed::new(
                    Failure::NotFound,
                    format!(
                        "not-found: unroutable, returned by the broker ({} {})",
                        returned.reply_code,
                        returned.reply_text.as_str()
                    ),
                );
                if conn.again && conn.since.elapsed() < RECOVERY_GRACE {
                    Outcome::Unavailable {
                        failed,
                        retry_after: None,
                    }
                } else {
                    Outcome::Refused(failed)
                }
            }
            Ok(Confirmation::Nack(None)) => Outcome::Unavailable {
                failed: Failed::new(Failure::Io, "io: the broker could not take it (nack)"),
                retry_after: None,
            },
            Ok(Confirmation::NotRequested) => Outcome::Unreachable(Failed::new(
                Failure::Io,
                "io: the channel is not in confirm mode",
            )),
            Err(e) => {
                self.forget(conn, channel, false).await;
                outcome_of(of_error(&e, Failure::Io))
            }
        }
    }
}

#[async_trait::async_trait]
impl Sender for AmqpSender {
    async fn send(&self, message: Message) -> Outcome {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let timed_out = |what: &str| {
            Outcome::TimedOut(Failed::new(
                Failure::Timeout,
                format!(
                    "timeout: {what} within {}",
                    humantime::format_duration(self.timeout)
                ),
            ))
        };
        let (conn, channel) = match tokio::time::timeout_at(deadline, self.channel()).await {
            Ok(Ok(c)) => c,
            Ok(Err(failed)) => return outcome_of(failed),
            Err(_) => return timed_out("no connection to the broker"),
        };
        match tokio::time::timeout_at(deadline, self.publish(&conn, &channel, message)).await {
            Ok(outcome) => outcome,
            Err(_) => {
                // A connection the broker's end left may look open until a
                // heartbeat is missed: one that answers nothing in time is not
                // used again.
                self.forget(&conn, &channel, true).await;
                timed_out("no confirm")
            }
        }
    }

    async fn check(&self, sample: &Identity, _span: Duration) -> Option<Check> {
        let bound = self.timeout.max(Duration::from_secs(5));
        Some(
            match tokio::time::timeout(bound, self.inspect(sample)).await {
                Ok(check) => check,
                Err(_) => Check::failed(format!(
                    "no answer within {}",
                    humantime::format_duration(bound)
                )),
            },
        )
    }
}

impl AmqpSender {
    /// The exchange (or, on the default exchange, the queue) asked for passively,
    /// and a dry publish: one inside a transaction that is rolled back, which the
    /// broker checks (the exchange exists, the user may write to it) and never
    /// routes. Whether a binding takes the routing key only a real publish tells.
    async fn inspect(&self, sample: &Identity) -> Check {
        let conn = match self.broker.connection().await {
            Ok(c) => c,
            Err(failed) => return Check::failed(failed.detail),
        };
        let channel = |what: &'static str| {
            let conn = conn.clone();
            async move {
                conn.create_channel().await.map_err(|e| {
                    Check::failed(format!("{what}: {}", of_error(&e, Failure::Io).detail))
                })
            }
        };
        let mut check = Check {
            ok: true,
            facts: Vec::new(),
            warnings: Vec::new(),
        };
        let key =
            self.routing_key
                .render(&sample.source, &sample.route, sample.event_type.as_deref());
        let passive = match channel("a channel").await {
            Ok(ch) => ch,
            Err(c) => return c,
        };
        if self.exchange.is_empty() {
            check
                .facts
                .push("the default exchange: the routing key names the queue".to_string());
            if self.routing_key.is_fixed() {
                let declared = passive
                    .queue_declare(
                        key.as_str().into(),
                        QueueDeclareOptions {
                            passive: true,
                            ..QueueDeclareOptions::default()
                        },
                        FieldTable::default(),
                    )
                    .await;
                match declared {
                    Ok(q) => check.facts.push(format!(
                        "queue {key} exists: {} message(s), {} consumer(s)",
                        q.message_count(),
                        q.consumer_count()
                    )),
                    Err(e) => {
                        return Check::failed(format!(
                            "no queue {key}: every message would be returned ({})",
                            of_error(&e, Failure::Io).detail
                        ));
                    }
                }
            }
        } else {
            let declared = passive
                .exchange_declare(
                    self.exchange.as_str().into(),
                    ExchangeKind::Direct,
                    ExchangeDeclareOptions {
                        passive: true,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await;
            match declared {
                Ok(()) => check
                    .facts
                    .push(format!("exchange {} exists", self.exchange)),
                Err(e) => {
                    return Check::failed(format!(
                        "exchange {}: {}",
                        self.exchange,
                        of_error(&e, Failure::Io).detail
                    ));
                }
            }
        }
        let _ = passive.close(200, "checked".into()).await;
        let tx = match channel("a channel").await {
            Ok(ch) => ch,
            Err(c) => return c,
        };
        let dry = async {
            tx.tx_select().await?;
            let _confirm = tx
                .basic_publish(
                    self.exchange.as_str().into(),
                    key.as_str().into(),
                    BasicPublishOptions::default(),
                    b"",
                    BasicProperties::default(),
                )
                .await?;
            tx.tx_rollback().await
        };
        match dry.await {
            Ok(()) => check.facts.push(format!(
                "a dry publish with routing key {key} was taken (in a transaction rolled back: nothing routed); whether a binding takes it, the first publish tells (unroutable: refused, not-found)"
            )),
            Err(e) => {
                check.ok = false;
                check.facts.push(format!(
                    "a dry publish with routing key {key} failed: {}",
                    of_error(&e, Failure::Io).detail
                ));
            }
        }
        let _ = tx.close(200, "checked".into()).await;
        check
    }
}

/// What a lapin error means; `otherwise` is the kind of an I/O failure (`connect`
/// while connecting, `io` after). The detail holds the broker's reply code and
/// text, never a credential.
fn of_error(e: &lapin::Error, otherwise: Failure) -> Failed {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(err) => {
            let said = format!("{} {}", err.get_id(), err.get_message().as_str());
            match err.kind() {
                AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND) => Failed::new(
                    Failure::NotFound,
                    format!("not-found: the broker has no such exchange ({said})"),
                ),
                AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => Failed::new(
                    Failure::AuthRefused,
                    format!("auth-refused: the broker refused access ({said})"),
                ),
                AMQPErrorKind::Soft(AMQPSoftError::CONTENTTOOLARGE) => Failed::new(
                    Failure::TooLarge,
                    format!("too-large: the broker refused the message's size ({said})"),
                ),
                _ => Failed::new(
                    Failure::Io,
                    format!("io: the broker closed the channel ({said})"),
                ),
            }
        }
        lapin::ErrorKind::AuthProviderError(_) => Failed::new(
            Failure::AuthRefused,
            "auth-refused: the credentials cannot be used",
        ),
        lapin::ErrorKind::IOError(io) if otherwise == Failure::Connect => Failed::new(
            Failure::Connect,
            format!("connect: the broker cannot be reached ({})", io.kind()),
        ),
        _ => Failed::new(
            otherwise,
            format!("{otherwise}: the connection to the broker failed"),
        ),
    }
}

/// A failure before or during a publish as an outcome: no exchange and a size the
/// broker refuses are final; refused credentials and the rest are retried.
fn outcome_of(failed: Failed) -> Outcome {
    match failed.kind {
        Failure::NotFound | Failure::TooLarge => Outcome::Refused(failed),
        Failure::AuthRefused => Outcome::Unavailable {
            failed,
            retry_after: None,
        },
        Failure::Timeout => Outcome::TimedOut(failed),
        _ => Outcome::Unreachable(failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_exchange_and_too_large_are_final_and_the_rest_is_retried() {
        let f = |k| Failed::new(k, "x");
        assert!(matches!(
            outcome_of(f(Failure::NotFound)),
            Outcome::Refused(_)
        ));
        assert!(matches!(
            outcome_of(f(Failure::TooLarge)),
            Outcome::Refused(_)
        ));
        assert!(matches!(
            outcome_of(f(Failure::AuthRefused)),
            Outcome::Unavailable { .. }
        ));
        assert!(matches!(
            outcome_of(f(Failure::Timeout)),
            Outcome::TimedOut(_)
        ));
        assert!(matches!(
            outcome_of(f(Failure::Connect)),
            Outcome::Unreachable(_)
        ));
        assert!(matches!(
            outcome_of(f(Failure::Io)),
            Outcome::Unreachable(_)
        ));
    }

    #[test]
    fn broker_errors_are_classified_by_their_reply_code() {
        use lapin::protocol::AMQPError;
        let protocol = |kind: AMQPErrorKind, text: &str| {
            lapin::Error::from(lapin::ErrorKind::ProtocolError(AMQPError::new(
                kind,
                text.into(),
            )))
        };
        let gone = of_error(
            &protocol(
                AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND),
                "NOT_FOUND - no exchange 'x'",
            ),
            Failure::Io,
        );
        assert_eq!(gone.kind, Failure::NotFound);
        assert!(gone.detail.contains("404"), "{}", gone.detail);
        let denied = of_error(
            &protocol(
                AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED),
                "ACCESS_REFUSED",
            ),
            Failure::Connect,
        );
        assert_eq!(denied.kind, Failure::AuthRefused);
        let io = lapin::Error::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(of_error(&io, Failure::Connect).kind, Failure::Connect);
        assert_eq!(of_error(&io, Failure::Io).kind, Failure::Io);
    }
}
