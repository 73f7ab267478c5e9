//! Reading a webhook's body under two bounds, and finishing a refused one politely.
//!
//! The per-request bound is `server.max_body_bytes`. The second bound is shared: every
//! body in flight holds a reservation on one byte budget (`server.body_budget_bytes`),
//! taken before its bytes are read (the declared `Content-Length` up front; a chunked
//! body grows its reservation as it arrives). When the budget is spent the request is
//! answered 503 with `Retry-After` instead of being buffered, so a crowd of slow or
//! stalled uploads costs at most the budget, never an out-of-memory kill. No source
//! may hold more than half of the budget ([`SourceShare`]), so a flood aimed at one
//! source leaves room for the others, and no client (an address, or an IPv6 prefix:
//! `serve::client_of`) more than a quarter of a source's share, so one address
//! cannot spend a source's share and refuse everyone else's webhooks. The body is read
//! into one buffer sized from the declared length (no second copy).
//!
//! Clients are not always told apart (behind a proxy that does not say who the
//! client is), and a few addresses can hold a source's whole share between them
//! with uploads trickled just above the minimum rate. So when a source's share is
//! full, a new body does not give up at once: the body of that source that has been
//! reading longest (at least [`SHED_MIN_AGE`]) and holds more than the new one asks
//! for is shed, as connections are shed, and its bytes go to the new one. A webhook reads in milliseconds; what has been
//! reading for seconds while the share is full is a slow upload, and it is answered
//! 503 (its connection closed) so that the provider's webhooks keep getting 200.
//! Shedding is counted (`hookgate_ingest_bodies_shed_total`).
//!
//! Bodies that stop arriving are cut off below this module, where every request body
//! is read (`serve::BodyDeadline`: a first-byte deadline and a minimum rate); here a
//! body past one of those is answered 408, as one past `server.body_read_timeout`.
//!
//! A request refused before its body was read (413, 401 without a signature header,
//! 503 over budget) still has bytes on the wire. Closing the connection on them makes
//! the kernel answer the client's next segments with a reset, and many clients (Python's
//! `urllib`, most HTTP libraries that send the whole body before reading) then report a
//! broken pipe instead of the answer. So the rest of the body is read and thrown away,
//! up to [`DRAIN_MAX_BYTES`] and [`DRAIN_MAX_TIME`], while the answer goes out; past
//! either bound the connection is closed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::serve::BodyDeadline;

/// Most bytes of a refused request's body read and discarded so that the client sees
/// the answer.
pub const DRAIN_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Longest a refused request's body is drained.
pub const DRAIN_MAX_TIME: Duration = Duration::from_secs(10);
/// How much a chunked body's reservation grows at a time.
const GROW_STEP: usize = 64 * 1024;
/// One client holds at most this fraction of a source's share (and at least one body
/// of the largest size).
pub const CLIENT_SHARE_DIVISOR: usize = 4;
/// Only a body that has been reading at least this long is shed for another.
pub const SHED_MIN_AGE: Duration = Duration::from_secs(1);
/// How long a body waits for the bytes of the bodies shed for it.
const SHED_WAIT: Duration = Duration::from_secs(2);
/// How often a waiting body sheds one more.
const SHED_STEP: Duration = Duration::from_millis(50);

/// The byte budget shared by every body in flight.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    bytes: Arc<Semaphore>,
    total: usize,
}

/// The part of the budget one source may hold: half of it (at least one body of the
/// largest size), and of that, what each client holds.
#[derive(Debug, Clone)]
pub struct SourceShare {
    bytes: Arc<Semaphore>,
    /// The bodies being read, so that the one reading longest can be shed.
    readers: Arc<Readers>,
    /// `hookgate_ingest_bodies_shed_total` of the source.
    shed: metrics::Counter,
    /// `None`: clients are not told apart (`server.max_connections_per_client = 0`,
    /// behind a proxy every request comes from the proxy).
    clients: Option<Arc<ClientBytes>>,
}

