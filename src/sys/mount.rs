//! Detached mount trees (the new mount API, Linux 5.12+), which `nix` does not offer:
//! cloning the mount under a descriptor, setting its attributes, attaching it elsewhere.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A detached recursive clone of the mount tree `opened` (an `O_PATH` descriptor) is on
/// (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`), close-on-exec.
pub fn clone_tree(opened: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let flags = libc::OPEN_TREE_CLONE
        | libc::O_CLOEXEC as u32
        | libc::AT_RECURSIVE as u32
        | libc::AT_EMPTY_PATH as u32;
    // SAFETY: a plain syscall on a borrowed descriptor and a valid, empty C string.
    let tree =
        unsafe { libc::syscall(libc::SYS_open_tree, opened.as_raw_fd(), c"".as_ptr(), flags) };
    if tree < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open_tree returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(tree as i32) })
}

/// Sets `attributes` (`MOUNT_ATTR_*`) on every mount of the detached tree `tree` and makes
/// them private (`mount_setattr(AT_RECURSIVE)`).
pub fn set_private_with(tree: BorrowedFd<'_>, attributes: u64) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: attributes,
        attr_clr: 0,
        propagation: libc::MS_PRIVATE,
        userns_fd: 0,
    };
    // SAFETY: a plain syscall on a borrowed descriptor, a valid C string and a properly
    // sized struct the kernel only reads.
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
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Attaches the detached tree `tree` at `target` (relative to the working directory),
/// which must exist (`move_mount(MOVE_MOUNT_F_EMPTY_PATH)`).
pub fn attach(tree: BorrowedFd<'_>, target: &CStr) -> io::Result<()> {
    // SAFETY: a plain syscall on a borrowed descriptor and valid C strings.
    let moved = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
