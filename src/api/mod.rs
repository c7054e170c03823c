//! The REST API under `/api/` on the control host: authentication → rate limit → route →
//! handler. Every response carries the rate-limit headers; every error is the contract's
//! envelope (`error.rs`). Handlers live in one module per resource.

mod audit;
mod context;
mod domains;
mod env_scope;
mod error;
mod failures;
mod git;
mod idempotency;
mod json;
mod logs;
mod notifications;
mod observability;
mod openapi;
mod paging;
mod projects;
mod provision;
mod public_body;
mod routes;
mod source;
mod tokens;
pub mod types;

use std::net::SocketAddr;
use std::sync::Arc;

use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;

pub use context::Context;
pub use error::{ApiError, ErrorCode};
pub use openapi::{openapi_document, OpenApiDocument};
pub use public_body::PublicBodies;
pub use routes::{Route, RouteSpec, Target, ROUTES};
pub use tokens::parse_create as parse_token_request;

use crate::auth::Caller;
use crate::http_util::{full, Body};

/// A request as handlers see it: the body already read (bounded by the route's limit).
pub type ApiRequest = Request<bytes::Bytes>;

/// Path parameters captured by a template, in order.
pub struct Params(Vec<String>);

impl Params {
    pub fn get(&self, index: usize) -> &str {
        &self.0[index]
    }
}

/// Matches `path` against `template`; returns the captured (percent-decoded) parameters.
pub fn match_template(template: &str, path: &str) -> Option<Params> {
    let mut template_parts = template.split('/');
    let mut path_parts = path.split('/');
    let mut params = Vec::new();
    loop {
        match (template_parts.next(), path_parts.next()) {
            (None, None) => return Some(Params(params)),
            (Some(t), Some(p)) if t.starts_with('{') => {
                if p.is_empty() {
                    return None;
                }
                params
                    .push(String::from_utf8(crate::http_util::percent_decode(p.as_bytes())?).ok()?);
            }
            (Some(t), Some(p)) if t == p => {}
            _ => return None,
        }
    }
}

enum Matched {
    Route(&'static RouteSpec, Params),
    WrongMethod(Vec<&'static str>),
    None,
}

fn find_route(method: &Method, path: &str) -> Matched {
    let mut allowed = Vec::new();
    for spec in ROUTES {
        if let Some(params) = match_template(spec.template, path) {
            if spec.method == method || (method == Method::HEAD && spec.method == Method::GET) {
                return Matched::Route(spec, params);
            }
            allowed.push(spec.method.as_str());
        }
    }
    if allowed.is_empty() {
        Matched::None
    } else {
        Matched::WrongMethod(allowed)
    }
}

/// Handles one `/api/` request.
pub async fn handle(
    ctx: Arc<Context>,
    request: Request<Incoming>,
    client: SocketAddr,
) -> Response<Body> {
    let now_ms = crate::ids::now_ms();
    let authorization = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let caller = ctx.tokens.verify(authorization, now_ms);
    let matched = find_route(request.method(), request.uri().path());
    let post_route = match (&matched, request.method()) {
        (Matched::Route(spec, _), &Method::POST) => Some(spec.template),
        _ => None,
    };
    let subject = match &caller {
        Some(caller) => caller.token_id.clone(),
        None => crate::ratelimit::client_subject(client.ip()),
    };
    let decision = ctx.limiter.check(
        &subject,
        post_route.map(|t| format!("POST {t}")).as_deref(),
        now_ms as f64 / 1000.0,
    );
    let result = if !decision.allowed {
        Err(ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "rate limit of {} requests per minute exceeded; retry in {} s",
                decision.limit, decision.retry_after
            ),
        )
        .with_header("retry-after", decision.retry_after.to_string()))
    } else {
        match (caller, matched) {
            (_, Matched::Route(spec, params)) if spec.route.is_public() => {
                dispatch_public(&ctx, request, spec, params, client).await
            }
            (None, _) => Err(ApiError::unauthorized()),
            (Some(caller), matched) => dispatch(&ctx, request, matched, caller, client).await,
        }
    };
    let mut response = result.unwrap_or_else(ApiError::into_response);
    let headers = response.headers_mut();
    headers.insert("x-ratelimit-limit", HeaderValue::from(decision.limit));
    headers.insert(
        "x-ratelimit-remaining",
        HeaderValue::from(decision.remaining),
    );
    headers.insert("x-ratelimit-reset", HeaderValue::from(decision.reset_at));
    response
}

