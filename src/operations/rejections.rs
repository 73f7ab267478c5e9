//! The rejection log, as operators read it (`GET /admin/rejections`, `hookgate
//! rejections`, the console's Rejections page): the newest refused requests, and
//! every refusal counted per source and reason, each reason with what usually
//! causes it.
//!
//! And what is missed, read off the same log and the store's counts of arrivals: a
//! configured source that refuses most of what reaches it now ([`refusing`]: the
//! dominant reason, since when, and what it likely means, as the
//! `HookgateSourceRefusing` alert says it), and a source below its expected traffic
//! (`[sources.expect]`, [`quiet`]: since its last arrival). What a reason means is
//! written here once: [`hint`] for a group, [`likely`] for a refusing source.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::dto::{self, RefusingSource, RejectionGroup, RejectionGroups, RejectionList};
use super::entries::rfc3339;
use super::{OpError, Operations};
use crate::config::Expectation;
use crate::provider::VerifyError;
use crate::store::rejection::hour_of;
use crate::store::{ListQuery, REJECTIONS_KEEP, Rejection, RejectionQuery};

/// How far back the counts go unless asked: a day.
pub const DEFAULT_WINDOW_MS: i64 = 24 * 3_600_000;

/// How far back a source's traffic is judged for [`refusing`]: 10 minutes, from the
/// start of the minute they began in (the store counts arrivals per minute).
pub const REFUSING_WINDOW_MS: i64 = 10 * 60_000;
/// The fewest requests in that window that can make a source refusing.
pub const REFUSING_AT_LEAST: u64 = 20;
/// A source is refusing when more than this share of its requests (percent) was
/// refused.
pub const REFUSING_PERCENT: u64 = 80;

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

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

/// What a source that refuses most of its requests for `reason` since `since` (as
/// [`short_time`] writes it) likely means, one sentence; `client` is the address most
/// of them came from. The `HookgateSourceRefusing` alert's description says the same
/// of each reason (`deploy/prometheus/alerts.yml`; a test below holds them
/// together).
pub fn likely(reason: &str, since: &str, client: Option<&str>) -> String {
    match reason {
        "mismatch" => format!(
            "Every signature fails since {since}: was the secret rotated on the provider's side?"
        ),
        "stale" => format!(
            "The signed timestamps are outside the tolerance since {since}: is the provider's or this host's clock off, or are old requests sent again?"
        ),
        "ip_not_allowed" => match client {
            Some(c) => format!(
                "The requests come from {c}, outside the source's allowlist, since {since}: did the provider add addresses?"
            ),
            None => format!(
                "The requests come from outside the source's allowlist since {since}: did the provider add addresses?"
            ),
        },
        "rate_limited" => format!(
            "The source's request limit refuses them since {since}: a limit set too low for what the provider sends, or a flood."
        ),
        other => format!(
            "The requests fail verification ({other}) since {since}: a sender that is not the provider, or a source configured for another scheme."
        ),
    }
}

/// Whether a refusal for `reason` counts toward a source refusing its provider:
/// every failed verification, the allowlist and the request limit (as
/// `HookgateSourceRefusing` counts them); not a body too large or too slow, nor a
/// spent body budget.
pub fn refuses(reason: &str) -> bool {
    matches!(reason, "ip_not_allowed" | "rate_limited")
        || VerifyError::ALL.iter().any(|e| e.label() == reason)
}

/// Unix milliseconds as a sentence names a time: `06:35 UTC` on the (UTC) day of
/// `now`, `2026-11-24 06:35 UTC` before.
pub fn short_time(ms: i64, now: i64) -> String {
    let stamp = rfc3339(ms);
    let (date, time) = stamp.split_once('T').unwrap_or((&stamp, ""));
    let hm: String = time.chars().take(5).collect();
    if ms.div_euclid(DAY_MS) == now.div_euclid(DAY_MS) {
        format!("{hm} UTC")
    } else {
        format!("{date} {hm} UTC")
    }
}

/// Every refusal counted since `since` (unix ms), per source and reason, and the
/// sources refusing most of what reaches them now ([`refusing`]).
pub async fn groups(ops: &Operations, since: i64) -> Result<RejectionGroups, OpError> {
    let counts = ops.store.rejection_counts(since).await?;
    let refusing = refusing(ops, ops.clock.now_ms()).await?;
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
        refusing,
    })
}

