//! Source code for builds: the content-addressed store of uploaded archives under
//! `<data_dir>/sources`, the complete validation of a gzip'd tar before it is kept, the safe
//! unpacking of a stored archive into a build workspace, and the `git clone` command used when
//! a provision names a git URL instead.
//!
//! Callers: the API's `POST /api/projects/{id}/source` handler ([`SourceStore::ingest`]), the
//! pipeline's `source` step ([`SourceStore::unpack`], [`git_clone_command`]) and garbage
//! collection ([`SourceStore::remove`]). Everything here blocks on the file system: call it
//! from `spawn_blocking`.
//!
//! Architecture invariants:
//! - An archive is stored only after every member has been decompressed and checked, and the
//!   limits are enforced while streaming: a gzip bomb stops at the limit, never after it.
//! - Unpacking validates the stored archive again and never follows a symlink while writing:
//!   every directory on the way is opened with `O_NOFOLLOW`, every file is created with
//!   `O_CREAT | O_EXCL | O_NOFOLLOW`.
//! - Nothing of a refused archive is kept: the store only ever renames a complete, synced
//!   temporary file into place, and a failed unpack empties the destination again.

mod archive;
mod extract;
mod git;
#[cfg(test)]
mod tests;
mod tree;

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub use git::{
    check_ref as check_git_ref, check_url as check_git_url, credential_env, git_clone_command,
    split_credentials,
};

/// The size and count limits applied to one archive.
///
/// Defaults (see [`SourceLimits::from_archive_limit`]): the unpacked contents may be ten times
/// the archive limit (source code compresses 3-10x; more than that is a bomb, not a project),
/// and an archive may hold at most 100,000 members (files, directories and links together;
/// a large `node_modules` has about 50,000).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceLimits {
    /// The largest gzip'd archive accepted, in bytes (`limits.source_max_mb`).
    pub max_archive_bytes: u64,
    /// The largest total size of the members' contents, in bytes. The decompressed tar stream
    /// (contents plus headers) is bounded by this plus a fixed allowance per member.
    pub max_unpacked_bytes: u64,
    /// The largest number of members.
    pub max_files: u64,
}

impl SourceLimits {
    /// How many times the archive limit the unpacked contents may be.
    pub const UNPACKED_FACTOR: u64 = 10;
    /// The default member count limit.
    pub const DEFAULT_MAX_FILES: u64 = 100_000;

    /// The limits derived from the archive limit alone: unpacked = 10x, 100,000 members.
    pub fn from_archive_limit(max_archive_bytes: u64) -> SourceLimits {
        SourceLimits {
            max_archive_bytes,
            max_unpacked_bytes: max_archive_bytes.saturating_mul(Self::UNPACKED_FACTOR),
            max_files: Self::DEFAULT_MAX_FILES,
        }
    }
}

impl Default for SourceLimits {
    /// The contract's default: a 100 MiB archive, 1000 MiB unpacked, 100,000 members.
    fn default() -> SourceLimits {
        SourceLimits::from_archive_limit(100 * 1024 * 1024)
    }
}

/// Why a source could not be taken or unpacked.
///
/// The API maps `InvalidArchive` to 400 `INVALID_SOURCE_ARCHIVE`, `TooLarge` to 413
/// `PAYLOAD_TOO_LARGE`, `InvalidGitUrl` to 400 `INVALID_GIT_URL`, `InvalidGitRef` to 400
/// `INVALID_BODY` (naming `gitRef`), `NotFound` to 404 (or a failed `source` step) and `Io` to
/// 500.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The archive breaks a rule; the message names the member and the rule.
    #[error("{0}")]
    InvalidArchive(String),
    /// The archive itself is over `max_archive_bytes`.
    #[error("the archive is {size} bytes; the limit is {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    /// The git URL is not one Slipway clones from.
    #[error("{0}")]
    InvalidGitUrl(String),
    /// The git ref is not a plausible branch, tag or commit.
    #[error("{0}")]
    InvalidGitRef(String),
    /// No stored archive has this digest (or the digest is malformed).
    #[error("source {0} is not in the store")]
    NotFound(String),
    /// The file system failed; not the client's fault.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl SourceError {
    fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> SourceError {
        let context = context.into();
        move |source| SourceError::Io { context, source }
    }
}

/// The result of [`SourceStore::ingest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestedSource {
    /// Lowercase hex SHA-256 of the archive bytes: the store key.
    pub sha256: String,
    /// The archive's size in bytes.
    pub size_bytes: u64,
    /// The number of members (files, directories and links).
    pub file_count: u64,
    /// True when the same archive was stored before (it is stored once).
    pub already_present: bool,
}

