//! Reloading the configuration without a restart: on `SIGHUP`,
//! `POST /admin/config/reload` and `hookgate reload` (which calls it).
//!
//! Validate → compile → swap. The file and every file it references
//! (`secret_file`s, `providers_dir`) are read again and compiled into a new route
//! table as `check-config` would; a configuration that cannot run is refused with
//! the message `check-config` prints, and so is one that changes a key only a
//! restart can change (`config::diff`), naming each key: nothing is applied, the
//! table in force keeps serving, the failure is logged once and counted
//! (`hookgate_config_reload_failures_total`). One reload runs at a time.

use std::path::PathBuf;
use std::sync::Arc;

use crate::clock::Clock;
use crate::config::{self, diff};
use crate::operations::config::{ConfigControl, ConfigInfo, ReloadRefused, Reloaded};
use crate::store::Store;

use super::table::{Compiler, Loaded, Tables};

/// Where the configuration in force came from.
#[derive(Debug, Clone)]
pub enum Origin {
    /// `config::load` of this file, or of defaults and `HOOKGATE_*` only: read
    /// again at a reload.
    File(Option<PathBuf>),
    /// Handed to `app::run` by a program that embeds the gateway: nothing to read
    /// again.
    Given,
}

/// Reloads the route table of one gateway.
pub struct Reloader {
    tables: Arc<Tables>,
    compiler: Arc<Compiler>,
    origin: Origin,
    store: Arc<dyn Store>,
    clock: Clock,
    /// This gateway on the store: its heartbeat names the version in force.
    identity: crate::forward::GatewayIdentity,
    /// One reload at a time: two at once would both compile against the same
    /// table in force.
    one: tokio::sync::Mutex<()>,
}

/// The counter of refused reloads, registered with its zero.
pub fn register_metrics() {
    metrics::counter!("hookgate_config_reload_failures_total").increment(0);
    metrics::counter!("hookgate_config_reloads_total").increment(0);
}

impl Reloader {
    pub fn new(
        tables: Arc<Tables>,
        compiler: Arc<Compiler>,
        origin: Origin,
        store: Arc<dyn Store>,
        clock: Clock,
        identity: crate::forward::GatewayIdentity,
    ) -> Reloader {
        Reloader {
            tables,
            compiler,
            origin,
            store,
            clock,
            identity,
            one: tokio::sync::Mutex::new(()),
        }
    }

    /// Read, check and compile the configuration again; unless `dry_run`, put it in
    /// force.
    pub async fn reload(&self, dry_run: bool) -> Result<Reloaded, ReloadRefused> {
        let _one = self.one.lock().await;
        let result = self.reload_once(dry_run).await;
        match &result {
            Ok(r) if r.applied => {
                metrics::counter!("hookgate_config_reloads_total").increment(1);
                tracing::info!(
                    version = %r.version,
                    previous = %r.previous_version,
                    changes = r.changes.len(),
                    "configuration reloaded"
                );
            }
            Ok(_) => {}
            Err(e) => {
                metrics::counter!("hookgate_config_reload_failures_total").increment(1);
                tracing::error!(error = %e, "configuration reload refused; the configuration in force stays");
            }
        }
        result
    }

    async fn reload_once(&self, dry_run: bool) -> Result<Reloaded, ReloadRefused> {
        let Origin::File(path) = &self.origin else {
            return Err(ReloadRefused::NoFile);
        };
        let current = self.tables.load();
        let path = path.clone();
        let compiler = self.compiler.clone();
        let at_ms = self.clock.now_ms();
        let previous = current.clone();
        // Reading files and checking programs block: off the runtime's threads.
        let compiled = tokio::task::spawn_blocking(move || {
            let cfg = config::load(path.as_deref())
                .map_err(|e| ReloadRefused::Invalid(format!("invalid configuration: {e}")))?;
            let changes = diff::changes(&previous.config, &cfg);
            if !changes.needs_restart.is_empty() {
                return Err(ReloadRefused::NeedsRestart(
                    changes
                        .needs_restart
                        .iter()
                        .map(|k| k.to_string())
                        .collect(),
                ));
            }
            let loaded = Loaded {
                at_ms,
                from: path,
                generation: previous.loaded.generation + 1,
            };
            let table = compiler
                .compile(cfg, loaded, Some(&previous))
                .map_err(|e| ReloadRefused::Invalid(format!("invalid configuration: {e:#}")))?;
            Ok((table, changes))
        })
        .await
        .map_err(|e| ReloadRefused::Invalid(format!("the reload failed: {e}")))??;
        let (table, changes) = compiled;
        let answer = Reloaded {
            applied: !dry_run,
            previous_version: current.version.clone(),
            version: table.version.clone(),
            changes: changes.live,
        };
        if !dry_run {
            // A list the table did not have yet starts from the last good one kept.
            let new_lists: Vec<_> = table
                .allowlists
                .iter()
                .filter(|l| !current.allowlists.iter().any(|o| Arc::ptr_eq(o, l)))
                .cloned()
                .collect();
            crate::allowlist::refresh::register_metrics(&new_lists);
            crate::allowlist::refresh::load_saved(&new_lists, self.store.as_ref()).await;
            super::register_metric_families(&table.config);
            // Before the swap: a route back with another destination is paused
            // before its loop can claim.
            super::retire::settle(self.store.as_ref(), &table, &self.compiler.salt, at_ms).await;
            self.identity.set_version(table.version.clone());
            self.tables.swap(table);
        }
        Ok(answer)
    }

    /// What `GET /admin/config` answers.
    pub fn info(&self) -> ConfigInfo {
        let t = self.tables.load();
        ConfigInfo {
            version: t.version.clone(),
            loaded_at: t.loaded.at_ms,
            from: match &self.origin {
                Origin::File(Some(p)) => Some(p.display().to_string()),
                Origin::File(None) => None,
                Origin::Given => None,
            },
            generation: t.loaded.generation,
            sources: t.config.sources.len(),
            routes: t.forward.routes.len(),
        }
    }
}

#[async_trait::async_trait]
impl ConfigControl for Reloader {
    async fn reload(&self, dry_run: bool) -> Result<Reloaded, ReloadRefused> {
        Reloader::reload(self, dry_run).await
    }

    fn info(&self) -> ConfigInfo {
        Reloader::info(self)
    }
}

/// Reload on every `SIGHUP` until `shutdown`.
pub async fn on_sighup(reloader: Arc<Reloader>, shutdown: tokio_util::sync::CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; reload through the admin API");
            return;
        }
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            got = hup.recv() => if got.is_none() {
                return;
            },
        }
        // Logged and counted by `reload`.
        let _ = reloader.reload(false).await;
    }
}
