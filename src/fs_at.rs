//! Reading trees a project's code can change while the daemon, as root, walks them: through
//! directory descriptors opened with `O_NOFOLLOW`, so a symlink planted or swapped in is never
//! followed. Used by the pipeline's tree copies (`pipeline/tree.rs`) and the backup's walk
//! (`backup/walk.rs`).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

/// Opens the directory `name` under `parent`, refusing a symlink (`ELOOP`/`ENOTDIR`).
pub fn open_dir(parent: impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    Ok(openat(parent, name, flags, Mode::empty())?)
}

/// The names in a directory, sorted, without `.` and `..`.
pub fn names(dir: &OwnedFd) -> io::Result<Vec<CString>> {
    let mut listing = nix::dir::Dir::from_fd(dir.try_clone()?)?;
    let mut names = Vec::new();
    for entry in listing.iter() {
        let name = entry?.file_name().to_owned();
        if name.as_bytes() != b"." && name.as_bytes() != b".." {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}
