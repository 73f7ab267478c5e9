//! The console: hookgate in a browser, served on the admin listener under
//! `/console/` (`GET /` redirects there). Server-rendered HTML, a stylesheet
//! compiled into the binary, no build step beyond `cargo build`.
//!
//! It has the admin API's semantics and calls the same functions the API's handlers
//! do (never the API over HTTP). Its safety, because webhook payloads are
//! attacker-controlled and a browser is a confused deputy:
//!
//! * With an admin token, a login form takes the token (compared as the API does) and
//!   sets a signed, expiring, `HttpOnly`, `SameSite=Strict` session cookie
//!   ([`session`]); logged out, every page and action redirects to the login. Without
//!   a token the admin listener is loopback-only and there is no login.
//! * Every POST must come from a console page of the same origin and carry its form
//!   token ([`cross_site`]).
//! * Every answer carries a strict Content-Security-Policy ([`headers`]); pages
//!   escape every value ([`page`]).
//!
//! `admin::guard` still wraps the whole listener: without a token it lets through
//! only the console's own same-origin requests to `/console/…`.

mod assets;
mod chart;
mod cross_site;
mod dead_letters;
mod entries;
mod entry;
mod error;
mod form;
mod format;
mod headers;
mod login;
mod overview;
mod page;
mod session;
mod sources;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{Redirect, Response};
use axum::routing::{get, post};

use crate::admin::AdminState;
use crate::config::Secret;

pub use error::{ConsoleError, SetupError};
pub use sources::{RouteView, SourceView};

use session::{Bound, Session, Signer};

/// Where the login form is.
pub const LOGIN_PATH: &str = "/console/login";
/// The overview, where a login lands.
pub const HOME_PATH: &str = "/console/";

/// A console form is a few short fields.
const MAX_FORM_BYTES: usize = 16 * 1024;
/// Largest login form body: a token and a form token, read before any session exists.
pub const MAX_LOGIN_BYTES: usize = 4 * 1024;

/// What the console's handlers share. Built once by `app`.
pub struct ConsoleState {
    /// The admin API's state: the store, the sources, the token's digest, the clock.
    admin: Arc<AdminState>,
    auth: Auth,
    /// What the Sources page shows of the configured sources (no secrets), in
    /// configuration order.
    sources: Vec<SourceView>,
    /// This process's circuit breaker of a (source, route): the overview shows it.
    breakers: BreakerStates,
}

/// A route's circuit breaker, as the overview shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerView {
    Closed,
    HalfOpen,
    Open,
}

/// The state of the breaker of `route` of `source` in this process, asked as the
/// overview renders (`app` answers it from the forwarder's routes; the console does
/// not reach into the forwarder).
pub type BreakerStates = Arc<dyn Fn(&str, &str) -> Option<BreakerView> + Send + Sync>;

/// How a browser is recognised.
enum Auth {
    /// A token is configured: a session signed with a key derived from it.
    Token(Signer),
    /// No token (loopback only): nobody logs in; form tokens are signed with a
    /// per-process random key.
    Open(Signer),
}

/// Who is using the console, once [`require_session`] let them in.
#[derive(Clone)]
enum Visitor {
    LoggedIn(Session),
    /// A console without a token.
    Local,
}

