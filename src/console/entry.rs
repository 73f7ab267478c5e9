//! An entry's page (`GET /console/entries/{id}`): what arrived (metadata, headers
//! with credentials redacted as the API redacts them, the body: JSON indented, other
//! text as text, binary as hex), what happened to it (each route's delivery, every
//! attempt as a timeline, the audit trail), what each route with a transform would
//! send now ("What this route receives": the program run on the stored body, as a
//! delivery attempt runs it, nothing sent), and the actions: **Replay** (one route
//! or all) and **Discard** (a note is required).
//!
//! It shows what `GET /admin/entries/{id}` answers ([`crate::operations::entries::entry_detail`]) and acts
//! through the API's own [`crate::operations::entries::replay_entry`] and [`crate::operations::entries::discard_entry`]. An
//! action that is refused (nothing to replay, no note) shows the page again with the
//! reason; one that succeeds redirects back to it (post/redirect/get).

mod json_view;

use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use maud::{Markup, html};

use super::cross_site::FORM_TOKEN_FIELD;
use super::entries::PATH as ENTRIES;
use super::page::{self, Nav};
use super::posted::Posted;
use super::{ConsoleError, ConsoleState, Visitor, format};
use crate::admin::dto::{EntryDetail, Preview, PreviewOutcome};
use crate::operations::OpError;
use crate::store::Status;
pub(crate) use json_view::json_indented;

/// The most of a body the page shows; the rest is one API call away.
const SHOWN_BODY_BYTES: usize = 256 * 1024;

/// What the page says above the entry after an action.
enum Notice {
    Done(String),
    Refused(String),
}

/// `GET /console/entries/{id}`.
pub async fn show(
    State(console): State<Arc<ConsoleState>>,
    Extension(visitor): Extension<Visitor>,
    id: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ConsoleError> {
    let Ok(Path(id)) = id else {
        return Err(ConsoleError::NotFound);
    };
    let notice = form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "done")
        .and_then(|(_, v)| match v.as_ref() {
            "replayed" => Some(Notice::Done(
                "Replay queued: the deliveries are pending again.".into(),
            )),
            "discarded" => Some(Notice::Done(
                "Discarded: those deliveries will never be sent.".into(),
            )),
            _ => None,
        });
    render_page(&console, &visitor, &id, notice, StatusCode::OK).await
}

async fn render_page(
    console: &ConsoleState,
    visitor: &Visitor,
    id: &str,
    notice: Option<Notice>,
    status: StatusCode,
) -> Result<Response, ConsoleError> {
    let detail = match crate::operations::entries::entry_detail(&console.admin.ops, id).await {
        Ok(d) => d,
        Err(OpError::Store(cause)) => return Err(ConsoleError::Store(cause)),
        Err(_) => return Err(ConsoleError::NotFound),
    };
    let previews = previews(console, &detail).await?;
    let token = console.form_token(visitor);
    let chrome = console.chrome(visitor, Nav::Entries);
    let markup = page::page(
        "Entry",
        &chrome,
        render(&detail, &previews, notice.as_ref(), &token),
    );
    Ok((status, page::html(markup)).into_response())
}

/// `POST /console/entries/{id}/replay` and `…/discard`.
pub async fn action(
    State(console): State<Arc<ConsoleState>>,
    path: Result<Path<(String, String)>, PathRejection>,
    Posted { visitor, form }: Posted,
) -> Result<Response, ConsoleError> {
    let Ok(Path((id, action))) = path else {
        return Err(ConsoleError::NotFound);
    };
    let route = form.get("route").filter(|r| !r.is_empty());
    let (done, result) = match action.as_str() {
        "replay" => (
            "replayed",
            crate::operations::entries::replay_entry(
                &console.admin.ops,
                &id,
                route,
                &visitor.actor(),
            )
            .await
            .map(|_| ()),
        ),
        "discard" => (
            "discarded",
            crate::operations::entries::discard_entry(
                &console.admin.ops,
                &id,
                route,
                &visitor.actor(),
                form.get("note").unwrap_or_default(),
            )
            .await
            .map(|_| ()),
        ),
        _ => return Err(ConsoleError::NotFound),
    };
    match result {
        Ok(()) => Ok(Redirect::to(&format!("{ENTRIES}/{id}?done={done}")).into_response()),
        Err(OpError::NoSuchEntry(_)) => Err(ConsoleError::NotFound),
        Err(OpError::Store(cause)) => Err(ConsoleError::Store(cause)),
        Err(OpError::Invalid(why)) => {
            let why = match form.get("note").unwrap_or_default().trim().is_empty() {
                true => {
                    "A note is required to discard: say why these deliveries will never be sent."
                        .to_string()
                }
                false => why,
            };
            let refused = Some(Notice::Refused(why));
            render_page(&console, &visitor, &id, refused, StatusCode::BAD_REQUEST).await
        }
        // Nothing to replay or discard (already done, or the wrong route): say so.
        Err(other) => {
            let refused = Some(Notice::Refused(other.to_string()));
            render_page(&console, &visitor, &id, refused, StatusCode::CONFLICT).await
        }
    }
}

