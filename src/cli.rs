//! The command line: `serve`, `check-config`, `sign`, `providers`, and the admin
//! commands `entries`, `dlq`, `sources` and `stats` (see `admin_client`).
//!
//! The binary owns presentation: errors are rendered with their whole chain by
//! `main`, and exit codes are documented there.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand};

use crate::admin_client::{self, ApiArgs, DlqCmd, EntriesCmd, SourcesCmd};
use crate::app;
use crate::config::{self, Config, LogFormat, Secret, StoreConfig};
use crate::provider::sign::{SignInput, sign};
use crate::provider::spec::describe;
use crate::provider::{Registry, request_url};
use crate::shutdown;
use crate::telemetry;

#[derive(Debug, Parser)]
#[command(
    name = "hookgate",
    version,
    about = "Receiver-side webhook gateway: verify, dedupe, store durably, relay with retries"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start; the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Exit 0 when a gateway's /readyz answers 200 (for container health checks).
    Healthcheck {
        /// The readiness URL.
        #[arg(long, default_value = "http://127.0.0.1:8081/readyz")]
        url: String,
    },
    /// Validate the configuration and print what it resolves to (never secrets).
    CheckConfig(ConfigArg),
    /// Print the headers (and the body, when the provider keeps signed values in it)
    /// and a curl line that a provider would send for a body.
    Sign(SignArgs),
    /// List the providers this binary (and providers_dir) knows.
    Providers(ConfigArg),
    /// Inspect, replay and discard entries (admin API of a running gateway).
    Entries {
        #[command(flatten)]
        api: ApiArgs,
        #[command(subcommand)]
        cmd: EntriesCmd,
    },
    /// The dead-letter queue: list and replay dead entries.
    Dlq {
        #[command(flatten)]
        api: ApiArgs,
        #[command(subcommand)]
        cmd: DlqCmd,
    },
    /// Pause and resume delivery per source.
    Sources {
        #[command(flatten)]
        api: ApiArgs,
        #[command(subcommand)]
        cmd: SourcesCmd,
    },
    /// Per-source counters: received, duplicates, unverified, pending, delivered, dead.
    Stats {
        #[command(flatten)]
        api: ApiArgs,
    },
}

#[derive(Debug, Args)]
pub struct ConfigArg {
    /// Configuration file (TOML). Defaults to $HOOKGATE_CONFIG; without either,
    /// built-in defaults and HOOKGATE_* variables apply.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Log format, overriding log.format: human or json.
    #[arg(long, value_parser = ["human", "json"])]
    pub log_format: Option<String>,
}

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

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(a) => serve(a).await,
        Command::Healthcheck { url } => healthcheck(&url).await,
        Command::CheckConfig(a) => check_config(a),
        Command::Sign(a) => sign_cmd(a),
        Command::Providers(a) => providers(a),
        Command::Entries { api, cmd } => admin_client::entries(&api, cmd).await,
        Command::Dlq { api, cmd } => admin_client::dlq(&api, cmd).await,
        Command::Sources { api, cmd } => admin_client::sources(&api, cmd).await,
        Command::Stats { api } => admin_client::stats(&api).await,
    }
}

/// The context of every error that makes a configuration unusable: `main` answers
/// it with exit code 2.
#[derive(Debug, Clone, Copy)]
pub struct InvalidConfiguration;

impl std::fmt::Display for InvalidConfiguration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("invalid configuration")
    }
}

fn load(path: Option<&std::path::Path>) -> anyhow::Result<Config> {
    let path = config::config_path(path);
    config::load(path.as_deref()).context(InvalidConfiguration)
}

async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let mut cfg = load(a.config.config.as_deref())?;
    match a.log_format.as_deref() {
        Some("json") => cfg.log.format = LogFormat::Json,
        Some("human") => cfg.log.format = LogFormat::Human,
        _ => {}
    }
    telemetry::init(cfg.log.format);
    // Validate everything before binding anything: a bad config never half-starts.
    let registry = app::registry(&cfg)?;
    app::build_sources(&cfg, &registry, &body_budget(&cfg)).context(InvalidConfiguration)?;
    let listeners = app::bind(&cfg).await?;
    let token = shutdown::CancellationToken::new();
    let on_signal = token.clone();
    tokio::spawn(async move {
        shutdown::signal().await;
        on_signal.cancel();
    });
    app::run(cfg, listeners, token).await
}

async fn healthcheck(url: &str) -> anyhow::Result<()> {
    crate::tls::install_provider();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()?;
    let resp = client
        .get(url)
        .send()
        .await
        .with_context(|| format!("{url} is unreachable"))?;
    if !resp.status().is_success() {
        bail!("{url} answered {}", resp.status());
    }
    Ok(())
}

fn check_config(a: ConfigArg) -> anyhow::Result<()> {
    let path = config::config_path(a.config.as_deref());
    let cfg = config::load(path.as_deref()).context(InvalidConfiguration)?;
    let registry = app::registry(&cfg)?;
    app::build_sources(&cfg, &registry, &body_budget(&cfg)).context(InvalidConfiguration)?;
    match &path {
        Some(p) => println!("config: {}", p.display()),
        None => println!("config: defaults and HOOKGATE_* environment only"),
    }
    println!("ingest: {}", cfg.server.listen);
    println!(
        "admin: {} (token {})",
        cfg.admin.listen,
        if cfg.admin.token.is_some() {
            "set"
        } else {
            "not set: loopback only"
        }
    );
    match &cfg.store {
        StoreConfig::Embedded(e) => println!("store: embedded, {}", e.path.display()),
        StoreConfig::Redis(r) => {
            println!(
                "store: redis, {} (prefix {})",
                config::redact_url(&r.url),
                r.prefix
            )
        }
    }
    println!("sources: {}", cfg.sources.len());
    for s in &cfg.sources {
        println!(
            "  {:<20} provider={} secrets={} destination={} dedupe_ttl={} retry={}x/{}",
            s.name,
            s.provider,
            s.secrets.len(),
            config::redact_url(&s.destination),
            humantime::format_duration(s.dedupe_ttl),
            s.retry.max_attempts,
            humantime::format_duration(s.retry.max_age),
        );
    }
    println!("ok");
    Ok(())
}

fn providers(a: ConfigArg) -> anyhow::Result<()> {
    let registry = match config::config_path(a.config.as_deref()) {
        Some(p) => app::registry(&config::load(Some(&p)).context(InvalidConfiguration)?)?,
        None => Registry::builtin()?,
    };
    for spec in registry.iter() {
        println!("{:<20} {}", spec.name, spec.summary);
        for (what, text) in describe(spec) {
            println!("    {what:<11} {text}");
        }
    }
    Ok(())
}

fn sign_cmd(a: SignArgs) -> anyhow::Result<()> {
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
            (None, None) => s.secrets[0].clone(),
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
    let timestamp = a.timestamp.unwrap_or_else(crate::ingest::system_clock);
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
        println!("{n}: {v}");
    }
    if signed.body.is_some() {
        println!();
        println!("{}", String::from_utf8_lossy(&body));
    }
    println!();
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
    println!("{curl}");
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

/// A body budget of the configured size, for validating sources.
fn body_budget(cfg: &Config) -> crate::ingest::body::BodyBudget {
    crate::ingest::body::BodyBudget::new(cfg.server.body_budget_bytes)
}
