//! The signing key of a request whose provider signs with a fetched key (a
//! certificate's, a key an API gives by id): asked only once the request's unsigned
//! claims could verify, fetched on the source's and the client's budgets, and a
//! failure to get it answered as the provider should see it (401 or 503).

use super::{Head, IngestState, Source};
use crate::error::ApiError;
use crate::provider::certificate::KeyName;
use crate::provider::verify::{self, VerifyError};

/// For a source whose provider signs with a fetched key (a certificate's, a key an
/// API gives by id): that key and the name it is kept under, once the request's
/// unsigned claims could verify at `now` (unix seconds) and the URL it names is one
/// the spec allows; fetched on the budgets of `asker`. `None` for every other
/// scheme.
pub(super) async fn certified_key(
    ingest: &IngestState,
    source: &Source,
    head: Head<'_>,
    url: Option<&str>,
    body: &[u8],
    now: i64,
    asker: crate::provider::certificate::Asker<'_>,
) -> Result<Option<(crate::provider::Key, KeyName)>, ApiError> {
    if !source.verifier.fetches_keys() {
        return Ok(None);
    }
    let req = verify::Request {
        method: head.method.as_str(),
        path: head.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"),
        url,
        headers: head.headers,
        body,
    };
    // Nothing is fetched for a request that would fail whatever the key.
    source.verifier.precheck(req, now)?;
    let asked = match source.verifier.key_request(req) {
        None => return Ok(None),
        Some(Ok(asked)) => asked,
        Some(Err(_)) => return Err(ApiError::Unverified(VerifyError::CertificateUrl)),
    };
    match ingest.fetched_keys.key_for(&asked, asker).await {
        Ok(key) => Ok(Some(key)),
        Err(e) => Err(no_key(e)),
    }
}

/// The answer to a request whose signing key could not be had: 401 when the
/// request named one it may not, 503 (retry) when it could not be fetched now.
fn no_key(e: crate::provider::certificate::FetchedKeyError) -> ApiError {
    use crate::provider::certificate::FetchedKeyError;
    match e {
        FetchedKeyError::Refused => ApiError::Unverified(VerifyError::CertificateUrl),
        FetchedKeyError::Invalid(_) => ApiError::Unverified(VerifyError::CertificateInvalid),
        FetchedKeyError::Unavailable(cause) => ApiError::CertificateUnavailable(cause),
    }
}
