//! The composition root: turns a validated [`Config`] into running parts.
//!
//! Only this module builds and wires objects: the provider registry, the sources'
//! verifiers, the store, the routers and the listeners. `run` takes pre-bound
//! listeners so that tests can bind `127.0.0.1:0` and run the real gateway.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;

use crate::admin::{self, AdminState};
use crate::alerts::{self, Alerts};
use crate::config::{Config, StoreConfig};
use crate::console::{self, ConsoleState};
use crate::error;
use crate::forward;
use crate::header_policy::HeaderPolicy;
use crate::ingest::{self, IngestState, Source};
use crate::operations::Operations;
use crate::provider::{self, Registry, Verifier};
use crate::serve::{self, BodyLimits, HttpLimits, serve};

/// Connections the probe listener (`admin.probe_listen`) holds at most.
pub const PROBE_MAX_CONNECTIONS: usize = 64;
use crate::store;
use crate::telemetry;

/// The listeners the gateway serves on, bound by the caller.
pub struct Listeners {
    pub ingest: TcpListener,
    pub admin: TcpListener,
    /// `admin.probe_listen`'s, when it is set.
    pub probes: Option<TcpListener>,
}

/// The provider registry for a configuration: built-ins plus `providers_dir`.
pub fn registry(cfg: &Config) -> anyhow::Result<Registry> {
    Registry::with_dir(cfg.providers_dir.as_deref()).context("providers_dir")
}

