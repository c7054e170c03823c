//! Bodies too large to hold in memory (`RequestBody::Upload`: an add-on's import): written to
//! a file under `<data_dir>/tmp` as they arrive, bounded by the route's limit, and handed to
//! the handler as a [`Spooled`] file in the request's extensions. The file is removed when
//! the last handle goes, unless the handler moved it away first.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::Request;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::io::AsyncWriteExt;

use super::{ApiError, ErrorCode};

/// An uploaded body on disk.
#[derive(Debug)]
pub struct Spooled {
    pub path: PathBuf,
    pub bytes: u64,
}

impl Drop for Spooled {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes the body to a new file in `dir`, at most `max` bytes (413 beyond).
pub async fn spool(
    request: Request<Incoming>,
    max: u64,
    dir: &Path,
) -> Result<Arc<Spooled>, ApiError> {
    let too_large = || {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("request body is larger than the limit of {max} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large());
    }
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(ApiError::internal)?;
    let path = dir.join(format!("upload-{}", crate::ids::new_id("")));
    let mut spooled = Spooled { path, bytes: 0 };
    let mut file = tokio::fs::File::create(&spooled.path)
        .await
        .map_err(ApiError::internal)?;
    let mut body = request.into_body();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| {
            ApiError::new(
                ErrorCode::InvalidBody,
                format!("could not read the request body: {error}"),
            )
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        spooled.bytes += data.len() as u64;
        if spooled.bytes > max {
            return Err(too_large());
        }
        file.write_all(&data).await.map_err(ApiError::internal)?;
    }
    file.flush().await.map_err(ApiError::internal)?;
    Ok(Arc::new(spooled))
}
