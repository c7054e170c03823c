//! The cron scheduler: one task that sleeps until the earliest due time of the enabled jobs
//! (woken early when a job changes), then deals with every job that is due.
//!
//! Each job keeps the last due time it dealt with (`last_due_ms`); the next is the schedule's
//! first due time after it (`schedule.rs`). A due time reached within [`ON_TIME`] fires a run
//! under the job's concurrency rule: `forbid` records a `skipped` run while the previous one
//! runs, `replace` stops it first, `allow` starts another. Due times found later than that —
//! the daemon was down, or the clock jumped — were missed: `runOnce` starts one catch-up run
//! for the latest of them, `skip` records one `skipped` run that says how many were missed.
//! A job that is due while its project has nothing live records a `skipped` run too.
//!
//! The clock is the system's, or with `[jobs] clock_file` a time read from that file (tests
//! move it to make jobs due without waiting).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use super::schedule::{parse_zone, Schedule};
use super::{Jobs, RunRequest};
use crate::store::jobs::{Concurrency, CronJobRecord, JobRunRecord, Missed, RunState, RunTrigger};
use crate::store::records::ProjectRecord;

/// A due time found up to this late still fires as scheduled; later, it was missed.
const ON_TIME: Duration = Duration::from_secs(60);
/// The longest sleep between two looks at the jobs (the system clock may be set meanwhile).
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// How often runs past the retention are removed (and at start).
const PURGE_EVERY: Duration = Duration::from_secs(3600);
/// How often a clock file is read.
const FILE_CLOCK_TICK: Duration = Duration::from_millis(200);
/// Due times counted at most when finding how many were missed.
const MAX_COUNTED: usize = 10_000;

/// Where the scheduler's "now" comes from.
#[derive(Debug, Clone)]
pub enum JobClock {
    System,
    /// A file holding an RFC 3339 time (`[jobs] clock_file`), and the last time read from it.
    File(PathBuf, Arc<AtomicU64>),
}

impl JobClock {
    pub fn file(path: PathBuf) -> JobClock {
        JobClock::File(path, Arc::new(AtomicU64::new(0)))
    }

    pub fn now_ms(&self) -> u64 {
        match self {
            JobClock::System => crate::ids::now_ms(),
            JobClock::File(path, last) => {
                let read = std::fs::read_to_string(path)
                    .ok()
                    .and_then(|text| humantime::parse_rfc3339_weak(text.trim()).ok())
                    .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|elapsed| elapsed.as_millis() as u64);
                match (read, last.load(Ordering::Relaxed)) {
                    (Some(now), _) => {
                        last.store(now, Ordering::Relaxed);
                        now
                    }
                    // Caught while being rewritten (or broken): the time stands still
                    // rather than jumping to the system's, which would skip every due time
                    // in between.
                    (None, known) if known > 0 => known,
                    (None, _) => {
                        tracing::warn!(path = %path.display(), "the clock file holds no RFC 3339 time; using the system clock");
                        crate::ids::now_ms()
                    }
                }
            }
        }
    }
}

/// A job's schedule and zone, parsed (both were checked when the job was stored).
pub(crate) fn timing(job: &CronJobRecord) -> Option<(Schedule, jiff::tz::TimeZone)> {
    let schedule = Schedule::parse(&job.schedule).ok()?;
    let zone = parse_zone(&job.timezone).ok()?;
    Some((schedule, zone))
}

/// The next `n` due times of `job` after `now_ms`: each in its zone with the offset
/// (`2026-03-08T03:00:00-04:00`) and in UTC.
pub fn next_runs(job: &CronJobRecord, now_ms: u64, n: usize) -> Option<Vec<(String, String)>> {
    let (schedule, zone) = timing(job)?;
    let times = schedule.upcoming(&zone, timestamp(now_ms), n);
    Some(
        times
            .into_iter()
            .map(|at| {
                let local = at
                    .to_zoned(zone.clone())
                    .strftime("%Y-%m-%dT%H:%M:%S%:z")
                    .to_string();
                (local, crate::ids::rfc3339(millis(at)))
            })
            .collect(),
    )
}

pub(crate) fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from_millisecond(ms as i64).unwrap_or(Timestamp::UNIX_EPOCH)
}

pub(crate) fn millis(at: Timestamp) -> u64 {
    at.as_millisecond().max(0) as u64
}

/// What a job's due times since it was last dealt with call for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    Nothing,
    /// One due time, on time.
    Fire {
        at_ms: u64,
    },
    /// `count` due times went by, the latest at `latest_ms`.
    Missed {
        latest_ms: u64,
        count: usize,
    },
}

