//! The API's JSON shapes, as Rust types: the handlers build responses from them, request bodies
//! parse into them, the CLI client reads responses into them, and the OpenAPI document derives
//! its schemas from them (`api::routes` names each route's shapes). Shapes another module owns
//! (the provisioning status, log lines) are re-exported here; the log endpoints' shapes are in
//! [`logs`], the error code as it travels in [`wire_code`].

mod addon_ops;
mod addons;
mod audit;
mod cluster;
mod domains;
mod env_vars;
mod formation;
mod git;
mod history;
mod jobs;
mod logs;
mod notifications;
mod wire_code;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::error_code::ErrorCode;
pub use crate::logs::{LogLine, LogStream};
pub use crate::pipeline::{ProvisionStatus, RunEnded, RunErrorBody, StepStatus};
pub use crate::store::records::{DeploymentMode, DeploymentState, ProjectState, StepState};
pub use addon_ops::*;
pub use addons::*;
pub use audit::*;
pub use cluster::*;
pub use domains::*;
pub use env_vars::*;
pub use formation::*;
pub use git::*;
pub use history::*;
pub use jobs::*;
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
    /// The project's custom domains.
    #[serde(default)]
    pub domains: Vec<String>,
    /// What automatic deploys build with.
    #[serde(default)]
    pub settings: ProjectSettings,
    /// Whether its production app runs, sleeps, is waking, or runs nothing.
    #[serde(default)]
    pub app_state: AppState,
}

/// A project's production app or a preview's (issue 35): `running` (a static site too), `sleeping`
/// (stopped for want of visitors; the next request wakes it), `waking`, `stopped` (nothing
/// live).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AppState {
    Running,
    Sleeping,
    Waking,
    #[default]
    Stopped,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectList {
    pub projects: Vec<Project>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// The query of every list (its fields are the query parameters).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct PageQuery {
    /// Items per page, 1 to 1000 (default 100).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page.
    #[schemars(regex(pattern = r"^[0-9]{1,19}\.[A-Za-z0-9_]{1,64}$"))]
    pub cursor: Option<String>,
}

/// `POST /api/projects`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"slug": "my-app"}))]
pub struct CreateProject {
    /// kebab-case, 2 to 63 characters.
    #[schemars(
        regex(pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$"),
        length(min = 2, max = 63)
    )]
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

/// A token as listed (never its secret).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Token {
    pub id: String,
    pub name: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
    pub scope: crate::auth::Scope,
    /// The project slugs the token is limited to; null: all projects.
    pub projects: Option<Vec<String>>,
    pub expires_at: Option<String>,
}

/// A new token: the secret is shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedToken {
    pub id: String,
    pub name: String,
    pub created_at: String,
    pub scope: crate::auth::Scope,
    pub projects: Option<Vec<String>>,
    pub expires_at: Option<String>,
    pub token: String,
}

impl From<&crate::store::records::TokenRecord> for Token {
    fn from(record: &crate::store::records::TokenRecord) -> Token {
        Token {
            id: record.id.clone(),
            name: record.name.clone(),
            created_at: crate::ids::rfc3339(record.created_ms),
            last_used_at: record.last_used_ms.map(crate::ids::rfc3339),
            scope: record.scope,
            projects: record.projects.clone(),
            expires_at: record.expires_ms.map(crate::ids::rfc3339),
        }
    }
}

