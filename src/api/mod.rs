//! The REST API under `/api/` on the control host: its route table (below: every route once,
//! with its handler; `routes.rs` says what an entry is), a request's way through
//! authentication, rate limit, scope, body and audit (`request.rs`), and one handler module
//! per resource. Every response carries the rate-limit headers; every error is the contract's
//! envelope (`error.rs`); a success is the handler's `Reply` with the route's status.

mod addon_backups;
mod addon_ops;
mod addons;
mod audit;
mod context;
mod cron_jobs;
mod domains;
mod env_scope;
mod error;
mod failures;
mod formation;
mod git;
mod history;
mod idempotency;
mod json;
mod logs;
mod nodes;
mod notifications;
mod observability;
mod openapi;
mod paging;
mod params;
mod projects;
mod provision;
mod public_body;
mod reply;
mod request;
mod sleep;
#[macro_use]
mod routes;
mod runs;
mod source;
mod spool;
mod tokens;
pub mod types;
mod websocket;

use http::{HeaderValue, Request, Response, StatusCode};

pub use context::Context;
pub use error::{ApiError, ErrorCode};
pub use openapi::{openapi_document, OpenApiDocument};
pub use params::{match_template, Params};
pub use public_body::PublicBodies;
pub use request::handle;
pub use routes::{RouteSpec, Target};
pub use tokens::parse_create as parse_token_request;

use crate::http_util::{full, Body};
use reply::Reply;
use routes::{fields, shape, AnyObject, RequestBody, ResponseBody, Scope};
use types::*;

/// A request as handlers see it: the body already read (bounded by the route's limit).
pub type ApiRequest = Request<bytes::Bytes>;

