//! What went wrong with a delivery attempt, as one typed kind for every destination:
//! the HTTP status a destination answered, a connection that could not be made or
//! broke, a timeout, a broker that refused the credentials or has no such stream,
//! a message too large, the route's transform, a pull consumer's lease or nack, an
//! erasure.
//!
//! The kind is decided where the failure happens (a sender classifies its own
//! errors, the transform its own) and stored with each attempt and as a delivery's
//! last failure; dead-letter groups, the `result` label of the attempt metrics, the
//! console and the admin API read it. Nothing derives a kind from an error's text:
//! the text (`detail`) is for people.
//!
//! Each kind has one canonical name ([`Failure::name`]), the one the store keeps
//! and the API shows: `HTTP 422`, `timeout`, `connect`, `tls`, `io`,
//! `auth-refused`, `not-found`, `too-large`, `transform: runtime`,
//! `lease-expired`, `nacked`, `erased`, `cancelled`. A dead-letter group is named
//! by it; [`Failure::of_group`] also takes the names groups had before kinds were
//! stored (`connect: Connection refused (os error 111)` names the `connect`
//! group), so that an operator's saved command keeps working.

use std::fmt;
use std::str::FromStr;

/// The kind of one failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Failure {
    /// The destination answered with this (non-2xx) HTTP status.
    Status(u16),
    /// No answer within the route's timeout.
    Timeout,
    /// No connection: refused, no route, DNS.
    Connect,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// The connection broke during the exchange, or the answer was malformed.
    Io,
    /// The destination refused the credentials (a broker's authentication or
    /// permission error).
    AuthRefused,
    /// The destination has nothing to take it: no stream, an unroutable message,
    /// a missing exchange.
    NotFound,
    /// The destination refuses a message this large.
    TooLarge,
    /// The route's transform failed; nothing was sent.
    Transform(TransformFailure),
    /// A pull consumer took the delivery and did not acknowledge it within its lease.
    LeaseExpired,
    /// A pull consumer gave the delivery back (a negative acknowledgement).
    Nacked,
    /// The entry's body was erased on request: there is nothing left to send.
    Erased,
    /// An operator discarded the entry while it was being sent.
    Cancelled,
}

/// How a route's transform failed (the kinds that fail a delivery for good).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransformFailure {
    Timeout,
    Runtime,
    NotJson,
    TooLarge,
    BadOutput,
    Crashed,
}

impl TransformFailure {
    pub const ALL: [TransformFailure; 6] = [
        TransformFailure::Timeout,
        TransformFailure::Runtime,
        TransformFailure::NotJson,
        TransformFailure::TooLarge,
        TransformFailure::BadOutput,
        TransformFailure::Crashed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TransformFailure::Timeout => "timeout",
            TransformFailure::Runtime => "runtime",
            TransformFailure::NotJson => "not-json",
            TransformFailure::TooLarge => "too-large",
            TransformFailure::BadOutput => "bad-output",
            TransformFailure::Crashed => "crashed",
        }
    }
}

/// The kinds named by a word (every kind but a status and a transform's).
const WORDS: [(Failure, &str); 11] = [
    (Failure::Timeout, "timeout"),
    (Failure::Connect, "connect"),
    (Failure::Tls, "tls"),
    (Failure::Io, "io"),
    (Failure::AuthRefused, "auth-refused"),
    (Failure::NotFound, "not-found"),
    (Failure::TooLarge, "too-large"),
    (Failure::LeaseExpired, "lease-expired"),
    (Failure::Nacked, "nacked"),
    (Failure::Erased, "erased"),
    (Failure::Cancelled, "cancelled"),
];

impl Failure {
    /// The kind's canonical name (see the module's documentation).
    pub fn name(&self) -> String {
        match self {
            Failure::Status(code) => format!("HTTP {code}"),
            Failure::Transform(t) => format!("transform: {}", t.name()),
            word => WORDS
                .iter()
                .find(|(f, _)| f == word)
                .map_or("unknown", |(_, n)| n)
                .to_string(),
        }
    }

    /// The kind a dead-letter group name selects: a canonical name, or a name
    /// groups had before kinds were stored (`connect: <detail>`, `io: <detail>`,
    /// `timeout after <duration>`). `None` for anything else.
    pub fn of_group(group: &str) -> Option<Failure> {
        let group = group.trim();
        if let Ok(f) = group.parse() {
            return Some(f);
        }
        // (Matched on the trimmed name: `connect: ` with nothing after is `connect:`.)
        for (prefix, kind) in [
            ("connect:", Failure::Connect),
            ("io:", Failure::Io),
            ("timeout after", Failure::Timeout),
        ] {
            if group.starts_with(prefix) {
                return Some(kind);
            }
        }
        None
    }