async fn dispatch(
    ctx: &Arc<Context>,
    request: Request<Incoming>,
    matched: Matched,
    caller: Arc<Caller>,
    client: SocketAddr,
) -> Result<Response<Body>, ApiError> {
    let (spec, params) = match matched {
        Matched::Route(spec, params) => (spec, params),
        Matched::WrongMethod(allowed) => {
            return Err(ApiError::new(
                ErrorCode::MethodNotAllowed,
                format!(
                    "{} is not allowed here; allowed: {}",
                    request.method(),
                    allowed.join(", ")
                ),
            )
            .with_header("allow", allowed.join(", ")))
        }
        Matched::None => {
            return Err(ApiError::not_found(format!(
                "no API route {} {}; see GET /api/openapi.json",
                request.method(),
                request.uri().path()
            )))
        }
    };
    tracing::debug!(token = %caller.token_id, route = ?spec.route, "api request");
    let method = request.method().clone();
    if method == Method::GET || method == Method::HEAD {
        return serve(ctx, request, spec, params, caller).await;
    }
    // A request that changes something leaves an audit entry, committed with its change.
    let entry = audit::draft(ctx, &caller, client, &method, spec, &params).await;
    let scoped = Some(Arc::new(entry.clone()));
    let result = crate::store::AUDIT
        .scope(scoped, serve(ctx, request, spec, params, caller))
        .await;
    let status = match &result {
        Ok(response) => response.status(),
        Err(error) => error.code.status(),
    };
    let mut entry = entry;
    let result = match result {
        // A new project is named by its answer, not its path.
        Ok(response) if spec.route == Route::CreateProject && status.is_success() => {
            let (parts, body) = response.into_parts();
            let bytes = http_body_util::BodyExt::collect(body)
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            if let Ok(created) = serde_json::from_slice::<types::Project>(&bytes) {
                entry.target = Some(created.slug);
                entry.project_id = Some(created.id);
            }
            Ok(Response::from_parts(parts, full(bytes)))
        }
        other => other,
    };
    audit::finish(ctx, spec, entry, status).await;
    result
}

/// A route no bearer token opens (`Route::is_public`): the handler authenticates the request
/// itself (a provider's signature, a deploy hook's secret) before it reads a byte of the body
/// (`public_body.rs`); a deploy hook reads none. Audited as `webhook` or `deploy hook`; a
/// deploy hook's secret never reaches the audit log; failures before authentication are only
/// counted (`failures::UnauthenticatedFailures`).
async fn dispatch_public(
    ctx: &Arc<Context>,
    request: Request<Incoming>,
    spec: &'static RouteSpec,
    params: Params,
    client: SocketAddr,
) -> Result<Response<Body>, ApiError> {
    let caller = Caller {
        token_id: "-".into(),
        token_name: match spec.route {
            Route::Webhook => "webhook",
            _ => "deploy hook",
        }
        .into(),
        scope: crate::auth::Scope::Read,
        projects: None,
        expires_ms: None,
    };
    let mut entry = audit::draft(ctx, &caller, client, request.method(), spec, &params).await;
    if spec.route == Route::TriggerDeployHook {
        entry.target = None;
    }
    let scoped = Some(Arc::new(entry.clone()));
    let result = crate::store::AUDIT
        .scope(scoped, async {
            match spec.route {
                Route::Webhook => git::webhook(ctx, params.get(0), request).await,
                // The body is dropped unread: hyper closes the connection after the answer.
                _ => git::trigger_hook(ctx, params.get(0)).await,
            }
        })
        .await;
    let status = match &result {
        Ok(response) => response.status(),
        Err(error) => error.code.status(),
    };
    let failures = &ctx.unauthenticated_failures;
    if failures.settle(spec.route, result.as_ref().err(), crate::ids::now_ms()) {
        audit::finish(ctx, spec, entry, status).await;
    }
    result
}

