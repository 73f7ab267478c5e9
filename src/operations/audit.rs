//! The control audit: the pauses and resumes of every process on the store, newest
//! first.

use super::Operations;
use super::dto::ControlEvent;
use super::entries::rfc3339;
use crate::store::StoreError;

/// The newest `limit` control events, newest first, as the API answers them.
pub async fn control_events(
    ops: &Operations,
    limit: usize,
) -> Result<Vec<ControlEvent>, StoreError> {
    Ok(ops
        .store
        .control_audit(limit)
        .await?
        .into_iter()
        .map(|e| ControlEvent {
            at: rfc3339(e.at),
            action: e.action.as_str().to_string(),
            source: e.source,
            route: e.route,
            actor: e.by.name,
            session: e.by.session,
            client: e.by.client,
        })
        .collect())
}
