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

impl Pipeline {
    pub(super) async fn source_install_build(
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
        let explicit_install = request.build.install_command.is_some();
        // Detection is part of the source step: a server whose start command cannot be found
        // fails here, before anything is installed.
        self.step(active, "source", async {
            self.fetch_source(project, request, workspace, env, deadline, deployment)
                .await?;
            if request.build.framework.as_deref() == Some("auto") {
                self.apply_detection(request, workspace, dpl).await?;
            }
            Ok(true)
        })
        .await?;
        let request = &*request;
        let has_commands = [&request.build.install_command, &request.build.build_command]
            .iter()
            .any(|c| c.as_deref().is_some_and(|c| !c.trim().is_empty()));
        let cache = match has_commands {
            true => self.prepare_build_cache(project, &request.target).await,
            false => None,
        };
        let mut build_env = env.to_vec();
        if let Some(cache) = &cache {
            for (key, value) in self.build_cache_env(&cache.dir) {
                if !build_env.iter().any(|(k, _)| *k == key) {
                    build_env.push((key, value));
                }
            }
        }
        let mut kept: Option<KeptModules> = None;
        for (name, command, stream, code) in [
            (
                "install",
                request.build.install_command.as_deref(),
                LogStream::Install,
                ErrorCode::InstallFailed,
            ),
            (
                "build",
                request.build.build_command.as_deref(),
                LogStream::Build,
                ErrorCode::BuildFailed,
            ),
        ] {
            let Some(command) = command.filter(|c| !c.trim().is_empty()) else {
                self.skip(active, name).await;
                continue;
            };
            self.step(active, name, async {
                let command = match (&cache, name) {
                    (Some(cache), "install") => {
                        let restore = self
                            .restore_node_modules(ModulesRun {
                                project,
                                dpl,
                                workspace,
                                cache: &cache.dir,
                                install_command: command,
                                explicit: explicit_install,
                                env: &build_env,
                            })
                            .await;
                        kept = restore.kept;
                        restore.install_command
                    }
                    _ => command.to_owned(),
                };
                self.hub.system(dpl, &format!("{name}: $ {command}"));
                let command = match (&cache, name) {
                    (Some(cache), "build") => super::cache::with_framework_caches(
                        &command,
                        &self.build_cache_base(&cache.dir),
                    ),
                    _ => command,
                };
                let command = BuildCommand {
                    step: name,
                    failure_code: code,
                    stream,
                    command: &command,
                    workspace,
                    cache: cache.as_ref(),
                    env: &build_env,
                    deadline,
                };
                self.run_command(project, dpl, command).await.map(|_| true)
            })
            .await?;
        }
        // Only a successful build gets here: a failed one keeps nothing.
        if let Some(kept) = kept {
            self.keep_node_modules(kept, dpl).await;
        }
        if let Some(cache) = &cache {
            self.trim_build_cache(cache, dpl).await;
        }
        Ok(())
    }
}
