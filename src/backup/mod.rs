//! `slipway backup` and `slipway restore`: one `.tar.gz` archive with everything a data dir
//! needs to come back on another machine — a consistent snapshot of the store (projects,
//! env vars, tokens, logs, runs, the CA and certificates), `secret.key`, the source archives,
//! the builds of live deployments and the apps' data dirs — with a SHA-256 of every file.
//!
//! Layout: `slipway-backup.json` first (the [`Header`]: format, versions; read before
//! anything else so a newer archive is refused at once), the files under `data/`, and
//! `manifest.json` last (the [`Manifest`]: every file's size and checksum, every link).
//! `write` runs in the daemon (the admin socket's `backup` command streams the archive to the
//! CLI); `restore` runs offline in the CLI (`verify` then extract into a new data dir).
//!
//! Volumes (a deployment's workspace, an app's data dir; see `disk.rs`) are stored as their
//! contents, never as their images, whether or not disk limits are on: the files are read
//! through the mount while its filesystem is frozen (`disk::Frozen`), so the archive holds
//! what the app sees, as of one moment, and as small as the data. The restore writes them as
//! plain directories and marks each as a volume; the daemon that serves them makes them
//! sparse images again where its disk limits are on (`Volumes::rebuild_restored`), or serves
//! the directories as they are. So an archive restores onto a machine with or without disk
//! limits alike. Format 1 archives (older Slipways) also held each volume's image, copied
//! while mounted and as large as its limit; their images are verified but never restored:
//! the contents they hold beside them are.
//!
//! Holes (format 3): a file with holes (`SEEK_DATA`/`SEEK_HOLE`) is stored as its data
//! segments only, one after another in its tar entry; the manifest's `data` lists them
//! (offset, length) and `size` is the file's length, so a sparse 15 TiB file with a few bytes
//! of data costs a few bytes, and is neither read nor hashed as terabytes of zeros. Restore
//! writes each segment at its offset and leaves the rest a hole (`sparse.rs`).

mod archive;
mod restore;
mod sparse;
mod walk;
mod write;

pub use restore::{restore, verify};
pub use write::Snapshot;

use serde::{Deserialize, Serialize};

use crate::disk::Volume;

/// The archive format this binary writes and the newest it reads (formats 1 and 2 are read
/// too; 3 added `FileEntry::data`, which an older reader would restore as a dense file).
pub const FORMAT: u32 = 3;
pub const HEADER_NAME: &str = "slipway-backup.json";
pub const MANIFEST_NAME: &str = "manifest.json";
/// Every file of the data dir lives under this prefix in the archive.
pub const DATA_PREFIX: &str = "data";

/// The first entry: what made the archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    pub format: u32,
    pub slipway_version: String,
    /// The store's schema version (`store::tables::SCHEMA_VERSION` of the writer).
    pub schema_version: u64,
    pub created_at: String,
    pub projects: usize,
    pub live_deployments: Vec<String>,
}

/// The last entry: what the archive must contain, byte for byte.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: u32,
    pub slipway_version: String,
    pub files: Vec<FileEntry>,
    pub links: Vec<LinkEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub path: String,
    /// The file's length.
    pub size: u64,
    /// SHA-256 (hex) of the entry's bytes: the whole file, or its `data` segments.
    pub sha256: String,
    /// A file with holes: its data segments as `[offset, length]`, in order and apart; the
    /// entry holds only their bytes and everything else is a hole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Vec<[u64; 2]>>,
}

impl FileEntry {
    /// How many bytes its tar entry holds.
    pub fn stored_size(&self) -> u64 {
        match &self.data {
            Some(segments) => segments.iter().map(|[_, length]| length).sum(),
            None => self.size,
        }
    }