/// Compile every configured source against its provider spec. Each gets its share
/// of `budget` (the ingest body budget).
pub fn build_sources(
    cfg: &Config,
    registry: &Registry,
    budget: &ingest::body::BodyBudget,
) -> anyhow::Result<Vec<Source>> {
    // One list per URL, whichever sources take it.
    let mut published: HashMap<String, Arc<crate::allowlist::Published>> = HashMap::new();
    cfg.sources
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let spec = registry
                .resolve(&s.provider, s.provider_options.as_ref())
                .with_context(|| format!("sources[{i}].provider"))?;
            if spec.signs_url() && s.public_url.is_none() {
                anyhow::bail!(
                    "sources[{i}].public_url: provider {:?} signs the URL it calls; set public_url to that URL (e.g. https://hooks.example.com/ingest/{})",
                    s.provider,
                    s.name
                );
            }
            // A provider whose secret arrives in a handshake (Asana) needs none here.
            let hook_secret = spec.handshake == Some(provider::spec::Handshake::HookSecret);
            if s.secrets.is_empty() && !hook_secret {
                anyhow::bail!(
                    "sources[{i}].secret: source {:?} has no secret; set secret, secrets or secret_env",
                    s.name
                );
            }
            let verifier =
                Verifier::new(spec, &s.secrets).with_context(|| format!("sources[{i}].secret"))?;
            let established = hook_secret.then(|| {
                Arc::new(ingest::hook_secret::Established::new(
                    &s.name,
                    verifier.spec.clone(),
                    s.secrets.clone(),
                ))
            });
            let headers =
                HeaderPolicy::new(&s.pass_headers(), &verifier.spec.credential_headers);
            let routes = s
                .routes
                .iter()
                .enumerate()
                .map(|(r, route)| {
                    let order = route
                        .order
                        .as_ref()
                        .map(|o| ingest::RouteOrdering::new(o, &verifier.spec, &s.provider))
                        .transpose()
                        .with_context(|| format!("sources[{i}].routes[{r}].order.by"))?;
                    Ok(ingest::RouteFilter {
                        name: route.name.clone(),
                        filter: route.filter.clone(),
                        order,
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let allowlist = match &s.allow_ips {
                None => None,
                Some(crate::config::AllowIps::List(list)) => {
                    Some(crate::allowlist::Allowlist::Fixed(list.clone().into()))
                }
                Some(crate::config::AllowIps::Provider) => {
                    let Some(ranges) = verifier.spec.ranges.clone() else {
                        anyhow::bail!(
                            "sources[{i}].allow_ips: provider {:?} publishes no address ranges (its spec has no [ranges]); list the ranges instead",
                            s.provider
                        );
                    };
                    let list = published
                        .entry(ranges.url.clone())
                        .or_insert_with(|| {
                            Arc::new(crate::allowlist::Published::new(&s.provider, ranges))
                        })
                        .clone();
                    Some(crate::allowlist::Allowlist::Published(list))
                }
            };
            if verifier.spec.handshake == Some(provider::spec::Handshake::MetaSubscribe)
                && s.verify_token.is_none()
            {
                anyhow::bail!(
                    "sources[{i}].verify_token: provider {:?} checks the endpoint with the verify token set in its dashboard; set verify_token_env to it",
                    s.provider
                );
            }
            if s.confirm_subscriptions
                && (verifier.spec.handshake != Some(provider::spec::Handshake::SnsSubscription)
                    || verifier.spec.certificate.is_none())
            {
                anyhow::bail!(
                    "sources[{i}].confirm_subscriptions: provider {:?} has no subscriptions the gateway can confirm (only aws-sns)",
                    s.provider
                );
            }
            Ok(Source {
                name: s.name.clone(),
                verifier,
                dedupe_ttl: s.dedupe_ttl,
                public_url: s.public_url.clone(),
                headers,
                routes,
                // Clients are told apart when a connection's address is its client's,
                // or when trusted proxies name the client.
                body_share: budget.share(
                    &s.name,
                    cfg.server.max_body_bytes,
                    cfg.server.max_connections_per_client.is_some()
                        || !cfg.server.trusted_proxies.is_empty(),
                ),
                metrics: ingest::SourceMetrics::new(&s.name),
                keep_rejected_bodies: s.keep_rejected_bodies,
                index: s.index.clone(),
                request_limit: (s.request_limit.is_some() || s.unverified_per_client.is_some())
                    .then(|| {
                        Arc::new(ingest::limit::RequestLimit::new(
                            s.request_limit,
                            s.unverified_per_client,
                        ))
                    }),
                allowlist,
                verify_token: s.verify_token.clone(),
                confirm_subscriptions: s.confirm_subscriptions,
                established,
            })
        })
        .collect()
}

/// The providers' published lists the sources take (`allow_ips = "provider"`), each
/// once.
fn published_lists(sources: &[Source]) -> Vec<Arc<crate::allowlist::Published>> {
    let mut lists: Vec<Arc<crate::allowlist::Published>> = Vec::new();
    for s in sources {
        if let Some(crate::allowlist::Allowlist::Published(list)) = &s.allowlist
            && !lists.iter().any(|l| Arc::ptr_eq(l, list))
        {
            if list.source.url != list.source.published {
                tracing::warn!(
                    provider = %list.provider,
                    fetched_from = %list.source.url,
                    "the provider's ranges are fetched from the spec's fetch_base, not from the provider: this is for tests"
                );
            }
            lists.push(list.clone());
        }
    }
    lists
}

/// Every route filter and ordering key of `cfg` that reads a value its source's
/// provider does not sign (see [`provider::signed`]).
pub fn unsigned_values(
    cfg: &Config,
    registry: &Registry,
) -> anyhow::Result<Vec<provider::signed::UnsignedValue>> {
    let mut out = Vec::new();
    for (i, s) in cfg.sources.iter().enumerate() {
        let spec = registry
            .resolve(&s.provider, s.provider_options.as_ref())
            .with_context(|| format!("sources[{i}].provider"))?;
        out.extend(provider::signed::unsigned_values(s, &spec));
    }
    Ok(out)
}

/// Every metric family with a zero series per configured source and destination, so
/// that the first scrape lists them all (see [`telemetry::register_families`]).
fn register_metric_families(cfg: &Config) {
    let sources: Vec<telemetry::SourceRoutes> = cfg
        .sources
        .iter()
        .map(|s| telemetry::SourceRoutes {
            source: s.name.clone(),
            routes: s.routes.iter().map(|r| r.name.clone()).collect(),
        })
        .collect();
    let mut destinations: Vec<String> = cfg
        .sources
        .iter()
        .flat_map(|s| s.routes.iter().map(|r| forward::origin(&r.destination)))
        .collect();
    destinations.sort();
    destinations.dedup();
    telemetry::register_families(&sources);
    ingest::register_metrics(&sources);
    forward::register_metrics(&sources, &destinations);
    alerts::register_metrics();
    provider::register_metrics(sources.iter().map(|s| s.source.as_str()));
    serve::register_metrics();
    store::register_metrics();
}

/// Bind the configured addresses.
pub async fn bind(cfg: &Config) -> anyhow::Result<Listeners> {
    let ingest = TcpListener::bind(cfg.server.listen)
        .await
        .with_context(|| format!("server.listen: cannot bind {}", cfg.server.listen))?;
    let admin = TcpListener::bind(cfg.admin.listen)
        .await
        .with_context(|| format!("admin.listen: cannot bind {}", cfg.admin.listen))?;
    let probes = match cfg.admin.probe_listen {
        None => None,
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("admin.probe_listen: cannot bind {addr}"))?,
        ),
    };
    Ok(Listeners {
        ingest,
        admin,
        probes,
    })
}

