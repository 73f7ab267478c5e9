//! Replays and discards on Redis: one call of `scripts/transition.lua` moves the
//! entry's deliveries and appends the audit record (with its actor's session and
//! client) in one atomic step.

use super::RedisStore;
use crate::store::{Actor, AuditEvent, Status, StoreError, Transition, Wake};

/// An operator's transition of deliveries (`scripts/transition.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Replay,
    Discard,
}

impl Action {
    /// As the transition script and the audit trail name it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Action::Replay => "replay",
            Action::Discard => "discard",
        }
    }
}

/// The audit record of a replay or discard by `by`.
pub(super) fn audit_event(
    action: Action,
    by: &Actor,
    note: Option<&str>,
    route: Option<&str>,
    now: i64,
) -> AuditEvent {
    AuditEvent {
        at: now,
        action: action.as_str().into(),
        actor: by.name.clone(),
        note: note.map(str::to_string),
        route: route.map(str::to_string),
        session: by.session.clone(),
        client: by.client.clone(),
    }
}

impl RedisStore {
    /// Replay or discard deliveries of entry `id` (see `scripts/transition.lua`),
    /// through the route `audit` names (every one that qualifies when it names none),
    /// at `audit.at`: what it did and, when done, the routes it applied to.
    pub(super) async fn transition(
        &self,
        id: &str,
        action: Action,
        at: i64,
        audit: &AuditEvent,
    ) -> Result<(Transition, Vec<String>), StoreError> {
        let Some(src) = self.source_of(id).await? else {
            return Ok((Transition::NotFound, Vec::new()));
        };
        let src = src.as_str();
        let audit_json = serde_json::to_string(audit).map_err(|source| StoreError::Encode {
            what: "the audit record",
            source,
        })?;
        let mut inv = self.scripts.transition.prepare_invoke();
        inv.key(self.key(src, &format!("e:{id}")))
            .key(self.key(src, &format!("audit:{id}")))
            .arg(action.as_str())
            .arg(id)
            .arg(at)
            .arg(audit.at)
            .arg(audit_json)
            .arg(audit.route.as_deref().unwrap_or_default())
            .arg(self.key(src, ""));
        let mut c = self.conn();
        let (code, text): (i64, String) = self.timed(inv.invoke_async(&mut c)).await?;
        let status = || {
            Status::parse(&text).ok_or_else(|| StoreError::Corrupt {
                id: id.to_string(),
                problem: format!("unknown status {text:?}"),
            })
        };
        Ok(match code {
            1 => {
                let routes: Vec<String> = text
                    .split(',')
                    .filter(|r| !r.is_empty())
                    .map(str::to_string)
                    .collect();
                if action == Action::Replay {
                    self.work.wake(&Wake::Routes {
                        source: src.to_string(),
                        routes: routes.clone(),
                    });
                }
                (Transition::Done, routes)
            }
            2 => (Transition::Conflict(status()?), Vec::new()),
            3 => (Transition::NoSuchRoute, Vec::new()),
            _ => (Transition::NotFound, Vec::new()),
        })
    }
}
