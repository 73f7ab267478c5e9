//! Traces: one OpenTelemetry trace per webhook, from the provider's request through
//! the store to every delivery attempt and every operator action on it, exported
//! over OTLP/HTTP (`[telemetry] otlp_endpoint`).
//!
//! Spans are recorded after the fact, from timings the gateway takes anyway, and
//! their ids follow from the entry: the trace id is a digest of the entry id, the
//! ingest span's id a digest of the entry id, an attempt's a digest of (entry,
//! route, attempt number). So every gateway on one store, and every later replay,
//! puts its spans in the entry's trace without a trace context being stored, and
//! an attempt's `traceparent` is known before its request is sent. (A digest, not
//! the UUIDv7 itself: ratio sampling reads the trace id's low bits, which a UUIDv7
//! fixes; a digest spreads them.)
//!
//! - ingest: a root span per request (`ingest`, server) with `read body`, `verify`
//!   and `store` children; the store span is dedupe and store at once, one atomic
//!   write. A provider's own `traceparent` is a link. A duplicate's request is a
//!   trace of its own linked to the entry's; a refused request's carries the reason.
//! - delivery: each attempt (`deliver`, client) is a child of the entry's ingest
//!   span; a retry links to the attempt before it instead of being its child.
//! - admin: `replay` and `discard` are children of the entry's ingest span.
//!
//! Sampling is by the trace id's ratio, so every gateway decides alike for one
//! entry. Off (no endpoint), [`Traces`] holds nothing: each place that records is
//! one branch. A leaf like the rest of `telemetry`: callers pass plain values.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::runtime::Tokio;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, Sampler, SamplingDecision, ShouldSample, SpanData, SpanEvents,
    SpanExporter, SpanLinks, SpanProcessor,
};
use sha2::{Digest, Sha256};

/// Spans waiting for export; beyond them new spans are dropped, never waited for.
pub const QUEUE_SPANS: usize = 8_192;
/// How often waiting spans are sent (and at most how long a span waits).
pub const EXPORT_INTERVAL: Duration = Duration::from_secs(1);
/// The longest an attribute that came from a request may be, in characters.
const ATTRIBUTE_CHARS: usize = 200;

/// Where and how traces are exported (`[telemetry]`).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The collector's OTLP/HTTP base URL; spans go to `<it>/v1/traces`.
    pub endpoint: String,
    /// The share of webhooks traced, from 0 to 1.
    pub sample_ratio: f64,
    /// `service.name` of the spans.
    pub service_name: String,
    /// The longest one export request may take.
    pub timeout: Duration,
}

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot build the HTTP client of the trace exporter")]
    Client(#[source] reqwest::Error),
    #[error("cannot build the trace exporter")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// The gateway's tracer: cheap to clone, and nothing inside when traces are off.
#[derive(Clone, Default)]
pub struct Traces(Option<Arc<Exporting>>);

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Traces(on)"
        } else {
            "Traces(off)"
        })
    }
}

struct Exporting {
    processor: BatchSpanProcessor<Tokio>,
    sampler: Sampler,
    scope: InstrumentationScope,
}

impl Traces {
    /// No traces: every recording point is one branch.
    pub fn off() -> Traces {
        Traces(None)
    }

