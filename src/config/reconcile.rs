//! `[sources.reconcile]`: how the gateway asks a source's provider what it sent.
//!
//! A 2xx protects what reached the gateway; what never reached it (GitHub does not
//! retry a failed delivery, Stripe stops after three days) is lost unless someone
//! compares with the provider. Reconciliation (`crate::reconcile`) lists what the
//! provider sent through its API and recovers what the store does not hold. This
//! file checks what it needs: the API's credential (from the environment or a
//! file, never the file's text), which of the provider's hooks or endpoints to
//! compare with, how often, how far back, and where the API is.

use std::time::Duration;

use super::durations::parse_duration;
use super::raw::RawReconcile;
use super::{ConfigError, Secret};

/// How often a source is reconciled when `interval` is not given.
pub const DEFAULT_RECONCILE_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// How far back a pass looks when `lookback` is not given (and at most what the
/// provider keeps: see [`ReconcileApi::keeps`]).
pub const DEFAULT_RECONCILE_LOOKBACK: Duration = Duration::from_secs(3 * 24 * 3600);
/// The shortest interval: each pass lists at least one page of the provider's API.
pub const RECONCILE_INTERVAL_MIN: Duration = Duration::from_secs(10);

/// The providers whose API reconciliation knows, as `provider` names them.
pub const RECONCILE_PROVIDERS: &[&str] = &["github", "stripe", "square"];

/// A source's reconciliation, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcileConfig {
    pub api: ReconcileApi,
    pub interval: Duration,
    /// As configured; a pass caps it by what the provider keeps and by the source's
    /// `dedupe_ttl` and the store's retention.
    pub lookback: Duration,
    /// The API's base URL without a trailing `/` (https, or http to loopback only).
    pub api_base: String,
    /// How long what the provider lists is left to its own delivery before a pass
    /// judges it (a delivery still being answered, an event about to be sent).
    pub settle: Duration,
}

/// Which provider API, with what a pass needs to call it.
#[derive(Debug, Clone, PartialEq)]
pub enum ReconcileApi {
    /// GitHub's webhook deliveries of one hook: failed ones are redelivered.
    GitHub { hook: GitHubHook, auth: GitHubAuth },
    /// Stripe's events of the account, as one webhook endpoint would have been sent
    /// them: missing ones are admitted from the API.
    Stripe { api_key: Secret, endpoint: String },
    /// Square's events (the Events API, `POST /v2/events`), as one webhook
    /// subscription would have been sent them: missing ones are admitted.
    Square { token: Secret, subscription: String },
}

impl ReconcileApi {
    /// Whose API it is.
    pub fn provider(&self) -> ReconcileProvider {
        match self {
            ReconcileApi::GitHub { .. } => ReconcileProvider::GitHub,
            ReconcileApi::Stripe { .. } => ReconcileProvider::Stripe,
            ReconcileApi::Square { .. } => ReconcileProvider::Square,
        }
    }

    /// The API's credential (a token, an App's private key, a secret key).
    pub fn credential(&self) -> &Secret {
        match self {
            ReconcileApi::GitHub {
                auth: GitHubAuth::Token(t),
                ..
            } => t,
            ReconcileApi::GitHub {
                auth: GitHubAuth::App { private_key, .. },
                ..
            } => private_key,
            ReconcileApi::Stripe { api_key, .. } => api_key,
            ReconcileApi::Square { token, .. } => token,
        }
    }

    /// How long the provider keeps what its API lists.
    pub fn keeps(&self) -> Duration {
        match self {
            // Deliveries of the last 3 days (GitHub Enterprise Server keeps 7; the
            // API answers what it has).
            ReconcileApi::GitHub { .. } => Duration::from_secs(7 * 24 * 3600),
            // Events of the last 30 days.
            ReconcileApi::Stripe { .. } => Duration::from_secs(30 * 24 * 3600),
            // Events of the last 28 days.
            ReconcileApi::Square { .. } => Duration::from_secs(28 * 24 * 3600),
        }
    }

