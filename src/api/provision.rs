//! Provisioning: `POST /api/projects/{projectId}/provision`, `POST …/rollback`,
//! `GET /api/provisioning/{provisioningId}/status`, `GET /api/projects/{projectId}/deployments`.

use super::reply::Reply;
use crate::error_code::ErrorCode;
use std::sync::Arc;

use super::ApiRequest;

use super::json::{read_string_fields, validate_slug};
use super::projects::{find, find_or_create};
use super::{types, ApiError, Context};
use crate::auth::Caller;
use crate::ids::rfc3339;
use crate::pipeline::{ProvisionError, RunPlan};
use crate::store::records::{DeploymentState, ProvisionRequest, RunRecord};

pub async fn provision(
    ctx: &Arc<Context>,
    caller: &Caller,
    id_or_slug: &str,
    request: ApiRequest,
) -> Result<Reply, ApiError> {
    let body: types::ProvisionBody = read_string_fields(&request)?;
    let build = body.build_settings();
    let slug = body.project_slug;
    validate_slug(&slug, ctx.config.reserved_slug())?;
    let build = build.validate().map_err(invalid_setting)?;
    let non_empty = |value: Option<String>| value.filter(|v| !v.is_empty());
    let mut parsed = ProvisionRequest {
        project_slug: slug.clone(),
        build,
        source_id: non_empty(body.source_id),
        git_url: non_empty(body.git_url),
        git_ref: non_empty(body.git_ref),
        ..Default::default()
    };
    if let Some(url) = parsed.git_url.take() {
        let (url, credentials) = crate::source::split_credentials(&url);
        parsed.git_url = Some(url);
        parsed.git_credentials = credentials;
    }
    // The CLI says who it is; a commit named by gitRef is the deployment's commit.
    let from_cli = request
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|agent| agent.starts_with("slipway-cli/"));
    if from_cli {
        parsed.target.trigger = crate::store::records::Trigger::Cli;
    }
    if let Some(git_ref) = &parsed.git_ref {
        match git_ref.len() == 40 && git_ref.bytes().all(|b| b.is_ascii_hexdigit()) {
            true => parsed.target.commit = Some(git_ref.to_ascii_lowercase()),
            false => parsed.target.branch = Some(git_ref.clone()),
        }
    }
    if parsed.git_ref.is_some() && parsed.git_url.is_none() {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "field `gitRef` needs `gitUrl`",
        ));
    }
    if !id_or_slug.starts_with("prj_") && id_or_slug != slug {
        return Err(ApiError::new(
            ErrorCode::InvalidSlugMismatch,
            format!("the path names project {id_or_slug:?} but projectSlug is {slug:?}"),
        ));
    }
    let project = find_or_create(ctx, caller, id_or_slug).await?;
    if project.slug != slug {
        return Err(ApiError::new(
            ErrorCode::InvalidSlugMismatch,
            format!(
                "project {} has slug {:?}, but projectSlug is {slug:?}",
                project.id, project.slug
            ),
        ));
    }
    let run = ctx
        .pipeline
        .provision(&project, RunPlan::Build(parsed))
        .await
        .map_err(provision_error)?;
    Ok(accepted(&run))
}

/// A setting that breaks `BuildSettings`' rules: 400 `INVALID_BODY` naming the field.
pub(super) fn invalid_setting(invalid: crate::build_settings::Invalid) -> ApiError {
    ApiError::new(ErrorCode::InvalidBody, invalid.to_string())
}

pub(super) fn provision_error(error: ProvisionError) -> ApiError {
    match error {
        ProvisionError::Invalid(code, message) => ApiError::new(code, message),
        ProvisionError::Store(error) => ApiError::internal(error),
    }
}

fn accepted(run: &RunRecord) -> Reply {
    Reply::json(&types::ProvisionAccepted {
        status: types::AcceptedStatus::ProvisioningInProgress,
        provisioning_id: run.id.clone(),
        status_check_url: format!("/api/provisioning/{}/status", run.id),
        estimated_completion_time: run.estimate_ms,
        deployment_id: run.deployment_id.clone(),
    })
}

pub async fn rollback(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: ApiRequest,
) -> Result<Reply, ApiError> {
    let types::RollbackBody { deployment_id } = read_string_fields(&request)?;
    let project = find(ctx, id_or_slug).await?;
    let id = deployment_id.clone();
    let deployment = ctx.store.call(move |s| s.deployment(&id)).await?;
    let deployment = match deployment {
        Some(d) if d.project_id == project.id => d,
        _ => {
            return Err(ApiError::not_found(format!(
                "{deployment_id:?} is not a deployment of {}",
                project.slug
            )))
        }
    };
    let built = matches!(
        deployment.state,
        DeploymentState::Live | DeploymentState::Inactive
    );
    if !built || !ctx.pipeline.workspaces().workspace(&deployment.id).is_dir() {
        // 409: a deployment of this project, whose state (no kept build) forbids it.
        return Err(ApiError::new(ErrorCode::Conflict,
            format!("{deployment_id} cannot be rolled back to: only the last 5 successful deployments keep their build"),
        ));
    }
    let run = ctx
        .pipeline
        .provision(&project, RunPlan::Rollback(deployment))
        .await
        .map_err(provision_error)?;
    Ok(accepted(&run))
}

