//! One provisioning run, step by step: project_creation → domain_binding → environment_setup →
//! source → install → build → deploy → ssl_verification, then the atomic switch. The new
//! deployment only becomes live after every step succeeded, so a failed or canceled run never
//! touches the deployment that was live before it.

use crate::error_code::ErrorCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::build::BuildRun;
use super::failure::Failure;
use super::golive::{choose_output_dir, Prepared, Switch};
use super::source_root::refuse_source_root;
use super::{ActiveRun, Pipeline, RunPlan};
use crate::metrics::RunResult;
use crate::notifications::{Event, EventKind};
use crate::store::records::{
    DeploymentMode, DeploymentRecord, DeploymentState, Environment, ProjectRecord,
    ProvisionRequest, RunError, RunRecord, RunStatus,
};

impl Pipeline {
    pub(crate) async fn execute(
        self: Arc<Self>,
        active: Arc<ActiveRun>,
        project: ProjectRecord,
        mut deployment: DeploymentRecord,
        plan: RunPlan,
    ) {
        let (run_id, dpl) = {
            let record = active.record.lock().expect("run poisoned");
            (record.id.clone(), record.deployment_id.clone())
        };
        let what = match plan {
            RunPlan::Build(_) => "provisioning",
            RunPlan::Rollback(_) => "rollback",
        };
        self.hub.system(
            &dpl,
            &format!("{what} of {} started (run {run_id})", project.slug),
        );
        let started = Instant::now();
        self.notifier.emit(
            Event::new(EventKind::DeploymentStarted)
                .project(&project.slug)
                .deployment(&dpl),
        );
        let result = self
            .clone()
            .steps(&active, &project, &mut deployment, &plan)
            .await;
        let now = crate::ids::now_ms();
        let mut record = active.record.lock().expect("run poisoned").clone();
        record.finished_ms = Some(now);
        match result {
            Ok(prepared) => {
                self.went_live(&project, &mut deployment, prepared, &mut record, started)
                    .await
            }
            Err(failure) => {
                self.failed(&project, &mut deployment, &mut record, &plan, failure)
                    .await
            }
        }
        *active.record.lock().expect("run poisoned") = record.clone();
        let status = self.status_of(&active, &record, now).await;
        self.hub.publish_status(&dpl, super::status_event(&status));
        let static_done = deployment.mode == Some(DeploymentMode::Static);
        if record.status != RunStatus::ProvisioningComplete || static_done {
            self.hub.end(&dpl);
        }
        tracing::info!(run = %record.id, status = ?record.status, error = ?record.error.as_ref().map(|e| &e.code), "provisioning finished");
        self.report_end(&record, &project, &dpl, started.elapsed());
        self.finish(&record.id, &project.id, &deployment.target);
    }

    /// The run's steps all succeeded: the switch, and the run's end in the log.
    async fn went_live(
        &self,
        project: &ProjectRecord,
        deployment: &mut DeploymentRecord,
        prepared: Prepared,
        record: &mut RunRecord,
        started: Instant,
    ) {
        let dpl = deployment.id.clone();
        record.status = RunStatus::ProvisioningComplete;
        record.progress = 100;
        deployment.state = DeploymentState::Live;
        deployment.finished_ms = deployment.finished_ms.or(record.finished_ms);
        match self
            .switch(project, deployment, prepared, Switch::Run(record))
            .await
        {
            Ok(()) => {
                self.hub.system(
                    &dpl,
                    &format!(
                        "live at {} after {} ms",
                        self.target_url(&project.slug, &deployment.target),
                        started.elapsed().as_millis()
                    ),
                );
            }
            Err(failure) => {
                self.hub.system(&dpl, &failure.message);
                record.status = RunStatus::ProvisioningFailed;
                record.error = Some(RunError {
                    code: failure.code,
                    message: failure.message,
                });
            }
        }
    }

    /// A step failed or the run was canceled: recorded, and what the run started removed
    /// (never the live deployment).
    async fn failed(
        &self,
        project: &ProjectRecord,
        deployment: &mut DeploymentRecord,
        record: &mut RunRecord,
        plan: &RunPlan,
        failure: Failure,
    ) {
        let dpl = deployment.id.clone();
        let what = match plan {
            RunPlan::Build(_) => "provisioning",
            RunPlan::Rollback(_) => "rollback",
        };
        let canceled = failure.code == ErrorCode::Canceled;
        record.status = if canceled {
            RunStatus::ProvisioningCanceled
        } else {
            RunStatus::ProvisioningFailed
        };
        record.failed_step = (!canceled).then(|| failure.step.to_owned());
        self.hub.system(
            &dpl,
            &format!(
                "{what} {}: {} ({})",
                if canceled { "canceled" } else { "failed" },
                failure.message,
                failure.code
            ),
        );
        record.error = Some(RunError {
            code: failure.code,
            message: failure.message,
        });
        if let RunPlan::Build(_) = plan {
            deployment.state = if canceled {
                DeploymentState::Canceled
            } else {
                DeploymentState::Failed
            };
            deployment.finished_ms = record.finished_ms;
        }
        let (r, d) = (record.clone(), deployment.clone());
        if let Err(error) = self
            .store
            .call(move |s| s.record_unsuccessful(&r, &d, !canceled))
            .await
        {
            tracing::error!(%error, run = %record.id, "could not record the run's end");
        }
        // An app this run started (a canceled deploy step drops the wait, not the app) must
        // not outlive the run, unless it is the live one (a rollback).
        if !self.is_live(project, deployment, &dpl) {
            self.stop_app(&dpl, None).await;
        }
        if let RunPlan::Build(_) = plan {
            self.workspaces.remove_deployment_files(&dpl).await;
        }
    }

