//! The console: hookgate in a browser, served on the admin listener under
//! `/console/` (`GET /` redirects there). Server-rendered HTML, a stylesheet
//! compiled into the binary, no build step beyond `cargo build`.
//!
//! It has the admin API's semantics and calls the same functions the API's handlers
//! do (never the API over HTTP). Its safety, because webhook payloads are
//! attacker-controlled and a browser is a confused deputy:
//!
//! * With an admin token, a login form takes the token (compared as the API does,
//!   throttled per client as the API's bearer check is) and sets a signed, expiring,
//!   `HttpOnly`, `SameSite=Strict` session cookie ([`session`]; `__Host-` and
//!   `Secure` when `admin.public_origin` is https); logged out, every page and action
//!   redirects to the login. Every request's session is checked against the store's
//!   revocations, so a logout (or "log out every session") on one gateway holds on
//!   every gateway sharing the store from its next request. Without a token the admin
//!   listener is loopback-only and there is no login.
//! * Every POST must come from a console page of the same origin (scheme, host and
//!   port) and carry its form token ([`cross_site`]).
//! * Actions are audited with the session's id and the client's address.
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
/// The JSON view of a body, for the `stored` fuzz target.
#[cfg(any(test, fuzzing))]
pub(crate) use entry::json_indented;
mod error;
mod form;
mod format;
mod gateways;
mod headers;
mod login;
mod overview;
mod page;
mod posted;
mod rejections;
mod session;
mod sources;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{Redirect, Response};
use axum::routing::{get, post};

use crate::admin::{self, AdminState};
use crate::config::Secret;
use crate::serve::Peer;
use crate::store::Actor;

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

/// The most session cookies of one request whose revocation is looked up.
const MAX_SESSIONS_TRIED: usize = 4;

/// What the console's handlers share. Built once by `app`.
pub struct ConsoleState {
    /// The admin API's state: the store, the sources, the token's digest, the clock.
    admin: Arc<AdminState>,
    auth: Auth,
    /// What the Sources page shows of the configured sources (no secrets), in
    /// configuration order: the console's part of the route table in force.
    sources: crate::live::Live<Vec<SourceView>>,
    /// This process's circuit breaker of a (source, route): the overview shows it.
    breakers: BreakerStates,
    /// `admin.public_origin`: the origin a console POST must name, when it is not
    /// `http://` and the request's host.
    public_origin: Option<String>,
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

/// Who audit records name for the console's actions.
const ACTOR: &str = "console";

/// Who is using the console, once [`require_session`] let them in.
#[derive(Clone)]
enum Visitor {
    LoggedIn(Session, Option<String>),
    /// A console without a token (the client's address).
    Local(Option<String>),
}

impl Visitor {
    /// The actor that audit records name for this visitor's actions: the console,
    /// the session's id, the client's address.
    fn actor(&self) -> Actor {
        let (session, client) = match self {
            Visitor::LoggedIn(s, client) => (Some(s.id().to_string()), client),
            Visitor::Local(client) => (None, client),
        };
        Actor {
            name: ACTOR.to_string(),
            session,
            client: client.clone(),
        }
    }
}

impl ConsoleState {
    /// The console of a gateway with `token` as its admin token (or none), showing
    /// `sources`, reached at `public_origin` (`admin.public_origin`) when set.
    pub fn new(
        admin: Arc<AdminState>,
        token: Option<&Secret>,
        sources: crate::live::Live<Vec<SourceView>>,
        breakers: BreakerStates,
        public_origin: Option<String>,
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
            public_origin,
        })
    }

    /// Whether the console is served over HTTPS (`admin.public_origin`): its
    /// session cookie is then `__Host-` and `Secure`.
    fn secure_cookie(&self) -> bool {
        self.public_origin
            .as_deref()
            .is_some_and(|o| o.starts_with("https://"))
    }

    fn signer(&self) -> &Signer {
        match &self.auth {
            Auth::Token(s) | Auth::Open(s) => s,
        }
    }

    /// The visitor a request from `client` comes from, or `LoggedOut`: the first
    /// session cookie (of either name, among every one presented, so that a cookie
    /// another app on the host set cannot shadow the session) that this console
    /// signed, that has not expired and that the store has not revoked.
    async fn visitor(
        &self,
        headers: &HeaderMap,
        client: Option<String>,
    ) -> Result<Visitor, ConsoleError> {
        let signer = match &self.auth {
            Auth::Open(_) => return Ok(Visitor::Local(client)),
            Auth::Token(signer) => signer,
        };
        let now = self.admin.ops.clock.now_ms();
        let presented = cookies(headers, session::SECURE_COOKIE)
            .chain(cookies(headers, session::COOKIE))
            .filter_map(|v| signer.verify(v, now))
            // A browser sends a handful of cookies at most: bound the store reads.
            .take(MAX_SESSIONS_TRIED);
        for s in presented {
            if !self
                .admin
                .ops
                .store
                .session_revoked(s.id(), s.issued_at())
                .await?
            {
                return Ok(Visitor::LoggedIn(s, client));
            }
        }
        Err(ConsoleError::LoggedOut)
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
        cross_site::same_origin(headers, uri, self.public_origin.as_deref())?;
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
                Visitor::LoggedIn(..) => Some(self.form_token(visitor)),
                Visitor::Local(_) => None,
            },
        }
    }
}

fn bound(visitor: &Visitor) -> Bound<'_> {
    match visitor {
        Visitor::LoggedIn(s, _) => Bound::Session(s),
        Visitor::Local(_) => Bound::Open,
    }
}

/// Every value of cookie `name` in the request's `Cookie` headers, in order.
fn cookies<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(move |(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// The console's routes on the admin listener: `GET /` and everything under
/// `/console`.
pub fn router(state: Arc<ConsoleState>) -> Router {
    let pages = Router::new()
        .route("/", get(overview::show))
        .route("/logout", post(login::logout))
        .route("/logout-all", post(login::logout_all))
        .route("/entries", get(entries::show))
        .route("/entries/live", get(entries::live))
        .route("/entries/{id}", get(entry::show))
        .route("/entries/{id}/{action}", post(entry::action))
        .route("/dead-letters", get(dead_letters::show))
        .route("/dead-letters/replay", post(dead_letters::replay))
        .route("/rejections", get(rejections::show))
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
    let client = admin::client_address(req.extensions().get::<Peer>());
    let visitor = console.visitor(req.headers(), client).await?;
    req.extensions_mut().insert(visitor);
    Ok(next.run(req).await)
}
