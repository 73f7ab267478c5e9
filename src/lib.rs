//! hookgate: a receiver-side webhook gateway.
//!
//! # Layout
//!
//! * [`config`]: the layered, validated configuration.
//! * [`provider`]: provider specs as data ([`provider::spec`]), the one verification
//!   engine ([`provider::verify`]) and its inverse, the signer ([`provider::sign`]).
//! * [`store`]: the `Store` trait and its backends, `store::sqlite` (embedded, group
//!   commit) and `store::redis` (Lua scripts; concurrent accepts share a call).
//! * [`ingest`]: `POST /ingest/{source}`: read (within [`ingest::body`]'s budget),
//!   verify, dedupe + persist, answer; [`header_policy`]: which headers are kept and
//!   passed on.
//! * [`routing`]: which routes an entry goes to ([`routing::filter`]: declarative
//!   route filters).
//! * [`transform`]: a route's jq program (jaq), run in worker processes the
//!   gateway kills at the deadline.
//! * [`forward`]: claim, deliver, retry with backoff, dead-letter; [`forward::sender`]
//!   is the delivery seam (a sender per destination scheme, a typed outcome),
//!   [`forward::retry`] the pure policy, [`forward::breaker`] the per-destination
//!   circuit breaker.
//! * [`failure`]: the one failure kind of every delivery attempt, which dead-letter
//!   groups, metrics, the console and the API read.
//! * [`pressure`]: ingest first: how saturated ingest is, which holds the
//!   forwarder to a small share during a burst.
//! * [`serve`]: the hyper accept loop with connection limits and graceful drain.
//! * [`error`]: the one HTTP error type of both listeners, mapped to answers.
//! * [`admin`]: the admin API (inspect, replay, discard, pause, stats); its wire
//!   types are [`admin::dto`].
//! * [`console`]: the admin API in a browser, on the admin listener under
//!   `/console/` (login, signed session, form tokens, strict CSP).
//! * [`alerts`]: batched dead-letter alerts to a Slack-compatible webhook.
//! * [`telemetry`]: logging and the Prometheus recorder (a leaf; the probes and
//!   `/metrics` are served by `admin::probes`).
//! * [`clock`]: the one clock everything that needs the time is handed.
//! * [`app`]: the composition root; [`cli`]: the command line, its admin commands
//!   over HTTP included.
//!
//! # Invariants
//!
//! * Nothing is parsed or re-serialized before the signature is verified, and a
//!   forged request never reaches the store (so it cannot poison a dedupe key).
//! * A 2xx is only sent for an entry the store has made durable.
//! * `provider` reads no clock, and does no I/O but the registry's `providers_dir`.
//! * rusqlite and redis types never leave their backend's folder.
//!
//! ARCHITECTURE.md at the repository root has the map, and what holds each invariant.

pub mod admin;
pub mod alerts;
pub mod allowlist;
pub mod app;
pub mod cli;
pub mod clock;
pub mod config;
pub mod console;
pub mod error;
pub mod failure;
pub mod forward;
#[cfg(any(test, fuzzing))]
pub mod fuzzing;
pub mod header;
pub mod header_policy;
pub mod ingest;
pub mod live;
pub mod operations;
pub mod pressure;
pub mod provider;
pub mod routing;
pub mod serve;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod transform;
