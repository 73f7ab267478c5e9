//! The command line: its parser, and the commands that run in this process
//! (`serve`, `healthcheck`, `check-config`, `providers`). `sign` is in [`sign`]; the
//! commands that talk to a running gateway's admin API (`entries`, `dlq`, `sources`,
//! `stats`, `gateways`) are in [`admin`], `reconcile` in [`reconcile`]. `listen`
//! ([`listen`]) takes a pull route's deliveries and forwards them to a local app.
//!
//! The binary owns presentation: errors are rendered with their whole chain by
//! `main`, and exit codes are documented there.

pub mod admin;
mod dead_letters;
pub mod listen;
pub mod out;
pub mod reconcile;
pub mod rejections;
pub mod reload;
pub mod routes;
pub mod sign;
pub mod transform;

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand};

use crate::app;
use crate::config::{self, Config, LogFormat, StoreConfig};
use crate::provider::Registry;
use crate::provider::spec::describe;
use crate::shutdown;
use crate::telemetry;
use admin::{ApiArgs, DlqCmd, EntriesCmd, SourcesCmd};
use out::outln;
use sign::SignArgs;

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
    CheckConfig(CheckConfigArgs),
    /// Print the headers (and the body, when the provider keeps signed values in it)
    /// and a curl line that a provider would send for a body.
    Sign(SignArgs),
    /// List the providers this binary (and providers_dir) knows.
    Providers(ConfigArg),
    /// Run routes' transforms for a gateway, over stdin and stdout (the gateway
    /// starts these itself).
    #[command(hide = true)]
    TransformWorker,
    /// Routes' transforms: what a route would send for a body or a stored entry.
    Transform {
        #[command(subcommand)]
        cmd: transform::TransformCmd,
    },
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
    /// Every route in force and every retired one (a reload removed it) with the
    /// deliveries it keeps; discard what a retired route keeps.
    Routes {
        #[command(flatten)]
        api: ApiArgs,
        #[command(subcommand)]
        cmd: routes::RoutesCmd,
    },
    /// Reload a running gateway's configuration (its file and the files it
    /// names) without a restart; a refused reload changes nothing and exits 1.
    Reload {
        #[command(flatten)]
        api: ApiArgs,
        /// Print what would change; apply nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// The configuration a running gateway has in force: its version, when and
    /// from where it was loaded.
    Config {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Per-source counters: received, duplicates, unverified, pending, delivered, dead.
    Stats {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// The gateways sharing the store: id, host, configuration version, started,
    /// last heartbeat, alive.
    Gateways {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Compare a source with what its provider's API says it sent, and recover
    /// what never reached the gateway (`[sources.reconcile]`).
    Reconcile {
        #[command(flatten)]
        api: ApiArgs,
        #[command(flatten)]
        args: reconcile::ReconcileArgs,
    },
    /// Requests ingest refused: counts per source and reason, and the newest ones.
    Rejections {
        #[command(flatten)]
        api: ApiArgs,
        #[command(flatten)]
        args: rejections::RejectionArgs,
    },
    /// Take a pull route's deliveries and forward them to a local app (a laptop, a
    /// firewalled app): nothing is lost while it sleeps.
    Listen(listen::ListenArgs),
}

#[derive(Debug, Args)]
pub struct ConfigArg {
    /// Configuration file (TOML). Defaults to $HOOKGATE_CONFIG; without either,
    /// built-in defaults and HOOKGATE_* variables apply.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Also ask each queue destination's broker whether the destination exists and
    /// takes a publish (a dry one: nothing is delivered), and what it keeps that
    /// bears on the route (a stream's duplicate window). Exits 1 when one does not.
    #[arg(long)]
    pub connect: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Log format, overriding log.format: human or json.
    #[arg(long, value_parser = ["human", "json"])]
    pub log_format: Option<String>,
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(a) => serve(a).await,
        Command::Healthcheck { url } => healthcheck(&url).await,
        Command::CheckConfig(a) => check_config(a).await,
        Command::Sign(a) => sign::run(a),
        Command::Providers(a) => providers(a),
        Command::Transform { cmd } => transform::run(cmd).await,
        Command::TransformWorker => {
            tokio::task::spawn_blocking(crate::transform::worker::main).await??;
            Ok(())
        }
        Command::Entries { api, cmd } => admin::entries(&api, cmd).await,
        Command::Dlq { api, cmd } => admin::dlq(&api, cmd).await,
        Command::Sources { api, cmd } => admin::sources(&api, cmd).await,
        Command::Stats { api } => admin::stats(&api).await,
        Command::Routes { api, cmd } => routes::run(&api, cmd).await,
        Command::Reload { api, dry_run } => reload::reload(&api, dry_run).await,
        Command::Config { api } => reload::show(&api).await,
        Command::Gateways { api } => admin::gateways(&api).await,
        Command::Rejections { api, args } => rejections::rejections(&api, args).await,
        Command::Reconcile { api, args } => reconcile::reconcile(&api, args).await,
        Command::Listen(a) => listen::run(a).await,
    }
}

/// The context of every error that makes a configuration unusable: `main` answers
/// it with exit code 2.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("invalid configuration")]
pub struct InvalidConfiguration;

fn load(path: Option<&std::path::Path>) -> anyhow::Result<Config> {
    let path = config::config_path(path);
    config::load(path.as_deref()).context(InvalidConfiguration)
}

async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let path = config::config_path(a.config.config.as_deref());
    let mut cfg = load(path.as_deref())?;
    match a.log_format.as_deref() {
        Some("json") => cfg.log.format = LogFormat::Json,
        Some("human") => cfg.log.format = LogFormat::Human,
        _ => {}
    }
    // Held until `serve` returns: the log lines still queued are written then.
    let _log = telemetry::init(cfg.log.format);
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
    app::run_from(cfg, app::Origin::File(path), listeners, token).await
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

async fn check_config(a: CheckConfigArgs) -> anyhow::Result<()> {
    let path = config::config_path(a.config.config.as_deref());
    let cfg = config::load(path.as_deref()).context(InvalidConfiguration)?;
    let registry = app::registry(&cfg)?;
    app::build_sources(&cfg, &registry, &body_budget(&cfg)).context(InvalidConfiguration)?;
    match &path {
        Some(p) => outln!("config: {}", p.display())?,
        None => outln!("config: defaults and HOOKGATE_* environment only")?,
    }
    outln!("ingest: {}", cfg.server.listen)?;
    outln!(
        "admin: {} (token {})",
        cfg.admin.listen,
        if cfg.admin.token.is_some() {
            "set"
        } else {
            "not set: loopback only"
        }
    )?;
    match &cfg.store {
        StoreConfig::Embedded(e) => outln!("store: embedded, {}", e.path.display())?,
        StoreConfig::Redis(r) => outln!(
            "store: redis, {} (prefix {})",
            config::redact_url(&r.url),
            r.prefix
        )?,
        StoreConfig::Postgres(p) => outln!(
            "store: postgres, {} (schema {}{})",
            config::redact_url(&p.url),
            p.schema,
            if p.require_sync_standby {
                ", a synchronous standby required"
            } else {
                ""
            }
        )?,
    }
    outln!("sources: {}", cfg.sources.len())?;
    for s in &cfg.sources {
        outln!(
            "  {:<20} provider={} secrets={} dedupe_ttl={} routes={}",
            s.name,
            s.provider,
            s.secrets.len(),
            humantime::format_duration(s.dedupe_ttl),
            s.routes.len(),
        )?;
        match &s.expect {
            Some(config::Expectation::AtLeast(e)) => outln!(
                "    expects at least {} per {}",
                e.at_least,
                humantime::format_duration(e.within)
            )?,
            Some(config::Expectation::Learned) => {
                outln!("    expects what it usually receives at this hour of the week (learned)")?
            }
            None => {}
        }
        if let Some(r) = &s.reconcile {
            outln!(
                "    reconciled with {} at {} every {}, looking back {} (items younger than {} left to the provider)",
                r.api.provider().as_str(),
                r.api_base,
                humantime::format_duration(r.interval),
                humantime::format_duration(r.lookback),
                humantime::format_duration(r.settle),
            )?;
        }
        for r in &s.routes {
            outln!(
                "    route {:<14} destination={} ({}) retry={}x/{}{}{}",
                r.name,
                config::redact_url(&r.destination),
                r.target.kind().as_str(),
                r.retry.max_attempts,
                humantime::format_duration(r.retry.max_age),
                r.delivery
                    .rate_limit
                    .map(|l| format!(" rate_limit={}/s", l.per_second))
                    .unwrap_or_default(),
                if r.filter.takes_everything() {
                    ""
                } else {
                    " filtered"
                },
            )?;
        }
    }
    print_unsigned(&app::unsigned_values(&cfg, &registry)?)?;
    for w in app::store_warnings(&cfg) {
        outln!("warning: {w}")?;
    }
    if a.connect {
        let checks = crate::forward::destinations::check_all(&cfg.sources).await;
        let mut failed = 0;
        for c in &checks {
            outln!(
                "destination {}/{} ({}): {}",
                c.source,
                c.route,
                c.broker,
                if c.check.ok { "ok" } else { "NOT READY" }
            )?;
            for f in &c.check.facts {
                outln!("    {f}")?;
            }
            for w in &c.check.warnings {
                outln!("warning: source {} route {}: {w}", c.source, c.route)?;
            }
            failed += usize::from(!c.check.ok);
        }
        if failed > 0 {
            anyhow::bail!("{failed} queue destination(s) not ready");
        }
    }
    outln!("ok")?;
    Ok(())
}

/// One warning line per route filter or ordering key on a value its provider does
/// not sign.
fn print_unsigned(warnings: &[crate::provider::signed::UnsignedValue]) -> anyhow::Result<()> {
    for w in warnings {
        outln!("warning: {w}")?;
    }
    Ok(())
}

fn providers(a: ConfigArg) -> anyhow::Result<()> {
    let cfg = match config::config_path(a.config.as_deref()) {
        Some(p) => Some(config::load(Some(&p)).context(InvalidConfiguration)?),
        None => None,
    };
    let registry = match &cfg {
        Some(cfg) => app::registry(cfg)?,
        None => Registry::builtin()?,
    };
    for spec in registry.iter() {
        outln!("{:<20} {}", spec.name, spec.summary)?;
        for (what, text) in describe(spec) {
            outln!("    {what:<11} {text}")?;
        }
    }
    // With a configuration: its routes that filter or order on an unsigned value.
    if let Some(cfg) = &cfg {
        print_unsigned(&app::unsigned_values(cfg, &registry)?)?;
    }
    Ok(())
}

/// A body budget of the configured size, for validating sources.
fn body_budget(cfg: &Config) -> crate::ingest::body::BodyBudget {
    crate::ingest::body::BodyBudget::new(cfg.server.body_budget_bytes)
}