/// The refusals of one reason in the window.
struct Refused {
    reason: String,
    /// How many (estimated, see [`share_out`]).
    count: u64,
    /// Its rows kept in the window, newest first.
    rows: Vec<Rejection>,
}

/// The configured sources, in configuration order, that refused more than
/// [`REFUSING_PERCENT`] % of at least [`REFUSING_AT_LEAST`] requests in the window
/// of [`REFUSING_WINDOW_MS`] before `now`: each with its dominant reason, since when,
/// and what it likely means.
///
/// The refusals are counted from the log: its counts are kept per hour and its rows
/// are a sample (at most a few per second per source and reason and gateway, the
/// rest counted), so the count of a reason over the hours the window touches is
/// shared out as its rows kept since then fell in and before the window. The
/// requests that got through are the entries stored in the window (`activity`).
pub async fn refusing(ops: &Operations, now: i64) -> Result<Vec<RefusingSource>, OpError> {
    let from = now.saturating_sub(REFUSING_WINDOW_MS);
    let from = from - from.rem_euclid(MINUTE_MS);
    let hour = hour_of(from) * HOUR_MS;
    let counts = ops.store.rejection_counts(from).await?;
    let mut out = Vec::new();
    for source in ops.sources() {
        let name = &source.name;
        let mut reasons: Vec<Refused> = Vec::new();
        for c in counts
            .iter()
            .filter(|c| c.source == *name && c.last_at >= from && refuses(&c.reason))
        {
            let kept = ops
                .store
                .rejections(&RejectionQuery {
                    source: Some(name.clone()),
                    reason: Some(c.reason.clone()),
                    since: Some(hour),
                    limit: REJECTIONS_KEEP,
                    ..RejectionQuery::default()
                })
                .await?
                .rows;
            let all = kept.len();
            let rows: Vec<Rejection> = kept.into_iter().filter(|r| r.at >= from).collect();
            let count = share_out(c.count, rows.len(), all);
            if count > 0 {
                reasons.push(Refused {
                    reason: c.reason.clone(),
                    count,
                    rows,
                });
            }
        }
        if reasons.is_empty() {
            continue;
        }
        let refused: u64 = reasons.iter().map(|r| r.count).sum();
        let stored: u64 = ops
            .store
            .activity(name, from, now.saturating_add(1))
            .await?
            .iter()
            .map(|m| m.received)
            .sum();
        let total = refused.saturating_add(stored);
        if !is_refusing(refused, total) {
            continue;
        }
        let Some(top) = reasons
            .into_iter()
            .max_by_key(|r| (r.count, r.rows.first().map_or(0, |row| row.at)))
        else {
            continue;
        };
        let (since, since_exact) = first_refusal(ops, name, &top).await?;
        let client = if top.reason == "ip_not_allowed" {
            most_frequent_client(&top.rows)
        } else {
            None
        };
        out.push(RefusingSource {
            likely: likely(&top.reason, &short_time(since, now), client.as_deref()),
            source: name.clone(),
            reason: top.reason,
            since: rfc3339(since),
            since_exact,
            refused,
            total,
            client,
        });
    }
    Ok(out)
}

/// More than [`REFUSING_PERCENT`] % of at least [`REFUSING_AT_LEAST`].
fn is_refusing(refused: u64, total: u64) -> bool {
    total >= REFUSING_AT_LEAST
        && u128::from(refused) * 100 > u128::from(total) * u128::from(REFUSING_PERCENT)
}

/// The share of `count` refusals that `in_window` of the `kept` rows counted with
/// them stand for (at least one each); none without a row in the window.
fn share_out(count: u64, in_window: usize, kept: usize) -> u64 {
    if in_window == 0 || kept == 0 {
        return 0;
    }
    let (rows, kept) = (in_window as u128, kept as u128);
    let shared = u64::try_from(u128::from(count) * rows / kept).unwrap_or(u64::MAX);
    shared.max(rows as u64)
}

