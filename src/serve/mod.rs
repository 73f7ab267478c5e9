//! The HTTP listener loop: hyper HTTP/1.1 with the protections axum's `serve` lacks.
//!
//! A webhook endpoint faces the internet, so each connection gets a header read
//! timeout (a client dribbling headers is cut off), a cap on header count (hyper
//! answers 431 above it), and the number of open connections is bounded. A client
//! that half-closes after its request still gets its answer. On shutdown
//! the loop stops accepting, lets in-flight requests finish, and gives up after
//! `grace`.
//!
//! Connections that send nothing are the cheapest attack on a bounded listener:
//! thousands of them fill `max_connections` and a signed webhook waits until the
//! header read timeout frees a slot. So the bound has two more parts, each in a
//! module of its own:
//! - `clients`: no client (an IPv4 address, an IPv6 prefix) holds more than
//!   `max_connections_per_client` connections; one over that is closed at accept,
//!   before a byte is read.
//! - `idle`: near `max_connections`, a new connection does not wait; the connection
//!   that has been idle (no request in progress) the longest is shed to make room,
//!   never-used connections before those that have answered a request. `tracked` is
//!   how a connection knows: it wraps the service, which hyper calls once a request
//!   head is parsed.
//! - `body`: a request body must keep arriving (a first-byte deadline, a minimum
//!   rate, and on the admin listener a total bound), and when every connection slot
//!   is busy the most stalled body is shed for the new connection, so requests that
//!   send a head and then nothing cannot hold the listener either. A request whose
//!   body has been read (its handler verifying or storing) is never shed.
//!
//! Refusals and sheds are counted (`hookgate_connections_refused_total`,
//! `hookgate_connections_shed_total`) and logged through `telemetry::throttle` (once,
//! then a count per 10 s), so a flood never turns into a log line per connection.

mod body;
mod clients;
pub mod forwarded;
mod idle;
mod tracked;

pub use body::{BodyDeadline, BodyLimits};
pub use clients::client_of;

/// The listeners whose connections and request bodies are counted.
pub const LISTENERS: [&str; 3] = ["ingest", "admin", "probes"];

/// Register the listeners' metric families with their zero series, for every
/// listener and reason, so that the first scrape lists them all.
pub fn register_metrics() {
    use metrics::{counter, gauge};
    for listener in LISTENERS {
        for reason in BodyDeadline::ALL {
            counter!("hookgate_request_bodies_cut_total", "listener" => listener, "reason" => reason.label()).increment(0);
        }
        gauge!("hookgate_connections_open", "listener" => listener).increment(0.0);
        gauge!("hookgate_connections_idle", "listener" => listener).increment(0.0);
        counter!("hookgate_connections_shed_total", "listener" => listener).increment(0);
        for reason in RefusalReason::ALL {
            counter!("hookgate_connections_refused_total", "listener" => listener, "reason" => reason.label()).increment(0);
        }
    }
}

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::telemetry::{label_values, throttle};
use body::{CutCounters, Reading, Watch};
use clients::{ClientSlot, ClientSlots};
use idle::IdleConnections;
use tracked::Tracked;

/// Largest read buffer of one connection.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Shedding starts when at most `max_connections / SHED_MARGIN_DIVISOR` connection
/// slots are free (the last sixteenth; at the cap itself below 16 connections): each
/// new connection then sheds one idle connection and finds a free slot at once,
/// instead of waiting for the shed connection to close.
pub const SHED_MARGIN_DIVISOR: usize = 16;

/// A connection is shed only once it has waited this long for a request head (idle)
/// or for its body's next byte (stalled): one just accepted or just answered may be
/// about to send, and a body that is arriving is never between two reads this long.
pub const SHED_AFTER: Duration = Duration::from_millis(200);

/// Refused and shed connections are logged at most once per this interval, with how
/// many there were since the last line; the metrics count each one.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Connection-level limits.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    pub header_read_timeout: Duration,
    pub max_headers: usize,
    pub max_connections: usize,
    /// Most connections one client (an IPv4 address, an IPv6 prefix) may hold open;
    /// `None`: no per-client cap.
    pub max_connections_per_client: Option<usize>,
    /// Leading bits of an IPv6 address that make one client.
    pub client_ipv6_prefix: u8,
    /// The deadlines of request bodies.
    pub body: BodyLimits,
    /// How long in-flight requests may take to finish after shutdown starts.
    pub grace: Duration,
}

/// Who sent a request: a request extension every request on both listeners carries,
/// so that a handler can bound or audit per client without asking the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The connection's remote address.
    pub addr: SocketAddr,
    /// The client it counts as ([`client_of`]): the key of every per-client bound.
    pub client: IpAddr,
}

