//! The integration tests' harness, one concern per module: free ports, waiting on
//! conditions, a TCP proxy a test can blackhole, Redis servers and clusters, PostgreSQL servers, stores of each backend, configurations,
//! signed webhooks, HTTP, the gateway in process and as a child process, and the
//! lock for timed tests. Everything is re-exported here, so a test needs only
//! `use crate::support::*`.

#![allow(dead_code)]

mod backends;
mod blackhole;
mod child_gateway;
mod configs;
mod gateway;
mod http;
mod nats;
mod ports;
mod postgres;
mod rabbitmq;
mod redis;
mod redis_cluster;
mod signing;
mod store_reads;
mod stores;
mod timing;
mod waits;

pub use backends::*;
pub use blackhole::*;
pub use child_gateway::*;
pub use configs::*;
pub use gateway::*;
pub use http::*;
pub use nats::*;
pub use ports::*;
pub use postgres::*;
pub use rabbitmq::*;
pub use redis::*;
pub use redis_cluster::*;
pub use signing::*;
pub use store_reads::*;
pub use stores::*;
pub use timing::*;
pub use waits::*;
