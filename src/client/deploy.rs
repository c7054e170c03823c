//! `slipway deploy [DIR]`: flags over `DIR/slipway.toml` into a plan (pure), then pack,
//! upload (`POST /api/projects/{slug}/source`), provision (`POST …/provision`), follow the
//! run live, and report: the URL and exit 0, or the failed step, code and message and exit 1.
//! `report_run` is shared with `rollback`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bytes::Bytes;

use crate::api::types::{ProvisionAccepted, ProvisionBody, ProvisionStatus, SourceUploaded};

use super::display::Display;
use super::follow::follow_run;
use super::http::ApiClient;
use super::pack::pack;
use super::project_file::{slugify, ProjectFile};
use super::usage::human_bytes;
use super::{path_segment, ClientError};
use crate::cli::DeployArgs;

/// What one deploy does, once flags and the project file are merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployPlan {
    pub dir: PathBuf,
    pub project: String,
    pub install: Option<String>,
    pub build: Option<String>,
    pub start: Option<String>,
    pub release: Option<String>,
    pub output: Option<String>,
    pub health: Option<String>,
    /// No command was given anywhere: the daemon detects them (`"framework": "auto"`).
    pub auto: bool,
    pub dry_run: bool,
}

impl DeployPlan {
    /// Flags win over the file; the project defaults to the directory's name (`dir_name`),
    /// slugified.
    pub fn new(
        args: DeployArgs,
        file: ProjectFile,
        dir_name: Option<&str>,
    ) -> Result<DeployPlan, ClientError> {
        let project = match args.project.or(file.project) {
            Some(project) => project,
            None => dir_name.and_then(slugify).ok_or_else(|| {
                ClientError::Config(format!(
                    "cannot make a project name from the directory {:?}; pass --project SLUG or \
                     set `project` in slipway.toml",
                    dir_name.unwrap_or("")
                ))
            })?,
        };
        let install = args.install.or(file.install);
        let build = args.build.or(file.build);
        let start = args.start.or(file.start);
        Ok(DeployPlan {
            dir: args.dir,
            project,
            auto: install.is_none() && build.is_none() && start.is_none(),
            install,
            build,
            start,
            release: args.release.or(file.release),
            output: args.output.or(file.output),
            health: args.health.or(file.health),
            dry_run: args.dry_run,
        })
    }

    /// The provision request for the uploaded source `source_id`.
    pub fn provision_body(&self, source_id: &str) -> ProvisionBody {
        ProvisionBody {
            project_slug: self.project.clone(),
            source_id: Some(source_id.to_owned()),
            install_command: self.install.clone(),
            build_command: self.build.clone(),
            start_command: self.start.clone(),
            release_command: self.release.clone(),
            output_directory: self.output.clone(),
            health_check_path: self.health.clone(),
            framework: self.auto.then(|| "auto".to_owned()),
            ..ProvisionBody::default()
        }
    }
}

