//! The overview's activity charts: per source, what was received, delivered and
//! failed per minute over the last hour and per hour over the last 7 days, from the
//! store's per-minute counters (`Store::activity`).
//!
//! Each chart is an inline SVG drawn here (no script, no external asset, so the
//! Content-Security-Policy stays strict), with its totals as text beside it and a
//! `<title>` and `<desc>` for screen readers.

use std::fmt::Write as _;

use maud::{Markup, html};

use super::format::count;
use crate::store::MinuteActivity;

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;
/// How far back the overview asks the store for activity.
pub const WINDOW_MS: i64 = 7 * 24 * HOUR_MS;

/// The drawing's size in SVG units; it scales to its box.
const W: f64 = 600.0;
const H: f64 = 120.0;

/// One chart's buckets: received, delivered and failed per bucket, oldest first.
struct Series {
    received: Vec<u64>,
    delivered: Vec<u64>,
    failed: Vec<u64>,
}

impl Series {
    /// `n` buckets of `width` ms, the last one holding `now`, from `minutes`.
    fn of(minutes: &[MinuteActivity], now: i64, width: i64, n: usize) -> Series {
        let last = now.div_euclid(width);
        let first = last - (n as i64 - 1);
        let mut s = Series {
            received: vec![0; n],
            delivered: vec![0; n],
            failed: vec![0; n],
        };
        for m in minutes {
            let b = m.minute.div_euclid(width);
            if (first..=last).contains(&b) {
                let i = usize::try_from(b - first).unwrap_or(0);
                s.received[i] += m.received;
                s.delivered[i] += m.delivered;
                s.failed[i] += m.failed;
            }
        }
        s
    }

    fn max(&self) -> u64 {
        [&self.received, &self.delivered, &self.failed]
            .iter()
            .flat_map(|v| v.iter())
            .copied()
            .max()
            .unwrap_or(0)
    }
}

/// The two charts of `source` from its `minutes` (the last [`WINDOW_MS`]), at `now`.
pub fn charts(source_index: usize, minutes: &[MinuteActivity], now: i64) -> Markup {
    let hour = Series::of(minutes, now, MINUTE_MS, 60);
    let week = Series::of(minutes, now, HOUR_MS, 7 * 24);
    html! {
        div.charts {
            (chart(&format!("chart-{source_index}-hour"), "Last hour, per minute", "60 min ago", &hour))
            (chart(&format!("chart-{source_index}-week"), "Last 7 days, per hour", "7 days ago", &week))
        }
    }
}

fn chart(id: &str, title: &str, start: &str, s: &Series) -> Markup {
    let max = s.max().max(1);
    let total = |v: &[u64]| v.iter().sum::<u64>();
    let (r, d, f) = (total(&s.received), total(&s.delivered), total(&s.failed));
    let desc = format!(
        "{title}: {} received, {} delivered, {} failed; at most {} in one bucket.",
        count(r),
        count(d),
        count(f),
        count(s.max())
    );
    html! {
        figure.chart aria-labelledby={ (id) "-title" } {
            figcaption id={ (id) "-title" } {
                span.chart-title { (title) }
                span.legend {
                    span.key.received { "Received " strong { (count(r)) } }
                    span.key.delivered { "Delivered " strong { (count(d)) } }
                    span.key.failed { "Failed " strong { (count(f)) } }
                }
            }
            div.plot {
                span.ymax aria-hidden="true" { (count(max)) }
                svg viewBox={ "0 0 " (W) " " (H) } preserveAspectRatio="none" role="img" aria-labelledby={ (id) "-t " (id) "-d" } {
                    title id={ (id) "-t" } { (title) }
                    desc id={ (id) "-d" } { (desc) }
                    line.grid x1="0" y1=(H / 2.0) x2=(W) y2=(H / 2.0) {}
                    line.axis x1="0" y1=(H) x2=(W) y2=(H) {}
                    (bars(&s.failed, max))
                    polyline.received points=(points(&s.received, max)) {}
                    polyline.delivered points=(points(&s.delivered, max)) {}
                }
                div.xaxis aria-hidden="true" { span { (start) } span { "now" } }
            }
        }
    }
}

/// `values` as the points of a line scaled to `max`.
fn points(values: &[u64], max: u64) -> String {
    let n = values.len().max(2) - 1;
    let mut out = String::with_capacity(values.len() * 12);
    for (i, v) in values.iter().enumerate() {
        let x = W * i as f64 / n as f64;
        let y = H - H * (*v as f64) / (max as f64);
        let _ = write!(out, "{x:.1},{y:.1} ");
    }
    out
}

/// Failures as bars (rare and important: a bar shows even a single one).
fn bars(values: &[u64], max: u64) -> Markup {
    let n = values.len().max(1) as f64;
    let w = W / n;
    html! {
        @for (i, v) in values.iter().enumerate().filter(|(_, v)| **v > 0) {
            @let h = (H * (*v as f64) / (max as f64)).max(2.0);
            rect.failed x=(format!("{:.1}", w * i as f64)) y=(format!("{:.1}", H - h)) width=(format!("{:.1}", (w * 0.8).max(1.0))) height=(format!("{h:.1}")) {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minute: i64, received: u64, delivered: u64, failed: u64) -> MinuteActivity {
        MinuteActivity {
            minute,
            received,
            delivered,
            failed,
        }
    }

    #[test]
    fn minutes_fall_into_their_buckets() {
        let now = 1_800_000_030_000; // 30 s into a minute
        let this = now - now % MINUTE_MS;
        let minutes = [
            at(this, 3, 2, 1),
            at(this - MINUTE_MS, 1, 1, 0),
            at(this - 60 * MINUTE_MS, 9, 9, 9), // 61 minutes ago: not in the hour
        ];
        let hour = Series::of(&minutes, now, MINUTE_MS, 60);
        assert_eq!(hour.received[59], 3);
        assert_eq!(hour.received[58], 1);
        assert_eq!(hour.received.iter().sum::<u64>(), 4);
        assert_eq!(hour.failed.iter().sum::<u64>(), 1);
        let week = Series::of(&minutes, now, HOUR_MS, 168);
        assert_eq!(week.received.iter().sum::<u64>(), 13);
        // The previous hour holds the minute before this one and the one 60 min ago.
        assert_eq!(week.max(), 10);
    }

    #[test]
    fn a_chart_says_its_totals_in_text() {
        let now = 1_800_000_000_000;
        let html = charts(0, &[at(now - now % MINUTE_MS, 1234, 1200, 34)], now).into_string();
        assert!(html.contains("Received <strong>1,234</strong>"), "{html}");
        assert!(
            html.contains("1,234 received, 1,200 delivered, 34 failed"),
            "{html}"
        );
        assert!(html.contains("<rect class=\"failed\""), "{html}");
    }
}
