//! Providers are data: the registry of provider specs and the per-source verifier.
//!
//! The specs in `providers/*.toml` are compiled into the binary; `providers_dir` adds
//! more or replaces built-in ones by name. A source picks a provider by name and may
//! override any key of its spec (`provider_options`), which is how the generic `hmac`
//! provider is configured for senders that have no spec of their own.
//!
//! The parts: [`spec`] is the format and its compiled form, [`verify`] the one
//! verification engine, [`sign`] the engine run backwards, [`signed`] which values a
//! signature covers, and [`certificate`] and [`jwk`] the keys some schemes fetch.
//! This file holds the registry and the per-source [`Verifier`].
//!
//! The I/O in `provider` is in two places: this file reads `providers_dir`, and
//! [`certificate`] fetches the keys of certificate and `[jwk]` schemes over HTTPS
//! and keeps them by the process's clock. The rest (the specs, the engine, the
//! signer) does no I/O and reads no clock: the caller passes `now` and the key.

pub mod certificate;
pub mod jwk;
pub mod sign;
pub mod signed;
pub mod spec;
pub mod verify;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

pub use spec::{Spec, SpecError};
pub use verify::{EventIdentity, HandshakeReply, Key, Request, Verified, VerifyError, request_url};

/// Register `hookgate_ingest_unverified_total` with a zero series for every source
/// and reason a verification can fail for, so that the first scrape lists them all.
pub fn register_metrics<'a>(sources: impl IntoIterator<Item = &'a str>) {
    for source in sources {
        for reason in VerifyError::ALL {
            metrics::counter!("hookgate_ingest_unverified_total", "source" => source.to_string(), "reason" => reason.label()).increment(0);
        }
    }
}

use crate::config::Secret;

