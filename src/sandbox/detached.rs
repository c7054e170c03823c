//! Detached mount trees for the sandbox helper: a host path opened with `openat2` (`O_PATH`,
//! optionally refusing symlinks) and cloned with `open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`,
//! its attributes set with `mount_setattr`. A project directory that is a disk-limited
//! volume is cloned only from a descriptor on its limited filesystem. Used by
//! [`super::mounts::plan`]; the trees are attached inside the sandbox with `move_mount`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

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
    let resolve = if refuse_symlinks {
        libc::RESOLVE_NO_SYMLINKS
    } else {
        0
    };
    // SAFETY: open_how is plain data; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = resolve;
    // SAFETY: plain syscalls on a valid C string and a properly sized struct.
    let opened = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            &how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if opened < 0 {
        return Err(context(io::Error::last_os_error()));
    }
    // SAFETY: openat2 returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(opened as i32) })
}

/// A detached recursive clone of the mount `opened` is on, with `attributes` set.
fn clone_opened(opened: &OwnedFd, path: &Path, attributes: u64) -> io::Result<OwnedFd> {
    let context = with_path(path);
    let flags = libc::OPEN_TREE_CLONE
        | libc::O_CLOEXEC as u32
        | libc::AT_RECURSIVE as u32
        | libc::AT_EMPTY_PATH as u32;
    // SAFETY: as above.
    let tree =
        unsafe { libc::syscall(libc::SYS_open_tree, opened.as_raw_fd(), c"".as_ptr(), flags) };
    if tree < 0 {
        return Err(context(io::Error::last_os_error()));
    }
    // SAFETY: open_tree returned a new descriptor that nothing else owns.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let attr = libc::mount_attr {
        attr_set: attributes,
        attr_clr: 0,
        propagation: libc::MS_PRIVATE,
        userns_fd: 0,
    };
    // SAFETY: as above.
    let set = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_RECURSIVE,
            &attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if set < 0 {
        return Err(context(io::Error::last_os_error()));
    }
    Ok(tree)
}
