//! Reading values out of a JSON body by RFC 6901 pointer without building the
//! document: each level is borrowed raw, so a large body is scanned, not copied.

/// A JSON object's members, their values borrowed raw from the body.
pub(super) type TopLevel<'a> =
    std::collections::HashMap<std::borrow::Cow<'a, str>, &'a serde_json::value::RawValue>;

/// The text at a JSON pointer in `body` (strings unescaped; numbers and booleans as
/// written), found without building the document: each level is read as a map of raw,
/// borrowed values, so a large body is scanned, not copied. This is the hot path of
/// event id and type extraction.
pub(super) fn json_pointer_text(body: &[u8], ptr: &str) -> Option<String> {
    let root: &serde_json::value::RawValue = serde_json::from_slice(body).ok()?;
    raw_pointer_text(root, ptr)
}

/// [`json_pointer_text`] with the top level already parsed (a non-empty pointer into
/// an object body): the first token is a lookup.
pub(super) fn top_pointer_text(top: &TopLevel<'_>, ptr: &str) -> Option<String> {
    let tokens = ptr.strip_prefix('/')?;
    // `rest` keeps its leading slash: it is a pointer into the first token's value.
    let (first, rest) = match tokens.find('/') {
        Some(i) => tokens.split_at(i),
        None => (tokens, ""),
    };
    let value = top.get(unescape_token(first).as_str())?;
    raw_pointer_text(value, rest)
}

/// An array index as RFC 6901 writes it: `0`, or digits without a leading zero
/// (`01`, `+1` and `-0` name no element, as in serde_json's `Value::pointer`).
fn array_index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

fn unescape_token(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// Follow `ptr` from `current`, one level at a time.
fn raw_pointer_text(current: &serde_json::value::RawValue, ptr: &str) -> Option<String> {
    let text = raw_pointer(current, ptr)?.get();
    match text.as_bytes().first()? {
        b'"' => serde_json::from_str::<String>(text).ok(),
        b'-' | b'0'..=b'9' | b't' | b'f' => Some(text.to_string()),
        _ => None,
    }
}

/// The value at `ptr` under `current`, as written (any JSON type).
pub(super) fn raw_pointer<'b>(
    mut current: &'b serde_json::value::RawValue,
    ptr: &str,
) -> Option<&'b serde_json::value::RawValue> {
    use serde_json::value::RawValue;
    use std::borrow::Cow;
    use std::collections::HashMap;
    if !ptr.is_empty() {
        for token in ptr.strip_prefix('/')?.split('/') {
            let token = unescape_token(token);
            let text = current.get();
            current = match text.as_bytes().first()? {
                b'{' => {
                    let map: HashMap<Cow<'_, str>, &RawValue> = serde_json::from_str(text).ok()?;
                    map.get(token.as_str()).copied()?
                }
                b'[' => {
                    let items: Vec<&RawValue> = serde_json::from_str(text).ok()?;
                    items.get(array_index(&token)?).copied()?
                }
                _ => return None,
            };
        }
    }
    Some(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `routing` fuzz target: `/00/a` and `/+0/a` read element 0.
    #[test]
    fn array_indexes_are_written_as_rfc_6901_writes_them() {
        let body = br#"{"x":[{"a":"first"},{"a":"second"}]}"#;
        assert_eq!(json_pointer_text(body, "/x/0/a").as_deref(), Some("first"));
        assert_eq!(json_pointer_text(body, "/x/1/a").as_deref(), Some("second"));
        for ptr in [
            "/x/00/a",
            "/x/0000000000000000000/a",
            "/x/+0/a",
            "/x/+1/a",
            "/x/-0/a",
            "/x//a",
            "/x/1e0/a",
        ] {
            assert_eq!(json_pointer_text(body, ptr), None, "{ptr}");
            let doc: serde_json::Value = serde_json::from_slice(body).unwrap();
            assert_eq!(doc.pointer(ptr), None, "serde_json agrees on {ptr}");
        }
    }

    #[test]
    fn pointers_find_strings_numbers_and_nested_values() {
        let body = br#"{"id":"evt_1","n":42,"ok":true,"event":{"type":"app_mention","a/b":"s","x":[1,{"y":"z"}]},"esc":"a\"b","nul":null}"#;
        assert_eq!(json_pointer_text(body, "/id").as_deref(), Some("evt_1"));
        assert_eq!(json_pointer_text(body, "/n").as_deref(), Some("42"));
        assert_eq!(json_pointer_text(body, "/ok").as_deref(), Some("true"));
        assert_eq!(
            json_pointer_text(body, "/event/type").as_deref(),
            Some("app_mention")
        );
        assert_eq!(json_pointer_text(body, "/event/a~1b").as_deref(), Some("s"));
        assert_eq!(
            json_pointer_text(body, "/event/x/1/y").as_deref(),
            Some("z")
        );
        assert_eq!(json_pointer_text(body, "/esc").as_deref(), Some("a\"b"));
        assert_eq!(json_pointer_text(body, "/nul"), None);
        // The shared top-level parse answers every pointer the same way.
        let top: TopLevel<'_> = serde_json::from_slice(body).expect("object");
        for ptr in [
            "/id",
            "/n",
            "/ok",
            "/event/type",
            "/event/a~1b",
            "/event/x/1/y",
            "/esc",
            "/nul",
            "/event",
            "/missing",
            "/event/x/9",
            "/id/deeper",
        ] {
            assert_eq!(
                top_pointer_text(&top, ptr),
                json_pointer_text(body, ptr),
                "{ptr}"
            );
        }
        assert_eq!(json_pointer_text(body, "/event"), None);
        assert_eq!(json_pointer_text(body, "/missing"), None);
        assert_eq!(json_pointer_text(b"not json", "/id"), None);
        assert_eq!(json_pointer_text(b"[1,2]", "/5"), None);
    }
}
