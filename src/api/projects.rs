//! Projects and their env vars: `/api/projects[/{projectId}[/env-vars[/{key}]]]`.

use super::reply::Reply;
use crate::error_code::ErrorCode;
use std::sync::Arc;

use super::ApiRequest;

use super::json::{read_json_object, read_string_fields, validate_slug};
use super::{types, ApiError, Context};
use crate::auth::{Caller, Scope};
use crate::ids::{now_ms, rfc3339};
use crate::store::records::ProjectRecord;
use crate::store::{CreateProject, SetEnvVars, MAX_ENV_VARS};

pub fn project_of(ctx: &Context, record: &ProjectRecord) -> types::Project {
    types::Project {
        id: record.id.clone(),
        slug: record.slug.clone(),
        url: ctx.app_url(&record.slug),
        created_at: rfc3339(record.created_ms),
        live_deployment_id: record.live_deployment_id.clone(),
        state: record.state,
        domains: record.domains.clone(),
        settings: record.settings.clone(),
        app_state: app_state(ctx, &record.slug),
    }
}

/// What the route table serves for `slug` now.
pub fn app_state(ctx: &Context, slug: &str) -> types::AppState {
    use crate::router::Target;
    match ctx.routes.snapshot().apps.get(slug) {
        Some(Some(Target::Asleep(asleep))) if asleep.waking() => types::AppState::Waking,
        Some(Some(Target::Asleep(_))) => types::AppState::Sleeping,
        Some(Some(_)) => types::AppState::Running,
        Some(None) | None => types::AppState::Stopped,
    }
}

/// Finds a project by id or slug; 404 when there is none.
pub async fn find(ctx: &Context, id_or_slug: &str) -> Result<ProjectRecord, ApiError> {
    let key = id_or_slug.to_owned();
    ctx.store
        .call(move |store| store.find_project(&key))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no project with id or slug {id_or_slug:?}")))
}

/// For requests that may create the project (env vars, an upload, a provision): a `prj_` id
/// must exist; a new slug is created, for an admin token only. The one place besides
/// `POST /api/projects` (admin scope) that creates projects: a project costs a sandbox uid
/// that is never reused.
pub async fn find_or_create(
    ctx: &Arc<Context>,
    caller: &Caller,
    id_or_slug: &str,
) -> Result<ProjectRecord, ApiError> {
    if id_or_slug.starts_with("prj_") {
        return find(ctx, id_or_slug).await;
    }
    validate_slug(id_or_slug, ctx.config.reserved_slug())?;
    if caller.scope != Scope::Admin {
        return find(ctx, id_or_slug)
            .await
            .map_err(|_| only_admin_creates(id_or_slug));
    }
    let slug = id_or_slug.to_owned();
    let uid_base = ctx.config.sandbox.uid_base;
    let record = match ctx
        .store
        .call(move |store| store.create_project(&slug, uid_base, now_ms()))
        .await?
    {
        CreateProject::Created(record) => {
            tracing::info!(project = %record.id, slug = %record.slug, "project created");
            publish_new_project(ctx, &record);
            record
        }
        CreateProject::SlugTaken(record) => record,
        CreateProject::NoUidLeft => return Err(no_uid_left()),
    };
    Ok(record)
}

/// Checks, before a request does costly work, that it will not need to create a project its
/// token may not create; [`find_or_create`] checks again when it gets there.
pub async fn refuse_creation_unless_admin(
    ctx: &Arc<Context>,
    caller: &Caller,
    id_or_slug: &str,
) -> Result<(), ApiError> {
    match caller.scope {
        Scope::Admin => Ok(()),
        _ => find_or_create(ctx, caller, id_or_slug).await.map(drop),
    }
}

fn only_admin_creates(slug: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Forbidden,
        format!("project `{slug}` does not exist and only an admin token may create projects"),
    )
}

/// Every sandbox uid of the configured range was handed out.
fn no_uid_left() -> ApiError {
    ApiError::new(
        ErrorCode::Conflict,
        format!(
            "no sandbox uid is left: {} projects were created from sandbox.uid_base (uids are \
             never reused); give this daemon a new sandbox.uid_base range",
            crate::config::PROJECT_UID_RANGE
        ),
    )
}

/// A new project answers 503 (not 404) on its app host until something is live.
fn publish_new_project(ctx: &Context, record: &ProjectRecord) {
    ctx.routes.add_project(&record.slug);
}

/// The projects the token may see, a page at a time, oldest first.
pub async fn list(
    ctx: &Arc<Context>,
    request: &ApiRequest,
    caller: &Caller,
) -> Result<Reply, ApiError> {
    let page = super::paging::parse(request.uri().query())?;
    let mut records = ctx.store.call(|store| store.list_projects()).await?;
    records.retain(|project| caller.may_see(&project.id));
    let (records, next_cursor) = super::paging::paginate(
        records,
        |p| (p.created_ms, p.id.clone()),
        super::paging::Order::OldestFirst,
        &page,
    );
    let projects = records.iter().map(|r| project_of(ctx, r)).collect();
    Ok(Reply::json(&types::ProjectList {
        projects,
        next_cursor,
    }))
}

