//! What reconciliation with a provider (`crate::reconcile`) keeps in the store: which
//! of the events a provider's API lists the dedupe store holds, the origin of the
//! entries it recovered, and per source a lease and a state, so that of the gateways
//! sharing a store one at a time asks a provider's API, and the next one goes on
//! where the last stopped.

use async_trait::async_trait;

use super::{Origin, StoreError};

/// The most dedupe keys one [`Reconciling::dedupe_lookup`] asks about.
pub const MAX_LOOKUP_KEYS: usize = 1000;

/// The largest reconciliation state [`Reconciling::save_reconcile`] keeps, in bytes.
pub const MAX_RECONCILE_STATE: usize = 1024 * 1024;

/// What reconciliation with a provider keeps in the store (`crate::reconcile`),
/// shared by every gateway on it.
#[async_trait]
pub trait Reconciling: Send + Sync + 'static {
    /// Which of `keys` (dedupe keys of `source`, as `NewEntry::dedupe_key`) the
    /// dedupe store holds at `now` (unix ms): for each, in the order asked, the id of
    /// the entry it names, or `None` (never seen, or its TTL ran out). At most 1,000
    /// keys per call ([`MAX_LOOKUP_KEYS`]; more is [`StoreError::TooLarge`]); reads
    /// only the dedupe index.
    ///
    /// On Redis a dedupe key expires by itself (`PX`), by Redis's clock: there a key
    /// whose TTL ran out is gone whatever `now` says.
    async fn dedupe_lookup(
        &self,
        source: &str,
        keys: &[String],
        now: i64,
    ) -> Result<Vec<Option<String>>, StoreError>;

    /// Set the origin of entry `id` to `origin` and add an audit event (action
    /// `recovered`, [`RECOVERED_ACTION`](super::RECOVERED_ACTION); actor `hookgate`,
    /// [`RECOVERED_ACTOR`](super::RECOVERED_ACTOR); the `note`, at `now`) to its
    /// trail, in one atomic step. Whether the entry was found.
    async fn mark_origin(
        &self,
        id: &str,
        origin: Origin,
        note: &str,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Take `source`'s reconciliation lease for `holder` until `until` (unix ms)
    /// unless another holder's lease runs past `now` (a holder taking its own lease
    /// again renews it). Atomic across every gateway on the store.
    async fn lease_reconcile(
        &self,
        source: &str,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<ReconcileLease, StoreError>;

    /// Keep `state` (opaque text, at most 1 MiB: [`MAX_RECONCILE_STATE`], more is
    /// [`StoreError::TooLarge`]; the caller's JSON) as `source`'s reconciliation
    /// state if `holder` holds its lease at `now`, atomically with that check;
    /// whether it was kept. Durable.
    async fn save_reconcile(
        &self,
        source: &str,
        holder: &str,
        state: &str,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// End `holder`'s lease on `source` (the state stays). A lease held by another
    /// is left alone.
    async fn release_reconcile(&self, source: &str, holder: &str) -> Result<(), StoreError>;
}

/// What [`Reconciling::lease_reconcile`] answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReconcileLease {
    /// The lease is `holder`'s until `until`; the state kept last (`None` before any save).
    Taken { state: Option<String> },
    /// Another holder's lease runs until `until`.
    Held { holder: String, until: i64 },
}

/// `keys` as [`Reconciling::dedupe_lookup`] takes them: at most [`MAX_LOOKUP_KEYS`].
pub(crate) fn check_lookup(keys: &[String]) -> Result<(), StoreError> {
    match keys.len() > MAX_LOOKUP_KEYS {
        true => Err(StoreError::TooLarge {
            what: "a dedupe lookup's keys",
            size: keys.len(),
            limit: MAX_LOOKUP_KEYS,
        }),
        false => Ok(()),
    }
}

/// `state` as [`Reconciling::save_reconcile`] keeps it: at most
/// [`MAX_RECONCILE_STATE`] bytes.
pub(crate) fn check_state(state: &str) -> Result<(), StoreError> {
    match state.len() > MAX_RECONCILE_STATE {
        true => Err(StoreError::TooLarge {
            what: "a reconciliation state, in bytes",
            size: state.len(),
            limit: MAX_RECONCILE_STATE,
        }),
        false => Ok(()),
    }
}

/// The answer of a dedupe lookup of `keys` from what the store found: (key, entry
/// id) pairs, in any order; a key not found is `None`.
pub(crate) fn in_asked_order(
    keys: &[String],
    found: impl IntoIterator<Item = (String, String)>,
) -> Vec<Option<String>> {
    let found: std::collections::HashMap<String, String> = found.into_iter().collect();
    keys.iter().map(|k| found.get(k).cloned()).collect()
}
