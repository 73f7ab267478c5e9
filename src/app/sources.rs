//! Sources compiled from the configuration: each source's verifier, secrets,
//! allowlist, request limit, routes' filters and ordering keys, as ingest uses
//! them, and the facts of them the operations and the forwarder need. A reload
//! compiles them again; what holds state that a reload must not lose (a source's
//! share of the body budget, its request limit's budgets, a provider's published
//! ranges) is taken over from the table in force when its settings are unchanged.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context as _;

use crate::config::Config;
use crate::forward;
use crate::header_policy::HeaderPolicy;
use crate::ingest::{self, Source};
use crate::provider::{self, Registry, Verifier};

/// What a compile takes over from the table in force.
#[derive(Clone, Copy)]
pub(super) struct Kept<'a> {
    pub config: &'a Config,
    pub sources: &'a ingest::Sources,
    pub allowlists: &'a [Arc<crate::allowlist::Published>],
}

/// The provider registry for a configuration: built-ins plus `providers_dir`.
pub fn registry(cfg: &Config) -> anyhow::Result<Registry> {
    Registry::with_dir(cfg.providers_dir.as_deref()).context("providers_dir")
}

/// Compile every configured source against its provider spec. Each gets its share
/// of `budget` (the ingest body budget).
pub fn build_sources(
    cfg: &Config,
    registry: &Registry,
    budget: &ingest::body::BodyBudget,
) -> anyhow::Result<Vec<Source>> {
    compile_sources(cfg, registry, budget, None)
}

/// [`build_sources`], taking over from `kept` (the table in force) what must
/// outlive a reload.
pub(super) fn compile_sources(
    cfg: &Config,
    registry: &Registry,
    budget: &ingest::body::BodyBudget,
    kept: Option<Kept<'_>>,
) -> anyhow::Result<Vec<Source>> {
    // One list per URL, whichever sources take it; a list in force stays, with the
    // ranges it holds.
    let mut published: HashMap<String, Arc<crate::allowlist::Published>> = kept
        .map(|k| {
            k.allowlists
                .iter()
                .map(|l| (l.source.url.clone(), l.clone()))
                .collect()
        })
        .unwrap_or_default();
    cfg.sources
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let spec = registry
                .resolve(&s.provider, s.provider_options.as_ref())
                .with_context(|| format!("sources[{i}].provider"))?;
            let hook_secret = spec.handshake == Some(provider::spec::Handshake::HookSecret);
            check_secrets(i, s, &spec)?;
            let verifier =
                Verifier::new(spec, &s.secrets).with_context(|| format!("sources[{i}].secret"))?;
            let established = hook_secret.then(|| {
                Arc::new(ingest::hook_secret::Established::new(
                    &s.name,
                    verifier.spec.clone(),
                    s.secrets.clone(),
                ))
            });
            let headers = HeaderPolicy::new(&s.pass_headers(), &verifier.spec.credential_headers);
            let routes = route_filters(i, s, &verifier.spec)?;
            let allowlist = allowlist(i, s, &verifier.spec, &mut published)?;
            check_handshake(i, s, &verifier.spec)?;
            let before = kept.and_then(|k| {
                let old = k.config.sources.iter().find(|o| o.name == s.name)?;
                Some((old, k.sources.get(&s.name)?))
            });
            Ok(Source {
                name: s.name.clone(),
                verifier,
                dedupe_ttl: s.dedupe_ttl,
                public_url: s.public_url.clone(),
                headers,
                routes,
                // Clients are told apart when a connection's address is its client's,
                // or when trusted proxies name the client.
                // The bodies in flight keep counting against the source's share.
                body_share: match before {
                    Some((_, source)) => source.body_share.clone(),
                    None => budget.share(
                        &s.name,
                        cfg.server.max_body_bytes,
                        cfg.server.max_connections_per_client.is_some()
                            || !cfg.server.trusted_proxies.is_empty(),
                    ),
                },
                metrics: ingest::SourceMetrics::new(&s.name),
                keep_rejected_bodies: s.keep_rejected_bodies,
                index: s.index.clone(),
                request_limit: match before {
                    // Unchanged limits keep their budgets.
                    Some((old, source))
                        if old.request_limit == s.request_limit
                            && old.unverified_per_client == s.unverified_per_client =>
                    {
                        source.request_limit.clone()
                    }
                    _ => (s.request_limit.is_some() || s.unverified_per_client.is_some()).then(
                        || {
                            Arc::new(ingest::limit::RequestLimit::new(
                                s.request_limit,
                                s.unverified_per_client,
                            ))
                        },
                    ),
                },
                allowlist,
                verify_token: s.verify_token.clone(),
                confirm_subscriptions: s.confirm_subscriptions,
                established,
            })
        })
        .collect()
}

