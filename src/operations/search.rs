//! Payload search as the admin API, the console and the CLI ask it: predicates on
//! the body (by JSON pointer) and on the stored headers, written one per query
//! parameter, checked here, and run by `store::search` with the source's index when
//! one of them is an `equals` or `in` on an indexed pointer.
//!
//! The parameters (each may repeat; every predicate must hold):
//!
//! * `match=<target>:<value>`: the value there equals `<value>`, read as JSON when
//!   it is a JSON number, `true`, `false`, `null` or a quoted string, else as text
//!   (`match=/data/object/customer:cus_123`, `match=/amount:1200`,
//!   `match=/code:"1200"`);
//! * `in=<target>:<v1>,<v2>,…` (or a JSON array: `in=/type:["a","b"]`);
//! * `prefix=<target>:<text>`;
//! * `exists=<target>` and `missing=<target>`.
//!
//! A target is a JSON pointer into the body (`/data/object/id`; the pointer ends at
//! the first `:`) or a stored header, `header.<name>`. Signature and credential
//! headers cannot be searched: they are redacted wherever the gateway shows them.

use super::dto::{EntryList, SearchInfo};
use super::entries::{is_sensitive, rfc3339, summary};
use super::{OpError, Operations};
use crate::routing::filter::{Filter, Test};
use crate::store::ListQuery;
use crate::store::search::{IndexUse, SCAN_MAX, SearchPage, SearchQuery, index_value, search};

/// The most predicates of one kind a search takes (the OpenAPI document's
/// `maxItems` of each parameter).
pub const PER_KIND_MAX: usize = 8;

/// The most predicates one search takes: [`PER_KIND_MAX`] of each kind.
pub const PREDICATES_MAX: usize = PER_KIND_MAX * PredicateKind::ALL.len();

/// A kind of predicate, named as its query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PredicateKind {
    /// `match=<target>:<value>`
    Match,
    /// `in=<target>:<v1>,<v2>,…`
    In,
    /// `prefix=<target>:<text>`
    Prefix,
    /// `exists=<target>`
    Exists,
    /// `missing=<target>`
    Missing,
}

impl PredicateKind {
    /// Every kind, in the order the API documents them.
    pub const ALL: [PredicateKind; 5] = [
        PredicateKind::Match,
        PredicateKind::In,
        PredicateKind::Prefix,
        PredicateKind::Exists,
        PredicateKind::Missing,
    ];

    /// The kind a query parameter names, if it names one.
    pub fn from_param(name: &str) -> Option<PredicateKind> {
        PredicateKind::ALL.into_iter().find(|k| k.param() == name)
    }

    /// The query parameter (and console keyword) of this kind.
    pub fn param(self) -> &'static str {
        match self {
            PredicateKind::Match => "match",
            PredicateKind::In => "in",
            PredicateKind::Prefix => "prefix",
            PredicateKind::Exists => "exists",
            PredicateKind::Missing => "missing",
        }
    }
}

/// Where a predicate looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A JSON pointer into the body.
    Body(String),
    /// A stored header, by lower-case name.
    Header(String),
}

/// One predicate of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct Predicate {
    pub target: Target,
    pub test: Test,
}

/// A predicate of `kind` from its query parameter's value.
pub fn parse_predicate(kind: PredicateKind, arg: &str) -> Result<Predicate, OpError> {
    let bad = |what: &str| OpError::Invalid(format!("{}={arg:?}: {what}", kind.param()));
    let (target, rest) = match kind {
        PredicateKind::Exists | PredicateKind::Missing => (arg, ""),
        _ => match arg.split_once(':') {
            Some((t, v)) => (t, v),
            None => return Err(bad("write it as <target>:<value>")),
        },
    };
    let target = parse_target(target).map_err(|e| bad(&e))?;
    let test = match kind {
        PredicateKind::Exists => Test::Exists(true),
        PredicateKind::Missing => Test::Exists(false),
        PredicateKind::Match => Test::Equals(parse_value(rest)),
        PredicateKind::Prefix => Test::Prefix(rest.to_string()),
        PredicateKind::In => {
            let v = rest;
            let values = match serde_json::from_str::<serde_json::Value>(v) {
                Ok(serde_json::Value::Array(values)) => values,
                _ => v.split(',').map(parse_value).collect(),
            };
            if values.is_empty() {
                return Err(bad("`in` needs at least one value"));
            }
            Test::OneOf(values)
        }
    };
    if let (Target::Header(_), Test::Equals(v)) = (&target, &test)
        && !v.is_string()
    {
        // Header values are text: `match=header.x-count:3` means the text "3".
        return Ok(Predicate {
            test: Test::Equals(serde_json::Value::String(v.to_string())),
            target,
        });
    }
    if let (Target::Header(_), Test::OneOf(vs)) = (&target, &test) {
        let texts = vs
            .iter()
            .map(|v| match v {
                serde_json::Value::String(_) => v.clone(),
                other => serde_json::Value::String(other.to_string()),
            })
            .collect();
        return Ok(Predicate {
            test: Test::OneOf(texts),
            target,
        });
    }
    Ok(Predicate { target, test })
}

