//! Static serving of a static-mode deployment's output directory.
//!
//! The pipeline calls [`StaticSite::load`] once per deployment, on a blocking thread (it reads
//! the whole tree), and puts the result in the route table; the router calls
//! [`StaticSite::serve`] for every request to that app.
//!
//! What a loaded site holds:
//! - every servable file with its content type, strong `ETag`, `Last-Modified` and
//!   `Cache-Control` computed once, plus its precompressed `.br` / `.gz` siblings, in one
//!   compact table (`table.rs`: no allocation per file besides its content);
//! - the bytes themselves, in memory, for files up to [`StaticLimits::max_file_in_memory`]
//!   while the total stays under [`StaticLimits::memory_budget`] (smallest files first). Other
//!   files are streamed from disk on demand (their path is the request path under the
//!   root); their ETag comes from size and mtime instead of a content hash.
//!
//! Architecture invariants:
//! - Request handling never walks or stats the filesystem: a request path is looked up in a
//!   table built at load time, so `..`, encoded separators and symlinks cannot reach anything
//!   the load did not accept. Traversal attempts are refused with 400 all the same.
//! - Symlinks are followed at load time only when their target lies inside the output
//!   directory; directory symlinks are never followed (no loops).
//! - Dot-files and dot-directories (`.env`, `.git`) are never served, except `.well-known`.

mod budget;
mod load;
mod promote;
mod respond;
mod rules;
mod table;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::path::Path;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, LOCATION};
use http::{HeaderValue, Method, Request, Response, StatusCode};

pub use budget::MemoryBudget;

use table::{Content, FileId, Route};

use crate::http_util::{empty, Body};
use crate::pages::VisitorPage;

/// Bounds applied while loading a site.
#[derive(Clone, Debug)]
pub struct StaticLimits {
    /// Total bytes held in memory for one site (all representations together).
    pub memory_budget: u64,
    /// Files larger than this are always streamed from disk.
    pub max_file_in_memory: u64,
    /// A site with more servable files than this fails to load.
    pub max_files: usize,
    /// Directories nested deeper than this are not descended into.
    pub max_depth: usize,
}

impl StaticLimits {
    /// The limits [`StaticSite::load`] uses: 512 MiB in memory, 8 MiB per in-memory file,
    /// 200,000 files, 32 levels of directories.
    pub const STANDARD: StaticLimits = StaticLimits {
        memory_budget: 512 * 1024 * 1024,
        max_file_in_memory: 8 * 1024 * 1024,
        max_files: 200_000,
        max_depth: 32,
    };
}

/// A deployment's output, loaded and ready to serve.
pub struct StaticSite {
    files: table::FileTable,
    not_found: Option<FileId>,
    bytes_in_memory: u64,
    /// The site's `_redirects`, in file order.
    redirects: Vec<rules::Redirect>,
    /// The site's `_headers`.
    header_rules: Vec<rules::HeaderRule>,
    /// `/index.html` when the site has no `404.html`: single-page apps route on the client,
    /// so an extension-less path no file answers gets it with 200.
    spa_index: Option<FileId>,
    /// The daemon-wide budget `bytes_in_memory` and promoted files were taken from, given
    /// back on drop.
    shared: Option<MemoryBudget>,
}

impl Drop for StaticSite {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            shared.give_back(self.bytes_in_memory);
            for record in self.files.records() {
                if let Content::Disk(disk) = &record.identity.content {
                    disk.evict(shared);
                }
            }
        }
    }
}

impl StaticSite {
    /// Loads every servable file under `root` with [`StaticLimits::STANDARD`]. Blocking: call
    /// it from `spawn_blocking`.
    pub fn load(root: &Path) -> std::io::Result<StaticSite> {
        StaticSite::load_with_limits(root, &StaticLimits::STANDARD)
    }

    /// Loads every servable file under `root` within `limits`. Blocking.
    pub fn load_with_limits(root: &Path, limits: &StaticLimits) -> std::io::Result<StaticSite> {
        load::load(root, limits, None)
    }

    /// Loads a site whose in-memory files come out of the daemon-wide `budget` (what does not
    /// fit is served from disk). Blocking.
    pub fn load_shared(root: &Path, budget: &MemoryBudget) -> std::io::Result<StaticSite> {
        load::load(root, &StaticLimits::STANDARD, Some(budget))
    }

    /// Answers one request: GET and HEAD, conditional (`If-None-Match`, `If-Modified-Since`)
    /// and single-range requests included. Never blocks, except for one `open` of a file
    /// that did not fit in memory.
    pub fn serve<B>(&self, request: &Request<B>) -> Response<Body> {
        let method = request.method();
        let head = method == Method::HEAD;
        if method != Method::GET && !head {
            return head_only(VisitorPage::MethodNotAllowed.response(), head);
        }
        let raw_path = request.uri().path();
        let path = match decode_path(raw_path) {
            Ok(path) => path,
            Err(PathRefused::Traversal) => {
                return head_only(VisitorPage::BadRequest.response(), head)
            }
            Err(PathRefused::NotUtf8) => return self.not_found(request, head),
        };
        if let Some(response) = self.redirect(&path, request, head, true) {
            return self.with_headers(&path, response);
        }
        let response = match self.files.route(&path) {
            Some(Route::File(file)) => {
                respond::file(self, file, request.headers(), head, StatusCode::OK)
            }
            Some(Route::AddSlash) => return add_slash(raw_path, request.uri().query(), head),
            None => match self.redirect(&path, request, head, false) {
                Some(response) => response,
                None => match self.spa_index {
                    Some(index) if !path.rsplit('/').next().unwrap_or("").contains('.') => {
                        respond::file(self, index, request.headers(), head, StatusCode::OK)
                    }
                    _ => return self.not_found(request, head),
                },
            },
        };
        self.with_headers(&path, response)
    }

