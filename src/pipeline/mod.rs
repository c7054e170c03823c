//! Provisioning runs: `provision` validates and records a run, then a task walks the eight
//! steps (`run.rs`). This module owns the runs in flight: their live status (progress never
//! goes down), supersession of an older run by a newer one, cancellation on shutdown
//! (`INTERRUPTED`), and bringing live deployments back at start.

mod backends;
mod build;
mod cache;
mod cleanup;
mod commands;
mod failure;
mod golive;
mod inflight;
mod instances;
mod links;
mod modules_key;
mod node_modules;
mod oneoff;
mod progress;
mod release;
mod restore;
mod run;
mod scale;
mod sleep;
mod source_root;
mod status;
mod step;
mod tree;
mod workspaces;

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

pub use commands::PATH as STEP_PATH;
pub use links::{addon_url, password_context};
pub use oneoff::OneOff;
pub use progress::{estimate_from_history, STEPS};
pub use scale::ScaleError;
pub use sleep::{sleep_settings, LinkedAddons, SleepRefusal, SleepingApp};
pub use status::{run_status, ProvisionStatus, RunEnded, RunErrorBody, StepStatus};

use crate::config::Config;
use crate::error_code::ErrorCode;
use crate::logs::LogHub;
use crate::router::{Routes, Target};
use crate::sandbox::Runner;
use crate::secrets::SecretBox;
use crate::source::SourceStore;
use crate::store::records::{
    DeployTarget, DeploymentRecord, DeploymentState, Environment, ProjectRecord, ProvisionRequest,
    RunRecord, RunStatus, StepRecord, StepState,
};
use crate::store::Store;
use crate::supervisor::backend::AppBackend;
use crate::supervisor::local::LocalBackend;

/// Archive limits from the config: the upload limit, 10x that unpacked, 100,000 files.
pub fn source_limits(limits: &crate::config::Limits) -> crate::source::SourceLimits {
    crate::source::SourceLimits::from_archive_limit(limits.source_max_mb * 1024 * 1024)
}

/// The label under `apps_domain` a deployment is served at: the slug for production,
/// `<preview>--<slug>` for a preview (slugs never hold `--`, so the two cannot meet).
pub fn host_label(slug: &str, target: &DeployTarget) -> String {
    match (&target.environment, &target.preview) {
        (Environment::Preview, Some(name)) => format!("{name}--{slug}"),
        _ => slug.to_owned(),
    }
}

/// The route target of a server deployment's healthy `web` instances.
pub(crate) fn server_target(
    deployment_id: &str,
    web: &[instances::WebInstance],
    affinity: crate::formation::Affinity,
) -> Target {
    let instances = web
        .iter()
        .map(|(name, address)| (name.clone(), Some(*address)));
    Target::proxy(deployment_id, instances, affinity)
}

/// Runs of one project and environment supersede each other: production's key is the
/// project id, a preview's `<project id>#<name>`.
fn run_key(project_id: &str, target: &DeployTarget) -> String {
    match (&target.environment, &target.preview) {
        (Environment::Preview, Some(name)) => format!("{project_id}#{name}"),
        _ => project_id.to_owned(),
    }
}

/// What a run does.
pub enum RunPlan {
    /// Fetch the source, install, build, and bring the new deployment live.
    Build(ProvisionRequest),
    /// Bring a deployment built before (its workspace kept) live again.
    Rollback(DeploymentRecord),
}

/// Why a run was stopped before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Superseded,
    Interrupted,
    /// `POST /api/provisioning/{id}/cancel`.
    Canceled,
}

/// Why a run cannot be canceled.
#[derive(Debug)]
pub enum CancelError {
    NotFound,
    /// It finished already: its final status.
    Finished(Box<ProvisionStatus>),
    Store(crate::store::StoreError),
}

pub(crate) struct ActiveRun {
    pub record: Mutex<RunRecord>,
    pub cancel: CancellationToken,
    pub reason: Mutex<Option<StopReason>>,
    pub shown_progress: AtomicU32,
}

