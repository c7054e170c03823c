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

mod restore;
mod write;

pub use restore::{restore, verify};
pub use write::Snapshot;

use serde::{Deserialize, Serialize};

/// The archive format this binary writes and the newest it reads.
pub const FORMAT: u32 = 1;
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
    pub size: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkEntry {
    pub path: String,
    pub target: String,
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