/// The store stopped for good while the gateway ran (the embedded store after a
/// failed fsync): `serve` exits non-zero once it has drained.
#[derive(Debug, thiserror::Error)]
#[error(
    "the store stopped while serving (a failed fsync); restart hookgate to recover from what is on disk"
)]
pub struct StoreStopped;

/// Run the gateway until `shutdown` is cancelled, or until the store stops for good
/// (then the result is [`StoreStopped`]); then drain and close the store.
pub async fn run(
    cfg: Config,
    listeners: Listeners,
    outer: CancellationToken,
) -> anyhow::Result<()> {
    run_version(cfg, listeners, outer, UNKNOWN_VERSION.to_string()).await
}

/// The configuration version of a gateway whose caller named none.
pub const UNKNOWN_VERSION: &str = "unknown";

/// [`run`], the gateway running the configuration `version` (what its heartbeat
/// and `hookgate_config_version_info` say).
pub async fn run_version(
    cfg: Config,
    listeners: Listeners,
    outer: CancellationToken,
    version: String,
) -> anyhow::Result<()> {
    // Everything below stops on the caller's shutdown or on a stopped store.
    let shutdown = outer.child_token();
    let gateway = build(
        &cfg,
        listeners.probes.is_some(),
        crate::clock::Clock::system(),
        version,
    )
    .await?;
    serve_until_shutdown(&cfg, gateway, listeners, shutdown).await
}

/// The ingest and admin routers of a gateway built from `cfg` on `clock`, with
/// nothing served and nothing running: the `http` fuzz target drives them in process.
#[cfg(any(test, fuzzing))]
pub(crate) async fn routers(
    cfg: &Config,
    clock: crate::clock::Clock,
) -> anyhow::Result<(axum::Router, axum::Router)> {
    let gateway = build(cfg, false, clock, UNKNOWN_VERSION.to_string()).await?;
    Ok((gateway.ingest, gateway.admin))
}

/// The executable that runs the routes' transforms (see `Config::transform_worker`).
fn transform_worker(cfg: &Config) -> anyhow::Result<std::path::PathBuf> {
    match &cfg.transform_worker {
        Some(exe) => Ok(exe.clone()),
        None => std::env::current_exe().context("cannot find this executable to run transforms"),
    }
}

/// Everything the gateway serves and runs, built from the configuration before a
/// listener serves anything.
struct Gateway {
    store: Arc<dyn store::Store>,
    /// One clock for everything that needs the time.
    clock: crate::clock::Clock,
    /// How many sources ingest serves.
    sources: usize,
    ingest: axum::Router,
    ingest_limits: HttpLimits,
    /// Telemetry, the admin API and the console.
    admin: axum::Router,
    admin_limits: HttpLimits,
    /// The probes' own listener's, when one was bound.
    probes: Option<axum::Router>,
    probe_limits: HttpLimits,
    /// The forwarder's routes.
    routes: Vec<forward::Route>,
    alerts: Arc<Alerts>,
    on_dead: Option<forward::OnDead>,
    pressure: Arc<crate::pressure::IngestPressure>,
    unverified: Arc<ingest::UnverifiedCounts>,
    rejections: Arc<ingest::rejections::RejectionLog>,
    traces: telemetry::traces::Traces,
    /// The providers' published ranges to keep up to date.
    allowlists: Vec<Arc<crate::allowlist::Published>>,
    /// Who this gateway is on the store (its heartbeat, its leases).
    identity: forward::GatewayIdentity,
}

