//! One-off and cron runs (`run_…`) and cron jobs (`crn_…`) of issue 33. A run's output is in
//! the log tables under its run id, like a deployment's; its record says how it ended. Runs
//! are kept for the operator's retention (`[jobs]`), purged with their logs.

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use super::{all_records, get_record, put_record, tables, Result, Store};

/// What started a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunTrigger {
    Oneoff,
    Cron,
    Release,
}

/// Where a run is; the last five are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Queued,
    Running,
    Succeeded,
    Failed,
    TimedOut,
    Canceled,
    Skipped,
}

impl RunState {
    pub fn is_final(self) -> bool {
        !matches!(self, RunState::Queued | RunState::Running)
    }
}

/// A one-off or cron run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRunRecord {
    pub v: u32,
    pub id: String,
    pub project_id: String,
    /// The live deployment whose build it ran in (empty for a skipped run that had none).
    pub deployment_id: String,
    pub trigger: RunTrigger,
    pub command: String,
    pub state: RunState,
    pub exit_code: Option<i32>,
    pub created_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    /// The cron job that started it.
    pub job_id: Option<String>,
    /// The due time a cron run was for.
    pub scheduled_ms: Option<u64>,
    pub timeout_s: u64,
    /// Started under a terminal (`slipway run -it`).
    pub interactive: bool,
    /// The names (never the values) of the variables the request added.
    pub env_keys: Vec<String>,
    /// Why it failed, was skipped or canceled, in words.
    pub message: Option<String>,
}

/// What a cron job does when it is due while its previous run still runs.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Concurrency {
    #[default]
    Forbid,
    Allow,
    Replace,
}

/// What a cron job does about due times the daemon was down for.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Missed {
    #[default]
    Skip,
    RunOnce,
}

/// Who declared a cron job.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum JobOrigin {
    #[default]
    Api,
    // `[[cron]]` in the project's slipway.toml, applied at deploy.
    ProjectFile,
}

/// A cron job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CronJobRecord {
    pub v: u32,
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub schedule: String,
    pub timezone: String,
    pub command: String,
    pub concurrency: Concurrency,
    pub timeout_s: u64,
    pub missed: Missed,
    pub enabled: bool,
    #[serde(default)]
    pub origin: JobOrigin,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// The last due time the scheduler dealt with (run, skipped or missed): the next one it
    /// looks for comes after it, and after a restart the ones between it and now were missed.
    pub last_due_ms: Option<u64>,
}

impl Store {
    /// Writes a run just queued without waiting for the disk: the next durable commit (its
    /// start or end, or any other write) persists it; a crash in between loses a run that had
    /// not started.
    pub fn put_queued_job_run(&self, run: &JobRunRecord) -> Result<()> {
        let mut txn = self.write()?;
        txn.set_durability(redb::Durability::None)
            .map_err(|e| super::StoreError::Db(e.to_string()))?;
        put_record(&mut txn.open_table(tables::JOB_RUNS)?, &run.id, run)?;
        txn.commit()?;
        Ok(())
    }

    pub fn put_job_run(&self, run: &JobRunRecord) -> Result<()> {
        let txn = self.write()?;
        put_record(&mut txn.open_table(tables::JOB_RUNS)?, &run.id, run)?;
        txn.commit()?;
        Ok(())
    }

    /// Writes a run that is still stored (`false`: it went with its project, nothing
    /// written).
    pub fn update_job_run(&self, run: &JobRunRecord) -> Result<bool> {
        let txn = self.write()?;
        {
            let mut table = txn.open_table(tables::JOB_RUNS)?;
            if table.get(run.id.as_str())?.is_none() {
                return Ok(false);
            }
            put_record(&mut table, &run.id, run)?;
        }
        txn.commit()?;
        Ok(true)
    }

    pub fn job_run(&self, id: &str) -> Result<Option<JobRunRecord>> {
        let txn = self.read()?;
        get_record(&txn.open_table(tables::JOB_RUNS)?, "job_runs", id)
    }

    pub fn all_job_runs(&self) -> Result<Vec<JobRunRecord>> {
        let txn = self.read()?;
        all_records(&txn.open_table(tables::JOB_RUNS)?, "job_runs")
    }

    /// A project's runs (or one job's, with `job_id`), in no particular order.
    pub fn job_runs_of(&self, project_id: &str, job_id: Option<&str>) -> Result<Vec<JobRunRecord>> {
        Ok(self
            .all_job_runs()?
            .into_iter()
            .filter(|run| run.project_id == project_id)
            .filter(|run| job_id.is_none_or(|job| run.job_id.as_deref() == Some(job)))
            .collect())
    }

