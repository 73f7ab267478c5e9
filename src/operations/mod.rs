//! The operations an operator performs on the gateway's stored webhooks, shared by
//! the two front ends: the admin API (JSON) and the console (HTML). Inspect an entry,
//! replay or discard it, replay what a filter selects or a dead-letter group (paced),
//! pause and resume sources and routes, read the counters, the control audit and
//! the gateways sharing the store.
//! Each checks what it is given against the configuration, acts through the store,
//! and answers a value of [`dto`] (the admin API's wire types, which the console
//! renders too) or an [`OpError`], which each front end turns into its own answer.

pub mod audit;
pub mod bulk;
pub mod dead_letters;
pub mod dto;
pub mod entries;
mod error;
pub mod gateways;
pub mod handshakes;
pub mod preview;
pub mod rejections;
pub mod search;
pub mod sources;

use std::sync::{Arc, Mutex};

use crate::clock::Clock;
use crate::store::Store;
use crate::telemetry::traces::Traces;
use crate::transform::Transforms;

pub use error::OpError;

/// What the operations need: the store, the configured sources, the pace of bulk
/// replays, and the clock replays and discards are stamped with. Built once by
/// `app`, held by the admin API's state.
pub struct Operations {
    pub store: Arc<dyn Store>,
    /// The configured sources, in configuration order.
    pub sources: Vec<SourceFacts>,
    /// Deliveries a bulk replay queues per second.
    pub replay_rate: u32,
    /// The next free slot (unix ms) of bulk replays in this process.
    pub replay_horizon: Mutex<i64>,
    pub clock: Clock,
    /// The routes' transforms, which a preview runs.
    pub transforms: Option<Arc<Transforms>>,
    /// Replays and discards are spans in their entry's trace, when traces are on.
    pub traces: Traces,
}

impl Operations {
    pub fn new(
        store: Arc<dyn Store>,
        sources: Vec<SourceFacts>,
        replay_rate: u32,
        clock: Clock,
    ) -> Operations {
        Operations {
            store,
            sources,
            replay_rate: replay_rate.max(1),
            replay_horizon: Mutex::new(0),
            clock,
            transforms: None,
            traces: Traces::off(),
        }
    }

    /// These operations, previewing the routes' transforms with `transforms`.
    pub fn with_transforms(mut self, transforms: Arc<Transforms>) -> Operations {
        self.transforms = Some(transforms);
        self
    }

    /// These operations, recording replays and discards in `traces`.
    pub fn with_traces(mut self, traces: Traces) -> Operations {
        self.traces = traces;
        self
    }

    pub(crate) fn source(&self, name: &str) -> Option<&SourceFacts> {
        self.sources.iter().find(|s| s.name == name)
    }

    pub(crate) fn has_source(&self, name: &str) -> bool {
        self.source(name).is_some()
    }
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