impl CreatedToken {
    pub fn new(record: &crate::store::records::TokenRecord, secret: String) -> CreatedToken {
        CreatedToken {
            id: record.id.clone(),
            name: record.name.clone(),
            created_at: crate::ids::rfc3339(record.created_ms),
            scope: record.scope,
            projects: record.projects.clone(),
            expires_at: record.expires_ms.map(crate::ids::rfc3339),
            token: secret,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(example = serde_json::json!({"name": "ci", "scope": "deploy", "projects": ["my-app"], "expiresInDays": 30}))]
// `projects` only with a `deploy` or `read` scope, as `api::tokens::parse_create` checks.
#[schemars(extend("anyOf" = [{"not": {"required": ["projects"]}}, {"required": ["scope"], "properties": {"scope": {"enum": ["deploy", "read"]}}}]))]
pub struct CreateToken {
    /// A label for the token, 1 to 100 printable characters.
    #[schemars(
        regex(
            pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
        ),
        length(min = 1, max = 100)
    )]
    pub name: String,
    /// `admin` (default), `deploy` or `read`.
    #[serde(default)]
    pub scope: Option<crate::auth::Scope>,
    /// Project slugs a `deploy` or `read` token is limited to (absent: all projects; not for
    /// `admin` tokens).
    #[serde(default)]
    #[schemars(with = "Vec<SlugString>", length(min = 1, max = 100))]
    pub projects: Option<Vec<String>>,
    /// Days until the token expires (1 to 3650; absent: never).
    #[serde(default, deserialize_with = "crate::whole_number::optional_u32")]
    #[schemars(range(min = 1, max = 3650))]
    pub expires_in_days: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenList {
    pub tokens: Vec<Token>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
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
#[schemars(example = serde_json::json!({"projectSlug": "my-app", "installCommand": "npm ci", "buildCommand": "npm run build", "startCommand": "node server.js", "healthCheckPath": "/healthz"}))]
pub struct ProvisionBody {
    /// The project's slug (must match the path's project).
    #[schemars(
        regex(pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$"),
        length(min = 2, max = 63)
    )]
    pub project_slug: String,
    /// Run as `sh -c` in the workspace; absent or empty: skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^\u0000]*$"), length(max = 16384))]
    pub install_command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^\u0000]*$"), length(max = 16384))]
    pub build_command: Option<String>,
    /// Absent: a static site.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^\u0000]*$"), length(max = 16384))]
    pub start_command: Option<String>,
    /// Run once per deployment after the build, before the switch, with the app's env vars
    /// and `/data` (migrations); non-zero fails the run (`RELEASE_FAILED`) and the live
    /// deployment keeps serving. Absent: the Procfile's `release:` line, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^\u0000]*$"), length(max = 16384))]
    pub release_command: Option<String>,
    /// A relative path inside the project, e.g. `dist`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^(([A-Za-z0-9_-][A-Za-z0-9_.-]*)(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*)?$"),
        length(max = 1024)
    )]
    pub output_directory: Option<String>,
    /// An upload of this project (`POST …/source`); `""` is the same as absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(src_[a-z2-7]{24})?$"))]
    pub source_id: Option<String>,
    /// https, http, git or ssh URL, or `user@host:path`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^((https?|git|ssh)://[A-Za-z0-9.-]+(:[0-9]+)?/[A-Za-z0-9._/~-]+)?$"),
        length(max = 2048)
    )]
    pub git_url: Option<String>,
    /// A branch, tag or full commit (needs `gitUrl`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9._/-]*$"), length(max = 255))]
    pub git_ref: Option<String>,
    /// Answered with 2xx/3xx when the app is healthy, e.g. `/healthz`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(/[!-~]*)?$"), length(max = 2048))]
    pub health_check_path: Option<String>,
    /// `"auto"`: the commands left out are detected from the source (framework, package
    /// manager, Procfile); the run's first lines say what was chosen and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(auto)?$"))]
    pub framework: Option<String>,
}

/// A project slug, in schemas.
#[derive(JsonSchema)]
#[schemars(transparent)]
pub struct SlugString(
    #[allow(dead_code)]
    #[schemars(
        regex(pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$"),
        length(min = 2, max = 63)
    )]
    String,
);

impl ProvisionBody {
    /// The build settings it names, not yet validated.
    pub fn build_settings(&self) -> crate::build_settings::BuildSettings {
        crate::build_settings::BuildSettings {
            install_command: self.install_command.clone(),
            build_command: self.build_command.clone(),
            start_command: self.start_command.clone(),
            release_command: self.release_command.clone(),
            output_directory: self.output_directory.clone(),
            health_check_path: self.health_check_path.clone(),
            framework: self.framework.clone(),
        }
    }
}

impl RequestFields for ProvisionBody {
    const FIELDS: &'static [&'static str] = &[
        "projectSlug",
        "installCommand",
        "buildCommand",
        "startCommand",
        "releaseCommand",
        "outputDirectory",
        "sourceId",
        "gitUrl",
        "gitRef",
        "healthCheckPath",
        "framework",
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
    /// One of the project's last 5 successful deployments.
    #[schemars(regex(pattern = r"^dpl_[a-z2-7]{24}$"))]
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
    /// Where it is served: the project's URL while it is live, else null.
    pub url: Option<String>,
    /// Why its run failed, if it did.
    pub error: Option<RunErrorBody>,
    #[serde(default)]
    pub environment: Environment,
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub commit: Option<String>,
    #[serde(default)]
    pub trigger: Trigger,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentList {
    pub project_id: String,
    pub deployments: Vec<Deployment>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
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
    /// Whether builds' workspaces and apps' `/data` are filesystems of their own
    /// (`limits.build_disk_mb`, `limits.app_disk_mb`); false where the machine gives no loop
    /// devices or `mkfs.ext4`.
    pub disk_limits: bool,
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
        assert_eq!(fields::<ProvisionBody>(), properties::<ProvisionBody>());
        assert_eq!(fields::<RollbackBody>(), properties::<RollbackBody>());
        assert_eq!(fields::<CreateDomain>(), properties::<CreateDomain>());
        assert_eq!(
            fields::<CreateDeployHook>(),
            properties::<CreateDeployHook>()
        );
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
            domains: Vec::new(),
            settings: ProjectSettings::default(),
            app_state: AppState::Stopped,
        };
        let value = serde_json::to_value(&project).unwrap();
        assert!(value["liveDeploymentId"].is_null());
        assert_eq!(value.as_object().unwrap().len(), 9);
        assert_eq!(value["settings"]["productionBranch"], "main");
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
