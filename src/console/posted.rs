//! A console POST that passed the cross-site checks: its origin is the console's and
//! its form carries the visitor's form token (see `cross_site`). Every handler of a
//! console action takes a [`Posted`], so none can read a form without the checks,
//! nor forget them: the extractor refuses the request before the handler runs.
//! (The login form, which has no session yet, checks its own token.)

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};

use super::form::Form;
use super::{ConsoleError, ConsoleState, Visitor};

/// The visitor who posted, and the form, checked.
pub(super) struct Posted {
    pub(super) visitor: Visitor,
    pub(super) form: Form,
}

impl FromRequest<Arc<ConsoleState>> for Posted {
    type Rejection = Response;

    async fn from_request(req: Request, console: &Arc<ConsoleState>) -> Result<Self, Response> {
        // Set by `require_session`, which every action's route passes first.
        let visitor = req
            .extensions()
            .get::<Visitor>()
            .cloned()
            .ok_or_else(|| ConsoleError::LoggedOut.into_response())?;
        let (headers, uri) = (req.headers().clone(), req.uri().clone());
        // A body over the form limit is refused as `Bytes` refuses it (413).
        let body = Bytes::from_request(req, console)
            .await
            .map_err(IntoResponse::into_response)?;
        let checked = Form::parse(&headers, &body).and_then(|form| {
            console
                .check_post(&visitor, &headers, &uri, &form)
                .map(|()| form)
        });
        match checked {
            Ok(form) => Ok(Posted { visitor, form }),
            Err(refused) => Err(refused.into_response()),
        }
    }
}
