//! One provisioning run, step by step: project_creation → domain_binding → environment_setup →
//! source → install → build → deploy → ssl_verification, then the atomic switch. The new
//! deployment only becomes live after every step succeeded, so a failed or canceled run never
//! touches the deployment that was live before it.

use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{ActiveRun, Pipeline, StopReason};
use crate::logs::{pump_lines, LogStream};
use crate::router::Target;
use crate::sandbox::{StepKind, StepSpec};
use crate::store::records::{
    DeploymentMode, DeploymentRecord, DeploymentState, ProjectRecord, RunError, RunStatus,
    StepState,
};
use crate::supervisor::AppSpec;

/// Why a run did not complete.
#[derive(Debug)]
pub(crate) struct Failure {
    pub step: &'static str,
    pub code: &'static str,
    pub message: String,
}

impl Failure {
    fn new(step: &'static str, code: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            step,
            code,
            message: message.into(),
        }
    }
}

/// What the deploy step prepared, activated after ssl_verification.
enum Prepared {
    Static {
        site: Arc<crate::static_files::StaticSite>,
    },
    Server {
        address: std::net::SocketAddr,
    },
}

/// How long a replaced app keeps serving in-flight requests before it is stopped.
pub(crate) const DRAIN_SECONDS: u64 = 10;

