//! What a program's output becomes: the body, content type and headers a route
//! sends.
//!
//! With `transform_output = "body"` (the default) the one output value is the body,
//! as JSON. With `"envelope"` it is an object `{"body": …, "headers": {…},
//! "content_type": "…"}`: a string body is sent as its text (`text/plain` unless
//! `content_type` says otherwise), a flat object with `content_type =
//! "application/x-www-form-urlencoded"` as a form, anything else as JSON.
//!
//! JSON is written strictly: object keys must be strings, and what JSON cannot say
//! becomes what jq makes of it (`nan` is `null`, infinities the largest finite
//! numbers), so an app always receives valid JSON.

use jaq_json::{Num, Val};

/// What a route sends instead of the stored body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shaped {
    pub body: Vec<u8>,
    pub content_type: String,
    /// Headers the program set (names lower-case, checked); hookgate's own delivery
    /// headers still replace any of the same name.
    pub headers: Vec<(String, String)>,
}

/// Why an output cannot be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeError {
    /// The body is larger than the route may send.
    TooLarge { cap: usize },
    /// The output is not what the route's `transform_output` asks for.
    Bad(String),
}

pub const JSON: &str = "application/json";
pub const FORM: &str = "application/x-www-form-urlencoded";
const TEXT: &str = "text/plain; charset=utf-8";

/// Headers a program may not set: framing and hop-by-hop headers, which the HTTP
/// client owns, and hookgate's own, which say what hookgate vouches for.
fn reserved(name: &str) -> bool {
    matches!(
        name,
        "content-length"
            | "content-type"
            | "transfer-encoding"
            | "connection"
            | "keep-alive"
            | "host"
            | "te"
            | "trailer"
            | "upgrade"
            | "proxy-connection"
            | "proxy-authorization"
    ) || name.starts_with("webhook-")
        || name.starts_with("hookgate-")
}

