//! The metric label vocabularies: every label value the code can emit is a variant of
//! an enum declared with [`label_values!`], so the enum's `ALL` lists them for
//! registration at start and `label()` is the one spelling of each.

/// An enum of metric label values, with `ALL` (every variant, in declaration order)
/// and `label()`. Declared through this macro, a variant cannot lack its label nor be
/// left out of `ALL`, so [`register_families`] registers every value the code emits.
/// Attributes (docs, derives, `#[error]`) pass through to the enum and its variants.
macro_rules! label_values {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $label:literal, )+
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The metric label value.
            pub fn label(&self) -> &'static str {
                match self {
                    $( $name::$variant => $label, )+
                }
            }
        }
    };
}
pub(crate) use label_values;

label_values! {
    /// How a request to either listener ended: on the ingest listener, label `outcome`
    /// of `hookgate_ingest_requests_total`; the admin API's outcomes are not counted.
    /// One vocabulary for both, so that an error has one label (`ApiError::outcome`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RequestOutcome {
        Accepted => "accepted",
        Duplicate => "duplicate",
        /// A verified handshake (Slack's `url_verification`) was answered.
        Handshake => "handshake",
        Unverified => "unverified",
        TooLarge => "too_large",
        BodyTimeout => "body_timeout",
        BodyRead => "body_read",
        /// The body budget was spent (503).
        Busy => "busy",
        StoreError => "store_error",
        /// Counted under the source `_unknown`.
        UnknownSource => "unknown_source",
        /// No such route (never counted: no source to count under), or no such entry
        /// or source in the admin API.
        NotFound => "not_found",
        /// The routing fallback for a known path: answered, never counted.
        MethodNotAllowed => "method_not_allowed",
        // The admin API's own refusals (never counted).
        /// A malformed parameter or body.
        BadRequest => "bad_request",
        /// A missing or wrong bearer token.
        Unauthorized => "unauthorized",
        /// Too many wrong tokens from one client: answered 429 unchecked.
        Throttled => "throttled",
        /// The entry's status does not allow the replay or discard.
        Conflict => "conflict",
        /// No admin token is set and a browser may have sent it for a web page.
        Refused => "refused",
        /// A request body that is not JSON.
        NotJson => "not_json",
    }
}

impl RequestOutcome {
    /// Whether this outcome is counted under a configured source's name (the others
    /// are counted under `_unknown`, or not at all).
    pub fn counted_per_source(self) -> bool {
        matches!(
            self,
            RequestOutcome::Accepted
                | RequestOutcome::Duplicate
                | RequestOutcome::Handshake
                | RequestOutcome::Unverified
                | RequestOutcome::TooLarge
                | RequestOutcome::BodyTimeout
                | RequestOutcome::BodyRead
                | RequestOutcome::Busy
                | RequestOutcome::StoreError
        )
    }
}

/// The `source` label of ingest requests to a name that is not configured.
pub const UNKNOWN_SOURCE: &str = "_unknown";

label_values! {
    /// What one delivery attempt got: label `result` of `hookgate_delivery_attempts_total`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum DeliveryResult {
        Status2xx => "2xx",
        Status3xx => "3xx",
        Status4xx => "4xx",
        Status5xx => "5xx",
        /// A status outside 200–599.
        OtherStatus => "other",
        Timeout => "timeout",
        Connect => "connect",
        Io => "io",
    }
}

label_values! {
    /// What became of an entry after an attempt: label `outcome` of
    /// `hookgate_deliveries_total`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum DeliveryOutcome {
        Delivered => "delivered",
        Retry => "retry",
        Dead => "dead",
    }
}

label_values! {
    /// Label `result` of `hookgate_alerts_sent_total`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum AlertResult {
        Sent => "sent",
        Failed => "failed",
    }
}
