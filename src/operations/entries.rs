//! One entry: everything about it (its headers with credentials and signatures
//! redacted, its body, deliveries, attempts and audit trail), its replay (with
//! where its ordered deliveries wait) and its discard (with a note).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::dto::{self, EntryDetail, EntrySummary, TransitionResult};
use super::{OpError, Operations};
use crate::store::{Actor, ListedEntry, Status, Transition};
use crate::telemetry::traces::ActionSpan;

/// Everything about entry `id`, as `GET /admin/entries/{id}` answers it: its
/// headers with credentials and signatures redacted, its body, its deliveries, every
/// attempt and the audit trail.
pub async fn entry_detail(ops: &Operations, id: &str) -> Result<EntryDetail, OpError> {
    let entry = ops
        .store
        .get(id)
        .await?
        .ok_or_else(|| OpError::NoSuchEntry(id.to_string()))?;
    let attempts = ops.store.attempts(id).await?;
    let audit = ops.store.audit(id).await?;
    let sig_header = ops
        .source(&entry.source)
        .map(|s| s.signature_header.clone())
        .unwrap_or_default();
    let catalog = ops.catalog.load();
    let headers = entry
        .headers
        .iter()
        .map(|h| dto::Header {
            name: h.name.clone(),
            value: if is_sensitive(&h.name, &sig_header)
                || catalog
                    .signature_headers
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(&h.name))
            {
                "[redacted]".to_string()
            } else {
                String::from_utf8_lossy(&h.value).into_owned()
            },
        })
        .collect();
    let (body_encoding, body) = match std::str::from_utf8(&entry.body) {
        Ok(text) => ("utf8".to_string(), text.to_string()),
        Err(_) => ("base64".to_string(), B64.encode(&entry.body)),
    };
    Ok(EntryDetail {
        summary: summary(&entry.listed()),
        headers,
        body_encoding,
        body,
        deliveries: entry
            .deliveries
            .iter()
            .map(|d| dto::Delivery {
                route: d.route.clone(),
                status: d.status,
                attempts: d.attempts,
                next_attempt_at: match d.status {
                    Status::Pending => d.next_attempt_at.map(rfc3339),
                    _ => None,
                },
                last_error: d.last_error.clone(),
                last_failure: d.last_failure.map(|f| f.name()),
                order: d.order.as_ref().map(|o| dto::DeliveryOrder {
                    key: o.key.clone(),
                    on_dead: o.on_dead().into(),
                }),
            })
            .collect(),
        attempt_log: attempts
            .into_iter()
            .map(|a| dto::Attempt {
                route: a.route,
                n: a.n,
                at: rfc3339(a.at),
                status_code: a.status_code,
                failure: a.failure.map(|f| f.name()),
                error: a.error,
                latency_ms: a.latency_ms,
                answer: a.answer,
            })
            .collect(),
        audit: audit
            .into_iter()
            .map(|a| dto::AuditEvent {
                at: rfc3339(a.at),
                action: a.action,
                actor: a.actor,
                note: a.note,
                route: a.route,
                session: a.session,
                client: a.client,
            })
            .collect(),
        trace_id: ops
            .traces
            .is_on()
            .then(|| crate::telemetry::traces::trace_id_hex(id)),
    })
}

/// Replay entry `id` now, through `route` or every delivery that qualifies (see
/// `Store::replay`), as `by`; the answer says where its ordered deliveries wait.
pub async fn replay_entry(
    ops: &Operations,
    id: &str,
    route: Option<&str>,
    by: &Actor,
) -> Result<TransitionResult, OpError> {
    let started = std::time::SystemTime::now();
    let now = ops.clock.now_ms();
    let lines = lines_before_replay(ops, id, route).await?;
    let done = ops.store.replay(id, route, now, by, now).await?;
    ops.traces
        .action(action_span("replay", id, route, by, started, done));
    match done {
        Transition::Done => {
            tracing::info!(entry_id = %id, route = route.unwrap_or(""), "replay queued");
            Ok(TransitionResult {
                id: id.to_string(),
                status: Status::Pending,
                lines: line_places(id, lines),
            })
        }
        Transition::NotFound => Err(OpError::NoSuchEntry(id.to_string())),
        Transition::NoSuchRoute => Err(OpError::NoDelivery {
            id: id.to_string(),
            route: route.unwrap_or_default().to_string(),
        }),
        Transition::Conflict(status) => Err(OpError::NotReplayable {
            id: id.to_string(),
            route: route.map(str::to_string),
            status,
        }),
    }
}