pub async fn status(ctx: &Arc<Context>, run_id: &str) -> Result<Reply, ApiError> {
    match ctx.pipeline.status(run_id).await? {
        Some(status) => Ok(Reply::json(&status)),
        None => Err(ApiError::not_found(format!(
            "no provisioning run {run_id:?}"
        ))),
    }
}

/// A deployment as the API shows it.
fn deployment_shape(
    d: &crate::store::records::DeploymentRecord,
    project: &crate::store::records::ProjectRecord,
    runs: &[crate::store::records::RunRecord],
    url: &str,
) -> types::Deployment {
    use crate::store::records::Environment;
    let (live, url) = match d.target.environment {
        Environment::Production => (
            project.live_deployment_id.as_deref() == Some(d.id.as_str()),
            url.to_owned(),
        ),
        // A preview's URL: `<name>--<slug>` in place of the slug.
        Environment::Preview => (
            d.state == DeploymentState::Live,
            url.replacen(
                &format!("://{}.", project.slug),
                &format!(
                    "://{}.",
                    crate::pipeline::host_label(&project.slug, &d.target)
                ),
                1,
            ),
        ),
    };
    let error = runs
        .iter()
        .find(|run| run.id == d.provisioning_id)
        .and_then(|run| run.error.as_ref())
        .map(|e| types::RunErrorBody {
            code: e.code,
            message: e.message.clone(),
        });
    types::Deployment {
        id: d.id.clone(),
        project_id: d.project_id.clone(),
        provisioning_id: d.provisioning_id.clone(),
        state: d.state,
        mode: d.mode,
        live,
        created_at: rfc3339(d.created_ms),
        finished_at: d.finished_ms.map(rfc3339),
        url: live.then_some(url),
        error,
        environment: d.target.environment,
        branch: d.target.branch.clone(),
        commit: d.target.commit.clone(),
        trigger: d.target.trigger,
    }
}

/// `GET /api/deployments/{deploymentId}`.
pub async fn deployment(ctx: &Arc<Context>, id: &str) -> Result<Reply, ApiError> {
    let key = id.to_owned();
    let found = ctx
        .store
        .call(move |s| -> crate::store::Result<_> {
            let Some(d) = s.deployment(&key)? else {
                return Ok(None);
            };
            let project = s.find_project(&d.project_id)?;
            let runs = match &project {
                Some(p) => s.project_runs(&p.id)?,
                None => Vec::new(),
            };
            Ok(project.map(|p| (d, p, runs)))
        })
        .await?;
    let Some((d, project, runs)) = found else {
        return Err(ApiError::not_found(format!("no deployment {id:?}")));
    };
    let url = ctx.app_url(&project.slug);
    Ok(Reply::json(&deployment_shape(&d, &project, &runs, &url)))
}

/// `POST /api/provisioning/{provisioningId}/cancel`: the final status once it is canceled;
/// a run that already ended is 409 `CONFLICT`.
pub async fn cancel(ctx: &Arc<Context>, run_id: &str) -> Result<Reply, ApiError> {
    match ctx.pipeline.cancel(run_id).await {
        Ok(status) => Ok(Reply::json(&status)),
        Err(crate::pipeline::CancelError::NotFound) => Err(ApiError::not_found(format!(
            "no provisioning run {run_id:?}"
        ))),
        Err(crate::pipeline::CancelError::Finished(status)) => Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "provisioning run {run_id} already ended ({}); only a run in progress can be canceled",
                serde_json::to_value(&*status)
                    .ok()
                    .and_then(|v| v["status"].as_str().map(str::to_owned))
                    .unwrap_or_default()
            ),
        )),
        Err(crate::pipeline::CancelError::Store(error)) => Err(error.into()),
    }
}

pub async fn deployments(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: &ApiRequest,
) -> Result<Reply, ApiError> {
    let page = super::paging::parse(request.uri().query())?;
    let project = find(ctx, id_or_slug).await?;
    let id = project.id.clone();
    let list = ctx.store.call(move |s| s.project_deployments(&id)).await?;
    let (list, next_cursor) = super::paging::paginate(
        list,
        |d| (d.created_ms, d.id.clone()),
        super::paging::Order::NewestFirst,
        &page,
    );
    let project_id = project.id.clone();
    let runs = ctx.store.call(move |s| s.project_runs(&project_id)).await?;
    let url = ctx.app_url(&project.slug);
    let deployments = list
        .iter()
        .map(|d| deployment_shape(d, &project, &runs, &url))
        .collect();
    Ok(Reply::json(&types::DeploymentList {
        project_id: project.id,
        deployments,
        next_cursor,
    }))
}
