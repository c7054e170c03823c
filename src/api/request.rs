//! One API request's way: authentication → rate limit → route → scope → body → handler (or
//! the idempotent replay), with the audit entry of a change and the rate-limit headers on
//! every answer. The routes themselves are the table in `api/mod.rs`.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{HeaderValue, Method, Request, Response};
use hyper::body::Incoming;

use super::params::{match_template, Params};
use super::routes::{RequestBody, RouteSpec, Target};
use super::{
    audit, handle_public, handle_route, idempotency, json, types, ApiError, Context, ErrorCode,
    Route, ROUTES,
};
use crate::auth::Caller;
use crate::http_util::{full, Body};

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
            (_, Matched::Route(spec, params)) if spec.public => {
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
    if (method == Method::GET || method == Method::HEAD) && !audits_read(spec.route) {
        return serve(ctx, request, spec, params, caller).await;
    }
    // A request that changes something, or reads a secret, leaves an audit entry, committed
    // with its change.
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

/// Whether a GET of `route` is audited as a change is: it hands out an add-on's password or a
/// connection to it.
fn audits_read(route: Route) -> bool {
    matches!(route, Route::AddonCredentials | Route::AddonTunnel)
}

/// A route no bearer token opens (`RouteSpec::public`): the handler authenticates the request
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
        project_ids: None,
        expires_ms: None,
    };
    let mut entry = audit::draft(ctx, &caller, client, request.method(), spec, &params).await;
    if spec.route == Route::TriggerDeployHook {
        entry.target = None;
    }
    let scoped = Some(Arc::new(entry.clone()));
    let result = crate::store::AUDIT
        .scope(scoped, handle_public(spec.route, ctx, request, params))
        .await
        .map(|reply| reply.into_response(spec.success));
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
        Some(RequestBody::Archive) => {
            crate::pipeline::source_limits(&ctx.config.limits).max_archive_bytes as usize
        }
        _ => json::MAX_JSON_BYTES,
    };
    let (parts, body) = request.into_parts();
    let mut spooled = None;
    let body = match spec.request {
        Some(RequestBody::Upload) => {
            let dir = ctx.config.data_dir.join("tmp");
            let max = ctx.config.addons.import_max_mb * 1024 * 1024;
            let request = Request::from_parts(parts.clone(), body);
            spooled = Some(super::spool::spool(request, max, &dir).await?);
            bytes::Bytes::new()
        }
        _ => json::read_body(Request::from_parts(parts.clone(), body), limit).await?,
    };
    let mut request = Request::from_parts(parts, body);
    if let Some(file) = spooled {
        request.extensions_mut().insert(file);
    }
    let keeper = idempotency::Keeper {
        store: &ctx.store,
        secrets: &ctx.secrets,
        in_flight: &ctx.idempotency,
    };
    idempotency::run(keeper, &caller, request, |request| {
        let reply = handle_route(spec.route, ctx, request, params, &caller);
        async move { reply.await.map(|reply| reply.into_response(spec.success)) }
    })
    .await
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
        || (caller.scope == crate::auth::Scope::Admin && caller.sees_all())
    {
        return Ok(());
    }
    let key = params.get(0).to_owned();
    let lookup = key.clone();
    let target = spec.target;
    let project = ctx
        .store
        .call(
            move |store| -> crate::store::Result<Option<crate::store::records::ProjectRecord>> {
                let project_id = match target {
                    Target::None => return Ok(None),
                    Target::Project => return store.find_project(&lookup),
                    Target::Run => store.run(&lookup)?.map(|run| run.project_id),
                    Target::Deployment => store.deployment(&lookup)?.map(|d| d.project_id),
                    Target::JobRun => store.job_run(&lookup)?.map(|run| run.project_id),
                    Target::Addon => store.addon(&lookup)?.map(|addon| addon.project_id),
                };
                match project_id {
                    Some(id) => store.find_project(&id),
                    None => Ok(None),
                }
            },
        )
        .await?;
    let forbidden = |slug: &str| {
        ApiError::new(
            ErrorCode::Forbidden,
            format!("this token is limited to other projects than `{slug}`"),
        )
    };
    match project {
        // Grants are bound to project ids: a project made after the token, under a slug it
        // names, is not one of its projects.
        Some(project) if !caller.may_see(&project.id) => Err(forbidden(&project.slug)),
        Some(_) => Ok(()),
        // A slug no project has: not one of a limited token's projects either.
        None if target == Target::Project && !caller.sees_all() && !key.starts_with("prj_") => {
            Err(forbidden(&key))
        }
        // A missing project, run or deployment is the handler's 404 to give.
        None => Ok(()),
    }
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
