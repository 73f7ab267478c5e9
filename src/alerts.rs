//! Alerting without extra infrastructure: a Slack-compatible incoming webhook is told
//! when deliveries go dead.
//!
//! The forwarder reports each dead delivery through [`Alerts::dead`], which only
//! counts under a lock (it never blocks delivery). Every `interval`, [`run`] sends one
//! message per route (of a source) that had dead deliveries, with the count, the
//! count per failure kind (`HTTP 503`, `timeout`, `transform: runtime`: the kind the
//! forwarder recorded) and the first reason of each, and retries a failed send a
//! few times. Messages that still fail are logged and counted;
//! the counts roll into the next interval's message.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::AlertsConfig;
use crate::failure::Failure;
use crate::live::Live;

/// Failure kinds kept apart per route and interval (the rest count as `other`).
const MAX_REASONS: usize = 5;

#[derive(Debug, Default, Clone)]
struct Batch {
    count: u64,
    /// Per failure kind (its name, `unknown` when none was recorded; `other` past
    /// [`MAX_REASONS`] kinds): how many, and the first reason given.
    failures: Vec<(String, u64, String)>,
}

impl Batch {
    fn add(&mut self, kind: String, count: u64, reason: &str) {
        self.count += count;
        let kind = if self.failures.len() >= MAX_REASONS
            && !self.failures.iter().any(|(k, _, _)| *k == kind)
        {
            "other".to_string()
        } else {
            kind
        };
        match self.failures.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, n, _)) => *n += count,
            None => self
                .failures
                .push((kind, count, reason.chars().take(300).collect())),
        }
    }
}

/// A route of a source: (source, route).
type RouteKey = (String, String);

/// Dead deliveries counted since the last message, per route.
#[derive(Debug, Default)]
pub struct Alerts {
    pending: Mutex<BTreeMap<RouteKey, Batch>>,
}

impl Alerts {
    /// Count a dead delivery that last failed with `kind`, for `reason`. Cheap and
    /// non-blocking.
    pub fn dead(&self, source: &str, route: &str, kind: Option<Failure>, reason: &str) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.entry((source.to_string(), route.to_string()))
            .or_default()
            .add(crate::failure::group_name(kind), 1, reason);
    }

    fn take(&self) -> BTreeMap<RouteKey, Batch> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn put_back(&self, key: RouteKey, batch: Batch) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let b = p.entry(key).or_default();
        for (kind, n, reason) in batch.failures {
            b.add(kind, n, &reason);
        }
    }
}

/// The message for one route and interval (Slack incoming-webhook JSON).
fn message(source: &str, route: &str, batch: &Batch, interval: Duration) -> serde_json::Value {
    let mut text = format!(
        ":rotating_light: hookgate: {} {} of source `{}` through route `{}` went to the dead-letter queue in the last {}.",
        batch.count,
        if batch.count == 1 {
            "delivery"
        } else {
            "deliveries"
        },
        source,
        route,
        humantime::format_duration(interval)
    );
    if !batch.failures.is_empty() {
        text.push_str("\nBy failure:");
        for (kind, n, reason) in &batch.failures {
            text.push_str(&format!("\n• {kind} ×{n}: {reason}"));
        }
    }
    text.push_str(&format!(
        "\nInspect with `hookgate dlq list --source {source} --route {route}`; replay with `hookgate dlq replay --source {source} --route {route}`."
    ));
    let failures: serde_json::Map<String, serde_json::Value> = batch
        .failures
        .iter()
        .map(|(kind, n, _)| (kind.clone(), (*n).into()))
        .collect();
    let reasons: Vec<&str> = batch.failures.iter().map(|(_, _, r)| r.as_str()).collect();
    serde_json::json!({ "text": text, "source": source, "route": route, "dead": batch.count, "failures": failures, "reasons": reasons })
}

