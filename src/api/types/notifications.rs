//! The shapes of `/api/notifications` (webhook subscriptions and their delivery log) and of
//! `GET /api/projects/{projectId}/usage` (defined by `usage`, re-exported here).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::usage::{
    AppUsage, CertificateExpiry, DurationHistogram, HistogramBucket, ProjectUsage,
};

/// `POST /api/notifications`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateNotification {
    /// Where events are posted: an `http://` or `https://` URL.
    #[schemars(regex(pattern = NOTIFICATION_URL_PATTERN), length(max = 2048))]
    pub url: String,
    /// Any of `deployment.started`, `deployment.succeeded`, `deployment.failed`,
    /// `deployment.canceled`, `app.crashed`, `certificate.failed`, `domain.active`.
    #[schemars(schema_with = "event_names_schema")]
    pub events: Vec<String>,
    /// `json` (the default; signed) or `slack`.
    #[serde(default)]
    #[schemars(schema_with = "format_schema")]
    pub format: Option<String>,
}

/// A safe subset of the URLs `notifications::validate_url` accepts (what `http::Uri` parses,
/// with an http or https scheme and a host): a plain host name, an optional port below 10000
/// and a path and query of RFC 3986's unreserved and sub-delimiter characters. An exact pattern
/// of `http::Uri`'s grammar would be unreadable; every URL this one allows is accepted.
pub const NOTIFICATION_URL_PATTERN: &str = r"^https?://[A-Za-z0-9][A-Za-z0-9.-]*(:[1-9][0-9]{0,3})?(/[A-Za-z0-9._~!$&'()*+,;=:@/-]*)?(\?[A-Za-z0-9._~!$&'()*+,;=:@/?-]*)?$";

/// `events`: 1 or more of the event names `api::notifications::create` knows.
fn event_names_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<&str> = crate::notifications::EventKind::ALL
        .iter()
        .map(|kind| kind.as_str())
        .collect();
    schemars::json_schema!({
        "type": "array",
        "minItems": 1,
        "items": {"type": "string", "enum": names}
    })
}

/// `format`: `json`, `slack` or null (the default, `json`).
fn format_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"enum": ["json", "slack", null]})
}

/// A subscription as listed (never its secret).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub format: String,
    pub created_at: String,
    /// Deliveries dropped since the subscription was made because its queue was full
    /// (`[notifications] queue_per_subscription`, the oldest go first).
    pub dropped: u64,
}

/// A new subscription: `secret` (the HMAC key of `X-Slipway-Signature`) is shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedNotification {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub format: String,
    pub created_at: String,
    pub secret: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct NotificationList {
    pub notifications: Vec<Notification>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct NotificationDeleted {
    pub id: String,
    pub deleted: bool,
}

/// One delivery attempt.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    pub event: String,
    pub at: String,
    /// The receiver's HTTP status; `null` when it could not be reached.
    pub status: Option<u16>,
    /// Why the attempt failed; `null` on a 2xx.
    pub error: Option<String>,
    /// 1 for the first try of this delivery.
    pub attempt: u32,
    /// The same for every attempt of one event's delivery (`X-Slipway-Delivery`).
    pub delivery_id: String,
}

/// `GET /api/notifications/{notificationId}/deliveries`: the last 100 attempts, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryList {
    pub notification_id: String,
    /// Deliveries waiting (due now or retrying later).
    pub queued: u64,
    /// Deliveries dropped from a full queue, as in the subscription.
    pub dropped: u64,
    pub deliveries: Vec<Delivery>,
}

impl From<&crate::store::notifications::NotificationRecord> for Notification {
    fn from(record: &crate::store::notifications::NotificationRecord) -> Notification {
        Notification {
            id: record.id.clone(),
            url: record.url.clone(),
            events: record.events.clone(),
            format: record.format.clone(),
            created_at: crate::ids::rfc3339(record.created_ms),
            dropped: record.dropped,
        }
    }
}

impl From<&crate::store::notifications::DeliveryAttempt> for Delivery {
    fn from(attempt: &crate::store::notifications::DeliveryAttempt) -> Delivery {
        Delivery {
            event: attempt.event.clone(),
            at: crate::ids::rfc3339(attempt.at_ms),
            status: attempt.status,
            error: attempt.error.clone(),
            attempt: attempt.attempt,
            delivery_id: attempt.delivery_id.clone(),
        }
    }
}
