//! Keeping published ranges up to date: at start, the last good list the store
//! keeps is put in force ([`load_saved`]); then every list is fetched again every
//! `server.allowlist_refresh` ([`run`]). A list that changed is put in force, kept in
//! the store, logged (how many ranges came and went) and counted; a failed fetch
//! keeps the list in force and raises `hookgate_allowlist_refresh_failing`, which the
//! shipped alert rules watch.

use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use tokio_util::sync::CancellationToken;

use super::{Published, fetch};
use crate::clock::Clock;
use crate::live::Live;
use crate::store::{SavedRanges, Store};

/// Register each list's metric series, so that the first scrape shows them; and,
/// whatever the lists, the families the shipped alert rules read, as one series
/// without a provider (which the rules leave out: `provider!=""`), so that a
/// gateway without allowlists has them too.
pub fn register_metrics(lists: &[Arc<Published>]) {
    metrics::gauge!("hookgate_allowlist_ranges").increment(0.0);
    metrics::gauge!("hookgate_allowlist_refresh_failing").increment(0.0);
    for list in lists {
        let p = list.provider.clone();
        // Registered, not set: a gauge another list of the process set keeps its value.
        metrics::gauge!("hookgate_allowlist_ranges", "provider" => p.clone()).increment(0.0);
        metrics::gauge!("hookgate_allowlist_refresh_failing", "provider" => p.clone())
            .increment(0.0);
        metrics::gauge!("hookgate_allowlist_fetched_timestamp_seconds", "provider" => p.clone())
            .increment(0.0);
        metrics::counter!("hookgate_allowlist_changes_total", "provider" => p.clone()).increment(0);
        for result in ["ok", "failed"] {
            metrics::counter!("hookgate_allowlist_refreshes_total", "provider" => p.clone(), "result" => result)
                .increment(0);
        }
    }
}

/// Put in force the last good list the store keeps for each of `lists`.
pub async fn load_saved(lists: &[Arc<Published>], store: &dyn Store) {
    for list in lists {
        match store.saved_ranges(&list.source.url).await {
            Ok(Some(saved)) => match super::from_text(&saved.ranges) {
                Some(ranges) if !ranges.is_empty() => {
                    tracing::info!(
                        provider = %list.provider,
                        ranges = ranges.len(),
                        fetched_at_ms = saved.fetched_at,
                        "allowlist: the last good ranges kept in the store are in force until a fetch succeeds"
                    );
                    set_gauges(list, ranges.len(), saved.fetched_at);
                    list.install(ranges.into());
                }
                _ => tracing::warn!(
                    provider = %list.provider,
                    "allowlist: the ranges kept in the store cannot be read; waiting for a fetch"
                ),
            },
            Ok(None) => tracing::info!(
                provider = %list.provider,
                "allowlist: no ranges kept yet; the source takes no request until the first fetch"
            ),
            Err(e) => tracing::warn!(
                provider = %list.provider,
                error = %e,
                "allowlist: could not read the ranges kept in the store; waiting for a fetch"
            ),
        }
    }
}

/// Fetch every list now, then every `interval`, until `shutdown`.
pub async fn run(
    lists: Live<Vec<Arc<Published>>>,
    store: Arc<dyn Store>,
    clock: Clock,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut changes = lists.changes();
    let client = match fetch::client() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "allowlist: cannot build the HTTP client; the ranges in force stay");
            for list in lists.load().iter() {
                failing(list, true);
            }
            return;
        }
    };
    // The lists fetched since the last full round (by URL): a reload that adds a
    // list has it fetched at once, without fetching the others again.
    let mut fetched: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut next_round = tokio::time::Instant::now();
    loop {
        changes.mark_unchanged();
        if tokio::time::Instant::now() >= next_round {
            fetched.clear();
            next_round = tokio::time::Instant::now() + interval;
        }
        // The lists of the table in force.
        for list in lists.load().iter() {
            if !fetched.insert(list.source.url.clone()) {
                continue;
            }
            // A fetch in flight does not hold the shutdown up.
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = refresh_one(&client, list, store.as_ref(), &clock) => {}
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep_until(next_round) => {}
            changed = changes.changed() => if changed.is_err() {
                shutdown.cancelled().await;
                return;
            },
        }
    }
}