/// The bodies of one source being read: when each started, and how to shed it.
#[derive(Debug, Default)]
struct Readers {
    next: AtomicU64,
    /// Per body: when it started, the bytes it held then, and how to shed it.
    reading: Mutex<HashMap<u64, (Instant, usize, CancellationToken)>>,
}

impl Readers {
    #[allow(clippy::type_complexity)]
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Instant, usize, CancellationToken)>> {
        self.reading.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shed the body reading longest, if one has read for [`SHED_MIN_AGE`], holds
    /// more than the `asking` bytes and is not `except` (the body asking); whether
    /// one was. Only a smaller body sheds a larger one: uploads of one size never
    /// shed each other (a crowd of them, reconnecting as fast as they are shed,
    /// would otherwise keep every upload too young to shed), while a webhook of a few
    /// KiB sheds any upload.
    fn shed_longest(&self, except: Option<u64>, asking: usize) -> bool {
        let mut reading = self.lock();
        let now = Instant::now();
        let longest = reading
            .iter()
            .filter(|(id, (started, held, _))| {
                Some(**id) != except
                    && *held > asking
                    && now.duration_since(*started) >= SHED_MIN_AGE
            })
            .min_by_key(|(_, (started, _, _))| *started)
            .map(|(id, _)| *id);
        match longest.and_then(|id| reading.remove(&id)) {
            Some((_, _, token)) => {
                token.cancel();
                true
            }
            None => false,
        }
    }
}

/// A body being read, in its source's [`Readers`] until dropped.
struct Reading {
    readers: Arc<Readers>,
    id: u64,
    shed: CancellationToken,
}

impl Reading {
    /// A body that holds `held` bytes as it starts.
    fn start(readers: &Arc<Readers>, held: usize) -> Reading {
        let id = readers.next.fetch_add(1, Ordering::Relaxed);
        let shed = CancellationToken::new();
        readers
            .lock()
            .insert(id, (Instant::now(), held, shed.clone()));
        Reading {
            readers: readers.clone(),
            id,
            shed,
        }
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.readers.lock().remove(&self.id);
    }
}

/// The bytes each client holds of one source's share.
#[derive(Debug)]
struct ClientBytes {
    cap: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// Bytes of the budget held by one request; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    permits: Vec<OwnedSemaphorePermit>,
    bytes: usize,
    /// Whose bytes these are, when clients are told apart.
    client: Option<ClientHold>,
}

/// A request's bytes in its client's account; taken out when dropped.
#[derive(Debug)]
struct ClientHold {
    clients: Arc<ClientBytes>,
    client: IpAddr,
    bytes: usize,
}

impl ClientBytes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Add `n` bytes to `client`'s account, or false when that would pass the cap.
    fn try_add(&self, client: IpAddr, n: usize) -> bool {
        let mut held = self.lock();
        let now = held.get(&client).copied().unwrap_or(0);
        if now.saturating_add(n) > self.cap {
            return false;
        }
        held.insert(client, now + n);
        true
    }

    fn remove(&self, client: IpAddr, n: usize) {
        let mut held = self.lock();
        if let Some(bytes) = held.get_mut(&client) {
            *bytes = bytes.saturating_sub(n);
            if *bytes == 0 {
                held.remove(&client);
            }
        }
    }
}

impl Drop for ClientHold {
    fn drop(&mut self) {
        self.clients.remove(self.client, self.bytes);
    }
}