/// Build every part of the gateway: the metrics, the sources, the store, the
/// routers of the listeners (the probes' when `with_probes`) and the forwarder's
/// routes. Nothing serves yet.
async fn build(
    cfg: &Config,
    with_probes: bool,
    clock: crate::clock::Clock,
    version: String,
) -> anyhow::Result<Gateway> {
    telemetry::install_metrics();
    register_metric_families(cfg);
    // One id per run: the heartbeat's, and the name this gateway's leases are held
    // under.
    let identity = forward::GatewayIdentity::new(version, clock.now_ms());
    forward::register_gateway_metrics(&identity);
    telemetry::traces::register_metrics();
    let traces = match &cfg.telemetry.traces {
        Some(settings) => {
            // The exporter's HTTP client may speak TLS to the collector.
            crate::tls::install_provider();
            telemetry::traces::Traces::start(settings).context("traces")?
        }
        None => telemetry::traces::Traces::off(),
    };
    let registry = registry(cfg)?;
    let body_budget = ingest::body::BodyBudget::new(cfg.server.body_budget_bytes);
    let sources = build_sources(cfg, &registry, &body_budget)?;
    // Said before connecting, so that a store that does not answer does not hide it.
    for w in store_warnings(cfg) {
        tracing::warn!("{w}");
    }
    let store = store::open(&cfg.store, &clock).await.context("store")?;
    let allowlists = published_lists(&sources);
    crate::allowlist::refresh::register_metrics(&allowlists);
    crate::allowlist::refresh::load_saved(&allowlists, store.as_ref()).await;
    let unsigned = warn_about_setup(cfg, &sources);

    let admin_sources = admin_sources(&sources);
    let provider_facts = provider_facts(&sources);
    let unverified = Arc::new(ingest::UnverifiedCounts::default());
    let rejections = Arc::new(rejection_log(&registry));
    let readiness = Arc::new(crate::store::Readiness::new());
    let pressure = Arc::new(crate::pressure::IngestPressure::new(
        cfg.forwarder.ingest_first,
    ));
    let state = Arc::new(IngestState {
        unverified: unverified.clone(),
        rejections: rejections.clone(),
        sources: sources
            .into_iter()
            .map(|s| (s.name.clone(), Arc::new(s)))
            .collect::<HashMap<_, _>>(),
        store: store.clone(),
        max_body_bytes: cfg.server.max_body_bytes,
        body_read_timeout: cfg.server.body_read_timeout,
        body_budget,
        verify_slots: Arc::new(tokio::sync::Semaphore::new(
            std::thread::available_parallelism().map_or(2, |n| n.get()),
        )),
        clock: clock.clone(),
        store_timeout: cfg.store.timeout(),
        readiness: readiness.clone(),
        pressure: pressure.clone(),
        traces: traces.clone(),
        client_ip: crate::serve::forwarded::ClientIp {
            trusted: cfg.server.trusted_proxies.clone(),
            header: cfg.server.client_ip_header,
        },
        client_ipv6_prefix: cfg.server.client_ipv6_prefix,
        fetched_keys: Arc::new(
            crate::provider::certificate::FetchedKeys::new()
                .context("the HTTP client of certificate fetches")?,
        ),
    });
    let source_count = state.sources.len();
    let (ingest_limits, admin_limits, probe_limits) = http_limits(cfg);
    // Outermost: a bug in a handler answers 500 instead of dropping the connection.
    let ingest = ingest::router(state).layer(CatchPanicLayer::custom(error::panic_response));
    let transforms = Arc::new(crate::transform::Transforms::new(
        transform_worker(cfg)?,
        cfg.sources
            .iter()
            .flat_map(|s| {
                s.routes.iter().filter_map(|r| {
                    let t = r.transform.clone()?;
                    Some((s.name.clone(), r.name.clone(), t))
                })
            })
            .collect(),
        cfg.server.max_body_bytes,
        cfg.forwarder.transform_memory_bytes,
    ));
    let ops = Operations::new(
        store.clone(),
        admin_sources,
        cfg.admin.replay_rate,
        clock.clone(),
    )
    .with_transforms(transforms.clone())
    .with_traces(traces.clone());
    let admin_state = Arc::new(AdminState::new(
        ops,
        cfg.admin.token.as_ref(),
        cfg.admin.failed_auth_allowance,
    ));
    let routes = forward::routes(&cfg.sources, &cfg.forwarder, &provider_facts, &transforms)
        .context("delivery client")?;
    let console_state = Arc::new(
        ConsoleState::new(
            admin_state.clone(),
            cfg.admin.token.as_ref(),
            cfg.sources
                .iter()
                .map(|c| {
                    let mine = unsigned.iter().filter(|w| w.source == c.name);
                    console::SourceView::of(c)
                        .with_unsigned(mine.map(|w| (w.route.clone(), w.warning())).collect())
                })
                .collect(),
            breaker_states(&routes),
            cfg.admin.public_origin.clone(),
        )
        .context("console")?,
    );
    let probes = with_probes.then(|| {
        admin::probes::router(store.clone(), readiness.clone())
            .layer(axum::middleware::from_fn_with_state(
                admin_state.clone(),
                admin::guard,
            ))
            .layer(CatchPanicLayer::custom(error::panic_response))
    });
    let admin = admin::probes::router(store.clone(), readiness)
        .merge(admin::router(admin_state.clone()))
        .merge(console::router(console_state))
        // Around everything the admin listener serves, not inside `admin::router`:
        // a page in a local browser must not read `/metrics`, the probes or the
        // console through a rebound DNS name either, and each route needs no check
        // of its own.
        .layer(axum::middleware::from_fn_with_state(
            admin_state,
            admin::guard,
        ))
        .layer(CatchPanicLayer::custom(error::panic_response));
    let alerts = Arc::new(Alerts::default());
    let on_dead: Option<forward::OnDead> = cfg.alerts.webhook_url.as_ref().map(|_| {
        let alerts = alerts.clone();
        Arc::new(move |source: &str, route: &str, reason: &str| alerts.dead(source, route, reason))
            as forward::OnDead
    });
    Ok(Gateway {
        store,
        clock,
        sources: source_count,
        ingest,
        ingest_limits,
        admin,
        admin_limits,
        probes,
        probe_limits,
        routes,
        alerts,
        on_dead,
        pressure,
        unverified,
        rejections,
        traces,
        allowlists,
        identity,
    })
}

