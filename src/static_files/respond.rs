//! Building the response for one file of a [`StaticSite`](super::StaticSite): encoding
//! negotiation, conditional requests (304), single byte ranges (206/416) and bodies from
//! memory or disk. Called by `StaticSite::serve` only.

use std::io::{Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use bytes::Bytes;
use futures_util::TryStreamExt;
use http::header::{
    ACCEPT_ENCODING, ACCEPT_RANGES, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE,
    CONTENT_TYPE, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, LAST_MODIFIED, RANGE, VARY,
    X_CONTENT_TYPE_OPTIONS,
};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use tokio::io::AsyncReadExt;
use tokio_util::io::ReaderStream;

use super::table::{Content, FileId, FileRecord, FileTable, Representation};
use super::StaticSite;
use crate::http_util::{empty, full, Body, BodyError};

/// The response for the site's file `id`, honouring the request's conditional, range and
/// encoding headers.
pub(super) fn file(
    site: &StaticSite,
    id: FileId,
    request: &HeaderMap,
    head: bool,
    status: StatusCode,
) -> Response<Body> {
    let table = &site.files;
    let file = table.record(id);
    let (chosen, encoding) = choose_representation(table, id, request.get(ACCEPT_ENCODING));
    let representation = &table.record(chosen).identity;
    let mut response = Response::new(empty());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    // Sized for every header a file gets here and after (length, request id): a map grown
    // insert by insert reallocates on the seventh.
    *headers = HeaderMap::with_capacity(12);
    headers.insert(ETAG, table.header(representation.etag));
    headers.insert(LAST_MODIFIED, table.header(file.last_modified));
    headers.insert(CACHE_CONTROL, file.cache_control.header());
    if table.encodings(file) != (None, None) {
        headers.insert(VARY, HeaderValue::from_static("Accept-Encoding"));
    }

    // Validators and ranges apply to the file itself, not to an error page made of it.
    let plain_file = status == StatusCode::OK;
    if plain_file && not_modified(table, file, representation, request) {
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        return response;
    }

    headers.insert(CONTENT_TYPE, table.header(file.content_type));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some(encoding) = encoding {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(encoding));
    }

    let total = representation.len;
    let mut range = 0..total;
    if let Some(value) = request
        .get(RANGE)
        .filter(|_| plain_file && range_applies(table, file, representation, request))
    {
        match parse_range(value.as_bytes(), total) {
            RangeRequest::Satisfiable(start, end) => {
                range = start..end;
                *response.status_mut() = StatusCode::PARTIAL_CONTENT;
                let content_range = format!("bytes {start}-{}/{total}", end - 1);
                response
                    .headers_mut()
                    .insert(CONTENT_RANGE, header_value(&content_range));
            }
            RangeRequest::Unsatisfiable => {
                *response.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
                let headers = response.headers_mut();
                headers.insert(CONTENT_RANGE, header_value(&format!("bytes */{total}")));
                headers.insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                headers.remove(CONTENT_ENCODING);
                return response;
            }
            RangeRequest::Ignored => {}
        }
    }

    response
        .headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(range.end - range.start));
    if !head {
        *response.body_mut() = body(site, chosen, range.start, range.end - range.start);
    }
    response
}

