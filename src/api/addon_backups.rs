//! An add-on's backups and restores (issue 34): `POST/GET /api/addons/{addonId}/backups`,
//! `GET …/backups/{backupId}`, `POST …/backups/{backupId}/verify` (prove it again: a file
//! that changed since is `failed`), `POST /api/addons/{addonId}/restore` (a backup, or a
//! point in time for a PITR add-on). The work is the
//! `addons` module's (`backup.rs`, `restore.rs`); this file checks bodies and shapes answers.

use std::sync::Arc;

use super::addons::{addon_error, record, record_kept, view};
use super::json::read_json_object;
use super::reply::Reply;
use super::{types, ApiError, ApiRequest, Context, ErrorCode};
use crate::addons::RestoreTarget;
use crate::store::addon_backups::{AddonBackupRecord, BackupKind, BackupState};

/// `POST /api/addons/{addonId}/backups` → 202, the backup (`running`).
pub async fn create(ctx: &Arc<Context>, id: &str) -> Result<Reply, ApiError> {
    let addon = record(ctx, id).await?;
    let backup = ctx
        .addons
        .start_backup(&addon, "manual")
        .await
        .map_err(addon_error)?;
    Ok(Reply::json(&backup_view(backup)))
}

pub async fn list(ctx: &Arc<Context>, id: &str, request: &ApiRequest) -> Result<Reply, ApiError> {
    let page = super::paging::parse(request.uri().query())?;
    let (addon, _) = record_kept(ctx, id).await?;
    let backups = ctx.store.call(move |s| s.addon_backups(&addon.id)).await?;
    let (backups, next_cursor) = super::paging::paginate(
        backups,
        |backup| (backup.created_ms, backup.id.clone()),
        super::paging::Order::NewestFirst,
        &page,
    );
    Ok(Reply::json(&types::AddonBackupList {
        backups: backups.into_iter().map(backup_view).collect(),
        next_cursor,
    }))
}

/// The backup `backup_id` of the add-on `id` (404 for another add-on's).
async fn backup_record(
    ctx: &Context,
    id: &str,
    backup_id: &str,
) -> Result<AddonBackupRecord, ApiError> {
    let key = backup_id.to_owned();
    ctx.store
        .call(move |s| s.addon_backup(&key))
        .await?
        .filter(|backup| backup.addon_id == id)
        .ok_or_else(|| ApiError::not_found(format!("add-on {id} has no backup {backup_id:?}")))
}

pub async fn get(ctx: &Arc<Context>, id: &str, backup_id: &str) -> Result<Reply, ApiError> {
    let (addon, _) = record_kept(ctx, id).await?;
    let backup = backup_record(ctx, &addon.id, backup_id).await?;
    Ok(Reply::json(&backup_view(backup)))
}

/// `POST …/backups/{backupId}/verify` → 202, the backup (`verifying`).
pub async fn verify(ctx: &Arc<Context>, id: &str, backup_id: &str) -> Result<Reply, ApiError> {
    let addon = record(ctx, id).await?;
    let backup = backup_record(ctx, &addon.id, backup_id).await?;
    if !matches!(backup.state, BackupState::Ok) {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "backup {backup_id} is {}: only a finished, good backup is verified again",
                state_word(backup.state)
            ),
        ));
    }
    let backup = ctx
        .addons
        .start_verify(&addon, backup)
        .await
        .map_err(addon_error)?;
    Ok(Reply::json(&backup_view(backup)))
}

/// `POST /api/addons/{addonId}/restore` → 202, the add-on restored into (`starting`): from
/// a backup (`backupId`), or as it was at a moment (`pointInTime`, a new add-on only).
pub async fn restore(ctx: &Arc<Context>, id: &str, request: ApiRequest) -> Result<Reply, ApiError> {
    let body = read_json_object(&request)?;
    let expected = "expected {\"backupId\" | \"pointInTime\", \"target\": \"new\" | \"in-place\"}";
    let asked: types::RestoreAddon = serde_json::from_value(serde_json::Value::Object(body))
        .map_err(|error| ApiError::new(ErrorCode::InvalidBody, format!("{error}; {expected}")))?;
    let target = match asked.target.as_str() {
        "new" => RestoreTarget::New,
        "in-place" => RestoreTarget::InPlace,
        other => {
            return Err(ApiError::new(
                ErrorCode::InvalidBody,
                format!("`target` {other:?} must be \"new\" or \"in-place\""),
            ))
        }
    };
    let (addon, deleted) = record_kept(ctx, id).await?;
    if deleted && (target == RestoreTarget::InPlace || asked.point_in_time.is_some()) {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "{id} was deleted: a kept backup restores into a new add-on (`backupId`, \
                 `target`: \"new\")"
            ),
        ));
    }
    let into = match (asked.backup_id, asked.point_in_time) {
        (Some(backup_id), None) => {
            let backup = backup_record(ctx, &addon.id, &backup_id).await?;
            if backup.kind == BackupKind::Base {
                return Err(ApiError::new(
                    ErrorCode::Conflict,
                    format!(
                        "{backup_id} is a base backup: it restores by `pointInTime` (any moment \
                         from its end on); name a logical backup, or a moment"
                    ),
                ));
            }
            ctx.addons.start_restore(&addon, &backup, target).await
        }
        (None, Some(moment)) => {
            let at_ms = point_in_time(&moment)?;
            if target == RestoreTarget::InPlace {
                return Err(ApiError::new(
                    ErrorCode::Conflict,
                    "a point-in-time restore makes a new add-on (`target`: \"new\"): check it, \
                     then link it in this one's place; in place would discard everything after \
                     the moment with no way back",
                ));
            }
            ctx.addons.start_pitr_restore(&addon, at_ms).await
        }
        // The schema cannot say "exactly one of": a body it allows with neither or both is
        // 409, like the other choices the schema leaves open.
        _ => {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("name either `backupId` or `pointInTime`; {expected}"),
            ))
        }
    };
    let into = into.map_err(addon_error)?;
    Ok(Reply::json(&view(ctx, into).await))
}

