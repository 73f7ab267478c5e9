//! Dead letters grouped by failure: the dead deliveries of each route, grouped by
//! the kind of their last failed attempt ([`Failure`], as the store recorded it:
//! the HTTP status a destination answered, a timeout, a refused connection, the
//! transform's kind), with a count, when the group was first and last seen, and a
//! sample; and a group's replay, paced as a bulk replay
//! ([`super::bulk::replay_paced`]).
//!
//! A group is named by its kind's canonical name; deliveries that died with no
//! kind recorded (dead before kinds were stored) are the `unknown` group. Nothing
//! here reads an error's text.
//!
//! Each route's newest [`GROUPED_MAX`] dead deliveries are grouped (the store reads
//! no body for them); a route with more says so (`scanned` < `dead`), and a replayed
//! group makes room for the next.

use std::collections::HashMap;

use super::bulk::replay_paced;
use super::dto::{DeadLetterGroup, DeadLetterGroups, DeadLetterSample, ReplayResult};
use super::entries::rfc3339;
use super::{OpError, Operations};
use crate::failure::{Failure, UNKNOWN, group_name};
use crate::store::{Actor, DeadLetter};

/// Most dead deliveries of one route that are grouped.
pub const GROUPED_MAX: usize = 10_000;

/// Which dead letters a group name selects: the deliveries of one kind (see
/// [`Failure::of_group`], which also takes the names groups had before kinds
/// were stored), or those with none (`unknown`).
fn selected(group: &str) -> Result<Option<Failure>, OpError> {
    if group.trim() == UNKNOWN {
        return Ok(None);
    }
    Failure::of_group(group).map(Some).ok_or_else(|| {
        OpError::Invalid(format!(
            "failure {:?} names no dead-letter group: give a group's failure as `GET /admin/dead-letters` lists it (`HTTP 422`, `timeout`, `connect`, `transform: runtime`, `unknown`, …)",
            group.chars().take(100).collect::<String>()
        ))
    })
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
    let kind = selected(failure)?;
    let letters = ops.store.dead_letters(source, route, GROUPED_MAX).await?;
    let ids: Vec<String> = letters
        .into_iter()
        .filter(|d| d.failure == kind)
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
    let mut by: HashMap<Option<Failure>, (u64, i64, i64, &DeadLetter)> = HashMap::new();
    for d in letters {
        let g = by.entry(d.failure).or_insert((0, d.dead_at, d.dead_at, d));
        g.0 += 1;
        g.1 = g.1.min(d.dead_at);
        if d.dead_at > g.2 {
            g.2 = d.dead_at;
            g.3 = d;
        }
    }
    let mut out: Vec<DeadLetterGroup> = by
        .into_iter()
        .map(|(kind, (count, first, last, sample))| DeadLetterGroup {
            source: source.to_string(),
            route: route.to_string(),
            failure: group_name(kind),
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
    fn group_names_select_their_kind_and_refuse_the_rest() {
        assert_eq!(selected("HTTP 422").unwrap(), Some(Failure::Status(422)));
        assert_eq!(selected("unknown").unwrap(), None);
        assert_eq!(
            selected("connect: Connection refused (os error 111)").unwrap(),
            Some(Failure::Connect)
        );
        assert!(matches!(selected("HTTP x"), Err(OpError::Invalid(_))));
        assert_eq!(group_name(None), "unknown");
        assert_eq!(group_name(Some(Failure::Timeout)), "timeout");
    }

    fn letter(id: &str, dead_at: i64, kind: Failure, error: &str) -> DeadLetter {
        DeadLetter {
            id: id.to_string(),
            event_id: Some(format!("evt_{id}")),
            event_type: None,
            received_at: dead_at - 10,
            dead_at,
            attempts: 1,
            last_error: Some(error.to_string()),
            failure: Some(kind),
        }
    }

    #[test]
    fn groups_count_and_date_their_letters_and_sample_the_newest() {
        // Grouped by the recorded kind, whatever the texts say.
        let letters = [
            letter("c", 300, Failure::Status(422), "not retryable: HTTP 422"),
            letter(
                "b",
                200,
                Failure::Timeout,
                "retry budget exhausted: 2 attempts; last: HTTP 422",
            ),
            letter("a", 100, Failure::Status(422), "something else"),
            DeadLetter {
                failure: None,
                ..letter("z", 50, Failure::Io, "HTTP 422")
            },
        ];
        let g = group("s", "r", &letters);
        assert_eq!(g.len(), 3);
        assert_eq!((g[0].failure.as_str(), g[0].count), ("HTTP 422", 2));
        assert_eq!(g[0].sample.id, "c");
        assert_eq!(g[0].first_seen, rfc3339(100));
        assert_eq!(g[0].last_seen, rfc3339(300));
        assert_eq!((g[1].failure.as_str(), g[1].count), ("timeout", 1));
        assert_eq!((g[2].failure.as_str(), g[2].count), ("unknown", 1));
    }
}
