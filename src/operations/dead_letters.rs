//! Dead letters grouped by failure: the dead deliveries of each route, grouped by
//! what killed them (the HTTP status a destination answered, or the kind of error),
//! with a count, when the group was first and last seen, and a sample; and a group's
//! replay, paced as a bulk replay ([`super::bulk::replay_paced`]).
//!
//! Each route's newest [`GROUPED_MAX`] dead deliveries are grouped (the store reads
//! no body for them); a route with more says so (`scanned` < `dead`), and a replayed
//! group makes room for the next.

use std::collections::HashMap;

use super::bulk::replay_paced;
use super::dto::{DeadLetterGroup, DeadLetterGroups, DeadLetterSample, ReplayResult};
use super::entries::rfc3339;
use super::{OpError, Operations};
use crate::store::{Actor, DeadLetter};

/// Most dead deliveries of one route that are grouped.
pub const GROUPED_MAX: usize = 10_000;

/// What a failure is grouped by: the last attempt's outcome, without what the dead
/// letter's reason says around it (`not retryable: HTTP 422`, `retry budget
/// exhausted: 5 attempts; last: timeout`): `HTTP 422` for a destination's answer,
/// `timeout`, `connect: …` or `io: …` for an error, `transform: <kind>` when the
/// route's transform failed, `unknown` when none was recorded.
pub fn failure_of(last_error: Option<&str>) -> String {
    let Some(mut e) = last_error.map(str::trim).filter(|e| !e.is_empty()) else {
        return "unknown".to_string();
    };
    if let Some(group) = crate::transform::group_of(e) {
        return group;
    }
    if let Some((_, last)) = e.rsplit_once("; last: ") {
        e = last;
    }
    e = e.strip_prefix("not retryable: ").unwrap_or(e);
    // "HTTP 422", and nothing said after the status.
    if let Some(code) = e.strip_prefix("HTTP ")
        && let Some(code) = code.get(..3)
        && code.bytes().all(|b| b.is_ascii_digit())
    {
        return format!("HTTP {code}");
    }
    if e.starts_with("timeout") {
        return "timeout".to_string();
    }
    e.chars().take(200).collect()
}

/// The dead deliveries of every configured route (of `source`, and only `route`,
/// when given), grouped by failure; routes in configuration order, each one's groups
/// largest first.
pub async fn dead_letter_groups(
    ops: &Operations,
    source: Option<&str>,
    route: Option<&str>,
) -> Result<DeadLetterGroups, OpError> {
    check(ops, source, route)?;
    let mut groups = Vec::new();
    let mut routes = Vec::new();
    for s in ops
        .sources()
        .iter()
        .filter(|s| source.is_none_or(|n| n == s.name))
    {
        for r in s
            .routes
            .iter()
            .filter(|r| route.is_none_or(|n| n == r.as_str()))
        {
            let dead = ops.store.route_stats(&s.name, r).await?.dead;
            if dead == 0 {
                continue;
            }
            let letters = ops.store.dead_letters(&s.name, r, GROUPED_MAX).await?;
            routes.push(super::dto::DeadLetterRoute {
                source: s.name.clone(),
                route: r.clone(),
                dead,
                scanned: letters.len() as u64,
            });
            groups.extend(group(&s.name, r, &letters));
        }
    }
    Ok(DeadLetterGroups { routes, groups })
}

/// Replay every dead delivery of `route` of `source` that died of `failure`, paced,
/// as `by`.
pub async fn replay_group(
    ops: &Operations,
    source: &str,
    route: &str,
    failure: &str,
    by: &Actor,
) -> Result<ReplayResult, OpError> {
    check(ops, Some(source), Some(route))?;
    let letters = ops.store.dead_letters(source, route, GROUPED_MAX).await?;
    let ids: Vec<String> = letters
        .into_iter()
        .filter(|d| failure_of(d.last_error.as_deref()) == failure)
        .map(|d| d.id)
        .collect();
    tracing::info!(source, route, count = ids.len(), "dead-letter group replay");
    replay_paced(ops, ids, Some(route), by).await
}