/// Authorizes, reads the body (bounded by the route), and runs the handler — or replays the
/// answer an `Idempotency-Key` already got.
async fn serve(
    ctx: &Arc<Context>,
    request: Request<Incoming>,
    spec: &'static RouteSpec,
    params: Params,
    caller: Arc<Caller>,
) -> Result<Response<Body>, ApiError> {
    authorize(ctx, &caller, spec, &params).await?;
    let limit = match spec.request {
        Some(routes::RequestBody::Archive) => {
            crate::pipeline::source_limits(&ctx.config.limits).max_archive_bytes as usize
        }
        _ => json::MAX_JSON_BYTES,
    };
    let (parts, body) = request.into_parts();
    let body = json::read_body(Request::from_parts(parts.clone(), body), limit).await?;
    let request = Request::from_parts(parts, body);
    idempotency::run(&ctx.store, &ctx.idempotency, &caller, request, |request| {
        handle_route(ctx, request, spec.route, params, &caller)
    })
    .await
}

async fn handle_route(
    ctx: &Arc<Context>,
    request: ApiRequest,
    route: Route,
    params: Params,
    caller: &Caller,
) -> Result<Response<Body>, ApiError> {
    match route {
        Route::ListProjects => projects::list(ctx, &request, caller).await,
        Route::CreateProject => projects::create(ctx, request).await,
        Route::GetProject => projects::get(ctx, params.get(0)).await,
        Route::DeleteProject => projects::delete(ctx, params.get(0)).await,
        Route::SetEnvVars => projects::set_env_vars(ctx, caller, params.get(0), request).await,
        Route::GetEnvVars => projects::get_env_vars(ctx, params.get(0), caller).await,
        Route::DeleteEnvVar => projects::delete_env_var(ctx, params.get(0), params.get(1)).await,
        Route::CreateToken => tokens::create(ctx, request).await,
        Route::ListTokens => tokens::list(ctx, &request).await,
        Route::DeleteToken => tokens::delete(ctx, params.get(0), caller).await,
        Route::UploadSource => source::upload(ctx, caller, params.get(0), request).await,
        Route::Provision => provision::provision(ctx, caller, params.get(0), request).await,
        Route::ProvisionStatus => provision::status(ctx, params.get(0)).await,
        Route::Deployments => provision::deployments(ctx, params.get(0), &request).await,
        Route::Rollback => provision::rollback(ctx, params.get(0), request).await,
        Route::GetDeployment => provision::deployment(ctx, params.get(0)).await,
        Route::CancelRun => provision::cancel(ctx, params.get(0)).await,
        Route::Logs => logs::page(ctx, params.get(0), &request).await,
        Route::LogStream => logs::stream(ctx, params.get(0), &request).await,
        Route::Audit => audit::list(ctx, &request).await,
        Route::OpenApi => Ok(json_response(StatusCode::OK, &openapi_document())),
        Route::System => Ok(json_response(StatusCode::OK, &system_info(ctx))),
        Route::Metrics => observability::metrics(ctx).await,
        Route::ProjectUsage => observability::usage(ctx, params.get(0)).await,
        Route::CreateNotification => notifications::create(ctx, request).await,
        Route::ListNotifications => notifications::list(ctx).await,
        Route::GetNotification => notifications::get(ctx, params.get(0)).await,
        Route::DeleteNotification => notifications::delete(ctx, params.get(0)).await,
        Route::NotificationDeliveries => notifications::deliveries(ctx, params.get(0)).await,
        Route::CreateDomain => domains::create(ctx, params.get(0), request).await,
        Route::ListDomains => domains::list(ctx, params.get(0), &request).await,
        Route::GetDomain => domains::get(ctx, params.get(0), params.get(1)).await,
        Route::DeleteDomain => domains::delete(ctx, params.get(0), params.get(1)).await,
        Route::UpdateSettings => git::patch_settings(ctx, params.get(0), request).await,
        Route::RotateWebhookSecret => git::rotate_webhook_secret(ctx, params.get(0)).await,
        Route::CreateDeployHook => git::create_hook(ctx, params.get(0), request).await,
        Route::ListDeployHooks => git::list_hooks(ctx, params.get(0)).await,
        Route::DeleteDeployHook => git::delete_hook(ctx, params.get(0), params.get(1)).await,
        Route::ListPreviews => git::list_previews(ctx, params.get(0), &request).await,
        Route::DeletePreview => git::delete_preview(ctx, params.get(0), params.get(1)).await,
        Route::ClearBuildCache => git::clear_build_cache(ctx, params.get(0)).await,
        Route::Webhook | Route::TriggerDeployHook => {
            unreachable!("`handle` sends the public routes to `dispatch_public`")
        }
    }
}