/// When the refusals of `top` began (unix ms), and whether the log still keeps the
/// first: the first after the source's last stored entry; or, when an entry was
/// stored after the first of them in the window (the source still stores some of
/// what it gets), the first of the refusals with no pause of the window between
/// them.
async fn first_refusal(
    ops: &Operations,
    source: &str,
    top: &Refused,
) -> Result<(i64, bool), OpError> {
    let last_stored = ops
        .store
        .list(&ListQuery {
            source: Some(source.to_string()),
            limit: 1,
            ..ListQuery::default()
        })
        .await?
        .entries
        .first()
        .map(|e| e.received_at);
    let first_in_window = top.rows.last().map_or(i64::MAX, |r| r.at);
    let storing = last_stored.is_some_and(|at| at >= first_in_window);
    let page = ops
        .store
        .rejections(&RejectionQuery {
            source: Some(source.to_string()),
            reason: Some(top.reason.clone()),
            since: if storing {
                None
            } else {
                last_stored.map(|at| at.saturating_add(1))
            },
            limit: REJECTIONS_KEEP,
            ..RejectionQuery::default()
        })
        .await?;
    let rows = &page.rows;
    let Some(newest) = rows.first().or(top.rows.first()) else {
        // Not reached: a reason counts only with a row in the window.
        return Ok((ops.clock.now_ms(), false));
    };
    let mut first = newest.at;
    let mut whole = true;
    for r in rows.iter().skip(1) {
        if storing && first.saturating_sub(r.at) >= REFUSING_WINDOW_MS {
            whole = false;
            break;
        }
        first = r.at;
    }
    let truncated = whole && (rows.len() >= REJECTIONS_KEEP || page.next_cursor.is_some());
    Ok((first, !truncated))
}

/// The client address most of `rows` came from (the newest of equals).
fn most_frequent_client(rows: &[Rejection]) -> Option<String> {
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for c in rows.iter().filter_map(|r| r.client.as_deref()) {
        match seen.iter_mut().find(|(s, _)| *s == c) {
            Some((_, n)) => *n += 1,
            None => seen.push((c, 1)),
        }
    }
    let mut best: Option<(&str, usize)> = None;
    for (c, n) in seen {
        if best.is_none_or(|(_, m)| n > m) {
            best = Some((c, n));
        }
    }
    best.map(|(c, _)| c.to_string())
}

/// A source's expected traffic (`[sources.expect]`), counted now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// `at_least`; for a learned expectation, a tenth of what the last hours usually
    /// receive (0 while learning).
    pub at_least: u64,
    pub within: Duration,
    /// The expectation is learned (`learn = true`): what the same hours of the last
    /// weeks received.
    pub learned: bool,
    /// Learned, and too little history yet (under two weeks with traffic).
    pub learning: bool,
    /// Entries stored in the window (from the start of its first minute, as
    /// `hookgate_source_quiet` counts them; duplicates not counted).
    pub received: u64,
    /// Fewer than `at_least`: the source is quiet.
    pub quiet: bool,
    /// When quiet: the `received_at` of its newest stored entry (unix ms), if any.
    pub last_at: Option<i64>,
}