/// Send the batched alerts every interval until shutdown (then once more).
pub async fn run(alerts: Arc<Alerts>, cfg: Live<AlertsConfig>, shutdown: CancellationToken) {
    crate::tls::install_provider();
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "alerts: cannot build the HTTP client; alerts are off");
            return;
        }
    };
    loop {
        // The settings in force at each batch: a reload may set, change or remove
        // the webhook.
        let interval = cfg.load().interval;
        let stop = tokio::select! {
            _ = shutdown.cancelled() => true,
            _ = tokio::time::sleep(interval) => false,
        };
        let settings = cfg.load();
        let Some(url) = settings.webhook_url.as_ref() else {
            // No webhook: what went dead meanwhile is not kept for a later one.
            alerts.take();
            if stop {
                return;
            }
            continue;
        };
        for ((source, route), batch) in alerts.take() {
            if !send(
                &client,
                url.expose(),
                &message(&source, &route, &batch, settings.interval),
            )
            .await
            {
                tracing::error!(
                    source,
                    route,
                    dead = batch.count,
                    "alert webhook failed; will retry next interval"
                );
                metrics::counter!("hookgate_alerts_sent_total", "result" => AlertResult::Failed.label()).increment(1);
                if !stop {
                    alerts.put_back((source, route), batch);
                }
            } else {
                metrics::counter!("hookgate_alerts_sent_total", "result" => AlertResult::Sent.label()).increment(1);
            }
        }
        if stop {
            return;
        }
    }
}

/// POST with a few retries; true when the webhook answered 2xx.
async fn send(client: &reqwest::Client, url: &str, body: &serde_json::Value) -> bool {
    let mut delay = Duration::from_millis(500);
    for _ in 0..3 {
        match client.post(url).json(body).send().await {
            Ok(r) if r.status().is_success() => return true,
            Ok(r) => tracing::warn!(
                status = r.status().as_u16(),
                "alert webhook refused the message"
            ),
            Err(e) => tracing::warn!(error = %e.without_url(), "alert webhook unreachable"),
        }
        tokio::time::sleep(delay).await;
        delay *= 2;
    }
    false
}

crate::telemetry::label_values! {
    /// Label `result` of `hookgate_alerts_sent_total`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum AlertResult {
        Sent => "sent",
        Failed => "failed",
    }
}

/// Register `hookgate_alerts_sent_total` with a zero series for every result.
pub fn register_metrics() {
    for result in AlertResult::ALL {
        metrics::counter!("hookgate_alerts_sent_total", "result" => result.label()).increment(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_count_every_route_apart_and_keep_the_first_distinct_reasons() {
        let a = Alerts::default();
        for i in 0..20 {
            let code = 400 + (i % 7);
            a.dead(
                "stripe",
                "billing",
                Some(Failure::Status(code)),
                &format!("not retryable: HTTP {code}"),
            );
        }
        a.dead(
            "stripe",
            "analytics",
            Some(Failure::Status(503)),
            "HTTP 503",
        );
        a.dead("github", "default", None, "no attempt");
        let taken = a.take();
        let key = |s: &str, r: &str| (s.to_string(), r.to_string());
        assert_eq!(taken[&key("stripe", "billing")].count, 20);
        let billing = &taken[&key("stripe", "billing")];
        // Five kinds apart, the two others together, every one counted.
        assert_eq!(billing.failures.len(), MAX_REASONS + 1);
        assert_eq!(billing.failures.iter().map(|f| f.1).sum::<u64>(), 20);
        assert_eq!(billing.failures[0].0, "HTTP 400");
        assert_eq!(billing.failures[0].1, 3);
        assert_eq!(billing.failures[MAX_REASONS].0, "other");
        assert_eq!(taken[&key("github", "default")].failures[0].0, "unknown");
        assert_eq!(taken[&key("stripe", "analytics")].count, 1);
        assert_eq!(taken[&key("github", "default")].count, 1);
        assert!(a.take().is_empty());
        let m = message(
            "stripe",
            "billing",
            &taken[&key("stripe", "billing")],
            Duration::from_secs(60),
        );
        let text = m["text"].as_str().unwrap();
        assert!(
            text.contains("20 deliveries")
                && text.contains("`stripe`")
                && text.contains("route `billing`")
                && text.contains("--route billing")
                && text.contains("HTTP 400 ×3: not retryable: HTTP 400"),
            "{text}"
        );
        assert_eq!(m["route"], "billing");
        assert_eq!(m["failures"]["HTTP 401"], 3);
        assert_eq!(m["failures"]["other"], 5);
    }
}
