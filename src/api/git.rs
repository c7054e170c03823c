//! Git-driven deploys over the API: `PATCH /api/projects/{projectId}` (settings),
//! `POST …/webhook-secret`, `POST /api/webhooks/{projectId}` (no token: the provider's
//! signature), deploy hooks (`…/deploy-hooks`, `POST /api/hooks/{secret}`, no token) and
//! previews (`GET …/previews`, `DELETE …/previews/{name}`). The work is `crate::autodeploy`'s.

use super::reply::Reply;
use std::sync::Arc;

use serde_json::Value;

use super::json::{read_json_object, read_string_fields};
use super::projects::{find, project_of};
use super::{types, ApiError, ApiRequest, Context, ErrorCode};
use crate::autodeploy::AutoDeployError;
use crate::ids::rfc3339;
use crate::store::records::{DeployHookRecord, ProjectSettings, Trigger};

/// Deploy hooks per project.
const MAX_HOOKS: usize = 20;

/// Placement constraints per project.
const MAX_CONSTRAINTS: usize = 10;

pub async fn patch_settings(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: ApiRequest,
) -> Result<Reply, ApiError> {
    let patch = read_json_object(&request)?;
    let project = find(ctx, id_or_slug).await?;
    let settings = patched(&project.settings, patch)?;
    if settings.placement == Some(crate::store::records::Placement::Cluster)
        && ctx.config.cluster.engine.is_none()
    {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "placement `cluster` needs a cluster engine: set [cluster] engine in the daemon's \
             config, or use `local`",
        ));
    }
    if !settings.placement_constraints.is_empty() && ctx.config.cluster.engine.is_none() {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "placementConstraints choose a cluster's nodes: set [cluster] engine in the \
             daemon's config first",
        ));
    }
    let id = project.id.clone();
    let updated = ctx
        .store
        .call(move |s| s.update_project(&id, |p| p.settings = settings))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no project with id or slug {id_or_slug:?}")))?;
    Ok(Reply::json(&project_of(ctx, &updated)))
}

fn invalid(message: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidBody, message)
}

/// `settings` with the patch's fields replaced (`null` or `""` clears an optional one), each
/// field read by serde as `ProjectSettingsPatch` states it, the result checked as a whole.
fn patched(
    settings: &ProjectSettings,
    patch: serde_json::Map<String, Value>,
) -> Result<ProjectSettings, ApiError> {
    let Ok(Value::Object(mut merged)) = serde_json::to_value(settings) else {
        unreachable!("ProjectSettings serializes to an object")
    };
    for (field, value) in patch {
        let alone = serde_json::Map::from_iter([(field.clone(), value.clone())]);
        serde_json::from_value::<types::ProjectSettingsPatch>(Value::Object(alone))
            .map_err(|error| invalid(format!("field `{field}`: {error}")))?;
        let cleared = value.is_null() || value.as_str() == Some("");
        if cleared && field == "productionBranch" {
            return Err(invalid(
                "field `productionBranch` must be a branch name".into(),
            ));
        }
        let none = match field.as_str() {
            "placementConstraints" => Value::Array(Vec::new()),
            _ => Value::Null,
        };
        merged.insert(field, if cleared { none } else { value });
    }
    let mut settings: ProjectSettings = serde_json::from_value(Value::Object(merged))
        .map_err(|error| invalid(error.to_string()))?;
    settings.build = settings
        .build
        .validate()
        .map_err(super::provision::invalid_setting)?;
    if let Some(url) = &settings.git_url {
        if crate::source::split_credentials(url).1.is_some() {
            return Err(invalid("field `gitUrl` must not hold credentials (user:token@): settings are not secret; use a public URL or a deploy key".into()));
        }
        crate::source::check_git_url(url)
            .map_err(|e| ApiError::new(ErrorCode::InvalidGitUrl, e.to_string()))?;
        // A stored URL is also what the document's pattern says: a repository path of
        // A-Z a-z 0-9 . _ / ~ - only.
        let path = match url.split_once("://") {
            Some((_, rest)) => rest.split_once('/').map_or("", |(_, path)| path),
            None => url.split_once(':').map_or("", |(_, path)| path),
        };
        let plain =
            |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'~' | b'-');
        if !path.bytes().all(plain) {
            return Err(ApiError::new(
                ErrorCode::InvalidGitUrl,
                "gitUrl has a repository path with characters other than A-Z a-z 0-9 . _ / ~ -",
            ));
        }
    }
    crate::source::check_git_ref(&settings.production_branch)
        .map_err(|e| invalid(format!("field `productionBranch`: {e}")))?;
    if let Some(sleep) = &settings.sleep {
        sleep.check().map_err(invalid)?;
    }
    if settings.placement_constraints.len() > MAX_CONSTRAINTS {
        return Err(invalid(format!(
            "field `placementConstraints`: at most {MAX_CONSTRAINTS} constraints"
        )));
    }
    for constraint in &settings.placement_constraints {
        constraint
            .check()
            .map_err(|e| invalid(format!("field `placementConstraints`: {e}")))?;
    }
    Ok(settings)
}

