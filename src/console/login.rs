//! Logging in and out. With an admin token configured, the login form takes the
//! token, compares it as the admin API compares a bearer token, and answers a
//! session cookie (never the token itself); a wrong token gets the form again with a
//! 401. Logging out clears the cookie. Without a token there is nothing to log into:
//! both go to the overview.

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use super::cross_site::{self, CrossSite, FORM_TOKEN_FIELD};
use super::form::Form;
use super::session::{self, Bound, Signer};
use super::{Auth, ConsoleError, ConsoleState, HOME_PATH, LOGIN_PATH, Visitor, assets, page};

/// The form field that carries the admin token.
const TOKEN_FIELD: &str = "token";

/// `GET /console/login`: the form, unless there is nothing to log into.
pub async fn form(State(console): State<Arc<ConsoleState>>, headers: HeaderMap) -> Response {
    match &console.auth {
        Auth::Token(signer) if console.visitor(&headers).is_err() => {
            page::html(login_page(signer, None))
        }
        _ => Redirect::to(HOME_PATH).into_response(),
    }
}

/// `POST /console/login`: a session for the right token, the form again for a wrong
/// one.
pub async fn submit(
    State(console): State<Arc<ConsoleState>>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Result<Response, ConsoleError> {
    let Auth::Token(signer) = &console.auth else {
        return Ok(Redirect::to(HOME_PATH).into_response());
    };
    cross_site::same_origin(&headers, &uri)?;
    let form = Form::parse(&headers, &body)?;
    let presented = form.get(FORM_TOKEN_FIELD).unwrap_or_default();
    if !signer.form_token_ok(Bound::Login, presented) {
        return Err(CrossSite::FormToken.into());
    }
    let token = form.get(TOKEN_FIELD).unwrap_or_default().trim();
    if !console.admin.token_matches(token) {
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
    let session = signer.issue(console.admin.clock.now_secs(), nonce);
    let cookie = format!(
        "{}={}; Path=/console; Max-Age={}; HttpOnly; SameSite=Strict",
        session::COOKIE,
        session.value(),
        session::LIFETIME_SECS
    );
    tracing::info!("console: logged in");
    Ok(with_cookie(
        Redirect::to(HOME_PATH).into_response(),
        &cookie,
    ))
}

/// `POST /console/logout`: clear the session cookie.
pub async fn logout(
    State(console): State<Arc<ConsoleState>>,
    Extension(visitor): Extension<Visitor>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Result<Response, ConsoleError> {
    let form = Form::parse(&headers, &body)?;
    console.check_post(&visitor, &headers, &uri, &form)?;
    if let Visitor::Local = visitor {
        return Ok(Redirect::to(HOME_PATH).into_response());
    }
    let cookie = format!(
        "{}=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict",
        session::COOKIE
    );
    tracing::info!("console: logged out");
    Ok(with_cookie(
        Redirect::to(LOGIN_PATH).into_response(),
        &cookie,
    ))
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