    /// Export traces as `settings` say. Call it inside the Tokio runtime: the
    /// exporter's task runs there.
    pub fn start(settings: &TraceSettings) -> Result<Traces, TraceError> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(TraceError::Client)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(traces_url(&settings.endpoint))
            .with_timeout(settings.timeout)
            .build()
            .map_err(TraceError::Exporter)?;
        let mut processor = BatchSpanProcessor::builder(Counted(exporter), Tokio)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(QUEUE_SPANS)
                    .with_scheduled_delay(EXPORT_INTERVAL)
                    .with_max_export_timeout(settings.timeout)
                    .build(),
            )
            .build();
        processor.set_resource(
            &Resource::builder_empty()
                .with_service_name(settings.service_name.clone())
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build(),
        );
        Ok(Traces(Some(Arc::new(Exporting {
            processor,
            sampler: Sampler::TraceIdRatioBased(settings.sample_ratio),
            scope: InstrumentationScope::builder("hookgate")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        }))))
    }

    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Send what waits, and stop exporting.
    pub async fn shutdown(&self) {
        let Some(on) = self.0.clone() else { return };
        // The processor waits for its task with a blocking call.
        let done = tokio::task::spawn_blocking(move || on.processor.shutdown()).await;
        if let Ok(Err(e)) = done {
            tracing::warn!(error = %e, "traces: the last spans may not have been exported");
        }
    }

    /// A request's trace, begun as it arrives: `None` when traces are off.
    pub fn ingest_start(&self, headers: &HeaderMap) -> Option<IngestTrace> {
        self.0.as_ref()?;
        let provider = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
        let link = provider.span().span_context().clone();
        Some(IngestTrace {
            wall: SystemTime::now(),
            start: Instant::now(),
            link: link.is_valid().then_some(link),
            phases: Vec::with_capacity(3),
        })
    }

    /// Record a request's spans once it is answered.
    pub fn ingest_end(&self, trace: IngestTrace, end: IngestEnd<'_>) {
        let Some(on) = &self.0 else { return };
        let elapsed = trace.start.elapsed();
        let at = |i: Instant| trace.wall + i.saturating_duration_since(trace.start);
        let mut links: Vec<Link> = trace
            .link
            .iter()
            .map(|sc| {
                Link::new(
                    sc.clone(),
                    vec![KeyValue::new("hookgate.link", "provider")],
                    0,
                )
            })
            .collect();
        // A new entry's request is the root of the entry's trace; any other request
        // (a duplicate, a refusal, a handshake) is a trace of its own, a duplicate's
        // linked to the entry's.
        let context = match (end.entry_id, end.duplicate) {
            (Some(id), false) => on.context(trace_id(id), ingest_span_id(id)),
            (Some(id), true) => {
                links.push(Link::new(
                    on.context(trace_id(id), ingest_span_id(id)),
                    vec![KeyValue::new("hookgate.link", "entry")],
                    0,
                ));
                on.context(random_trace_id(), random_span_id())
            }
            (None, _) => on.context(random_trace_id(), random_span_id()),
        };
        if !context.is_sampled() {
            return;
        }
        let mut attributes = vec![
            KeyValue::new("hookgate.source", bounded(end.source)),
            KeyValue::new("hookgate.outcome", end.outcome),
            KeyValue::new("http.request.method", "POST"),
            KeyValue::new("http.response.status_code", i64::from(end.status)),
        ];
        if let Some(id) = end.entry_id {
            attributes.push(KeyValue::new("hookgate.entry_id", id.to_string()));
        }
        if let Some(id) = end.event_id {
            attributes.push(KeyValue::new("hookgate.event_id", bounded(id)));
        }
        if let Some(t) = end.event_type {
            attributes.push(KeyValue::new("hookgate.event_type", bounded(t)));
        }
        let status = match end.status {
            200..=299 => Status::Unset,
            _ => Status::error(end.outcome),
        };
        for (phase, from, to) in &trace.phases {
            on.emit(Recorded {
                context: on.context(context.trace_id(), random_span_id()),
                parent: context.span_id(),
                kind: SpanKind::Internal,
                name: phase.name(),
                start: at(*from),
                end: at(*to),
                attributes: Vec::new(),
                links: Vec::new(),
                status: Status::Unset,
            });
        }
        on.emit(Recorded {
            context,
            parent: SpanId::INVALID,
            kind: SpanKind::Server,
            name: "ingest",
            start: trace.wall,
            end: trace.wall + elapsed,
            attributes,
            links,
            status,
        });
    }

    /// Put attempt `attempt` of `entry_id` through `route` in the request's headers:
    /// `traceparent` (and `tracestate` when there is one), replacing any received.
    pub fn inject(&self, entry_id: &str, route: &str, attempt: u32, headers: &mut HeaderMap) {
        let Some(on) = &self.0 else { return };
        let sc = on.context(
            trace_id(entry_id),
            attempt_span_id(entry_id, route, attempt),
        );
        let cx = Context::new().with_remote_span_context(sc);
        TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
        if headers
            .get("tracestate")
            .is_some_and(|v| v.as_bytes().is_empty())
        {
            headers.remove("tracestate");
        }
    }

    /// Record a delivery attempt (see [`AttemptSpan`]).
    pub fn attempt(&self, a: AttemptSpan<'_>) {
        let Some(on) = &self.0 else { return };
        let trace = trace_id(a.entry_id);
        let context = on.context(trace, attempt_span_id(a.entry_id, a.route, a.attempt));
        if !context.is_sampled() {
            return;
        }
        let mut attributes = vec![
            KeyValue::new("hookgate.entry_id", a.entry_id.to_string()),
            KeyValue::new("hookgate.source", a.source.to_string()),
            KeyValue::new("hookgate.route", a.route.to_string()),
            KeyValue::new("hookgate.attempt", i64::from(a.attempt)),
            KeyValue::new("hookgate.outcome", a.outcome.label()),
            KeyValue::new("server.address", a.destination.to_string()),
        ];
        match a.messaging {
            Some(system) => {
                attributes.push(KeyValue::new("messaging.system", system.to_string()));
                attributes.push(KeyValue::new("messaging.operation.type", "send"));
            }
            None => attributes.push(KeyValue::new("http.request.method", "POST")),
        }
        if let Some(answer) = a.answer {
            attributes.push(KeyValue::new("hookgate.answer", answer.to_string()));
        }
        if let Some(origin) = a.origin {
            attributes.push(KeyValue::new("hookgate.origin", origin.to_string()));
        }
        if let Some(code) = a.status_code {
            attributes.push(KeyValue::new("http.response.status_code", i64::from(code)));
        }
        // `error.type` is the failure's kind (few values: `HTTP 503`, `timeout`,
        // `connect`); the status says what happened in words.
        if let Some(kind) = a.failure {
            attributes.push(KeyValue::new("error.type", kind.to_string()));
        }
        let status = match (a.error, a.failure) {
            (Some(e), _) => Status::error(bounded(e)),
            (None, Some(kind)) => Status::error(kind.to_string()),
            (None, None) if a.outcome == AttemptOutcome::Delivered => Status::Ok,
            (None, None) => Status::error(a.outcome.label()),
        };
        // A retry follows the attempt before it: a link, not a child of that span.
        let links = match a.attempt {
            0 | 1 => Vec::new(),
            n => vec![Link::new(
                on.context(trace, attempt_span_id(a.entry_id, a.route, n - 1)),
                vec![KeyValue::new("hookgate.link", "previous attempt")],
                0,
            )],
        };
        on.emit(Recorded {
            context,
            parent: ingest_span_id(a.entry_id),
            kind: SpanKind::Client,
            name: "deliver",
            start: a.start,
            end: a.start + a.elapsed,
            attributes,
            links,
            status,
        });
    }

    /// Record an operator's action on an entry (see [`ActionSpan`]).
    pub fn action(&self, a: ActionSpan<'_>) {
        let Some(on) = &self.0 else { return };
        let context = on.context(trace_id(a.entry_id), random_span_id());
        if !context.is_sampled() {
            return;
        }
        let mut attributes = vec![
            KeyValue::new("hookgate.entry_id", a.entry_id.to_string()),
            KeyValue::new("hookgate.actor", bounded(a.actor)),
            KeyValue::new("hookgate.outcome", a.outcome),
        ];
        if let Some(route) = a.route {
            attributes.push(KeyValue::new("hookgate.route", bounded(route)));
        }
        on.emit(Recorded {
            context,
            parent: ingest_span_id(a.entry_id),
            kind: SpanKind::Internal,
            name: a.action,
            start: a.start,
            end: SystemTime::now().max(a.start),
            attributes,
            links: Vec::new(),
            status: match a.ok {
                true => Status::Ok,
                false => Status::error(a.outcome),
            },
        });
    }
}

