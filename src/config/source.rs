//! One `[[sources]]` entry: a sender whose webhooks are verified, stored and relayed
//! to its routes (see `route`).
//!
//! A source holds more than any other section (secrets, URLs, retry and delivery
//! settings, each with a default), so its validated form and the checks that build
//! it from [`RawSource`] live here together.

use std::time::Duration;

use super::defaults::DEFAULT_DEDUPE_TTL;
use super::destination::CredentialKeys;
use super::durations::parse_duration;
use super::expect::Expectation;
use super::raw::{OneOrMany, RawSource, RawSourceLimits};
use super::reconcile::{ReconcileConfig, validate_reconcile};
use super::route::{self, RouteConfig};
use super::{ConfigError, RateLimit, Secret, redact_url};

#[derive(Debug, Clone, PartialEq)]
pub struct SourceConfig {
    pub name: String,
    pub provider: String,
    /// Every secret that verifies (several during a rotation). Empty only for a
    /// provider whose secret arrives in a handshake (Asana's), which `app` checks
    /// against the provider's spec.
    pub secrets: Vec<Secret>,
    /// The URL the provider calls (absolute http(s), no query or fragment), for
    /// providers whose signature covers it.
    pub public_url: Option<String>,
    pub dedupe_ttl: Duration,
    pub provider_options: Option<toml::Table>,
    /// Where its entries go, in configuration order. Never empty.
    pub routes: Vec<RouteConfig>,
    /// Keep the bodies (their first bytes) of the requests it refuses.
    pub keep_rejected_bodies: bool,
    /// Indexed JSON pointers of the body: (name, pointer), by name.
    pub index: Vec<(String, String)>,
    /// `[sources.limits] requests`: the requests it takes, with their burst; over it
    /// a request is answered 429 before its body is read.
    pub request_limit: Option<RateLimit>,
    /// `[sources.limits] unverified_per_client`: the requests that fail
    /// verification one client may send (10 a second by default when the source
    /// has a request limit); over it, 429 before the body is read.
    pub unverified_per_client: Option<RateLimit>,
    /// `allow_ips`: the addresses the source takes requests from; others get 403
    /// before the body is read.
    pub allow_ips: Option<AllowIps>,
    /// `verify_token` / `verify_token_env`: the token of the provider's endpoint
    /// check (Meta's `hub.verify_token`), a value of its own, not the signing secret.
    pub verify_token: Option<Secret>,
    /// `confirm_subscriptions` (AWS SNS): the gateway confirms a verified
    /// subscription (visits its `SubscribeURL`) before storing the confirmation.
    pub confirm_subscriptions: bool,
    /// `[sources.expect]`: fewer webhooks than `at_least` in its window, or than it
    /// usually receives (`learn`), and the source is quiet.
    pub expect: Option<Expectation>,
    /// `[sources.reconcile]`: how the gateway compares with the provider's API.
    pub reconcile: Option<ReconcileConfig>,
}

/// Where a source's allowed addresses come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowIps {
    /// The ranges the configuration lists.
    List(Vec<ipnet::IpNet>),
    /// The ranges the provider publishes (its spec's `[ranges]`), fetched and kept
    /// up to date (`crate::allowlist`).
    Provider,
}

/// Check `allow_ips`: `"provider"`, or a non-empty list of CIDRs.
fn validate_allow_ips(
    key: &dyn Fn(&str) -> String,
    raw: Option<OneOrMany>,
) -> Result<Option<AllowIps>, ConfigError> {
    match raw {
        None => Ok(None),
        Some(OneOrMany::One(word)) if word == "provider" => Ok(Some(AllowIps::Provider)),
        Some(OneOrMany::One(word)) => Err(ConfigError::invalid(
            key("allow_ips"),
            format!(
                "{word:?}: write a list of ranges ([\"192.0.2.0/24\"]) or \"provider\" for the ranges the provider publishes"
            ),
        )),
        Some(OneOrMany::Many(list)) if list.is_empty() => Err(ConfigError::invalid(
            key("allow_ips"),
            "an empty list would refuse every request; remove allow_ips to take requests from anywhere",
        )),
        Some(OneOrMany::Many(list)) => Ok(Some(AllowIps::List(
            list.iter()
                .map(|text| super::parse_cidr(&key("allow_ips"), text))
                .collect::<Result<_, _>>()?,
        ))),
    }
}

