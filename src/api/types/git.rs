//! The shapes of git-driven deploys: project settings, the webhook secret and a webhook's
//! answer, deploy hooks, and previews.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::store::records::{Environment, ProjectSettings, Trigger};

/// A branch or tag name exactly as `source::git::check_ref` accepts it: letters, digits and
/// `. _ / + -`, 1 to 255 of them, not starting with `-`, `/` or `.`, not ending with `/` or
/// `.`, without `..`, `//` or a `.lock` ending.
pub const GIT_REF_PATTERN: &str =
    r"^(?![-/.])(?!.*\.\.)(?!.*//)(?!.*\.lock$)(?!.*[/.]$)[A-Za-z0-9._/+-]{1,255}$";

/// A repository URL the settings take: a safe subset of what `source::git::check_url` accepts
/// (https, http, git or ssh with a plain host name and path, or `user@host:path`), so every URL
/// the schema allows is accepted. git's own URL forms cannot be stated as a pattern; a URL
/// outside the subset that git takes (a port, an IPv6 host) is still accepted by the server.
/// No `user:token@` for http(s): settings are not secret. Empty clears the setting.
pub const SETTINGS_GIT_URL_PATTERN: &str = r"^$|^(https?|git|ssh)://[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]{1,5})?/[A-Za-z0-9._/~-]+$|^[A-Za-z0-9._-]+@[A-Za-z0-9][A-Za-z0-9.-]*:[A-Za-z0-9._~][A-Za-z0-9._/~-]*$";

/// A deploy hook's name, 1 to 100 printable characters, not only spaces (as `create_hook`
/// checks).
pub const PRINTABLE_NAME_PATTERN: &str = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$";

/// `PATCH /api/projects/{projectId}`: any of the settings; absent fields keep their value,
/// `null` clears an optional one.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProjectSettingsPatch {
    /// The repository automatic deploys clone (`https://…`, `git://…`, `ssh://…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SETTINGS_GIT_URL_PATTERN), length(max = 2048))]
    pub git_url: Option<Option<String>>,
    /// Pushes to it deploy production (default `main`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String", regex(pattern = GIT_REF_PATTERN))]
    pub production_branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^\u0000]*$"), length(max = 16384))]
    pub install_command: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^\u0000]*$"), length(max = 16384))]
    pub build_command: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^\u0000]*$"), length(max = 16384))]
    pub start_command: Option<Option<String>>,
    /// Run once per deployment before the switch (migrations); non-zero fails it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^\u0000]*$"), length(max = 16384))]
    pub release_command: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_directory: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(/[^\s\u0000-\u001f\u007f-\u009f]*)?$"))]
    pub health_check_path: Option<Option<String>>,
    /// `"auto"` or null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(auto)?$"))]
    pub framework: Option<Option<String>>,
    /// Deploy other branches and pull requests as previews (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub previews: Option<bool>,
    /// Also pull requests from forks (default false: their code is not built).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub preview_forks: Option<bool>,
    /// Scale to zero: the app sleeps after `idleTimeoutS` without visitors; `null`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleep: Option<Option<crate::formation::sleep::SleepSettings>>,
    /// Where the app runs: `local` (this machine) or `cluster` (`[cluster] engine`, 409
    /// without one); `null`: the operator's default. Applies from the next deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Option<crate::store::records::Placement>>,
    /// On a cluster, rules for the nodes its tasks run on, all of which must hold
    /// (`node.labels.zone==eu`, `node.hostname!=old`, `node.role==worker`; at most 10);
    /// `null` or `[]`: any node. 409 without a cluster engine. Applies from the next
    /// deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 10))]
    pub placement_constraints: Option<Option<Vec<crate::store::records::NodeConstraint>>>,
}

/// `POST /api/projects/{projectId}/webhook-secret`: shown once; calling again rotates it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSecret {
    pub secret: String,
    /// Where the provider posts (`/api/webhooks/{projectId}` on the control host).
    pub webhook_url: String,
}

/// What a webhook delivery did: `deploy`, `preview`, `teardown` or `ignored`, and why.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookAnswer {
    pub action: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_id: Option<String>,
}

/// `POST /api/projects/{projectId}/deploy-hooks`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDeployHook {
    #[schemars(regex(pattern = PRINTABLE_NAME_PATTERN), length(min = 1, max = 100))]
    pub name: String,
    /// The branch it deploys (production when it is the production branch, else a preview).
    #[schemars(regex(pattern = GIT_REF_PATTERN))]
    pub branch: String,
}

impl super::RequestFields for CreateDeployHook {
    const FIELDS: &'static [&'static str] = &["name", "branch"];
}

/// A new deploy hook: its secret (also the last part of `url`) is shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedDeployHook {
    pub id: String,
    pub name: String,
    pub branch: String,
    /// `POST` to it (no token) to deploy: `/api/hooks/<secret>`.
    pub url: String,
    /// The `{secret}` of `POST /api/hooks/{secret}` (`dh_…`).
    pub secret: String,
    pub created_at: String,
}

/// A deploy hook as listed (never its secret).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployHook {
    pub id: String,
    pub name: String,
    pub branch: String,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployHookList {
    pub project_id: String,
    pub deploy_hooks: Vec<DeployHook>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DeployHookDeleted {
    pub id: String,
    pub deleted: bool,
}

/// `POST /api/hooks/{secret}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookTriggered {
    pub provisioning_id: String,
    pub deployment_id: String,
}

/// A preview: its host, and the deployment it serves.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    pub name: String,
    pub branch: Option<String>,
    pub pull_request: Option<u64>,
    pub url: String,
    /// The deployment it serves (null until its first run succeeds).
    pub deployment_id: Option<String>,
    /// The state of its latest deployment (`building`, `live`, `failed`, …).
    pub state: String,
    /// Its app as it is now: a preview sleeps like production (issue 35).
    pub app_state: super::AppState,
    pub updated_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewList {
    pub project_id: String,
    pub previews: Vec<Preview>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PreviewDeleted {
    pub name: String,
    pub deleted: bool,
}

/// `DELETE /api/projects/{projectId}/build-cache`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildCacheCleared {
    pub project_id: String,
    pub deleted: bool,
    /// What the cache held.
    pub freed_bytes: u64,
}
