//! `hookgate reconcile --source NAME [--since 6h] [--dry-run]`: compare a source with
//! what its provider's API says it sent, now, through the running gateway's
//! `POST /admin/sources/{name}/reconcile`, and print what was found and done.

use clap::Args;

use super::admin::{ApiArgs, Client, print_json};
use super::out::outln;
use crate::operations::dto::ReconcileRequest;
use crate::reconcile::Report;

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// The source to reconcile (it needs `[sources.reconcile]`).
    #[arg(long)]
    pub source: String,
    /// Judge what the provider sent in this window ("6h", "3d"); from the
    /// high-water mark when not given.
    #[arg(long)]
    pub since: Option<String>,
    /// Say what would be recovered, and recover nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `hookgate reconcile`.
pub async fn reconcile(api: &ApiArgs, args: ReconcileArgs) -> anyhow::Result<()> {
    let c = Client::new(api)?;
    let body = ReconcileRequest {
        since: args.since,
        dry_run: Some(args.dry_run),
    };
    let path = format!(
        "/admin/sources/{}/reconcile",
        percent_encoding::utf8_percent_encode(&args.source, percent_encoding::NON_ALPHANUMERIC)
    );
    let (r, raw): (Report, _) = c
        .call(
            reqwest::Method::POST,
            &path,
            &[],
            Some(serde_json::to_value(&body)?),
        )
        .await?;
    if api.json {
        return print_json(&raw);
    }
    let time = crate::operations::entries::rfc3339;
    outln!(
        "{}source {} ({}): {} to {}",
        if r.dry_run { "dry run: " } else { "" },
        r.source,
        r.provider,
        time(r.since),
        time(r.until)
    )?;
    outln!(
        "  listed {} in {} page(s); {} not for this endpoint",
        r.listed,
        r.pages,
        r.not_for_endpoint
    )?;
    outln!("  stored {}, missing {}", r.stored, r.missing)?;
    let would = if r.dry_run { "would be " } else { "" };
    if r.provider == crate::config::ReconcileProvider::GitHub {
        outln!(
            "  {} {would}asked for again, {} redelivered, {} given up (asked {} times)",
            r.asked,
            r.redelivered,
            r.gave_up,
            crate::reconcile::state::MAX_ASKS
        )?;
    } else {
        outln!("  {} {would}admitted from the API", r.admitted)?;
    }
    if !r.missing_ids.is_empty() {
        outln!("  missing: {}", r.missing_ids.join(" "))?;
    }
    Ok(())
}
