//! The admin API's wire types: what its answers and request bodies look like in
//! JSON. The server serializes them and the CLI deserializes them, so both sides
//! share one definition; each carries the name of its schema in `openapi.json`.

use serde::{Deserialize, Serialize};

use crate::store::Status;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EntrySummary {
    pub id: String,
    pub source: String,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub received_at: String,
    pub status: Status,
    pub attempts: u32,
    pub next_attempt_at: Option<String>,
    pub last_error: Option<String>,
    /// How it came: `received` (a request to its ingest URL), `reconciled`
    /// (admitted from the provider's API) or `redelivered` (asked for again by
    /// reconciliation).
    #[serde(default)]
    pub origin: crate::store::Origin,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EntryList {
    pub entries: Vec<EntrySummary>,
    pub next_cursor: Option<String>,
    /// How a search with predicates went (absent from a plain listing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchInfo>,
}

/// How a payload search went: the index that gave its candidates, how many entries
/// it read with their bodies, and, when it stopped before the end of its window
/// without a full page, where (`next_cursor` goes on from there).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchInfo {
    pub index: Option<String>,
    pub scanned: usize,
    /// The whole window was searched (up to the page's last entry).
    pub complete: bool,
    /// The arrival time of the last entry read, when not complete: older entries
    /// are not searched yet.
    pub stopped_at: Option<String>,
}

/// A stored header of an entry (credentials and signatures redacted).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    pub name: String,
    pub value: String,
}

/// One route's delivery of an entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    pub route: String,
    pub status: Status,
    pub attempts: u32,
    pub next_attempt_at: Option<String>,
    pub last_error: Option<String>,
    /// The kind of its last failed attempt (`HTTP 503`, `timeout`, `connect`, …).
    #[serde(default)]
    pub last_failure: Option<String>,
    /// On an ordered route: the delivery's ordering key and the route's policy.
    #[serde(default)]
    pub order: Option<DeliveryOrder>,
}

/// An ordered delivery's key, and what its death does to the key's line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeliveryOrder {
    pub key: String,
    /// `skip` or `block`.
    pub on_dead: String,
}

/// Where a replayed delivery of an ordered route waits in its key's line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinePlace {
    pub route: String,
    pub key: String,
    /// Deliveries of the key that go before it (one in flight, or earlier arrivals).
    pub ahead: u64,
    /// Deliveries of the key, received after it, that now wait for it.
    pub behind: u64,
}

/// One delivery attempt of an entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    /// The route the attempt went through.
    pub route: String,
    /// The attempt's number on its route (1 for the first).
    pub n: u32,
    pub at: String,
    pub status_code: Option<u16>,
    /// The kind of failure, when it failed (`HTTP 503`, `timeout`, `connect`, …).
    #[serde(default)]
    pub failure: Option<String>,
    pub error: Option<String>,
    pub latency_ms: u64,
    /// What a queue destination answered when it took the message (a stream and its
    /// sequence, a confirm).
    #[serde(default)]
    pub answer: Option<String>,
}

/// An operator's action on an entry (replay or discard).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditEvent {
    pub at: String,
    pub action: String,
    pub actor: String,
    pub note: Option<String>,
    /// The route the action named (none: every delivery it applied to).
    #[serde(default)]
    pub route: Option<String>,
    /// The console session it came from (a hash of the session's nonce).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The address of the client that asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// A pause or resume, as `GET /admin/audit` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlEvent {
    pub at: String,
    /// `pause` or `resume`.
    pub action: String,
    pub source: String,
    /// The route paused or resumed (none: the whole source).
    #[serde(default)]
    pub route: Option<String>,
    pub actor: String,
    /// The console session it came from (a hash of the session's nonce).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The address of the client that asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EntryDetail {
    #[serde(flatten)]
    pub summary: EntrySummary,
    pub headers: Vec<Header>,
    /// `utf8` or `base64`.
    pub body_encoding: String,
    pub body: String,
    /// One per route the entry was stored for (none for a filtered entry).
    pub deliveries: Vec<Delivery>,
    pub attempt_log: Vec<Attempt>,
    pub audit: Vec<AuditEvent>,
    /// The entry's trace id (32 hex digits), when traces are exported: a trace
    /// viewer finds its ingest, every attempt and every replay under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReplayFilter {
    #[serde(default)]
    pub source: Option<String>,
    /// Replay only this route's deliveries (its dead ones, by default).
    #[serde(default)]
    pub route: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub event_type: Option<String>,
    #[serde(default)]
    pub since: Option<String>,
    #[serde(default)]
    pub until: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayResult {
    pub queued: u64,
    /// When the last queued entry is due (RFC 3339), given the replay rate.
    pub last_due_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransitionResult {
    pub id: String,
    pub status: Status,
    /// A replay of ordered deliveries: where each waits in its key's line.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<LinePlace>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiscardRequest {
    pub note: String,
    /// Discard only this route's delivery (default: every pending or dead one).
    #[serde(default)]
    pub route: Option<String>,
}

/// The optional body of a replay.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReplayRequest {
    /// Replay only this route's delivery (default: every dead or discarded one).
    #[serde(default)]
    pub route: Option<String>,
}

