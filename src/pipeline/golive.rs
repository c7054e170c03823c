//! Bringing a deployment live: the one path that deploy, rollback and start-up restore share.
//! `prepare` is the deploy step (load the static output, or start the app until it is
//! healthy); `switch` points the route at it — for a run, after recording it live in the store
//! under the project's lock, then draining and stopping the previous deployment. Also keeps
//! only recent builds and logs, and picks the output directory.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::failure::{deploy_blocking, Failure};
use super::instances::{Launch, WebInstance};
use super::Pipeline;
use crate::error_code::ErrorCode;
use crate::formation::ProcessType;
use crate::router::Target;
use crate::store::git::PreviewSwitch;
use crate::store::records::{
    DeploymentMode, DeploymentRecord, DeploymentState, Environment, ProjectRecord, RunRecord,
};
use crate::supervisor::backend::AppBackend;

/// What the deploy step prepared: the target the route will point at.
pub(super) enum Prepared {
    Static {
        site: Arc<crate::static_files::StaticSite>,
    },
    Server {
        /// The healthy `web` instances.
        web: Vec<WebInstance>,
        /// Every type the deployment runs; the `replace` ones start after the switch.
        types: Vec<ProcessType>,
        launch: Box<Launch>,
        /// Where they run.
        backend: Arc<dyn AppBackend>,
    },
}

impl Prepared {
    fn target(&self, deployment_id: &str) -> Target {
        match self {
            Prepared::Static { site } => Target::Static {
                site: site.clone(),
                deployment_id: deployment_id.to_owned(),
            },
            Prepared::Server { web, types, .. } => {
                let affinity = types
                    .iter()
                    .find(|t| t.is_web())
                    .map(|t| t.affinity)
                    .unwrap_or_default();
                super::server_target(deployment_id, web, affinity)
            }
        }
    }
}

/// How a switch is recorded.
pub(super) enum Switch<'a> {
    /// A run succeeded: the run and its deployment are recorded live in one transaction, then
    /// the previous deployment drains and stops.
    Run(&'a RunRecord),
    /// Start-up: the store already names this deployment live (its port may have changed).
    Restore,
}

/// One lock per project: its switches (deploy, rollback, restore, preview) happen one at a
/// time.
#[derive(Default)]
pub(super) struct DeployLocks(
    std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
);

impl DeployLocks {
    pub(super) fn of(&self, project_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.0.lock().expect("locks poisoned");
        locks.entry(project_id.to_owned()).or_default().clone()
    }
}

impl Pipeline {
    /// The deploy step: load the static output, or start the app and wait until it is healthy.
    /// The deploy step: the workspace mounted, then the static output loaded or the app
    /// started until healthy.
    pub(super) async fn prepare(
        &self,
        project: &ProjectRecord,
        deployment: &mut DeploymentRecord,
        env: &[(String, String)],
    ) -> Result<Prepared, Failure> {
        self.mount_workspace(&deployment.id).await?;
        match deployment.mode {
            Some(DeploymentMode::Static) | None => self.load_static(deployment).await,
            Some(DeploymentMode::Server) => self.start_server(project, deployment, env).await,
        }
    }

    /// After a reboot (or for a rollback target) the workspace's image is mounted again.
    async fn mount_workspace(&self, deployment_id: &str) -> Result<(), Failure> {
        let volume = self.workspaces.workspace_volume(deployment_id);
        let volumes = self.workspaces.volumes().clone();
        deploy_blocking("cannot mount the deployment's workspace", move || {
            volumes.ensure_mounted(&volume)
        })
        .await
    }

    async fn load_static(&self, deployment: &DeploymentRecord) -> Result<Prepared, Failure> {
        let workspace = self.workspaces.workspace(&deployment.id);
        let output = deployment.output_dir.clone().unwrap_or_default();
        let root = workspace.join(&output);
        self.hub.system(
            &deployment.id,
            &format!(
                "deploy: serving static files from {}",
                if output.is_empty() { "." } else { &output }
            ),
        );
        let budget = self.static_budget.clone();
        let site = deploy_blocking("cannot load the static output", move || {
            crate::static_files::StaticSite::load_shared(&root, &budget)
        })
        .await?;
        Ok(Prepared::Static {
            site: Arc::new(site),
        })
    }

