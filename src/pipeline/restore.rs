//! Start-up recovery: runs that were in flight when the daemon stopped end `INTERRUPTED`, and
//! every live deployment is served again through the same path a deploy takes (`golive.rs`:
//! static output reloaded; apps adopted when the previous daemon left them running, else
//! started until healthy, several at once) before the daemon reports ready. Then each backend
//! sweeps what is left of apps no longer live.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;

use super::failure::Failure;
use super::golive::Switch;
use super::Pipeline;
use crate::error_code::ErrorCode;
use crate::store::records::{
    DeploymentMode, DeploymentRecord, DeploymentState, Environment, ProjectRecord, RunError,
    RunStatus, StepState,
};

/// Live deployments brought back at once: apps start in parallel up to this many.
const RESTORE_CONCURRENCY: usize = 8;

impl Pipeline {
    /// `survivors`: instances the previous daemon left running (`dpl_…:web.1` → handle),
    /// still alive.
    pub async fn restore(
        self: &Arc<Self>,
        survivors: HashMap<String, crate::sandbox::AppHandle>,
    ) -> crate::store::Result<()> {
        self.local.set_survivors(survivors);
        self.end_interrupted_runs().await?;

        let projects = self.store.call(|s| s.list_projects()).await?;
        let previews = self.store.call(|s| s.all_previews()).await?;
        // (project, live deployment, the deployment recorded asleep there)
        let mut live: Vec<(ProjectRecord, String, Option<String>)> = projects
            .iter()
            .filter_map(|p| {
                let id = p.live_deployment_id.clone()?;
                Some((p.clone(), id, p.sleeping.clone()))
            })
            .collect();
        for preview in previews {
            let project = projects.iter().find(|p| p.id == preview.project_id);
            if let (Some(project), Some(id)) = (project, preview.deployment_id) {
                live.push((project.clone(), id, preview.sleeping));
            }
        }
        let live_ids: std::collections::HashSet<String> =
            live.iter().map(|(_, id, _)| id.clone()).collect();
        futures_util::stream::iter(live)
            .for_each_concurrent(RESTORE_CONCURRENCY, |(project, id, sleeping)| {
                self.restore_deployment(project, id, sleeping)
            })
            .await;
        for backend in self.backends() {
            backend.sweep(&live_ids).await;
        }
        Ok(())
    }

    /// Runs the last daemon left in progress end `INTERRUPTED`: their running step failed,
    /// a new build's workspace removed, its log stream ended.
    async fn end_interrupted_runs(&self) -> crate::store::Result<()> {
        let runs = self.store.call(|s| s.all_runs()).await?;
        for mut run in runs
            .into_iter()
            .filter(|r| r.status == RunStatus::ProvisioningInProgress)
        {
            let now = crate::ids::now_ms();
            let failed_step = run
                .steps
                .iter()
                .find(|s| s.state == StepState::Running)
                .map(|s| s.name.clone());
            for step in run
                .steps
                .iter_mut()
                .filter(|s| s.state == StepState::Running)
            {
                step.state = StepState::Failed;
                step.duration_ms = step.started_ms.map(|s| now.saturating_sub(s));
            }
            run.status = RunStatus::ProvisioningFailed;
            run.failed_step = failed_step.or_else(|| Some("project_creation".into()));
            run.error = Some(RunError {
                code: ErrorCode::Interrupted,
                message: "the daemon stopped while this run was in progress; provision again"
                    .into(),
            });
            run.finished_ms = Some(now);
            let id = run.deployment_id.clone();
            let deployment = self.store.call(move |s| s.deployment(&id)).await?;
            if let Some(mut deployment) = deployment {
                if deployment.state == DeploymentState::Building {
                    // A new build that never went live: its workspace goes (a rollback's
                    // deployment is an earlier build, kept).
                    deployment.state = DeploymentState::Failed;
                    deployment.finished_ms = Some(now);
                    self.workspaces
                        .remove_deployment_files(&deployment.id)
                        .await;
                }
                self.hub.system(
                    &deployment.id,
                    "provisioning interrupted: the daemon stopped while this run was in progress",
                );
                self.hub.end(&deployment.id);
                let r = run.clone();
                self.store
                    .call(move |s| s.record_unsuccessful(&r, &deployment, true))
                    .await?;
            } else {
                let r = run.clone();
                self.store.call(move |s| s.put_run(&r)).await?;
            }
            tracing::warn!(run = %run.id, "marked an interrupted provisioning run as failed (INTERRUPTED)");
        }
        Ok(())
    }

