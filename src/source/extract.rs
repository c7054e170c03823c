//! Writing a validated archive into a build workspace without ever following a symlink:
//! every directory on the way to a member is opened relative to its parent with `O_NOFOLLOW`,
//! files are created with `O_CREAT | O_EXCL | O_NOFOLLOW`, links with `symlinkat`/`linkat`.
//! So even an archive that slipped past validation cannot redirect a write outside the
//! destination. Modes are normalized: directories 0755, files 0644 or 0755 when any execute
//! bit was set; no ownership, setuid, setgid or sticky bit is taken from the archive. Called by
//! [`super::SourceStore::unpack`].

use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fchmod, mkdirat, Mode};
use nix::unistd::{linkat, symlinkat};

use super::archive::{self, display, invalid, Member, TarEntry};
use super::{SourceError, SourceLimits, UnpackStats};

/// Unpacks `archive` into `dest`, which must be an existing empty directory (not a symlink).
/// On failure everything written into `dest` is removed again.
pub(super) fn extract(
    archive: &[u8],
    dest: &Path,
    limits: &SourceLimits,
) -> Result<UnpackStats, SourceError> {
    let context = format!("cannot open destination {}", dest.display());
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let root = openat(AT_FDCWD, dest, flags, Mode::empty())
        .map_err(|errno| SourceError::io(context.clone())(errno.into()))?;
    let is_empty = fs::read_dir(dest)
        .map_err(SourceError::io(context))?
        .next()
        .is_none();
    if !is_empty {
        let error = io::Error::new(io::ErrorKind::AlreadyExists, "directory is not empty");
        return Err(SourceError::io(format!(
            "cannot unpack into {}",
            dest.display()
        ))(error));
    }
    let result = archive::walk(archive, limits, |checked, entry| {
        write_member(&root, &checked.path, &checked.member, entry)
    });
    match result {
        Ok(manifest) => Ok(UnpackStats {
            file_count: manifest.file_count,
            unpacked_bytes: manifest.unpacked_bytes,
        }),
        Err(error) => {
            empty_directory(dest);
            Err(error)
        }
    }
}

fn write_member(
    root: &OwnedFd,
    path: &[u8],
    member: &Member,
    entry: &mut TarEntry<'_, '_>,
) -> Result<(), SourceError> {
    let components: Vec<&[u8]> = path.split(|byte| *byte == b'/').collect();
    let (name, parents) = components
        .split_last()
        .expect("split yields at least one item");
    let parent = open_directories(root, parents, path, true)?;
    let failed = |errno: Errno| member_error(path, errno);
    match member {
        Member::Directory => {
            let directory = open_directories(&parent, &[name], path, true)?;
            fchmod(directory.as_fd(), Mode::from_bits_truncate(0o755)).map_err(failed)
        }
        Member::File { executable } => {
            let flags = OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_EXCL
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC;
            let descriptor = openat(
                parent.as_fd(),
                *name,
                flags,
                Mode::from_bits_truncate(0o600),
            )
            .map_err(failed)?;
            let mut file = fs::File::from(descriptor);
            archive::copy_data(entry, path, &mut file)?;
            let mode = if *executable { 0o755 } else { 0o644 };
            let io_error = SourceError::io(format!("cannot finish entry '{}'", display(path)));
            file.set_permissions(fs::Permissions::from_mode(mode))
                .map_err(io_error)?;
            let mtime = entry.header().mtime().unwrap_or(0);
            let modified = SystemTime::UNIX_EPOCH + Duration::from_secs(mtime.min(1 << 40));
            let io_error = SourceError::io(format!("cannot finish entry '{}'", display(path)));
            file.set_modified(modified).map_err(io_error)
        }
        Member::Symlink { target } => {
            symlinkat(target.as_slice(), parent.as_fd(), *name).map_err(failed)
        }
        Member::HardLink { target } => {
            let target_components: Vec<&[u8]> = target.split(|byte| *byte == b'/').collect();
            let (target_name, target_parents) = target_components
                .split_last()
                .expect("split yields at least one item");
            let target_parent = open_directories(root, target_parents, path, false)?;
            linkat(
                target_parent.as_fd(),
                *target_name,
                parent.as_fd(),
                *name,
                AtFlags::empty(),
            )
            .map_err(failed)
        }
    }
}

/// Opens `components` below `base` one at a time with `O_NOFOLLOW`, creating missing
/// directories (mode 0755) when `create` is set.
fn open_directories(
    base: &OwnedFd,
    components: &[&[u8]],
    path: &[u8],
    create: bool,
) -> Result<OwnedFd, SourceError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut current = base
        .try_clone()
        .map_err(SourceError::io("cannot duplicate a descriptor"))?;
    for component in components {
        let opened = match openat(current.as_fd(), *component, flags, Mode::empty()) {
            Err(Errno::ENOENT) if create => {
                match mkdirat(current.as_fd(), *component, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(errno) => return Err(member_error(path, errno)),
                }
                let opened = openat(current.as_fd(), *component, flags, Mode::empty())
                    .map_err(|errno| member_error(path, errno))?;
                fchmod(opened.as_fd(), Mode::from_bits_truncate(0o755))
                    .map_err(|errno| member_error(path, errno))?;
                opened
            }
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(invalid(format!(
                    "entry '{}' passes through '{}', which is not a directory",
                    display(path),
                    display(component)
                )))
            }
            Err(errno) => return Err(member_error(path, errno)),
            Ok(opened) => opened,
        };
        current = opened;
    }
    Ok(current)
}

/// A write refused because something is already there is the archive's fault; anything else
/// is the file system's.
fn member_error(path: &[u8], errno: Errno) -> SourceError {
    match errno {
        Errno::EEXIST | Errno::ELOOP | Errno::ENOTDIR => invalid(format!(
            "entry '{}' collides with an earlier entry",
            display(path)
        )),
        _ => SourceError::io(format!("cannot write entry '{}'", display(path)))(errno.into()),
    }
}

/// Best-effort removal of everything inside `dest` (std's removal never follows symlinks).
fn empty_directory(dest: &Path) {
    let Ok(items) = fs::read_dir(dest) else {
        return;
    };
    for item in items.flatten() {
        let path = item.path();
        let _ = match item.file_type() {
            Ok(kind) if kind.is_dir() => fs::remove_dir_all(&path),
            _ => fs::remove_file(&path),
        };
    }
}
