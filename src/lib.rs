pub mod config;
pub mod provider;