/// Builds and deploys. Its parts, each with one owner: the runs in flight (`inflight.rs`,
/// `InFlight`), the switch of a project's live deployment (`golive.rs`, one lock per
/// project), and where files live (`workspaces.rs`, `Workspaces`).
pub struct Pipeline {
    config: Arc<Config>,
    store: Store,
    hub: Arc<LogHub>,
    runner: Arc<dyn Runner>,
    routes: Arc<Routes>,
    /// The local sandbox's backend (the survivors, the port choice, memory admission).
    local: Arc<LocalBackend>,
    /// The cluster backend (`[cluster] engine`), when one is configured.
    cluster: Option<Arc<dyn AppBackend>>,
    sources: Arc<SourceStore>,
    secrets: Arc<SecretBox>,
    tls: Option<Arc<crate::tls::TlsManager>>,
    https_addr: Option<std::net::SocketAddr>,
    /// `https://<slug>.<apps_domain>[:port]`
    urls: crate::urls::PublicUrls,
    inflight: inflight::InFlight,
    /// Serializes route switches per project.
    deploy_locks: golive::DeployLocks,
    /// Cancelled when the daemon stops: every run's token is its child.
    shutdown: CancellationToken,
    /// Builds running at once (`limits.max_concurrent_builds`); more wait for a slot, so
    /// builds cannot starve the live apps of CPU and memory.
    build_slots: Arc<tokio::sync::Semaphore>,
    workspaces: workspaces::Workspaces,
    /// Deployment events (`deployment.*`) go out through it.
    notifier: crate::notifications::Notifier,
    /// Runs by result and their durations.
    metrics: Arc<crate::metrics::DaemonMetrics>,
    /// Memory all static sites' files share (`limits.static_cache_mb`).
    static_budget: crate::static_files::MemoryBudget,
    /// Called once a production deployment went live (`on_live`).
    live_hook: std::sync::OnceLock<LiveHook>,
    /// The add-ons that sleep with their apps (`sleep.rs`, `with_linked_addons`).
    linked_addons: std::sync::OnceLock<std::sync::Weak<dyn sleep::LinkedAddons>>,
}

/// What is told that a production deployment went live: its project, itself and its build
/// tree (the jobs module applies the cron jobs its slipway.toml declares).
pub type LiveHook = Arc<
    dyn Fn(
            ProjectRecord,
            DeploymentRecord,
            std::path::PathBuf,
        ) -> futures_util::future::BoxFuture<'static, ()>
        + Send
        + Sync,
>;

/// What `provision` needs to know about the caller's request.
pub struct Accepted {
    pub run: RunRecord,
}

#[derive(Debug)]
pub enum ProvisionError {
    /// `INVALID_*` (or `NOT_FOUND`, `INSUFFICIENT_STORAGE`) code and message.
    Invalid(ErrorCode, String),
    Store(crate::store::StoreError),
}

impl From<crate::store::StoreError> for ProvisionError {
    fn from(error: crate::store::StoreError) -> Self {
        ProvisionError::Store(error)
    }
}

pub struct PipelineParts {
    pub config: Arc<Config>,
    pub store: Store,
    pub hub: Arc<LogHub>,
    pub runner: Arc<dyn Runner>,
    pub routes: Arc<Routes>,
    pub local: Arc<LocalBackend>,
    pub cluster: Option<Arc<dyn AppBackend>>,
    pub sources: Arc<SourceStore>,
    pub secrets: Arc<SecretBox>,
    pub tls: Option<Arc<crate::tls::TlsManager>>,
    pub https_addr: Option<std::net::SocketAddr>,
    pub urls: crate::urls::PublicUrls,
    pub shutdown: CancellationToken,
    pub volumes: crate::disk::Volumes,
    pub notifier: crate::notifications::Notifier,
    pub metrics: Arc<crate::metrics::DaemonMetrics>,
}

