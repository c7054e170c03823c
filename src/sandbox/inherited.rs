//! Adopting a file descriptor that the process was started with, by number: the listeners
//! systemd hands over through socket activation (`server::listeners` is the only caller).
//! It lives in `sandbox` because this is the one module allowed `unsafe`, and claiming
//! ownership of a bare fd number is an unsafe act.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// Every number adopted so far: a second claim on one would make two owners.
static ADOPTED: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

/// Takes ownership of the inherited descriptor `fd` (3 or above, open) and marks it
/// close-on-exec, so sandbox helpers and build commands never inherit a listener.
pub fn adopt_inherited_fd(fd: RawFd) -> std::io::Result<OwnedFd> {
    if fd < 3 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("fd {fd} is not an inherited descriptor (they start at 3)"),
        ));
    }
    let mut adopted = ADOPTED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if adopted.contains(&fd) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("fd {fd} was already taken"),
        ));
    }
    // SAFETY: F_GETFD/F_SETFD only read and set the descriptor's flags; an fd that is not
    // open fails with EBADF, which is returned.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    adopted.push(fd);
    // SAFETY: the fd is open (checked above), was handed to this process by its parent for
    // it to own (the caller checked LISTEN_PID), and is claimed at most once (ADOPTED).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
