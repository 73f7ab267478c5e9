//! The route table: the configuration compiled once into one immutable value, and
//! the one swap point it is published through.
//!
//! A [`Table`] holds every fact of the sources and routes the running gateway uses
//! (per source the verifier, secrets, allowlist, request limit, index pointers; per
//! route the filter, ordering key, transform, pace, retry policy, breaker and
//! destination), each part shaped for its reader: ingest's sources, the
//! forwarder's plan, the operations' catalog, the console's views. [`Tables`] is
//! the swap point: each reader holds a [`Live`] of its part and loads the table in
//! force at every use, so a reload (`app::reload`) that swaps a new table in is
//! seen at the next request or claim, while what is already under way finishes
//! with the table it loaded.
//!
//! A table's version is an HMAC-SHA256, under a random salt kept in the store, of
//! the resolved configuration, its secrets and the specs of its sources'
//! providers: gateways on one store compute the same version for the same file, a
//! rotated secret changes it, and it reveals nothing of a secret.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tokio::sync::watch;

use super::sources::{self, Kept};
use crate::config::{AlertsConfig, Config};
use crate::console::SourceView;
use crate::forward;
use crate::ingest::{self, Source};
use crate::live::Live;
use crate::operations::Catalog;
use crate::provider;
use crate::transform::{TransformConfig, Transforms};

/// The configuration compiled: what every reader of the route table uses.
pub struct Table {
    /// The configuration's version (hex, 16 characters).
    pub version: String,
    /// When and from where it was loaded.
    pub loaded: Loaded,
    /// The configuration it was compiled from.
    pub config: Config,
    /// Ingest's sources, by name.
    pub ingest: Arc<ingest::Sources>,
    /// The forwarder's routes and settings.
    pub forward: Arc<forward::Plan>,
    /// The sources reconciled with their provider's API.
    pub reconcile: Arc<crate::reconcile::Plan>,
    /// What the operations (the admin API, the console) know of the sources.
    pub catalog: Arc<Catalog>,
    /// What the console's Sources page shows.
    pub console: Arc<Vec<SourceView>>,
    /// The providers' published ranges the sources take, each once.
    pub allowlists: Arc<Vec<Arc<crate::allowlist::Published>>>,
    /// Where dead-letter alerts go.
    pub alerts: Arc<AlertsConfig>,
    /// What the rejection log redacts: every known provider's signature and
    /// credential headers.
    pub redaction: Arc<ingest::rejections::Redaction>,
    /// The routes' programs, and the transforms that run them.
    programs: Vec<(String, String, TransformConfig)>,
    transforms: Arc<Transforms>,
}

/// When and from where a table's configuration was read.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Unix ms.
    pub at_ms: i64,
    /// The file, when there is one (otherwise defaults and `HOOKGATE_*` only).
    pub from: Option<PathBuf>,
    /// How many tables this process put in force before this one.
    pub generation: u64,
}

/// What compiling a table needs besides the configuration: fixed for the life of
/// the process.
pub struct Compiler {
    /// The ingest body budget the sources share.
    pub budget: ingest::body::BodyBudget,
    /// The executable that runs the routes' transforms.
    pub worker: PathBuf,
    /// The store's salt of configuration versions.
    pub salt: [u8; 32],
}

