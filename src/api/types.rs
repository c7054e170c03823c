//! The API's JSON shapes, as Rust types: the handlers build responses from them, request bodies
//! parse into them, the CLI client reads responses into them, and the OpenAPI document derives
//! its schemas from them (`api::routes` names each route's shapes). Shapes another module owns
//! (the provisioning status, log lines) are re-exported here; the log endpoints' shapes are in
//! [`logs`], the error code as it travels in [`wire_code`].

mod logs;
mod notifications;
mod wire_code;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::error_code::ErrorCode;
pub use crate::logs::{LogLine, LogStream};
pub use crate::pipeline::{ProvisionStatus, RunEnded, RunErrorBody, StepStatus};
pub use crate::store::records::{DeploymentMode, DeploymentState, ProjectState, StepState};
pub use logs::{LogPage, LogQuery, LogStreamEvent, StreamEnd};
pub use notifications::*;
pub use wire_code::{UnknownCode, WireCode};

/// A request body whose fields are all strings: the names it allows, as the API spells them,
/// in the order error messages list them (`api::json::read_string_fields` enforces them; a
/// test checks them against the type's schema).
pub trait RequestFields {
    const FIELDS: &'static [&'static str];

    /// The message for a required field that is absent or null.
    fn missing(field: &str) -> String {
        format!("field `{field}` is required")
    }
}

/// Every error: `{"error": {"code", "message", "status"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// The error's code.
    // An `ErrorCode` from this server; a client keeps a code it does not know as text.
    #[schemars(with = "ErrorCode")]
    pub code: WireCode,
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

impl RequestFields for CreateProject {
    const FIELDS: &'static [&'static str] = &["slug"];
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ProjectDeleted {
    pub id: String,
    pub slug: String,
    pub deleted: bool,
}

/// `POST …/env-vars`: names to values, set all or nothing (`api::projects` validates names and
/// values and produces it).
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

impl RequestFields for CreateToken {
    const FIELDS: &'static [&'static str] = &["name"];

    fn missing(field: &str) -> String {
        format!("field `{field}` is required (a label for the token)")
    }
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

impl RequestFields for ProvisionBody {
    const FIELDS: &'static [&'static str] = &[
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
    pub status: AcceptedStatus,
    pub provisioning_id: String,
    pub status_check_url: String,
    pub estimated_completion_time: u64,
    pub deployment_id: String,
}

/// A run just accepted is always in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AcceptedStatus {
    ProvisioningInProgress,
}

/// `POST /api/projects/{projectId}/rollback`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollbackBody {
    pub deployment_id: String,
}

impl RequestFields for RollbackBody {
    const FIELDS: &'static [&'static str] = &["deploymentId"];
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The names a request type's schema gives its properties.
    fn properties<T: JsonSchema>() -> Vec<String> {
        let schema = schemars::generate::SchemaSettings::draft2020_12()
            .for_deserialize()
            .into_generator()
            .into_root_schema_for::<T>();
        let mut names: Vec<String> = schema
            .get("properties")
            .and_then(|p| p.as_object())
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    fn fields<T: RequestFields>() -> Vec<String> {
        let mut names: Vec<String> = T::FIELDS.iter().map(|f| f.to_string()).collect();
        names.sort();
        names
    }

    #[test]
    fn request_fields_are_the_types_fields() {
        assert_eq!(fields::<CreateProject>(), properties::<CreateProject>());
        assert_eq!(fields::<CreateToken>(), properties::<CreateToken>());
        assert_eq!(fields::<ProvisionBody>(), properties::<ProvisionBody>());
        assert_eq!(fields::<RollbackBody>(), properties::<RollbackBody>());
    }

    #[test]
    fn shapes_keep_null_and_absent_apart() {
        let project = Project {
            id: "prj_1".into(),
            slug: "web".into(),
            url: "https://web.localhost".into(),
            created_at: "t".into(),
            live_deployment_id: None,
            state: ProjectState::New,
        };
        let value = serde_json::to_value(&project).unwrap();
        assert!(value["liveDeploymentId"].is_null());
        assert_eq!(value.as_object().unwrap().len(), 6);
        let body = ProvisionBody {
            project_slug: "web".into(),
            ..ProvisionBody::default()
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"projectSlug":"web"}"#
        );
    }
}
