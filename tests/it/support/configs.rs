//! The configurations tests run the gateway with: one source per built-in provider
//! with known secrets, after a store's `[store]` section, in process or as a file
//! for a child gateway.

use std::path::{Path, PathBuf};

use hookgate::config::{self, Config};

use super::StoreHandle;

/// Secrets used by [`sources_toml`].
pub const STRIPE_SECRET: &str = "whsec_test_secret";
pub const GITHUB_SECRET: &str = "It's a Secret to Everybody";
pub const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
pub const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const SHOPIFY_SECRET: &str = "shpss_0123456789abcdef";
pub const HMAC_SECRET: &str = "generic-secret";

/// One source per built-in provider, named after it, plus `rotated` (GitHub with two
/// secrets) and `paused`.
pub fn sources_toml() -> String {
    format!(
        r#"
[[sources]]
name = "stripe"
provider = "stripe"
secret = "{STRIPE_SECRET}"
destination = "http://127.0.0.1:9/stripe"

[[sources]]
name = "github"
provider = "github"
secret = "{GITHUB_SECRET}"
destination = "http://127.0.0.1:9/github"

[[sources]]
name = "slack"
provider = "slack"
secret = "{SLACK_SECRET}"
destination = "http://127.0.0.1:9/slack"

[[sources]]
name = "standard-webhooks"
provider = "standard-webhooks"
secret = "{SW_SECRET}"
destination = "http://127.0.0.1:9/sw"

[[sources]]
name = "shopify"
provider = "shopify"
secret = "{SHOPIFY_SECRET}"
destination = "http://127.0.0.1:9/shopify"

[[sources]]
name = "hmac"
provider = "hmac"
secret = "{HMAC_SECRET}"
destination = "http://127.0.0.1:9/hmac"

[[sources]]
name = "rotated"
provider = "github"
secrets = ["new-secret-2026", "{GITHUB_SECRET}"]
destination = "http://127.0.0.1:9/rotated"

[[sources]]
name = "paused"
provider = "hmac"
secret = "{HMAC_SECRET}"
destination = "http://127.0.0.1:9/paused"
"#
    )
}

pub fn secret_for(source: &str) -> &'static str {
    match source {
        "stripe" => STRIPE_SECRET,
        "github" | "rotated" => GITHUB_SECRET,
        "slack" => SLACK_SECRET,
        "standard-webhooks" => SW_SECRET,
        "shopify" => SHOPIFY_SECRET,
        _ => HMAC_SECRET,
    }
}

pub fn provider_for(source: &str) -> &'static str {
    match source {
        "stripe" => "stripe",
        "github" | "rotated" => "github",
        "slack" => "slack",
        "standard-webhooks" => "standard-webhooks",
        "shopify" => "shopify",
        _ => "hmac",
    }
}

/// A config for `handle`'s store with the standard sources, plus `extra` TOML.
pub fn config(handle: &StoreHandle, extra: &str) -> Config {
    let text = format!("{}\n{extra}\n{}", handle.toml(), sources_toml());
    config::from_toml_str(&text, &|_| None).expect("test config")
}

/// Write `text` as `hookgate.toml` in `dir`; its path.
pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("hookgate.toml");
    std::fs::write(&path, text).expect("write the config file");
    path
}

/// A config file in `dir` for `handle`'s store with the standard sources: what
/// [`config`] builds, for a child gateway.
pub fn config_file(handle: &StoreHandle, dir: &Path) -> PathBuf {
    write_config(dir, &format!("{}\n{}", handle.toml(), sources_toml()))
}