pub async fn create(ctx: &Arc<Context>, request: ApiRequest) -> Result<Reply, ApiError> {
    let types::CreateProject { slug } = read_string_fields(&request)?;
    validate_slug(&slug, ctx.config.reserved_slug())?;
    let uid_base = ctx.config.sandbox.uid_base;
    let owned = slug.clone();
    match ctx
        .store
        .call(move |store| store.create_project(&owned, uid_base, now_ms()))
        .await?
    {
        CreateProject::Created(record) => {
            tracing::info!(project = %record.id, slug = %record.slug, "project created");
            publish_new_project(ctx, &record);
            Ok(Reply::json(&project_of(ctx, &record)))
        }
        // 409: the request is well-formed; the store's state refuses it.
        CreateProject::SlugTaken(_) => Err(ApiError::new(
            ErrorCode::Conflict,
            format!("a project with slug {slug:?} already exists; use GET /api/projects/{slug}"),
        )),
        CreateProject::NoUidLeft => Err(no_uid_left()),
    }
}

pub async fn get(ctx: &Arc<Context>, id_or_slug: &str) -> Result<Reply, ApiError> {
    let record = find(ctx, id_or_slug).await?;
    Ok(Reply::json(&project_of(ctx, &record)))
}

pub async fn delete(ctx: &Arc<Context>, id_or_slug: &str) -> Result<Reply, ApiError> {
    let record = find(ctx, id_or_slug).await?;
    let id = record.id.clone();
    let deleted = ctx
        .store
        .call(move |store| store.delete_project(&id))
        .await?;
    let Some(deleted) = deleted else {
        return Err(ApiError::not_found(format!(
            "no project with id or slug {id_or_slug:?}"
        )));
    };
    ctx.routes.remove_project(&record.slug);
    ctx.domains.project_deleted(&deleted.project.domains).await;
    ctx.jobs.project_deleted(&deleted.project.id).await;
    ctx.addons.project_deleted(&deleted.project.id).await;
    ctx.pipeline.project_deleted(&deleted).await;
    tracing::info!(project = %record.id, slug = %record.slug, "project deleted");
    Ok(Reply::json(&types::ProjectDeleted {
        id: record.id,
        slug: record.slug,
        deleted: true,
    }))
}

pub async fn set_env_vars(
    ctx: &Arc<Context>,
    caller: &Caller,
    id_or_slug: &str,
    request: ApiRequest,
) -> Result<Reply, ApiError> {
    // Validate everything before touching the store, so a bad request creates nothing.
    if !id_or_slug.starts_with("prj_") {
        validate_slug(id_or_slug, ctx.config.reserved_slug())?;
    }
    let (body, scope) = super::env_scope::env_vars_request(read_json_object(&request)?)?;
    let project = find_or_create(ctx, caller, id_or_slug).await?;
    let sealed: Vec<(String, Vec<u8>)> = body
        .iter()
        .map(|(key, value)| (key.clone(), ctx.secrets.seal_env(&project.id, key, value)))
        .collect();
    let project_id = project.id.clone();
    match ctx
        .store
        .call(move |store| store.set_env_vars(&project_id, &sealed, scope.as_ref()))
        .await?
    {
        SetEnvVars::Stored => {}
        SetEnvVars::TooMany { would_have } => {
            return Err(ApiError::new(
                ErrorCode::InvalidEnvKey,
                format!(
                    "the project would have {would_have} variables; the limit is {MAX_ENV_VARS}"
                ),
            ))
        }
    }
    // The body's names, sorted (a map keeps them so).
    let updated: Vec<String> = body.into_keys().collect();
    Ok(Reply::json(&types::EnvVarsUpdated {
        project_id: project.id,
        updated,
    }))
}

/// The project's env vars, each with where it applies; a `read` token sees the names with
/// every value `********`.
pub async fn get_env_vars(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    caller: &Caller,
) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let id = project.id.clone();
    let stored = ctx.store.call(move |store| store.env_vars(&id)).await?;
    let scopes = stored
        .iter()
        .map(|var| (var.key.clone(), super::env_scope::shown(var.scope.as_ref())))
        .collect();
    let sealed = stored
        .into_iter()
        .map(|var| (var.key, var.sealed))
        .collect();
    let mut env_vars: std::collections::BTreeMap<String, String> = ctx
        .secrets
        .open_env_vars(&project.id, sealed)
        .map_err(ApiError::internal)?
        .into_iter()
        .collect();
    if caller.scope == crate::auth::Scope::Read {
        for value in env_vars.values_mut() {
            *value = "********".into();
        }
    }
    Ok(Reply::json(&types::EnvVars {
        project_id: project.id,
        env_vars,
        scopes,
    }))
}

pub async fn delete_env_var(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    key: &str,
) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let (project_id, owned) = (project.id.clone(), key.to_owned());
    if !ctx
        .store
        .call(move |store| store.delete_env_var(&project_id, &owned))
        .await?
    {
        return Err(ApiError::not_found(format!(
            "project {} has no variable {key:?}",
            project.slug
        )));
    }
    Ok(Reply::json(&types::EnvVarDeleted {
        project_id: project.id,
        deleted: key.to_owned(),
    }))
}
