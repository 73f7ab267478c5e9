//! Route filters: which entries a route wants, declared, never scripted.
//!
//! A filter is a conjunction: every part of it must hold. Its parts are event-type
//! globs (`invoice.*`: the entry's event type matches at least one), JSON-pointer
//! predicates on the body (`equals`, `in`, `exists`, `prefix`) and header
//! predicates on the stored headers (the same four). A filter with no parts takes
//! every entry.
//!
//! Filters run once per entry, after verification, on what was verified: the raw
//! body is parsed only when a pointer predicate needs it, and a body that is not
//! JSON has no pointers (`exists = false` holds, every other pointer predicate
//! fails). An entry without an event type never matches an `event_types` list.

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Deserialize;

use crate::header::Header;

/// A filter as the configuration writes it (`[sources.routes.filter]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFilter {
    /// Globs over the event type: `*` matches any run of characters (dots included),
    /// `?` one character.
    #[serde(default)]
    pub event_types: Vec<String>,
    /// Predicates on the JSON body, by JSON pointer (RFC 6901).
    #[serde(default, rename = "match")]
    pub body: Vec<RawPredicate>,
    /// Predicates on the stored headers, by name (case-insensitive).
    #[serde(default)]
    pub headers: Vec<RawPredicate>,
}

/// One predicate: where to look (`pointer` for the body, `name` for a header) and
/// exactly one test.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPredicate {
    pub pointer: Option<String>,
    pub name: Option<String>,
    pub equals: Option<toml::Value>,
    #[serde(rename = "in")]
    pub one_of: Option<Vec<toml::Value>>,
    pub exists: Option<bool>,
    pub prefix: Option<String>,
}

/// Why a filter cannot be compiled; `key` names the offending setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct FilterError {
    pub key: String,
    pub problem: String,
}

/// A compiled filter.
#[derive(Clone, Default)]
pub struct Filter {
    event_types: Option<GlobSet>,
    /// The globs of `event_types` as written, for [`Filter::describe`].
    event_type_globs: Vec<String>,
    body: Vec<(String, Test)>,
    headers: Vec<(String, Test)>,
}

/// A filter shows as written (the compiled glob set holds hash maps, whose order
/// differs from process to process: the configuration's version is computed from
/// this rendering).
impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("event_types", &self.event_type_globs)
            .field("body", &self.body)
            .field("headers", &self.headers)
            .finish()
    }
}

/// Two filters are equal when they were written alike (the compiled globs follow
/// from the globs as written).
impl PartialEq for Filter {
    fn eq(&self, other: &Filter) -> bool {
        self.event_type_globs == other.event_type_globs
            && self.body == other.body
            && self.headers == other.headers
    }
}

/// What a predicate asks of the value it finds.
#[derive(Debug, Clone, PartialEq)]
pub enum Test {
    Equals(serde_json::Value),
    OneOf(Vec<serde_json::Value>),
    Exists(bool),
    Prefix(String),
}

/// What a filter looks at: an entry as ingest stores it.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub event_type: Option<&'a str>,
    pub body: &'a [u8],
    pub headers: &'a [Header],
}

impl Filter {
    /// The filter of these predicates, already checked: on the body, by JSON pointer;
    /// on the headers, by lower-case name (a search's, see `operations::search`).
    pub fn of_predicates(body: Vec<(String, Test)>, headers: Vec<(String, Test)>) -> Filter {
        Filter {
            event_types: None,
            event_type_globs: Vec::new(),
            body,
            headers,
        }
    }

    /// The body predicates: (pointer, test).
    pub fn body_predicates(&self) -> &[(String, Test)] {
        &self.body
    }

