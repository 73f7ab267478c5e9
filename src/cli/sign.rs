//! `hookgate sign`: what a provider would send for a body, to test a gateway by
//! hand. Prints the signature headers (and the body, when the provider keeps signed
//! values in it) and a curl line that sends it.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Args;

use super::out::outln;
use super::{InvalidConfiguration, load};
use crate::app;
use crate::config::{self, Secret};
use crate::provider::sign::{SignInput, sign};
use crate::provider::{Registry, request_url};

#[derive(Debug, Args)]
pub struct SignArgs {
    /// Sign as this configured source (its provider, options and first secret).
    #[arg(long, conflicts_with = "provider", requires = "config")]
    pub source: Option<String>,
    /// Configuration file, with --source.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Sign as this provider.
    #[arg(long, required_unless_present = "source")]
    pub provider: Option<String>,
    /// The secret (prefer --secret-env: command lines end up in shell history).
    #[arg(long, conflicts_with = "secret_env")]
    pub secret: Option<String>,
    /// The environment variable holding the secret.
    #[arg(long)]
    pub secret_env: Option<String>,
    /// The body to sign.
    #[arg(
        long,
        conflicts_with = "body_file",
        required_unless_present = "body_file"
    )]
    pub body: Option<String>,
    /// A file holding the exact body bytes to sign.
    #[arg(long)]
    pub body_file: Option<PathBuf>,
    /// Unix seconds to sign at (default: now).
    #[arg(long)]
    pub timestamp: Option<i64>,
    /// Delivery/message id for providers that send one in a header (default: random).
    #[arg(long)]
    pub id: Option<String>,
    /// Event type for providers that send it in a header.
    #[arg(long)]
    pub event_type: Option<String>,
    /// The URL for the curl line (default: http://127.0.0.1:8080/ingest/<source or
    /// provider>). Providers that sign the URL they call (Twilio, Square, HubSpot) sign
    /// the source's public_url with this URL's query, or this URL itself with --provider.
    #[arg(long)]
    pub url: Option<String>,
}

/// Run `hookgate sign`.
pub(super) fn run(a: SignArgs) -> anyhow::Result<()> {
    let body = match (&a.body, &a.body_file) {
        (Some(b), _) => b.clone().into_bytes(),
        (None, Some(f)) => {
            std::fs::read(f).with_context(|| format!("--body-file {}", f.display()))?
        }
        (None, None) => bail!("give --body or --body-file"),
    };
    let (spec, secret, name, public_url) = if let Some(source) = &a.source {
        let cfg = load(a.config.as_deref())?;
        let registry = app::registry(&cfg)?;
        let s = cfg
            .sources
            .iter()
            .find(|s| &s.name == source)
            .with_context(|| {
                format!("--source: no source named {source:?} in the configuration")
            })?;
        let spec = registry.resolve(&s.provider, s.provider_options.as_ref())?;
        let secret = match (&a.secret, &a.secret_env) {
            (None, None) => s.secrets.first().cloned().with_context(|| {
                format!("--source: source {source:?} has no secret to sign with")
            })?,
            _ => secret_arg(&a)?,
        };
        (spec, secret, source.clone(), s.public_url.clone())
    } else {
        let provider = a.provider.clone().context("give --provider or --source")?;
        let registry = match &a.config {
            Some(p) => app::registry(&config::load(Some(p)).context(InvalidConfiguration)?)?,
            None => Registry::builtin()?,
        };
        let spec = registry.get(&provider).cloned().with_context(|| {
            format!("--provider: unknown provider {provider:?}; see `hookgate providers`")
        })?;
        (spec, secret_arg(&a)?, provider, None)
    };
    let timestamp = a
        .timestamp
        .unwrap_or_else(|| crate::clock::Clock::system().now_secs());
    let id =
        a.id.clone()
            .unwrap_or_else(|| format!("msg_{}", uuid::Uuid::now_v7().simple()));
    let url = a
        .url
        .clone()
        .unwrap_or_else(|| format!("http://127.0.0.1:8080/ingest/{name}"));
    let uri = url.parse::<http::Uri>().ok();
    let path = uri
        .as_ref()
        .and_then(|u| u.path_and_query().map(|p| p.as_str().to_string()))
        .unwrap_or_else(|| "/".into());
    // The URL the provider signs: the source's public_url with the request's query,
    // or, signing as a bare provider, --url itself.
    let signed_url = match &public_url {
        Some(base) => Some(request_url(base, uri.as_ref().and_then(|u| u.query()))),
        None => a.url.clone(),
    };
    let signed = sign(
        &spec,
        &secret,
        &SignInput {
            body: &body,
            timestamp,
            id: &id,
            event_type: a.event_type.as_deref(),
            method: "POST",
            path: &path,
            url: signed_url.as_deref(),
        },
    )?;
    let body = signed.body(&body).to_vec();
    for (n, v) in &signed.headers {
        outln!("{n}: {v}")?;
    }
    if signed.body.is_some() {
        outln!()?;
        outln!("{}", String::from_utf8_lossy(&body))?;
    }
    outln!()?;
    let content_type = match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') | Some(b'[') => "application/json",
        _ => "application/x-www-form-urlencoded",
    };
    let mut curl = format!("curl -sS -X POST {}", shell_quote(&url));
    curl.push_str(&format!(" -H 'content-type: {content_type}'"));
    for (n, v) in &signed.headers {
        curl.push_str(&format!(" -H {}", shell_quote(&format!("{n}: {v}"))));
    }
    match (&a.body_file, signed.body.is_some()) {
        (Some(f), false) => curl.push_str(&format!(
            " --data-binary {}",
            shell_quote(&format!("@{}", f.display()))
        )),
        _ => curl.push_str(&format!(
            " --data-binary {}",
            shell_quote(&String::from_utf8_lossy(&body))
        )),
    }
    outln!("{curl}")?;
    Ok(())
}

fn secret_arg(a: &SignArgs) -> anyhow::Result<Secret> {
    match (&a.secret, &a.secret_env) {
        (Some(s), _) => Ok(Secret::new(s.clone())),
        (None, Some(var)) => std::env::var(var)
            .map(Secret::new)
            .with_context(|| format!("--secret-env: {var} is not set")),
        (None, None) => bail!("give --secret or --secret-env"),
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
