//! Transformations: a route's jq program turns the stored body into the shape a
//! legacy consumer expects (a flat JSON, a form post, a Slack message, three
//! fields).
//!
//! The stored original never changes: a program runs at each delivery attempt,
//! from the stored body, so a fixed program (and a restart) re-runs on replay. A
//! program is compiled when the configuration loads (`program`), and runs in a
//! worker process (`worker`) that the gateway kills at the deadline (`pool`), so an
//! endless or exploding program costs one failed delivery, never the gateway. What
//! the output becomes on the wire is `shape`'s.
//!
//! A failure is the delivery's, for good: `transform: <kind>` is its dead-letter
//! group (`timeout`, `runtime`, `not-json`, `too-large`, `bad-output`, `crashed`). A
//! program with no output skips the delivery (`filtered`). A worker that cannot be
//! started is not the program's fault: the delivery waits and is tried again.

pub mod pool;
pub mod program;
pub mod protocol;
pub mod shape;
pub mod worker;

use std::time::Duration;

pub use pool::{Pool, Ran, Run};
pub use program::ProgramError;
pub use shape::Shaped;

/// The most a program may run by default (`transform_timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// The longest `transform_timeout` configuration accepts.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(10);

/// The header that tells the app it receives a transformed body.
pub const TRANSFORMED_HEADER: &str = "hookgate-transformed";

/// The reason recorded for a delivery a program skipped.
pub const EMPTY_REASON: &str = "transform: empty (the program gave no output)";

/// A route's transform, as configuration checked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformConfig {
    /// The jq program's text.
    pub program: String,
    /// `transform_output = "envelope"`: the output is `{body, headers,
    /// content_type}`; else the output is the body.
    pub envelope: bool,
    /// `transform_timeout`: the most one run may take.
    pub timeout: Duration,
}

/// Why a transform gave nothing to send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransformError {
    #[error("transform: timeout after {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    #[error("transform: runtime: {0}")]
    Runtime(String),
    #[error("transform: not-json: the stored body is not JSON")]
    NotJson,
    #[error("transform: too-large: {0}")]
    TooLarge(String),
    #[error("transform: bad-output: {0}")]
    BadOutput(String),
    /// The worker died during the run: the program exhausted its stack or memory.
    #[error("transform: crashed: the program exhausted the worker's stack or memory")]
    Crashed,
    /// No worker could be started: not the program's failure; the delivery is tried
    /// again later.
    #[error("transform worker unavailable: {0}")]
    Unavailable(String),
}

impl TransformError {
    /// The failure's kind, as its dead-letter group names it (`transform: <kind>`).
    pub fn kind(&self) -> &'static str {
        match self {
            TransformError::Timeout(_) => "timeout",
            TransformError::Runtime(_) => "runtime",
            TransformError::NotJson => "not-json",
            TransformError::TooLarge(_) => "too-large",
            TransformError::BadOutput(_) => "bad-output",
            TransformError::Crashed => "crashed",
            TransformError::Unavailable(_) => "unavailable",
        }
    }

    /// Whether the delivery fails for good (every kind but `Unavailable`).
    pub fn is_final(&self) -> bool {
        !matches!(self, TransformError::Unavailable(_))
    }
}

/// The dead-letter group of a failure text that starts `transform: <kind>`.
pub fn group_of(error: &str) -> Option<String> {
    let rest = error.strip_prefix("transform: ")?;
    let kind: String = rest
        .chars()
        .take_while(|c| c.is_ascii_lowercase() || *c == '-')
        .collect();
    (!kind.is_empty()).then(|| format!("transform: {kind}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_grouped_by_its_kind() {
        for e in [
            TransformError::Timeout(Duration::from_millis(50)),
            TransformError::Runtime("x".into()),
            TransformError::NotJson,
            TransformError::TooLarge("x".into()),
            TransformError::BadOutput("x".into()),
            TransformError::Crashed,
        ] {
            assert_eq!(
                group_of(&e.to_string()),
                Some(format!("transform: {}", e.kind())),
                "{e}"
            );
            assert!(e.is_final());
        }
        assert_eq!(
            TransformError::Timeout(Duration::from_millis(50)).to_string(),
            "transform: timeout after 50ms"
        );
        assert!(!TransformError::Unavailable("x".into()).is_final());
        assert_eq!(group_of("HTTP 500"), None);
    }
}