/// The lines a replay of entry `id` (through `route`, or every delivery that
/// qualifies) puts its ordered deliveries back into: per such delivery, its route,
/// its key and the key's line as it is before the replay. Read before, not after:
/// once replayed, a delivery at the head of its line may be sent and gone before
/// the answer is written.
async fn lines_before_replay(
    ops: &Operations,
    id: &str,
    route: Option<&str>,
) -> Result<Vec<(String, String, Vec<String>)>, OpError> {
    let Some(entry) = ops.store.get(id).await? else {
        return Ok(Vec::new());
    };
    // The deliveries `Store::replay` queues: the named route's (unless pending);
    // otherwise every dead or discarded one, or, when none is and all were
    // delivered, all of them.
    let ended = |s: Status| matches!(s, Status::Dead | Status::Discarded);
    let resend = !entry.deliveries.iter().any(|d| ended(d.status))
        && entry
            .deliveries
            .iter()
            .all(|d| d.status == Status::Delivered);
    let mut lines = Vec::new();
    for d in &entry.deliveries {
        let queued = match route {
            Some(r) => r == d.route && d.status != Status::Pending,
            None => ended(d.status) || resend,
        };
        if let (true, Some(order)) = (queued, &d.order) {
            let line = ops
                .store
                .order_line(&entry.source, &d.route, &order.key)
                .await?;
            lines.push((d.route.clone(), order.key.clone(), line));
        }
    }
    Ok(lines)
}

/// Where entry `id` waits in each of `lines` (as read before its replay): after the
/// deliveries of its key that arrived before it (or are in flight), before those
/// that arrived after it.
fn line_places(id: &str, lines: Vec<(String, String, Vec<String>)>) -> Vec<dto::LinePlace> {
    lines
        .into_iter()
        .map(|(route, key, line)| {
            let count = |f: &dyn Fn(&str) -> bool| {
                u64::try_from(line.iter().filter(|x| f(x.as_str())).count()).unwrap_or(u64::MAX)
            };
            dto::LinePlace {
                route,
                key,
                ahead: count(&|x| x < id),
                behind: count(&|x| x > id),
            }
        })
        .collect()
}

/// The span of an operator's `action` on entry `id` that came to `done`.
pub(super) fn action_span<'a>(
    action: &'static str,
    id: &'a str,
    route: Option<&'a str>,
    by: &'a Actor,
    start: std::time::SystemTime,
    done: Transition,
) -> ActionSpan<'a> {
    ActionSpan {
        action,
        entry_id: id,
        route,
        actor: &by.name,
        start,
        ok: done == Transition::Done,
        outcome: match done {
            Transition::Done => "done",
            Transition::NotFound => "no such entry",
            Transition::NoSuchRoute => "no such delivery",
            Transition::Conflict(_) => "conflict",
        },
    }
}

/// Longest note a discard keeps, in characters.
pub const MAX_NOTE_CHARS: usize = 2000;

/// Whitespace around a note, and a note of nothing else: Unicode's, and the byte
/// order mark, so that what the OpenAPI document's pattern (`[^\s\u0085]`, in
/// ECMAScript's regex dialect) calls blank is exactly what is refused here.
fn blank(c: char) -> bool {
    c.is_whitespace() || c == '\u{feff}'
}

/// A discard's note, trimmed of blanks (Unicode whitespace and U+FEFF): refused
/// when nothing is left or it is longer than [`MAX_NOTE_CHARS`].
pub(crate) fn checked_note(note: &str) -> Result<&str, OpError> {
    let note = note.trim_matches(blank);
    if note.is_empty() {
        return Err(OpError::Invalid("note must not be empty".into()));
    }
    if note.chars().count() > MAX_NOTE_CHARS {
        return Err(OpError::Invalid(format!(
            "note is longer than {MAX_NOTE_CHARS} characters"
        )));
    }
    Ok(note)
}