/// The rejection log, redacting every provider's signature header and the secret of
/// a secret handshake (`X-Hook-Secret`), and keeping no provider's credential of a
/// request to a name that is not a source.
fn rejection_log(registry: &Registry) -> ingest::rejections::RejectionLog {
    let mut signatures: Vec<String> = Vec::new();
    let mut credentials = Vec::new();
    for spec in registry.iter() {
        let handshake_secret = (spec.handshake == Some(provider::spec::Handshake::HookSecret))
            .then_some(ingest::hook_secret::HEADER);
        for h in spec
            .signature_headers()
            .map(|h| h.as_str())
            .chain(handshake_secret)
        {
            if !signatures.iter().any(|s| s == h) {
                signatures.push(h.to_string());
            }
        }
        credentials.extend(spec.credential_headers.iter().cloned());
    }
    ingest::rejections::RejectionLog::new(signatures, HeaderPolicy::new(&[], &credentials))
}

/// Warn about what the operator may not have meant: no admin token or a short one,
/// no source, route filters and ordering keys that read unsigned values. The
/// unsigned values, for the console to show.
fn warn_about_setup(cfg: &Config, sources: &[Source]) -> Vec<provider::signed::UnsignedValue> {
    if cfg.admin.token.is_none() {
        tracing::warn!(
            listen = %cfg.admin.listen,
            "no admin token configured: the admin listener is bound to loopback only and refuses cross-site requests"
        );
    }
    if cfg.admin.token.as_ref().is_some_and(admin::token_is_short) {
        tracing::warn!(
            min_chars = admin::MIN_TOKEN_CHARS,
            "the admin token is short: use at least 24 random characters (e.g. `openssl rand -hex 32`); failed attempts are throttled per client, not per token"
        );
    }
    if sources.is_empty() {
        tracing::warn!("no sources configured: every ingest request will answer 404");
    }
    if !cfg.server.trusted_proxies.is_empty() {
        tracing::info!(
            header = cfg.server.client_ip_header.name(),
            trusted_proxies = cfg.server.trusted_proxies.len(),
            "the client's address is read from this header when a trusted proxy sends it; other forwarding headers are ignored"
        );
    }
    for s in sources {
        let spec = &s.verifier.spec;
        let fetched_from = [
            spec.certificate
                .as_ref()
                .and_then(|c| c.fetch_base.as_ref()),
            spec.jwk.as_ref().and_then(|j| j.fetch_base.as_ref()),
        ];
        for base in fetched_from.into_iter().flatten() {
            tracing::warn!(
                source = %s.name,
                fetched_from = %base,
                "the source's signing keys are fetched from the spec's fetch_base, not from the provider: this is for tests"
            );
        }
    }
    let unsigned: Vec<provider::signed::UnsignedValue> = cfg
        .sources
        .iter()
        .zip(sources)
        .flat_map(|(c, s)| provider::signed::unsigned_values(c, &s.verifier.spec))
        .collect();
    for w in &unsigned {
        tracing::warn!(source = %w.source, route = %w.route, "{}", w.warning());
    }
    unsigned
}

