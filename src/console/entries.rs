//! The Entries page (`GET /console/entries`): every stored entry, newest first,
//! filtered by source, route, status, event type, time range and event id, paged by
//! cursor (ids sort by arrival, so a page never repeats or skips an entry however
//! many arrive meanwhile), and a live mode.
//!
//! Live mode is polling, bounded: the page's script asks `GET
//! /console/entries/live` every two seconds for the rows newer than the newest it
//! shows (at most [`LIVE_BATCH`] per poll; beyond that it says to reload), keeps at
//! most a few hundred rows, pauses while the tab is hidden and stops after an hour.
//! The rows come as server-rendered HTML, escaped like every page.
//!
//! It reads through `Store::list`, as `GET /admin/entries` does, with the same
//! filters; time fields take what the API's `since` and `until` take, or a
//! browser's `datetime-local` value, read as UTC.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::format::{self, count};
use super::page::{self, Nav};
use super::{ConsoleError, ConsoleState, Visitor};
use crate::operations::OpError;
use crate::operations::search::{Predicate, PredicateKind, parse_predicates, search_page};
use crate::store::search::SearchPage;
use crate::store::{ListQuery, ListedEntry, Status};

/// Where the page is.
pub const PATH: &str = "/console/entries";
/// Where live mode polls.
const LIVE_PATH: &str = "/console/entries/live";
/// Entries per page.
const PAGE_SIZE: usize = 50;
/// Most rows one live poll brings.
const LIVE_BATCH: usize = 100;

/// The page's filters as the visitor typed them (kept to fill the form again).
#[derive(Debug, Default, Clone)]
struct Filters {
    source: String,
    route: String,
    status: String,
    event_type: String,
    event_id: String,
    /// `15m`, `1h`, `24h`, `7d` or empty (any time).
    window: String,
    from: String,
    to: String,
    /// Payload predicates, one per line, as the admin API writes them
    /// (`match=/data/object/customer:cus_123`; see `operations::search`).
    search: String,
    cursor: String,
    live: bool,
}

/// The longest payload search the form takes.
const SEARCH_MAX: usize = 2048;

/// The time windows the form offers.
const WINDOWS: [(&str, &str, i64); 4] = [
    ("15m", "Last 15 minutes", 15 * 60_000),
    ("1h", "Last hour", 3_600_000),
    ("24h", "Last 24 hours", 86_400_000),
    ("7d", "Last 7 days", 7 * 86_400_000),
];

impl Filters {
    fn parse(raw: Option<&str>) -> Filters {
        let mut f = Filters::default();
        for (k, v) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
            if k == "search" {
                f.search = v.trim().chars().take(SEARCH_MAX).collect();
                continue;
            }
            let v = v.trim().chars().take(512).collect::<String>();
            match k.as_ref() {
                "source" => f.source = v,
                "route" => f.route = v,
                "status" => f.status = v,
                "event_type" => f.event_type = v,
                "event_id" => f.event_id = v,
                "window" => f.window = v,
                "from" => f.from = v,
                "to" => f.to = v,
                "cursor" => f.cursor = v,
                "live" => f.live = v == "1" || v == "on",
                _ => {}
            }
        }
        f
    }

    /// The store query, or what is wrong with a field.
    fn query(&self, now_ms: i64, limit: usize) -> Result<ListQuery, String> {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let status = match self.status.as_str() {
            "" => None,
            s => Some(Status::parse(s).ok_or_else(|| format!("unknown status {s:?}"))?),
        };
        let mut since = self.time("From", &self.from)?;
        if let Some((_, _, span)) = WINDOWS.iter().find(|(k, _, _)| *k == self.window) {
            let start = now_ms - span;
            since = Some(since.map_or(start, |s| s.max(start)));
        }
        Ok(ListQuery {
            source: some(&self.source),
            route: some(&self.route),
            status,
            event_type: some(&self.event_type),
            event_id: some(&self.event_id),
            since,
            until: self.time("To", &self.to)?,
            limit,
            cursor: some(&self.cursor),
        })
    }

    /// The payload predicates of the search field, or what is wrong with one.
    fn predicates(&self) -> Result<Vec<Predicate>, String> {
        let pairs = self
            .search
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|line| {
                let (kind, arg) = line.split_once('=').ok_or_else(|| {
                    format!("{line:?}: write a predicate as match=<target>:<value>, in=…, prefix=…, exists=… or missing=…")
                })?;
                let kind = PredicateKind::from_param(kind.trim()).ok_or_else(|| {
                    format!(
                        "{line:?}: a predicate starts with match=, in=, prefix=, exists= or missing="
                    )
                })?;
                Ok((kind, arg.trim()))
            })
            .collect::<Result<Vec<_>, String>>()?;
        parse_predicates(pairs).map_err(|e| e.to_string())
    }

    /// A time field: what the API takes, or `2026-11-24T10:00` (a browser's
    /// `datetime-local`), as UTC.
    fn time(&self, label: &str, v: &str) -> Result<Option<i64>, String> {
        if v.is_empty() {
            return Ok(None);
        }
        let v = v.replace(' ', "T");
        let full = match v.len() {
            16 if v.as_bytes().get(10) == Some(&b'T') => format!("{v}:00Z"),
            19 if v.as_bytes().get(10) == Some(&b'T') => format!("{v}Z"),
            _ => v,
        };
        crate::admin::parse_time(label, &full)
            .map(Some)
            .map_err(|_| format!("{label}: use a UTC time such as 2026-11-24 10:00"))
    }

    /// The query string of these filters, with `cursor` (none: the first page) and
    /// `live`.
    fn href(&self, path: &str, cursor: Option<&str>, live: bool) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("source", &self.source),
            ("route", &self.route),
            ("status", &self.status),
            ("event_type", &self.event_type),
            ("event_id", &self.event_id),
            ("window", &self.window),
            ("from", &self.from),
            ("to", &self.to),
            ("search", &self.search),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        if let Some(c) = cursor {
            q.append_pair("cursor", c);
        }
        if live {
            q.append_pair("live", "1");
        }
        let q = q.finish();
        if q.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{q}")
        }
    }

    fn any(&self) -> bool {
        [
            &self.source,
            &self.route,
            &self.status,
            &self.event_type,
            &self.event_id,
            &self.window,
            &self.from,
            &self.to,
            &self.search,
        ]
        .iter()
        .any(|v| !v.is_empty())
    }
}

