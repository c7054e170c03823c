//! How long runs are kept: per cron job and per project's one-off runs, the newest
//! `history_runs` final runs younger than `history_days`; the others go with their output.
//! Unfinished runs are never purged.

use std::collections::HashMap;

use super::Jobs;
use crate::store::jobs::JobRunRecord;
use crate::store::StoreError;

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

impl Jobs {
    /// Removes the runs past the retention at `now_ms`; how many went.
    pub(crate) async fn purge_history(&self, now_ms: u64) -> Result<usize, StoreError> {
        let runs = self.store.call(|s| s.all_job_runs()).await?;
        let ids = expired(
            runs,
            now_ms,
            self.config.history_days,
            self.config.history_runs,
        );
        if ids.is_empty() {
            return Ok(0);
        }
        let count = ids.len();
        let removed = ids.clone();
        self.store
            .call(move |s| s.remove_job_runs(&removed))
            .await?;
        for id in &ids {
            self.hub.remove(id);
        }
        Ok(count)
    }
}

/// The ids of the final runs past the retention.
fn expired(runs: Vec<JobRunRecord>, now_ms: u64, days: u64, keep: usize) -> Vec<String> {
    let oldest = now_ms.saturating_sub(days.saturating_mul(DAY_MS));
    let mut groups: HashMap<(String, Option<String>), Vec<JobRunRecord>> = HashMap::new();
    for run in runs.into_iter().filter(|run| run.state.is_final()) {
        let key = (run.project_id.clone(), run.job_id.clone());
        groups.entry(key).or_default().push(run);
    }
    let mut ids = Vec::new();
    for mut group in groups.into_values() {
        group.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(b.id.cmp(&a.id)));
        for (index, run) in group.into_iter().enumerate() {
            if index >= keep || run.created_ms < oldest {
                ids.push(run.id);
            }
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::jobs::{RunState, RunTrigger};

    fn run(id: &str, job: Option<&str>, created_ms: u64, state: RunState) -> JobRunRecord {
        JobRunRecord {
            v: 1,
            id: id.into(),
            project_id: "prj_a".into(),
            deployment_id: "dpl_a".into(),
            trigger: RunTrigger::Oneoff,
            command: "true".into(),
            state,
            exit_code: None,
            created_ms,
            started_ms: None,
            finished_ms: None,
            job_id: job.map(str::to_owned),
            scheduled_ms: None,
            timeout_s: 60,
            interactive: false,
            env_keys: Vec::new(),
            message: None,
        }
    }

    #[test]
    fn the_newest_runs_of_each_job_stay_within_the_age() {
        let now = 100 * DAY_MS;
        let runs = vec![
            run("run_1", None, now - 1, RunState::Succeeded),
            run("run_2", None, now - 2, RunState::Failed),
            run("run_3", None, now - 3, RunState::Succeeded),
            run("run_4", Some("crn_a"), now - 4, RunState::Succeeded),
            run(
                "run_5",
                Some("crn_a"),
                now - 31 * DAY_MS,
                RunState::Succeeded,
            ),
            run("run_6", None, now - 40 * DAY_MS, RunState::Running),
        ];
        let mut gone = expired(runs, now, 30, 2);
        gone.sort();
        // One-off: the third newest goes; the job's run older than 30 days goes; a running
        // run stays whatever its age.
        assert_eq!(gone, vec!["run_3".to_owned(), "run_5".to_owned()]);
    }
}
