//! The shapes of one-off runs (`/api/projects/{projectId}/runs`, `/api/runs/{runId}`) and cron
//! jobs (`/api/projects/{projectId}/cron-jobs`), issue 33.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::store::jobs::{Concurrency, JobOrigin, Missed, RunState, RunTrigger};

use super::LogLine;

/// `POST /api/projects/{projectId}/runs`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateRun {
    /// The shell command, run as `sh -c` in a fresh sandbox from the live deployment's build.
    #[schemars(length(min = 1, max = 16384), regex(pattern = r"^[^\u0000]*$"))]
    pub command: String,
    /// Variables added over the project's for this run only (their values are not stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "run_env_schema")]
    pub env: Option<BTreeMap<String, String>>,
    /// Seconds before the run is stopped (`RUN_TIMED_OUT`); default 3600, at most the
    /// operator's `jobs.max_timeout_s` (86400 by default).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole_number::optional_u32"
    )]
    #[schemars(range(min = 1, max = 86400))]
    pub timeout_s: Option<u32>,
    /// Start it under a terminal: the sandbox starts once a client attaches to
    /// `GET /api/runs/{runId}/tty` (within 60 s, or the run is canceled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interactive: Option<bool>,
}

fn run_env_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": ["object", "null"],
        "maxProperties": 100,
        "propertyNames": {
            "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
            "maxLength": 256,
            "not": {"const": "PORT"}
        },
        "additionalProperties": {"type": "string", "maxLength": 65536, "pattern": "^[^\\u0000]*$"}
    })
}

/// A schedule exactly as `jobs::schedule` parses it (`jobs::schedule_schema`).
fn schedule_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let pattern = crate::jobs::schedule_schema::schedule_pattern();
    schemars::json_schema!({"type": "string", "maxLength": 256, "pattern": pattern})
}

fn optional_schedule_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let pattern = crate::jobs::schedule_schema::schedule_pattern();
    schemars::json_schema!({"type": ["string", "null"], "maxLength": 256, "pattern": pattern})
}

/// The zones of the host's time zone database (and `UTC`).
fn optional_zone_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let pattern = crate::jobs::schedule_schema::zone_pattern();
    schemars::json_schema!({"type": ["string", "null"], "maxLength": 64, "pattern": pattern})
}

/// The answer to `POST …/runs`: where to follow the run.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAccepted {
    pub run_id: String,
    pub state: RunState,
    /// `GET` it for the run's state and exit code.
    pub status_url: String,
    /// Its output so far; `…/logs/stream` follows it live.
    pub logs_url: String,
    /// For an interactive run: the WebSocket to attach to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty_url: Option<String>,
}

/// The query of `GET /api/runs/{runId}/tty`: the terminal's size.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct TtyQuery {
    /// Columns (default 80).
    #[schemars(range(min = 1, max = 1000))]
    pub cols: Option<u16>,
    /// Rows (default 24).
    #[schemars(range(min = 1, max = 1000))]
    pub rows: Option<u16>,
}

/// A one-off, cron or release run.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    pub id: String,
    pub project_id: String,
    /// The deployment whose build it ran in.
    pub deployment_id: String,
    pub trigger: RunTrigger,
    pub command: String,
    pub state: RunState,
    /// The command's exit code once it exited (128 + the signal when a signal ended it).
    pub exit_code: Option<i32>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// The cron job that started it.
    pub job_id: Option<String>,
    /// The due time a cron run was for (RFC 3339, UTC).
    pub scheduled_at: Option<String>,
    pub timeout_s: u64,
    pub interactive: bool,
    /// The names of the variables the request added (never their values).
    pub env_keys: Vec<String>,
    /// Why it failed, timed out, was canceled or skipped, in words.
    pub message: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunList {
    /// Newest first.
    pub runs: Vec<Run>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// A page of a run's output (`GET /api/runs/{runId}/logs`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunLogPage {
    pub run_id: String,
    pub logs: Vec<LogLine>,
    pub next_since: u64,
    pub has_more: bool,
}

/// `POST /api/projects/{projectId}/cron-jobs`, and the full form of a change.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateCronJob {
    /// Unique in the project: lowercase letters, digits and `-`.
    #[schemars(
        length(min = 2, max = 63),
        regex(pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$")
    )]
    pub name: String,
    /// Five fields (`minute hour day-of-month month day-of-week`) or `@hourly`, `@daily`,
    /// `@weekly`, `@monthly`, `@yearly`.
    #[schemars(schema_with = "schedule_schema")]
    pub schedule: String,
    /// An IANA time zone the schedule's times are in (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_zone_schema")]
    pub timezone: Option<String>,
    #[schemars(length(min = 1, max = 16384), regex(pattern = r"^[^\u0000]*$"))]
    pub command: String,
    /// When it is due while its previous run still runs: `forbid` (default: skip, recorded),
    /// `allow` (run both), `replace` (stop the old one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    /// Seconds before a run is stopped (default 3600).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole_number::optional_u32"
    )]
    #[schemars(range(min = 1, max = 86400))]
    pub timeout_s: Option<u32>,
    /// Due times the daemon was down for: `skip` (default; one skipped run is recorded) or
    /// `runOnce` (one catch-up run at start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<Missed>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `PATCH …/cron-jobs/{jobId}`: the fields to change.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CronJobPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 63),
        regex(pattern = r"^[a-z0-9]+(-[a-z0-9]+)*$")
    )]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_schedule_schema")]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_zone_schema")]
    pub timezone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16384), regex(pattern = r"^[^\u0000]*$"))]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole_number::optional_u32"
    )]
    #[schemars(range(min = 1, max = 86400))]
    pub timeout_s: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<Missed>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// One coming due time of a cron job.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DueTime {
    /// In the job's time zone, with its offset (`2026-03-08T03:00:00-04:00`).
    pub at: String,
    /// The same instant in UTC.
    pub at_utc: String,
}

/// A cron job.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CronJob {
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
    /// `api`, or `project_file` for a job declared in slipway.toml (a deploy replaces it).
    pub origin: JobOrigin,
    pub created_at: String,
    pub updated_at: String,
    /// The next 5 due times (none while disabled).
    pub next_runs: Vec<DueTime>,
    /// Its newest run.
    pub last_run: Option<Run>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CronJobList {
    pub cron_jobs: Vec<CronJob>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// The answer to `DELETE …/cron-jobs/{jobId}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CronJobDeleted {
    pub id: String,
    pub deleted: bool,
}
