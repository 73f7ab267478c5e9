//! Who did what, as the store keeps it: the [`Actor`] of an operator action (its
//! name, and the console session and client address it came from), and the audit
//! list of controls (pauses and resumes, and a source's secret handshakes), which, unlike an entry's audit trail, is
//! kept apart from any entry: a bounded list, newest first, shared by every gateway
//! on the store.

use serde::{Deserialize, Serialize};

/// How many control events the store keeps: the oldest go as new ones come.
pub const CONTROL_AUDIT_KEEP: usize = 1000;

/// Who made an operator action, as its audit record names them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// `console` for the console; the API's `X-Hookgate-Actor` (the CLI sends the
    /// user name), else `admin`.
    pub name: String,
    /// The console session (a hash of its nonce, never the cookie), for console
    /// actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The client's address (an IP address), when the action came over HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

impl From<&str> for Actor {
    /// An actor known by name only (tests, internal callers).
    fn from(name: &str) -> Actor {
        Actor {
            name: name.to_string(),
            ..Actor::default()
        }
    }
}

/// What a control event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlAction {
    Pause,
    Resume,
    /// An operator armed a source's secret handshake (`store::secrets`).
    ArmHandshake,
    /// A provider established a secret in an armed handshake.
    EstablishSecret,
    /// An operator forgot an established secret.
    ForgetSecret,
}

impl ControlAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ControlAction::Pause => "pause",
            ControlAction::Resume => "resume",
            ControlAction::ArmHandshake => "arm_handshake",
            ControlAction::EstablishSecret => "establish_secret",
            ControlAction::ForgetSecret => "forget_secret",
        }
    }

    pub fn parse(s: &str) -> Option<ControlAction> {
        match s {
            "pause" => Some(ControlAction::Pause),
            "resume" => Some(ControlAction::Resume),
            "arm_handshake" => Some(ControlAction::ArmHandshake),
            "establish_secret" => Some(ControlAction::EstablishSecret),
            "forget_secret" => Some(ControlAction::ForgetSecret),
            _ => None,
        }
    }

    /// The action that sets paused to `paused`.
    pub fn of(paused: bool) -> ControlAction {
        if paused {
            ControlAction::Pause
        } else {
            ControlAction::Resume
        }
    }
}

/// A pause or resume of a source (`route: None`) or of one of its routes, as the
/// control audit keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlEvent {
    /// Unix milliseconds.
    pub at: i64,
    pub action: ControlAction,
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    pub by: Actor,
}
