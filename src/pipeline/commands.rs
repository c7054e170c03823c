//! The commands of a run: the step environment, fetching the source (unpack or git clone) and
//! running install/build commands through the sandbox runner with their output in the logs.

use std::path::Path;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::failure::Failure;
use super::Pipeline;
use crate::disk::Volume;
use crate::error_code::ErrorCode;
use crate::logs::{pump_lines, LogStream};
use crate::sandbox::{Exit, LimitedDir, Running, StepKind, StepSpec};
use crate::store::records::{DeploymentRecord, ProjectRecord};

/// The PATH every step and app gets.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One build-kind command of a run (source clone, install, build).
pub(super) struct BuildCommand<'a> {
    pub step: &'static str,
    /// The code the run fails with when the command does.
    pub failure_code: ErrorCode,
    /// Where its output goes in the logs.
    pub stream: LogStream,
    pub command: &'a str,
    pub workspace: &'a Path,
    /// The run's build cache (production's or its preview's), mounted at `/cache` (install
    /// and build steps).
    pub cache: Option<&'a Volume>,
    pub env: &'a [(String, String)],
    /// The run's build deadline (`limits.build_timeout_s` from its start).
    pub deadline: Instant,
    /// `Some`: the command runs as the app would (the release step): the built tree
    /// read-only at `/app`, this data dir at `/data`, the app's memory and CPU limits.
    pub data_dir: Option<&'a Path>,
}

impl Pipeline {
    /// The environment of a build or app: a fixed PATH and locale, `sandbox.pass_env`, the
    /// project's variables whose scope covers `target` (none for a fork's pull request), then
    /// `SLIPWAY_ENV` (`production` or `preview`) and for a preview `SLIPWAY_BRANCH` and
    /// `SLIPWAY_COMMIT`. Also how many project variables it got.
    pub(crate) async fn environment(
        &self,
        project_id: &str,
        target: &crate::store::records::DeployTarget,
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
        let sealed: Vec<(String, Vec<u8>)> = match target.fork {
            true => Vec::new(),
            false => sealed
                .into_iter()
                .filter(|var| {
                    var.scope
                        .as_ref()
                        .is_none_or(|scope| scope.applies_to(target))
                })
                .map(|var| (var.key, var.sealed))
                .collect(),
        };
        let count = sealed.len();
        let project_vars = self
            .secrets
            .open_env_vars(project_id, sealed)
            .map_err(|e| e.to_string())?;
        for (key, value) in project_vars {
            env.retain(|(k, _)| *k != key);
            env.push((key, value));
        }
        // Links to add-ons win over a variable of the same name.
        for (key, value) in self.addon_env(project_id, target).await? {
            env.retain(|(k, _)| *k != key);
            env.push((key, value));
        }
        let mut set = |key: &str, value: &str| {
            env.retain(|(k, _)| k != key);
            env.push((key.to_owned(), value.to_owned()));
        };
        match target.environment {
            crate::store::records::Environment::Production => set("SLIPWAY_ENV", "production"),
            crate::store::records::Environment::Preview => {
                set("SLIPWAY_ENV", "preview");
                set("SLIPWAY_BRANCH", target.branch.as_deref().unwrap_or(""));
                set("SLIPWAY_COMMIT", target.commit.as_deref().unwrap_or(""));
            }
        }
        Ok((env, count))
    }

    pub(super) async fn fetch_source(
        &self,
        project: &ProjectRecord,
        request: &crate::store::records::ProvisionRequest,
        workspace: &Path,
        env: &[(String, String)],
        deadline: Instant,
        deployment: &mut DeploymentRecord,
    ) -> Result<(), Failure> {
        let dpl = deployment.id.clone();
        let fail = |message: String| Failure::new("source", ErrorCode::SourceFailed, message);
        // A filesystem of its own (limits.build_disk_mb), empty.
        let volume = self.workspaces.workspace_volume(&dpl);
        let (volumes, uid) = (self.workspaces.volumes().clone(), project.uid);
        tokio::task::spawn_blocking(move || volumes.create(&volume, uid))
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
        let mut clone_env = env.to_vec();
        if let Some(credentials) = &request.git_credentials {
            clone_env.extend(crate::source::credential_env(credentials));
        }
        let clone = BuildCommand {
            step: "source",
            failure_code: ErrorCode::SourceFailed,
            stream: LogStream::System,
            command: &command,
            workspace,
            cache: None,
            env: &clone_env,
            deadline,
            data_dir: None,
        };
        self.run_command(project, &dpl, clone).await
    }

