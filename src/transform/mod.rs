//! Transformations: a route's jq program turns the stored body into the shape a
//! legacy consumer expects (a flat JSON, a form post, a Slack message, three
//! fields).
//!
//! The stored original never changes: a program runs at each delivery attempt,
//! from the stored body, so a fixed program (and a restart) re-runs on replay. A
//! program is compiled when the configuration loads (`program`), and runs in a
//! worker process (`worker`) that the gateway kills at the deadline (`pool`), so an
//! endless or exploding program costs one failed delivery, never the gateway. What
//! the output becomes on the wire is `shape`'s. [`Transforms`] holds the pool and
//! each route's program: built with each route table (`app::table`; a table with
//! the same programs and bounds keeps the one in force), used by the forwarder at
//! each attempt and by `operations::preview`.
//!
//! How workers are shared between routes, when a run's deadline has passed (and the
//! one retry a timeout gets), and how much memory and input depth a run may have is
//! `pool`'s and `worker`'s.
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

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::failure::TransformFailure;

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

/// The gateway's transforms: one pool of workers, and each route's program in it.
/// Built once from the configuration; the forwarder runs a route's program at each
/// attempt, the admin API and the console to preview what a route would send.
pub struct Transforms {
    pool: Pool,
    routes: HashMap<(String, String), RouteProgram>,
    cap: usize,
}

/// A route's program: its index in the pool, and how its runs are shaped and
/// bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteProgram {
    index: usize,
    envelope: bool,
    timeout: Duration,
    /// Whether the program reads `$meta`: when it does not, none is built or sent.
    reads_meta: bool,
}

impl Transforms {
    /// The transforms of `routes` (`(source, route, transform)`), run by `exe
    /// transform-worker` with an address space of `memory` bytes, their outputs at
    /// most `cap` bytes. Nothing starts yet.
    pub fn new(
        exe: PathBuf,
        routes: Vec<(String, String, TransformConfig)>,
        cap: usize,
        memory: u64,
    ) -> Self {
        let mut programs = Vec::with_capacity(routes.len());
        let mut by_route = HashMap::with_capacity(routes.len());
        for (source, route, t) in routes {
            by_route.insert(
                (source, route),
                RouteProgram {
                    index: programs.len(),
                    envelope: t.envelope,
                    timeout: t.timeout,
                    reads_meta: t.program.contains("$meta"),
                },
            );
            programs.push(t.program);
        }
        Transforms {
            pool: Pool::with(exe, programs, pool::default_workers(), memory),
            routes: by_route,
            cap,
        }
    }

    /// Whether route `route` of `source` has a transform.
    pub fn has(&self, source: &str, route: &str) -> bool {
        self.routes
            .contains_key(&(source.to_string(), route.to_string()))
    }

    /// Run the transform of route `route` of `source` on `body`, with the `$meta`
    /// that `meta` writes (called only when the program reads it); `None` when the
    /// route has none.
    pub async fn run(
        &self,
        source: &str,
        route: &str,
        meta: impl FnOnce() -> Vec<u8>,
        body: &[u8],
    ) -> Option<Result<Ran, TransformError>> {
        self.run_by(source, route, meta, body, None).await
    }

    /// [`Transforms::run`], not started after `start_by` ([`TransformError::Late`]).
    pub async fn run_by(
        &self,
        source: &str,
        route: &str,
        meta: impl FnOnce() -> Vec<u8>,
        body: &[u8],
        start_by: Option<tokio::time::Instant>,
    ) -> Option<Result<Ran, TransformError>> {
        let p = *self.routes.get(&(source.to_string(), route.to_string()))?;
        let meta = if p.reads_meta { meta() } else { Vec::new() };
        Some(
            self.pool
                .run_by(
                    Run {
                        program: p.index,
                        envelope: p.envelope,
                        cap: self.cap,
                        timeout: p.timeout,
                        meta: &meta,
                        body,
                    },
                    start_by,
                )
                .await,
        )
    }
}

