//! Cron jobs (issue 33): `GET/POST /api/projects/{projectId}/cron-jobs`,
//! `GET/PATCH/DELETE …/cron-jobs/{jobId}`, `POST …/{jobId}/runs` (run now) and
//! `GET …/{jobId}/runs` (history, newest first). Each answer shows the job's next 5 due times
//! in its zone and in UTC. The scheduling is `jobs::scheduler`'s; this file checks bodies and
//! shapes answers.

use std::sync::Arc;

use super::json::read_json_object;
use super::projects::find;
use super::reply::Reply;
use super::runs::{run_of, start_error, valid_timeout};
use super::{types, ApiError, ApiRequest, Context, ErrorCode};
use crate::jobs::RunRequest;
use crate::store::jobs::{CronJobRecord, JobOrigin, RunTrigger};
use crate::store::records::ProjectRecord;

/// Cron jobs per project at most.
const MAX_JOBS: usize = 100;
/// Due times shown.
const NEXT_RUNS: usize = 5;

fn body<T: serde::de::DeserializeOwned>(request: &ApiRequest, fields: &str) -> Result<T, ApiError> {
    let body = read_json_object(request)?;
    serde_json::from_value(serde_json::Value::Object(body)).map_err(|error| {
        ApiError::new(
            ErrorCode::InvalidBody,
            format!("{error}; expected {{{fields}}}"),
        )
    })
}

const FIELDS: &str = "\"name\", \"schedule\", \"timezone\", \"command\", \"concurrency\", \
                      \"timeoutS\", \"missed\", \"enabled\"";

pub async fn create(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: ApiRequest,
) -> Result<Reply, ApiError> {
    let create: types::CreateCronJob = body(&request, FIELDS)?;
    let project = find(ctx, id_or_slug).await?;
    let now = ctx.jobs.now_ms();
    let job = CronJobRecord {
        v: 1,
        id: crate::ids::new_id("crn_"),
        project_id: project.id.clone(),
        name: create.name,
        schedule: create.schedule,
        timezone: create.timezone.unwrap_or_else(|| "UTC".to_owned()),
        command: create.command,
        concurrency: create.concurrency.unwrap_or_default(),
        timeout_s: valid_timeout(ctx, create.timeout_s)?,
        missed: create.missed.unwrap_or_default(),
        enabled: create.enabled.unwrap_or(true),
        origin: JobOrigin::Api,
        created_ms: crate::ids::now_ms(),
        updated_ms: crate::ids::now_ms(),
        last_due_ms: Some(now),
    };
    let job = validated(job)?;
    let (stored, project_id) = (job.clone(), project.id.clone());
    let inserted = ctx
        .store
        .call(move |s| -> crate::store::Result<Result<bool, usize>> {
            let count = s.cron_jobs_of(&project_id)?.len();
            if count >= MAX_JOBS {
                return Ok(Err(count));
            }
            s.insert_cron_job(&stored).map(Ok)
        })
        .await?;
    match inserted {
        Err(_) => Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "project {} has {MAX_JOBS} cron jobs already, the most it may have",
                project.slug
            ),
        )),
        Ok(false) => Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "project {} has a cron job named {:?} already",
                project.slug, job.name
            ),
        )),
        Ok(true) => {
            ctx.jobs.jobs_changed();
            Ok(Reply::json(&view(ctx, job).await?))
        }
    }
}

/// `job` if its name, schedule, zone and command are valid; the error names the field.
fn validated(job: CronJobRecord) -> Result<CronJobRecord, ApiError> {
    let schedule = crate::jobs::check_job(&job.name, &job.schedule, &job.timezone, &job.command)
        .map_err(|message| ApiError::new(ErrorCode::InvalidBody, message))?;
    Ok(CronJobRecord { schedule, ..job })
}

async fn record(
    ctx: &Context,
    project: &ProjectRecord,
    id: &str,
) -> Result<CronJobRecord, ApiError> {
    let key = id.to_owned();
    ctx.store
        .call(move |s| s.cron_job(&key))
        .await?
        .filter(|job| job.project_id == project.id)
        .ok_or_else(|| {
            ApiError::not_found(format!("project {} has no cron job {id:?}", project.slug))
        })
}

pub async fn list(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: &ApiRequest,
) -> Result<Reply, ApiError> {
    let page = super::paging::parse(request.uri().query())?;
    let project = find(ctx, id_or_slug).await?;
    let id = project.id.clone();
    let jobs = ctx.store.call(move |s| s.cron_jobs_of(&id)).await?;
    let (jobs, next_cursor) = super::paging::paginate(
        jobs,
        |job| (job.created_ms, job.id.clone()),
        super::paging::Order::OldestFirst,
        &page,
    );
    let mut cron_jobs = Vec::with_capacity(jobs.len());
    for job in jobs {
        cron_jobs.push(view(ctx, job).await?);
    }
    Ok(Reply::json(&types::CronJobList {
        cron_jobs,
        next_cursor,
    }))
}

