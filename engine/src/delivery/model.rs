//! The delivery engine's vocabulary: id newtypes, enums stored as TEXT, and the
//! DTOs the HTTP API and the UI exchange with the engine (`XIn` for input,
//! plain names for what the engine hands back).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;

macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A fresh id: the prefix and a ULID (sortable by creation time).
            pub fn generate() -> Self {
                $name(format!("{}_{}", $prefix, ulid::Ulid::new()))
            }

            /// Accept an id from outside (URL path, JSON): it must carry the prefix.
            pub fn parse(s: &str) -> Result<Self, ModelError> {
                let ok = s.len() <= 64
                    && s.strip_prefix(concat!($prefix, "_")).is_some_and(|rest| {
                        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                    });
                if ok { Ok($name(s.to_owned())) } else { Err(ModelError::BadId { kind: stringify!($name), value: s.to_owned() }) }
            }

            /// Trusted text, as read back from the database.
            pub(crate) fn from_db(s: String) -> Self {
                $name(s)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

prefixed_id!(
    /// A merchant: `mer_…`.
    MerchantId, "mer"
);
prefixed_id!(
    /// An accepted event: `evt_…`.
    EventId, "evt"
);
prefixed_id!(
    /// A delivery, sent as `X-Webhook-Id`: `msg_…`. Stable across attempts and redeliveries.
    DeliveryId, "msg"
);
prefixed_id!(
    /// One attempt: `att_…`.
    AttemptId, "att"
);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelError {
    #[error("{value:?} is not a valid {kind}")]
    BadId { kind: &'static str, value: String },
    #[error("{value:?} is not a valid {kind}")]
    BadValue { kind: &'static str, value: String },
    #[error("{field}: {message}")]
    InvalidField { field: &'static str, message: &'static str },
}

macro_rules! text_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name { $(#[serde(rename = $text)] $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl FromStr for $name {
            type Err = ModelError;
            fn from_str(s: &str) -> Result<Self, ModelError> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(ModelError::BadValue { kind: stringify!($name), value: s.to_owned() }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

text_enum!(
    /// Where a delivery is in its life.
    DeliveryStatus { Pending => "PENDING", Delivering => "DELIVERING", Delivered => "DELIVERED", Failed => "FAILED" }
);
text_enum!(
    /// Which retry ladder scheduled the next attempt (or the last one).
    Ladder { Fast => "fast", Slow => "slow" }
);
text_enum!(
    /// How a merchant's requests are signed.
    SigningScheme { Sluice => "sluice", StandardWebhooks => "standard_webhooks" }
);
text_enum!(
    /// The merchant breaker's state.
    BreakerStatus { Closed => "closed", Open => "open", Probing => "probing" }
);
text_enum!(
    /// What one attempt came to.
    AttemptOutcome {
        Success => "success",
        ClientError => "client_error",
        RateLimited => "rate_limited",
        ServerError => "server_error",
        Network => "network",
        Timeout => "timeout",
    }
);
text_enum!(
    /// Why a delivery ended FAILED.
    FailedReason {
        FastLadderExhausted => "fast_ladder_exhausted",
        SlowLadderExhausted => "slow_ladder_exhausted",
        NonMoneyClientError => "non_money_client_error",
        SlowLadderCeiling => "slow_ladder_48h_ceiling",
        AgeCeiling => "age_30d_ceiling",
    }
);

impl AttemptOutcome {
    /// Classify an HTTP status. Only 2xx is success; 3xx counts as 4xx
    /// because redirects are not followed; 429 is a delivery failure, not a
    /// client error; anything else (1xx, 5xx, nonsense) is a server error.
    pub fn from_status(code: u16) -> AttemptOutcome {
        match code {
            200..=299 => AttemptOutcome::Success,
            429 => AttemptOutcome::RateLimited,
            300..=499 => AttemptOutcome::ClientError,
            _ => AttemptOutcome::ServerError,
        }
    }

    /// Counts as a failure for the merchant breaker: the endpoint is unreachable
    /// or broken. A 4xx (429 included) proves it is reachable.
    pub fn is_breaker_failure(self) -> bool {
        matches!(self, AttemptOutcome::ServerError | AttemptOutcome::Network | AttemptOutcome::Timeout)
    }
}

/// A new merchant, as given by an admin.
#[derive(Clone, Serialize, Deserialize)]
pub struct MerchantIn {
    pub name: String,
    pub url: String,
    pub scheme: SigningScheme,
    /// `whsec_<base64>` for Standard Webhooks; any non-empty text for the Sluice scheme.
    /// `None`: one is generated.
    pub secret: Option<String>,
}

impl fmt::Debug for MerchantIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MerchantIn").field("name", &self.name).field("url", &self.url).field("scheme", &self.scheme).finish_non_exhaustive()
    }
}

/// A merchant as stored. Secrets are redacted in `Debug` and skipped in JSON.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct Merchant {
    pub id: MerchantId,
    pub name: String,
    pub url: String,
    pub scheme: SigningScheme,
    #[serde(skip)]
    pub secret: String,
    #[serde(skip)]
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl fmt::Debug for Merchant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Merchant")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("url", &self.url)
            .field("scheme", &self.scheme)
            .field("secret", &"<redacted>")
            .field("rotating", &self.previous_secret.is_some())
            .finish()
    }
}

impl Merchant {
    /// The secrets that sign a request sent at `now`: the current one first,
    /// then the previous one while its rotation overlap lasts.
    pub fn signing_secrets(&self, now: Timestamp) -> Vec<&str> {
        let mut out = vec![self.secret.as_str()];
        if let (Some(prev), Some(until)) = (&self.previous_secret, self.previous_secret_expires_at) {
            if now < until {
                out.push(prev.as_str());
            }
        }
        out
    }
}

/// An event handed over for delivery (`POST /api/v1/events`).
///
/// Routing: the event names the one merchant it is for. The status used for
/// money classification is `status`, or else the payload's top-level
/// `"status"` string.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventIn {
    pub merchant_id: MerchantId,
    pub event_type: String,
    #[serde(default)]
    pub status: Option<String>,
    pub payload: serde_json::Value,
    pub idempotency_key: String,
}

impl EventIn {
    /// Intake's checks, every invalid field at once as (field, what is wrong):
    /// a type and an idempotency key of sane length, and a payload that is a
    /// JSON object.
    pub fn invalid_fields(&self) -> Vec<(&'static str, &'static str)> {
        let mut invalid = Vec::new();
        if self.event_type.is_empty() || self.event_type.len() > 128 || self.event_type.chars().any(char::is_whitespace) {
            invalid.push(("event_type", "must be 1–128 characters without whitespace"));
        }
        if self.idempotency_key.is_empty() || self.idempotency_key.len() > 255 {
            invalid.push(("idempotency_key", "must be 1–255 bytes"));
        }
        if !self.payload.is_object() {
            invalid.push(("payload", "must be a JSON object"));
        }
        invalid
    }

    /// The first of [`EventIn::invalid_fields`], as an error.
    pub fn validate(&self) -> Result<(), ModelError> {
        match self.invalid_fields().first() {
            Some(&(field, message)) => Err(ModelError::InvalidField { field, message }),
            None => Ok(()),
        }
    }
}

/// What intake did with an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Accepted {
    pub event_id: EventId,
    pub delivery_ids: Vec<DeliveryId>,
    /// True when the idempotency key was seen before: nothing new was stored.
    pub duplicate: bool,
}

