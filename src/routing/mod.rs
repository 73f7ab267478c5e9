//! Routing: which internal apps a stored entry goes to. A source's routes each name
//! a destination and may carry a [`filter::Filter`] that selects the entries the
//! route wants; the filters are evaluated once per entry, after verification. A
//! route may also carry a [`rate::RateLimit`], whose [`rate::Pace`] adapts to the
//! destination's 429s and 503s. [`signed`] finds the filters and ordering keys that
//! read a value the provider's signature does not cover.

pub mod filter;
pub mod rate;
pub mod signed;