/// Refuse an unknown source, or a route that `source` does not have.
fn check(ops: &Operations, source: Option<&str>, route: Option<&str>) -> Result<(), OpError> {
    if let Some(s) = source {
        let Some(src) = ops.source(s) else {
            return Err(OpError::NoSuchSource(s.to_string()));
        };
        if let Some(r) = route
            && !src.has_route(r)
        {
            return Err(OpError::NoSuchRoute {
                name: s.to_string(),
                route: r.to_string(),
            });
        }
    }
    Ok(())
}

/// Group `letters` (newest first) of one route by failure, largest group first.
fn group(source: &str, route: &str, letters: &[DeadLetter]) -> Vec<DeadLetterGroup> {
    let mut by: HashMap<String, (u64, i64, i64, &DeadLetter)> = HashMap::new();
    for d in letters {
        let g = by
            .entry(failure_of(d.last_error.as_deref()))
            .or_insert((0, d.dead_at, d.dead_at, d));
        g.0 += 1;
        g.1 = g.1.min(d.dead_at);
        if d.dead_at > g.2 {
            g.2 = d.dead_at;
            g.3 = d;
        }
    }
    let mut out: Vec<DeadLetterGroup> = by
        .into_iter()
        .map(|(failure, (count, first, last, sample))| DeadLetterGroup {
            source: source.to_string(),
            route: route.to_string(),
            failure,
            count,
            first_seen: rfc3339(first),
            last_seen: rfc3339(last),
            sample: DeadLetterSample {
                id: sample.id.clone(),
                event_id: sample.event_id.clone(),
                event_type: sample.event_type.clone(),
                attempts: sample.attempts,
                last_error: sample.last_error.clone(),
            },
        })
        .collect();
    out.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.failure.cmp(&b.failure))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_group_by_status_or_error() {
        assert_eq!(failure_of(Some("HTTP 422")), "HTTP 422");
        assert_eq!(failure_of(Some("not retryable: HTTP 422")), "HTTP 422");
        assert_eq!(
            failure_of(Some("retry budget exhausted: 5 attempts; last: HTTP 503")),
            "HTTP 503"
        );
        assert_eq!(
            failure_of(Some(
                "retry budget exhausted: older than 1day; last: timeout"
            )),
            "timeout"
        );
        assert_eq!(failure_of(Some("timeout after 10s")), "timeout");
        assert_eq!(
            failure_of(Some(
                "retry budget exhausted: 3 attempts; last: connect: Connection refused (os error 111)"
            )),
            "connect: Connection refused (os error 111)"
        );
        assert_eq!(failure_of(Some("HTTP x")), "HTTP x");
        assert_eq!(failure_of(None), "unknown");
        assert_eq!(
            failure_of(Some("transform: runtime: \"card 4242\" is not valid")),
            "transform: runtime"
        );
        assert_eq!(
            failure_of(Some("transform: timeout after 50ms")),
            "transform: timeout"
        );
        assert_eq!(failure_of(Some("  ")), "unknown");
    }

    fn letter(id: &str, dead_at: i64, error: &str) -> DeadLetter {
        DeadLetter {
            id: id.to_string(),
            event_id: Some(format!("evt_{id}")),
            event_type: None,
            received_at: dead_at - 10,
            dead_at,
            attempts: 1,
            last_error: Some(error.to_string()),
        }
    }

    #[test]
    fn groups_count_and_date_their_letters_and_sample_the_newest() {
        let letters = [
            letter("c", 300, "HTTP 422"),
            letter(
                "b",
                200,
                "retry budget exhausted: 2 attempts; last: timeout",
            ),
            letter("a", 100, "HTTP 422"),
        ];
        let g = group("s", "r", &letters);
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].failure.as_str(), g[0].count), ("HTTP 422", 2));
        assert_eq!(g[0].sample.id, "c");
        assert_eq!(g[0].first_seen, rfc3339(100));
        assert_eq!(g[0].last_seen, rfc3339(300));
        assert_eq!((g[1].failure.as_str(), g[1].count), ("timeout", 1));
    }
}
