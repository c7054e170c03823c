//! The backup's walk of the data dir's trees (live workspaces, apps' `/data`): what a project's
//! code can write while the daemon, as root, reads it. Every step goes through directory
//! descriptors opened with `O_NOFOLLOW` from the daemon's own top directory, so a symlink
//! swapped in anywhere (for a directory or a file, even between listing and opening) is
//! archived as a link and never followed into the host or another project; files are opened
//! `O_NONBLOCK` and archived only if the descriptor is a regular file, so a FIFO or device
//! planted or swapped in never hangs the backup. Entries that vanish while the walk runs (an
//! app deleting files) are left out.

use std::ffi::{CStr, OsStr};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::fs_at::{names, open_dir};
use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fstatat, Mode, SFlag};

use super::archive::{relative, Archive};
use super::{io, BackupError, Place};

/// Archives the tree at `dir` (a directory of the daemon's) as `name`.
pub(super) fn tree<W: Write>(
    archive: &mut Archive<W>,
    dir: &Path,
    name: &str,
) -> Result<(), BackupError> {
    let fd =
        open_dir(AT_FDCWD, dir.as_os_str()).map_err(io(format!("reading {}", dir.display())))?;
    walk(archive, fd, dir, name)
}

fn walk<W: Write>(
    archive: &mut Archive<W>,
    dir: OwnedFd,
    path: &Path,
    name: &str,
) -> Result<(), BackupError> {
    let context = |what: &str| io(format!("{what} {}", path.display()));
    let metadata = std::fs::File::from(dir.try_clone().map_err(context("reading"))?)
        .metadata()
        .map_err(context("reading"))?;
    archive
        .directory(&metadata, name)
        .map_err(context("writing"))?;
    let volume_root = Place::of(relative(name)) == Place::VolumeDir;
    for entry in names(&dir).map_err(context("listing"))? {
        let Ok(file_name) = entry.to_str() else {
            tracing::warn!(dir = %path.display(), "backup: skipped a file whose name is not UTF-8");
            continue;
        };
        let child = format!("{name}/{file_name}");
        let child_path = path.join(file_name);
        let stat = match fstatat(&dir, entry.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::ENOENT) => continue,
            Err(error) => {
                return Err(io(format!("reading {}", child_path.display()))(
                    error.into(),
                ))
            }
        };
        let kind = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
        let place = Place::of(relative(&child));
        let result = match kind {
            SFlag::S_IFDIR if volume_root && file_name == "lost+found" => {
                // The volume filesystem's own (`mkfs.ext4` makes one again).
                Ok(())
            }
            SFlag::S_IFDIR => {
                // Held while the volume is read; `admin.rs` bounds how long a slow reader
                // of the archive can keep the app's writes waiting.
                let _frozen =
                    (place == Place::VolumeDir).then(|| crate::disk::Frozen::volume(&child_path));
                match open_dir(&dir, OsStr::from_bytes(entry.to_bytes())) {
                    Ok(sub) => walk(archive, sub, &child_path, &child).map_err(Some),
                    // Gone, or swapped for a link since it was listed.
                    Err(error) if vanished(&error) => Ok(()),
                    Err(error) => Err(error)
                        .map_err(|e| Some(io(format!("reading {}", child_path.display()))(e))),
                }
            }
            // Its contents are in the archive, read through its mount.
            SFlag::S_IFREG if place == Place::VolumeImage => Ok(()),
            SFlag::S_IFREG => regular(archive, &dir, &entry, &child).map_err(|error| {
                (!vanished(&error)).then(|| io(format!("reading {}", child_path.display()))(error))
            }),
            SFlag::S_IFLNK => match readlinkat(&dir, entry.as_c_str()) {
                Ok(target) => archive
                    .link(&stat, &child, Path::new(&target))
                    .map_err(|e| Some(io(format!("writing {}", child_path.display()))(e))),
                Err(Errno::ENOENT | Errno::EINVAL) => Ok(()),
                Err(error) => Err(Some(io(format!("reading {}", child_path.display()))(
                    error.into(),
                ))),
            },
            // Sockets, FIFOs and devices are no data to keep.
            _ => Ok(()),
        };
        match result {
            Ok(()) | Err(None) => {}
            Err(Some(error)) => return Err(error),
        }
    }
    Ok(())
}

/// Opens and archives one regular file; an entry that is no longer a regular file (swapped
/// for a link, a FIFO or a device since it was listed) is left out, as `NotFound`.
fn regular<W: Write>(
    archive: &mut Archive<W>,
    dir: &OwnedFd,
    entry: &CStr,
    name: &str,
) -> std::io::Result<()> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let file = std::fs::File::from(openat(dir, entry, flags, Mode::empty())?);
    if !file.metadata()?.is_file() {
        return Err(std::io::ErrorKind::NotFound.into());
    }
    archive.open_file(file, name)
}

/// Whether an error means the entry is gone or is not what was listed (skipped, not fatal).
fn vanished(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR)
    ) || error.kind() == std::io::ErrorKind::NotFound
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree a tenant made: links to a host file, to another project's data and to a
    /// directory outside, a FIFO, a socket-less special file; only what is its own is
    /// archived, links as links, and the walk neither follows nor hangs.
    #[test]
    fn links_are_kept_as_links_and_fifos_are_left_out() {
        let root = tempfile::tempdir().unwrap();
        let secret = root.path().join("other-project-secret");
        std::fs::write(&secret, "OTHER PROJECT SECRET").unwrap();
        let outside = root.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("host-file"), "HOST FILE").unwrap();
        let data = root.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("own.txt"), "own data").unwrap();
        std::os::unix::fs::symlink(&secret, data.join("to-secret")).unwrap();
        std::os::unix::fs::symlink(&outside, data.join("to-outside")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", data.join("to-host")).unwrap();
        nix::unistd::mkfifo(&data.join("pipe"), Mode::from_bits_truncate(0o600)).unwrap();

        let mut archive = Archive::new(Vec::new(), crate::backup::Manifest::default());
        tree(&mut archive, &data, "data/appdata/prj_x").unwrap();
        let files: Vec<&str> = archive
            .manifest
            .files
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(files, ["data/appdata/prj_x/own.txt"]);
        let links: Vec<(&str, &str)> = archive
            .manifest
            .links
            .iter()
            .map(|l| (l.path.as_str(), l.target.as_str()))
            .collect();
        assert_eq!(links.len(), 3, "{links:?}");
        let (bytes, _) = archive.finish().unwrap();
        for needle in ["OTHER PROJECT SECRET", "HOST FILE"] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "{needle} was followed into the archive"
            );
        }
    }
}
