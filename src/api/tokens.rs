//! `POST/GET /api/tokens`, `DELETE /api/tokens/{tokenId}`: admin tokens manage tokens of any
//! scope (`admin`, `deploy`, `read`), optionally limited to projects and with an expiry.

use super::reply::Reply;
use crate::error_code::ErrorCode;
use std::sync::Arc;

use super::ApiRequest;

use super::json::read_json_object;
use super::paging::{self, Order};
use super::{types, ApiError, Context};
use crate::auth::{Grant, Scope, TokenError};

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

pub async fn create(ctx: &Arc<Context>, request: ApiRequest) -> Result<Reply, ApiError> {
    let body = read_json_object(&request)?;
    // `projects` is a list or absent (the document does not make it nullable: a null next
    // to an admin scope would pass as "no limit" where the schema refuses a limit).
    if body.get("projects").is_some_and(|value| value.is_null()) {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "field `projects` must be a list of project slugs; leave it out for all projects",
        ));
    }
    let (name, grant) = parse_create(body, crate::ids::now_ms())?;
    let tokens = ctx.tokens.clone();
    let token = ctx
        .store
        .call(move |store| tokens.create_in(store, &name, grant, crate::ids::now_ms()))
        .await
        .map_err(|error| match error {
            TokenError::Store(error) => ApiError::from(error),
            // The store's state, not the body's shape, refuses it: 404, as for any missing id.
            TokenError::UnknownProject(name) => ApiError::new(
                ErrorCode::NotFound,
                format!(
                    "field `projects`: no project {name:?}; a token is limited to projects that \
                     exist (create it first), and only to them, not to a later project of the \
                     same slug"
                ),
            ),
        })?;
    tracing::info!(token = %token.record.id, name = %token.record.name, scope = token.record.scope.as_str(), "API token created");
    Ok(Reply::json(&types::CreatedToken::new(
        &token.record,
        token.secret,
    )))
}

/// The body of `POST /api/tokens` → the token's name and grant; `INVALID_BODY` naming the
/// field otherwise.
pub fn parse_create(
    body: serde_json::Map<String, serde_json::Value>,
    now_ms: u64,
) -> Result<(String, Grant), ApiError> {
    let invalid = |message: String| ApiError::new(ErrorCode::InvalidBody, message);
    let request: types::CreateToken = serde_json::from_value(serde_json::Value::Object(body))
        .map_err(|error| {
            invalid(format!(
                "{error}; the fields are name, scope, projects, expiresInDays"
            ))
        })?;
    let name = request.name;
    // Characters, not bytes: the schema's maxLength counts characters.
    let too_long = name.chars().count() > 100;
    if name.trim().is_empty() || too_long || name.chars().any(char::is_control) {
        return Err(invalid(
            "field `name` must be 1 to 100 printable characters".into(),
        ));
    }
    let scope = request.scope.unwrap_or_default();
    if let Some(projects) = &request.projects {
        if scope == Scope::Admin {
            return Err(invalid(
                "field `projects` limits deploy and read tokens; an admin token covers everything"
                    .into(),
            ));
        }
        if projects.is_empty() || projects.len() > 100 {
            return Err(invalid(
                "field `projects` must list 1 to 100 project slugs".into(),
            ));
        }
        for slug in projects {
            if super::json::validate_slug(slug, "").is_err() {
                return Err(invalid(format!(
                    "field `projects`: {slug:?} is not a project slug"
                )));
            }
        }
    }
    let expires_ms = match request.expires_in_days {
        None => None,
        Some(days @ 1..=3650) => Some(now_ms + u64::from(days) * DAY_MS),
        Some(days) => {
            return Err(invalid(format!(
                "field `expiresInDays` must be 1 to 3650 (got {days})"
            )))
        }
    };
    Ok((
        name,
        Grant {
            scope,
            projects: request.projects,
            expires_ms,
        },
    ))
}

pub async fn list(ctx: &Arc<Context>, request: &ApiRequest) -> Result<Reply, ApiError> {
    let page = paging::parse(request.uri().query())?;
    let tokens = ctx.tokens.clone();
    let records = ctx.store.call(move |_| tokens.list()).await?;
    let (records, next_cursor) = paging::paginate(
        records,
        |r| (r.created_ms, r.id.clone()),
        Order::OldestFirst,
        &page,
    );
    let tokens = records.iter().map(types::Token::from).collect();
    Ok(Reply::json(&types::TokenList {
        tokens,
        next_cursor,
    }))
}

/// Revokes a token at once; not the one the request is made with (that would lock the caller
/// out mid-session: revoke it with another admin token, or `slipway token revoke`).
pub async fn delete(
    ctx: &Arc<Context>,
    id: &str,
    caller: &crate::auth::Caller,
) -> Result<Reply, ApiError> {
    if caller.token_id == id {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "a token cannot revoke itself; revoke it with another admin token or `slipway token revoke`",
        ));
    }
    let tokens = ctx.tokens.clone();
    let owned = id.to_owned();
    if !ctx
        .store
        .call(move |store| tokens.revoke_in(store, &owned))
        .await?
    {
        return Err(ApiError::not_found(format!("no token with id {id:?}")));
    }
    tracing::info!(token = %id, "API token revoked");
    Ok(Reply::json(&types::TokenRevoked {
        id: id.to_owned(),
        revoked: true,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: serde_json::Value) -> Result<(String, Grant), ApiError> {
        parse_create(body.as_object().unwrap().clone(), 1_000)
    }

    #[test]
    fn grants_are_checked() {
        let (name, grant) = parse(serde_json::json!({"name": "ci"})).unwrap();
        assert_eq!(
            (name.as_str(), grant.scope, grant.expires_ms),
            ("ci", Scope::Admin, None)
        );
        let (_, grant) = parse(serde_json::json!({
            "name": "ci", "scope": "deploy", "projects": ["web"], "expiresInDays": 2
        }))
        .unwrap();
        assert_eq!(grant.scope, Scope::Deploy);
        assert_eq!(grant.projects, Some(vec!["web".to_owned()]));
        assert_eq!(grant.expires_ms, Some(1_000 + 2 * DAY_MS));
        for bad in [
            serde_json::json!({"name": ""}),
            serde_json::json!({"name": "x", "scope": "root"}),
            serde_json::json!({"name": "x", "projects": ["web"]}),
            serde_json::json!({"name": "x", "scope": "read", "projects": []}),
            serde_json::json!({"name": "x", "scope": "read", "projects": ["Not A Slug"]}),
            serde_json::json!({"name": "x", "expiresInDays": 0}),
            serde_json::json!({"name": "x", "expiresInDays": "2"}),
            serde_json::json!({"name": "x", "other": 1}),
        ] {
            let error = parse(bad.clone()).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidBody, "{bad}");
        }
    }
}
