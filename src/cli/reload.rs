//! `hookgate reload` and `hookgate config`: reload a running gateway's
//! configuration (`POST /admin/config/reload`; `--dry-run` prints what would
//! change and applies nothing) and show the configuration in force
//! (`GET /admin/config`). A refused reload exits non-zero and prints why: the
//! message `check-config` prints, or the keys that need a restart.

use super::admin::{ApiArgs, Client, print_json};
use super::out::outln;
use crate::operations::config::{ConfigInfo, Reloaded};

/// `hookgate reload [--dry-run]`.
pub async fn reload(api: &ApiArgs, dry_run: bool) -> anyhow::Result<()> {
    let c = Client::new(api)?;
    let query = [("dry_run", dry_run.to_string())];
    let (r, raw): (Reloaded, _) = c
        .call(reqwest::Method::POST, "/admin/config/reload", &query, None)
        .await?;
    if api.json {
        return print_json(&raw);
    }
    match (r.applied, r.previous_version == r.version) {
        (true, true) => outln!("reloaded: version {} (unchanged)", r.version)?,
        (true, false) => outln!("reloaded: version {} → {}", r.previous_version, r.version)?,
        (false, _) => outln!(
            "dry run: version {} → {} (nothing applied)",
            r.previous_version,
            r.version
        )?,
    }
    if r.changes.is_empty() {
        outln!("no change")?;
    }
    for change in &r.changes {
        outln!("  {change}")?;
    }
    Ok(())
}

/// `hookgate config`.
pub async fn show(api: &ApiArgs) -> anyhow::Result<()> {
    let c = Client::new(api)?;
    let (info, raw): (ConfigInfo, _) = c
        .call(reqwest::Method::GET, "/admin/config", &[], None)
        .await?;
    if api.json {
        return print_json(&raw);
    }
    outln!("version: {}", info.version)?;
    outln!(
        "loaded: {} from {}",
        crate::operations::entries::rfc3339(info.loaded_at),
        info.from
            .as_deref()
            .unwrap_or("defaults and HOOKGATE_* environment")
    )?;
    outln!("reloads: {}", info.generation)?;
    outln!("sources: {}, routes: {}", info.sources, info.routes)?;
    Ok(())
}
