//! `hookgate rejections`: the requests a running gateway refused, from its admin
//! API: first the sources refusing most of what reaches them now (one line each:
//! the reason, since when, what it likely means), then every refusal counted per
//! source and reason (with what usually causes it), then the newest refused
//! requests, filtered by source and reason.

use clap::Args;

use super::admin::{ApiArgs, Client, print_json, table};
use super::out::outln;
use crate::admin::dto::{RejectionGroups, RejectionList};

#[derive(Debug, Clone, Args)]
pub struct RejectionArgs {
    /// Only requests to this source (as the URL named it).
    #[arg(long)]
    pub source: Option<String>,
    /// Only this reason (`mismatch`, `stale`, `unknown_source`, `too_large`, …).
    #[arg(long)]
    pub reason: Option<String>,
    /// Count from this time (RFC 3339 or unix seconds; default: the last 24 hours),
    /// and list only requests refused since then.
    #[arg(long)]
    pub since: Option<String>,
    /// How many refused requests to list (at most 500).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
}

pub async fn rejections(api: &ApiArgs, args: RejectionArgs) -> anyhow::Result<()> {
    let c = Client::new(api)?;
    let since: Vec<(&str, String)> = args.since.iter().map(|s| ("since", s.clone())).collect();
    let (groups, raw_groups): (RejectionGroups, _) = c
        .call(
            reqwest::Method::GET,
            "/admin/rejections/groups",
            &since,
            None,
        )
        .await?;
    let mut query = since.clone();
    query.push(("limit", args.limit.to_string()));
    if let Some(s) = &args.source {
        query.push(("source", s.clone()));
    }
    if let Some(r) = &args.reason {
        query.push(("reason", r.clone()));
    }
    let (list, raw_list): (RejectionList, _) = c
        .call(reqwest::Method::GET, "/admin/rejections", &query, None)
        .await?;
    if api.json {
        return print_json(&serde_json::json!({"groups": raw_groups, "rejections": raw_list}));
    }
    if !groups.refusing.is_empty() {
        outln!("Refusing most requests now (over 80 % of at least 20 in the last 10 minutes):")?;
        for r in &groups.refusing {
            outln!(
                "  {}: {} of {} refused, {} since {}{}: {}",
                r.source,
                r.refused,
                r.total,
                r.reason,
                r.since,
                if r.since_exact { "" } else { " at least" },
                printable(&r.likely)
            )?;
        }
        outln!()?;
    }
    outln!("Refused since {}:", groups.since)?;
    if groups.groups.is_empty() {
        outln!("  none")?;
    } else {
        table(
            &["SOURCE", "REASON", "COUNT", "LAST"],
            groups
                .groups
                .iter()
                .map(|g| {
                    vec![
                        g.source.clone(),
                        g.reason.clone(),
                        g.count.to_string(),
                        g.last_at.clone(),
                    ]
                })
                .collect(),
        )?;
        let mut seen = Vec::new();
        for g in &groups.groups {
            if !seen.contains(&g.reason) {
                outln!("  {}: {}", g.reason, g.hint)?;
                seen.push(g.reason.clone());
            }
        }
    }
    outln!()?;
    outln!("Newest refused requests:")?;
    if list.rejections.is_empty() {
        outln!("  none kept")?;
        return Ok(());
    }
    table(
        &[
            "AT", "SOURCE", "REASON", "STATUS", "CLIENT", "SIZE", "DIGEST",
        ],
        list.rejections
            .iter()
            .map(|r| {
                vec![
                    r.at.clone(),
                    // A name that is not configured came from the request.
                    r.source.escape_debug().to_string(),
                    r.reason.clone(),
                    r.status.to_string(),
                    r.client.clone().unwrap_or_else(|| "-".into()),
                    r.size.map_or_else(|| "-".into(), |s| s.to_string()),
                    r.digest.clone().unwrap_or_else(|| "-".into()),
                ]
            })
            .collect(),
    )?;
    if let Some(next) = &list.next_cursor {
        outln!("more: the API's cursor is {next}")?;
    }
    Ok(())
}

/// `text` with its control characters escaped: it names a client address, which
/// came from a request.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