impl Pipeline {
    pub fn new(parts: PipelineParts) -> Arc<Pipeline> {
        let build_slots = parts.config.limits.max_concurrent_builds;
        let static_budget =
            crate::static_files::MemoryBudget::new(parts.config.limits.static_cache_mb << 20);
        let workspaces = workspaces::Workspaces::new(
            &parts.config.data_dir,
            parts.config.limits.build_disk_mb,
            parts.volumes,
        );
        Arc::new(Pipeline {
            static_budget,
            live_hook: std::sync::OnceLock::new(),
            linked_addons: std::sync::OnceLock::new(),
            workspaces,
            config: parts.config,
            store: parts.store,
            hub: parts.hub,
            runner: parts.runner,
            routes: parts.routes,
            local: parts.local,
            cluster: parts.cluster,
            sources: parts.sources,
            secrets: parts.secrets,
            tls: parts.tls,
            https_addr: parts.https_addr,
            urls: parts.urls,
            inflight: inflight::InFlight::default(),
            deploy_locks: golive::DeployLocks::default(),
            build_slots: Arc::new(tokio::sync::Semaphore::new(build_slots)),
            shutdown: parts.shutdown,
            notifier: parts.notifier,
            metrics: parts.metrics,
        })
    }

    /// Where deployments and apps keep their files.
    pub fn workspaces(&self) -> &workspaces::Workspaces {
        &self.workspaces
    }

    /// The URL a deployment with `target` is served at: the project's, or its preview's.
    pub fn target_url(&self, slug: &str, target: &DeployTarget) -> String {
        self.urls.app(&host_label(slug, target))
    }

    /// Validates the source choice, records the run and its deployment, supersedes a run in
    /// flight for the project, and starts the steps.
    pub async fn provision(
        self: &Arc<Self>,
        project: &ProjectRecord,
        mut plan: RunPlan,
    ) -> Result<RunRecord, ProvisionError> {
        if let RunPlan::Build(request) = &mut plan {
            self.choose_source(project, request).await?;
            // A build may fill its workspace: that must not eat the store's reserve.
            self.workspaces
                .check_room_for_a_build()
                .map_err(|room| ProvisionError::Invalid(room.code, room.message))?;
        }
        let estimate = self.estimate(&project.id).await?;
        let (run, deployment) = new_records(project, &plan, estimate);
        let (run_copy, deployment_copy) = (run.clone(), deployment.clone());
        self.store
            .call(move |s| s.put_run_and_deployment(&run_copy, &deployment_copy))
            .await?;

        let active = Arc::new(ActiveRun {
            record: Mutex::new(run.clone()),
            cancel: self.shutdown.child_token(),
            reason: Mutex::new(None),
            shown_progress: AtomicU32::new(0),
        });
        let key = run_key(&project.id, &run.request.target);
        if let Some(older) = self.inflight.insert(&run.id, key, active.clone()) {
            *older.reason.lock().expect("reason poisoned") = Some(StopReason::Superseded);
            older.cancel.cancel();
        }
        tracing::info!(project = %project.slug, run = %run.id, deployment = %deployment.id, estimate_ms = estimate, "provisioning started");
        let this = self.clone();
        let project = project.clone();
        self.inflight
            .spawn(async move { this.execute(active, project, deployment, plan).await });
        Ok(run)
    }

    /// The median duration of the project's earlier successful runs.
    async fn estimate(&self, project_id: &str) -> Result<u64, ProvisionError> {
        let project_id = project_id.to_owned();
        let history = self
            .store
            .call(move |s| s.project_runs(&project_id))
            .await?;
        let mut successes: Vec<&RunRecord> = history
            .iter()
            .filter(|r| r.status == RunStatus::ProvisioningComplete && r.finished_ms.is_some())
            .collect();
        successes.sort_by_key(|r| std::cmp::Reverse(r.created_ms));
        let estimate = estimate_from_history(
            successes
                .iter()
                .filter_map(|r| r.finished_ms.map(|f| f - r.created_ms))
                .collect(),
        );
        Ok(estimate)
    }

