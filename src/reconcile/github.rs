//! GitHub: the hook's recent deliveries, and a redelivery of each one hookgate did
//! not store.
//!
//! GitHub does not retry a failed delivery. Its REST API lists a hook's deliveries
//! of the last 3 days (GitHub Enterprise Server: 7), newest first, 100 a page, the
//! next page in the `link` header (a cursor, not a time): `GET
//! /repos/{owner}/{repo}/hooks/{id}/deliveries`, `/orgs/{org}/hooks/{id}/deliveries`,
//! or `/app/hook/deliveries` for a GitHub App's webhook. Each delivery has its
//! `id` (growing), `guid` (the `X-GitHub-Delivery` of the request, the same on a
//! redelivery), `delivered_at`, `redelivery` and `status_code`. `POST
//! …/deliveries/{id}/attempts` asks GitHub to send it again (202): it arrives
//! signed, through ingest and dedupe like any other.
//!
//! A pass judges the deliveries above the high-water mark (their `id`), back to the
//! lookback, and older than `settle` (a delivery still being answered). A GUID is
//! stored when the source holds an entry with that event id received around one of
//! its deliveries (GitHub's dedupe key binds the GUID to the body, which the list
//! does not give, so the entries are read by time, not by key). A GUID not stored is
//! asked for again, at most [`MAX_ASKS`] times; once its redelivery is stored, the
//! entry is marked `redelivered` and audited.
//!
//! Requests pin `X-GitHub-Api-Version: 2022-11-28`. A token is sent as `Bearer`; a
//! GitHub App signs a JWT (RS256, `iat` 60 s in the past for clock drift, `exp` 9
//! minutes ahead, `iss` its id) with its private key.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::Deserialize;

use super::api::{self, ApiError, within_base};
use super::state::{Asked, MAX_ASKS};
use super::{Pass, PassError};
use crate::config::{GitHubAuth, GitHubHook};
use crate::store::{ListQuery, MAX_PAGE, Origin};

/// How far around a delivery's time its entry is looked for (GitHub's clock and
/// ours, a slow answer).
pub const AROUND: Duration = Duration::from_secs(5 * 60);
/// The REST API version every request pins.
pub const API_VERSION: &str = "2022-11-28";

/// One delivery as the list gives it (the fields a pass reads).
#[derive(Debug, Clone, Deserialize)]
pub struct Delivery {
    pub id: i64,
    pub guid: String,
    pub delivered_at: String,
}

/// The claims of a GitHub App's JWT.
#[derive(Debug, serde::Serialize, Deserialize)]
pub struct AppClaims {
    pub iat: i64,
    pub exp: i64,
    pub iss: String,
}

/// The App's JWT at `now_s`: RS256, issued 60 s ago, expiring in 9 minutes.
pub fn app_jwt(app_id: &str, private_key_pem: &str, now_s: i64) -> Result<String, ApiError> {
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(private_key_pem.as_bytes())
        .map_err(ApiError::Jwt)?;
    let claims = AppClaims {
        iat: now_s - 60,
        exp: now_s + 9 * 60,
        iss: app_id.to_string(),
    };
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        &claims,
        &key,
    )
    .map_err(ApiError::Jwt)
}

/// The `next` URL of a `link` header (RFC 8288), if it has one.
pub fn next_link(headers: &http::HeaderMap) -> Option<String> {
    let value = headers.get(http::header::LINK)?.to_str().ok()?;
    value.split(',').find_map(|part| {
        let (url, params) = part.trim().split_once(';')?;
        let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
        params
            .split(';')
            .any(|p| {
                let p = p.trim();
                p == "rel=\"next\"" || p == "rel=next"
            })
            .then(|| url.to_string())
    })
}

/// Unix ms of an RFC 3339 time.
fn unix_ms(text: &str) -> Option<i64> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

struct Client<'a> {
    pass: &'a Pass<'a>,
    hook: &'a GitHubHook,
    auth: &'a GitHubAuth,
}

impl Client<'_> {
    fn authorization(&self) -> Result<String, ApiError> {
        Ok(match self.auth {
            GitHubAuth::Token(t) => format!("Bearer {}", t.expose()),
            GitHubAuth::App {
                app_id,
                private_key,
            } => format!(
                "Bearer {}",
                app_jwt(app_id, private_key.expose(), self.pass.now_ms / 1000)?
            ),
        })
    }

    fn request(&self, method: http::Method, url: &str, auth: &str) -> reqwest::RequestBuilder {
        self.pass
            .client
            .request(method, url)
            .header(http::header::ACCEPT, "application/vnd.github+json")
            .header("X-GitHub-Api-Version", API_VERSION)
            .header(http::header::AUTHORIZATION, auth)
    }

    async fn page(&self, url: &str) -> Result<(Vec<Delivery>, Option<String>), ApiError> {
        let auth = self.authorization()?;
        let answer = api::call(
            || self.request(http::Method::GET, url, &auth),
            || self.pass.now_s(),
        )
        .await?;
        let deliveries: Vec<Delivery> = answer.json()?;
        let next = next_link(&answer.headers)
            .map(|n| within_base(self.pass.base(), &n))
            .transpose()?;
        Ok((deliveries, next))
    }

    async fn redeliver(&self, id: i64) -> Result<(), ApiError> {
        let auth = self.authorization()?;
        let url = format!(
            "{}{}/{id}/attempts",
            self.pass.base(),
            self.hook.deliveries_path()
        );
        api::call(
            || self.request(http::Method::POST, &url, &auth),
            || self.pass.now_s(),
        )
        .await?;
        Ok(())
    }
}