/// The budget of unverified requests per client when a source with a request
/// limit names none.
pub const DEFAULT_UNVERIFIED_PER_CLIENT: &str = "10/s";

/// Check `[sources.limits]`: the request limit, and the budget of unverified
/// requests per client.
fn validate_limits(
    key: &dyn Fn(&str) -> String,
    raw: Option<RawSourceLimits>,
) -> Result<(Option<RateLimit>, Option<RateLimit>), ConfigError> {
    let Some(raw) = raw else {
        return Ok((None, None));
    };
    let unverified = match (&raw.unverified_per_client, &raw.requests) {
        (Some(text), _) => Some(text.as_str()),
        (None, Some(_)) => Some(DEFAULT_UNVERIFIED_PER_CLIENT),
        (None, None) => None,
    }
    .map(|text| {
        RateLimit::parse(text)
            .map_err(|e| ConfigError::invalid(key("limits.unverified_per_client"), e.to_string()))
    })
    .transpose()?
    // A second's worth at once: a client whose secret was just rotated, say,
    // fails a few requests together.
    .map(|l| RateLimit {
        burst: l.per_second.ceil().clamp(1.0, 1_000_000.0) as u32,
        ..l
    });
    let Some(text) = raw.requests else {
        if raw.burst.is_some() {
            return Err(ConfigError::invalid(
                key("limits.burst"),
                "a burst needs a limit: set limits.requests (e.g. \"100/s\")",
            ));
        }
        return Ok((None, unverified));
    };
    let mut limit = RateLimit::parse(&text)
        .map_err(|e| ConfigError::invalid(key("limits.requests"), e.to_string()))?;
    if let Some(burst) = raw.burst {
        if burst == 0 {
            return Err(ConfigError::invalid(
                key("limits.burst"),
                "must be at least 1",
            ));
        }
        limit.burst = burst;
    }
    Ok((Some(limit), unverified))
}

/// The most indexes (`[sources.index]`) a source may declare: each costs every
/// accept of the source a write.
pub const INDEXES_MAX: usize = 8;