impl ConsoleState {
    /// The console of a gateway with `token` as its admin token (or none), showing
    /// `sources`.
    pub fn new(
        admin: Arc<AdminState>,
        token: Option<&Secret>,
        sources: Vec<SourceView>,
        breakers: BreakerStates,
    ) -> Result<ConsoleState, SetupError> {
        let auth = match token {
            Some(t) => Auth::Token(Signer::from_token(t.expose())?),
            None => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key).map_err(SetupError::Random)?;
                Auth::Open(Signer::from_key(&key)?)
            }
        };
        Ok(ConsoleState {
            admin,
            auth,
            sources,
            breakers,
        })
    }

    fn signer(&self) -> &Signer {
        match &self.auth {
            Auth::Token(s) | Auth::Open(s) => s,
        }
    }

    /// The visitor a request comes from, or `LoggedOut`.
    fn visitor(&self, headers: &HeaderMap) -> Result<Visitor, ConsoleError> {
        match &self.auth {
            Auth::Open(_) => Ok(Visitor::Local),
            Auth::Token(signer) => cookie(headers, session::COOKIE)
                .and_then(|v| signer.verify(v, self.admin.clock.now_secs()))
                .map(Visitor::LoggedIn)
                .ok_or(ConsoleError::LoggedOut),
        }
    }

    /// The form token of `visitor`'s forms.
    fn form_token(&self, visitor: &Visitor) -> String {
        self.signer().form_token(bound(visitor))
    }

    /// Refuse a POST that another site may have sent on `visitor`'s behalf.
    fn check_post(
        &self,
        visitor: &Visitor,
        headers: &HeaderMap,
        uri: &Uri,
        form: &form::Form,
    ) -> Result<(), ConsoleError> {
        cross_site::same_origin(headers, uri)?;
        let presented = form.get(cross_site::FORM_TOKEN_FIELD).unwrap_or_default();
        if !self.signer().form_token_ok(bound(visitor), presented) {
            return Err(cross_site::CrossSite::FormToken.into());
        }
        Ok(())
    }

    /// The top bar for `visitor` on page `current`.
    fn chrome(&self, visitor: &Visitor, current: page::Nav) -> page::Chrome {
        page::Chrome {
            current: Some(current),
            logout_token: match visitor {
                Visitor::LoggedIn(_) => Some(self.form_token(visitor)),
                Visitor::Local => None,
            },
        }
    }
}

fn bound(visitor: &Visitor) -> Bound<'_> {
    match visitor {
        Visitor::LoggedIn(s) => Bound::Session(s),
        Visitor::Local => Bound::Open,
    }
}

/// The value of cookie `name`, from the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// The console's routes on the admin listener: `GET /` and everything under
/// `/console`.
pub fn router(state: Arc<ConsoleState>) -> Router {
    let pages = Router::new()
        .route("/", get(overview::show))
        .route("/logout", post(login::logout))
        .route("/entries", get(entries::show))
        .route("/entries/live", get(entries::live))
        .route("/entries/{id}", get(entry::show))
        .route("/entries/{id}/{action}", post(entry::action))
        .route("/dead-letters", get(dead_letters::show))
        .route("/dead-letters/replay", post(dead_letters::replay))
        .route("/sources", get(sources::show))
        .route("/sources/{name}/{action}", post(sources::source_action))
        .route(
            "/sources/{name}/routes/{route}/{action}",
            post(sources::route_action),
        )
        // Only the pages above need a session; the login and the assets do not.
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_session,
        ));
    let console = Router::new()
        .merge(pages)
        .route(
            "/login",
            get(login::form)
                .post(login::submit)
                .layer(DefaultBodyLimit::max(MAX_LOGIN_BYTES)),
        )
        .route("/assets/console.css", get(assets::css))
        .route("/assets/icon.svg", get(assets::icon))
        .route("/assets/console.js", get(assets::script))
        .method_not_allowed_fallback(|| async { ConsoleError::MethodNotAllowed })
        .fallback(|| async { ConsoleError::NotFound })
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        // Outermost, so that every answer has them: pages, redirects, errors, 404s.
        .layer(middleware::map_response(headers::secure))
        .with_state(state);
    Router::new()
        .route("/", get(|| async { Redirect::to(HOME_PATH) }))
        // A service, not a nested router: it keeps its own fallback (an HTML 404
        // with the console's headers) next to the admin API's JSON one.
        .nest_service("/console", console)
}

/// Let a request through with its [`Visitor`], or send it to the login.
async fn require_session(
    State(console): State<Arc<ConsoleState>>,
    mut req: Request,
    next: Next,
) -> Result<Response, ConsoleError> {
    let visitor = console.visitor(req.headers())?;
    req.extensions_mut().insert(visitor);
    Ok(next.run(req).await)
}