    /// How long a listed item is left to the provider's own delivery by default:
    /// GitHub lists a delivery once it was answered; Stripe and Square list an event
    /// before they send it, and retry a failed one within minutes.
    pub fn default_settle(&self) -> Duration {
        match self {
            ReconcileApi::GitHub { .. } => Duration::from_secs(60),
            ReconcileApi::Stripe { .. } | ReconcileApi::Square { .. } => {
                Duration::from_secs(5 * 60)
            }
        }
    }

    /// The API's public base URL.
    pub fn default_base(&self) -> &'static str {
        match self {
            ReconcileApi::GitHub { .. } => "https://api.github.com",
            ReconcileApi::Stripe { .. } => "https://api.stripe.com",
            ReconcileApi::Square { .. } => "https://connect.squareup.com",
        }
    }
}

/// Whose API a reconciliation reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReconcileProvider {
    #[default]
    #[serde(rename = "github")]
    GitHub,
    Stripe,
    Square,
}

impl ReconcileProvider {
    /// Its name, as `provider` names it and the `provider` labels say it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcileProvider::GitHub => "github",
            ReconcileProvider::Stripe => "stripe",
            ReconcileProvider::Square => "square",
        }
    }
}

impl std::fmt::Display for ReconcileProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The GitHub hook whose deliveries are compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitHubHook {
    /// `repos/OWNER/REPO/hooks/ID`
    Repository {
        owner: String,
        repo: String,
        id: u64,
    },
    /// `orgs/ORG/hooks/ID`
    Organization { org: String, id: u64 },
    /// `app`: the webhook of the GitHub App (`app_id`, `private_key_file`).
    App,
}

impl GitHubHook {
    /// The API path of the hook's deliveries (without the base).
    pub fn deliveries_path(&self) -> String {
        match self {
            GitHubHook::Repository { owner, repo, id } => {
                format!("/repos/{owner}/{repo}/hooks/{id}/deliveries")
            }
            GitHubHook::Organization { org, id } => format!("/orgs/{org}/hooks/{id}/deliveries"),
            GitHubHook::App => "/app/hook/deliveries".to_string(),
        }
    }
}

/// How a pass authenticates to GitHub.
#[derive(Debug, Clone, PartialEq)]
pub enum GitHubAuth {
    /// A token that may read the hook (`token_env`, `token_file`).
    Token(Secret),
    /// The GitHub App's JWT (RS256, signed with its private key).
    App { app_id: String, private_key: Secret },
}

/// A credential from the environment (`*_env`) or a file (`*_file`): one of them.
fn credential(
    key: &dyn Fn(&str) -> String,
    name: &str,
    from_env: Option<String>,
    from_file: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Secret>, ConfigError> {
    match (from_env, from_file) {
        (Some(_), Some(_)) => Err(ConfigError::invalid(
            key(&format!("{name}_env")),
            format!("set {name}_env or {name}_file, not both"),
        )),
        (Some(var), None) => match env(&var) {
            Some(v) if !v.trim().is_empty() => Ok(Some(Secret::new(v.trim().to_string()))),
            _ => Err(ConfigError::invalid(
                key(&format!("{name}_env")),
                format!("environment variable {var} is not set or empty"),
            )),
        },
        (None, Some(path)) => match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => Ok(Some(Secret::new(text.trim().to_string()))),
            Ok(_) => Err(ConfigError::invalid(
                key(&format!("{name}_file")),
                format!("{path} is empty"),
            )),
            Err(e) => Err(ConfigError::invalid(
                key(&format!("{name}_file")),
                format!("cannot read {path}: {e}"),
            )),
        },
        (None, None) => Ok(None),
    }
}

/// What a key that belongs to another provider's reconciliation says.
fn foreign(key: &dyn Fn(&str) -> String, field: &str, provider: &str) -> ConfigError {
    ConfigError::invalid(
        key(field),
        format!("is not a key of {provider}'s reconciliation"),
    )
}