const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl Pipeline {
    pub(crate) async fn execute(
        self: Arc<Self>,
        active: Arc<ActiveRun>,
        project: ProjectRecord,
        mut deployment: DeploymentRecord,
        rollback: bool,
    ) {
        let (run_id, dpl) = {
            let record = active.record.lock().expect("run poisoned");
            (record.id.clone(), record.deployment_id.clone())
        };
        let what = if rollback { "rollback" } else { "provisioning" };
        self.hub.system(
            &dpl,
            &format!("{what} of {} started (run {run_id})", project.slug),
        );
        let started = Instant::now();
        let result = self
            .clone()
            .steps(&active, &project, &mut deployment, rollback)
            .await;
        let now = crate::ids::now_ms();
        let mut record = active.record.lock().expect("run poisoned").clone();
        record.finished_ms = Some(now);
        match result {
            Ok(prepared) => {
                record.status = RunStatus::ProvisioningComplete;
                record.progress = 100;
                deployment.state = DeploymentState::Live;
                deployment.finished_ms.get_or_insert(now);
                match self
                    .activate(&project, &record, &deployment, prepared)
                    .await
                {
                    Ok(()) => {
                        self.hub.system(
                            &dpl,
                            &format!(
                                "live at {} after {} ms",
                                self.app_url(&project.slug),
                                started.elapsed().as_millis()
                            ),
                        );
                    }
                    Err(failure) => {
                        self.hub.system(&dpl, &failure.message);
                        record.status = RunStatus::ProvisioningFailed;
                        record.error = Some(RunError {
                            code: failure.code.into(),
                            message: failure.message,
                        });
                    }
                }
            }
            Err(failure) => {
                let canceled = failure.code == "CANCELED";
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
                    code: failure.code.into(),
                    message: failure.message,
                });
                if !rollback {
                    deployment.state = if canceled {
                        DeploymentState::Canceled
                    } else {
                        DeploymentState::Failed
                    };
                    deployment.finished_ms = Some(now);
                }
                let (r, d) = (record.clone(), deployment.clone());
                if let Err(error) = self
                    .store
                    .call(move |s| s.record_unsuccessful(&r, &d, !canceled))
                    .await
                {
                    tracing::error!(%error, run = %record.id, "could not record the run's end");
                }
                if !rollback {
                    let dir = self.deployment_dir(&dpl);
                    let _ = tokio::task::spawn_blocking(move || remove_dir_all_quiet(&dir)).await;
                }
            }
        }
        *active.record.lock().expect("run poisoned") = record.clone();
        let status = self.status_of(&active, &record, now).await;
        self.hub.publish_status(&dpl, status);
        let static_done = deployment.mode == Some(DeploymentMode::Static);
        if record.status != RunStatus::ProvisioningComplete || static_done {
            self.hub.end(&dpl);
        }
        tracing::info!(run = %record.id, status = ?record.status, error = ?record.error.as_ref().map(|e| &e.code), "provisioning finished");
        self.finish(&record.id, &project.id);
    }

    async fn steps(
        self: Arc<Self>,
        active: &Arc<ActiveRun>,
        project: &ProjectRecord,
        deployment: &mut DeploymentRecord,
        rollback: bool,
    ) -> Result<Prepared, Failure> {
        let dpl = deployment.id.clone();
        let request = active.record.lock().expect("run poisoned").request.clone();
        let hostname = format!("{}.{}", project.slug, self.config.apps_domain);

        self.step(active, "project_creation", async { Ok(true) })
            .await?;

        self.step(active, "domain_binding", async {
            let slug = project.slug.clone();
            self.routes.update(|table| {
                table.apps.entry(slug).or_insert(None);
            });
            if let Some(tls) = &self.tls {
                tls.ensure_certificate(&hostname).await.map_err(|e| {
                    Failure::new(
                        "domain_binding",
                        "CERTIFICATE_FAILED",
                        format!("certificate for {hostname}: {e}"),
                    )
                })?;
            }
            self.hub
                .system(&dpl, &format!("bound {}", self.app_url(&project.slug)));
            Ok(true)
        })
        .await?;

        let env = self
            .step(active, "environment_setup", async {
                let env = self
                    .environment(&project.id)
                    .await
                    .map_err(|m| Failure::new("environment_setup", "INTERNAL_ERROR", m))?;
                self.hub
                    .system(&dpl, &format!("environment: {} project variable(s)", env.1));
                Ok(env.0)
            })
            .await?;

        let workspace = self.workspace(&dpl);
        let deadline = Instant::now() + Duration::from_secs(self.config.limits.build_timeout_s);
        if rollback {
            for name in ["source", "install", "build"] {
                self.skip(active, name).await;
            }
        } else {
            self.step(active, "source", async {
                self.fetch_source(project, &request, &workspace, &env, deadline, deployment)
                    .await
                    .map(|_| true)
            })
            .await?;
            for (name, command, stream, code) in [
                (
                    "install",
                    request.install_command.as_deref(),
                    LogStream::Install,
                    "INSTALL_FAILED",
                ),
                (
                    "build",
                    request.build_command.as_deref(),
                    LogStream::Build,
                    "BUILD_FAILED",
                ),
            ] {
                let Some(command) = command.filter(|c| !c.trim().is_empty()) else {
                    self.skip(active, name).await;
                    continue;
                };
                self.step(active, name, async {
                    self.hub.system(&dpl, &format!("{name}: $ {command}"));
                    self.run_command(
                        project, &dpl, name, code, stream, command, &workspace, &env, deadline,
                    )
                    .await
                    .map(|_| true)
                })
                .await?;
            }
        }

        let prepared = self
            .step(active, "deploy", async {
                if !rollback {
                    let start = request
                        .start_command
                        .clone()
                        .filter(|c| !c.trim().is_empty());
                    deployment.mode = Some(if start.is_some() {
                        DeploymentMode::Server
                    } else {
                        DeploymentMode::Static
                    });
                    deployment.start_command = start;
                    deployment.health_check_path = request.health_check_path.clone();
                    if deployment.mode == Some(DeploymentMode::Static) {
                        deployment.output_dir = Some(choose_output_dir(
                            &workspace,
                            request.output_directory.as_deref(),
                        )?);
                    }
                }
                self.prepare(project, deployment, &env).await
            })
            .await?;

        let verified = self
            .step(active, "ssl_verification", async {
                let (Some(tls), Some(addr)) = (&self.tls, self.https_addr) else {
                    return Ok(false);
                };
                tls.verify(&hostname, addr).await.map_err(|e| {
                    Failure::new(
                        "ssl_verification",
                        "CERTIFICATE_FAILED",
                        format!("{hostname}: {e}"),
                    )
                })?;
                self.hub.system(
                    &dpl,
                    &format!("verified the certificate served for {hostname}"),
                );
                Ok(true)
            })
            .await;
        if let Err(failure) = verified {
            if let Prepared::Server { .. } = prepared {
                if !rollback || !self.is_live(project, &dpl) {
                    self.supervisor.stop(&dpl).await;
                }
            }
            return Err(failure);
        }
        Ok(prepared)
    }

    fn is_live(&self, project: &ProjectRecord, dpl: &str) -> bool {
        matches!(self.routes.snapshot().apps.get(&project.slug), Some(Some(target)) if target.deployment_id() == dpl)
    }

    /// Runs one step: marks it running, races it against cancellation, records the result.
    /// The future answers `true` for done, `false` for skipped.
    async fn step<T>(
        &self,
        active: &Arc<ActiveRun>,
        name: &'static str,
        work: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure>
    where
        T: StepValue,
    {
        let started_ms = crate::ids::now_ms();
        self.set_step(active, name, StepState::Running, Some(started_ms), None)
            .await;
        let started = Instant::now();
        let result = tokio::select! {
            result = work => result,
            _ = active.cancel.cancelled() => Err(self.stop_failure(active, name)),
        };
        let duration = Some(started.elapsed().as_millis() as u64);
        match &result {
            Ok(value) if !value.skipped() => {
                self.set_step(active, name, StepState::Succeeded, None, duration)
                    .await
            }
            Ok(_) => {
                self.set_step(active, name, StepState::Skipped, None, duration)
                    .await
            }
            Err(failure) if failure.code == "CANCELED" => {
                self.set_step(active, name, StepState::Skipped, None, duration)
                    .await
            }
            Err(_) => {
                self.set_step(active, name, StepState::Failed, None, duration)
                    .await
            }
        }
        result
    }

    async fn skip(&self, active: &Arc<ActiveRun>, name: &'static str) {
        self.set_step(
            active,
            name,
            StepState::Skipped,
            Some(crate::ids::now_ms()),
            Some(0),
        )
        .await;
    }

    fn stop_failure(&self, active: &ActiveRun, step: &'static str) -> Failure {
        match *active.reason.lock().expect("reason poisoned") {
            Some(StopReason::Superseded) => Failure::new(
                step,
                "CANCELED",
                "superseded by a newer provisioning run of this project",
            ),
            Some(StopReason::Interrupted) | None => Failure::new(
                step,
                "INTERRUPTED",
                "the daemon stopped while this run was in progress; provision again",
            ),
        }
    }

    async fn set_step(
        &self,
        active: &Arc<ActiveRun>,
        name: &str,
        state: StepState,
        started_ms: Option<u64>,
        duration_ms: Option<u64>,
    ) {
        let record = {
            let mut record = active.record.lock().expect("run poisoned");
            if let Some(step) = record.steps.iter_mut().find(|s| s.name == name) {
                step.state = state;
                if started_ms.is_some() {
                    step.started_ms = started_ms;
                }
                if duration_ms.is_some() {
                    step.duration_ms = duration_ms;
                }
            }
            record.clone()
        };
        let status = self.status_of(active, &record, crate::ids::now_ms()).await;
        let mut stored = record.clone();
        stored.progress = active
            .shown_progress
            .load(std::sync::atomic::Ordering::Relaxed);
        if let Err(error) = self.store.call(move |s| s.put_run(&stored)).await {
            tracing::error!(%error, "could not record step progress");
        }
        self.hub.publish_status(&record.deployment_id, status);
    }

    /// The step environment: a fixed PATH and locale, the allow-listed host variables, then
    /// the project's variables. Returns (env, number of project variables).
    pub(crate) async fn environment(
        &self,
        project_id: &str,
    ) -> Result<(Vec<(String, String)>, usize), String> {
        let id = project_id.to_owned();
        let sealed = self
            .store
            .call(move |s| s.env_vars(&id))
            .await
            .map_err(|e| e.to_string())?;
        let mut env = vec![
            ("PATH".to_owned(), PATH.to_owned()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ];
        for name in &self.config.sandbox.pass_env {
            if let Ok(value) = std::env::var(name) {
                env.push((name.clone(), value));
            }
        }
        let count = sealed.len();
        for (key, value) in sealed {
            let plain = self
                .secrets
                .open(&crate::api::env_context(project_id, &key), &value)
                .map_err(|e| format!("cannot decrypt variable {key}: {e}"))?;
            env.retain(|(k, _)| *k != key);
            env.push((key, String::from_utf8_lossy(&plain).into_owned()));
        }
        Ok((env, count))
    }

    async fn fetch_source(
        &self,
        project: &ProjectRecord,
        request: &crate::store::records::ProvisionRequest,
        workspace: &Path,
        env: &[(String, String)],
        deadline: Instant,
        deployment: &mut DeploymentRecord,
    ) -> Result<(), Failure> {
        let dpl = deployment.id.clone();
        let fail = |message: String| Failure::new("source", "SOURCE_FAILED", message);
        let dir = workspace.to_owned();
        tokio::task::spawn_blocking(move || {
            remove_dir_all_quiet(&dir);
            std::fs::create_dir_all(&dir)
        })
        .await
        .expect("blocking task")
        .map_err(|e| fail(format!("cannot create the workspace: {e}")))?;
        self.prepare_workspace_owner(project, workspace).await;
        if let Some(source_id) = &request.source_id {
            let id = source_id.clone();
            let record = self
                .store
                .call(move |s| s.source(&id))
                .await
                .map_err(|e| fail(e.to_string()))?
                .ok_or_else(|| fail(format!("source {source_id} no longer exists")))?;
            self.hub.system(
                &dpl,
                &format!(
                    "source: unpacking {} ({} files, {} bytes)",
                    record.id, record.file_count, record.size_bytes
                ),
            );
            let (sources, sha, dest) = (
                self.sources.clone(),
                record.sha256.clone(),
                workspace.to_owned(),
            );
            let limits = super::source_limits(&self.config.limits);
            tokio::task::spawn_blocking(move || sources.unpack(&sha, &dest, &limits))
                .await
                .expect("blocking task")
                .map_err(|e| fail(format!("unpacking the source failed: {e}")))?;
            self.prepare_workspace_owner(project, workspace).await;
            deployment.source_sha256 = Some(record.sha256);
            return Ok(());
        }
        let url = request
            .git_url
            .as_deref()
            .ok_or_else(|| fail("no source".into()))?;
        let command = crate::source::git_clone_command(url, request.git_ref.as_deref())
            .map_err(|e| fail(e.to_string()))?;
        self.hub.system(&dpl, &format!("source: cloning {url}"));
        self.run_command(
            project,
            &dpl,
            "source",
            "SOURCE_FAILED",
            LogStream::System,
            &command,
            workspace,
            env,
            deadline,
        )
        .await
    }

    /// In namespaces mode the project's code runs as its own uid: hand it the workspace.
    async fn prepare_workspace_owner(&self, project: &ProjectRecord, workspace: &Path) {
        if self.config.sandbox.mode != crate::config::SandboxMode::Namespaces {
            return;
        }
        let (dir, uid) = (workspace.to_owned(), project.uid);
        let result =
            tokio::task::spawn_blocking(move || crate::sandbox::hand_over(&dir, uid)).await;
        if let Ok(Err(error)) = result {
            tracing::warn!(%error, "could not hand the workspace to the project's uid");
        }
    }

    /// Runs a build-kind command in the workspace; output goes to the logs as it comes.
    #[allow(clippy::too_many_arguments)]
    async fn run_command(
        &self,
        project: &ProjectRecord,
        dpl: &str,
        step: &'static str,
        code: &'static str,
        stream: LogStream,
        command: &str,
        workspace: &Path,
        env: &[(String, String)],
        deadline: Instant,
    ) -> Result<(), Failure> {
        let spec = StepSpec {
            name: format!("slipway-{dpl}-{step}"),
            kind: StepKind::Build {
                workspace: workspace.to_owned(),
            },
            command: command.to_owned(),
            env: env.to_vec(),
            project_uid: project.uid,
            memory_mb: self.config.limits.build_memory_mb,
            pids: self.config.limits.pids,
            cpus: 2.0,
            stop_grace: Duration::from_secs(5),
        };
        let runner = self.runner.clone();
        let mut running = tokio::task::spawn_blocking(move || runner.spawn(spec))
            .await
            .expect("blocking task")
            .map_err(|e| {
                Failure::new(
                    step,
                    code,
                    format!("could not start the {step} command: {e}"),
                )
            })?;
        let mut pumps = Vec::new();
        if let Some(stdout) = running.stdout.take() {
            pumps.push(tokio::spawn(pump_lines(
                stdout,
                self.hub.clone(),
                dpl.to_owned(),
                stream,
            )));
        }
        if let Some(stderr) = running.stderr.take() {
            pumps.push(tokio::spawn(pump_lines(
                stderr,
                self.hub.clone(),
                dpl.to_owned(),
                stream,
            )));
        }
        let exit = tokio::select! {
            exit = running.wait() => exit,
            _ = tokio::time::sleep_until(deadline) => {
                running.kill();
                let _ = running.stop(Duration::from_millis(100)).await;
                return Err(Failure::new(step, "TIMEOUT", format!(
                    "the build did not finish within {} s (limits.build_timeout_s); the {step} command was stopped",
                    self.config.limits.build_timeout_s
                )));
            }
        };
        for pump in pumps {
            let _ = tokio::time::timeout(Duration::from_secs(2), pump).await;
        }
        match exit {
            Ok(exit) if exit.success() => Ok(()),
            Ok(exit) => Err(Failure::new(
                step,
                code,
                format!("the {step} command {}", exit.describe()),
            )),
            Err(error) => Err(Failure::new(
                step,
                code,
                format!("the {step} command could not be waited for: {error}"),
            )),
        }
    }

    /// The deploy step: load the static output, or start the app and wait until it is healthy.
    async fn prepare(
        &self,
        project: &ProjectRecord,
        deployment: &mut DeploymentRecord,
        env: &[(String, String)],
    ) -> Result<Prepared, Failure> {
        let workspace = self.workspace(&deployment.id);
        match deployment.mode {
            Some(DeploymentMode::Static) | None => {
                let output = deployment.output_dir.clone().unwrap_or_default();
                let root = workspace.join(&output);
                self.hub.system(
                    &deployment.id,
                    &format!(
                        "deploy: serving static files from {}",
                        if output.is_empty() { "." } else { &output }
                    ),
                );
                let site = tokio::task::spawn_blocking(move || {
                    crate::static_files::StaticSite::load(&root)
                })
                .await
                .expect("blocking task")
                .map_err(|e| {
                    Failure::new(
                        "deploy",
                        "START_FAILED",
                        format!("cannot load the static output: {e}"),
                    )
                })?;
                Ok(Prepared::Static {
                    site: Arc::new(site),
                })
            }
            Some(DeploymentMode::Server) => {
                if self.supervisor.is_running(&deployment.id) {
                    // A rollback to the deployment that is still running (e.g. being drained).
                    self.supervisor.stop(&deployment.id).await;
                }
                let port = deployment
                    .port
                    .filter(|p| port_is_free(*p))
                    .map_or_else(free_port, Ok)
                    .map_err(|e| {
                        Failure::new("deploy", "START_FAILED", format!("no free port: {e}"))
                    })?;
                deployment.port = Some(port);
                let command = deployment.start_command.clone().unwrap_or_default();
                self.hub.system(
                    &deployment.id,
                    &format!("deploy: $ {command} (PORT={port})"),
                );
                let spec = self.app_spec(project, deployment, env.to_vec(), port);
                let address = self
                    .supervisor
                    .start(
                        spec,
                        Duration::from_secs(self.config.limits.health_timeout_s),
                    )
                    .await
                    .map_err(|f| Failure::new("deploy", f.code, f.message))?;
                Ok(Prepared::Server { address })
            }
        }
    }

    pub(crate) fn app_spec(
        &self,
        project: &ProjectRecord,
        deployment: &DeploymentRecord,
        env: Vec<(String, String)>,
        port: u16,
    ) -> AppSpec {
        AppSpec {
            deployment_id: deployment.id.clone(),
            slug: project.slug.clone(),
            uid: project.uid,
            root: self.workspace(&deployment.id),
            data_dir: self.app_data_dir(&project.id),
            command: deployment.start_command.clone().unwrap_or_default(),
            env,
            port,
            health_check_path: deployment.health_check_path.clone(),
            memory_mb: self.config.limits.app_memory_mb,
            pids: self.config.limits.pids,
        }
    }

    /// The atomic switch: record, route, then drain and stop the previous deployment.
    async fn activate(
        &self,
        project: &ProjectRecord,
        run: &crate::store::records::RunRecord,
        deployment: &DeploymentRecord,
        prepared: Prepared,
    ) -> Result<(), Failure> {
        let lock = self.deploy_lock(&project.id);
        let _guard = lock.lock().await;
        let (r, d) = (run.clone(), deployment.clone());
        let previous = self
            .store
            .call(move |s| s.activate(&r, &d))
            .await
            .map_err(|e| {
                Failure::new(
                    "deploy",
                    "INTERNAL_ERROR",
                    format!("could not record the deployment: {e}"),
                )
            })?;
        let target = match prepared {
            Prepared::Static { site } => Target::Static {
                site,
                deployment_id: deployment.id.clone(),
            },
            Prepared::Server { address } => Target::Proxy {
                upstream: address,
                deployment_id: deployment.id.clone(),
            },
        };
        let slug = project.slug.clone();
        self.routes.update(|table| {
            table.apps.insert(slug, Some(target));
        });
        if let Some(previous) = previous {
            self.hub
                .system(&previous, &format!("replaced by {}", deployment.id));
            self.hub.end(&previous);
            let supervisor = self.supervisor.clone();
            let drain = DRAIN_SECONDS;
            tokio::spawn(async move {
                // In-flight requests to the old app finish during the drain period.
                tokio::time::sleep(Duration::from_secs(drain)).await;
                supervisor.stop(&previous).await;
            });
        }
        self.retain_recent(project).await;
        Ok(())
    }

    /// Keeps logs of the last 10 deployments and workspaces of the last 5 (rollback targets).
    async fn retain_recent(&self, project: &ProjectRecord) {
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
            {
                continue;
            }
            if index >= 5 || deployment.state != DeploymentState::Inactive {
                let dir = self.deployment_dir(&deployment.id);
                let _ = tokio::task::spawn_blocking(move || remove_dir_all_quiet(&dir)).await;
            }
            if index >= 10 {
                self.hub.remove(&deployment.id);
                let id = deployment.id.clone();
                let _ = self.store.call(move |s| s.delete_logs(&id)).await;
            }
        }
    }
}

