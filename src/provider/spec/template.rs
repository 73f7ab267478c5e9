//! The small languages inside a spec: value sources (`header:Name`, `json:/pointer`,
//! …), value templates for event ids and types (`{json:/type}.{json:/action}`) and
//! signed-content templates (`{timestamp}.{body}`). Each is parsed once, when the
//! spec is compiled, so that verification never interprets a string.

use super::{LineField, Part, Segment, ValueSource, ValueTemplate};

const SOURCE_HINT: &str =
    "use header:Name, signature:key, json:/pointer, form:field[#/pointer] or query:name";

/// Parse a value source: `header:Name`, `signature:key`, `json:/pointer`,
/// `form:field`, `form:field#/pointer` or `query:name`.
pub fn parse_source(s: &str) -> Result<ValueSource, String> {
    let (kind, arg) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: {SOURCE_HINT}"))?;
    let pointer = |p: &str| {
        if p.is_empty() || p.starts_with('/') {
            Ok(p.to_string())
        } else {
            Err(format!(
                "{p:?} is not a JSON pointer; it must start with '/'"
            ))
        }
    };
    match kind {
        "header" => http::HeaderName::from_bytes(arg.as_bytes())
            .map(ValueSource::Header)
            .map_err(|_| format!("{arg:?} is not a header name")),
        "signature" if !arg.is_empty() => Ok(ValueSource::Signature(arg.to_string())),
        "json" => pointer(arg).map(ValueSource::Json),
        "form" => {
            let (field, ptr) = match arg.split_once('#') {
                Some((f, p)) => (f, Some(pointer(p)?)),
                None => (arg, None),
            };
            if field.is_empty() {
                return Err(format!("{s:?}: the form field name is empty"));
            }
            Ok(ValueSource::Form {
                field: field.to_string(),
                pointer: ptr,
            })
        }
        "query" if !arg.is_empty() => Ok(ValueSource::Query(arg.to_string())),
        _ => Err(format!("{s:?}: unknown source; {SOURCE_HINT}")),
    }
}

/// Parse an event id or type template: a bare value source, or literals with
/// `{source}` placeholders.
pub fn parse_value_template(t: &str) -> Result<ValueTemplate, String> {
    if !t.contains(['{', '}']) {
        return Ok(ValueTemplate {
            parts: vec![Part::Value(parse_source(t)?)],
            text: t.to_string(),
        });
    }
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut rest = t;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("{{") || rest.starts_with("}}") {
            lit.push(c);
            rest = &rest[2..];
        } else if c == '{' {
            let end = rest
                .find('}')
                .ok_or_else(|| format!("unclosed '{{' in {t:?}"))?;
            if !lit.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut lit)));
            }
            parts.push(Part::Value(
                parse_source(&rest[1..end]).map_err(|e| format!("in {t:?}: {e}"))?,
            ));
            rest = &rest[end + 1..];
        } else if c == '}' {
            return Err(format!("unmatched '}}' in {t:?} (write '}}}}')"));
        } else {
            lit.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    if !lit.is_empty() {
        parts.push(Part::Literal(lit));
    }
    if !parts.iter().any(|p| matches!(p, Part::Value(_))) {
        return Err(format!("{t:?} has no {{source}} placeholder"));
    }
    Ok(ValueTemplate {
        parts,
        text: t.to_string(),
    })
}

/// The fields of `{lines:A,B?,C}`: names of top-level JSON fields, `?` marking the
/// ones a body may lack.
fn parse_lines(list: &str) -> Result<Vec<LineField>, String> {
    let mut fields: Vec<LineField> = Vec::new();
    for item in list.split(',') {
        let item = item.trim();
        let (name, optional) = match item.strip_suffix('?') {
            Some(name) => (name, true),
            None => (item, false),
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!("{item:?} is not a field name"));
        }
        if fields.iter().any(|f| f.name == name) {
            return Err(format!("{name:?} is listed twice"));
        }
        fields.push(LineField {
            name: name.to_string(),
            optional,
        });
    }
    if !fields.iter().any(|f| !f.optional) {
        return Err("at least one field must be required".into());
    }
    Ok(fields)
}

