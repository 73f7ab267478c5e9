//! A request body that must keep arriving: the deadlines of a body, and the record of
//! bodies being read that the accept loop may shed.
//!
//! A client that sends a complete request head and then nothing holds a busy
//! connection, which idle shedding never touches; with only a total body timeout a
//! few hundred such connections hold every connection slot for that long. So once a
//! handler starts reading a body ([`Watched`] wraps every request's body):
//! - its first byte must arrive within `first_byte` of that moment (the handler may
//!   read late: a waiting `Expect: 100-continue` client is not at fault before it);
//! - after that it must keep a minimum rate: by the time `first_byte + n / min_rate`
//!   has passed, more than `n` bytes must have arrived, so a dribbling client is cut
//!   off as surely as a silent one, and a fast one is never near the bound;
//! - and on a listener with a total bound (the admin listener's
//!   `admin.request_timeout`), it ends within that bound of the request head.
//!
//! A body past a deadline ends with [`BodyDeadline`], which handlers tell apart by
//! type (ingest answers 408). While a body is being read its connection is in
//! [`Reading`]: when every connection slot is busy, the accept loop sheds the body
//! that has waited longest for its next byte, from the client holding the most bodies
//! in progress ([`Reading::shed_stalled`]), instead of making the new connection wait
//! for the stalled one's deadline.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

use super::SHED_AFTER;
use crate::telemetry::label_values;

/// The deadlines of a listener's request bodies.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Longest wait for a body's first byte once the handler reads it.
    pub first_byte: Duration,
    /// Bytes per second a body must keep up after its first byte; 0: no rate.
    pub min_rate: u64,
    /// Longest a whole body may take from the request head; `None`: the handler's own
    /// bound (ingest's `server.body_read_timeout`).
    pub total: Option<Duration>,
}

label_values! {
    /// Which deadline a body missed: label `reason` of `hookgate_request_bodies_cut_total`,
    /// with `shed` for a stalled body closed to make room for a new connection.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum BodyDeadline {
        /// No byte within `first_byte` of the handler's first read.
        FirstByte => "first_byte",
        /// Fewer bytes than the minimum rate allows for the time taken.
        TooSlow => "too_slow",
        /// The listener's total bound on a request.
        Total => "total",
        /// Stalled when every connection slot was busy: closed for a new connection.
        Shed => "shed",
    }
}

impl std::fmt::Display for BodyDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BodyDeadline::FirstByte => "no byte of the request body arrived in time",
            BodyDeadline::TooSlow => "the request body arrived slower than the minimum rate",
            BodyDeadline::Total => "the request took longer than the listener allows",
            BodyDeadline::Shed => "the stalled request body was closed for a new connection",
        })
    }
}

impl std::error::Error for BodyDeadline {}

impl BodyDeadline {
    /// Whether a body error (as a handler sees it through axum, or an extractor's
    /// rejection that keeps it as its cause) is a missed deadline.
    pub fn is_cause_of(e: &(dyn std::error::Error + 'static)) -> bool {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = cause {
            if c.is::<BodyDeadline>() {
                return true;
            }
            cause = c.source();
        }
        false
    }
}

/// The bodies being read on one listener, for shedding the most stalled one.
#[derive(Debug, Default)]
pub(super) struct Reading {
    bodies: Mutex<Bodies>,
}

#[derive(Debug, Default)]
struct Bodies {
    next_key: u64,
    by_key: HashMap<u64, InBody>,
}

#[derive(Debug)]
struct InBody {
    client: IpAddr,
    /// When the body last received a byte (or, before the first, when it was first
    /// read).
    waiting_since: Instant,
    /// Cancels the connection's task.
    shed: CancellationToken,
}

