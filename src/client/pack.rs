//! Packing a project directory for `slipway deploy`: a walk in name order that skips `.git/`,
//! `node_modules/` and whatever the `.gitignore` files exclude, into a gzip'd tar in memory
//! that the daemon's source upload accepts (relative paths, regular files, directories, and
//! symlinks that stay inside the tree; ownership dropped, modes reduced to 0644/0755).

use std::path::{Component, Path, PathBuf};

use super::gitignore::{IgnoreFile, Matcher};

/// Directory names never uploaded, wherever they are.
const ALWAYS_SKIPPED: &[&str] = &[".git", "node_modules"];

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
}

/// The archive and what went into it.
#[derive(Debug)]
pub struct Packed {
    pub archive: Vec<u8>,
    pub file_count: usize,
    /// Bytes of file content before compression.
    pub content_bytes: u64,
    /// Entries left out because they cannot be uploaded (sockets, devices, links leaving the
    /// tree), relative paths.
    pub skipped: Vec<String>,
}

/// Packs `dir` (see the module doc).
pub fn pack(dir: &Path) -> Result<Packed, PackError> {
    if !dir.is_dir() {
        return Err(PackError::NotADirectory(dir.to_owned()));
    }
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut walk = Walk {
        builder: tar::Builder::new(encoder),
        matcher: Matcher::default(),
        file_count: 0,
        content_bytes: 0,
        skipped: Vec::new(),
    };
    walk.directory(dir, "")?;
    let io = |source| PackError::Io {
        path: dir.to_owned(),
        source,
    };
    let encoder = walk.builder.into_inner().map_err(io)?;
    let archive = encoder.finish().map_err(io)?;
    Ok(Packed {
        archive,
        file_count: walk.file_count,
        content_bytes: walk.content_bytes,
        skipped: walk.skipped,
    })
}

struct Walk {
    builder: tar::Builder<flate2::write::GzEncoder<Vec<u8>>>,
    matcher: Matcher,
    file_count: usize,
    content_bytes: u64,
    skipped: Vec<String>,
}

impl Walk {
    /// Adds the entries of `path` (archive path `relative`, "" for the root).
    fn directory(&mut self, path: &Path, relative: &str) -> Result<(), PackError> {
        let io = |source| PackError::Io {
            path: path.to_owned(),
            source,
        };
        let depth = self.matcher.depth();
        match std::fs::read_to_string(path.join(".gitignore")) {
            Ok(text) => self.matcher.push(IgnoreFile::parse(relative, &text)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(io(error)),
        }
        let mut entries = std::fs::read_dir(path)
            .map_err(io)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(io)?;
        entries.sort_by_key(|entry| entry.file_name());
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            let child_relative = if relative.is_empty() {
                name.clone()
            } else {
                format!("{relative}/{name}")
            };
            let child = entry.path();
            let metadata = std::fs::symlink_metadata(&child).map_err(|source| PackError::Io {
                path: child.clone(),
                source,
            })?;
            let file_type = metadata.file_type();
            if file_type.is_dir() && ALWAYS_SKIPPED.contains(&name.as_str()) {
                continue;
            }
            if self.matcher.is_ignored(&child_relative, file_type.is_dir()) {
                continue;
            }
            self.entry(&child, &child_relative, &metadata)?;
        }
        self.matcher.truncate(depth);
        Ok(())
    }

    fn entry(
        &mut self,
        path: &Path,
        relative: &str,
        metadata: &std::fs::Metadata,
    ) -> Result<(), PackError> {
        use std::os::unix::fs::MetadataExt;
        let io = |source| PackError::Io {
            path: path.to_owned(),
            source,
        };
        let file_type = metadata.file_type();
        let mut header = tar::Header::new_gnu();
        header.set_mtime(metadata.mtime().max(0) as u64);
        header.set_uid(0);
        header.set_gid(0);
        if file_type.is_dir() {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            self.builder
                .append_data(&mut header, format!("{relative}/"), std::io::empty())
                .map_err(io)?;
            return self.directory(path, relative);
        }
        if file_type.is_symlink() {
            let target = std::fs::read_link(path).map_err(io)?;
            if !stays_inside(relative, &target) {
                self.skipped
                    .push(format!("{relative} (a link leaving the directory)"));
                return Ok(());
            }
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_mode(0o777);
            header.set_size(0);
            self.builder
                .append_link(&mut header, relative, &target)
                .map_err(io)?;
            return Ok(());
        }
        if !file_type.is_file() {
            self.skipped
                .push(format!("{relative} (not a regular file)"));
            return Ok(());
        }
        let executable = metadata.mode() & 0o111 != 0;
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(if executable { 0o755 } else { 0o644 });
        header.set_size(metadata.len());
        let file = std::fs::File::open(path).map_err(io)?;
        self.builder
            .append_data(&mut header, relative, file)
            .map_err(io)?;
        self.file_count += 1;
        self.content_bytes += metadata.len();
        Ok(())
    }
}

/// Whether a link at `relative` pointing to `target` resolves (lexically) inside the tree.
fn stays_inside(relative: &str, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    // The link's own directory depth, then each component of the target.
    let mut depth: i64 = relative.matches('/').count() as i64;
    for component in target.components() {
        match component {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return false,
        }
        if depth < 0 {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn entries(archive: &[u8]) -> Vec<(String, String)> {
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
        tar.entries()
            .unwrap()
            .map(|entry| {
                let mut entry = entry.unwrap();
                let path = entry.path().unwrap().display().to_string();
                let mut contents = String::new();
                let _ = entry.read_to_string(&mut contents);
                (path, contents)
            })
            .collect()
    }

    #[test]
    fn packs_what_git_would_commit() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(".gitignore", "secret.txt\n*.log\n/dist/\n!keep.log\n");
        write("index.html", "<h1>hi</h1>");
        write("secret.txt", "password");
        write("debug.log", "noise");
        write("keep.log", "kept");
        write("dist/bundle.js", "built");
        write("src/dist/x.js", "source");
        write("src/.gitignore", "local.js\n");
        write("src/local.js", "local");
        write("src/app.js", "app");
        write(".git/HEAD", "ref");
        write("node_modules/left-pad/index.js", "pad");
        write("web/node_modules/x/index.js", "pad");
        std::os::unix::fs::symlink("index.html", root.join("home.html")).unwrap();
        std::os::unix::fs::symlink("../../etc/passwd", root.join("src/escape")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("absolute")).unwrap();

        let packed = pack(root).unwrap();
        let entries = entries(&packed.archive);
        let paths: Vec<&str> = entries.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                ".gitignore",
                "home.html",
                "index.html",
                "keep.log",
                "src/",
                "src/.gitignore",
                "src/app.js",
                "src/dist/",
                "src/dist/x.js",
                "web/",
            ]
        );
        assert_eq!(packed.file_count, 6);
        assert_eq!(packed.skipped.len(), 2, "{:?}", packed.skipped);
        assert!(entries.iter().any(|(p, c)| p == "src/app.js" && c == "app"));
    }

    #[test]
    fn links_are_checked_lexically() {
        assert!(stays_inside("a/link", Path::new("../b")));
        assert!(stays_inside("link", Path::new("./x/../y")));
        assert!(!stays_inside("link", Path::new("../x")));
        assert!(!stays_inside("a/link", Path::new("../../x")));
        assert!(!stays_inside("link", Path::new("/etc")));
    }

    #[test]
    fn a_file_is_not_a_directory_to_pack() {
        let file = tempfile::NamedTempFile::new().unwrap();
        assert!(matches!(
            pack(file.path()),
            Err(PackError::NotADirectory(_))
        ));
    }
}