    /// The run's end in the metrics and as a `deployment.*` event.
    fn report_end(
        &self,
        record: &RunRecord,
        project: &ProjectRecord,
        dpl: &str,
        elapsed: Duration,
    ) {
        let (result, kind) = match record.status {
            RunStatus::ProvisioningComplete => {
                (RunResult::Succeeded, EventKind::DeploymentSucceeded)
            }
            RunStatus::ProvisioningCanceled => (RunResult::Canceled, EventKind::DeploymentCanceled),
            _ => (RunResult::Failed, EventKind::DeploymentFailed),
        };
        self.metrics.record_run(result, elapsed);
        let mut event = Event::new(kind)
            .project(&project.slug)
            .deployment(dpl)
            .url(&self.target_url(&project.slug, &record.request.target));
        if let Some(error) = &record.error {
            event = event.error(&format!("{} ({})", error.message, error.code));
            if error.code == ErrorCode::ReleaseFailed {
                let mut release = event.clone();
                release.kind = EventKind::ReleaseFailed;
                self.notifier.emit(release);
            }
        }
        self.notifier.emit(event);
    }

    async fn steps(
        self: Arc<Self>,
        active: &Arc<ActiveRun>,
        project: &ProjectRecord,
        deployment: &mut DeploymentRecord,
        plan: &RunPlan,
    ) -> Result<Prepared, Failure> {
        let dpl = deployment.id.clone();
        let label = super::host_label(&project.slug, &deployment.target);
        let hostname = format!("{label}.{}", self.config.apps_domain);

        self.step(active, "project_creation", async { Ok(true) })
            .await?;

        self.step(
            active,
            "domain_binding",
            self.bind_domain(project, deployment, &hostname, &label),
        )
        .await?;

        let env = self
            .step(active, "environment_setup", async {
                let env = self
                    .environment(&project.id, &deployment.target)
                    .await
                    .map_err(|m| Failure::new("environment_setup", ErrorCode::InternalError, m))?;
                self.hub
                    .system(&dpl, &format!("environment: {} project variable(s)", env.1));
                Ok(env.0)
            })
            .await?;

        // Waiting for a build slot counts against neither the build timeout nor a step.
        let build_slot = match plan {
            RunPlan::Build(_) => Some(self.build_slot(active, &dpl).await?),
            RunPlan::Rollback(_) => None,
        };
        let workspace = self.workspaces.workspace(&dpl);
        let request = self.build(active, project, deployment, plan, &env).await?;

        // The release and deploy steps run the app, not a build: the next queued build may go.
        drop(build_slot);
        let release = self.release(project, deployment, request.as_ref(), &env);
        self.step(active, "release", release).await?;
        let prepared = self
            .step(active, "deploy", async {
                if let Some(request) = &request {
                    choose_mode(deployment, request, &workspace)?;
                }
                self.prepare(project, deployment, &env).await
            })
            .await?;

        let verified = self
            .step(
                active,
                "ssl_verification",
                self.verify_served(&hostname, &dpl),
            )
            .await;
        if let Err(failure) = verified {
            // The app this run started must not outlive it, unless it is the live one (a
            // rollback to the deployment being served).
            if let Prepared::Server { .. } = prepared {
                if !self.is_live(project, deployment, &dpl) {
                    self.stop_app(&dpl, None).await;
                }
            }
            return Err(failure);
        }
        Ok(prepared)
    }

