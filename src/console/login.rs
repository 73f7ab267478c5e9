//! Logging in and out. With an admin token configured, the login form takes the
//! token, compares it as the admin API compares a bearer token (throttled per
//! client in the same table: `admin::throttle`), and answers a session cookie
//! (never the token itself); a wrong token gets the form again with a 401, and a
//! client locked out gets a 429 with `Retry-After`. Logging out revokes the session
//! in the store (every gateway sharing it refuses the cookie from then on) and
//! clears the cookie; "log out every session" revokes every session issued until
//! now. Without a token there is nothing to log into: all go to the overview.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use super::cross_site::{self, CrossSite, FORM_TOKEN_FIELD};
use super::form::Form;
use super::posted::Posted;
use super::session::{self, Bound, Signer};
use super::{Auth, ConsoleError, ConsoleState, HOME_PATH, LOGIN_PATH, Visitor, assets, page};
use crate::admin::{self, throttle::LockedOut};
use crate::serve::Peer;

/// The form field that carries the admin token.
const TOKEN_FIELD: &str = "token";

/// `GET /console/login`: the form, unless there is nothing to log into or the
/// visitor is logged in already.
pub async fn form(
    State(console): State<Arc<ConsoleState>>,
    headers: HeaderMap,
) -> Result<Response, ConsoleError> {
    let Auth::Token(signer) = &console.auth else {
        return Ok(Redirect::to(HOME_PATH).into_response());
    };
    match console.visitor(&headers, None).await {
        Ok(_) => Ok(Redirect::to(HOME_PATH).into_response()),
        Err(ConsoleError::LoggedOut) => Ok(page::html(login_page(signer, None))),
        Err(e) => Err(e),
    }
}

/// `POST /console/login`: a session for the right token, the form again for a wrong
/// one.
pub async fn submit(
    State(console): State<Arc<ConsoleState>>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Result<Response, ConsoleError> {
    let Auth::Token(signer) = &console.auth else {
        return Ok(Redirect::to(HOME_PATH).into_response());
    };
    cross_site::same_origin(&headers, &uri, console.public_origin.as_deref())?;
    let form = Form::parse(&headers, &body)?;
    let presented = form.get(FORM_TOKEN_FIELD).unwrap_or_default();
    if !signer.form_token_ok(Bound::Login, presented) {
        return Err(CrossSite::FormToken.into());
    }
    let token = form.get(TOKEN_FIELD).unwrap_or_default().trim();
    let peer = peer.map(|Extension(p)| p);
    let client = peer.map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |p| p.client);
    let matches = console
        .admin
        .check_token(client, token)
        .map_err(|LockedOut { retry_after_secs }| ConsoleError::Throttled { retry_after_secs })?;
    if !matches {
        // Someone guessing can send these in a loop: repeats are counted.
        const MSG: &str = "console: a login with a wrong token was refused";
        if crate::telemetry::throttle::hit(MSG, "") {
            tracing::warn!("{MSG}");
        }
        let again = login_page(signer, Some("That is not the admin token."));
        return Ok((StatusCode::UNAUTHORIZED, page::html(again)).into_response());
    }
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(ConsoleError::Random)?;
    let session = signer.issue(console.admin.ops.clock.now_ms(), nonce);
    let client = admin::client_address(peer.as_ref());
    tracing::info!(
        session = session.id(),
        client = client.as_deref().unwrap_or(""),
        "console: logged in"
    );
    let cookie = session_cookie(&console, session.value(), session::LIFETIME_SECS);
    Ok(with_cookie(
        Redirect::to(HOME_PATH).into_response(),
        &cookie,
    ))
}

/// `POST /console/logout`: revoke the session, clear its cookie.
pub async fn logout(
    State(console): State<Arc<ConsoleState>>,
    Posted { visitor, .. }: Posted,
) -> Result<Response, ConsoleError> {
    let Visitor::LoggedIn(session, client) = &visitor else {
        return Ok(Redirect::to(HOME_PATH).into_response());
    };
    let now = console.admin.ops.clock.now_ms();
    console
        .admin
        .ops
        .store
        .revoke_session(session.id(), session.expires_at(), now)
        .await?;
    tracing::info!(
        session = session.id(),
        client = client.as_deref().unwrap_or(""),
        "console: logged out"
    );
    Ok(logged_out(&console))
}

/// `POST /console/logout-all`: revoke every session issued until now, this one
/// included, on every gateway sharing the store.
pub async fn logout_all(
    State(console): State<Arc<ConsoleState>>,
    Posted { visitor, .. }: Posted,
) -> Result<Response, ConsoleError> {
    let Visitor::LoggedIn(session, client) = &visitor else {
        return Ok(Redirect::to(HOME_PATH).into_response());
    };
    console
        .admin
        .ops
        .store
        .revoke_sessions_until(console.admin.ops.clock.now_ms())
        .await?;
    tracing::warn!(
        session = session.id(),
        client = client.as_deref().unwrap_or(""),
        "console: every session was logged out"
    );
    Ok(logged_out(&console))
}

/// To the login, with the session cookie cleared.
fn logged_out(console: &ConsoleState) -> Response {
    let cookie = session_cookie(console, "", 0);
    with_cookie(Redirect::to(LOGIN_PATH).into_response(), &cookie)
}

/// The `Set-Cookie` value of the session cookie `value`, kept `max_age` seconds:
/// `__Host-`, `Path=/` and `Secure` when the console is served over HTTPS.
fn session_cookie(console: &ConsoleState, value: &str, max_age: i64) -> String {
    if console.secure_cookie() {
        format!(
            "{}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict; Secure",
            session::SECURE_COOKIE
        )
    } else {
        format!(
            "{}={value}; Path=/console; Max-Age={max_age}; HttpOnly; SameSite=Strict",
            session::COOKIE
        )
    }
}

fn with_cookie(mut resp: Response, cookie: &str) -> Response {
    // The value is ours (digits, hex, base64url): always a valid header value.
    if let Ok(v) = HeaderValue::from_str(cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

fn login_page(signer: &Signer, error: Option<&str>) -> Markup {
    page::bare(
        "Log in",
        html! {
            section.card.narrow.login {
                div.login-brand {
                    img src=(assets::ICON_PATH) alt="" width="28" height="28";
                    span { "hookgate" }
                }
                h1 { "Log in to the console" }
                p.muted {
                    "Enter the admin token: the value of the variable named by "
                    code { "admin.token_env" }
                    " (by default "
                    code { "HOOKGATE_ADMIN_TOKEN" }
                    ")."
                }
                @if let Some(e) = error {
                    p.alert #login-error role="alert" { (e) }
                }
                form.stack method="post" action=(LOGIN_PATH) {
                    input type="hidden" name=(FORM_TOKEN_FIELD) value=(signer.form_token(Bound::Login));
                    label for="token" { "Admin token" }
                    input #token type="password" name=(TOKEN_FIELD) required
                        autocomplete="current-password" autofocus
                        aria-invalid=[error.map(|_| "true")]
                        aria-describedby=[error.map(|_| "login-error")];
                    button.primary type="submit" { "Log in" }
                }
            }
        },
    )
}
