//! The release step (issue 33): a deployment's release command — `releaseCommand`, else the
//! Procfile's `release:` line — runs once, after the build and before the deploy step, as the
//! app would run: the new build read-only at `/app`, the app's environment and its `/data`,
//! the app's limits, the run's build deadline. Its output is the `release` log stream. A
//! non-zero exit fails the run with `RELEASE_FAILED`; nothing of the new deployment started,
//! so the live one keeps serving. A rollback runs none (the build it goes back to released
//! already). Each release is also listed among the project's runs (`trigger: "release"`).

use std::time::Duration;

use tokio::time::Instant;

use super::commands::BuildCommand;
use super::failure::Failure;
use super::Pipeline;
use crate::error_code::ErrorCode;
use crate::logs::LogStream;
use crate::store::jobs::{JobRunRecord, RunState, RunTrigger};
use crate::store::records::{DeploymentRecord, ProjectRecord, ProvisionRequest};

impl Pipeline {
    /// Runs the release command, if the build has one; `false` (skipped) when it has none.
    pub(super) async fn release(
        &self,
        project: &ProjectRecord,
        deployment: &mut DeploymentRecord,
        request: Option<&ProvisionRequest>,
        env: &[(String, String)],
    ) -> Result<bool, Failure> {
        let deadline = Instant::now() + Duration::from_secs(self.config.limits.build_timeout_s);
        let Some(request) = request else {
            return Ok(false);
        };
        let workspace = self.workspaces.workspace(&deployment.id);
        let set = request
            .build
            .release_command
            .clone()
            .filter(|c| !c.trim().is_empty());
        let Some(command) = set.or_else(|| procfile_release(&workspace)) else {
            return Ok(false);
        };
        deployment.release_command = Some(command.clone());
        self.hub
            .system(&deployment.id, &format!("release: $ {command}"));
        self.prepare_app_data(project, deployment)
            .await
            .map_err(|f| Failure::new("release", ErrorCode::ReleaseFailed, f.message))?;
        let data_dir = self.instance_data_dir(project, deployment);
        let release = BuildCommand {
            step: "release",
            failure_code: ErrorCode::ReleaseFailed,
            stream: LogStream::Release,
            command: &command,
            workspace: &workspace,
            cache: None,
            env,
            deadline,
            data_dir: Some(&data_dir),
        };
        let started_ms = crate::ids::now_ms();
        let result = self.run_command(project, &deployment.id, release).await;
        self.record_release(deployment, &command, started_ms, result.as_ref().err())
            .await;
        result?;
        self.hub
            .system(&deployment.id, "release: the command exited 0; deploying");
        Ok(true)
    }

    /// The release as a run (`trigger: "release"`) in the project's runs; its output is the
    /// deployment's `release` log stream, which the run's own log points to.
    async fn record_release(
        &self,
        deployment: &DeploymentRecord,
        command: &str,
        started_ms: u64,
        failure: Option<&Failure>,
    ) {
        let id = crate::ids::new_id("run_");
        let (state, exit_code) = match failure {
            None => (RunState::Succeeded, Some(0)),
            Some(_) => (RunState::Failed, None),
        };
        let record = JobRunRecord {
            v: 1,
            id: id.clone(),
            project_id: deployment.project_id.clone(),
            deployment_id: deployment.id.clone(),
            trigger: RunTrigger::Release,
            command: command.to_owned(),
            state,
            exit_code,
            created_ms: started_ms,
            started_ms: Some(started_ms),
            finished_ms: Some(crate::ids::now_ms()),
            job_id: None,
            scheduled_ms: None,
            timeout_s: self.config.limits.build_timeout_s,
            interactive: false,
            env_keys: Vec::new(),
            message: failure.map(|f| format!("{} (RELEASE_FAILED)", f.message)),
        };
        if let Err(error) = self.store.call(move |s| s.put_job_run(&record)).await {
            tracing::warn!(%error, "could not record the release as a run");
            return;
        }
        self.hub.system(
            &id,
            &format!(
                "release of {}: its output is in the deployment's log \
                 (GET /api/deployments/{}/logs?stream=release)",
                deployment.id, deployment.id
            ),
        );
        self.hub.end(&id);
    }
}

/// The Procfile's `release:` command (a Procfile that does not parse is the deploy step's to
/// report).
fn procfile_release(workspace: &std::path::Path) -> Option<String> {
    let text = crate::detect::read_tree_file(workspace, "Procfile")?;
    let mut types = crate::formation::parse_procfile(&text).ok()?;
    types.remove(crate::formation::RELEASE)
}
