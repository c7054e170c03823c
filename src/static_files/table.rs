//! A loaded site's files as one compact table: the request paths concatenated in one string,
//! sorted, with a fixed-size record per file; the header text (ETags, `Last-Modified` dates,
//! content types) in one shared buffer the records point into. Built by `load.rs`, read by
//! `StaticSite::serve` and `respond.rs`.
//!
//! A site of many files holds no allocation per file except a file's bytes (in memory) or
//! its promotion state (served from disk); a response's header values are slices of the
//! shared buffer, so building them copies nothing. Directory indexes, `/dir` → `/dir/` and
//! clean URLs are answered by looking up the path with a suffix, not by extra entries.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderValue;

use super::promote::DiskFile;

/// A file's position in its site's table.
pub(super) type FileId = u32;

/// What a request path leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    File(FileId),
    /// A directory with an `index.html`, asked for without its trailing slash.
    AddSlash,
}

/// A range of the table's header text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Text {
    start: u32,
    len: u32,
}

/// `Cache-Control` by kind of file (see `load::cache_control`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CacheControl {
    NoCache,
    Immutable,
    MustRevalidate,
}

impl CacheControl {
    pub fn header(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            CacheControl::NoCache => "no-cache",
            CacheControl::Immutable => "public, max-age=31536000, immutable",
            CacheControl::MustRevalidate => "public, max-age=0, must-revalidate",
        })
    }
}

/// One encoding of a file's content.
pub(super) struct Representation {
    pub content: Content,
    pub len: u64,
    pub etag: Text,
}

pub(super) enum Content {
    Memory(Bytes),
    /// Read from disk on each request until it turns hot (see `promote.rs`).
    Disk(Arc<DiskFile>),
}

/// One servable file.
pub(super) struct FileRecord {
    pub identity: Representation,
    /// Seconds since the epoch of the file's mtime (the precision of HTTP dates).
    pub modified_seconds: u64,
    pub content_type: Text,
    pub last_modified: Text,
    pub cache_control: CacheControl,
    /// Where the file's request path ends in `FileTable::paths` (it starts where the
    /// previous one ends).
    path_end: u32,
    /// The `.gz` and `.br` siblings, [`NONE`] when there is none.
    gzip: FileId,
    brotli: FileId,
}

const NONE: FileId = FileId::MAX;

pub(super) struct FileTable {
    /// The output directory (canonical); files on disk are read under it.
    root: Box<Path>,
    /// Every file's request path, in `records` order.
    paths: Box<str>,
    /// Sorted by request path.
    records: Box<[FileRecord]>,
    /// ETags, dates and content types; dates and content types are stored once each.
    text: Bytes,
    /// Files whose bytes are under another name inside the root (a symlink's target), by
    /// id, with that name relative to the root.
    targets: Box<[(FileId, Box<str>)]>,
}

impl FileTable {
    /// What `path` answers: the file of that name, else for `/dir/` its `index.html`, for
    /// `/dir` a redirect to `/dir/` when that has an index, else `/name` → `name.html`.
    pub fn route(&self, path: &str) -> Option<Route> {
        if let Some(id) = self.find(path, "") {
            return Some(Route::File(id));
        }
        if path.ends_with('/') {
            return self.find(path, "index.html").map(Route::File);
        }
        if self.find(path, "/index.html").is_some() {
            return Some(Route::AddSlash);
        }
        self.find(path, ".html").map(Route::File)
    }

    /// The file named exactly `path`.
    pub fn file(&self, path: &str) -> Option<FileId> {
        self.find(path, "")
    }

    pub fn record(&self, id: FileId) -> &FileRecord {
        &self.records[id as usize]
    }