pub async fn get(ctx: &Arc<Context>, id_or_slug: &str, job_id: &str) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let job = record(ctx, &project, job_id).await?;
    Ok(Reply::json(&view(ctx, job).await?))
}

pub async fn patch(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    job_id: &str,
    request: ApiRequest,
) -> Result<Reply, ApiError> {
    let patch: types::CronJobPatch = body(&request, FIELDS)?;
    let project = find(ctx, id_or_slug).await?;
    let mut job = record(ctx, &project, job_id).await?;
    let timing_before = (job.schedule.clone(), job.timezone.clone(), job.enabled);
    if let Some(timeout) = patch.timeout_s {
        job.timeout_s = valid_timeout(ctx, Some(timeout))?;
    }
    job.name = patch.name.unwrap_or(job.name);
    job.schedule = patch.schedule.unwrap_or(job.schedule);
    job.timezone = patch.timezone.unwrap_or(job.timezone);
    job.command = patch.command.unwrap_or(job.command);
    job.concurrency = patch.concurrency.unwrap_or(job.concurrency);
    job.missed = patch.missed.unwrap_or(job.missed);
    job.enabled = patch.enabled.unwrap_or(job.enabled);
    job.updated_ms = crate::ids::now_ms();
    // A new schedule, or a job enabled again, counts from now: nothing it would have run
    // before is "missed".
    if (job.schedule.clone(), job.timezone.clone(), job.enabled) != timing_before {
        job.last_due_ms = Some(ctx.jobs.now_ms());
    }
    let job = validated(job)?;
    let stored = job.clone();
    if !ctx.store.call(move |s| s.insert_cron_job(&stored)).await? {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "project {} has a cron job named {:?} already",
                project.slug, job.name
            ),
        ));
    }
    ctx.jobs.jobs_changed();
    Ok(Reply::json(&view(ctx, job).await?))
}

pub async fn delete(ctx: &Arc<Context>, id_or_slug: &str, job_id: &str) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let job = record(ctx, &project, job_id).await?;
    let key = job.id.clone();
    ctx.store.call(move |s| s.delete_cron_job(&key)).await?;
    ctx.jobs.jobs_changed();
    Ok(Reply::json(&types::CronJobDeleted {
        id: job.id,
        deleted: true,
    }))
}

/// `POST …/{jobId}/runs`: a run now, outside the schedule (a `forbid` job that is running
/// answers 409).
pub async fn run_now(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    job_id: &str,
) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let job = record(ctx, &project, job_id).await?;
    if job.concurrency == crate::store::jobs::Concurrency::Forbid
        && ctx.jobs.is_running(&project.id, Some(&job.id))
    {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "cron job {} is running (concurrency: forbid); wait for it or cancel it",
                job.name
            ),
        ));
    }
    let request = RunRequest {
        trigger: RunTrigger::Cron,
        command: job.command.clone(),
        env: Vec::new(),
        timeout_s: job.timeout_s,
        job_id: Some(job.id.clone()),
        scheduled_ms: None,
        interactive: false,
    };
    let run = ctx
        .jobs
        .start(&project, request)
        .await
        .map_err(start_error)?;
    Ok(Reply::json(&super::runs::accepted(ctx, &run)))
}

pub async fn history(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    job_id: &str,
    request: &ApiRequest,
) -> Result<Reply, ApiError> {
    let page = super::paging::parse(request.uri().query())?;
    let project = find(ctx, id_or_slug).await?;
    let job = record(ctx, &project, job_id).await?;
    let (project_id, id) = (project.id.clone(), job.id.clone());
    let runs = ctx
        .store
        .call(move |s| s.job_runs_of(&project_id, Some(&id)))
        .await?;
    Ok(Reply::json(&super::runs::run_list(runs, &page)))
}

/// The job as the API shows it: its next due times from the scheduler's now, and its newest
/// run.
async fn view(ctx: &Context, job: CronJobRecord) -> Result<types::CronJob, ApiError> {
    let next_runs = match (
        job.enabled,
        crate::jobs::next_runs(&job, ctx.jobs.now_ms(), NEXT_RUNS),
    ) {
        (true, Some(times)) => times
            .into_iter()
            .map(|(at, at_utc)| types::DueTime { at, at_utc })
            .collect(),
        _ => Vec::new(),
    };
    let (project_id, id) = (job.project_id.clone(), job.id.clone());
    let runs = ctx
        .store
        .call(move |s| s.job_runs_of(&project_id, Some(&id)))
        .await?;
    let last_run = runs
        .into_iter()
        .max_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)))
        .map(run_of);
    Ok(types::CronJob {
        id: job.id,
        project_id: job.project_id,
        name: job.name,
        schedule: job.schedule,
        timezone: job.timezone,
        command: job.command,
        concurrency: job.concurrency,
        timeout_s: job.timeout_s,
        missed: job.missed,
        enabled: job.enabled,
        origin: job.origin,
        created_at: crate::ids::rfc3339(job.created_ms),
        updated_at: crate::ids::rfc3339(job.updated_ms),
        next_runs,
        last_run,
    })
}
