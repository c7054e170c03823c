//! Jobs (issue 33): one-off runs (`POST /api/projects/{id}/runs`, `slipway run`), their
//! interactive form under a terminal, and cron jobs with their scheduler. A run is a fresh
//! sandbox from the live deployment's build (`Pipeline::start_one_off`); this module owns its
//! record, its output in the log hub (under the run id, like a deployment's), its timeout and
//! cancellation, and the history the operator's retention keeps (`[jobs]`).
//!
//! `schedule.rs` is pure: the next due times of a schedule in a time zone. `scheduler.rs`
//! turns due times into runs with each job's concurrency and missed-run policy.

mod declared;
mod history;
mod runs;
pub mod schedule;
pub mod schedule_schema;
mod scheduler;
mod tty;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::config::JobsConfig;
use crate::logs::LogHub;
use crate::notifications::Notifier;
use crate::pipeline::Pipeline;
use crate::store::Store;

pub use declared::check_job;
pub use runs::{CancelError, RunRequest, StartError};
pub use scheduler::{next_runs, JobClock};
pub use tty::{PendingTty, ATTACH_WINDOW};

/// The jobs service: shared by the API and the scheduler.
pub struct Jobs {
    pipeline: Arc<Pipeline>,
    store: Store,
    hub: Arc<LogHub>,
    notifier: Notifier,
    config: JobsConfig,
    /// Runs not yet final, by run id.
    active: Mutex<HashMap<String, Arc<ActiveRun>>>,
    /// Interactive runs waiting for their terminal client.
    pending: Mutex<HashMap<String, PendingTty>>,
    /// The scheduler's clock.
    clock: JobClock,
    /// Wakes the scheduler when a job is created, changed or deleted.
    changed: tokio::sync::Notify,
}

/// A run that is queued or running.
struct ActiveRun {
    project_id: String,
    job_id: Option<String>,
    cancel: CancellationToken,
    /// Why it is being stopped (set before `cancel` fires).
    reason: Mutex<Option<StopReason>>,
    /// Fires once the run's record is final.
    done: CancellationToken,
}

/// Why a run was stopped before its command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    /// `POST /api/runs/{id}/cancel`, or the project was deleted.
    Canceled,
    /// A newer run of a `replace` cron job.
    Replaced,
    /// The daemon is shutting down.
    Shutdown,
    /// An interactive run's terminal client went away.
    Detached,
}

impl Jobs {
    pub fn new(
        pipeline: Arc<Pipeline>,
        store: Store,
        hub: Arc<LogHub>,
        notifier: Notifier,
        config: JobsConfig,
    ) -> Arc<Jobs> {
        Arc::new(Jobs {
            pipeline,
            store,
            hub,
            notifier,
            clock: match &config.clock_file {
                Some(path) => JobClock::file(path.clone()),
                None => JobClock::System,
            },
            config,
            active: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            changed: tokio::sync::Notify::new(),
        })
    }

    /// The scheduler's "now" (the system clock, or `[jobs] clock_file`).
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Tells the scheduler that jobs changed.
    pub fn jobs_changed(&self) {
        self.changed.notify_one();
    }

    fn pending_ttys(&self) -> std::sync::MutexGuard<'_, HashMap<String, PendingTty>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn active_runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<ActiveRun>>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a run of `project_id` (or of its cron job `job_id`) is queued or running.
    pub fn is_running(&self, project_id: &str, job_id: Option<&str>) -> bool {
        self.active_runs().values().any(|run| {
            run.project_id == project_id
                && job_id.is_none_or(|job| run.job_id.as_deref() == Some(job))
        })
    }

    /// The runs of a deleted project stop (their records are gone with it).
    pub async fn project_deleted(&self, project_id: &str) {
        let runs: Vec<Arc<ActiveRun>> = self
            .active_runs()
            .values()
            .filter(|run| run.project_id == project_id)
            .cloned()
            .collect();
        for run in runs {
            run.stop(StopReason::Canceled);
            run.done.cancelled().await;
        }
    }

    /// Stops every run (daemon shutdown); their records say so.
    pub async fn shutdown(&self) {
        let runs: Vec<Arc<ActiveRun>> = self.active_runs().values().cloned().collect();
        for run in &runs {
            run.stop(StopReason::Shutdown);
        }
        for run in runs {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), run.done.cancelled())
                .await;
        }
    }
}

impl ActiveRun {
    fn stop(&self, reason: StopReason) {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(reason);
        self.cancel.cancel();
    }

    fn reason(&self) -> Option<StopReason> {
        *self.reason.lock().unwrap_or_else(|p| p.into_inner())
    }
}
