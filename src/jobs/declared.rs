//! Cron jobs declared in the project's `slipway.toml` (`[[cron]]` tables), applied when a
//! production deployment goes live: the declared jobs follow the live build. A declared job
//! is created or updated by name (origin `project_file`); a `project_file` job the file no
//! longer declares is deleted; a job made through the API is never touched (a declared job of
//! the same name is not applied, and the deployment's log says so). An entry that is not
//! valid is said in the log and skipped; the job it would change stays as it was.
//!
//! ```toml
//! [[cron]]
//! name = "nightly-report"
//! schedule = "30 2 * * *"
//! timezone = "Europe/Berlin"
//! command = "python manage.py report"
//! concurrency = "forbid"   # forbid | allow | replace
//! timeout_s = 600
//! missed = "runOnce"       # skip | runOnce
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::schedule::{parse_zone, Schedule};
use super::Jobs;
use crate::pipeline::LiveHook;
use crate::store::jobs::{Concurrency, CronJobRecord, JobOrigin, Missed};
use crate::store::records::{DeploymentRecord, ProjectRecord};

/// One `[[cron]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Declared {
    name: String,
    schedule: String,
    timezone: Option<String>,
    command: String,
    concurrency: Option<Concurrency>,
    timeout_s: Option<u64>,
    missed: Option<Missed>,
    enabled: Option<bool>,
}

/// Checks a job's name, schedule, zone and command; the schedule as stored (normalized).
pub fn check_job(
    name: &str,
    schedule: &str,
    timezone: &str,
    command: &str,
) -> Result<String, String> {
    let mut parts = name.split('-');
    let well_formed = (2..=63).contains(&name.len())
        && parts.all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if !well_formed {
        return Err(format!(
            "`name` {name:?} must be lowercase letters, digits and single dashes, 2 to 63 \
             characters"
        ));
    }
    if schedule.chars().count() > 256 {
        return Err("`schedule` must be at most 256 characters".into());
    }
    let parsed =
        Schedule::parse(schedule).map_err(|error| format!("`schedule` {schedule:?}: {error}"))?;
    parse_zone(timezone).map_err(|error| format!("`timezone`: {error}"))?;
    // Exactly a name of the database (its lookup would also take other spellings).
    if !super::schedule_schema::zone_names()
        .iter()
        .any(|name| name == timezone)
    {
        return Err(format!(
            "`timezone`: {timezone:?} is not spelled as the time zone database spells it (e.g. \
             \"Europe/Berlin\", \"UTC\")"
        ));
    }
    if command.is_empty() || command.chars().count() > 16 * 1024 || command.contains('\0') {
        return Err("`command` must be 1 to 16384 characters without NUL".into());
    }
    Ok(parsed.to_string())
}

/// The `[[cron]]` tables of `slipway.toml`'s text (none when it has no `cron` key).
fn parse(text: &str) -> Result<Vec<Declared>, String> {
    let mut table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| e.message().trim().to_owned())?;
    match table.remove("cron") {
        None => Ok(Vec::new()),
        Some(value) => value
            .try_into()
            .map_err(|e: toml::de::Error| format!("[[cron]]: {}", e.message().trim())),
    }
}

impl Jobs {
    /// The pipeline's hook: applies the live build's declared jobs.
    pub fn live_hook(self: &Arc<Self>) -> LiveHook {
        let jobs = self.clone();
        Arc::new(
            move |project: ProjectRecord, deployment: DeploymentRecord, tree: PathBuf| {
                let jobs = jobs.clone();
                Box::pin(async move { jobs.apply_declared(&project, &deployment, &tree).await })
            },
        )
    }

