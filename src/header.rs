//! One request header as received: what ingest reads, the filter language matches,
//! the store keeps and the forwarder passes on. A leaf, so that each of those rooms
//! may name it without importing another.

/// One request header as received. Values are bytes: header values need not be UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub name: String,
    pub value: Vec<u8>,
}
