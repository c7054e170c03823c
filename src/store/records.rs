//! The on-disk record types. Each carries `v` (its own version) so a later schema can read or
//! migrate older rows. Times are Unix milliseconds.

use crate::build_settings::BuildSettings;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProjectState {
    New,
    Live,
    Failed,
    Stopped,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProjectRecord {
    pub v: u32,
    pub id: String,
    pub slug: String,
    pub created_ms: u64,
    pub live_deployment_id: Option<String>,
    pub state: ProjectState,
    /// Host uid/gid the project's code runs as (sandbox.uid_base + index).
    pub uid: u32,
    /// The project's custom domains, in the order they were added (each also a row of the
    /// `domains` table, written in the same transaction).
    #[serde(default)]
    pub domains: Vec<String>,
    /// What automatic deploys (webhooks, deploy hooks) build with.
    #[serde(default)]
    pub settings: ProjectSettings,
    /// The webhook secret, sealed with the daemon's key (hex); `None` until one is made.
    #[serde(default)]
    pub webhook_secret_sealed: Option<String>,
    /// The live deployment put to sleep (issue 35): while it is still the live one, start-up
    /// does not start it. Another deployment going live ends the sleep.
    #[serde(default)]
    pub sleeping: Option<String>,
}

/// A project's build settings (`PATCH /api/projects/{projectId}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectSettings {
    pub git_url: Option<String>,
    pub production_branch: String,
    #[serde(flatten)]
    pub build: BuildSettings,
    /// Deploy other branches and pull requests as previews.
    pub previews: bool,
    /// Also pull requests from forks.
    pub preview_forks: bool,
    /// Scale to zero: sleep after this long without visitors (`null`: never).
    #[serde(default)]
    pub sleep: Option<crate::formation::sleep::SleepSettings>,
    /// Where its app runs (`null`: the operator's default — the cluster when `[cluster]
    /// engine` is set, else this machine).
    #[serde(default)]
    pub placement: Option<Placement>,
    /// On a cluster, the nodes its tasks may run on (the engine's constraints, all must hold).
    #[serde(default)]
    pub placement_constraints: Vec<NodeConstraint>,
}

/// The schema's pattern of a [`NodeConstraint`], the same rule as its check.
pub const NODE_CONSTRAINT_PATTERN: &str = r"^(node\.(id|hostname|role|platform\.os|platform\.arch)|(node|engine)\.labels\.[A-Za-z0-9._-]{1,64})(==|!=)[A-Za-z0-9._-]{1,64}$";

/// One placement rule for a cluster's engine: `node.labels.zone==eu`, `node.hostname!=old`,
/// `node.role==worker` (Docker Swarm's constraint syntax, a subset: no spaces, no
/// wildcards).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct NodeConstraint(
    #[schemars(regex(pattern = NODE_CONSTRAINT_PATTERN), length(min = 4, max = 150))] String,
);

impl NodeConstraint {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether it is a rule the engine takes (the schema's pattern, said in words if not).
    pub fn check(&self) -> Result<(), String> {
        let text = &self.0;
        let word = |part: &str| {
            (1..=64).contains(&part.len())
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        };
        let split = text.split_once("==").or_else(|| text.split_once("!="));
        let valid = split.is_some_and(|(attribute, value)| {
            let known = matches!(
                attribute,
                "node.id"
                    | "node.hostname"
                    | "node.role"
                    | "node.platform.os"
                    | "node.platform.arch"
            );
            let label = ["node.labels.", "engine.labels."]
                .iter()
                .any(|prefix| attribute.strip_prefix(prefix).is_some_and(word));
            (known || label) && word(value)
        });
        match valid {
            true => Ok(()),
            false => Err(format!(
                "{text:?} is not a placement constraint: `node.hostname`, `node.id`, `node.role`, \
                 `node.platform.os`, `node.platform.arch`, `node.labels.<key>` or \
                 `engine.labels.<key>`, then `==` or `!=`, then a value of letters, digits, \
                 `.`, `_` or `-`"
            )),
        }
    }
}

/// Where a project's app runs (issue 36).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    // This machine's sandbox.
    Local,
    // The configured cluster engine.
    Cluster,
}

impl Default for ProjectSettings {
    fn default() -> Self {
        ProjectSettings {
            git_url: None,
            production_branch: "main".into(),
            build: BuildSettings::default(),
            previews: false,
            preview_forks: false,
            sleep: None,
            placement: None,
            placement_constraints: Vec::new(),
        }
    }
}

/// Where a deployment is served.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    #[default]
    Production,
    Preview,
}

/// What started a deployment.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    #[default]
    Api,
    Webhook,
    Hook,
    Rollback,
    Cli,
}

