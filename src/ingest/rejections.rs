//! The rejection log's ingest side: every refused request is counted, a few of
//! each group are kept as rows, and both go to the store once a second
//! ([`flush_refused`]) in one write.
//!
//! A flood of forgeries must not turn the store into its target, nor cost the
//! genuine webhooks anything. So the decision comes first and is cheap (a map
//! lookup under a lock): at most [`ROWS_PER_GROUP`] rows per group (source and
//! reason; every name that is not a configured source is one group per reason) and
//! [`ROWS_PER_FLUSH`] in all per second, and only a request chosen for a row has its
//! headers copied and its body hashed. The rest are counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderMap;
use sha2::{Digest as _, Sha256};

use super::hook_secret::redact_token;
use super::meters::UnverifiedCounts;
use crate::header_policy::HeaderPolicy;
use crate::store::rejection::{RejectionBatch, RejectionCount, group_source};
use crate::store::{Rejection, Store};
use crate::telemetry;

/// The most rows one group gets per flush (a second), per gateway.
pub const ROWS_PER_GROUP: u32 = 5;
/// The most rows of every group together per flush.
pub const ROWS_PER_FLUSH: usize = 100;
/// The most bytes of a body a source with `keep_rejected_bodies` keeps.
pub const KEPT_BODY_BYTES: usize = 64 * 1024;
/// The longest unknown source name kept (escaped).
const UNKNOWN_NAME_CHARS: usize = 64;

/// The refusals counted and the rows kept since the last flush, and how a row's
/// headers are kept.
#[derive(Debug)]
pub struct RejectionLog {
    pending: Mutex<Pending>,
    /// What every row redacts, from the providers of the route table in force (a
    /// reload may bring a provider of `providers_dir` with headers of its own).
    redaction: crate::live::Live<Redaction>,
}

/// What the rows of the rejection log redact, from every provider the gateway knows.
#[derive(Debug)]
pub struct Redaction {
    /// Every provider's signature header, and the header a secret handshake brings
    /// its secret in (`X-Hook-Secret`), lower-case: redacted in every row, since a
    /// request to a name that is not configured may carry a genuine signature.
    signatures: Vec<String>,
    /// The headers kept of a request to a name that is not configured: no
    /// credential of any provider.
    unknown: HeaderPolicy,
}

impl Redaction {
    /// Rows redact `signatures` (header names) and keep of a request to a name
    /// that is not configured what `unknown` keeps.
    pub fn new(signatures: Vec<String>, unknown: HeaderPolicy) -> Redaction {
        Redaction {
            signatures: signatures
                .into_iter()
                .map(|s| s.to_ascii_lowercase())
                .collect(),
            unknown,
        }
    }

    /// The signature headers redacted, lower case.
    pub fn signatures(&self) -> &[String] {
        &self.signatures
    }
}

#[derive(Debug, Default)]
struct Pending {
    rows: Vec<Rejection>,
    /// Per group: refusals counted, rows taken, the newest time.
    groups: HashMap<(String, &'static str), Group>,
}

#[derive(Debug, Default)]
struct Group {
    count: u64,
    rows: u32,
    last_at: i64,
}

/// What a refused request showed: enough for its row.
pub struct Refused<'a> {
    /// The source the URL named.
    pub source: &'a str,
    /// The source's header policy, when it is configured.
    pub policy: Option<&'a HeaderPolicy>,
    pub keep_body: bool,
    pub reason: &'static str,
    pub status: u16,
    pub client: Option<std::net::IpAddr>,
    pub headers: &'a HeaderMap,
    /// The body's size as declared, when it was not read.
    pub declared: Option<u64>,
    /// The body, when it was read.
    pub body: Option<&'a [u8]>,
    pub at: i64,
}

impl RejectionLog {
    /// A log whose rows redact `signatures` (header names) and keep of a request to
    /// a name that is not configured what `unknown` keeps.
    pub fn new(signatures: Vec<String>, unknown: HeaderPolicy) -> RejectionLog {
        RejectionLog::live(crate::live::Live::fixed(std::sync::Arc::new(
            Redaction::new(signatures, unknown),
        )))
    }