/// How long the entry page waits for a route's preview: a transform still running
/// then (a slow or endless program) is said to be, and the page answers.
const PREVIEW_WAIT: Duration = Duration::from_secs(2);

/// What each of the entry's routes with a transform would send now; a route whose
/// transform cannot run now (no worker), or is still running after
/// [`PREVIEW_WAIT`], says so instead. The routes' previews run at once, each in its
/// route's share of the workers: one route's slow program delays no other's.
async fn previews(
    console: &ConsoleState,
    d: &EntryDetail,
) -> Result<Vec<Result<Preview, String>>, ConsoleError> {
    let ops = &console.admin.ops;
    let Some(transforms) = ops.transforms() else {
        return Ok(Vec::new());
    };
    let runs = d
        .deliveries
        .iter()
        .filter(|x| transforms.has(&d.summary.source, &x.route))
        .map(|x| async move {
            let preview = crate::operations::preview::preview(ops, &d.summary.id, Some(&x.route));
            (&x.route, tokio::time::timeout(PREVIEW_WAIT, preview).await)
        });
    let mut out = Vec::new();
    for (route, preview) in futures_util::future::join_all(runs).await {
        match preview {
            Ok(Ok(p)) => out.push(Ok(p)),
            Ok(Err(OpError::Store(cause))) => return Err(ConsoleError::Store(cause)),
            Ok(Err(other)) => out.push(Err(format!("route {route}: {other}"))),
            Err(_) => out.push(Err(format!(
                "route {route}: its transform is still running after {} s; reload the page to see what it gives",
                PREVIEW_WAIT.as_secs()
            ))),
        }
    }
    Ok(out)
}

