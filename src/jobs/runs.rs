//! One run from request to final record: the record is written `queued`, the sandbox started
//! from the live deployment's build, its stdout and stderr go to the log hub under the run id,
//! and it ends `succeeded`, `failed` (`RUN_FAILED`), `timed_out` (`RUN_TIMED_OUT`: stopped
//! after `timeoutS`) or `canceled`. Failures of cron runs and one-off runs are events for
//! notifications. A daemon restart ends the runs it finds unfinished as `failed` (their
//! sandboxes died with the daemon that held them).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{ActiveRun, Jobs, StopReason};
use crate::ids::now_ms;
use crate::logs::{pump_lines, LogStream};
use crate::notifications::{Event, EventKind};
use crate::pipeline::OneOff;
use crate::sandbox::{Exit, Running};
use crate::store::jobs::{JobRunRecord, RunState, RunTrigger};
use crate::store::records::{DeploymentRecord, ProjectRecord};
use crate::store::StoreError;

/// How long a stopped run's command gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A run to start.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub trigger: RunTrigger,
    pub command: String,
    /// Variables added over the project's (their values are never stored).
    pub env: Vec<(String, String)>,
    pub timeout_s: u64,
    pub job_id: Option<String>,
    pub scheduled_ms: Option<u64>,
    /// Start under a terminal once a client attaches (`jobs::tty`).
    pub interactive: bool,
}

/// Why a run was not started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    NoLiveDeployment(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a run cannot be canceled.
#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    #[error("no run {0:?}")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How a run's command ended.
pub(super) enum Outcome {
    Exited(std::io::Result<Exit>),
    TimedOut,
    Stopped(StopReason),
}

impl Jobs {
    /// Writes the run `queued` and starts it in the background; 409-worthy when the project
    /// has no live server deployment to run in.
    pub async fn start(
        self: &Arc<Self>,
        project: &ProjectRecord,
        request: RunRequest,
    ) -> Result<JobRunRecord, StartError> {
        let deployment = self.pipeline.live_server(project).await?.ok_or_else(|| {
            StartError::NoLiveDeployment(format!(
                "project {} has no live server deployment to run in; deploy it first (a \
                 static site has no runtime)",
                project.slug
            ))
        })?;
        let record = JobRunRecord {
            v: 1,
            id: crate::ids::new_id("run_"),
            project_id: project.id.clone(),
            deployment_id: deployment.id.clone(),
            trigger: request.trigger,
            command: request.command.clone(),
            state: RunState::Queued,
            exit_code: None,
            created_ms: now_ms(),
            started_ms: None,
            finished_ms: None,
            job_id: request.job_id.clone(),
            scheduled_ms: request.scheduled_ms,
            timeout_s: request.timeout_s,
            interactive: request.interactive,
            env_keys: request.env.iter().map(|(key, _)| key.clone()).collect(),
            message: None,
        };
        let stored = record.clone();
        self.store
            .call(move |s| s.put_queued_job_run(&stored))
            .await?;
        let active = self.register(&record);
        if request.interactive {
            self.wait_for_client(
                project.clone(),
                deployment,
                record.clone(),
                request.env,
                active,
            );
            return Ok(record);
        }
        let jobs = self.clone();
        let (project, env) = (project.clone(), request.env);
        let mut running = record.clone();
        tokio::spawn(async move {
            jobs.execute(&project, &deployment, &mut running, &env, &active)
                .await;
            jobs.finish(&project, running, &active).await;
        });
        Ok(record)
    }

    fn register(&self, record: &JobRunRecord) -> Arc<ActiveRun> {
        let active = Arc::new(ActiveRun {
            project_id: record.project_id.clone(),
            job_id: record.job_id.clone(),
            cancel: CancellationToken::new(),
            reason: Default::default(),
            done: CancellationToken::new(),
        });
        self.active_runs().insert(record.id.clone(), active.clone());
        active
    }