/// What `$meta` tells a program about the entry it runs on.
#[derive(Debug, Clone, Copy)]
pub struct MetaOf<'a> {
    pub source: &'a str,
    pub route: &'a str,
    pub entry_id: &'a str,
    pub event_id: Option<&'a str>,
    pub event_type: Option<&'a str>,
    /// Unix milliseconds.
    pub received_at: i64,
}

/// `$meta` as JSON: the entry's facts and its stored headers (lower-case names;
/// repeated headers joined with `, `; invalid UTF-8 replaced).
pub fn meta<'h>(of: MetaOf<'_>, headers: impl IntoIterator<Item = (&'h str, &'h [u8])>) -> Vec<u8> {
    let mut joined: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        let value = String::from_utf8_lossy(value);
        match joined.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => {
                v.push_str(", ");
                v.push_str(&value);
            }
            None => joined.push((name, value.into_owned())),
        }
    }
    let received =
        std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(of.received_at).unwrap_or(0));
    let meta = Meta {
        source: of.source,
        route: of.route,
        entry_id: of.entry_id,
        event_id: of.event_id,
        event_type: of.event_type,
        received_at: humantime::format_rfc3339_millis(received).to_string(),
        headers: Headers(&joined),
    };
    // Strings into a Vec: serialization cannot fail.
    serde_json::to_vec(&meta).unwrap_or_default()
}

#[derive(serde::Serialize)]
struct Meta<'a> {
    source: &'a str,
    route: &'a str,
    entry_id: &'a str,
    event_id: Option<&'a str>,
    event_type: Option<&'a str>,
    received_at: String,
    headers: Headers<'a>,
}

/// Headers as a JSON object, in the order they came.
struct Headers<'a>(&'a [(String, String)]);

impl serde::Serialize for Headers<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(n, v)| (n, v)))
    }
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
    /// No worker started the run in the time its caller had (a delivery's lease):
    /// not the program's failure either.
    #[error("transform: not started in time")]
    Late,
}

impl TransformError {
    /// The failure's kind, as its dead-letter group names it (`transform: <kind>`).
    pub fn kind(&self) -> &'static str {
        match (self, self.failure()) {
            (_, Some(f)) => f.name(),
            (TransformError::Late, None) => "late",
            (_, None) => "unavailable",
        }
    }

    /// The delivery's failure kind, when the delivery fails for good (every kind
    /// but `Unavailable` and `Late`).
    pub fn failure(&self) -> Option<TransformFailure> {
        Some(match self {
            TransformError::Timeout(_) => TransformFailure::Timeout,
            TransformError::Runtime(_) => TransformFailure::Runtime,
            TransformError::NotJson => TransformFailure::NotJson,
            TransformError::TooLarge(_) => TransformFailure::TooLarge,
            TransformError::BadOutput(_) => TransformFailure::BadOutput,
            TransformError::Crashed => TransformFailure::Crashed,
            TransformError::Unavailable(_) | TransformError::Late => return None,
        })
    }

    /// Whether the delivery fails for good (every kind but `Unavailable` and
    /// `Late`).
    pub fn is_final(&self) -> bool {
        self.failure().is_some()
    }
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
            let kind = e.failure().map(crate::failure::Failure::Transform);
            assert_eq!(
                kind.map(|k| k.name()),
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
        assert_eq!(TransformError::Unavailable("x".into()).failure(), None);
        assert_eq!(TransformError::Late.failure(), None);
    }

    #[test]
    fn meta_holds_the_entry_and_its_headers() {
        let m: serde_json::Value = serde_json::from_slice(&meta(
            MetaOf {
                source: "shop",
                route: "legacy",
                entry_id: "e1",
                event_id: Some("evt_1"),
                event_type: None,
                received_at: 1_700_000_000_123,
            },
            [
                ("x-a", &b"1"[..]),
                ("x-a", &b"2"[..]),
                ("x-b", &b"\xff"[..]),
            ],
        ))
        .unwrap();
        assert_eq!(
            m,
            serde_json::json!({
                "source": "shop", "route": "legacy", "entry_id": "e1",
                "event_id": "evt_1", "event_type": null,
                "received_at": "2023-11-14T22:13:20.123Z",
                "headers": {"x-a": "1, 2", "x-b": "\u{fffd}"},
            })
        );
    }
}