/// An index name: what a search names and a store key holds.
fn valid_index_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Check `[sources.index]`: at most [`INDEXES_MAX`] names, each a valid name with a
/// JSON pointer (empty or starting with `/`).
fn validate_index(
    key: &dyn Fn(&str) -> String,
    raw: std::collections::BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, ConfigError> {
    if raw.len() > INDEXES_MAX {
        return Err(ConfigError::invalid(
            key("index"),
            format!("at most {INDEXES_MAX} indexes per source"),
        ));
    }
    for (name, pointer) in &raw {
        if !valid_index_name(name) {
            return Err(ConfigError::invalid(
                key(&format!("index.{name}")),
                "an index name is 1 to 32 of a-z, 0-9 and _",
            ));
        }
        if !(pointer.is_empty() || pointer.starts_with('/')) {
            return Err(ConfigError::invalid(
                key(&format!("index.{name}")),
                format!("{pointer:?} is not a JSON pointer: it must be empty or start with `/`"),
            ));
        }
    }
    Ok(raw.into_iter().collect())
}

impl SourceConfig {
    /// The `pass_headers` of every route together: a header any route passes is
    /// stored.
    pub fn pass_headers(&self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for r in &self.routes {
            for h in &r.delivery.pass_headers {
                if !all.contains(h) {
                    all.push(h.clone());
                }
            }
        }
        all
    }
}

/// A source name is a URL path segment and part of store keys.
fn valid_source_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// A source's secrets as the file gives them: inline, several, from the
/// environment, from files.
struct Given {
    secret: Option<String>,
    secrets: Option<Vec<String>>,
    secret_env: Option<OneOrMany>,
    secret_file: Option<OneOrMany>,
}

/// Every secret of a source, in order: `secret`, `secrets`, each `secret_env`
/// variable, each `secret_file` (without its trailing line end); none empty.
fn validate_secrets(
    key: &dyn Fn(&str) -> String,
    raw: Given,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Secret>, ConfigError> {
    let mut secrets = Vec::new();
    if let Some(v) = raw.secret {
        secrets.push(Secret::new(v));
    }
    for v in raw.secrets.unwrap_or_default() {
        secrets.push(Secret::new(v));
    }
    for var in raw.secret_env.map(OneOrMany::into_vec).unwrap_or_default() {
        match env(&var) {
            Some(v) if !v.is_empty() => secrets.push(Secret::new(v)),
            _ => {
                return Err(ConfigError::invalid(
                    key("secret_env"),
                    format!("environment variable {var} is not set or empty"),
                ));
            }
        }
    }
    for path in raw.secret_file.map(OneOrMany::into_vec).unwrap_or_default() {
        // The file's text, without the line end an editor or `echo` leaves.
        match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim_end_matches(['\n', '\r']).is_empty() => {
                secrets.push(Secret::new(text.trim_end_matches(['\n', '\r'])));
            }
            Ok(_) => {
                return Err(ConfigError::invalid(
                    key("secret_file"),
                    format!("{path} is empty"),
                ));
            }
            Err(e) => {
                return Err(ConfigError::invalid(
                    key("secret_file"),
                    format!("cannot read {path}: {e}"),
                ));
            }
        }
    }
    if secrets.iter().any(|s| s.expose().is_empty()) {
        return Err(ConfigError::invalid(key("secrets"), "a secret is empty"));
    }
    Ok(secrets)
}

/// A source's `public_url`: an absolute http(s) URL without query or fragment.
fn validate_public_url(
    key: &dyn Fn(&str) -> String,
    public_url: Option<String>,
) -> Result<Option<String>, ConfigError> {
    Ok(match public_url {
        None => None,
        Some(url) => {
            let valid = url.parse::<http::Uri>().is_ok_and(|uri| {
                matches!(uri.scheme_str(), Some("http") | Some("https"))
                    && uri.host().is_some_and(|h| !h.is_empty())
            });
            if !valid {
                return Err(ConfigError::invalid(
                    key("public_url"),
                    format!(
                        "{:?} must be an absolute http:// or https:// URL",
                        redact_url(&url)
                    ),
                ));
            }
            if url.contains(['?', '#']) {
                return Err(ConfigError::invalid(
                    key("public_url"),
                    format!(
                        "{:?} has a query or fragment; give the URL without them (the query of each request is added to it)",
                        redact_url(&url)
                    ),
                ));
            }
            Some(url)
        }
    })
}

/// A source's `verify_token` (or `verify_token_env`): one of them, not empty.
fn validate_verify_token(
    key: &dyn Fn(&str) -> String,
    token: Option<String>,
    token_env: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Secret>, ConfigError> {
    Ok(match (token, token_env) {
        (Some(v), None) if !v.is_empty() => Some(Secret::new(v)),
        (None, Some(var)) => match env(&var) {
            Some(v) if !v.is_empty() => Some(Secret::new(v)),
            _ => {
                return Err(ConfigError::invalid(
                    key("verify_token_env"),
                    format!("environment variable {var} is not set or empty"),
                ));
            }
        },
        (None, None) => None,
        (Some(_), None) => {
            return Err(ConfigError::invalid(key("verify_token"), "is empty"));
        }
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                key("verify_token"),
                "set verify_token or verify_token_env, not both",
            ));
        }
    })
}

