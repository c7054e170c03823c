//! `GET /api/metrics` (the Prometheus page, for any token; a limited token sees its projects) and
//! `GET /api/projects/{projectId}/usage` (one project's figures as JSON).

use super::reply::Reply;
use std::sync::Arc;

use http::{HeaderValue, Response};

use super::{projects, ApiError, Context};
use crate::auth::Caller;
use crate::http_util::full;
use crate::metrics::exposition::CONTENT_TYPE;
use crate::usage::Audience;

/// The whole page for a token that sees every project; a limited token's page has only its
/// projects (see `usage::Audience`).
pub async fn metrics(ctx: &Arc<Context>, caller: &Caller) -> Result<Reply, ApiError> {
    let audience = match &caller.project_ids {
        None => Audience::Operator,
        Some(ids) => Audience::Projects(ids.clone()),
    };
    let text = ctx.observatory.prometheus_text(&audience).await?;
    let mut response = Response::new(full(text));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(CONTENT_TYPE),
    );
    Ok(Reply::Whole(response))
}

pub async fn usage(ctx: &Arc<Context>, id_or_slug: &str) -> Result<Reply, ApiError> {
    let project = projects::find(ctx, id_or_slug).await?;
    let usage = ctx.observatory.project_usage(project).await;
    Ok(Reply::json(&usage))
}
