//! The operations an operator performs on the gateway's stored webhooks, shared by
//! the two front ends: the admin API (JSON) and the console (HTML). Inspect an entry,
//! replay or discard it, replay what a filter selects or a dead-letter group (paced),
//! pause and resume sources and routes, reconcile a source with its provider, read
//! the counters, the control audit and the gateways sharing the store.
//! Each checks what it is given against the configuration, acts through the store,
//! and answers a value of [`dto`] (the admin API's wire types, which the console
//! renders too) or an [`OpError`], which each front end turns into its own answer.

pub mod audit;
pub mod bulk;
pub mod config;
pub mod dead_letters;
pub mod dto;
pub mod entries;
pub mod gateways;
pub mod handshakes;
pub mod preview;
pub mod reconcile;
pub mod rejections;
pub mod routes;
pub mod search;
pub mod sources;

use std::sync::{Arc, Mutex};

use crate::clock::Clock;
use crate::live::Live;
use crate::store::Store;
use crate::telemetry::traces::Traces;
use crate::transform::Transforms;

pub use crate::error::OpError;

/// What the operations need: the store, the configured sources (from the route
/// table in force), the pace of bulk replays, and the clock replays and discards
/// are stamped with. Built once by `app`, held by the admin API's state.
pub struct Operations {
    pub store: Arc<dyn Store>,
    /// The operations' part of the route table in force.
    pub catalog: Live<Catalog>,
    /// Deliveries a bulk replay queues per second.
    pub replay_rate: u32,
    /// The next free slot (unix ms) of bulk replays in this process.
    pub replay_horizon: Mutex<i64>,
    pub clock: Clock,
    /// Replays and discards are spans in their entry's trace, when traces are on.
    pub traces: Traces,
    /// The configuration in force and its reload, when the gateway can reload.
    pub control: Option<Arc<dyn config::ConfigControl>>,
    /// The reconciliation of the sources with their providers, when the gateway
    /// runs it.
    pub reconciler: Option<Arc<crate::reconcile::Reconciler>>,
    /// The pull routes' consumers, as this gateway saw them, when it delivers.
    pub pulls: Option<Arc<crate::forward::pull::Pulls>>,
}

/// What the operations know of the route table: the configured sources, and the
/// routes' transforms (which a preview runs).
#[derive(Default)]
pub struct Catalog {
    /// The configured sources, in configuration order.
    pub sources: Vec<SourceFacts>,
    /// The routes' transforms, when the gateway runs them.
    pub transforms: Option<Arc<Transforms>>,
    /// Every route of the table in force, in configuration order.
    pub routes: Vec<CatalogRoute>,
    /// Every known provider's signature header (and a secret handshake's), lower
    /// case: redacted in any entry shown, its source's or not (an entry of a source
    /// a reload removed has none in force).
    pub signature_headers: Vec<String>,
}

impl Operations {
    pub fn new(
        store: Arc<dyn Store>,
        catalog: Live<Catalog>,
        replay_rate: u32,
        clock: Clock,
    ) -> Operations {
        Operations {
            store,
            catalog,
            replay_rate: replay_rate.max(1),
            replay_horizon: Mutex::new(0),
            clock,
            traces: Traces::off(),
            control: None,
            reconciler: None,
            pulls: None,
        }
    }

    /// These operations, telling the pull routes' consumers as `pulls` saw them.
    pub fn with_pulls(mut self, pulls: Arc<crate::forward::pull::Pulls>) -> Operations {
        self.pulls = Some(pulls);
        self
    }

    /// These operations, reconciling sources on demand through `reconciler`.
    pub fn with_reconciler(mut self, reconciler: Arc<crate::reconcile::Reconciler>) -> Operations {
        self.reconciler = Some(reconciler);
        self
    }

    /// These operations, answering for the configuration through `control`.
    pub fn with_control(mut self, control: Arc<dyn config::ConfigControl>) -> Operations {
        self.control = Some(control);
        self
    }

    /// These operations, recording replays and discards in `traces`.
    pub fn with_traces(mut self, traces: Traces) -> Operations {
        self.traces = traces;
        self
    }

    /// The configured sources, in configuration order, as the table in force has
    /// them.
    pub fn sources(&self) -> Vec<SourceFacts> {
        self.catalog.load().sources.clone()
    }

    /// The configured source `name`, as the table in force has it.
    pub(crate) fn source(&self, name: &str) -> Option<SourceFacts> {
        self.catalog
            .load()
            .sources
            .iter()
            .find(|s| s.name == name)
            .cloned()
    }

    pub(crate) fn has_source(&self, name: &str) -> bool {
        self.catalog.load().sources.iter().any(|s| s.name == name)
    }

    /// The routes' transforms of the table in force, when the gateway runs them.
    pub fn transforms(&self) -> Option<Arc<Transforms>> {
        self.catalog.load().transforms.clone()
    }
}

/// A route of the table in force, as the operations show it.
#[derive(Debug, Clone)]
pub struct CatalogRoute {
    pub source: String,
    pub route: String,
    /// Its destination as shown (`RouteConfig::shown_destination`).
    pub destination: String,
    /// Its kind: `http`, `nats`, `amqp`, `pull`.
    pub kind: crate::config::DestinationKind,
}

/// What the operations know of a configured source.
#[derive(Debug, Clone)]
pub struct SourceFacts {
    pub name: String,
    /// The provider's signature header (redacted on display).
    pub signature_header: String,
    /// Its route names, in configuration order.
    pub routes: Vec<String>,
    /// Its indexed pointers (`[sources.index]`): (name, pointer).
    pub index: Vec<(String, String)>,
    /// Its keys, when its provider's secrets arrive in a handshake (`hook-secret`):
    /// a secret forgotten here stops verifying in this process at once.
    pub established: Option<Arc<crate::ingest::hook_secret::Established>>,
    /// The URL the provider calls (`public_url`), when configured: an armed
    /// handshake's answer gives it with the arming's token, as the webhook's target.
    pub public_url: Option<String>,
}

impl SourceFacts {
    pub(crate) fn has_route(&self, route: &str) -> bool {
        self.routes.iter().any(|r| r == route)
    }
}