/// The one place a token's scope, project list and the project's existence are checked
/// against a route: 403 `FORBIDDEN` naming what is needed. That only admin tokens create
/// projects is `projects::find_or_create`'s rule, the one way a request makes one.
async fn authorize(
    ctx: &Arc<Context>,
    caller: &Caller,
    spec: &RouteSpec,
    params: &Params,
) -> Result<(), ApiError> {
    if !caller.scope.covers(spec.needs) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "{} {} needs a token with scope `{}`; this token's scope is `{}`",
                spec.method,
                spec.template,
                spec.needs.as_str(),
                caller.scope.as_str()
            ),
        ));
    }
    if spec.target == Target::None
        || (caller.scope == crate::auth::Scope::Admin && caller.projects.is_none())
    {
        return Ok(());
    }
    let key = params.get(0).to_owned();
    let target = spec.target;
    let slug = ctx
        .store
        .call(move |store| -> crate::store::Result<Option<String>> {
            let project_id = match target {
                Target::None => return Ok(None),
                Target::Project => {
                    return Ok(Some(match store.find_project(&key)? {
                        Some(project) => project.slug,
                        // Not created yet: the slug it would get.
                        None if !key.starts_with("prj_") => key,
                        None => return Ok(None),
                    }));
                }
                Target::Run => store.run(&key)?.map(|run| run.project_id),
                Target::Deployment => store.deployment(&key)?.map(|d| d.project_id),
            };
            Ok(match project_id {
                Some(id) => store.find_project(&id)?.map(|project| project.slug),
                None => None,
            })
        })
        .await?;
    // A missing run or deployment is the handler's 404 to give.
    let Some(slug) = slug else {
        return Ok(());
    };
    if !caller.may_see(&slug) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("this token is limited to other projects than `{slug}`"),
        ));
    }
    Ok(())
}

/// What the daemon runs as: version, sandbox mode in force, TLS mode, domains.
fn system_info(ctx: &Context) -> types::SystemInfo {
    types::SystemInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        sandbox_mode: ctx.config.sandbox.mode.as_str().into(),
        tls_mode: ctx.config.tls.mode.as_str().into(),
        apps_domain: ctx.config.apps_domain.clone(),
        control_host: ctx.config.control_host.clone(),
        disk_limits: ctx.pipeline.volumes.limited(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match() {
        let params = match_template(
            "/api/projects/{projectId}/env-vars/{key}",
            "/api/projects/web/env-vars/A%5FB",
        )
        .unwrap();
        assert_eq!(params.get(0), "web");
        assert_eq!(params.get(1), "A_B");
        assert!(match_template("/api/projects/{projectId}", "/api/projects/").is_none());
        assert!(match_template("/api/projects/{projectId}", "/api/projects/a/b").is_none());
        assert!(matches!(
            find_route(&Method::PUT, "/api/projects"),
            Matched::WrongMethod(_)
        ));
        assert!(matches!(
            find_route(&Method::GET, "/api/nope"),
            Matched::None
        ));
    }
}