/// A step's result value: `bool` says done (true) or skipped (false); other values are done.
pub(crate) trait StepValue {
    fn skipped(&self) -> bool {
        false
    }
}
impl StepValue for bool {
    fn skipped(&self) -> bool {
        !*self
    }
}
impl StepValue for Vec<(String, String)> {}
impl StepValue for Prepared {}

/// The contract's rule: `outputDirectory`, else the first of dist, build, out, public that the
/// build produced, else the source root.
pub(crate) fn choose_output_dir(
    workspace: &Path,
    requested: Option<&str>,
) -> Result<String, Failure> {
    if let Some(requested) = requested.filter(|r| !r.trim().is_empty()) {
        let relative = Path::new(requested.trim_start_matches("./"));
        let safe = relative
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if !safe {
            return Err(Failure::new(
                "deploy",
                "START_FAILED",
                format!("outputDirectory {requested:?} must be a relative path inside the project"),
            ));
        }
        // The daemon reads the output as root: a symlink anywhere on the way (made by the
        // build) would publish whatever it points at on the host, the store included.
        let mut path = workspace.to_owned();
        for component in relative.components() {
            path.push(component);
            match std::fs::symlink_metadata(&path) {
                Ok(metadata) if metadata.file_type().is_symlink() => {
                    return Err(Failure::new(
                        "deploy",
                        "START_FAILED",
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
                        "START_FAILED",
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

pub(crate) fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

fn port_is_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

pub(crate) fn remove_dir_all_quiet(dir: &PathBuf) {
    if let Err(error) = std::fs::remove_dir_all(dir) {
        if error.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), %error, "could not remove a directory");
        }
    }
}