    pub fn records(&self) -> impl Iterator<Item = &FileRecord> {
        self.records.iter()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// The precompressed siblings of a file: brotli, gzip.
    pub fn encodings(&self, record: &FileRecord) -> (Option<FileId>, Option<FileId>) {
        let sibling = |id: FileId| (id != NONE).then_some(id);
        (sibling(record.brotli), sibling(record.gzip))
    }

    pub fn text(&self, text: Text) -> &[u8] {
        &self.text[text.start as usize..(text.start + text.len) as usize]
    }

    /// A header value sharing the table's text (no copy).
    pub fn header(&self, text: Text) -> HeaderValue {
        let range = text.start as usize..(text.start + text.len) as usize;
        HeaderValue::from_maybe_shared(self.text.slice(range))
            .expect("the table holds valid header text only")
    }

    /// Where a file's bytes are on disk.
    pub fn disk_path(&self, id: FileId) -> PathBuf {
        let relative = match self
            .targets
            .binary_search_by_key(&id, |(target, _)| *target)
        {
            Ok(at) => &*self.targets[at].1,
            Err(_) => self.path(id).trim_start_matches('/'),
        };
        self.root.join(relative)
    }

    fn path(&self, id: FileId) -> &str {
        let start = match id {
            0 => 0,
            _ => self.records[id as usize - 1].path_end as usize,
        };
        &self.paths[start..self.records[id as usize].path_end as usize]
    }

    /// Binary search for the file named `path` followed by `suffix`, without joining them.
    fn find(&self, path: &str, suffix: &str) -> Option<FileId> {
        let (mut low, mut high) = (0, self.records.len());
        while low < high {
            let middle = (low + high) / 2;
            match compare_joined(self.path(middle as FileId), path, suffix) {
                Ordering::Less => low = middle + 1,
                Ordering::Greater => high = middle,
                Ordering::Equal => return Some(middle as FileId),
            }
        }
        None
    }
}

/// `key` against `path` + `suffix`, bytewise (the order of `str`).
fn compare_joined(key: &str, path: &str, suffix: &str) -> Ordering {
    let (key, path) = (key.as_bytes(), path.as_bytes());
    if key.len() < path.len() {
        return key.cmp(&path[..key.len()]).then(Ordering::Less);
    }
    key[..path.len()]
        .cmp(path)
        .then_with(|| key[path.len()..].cmp(suffix.as_bytes()))
}

/// One file as `load.rs` found it.
pub(super) struct NewFile {
    /// The request path, e.g. `/assets/app.js`.
    pub key: String,
    /// Where its bytes are, relative to the root, when that is not the key (a symlink).
    pub target: Option<String>,
    pub content: Content,
    pub len: u64,
    pub etag: String,
    pub modified_seconds: u64,
    pub last_modified: String,
    pub content_type: String,
    pub cache_control: CacheControl,
}

/// Collects a site's files, then lays them out as a [`FileTable`].
#[derive(Default)]
pub(super) struct TableBuilder {
    files: Vec<NewFile>,
}

impl TableBuilder {
    pub fn add(&mut self, file: NewFile) {
        self.files.push(file);
    }

