//! Runs in flight: the table of them (`InFlight`), their live status, cancellation (one run,
//! a project's or a preview's), the end of a run, and interrupting them all at shutdown.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio_util::task::TaskTracker;

use super::{run_key, run_status, ActiveRun, CancelError, Pipeline, ProvisionStatus, StopReason};
use crate::store::records::{DeployTarget, RunRecord};

/// The runs in flight, by id and by project (production: the project id; a preview:
/// `<project id>#<preview>`), and the tasks that run them.
#[derive(Default)]
pub(super) struct InFlight {
    runs: Mutex<HashMap<String, Arc<ActiveRun>>>,
    by_project: Mutex<HashMap<String, String>>,
    tasks: TaskTracker,
}

impl InFlight {
    fn get(&self, run_id: &str) -> Option<Arc<ActiveRun>> {
        self.runs
            .lock()
            .expect("runs poisoned")
            .get(run_id)
            .cloned()
    }

    /// Adds a run; returns the run it supersedes (the same project or preview's), if any.
    pub(super) fn insert(
        &self,
        run_id: &str,
        key: String,
        active: Arc<ActiveRun>,
    ) -> Option<Arc<ActiveRun>> {
        self.runs
            .lock()
            .expect("runs poisoned")
            .insert(run_id.to_owned(), active);
        let older = self
            .by_project
            .lock()
            .expect("runs poisoned")
            .insert(key, run_id.to_owned());
        older.and_then(|id| self.get(&id))
    }

    fn remove(&self, run_id: &str, key: &str) {
        self.runs.lock().expect("runs poisoned").remove(run_id);
        let mut by_project = self.by_project.lock().expect("runs poisoned");
        if by_project.get(key).map(String::as_str) == Some(run_id) {
            by_project.remove(key);
        }
    }

    /// The runs whose project key `wanted` accepts.
    fn of_projects(&self, wanted: impl Fn(&str) -> bool) -> Vec<Arc<ActiveRun>> {
        let run_ids: Vec<String> = self
            .by_project
            .lock()
            .expect("runs poisoned")
            .iter()
            .filter(|(key, _)| wanted(key))
            .map(|(_, run)| run.clone())
            .collect();
        run_ids.iter().filter_map(|id| self.get(id)).collect()
    }

    fn all(&self) -> Vec<Arc<ActiveRun>> {
        self.runs
            .lock()
            .expect("runs poisoned")
            .values()
            .cloned()
            .collect()
    }

    pub(super) fn spawn(&self, run: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(run);
    }
}

impl Pipeline {
    /// The status object of a run (live while in flight, else from the store).
    pub async fn status(&self, run_id: &str) -> crate::store::Result<Option<ProvisionStatus>> {
        let active = self.inflight.get(run_id);
        let now = crate::ids::now_ms();
        if let Some(active) = active {
            let record = active.record.lock().expect("run poisoned").clone();
            return Ok(Some(self.status_of(&active, &record, now).await));
        }
        let id = run_id.to_owned();
        let Some(record) = self.store.call(move |s| s.run(&id)).await? else {
            return Ok(None);
        };
        let slug = self.slug_of(&record.project_id).await;
        let url = self.target_url(&slug, &record.request.target);
        Ok(Some(run_status(&record, now, 0, &url).0))
    }

    pub(crate) async fn status_of(
        &self,
        active: &ActiveRun,
        record: &RunRecord,
        now: u64,
    ) -> ProvisionStatus {
        let slug = self.slug_of(&record.project_id).await;
        let floor = active.shown_progress.load(Ordering::Relaxed);
        let url = self.target_url(&slug, &record.request.target);
        let (value, shown) = run_status(record, now, floor, &url);
        active.shown_progress.fetch_max(shown, Ordering::Relaxed);
        value
    }

    async fn slug_of(&self, project_id: &str) -> String {
        let id = project_id.to_owned();
        match self.store.call(move |s| s.find_project(&id)).await {
            Ok(Some(project)) => project.slug,
            _ => String::from("deleted-project"),
        }
    }

    pub(crate) fn finish(&self, run_id: &str, project_id: &str, target: &DeployTarget) {
        self.inflight.remove(run_id, &run_key(project_id, target));
    }

    /// Cancels a run in flight (its processes are killed, the live deployment is untouched)
    /// and returns its final status once it has ended `provisioning_canceled`.
    pub async fn cancel(&self, run_id: &str) -> Result<ProvisionStatus, CancelError> {
        let Some(active) = self.inflight.get(run_id) else {
            return match self.status(run_id).await {
                Ok(Some(status)) => Err(CancelError::Finished(Box::new(status))),
                Ok(None) => Err(CancelError::NotFound),
                Err(error) => Err(CancelError::Store(error)),
            };
        };
        active
            .reason
            .lock()
            .expect("reason poisoned")
            .get_or_insert(StopReason::Canceled);
        active.cancel.cancel();
        // The run records its end and leaves the table of runs in flight.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while self.inflight.get(run_id).is_some() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        match self.status(run_id).await {
            Ok(Some(status)) => Ok(status),
            Ok(None) => Err(CancelError::NotFound),
            Err(error) => Err(CancelError::Store(error)),
        }
    }

    /// Cancels the project's runs in flight, production's and its previews' (project
    /// deleted); with `preview`, only that preview's (torn down).
    pub fn cancel_project(&self, project_id: &str, preview: Option<&str>) {
        let prefix = format!("{project_id}#");
        let runs = self.inflight.of_projects(|key| match preview {
            None => key == project_id || key.starts_with(&prefix),
            Some(name) => key.strip_prefix(&prefix) == Some(name),
        });
        for active in runs {
            *active.reason.lock().expect("reason poisoned") = Some(StopReason::Superseded);
            active.cancel.cancel();
        }
    }

    /// Daemon stopping: every run in flight ends `INTERRUPTED`; waits for them to record it.
    pub async fn interrupt_all(&self) {
        for run in self.inflight.all() {
            *run.reason.lock().expect("reason poisoned") = Some(StopReason::Interrupted);
            run.cancel.cancel();
        }
        self.inflight.tasks.close();
        self.inflight.tasks.wait().await;
    }
}