/// The provider specs shipped in the binary, as (file name, TOML text).
pub const BUILTIN: &[(&str, &str)] = &[
    ("adyen.toml", include_str!("../../providers/adyen.toml")),
    ("asana.toml", include_str!("../../providers/asana.toml")),
    ("aws-sns.toml", include_str!("../../providers/aws-sns.toml")),
    (
        "bitbucket.toml",
        include_str!("../../providers/bitbucket.toml"),
    ),
    ("box.toml", include_str!("../../providers/box.toml")),
    (
        "buildkite-token.toml",
        include_str!("../../providers/buildkite-token.toml"),
    ),
    (
        "buildkite.toml",
        include_str!("../../providers/buildkite.toml"),
    ),
    (
        "calendly.toml",
        include_str!("../../providers/calendly.toml"),
    ),
    (
        "circleci.toml",
        include_str!("../../providers/circleci.toml"),
    ),
    ("clerk.toml", include_str!("../../providers/clerk.toml")),
    (
        "coinbase-commerce.toml",
        include_str!("../../providers/coinbase-commerce.toml"),
    ),
    (
        "contentful.toml",
        include_str!("../../providers/contentful.toml"),
    ),
    ("discord.toml", include_str!("../../providers/discord.toml")),
    (
        "docusign.toml",
        include_str!("../../providers/docusign.toml"),
    ),
    ("dropbox.toml", include_str!("../../providers/dropbox.toml")),
    ("github.toml", include_str!("../../providers/github.toml")),
    ("gitlab.toml", include_str!("../../providers/gitlab.toml")),
    ("hmac.toml", include_str!("../../providers/hmac.toml")),
    ("hubspot.toml", include_str!("../../providers/hubspot.toml")),
    (
        "intercom.toml",
        include_str!("../../providers/intercom.toml"),
    ),
    ("jira.toml", include_str!("../../providers/jira.toml")),
    (
        "lemonsqueezy.toml",
        include_str!("../../providers/lemonsqueezy.toml"),
    ),
    ("linear.toml", include_str!("../../providers/linear.toml")),
    ("mailgun.toml", include_str!("../../providers/mailgun.toml")),
    ("meta.toml", include_str!("../../providers/meta.toml")),
    (
        "microsoft-graph.toml",
        include_str!("../../providers/microsoft-graph.toml"),
    ),
    ("mux.toml", include_str!("../../providers/mux.toml")),
    ("okta.toml", include_str!("../../providers/okta.toml")),
    ("netlify.toml", include_str!("../../providers/netlify.toml")),
    ("notion.toml", include_str!("../../providers/notion.toml")),
    ("paddle.toml", include_str!("../../providers/paddle.toml")),
    ("paypal.toml", include_str!("../../providers/paypal.toml")),
    (
        "paystack.toml",
        include_str!("../../providers/paystack.toml"),
    ),
    ("plaid.toml", include_str!("../../providers/plaid.toml")),
    (
        "postmark.toml",
        include_str!("../../providers/postmark.toml"),
    ),
    (
        "razorpay.toml",
        include_str!("../../providers/razorpay.toml"),
    ),
    ("resend.toml", include_str!("../../providers/resend.toml")),
    (
        "sendgrid.toml",
        include_str!("../../providers/sendgrid.toml"),
    ),
    ("sentry.toml", include_str!("../../providers/sentry.toml")),
    ("shopify.toml", include_str!("../../providers/shopify.toml")),
    ("slack.toml", include_str!("../../providers/slack.toml")),
    ("square.toml", include_str!("../../providers/square.toml")),
    (
        "standard-webhooks.toml",
        include_str!("../../providers/standard-webhooks.toml"),
    ),
    ("stripe.toml", include_str!("../../providers/stripe.toml")),
    ("svix.toml", include_str!("../../providers/svix.toml")),
    ("trello.toml", include_str!("../../providers/trello.toml")),
    ("twilio.toml", include_str!("../../providers/twilio.toml")),
    ("twitch.toml", include_str!("../../providers/twitch.toml")),
    (
        "typeform.toml",
        include_str!("../../providers/typeform.toml"),
    ),
    ("vercel.toml", include_str!("../../providers/vercel.toml")),
    ("webflow.toml", include_str!("../../providers/webflow.toml")),
    ("workos.toml", include_str!("../../providers/workos.toml")),
    ("zendesk.toml", include_str!("../../providers/zendesk.toml")),
    ("zoom.toml", include_str!("../../providers/zoom.toml")),
];

/// Why the registry, or the spec of a source, cannot be built. As with
/// [`SpecError`], a cause is chained, not repeated in the message.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("providers_dir {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}")]
    File {
        path: String,
        #[source]
        source: SpecError,
    },
    #[error("{path}: the spec is named {name:?} but the file is {file:?}; they must match")]
    NameMismatch {
        path: String,
        name: String,
        file: String,
    },
    #[error("unknown provider {0:?}; run `hookgate providers` to list them")]
    Unknown(String),
    #[error("provider {provider:?} with provider_options")]
    Options {
        provider: String,
        #[source]
        source: SpecError,
    },
    #[error(transparent)]
    Key(#[from] verify::KeyError),
}

/// Provider specs by name, kept as TOML tables so that sources can override keys
/// before compiling.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    specs: BTreeMap<String, (toml::Table, Arc<Spec>)>,
}

impl Registry {
    /// The built-in providers.
    pub fn builtin() -> Result<Registry, RegistryError> {
        let mut registry = Registry::default();
        for (file, text) in BUILTIN {
            registry.add(file, text)?;
        }
        Ok(registry)
    }

    /// The built-in providers plus every `*.toml` in `dir` (a file replaces the
    /// built-in provider of the same name).
    pub fn with_dir(dir: Option<&Path>) -> Result<Registry, RegistryError> {
        let mut registry = Self::builtin()?;
        if let Some(dir) = dir {
            registry.load_dir(dir)?;
        }
        Ok(registry)
    }

