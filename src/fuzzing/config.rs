//! Target `config`: the configuration file and provider-spec loaders (TOML), and the
//! duration and rate-limit parsers they use.
//!
//! Input: a TOML text. It is loaded as a configuration file the way `hookgate
//! check-config` does (validation, then every source compiled against its provider,
//! its `provider_options` merged in, its filters and ordering keys), and as a
//! provider spec; every line is also given to the duration and rate-limit parsers.
//!
//! Checked beyond "no panic": a provider spec that compiles keeps the signer's round
//! trip (what hookgate signs with it verifies; one changed signature character does
//! not), as the built-in specs do in the `verify` target.

use std::sync::{Arc, OnceLock};

use crate::config::{RateLimit, Secret, parse_duration};
use crate::ingest::body::BodyBudget;
use crate::provider::spec::describe;
use crate::provider::{Registry, Spec, Verifier};

fn builtin() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| match Registry::builtin() {
        Ok(r) => r,
        Err(e) => panic!("the built-in registry: {e}"),
    })
}

pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env = |name: &str| (name == "FUZZ_SECRET").then(|| "fuzz-secret-value".to_string());
    if let Ok(mut cfg) = crate::config::from_toml_str(text, &env) {
        // Only the built-in providers: the target reads no directory.
        cfg.providers_dir = None;
        let budget = BodyBudget::new(cfg.server.body_budget_bytes);
        let _ = crate::app::build_sources(&cfg, builtin(), &budget);
        let _ = crate::app::unsigned_values(&cfg, builtin());
    }
    if let Ok(spec) = Spec::from_toml(text) {
        let _ = describe(&spec);
        let spec = Arc::new(spec);
        let secret = spec
            .vectors
            .first()
            .map(|v| v.secret.clone())
            .unwrap_or_else(|| "fuzz-secret-value".to_string());
        if let Ok(verifier) = Verifier::new(spec.clone(), &[Secret::new(secret.clone())]) {
            super::verify::round_trip(
                &spec,
                &verifier,
                &Secret::new(secret),
                br#"{"id":"evt_1","type":"a.b","data":{"object":{"id":"o_1"}}}"#,
                None,
                None,
            );
        }
    }
    for line in text.lines().take(64) {
        let _ = parse_duration("fuzz", line);
        let _ = RateLimit::parse(line);
    }
}
