//! How an entry is written into its Redis hash and read back.
//!
//! The hash holds the packed record (field `record`: every field written once, in
//! one value), the route names (`routes`, comma-separated, in order), the entry's
//! derived `status`, its `origin` (how it came), and per route R the fields of its
//! delivery, prefixed `R:` (status, next attempt, attempts, lease, stream message,
//! retry budget, last error). Fields start absent and mean their default (a delivery
//! pending, due at the arrival, counters 0, `budget_start` the arrival, the entry
//! received), so an accept writes only what it must. The entry's summary (status, attempts, next attempt, last error) is
//! derived from its deliveries when read ([`Entry::summary`]).

use std::borrow::Cow;
use std::collections::HashMap;

use bytes::Bytes;

use crate::store::{
    Delivery, DeliveryOrder, Entry, ListedEntry, NewEntry, Origin, Status, StoreError,
    decode_headers, headers_json,
};

/// The hash field that holds the packed record.
pub(super) const RECORD_FIELD: &str = "record";

/// The hash field that holds the entry's route names, comma-separated, in order.
const ROUTES_FIELD: &str = "routes";

/// The hash field that holds the entry's origin; absent: received.
pub(super) const ORIGIN_FIELD: &str = "origin";

/// The `origin` field's value for `origin`: empty for [`Origin::Received`], which is
/// never written (the field's absence means it).
pub(super) fn origin_field(origin: Origin) -> &'static str {
    match origin {
        Origin::Received => "",
        other => other.as_str(),
    }
}

/// The origin an `origin` field holds (absent or empty: received).
fn read_origin(id: &str, value: Option<&[u8]>) -> Result<Origin, StoreError> {
    match value {
        None | Some(b"") => Ok(Origin::Received),
        Some(v) => std::str::from_utf8(v)
            .ok()
            .and_then(Origin::parse)
            .ok_or_else(|| StoreError::Corrupt {
                id: id.to_string(),
                problem: format!("unknown origin {:?}", String::from_utf8_lossy(v)),
            }),
    }
}

/// The `routes` field of a new entry (route names hold no comma: see
/// [`crate::store::valid_route_name`]).
pub(super) fn routes_field(routes: &[String]) -> String {
    routes.join(",")
}

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
pub(crate) fn pack_record(e: &NewEntry) -> Result<Vec<u8>, StoreError> {
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
pub(crate) fn entry_from_map(
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
    let deliveries = read_deliveries(id, map, record.received_at)?;
    let (status, attempts, next_attempt_at, last_error) = Entry::summary(&deliveries);
    Ok(Entry {
        origin: read_origin(id, map.get(ORIGIN_FIELD).map(Vec::as_slice))?,
        id: id.to_string(),
        source: record.source.into_owned(),
        event_id: non_empty(record.event_id),
        event_type: non_empty(record.event_type),
        dedupe_key: record.dedupe_key.into_owned(),
        received_at: record.received_at,
        status,
        attempts,
        next_attempt_at,
        last_error,
        deliveries,
        headers: decode_headers(id, record.headers.get())?,
        body: packed.slice(split + 1..),
    })
}

/// The deliveries of an entry hash, in the order of its `routes` field (none for a
/// filtered entry).
fn read_deliveries(
    id: &str,
    map: &HashMap<String, Vec<u8>>,
    received_at: i64,
) -> Result<Vec<Delivery>, StoreError> {
    let corrupt = |problem: String| StoreError::Corrupt {
        id: id.to_string(),
        problem,
    };
    let routes = field_str(map, ROUTES_FIELD)
        .ok_or_else(|| corrupt(format!("no route list (field {ROUTES_FIELD})")))?;
    let count = |v: Option<i64>| u32::try_from(v.unwrap_or(0)).unwrap_or(0);
    routes
        .split(',')
        .filter(|r| !r.is_empty())
        .map(|route| {
            let field = |name: &str| format!("{route}:{name}");
            let status = match field_str(map, &field("status")) {
                None => Status::Pending,
                Some(text) => match Status::parse(&text) {
                    None => {
                        return Err(corrupt(format!("route {route}: delivery status {text:?}")));
                    }
                    Some(s) => s,
                },
            };
            let next = int_field(id, map, &field("next"))?;
            Ok(Delivery {
                route: route.to_string(),
                status,
                attempts: count(int_field(id, map, &field("attempts"))?),
                next_attempt_at: match status {
                    Status::Pending => Some(next.unwrap_or(received_at)),
                    _ => None,
                },
                last_error: field_str(map, &field("last_error")).filter(|s| !s.is_empty()),
                last_failure: crate::failure::stored(
                    field_str(map, &field("last_failure")).as_deref(),
                ),
                budget_start: int_field(id, map, &field("budget_start"))?.unwrap_or(received_at),
                budget_attempts: count(int_field(id, map, &field("budget_attempts"))?),
                order: field_str(map, &field("okey")).map(|key| DeliveryOrder {
                    key,
                    block: map.get(&field("oblock")).is_some_and(|v| v == b"1"),
                }),
            })
        })
        .collect()
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
/// id, event type, received at, origin ('' when absent).
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
        origin,
    ]: [String; 8] = fields
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
        origin: read_origin(id, Some(origin.as_bytes()))?,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn hash(origin: Option<&[u8]>) -> HashMap<String, Vec<u8>> {
        let e = NewEntry {
            id: "0190a000-0000-7000-8000-000000000000".into(),
            source: "s".into(),
            event_id: Some("evt".into()),
            event_type: None,
            dedupe_key: "id:evt".into(),
            dedupe_ttl: Duration::from_secs(60),
            received_at: 1_700_000_000_000,
            headers: Vec::new(),
            body: Bytes::from_static(b"{}"),
            routes: vec!["default".into()],
            ordering: Vec::new(),
            index: Vec::new(),
            origin: Origin::Received,
        };
        let mut map = HashMap::from([
            (RECORD_FIELD.to_string(), pack_record(&e).unwrap()),
            (ROUTES_FIELD.to_string(), b"default".to_vec()),
        ]);
        if let Some(o) = origin {
            map.insert(ORIGIN_FIELD.to_string(), o.to_vec());
        }
        map
    }

    /// The accept writes no `origin` for a received entry: its absence reads as
    /// received; a recovered one reads as the field names it, in the entry and in
    /// its listed row; an origin this release does not know is a corrupt entry.
    #[test]
    fn an_origin_reads_back_from_its_field_and_its_absence_is_received() {
        let id = "0190a000-0000-7000-8000-000000000000";
        assert_eq!(origin_field(Origin::Received), "");
        let read = entry_from_map(id, hash(None)).unwrap();
        assert_eq!(read.origin, Origin::Received);
        for o in Origin::ALL {
            let field = origin_field(o);
            assert_eq!(field.is_empty(), !o.is_recovered());
            let read = entry_from_map(id, hash(Some(field.as_bytes()))).unwrap();
            assert_eq!(read.origin, o);
            let mut row: Vec<String> = ["pending", "0", "", "", "evt", "", "1700000000000"]
                .map(String::from)
                .to_vec();
            row.push(field.to_string());
            assert_eq!(listed_from_fields(id, "s", row).unwrap().origin, o);
        }
        assert!(matches!(
            entry_from_map(id, hash(Some(b"forwarded"))),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