/// The build's `404.html`, with status 404 and no conditional or range handling.
pub(super) fn not_found_page(
    site: &StaticSite,
    page: FileId,
    request: &HeaderMap,
    head: bool,
) -> Response<Body> {
    let mut response = file(site, page, request, head, StatusCode::NOT_FOUND);
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Brotli, then gzip, when the file has that sibling and the client accepts it: the file
/// whose bytes to send, and their encoding.
fn choose_representation(
    table: &FileTable,
    id: FileId,
    accept_encoding: Option<&HeaderValue>,
) -> (FileId, Option<&'static str>) {
    let Some(accept_encoding) = accept_encoding.and_then(|value| value.to_str().ok()) else {
        return (id, None);
    };
    let (brotli, gzip) = table.encodings(table.record(id));
    if let Some(brotli) = brotli.filter(|_| accepts(accept_encoding, "br")) {
        return (brotli, Some("br"));
    }
    if let Some(gzip) = gzip.filter(|_| accepts(accept_encoding, "gzip")) {
        return (gzip, Some("gzip"));
    }
    (id, None)
}

/// Whether `Accept-Encoding` admits `coding` with a non-zero quality (`*` included).
fn accepts(accept_encoding: &str, coding: &str) -> bool {
    let mut wildcard = false;
    for item in accept_encoding.split(',') {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or("").trim();
        let quality_zero = parts.any(|parameter| {
            let parameter = parameter.trim();
            let quality = parameter
                .strip_prefix("q=")
                .or_else(|| parameter.strip_prefix("Q="));
            quality.and_then(|quality| quality.trim().parse::<f32>().ok()) == Some(0.0)
        });
        if name.eq_ignore_ascii_case(coding) {
            return !quality_zero;
        }
        if name == "*" {
            wildcard = !quality_zero;
        }
    }
    wildcard
}

/// `If-None-Match` (weak comparison), else `If-Modified-Since`.
fn not_modified(
    table: &FileTable,
    file: &FileRecord,
    representation: &Representation,
    request: &HeaderMap,
) -> bool {
    if let Some(if_none_match) = request.get(IF_NONE_MATCH) {
        let etag = table.text(representation.etag);
        return if_none_match
            .as_bytes()
            .split(|&byte| byte == b',')
            .any(|candidate| {
                let candidate = candidate.trim_ascii();
                candidate == b"*" || candidate.strip_prefix(b"W/").unwrap_or(candidate) == etag
            });
    }
    match request
        .get(IF_MODIFIED_SINCE)
        .and_then(|value| value.to_str().ok())
        .map(httpdate::parse_http_date)
    {
        Some(Ok(since)) => {
            let since = since
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_secs())
                .unwrap_or(0);
            file.modified_seconds <= since
        }
        _ => false,
    }
}

/// `If-Range`: the range applies only when the validator still matches (strongly for ETags).
fn range_applies(
    table: &FileTable,
    file: &FileRecord,
    representation: &Representation,
    request: &HeaderMap,
) -> bool {
    match request.get(IF_RANGE) {
        None => true,
        Some(value) if value.as_bytes().starts_with(b"\"") => {
            value.as_bytes() == table.text(representation.etag)
        }
        Some(value) => value.as_bytes() == table.text(file.last_modified),
    }
}

#[derive(Debug, PartialEq)]
enum RangeRequest {
    /// Half-open byte range `[start, end)`.
    Satisfiable(u64, u64),
    Unsatisfiable,
    /// Malformed or multiple ranges: answer with the whole file.
    Ignored,
}

/// Parses a single `bytes=a-b`, `bytes=a-` or `bytes=-n` range against a length.
fn parse_range(value: &[u8], total: u64) -> RangeRequest {
    let Some(spec) = value
        .strip_prefix(b"bytes=")
        .and_then(|spec| std::str::from_utf8(spec).ok())
    else {
        return RangeRequest::Ignored;
    };
    let spec = spec.trim();
    if spec.contains(',') {
        return RangeRequest::Ignored;
    }
    let Some((first, last)) = spec.split_once('-') else {
        return RangeRequest::Ignored;
    };
    let number = |text: &str| -> Option<u64> {
        let text = text.trim();
        if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        text.parse().ok()
    };
    match (first.trim().is_empty(), last.trim().is_empty()) {
        (true, true) => RangeRequest::Ignored,
        (true, false) => match number(last) {
            Some(0) => RangeRequest::Unsatisfiable,
            Some(_) if total == 0 => RangeRequest::Unsatisfiable,
            Some(suffix) => RangeRequest::Satisfiable(total.saturating_sub(suffix), total),
            None => RangeRequest::Ignored,
        },
        (false, true) => match number(first) {
            Some(start) if start < total => RangeRequest::Satisfiable(start, total),
            Some(_) => RangeRequest::Unsatisfiable,
            None => RangeRequest::Ignored,
        },
        (false, false) => match (number(first), number(last)) {
            (Some(start), Some(end)) if start > end => RangeRequest::Ignored,
            (Some(start), Some(_)) if start >= total => RangeRequest::Unsatisfiable,
            (Some(start), Some(end)) => RangeRequest::Satisfiable(start, end.min(total - 1) + 1),
            _ => RangeRequest::Ignored,
        },
    }
}

