//! The rejection log, as operators read it (`GET /admin/rejections`, `hookgate
//! rejections`, the console's Rejections page): the newest refused requests, and
//! every refusal counted per source and reason, each reason with what usually
//! causes it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::dto::{self, RejectionGroup, RejectionGroups, RejectionList};
use super::entries::rfc3339;
use super::{OpError, Operations};
use crate::store::{Rejection, RejectionQuery};

/// How far back the counts go unless asked: a day.
pub const DEFAULT_WINDOW_MS: i64 = 24 * 3_600_000;

/// What usually causes a refusal for `reason`.
pub fn hint(reason: &str) -> &'static str {
    match reason {
        "mismatch" => {
            "The signature does not match the body: usually the source's secret is not the one the provider signs with (a rotated or test-mode secret), or a proxy in front of hookgate rewrote the body (re-encoded JSON, changed line endings, decompressed it)."
        }
        "stale" => {
            "The signature's timestamp is outside the tolerance: the clock of this host or the provider's is off, or the request was held (a queue, a retry long after signing) or replayed."
        }
        "missing_signature" => {
            "No signature header: the sender is not the provider the source expects, the provider has no signing secret set for this endpoint, or a proxy dropped the header."
        }
        "malformed_signature" => {
            "The signature header is not in the provider's format: another provider's scheme, or a proxy that changed the header."
        }
        "missing_timestamp" | "malformed_timestamp" => {
            "The timestamp the provider signs is missing or unreadable: another provider's scheme, or a proxy that dropped or changed the header."
        }
        "missing_signed_value" => {
            "A value the provider signs (a header, a form field or the URL) is missing: check public_url for providers that sign the URL, and that no proxy drops headers."
        }
        "body_digest_mismatch" => {
            "The body does not match the digest the provider signed: a proxy rewrote the body."
        }
        "malformed_form" => "The form body the provider signs cannot be read.",
        "certificate_url" => {
            "The certificate URL the request names is missing or not on the provider's hosts: a forgery, or a provider that moved its certificates (the spec's [certificate] hosts)."
        }
        "certificate_invalid" => {
            "The certificate the request names is not a usable RSA certificate, or is outside its validity period."
        }
        "subscribe_url" => {
            "An SNS subscription confirmation whose SubscribeURL is not an SNS confirmation URL for the message's own topic: a forgery, or SNS moved its endpoints (the spec's [certificate] hosts)."
        }
        "handshake_not_armed" => {
            "A provider's secret handshake (Asana's X-Hook-Secret) while the source's handshake was not armed: arm it (hookgate sources handshake <source>) just before creating the webhook, then create it again; if nobody was creating one, someone tried to plant a secret."
        }
        "handshake_token" => {
            "A provider's secret handshake (Asana's X-Hook-Secret) that did not carry the token of the source's arming (?hookgate_handshake=…): create the webhook with the target URL hookgate sources handshake <source> printed for the arming; if nobody was creating one, someone tried to plant a secret (the arming is still there for the genuine handshake)."
        }
        "too_many_secrets" => {
            "A provider's secret handshake while the source keeps the most established secrets: forget the secrets of webhooks that no longer exist (hookgate sources secrets <source>), then create the webhook again."
        }
        "unknown_source" => {
            "The URL names no configured source: a typo in the URL given to the provider, a source renamed or removed, or a scan of the endpoint."
        }
        "too_large" => {
            "The body is larger than server.max_body_bytes: raise it if the provider sends such bodies."
        }
        "busy" => {
            "The memory shared by request bodies was spent: a burst, or many slow senders; the provider retries."
        }
        "ip_not_allowed" => {
            "The client's address is not in the source's allow_ips (or the provider's published ranges): a sender that is not the provider, a provider range not yet published, or a proxy in front of hookgate missing from server.trusted_proxies."
        }
        "rate_limited" => {
            "The source was over its request limit ([sources.limits] requests): a burst from the provider, or a flood; the sender was told when to retry."
        }
        "body_timeout" | "body_read" => {
            "The body did not arrive in time or the connection broke: a slow or interrupted client, or a network problem on the way."
        }
        _ => "A refusal hookgate does not describe further.",
    }
}

/// The newest refused requests that `query` asks for.
pub async fn list(ops: &Operations, query: &RejectionQuery) -> Result<RejectionList, OpError> {
    let page = ops.store.rejections(query).await?;
    Ok(RejectionList {
        rejections: page.rows.into_iter().map(row).collect(),
        next_cursor: page.next_cursor,
    })
}

/// Every refusal counted since `since` (unix ms), per source and reason.
pub async fn groups(ops: &Operations, since: i64) -> Result<RejectionGroups, OpError> {
    let counts = ops.store.rejection_counts(since).await?;
    Ok(RejectionGroups {
        since: rfc3339(crate::store::rejection::hour_of(since) * 3_600_000),
        groups: counts
            .into_iter()
            .map(|c| RejectionGroup {
                hint: hint(&c.reason).to_string(),
                source: c.source,
                reason: c.reason,
                count: c.count,
                last_at: rfc3339(c.last_at),
            })
            .collect(),
    })
}

fn row(r: Rejection) -> dto::Rejection {
    let (body_encoding, body) = match r.body {
        None => (None, None),
        Some(b) => match String::from_utf8(b) {
            Ok(text) => (Some("utf8".to_string()), Some(text)),
            Err(e) => (Some("base64".to_string()), Some(B64.encode(e.as_bytes()))),
        },
    };
    dto::Rejection {
        id: r.id,
        at: rfc3339(r.at),
        source: r.source,
        known: r.known,
        reason: r.reason,
        status: r.status,
        client: r.client,
        size: r.size,
        digest: r.digest,
        headers: r
            .headers
            .into_iter()
            .map(|(name, value)| dto::Header { name, value })
            .collect(),
        body_encoding,
        body,
    }
}
