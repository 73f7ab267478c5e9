//! A pull route's sender: nothing is pushed to a pull route (`destination =
//! "pull"`); its consumers take its deliveries under `/pull/` (`forward::pull`).
//!
//! The forwarder runs no claim loop for a pull route, so this sender is never asked
//! to send; it exists so that every route holds a sender, and should a delivery of
//! a pull route ever reach it, it is refused with the kind "destination not found"
//! rather than sent anywhere.

use super::{Failed, Message, Outcome, Sender};
use crate::failure::Failure;

/// Refuses every push: a pull route's consumers take its deliveries.
pub struct PullSender;

#[async_trait::async_trait]
impl Sender for PullSender {
    async fn send(&self, _message: Message) -> Outcome {
        Outcome::Refused(Failed::new(
            Failure::NotFound,
            "a pull route is taken by its consumers, never pushed",
        ))
    }
}