    /// Serves a live deployment (production's or a preview's) again. When that fails (the app
    /// exits, a volume cannot be mounted) its visitors get the "restarting" page and it is tried
    /// again in the background with the supervisor's backoff until it serves, is no longer live
    /// or the daemon stops: a site is never left at 503 because of one failed start.
    async fn restore_deployment(
        self: &Arc<Self>,
        project: ProjectRecord,
        live: String,
        sleeping: Option<String>,
    ) {
        let id = live.clone();
        let deployment = match self.store.call(move |s| s.deployment(&id)).await {
            Ok(Some(deployment)) => deployment,
            Ok(None) => return,
            Err(error) => {
                tracing::error!(project = %project.slug, %error, "cannot read the live deployment");
                return;
            }
        };
        if deployment.mode == Some(DeploymentMode::Server)
            && sleeping.as_deref() == Some(deployment.id.as_str())
        {
            // Asleep: the route waits for its first request; what an earlier daemon may
            // have left running of it is stopped with the other left-overs.
            self.restore_asleep(&project, &deployment);
            return;
        }
        let adopting = self.local.has_survivors(&deployment.id);
        if !adopting {
            self.hub.system(
                &deployment.id,
                "daemon restarted: serving this deployment again",
            );
        }
        let failure = match self.serve_again(&project, &deployment).await {
            Ok(()) => {
                tracing::info!(project = %project.slug, deployment = %deployment.id, adopted = adopting, "live deployment restored");
                return;
            }
            Err(failure) => failure,
        };
        tracing::error!(project = %project.slug, code = %failure.code, message = %failure.message,
            "the live deployment did not come back; visitors get the restarting page while it is tried again");
        // A server app's route waits for its address ("restarting"); a static site has nothing
        // to serve meanwhile.
        let waiting = (deployment.mode == Some(DeploymentMode::Server))
            .then(|| super::server_target(&deployment.id, &[], Default::default()));
        match deployment.target.environment {
            Environment::Production => self.routes.set_live(&project.slug, waiting),
            Environment::Preview => self.routes.set_preview(
                &super::host_label(&project.slug, &deployment.target),
                waiting,
            ),
        }
        let this = self.clone();
        tokio::spawn(async move { this.retry_restore(project, deployment, failure).await });
    }

    /// Tries a live deployment that did not come back again, 1 s after the failure, doubling
    /// up to 60 s.
    async fn retry_restore(
        self: Arc<Self>,
        project: crate::store::records::ProjectRecord,
        deployment: DeploymentRecord,
        mut failure: Failure,
    ) {
        let mut backoff = crate::supervisor::BACKOFF_START;
        loop {
            self.hub.system(
                &deployment.id,
                &format!(
                    "could not serve this deployment again ({}); trying again in {} s",
                    failure.message,
                    backoff.as_secs()
                ),
            );
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(crate::supervisor::BACKOFF_MAX);
            if !self.is_recorded_live(&project, &deployment).await {
                tracing::info!(project = %project.slug, deployment = %deployment.id, "no longer live: not trying it again");
                return;
            }
            match self.serve_again(&project, &deployment).await {
                Ok(()) => {
                    tracing::info!(project = %project.slug, deployment = %deployment.id, "live deployment restored after a retry");
                    return;
                }
                Err(again) => failure = again,
            }
        }
    }

    /// One attempt: the same path a deploy takes (prepare: load, adopt or start until healthy;
    /// then switch), with the environment as it is now.
    pub(super) async fn serve_again(
        &self,
        project: &crate::store::records::ProjectRecord,
        deployment: &DeploymentRecord,
    ) -> Result<(), Failure> {
        let mut deployment = deployment.clone();
        let (env, _) = self
            .environment(&project.id, &deployment.target)
            .await
            .map_err(|error| {
                Failure::new(
                    "deploy",
                    ErrorCode::InternalError,
                    format!("cannot read the app's environment: {error}"),
                )
            })?;
        let prepared = self.prepare(project, &mut deployment, &env).await?;
        self.switch(project, &deployment, prepared, Switch::Restore)
            .await
    }

    /// A sleeping app's route at start-up: asleep on `deployment`.
    fn restore_asleep(&self, project: &ProjectRecord, deployment: &DeploymentRecord) {
        let app = super::SleepingApp {
            project_id: project.id.clone(),
            preview: deployment.target.preview.clone(),
        };
        let settings = super::sleep_settings(project, &app, self.config.sleep.previews);
        let strategy = settings.map(|s| s.strategy).unwrap_or_default();
        let label = super::host_label(&project.slug, &deployment.target);
        let asleep = self.routes.asleep(&label, &deployment.id, strategy);
        match deployment.target.environment {
            Environment::Production => self.routes.set_live(&label, Some(asleep)),
            Environment::Preview => self.routes.set_preview(&label, Some(asleep)),
        }
        tracing::info!(app = %label, deployment = %deployment.id, "asleep: not started");
    }

    /// Whether `deployment` is still the one its project (or preview) serves: a deploy or a
    /// rollback since start-up ends the retries.
    pub(super) async fn is_recorded_live(
        &self,
        project: &crate::store::records::ProjectRecord,
        deployment: &DeploymentRecord,
    ) -> bool {
        let (project_id, id) = (project.id.clone(), deployment.id.clone());
        let preview = deployment.target.preview.clone();
        let environment = deployment.target.environment;
        self.store
            .call(move |s| -> crate::store::Result<bool> {
                Ok(match environment {
                    Environment::Production => s
                        .find_project(&project_id)?
                        .is_some_and(|p| p.live_deployment_id.as_deref() == Some(id.as_str())),
                    Environment::Preview => s.all_previews()?.iter().any(|p| {
                        p.project_id == project_id
                            && Some(&p.name) == preview.as_ref()
                            && p.deployment_id.as_deref() == Some(id.as_str())
                    }),
                })
            })
            .await
            .unwrap_or(false)
    }
}
