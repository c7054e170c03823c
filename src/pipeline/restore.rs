//! Start-up recovery: runs that were in flight when the daemon stopped end `INTERRUPTED`, and
//! every live deployment is served again through the same path a deploy takes (`golive.rs`:
//! static output reloaded; apps adopted when the previous daemon left them running, else
//! started until healthy, several at once) before the daemon reports ready. Apps left running
//! that are no longer live are stopped.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;

use super::golive::Switch;
use super::Pipeline;
use crate::error_code::ErrorCode;
use crate::store::records::{DeploymentState, Environment, RunError, RunStatus, StepState};

/// Live deployments brought back at once: apps start in parallel up to this many.
const RESTORE_CONCURRENCY: usize = 8;

impl Pipeline {
    /// The app an earlier daemon left running for this deployment, taken (adopted once).
    pub(super) fn take_survivor(&self, deployment_id: &str) -> Option<crate::sandbox::AppHandle> {
        self.survivors
            .lock()
            .expect("survivors poisoned")
            .remove(deployment_id)
    }

    /// `survivors`: apps the previous daemon left running (deployment → handle), still alive.
    pub async fn restore(
        self: &Arc<Self>,
        survivors: HashMap<String, crate::sandbox::AppHandle>,
    ) -> crate::store::Result<()> {
        *self.survivors.lock().expect("survivors poisoned") = survivors;
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
                    self.remove_deployment_files(&deployment.id).await;
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

        let projects = self.store.call(|s| s.list_projects()).await?;
        let previews = self.store.call(|s| s.all_previews()).await?;
        let mut live: Vec<(crate::store::records::ProjectRecord, String)> = projects
            .iter()
            .filter_map(|p| Some((p.clone(), p.live_deployment_id.clone()?)))
            .collect();
        for preview in previews {
            let project = projects.iter().find(|p| p.id == preview.project_id);
            if let (Some(project), Some(id)) = (project, preview.deployment_id) {
                live.push((project.clone(), id));
            }
        }
        futures_util::stream::iter(live)
            .for_each_concurrent(RESTORE_CONCURRENCY, |(project, id)| {
                self.restore_deployment(project, id)
            })
            .await;
        let left_over: Vec<_> = self
            .survivors
            .lock()
            .expect("survivors poisoned")
            .drain()
            .collect();
        for (deployment_id, handle) in left_over {
            self.supervisor
                .stop_left_over(&deployment_id, &handle)
                .await;
        }
        Ok(())
    }

    /// Serves a live deployment (production's or a preview's) again.
    async fn restore_deployment(
        self: &Arc<Self>,
        project: crate::store::records::ProjectRecord,
        live: String,
    ) {
        let id = live.clone();
        let mut deployment = match self.store.call(move |s| s.deployment(&id)).await {
            Ok(Some(deployment)) => deployment,
            Ok(None) => return,
            Err(error) => {
                tracing::error!(project = %project.slug, %error, "cannot read the live deployment");
                return;
            }
        };
        let env = match self.environment(&project.id, &deployment.target).await {
            Ok((env, _)) => env,
            Err(error) => {
                tracing::error!(project = %project.slug, %error, "cannot restore the app's environment");
                return;
            }
        };
        let adopting = self
            .survivors
            .lock()
            .expect("survivors poisoned")
            .contains_key(&deployment.id);
        if !adopting {
            self.hub.system(
                &deployment.id,
                "daemon restarted: serving this deployment again",
            );
        }
        // The same path a deploy takes: prepare (load, adopt or start until healthy), switch.
        let restored = match self.prepare(&project, &mut deployment, &env).await {
            Ok(prepared) => {
                self.switch(&project, &deployment, prepared, Switch::Restore)
                    .await
            }
            Err(failure) => Err(failure),
        };
        match restored {
            Ok(()) => {
                tracing::info!(project = %project.slug, deployment = %deployment.id, adopted = adopting, "live deployment restored")
            }
            Err(failure) => {
                tracing::error!(project = %project.slug, code = %failure.code, message = %failure.message, "the live deployment did not come back; serving 503");
                match deployment.target.environment {
                    Environment::Production => self.routes.set_live(&project.slug, None),
                    Environment::Preview => self
                        .routes
                        .set_preview(&super::host_label(&project.slug, &deployment.target), None),
                }
            }
        }
    }
}
