//! The console's errors and the one place where each becomes an answer: an HTML page
//! with its status, or, for a visitor who is not logged in, a redirect to the login.
//!
//! As in the admin API, a 5xx page is generic: the cause goes to the log.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use super::cross_site::CrossSite;
use super::session::KeyError;
use super::{LOGIN_PATH, page};
use crate::store::StoreError;

/// Why a console request was not served. The `Display` text is what the page says.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("there is no such page in the console")]
    NotFound,
    #[error("this page does not take that method")]
    MethodNotAllowed,
    /// A token is configured and the request carries no valid session.
    #[error("log in to use the console")]
    LoggedOut,
    #[error(transparent)]
    CrossSite(#[from] CrossSite),
    /// A form body that is not a form, or lacks a field.
    #[error("the form could not be read: {0}")]
    BadForm(&'static str),
    #[error("the store is unavailable; try again shortly")]
    Store(#[from] StoreError),
    /// Too many wrong tokens came from this client lately (`admin::throttle`).
    #[error("too many failed logins from this address; try again in {retry_after_secs} s")]
    Throttled { retry_after_secs: u64 },
    /// The system's random source failed (a new session needs a nonce).
    #[error("the console could not start a session; try again")]
    Random(#[source] getrandom::Error),
}

/// The console could not be set up at start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("no random source for the console's form tokens")]
    Random(#[source] getrandom::Error),
}

impl ConsoleError {
    pub fn status(&self) -> StatusCode {
        match self {
            ConsoleError::NotFound => StatusCode::NOT_FOUND,
            ConsoleError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ConsoleError::LoggedOut => StatusCode::SEE_OTHER,
            ConsoleError::CrossSite(_) => StatusCode::FORBIDDEN,
            ConsoleError::BadForm(_) => StatusCode::BAD_REQUEST,
            ConsoleError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            ConsoleError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
            ConsoleError::Random(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        match &self {
            ConsoleError::LoggedOut => return Redirect::to(LOGIN_PATH).into_response(),
            ConsoleError::Store(cause) => tracing::error!(error = %cause, "console: store error"),
            ConsoleError::Random(cause) => {
                tracing::error!(error = %cause, "console: no randomness for a session")
            }
            ConsoleError::CrossSite(why) => {
                // A page open in a browser can send these in a loop: repeats are counted.
                const MSG: &str = "console: refused a cross-site request";
                if crate::telemetry::throttle::hit(MSG, &format!("{why:?}")) {
                    tracing::warn!(reason = ?why, "{MSG}");
                }
            }
            _ => {}
        }
        let status = self.status();
        let mut resp =
            (status, page::html(page::problem(status, &self.to_string()))).into_response();
        if let ConsoleError::Throttled { retry_after_secs } = self {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
        }
        resp
    }
}