/// Parse `hook`: `repos/OWNER/REPO/hooks/ID`, `orgs/ORG/hooks/ID` or `app`.
fn parse_hook(key: &str, text: &str) -> Result<GitHubHook, ConfigError> {
    let invalid = || {
        ConfigError::invalid(
            key,
            format!(
                "{text:?}: write \"repos/OWNER/REPO/hooks/ID\", \"orgs/ORG/hooks/ID\" or \"app\""
            ),
        )
    };
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 100
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    let parts: Vec<&str> = text.trim().trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["app"] => Ok(GitHubHook::App),
        ["repos", owner, repo, "hooks", id] if name_ok(owner) && name_ok(repo) => {
            Ok(GitHubHook::Repository {
                owner: owner.to_string(),
                repo: repo.to_string(),
                id: id.parse().map_err(|_| invalid())?,
            })
        }
        ["orgs", org, "hooks", id] if name_ok(org) => Ok(GitHubHook::Organization {
            org: org.to_string(),
            id: id.parse().map_err(|_| invalid())?,
        }),
        _ => Err(invalid()),
    }
}

/// Check `api_base`: https, or plain http to a loopback address only (a test's fake
/// API, a local proxy), without query or fragment.
fn validate_api_base(key: &str, text: &str) -> Result<String, ConfigError> {
    let url = reqwest::Url::parse(text.trim())
        .map_err(|e| ConfigError::invalid(key, format!("{text:?} is not a URL: {e}")))?;
    let loopback = url.host_str().is_some_and(|h| {
        h == "localhost"
            || h.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|a| a.is_loopback())
    });
    match url.scheme() {
        "https" => {}
        "http" if loopback => {}
        "http" => {
            return Err(ConfigError::invalid(
                key,
                "plain http is allowed to a loopback address only: the API's credential travels with each request",
            ));
        }
        other => {
            return Err(ConfigError::invalid(
                key,
                format!("scheme {other:?}: use https"),
            ));
        }
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(ConfigError::invalid(
            key,
            "no query, fragment or user in the API's base URL",
        ));
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

/// What differs between the events APIs (Stripe's, Square's): the provider's name,
/// the key naming the webhook that calls the source, and the other provider's key.
struct EventsApi {
    name: &'static str,
    which: &'static str,
    other: &'static str,
}

impl EventsApi {
    const STRIPE: EventsApi = EventsApi {
        name: "Stripe",
        which: "endpoint",
        other: "subscription",
    };
    const SQUARE: EventsApi = EventsApi {
        name: "Square",
        which: "subscription",
        other: "endpoint",
    };
}

/// Check the keys of an events API's reconciliation: its credential (`api_key_*`)
/// and the id of the webhook `api.which` that calls the source.
/// `id` is the value of that key, `other` whether the other provider's key is set.
fn events_api(
    k: &dyn Fn(&str) -> String,
    env: &dyn Fn(&str) -> Option<String>,
    raw: &mut RawReconcile,
    api: EventsApi,
    id: Option<String>,
    other: bool,
) -> Result<(Secret, String), ConfigError> {
    for (field, given) in [
        ("hook", raw.hook.is_some()),
        ("token_env", raw.token_env.is_some()),
        ("token_file", raw.token_file.is_some()),
        ("app_id", raw.app_id.is_some()),
        ("private_key_file", raw.private_key_file.is_some()),
        (api.other, other),
    ] {
        if given {
            return Err(foreign(k, field, api.name));
        }
    }
    let secret = credential(
        k,
        "api_key",
        raw.api_key_env.take(),
        raw.api_key_file.take(),
        env,
    )?
    .ok_or_else(|| {
        ConfigError::invalid(
            k("api_key_env"),
            format!(
                "{}'s API needs a credential: api_key_env or api_key_file",
                api.name
            ),
        )
    })?;
    let id = id
        .map(|s| s.trim().to_string())
        .filter(|s| {
            !s.is_empty()
                && s.len() <= 128
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
        })
        .ok_or_else(|| {
            ConfigError::invalid(
                k(api.which),
                format!(
                    "the id of the {} webhook {} that calls this source (its event types and mode decide what it would have been sent)",
                    api.name, api.which
                ),
            )
        })?;
    Ok((secret, id))
}

/// Validate `[sources.reconcile]` of a source of `provider`.
pub(super) fn validate_reconcile(
    key: &dyn Fn(&str) -> String,
    provider: &str,
    mut raw: RawReconcile,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ReconcileConfig, ConfigError> {
    let k = |field: &str| key(&format!("reconcile.{field}"));
    let api = match provider {
        "github" => {
            for (field, given) in [
                ("api_key_env", raw.api_key_env.is_some()),
                ("api_key_file", raw.api_key_file.is_some()),
                ("endpoint", raw.endpoint.is_some()),
                ("subscription", raw.subscription.is_some()),
            ] {
                if given {
                    return Err(foreign(&k, field, "GitHub"));
                }
            }
            let hook_text = raw.hook.ok_or_else(|| {
                ConfigError::invalid(
                    k("hook"),
                    "name the hook whose deliveries to compare: \"repos/OWNER/REPO/hooks/ID\", \"orgs/ORG/hooks/ID\" or \"app\"",
                )
            })?;
            let hook = parse_hook(&k("hook"), &hook_text)?;
            let token = credential(&k, "token", raw.token_env, raw.token_file, env)?;
            let auth = match (token, raw.app_id, raw.private_key_file) {
                (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                    return Err(ConfigError::invalid(
                        k("token_env"),
                        "set a token, or app_id with private_key_file, not both",
                    ));
                }
                (Some(t), None, None) => GitHubAuth::Token(t),
                (None, Some(app_id), Some(path)) => {
                    if app_id.trim().is_empty()
                        || !app_id
                            .trim()
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'.')
                    {
                        return Err(ConfigError::invalid(
                            k("app_id"),
                            "the App's id or client id (letters, digits and dots)",
                        ));
                    }
                    let pem = credential(&k, "private_key", None, Some(path), env)?
                        .ok_or_else(|| ConfigError::invalid(k("private_key_file"), "missing"))?;
                    if jsonwebtoken::EncodingKey::from_rsa_pem(pem.expose().as_bytes()).is_err() {
                        return Err(ConfigError::invalid(
                            k("private_key_file"),
                            "not an RSA private key in PEM (the .pem GitHub gives for an App)",
                        ));
                    }
                    GitHubAuth::App {
                        app_id: app_id.trim().to_string(),
                        private_key: pem,
                    }
                }
                (None, Some(_), None) => {
                    return Err(ConfigError::invalid(
                        k("private_key_file"),
                        "an App needs its private key (private_key_file) with app_id",
                    ));
                }
                (None, None, Some(_)) => {
                    return Err(ConfigError::invalid(
                        k("app_id"),
                        "an App's private key needs its app_id",
                    ));
                }
                (None, None, None) => {
                    return Err(ConfigError::invalid(
                        k("token_env"),
                        "GitHub's API needs a credential: token_env (or token_file), or app_id with private_key_file",
                    ));
                }
            };
            match (&hook, &auth) {
                (GitHubHook::App, GitHubAuth::Token(_)) => {
                    return Err(ConfigError::invalid(
                        k("hook"),
                        "an App's webhook deliveries are read with the App's JWT: set app_id and private_key_file",
                    ));
                }
                (
                    GitHubHook::Repository { .. } | GitHubHook::Organization { .. },
                    GitHubAuth::App { .. },
                ) => {
                    return Err(ConfigError::invalid(
                        k("hook"),
                        "with app_id and private_key_file, the hook is the App's own: hook = \"app\"",
                    ));
                }
                _ => {}
            }
            ReconcileApi::GitHub { hook, auth }
        }
        "stripe" => {
            let (id, other) = (raw.endpoint.take(), raw.subscription.is_some());
            let (api_key, endpoint) = events_api(&k, env, &mut raw, EventsApi::STRIPE, id, other)?;
            ReconcileApi::Stripe { api_key, endpoint }
        }
        "square" => {
            let (id, other) = (raw.subscription.take(), raw.endpoint.is_some());
            let (token, subscription) =
                events_api(&k, env, &mut raw, EventsApi::SQUARE, id, other)?;
            ReconcileApi::Square {
                token,
                subscription,
            }
        }
        other => {
            return Err(ConfigError::invalid(
                key("reconcile"),
                format!(
                    "reconciliation knows the APIs of {} ; provider {other:?} has none it can use",
                    RECONCILE_PROVIDERS.join(", ")
                ),
            ));
        }
    };
    let interval = match raw.interval {
        Some(text) => parse_duration(&k("interval"), &text)?,
        None => DEFAULT_RECONCILE_INTERVAL,
    };
    if interval < RECONCILE_INTERVAL_MIN {
        return Err(ConfigError::invalid(
            k("interval"),
            "at least 10s: every pass lists the provider's API",
        ));
    }
    let lookback = match raw.lookback {
        Some(text) => parse_duration(&k("lookback"), &text)?,
        None => DEFAULT_RECONCILE_LOOKBACK,
    };
    if lookback < Duration::from_secs(60) {
        return Err(ConfigError::invalid(k("lookback"), "at least 1m"));
    }
    let settle = match raw.settle {
        Some(text) => parse_duration(&k("settle"), &text)?,
        None => api.default_settle(),
    };
    if settle >= lookback {
        return Err(ConfigError::invalid(
            k("settle"),
            "must be shorter than lookback: nothing would ever be judged",
        ));
    }
    let api_base = match raw.api_base {
        Some(text) => validate_api_base(&k("api_base"), &text)?,
        None => api.default_base().to_string(),
    };
    Ok(ReconcileConfig {
        api,
        interval,
        lookback,
        api_base,
        settle,
    })
}

#[cfg(test)]
mod tests {
    use super::super::from_toml_str;
    use super::*;

    fn source(provider: &str, reconcile: &str) -> String {
        format!(
            r#"
[[sources]]
name = "s"
provider = "{provider}"
secret = "x"
destination = "http://127.0.0.1:9/"
[sources.reconcile]
{reconcile}
"#
        )
    }

    fn env(var: &str) -> Option<String> {
        (var == "API_KEY").then(|| "sk_test_123".to_string())
    }

    fn config(provider: &str, reconcile: &str) -> Result<ReconcileConfig, String> {
        from_toml_str(&source(provider, reconcile), &env)
            .map(|c| c.sources[0].reconcile.clone().expect("reconcile"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn each_provider_takes_its_keys_with_defaults() {
        let gh = config(
            "github",
            "token_env = \"API_KEY\"\nhook = \"repos/acme/api/hooks/42\"",
        )
        .unwrap();
        assert_eq!(gh.interval, DEFAULT_RECONCILE_INTERVAL);
        assert_eq!(gh.lookback, DEFAULT_RECONCILE_LOOKBACK);
        assert_eq!(gh.api_base, "https://api.github.com");
        let ReconcileApi::GitHub { hook, auth } = &gh.api else {
            panic!("{gh:?}")
        };
        assert_eq!(
            hook.deliveries_path(),
            "/repos/acme/api/hooks/42/deliveries"
        );
        assert!(matches!(auth, GitHubAuth::Token(t) if t.expose() == "sk_test_123"));
        let org = config(
            "github",
            "token_env = \"API_KEY\"\nhook = \"orgs/acme/hooks/7\"\ninterval = \"1m\"\nlookback = \"6h\"\napi_base = \"http://127.0.0.1:8080/api/v3/\"",
        )
        .unwrap();
        assert_eq!(org.interval, Duration::from_secs(60));
        assert_eq!(org.lookback, Duration::from_secs(6 * 3600));
        assert_eq!(org.api_base, "http://127.0.0.1:8080/api/v3");
        let stripe = config("stripe", "api_key_env = \"API_KEY\"\nendpoint = \"we_123\"").unwrap();
        assert!(
            matches!(&stripe.api, ReconcileApi::Stripe { endpoint, .. } if endpoint == "we_123")
        );
        assert_eq!(stripe.api_base, "https://api.stripe.com");
        let square = config(
            "square",
            "api_key_env = \"API_KEY\"\nsubscription = \"wbhk_1\"",
        )
        .unwrap();
        assert!(
            matches!(&square.api, ReconcileApi::Square { subscription, .. } if subscription == "wbhk_1")
        );
    }

    #[test]
    fn what_cannot_work_is_refused_naming_the_key() {
        for (provider, text, key, says) in [
            (
                "github",
                "token_env = \"API_KEY\"",
                "reconcile.hook",
                "name the hook",
            ),
            (
                "github",
                "token_env = \"API_KEY\"\nhook = \"repos/acme/hooks/1\"",
                "reconcile.hook",
                "repos/OWNER",
            ),
            (
                "github",
                "hook = \"orgs/a/hooks/1\"",
                "reconcile.token_env",
                "needs a credential",
            ),
            (
                "github",
                "token_env = \"NOPE\"\nhook = \"orgs/a/hooks/1\"",
                "reconcile.token_env",
                "NOPE is not set",
            ),
            (
                "github",
                "token_env = \"API_KEY\"\nhook = \"app\"",
                "reconcile.hook",
                "App's JWT",
            ),
            (
                "github",
                "app_id = \"1\"\nhook = \"app\"",
                "reconcile.private_key_file",
                "private key",
            ),
            (
                "github",
                "token_env = \"API_KEY\"\nhook = \"orgs/a/hooks/1\"\nendpoint = \"we_1\"",
                "reconcile.endpoint",
                "not a key of GitHub",
            ),
            (
                "github",
                "token_env = \"API_KEY\"\nhook = \"orgs/a/hooks/1\"\napi_base = \"http://api.example.com\"",
                "reconcile.api_base",
                "loopback",
            ),
            (
                "github",
                "token_env = \"API_KEY\"\nhook = \"orgs/a/hooks/1\"\ninterval = \"1s\"",
                "reconcile.interval",
                "at least 10s",
            ),
            (
                "stripe",
                "api_key_env = \"API_KEY\"",
                "reconcile.endpoint",
                "webhook endpoint",
            ),
            (
                "stripe",
                "endpoint = \"we_1\"",
                "reconcile.api_key_env",
                "needs a credential",
            ),
            (
                "stripe",
                "api_key_env = \"API_KEY\"\nendpoint = \"we_1\"\nhook = \"app\"",
                "reconcile.hook",
                "not a key of Stripe",
            ),
            (
                "square",
                "api_key_env = \"API_KEY\"\nendpoint = \"we_1\"",
                "reconcile.endpoint",
                "not a key of Square",
            ),
            (
                "shopify",
                "api_key_env = \"API_KEY\"",
                "reconcile",
                "provider \"shopify\"",
            ),
        ] {
            let e = config(provider, text).unwrap_err();
            assert!(
                e.contains(key) && e.contains(says),
                "{provider} {text}: {e}"
            );
        }
    }

    #[test]
    fn an_app_key_must_be_an_rsa_pem() {
        let dir = std::env::temp_dir().join(format!("hookgate-reconcile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("app.pem");
        std::fs::write(&path, "not a key").unwrap();
        let e = config(
            "github",
            &format!(
                "app_id = \"123\"\nprivate_key_file = {:?}\nhook = \"app\"",
                path.display().to_string()
            ),
        )
        .unwrap_err();
        assert!(e.contains("not an RSA private key"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