    /// Check and compile `raw`; `key` is where it sits in the configuration.
    pub fn compile(key: &str, raw: &RawFilter) -> Result<Filter, FilterError> {
        let err = |at: String, problem: String| FilterError { key: at, problem };
        let event_types = match raw.event_types.is_empty() {
            true => None,
            false => {
                let mut set = GlobSetBuilder::new();
                for (i, pattern) in raw.event_types.iter().enumerate() {
                    let glob = Glob::new(pattern).map_err(|e| {
                        err(format!("{key}.event_types[{i}]"), e.kind().to_string())
                    })?;
                    set.add(glob);
                }
                let set = set
                    .build()
                    .map_err(|e| err(format!("{key}.event_types"), e.to_string()))?;
                Some(set)
            }
        };
        let mut body = Vec::new();
        for (i, p) in raw.body.iter().enumerate() {
            let at = format!("{key}.match[{i}]");
            if p.name.is_some() {
                return Err(err(at, "body predicates take `pointer`, not `name`".into()));
            }
            let pointer = p
                .pointer
                .clone()
                .ok_or_else(|| err(at.clone(), "needs a `pointer`".into()))?;
            if !(pointer.is_empty() || pointer.starts_with('/')) {
                return Err(err(
                    at,
                    format!("pointer {pointer:?} must be empty or start with `/`"),
                ));
            }
            body.push((pointer, test(&at, p)?));
        }
        let mut headers = Vec::new();
        for (i, p) in raw.headers.iter().enumerate() {
            let at = format!("{key}.headers[{i}]");
            if p.pointer.is_some() {
                return Err(err(
                    at,
                    "header predicates take `name`, not `pointer`".into(),
                ));
            }
            let name = p
                .name
                .as_deref()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| err(at.clone(), "needs a header `name`".into()))?;
            let header_test = test(&at, p)?;
            if !header_comparable(&header_test) {
                return Err(err(
                    at,
                    "header values are text: `equals` and `in` take strings".into(),
                ));
            }
            headers.push((name.to_ascii_lowercase(), header_test));
        }
        Ok(Filter {
            event_types,
            event_type_globs: raw.event_types.clone(),
            body,
            headers,
        })
    }

    /// What the filter asks, one line per part, for people to read: the event-type
    /// globs, then each body and each header predicate. None for a filter that takes
    /// every entry.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.event_type_globs.is_empty() {
            out.push(format!("event type {}", self.event_type_globs.join(", ")));
        }
        for (pointer, test) in &self.body {
            out.push(format!("body {pointer} {}", test.describe()));
        }
        for (name, test) in &self.headers {
            out.push(format!("header {name} {}", test.describe()));
        }
        out
    }

    /// What the filter reads of an entry: whether it reads the event type, the body
    /// pointers and the header names it looks at (see [`super::signed`]).
    pub fn reads(&self) -> (bool, Vec<&str>, Vec<&str>) {
        (
            self.event_types.is_some(),
            self.body.iter().map(|(p, _)| p.as_str()).collect(),
            self.headers.iter().map(|(n, _)| n.as_str()).collect(),
        )
    }

    /// Whether the filter takes every entry.
    pub fn takes_everything(&self) -> bool {
        self.event_types.is_none() && self.body.is_empty() && self.headers.is_empty()
    }

    /// Whether every part of the filter holds for `subject`.
    pub fn matches(&self, subject: &Subject<'_>) -> bool {
        if let Some(set) = &self.event_types {
            match subject.event_type {
                Some(t) if set.is_match(t) => {}
                _ => return false,
            }
        }
        let header_ok = self.headers.iter().all(|(name, test)| {
            let values: Vec<&[u8]> = subject
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| h.value.as_slice())
                .collect();
            match test {
                Test::Exists(want) => values.is_empty() != *want,
                _ => values
                    .iter()
                    .filter_map(|v| std::str::from_utf8(v).ok())
                    .any(|v| test.holds(&serde_json::Value::String(v.to_string()))),
            }
        });
        if !header_ok {
            return false;
        }
        if self.body.is_empty() {
            return true;
        }
        let doc: Option<serde_json::Value> = serde_json::from_slice(subject.body).ok();
        self.body.iter().all(|(pointer, test)| {
            let found = doc.as_ref().and_then(|d| d.pointer(pointer));
            match (test, found) {
                (Test::Exists(want), found) => found.is_some() == *want,
                (_, Some(value)) => test.holds(value),
                (_, None) => false,
            }
        })
    }
}

impl Test {
    /// The test as text: `= true`, `in ["a", "b"]`, `exists`, `starts with "x"`.
    pub fn describe(&self) -> String {
        match self {
            Test::Equals(v) => format!("= {v}"),
            Test::OneOf(vs) => format!("in {}", serde_json::Value::Array(vs.clone())),
            Test::Exists(true) => "exists".to_string(),
            Test::Exists(false) => "is absent".to_string(),
            Test::Prefix(p) => format!("starts with {}", serde_json::Value::String(p.clone())),
        }
    }

    /// Whether a value that is present passes (`Exists` is decided by the caller).
    fn holds(&self, value: &serde_json::Value) -> bool {
        match self {
            Test::Equals(want) => same(want, value),
            Test::OneOf(wants) => wants.iter().any(|w| same(w, value)),
            Test::Exists(want) => *want,
            Test::Prefix(p) => value.as_str().is_some_and(|s| s.starts_with(p.as_str())),
        }
    }
}

/// JSON equality where `1` and `1.0` are the same number.
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x == y,
        _ => a == b,
    }
}

/// Header predicates compare text: `equals`/`in` must name strings.
fn header_comparable(test: &Test) -> bool {
    match test {
        Test::Equals(v) => v.is_string(),
        Test::OneOf(vs) => vs.iter().all(|v| v.is_string()),
        _ => true,
    }
}