    /// Removes runs and their log lines in one commit.
    pub fn remove_job_runs(&self, ids: &[String]) -> Result<()> {
        let txn = self.write()?;
        remove_runs(&txn, ids)?;
        txn.commit()?;
        Ok(())
    }

    pub fn put_cron_job(&self, job: &CronJobRecord) -> Result<()> {
        let txn = self.write()?;
        put_record(&mut txn.open_table(tables::CRON_JOBS)?, &job.id, job)?;
        txn.commit()?;
        Ok(())
    }

    pub fn cron_job(&self, id: &str) -> Result<Option<CronJobRecord>> {
        let txn = self.read()?;
        get_record(&txn.open_table(tables::CRON_JOBS)?, "cron_jobs", id)
    }

    pub fn all_cron_jobs(&self) -> Result<Vec<CronJobRecord>> {
        let txn = self.read()?;
        all_records(&txn.open_table(tables::CRON_JOBS)?, "cron_jobs")
    }

    pub fn cron_jobs_of(&self, project_id: &str) -> Result<Vec<CronJobRecord>> {
        Ok(self
            .all_cron_jobs()?
            .into_iter()
            .filter(|job| job.project_id == project_id)
            .collect())
    }

    /// Stores `job` unless another job of its project has its name (then `false`, nothing
    /// written).
    pub fn insert_cron_job(&self, job: &CronJobRecord) -> Result<bool> {
        let txn = self.write()?;
        {
            let mut table = txn.open_table(tables::CRON_JOBS)?;
            let all: Vec<CronJobRecord> = all_records(&table, "cron_jobs")?;
            let taken = all.iter().any(|other| {
                other.project_id == job.project_id && other.name == job.name && other.id != job.id
            });
            if taken {
                return Ok(false);
            }
            put_record(&mut table, &job.id, job)?;
        }
        txn.commit()?;
        Ok(true)
    }

    /// Records the last due time the scheduler dealt with of each job that still exists, in
    /// one commit (a change made meanwhile through the API is kept).
    pub fn update_cron_jobs_due(&self, jobs: &[CronJobRecord]) -> Result<()> {
        let txn = self.write()?;
        {
            let mut table = txn.open_table(tables::CRON_JOBS)?;
            for job in jobs {
                let stored: Option<CronJobRecord> = get_record(&table, "cron_jobs", &job.id)?;
                if let Some(mut stored) = stored {
                    stored.last_due_ms = job.last_due_ms;
                    put_record(&mut table, &job.id, &stored)?;
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Deletes a job; its runs stay until retention takes them (their `jobId` dangles).
    pub fn delete_cron_job(&self, id: &str) -> Result<Option<CronJobRecord>> {
        let txn = self.write()?;
        let removed = {
            let mut table = txn.open_table(tables::CRON_JOBS)?;
            let removed = get_record(&table, "cron_jobs", id)?;
            table.remove(id)?;
            removed
        };
        txn.commit()?;
        Ok(removed)
    }
}

fn remove_runs(txn: &redb::WriteTransaction, ids: &[String]) -> Result<()> {
    let mut runs = txn.open_table(tables::JOB_RUNS)?;
    let mut logs = txn.open_table(tables::LOGS)?;
    let mut stats = txn.open_table(tables::LOG_STATS)?;
    for id in ids {
        runs.remove(id.as_str())?;
        logs.retain_in((id.as_str(), 0)..=(id.as_str(), u64::MAX), |_, _| false)?;
        stats.remove(id.as_str())?;
    }
    Ok(())
}

/// A deleted project's runs (with their logs) and cron jobs; the run ids, for the log hub.
pub(super) fn remove_project_jobs(
    txn: &redb::WriteTransaction,
    project_id: &str,
) -> Result<Vec<String>> {
    let runs: Vec<JobRunRecord> = all_records(&txn.open_table(tables::JOB_RUNS)?, "job_runs")?;
    let ids: Vec<String> = runs
        .into_iter()
        .filter(|run| run.project_id == project_id)
        .map(|run| run.id)
        .collect();
    remove_runs(txn, &ids)?;
    let mut jobs = txn.open_table(tables::CRON_JOBS)?;
    let all: Vec<CronJobRecord> = all_records(&jobs, "cron_jobs")?;
    for job in all.into_iter().filter(|job| job.project_id == project_id) {
        jobs.remove(job.id.as_str())?;
    }
    Ok(ids)
}
