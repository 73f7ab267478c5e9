//! `hookgate routes`: every route of a running gateway (`GET /admin/routes`), the
//! retired ones with the deliveries they keep, and `hookgate routes discard`, which
//! discards what a retired route keeps, with a note.

use clap::Subcommand;

use super::admin::{ApiArgs, Client, print_json, table};
use super::out::outln;
use crate::operations::routes::{RetiredDiscarded, RouteInfo, RouteStateKind};

#[derive(Debug, Subcommand)]
pub enum RoutesCmd {
    /// Every route in force, then every retired one, with what each holds.
    List,
    /// Discard every pending delivery a retired route keeps (a route a reload
    /// removed), each with the note in its entry's audit trail.
    Discard {
        source: String,
        route: String,
        #[arg(long)]
        note: String,
    },
}

pub async fn run(api: &ApiArgs, cmd: RoutesCmd) -> anyhow::Result<()> {
    let c = Client::new(api)?;
    match cmd {
        RoutesCmd::List => {
            let (routes, raw): (Vec<RouteInfo>, _) = c
                .call(reqwest::Method::GET, "/admin/routes", &[], None)
                .await?;
            if api.json {
                return print_json(&raw);
            }
            let rows = routes
                .into_iter()
                .map(|r| {
                    vec![
                        r.source,
                        r.route,
                        match r.state {
                            RouteStateKind::Active => "active".to_string(),
                            RouteStateKind::Retired => "retired".to_string(),
                        },
                        r.pending.to_string(),
                        r.dead.to_string(),
                        r.destination
                            .or(r.retired_at.map(|at| format!("retired {at}")))
                            .unwrap_or_default(),
                        // A pull route's consumers: how many, and the last seen.
                        match &r.consumers {
                            Some(c) if c.is_empty() => "none seen".to_string(),
                            Some(c) => format!(
                                "{} (last {} from {})",
                                c.len(),
                                c[0].last_seen,
                                c[0].address
                            ),
                            None => String::new(),
                        },
                    ]
                })
                .collect();
            table(
                &[
                    "source",
                    "route",
                    "state",
                    "pending",
                    "dead",
                    "destination",
                    "consumers",
                ],
                rows,
            )?;
        }
        RoutesCmd::Discard {
            source,
            route,
            note,
        } => {
            let path = format!("/admin/routes/{source}/{route}/discard");
            let (done, raw): (RetiredDiscarded, _) = c
                .call(
                    reqwest::Method::POST,
                    &path,
                    &[],
                    Some(serde_json::json!({ "note": note })),
                )
                .await?;
            if api.json {
                return print_json(&raw);
            }
            outln!(
                "discarded {} deliveries of {}/{}{}",
                done.discarded,
                done.source,
                done.route,
                if done.forgotten {
                    "; the route is forgotten"
                } else {
                    ""
                }
            )?;
        }
    }
    Ok(())
}
