//! The API's JSON shapes, as Rust types: the handlers build responses from them, the CLI client
//! reads responses into them, and the OpenAPI document derives its schemas from them. Shapes
//! another module owns (the provisioning status, log lines) are re-exported here.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::error_code::ErrorCode;
pub use crate::logs::{LogLine, LogStream};
pub use crate::pipeline::{ProvisionStatus, RunEnded, RunErrorBody, StepStatus};
pub use crate::store::records::{DeploymentMode, DeploymentState, ProjectState, StepState};

/// Every error: `{"error": {"code", "message", "status"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
    /// The HTTP status again.
    pub status: u16,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    pub id: String,
    pub slug: String,
    pub url: String,
    pub created_at: String,
    pub live_deployment_id: Option<String>,
    pub state: ProjectState,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ProjectList {
    pub projects: Vec<Project>,
}

/// `POST /api/projects`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProject {
    pub slug: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ProjectDeleted {
    pub id: String,
    pub slug: String,
    pub deleted: bool,
}

/// `POST …/env-vars`: names to values, set all or nothing.
pub type EnvVarsBody = BTreeMap<String, String>;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarsUpdated {
    pub project_id: String,
    /// The names set, in order.
    pub updated: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvVars {
    pub project_id: String,
    pub env_vars: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarDeleted {
    pub project_id: String,
    pub deleted: String,
}

/// A token as listed (never its secret).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Token {
    pub id: String,
    pub name: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
}

/// A new token: the secret is shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedToken {
    pub id: String,
    pub name: String,
    pub created_at: String,
    pub token: String,
}

impl From<&crate::store::records::TokenRecord> for Token {
    fn from(record: &crate::store::records::TokenRecord) -> Token {
        Token {
            id: record.id.clone(),
            name: record.name.clone(),
            created_at: crate::ids::rfc3339(record.created_ms),
            last_used_at: record.last_used_ms.map(crate::ids::rfc3339),
        }
    }
}

impl CreatedToken {
    pub fn new(record: &crate::store::records::TokenRecord, secret: String) -> CreatedToken {
        CreatedToken {
            id: record.id.clone(),
            name: record.name.clone(),
            created_at: crate::ids::rfc3339(record.created_ms),
            token: secret,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// A label for the token, 1 to 100 printable characters.
    pub name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TokenList {
    pub tokens: Vec<Token>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TokenRevoked {
    pub id: String,
    pub revoked: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceUploaded {
    pub source_id: String,
    pub project_id: String,
    pub sha256: String,
    pub size_bytes: u64,
    pub file_count: u64,
}

/// `POST /api/projects/{projectId}/provision`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProvisionBody {
    pub project_slug: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install_command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_directory: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check_path: Option<String>,
}

impl ProvisionBody {
    /// Field names as the API spells them (what `deny_unknown_fields` allows).
    pub const FIELDS: &'static [&'static str] = &[
        "projectSlug",
        "installCommand",
        "buildCommand",
        "startCommand",
        "outputDirectory",
        "sourceId",
        "gitUrl",
        "gitRef",
        "healthCheckPath",
    ];
}

/// `202` for provision and rollback.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionAccepted {
    /// Always `provisioning_in_progress`.
    pub status: String,
    pub provisioning_id: String,
    pub status_check_url: String,
    pub estimated_completion_time: u64,
    pub deployment_id: String,
}

/// `POST /api/projects/{projectId}/rollback`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollbackBody {
    pub deployment_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Deployment {
    pub id: String,
    pub project_id: String,
    pub provisioning_id: String,
    pub state: DeploymentState,
    pub mode: Option<DeploymentMode>,
    pub live: bool,
    pub created_at: String,
    pub finished_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentList {
    pub project_id: String,
    pub deployments: Vec<Deployment>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogPage {
    pub deployment_id: String,
    pub logs: Vec<LogLine>,
    pub next_since: u64,
    pub has_more: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
}

/// `GET /api/system`: what this daemon runs as.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SystemInfo {
    pub version: String,
    /// `namespaces`, or `none` (builds and apps run without isolation).
    pub sandbox_mode: String,
    pub tls_mode: String,
    pub apps_domain: String,
    pub control_host: String,
}
