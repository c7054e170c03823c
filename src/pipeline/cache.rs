//! Build caches per project and environment: the package managers' caches (npm, pnpm, yarn,
//! bun, pip and whatever honours `XDG_CACHE_HOME`) survive between builds, so a redeploy with
//! an unchanged lockfile downloads nothing. Production's cache is a volume of its own
//! (`<data_dir>/build-cache/<project id>`, a loop-mounted image of `limits.build_cache_mb`
//! where disk limits are on) that only production builds mount; each preview has its own
//! (`<data_dir>/build-cache/<project id>--<preview name>`, gone with the preview), which
//! starts empty: a preview's code never writes what production's builds restore, nor what
//! another preview's do. A cache is mounted read-write at `/cache` in its install and build
//! steps only: never shared between projects, never visible to apps. After a build, a cache
//! over 80 % of its limit loses its least recently used tool directories.

use std::path::{Path, PathBuf};

use super::Pipeline;
use crate::disk::Volume;
use crate::store::records::{DeployTarget, Environment, ProjectRecord};

/// Where the cache is mounted inside a sandbox.
const MOUNT_POINT: &str = "/cache";

impl Pipeline {
    /// The cache a run of `target` reads and writes: production's, or its preview's own.
    pub(super) fn build_cache_volume(&self, project_id: &str, target: &DeployTarget) -> Volume {
        let name = match target.environment {
            Environment::Production => project_id.to_owned(),
            Environment::Preview => {
                preview_cache_name(project_id, target.preview.as_deref().unwrap_or("preview"))
            }
        };
        self.build_cache_at(&name)
    }

    fn build_cache_at(&self, name: &str) -> Volume {
        let mut volume = Volume::app_data(
            &self.config.data_dir.join("build-cache").join(name),
            self.config.limits.build_cache_mb,
        );
        volume.journal = false;
        volume
    }

    /// Makes (or mounts) the run's cache; `None` (the build runs without one) on error.
    pub(super) async fn prepare_build_cache(
        &self,
        project: &ProjectRecord,
        target: &DeployTarget,
    ) -> Option<Volume> {
        let volume = self.build_cache_volume(&project.id, target);
        let (volumes, uid, made_volume) = (
            self.workspaces.volumes().clone(),
            project.uid,
            volume.clone(),
        );
        let sandboxed = self.config.sandbox.mode == crate::config::SandboxMode::Namespaces;
        let made = tokio::task::spawn_blocking(move || {
            let volume = made_volume;
            volumes.ensure_app_data(&volume, uid)?;
            // Without disk limits the cache is a plain directory: in a sandbox the project's
            // uid writes it. lchown: a planted symlink is not followed.
            match sandboxed && !volumes.limited() {
                true => std::os::unix::fs::lchown(&volume.dir, Some(uid), Some(uid)),
                false => Ok(()),
            }
        })
        .await
        .expect("blocking task");
        match made {
            Ok(()) => Some(volume),
            Err(error) => {
                tracing::warn!(project = %project.slug, %error, "no build cache for this build");
                None
            }
        }
    }

    /// Where the build sees the cache: `/cache` in a sandbox, the host path without one.
    pub(super) fn build_cache_base(&self, cache: &Path) -> PathBuf {
        match self.config.sandbox.mode {
            crate::config::SandboxMode::Namespaces => PathBuf::from(MOUNT_POINT),
            _ => cache.to_owned(),
        }
    }

    /// The variables that point the package managers at the cache.
    pub(super) fn build_cache_env(&self, cache: &Path) -> Vec<(String, String)> {
        let base = self.build_cache_base(cache);
        let at = |tool: &str| base.join(tool).to_string_lossy().into_owned();
        vec![
            ("npm_config_cache".into(), at("npm")),
            ("pnpm_config_store_dir".into(), at("pnpm")),
            ("YARN_CACHE_FOLDER".into(), at("yarn")),
            ("BUN_INSTALL_CACHE_DIR".into(), at("bun")),
            ("PIP_CACHE_DIR".into(), at("pip")),
            ("XDG_CACHE_HOME".into(), at("xdg")),
        ]
    }

    /// Keeps the cache under 80 % of `limits.build_cache_mb`: the least recently used tool
    /// directories go first.
    pub(super) async fn trim_build_cache(&self, cache: &Volume, dpl: &str) {
        let dir = cache.dir.clone();
        let limit = self.config.limits.build_cache_mb << 20;
        let evicted = tokio::task::spawn_blocking(move || trim(&dir, limit * 8 / 10))
            .await
            .unwrap_or_default();
        if !evicted.is_empty() {
            self.hub.system(
                dpl,
                &format!(
                    "build cache over 80 % of limits.build_cache_mb: removed {}",
                    evicted.join(", ")
                ),
            );
        }
    }

