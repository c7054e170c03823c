//! Loading a deployment's output directory into a [`StaticSite`]: the walk (symlink and
//! dot-file rules), the memory budget, ETags, content types and the route map. Called by
//! [`StaticSite::load_with_limits`] only.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::promote::DiskFile;
use super::table::{CacheControl, Content, FileTable, NewFile, TableBuilder};
use super::{StaticLimits, StaticSite};

pub(super) fn load(
    root: &Path,
    limits: &StaticLimits,
    shared: Option<&super::MemoryBudget>,
) -> io::Result<StaticSite> {
    let root = fs::canonicalize(root)?;
    if !fs::metadata(&root)?.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a directory", root.display()),
        ));
    }
    let mut found = Vec::new();
    walk(&root, &root, "", 0, limits, &mut found)?;
    // The site's rules are read, not served (nor held in memory).
    let mut rules = |name: &str| match found.iter().position(|file| file.key[1..] == *name) {
        Some(at) => {
            found.swap_remove(at);
            read_rules(&root.join(name))
        }
        None => String::new(),
    };
    let redirects = super::rules::parse_redirects(&rules("_redirects"));
    let header_rules = super::rules::parse_headers(&rules("_headers"));

    let (files, bytes_in_memory) = file_table(&root, found, limits, shared)?;
    let not_found = files.file("/404.html");
    let spa_index = match not_found {
        None => files.file("/index.html"),
        Some(_) => None,
    };
    tracing::debug!(root = %root.display(), files = files.len(), bytes_in_memory, redirects = redirects.len(), "static site loaded");
    Ok(StaticSite {
        files,
        not_found,
        bytes_in_memory,
        redirects,
        header_rules,
        spa_index,
        shared: shared.cloned(),
    })
}

/// The site's files as one table, and the bytes of it held in memory: the smallest files
/// are read into memory while the site's budget (and the loading half of the `shared` one)
/// lasts, so that an overflow pushes only the big ones to disk.
fn file_table(
    root: &Path,
    mut found: Vec<Found>,
    limits: &StaticLimits,
    shared: Option<&super::MemoryBudget>,
) -> io::Result<(FileTable, u64)> {
    found.sort_by(|a, b| a.len.cmp(&b.len).then_with(|| a.key.cmp(&b.key)));
    let mut budget = limits.memory_budget;
    let mut table = TableBuilder::default();
    for file in found {
        let in_memory = file.len <= limits.max_file_in_memory
            && file.len <= budget
            && shared.is_none_or(|shared| shared.try_take_below(file.len, shared.total() / 2));
        let (content, etag) = if in_memory {
            budget -= file.len;
            let read = read_whole(&file.disk_path(root), file.len);
            let bytes = match read {
                Ok(bytes) => bytes,
                Err(error) => {
                    if let Some(shared) = shared {
                        shared.give_back(limits.memory_budget - budget);
                    }
                    return Err(error);
                }
            };
            let etag = content_etag(&bytes);
            (Content::Memory(bytes), etag)
        } else {
            let etag = metadata_etag(file.len, file.modified);
            (Content::Disk(Arc::new(DiskFile::new(file.len))), etag)
        };
        table.add(file.into_new_file(content, etag));
    }
    Ok((table.finish(root), limits.memory_budget - budget))
}

/// A rules file (`_redirects`, `_headers`), at most 1 MiB of it; the walk accepted it, so
/// it is a regular file inside the root.
fn read_rules(path: &Path) -> String {
    use std::io::Read;
    let mut text = String::new();
    if let Ok(file) = fs::File::open(path) {
        let _ = file.take(1 << 20).read_to_string(&mut text);
    }
    text
}

/// A servable file found by the walk.
struct Found {
    /// The request path that names it, e.g. `/assets/app.js`.
    key: String,
    /// For a symlink, its target's path relative to the root (no symlinks in it).
    target: Option<String>,
    len: u64,
    modified: SystemTime,
}

impl Found {
    fn disk_path(&self, root: &Path) -> PathBuf {
        root.join(self.target.as_deref().unwrap_or(&self.key[1..]))
    }

    /// The file's entry in the table, with its headers' values worked out once.
    fn into_new_file(self, content: Content, etag: String) -> NewFile {
        let content_type = content_type(&self.key);
        NewFile {
            cache_control: cache_control(&self.key, &content_type),
            len: match &content {
                Content::Memory(bytes) => bytes.len() as u64,
                Content::Disk(_) => self.len,
            },
            content,
            etag,
            modified_seconds: self
                .modified
                .duration_since(UNIX_EPOCH)
                .map(|elapsed| elapsed.as_secs())
                .unwrap_or(0),
            last_modified: httpdate::fmt_http_date(self.modified),
            content_type,
            key: self.key,
            target: self.target,
        }
    }
}

