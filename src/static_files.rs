//! Static serving of a static-mode deployment's output directory (owned by the static/proxy
//! work; see issue 3). Loaded into memory at deploy time; the router calls `serve`.

use std::path::Path;

use http::{Request, Response};

use crate::http_util::Body;

/// A deployment's output, loaded and ready to serve.
pub struct StaticSite {}

impl StaticSite {
    /// Loads every file under `root` (content types, ETags and precompressed variants ready).
    pub fn load(_root: &Path) -> std::io::Result<StaticSite> {
        Err(std::io::Error::other("static serving is not built yet"))
    }

    /// Answers one request (GET/HEAD; conditional and range requests included).
    pub fn serve<B>(&self, _request: &Request<B>) -> Response<Body> {
        unreachable!("StaticSite cannot be constructed yet")
    }
}
