//! How an entry came to hookgate: by a request to its source's ingest URL, or by
//! reconciliation with the provider's API (admitted from it, or sent again at its
//! request). Kept with the entry so that operators, and the app it is delivered to,
//! can tell the webhooks hookgate recovered from the ones it received as they were
//! sent.

use serde::{Deserialize, Serialize};

/// How an entry came to hookgate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// A request to its source's ingest URL (every entry before reconciliation existed).
    #[default]
    Received,
    /// Admitted by reconciliation from the provider's API: no request reached hookgate.
    Reconciled,
    /// Arrived as a request that reconciliation asked the provider to send again.
    Redelivered,
}

impl Origin {
    /// Every origin, in the order above.
    pub const ALL: [Origin; 3] = [Origin::Received, Origin::Reconciled, Origin::Redelivered];

    /// The origin as the store keeps it (and as JSON and the delivery header name it).
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Received => "received",
            Origin::Reconciled => "reconciled",
            Origin::Redelivered => "redelivered",
        }
    }

    /// The origin named by [`Origin::as_str`]; `None` for any other text.
    pub fn parse(s: &str) -> Option<Origin> {
        Some(match s {
            "received" => Origin::Received,
            "reconciled" => Origin::Reconciled,
            "redelivered" => Origin::Redelivered,
            _ => return None,
        })
    }

    /// Whether reconciliation brought the entry in (it is not as received).
    pub fn is_recovered(self) -> bool {
        self != Origin::Received
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_origin_reads_back_from_its_name_and_its_json() {
        for o in Origin::ALL {
            assert_eq!(Origin::parse(o.as_str()), Some(o));
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{}\"", o.as_str()));
            assert_eq!(serde_json::from_str::<Origin>(&json).unwrap(), o);
        }
        assert_eq!(Origin::parse("Received"), None);
        assert_eq!(Origin::parse(""), None);
        assert_eq!(Origin::default(), Origin::Received);
        assert!(!Origin::Received.is_recovered());
        assert!(Origin::Reconciled.is_recovered());
        assert!(Origin::Redelivered.is_recovered());
    }
}
