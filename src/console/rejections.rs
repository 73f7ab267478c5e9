//! The Rejections page (`GET /console/rejections`): "the provider says it sent it,
//! and there is no entry". Every request ingest refused in the last 24 hours,
//! grouped by source and reason with a count and what usually causes it, then the
//! newest refused requests themselves (time, source, reason, status, client, size,
//! digest, and the headers an entry would keep; never a body here).
//!
//! Above them, a notice per configured source that refuses most of what reaches
//! it now ([`refusing_notice`], which the Sources page shows too): the reason, since
//! when, what it likely means.
//!
//! It shows what `GET /admin/rejections/groups` and `GET /admin/rejections` answer
//! (`crate::operations::rejections`). Everything in a row came from the refused
//! request, a forgery's included: every value is escaped and isolated (`bdi`).

use std::sync::Arc;

use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use maud::{Markup, html};

use super::format::{self, count, rfc3339_seconds};
use super::page::{self, Nav};
use super::{ConsoleError, ConsoleState, Visitor};
use crate::admin::dto::{RefusingSource, RejectionGroups, RejectionList};
use crate::operations::OpError;
use crate::operations::rejections::{self, DEFAULT_WINDOW_MS};
use crate::store::RejectionQuery;

/// Where the page is.
pub const PATH: &str = "/console/rejections";
/// How many refused requests the page lists.
const ROWS: usize = 50;

/// `GET /console/rejections[?reason=…&source=…]`.
pub async fn show(
    State(console): State<Arc<ConsoleState>>,
    Extension(visitor): Extension<Visitor>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ConsoleError> {
    let q: Vec<(String, String)> = form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .into_owned()
        .collect();
    let field = |name: &str| {
        q.iter()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.chars().take(100).collect::<String>())
    };
    let ops = &console.admin.ops;
    let since = ops.clock.now_ms() - DEFAULT_WINDOW_MS;
    let groups = rejections::groups(ops, since).await.map_err(store)?;
    let query = RejectionQuery {
        source: field("source"),
        reason: field("reason"),
        limit: ROWS,
        ..RejectionQuery::default()
    };
    let rows = rejections::list(ops, &query).await.map_err(store)?;
    let chrome = console.chrome(&visitor, Nav::Rejections);
    Ok(page::html(page::page(
        "Rejections",
        &chrome,
        render(&groups, &rows, &query),
    )))
}

fn store(e: OpError) -> ConsoleError {
    match e {
        OpError::Store(cause) => ConsoleError::Store(cause),
        _ => ConsoleError::NotFound,
    }
}

fn filter_link(source: &str, reason: &str) -> String {
    let mut to = form_urlencoded::Serializer::new(String::new());
    to.append_pair("source", source);
    to.append_pair("reason", reason);
    format!("{PATH}?{}", to.finish())
}

/// The notice of a source that refuses most of what reaches it: how many of how
/// many, the reason (a link to its rows), since when and what it likely means.
pub fn refusing_notice(r: &RefusingSource) -> Markup {
    html! {
        div.alert.refusing role="alert" data-source=(r.source) {
            strong { (r.source) " refuses most requests" }
            ": " (count(r.refused)) " of " (count(r.total)) " in the last 10 minutes, mostly "
            a href=(filter_link(&r.source, &r.reason)) { code { (r.reason) } }
            ", since " (rfc3339_seconds(&r.since))
            @if !r.since_exact { " at least (the log keeps only the newest)" }
            ". "
            span.likely { (r.likely) }
        }
    }
}

fn render(g: &RejectionGroups, rows: &RejectionList, q: &RejectionQuery) -> Markup {
    html! {
        div.page-head {
            h1 { "Rejections" }
            p.muted {
                "Requests ingest refused since " (rfc3339_seconds(&g.since))
                ", by source and reason, the group refused last first. "
                "A gateway keeps a few of each group per second and counts the rest. Times are UTC."
            }
        }
        @for r in &g.refusing {
            (refusing_notice(r))
        }
        @if g.groups.is_empty() {
            section.card {
                h2 { "No refused requests" }
                p.muted { "A request with a bad or missing signature, a stale timestamp, a body too large, or to a source that does not exist shows here." }
            }
        } @else {
            section.card.flush aria-labelledby="rejection-groups" {
                div.table-head { h2 #rejection-groups { "By reason" } }
                div.table-wrap {
                    table.groups.rejection-groups {
                        thead {
                            tr {
                                th scope="col" { "Source" }
                                th scope="col" { "Reason" }
                                th.num scope="col" { "Count" }
                                th scope="col" { "Last" }
                                th scope="col" { "What usually causes it" }
                            }
                        }
                        tbody {
                            @for x in &g.groups {
                                tr {
                                    th scope="row" {
                                        @if x.source == crate::store::rejection::UNKNOWN_SOURCES {
                                            "unknown sources"
                                        } @else {
                                            (x.source)
                                        }
                                    }
                                    td data-label="Reason" {
                                        a.badge.status-dead href=(filter_link(&x.source, &x.reason)) { (x.reason) }
                                    }
                                    td.num.count data-label="Count" { (count(x.count)) }
                                    td data-label="Last" { (rfc3339_seconds(&x.last_at)) }
                                    td.hint data-label="What usually causes it" { (x.hint) }
                                }
                            }
                        }
                    }
                }
            }
        }
        section.card.flush aria-labelledby="rejection-rows" {
            div.table-head {
                h2 #rejection-rows {
                    "Newest refused requests"
                    @if let Some(r) = &q.reason { " · " (r) }
                    @if let Some(s) = &q.source { " · " (format::untrusted(s)) }
                }
                @if q.reason.is_some() || q.source.is_some() {
                    a href=(PATH) { "Show all" }
                }
            }
            @if rows.rejections.is_empty() {
                p.muted { "None kept." }
            } @else {
                div.table-wrap {
                    table.rejections {
                        thead {
                            tr {
                                th scope="col" { "Time" }
                                th scope="col" { "Source" }
                                th scope="col" { "Reason" }
                                th.num scope="col" { "Status" }
                                th scope="col" { "Client" }
                                th.num scope="col" { "Size" }
                                th scope="col" { "Body digest" }
                                th scope="col" { "Headers" }
                            }
                        }
                        tbody {
                            @for r in &rows.rejections {
                                tr {
                                    td data-label="Time" { (rfc3339_seconds(&r.at)) }
                                    td.source-name data-label="Source" {
                                        (format::untrusted(&r.source))
                                        @if !r.known { " " span.muted { "(not configured)" } }
                                    }
                                    td data-label="Reason" { (r.reason) }
                                    td.num data-label="Status" { (r.status) }
                                    td data-label="Client" { (r.client.as_deref().unwrap_or("")) }
                                    td.num data-label="Size" { @if let Some(n) = r.size { (count(n)) } }
                                    td data-label="Body digest" {
                                        @if let Some(d) = &r.digest { code { (d.chars().take(19).collect::<String>()) "…" } }
                                    }
                                    td.headers data-label="Headers" {
                                        details {
                                            summary { (r.headers.len()) " headers" }
                                            dl {
                                                @for h in &r.headers {
                                                    dt { code { (format::untrusted(&h.name)) } }
                                                    dd { code { (format::untrusted(&h.value)) } }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
