//! Detached mount trees for the sandbox helper: a host path opened with `openat2` (`O_PATH`,
//! optionally refusing symlinks) and cloned with `open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`,
//! its attributes set with `mount_setattr`. A project directory that is a disk-limited
//! volume is cloned only from a descriptor on its limited filesystem. Used by
//! [`super::mounts::plan`]; the trees are attached inside the sandbox with `move_mount`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag, AT_FDCWD};

use super::LimitedDir;

/// Clones a project directory (no symlink on its path is followed). A disk-limited one is
/// cloned only if the descriptor the clone is made from is on its limited filesystem: the
/// check and the clone see the same mount, whatever the helper's mount namespace holds.
pub(crate) fn clone_project_dir(
    path: &Path,
    attributes: u64,
    limited: &[LimitedDir],
) -> io::Result<OwnedFd> {
    let opened = open_path(path, true)?;
    if let Some(limited) = limited.iter().find(|limited| limited.path == path) {
        let found = nix::sys::stat::fstat(&opened).map_err(io::Error::from)?;
        limited.check(found.st_dev)?;
    }
    clone_opened(&opened, path, attributes)
}

/// Clones a host path as a detached mount tree with the given attributes set.
pub(crate) fn clone_tree(
    path: &Path,
    attributes: u64,
    refuse_symlinks: bool,
) -> io::Result<OwnedFd> {
    let opened = open_path(path, refuse_symlinks)?;
    clone_opened(&opened, path, attributes)
}

fn with_path(path: &Path) -> impl Fn(io::Error) -> io::Error + '_ {
    move |error| io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}

/// An `O_PATH` descriptor of `path` (openat2, optionally refusing symlinks anywhere on it).
fn open_path(path: &Path, refuse_symlinks: bool) -> io::Result<OwnedFd> {
    let context = with_path(path);
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let resolve = match refuse_symlinks {
        true => ResolveFlag::RESOLVE_NO_SYMLINKS,
        false => ResolveFlag::empty(),
    };
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(resolve);
    openat2(AT_FDCWD, c_path.as_c_str(), how).map_err(|errno| context(errno.into()))
}

/// A detached recursive clone of the mount `opened` is on, with `attributes` set.
fn clone_opened(opened: &OwnedFd, path: &Path, attributes: u64) -> io::Result<OwnedFd> {
    let context = with_path(path);
    let tree = crate::sys::mount::clone_tree(opened.as_fd()).map_err(&context)?;
    crate::sys::mount::set_private_with(tree.as_fd(), attributes).map_err(&context)?;
    Ok(tree)
}
