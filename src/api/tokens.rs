//! `POST/GET /api/tokens`, `DELETE /api/tokens/{tokenId}`.

use crate::error_code::ErrorCode;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use super::json::{only_fields, optional_string, read_json_object};
use super::{json_response, ApiError, Context};
use crate::http_util::Body;
use crate::ids::rfc3339;
use crate::store::records::TokenRecord;

pub fn token_json(record: &TokenRecord) -> serde_json::Value {
    json!({
        "id": record.id,
        "name": record.name,
        "createdAt": rfc3339(record.created_ms),
        "lastUsedAt": record.last_used_ms.map(rfc3339),
    })
}

pub async fn create(
    ctx: &Arc<Context>,
    request: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let body = read_json_object(request).await?;
    only_fields(&body, &["name"])?;
    let name = optional_string(&body, "name")?.ok_or_else(|| {
        ApiError::new(
            ErrorCode::InvalidBody,
            "field `name` is required (a label for the token)",
        )
    })?;
    if name.trim().is_empty() || name.len() > 100 || name.chars().any(char::is_control) {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "field `name` must be 1 to 100 printable characters",
        ));
    }
    let tokens = ctx.tokens.clone();
    let token = ctx
        .store
        .call(move |_| tokens.create(&name, crate::ids::now_ms()))
        .await?;
    tracing::info!(token = %token.record.id, name = %token.record.name, "API token created");
    let mut body = token_json(&token.record);
    body["token"] = json!(token.secret);
    body.as_object_mut().map(|o| o.remove("lastUsedAt"));
    Ok(json_response(StatusCode::CREATED, &body))
}

pub async fn list(ctx: &Arc<Context>) -> Result<Response<Body>, ApiError> {
    let tokens = ctx.tokens.clone();
    let records = ctx.store.call(move |_| tokens.list()).await?;
    let list: Vec<_> = records.iter().map(token_json).collect();
    Ok(json_response(StatusCode::OK, &json!({ "tokens": list })))
}

pub async fn delete(ctx: &Arc<Context>, id: &str) -> Result<Response<Body>, ApiError> {
    let tokens = ctx.tokens.clone();
    let owned = id.to_owned();
    if !ctx.store.call(move |_| tokens.revoke(&owned)).await? {
        return Err(ApiError::not_found(format!("no token with id {id:?}")));
    }
    tracing::info!(token = %id, "API token revoked");
    Ok(json_response(
        StatusCode::OK,
        &json!({ "id": id, "revoked": true }),
    ))
}
