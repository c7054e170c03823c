//! The sandbox of a one-off or cron run (issue 33): a fresh sandbox from the live deployment's
//! build, as its app runs — the build read-only at `/app`, the project's `/data`, its
//! environment (the project's variables as they are now, with the deployment's target), its uid
//! and egress rules, the app's memory, CPU and pids limits — in a cgroup of its own, not routed.
//! The run's lifecycle (records, logs, timeout, cancel) is the `jobs` module's.

use std::time::Duration;

use super::Pipeline;
use crate::sandbox::{Running, StepKind, StepSpec};
use crate::store::records::{DeploymentRecord, ProjectRecord};

/// What to start.
pub struct OneOff<'a> {
    /// `run_…`: names the sandbox (`slipway-run_…`) and is `SLIPWAY_RUN_ID` inside.
    pub run_id: &'a str,
    pub command: &'a str,
    /// Variables the request adds (over the project's).
    pub env: &'a [(String, String)],
    /// A terminal of this size (an interactive run), instead of stdout and stderr pipes.
    pub tty: Option<crate::sandbox::TtySize>,
}

impl Pipeline {
    /// Starts `run` in a sandbox of `deployment`'s build; an error says why it could not start.
    pub async fn start_one_off(
        &self,
        project: &ProjectRecord,
        deployment: &DeploymentRecord,
        run: OneOff<'_>,
    ) -> Result<Running, String> {
        let (mut env, _) = self.environment(&project.id, &deployment.target).await?;
        let mut set = |key: &str, value: &str| {
            env.retain(|(k, _)| k != key);
            env.push((key.to_owned(), value.to_owned()));
        };
        if let Some(port) = deployment.port {
            set("PORT", &port.to_string());
        }
        for (key, value) in run.env {
            set(key, value);
        }
        set("SLIPWAY_RUN_ID", run.run_id);
        self.prepare_app_data(project, deployment)
            .await
            .map_err(|failure| failure.message)?;
        let limits = &self.config.limits;
        let spec = StepSpec {
            name: format!("slipway-{}", run.run_id),
            kind: StepKind::OneOff {
                output: self.workspaces.workspace(&deployment.id),
                data_dir: self.instance_data_dir(project, deployment),
            },
            command: run.command.to_owned(),
            env,
            project_uid: project.uid,
            memory_mb: limits.app_memory_mb,
            pids: limits.pids,
            cpus: limits.app_cpus,
            stop_grace: Duration::from_secs(5),
            limited_dirs: Vec::new(),
            tty: run.tty,
            reach: self.addon_reach(&project.id, &deployment.target).await,
            serve_port: None,
            link: None,
        };
        let runner = self.runner.clone();
        tokio::task::spawn_blocking(move || runner.spawn(spec))
            .await
            .expect("blocking task")
            .map_err(|error| format!("the run's sandbox could not start: {error}"))
    }
}