pub async fn deploy(api: &ApiClient, args: DeployArgs) -> Result<ExitCode, ClientError> {
    let dir = args.dir.clone();
    if !dir.is_dir() {
        return Err(ClientError::Config(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let file = ProjectFile::load(&dir)?.unwrap_or_default();
    let canonical = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
    let dir_name = canonical
        .file_name()
        .map(|name| name.to_string_lossy().into_owned());
    let plan = DeployPlan::new(args, file, dir_name.as_deref())?;
    let mut display = Display::for_terminal();
    if plan.auto || plan.dry_run {
        print_plan(&plan);
    }
    if plan.dry_run {
        return Ok(ExitCode::SUCCESS);
    }

    let packed = {
        let dir = plan.dir.clone();
        tokio::task::spawn_blocking(move || pack(&dir))
            .await
            .map_err(|error| ClientError::Io(format!("packing stopped: {error}")))??
    };
    for skipped in &packed.skipped {
        eprintln!("slipway: left out {skipped}");
    }
    eprintln!(
        "Packed {} files from {} ({} → {} compressed)",
        packed.file_count,
        display_dir(&plan.dir),
        human_bytes(packed.content_bytes),
        human_bytes(packed.archive.len() as u64)
    );
    let slug = path_segment(&plan.project);
    let upload: SourceUploaded = api
        .post_archive(
            &format!("/api/projects/{slug}/source"),
            Bytes::from(packed.archive),
        )
        .await?;
    let started: ProvisionAccepted = api
        .post_json(
            &format!("/api/projects/{slug}/provision"),
            &plan.provision_body(&upload.source_id),
        )
        .await?;
    let (provisioning_id, deployment_id) = (started.provisioning_id, started.deployment_id);
    eprintln!(
        "Deploying {} to {}: deployment {deployment_id} (run {provisioning_id})",
        plan.project,
        api.base_url()
    );
    let status = follow_run(api, &provisioning_id, &deployment_id, true, &mut display).await?;
    Ok(report_run(&status, "deploy", &mut display))
}

/// What will run: the commands given, or what the daemon's detection will choose (the same
/// function, run here on the directory) with its reasons. Goes to stdout for `--dry-run` (it is the answer), else to stderr (stdout is the URL).
fn print_plan(plan: &DeployPlan) {
    let say = |line: String| match plan.dry_run {
        true => println!("{line}"),
        false => eprintln!("{line}"),
    };
    say(format!("project: {}", plan.project));
    let (install, build, start, output) = match plan.auto {
        false => (
            plan.install.clone(),
            plan.build.clone(),
            plan.start.clone(),
            plan.output.clone(),
        ),
        true => match crate::detect::detect_dir(&plan.dir) {
            Some(detected) => {
                say(format!("detected: {}", detected.framework));
                for reason in &detected.reasons {
                    say(format!("  because {reason}"));
                }
                if let Some(missing) = detected.missing_start() {
                    say(format!("problem: {missing}"));
                }
                (
                    detected.install_command,
                    detected.build_command,
                    detected.start_command,
                    plan.output.clone().or(detected.output_directory),
                )
            }
            None => {
                say("detected: nothing (no package.json, requirements.txt, pyproject.toml, manage.py, Procfile or index.html): pass --install/--build/--start".to_owned());
                (None, None, None, plan.output.clone())
            }
        },
    };
    let show = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_owned());
    say(format!("install: {}", show(&install)));
    say(format!("build:   {}", show(&build)));
    match start {
        Some(start) => say(format!("start:   {start}")),
        None => say(format!(
            "serve:   static files from {}",
            output
                .unwrap_or_else(|| "the build's dist, build, out or public, else the root".into())
        )),
    }
}

/// Prints a final status: the URL on stdout (exit 0), or what failed on stderr (exit 1).
pub fn report_run(status: &ProvisionStatus, what: &str, display: &mut Display) -> ExitCode {
    display.finish();
    let seconds = |ms: u64| ms as f64 / 1000.0;
    match status {
        ProvisionStatus::ProvisioningComplete {
            url,
            deployment_id,
            total_duration_ms,
            ..
        } => {
            let seconds = seconds(*total_duration_ms);
            eprintln!("{what} succeeded in {seconds:.1} s: {deployment_id} is live");
            println!("{url}");
            ExitCode::SUCCESS
        }
        ProvisionStatus::ProvisioningCanceled(ended) => {
            let message = ended
                .error
                .as_ref()
                .map_or("a newer run replaced it", |e| e.message.as_str());
            let seconds = seconds(ended.total_duration_ms);
            eprintln!("{what} canceled after {seconds:.1} s: {message}");
            ExitCode::FAILURE
        }
        ProvisionStatus::ProvisioningFailed(ended) => {
            let step = ended.failed_step.as_deref().unwrap_or("?");
            let (code, message) = match &ended.error {
                Some(error) => (error.code.as_str(), error.message.as_str()),
                None => ("?", ""),
            };
            let seconds = seconds(ended.total_duration_ms);
            eprintln!("{what} failed at step {step} after {seconds:.1} s: {code}: {message}");
            eprintln!("  logs: slipway logs {}", ended.deployment_id);
            ExitCode::FAILURE
        }
        ProvisionStatus::ProvisioningInProgress { .. } => {
            eprintln!("{what}: the run is still in progress");
            ExitCode::FAILURE
        }
    }
}

fn display_dir(dir: &Path) -> String {
    if dir == Path::new(".") {
        "the current directory".into()
    } else {
        dir.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file_and_the_directory_names_the_project() {
        let file = ProjectFile {
            project: None,
            build: Some("make".into()),
            start: Some("./serve".into()),
            ..ProjectFile::default()
        };
        let args = DeployArgs {
            dir: "site".into(),
            start: Some("node app.js".into()),
            health: Some("/up".into()),
            ..DeployArgs::default()
        };
        let plan = DeployPlan::new(args, file, Some("My Site")).unwrap();
        assert_eq!(plan.project, "my-site");
        assert_eq!(plan.build.as_deref(), Some("make"));
        assert_eq!(plan.start.as_deref(), Some("node app.js"));
        assert_eq!(
            serde_json::to_value(plan.provision_body("src_1")).unwrap(),
            serde_json::json!({"projectSlug": "my-site", "sourceId": "src_1", "buildCommand": "make",
                   "startCommand": "node app.js", "healthCheckPath": "/up"})
        );
        let file = ProjectFile {
            project: Some("from-file".into()),
            ..ProjectFile::default()
        };
        let plan = DeployPlan::new(DeployArgs::default(), file, Some("dir")).unwrap();
        assert_eq!(plan.project, "from-file");
        assert!(DeployPlan::new(DeployArgs::default(), ProjectFile::default(), Some("_")).is_err());
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }
}