/// The one test a predicate names.
fn test(at: &str, p: &RawPredicate) -> Result<Test, FilterError> {
    let err = |problem: String| FilterError {
        key: at.to_string(),
        problem,
    };
    let mut tests = Vec::new();
    if let Some(v) = &p.equals {
        tests.push(Test::Equals(json(v).map_err(err)?));
    }
    if let Some(vs) = &p.one_of {
        if vs.is_empty() {
            return Err(err("`in` needs at least one value".into()));
        }
        let values = vs.iter().map(json).collect::<Result<Vec<_>, _>>();
        tests.push(Test::OneOf(values.map_err(err)?));
    }
    if let Some(e) = p.exists {
        tests.push(Test::Exists(e));
    }
    if let Some(prefix) = &p.prefix {
        tests.push(Test::Prefix(prefix.clone()));
    }
    match tests.len() {
        1 => Ok(tests.remove(0)),
        0 => Err(err("needs one of `equals`, `in`, `exists`, `prefix`".into())),
        _ => Err(err(
            "takes one of `equals`, `in`, `exists`, `prefix`, not several".into(),
        )),
    }
}

/// A configuration value as the JSON value it is compared with.
fn json(v: &toml::Value) -> Result<serde_json::Value, String> {
    match v {
        toml::Value::Datetime(_) => {
            Err("dates are not JSON values: write the date as a string".into())
        }
        other => serde_json::to_value(other).map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(toml_text: &str) -> Result<Filter, FilterError> {
        let raw: RawFilter = toml::from_str(toml_text).expect("filter toml");
        Filter::compile("filter", &raw)
    }

    fn subject<'a>(
        event_type: Option<&'a str>,
        body: &'a [u8],
        headers: &'a [Header],
    ) -> Subject<'a> {
        Subject {
            event_type,
            body,
            headers,
        }
    }

    const INVOICE: &[u8] =
        br#"{"id":"evt_1","type":"invoice.paid","livemode":true,"data":{"object":{"id":"in_1","amount":1200,"currency":"usd"}}}"#;

    #[test]
    fn an_empty_filter_takes_everything() {
        let f = filter("").unwrap();
        assert!(f.takes_everything());
        assert!(f.describe().is_empty());
        assert!(f.matches(&subject(None, b"not json", &[])));
    }

    #[test]
    fn a_filter_describes_each_part_on_a_line() {
        let f = filter(
            r#"
event_types = ["invoice.*", "customer.*"]
match = [
  { pointer = "/livemode", equals = true },
  { pointer = "/data/object/currency", in = ["usd", "eur"] },
]
headers = [
  { name = "X-Env", prefix = "prod" },
  { name = "X-Test", exists = false },
]
"#,
        )
        .unwrap();
        assert_eq!(
            f.describe(),
            [
                "event type invoice.*, customer.*",
                "body /livemode = true",
                r#"body /data/object/currency in ["usd","eur"]"#,
                r#"header x-env starts with "prod""#,
                "header x-test is absent",
            ]
        );
    }

    #[test]
    fn event_type_globs_match_across_dots_and_need_an_event_type() {
        let f = filter(r#"event_types = ["invoice.*", "customer.subscription.?pdated"]"#).unwrap();
        assert!(!f.takes_everything());
        for t in [
            "invoice.paid",
            "invoice.payment.failed",
            "customer.subscription.updated",
        ] {
            assert!(f.matches(&subject(Some(t), b"{}", &[])), "{t}");
        }
        for t in [
            "invoices.paid",
            "charge.succeeded",
            "customer.subscription.created",
        ] {
            assert!(!f.matches(&subject(Some(t), b"{}", &[])), "{t}");
        }
        assert!(!f.matches(&subject(None, b"{}", &[])));
    }

    #[test]
    fn body_predicates_all_hold() {
        let f = filter(
            r#"match = [
                { pointer = "/livemode", equals = true },
                { pointer = "/data/object/currency", in = ["usd", "eur"] },
                { pointer = "/data/object/id", prefix = "in_" },
                { pointer = "/data/object/amount", equals = 1200.0 },
                { pointer = "/data/object/refunded", exists = false },
            ]"#,
        )
        .unwrap();
        assert!(f.matches(&subject(None, INVOICE, &[])));
        let test_mode = String::from_utf8_lossy(INVOICE).replace("true", "false");
        assert!(!f.matches(&subject(None, test_mode.as_bytes(), &[])));
        let gbp = String::from_utf8_lossy(INVOICE).replace("usd", "gbp");
        assert!(!f.matches(&subject(None, gbp.as_bytes(), &[])));
        let refunded = String::from_utf8_lossy(INVOICE)
            .replace("\"id\":\"in_1\"", "\"id\":\"in_1\",\"refunded\":1");
        assert!(!f.matches(&subject(None, refunded.as_bytes(), &[])));
    }

    #[test]
    fn a_body_that_is_not_json_has_no_pointers() {
        let exists = filter(r#"match = [{ pointer = "/a", exists = true }]"#).unwrap();
        let absent = filter(r#"match = [{ pointer = "/a", exists = false }]"#).unwrap();
        let prefix = filter(r#"match = [{ pointer = "", prefix = "a" }]"#).unwrap();
        for body in [&b"a=1&b=2"[..], b"", b"\xff\xfe"] {
            assert!(!exists.matches(&subject(None, body, &[])));
            assert!(absent.matches(&subject(None, body, &[])));
            assert!(!prefix.matches(&subject(None, body, &[])));
        }
        // A JSON string body: the empty pointer is the whole document.
        assert!(prefix.matches(&subject(None, br#""abc""#, &[])));
    }

    #[test]
    fn header_predicates_read_stored_headers_case_insensitively() {
        let f = filter(
            r#"headers = [
                { name = "X-GitHub-Event", in = ["push", "release"] },
                { name = "x-github-hook-installation-target-type", equals = "repository" },
                { name = "x-trace", exists = false },
            ]"#,
        )
        .unwrap();
        let h = |name: &str, value: &[u8]| Header {
            name: name.into(),
            value: value.to_vec(),
        };
        let push = [
            h("x-github-event", b"push"),
            h("x-github-hook-installation-target-type", b"repository"),
        ];
        assert!(f.matches(&subject(Some("push"), b"{}", &push)));
        let issues = [
            h("x-github-event", b"issues"),
            h("x-github-hook-installation-target-type", b"repository"),
        ];
        assert!(!f.matches(&subject(None, b"{}", &issues)));
        let traced = [push[0].clone(), push[1].clone(), h("X-Trace", b"1")];
        assert!(!f.matches(&subject(None, b"{}", &traced)));
        let not_utf8 = [h("x-github-event", b"\xffpush"), push[1].clone()];
        assert!(!f.matches(&subject(None, b"{}", &not_utf8)));
    }

    proptest::proptest! {
        /// Whatever arrives, a filter answers (no panic), the empty filter takes it,
        /// and `exists = true` and `exists = false` on one pointer never agree.
        #[test]
        fn any_entry_gets_an_answer(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
            json_body in "\\{(\"[a-z]{1,3}\":(1|\"x\"|\\{\"b\":true\\}),?){0,3}\\}",
            event_type in proptest::option::of("[a-z.]{0,12}"),
        ) {
            let everything = filter("").unwrap();
            let present = filter(r#"match = [{ pointer = "/a/b", exists = true }]
                                    event_types = ["*"]"#).unwrap();
            let absent = filter(r#"match = [{ pointer = "/a/b", exists = false }]
                                   event_types = ["*"]"#).unwrap();
            for body in [&body[..], json_body.as_bytes()] {
                let s = subject(event_type.as_deref(), body, &[]);
                proptest::prop_assert!(everything.matches(&s));
                if event_type.is_some() {
                    proptest::prop_assert_ne!(present.matches(&s), absent.matches(&s));
                } else {
                    proptest::prop_assert!(!present.matches(&s) && !absent.matches(&s));
                }
            }
        }
    }

    #[test]
    fn mistakes_are_named_by_key() {
        let cases: &[(&str, &str)] = &[
            (
                r#"event_types = ["invoice.[paid"]"#,
                "filter.event_types[0]",
            ),
            (
                r#"match = [{ pointer = "a", exists = true }]"#,
                "filter.match[0]",
            ),
            (r#"match = [{ exists = true }]"#, "filter.match[0]"),
            (r#"match = [{ pointer = "/a" }]"#, "filter.match[0]"),
            (
                r#"match = [{ pointer = "/a", equals = 1, prefix = "x" }]"#,
                "filter.match[0]",
            ),
            (
                r#"match = [{ pointer = "/a", in = [] }]"#,
                "filter.match[0]",
            ),
            (
                r#"match = [{ name = "x", exists = true }]"#,
                "filter.match[0]",
            ),
            (
                r#"headers = [{ pointer = "/a", exists = true }]"#,
                "filter.headers[0]",
            ),
            (
                r#"headers = [{ name = "x", equals = 1 }]"#,
                "filter.headers[0]",
            ),
            (
                r#"headers = [{ name = "", exists = true }]"#,
                "filter.headers[0]",
            ),
            (
                r#"match = [{ pointer = "/a", equals = 1979-05-27 }]"#,
                "filter.match[0]",
            ),
        ];
        for (text, key) in cases {
            let e = filter(text).expect_err(text);
            assert_eq!(&e.key, key, "{text}: {e}");
        }
        assert!(toml::from_str::<RawFilter>(r#"script = "x""#).is_err());
    }
}