    /// Starts the sandbox and waits for it; `record` leaves with its final state.
    async fn execute(
        &self,
        project: &ProjectRecord,
        deployment: &DeploymentRecord,
        record: &mut JobRunRecord,
        env: &[(String, String)],
        active: &ActiveRun,
    ) {
        let id = record.id.clone();
        self.hub.system(
            &id,
            &format!("run: $ {} (in {})", record.command, deployment.id),
        );
        let one_off = OneOff {
            run_id: &id,
            command: &record.command,
            env,
            tty: None,
        };
        let start = self.pipeline.start_one_off(project, deployment, one_off);
        let mut running = tokio::select! {
            started = start => match started {
                Ok(running) => running,
                Err(message) => return end(record, RunState::Failed, None, message),
            },
            _ = active.cancel.cancelled() => {
                let reason = active.reason().unwrap_or(StopReason::Canceled);
                return end(record, RunState::Canceled, None, stopped_message(reason));
            }
        };
        self.mark_running(record).await;
        let pumps = self.pump_output(&mut running, &id);
        let outcome = wait(&mut running, record.timeout_s, active).await;
        for pump in pumps {
            let _ = tokio::time::timeout(Duration::from_secs(2), pump).await;
        }
        judge(record, outcome);
    }

    pub(super) async fn mark_running(&self, record: &mut JobRunRecord) {
        record.state = RunState::Running;
        record.started_ms = Some(now_ms());
        let (stored, id) = (record.clone(), record.id.clone());
        if let Err(error) = self.store.call(move |s| s.update_job_run(&stored)).await {
            tracing::warn!(%error, run = %id, "could not record a run as running");
        }
    }

    fn pump_output(&self, running: &mut Running, id: &str) -> Vec<JoinHandle<()>> {
        let pipes = [
            (running.stdout.take(), LogStream::Stdout),
            (running.stderr.take(), LogStream::Stderr),
        ];
        pipes
            .into_iter()
            .filter_map(|(pipe, stream)| Some((pipe?, stream)))
            .map(|(pipe, stream)| {
                let hub = self.hub.clone();
                tokio::spawn(pump_lines(pipe, hub, id.to_owned(), stream, None))
            })
            .collect()
    }

    /// Records the final state, says it in the run's log, ends its log stream and notifies a
    /// failure (nothing, if the run went with its project meanwhile).
    pub(super) async fn finish(
        &self,
        project: &ProjectRecord,
        record: JobRunRecord,
        active: &ActiveRun,
    ) {
        let id = record.id.clone();
        let stored = record.clone();
        let kept = match self.store.call(move |s| s.update_job_run(&stored)).await {
            Ok(kept) => kept,
            Err(error) => {
                tracing::error!(%error, run = %id, "could not record how a run ended");
                true
            }
        };
        self.active_runs().remove(&id);
        if !kept {
            // Its project was deleted: nothing of it stays.
            self.hub.remove(&id);
            active.done.cancel();
            return;
        }
        let said = match (&record.state, &record.message) {
            (_, Some(message)) => format!("run: {message}"),
            (RunState::Succeeded, None) => "run: the command exited 0".to_owned(),
            (state, None) => format!("run: {state:?}"),
        };
        self.hub.system(&id, &said);
        self.hub.end(&id);
        active.done.cancel();
        self.notify(project, &record);
    }

    fn notify(&self, project: &ProjectRecord, record: &JobRunRecord) {
        let kind = match (record.trigger, record.state) {
            (RunTrigger::Cron, RunState::TimedOut) => EventKind::CronTimedOut,
            (RunTrigger::Cron, RunState::Failed) => EventKind::CronFailed,
            (_, RunState::Failed | RunState::TimedOut) => EventKind::RunFailed,
            _ => return,
        };
        let event = Event::new(kind)
            .project(&project.slug)
            .deployment(&record.deployment_id)
            .run(&record.id, record.job_id.as_deref())
            .error(record.message.as_deref().unwrap_or("the run failed"));
        self.notifier.emit(event);
    }

    /// Stops a queued or running run; the record as it is once final (or, for a run that
    /// had ended, as it ended).
    pub async fn cancel(&self, id: &str) -> Result<JobRunRecord, CancelError> {
        let active = self.active_runs().get(id).cloned();
        if let Some(active) = active {
            active.stop(StopReason::Canceled);
            let wait = STOP_GRACE + Duration::from_secs(5);
            let _ = tokio::time::timeout(wait, active.done.cancelled()).await;
        }
        let key = id.to_owned();
        self.store
            .call(move |s| s.job_run(&key))
            .await?
            .ok_or_else(|| CancelError::NotFound(id.to_owned()))
    }