/// The environment, branch, commit and trigger of a run (and of the deployment it makes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeployTarget {
    #[serde(default)]
    pub environment: Environment,
    /// The preview's name (`feature-x`, `pr-12`): its host is `<name>--<slug>.<apps_domain>`.
    #[serde(default)]
    pub preview: Option<String>,
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub commit: Option<String>,
    #[serde(default)]
    pub trigger: Trigger,
    /// The pull request a preview is for.
    #[serde(default)]
    pub pull_request: Option<u64>,
    /// The code comes from a fork's pull request (built only with `previewForks`): none of
    /// the project's variables reach its steps or its app.
    #[serde(default)]
    pub fork: bool,
}

/// Where an env var applies (`env_var_scopes`). A variable without one applies to production
/// and every preview, as every variable set before scopes existed did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvScope {
    pub v: u32,
    /// Sorted, without duplicates, not empty.
    pub environments: Vec<Environment>,
    /// Only this branch's previews (`environments` then holds `preview`); production is not
    /// narrowed by it.
    #[serde(default)]
    pub branch: Option<String>,
}

impl EnvScope {
    /// Whether a variable of this scope reaches a run of `target` (not a fork's: those get
    /// no variable at all, whatever the scope).
    pub fn applies_to(&self, target: &DeployTarget) -> bool {
        if !self.environments.contains(&target.environment) {
            return false;
        }
        match (target.environment, &self.branch) {
            (Environment::Production, _) | (Environment::Preview, None) => true,
            (Environment::Preview, Some(branch)) => target.branch.as_ref() == Some(branch),
        }
    }
}

/// A preview deployment of a branch or pull request (`previews` table).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreviewRecord {
    pub v: u32,
    pub project_id: String,
    pub name: String,
    pub branch: Option<String>,
    pub pull_request: Option<u64>,
    /// The deployment it serves (`None` until its first run succeeds).
    pub deployment_id: Option<String>,
    /// The last deployment started for it (may still be building, or have failed).
    pub latest_deployment_id: String,
    pub updated_ms: u64,
    /// The deployment it serves, put to sleep (issue 35): while it is still the one served,
    /// start-up does not start it.
    #[serde(default)]
    pub sleeping: Option<String>,
}

/// A deploy hook: `POST /api/hooks/<secret>` deploys `branch` with the project's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeployHookRecord {
    pub v: u32,
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub branch: String,
    /// SHA-256 (hex) of the secret in the URL; the secret itself is not stored.
    pub secret_sha256: String,
    pub created_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenRecord {
    pub v: u32,
    pub id: String,
    pub name: String,
    /// Hex SHA-256 of the secret; the secret itself is never stored.
    pub hash: String,
    pub created_ms: u64,
    pub last_used_ms: Option<u64>,
    /// What the token may do (records from before scopes are admin tokens).
    #[serde(default)]
    pub scope: Scope,
    /// The project slugs a `deploy` or `read` token is limited to, as granted; `None`: all
    /// projects.
    #[serde(default)]
    pub projects: Option<Vec<String>>,
    /// The ids of those projects, bound when the token was made (version 2; version 1 grants
    /// are bound at the first start that reads them): a later project that takes one of the
    /// slugs is not covered. Only these ids are checked.
    #[serde(default)]
    pub project_ids: Option<Vec<String>>,
    /// After this the token is refused (401).
    #[serde(default)]
    pub expires_ms: Option<u64>,
}