pub async fn rotate_webhook_secret(
    ctx: &Arc<Context>,
    id_or_slug: &str,
) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let secret = ctx.autodeploy.rotate_secret(&project).await?;
    tracing::info!(project = %project.slug, "webhook secret made (or rotated)");
    Ok(Reply::json(&types::WebhookSecret {
        secret,
        webhook_url: format!("{}/api/webhooks/{}", ctx.control_url(), project.id),
    }))
}

/// The project, its provider and its secret are found before a byte of the body is read;
/// the body then gets the public routes' cap, deadline and shared budget.
pub async fn webhook(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: http::Request<hyper::body::Incoming>,
) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let key = ctx
        .autodeploy
        .webhook_key(&project, request.headers())
        .map_err(autodeploy_error)?;
    let (parts, body) = request.into_parts();
    let body = ctx.public_bodies.read(&parts.headers, body).await?;
    let outcome = ctx
        .autodeploy
        .webhook(&project, key, &parts.headers, &body.bytes)
        .await
        .map_err(autodeploy_error)?;
    let (provisioning_id, deployment_id) = outcome
        .run
        .map_or((None, None), |(p, d)| (Some(p), Some(d)));
    Ok(Reply::json(&types::WebhookAnswer {
        action: outcome.action.to_owned(),
        reason: outcome.reason,
        provisioning_id,
        deployment_id,
    }))
}

fn autodeploy_error(error: AutoDeployError) -> ApiError {
    match error {
        AutoDeployError::Unauthorized(message) => ApiError::new(ErrorCode::Unauthorized, message),
        // A valid request the project's settings refuse (no gitUrl, a slug too long for
        // preview hosts): 409, as for any state that refuses a request.
        AutoDeployError::Settings(message) => ApiError::new(ErrorCode::Conflict, message),
        AutoDeployError::Provision(error) => super::provision::provision_error(error),
        AutoDeployError::Store(error) => error.into(),
    }
}

pub async fn create_hook(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: ApiRequest,
) -> Result<Reply, ApiError> {
    let body: types::CreateDeployHook = read_string_fields(&request)?;
    // The same rule as a token's name, and as the schema's pattern: 1 to 100 characters
    // (not bytes: the schema counts characters), not only spaces, no control characters.
    let name_ok = !body.name.trim().is_empty()
        && body.name.chars().count() <= 100
        && !body.name.chars().any(char::is_control);
    if !name_ok {
        return Err(invalid(
            "field `name` must be 1 to 100 printable characters".into(),
        ));
    }
    if body.branch.is_empty() {
        return Err(invalid("field `branch` must name a branch".into()));
    }
    crate::source::git_clone_command("https://example.invalid/r.git", Some(&body.branch))
        .map_err(|e| invalid(format!("field `branch`: {e}")))?;
    let project = find(ctx, id_or_slug).await?;
    let id = project.id.clone();
    let count = ctx.store.call(move |s| s.deploy_hooks_of(&id)).await?.len();
    if count >= MAX_HOOKS {
        // 409: a valid request the project's state refuses.
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("the project has {MAX_HOOKS} deploy hooks, the most allowed; delete one first"),
        ));
    }
    let secret = format!(
        "dh_{}",
        crate::ids::base32(&crate::ids::random_bytes::<32>())
    );
    let record = DeployHookRecord {
        v: 1,
        id: crate::ids::new_id("hook_"),
        project_id: project.id.clone(),
        name: body.name.trim().to_owned(),
        branch: body.branch,
        secret_sha256: crate::ids::sha256_hex(secret.as_bytes()),
        created_ms: crate::ids::now_ms(),
    };
    let stored = record.clone();
    ctx.store
        .call(move |s| s.insert_deploy_hook(&stored))
        .await?;
    Ok(Reply::json(&types::CreatedDeployHook {
        id: record.id,
        name: record.name,
        branch: record.branch,
        url: format!("{}/api/hooks/{secret}", ctx.control_url()),
        secret,
        created_at: rfc3339(record.created_ms),
    }))
}

pub async fn list_hooks(ctx: &Arc<Context>, id_or_slug: &str) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let id = project.id.clone();
    let hooks = ctx.store.call(move |s| s.deploy_hooks_of(&id)).await?;
    Ok(Reply::json(&types::DeployHookList {
        project_id: project.id,
        deploy_hooks: hooks
            .into_iter()
            .map(|h| types::DeployHook {
                id: h.id,
                name: h.name,
                branch: h.branch,
                created_at: rfc3339(h.created_ms),
            })
            .collect(),
    }))
}

