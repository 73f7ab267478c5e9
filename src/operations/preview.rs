//! See before you send: what a route would send for a stored entry, now, without
//! sending it. For a route with a transform, the program runs on the stored body
//! exactly as a delivery attempt runs it (same workers, same `$meta`, same bounds),
//! so the preview is what the next attempt sends; for a route without one, it is
//! the stored body.

use base64::Engine as _;

use super::dto::{Header, Preview, PreviewOutcome};
use super::{OpError, Operations};
use crate::transform::{Ran, TransformError};

/// What route `route` (or, when the source has one route, that one) would send for
/// entry `id`.
pub async fn preview(ops: &Operations, id: &str, route: Option<&str>) -> Result<Preview, OpError> {
    let entry = ops
        .store
        .get(id)
        .await?
        .ok_or_else(|| OpError::NoSuchEntry(id.to_string()))?;
    let source = ops
        .source(&entry.source)
        .ok_or_else(|| OpError::NoSuchSource(entry.source.clone()))?;
    let route = match route {
        Some(r) if source.has_route(r) => r.to_string(),
        Some(r) => {
            return Err(OpError::NoSuchRoute {
                name: source.name.clone(),
                route: r.to_string(),
            });
        }
        None => match source.routes.as_slice() {
            [only] => only.clone(),
            _ => {
                return Err(OpError::Invalid(format!(
                    "source {:?} has several routes; name one: {{\"route\": \"…\"}}",
                    source.name
                )));
            }
        },
    };
    let transforms = ops.transforms().filter(|t| t.has(&entry.source, &route));
    let Some(transforms) = transforms else {
        let content_type = entry
            .headers
            .iter()
            .find(|h| h.name == "content-type")
            .map(|h| String::from_utf8_lossy(&h.value).into_owned());
        return Ok(sent(route, false, content_type, Vec::new(), &entry.body));
    };
    let meta = || crate::forward::request::transform_meta(&entry, &route);
    match transforms
        .run(&entry.source, &route, meta, &entry.body)
        .await
    {
        None => Err(OpError::TransformUnavailable),
        Some(ran) => of_run(route.clone(), ran).map_err(|_| OpError::TransformUnavailable),
    }
}

/// The preview of a transform's run through `route`; `Err` when no worker could
/// run it (not the program's failure).
pub fn of_run(route: String, ran: Result<Ran, TransformError>) -> Result<Preview, TransformError> {
    let unsent = |outcome, failure, error| Preview {
        route: route.clone(),
        transformed: true,
        outcome,
        content_type: None,
        headers: Vec::new(),
        body: None,
        body_base64: None,
        failure,
        error: Some(error),
    };
    match ran {
        Ok(Ran::Send(s)) => Ok(sent(
            route,
            true,
            Some(s.content_type),
            s.headers
                .into_iter()
                .map(|(name, value)| Header { name, value })
                .collect(),
            &s.body,
        )),
        Ok(Ran::Empty) => Ok(unsent(
            PreviewOutcome::Skip,
            None,
            crate::transform::EMPTY_REASON.into(),
        )),
        Err(e) if !e.is_final() => Err(e),
        Err(e) => Ok(unsent(
            PreviewOutcome::Failed,
            e.failure()
                .map(|k| crate::failure::Failure::Transform(k).name()),
            e.to_string(),
        )),
    }
}

/// A preview of a request that is sent: the body as text when it is UTF-8.
fn sent(
    route: String,
    transformed: bool,
    content_type: Option<String>,
    headers: Vec<Header>,
    body: &[u8],
) -> Preview {
    let (text, b64) = match std::str::from_utf8(body) {
        Ok(t) => (Some(t.to_string()), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(body)),
        ),
    };
    Preview {
        route,
        transformed,
        outcome: PreviewOutcome::Send,
        content_type,
        headers,
        body: text,
        body_base64: b64,
        failure: None,
        error: None,
    }
}
