//! The composition root: turns a validated [`Config`] into running parts.
//!
//! Only this module builds and wires objects: the provider registry, the sources'
//! verifiers, the store, the route table, the routers and the listeners. `run`
//! takes pre-bound listeners so that tests can bind `127.0.0.1:0` and run the real
//! gateway.
//!
//! `build` makes the parts and serves nothing (the metric families, the store, the
//! first route table, the routers); `serve_until_shutdown` runs them (an accept
//! loop per listener, the forwarder, reloads on `SIGHUP`, the background tasks)
//! until shutdown, or until the store stops for good ([`StoreStopped`]), then drains
//! them and closes the store. The route table is `table`'s (the compiled value and
//! its swap point), compiled from `sources`, reloaded by `reload`; `retire` tells
//! the store which routes a table no longer has.

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
use crate::ingest::{self, IngestState, Source};
use crate::operations::Operations;
use crate::provider;

mod reload;
mod retire;
mod sources;
mod table;

use crate::serve::{self, BodyLimits, HttpLimits, serve};
/// The reload counters' registration (the telemetry table's test calls it as `build` does).
#[cfg(test)]
pub(crate) use reload::register_metrics as register_reload_metrics;
pub use reload::{Origin, Reloader};
pub use sources::{build_sources, registry, unsigned_values};
pub use table::{Compiler, Loaded, Table, Tables};

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

