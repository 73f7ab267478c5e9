//! Routing: the filter language. A source's routes each name a destination and may
//! carry a [`filter::Filter`] that selects the entries the route wants; the filters
//! are evaluated once per entry, after verification. (A route's rate limit is the
//! forwarder's, `forward::pace`; which filters and ordering keys read a value the
//! provider's signature does not cover is the provider's, `provider::signed`.)

pub mod filter;
