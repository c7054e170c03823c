//! `GET /api/metrics` (the Prometheus page, for any token) and
//! `GET /api/projects/{projectId}/usage` (one project's figures as JSON).

use super::reply::Reply;
use std::sync::Arc;

use http::{HeaderValue, Response};

use super::{projects, ApiError, Context};
use crate::http_util::full;
use crate::metrics::exposition::CONTENT_TYPE;

pub async fn metrics(ctx: &Arc<Context>) -> Result<Reply, ApiError> {
    let text = ctx.observatory.prometheus_text().await?;
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
