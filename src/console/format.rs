//! How every console page writes numbers, ages, times and statuses, so that the
//! same value reads the same on each page.

use std::time::{Duration, UNIX_EPOCH};

use maud::{Markup, html};

use crate::store::Status;

/// `1234567` as `1,234,567`.
/// A value that came with a webhook (or from a destination), isolated from the
/// text around it: a `<bdi>`, so that bidirectional controls inside it (U+202E
/// and the like) cannot reorder what the page says next to it. maud escapes it.
pub fn untrusted(value: &str) -> Markup {
    html! { bdi { (value) } }
}

pub fn count(n: u64) -> String {
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
pub fn age(secs: Option<u64>) -> String {
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

/// Unix milliseconds as RFC 3339 to the second, UTC.
pub fn stamp(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
}

/// Unix milliseconds as a `<time>`: `2026-11-24 10:00:00 UTC`.
pub fn time(ms: i64) -> Markup {
    let stamp = stamp(ms);
    let shown = stamp.replace('T', " ").replace('Z', " UTC");
    html! { time datetime=(stamp) { (shown) } }
}

/// An RFC 3339 time as the admin API answers it, shown as [`time`] shows one.
pub fn rfc3339(stamp: &str) -> Markup {
    let shown = stamp.replace('T', " ").replace('Z', " UTC");
    html! { time datetime=(stamp) { (shown) } }
}

/// [`rfc3339`] to the second: what a summary needs.
pub fn rfc3339_seconds(stamp: &str) -> Markup {
    let shown = match stamp.split_once('.') {
        Some((head, _)) => format!("{} UTC", head.replace('T', " ")),
        None => stamp.replace('T', " ").replace('Z', " UTC"),
    };
    html! { time datetime=(stamp) { (shown) } }
}

/// A status as a coloured badge.
pub fn status(s: Status) -> Markup {
    let label = match s {
        Status::Pending => "Pending",
        Status::Delivered => "Delivered",
        Status::Dead => "Dead",
        Status::Discarded => "Discarded",
        Status::Filtered => "Filtered",
    };
    html! { span class={ "badge status-" (s.as_str()) } { (label) } }
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
    fn times_are_utc() {
        let t = time(1_800_000_000_000).into_string();
        assert!(t.contains("datetime=\"2027-01-15T08:00:00Z\""), "{t}");
        assert!(t.contains("2027-01-15 08:00:00 UTC"), "{t}");
        let s = rfc3339_seconds("2027-01-15T08:00:00.123Z").into_string();
        assert!(s.contains(">2027-01-15 08:00:00 UTC<"), "{s}");
    }
}