impl Compiler {
    /// Compile `cfg` (read from `loaded.from`) into a table, taking over from
    /// `previous` (the table in force, at a reload) what must outlive a reload.
    /// Fails as `check-config` does on a configuration that cannot run.
    pub fn compile(
        &self,
        cfg: Config,
        loaded: Loaded,
        previous: Option<&Table>,
    ) -> anyhow::Result<Table> {
        let registry = sources::registry(&cfg)?;
        let kept = previous.map(|t| Kept {
            config: &t.config,
            sources: &t.ingest,
            allowlists: &t.allowlists,
        });
        let built = sources::compile_sources(&cfg, &registry, &self.budget, kept)?;
        let unsigned: Vec<provider::signed::UnsignedValue> = cfg
            .sources
            .iter()
            .zip(&built)
            .flat_map(|(c, s)| provider::signed::unsigned_values(c, &s.verifier.spec))
            .collect();
        let programs: Vec<(String, String, TransformConfig)> = cfg
            .sources
            .iter()
            .flat_map(|s| {
                s.routes.iter().filter_map(|r| {
                    let t = r.transform.clone()?;
                    Some((s.name.clone(), r.name.clone(), t))
                })
            })
            .collect();
        // The same programs under the same bounds keep their workers.
        let transforms = match previous {
            Some(t)
                if t.programs == programs
                    && t.config.server.max_body_bytes == cfg.server.max_body_bytes
                    && t.config.forwarder.transform_memory_bytes
                        == cfg.forwarder.transform_memory_bytes =>
            {
                t.transforms.clone()
            }
            _ => Arc::new(Transforms::new(
                self.worker.clone(),
                programs.clone(),
                cfg.server.max_body_bytes,
                cfg.forwarder.transform_memory_bytes,
            )),
        };
        let facts = sources::provider_facts(&built);
        let connections = previous
            .map(|t| t.forward.connections.clone())
            .unwrap_or_default();
        let routes = forward::routes(
            &cfg.sources,
            &cfg.forwarder,
            &facts,
            &transforms,
            &connections,
            previous.map(|t| t.forward.as_ref()),
        )
        .context("routes")?;
        let console = cfg
            .sources
            .iter()
            .map(|c| {
                let mine = unsigned.iter().filter(|w| w.source == c.name);
                SourceView::of(c)
                    .with_unsigned(mine.map(|w| (w.route.clone(), w.warning())).collect())
            })
            .collect();
        let redaction = sources::redaction(&registry);
        let catalog = Catalog {
            routes: cfg
                .sources
                .iter()
                .flat_map(|s| {
                    s.routes.iter().map(|r| crate::operations::CatalogRoute {
                        source: s.name.clone(),
                        route: r.name.clone(),
                        destination: r.shown_destination(),
                        kind: r.target.kind(),
                    })
                })
                .collect(),
            sources: sources::admin_sources(&built),
            transforms: Some(transforms.clone()),
            signature_headers: redaction.signatures().to_vec(),
        };
        let allowlists = sources::published_lists(&built);
        let version = version(&cfg, &built, &self.salt);
        let ingest: ingest::Sources = built
            .into_iter()
            .map(|s| (s.name.clone(), Arc::new(s)))
            .collect();
        Ok(Table {
            version,
            loaded,
            forward: Arc::new(forward::Plan {
                routes,
                cfg: cfg.forwarder.clone(),
                retention: cfg.retention.clone(),
                connections,
                expects: cfg
                    .sources
                    .iter()
                    .filter_map(|s| s.expect.map(|e| (s.name.clone(), e)))
                    .collect(),
            }),
            reconcile: Arc::new(crate::reconcile::Plan {
                sources: cfg
                    .sources
                    .iter()
                    .filter_map(|c| {
                        let config = c.reconcile.clone()?;
                        let ingest = ingest.get(&c.name)?.clone();
                        Some(Arc::new(crate::reconcile::Reconciled {
                            name: c.name.clone(),
                            config,
                            ingest,
                        }))
                    })
                    .collect(),
                retention: cfg.retention.delivered,
            }),
            ingest: Arc::new(ingest),
            catalog: Arc::new(catalog),
            console: Arc::new(console),
            allowlists: Arc::new(allowlists),
            alerts: Arc::new(cfg.alerts.clone()),
            redaction: Arc::new(redaction),
            config: cfg,
            programs,
            transforms,
        })
    }
}

/// The version of `cfg`, whose sources compiled into `sources`, under `salt`: hex
/// of the first 8 bytes of an HMAC-SHA256 over the resolved configuration (its
/// rendering, secrets redacted, the listeners' addresses left out), every secret,
/// and each source's provider spec.
pub fn version(cfg: &Config, sources: &[Source], salt: &[u8; 32]) -> String {
    // Infallible for HMAC, whose key may be of any length.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(salt) else {
        return String::new();
    };
    let mut resolved = cfg.clone();
    // Not a configuration key: the path of this process's executable.
    resolved.transform_worker = None;
    // Where each process listens is its own (several gateways on one host are told
    // their ports apart): not what makes two configurations differ.
    let nowhere = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
    resolved.server.listen = nowhere;
    resolved.admin.listen = nowhere;
    resolved.admin.probe_listen = None;
    mac.update(format!("{resolved:?}").as_bytes());
    for secret in cfg.secrets() {
        // Each framed by its length: ("ab", "c") is not ("a", "bc").
        mac.update(&(secret.expose().len() as u64).to_be_bytes());
        mac.update(secret.expose().as_bytes());
    }
    for s in sources {
        mac.update(format!("{:?}", s.verifier.spec).as_bytes());
    }
    let tag = mac.finalize().into_bytes();
    hex::encode(&tag[..8])
}