    /// In namespaces mode the project's code runs as its own uid: hand it the workspace.
    pub(super) async fn prepare_workspace_owner(&self, project: &ProjectRecord, workspace: &Path) {
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

    /// The build's disk-limited directories (workspace, cache) with the filesystems they must
    /// be on; an error when a volume that has an image is not what is mounted there.
    async fn limited_dirs(
        &self,
        dpl: &str,
        workspace: &Path,
        cache: Option<&Volume>,
    ) -> std::io::Result<Vec<LimitedDir>> {
        let mut wanted = vec![(workspace.to_owned(), self.workspaces.workspace_volume(dpl))];
        if let Some(cache) = cache {
            wanted.push((cache.dir.clone(), cache.clone()));
        }
        let volumes = self.workspaces.volumes().clone();
        tokio::task::spawn_blocking(move || {
            let mut limited = Vec::new();
            for (path, volume) in wanted {
                if path != volume.dir {
                    return Err(std::io::Error::other(format!(
                        "{} is not the volume {}",
                        path.display(),
                        volume.dir.display()
                    )));
                }
                if let Some(device) = volumes.limited_device(&volume)? {
                    limited.push(LimitedDir { path, device });
                }
            }
            Ok(limited)
        })
        .await
        .expect("blocking task")
    }

    /// Runs a build-kind command in the workspace; output goes to the logs as it comes.
    pub(super) async fn run_command(
        &self,
        project: &ProjectRecord,
        dpl: &str,
        command: BuildCommand<'_>,
    ) -> Result<(), Failure> {
        let mut running = self.start_command(project, dpl, &command).await?;
        let pumps = self.pump_output(&mut running, dpl, command.stream);
        let exit = self.wait_before_deadline(&mut running, &command).await?;
        for pump in pumps {
            let _ = tokio::time::timeout(Duration::from_secs(2), pump).await;
        }
        self.judge_exit(&command, exit)
    }

    /// Starts `command` in the sandbox, on the run's disk-limited workspace and cache.
    async fn start_command(
        &self,
        project: &ProjectRecord,
        dpl: &str,
        command: &BuildCommand<'_>,
    ) -> Result<Running, Failure> {
        let step = command.step;
        let limits = &self.config.limits;
        let (kind, memory_mb, cpus, limited_dirs) = match command.data_dir {
            // As the app runs (`/data` may predate disk limits: not checked, as for apps).
            Some(data_dir) => (
                StepKind::OneOff {
                    output: command.workspace.to_owned(),
                    data_dir: data_dir.to_owned(),
                },
                limits.app_memory_mb,
                limits.app_cpus,
                Vec::new(),
            ),
            None => (
                StepKind::Build {
                    workspace: command.workspace.to_owned(),
                    cache: command.cache.map(|volume| volume.dir.clone()),
                },
                limits.build_memory_mb,
                limits.build_cpus,
                self.limited_dirs(dpl, command.workspace, command.cache)
                    .await
                    .map_err(|e| {
                        command.fail(format!("the {step} command was not started: {e}"))
                    })?,
            ),
        };
        let spec = StepSpec {
            name: format!("slipway-{dpl}-{step}"),
            kind,
            command: command.command.to_owned(),
            env: command.env.to_vec(),
            project_uid: project.uid,
            memory_mb,
            pids: limits.pids,
            cpus,
            stop_grace: Duration::from_secs(5),
            limited_dirs,
            tty: None,
            // The release step (migrations) reaches the linked add-ons as the app will.
            reach: match command.data_dir {
                Some(_) => {
                    let target = crate::store::records::DeployTarget::default();
                    self.addon_reach(&project.id, &target).await
                }
                None => Vec::new(),
            },
            serve_port: None,
            link: None,
        };
        let runner = self.runner.clone();
        tokio::task::spawn_blocking(move || runner.spawn(spec))
            .await
            .expect("blocking task")
            .map_err(|e| command.fail(format!("could not start the {step} command: {e}")))
    }

    /// Sends the step's stdout and stderr to the logs, line by line, as `stream`.
    fn pump_output(
        &self,
        running: &mut Running,
        dpl: &str,
        stream: LogStream,
    ) -> Vec<JoinHandle<()>> {
        let pipes = [running.stdout.take(), running.stderr.take()];
        pipes
            .into_iter()
            .flatten()
            .map(|pipe| {
                tokio::spawn(pump_lines(
                    pipe,
                    self.hub.clone(),
                    dpl.to_owned(),
                    stream,
                    None,
                ))
            })
            .collect()
    }

    /// Waits for the step to exit; past the run's build deadline, stops it and fails with
    /// `TIMEOUT`.
    async fn wait_before_deadline(
        &self,
        running: &mut Running,
        command: &BuildCommand<'_>,
    ) -> Result<std::io::Result<Exit>, Failure> {
        tokio::select! {
            exit = running.wait() => Ok(exit),
            _ = tokio::time::sleep_until(command.deadline) => {
                running.kill();
                let _ = running.stop(Duration::from_millis(100)).await;
                Err(Failure::new(command.step, ErrorCode::Timeout, format!(
                    "the build did not finish within {} s (limits.build_timeout_s); the {} command was stopped",
                    self.config.limits.build_timeout_s, command.step
                )))
            }
        }
    }

    /// The step's outcome from how its command ended: a failure names the exit, and the disk
    /// limit when the workspace is full.
    fn judge_exit(
        &self,
        command: &BuildCommand<'_>,
        exit: std::io::Result<Exit>,
    ) -> Result<(), Failure> {
        let step = command.step;
        match exit {
            Ok(exit) if exit.success() => Ok(()),
            Ok(exit)
                if self.workspaces.volumes().limited()
                    && crate::disk::is_full(command.workspace) =>
            {
                Err(command.fail(format!(
                    "the {step} command {} after it hit the disk limit: the workspace is \
                     full (limits.build_disk_mb = {} MB)",
                    exit.describe(),
                    self.config.limits.build_disk_mb
                )))
            }
            Ok(exit) => Err(command.fail(format!("the {step} command {}", exit.describe()))),
            Err(error) => Err(command.fail(format!(
                "the {step} command could not be waited for: {error}"
            ))),
        }
    }
}

impl BuildCommand<'_> {
    /// The failure of this command's step, with its failure code.
    fn fail(&self, message: String) -> Failure {
        Failure::new(self.step, self.failure_code, message)
    }
}
