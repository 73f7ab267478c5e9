//! Routing and ordering on values nobody signed. A route filter or an ordering key
//! that reads a value the provider's signature does not cover lets anyone holding
//! one captured request choose where it goes: GitHub signs the body, not its
//! `X-GitHub-Event` header, so a captured `issues` delivery replayed as `push`
//! would reach a push-only deploy route; an ordering key from
//! `header:X-Shopify-Product-Id` would put a replay in another product's line (and,
//! under `on_dead = "block"`, could block it).
//!
//! Which values a signature covers is the spec's to say ([`Spec::is_signed`], from
//! what its signed content includes). [`unsigned_values`] lists, for one source,
//! every filter part and ordering key that reads an unsigned value; `hookgate
//! check-config`, `hookgate providers --config`, the log at start and the console's
//! Sources page show them. They are warnings, not refusals: an operator may accept
//! the risk (GitHub names its event only in that header).

use std::fmt;

use super::spec::{Spec, ValueSource, ValueTemplate, parse_value_template};
use crate::config::{OrderBy, SourceConfig};

/// One route setting that reads a value the signature does not cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsignedValue {
    pub source: String,
    pub route: String,
    /// The setting and the value it reads, e.g. "filter event_types reads the event
    /// type (header:X-GitHub-Event)".
    pub what: String,
    /// What to read instead, when the signed body carries the same fact.
    pub instead: Option<String>,
}

impl UnsignedValue {
    /// The warning without the source and route (the console shows it under them).
    pub fn warning(&self) -> String {
        let mut s = format!(
            "{}, which the provider's signature does not cover (unsigned): a replay of a captured request can change it",
            self.what
        );
        if let Some(i) = &self.instead {
            s.push_str("; ");
            s.push_str(i);
        }
        s
    }
}

impl fmt::Display for UnsignedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "source {} route {}: {}",
            self.source,
            self.route,
            self.warning()
        )
    }
}

/// Every filter part and ordering key of `source`'s routes that reads a value
/// `spec` (the source's provider, with its options) does not sign.
pub fn unsigned_values(source: &SourceConfig, spec: &Spec) -> Vec<UnsignedValue> {
    let body_hint = spec.signs_whole_body().then(|| {
        "the signed body carries it: read it from the body with json:/pointer".to_string()
    });
    let mut out = Vec::new();
    for route in &source.routes {
        let mut warn = |what: String, instead: Option<String>| {
            out.push(UnsignedValue {
                source: source.name.clone(),
                route: route.name.clone(),
                what,
                instead,
            })
        };
        if route
            .target
            .template()
            .is_some_and(|t| t.reads_event_type())
            && !spec.event_type_is_signed()
        {
            warn(
                format!(
                    "the destination's subject or routing key reads the event type ({})",
                    texts(&spec.event_type)
                ),
                None,
            );
        }
        let (event_type, pointers, headers) = route.filter.reads();
        if event_type && !spec.event_type_is_signed() {
            warn(
                format!(
                    "filter event_types reads the event type ({})",
                    texts(&spec.event_type)
                ),
                body_hint
                    .as_ref()
                    .map(|_| "match a value of the signed body instead (filter.match with a JSON pointer)".to_string()),
            );
        }
        for p in pointers {
            if !spec.is_signed(&ValueSource::Json(p.to_string())) {
                warn(format!("filter match reads json:{p}"), None);
            }
        }
        for h in headers {
            let signed = http::HeaderName::from_bytes(h.as_bytes())
                .is_ok_and(|n| spec.is_signed(&ValueSource::Header(n)));
            if !signed {
                warn(
                    format!("filter headers reads header:{h}"),
                    body_hint.clone(),
                );
            }
        }
        let Some(order) = &route.order else { continue };
        match &order.by {
            OrderBy::Provider if !spec.event_object_is_signed() => warn(
                format!(
                    "order.by = \"provider\" reads the object id ({})",
                    texts(&spec.event_object)
                ),
                None,
            ),
            OrderBy::Provider => {}
            OrderBy::Value(text) => {
                let signed = parse_value_template(text)
                    .is_ok_and(|t| spec.all_signed(std::slice::from_ref(&t)));
                if !signed {
                    let instead = text
                        .starts_with("header:")
                        .then(|| body_hint.clone())
                        .flatten();
                    warn(format!("order.by reads {text}"), instead);
                }
            }
        }
    }
    out
}

fn texts(ts: &[ValueTemplate]) -> String {
    ts.iter()
        .map(|t| t.text.as_str())
        .collect::<Vec<_>>()
        .join(", else ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::from_toml_str;
    use crate::provider::Registry;

    fn warnings(sources: &str) -> Vec<String> {
        let cfg = from_toml_str(sources, &|_| None).expect("config");
        let reg = Registry::builtin().expect("registry");
        cfg.sources
            .iter()
            .flat_map(|s| {
                let spec = reg
                    .resolve(&s.provider, s.provider_options.as_ref())
                    .expect("spec");
                unsigned_values(s, &spec)
            })
            .map(|w| w.to_string())
            .collect()
    }

    #[test]
    fn unsigned_event_types_headers_and_keys_are_named_with_source_and_route() {
        let w = warnings(
            r#"
[[sources]]
name = "gh"
provider = "github"
secret = "s"
[[sources.routes]]
name = "deploy"
destination = "http://deploy:1/"
filter = { event_types = ["push"] }
[[sources.routes]]
name = "by-repo"
destination = "http://repo:1/"
order = { by = "provider" }

[[sources]]
name = "shop"
provider = "shopify"
secret = "s"
[[sources.routes]]
name = "products"
destination = "http://p:1/"
order = { by = "header:X-Shopify-Product-Id" }
[[sources.routes]]
name = "by-id"
destination = "http://p:1/"
order = { by = "json:/id" }

[[sources]]
name = "st"
provider = "stripe"
secret = "s"
[[sources.routes]]
name = "billing"
destination = "http://b:1/"
filter = { event_types = ["invoice.*"], match = [{ pointer = "/livemode", equals = true }] }
order = { by = "provider" }
"#,
        );
        assert_eq!(w.len(), 2, "{w:#?}");
        assert!(
            w[0].starts_with("source gh route deploy: filter event_types reads the event type (header:X-GitHub-Event)")
                && w[0].contains("unsigned"),
            "{w:#?}"
        );
        assert!(
            w[1].starts_with(
                "source shop route products: order.by reads header:X-Shopify-Product-Id"
            ) && w[1].contains("json:/pointer"),
            "{w:#?}"
        );
    }

    #[test]
    fn a_header_the_signature_names_is_signed_and_a_token_signs_nothing() {
        let w = warnings(
            r#"
[[sources]]
name = "sw"
provider = "standard-webhooks"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
destination = "http://a:1/"
order = { by = "header:webhook-id" }

[[sources]]
name = "gl"
provider = "gitlab"
secret = "t"
[[sources.routes]]
name = "default"
destination = "http://a:1/"
filter = { match = [{ pointer = "/object_kind", equals = "push" }] }
"#,
        );
        assert_eq!(w.len(), 1, "{w:#?}");
        assert!(
            w[0].starts_with("source gl route default: filter match reads json:/object_kind"),
            "{w:#?}"
        );
    }
}
