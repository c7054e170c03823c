//! One-off runs (issue 33): `POST /api/projects/{projectId}/runs` (202, the run starts in
//! the background), `GET …/runs` (newest first), `GET /api/runs/{runId}`, its output
//! (`…/logs`, `…/logs/stream` with the deployments' SSE rules) and `POST …/cancel`. The work is
//! the `jobs` module's; this file reads bodies and shapes answers.

use std::sync::Arc;

use super::json::read_json_object;
use super::projects::find;
use super::reply::Reply;
use super::{types, ApiError, ApiRequest, Context, ErrorCode};
use crate::jobs::{CancelError, RunRequest, StartError};
use crate::store::jobs::{JobRunRecord, RunTrigger};

/// A run's timeout when the request names none.
pub(super) const DEFAULT_TIMEOUT_S: u64 = 3600;
/// The longest command accepted, in characters.
pub(super) const MAX_COMMAND_CHARS: usize = 16 * 1024;
/// Variables a run may add.
const MAX_RUN_ENV: usize = 100;

pub async fn create(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: ApiRequest,
) -> Result<Reply, ApiError> {
    let mut body = read_json_object(&request)?;
    // The variables are checked as env vars are (names, sizes, NUL) before the rest.
    let env = match body.remove("env") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Object(vars)) if vars.is_empty() => Vec::new(),
        Some(serde_json::Value::Object(vars)) if vars.len() > MAX_RUN_ENV => {
            return Err(ApiError::new(
                ErrorCode::InvalidBody,
                format!(
                    "`env` names {} variables; a run takes at most {MAX_RUN_ENV}",
                    vars.len()
                ),
            ))
        }
        Some(serde_json::Value::Object(vars)) => {
            super::env_scope::env_vars_body(vars)?.into_iter().collect()
        }
        Some(_) => {
            return Err(ApiError::new(
                ErrorCode::InvalidBody,
                "`env` must be an object of names to string values",
            ))
        }
    };
    let create: types::CreateRun = serde_json::from_value(serde_json::Value::Object(body))
        .map_err(|error| {
            ApiError::new(
                ErrorCode::InvalidBody,
                format!(
                    "{error}; expected {{\"command\", \"env\", \"timeoutS\", \"interactive\"}}"
                ),
            )
        })?;
    let command = valid_command(&create.command)?;
    let timeout_s = valid_timeout(ctx, create.timeout_s)?;
    let project = find(ctx, id_or_slug).await?;
    let request = RunRequest {
        trigger: RunTrigger::Oneoff,
        command,
        env,
        timeout_s,
        job_id: None,
        scheduled_ms: None,
        interactive: create.interactive.unwrap_or(false),
    };
    let record = ctx
        .jobs
        .start(&project, request)
        .await
        .map_err(start_error)?;
    Ok(Reply::json(&accepted(ctx, &record)))
}

/// The answer to a run just started: where to follow it (and attach to it, if interactive).
pub(super) fn accepted(ctx: &Context, record: &JobRunRecord) -> types::RunAccepted {
    let status_url = format!("{}/api/runs/{}", ctx.control_url(), record.id);
    let tty_url = record.interactive.then(|| {
        let url = format!("{status_url}/tty");
        match url.strip_prefix("https://") {
            Some(rest) => format!("wss://{rest}"),
            None => url.replacen("http://", "ws://", 1),
        }
    });
    types::RunAccepted {
        run_id: record.id.clone(),
        state: record.state,
        logs_url: format!("{status_url}/logs"),
        tty_url,
        status_url,
    }
}

/// A command as given, refused when empty, too long or holding a NUL.
pub(super) fn valid_command(command: &str) -> Result<String, ApiError> {
    if command.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "`command` must not be empty, e.g. \"npm run migrate\"",
        ));
    }
    if command.chars().count() > MAX_COMMAND_CHARS || command.contains('\0') {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            format!("`command` must be at most {MAX_COMMAND_CHARS} characters without NUL"),
        ));
    }
    Ok(command.to_owned())
}

/// `timeoutS`, or the default; refused past the operator's `jobs.max_timeout_s`.
pub(super) fn valid_timeout(ctx: &Context, timeout_s: Option<u32>) -> Result<u64, ApiError> {
    let max = ctx.config.jobs.max_timeout_s;
    let timeout = timeout_s
        .map(u64::from)
        .unwrap_or(DEFAULT_TIMEOUT_S.min(max));
    if timeout == 0 || timeout > max {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            format!("`timeoutS` must be from 1 to {max} (jobs.max_timeout_s)"),
        ));
    }
    Ok(timeout)
}

pub(super) fn start_error(error: StartError) -> ApiError {
    match error {
        StartError::NoLiveDeployment(message) => ApiError::new(ErrorCode::Conflict, message),
        StartError::Store(error) => ApiError::internal(error),
    }
}

pub async fn list(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: &ApiRequest,
) -> Result<Reply, ApiError> {
    let page = super::paging::parse(request.uri().query())?;
    let project = find(ctx, id_or_slug).await?;
    let id = project.id.clone();
    let runs = ctx.store.call(move |s| s.job_runs_of(&id, None)).await?;
    Ok(Reply::json(&run_list(runs, &page)))
}

