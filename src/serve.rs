//! The HTTP listener loop: hyper HTTP/1.1 with the protections axum's `serve` lacks.
//!
//! A webhook endpoint faces the internet, so each connection gets a header read
//! timeout (a client dribbling headers is cut off), a cap on header count (hyper
//! answers 431 above it), and the number of open connections is bounded. A client
//! that half-closes after its request still gets its answer. On shutdown
//! the loop stops accepting, lets in-flight requests finish, and gives up after
//! `grace`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Largest read buffer of one connection.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Connection-level limits.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    pub header_read_timeout: Duration,
    pub max_headers: usize,
    pub max_connections: usize,
    /// How long in-flight requests may take to finish after shutdown starts.
    pub grace: Duration,
}

/// Serve `router` on `listener` until `shutdown` is cancelled, then drain.
pub async fn serve(
    name: &'static str,
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut builder = hyper::server::conn::http1::Builder::new();
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
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(listener = name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(listener = name, %peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tracing::info!(
        listener = name,
        "stopped accepting; draining in-flight requests"
    );
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!(listener = name, "drained"),
        _ = tokio::time::sleep(limits.grace) => {
            tracing::warn!(listener = name, grace = ?limits.grace, "drain timed out; closing remaining connections")
        }
    }
}