/// A request's trace while it is handled (see [`Traces::ingest_start`]).
#[derive(Debug)]
pub struct IngestTrace {
    wall: SystemTime,
    start: Instant,
    /// The provider's own trace context, when its request carried one.
    link: Option<SpanContext>,
    phases: Vec<(IngestPhase, Instant, Instant)>,
}

impl IngestTrace {
    /// `phase` ran from `since` until now.
    pub fn phase(&mut self, phase: IngestPhase, since: Instant) {
        self.phases.push((phase, since, Instant::now()));
    }
}

/// The parts of handling a request that get a span each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestPhase {
    ReadBody,
    Verify,
    /// Dedupe and store: one atomic write.
    Store,
}

impl IngestPhase {
    fn name(self) -> &'static str {
        match self {
            IngestPhase::ReadBody => "read body",
            IngestPhase::Verify => "verify",
            IngestPhase::Store => "store",
        }
    }
}

/// How a request ended, for its trace.
#[derive(Debug, Clone, Copy)]
pub struct IngestEnd<'a> {
    /// The source's name, or how an unknown one is logged.
    pub source: &'a str,
    /// `accepted`, `duplicate`, `handshake`, or the refusal's reason.
    pub outcome: &'static str,
    pub status: u16,
    /// The entry stored (or, for a duplicate, the one already stored).
    pub entry_id: Option<&'a str>,
    pub duplicate: bool,
    pub event_id: Option<&'a str>,
    pub event_type: Option<&'a str>,
}