    /// Whether `data` is in order, without overlaps or empty segments, and within `size`.
    pub fn segments_are_sound(&self) -> bool {
        let Some(segments) = &self.data else {
            return true;
        };
        let mut end = 0u64;
        segments.iter().all(|[offset, length]| {
            let sound = *offset >= end
                && *length > 0
                && offset.checked_add(*length).is_some_and(|e| e <= self.size);
            end = offset.saturating_add(*length);
            sound
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkEntry {
    pub path: String,
    pub target: String,
}

/// What a path of the data dir (relative, `/`-separated) is to a backup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// A volume's directory: `deployments/<dpl>/app`, `appdata/<project>`.
    VolumeDir,
    /// A volume's image (or one being made): never archived, never restored.
    VolumeImage,
    Other,
}

impl Place {
    pub(crate) fn of(relative: &str) -> Place {
        let parts: Vec<&str> = relative.split('/').collect();
        match parts.as_slice() {
            ["deployments", _, "workspace.img" | "workspace.img.partial"] => Place::VolumeImage,
            ["deployments", _, "app"] => Place::VolumeDir,
            ["appdata", name] if name.ends_with(".img") || name.ends_with(".img.partial") => {
                Place::VolumeImage
            }
            ["appdata", name] if name.ends_with(".img.restored") => Place::Other,
            ["appdata", _] => Place::VolumeDir,
            // An add-on's backups volume (its data volume is never archived: its backups are).
            ["addons", name] if name.ends_with("-backups.img") => Place::VolumeImage,
            ["addons", name] if name.ends_with("-backups") => Place::VolumeDir,
            _ => Place::Other,
        }
    }

    /// The volume whose directory is `relative` under `data_dir` (its size does not matter
    /// here: the daemon that mounts it applies its own limits).
    pub(crate) fn volume(data_dir: &std::path::Path, relative: &str) -> Option<Volume> {
        if Place::of(relative) != Place::VolumeDir {
            return None;
        }
        let dir = data_dir.join(relative);
        match relative.starts_with("deployments/") {
            true => dir
                .parent()
                .map(|deployment| Volume::workspace(deployment, 0)),
            false => Some(Volume::app_data(&dir, 0)),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0} is not a Slipway backup (its first entry is not {HEADER_NAME})")]
    NotABackup(String),
    #[error(
        "this backup was made by a newer Slipway ({made_by}, archive format {format}, store \
         schema {schema}); this binary ({this}) reads format {FORMAT} and schema {known}: \
         install a Slipway at least as new as {made_by} to restore it"
    )]
    Newer {
        made_by: String,
        format: u32,
        schema: u64,
        this: &'static str,
        known: u64,
    },
    #[error("the backup is corrupt: {0}")]
    Corrupt(String),
    #[error("{0}")]
    Refused(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BackupError {
    let context = context.into();
    move |source| BackupError::Io { context, source }
}

/// A reader that hashes (SHA-256) and counts what passes through it.
pub(crate) struct Hashing<R> {
    inner: R,
    digest: ring::digest::Context,
    len: u64,
}

impl<R> Hashing<R> {
    pub(crate) fn new(inner: R) -> Hashing<R> {
        Hashing {
            inner,
            digest: ring::digest::Context::new(&ring::digest::SHA256),
            len: 0,
        }
    }

    /// (size, SHA-256 hex) of everything read.
    pub(crate) fn finish(self) -> (u64, String) {
        (self.len, crate::ids::hex(self.digest.finish().as_ref()))
    }
}

impl<R: std::io::Read> std::io::Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.digest.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::Place;

    #[test]
    fn volumes_and_their_images_are_known_by_their_place_in_the_data_dir() {
        for (relative, place) in [
            ("deployments/dpl_a/app", Place::VolumeDir),
            ("deployments/dpl_a/workspace.img", Place::VolumeImage),
            (
                "deployments/dpl_a/workspace.img.partial",
                Place::VolumeImage,
            ),
            ("deployments/dpl_a/workspace.img.restored", Place::Other),
            ("deployments/dpl_a/app/workspace.img", Place::Other),
            ("appdata/prj_a", Place::VolumeDir),
            ("appdata/prj_a.img", Place::VolumeImage),
            ("appdata/prj_a.img.restored", Place::Other),
            ("appdata/prj_a/data.img", Place::Other),
            ("sources/abc.tar.gz", Place::Other),
        ] {
            assert_eq!(Place::of(relative), place, "{relative}");
        }
        let dir = std::path::Path::new("/d");
        let workspace = Place::volume(dir, "deployments/dpl_a/app").unwrap();
        assert_eq!(workspace.image, dir.join("deployments/dpl_a/workspace.img"));
        let data = Place::volume(dir, "appdata/prj_a").unwrap();
        assert_eq!(
            data.restored_marker(),
            dir.join("appdata/prj_a.img.restored")
        );
        assert!(Place::volume(dir, "sources").is_none());
    }
}
