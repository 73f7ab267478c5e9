//! What a reload of the configuration would change, read off two validated
//! configurations: the keys only a restart can change (listeners, the store,
//! telemetry, the admin token …), which refuse the whole reload, and the changes a
//! running gateway takes (sources, secrets, routes, forwarder, retention and alert
//! settings), which `hookgate reload --dry-run` lists.
//!
//! Decided by comparing the typed values, field by field: a key is named when its
//! value differs, never by comparing renderings.

use super::{Config, SourceConfig};

/// What changes from one configuration to the next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Keys whose new value only a restart puts in force.
    pub needs_restart: Vec<&'static str>,
    /// What a reload changes, one line each (`source added: github`, `route changed:
    /// stripe/billing`, `forwarder changed` …). Names only: never a value.
    pub live: Vec<String>,
}

impl Changes {
    /// Whether the new configuration is the old one.
    pub fn is_empty(&self) -> bool {
        self.needs_restart.is_empty() && self.live.is_empty()
    }
}

/// Push `key` when the two values differ.
macro_rules! keys {
    ($out:expr, $old:expr, $new:expr, $prefix:literal: $($field:ident),+ $(,)?) => {
        $(
            if $old.$field != $new.$field {
                $out.push(concat!($prefix, ".", stringify!($field)));
            }
        )+
    };
}

/// What changes from `old` to `new`.
pub fn changes(old: &Config, new: &Config) -> Changes {
    let mut restart = Vec::new();
    keys!(restart, old.server, new.server, "server":
        listen, max_body_bytes, body_budget_bytes, header_read_timeout, body_read_timeout,
        body_first_byte_timeout, min_body_rate, max_headers, max_connections,
        max_connections_per_client, client_ipv6_prefix, shutdown_grace, trusted_proxies,
        client_ip_header, allowlist_refresh,
    );
    keys!(restart, old.admin, new.admin, "admin":
        listen, probe_listen, request_timeout, token, replay_rate, public_origin,
        failed_auth_allowance,
    );
    if old.store != new.store {
        restart.push("store");
    }
    keys!(restart, old.log, new.log, "log": format);
    keys!(restart, old.telemetry, new.telemetry, "telemetry": traces);
    // Ingest's pressure gauge is sized once.
    keys!(restart, old.forwarder, new.forwarder, "forwarder": ingest_first);

    let mut live = Vec::new();
    let mut forwarder = Vec::new();
    keys!(forwarder, old.forwarder, new.forwarder, "forwarder":
        lease, poll_interval, shutdown_grace, breaker_failures, breaker_cooldown,
        maintenance_interval, transform_memory_bytes,
    );
    keys!(forwarder, old.retention, new.retention, "retention": delivered, dead);
    keys!(forwarder, old.alerts, new.alerts, "alerts": webhook_url, interval);
    if old.providers_dir != new.providers_dir {
        forwarder.push("providers_dir");
    }
    live.extend(forwarder.into_iter().map(|k| format!("{k} changed")));
    for s in &new.sources {
        match old.sources.iter().find(|o| o.name == s.name) {
            None => live.push(format!("source added: {}", s.name)),
            Some(o) => source_changes(o, s, &mut live),
        }
    }
    for o in &old.sources {
        if !new.sources.iter().any(|s| s.name == o.name) {
            live.push(format!("source removed: {}", o.name));
        }
    }
    Changes {
        needs_restart: restart,
        live,
    }
}

/// What changes in one source that both configurations have.
fn source_changes(old: &SourceConfig, new: &SourceConfig, out: &mut Vec<String>) {
    let name = &new.name;
    let mut keys: Vec<&'static str> = Vec::new();
    keys!(keys, old, new, "":
        provider, secrets, public_url, dedupe_ttl, provider_options, keep_rejected_bodies,
        index, request_limit, unverified_per_client, allow_ips, verify_token,
        confirm_subscriptions, expect, reconcile,
    );
    for k in keys {
        let k = k.trim_start_matches('.');
        match k {
            "secrets" | "verify_token" => out.push(format!("source {name}: {k} rotated")),
            _ => out.push(format!("source {name}: {k} changed")),
        }
    }
    for r in &new.routes {
        match old.routes.iter().find(|o| o.name == r.name) {
            None => out.push(format!("route added: {name}/{}", r.name)),
            Some(o) if o == r => {}
            Some(o) => {
                let mut what: Vec<&'static str> = Vec::new();
                keys!(what, o, r, "": destination, destination_secret, retry, delivery, filter, order, transform);
                let what: Vec<&str> = what.iter().map(|k| k.trim_start_matches('.')).collect();
                out.push(format!(
                    "route changed: {name}/{} ({})",
                    r.name,
                    what.join(", ")
                ));
            }
        }
    }
    for o in &old.routes {
        if !new.routes.iter().any(|r| r.name == o.name) {
            out.push(format!("route removed: {name}/{}", o.name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::from_toml_str;

    const BASE: &str = r#"
[server]
listen = "127.0.0.1:8080"

[[sources]]
name = "github"
provider = "github"
secret = "s1"
[[sources.routes]]
name = "app"
destination = "http://127.0.0.1:9000/a"
[[sources.routes]]
name = "audit"
destination = "http://127.0.0.1:9000/b"
"#;

    fn cfg(text: &str) -> Config {
        from_toml_str(text, &|_| None).expect("config")
    }

    #[test]
    fn the_same_file_changes_nothing() {
        assert!(changes(&cfg(BASE), &cfg(BASE)).is_empty());
    }

    #[test]
    fn a_listener_or_the_store_needs_a_restart_and_each_key_is_named() {
        let new = BASE.replace("127.0.0.1:8080", "127.0.0.1:8081")
            + "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:1\"\n[admin]\ntoken_env = \"T\"\n";
        let new = from_toml_str(&new, &|n| {
            (n == "T").then(|| "0123456789abcdef0123456789".into())
        })
        .expect("config");
        let c = changes(&cfg(BASE), &new);
        assert_eq!(
            c.needs_restart,
            vec!["server.listen", "admin.token", "store"]
        );
    }

    #[test]
    fn routes_and_secrets_change_live_by_name_never_by_value() {
        let new = BASE
            .replace("secret = \"s1\"", "secret = \"s2\"")
            .replace("9000/a", "9001/a")
            .replace(
                "[[sources.routes]]\nname = \"audit\"\ndestination = \"http://127.0.0.1:9000/b\"\n",
                "",
            )
            + "[[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"whsec_x\"\ndestination = \"http://127.0.0.1:9000/s\"\n";
        let c = changes(&cfg(BASE), &cfg(&new));
        assert!(c.needs_restart.is_empty(), "{c:?}");
        assert_eq!(
            c.live,
            vec![
                "source github: secrets rotated",
                "route changed: github/app (destination)",
                "route removed: github/audit",
                "source added: stripe",
            ]
        );
        assert!(!format!("{c:?}").contains("s2"), "no value is shown");
    }
}
