//! The one integration test binary. Every test runs the real thing: the gateway on
//! ephemeral ports, a private redis-server per test, the embedded store in a temp dir.

mod support;

mod admin;
mod admin_guard;
mod admin_reads;
mod attack;
mod browser;
mod cli;
mod cli_pipe;
mod cluster;
mod conformance;
mod connections;
mod console;
mod console_activity;
mod console_body;
mod console_hardening;
mod console_sessions;
mod console_triage;
mod console_xss;
mod crash;
mod embedded;
mod faults;
mod forward;
mod hostile;
mod ingest;
mod ingest_first;
mod layout;
mod lines;
mod logs;
mod observe;
mod operate;
mod ordered;
mod pacing;
mod postgres_failover;
mod postgres_faults;
mod postgres_harness;
mod pressure;
mod providers;
mod redis_preconditions;
mod redis_replicas;
mod redis_store;
mod routes;
mod stalled;
mod unsigned;
mod upstream;
