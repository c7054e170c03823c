//! An add-on's operations: `PATCH /api/addons/{addonId}` (grow its disk online, change its
//! memory limit or turn point-in-time recovery on or off, with a restart) and its server's output, `GET /api/addons/{addonId}/logs`
//! and `…/logs/stream` (the log channel the supervisor fills for `adn_…:postgres.1`, keyed by
//! the add-on's id, served as a run's). The work is the `addons` module's.

use std::sync::Arc;

use super::addons::{addon_error, record, view};
use super::json::read_json_object;
use super::reply::Reply;
use super::{types, ApiError, ApiRequest, Context, ErrorCode};
use crate::addons::AddonChange;

pub async fn patch(ctx: &Arc<Context>, id: &str, request: ApiRequest) -> Result<Reply, ApiError> {
    let body = read_json_object(&request)?;
    let patch: types::PatchAddon = serde_json::from_value(serde_json::Value::Object(body))
        .map_err(|error| {
            ApiError::new(
                ErrorCode::InvalidBody,
                format!("{error}; expected {{\"diskMb\", \"memoryMb\", \"pitr\", \"version\"}}"),
            )
        })?;
    if let Some(version) = &patch.version {
        same_major(ctx, id, version).await?;
    }
    let change = AddonChange {
        disk_mb: patch.disk_mb.map(u64::from),
        memory_mb: patch.memory_mb.map(u64::from),
        pitr: patch.pitr,
    };
    if change.disk_mb.is_none() && change.memory_mb.is_none() && change.pitr.is_none() {
        // Nothing asked, nothing changed: the add-on as it is.
        let addon = record(ctx, id).await?;
        return Ok(Reply::json(&view(ctx, addon).await));
    }
    if change
        .disk_mb
        .is_some_and(|mb| !(64..=1_048_576).contains(&mb))
        || change
            .memory_mb
            .is_some_and(|mb| !(64..=65536).contains(&mb))
    {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "`memoryMb` must be from 64 to 65536 and `diskMb` from 64 to 1048576",
        ));
    }
    let addon = record(ctx, id).await?;
    let changed = ctx
        .addons
        .change(&addon.id, change)
        .await
        .map_err(addon_error)?;
    if changed.pitr && !addon.pitr {
        // The first base backup: point-in-time recovery reaches moments from its end on.
        ctx.addons
            .start_base_backup(&changed, "pitr")
            .await
            .map_err(addon_error)?;
    }
    Ok(Reply::json(&view(ctx, changed).await))
}

/// 409 unless `version` is the add-on's own major: a major version never changes in place.
async fn same_major(ctx: &Arc<Context>, id: &str, version: &str) -> Result<(), ApiError> {
    let addon = record(ctx, id).await?;
    let own = crate::addons::engine::major_of(&addon.version);
    if own.is_some() && own == crate::addons::engine::major_of(version) {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::Conflict,
        format!(
            "{} runs {} {}: a major version does not change in place (its data directory \
             would not start); POST /api/addons/{}/upgrade {{\"version\": \"{version}\"}} \
             moves it into a new add-on and keeps this one for a rollback",
            addon.id, addon.kind, addon.version, addon.id
        ),
    ))
}

/// `POST /api/addons/{addonId}/upgrade`: the new add-on (`starting`, `upgradedFrom`), 202.
pub async fn upgrade(ctx: &Arc<Context>, id: &str, request: ApiRequest) -> Result<Reply, ApiError> {
    let body = read_json_object(&request)?;
    let asked: types::UpgradeAddon = serde_json::from_value(serde_json::Value::Object(body))
        .map_err(|error| {
            ApiError::new(
                ErrorCode::InvalidBody,
                format!("{error}; expected {{\"version\"?: \"16\"}}"),
            )
        })?;
    let major = match asked.version.as_deref() {
        None => None,
        Some(version) => Some(
            version
                .parse::<u32>()
                .ok()
                .filter(|major| (1..1000).contains(major) && !version.starts_with('0'))
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::InvalidBody,
                        format!("`version` {version:?} must be a major version such as \"16\""),
                    )
                })?,
        ),
    };
    let addon = record(ctx, id).await?;
    let into = ctx
        .addons
        .start_upgrade(&addon, major)
        .await
        .map_err(addon_error)?;
    Ok(Reply::json(&view(ctx, into).await))
}

/// `POST /api/addons/{addonId}/rollback`: back to the add-on this one was upgraded from;
/// the links move back to it, this one stops. This add-on as it is, 202.
pub async fn rollback(ctx: &Arc<Context>, id: &str) -> Result<Reply, ApiError> {
    let addon = record(ctx, id).await?;
    let kept = ctx
        .addons
        .start_rollback(&addon)
        .await
        .map_err(addon_error)?;
    Ok(Reply::json(&view(ctx, kept).await))
}

pub async fn logs(ctx: &Arc<Context>, id: &str, request: &ApiRequest) -> Result<Reply, ApiError> {
    let query = super::logs::parse_query(request.uri().query())?;
    let addon = record(ctx, id).await?;
    let hub = ctx.hub.clone();
    let key = addon.id.clone();
    let (lines, has_more) = ctx
        .store
        .call(move |_| hub.read(&key, query.since, query.limit, query.stream))
        .await?;
    let next_since = lines.last().map(|l| l.seq).unwrap_or(query.since);
    Ok(Reply::json(&types::AddonLogPage {
        addon_id: addon.id,
        logs: lines,
        next_since,
        has_more,
    }))
}

/// Live until the add-on is deleted (or the client goes).
pub async fn stream(ctx: &Arc<Context>, id: &str, request: &ApiRequest) -> Result<Reply, ApiError> {
    let (query, since) = super::logs::stream_query(request)?;
    let addon = record(ctx, id).await?;
    Ok(super::logs::event_stream(
        ctx.hub.clone(),
        addon.id,
        since,
        query.stream,
        false,
        None,
    ))
}