/// An RFC 3339 moment (any offset) as ms since the epoch.
fn point_in_time(text: &str) -> Result<u64, ApiError> {
    let invalid = |why: String| {
        ApiError::new(
            ErrorCode::InvalidBody,
            format!("`pointInTime` {text:?} must be an RFC 3339 moment ({why})"),
        )
    };
    // The schema's pattern, checked as `usage/history` checks it: outside it, 400.
    if super::history::parse_time(text).is_none() {
        return Err(invalid(
            "such as 2026-11-27T10:00:00Z, seconds and Z or an offset".into(),
        ));
    }
    // Within the pattern, a moment that does not exist (February 31st) or lies before 1970
    // cannot be in any add-on's window: 409, as a moment outside it is.
    let outside = |why: String| {
        ApiError::new(
            ErrorCode::Conflict,
            format!("`pointInTime` {text:?} is no moment a recovery can reach ({why})"),
        )
    };
    let moment: jiff::Timestamp = text
        .parse()
        .map_err(|e: jiff::Error| outside(e.to_string()))?;
    u64::try_from(moment.as_millisecond()).map_err(|_| outside("before 1970".into()))
}

fn state_word(state: BackupState) -> &'static str {
    match state {
        BackupState::Running => "running",
        BackupState::Verifying => "verifying",
        BackupState::Ok => "ok",
        BackupState::Failed => "failed",
    }
}

fn backup_view(backup: AddonBackupRecord) -> types::AddonBackup {
    types::AddonBackup {
        id: backup.id,
        addon_id: backup.addon_id,
        kind: backup.kind,
        trigger: backup.trigger,
        state: backup.state,
        at: crate::ids::rfc3339(backup.created_ms),
        bytes: backup.bytes,
        sha256: backup.sha256,
        verified_at: backup.verified_ms.map(crate::ids::rfc3339),
        check: backup.check.map(|tables| types::BackupCheck { tables }),
        error: backup.error,
    }
}

/// `GET /api/addons/{addonId}/export[?backupId=bak_…]`: a good backup's file (a new one,
/// taken and proven, when none is named), `application/octet-stream`, with its id and
/// SHA-256 in `X-Slipway-Backup` and `X-Slipway-Sha256`.
pub async fn export(ctx: &Arc<Context>, id: &str, request: &ApiRequest) -> Result<Reply, ApiError> {
    let mut wanted = None;
    for pair in request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("backupId", value)) if !value.is_empty() => wanted = Some(value.to_owned()),
            _ => {
                return Err(ApiError::new(
                    ErrorCode::InvalidQuery,
                    format!("{pair:?}: the query takes backupId (a backup of this add-on)"),
                ))
            }
        }
    }
    let (addon, deleted) = record_kept(ctx, id).await?;
    let backup = match wanted {
        Some(backup_id) => Some(backup_record(ctx, &addon.id, &backup_id).await?),
        None if deleted => {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("{id} was deleted: export one of its kept backups (?backupId=bak_…)"),
            ))
        }
        None => None,
    };
    let (backup, path) = ctx
        .addons
        .export(&addon, backup)
        .await
        .map_err(addon_error)?;
    let file = tokio::fs::File::open(&path).await.map_err(|error| {
        ApiError::new(
            ErrorCode::Conflict,
            format!("the file of backup {} cannot be read: {error}", backup.id),
        )
    })?;
    let stream = tokio_util::io::ReaderStream::new(file);
    let body = http_body_util::StreamBody::new(futures_util::StreamExt::map(stream, |chunk| {
        chunk
            .map(hyper::body::Frame::data)
            .map_err(|error| Box::new(error) as crate::http_util::BodyError)
    }));
    let response = http::Response::builder()
        .status(http::StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/octet-stream")
        .header(http::header::CONTENT_LENGTH, backup.bytes)
        .header(
            http::header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{}-{}\"", addon.id, backup.file),
        )
        .header("x-slipway-backup", backup.id.as_str())
        .header("x-slipway-sha256", backup.sha256.as_str())
        .body(http_body_util::BodyExt::boxed(body))
        .map_err(ApiError::internal)?;
    Ok(Reply::Whole(response))
}

/// `PUT /api/addons/{addonId}/import` (the file as the body) → 202, the backup it became
/// (`verifying`); restored in place once proven.
pub async fn import(ctx: &Arc<Context>, id: &str, request: ApiRequest) -> Result<Reply, ApiError> {
    let upload = request
        .extensions()
        .get::<Arc<super::spool::Spooled>>()
        .cloned()
        .ok_or_else(|| ApiError::internal("the upload was not spooled"))?;
    if upload.bytes == 0 {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "the body is empty: send a `pg_dump -Fc` file, SQL text, or a Redis RDB",
        ));
    }
    let addon = record(ctx, id).await?;
    let backup = ctx
        .addons
        .start_import(&addon, &upload.path)
        .await
        .map_err(addon_error)?;
    Ok(Reply::json(&backup_view(backup)))
}