/// Pure: what `job` (last dealt with at `last_ms`) calls for at `now_ms`.
pub(crate) fn due(
    schedule: &Schedule,
    zone: &jiff::tz::TimeZone,
    last_ms: u64,
    now_ms: u64,
) -> Due {
    let now = timestamp(now_ms);
    let Some(first) = schedule.next_after(zone, timestamp(last_ms)) else {
        return Due::Nothing;
    };
    if first > now {
        return Due::Nothing;
    }
    let (mut latest, mut count) = (first, 1);
    while count < MAX_COUNTED {
        match schedule.next_after(zone, latest) {
            Some(next) if next <= now => {
                latest = next;
                count += 1;
            }
            _ => break,
        }
    }
    let late = now_ms.saturating_sub(millis(first));
    if count == 1 && late <= ON_TIME.as_millis() as u64 {
        Due::Fire {
            at_ms: millis(first),
        }
    } else {
        Due::Missed {
            latest_ms: millis(latest),
            count,
        }
    }
}

impl Jobs {
    /// Runs until `shutdown`: deals with due jobs, then sleeps until the next due time.
    pub async fn run_scheduler(self: Arc<Self>, shutdown: CancellationToken) {
        let mut purged = tokio::time::Instant::now();
        loop {
            if purged.elapsed() > PURGE_EVERY {
                purged = tokio::time::Instant::now();
                match self.purge_history(crate::ids::now_ms()).await {
                    Ok(0) => {}
                    Ok(count) => tracing::info!(runs = count, "runs past the retention removed"),
                    Err(error) => tracing::warn!(%error, "could not remove old runs"),
                }
            }
            let now_ms = self.clock.now_ms();
            let next = match self.tick(now_ms).await {
                Ok(next) => next,
                Err(error) => {
                    tracing::error!(%error, "the cron scheduler could not read its jobs");
                    None
                }
            };
            let sleep = match (&self.clock, next) {
                (JobClock::File(..), _) => FILE_CLOCK_TICK,
                (JobClock::System, Some(next_ms)) => {
                    Duration::from_millis(next_ms.saturating_sub(self.clock.now_ms()))
                        .min(MAX_SLEEP)
                }
                (JobClock::System, None) => MAX_SLEEP,
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(sleep) => {}
                _ = self.changed.notified() => {}
            }
        }
    }

    /// Deals with every enabled job due at `now_ms`; the earliest coming due time.
    async fn tick(self: &Arc<Self>, now_ms: u64) -> Result<Option<u64>, crate::store::StoreError> {
        let jobs = self.store.call(|s| s.all_cron_jobs()).await?;
        let mut earliest: Option<u64> = None;
        let mut decided = Vec::new();
        for mut job in jobs.into_iter().filter(|job| job.enabled) {
            let Some((schedule, zone)) = timing(&job) else {
                continue;
            };
            let last = job.last_due_ms.unwrap_or(job.created_ms);
            let decision = due(&schedule, &zone, last, now_ms);
            match decision {
                Due::Nothing => {}
                Due::Fire { at_ms }
                | Due::Missed {
                    latest_ms: at_ms, ..
                } => {
                    job.last_due_ms = Some(at_ms);
                    decided.push((job.clone(), decision));
                }
            }
            let last = job.last_due_ms.unwrap_or(job.created_ms);
            if let Some(next) = schedule.next_after(&zone, timestamp(last)) {
                let next = millis(next);
                earliest = Some(earliest.map_or(next, |e: u64| e.min(next)));
            }
        }
        if decided.is_empty() {
            return Ok(earliest);
        }
        // Every due time dealt with is recorded in one commit, then the runs start side by
        // side: the last of many jobs due at once does not wait for the others' starts.
        let dues: Vec<CronJobRecord> = decided.iter().map(|(job, _)| job.clone()).collect();
        self.store
            .call(move |s| s.update_cron_jobs_due(&dues))
            .await?;
        for (job, decision) in decided {
            let jobs = self.clone();
            tokio::spawn(async move {
                match decision {
                    Due::Fire { at_ms } => jobs.fire(&job, at_ms, None).await,
                    Due::Missed { latest_ms, count } => jobs.missed(&job, latest_ms, count).await,
                    Due::Nothing => {}
                }
            });
        }
        Ok(earliest)
    }

    async fn missed(self: &Arc<Self>, job: &CronJobRecord, latest_ms: u64, count: usize) {
        let times = if count == 1 { "time" } else { "times" };
        match job.missed {
            Missed::RunOnce => {
                let note = format!(
                    "catch-up run for {count} missed due {times} (missed: runOnce), the \
                     latest {}",
                    crate::ids::rfc3339(latest_ms)
                );
                self.fire(job, latest_ms, Some(note)).await;
            }
            Missed::Skip => {
                let message = format!(
                    "{count} due {times} went by while the scheduler was not running (daemon \
                     down or clock changed), the latest {}; skipped (missed: skip)",
                    crate::ids::rfc3339(latest_ms)
                );
                self.record_skipped(job, latest_ms, message).await;
            }
        }
    }

