//! hookgate: a receiver-side webhook gateway.
//!
//! # Layout
//!
//! The rooms, top to bottom: a module imports only those listed after it.
//! ARCHITECTURE.md at the repository root is the map (the lines between the rooms,
//! the route table's life, the entry points); each module's `//!` says what its
//! files do.
//!
//! * `fuzzing` (compiled only for tests and `cargo fuzz`): the fuzz targets' bodies.
//! * [`cli`]: the command line, its admin commands over HTTP included.
//! * [`app`]: the composition root, the only module that builds and wires objects,
//!   and the route table: the configuration compiled into one value
//!   ([`app::Table`]), swapped in at a reload ([`app::Tables`]).
//! * [`console`]: the admin API in a browser, on the admin listener under
//!   `/console/` (login, signed session, form tokens, strict CSP).
//! * [`admin`]: the admin API (inspect, replay, discard, pause, stats) and the
//!   probes; its wire types are [`admin::dto`].
//! * [`operations`]: what an operator does to stored webhooks, shared by the admin
//!   API and the console.
//! * [`reconcile`]: ask a source's provider what it sent and recover what never
//!   reached the gateway (a redelivery, or the event admitted from the API).
//! * [`ingest`]: `POST /ingest/{source}`: read (within [`ingest::body`]'s budget),
//!   verify, dedupe + persist, answer.
//! * [`pull`]: the consumer API of pull routes (`/pull/` on the ingest listener):
//!   long polls, acknowledgements, consumer tokens.
//! * [`forward`]: claim, deliver, retry with backoff, dead-letter; [`forward::sender`]
//!   is the delivery seam (a sender per destination scheme, a typed outcome),
//!   [`forward::retry`] the pure policy, [`forward::breaker`] the per-destination
//!   circuit breaker.
//! * [`alerts`]: batched dead-letter alerts to a Slack-compatible webhook.
//! * [`error`]: the one HTTP error type of both listeners, mapped to answers, and
//!   why an operation was refused.
//! * [`serve`]: the hyper accept loop with connection and body bounds and graceful
//!   drain.
//! * [`allowlist`]: who may send to a source (`allow_ips`), providers' published
//!   ranges kept fresh.
//! * [`store`]: the `Store` trait and its backends: `store::sqlite` (embedded, group
//!   commit), `store::redis` (Lua scripts; concurrent accepts share a call) and
//!   `store::postgres` (group commit, `SKIP LOCKED` claims).
//! * [`provider`]: provider specs as data ([`provider::spec`]), the one verification
//!   engine ([`provider::verify`]), its inverse, the signer ([`provider::sign`]), and
//!   the fetched keys of certificate schemes ([`provider::certificate`]).
//! * [`config`]: the layered, validated configuration.
//! * [`routing`]: which routes an entry goes to ([`routing::filter`]: declarative
//!   route filters).
//! * [`transform`]: a route's jq program (jaq), run in worker processes the
//!   gateway kills at the deadline.
//! * [`failure`]: the one failure kind of every delivery attempt, which dead-letter
//!   groups, metrics, alerts, the console and the API read.
//! * [`header`]: one received header; [`header_policy`]: which headers are kept and
//!   passed on.
//! * [`pressure`]: ingest first: how saturated ingest is, which holds the
//!   forwarder to a small share during a burst.
//! * [`shutdown`]: the shutdown token; [`tls`]: the process-wide rustls provider;
//!   [`clock`]: the one clock, handed to everything that needs the time of day.
//! * [`live`]: one part of the route table as its reader sees it: the table in
//!   force at each use.
//! * [`telemetry`]: logs, the Prometheus recorder and traces (a leaf; the probes and
//!   `/metrics` are served by [`admin::probes`]).
//!
//! # Invariants
//!
//! * Nothing is parsed or re-serialized before the signature is verified, beyond
//!   what computing it needs, and a forged request never reaches the store (so it
//!   cannot poison a dedupe key).
//! * A 2xx is only sent for an entry the store has made durable.
//! * The store is the only channel for webhooks between ingest and the forwarder.
//! * The verification engine, the route filters, the retry policy, the breaker and
//!   a route's pace do no I/O and read no clock: the caller passes `now`. (Fetching
//!   a certificate scheme's keys is [`provider::certificate`]'s.)
//! * rusqlite and redis types never leave their backend's folder.
//!
//! ARCHITECTURE.md says what holds each invariant.

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
pub mod pull;
pub mod reconcile;
pub mod routing;
pub mod serve;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod transform;