pub async fn delete_hook(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    hook_id: &str,
) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let (id, hook) = (project.id.clone(), hook_id.to_owned());
    if !ctx
        .store
        .call(move |s| s.delete_deploy_hook(&id, &hook))
        .await?
    {
        return Err(ApiError::not_found(format!(
            "no deploy hook {hook_id:?} in project {}",
            project.slug
        )));
    }
    Ok(Reply::json(&types::DeployHookDeleted {
        id: hook_id.to_owned(),
        deleted: true,
    }))
}

/// `POST /api/hooks/{secret}`: deploys the hook's branch with the saved settings.
pub async fn trigger_hook(ctx: &Arc<Context>, secret: &str) -> Result<Reply, ApiError> {
    let hash = crate::ids::sha256_hex(secret.as_bytes());
    let hook = ctx
        .store
        .call(move |s| s.deploy_hook_by_secret(&hash))
        .await?;
    let Some(hook) = hook else {
        return Err(ApiError::not_found(
            "no deploy hook with this URL (it may have been deleted)".to_owned(),
        ));
    };
    let project = find(ctx, &hook.project_id).await?;
    let run = if hook.branch == project.settings.production_branch {
        ctx.autodeploy
            .deploy(&project, &hook.branch, None, Trigger::Hook)
            .await
    } else {
        let name = crate::autodeploy::preview::preview_name(&hook.branch, &project.slug)
            .unwrap_or_else(|| hook.branch.clone());
        ctx.autodeploy
            .preview(
                &project,
                &name,
                Some(&hook.branch),
                None,
                &hook.branch,
                Trigger::Hook,
            )
            .await
    }
    .map_err(autodeploy_error)?;
    tracing::info!(project = %project.slug, hook = %hook.id, run = %run.id, "deploy hook");
    Ok(Reply::json(&types::HookTriggered {
        provisioning_id: run.id,
        deployment_id: run.deployment_id,
    }))
}

pub async fn list_previews(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: &ApiRequest,
) -> Result<Reply, ApiError> {
    let page = super::paging::parse(request.uri().query())?;
    let project = find(ctx, id_or_slug).await?;
    let id = project.id.clone();
    let previews = ctx.store.call(move |s| s.previews_of(&id)).await?;
    let mut shaped = Vec::with_capacity(previews.len());
    for preview in previews {
        shaped.push((
            preview.updated_ms,
            preview_view(ctx, &project, preview).await?,
        ));
    }
    let (page, next_cursor) = super::paging::paginate(
        shaped,
        |(ms, p)| (*ms, crate::ids::sha256_hex(p.name.as_bytes())),
        super::paging::Order::NewestFirst,
        &page,
    );
    Ok(Reply::json(&types::PreviewList {
        project_id: project.id,
        previews: page.into_iter().map(|(_, p)| p).collect(),
        next_cursor,
    }))
}

pub async fn delete_preview(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    name: &str,
) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    if !ctx.autodeploy.teardown(&project, name).await? {
        return Err(ApiError::not_found(format!(
            "project {} has no preview {name:?}",
            project.slug
        )));
    }
    Ok(Reply::json(&types::PreviewDeleted {
        name: name.to_owned(),
        deleted: true,
    }))
}

pub async fn clear_build_cache(ctx: &Arc<Context>, id_or_slug: &str) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let freed_bytes = ctx.pipeline.clear_build_cache(&project.id).await;
    tracing::info!(project = %project.slug, freed_bytes, "build cache cleared");
    Ok(Reply::json(&types::BuildCacheCleared {
        project_id: project.id,
        deleted: true,
        freed_bytes,
    }))
}

/// A preview as the API shows it: its URL, its latest deployment's state and its app's.
pub(super) async fn preview_view(
    ctx: &Arc<Context>,
    project: &crate::store::records::ProjectRecord,
    preview: crate::store::records::PreviewRecord,
) -> Result<types::Preview, ApiError> {
    let latest = preview.latest_deployment_id.clone();
    let state = match latest.is_empty() {
        true => None,
        false => ctx
            .store
            .call(move |s| s.deployment(&latest))
            .await?
            .map(|d| d.state),
    };
    let label = format!("{}--{}", preview.name, project.slug);
    Ok(types::Preview {
        url: ctx.app_url(&label),
        app_state: super::projects::app_state(ctx, &label),
        state: state
            .map(|s| {
                serde_json::to_value(s)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            })
            .unwrap_or_else(|| "building".into()),
        name: preview.name,
        branch: preview.branch,
        pull_request: preview.pull_request,
        deployment_id: preview.deployment_id,
        updated_at: rfc3339(preview.updated_ms),
    })
}