    pub fn finish(mut self, root: &Path) -> FileTable {
        self.files.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        let mut paths = String::with_capacity(self.files.iter().map(|f| f.key.len()).sum());
        let mut text = Vec::new();
        let mut interned: HashMap<String, Text> = HashMap::new();
        let mut intern = |text: &mut Vec<u8>, value: String| {
            *interned
                .entry(value)
                .or_insert_with_key(|value| push_text(text, value))
        };
        let mut records = Vec::with_capacity(self.files.len());
        let mut targets = Vec::new();
        for (id, file) in self.files.into_iter().enumerate() {
            paths.push_str(&file.key);
            if let Some(target) = file.target {
                targets.push((id as FileId, target.into_boxed_str()));
            }
            records.push(FileRecord {
                identity: Representation {
                    etag: push_text(&mut text, &file.etag),
                    content: file.content,
                    len: file.len,
                },
                modified_seconds: file.modified_seconds,
                content_type: intern(&mut text, file.content_type),
                last_modified: intern(&mut text, file.last_modified),
                cache_control: file.cache_control,
                path_end: u32::try_from(paths.len()).expect("paths fit in 4 GiB"),
                gzip: NONE,
                brotli: NONE,
            });
        }
        let mut table = FileTable {
            root: root.into(),
            paths: paths.into_boxed_str(),
            records: Vec::new().into_boxed_slice(),
            text: Bytes::from(text.into_boxed_slice()),
            targets: targets.into_boxed_slice(),
        };
        table.records = records.into_boxed_slice();
        for id in 0..table.records.len() {
            let path = table.path(id as FileId);
            let gzip = table.find(path, ".gz").unwrap_or(NONE);
            let brotli = table.find(path, ".br").unwrap_or(NONE);
            let record = &mut table.records[id];
            (record.gzip, record.brotli) = (gzip, brotli);
        }
        table
    }
}

fn push_text(text: &mut Vec<u8>, value: &str) -> Text {
    let start = u32::try_from(text.len()).expect("header text fits in 4 GiB");
    text.extend_from_slice(value.as_bytes());
    Text {
        start,
        len: value.len() as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(keys: &[&str]) -> FileTable {
        let mut builder = TableBuilder::default();
        for key in keys {
            builder.add(NewFile {
                key: key.to_string(),
                target: (*key == "/linked.css").then(|| "style.css".to_owned()),
                content: Content::Memory(Bytes::from(key.to_string())),
                len: key.len() as u64,
                etag: format!("\"{}\"", key.len()),
                modified_seconds: 1,
                last_modified: "Thu, 01 Jan 1970 00:00:01 GMT".to_owned(),
                content_type: "text/html; charset=utf-8".to_owned(),
                cache_control: CacheControl::NoCache,
            });
        }
        builder.finish(Path::new("/srv/site"))
    }

    fn served(table: &FileTable, path: &str) -> Option<String> {
        match table.route(path)? {
            Route::File(id) => Some(table.path(id).to_owned()),
            Route::AddSlash => Some("add slash".to_owned()),
        }
    }

    #[test]
    fn paths_directory_indexes_and_clean_urls() {
        let table = table(&[
            "/index.html",
            "/about.html",
            "/docs/index.html",
            "/docs.html",
            "/blog/post.html",
            "/blog/post",
            "/a.html.html",
            "/a.html",
            "/app.js",
        ]);
        assert_eq!(table.len(), 9);
        let cases = [
            ("/", Some("/index.html")),
            ("/index.html", Some("/index.html")),
            ("/index", Some("/index.html")),
            ("/about", Some("/about.html")),
            ("/about.html", Some("/about.html")),
            ("/about/", None),
            // A directory with an index beats `docs.html`.
            ("/docs", Some("add slash")),
            ("/docs/", Some("/docs/index.html")),
            // A file of the exact name beats the clean URL.
            ("/blog/post", Some("/blog/post")),
            ("/blog", None),
            ("/a.html", Some("/a.html")),
            ("/app.js", Some("/app.js")),
            ("/app", None),
            ("/missing", None),
            ("/zzz", None),
            ("/", Some("/index.html")),
        ];
        for (path, expected) in cases {
            assert_eq!(served(&table, path).as_deref(), expected, "{path}");
        }
        assert_eq!(table.file("/about"), None, "rewrites name files exactly");
        assert!(table.file("/about.html").is_some());
    }

    #[test]
    fn an_empty_site_answers_nothing() {
        let table = table(&[]);
        assert_eq!(table.route("/"), None);
        assert_eq!(table.route("/index.html"), None);
    }

    #[test]
    fn siblings_text_and_disk_paths() {
        let table = table(&[
            "/app.js",
            "/app.js.gz",
            "/app.js.br",
            "/linked.css",
            "/x.js.gz",
        ]);
        let app = table.record(table.file("/app.js").unwrap());
        let (brotli, gzip) = table.encodings(app);
        assert_eq!(table.path(brotli.unwrap()), "/app.js.br");
        assert_eq!(table.path(gzip.unwrap()), "/app.js.gz");
        let gz = table.record(table.file("/x.js.gz").unwrap());
        assert!(matches!(table.encodings(gz), (None, None)));

        assert_eq!(table.header(app.identity.etag), "\"7\"");
        assert_eq!(table.text(app.content_type), b"text/html; charset=utf-8");
        // Dates and content types are stored once per site.
        let other = table.record(table.file("/linked.css").unwrap());
        assert_eq!(other.last_modified, app.last_modified);
        assert_eq!(other.content_type, app.content_type);

        let linked = table.file("/linked.css").unwrap();
        assert_eq!(table.disk_path(linked), Path::new("/srv/site/style.css"));
        let app_id = table.file("/app.js").unwrap();
        assert_eq!(table.disk_path(app_id), Path::new("/srv/site/app.js"));
    }

    #[test]
    fn records_stay_small() {
        // A site of 10,000 files holds 10,000 of these: 88 bytes, where the header values,
        // path and sibling boxes they replace took ~750 bytes in ~10 allocations.
        assert!(std::mem::size_of::<FileRecord>() <= 88);
    }

    #[test]
    fn joined_comparison_is_string_order() {
        for (key, path, suffix) in [
            ("/a", "/a", ""),
            ("/a", "/a", ".html"),
            ("/a.html", "/a", ".html"),
            ("/a.html", "/a", ".htm"),
            ("/a.htm", "/a", ".html"),
            ("/ab", "/a", ".html"),
            ("/", "/a", ""),
            ("/b", "/a", "/index.html"),
            ("/a/index.html", "/a/", "index.html"),
        ] {
            let joined = format!("{path}{suffix}");
            assert_eq!(
                compare_joined(key, path, suffix),
                key.cmp(joined.as_str()),
                "{key} vs {joined}"
            );
        }
    }
}
