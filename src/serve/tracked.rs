//! How a connection learns that it is busy: a hyper service wrapper.
//!
//! hyper calls a connection's service only once it has parsed a complete request
//! head, so the first thing the wrapper does in `call` is mark the connection busy
//! (out of the idle table, never shed). The mark is a guard carried by the response
//! body: hyper drops the body once it has taken all of it (or at once when there is
//! none), and only then does a keep-alive connection, waiting for its next request,
//! become idle again. If the handler fails or the connection goes away mid-request,
//! the guard is dropped with the future.
//!
//! The wrapper also hands every request its [`Peer`], the address it came from, and
//! puts its body under the listener's deadlines ([`super::body::Watched`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use hyper::body::{Body, Frame, SizeHint};

use super::Peer;
use super::body::{Watch, Watched};
use super::idle::{Busy, Connection};

/// A service whose requests mark `connection` busy until their answer is taken.
pub(super) struct Tracked<S> {
    inner: S,
    connection: Arc<Connection>,
    peer: Peer,
    watch: Watch,
}

impl<S> Tracked<S> {
    pub(super) fn new(inner: S, connection: Arc<Connection>, peer: Peer, watch: Watch) -> Self {
        Tracked {
            inner,
            connection,
            peer,
            watch,
        }
    }
}

impl<S, R, B> hyper::service::Service<Request<R>> for Tracked<S>
where
    S: hyper::service::Service<Request<Watched<R>>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    B: 'static,
{
    type Response = Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn call(&self, req: Request<R>) -> Self::Future {
        let busy = self.connection.request_started();
        let head_at = tokio::time::Instant::now();
        let mut req = req.map(|body| Watched::new(body, self.watch.clone(), head_at));
        req.extensions_mut().insert(self.peer);
        let answer = self.inner.call(req);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| TrackedBody { body, _busy: busy }))
        })
    }
}

/// A response body that keeps its connection busy until hyper drops it.
pub(super) struct TrackedBody<B> {
    body: B,
    _busy: Busy,
}

impl<B: Body + Unpin> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
