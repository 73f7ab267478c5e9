//! Silence: a source with an expected traffic (`[sources.expect] at_least`) that
//! received fewer webhooks than that in its window is quiet. A provider that stops
//! sending (a webhook disabled on its side after failures, a sender that crashed)
//! leaves nothing at the gateway to refuse or to retry; only the count of what
//! arrived says so. The count is the store's (every gateway's arrivals, per
//! minute), so each gateway exports the same `hookgate_source_quiet`.

use std::collections::HashSet;

use super::Forwarder;
use crate::config::Expect;

/// Set `hookgate_source_quiet` of every source in `expects`, and back to 0 for a
/// source that was quiet and has no expectation any more (removed, or its
/// `[sources.expect]` taken out by a reload).
pub(super) async fn gauges(fwd: &Forwarder, expects: &[(String, Expect)]) {
    let now = fwd.clock.now_ms();
    let mut quiet_now = HashSet::new();
    for (source, expect) in expects {
        let Some(quiet) = is_quiet(fwd, source, expect, now).await else {
            continue;
        };
        metrics::gauge!("hookgate_source_quiet", "source" => source.clone()).set(if quiet {
            1.0
        } else {
            0.0
        });
        if quiet {
            quiet_now.insert(source.clone());
        }
    }
    let Ok(mut reported) = fwd.quiet.lock() else {
        return;
    };
    for source in reported.difference(&quiet_now) {
        if !expects.iter().any(|(s, _)| s == source) {
            metrics::gauge!("hookgate_source_quiet", "source" => source.clone()).set(0.0);
        }
    }
    *reported = quiet_now;
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