/// Whether `source` is below `expect` at `now`, counted from the store as the
/// forwarder counts it for `hookgate_source_quiet`, and since when: its newest
/// stored entry.
pub async fn quiet(
    ops: &Operations,
    source: &str,
    expect: &Expectation,
    now: i64,
) -> Result<Expected, OpError> {
    let (at_least, within, received, quiet, learning) = match expect {
        Expectation::AtLeast(expect) => {
            let window = i64::try_from(expect.within.as_millis()).unwrap_or(i64::MAX);
            let since = now.saturating_sub(window);
            let since = since - since.rem_euclid(MINUTE_MS);
            let received: u64 = ops
                .store
                .activity(source, since, now.saturating_add(1))
                .await?
                .iter()
                .map(|m| m.received)
                .sum();
            (
                expect.at_least,
                expect.within,
                received,
                received < expect.at_least,
                false,
            )
        }
        Expectation::Learned => {
            let u = crate::store::usual::usual(ops.store.as_ref(), source, now).await?;
            (
                u.threshold(),
                crate::store::usual::Usual::window(),
                u.recent,
                u.quiet(),
                u.learning(),
            )
        }
    };
    let last_at = if quiet {
        ops.store
            .list(&ListQuery {
                source: Some(source.to_string()),
                limit: 1,
                ..ListQuery::default()
            })
            .await?
            .entries
            .first()
            .map(|e| e.received_at)
    } else {
        None
    };
    Ok(Expected {
        at_least,
        within,
        learned: matches!(expect, Expectation::Learned),
        learning,
        received,
        quiet,
        last_at,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_refuses_over_80_percent_of_at_least_20() {
        assert!(is_refusing(20, 20));
        assert!(is_refusing(25, 26));
        assert!(!is_refusing(19, 19), "too few to say");
        assert!(!is_refusing(20, 25), "80 % is not over 80 %");
        assert!(is_refusing(81, 100));
        assert!(!is_refusing(0, 0));
    }

    #[test]
    fn the_hours_count_is_shared_out_as_its_rows_fell() {
        // Every row in the window: the whole count, however sampled.
        assert_eq!(share_out(10_000, 100, 100), 10_000);
        // Half the rows kept since the hour began fell in the window.
        assert_eq!(share_out(40, 5, 10), 20);
        // At least a refusal per row, none without one.
        assert_eq!(share_out(3, 5, 5), 5);
        assert_eq!(share_out(30, 0, 5), 0);
        assert_eq!(share_out(30, 0, 0), 0);
    }

    #[test]
    fn refusing_reasons_are_failed_verifications_the_allowlist_and_the_limit() {
        for r in [
            "mismatch",
            "stale",
            "missing_signature",
            "too_many_secrets",
            "ip_not_allowed",
            "rate_limited",
        ] {
            assert!(refuses(r), "{r}");
        }
        for r in [
            "too_large",
            "busy",
            "unknown_source",
            "body_timeout",
            "body_read",
            "x",
        ] {
            assert!(!refuses(r), "{r}");
        }
    }

    #[test]
    fn a_time_in_a_sentence_names_its_day_only_when_it_is_not_today() {
        // 2026-11-24 06:35:12.345 UTC.
        let at = 1_795_502_112_345;
        assert_eq!(short_time(at, at + 3_600_000), "06:35 UTC");
        assert_eq!(short_time(at, at + DAY_MS), "2026-11-24 06:35 UTC");
    }

    #[test]
    fn the_most_frequent_client_is_named_the_newest_of_equals() {
        let row = |client: Option<&str>| Rejection {
            id: String::new(),
            at: 0,
            source: "s".into(),
            known: true,
            reason: "ip_not_allowed".into(),
            status: 403,
            client: client.map(str::to_string),
            size: None,
            digest: None,
            headers: Vec::new(),
            body: None,
        };
        let rows = [
            row(Some("198.51.100.4")),
            row(Some("203.0.113.9")),
            row(None),
            row(Some("203.0.113.9")),
        ];
        assert_eq!(most_frequent_client(&rows).as_deref(), Some("203.0.113.9"));
        assert_eq!(
            most_frequent_client(&rows[..2]).as_deref(),
            Some("198.51.100.4")
        );
        assert_eq!(most_frequent_client(&rows[2..3]), None);
    }

    /// The alert `HookgateSourceRefusing` describes each reason as [`likely`] does.
    #[test]
    fn what_a_refusing_source_likely_means_is_what_its_alert_says() {
        let alerts = include_str!("../../deploy/prometheus/alerts.yml");
        let at = alerts
            .find("alert: HookgateSourceRefusing")
            .expect("the alert");
        let rule = &alerts[at..];
        let rule = &rule[..rule[1..].find("- alert:").map_or(rule.len(), |e| e + 1)];
        for (reason, said) in [
            (
                "mismatch",
                &[
                    "Every signature fails",
                    "was the secret rotated on the provider's side?",
                ][..],
            ),
            (
                "stale",
                &[
                    "The signed timestamps are outside the tolerance",
                    "old requests sent again",
                ],
            ),
            (
                "ip_not_allowed",
                &[
                    "outside the source's allowlist",
                    "did the provider add addresses?",
                ],
            ),
            (
                "rate_limited",
                &[
                    "The source's request limit refuses them",
                    "a limit set too low",
                ],
            ),
            (
                "missing_signature",
                &[
                    "The requests fail verification",
                    "a sender that is not the provider, or a source configured for another scheme",
                ],
            ),
        ] {
            let text = likely(reason, "06:35 UTC", Some("203.0.113.9"));
            assert!(text.contains("since 06:35 UTC"), "{text}");
            for s in said {
                assert!(text.contains(s), "{reason}: {s:?} in {text}");
                assert!(rule.contains(s), "{reason}: {s:?} in the alert: {rule}");
            }
        }
        assert!(
            likely("ip_not_allowed", "06:35 UTC", Some("203.0.113.9"))
                .contains("come from 203.0.113.9")
        );
        assert!(
            likely("mismatch", "06:35 UTC", None)
                .starts_with("Every signature fails since 06:35 UTC")
        );
    }
}