    /// The first `_redirects` rule (forced ones, or the others) that answers `path`.
    fn redirect<B>(
        &self,
        path: &str,
        request: &Request<B>,
        head: bool,
        forced: bool,
    ) -> Option<Response<Body>> {
        for rule in self.redirects.iter().filter(|rule| rule.force == forced) {
            let Some(target) = rule.target(path) else {
                continue;
            };
            if rule.is_rewrite() {
                let file_path = target.split('?').next().unwrap_or("");
                if let Some(file) = self.files.file(file_path) {
                    return Some(respond::file(
                        self,
                        file,
                        request.headers(),
                        head,
                        rule.status,
                    ));
                }
                continue;
            }
            let location = match request.uri().query() {
                Some(query) if !target.contains('?') => format!("{target}?{query}"),
                _ => target,
            };
            let mut response = plain(rule.status, "Redirect", head);
            if let Ok(value) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(LOCATION, value);
            }
            return Some(response);
        }
        None
    }

    /// Adds the `_headers` of every block whose pattern matches `path`. A header the site
    /// sets replaces the server's own (`Cache-Control`, say); several blocks setting the same
    /// one add up.
    fn with_headers(&self, path: &str, mut response: Response<Body>) -> Response<Body> {
        let matching = || {
            self.header_rules
                .iter()
                .filter(|rule| rule.applies_to(path))
        };
        for (index, rule) in matching().enumerate() {
            for (position, (name, value)) in rule.headers.iter().enumerate() {
                let set_before = matching().take(index + 1).enumerate().any(|(i, earlier)| {
                    let upto = if i == index {
                        position
                    } else {
                        earlier.headers.len()
                    };
                    earlier.headers[..upto].iter().any(|(n, _)| n == name)
                });
                let headers = response.headers_mut();
                match set_before {
                    true => headers.append(name.clone(), value.clone()),
                    false => headers.insert(name.clone(), value.clone()).is_some(),
                };
            }
        }
        response
    }

    /// Whether `path`'s plain content is served from memory now (loaded or promoted).
    #[cfg(test)]
    fn serves_from_memory(&self, path: &str) -> bool {
        match self.files.file(path) {
            Some(file) => match &self.files.record(file).identity.content {
                Content::Memory(_) => true,
                Content::Disk(disk) => disk.is_promoted(),
            },
            None => false,
        }
    }

    /// Bytes of file content held in memory.
    pub fn bytes_in_memory(&self) -> u64 {
        self.bytes_in_memory
    }

    fn not_found<B>(&self, request: &Request<B>, head: bool) -> Response<Body> {
        match self.not_found {
            Some(page) => respond::not_found_page(self, page, request.headers(), head),
            None => head_only(VisitorPage::NotFound.response(), head),
        }
    }
}

#[derive(Debug, PartialEq)]
enum PathRefused {
    /// `..` or `.` segments, NUL bytes or a path not starting with `/`.
    Traversal,
    NotUtf8,
}

/// Percent-decodes a request path and refuses anything that tries to leave the root.
fn decode_path(raw: &str) -> Result<Cow<'_, str>, PathRefused> {
    if !raw.starts_with('/') {
        return Err(PathRefused::Traversal);
    }
    let decoded: Cow<'_, str> = if raw.contains('%') {
        let bytes =
            crate::http_util::percent_decode(raw.as_bytes()).ok_or(PathRefused::Traversal)?;
        Cow::Owned(String::from_utf8(bytes).map_err(|_| PathRefused::NotUtf8)?)
    } else {
        Cow::Borrowed(raw)
    };
    let refused = decoded.contains('\0')
        || decoded.contains('\\')
        || decoded
            .split('/')
            .any(|segment| segment == ".." || segment == ".");
    if refused {
        return Err(PathRefused::Traversal);
    }
    Ok(decoded)
}

/// 308 from `/dir` to `/dir/`, keeping the query. `raw_path` was validated and is a known
/// route, so it never starts with `//` (no open redirect).
fn add_slash(raw_path: &str, query: Option<&str>, head: bool) -> Response<Body> {
    let location = match query {
        Some(query) => format!("{raw_path}/?{query}"),
        None => format!("{raw_path}/"),
    };
    let mut response = plain(StatusCode::PERMANENT_REDIRECT, "Permanent Redirect", head);
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(LOCATION, value);
    }
    response
}

/// A HEAD request gets the page's status and headers without its body.
fn head_only(mut response: Response<Body>, head: bool) -> Response<Body> {
    if head {
        *response.body_mut() = empty();
    }
    response
}

/// A short text response for statuses that need no page.
fn plain(status: StatusCode, text: &'static str, head: bool) -> Response<Body> {
    let body = if head {
        empty()
    } else {
        crate::http_util::full(Bytes::from_static(text.as_bytes()))
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
