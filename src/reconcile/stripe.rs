//! Stripe: the account's events, and each one the endpoint would have been sent that
//! hookgate did not store, admitted from the API.
//!
//! Stripe retries a failed delivery for three days, then stops; its API keeps the
//! account's events for 30 days: `GET /v1/events?limit=100&created[gte]=…`, newest
//! first, the next page `starting_after` the last id while `has_more`. Stripe has
//! no API to send an event again, so a missing one is admitted from the list: the
//! event object as the events API renders it (at the API version it was created
//! with, which may differ from the endpoint's pinned version), without a
//! `Stripe-Signature` (it came over TLS with the account's secret key, which is its
//! authentication), through the same dedupe and routing as a delivery, and marked
//! `origin = reconciled`.
//!
//! Only what the endpoint would have been sent is judged: `GET
//! /v1/webhook_endpoints/{id}` gives its `enabled_events` (`*` for all) and its
//! mode (`livemode`); an event of a connected account (`account`) is not this
//! endpoint's. Events younger than `settle` (5 minutes by default) are left for
//! Stripe's own delivery.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::api::{self, ApiError};
use super::{Fetched, Pass, PassError, off_the_workers};
use crate::config::Secret;

/// The fields of the webhook endpoint a pass reads.
#[derive(Debug, Deserialize)]
struct Endpoint {
    enabled_events: Vec<String>,
    livemode: bool,
}

#[derive(Debug, Deserialize)]
struct List<'a> {
    #[serde(borrow)]
    data: Vec<&'a RawValue>,
    #[serde(default)]
    has_more: bool,
}

/// The fields of an event a pass reads; the event itself is kept as listed.
#[derive(Debug, Deserialize)]
struct Head {
    id: String,
    created: i64,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    livemode: bool,
    #[serde(default)]
    account: Option<String>,
}

/// One page of events, read.
struct Page {
    /// The events the endpoint would have been sent.
    events: Vec<Fetched>,
    not_for_endpoint: u64,
    /// The last id listed (where the next page starts after).
    last: Option<String>,
    has_more: bool,
}

/// Read a page of `GET /v1/events` (on the blocking pool: it parses every event).
fn read_page(body: &[u8], ep: &Endpoint, all: bool) -> Result<Page, ApiError> {
    let list: List<'_> = serde_json::from_slice(body).map_err(ApiError::Decode)?;
    let mut page = Page {
        events: Vec::with_capacity(list.data.len()),
        not_for_endpoint: 0,
        last: None,
        has_more: list.has_more,
    };
    for raw in &list.data {
        let head: Head = serde_json::from_str(raw.get()).map_err(ApiError::Decode)?;
        page.last = Some(head.id.clone());
        let wanted = head.livemode == ep.livemode
            && head.account.is_none()
            && (all || ep.enabled_events.contains(&head.kind));
        if !wanted {
            page.not_for_endpoint += 1;
            continue;
        }
        page.events.push(Fetched {
            event_id: head.id,
            created_s: head.created,
            body: bytes::Bytes::copy_from_slice(raw.get().as_bytes()),
        });
    }
    Ok(page)
}

fn get(pass: &Pass<'_>, url: &str, key: &Secret) -> reqwest::RequestBuilder {
    pass.client.get(url).header(
        http::header::AUTHORIZATION,
        format!("Bearer {}", key.expose()),
    )
}

/// One pass over the account's events since the mark (or the lookback).
pub async fn reconcile(
    pass: &mut Pass<'_>,
    api_key: &Secret,
    endpoint: &str,
) -> Result<(), PassError> {
    let url = format!("{}/v1/webhook_endpoints/{endpoint}", pass.base());
    let ep: Endpoint = api::call(|| get(pass, &url, api_key), || pass.now_s())
        .await?
        .json()?;
    let all = ep.enabled_events.iter().any(|e| e == "*");
    let since_s = pass.events_since_s();
    let list_url = format!("{}/v1/events", pass.base());
    let wants = std::sync::Arc::new(ep);
    let mut after: Option<String> = None;
    loop {
        pass.page_turn().await;
        let answer = api::call(
            || {
                let mut q: Vec<(&str, String)> = vec![
                    ("limit", "100".to_string()),
                    ("created[gte]", since_s.to_string()),
                ];
                if let Some(a) = &after {
                    q.push(("starting_after", a.clone()));
                }
                get(pass, &list_url, api_key).query(&q)
            },
            || pass.now_s(),
        )
        .await?;
        pass.report.pages += 1;
        let wants = wants.clone();
        let page = off_the_workers(move || read_page(&answer.body, &wants, all)).await??;
        pass.report.not_for_endpoint += page.not_for_endpoint;
        pass.judge_events(page.events).await?;
        pass.keep_alive().await?;
        match (page.has_more, page.last) {
            (true, Some(l)) => after = Some(l),
            _ => break,
        }
    }
    Ok(())
}