    async fn apply_declared(
        &self,
        project: &ProjectRecord,
        deployment: &DeploymentRecord,
        tree: &Path,
    ) {
        let say = |message: String| self.hub.system(&deployment.id, &format!("cron: {message}"));
        let text = crate::detect::read_tree_file(tree, "slipway.toml").unwrap_or_default();
        let declared = match parse(&text) {
            Ok(declared) => declared,
            Err(error) => {
                return say(format!(
                    "slipway.toml: {error}; the cron jobs were left as they were"
                ))
            }
        };
        let project_id = project.id.clone();
        let existing = match self.store.call(move |s| s.cron_jobs_of(&project_id)).await {
            Ok(existing) => existing,
            Err(error) => return say(format!("could not read the cron jobs: {error}")),
        };
        let now = self.now_ms();
        let mut keep = Vec::new();
        for entry in declared {
            keep.push(entry.name.clone());
            let current = existing.iter().find(|job| job.name == entry.name);
            if current.is_some_and(|job| job.origin == JobOrigin::Api) {
                say(format!(
                    "a job named {:?} was made through the API; the slipway.toml one is not applied",
                    entry.name
                ));
                continue;
            }
            match self.declared_record(project, current, entry, now) {
                Ok(job) => {
                    if let Err(error) = self.store.call(move |s| s.insert_cron_job(&job)).await {
                        say(format!("could not store a cron job: {error}"));
                    }
                }
                Err(message) => say(format!("{message}; not applied")),
            }
        }
        for job in existing {
            if job.origin == JobOrigin::ProjectFile && !keep.contains(&job.name) {
                say(format!(
                    "{:?} is no longer declared in slipway.toml; deleted",
                    job.name
                ));
                let _ = self.store.call(move |s| s.delete_cron_job(&job.id)).await;
            }
        }
        if !keep.is_empty() {
            say(format!(
                "applied the jobs slipway.toml declares: {}",
                keep.join(", ")
            ));
        }
        self.jobs_changed();
    }

    /// The record a declared job becomes (`current`: the one it updates).
    fn declared_record(
        &self,
        project: &ProjectRecord,
        current: Option<&CronJobRecord>,
        entry: Declared,
        now: u64,
    ) -> Result<CronJobRecord, String> {
        let timezone = entry.timezone.unwrap_or_else(|| "UTC".to_owned());
        let schedule = check_job(&entry.name, &entry.schedule, &timezone, &entry.command)
            .map_err(|message| format!("[[cron]] {:?}: {message}", entry.name))?;
        let timeout_s = entry.timeout_s.unwrap_or(3600);
        if timeout_s == 0 || timeout_s > self.config.max_timeout_s {
            return Err(format!(
                "[[cron]] {:?}: `timeout_s` must be from 1 to {}",
                entry.name, self.config.max_timeout_s
            ));
        }
        let timing_changed =
            current.is_none_or(|job| job.schedule != schedule || job.timezone != timezone);
        let wall = crate::ids::now_ms();
        Ok(CronJobRecord {
            v: 1,
            id: current.map_or_else(|| crate::ids::new_id("crn_"), |job| job.id.clone()),
            project_id: project.id.clone(),
            name: entry.name,
            schedule,
            timezone,
            command: entry.command,
            concurrency: entry.concurrency.unwrap_or_default(),
            timeout_s,
            missed: entry.missed.unwrap_or_default(),
            enabled: entry.enabled.unwrap_or(true),
            origin: JobOrigin::ProjectFile,
            created_ms: current.map_or(wall, |job| job.created_ms),
            updated_ms: wall,
            last_due_ms: match timing_changed {
                true => Some(now),
                false => current.and_then(|job| job.last_due_ms),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_tables_parse_strictly() {
        let text = "project = \"shop\"\n[[cron]]\nname = \"nightly\"\nschedule = \"@daily\"\n\
                    command = \"echo hi\"\nmissed = \"runOnce\"\n";
        let jobs = parse(text).unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].missed, Some(Missed::RunOnce));
        assert!(parse("project = \"shop\"\n").unwrap().is_empty());
        let unknown =
            parse("[[cron]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"x\"\nevery = 1\n");
        assert!(unknown.unwrap_err().contains("every"));
        assert!(check_job("nightly", "61 * * * *", "UTC", "x")
            .unwrap_err()
            .contains("schedule"));
        assert!(check_job("Nightly", "@daily", "UTC", "x")
            .unwrap_err()
            .contains("name"));
        assert!(check_job("nightly", "@daily", "Mars/Base", "x")
            .unwrap_err()
            .contains("timezone"));
        assert_eq!(
            check_job("nightly", " @daily ", "Europe/Berlin", "x").unwrap(),
            "@daily"
        );
        // Accepted, but never due: it shows no next runs.
        assert!(check_job("never", "0 0 30 2 *", "UTC", "x").is_ok());
    }
}
