//! What the soak writes down as it goes, and what the checker reads: the load
//! generator's record (every event, every attempt and its answer), the upstream's
//! record (every delivery and what it answered), and the fault record (every fault
//! and admin action, with its start and end). Times are milliseconds since the run
//! began; `order` numbers the upstream's decisions, so two deliveries in the same
//! millisecond still have an order.

use std::io::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// How one attempt to hand an event to a gateway ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// 200: stored (or a duplicate of what was stored), with the entry id.
    Accepted { entry: String, duplicate: bool },
    /// Any other status (503 while the store is away, …).
    Status(u16),
    /// No answer: connection refused or reset, or no answer in time (a gateway
    /// killed mid-request). Whether it was stored is unknown, as after a 503.
    #[serde(alias = "no_answer")]
    Unanswered,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    pub at: u64,
    pub gateway: usize,
    pub answer: Answer,
}

/// One event the load generator made: its key's line and every attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    pub event: String,
    pub key: String,
    pub seq: u64,
    pub attempts: Vec<Attempt>,
}

impl Event {
    /// The entry id of its first 200, if any attempt got one.
    pub fn acked(&self) -> Option<(u64, &str)> {
        self.attempts.iter().find_map(|a| match &a.answer {
            Answer::Accepted { entry, .. } => Some((a.at, entry.as_str())),
            _ => None,
        })
    }

    /// Every entry id a 200 named (more than one: stored twice).
    pub fn entries(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .attempts
            .iter()
            .filter_map(|a| match &a.answer {
                Answer::Accepted { entry, .. } => Some(entry.as_str()),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Some attempt may have been stored without its 200 arriving.
    pub fn answer_unknown(&self) -> bool {
        self.attempts
            .iter()
            .any(|a| matches!(a.answer, Answer::Status(503) | Answer::Unanswered))
    }
}

/// One request the upstream received, and what it answered (0: it held the request
/// past the gateway's timeout and never answered).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    pub at: u64,
    pub order: u64,
    pub route: String,
    pub entry: String,
    pub event: String,
    pub key: String,
    pub seq: u64,
    pub status: u16,
}

impl Delivery {
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL of gateway `target`, restarted at `end`.
    GatewayKill,
    /// SIGKILL of the store's server (Redis, PostgreSQL), restarted at `end`.
    StoreKill,
    /// The embedded store's disk filled up to below `min_free_bytes`, freed at `end`.
    DiskFull,
    /// A route's deliveries paused through the admin API, resumed at `end`.
    Pause,
    /// One delivered entry replayed through the admin API (`detail`: its id).
    Replay,
    /// The dead letters replayed through the admin API.
    ReplayDead,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fault {
    pub kind: FaultKind,
    pub start: u64,
    pub end: u64,
    pub detail: String,
}

/// Write `items` as JSON lines to `path`.
pub fn write_lines<T: Serialize>(path: &Path, items: &[T]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for item in items {
        serde_json::to_writer(&mut out, item)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Read the JSON lines [`write_lines`] wrote.
pub fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> std::io::Result<Vec<T>> {
    std::fs::read_to_string(path)?
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
        .collect()
}
