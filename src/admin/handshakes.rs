//! The secret-handshake handlers of the admin API: arm a source's handshake, read
//! its state, forget an established secret (`crate::operations::handshakes`).

use std::sync::Arc;
use std::time::Duration;

use super::body::Body;
use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};

use super::actor::ApiActor;
use super::entries::json_object;
use super::{AdminState, path_param};
use crate::error::ApiError;
use crate::operations::dto::{ArmHandshake, ArmedHandshake, HandshakeState};
use crate::operations::handshakes;

pub(super) async fn arm(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    name: Result<Path<String>, PathRejection>,
    Body(body): Body,
) -> Result<Json<ArmedHandshake>, ApiError> {
    let name = path_param(name)?;
    let req: ArmHandshake = if body.is_empty() {
        ArmHandshake::default()
    } else {
        arm_request(&body)?
    };
    let within = match req.within_secs {
        None => handshakes::DEFAULT_WINDOW,
        Some(n) => whole_seconds(&n).ok_or_else(|| {
            ApiError::BadRequest("within_secs must be a whole number of seconds".into())
        })?,
    };
    Ok(Json(handshakes::arm(&admin.ops, &name, within, &by).await?))
}

pub(super) async fn show(
    State(admin): State<Arc<AdminState>>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<HandshakeState>, ApiError> {
    Ok(Json(
        handshakes::state(&admin.ops, &path_param(name)?).await?,
    ))
}

pub(super) async fn forget(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<HandshakeState>, ApiError> {
    let (name, id) = path_param(p)?;
    Ok(Json(handshakes::forget(&admin.ops, &name, &id, &by).await?))
}

/// The arming's body: a JSON object with `within_secs` at most. A field it does not
/// know is refused by name, not ignored: `{"within": 5}` would arm for the default
/// ten minutes, not the five seconds meant.
fn arm_request(body: &[u8]) -> Result<ArmHandshake, ApiError> {
    let not_object =
        || ApiError::BadRequest("the body must be a JSON object: {\"within_secs\": 600}".into());
    let serde_json::Value::Object(fields) =
        serde_json::from_slice::<serde_json::Value>(body).map_err(|_| not_object())?
    else {
        return Err(not_object());
    };
    if let Some(unknown) = fields.keys().find(|k| k.as_str() != "within_secs") {
        let shown: String = unknown.escape_debug().take(64).collect();
        return Err(ApiError::BadRequest(format!(
            "unknown field \"{shown}\" in the body: the one field is within_secs (seconds, 1 to 3600)"
        )));
    }
    json_object(body)
        .ok_or_else(|| ApiError::BadRequest("within_secs must be a whole number of seconds".into()))
}

/// A JSON number of whole seconds (`600`, or `600.0`), if it is one.
fn whole_seconds(n: &serde_json::Number) -> Option<Duration> {
    if let Some(secs) = n.as_u64() {
        return Some(Duration::from_secs(secs));
    }
    let f = n.as_f64()?;
    // Past 2^53 an f64 is not a count of seconds anyone means; the range check
    // that follows refuses anything near it anyway.
    (f.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(&f))
        .then(|| Duration::from_secs_f64(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arming_body_refuses_fields_it_does_not_know() {
        let bad = |body: &str| match arm_request(body.as_bytes()) {
            Err(ApiError::BadRequest(why)) => why,
            other => panic!("{body}: {other:?}"),
        };
        assert!(bad(r#"{"within": 5}"#).contains("\"within\""));
        assert!(bad(r#"{"within_secs": 5, "x": 1}"#).contains("\"x\""));
        assert!(bad("[5]").contains("JSON object"));
        assert!(bad("5").contains("JSON object"));
        assert!(bad(r#"{"within_secs": "5"}"#).contains("whole number"));
        let ok = arm_request(br#"{"within_secs": 5}"#).unwrap();
        assert_eq!(ok.within_secs.map(|n| n.to_string()).as_deref(), Some("5"));
        assert!(arm_request(b"{}").unwrap().within_secs.is_none());
    }

    #[test]
    fn whole_seconds_are_taken_as_integers_or_whole_floats() {
        let n = |s: &str| serde_json::from_str::<serde_json::Number>(s).unwrap();
        assert_eq!(whole_seconds(&n("600")), Some(Duration::from_secs(600)));
        assert_eq!(whole_seconds(&n("3.0")), Some(Duration::from_secs(3)));
        assert_eq!(whole_seconds(&n("1e3")), Some(Duration::from_secs(1000)));
        assert_eq!(whole_seconds(&n("2.5")), None);
        assert_eq!(whole_seconds(&n("-1")), None);
        assert_eq!(whole_seconds(&n("1e300")), None);
    }
}
