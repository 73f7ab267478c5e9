//! What a source's reconciliation remembers between passes, kept in the store under
//! the source's reconciliation lease (`Reconciling::save_reconcile`), so that the
//! gateway that takes the lease next goes on where the last one stopped.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Most redelivery requests for one delivery GUID: one that keeps failing is left
/// for a person (`hookgate_reconcile_found_total{how="gave_up"}`).
pub const MAX_ASKS: u32 = 3;

/// A source's reconciliation state, as JSON in the store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// The high-water mark: every listed item at or below it was judged. GitHub: the
    /// id of a delivery (they grow); Stripe and Square: the creation time (unix s)
    /// of an event.
    #[serde(default)]
    pub mark: Option<i64>,
    /// GitHub: the GUIDs asked for again and not seen stored yet.
    #[serde(default)]
    pub asked: BTreeMap<String, Asked>,
    /// When a pass last ended without an error (unix ms).
    #[serde(default)]
    pub last_success: Option<i64>,
    /// Passes that failed in a row (the backoff grows with them).
    #[serde(default)]
    pub failures: u32,
    /// No pass before this (unix ms): the backoff, or the provider's `Retry-After`.
    #[serde(default)]
    pub not_before: Option<i64>,
}

/// One GUID asked for again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asked {
    /// How many times (at most [`MAX_ASKS`]).
    pub times: u32,
    /// When it was first asked for (unix ms); forgotten after the lookback.
    pub first_at: i64,
    /// Whether the last ask was the last one allowed and the GUID was still missing
    /// after it (counted once as given up).
    #[serde(default)]
    pub gave_up: bool,
}

impl State {
    /// The state kept in the store, or a fresh one when none was kept or the kept
    /// text does not read (a newer release's, say): reconciliation then starts over
    /// from the lookback, which dedupe makes safe.
    pub fn read(text: Option<&str>) -> State {
        text.and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default()
    }

    pub fn write(&self) -> String {
        // A map of strings and numbers always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Forget the GUIDs first asked for before `cutoff` (unix ms).
    pub fn forget_asked_before(&mut self, cutoff: i64) {
        self.asked.retain(|_, a| a.first_at >= cutoff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_round_trips_and_an_unreadable_one_starts_over() {
        let mut s = State {
            mark: Some(42),
            last_success: Some(7),
            ..State::default()
        };
        s.asked.insert(
            "guid".into(),
            Asked {
                times: 2,
                first_at: 100,
                gave_up: false,
            },
        );
        assert_eq!(State::read(Some(&s.write())), s);
        assert_eq!(State::read(Some("{not json")), State::default());
        assert_eq!(State::read(None), State::default());
        s.forget_asked_before(101);
        assert!(s.asked.is_empty());
    }
}