/// Validate the source at `index` of `[[sources]]`, reading the secrets its `*_env`
/// keys name through `env`.
pub(super) fn validate_source(
    index: usize,
    raw: RawSource,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SourceConfig, ConfigError> {
    let key_prefix = format!("sources[{index}]");
    let key = |field: &str| format!("{key_prefix}.{field}");
    if !valid_source_name(&raw.name) {
        return Err(ConfigError::invalid(
            key("name"),
            format!(
                "{:?} is not a valid source name; use 1-64 characters from [A-Za-z0-9._-]",
                raw.name
            ),
        ));
    }
    let secrets = validate_secrets(
        &key,
        Given {
            secret: raw.secret,
            secrets: raw.secrets,
            secret_env: raw.secret_env,
            secret_file: raw.secret_file,
        },
        env,
    )?;
    let public_url = validate_public_url(&key, raw.public_url)?;
    let source_secret = route::secret(
        &key_prefix,
        raw.destination_secret,
        raw.destination_secret_env,
        env,
    )?;
    let dedupe_ttl = match raw.dedupe_ttl {
        Some(v) => parse_duration(&key("dedupe_ttl"), &v)?,
        None => DEFAULT_DEDUPE_TTL,
    };
    if dedupe_ttl < Duration::from_secs(1) {
        return Err(ConfigError::invalid(
            key("dedupe_ttl"),
            "must be at least 1s",
        ));
    }
    let raw_retry = raw.retry.unwrap_or_default();
    let raw_delivery = raw.delivery.unwrap_or_default();
    if raw.order.is_some() && raw.routes.is_some() {
        return Err(ConfigError::invalid(
            key("order"),
            "with [[sources.routes]], set order on each route that needs it",
        ));
    }
    let routes = match (raw.destination, raw.routes) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                key("destination"),
                "set destination (one route named \"default\") or [[sources.routes]], not both",
            ));
        }
        (None, None) => {
            return Err(ConfigError::invalid(
                key("destination"),
                format!(
                    "source {:?} has no destination URL; set destination or [[sources.routes]]",
                    raw.name
                ),
            ));
        }
        (Some(url), None) => vec![route::default_route(
            &key_prefix,
            url,
            source_secret,
            CredentialKeys {
                credentials_file: raw.destination_credentials_file,
                user_env: raw.destination_user_env,
                password_env: raw.destination_password_env,
                token_env: raw.destination_token_env,
                pull_token_env: raw.pull_token_env,
            },
            &route::Inherited {
                retry: &raw_retry,
                delivery: &raw_delivery,
                destination_secret: None,
            },
            raw.order,
            env,
        )?],
        (None, Some(routes)) => route::routes(
            &key_prefix,
            routes,
            &route::Inherited {
                retry: &raw_retry,
                delivery: &raw_delivery,
                destination_secret: source_secret.as_ref(),
            },
            env,
        )?,
    };
    let index = validate_index(&key, raw.index)?;
    let (request_limit, unverified_per_client) = validate_limits(&key, raw.limits)?;
    let allow_ips = validate_allow_ips(&key, raw.allow_ips)?;
    let verify_token = validate_verify_token(&key, raw.verify_token, raw.verify_token_env, env)?;
    let expect = raw
        .expect
        .map(|e| Expectation::parse(&key("expect"), e.at_least.as_deref(), e.learn))
        .transpose()?;
    let reconcile = raw
        .reconcile
        .map(|r| validate_reconcile(&key, &raw.provider, r, env))
        .transpose()?;
    Ok(SourceConfig {
        name: raw.name,
        provider: raw.provider,
        secrets,
        public_url,
        dedupe_ttl,
        provider_options: raw.provider_options,
        routes,
        keep_rejected_bodies: raw.keep_rejected_bodies,
        index,
        request_limit,
        unverified_per_client,
        allow_ips,
        verify_token,
        confirm_subscriptions: raw.confirm_subscriptions,
        expect,
        reconcile,
    })
}