    /// Fills in `source_id` or checks `git_url`, refusing a request with no source at all.
    async fn choose_source(
        &self,
        project: &ProjectRecord,
        request: &mut ProvisionRequest,
    ) -> Result<(), ProvisionError> {
        if let Some(source_id) = request.source_id.clone() {
            let id = source_id.clone();
            let record = self.store.call(move |s| s.source(&id)).await?;
            match record {
                Some(record) if record.project_id == project.id => return Ok(()),
                _ => {
                    return Err(ProvisionError::Invalid(
                        // An id that is not this project's is not found (404), as any id is.
                        ErrorCode::NotFound,
                        format!("sourceId {source_id:?} is not an upload of this project; upload with POST /api/projects/{}/source", project.slug),
                    ));
                }
            }
        }
        if let Some(url) = &request.git_url {
            crate::source::check_git_url(url).map_err(|error| {
                ProvisionError::Invalid(ErrorCode::InvalidGitUrl, error.to_string())
            })?;
            if let Some(git_ref) = &request.git_ref {
                crate::source::check_git_ref(git_ref).map_err(|error| {
                    ProvisionError::Invalid(ErrorCode::InvalidBody, format!("gitRef: {error}"))
                })?;
            }
            return Ok(());
        }
        let project_id = project.id.clone();
        match self.store.call(move |s| s.latest_source(&project_id)).await? {
            Some(latest) => {
                request.source_id = Some(latest.id);
                Ok(())
            }
            None => Err(ProvisionError::Invalid(
                ErrorCode::InvalidSourceMissing,
                format!(
                    "project {} has no source: upload a .tar.gz with POST /api/projects/{}/source, or pass gitUrl",
                    project.slug, project.slug
                ),
            )),
        }
    }
}

/// The run and the deployment a new run records: a new building deployment, or for a rollback
/// the earlier one it brings back.
fn new_records(
    project: &ProjectRecord,
    plan: &RunPlan,
    estimate: u64,
) -> (RunRecord, DeploymentRecord) {
    let now = crate::ids::now_ms();
    let (request, mut deployment) = match plan {
        RunPlan::Rollback(existing) => {
            let mut target = existing.target.clone();
            target.trigger = crate::store::records::Trigger::Rollback;
            let request = ProvisionRequest {
                project_slug: project.slug.clone(),
                build: crate::build_settings::BuildSettings {
                    health_check_path: existing.health_check_path.clone(),
                    ..Default::default()
                },
                target,
                ..Default::default()
            };
            (request, existing.clone())
        }
        RunPlan::Build(request) => (
            request.clone(),
            DeploymentRecord {
                v: 1,
                id: crate::ids::new_id("dpl_"),
                project_id: project.id.clone(),
                provisioning_id: String::new(),
                created_ms: now,
                finished_ms: None,
                state: DeploymentState::Building,
                mode: None,
                output_dir: None,
                start_command: None,
                processes: Default::default(),
                release_command: None,
                health_check_path: request.build.health_check_path.clone(),
                source_sha256: None,
                git_url: request.git_url.clone(),
                port: None,
                target: request.target.clone(),
            },
        ),
    };
    let run = RunRecord {
        v: 1,
        id: crate::ids::new_id("pvn_"),
        project_id: project.id.clone(),
        deployment_id: deployment.id.clone(),
        request,
        status: RunStatus::ProvisioningInProgress,
        steps: STEPS
            .iter()
            .map(|(name, _)| StepRecord {
                name: (*name).into(),
                state: StepState::Pending,
                started_ms: None,
                duration_ms: None,
            })
            .collect(),
        progress: 0,
        created_ms: now,
        finished_ms: None,
        estimate_ms: estimate,
        failed_step: None,
        error: None,
    };
    if let RunPlan::Build(_) = plan {
        deployment.provisioning_id = run.id.clone();
    }
    (run, deployment)
}

/// The status object as the log hub carries it to SSE followers.
pub fn status_event(status: &ProvisionStatus) -> std::sync::Arc<str> {
    serde_json::to_string(status)
        .expect("status objects serialize")
        .into()
}
