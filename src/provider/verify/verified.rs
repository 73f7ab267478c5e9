//! The verdict: a request whose signature holds, and what it tells about the event
//! (its id and type, whether it is a handshake, what identifies its content, and
//! how it is deduplicated).

use sha2::Digest as _;

use super::context::Context;
use super::json_pointer::{json_pointer_text, raw_pointer};
use super::keys::Key;
use super::{MAX_EVENT_ID_LEN, MAX_PLAIN_TOKEN_LEN};
use crate::provider::spec::{Handshake, Segment, Spec};

/// A request whose signature holds. Gives access to the event metadata.
pub struct Verified<'a> {
    pub(super) ctx: Context<'a>,
    pub(super) spec: &'a Spec,
    /// The key that verified the request (a Zoom handshake answers with it).
    pub(super) key: Option<&'a Key>,
    /// The signed timestamp, in unix seconds, when the provider signs one.
    pub timestamp: Option<i64>,
}

/// What a handshake request must be answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeReply {
    /// Answer 200 with this text (`text/plain`).
    Text(String),
    /// Answer 200 with this JSON document (`application/json`).
    Json(serde_json::Value),
}

/// How a verified event is recognised when it comes again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventIdentity {
    /// The provider's event id, when the request carries one.
    pub event_id: Option<String>,
    /// What the store dedupes on; see [`Verified::identity`].
    pub dedupe_key: String,
}