/// Discard entry `id`'s delivery through `route`, or every pending or dead one, as
/// `actor`, with `note` (required: why it will never be delivered).
pub async fn discard_entry(
    ops: &Operations,
    id: &str,
    route: Option<&str>,
    by: &Actor,
    note: &str,
) -> Result<TransitionResult, OpError> {
    let note = checked_note(note)?;
    let started = std::time::SystemTime::now();
    let done = ops
        .store
        .discard(id, route, by, note, ops.clock.now_ms())
        .await?;
    ops.traces
        .action(action_span("discard", id, route, by, started, done));
    match done {
        Transition::Done => {
            tracing::info!(entry_id = %id, route = route.unwrap_or(""), "entry discarded");
            // The entry's status after the discard (other routes may still be pending
            // or delivered).
            let status = ops
                .store
                .get(id)
                .await?
                .map(|e| e.status)
                .unwrap_or(Status::Discarded);
            Ok(TransitionResult {
                id: id.to_string(),
                status,
                lines: Vec::new(),
            })
        }
        Transition::NotFound => Err(OpError::NoSuchEntry(id.to_string())),
        Transition::NoSuchRoute => Err(OpError::NoDelivery {
            id: id.to_string(),
            route: route.unwrap_or_default().to_string(),
        }),
        Transition::Conflict(status) => Err(OpError::NotDiscardable {
            id: id.to_string(),
            route: route.map(str::to_string),
            status,
        }),
    }
}

/// Unix milliseconds as RFC 3339 (UTC, with milliseconds).
pub fn rfc3339(ms: i64) -> String {
    let t =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

pub fn summary(e: &ListedEntry) -> EntrySummary {
    EntrySummary {
        id: e.id.clone(),
        source: e.source.clone(),
        event_id: e.event_id.clone(),
        event_type: e.event_type.clone(),
        received_at: rfc3339(e.received_at),
        status: e.status,
        attempts: e.attempts,
        next_attempt_at: match e.status {
            Status::Pending => e.next_attempt_at.map(rfc3339),
            _ => None,
        },
        last_error: e.last_error.clone(),
        origin: e.origin,
    }
}

/// Header names whose values are credentials or signatures.
pub(crate) fn is_sensitive(name: &str, signature_header: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == signature_header
        || matches!(
            n.as_str(),
            "authorization" | "proxy-authorization" | "cookie" | "set-cookie" | "x-api-key"
        )
        || [
            "signature",
            "token",
            "secret",
            "hmac",
            "password",
            "api-key",
        ]
        .iter()
        .any(|s| n.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replayed_delivery_waits_after_earlier_arrivals_and_before_later_ones() {
        let line = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let places = line_places(
            "b",
            vec![
                ("r".into(), "k".into(), line(&["a", "b", "c", "d"])),
                ("s".into(), "k2".into(), line(&["c"])),
            ],
        );
        assert_eq!(
            (places[0].ahead, places[0].behind),
            (1, 2),
            "its own place is not counted"
        );
        assert_eq!((places[1].ahead, places[1].behind), (0, 1));
    }

    #[test]
    fn blank_is_what_the_documented_pattern_calls_blank() {
        for c in [
            ' ', '\t', '\n', '\u{85}', '\u{a0}', '\u{2028}', '\u{3000}', '\u{feff}',
        ] {
            assert!(blank(c), "{c:?}");
        }
        for c in ['a', '.', '\u{200b}', '\u{e9}'] {
            assert!(!blank(c), "{c:?}");
        }
    }

    #[test]
    fn sensitive_headers_are_recognised() {
        for h in [
            "stripe-signature",
            "X-Hub-Signature-256",
            "x-shopify-hmac-sha256",
            "authorization",
            "x-gitlab-token",
            "webhook-signature",
            "cookie",
        ] {
            assert!(is_sensitive(h, "stripe-signature"), "{h}");
        }
        for h in ["content-type", "user-agent", "x-github-event", "webhook-id"] {
            assert!(!is_sensitive(h, "x-hub-signature-256"), "{h}");
        }
    }
}
