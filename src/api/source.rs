//! `POST /api/projects/{projectId}/source`: a gzip'd tar upload, validated and stored
//! content-addressed (the same archive twice is kept once).

use super::reply::Reply;
use crate::error_code::ErrorCode;
use std::sync::Arc;

use super::ApiRequest;

use super::projects::{find_or_create, refuse_creation_unless_admin};
use super::{ApiError, Context};
use crate::auth::Caller;
use crate::source::SourceError;
use crate::store::records::SourceRecord;

const ACCEPTED_TYPES: &[&str] = &[
    "application/gzip",
    "application/x-gzip",
    "application/x-tar+gzip",
    "application/octet-stream",
];

pub async fn upload(
    ctx: &Arc<Context>,
    caller: &Caller,
    id_or_slug: &str,
    request: ApiRequest,
) -> Result<Reply, ApiError> {
    // Before the archive is read and stored.
    refuse_creation_unless_admin(ctx, caller, id_or_slug).await?;
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if !ACCEPTED_TYPES.contains(&content_type.as_str()) {
        return Err(ApiError::new(
            ErrorCode::InvalidContentType,
            format!("upload a .tar.gz with Content-Type: application/gzip (got {content_type:?})"),
        ));
    }
    if !id_or_slug.starts_with("prj_") {
        super::json::validate_slug(id_or_slug, ctx.config.reserved_slug())?;
    }
    let limits = crate::pipeline::source_limits(&ctx.config.limits);
    let archive = request.into_body();
    // The archive is stored, and unpacked later: never into the store's reserve.
    ctx.pipeline
        .workspaces()
        .volumes()
        .check_room(
            &ctx.config.data_dir,
            2 * archive.len() as u64,
            "this upload",
        )
        .map_err(|room| ApiError::new(room.code, room.message))?;
    let sources = ctx.sources.clone();
    let ingest_limits = limits;
    let ingested = tokio::task::spawn_blocking(move || sources.ingest(&archive, &ingest_limits))
        .await
        .map_err(ApiError::internal)?
        .map_err(|error| match error {
            SourceError::InvalidArchive(message) => {
                ApiError::new(ErrorCode::InvalidSourceArchive, message)
            }
            SourceError::TooLarge { .. } => {
                ApiError::new(ErrorCode::PayloadTooLarge, error.to_string())
            }
            other => ApiError::internal(other),
        })?;
    let project = find_or_create(ctx, caller, id_or_slug).await?;
    let record = SourceRecord {
        v: 1,
        id: crate::ids::new_id("src_"),
        project_id: project.id.clone(),
        sha256: ingested.sha256.clone(),
        size_bytes: ingested.size_bytes,
        file_count: ingested.file_count,
        created_ms: crate::ids::now_ms(),
    };
    let stored = record.clone();
    ctx.store.call(move |s| s.put_source(&stored)).await?;
    tracing::info!(project = %project.slug, source = %record.id, sha256 = %record.sha256, "source uploaded");
    Ok(Reply::json(&super::types::SourceUploaded {
        source_id: record.id,
        project_id: project.id,
        sha256: record.sha256,
        size_bytes: record.size_bytes,
        file_count: record.file_count,
    }))
}