/// What the route filters of source `s` (`sources[i]`) take: each route's filter
/// and ordering key.
fn route_filters(
    i: usize,
    s: &crate::config::SourceConfig,
    spec: &provider::spec::Spec,
) -> anyhow::Result<Vec<ingest::RouteFilter>> {
    s.routes
        .iter()
        .enumerate()
        .map(|(r, route)| {
            let order = route
                .order
                .as_ref()
                .map(|o| ingest::RouteOrdering::new(o, spec, &s.provider))
                .transpose()
                .with_context(|| format!("sources[{i}].routes[{r}].order.by"))?;
            Ok(ingest::RouteFilter {
                name: route.name.clone(),
                filter: route.filter.clone(),
                order,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()
}

/// The address allowlist of source `s` (`sources[i]`): its own list, or its
/// provider's published one, shared by every source that takes it (`published`).
fn allowlist(
    i: usize,
    s: &crate::config::SourceConfig,
    spec: &provider::spec::Spec,
    published: &mut HashMap<String, Arc<crate::allowlist::Published>>,
) -> anyhow::Result<Option<crate::allowlist::Allowlist>> {
    Ok(match &s.allow_ips {
        None => None,
        Some(crate::config::AllowIps::List(list)) => {
            Some(crate::allowlist::Allowlist::Fixed(list.clone().into()))
        }
        Some(crate::config::AllowIps::Provider) => {
            let Some(ranges) = spec.ranges.clone() else {
                anyhow::bail!(
                    "sources[{i}].allow_ips: provider {:?} publishes no address ranges (its spec has no [ranges]); list the ranges instead",
                    s.provider
                );
            };
            let list = published
                .entry(ranges.url.clone())
                .or_insert_with(|| Arc::new(crate::allowlist::Published::new(&s.provider, ranges)))
                .clone();
            Some(crate::allowlist::Allowlist::Published(list))
        }
    })
}

/// What source `s` (`sources[i]`) must configure for its provider to verify: the
/// URL it signs, a secret unless a handshake brings it.
fn check_secrets(
    i: usize,
    s: &crate::config::SourceConfig,
    spec: &provider::spec::Spec,
) -> anyhow::Result<()> {
    if spec.signs_url() && s.public_url.is_none() {
        anyhow::bail!(
            "sources[{i}].public_url: provider {:?} signs the URL it calls; set public_url to that URL (e.g. https://hooks.example.com/ingest/{})",
            s.provider,
            s.name
        );
    }
    // A provider whose secret arrives in a handshake (Asana) needs none here.
    let hook_secret = spec.handshake == Some(provider::spec::Handshake::HookSecret);
    if s.secrets.is_empty() && !hook_secret {
        anyhow::bail!(
            "sources[{i}].secret: source {:?} has no secret; set secret, secrets, secret_env or secret_file",
            s.name
        );
    }
    Ok(())
}

/// What source `s` (`sources[i]`) must configure for its provider's handshake: the
/// verify token it checks the endpoint with, and subscriptions only where the
/// gateway can confirm them.
fn check_handshake(
    i: usize,
    s: &crate::config::SourceConfig,
    spec: &provider::spec::Spec,
) -> anyhow::Result<()> {
    if spec.handshake == Some(provider::spec::Handshake::MetaSubscribe) && s.verify_token.is_none()
    {
        anyhow::bail!(
            "sources[{i}].verify_token: provider {:?} checks the endpoint with the verify token set in its dashboard; set verify_token_env to it",
            s.provider
        );
    }
    if s.confirm_subscriptions
        && (spec.handshake != Some(provider::spec::Handshake::SnsSubscription)
            || spec.certificate.is_none())
    {
        anyhow::bail!(
            "sources[{i}].confirm_subscriptions: provider {:?} has no subscriptions the gateway can confirm (only aws-sns)",
            s.provider
        );
    }
    Ok(())
}

/// The providers' published lists the sources take (`allow_ips = "provider"`), each
/// once.
pub(super) fn published_lists(sources: &[Source]) -> Vec<Arc<crate::allowlist::Published>> {
    let mut lists: Vec<Arc<crate::allowlist::Published>> = Vec::new();
    for s in sources {
        if let Some(crate::allowlist::Allowlist::Published(list)) = &s.allowlist
            && !lists.iter().any(|l| Arc::ptr_eq(l, list))
        {
            if list.source.url != list.source.published {
                tracing::warn!(
                    provider = %list.provider,
                    fetched_from = %list.source.url,
                    "the provider's ranges are fetched from the spec's fetch_base, not from the provider: this is for tests"
                );
            }
            lists.push(list.clone());
        }
    }
    lists
}

/// Every route filter and ordering key of `cfg` that reads a value its source's
/// provider does not sign (see [`provider::signed`]).
pub fn unsigned_values(
    cfg: &Config,
    registry: &Registry,
) -> anyhow::Result<Vec<provider::signed::UnsignedValue>> {
    let mut out = Vec::new();
    for (i, s) in cfg.sources.iter().enumerate() {
        let spec = registry
            .resolve(&s.provider, s.provider_options.as_ref())
            .with_context(|| format!("sources[{i}].provider"))?;
        out.extend(provider::signed::unsigned_values(s, &spec));
    }
    Ok(out)
}

/// What the admin API tells about each source.
pub(super) fn admin_sources(sources: &[Source]) -> Vec<crate::operations::SourceFacts> {
    sources
        .iter()
        .map(|s| crate::operations::SourceFacts {
            name: s.name.clone(),
            signature_header: s
                .verifier
                .spec
                .signature_header()
                .map(|h| h.as_str().to_string())
                .unwrap_or_default(),
            routes: s.routes.iter().map(|r| r.name.clone()).collect(),
            index: s.index.clone(),
            established: s.established.clone(),
            public_url: s.public_url.clone(),
        })
        .collect()
}

/// What the forwarder needs to know of each source's provider, by source name.
pub(super) fn provider_facts(sources: &[Source]) -> HashMap<String, forward::ProviderFacts> {
    sources
        .iter()
        .map(|s| {
            let facts = forward::ProviderFacts {
                credential_headers: s.verifier.spec.credential_headers.clone(),
                body_signed: s.verifier.spec.signs_whole_body(),
                event_type_signed: s.verifier.spec.event_type_is_signed(),
            };
            (s.name.clone(), facts)
        })
        .collect()
}

/// What the rejection log redacts: every provider's signature header and the secret of
/// a secret handshake (`X-Hook-Secret`), and keeping no provider's credential of a
/// request to a name that is not a source.
pub(super) fn redaction(registry: &Registry) -> ingest::rejections::Redaction {
    let mut signatures: Vec<String> = Vec::new();
    let mut credentials = Vec::new();
    for spec in registry.iter() {
        let handshake_secret = (spec.handshake == Some(provider::spec::Handshake::HookSecret))
            .then_some(ingest::hook_secret::HEADER);
        for h in spec
            .signature_headers()
            .map(|h| h.as_str())
            .chain(handshake_secret)
        {
            if !signatures.iter().any(|s| s == h) {
                signatures.push(h.to_string());
            }
        }
        credentials.extend(spec.credential_headers.iter().cloned());
    }
    ingest::rejections::Redaction::new(signatures, HeaderPolicy::new(&[], &credentials))
}