    /// A log whose rows redact what the route table in force says.
    pub fn live(redaction: crate::live::Live<Redaction>) -> RejectionLog {
        RejectionLog {
            pending: Mutex::default(),
            redaction,
        }
    }

    /// Count a refusal, and keep its row if its group has room this second.
    pub fn note(&self, r: Refused<'_>) {
        let known = r.policy.is_some();
        let group = group_source(r.source, known).to_string();
        let Ok(mut p) = self.pending.lock() else {
            return;
        };
        let room = p.rows.len() < ROWS_PER_FLUSH;
        let g = p.groups.entry((group, r.reason)).or_default();
        g.count += 1;
        g.last_at = g.last_at.max(r.at);
        if !room || g.rows >= ROWS_PER_GROUP {
            return;
        }
        g.rows += 1;
        drop(p);
        let row = self.row(r);
        if let Ok(mut p) = self.pending.lock() {
            p.rows.push(row);
        }
    }

    /// Everything since the last call.
    pub fn take(&self) -> RejectionBatch {
        let Ok(mut p) = self.pending.lock() else {
            return RejectionBatch::default();
        };
        let p = std::mem::take(&mut *p);
        RejectionBatch {
            rows: p.rows,
            counts: p
                .groups
                .into_iter()
                .map(|((source, reason), g)| RejectionCount {
                    source,
                    reason: reason.to_string(),
                    count: g.count,
                    last_at: g.last_at,
                })
                .collect(),
        }
    }

    /// The row of a refused request: the headers an entry of its source would keep
    /// (of a name that is not configured: no provider's credential), every
    /// provider's signature and handshake secret redacted, and so is a handshake's
    /// arming token wherever a proxy copied the URL (`hook_secret::redact_token`);
    /// its body's digest; its body only when the source keeps them.
    fn row(&self, r: Refused<'_>) -> Rejection {
        let known = r.policy.is_some();
        let redaction = self.redaction.load();
        let policy = r.policy.unwrap_or(&redaction.unknown);
        let headers = r
            .headers
            .iter()
            .filter(|(n, _)| policy.keeps(n.as_str()))
            .map(|(n, v)| {
                let value = if redaction.signatures.iter().any(|s| s == n.as_str()) {
                    "[redacted]".to_string()
                } else {
                    redact_token(&String::from_utf8_lossy(v.as_bytes())).into_owned()
                };
                (n.as_str().to_string(), value)
            })
            .collect();
        let source = if known {
            r.source.to_string()
        } else {
            r.source.escape_debug().take(UNKNOWN_NAME_CHARS).collect()
        };
        Rejection {
            id: uuid::Uuid::now_v7().to_string(),
            at: r.at,
            source,
            known,
            reason: r.reason.to_string(),
            status: r.status,
            client: r.client.map(|c| c.to_string()),
            size: r.body.map(|b| b.len() as u64).or(r.declared),
            digest: r
                .body
                .map(|b| format!("sha256:{}", hex::encode(Sha256::digest(b)))),
            headers,
            body: r
                .body
                .filter(|_| r.keep_body && known)
                .map(|b| b[..b.len().min(KEPT_BODY_BYTES)].to_vec()),
        }
    }
}