impl BodyBudget {
    /// A budget of `bytes` (at least one byte; at most what a semaphore can count).
    pub fn new(bytes: usize) -> BodyBudget {
        let total = bytes.clamp(1, Semaphore::MAX_PERMITS);
        BodyBudget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// The share of `source`: half the budget, and at least `max_body` bytes; with
    /// `per_client`, each client holds at most a quarter of it (at least `max_body`).
    pub fn share(&self, source: &str, max_body: usize, per_client: bool) -> SourceShare {
        let bytes = (self.total / 2).max(max_body).min(self.total);
        SourceShare {
            bytes: Arc::new(Semaphore::new(bytes)),
            readers: Arc::default(),
            shed: {
                let shed = metrics::counter!("hookgate_ingest_bodies_shed_total", "source" => source.to_string());
                shed.increment(0);
                shed
            },
            clients: per_client.then(|| {
                Arc::new(ClientBytes {
                    cap: (bytes / CLIENT_SHARE_DIVISOR).max(max_body),
                    held: Mutex::new(HashMap::new()),
                })
            }),
        }
    }

    /// Bytes of the budget not reserved.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// An empty reservation for a request of `client` (when known), to grow.
    pub fn none(&self, share: &SourceShare, client: Option<IpAddr>) -> Reservation {
        Reservation {
            permits: Vec::new(),
            bytes: 0,
            client: match (&share.clients, client) {
                (Some(clients), Some(client)) => Some(ClientHold {
                    clients: clients.clone(),
                    client,
                    bytes: 0,
                }),
                _ => None,
            },
        }
    }

    /// Add `n` bytes to `r`, from its client's part of the source's share, from the
    /// source's share and from the budget. When the source's share is full, shed
    /// the source's bodies reading longest (not `reading`, the asker's own) and wait
    /// up to [`SHED_WAIT`] for their bytes; refuse when that does not free enough,
    /// or at once when the client's part or the budget lacks them.
    pub async fn reserve(
        &self,
        share: &SourceShare,
        r: &mut Reservation,
        n: usize,
        reading: Option<u64>,
    ) -> Result<(), ApiError> {
        if n == 0 {
            return Ok(());
        }
        let n32 = u32::try_from(n).map_err(|_| ApiError::Busy)?;
        if let Some(hold) = &mut r.client {
            if !hold.clients.try_add(hold.client, n) {
                return Err(ApiError::Busy);
            }
            hold.bytes += n;
        }
        let taken = self.take(share, n32, reading).await;
        if taken.is_err()
            && let Some(hold) = &mut r.client
        {
            hold.clients.remove(hold.client, n);
            hold.bytes -= n;
        }
        let (from_share, from_budget) = taken?;
        r.permits.push(from_share);
        r.permits.push(from_budget);
        r.bytes += n;
        Ok(())
    }

    /// `n` bytes from the source's share (shedding for them when it is full) and
    /// from the budget.
    async fn take(
        &self,
        share: &SourceShare,
        n32: u32,
        reading: Option<u64>,
    ) -> Result<(OwnedSemaphorePermit, OwnedSemaphorePermit), ApiError> {
        let from_share = match share.bytes.clone().try_acquire_many_owned(n32) {
            Ok(permit) => permit,
            Err(_) => share.shed_for(n32, reading).await?,
        };
        let from_budget = self
            .bytes
            .clone()
            .try_acquire_many_owned(n32)
            .map_err(|_| ApiError::Busy)?;
        Ok((from_share, from_budget))
    }
}

impl SourceShare {
    /// `n32` bytes of the share once the bodies reading longest are shed, one at a
    /// time, within [`SHED_WAIT`]; busy when there is none to shed or their bytes do
    /// not come back in time. The bytes are waited for in the share's queue, so
    /// what a shed body gives back goes to the body that shed it, not to an upload
    /// reconnecting meanwhile (which cannot shed, being no smaller than the others).
    async fn shed_for(
        &self,
        n32: u32,
        reading: Option<u64>,
    ) -> Result<OwnedSemaphorePermit, ApiError> {
        let asking = usize::try_from(n32).unwrap_or(usize::MAX);
        let deadline = tokio::time::Instant::now() + SHED_WAIT;
        let acquire = self.bytes.clone().acquire_many_owned(n32);
        tokio::pin!(acquire);
        let mut shed_any = false;
        loop {
            if self.readers.shed_longest(reading, asking) {
                self.shed.increment(1);
                shed_any = true;
            } else if !shed_any {
                // Nothing to shed: the share is held by bodies read in time (being
                // verified and stored), or too young or too small to shed.
                return Err(ApiError::Busy);
            }
            // A shed body gives its bytes back as soon as its task sees it shed.
            let step = (tokio::time::Instant::now() + SHED_STEP).min(deadline);
            match tokio::time::timeout_at(step, &mut acquire).await {
                Ok(Ok(permit)) => return Ok(permit),
                Ok(Err(_)) => return Err(ApiError::Busy),
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    return Err(ApiError::Busy);
                }
                Err(_) => {}
            }
        }
    }
}