/// What a pass learned of one GUID.
struct Seen {
    /// Its newest delivery (the one asked for again).
    newest_id: i64,
    /// Its deliveries' times (unix ms).
    times: Vec<i64>,
}

/// One pass over `hook`'s deliveries.
pub async fn reconcile(
    pass: &mut Pass<'_>,
    hook: &GitHubHook,
    auth: &GitHubAuth,
) -> Result<(), PassError> {
    let settle_cutoff = pass.settle_cutoff_ms();
    let mark = pass.mark();
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let mut newest_judged: Option<i64> = None;
    let mut oldest_skipped: Option<i64> = None;
    let first = format!("{}{}?per_page=100", pass.base(), hook.deliveries_path());
    let mut url = Some(first);
    'pages: while let Some(u) = url.take() {
        pass.page_turn().await;
        let (deliveries, next) = {
            let client = Client {
                pass: &*pass,
                hook,
                auth,
            };
            client.page(&u).await?
        };
        pass.report.pages += 1;
        for d in deliveries {
            let Some(at) = unix_ms(&d.delivered_at) else {
                continue;
            };
            if mark.is_some_and(|m| d.id <= m) || at < pass.since_ms {
                break 'pages;
            }
            if at > settle_cutoff {
                oldest_skipped = Some(oldest_skipped.map_or(d.id, |o: i64| o.min(d.id)));
                continue;
            }
            pass.report.listed += 1;
            newest_judged = Some(newest_judged.map_or(d.id, |n: i64| n.max(d.id)));
            let s = seen.entry(d.guid).or_insert(Seen {
                newest_id: d.id,
                times: Vec::new(),
            });
            s.newest_id = s.newest_id.max(d.id);
            s.times.push(at);
        }
        url = next;
        pass.keep_alive().await?;
    }
    let stored = stored_guids(pass, &seen).await?;
    let mut missing: Vec<(String, i64)> = Vec::new();
    for (guid, s) in &seen {
        match stored.get(guid) {
            Some(entry) => {
                pass.report.stored += 1;
                if pass.state.asked.contains_key(guid) {
                    pass.recovered(entry, Origin::Redelivered, guid).await?;
                    pass.state.asked.remove(guid);
                }
            }
            None => missing.push((guid.clone(), s.newest_id)),
        }
    }
    missing.sort_by_key(|(_, id)| *id);
    for (guid, id) in missing {
        pass.report.missing += 1;
        pass.note_missing(&guid);
        let asked = pass.state.asked.get(&guid).map_or(0, |a| a.times);
        if asked >= MAX_ASKS {
            if let Some(a) = pass.state.asked.get_mut(&guid)
                && !a.gave_up
            {
                a.gave_up = true;
                pass.gave_up(&guid);
            }
            continue;
        }
        if pass.dry_run {
            pass.report.asked += 1;
            continue;
        }
        let client = Client {
            pass: &*pass,
            hook,
            auth,
        };
        client.redeliver(id).await?;
        let now = pass.now_ms;
        let entry = pass.state.asked.entry(guid.clone()).or_insert(Asked {
            times: 0,
            first_at: now,
            gave_up: false,
        });
        entry.times += 1;
        pass.asked(&guid);
    }
    if let Some(newest) = newest_judged {
        // Never past a delivery left for the next pass.
        let mark = match oldest_skipped {
            Some(skipped) => newest.min(skipped - 1),
            None => newest,
        };
        pass.advance_mark(mark);
    }
    Ok(())
}

/// The GUIDs of `seen` the source holds an entry for, with the entry's id: the
/// event ids of the entries received around the deliveries' times.
async fn stored_guids(
    pass: &Pass<'_>,
    seen: &HashMap<String, Seen>,
) -> Result<HashMap<String, String>, PassError> {
    let mut found = HashMap::new();
    let times = seen.values().flat_map(|s| s.times.iter().copied());
    let (Some(oldest), Some(newest)) = (times.clone().min(), times.max()) else {
        return Ok(found);
    };
    let around = AROUND.as_millis() as i64;
    let wanted: HashSet<&str> = seen.keys().map(String::as_str).collect();
    let mut cursor = None;
    loop {
        let page = pass
            .store
            .list(&ListQuery {
                source: Some(pass.source.name.clone()),
                since: Some(oldest - around),
                until: Some(newest + around),
                limit: MAX_PAGE,
                cursor,
                ..ListQuery::default()
            })
            .await
            .map_err(PassError::Store)?;
        for e in page.entries {
            if let Some(id) = e.event_id
                && wanted.contains(id.as_str())
            {
                found.entry(id).or_insert(e.id);
            }
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_is_read_from_the_link_header() {
        let mut h = http::HeaderMap::new();
        assert_eq!(next_link(&h), None);
        h.insert(
            http::header::LINK,
            "<https://api.github.com/x?per_page=100&cursor=v1_2>; rel=\"next\", <https://api.github.com/x?per_page=100>; rel=\"first\""
                .parse()
                .unwrap(),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("https://api.github.com/x?per_page=100&cursor=v1_2")
        );
        h.insert(
            http::header::LINK,
            "<https://api.github.com/x?page=1>; rel=\"prev\""
                .parse()
                .unwrap(),
        );
        assert_eq!(next_link(&h), None);
    }

    #[test]
    fn delivery_times_read_as_unix_ms() {
        assert_eq!(unix_ms("2019-06-03T00:57:16Z"), Some(1_559_523_436_000));
        assert_eq!(unix_ms("yesterday"), None);
    }
}