/// Every metric family with a zero series per configured source and destination, so
/// that the first scrape lists them all (see [`telemetry::register_families`]).
pub(crate) fn register_metric_families(cfg: &Config) {
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
    let pull_routes: Vec<(String, String)> = cfg
        .sources
        .iter()
        .flat_map(|s| {
            s.routes
                .iter()
                .filter(|r| r.target.kind() == crate::config::DestinationKind::Pull)
                .map(|r| (s.name.clone(), r.name.clone()))
        })
        .collect();
    forward::pull::register_metrics(&pull_routes);
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
/// (then the result is [`StoreStopped`]); then drain and close the store. `cfg` was
/// handed over, not read from a file: it cannot be reloaded.
pub async fn run(
    cfg: Config,
    listeners: Listeners,
    outer: CancellationToken,
) -> anyhow::Result<()> {
    run_from(cfg, Origin::Given, listeners, outer).await
}

/// [`run`] a configuration read from `origin`, which a reload reads again.
pub async fn run_from(
    cfg: Config,
    origin: Origin,
    listeners: Listeners,
    outer: CancellationToken,
) -> anyhow::Result<()> {
    // Everything below stops on the caller's shutdown or on a stopped store.
    let shutdown = outer.child_token();
    let gateway = build(
        &cfg,
        origin,
        listeners.probes.is_some(),
        crate::clock::Clock::system(),
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
    let gateway = build(cfg, Origin::Given, false, clock).await?;
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
    /// The route table in force, and its reload.
    tables: Arc<Tables>,
    reloader: Arc<Reloader>,
    ingest: axum::Router,
    ingest_limits: HttpLimits,
    /// Telemetry, the admin API and the console.
    admin: axum::Router,
    admin_limits: HttpLimits,
    /// The probes' own listener's, when one was bound.
    probes: Option<axum::Router>,
    probe_limits: HttpLimits,
    alerts: Arc<Alerts>,
    on_dead: forward::OnDead,
    pressure: Arc<crate::pressure::IngestPressure>,
    unverified: Arc<ingest::UnverifiedCounts>,
    rejections: Arc<ingest::rejections::RejectionLog>,
    traces: telemetry::traces::Traces,
    /// Who this gateway is on the store (its heartbeat, its leases).
    identity: forward::GatewayIdentity,
    /// The reconciliation of sources with their providers' APIs.
    reconciler: Arc<crate::reconcile::Reconciler>,
    /// The pull routes' leases and long polls, shared by the consumer API and the
    /// forwarder.
    pulls: Arc<forward::pull::Pulls>,
}

/// Build every part of the gateway: the metrics, the route table, the store, the
/// routers of the listeners (the probes' when `with_probes`). Nothing serves yet.
async fn build(
    cfg: &Config,
    origin: Origin,
    with_probes: bool,
    clock: crate::clock::Clock,
) -> anyhow::Result<Gateway> {
    telemetry::install_metrics();
    register_metric_families(cfg);
    telemetry::traces::register_metrics();
    reload::register_metrics();
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
    // Checked before connecting: a configuration that cannot run never opens the
    // store.
    build_sources(cfg, &registry, &body_budget)?;
    // Said before connecting, so that a store that does not answer does not hide it.
    for w in store_warnings(cfg) {
        tracing::warn!("{w}");
    }
    let store = store::open(&cfg.store, &clock).await.context("store")?;
    let compiler = Arc::new(Compiler {
        budget: body_budget.clone(),
        worker: transform_worker(cfg)?,
        salt: store
            .config_salt()
            .await
            .context("the store's configuration salt")?,
    });
    let loaded = Loaded {
        at_ms: clock.now_ms(),
        from: match &origin {
            Origin::File(path) => path.clone(),
            Origin::Given => None,
        },
        generation: 0,
    };
    let first = compiler.compile(cfg.clone(), loaded, None)?;
    crate::allowlist::refresh::register_metrics(&first.allowlists);
    crate::allowlist::refresh::load_saved(&first.allowlists, store.as_ref()).await;
    let sources: Vec<&Source> = cfg
        .sources
        .iter()
        .filter_map(|c| first.ingest.get(&c.name).map(|s| s.as_ref()))
        .collect();
    warn_about_setup(cfg, &sources);
    tracing::info!(version = %first.version, "configuration in force");
    retire::settle(store.as_ref(), &first, &compiler.salt, clock.now_ms()).await;
    // One id per run: the heartbeat's, and the name this gateway's leases are held
    // under; its version is the table's in force.
    let identity = forward::GatewayIdentity::new(first.version.clone(), clock.now_ms());
    forward::register_gateway_metrics(&identity);
    crate::reconcile::register_metrics(first.reconcile.sources.iter().map(|s| s.name.as_str()));
    let tables = Tables::new(first);
    let reconciler = Arc::new(
        crate::reconcile::Reconciler::new(
            store.clone(),
            tables.live(|t| t.reconcile.clone()),
            identity.id.clone(),
            clock.clone(),
        )
        .context("the HTTP client of reconciliation")?,
    );
    let reloader = Arc::new(Reloader::new(
        tables.clone(),
        compiler,
        origin,
        store.clone(),
        clock.clone(),
        identity.clone(),
    ));

    let unverified = Arc::new(ingest::UnverifiedCounts::default());
    let rejections = Arc::new(ingest::rejections::RejectionLog::live(
        tables.live(|t| t.redaction.clone()),
    ));
    let pressure = Arc::new(crate::pressure::IngestPressure::new(
        cfg.forwarder.ingest_first,
    ));
    let pulls = forward::pull::Pulls::new();
    let core = Core {
        pulls: pulls.clone(),
        store: store.clone(),
        clock: clock.clone(),
        tables: tables.clone(),
        traces: traces.clone(),
        readiness: Arc::new(crate::store::Readiness::new()),
        reconciler: reconciler.clone(),
    };
    let ingest = ingest_router(
        cfg,
        &core,
        body_budget,
        IngestShared {
            unverified: unverified.clone(),
            rejections: rejections.clone(),
            pressure: pressure.clone(),
            pulls: pulls.clone(),
        },
    )?;
    let (ingest_limits, admin_limits, probe_limits) = http_limits(cfg);
    let (probes, admin) = admin_routers(cfg, &core, reloader.clone(), with_probes)?;
    let alerts = Arc::new(Alerts::default());
    // Counted whether or not a webhook is set now: a reload may set one.
    let on_dead: forward::OnDead = {
        let alerts = alerts.clone();
        Arc::new(move |source: &str, route: &str, kind, reason: &str| {
            alerts.dead(source, route, kind, reason)
        })
    };
    Ok(Gateway {
        store,
        clock,
        tables,
        reloader,
        ingest,
        ingest_limits,
        admin,
        admin_limits,
        probes,
        probe_limits,
        alerts,
        on_dead,
        pressure,
        unverified,
        rejections,
        traces,
        identity,
        reconciler,
        pulls,
    })
}

/// What the routers and the gateway's parts are built around.
struct Core {
    store: Arc<dyn store::Store>,
    clock: crate::clock::Clock,
    tables: Arc<Tables>,
    traces: telemetry::traces::Traces,
    /// What `/readyz` says; every ingest write's outcome feeds it.
    readiness: Arc<crate::store::Readiness>,
    reconciler: Arc<crate::reconcile::Reconciler>,
    /// The pull routes' side of the forwarder.
    pulls: Arc<forward::pull::Pulls>,
}

/// What ingest shares with the rest of the gateway: the counts and the rejection
/// log it flushes, and how saturated it is.
struct IngestShared {
    unverified: Arc<ingest::UnverifiedCounts>,
    rejections: Arc<ingest::rejections::RejectionLog>,
    pressure: Arc<crate::pressure::IngestPressure>,
    /// What the consumer API of pull routes (on the same listener) serves.
    pulls: Arc<forward::pull::Pulls>,
}

/// The ingest listener's router.
fn ingest_router(
    cfg: &Config,
    core: &Core,
    body_budget: ingest::body::BodyBudget,
    shared: IngestShared,
) -> anyhow::Result<axum::Router> {
    let client_ip = crate::serve::forwarded::ClientIp {
        trusted: cfg.server.trusted_proxies.clone(),
        header: cfg.server.client_ip_header,
    };
    let pull_state = Arc::new(crate::pull::PullState::new(shared.pulls, client_ip.clone()));
    let state = Arc::new(IngestState {
        unverified: shared.unverified,
        rejections: shared.rejections,
        sources: core.tables.live(|t| t.ingest.clone()),
        store: core.store.clone(),
        max_body_bytes: cfg.server.max_body_bytes,
        body_read_timeout: cfg.server.body_read_timeout,
        body_budget,
        verify_slots: Arc::new(tokio::sync::Semaphore::new(
            std::thread::available_parallelism().map_or(2, |n| n.get()),
        )),
        clock: core.clock.clone(),
        store_timeout: cfg.store.timeout(),
        readiness: core.readiness.clone(),
        pressure: shared.pressure,
        traces: core.traces.clone(),
        client_ip,
        client_ipv6_prefix: cfg.server.client_ipv6_prefix,
        fetched_keys: Arc::new(
            crate::provider::certificate::FetchedKeys::new()
                .context("the HTTP client of certificate fetches")?,
        ),
    });
    // Outermost: a bug in a handler answers 500 instead of dropping the connection.
    Ok(ingest::router(state)
        .merge(crate::pull::router(pull_state))
        .layer(CatchPanicLayer::custom(error::panic_response)))
}

/// The admin listener's router (probes, admin API, console, behind the guard) and,
/// when `with_probes`, the probe listener's.
fn admin_routers(
    cfg: &Config,
    core: &Core,
    reloader: Arc<Reloader>,
    with_probes: bool,
) -> anyhow::Result<(Option<axum::Router>, axum::Router)> {
    let ops = Operations::new(
        core.store.clone(),
        core.tables.live(|t| t.catalog.clone()),
        cfg.admin.replay_rate,
        core.clock.clone(),
    )
    .with_traces(core.traces.clone())
    .with_control(reloader)
    .with_reconciler(core.reconciler.clone())
    .with_pulls(core.pulls.clone());
    let admin_state = Arc::new(AdminState::new(
        ops,
        cfg.admin.token.as_ref(),
        cfg.admin.failed_auth_allowance,
    ));
    let console_state = Arc::new(
        ConsoleState::new(
            admin_state.clone(),
            cfg.admin.token.as_ref(),
            core.tables.live(|t| t.console.clone()),
            breaker_states(core.tables.live(|t| t.forward.clone())),
            cfg.admin.public_origin.clone(),
        )
        .context("console")?,
    );
    let probes = with_probes.then(|| {
        admin::probes::router(core.store.clone(), core.readiness.clone())
            .layer(axum::middleware::from_fn_with_state(
                admin_state.clone(),
                admin::guard,
            ))
            .layer(CatchPanicLayer::custom(error::panic_response))
    });
    let admin = admin::probes::router(core.store.clone(), core.readiness.clone())
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
    Ok((probes, admin))
}

/// Warn about what the operator may not have meant: no admin token or a short one,
/// no source, route filters and ordering keys that read unsigned values.
fn warn_about_setup(cfg: &Config, sources: &[&Source]) {
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
        tables,
        reloader,
        ingest,
        ingest_limits,
        admin,
        admin_limits,
        probes,
        probe_limits,
        alerts,
        on_dead,
        pressure,
        unverified,
        rejections,
        traces,
        identity,
        reconciler,
        pulls,
    } = gateway;
    let sources = tables.load().ingest.len();
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
        tables.live(|t| t.allowlists.clone()),
        store.clone(),
        clock.clone(),
        cfg.server.allowlist_refresh,
        shutdown.clone(),
    ));
    let alerts_task = tokio::spawn(alerts::run(
        alerts,
        tables.live(|t| t.alerts.clone()),
        shutdown.clone(),
    ));
    let sighup_task = tokio::spawn(reload::on_sighup(reloader, shutdown.clone()));
    let reconcile_task = tokio::spawn(reconciler.run(shutdown.clone()));
    let pressure_task = tokio::spawn(crate::pressure::run(pressure.clone(), shutdown.clone()));
    let forward_task = tokio::spawn(forward::run(
        store.clone(),
        tables.live(|t| t.forward.clone()),
        clock,
        forward::Neighbours {
            pressure,
            on_dead: Some(on_dead),
            traces: traces.clone(),
            identity,
            pulls,
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
    let _ = sighup_task.await;
    let _ = throttle_task.await;
    let _ = allowlist_task.await;
    let _ = pressure_task.await;
    let _ = reconcile_task.await;
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
/// of a route's breaker, from the forwarder's routes in force.
fn breaker_states(plan: crate::live::Live<forward::Plan>) -> console::BreakerStates {
    use forward::breaker::BreakerState;
    Arc::new(move |source: &str, route: &str| {
        let plan = plan.load();
        let r = plan
            .routes
            .iter()
            .find(|r| r.source == source && r.name == route)?;
        Some(match r.breaker.state() {
            BreakerState::Closed => console::BreakerView::Closed,
            BreakerState::HalfOpen => console::BreakerView::HalfOpen,
            BreakerState::Open => console::BreakerView::Open,
        })
    })
}