#[cfg(test)]
mod tests {
    use super::super::from_toml_str;
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn secrets_from_value_list_and_env() {
        let text = r#"
[[sources]]
name = "s"
provider = "github"
secret = "a"
secrets = ["b", "c"]
secret_env = ["X", "Y"]
destination = "http://127.0.0.1:3000/"
"#;
        let env = |k: &str| match k {
            "X" => Some("d".to_string()),
            "Y" => Some("e".to_string()),
            _ => None,
        };
        let cfg = from_toml_str(text, &env).unwrap();
        let got: Vec<&str> = cfg.sources[0].secrets.iter().map(Secret::expose).collect();
        assert_eq!(got, ["a", "b", "c", "d", "e"]);
    }

    #[test]
    fn request_limits_parse_with_their_burst() {
        let base = "[[sources]]\nname = \"s\"\nprovider = \"github\"\nsecret = \"a\"\ndestination = \"http://127.0.0.1:3000/\"\n";
        let cfg = from_toml_str(base, &no_env).unwrap();
        assert_eq!(cfg.sources[0].request_limit, None);
        let cfg = from_toml_str(
            &format!("{base}[sources.limits]\nrequests = \"100/s\"\n"),
            &no_env,
        )
        .unwrap();
        let limit = cfg.sources[0].request_limit.unwrap();
        assert_eq!((limit.per_second, limit.burst), (100.0, 10));
        // With a request limit comes a budget of unverified requests per client.
        let unverified = cfg.sources[0].unverified_per_client.unwrap();
        assert_eq!((unverified.per_second, unverified.burst), (10.0, 10));
        let cfg = from_toml_str(
            &format!("{base}[sources.limits]\nunverified_per_client = \"2/s\"\n"),
            &no_env,
        )
        .unwrap();
        assert_eq!(cfg.sources[0].request_limit, None);
        assert_eq!(
            cfg.sources[0].unverified_per_client.unwrap().per_second,
            2.0
        );
        assert!(
            from_toml_str(
                &format!("{base}[sources.limits]\nunverified_per_client = \"lots\"\n"),
                &no_env,
            )
            .unwrap_err()
            .to_string()
            .contains("sources[0].limits.unverified_per_client")
        );
        let cfg = from_toml_str(
            &format!("{base}[sources.limits]\nrequests = \"600/m\"\nburst = 30\n"),
            &no_env,
        )
        .unwrap();
        let limit = cfg.sources[0].request_limit.unwrap();
        assert_eq!((limit.per_second, limit.burst), (10.0, 30));
        for (bad, key) in [
            ("requests = \"100/d\"\n", "sources[0].limits.requests"),
            (
                "requests = \"100/s\"\nburst = 0\n",
                "sources[0].limits.burst",
            ),
            ("burst = 5\n", "sources[0].limits.burst"),
            ("request = \"100/s\"\n", "request"),
        ] {
            let err =
                from_toml_str(&format!("{base}[sources.limits]\n{bad}"), &no_env).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(key), "{bad:?}: {text}");
        }
    }

    #[test]
    fn allow_ips_take_ranges_addresses_or_the_provider() {
        let base = "[[sources]]\nname = \"s\"\nprovider = \"github\"\nsecret = \"a\"\ndestination = \"http://127.0.0.1:3000/\"\n";
        let with = |v: &str| from_toml_str(&format!("{base}allow_ips = {v}\n"), &no_env);
        let cfg = with("[\"192.0.2.0/24\", \"2001:db8::/32\", \"198.51.100.7\"]").unwrap();
        let Some(AllowIps::List(list)) = &cfg.sources[0].allow_ips else {
            panic!("{:?}", cfg.sources[0].allow_ips)
        };
        let shown: Vec<String> = list.iter().map(|n| n.to_string()).collect();
        assert_eq!(shown, ["192.0.2.0/24", "2001:db8::/32", "198.51.100.7/32"]);
        let cfg = with("\"provider\"").unwrap();
        assert_eq!(cfg.sources[0].allow_ips, Some(AllowIps::Provider));
        for bad in [
            "\"github\"",
            "[]",
            "[\"10.0.0.1/8\"]",
            "[\"300.1.1.1\"]",
            "[\"192.0.2.0/33\"]",
        ] {
            let err = with(bad).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("sources[0].allow_ips"), "{bad}: {text}");
        }
        assert!(
            from_toml_str(
                &format!("[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\"]\n{base}"),
                &no_env
            )
            .is_ok()
        );
        let err = from_toml_str(
            &format!("[server]\ntrusted_proxies = [\"proxy\"]\n{base}"),
            &no_env,
        )
        .unwrap_err();
        assert!(err.to_string().contains("server.trusted_proxies"), "{err}");
    }

    #[test]
    fn missing_secret_env_is_named() {
        let text = r#"
[[sources]]
name = "s"
provider = "github"
secret_env = "NOPE"
destination = "http://127.0.0.1:3000/"
"#;
        let err = from_toml_str(text, &no_env).unwrap_err().to_string();
        assert!(
            err.contains("sources[0].secret_env") && err.contains("NOPE"),
            "{err}"
        );
    }

    #[test]
    fn secrets_from_files_lose_their_line_end_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, "from-a-file\n").unwrap();
        let text = format!(
            "[[sources]]\nname = \"s\"\nprovider = \"github\"\nsecret_file = [{:?}]\ndestination = \"http://127.0.0.1:3000/\"\n",
            a.display().to_string()
        );
        let cfg = from_toml_str(&text, &no_env).unwrap();
        assert_eq!(cfg.sources[0].secrets[0].expose(), "from-a-file");
        let missing = text.replace(&a.display().to_string(), "/nonexistent/secret");
        let err = from_toml_str(&missing, &no_env).unwrap_err().to_string();
        assert!(
            err.contains("sources[0].secret_file") && err.contains("/nonexistent/secret"),
            "{err}"
        );
        std::fs::write(&a, "\n").unwrap();
        let err = from_toml_str(&text, &no_env).unwrap_err().to_string();
        assert!(err.contains("is empty"), "{err}");
    }

    #[test]
    fn bad_source_name_and_destination() {
        let err = from_toml_str(
            "[[sources]]\nname = \"a/b\"\nprovider = \"github\"\nsecret = \"x\"\ndestination = \"http://h/\"\n",
            &no_env,
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("sources[0].name:"), "{err}");
        let err = from_toml_str(
            "[[sources]]\nname = \"a\"\nprovider = \"github\"\nsecret = \"x\"\ndestination = \"ftp://h/\"\n",
            &no_env,
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("sources[0].destination:"), "{err}");
    }

    #[test]
    fn public_url_is_an_absolute_url_without_query() {
        let src = |u: &str| {
            format!(
                "[[sources]]\nname = \"a\"\nprovider = \"twilio\"\nsecret = \"x\"\ndestination = \"http://h/\"\npublic_url = \"{u}\"\n"
            )
        };
        let cfg = from_toml_str(&src("https://hooks.example.com/ingest/a"), &no_env).unwrap();
        assert_eq!(
            cfg.sources[0].public_url.as_deref(),
            Some("https://hooks.example.com/ingest/a")
        );
        for bad in [
            "/ingest/a",
            "ftp://h/x",
            "https://h/x?a=1",
            "https://h/x#f",
            "not a url",
        ] {
            let err = from_toml_str(&src(bad), &no_env).unwrap_err().to_string();
            assert!(err.starts_with("sources[0].public_url:"), "{bad}: {err}");
        }
    }
}
