//! The body of an admin request, read whole. axum's `Bytes` extractor answers 400
//! for every body it could not read, which tells a client whose body stalled past
//! the listener's deadline (`serve::body`) that its request was malformed: this
//! answers 408 for a missed deadline, and as `Bytes` does otherwise.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::serve::BodyDeadline;

/// A request body, read whole (within the listener's body limit).
pub(super) struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Body, Response> {
        match Bytes::from_request(req, state).await {
            Ok(bytes) => Ok(Body(bytes)),
            Err(e) if BodyDeadline::is_cause_of(&e) => Err(ApiError::BodyTimeout.into_response()),
            Err(e) => Err(e.into_response()),
        }
    }
}