/// One delivery attempt, as it went.
#[derive(Debug, Clone, Copy)]
pub struct AttemptSpan<'a> {
    pub entry_id: &'a str,
    pub source: &'a str,
    pub route: &'a str,
    /// Its number on the route (1 for the first).
    pub attempt: u32,
    /// The destination's origin (no path, no credentials).
    pub destination: &'a str,
    pub start: SystemTime,
    pub elapsed: Duration,
    pub status_code: Option<u16>,
    /// The kind of failure, by its name, when it failed (`HTTP 503`, `timeout`).
    pub failure: Option<&'a str>,
    /// What went wrong, when something did (never request data).
    pub error: Option<&'a str>,
    pub outcome: AttemptOutcome,
    /// How the entry came, when reconciliation recovered it (`reconciled`,
    /// `redelivered`): the span's `hookgate.origin`.
    pub origin: Option<&'a str>,
    /// The broker, for a queue destination (`nats`, `rabbitmq`): the span's
    /// `messaging.system`, in place of the HTTP method.
    pub messaging: Option<&'a str>,
    /// What the broker answered (`stream HOOKS seq 42`, `confirmed`).
    pub answer: Option<&'a str>,
}

/// What became of a delivery after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Delivered,
    Retry,
    Dead,
    /// The entry was discarded while the attempt was in flight.
    Cancelled,
}

impl AttemptOutcome {
    pub fn label(self) -> &'static str {
        match self {
            AttemptOutcome::Delivered => "delivered",
            AttemptOutcome::Retry => "retry",
            AttemptOutcome::Dead => "dead",
            AttemptOutcome::Cancelled => "cancelled",
        }
    }
}

/// An operator's action on one entry.
#[derive(Debug, Clone, Copy)]
pub struct ActionSpan<'a> {
    /// `replay` or `discard`.
    pub action: &'static str,
    pub entry_id: &'a str,
    pub route: Option<&'a str>,
    pub actor: &'a str,
    pub start: SystemTime,
    pub ok: bool,
    /// What came of it (`queued`, `not found`, …).
    pub outcome: &'static str,
}

/// A finished span, as recorded.
struct Recorded {
    context: SpanContext,
    parent: SpanId,
    kind: SpanKind,
    name: &'static str,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
    links: Vec<Link>,
    status: Status,
}

impl Exporting {
    /// A span context in `trace`, sampled as the trace is.
    fn context(&self, trace: TraceId, span: SpanId) -> SpanContext {
        let sampled = matches!(
            self.sampler
                .should_sample(None, trace, "", &SpanKind::Internal, &[], &[])
                .decision,
            SamplingDecision::RecordAndSample
        );
        let flags = match sampled {
            true => TraceFlags::SAMPLED,
            false => TraceFlags::default(),
        };
        SpanContext::new(trace, span, flags, false, TraceState::default())
    }

    fn emit(&self, span: Recorded) {
        self.processor.on_end(SpanData {
            span_context: span.context,
            parent_span_id: span.parent,
            parent_span_is_remote: false,
            span_kind: span.kind,
            name: Cow::Borrowed(span.name),
            start_time: span.start,
            end_time: span.end.max(span.start),
            attributes: span.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: {
                let mut links = SpanLinks::default();
                links.links = span.links;
                links
            },
            status: span.status,
            instrumentation_scope: self.scope.clone(),
        });
    }
}

