//! `hookgate dlq groups` and `hookgate dlq replay --failure`: the dead letters of
//! each route grouped by failure kind (`GET /admin/dead-letters`), and one group's
//! paced replay (`POST /admin/dead-letters/replay`).

use super::admin::{ApiArgs, Client, print_json, table};
use super::out::outln;
use crate::operations::dto::{DeadLetterGroups, DeadLetterReplay, ReplayResult};

/// Every route's dead letters (of `source`, and only `route`, when given), one row
/// per failure kind, largest group first.
pub async fn groups(
    api: &ApiArgs,
    source: Option<String>,
    route: Option<String>,
) -> anyhow::Result<()> {
    let c = Client::new(api)?;
    let mut query = Vec::new();
    if let Some(s) = source {
        query.push(("source", s));
    }
    if let Some(r) = route {
        query.push(("route", r));
    }
    let (g, raw): (DeadLetterGroups, _) = c
        .call(reqwest::Method::GET, "/admin/dead-letters", &query, None)
        .await?;
    if api.json {
        return print_json(&raw);
    }
    if g.groups.is_empty() {
        outln!("no dead letters")?;
        return Ok(());
    }
    let rows = g
        .groups
        .iter()
        .map(|x| {
            vec![
                x.source.clone(),
                x.route.clone(),
                x.failure.clone(),
                x.count.to_string(),
                x.first_seen.clone(),
                x.last_seen.clone(),
                x.sample.id.clone(),
            ]
        })
        .collect();
    table(
        &[
            "source",
            "route",
            "failure",
            "count",
            "first seen",
            "last seen",
            "sample",
        ],
        rows,
    )?;
    for r in g.routes.iter().filter(|r| r.scanned < r.dead) {
        outln!(
            "({}/{}: {} dead; the newest {} are grouped)",
            r.source,
            r.route,
            r.dead,
            r.scanned
        )?;
    }
    Ok(())
}

/// Replay the dead letters of `route` of `source` that died of `failure` (a group's
/// failure as `groups` lists it), paced.
pub async fn replay_group(
    api: &ApiArgs,
    source: String,
    route: String,
    failure: String,
) -> anyhow::Result<()> {
    let c = Client::new(api)?;
    let body = DeadLetterReplay {
        source,
        route,
        failure,
    };
    let (r, raw): (ReplayResult, _) = c
        .call(
            reqwest::Method::POST,
            "/admin/dead-letters/replay",
            &[],
            Some(serde_json::to_value(&body)?),
        )
        .await?;
    if api.json {
        return print_json(&raw);
    }
    outln!(
        "{} dead deliveries of group {:?} queued for replay{}",
        r.queued,
        body.failure,
        r.last_due_at
            .map(|t| format!("; the last goes out at {t}"))
            .unwrap_or_default()
    )?;
    Ok(())
}