/// `len` bytes from `start` of the site's file `id`: from memory (loaded or promoted, which
/// this request may do) or streamed from disk.
fn body(site: &StaticSite, id: FileId, start: u64, len: u64) -> Body {
    let slice = |bytes: &Bytes| full(bytes.slice(start as usize..(start + len) as usize));
    match &site.files.record(id).identity.content {
        Content::Memory(bytes) => slice(bytes),
        Content::Disk(file) => {
            match file.in_memory(site.shared.as_ref(), || site.files.disk_path(id)) {
                Some(bytes) => slice(&bytes),
                None => disk_body(&site.files.disk_path(id), start, len),
            }
        }
    }
}

/// Streams `len` bytes from `start` of a file that did not fit in memory. The open and seek
/// are synchronous (one syscall each on a local file); the reads are not.
fn disk_body(path: &Path, start: u64, len: u64) -> Body {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut file| file.seek(SeekFrom::Start(start)).map(|_| file));
    match opened {
        Ok(file) => {
            let reader = tokio::fs::File::from_std(file).take(len);
            let frames = ReaderStream::with_capacity(reader, 64 * 1024)
                .map_ok(hyper::body::Frame::data)
                .map_err(|error| Box::new(error) as BodyError);
            StreamBody::new(frames).boxed()
        }
        Err(error) => {
            tracing::error!(path = %path.display(), %error, "static site: cannot open a file served from disk");
            let failed: Result<hyper::body::Frame<Bytes>, BodyError> = Err(Box::new(error));
            StreamBody::new(futures_util::stream::iter([failed])).boxed()
        }
    }
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).expect("ASCII digits and separators are a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse() {
        assert_eq!(
            parse_range(b"bytes=0-9", 100),
            RangeRequest::Satisfiable(0, 10)
        );
        assert_eq!(
            parse_range(b"bytes=90-", 100),
            RangeRequest::Satisfiable(90, 100)
        );
        assert_eq!(
            parse_range(b"bytes=-10", 100),
            RangeRequest::Satisfiable(90, 100)
        );
        assert_eq!(
            parse_range(b"bytes=-1000", 100),
            RangeRequest::Satisfiable(0, 100)
        );
        assert_eq!(
            parse_range(b"bytes=50-1000", 100),
            RangeRequest::Satisfiable(50, 100)
        );
        assert_eq!(parse_range(b"bytes=100-", 100), RangeRequest::Unsatisfiable);
        assert_eq!(
            parse_range(b"bytes=100-200", 100),
            RangeRequest::Unsatisfiable
        );
        assert_eq!(parse_range(b"bytes=-0", 100), RangeRequest::Unsatisfiable);
        assert_eq!(parse_range(b"bytes=5-1", 100), RangeRequest::Ignored);
        assert_eq!(parse_range(b"bytes=0-1,5-6", 100), RangeRequest::Ignored);
        assert_eq!(parse_range(b"items=0-1", 100), RangeRequest::Ignored);
        assert_eq!(parse_range(b"bytes=a-b", 100), RangeRequest::Ignored);
    }

    #[test]
    fn accept_encoding_parses() {
        assert!(accepts("gzip, deflate, br", "br"));
        assert!(accepts("gzip;q=0.5", "gzip"));
        assert!(!accepts("gzip;q=0", "gzip"));
        assert!(!accepts("gzip;q=0.000", "gzip"));
        assert!(accepts("*", "br"));
        assert!(!accepts("*, br;q=0", "br"));
        assert!(!accepts("identity", "gzip"));
        assert!(accepts("GZIP", "gzip"));
    }
}