/// The body of `POST /admin/sources/{name}/reconcile`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReconcileRequest {
    /// Judge what the provider sent in this window (`"6h"`); from the high-water
    /// mark when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Say what would be done, and do nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceState {
    pub source: String,
    pub paused: bool,
    /// The source's routes, in configuration order.
    #[serde(default)]
    pub routes: Vec<RouteState>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteState {
    pub route: String,
    /// Paused itself (its source may be paused as well: see `SourceState`).
    pub paused: bool,
}

/// The deliveries of one route, by status.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteStats {
    pub route: String,
    pub paused: bool,
    pub pending: u64,
    pub delivered: u64,
    pub dead: u64,
    pub discarded: u64,
    pub oldest_pending_age_seconds: Option<u64>,
    /// Ordering keys held by a dead head (`on_dead = "block"`).
    #[serde(default)]
    pub blocked_keys: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceStats {
    pub source: String,
    pub paused: bool,
    pub received: u64,
    pub duplicates: u64,
    pub unverified: u64,
    pub pending: u64,
    pub delivered: u64,
    pub dead: u64,
    pub discarded: u64,
    #[serde(default)]
    pub filtered: u64,
    pub oldest_pending_age_seconds: Option<u64>,
    #[serde(default)]
    pub routes: Vec<RouteStats>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stats {
    pub sources: Vec<SourceStats>,
}

/// A route's dead deliveries, as the dead-letter groups were read from them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterRoute {
    pub source: String,
    pub route: String,
    /// The route's dead deliveries.
    pub dead: u64,
    /// How many of them (the newest) were grouped.
    pub scanned: u64,
}

/// The dead deliveries of one route that died of one failure.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterGroup {
    pub source: String,
    pub route: String,
    /// The kind of the last failed attempt, by its name (`HTTP 422`, `timeout`,
    /// `connect`, `tls`, `io`, `transform: <kind>`, …), or `unknown` when none was
    /// recorded.
    pub failure: String,
    pub count: u64,
    /// When the first and the last of them went dead (RFC 3339).
    pub first_seen: String,
    pub last_seen: String,
    /// The one that went dead last.
    pub sample: DeadLetterSample,
}

/// An entry of a dead-letter group.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterSample {
    pub id: String,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub attempts: u32,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterGroups {
    /// Every route with dead deliveries.
    pub routes: Vec<DeadLetterRoute>,
    /// Their groups: routes in configuration order, each one's largest group first.
    pub groups: Vec<DeadLetterGroup>,
}

/// The body of `POST /admin/dead-letters/replay`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterReplay {
    pub source: String,
    pub route: String,
    pub failure: String,
}

/// What a route would do with an entry now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PreviewOutcome {
    /// This is what the route sends.
    Send,
    /// The transform gives no output: the delivery would be `filtered`.
    Skip,
    /// The transform fails: the delivery would be dead, in group `failure`.
    Failed,
}

/// The body of `POST /admin/entries/{id}/preview`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PreviewRequest {
    /// The route whose request is previewed; may be left out when the entry's
    /// source has one route.
    #[serde(default)]
    pub route: Option<String>,
}

/// What a route would send for an entry, now, without sending it: the stored body,
/// or what the route's transform makes of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Preview {
    pub route: String,
    /// Whether the route has a transform.
    pub transformed: bool,
    pub outcome: PreviewOutcome,
    pub content_type: Option<String>,
    /// Headers the transform sets (hookgate's own delivery headers, which depend on
    /// the attempt, are not shown).
    pub headers: Vec<Header>,
    /// The body, when it is UTF-8 text.
    pub body: Option<String>,
    /// The body in base64, when it is not UTF-8.
    pub body_base64: Option<String>,
    /// The failure's group (`transform: <kind>`), when it fails.
    pub failure: Option<String>,
    /// What went wrong, when it fails (it may quote the body).
    pub error: Option<String>,
}

/// A request ingest refused, as `GET /admin/rejections` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rejection {
    pub id: String,
    /// RFC 3339.
    pub at: String,
    /// The source the URL named.
    pub source: String,
    /// Whether that source is configured.
    pub known: bool,
    /// `mismatch`, `stale`, `missing_signature`, … (a refused signature), or
    /// `too_large`, `unknown_source`, `busy`, `rate_limited`, `ip_not_allowed`,
    /// `body_timeout`, `body_read`.
    pub reason: String,
    /// The HTTP status answered.
    pub status: u16,
    pub client: Option<String>,
    /// The body's size: as read, or as declared when it was not read.
    pub size: Option<u64>,
    /// `sha256:<hex>` of the body, when it was read.
    pub digest: Option<String>,
    /// The headers an entry of the source keeps, the signature redacted.
    pub headers: Vec<Header>,
    /// Only for a source with `keep_rejected_bodies`: `utf8` or `base64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_encoding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RejectionList {
    pub rejections: Vec<Rejection>,
    pub next_cursor: Option<String>,
}