/// The request an output value stands for, its body at most `cap` bytes.
pub fn shape(out: &Val, envelope: bool, cap: usize) -> Result<Shaped, ShapeError> {
    if !envelope {
        let body = json(out, cap)?;
        return Ok(Shaped {
            body,
            content_type: JSON.into(),
            headers: Vec::new(),
        });
    }
    let Val::Obj(fields) = out else {
        return Err(ShapeError::Bad(
            "an envelope is an object {\"body\": …, \"headers\": {…}, \"content_type\": \"…\"}"
                .into(),
        ));
    };
    let mut body = None;
    let mut content_type = None;
    let mut headers = Vec::new();
    for (k, v) in fields.iter() {
        match text(k).as_deref() {
            Some("body") => body = Some(v),
            Some("content_type") => match v {
                Val::Null => {}
                Val::TStr(_) | Val::BStr(_) => {
                    let ct = text(v).unwrap_or_default();
                    if http::HeaderValue::from_str(&ct).is_err() || ct.is_empty() {
                        return Err(ShapeError::Bad(
                            "content_type is not a valid header value".into(),
                        ));
                    }
                    content_type = Some(ct);
                }
                _ => return Err(ShapeError::Bad("content_type must be a string".into())),
            },
            Some("headers") => headers = envelope_headers(v)?,
            Some(other) => {
                return Err(ShapeError::Bad(format!(
                    "an envelope has body, headers and content_type, not {other:?}"
                )));
            }
            None => return Err(ShapeError::Bad("object keys must be strings".into())),
        }
    }
    let Some(body) = body else {
        return Err(ShapeError::Bad("the envelope has no body".into()));
    };
    let essence = content_type.as_deref().map(|c| {
        c.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    let (bytes, ct) = match (body, essence.as_deref()) {
        (_, Some(FORM)) => (
            form(body, cap)?,
            content_type.unwrap_or_else(|| FORM.into()),
        ),
        (Val::TStr(_) | Val::BStr(_), _) => {
            let bytes = match body {
                Val::TStr(b) | Val::BStr(b) => b.to_vec(),
                _ => Vec::new(),
            };
            if bytes.len() > cap {
                return Err(ShapeError::TooLarge { cap });
            }
            (bytes, content_type.unwrap_or_else(|| TEXT.into()))
        }
        _ => (
            json(body, cap)?,
            content_type.unwrap_or_else(|| JSON.into()),
        ),
    };
    Ok(Shaped {
        body: bytes,
        content_type: ct,
        headers,
    })
}

/// The `headers` of an envelope: an object of string (or number, boolean) values.
fn envelope_headers(v: &Val) -> Result<Vec<(String, String)>, ShapeError> {
    let Val::Obj(map) = v else {
        if matches!(v, Val::Null) {
            return Ok(Vec::new());
        }
        return Err(ShapeError::Bad(
            "headers must be an object of names to values".into(),
        ));
    };
    let mut out = Vec::new();
    for (k, v) in map.iter() {
        let Some(name) = text(k) else {
            return Err(ShapeError::Bad("header names must be strings".into()));
        };
        let name = name.to_ascii_lowercase();
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(ShapeError::Bad(format!("{name:?} is not a header name")));
        }
        if reserved(&name) {
            return Err(ShapeError::Bad(format!(
                "{name} is set by hookgate, not by a transform"
            )));
        }
        let value = scalar(v).ok_or_else(|| {
            ShapeError::Bad(format!("header {name} must be a string, number or boolean"))
        })?;
        if http::HeaderValue::from_str(&value).is_err() {
            return Err(ShapeError::Bad(format!(
                "header {name} is not a valid header value"
            )));
        }
        out.push((name, value));
    }
    Ok(out)
}

/// A flat object as a form: `a=1&b=x+y`; `null` values are left out.
fn form(v: &Val, cap: usize) -> Result<Vec<u8>, ShapeError> {
    let Val::Obj(map) = v else {
        return Err(ShapeError::Bad(
            "a form body is a flat object of names to values".into(),
        ));
    };
    let mut enc = form_urlencoded::Serializer::new(String::new());
    for (k, v) in map.iter() {
        let Some(name) = text(k) else {
            return Err(ShapeError::Bad("form field names must be strings".into()));
        };
        if matches!(v, Val::Null) {
            continue;
        }
        let value = scalar(v).ok_or_else(|| {
            ShapeError::Bad(format!(
                "form field {name:?} must be a string, number or boolean (a form is flat)"
            ))
        })?;
        enc.append_pair(&name, &value);
    }
    let body = enc.finish().into_bytes();
    if body.len() > cap {
        return Err(ShapeError::TooLarge { cap });
    }
    Ok(body)
}

/// A string's text (invalid UTF-8 replaced).
fn text(v: &Val) -> Option<String> {
    match v {
        Val::TStr(b) | Val::BStr(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

/// A string, number or boolean as text.
fn scalar(v: &Val) -> Option<String> {
    match v {
        Val::TStr(_) | Val::BStr(_) => text(v),
        Val::Bool(b) => Some(b.to_string()),
        Val::Num(n) => Some(number(n)),
        _ => None,
    }
}

/// The largest magnitude below which every integral float is written as an
/// integer (as jq writes `4 / 2`: `2`); 2^53, where floats stop being exact.
const INTEGRAL_UP_TO: f64 = 9_007_199_254_740_992.0;

/// A number as JSON writes it (see the module's note on what JSON cannot say); an
/// integral float as an integer, as jq writes one.
fn number(n: &Num) -> String {
    match n {
        Num::Float(f) if f.is_nan() => "null".into(),
        Num::Float(f) if f.is_infinite() && *f > 0.0 => "1.7976931348623157e308".into(),
        Num::Float(f) if f.is_infinite() => "-1.7976931348623157e308".into(),
        Num::Float(f) if f.fract() == 0.0 && f.abs() < INTEGRAL_UP_TO => format!("{}", *f as i64),
        other => other.to_string(),
    }
}

/// `v` as JSON text, at most `cap` bytes.
pub fn json(v: &Val, cap: usize) -> Result<Vec<u8>, ShapeError> {
    let mut out = Vec::new();
    write_json(v, &mut out, cap)?;
    Ok(out)
}

fn write_json(v: &Val, out: &mut Vec<u8>, cap: usize) -> Result<(), ShapeError> {
    if out.len() > cap {
        return Err(ShapeError::TooLarge { cap });
    }
    match v {
        Val::Null => out.extend_from_slice(b"null"),
        Val::Bool(true) => out.extend_from_slice(b"true"),
        Val::Bool(false) => out.extend_from_slice(b"false"),
        Val::Num(n) => out.extend_from_slice(number(n).as_bytes()),
        Val::TStr(b) | Val::BStr(b) => string(&String::from_utf8_lossy(b), out),
        Val::Arr(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(item, out, cap)?;
            }
            out.push(b']');
        }
        Val::Obj(map) => {
            out.push(b'{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let Some(key) = text(k) else {
                    return Err(ShapeError::Bad(
                        "object keys must be strings in JSON".into(),
                    ));
                };
                string(&key, out);
                out.push(b':');
                write_json(item, out, cap)?;
            }
            out.push(b'}');
        }
    }
    if out.len() > cap {
        return Err(ShapeError::TooLarge { cap });
    }
    Ok(())
}

/// A JSON string literal.
fn string(s: &str, out: &mut Vec<u8>) {
    // serde_json escapes exactly as JSON requires; writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn val(json: &str) -> Val {
        jaq_json::read::parse_single(json.as_bytes()).unwrap()
    }

    #[test]
    fn a_body_output_is_json() {
        let s = shape(
            &val(r#"{"a":1,"b":[true,null,"x\"y"],"c":1.50}"#),
            false,
            1000,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(s.body).unwrap(),
            r#"{"a":1,"b":[true,null,"x\"y"],"c":1.50}"#
        );
        assert_eq!(s.content_type, JSON);
        assert!(shape(&val(r#""text""#), false, 1000).unwrap().body == b"\"text\"");
    }

    #[test]
    fn what_json_cannot_say_becomes_what_jq_makes_of_it() {
        let v = Val::Arr(jaq_json::Rc::new(vec![
            Val::Num(Num::Float(f64::NAN)),
            Val::Num(Num::Float(f64::INFINITY)),
        ]));
        let body = json(&v, 1000).unwrap();
        let back: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(back[0], serde_json::Value::Null);
        assert!(back[1].as_f64().unwrap() > 1e308);
        let n = |f: f64| json(&Val::Num(Num::Float(f)), 100).unwrap();
        assert_eq!(n(20.0), b"20");
        assert_eq!(n(-3.0), b"-3");
        assert_eq!(n(20.5), b"20.5");
        assert_eq!(n(1e300), b"1e300");
    }

    #[test]
    fn the_cap_holds() {
        let big = Val::from("x".repeat(100));
        assert_eq!(json(&big, 50), Err(ShapeError::TooLarge { cap: 50 }));
        assert!(json(&big, 102).is_ok());
    }

    #[test]
    fn an_envelope_sets_headers_and_content_type() {
        let s = shape(
            &val(r#"{"body":{"a":"x y","n":3,"z":null},"content_type":"application/x-www-form-urlencoded","headers":{"X-Kind":"push","X-N":2}}"#),
            true,
            1000,
        )
        .unwrap();
        assert_eq!(s.body, b"a=x+y&n=3");
        assert_eq!(s.content_type, FORM);
        assert_eq!(
            s.headers,
            vec![("x-kind".into(), "push".into()), ("x-n".into(), "2".into())]
        );
        let t = shape(&val(r#"{"body":"hello"}"#), true, 1000).unwrap();
        assert_eq!(
            (t.body.as_slice(), t.content_type.as_str()),
            (&b"hello"[..], TEXT)
        );
        let j = shape(&val(r#"{"body":{"text":"hi"}}"#), true, 1000).unwrap();
        assert_eq!(
            (j.body.as_slice(), j.content_type.as_str()),
            (&br#"{"text":"hi"}"#[..], JSON)
        );
    }

    #[test]
    fn a_bad_envelope_says_why() {
        for (bad, why) in [
            (r#"[1]"#, "is an object"),
            (r#"{"headers":{}}"#, "no body"),
            (r#"{"body":1,"extra":2}"#, "not \"extra\""),
            (
                r#"{"body":1,"headers":{"content-length":"1"}}"#,
                "set by hookgate",
            ),
            (
                r#"{"body":1,"headers":{"webhook-signature":"x"}}"#,
                "set by hookgate",
            ),
            (
                r#"{"body":1,"headers":{"x-a":"a\nb"}}"#,
                "not a valid header value",
            ),
            (
                r#"{"body":1,"headers":{"bad name":"a"}}"#,
                "not a header name",
            ),
            (
                r#"{"body":{"a":{"b":1}},"content_type":"application/x-www-form-urlencoded"}"#,
                "flat",
            ),
            (
                r#"{"body":1,"content_type":"a\u0000b"}"#,
                "not a valid header value",
            ),
        ] {
            match shape(&val(bad), true, 1000) {
                Err(ShapeError::Bad(m)) => assert!(m.contains(why), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
