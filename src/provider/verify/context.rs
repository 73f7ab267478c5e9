//! What the engine may read from one request: headers, the offered signature's
//! other items, the JSON or form body and the query, each parsed at most once and
//! only when a spec asks for it.

use std::cell::OnceCell;

use super::form::{FormError, parse_form, sorted_form};
use super::json_pointer::{TopLevel, json_pointer_text, top_pointer_text};
use super::signature::ParsedSignature;
use super::{Request, VerifyError};
use crate::provider::spec::{Part, ValueSource, ValueTemplate};

/// A JSON scalar as text (a string without its quotes); other values have none.
fn scalar(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Everything the signed-content template and the event extraction may read.
pub(crate) struct Context<'a> {
    pub req: Request<'a>,
    /// The offered signature, and the other items of a `kv` signature value.
    pub signature: ParsedSignature,
    /// The body is bound by a signed SHA-256 digest (`signature.body_sha256`), so
    /// `{form_sorted}` contributes nothing.
    pub digest_bound: bool,
    /// A certificate scheme's bound value being tried (`{secret}`).
    pub secret: Option<std::sync::Arc<str>>,
    json: OnceCell<Option<serde_json::Value>>,
    /// The body's top-level object with its values borrowed raw, parsed once and
    /// shared by every pointer (event id and type read one scan, not four).
    top: OnceCell<Option<TopLevel<'a>>>,
    form: OnceCell<Result<Vec<(String, String)>, FormError>>,
    /// The form's canonical order, built once however many keys and URL forms
    /// are tried.
    form_order: OnceCell<Vec<usize>>,
    query: OnceCell<Vec<(String, String)>>,
}

impl<'a> Context<'a> {
    pub(crate) fn new(req: Request<'a>, signature: ParsedSignature) -> Self {
        Context {
            req,
            signature,
            digest_bound: false,
            secret: None,
            json: OnceCell::new(),
            top: OnceCell::new(),
            form: OnceCell::new(),
            form_order: OnceCell::new(),
            query: OnceCell::new(),
        }
    }

    pub(super) fn json(&self) -> Option<&serde_json::Value> {
        self.json
            .get_or_init(|| serde_json::from_slice(self.req.body).ok())
            .as_ref()
    }

    fn top(&self) -> Option<&TopLevel<'a>> {
        self.top
            .get_or_init(|| serde_json::from_slice(self.req.body).ok())
            .as_ref()
    }

    fn parsed_form(&self) -> Result<&[(String, String)], FormError> {
        match self.form.get_or_init(|| parse_form(self.req.body)) {
            Ok(pairs) => Ok(pairs),
            Err(e) => Err(*e),
        }
    }

    fn form(&self) -> Option<&[(String, String)]> {
        self.parsed_form().ok()
    }

    /// The distinct form parameters in canonical order.
    pub(super) fn sorted_form(&self) -> Result<impl Iterator<Item = (&str, &str)>, VerifyError> {
        let pairs = self.parsed_form().map_err(|e| match e {
            FormError::TooManyParameters => VerifyError::MalformedForm,
            FormError::NotUtf8 => VerifyError::MissingSignedValue,
        })?;
        let order = self.form_order.get_or_init(|| sorted_form(pairs));
        Ok(order
            .iter()
            .map(move |i| (pairs[*i].0.as_str(), pairs[*i].1.as_str())))
    }

    fn query(&self) -> &[(String, String)] {
        self.query.get_or_init(|| {
            self.req
                .path
                .split_once('?')
                .and_then(|(_, q)| parse_form(q.as_bytes()).ok())
                .unwrap_or_default()
        })
    }

    /// Resolve a value source to its text, if present.
    pub(crate) fn value(&self, src: &ValueSource) -> Option<String> {
        match src {
            ValueSource::Header(name) => self
                .req
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|s| s.trim().to_string()),
            ValueSource::Signature(key) => self
                .signature
                .fields
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone()),
            ValueSource::Json(ptr) => match self.top() {
                Some(top) if !ptr.is_empty() => top_pointer_text(top, ptr),
                _ => json_pointer_text(self.req.body, ptr),
            },
            ValueSource::Form { field, pointer } => {
                let value = self.form()?.iter().find(|(n, _)| n == field)?.1.as_str();
                match pointer {
                    None => Some(value.to_string()),
                    Some(ptr) => scalar(
                        serde_json::from_str::<serde_json::Value>(value)
                            .ok()?
                            .pointer(ptr)?,
                    ),
                }
            }
            ValueSource::Query(name) => self
                .query()
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone()),
        }
    }

    /// The value a template builds, when every value it needs is present.
    pub(crate) fn template(&self, t: &ValueTemplate) -> Option<String> {
        let mut out = String::new();
        for part in &t.parts {
            match part {
                Part::Literal(l) => out.push_str(l),
                Part::Value(src) => {
                    let v = self.value(src)?;
                    if v.is_empty() {
                        return None;
                    }
                    out.push_str(&v);
                }
            }
        }
        Some(out)
    }
}