/// Every request of one source (`*`: every name that is not a configured source)
/// refused for one reason since a time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RejectionGroup {
    pub source: String,
    pub reason: String,
    pub count: u64,
    /// The newest (RFC 3339).
    pub last_at: String,
    /// What usually causes it.
    pub hint: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RejectionGroups {
    /// The start of the counted hours (RFC 3339).
    pub since: String,
    /// The group refused last first.
    pub groups: Vec<RejectionGroup>,
    /// The configured sources that refuse most of what reaches them now (the last
    /// 10 minutes, whatever `since` says), in configuration order.
    #[serde(default)]
    pub refusing: Vec<RefusingSource>,
}

/// A configured source that refused more than 80 % of the requests that reached it
/// in the last 10 minutes, at least 20 of them (what `HookgateSourceRefusing`
/// alerts on, read from the store): a refusal for any failed verification, the
/// allowlist (`ip_not_allowed`) or the request limit (`rate_limited`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusingSource {
    pub source: String,
    /// The reason most of them were refused for.
    pub reason: String,
    /// The first refusal for `reason` after the source's last stored entry (RFC
    /// 3339); when an entry was stored after the first of them in the window (the
    /// source still stores some of what it gets), the first of the refusals with
    /// no 10-minute pause between them.
    pub since: String,
    /// False when the log no longer keeps the first one (it keeps the newest 100
    /// of a source and reason): refused since `since` at least.
    pub since_exact: bool,
    /// Requests refused in the window, every reason above together: the hourly
    /// counts shared out as the sampled rows of each reason fell.
    pub refused: u64,
    /// Requests that reached the source in the window: `refused`, and the entries
    /// stored.
    pub total: u64,
    /// For `ip_not_allowed`: the client address most of them came from.
    #[serde(default)]
    pub client: Option<String>,
    /// What it likely means, one sentence naming `since`.
    pub likely: String,
}

/// `POST /admin/sources/{name}/handshake`: how long the handshake stays armed. Any
/// other field is refused: a misspelt `within_secs` would arm for the default.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmHandshake {
    /// Seconds, 1 to 3600 (default 600). A number as JSON has it: `3.0` is 3 s,
    /// as JSON Schema's `integer` takes it.
    #[serde(default)]
    pub within_secs: Option<serde_json::Number>,
}

/// The answer to an arming: the handshake's state, and the one-time token that the
/// provider's handshake must carry in its URL (shown here only, never again).
#[derive(Clone, Serialize, Deserialize)]
pub struct ArmedHandshake {
    pub source: String,
    /// Until when the handshake that carries the token is taken.
    pub armed_until: String,
    /// The arming's token: the handshake's URL carries it as the query parameter
    /// `hookgate_handshake`. A new arming replaces it.
    pub token: String,
    /// The source's `public_url` with the token: the target URL to create the
    /// provider's webhook with. None when the source has no `public_url`.
    #[serde(default)]
    pub target_url: Option<String>,
    /// The secrets established, oldest first (never the secrets themselves).
    pub secrets: Vec<EstablishedSecret>,
}

impl std::fmt::Debug for ArmedHandshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArmedHandshake")
            .field("source", &self.source)
            .field("armed_until", &self.armed_until)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

/// A source's secret handshake: whether it is armed, and the secrets established.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HandshakeState {
    pub source: String,
    /// Until when the next handshake is taken; none when not armed.
    #[serde(default)]
    pub armed_until: Option<String>,
    /// The secrets established, oldest first (never the secrets themselves).
    pub secrets: Vec<EstablishedSecret>,
}

/// A secret a provider established in a handshake, by its id.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EstablishedSecret {
    /// The first 16 hex digits of the secret's SHA-256.
    pub id: String,
    pub established_at: String,
}

/// The gateways on the store (`GET /admin/gateways`), by id.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Gateways {
    pub gateways: Vec<GatewayState>,
}

/// One gateway on the store, as its last heartbeat left it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GatewayState {
    /// Unique per run; the name its leases are held under.
    pub id: String,
    pub host: String,
    /// The version of the configuration it runs.
    pub version: String,
    /// When it started (RFC 3339, its own clock).
    pub started: String,
    /// Its last heartbeat (RFC 3339, the store's clock).
    pub last_seen: String,
    /// Seen within the last 10 s by the store's clock.
    pub alive: bool,
}