/// The predicates of a query's `(name, value)` pairs (the other parameters are not
/// predicates), at most [`PER_KIND_MAX`] of each kind.
pub fn parse_predicates<'a>(
    pairs: impl IntoIterator<Item = (PredicateKind, &'a str)>,
) -> Result<Vec<Predicate>, OpError> {
    let mut seen = [0usize; PredicateKind::ALL.len()];
    let mut out = Vec::new();
    for (kind, arg) in pairs {
        let n = &mut seen[kind as usize];
        *n += 1;
        if *n > PER_KIND_MAX {
            return Err(OpError::Invalid(format!(
                "at most {PER_KIND_MAX} `{}` predicates per search",
                kind.param()
            )));
        }
        out.push(parse_predicate(kind, arg)?);
    }
    Ok(out)
}

/// A target: a JSON pointer (`/…`, or empty for the whole body) or `header.<name>`.
fn parse_target(t: &str) -> Result<Target, String> {
    if let Some(name) = t.strip_prefix("header.") {
        let valid = !name.is_empty()
            && name.len() <= 128
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b));
        return match valid {
            true => Ok(Target::Header(name.to_ascii_lowercase())),
            false => Err(format!("{name:?} is not a header name")),
        };
    }
    match t.is_empty() || t.starts_with('/') {
        true => Ok(Target::Body(t.to_string())),
        false => Err(format!(
            "{t:?} is neither a JSON pointer (starting with `/`) nor header.<name>"
        )),
    }
}

/// A value as a search writes it: JSON when it is a JSON scalar (a number, `true`,
/// `false`, `null` or a quoted string), else the text itself.
fn parse_value(v: &str) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(v) {
        Ok(
            value @ (serde_json::Value::Number(_)
            | serde_json::Value::Bool(_)
            | serde_json::Value::Null
            | serde_json::Value::String(_)),
        ) => value,
        _ => serde_json::Value::String(v.to_string()),
    }
}

/// The entries `list` selects whose bodies and headers pass `predicates`, a page of
/// them (see `store::search`), as the admin API answers it.
pub async fn search_entries(
    ops: &Operations,
    list: ListQuery,
    predicates: Vec<Predicate>,
) -> Result<EntryList, OpError> {
    let searched = !predicates.is_empty();
    let page = search_page(ops, list, predicates).await?;
    Ok(EntryList {
        entries: page.entries.iter().map(summary).collect(),
        next_cursor: page.next_cursor.clone(),
        search: searched.then(|| search_info(&page)),
    })
}

/// How `page` went, for people and the API.
pub fn search_info(page: &SearchPage) -> SearchInfo {
    SearchInfo {
        index: page.index.clone(),
        scanned: page.scanned,
        complete: page.complete,
        stopped_at: page.stopped_at.map(rfc3339),
    }
}

/// The page of a search (see [`search_entries`]); the console shows it as it is.
pub async fn search_page(
    ops: &Operations,
    list: ListQuery,
    predicates: Vec<Predicate>,
) -> Result<SearchPage, OpError> {
    if predicates.len() > PREDICATES_MAX {
        return Err(OpError::Invalid(format!(
            "at most {PREDICATES_MAX} predicates per search"
        )));
    }
    let source = list.source.as_deref().and_then(|s| ops.source(s));
    let (mut body, mut headers) = (Vec::new(), Vec::new());
    for p in predicates {
        match p.target {
            Target::Body(pointer) => body.push((pointer, p.test)),
            Target::Header(name) => {
                let sensitive = ops
                    .sources()
                    .iter()
                    .any(|s| is_sensitive(&name, &s.signature_header));
                if sensitive || is_sensitive(&name, "") {
                    return Err(OpError::Invalid(format!(
                        "header {name:?} holds a signature or a credential and cannot be searched"
                    )));
                }
                headers.push((name, p.test));
            }
        }
    }
    let filter = Filter::of_predicates(body, headers);
    let index = source.and_then(|s| index_for(&s.index, &filter));
    Ok(search(
        ops.store.as_ref(),
        &SearchQuery {
            list,
            filter,
            index,
            scan_max: SCAN_MAX,
        },
    )
    .await?)
}