/// Fetch one list; put it in force and keep it when it changed.
async fn refresh_one(client: &reqwest::Client, list: &Published, store: &dyn Store, clock: &Clock) {
    let provider = list.provider.clone();
    let fetched = fetch::fetch(client, &list.source).await;
    let ranges = match fetched {
        Ok(ranges) => ranges,
        Err(e) => {
            metrics::counter!("hookgate_allowlist_refreshes_total", "provider" => provider.clone(), "result" => "failed")
                .increment(1);
            failing(list, true);
            tracing::warn!(
                provider = %provider,
                url = %list.source.published,
                kind = e.kind(),
                error = %error_chain(&e),
                in_force = list.current().map_or(0, |r| r.len()),
                "allowlist: refresh failed; the ranges in force stay"
            );
            return;
        }
    };
    metrics::counter!("hookgate_allowlist_refreshes_total", "provider" => provider.clone(), "result" => "ok")
        .increment(1);
    failing(list, false);
    let now = clock.now_ms();
    set_gauges(list, ranges.len(), now);
    let before = list.current();
    let changed = before.as_deref() != Some(ranges.as_slice());
    if changed {
        let (added, removed) = difference(before.as_deref().unwrap_or(&[]), &ranges);
        metrics::counter!("hookgate_allowlist_changes_total", "provider" => provider.clone())
            .increment(1);
        tracing::info!(
            provider = %provider,
            ranges = ranges.len(),
            added = %added.join(" "),
            removed = %removed.join(" "),
            "allowlist: the provider's ranges changed; the new list is in force"
        );
    }
    let text = super::to_text(&ranges);
    list.install(ranges.into());
    // Keep every good list (its time too), so that a restart knows how fresh it is.
    let saved = SavedRanges {
        ranges: text,
        fetched_at: now,
    };
    if let Err(e) = store.save_ranges(&list.source.url, &saved).await {
        tracing::warn!(provider = %provider, error = %e, "allowlist: could not keep the ranges in the store");
    }
}

/// The ranges `after` has that `before` has not, and the other way round (at most
/// 20 of each, for a log line).
fn difference(before: &[IpNet], after: &[IpNet]) -> (Vec<String>, Vec<String>) {
    let added = after
        .iter()
        .filter(|n| !before.contains(n))
        .take(20)
        .map(|n| n.to_string())
        .collect();
    let removed = before
        .iter()
        .filter(|n| !after.contains(n))
        .take(20)
        .map(|n| n.to_string())
        .collect();
    (added, removed)
}

fn failing(list: &Published, yes: bool) {
    metrics::gauge!("hookgate_allowlist_refresh_failing", "provider" => list.provider.clone())
        .set(if yes { 1.0 } else { 0.0 });
}

fn set_gauges(list: &Published, ranges: usize, fetched_at_ms: i64) {
    let p = list.provider.clone();
    metrics::gauge!("hookgate_allowlist_ranges", "provider" => p.clone()).set(ranges as f64);
    metrics::gauge!("hookgate_allowlist_fetched_timestamp_seconds", "provider" => p)
        .set(fetched_at_ms as f64 / 1000.0);
}

/// An error and its causes, one line (a reqwest error's message alone says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_names_what_came_and_went() {
        let n = |s: &str| s.parse::<IpNet>().unwrap();
        let (added, removed) = difference(
            &[n("192.0.2.0/24"), n("198.51.100.0/24")],
            &[n("192.0.2.0/24"), n("203.0.113.0/24")],
        );
        assert_eq!(added, ["203.0.113.0/24"]);
        assert_eq!(removed, ["198.51.100.0/24"]);
    }
}