/// What the store's configuration deserves a warning about (`serve` logs them,
/// `check-config` prints them): a PostgreSQL URL that sends everything unencrypted
/// off this machine.
pub fn store_warnings(cfg: &Config) -> Vec<store::PostgresUrlWarning> {
    match &cfg.store {
        StoreConfig::Postgres(p) => store::postgres_url_warnings(&p.url),
        StoreConfig::Embedded(_) | StoreConfig::Redis(_) => Vec::new(),
    }
}

/// What the admin API tells about each source.
fn admin_sources(sources: &[Source]) -> Vec<crate::admin::AdminSource> {
    sources
        .iter()
        .map(|s| crate::admin::AdminSource {
            name: s.name.clone(),
            signature_header: s
                .verifier
                .spec
                .signature_header()
                .map(|h| h.as_str().to_string())
                .unwrap_or_default(),
            routes: s.routes.iter().map(|r| r.name.clone()).collect(),
            index: s.index.clone(),
            established: s.established.clone(),
            public_url: s.public_url.clone(),
        })
        .collect()
}

/// What the forwarder needs to know of each source's provider, by source name.
fn provider_facts(sources: &[Source]) -> HashMap<String, forward::ProviderFacts> {
    sources
        .iter()
        .map(|s| {
            let facts = forward::ProviderFacts {
                credential_headers: s.verifier.spec.credential_headers.clone(),
                body_signed: s.verifier.spec.signs_whole_body(),
                event_type_signed: s.verifier.spec.event_type_is_signed(),
            };
            (s.name.clone(), facts)
        })
        .collect()
}

/// The connection limits of the ingest, admin and probe listeners.
fn http_limits(cfg: &Config) -> (HttpLimits, HttpLimits, HttpLimits) {
    let limits = HttpLimits {
        header_read_timeout: cfg.server.header_read_timeout,
        max_headers: cfg.server.max_headers,
        max_connections: cfg.server.max_connections,
        max_connections_per_client: cfg.server.max_connections_per_client,
        client_ipv6_prefix: cfg.server.client_ipv6_prefix,
        body: BodyLimits {
            first_byte: cfg.server.body_first_byte_timeout,
            min_rate: cfg.server.min_body_rate,
            // Ingest bounds the whole body itself (`server.body_read_timeout`, 408).
            total: None,
        },
        grace: cfg.server.shutdown_grace,
    };
    // Every admin, console and probe request: its head within `admin.request_timeout`,
    // then its body within it of the head.
    let admin_limits = HttpLimits {
        header_read_timeout: cfg.admin.request_timeout,
        body: BodyLimits {
            first_byte: cfg
                .server
                .body_first_byte_timeout
                .min(cfg.admin.request_timeout),
            min_rate: cfg.server.min_body_rate,
            total: Some(cfg.admin.request_timeout),
        },
        ..limits.clone()
    };
    // The probes' own listener serves three small GETs to a kubelet and a scraper.
    let probe_limits = HttpLimits {
        max_connections: PROBE_MAX_CONNECTIONS,
        max_connections_per_client: Some(PROBE_MAX_CONNECTIONS / 4),
        ..admin_limits.clone()
    };
    (limits, admin_limits, probe_limits)
}

