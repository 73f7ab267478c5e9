//! The Dead letters page (`GET /console/dead-letters`), the triage view: each
//! route's dead deliveries grouped by what killed them (an HTTP status, a timeout, a
//! refused connection), with a count, when the group was first and last seen, and a
//! sample entry to open; and **Replay group**, once the destination is fixed.
//!
//! It shows what `GET /admin/dead-letters` answers ([`crate::operations::dead_letters::dead_letter_groups`]),
//! and its button does what `POST /admin/dead-letters/replay` does
//! ([`crate::operations::dead_letters::replay_group`]): the group's deliveries are queued oldest first at the
//! configured replay rate, never all at once.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use super::cross_site::FORM_TOKEN_FIELD;
use super::entries::PATH as ENTRIES;
use super::format::{self, count, rfc3339_seconds};
use super::page::{self, Nav};
use super::posted::Posted;
use super::{ConsoleError, ConsoleState, Visitor};
use crate::admin::dto::DeadLetterGroups;
use crate::operations::OpError;

/// Where the page is.
const PATH: &str = "/console/dead-letters";

/// `GET /console/dead-letters`.
pub async fn show(
    State(console): State<Arc<ConsoleState>>,
    Extension(visitor): Extension<Visitor>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ConsoleError> {
    let groups =
        crate::operations::dead_letters::dead_letter_groups(&console.admin.ops, None, None)
            .await
            .map_err(store_or_not_found)?;
    let q: Vec<(String, String)> = form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .into_owned()
        .collect();
    let field = |name: &str| q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let notice = field("replayed")
        .and_then(|n| n.parse::<u64>().ok())
        .map(|n| {
            let due = field("due").unwrap_or_default();
            (n, due.chars().take(40).collect::<String>())
        });
    let token = console.form_token(&visitor);
    let chrome = console.chrome(&visitor, Nav::DeadLetters);
    Ok(page::html(page::page(
        "Dead letters",
        &chrome,
        render(&groups, notice, console.admin.ops.replay_rate, &token),
    )))
}

/// `POST /console/dead-letters/replay`: replay one group, then back to the page.
pub async fn replay(
    State(console): State<Arc<ConsoleState>>,
    Posted { visitor, form }: Posted,
) -> Result<Response, ConsoleError> {
    let field = |name: &'static str| form.get(name).ok_or(ConsoleError::BadForm(name));
    let done = crate::operations::dead_letters::replay_group(
        &console.admin.ops,
        field("source")?,
        field("route")?,
        field("failure")?,
        &visitor.actor(),
    )
    .await
    .map_err(store_or_not_found)?;
    let mut to = form_urlencoded::Serializer::new(String::new());
    to.append_pair("replayed", &done.queued.to_string());
    if let Some(due) = &done.last_due_at {
        to.append_pair("due", due);
    }
    Ok(Redirect::to(&format!("{PATH}?{}", to.finish())).into_response())
}

fn store_or_not_found(e: OpError) -> ConsoleError {
    match e {
        OpError::Store(cause) => ConsoleError::Store(cause),
        // An unknown source or route: the form was not one of this page's.
        _ => ConsoleError::NotFound,
    }
}

fn render(g: &DeadLetterGroups, notice: Option<(u64, String)>, rate: u32, token: &str) -> Markup {
    html! {
        div.page-head {
            h1 { "Dead letters" }
            p.muted { "Dead deliveries by route and failure, largest group first. Times are UTC." }
        }
        @if let Some((n, due)) = notice {
            p.notice role="status" {
                "Queued " (count(n)) " " (if n == 1 { "replay" } else { "replays" })
                ", paced at " (rate) " per second"
                @if !due.is_empty() { "; the last is due at " (due.replace('T', " ").replace('Z', " UTC")) }
                "."
            }
        }
        @if g.groups.is_empty() {
            section.card {
                h2 { "No dead letters" }
                p.muted { "Every delivery that was given up on shows here, grouped by why." }
            }
        } @else {
            @for r in g.routes.iter().filter(|r| r.scanned < r.dead) {
                p.alert role="note" {
                    "Route " code { (r.route) } " of " (r.source) " has " (count(r.dead))
                    " dead deliveries: the groups below count its newest " (count(r.scanned))
                    ". Replaying a group makes room for the next ones."
                }
            }
            section.card.flush aria-labelledby="groups-heading" {
                div.table-head { h2 #groups-heading { "Failure groups" } }
                div.table-wrap {
                    table.groups {
                        thead {
                            tr {
                                th scope="col" { "Source / route" }
                                th scope="col" { "Failure" }
                                th.num scope="col" { "Count" }
                                th scope="col" { "First seen" }
                                th scope="col" { "Last seen" }
                                th scope="col" { "Sample" }
                                th scope="col" { span.visually-hidden { "Action" } }
                            }
                        }
                        tbody {
                            @for x in &g.groups {
                                tr {
                                    th scope="row" { (x.source) " / " (x.route) }
                                    td.failure data-label="Failure" { span.badge.status-dead { (format::untrusted(&x.failure)) } }
                                    td.num.count data-label="Count" { (count(x.count)) }
                                    td data-label="First seen" { (rfc3339_seconds(&x.first_seen)) }
                                    td data-label="Last seen" { (rfc3339_seconds(&x.last_seen)) }
                                    td.sample data-label="Sample" {
                                        a href={ (ENTRIES) "/" (x.sample.id) } {
                                            @match (&x.sample.event_type, &x.sample.event_id) {
                                                (_, Some(id)) => (format::untrusted(id)),
                                                (Some(t), None) => (format::untrusted(t)),
                                                (None, None) => (x.sample.id),
                                            }
                                        }
                                        @if let Some(t) = &x.sample.event_type {
                                            br; code { (format::untrusted(t)) }
                                        }
                                    }
                                    td data-label="Action" {
                                        form.toggle method="post" action={ (PATH) "/replay" } {
                                            input type="hidden" name=(FORM_TOKEN_FIELD) value=(token);
                                            input type="hidden" name="source" value=(x.source);
                                            input type="hidden" name="route" value=(x.route);
                                            input type="hidden" name="failure" value=(x.failure);
                                            button.toggle.resume type="submit" {
                                                "Replay group"
                                                span.visually-hidden { " " (x.failure) " of " (x.route) " of " (x.source) }
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