/// `building`: its provisioning run is still going; `live`: built and serving (the project's
/// live deployment); `inactive`: built and healthy once, no longer serving (replaced or
/// stopped), may be rolled back to; `failed`; `canceled`. (Plain comments on the variants
/// keep the schema a plain string enum, which client generators handle.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeploymentState {
    Building,
    Live,
    Inactive,
    Failed,
    Canceled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeploymentMode {
    Static,
    Server,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeploymentRecord {
    pub v: u32,
    pub id: String,
    pub project_id: String,
    pub provisioning_id: String,
    pub created_ms: u64,
    pub finished_ms: Option<u64>,
    pub state: DeploymentState,
    pub mode: Option<DeploymentMode>,
    /// Output directory relative to the workspace (static) or the app root (server).
    pub output_dir: Option<String>,
    pub start_command: Option<String>,
    /// The process types besides `web` (whose command is `start_command`): the Procfile's
    /// `name: command` lines, `release` left out.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub processes: std::collections::BTreeMap<String, String>,
    /// What the release step ran (`releaseCommand`, else the Procfile's `release:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_command: Option<String>,
    pub health_check_path: Option<String>,
    pub source_sha256: Option<String>,
    pub git_url: Option<String>,
    /// The sealed environment is not copied here; env vars are read at provision time and
    /// again when a live app is restarted.
    pub port: Option<u16>,
    /// Production or a preview, branch, commit and what started it.
    #[serde(default)]
    pub target: DeployTarget,
}

impl DeploymentRecord {
    /// Every process type it runs (type → command): `web` from the start command, then the
    /// Procfile's others.
    pub fn process_commands(&self) -> std::collections::BTreeMap<String, String> {
        let mut commands = self.processes.clone();
        if let Some(web) = &self.start_command {
            commands.insert(crate::formation::WEB.to_owned(), web.clone());
        }
        commands
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StepState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Skipped,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRecord {
    pub name: String,
    pub state: StepState,
    pub started_ms: Option<u64>,
    pub duration_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    ProvisioningInProgress,
    ProvisioningComplete,
    ProvisioningFailed,
    ProvisioningCanceled,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunError {
    pub code: crate::error_code::ErrorCode,
    pub message: String,
}

/// The provision request as accepted (commands and options).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProvisionRequest {
    pub project_slug: String,
    /// The commands and options (camelCase keys since they became `BuildSettings`).
    #[serde(flatten)]
    pub build: BuildSettings,
    pub source_id: Option<String>,
    pub git_url: Option<String>,
    pub git_ref: Option<String>,
    /// `user:token` split out of an https `git_url` at the API's edge: handed to git through
    /// its environment for this run only, never stored (`git_url` keeps the URL without it).
    #[serde(skip)]
    pub git_credentials: Option<String>,
    /// Production or a preview, and where the run came from.
    #[serde(default)]
    pub target: DeployTarget,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub v: u32,
    pub id: String,
    pub project_id: String,
    pub deployment_id: String,
    pub request: ProvisionRequest,
    pub status: RunStatus,
    pub steps: Vec<StepRecord>,
    pub progress: u32,
    pub created_ms: u64,
    pub finished_ms: Option<u64>,
    /// The estimate given at start (median of earlier successful runs).
    pub estimate_ms: u64,
    pub failed_step: Option<String>,
    pub error: Option<RunError>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceRecord {
    pub v: u32,
    pub id: String,
    pub project_id: String,
    pub sha256: String,
    pub size_bytes: u64,
    pub file_count: u64,
    pub created_ms: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LogStats {
    pub first_seq: u64,
    pub last_seq: u64,
    pub bytes: u64,
}

/// What a token may do: `admin` everything; `deploy` everything on its projects but tokens,
/// new projects and the audit log; `read` GET only, env var values masked.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    #[default]
    Admin,
    Deploy,
    Read,
}

impl Scope {
    /// Whether a token of this scope may use a route that needs `needed`.
    pub fn covers(self, needed: Scope) -> bool {
        matches!(
            (self, needed),
            (Scope::Admin, _)
                | (Scope::Deploy, Scope::Deploy | Scope::Read)
                | (Scope::Read, Scope::Read)
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Admin => "admin",
            Scope::Deploy => "deploy",
            Scope::Read => "read",
        }
    }
}

/// One API request that changed (or tried to change) something.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub v: u32,
    /// `aud_` + 13-digit milliseconds + random: ids sort by time.
    pub id: String,
    pub at_ms: u64,
    pub token_id: String,
    pub token_name: String,
    pub ip: String,
    pub method: String,
    /// The route's template, e.g. `/api/projects/{projectId}/env-vars`.
    pub route: String,
    /// What it acted on: the first path parameter, if any.
    pub target: Option<String>,
    /// The project it concerned, when there is one.
    pub project_id: Option<String>,
    pub status: u16,
}

/// The first answer to a request with an `Idempotency-Key`, replayed for 24 h. Version 2
/// (`IDEMPOTENT_RESPONSE_VERSION`); version 1 kept the body in plain text and is never replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotentResponse {
    pub v: u32,
    /// HMAC-SHA256 (hex, `SecretBox::fingerprint`) of method, path, query and body: a reuse of
    /// the key for another request is refused.
    pub fingerprint: String,
    pub status: u16,
    /// The answer's body sealed with `secret.key`, bound to the token and key (hex): answers
    /// carry new token secrets, webhook secrets and deploy hook URLs. Empty in version 1.
    #[serde(default)]
    pub body_sealed: String,
    pub created_ms: u64,
}

/// The version of `IdempotentResponse` this daemon writes and replays.
pub const IDEMPOTENT_RESPONSE_VERSION: u32 = 2;

#[cfg(test)]
mod node_constraint_tests {
    use super::NodeConstraint;

    #[test]
    fn only_the_engines_constraint_syntax_is_taken() {
        for good in [
            "node.labels.zone==eu",
            "node.hostname!=old-1",
            "node.role==worker",
            "engine.labels.disk==ssd",
        ] {
            assert!(NodeConstraint(good.to_owned()).check().is_ok(), "{good}");
        }
        for bad in [
            "node.labels.==eu",
            "node.hostname=old",
            "node.name==x",
            "node.role==",
            "node.role==a b",
            "node.role==a==b",
            "node.labels.a!=b==c",
        ] {
            assert!(NodeConstraint(bad.to_owned()).check().is_err(), "{bad}");
        }
    }
}