    /// Starts a run of `job` for due time `at_ms` under its concurrency rule (`note`: said
    /// in the run's log first, for catch-up runs).
    pub(crate) async fn fire(
        self: &Arc<Self>,
        job: &CronJobRecord,
        at_ms: u64,
        note: Option<String>,
    ) {
        let project_id = job.project_id.clone();
        let project = match self.store.call(move |s| s.find_project(&project_id)).await {
            Ok(Some(project)) => project,
            _ => return,
        };
        if self.is_running(&job.project_id, Some(&job.id)) {
            match job.concurrency {
                Concurrency::Forbid => {
                    let message = "the job's previous run was still running (concurrency: \
                                   forbid); skipped"
                        .to_owned();
                    self.record_skipped(job, at_ms, message).await;
                    return;
                }
                Concurrency::Replace => self.replace_runs_of(&job.id).await,
                Concurrency::Allow => {}
            }
        }
        self.start_cron_run(&project, job, at_ms, note).await;
    }

    async fn start_cron_run(
        self: &Arc<Self>,
        project: &ProjectRecord,
        job: &CronJobRecord,
        at_ms: u64,
        note: Option<String>,
    ) {
        let request = RunRequest {
            trigger: RunTrigger::Cron,
            command: job.command.clone(),
            env: Vec::new(),
            timeout_s: job.timeout_s,
            job_id: Some(job.id.clone()),
            scheduled_ms: Some(at_ms),
            interactive: false,
        };
        match self.start(project, request).await {
            Ok(run) => {
                if let Some(note) = note {
                    self.hub.system(&run.id, &format!("cron: {note}"));
                }
            }
            Err(super::StartError::NoLiveDeployment(message)) => {
                self.record_skipped(job, at_ms, message).await;
            }
            Err(error) => tracing::error!(%error, job = %job.id, "could not start a cron run"),
        }
    }

    /// Records a run of `job` that did not start, and why.
    async fn record_skipped(&self, job: &CronJobRecord, at_ms: u64, message: String) {
        let now = crate::ids::now_ms();
        let record = JobRunRecord {
            v: 1,
            id: crate::ids::new_id("run_"),
            project_id: job.project_id.clone(),
            deployment_id: String::new(),
            trigger: RunTrigger::Cron,
            command: job.command.clone(),
            state: RunState::Skipped,
            exit_code: None,
            created_ms: now,
            started_ms: None,
            finished_ms: Some(now),
            job_id: Some(job.id.clone()),
            scheduled_ms: Some(at_ms),
            timeout_s: job.timeout_s,
            interactive: false,
            env_keys: Vec::new(),
            message: Some(message.clone()),
        };
        let id = record.id.clone();
        if let Err(error) = self.store.call(move |s| s.put_job_run(&record)).await {
            tracing::error!(%error, job = %job.id, "could not record a skipped cron run");
            return;
        }
        self.hub.system(&id, &format!("cron: {message}"));
        self.hub.end(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: u64 = 60_000;

    #[test]
    fn a_clock_file_caught_half_written_keeps_the_last_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clock");
        let clock = JobClock::file(path.clone());
        std::fs::write(&path, "2026-01-01T00:01:00Z").unwrap();
        let set = clock.now_ms();
        assert_eq!(set, 1_767_225_660_000);
        std::fs::write(&path, "2026-01-01T00:0").unwrap();
        assert_eq!(clock.now_ms(), set);
        std::fs::write(&path, "").unwrap();
        assert_eq!(clock.now_ms(), set);
        std::fs::write(&path, "2026-01-01T00:02:00Z").unwrap();
        assert_eq!(clock.now_ms(), set + MINUTE);
    }

    fn at(text: &str) -> u64 {
        millis(text.parse::<Timestamp>().unwrap())
    }

    #[test]
    fn on_time_dues_fire_and_late_ones_were_missed() {
        let every_minute = Schedule::parse("* * * * *").unwrap();
        let utc = parse_zone("UTC").unwrap();
        let last = at("2026-01-01T00:00:00Z");
        assert_eq!(due(&every_minute, &utc, last, last + 30_000), Due::Nothing);
        assert_eq!(
            due(&every_minute, &utc, last, last + MINUTE + 500),
            Due::Fire {
                at_ms: last + MINUTE
            }
        );
        // Two went by: the daemon was not there for the first.
        assert_eq!(
            due(&every_minute, &utc, last, last + 2 * MINUTE),
            Due::Missed {
                latest_ms: last + 2 * MINUTE,
                count: 2
            }
        );
        // One, but found two minutes late.
        let hourly = Schedule::parse("@hourly").unwrap();
        assert_eq!(
            due(&hourly, &utc, last, last + 62 * MINUTE),
            Due::Missed {
                latest_ms: last + 60 * MINUTE,
                count: 1
            }
        );
        // Ten hours of downtime for an every-minute job: counted, one decision.
        assert_eq!(
            due(&every_minute, &utc, last, last + 600 * MINUTE),
            Due::Missed {
                latest_ms: last + 600 * MINUTE,
                count: 600
            }
        );
    }
}
