//! A pull lease's receipt: what a consumer hands back to acknowledge or refuse a
//! delivery it took.
//!
//! A receipt names the delivery (entry id; the route is in the URL) and the store's
//! lease token of the claim that handed it out, which is what makes it good: a
//! completion applies only while that claim still holds the delivery, so a receipt
//! cannot be forged without the random token, and an old one (its lease expired and
//! the delivery handed out again) changes nothing. It also carries the lease's end,
//! so that any gateway sharing the store can tell an expired receipt, and the Redis
//! work-stream message the claim came through. It is opaque to consumers: URL-safe
//! base64 of a small JSON object.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The longest receipt read: anything longer is not one of ours.
const MAX_LEN: usize = 1024;

/// What a receipt says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Receipt {
    /// The store's lease token of the claim.
    #[serde(rename = "t")]
    pub token: String,
    /// The entry id.
    #[serde(rename = "e")]
    pub entry_id: String,
    /// When the lease ends (unix ms).
    #[serde(rename = "u")]
    pub until: i64,
    /// The Redis work-stream message the claim was handed out through.
    #[serde(rename = "m", default, skip_serializing_if = "Option::is_none")]
    pub stream_message: Option<String>,
}

impl Receipt {
    /// The receipt as a consumer holds it.
    pub fn encode(&self) -> String {
        // (Serializing a struct of strings and a number cannot fail.)
        let json = serde_json::to_vec(self).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(json)
    }

    /// Read a receipt a consumer handed back; `None` when it is not one.
    pub fn decode(text: &str) -> Option<Receipt> {
        if text.is_empty() || text.len() > MAX_LEN {
            return None;
        }
        let json = URL_SAFE_NO_PAD.decode(text).ok()?;
        serde_json::from_slice(&json).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_reads_back_and_garbage_is_none() {
        let r = Receipt {
            token: "0192".into(),
            entry_id: "01J".into(),
            until: 1_700_000_000_000,
            stream_message: Some("1-0".into()),
        };
        assert_eq!(Receipt::decode(&r.encode()), Some(r));
        assert_eq!(Receipt::decode(""), None);
        assert_eq!(Receipt::decode("not base64 !"), None);
        assert_eq!(Receipt::decode(&URL_SAFE_NO_PAD.encode(b"[1]")), None);
        assert_eq!(Receipt::decode(&"A".repeat(MAX_LEN + 1)), None);
    }
}
