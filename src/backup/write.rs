//! The daemon side of `slipway backup`: [`Snapshot::take`] copies the store while the daemon
//! serves (one redb read transaction), then [`Snapshot::write`] streams the archive —
//! header, snapshot, `secret.key`, `initial-admin-token`, `sources/`, the live deployments' `deployments/<id>/`,
//! `appdata/`, manifest. A volume goes in as the files its mount shows, read while its
//! filesystem is frozen; its image never does (`mod.rs` says why). Called by `admin.rs` on a
//! blocking thread.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{io, BackupError, FileEntry, Hashing, Header, LinkEntry, Manifest, DATA_PREFIX};
use super::{FORMAT, HEADER_NAME, MANIFEST_NAME};
use crate::store::Store;

/// A store snapshot on disk (removed when dropped) and the header describing it.
pub struct Snapshot {
    path: PathBuf,
    pub header: Header,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Snapshot {
    /// Copies the store to `<data_dir>/backup-<time>.redb.tmp`.
    pub fn take(store: &Store, data_dir: &Path) -> Result<Snapshot, BackupError> {
        let path = data_dir.join(format!(
            "backup-{}-{}.redb.tmp",
            crate::ids::now_ms(),
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        // Removed on every error path from here on.
        let mut snapshot = Snapshot {
            path,
            header: Header {
                format: FORMAT,
                slipway_version: env!("CARGO_PKG_VERSION").into(),
                schema_version: 0,
                created_at: crate::ids::rfc3339(crate::ids::now_ms()),
                projects: 0,
                live_deployments: Vec::new(),
            },
        };
        let info = store.snapshot_to(&snapshot.path)?;
        snapshot.header.schema_version = info.schema_version;
        snapshot.header.projects = info.projects;
        snapshot.header.live_deployments = info.live_deployments;
        Ok(snapshot)
    }

    /// Streams the archive (gzip) to `out`; returns its manifest.
    pub fn write(&self, data_dir: &Path, out: impl Write) -> Result<Manifest, BackupError> {
        let gzip = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
        let mut archive = Archive {
            tar: tar::Builder::new(gzip),
            manifest: Manifest {
                format: FORMAT,
                slipway_version: self.header.slipway_version.clone(),
                ..Manifest::default()
            },
        };
        archive.tar.follow_symlinks(false);
        let header = serde_json::to_vec_pretty(&self.header).expect("headers serialize");
        archive.bytes(HEADER_NAME, &header)?;
        archive.file(&self.path, &format!("{DATA_PREFIX}/slipway.redb"))?;
        archive.file(
            &data_dir.join("secret.key"),
            &format!("{DATA_PREFIX}/secret.key"),
        )?;
        // The operator's first token, if its file is still there (its hash is in the store).
        let initial_token = data_dir.join("initial-admin-token");
        if initial_token.exists() {
            archive.file(
                &initial_token,
                &format!("{DATA_PREFIX}/initial-admin-token"),
            )?;
        }
        let mut trees = vec!["sources".to_owned(), "appdata".to_owned()];
        for deployment in &self.header.live_deployments {
            trees.push(format!("deployments/{deployment}"));
        }
        for tree in trees {
            let path = data_dir.join(&tree);
            if path.exists() {
                archive.tree(&path, &format!("{DATA_PREFIX}/{tree}"))?;
            }
        }
        let manifest_bytes =
            serde_json::to_vec_pretty(&archive.manifest).expect("manifests serialize");
        archive.bytes(MANIFEST_NAME, &manifest_bytes)?;
        let gzip = archive
            .tar
            .into_inner()
            .map_err(io("finishing the archive"))?;
        gzip.finish().map_err(io("finishing the archive"))?;
        Ok(archive.manifest)
    }
}

pub(super) struct Archive<W: Write> {
    tar: tar::Builder<W>,
    pub(super) manifest: Manifest,
}

impl<W: Write> Archive<W> {
    fn bytes(&mut self, name: &str, bytes: &[u8]) -> Result<(), BackupError> {
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
    fn file(&mut self, path: &Path, name: &str) -> Result<(), BackupError> {
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
    pub(super) fn open_file(&mut self, file: std::fs::File, name: &str) -> std::io::Result<()> {
        let metadata = file.metadata()?;
        let mut header = tar::Header::new_gnu();
        header.set_metadata(&metadata);
        let size = metadata.len();
        let exact = file.take(size).chain(std::io::repeat(0)).take(size);
        let mut hashing = Hashing::new(exact);
        self.tar.append_data(&mut header, name, &mut hashing)?;
        let (size, sha256) = hashing.finish();
        self.manifest.files.push(FileEntry {
            path: name.to_owned(),
            size,
            sha256,
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

    /// An uncompressed archive into `out` (the walk's tests read it back).
    #[cfg(test)]
    pub(super) fn for_test(out: W) -> Archive<W> {
        Archive {
            tar: tar::Builder::new(out),
            manifest: Manifest::default(),
        }
    }

    #[cfg(test)]
    pub(super) fn into_bytes(self) -> W {
        self.tar.into_inner().expect("finish the archive")
    }

    /// A directory tree of the data dir, read through directory descriptors (`walk.rs`).
    fn tree(&mut self, dir: &Path, name: &str) -> Result<(), BackupError> {
        super::walk::tree(self, dir, name)
    }
}

/// An archive name's path in the data dir (`data/appdata/x` → `appdata/x`).
pub(super) fn relative(name: &str) -> &str {
    name.strip_prefix(DATA_PREFIX)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(name)
}
