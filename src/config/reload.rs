//! Why a configuration reload was refused: the configuration cannot run, it changes
//! keys only a restart changes (`diff`), or there is no file to read again. Nothing
//! of a refused reload is applied. (The reload itself is the composition root's,
//! `app::reload`; the admin API answers a refusal through `error::OpError`.)

/// Why a reload was refused; nothing of it was applied.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReloadRefused {
    /// The configuration cannot run: the message `check-config` prints.
    #[error("{0}")]
    Invalid(String),
    /// Keys only a restart can change.
    #[error("{} changed: {} a restart; nothing was applied", .0.join(", "), if .0.len() == 1 { "needs" } else { "need" })]
    NeedsRestart(Vec<String>),
    /// The gateway was handed its configuration, not a file to read again.
    #[error("this gateway's configuration was not read from a file: nothing to reload")]
    NoFile,
}
