//! `GET /ingest/{source}`: the endpoint checks providers send as a GET before they
//! send webhooks (Meta's `hub.challenge`, Okta's verification challenge, Dropbox's
//! `challenge`, Trello's `HEAD`). Nothing is stored. Each is answered only as far as it can be
//! checked: Meta's carries the source's `verify_token` (compared in constant time),
//! Okta's carries the source's credential header (verified by the provider's spec);
//! Dropbox's carries nothing to check, so only a short token of safe characters is
//! echoed, as plain text that no browser sniffs into anything else; Trello's `HEAD`
//! carries nothing either, and is answered with an empty 200. A source whose
//! provider checks no endpoint with a GET answers 405, as before.
//!
//! Microsoft Graph checks with a POST instead: `?validationToken=…` and no body,
//! answered with the token before anything is verified ([`graph_validation`]), since
//! it carries nothing to verify; every notification after it is verified as usual.

use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq as _;

use super::{IngestState, Source};
use crate::error::ApiError;
use crate::provider::spec::Handshake;
use crate::provider::verify::{self, VerifyError};

/// The longest challenge echoed.
const MAX_CHALLENGE: usize = 256;

/// Answer a GET to `source`: its provider's endpoint check, or 405.
pub(super) fn answer(
    ingest: &IngestState,
    source: &Source,
    req: &Request<Body>,
) -> Result<Response, ApiError> {
    let kind = match source.verifier.spec.handshake {
        Some(kind) if kind.is_get() => kind,
        _ => return Err(ApiError::MethodNotAllowed),
    };
    let query: Vec<(String, String)> = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    match kind {
        Handshake::MetaSubscribe => {
            let expected = source
                .verify_token
                .as_ref()
                .ok_or(ApiError::Unverified(VerifyError::MissingSignature))?;
            let token = param("hub.verify_token")
                .ok_or(ApiError::Unverified(VerifyError::MissingSignature))?;
            let same = token.len() == expected.expose().len()
                && bool::from(token.as_bytes().ct_eq(expected.expose().as_bytes()));
            if param("hub.mode") != Some("subscribe") || !same {
                return Err(ApiError::Unverified(VerifyError::Mismatch));
            }
            Ok(text(challenge(param("hub.challenge"))?))
        }
        Handshake::OktaVerification => {
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
            source
                .verifier
                .verify(
                    verify::Request {
                        method: "GET",
                        path,
                        url: None,
                        headers: req.headers(),
                        body: b"",
                    },
                    ingest.clock.now_ms().div_euclid(1000),
                )
                .map_err(ApiError::Unverified)?;
            let value = req
                .headers()
                .get("x-okta-verification-challenge")
                .and_then(|v| v.to_str().ok());
            let value = challenge(value)?;
            Ok((
                StatusCode::OK,
                axum::Json(serde_json::json!({ "verification": value })),
            )
                .into_response())
        }
        Handshake::DropboxChallenge => Ok(text(challenge(param("challenge"))?)),
        Handshake::HeadCheck => Ok(text(String::new())),
        _ => Err(ApiError::MethodNotAllowed),
    }
}

/// Microsoft Graph's subscription validation, when `query` and `body` are one: the
/// token (printable ASCII, at most 1024 characters), as plain text.
pub(super) fn graph_validation(
    source: &Source,
    query: Option<&str>,
    body: &[u8],
) -> Option<Result<Response, ApiError>> {
    if source.verifier.spec.handshake != Some(Handshake::GraphValidation) || !body.is_empty() {
        return None;
    }
    let token = form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == "validationToken")
        .map(|(_, v)| v.into_owned())?;
    let fit = !token.is_empty()
        && token.len() <= 1024
        && token.bytes().all(|b| (0x20..0x7f).contains(&b));
    Some(if fit {
        Ok(text(token))
    } else {
        Err(ApiError::BadRequest(
            "the validation token is missing or not printable text".into(),
        ))
    })
}

/// A challenge fit to echo: present, at most [`MAX_CHALLENGE`] characters of
/// `[A-Za-z0-9._~-]`.
fn challenge(value: Option<&str>) -> Result<String, ApiError> {
    match value {
        Some(v)
            if !v.is_empty()
                && v.len() <= MAX_CHALLENGE
                && v.bytes().all(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-')
                }) =>
        {
            Ok(v.to_string())
        }
        _ => Err(ApiError::BadRequest(
            "the endpoint check's challenge is missing or not a short token".into(),
        )),
    }
}

/// 200 with `body` as plain text that a browser does not sniff.
fn text(body: String) -> Response {
    let mut resp = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response();
    resp.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}
