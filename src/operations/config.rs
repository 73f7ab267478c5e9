//! The configuration in force and its reload, as the admin API and the CLI see
//! them: `GET /admin/config`, `POST /admin/config/reload` (`hookgate reload`).
//!
//! The reload itself is the composition root's (`app::reload`: it compiles and
//! swaps the route table, which names every layer); the admin API reaches it
//! through [`ConfigControl`].

use serde::{Deserialize, Serialize};

pub use crate::config::ReloadRefused;

/// The configuration in force: never a secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigInfo {
    /// The configuration's version: equal on every gateway that runs the same
    /// file on one store.
    pub version: String,
    /// When it was loaded (unix ms).
    pub loaded_at: i64,
    /// The file it was read from, when there is one.
    pub from: Option<String>,
    /// How many reloads this process applied before it.
    pub generation: u64,
    pub sources: usize,
    pub routes: usize,
}

/// What a reload did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reloaded {
    /// Whether the new configuration is in force (false for a dry run).
    pub applied: bool,
    pub previous_version: String,
    pub version: String,
    /// What changes, one line each (names, never values).
    pub changes: Vec<String>,
}

/// The configuration's control: what the admin API asks of it.
#[async_trait::async_trait]
pub trait ConfigControl: Send + Sync {
    /// Read, check and compile the configuration again; unless `dry_run`, put it
    /// in force.
    async fn reload(&self, dry_run: bool) -> Result<Reloaded, ReloadRefused>;

    /// The configuration in force.
    fn info(&self) -> ConfigInfo;
}