    /// Add every `*.toml` in `dir`, in name order; a file replaces the provider of
    /// the same name.
    pub fn load_dir(&mut self, dir: &Path) -> Result<(), RegistryError> {
        let io_error = |source| RegistryError::Io {
            path: dir.display().to_string(),
            source,
        };
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .map_err(io_error)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(io_error)?;
            let file = path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            self.add(&file, &text).map_err(|e| match e {
                RegistryError::Spec(source) => RegistryError::File {
                    path: path.display().to_string(),
                    source,
                },
                RegistryError::NameMismatch { name, file, .. } => RegistryError::NameMismatch {
                    path: path.display().to_string(),
                    name,
                    file,
                },
                other => other,
            })?;
        }
        Ok(())
    }

    /// Compile the spec in `text` (from the file named `file`) and add it.
    fn add(&mut self, file: &str, text: &str) -> Result<(), RegistryError> {
        let table: toml::Table = toml::from_str(text).map_err(|source| {
            RegistryError::Spec(SpecError::Toml {
                provider: file.to_string(),
                source: Box::new(source),
            })
        })?;
        let spec = Spec::from_table(table.clone())?;
        let stem = file.trim_end_matches(".toml");
        if spec.name != stem {
            return Err(RegistryError::NameMismatch {
                path: file.to_string(),
                name: spec.name,
                file: file.to_string(),
            });
        }
        self.specs
            .insert(spec.name.clone(), (table, Arc::new(spec)));
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Spec>> {
        self.specs.get(name).map(|(_, s)| s)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Spec>> {
        self.specs.values().map(|(_, s)| s)
    }

    /// The spec a source uses: the provider's, with the source's overrides merged in.
    pub fn resolve(
        &self,
        provider: &str,
        options: Option<&toml::Table>,
    ) -> Result<Arc<Spec>, RegistryError> {
        let (table, spec) = self
            .specs
            .get(provider)
            .ok_or_else(|| RegistryError::Unknown(provider.to_string()))?;
        match options {
            None => Ok(spec.clone()),
            Some(options) => {
                let mut merged = table.clone();
                merge(&mut merged, options);
                // Vectors belong to the provider's own scheme, not to the overridden one.
                merged.remove("vectors");
                merged.insert("name".into(), toml::Value::String(provider.to_string()));
                Spec::from_table(merged)
                    .map(Arc::new)
                    .map_err(|source| RegistryError::Options {
                        provider: provider.to_string(),
                        source,
                    })
            }
        }
    }
}

/// Deep-merge `over` into `base` (tables merge, everything else replaces).
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

/// A source's verifier: its compiled spec and its decoded keys.
#[derive(Debug, Clone)]
pub struct Verifier {
    pub spec: Arc<Spec>,
    keys: Vec<Key>,
}

impl Verifier {
    pub fn new(spec: Arc<Spec>, secrets: &[Secret]) -> Result<Verifier, RegistryError> {
        let keys = verify::prepare_keys(&spec, secrets)?;
        Ok(Verifier { spec, keys })
    }

    pub fn verify<'a>(&'a self, req: Request<'a>, now: i64) -> Result<Verified<'a>, VerifyError> {
        verify::verify(&self.spec, &self.keys, req, now)
    }

    /// Verify a request under `keys` instead of the configured ones (a source whose
    /// secrets arrive in handshakes: its configured and established ones).
    pub fn verify_with<'a>(
        &'a self,
        keys: &'a [Key],
        req: Request<'a>,
        now: i64,
    ) -> Result<Verified<'a>, VerifyError> {
        verify::verify(&self.spec, keys, req, now)
    }

    pub fn verify_ignoring_timestamp<'a>(
        &'a self,
        req: Request<'a>,
    ) -> Result<Verified<'a>, VerifyError> {
        verify::verify_ignoring_timestamp(&self.spec, &self.keys, req)
    }

    /// An event fetched from the provider's API with the source's credential (see
    /// [`verify::fetched`]): read, not verified.
    pub fn fetched<'a>(&'a self, req: Request<'a>) -> Verified<'a> {
        verify::fetched(&self.spec, req)
    }

    /// Verify a request of a certificate scheme under `fetched`, the key of the
    /// certificate it names (at `now`, or without a timestamp window).
    pub fn verify_certified<'a>(
        &'a self,
        req: Request<'a>,
        now: Option<i64>,
        fetched: &'a Key,
    ) -> Result<Verified<'a>, VerifyError> {
        verify::verify_certified(&self.spec, &self.keys, req, now, fetched)
    }

    /// Whether a request whose key must be fetched could verify at all, judged by
    /// its unsigned claims (see [`verify::precheck`]): checked before any fetch.
    pub fn precheck(&self, req: Request<'_>, now: i64) -> Result<(), VerifyError> {
        verify::precheck(&self.spec, &self.keys, req, now)
    }

    /// Whether the key of a request is fetched (a certificate scheme, a `[jwk]`
    /// scheme).
    pub fn fetches_keys(&self) -> bool {
        self.spec.certificate.is_some() || self.spec.jwk.is_some()
    }

    /// What a request of a fetched-key scheme asks for (see [`KeyRequest`]),
    /// checked against the spec's `[certificate]` or `[jwk]`; `None` for the
    /// other schemes. An `Err` names a key the spec does not allow.
    pub fn key_request(
        &self,
        req: Request<'_>,
    ) -> Option<Result<KeyRequest<'_>, certificate::FetchedKeyError>> {
        if let Some(asked) = self.jwk_request(req) {
            let credentials = self.credentials().unwrap_or_default();
            return Some(asked.map(|asked| KeyRequest::Jwk { asked, credentials }));
        }
        self.certificate_url(req)
            .map(|named| named.map(KeyRequest::Certificate))
    }

    /// The certificate URL a request of a certificate scheme names, checked against
    /// the spec's `[certificate]`; `None` for other schemes.
    pub(crate) fn certificate_url(
        &self,
        req: Request<'_>,
    ) -> Option<Result<certificate::CertificateUrl, certificate::FetchedKeyError>> {
        let rule = self.spec.certificate.as_ref()?;
        let ctx = verify::Context::new(req, verify::ParsedSignature::default());
        Some(match ctx.value(&rule.url) {
            Some(named) => certificate::check_url(rule, &named),
            None => Err(certificate::FetchedKeyError::Refused),
        })
    }

    /// What a request of a `[jwk]` scheme asks the provider's API for: the key its
    /// JWS names, at the URL the spec builds, checked against its hosts; `None` for
    /// other schemes.
    pub(crate) fn jwk_request(
        &self,
        req: Request<'_>,
    ) -> Option<Result<jwk::JwkRequest, certificate::FetchedKeyError>> {
        let rule = self.spec.jwk.as_ref()?;
        let ctx = verify::Context::new(req, verify::ParsedSignature::default());
        let key_id = match verify::parse_signature(&self.spec, &ctx) {
            Ok(parsed) => parsed.key_id,
            Err(_) => None,
        };
        Some(match (key_id, ctx.template(&rule.url)) {
            (Some(key_id), Some(url)) => jwk::check(rule, &url, &key_id),
            _ => Err(certificate::FetchedKeyError::Refused),
        })
    }

    /// The credentials a `[jwk]` scheme asks the provider's API with: the source's
    /// first secret.
    fn credentials(&self) -> Option<&str> {
        self.keys.iter().find_map(|k| match k {
            Key::Bound(value) => Some(&**value),
            _ => None,
        })
    }
}

/// The key a request of a fetched-key scheme needs, as one request to the fetched
/// keys ([`certificate::FetchedKeys::key_for`]), whichever the scheme.
#[derive(Debug)]
pub enum KeyRequest<'a> {
    /// The key of the certificate at a URL the request names (AWS SNS, PayPal).
    Certificate(certificate::CertificateUrl),
    /// The key a provider's API gives for the JWS's key id (Plaid), asked with the
    /// source's credentials.
    Jwk {
        asked: jwk::JwkRequest,
        credentials: &'a str,
    },
}

#[cfg(test)]
mod tests;
