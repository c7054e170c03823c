//! The shapes of the usage history (issue 37): `GET /api/projects/{projectId}/usage/history`
//! (one project's minutes or hours) and `GET /api/usage/history` (the machine's, for the
//! operator), and their query.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An RFC 3339 time as the history's query takes it: seconds, an optional fraction, `Z` or an
/// offset. A day past its month's end counts on into the next month (`api::history` parses
/// exactly this).
pub const HISTORY_TIME_PATTERN: &str = r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";

/// The resolution of a history: minutes are kept a day, hours 30 days.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HistoryStep {
    Minute,
    Hour,
}

/// `?from&to&step`: samples that start in `[from, to)`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryQuery {
    /// Default: an hour before `to` (minutes) or 7 days before it (hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = HISTORY_TIME_PATTERN))]
    pub from: Option<String>,
    /// Default: now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = HISTORY_TIME_PATTERN))]
    pub to: Option<String>,
    /// Default: `minute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "HistoryStep")]
    pub step: Option<HistoryStep>,
}

/// Requests by status class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StatusClassCounts {
    #[serde(rename = "1xx")]
    pub informational: u64,
    #[serde(rename = "2xx")]
    pub success: u64,
    #[serde(rename = "3xx")]
    pub redirection: u64,
    #[serde(rename = "4xx")]
    pub client_error: u64,
    #[serde(rename = "5xx")]
    pub server_error: u64,
}

/// One process type's share of a point (its instances together).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessTypePoint {
    /// `web`, `worker`, …
    pub process_type: String,
    pub instances: u32,
    /// Average and highest memory; null where not measured.
    pub memory_bytes: Option<u64>,
    pub memory_max_bytes: Option<u64>,
    /// Their memory limits together.
    pub memory_limit_bytes: u64,
    /// CPU used, in cores (CPU seconds per second).
    pub cpu_cores: Option<f64>,
    /// Each instance's own figures, for a type that ran several (else empty).
    pub by_instance: Vec<InstancePoint>,
}

/// One instance's share of its type's point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstancePoint {
    /// `web.2`
    pub instance: String,
    pub memory_bytes: Option<u64>,
    pub memory_max_bytes: Option<u64>,
    pub cpu_cores: Option<f64>,
}

/// A build that finished in the point's time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildPoint {
    pub provisioning_id: String,
    pub duration_seconds: f64,
    /// `succeeded`, `failed` or `canceled`.
    pub result: String,
}

/// One minute (or hour) of a project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsagePoint {
    /// When the minute (or hour) began.
    pub at: String,
    /// The minutes of data it holds (an hour whose daemon was down part of it has fewer).
    pub minutes: u32,
    pub requests: StatusClassCounts,
    pub requests_total: u64,
    /// Time to the response head, estimated from the duration buckets; null without requests.
    pub latency_p50_ms: Option<f64>,
    pub latency_p95_ms: Option<f64>,
    /// Body bytes visitors sent to the app.
    pub bytes_in: u64,
    /// Body bytes sent to visitors.
    pub bytes_out: u64,
    /// Requests the app did not answer (502/504 pages).
    pub upstream_errors: u64,
    /// The live app's memory, every instance together (average, highest); null without one.
    pub memory_bytes: Option<u64>,
    pub memory_max_bytes: Option<u64>,
    /// The memory limits of its instances together; null without a live app.
    pub memory_limit_bytes: Option<u64>,
    /// CPU used, in cores.
    pub cpu_cores: Option<f64>,
    pub process_types: Vec<ProcessTypePoint>,
    pub builds: Vec<BuildPoint>,
}

/// `GET /api/projects/{projectId}/usage/history`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageHistory {
    pub project_id: String,
    pub step: HistoryStep,
    pub from: String,
    pub to: String,
    /// The CPUs the live app's instances may use together; null without a live app.
    pub cpu_limit_cores: Option<f64>,
    /// Oldest first; a minute (or hour) with no sample (the daemon was down) is absent.
    pub points: Vec<UsagePoint>,
}

/// One minute (or hour) of the machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoint {
    pub at: String,
    pub minutes: u32,
    /// The share of CPU time spent busy (0 to 1); null where unknown.
    pub cpu_busy: Option<f64>,
    pub cpus: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_max_bytes: Option<u64>,
    pub memory_total_bytes: u64,
    /// The data directory's filesystem.
    pub disk_used_bytes: u64,
    pub disk_total_bytes: u64,
    /// Visitor connections open on the router (average, highest).
    pub connections: Option<u64>,
    pub connections_max: Option<u64>,
}

/// `GET /api/usage/history`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHistory {
    pub step: HistoryStep,
    pub from: String,
    pub to: String,
    pub points: Vec<MachinePoint>,
}