label_values! {
    /// Why a connection was closed at accept: label `reason` of
    /// `hookgate_connections_refused_total`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RefusalReason {
        /// Its client already held `server.max_connections_per_client` connections.
        PerClient => "per_client",
    }
}

/// One listener's connection metrics (label `listener`; registered at zero with the
/// other families, in `telemetry::register_families`).
struct ListenerMetrics {
    open: metrics::Gauge,
    idle: metrics::Gauge,
    refused_per_client: metrics::Counter,
    shed: metrics::Counter,
}

impl ListenerMetrics {
    fn register(listener: &'static str) -> ListenerMetrics {
        use metrics::{counter, gauge};
        let open = gauge!("hookgate_connections_open", "listener" => listener);
        let idle = gauge!("hookgate_connections_idle", "listener" => listener);
        let shed = counter!("hookgate_connections_shed_total", "listener" => listener);
        open.increment(0.0);
        idle.increment(0.0);
        shed.increment(0);
        ListenerMetrics {
            open,
            idle,
            refused_per_client: counter!(
                "hookgate_connections_refused_total",
                "listener" => listener,
                "reason" => RefusalReason::PerClient.label()
            ),
            shed,
        }
    }
}

/// Serve `router` on `listener` until `shutdown` is cancelled, then drain.
pub async fn serve(
    name: &'static str,
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: CancellationToken,
) {
    let state = ListenerState::new(name, router, limits);
    let graceful = GracefulShutdown::new();
    loop {
        let Some((stream, peer)) = accept(&listener, name, &shutdown).await else {
            break;
        };
        // Over its client's cap: closed before a byte is read, and before it could
        // wait for (or shed anything to get) a connection slot.
        let client_slot = match &state.clients {
            None => None,
            Some(clients) => match clients.try_take(peer.ip()) {
                Some(slot) => Some(slot),
                None => {
                    drop(stream);
                    state.refused_per_client(peer.ip());
                    continue;
                }
            },
        };
        let Some(permit) = state.connection_slot(&shutdown).await else {
            break;
        };
        state.spawn_connection(stream, peer, permit, client_slot, &graceful);
    }
    drop(listener);
    tracing::info!(
        listener = name,
        "stopped accepting; draining in-flight requests"
    );
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!(listener = name, "drained"),
        _ = tokio::time::sleep(state.limits.grace) => {
            tracing::warn!(listener = name, grace = ?state.limits.grace, "drain timed out; closing remaining connections")
        }
    }
}

