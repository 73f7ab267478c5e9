//! Silence: a source with an expected traffic (`[sources.expect] at_least`) that
//! received fewer webhooks than that in its window is quiet, and so is one that
//! learns what is usual (`learn = true`) whose last three hours fell under a tenth
//! of what they usually receive (`store::usual`). A provider that stops
//! sending (a webhook disabled on its side after failures, a sender that crashed)
//! leaves nothing at the gateway to refuse or to retry; only the count of what
//! arrived says so. The count is the store's (every gateway's arrivals, per
//! minute), so each gateway exports the same `hookgate_source_quiet`.

use std::collections::HashMap;
use std::time::Duration;

use super::Forwarder;
use crate::config::{Expect, Expectation};
use crate::store::usual;

/// What a source's last count said, and when it was taken (unix ms).
#[derive(Debug, Clone, Copy)]
pub(super) struct Checked {
    at: i64,
    quiet: bool,
}

/// How often a source's window is counted again: a hundredth of the window, at
/// most once a minute (a week's window reads a week of per-minute counts, and
/// silence is a slow signal: the alert waits 5 minutes), and at each maintenance
/// pass for windows under 100 seconds.
fn every(expect: &Expect) -> Duration {
    (expect.within / 100).min(Duration::from_secs(60))
}

/// How often a learning source is judged again: its baseline reads a day of
/// per-minute counts for each of four weeks.
const EVERY_LEARNED: Duration = Duration::from_secs(300);

/// Set `hookgate_source_quiet` of every source in `expects` whose count is due,
/// and back to 0 for a source that was quiet and has no expectation any more
/// (removed, or its `[sources.expect]` taken out by a reload).
pub(super) async fn gauges(fwd: &Forwarder, expects: &[(String, Expectation)]) {
    let now = fwd.clock.now_ms();
    let last: HashMap<String, Checked> = match fwd.quiet.lock() {
        Ok(q) => q.clone(),
        Err(_) => return,
    };
    let mut counted = HashMap::new();
    for (source, expect) in expects {
        let every = match expect {
            Expectation::AtLeast(e) => every(e),
            Expectation::Learned => EVERY_LEARNED,
        };
        let every = i64::try_from(every.as_millis()).unwrap_or(i64::MAX);
        if let Some(c) = last.get(source)
            && now.saturating_sub(c.at) < every
        {
            counted.insert(source.clone(), *c);
            continue;
        }
        let judged = match expect {
            Expectation::AtLeast(e) => is_quiet(fwd, source, e, now).await,
            Expectation::Learned => match usual::usual(fwd.store.as_ref(), source, now).await {
                Ok(u) => Some(u.quiet()),
                Err(e) => {
                    tracing::warn!(source, error = %e, "the count of a source's usual arrivals failed");
                    None
                }
            },
        };
        let Some(quiet) = judged else {
            if let Some(c) = last.get(source) {
                counted.insert(source.clone(), *c);
            }
            continue;
        };
        metrics::gauge!("hookgate_source_quiet", "source" => source.clone()).set(if quiet {
            1.0
        } else {
            0.0
        });
        counted.insert(source.clone(), Checked { at: now, quiet });
    }
    for (source, c) in &last {
        if c.quiet && !counted.contains_key(source) {
            metrics::gauge!("hookgate_source_quiet", "source" => source.clone()).set(0.0);
        }
    }
    if let Ok(mut q) = fwd.quiet.lock() {
        *q = counted;
    }
}

/// Whether fewer than `expect.at_least` webhooks were stored for `source` in the
/// window before `now` (from the start of its first minute, so at most a minute
/// more; the minute in progress included); `None` when the store cannot say (the
/// gauge keeps its value).
async fn is_quiet(fwd: &Forwarder, source: &str, expect: &Expect, now: i64) -> Option<bool> {
    let window = i64::try_from(expect.within.as_millis()).unwrap_or(i64::MAX);
    // From the start of the window's first minute: the store counts per minute.
    let since = now.saturating_sub(window);
    let since = since - since.rem_euclid(60_000);
    match fwd
        .store
        .activity(source, since, now.saturating_add(1))
        .await
    {
        Ok(minutes) => {
            let received: u64 = minutes.iter().map(|m| m.received).sum();
            Some(received < expect.at_least)
        }
        Err(e) => {
            tracing::warn!(source, error = %e, "the count of a source's arrivals failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_counted_a_hundred_times_over_and_at_most_once_a_minute() {
        let every = |secs: u64| {
            every(&Expect {
                at_least: 1,
                within: Duration::from_secs(secs),
            })
        };
        assert_eq!(every(60), Duration::from_millis(600));
        assert_eq!(every(300), Duration::from_secs(3));
        assert_eq!(every(3600), Duration::from_secs(36));
        assert_eq!(every(7 * 24 * 3600), Duration::from_secs(60));
    }
}