/// A page of runs, newest first.
pub(super) fn run_list(
    runs: Vec<JobRunRecord>,
    page: &super::paging::PageRequest,
) -> types::RunList {
    let (runs, next_cursor) = super::paging::paginate(
        runs,
        |run| (run.created_ms, run.id.clone()),
        super::paging::Order::NewestFirst,
        page,
    );
    types::RunList {
        runs: runs.into_iter().map(run_of).collect(),
        next_cursor,
    }
}

async fn record(ctx: &Context, id: &str) -> Result<JobRunRecord, ApiError> {
    let key = id.to_owned();
    ctx.store
        .call(move |s| s.job_run(&key))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no run {id:?}")))
}

pub async fn get(ctx: &Arc<Context>, id: &str) -> Result<Reply, ApiError> {
    Ok(Reply::json(&run_of(record(ctx, id).await?)))
}

pub async fn cancel(ctx: &Arc<Context>, id: &str) -> Result<Reply, ApiError> {
    let run = record(ctx, id).await?;
    if run.state.is_final() {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("run {id} has ended already ({:?})", run.state).to_lowercase(),
        ));
    }
    let run = ctx.jobs.cancel(id).await.map_err(|error| match error {
        CancelError::NotFound(_) => ApiError::not_found(format!("no run {id:?}")),
        CancelError::Store(error) => ApiError::internal(error),
    })?;
    Ok(Reply::json(&run_of(run)))
}

pub async fn logs(ctx: &Arc<Context>, id: &str, request: &ApiRequest) -> Result<Reply, ApiError> {
    let query = super::logs::parse_query(request.uri().query())?;
    let run = record(ctx, id).await?;
    let hub = ctx.hub.clone();
    let key = run.id.clone();
    let (lines, has_more) = ctx
        .store
        .call(move |_| hub.read(&key, query.since, query.limit, query.stream))
        .await?;
    let next_since = lines.last().map(|l| l.seq).unwrap_or(query.since);
    Ok(Reply::json(&types::RunLogPage {
        run_id: run.id,
        logs: lines,
        next_since,
        has_more,
    }))
}

pub async fn stream(ctx: &Arc<Context>, id: &str, request: &ApiRequest) -> Result<Reply, ApiError> {
    let (query, since) = super::logs::stream_query(request)?;
    let run = record(ctx, id).await?;
    let ended = run.state.is_final();
    Ok(super::logs::event_stream(
        ctx.hub.clone(),
        run.id,
        since,
        query.stream,
        ended,
        None,
    ))
}

pub(super) fn run_of(run: JobRunRecord) -> types::Run {
    types::Run {
        id: run.id,
        project_id: run.project_id,
        deployment_id: run.deployment_id,
        trigger: run.trigger,
        command: run.command,
        state: run.state,
        exit_code: run.exit_code,
        created_at: crate::ids::rfc3339(run.created_ms),
        started_at: run.started_ms.map(crate::ids::rfc3339),
        finished_at: run.finished_ms.map(crate::ids::rfc3339),
        job_id: run.job_id,
        scheduled_at: run.scheduled_ms.map(crate::ids::rfc3339),
        timeout_s: run.timeout_s,
        interactive: run.interactive,
        env_keys: run.env_keys,
        message: run.message,
    }
}

/// `GET /api/runs/{runId}/tty?cols=&rows=`: attaches to an interactive run (see `jobs::tty`)
/// by upgrading to a WebSocket (HTTP/1.1 `Upgrade: websocket`, version 13).
pub async fn tty(ctx: &Arc<Context>, id: &str, mut request: ApiRequest) -> Result<Reply, ApiError> {
    let size = tty_size(request.uri().query())?;
    let key = super::websocket::key(&request)?;
    let run = record(ctx, id).await?;
    if !run.interactive {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("run {id} is not interactive (start one with \"interactive\": true, or `slipway run -it`)"),
        ));
    }
    let pending = ctx.jobs.take_pending_tty(id).ok_or_else(|| {
        ApiError::new(
            ErrorCode::Conflict,
            format!(
                "run {id} is not waiting for a terminal: one attached already, or it ended ({:?})",
                run.state
            )
            .to_lowercase(),
        )
    })?;
    let upgrade = hyper::upgrade::on(&mut request);
    let jobs = ctx.jobs.clone();
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let io = hyper_util::rt::TokioIo::new(upgraded);
                let role = tokio_tungstenite::tungstenite::protocol::Role::Server;
                let socket =
                    tokio_tungstenite::WebSocketStream::from_raw_socket(io, role, None).await;
                jobs.serve_tty(pending, socket, size).await;
            }
            Err(error) => jobs.abandon_tty(pending, &error.to_string()).await,
        }
    });
    Ok(super::websocket::switching_protocols(&key))
}

/// `cols` and `rows` of the terminal (default 80 × 24).
fn tty_size(query: Option<&str>) -> Result<crate::sandbox::TtySize, ApiError> {
    let mut size = crate::sandbox::TtySize { cols: 80, rows: 24 };
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = value.parse::<u16>().ok().filter(|n| (1..=1000).contains(n));
        match (key, number) {
            ("cols", Some(n)) => size.cols = n,
            ("rows", Some(n)) => size.rows = n,
            _ => {
                return Err(ApiError::new(
                    ErrorCode::InvalidQuery,
                    format!("{pair:?}: the query takes cols and rows, each from 1 to 1000"),
                ))
            }
        }
    }
    Ok(size)
}