    async fn start_server(
        &self,
        project: &ProjectRecord,
        deployment: &mut DeploymentRecord,
        env: &[(String, String)],
    ) -> Result<Prepared, Failure> {
        if self.app_runs(&deployment.id) {
            // A rollback to the deployment that is still running (e.g. being drained).
            self.stop_app(&deployment.id, None).await;
        }
        // Apps the previous daemon left running keep their port.
        let adopting = self.local.has_survivors(&deployment.id);
        let port = self
            .local
            .deployment_port(&deployment.id, deployment.port)
            .map_err(|e| {
                Failure::new(
                    "deploy",
                    ErrorCode::StartFailed,
                    format!("no free port: {e}"),
                )
            })?;
        deployment.port = Some(port);
        let types = self.process_types(deployment).await?;
        if !adopting {
            for ptype in &types {
                let port = match ptype.is_web() {
                    true => format!(" (PORT={port})"),
                    false => String::new(),
                };
                self.hub.system(
                    &deployment.id,
                    &format!(
                        "deploy: {}={} × $ {}{port}",
                        ptype.name, ptype.instances, ptype.command
                    ),
                );
            }
        }
        self.prepare_app_data(project, deployment).await?;
        let launch = Launch {
            project: project.clone(),
            deployment: deployment.clone(),
            env: env.to_vec(),
            reach: self.addon_reach(&project.id, &deployment.target).await,
        };
        let backend = self.backend_for(project);
        let web = self.start_overlapping(&backend, &launch, &types).await?;
        Ok(Prepared::Server {
            web,
            types,
            launch: Box::new(launch),
            backend,
        })
    }

    /// The atomic switch: the route points at `prepared` from the next request on.
    pub(super) async fn switch(
        &self,
        project: &ProjectRecord,
        deployment: &DeploymentRecord,
        prepared: Prepared,
        how: Switch<'_>,
    ) -> Result<(), Failure> {
        let lock = self.deploy_locks.of(&project.id);
        let _guard = lock.lock().await;
        let preview = match deployment.target.environment {
            Environment::Production => None,
            Environment::Preview => deployment.target.preview.clone(),
        };
        let previous = self
            .record_switch(project, deployment, &prepared, &how, preview.as_deref())
            .await?;
        let target = Some(prepared.target(&deployment.id));
        match &preview {
            None => self.routes.set_live(&project.slug, target),
            Some(_) => self.routes.set_preview(
                &super::host_label(&project.slug, &deployment.target),
                target,
            ),
        }
        if let Prepared::Server {
            types,
            launch,
            backend,
            ..
        } = &prepared
        {
            self.start_replacing(backend, launch, types, previous.as_deref())
                .await;
        }
        if let Some(previous) = previous {
            self.retire(previous, &deployment.id, preview.is_some());
        }
        if let (Switch::Run(_), None) = (&how, &preview) {
            self.retain_recent(project).await;
            if let Some(hook) = self.live_hook.get() {
                let workspace = self.workspaces.workspace(&deployment.id);
                hook(project.clone(), deployment.clone(), workspace).await;
            }
        }
        Ok(())
    }

    /// Sets what is told when a production deployment goes live (once, at start-up).
    pub fn on_live(&self, hook: super::LiveHook) {
        let _ = self.live_hook.set(hook);
    }

    /// Records the switch in the store (a run: the deployment live in one transaction with
    /// its run; a restore: checked to be still the live one); the deployment it replaced.
    async fn record_switch(
        &self,
        project: &ProjectRecord,
        deployment: &DeploymentRecord,
        prepared: &Prepared,
        how: &Switch<'_>,
        preview: Option<&str>,
    ) -> Result<Option<String>, Failure> {
        let d = deployment.clone();
        let recorded = match (how, preview) {
            (Switch::Run(run), None) => {
                let r = (*run).clone();
                self.store.call(move |s| s.activate(&r, &d)).await
            }
            (Switch::Run(run), Some(name)) => {
                let (r, name) = ((*run).clone(), name.to_owned());
                match self
                    .store
                    .call(move |s| s.activate_preview(&r, &d, &name))
                    .await
                {
                    Ok(PreviewSwitch::Switched(previous)) => Ok(previous),
                    Ok(PreviewSwitch::Gone) => {
                        return Err(Failure::new(
                            "deploy",
                            ErrorCode::Canceled,
                            "the preview was torn down while this run was in progress",
                        ))
                    }
                    Err(error) => Err(error),
                }
            }
            (Switch::Restore, _) => {
                // A retried restore lost to a deploy or rollback made since start-up.
                if !self.is_recorded_live(project, deployment).await {
                    if let Prepared::Server { .. } = prepared {
                        self.stop_app(&deployment.id, None).await;
                    }
                    return Err(Failure::new(
                        "deploy",
                        ErrorCode::Canceled,
                        "another deployment went live meanwhile",
                    ));
                }
                self.store
                    .call(move |s| s.put_deployment(&d))
                    .await
                    .map(|()| None)
            }
        };
        recorded.map_err(|e| {
            Failure::new(
                "deploy",
                ErrorCode::InternalError,
                format!("could not record the deployment: {e}"),
            )
        })
    }

