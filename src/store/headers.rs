//! How request headers are stored: as JSON, `[[name, text]]`, or `[name, null,
//! base64]` for a value that is not UTF-8, so that no byte of a header is lost.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::{Header, StoreError};

/// The stored text of `headers` (one JSON line).
pub(crate) fn encode_headers(headers: &[Header]) -> String {
    headers_json(headers).to_string()
}

/// Headers as a JSON array: `[name, value]`, or `[name, null, base64]` for a value
/// that is not UTF-8.
pub(crate) fn headers_json(headers: &[Header]) -> serde_json::Value {
    let arr: Vec<serde_json::Value> = headers
        .iter()
        .map(|h| match std::str::from_utf8(&h.value) {
            Ok(text) => serde_json::json!([h.name, text]),
            Err(_) => serde_json::json!([h.name, null, B64.encode(&h.value)]),
        })
        .collect();
    serde_json::Value::Array(arr)
}

/// The headers of entry `id` back from their stored text; `Corrupt` when the text is
/// not what [`encode_headers`] writes.
pub(crate) fn decode_headers(id: &str, text: &str) -> Result<Vec<Header>, StoreError> {
    let corrupt = |problem: &str| StoreError::Corrupt {
        id: id.to_string(),
        problem: problem.to_string(),
    };
    let v: Vec<serde_json::Value> =
        serde_json::from_str(text).map_err(|_| corrupt("headers are not a JSON array"))?;
    v.into_iter()
        .map(|item| {
            let name = item
                .get(0)
                .and_then(|n| n.as_str())
                .ok_or_else(|| corrupt("header without a name"))?
                .to_string();
            let value = match (item.get(1), item.get(2)) {
                (Some(serde_json::Value::String(s)), _) => s.as_bytes().to_vec(),
                (Some(serde_json::Value::Null), Some(serde_json::Value::String(b))) => B64
                    .decode(b)
                    .map_err(|_| corrupt("header value is not base64"))?,
                _ => return Err(corrupt("header without a value")),
            };
            Ok(Header { name, value })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_including_non_utf8() {
        let h = vec![
            Header {
                name: "content-type".into(),
                value: b"application/json".to_vec(),
            },
            Header {
                name: "x-odd".into(),
                value: vec![0xff, 0xfe, b'a'],
            },
        ];
        let text = encode_headers(&h);
        assert_eq!(decode_headers("e", &text).unwrap(), h);
        assert!(decode_headers("e", "{}").is_err());
    }
}