    /// The source, install and build steps of a build (skipped for a rollback); the request
    /// as the build left it (detected commands filled in). `limits.build_timeout_s` bounds
    /// them together.
    async fn build(
        &self,
        active: &Arc<ActiveRun>,
        project: &ProjectRecord,
        deployment: &mut DeploymentRecord,
        plan: &RunPlan,
        env: &[(String, String)],
    ) -> Result<Option<ProvisionRequest>, Failure> {
        let RunPlan::Build(request) = plan else {
            for name in ["source", "install", "build"] {
                self.skip(active, name).await;
            }
            return Ok(None);
        };
        let mut request = request.clone();
        let dpl = deployment.id.clone();
        let workspace = self.workspaces.workspace(&dpl);
        let run = BuildRun {
            active,
            project,
            workspace: &workspace,
            env,
            deadline: Instant::now() + Duration::from_secs(self.config.limits.build_timeout_s),
            dpl: &dpl,
        };
        self.source_install_build(&run, &mut request, deployment)
            .await?;
        Ok(Some(request))
    }

    /// The `domain_binding` step: production's route exists, the host has a certificate.
    async fn bind_domain(
        &self,
        project: &ProjectRecord,
        deployment: &DeploymentRecord,
        hostname: &str,
        label: &str,
    ) -> Result<bool, Failure> {
        if deployment.target.environment == Environment::Production {
            self.routes.add_project(&project.slug);
        }
        if let Some(tls) = &self.tls {
            tls.ensure_certificate(hostname).await.map_err(|e| {
                Failure::new(
                    "domain_binding",
                    ErrorCode::CertificateFailed,
                    format!("certificate for {hostname}: {e}"),
                )
            })?;
        }
        self.hub
            .system(&deployment.id, &format!("bound {}", self.urls.app(label)));
        Ok(true)
    }

    /// The `ssl_verification` step: the certificate the router serves for the host verifies
    /// (skipped without TLS).
    async fn verify_served(&self, hostname: &str, dpl: &str) -> Result<bool, Failure> {
        let (Some(tls), Some(addr)) = (&self.tls, self.https_addr) else {
            return Ok(false);
        };
        tls.verify(hostname, addr).await.map_err(|e| {
            Failure::new(
                "ssl_verification",
                ErrorCode::CertificateFailed,
                format!("{hostname}: {e}"),
            )
        })?;
        self.hub.system(
            dpl,
            &format!("verified the certificate served for {hostname}"),
        );
        Ok(true)
    }

    /// One of `limits.max_concurrent_builds` slots; says so in the log when it has to wait.
    async fn build_slot(
        &self,
        active: &Arc<ActiveRun>,
        dpl: &str,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, Failure> {
        if let Ok(permit) = self.build_slots.clone().try_acquire_owned() {
            return Ok(permit);
        }
        self.hub.system(
            dpl,
            &format!(
                "waiting for a build slot: {} build(s) are running (limits.max_concurrent_builds)",
                self.config.limits.max_concurrent_builds
            ),
        );
        tokio::select! {
            permit = self.build_slots.clone().acquire_owned() => {
                Ok(permit.expect("the build slots are never closed"))
            }
            _ = active.cancel.cancelled() => Err(self.stop_failure(active, "source")),
        }
    }

    fn is_live(&self, project: &ProjectRecord, deployment: &DeploymentRecord, dpl: &str) -> bool {
        let label = super::host_label(&project.slug, &deployment.target);
        matches!(self.routes.snapshot().apps.get(&label), Some(Some(target)) if target.deployment_id() == dpl)
    }
}

/// A build's deployment mode: a server when it has a start command, else a static site from
/// its output directory (never the source root with server code in it).
fn choose_mode(
    deployment: &mut DeploymentRecord,
    request: &ProvisionRequest,
    workspace: &std::path::Path,
) -> Result<(), Failure> {
    let build = &request.build;
    let start = build.start_command.clone().filter(|c| !c.trim().is_empty());
    deployment.mode = Some(if start.is_some() {
        DeploymentMode::Server
    } else {
        DeploymentMode::Static
    });
    deployment.start_command = start;
    deployment.health_check_path = build.health_check_path.clone();
    if deployment.mode == Some(DeploymentMode::Server) {
        deployment.processes = procfile_processes(workspace)?;
    }
    if deployment.mode == Some(DeploymentMode::Static) {
        let requested = build
            .output_directory
            .as_deref()
            .filter(|o| !o.trim().is_empty());
        let output = choose_output_dir(workspace, requested)?;
        if output.is_empty() && requested.is_none() {
            refuse_source_root(workspace)?;
        }
        deployment.output_dir = Some(output);
    }
    Ok(())
}

/// The Procfile's process types besides `web` (that is `startCommand`) and `release`.
fn procfile_processes(
    workspace: &std::path::Path,
) -> Result<std::collections::BTreeMap<String, String>, Failure> {
    let Some(text) = crate::detect::read_tree_file(workspace, "Procfile") else {
        return Ok(Default::default());
    };
    let mut types = crate::formation::parse_procfile(&text)
        .map_err(|error| Failure::new("deploy", ErrorCode::StartFailed, error.to_string()))?;
    types.remove(crate::formation::WEB);
    types.remove(crate::formation::RELEASE);
    Ok(types)
}