fn render(
    d: &EntryDetail,
    previews: &[Result<Preview, String>],
    notice: Option<&Notice>,
    token: &str,
) -> Markup {
    let s = &d.summary;
    let action = format!("{ENTRIES}/{}", s.id);
    let replayable = d.deliveries.iter().any(|x| {
        matches!(
            x.status,
            Status::Dead | Status::Discarded | Status::Delivered | Status::Filtered
        )
    });
    let discardable = d
        .deliveries
        .iter()
        .any(|x| matches!(x.status, Status::Pending | Status::Dead));
    html! {
        div.page-head {
            div {
                p.eyebrow { a href=(ENTRIES) { "Entries" } " / " (s.source) }
                h1 { "Entry " (format::status(s.status)) }
            }
        }
        @match notice {
            Some(Notice::Done(text)) => p.notice role="status" { (text) },
            Some(Notice::Refused(text)) => p.alert role="alert" { (text) },
            None => {},
        }
        div.detail-grid {
            section.card aria-labelledby="meta-heading" {
                h2 #meta-heading { "What arrived" }
                dl.meta {
                    div {
                        dt { "Entry ID" }
                        dd { code #entry-id { (s.id) } (copy("entry-id", "Copy entry ID")) }
                    }
                    div {
                        dt { "Event ID" }
                        dd {
                            @match &s.event_id {
                                Some(e) => { code #event-id { (format::untrusted(e)) } (copy("event-id", "Copy event ID")) },
                                None => span.muted { "None" },
                            }
                        }
                    }
                    div { dt { "Source" } dd { (s.source) } }
                    div {
                        dt { "Event type" }
                        dd { @match &s.event_type { Some(t) => code { (format::untrusted(t)) }, None => span.muted { "None" } } }
                    }
                    div { dt { "Received" } dd { (format::rfc3339(&s.received_at)) } }
                    div {
                        dt { "Origin" }
                        dd {
                            @match s.origin {
                                crate::store::Origin::Received => "Received: a request to its ingest URL",
                                crate::store::Origin::Reconciled => {
                                    (super::entries::recovered_badge(s.origin))
                                    " admitted from the provider's API (no signature: fetched over TLS with the API's credential)"
                                }
                                crate::store::Origin::Redelivered => {
                                    (super::entries::recovered_badge(s.origin))
                                    " redelivered by the provider at reconciliation's request"
                                }
                            }
                        }
                    }
                    div { dt { "Attempts" } dd { (s.attempts) } }
                    @if let Some(t) = &d.trace_id {
                        div { dt { "Trace ID" } dd { code #trace-id { (t) } (copy("trace-id", "Copy trace ID")) } }
                    }
                }
            }
            section.card.actions-card aria-labelledby="actions-heading" {
                h2 #actions-heading { "Actions" }
                form.action-form method="post" action={ (action) "/replay" } {
                    input type="hidden" name=(FORM_TOKEN_FIELD) value=(token);
                    label for="replay-route" { "Replay" }
                    div.row {
                        (route_select("replay-route", d, "Every dead or discarded delivery"))
                        button.primary type="submit" disabled[!replayable] { "Replay" }
                    }
                }
                form.action-form method="post" action={ (action) "/discard" } {
                    input type="hidden" name=(FORM_TOKEN_FIELD) value=(token);
                    label for="discard-route" { "Discard" }
                    (route_select("discard-route", d, "Every pending or dead delivery"))
                    label for="discard-note" { "Note " span.muted { "(required: why it will never be delivered)" } }
                    textarea #discard-note name="note" rows="2" maxlength=(crate::operations::entries::MAX_NOTE_CHARS) {}
                    button.danger type="submit" disabled[!discardable] { "Discard" }
                }
            }
        }
        section.card.flush aria-labelledby="deliveries-heading" {
            div.table-head { h2 #deliveries-heading { "Deliveries" } }
            @if d.deliveries.is_empty() {
                p.pad.muted { "No route's filter selected this entry: it is stored and never delivered." }
            } @else {
                div.table-wrap {
                    table.deliveries {
                        thead {
                            tr {
                                th scope="col" { "Route" }
                                th scope="col" { "Status" }
                                th.num scope="col" { "Attempts" }
                                th scope="col" { "Next attempt" }
                                th scope="col" { "Last error" }
                                th scope="col" { "Ordering key" }
                            }
                        }
                        tbody {
                            @for x in &d.deliveries {
                                tr {
                                    th scope="row" { (x.route) }
                                    td data-label="Status" { (format::status(x.status)) }
                                    td.num data-label="Attempts" { (x.attempts) }
                                    td data-label="Next attempt" {
                                        @match &x.next_attempt_at { Some(t) => (format::rfc3339(t)), None => span.muted { "—" } }
                                    }
                                    td.clip data-label="Last error" {
                                        @if let Some(k) = &x.last_failure {
                                            span.badge.failure { (k) } " "
                                        }
                                        @match &x.last_error { Some(e) => (format::untrusted(e)), None => span.muted { "—" } }
                                    }
                                    td data-label="Ordering key" {
                                        @match &x.order {
                                            Some(o) => {
                                                code { (o.key) }
                                                @if o.on_dead == "block" && x.status == Status::Dead {
                                                    " " span.badge.status-dead title="A dead delivery holds its key's line until it is replayed or discarded" { "Blocks its key" }
                                                }
                                            },
                                            None => span.muted { "—" },
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        section.card aria-labelledby="attempts-heading" {
            h2 #attempts-heading { "Attempts" }
            @if d.attempt_log.is_empty() {
                p.muted { "No attempt yet." }
            } @else {
                ol.timeline {
                    @for a in &d.attempt_log {
                        // Failed: a kind was recorded (or, for an attempt recorded before
                        // kinds were, an error or a status outside 2xx).
                        @let ok = a.failure.is_none() && a.error.is_none() && (a.answer.is_some() || a.status_code.is_some_and(|c| (200..300).contains(&c)));
                        li class={ "event " (if ok { "ok" } else { "failed" }) } {
                            span.when { (format::rfc3339(&a.at)) }
                            span.what {
                                strong { (a.route) " #" (a.n) }
                                " "
                                @if let Some(k) = &a.failure {
                                    span.badge.failure { (k) } " "
                                }
                                @match (a.status_code, &a.error) {
                                    (_, Some(e)) => span.result { (e) },
                                    (Some(c), None) => span.result { "HTTP " (c) },
                                    (None, None) => span.result { (a.answer.as_deref().unwrap_or("no answer")) },
                                }
                            }
                            span.latency { (a.latency_ms) " ms" }
                        }
                    }
                }
            }
        }
        section.card aria-labelledby="audit-heading" {
            h2 #audit-heading { "Audit trail" }
            @if d.audit.is_empty() {
                p.muted { "No operator action yet." }
            } @else {
                ol.timeline.audit {
                    @for a in &d.audit {
                        li.event {
                            span.when { (format::rfc3339(&a.at)) }
                            span.what {
                                strong { (a.action) }
                                @if let Some(r) = &a.route { " · route " code { (r) } }
                                " by " (format::untrusted(&a.actor))
                                @if let Some(n) = &a.note { q.note { (format::untrusted(n)) } }
                            }
                        }
                    }
                }
            }
        }
        section.card aria-labelledby="headers-heading" {
            h2 #headers-heading { "Headers" }
            div.table-wrap {
                table.headers {
                    tbody {
                        @for h in &d.headers {
                            tr { th scope="row" { (format::untrusted(&h.name)) } td.wrap { (format::untrusted(&h.value)) } }
                        }
                    }
                }
            }
        }
        (body_section(d))
        @if !previews.is_empty() {
            (receives_section(previews))
        }
    }
}

/// The body: indented when it is JSON, as text when it is other text, as hex when it
/// is binary; at most [`SHOWN_BODY_BYTES`] of it. The Copy button copies it whole,
/// as received (base64 for a binary body).
fn body_section(d: &EntryDetail) -> Markup {
    let (kind, shown, cut, len) = match d.body_encoding.as_str() {
        // Indented while it is read, never more than the shown size of it.
        "utf8" => match json_indented(&d.body, SHOWN_BODY_BYTES) {
            Some(pretty) => ("JSON", pretty.text, pretty.cut, d.body.len()),
            None => (
                "Text",
                truncate(&d.body, SHOWN_BODY_BYTES),
                d.body.len() > SHOWN_BODY_BYTES,
                d.body.len(),
            ),
        },
        _ => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&d.body)
                .unwrap_or_default();
            // Hex takes four characters per byte on the page.
            let shown = &bytes[..bytes.len().min(SHOWN_BODY_BYTES / 4)];
            (
                "Binary, as hex",
                hex_dump(shown),
                shown.len() < bytes.len(),
                bytes.len(),
            )
        }
    };
    html! {
        section.card aria-labelledby="body-heading" {
            div.section-head {
                h2 #body-heading { "Body" span.muted { " · " (kind) ", " (format::count(len as u64)) " bytes" } }
                (copy("body-raw", "Copy body"))
            }
            @if cut {
                p.muted { "The body is long: its beginning is shown. " code { "GET /admin/entries/" (d.summary.id) } " answers it whole." }
            }
            pre.body tabindex="0" aria-label="Body" { code { (format::untrusted(&shown)) } }
            textarea #body-raw.visually-hidden readonly tabindex="-1" aria-hidden="true" { (d.body) }
        }
    }
}

/// "What this route receives": per route with a transform, what it would send now.
fn receives_section(previews: &[Result<Preview, String>]) -> Markup {
    html! {
        section.card aria-labelledby="receives-heading" {
            h2 #receives-heading { "What this route receives" }
            p.muted { "Each route's transform, run now on the stored body as a delivery attempt runs it; nothing is sent." }
            @for p in previews {
                @match p {
                    Err(why) => p.alert role="alert" { (why) },
                    Ok(p) => {
                        div.receives data-route=(p.route) {
                            h3 {
                                "Route " code { (p.route) } " "
                                @match p.outcome {
                                    PreviewOutcome::Send => span.badge.status-delivered { "Sends" },
                                    PreviewOutcome::Skip => span.badge.status-filtered { "Skips: no output" },
                                    PreviewOutcome::Failed => span.badge.status-dead { "Fails" },
                                }
                            }
                            @if let Some(ct) = &p.content_type {
                                p { "Content type " code { (format::untrusted(ct)) } }
                            }
                            @if !p.headers.is_empty() {
                                table.headers {
                                    tbody {
                                        @for h in &p.headers {
                                            tr { th scope="row" { (format::untrusted(&h.name)) } td.wrap { (format::untrusted(&h.value)) } }
                                        }
                                    }
                                }
                            }
                            @if let Some(body) = &p.body {
                                @let shown = json_indented(body, SHOWN_BODY_BYTES).map(|s| s.text).unwrap_or_else(|| truncate(body, SHOWN_BODY_BYTES));
                                pre.body tabindex="0" aria-label={ "What route " (p.route) " receives" } { code { (format::untrusted(&shown)) } }
                            }
                            @if p.body_base64.is_some() {
                                p.muted { "A binary body: " code { "POST /admin/entries/…/preview" } " answers it in base64." }
                            }
                            @if let Some(e) = &p.error {
                                p.alert { (format::untrusted(e)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A Copy button for the text of element `target`; hidden until the page's script
/// finds a clipboard to copy to.
fn copy(target: &str, label: &str) -> Markup {
    html! {
        button.copy type="button" data-copy=(target) hidden { (label) }
    }
}

fn route_select(id: &str, d: &EntryDetail, all: &str) -> Markup {
    html! {
        select id=(id) name="route" {
            option value="" { (all) }
            @for x in &d.deliveries {
                option value=(x.route) { "Route " (x.route) " (" (x.status.as_str()) ")" }
            }
        }
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// `bytes` as lines of 16: offset, hex, and the printable ASCII.
fn hex_dump(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 4 + bytes.len() / 16 * 12);
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let _ = write!(out, "{:08x}  ", i * 16);
        for j in 0..16 {
            match chunk.get(j) {
                Some(b) => {
                    let _ = write!(out, "{b:02x} ");
                }
                None => out.push_str("   "),
            }
            if j == 7 {
                out.push(' ');
            }
        }
        out.push(' ');
        out.extend(chunk.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '.'
            }
        }));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_reads_as_hex() {
        let dump = hex_dump(b"\x00\x01hello, world!\xff\xfe\x7f");
        assert!(
            dump.starts_with("00000000  00 01 68 65 6c 6c 6f 2c  20 77 6f 72 6c 64 21 ff"),
            "{dump}"
        );
        assert!(dump.contains("..hello, world!."), "{dump}");
        assert!(dump.contains("\n00000010  fe 7f"), "{dump}");
    }

    fn detail(encoding: &str, body: &str) -> EntryDetail {
        use crate::admin::dto::{EntrySummary, Header};
        EntryDetail {
            summary: EntrySummary {
                id: "01a2".into(),
                source: "s".into(),
                event_id: Some("<b>evt</b>".into()),
                event_type: None,
                received_at: "2026-11-24T10:00:00.000Z".into(),
                status: Status::Dead,
                attempts: 1,
                next_attempt_at: None,
                last_error: None,
                origin: crate::store::Origin::Received,
            },
            headers: vec![Header {
                name: "x-note".into(),
                value: "</textarea><script>x()</script>".into(),
            }],
            body_encoding: encoding.into(),
            body: body.into(),
            deliveries: Vec::new(),
            attempt_log: Vec::new(),
            audit: Vec::new(),
            trace_id: None,
        }
    }

    #[test]
    fn a_binary_body_shows_as_hex_and_text_is_escaped() {
        let html = render(&detail("base64", "AAFoaf8="), &[], None, "t").into_string();
        assert!(html.contains("Binary, as hex, 5 bytes"), "{html}");
        assert!(html.contains("00000000  00 01 68 69 ff"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("<b>evt"), "{html}");
        assert!(html.contains("&lt;/textarea&gt;&lt;script&gt;"), "{html}");
        let html = render(&detail("utf8", "{\"a\":[1]}"), &[], None, "t").into_string();
        assert!(html.contains("JSON, 9 bytes"), "{html}");
    }

    #[test]
    fn long_text_is_cut_on_a_character() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