    /// Stops the runs of cron job `job_id` (a `replace` job's newer run) and waits for them.
    pub(crate) async fn replace_runs_of(&self, job_id: &str) {
        let runs: Vec<Arc<ActiveRun>> = self
            .active_runs()
            .values()
            .filter(|run| run.job_id.as_deref() == Some(job_id))
            .cloned()
            .collect();
        for run in runs {
            run.stop(StopReason::Replaced);
            run.done.cancelled().await;
        }
    }

    /// At start: runs a previous daemon left unfinished are `failed` (their sandboxes went
    /// with it); old runs past the retention go.
    pub async fn recover(&self) -> Result<usize, StoreError> {
        let runs = self.store.call(|s| s.all_job_runs()).await?;
        let mut ended = 0;
        for mut run in runs.into_iter().filter(|run| !run.state.is_final()) {
            let message = "the daemon stopped while the run was unfinished; its sandbox \
                           was stopped with it. Start it again.";
            end(&mut run, RunState::Failed, None, message.to_owned());
            self.hub.system(&run.id, &format!("run: {message}"));
            self.hub.end(&run.id);
            self.store.call(move |s| s.put_job_run(&run)).await?;
            ended += 1;
        }
        self.purge_history(now_ms()).await?;
        Ok(ended)
    }
}

/// Waits for the command, its timeout, or a stop.
pub(super) async fn wait(running: &mut Running, timeout_s: u64, active: &ActiveRun) -> Outcome {
    let outcome = tokio::select! {
        exit = running.wait() => return Outcome::Exited(exit),
        _ = tokio::time::sleep(Duration::from_secs(timeout_s)) => Outcome::TimedOut,
        _ = active.cancel.cancelled() => {
            Outcome::Stopped(active.reason().unwrap_or(StopReason::Canceled))
        }
    };
    if running.stop(STOP_GRACE).await.is_err() {
        running.kill();
    }
    outcome
}

/// The record's final state from how the command ended.
pub(super) fn judge(record: &mut JobRunRecord, outcome: Outcome) {
    match outcome {
        Outcome::Exited(Ok(exit)) if exit.success() => {
            record.exit_code = Some(0);
            record.state = RunState::Succeeded;
            record.finished_ms = Some(now_ms());
        }
        Outcome::Exited(Ok(exit)) => {
            let message = format!("the command {} (RUN_FAILED)", exit.describe());
            end(record, RunState::Failed, exit_code(&exit), message);
        }
        Outcome::Exited(Err(error)) => {
            let message = format!("the command could not be waited for: {error}");
            end(record, RunState::Failed, None, message);
        }
        Outcome::TimedOut => {
            let message = format!(
                "the command ran past its timeout of {} s and was stopped (RUN_TIMED_OUT); \
                 raise timeoutS if it needs longer",
                record.timeout_s
            );
            end(record, RunState::TimedOut, None, message);
        }
        Outcome::Stopped(reason) => {
            end(record, RunState::Canceled, None, stopped_message(reason));
        }
    }
}

/// The exit code a shell would give: the code, or 128 + the signal (137 for the OOM kill).
fn exit_code(exit: &Exit) -> Option<i32> {
    match exit {
        Exit::Code(code) => Some(*code),
        Exit::Signal(signal) => Some(128 + signal),
        Exit::OutOfMemory => Some(128 + 9),
        Exit::PidsExhausted => None,
    }
}

fn stopped_message(reason: StopReason) -> String {
    match reason {
        StopReason::Canceled => "canceled; the command was stopped".to_owned(),
        StopReason::Replaced => {
            "replaced by a newer run of its cron job (concurrency: replace)".to_owned()
        }
        StopReason::Shutdown => "the daemon shut down; the command was stopped".to_owned(),
        StopReason::Detached => "the terminal client went away; the command was stopped".to_owned(),
    }
}

pub(super) fn end(
    record: &mut JobRunRecord,
    state: RunState,
    exit_code: Option<i32>,
    message: String,
) {
    record.state = state;
    record.exit_code = exit_code;
    record.finished_ms = Some(now_ms());
    record.message = Some(message);
}