/// Every second until shutdown, add the counted verification failures to the
/// store's counters and hand it the rejection log's rows and counts.
pub async fn flush_refused(
    counts: Arc<UnverifiedCounts>,
    rejections: Arc<RejectionLog>,
    store: Arc<dyn Store>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        let stop = tokio::select! {
            _ = shutdown.cancelled() => true,
            _ = tokio::time::sleep(Duration::from_secs(1)) => false,
        };
        for (source, n) in counts.take() {
            if let Err(e) = store.record_unverified(&source, n).await {
                tracing::debug!(source, error = %e, "cannot record verification failures");
            }
        }
        let batch = rejections.take();
        if !batch.rows.is_empty() || !batch.counts.is_empty() {
            // Lost when the store refuses it: the log is a clue, not a record.
            if let Err(e) = store.record_rejections(&batch).await {
                const MSG: &str = "cannot record rejected requests";
                if telemetry::throttle::hit(MSG, e.kind()) {
                    tracing::warn!(error = %e, rows = batch.rows.len(), "{MSG}");
                }
            }
        }
        if stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> RejectionLog {
        RejectionLog::new(
            vec!["Stripe-Signature".into()],
            HeaderPolicy::new(&[], &[http::HeaderName::from_static("x-gitlab-token")]),
        )
    }

    fn refused<'a>(
        source: &'a str,
        known: Option<&'a HeaderPolicy>,
        headers: &'a HeaderMap,
    ) -> Refused<'a> {
        Refused {
            source,
            policy: known,
            keep_body: false,
            reason: "mismatch",
            status: 401,
            client: None,
            headers,
            declared: None,
            body: Some(b"{}"),
            at: 1,
        }
    }

    #[test]
    fn a_flood_keeps_a_few_rows_and_counts_every_request() {
        let log = log();
        let policy = HeaderPolicy::new(&[], &[]);
        let headers = HeaderMap::new();
        for _ in 0..10_000 {
            log.note(refused("stripe", Some(&policy), &headers));
        }
        for i in 0..10_000 {
            let name = format!("nope{i}");
            log.note(refused(&name, None, &headers));
        }
        let batch = log.take();
        assert_eq!(batch.rows.len(), 2 * ROWS_PER_GROUP as usize);
        let mut counts: Vec<(String, u64)> = batch
            .counts
            .iter()
            .map(|c| (c.source.clone(), c.count))
            .collect();
        counts.sort();
        assert_eq!(
            counts,
            vec![("*".to_string(), 10_000), ("stripe".to_string(), 10_000)]
        );
        assert_eq!(log.take(), RejectionBatch::default());
    }

    #[test]
    fn a_row_keeps_no_credential_no_signature_and_no_body_unless_asked() {
        let policy = HeaderPolicy::new(&[], &[]);
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer s3cret".parse().unwrap());
        headers.insert("stripe-signature", "t=1,v1=abc".parse().unwrap());
        headers.insert("user-agent", "Stripe/1.0".parse().unwrap());
        let log = log();
        let r = log.row(refused("stripe", Some(&policy), &headers));
        assert_eq!(
            r.headers,
            vec![
                ("stripe-signature".to_string(), "[redacted]".to_string()),
                ("user-agent".to_string(), "Stripe/1.0".to_string())
            ]
        );
        assert_eq!(r.body, None);
        assert_eq!(r.size, Some(2));
        assert!(r.digest.unwrap().starts_with("sha256:44136fa3"));
        let mut asked = refused("stripe", Some(&policy), &headers);
        asked.keep_body = true;
        assert_eq!(log.row(asked).body.as_deref(), Some(&b"{}"[..]));
        // A name that is not configured: no provider's credential, no body.
        headers.insert("x-gitlab-token", "glpat".parse().unwrap());
        let mut unknown = refused("nope", None, &headers);
        unknown.keep_body = true;
        let r = log.row(unknown);
        assert!(
            r.headers
                .iter()
                .all(|(n, _)| n != "x-gitlab-token" && n != "authorization")
        );
        assert!(
            r.headers
                .contains(&("stripe-signature".to_string(), "[redacted]".to_string()))
        );
        assert_eq!(r.body, None);
    }

    #[test]
    fn a_row_keeps_no_handshake_secret_and_no_arming_token() {
        let log = RejectionLog::new(
            vec!["X-Hook-Signature".into(), "X-Hook-Secret".into()],
            HeaderPolicy::new(&[], &[]),
        );
        let policy = HeaderPolicy::new(&[], &[]);
        let mut headers = HeaderMap::new();
        headers.insert("x-hook-secret", "b537207f20cbfa02".parse().unwrap());
        headers.insert(
            "x-forwarded-uri",
            "/ingest/asana?hookgate_handshake=Zm9vYmFy".parse().unwrap(),
        );
        for r in [
            log.row(refused("asana", Some(&policy), &headers)),
            log.row(refused("nope", None, &headers)),
        ] {
            assert_eq!(
                r.headers,
                vec![
                    ("x-hook-secret".to_string(), "[redacted]".to_string()),
                    (
                        "x-forwarded-uri".to_string(),
                        "/ingest/asana?hookgate_handshake=[redacted]".to_string()
                    )
                ]
            );
        }
    }
}
