//! Start-up recovery: runs that were in flight when the daemon stopped end `INTERRUPTED`, and
//! every live deployment is served again (static output reloaded, apps restarted) before the
//! daemon reports ready.

use crate::error_code::ErrorCode;
use std::sync::Arc;
use std::time::Duration;

use super::deploy::free_port;
use super::Pipeline;
use crate::router::Target;
use crate::store::records::{DeploymentMode, DeploymentState, RunError, RunStatus, StepState};

impl Pipeline {
    pub async fn restore(self: &Arc<Self>) -> crate::store::Result<()> {
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
                    deployment.state = DeploymentState::Failed;
                    deployment.finished_ms = Some(now);
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
        for project in projects {
            let Some(live) = project.live_deployment_id.clone() else {
                continue;
            };
            let id = live.clone();
            let Some(mut deployment) = self.store.call(move |s| s.deployment(&id)).await? else {
                continue;
            };
            let target = match deployment.mode {
                Some(DeploymentMode::Server) => {
                    let env = match self.environment(&project.id).await {
                        Ok((env, _)) => env,
                        Err(error) => {
                            tracing::error!(project = %project.slug, %error, "cannot restore the app's environment");
                            continue;
                        }
                    };
                    let port = match deployment
                        .port
                        .filter(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
                    {
                        Some(port) => port,
                        None => match free_port() {
                            Ok(port) => port,
                            Err(_) => continue,
                        },
                    };
                    deployment.port = Some(port);
                    self.hub
                        .system(&deployment.id, "daemon restarted: starting the app again");
                    let spec = self.app_spec(&project, &deployment, env, port);
                    match self
                        .supervisor
                        .start(
                            spec,
                            Duration::from_secs(self.config.limits.health_timeout_s),
                        )
                        .await
                    {
                        Ok(address) => Some(Target::Proxy {
                            upstream: address,
                            deployment_id: deployment.id.clone(),
                        }),
                        Err(failure) => {
                            tracing::error!(project = %project.slug, code = %failure.code, message = %failure.message, "live app did not come back");
                            None
                        }
                    }
                }
                _ => {
                    let root = self
                        .workspace(&deployment.id)
                        .join(deployment.output_dir.clone().unwrap_or_default());
                    match tokio::task::spawn_blocking(move || {
                        crate::static_files::StaticSite::load(&root)
                    })
                    .await
                    {
                        Ok(Ok(site)) => Some(Target::Static {
                            site: Arc::new(site),
                            deployment_id: deployment.id.clone(),
                        }),
                        _ => {
                            tracing::error!(project = %project.slug, "the live static output is gone; serving 503");
                            None
                        }
                    }
                }
            };
            if target.is_some() {
                tracing::info!(project = %project.slug, deployment = %deployment.id, "live deployment restored");
                let d = deployment.clone();
                let _ = self.store.call(move |s| s.put_deployment(&d)).await;
            }
            self.routes.set_live(&project.slug, target);
        }
        Ok(())
    }
}