    /// `"framework": "auto"`: fills the commands the request left out from the source tree,
    /// and says in the run's log what it chose and why. Explicit fields win. A server whose
    /// start command was not found (and no `startCommand` or `outputDirectory` was given)
    /// fails the run with `START_COMMAND_MISSING`: its source is never served as files.
    pub(super) async fn apply_detection(
        &self,
        request: &mut crate::store::records::ProvisionRequest,
        workspace: &Path,
        dpl: &str,
    ) -> Result<(), super::failure::Failure> {
        let dir = workspace.to_owned();
        let plan = tokio::task::spawn_blocking(move || crate::detect::detect_dir(&dir))
            .await
            .ok()
            .flatten();
        let Some(plan) = plan else {
            self.hub.system(
                dpl,
                "detect: nothing recognised (no package.json, requirements.txt, pyproject.toml, manage.py, Procfile or index.html); set the commands",
            );
            return Ok(());
        };
        self.hub.system(dpl, &format!("detect: {}", plan.framework));
        for reason in &plan.reasons {
            self.hub.system(dpl, &format!("detect: {reason}"));
        }
        if let Some(missing) = plan.missing_start() {
            if request.build.start_command.is_none() && request.build.output_directory.is_none() {
                return Err(super::failure::Failure::new(
                    "source",
                    crate::error_code::ErrorCode::StartCommandMissing,
                    missing,
                ));
            }
        }
        let fill = |slot: &mut Option<String>, value: Option<String>| {
            if slot.is_none() {
                *slot = value;
            }
        };
        fill(&mut request.build.install_command, plan.install_command);
        fill(&mut request.build.build_command, plan.build_command);
        fill(&mut request.build.start_command, plan.start_command);
        fill(&mut request.build.output_directory, plan.output_directory);
        for (name, value) in [
            ("install", &request.build.install_command),
            ("build", &request.build.build_command),
            ("start", &request.build.start_command),
        ] {
            if let Some(value) = value {
                self.hub
                    .system(dpl, &format!("detect: {name} command `{value}`"));
            }
        }
        Ok(())
    }

    /// `DELETE /api/projects/{projectId}/build-cache`: production's and every preview's
    /// cache; the bytes they held.
    pub async fn clear_build_cache(&self, project_id: &str) -> u64 {
        let root = self.config.data_dir.join("build-cache");
        let bytes = crate::usage::build_cache_bytes(&self.config.data_dir, project_id);
        let prefix = preview_cache_name(project_id, "");
        let (id, volumes) = (project_id.to_owned(), self.workspaces.volumes().clone());
        let mut caches = vec![self.build_cache_at(&id)];
        caches.extend(
            crate::usage::preview_cache_names(&root, &prefix)
                .iter()
                .map(|name| self.build_cache_at(name)),
        );
        let _ = tokio::task::spawn_blocking(move || {
            for volume in &caches {
                volumes.remove(volume);
            }
        })
        .await;
        bytes
    }

    /// A torn-down preview's cache goes with it.
    pub(super) async fn remove_preview_cache(&self, project_id: &str, preview: &str) {
        let volume = self.build_cache_at(&preview_cache_name(project_id, preview));
        let volumes = self.workspaces.volumes().clone();
        let _ = tokio::task::spawn_blocking(move || volumes.remove(&volume)).await;
    }
}

/// The directory name of a preview's cache under `build-cache/` (preview names are
/// `[a-z0-9-]`, so no dot: the image beside it is `<name>.img`).
fn preview_cache_name(project_id: &str, preview: &str) -> String {
    format!("{project_id}--{preview}")
}

/// Framework caches that live in the project tree: (directory in the workspace, its name
/// under `frameworks/` in the build cache).
const FRAMEWORK_CACHES: [(&str, &str); 4] = [
    (".next/cache", "next"),
    ("node_modules/.cache", "node_modules"),
    (".parcel-cache", "parcel"),
    (".turbo", "turbo"),
];