/// A delivery row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delivery {
    pub id: DeliveryId,
    pub event_id: EventId,
    pub merchant_id: MerchantId,
    pub event_type: String,
    pub is_money: bool,
    pub status: DeliveryStatus,
    pub ladder: Ladder,
    pub fast_attempts: u32,
    pub slow_steps: u32,
    pub slow_started_at: Option<Timestamp>,
    /// Start of the current delivery cycle: creation, or the last manual redelivery.
    /// The 30-day ceiling counts from here.
    pub cycle_started_at: Timestamp,
    pub next_attempt_at: Timestamp,
    pub lease_owner: Option<String>,
    pub lease_until: Option<Timestamp>,
    pub deferred: bool,
    pub deferrals: u32,
    pub last_deferred_at: Option<Timestamp>,
    pub last_status_code: Option<u16>,
    pub last_error: Option<String>,
    pub failed_reason: Option<FailedReason>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub finished_at: Option<Timestamp>,
}

/// One attempt row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attempt {
    pub id: AttemptId,
    pub delivery_id: DeliveryId,
    pub merchant_id: MerchantId,
    pub at: Timestamp,
    /// The ladder that scheduled this attempt.
    pub ladder: Ladder,
    pub outcome: AttemptOutcome,
    pub status_code: Option<u16>,
    pub latency_ms: i64,
    pub error: Option<String>,
    /// The start of the answer's body as text: at most
    /// [`RESPONSE_SNIPPET_BYTES`], lossy UTF-8, cut on a character boundary,
    /// credentials redacted.
    pub response_body: Option<String>,
    /// `response_body` is the start of a longer body.
    pub response_truncated: bool,
    /// The request's headers as sent, signatures included (they are per
    /// message; the secret never is). `None` when none was sent (refused
    /// before sending) or the attempt predates their recording.
    pub request_headers: Option<Headers>,
    /// The answer's headers, credentials redacted; `None` without an answer.
    pub response_headers: Option<Headers>,
    pub probe: bool,
}

/// HTTP headers as stored with an attempt: lower-case name → value (a
/// repeated header's values joined by `, `), one JSON object in the database.
pub type Headers = std::collections::BTreeMap<String, String>;

/// How much of an answer's body an attempt keeps, in bytes.
pub const RESPONSE_SNIPPET_BYTES: usize = 4096;

/// The UI's delivery filter. Every field narrows; `None` means any.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DeliveryFilter {
    pub status: Option<DeliveryStatus>,
    pub merchant_id: Option<MerchantId>,
    pub event_type: Option<String>,
    pub is_money: Option<bool>,
    pub ladder: Option<Ladder>,
    pub created_from: Option<Timestamp>,
    pub created_to: Option<Timestamp>,
}

/// Keyset cursor: the (created_at, id) of the last row of the previous page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    pub created_at: Timestamp,
    pub id: DeliveryId,
}

/// One page of deliveries, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryPage {
    pub items: Vec<Delivery>,
    /// Pass back as `after` to get the next page; `None` on the last page.
    pub next: Option<Cursor>,
}

/// Before/after of one mutation, for the audit log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change<T> {
    pub before: T,
    pub after: T,
}
