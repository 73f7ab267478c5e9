//! `hookgate transform test`: what a route's transform makes of a body file (run
//! here, in the same worker processes and with the same bounds as the gateway), or
//! of a stored entry (asked of the running gateway: `POST
//! /admin/entries/{id}/preview`, which runs the program the gateway loaded).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};

use super::ConfigArg;
use super::admin::{ApiArgs, Client};
use super::out::outln;
use crate::admin::dto::{Preview, PreviewOutcome};
use crate::config::Config;
use crate::transform::{MetaOf, Transforms};

#[derive(Debug, Subcommand)]
pub enum TransformCmd {
    /// Print what a route's transform makes of a body file (--body, run here) or of
    /// a stored entry (--entry, asked of the running gateway); nothing is sent.
    Test(TestArgs),
}

#[derive(Debug, Args)]
pub struct TestArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// The route: SOURCE/ROUTE, or ROUTE when one source has it.
    #[arg(long)]
    pub route: String,
    /// A body file (`-`: standard input), run through the route's transform here.
    #[arg(long, conflicts_with = "entry", required_unless_present = "entry")]
    pub body: Option<PathBuf>,
    /// A stored entry, previewed by the running gateway's admin API.
    #[arg(long)]
    pub entry: Option<String>,
    #[command(flatten)]
    pub api: ApiArgs,
}

pub async fn run(cmd: TransformCmd) -> anyhow::Result<()> {
    let TransformCmd::Test(a) = cmd;
    let preview = match (&a.body, &a.entry) {
        (Some(file), _) => {
            let cfg = super::load(a.config.config.as_deref())?;
            let (source, route) = find_route(&cfg, &a.route)?;
            let body = match file.to_str() {
                Some("-") => {
                    let mut b = Vec::new();
                    std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
                        .context("cannot read the body from standard input")?;
                    b
                }
                _ => std::fs::read(file)
                    .with_context(|| format!("cannot read {}", file.display()))?,
            };
            run_here(&cfg, &source, &route, &body).await?
        }
        (None, Some(id)) => {
            let route = a.route.rsplit('/').next().unwrap_or(&a.route).to_string();
            let c = Client::new(&a.api)?;
            let (p, raw): (Preview, _) = c
                .call(
                    reqwest::Method::POST,
                    &format!("/admin/entries/{id}/preview"),
                    &[],
                    Some(serde_json::json!({ "route": route })),
                )
                .await?;
            if a.api.json {
                outln!("{}", serde_json::to_string_pretty(&raw)?)?;
                return finish(&p);
            }
            p
        }
        (None, None) => bail!("give --body FILE or --entry ID"),
    };
    if a.api.json {
        outln!("{}", serde_json::to_string_pretty(&preview)?)?;
    } else {
        print(&preview)?;
    }
    finish(&preview)
}

/// A failed transform is a failed command.
fn finish(p: &Preview) -> anyhow::Result<()> {
    match p.outcome {
        PreviewOutcome::Failed => bail!(
            "the transform fails: {}",
            p.error.as_deref().unwrap_or("unknown")
        ),
        _ => Ok(()),
    }
}

/// The source and route `spec` names (`SOURCE/ROUTE`, or a route one source has),
/// which must have a transform.
fn find_route(cfg: &Config, spec: &str) -> anyhow::Result<(String, String)> {
    let matches: Vec<(String, String)> = cfg
        .sources
        .iter()
        .flat_map(|s| s.routes.iter().map(move |r| (s, r)))
        .filter(|(s, r)| match spec.split_once('/') {
            Some((source, route)) => s.name == source && r.name == route,
            None => r.name == spec,
        })
        .filter(|(_, r)| r.transform.is_some())
        .map(|(s, r)| (s.name.clone(), r.name.clone()))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!("no route {spec:?} with a transform in the configuration"),
        _ => bail!("several sources have a route {spec:?} with a transform: name it SOURCE/ROUTE"),
    }
}

/// Run the route's transform on `body` here, as a delivery attempt would.
async fn run_here(cfg: &Config, source: &str, route: &str, body: &[u8]) -> anyhow::Result<Preview> {
    let program = cfg
        .sources
        .iter()
        .find(|s| s.name == source)
        .and_then(|s| s.routes.iter().find(|r| r.name == route))
        .and_then(|r| r.transform.clone())
        .context("the route has no transform")?;
    let exe = std::env::current_exe().context("cannot find this executable to run transforms")?;
    let transforms = Arc::new(Transforms::new(
        exe,
        vec![(source.to_string(), route.to_string(), program)],
        cfg.server.max_body_bytes,
        cfg.forwarder.transform_memory_bytes,
    ));
    let meta = || {
        crate::transform::meta(
            MetaOf {
                source,
                route,
                entry_id: "test",
                event_id: None,
                event_type: None,
                received_at: crate::clock::system_now_ms(),
            },
            std::iter::empty(),
        )
    };
    let ran = transforms
        .run(source, route, meta, body)
        .await
        .context("the route has no transform")?;
    crate::operations::preview::of_run(route.to_string(), ran).context("cannot run the transform")
}

/// The preview for a reader: what happens, the content type and headers on
/// standard error, the body alone on standard output (to pipe into `jq`).
fn print(p: &Preview) -> anyhow::Result<()> {
    let what = match p.outcome {
        PreviewOutcome::Send => "sends",
        PreviewOutcome::Skip => "skips the delivery (no output; it would be recorded filtered)",
        PreviewOutcome::Failed => "fails",
    };
    eprintln!("route {}: {what}", p.route);
    if let Some(ct) = &p.content_type {
        eprintln!("content-type: {ct}");
    }
    for h in &p.headers {
        eprintln!("{}: {}", h.name, h.value);
    }
    if let Some(b) = &p.body {
        outln!("{b}")?;
    } else if let Some(b) = &p.body_base64 {
        outln!("(binary, base64) {b}")?;
    }
    Ok(())
}
