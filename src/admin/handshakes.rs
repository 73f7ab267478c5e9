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
use crate::operations::dto::{ArmHandshake, HandshakeState};
use crate::operations::handshakes;

pub(super) async fn arm(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    name: Result<Path<String>, PathRejection>,
    Body(body): Body,
) -> Result<Json<HandshakeState>, ApiError> {
    let name = path_param(name)?;
    let req: ArmHandshake = if body.is_empty() {
        ArmHandshake::default()
    } else {
        json_object(&body).ok_or_else(|| {
            ApiError::BadRequest("the body must be a JSON object: {\"within_secs\": 600}".into())
        })?
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
