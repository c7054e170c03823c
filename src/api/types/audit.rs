//! The shapes of `GET /api/audit`: entries, the page, and its query.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One audit log entry.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    pub id: String,
    pub at: String,
    pub token_id: String,
    pub token_name: String,
    pub ip: String,
    pub method: String,
    /// The route's template, e.g. `/api/projects/{projectId}/env-vars`.
    pub route: String,
    /// What the request acted on (its first path parameter).
    pub target: Option<String>,
    pub project_id: Option<String>,
    pub status: u16,
}

impl From<crate::store::records::AuditRecord> for AuditEntry {
    fn from(record: crate::store::records::AuditRecord) -> AuditEntry {
        AuditEntry {
            id: record.id,
            at: crate::ids::rfc3339(record.at_ms),
            token_id: record.token_id,
            token_name: record.token_name,
            ip: record.ip,
            method: record.method,
            route: record.route,
            target: record.target,
            project_id: record.project_id,
            status: record.status,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditLog {
    pub entries: Vec<AuditEntry>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
    /// Requests to the public routes that failed before anything authenticated them: counted
    /// here, never stored one by one.
    pub unauthenticated_failures: UnauthenticatedFailureCounts,
}

/// Public-route requests that failed unauthenticated (a bad or missing signature, an unknown
/// project or deploy hook secret, an unreadable body), since the daemon started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnauthenticatedFailureCounts {
    /// `POST /api/webhooks/{projectId}`.
    pub webhook: u64,
    /// `POST /api/hooks/{secret}`.
    pub deploy_hook: u64,
    /// When the last one came (RFC 3339); null when none did.
    pub last_at: Option<String>,
}

/// The audit log's query: a page, optionally of one project.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditQuery {
    /// Entries per page, 1 to 1000 (default 100).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page.
    #[schemars(regex(pattern = r"^[0-9]{1,19}\.[A-Za-z0-9_]{1,64}$"))]
    pub cursor: Option<String>,
    /// Only entries about this project (id or slug).
    #[schemars(
        regex(pattern = r"^(prj_[a-z2-7]{24}|[a-z0-9]+(-[a-z0-9]+)*)$"),
        length(min = 2, max = 63)
    )]
    pub project_id: Option<String>,
}
