//! The overview (`GET /console/`): every source and each of its routes at a glance,
//! from the same counters `/admin/stats` answers (`crate::operations::sources::current_stats`): what
//! arrived, what waits and since when, what was delivered, what died, what is paused
//! and which ordering keys are blocked; and the gateways sharing the store, with the
//! configuration version each runs (`gateways`).

use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};
use std::collections::HashMap;
use std::sync::Arc;

use super::chart;
use super::format::{age, count, time as as_of};
use super::page::{self, Nav};
use super::{BreakerView, ConsoleError, ConsoleState, Visitor};
use crate::admin::dto::{RouteStats, SourceStats, Stats};
use crate::store::MinuteActivity;

pub async fn show(
    State(console): State<Arc<ConsoleState>>,
    Extension(visitor): Extension<Visitor>,
) -> Result<Response, ConsoleError> {
    let stats = crate::operations::sources::current_stats(&console.admin.ops).await?;
    let gateways = crate::operations::gateways::gateways(&console.admin.ops).await?;
    let now_ms = console.admin.ops.clock.now_ms();
    let breakers: Breakers = stats
        .sources
        .iter()
        .flat_map(|s| {
            s.routes
                .iter()
                .map(move |r| (s.source.clone(), r.route.clone()))
        })
        .filter_map(|(s, r)| (console.breakers)(&s, &r).map(|b| ((s, r), b)))
        .collect();
    let mut activity = HashMap::new();
    for s in &stats.sources {
        let minutes = console
            .admin
            .ops
            .store
            .activity(&s.source, now_ms - chart::WINDOW_MS, now_ms + 60_000)
            .await?;
        activity.insert(s.source.clone(), minutes);
    }
    let chrome = console.chrome(&visitor, Nav::Overview);
    Ok(page::html(page::page(
        "Overview",
        &chrome,
        html! {
            (render(&stats, &breakers, &activity, now_ms))
            (super::gateways::card(&gateways))
        },
    )))
}

/// Each source's activity per minute, for its charts.
type Activity = HashMap<String, Vec<MinuteActivity>>;

/// This process's circuit breaker state of each (source, route).
type Breakers = HashMap<(String, String), BreakerView>;

/// The page's content for `stats` and `breakers`, read at `now_ms`.
fn render(stats: &Stats, breakers: &Breakers, activity: &Activity, now_ms: i64) -> Markup {
    let sum = |f: fn(&SourceStats) -> u64| stats.sources.iter().map(f).sum::<u64>();
    // Deliveries, not entries: an entry with one route dead and one delivered is
    // `dead` as a whole, and the tiles should add up to the routes' rows.
    let deliveries = |f: fn(&RouteStats) -> u64| {
        stats
            .sources
            .iter()
            .flat_map(|s| &s.routes)
            .map(f)
            .sum::<u64>()
    };
    let (pending, delivered, dead) = (
        deliveries(|r| r.pending),
        deliveries(|r| r.delivered),
        deliveries(|r| r.dead),
    );
    let oldest = stats
        .sources
        .iter()
        .filter_map(|s| s.oldest_pending_age_seconds)
        .max();
    let paused_routes = stats
        .sources
        .iter()
        .map(|s| {
            if s.paused {
                s.routes.len()
            } else {
                s.routes.iter().filter(|r| r.paused).count()
            }
        })
        .sum::<usize>();
    html! {
        div.page-head {
            h1 { "Overview" }
            p.muted {
                "Counts as of "
                (as_of(now_ms))
                ". Reload the page to update them."
            }
        }
        ul.tiles aria-label="Totals: entries received, deliveries by status" {
            (tile("Received", count(sum(|s| s.received)), Tone::Plain))
            (tile("Pending", count(pending), tone_if(pending > 0, Tone::Warn)))
            (tile("Oldest pending", age(oldest), tone_if(oldest.is_some(), Tone::Warn)))
            (tile("Delivered", count(delivered), Tone::Good))
            (tile("Dead", count(dead), tone_if(dead > 0, Tone::Bad)))
            (tile("Paused routes", count(paused_routes as u64), tone_if(paused_routes > 0, Tone::Warn)))
        }
        @if stats.sources.is_empty() {
            section.card {
                h2 { "No sources" }
                p { "No sources are configured: add a " code { "[[sources]]" } " entry to the configuration." }
            }
        }
        @for (i, s) in stats.sources.iter().enumerate() {
            (source(i, s, breakers, activity.get(&s.source).map_or(&[][..], Vec::as_slice), now_ms))
        }
    }
}