/// The next connection, or `None` once `shutdown` is cancelled. A failed accept
/// (EMFILE and friends) is logged and retried after a pause instead of spinning.
async fn accept(
    listener: &TcpListener,
    name: &'static str,
    shutdown: &CancellationToken,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            r = listener.accept() => match r {
                Ok(s) => return Some(s),
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    const MSG: &str = "accept failed";
                    if throttle::hit(MSG, name) {
                        tracing::warn!(listener = name, error = %e, "{MSG}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

/// The HTTP/1.1 connection settings of a listener with `limits`.
fn http1_builder(limits: &HttpLimits) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_headers(limits.max_headers)
        // The connection's read buffer: it bounds the header block (431 beyond) and
        // what one connection buffers of a body before ingest takes it, so that
        // `max_connections` × this is the most the read side can hold.
        .max_buf_size(READ_BUFFER_BYTES)
        // A client may close its sending side once its request is sent and wait for
        // the answer (a half-close): it still gets one. Without this, hyper reads the
        // end of input as the client gone and drops the answer of a webhook the
        // handler goes on to store.
        .half_close(true)
        .keep_alive(true);
    builder
}

/// What one listener's accept loop keeps across connections: the router, the
/// connection settings, and the bookkeeping of its slots, clients, idle
/// connections and bodies being read.
struct ListenerState {
    name: &'static str,
    router: Router,
    limits: HttpLimits,
    builder: http1::Builder,
    metrics: ListenerMetrics,
    /// One per open connection, `limits.max_connections` in all.
    permits: Arc<Semaphore>,
    /// The per-client caps, when there is one.
    clients: Option<Arc<ClientSlots>>,
    idle: Arc<IdleConnections>,
    reading: Arc<Reading>,
    cut: Arc<CutCounters>,
    /// Free connection slots at or below which an idle connection is shed.
    shed_margin: usize,
}

impl ListenerState {
    fn new(name: &'static str, router: Router, limits: HttpLimits) -> ListenerState {
        let metrics = ListenerMetrics::register(name);
        let permits = Arc::new(Semaphore::new(limits.max_connections));
        let clients = limits
            .max_connections_per_client
            .map(|cap| ClientSlots::new(cap, limits.client_ipv6_prefix));
        let idle = IdleConnections::new(metrics.idle.clone());
        let reading = Reading::new();
        let cut = CutCounters::register(name);
        let shed_margin = limits.max_connections / SHED_MARGIN_DIVISOR;
        let builder = http1_builder(&limits);
        ListenerState {
            name,
            router,
            limits,
            builder,
            metrics,
            permits,
            clients,
            idle,
            reading,
            cut,
            shed_margin,
        }
    }

    /// Count (and log, throttled) a connection closed at accept because its client
    /// already held its share.
    fn refused_per_client(&self, client: IpAddr) {
        let name = self.name;
        self.metrics.refused_per_client.increment(1);
        const MSG: &str = "closed a connection over server.max_connections_per_client at accept";
        if throttle::hit(MSG, name) {
            tracing::warn!(
                listener = name,
                client = %client,
                cap = self.limits.max_connections_per_client,
                "{MSG}"
            );
        }
    }

    /// A connection slot, or `None` once `shutdown` is cancelled. Near the cap, the
    /// connection idle the longest is shed (once per accept) rather than let this
    /// one wait; at the cap with every connection busy, the most stalled body is
    /// shed, else this one waits for a connection to end, to become idle, or for a
    /// body to stall, so that it can be shed.
    async fn connection_slot(&self, shutdown: &CancellationToken) -> Option<OwnedSemaphorePermit> {
        let name = self.name;
        let mut shed = false;
        let mut shed_body = false;
        loop {
            let became_idle = self.idle.became_idle();
            tokio::pin!(became_idle);
            became_idle.as_mut().enable();
            let now = tokio::time::Instant::now();
            if !shed
                && self.permits.available_permits() <= self.shed_margin
                && self.idle.shed_oldest(now)
            {
                shed = true;
                self.metrics.shed.increment(1);
                const MSG: &str =
                    "closed the longest idle connection to make room near server.max_connections";
                if throttle::hit(MSG, name) {
                    tracing::warn!(
                        listener = name,
                        max_connections = self.limits.max_connections,
                        "{MSG}"
                    );
                }
            }
            if let Ok(p) = self.permits.clone().try_acquire_owned() {
                return Some(p);
            }
            if !shed && !shed_body && self.reading.shed_stalled(now) {
                shed_body = true;
                self.cut.count(BodyDeadline::Shed);
                const MSG: &str =
                    "closed the most stalled request body to make room at server.max_connections";
                if throttle::hit(MSG, name) {
                    tracing::warn!(
                        listener = name,
                        max_connections = self.limits.max_connections,
                        "{MSG}"
                    );
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return None,
                p = self.permits.clone().acquire_owned() => return p.ok(),
                _ = became_idle, if !shed => {}
                // A connection may have waited long enough meanwhile.
                _ = tokio::time::sleep(SHED_AFTER / 4), if !shed && !shed_body => {}
            }
        }
    }

    /// Serve one accepted connection on a task of its own, watched by `graceful`;
    /// its slots are given back when it ends or is shed.
    fn spawn_connection(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        permit: OwnedSemaphorePermit,
        client_slot: Option<ClientSlot>,
        graceful: &GracefulShutdown,
    ) {
        let name = self.name;
        let _ = stream.set_nodelay(true);
        let connection = self.idle.accepted();
        let shed_token = connection.shed().clone();
        let peer_ext = Peer {
            addr: peer,
            client: client_of(peer.ip(), self.limits.client_ipv6_prefix),
        };
        let watch = Watch {
            reading: self.reading.clone(),
            client: peer_ext.client,
            shed: shed_token.clone(),
            limits: self.limits.body,
            cut: self.cut.clone(),
        };
        let service = Tracked::new(
            TowerToHyperService::new(self.router.clone()),
            connection.clone(),
            peer_ext,
            watch,
        );
        let conn = self.builder.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        let open = self.metrics.open.clone();
        open.increment(1.0);
        tokio::spawn(async move {
            tokio::select! {
                ended = conn => if let Err(e) = ended {
                    tracing::debug!(listener = name, %peer, error = %e, "connection ended with an error");
                },
                () = shed_token.cancelled() => {
                    tracing::debug!(listener = name, %peer, "shed an idle connection");
                }
            }
            connection.closed();
            open.decrement(1.0);
            drop((permit, client_slot));
        });
    }
}