/// `GET /console/entries`.
pub async fn show(
    State(console): State<Arc<ConsoleState>>,
    Extension(visitor): Extension<Visitor>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ConsoleError> {
    let mut filters = Filters::parse(raw.as_deref());
    // Live mode shows what arrives: only from the newest page, and not a payload
    // search (it polls the listing).
    if !filters.cursor.is_empty() || !filters.search.is_empty() {
        filters.live = false;
    }
    let now = console.admin.ops.clock.now_ms();
    let asked = filters
        .query(now, PAGE_SIZE)
        .and_then(|q| Ok((q, filters.predicates()?)));
    let (page, problem) = match asked {
        Ok((q, predicates)) => match search_page(&console.admin.ops, q, predicates).await {
            Ok(page) => (Some(page), None),
            Err(OpError::Store(cause)) => return Err(ConsoleError::Store(cause)),
            Err(other) => (None, Some(other.to_string())),
        },
        Err(why) => (None, Some(why)),
    };
    let chrome = console.chrome(&visitor, Nav::Entries);
    let markup = page::page(
        "Entries",
        &chrome,
        render(&console, &filters, page.as_ref(), problem.as_deref()),
    );
    let status = match problem {
        Some(_) => StatusCode::BAD_REQUEST,
        None => StatusCode::OK,
    };
    Ok((status, page::html(markup)).into_response())
}

/// `GET /console/entries/live?…&after=<id>`: the rows of entries newer than `after`
/// that match the filters, newest first, at most [`LIVE_BATCH`]; a row marked
/// `data-more` says that more arrived than one poll brings.
pub async fn live(
    State(console): State<Arc<ConsoleState>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ConsoleError> {
    let filters = Filters::parse(raw.as_deref());
    let after = form_urlencoded::parse(raw.as_deref().unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "after")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let mut q = filters
        .query(console.admin.ops.clock.now_ms(), LIVE_BATCH)
        .map_err(|_| ConsoleError::BadForm("a filter of the live query"))?;
    q.cursor = None;
    if let Some(ms) = id_ms(&after) {
        q.since = Some(q.since.map_or(ms, |s| s.max(ms)));
    }
    let page = console.admin.ops.store.list(&q).await?;
    let fresh: Vec<&ListedEntry> = page
        .entries
        .iter()
        .filter(|e| after.is_empty() || e.id.as_str() > after.as_str())
        .collect();
    let more = page.next_cursor.is_some() && fresh.len() == page.entries.len();
    Ok(page::html(html! {
        table {
            tbody {
                @for e in &fresh { (row(e)) }
                @if more { tr data-more="1" {} }
            }
        }
    }))
}

/// The unix ms an entry id (UUIDv7) starts with.
fn id_ms(id: &str) -> Option<i64> {
    let hex: String = id.chars().filter(|c| *c != '-').take(12).collect();
    (hex.len() == 12)
        .then(|| i64::from_str_radix(&hex, 16).ok())
        .flatten()
}

fn render(
    console: &ConsoleState,
    f: &Filters,
    page: Option<&SearchPage>,
    problem: Option<&str>,
) -> Markup {
    let sources = console.sources.load();
    let mut routes: Vec<&str> = sources
        .iter()
        .flat_map(|s| s.routes.iter().map(|r| r.name.as_str()))
        .collect();
    routes.sort_unstable();
    routes.dedup();
    let first_page = f.cursor.is_empty();
    html! {
        div.page-head {
            h1 { "Entries" }
            p.muted { "Newest first. Times are UTC." }
        }
        form.card.filters method="get" action=(PATH) aria-label="Filter entries" {
            div.field {
                label for="f-source" { "Source" }
                select #f-source name="source" {
                    option value="" { "All sources" }
                    @for s in sources.iter() {
                        option value=(s.name) selected[s.name == f.source] { (s.name) }
                    }
                }
            }
            div.field {
                label for="f-route" { "Route" }
                select #f-route name="route" {
                    option value="" { "All routes" }
                    @for r in &routes {
                        option value=(r) selected[*r == f.route] { (r) }
                    }
                }
            }
            div.field {
                label for="f-status" { "Status" }
                select #f-status name="status" {
                    option value="" { "Any status" }
                    @for s in [Status::Pending, Status::Delivered, Status::Dead, Status::Discarded, Status::Filtered] {
                        option value=(s.as_str()) selected[s.as_str() == f.status] { (s.as_str()) }
                    }
                }
            }
            div.field {
                label for="f-type" { "Event type" }
                input #f-type name="event_type" type="text" value=(f.event_type) placeholder="e.g. invoice.paid" autocomplete="off";
            }
            div.field {
                label for="f-window" { "Received" }
                select #f-window name="window" {
                    option value="" { "Any time" }
                    @for (k, label, _) in WINDOWS {
                        option value=(k) selected[k == f.window] { (label) }
                    }
                }
            }
            div.field {
                label for="f-from" { "From (UTC)" }
                input #f-from name="from" type="datetime-local" step="1" value=(f.from);
            }
            div.field {
                label for="f-to" { "To (UTC)" }
                input #f-to name="to" type="datetime-local" step="1" value=(f.to);
            }
            div.field.wide {
                label for="f-event-id" { "Event ID" }
                input #f-event-id name="event_id" type="search" value=(f.event_id) placeholder="The provider's event id, exactly" autocomplete="off";
            }
            div.field.wide {
                label for="f-search" { "Payload search" }
                textarea #f-search name="search" rows="2" spellcheck="false" placeholder="match=/data/object/customer:cus_123\nexists=header.x-shopify-topic" { (f.search) }
                p.hint {
                    "One predicate per line, all must hold: "
                    code { "match=" } ", " code { "in=" } ", " code { "prefix=" } " (a JSON pointer or "
                    code { "header.<name>" } ", then " code { ":" } " and the value), "
                    code { "exists=" } ", " code { "missing=" } ". An indexed pointer of the chosen source is a lookup; anything else reads up to 10,000 entries per page."
                }
            }
            div.field.check {
                input #f-live name="live" type="checkbox" value="1" checked[f.live];
                label for="f-live" { "Live" }
            }
            div.actions {
                button.primary type="submit" { "Apply filters" }
                @if f.any() { a.button-link href=(PATH) { "Clear" } }
            }
        }
        @if let Some(why) = problem {
            p.alert role="alert" { (why) }
        }
        @if let Some(page) = page {
            section.card.flush aria-labelledby="entries-heading" {
                div.table-head {
                    h2 #entries-heading { "Entries" span.muted { " · " (count(page.entries.len() as u64)) " on this page" } }
                    @if f.live && first_page {
                        p #live-status.live role="status" { "Live: new entries appear as they arrive." }
                    }
                    @if !f.search.is_empty() {
                        p.muted #search-status role="status" {
                            "Searched " (count(page.scanned as u64)) " entries "
                            @match &page.index {
                                Some(index) => { "by the index " code { (index) } }
                                None => { "by reading them" }
                            }
                            @if let (false, Some(at)) = (page.complete, page.stopped_at) {
                                "; stopped at entries received " (format::time(at)) ": older ones are not searched yet."
                            }
                        }
                    }
                }
                div.table-wrap {
                    table.entries data-live=[(f.live && first_page).then(|| f.href(LIVE_PATH, None, false))] {
                        thead {
                            tr {
                                th scope="col" { "Received" }
                                th scope="col" { "Source" }
                                th scope="col" { "Event type" }
                                th scope="col" { "Event ID" }
                                th scope="col" { "Status" }
                                th.num scope="col" { "Attempts" }
                                th scope="col" { "Last error" }
                            }
                        }
                        tbody {
                            @for e in &page.entries { (row(e)) }
                            @if page.entries.is_empty() {
                                tr.empty {
                                    td colspan="7" {
                                        @if page.next_cursor.is_some() {
                                            "No match among the entries looked through so far: older entries remain."
                                        } @else {
                                            "No entries match these filters."
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                nav.pager aria-label="Pages" {
                    @if !first_page {
                        a href=(f.href(PATH, None, false)) { "← Newest" }
                    }
                    @if let Some(next) = &page.next_cursor {
                        a rel="next" href=(f.href(PATH, Some(next), false)) {
                            @if page.entries.is_empty() { "Search older entries →" } @else { "Older entries →" }
                        }
                    }
                }
            }
        }
    }
}

/// One entry's row; the received time links to its detail page.
/// The badge of an entry reconciliation recovered: what no request of it brought.
pub(super) fn recovered_badge(origin: crate::store::Origin) -> Markup {
    let title = match origin {
        crate::store::Origin::Redelivered => {
            "Recovered: reconciliation found it missing and asked the provider to send it again"
        }
        _ => {
            "Recovered: reconciliation admitted it from the provider's API; no request of it reached hookgate"
        }
    };
    html! { span.badge.recovered title=(title) { "Recovered" } }
}

fn row(e: &ListedEntry) -> Markup {
    html! {
        tr data-id=(e.id) {
            td data-label="Received" {
                a href={ (PATH) "/" (e.id) } {
                    (format::time(e.received_at))
                    span.visually-hidden { " entry " (e.id) }
                }
            }
            td data-label="Source" { (e.source) }
            td.clip data-label="Event type" {
                @match &e.event_type { Some(t) => code { (format::untrusted(t)) }, None => span.muted { "—" } }
            }
            td.clip.mono data-label="Event ID" {
                @match &e.event_id { Some(t) => (format::untrusted(t)), None => span.muted { "—" } }
            }
            td data-label="Status" {
                (format::status(e.status))
                @if e.origin.is_recovered() {
                    " " (recovered_badge(e.origin))
                }
            }
            td.num data-label="Attempts" { (e.attempts) }
            td.clip data-label="Last error" {
                @match &e.last_error { Some(t) => (format::untrusted(t)), None => span.muted { "—" } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_round_trip_through_the_query_string() {
        let f = Filters::parse(Some(
            "source=stripe&status=dead&event_type=a+b&window=1h&cursor=c1&live=1&junk=x",
        ));
        assert_eq!(f.source, "stripe");
        assert_eq!(f.event_type, "a b");
        assert!(f.live);
        let again = Filters::parse(f.href(PATH, Some("c2"), false).split_once('?').map(|x| x.1));
        assert_eq!(again.source, "stripe");
        assert_eq!(again.status, "dead");
        assert_eq!(again.window, "1h");
        assert_eq!(again.cursor, "c2");
        assert!(!again.live);
        let q = f.query(10_000_000, 50).unwrap();
        assert_eq!(q.status, Some(Status::Dead));
        assert_eq!(q.since, Some(10_000_000 - 3_600_000));
        assert_eq!(q.cursor.as_deref(), Some("c1"));
    }

    #[test]
    fn times_are_read_as_utc_and_bad_ones_refused() {
        let f = Filters::parse(Some("from=2023-11-14T22:13&to=2023-11-14+22:13:20"));
        let q = f.query(0, 50).unwrap();
        assert_eq!(q.since, Some(1_699_999_980_000));
        assert_eq!(q.until, Some(1_700_000_000_000));
        assert!(Filters::parse(Some("from=yesterday")).query(0, 50).is_err());
        assert!(Filters::parse(Some("status=gone")).query(0, 50).is_err());
    }

    #[test]
    fn an_id_gives_its_time() {
        assert_eq!(
            id_ms("0193a0f4-1c2d-7abc-8def-0123456789ab"),
            Some(0x0193_a0f4_1c2d)
        );
        assert_eq!(id_ms("nope"), None);
    }
}
