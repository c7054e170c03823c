//! One step of a run: marked running, raced against cancellation, its result recorded and
//! published (the run's progress, the status stream). Skipped steps, and the failure a
//! stopped run reports.

use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use super::failure::Failure;
use super::golive::Prepared;
use super::{ActiveRun, Pipeline, StopReason};
use crate::error_code::ErrorCode;
use crate::store::records::StepState;

impl Pipeline {
    /// Runs one step: marks it running, races it against cancellation, records the result.
    /// The future answers `true` for done, `false` for skipped.
    pub(super) async fn step<T>(
        &self,
        active: &Arc<ActiveRun>,
        name: &'static str,
        work: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure>
    where
        T: StepValue,
    {
        let started_ms = crate::ids::now_ms();
        self.set_step(active, name, StepState::Running, Some(started_ms), None)
            .await;
        let started = Instant::now();
        let result = tokio::select! {
            result = work => result,
            _ = active.cancel.cancelled() => Err(self.stop_failure(active, name)),
        };
        let duration = Some(started.elapsed().as_millis() as u64);
        match &result {
            Ok(value) if !value.skipped() => {
                self.set_step(active, name, StepState::Succeeded, None, duration)
                    .await
            }
            Ok(_) => {
                self.set_step(active, name, StepState::Skipped, None, duration)
                    .await
            }
            Err(failure) if failure.code == ErrorCode::Canceled => {
                self.set_step(active, name, StepState::Skipped, None, duration)
                    .await
            }
            Err(_) => {
                self.set_step(active, name, StepState::Failed, None, duration)
                    .await
            }
        }
        result
    }

    pub(super) async fn skip(&self, active: &Arc<ActiveRun>, name: &'static str) {
        self.set_step(
            active,
            name,
            StepState::Skipped,
            Some(crate::ids::now_ms()),
            Some(0),
        )
        .await;
    }

    pub(super) fn stop_failure(&self, active: &ActiveRun, step: &'static str) -> Failure {
        match *active.reason.lock().expect("reason poisoned") {
            Some(StopReason::Superseded) => Failure::new(
                step,
                ErrorCode::Canceled,
                "superseded by a newer provisioning run of this project",
            ),
            Some(StopReason::Canceled) => Failure::new(
                step,
                ErrorCode::Canceled,
                "canceled through the API (POST /api/provisioning/{id}/cancel)",
            ),
            Some(StopReason::Interrupted) | None => Failure::new(
                step,
                ErrorCode::Interrupted,
                "the daemon stopped while this run was in progress; provision again",
            ),
        }
    }

    async fn set_step(
        &self,
        active: &Arc<ActiveRun>,
        name: &str,
        state: StepState,
        started_ms: Option<u64>,
        duration_ms: Option<u64>,
    ) {
        let record = {
            let mut record = active.record.lock().expect("run poisoned");
            if let Some(step) = record.steps.iter_mut().find(|s| s.name == name) {
                step.state = state;
                if started_ms.is_some() {
                    step.started_ms = started_ms;
                }
                if duration_ms.is_some() {
                    step.duration_ms = duration_ms;
                }
            }
            record.clone()
        };
        let status = self.status_of(active, &record, crate::ids::now_ms()).await;
        let mut stored = record.clone();
        stored.progress = active
            .shown_progress
            .load(std::sync::atomic::Ordering::Relaxed);
        if let Err(error) = self.store.call(move |s| s.put_run_progress(&stored)).await {
            tracing::error!(%error, "could not record step progress");
        }
        self.hub
            .publish_status(&record.deployment_id, super::status_event(&status));
    }
}

/// A step's result value: `bool` says done (true) or skipped (false); other values are done.
pub(crate) trait StepValue {
    fn skipped(&self) -> bool {
        false
    }
}
impl StepValue for bool {
    fn skipped(&self) -> bool {
        !*self
    }
}
impl StepValue for Vec<(String, String)> {}
impl StepValue for Prepared {}