/// The index that answers `filter`, if one does: the first `equals` or `in` on an
/// indexed pointer whose every value has an index text.
fn index_for(indexes: &[(String, String)], filter: &Filter) -> Option<IndexUse> {
    filter.body_predicates().iter().find_map(|(pointer, test)| {
        let (name, _) = indexes.iter().find(|(_, p)| p == pointer)?;
        let values = match test {
            Test::Equals(v) => vec![index_value(v)?],
            Test::OneOf(vs) => vs.iter().map(index_value).collect::<Option<Vec<_>>>()?,
            _ => return None,
        };
        Some(IndexUse {
            name: name.clone(),
            values,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn predicates_parse_as_documented() {
        let p = parse_predicate(PredicateKind::Match, "/data/object/customer:cus_123").unwrap();
        assert_eq!(p.target, Target::Body("/data/object/customer".into()));
        assert_eq!(p.test, Test::Equals(json!("cus_123")));
        let p = parse_predicate(PredicateKind::Match, "/amount:1200").unwrap();
        assert_eq!(p.test, Test::Equals(json!(1200)));
        let p = parse_predicate(PredicateKind::Match, "/code:\"1200\"").unwrap();
        assert_eq!(p.test, Test::Equals(json!("1200")));
        let p = parse_predicate(PredicateKind::In, "/type:a.b,c").unwrap();
        assert_eq!(p.test, Test::OneOf(vec![json!("a.b"), json!("c")]));
        let p = parse_predicate(PredicateKind::In, "/n:[1,\"x,y\"]").unwrap();
        assert_eq!(p.test, Test::OneOf(vec![json!(1), json!("x,y")]));
        let p = parse_predicate(PredicateKind::Prefix, "header.X-GitHub-Event:pull").unwrap();
        assert_eq!(p.target, Target::Header("x-github-event".into()));
        assert_eq!(p.test, Test::Prefix("pull".into()));
        let p = parse_predicate(PredicateKind::Match, "header.x-count:3").unwrap();
        assert_eq!(p.test, Test::Equals(json!("3")));
        assert_eq!(
            parse_predicate(PredicateKind::Missing, "/a/b")
                .unwrap()
                .test,
            Test::Exists(false)
        );
        assert!(parse_predicate(PredicateKind::Match, "/no-value").is_err());
        assert!(parse_predicate(PredicateKind::Match, "nopointer:1").is_err());
        assert!(parse_predicate(PredicateKind::Exists, "header.").is_err());
    }

    #[test]
    fn each_kind_takes_at_most_eight() {
        let eight = (0..PER_KIND_MAX).map(|_| (PredicateKind::Missing, "/a"));
        let all: Vec<_> = PredicateKind::ALL
            .into_iter()
            .flat_map(|k| (0..PER_KIND_MAX).map(move |_| (k, "/a:1")))
            .collect();
        assert_eq!(parse_predicates(eight).unwrap().len(), 8);
        assert_eq!(parse_predicates(all).unwrap().len(), PREDICATES_MAX);
        let nine = (0..=PER_KIND_MAX).map(|_| (PredicateKind::Missing, "/a"));
        assert!(parse_predicates(nine).is_err());
        for k in PredicateKind::ALL {
            assert_eq!(PredicateKind::from_param(k.param()), Some(k));
        }
        assert_eq!(PredicateKind::from_param("limit"), None);
    }

    #[test]
    fn an_equals_or_in_on_an_indexed_pointer_picks_its_index() {
        let indexes = vec![("customer".to_string(), "/c".to_string())];
        let f = Filter::of_predicates(
            vec![
                ("/x".into(), Test::Prefix("a".into())),
                ("/c".into(), Test::OneOf(vec![json!("a"), json!(2)])),
            ],
            vec![],
        );
        assert_eq!(
            index_for(&indexes, &f),
            Some(IndexUse {
                name: "customer".into(),
                values: vec!["\"a\"".into(), "2".into()]
            })
        );
        let prefix_only =
            Filter::of_predicates(vec![("/c".into(), Test::Prefix("a".into()))], vec![]);
        assert_eq!(index_for(&indexes, &prefix_only), None);
    }
}