/// The swap point of the route table: the table in force, and a generation that
/// moves at every swap.
pub struct Tables {
    current: ArcSwap<Table>,
    changes: watch::Sender<u64>,
}

impl Tables {
    /// The swap point, `first` in force.
    pub fn new(first: Table) -> Arc<Tables> {
        forward::destinations::log_checks(&first.forward.routes);
        let (changes, _) = watch::channel(first.loaded.generation);
        Arc::new(Tables {
            current: ArcSwap::from_pointee(first),
            changes,
        })
    }

    /// The table in force.
    pub fn load(&self) -> Arc<Table> {
        self.current.load_full()
    }

    /// Put `next` in force.
    pub fn swap(&self, next: Table) {
        let before = self.current.load();
        let new: Vec<_> = next
            .forward
            .routes
            .iter()
            .filter(|r| !before.forward.routes.iter().any(|b| Arc::ptr_eq(b, r)))
            .cloned()
            .collect();
        forward::destinations::log_checks(&new);
        let generation = next.loaded.generation;
        self.current.store(Arc::new(next));
        self.changes.send_replace(generation);
    }

    /// The part `part` of the table in force, for one reader.
    pub fn live<T: ?Sized + Send + Sync + 'static>(
        self: &Arc<Self>,
        part: fn(&Table) -> Arc<T>,
    ) -> Live<T> {
        let tables = self.clone();
        Live::new(
            move || part(&tables.current.load()),
            self.changes.subscribe(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::from_toml_str;

    const CONFIG: &str = r#"
[[sources]]
name = "github"
provider = "github"
secret = "first-secret"
[[sources.routes]]
name = "app"
destination = "http://127.0.0.1:9000/a"
filter.event_types = ["push", "pull_request.*", "issues", "release.*"]
"#;

    fn versioned(text: &str, salt: [u8; 32]) -> String {
        let cfg = from_toml_str(text, &|_| None).expect("config");
        let registry = sources::registry(&cfg).expect("registry");
        let budget = ingest::body::BodyBudget::new(cfg.server.body_budget_bytes);
        let built = sources::build_sources(&cfg, &registry, &budget).expect("sources");
        version(&cfg, &built, &salt)
    }

    #[test]
    fn a_version_follows_the_file_its_secrets_and_the_salt_and_shows_no_secret() {
        let v = versioned(CONFIG, [1; 32]);
        assert_eq!(v.len(), 16);
        assert_eq!(
            v,
            versioned(CONFIG, [1; 32]),
            "the same file, the same version"
        );
        let rotated = CONFIG.replace("first-secret", "second-secret");
        assert_ne!(v, versioned(&rotated, [1; 32]), "a rotation changes it");
        assert_ne!(
            v,
            versioned(CONFIG, [2; 32]),
            "another store's salt changes it"
        );
        let moved = CONFIG.replace("9000/a", "9001/a");
        assert_ne!(v, versioned(&moved, [1; 32]));
    }

    #[test]
    fn a_rotated_reconciliation_credential_changes_the_version() {
        let text =
            format!("{CONFIG}[sources.reconcile]\ntoken_env = \"T\"\nhook = \"orgs/a/hooks/1\"\n");
        let with = |token: &'static str| {
            let cfg = from_toml_str(&text, &move |k| (k == "T").then(|| token.to_string()))
                .expect("config");
            let registry = sources::registry(&cfg).expect("registry");
            let budget = ingest::body::BodyBudget::new(cfg.server.body_budget_bytes);
            let built = sources::build_sources(&cfg, &registry, &budget).expect("sources");
            version(&cfg, &built, &[1; 32])
        };
        assert_eq!(with("ghp_one"), with("ghp_one"));
        assert_ne!(with("ghp_one"), with("ghp_two"), "a rotation changes it");
    }
}
