//! hookgate: a receiver-side webhook gateway.
//!
//! # Layout
//!
//! * [`config`]: the layered, validated configuration.
//! * [`provider`]: provider specs as data ([`provider::spec`]), the one verification
//!   engine ([`provider::verify`]) and its inverse, the signer ([`provider::sign`]).
//! * [`store`]: the `Store` trait and its backends, [`store::sqlite`] (embedded, group
//!   commit) and [`store::redis`] (one Lua script per accept).
//! * [`ingest`]: `POST /ingest/{source}`: read (within [`ingest::body`]'s budget),
//!   verify, dedupe + persist, answer; [`header_policy`]: which headers are kept and
//!   passed on.
//! * [`forward`]: claim, deliver, retry with backoff, dead-letter; [`forward::retry`]
//!   is the pure policy, [`forward::breaker`] the per-destination circuit breaker.
//! * [`serve`]: the hyper accept loop with connection limits and graceful drain.
//! * [`error`]: the HTTP boundary's error type.
//! * [`admin`]: the admin API (inspect, replay, discard, pause, stats) and its DTOs.
//! * [`alerts`]: batched dead-letter alerts to a Slack-compatible webhook.
//! * [`telemetry`]: logging, the Prometheus exporter and health endpoints.
//! * [`app`]: the composition root; [`cli`]: the command line; [`admin_client`]: the
//!   CLI's admin commands over HTTP.
//!
//! # Invariants
//!
//! * Nothing is parsed or re-serialized before the signature is verified, and a
//!   forged request never reaches the store (so it cannot poison a dedupe key).
//! * A 2xx is only sent for an entry the store has made durable.
//! * `provider` never reads the clock itself; its only I/O is the registry reading
//!   `providers_dir`.
//! * rusqlite and redis types never leave their backend's file.

pub mod admin;
pub mod admin_client;
pub mod alerts;
pub mod app;
pub mod cli;
pub mod config;
pub mod error;
pub mod forward;
pub mod header_policy;
pub mod ingest;
pub mod provider;
pub mod serve;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod tls;
