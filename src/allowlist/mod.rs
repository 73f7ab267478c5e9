//! Who may send to a source (`allow_ips`): the addresses a source takes requests
//! from, checked on the client's address before a byte of the body is read.
//!
//! A source lists its ranges (`allow_ips = ["192.0.2.0/24"]`), or takes the ranges its
//! provider publishes (`allow_ips = "provider"`, the spec's `[ranges]`: GitHub's
//! `meta` hooks, Stripe's webhook IPs). A static copy of a provider's list goes stale
//! and silently drops real webhooks when the provider adds a range, so a published
//! list is fetched again every `server.allowlist_refresh` ([`refresh`]); the last
//! good list is kept in the store, so a gateway that starts without network still
//! applies it, and a failed refresh keeps the list it had.
//!
//! Until a published list is known (none kept, none fetched yet) the source takes
//! nothing: an allowlist that opens when it cannot be read is no allowlist. The
//! providers retry, and `hookgate_allowlist_ranges` shows 0.

pub mod fetch;
pub mod refresh;

use std::net::IpAddr;
use std::sync::{Arc, RwLock};

use ipnet::IpNet;

use crate::provider::spec::Ranges;

/// The addresses one source takes requests from.
#[derive(Debug, Clone)]
pub enum Allowlist {
    /// The ranges the configuration lists.
    Fixed(Arc<[IpNet]>),
    /// The ranges a provider publishes, kept up to date.
    Published(Arc<Published>),
}

impl Allowlist {
    /// Whether a request from `client` may be read.
    pub fn allows(&self, client: IpAddr) -> bool {
        let client = client.to_canonical();
        match self {
            Allowlist::Fixed(ranges) => contains(ranges, client),
            Allowlist::Published(published) => published
                .current()
                .is_some_and(|ranges| contains(&ranges, client)),
        }
    }
}

fn contains(ranges: &[IpNet], client: IpAddr) -> bool {
    ranges.iter().any(|net| net.contains(&client))
}

/// A provider's published ranges: where they come from, and the list in force.
#[derive(Debug)]
pub struct Published {
    /// The provider's name, for logs and metric labels.
    pub provider: String,
    /// Where and how the ranges are fetched.
    pub source: Ranges,
    current: RwLock<Option<Arc<[IpNet]>>>,
}

impl Published {
    pub fn new(provider: &str, source: Ranges) -> Published {
        Published {
            provider: provider.to_string(),
            source,
            current: RwLock::new(None),
        }
    }

    /// The list in force, once one is known.
    pub fn current(&self) -> Option<Arc<[IpNet]>> {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Put `ranges` in force.
    fn install(&self, ranges: Arc<[IpNet]>) {
        match self.current.write() {
            Ok(mut guard) => *guard = Some(ranges),
            Err(poisoned) => *poisoned.into_inner() = Some(ranges),
        }
    }
}

/// The ranges as the store keeps them: one per line.
pub(crate) fn to_text(ranges: &[IpNet]) -> String {
    ranges
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Ranges kept by [`to_text`]; `None` when a line is not a range (a store written
/// by something else).
pub(crate) fn from_text(text: &str) -> Option<Vec<IpNet>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim().parse::<IpNet>().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Arc<[IpNet]> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn ranges_hold_v4_v6_and_v4_mapped_clients() {
        let list = Allowlist::Fixed(nets(&["192.0.2.0/24", "2001:db8::/32", "198.51.100.7/32"]));
        for ok in [
            "192.0.2.1",
            "192.0.2.255",
            "2001:db8::1",
            "198.51.100.7",
            "::ffff:192.0.2.9",
        ] {
            assert!(list.allows(ok.parse().unwrap()), "{ok}");
        }
        for no in [
            "192.0.3.1",
            "198.51.100.8",
            "2001:db9::1",
            "127.0.0.1",
            "::1",
        ] {
            assert!(!list.allows(no.parse().unwrap()), "{no}");
        }
    }

    #[test]
    fn a_published_list_takes_nothing_until_one_is_known() {
        let ranges = Ranges {
            url: "https://api.github.com/meta".into(),
            published: "https://api.github.com/meta".into(),
            pointer: "/hooks".into(),
            field: None,
        };
        let published = Arc::new(Published::new("github", ranges));
        let list = Allowlist::Published(published.clone());
        assert!(!list.allows("192.0.2.1".parse().unwrap()));
        published.install(nets(&["192.0.2.0/24"]));
        assert!(list.allows("192.0.2.1".parse().unwrap()));
        assert!(!list.allows("192.0.3.1".parse().unwrap()));
    }

    #[test]
    fn ranges_round_trip_through_their_text() {
        let list = nets(&["192.0.2.0/24", "2001:db8::/32"]);
        assert_eq!(from_text(&to_text(&list)).unwrap(), list.to_vec());
        assert_eq!(from_text("192.0.2.0/24\nnot a range"), None);
    }
}