/// The exporter, counting what it sends and what fails (and logging a failure at
/// most once a minute: a collector that is down fails every second).
#[derive(Debug)]
struct Counted<E>(E);

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = u64::try_from(batch.len()).unwrap_or(u64::MAX);
        let result = self.0.export(batch).await;
        match &result {
            Ok(()) => metrics::counter!("hookgate_trace_spans_exported_total").increment(n),
            Err(e) => {
                metrics::counter!("hookgate_trace_spans_failed_total").increment(n);
                const MSG: &str = "traces: export failed; the spans are lost";
                if super::throttle::hit(MSG, "otlp") {
                    tracing::warn!(error = %e, spans = n, "{MSG}");
                }
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

/// Register the trace exporter's counters with zero series.
pub fn register_metrics() {
    metrics::counter!("hookgate_trace_spans_exported_total").increment(0);
    metrics::counter!("hookgate_trace_spans_failed_total").increment(0);
}

/// Where spans are posted: `<endpoint>/v1/traces`.
pub fn traces_url(endpoint: &str) -> String {
    format!("{}/v1/traces", endpoint.trim_end_matches('/'))
}

/// The trace id of an entry's trace.
pub fn trace_id(entry_id: &str) -> TraceId {
    let d = digest(&[b"trace", entry_id.as_bytes()]);
    let mut id = [0u8; 16];
    id.copy_from_slice(&d[..16]);
    if id == [0; 16] {
        id[15] = 1;
    }
    TraceId::from_bytes(id)
}

/// The trace id of an entry's trace, as trace viewers show it (32 hex digits).
pub fn trace_id_hex(entry_id: &str) -> String {
    trace_id(entry_id).to_string()
}

/// The span id of an entry's ingest span.
pub fn ingest_span_id(entry_id: &str) -> SpanId {
    span_id(&[b"ingest", entry_id.as_bytes()])
}

/// The span id of attempt `attempt` of an entry through `route`.
pub fn attempt_span_id(entry_id: &str, route: &str, attempt: u32) -> SpanId {
    span_id(&[
        b"attempt",
        entry_id.as_bytes(),
        route.as_bytes(),
        &attempt.to_be_bytes(),
    ])
}

fn span_id(parts: &[&[u8]]) -> SpanId {
    let d = digest(parts);
    let mut id = [0u8; 8];
    id.copy_from_slice(&d[..8]);
    if id == [0; 8] {
        id[7] = 1;
    }
    SpanId::from_bytes(id)
}

/// SHA-256 over `parts`, each length-prefixed so no two lists collide.
fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"hookgate-trace-v1");
    for p in parts {
        h.update(u64::try_from(p.len()).unwrap_or(u64::MAX).to_be_bytes());
        h.update(p);
    }
    h.finalize().into()
}

fn random_trace_id() -> TraceId {
    TraceId::from_bytes(fastrand::u128(1..).to_be_bytes())
}

fn random_span_id() -> SpanId {
    SpanId::from_bytes(fastrand::u64(1..).to_be_bytes())
}

/// A value that came from a request, cut to [`ATTRIBUTE_CHARS`].
fn bounded(v: &str) -> String {
    v.chars().take(ATTRIBUTE_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_from_the_entry() {
        let e = "0190a5b2-7c3d-7e4f-8a1b-2c3d4e5f6a7b";
        assert_eq!(trace_id(e), trace_id(e));
        assert_ne!(trace_id(e), trace_id("another"));
        assert_eq!(trace_id_hex(e).len(), 32);
        assert_ne!(attempt_span_id(e, "r", 1), attempt_span_id(e, "r", 2));
        assert_ne!(attempt_span_id(e, "r", 1), attempt_span_id(e, "s", 1));
        assert_ne!(attempt_span_id(e, "r1", 1), attempt_span_id(e, "r", 11));
        assert_ne!(ingest_span_id(e), attempt_span_id(e, "r", 1));
    }

    #[test]
    fn ratio_sampling_of_entry_traces_keeps_about_the_ratio() {
        // A digest spreads UUIDv7 ids, whose low bits are not uniform.
        let sampler = Sampler::TraceIdRatioBased(0.25);
        let kept = (0..4000)
            .filter(|_| {
                let id = uuid::Uuid::now_v7().to_string();
                matches!(
                    sampler
                        .should_sample(None, trace_id(&id), "", &SpanKind::Internal, &[], &[])
                        .decision,
                    SamplingDecision::RecordAndSample
                )
            })
            .count();
        assert!((800..1200).contains(&kept), "{kept} of 4000 kept at 0.25");
    }

    #[test]
    fn the_endpoint_is_a_base() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
    }
}
