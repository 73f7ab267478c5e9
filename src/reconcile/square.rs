//! Square: the seller's events, and each one the subscription would have been sent
//! that hookgate did not store, admitted from the API.
//!
//! Why Square is the third: its webhooks are signed over the whole body, which
//! carries the event id, so an event's dedupe key is its id alone (`id:<event_id>`)
//! and the store answers "have we got it" exactly; and its Events API returns the
//! event object a webhook carries (`merchant_id`, `type`, `event_id`, `created_at`,
//! `data`). (PayPal lists and resends events too, but its signature does not cover
//! the body, so its dedupe key binds the id to the body's digest, which a rendering
//! from its API would not reproduce.)
//!
//! The Events API (`POST /v2/events`, Square-Version pinned) searches the last 28
//! days, 100 a page, newest first (`sort: DEFAULT, DESC`), from `created_at.start_at`,
//! the next page by `cursor` with the same query; the seller must have turned event
//! search on (`PUT /v2/events/enable`). `GET /v2/webhooks/subscriptions/{id}` gives
//! the subscription's `event_types`. Square has no API to send an event again: a
//! missing one is admitted from the list without `x-square-hmacsha256-signature`,
//! marked `origin = reconciled`.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::api::{self, ApiError};
use super::{Fetched, Pass, PassError, off_the_workers};
use crate::config::Secret;

/// The `Square-Version` every request pins.
pub const SQUARE_VERSION: &str = "2025-01-23";

#[derive(Debug, Deserialize)]
struct SubscriptionAnswer {
    subscription: Subscription,
}

#[derive(Debug, Deserialize)]
struct Subscription {
    #[serde(default)]
    event_types: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Search<'a> {
    #[serde(borrow, default)]
    events: Vec<&'a RawValue>,
    #[serde(default)]
    cursor: Option<String>,
}

/// The fields of an event a pass reads; the event itself is kept as listed.
#[derive(Debug, Deserialize)]
struct Head {
    event_id: String,
    created_at: String,
    #[serde(rename = "type")]
    kind: String,
}

fn request(
    pass: &Pass<'_>,
    method: http::Method,
    url: &str,
    token: &Secret,
) -> reqwest::RequestBuilder {
    pass.client
        .request(method, url)
        .header(
            http::header::AUTHORIZATION,
            format!("Bearer {}", token.expose()),
        )
        .header("Square-Version", SQUARE_VERSION)
}

/// One page of the search, read.
struct Page {
    /// The events the subscription would have been sent.
    events: Vec<Fetched>,
    not_for_endpoint: u64,
    /// The next page's cursor, when there is one.
    cursor: Option<String>,
}

/// Read a page of `POST /v2/events` (on the blocking pool: it parses every event).
fn read_page(body: &[u8], types: &[String]) -> Result<Page, ApiError> {
    let search: Search<'_> = serde_json::from_slice(body).map_err(ApiError::Decode)?;
    let mut page = Page {
        events: Vec::with_capacity(search.events.len()),
        not_for_endpoint: 0,
        cursor: search.cursor.filter(|c| !c.is_empty()),
    };
    for raw in &search.events {
        let head: Head = serde_json::from_str(raw.get()).map_err(ApiError::Decode)?;
        if !types.contains(&head.kind) {
            page.not_for_endpoint += 1;
            continue;
        }
        let Ok(created) = time::OffsetDateTime::parse(
            &head.created_at,
            &time::format_description::well_known::Rfc3339,
        ) else {
            continue;
        };
        page.events.push(Fetched {
            event_id: head.event_id,
            created_s: created.unix_timestamp(),
            body: bytes::Bytes::copy_from_slice(raw.get().as_bytes()),
        });
    }
    Ok(page)
}

fn rfc3339(unix_s: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix_s)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_string())
}

/// One pass over the seller's events since the mark (or the lookback).
pub async fn reconcile(
    pass: &mut Pass<'_>,
    token: &Secret,
    subscription: &str,
) -> Result<(), PassError> {
    let url = format!("{}/v2/webhooks/subscriptions/{subscription}", pass.base());
    let sub: SubscriptionAnswer = api::call(
        || request(pass, http::Method::GET, &url, token),
        || pass.now_s(),
    )
    .await?
    .json()?;
    let types = std::sync::Arc::new(sub.subscription.event_types);
    let start_at = rfc3339(pass.events_since_s());
    let search_url = format!("{}/v2/events", pass.base());
    let mut cursor: Option<String> = None;
    loop {
        let mut body = serde_json::json!({
            "limit": 100,
            "query": {
                "filter": { "created_at": { "start_at": start_at } },
                "sort": { "field": "DEFAULT", "order": "DESC" }
            }
        });
        if let Some(c) = &cursor {
            body["cursor"] = serde_json::Value::String(c.clone());
        }
        pass.page_turn().await;
        let answer = api::call(
            || request(pass, http::Method::POST, &search_url, token).json(&body),
            || pass.now_s(),
        )
        .await?;
        pass.report.pages += 1;
        let wanted = types.clone();
        let page = off_the_workers(move || read_page(&answer.body, &wanted)).await??;
        pass.report.not_for_endpoint += page.not_for_endpoint;
        let batch = page.events;
        pass.judge_events(batch).await?;
        pass.keep_alive().await?;
        match page.cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    Ok(())
}