fn walk(
    root: &Path,
    directory: &Path,
    prefix: &str,
    depth: usize,
    limits: &StaticLimits,
    found: &mut Vec<Found>,
) -> io::Result<()> {
    if depth > limits.max_depth {
        tracing::warn!(directory = %directory.display(), "static site: directory too deep, skipped");
        return Ok(());
    }
    for entry in fs::read_dir(directory)? {
        let entry = entry?;
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else {
            tracing::warn!(name = ?file_name, "static site: file name is not UTF-8, skipped");
            continue;
        };
        if name.starts_with('.') && !(depth == 0 && name == ".well-known") {
            continue;
        }
        let key = format!("{prefix}/{name}");
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            walk(root, &entry.path(), &key, depth + 1, limits, found)?;
        } else if file_type.is_file() {
            let metadata = entry.metadata()?;
            found.push(Found {
                key,
                target: None,
                len: metadata.len(),
                modified: modified(&metadata),
            });
        } else if file_type.is_symlink() {
            match resolve_symlink(root, &entry.path()) {
                Some((target, metadata)) => found.push(Found {
                    key,
                    target: Some(target),
                    len: metadata.len(),
                    modified: modified(&metadata),
                }),
                None => {
                    tracing::warn!(path = %entry.path().display(), "static site: symlink leaves the output or is not a file, skipped")
                }
            }
        }
        if found.len() > limits.max_files {
            return Err(io::Error::other(format!(
                "static site has more than {} files",
                limits.max_files
            )));
        }
    }
    Ok(())
}

/// The canonical target of a symlink, relative to `root`, when it is a regular file inside.
fn resolve_symlink(root: &Path, link: &Path) -> Option<(String, fs::Metadata)> {
    let target = fs::canonicalize(link).ok()?;
    let inside = target.strip_prefix(root).ok()?;
    // A link to `.env` or into `.git` must not publish what the walk itself skips.
    let hidden = inside.iter().enumerate().any(|(depth, name)| {
        let name = name.to_string_lossy();
        name.starts_with('.') && !(depth == 0 && name == ".well-known")
    });
    if hidden {
        return None;
    }
    let metadata = fs::symlink_metadata(&target).ok()?;
    let inside = inside.to_str()?.to_owned();
    metadata.is_file().then_some((inside, metadata))
}

fn modified(metadata: &fs::Metadata) -> SystemTime {
    metadata.modified().unwrap_or(UNIX_EPOCH)
}

/// Reads a whole file that the walk found, refusing to follow a symlink swapped in since.
fn read_whole(path: &Path, expected_len: u64) -> io::Result<Bytes> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let mut contents = Vec::with_capacity(expected_len as usize);
    // Bounded by the length seen in the walk, should the file grow meanwhile.
    file.take(expected_len).read_to_end(&mut contents)?;
    Ok(Bytes::from(contents))
}

/// Strong ETag from the content: the same bytes keep the same ETag across deployments.
fn content_etag(contents: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, contents);
    format!("\"{}\"", crate::ids::hex(&digest.as_ref()[..16]))
}

/// Strong ETag for files served from disk, which are not hashed at load time. The output
/// directory of a deployment does not change after the build, so size + mtime identify it.
fn metadata_etag(len: u64, modified: SystemTime) -> String {
    let nanos = modified
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    format!("\"{len:x}-{nanos:x}\"")
}

/// Content type by extension, with a charset for text formats.
fn content_type(key: &str) -> String {
    let mime = mime_guess::from_path(key)
        .first_raw()
        .unwrap_or("application/octet-stream");
    let textual = mime.starts_with("text/")
        || matches!(
            mime,
            "application/javascript"
                | "application/json"
                | "application/manifest+json"
                | "application/xml"
                | "image/svg+xml"
        );
    match textual {
        true => format!("{mime}; charset=utf-8"),
        false => mime.to_owned(),
    }
}

/// HTML always revalidates (a new deployment must show at once); fingerprinted assets are
/// immutable; anything else may be cached but revalidates (a cheap 304 thanks to the ETag).
fn cache_control(key: &str, content_type: &str) -> CacheControl {
    if content_type.starts_with("text/html") {
        return CacheControl::NoCache;
    }
    if key.starts_with("/_next/static/") || is_fingerprinted(key) {
        return CacheControl::Immutable;
    }
    CacheControl::MustRevalidate
}

/// `app.3f9a8b2c.js`, `main-5e1f0c9d2a.css`: the last `.`/`-` part of the stem is 8 to 64
/// word characters with both letters and digits. Misses only cost a revalidation.
fn is_fingerprinted(key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or(key);
    let Some((stem, _extension)) = name.rsplit_once('.') else {
        return false;
    };
    let Some(part) = stem.rsplit(['.', '-']).next() else {
        return false;
    };
    (8..=64).contains(&part.len())
        && part
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
        && part.bytes().any(|byte| byte.is_ascii_digit())
        && part.bytes().any(|byte| byte.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_recognised() {
        assert!(is_fingerprinted("/assets/app.3f9a8b2c.js"));
        assert!(is_fingerprinted("/main-5e1f0c9d2a.css"));
        assert!(!is_fingerprinted("/logo.png"));
        assert!(!is_fingerprinted("/photo-20240101.jpg"));
        assert!(!is_fingerprinted("/bootstrap.min.css"));
        assert!(!is_fingerprinted("/README"));
    }

    #[test]
    fn content_etags_are_the_first_half_of_the_sha256_in_quotes() {
        assert_eq!(content_etag(b""), "\"e3b0c44298fc1c149afbf4c8996fb924\"");
    }

    #[test]
    fn content_types_carry_charsets() {
        assert_eq!(content_type("/a.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("/a.js"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("/a.svg"), "image/svg+xml; charset=utf-8");
        assert_eq!(content_type("/a.png"), "image/png");
        assert_eq!(content_type("/a.unknownext"), "application/octet-stream");
    }
}
