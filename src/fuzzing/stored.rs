//! Target `stored`: what decodes bytes the store gives back, as if they were
//! corrupted or written by another release, and the console's JSON view of a body.
//!
//! Input: an entry id on the first line, then `field=value` lines (an entry hash as
//! the Redis store keeps it: `routes`, `R:status`, `R:attempts`, …), an empty line,
//! then bytes used three ways: as the packed record of that hash, as a stored header
//! list, and as a body shown in the console.
//!
//! Checked beyond "no panic": an entry written by the codec reads back the same
//! (source, ids, type, dedupe key, time, headers, body, origin), whatever those
//! hold, and a hash read as an entry has the origin its `origin` field names; the
//! JSON view never writes more than its cap, and when it is not cut it is the body's
//! tokens as written, only the whitespace between them changed.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;

use super::{head_and_rest, pick, text};
use crate::console::json_indented;
use crate::header::Header;
use crate::store::{NewEntry, Origin, decode_headers, redis_entry_from_map, redis_pack_record};

pub fn stored(data: &[u8]) {
    let (lines, rest) = head_and_rest(data);
    let id = text(lines.first());

    // A hash as found, the rest as its packed record.
    let mut map: HashMap<String, Vec<u8>> = lines
        .iter()
        .skip(1)
        .filter_map(|l| {
            let eq = l.iter().position(|b| *b == b'=')?;
            Some((
                String::from_utf8_lossy(&l[..eq]).into_owned(),
                l[eq + 1..].to_vec(),
            ))
        })
        .collect();
    map.insert("record".to_string(), rest.to_vec());
    if let Ok(entry) = redis_entry_from_map(&id, map.clone()) {
        assert_eq!(entry.id, id);
        assert!(entry.deliveries.iter().all(|d| !d.route.is_empty()));
        // Absent (or empty) means received; anything else reads only as what it names.
        match map.get("origin").map(Vec::as_slice) {
            None | Some(b"") => assert_eq!(entry.origin, Origin::Received),
            Some(named) => assert_eq!(entry.origin.as_str().as_bytes(), named),
        }
    }

    if let Ok(text) = std::str::from_utf8(rest) {
        let _ = decode_headers(&id, text);
        json_view(text, pick(rest, 4096));
    }

    round_trip(&lines, rest);
}

/// An entry made of the input's lines and bytes, packed and read back.
fn round_trip(lines: &[&[u8]], rest: &[u8]) {
    let line = |i: usize| text(lines.get(i));
    let headers: Vec<Header> = lines
        .iter()
        .skip(5)
        .filter_map(|l| {
            let colon = l.iter().position(|b| *b == b':')?;
            Some(Header {
                name: String::from_utf8_lossy(&l[..colon]).to_ascii_lowercase(),
                value: l[colon + 1..].to_vec(),
            })
        })
        .collect();
    let non_empty = |s: String| (!s.is_empty()).then_some(s);
    let origin = Origin::ALL[pick(rest, Origin::ALL.len())];
    let entry = NewEntry {
        id: "0190a000-0000-7000-8000-000000000000".to_string(),
        source: line(0),
        event_id: non_empty(line(1)),
        event_type: non_empty(line(2)),
        dedupe_key: line(3),
        dedupe_ttl: Duration::from_secs(60),
        received_at: line(4).trim().parse().unwrap_or(1_700_000_000_000),
        headers,
        body: Bytes::copy_from_slice(rest),
        routes: vec!["default".to_string()],
        ordering: Vec::new(),
        index: Vec::new(),
        origin,
    };
    let Ok(packed) = redis_pack_record(&entry) else {
        return;
    };
    let mut map = HashMap::from([
        ("record".to_string(), packed),
        ("routes".to_string(), b"default".to_vec()),
    ]);
    // As the accept writes it: only an origin other than received.
    if origin.is_recovered() {
        map.insert("origin".to_string(), origin.as_str().as_bytes().to_vec());
    }
    let back = match redis_entry_from_map(&entry.id, map) {
        Ok(e) => e,
        Err(e) => panic!("an entry the codec wrote does not read back: {e}"),
    };
    assert_eq!(back.source, entry.source);
    assert_eq!(back.event_id, entry.event_id);
    assert_eq!(back.event_type, entry.event_type);
    assert_eq!(back.dedupe_key, entry.dedupe_key);
    assert_eq!(back.received_at, entry.received_at);
    assert_eq!(back.headers, entry.headers);
    assert_eq!(back.body, entry.body);
    assert_eq!(back.origin, entry.origin);
}

/// The view stays within `max` bytes and, when whole, is the body's JSON document.
fn json_view(text: &str, max: usize) {
    let Some(shown) = json_indented(text, max) else {
        return;
    };
    assert!(
        shown.text.len() <= max,
        "the JSON view wrote {} bytes for a cap of {max}",
        shown.text.len()
    );
    if !shown.cut {
        // Every token kept as written: the same text once the whitespace between
        // tokens is gone (a number beyond f64 included, which serde_json's `Value`
        // cannot hold).
        assert!(
            serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok(),
            "a JSON view of a body that is not JSON"
        );
        assert_eq!(
            without_whitespace(&shown.text),
            without_whitespace(text),
            "the whole JSON view is another document than the body"
        );
    }
}

/// JSON text without the whitespace between its tokens (strings kept as they are).
fn without_whitespace(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}
