//! How an entry is written into its Redis hash and read back.
//!
//! The hash holds the packed record (field `record`: every field written once, in
//! one value) and the fields that change as the entry is delivered (status, next
//! attempt, attempts, lease, …). Counters start absent (= 0) and `budget_start`
//! absent (= `received_at`), so an accept writes only what it must.

use std::borrow::Cow;
use std::collections::HashMap;

use bytes::Bytes;

use crate::store::{
    Entry, ListedEntry, NewEntry, Status, StoreError, decode_headers, headers_json,
};

/// The hash field that holds the packed record.
pub(super) const RECORD_FIELD: &str = "record";

/// The fields of an entry that never change after its accept, as written.
#[derive(serde::Serialize)]
struct WriteOnceFields<'a> {
    source: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_type: Option<&'a str>,
    dedupe_key: &'a str,
    received_at: i64,
    headers: serde_json::Value,
}

/// The same, as read back (borrowing from the stored value).
#[derive(serde::Deserialize)]
struct StoredWriteOnceFields<'a> {
    #[serde(borrow)]
    source: Cow<'a, str>,
    #[serde(borrow, default)]
    event_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    event_type: Option<Cow<'a, str>>,
    #[serde(borrow)]
    dedupe_key: Cow<'a, str>,
    received_at: i64,
    #[serde(borrow)]
    headers: &'a serde_json::value::RawValue,
}

/// One value for everything written once (hash field `record`): a compact JSON line
/// with the metadata and headers (compact JSON never holds a raw newline), a newline,
/// then the body's raw bytes. One hash field instead of seven costs Redis, and its
/// AOF, measurably less per webhook.
pub(super) fn pack_record(e: &NewEntry) -> Result<Vec<u8>, StoreError> {
    let fields = WriteOnceFields {
        source: &e.source,
        event_id: e.event_id.as_deref(),
        event_type: e.event_type.as_deref(),
        dedupe_key: &e.dedupe_key,
        received_at: e.received_at,
        headers: headers_json(&e.headers),
    };
    let mut out = Vec::with_capacity(e.body.len() + 512);
    serde_json::to_writer(&mut out, &fields).map_err(|source| StoreError::Encode {
        what: "the entry",
        source,
    })?;
    out.push(b'\n');
    out.extend_from_slice(&e.body);
    Ok(out)
}

/// An entry hash as stored: the packed record and the fields that change.
pub(super) fn entry_from_map(
    id: &str,
    mut map: HashMap<String, Vec<u8>>,
) -> Result<Entry, StoreError> {
    match map.remove(RECORD_FIELD) {
        Some(packed) => entry_from_packed(id, packed, &map),
        None => Err(StoreError::Corrupt {
            id: id.to_string(),
            problem: format!("no packed record (field {RECORD_FIELD})"),
        }),
    }
}

/// An entry whose write-once fields are packed in `packed`; `map` holds the rest.
fn entry_from_packed(
    id: &str,
    packed: Vec<u8>,
    map: &HashMap<String, Vec<u8>>,
) -> Result<Entry, StoreError> {
    let corrupt = |problem: &str| StoreError::Corrupt {
        id: id.to_string(),
        problem: problem.to_string(),
    };
    let packed = Bytes::from(packed);
    let split = packed
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| corrupt("the packed record has no metadata line"))?;
    let record: StoredWriteOnceFields<'_> = serde_json::from_slice(&packed[..split])
        .map_err(|_| corrupt("the packed record's metadata is not valid JSON"))?;
    let non_empty = |s: Option<Cow<'_, str>>| s.map(|s| s.into_owned()).filter(|s| !s.is_empty());
    let changing = MutableFields::read(id, map)?;
    Ok(Entry {
        id: id.to_string(),
        source: record.source.into_owned(),
        event_id: non_empty(record.event_id),
        event_type: non_empty(record.event_type),
        dedupe_key: record.dedupe_key.into_owned(),
        received_at: record.received_at,
        status: changing.status,
        attempts: changing.attempts,
        next_attempt_at: changing.next_attempt_at,
        last_error: changing.last_error,
        budget_start: changing.budget_start.unwrap_or(record.received_at),
        budget_attempts: changing.budget_attempts,
        headers: decode_headers(id, record.headers.get())?,
        body: packed.slice(split + 1..),
    })
}

/// The fields of an entry hash that change after its accept.
struct MutableFields {
    status: Status,
    attempts: u32,
    next_attempt_at: Option<i64>,
    last_error: Option<String>,
    budget_start: Option<i64>,
    budget_attempts: u32,
}

impl MutableFields {
    fn read(id: &str, map: &HashMap<String, Vec<u8>>) -> Result<MutableFields, StoreError> {
        let corrupt = |problem: String| StoreError::Corrupt {
            id: id.to_string(),
            problem,
        };
        let int = |name: &str| int_field(id, map, name);
        let status_text = field_str(map, "status").unwrap_or_default();
        let status = Status::parse(&status_text)
            .ok_or_else(|| corrupt(format!("unknown status {status_text:?}")))?;
        Ok(MutableFields {
            status,
            attempts: u32::try_from(int("attempts")?.unwrap_or(0)).unwrap_or(0),
            next_attempt_at: int("next_attempt_at")?,
            last_error: field_str(map, "last_error").filter(|s| !s.is_empty()),
            budget_start: int("budget_start")?,
            budget_attempts: u32::try_from(int("budget_attempts")?.unwrap_or(0)).unwrap_or(0),
        })
    }
}

fn field_str(map: &HashMap<String, Vec<u8>>, name: &str) -> Option<String> {
    map.get(name)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// An integer hash field; absent or empty is `None`.
fn int_field(
    id: &str,
    map: &HashMap<String, Vec<u8>>,
    name: &str,
) -> Result<Option<i64>, StoreError> {
    match field_str(map, name) {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| StoreError::Corrupt {
            id: id.to_string(),
            problem: format!("{name} is not an integer"),
        }),
    }
}

/// A row of the listing script: status, attempts, next attempt, last error, event
/// id, event type, received at ('' when absent).
pub(super) fn listed_from_fields(
    id: &str,
    source: &str,
    fields: Vec<String>,
) -> Result<ListedEntry, StoreError> {
    let corrupt = |problem: String| StoreError::Corrupt {
        id: id.to_string(),
        problem,
    };
    let [
        status,
        attempts,
        next_at,
        last_error,
        event_id,
        event_type,
        received_at,
    ]: [String; 7] = fields
        .try_into()
        .map_err(|f: Vec<String>| corrupt(format!("listing row of {} fields", f.len())))?;
    let int = |name: &str, v: &str| -> Result<Option<i64>, StoreError> {
        if v.is_empty() {
            return Ok(None);
        }
        v.parse()
            .map(Some)
            .map_err(|_| corrupt(format!("{name} is not an integer")))
    };
    let non_empty = |s: String| Some(s).filter(|s| !s.is_empty());
    Ok(ListedEntry {
        id: id.to_string(),
        source: source.to_string(),
        status: Status::parse(&status)
            .ok_or_else(|| corrupt(format!("unknown status {status:?}")))?,
        attempts: u32::try_from(int("attempts", &attempts)?.unwrap_or(0)).unwrap_or(0),
        next_attempt_at: int("next_attempt_at", &next_at)?,
        last_error: non_empty(last_error),
        event_id: non_empty(event_id),
        event_type: non_empty(event_type),
        received_at: int("received_at", &received_at)?
            .ok_or_else(|| corrupt("no received_at".into()))?,
    })
}