route_table! {
    |ctx, request, params, caller|

    ListProjects: GET "/api/projects" {
        needs: Read, target: None, success: OK,
        summary: "List projects",
        request: None,
        response: ResponseBody::Json(shape::<ProjectList>),
        query: Some(fields::<PageQuery>),
        handle: projects::list(ctx, &request, caller),
    }
    CreateProject: POST "/api/projects" {
        needs: Admin, target: None, success: CREATED,
        summary: "Create a project",
        request: Some(RequestBody::Json(shape::<CreateProject>)),
        response: ResponseBody::Json(shape::<Project>),
        query: None,
        handle: projects::create(ctx, request),
    }
    GetProject: GET "/api/projects/{projectId}" {
        needs: Read, target: Project, success: OK,
        summary: "Get a project by id or slug",
        request: None,
        response: ResponseBody::Json(shape::<Project>),
        query: None,
        handle: projects::get(ctx, params.get(0)),
    }
    DeleteProject: DELETE "/api/projects/{projectId}" {
        needs: Admin, target: Project, success: OK,
        summary: "Delete a project, its app, deployments, logs, env vars and source",
        request: None,
        response: ResponseBody::Json(shape::<ProjectDeleted>),
        query: None,
        handle: projects::delete(ctx, params.get(0)),
    }
    SetEnvVars: POST "/api/projects/{projectId}/env-vars" {
        needs: Deploy, target: Project, success: OK,
        summary: "Set environment variables (all or nothing)",
        request: Some(RequestBody::Json(env_vars_body_schema)),
        response: ResponseBody::Json(shape::<EnvVarsUpdated>),
        query: None,
        handle: projects::set_env_vars(ctx, caller, params.get(0), request),
    }
    GetEnvVars: GET "/api/projects/{projectId}/env-vars" {
        needs: Read, target: Project, success: OK,
        summary: "Get environment variables",
        request: None,
        response: ResponseBody::Json(shape::<EnvVars>),
        query: None,
        handle: projects::get_env_vars(ctx, params.get(0), caller),
    }
    DeleteEnvVar: DELETE "/api/projects/{projectId}/env-vars/{key}" {
        needs: Deploy, target: Project, success: OK,
        summary: "Delete one environment variable",
        request: None,
        response: ResponseBody::Json(shape::<EnvVarDeleted>),
        query: None,
        handle: projects::delete_env_var(ctx, params.get(0), params.get(1)),
    }
    CreateToken: POST "/api/tokens" {
        needs: Admin, target: None, success: CREATED,
        summary: "Create an API token (the secret is shown once)",
        request: Some(RequestBody::Json(shape::<CreateToken>)),
        response: ResponseBody::Json(shape::<CreatedToken>),
        query: None,
        handle: tokens::create(ctx, request),
    }
    ListTokens: GET "/api/tokens" {
        needs: Admin, target: None, success: OK,
        summary: "List API tokens",
        request: None,
        response: ResponseBody::Json(shape::<TokenList>),
        query: Some(fields::<PageQuery>),
        handle: tokens::list(ctx, &request),
    }
    DeleteToken: DELETE "/api/tokens/{tokenId}" {
        needs: Admin, target: None, success: OK,
        summary: "Revoke an API token",
        request: None,
        response: ResponseBody::Json(shape::<TokenRevoked>),
        query: None,
        handle: tokens::delete(ctx, params.get(0), caller),
    }
    ListNodes: GET "/api/nodes" {
        needs: Admin, target: None, success: OK,
        summary: "List the nodes of the cluster apps run on ([cluster] engine; none without one)",
        request: None,
        response: ResponseBody::Json(shape::<NodeList>),
        query: Some(fields::<PageQuery>),
        handle: nodes::list(ctx, &request),
    }
    UploadSource: POST "/api/projects/{projectId}/source" {
        needs: Deploy, target: Project, success: CREATED,
        summary: "Upload the project's source as a .tar.gz (Content-Type: application/gzip)",
        request: Some(RequestBody::Archive),
        response: ResponseBody::Json(shape::<SourceUploaded>),
        query: None,
        handle: source::upload(ctx, caller, params.get(0), request),
    }
    Provision: POST "/api/projects/{projectId}/provision" {
        needs: Deploy, target: Project, success: ACCEPTED,
        summary: "Start provisioning (install, build, start, switch)",
        request: Some(RequestBody::Json(shape::<ProvisionBody>)),
        response: ResponseBody::Json(shape::<ProvisionAccepted>),
        query: None,
        handle: provision::provision(ctx, caller, params.get(0), request),
    }
    ProvisionStatus: GET "/api/provisioning/{provisioningId}/status" {
        needs: Read, target: Run, success: OK,
        summary: "Check provisioning progress (poll every 2 s)",
        request: None,
        response: ResponseBody::Json(shape::<ProvisionStatus>),
        query: None,
        handle: provision::status(ctx, params.get(0)),
    }
    CancelRun: POST "/api/provisioning/{provisioningId}/cancel" {
        needs: Deploy, target: Run, success: OK,
        summary: "Cancel a run in progress (the live deployment is untouched); 409 once it ended",
        request: None,
        response: ResponseBody::Json(shape::<ProvisionStatus>),
        query: None,
        handle: provision::cancel(ctx, params.get(0)),
    }
    GetDeployment: GET "/api/deployments/{deploymentId}" {
        needs: Read, target: Deployment, success: OK,
        summary: "Get one deployment (state, url, error)",
        request: None,
        response: ResponseBody::Json(shape::<Deployment>),
        query: None,
        handle: provision::deployment(ctx, params.get(0)),
    }
    Deployments: GET "/api/projects/{projectId}/deployments" {
        needs: Read, target: Project, success: OK,
        summary: "List the project's deployments, newest first",
        request: None,
        response: ResponseBody::Json(shape::<DeploymentList>),
        query: Some(fields::<PageQuery>),
        handle: provision::deployments(ctx, params.get(0), &request),
    }
    Rollback: POST "/api/projects/{projectId}/rollback" {
        needs: Deploy, target: Project, success: ACCEPTED,
        summary: "Re-activate an earlier successful deployment without rebuilding",
        request: Some(RequestBody::Json(shape::<RollbackBody>)),
        response: ResponseBody::Json(shape::<ProvisionAccepted>),
        query: None,
        handle: provision::rollback(ctx, params.get(0), request),
    }
    Logs: GET "/api/deployments/{deploymentId}/logs" {
        needs: Read, target: Deployment, success: OK,
        summary: "Get deployment logs (since, limit, stream)",
        request: None,
        response: ResponseBody::Json(shape::<LogPage>),
        query: Some(fields::<LogQuery>),
        handle: logs::page(ctx, params.get(0), &request),
    }
    LogStream: GET "/api/deployments/{deploymentId}/logs/stream" {
        needs: Read, target: Deployment, success: OK,
        summary: "Stream deployment logs as Server-Sent Events (events log, status, end)",
        request: None,
        response: ResponseBody::EventStream,
        query: Some(fields::<LogQuery>),
        handle: logs::stream(ctx, params.get(0), &request),
    }
    Audit: GET "/api/audit" {
        needs: Admin, target: None, success: OK,
        summary: "The audit log: every request that changed something, newest first",
        request: None,
        response: ResponseBody::Json(shape::<AuditLog>),
        query: Some(fields::<AuditQuery>),
        handle: audit::list(ctx, &request),
    }
    OpenApi: GET "/api/openapi.json" {
        needs: Read, target: None, success: OK,
        summary: "This document",
        request: None,
        response: ResponseBody::Json(shape::<AnyObject>),
        query: None,
        handle: async { Ok(Reply::json(&openapi_document())) },
    }
    System: GET "/api/system" {
        needs: Read, target: None, success: OK,
        summary: "What the daemon runs as: version, sandbox mode in force, TLS mode, domains",
        request: None,
        response: ResponseBody::Json(shape::<SystemInfo>),
        query: None,
        handle: async { Ok(Reply::json(&system_info(ctx))) },
    }
    Metrics: GET "/api/metrics" {
        needs: Read, target: None, success: OK,
        summary: "Every metric in the Prometheus text format 0.0.4 (as GET /metrics on metrics_listen)",
        request: None,
        response: ResponseBody::PrometheusText,
        query: None,
        handle: observability::metrics(ctx, caller),
    }
    ProjectUsage: GET "/api/projects/{projectId}/usage" {
        needs: Read, target: Project, success: OK,
        summary: "One project's traffic, app memory and CPU, build cache and certificates",
        request: None,
        response: ResponseBody::Json(shape::<ProjectUsage>),
        query: None,
        handle: observability::usage(ctx, params.get(0)),
    }
    ProjectUsageHistory: GET "/api/projects/{projectId}/usage/history" {
        needs: Read, target: Project, success: OK,
        summary: "One project's usage over time: requests, latency, bytes, memory and CPU, builds per minute or hour",
        request: None,
        response: ResponseBody::Json(shape::<UsageHistory>),
        query: Some(fields::<HistoryQuery>),
        handle: history::project(ctx, params.get(0), &request),
    }
    MachineUsageHistory: GET "/api/usage/history" {
        needs: Admin, target: None, success: OK,
        summary: "The machine's usage over time (operator): CPU, memory, disk, router connections",
        request: None,
        response: ResponseBody::Json(shape::<MachineHistory>),
        query: Some(fields::<HistoryQuery>),
        handle: history::machine(ctx, &request),
    }
    CreateNotification: POST "/api/notifications" {
        needs: Admin, target: None, success: CREATED,
        summary: "Subscribe a webhook to events (the signing secret is shown once)",
        request: Some(RequestBody::Json(shape::<CreateNotification>)),
        response: ResponseBody::Json(shape::<CreatedNotification>),
        query: None,
        handle: notifications::create(ctx, request),
    }
    ListNotifications: GET "/api/notifications" {
        needs: Admin, target: None, success: OK,
        summary: "List webhook subscriptions",
        request: None,
        response: ResponseBody::Json(shape::<NotificationList>),
        query: None,
        handle: notifications::list(ctx),
    }
    GetNotification: GET "/api/notifications/{notificationId}" {
        needs: Admin, target: None, success: OK,
        summary: "Get a webhook subscription",
        request: None,
        response: ResponseBody::Json(shape::<Notification>),
        query: None,
        handle: notifications::get(ctx, params.get(0)),
    }
    DeleteNotification: DELETE "/api/notifications/{notificationId}" {
        needs: Admin, target: None, success: OK,
        summary: "Delete a webhook subscription and its queued deliveries",
        request: None,
        response: ResponseBody::Json(shape::<NotificationDeleted>),
        query: None,
        handle: notifications::delete(ctx, params.get(0)),
    }
    NotificationDeliveries: GET "/api/notifications/{notificationId}/deliveries" {
        needs: Admin, target: None, success: OK,
        summary: "The last 100 delivery attempts of a subscription, newest first",
        request: None,
        response: ResponseBody::Json(shape::<DeliveryList>),
        query: None,
        handle: notifications::deliveries(ctx, params.get(0)),
    }
    CreateDomain: POST "/api/projects/{projectId}/domains" {
        needs: Deploy, target: Project, success: CREATED,
        summary: "Add a custom domain: once its ownership is proven it is routed and its certificate issued (status says when it is served)",
        request: Some(RequestBody::Json(shape::<CreateDomain>)),
        response: ResponseBody::Json(shape::<Domain>),
        query: None,
        handle: domains::create(ctx, params.get(0), request),
    }
    GetFormation: GET "/api/projects/{projectId}/formation" {
        needs: Read, target: Project, success: OK,
        summary: "The live deployment's process types (web, worker, …) and their running instances",
        request: None,
        response: ResponseBody::Json(shape::<Formation>),
        query: None,
        handle: formation::get(ctx, params.get(0)),
    }
    ScaleFormation: PATCH "/api/projects/{projectId}/formation" {
        needs: Deploy, target: Project, success: OK,
        summary: "Scale process types: only the named types change (instances, memoryMb, cpus, deploy); no rebuild, the others keep running",
        request: Some(RequestBody::Json(shape::<FormationPatch>)),
        response: ResponseBody::Json(shape::<Formation>),
        query: None,
        handle: formation::patch(ctx, params.get(0), request),
    }
    SleepProject: POST "/api/projects/{projectId}/sleep" {
        needs: Deploy, target: Project, success: ACCEPTED,
        summary: "Put the project's app to sleep now: its route waits for the next request, every instance stops with its grace period",
        request: None,
        response: ResponseBody::Json(shape::<Project>),
        query: None,
        handle: sleep::sleep(ctx, params.get(0)),
    }
    WakeProject: POST "/api/projects/{projectId}/wake" {
        needs: Deploy, target: Project, success: ACCEPTED,
        summary: "Wake the project's sleeping app (as its next request would); appState says when it runs",
        request: None,
        response: ResponseBody::Json(shape::<Project>),
        query: None,
        handle: sleep::wake(ctx, params.get(0)),
    }
    SleepPreview: POST "/api/projects/{projectId}/previews/{name}/sleep" {
        needs: Deploy, target: Project, success: ACCEPTED,
        summary: "Put a preview's app to sleep now (as the project's sleep does)",
        request: None,
        response: ResponseBody::Json(shape::<Preview>),
        query: None,
        handle: sleep::sleep_preview(ctx, params.get(0), params.get(1)),
    }
    WakePreview: POST "/api/projects/{projectId}/previews/{name}/wake" {
        needs: Deploy, target: Project, success: ACCEPTED,
        summary: "Wake a preview's sleeping app (as its next request would)",
        request: None,
        response: ResponseBody::Json(shape::<Preview>),
        query: None,
        handle: sleep::wake_preview(ctx, params.get(0), params.get(1)),
    }
    CreateRun: POST "/api/projects/{projectId}/runs" {
        needs: Deploy, target: Project, success: ACCEPTED,
        summary: "Run a one-off command in a fresh sandbox from the live deployment's build (migrations, seeds, consoles)",
        request: Some(RequestBody::Json(shape::<CreateRun>)),
        response: ResponseBody::Json(shape::<RunAccepted>),
        query: None,
        handle: runs::create(ctx, params.get(0), request),
    }
    ListRuns: GET "/api/projects/{projectId}/runs" {
        needs: Read, target: Project, success: OK,
        summary: "List the project's one-off, cron and release runs, newest first",
        request: None,
        response: ResponseBody::Json(shape::<RunList>),
        query: Some(fields::<PageQuery>),
        handle: runs::list(ctx, params.get(0), &request),
    }
    GetRun: GET "/api/runs/{runId}" {
        needs: Read, target: JobRun, success: OK,
        summary: "Get one run (state, exit code, times)",
        request: None,
        response: ResponseBody::Json(shape::<Run>),
        query: None,
        handle: runs::get(ctx, params.get(0)),
    }
    CancelJobRun: POST "/api/runs/{runId}/cancel" {
        needs: Deploy, target: JobRun, success: OK,
        summary: "Stop a queued or running run (SIGTERM, then SIGKILL after 5 s); answers once it has ended",
        request: None,
        response: ResponseBody::Json(shape::<Run>),
        query: None,
        handle: runs::cancel(ctx, params.get(0)),
    }
    AttachRun: GET "/api/runs/{runId}/tty" {
        needs: Deploy, target: JobRun, success: SWITCHING_PROTOCOLS,
        summary: "Attach a terminal to an interactive run: upgrades to a WebSocket (binary frames both ways, text {\"resize\": [cols, rows]})",
        request: None,
        response: ResponseBody::WebSocket,
        query: Some(fields::<TtyQuery>),
        handle: runs::tty(ctx, params.get(0), request),
    }
    RunLogs: GET "/api/runs/{runId}/logs" {
        needs: Read, target: JobRun, success: OK,
        summary: "Get a run's output (since, limit, stream)",
        request: None,
        response: ResponseBody::Json(shape::<RunLogPage>),
        query: Some(fields::<LogQuery>),
        handle: runs::logs(ctx, params.get(0), &request),
    }
    RunLogStream: GET "/api/runs/{runId}/logs/stream" {
        needs: Read, target: JobRun, success: OK,
        summary: "Stream a run's output as Server-Sent Events (events log, end)",
        request: None,
        response: ResponseBody::EventStream,
        query: Some(fields::<LogQuery>),
        handle: runs::stream(ctx, params.get(0), &request),
    }
    CreateCronJob: POST "/api/projects/{projectId}/cron-jobs" {
        needs: Deploy, target: Project, success: CREATED,
        summary: "Create a cron job: a command run on a schedule in a time zone; shows its next 5 due times",
        request: Some(RequestBody::Json(shape::<CreateCronJob>)),
        response: ResponseBody::Json(shape::<CronJob>),
        query: None,
        handle: cron_jobs::create(ctx, params.get(0), request),
    }
    ListCronJobs: GET "/api/projects/{projectId}/cron-jobs" {
        needs: Read, target: Project, success: OK,
        summary: "List the project's cron jobs with their next due times and newest run",
        request: None,
        response: ResponseBody::Json(shape::<CronJobList>),
        query: Some(fields::<PageQuery>),
        handle: cron_jobs::list(ctx, params.get(0), &request),
    }
    GetCronJob: GET "/api/projects/{projectId}/cron-jobs/{jobId}" {
        needs: Read, target: Project, success: OK,
        summary: "Get one cron job",
        request: None,
        response: ResponseBody::Json(shape::<CronJob>),
        query: None,
        handle: cron_jobs::get(ctx, params.get(0), params.get(1)),
    }
    UpdateCronJob: PATCH "/api/projects/{projectId}/cron-jobs/{jobId}" {
        needs: Deploy, target: Project, success: OK,
        summary: "Change a cron job (only the fields given); a new schedule counts from now",
        request: Some(RequestBody::Json(shape::<CronJobPatch>)),
        response: ResponseBody::Json(shape::<CronJob>),
        query: None,
        handle: cron_jobs::patch(ctx, params.get(0), params.get(1), request),
    }
    DeleteCronJob: DELETE "/api/projects/{projectId}/cron-jobs/{jobId}" {
        needs: Deploy, target: Project, success: OK,
        summary: "Delete a cron job (its runs stay for the retention)",
        request: None,
        response: ResponseBody::Json(shape::<CronJobDeleted>),
        query: None,
        handle: cron_jobs::delete(ctx, params.get(0), params.get(1)),
    }
    RunCronJob: POST "/api/projects/{projectId}/cron-jobs/{jobId}/runs" {
        needs: Deploy, target: Project, success: ACCEPTED,
        summary: "Run a cron job now, outside its schedule",
        request: None,
        response: ResponseBody::Json(shape::<RunAccepted>),
        query: None,
        handle: cron_jobs::run_now(ctx, params.get(0), params.get(1)),
    }
    CronJobRuns: GET "/api/projects/{projectId}/cron-jobs/{jobId}/runs" {
        needs: Read, target: Project, success: OK,
        summary: "A cron job's runs (history), newest first",
        request: None,
        response: ResponseBody::Json(shape::<RunList>),
        query: Some(fields::<PageQuery>),
        handle: cron_jobs::history(ctx, params.get(0), params.get(1), &request),
    }
    CreateAddon: POST "/api/projects/{projectId}/addons" {
        needs: Admin, target: Project, success: CREATED,
        summary: "Create a PostgreSQL or Redis add-on linked to the project; answers once it accepts connections",
        request: Some(RequestBody::Json(shape::<CreateAddon>)),
        response: ResponseBody::Json(shape::<Addon>),
        query: None,
        handle: addons::create(ctx, params.get(0), request),
    }
    ListAddons: GET "/api/projects/{projectId}/addons" {
        needs: Read, target: Project, success: OK,
        summary: "List the add-ons the project owns or is linked to",
        request: None,
        response: ResponseBody::Json(shape::<AddonList>),
        query: Some(fields::<PageQuery>),
        handle: addons::list(ctx, params.get(0), &request),
    }
    GetAddon: GET "/api/addons/{addonId}" {
        needs: Read, target: Addon, success: OK,
        summary: "Get one add-on (never its password)",
        request: None,
        response: ResponseBody::Json(shape::<Addon>),
        query: None,
        handle: addons::get(ctx, params.get(0)),
    }
    PatchAddon: PATCH "/api/addons/{addonId}" {
        needs: Admin, target: Addon, success: OK,
        summary: "Grow an add-on's disk online, or change its memory limit (with a restart)",
        request: Some(RequestBody::Json(shape::<PatchAddon>)),
        response: ResponseBody::Json(shape::<Addon>),
        query: None,
        handle: addon_ops::patch(ctx, params.get(0), request),
    }
    UpgradeAddon: POST "/api/addons/{addonId}/upgrade" {
        needs: Admin, target: Addon, success: ACCEPTED,
        summary: "Move the add-on to a new server version: a new add-on, the data dumped, restored and counted, the links moved; the old one kept stopped for a rollback",
        request: Some(RequestBody::Json(shape::<UpgradeAddon>)),
        response: ResponseBody::Json(shape::<Addon>),
        query: None,
        handle: addon_ops::upgrade(ctx, params.get(0), request),
    }
    RollbackAddon: POST "/api/addons/{addonId}/rollback" {
        needs: Admin, target: Addon, success: ACCEPTED,
        summary: "Go back to the add-on this one was upgraded from: it runs again, the links move back, this one stops",
        request: None,
        response: ResponseBody::Json(shape::<Addon>),
        query: None,
        handle: addon_ops::rollback(ctx, params.get(0)),
    }
    DeleteAddon: DELETE "/api/addons/{addonId}" {
        needs: Admin, target: Addon, success: OK,
        summary: "Delete an add-on and its data (?confirm=<addonId>)",
        request: None,
        response: ResponseBody::Json(shape::<AddonDeleted>),
        query: Some(fields::<DeleteAddonQuery>),
        handle: addons::delete(ctx, params.get(0), &request),
    }
    LinkAddon: PUT "/api/addons/{addonId}/links/{projectId}" {
        needs: Deploy, target: Addon, success: OK,
        summary: "Link another project: its next deployment gets the add-on's URL and may connect",
        request: None,
        response: ResponseBody::Json(shape::<Addon>),
        query: None,
        handle: addons::set_link(ctx, params.get(0), params.get(1), true),
    }
    UnlinkAddon: DELETE "/api/addons/{addonId}/links/{projectId}" {
        needs: Deploy, target: Addon, success: OK,
        summary: "Unlink a project (from its next deployment on)",
        request: None,
        response: ResponseBody::Json(shape::<Addon>),
        query: None,
        handle: addons::set_link(ctx, params.get(0), params.get(1), false),
    }
    AddonLogs: GET "/api/addons/{addonId}/logs" {
        needs: Read, target: Addon, success: OK,
        summary: "Get the add-on server's output (since, limit, stream)",
        request: None,
        response: ResponseBody::Json(shape::<AddonLogPage>),
        query: Some(fields::<LogQuery>),
        handle: addon_ops::logs(ctx, params.get(0), &request),
    }
    AddonLogStream: GET "/api/addons/{addonId}/logs/stream" {
        needs: Read, target: Addon, success: OK,
        summary: "Stream the add-on server's output as Server-Sent Events",
        request: None,
        response: ResponseBody::EventStream,
        query: Some(fields::<LogQuery>),
        handle: addon_ops::stream(ctx, params.get(0), &request),
    }
    AddonCredentials: GET "/api/addons/{addonId}/credentials" {
        needs: Deploy, target: Addon, success: OK,
        summary: "The add-on's URL, user and password (audited)",
        request: None,
        response: ResponseBody::Json(shape::<AddonCredentials>),
        query: None,
        handle: addons::credentials(ctx, params.get(0)),
    }
    AddonTunnel: GET "/api/addons/{addonId}/tunnel" {
        needs: Deploy, target: Addon, success: SWITCHING_PROTOCOLS,
        summary: "Connect to the add-on from outside (audited): upgrades to a WebSocket carrying one TCP connection to it, binary frames both ways",
        request: None,
        response: ResponseBody::WebSocket,
        query: None,
        handle: addons::tunnel(ctx, params.get(0), request),
    }
    ExportAddon: GET "/api/addons/{addonId}/export" {
        needs: Deploy, target: Addon, success: OK,
        summary: "Download a good backup's file (pg_dump -Fc or RDB): the one named by backupId, else a new backup taken and proven first",
        request: None,
        response: ResponseBody::Binary,
        query: Some(fields::<ExportQuery>),
        handle: addon_backups::export(ctx, params.get(0), &request),
    }
    ImportAddon: PUT "/api/addons/{addonId}/import" {
        needs: Admin, target: Addon, success: ACCEPTED,
        summary: "Replace the add-on's data with a file (pg_dump -Fc, SQL text, or RDB): kept as a backup, proven, then restored in place",
        request: Some(RequestBody::Upload),
        response: ResponseBody::Json(shape::<AddonBackup>),
        query: None,
        handle: addon_backups::import(ctx, params.get(0), request),
    }
    CreateAddonBackup: POST "/api/addons/{addonId}/backups" {
        needs: Deploy, target: Addon, success: ACCEPTED,
        summary: "Back the add-on up now: a dump, then proven by a throw-away restore (state running → verifying → ok | failed)",
        request: None,
        response: ResponseBody::Json(shape::<AddonBackup>),
        query: None,
        handle: addon_backups::create(ctx, params.get(0)),
    }
    ListAddonBackups: GET "/api/addons/{addonId}/backups" {
        needs: Read, target: Addon, success: OK,
        summary: "List the add-on's backups, newest first, with what each one's proof found",
        request: None,
        response: ResponseBody::Json(shape::<AddonBackupList>),
        query: Some(fields::<PageQuery>),
        handle: addon_backups::list(ctx, params.get(0), &request),
    }
    GetAddonBackup: GET "/api/addons/{addonId}/backups/{backupId}" {
        needs: Read, target: Addon, success: OK,
        summary: "Get one backup of the add-on",
        request: None,
        response: ResponseBody::Json(shape::<AddonBackup>),
        query: None,
        handle: addon_backups::get(ctx, params.get(0), params.get(1)),
    }
    VerifyAddonBackup: POST "/api/addons/{addonId}/backups/{backupId}/verify" {
        needs: Deploy, target: Addon, success: ACCEPTED,
        summary: "Prove a good backup again (its checksum, then a throw-away restore); a file changed since is failed",
        request: None,
        response: ResponseBody::Json(shape::<AddonBackup>),
        query: None,
        handle: addon_backups::verify(ctx, params.get(0), params.get(1)),
    }
    RestoreAddon: POST "/api/addons/{addonId}/restore" {
        needs: Admin, target: Addon, success: ACCEPTED,
        summary: "Restore a good backup into a new add-on or in place (the data is replaced only once the restored copy is proven)",
        request: Some(RequestBody::Json(shape::<RestoreAddon>)),
        response: ResponseBody::Json(shape::<Addon>),
        query: None,
        handle: addon_backups::restore(ctx, params.get(0), request),
    }
    ListDomains: GET "/api/projects/{projectId}/domains" {
        needs: Read, target: Project, success: OK,
        summary: "List the project's custom domains with their certificate state",
        request: None,
        response: ResponseBody::Json(shape::<DomainList>),
        query: Some(fields::<PageQuery>),
        handle: domains::list(ctx, params.get(0), &request),
    }
    GetDomain: GET "/api/projects/{projectId}/domains/{domain}" {
        needs: Read, target: Project, success: OK,
        summary: "Get one custom domain",
        request: None,
        response: ResponseBody::Json(shape::<Domain>),
        query: None,
        handle: domains::get(ctx, params.get(0), params.get(1)),
    }
    VerifyDomain: POST "/api/projects/{projectId}/domains/{domain}/verify" {
        needs: Deploy, target: Project, success: OK,
        summary: "Check a domain's proof of ownership (its TXT record) now; proven, it is routed and its certificate issued",
        request: None,
        response: ResponseBody::Json(shape::<Domain>),
        query: None,
        handle: domains::verify(ctx, params.get(0), params.get(1)),
    }
    DeleteDomain: DELETE "/api/projects/{projectId}/domains/{domain}" {
        needs: Deploy, target: Project, success: OK,
        summary: "Delete a custom domain: it stops being served at once and its certificate is dropped",
        request: None,
        response: ResponseBody::Json(shape::<DomainDeleted>),
        query: None,
        handle: domains::delete(ctx, params.get(0), params.get(1)),
    }
    UpdateSettings: PATCH "/api/projects/{projectId}" {
        needs: Deploy, target: Project, success: OK,
        summary: "Change the project's build settings (used by webhooks and deploy hooks)",
        request: Some(RequestBody::Json(shape::<ProjectSettingsPatch>)),
        response: ResponseBody::Json(shape::<Project>),
        query: None,
        handle: git::patch_settings(ctx, params.get(0), request),
    }
    RotateWebhookSecret: POST "/api/projects/{projectId}/webhook-secret" {
        needs: Deploy, target: Project, success: CREATED,
        summary: "Make (or rotate) the webhook secret; shown once, with the webhook URL",
        request: None,
        response: ResponseBody::Json(shape::<WebhookSecret>),
        query: None,
        handle: git::rotate_webhook_secret(ctx, params.get(0)),
    }
    Webhook: POST "/api/webhooks/{projectId}" {
        needs: Read, target: None, success: ACCEPTED,
        summary: "A git provider's webhook (GitHub, GitLab, Gitea, Forgejo): no token, its signature",
        request: Some(RequestBody::Json(shape::<AnyObject>)),
        response: ResponseBody::Json(shape::<WebhookAnswer>),
        query: None,
        public: git::webhook(ctx, params.get(0), request),
    }
    CreateDeployHook: POST "/api/projects/{projectId}/deploy-hooks" {
        needs: Deploy, target: Project, success: CREATED,
        summary: "Create a deploy hook (its secret URL is shown once)",
        request: Some(RequestBody::Json(shape::<CreateDeployHook>)),
        response: ResponseBody::Json(shape::<CreatedDeployHook>),
        query: None,
        handle: git::create_hook(ctx, params.get(0), request),
    }
    ListDeployHooks: GET "/api/projects/{projectId}/deploy-hooks" {
        needs: Read, target: Project, success: OK,
        summary: "List deploy hooks (without their secrets)",
        request: None,
        response: ResponseBody::Json(shape::<DeployHookList>),
        query: None,
        handle: git::list_hooks(ctx, params.get(0)),
    }
    DeleteDeployHook: DELETE "/api/projects/{projectId}/deploy-hooks/{hookId}" {
        needs: Deploy, target: Project, success: OK,
        summary: "Delete a deploy hook",
        request: None,
        response: ResponseBody::Json(shape::<DeployHookDeleted>),
        query: None,
        handle: git::delete_hook(ctx, params.get(0), params.get(1)),
    }
    TriggerDeployHook: POST "/api/hooks/{secret}" {
        needs: Read, target: None, success: ACCEPTED,
        summary: "Run a deploy hook: no token, the secret URL (deploys its branch with the saved settings)",
        request: None,
        response: ResponseBody::Json(shape::<HookTriggered>),
        query: None,
        // The body is dropped unread: hyper closes the connection after the answer.
        public: git::trigger_hook(ctx, params.get(0)),
    }
    ListPreviews: GET "/api/projects/{projectId}/previews" {
        needs: Read, target: Project, success: OK,
        summary: "List the project's previews, most recently updated first",
        request: None,
        response: ResponseBody::Json(shape::<PreviewList>),
        query: Some(fields::<PageQuery>),
        handle: git::list_previews(ctx, params.get(0), &request),
    }
    DeletePreview: DELETE "/api/projects/{projectId}/previews/{name}" {
        needs: Deploy, target: Project, success: OK,
        summary: "Tear a preview down (its host, app, build and certificate)",
        request: None,
        response: ResponseBody::Json(shape::<PreviewDeleted>),
        query: None,
        handle: git::delete_preview(ctx, params.get(0), params.get(1)),
    }
    ClearBuildCache: DELETE "/api/projects/{projectId}/build-cache" {
        needs: Deploy, target: Project, success: OK,
        summary: "Clear the project's build cache (the next build downloads everything again)",
        request: None,
        response: ResponseBody::Json(shape::<BuildCacheCleared>),
        query: None,
        handle: git::clear_build_cache(ctx, params.get(0)),
    }
}

/// What the daemon runs as: version, sandbox mode in force, TLS mode, domains.
fn system_info(ctx: &Context) -> types::SystemInfo {
    types::SystemInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        sandbox_mode: ctx.config.sandbox.mode.as_str().into(),
        tls_mode: ctx.config.tls.mode.as_str().into(),
        apps_domain: ctx.config.apps_domain.clone(),
        control_host: ctx.config.control_host.clone(),
        disk_limits: ctx.pipeline.workspaces().volumes().limited(),
    }
}

pub fn json_response(status: StatusCode, value: &impl serde::Serialize) -> Response<Body> {
    let body = serde_json::to_vec(value).expect("API shapes serialize");
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON body already serialized, sent with `status`.
pub fn json_bytes_response(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
