//! The Redis store's console records: the control audit (one list, newest first,
//! trimmed to [`CONTROL_AUDIT_KEEP`]) and revoked console sessions (a key per
//! revoked session that Redis expires when the session would have, and one time
//! before which every session is revoked). The session keys share the hash tag
//! `{console}`, so that one `MGET` reads both on a cluster. Also the providers' last
//! good ranges, and per source its armed handshake and the secrets established in
//! it (`store::secrets`), under the source's hash tag so that one script keeps a
//! secret and disarms the handshake.

use redis::AsyncCommands;

use super::RedisStore;
use crate::store::{
    CONTROL_AUDIT_KEEP, ControlEvent, Establish, EstablishedSecret, MAX_ESTABLISHED_SECRETS,
    StoreError, TokenHash,
};

/// The hash tag of the session keys (no source key ends in these suffixes).
const CONSOLE: &str = "console";
/// The hash tag of the providers' last good address ranges.
const RANGES: &str = "ranges";
/// The route registry's hash (`store::routes`).
const KNOWN_ROUTES: &str = "known_routes";

impl RedisStore {
    fn control_audit_key(&self) -> String {
        format!("{}:control_audit", self.prefix)
    }

    fn revoked_key(&self, id: &str) -> String {
        self.key(CONSOLE, &format!("session_revoked:{id}"))
    }

    fn revoked_until_key(&self) -> String {
        self.key(CONSOLE, "sessions_revoked_until")
    }

    pub(super) async fn push_control(&self, event: &ControlEvent) -> Result<(), StoreError> {
        let json = serde_json::to_string(event).map_err(|source| StoreError::Encode {
            what: "the control audit record",
            source,
        })?;
        let key = self.control_audit_key();
        let mut c = self.conn();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .lpush(&key, json)
            .ignore()
            .ltrim(&key, 0, CONTROL_AUDIT_KEEP as isize - 1)
            .ignore();
        self.timed(pipe.query_async::<()>(&mut c)).await
    }

    pub(super) async fn read_controls(
        &self,
        limit: usize,
    ) -> Result<Vec<ControlEvent>, StoreError> {
        let limit = limit.min(CONTROL_AUDIT_KEEP);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut c = self.conn();
        let raw: Vec<String> = self
            .timed(c.lrange(self.control_audit_key(), 0, limit as isize - 1))
            .await?;
        // A record that does not parse is skipped, as in an entry's audit trail.
        Ok(raw
            .iter()
            .filter_map(|r| serde_json::from_str(r).ok())
            .collect())
    }

    pub(super) async fn revoke(
        &self,
        id: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<(), StoreError> {
        // Already expired: nothing to keep (a session past its expiry is refused).
        let Ok(ttl) = u64::try_from(expires_at.saturating_sub(now)) else {
            return Ok(());
        };
        if ttl == 0 {
            return Ok(());
        }
        let mut c = self.conn();
        self.timed(c.pset_ex::<_, _, ()>(self.revoked_key(id), 1, ttl))
            .await
    }

    pub(super) async fn revoke_until(&self, at: i64) -> Result<(), StoreError> {
        let mut inv = self.scripts.raise.prepare_invoke();
        inv.key(self.revoked_until_key()).arg(at);
        let mut c = self.conn();
        self.timed(inv.invoke_async::<i64>(&mut c)).await?;
        Ok(())
    }

    pub(super) async fn is_revoked(&self, id: &str, issued_at: i64) -> Result<bool, StoreError> {
        let mut c = self.conn();
        let (one, until): (Option<String>, Option<String>) = self
            .timed(
                redis::cmd("MGET")
                    .arg(self.revoked_key(id))
                    .arg(self.revoked_until_key())
                    .query_async(&mut c),
            )
            .await?;
        let until = until.and_then(|u| u.parse::<i64>().ok());
        Ok(one.is_some() || until.is_some_and(|u| issued_at <= u))
    }
}

impl RedisStore {
    /// A provider's last good ranges, keyed by a digest of the URL they came from.
    fn ranges_key(&self, url: &str) -> String {
        use sha2::Digest as _;
        let digest = hex::encode(sha2::Sha256::digest(url.as_bytes()));
        self.key(RANGES, &digest[..32])
    }

    /// The route registry: one hash, a field per `source/route` (names hold no
    /// `/`) whose value is the route's JSON.
    fn known_routes_key(&self) -> String {
        self.key(KNOWN_ROUTES, "all")
    }

    pub(super) async fn get_known_routes(
        &self,
    ) -> Result<Vec<crate::store::KnownRoute>, StoreError> {
        let mut c = self.conn();
        let all: Vec<String> = self
            .timed(c.hvals::<_, Vec<String>>(self.known_routes_key()))
            .await?;
        // A record that does not parse is skipped, as in the control audit.
        Ok(all
            .iter()
            .filter_map(|v| serde_json::from_str(v).ok())
            .collect())
    }

    pub(super) async fn put_known_routes(
        &self,
        routes: &[crate::store::KnownRoute],
    ) -> Result<(), StoreError> {
        if routes.is_empty() {
            return Ok(());
        }
        let mut fields = Vec::with_capacity(routes.len());
        for r in routes {
            let json = serde_json::to_string(r).map_err(|source| StoreError::Encode {
                what: "a known route",
                source,
            })?;
            fields.push((format!("{}/{}", r.source, r.route), json));
        }
        let mut c = self.conn();
        self.timed(c.hset_multiple::<_, _, _, ()>(self.known_routes_key(), &fields))
            .await
    }