    /// The deployment `replacement` replaced: its log stream ends, and after the drain period
    /// (in-flight requests finish) its app stops; a preview's build is removed too.
    fn retire(&self, previous: String, replacement: &str, is_preview: bool) {
        self.hub
            .system(&previous, &format!("replaced by {replacement}"));
        self.hub.end(&previous);
        let backends = self.backends();
        let drain = Duration::from_secs(self.config.limits.app_drain_s);
        let (dir, volumes) = (
            self.workspaces.deployment_dir(&previous),
            self.workspaces.volumes().clone(),
        );
        tokio::spawn(async move {
            // In-flight requests to the old app finish during the drain period.
            tokio::time::sleep(drain).await;
            super::backends::stop_everywhere(&backends, &previous, None).await;
            // A preview keeps only the build it serves (no rollbacks of previews).
            if is_preview {
                let _ = tokio::task::spawn_blocking(move || volumes.remove_tree(&dir)).await;
            }
        });
    }

    /// Keeps logs of the last 10 deployments and workspaces of the last 5 (rollback targets).
    pub(super) async fn retain_recent(&self, project: &ProjectRecord) {
        let id = project.id.clone();
        let Ok(deployments) = self.store.call(move |s| s.project_deployments(&id)).await else {
            return;
        };
        let live = self
            .routes
            .snapshot()
            .apps
            .get(&project.slug)
            .cloned()
            .flatten()
            .map(|t| t.deployment_id().to_owned());
        for (index, deployment) in deployments.iter().enumerate() {
            if Some(&deployment.id) == live.as_ref()
                || deployment.state == DeploymentState::Building
                || deployment.target.environment == Environment::Preview
            {
                continue;
            }
            if index >= 5 || deployment.state != DeploymentState::Inactive {
                self.workspaces
                    .remove_deployment_files(&deployment.id)
                    .await;
            }
            if index >= 10 {
                self.hub.remove(&deployment.id);
                let id = deployment.id.clone();
                let _ = self.store.call(move |s| s.delete_logs(&id)).await;
            }
        }
    }
}

/// The contract's rule: `outputDirectory`, else the first of dist, build, out, public that the
/// build produced, else the source root.
pub(crate) fn choose_output_dir(
    workspace: &Path,
    requested: Option<&str>,
) -> Result<String, Failure> {
    if let Some(requested) = requested.filter(|r| !r.trim().is_empty()) {
        let relative = crate::build_settings::output_directory(requested).ok_or_else(|| {
            Failure::new(
                "deploy",
                ErrorCode::StartFailed,
                format!("outputDirectory {requested:?} must be a relative path inside the project"),
            )
        })?;
        // The daemon reads the output as root: a symlink anywhere on the way (made by the
        // build) would publish whatever it points at on the host, the store included.
        let mut path = workspace.to_owned();
        for component in relative.components() {
            path.push(component);
            match std::fs::symlink_metadata(&path) {
                Ok(metadata) if metadata.file_type().is_symlink() => {
                    return Err(Failure::new(
                        "deploy",
                        ErrorCode::StartFailed,
                        format!(
                            "outputDirectory {requested:?} must not be or pass through a \
                             symbolic link"
                        ),
                    ))
                }
                Ok(metadata) if metadata.is_dir() => {}
                _ => {
                    return Err(Failure::new(
                        "deploy",
                        ErrorCode::StartFailed,
                        format!("outputDirectory {requested:?} does not exist after the build"),
                    ))
                }
            }
        }
        return Ok(relative.to_string_lossy().into_owned());
    }
    for candidate in ["dist", "build", "out", "public"] {
        let path = workspace.join(candidate);
        if path.is_dir() && !path.is_symlink() {
            return Ok(candidate.to_owned());
        }
    }
    Ok(String::new())
}
