//! The archive being written: tar entries (files hashed into the manifest as they go,
//! directories, links) for `write.rs` and the tree walk (`walk.rs`).

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::{io, BackupError, FileEntry, Hashing, LinkEntry, Manifest, DATA_PREFIX};

pub(super) struct Archive<W: Write> {
    tar: tar::Builder<W>,
    pub(super) manifest: Manifest,
}

impl<W: Write> Archive<W> {
    pub(super) fn bytes(&mut self, name: &str, bytes: &[u8]) -> Result<(), BackupError> {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o600);
        header.set_mtime(crate::ids::now_ms() / 1000);
        header.set_entry_type(tar::EntryType::Regular);
        self.tar
            .append_data(&mut header, name, bytes)
            .map_err(io(format!("writing {name}")))
    }

    /// One regular file of the daemon's own (the store snapshot, `secret.key`, a source
    /// archive), opened without following a link.
    pub(super) fn file(&mut self, path: &Path, name: &str) -> Result<(), BackupError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(io(format!("reading {}", path.display())))?;
        self.open_file(file, name)
            .map_err(io(format!("writing {}", path.display())))
    }

    /// An open regular file, hashed as it is written. A file that changes size meanwhile (an
    /// app writing to its data dir) is cut or zero-padded to the size it had when opened.
    /// A file with holes goes in as its data segments only (`sparse.rs`).
    pub(super) fn open_file(&mut self, file: std::fs::File, name: &str) -> std::io::Result<()> {
        let metadata = file.metadata()?;
        let mut header = tar::Header::new_gnu();
        header.set_metadata(&metadata);
        let size = metadata.len();
        let data = super::sparse::data_segments(&file, size)?;
        let (_, sha256) = match &data {
            None => {
                let exact = file.take(size).chain(std::io::repeat(0)).take(size);
                let mut hashing = Hashing::new(exact);
                self.tar.append_data(&mut header, name, &mut hashing)?;
                hashing.finish()
            }
            Some(segments) => {
                header.set_size(segments.iter().map(|[_, length]| length).sum());
                let reader = super::sparse::SegmentReader::new(file, segments.clone());
                let mut hashing = Hashing::new(reader);
                self.tar.append_data(&mut header, name, &mut hashing)?;
                hashing.finish()
            }
        };
        self.manifest.files.push(FileEntry {
            path: name.to_owned(),
            size,
            sha256,
            data,
        });
        Ok(())
    }

    /// A directory entry with no contents (its owner, mode and time from `stat`).
    pub(super) fn directory(
        &mut self,
        stat: &std::fs::Metadata,
        name: &str,
    ) -> std::io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_metadata(stat);
        header.set_size(0);
        self.tar.append_data(&mut header, name, std::io::empty())
    }

    /// A symbolic link, as a link (never followed).
    pub(super) fn link(
        &mut self,
        stat: &nix::sys::stat::FileStat,
        name: &str,
        target: &Path,
    ) -> std::io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_mode(stat.st_mode & 0o7777);
        header.set_uid(u64::from(stat.st_uid));
        header.set_gid(u64::from(stat.st_gid));
        header.set_mtime(u64::try_from(stat.st_mtime).unwrap_or(0));
        header.set_size(0);
        self.tar.append_link(&mut header, name, target)?;
        self.manifest.links.push(LinkEntry {
            path: name.to_owned(),
            target: target.to_string_lossy().into_owned(),
        });
        Ok(())
    }

    /// An archive into `out` that never follows a link.
    pub(super) fn new(out: W, manifest: Manifest) -> Archive<W> {
        let mut tar = tar::Builder::new(out);
        tar.follow_symlinks(false);
        Archive { tar, manifest }
    }

    /// The archive's end written: the stream, and the manifest of what went in.
    pub(super) fn finish(self) -> Result<(W, Manifest), BackupError> {
        let out = self.tar.into_inner().map_err(io("finishing the archive"))?;
        Ok((out, self.manifest))
    }
}

/// An archive name's path in the data dir (`data/appdata/x` → `appdata/x`).
pub(super) fn relative(name: &str) -> &str {
    name.strip_prefix(DATA_PREFIX)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(name)
}