/// The build command wrapped so that the framework caches the last successful build left
/// come back into the tree before it runs, and go back to the build cache after it succeeds.
/// The copying runs in the build's own sandbox, as the project's user, so a symlink the
/// build planted can point it nowhere the build itself could not write. The command itself
/// runs as `sh -c` would run it alone; its exit status is the step's.
pub(super) fn with_framework_caches(command: &str, cache: &Path) -> String {
    let quote = |text: &str| format!("'{}'", text.replace('\'', "'\\''"));
    let mut script = format!(
        "c={}/frameworks\n\
         restore() {{ if [ -d \"$c/$2\" ] && [ ! -e \"$1\" ]; then mkdir -p \"$(dirname \"$1\")\" && cp -a \"$c/$2\" \"$1\"; fi; }}\n\
         save() {{ if [ -d \"$1\" ] && [ ! -L \"$1\" ]; then mkdir -p \"$c\" && rm -rf \"$c/$2.new\" && cp -a \"$1\" \"$c/$2.new\" && rm -rf \"$c/$2\" && mv \"$c/$2.new\" \"$c/$2\"; fi; }}\n",
        quote(&cache.to_string_lossy())
    );
    for (dir, name) in FRAMEWORK_CACHES {
        script.push_str(&format!("restore {dir} {name}\n"));
    }
    script.push_str(&format!(
        "sh -c {}\nstatus=$?\nif [ $status -eq 0 ]; then\n",
        quote(command)
    ));
    for (dir, name) in FRAMEWORK_CACHES {
        script.push_str(&format!("  save {dir} {name}\n"));
    }
    script.push_str("fi\nexit $status\n");
    script
}

/// Removes the oldest top-level entries of `dir` until it holds at most `target` bytes.
fn trim(dir: &Path, target: u64) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut sized: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .flatten()
        .map(|entry| {
            let path = entry.path();
            let used = entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            (used, size_of(&path), path)
        })
        .collect();
    let mut total: u64 = sized.iter().map(|(_, size, _)| size).sum();
    sized.sort();
    let mut evicted = Vec::new();
    for (_, size, path) in sized {
        if total <= target {
            break;
        }
        let removed = match path.is_dir() {
            true => std::fs::remove_dir_all(&path),
            false => std::fs::remove_file(&path),
        };
        if removed.is_ok() {
            total = total.saturating_sub(size);
            evicted.push(
                path.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    evicted
}

fn size_of(path: &Path) -> u64 {
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !metadata.is_dir() {
        return metadata.len();
    }
    std::fs::read_dir(path)
        .map(|entries| entries.flatten().map(|e| size_of(&e.path())).sum())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the wrapped command with /bin/sh in `workspace`; its exit code.
    fn run_wrapped(command: &str, workspace: &Path, cache: &Path) -> i32 {
        std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(with_framework_caches(command, cache))
            .current_dir(workspace)
            .status()
            .unwrap()
            .code()
            .unwrap()
    }

    #[test]
    fn framework_caches_come_back_after_a_successful_build_only() {
        let cache = tempfile::tempdir().unwrap();
        let first = tempfile::tempdir().unwrap();
        let build = "mkdir -p .next/cache && echo \"it's $(cat .next/cache/n 2>/dev/null || echo 0)\" > out && echo 1 > .next/cache/n";
        assert_eq!(run_wrapped(build, first.path(), cache.path()), 0);
        assert_eq!(
            std::fs::read_to_string(first.path().join("out")).unwrap(),
            "it's 0\n"
        );
        assert!(cache.path().join("frameworks/next/n").is_file());

        // A fresh tree gets the cache before the build runs.
        let second = tempfile::tempdir().unwrap();
        assert_eq!(run_wrapped(build, second.path(), cache.path()), 0);
        assert_eq!(
            std::fs::read_to_string(second.path().join("out")).unwrap(),
            "it's 1\n"
        );

        // A failed build keeps its exit status and leaves the cache as it was.
        let third = tempfile::tempdir().unwrap();
        let failing = "rm -rf .next/cache/n; echo 2 > .next/cache/m; exit 7";
        assert_eq!(run_wrapped(failing, third.path(), cache.path()), 7);
        assert!(cache.path().join("frameworks/next/n").is_file());
        assert!(!cache.path().join("frameworks/next/m").exists());

        // A tree that plants a symlink in place of a cache directory saves nothing through it.
        let fourth = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let planted = format!(
            "mkdir -p node_modules && ln -s {} node_modules/.cache",
            elsewhere.path().display()
        );
        assert_eq!(run_wrapped(&planted, fourth.path(), cache.path()), 0);
        assert!(!cache.path().join("frameworks/node_modules").exists());
    }

    #[test]
    fn trimming_removes_the_least_recently_used_first() {
        let dir = tempfile::tempdir().unwrap();
        for (name, size, age) in [("npm", 600, 30), ("pip", 300, 10), ("yarn", 200, 20)] {
            let tool = dir.path().join(name);
            std::fs::create_dir(&tool).unwrap();
            std::fs::write(tool.join("blob"), vec![0u8; size]).unwrap();
            let when = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
            std::fs::File::open(&tool)
                .unwrap()
                .set_modified(when)
                .unwrap();
        }
        assert!(
            trim(dir.path(), 2000).is_empty(),
            "under the target: nothing goes"
        );
        assert_eq!(trim(dir.path(), 600), ["npm"], "the oldest goes first");
        assert_eq!(trim(dir.path(), 300), ["yarn"]);
        assert!(dir.path().join("pip").exists());
    }
}