    /// Whether the attempt reached a destination that answered (an HTTP status).
    pub fn status(&self) -> Option<u16> {
        match self {
            Failure::Status(code) => Some(*code),
            _ => None,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The name of the group of failures of kind `kind`: its canonical name, or
/// [`UNKNOWN`] when no kind was recorded (dead-letter groups, alerts).
pub fn group_name(kind: Option<Failure>) -> String {
    kind.map_or_else(|| UNKNOWN.to_string(), |k| k.name())
}

/// The group of failures with no kind recorded.
pub const UNKNOWN: &str = "unknown";

/// A name that is no failure kind's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a failure kind")]
pub struct NotAKind;

impl FromStr for Failure {
    type Err = NotAKind;

    /// A canonical name, exactly.
    fn from_str(s: &str) -> Result<Failure, NotAKind> {
        if let Some(code) = s.strip_prefix("HTTP ") {
            return match code.parse::<u16>() {
                Ok(c) if code.len() == 3 && (100..=999).contains(&c) => Ok(Failure::Status(c)),
                _ => Err(NotAKind),
            };
        }
        if let Some(kind) = s.strip_prefix("transform: ") {
            return TransformFailure::ALL
                .into_iter()
                .find(|t| t.name() == kind)
                .map(Failure::Transform)
                .ok_or(NotAKind);
        }
        WORDS
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(f, _)| *f)
            .ok_or(NotAKind)
    }
}

impl serde::Serialize for Failure {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Failure {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Failure, D::Error> {
        let s: std::borrow::Cow<'de, str> = serde::Deserialize::deserialize(d)?;
        s.parse()
            .map_err(|_| serde::de::Error::custom("not a failure kind"))
    }
}

/// Deserialize an optional kind, an unknown name as `None` (a kind a newer release
/// recorded reads as no kind, not as a corrupt attempt).
pub fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Failure>, D::Error> {
    let s: Option<std::borrow::Cow<'de, str>> = serde::Deserialize::deserialize(d)?;
    Ok(stored(s.as_deref()))
}

/// A kind read back from the store: `None` (no kind recorded, e.g. an attempt
/// recorded before kinds were) for a value that is not a canonical name.
pub fn stored(value: Option<&str>) -> Option<Failure> {
    value.and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<Failure> {
        let mut all: Vec<Failure> = WORDS.iter().map(|(f, _)| *f).collect();
        all.extend(TransformFailure::ALL.map(Failure::Transform));
        all.extend([
            Failure::Status(100),
            Failure::Status(422),
            Failure::Status(999),
        ]);
        all
    }

    #[test]
    fn every_kind_reads_back_from_its_name() {
        for f in every_kind() {
            assert_eq!(f.name().parse::<Failure>(), Ok(f), "{f}");
            assert_eq!(Failure::of_group(&f.name()), Some(f));
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(serde_json::from_str::<Failure>(&json).unwrap(), f);
            let mut de = serde_json::Deserializer::from_str(&json);
            assert_eq!(lenient(&mut de).unwrap(), Some(f));
        }
        let names: std::collections::HashSet<String> =
            every_kind().iter().map(Failure::name).collect();
        assert_eq!(names.len(), every_kind().len(), "two kinds share a name");
    }

    #[test]
    fn names_that_are_no_kind_are_refused() {
        for bad in [
            "",
            "HTTP",
            "HTTP 42",
            "HTTP 4220",
            "HTTP 099",
            "HTTP 1000",
            "HTTP +22",
            "transform: ",
            "transform: late",
            "Timeout",
            "unknown",
            "connect: refused",
        ] {
            assert_eq!(bad.parse::<Failure>(), Err(NotAKind), "{bad:?}");
        }
        assert_eq!(stored(Some("garbage")), None);
        let mut de = serde_json::Deserializer::from_str("\"from the future\"");
        assert_eq!(lenient(&mut de).unwrap(), None);
        assert_eq!(stored(None), None);
    }

    #[test]
    fn the_group_names_of_before_still_select_their_kind() {
        assert_eq!(
            Failure::of_group("connect: Connection refused (os error 111)"),
            Some(Failure::Connect)
        );
        assert_eq!(Failure::of_group("io: connection reset"), Some(Failure::Io));
        assert_eq!(
            Failure::of_group("timeout after 10s"),
            Some(Failure::Timeout)
        );
        assert_eq!(Failure::of_group(" HTTP 422 "), Some(Failure::Status(422)));
        assert_eq!(
            Failure::of_group("transform: runtime"),
            Some(Failure::Transform(TransformFailure::Runtime))
        );
        assert_eq!(Failure::of_group("unknown"), None);
        assert_eq!(Failure::of_group("something else"), None);
    }
}