/// The declared `Content-Length`, when there is a valid one.
pub fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// A body read in full, with the reservation that covers it.
pub struct ReadBody {
    pub bytes: Bytes,
    pub reservation: Reservation,
}

/// Why a body could not be read, with what is left of it to drain (when draining it
/// lets the client read the answer).
pub struct ReadError {
    pub error: ApiError,
    pub rest: Option<Body>,
}

/// Read `body` (its declared length `declared`, if any, is within `limit` and already
/// reserved in `reservation`) within `timeout`, growing the reservation for bytes
/// beyond it.
pub async fn read(
    body: Body,
    declared: Option<u64>,
    limit: usize,
    timeout: Duration,
    budget: &BodyBudget,
    share: &SourceShare,
    mut reservation: Reservation,
) -> Result<ReadBody, ReadError> {
    let capacity = declared
        .and_then(|d| usize::try_from(d).ok())
        .unwrap_or(0)
        .min(limit);
    let mut buf = BytesMut::with_capacity(capacity);
    let mut body = body;
    let reading = Reading::start(&share.readers, reservation.bytes);
    let outcome = tokio::time::timeout(timeout, async {
        loop {
            let frame = tokio::select! {
                frame = body.frame() => frame,
                () = reading.shed.cancelled() => return Err(ApiError::Busy),
            };
            let Some(frame) = frame else { break };
            let frame = frame.map_err(|e| {
                if BodyDeadline::is_cause_of(&e) {
                    ApiError::BodyTimeout
                } else {
                    ApiError::BodyRead
                }
            })?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            let len = buf.len() + data.len();
            if len > limit {
                return Err(ApiError::TooLarge { limit });
            }
            if len > reservation.bytes {
                let more = (len - reservation.bytes).max(GROW_STEP.min(limit - reservation.bytes));
                budget
                    .reserve(share, &mut reservation, more, Some(reading.id))
                    .await?;
            }
            buf.extend_from_slice(&data);
        }
        Ok(())
    })
    .await;
    match outcome {
        Ok(Ok(())) => Ok(ReadBody {
            bytes: buf.freeze(),
            reservation,
        }),
        // Shed: the rest of a slow upload is not waited for.
        Ok(Err(ApiError::Busy)) if reading.shed.is_cancelled() => Err(ReadError {
            error: ApiError::Busy,
            rest: None,
        }),
        Ok(Err(error)) => {
            let rest = matches!(error, ApiError::TooLarge { .. } | ApiError::Busy).then_some(body);
            Err(ReadError { error, rest })
        }
        Err(_) => Err(ReadError {
            error: ApiError::BodyTimeout,
            rest: None,
        }),
    }
}

/// Read and discard what is left of a refused request's body, within
/// [`DRAIN_MAX_BYTES`] and [`DRAIN_MAX_TIME`], in the background; the answer is sent
/// meanwhile. A body declared longer than the bound is not drained: the connection
/// closes after the answer.
pub fn drain(body: Body, declared: Option<u64>) {
    if declared.is_some_and(|d| d > DRAIN_MAX_BYTES) || declared == Some(0) {
        return;
    }
    tokio::spawn(async move {
        let mut body = body;
        let mut read = 0u64;
        let _ = tokio::time::timeout(DRAIN_MAX_TIME, async {
            while let Some(Ok(frame)) = body.frame().await {
                if let Some(data) = frame.data_ref() {
                    read += data.len() as u64;
                    if read > DRAIN_MAX_BYTES {
                        break;
                    }
                }
            }
        })
        .await;
    });
}