impl Reading {
    pub(super) fn new() -> Arc<Reading> {
        Arc::new(Reading::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Bodies> {
        self.bodies.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, client: IpAddr, shed: CancellationToken, now: Instant) -> u64 {
        let mut b = self.lock();
        let key = b.next_key;
        b.next_key += 1;
        b.by_key.insert(
            key,
            InBody {
                client,
                waiting_since: now,
                shed,
            },
        );
        key
    }

    fn progressed(&self, key: u64, now: Instant) {
        if let Some(body) = self.lock().by_key.get_mut(&key) {
            body.waiting_since = now;
        }
    }

    fn remove(&self, key: u64) {
        self.lock().by_key.remove(&key);
    }

    /// Shed one stalled body (waiting for a byte for at least [`SHED_AFTER`]): of
    /// the client with the most bodies in progress, the one waiting longest. False
    /// when no body is stalled.
    pub(super) fn shed_stalled(&self, now: Instant) -> bool {
        let mut b = self.lock();
        let mut per_client: HashMap<IpAddr, usize> = HashMap::new();
        for body in b.by_key.values() {
            *per_client.entry(body.client).or_default() += 1;
        }
        let victim = b
            .by_key
            .iter()
            .filter(|(_, body)| now.saturating_duration_since(body.waiting_since) >= SHED_AFTER)
            .max_by_key(|(key, body)| {
                (
                    per_client.get(&body.client).copied().unwrap_or(0),
                    std::cmp::Reverse(body.waiting_since),
                    std::cmp::Reverse(**key),
                )
            })
            .map(|(key, _)| *key);
        let Some(key) = victim else {
            return false;
        };
        if let Some(body) = b.by_key.remove(&key) {
            body.shed.cancel();
        }
        true
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_key.len()
    }
}

/// What [`Watched`] reports to: the listener's bodies, the connection's shed token
/// and client, and the counter of bodies cut off.
#[derive(Debug, Clone)]
pub(super) struct Watch {
    pub(super) reading: Arc<Reading>,
    pub(super) client: IpAddr,
    pub(super) shed: CancellationToken,
    pub(super) limits: BodyLimits,
    pub(super) cut: Arc<CutCounters>,
}

/// `hookgate_request_bodies_cut_total{listener, reason}`, one counter per reason.
#[derive(Debug)]
pub(super) struct CutCounters {
    counters: Vec<(BodyDeadline, metrics::Counter)>,
}

impl CutCounters {
    pub(super) fn register(listener: &'static str) -> Arc<CutCounters> {
        Arc::new(CutCounters {
            counters: BodyDeadline::ALL
                .iter()
                .map(|reason| {
                    let c = metrics::counter!(
                        "hookgate_request_bodies_cut_total",
                        "listener" => listener,
                        "reason" => reason.label()
                    );
                    c.increment(0);
                    (*reason, c)
                })
                .collect(),
        })
    }

    pub(super) fn count(&self, reason: BodyDeadline) {
        if let Some((_, c)) = self.counters.iter().find(|(r, _)| *r == reason) {
            c.increment(1);
        }
    }
}

/// A request body under its listener's deadlines.
pub struct Watched<B> {
    inner: B,
    watch: Watch,
    /// When the request head was parsed.
    head_at: Instant,
    state: State,
}

enum State {
    NotRead,
    Reading {
        key: u64,
        first_read: Instant,
        received: u64,
        deadline: Pin<Box<Sleep>>,
        /// Which deadline `deadline` is.
        reason: BodyDeadline,
    },
    Done,
}

impl<B> Watched<B> {
    pub(super) fn new(inner: B, watch: Watch, head_at: Instant) -> Watched<B> {
        Watched {
            inner,
            watch,
            head_at,
            state: State::NotRead,
        }
    }

    /// The next deadline after `received` bytes, first read at `first_read`.
    fn deadline(&self, first_read: Instant, received: u64) -> (Instant, BodyDeadline) {
        let limits = &self.watch.limits;
        let (mut at, mut reason) = if received == 0 {
            (first_read + limits.first_byte, BodyDeadline::FirstByte)
        } else if limits.min_rate == 0 {
            (
                first_read + Duration::from_secs(86_400 * 365),
                BodyDeadline::TooSlow,
            )
        } else {
            let allowed = Duration::from_secs_f64(received as f64 / limits.min_rate as f64);
            (
                first_read + limits.first_byte + allowed,
                BodyDeadline::TooSlow,
            )
        };
        if let Some(total) = limits.total
            && self.head_at + total <= at
        {
            at = self.head_at + total;
            reason = BodyDeadline::Total;
        }
        (at, reason)
    }

    fn finish(&mut self) {
        if let State::Reading { key, .. } = std::mem::replace(&mut self.state, State::Done) {
            self.watch.reading.remove(key);
        }
    }
}

impl<B> Drop for Watched<B> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<B> Body for Watched<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if matches!(this.state, State::Done) {
            return Pin::new(&mut this.inner).poll_frame(cx).map_err(Into::into);
        }
        if matches!(this.state, State::NotRead) {
            let now = Instant::now();
            let key = this
                .watch
                .reading
                .insert(this.watch.client, this.watch.shed.clone(), now);
            let (at, reason) = this.deadline(now, 0);
            this.state = State::Reading {
                key,
                first_read: now,
                received: 0,
                deadline: Box::pin(tokio::time::sleep_until(at)),
                reason,
            };
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && !data.is_empty()
                {
                    let now = Instant::now();
                    let (first_read, received) = match &mut this.state {
                        State::Reading {
                            key,
                            first_read,
                            received,
                            ..
                        } => {
                            *received += data.len() as u64;
                            this.watch.reading.progressed(*key, now);
                            (*first_read, *received)
                        }
                        _ => return Poll::Ready(Some(Ok(frame))),
                    };
                    let (at, next) = this.deadline(first_read, received);
                    if let State::Reading {
                        deadline, reason, ..
                    } = &mut this.state
                    {
                        deadline.as_mut().reset(at);
                        *reason = next;
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish();
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Poll::Pending => {
                let missed = match &mut this.state {
                    State::Reading {
                        deadline, reason, ..
                    } => deadline.as_mut().poll(cx).is_ready().then_some(*reason),
                    _ => None,
                };
                match missed {
                    Some(reason) => {
                        this.finish();
                        this.watch.cut.count(reason);
                        Poll::Ready(Some(Err(Box::new(reason))))
                    }
                    None => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[tokio::test(start_paused = true)]
    async fn the_most_stalled_body_of_the_busiest_client_is_shed_and_a_fresh_one_never() {
        let r = Reading::new();
        let t0 = Instant::now();
        let lone = CancellationToken::new();
        r.insert(ip("10.0.0.9"), lone.clone(), t0);
        let a_old = CancellationToken::new();
        let a_new = CancellationToken::new();
        r.insert(
            ip("10.0.0.1"),
            a_old.clone(),
            t0 + Duration::from_millis(10),
        );
        r.insert(
            ip("10.0.0.1"),
            a_new.clone(),
            t0 + Duration::from_millis(20),
        );
        assert!(
            !r.shed_stalled(t0 + Duration::from_millis(100)),
            "nothing has waited long enough"
        );
        let later = t0 + Duration::from_secs(1);
        assert!(r.shed_stalled(later));
        assert!(
            a_old.is_cancelled(),
            "the busiest client's oldest stalled body"
        );
        assert!(!a_new.is_cancelled() && !lone.is_cancelled());
        // Now each client holds one: the one waiting longest.
        assert!(r.shed_stalled(later));
        assert!(lone.is_cancelled() && !a_new.is_cancelled());
        assert!(r.shed_stalled(later));
        assert!(a_new.is_cancelled());
        assert_eq!(r.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_keeps_arriving_is_not_stalled() {
        let r = Reading::new();
        let t0 = Instant::now();
        let token = CancellationToken::new();
        let key = r.insert(ip("10.0.0.1"), token.clone(), t0);
        r.progressed(key, t0 + Duration::from_secs(5));
        assert!(!r.shed_stalled(t0 + Duration::from_secs(5) + SHED_AFTER / 2));
        r.remove(key);
        assert!(!r.shed_stalled(t0 + Duration::from_secs(60)));
        assert!(!token.is_cancelled());
    }
}