/// The result of [`SourceStore::unpack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpackStats {
    /// The number of members written (files, directories and links).
    pub file_count: u64,
    /// The total size of the regular files' contents.
    pub unpacked_bytes: u64,
}

/// Stored archives, one file `<sha256>.tar.gz` each, in a directory of mode 0700.
#[derive(Debug, Clone)]
pub struct SourceStore {
    dir: PathBuf,
}

/// The prefix of temporary files; anything carrying it is a leftover of a crash.
const TEMP_PREFIX: &str = ".tmp-";

impl SourceStore {
    /// Opens (creating it with mode 0700 if needed) the store directory, and removes
    /// temporary files a crash left behind.
    pub fn open(dir: PathBuf) -> io::Result<SourceStore> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?;
        for item in fs::read_dir(&dir)? {
            let item = item?;
            if item.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                fs::remove_file(item.path())?;
            }
        }
        Ok(SourceStore { dir })
    }

    /// Validates `archive` completely and stores it under its SHA-256 unless it is already
    /// there. Nothing is written when validation fails.
    pub fn ingest(
        &self,
        archive: &[u8],
        limits: &SourceLimits,
    ) -> Result<IngestedSource, SourceError> {
        let size_bytes = archive.len() as u64;
        if size_bytes > limits.max_archive_bytes {
            return Err(SourceError::TooLarge {
                size: size_bytes,
                limit: limits.max_archive_bytes,
            });
        }
        let sha256 = crate::ids::sha256_hex(archive);
        let manifest = tree::validate(archive, limits)?;
        let path = self.path(&sha256);
        let already_present = match fs::symlink_metadata(&path) {
            Ok(metadata) if metadata.is_file() && metadata.len() == size_bytes => true,
            Ok(_) => false,
            Err(error) if error.kind() == io::ErrorKind::NotFound => false,
            Err(error) => {
                return Err(SourceError::io(format!("cannot stat {}", path.display()))(
                    error,
                ))
            }
        };
        if !already_present {
            self.write_atomically(&sha256, archive)?;
        }
        Ok(IngestedSource {
            sha256,
            size_bytes,
            file_count: manifest.file_count,
            already_present,
        })
    }

    /// Unpacks the stored archive `sha256` into `dest`, an existing empty directory, after
    /// checking its digest and validating it again. On failure `dest` is emptied again.
    pub fn unpack(
        &self,
        sha256: &str,
        dest: &Path,
        limits: &SourceLimits,
    ) -> Result<UnpackStats, SourceError> {
        let path = self.checked_path(sha256)?;
        let archive = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(SourceError::NotFound(sha256.to_owned()))
            }
            Err(error) => {
                return Err(SourceError::io(format!("cannot read {}", path.display()))(
                    error,
                ))
            }
        };
        if crate::ids::sha256_hex(&archive) != sha256 {
            let error = io::Error::new(io::ErrorKind::InvalidData, "digest mismatch");
            return Err(SourceError::io(format!(
                "stored source {} is corrupt",
                path.display()
            ))(error));
        }
        tree::validate(&archive, limits)?;
        extract::extract(&archive, dest, limits)
    }

    /// Removes a stored archive; removing one that is not there is not an error.
    pub fn remove(&self, sha256: &str) -> Result<(), SourceError> {
        let path = self.checked_path(sha256)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(SourceError::io(format!("cannot remove {}", path.display()))(error)),
        }
    }

    /// True when an archive with this digest is stored.
    pub fn contains(&self, sha256: &str) -> bool {
        self.checked_path(sha256).is_ok_and(|path| path.is_file())
    }

    /// Where the archive with this digest is (or would be) stored. The digest is not checked
    /// here: pass only digests this store returned.
    pub fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}.tar.gz"))
    }

    fn checked_path(&self, sha256: &str) -> Result<PathBuf, SourceError> {
        let well_formed = sha256.len() == 64
            && sha256
                .bytes()
                .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'));
        match well_formed {
            true => Ok(self.path(sha256)),
            false => Err(SourceError::NotFound(sha256.to_owned())),
        }
    }

    /// Writes to a unique temporary file, syncs it, renames it into place and syncs the
    /// directory, so the store holds either the whole archive or nothing.
    fn write_atomically(&self, sha256: &str, archive: &[u8]) -> Result<(), SourceError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = self.dir.join(format!(
            "{TEMP_PREFIX}{sha256}-{}-{unique}",
            std::process::id()
        ));
        let result = (|| {
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)?;
            file.write_all(archive)?;
            file.sync_all()?;
            fs::rename(&temp, self.path(sha256))?;
            fs::File::open(&self.dir)?.sync_all()
        })();
        if result.is_err() {
            let _ = fs::remove_file(&temp);
        }
        result.map_err(SourceError::io(format!("cannot store source {sha256}")))
    }
}