/// Parse a signed-content template into segments.
pub fn parse_template(t: &str) -> Result<Vec<Segment>, String> {
    let mut out = Vec::new();
    let mut lit = Vec::new();
    let bytes = t.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' if bytes.get(i + 1) == Some(&b'{') => {
                lit.push(b'{');
                i += 2;
            }
            b'}' if bytes.get(i + 1) == Some(&b'}') => {
                lit.push(b'}');
                i += 2;
            }
            b'{' => {
                let end = t[i..]
                    .find('}')
                    .ok_or_else(|| format!("unclosed '{{' in template {t:?}"))?;
                let name = &t[i + 1..i + end];
                if !lit.is_empty() {
                    out.push(Segment::Literal(std::mem::take(&mut lit)));
                }
                out.push(match name {
                    "body" => Segment::Body,
                    "timestamp" => Segment::Timestamp,
                    "method" => Segment::Method,
                    "path" => Segment::Path,
                    "url" => Segment::Url,
                    "form_sorted" => Segment::FormSorted,
                    "secret" => Segment::Secret,
                    "body_crc32" => Segment::BodyCrc32,
                    "path_escaped" => Segment::PathEscaped,
                    "jws" => Segment::JwsInput,
                    list if list.starts_with("header_list:") => Segment::HeaderList(
                        http::HeaderName::from_bytes(&list.as_bytes()["header_list:".len()..])
                            .map_err(|_| {
                                format!("placeholder {{{list}}} in {t:?}: not a header name")
                            })?,
                    ),
                    optional if optional.starts_with('?') => Segment::OptionalValue(
                        parse_source(&optional[1..])
                            .map_err(|e| format!("placeholder {{{optional}}} in {t:?}: {e}"))?,
                    ),
                    lines if lines.starts_with("lines:") => Segment::Lines(
                        parse_lines(&lines["lines:".len()..])
                            .map_err(|e| format!("placeholder {{{lines}}} in {t:?}: {e}"))?,
                    ),
                    other => Segment::Value(
                        parse_source(other)
                            .map_err(|e| format!("placeholder {{{other}}} in {t:?}: {e}"))?,
                    ),
                });
                i += end + 1;
            }
            b'}' => return Err(format!("unmatched '}}' in template {t:?} (write '}}}}')")),
            b => {
                lit.push(b);
                i += 1;
            }
        }
    }
    if !lit.is_empty() {
        out.push(Segment::Literal(lit));
    }
    let covers_body = out.iter().any(|s| {
        matches!(
            s,
            Segment::Body
                | Segment::FormSorted
                | Segment::BodyCrc32
                | Segment::Lines(_)
                // Bound to the body by its digest claim (`body_sha256`; compile).
                | Segment::JwsInput
                | Segment::Value(ValueSource::Json(_))
                | Segment::Value(ValueSource::Form { .. })
                | Segment::OptionalValue(ValueSource::Json(_))
        )
    });
    if !covers_body {
        return Err(format!(
            "template {t:?} signs neither {{body}} nor a part of it; the request would be unprotected"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_parses_placeholders_and_escapes() {
        let segs = parse_template("v0:{timestamp}:{body}").unwrap();
        assert_eq!(
            segs,
            vec![
                Segment::Literal(b"v0:".to_vec()),
                Segment::Timestamp,
                Segment::Literal(b":".to_vec()),
                Segment::Body
            ]
        );
        let segs = parse_template("{{x}}{header:webhook-id}.{body}").unwrap();
        assert_eq!(segs[0], Segment::Literal(b"{x}".to_vec()));
        assert_eq!(
            segs[1],
            Segment::Value(ValueSource::Header(http::HeaderName::from_static(
                "webhook-id"
            )))
        );
    }

    #[test]
    fn template_errors_are_clear() {
        assert!(parse_template("{body").unwrap_err().contains("unclosed"));
        assert!(
            parse_template("{nope}.{body}")
                .unwrap_err()
                .contains("placeholder {nope}")
        );
        assert!(
            parse_template("{foo:x}.{body}")
                .unwrap_err()
                .contains("unknown source")
        );
        assert!(
            parse_template("{timestamp}")
                .unwrap_err()
                .contains("unprotected")
        );
    }
}