/// Serve the built gateway on `listeners` and run its background tasks until
/// `shutdown` is cancelled or the store stops for good; then wait for every task,
/// close the store, and say whether it stopped.
async fn serve_until_shutdown(
    cfg: &Config,
    gateway: Gateway,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let Gateway {
        store,
        clock,
        sources,
        ingest,
        ingest_limits,
        admin,
        admin_limits,
        probes,
        probe_limits,
        routes,
        alerts,
        on_dead,
        pressure,
        unverified,
        rejections,
        traces,
        allowlists,
        identity,
    } = gateway;
    tracing::info!(
        ingest = %listeners.ingest.local_addr()?,
        admin = %listeners.admin.local_addr()?,
        store = cfg.store.kind(),
        sources,
        gateway = %identity.id,
        version = %identity.version(),
        "hookgate listening"
    );
    let ingest_task = tokio::spawn(serve(
        "ingest",
        listeners.ingest,
        ingest,
        ingest_limits,
        shutdown.clone(),
    ));
    let probe_task = listeners.probes.zip(probes).map(|(listener, router)| {
        tokio::spawn(serve(
            "probes",
            listener,
            router,
            probe_limits,
            shutdown.clone(),
        ))
    });
    let admin_task = tokio::spawn(serve(
        "admin",
        listeners.admin,
        admin,
        admin_limits,
        shutdown.clone(),
    ));
    let throttle_task = tokio::spawn(telemetry::throttle::run(shutdown.clone()));
    let allowlist_task = tokio::spawn(crate::allowlist::refresh::run(
        allowlists,
        store.clone(),
        clock.clone(),
        cfg.server.allowlist_refresh,
        shutdown.clone(),
    ));
    let alerts_task = tokio::spawn(alerts::run(alerts, cfg.alerts.clone(), shutdown.clone()));
    let pressure_task = tokio::spawn(crate::pressure::run(pressure.clone(), shutdown.clone()));
    let forward_task = tokio::spawn(forward::run(
        store.clone(),
        routes,
        cfg.forwarder.clone(),
        cfg.retention.clone(),
        clock,
        forward::Neighbours {
            pressure,
            on_dead,
            traces: traces.clone(),
            identity,
        },
        shutdown.clone(),
    ));
    let flush_task = tokio::spawn(ingest::flush_refused(
        unverified,
        rejections,
        store.clone(),
        shutdown.clone(),
    ));
    let store_stopped = watch_store(store.as_ref(), cfg.server.shutdown_grace, shutdown);
    let _ = ingest_task.await;
    let _ = flush_task.await;
    let _ = admin_task.await;
    if let Some(task) = probe_task {
        let _ = task.await;
    }
    let _ = forward_task.await;
    let _ = alerts_task.await;
    let _ = throttle_task.await;
    let _ = allowlist_task.await;
    let _ = pressure_task.await;
    let store_stopped = store_stopped.await.unwrap_or(false);
    store.close().await;
    traces.shutdown().await;
    tracing::info!("hookgate stopped");
    if store_stopped {
        return Err(StoreStopped.into());
    }
    Ok(())
}

/// Watch for the store stopping for good: then keep answering (503 for every write,
/// /readyz 503) for `linger`, so that load balancers take this instance out and
/// providers' retries hear a 503 rather than a refused connection, and cancel
/// `shutdown` to drain and exit. The task's result: whether the store stopped.
fn watch_store(
    store: &dyn store::Store,
    linger: std::time::Duration,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<bool> {
    let mut stopped = store.stopped();
    tokio::spawn(async move {
        loop {
            if *stopped.borrow_and_update() {
                tracing::error!(
                    linger = ?linger,
                    "the store stopped for good: answering 503, then exiting"
                );
                tokio::select! {
                    _ = shutdown.cancelled() => {}
                    _ = tokio::time::sleep(linger) => shutdown.cancel(),
                }
                return true;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return false,
                changed = stopped.changed() => if changed.is_err() {
                    // The store can never stop: wait for the shutdown.
                    shutdown.cancelled().await;
                    return false;
                },
            }
        }
    })
}

/// What the console's overview asks of this process's circuit breakers: the state
/// of a route's breaker, from the forwarder's routes.
fn breaker_states(routes: &[forward::Route]) -> console::BreakerStates {
    use forward::breaker::BreakerState;
    let breakers: HashMap<(String, String), Arc<forward::breaker::Breaker>> = routes
        .iter()
        .map(|r| ((r.source.clone(), r.name.clone()), r.breaker.clone()))
        .collect();
    Arc::new(move |source: &str, route: &str| {
        let b = breakers.get(&(source.to_string(), route.to_string()))?;
        Some(match b.state() {
            BreakerState::Closed => console::BreakerView::Closed,
            BreakerState::HalfOpen => console::BreakerView::HalfOpen,
            BreakerState::Open => console::BreakerView::Open,
        })
    })
}
