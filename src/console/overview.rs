//! The overview (`GET /console/`): every source and each of its routes at a glance,
//! from the same counters `/admin/stats` answers (`admin::current_stats`): what
//! arrived, what waits and since when, what was delivered, what died, what is paused
//! and which ordering keys are blocked.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};

use super::page::{self, Nav};
use super::{ConsoleError, ConsoleState, Visitor};
use crate::admin::dto::{RouteStats, SourceStats, Stats};

pub async fn show(
    State(console): State<Arc<ConsoleState>>,
    Extension(visitor): Extension<Visitor>,
) -> Result<Response, ConsoleError> {
    let stats = crate::admin::current_stats(&console.admin).await?;
    let now_ms = console.admin.clock.now_ms();
    let chrome = console.chrome(&visitor, Nav::Overview);
    Ok(page::html(page::page(
        "Overview",
        &chrome,
        render(&stats, now_ms),
    )))
}

/// The page's content for `stats`, read at `now_ms`.
fn render(stats: &Stats, now_ms: i64) -> Markup {
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
            (source(i, s))
        }
    }
}

fn source(i: usize, s: &SourceStats) -> Markup {
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

/// `1234567` as `1,234,567`.
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An age in seconds, to the two largest units (`—` for none).
fn age(secs: Option<u64>) -> String {
    let Some(s) = secs else {
        return "—".to_string();
    };
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86400, s % 86400 / 3600),
    }
}

/// `now_ms` as a `<time>` in UTC.
fn as_of(now_ms: i64) -> Markup {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(now_ms).unwrap_or(0));
    let stamp = humantime::format_rfc3339_seconds(at).to_string();
    let shown = stamp.replace('T', " ").replace('Z', " UTC");
    html! { time datetime=(stamp) { (shown) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_ages_read_well() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(age(None), "—");
        assert_eq!(age(Some(42)), "42 s");
        assert_eq!(age(Some(3 * 60 + 5)), "3 min 5 s");
        assert_eq!(age(Some(2 * 3600 + 61)), "2 h 1 min");
        assert_eq!(age(Some(3 * 86400 + 7200)), "3 d 2 h");
    }

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
        let html = render(&stats, 1_800_000_000_000).into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }
}
