//! `POST/GET /api/tokens`, `DELETE /api/tokens/{tokenId}`.

use crate::error_code::ErrorCode;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::json::read_string_fields;
use super::{json_response, types, ApiError, Context};
use crate::http_util::Body;

pub async fn create(
    ctx: &Arc<Context>,
    request: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let types::CreateToken { name } = read_string_fields(request).await?;
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
    Ok(json_response(
        StatusCode::CREATED,
        &types::CreatedToken::new(&token.record, token.secret),
    ))
}

pub async fn list(ctx: &Arc<Context>) -> Result<Response<Body>, ApiError> {
    let tokens = ctx.tokens.clone();
    let records = ctx.store.call(move |_| tokens.list()).await?;
    let tokens = records.iter().map(types::Token::from).collect();
    Ok(json_response(StatusCode::OK, &types::TokenList { tokens }))
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
        &types::TokenRevoked {
            id: id.to_owned(),
            revoked: true,
        },
    ))
}
