//! The build half of a run (`run.rs` calls it for a build, not a rollback): the source step
//! with `framework: auto` detection, the build cache, then the install and build steps, with
//! `node_modules` restored before install and kept after a successful build
//! (`node_modules.rs`).

use std::path::Path;
use std::sync::Arc;

use tokio::time::Instant;

use super::commands::BuildCommand;
use super::failure::Failure;
use super::node_modules::{KeptModules, ModulesRun};
use super::{ActiveRun, Pipeline};
use crate::disk::Volume;
use crate::error_code::ErrorCode;
use crate::logs::LogStream;
use crate::store::records::{DeploymentRecord, ProjectRecord, ProvisionRequest};

/// What the source, install and build steps of one run share.
pub(super) struct BuildRun<'a> {
    pub active: &'a Arc<ActiveRun>,
    pub project: &'a ProjectRecord,
    pub workspace: &'a Path,
    pub env: &'a [(String, String)],
    /// The run's build deadline (`limits.build_timeout_s` from its start).
    pub deadline: Instant,
    pub dpl: &'a str,
}

/// What the install and build steps share beyond the run: its build cache, if any, and the
/// environment with the cache's variables added.
struct CommandSteps<'a> {
    run: &'a BuildRun<'a>,
    cache: Option<&'a Volume>,
    env: &'a [(String, String)],
}

impl Pipeline {
    /// The source, install and build steps of a build run, in order; the build cache serves
    /// install and build, and once both succeed `node_modules` is kept and the cache trimmed.
    pub(super) async fn source_install_build(
        &self,
        run: &BuildRun<'_>,
        request: &mut ProvisionRequest,
        deployment: &mut DeploymentRecord,
    ) -> Result<(), Failure> {
        // Whether the request gave the install command itself (detection may fill it in).
        let explicit_install = request.build.install_command.is_some();
        self.source_step(run, request, deployment).await?;
        let request = &*request;
        let install = non_empty(&request.build.install_command);
        let build = non_empty(&request.build.build_command);
        let cache = match install.is_some() || build.is_some() {
            true => self.prepare_build_cache(run.project, &request.target).await,
            false => None,
        };
        let build_env = self.with_cache_env(run.env, cache.as_ref());
        let steps = CommandSteps {
            run,
            cache: cache.as_ref(),
            env: &build_env,
        };
        let kept = match install {
            Some(command) => self.install_step(&steps, command, explicit_install).await?,
            None => {
                self.skip(run.active, "install").await;
                None
            }
        };
        match build {
            Some(command) => self.build_step(&steps, command).await?,
            None => self.skip(run.active, "build").await,
        }
        // Only a successful build gets here: a failed one keeps nothing.
        if let Some(kept) = kept {
            self.keep_node_modules(kept, run.dpl).await;
        }
        if let Some(cache) = &cache {
            self.trim_build_cache(cache, run.dpl).await;
        }
        Ok(())
    }

    /// The source step: fetches the source, then applies `framework: auto` detection.
    /// Detection is part of it: a server whose start command cannot be found fails here,
    /// before anything is installed.
    async fn source_step(
        &self,
        run: &BuildRun<'_>,
        request: &mut ProvisionRequest,
        deployment: &mut DeploymentRecord,
    ) -> Result<(), Failure> {
        let BuildRun {
            active,
            project,
            workspace,
            env,
            deadline,
            dpl,
        } = *run;
        self.step(active, "source", async {
            self.fetch_source(project, request, workspace, env, deadline, deployment)
                .await?;
            if request.build.framework.as_deref() == Some("auto") {
                self.apply_detection(request, workspace, dpl).await?;
            }
            Ok(true)
        })
        .await?;
        Ok(())
    }

    /// The run's environment with the build cache's variables added, where the run's own
    /// environment does not set them.
    fn with_cache_env(
        &self,
        env: &[(String, String)],
        cache: Option<&Volume>,
    ) -> Vec<(String, String)> {
        let mut build_env = env.to_vec();
        if let Some(cache) = cache {
            for (key, value) in self.build_cache_env(&cache.dir) {
                if !build_env.iter().any(|(k, _)| *k == key) {
                    build_env.push((key, value));
                }
            }
        }
        build_env
    }

    /// The install step: with a build cache, `node_modules` is restored first (which may
    /// change the command); returns what to keep once the build succeeds.
    async fn install_step(
        &self,
        steps: &CommandSteps<'_>,
        command: &str,
        explicit_install: bool,
    ) -> Result<Option<KeptModules>, Failure> {
        let run = steps.run;
        let mut kept: Option<KeptModules> = None;
        self.step(run.active, "install", async {
            let command = match steps.cache {
                Some(cache) => {
                    let restore = self
                        .restore_node_modules(ModulesRun {
                            project: run.project,
                            dpl: run.dpl,
                            workspace: run.workspace,
                            cache: &cache.dir,
                            install_command: command,
                            explicit: explicit_install,
                            env: steps.env,
                        })
                        .await;
                    kept = restore.kept;
                    restore.install_command
                }
                None => command.to_owned(),
            };
            self.hub.system(run.dpl, &format!("install: $ {command}"));
            let install = steps.command(
                "install",
                LogStream::Install,
                ErrorCode::InstallFailed,
                &command,
            );
            self.run_command(run.project, run.dpl, install)
                .await
                .map(|_| true)
        })
        .await?;
        Ok(kept)
    }

    /// The build step: with a build cache, the command is wrapped to restore and save the
    /// frameworks' own caches.
    async fn build_step(&self, steps: &CommandSteps<'_>, command: &str) -> Result<(), Failure> {
        let run = steps.run;
        self.step(run.active, "build", async {
            self.hub.system(run.dpl, &format!("build: $ {command}"));
            let command = match steps.cache {
                Some(cache) => {
                    super::cache::with_framework_caches(command, &self.build_cache_base(&cache.dir))
                }
                None => command.to_owned(),
            };
            let build = steps.command("build", LogStream::Build, ErrorCode::BuildFailed, &command);
            self.run_command(run.project, run.dpl, build)
                .await
                .map(|_| true)
        })
        .await?;
        Ok(())
    }
}

impl CommandSteps<'_> {
    /// The install or build `command` of step `step`: its output goes to `stream`, and it
    /// fails the run with `failure_code`.
    fn command<'c>(
        &'c self,
        step: &'static str,
        stream: LogStream,
        failure_code: ErrorCode,
        command: &'c str,
    ) -> BuildCommand<'c> {
        BuildCommand {
            step,
            failure_code,
            stream,
            command,
            workspace: self.run.workspace,
            cache: self.cache,
            env: self.env,
            deadline: self.run.deadline,
            data_dir: None,
        }
    }
}

/// The command, unless it is absent or blank (its step is then skipped).
fn non_empty(command: &Option<String>) -> Option<&str> {
    command.as_deref().filter(|c| !c.trim().is_empty())
}