fn source(
    i: usize,
    s: &SourceStats,
    breakers: &Breakers,
    minutes: &[MinuteActivity],
    now_ms: i64,
) -> Markup {
    let heading = format!("source-{i}");
    html! {
        section.card.source aria-labelledby=(heading) {
            div.source-head {
                h2 id=(heading) { (s.source) }
                (state(s.paused, "source"))
                dl.facts {
                    div { dt { "Received" } dd { (count(s.received)) } }
                    div { dt { "Duplicates" } dd { (count(s.duplicates)) } }
                    div { dt { "Unverified" } dd.bad[s.unverified > 0] { (count(s.unverified)) } }
                    div { dt { "Filtered" } dd { (count(s.filtered)) } }
                }
            }
            div.table-wrap {
                table.routes {
                    caption.visually-hidden { "Deliveries of source " (s.source) " by route" }
                    thead {
                        tr {
                            th scope="col" { "Route" }
                            th scope="col" { "State" }
                            th scope="col" { "Breaker" }
                            th.num scope="col" { "Pending" }
                            th.num scope="col" { "Oldest pending" }
                            th.num scope="col" { "Delivered" }
                            th.num scope="col" { "Dead" }
                            th.num scope="col" { "Discarded" }
                            th.num scope="col" { "Blocked keys" }
                        }
                    }
                    tbody {
                        @for r in &s.routes {
                            tr {
                                th scope="row" { (r.route) }
                                td data-label="State" { (state(r.paused || s.paused, "route")) }
                                td data-label="Breaker" {
                                    (breaker(breakers.get(&(s.source.clone(), r.route.clone())).copied()))
                                }
                                (num("Pending", r.pending, Tone::Warn))
                                td.num.warn[r.oldest_pending_age_seconds.is_some()] data-label="Oldest pending" {
                                    (age(r.oldest_pending_age_seconds))
                                }
                                (num("Delivered", r.delivered, Tone::Good))
                                (num("Dead", r.dead, Tone::Bad))
                                (num("Discarded", r.discarded, Tone::Plain))
                                (num("Blocked keys", r.blocked_keys, Tone::Bad))
                            }
                        }
                    }
                    tfoot {
                        tr {
                            th scope="row" { "Entries" span.muted { " (all routes)" } }
                            td data-label="State" {}
                            td data-label="Breaker" {}
                            (num("Pending", s.pending, Tone::Warn))
                            td.num.warn[s.oldest_pending_age_seconds.is_some()] data-label="Oldest pending" {
                                (age(s.oldest_pending_age_seconds))
                            }
                            (num("Delivered", s.delivered, Tone::Good))
                            (num("Dead", s.dead, Tone::Bad))
                            (num("Discarded", s.discarded, Tone::Plain))
                            td.num data-label="Blocked keys" {}
                        }
                    }
                }
            }
            (chart::charts(i, minutes, now_ms))
        }
    }
}

/// How a number is coloured when it is not zero.
#[derive(Clone, Copy)]
enum Tone {
    Plain,
    Good,
    Warn,
    Bad,
}

impl Tone {
    fn class(self) -> &'static str {
        match self {
            Tone::Plain => "",
            Tone::Good => "good",
            Tone::Warn => "warn",
            Tone::Bad => "bad",
        }
    }
}

fn tone_if(cond: bool, tone: Tone) -> Tone {
    if cond { tone } else { Tone::Plain }
}

fn tile(label: &str, value: String, tone: Tone) -> Markup {
    html! {
        li class={ "tile " (tone.class()) } {
            span.label { (label) }
            span.value { (value) }
        }
    }
}

/// A table cell for a count, coloured by `tone` when it is not zero.
fn num(label: &str, n: u64, tone: Tone) -> Markup {
    let tone = if n == 0 { "zero" } else { tone.class() };
    html! {
        td class={ "num " (tone) } data-label=(label) { (count(n)) }
    }
}

/// A route's circuit breaker, as this process sees it.
fn breaker(state: Option<BreakerView>) -> Markup {
    html! {
        @match state {
            Some(BreakerView::Closed) => span.badge.active title="Deliveries go out" { "Closed" },
            Some(BreakerView::HalfOpen) => span.badge.paused title="One probe tests the destination" { "Half-open" },
            Some(BreakerView::Open) => span.badge.status-dead title="The destination failed repeatedly: deliveries wait for the cooldown" { "Open" },
            None => span.muted { "—" },
        }
    }
}

/// The state badge of a source or route.
fn state(paused: bool, what: &str) -> Markup {
    html! {
        @if paused {
            span.badge.paused title={ "Delivery of this " (what) " is paused" } { "Paused" }
        } @else {
            span.badge.active { "Active" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped() {
        let evil = "<script>alert(1)</script>";
        let stats = Stats {
            sources: vec![SourceStats {
                source: evil.to_string(),
                paused: false,
                received: 1,
                duplicates: 0,
                unverified: 0,
                pending: 0,
                delivered: 1,
                dead: 0,
                discarded: 0,
                filtered: 0,
                oldest_pending_age_seconds: None,
                routes: vec![RouteStats {
                    route: evil.to_string(),
                    paused: true,
                    pending: 0,
                    delivered: 1,
                    dead: 0,
                    discarded: 0,
                    oldest_pending_age_seconds: None,
                    blocked_keys: 0,
                }],
            }],
        };
        let html = render(
            &stats,
            &Breakers::new(),
            &Activity::new(),
            1_800_000_000_000,
        )
        .into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }
}