impl Verified<'_> {
    /// The provider's event id (stable across its retries), if the request has one.
    /// Ids longer than [`MAX_EVENT_ID_LEN`] are replaced by their SHA-256.
    pub fn event_id(&self) -> Option<String> {
        let id = self
            .spec
            .event_id
            .iter()
            .find_map(|t| self.ctx.template(t))?;
        if id.len() > MAX_EVENT_ID_LEN {
            Some(format!("sha256:{}", hex::encode(sha2::Sha256::digest(id))))
        } else {
            Some(id)
        }
    }

    /// The first of `templates` the request has a value for: an ordering key (the
    /// route's `order.by`, or the spec's `event.object`).
    pub fn first_value(
        &self,
        templates: &[crate::provider::spec::ValueTemplate],
    ) -> Option<String> {
        templates.iter().find_map(|t| self.ctx.template(t))
    }

    /// The event type, if the request names one.
    pub fn event_type(&self) -> Option<String> {
        let t = self
            .spec
            .event_type
            .iter()
            .find_map(|t| self.ctx.template(t))?;
        (t.len() <= MAX_EVENT_ID_LEN).then_some(t)
    }

    /// What dedupes a request by its content: `body-sha256:<hex>` of the raw body or,
    /// when the provider signs decoded form parameters rather than the bytes (Twilio),
    /// `form-sha256:<hex>` of those parameters in canonical order, so that a captured
    /// request whose parameters were reordered or re-encoded is still a duplicate.
    ///
    /// A spec whose signature does not cover the body may name the part that
    /// identifies the event (`event.digest`, Mailgun's `json:/event-data`): the digest
    /// is then `part-sha256:<hex>` of that part as written, so that a redelivery whose
    /// signature block was signed afresh is still a duplicate, and a forged event
    /// under a genuine signature block is not.
    pub fn content_digest(&self) -> String {
        if let Some(ptr) = &self.spec.event_digest
            && let Ok(root) =
                serde_json::from_slice::<&serde_json::value::RawValue>(self.ctx.req.body)
            && let Some(part) = raw_pointer(root, ptr)
        {
            return format!("part-sha256:{}", sha256_hex(part.get().as_bytes()));
        }
        let signs_form = self.spec.content.contains(&Segment::FormSorted)
            && !self.spec.content.contains(&Segment::Body)
            && !self.ctx.digest_bound;
        if signs_form && let Ok(params) = self.ctx.sorted_form() {
            let mut hasher = sha2::Sha256::new();
            for (name, value) in params {
                for part in [name, value] {
                    hasher.update((part.len() as u64).to_be_bytes());
                    hasher.update(part.as_bytes());
                }
            }
            return format!("form-sha256:{}", hex::encode(hasher.finalize()));
        }
        format!("body-sha256:{}", sha256_hex(self.ctx.req.body))
    }

    /// The event id and the dedupe key, together (the id is read once).
    ///
    /// The key trusts an id alone only when the signature covers both the id and the
    /// whole body; otherwise it binds the id to the [content
    /// digest](Self::content_digest), and without an id the digest alone is the key.
    /// The key strings are stored with every entry: changing their form would make
    /// every stored key miss.
    pub fn identity(&self) -> EventIdentity {
        let event_id = self.event_id();
        let dedupe_key = match &event_id {
            // The signature covers the id and the whole body: the id alone identifies it.
            Some(id) if self.spec.event_id_is_signed() && self.spec.signs_whole_body() => {
                format!("id:{id}")
            }
            // The id is not signed (GitHub's X-GitHub-Delivery, Shopify's
            // X-Shopify-Event-Id), or the body is not (Mailgun signs a token, not the
            // event): bind the id to the body, so that whoever replays a captured request
            // under someone else's id, or posts a genuine signature block with a forged
            // body first, cannot make the genuine webhook a duplicate. A genuine
            // redelivery has the same id and the same body.
            Some(id) => format!("id:{id}:{}", self.content_digest()),
            None => self.content_digest(),
        };
        EventIdentity {
            event_id,
            dedupe_key,
        }
    }

    /// The key the store dedupes this event on; see [`Verified::identity`].
    pub fn dedupe_key(&self) -> String {
        self.identity().dedupe_key
    }

    /// The answer to a provider handshake, when this request is one.
    pub fn handshake(&self) -> Option<HandshakeReply> {
        let kind = self.spec.handshake?;
        // Cheap borrowed lookups decide whether this is a handshake at all; ordinary
        // events never build a JSON tree here.
        let body = self.ctx.req.body;
        match kind {
            Handshake::SlackUrlVerification => {
                if json_pointer_text(body, "/type")? != "url_verification" {
                    return None;
                }
                Some(HandshakeReply::Text(json_pointer_text(body, "/challenge")?))
            }
            Handshake::ZoomUrlValidation => {
                if json_pointer_text(body, "/event")? != "endpoint.url_validation" {
                    return None;
                }
                let json = self.ctx.json()?;
                let plain = json.pointer("/payload/plainToken")?.as_str()?;
                if plain.is_empty() || plain.len() > MAX_PLAIN_TOKEN_LEN {
                    return None;
                }
                let encrypted = hex::encode(self.key?.mac(plain.as_bytes())?);
                Some(HandshakeReply::Json(serde_json::json!({
                    "plainToken": plain,
                    "encryptedToken": encrypted,
                })))
            }
            Handshake::DiscordPing => {
                if json_pointer_text(body, "/type")? != "1" {
                    return None;
                }
                // Interactions PING is type 1; Discord's webhook events also use type
                // 1, for events, and always carry an `event` object.
                let json = self.ctx.json()?;
                if json.get("type")?.as_u64()? != 1 || json.get("event").is_some() {
                    return None;
                }
                Some(HandshakeReply::Json(serde_json::json!({"type": 1})))
            }
            Handshake::TwitchChallenge => {
                let kind = self
                    .ctx
                    .req
                    .headers
                    .get("twitch-eventsub-message-type")?
                    .as_bytes();
                if kind != b"webhook_callback_verification" {
                    return None;
                }
                let challenge = json_pointer_text(body, "/challenge")?;
                if challenge.is_empty() || challenge.len() > MAX_PLAIN_TOKEN_LEN {
                    return None;
                }
                Some(HandshakeReply::Text(challenge))
            }
            // Answered on GET, or before verification, never from a verified body.
            Handshake::MetaSubscribe
            | Handshake::OktaVerification
            | Handshake::DropboxChallenge
            | Handshake::GraphValidation
            | Handshake::SnsSubscription
            | Handshake::HeadCheck
            | Handshake::HookSecret => None,
        }
    }
}

/// The SHA-256 of `bytes`, hex.
fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}