    pub(super) async fn drop_known_route(
        &self,
        source: &str,
        route: &str,
    ) -> Result<(), StoreError> {
        let mut c = self.conn();
        self.timed(c.hdel::<_, _, ()>(self.known_routes_key(), format!("{source}/{route}")))
            .await
    }

    pub(super) async fn put_ranges(
        &self,
        url: &str,
        ranges: &crate::store::SavedRanges,
    ) -> Result<(), StoreError> {
        let mut c = self.conn();
        self.timed(c.hset_multiple::<_, _, _, ()>(
            self.ranges_key(url),
            &[
                ("url", url.to_string()),
                ("ranges", ranges.ranges.clone()),
                ("fetched_at", ranges.fetched_at.to_string()),
            ],
        ))
        .await
    }

    pub(super) async fn get_ranges(
        &self,
        url: &str,
    ) -> Result<Option<crate::store::SavedRanges>, StoreError> {
        let mut c = self.conn();
        let (stored_url, ranges, fetched_at): (Option<String>, Option<String>, Option<String>) =
            self.timed(
                redis::cmd("HMGET")
                    .arg(self.ranges_key(url))
                    .arg("url")
                    .arg("ranges")
                    .arg("fetched_at")
                    .query_async(&mut c),
            )
            .await?;
        Ok(match (stored_url, ranges, fetched_at) {
            (Some(u), Some(ranges), Some(at)) if u == url => Some(crate::store::SavedRanges {
                ranges,
                fetched_at: at.parse().unwrap_or(0),
            }),
            _ => None,
        })
    }
}

/// A secret as the Redis store keeps it, in its source's hash of secrets.
#[derive(serde::Serialize, serde::Deserialize)]
struct SecretRecord {
    secret: String,
    established_at: i64,
}

impl RedisStore {
    /// The source's arming: a hash of `until` (unix ms) and `token_hash`.
    fn handshake_key(&self, source: &str) -> String {
        self.key(source, "armed_handshake")
    }

    /// Where armings were kept before they had a token (`until` alone): removed
    /// when the source is armed again, so that a gateway of an older release still
    /// running on the store has no arming to take a tokenless handshake in.
    fn legacy_handshake_key(&self, source: &str) -> String {
        self.key(source, "handshake")
    }

    fn secrets_key(&self, source: &str) -> String {
        self.key(source, "secrets")
    }

    pub(super) async fn put_handshake(
        &self,
        source: &str,
        until: i64,
        token: &TokenHash,
    ) -> Result<(), StoreError> {
        let key = self.handshake_key(source);
        let mut c = self.conn();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .del(&key)
            .ignore()
            .hset_multiple(
                &key,
                &[
                    ("until", until.to_string()),
                    ("token_hash", token.as_str().to_string()),
                ],
            )
            .ignore()
            .del(self.legacy_handshake_key(source))
            .ignore();
        self.timed(pipe.query_async::<()>(&mut c)).await
    }

    pub(super) async fn get_handshake(
        &self,
        source: &str,
        now: i64,
    ) -> Result<Option<i64>, StoreError> {
        let mut c = self.conn();
        let until: Option<String> = self
            .timed(c.hget(self.handshake_key(source), "until"))
            .await?;
        Ok(until
            .and_then(|u| u.parse::<i64>().ok())
            .filter(|&u| u > now))
    }

    pub(super) async fn keep_secret(
        &self,
        source: &str,
        secret: &EstablishedSecret,
        token: &TokenHash,
        now: i64,
    ) -> Result<Establish, StoreError> {
        let record = serde_json::to_string(&SecretRecord {
            secret: secret.secret.clone(),
            established_at: secret.established_at,
        })
        .map_err(|source| StoreError::Encode {
            what: "an established secret",
            source,
        })?;
        let mut inv = self.scripts.establish.prepare_invoke();
        inv.key(self.handshake_key(source))
            .key(self.secrets_key(source))
            .arg(now)
            .arg(token.as_str())
            .arg(&secret.id)
            .arg(record)
            .arg(MAX_ESTABLISHED_SECRETS);
        let mut c = self.conn();
        let (code, kept): (i64, String) = self.timed(inv.invoke_async(&mut c)).await?;
        Ok(match code {
            1 => {
                Establish::Kept(decode_secret(&secret.id, &kept).unwrap_or_else(|| secret.clone()))
            }
            -1 => Establish::Full,
            -2 => Establish::WrongToken,
            _ => Establish::NotArmed,
        })
    }

    pub(super) async fn read_secrets(
        &self,
        source: &str,
    ) -> Result<Vec<EstablishedSecret>, StoreError> {
        let mut c = self.conn();
        let all: Vec<(String, String)> = self.timed(c.hgetall(self.secrets_key(source))).await?;
        // A record that does not parse is skipped, as an audit record is.
        let mut secrets: Vec<EstablishedSecret> = all
            .iter()
            .filter_map(|(id, record)| decode_secret(id, record))
            .collect();
        secrets.sort_by(|a, b| (a.established_at, &a.id).cmp(&(b.established_at, &b.id)));
        Ok(secrets)
    }

    pub(super) async fn drop_secret(&self, source: &str, id: &str) -> Result<bool, StoreError> {
        let mut c = self.conn();
        let removed: i64 = self.timed(c.hdel(self.secrets_key(source), id)).await?;
        Ok(removed > 0)
    }
}

fn decode_secret(id: &str, record: &str) -> Option<EstablishedSecret> {
    let r: SecretRecord = serde_json::from_str(record).ok()?;
    Some(EstablishedSecret {
        id: id.to_string(),
        secret: r.secret,
        established_at: r.established_at,
    })
}
